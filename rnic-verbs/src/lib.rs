//! # rnic-verbs: a verbs-like API over the rnic emulated RoCEv2 HCA
//!
//! The shapes follow libibverbs (and rust-ibverbs): a device [`Context`], protection
//! domains, memory regions, completion queues and queue pairs. Handles own their
//! parents through `Arc`, so a QP keeps its PD, CQs and device alive, and any of them can
//! be stored together in one struct.
//!
//! Bringing up an RC connection takes three steps:
//! 1. [`ProtectionDomain::qp_builder`] ... [`QpBuilder::build`] gives a [`PreparedQp`]
//!    (in INIT) whose [`Endpoint`] (QPN, GID, PSN; serde) you send to the peer out of
//!    band;
//! 2. [`PreparedQp::connect`] with the peer's endpoint moves it INIT -> RTR -> RTS;
//! 3. post work requests and poll completions on the [`QueuePair`].
//!
//! [`QueuePair::modify`] is the checked escape hatch for everything else.
//!
//! UC uses the same steps with `.qp_type(QpType::Uc)` (SEND and RDMA WRITE, no READ, no
//! acknowledgements: a lost packet loses its message silently). UD is not connected:
//! `.qp_type(QpType::Ud).qkey(..)`, then [`PreparedQp::activate`]; each send names its
//! destination with an [`AddressHandle`] ([`ProtectionDomain::create_ah`]) and the remote
//! QPN and Q_Key, and every receive buffer starts with [`GRH_LEN`] bytes of GRH:
//!
//! ```no_run
//! use rnic_verbs::*;
//! # let ctx = Context::open("rnic0")?;
//! # let pd = ctx.alloc_pd();
//! # let cq = ctx.create_cq(64)?;
//! # let mr = pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE)?;
//! # let peer: Endpoint = unimplemented!();
//! let qp = pd.qp_builder(&cq, &cq).qp_type(QpType::Ud).qkey(0x1111_1111).build()?.activate()?;
//! qp.post_recv(&RecvWr { wr_id: 1, sg_list: vec![mr.sge(0, (GRH_LEN + 1024) as u32)] })?;
//! let ah = pd.create_ah(peer.gid)?;       // the peer's GID (from its Endpoint)
//! qp.post_send(&SendWr::send(2, vec![mr.sge(2048, 64)]).to(ah.dest(peer.qpn, 0x1111_1111)))?;
//! # Ok::<(), rnic_verbs::Error>(())
//! ```
//!
//! ```no_run
//! use rnic_verbs::*;
//! let ctx = Context::open("rnic0")?;
//! let pd = ctx.alloc_pd();
//! let cq = ctx.create_cq(64)?;
//! let mr = pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
//! let prepared = pd.qp_builder(&cq, &cq).build()?;
//! let mine = prepared.endpoint();          // send this to the peer...
//! # let theirs = mine.clone();
//! let qp = prepared.connect(&theirs)?;     // ...and connect with theirs
//! qp.post_send(&SendWr::send(1, vec![mr.sge(0, 64)]))?;
//! # Ok::<(), rnic_verbs::Error>(())
//! ```
#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

#[cfg(feature = "hw")]
pub mod hw;

mod cm;
pub use cm::{CmEvent, ConnectRequest, Connection, REQ_PRIVATE_DATA};

use rnic_core::cq::Cq;
use rnic_core::device::Device;
use rnic_core::engine::qp::QpShared;
use rnic_core::mem::MemBlock;
use rnic_core::mr::{MrKeys, PdId};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use rnic_core::capture::Capture;
pub use rnic_core::engine::qp::{QpAttr, QpCap, PORT_MTU};
pub use rnic_core::engine::ud::GRH_LEN;
pub use rnic_core::engine::AsyncEvent;
pub use rnic_core::mr::AccessFlags;
pub use rnic_core::qp_state::{PathMtu, QpAttrMask, QpState, QpType};
pub use rnic_core::srq::SrqError;
// What a program configures and what its errors carry, reachable from this crate alone:
// device configuration, fault-injection rules, the error causes, opcodes.
pub use rnic_core::device::{DeviceConfig, DeviceError};
pub use rnic_core::engine::qp::PostError;
pub use rnic_core::engine::EngineError;
pub use rnic_core::faults::{Fault, FaultHandle, Faults};
pub use rnic_core::wr::{
    RecvWr, RecvWrRef, SendFlags, SendOp, SendWr, SendWrRef, Sge, UdDest, WcFlags, WcOpcode, WcStatus, WorkCompletion,
    FLUSH_GLOBAL, FLUSH_PERSISTENT,
};
pub use rnic_wire::Opcode;

