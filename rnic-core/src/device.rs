//! The driver: runs one [`Engine`] on a progress thread over the UDP transport.
//!
//! ```text
//!  application threads                progress thread               RX thread
//!  post_send: validate on the caller  --Cmd::PostSend-->  engine  <--Cmd::Rx(batch)--  recv + ICRC check
//!  modify/create: Cmd + reply channel                     |  tx batch
//!  poll_cq: lock-free CQ  <------- completions -----------+--> UDP send (ICRC filled)
//! ```
//!
//! No lock is shared between the posting thread and the progress thread on the
//! per-packet path: work requests travel through a crossbeam channel, completions
//! through each CQ's lock-free queue, counters are atomics.

use crate::capture::Capture;
use crate::counters::Counters;
use crate::cq::Cq;
use crate::engine::qp::{self, PostError, QpAttr, QpCap, QpShared, RecvWqe, SendWqe};
use crate::engine::{AsyncEvent, Engine, EngineConfig, EngineError, Time, TxPacket};
use crate::faults::{FaultHandle, Faults, Wire};
use crate::mem::{MemBlock, MemError};
use crate::mr::{AccessFlags, MrError, MrKeys, Mtpt, PdId};
use crate::qp_state::QpType;
use crate::srq::Srq;
use crate::wr::{RecvWr, SendWr};
use crossbeam_channel::{Receiver, Sender};
use rnic_wire::icrc::IcrcContext;
use rnic_wire::{Qpn, ROCEV2_UDP_PORT};
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How to open a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Name (`rnic0`).
    pub name: String,
    /// The local address the device binds (its GID is the IPv4-mapped form).
    pub ip: IpAddr,
    /// UDP port (4791 unless testing).
    pub port: u16,
    /// Pin registered memory with mlock, as a real driver does.
    pub pin_memory: bool,
    /// Write every packet sent and received to this pcap file.
    pub capture: Option<PathBuf>,
    /// Memory regions the device can hold.
    pub max_mr: u32,
    /// Fault injection on every packet this device sends (real time). When `None`, the
    /// `RNIC_FAULTS` environment variable is read at open (`loss=0.05,seed=7`, see
    /// [`Faults::from_spec`]).
    pub faults: Option<FaultHandle>,
}

impl DeviceConfig {
    /// A device `name` at `ip`, port 4791, pinning on, capture from `RNIC_PCAP` if set.
    pub fn new(name: impl Into<String>, ip: IpAddr) -> DeviceConfig {
        DeviceConfig {
            name: name.into(),
            ip,
            port: ROCEV2_UDP_PORT,
            pin_memory: true,
            capture: std::env::var_os("RNIC_PCAP").map(PathBuf::from),
            max_mr: 1 << 16,
            faults: None,
        }
    }
}

