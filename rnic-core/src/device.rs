//! The driver: runs a device's [`Engine`]s, one per shard, each on its own progress thread
//! and socket (the kernel steers each datagram to its QP's shard; one shard on two CPUs).
//!
//! ```text
//!  application threads                progress thread (one per shard)
//!  post_send: validate on the caller  --Cmd::PostSend-->  engine  <-- recvmmsg (+GRO) + ICRC check
//!  modify/create: Cmd + reply channel                     |
//!  poll_cq: lock-free CQ  <------- completions -----------+--> sendmmsg (+GSO), ICRC filled
//! ```
//!
//! The posting thread and the progress thread share no lock on the per-packet path: work
//! requests travel through a crossbeam channel, completions through each CQ's lock-free
//! queue, counters are atomics (the `Core` mutex below is taken by the application only
//! when it drives a round itself).
//!
//! The progress thread polls both its command channel and its socket without blocking;
//! after `spin` without work it sleeps in `ppoll` on the socket and an eventfd until a
//! datagram, a timer, or a poster's wake-up (the posting thread bumps the eventfd when it
//! finds the thread asleep). One thread per shard, not a receive thread beside it: on a
//! 2-CPU machine every extra runnable thread costs a context switch per hand-off.
//!
//! Each shard's engine and both halves of its transport live in one `Core` behind a mutex
//! that the shard's progress thread takes for each round. A busy-polling application may run a round
//! itself with [`Device::progress`] (uncontended `try_lock`, never blocks); while it does,
//! the progress thread stays away, so the packet, the engine and the poll meet on one
//! thread with no hand-off (what a latency benchmark needs on 2 CPUs).

use crate::capture::Capture;
pub(crate) use crate::config::SOCKET_BUFFER;
pub use crate::config::{CongestionControl, DeviceConfig, DeviceError, EnvSettings, TransportInfo, CC_LINE_RATE};
use crate::counters::{Counters, DeviceCounters};
use crate::cq::Cq;
use crate::engine::qp::{self, PostError, QpAttr, QpInit, QpShared, RecvWqe, SendWqe};
use crate::engine::{AsyncEvent, Engine, EngineConfig, EngineError, TxPacket};
use crate::faults::{FaultHandle, Faults};
use crate::mem::MemBlock;
use crate::mr::{AccessError, AccessFlags, Advice, MrKeys, Mtpt, PdId};
use crate::qp_state::PathMtu;
use crate::srq::{Srq, Xrcd};
use crate::transport::faulty::Faulty;
pub use crate::transport::raw::Interface;
use crate::transport::raw::Packet;
use crate::transport::udp::{bind, transport_info, Udp};
use crate::transport::Transport;
use crate::wr::{RecvWrRef, SendWrRef, Sge};
use crate::Time;
use crossbeam_channel::{Receiver, Sender};
use rnic_wire::{Qpn, ROCEV2_UDP_PORT};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

enum Cmd {
    CreateQp {
        init: QpInit,
        reply: Sender<Result<Arc<QpShared>, EngineError>>,
    },
    ModifyQp {
        qpn: Qpn,
        attr: QpAttr,
        reply: Sender<Result<(), EngineError>>,
    },
    QueryQp {
        qpn: Qpn,
        reply: Sender<Result<QpAttr, EngineError>>,
    },
    DestroyQp {
        qpn: Qpn,
        reply: Sender<Result<(), EngineError>>,
    },
    PostSend(Qpn, SendWqe),
    PostRecv(Qpn, RecvWqe),
    /// Attaches a QP to a multicast group (`attach`) or detaches it.
    Mcast {
        qpn: Qpn,
        group: std::net::IpAddr,
        attach: bool,
        reply: Sender<Result<(), McastRefusal>>,
    },
    /// A call on the device's Communication Manager (QP1), run on the progress thread.
    Cm(CmCall),
    Shutdown,
}

/// Why a multicast attach or detach was refused: by the engine, or by the host when the
/// transport joined the group.
enum McastRefusal {
    Engine(EngineError),
    Wire(std::io::Error),
}

/// A call on the CM agent, with the device's clock.
type CmCall = Box<dyn FnOnce(&mut crate::cm::CmAgent, Time) + Send>;

impl std::fmt::Debug for Cmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Cmd::CreateQp { .. } => "CreateQp",
            Cmd::ModifyQp { .. } => "ModifyQp",
            Cmd::QueryQp { .. } => "QueryQp",
            Cmd::DestroyQp { .. } => "DestroyQp",
            Cmd::PostSend(..) => "PostSend",
            Cmd::PostRecv(..) => "PostRecv",
            Cmd::Mcast { .. } => "Mcast",
            Cmd::Cm(_) => "Cm",
            Cmd::Shutdown => "Shutdown",
        })
    }
}

/// An open emulated device. Cloning gives another handle to the same device; the
/// threads stop when the last handle is dropped.
#[derive(Clone, Debug)]
pub struct Device {
    inner: Arc<Inner>,
}

struct Inner {
    config: DeviceConfig,
    local: SocketAddr,
    transport: TransportInfo,
    /// The interface of a raw-Ethernet device.
    iface: Option<Interface>,
    /// The largest path MTU the wire carries (4096 over UDP; from the interface's MTU on
    /// raw Ethernet).
    port_mtu: PathMtu,
    mtpt: Arc<Mtpt>,
    counters: DeviceCounters,
    events: Receiver<AsyncEvent>,
    cm_events: Receiver<crate::cm::CmEvent>,
    /// Readable while CM events wait (a program may `poll` it, as an rdma_cm event
    /// channel's fd).
    cm_fd: Arc<rnic_io::EventFd>,
    next_pd: AtomicU32,
    next_cq: AtomicU32,
    next_srq: AtomicU32,
    /// The engines the device's work is spread over (at least one); shard 0 runs the CM.
    shards: Box<[Shard]>,
    /// The shard of each member number a QPN carries (`share::member_of`), `NO_SHARD`
    /// for members that are not this device's.
    by_member: [u8; MEMBERS],
    threads: parking_lot::Mutex<Vec<JoinHandle<()>>>,
    /// Which of the program's threads poll the device through the library.
    pollers: Pollers,
    /// A raw-Ethernet device's claim of its interface and address (processes share UDP
    /// devices only).
    _raw_claim: Option<std::os::unix::net::UnixDatagram>,
    /// Declared last, so dropped last: the entry of [`Device::open_shared`]'s table is
    /// removed only once the socket above has been closed.
    _shared: Shared,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("name", &self.config.name).field("local", &self.local).finish()
    }
}

impl Device {
    /// Opens a device: binds its UDP port and starts its progress and receive threads.
    pub fn open(config: DeviceConfig) -> Result<Device, DeviceError> {
        Device::open_as(config, None)
    }

    /// Opens a device; `shared`: its name in [`Device::open_shared`]'s table. The steps:
    /// the environment's settings, the capture, the wire of each shard ([`Wire::open`]),
    /// each shard's engine ([`engine_config`]) and progress thread.
    fn open_as(mut config: DeviceConfig, shared: Option<String>) -> Result<Device, DeviceError> {
        apply_env(&mut config)?;
        let want = shard_count(&config)?;
        let capture = open_capture(&config)?;
        // Each shard counts in its own set (`DeviceCounters`).
        let mut counters = vec![Arc::new(Counters::default())];
        let io_err = |source| DeviceError::Io { name: config.name.clone(), source };
        let first = Wire::open(&config, capture.clone(), &counters[0], true)?.ok_or_else(|| DeviceError::Config {
            name: config.name.clone(),
            why: "the device's group of processes has no member free".into(),
        })?;
        // An automatic count spreads only the device's first process over several shards:
        // every shard is one of the group's 64 members, and a job of many processes on one
        // device (MPI ranks) must not run out of them.
        let count = if want.exact || first.alone { want.count } else { 1 };
        let mut wires = vec![first];
        while wires.len() < count {
            // Past the first, a shard is one more member of the device's group: an
            // automatic count stops where the group has no member left.
            let c = Arc::new(Counters::default());
            match Wire::open(&config, capture.clone(), &c, want.exact)? {
                Some(w) => {
                    wires.push(w);
                    counters.push(c);
                }
                None => break,
            }
        }
        let (local, transport, port_mtu) =
            (wires[0].local, wires[0].transport, engine_config(&config, &wires[0], 1, 0).port_mtu);
        let iface = wires[0].iface.clone();
        let raw_claim = wires[0].raw_claim.take();
        let mtpt = Arc::new(Mtpt::new(config.max_mr));
        let (ev_tx, ev_rx) = crossbeam_channel::unbounded();
        let (cm_tx, cm_rx) = crossbeam_channel::unbounded();
        let cm_fd = Arc::new(rnic_io::EventFd::new().map_err(io_err)?);
        // The one port is up as soon as the socket is bound (IBV_EVENT_PORT_ACTIVE).
        let _ = ev_tx.send(AsyncEvent::PortActive { port: 1 });
        let mut shards = Vec::with_capacity(wires.len());
        let mut threads = Vec::with_capacity(wires.len());
        let mut by_member = [NO_SHARD; MEMBERS];
        let ends = Ends {
            shards: wires.len(),
            start: Instant::now(),
            mtpt: &mtpt,
            events: &ev_tx,
            cm_events: &cm_tx,
            cm_fd: &cm_fd,
        };
        for (i, (wire, c)) in wires.into_iter().zip(&counters).enumerate() {
            let member = wire.cm_member;
            match Shard::start(&config, i, wire, c.clone(), &ends) {
                Ok((shard, thread)) => {
                    if let Some(m) = member {
                        by_member[usize::from(m) % MEMBERS] = u8::try_from(i).unwrap_or(NO_SHARD);
                    }
                    shards.push(shard);
                    threads.push(thread);
                }
                Err(e) => {
                    // Stop the shards already running before reporting.
                    for s in &shards {
                        let _ = s.send_cmd(Cmd::Shutdown);
                    }
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(e);
                }
            }
        }
        Ok(Device {
            inner: Arc::new(Inner {
                config,
                local,
                transport,
                iface,
                port_mtu,
                mtpt,
                counters: DeviceCounters::new(counters),
                events: ev_rx,
                cm_events: cm_rx,
                cm_fd,
                next_pd: AtomicU32::new(1),
                next_cq: AtomicU32::new(1),
                next_srq: AtomicU32::new(1),
                shards: shards.into_boxed_slice(),
                by_member,
                threads: parking_lot::Mutex::new(threads),
                pollers: Pollers::default(),
                // Made here, after every fallible step: a `Shared` dropped on an error
                // path would take the table's lock, which `open_shared` holds.
                _raw_claim: raw_claim,
                _shared: Shared(shared),
            }),
        })
    }

