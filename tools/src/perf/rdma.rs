//! The RDMA side of `rnic perf`: one side's device, QPs and buffer, and the loops that
//! post work and measure (the initiator), answer (the ponger of latency tests) or receive
//! (the SEND target). The same code runs in one process (`--loopback`) and in two.
//!
//! Buffer layout of each side's one memory region:
//! ```text
//! [0, nbuf * max_size)             target area: the peer WRITEs / SENDs land here, READs read from here
//! [nbuf * max_size, + max_size)    local area: WRITE / SEND source, READ destination
//! ```

use super::ctrl::Params;
use super::{Progress, Test, TestKind};
use rnic_verbs::hop_trace::{self, Step};
use rnic_verbs::DeviceConfig;
use rnic_verbs::SendFlags;
use rnic_verbs::{
    AccessFlags, AddressHandle, CompChannel, CompletionQueue, Context, Endpoint, MemoryRegion, PathMtu, PreparedQp,
    ProtectionDomain, QpCap, QueuePair, RecvWrRef, RemoteMr, SendOp, SendWr, UdDest, WcStatus, WorkCompletion,
};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Receive buffers of the SEND target share at most this much memory.
const RECV_MEMORY: usize = 64 << 20;
/// A side gives up when nothing moves for this long.
const STALL: Duration = Duration::from_secs(30);
/// UD: the Q_Key both sides use (ibv_ud_pingpong's and perftest's).
const UD_QKEY: u32 = 0x1111_1111;
/// UD: the 40-byte GRH area at the start of every receive buffer (as rxe fills it; see
/// rnic-core/src/engine/ud.rs).
const GRH: usize = 40;
/// UD: once the sender is done, the target waits this long without an arrival before
/// it counts the missing messages as lost.
const UD_QUIET: Duration = Duration::from_millis(300);

/// A deterministic byte pattern for messages of `len` bytes (its seed is the size, so a
/// stale message of another size does not pass).
pub fn pattern(len: usize) -> Vec<u8> {
    crate::demo::pattern(u32::try_from(len & 0xffff_ffff).unwrap_or(0), len)
}

/// Which device a side runs on, when not the default emulated one at its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DevSel {
    /// A device by name (hardware, or from RNIC_DEVICES): `-d NAME`.
    Named(String),
    /// The emulated device on raw Ethernet on this interface: `--netdev IFACE`.
    Netdev(String),
}

/// One side of the test.
#[derive(Debug)]
pub struct Side {
    /// The device.
    pub ctx: Context,
    /// The path MTU its QPs use, in bytes.
    pub mtu: u32,
    scq: CompletionQueue,
    rcq: CompletionQueue,
    /// With -e: both CQs report to this channel and empty polls sleep on it.
    channel: Option<CompChannel>,
    mr: MemoryRegion,
    prepared: Vec<PreparedQp>,
    qps: Vec<QueuePair>,
    remote: Option<RemoteMr>,
    max_size: usize,
    nbuf: usize,
    slots: usize,
    /// UC and UD: a send completes when it leaves, not when it lands.
    uc: bool,
    /// UD: the GRH area before each received message (0 otherwise).
    grh: usize,
    /// UD: QP *i* sends to the peer's QP *i* through this (empty otherwise).
    dests: Vec<UdDest>,
    /// UD: the address handles behind `dests`, and the PD that makes them.
    ahs: Vec<AddressHandle>,
    pd: ProtectionDomain,
    /// -R: the CM port, and the connections made through it.
    cm_port: Option<u16>,
    conns: Vec<u32>,
}