/// Every way a verbs call can fail. Each variant names the operation; a failed work
/// completion is not an error but data in [`WorkCompletion::status`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No device of that name is configured.
    #[error("no device named {name:?} (configured: {known}); set RNIC_DEVICES=name=ip,... to add one")]
    NoSuchDevice {
        /// The name asked for.
        name: String,
        /// The names known.
        known: String,
    },
    /// An environment variable's value does not parse.
    #[error("{var}: {why}")]
    BadConfig {
        /// The variable.
        var: &'static str,
        /// What is wrong, naming the bad entry.
        why: String,
    },
    /// Opening the device failed.
    #[error("open device")]
    OpenDevice(#[source] DeviceError),
    /// Registering memory failed.
    #[error("register memory region")]
    RegMr(#[source] DeviceError),
    /// Creating a QP failed.
    #[error("create QP")]
    CreateQp(#[source] EngineError),
    /// Modifying a QP failed.
    #[error("modify QP {qpn:#x}")]
    ModifyQp {
        /// The QP.
        qpn: u32,
        /// Why.
        #[source]
        source: EngineError,
    },
    /// Querying a QP failed.
    #[error("query QP {qpn:#x}")]
    QueryQp {
        /// The QP.
        qpn: u32,
        /// Why.
        #[source]
        source: EngineError,
    },
    /// Posting a send work request failed.
    #[error("post send on QP {qpn:#x}")]
    PostSend {
        /// The QP.
        qpn: u32,
        /// Why.
        #[source]
        source: PostError,
    },
    /// Posting a receive work request failed.
    #[error("post receive on QP {qpn:#x}")]
    PostRecv {
        /// The QP.
        qpn: u32,
        /// Why.
        #[source]
        source: PostError,
    },
    /// A work request of a list was refused; those before it were posted.
    #[error("post {queue} list on QP {qpn:#x}: work request {index} refused ({index} before it posted)")]
    PostList {
        /// The QP.
        qpn: u32,
        /// "send" or "receive".
        queue: &'static str,
        /// Its place in the list (0-based) = how many were posted.
        index: usize,
        /// Why.
        #[source]
        source: PostError,
    },
    /// A memory region access by the application was out of range.
    #[error("memory region access")]
    MrAccess(#[source] rnic_core::mem::MemError),
    /// A connection-management call failed (a rejection, nobody listening, no answer, a
    /// call that does not fit the connection's state).
    #[error("CM {op}: {why}")]
    Cm {
        /// The call.
        op: &'static str,
        /// Why.
        why: String,
    },
    /// A connect step failed.
    #[error("connect QP {qpn:#x} ({step})")]
    Connect {
        /// The QP.
        qpn: u32,
        /// "INIT->RTR" or "RTR->RTS".
        step: &'static str,
        /// Why.
        #[source]
        source: EngineError,
    },
    /// An argument was invalid.
    #[error("{op}: {why}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What was wrong.
        why: String,
    },
    /// The device's threads have stopped.
    #[error("device stopped")]
    DeviceStopped(#[source] DeviceError),
    /// Waiting for completions timed out.
    #[error("timed out after {0:?} waiting for completions")]
    Timeout(Duration),
    /// No event arrived in time (`get_cq_event`, `get_async_event`).
    #[error("timed out after {0:?} waiting for an event")]
    EventTimeout(Duration),
    /// Posting to a shared receive queue failed.
    #[error("post receive on SRQ {srq}")]
    PostSrqRecv {
        /// The SRQ.
        srq: u32,
        /// Why.
        #[source]
        source: PostError,
    },
    /// Modifying a shared receive queue failed.
    #[error("modify SRQ {srq}")]
    ModifySrq {
        /// The SRQ.
        srq: u32,
        /// Why.
        #[source]
        source: SrqError,
    },
    /// More CQ events acknowledged than were delivered (`ibv_ack_cq_events`).
    #[error("CQ {cq}: acknowledging {n} events but only {outstanding} are unacknowledged")]
    AckCqEvents {
        /// The CQ.
        cq: u32,
        /// Events acknowledged.
        n: u32,
        /// Events delivered and not yet acknowledged.
        outstanding: u32,
    },
    /// A CQ was destroyed with events delivered but not acknowledged (`ibv_destroy_cq`
    /// would wait forever).
    #[error("destroy CQ {cq}: {outstanding} events delivered by get_cq_event are not acknowledged")]
    UnackedCqEvents {
        /// The CQ.
        cq: u32,
        /// Events not acknowledged.
        outstanding: u32,
    },
}

impl Error {
    /// The error and every cause under it on one line (`post send on QP 0x11: ...: ...`).
    /// `Display` shows this error alone and [`source`](std::error::Error::source) returns
    /// its cause, so a program printing errors should print this (or walk the chain).
    pub fn report(&self) -> String {
        report(self)
    }
}

/// Any error with every cause under it on one line, joined by `: ` (each cause's text
/// once: an error whose `Display` already ends with its cause's text is not repeated).
pub fn report(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.ends_with(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// Result with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// A configured device: a name and the local IP address it binds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Name (`rnic0`).
    pub name: String,
    /// Address.
    pub ip: IpAddr,
}

/// The devices this process may open: `RNIC_DEVICES` (`rnic0=127.0.0.1,rnic1=127.0.0.2`)
/// or, when it is unset, `rnic0` on 127.0.0.1 and `rnic1` on 127.0.0.2. A value that does
/// not parse is an error naming the bad entry (never a silent fallback to the defaults).
pub fn devices() -> Result<Vec<DeviceInfo>> {
    match std::env::var("RNIC_DEVICES") {
        Ok(spec) => parse_devices(&spec),
        Err(std::env::VarError::NotPresent) => Ok(vec![
            DeviceInfo { name: "rnic0".into(), ip: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)) },
            DeviceInfo { name: "rnic1".into(), ip: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)) },
        ]),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(Error::BadConfig { var: "RNIC_DEVICES", why: "the value is not UTF-8".into() })
        }
    }
}

/// Parses `name=ip,name=ip,...` strictly: every entry `name=address`, names non-empty and
/// distinct, addresses plain IPv4 or IPv6 (a port is the device's business, not this list's).
pub fn parse_devices(spec: &str) -> Result<Vec<DeviceInfo>> {
    let bad = |why: String| Error::BadConfig { var: "RNIC_DEVICES", why };
    let mut out: Vec<DeviceInfo> = Vec::new();
    for entry in spec.split(',') {
        let entry = entry.trim();
        let Some((name, ip)) = entry.split_once('=') else {
            return Err(bad(format!("entry {entry:?} is not name=address")));
        };
        let (name, ip) = (name.trim(), ip.trim());
        if name.is_empty() {
            return Err(bad(format!("entry {entry:?} has an empty device name")));
        }
        let ip: IpAddr = ip.parse().map_err(|_| {
            if ip.contains(':')
                && ip.rsplit_once(':').is_some_and(|(h, p)| h.parse::<IpAddr>().is_ok() && p.parse::<u16>().is_ok())
            {
                bad(format!("entry {entry:?}: {ip:?} has a port; give the address alone (devices use UDP 4791)"))
            } else {
                bad(format!("entry {entry:?}: {ip:?} is not an IP address"))
            }
        })?;
        if out.iter().any(|d| d.name == name) {
            return Err(bad(format!("device {name:?} is named twice")));
        }
        out.push(DeviceInfo { name: name.to_string(), ip });
    }
    Ok(out)
}