/// Why opening a device or registering memory failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// The UDP socket could not be bound.
    #[error("device {name}: cannot bind UDP {addr}: {source}")]
    Bind {
        /// Device name.
        name: String,
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: io::Error,
    },
    /// The capture file could not be created.
    #[error("device {name}: cannot create capture file {path}: {source}")]
    Capture {
        /// Device name.
        name: String,
        /// Path.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
    /// Any other I/O failure.
    #[error("device {name}: {source}")]
    Io {
        /// Device name.
        name: String,
        /// Cause.
        source: io::Error,
    },
    /// Registration was refused.
    #[error(transparent)]
    Mr(#[from] MrError),
    /// Memory could not be mapped or pinned.
    #[error(transparent)]
    Mem(#[from] MemError),
    /// `RNIC_FAULTS` does not parse.
    #[error("device {name}: RNIC_FAULTS: {reason}")]
    Faults {
        /// Device name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The progress thread has stopped.
    #[error("device {0}: the progress thread has stopped")]
    Stopped(String),
}

enum Cmd {
    CreateQp {
        qp_type: QpType,
        pd: PdId,
        cap: QpCap,
        sq_sig_all: bool,
        send_cq: Arc<Cq>,
        recv_cq: Arc<Cq>,
        srq: Option<Arc<Srq>>,
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
    Rx(Vec<Datagram>),
    Shutdown,
}

struct Datagram {
    src: IpAddr,
    data: Vec<u8>,
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
    mtpt: Arc<Mtpt>,
    counters: Arc<Counters>,
    cmd: Sender<Cmd>,
    events: Receiver<AsyncEvent>,
    next_pd: AtomicU32,
    next_cq: AtomicU32,
    next_srq: AtomicU32,
    stop: Arc<AtomicBool>,
    threads: parking_lot::Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("name", &self.config.name).field("local", &self.local).finish()
    }
}

fn bind(config: &DeviceConfig) -> Result<UdpSocket, DeviceError> {
    let addr = SocketAddr::new(config.ip, config.port);
    let err = |source| DeviceError::Bind { name: config.name.clone(), addr, source };
    let domain = if config.ip.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)).map_err(err)?;
    s.set_recv_buffer_size(8 << 20).map_err(err)?;
    s.set_send_buffer_size(8 << 20).map_err(err)?;
    if config.ip.is_ipv4() {
        // IPv4 ID 0 and DF on every datagram, so the ICRC is computable at both ends.
        crate::sys::set_pmtudisc_do(&s).map_err(err)?;
    }
    s.bind(&addr.into()).map_err(err)?;
    let u: UdpSocket = s.into();
    u.set_read_timeout(Some(Duration::from_millis(50))).map_err(err)?;
    Ok(u)
}

impl Device {
    /// Opens a device: binds its UDP port and starts its progress and receive threads.
    pub fn open(mut config: DeviceConfig) -> Result<Device, DeviceError> {
        if config.faults.is_none() {
            if let Some(spec) = std::env::var_os("RNIC_FAULTS") {
                let spec = spec.to_string_lossy();
                let f = Faults::from_spec(&spec)
                    .map_err(|reason| DeviceError::Faults { name: config.name.clone(), reason })?;
                config.faults = (!f.is_empty()).then(|| FaultHandle::new(f));
            }
        }
        let sock = bind(&config)?;
        let local = sock.local_addr().map_err(|source| DeviceError::Io { name: config.name.clone(), source })?;
        let capture = match &config.capture {
            Some(p) => Some(Capture::shared(p, local.ip()).map_err(|source| DeviceError::Capture {
                name: config.name.clone(),
                path: p.clone(),
                source,
            })?),
            None => None,
        };
        let mtpt = Arc::new(Mtpt::new(config.max_mr));
        let counters = Arc::new(Counters::default());
        let (cmd_tx, cmd_rx) = crossbeam_channel::unbounded();
        let (ev_tx, ev_rx) = crossbeam_channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        // The one port is up as soon as the socket is bound (IBV_EVENT_PORT_ACTIVE).
        let _ = ev_tx.send(AsyncEvent::PortActive { port: 1 });
        let engine = Engine::new(EngineConfig::new(local.ip()), mtpt.clone(), counters.clone());
        let io_err = |source| DeviceError::Io { name: config.name.clone(), source };
        let tx_sock = sock.try_clone().map_err(io_err)?;
        let progress = {
            let cap = capture.clone();
            let faults = config.faults.clone();
            std::thread::Builder::new()
                .name(format!("{}-progress", config.name))
                .spawn(move || progress_loop(engine, cmd_rx, tx_sock, local, ev_tx, cap, faults))
                .map_err(io_err)?
        };
        let rx = {
            let (cmd, stop, counters, cap) = (cmd_tx.clone(), stop.clone(), counters.clone(), capture);
            std::thread::Builder::new()
                .name(format!("{}-rx", config.name))
                .spawn(move || rx_loop(sock, local, cmd, stop, counters, cap))
                .map_err(io_err)?
        };
        Ok(Device {
            inner: Arc::new(Inner {
                config,
                local,
                mtpt,
                counters,
                cmd: cmd_tx,
                events: ev_rx,
                next_pd: AtomicU32::new(1),
                next_cq: AtomicU32::new(1),
                next_srq: AtomicU32::new(1),
                stop,
                threads: parking_lot::Mutex::new(vec![progress, rx]),
            }),
        })
    }

    /// The fault-injection chain applied to this device's packets, if any.
    pub fn faults(&self) -> Option<&FaultHandle> {
        self.inner.config.faults.as_ref()
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

    /// The device's counters.
    pub fn counters(&self) -> &Arc<Counters> {
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

    /// Creates a completion queue of `depth` entries.
    pub fn create_cq(&self, depth: usize) -> Arc<Cq> {
        Arc::new(Cq::new(self.inner.next_cq.fetch_add(1, Ordering::Relaxed), depth))
    }

    fn call<T>(&self, make: impl FnOnce(Sender<T>) -> Cmd) -> Result<T, DeviceError> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.inner.cmd.send(make(tx)).map_err(|_| DeviceError::Stopped(self.name().into()))?;
        rx.recv().map_err(|_| DeviceError::Stopped(self.name().into()))
    }

    /// Creates a QP in the RESET state.
    pub fn create_qp(
        &self,
        qp_type: QpType,
        pd: PdId,
        cap: QpCap,
        sq_sig_all: bool,
        send_cq: Arc<Cq>,
        recv_cq: Arc<Cq>,
    ) -> Result<Result<Arc<QpShared>, EngineError>, DeviceError> {
        self.create_qp_with_srq(qp_type, pd, cap, sq_sig_all, send_cq, recv_cq, None)
    }

    /// Creates a QP in the RESET state that takes its receive WQEs from `srq`.
    #[allow(clippy::too_many_arguments)]
    pub fn create_qp_with_srq(
        &self,
        qp_type: QpType,
        pd: PdId,
        cap: QpCap,
        sq_sig_all: bool,
        send_cq: Arc<Cq>,
        recv_cq: Arc<Cq>,
        srq: Option<Arc<Srq>>,
    ) -> Result<Result<Arc<QpShared>, EngineError>, DeviceError> {
        self.call(|reply| Cmd::CreateQp { qp_type, pd, cap, sq_sig_all, send_cq, recv_cq, srq, reply })
    }

    /// Creates a shared receive queue of `max_wr` WQEs of up to `max_sge` SGEs in `pd`.
    pub fn create_srq(&self, pd: PdId, max_wr: u32, max_sge: u32) -> Arc<Srq> {
        Arc::new(Srq::new(self.inner.next_srq.fetch_add(1, Ordering::Relaxed), pd, max_wr, max_sge))
    }

    /// Posts a receive WQE to a shared receive queue (validated on the calling thread,
    /// queued lock-free; no command to the progress thread).
    pub fn post_srq_recv(&self, srq: &Srq, wr: &RecvWr) -> Result<(), PostError> {
        srq.post_recv(&self.inner.mtpt, wr)
    }

    /// Modifies a QP (checked against IBA's table by the engine).
    pub fn modify_qp(&self, qpn: Qpn, attr: QpAttr) -> Result<Result<(), EngineError>, DeviceError> {
        self.call(|reply| Cmd::ModifyQp { qpn, attr, reply })
    }

    /// Reads a QP's attributes.
    pub fn query_qp(&self, qpn: Qpn) -> Result<Result<QpAttr, EngineError>, DeviceError> {
        self.call(|reply| Cmd::QueryQp { qpn, reply })
    }

    /// Destroys a QP.
    pub fn destroy_qp(&self, qpn: Qpn) -> Result<Result<(), EngineError>, DeviceError> {
        self.call(|reply| Cmd::DestroyQp { qpn, reply })
    }

    /// Validates a send WR on the calling thread and hands it to the engine.
    pub fn post_send(&self, qp: &QpShared, wr: &SendWr) -> Result<(), PostError> {
        let wqe = qp::validate_send(qp, &self.inner.mtpt, wr)?;
        self.hand_over(Cmd::PostSend(qp.qpn, wqe), &qp.sq_outstanding);
        Ok(())
    }

    /// Hands an already validated send WQE to the engine.
    pub fn post_send_wqe(&self, qp: &QpShared, wqe: SendWqe) {
        self.hand_over(Cmd::PostSend(qp.qpn, wqe), &qp.sq_outstanding);
    }

    /// Validates a receive WR on the calling thread and hands it to the engine.
    pub fn post_recv(&self, qp: &QpShared, wr: &RecvWr) -> Result<(), PostError> {
        let wqe = qp::validate_recv(qp, &self.inner.mtpt, wr)?;
        self.hand_over(Cmd::PostRecv(qp.qpn, wqe), &qp.rq_outstanding);
        Ok(())
    }

    fn hand_over(&self, cmd: Cmd, slot: &AtomicU32) {
        if self.inner.cmd.send(cmd).is_err() {
            // The device is shutting down: release the reserved slot.
            slot.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.cmd.send(Cmd::Shutdown);
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}

fn to_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Packets the fault chain delays, in send order.
struct Delayed {
    at: Time,
    seq: u64,
    pkt: Wire,
}
impl PartialEq for Delayed {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Delayed {}
impl PartialOrd for Delayed {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Delayed {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq)) // min-heap
    }
}

/// The transmit side of the progress thread: ICRC, fault injection, capture, send.
struct Tx {
    sock: UdpSocket,
    local: SocketAddr,
    capture: Option<Arc<Capture>>,
    faults: Option<FaultHandle>,
    delayed: std::collections::BinaryHeap<Delayed>,
    seq: u64,
}

impl Tx {
    /// When a delayed or held packet is next due.
    fn next_due(&self) -> Option<Time> {
        let held = self.faults.as_ref().and_then(|f| f.lock().next_release());
        [self.delayed.peek().map(|d| d.at), held].into_iter().flatten().min()
    }

    /// Sends what the fault chain delayed or held and is due at `now`.
    fn release(&mut self, now: Time, counters: &Counters) {
        let mut due = Vec::new();
        while self.delayed.peek().is_some_and(|d| d.at <= now) {
            due.push(self.delayed.pop().expect("peeked").pkt);
        }
        if let Some(f) = &self.faults {
            f.lock().release_due(now, |w| due.push(w));
        }
        for w in due {
            self.put(&w.data, w.dst, counters);
        }
    }

    fn put(&self, data: &[u8], dst: IpAddr, counters: &Counters) {
        if let Some(c) = &self.capture {
            c.record(self.local.ip(), dst, self.local.port(), ROCEV2_UDP_PORT, data);
        }
        if self.sock.send_to(data, SocketAddr::new(dst, ROCEV2_UDP_PORT)).is_err() {
            counters.send_err.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sends a batch, filling each ICRC for the headers the kernel will write (unconnected
    /// socket, `IP_PMTUDISC_DO`: IPv4 ID 0, DF; the source port is the bound port), then
    /// passing it through the fault chain if there is one (after the ICRC, so that a
    /// corrupted packet fails its check at the receiver).
    fn send_batch(&mut self, now: Time, batch: &mut Vec<TxPacket>, counters: &Counters, engine: &mut Engine) {
        for mut p in batch.drain(..) {
            let ctx = IcrcContext::new(self.local.ip(), p.dst, self.local.port(), ROCEV2_UDP_PORT);
            if ctx.fill(&mut p.data).is_err() {
                counters.send_err.fetch_add(1, Ordering::Relaxed);
                engine.recycle(p.data);
                continue;
            }
            let Some(faults) = self.faults.clone() else {
                self.put(&p.data, p.dst, counters);
                engine.recycle(p.data);
                continue;
            };
            let w = Wire { src: self.local.ip(), dst: p.dst, src_port: self.local.port(), data: p.data };
            let mut later = Vec::new();
            faults.lock().apply(now, w, |extra, w| {
                if extra == 0 {
                    self.put(&w.data, w.dst, counters);
                } else {
                    later.push((now.saturating_add(extra), w));
                }
            });
            for (at, pkt) in later {
                self.seq += 1;
                self.delayed.push(Delayed { at, seq: self.seq, pkt });
            }
        }
    }
}

fn progress_loop(
    mut engine: Engine,
    cmds: Receiver<Cmd>,
    sock: UdpSocket,
    local: SocketAddr,
    events: Sender<AsyncEvent>,
    capture: Option<Arc<Capture>>,
    faults: Option<FaultHandle>,
) {
    let start = Instant::now();
    let now = || to_ns(start.elapsed());
    let mut batch: Vec<TxPacket> = Vec::with_capacity(256);
    let mut tx = Tx { sock, local, capture, faults, delayed: std::collections::BinaryHeap::new(), seq: 0 };
    loop {
        let deadline = [engine.poll_timeout(), tx.next_due()].into_iter().flatten().min();
        let wait = deadline.map(|t| Duration::from_nanos(t.saturating_sub(now())));
        let first = match wait {
            Some(d) => match cmds.recv_timeout(d) {
                Ok(c) => Some(c),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => None,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            },
            None => match cmds.recv() {
                Ok(c) => Some(c),
                Err(_) => return,
            },
        };
        let mut shutdown = false;
        if let Some(c) = first {
            shutdown |= handle(&mut engine, now(), c);
            for _ in 0..256 {
                match cmds.try_recv() {
                    Ok(c) => shutdown |= handle(&mut engine, now(), c),
                    Err(_) => break,
                }
            }
        }
        let t = now();
        if engine.poll_timeout().is_some_and(|d| d <= t) {
            engine.handle_timeout(t);
        }
        engine.drain_transmits(&mut batch);
        let counters = engine.counters().clone();
        tx.send_batch(t, &mut batch, &counters, &mut engine);
        tx.release(t, &counters);
        while let Some(ev) = engine.poll_event() {
            let _ = events.send(ev);
        }
        if shutdown {
            if let Some(c) = &tx.capture {
                c.flush();
            }
            return;
        }
    }
}

fn handle(engine: &mut Engine, now: u64, cmd: Cmd) -> bool {
    match cmd {
        Cmd::CreateQp { qp_type, pd, cap, sq_sig_all, send_cq, recv_cq, srq, reply } => {
            let _ = reply.send(engine.create_qp_with_srq(qp_type, pd, cap, sq_sig_all, send_cq, recv_cq, srq));
        }
        Cmd::ModifyQp { qpn, attr, reply } => {
            let _ = reply.send(engine.modify_qp(now, qpn, &attr));
        }
        Cmd::QueryQp { qpn, reply } => {
            let _ = reply.send(engine.query_qp(qpn));
        }
        Cmd::DestroyQp { qpn, reply } => {
            let _ = reply.send(engine.destroy_qp(qpn));
        }
        Cmd::PostSend(qpn, wqe) => engine.post_send(now, qpn, wqe),
        Cmd::PostRecv(qpn, wqe) => engine.post_recv(qpn, wqe),
        Cmd::Rx(batch) => {
            for d in batch {
                engine.handle_packet(now, d.src, &d.data);
            }
        }
        Cmd::Shutdown => return true,
    }
    false
}

fn rx_loop(
    sock: UdpSocket,
    local: SocketAddr,
    cmds: Sender<Cmd>,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    capture: Option<Arc<Capture>>,
) {
    const BATCH: usize = 64;
    let mut buf = vec![0u8; 65536];
    let mut batch = Vec::with_capacity(BATCH);
    // Takes one datagram into the batch if its ICRC verifies.
    let accept = |n: usize, from: SocketAddr, buf: &[u8], batch: &mut Vec<Datagram>| {
        let data = &buf[..n];
        let ctx = IcrcContext::new(from.ip(), local.ip(), from.port(), local.port());
        if ctx.verify(data).is_err() {
            // IBA C9-3: a bad ICRC is dropped silently (and counted here).
            counters.icrc_err.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if let Some(c) = &capture {
            c.record_rx(from.ip(), local.ip(), from.port(), local.port(), data);
        }
        batch.push(Datagram { src: from.ip(), data: data.to_vec() });
    };
    while !stop.load(Ordering::Acquire) {
        // Block (up to the read timeout) for the first datagram...
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => accept(n, from, &buf, &mut batch),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => continue,
            Err(_) => {
                counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        }
        // ...then take what is already queued without waiting: two mode switches per
        // batch rather than per datagram.
        if sock.set_nonblocking(true).is_ok() {
            while batch.len() < BATCH {
                match sock.recv_from(&mut buf) {
                    Ok((n, from)) => accept(n, from, &buf, &mut batch),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            let _ = sock.set_nonblocking(false);
        }
        if !batch.is_empty() && cmds.send(Cmd::Rx(std::mem::take(&mut batch))).is_err() {
            return;
        }
    }
}