    /// Opens a device as a host resource: every caller in this process that names the
    /// same device gets the one running device (one engine, one socket, one port 4791),
    /// as every context on `rxe0` shares the kernel's device; the device stops when the
    /// last handle of every caller is dropped. The first caller's configuration runs it:
    /// a later caller must name the same address, port, interface and VLAN (else
    /// [`DeviceError::Config`] says what differs); its other settings (capture, faults,
    /// pinning) are the running device's.
    ///
    /// A device whose last handle is being dropped while another caller opens it is
    /// waited for (its threads stop and its socket closes first), at most 10 s.
    pub fn open_shared(config: DeviceConfig) -> Result<Device, DeviceError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut open = SHARED.open.lock();
        while let Some(slot) = open.iter().find(|(n, _)| *n == config.name) {
            match slot.1.upgrade() {
                Some(inner) => {
                    let dev = Device { inner };
                    let same = same_identity(dev.config(), &config);
                    // Unlock before `dev` may be dropped: were it the last handle, its
                    // `Shared` would take the lock.
                    drop(open);
                    return match same {
                        Ok(()) => Ok(dev),
                        Err(why) => Err(DeviceError::Config { name: config.name, why }),
                    };
                }
                // Stopping: wait until its socket is closed and its entry gone.
                None => {
                    if SHARED.closed.wait_until(&mut open, deadline).timed_out() {
                        return Err(DeviceError::Config {
                            name: config.name,
                            why: "the device is still stopping after 10 s (its threads did not end)".into(),
                        });
                    }
                }
            }
        }
        let name = config.name.clone();
        let dev = Device::open_as(config, Some(name.clone()))?;
        open.push((name, Arc::downgrade(&dev.inner)));
        Ok(dev)
    }

    /// The interface of a raw-Ethernet device (`None` over UDP).
    pub fn interface(&self) -> Option<&Interface> {
        self.inner.iface.as_ref()
    }

    /// The device's MAC: its interface's on raw Ethernet; over UDP the locally
    /// administered one derived from its address (as captures show it).
    pub fn mac(&self) -> rnic_wire::ethernet::MacAddr {
        match &self.inner.iface {
            Some(i) => i.mac,
            None => crate::capture::mac_for(self.inner.local.ip()),
        }
    }

    /// The port's active MTU: the largest path MTU the wire carries (4096 over UDP; on
    /// raw Ethernet what the interface's MTU leaves room for).
    pub fn port_mtu(&self) -> PathMtu {
        self.inner.port_mtu
    }

    /// What the device offers: its limits and attributes.
    pub fn caps(&self) -> crate::caps::DeviceCaps {
        crate::caps::DeviceCaps::of(self.config())
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// The configuration it was opened with.
    pub fn config(&self) -> &DeviceConfig {
        &self.inner.config
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local
    }

    /// The fault-injection chain applied to this device's packets, if any.
    pub fn faults(&self) -> Option<&FaultHandle> {
        self.inner.config.faults.as_ref()
    }

    /// Runs one round of the device's work (commands, received packets, timers, sends)
    /// on the calling thread, on every shard holding QPs whose progress thread is not
    /// running one: busy-polling applications call it to take the hand-offs to the
    /// progress thread out of their latency. Returns whether there was work. Never blocks.
    pub fn progress(&self) -> bool {
        if let [one] = &*self.inner.shards {
            return one.progress(By::App);
        }
        let mut worked = false;
        for shard in self.inner.shards_in(self.inner.busy_shards()) {
            worked |= shard.progress(By::App);
        }
        worked
    }

    /// Runs one round on the calling thread, like [`progress`](Self::progress), without
    /// telling the progress thread to stay away: for callers that cannot promise to keep
    /// calling (the libibverbs library, whose program may next spin on memory an RDMA
    /// WRITE fills, which only the progress thread can deliver). It runs on the shards
    /// whose QPs complete into `cq` (those holding QPs while none does yet). Never blocks.
    pub fn progress_shared(&self, cq: &Cq) -> bool {
        self.inner.pollers.note();
        if let [one] = &*self.inner.shards {
            return one.progress(By::Library);
        }
        let mut worked = false;
        for shard in self.inner.shards_in(self.inner.shards_feeding(cq)) {
            worked |= shard.progress(By::Library);
        }
        worked
    }

    /// A library poll that found its CQ empty after [`progress_shared`](Self::progress_shared):
    /// when several of the program's threads have been polling the device lately, gives
    /// the CPU away (`sched_yield`), else returns at once. Threads that take turns polling
    /// one device (UCX's `ucx_perftest -T 2`: two threads progressing one worker) spin
    /// beside each other and the peer's threads; on fewer CPUs than busy threads, the one
    /// whose message just came waited for the others' time slices (`-T 2` tag latency
    /// 105-450 us against 20-24 us yielding, two CPUs). A single polling thread never
    /// yields: that cost it 1-11 us (the progress threads took the CPU).
    pub fn idle_poll(&self) {
        if self.inner.pollers.mixed() {
            std::thread::yield_now();
        }
    }

    /// Sleeps until `fd` is readable (a completion channel's descriptor, which `cq`'s
    /// notifications make readable) or `timeout` passes, doing the device's work for `cq`
    /// on the calling thread meanwhile: a round first (it sends what the caller posted
    /// before it came to sleep), then a sleep on `fd` and the sockets of the shards feeding
    /// `cq`, and a round whenever a datagram comes, until `fd` is readable. A program that
    /// sleeps on a completion channel then pays one wake-up per message, its own: the
    /// datagram wakes it and it handles the packet, where the progress thread's wake-up
    /// (often asleep after its spin, between two messages of a ping-pong) came first and
    /// the program's second. The progress thread still runs as ever (both may wake; the one
    /// that takes the shard's lock first does the round). Returns whether `fd` is readable.
    pub fn wait_driving(&self, cq: &Cq, fd: std::os::fd::BorrowedFd<'_>, timeout: Option<Duration>) -> bool {
        use std::os::fd::AsFd;
        let deadline = timeout.map(|t| Instant::now() + t);
        let mask = self.inner.shards_feeding(cq);
        let feeding = || self.inner.shards_in(mask);
        let mut fds = vec![fd];
        fds.extend(feeding().filter_map(|s| s.rx_fd.as_ref().map(AsFd::as_fd)));
        let mut ran = true;
        // Since when the sockets have kept waking this thread without the channel becoming
        // readable (other QPs' traffic on the same shards).
        let mut busy_since: Option<Instant> = None;
        loop {
            if !ran {
                // Every shard's lock was taken (its progress thread is in a round, which
                // takes the datagram that woke us): let it run rather than spin on the
                // socket it has not read yet.
                std::thread::yield_now();
            }
            ran = false;
            for s in feeding() {
                ran |= s.try_progress(By::Library).is_some();
            }
            if rnic_io::wait_readable(&[fd], Some(Duration::ZERO)).unwrap_or(false) {
                return true;
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return false,
                },
                None => None,
            };
            if busy_since.is_some_and(|t| t.elapsed() > WAIT_DRIVING_BUSY) {
                // The shards are busy with other QPs' traffic, and their progress threads
                // are awake for it: they raise the event; sleep on the channel alone
                // rather than spend a CPU on rounds for others.
                return rnic_io::wait_readable(&[fd], left).unwrap_or(false);
            }
            if rnic_io::wait_readable(&fds, left).is_err() {
                // Not a descriptor ppoll takes: sleep on the channel alone, as before.
                return rnic_io::wait_readable(&[fd], left).unwrap_or(false);
            }
            busy_since.get_or_insert_with(Instant::now);
        }
    }

    /// How many shards the device's work is spread over ([`DeviceConfig::shards`]).
    pub fn shards(&self) -> usize {
        self.inner.shards.len()
    }

    /// Gives `cq` room for `depth` completions ([`Cq::resize`]) under the device's lock,
    /// after one round on the calling thread (work posted before has completed where it
    /// completes at once, so the completions waiting are counted, as rxe's post completes
    /// an unreliable send): no completion is pushed while its queue is replaced.
    pub fn resize_cq(&self, cq: &Cq, depth: usize) -> Result<(), crate::cq::CqResizeError> {
        // Every shard's lock, in order (nothing else holds two), so that no shard pushes.
        let mut cores: Vec<_> = self.inner.shards.iter().map(|s| s.core.lock()).collect();
        for c in &mut cores {
            let now = c.now();
            let _ = c.round(By::Progress, now);
        }
        cq.resize(depth)
    }

    /// How the UDP transport moves packets (GSO, GRO, spinning).
    pub fn transport(&self) -> TransportInfo {
        self.inner.transport
    }

    /// Every RC QP's DCQCN rate (current and lowest, bytes/s) and the cuts it took; empty
    /// with congestion control off. QPs that have sent nothing yet are not listed.
    ///
    /// It takes the device's lock for a moment (the progress thread then stays away for
    /// up to a few hundred microseconds, as from an application's own round): watch it at
    /// a millisecond's pace, not in a tight loop.
    pub fn qp_rates(&self) -> Vec<crate::engine::QpRate> {
        self.inner.shards.iter().flat_map(|s| s.core.lock().engine.qp_rates()).collect()
    }

    /// The device's counters (its shards' summed when read).
    pub fn counters(&self) -> &DeviceCounters {
        &self.inner.counters
    }

    /// The memory table.
    pub fn mtpt(&self) -> &Arc<Mtpt> {
        &self.inner.mtpt
    }

    /// The asynchronous event queue.
    pub fn events(&self) -> &Receiver<AsyncEvent> {
        &self.inner.events
    }

    /// Allocates a protection domain number.
    pub fn alloc_pd(&self) -> PdId {
        PdId(self.inner.next_pd.fetch_add(1, Ordering::Relaxed))
    }

    /// Registers `len` bytes of `block` from `offset`, visible at `iova`; pins the block
    /// first when the device pins memory.
    pub fn reg_mr(
        &self,
        pd: PdId,
        block: Arc<MemBlock>,
        offset: usize,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys, DeviceError> {
        if self.inner.config.pin_memory && !block.is_pinned() {
            block.pin()?;
        }
        Ok(self.inner.mtpt.register(pd, block, offset, len, iova, access)?)
    }

    /// Registers as [`reg_mr`](Self::reg_mr) does but never pins: an on-demand region
    /// (`IBV_ACCESS_ON_DEMAND`), whose pages the device reaches as the program does,
    /// faulting them in when an access comes, however the device was configured.
    pub fn reg_mr_on_demand(
        &self,
        pd: PdId,
        block: Arc<MemBlock>,
        offset: usize,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys, DeviceError> {
        Ok(self.inner.mtpt.register(pd, block, offset, len, iova, access)?)
    }

    /// `ibv_advise_mr` on protection domain `pd`: each of `sges` is checked as a work
    /// request's would be (its lkey a valid region of `pd`, the range inside it; a write
    /// prefetch needs local write), then [`Advice::Prefetch`] and
    /// [`Advice::PrefetchWrite`] fault the pages in by reading one byte of each through the
    /// region, as an on-demand NIC asks the kernel for them; [`Advice::PrefetchNoFault`]
    /// maps nothing that is not mapped, so it only checks. The work is done when this
    /// returns (rdma-core's `IBV_ADVISE_MR_FLAG_FLUSH` asks no more). Nothing is touched
    /// unless every SGE passes; the error names the first that did not.
    pub fn advise_mr(&self, pd: PdId, advice: Advice, sges: &[Sge]) -> Result<(), (usize, AccessError)> {
        let need = match advice {
            Advice::Prefetch | Advice::PrefetchNoFault => AccessFlags::empty(),
            Advice::PrefetchWrite => AccessFlags::LOCAL_WRITE,
        };
        let mut slices = Vec::with_capacity(sges.len());
        for (i, s) in sges.iter().enumerate() {
            let len = usize::try_from(s.length).unwrap_or(usize::MAX);
            slices.push(self.inner.mtpt.check_local(s.lkey, pd, s.addr, len, need).map_err(|e| (i, e))?);
        }
        if advice == Advice::PrefetchNoFault {
            return Ok(());
        }
        const PAGE: u64 = 4096;
        for s in &slices {
            let mut b = [0u8; 1];
            let mut at = 0;
            // The slice's first byte's address, to find page boundaries.
            let base = s.block().addr().wrapping_add(crate::mem::to_u64(s.block_offset()));
            while at < s.len() {
                // Reading faults the page in (never a write: the program may be writing
                // the same byte); an implicit region's unmapped page is refused by the
                // kernel, not faulted, and prefetching it does nothing.
                let _ = s.read(at, &mut b);
                let to_next = PAGE - base.wrapping_add(crate::mem::to_u64(at)) % PAGE;
                at = at.saturating_add(usize::try_from(to_next).unwrap_or(usize::MAX));
            }
        }
        Ok(())
    }

    /// Deregisters the region named by `lkey`. Work requests posted earlier that name its
    /// memory (a receive not yet filled, a send not yet sent, a WRITE arriving in parts)
    /// no longer reach it: they complete in error, as on a NIC that looks their keys up
    /// when it executes them (rxe: `lookup_mr` fails; IBA 10.6.3.4 leaves the memory
    /// undefined, never the host's). When this returns, no access to the memory is in
    /// progress or will start: memory the caller owns may be freed.
    pub fn dereg_mr(&self, lkey: u32) -> Result<(), DeviceError> {
        let block = self.inner.mtpt.deregister(lkey)?;
        self.retire(&block);
        Ok(())
    }

    /// Gives the region named by `lkey` another protection domain and/or other memory
    /// (`block[offset .. offset + len]`, at `iova` or where it was), keeping its keys and
    /// rights (`ibv_rereg_mr`; [`Mtpt::rereg`]). With new memory, work requests posted
    /// earlier no longer reach the region (as after [`dereg_mr`](Self::dereg_mr)): a
    /// hardware NIC checks them against the new PD and translation when it executes
    /// them; here they hold the old block, which is retired. A new PD over the same
    /// memory therefore comes with a new block over it. The new memory is pinned first
    /// when the device pins memory and the region was pinned (one registered on demand
    /// stays on demand).
    pub fn rereg_mr(
        &self,
        lkey: u32,
        pd: Option<PdId>,
        memory: Option<(Arc<MemBlock>, usize, usize)>,
        iova: Option<u64>,
    ) -> Result<(), DeviceError> {
        let pin = self.inner.config.pin_memory && self.inner.mtpt.is_pinned(lkey);
        let new = memory.as_ref().map(|m| m.0.clone());
        if let Some(block) = new.as_ref().filter(|b| pin && !b.is_pinned()) {
            block.pin()?;
        }
        if let Some(old) = self.inner.mtpt.rereg(lkey, pd, memory, iova)? {
            self.retire(&old);
        }
        if let Some(block) = new.filter(|_| pin) {
            // The old block's unpinning unlocked the pages the two share (locks do not
            // nest): lock them again.
            block.unpin();
            block.pin()?;
        }
        Ok(())
    }

    /// Revokes `block` and waits for the accesses in progress: every access the device
    /// makes to registered memory (scatter, gather, a zero-copy send, an atomic) runs
    /// during a round, under the core's lock, and checks the block first; once the lock
    /// was taken after the revocation, none is running and none will start. Its pages are
    /// unpinned while they are still the block's.
    fn retire(&self, block: &MemBlock) {
        block.revoke();
        for shard in self.inner.shards.iter() {
            drop(shard.core.lock());
        }
        block.unpin();
    }

    /// Creates a completion queue of `depth` entries.
    pub fn create_cq(&self, depth: usize) -> Arc<Cq> {
        Arc::new(Cq::new(self.inner.next_cq.fetch_add(1, Ordering::Relaxed), depth))
    }

    fn call<T>(&self, shard: &Shard, make: impl FnOnce(Sender<T>) -> Cmd) -> Result<T, DeviceError> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        shard.send_cmd(make(tx)).map_err(|_| DeviceError::Stopped(self.name().into()))?;
        rx.recv().map_err(|_| DeviceError::Stopped(self.name().into()))
    }

    /// Creates a QP in the RESET state (its type, PD, limits, CQs and SRQ: [`QpInit`]).
    ///
    /// It goes to the shard holding the fewest QPs (the lowest of those), where it stays.
    pub fn create_qp(&self, init: QpInit) -> Result<Arc<QpShared>, DeviceError> {
        let shards = &self.inner.shards;
        let (i, shard) = shards
            .iter()
            .enumerate()
            .min_by_key(|(i, s)| (s.qps.load(Ordering::Relaxed), *i))
            .unwrap_or((0, &shards[0]));
        let cqs =
            [Some(init.send_cq.clone()), Some(init.recv_cq.clone()), init.srq.as_ref().and_then(|s| s.cq().cloned())];
        shard.qps.fetch_add(1, Ordering::Relaxed);
        let qp = self.call(shard, |reply| Cmd::CreateQp { init, reply }).and_then(|r| Ok(r?));
        match &qp {
            Ok(_) => cqs.iter().flatten().for_each(|cq| cq.fed_by(i)),
            Err(_) => {
                shard.qps.fetch_sub(1, Ordering::Relaxed);
            }
        }
        qp
    }

    /// Creates a shared receive queue of `max_wr` WQEs of up to `max_sge` SGEs in `pd`.
    pub fn create_srq(&self, pd: PdId, max_wr: u32, max_sge: u32) -> Arc<Srq> {
        Arc::new(Srq::new(self.inner.next_srq.fetch_add(1, Ordering::Relaxed), pd, max_wr, max_sge))
    }

    /// Creates an XRC SRQ in `xrcd` (IBA Annex A14), numbered as every SRQ of the device
    /// (the number an XRCETH names it by), its receives completing in `cq`.
    pub fn create_xrc_srq(&self, pd: PdId, max_wr: u32, max_sge: u32, xrcd: &Xrcd, cq: Arc<Cq>) -> Arc<Srq> {
        Srq::new_xrc(self.inner.next_srq.fetch_add(1, Ordering::Relaxed), pd, max_wr, max_sge, xrcd, cq)
    }

    /// Posts a receive WQE to a shared receive queue (validated on the calling thread,
    /// queued lock-free; no command to the progress thread).
    pub fn post_srq_recv<'a>(&self, srq: &Srq, wr: impl Into<RecvWrRef<'a>>) -> Result<(), PostError> {
        srq.post_recv(&self.inner.mtpt, wr)
    }

    /// Runs `f` on the device's Communication Manager (on the progress thread, with the
    /// device's clock) and returns what it returns: `listen`, `connect`, `accept`, ...
    pub fn cm_call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut crate::cm::CmAgent, Time) -> T + Send + 'static,
    ) -> Result<T, DeviceError> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        // Shard 0 runs the device's CM: every connection's IDs carry its member number.
        self.inner.shards[0]
            .send_cmd(Cmd::Cm(Box::new(move |cm, now| {
                let _ = tx.send(f(cm, now));
            })))
            .map_err(|_| DeviceError::Stopped(self.name().into()))?;
        rx.recv().map_err(|_| DeviceError::Stopped(self.name().into()))
    }

    /// The Communication Manager's events (connect requests, replies, established,
    /// rejected, disconnected, timed out), in order.
    pub fn cm_events(&self) -> &Receiver<crate::cm::CmEvent> {
        &self.inner.cm_events
    }

    /// A descriptor that is readable while CM events wait in [`cm_events`](Self::cm_events)
    /// (to `poll`/`epoll` beside other fds, as an rdma_cm event channel's). Call
    /// [`cm_fd_rearm`](Self::cm_fd_rearm) after taking events.
    pub fn cm_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.inner.cm_fd.as_fd()
    }

    /// Makes [`cm_fd`](Self::cm_fd) readable exactly while events wait: clears it, then
    /// sets it again if any event is (still, or newly) queued.
    pub fn cm_fd_rearm(&self) {
        self.inner.cm_fd.clear();
        if !self.inner.cm_events.is_empty() {
            self.inner.cm_fd.notify();
        }
    }

    /// Modifies a QP (checked against IBA's table by the engine).
    pub fn modify_qp(&self, qpn: Qpn, attr: QpAttr) -> Result<(), DeviceError> {
        Ok(self.call(self.inner.shard_of(qpn), |reply| Cmd::ModifyQp { qpn, attr, reply })??)
    }

    /// Reads a QP's attributes.
    pub fn query_qp(&self, qpn: Qpn) -> Result<QpAttr, DeviceError> {
        Ok(self.call(self.inner.shard_of(qpn), |reply| Cmd::QueryQp { qpn, reply })??)
    }

    /// Destroys a QP (detaching it from its multicast groups).
    pub fn destroy_qp(&self, qpn: Qpn) -> Result<(), DeviceError> {
        let shard = self.inner.shard_of(qpn);
        self.call(shard, |reply| Cmd::DestroyQp { qpn, reply })??;
        let _ = shard.qps.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        Ok(())
    }

    /// Attaches UD QP `qpn` to the multicast group at IP address `group`
    /// (`ibv_attach_mcast`; a RoCEv2 multicast GID maps to it): the device joins the group
    /// on the wire when it is the group's first QP here, and every datagram to the group
    /// with DestQP 0xFFFFFF reaches the QP. Attaching twice is no error. Refused: a QP
    /// that is not UD, an address that is not multicast (`Engine` errors), a group of the
    /// other address family or one the host will not join (`Io`), past the limits
    /// (`EngineError::Limit`).
    pub fn attach_mcast(&self, qpn: Qpn, group: std::net::IpAddr) -> Result<(), DeviceError> {
        self.mcast(qpn, group, true)
    }

    /// Detaches QP `qpn` from `group` (`ibv_detach_mcast`); the device leaves the group
    /// when no QP of it is left there. A QP not attached is refused.
    pub fn detach_mcast(&self, qpn: Qpn, group: std::net::IpAddr) -> Result<(), DeviceError> {
        self.mcast(qpn, group, false)
    }

    fn mcast(&self, qpn: Qpn, group: std::net::IpAddr, attach: bool) -> Result<(), DeviceError> {
        self.call(self.inner.shard_of(qpn), |reply| Cmd::Mcast { qpn, group, attach, reply })?.map_err(|r| match r {
            McastRefusal::Engine(e) => DeviceError::Engine(e),
            McastRefusal::Wire(source) => DeviceError::Io { name: self.name().to_string(), source },
        })
    }

    /// Validates a send WR on the calling thread and hands it to the engine.
    pub fn post_send<'a>(&self, qp: &QpShared, wr: impl Into<SendWrRef<'a>>) -> Result<(), PostError> {
        let wr = &wr.into();
        // Built here and filled in place (see `validate_send_into`).
        let mut wqe = qp::empty_send_wqe(qp, wr);
        qp::validate_send_into(qp, &self.inner.mtpt, wr, &mut wqe)?;
        self.post_send_wqe(qp, wqe);
        Ok(())
    }

    /// Hands an already validated send WQE to the engine.
    #[inline]
    pub fn post_send_wqe(&self, qp: &QpShared, wqe: SendWqe) {
        let shard = self.inner.shard_of(qp.qpn);
        match shard.direct() {
            Some(mut c) => {
                // No clock read here: the round that sends the work request reads it.
                c.engine.queue_send(qp.qpn, wqe);
                shard.posted_direct(c);
            }
            None => shard.queue_cmd(Cmd::PostSend(qp.qpn, wqe), &qp.sq_outstanding),
        }
    }

    /// Validates a receive WR on the calling thread and hands it to the engine.
    pub fn post_recv<'a>(&self, qp: &QpShared, wr: impl Into<RecvWrRef<'a>>) -> Result<(), PostError> {
        let wr = &wr.into();
        let mut wqe = RecvWqe::unchecked(wr.wr_id);
        qp::validate_recv_into(qp, &self.inner.mtpt, wr, &mut wqe)?;
        let shard = self.inner.shard_of(qp.qpn);
        match shard.direct() {
            Some(mut c) => {
                c.engine.post_recv(qp.qpn, wqe);
                shard.posted_direct(c);
            }
            None => shard.queue_cmd(Cmd::PostRecv(qp.qpn, wqe), &qp.rq_outstanding),
        }
        Ok(())
    }
}