/// A RoCEv2 GID: for IPv4, the IPv4-mapped IPv6 address (`::ffff:a.b.c.d`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID of an address.
    pub fn from_ip(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(a) => Gid(a.to_ipv6_mapped().octets()),
            IpAddr::V6(a) => Gid(a.octets()),
        }
    }

    /// The address a GID stands for (IPv4 for mapped GIDs).
    pub fn to_ip(self) -> IpAddr {
        let a = Ipv6Addr::from(self.0);
        match a.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(a),
        }
    }

    /// 32 hex digits, network order (the form ibv_rc_pingpong exchanges).
    pub fn to_wire_hex(self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses 32 hex digits.
    pub fn from_wire_hex(s: &str) -> Option<Gid> {
        if s.len() != 32 {
            return None;
        }
        let mut g = [0u8; 16];
        for (i, b) in g.iter_mut().enumerate() {
            *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Gid(g))
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// Device attributes (`ibv_device_attr`, the fields rnic has).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID (from the address, EUI-64 style).
    pub node_guid: u64,
    /// Vendor id (0: none).
    pub vendor_id: u32,
    /// Most QPs.
    pub max_qp: u32,
    /// Most outstanding work requests per queue.
    pub max_qp_wr: u32,
    /// Most SGEs per work request.
    pub max_sge: u32,
    /// Most CQs.
    pub max_cq: u32,
    /// Most entries per CQ.
    pub max_cqe: u32,
    /// Most memory regions.
    pub max_mr: u32,
    /// Largest memory region.
    pub max_mr_size: u64,
    /// Most PDs.
    pub max_pd: u32,
    /// Most outstanding RDMA READ / atomic per QP as responder.
    pub max_qp_rd_atom: u32,
    /// Most outstanding RDMA READ / atomic per QP as requester.
    pub max_qp_init_rd_atom: u32,
    /// Atomic capability: `ATOMIC_HCA` (atomics are atomic with respect to other atomics
    /// on this device; they are CPU atomics on the target memory).
    pub atomic_cap: &'static str,
    /// Most shared receive queues.
    pub max_srq: u32,
    /// Most receive WQEs per SRQ.
    pub max_srq_wr: u32,
    /// Most SGEs per SRQ receive WQE.
    pub max_srq_sge: u32,
    /// Largest inline data.
    pub max_inline_data: u32,
    /// Physical ports.
    pub phys_port_cnt: u8,
}

/// Port attributes (`ibv_port_attr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    /// `PORT_ACTIVE` once the device is open.
    pub state: &'static str,
    /// Largest MTU.
    pub max_mtu: PathMtu,
    /// MTU in use (rnic: the largest, as loopback has no frame limit below 4096).
    pub active_mtu: PathMtu,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// Always Ethernet (RoCE).
    pub link_layer: &'static str,
    /// LID (0 on RoCE).
    pub lid: u16,
}

/// Hard limits of every rnic device.
const MAX_QP_WR: u32 = 16384;
const MAX_SGE: u32 = 32;
const MAX_CQE: u32 = 1 << 20;
const MAX_INLINE: u32 = 1024;

/// An open device (`ibv_context`). Cloning gives another handle to the same device.
#[derive(Clone, Debug)]
pub struct Context {
    dev: Device,
    /// CM events a connecting call took that were not its own, for `cm_get_event`.
    cm_stash: Arc<parking_lot::Mutex<std::collections::VecDeque<rnic_core::cm::CmEvent>>>,
}

impl Context {
    /// Opens a configured device by name (see [`devices`]).
    pub fn open(name: &str) -> Result<Context> {
        let all = devices()?;
        let Some(d) = all.iter().find(|d| d.name == name) else {
            return Err(Error::NoSuchDevice {
                name: name.into(),
                known: all.iter().map(|d| format!("{}={}", d.name, d.ip)).collect::<Vec<_>>().join(","),
            });
        };
        Context::open_at(&d.name, d.ip)
    }

    /// Opens a device with this name bound to `ip`.
    pub fn open_at(name: &str, ip: IpAddr) -> Result<Context> {
        Context::open_with(DeviceConfig::new(name, ip))
    }

    /// Opens a device with a full configuration (port, pinning, capture file).
    pub fn open_with(config: DeviceConfig) -> Result<Context> {
        Ok(Context { dev: Device::open(config).map_err(Error::OpenDevice)?, cm_stash: Arc::default() })
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        self.dev.name()
    }

    /// The address the device is bound to.
    pub fn ip(&self) -> IpAddr {
        self.dev.local_addr().ip()
    }

    /// GID `index`: rnic has one, the RoCEv2 GID of its address.
    pub fn gid(&self, index: u32) -> Option<Gid> {
        match index {
            // rxe's table: index 0 the link-local GID of the device's MAC (for a UDP device
            // the locally administered 02:00:a:b:c:d), index 1 the address's RoCEv2 GID.
            0 => {
                let mut g = [0u8; 16];
                g[0] = 0xfe;
                g[1] = 0x80;
                g[8..].copy_from_slice(&rnic_core::engine::guid_for(self.ip()).to_be_bytes());
                Some(Gid(g))
            }
            1 => Some(Gid::from_ip(self.ip())),
            _ => None,
        }
    }

    /// The GID index that carries traffic on this device: 1, the address's RoCEv2 GID
    /// (`-g 1`, as with rxe); index 0, the link-local GID, names the device but a UDP
    /// transport cannot send from it.
    pub const ROUTABLE_GID_INDEX: u32 = 1;

    /// Device attributes.
    pub fn query_device(&self) -> DeviceAttr {
        // The EUI-64 of the device's MAC, as rxe derives its node GUID (and the CM its CA GUID).
        let node_guid = rnic_core::engine::guid_for(self.ip());
        DeviceAttr {
            fw_ver: env!("CARGO_PKG_VERSION").to_string(),
            node_guid,
            vendor_id: 0,
            max_qp: 65536,
            max_qp_wr: MAX_QP_WR,
            max_sge: MAX_SGE,
            max_cq: 1 << 16,
            max_cqe: MAX_CQE,
            max_mr: self.dev.config().max_mr,
            max_mr_size: 1 << 40,
            max_pd: 1 << 16,
            max_qp_rd_atom: 16,
            max_qp_init_rd_atom: 16,
            atomic_cap: "ATOMIC_HCA",
            max_srq: 1 << 16,
            max_srq_wr: MAX_QP_WR,
            max_srq_sge: MAX_SGE,
            max_inline_data: MAX_INLINE,
            phys_port_cnt: 1,
        }
    }

    /// Port attributes of port 1.
    pub fn query_port(&self) -> PortAttr {
        PortAttr {
            state: "PORT_ACTIVE",
            max_mtu: PathMtu::Mtu4096,
            active_mtu: PathMtu::Mtu4096,
            gid_tbl_len: 2,
            link_layer: "Ethernet",
            lid: 0,
        }
    }