impl Side {
    /// Opens emulated device `name` at `ip` (over UDP, or raw Ethernet on an interface),
    /// or the device named by `dev` (hardware or configured), and creates the QPs and
    /// buffer `params` ask for.
    pub fn open(name: &str, ip: IpAddr, dev: Option<&DevSel>, params: &Params) -> Result<Side, String> {
        let ctx = match dev {
            Some(DevSel::Named(d)) => Context::open(d),
            _ => {
                let mut cfg = DeviceConfig::new(name, ip);
                if let Some(DevSel::Netdev(n)) = dev {
                    cfg.netdev = Some(n.clone());
                }
                // Benchmarks register up to 2 x 64 MiB + 8 MiB; pinning that would need a
                // large RLIMIT_MEMLOCK and changes nothing per packet.
                cfg.pin_memory = false;
                Context::open_with(cfg)
            }
        }
        .map_err(|e| rnic_verbs::report(&e))?;
        let pd = ctx.alloc_pd().map_err(|e| rnic_verbs::report(&e))?;
        let q = params.qps as usize;
        let max_size = usize::try_from(params.sizes.iter().copied().max().unwrap_or(1).max(1))
            .map_err(|_| "message size too large".to_string())?;
        let test = Test::parse(&params.test).ok_or_else(|| format!("unknown test {}", params.test))?;
        let grh = if params.ud { GRH } else { 0 };
        // Receive slots hold a message after the GRH area (UD); the local area follows.
        let stride = max_size + grh;
        let (nbuf, slots) = if test.kind == TestKind::Send {
            let nbuf = (RECV_MEMORY / stride).clamp(1, q * params.rx_depth as usize);
            (nbuf, (params.rx_depth as usize).min(nbuf.div_ceil(q).max(1)).max(1))
        } else {
            (1, 0)
        };
        let depth = (q * (params.tx_depth as usize + slots) + 64).min(1 << 20);
        let channel =
            if params.events { Some(ctx.create_comp_channel().map_err(|e| rnic_verbs::report(&e))?) } else { None };
        let cq = |d| match &channel {
            Some(ch) => ctx.create_cq_with_channel(d, ch),
            None => ctx.create_cq(d),
        };
        let scq = cq(depth).map_err(|e| rnic_verbs::report(&e))?;
        let rcq = cq(depth).map_err(|e| rnic_verbs::report(&e))?;
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let mr = pd.allocate_mr(nbuf * stride + max_size, access).map_err(|e| rnic_verbs::report(&e))?;
        let mut mtu = PathMtu::from_bytes(params.mtu).ok_or_else(|| format!("-m {}: not a path MTU", params.mtu))?;
        if params.mtu_auto {
            // perftest's default: the port's active MTU (rxe on a 1500-byte link: 1024).
            let active = ctx.query_port().map_err(|e| rnic_verbs::report(&e))?.active_mtu;
            mtu = mtu.min(active);
        }
        if params.ud && max_size > mtu.bytes() as usize {
            return Err(format!(
                "-s {max_size}: a UD message is one packet, at most the path MTU ({}, {}'s active MTU; -m sets it)",
                mtu.bytes(),
                ctx.name()
            ));
        }
        let cap = QpCap {
            max_send_wr: params.tx_depth,
            max_recv_wr: params.rx_depth.max(1),
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: params.inline,
        };
        let mut prepared = Vec::with_capacity(q);
        for _ in 0..q {
            let b = pd.qp_builder(&scq, &rcq).cap(cap).mtu(mtu);
            let b = if params.ud {
                b.qp_type(rnic_verbs::QpType::Ud).qkey(UD_QKEY)
            } else if params.uc {
                b.qp_type(rnic_verbs::QpType::Uc).access(AccessFlags::REMOTE_WRITE)
            } else {
                b.access(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC)
                    .max_rd_atomic(16)
                    .max_dest_rd_atomic(16)
            };
            prepared.push(b.build().map_err(|e| rnic_verbs::report(&e))?);
        }
        Ok(Side {
            ctx,
            scq,
            rcq,
            channel,
            mr,
            prepared,
            qps: Vec::new(),
            cm_port: params.cm_port,
            conns: Vec::new(),
            remote: None,
            max_size,
            nbuf,
            slots,
            uc: params.uc || params.ud,
            grh,
            dests: Vec::new(),
            ahs: Vec::new(),
            pd,
            mtu: mtu.bytes(),
        })
    }

    /// The interface of a raw-Ethernet side (`--netdev`), recorded for the raw baseline.
    pub fn netdev(&self) -> Option<String> {
        self.ctx.interface().map(|i| i.name.clone())
    }

    /// With -e, after a poll found nothing: arm `cq`, and unless a completion slipped in
    /// before the arm, sleep until the channel's event (`ibv_req_notify_cq`,
    /// `ibv_get_cq_event`, `ibv_ack_cq_events`). Returns false without -e.
    fn sleep_on(&self, cq: &CompletionQueue) -> Result<bool, String> {
        let Some(ch) = &self.channel else { return Ok(false) };
        cq.req_notify(false).map_err(|e| rnic_verbs::report(&e))?;
        if cq.is_empty() {
            // A bounded sleep: the callers' stall checks still run.
            if let Ok(got) = ch.get_cq_event(Duration::from_millis(100)) {
                got.ack_events(1).map_err(|e| rnic_verbs::report(&e))?;
            }
        }
        Ok(true)
    }

    /// The endpoints to send to the peer.
    pub fn endpoints(&self) -> Vec<Endpoint> {
        self.prepared.iter().map(PreparedQp::endpoint).collect()
    }

    /// What the peer may RDMA into: the target area.
    pub fn remote_mr(&self) -> RemoteMr {
        let mut r = self.mr.remote();
        r.len = (self.nbuf * self.stride()) as u64;
        r
    }