/// `RNIC_*` settings the configuration does not already fix (`RNIC_FAULTS`, when the
/// program gave no fault chain; `RNIC_SHARDS`, when it gave no shard count, for a UDP
/// device); every variable is checked, a bad one is an error.
fn apply_env(config: &mut DeviceConfig) -> Result<(), DeviceError> {
    let env = EnvSettings::read().map_err(|why| DeviceError::Config { name: config.name.clone(), why })?;
    if config.shards.is_none() && config.netdev.is_none() {
        config.shards = env.shards;
    }
    if config.faults.is_none() {
        if let Some(spec) = &env.faults {
            let f =
                Faults::from_spec(spec).map_err(|reason| DeviceError::Faults { name: config.name.clone(), reason })?;
            config.faults = (!f.is_empty()).then(|| FaultHandle::new(f));
        }
    }
    Ok(())
}

/// The pcap capture the configuration names, shared with other devices writing the same
/// file.
fn open_capture(config: &DeviceConfig) -> Result<Option<Arc<Capture>>, DeviceError> {
    config
        .capture
        .as_ref()
        .map(|p| {
            Capture::shared(p, config.ip).map_err(|source| DeviceError::Capture {
                name: config.name.clone(),
                path: p.clone(),
                source,
            })
        })
        .transpose()
}