    /// Every counter, named as rxe names its hw_counters.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        self.dev.counters().snapshot()
    }

    /// One counter.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.dev.counters().get(name)
    }

    /// The next asynchronous event, if one is waiting.
    pub fn poll_async_event(&self) -> Option<AsyncEvent> {
        self.dev.events().try_recv().ok()
    }

    /// Sleeps until the next asynchronous event (`ibv_get_async_event`) or `timeout`:
    /// QP fatal, CQ error, SRQ limit reached, port active (raised once at open).
    pub fn get_async_event(&self, timeout: Duration) -> Result<AsyncEvent> {
        match self.dev.events().recv_timeout(timeout) {
            Ok(ev) => Ok(ev),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Err(Error::EventTimeout(timeout)),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                Err(Error::DeviceStopped(DeviceError::Stopped(self.name().into())))
            }
        }
    }

    /// Creates a completion channel (`ibv_create_comp_channel`): CQs created with it
    /// report armed notifications there, and a thread can sleep in
    /// [`CompChannel::get_cq_event`].
    pub fn create_comp_channel(&self) -> CompChannel {
        let (tx, rx) = crossbeam_channel::unbounded();
        CompChannel {
            inner: Arc::new(ChannelInner {
                ctx: self.clone(),
                tx,
                rx,
                cqs: parking_lot::Mutex::new(std::collections::HashMap::new()),
            }),
        }
    }

    /// Creates a completion queue whose notifications go to `channel`.
    pub fn create_cq_with_channel(&self, depth: usize, channel: &CompChannel) -> Result<CompletionQueue> {
        let cq = self.create_cq(depth)?;
        cq.cq.set_channel(Some(channel.inner.tx.clone()));
        channel.inner.cqs.lock().insert(cq.cq.id(), Arc::downgrade(&cq.cq));
        Ok(cq)
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> ProtectionDomain {
        ProtectionDomain { inner: Arc::new(PdInner { ctx: self.clone(), id: self.dev.alloc_pd() }) }
    }

    /// Creates a completion queue with room for `depth` completions.
    pub fn create_cq(&self, depth: usize) -> Result<CompletionQueue> {
        if depth == 0 || depth > MAX_CQE as usize {
            return Err(Error::InvalidArgument { op: "create CQ", why: format!("depth {depth} not in 1..={MAX_CQE}") });
        }
        Ok(CompletionQueue { ctx: self.clone(), cq: self.dev.create_cq(depth) })
    }

    /// Runs one round of the device's work (received packets, posted work, timers, sends)
    /// on the calling thread, unless the device's progress thread is running one. For
    /// busy-polling loops that want no thread hand-off between a packet and their poll
    /// (as `rnic perf`'s latency tests do). Returns whether there was work; never blocks.
    pub fn progress(&self) -> bool {
        self.dev.progress()
    }

    /// The underlying device (for tools).
    pub fn device(&self) -> &Device {
        &self.dev
    }
}

#[derive(Debug)]
struct PdInner {
    ctx: Context,
    id: PdId,
}

/// A protection domain (`ibv_pd`): memory regions and QPs of one PD can reach each
/// other, never those of another.
#[derive(Clone, Debug)]
pub struct ProtectionDomain {
    inner: Arc<PdInner>,
}

impl ProtectionDomain {
    /// The device.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Allocates `len` bytes of zeroed, page-aligned memory owned by the region and
    /// registers it (pinned, unless the device was opened with pinning off).
    pub fn allocate_mr(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        if len == 0 {
            return Err(Error::InvalidArgument {
                op: "allocate memory region",
                why: "0 bytes: nothing could be sent from or placed into it; ask for at least 1 byte".into(),
            });
        }
        let block = Arc::new(MemBlock::new(len).map_err(|e| Error::RegMr(DeviceError::Mem(e)))?);
        self.register_block(block, access)
    }

    /// Registers memory the caller owns.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes, and stay allocated and
    /// unmoved until the returned region and every clone of it are dropped. The NIC
    /// writes it from another thread while work is outstanding (receive buffers, RDMA
    /// WRITE targets, READ destinations): the caller must not hold Rust references to
    /// those bytes while that can happen, and reads them only once the completion (or,
    /// for remote writes, the peer's signal) says they are written.
    pub unsafe fn register_mr(&self, ptr: *mut u8, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        // SAFETY: the caller upholds `MemBlock::from_raw`'s contract, which is this
        // function's contract restated.
        let block = Arc::new(unsafe { MemBlock::from_raw(ptr, len) });
        self.register_block(block, access)
    }

    fn register_block(&self, block: Arc<MemBlock>, access: AccessFlags) -> Result<MemoryRegion> {
        let len = block.len();
        let iova = block.addr();
        let keys =
            self.inner.ctx.dev.reg_mr(self.inner.id, block.clone(), 0, len, iova, access).map_err(Error::RegMr)?;
        Ok(MemoryRegion { inner: Arc::new(MrInner { pd: self.clone(), block, keys, iova, len }) })
    }

    /// Creates a shared receive queue (`ibv_create_srq`) of `max_wr` receive WQEs with up
    /// to `max_sge` SGEs each; QPs built with [`QpBuilder::srq`] take their receive WQEs
    /// from it.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<SharedReceiveQueue> {
        if max_wr == 0 || max_wr > MAX_QP_WR {
            return Err(Error::InvalidArgument {
                op: "create SRQ",
                why: format!("max_wr {max_wr} not in 1..={MAX_QP_WR}"),
            });
        }
        if max_sge > MAX_SGE {
            return Err(Error::InvalidArgument { op: "create SRQ", why: format!("more than {MAX_SGE} SGEs") });
        }
        let srq = self.inner.ctx.dev.create_srq(self.inner.id, max_wr, max_sge);
        Ok(SharedReceiveQueue { pd: self.clone(), srq })
    }

    /// Starts building a queue pair on this PD.
    pub fn qp_builder(&self, send_cq: &CompletionQueue, recv_cq: &CompletionQueue) -> QpBuilder {
        QpBuilder {
            pd: self.clone(),
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            qp_type: QpType::Rc,
            cap: QpCap::default(),
            sq_sig_all: false,
            access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            mtu: PathMtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            psn: None,
            srq: None,
            qkey: DEFAULT_QKEY,
        }
    }

    /// Creates an address handle (`ibv_create_ah`): where UD sends go. `gid` is the
    /// destination's GID, as its [`Endpoint`] carries it.
    pub fn create_ah(&self, gid: Gid) -> Result<AddressHandle> {
        let ip = gid.to_ip();
        let why = if ip.is_unspecified() {
            Some(format!("GID {gid} is all zeros (a peer that sent no GID: ibv_*_pingpong need -g 0 on RoCE)"))
        } else if ip.is_multicast() {
            Some(format!("GID {gid} is multicast, which rnic does not implement"))
        } else if ip.is_ipv4() != self.inner.ctx.ip().is_ipv4() {
            Some(format!("GID {gid} is not of the same IP version as the device's address {}", self.inner.ctx.ip()))
        } else {
            None
        };
        match why {
            Some(why) => Err(Error::InvalidArgument { op: "create AH", why }),
            None => Ok(AddressHandle { pd: self.clone(), gid }),
        }
    }

    /// Creates an address handle back to the sender of a UD receive, from the 40-byte GRH
    /// area at the head of its receive buffer (`ibv_create_ah_from_wc`): for RoCEv2 over
    /// IPv4 the source address is in the IPv4 header held in the area's last 20 bytes,
    /// over IPv6 in the IPv6 header that fills it.
    pub fn create_ah_from_grh(&self, grh: &[u8]) -> Result<AddressHandle> {
        let bad = |why: String| Error::InvalidArgument { op: "create AH from GRH", why };
        if grh.len() < GRH_LEN {
            return Err(bad(format!("{} bytes given, a GRH area has {GRH_LEN}", grh.len())));
        }
        let ip = if grh[20] >> 4 == 4 && grh[..20].iter().all(|&b| b == 0) {
            IpAddr::V4(Ipv4Addr::new(grh[32], grh[33], grh[34], grh[35]))
        } else if grh[0] >> 4 == 6 {
            let mut a = [0u8; 16];
            a.copy_from_slice(&grh[8..24]);
            IpAddr::V6(Ipv6Addr::from(a))
        } else {
            return Err(bad("neither an IPv4 header in bytes 20..40 nor an IPv6 header".into()));
        };
        self.create_ah(Gid::from_ip(ip))
    }
}

