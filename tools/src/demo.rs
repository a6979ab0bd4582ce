//! `rnic demo`: the main job. Two emulated devices in this process, one RC connection
//! per path MTU, and SEND, RDMA WRITE with immediate and RDMA READ of several sizes,
//! every byte verified, told so that a student can follow who did what.

mod congest;

use rnic_verbs::WcFlags;
use rnic_verbs::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, PathMtu, QueuePair, RecvWr, SendOp, SendWr, WcStatus,
    WorkCompletion,
};
use rnic_verbs::{FaultHandle, Faults};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `rnic demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Local address of the first device, rnic0.
    #[arg(long, default_value = "127.0.0.1")]
    pub ip: IpAddr,
    /// Local address of the second device, rnic1.
    #[arg(long, default_value = "127.0.0.2")]
    pub peer_ip: IpAddr,
    /// Raw Ethernet: run rnic0 on this network interface (whole frames through an
    /// AF_PACKET socket; CAP_NET_RAW) at --ip, an address the host does not own, e.g. one
    /// end of a veth pair.
    #[arg(long, requires = "peer_netdev")]
    pub netdev: Option<String>,
    /// Raw Ethernet: run rnic1 on this interface at --peer-ip (the other end of the pair).
    #[arg(long, requires = "netdev")]
    pub peer_netdev: Option<String>,
    /// Write every packet sent and received to this pcap file.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Path MTUs to run, in bytes (256, 512, 1024, 2048, 4096).
    #[arg(long, value_delimiter = ',', default_value = "256,1024,4096")]
    pub mtus: Vec<u32>,
    /// Print only the summary.
    #[arg(short, long)]
    pub quiet: bool,
    /// Lose each packet with this probability (0..1), on both devices' transmit side.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub loss: f64,
    /// Deliver each packet twice with this probability.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub dup: f64,
    /// Let the next packet overtake each packet with this probability.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub reorder: f64,
    /// Flip one ICRC-covered bit of each packet with this probability (the receiver must drop it).
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub corrupt: f64,
    /// Seed of the fault randomness (the same seed draws the same fates in the same order).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Draw the transfers as a ladder diagram at the end, with the completions each side's
    /// CPU saw (a READ shows none at rnic1). Runs a short demo (path MTU 1024, 1 and 3073
    /// bytes) unless --mtus is given.
    #[arg(long)]
    pub ladder: bool,
    /// Write the same drawing as a self-contained HTML page.
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
    /// Watch congestion control instead: one QP streams WRITEs while a fault rule marks
    /// 2% of its packets ECN congestion-experienced for 400 ms; shows the DCQCN rate, the
    /// throughput and the CNPs every 100 ms, then verifies the data.
    #[arg(long)]
    pub congest: bool,
}

fn probability(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{p} is not a probability between 0 and 1"))
    }
}

impl Args {
    fn faulty(&self) -> bool {
        self.loss > 0.0 || self.dup > 0.0 || self.reorder > 0.0 || self.corrupt > 0.0
    }
}

/// The counters that tell how a transfer recovered, with what each means.
const RECOVERY: &[(&str, &str)] = &[
    ("icrc_err", "packet(s) dropped for a bad ICRC"),
    ("out_of_seq_request", "request(s) out of sequence at the responder"),
    ("rcvd_seq_err", "sequence NAK(s) received"),
    ("duplicate_request", "duplicate request(s) re-acknowledged, not re-executed"),
    ("completer_retry_err", "retransmission(s) (go-back-N)"),
    ("ghost_acks", "stale response(s) ignored"),
    ("rcvd_rnr_err", "RNR NAK(s)"),
    ("retry_exceeded_err", "retry limit(s) exceeded"),
];

const BUF: usize = 1 << 20;
const TIMEOUT: Duration = Duration::from_secs(10);

struct Side {
    ctx: Context,
    pd: rnic_verbs::ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn open(
    name: &str,
    ip: IpAddr,
    netdev: Option<&str>,
    pcap: &Option<PathBuf>,
    faults: Option<FaultHandle>,
) -> Result<Side, String> {
    let mut cfg = rnic_verbs::DeviceConfig::new(name, ip);
    cfg.netdev = netdev.map(str::to_string);
    if let Some(p) = pcap {
        cfg.capture = Some(p.clone());
    }
    if faults.is_some() {
        cfg.faults = faults;
    }
    let ctx = Context::open_with(cfg).map_err(|e| rnic_verbs::report(&e))?;
    let pd = ctx.alloc_pd().map_err(|e| rnic_verbs::report(&e))?;
    let cq = ctx.create_cq(256).map_err(|e| rnic_verbs::report(&e))?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = pd.allocate_mr(BUF, access).map_err(|e| rnic_verbs::report(&e))?;
    Ok(Side { ctx, pd, cq, mr })
}

/// A deterministic xorshift byte pattern of `len` bytes from `seed` (also `rnic perf`'s
/// message data).
pub(crate) fn pattern(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x.to_le_bytes()[1]
        })
        .collect()
}

fn packets(len: usize, mtu: usize) -> usize {
    len.div_ceil(mtu).max(1)
}

/// The opcodes a message of `n` packets is carried by; `end` is appended to the name of
/// the packet that ends it (`_WITH_IMMEDIATE` where the immediate rides).
fn shape(op: &str, n: usize, end: &str) -> String {
    match n {
        1 => format!("{op}_ONLY{end}"),
        2 => format!("{op}_FIRST, {op}_LAST{end}"),
        _ => format!("{op}_FIRST, {} x {op}_MIDDLE, {op}_LAST{end}", n - 2),
    }
}

struct Demo {
    a: Side,
    b: Side,
    quiet: bool,
    /// Counters before the current transfer (rnic0, rnic1), when faults are on.
    before: Option<[Vec<(String, u64)>; 2]>,
    ok: usize,
    failed: Vec<String>,
    /// With --ladder/--html: what each side's CPU saw, and when (ns since the epoch, the
    /// capture's clock).
    notes: Option<Vec<(u64, IpAddr, String)>>,
    /// The short set of sizes (--ladder without --mtus).
    compact: bool,
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Demo {
    /// Records what `side`'s CPU saw (for the ladder).
    fn note(&mut self, b_side: bool, text: String) {
        let ip = if b_side { self.b.ctx.ip() } else { self.a.ctx.ip() };
        if let Some(n) = &mut self.notes {
            n.push((now_ns(), ip, text));
        }
    }

    fn say(&self, s: impl AsRef<str>) {
        if !self.quiet {
            println!("{}", s.as_ref());
        }
    }

    fn sent(side: &Side) -> u64 {
        side.ctx.counter("sent_pkts").unwrap_or(0)
    }

    /// Prints what the fault chains did during the last transfer and how the QPs
    /// recovered (counter deltas), then starts the next transfer's accounting.
    fn recovery(&mut self) {
        let Some(before) = &self.before else { return };
        let sides = [(&self.a, "rnic0"), (&self.b, "rnic1")];
        let mut lines = Vec::new();
        for (side, name) in sides {
            if let Some(f) = side.ctx.faults() {
                for ev in f.lock().take_log() {
                    lines.push(format!("      fault  {name}: {:<9} {}", ev.verdict.name(), ev.packet));
                }
            }
        }
        let now = [self.a.ctx.counters(), self.b.ctx.counters()];
        for (i, name) in ["rnic0", "rnic1"].into_iter().enumerate() {
            for (c, meaning) in RECOVERY {
                let get = |v: &[(String, u64)]| v.iter().find(|(n, _)| n == c).map_or(0, |(_, x)| *x);
                let d = get(&now[i]) - get(&before[i]);
                if d > 0 {
                    lines.push(format!("      recover {name}: {d} {meaning}"));
                }
            }
        }
        for l in lines {
            self.say(l);
        }
        self.before = Some(now);
    }

    fn check(&mut self, what: String, good: bool, why: impl FnOnce() -> String) {
        self.recovery();
        if good {
            self.ok += 1;
            self.say(format!("    -> verified: {what}"));
        } else {
            let w = why();
            self.say(format!("    -> FAILED: {what}: {w}"));
            self.failed.push(format!("{what}: {w}"));
        }
    }

    /// rnic0's completion; a failure ends the demo, since the QP is then in the error
    /// state (with faults: the loss was beyond what retry_cnt allows).
    fn requester_wc(&mut self) -> Result<WorkCompletion, String> {
        let wc = self.wc(&self.a.cq)?;
        if wc.status != WcStatus::Success {
            self.recovery();
            return Err(format!("rnic0's work request failed: {wc}; its QP is now in the error state"));
        }
        Ok(wc)
    }

    fn wc(&self, cq: &CompletionQueue) -> Result<WorkCompletion, String> {
        cq.wait(1, TIMEOUT).map(|v| v[0]).map_err(|e| rnic_verbs::report(&e))
    }

    fn run_mtu(&mut self, mtu: PathMtu) -> Result<(), String> {
        let m = mtu.bytes() as usize;
        // Under faults a lost last packet waits for the local ACK timer: 4.096 us * 2^10
        // = 4 ms rather than the default 2^14 = 67 ms keeps the demo brisk.
        let timeout = if self.before.is_some() { 10 } else { 14 };
        let qa = qp(&self.a, mtu, timeout)?;
        let qb = qp(&self.b, mtu, timeout)?;
        let (ea, eb) = (qa.endpoint(), qb.endpoint());
        let qa = qa.connect(&eb).map_err(|e| rnic_verbs::report(&e))?;
        let qb = qb.connect(&ea).map_err(|e| rnic_verbs::report(&e))?;
        self.say(format!(
            "\n== path MTU {m}: rnic0 QP {:#x} (first PSN {:#08x}) <-> rnic1 QP {:#x} (first PSN {:#08x}) ==",
            ea.qpn, ea.psn, eb.qpn, eb.psn
        ));
        if self.before.is_some() {
            self.before = Some([self.a.ctx.counters(), self.b.ctx.counters()]);
        }
        let sizes: &[usize] = if self.compact { &[1, 3 * m + 1] } else { &[1, m, 3 * m + 1, 65536] };
        for (i, &len) in (0u32..).zip(sizes) {
            let seed = mtu.bytes() * 10 + i;
            self.send(&qa, &qb, m, len, seed)?;
            self.write_imm(&qa, &qb, m, len, seed + 1000)?;
            self.read(&qa, m, len, seed + 2000)?;
        }
        Ok(())
    }

    fn send(&mut self, qa: &QueuePair, qb: &QueuePair, mtu: usize, len: usize, seed: u32) -> Result<(), String> {
        let data = pattern(seed, len);
        self.a.mr.write(0, &data).map_err(|e| rnic_verbs::report(&e))?;
        self.b.mr.write(0, &vec![0u8; len]).map_err(|e| rnic_verbs::report(&e))?;
        let (sa, sb) = (Self::sent(&self.a), Self::sent(&self.b));
        qb.post_recv(&RecvWr { wr_id: 10, sg_list: vec![self.b.mr.sge(0, len32(len))] })
            .map_err(|e| rnic_verbs::report(&e))?;
        qa.post_send(&SendWr::send(1, vec![self.a.mr.sge(0, len32(len))])).map_err(|e| rnic_verbs::report(&e))?;
        let wa = self.requester_wc()?;
        self.note(false, format!("CPU: {} {}", wa.opcode.name(), wa.status));
        let wb = self.wc(&self.b.cq)?;
        self.note(true, format!("CPU: {} {} ({} bytes)", wb.opcode.name(), wb.status, wb.byte_len));
        let (da, db) = (Self::sent(&self.a) - sa, Self::sent(&self.b) - sb);
        self.say(format!(
            "  SEND {len} B: rnic1's application posted a receive buffer; rnic0 sent {da} packet(s) [{}]",
            shape("SEND", packets(len, mtu), "")
        ));
        self.say(format!("    rnic1's NIC placed the bytes and answered with {db} ACK(s)"));
        self.say(format!(
            "    rnic1's CPU sees: {} {} ({} bytes)    rnic0's CPU sees: {} {}",
            wb.opcode.name(),
            wb.status,
            wb.byte_len,
            wa.opcode.name(),
            wa.status
        ));
        let mut got = vec![0u8; len];
        self.b.mr.read(0, &mut got).map_err(|e| rnic_verbs::report(&e))?;
        let good = wa.status == WcStatus::Success
            && wb.status == WcStatus::Success
            && wb.byte_len as usize == len
            && got == data;
        self.check(format!("SEND {len} B at MTU {mtu}"), good, || {
            format!("completions {wa} / {wb}, bytes equal: {}", got == data)
        });
        Ok(())
    }

    fn write_imm(&mut self, qa: &QueuePair, qb: &QueuePair, mtu: usize, len: usize, seed: u32) -> Result<(), String> {
        let data = pattern(seed, len);
        self.a.mr.write(0, &data).map_err(|e| rnic_verbs::report(&e))?;
        let r = self.b.mr.remote();
        let (sa, sb) = (Self::sent(&self.a), Self::sent(&self.b));
        qb.post_recv(&RecvWr { wr_id: 11, sg_list: vec![] }).map_err(|e| rnic_verbs::report(&e))?;
        let imm = 0xC0DE_0000 | (seed & 0xffff);
        let op = SendOp::RdmaWriteWithImm { remote_addr: r.addr + 4096, rkey: r.rkey, imm };
        qa.post_send(&SendWr::new(2, op, vec![self.a.mr.sge(0, len32(len))])).map_err(|e| rnic_verbs::report(&e))?;
        let wa = self.requester_wc()?;
        self.note(false, format!("CPU: {} {}", wa.opcode.name(), wa.status));
        let wb = self.wc(&self.b.cq)?;
        self.note(true, format!("CPU: {} imm {:#x} ({} bytes)", wb.opcode.name(), wb.imm_data, wb.byte_len));
        let (da, db) = (Self::sent(&self.a) - sa, Self::sent(&self.b) - sb);
        self.say(format!(
            "  RDMA_WRITE_WITH_IMM {len} B into rnic1 at {:#x} (rkey {:#x}): rnic0 sent {da} packet(s) [{}]",
            r.addr + 4096,
            r.rkey,
            shape("RDMA_WRITE", packets(len, mtu), "_WITH_IMMEDIATE")
        ));
        self.say(format!(
            "    rnic1's NIC wrote its memory and sent {db} ACK(s); the immediate consumed one receive WQE"
        ));
        self.say(format!(
            "    rnic1's CPU sees: {} imm={:#x} ({} bytes)    rnic0's CPU sees: {} {}",
            wb.opcode.name(),
            wb.imm_data,
            wb.byte_len,
            wa.opcode.name(),
            wa.status
        ));
        let mut got = vec![0u8; len];
        self.b.mr.read(4096, &mut got).map_err(|e| rnic_verbs::report(&e))?;
        let good = wa.status == WcStatus::Success
            && wb.imm_data == imm
            && wb.wc_flags.contains(WcFlags::WITH_IMM)
            && got == data;
        self.check(format!("RDMA_WRITE_WITH_IMM {len} B at MTU {mtu}"), good, || {
            format!("completions {wa} / {wb}, bytes equal: {}", got == data)
        });
        Ok(())
    }

    fn read(&mut self, qa: &QueuePair, mtu: usize, len: usize, seed: u32) -> Result<(), String> {
        let data = pattern(seed, len);
        self.b.mr.write(8192, &data).map_err(|e| rnic_verbs::report(&e))?;
        self.a.mr.write(BUF / 2, &vec![0u8; len]).map_err(|e| rnic_verbs::report(&e))?;
        let r = self.b.mr.remote();
        let (sa, sb) = (Self::sent(&self.a), Self::sent(&self.b));
        let op = SendOp::RdmaRead { remote_addr: r.addr + 8192, rkey: r.rkey };
        qa.post_send(&SendWr::new(3, op, vec![self.a.mr.sge(BUF / 2, len32(len))]))
            .map_err(|e| rnic_verbs::report(&e))?;
        let wa = self.requester_wc()?;
        self.note(false, format!("CPU: {} {} ({} bytes)", wa.opcode.name(), wa.status, wa.byte_len));
        let nothing = format!("CPU: nothing (one-sided READ; its CQ holds {})", self.b.cq.len());
        self.note(true, nothing);
        let (da, db) = (Self::sent(&self.a) - sa, Self::sent(&self.b) - sb);
        self.say(format!("  RDMA_READ {len} B from rnic1 at {:#x}: rnic0 sent {da} READ request; rnic1's NIC answered with {db} packet(s) [{}]", r.addr + 8192, shape("RDMA_READ_RESPONSE", packets(len, mtu), "")));
        self.say(format!(
            "    rnic1's CPU sees: nothing (one-sided; its CQ holds {})    rnic0's CPU sees: {} {} ({} bytes)",
            self.b.cq.len(),
            wa.opcode.name(),
            wa.status,
            wa.byte_len
        ));
        let mut got = vec![0u8; len];
        self.a.mr.read(BUF / 2, &mut got).map_err(|e| rnic_verbs::report(&e))?;
        let good = wa.status == WcStatus::Success && self.b.cq.is_empty() && got == data;
        self.check(format!("RDMA_READ {len} B at MTU {mtu}"), good, || {
            format!("completion {wa}, bytes equal: {}", got == data)
        });
        Ok(())
    }
}

fn len32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

fn qp(side: &Side, mtu: PathMtu, timeout: u8) -> Result<rnic_verbs::PreparedQp, String> {
    side.pd.qp_builder(&side.cq, &side.cq).mtu(mtu).timeout(timeout).build().map_err(|e| rnic_verbs::report(&e))
}

/// Runs the demo; 0 when every transfer verified.
pub fn run(args: &Args) -> ExitCode {
    match run_inner(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rnic demo: {e}");
            ExitCode::from(1)
        }
    }
}

fn run_inner(args: &Args) -> Result<ExitCode, String> {
    if args.congest {
        return congest::run(args.ip, args.peer_ip, args.seed).map(|ok| {
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        });
    }
    let mut mtus = Vec::new();
    for m in &args.mtus {
        mtus.push(
            PathMtu::from_bytes(*m).ok_or_else(|| format!("--mtus: {m} is not one of 256, 512, 1024, 2048, 4096"))?,
        );
    }
    let chain = |i: u64| {
        args.faulty().then(|| {
            let mut f =
                Faults::random(args.seed.wrapping_add(i), args.loss, args.dup, args.reorder, args.corrupt, 1_000_000);
            f.enable_log();
            FaultHandle::new(f)
        })
    };
    let (fa, fb) = (chain(0), chain(1));
    let drawing = args.ladder || args.html.is_some();
    // The ladder is drawn from a capture: the one asked for, or a temporary one.
    let temp = std::env::temp_dir().join(format!("rnic-demo-{}.pcap", std::process::id()));
    let pcap = if drawing && args.pcap.is_none() { Some(temp.clone()) } else { args.pcap.clone() };
    let a = open("rnic0", args.ip, args.netdev.as_deref(), &pcap, fa.clone())?;
    let b = open("rnic1", args.peer_ip, args.peer_netdev.as_deref(), &pcap, fb.clone())?;
    let before = args.faulty().then(|| [a.ctx.counters(), b.ctx.counters()]);
    // A short demo for the drawing unless the MTUs were chosen.
    let compact = drawing && args.mtus == [256, 1024, 4096];
    if compact {
        mtus = vec![PathMtu::Mtu1024];
    }
    let mut d =
        Demo { a, b, quiet: args.quiet, before, ok: 0, failed: Vec::new(), notes: drawing.then(Vec::new), compact };
    if args.netdev.is_some() {
        d.say(format!(
            "rnic demo: two emulated RoCEv2 devices in this process, on raw Ethernet: rnic0 on {}, rnic1 on {}",
            args.netdev.as_deref().unwrap_or_default(),
            args.peer_netdev.as_deref().unwrap_or_default()
        ));
    } else {
        d.say("rnic demo: two emulated RoCEv2 devices in this process, talking RoCEv2 over UDP port 4791");
    }
    // A raw link carries what its interface's MTU allows: MTUs above it are skipped, said.
    let port = |s: &Side| s.ctx.query_port().map(|p| p.active_mtu).unwrap_or(PathMtu::Mtu4096);
    let most = port(&d.a).min(port(&d.b));
    if mtus.iter().any(|&m| m > most) {
        d.say(format!(
            "  skipping path MTUs above {}: the link's interface MTU carries no more (raise it, e.g. `ip link set DEV mtu 9000`)",
            most.bytes()
        ));
        mtus.retain(|&m| m <= most);
    }
    d.say(format!(
        "  rnic0 at {} (GID {}), rnic1 at {} (GID {})",
        args.ip,
        d.a.ctx.gid(1).map(|g| g.to_string()).unwrap_or_default(),
        args.peer_ip,
        d.b.ctx.gid(1).map(|g| g.to_string()).unwrap_or_default()
    ));
    d.say("  each side registered 1 MiB (LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ) and connected one RC QP per MTU");
    if args.faulty() {
        d.say(format!(
            "  faults on every packet either device sends: loss {} dup {} reorder {} corrupt {} (seed {})",
            args.loss, args.dup, args.reorder, args.corrupt, args.seed
        ));
        d.say("  ('fault' lines: what the network did; 'recover' lines: how RC put it right)");
    }
    for m in mtus {
        if let Err(e) = d.run_mtu(m) {
            d.failed.push(e);
            break;
        }
    }
    if let (Some(fa), Some(fb)) = (&fa, &fb) {
        let (x, y) = (fa.lock().stats(), fb.lock().stats());
        println!(
            "\nfaults applied: {} packets judged, {} dropped, {} duplicated, {} reordered, {} corrupted",
            x.packets + y.packets,
            x.dropped + y.dropped,
            x.duplicated + y.duplicated,
            x.reordered + y.reordered,
            x.corrupted + y.corrupted
        );
    }
    let total = if compact { 6 } else { 12 * args.mtus.len() };
    println!("\nrnic demo: {} of {total} transfers verified byte for byte", d.ok);
    for (n, v) in d.a.ctx.counters().into_iter().filter(|(_, v)| *v > 0) {
        if !args.quiet {
            println!("  rnic0 {n} = {v}");
        }
    }
    for (n, v) in d.b.ctx.counters().into_iter().filter(|(_, v)| *v > 0) {
        if !args.quiet {
            println!("  rnic1 {n} = {v}");
        }
    }
    let failed = std::mem::take(&mut d.failed);
    let notes = d.notes.take();
    // Closing the devices flushes the capture file.
    drop(d);
    if let Some(p) = &args.pcap {
        println!("  every packet sent and received is in {}", p.display());
    }
    if let (Some(notes), Some(p)) = (notes, &pcap) {
        let ladder = crate::ladder::load(p).map_err(|e| format!("reading {}: {e}", p.display()))?.with_notes(notes);
        if args.ladder {
            use std::io::IsTerminal;
            let tty = std::io::stdout().is_terminal();
            let width = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()).unwrap_or(110);
            println!("\n{}", ladder.text(width, tty && std::env::var_os("NO_COLOR").is_none()));
        }
        if let Some(out) = &args.html {
            std::fs::write(out, ladder.html("rnic demo")).map_err(|e| format!("writing {}: {e}", out.display()))?;
            println!("  the ladder is drawn in {}", out.display());
        }
        if args.pcap.is_none() {
            let _ = std::fs::remove_file(&temp);
        }
    }
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        for f in &failed {
            eprintln!("FAILED: {f}");
        }
        Ok(ExitCode::from(1))
    }
}