/// The engine's configuration for one of `shards` shards of a device on `wire`.
fn engine_config(config: &DeviceConfig, wire: &Wire, shards: usize, index: usize) -> EngineConfig {
    let iface = wire.iface.as_ref();
    // CM IDs differ from run to run (Linux draws them at random): the clock and the pid.
    let cm_seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() ^ u64::from(d.subsec_nanos()) << 20)
        ^ (u64::from(std::process::id()) << 32);
    EngineConfig {
        // Payloads go to the kernel straight from registered memory, except through a
        // fault chain (which may keep, corrupt or copy a packet after the round).
        zero_copy: config.zero_copy && config.faults.is_none(),
        // Small packets go in trains on UDP with GSO (the fault chain takes packets one
        // by one).
        trains: wire.transport.gso && !wire.transport.raw && config.faults.is_none(),
        cm_seed,
        cc: config.congestion_control.params(),
        // Flow control: a peer like this device absorbs what its receive buffer holds.
        // The buffer is counted in the kernel's truesize (a 4 KiB datagram takes more),
        // and the ACKs share it: a quarter of it, at most 8 MiB (at 2.5 GB/s, 3 ms of
        // data: more queue only adds delay, which beside busy processes outgrew the
        // retransmission timeout), at least 256 KiB. Measured beside two busy loops with
        // 1024 QPs and congestion control off: half of a 128 MiB buffer (32 MiB)
        // overflowed it (kernel RcvbufErrors, RETRY_EXC_ERR within 21 s); 8 MiB held for
        // the whole minute.
        // Shards send to a destination independently: each takes its share of the bound,
        // so that together they stay inside it (at least 64 KiB each).
        max_inflight_per_dest: ((wire.rcvbuf / 4).clamp(256 << 10, 8 << 20)
            / u64::try_from(shards.max(1)).unwrap_or(1))
        .max(64 << 10),
        port_mtu: iface.and_then(|i| i.active_mtu_for(config.ip.is_ipv6())).unwrap_or(PathMtu::Mtu4096),
        // rxe's CA GUID: the EUI-64 of its netdev's MAC.
        ca_guid: iface.map_or(crate::engine::guid_for(wire.local.ip()), |i| crate::engine::guid_for_mac(i.mac.0)),
        qpns: wire.qpns,
        cm_member: wire.cm_member,
        shard: index,
        ..EngineConfig::new(wire.local.ip())
    }
}