/// The Q_Key a UD QP gets unless [`QpBuilder::qkey`] says otherwise: the one
/// ibv_ud_pingpong uses.
pub const DEFAULT_QKEY: u32 = 0x1111_1111;

/// An address handle (`ibv_ah`): the destination of UD sends. Combine it with the remote
/// QPN and Q_Key into the [`UdDest`] a [`SendWr`] carries ([`SendWr::to`]).
#[derive(Clone, Debug)]
pub struct AddressHandle {
    pd: ProtectionDomain,
    gid: Gid,
}

impl AddressHandle {
    /// The destination GID.
    pub fn gid(&self) -> Gid {
        self.gid
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The destination of a send to QP `remote_qpn` with Q_Key `remote_qkey` (a Q_Key with
    /// the high bit set, such as [`UdDest::USE_QP_QKEY`], sends the QP's own Q_Key).
    pub fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        UdDest { dst: self.gid.to_ip(), remote_qpn, remote_qkey }
    }
}

/// A shared receive queue (`ibv_srq`). Clones share it.
#[derive(Clone, Debug)]
pub struct SharedReceiveQueue {
    pd: ProtectionDomain,
    srq: Arc<rnic_core::srq::Srq>,
}

impl SharedReceiveQueue {
    /// The protection domain the SRQ belongs to.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The SRQ's number (named in its limit event).
    pub fn id(&self) -> u32 {
        self.srq.id()
    }

    /// Posts a receive work request (`ibv_post_srq_recv`); its buffers must be locally
    /// writable regions of the SRQ's protection domain.
    pub fn post_recv<'a>(&self, wr: impl Into<RecvWrRef<'a>>) -> Result<()> {
        self.pd
            .inner
            .ctx
            .dev
            .post_srq_recv(&self.srq, wr)
            .map_err(|source| Error::PostSrqRecv { srq: self.id(), source })
    }

    /// Arms the SRQ limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): when a receive WQE is
    /// taken and fewer than `limit` remain, [`AsyncEvent::SrqLimitReached`] is raised once
    /// and the limit disarms; arm it again to hear of the next time. 0 disarms.
    pub fn modify_limit(&self, limit: u32) -> Result<()> {
        self.srq.set_limit(limit).map_err(|source| Error::ModifySrq { srq: self.id(), source })
    }

    /// The armed limit (`ibv_query_srq`), 0 when not armed.
    pub fn limit(&self) -> u32 {
        self.srq.limit()
    }

    /// Receive WQEs waiting.
    pub fn len(&self) -> usize {
        self.srq.len()
    }

    /// True when no receive WQE waits.
    pub fn is_empty(&self) -> bool {
        self.srq.is_empty()
    }
}

#[derive(Debug)]
struct ChannelInner {
    ctx: Context,
    tx: crossbeam_channel::Sender<u32>,
    rx: crossbeam_channel::Receiver<u32>,
    cqs: parking_lot::Mutex<std::collections::HashMap<u32, std::sync::Weak<Cq>>>,
}

/// A completion channel (`ibv_comp_channel`): where armed CQs report their next
/// completion, so a thread can sleep instead of polling.
///
/// The pattern is ibverbs': `cq.req_notify(false)`; poll the CQ once more (a completion
/// that arrived before arming raises no event); `chan.get_cq_event(timeout)` sleeps until
/// an armed CQ gets a completion and returns it; `cq.ack_events(1)`; arm again; poll.
#[derive(Clone, Debug)]
pub struct CompChannel {
    inner: Arc<ChannelInner>,
}

impl CompChannel {
    /// Sleeps until an armed CQ of this channel raises its event (`ibv_get_cq_event`) or
    /// `timeout` passes. Each event must be acknowledged with
    /// [`CompletionQueue::ack_events`]. The CQ is disarmed: arm it again for the next.
    pub fn get_cq_event(&self, timeout: Duration) -> Result<CompletionQueue> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let id = match self.inner.rx.recv_timeout(left) {
                Ok(id) => id,
                Err(_) => return Err(Error::EventTimeout(timeout)),
            };
            // An event of a CQ dropped meanwhile is skipped.
            let cq = self.inner.cqs.lock().get(&id).and_then(std::sync::Weak::upgrade);
            if let Some(cq) = cq {
                cq.note_event_delivered();
                return Ok(CompletionQueue { ctx: self.inner.ctx.clone(), cq });
            }
        }
    }
}

#[derive(Debug)]
struct MrInner {
    pd: ProtectionDomain,
    block: Arc<MemBlock>,
    keys: MrKeys,
    iova: u64,
    len: usize,
}

impl Drop for MrInner {
    fn drop(&mut self) {
        let _ = self.pd.inner.ctx.dev.mtpt().deregister(self.keys.lkey);
    }
}

/// A registered memory region (`ibv_mr`). Its bytes are reached through copies
/// ([`MemoryRegion::read`], [`MemoryRegion::write`]) because the NIC may write them at
/// any time; the region is deregistered when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct MemoryRegion {
    inner: Arc<MrInner>,
}