    /// Connects QP *i* to the peer's QP *i*, and pre-posts the receives of a SEND test.
    pub fn connect(&mut self, peer: &[Endpoint], mr: RemoteMr, active: bool) -> Result<(), String> {
        if peer.len() != self.prepared.len() {
            return Err(format!("the peer has {} QPs, this side {}", peer.len(), self.prepared.len()));
        }
        if let Some(port) = self.cm_port {
            // -R: each QP through the CM, the client's i-th REQ accepted with the server's
            // i-th QP (the PSNs and QP numbers come from the REQ and REP).
            let wait = std::time::Duration::from_secs(60);
            for (p, ep) in self.prepared.drain(..).zip(peer) {
                let conn = if active {
                    self.ctx.cm_connect(p, ep.gid.to_ip(), port, &[], wait).map_err(|e| rnic_verbs::report(&e))?
                } else {
                    let req = loop {
                        match self.ctx.cm_get_event(wait).map_err(|e| format!("-R: waiting for a REQ: {e}"))? {
                            rnic_verbs::CmEvent::ConnectRequest(r) => break r,
                            _ => continue,
                        }
                    };
                    self.ctx.cm_accept(&req, p, &[]).map_err(|e| rnic_verbs::report(&e))?
                };
                self.qps.push(conn.qp);
                self.conns.push(conn.id);
            }
        }
        for (p, ep) in self.prepared.drain(..).zip(peer) {
            if self.grh > 0 {
                // UD: no connection; every send names the peer's QP through an AH.
                self.qps.push(p.activate().map_err(|e| rnic_verbs::report(&e))?);
                let ah = self.pd.create_ah(ep.gid).map_err(|e| rnic_verbs::report(&e))?;
                self.dests.push(ah.dest(ep.qpn, UD_QKEY));
                self.ahs.push(ah);
            } else {
                self.qps.push(p.connect(ep).map_err(|e| rnic_verbs::report(&e))?);
            }
        }
        self.remote = Some(mr);
        for (qi, qp) in self.qps.iter().enumerate() {
            for s in 0..self.slots {
                post_recv(qp, &self.mr, self.slot_offset(qi, s), self.stride(), ((qi as u64) << 32) | s as u64)?;
            }
        }
        Ok(())
    }

    /// The peer's IP address.
    pub fn peer_ip(&self, peer: &[Endpoint]) -> Option<IpAddr> {
        peer.first().map(|e| e.gid.to_ip())
    }

    /// Bytes per receive slot: the largest message, after the GRH area under UD.
    fn stride(&self) -> usize {
        self.max_size + self.grh
    }

    /// Where receive slot `slot` of QP `qp` starts (a UD message lands `grh` further).
    fn slot_offset(&self, qp: usize, slot: usize) -> usize {
        ((qp * self.slots + slot) % self.nbuf) * self.stride()
    }

    fn local_offset(&self) -> usize {
        self.nbuf * self.stride()
    }

    /// Fills the buffers for a run of `size`-byte messages: the source with the pattern
    /// and the destination with zeros, so that only a transfer can make it verify.
    pub fn prepare(&self, kind: TestKind, size: usize) -> Result<(), String> {
        let pat = pattern(size);
        let zero = vec![0u8; size];
        let w = |off: usize, b: &[u8]| self.mr.write(off, b).map_err(|e| rnic_verbs::report(&e));
        if kind == TestKind::Read {
            w(0, &pat)?;
            w(self.local_offset(), &zero)?;
        } else if kind == TestKind::Atomic {
            // The peer's FETCH_ADDs count up from zero in the target's first 8 bytes.
            w(0, &[0; 8])?;
            w(self.local_offset(), &[0xff; 8])?;
        } else {
            w(self.local_offset(), &pat)?;
            for b in 0..self.nbuf {
                w(b * self.stride() + self.grh, &zero)?;
            }
        }
        Ok(())
    }