/// The device's wire, opened: a UDP socket in the device's group of processes, or raw
/// frames on a named interface; and what the engine needs to know of it.
struct Wire {
    link: Box<dyn Transport>,
    local: SocketAddr,
    transport: TransportInfo,
    /// The receive buffer a peer like this device has (flow control sizes by it).
    rcvbuf: u64,
    iface: Option<Interface>,
    /// The QPNs this process hands out: all of them, or its member's part of a UDP device
    /// other processes share (`transport::share`).
    qpns: (u32, u32),
    cm_member: Option<u8>,
    /// The claim on a raw device's interface, address and VLAN, held while it runs.
    raw_claim: Option<std::os::unix::net::UnixDatagram>,
    /// No other member of the device's group existed when this one joined.
    alone: bool,
}

impl Wire {
    /// Opens one shard's wire; `None` when the device's group has no member left and
    /// `must` is false (an automatic shard count takes what is free).
    fn open(
        config: &DeviceConfig,
        capture: Option<Arc<Capture>>,
        counters: &Arc<Counters>,
        must: bool,
    ) -> Result<Option<Wire>, DeviceError> {
        match &config.netdev {
            None => Wire::udp(config, capture, counters, must),
            Some(netdev) => Wire::raw(config, netdev, capture, counters).map(Some),
        }
    }

    fn udp(
        config: &DeviceConfig,
        capture: Option<Arc<Capture>>,
        counters: &Arc<Counters>,
        must: bool,
    ) -> Result<Option<Wire>, DeviceError> {
        let io_err = |source| DeviceError::Io { name: config.name.clone(), source };
        let share = match crate::transport::share::join(SocketAddr::new(config.ip, config.port)) {
            Ok(share) => share,
            Err(e) if !must && e.kind() == std::io::ErrorKind::AddrInUse => return Ok(None),
            Err(e) => {
                return Err(DeviceError::Config {
                    name: config.name.clone(),
                    why: format!("cannot join the device's processes: {e}"),
                })
            }
        };
        let sock = bind(config)?;
        let local = sock.local_addr().map_err(io_err)?;
        let member = share.member();
        let alone = share.alone();
        let transport = transport_info(config, &sock);
        let rcvbuf = rnic_io::rx_backlog(&sock).map_or(16 << 20, |(_, b)| u64::from(b));
        let udp = Udp::new(config, sock, transport, capture, counters.clone(), Some(share)).map_err(io_err)?;
        Ok(Some(Wire {
            link: Box::new(udp),
            local,
            transport,
            rcvbuf,
            iface: None,
            qpns: crate::transport::share::qpn_range(member),
            cm_member: Some(member),
            raw_claim: None,
            alone,
        }))
    }

    fn raw(
        config: &DeviceConfig,
        netdev: &str,
        capture: Option<Arc<Capture>>,
        counters: &Arc<Counters>,
    ) -> Result<Wire, DeviceError> {
        // Processes share UDP devices only: each AF_PACKET socket on the interface sees
        // every frame, and each would answer it.
        let claim = crate::transport::share::claim_raw(netdev, config.vlan, config.ip).map_err(|e| {
            let why = if e.kind() == std::io::ErrorKind::AddrInUse {
                format!(
                    "a raw-Ethernet device at {} on {netdev}{} is already open (in this or another process); processes share UDP devices only",
                    config.ip,
                    config.vlan.map_or(String::new(), |v| format!(" VLAN {v}"))
                )
            } else {
                format!("cannot claim {netdev}: {e}")
            };
            DeviceError::Config { name: config.name.clone(), why }
        })?;
        let p = Packet::open(config, netdev, capture, counters.clone())?;
        let iface = p.interface().clone();
        Ok(Wire {
            link: Box::new(p),
            local: SocketAddr::new(config.ip, ROCEV2_UDP_PORT),
            transport: TransportInfo { gso: false, gro: false, spin: config.spin, raw: true },
            rcvbuf: SOCKET_BUFFER as u64,
            iface: Some(iface),
            qpns: (crate::engine::FIRST_QPN, crate::engine::LAST_QPN),
            cm_member: None,
            raw_claim: Some(claim),
            alone: true,
        })
    }
}

/// What every shard of a device shares: the clock, the memory table, the event channels
/// (each counts in its own set of counters).
struct Ends<'a> {
    /// How many shards the device has.
    shards: usize,
    /// The device's clock: every shard's times count from it (a fault chain the shards
    /// share holds packets by it).
    start: Instant,
    mtpt: &'a Arc<Mtpt>,
    events: &'a Sender<AsyncEvent>,
    cm_events: &'a Sender<crate::cm::CmEvent>,
    cm_fd: &'a Arc<rnic_io::EventFd>,
}

/// One shard of a device: an engine on its own socket (a member of the device's
/// reuseport group, so the kernel steers the datagrams of the shard's QPs to it), with
/// its command channel and progress thread. A QP lives on the shard that created it for
/// its whole life: its packets meet one engine on one thread, in the order the socket
/// queued them.
struct Shard {
    cmd: Sender<Cmd>,
    /// The progress thread is (about to be) asleep in `ppoll`: wake it with the eventfd.
    sleeping: Arc<AtomicBool>,
    /// A work request went straight into the engine ([`Device::post_send`] finding the
    /// core free) and no round has sent it yet: the progress thread must not sleep.
    posted: Arc<AtomicBool>,
    /// When an application thread last ran a round here ([`Device::progress`]), in the
    /// core's nanoseconds; 0: never. Read by the progress thread without the lock.
    inline_at: Arc<AtomicU64>,
    /// Wakes the progress thread from its `ppoll` (which also watches the socket).
    waker: Arc<rnic_io::EventFd>,
    /// The engine and the transport; the progress thread locks it for each round.
    core: Arc<parking_lot::Mutex<Core>>,
    /// The QPs living here (a new QP goes to the shard with the fewest).
    qps: AtomicUsize,
    /// The shard's socket (a duplicate of its descriptor), for a program's thread that
    /// sleeps until a datagram comes ([`Device::wait_driving`]).
    rx_fd: Option<std::os::fd::OwnedFd>,
}