/// Where a peer may RDMA: an address and the key that opens it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteMr {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Bytes.
    pub len: u64,
}

impl MemoryRegion {
    /// The protection domain the region is registered in.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.inner.keys.lkey
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.inner.keys.rkey
    }
    /// Virtual address of the first byte (what SGEs and peers use).
    pub fn addr(&self) -> u64 {
        self.inner.iova
    }
    /// Length.
    pub fn len(&self) -> usize {
        self.inner.len
    }
    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }
    /// An SGE over `len` bytes at `offset`.
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        Sge { addr: self.inner.iova.wrapping_add(offset as u64), length: len, lkey: self.inner.keys.lkey }
    }
    /// What to tell a peer so it can RDMA into this region.
    pub fn remote(&self) -> RemoteMr {
        RemoteMr { addr: self.inner.iova, rkey: self.inner.keys.rkey, len: self.inner.len as u64 }
    }
    /// Copies bytes out of the region.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.inner.block.read(offset, dst).map_err(Error::MrAccess)
    }
    /// Copies bytes into the region.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.inner.block.write(offset, src).map_err(Error::MrAccess)
    }
    /// Reads the whole region into a vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.inner.len];
        let _ = self.inner.block.read(0, &mut v);
        v
    }
}

/// A completion queue (`ibv_cq`).
#[derive(Clone, Debug)]
pub struct CompletionQueue {
    ctx: Context,
    cq: Arc<Cq>,
}

impl CompletionQueue {
    /// Takes up to `out.len()` completions, oldest first.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        self.cq.poll(out)
    }

    /// Takes one completion.
    pub fn poll_one(&self) -> Option<WorkCompletion> {
        self.cq.poll_one()
    }

    /// Busy-polls (yielding between tries) until `n` completions arrived or `timeout`
    /// passed; returns what arrived, in order. On a timeout the completions already taken
    /// stay in the CQ (the next poll returns them first): none is ever lost.
    pub fn wait(&self, n: usize, timeout: Duration) -> Result<Vec<WorkCompletion>> {
        let deadline = Instant::now() + timeout;
        let mut got = Vec::with_capacity(n);
        while got.len() < n {
            match self.cq.poll_one() {
                Some(wc) => got.push(wc),
                None if Instant::now() > deadline => {
                    // Nothing may drop a completion: what was taken goes back, in order.
                    self.cq.give_back(got);
                    return Err(Error::Timeout(timeout));
                }
                None => std::thread::yield_now(),
            }
        }
        Ok(got)
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.cq.len()
    }

    /// Arms a notification (`ibv_req_notify_cq`): the next completion (with
    /// `solicited_only`, the next one for a message with the solicited-event bit, or an
    /// error completion) raises one event on the CQ's completion channel.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        if !self.cq.has_channel() {
            return Err(Error::InvalidArgument { op: "req_notify_cq", why: "the CQ has no completion channel".into() });
        }
        self.cq.req_notify(solicited_only);
        Ok(())
    }

    /// Acknowledges `n` events returned by [`CompChannel::get_cq_event`] for this CQ
    /// (`ibv_ack_cq_events`).
    pub fn ack_events(&self, n: u32) -> Result<()> {
        self.cq.ack_events(n).map_err(|_| Error::AckCqEvents {
            cq: self.cq.id(),
            n,
            outstanding: self.cq.unacked_events(),
        })
    }

    /// Events delivered and not yet acknowledged.
    pub fn unacked_events(&self) -> u32 {
        self.cq.unacked_events()
    }

    /// Destroys this handle, checking as `ibv_destroy_cq` does that every delivered event
    /// was acknowledged (the CQ itself goes when its last handle and QP are gone; a plain
    /// drop does not check, as Rust's `Drop` cannot report).
    pub fn destroy(self) -> Result<()> {
        match self.cq.unacked_events() {
            0 => Ok(()),
            outstanding => Err(Error::UnackedCqEvents { cq: self.cq.id(), outstanding }),
        }
    }

    /// Sleeps until a completion is available, using `channel` (to which this CQ must
    /// belong), or `timeout` passes; then takes it. The sleeping counterpart of
    /// [`CompletionQueue::wait`].
    pub fn wait_event(&self, channel: &CompChannel, timeout: Duration) -> Result<WorkCompletion> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(wc) = self.cq.poll_one() {
                return Ok(wc);
            }
            self.req_notify(false)?;
            // A completion that landed before arming raises no event: poll again.
            if let Some(wc) = self.cq.poll_one() {
                return Ok(wc);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let cq = channel.get_cq_event(left).map_err(|_| Error::Timeout(timeout))?;
            cq.ack_events(1)?;
        }
    }

    /// True when none is waiting.
    pub fn is_empty(&self) -> bool {
        self.cq.is_empty()
    }

    /// The device.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}

/// Builds a queue pair (`ibv_create_qp` plus the attributes `connect` will use).
///
/// Defaults, each changed by the setter of the same name:
///
/// | attribute | default | note |
/// |---|---|---|
/// | `qp_type` | RC | |
/// | `cap` | 256 send and 256 receive WRs, 4 SGEs each, 256 bytes inline | devinfo's limits: `max_qp_wr` 16384, `max_sge` 32 |
/// | `access` | REMOTE_WRITE, REMOTE_READ | add REMOTE_ATOMIC (and FLUSH_GLOBAL) for atomics and FLUSH |
/// | `mtu` | 1024 | `ibv_rc_pingpong`'s default; devinfo's `active_mtu` (4096) is the most the port takes, and `rnic perf` uses it (`-m 4096`), as perftest uses the port's |
/// | `timeout` | 14 (4.096 us x 2^14 = 67 ms) | as perftest and rdma_cm |
/// | `retry_cnt`, `rnr_retry` | 7, 7 (7 = retry RNR forever) | as perftest |
/// | `min_rnr_timer` | 12 (0.64 ms) | as `ibv_rc_pingpong` |
/// | `max_rd_atomic`, `max_dest_rd_atomic` | 1, 1 | devinfo's `max_qp_rd_atom` is 16, and `rnic perf` asks for 16 on RC |
/// | `sq_sig_all` | false | |
/// | `psn` | random | |
/// | `qkey` (UD) | [`DEFAULT_QKEY`] | |
#[derive(Debug, Clone)]
pub struct QpBuilder {
    pd: ProtectionDomain,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    qp_type: QpType,
    cap: QpCap,
    sq_sig_all: bool,
    access: AccessFlags,
    mtu: PathMtu,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    min_rnr_timer: u8,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    psn: Option<u32>,
    srq: Option<SharedReceiveQueue>,
    qkey: u32,
}