    /// Checks the data this side received in a run of `size`-byte messages (`last`: the
    /// receive slot of the last SEND, the tag of the last latency message).
    pub fn verify(&self, kind: TestKind, size: usize, last: Option<(usize, u8)>) -> Result<(), String> {
        if !self.uc {
            return self.verify_now(kind, size, last);
        }
        // UC has no acknowledgement: the writer's last completion only says the message
        // left. Give it a second to land; if it never does, it was lost, and nothing on
        // UC retransmits it.
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        loop {
            match self.verify_now(kind, size, last) {
                Ok(()) => return Ok(()),
                Err(e) if std::time::Instant::now() >= deadline => {
                    return Err(format!("{e} (UC: a lost message is not retransmitted)"))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }

    fn verify_now(&self, kind: TestKind, size: usize, last: Option<(usize, u8)>) -> Result<(), String> {
        let pat = pattern(size);
        let (off, what) = match (kind, last) {
            (TestKind::Read, _) => (self.local_offset(), "READ destination"),
            (TestKind::Send, Some((slot, _))) => (slot + self.grh, "last received SEND"),
            (TestKind::Send, None) => return Err("no SEND was received".into()),
            _ => (0, "WRITE target"),
        };
        let mut got = vec![0u8; size];
        self.mr.read(off, &mut got).map_err(|e| rnic_verbs::report(&e))?;
        let mut want = pat;
        if let Some((_, tag)) = last {
            if let Some(b) = want.last_mut() {
                *b = tag; // latency tests carry the iteration's tag in the last byte
            }
        }
        match got.iter().zip(&want).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(i) => Err(format!("{what}: byte {i} of {size} is {:#04x}, expected {:#04x}", got[i], want[i])),
        }
    }

    fn read_u64(&self, off: usize) -> Result<u64, String> {
        let mut b = [0u8; 8];
        self.mr.read(off, &mut b).map_err(|e| rnic_verbs::report(&e))?;
        // RDMA atomics act on the responder's 64-bit words in its own byte order.
        Ok(u64::from_ne_bytes(b))
    }

    /// Atomics, target side: the peer's `count` FETCH_ADDs of 1 left exactly `count`.
    pub fn verify_counter(&self, count: u64) -> Result<(), String> {
        match self.read_u64(0)? {
            v if v == count => Ok(()),
            v => Err(format!("atomic counter is {v} after {count} FETCH_ADDs")),
        }
    }

    /// Atomics, initiator side: the last FETCH_ADD returned the counter before it: with
    /// one QP (in order, IBA 9.7.1) `count - 1`, else some value below `count`.
    pub fn verify_fetched(&self, count: u64, in_order: bool) -> Result<(), String> {
        let v = self.read_u64(self.local_offset())?;
        let ok = if in_order { count > 0 && v == count - 1 } else { v < count };
        if ok {
            Ok(())
        } else {
            Err(format!("the last FETCH_ADD of {count} returned {v}"))
        }
    }

    fn wr(&self, kind: TestKind, size: usize, wr_id: u64, signaled: bool, inline: bool) -> SendWr {
        let r = self.remote.unwrap_or(RemoteMr { addr: 0, rkey: 0, len: 0 });
        // Sizes are checked to be at most 2^30 when the options are parsed.
        let sge = self.mr.sge(self.local_offset(), u32::try_from(size).unwrap_or(u32::MAX));
        let op = match kind {
            TestKind::Write => SendOp::RdmaWrite { remote_addr: r.addr, rkey: r.rkey },
            TestKind::Read => SendOp::RdmaRead { remote_addr: r.addr, rkey: r.rkey },
            TestKind::Atomic => SendOp::AtomicFetchAdd { remote_addr: r.addr, rkey: r.rkey, add: 1 },
            _ => SendOp::Send,
        };
        let mut wr = SendWr::new(wr_id, op, vec![sge]);
        wr.ud = self.dests.first().copied();
        wr.flags.set(SendFlags::SIGNALED, signaled);
        wr.flags.set(SendFlags::INLINE, inline && !one_sided_in(kind));
        wr
    }
}

/// READ and atomics: the data comes back to the initiator; the responder's CPU does nothing.
fn one_sided_in(kind: TestKind) -> bool {
    matches!(kind, TestKind::Read | TestKind::Atomic)
}

fn post_recv(qp: &QueuePair, mr: &MemoryRegion, off: usize, len: usize, wr_id: u64) -> Result<(), String> {
    let len = u32::try_from(len).map_err(|_| format!("receive buffer of {len} bytes too large"))?;
    // A one-SGE list on the stack, as perftest reuses its work requests: nothing is
    // allocated per receive.
    let sge = [mr.sge(off, len)];
    qp.post_recv(RecvWrRef { wr_id, sg_list: &sge }).map_err(|e| rnic_verbs::report(&e))
}

fn check_wc(wc: &WorkCompletion) -> Result<(), String> {
    if wc.status == WcStatus::Success {
        Ok(())
    } else {
        Err(format!("work completion {} on QP {:#x} (wr_id {:#x})", wc.status, wc.qp_num, wc.wr_id))
    }
}

/// Waiting for completions in a bandwidth test, busy polling as perftest does: the
/// polling thread runs the device's rounds itself ([`Context::progress`]), so that a
/// 2-CPU machine holds one busy thread per device (this one, and the peer's) rather
/// than an application thread spinning beside a progress thread that needs its CPU.
/// After `NAP_AFTER` polls in a row with neither a completion nor device work (some tens
/// of microseconds: the window is full and the ACKs are not back), it naps between polls,
/// so that the CPU goes to whoever must run for the ACKs to come (the peer device's
/// thread), not to this spin. Beside a CPU-bound process that made the difference
/// between 0.15 and 0.45 of the UDP baseline for `write_bw -s 65536` (5000 polls, a few
/// milliseconds, before: the poller and the other process held both CPUs while the peer's
/// thread waited); on a quiet machine it costs nothing measurable. Counted, not timed: a
/// clock read costs about as much as a poll's user-space work.
struct Idle(u32);

const NAP_AFTER: u32 = 256;

impl Idle {
    fn new() -> Idle {
        Idle(0)
    }
    fn reset(&mut self) {
        self.0 = 0;
    }
    /// Whether to look at the clock for the stall check now: when napping, or every
    /// 1024th empty poll.
    fn check_due(&self) -> bool {
        self.0 >= NAP_AFTER || self.0 % 1024 == 1023
    }
    fn wait(&mut self, ctx: &Context) {
        if ctx.progress() {
            self.reset();
        } else if self.0 < NAP_AFTER {
            self.0 += 1;
            std::hint::spin_loop();
        } else {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

/// What an initiator measured.
#[derive(Debug, Clone, Default)]
pub struct BwRun {
    /// Work requests completed.
    pub count: u64,
    /// First post to last completion.
    pub secs: f64,
    /// Best rate over a window of a sixteenth of the run, in work requests per second.
    pub peak_wr_per_sec: f64,
}

/// Bandwidth initiator: keeps `tx_depth` work requests in flight on every QP, signals
/// every `cq_mod`-th, until `iters` per QP (or `duration`) are done.
pub fn initiator_bw(side: &Side, p: &Params, kind: TestKind, size: usize, progress: bool) -> Result<BwRun, String> {
    let nq = side.qps.len();
    let duration = p.duration.map(Duration::from_secs_f64);
    let total = p.iters * nq as u64;
    let (tx_depth, cq_mod) = (u64::from(p.tx_depth), u64::from(p.cq_mod.max(1)));
    let inline = size <= p.inline as usize;
    #[derive(Clone, Copy, Default)]
    struct St {
        posted: u64,
        outstanding: u64,
        since_sig: u64,
    }
    let mut st = vec![St::default(); nq];
    let mut wcs = vec![WorkCompletion::new(0, WcStatus::Success, rnic_verbs::WcOpcode::Send, 0); 256];
    let mut samples: Vec<(f64, u64)> = Vec::with_capacity(4096);
    let mut done = 0u64;
    let mut bar = Progress::new(progress, duration, total);
    let start = Instant::now();
    let mut last_move = start;
    let mut idle = Idle::new();
    let mut stopping = false;
    // One work request, re-used: only its id and signaled flag change per post.
    let mut wr = side.wr(kind, size, 0, false, inline);
    let mut post = |qi: usize, wr_id: u64, sig: bool| {
        wr.wr_id = wr_id;
        wr.flags.set(SendFlags::SIGNALED, sig);
        if let Some(d) = side.dests.get(qi) {
            wr.ud = Some(*d);
        }
        side.qps[qi].post_send(&wr).map_err(|e| rnic_verbs::report(&e))
    };
    let mut turns = 0u32;
    loop {
        turns = turns.wrapping_add(1);
        if let Some(d) = duration {
            // Every 64th turn: a clock read costs about what a turn's own work does.
            if turns % 64 == 0 {
                stopping |= start.elapsed() >= d;
            }
        }
        for (qi, s) in st.iter_mut().enumerate() {
            let more = |s: &St| if duration.is_some() { !stopping } else { s.posted < p.iters };
            while s.outstanding < tx_depth && more(s) {
                let last = duration.is_none() && s.posted + 1 == p.iters;
                let sig = s.since_sig + 1 >= cq_mod || last;
                let wr_id = ((qi as u64) << 32) | (s.since_sig + 1);
                post(qi, wr_id, sig)?;
                s.posted += 1;
                s.outstanding += 1;
                s.since_sig = if sig { 0 } else { s.since_sig + 1 };
            }
            if stopping && s.since_sig > 0 && s.outstanding < tx_depth {
                // Time is up: one last signaled request retires the unsignaled tail.
                let wr_id = ((qi as u64) << 32) | (s.since_sig + 1);
                post(qi, wr_id, true)?;
                s.posted += 1;
                s.outstanding += 1;
                s.since_sig = 0;
            }
        }
        let n = side.scq.poll(&mut wcs).map_err(|e| rnic_verbs::report(&e))?;
        if n > 0 {
            for wc in &wcs[..n] {
                check_wc(wc)?;
                let qi = (wc.wr_id >> 32) as usize;
                let k = wc.wr_id & 0xffff_ffff;
                if let Some(s) = st.get_mut(qi) {
                    s.outstanding = s.outstanding.saturating_sub(k);
                }
                done += k;
            }
            last_move = Instant::now();
            idle.reset();
            samples.push((start.elapsed().as_secs_f64(), done));
            bar.tick(done);
        } else {
            if idle.check_due() && last_move.elapsed() > STALL {
                return Err(format!("no completion for {} s ({done} of {total} done)", STALL.as_secs()));
            }
            if !side.sleep_on(&side.scq)? {
                idle.wait(&side.ctx);
            }
        }
        let finished = match duration {
            None => done >= total,
            Some(_) => stopping && st.iter().all(|s| s.outstanding == 0),
        };
        if finished {
            break;
        }
    }
    bar.finish();
    let secs = start.elapsed().as_secs_f64();
    Ok(BwRun { count: done, secs, peak_wr_per_sec: peak(&samples, done) })
}

/// The best rate over any window of at least a sixteenth of the completions.
fn peak(samples: &[(f64, u64)], total: u64) -> f64 {
    let w = (total / 16).max(1);
    let mut best: f64 = 0.0;
    let mut i = 0;
    for j in 0..samples.len() {
        while i + 1 < j && samples[j].1 - samples[i + 1].1 >= w {
            i += 1;
        }
        let (dc, dt) = (samples[j].1.saturating_sub(samples[i].1), samples[j].0 - samples[i].0);
        if dc >= w && dt > 0.0 {
            best = best.max(dc as f64 / dt);
        }
    }
    if best == 0.0 {
        if let Some(&(t, c)) = samples.last() {
            if t > 0.0 {
                best = c as f64 / t;
            }
        }
    }
    best
}

/// Past its first `nbuf` messages, the SEND target checks the bytes of one in this many.
const CHECK_EVERY: u64 = 64;

/// SEND target: counts and checks the received messages (every one's length; the first
/// and last 8 bytes of each of the first `nbuf`, as many as there are receive buffers,
/// then of one in `CHECK_EVERY`), re-posting each receive at once, until `target` messages
/// arrived. Returns the slot offset of the last one, for the full check.
///
/// UD has no retransmission: a datagram that finds no receive posted is dropped (IBA
/// 9.9.3 class D, rxe check_resource). Once the sender is done, a UD target that sees
/// nothing arrive for `UD_QUIET` stops and stores the number missing in `lost`.
pub fn target_send(
    side: &Side,
    size: usize,
    target: &AtomicU64,
    abort: &AtomicBool,
    lost: &AtomicU64,
) -> Result<Option<usize>, String> {
    let pat = pattern(size);
    let edge = size.min(8);
    let mut wcs = vec![WorkCompletion::new(0, WcStatus::Success, rnic_verbs::WcOpcode::Recv, 0); 256];
    let mut got = 0u64;
    let mut last = None;
    let mut last_move = Instant::now();
    let mut idle = Idle::new();
    let mut head = vec![0u8; edge];
    let mut tail = vec![0u8; edge];
    while got < target.load(Ordering::Acquire) {
        if abort.load(Ordering::Acquire) {
            return Err("aborted".into());
        }
        let n = side.rcq.poll(&mut wcs).map_err(|e| rnic_verbs::report(&e))?;
        if n == 0 {
            let want = target.load(Ordering::Acquire);
            if side.grh > 0 && want != u64::MAX && idle.check_due() && last_move.elapsed() > UD_QUIET {
                lost.store(want.saturating_sub(got), Ordering::Release);
                if got == 0 {
                    return Err(format!("UD: none of {want} SENDs arrived"));
                }
                break;
            }
            if idle.check_due() && last_move.elapsed() > STALL {
                return Err(format!("no SEND arrived for {} s ({got} received)", STALL.as_secs()));
            }
            if !side.sleep_on(&side.rcq)? {
                idle.wait(&side.ctx);
            }
            continue;
        }
        last_move = Instant::now();
        idle.reset();
        for wc in &wcs[..n] {
            check_wc(wc)?;
            // UD: byte_len counts the 40-byte GRH area too (as rxe reports it).
            if wc.byte_len as usize != size + side.grh {
                return Err(format!("a SEND of {} bytes arrived, expected {}", wc.byte_len, size + side.grh));
            }
            let qi = (wc.wr_id >> 32) as usize;
            let off = side.slot_offset(qi, (wc.wr_id & 0xffff_ffff) as usize);
            // The buffers start zeroed, so a message landing in one for the first time
            // proves its transfer; once as many messages as buffers have come, most land
            // on bytes an earlier message left, and one in CHECK_EVERY is checked (for a
            // misplaced write), not every one: the check is the tool's work, not the
            // device's, and at 64 bytes it cost ~4% of the receiving thread.
            if got < side.nbuf as u64 || got % CHECK_EVERY == 0 {
                let data = off + side.grh;
                side.mr.read(data, &mut head).map_err(|e| rnic_verbs::report(&e))?;
                side.mr.read(data + size - edge, &mut tail).map_err(|e| rnic_verbs::report(&e))?;
                if head[..] != pat[..edge] || tail[..] != pat[size - edge..] {
                    return Err(format!("SEND {got}: its first/last bytes differ from what was sent"));
                }
            }
            last = Some(off);
            got += 1;
            let qp = side.qps.get(qi).ok_or("completion for an unknown QP")?;
            post_recv(qp, &side.mr, off, side.stride(), wc.wr_id)?;
        }
    }
    Ok(last)
}

fn tag(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

/// What a latency loop returns: the round trips (pinger) and the last message received
/// (its offset and tag), for the data check.
pub type LatRun = (Vec<Duration>, Option<(usize, u8)>);

/// Latency: the pinging side (`pinger`) measures round trips; the other answers every
/// message, until `target` (set when the pinger says how many it sent) is reached.
/// WRITE: the receiver spins on the last byte of its target area; SEND: on its receive
/// CQ; READ: only the pinger works. Returns the round trips (pinger) and the last tag.
pub fn latency(
    side: &Side,
    p: &Params,
    kind: TestKind,
    size: usize,
    pinger: bool,
    target: &AtomicU64,
    progress: bool,
) -> Result<LatRun, String> {
    let qp = side.qps.first().ok_or("no QP")?;
    let duration = p.duration.map(Duration::from_secs_f64);
    let inline = size <= p.inline as usize;
    let mut rtts = Vec::with_capacity(usize::try_from(p.iters.min(1 << 24)).unwrap_or(0));
    let mut wcs = vec![WorkCompletion::new(0, WcStatus::Success, rnic_verbs::WcOpcode::Send, 0); 64];
    let mut outstanding = 0u64;
    let mut last = None;
    let mut bar = Progress::new(progress && pinger, duration, p.iters);
    let start = Instant::now();
    let local = side.local_offset();
    let mut byte = [0u8; 1];
    // Retires send completions; waits for one when the send queue is full.
    let mut reap = |outstanding: &mut u64, must: bool| -> Result<(), String> {
        loop {
            let n = side.scq.poll(&mut wcs).map_err(|e| rnic_verbs::report(&e))?;
            for wc in &wcs[..n] {
                check_wc(wc)?;
            }
            *outstanding -= (n as u64).min(*outstanding);
            if !must || *outstanding < u64::from(p.tx_depth) {
                return Ok(());
            }
            // -e: sleep on the send CQ; else drive the device, or yield if nothing to do.
            let worked = side.sleep_on(&side.scq)? || (side.channel.is_none() && side.ctx.progress());
            if !worked {
                std::thread::yield_now();
            }
        }
    };
    let mut i = 0u64;
    // One work request, re-used: only its id changes per message.
    let mut wr = side.wr(kind, size, 0, true, inline);
    let mut repost = None;
    let mut idle_rounds = 0u32;
    loop {
        if pinger {
            match duration {
                Some(d) if start.elapsed() >= d => break,
                None if i >= p.iters => break,
                _ => {}
            }
        } else if i >= target.load(Ordering::Acquire) {
            break;
        }
        let t = tag(i);
        let t0 = Instant::now();
        let send = |outstanding: &mut u64, wr: &mut SendWr| -> Result<(), String> {
            if !one_sided_in(kind) {
                side.mr.write(local + size - 1, &[t]).map_err(|e| rnic_verbs::report(&e))?;
            }
            wr.wr_id = i;
            qp.post_send(wr).map_err(|e| rnic_verbs::report(&e))?;
            hop_trace::mark(Step::Posted);
            *outstanding += 1;
            if side.channel.is_none() {
                side.ctx.progress();
            }
            hop_trace::mark(Step::RoundTail);
            hop_trace::stop();
            Ok(())
        };
        // Waits for the peer's message `t` (or, for READ, this side's completion).
        // A SEND's receive is posted again after the answer is on its way (or the round
        // trip timed): the next message is a round trip away, and the post stays off
        // the measured path.
        let wait = |outstanding: &mut u64,
                    byte: &mut [u8; 1],
                    last: &mut Option<(usize, u8)>,
                    repost: &mut Option<u64>|
         -> Result<bool, String> {
            let mut polls = 0u64;
            loop {
                // Drive the device from this thread when its progress thread is not
                // running a round: no hand-off between the packet and this poll.
                if side.channel.is_none() {
                    side.ctx.progress();
                }
                match kind {
                    TestKind::Write => {
                        side.mr.read(size - 1, byte).map_err(|e| rnic_verbs::report(&e))?;
                        if byte[0] == t {
                            hop_trace::seen();
                            *last = Some((0, t));
                            return Ok(true);
                        }
                    }
                    TestKind::Send => {
                        if let Some(wc) = side.rcq.poll_one().map_err(|e| rnic_verbs::report(&e))? {
                            check_wc(&wc)?;
                            if wc.byte_len as usize != size + side.grh {
                                return Err(format!(
                                    "a SEND of {} bytes arrived, expected {}",
                                    wc.byte_len,
                                    size + side.grh
                                ));
                            }
                            let off = side.slot_offset(0, (wc.wr_id & 0xffff_ffff) as usize);
                            side.mr.read(off + side.grh + size - 1, byte).map_err(|e| rnic_verbs::report(&e))?;
                            if byte[0] != t {
                                return Err(format!("message {i}: tag {:#04x}, expected {t:#04x}", byte[0]));
                            }
                            hop_trace::seen();
                            *last = Some((off, t));
                            *repost = Some(wc.wr_id);
                            return Ok(true);
                        }
                    }
                    _ => {
                        if let Some(wc) = side.scq.poll_one().map_err(|e| rnic_verbs::report(&e))? {
                            check_wc(&wc)?;
                            *outstanding -= 1;
                            return Ok(true);
                        }
                    }
                }
                // -e: sleep on the CQ the answer completes on.
                match kind {
                    TestKind::Send => {
                        side.sleep_on(&side.rcq)?;
                    }
                    TestKind::Write => {}
                    _ => {
                        side.sleep_on(&side.scq)?;
                    }
                }
                polls += 1;
                // Busy polling, yielding every 64 polls (each runs a device round, a
                // system call): often enough for a thread sharing this CPU, not so
                // often that other processes' time slices come between two polls.
                if polls % 64 == 0 {
                    if !pinger && i >= target.load(Ordering::Acquire) {
                        return Ok(false);
                    }
                    if t0.elapsed() > STALL {
                        return Err(format!("no answer to message {i} for {} s", STALL.as_secs()));
                    }
                    std::thread::yield_now();
                }
            }
        };
        if pinger {
            reap(&mut outstanding, true)?;
            hop_trace::mark(Step::Reaped);
            send(&mut outstanding, &mut wr)?;
            wait(&mut outstanding, &mut byte, &mut last, &mut repost)?;
            rtts.push(t0.elapsed());
            bar.tick(i + 1);
        } else if !one_sided_in(kind) {
            if !wait(&mut outstanding, &mut byte, &mut last, &mut repost)? {
                break;
            }
            reap(&mut outstanding, true)?;
            hop_trace::mark(Step::Reaped);
            send(&mut outstanding, &mut wr)?;
        } else {
            // READ / atomic latency: the responder's program does nothing, its device
            // answers. Busy polling (no -e), this thread does the device's work, as the
            // pinger does its own: on its own CPU (pinned, in one process), where the
            // progress thread, left to the scheduler, sometimes shared the pinger's CPU
            // (typical read_lat 19.3 us against 11.2 when it did not, same sitting). With
            // -e the progress thread answers, as a NIC would.
            if target.load(Ordering::Acquire) != u64::MAX {
                break;
            }
            if side.channel.is_some() {
                std::thread::sleep(Duration::from_millis(1));
            } else if side.ctx.progress() {
                idle_rounds = 0;
            } else {
                // Yielding every 64 idle rounds, as the pinger's polls do: a yield on
                // each one (a system call that, on a CPU with anything else runnable,
                // gives away the rest of a time slice) made this READ/atomic latency
                // bimodal (typical 11-12 us or 19-24 us by run) with a 99th percentile of
                // 0.3-1.4 ms; every 64th keeps a thread sharing this CPU served.
                idle_rounds = idle_rounds.wrapping_add(1);
                if idle_rounds % 64 == 0 {
                    std::thread::yield_now();
                }
            }
            continue;
        }
        if let Some(id) = repost.take() {
            post_recv(qp, &side.mr, side.slot_offset(0, (id & 0xffff_ffff) as usize), side.stride(), id)?;
        }
        reap(&mut outstanding, false)?;
        i += 1;
    }
    hop_trace::stop();
    print_hop_trace(if pinger { "client" } else { "server" });
    // Let the last completions arrive so that nothing is in flight at the next size.
    let until = Instant::now() + Duration::from_secs(5);
    while outstanding > 0 && Instant::now() < until {
        reap(&mut outstanding, false)?;
        std::thread::yield_now();
    }
    bar.finish();
    if one_sided_in(kind) {
        last = None;
    }
    Ok((rtts, last))
}

/// With the `hop-trace` feature: where this side's hops went (stderr), step by step.
fn print_hop_trace(side: &str) {
    let steps = hop_trace::take();
    if steps.is_empty() {
        return;
    }
    let mut out = format!("hop trace ({side} thread; mean per occurrence, timestamp counter):\n");
    for (s, ns, n) in steps {
        out += &format!("  {:>8.0} ns  x{n:<8} {}\n", ns, s.describe());
    }
    eprint!("{out}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(test: &str) -> Params {
        Params {
            test: test.into(),
            sizes: vec![64],
            iters: 1,
            duration: None,
            qps: 1,
            tx_depth: 4,
            rx_depth: 4,
            inline: 0,
            mtu: 1024,
            mtu_auto: false,
            cq_mod: 1,
            bidirectional: false,
            events: false,
            uc: false,
            no_baseline: false,
            ud: false,
            rounds: 3,
            cm_port: None,
            raw: false,
            roce_shape: false,
        }
    }

    /// The data check fails on zeros and on one flipped bit, and passes on the pattern.
    #[test]
    fn verification_names_the_first_wrong_byte() {
        let s = Side::open("rnic9", "127.0.32.20".parse().unwrap(), None, &params("write_bw")).unwrap();
        s.prepare(TestKind::Write, 64).unwrap();
        let e = s.verify(TestKind::Write, 64, None).unwrap_err();
        assert!(e.contains("WRITE target: byte 0 of 64"), "{e}");
        let mut pat = pattern(64);
        s.mr.write(0, &pat).unwrap();
        s.verify(TestKind::Write, 64, None).unwrap();
        pat[40] ^= 1;
        s.mr.write(0, &pat).unwrap();
        assert!(s.verify(TestKind::Write, 64, None).unwrap_err().contains("byte 40 of 64"));
        // Latency messages carry their tag in the last byte.
        pat[40] ^= 1;
        pat[63] = 7;
        s.mr.write(0, &pat).unwrap();
        s.verify(TestKind::Write, 64, Some((0, 7))).unwrap();
        assert!(s.verify(TestKind::Write, 64, Some((0, 8))).is_err());
        // READ: the local area must hold the peer's pattern.
        s.prepare(TestKind::Read, 64).unwrap();
        assert!(s.verify(TestKind::Read, 64, None).unwrap_err().contains("READ destination"));
        // SEND: nothing received is a failure, not a pass.
        assert!(s.verify(TestKind::Send, 64, None).is_err());
        // Patterns of different sizes differ, so a stale message of another size fails.
        assert_ne!(pattern(64)[..32], pattern(32)[..]);
    }

    #[test]
    fn peak_is_the_best_window() {
        // 1000 completions over 1 s at a steady rate, except 100 of them in 10 ms.
        let mut s: Vec<(f64, u64)> = (0..=900u32).map(|i| (f64::from(i) / 900.0 * 0.99, u64::from(i))).collect();
        s.push((1.0, 1000));
        let p = peak(&s, 1000);
        assert!(p > 5000.0, "{p}");
        let steady: Vec<(f64, u64)> = (1..=100u32).map(|i| (f64::from(i) / 100.0, u64::from(i) * 10)).collect();
        let p = peak(&steady, 1000);
        assert!((p - 1000.0).abs() < 1.0, "{p}");
    }
}