impl Shard {
    /// Starts shard `index` of a device on `wire`: its engine and progress thread.
    fn start(
        config: &DeviceConfig,
        index: usize,
        wire: Wire,
        counters: Arc<Counters>,
        ends: &Ends<'_>,
    ) -> Result<(Shard, JoinHandle<()>), DeviceError> {
        let io_err = |source| DeviceError::Io { name: config.name.clone(), source };
        let engine_config = engine_config(config, &wire, ends.shards, index);
        let Wire { link, transport, .. } = wire;
        // Fault injection wraps whichever transport it is.
        let link: Box<dyn Transport> = match &config.faults {
            Some(f) => Box::new(Faulty::new(link, f.clone())),
            None => link,
        };
        let (cmd_tx, cmd_rx) = crossbeam_channel::unbounded();
        let sleeping = Arc::new(AtomicBool::new(false));
        let posted = Arc::new(AtomicBool::new(false));
        let mut engine = Engine::new(engine_config, ends.mtpt.clone(), counters);
        // A round's completion events are raised at its end (`Core::round`).
        engine.defer_cq_events();
        let waker = Arc::new(rnic_io::EventFd::new().map_err(io_err)?);
        let wake_fds = link.wake_fds().map_err(io_err)?;
        // The first is the socket itself (the others: multicast groups, the inbox of the
        // device's group, which the progress thread looks after).
        let rx_fd = wake_fds.first().map(|f| f.try_clone()).transpose().map_err(io_err)?;
        let next_due = Arc::new(AtomicU64::new(NO_TIMER));
        let core = {
            let next_timer = [engine.poll_timeout(), link.next_due()].into_iter().flatten().min();
            next_due.store(next_timer.unwrap_or(NO_TIMER), Ordering::SeqCst);
            Arc::new(parking_lot::Mutex::new(Core {
                engine,
                cmds: cmd_rx.clone(),
                link,
                events: ends.events.clone(),
                cm_events: ends.cm_events.clone(),
                cm_fd: ends.cm_fd.clone(),
                batch: Vec::with_capacity(256),
                start: ends.start,
                next_timer,
                next_due: next_due.clone(),
                last_work: 0,
                shutdown: false,
                posted: posted.clone(),
                ack_hold_until: None,
            }))
        };
        let inline_at = Arc::new(AtomicU64::new(0));
        let thread = {
            let (core, sleeping, waker, posted) = (core.clone(), sleeping.clone(), waker.clone(), posted.clone());
            let wake_boost = config.wake_boost;
            let inline = Inline { at: inline_at.clone(), epoch: core.lock().start };
            // Thread names stop at 15 bytes: shard 0 keeps the name it always had.
            let name = match index {
                0 => format!("{}-progress", config.name),
                i => format!("{}-prog{i}", config.name),
            };
            std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    let flags = Flags { sleeping, posted, next_due };
                    progress_loop(core, cmd_rx, wake_fds, waker, flags, inline, transport.spin, wake_boost)
                })
                .map_err(io_err)?
        };
        Ok((Shard { cmd: cmd_tx, sleeping, posted, inline_at, waker, core, qps: AtomicUsize::new(0), rx_fd }, thread))
    }

    /// Queues a command for the progress thread and wakes it if it sleeps.
    fn send_cmd(&self, cmd: Cmd) -> Result<(), ()> {
        self.cmd.send(cmd).map_err(|_| ())?;
        self.wake_if_sleeping();
        Ok(())
    }

    /// Wakes the progress thread if it sleeps, after new work was queued (a command, or a
    /// work request posted straight into the engine).
    fn wake_if_sleeping(&self) {
        // Pairs with the fence in `progress_loop` before it re-checks the channel and the
        // posted flag: either it sees the work, or this load sees it asleep (Dekker).
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) && self.sleeping.swap(false, Ordering::SeqCst) {
            // Only the first poster to find it asleep wakes it. An eventfd rather than a
            // datagram: an application's `progress()` round could receive a datagram
            // before the sleeping thread sees it, and the wake-up would be lost.
            self.waker.notify();
        }
    }

    /// A round on the calling thread, for an application that promises to keep calling
    /// ([`By::App`]: the progress thread stays away) or a library that cannot
    /// ([`By::Library`]). Never blocks.
    fn progress(&self, by: By) -> bool {
        self.try_progress(by).unwrap_or(false)
    }

    /// [`progress`](Self::progress); `None` when the lock was taken (by the progress
    /// thread, or another thread of the program) and no round ran.
    fn try_progress(&self, by: By) -> Option<bool> {
        let mut c = self.core.try_lock()?;
        let now = c.now();
        if by == By::App {
            crate::hop_trace::mark(crate::hop_trace::Step::RoundStarted);
            self.inline_at.store(now.max(1), Ordering::Relaxed);
        }
        let worked = c.round(by, now) == Round::Worked;
        if by == By::App {
            if worked {
                // A round with work can be long (a window of packets to send): say so
                // again at its end, lest the progress thread think it stopped.
                self.inline_at.store(c.now().max(1), Ordering::Relaxed);
            }
            return Some(worked);
        }
        drop(c);
        if worked && self.sleeping.load(Ordering::SeqCst) {
            // The round may have armed a timer (a retransmission) earlier than the one
            // the sleeping progress thread waits for: let it look again.
            self.waker.notify();
        }
        Some(worked)
    }

    /// The core, when a poster may put a work request straight into the engine: it is
    /// free (an application driving the device itself, or a progress thread between
    /// rounds) and no earlier command waits, so order is kept. No channel hop, and the
    /// work request is not moved through a `Cmd`.
    #[inline]
    fn direct(&self) -> Option<parking_lot::MutexGuard<'_, Core>> {
        if !self.cmd.is_empty() {
            return None;
        }
        let c = self.core.try_lock()?;
        (c.cmds.is_empty() && !c.shutdown).then_some(c)
    }

    /// After a direct post: the next round, on whichever thread, sends it.
    #[inline]
    fn posted_direct(&self, mut c: parking_lot::MutexGuard<'_, Core>) {
        // A post to a QP in the error state completes at once (flushed): its event now,
        // not at the next round's end.
        c.engine.raise_cq_events();
        // Relaxed: set under the core's lock (a round, which takes the lock, sees it), and
        // ordered before the `sleeping` load by the SeqCst fence in `wake_if_sleeping`
        // (the progress thread's pre-sleep check has the matching fence): one full
        // barrier per post instead of two.
        self.posted.store(true, Ordering::Relaxed);
        drop(c);
        self.wake_if_sleeping();
    }

    /// Queues a work request for the progress thread.
    fn queue_cmd(&self, cmd: Cmd, slot: &AtomicU32) {
        if self.send_cmd(cmd).is_err() {
            // The device is shutting down: release the reserved slot.
            slot.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// No shard of this device: a member number another process holds.
const NO_SHARD: u8 = u8::MAX;
/// Members of a device's group, each a shard of some process.
const MEMBERS: usize = crate::transport::share::MEMBERS as usize;
const _: () = assert!(MEMBERS == crate::config::MAX_SHARDS, "a device's shards are members of its group");

/// How many shards a device opens with: exactly `count`, or up to `count` when the
/// group's free members decide.
struct ShardCount {
    count: usize,
    exact: bool,
}

/// [`DeviceConfig::shards`], checked; or the default: half the CPUs this process may
/// use, at most 8 (for the device's first process only: see `open_as`) (each shard is a progress thread that spins while it has work, and a
/// loopback pair is two devices on one host; on two CPUs every extra runnable thread
/// costs a context switch per hand-off, so there it is one). Raw-Ethernet devices run
/// one shard: every `AF_PACKET` socket on an interface sees every frame, so nothing
/// steers a frame to one of several.
fn shard_count(config: &DeviceConfig) -> Result<ShardCount, DeviceError> {
    let bad = |why: String| DeviceError::Config { name: config.name.clone(), why };
    match (config.shards, config.netdev.is_some()) {
        (Some(0), _) => Err(bad("shards: a device runs at least one".into())),
        (Some(n), _) if n > MEMBERS => Err(bad(format!("shards: {n}, more than the {MEMBERS} members a device has"))),
        (Some(n), true) if n > 1 => Err(bad(format!(
            "shards: {n} on a raw-Ethernet device, which runs one (every AF_PACKET socket on the interface sees every frame)"
        ))),
        (Some(n), _) => Ok(ShardCount { count: n, exact: true }),
        (None, true) => Ok(ShardCount { count: 1, exact: true }),
        (None, false) => Ok(ShardCount { count: (rnic_io::cpu::available() / 2).clamp(1, 8), exact: false }),
    }
}

impl Inner {
    /// The shard QP `qpn` lives on (shard 0 for a number that is none of this device's
    /// QPs: its engine refuses it as any unknown QPN).
    #[inline]
    fn shard_of(&self, qpn: Qpn) -> &Shard {
        let i = match self.shards.len() {
            1 => 0,
            _ => self.by_member[usize::from(crate::transport::share::member_of(qpn.value())) % MEMBERS],
        };
        self.shards.get(usize::from(i)).unwrap_or(&self.shards[0])
    }

    /// The shards an application's own round runs on (bit *i*: shard *i*): those holding
    /// QPs (shard 0 when none does, for the CM).
    fn busy_shards(&self) -> u64 {
        let held = self
            .shards
            .iter()
            .take(64)
            .enumerate()
            .filter(|(_, s)| s.qps.load(Ordering::Relaxed) > 0)
            .fold(0u64, |m, (i, _)| m | 1 << i);
        if held == 0 {
            1
        } else {
            held
        }
    }

    /// The shards whose QPs complete into `cq` (the busy ones while no QP does yet).
    fn shards_feeding(&self, cq: &Cq) -> u64 {
        match cq.feeding_shards() {
            0 => self.busy_shards(),
            m => m,
        }
    }

    /// The shards of `mask`.
    fn shards_in(&self, mask: u64) -> impl Iterator<Item = &Shard> {
        self.shards.iter().take(64).enumerate().filter(move |(i, _)| mask & (1 << i) != 0).map(|(_, s)| s)
    }
}

/// The devices [`Device::open_shared`] opened, by name, and a condition signalled when one
/// of them has stopped (its entry removed).
struct SharedTable {
    open: parking_lot::Mutex<Vec<(String, std::sync::Weak<Inner>)>>,
    closed: parking_lot::Condvar,
}

static SHARED: SharedTable =
    SharedTable { open: parking_lot::const_mutex(Vec::new()), closed: parking_lot::Condvar::new() };

/// A shared device's name in [`SHARED`], removed when the device's `Inner` is dropped
/// (after its other fields: the socket is closed by then).
struct Shared(Option<String>);

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(name) = self.0.take() {
            let mut open = SHARED.open.lock();
            // Only the stopped one: its handles are all gone.
            open.retain(|(n, w)| *n != name || w.strong_count() > 0);
            SHARED.closed.notify_all();
        }
    }
}

/// Whether a running device is the one `want` names: same address, port, interface and
/// VLAN; otherwise what differs.
fn same_identity(have: &DeviceConfig, want: &DeviceConfig) -> Result<(), String> {
    let id = |c: &DeviceConfig| (c.ip, c.port, c.netdev.clone(), c.vlan);
    if id(have) == id(want) {
        return Ok(());
    }
    let show = |c: &DeviceConfig| {
        let mut s = format!("{} port {}", c.ip, c.port);
        if let Some(n) = &c.netdev {
            s += &format!(" on {n}");
        }
        if let Some(v) = c.vlan {
            s += &format!(" VLAN {v}");
        }
        s
    };
    Err(format!("already open in this process as {}, not {}", show(have), show(want)))
}