macro_rules! setter {
    ($(#[$m:meta])* $name:ident: $t:ty) => {
        $(#[$m])*
        pub fn $name(mut self, v: $t) -> Self {
            self.$name = v;
            self
        }
    };
}

impl QpBuilder {
    setter!(
        /// Queue sizes and limits.
        cap: QpCap
    );
    setter!(
        /// Complete every send WR (else only those flagged signaled).
        sq_sig_all: bool
    );
    setter!(
        /// Remote operations the QP accepts (REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC).
        access: AccessFlags
    );
    setter!(
        /// Path MTU.
        mtu: PathMtu
    );
    setter!(
        /// Local ACK timeout exponent (4.096 us * 2^timeout; 0 = infinite).
        timeout: u8
    );
    setter!(
        /// Transport retries.
        retry_cnt: u8
    );
    setter!(
        /// RNR retries (7 = infinite).
        rnr_retry: u8
    );
    setter!(
        /// RNR timer code this QP's responder sends.
        min_rnr_timer: u8
    );
    setter!(
        /// Outstanding READs as requester.
        max_rd_atomic: u8
    );
    setter!(
        /// Outstanding READs as responder.
        max_dest_rd_atomic: u8
    );
    setter!(
        /// Transport: [`QpType::Rc`] (the default), [`QpType::Uc`] or [`QpType::Ud`].
        qp_type: QpType
    );
    setter!(
        /// UD: the QP's Q_Key, checked against every datagram received and sent by WRs whose
        /// Q_Key has the high bit set (default [`DEFAULT_QKEY`]).
        qkey: u32
    );

    /// Takes receive WQEs from `srq` instead of the QP's own receive queue (posting
    /// receives to the QP then fails).
    pub fn srq(mut self, srq: &SharedReceiveQueue) -> Self {
        self.srq = Some(srq.clone());
        self
    }

    /// The first PSN (random if not set).
    pub fn psn(mut self, psn: u32) -> Self {
        self.psn = Some(psn & 0x00FF_FFFF);
        self
    }

    /// Creates the QP and moves it to INIT.
    pub fn build(self) -> Result<PreparedQp> {
        let ctx = self.pd.inner.ctx.clone();
        let c = self.cap;
        // A QP, its CQs and its SRQ live on one device (ibv_create_qp: EINVAL otherwise).
        let here = ctx.dev.local_addr();
        for (what, other) in [("send CQ", &self.send_cq.ctx), ("receive CQ", &self.recv_cq.ctx)]
            .into_iter()
            .chain(self.srq.as_ref().map(|s| ("SRQ", &s.pd.inner.ctx)))
        {
            if other.dev.local_addr() != here {
                return Err(Error::InvalidArgument {
                    op: "create QP",
                    why: format!(
                        "the {what} belongs to device {} ({}), the protection domain to {} ({here})",
                        other.name(),
                        other.dev.local_addr(),
                        ctx.name()
                    ),
                });
            }
        }
        if c.max_send_wr > MAX_QP_WR || c.max_recv_wr > MAX_QP_WR {
            return Err(Error::InvalidArgument { op: "create QP", why: format!("queue depth above {MAX_QP_WR}") });
        }
        if c.max_send_sge > MAX_SGE || c.max_recv_sge > MAX_SGE {
            return Err(Error::InvalidArgument { op: "create QP", why: format!("more than {MAX_SGE} SGEs") });
        }
        if c.max_inline_data > MAX_INLINE {
            return Err(Error::InvalidArgument {
                op: "create QP",
                why: format!("inline data above {MAX_INLINE} bytes"),
            });
        }
        let shared = ctx
            .dev
            .create_qp_with_srq(
                self.qp_type,
                self.pd.inner.id,
                c,
                self.sq_sig_all,
                self.send_cq.cq.clone(),
                self.recv_cq.cq.clone(),
                self.srq.as_ref().map(|s| s.srq.clone()),
            )
            .map_err(Error::DeviceStopped)?
            .map_err(Error::CreateQp)?;
        let qp = QueuePair {
            inner: Arc::new(QpInner {
                pd: self.pd.clone(),
                send_cq: self.send_cq.clone(),
                recv_cq: self.recv_cq.clone(),
                shared,
            }),
        };
        // The INIT attributes of the QP type's column of the modify-QP table: a UD QP
        // takes a Q_Key and no access flags.
        let init = QpAttr {
            state: QpState::Init,
            access: self.access,
            qkey: self.qkey,
            pkey_index: 0,
            port: 1,
            ..QpAttr::default()
        }
        .required_from(self.qp_type, QpState::Reset)
        .ok_or_else(|| Error::InvalidArgument { op: "create QP", why: "no RESET->INIT transition".into() })?;
        qp.modify(&init)?;
        let psn = self.psn.unwrap_or_else(random_psn);
        Ok(PreparedQp { qp, psn, b: self })
    }
}

fn random_psn() -> u32 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut x = u64::from(t.subsec_nanos()) ^ (u64::from(std::process::id()) << 32) ^ t.as_secs();
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    u32::try_from(x & 0x00FF_FFFF).unwrap_or(0)
}

/// What one side of an RC or UC connection tells the other out of band; a UD QP gives the
/// same (its peers need its QPN and GID; the PSN is what ibv_ud_pingpong exchanges too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// QP number.
    pub qpn: u32,
    /// GID (address) of the device.
    pub gid: Gid,
    /// First PSN the QP will send.
    pub psn: u32,
}

/// A QP in INIT, ready to be connected.
#[derive(Debug)]
pub struct PreparedQp {
    qp: QueuePair,
    psn: u32,
    b: QpBuilder,
}

impl PreparedQp {
    /// This side's endpoint, to send to the peer.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint { qpn: self.qp.qpn(), gid: Gid::from_ip(self.qp.context().ip()), psn: self.psn }
    }

    /// The QP (already usable for posting receives).
    pub fn qp(&self) -> &QueuePair {
        &self.qp
    }

    /// Moves a UD QP to RTR and RTS: a datagram QP has no peer to connect to (each send
    /// names its destination).
    pub fn activate(self) -> Result<QueuePair> {
        let qpn = self.qp.qpn();
        if self.b.qp_type != QpType::Ud {
            return Err(Error::InvalidArgument {
                op: "activate QP",
                why: format!("QP {qpn:#x} is {}: connected QPs use connect(peer endpoint)", self.b.qp_type),
            });
        }
        self.bring_up(QpAttr::default())
    }

    /// Connects to `remote`: INIT -> RTR -> RTS.
    pub fn connect(self, remote: &Endpoint) -> Result<QueuePair> {
        if self.b.qp_type == QpType::Ud {
            return Err(Error::InvalidArgument {
                op: "connect QP",
                why: format!("QP {:#x} is UD, which is not connected: use activate()", self.qp.qpn()),
            });
        }
        let b = &self.b;
        let path = QpAttr {
            remote_ip: Some(remote.gid.to_ip()),
            path_mtu: b.mtu.to_ibv(),
            dest_qpn: remote.qpn,
            rq_psn: remote.psn,
            max_dest_rd_atomic: b.max_dest_rd_atomic,
            min_rnr_timer: b.min_rnr_timer,
            ..QpAttr::default()
        };
        self.bring_up(path)
    }

    /// INIT -> RTR with the attributes in `rtr`, then RTS with this side's PSN and retry
    /// settings; each step takes what the QP type's column of the modify-QP table
    /// requires (RC: everything; UC: no READ/atomic, RNR or acknowledgement-timer
    /// attributes; UD: only the PSN).
    fn bring_up(self, rtr: QpAttr) -> Result<QueuePair> {
        let (qpn, t, b) = (self.qp.qpn(), self.b.qp_type, &self.b);
        let step = |a: QpAttr, from: QpState, name: &'static str| {
            let a = a.required_from(t, from).ok_or_else(|| Error::InvalidArgument {
                op: "connect QP",
                why: format!("{t} has no {name} transition"),
            })?;
            self.qp.raw_modify(&a).map_err(|source| Error::Connect { qpn, step: name, source })
        };
        step(QpAttr { state: QpState::Rtr, ..rtr }, QpState::Init, "INIT->RTR")?;
        let rts = QpAttr {
            state: QpState::Rts,
            sq_psn: self.psn,
            timeout: b.timeout,
            retry_cnt: b.retry_cnt,
            rnr_retry: b.rnr_retry,
            max_rd_atomic: b.max_rd_atomic,
            ..QpAttr::default()
        };
        step(rts, QpState::Rtr, "RTR->RTS")?;
        Ok(self.qp)
    }
}

#[derive(Debug)]
struct QpInner {
    pd: ProtectionDomain,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    shared: Arc<QpShared>,
}

impl Drop for QpInner {
    fn drop(&mut self) {
        let _ = self.pd.inner.ctx.dev.destroy_qp(self.shared.qpn);
    }
}

/// A queue pair (`ibv_qp`). Clones share the QP; it is destroyed with the last one.
#[derive(Clone, Debug)]
pub struct QueuePair {
    inner: Arc<QpInner>,
}

impl QueuePair {
    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.inner.shared.qpn.value()
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        self.inner.shared.state()
    }

    /// Transport service (RC, UC or UD).
    pub fn qp_type(&self) -> QpType {
        self.inner.shared.qp_type
    }

    /// The device.
    pub fn context(&self) -> &Context {
        &self.inner.pd.inner.ctx
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    /// The send CQ.
    pub fn send_cq(&self) -> &CompletionQueue {
        &self.inner.send_cq
    }

    /// The receive CQ.
    pub fn recv_cq(&self) -> &CompletionQueue {
        &self.inner.recv_cq
    }

    fn raw_modify(&self, attr: &QpAttr) -> std::result::Result<(), EngineError> {
        match self.context().dev.modify_qp(self.inner.shared.qpn, *attr) {
            Ok(r) => r,
            Err(e) => Err(EngineError::BadAttr(e.to_string())),
        }
    }

    /// Modifies the QP (`ibv_modify_qp`), checked against IBA's table of transitions and
    /// required/optional attributes.
    pub fn modify(&self, attr: &QpAttr) -> Result<()> {
        self.raw_modify(attr).map_err(|source| Error::ModifyQp { qpn: self.qpn(), source })
    }

    /// Reads the QP's attributes (`ibv_query_qp`).
    pub fn query(&self) -> Result<QpAttr> {
        let qpn = self.qpn();
        match self.context().dev.query_qp(self.inner.shared.qpn) {
            Ok(r) => r.map_err(|source| Error::QueryQp { qpn, source }),
            Err(e) => Err(Error::DeviceStopped(e)),
        }
    }

    /// Posts a send work request (`ibv_post_send`): a [`SendWr`] or a [`SendWrRef`] that
    /// borrows its SGE list.
    pub fn post_send<'a>(&self, wr: impl Into<SendWrRef<'a>>) -> Result<()> {
        self.context()
            .dev
            .post_send(&self.inner.shared, wr)
            .map_err(|source| Error::PostSend { qpn: self.qpn(), source })
    }

    /// Posts a list of send work requests in one call, in order (`ibv_post_send` with a
    /// chained list): `&[SendWr]`, `&[SendWrRef]` or any iterator of either, so a batch
    /// built from borrowed SGE slices allocates nothing. Stops at the first one refused:
    /// the error says which (those before it are posted, as `bad_wr` tells in verbs).
    /// Returns how many were posted.
    pub fn post_send_list<'a, W: Into<SendWrRef<'a>>>(&self, wrs: impl IntoIterator<Item = W>) -> Result<usize> {
        let mut n = 0;
        for wr in wrs {
            self.context().dev.post_send(&self.inner.shared, wr).map_err(|source| Error::PostList {
                qpn: self.qpn(),
                queue: "send",
                index: n,
                source,
            })?;
            n += 1;
        }
        Ok(n)
    }

    /// Posts a receive work request (`ibv_post_recv`): a [`RecvWr`] or a [`RecvWrRef`].
    pub fn post_recv<'a>(&self, wr: impl Into<RecvWrRef<'a>>) -> Result<()> {
        self.context()
            .dev
            .post_recv(&self.inner.shared, wr)
            .map_err(|source| Error::PostRecv { qpn: self.qpn(), source })
    }

    /// Posts a list of receive work requests in one call (see [`post_send_list`](Self::post_send_list)).
    pub fn post_recv_list<'a, W: Into<RecvWrRef<'a>>>(&self, wrs: impl IntoIterator<Item = W>) -> Result<usize> {
        let mut n = 0;
        for wr in wrs {
            self.context().dev.post_recv(&self.inner.shared, wr).map_err(|source| Error::PostList {
                qpn: self.qpn(),
                queue: "receive",
                index: n,
                source,
            })?;
            n += 1;
        }
        Ok(n)
    }
}