impl Drop for Inner {
    fn drop(&mut self) {
        for shard in self.shards.iter() {
            let _ = shard.send_cmd(Cmd::Shutdown);
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}

fn to_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// How long [`Device::wait_driving`] keeps doing rounds while the shards' sockets wake it
/// and its channel stays quiet, before it leaves the work to the progress threads and
/// sleeps on the channel alone: a ping-pong's answer comes in the first datagram, and
/// traffic of other QPs must not keep a sleeping program's thread busy.
const WAIT_DRIVING_BUSY: Duration = Duration::from_micros(50);

/// In a round that receives many datagrams, the held ACKs are sent after every this
/// many packets (a quarter of the requester's 128-packet window).
const ACK_EVERY: usize = 32;
/// How long a shared round holds its ACKs for the program's answer to carry them.
const ACK_HOLD_NS: Time = 40_000;
/// Commands taken per round, so that received packets are not starved.
const CMD_BATCH: usize = 256;

/// Everything a round of progress touches: the engine and the transport. The progress
/// thread locks it for each round; an application thread may run a round itself
/// ([`Device::progress`]) while the lock is free.
struct Core {
    engine: Engine,
    cmds: Receiver<Cmd>,
    /// The wire: UDP datagrams or raw frames.
    link: Box<dyn Transport>,
    events: Sender<AsyncEvent>,
    cm_events: Sender<crate::cm::CmEvent>,
    cm_fd: Arc<rnic_io::EventFd>,
    batch: Vec<TxPacket>,
    start: Instant,
    /// The next wake-up (engine timers, packets the fault chain delays), as of the last
    /// piece of work: nothing else changes it.
    next_timer: Option<Time>,
    /// `next_timer` for the progress thread to read without the lock (`NO_TIMER`: none):
    /// a round another thread runs can move it earlier while the progress thread is
    /// about to sleep (see `progress_loop`).
    next_due: Arc<AtomicU64>,
    /// When a round last found work (whichever thread ran it).
    last_work: Time,
    /// `Cmd::Shutdown` was handled (possibly by an application thread's round).
    shutdown: bool,
    /// Work requests were posted straight into the engine since the last round.
    posted: Arc<AtomicBool>,
    /// ACKs held by a shared round (a libibverbs program's poll) leave by then at the
    /// latest, if no post or other round sends them first.
    ack_hold_until: Option<Time>,
}

/// Who runs a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    /// The progress thread (or a verb that needs one round at once): ACKs leave at once.
    Progress,
    /// A program driving the device itself (`Device::progress`, busy polling): it takes
    /// one datagram per round, and the ACKs wait for its next round.
    App,
    /// A program's poll through the libibverbs library (`Device::progress_shared`): no next
    /// round is promised, so the ACKs wait at most `ACK_HOLD_NS`.
    Library,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    Worked,
    Idle,
    Stop,
}

impl Core {
    fn now(&self) -> Time {
        to_ns(self.start.elapsed())
    }

    /// Takes the queued commands, what the socket holds, the due timers; sends the result.
    ///
    /// What the commands produced (the application's posts) goes out before the socket
    /// is read, so that a post is not delayed by a `recvmmsg`. In a round the
    /// application runs itself ([`By::App`]), the ACKs for what just arrived are held for
    /// one round ([`Engine::drain_transmits_holding_acks`]): the application's answer,
    /// posted before its next round, then leaves first. Held ACKs make `poll_timeout`
    /// say "now", so the next round, whichever thread runs it, sends them. In a round a
    /// libibverbs program's poll runs ([`By::Library`]) they are held until the program
    /// posts (its answer carries them in the same send: the peer's CQ poll then takes the
    /// ACK and the answer together, and a peer that next polls its memory for that answer
    /// finds it written, with no progress thread woken for it; stock `ib_write_lat` on two
    /// CPUs 19.3 -> 5.9 us) or for `ACK_HOLD_NS`, when the progress thread's timer sends
    /// them (IBA 9.7.5.1.1 lets a responder delay and coalesce ACKs; 40 us is far inside
    /// any requester's timeout).
    ///
    /// `t` is the time the round started: one clock read per round (about 30 ns each in
    /// a VM, and an idle busy-polled round is little more than one `recvmmsg`).
    fn round(&mut self, by: By, t: Time) -> Round {
        let inline = by == By::App;
        if self.shutdown {
            return Round::Stop;
        }
        // Work requests posted straight into the engine count as work to send. They were
        // posted before anything now in the channel (a poster goes direct only when the
        // channel is empty), so they are transmitted first.
        // Set and cleared only under the core's lock, which this round holds: a plain load
        // and store, no locked instruction in an idle round.
        let mut worked = self.posted.load(Ordering::Relaxed);
        if worked {
            self.posted.store(false, Ordering::Relaxed);
        }
        if self.engine.has_queued() {
            self.engine.transmit_queued(t);
            worked = true;
            crate::hop_trace::mark(crate::hop_trace::Step::RequestBuilt);
        }
        worked |= self.take_cmds(CMD_BATCH, t);
        if worked && self.engine.has_pending_transmit() {
            self.transmit(t, false);
        }
        // An application's own round takes one datagram (a GRO batch of up to 64
        // packets) per call: a `recvmmsg` of one header is cheaper to call and to return
        // from than one of 32, and the application calls again at once.
        let max = if inline { 1 } else { crate::transport::RX_BATCH };
        let n = self.link.recv(max);
        if n > 0 && !self.cmds.is_empty() {
            // A work request posted before these packets were read must be in the engine
            // before they are handled: a receive posted while this round ran, then
            // answered by the peer's SEND, would otherwise find no WQE (a UD datagram
            // dropped, an RNR NAK on RC). Everything queued by now, beyond CMD_BATCH too.
            worked |= self.take_cmds(self.cmds.len(), t);
        }
        let mut since_ack = 0;
        for i in 0..n {
            since_ack += self.link.deliver(i, &mut self.engine, t);
            if since_ack >= ACK_EVERY && i + 1 < n && self.engine.has_held_acks() {
                // A long batch (up to 32 GRO datagrams of 64 packets) must not hold the
                // peer's window shut until its end: the ACKs go out every ACK_EVERY
                // packets, so the sender keeps sending while this side works.
                self.transmit(t, false);
                since_ack = 0;
            }
        }
        let received = n > 0;
        worked |= received;
        let timed = self.next_timer.is_some_and(|d| d <= t);
        if timed && self.engine.poll_timeout().is_some_and(|d| d <= t) {
            self.engine.handle_timeout(t);
        }
        if timed && self.link.next_due().is_some_and(|d| d <= t) {
            self.link.maintain(t, &mut self.engine);
        }
        // What arrived and what timed out is handled: the events of its completions go
        // now, before this round's sends (a `sendmsg` on loopback runs the peer's receive:
        // microseconds a sleeping program need not wait).
        self.engine.raise_cq_events();
        if worked || timed {
            let hold = by != By::Progress && received && !timed;
            self.transmit(t, hold);
            // A deadline already running stays: holding again never delays an ACK further.
            self.ack_hold_until = if by == By::Library && hold && self.engine.has_held_acks() {
                Some(self.ack_hold_until.unwrap_or(t + ACK_HOLD_NS))
            } else {
                None
            };
            if received {
                crate::hop_trace::mark(crate::hop_trace::Step::RoundEnded);
            }
            // And those of the completions its sends made (UD, UC).
            self.engine.raise_cq_events();
            while let Some(ev) = self.engine.poll_event() {
                let _ = self.events.send(ev);
            }
            let mut cm = false;
            while let Some(ev) = self.engine.poll_cm_event() {
                let _ = self.cm_events.send(ev);
                cm = true;
            }
            if cm {
                self.cm_fd.notify();
            }
            self.last_work = t;
            let engine_due = match self.ack_hold_until {
                Some(d) => Some(self.engine.poll_timeout_holding_acks().map_or(d, |e| e.min(d))),
                None => self.engine.poll_timeout(),
            };
            self.next_timer = [engine_due, self.link.next_due()].into_iter().flatten().min();
            self.next_due.store(self.next_timer.unwrap_or(NO_TIMER), Ordering::SeqCst);
        }
        if self.shutdown {
            self.link.flush();
            return Round::Stop;
        }
        if worked || timed {
            Round::Worked
        } else {
            Round::Idle
        }
    }

    /// Handles up to `max` queued commands; whether there were any.
    fn take_cmds(&mut self, max: usize, t: Time) -> bool {
        let mut took = false;
        for _ in 0..max {
            match self.cmds.try_recv() {
                Ok(c) => {
                    self.shutdown |= handle(&mut self.engine, self.link.as_mut(), t, c);
                    took = true;
                }
                Err(crossbeam_channel::TryRecvError::Empty) => break,
                Err(crossbeam_channel::TryRecvError::Disconnected) => {
                    self.shutdown = true;
                    break;
                }
            }
        }
        took
    }

    /// Sends the engine's output (keeping the coalesced ACKs for the next round when
    /// `hold_acks`) and what the fault chain has due.
    fn transmit(&mut self, t: Time, hold_acks: bool) {
        if hold_acks {
            self.engine.drain_transmits_holding_acks(&mut self.batch);
        } else {
            self.engine.drain_transmits(&mut self.batch);
        }
        if !self.batch.is_empty() {
            crate::hop_trace::mark(crate::hop_trace::Step::Drained);
        }
        self.link.send(t, &mut self.batch, self.engine.counters());
        for p in self.batch.drain(..) {
            self.engine.recycle(p.data);
        }
        self.link.release(t, self.engine.counters());
    }
}

/// Which threads poll a device through the library: the last one, and how many more
/// library polls count as "several threads polling" since another thread polled.
#[derive(Debug, Default)]
struct Pollers {
    /// The last polling thread's [`thread_token`] (0: none yet).
    last: AtomicU64,
    /// Polls left before a lone poller is assumed again.
    mixed: AtomicU32,
}

/// Library polls after another thread's poll during which the device counts as polled
/// by several threads (UCX's threads alternate every progress call; a program whose
/// second thread polled once falls back after this many of the first's).
const MIXED_POLLS: u32 = 1024;

/// A number of the calling thread's own, never 0.
fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static TOKEN: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    TOKEN.with(|t| *t)
}

impl Pollers {
    /// A library poll by the calling thread.
    #[inline]
    fn note(&self) {
        let me = thread_token();
        let last = self.last.load(Ordering::Relaxed);
        if last != me {
            self.last.store(me, Ordering::Relaxed);
            if last != 0 {
                self.mixed.store(MIXED_POLLS, Ordering::Relaxed);
            }
        } else if self.mixed.load(Ordering::Relaxed) > 0 {
            // Racy with another thread's store: at worst a poll more or less.
            self.mixed.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Whether several threads have been polling lately.
    #[inline]
    fn mixed(&self) -> bool {
        self.mixed.load(Ordering::Relaxed) > 0
    }
}

/// When the application last drove the device itself, as the progress thread sees it.
struct Inline {
    at: Arc<AtomicU64>,
    epoch: Instant,
}

impl Inline {
    /// The application ran a round within `window` ns.
    fn recent(&self, window: u64) -> bool {
        let at = self.at.load(Ordering::Relaxed);
        at != 0 && to_ns(self.epoch.elapsed()).saturating_sub(at) < window
    }
}

/// How long the progress thread stays away once it saw the application drive the
/// device, doubling up to `INLINE_BACKOFF_MAX` while the application keeps driving:
/// each look costs a wake-up (and a context switch on a CPU the application may be
/// polling on), so it looks rarely; when the application stops calling `progress`,
/// its work resumes within that time.
const INLINE_BACKOFF: Duration = Duration::from_micros(200);
/// How often the progress thread looks again at how crowded the CPUs are.
const CROWD_LOOK: Duration = Duration::from_millis(20);

/// Whether every CPU the device may use has a thread to run besides the progress thread
/// (the host's runnable threads, this one included, outnumber them), looked at every
/// `CROWD_LOOK` (a read of `/proc/loadavg`: microseconds, so not per round).
struct Crowd {
    cpus: usize,
    looked: Option<u64>,
    crowded: bool,
}

impl Crowd {
    fn new() -> Crowd {
        Crowd { cpus: rnic_io::cpu::available(), looked: None, crowded: false }
    }

    fn crowded(&mut self, now: u64) -> bool {
        if self.looked.is_none_or(|t| now.saturating_sub(t) >= to_ns(CROWD_LOOK)) {
            self.looked = Some(now);
            self.crowded = rnic_io::cpu::runnable().is_some_and(|n| n > self.cpus);
        }
        self.crowded
    }
}
const INLINE_BACKOFF_MAX: Duration = Duration::from_millis(2);

/// What the progress thread shares with posters: it is (about to be) asleep; work was
/// posted straight into the engine.
struct Flags {
    sleeping: Arc<AtomicBool>,
    posted: Arc<AtomicBool>,
    /// The core's next timer (`Core::next_due`).
    next_due: Arc<AtomicU64>,
}

/// `Core::next_due` when no timer is armed.
const NO_TIMER: Time = Time::MAX;

#[allow(clippy::too_many_arguments)]
fn progress_loop(
    core: Arc<parking_lot::Mutex<Core>>,
    cmds: Receiver<Cmd>,
    fds: Vec<std::os::fd::OwnedFd>,
    waker: Arc<rnic_io::EventFd>,
    flags: Flags,
    inline: Inline,
    spin: Duration,
    wake_boost: bool,
) {
    // Real-time wake-ups (`DeviceConfig::wake_boost`), where the process may: tried once.
    let boost = wake_boost && rnic_io::cpu::set_realtime(true).is_ok() && rnic_io::cpu::set_realtime(false).is_ok();
    let mut boosted = false;
    let Flags { sleeping, posted, next_due } = flags;
    use std::os::fd::AsFd;
    // "Recently" is the spin period, at least 50 us even when spinning is off: an
    // application polling in a loop calls far more often than that.
    let spin_ns = to_ns(spin.max(Duration::from_micros(50)));
    let mut backoff = INLINE_BACKOFF;
    let mut crowd = Crowd::new();
    let mut wake: Vec<std::os::fd::BorrowedFd<'_>> = fds.iter().map(AsFd::as_fd).collect();
    wake.push(waker.as_fd());
    loop {
        // An application thread is driving the device (busy polling through
        // `Device::progress`), or is running a round right now (the lock is taken):
        // stay out of its way, and off its lock, rather than compete with it for a
        // CPU. (Shutdown comes as a command: once the application stops calling
        // `progress`, the next look handles it.) The sleep does not watch the wire: a
        // program that polls its memory rather than the CQ can wait out a backoff for a
        // packet (suspected in stock ib_write_lat's latency on 16 cores; unmeasured).
        let guard = if inline.recent(spin_ns) { None } else { core.try_lock() };
        let Some(mut c) = guard else {
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(INLINE_BACKOFF_MAX);
            continue;
        };
        backoff = INLINE_BACKOFF;
        let now = c.now();
        let (round, last_work) = {
            let r = c.round(By::Progress, now);
            (r, c.last_work)
        };
        drop(c);
        if boosted {
            // The round it woke for is done: the rest runs as any thread does.
            boosted = false;
            let _ = rnic_io::cpu::set_realtime(false);
        }
        match round {
            Round::Stop => return,
            Round::Worked => continue,
            Round::Idle => {}
        }
        if now.saturating_sub(last_work) < to_ns(spin) && !crowd.crowded(now) {
            // Spin before sleeping, yielding (a thread that needs this CPU runs at once),
            // but only while some CPU has nothing to run: where every CPU is busy (two
            // processes busy polling on two cores), spinning only takes a CPU from a
            // thread the next packet waits for (stock ib_write_lat on 2 cores: 65-139 us
            // typical spinning, 19-22 us sleeping at once), and a thread that slept is
            // woken promptly (the scheduler favours it).
            std::thread::yield_now();
            continue;
        }
        sleeping.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        // The timer again, now that `sleeping` is visible: a round a program's thread ran
        // since this thread's own (a libibverbs poll holding ACKs, arming a retry) either
        // published an earlier timer before this load, or sees `sleeping` and wakes it
        // (`Shard::try_progress`); before, it could sleep past that timer.
        let wait = match next_due.load(Ordering::SeqCst) {
            NO_TIMER => None,
            due => Some(Duration::from_nanos(due.saturating_sub(to_ns(inline.epoch.elapsed())))),
        };
        if cmds.is_empty() && !posted.load(Ordering::SeqCst) {
            if boost && !boosted {
                // Asleep as a real-time thread, woken as one: the packet is handled
                // now, not when a busy-polling thread on this CPU reaches the
                // scheduler's next tick (2-4 ms on two CPUs; it was stock
                // ib_write_lat's 99th percentile).
                boosted = rnic_io::cpu::set_realtime(true).is_ok();
            }
            let _ = rnic_io::wait_readable(&wake, wait);
        }
        sleeping.store(false, Ordering::SeqCst);
        waker.clear();
    }
}

fn handle(engine: &mut Engine, link: &mut dyn Transport, now: u64, cmd: Cmd) -> bool {
    match cmd {
        Cmd::CreateQp { init, reply } => {
            let _ = reply.send(engine.create_qp(init));
        }
        Cmd::ModifyQp { qpn, attr, reply } => {
            let _ = reply.send(engine.modify_qp(now, qpn, &attr));
        }
        Cmd::QueryQp { qpn, reply } => {
            let _ = reply.send(engine.query_qp(qpn));
        }
        Cmd::DestroyQp { qpn, reply } => {
            for group in engine.detach_all_mcast(qpn) {
                link.leave(group);
            }
            let _ = reply.send(engine.destroy_qp(qpn));
        }
        Cmd::Mcast { qpn, group, attach: true, reply } => {
            let r = match engine.attach_mcast(qpn, group) {
                Ok(true) => link.join(group).map_err(|e| {
                    // Not on the wire: not attached either.
                    let _ = engine.detach_mcast(qpn, group);
                    McastRefusal::Wire(e)
                }),
                Ok(false) => Ok(()),
                Err(e) => Err(McastRefusal::Engine(e)),
            };
            let _ = reply.send(r);
        }
        Cmd::Mcast { qpn, group, attach: false, reply } => {
            let r = engine.detach_mcast(qpn, group).map(|last| {
                if last {
                    link.leave(group);
                }
            });
            let _ = reply.send(r.map_err(McastRefusal::Engine));
        }
        Cmd::PostSend(qpn, wqe) => engine.post_send(now, qpn, wqe),
        Cmd::PostRecv(qpn, wqe) => engine.post_recv(qpn, wqe),
        Cmd::Cm(f) => f(engine.cm(), now),
        Cmd::Shutdown => return true,
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One thread polling alone never counts as several; another thread's poll makes the
    /// device count as polled by several for `MIXED_POLLS` polls, then it is alone again.
    #[test]
    fn pollers_tell_one_polling_thread_from_several() {
        let p = Pollers::default();
        for _ in 0..5000 {
            p.note();
            assert!(!p.mixed(), "a lone poller never yields");
        }
        std::thread::scope(|s| {
            s.spawn(|| p.note());
        });
        assert!(p.mixed(), "another thread polled");
        // Its first poll after the other's is a change of thread too.
        for _ in 0..=MIXED_POLLS {
            p.note();
        }
        assert!(!p.mixed(), "alone again after {MIXED_POLLS} polls of its own");
        // Threads taking turns keep it set.
        for _ in 0..100 {
            std::thread::scope(|s| {
                s.spawn(|| p.note());
            });
            p.note();
            assert!(p.mixed());
        }
    }
}
