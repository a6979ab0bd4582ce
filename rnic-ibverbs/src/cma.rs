//! rdma_cm on rnic: the functions of rdma-core 44's `librdmacm.so.1` (`RDMACM_1.0` to
//! `RDMACM_1.3`), exported from this library as `rnic_cm_<name>` under the private version
//! `RNIC_CM_PRIVATE`; `scripts/build-ibverbs.sh` links a `librdmacm.so.1` whose every
//! symbol, at its rdma-core version, jumps to the function here (`librdmacm.map`), so
//! the connection manager lives beside the verbs and the devices they share.
//!
//! librdmacm talks to the kernel's `rdma_ucm` through `/dev/infiniband/rdma_cm`; here the
//! same requests go to each device's IB CM ([`rnic_core::cm::CmAgent`], REQ/REP/RTU/REJ/
//! DREQ/DREP on QP1), and the events come back through one router thread per device,
//! which hands each to the id that owns its connection (or the listener of its service
//! ID). The behaviour is librdmacm's (`librdmacm/cma.c`) and the kernel's (`cma.c`):
//! - an event channel's `fd` is readable exactly while events wait, and honours
//!   `O_NONBLOCK` (`rdma_get_cm_event` fails with `EAGAIN`);
//! - an id made with a NULL channel is synchronous: each call waits for its own event;
//! - `rdma_destroy_id` waits until every event it was given is acknowledged;
//! - a CONNECT_REQUEST's new id, a REP's QP transitions and the RTU are done when the
//!   program takes the event (`rdma_get_cm_event`), as librdmacm does;
//! - QP attributes are those `rdma_init_qp_attr` returns: the kernel's
//!   (`cma_ib_init_qp_attr`, `ib_cm_init_qp_attr`).

use crate::ctx::{ctx_of, Dev};
use crate::device::devices;
use crate::{diag, guard, set_errno};
use libc::{c_char, c_int, c_void, size_t, sockaddr, socklen_t};
use parking_lot::{Condvar, Mutex};
use rnic_core::cm::{self as core, AcceptParams, ConnectParams, RepInfo, ReqInfo, SidrParams, SidrRepParams};
use rnic_core::device::Device;
use rnic_io::EventFd;
use rnic_verbs_sys::*;
use rnic_wire::cm::{CmTransport, CmaHeader, SidrStatus, CMA_HDR_LEN};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd as _;
use std::ptr::null_mut;
use std::sync::OnceLock;

/// The packet lifetime the kernel gives a RoCE path (`CMA_IBOE_PACKET_LIFETIME`); the QP's
/// local ACK timeout is one more (`cm_init_av_by_path`).
const PACKET_LIFETIME: u8 = 16;
/// The CM's response timeout and retries (`CMA_CM_RESPONSE_TIMEOUT`, `CMA_MAX_CM_RETRIES`).
const CM_RESPONSE_TIMEOUT: u8 = 20;
const CM_MAX_RETRIES: u8 = 15;
/// The READ/atomic depth rnic's QPs allow (`max_qp_rd_atom`).
const MAX_RD_ATOMIC: u8 = rnic_core::caps::DeviceCaps::MAX_RD_ATOMIC;
/// Private data room (IBA 12.6): REQ (less rdma_cm's header), REP, REJ, DREQ.
const REQ_PRIVATE: usize = 92 - CMA_HDR_LEN;
const REP_PRIVATE: usize = 196;
const REJ_PRIVATE: usize = 148;
/// SIDR_REQ (less rdma_cm's header) and SIDR_REP (IBA 12.11).
const SIDR_REQ_PRIVATE: usize = 216 - CMA_HDR_LEN;
const SIDR_REP_PRIVATE: usize = 136;
/// The largest private data an event carries.
const EVENT_PRIVATE: usize = 256;

/// A device as rdma_cm sees it: a context of its own (librdmacm opens every device once)
/// and a PD for ids that are given none.
struct CmaDev {
    dev: &'static Dev,
    ctx: usize,
    pd: Mutex<usize>,
    router: OnceLock<Result<(), c_int>>,
}

struct Cma {
    devs: Vec<CmaDev>,
}

static CMA: OnceLock<Result<Cma, c_int>> = OnceLock::new();

fn cma() -> Result<&'static Cma, c_int> {
    CMA.get_or_init(|| {
        let Ok(list) = devices() else { return Err(libc::ENODEV) };
        let mut devs = Vec::new();
        for d in list {
            // SAFETY: a device of our own list.
            let ctx = unsafe { crate::device::ibv_open_device(std::ptr::from_ref(&d.ibv).cast_mut()) };
            if ctx.is_null() {
                return Err(libc::ENODEV);
            }
            devs.push(CmaDev { dev: d, ctx: ctx as usize, pd: Mutex::new(0), router: OnceLock::new() });
        }
        Ok(Cma { devs })
    })
    .as_ref()
    .map_err(|e| *e)
}

impl CmaDev {
    fn ctx(&self) -> *mut ibv_context {
        self.ctx as *mut ibv_context
    }

    fn ip(&self) -> IpAddr {
        self.dev.info.ip
    }

    /// The running device (started on first use), with its event router.
    fn core(&'static self) -> Result<Device, c_int> {
        // SAFETY: our own context, open for the life of the process.
        let ctx = unsafe { ctx_of(self.ctx()) }.ok_or(libc::ENODEV)?;
        let dev = ctx.sh.core()?;
        let index = self.dev.index;
        (*self.router.get_or_init(|| {
            let rx = dev.cm_events().clone();
            std::thread::Builder::new()
                .name(format!("{}-cm", self.dev.info.name))
                .spawn(move || {
                    while let Ok(ev) = rx.recv() {
                        guard((), || route(index, ev));
                    }
                })
                .map(|_| ())
                .map_err(|_| libc::EAGAIN)
        }))?;
        Ok(dev)
    }

    fn pd(&self) -> Result<*mut ibv_pd, c_int> {
        let mut pd = self.pd.lock();
        if *pd == 0 {
            // SAFETY: our own open context.
            let p = unsafe { crate::pd::ibv_alloc_pd(self.ctx()) };
            if p.is_null() {
                return Err(libc::ENOMEM);
            }
            *pd = p as usize;
        }
        Ok(*pd as *mut ibv_pd)
    }
}

fn dev_by_index(i: c_int) -> Option<&'static CmaDev> {
    cma().ok()?.devs.iter().find(|d| d.dev.index == i)
}

fn dev_by_ip(ip: IpAddr) -> Option<&'static CmaDev> {
    cma().ok()?.devs.iter().find(|d| d.ip() == ip || canonical(d.ip()) == canonical(ip))
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

// ---------------------------------------------------------------------------------------
// Routing the devices' CM events to ids

/// Who gets a device's CM events: listeners by service ID, connections by their local
/// communication ID; and the ports ids are bound to.
/// An address an id is bound to (None: the wildcard) and the id.
type Binding = (Option<IpAddr>, usize);

#[derive(Default)]
struct Routes {
    listeners: HashMap<(c_int, u64), usize>,
    conns: HashMap<(c_int, u32), usize>,
    /// (port space, port) -> the addresses bound (None: the wildcard) and their ids.
    ports: HashMap<(c_int, u16), Vec<Binding>>,
}

fn routes() -> &'static Mutex<Routes> {
    static R: OnceLock<Mutex<Routes>> = OnceLock::new();
    R.get_or_init(Mutex::default)
}

/// A device's CM event, to the id it belongs to (runs on the device's router thread).
fn route(dev: c_int, ev: core::CmEvent) {
    let r = routes().lock();
    match ev {
        core::CmEvent::ConnectRequest { id: conn, req } => {
            let Some(&listener) = r.listeners.get(&(dev, req.service_id)) else {
                drop(r);
                // The listener went away after the CM took the REQ: refuse it, as the
                // kernel does for a REQ nobody listens for (IBA 12.6.7: REJ, invalid
                // service ID).
                reject_orphan(dev, conn, false, "nobody listens on its service ID any more");
                return;
            };
            // SAFETY: a registered id is alive (destroy unregisters it under this lock).
            let l = unsafe { &*(listener as *const CmId) };
            l.push(Kind::ConnectRequest { dev, conn, req: Request::Rc(req) });
        }
        core::CmEvent::SidrRequest { id: conn, src, service_id, private_data, .. } => {
            let Some(&listener) = r.listeners.get(&(dev, service_id)) else {
                drop(r);
                reject_orphan(dev, conn, true, "nobody listens on its service ID any more");
                return;
            };
            // SAFETY: as above.
            let l = unsafe { &*(listener as *const CmId) };
            l.push(Kind::ConnectRequest { dev, conn, req: Request::Ud { src, private_data } });
        }
        other => {
            let conn = match &other {
                core::CmEvent::ConnectReply { id, .. }
                | core::CmEvent::Established { id, .. }
                | core::CmEvent::Rejected { id, .. }
                | core::CmEvent::Disconnected { id, .. }
                | core::CmEvent::TimedOut { id, .. }
                | core::CmEvent::SidrReply { id, .. }
                | core::CmEvent::TimewaitExit { id } => *id,
                core::CmEvent::ConnectRequest { .. } | core::CmEvent::SidrRequest { .. } => return,
            };
            // An id destroyed meanwhile: nobody to tell.
            let Some(&id) = r.conns.get(&(dev, conn)) else { return };
            // SAFETY: as above.
            let id = unsafe { &*(id as *const CmId) };
            let kind = match other {
                core::CmEvent::ConnectReply { rep, .. } => Kind::ConnectReply(rep),
                core::CmEvent::Established { .. } => Kind::Established,
                core::CmEvent::Rejected { reason, private_data, .. } => Kind::Rejected { reason, private_data },
                core::CmEvent::Disconnected { private_data, .. } => Kind::Disconnected { private_data },
                core::CmEvent::TimedOut { .. } => Kind::Unreachable,
                core::CmEvent::SidrReply { status, qpn, qkey, private_data, .. } => {
                    Kind::SidrReply { status, qpn, qkey, private_data }
                }
                core::CmEvent::TimewaitExit { .. } => Kind::TimewaitExit,
                core::CmEvent::ConnectRequest { .. } | core::CmEvent::SidrRequest { .. } => return,
            };
            id.push(kind);
        }
    }
}

/// A SIDR_REP that refuses (no QP, no Q_Key).
fn sidr_refusal(status: SidrStatus, private_data: &[u8]) -> SidrRepParams {
    SidrRepParams { status, qpn: 0, qkey: 0, private_data: private_data.to_vec() }
}

/// Refuses a connection request no id can take (the peer sees REJECTED; for a SIDR
/// request, UNREACHABLE with status 1, what Linux's CM answers for a service nobody
/// serves), saying why.
fn reject_orphan(dev: c_int, conn: u32, ud: bool, why: &str) {
    if let Some(d) = dev_by_index(dev) {
        diag(format!("rdma_cm: {}: refused a connection request: {why}", d.dev.info.name));
        if let Ok(core) = d.core() {
            let _ = if ud {
                let p = sidr_refusal(SidrStatus::ServiceIdNotSupported, &[]);
                core.cm_call(move |cm, now| cm.sidr_reply(now, conn, &p))
            } else {
                core.cm_call(move |cm, now| cm.reject(now, conn, &[]))
            };
        }
    }
}

// ---------------------------------------------------------------------------------------
// Event channels

/// What happened, before the program takes it (`rdma_get_cm_event` turns it into an
/// `rdma_cm_event`, doing librdmacm's processing then).
enum Kind {
    AddrResolved,
    AddrError(c_int),
    RouteResolved,
    ConnectRequest {
        dev: c_int,
        conn: u32,
        req: Request,
    },
    ConnectReply(Box<RepInfo>),
    Established,
    Rejected {
        reason: u16,
        private_data: Vec<u8>,
    },
    Disconnected {
        private_data: Vec<u8>,
    },
    Unreachable,
    SidrReply {
        status: SidrStatus,
        qpn: u32,
        qkey: u32,
        private_data: Vec<u8>,
    },
    TimewaitExit,
    /// A multicast join (`rdma_join_multicast`) the program has not taken yet: the
    /// join's number in the id's list.
    McJoin(u64),
}

/// A multicast group an id joined (librdmacm's `cma_multicast`).
struct McJoin {
    /// Its number (ids' joins are told apart by it, as librdmacm's by pointer).
    n: u64,
    /// The address joined, as the program gave it.
    addr: SocketAddr,
    /// The group's GID: the address as RoCEv2 maps it (the kernel's `cma_iboe_set_mgid`:
    /// `::ffff:a.b.c.d` for IPv4).
    mgid: [u8; 16],
    context: usize,
    join_flags: u32,
    /// The QP was attached when the program took the join event.
    attached: bool,
}

/// A request for a listener: a REQ (connected ids) or a SIDR_REQ (UD ids).
enum Request {
    Rc(Box<ReqInfo>),
    Ud { src: IpAddr, private_data: Vec<u8> },
}

impl Request {
    fn ud(&self) -> bool {
        matches!(self, Request::Ud { .. })
    }
}

struct Pending {
    id: usize,
    kind: Kind,
}

/// An `rdma_event_channel`: the program sees `ch`.
#[repr(C)]
pub struct Channel {
    pub ch: rdma_event_channel,
    efd: EventFd,
    q: Mutex<VecDeque<Pending>>,
}

impl Channel {
    fn new() -> Result<*mut Channel, c_int> {
        let efd = EventFd::blocking().map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
        let ch = rdma_event_channel { fd: efd.as_raw_fd() };
        Ok(Box::into_raw(Box::new(Channel { ch, efd, q: Mutex::new(VecDeque::new()) })))
    }

    fn push(&self, p: Pending) {
        let mut q = self.q.lock();
        q.push_back(p);
        if q.len() == 1 {
            self.efd.notify();
        }
    }

    /// The next event, waiting for one unless the program made the fd non-blocking.
    fn pop(&self) -> Result<Pending, c_int> {
        loop {
            {
                let mut q = self.q.lock();
                if let Some(p) = q.pop_front() {
                    if q.is_empty() {
                        self.efd.clear();
                    }
                    return Ok(p);
                }
            }
            if self.efd.nonblocking() {
                return Err(libc::EAGAIN);
            }
            self.efd.wait(None);
        }
    }

    /// Takes the waiting events of `id` out of the queue.
    fn take_for(&self, id: usize) -> Vec<Pending> {
        let mut q = self.q.lock();
        let (mine, rest): (VecDeque<_>, VecDeque<_>) = q.drain(..).partition(|p| p.id == id);
        *q = rest;
        if q.is_empty() {
            self.efd.clear();
        }
        mine.into()
    }
}

unsafe fn chan<'a>(c: *mut rdma_event_channel) -> Option<&'a Channel> {
    // SAFETY: every channel we hand out is the first field of a live Channel.
    (!c.is_null()).then(|| unsafe { &*c.cast::<Channel>() })
}

// ---------------------------------------------------------------------------------------
// Ids

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Idle,
    Bound,
    AddrResolved,
    RouteResolved,
    Listening,
    /// REQ sent.
    Connecting,
    /// A request taken, not answered.
    Requested,
    /// REP sent.
    Accepted,
    Connected,
    Disconnected,
}

struct IdState {
    phase: Phase,
    /// The device (index), once bound to one.
    dev: Option<c_int>,
    local: Option<SocketAddr>,
    peer: Option<SocketAddr>,
    /// The devices it listens on.
    listening_on: Vec<c_int>,
    /// The connection (local communication ID) on `dev`.
    conn: Option<u32>,
    /// Active side: what the REQ asked; the REP.
    req_sent: Option<ConnectParams>,
    rep: Option<Box<RepInfo>>,
    /// Passive side: the REQ.
    req: Option<Box<ReqInfo>>,
    /// The PSN this side expects first (its Starting PSN).
    psn: u32,
    responder_resources: u8,
    initiator_depth: u8,
    rnr_retry: u8,
    tos: u8,
    ack_timeout: Option<u8>,
    /// Events given to the program / acknowledged.
    reported: u64,
    completed: u64,
    sync: bool,
    /// `rdma_create_ep`'s QP attributes for a passive id's requests.
    qp_init: Option<ibv_qp_init_attr>,
    connect_error: bool,
    /// A disconnect happened (either side): the end of TimeWait is then the program's
    /// business (the kernel's RDMA_CM_DISCONNECT state).
    disconnected: bool,
    path: Option<Box<ibv_sa_path_rec>>,
    /// Multicast groups joined, and the next join's number.
    mcast: Vec<McJoin>,
    next_mc: u64,
}

/// An `rdma_cm_id`: the program sees `id`.
#[repr(C)]
pub struct CmId {
    pub id: rdma_cm_id,
    st: Mutex<IdState>,
    acked: Condvar,
}

impl CmId {
    fn ptr(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// Queues an event for the program on the id's channel.
    fn push(&self, kind: Kind) {
        // SAFETY: an id's channel outlives it (a sync id's own is freed after it).
        if let Some(c) = unsafe { chan(self.id.channel) } {
            c.push(Pending { id: self.ptr(), kind });
        }
    }
}

unsafe fn id_of<'a>(id: *mut rdma_cm_id) -> Option<&'a CmId> {
    // SAFETY: every id we hand out is the first field of a live CmId.
    (!id.is_null()).then(|| unsafe { &*id.cast::<CmId>() })
}

/// Runs an rdma_cm call: `Err(errno)` becomes -1 with errno set, as librdmacm's `ERR()`.
fn call(f: impl FnOnce() -> Result<(), c_int>) -> c_int {
    guard(-1, || match f() {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    })
}

fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: fills the 4-byte buffer.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 4, 0) };
    if n != 4 {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        return t ^ std::process::id();
    }
    u32::from_ne_bytes(b)
}

fn new_id(channel: *mut rdma_event_channel, context: *mut c_void, ps: c_int, qp_type: ibv_qp_type) -> *mut CmId {
    // SAFETY: all-zero is a valid rdma_cm_id (pointers, integers, sockaddr unions).
    let mut id: rdma_cm_id = unsafe { std::mem::zeroed() };
    id.channel = channel;
    id.context = context;
    id.ps = ps;
    id.qp_type = qp_type;
    let st = IdState {
        phase: Phase::Idle,
        dev: None,
        local: None,
        peer: None,
        listening_on: Vec::new(),
        conn: None,
        req_sent: None,
        rep: None,
        req: None,
        psn: random_u32() & 0x00ff_ffff,
        responder_resources: MAX_RD_ATOMIC,
        initiator_depth: MAX_RD_ATOMIC,
        rnr_retry: 7,
        tos: 0,
        ack_timeout: None,
        reported: 0,
        completed: 0,
        sync: false,
        qp_init: None,
        connect_error: false,
        disconnected: false,
        path: None,
        mcast: Vec::new(),
        next_mc: 0,
    };
    Box::into_raw(Box::new(CmId { id, st: Mutex::new(st), acked: Condvar::new() }))
}

fn write_sockaddr(dst: &mut rdma_sockaddr, a: SocketAddr) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    *dst = unsafe { std::mem::zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: writing the sin member of a zeroed union.
            let sin = unsafe { &mut dst.sin };
            sin.sin_family = libc::sa_family_t::try_from(libc::AF_INET).unwrap_or(2);
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above.
            let sin6 = unsafe { &mut dst.sin6 };
            sin6.sin6_family = libc::sa_family_t::try_from(libc::AF_INET6).unwrap_or(10);
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_addr.s6_addr = v6.ip().octets();
            sin6.sin6_scope_id = v6.scope_id();
        }
    }
}

/// The address at `sa` (AF_INET or AF_INET6), or None.
unsafe fn read_sockaddr(sa: *const sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller's sockaddr, read as the family it says it is.
    unsafe {
        match c_int::from((*sa).sa_family) {
            libc::AF_INET => {
                let sin = &*sa.cast::<libc::sockaddr_in>();
                let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
                Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(sin.sin_port)))
            }
            libc::AF_INET6 => {
                let sin6 = &*sa.cast::<libc::sockaddr_in6>();
                let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                Some(SocketAddr::new(IpAddr::V6(ip), u16::from_be(sin6.sin6_port)))
            }
            _ => None,
        }
    }
}

fn gid_of(ip: IpAddr) -> ibv_gid {
    ibv_gid { raw: rnic_verbs::Gid::from_ip(ip).0 }
}

/// Sets the id's device (its context and default PD) and GIDs in the route.
fn attach_dev(id: &CmId, st: &mut IdState, d: &'static CmaDev) -> Result<(), c_int> {
    let pd = d.pd()?;
    st.dev = Some(d.dev.index);
    let p = id.ptr() as *mut CmId;
    // SAFETY: the program's view of our id; it reads these fields after the call.
    unsafe {
        (*p).id.verbs = d.ctx();
        if (*p).id.pd.is_null() {
            (*p).id.pd = pd;
        }
        (*p).id.port_num = 1;
        (*p).id.route.addr.addr.ibaddr.sgid = gid_of(d.ip());
        (*p).id.route.addr.addr.ibaddr.pkey = 0xffff_u16.to_be();
    }
    Ok(())
}

fn set_local(id: &CmId, st: &mut IdState, a: SocketAddr) {
    st.local = Some(a);
    let p = id.ptr() as *mut CmId;
    // SAFETY: as in attach_dev.
    unsafe { write_sockaddr(&mut (*p).id.route.addr.src, a) };
}

fn set_peer(id: &CmId, st: &mut IdState, a: SocketAddr) {
    st.peer = Some(a);
    let p = id.ptr() as *mut CmId;
    // SAFETY: as in attach_dev.
    unsafe {
        write_sockaddr(&mut (*p).id.route.addr.dst, a);
        (*p).id.route.addr.addr.ibaddr.dgid = gid_of(a.ip());
    }
}

/// A free port of the id's port space (the kernel's ephemeral range).
fn ephemeral_port(r: &Routes, ps: c_int) -> Result<u16, c_int> {
    let start = random_u32();
    for i in 0..28232u32 {
        let port = u16::try_from(32768 + (start.wrapping_add(i)) % 28232).unwrap_or(32768);
        if !r.ports.contains_key(&(ps, port)) {
            return Ok(port);
        }
    }
    Err(libc::EADDRNOTAVAIL)
}

fn bind(id: &CmId, st: &mut IdState, addr: SocketAddr) -> Result<(), c_int> {
    if st.phase != Phase::Idle {
        return Err(libc::EINVAL);
    }
    let ip = (!addr.ip().is_unspecified()).then(|| addr.ip());
    let d = match ip {
        Some(ip) => Some(dev_by_ip(ip).ok_or_else(|| {
            diag(format!("rdma_bind_addr: {ip} is the address of no rnic device (RNIC_DEVICES)"));
            libc::EADDRNOTAVAIL
        })?),
        None => None,
    };
    let ps = id.id.ps;
    let mut r = routes().lock();
    let port = if addr.port() == 0 { ephemeral_port(&r, ps)? } else { addr.port() };
    // One id per (port space, port, address); the wildcard takes every address (the
    // kernel's cma_check_port without REUSEADDR).
    if let Some(b) = r.ports.get(&(ps, port)) {
        if b.iter().any(|(a, _)| a.is_none() || ip.is_none() || *a == ip) {
            return Err(libc::EADDRINUSE);
        }
    }
    r.ports.entry((ps, port)).or_default().push((ip, id.ptr()));
    drop(r);
    if let Some(d) = d {
        attach_dev(id, st, d)?;
    }
    set_local(id, st, SocketAddr::new(addr.ip(), port));
    st.phase = Phase::Bound;
    Ok(())
}

fn unbind(id: &CmId, st: &IdState, r: &mut Routes) {
    if let Some(port) = st.local.map(|a| a.port()) {
        let key = (id.id.ps, port);
        if let Some(v) = r.ports.get_mut(&key) {
            v.retain(|(_, i)| *i != id.ptr());
            if v.is_empty() {
                r.ports.remove(&key);
            }
        }
    }
}

/// The device that reaches `dst`: the one at that address, else the one whose address
/// the kernel would send from (its route to `dst`).
fn device_for(dst: IpAddr) -> Result<&'static CmaDev, c_int> {
    if let Some(d) = dev_by_ip(dst) {
        return Ok(d);
    }
    let sock = std::net::UdpSocket::bind(if dst.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" })
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))?;
    sock.connect(SocketAddr::new(dst, 4791)).map_err(|e| e.raw_os_error().unwrap_or(libc::ENETUNREACH))?;
    let src = sock.local_addr().map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))?.ip();
    dev_by_ip(src).ok_or_else(|| {
        diag(format!("rdma_resolve_addr: {dst} is reached from {src}, the address of no rnic device"));
        libc::EADDRNOTAVAIL
    })
}

/// librdmacm's `ucma_complete`: on a synchronous id, waits for the call's event and
/// keeps it in `id->event`; an error event fails the call.
fn complete(id: &CmId) -> Result<(), c_int> {
    if !id.st.lock().sync {
        return Ok(());
    }
    let p = id.ptr() as *mut CmId;
    // SAFETY: our id; the program does not use id->event concurrently with the call.
    unsafe {
        if !(*p).id.event.is_null() {
            rnic_cm_rdma_ack_cm_event((*p).id.event);
            (*p).id.event = null_mut();
        }
    }
    let ev = get_event(id.id.channel)?;
    // SAFETY: as above; the event is ours until acknowledged.
    unsafe { (*p).id.event = ev };
    // SAFETY: just made.
    let e = unsafe { &*ev };
    if e.status != 0 {
        return Err(if e.event == RDMA_CM_EVENT_REJECTED { libc::ECONNREFUSED } else { e.status.abs() });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The exported functions

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_create_event_channel() -> *mut rdma_event_channel {
    guard(null_mut(), || {
        if let Err(e) = cma() {
            set_errno(e);
            return null_mut();
        }
        match Channel::new() {
            Ok(c) => c.cast(),
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    if channel.is_null() {
        return;
    }
    // SAFETY: a channel we made, which the program no longer uses.
    drop(unsafe { Box::from_raw(channel.cast::<Channel>()) });
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    call(|| {
        cma()?;
        if id.is_null() {
            return Err(libc::EINVAL);
        }
        let qp_type = match ps {
            RDMA_PS_UDP | RDMA_PS_IPOIB => IBV_QPT_UD,
            RDMA_PS_TCP | RDMA_PS_IB => IBV_QPT_RC,
            _ => return Err(libc::EINVAL),
        };
        let (channel, sync) = if channel.is_null() { (Channel::new()?.cast(), true) } else { (channel, false) };
        let p = new_id(channel, context, ps, qp_type);
        // SAFETY: just made.
        unsafe { (*p).st.lock().sync = sync };
        // SAFETY: the caller's out-parameter.
        unsafe { *id = p.cast() };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    call(|| {
        destroy(cid);
        Ok(())
    })
}

fn destroy(cid: &CmId) {
    let p = cid.ptr();
    // The kernel leaves an id's multicast groups when it is destroyed
    // (`cma_leave_mc_groups`): the QP, if it is still there, no longer receives from them.
    let joined = std::mem::take(&mut cid.st.lock().mcast);
    if !cid.id.qp.is_null() {
        for m in joined.iter().filter(|m| m.attached) {
            let g = ibv_gid { raw: m.mgid };
            // SAFETY: the id's QP, one of this library's.
            unsafe { crate::qp::ibv_detach_mcast(cid.id.qp, &g, 0) };
        }
    }
    // Unregister first: the routers no longer queue events for it.
    let (conn, dev, listening, phase) = {
        let st = cid.st.lock();
        let mut r = routes().lock();
        if let (Some(c), Some(d)) = (st.conn, st.dev) {
            r.conns.remove(&(d, c));
        }
        let sid = st.local.map(|a| service_id(cid.id.ps, a.port()));
        for d in &st.listening_on {
            if let Some(sid) = sid {
                r.listeners.remove(&(*d, sid));
            }
        }
        unbind(cid, &st, &mut r);
        (st.conn, st.dev, st.listening_on.clone().into_iter().zip(std::iter::repeat(sid)).collect::<Vec<_>>(), st.phase)
    };
    // What the kernel's ib_destroy_cm_id does to the connection: REJ an unanswered
    // request, DREQ an established one.
    if let (Some(conn), Some(d)) = (conn, dev.and_then(dev_by_index)) {
        if let Ok(core) = d.core() {
            let ud = cid.id.qp_type == IBV_QPT_UD;
            let _ = match phase {
                Phase::Requested if ud => {
                    let p = sidr_refusal(SidrStatus::Rejected, &[]);
                    core.cm_call(move |cm, now| cm.sidr_reply(now, conn, &p))
                }
                Phase::Connecting if ud => core.cm_call(move |cm, _| cm.cancel_sidr(conn)),
                Phase::Requested => core.cm_call(move |cm, now| cm.reject(now, conn, &[])),
                Phase::Accepted | Phase::Connected => core.cm_call(move |cm, now| cm.disconnect(now, conn, &[])),
                _ => Ok(Ok(())),
            };
        }
    }
    for (d, sid) in listening {
        if let (Some(d), Some(sid)) = (dev_by_index(d), sid) {
            if let Ok(core) = d.core() {
                let _ = core.cm_call(move |cm, _| {
                    cm.unlisten(sid);
                    Ok::<(), core::CmError>(())
                });
            }
        }
    }
    // Events not yet taken are dropped (a request's new id refused and freed).
    // SAFETY: the id's channel is live.
    if let Some(c) = unsafe { chan(cid.id.channel) } {
        for ev in c.take_for(p) {
            if let Kind::ConnectRequest { dev, conn, req } = ev.kind {
                reject_orphan(
                    dev,
                    conn,
                    req.ud(),
                    "the listening id was destroyed before the program took the request",
                );
            }
        }
    }
    // SAFETY: our id.
    unsafe {
        let e = cid.id.event;
        if !e.is_null() {
            (*(p as *mut CmId)).id.event = null_mut();
            rnic_cm_rdma_ack_cm_event(e);
        }
    }
    {
        let mut st = cid.st.lock();
        while st.completed < st.reported {
            cid.acked.wait(&mut st);
        }
    }
    let sync = cid.st.lock().sync;
    let channel = cid.id.channel;
    // SAFETY: made by new_id; nothing refers to it any more.
    drop(unsafe { Box::from_raw(p as *mut CmId) });
    if sync {
        // SAFETY: the id's own channel.
        unsafe { rnic_cm_rdma_destroy_event_channel(channel) };
    }
}

/// Runs `f` on device `d`'s CM for librdmacm call `op`: the CM's refusal is `EINVAL`
/// (its reason on stderr), a device that stopped `ENODEV`.
fn cm_run<T: Send + 'static>(
    d: &'static CmaDev,
    op: &str,
    f: impl FnOnce(&mut core::CmAgent, rnic_core::Time) -> Result<T, core::CmError> + Send + 'static,
) -> Result<T, c_int> {
    match d.core()?.cm_call(f) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            diag(format!("{op}: {e}"));
            Err(libc::EINVAL)
        }
        Err(_) => Err(libc::ENODEV),
    }
}

fn service_id(ps: c_int, port: u16) -> u64 {
    rnic_wire::cm::service_id(u16::try_from(ps).unwrap_or(0), port)
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    call(|| {
        // SAFETY: the caller's address.
        let a = unsafe { read_sockaddr(addr) }.ok_or(libc::EAFNOSUPPORT)?;
        let mut st = cid.st.lock();
        bind(cid, &mut st, a)
    })
}

fn einval() -> c_int {
    set_errno(libc::EINVAL);
    -1
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src_addr: *mut sockaddr,
    dst_addr: *mut sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    call(|| {
        // SAFETY: the caller's addresses.
        let dst = unsafe { read_sockaddr(dst_addr) }.ok_or(libc::EAFNOSUPPORT)?;
        // SAFETY: as above.
        let src = unsafe { read_sockaddr(src_addr) };
        {
            let mut st = cid.st.lock();
            if st.phase == Phase::Idle {
                let want = src.unwrap_or_else(|| {
                    SocketAddr::new(
                        if dst.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() },
                        0,
                    )
                });
                bind(cid, &mut st, want)?;
            }
            if !matches!(st.phase, Phase::Bound | Phase::AddrResolved) {
                return Err(libc::EINVAL);
            }
            let d = match st.dev.and_then(dev_by_index) {
                Some(d) => d,
                None => match device_for(canonical(dst.ip())) {
                    Ok(d) => d,
                    Err(e) => {
                        // The kernel answers an unroutable address with ADDR_ERROR.
                        drop(st);
                        cid.push(Kind::AddrError(e));
                        return complete(cid);
                    }
                },
            };
            attach_dev(cid, &mut st, d)?;
            let port = st.local.map_or(0, |a| a.port());
            set_local(cid, &mut st, SocketAddr::new(d.ip(), port));
            set_peer(cid, &mut st, dst);
            st.phase = Phase::AddrResolved;
            // Start the device now: its CM must be running before a REQ can leave.
            d.core()?;
        }
        cid.push(Kind::AddrResolved);
        complete(cid)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    call(|| {
        {
            let mut st = cid.st.lock();
            if st.phase != Phase::AddrResolved {
                return Err(libc::EINVAL);
            }
            let d = st.dev.and_then(dev_by_index).ok_or(libc::EINVAL)?;
            let path = path_record(cid, &st, d);
            let p = cid.ptr() as *mut CmId;
            let rec = st.path.insert(Box::new(path));
            // SAFETY: the program's view of our id; the record lives as long as the id.
            unsafe {
                (*p).id.route.path_rec = std::ptr::from_mut::<ibv_sa_path_rec>(rec);
                (*p).id.route.num_paths = 1;
            }
            st.phase = Phase::RouteResolved;
        }
        cid.push(Kind::RouteResolved);
        complete(cid)
    })
}

/// The address vector to reach `peer` (RoCEv2: a GRH to its GID, from GID index 1).
fn ah_to(peer: IpAddr, tos: u8) -> ibv_ah_attr {
    // SAFETY: all-zero is a valid address vector.
    let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
    a.is_global = 1;
    a.port_num = 1;
    a.grh.dgid = gid_of(canonical(peer));
    a.grh.sgid_index = 1;
    a.grh.hop_limit = 64;
    a.grh.traffic_class = tos;
    a
}

/// The path MTU the kernel gives a RoCE route from `ip` (`iboe_get_mtu` of the MTU of the
/// interface holding the address, less the RoCEv2 headers): 1024 on a 1500-byte Ethernet,
/// 4096 on loopback or jumbo frames. None if no interface holds it.
fn route_mtu(ip: IpAddr) -> Option<u8> {
    let name = interface_of(ip)?;
    let mtu: usize = std::fs::read_to_string(format!("/sys/class/net/{name}/mtu")).ok()?.trim().parse().ok()?;
    // GRH 40 + UDP 8 + BTH 12 + XRCETH 4 + AtomicETH 28 + ICRC 4 (the kernel's overhead).
    let room = mtu.saturating_sub(96);
    Some(match room {
        r if r >= 4096 => 5,
        r if r >= 2048 => 4,
        r if r >= 1024 => 3,
        r if r >= 512 => 2,
        _ => 1,
    })
}

/// The name of the interface that holds `ip` (getifaddrs).
fn interface_of(ip: IpAddr) -> Option<String> {
    let mut ifa: *mut libc::ifaddrs = null_mut();
    // SAFETY: getifaddrs fills a list we free below.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return None;
    }
    let mut found = None;
    let mut p = ifa;
    while !p.is_null() {
        // SAFETY: a node of the list getifaddrs made; its address may be NULL.
        let (addr, name, next) = unsafe { ((*p).ifa_addr, (*p).ifa_name, (*p).ifa_next) };
        // SAFETY: a sockaddr of the list (or NULL).
        if unsafe { read_sockaddr(addr) }.is_some_and(|a| canonical(a.ip()) == canonical(ip)) && !name.is_null() {
            // SAFETY: the interface's NUL-terminated name.
            found = Some(unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned());
            break;
        }
        p = next;
    }
    // SAFETY: the list getifaddrs returned.
    unsafe { libc::freeifaddrs(ifa) };
    found
}

/// The path record the kernel builds for a RoCE route (`cma_resolve_iboe_route`).
fn path_record(cid: &CmId, st: &IdState, d: &'static CmaDev) -> ibv_sa_path_rec {
    // SAFETY: all-zero is a valid path record.
    let mut p: ibv_sa_path_rec = unsafe { std::mem::zeroed() };
    // SAFETY: the GIDs the id's route holds.
    unsafe {
        p.sgid = cid.id.route.addr.addr.ibaddr.sgid;
        p.dgid = cid.id.route.addr.addr.ibaddr.dgid;
    }
    p.pkey = 0xffff_u16.to_be();
    p.hop_limit = 64;
    p.traffic_class = st.tos;
    p.reversible = 1;
    p.numb_path = 1;
    p.mtu_selector = 2;
    let port = d.core().map_or(5, |c| u8::try_from(c.port_mtu().to_ibv()).unwrap_or(5));
    p.mtu = route_mtu(d.ip()).map_or(port, |m| m.min(port));
    p.rate_selector = 2;
    p.rate = 7; // IB_RATE_10_GBPS, what rxe reports
    p.packet_life_time_selector = 2;
    p.packet_life_time = PACKET_LIFETIME;
    p
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_listen(id: *mut rdma_cm_id, _backlog: c_int) -> c_int {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    call(|| {
        let mut st = cid.st.lock();
        if st.phase == Phase::Idle {
            // The kernel binds an unbound listener to the wildcard and a free port.
            bind(cid, &mut st, SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0))?;
        }
        if st.phase != Phase::Bound {
            return Err(libc::EINVAL);
        }
        if cid.id.ps == RDMA_PS_IPOIB {
            diag("rdma_listen: the IPoIB port space has no meaning on RoCE");
            return Err(libc::EOPNOTSUPP);
        }
        let local = st.local.ok_or(libc::EINVAL)?;
        let sid = service_id(cid.id.ps, local.port());
        // A wildcard listens on every device of its family (IPv6's takes IPv4 too).
        let on: Vec<&'static CmaDev> = match st.dev.and_then(dev_by_index) {
            Some(d) => vec![d],
            None => cma()?.devs.iter().filter(|d| local.is_ipv6() || d.ip().is_ipv4()).collect(),
        };
        // The routes lock is held while the CMs start listening, so that a request the
        // CM hands out at once finds its listener (the router takes the same lock).
        let mut r = routes().lock();
        let mut done = Vec::new();
        for d in on {
            let res = d.core().and_then(|core| match core.cm_call(move |cm, _| cm.listen(sid)) {
                Ok(Ok(())) => Ok(()),
                Ok(Err(_)) => Err(libc::EADDRINUSE),
                Err(_) => Err(libc::ENODEV),
            });
            if let Err(e) = res {
                for d in done {
                    if let Some(d) = dev_by_index(d) {
                        if let Ok(core) = d.core() {
                            let _ = core.cm_call(move |cm, _| cm.unlisten(sid));
                        }
                    }
                }
                return Err(e);
            }
            done.push(d.dev.index);
        }
        for d in &done {
            r.listeners.insert((*d, sid), cid.ptr());
        }
        st.listening_on = done;
        st.phase = Phase::Listening;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_connect(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    call(|| {
        // SAFETY: the caller's parameters (or NULL).
        let param = unsafe { param.as_ref() };
        let qp = cid.id.qp;
        if cid.id.ps == RDMA_PS_IPOIB {
            diag("rdma_connect: the IPoIB port space has no meaning on RoCE");
            return Err(libc::EOPNOTSUPP);
        }
        if cid.id.qp_type == IBV_QPT_UD {
            return sidr_connect(cid, param);
        }
        if qp.is_null() && param.is_none() {
            return Err(libc::EINVAL);
        }
        let mut st = cid.st.lock();
        if st.phase != Phase::RouteResolved {
            return Err(libc::EINVAL);
        }
        let d = st.dev.and_then(dev_by_index).ok_or(libc::EINVAL)?;
        let (local, peer) = (st.local.ok_or(libc::EINVAL)?, st.peer.ok_or(libc::EINVAL)?);
        // ucma_valid_param: depths beyond the device's are refused.
        let depth = |v: Option<u8>| -> Result<u8, c_int> {
            match v {
                None | Some(RDMA_MAX_RESP_RES) => Ok(MAX_RD_ATOMIC),
                Some(v) if v > MAX_RD_ATOMIC => Err(libc::EINVAL),
                Some(v) => Ok(v),
            }
        };
        st.initiator_depth = depth(param.map(|p| p.initiator_depth))?;
        st.responder_resources = depth(param.map(|p| p.responder_resources))?;
        // SAFETY: the program's QP (ours) when it made one on the id.
        let (qpn, srq) = match unsafe { qp.as_ref() } {
            Some(q) => (q.qp_num, !q.srq.is_null()),
            None => param.map_or((0, false), |p| (p.qp_num, p.srq != 0)),
        };
        let user = param.map_or(&[][..], |p| private(p.private_data, p.private_data_len));
        if user.len() > REQ_PRIVATE {
            return Err(libc::EINVAL);
        }
        let mut pd = vec![0u8; CMA_HDR_LEN];
        CmaHeader { src_port: local.port(), src: canonical(local.ip()), dst: canonical(peer.ip()) }
            .emit(&mut pd)
            .ok_or(libc::EAFNOSUPPORT)?;
        pd.extend_from_slice(user);
        let (retry, rnr) = param.map_or((7, 7), |p| (p.retry_count.min(7), p.rnr_retry_count.min(7)));
        st.rnr_retry = rnr;
        let mtu = st.path.as_ref().map_or(5, |p| p.mtu);
        let params = ConnectParams {
            dst: canonical(peer.ip()),
            service_id: service_id(cid.id.ps, peer.port()),
            transport: if cid.id.qp_type == IBV_QPT_UC { CmTransport::Uc } else { CmTransport::Rc },
            qpn,
            psn: st.psn,
            responder_resources: st.responder_resources,
            initiator_depth: st.initiator_depth,
            path_mtu: mtu,
            retry_count: retry,
            rnr_retry_count: rnr,
            local_ack_timeout: st.ack_timeout.unwrap_or(PACKET_LIFETIME + 1),
            response_timeout: CM_RESPONSE_TIMEOUT,
            max_cm_retries: CM_MAX_RETRIES,
            srq,
            private_data: pd,
        };
        let p2 = params.clone();
        // Register before the REQ leaves, under the routes lock, so that the answer
        // finds the id however fast it comes.
        let mut r = routes().lock();
        let conn = cm_run(d, "rdma_connect", move |cm, now| cm.connect(now, &p2))?;
        r.conns.insert((d.dev.index, conn), cid.ptr());
        drop(r);
        st.conn = Some(conn);
        st.req_sent = Some(params);
        st.phase = Phase::Connecting;
        drop(st);
        complete(cid)
    })
}

/// `rdma_connect` on a UD id: a SIDR_REQ (IBA 12.11) with rdma_cm's header, answered by
/// ESTABLISHED (the remote QPN and Q_Key in `param.ud`) or UNREACHABLE.
fn sidr_connect(cid: &CmId, param: Option<&rdma_conn_param>) -> Result<(), c_int> {
    let mut st = cid.st.lock();
    if st.phase != Phase::RouteResolved {
        return Err(libc::EINVAL);
    }
    let d = st.dev.and_then(dev_by_index).ok_or(libc::EINVAL)?;
    let (local, peer) = (st.local.ok_or(libc::EINVAL)?, st.peer.ok_or(libc::EINVAL)?);
    let user = param.map_or(&[][..], |p| private(p.private_data, p.private_data_len));
    if user.len() > SIDR_REQ_PRIVATE {
        return Err(libc::EINVAL);
    }
    let mut pd = vec![0u8; CMA_HDR_LEN];
    CmaHeader { src_port: local.port(), src: canonical(local.ip()), dst: canonical(peer.ip()) }
        .emit(&mut pd)
        .ok_or(libc::EAFNOSUPPORT)?;
    pd.extend_from_slice(user);
    let p = SidrParams::new(canonical(peer.ip()), service_id(cid.id.ps, peer.port()), pd);
    let mut r = routes().lock();
    let conn = cm_run(d, "rdma_connect", move |cm, now| cm.sidr_request(now, &p))?;
    r.conns.insert((d.dev.index, conn), cid.ptr());
    drop(r);
    st.conn = Some(conn);
    st.phase = Phase::Connecting;
    drop(st);
    complete(cid)
}

/// The private data of a connection parameter.
fn private<'a>(p: *const c_void, len: u8) -> &'a [u8] {
    if p.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: the program's buffer of `len` bytes.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), usize::from(len)) }
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_accept(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    call(|| {
        // SAFETY: the caller's parameters (or NULL).
        let param = unsafe { param.as_ref() };
        let qp = cid.id.qp;
        if qp.is_null() && param.is_none() {
            return Err(libc::EINVAL);
        }
        let mut st = cid.st.lock();
        if st.phase != Phase::Requested {
            return Err(libc::EINVAL);
        }
        let d = st.dev.and_then(dev_by_index).ok_or(libc::EINVAL)?;
        let conn = st.conn.ok_or(libc::EINVAL)?;
        if cid.id.qp_type == IBV_QPT_UD {
            // The SIDR_REP names the UD QP and rdma_cm's Q_Key; no event follows, and a
            // synchronous id's request event is done with (librdmacm's rdma_accept).
            let user = param.map_or(&[][..], |p| private(p.private_data, p.private_data_len));
            if user.len() > SIDR_REP_PRIVATE {
                return Err(libc::EINVAL);
            }
            // SAFETY: the program's QP (ours) when it made one on the id.
            let qpn = unsafe { qp.as_ref() }.map_or_else(|| param.map_or(0, |p| p.qp_num), |q| q.qp_num);
            let p = SidrRepParams { status: SidrStatus::Valid, qpn, qkey: RDMA_UDP_QKEY, private_data: user.to_vec() };
            cm_run(d, "rdma_accept", move |cm, now| cm.sidr_reply(now, conn, &p))?;
            st.phase = Phase::Connected;
            let sync = st.sync;
            drop(st);
            if sync {
                let p = cid.ptr() as *mut CmId;
                // SAFETY: our id's kept request event.
                unsafe {
                    if !(*p).id.event.is_null() {
                        rnic_cm_rdma_ack_cm_event((*p).id.event);
                        (*p).id.event = null_mut();
                    }
                }
            }
            return Ok(());
        }
        // rdma_accept: the depths the program gives, else the request's capped at the
        // device's.
        match param.map(|p| p.initiator_depth) {
            Some(v) if v != RDMA_MAX_INIT_DEPTH => st.initiator_depth = v,
            _ => st.initiator_depth = st.initiator_depth.min(MAX_RD_ATOMIC),
        }
        match param.map(|p| p.responder_resources) {
            Some(v) if v != RDMA_MAX_RESP_RES => st.responder_resources = v,
            _ => st.responder_resources = st.responder_resources.min(MAX_RD_ATOMIC),
        }
        if st.initiator_depth > MAX_RD_ATOMIC || st.responder_resources > MAX_RD_ATOMIC {
            return Err(libc::EINVAL);
        }
        if let Some(p) = param {
            st.rnr_retry = p.rnr_retry_count.min(7);
        }
        let user = param.map_or(&[][..], |p| private(p.private_data, p.private_data_len));
        if user.len() > REP_PRIVATE {
            return Err(libc::EINVAL);
        }
        // SAFETY: the program's QP (ours) when it made one on the id.
        let (qpn, srq) = match unsafe { qp.as_ref() } {
            Some(q) => (q.qp_num, !q.srq.is_null()),
            None => param.map_or((0, false), |p| (p.qp_num, p.srq != 0)),
        };
        if !qp.is_null() {
            bring_up(cid, &st, qp)?;
        }
        let accept = AcceptParams {
            qpn,
            psn: st.psn,
            responder_resources: st.responder_resources,
            initiator_depth: st.initiator_depth,
            rnr_retry_count: st.rnr_retry,
            target_ack_delay: 0,
            srq,
            private_data: user.to_vec(),
        };
        if let Err(e) = cm_run(d, "rdma_accept", move |cm, now| cm.accept(now, conn, &accept)) {
            modify_err(qp);
            return Err(e);
        }
        st.phase = Phase::Accepted;
        drop(st);
        complete(cid)
    })
}

/// Moves the id's QP through INIT, RTR and RTS with the attributes of its connection
/// (librdmacm's `ucma_modify_qp_rtr` and `ucma_modify_qp_rts`).
fn bring_up(cid: &CmId, st: &IdState, qp: *mut ibv_qp) -> Result<(), c_int> {
    for state in [IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS] {
        let (mut attr, mask) = qp_attr(cid, st, state)?;
        // SAFETY: the id's QP and our attributes.
        let r = unsafe { crate::qp::ibv_modify_qp(qp, &mut attr, mask) };
        if r != 0 {
            return Err(r);
        }
    }
    Ok(())
}

fn modify_err(qp: *mut ibv_qp) {
    if qp.is_null() {
        return;
    }
    let mut a = ibv_qp_attr { qp_state: IBV_QPS_ERR, ..ibv_qp_attr::default() };
    // SAFETY: the id's QP.
    let _ = unsafe { crate::qp::ibv_modify_qp(qp, &mut a, IBV_QP_STATE as c_int) };
}

/// What `rdma_init_qp_attr` returns for `state`: the kernel's `cma_ib_init_qp_attr`
/// before a connection, `ib_cm_init_qp_attr` once there is one.
fn qp_attr(cid: &CmId, st: &IdState, state: u32) -> Result<(ibv_qp_attr, c_int), c_int> {
    let mut a = ibv_qp_attr { qp_state: state, ..ibv_qp_attr::default() };
    let ud = cid.id.qp_type == IBV_QPT_UD;
    let connected = st.rep.is_some() || st.req.is_some();
    let mask = match state {
        IBV_QPS_INIT => {
            a.pkey_index = 0;
            a.port_num = 1;
            if ud {
                a.qkey = RDMA_UDP_QKEY;
                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY
            } else {
                // ib_cm_init_qp_attr (INIT): remote writes, and READs and atomics when
                // this side answers any; none before a connection.
                a.qp_access_flags = if !connected {
                    0
                } else if st.responder_resources > 0 {
                    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
                } else {
                    IBV_ACCESS_REMOTE_WRITE
                };
                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS
            }
        }
        IBV_QPS_RTR if ud => IBV_QP_STATE,
        IBV_QPS_RTS if ud => {
            a.sq_psn = 0;
            IBV_QP_STATE | IBV_QP_SQ_PSN
        }
        IBV_QPS_RTR => {
            let peer = st.peer.ok_or(libc::EINVAL)?;
            let (mtu, dest, their_depth) = if let (Some(sent), Some(rep)) = (&st.req_sent, &st.rep) {
                (sent.path_mtu, rep.remote_qpn, rep.initiator_depth)
            } else if let Some(req) = &st.req {
                (req.path_mtu, req.remote_qpn, req.initiator_depth)
            } else {
                return Err(libc::EINVAL);
            };
            a.path_mtu = u32::from(mtu);
            a.dest_qp_num = dest;
            a.rq_psn = st.psn;
            a.max_dest_rd_atomic = st.responder_resources.min(their_depth);
            a.min_rnr_timer = core::MIN_RNR_TIMER;
            a.ah_attr.is_global = 1;
            a.ah_attr.port_num = 1;
            a.ah_attr.grh.dgid = gid_of(canonical(peer.ip()));
            a.ah_attr.grh.sgid_index = 1;
            a.ah_attr.grh.hop_limit = 64;
            a.ah_attr.grh.traffic_class = st.tos;
            IBV_QP_STATE
                | IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER
        }
        IBV_QPS_RTS => {
            if let (Some(sent), Some(rep)) = (&st.req_sent, &st.rep) {
                a.sq_psn = rep.remote_psn;
                a.timeout = sent.local_ack_timeout;
                a.retry_cnt = sent.retry_count;
                a.rnr_retry = rep.rnr_retry_count;
                a.max_rd_atomic = st.initiator_depth.min(rep.responder_resources);
            } else if let Some(req) = &st.req {
                a.sq_psn = req.remote_psn;
                a.timeout = st.ack_timeout.unwrap_or(req.local_ack_timeout);
                a.retry_cnt = req.retry_count;
                a.rnr_retry = st.rnr_retry;
                a.max_rd_atomic = st.initiator_depth.min(req.responder_resources);
            } else {
                return Err(libc::EINVAL);
            }
            IBV_QP_STATE
                | IBV_QP_SQ_PSN
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_MAX_QP_RD_ATOMIC
        }
        _ => return Err(libc::EINVAL),
    };
    Ok((a, mask as c_int))
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    call(|| {
        if attr.is_null() || mask.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's attributes: the state it asks for is in qp_state.
        let state = unsafe { (*attr).qp_state };
        let st = cid.st.lock();
        let (a, m) = qp_attr(cid, &st, state)?;
        // SAFETY: the caller's out-parameters.
        unsafe {
            *attr = a;
            *mask = m;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_establish(id: *mut rdma_cm_id) -> c_int {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    call(|| {
        if !cid.id.qp.is_null() {
            return Err(libc::EINVAL);
        }
        send_rtu(cid)
    })
}

/// The active side's RTU, once its QP is ready (librdmacm's ACCEPT on the active side).
fn send_rtu(cid: &CmId) -> Result<(), c_int> {
    let mut st = cid.st.lock();
    if st.phase != Phase::Connecting || st.rep.is_none() {
        return Err(libc::EINVAL);
    }
    let conn = st.conn.ok_or(libc::EINVAL)?;
    let d = st.dev.and_then(dev_by_index).ok_or(libc::EINVAL)?;
    cm_run(d, "rdma_establish", move |cm, now| cm.ready_to_use(now, conn, &[]))?;
    st.phase = Phase::Connected;
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_reject(id: *mut rdma_cm_id, private_data: *const c_void, len: u8) -> c_int {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    call(|| {
        let user = private(private_data, len);
        if user.len() > REJ_PRIVATE {
            return Err(libc::EINVAL);
        }
        let mut st = cid.st.lock();
        if st.phase != Phase::Requested {
            return Err(libc::EINVAL);
        }
        let conn = st.conn.ok_or(libc::EINVAL)?;
        let d = st.dev.and_then(dev_by_index).ok_or(libc::EINVAL)?;
        let pd = user.to_vec();
        let ud = cid.id.qp_type == IBV_QPT_UD;
        if ud && user.len() > SIDR_REP_PRIVATE {
            return Err(libc::EINVAL);
        }
        // A UD id's request is refused with a SIDR_REP of status 2 (IB_SIDR_REJECT).
        cm_run(d, "rdma_reject", move |cm, now| {
            if ud {
                cm.sidr_reply(now, conn, &sidr_refusal(SidrStatus::Rejected, &pd))
            } else {
                cm.reject(now, conn, &pd)
            }
        })?;
        st.phase = Phase::Disconnected;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_reject_ece(id: *mut rdma_cm_id, private_data: *const c_void, len: u8) -> c_int {
    // rnic has no ECE options to disagree on: a plain rejection.
    // SAFETY: forwarded as given.
    unsafe { rnic_cm_rdma_reject(id, private_data, len) }
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_notify(id: *mut rdma_cm_id, _event: c_int) -> c_int {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    // The kernel's rdma_notify tells the CM that the QP saw the peer's first packet
    // (IBV_EVENT_COMM_EST) so that a passive side whose RTU was lost is established.
    call(|| {
        let st = cid.st.lock();
        let (Some(conn), Some(d)) = (st.conn, st.dev.and_then(dev_by_index)) else { return Err(libc::EINVAL) };
        match d.core()?.cm_call(move |cm, _| cm.notify_established(conn)) {
            Ok(_) => Ok(()),
            Err(_) => Err(libc::ENODEV),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    call(|| {
        // A UD id has no connection to close (the kernel's rdma_disconnect: EINVAL).
        if cid.id.verbs.is_null() || cid.id.qp_type == IBV_QPT_UD {
            return Err(libc::EINVAL);
        }
        // ucma_shutdown: the QP goes to ERR first (its work requests flush).
        modify_err(cid.id.qp);
        let mut st = cid.st.lock();
        let (Some(conn), Some(d)) = (st.conn, st.dev.and_then(dev_by_index)) else { return Err(libc::EINVAL) };
        match st.phase {
            Phase::Connected | Phase::Accepted | Phase::Connecting => {
                // A DREQ, or the DREP to the peer's DREQ that the CM already answered.
                let _ = d.core()?.cm_call(move |cm, now| cm.disconnect(now, conn, &[]));
            }
            Phase::Disconnected => {}
            _ => return Err(libc::EINVAL),
        }
        st.phase = Phase::Disconnected;
        st.disconnected = true;
        drop(st);
        complete(cid)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    call(|| {
        if event.is_null() {
            return Err(libc::EINVAL);
        }
        let ev = get_event(channel)?;
        // SAFETY: the caller's out-parameter.
        unsafe { *event = ev };
        Ok(())
    })
}

/// An event as the program holds it: the C struct, then its private data and the id
/// whose count its acknowledgement completes.
#[repr(C)]
struct Event {
    ev: rdma_cm_event,
    data: [u8; EVENT_PRIVATE],
    counted: usize,
}

fn get_event(channel: *mut rdma_event_channel) -> Result<*mut rdma_cm_event, c_int> {
    // SAFETY: a channel we made.
    let c = unsafe { chan(channel) }.ok_or(libc::EINVAL)?;
    loop {
        let p = c.pop()?;
        if let Some(ev) = convert(p) {
            return Ok(ev);
        }
    }
}

fn new_event(id: &CmId, ty: rdma_cm_event_type, status: c_int, data: &[u8]) -> Box<Event> {
    // SAFETY: all-zero is a valid event (pointers, integers, unions of them).
    let mut e: Box<Event> = Box::new(unsafe { std::mem::zeroed() });
    e.ev.id = id.ptr() as *mut rdma_cm_id;
    e.ev.event = ty;
    e.ev.status = status;
    e.counted = id.ptr();
    let n = data.len().min(EVENT_PRIVATE);
    e.data[..n].copy_from_slice(&data[..n]);
    let ptr = if n > 0 { e.data.as_ptr().cast::<c_void>() } else { std::ptr::null() };
    // Writing a union's field (the conn member of the zeroed union) is safe.
    e.ev.param.conn.private_data = ptr;
    e.ev.param.conn.private_data_len = u8::try_from(n).unwrap_or(u8::MAX);
    e
}

/// Turns a queued event into the program's, doing what librdmacm does on the way
/// (`rdma_get_cm_event`): None when the event is consumed here.
fn convert(p: Pending) -> Option<*mut rdma_cm_event> {
    // SAFETY: queued events name live ids (destroy takes an id's events out first).
    let id = unsafe { &*(p.id as *const CmId) };
    let ev = match p.kind {
        Kind::AddrResolved => new_event(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0, &[]),
        Kind::AddrError(e) => new_event(id, RDMA_CM_EVENT_ADDR_ERROR, -e, &[]),
        Kind::RouteResolved => new_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, &[]),
        Kind::ConnectRequest { dev, conn, req } => return conn_request(id, dev, conn, req),
        Kind::ConnectReply(rep) => conn_reply(id, rep),
        Kind::Established => {
            let mut st = id.st.lock();
            // The active side's ESTABLISHED was the REP's (librdmacm turns the kernel's
            // CONNECT_RESPONSE into it, or rdma_establish ends without one): the CM's
            // note that the RTU left is not the program's business.
            if st.req_sent.is_some() {
                return None;
            }
            if st.phase == Phase::Accepted {
                st.phase = Phase::Connected;
            }
            drop(st);
            new_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, &[])
        }
        Kind::Rejected { reason, private_data } => {
            let mut st = id.st.lock();
            if st.connect_error {
                return None;
            }
            st.phase = Phase::Disconnected;
            drop(st);
            modify_err(id.id.qp);
            // The kernel's REJECTED carries the IBA reject reason as its status.
            new_event(id, RDMA_CM_EVENT_REJECTED, c_int::from(reason), &private_data)
        }
        Kind::Disconnected { private_data } => {
            let mut st = id.st.lock();
            if st.connect_error {
                return None;
            }
            st.phase = Phase::Disconnected;
            st.disconnected = true;
            drop(st);
            new_event(id, RDMA_CM_EVENT_DISCONNECTED, 0, &private_data)
        }
        Kind::SidrReply { status, qpn, qkey, private_data } => {
            let mut st = id.st.lock();
            let peer = st.peer.map(|a| canonical(a.ip()));
            let tos = st.tos;
            // cma_sidr_rep_handler: a refusal is UNREACHABLE with the SIDR status; a
            // valid answer is ESTABLISHED with the address, QPN and Q_Key to send to.
            let ev = if status == SidrStatus::Valid {
                st.phase = Phase::Connected;
                let mut e = new_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, &private_data);
                if let Some(peer) = peer {
                    // SAFETY: writing the ud member of the event's union.
                    unsafe {
                        let u = &mut e.ev.param.ud;
                        u.ah_attr = ah_to(peer, tos);
                        u.qp_num = qpn;
                        u.qkey = qkey;
                    }
                }
                e
            } else {
                st.phase = Phase::Disconnected;
                new_event(id, RDMA_CM_EVENT_UNREACHABLE, c_int::from(u8::from(status)), &private_data)
            };
            drop(st);
            ev
        }
        // cma_ib_handler passes IB_CM_TIMEWAIT_EXIT on only for an id in its DISCONNECT
        // state: after a rejection or a timeout nobody hears of it.
        Kind::TimewaitExit => {
            if !id.st.lock().disconnected {
                return None;
            }
            new_event(id, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0, &[])
        }
        Kind::Unreachable => {
            id.st.lock().phase = Phase::Disconnected;
            modify_err(id.id.qp);
            new_event(id, RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT, &[])
        }
        Kind::McJoin(n) => mc_join_event(id, n)?,
    };
    id.st.lock().reported += 1;
    Some(std::ptr::addr_of_mut!(Box::leak(ev).ev))
}

/// A CONNECT_REQUEST: a new id for the connection (`ucma_process_conn_req`).
fn conn_request(listener: &CmId, dev: c_int, conn: u32, req: Request) -> Option<*mut rdma_cm_event> {
    let ud = req.ud();
    let Some(d) = dev_by_index(dev) else {
        reject_orphan(dev, conn, ud, "its device is gone");
        return None;
    };
    let (lsync, local_port) = {
        let st = listener.st.lock();
        (st.sync, st.local.map_or(0, |a| a.port()))
    };
    let channel = if lsync {
        match Channel::new() {
            Ok(c) => c.cast(),
            Err(_) => {
                reject_orphan(dev, conn, ud, "no event channel could be made for the synchronous listener's new id");
                return None;
            }
        }
    } else {
        listener.id.channel
    };
    let child = new_id(channel, listener.id.context, listener.id.ps, listener.id.qp_type);
    // SAFETY: just made.
    let cid = unsafe { &*child };
    let (src, data) = match &req {
        Request::Rc(r) => (r.src, &r.private_data),
        Request::Ud { src, private_data } => (*src, private_data),
    };
    let hdr = CmaHeader::parse(data);
    let user = if hdr.is_some() { &data[CMA_HDR_LEN..] } else { &data[..] };
    let mut ev = new_event(cid, RDMA_CM_EVENT_CONNECT_REQUEST, 0, user);
    ev.ev.listen_id = listener.ptr() as *mut rdma_cm_id;
    ev.counted = listener.ptr();
    {
        let mut st = cid.st.lock();
        st.sync = lsync;
        if attach_dev(cid, &mut st, d).is_err() {
            drop(st);
            reject_orphan(dev, conn, ud, "the new id could not be given the device's PD");
            return None;
        }
        if let Some(pd) = (!listener.id.pd.is_null()).then_some(listener.id.pd) {
            // SAFETY: our new id.
            unsafe { (*child).id.pd = pd };
        }
        set_local(cid, &mut st, SocketAddr::new(d.ip(), local_port));
        set_peer(cid, &mut st, SocketAddr::new(src, hdr.map_or(0, |h| h.src_port)));
        let path = path_record(cid, &st, d);
        let rec = st.path.insert(Box::new(path));
        // SAFETY: our new id; the record lives as long as it.
        unsafe {
            (*child).id.route.path_rec = std::ptr::from_mut::<ibv_sa_path_rec>(rec);
            (*child).id.route.num_paths = 1;
        }
        st.conn = Some(conn);
        st.phase = Phase::Requested;
        match req {
            Request::Rc(req) => {
                // The event's depths are the peer's, seen from here (cma_format_req_event).
                st.initiator_depth = req.responder_resources;
                st.responder_resources = req.initiator_depth;
                // SAFETY: writing the conn member of the event's union.
                unsafe {
                    let c = &mut ev.ev.param.conn;
                    c.responder_resources = req.initiator_depth;
                    c.initiator_depth = req.responder_resources;
                    c.flow_control = 1;
                    c.retry_count = req.retry_count;
                    c.rnr_retry_count = req.rnr_retry_count;
                    c.srq = 0;
                    c.qp_num = req.remote_qpn;
                }
                st.req = Some(req);
            }
            Request::Ud { .. } => {
                // cma_format_ud_event: the requester's address; its QP comes with its first
                // datagram (the SIDR_REQ names none). The private data is in ud's place.
                // SAFETY: writing the ud member of the event's union (its first two fields
                // are conn's: the private data already set).
                unsafe {
                    let u = &mut ev.ev.param.ud;
                    u.ah_attr = ah_to(src, st.tos);
                    u.qkey = RDMA_UDP_QKEY;
                }
            }
        }
        st.qp_init = listener.st.lock().qp_init;
    }
    routes().lock().conns.insert((dev, conn), cid.ptr());
    // rdma_get_request's QP for ids made by rdma_create_ep.
    listener.st.lock().reported += 1;
    Some(std::ptr::addr_of_mut!(Box::leak(ev).ev))
}

/// The REP: with a QP, bring it up and send the RTU (ESTABLISHED); without one,
/// CONNECT_RESPONSE, and `rdma_establish` sends the RTU.
fn conn_reply(id: &CmId, rep: Box<RepInfo>) -> Box<Event> {
    let data = rep.private_data.clone();
    let param = rdma_conn_param {
        private_data: std::ptr::null(),
        private_data_len: 0,
        responder_resources: rep.responder_resources,
        initiator_depth: rep.initiator_depth,
        flow_control: 1,
        retry_count: 0,
        rnr_retry_count: rep.rnr_retry_count,
        srq: 0,
        qp_num: rep.remote_qpn,
    };
    let mut st = id.st.lock();
    st.rep = Some(rep);
    let qp = id.id.qp;
    let (ctype, status) = if qp.is_null() {
        (RDMA_CM_EVENT_CONNECT_RESPONSE, 0)
    } else if let Err(e) = bring_up(id, &st, qp) {
        st.connect_error = true;
        drop(st);
        modify_err(qp);
        (RDMA_CM_EVENT_CONNECT_ERROR, -e)
    } else {
        drop(st);
        match send_rtu(id) {
            Ok(()) => (RDMA_CM_EVENT_ESTABLISHED, 0),
            Err(e) => (RDMA_CM_EVENT_CONNECT_ERROR, -e),
        }
    };
    let mut ev = new_event(id, ctype, status, &data);
    // The REP's parameters, with the private data new_event placed.
    // SAFETY: reading the conn member new_event wrote.
    let (pd, len) = unsafe { (ev.ev.param.conn.private_data, ev.ev.param.conn.private_data_len) };
    ev.ev.param.conn = rdma_conn_param { private_data: pd, private_data_len: len, ..param };
    ev
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    if event.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: an event we handed out (the C struct is the first field of our Event).
    let e = unsafe { Box::from_raw(event.cast::<Event>()) };
    // SAFETY: the id stays until its events are acknowledged (destroy waits for them).
    let id = unsafe { &*(e.counted as *const CmId) };
    let mut st = id.st.lock();
    st.completed += 1;
    id.acked.notify_all();
    0
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int {
    // SAFETY: an id we made.
    let Some(l) = (unsafe { id_of(listen) }) else { return einval() };
    call(|| {
        if !l.st.lock().sync || id.is_null() {
            return Err(libc::EINVAL);
        }
        let lp = l.ptr() as *mut CmId;
        // SAFETY: our id.
        unsafe {
            if !(*lp).id.event.is_null() {
                rnic_cm_rdma_ack_cm_event((*lp).id.event);
                (*lp).id.event = null_mut();
            }
        }
        let ev = get_event(l.id.channel)?;
        // SAFETY: just taken.
        let e = unsafe { &*ev };
        let fail = |err| {
            // SAFETY: our listener keeps the event, as librdmacm does.
            unsafe { (*lp).id.event = ev };
            Err(err)
        };
        if e.event == RDMA_CM_EVENT_REJECTED {
            return fail(libc::ECONNREFUSED);
        }
        if e.status != 0 {
            return fail(e.status.abs());
        }
        if e.event != RDMA_CM_EVENT_CONNECT_REQUEST {
            return fail(libc::EINVAL);
        }
        let new = e.id;
        let qp_init = l.st.lock().qp_init;
        if let Some(mut attr) = qp_init {
            // SAFETY: the new id, the listener's PD and a copy of the attributes.
            if unsafe { rnic_cm_rdma_create_qp(new, l.id.pd, &mut attr) } != 0 {
                return fail(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
            }
        }
        // SAFETY: the new id is the program's now, with its request event.
        unsafe {
            (*new).event = ev;
            *id = new;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    call(|| {
        let was_sync = cid.st.lock().sync;
        if was_sync && channel.is_null() {
            return Err(libc::EINVAL);
        }
        let sync = channel.is_null();
        let channel = if sync { Channel::new()?.cast() } else { channel };
        let p = cid.ptr() as *mut CmId;
        let old = cid.id.channel;
        {
            // The routers push to id->channel under the routes lock: switch under it,
            // moving the events not yet taken (the kernel moves them to the new file).
            let _r = routes().lock();
            // SAFETY: both channels are live.
            let (Some(from), Some(to)) = (unsafe { chan(old) }, unsafe { chan(channel) }) else {
                return Err(libc::EINVAL);
            };
            for ev in from.take_for(cid.ptr()) {
                to.push(ev);
            }
            // SAFETY: our id.
            unsafe { (*p).id.channel = channel };
        }
        if was_sync {
            // SAFETY: our id and its own old channel.
            unsafe {
                if !(*p).id.event.is_null() {
                    rnic_cm_rdma_ack_cm_event((*p).id.event);
                    (*p).id.event = null_mut();
                }
                rnic_cm_rdma_destroy_event_channel(old);
            }
        }
        let mut st = cid.st.lock();
        st.sync = sync;
        // Events taken from the old channel must be acknowledged before it returns.
        while st.completed < st.reported {
            cid.acked.wait(&mut st);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: size_t,
) -> c_int {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    call(|| {
        if optval.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's option value of `optlen` bytes.
        let val = unsafe { std::slice::from_raw_parts(optval.cast::<u8>(), optlen) };
        let mut st = cid.st.lock();
        match (level, optname) {
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) if optlen == 1 => st.tos = val[0],
            (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) if optlen == 1 => st.ack_timeout = Some(val[0].min(31)),
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY) if optlen == 4 => {}
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS | RDMA_OPTION_ID_ACK_TIMEOUT) => return Err(libc::EINVAL),
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY) => return Err(libc::EINVAL),
            (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => {
                diag("rdma_set_option: RDMA_OPTION_IB_PATH (path records from an SA) has no meaning on RoCE");
                return Err(libc::EOPNOTSUPP);
            }
            _ => return Err(libc::ENOSYS),
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: an id we made.
    unsafe { id_of(id) }.and_then(|c| c.st.lock().local).map_or(0, |a| a.port().to_be())
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: an id we made.
    unsafe { id_of(id) }.and_then(|c| c.st.lock().peer).map_or(0, |a| a.port().to_be())
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_get_devices(num: *mut c_int) -> *mut *mut ibv_context {
    guard(null_mut(), || {
        let devs = match cma() {
            Ok(c) => &c.devs,
            Err(e) => {
                set_errno(e);
                return null_mut();
            }
        };
        // SAFETY: calloc of n+1 pointers (rdma_free_devices frees it); checked below.
        let arr =
            unsafe { libc::calloc(devs.len() + 1, std::mem::size_of::<*mut ibv_context>()) }.cast::<*mut ibv_context>();
        if arr.is_null() {
            set_errno(libc::ENOMEM);
            return null_mut();
        }
        for (i, d) in devs.iter().enumerate() {
            // SAFETY: i < n+1.
            unsafe { *arr.add(i) = d.ctx() };
        }
        if !num.is_null() {
            // SAFETY: the caller's out-parameter.
            unsafe { *num = c_int::try_from(devs.len()).unwrap_or(c_int::MAX) };
        }
        arr
    })
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: the array rdma_get_devices calloc'd.
    unsafe { libc::free(list.cast()) };
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_event_str(event: c_int) -> *const c_char {
    let s: &'static [u8] = match event {
        RDMA_CM_EVENT_ADDR_RESOLVED => b"RDMA_CM_EVENT_ADDR_RESOLVED\0",
        RDMA_CM_EVENT_ADDR_ERROR => b"RDMA_CM_EVENT_ADDR_ERROR\0",
        RDMA_CM_EVENT_ROUTE_RESOLVED => b"RDMA_CM_EVENT_ROUTE_RESOLVED\0",
        RDMA_CM_EVENT_ROUTE_ERROR => b"RDMA_CM_EVENT_ROUTE_ERROR\0",
        RDMA_CM_EVENT_CONNECT_REQUEST => b"RDMA_CM_EVENT_CONNECT_REQUEST\0",
        RDMA_CM_EVENT_CONNECT_RESPONSE => b"RDMA_CM_EVENT_CONNECT_RESPONSE\0",
        RDMA_CM_EVENT_CONNECT_ERROR => b"RDMA_CM_EVENT_CONNECT_ERROR\0",
        RDMA_CM_EVENT_UNREACHABLE => b"RDMA_CM_EVENT_UNREACHABLE\0",
        RDMA_CM_EVENT_REJECTED => b"RDMA_CM_EVENT_REJECTED\0",
        RDMA_CM_EVENT_ESTABLISHED => b"RDMA_CM_EVENT_ESTABLISHED\0",
        RDMA_CM_EVENT_DISCONNECTED => b"RDMA_CM_EVENT_DISCONNECTED\0",
        RDMA_CM_EVENT_DEVICE_REMOVAL => b"RDMA_CM_EVENT_DEVICE_REMOVAL\0",
        RDMA_CM_EVENT_MULTICAST_JOIN => b"RDMA_CM_EVENT_MULTICAST_JOIN\0",
        RDMA_CM_EVENT_MULTICAST_ERROR => b"RDMA_CM_EVENT_MULTICAST_ERROR\0",
        RDMA_CM_EVENT_ADDR_CHANGE => b"RDMA_CM_EVENT_ADDR_CHANGE\0",
        RDMA_CM_EVENT_TIMEWAIT_EXIT => b"RDMA_CM_EVENT_TIMEWAIT_EXIT\0",
        _ => b"UNKNOWN EVENT\0",
    };
    s.as_ptr().cast()
}

// ---------------------------------------------------------------------------------------
// QPs and SRQs on ids

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    if attr.is_null() {
        return einval();
    }
    // rdma_create_qp: the attributes as rdma_create_qp_ex's, with the PD given or the id's.
    let mut ex = ibv_qp_init_attr_ex::default();
    // SAFETY: the caller's attributes.
    let a = unsafe { &*attr };
    ex.qp_context = a.qp_context;
    ex.send_cq = a.send_cq;
    ex.recv_cq = a.recv_cq;
    ex.srq = a.srq;
    ex.cap = a.cap;
    ex.qp_type = a.qp_type;
    ex.sq_sig_all = a.sq_sig_all;
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    // SAFETY: an id we made (checked in the callee).
    ex.pd = if pd.is_null() { unsafe { id_of(id) }.map_or(null_mut(), |c| c.id.pd) } else { pd };
    // SAFETY: forwarded.
    let r = unsafe { rnic_cm_rdma_create_qp_ex(id, &mut ex) };
    // SAFETY: the caller's attributes get what was used (the CQs made, the capacities).
    unsafe {
        (*attr).send_cq = ex.send_cq;
        (*attr).recv_cq = ex.recv_cq;
        (*attr).cap = ex.cap;
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_create_qp_ex(id: *mut rdma_cm_id, attr: *mut ibv_qp_init_attr_ex) -> c_int {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    call(|| {
        if attr.is_null() || !cid.id.qp.is_null() || cid.id.verbs.is_null() {
            return Err(libc::EINVAL);
        }
        let p = cid.ptr() as *mut CmId;
        // SAFETY: the caller's attributes.
        let a = unsafe { &mut *attr };
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
            a.comp_mask |= IBV_QP_INIT_ATTR_PD;
            a.pd = cid.id.pd;
        // SAFETY: the program's PD (ours).
        } else if unsafe { (*a.pd).context } != cid.id.verbs {
            return Err(libc::EINVAL);
        }
        if (!cid.id.recv_cq.is_null() && !a.recv_cq.is_null() && cid.id.recv_cq != a.recv_cq)
            || (!cid.id.send_cq.is_null() && !a.send_cq.is_null() && cid.id.send_cq != a.send_cq)
        {
            return Err(libc::EINVAL);
        }
        // ucma_create_cqs: CQs (each with a channel) for what the program left out.
        let send = if a.send_cq.is_null() && cid.id.send_cq.is_null() { a.cap.max_send_wr } else { 0 };
        let recv = if a.recv_cq.is_null() && cid.id.recv_cq.is_null() { a.cap.max_recv_wr } else { 0 };
        create_cqs(p, send, recv)?;
        // SAFETY: our id's fields.
        unsafe {
            if a.send_cq.is_null() {
                a.send_cq = (*p).id.send_cq;
            }
            if a.recv_cq.is_null() {
                a.recv_cq = (*p).id.recv_cq;
            }
            if a.srq.is_null() && !(*p).id.srq.is_null() {
                a.srq = (*p).id.srq;
            }
        }
        // SAFETY: the id's context and the completed attributes.
        let qp = unsafe { crate::qp::create_qp_ex(cid.id.verbs, a) };
        if qp.is_null() {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL);
            destroy_cqs(p);
            return Err(e);
        }
        let st = cid.st.lock();
        let steps: &[u32] =
            if cid.id.qp_type == IBV_QPT_UD { &[IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS] } else { &[IBV_QPS_INIT] };
        for s in steps {
            let r = qp_attr(cid, &st, *s).and_then(|(mut at, m)| {
                // SAFETY: our new QP.
                match unsafe { crate::qp::ibv_modify_qp(qp, &mut at, m) } {
                    0 => Ok(()),
                    e => Err(e),
                }
            });
            if let Err(e) = r {
                // SAFETY: our new QP.
                unsafe { crate::qp::ibv_destroy_qp(qp) };
                destroy_cqs(p);
                return Err(e);
            }
        }
        // SAFETY: our id's fields.
        unsafe {
            (*p).id.pd = (*qp).pd;
            (*p).id.qp = qp;
        }
        Ok(())
    })
}

fn create_cqs(p: *mut CmId, send: u32, recv: u32) -> Result<(), c_int> {
    let cq_context = p.cast::<c_void>();
    let mk = |n: u32, ch: &mut *mut ibv_comp_channel, cq: &mut *mut ibv_cq, verbs| -> Result<(), c_int> {
        if n == 0 {
            return Ok(());
        }
        // SAFETY: the id's context.
        *ch = unsafe { crate::cq::ibv_create_comp_channel(verbs) };
        if ch.is_null() {
            return Err(libc::ENOMEM);
        }
        let cqe = c_int::try_from(n).unwrap_or(c_int::MAX);
        // SAFETY: as above; the CQ's context is the id, as librdmacm's.
        *cq = unsafe { crate::cq::ibv_create_cq(verbs, cqe, cq_context, *ch, 0) };
        if cq.is_null() {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
        }
        Ok(())
    };
    // SAFETY: our id's fields; the program does not touch them during the call.
    let r = unsafe {
        let verbs = (*p).id.verbs;
        let id = &mut (*p).id;
        mk(recv, &mut id.recv_cq_channel, &mut id.recv_cq, verbs)
            .and_then(|()| mk(send, &mut id.send_cq_channel, &mut id.send_cq, verbs))
    };
    if r.is_err() {
        destroy_cqs(p);
    }
    r
}

fn destroy_cqs(p: *mut CmId) {
    // SAFETY: our id's fields, holding CQs and channels we made (or NULL).
    unsafe {
        let id = &mut (*p).id;
        if !id.recv_cq.is_null() {
            crate::cq::ibv_destroy_cq(id.recv_cq);
            if !id.send_cq.is_null() && id.send_cq != id.recv_cq {
                crate::cq::ibv_destroy_cq(id.send_cq);
            }
        } else if !id.send_cq.is_null() {
            crate::cq::ibv_destroy_cq(id.send_cq);
        }
        id.recv_cq = null_mut();
        id.send_cq = null_mut();
        for ch in [id.recv_cq_channel, id.send_cq_channel] {
            if !ch.is_null() {
                crate::cq::ibv_destroy_comp_channel(ch);
            }
        }
        id.recv_cq_channel = null_mut();
        id.send_cq_channel = null_mut();
    }
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_destroy_qp(id: *mut rdma_cm_id) {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return };
    guard((), || {
        let p = cid.ptr() as *mut CmId;
        // SAFETY: our id's QP (or NULL).
        unsafe {
            if !(*p).id.qp.is_null() {
                crate::qp::ibv_destroy_qp((*p).id.qp);
                (*p).id.qp = null_mut();
            }
        }
        destroy_cqs(p);
    });
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    call(|| {
        if attr.is_null() || cid.id.verbs.is_null() {
            return Err(libc::EINVAL);
        }
        let pd = if pd.is_null() { cid.id.pd } else { pd };
        // SAFETY: the PD and the caller's attributes.
        let srq = unsafe { crate::qp::ibv_create_srq(pd, attr) };
        if srq.is_null() {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
        }
        // SAFETY: our id.
        unsafe { (*(cid.ptr() as *mut CmId)).id.srq = srq };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut ibv_srq_init_attr_ex) -> c_int {
    if attr.is_null() {
        return einval();
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { &*attr };
    if a.srq_type != IBV_SRQT_BASIC {
        set_errno(libc::EOPNOTSUPP);
        return -1;
    }
    let mut basic = ibv_srq_init_attr { srq_context: a.srq_context, attr: a.attr };
    // IBV_SRQ_INIT_ATTR_PD (enum ibv_srq_init_attr_mask).
    let pd = if a.comp_mask & (1 << 1) != 0 { a.pd } else { null_mut() };
    // SAFETY: forwarded.
    let r = unsafe { rnic_cm_rdma_create_srq(id, pd, &mut basic) };
    // SAFETY: the caller's attributes get the capacities used.
    unsafe { (*attr).attr = basic.attr };
    r
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_destroy_srq(id: *mut rdma_cm_id) {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return };
    let p = cid.ptr() as *mut CmId;
    // SAFETY: our id's SRQ (or NULL).
    unsafe {
        if !(*p).id.srq.is_null() {
            crate::qp::ibv_destroy_srq((*p).id.srq);
            (*p).id.srq = null_mut();
        }
    }
    destroy_cqs(p);
}

// ---------------------------------------------------------------------------------------
// Endpoints and addresses

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    if id.is_null() || res.is_null() {
        return einval();
    }
    // SAFETY: the caller's address information.
    let res = unsafe { &*res };
    let mut cm: *mut rdma_cm_id = null_mut();
    // SAFETY: a synchronous id (NULL channel).
    if unsafe { rnic_cm_rdma_create_id(null_mut(), &mut cm, null_mut(), res.ai_port_space) } != 0 {
        return -1;
    }
    // SAFETY: just made.
    let cid = unsafe { &*cm.cast::<CmId>() };
    // SAFETY: our new id.
    unsafe { (*cm).qp_type = u32::try_from(res.ai_qp_type).unwrap_or(IBV_QPT_RC) };
    let r = (|| -> c_int {
        if res.ai_flags & RAI_PASSIVE != 0 {
            // SAFETY: the caller's source address.
            if unsafe { rnic_cm_rdma_bind_addr(cm, res.ai_src_addr) } != 0 {
                return -1;
            }
            if !pd.is_null() {
                // SAFETY: our id.
                unsafe { (*cm).pd = pd };
            }
            if !qp_init_attr.is_null() {
                // SAFETY: the caller's attributes, kept for rdma_get_request.
                let mut a = unsafe { *qp_init_attr };
                a.qp_type = u32::try_from(res.ai_qp_type).unwrap_or(IBV_QPT_RC);
                cid.st.lock().qp_init = Some(a);
            }
            return 0;
        }
        // SAFETY: the caller's addresses.
        if unsafe { rnic_cm_rdma_resolve_addr(cm, res.ai_src_addr, res.ai_dst_addr, 2000) } != 0 {
            return -1;
        }
        // SAFETY: our id.
        if unsafe { rnic_cm_rdma_resolve_route(cm, 2000) } != 0 {
            return -1;
        }
        if !qp_init_attr.is_null() {
            // SAFETY: the caller's attributes.
            unsafe { (*qp_init_attr).qp_type = u32::try_from(res.ai_qp_type).unwrap_or(IBV_QPT_RC) };
            // SAFETY: as above.
            if unsafe { rnic_cm_rdma_create_qp(cm, pd, qp_init_attr) } != 0 {
                return -1;
            }
        }
        0
    })();
    if r != 0 {
        let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL);
        // SAFETY: our id.
        unsafe { rnic_cm_rdma_destroy_ep(cm) };
        set_errno(e);
        return -1;
    }
    // SAFETY: the caller's out-parameter.
    unsafe { *id = cm };
    0
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_destroy_ep(id: *mut rdma_cm_id) {
    if id.is_null() {
        return;
    }
    // SAFETY: an id we made.
    unsafe {
        if !(*id).qp.is_null() {
            rnic_cm_rdma_destroy_qp(id);
        }
        if !(*id).srq.is_null() {
            rnic_cm_rdma_destroy_srq(id);
        }
        rnic_cm_rdma_destroy_id(id);
    }
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    // rnic's devices have no vendor ECE options: librdmacm refuses a missing or
    // zero-vendor ECE with EINVAL and otherwise records it; there is nothing to record.
    // SAFETY: an id we made.
    if unsafe { id_of(id) }.is_none() || ece.is_null() {
        return einval();
    }
    // SAFETY: the caller's ECE.
    if unsafe { (*ece).vendor_id } == 0 {
        return einval();
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    // SAFETY: an id we made.
    if unsafe { id_of(id) }.is_none() || ece.is_null() {
        return einval();
    }
    // The peer sent no ECE options (rnic's CM sends none either).
    // SAFETY: the caller's ECE.
    unsafe { *ece = ibv_ece::default() };
    0
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    call(|| {
        // SAFETY: the caller's hints (or NULL).
        let h = unsafe { hints.as_ref() };
        if res.is_null() || (node.is_null() && service.is_null() && h.is_none()) {
            return Err(libc::EINVAL);
        }
        if let (true, Some(h)) = (node.is_null() && service.is_null(), h) {
            // librdmacm: no node and no service, the record is the hints' (their
            // addresses copied): how pyverbs' AddrInfo(src=...) alone is made.
            // SAFETY: calloc'd so that rdma_freeaddrinfo (ours) frees it; checked.
            let ai = unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) }.cast::<rdma_addrinfo>();
            if ai.is_null() {
                return Err(libc::ENOMEM);
            }
            // SAFETY: the zeroed record we own; the hints' addresses are the caller's.
            unsafe {
                (*ai).ai_flags = h.ai_flags;
                (*ai).ai_family = h.ai_family;
                (*ai).ai_qp_type = h.ai_qp_type;
                (*ai).ai_port_space = h.ai_port_space;
                if h.ai_dst_len > 0 {
                    if let Some(d) = read_sockaddr(h.ai_dst_addr) {
                        (*ai).ai_dst_addr = alloc_sockaddr(d)?;
                        (*ai).ai_dst_len = h.ai_dst_len;
                    }
                }
                if h.ai_src_len > 0 {
                    if let Some(src) = read_sockaddr(h.ai_src_addr) {
                        (*ai).ai_src_addr = alloc_sockaddr(src)?;
                        (*ai).ai_src_len = h.ai_src_len;
                    }
                }
                *res = ai;
            }
            return Ok(());
        }
        let flags = h.map_or(0, |h| h.ai_flags);
        let ps = match h.map_or(0, |h| h.ai_port_space) {
            0 => match h.map_or(0, |h| h.ai_qp_type) {
                q if q == IBV_QPT_UD as c_int => RDMA_PS_UDP,
                _ => RDMA_PS_TCP,
            },
            p => p,
        };
        let qp_type = match h.map_or(0, |h| h.ai_qp_type) {
            0 if ps == RDMA_PS_UDP => IBV_QPT_UD as c_int,
            0 => IBV_QPT_RC as c_int,
            q => q,
        };
        let family = h.map_or(0, |h| h.ai_family);
        // SAFETY: C strings from the caller.
        let port: u16 = if service.is_null() {
            0
        } else {
            let s = unsafe { std::ffi::CStr::from_ptr(service) }.to_str().map_err(|_| libc::EINVAL)?;
            s.parse().map_err(|_| {
                diag(format!("rdma_getaddrinfo: service {s:?} is not a port number"));
                libc::EINVAL
            })?
        };
        let passive = flags & RAI_PASSIVE != 0;
        let ip: IpAddr = if node.is_null() {
            if family == libc::AF_INET6 {
                Ipv6Addr::UNSPECIFIED.into()
            } else {
                Ipv4Addr::UNSPECIFIED.into()
            }
        } else {
            // SAFETY: a C string from the caller.
            let n = unsafe { std::ffi::CStr::from_ptr(node) }.to_str().map_err(|_| libc::EINVAL)?;
            resolve_host(n, family, flags & RAI_NUMERICHOST != 0)?
        };
        let addr = SocketAddr::new(ip, port);
        // SAFETY: calloc'd so that rdma_freeaddrinfo (ours) frees it; checked.
        let ai = unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) }.cast::<rdma_addrinfo>();
        if ai.is_null() {
            return Err(libc::ENOMEM);
        }
        let sa = alloc_sockaddr(addr)?;
        let len = if addr.is_ipv4() {
            std::mem::size_of::<libc::sockaddr_in>()
        } else {
            std::mem::size_of::<libc::sockaddr_in6>()
        };
        // SAFETY: the zeroed record we own.
        unsafe {
            (*ai).ai_flags = flags;
            (*ai).ai_family = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
            (*ai).ai_qp_type = qp_type;
            (*ai).ai_port_space = ps;
            if passive {
                (*ai).ai_src_addr = sa;
                (*ai).ai_src_len = socklen_t::try_from(len).unwrap_or(0);
            } else {
                (*ai).ai_dst_addr = sa;
                (*ai).ai_dst_len = socklen_t::try_from(len).unwrap_or(0);
                if let Some(src) = h.and_then(|h| read_sockaddr(h.ai_src_addr)) {
                    (*ai).ai_src_addr = alloc_sockaddr(src)?;
                    (*ai).ai_src_len = h.map_or(0, |h| h.ai_src_len);
                }
            }
            *res = ai;
        }
        Ok(())
    })
}

fn alloc_sockaddr(a: SocketAddr) -> Result<*mut sockaddr, c_int> {
    // SAFETY: calloc of a sockaddr_storage; checked.
    let p = unsafe { libc::calloc(1, std::mem::size_of::<libc::sockaddr_storage>()) }.cast::<rdma_sockaddr>();
    if p.is_null() {
        return Err(libc::ENOMEM);
    }
    // SAFETY: the storage just allocated.
    write_sockaddr(unsafe { &mut *p }, a);
    Ok(p.cast())
}

/// A node name or address, through the system's resolver.
fn resolve_host(n: &str, family: c_int, numeric: bool) -> Result<IpAddr, c_int> {
    if let Ok(ip) = n.parse::<IpAddr>() {
        return Ok(ip);
    }
    if numeric {
        return Err(libc::EINVAL);
    }
    use std::net::ToSocketAddrs;
    let addrs = (n, 0).to_socket_addrs().map_err(|_| {
        diag(format!("rdma_getaddrinfo: cannot resolve {n:?}"));
        libc::ENOENT
    })?;
    addrs
        .map(|a| a.ip())
        .find(|ip| match family {
            libc::AF_INET => ip.is_ipv4(),
            libc::AF_INET6 => ip.is_ipv6(),
            _ => true,
        })
        .ok_or(libc::ENOENT)
}

#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: records and addresses rdma_getaddrinfo calloc'd.
        unsafe {
            let next = (*p).ai_next;
            libc::free((*p).ai_src_addr.cast());
            libc::free((*p).ai_dst_addr.cast());
            libc::free((*p).ai_src_canonname.cast());
            libc::free((*p).ai_dst_canonname.cast());
            libc::free((*p).ai_route);
            libc::free((*p).ai_connect);
            libc::free(p.cast());
            p = next;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Multicast

/// `rdma_join_multicast`: joins the multicast group at `addr` as a full member; the join
/// completes with RDMA_CM_EVENT_MULTICAST_JOIN, when taking which attaches the id's QP to
/// the group (librdmacm's `ucma_process_join`).
#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut sockaddr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: an id we made; the caller's address.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    // SAFETY: as above.
    let a = unsafe { read_sockaddr(addr) };
    call(|| join(cid, a.ok_or(libc::EINVAL)?, RDMA_MC_JOIN_FLAG_FULLMEMBER, context))
}

/// `rdma_join_multicast_ex`: as `rdma_join_multicast`, with join flags (a send-only full
/// member's QP is not attached). librdmacm's checks: an unknown `comp_mask` bit is
/// ENOTSUP, a missing address or join flags or an unknown flag EINVAL.
#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    // SAFETY: an id we made.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    if attr.is_null() {
        return einval();
    }
    // SAFETY: the caller's attributes.
    let at = unsafe { *attr };
    call(|| {
        if at.comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED {
            return Err(libc::ENOTSUP);
        }
        if at.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS == 0
            || at.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS == 0
            || at.join_flags >= RDMA_MC_JOIN_FLAG_RESERVED
        {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's address.
        let a = unsafe { read_sockaddr(at.addr) }.ok_or(libc::EINVAL)?;
        join(cid, a, at.join_flags, context)
    })
}

/// The kernel's `rdma_join_multicast` for RoCE (`cma_iboe_join_multicast`): no SA, the
/// address maps to the group's GID and the join is reported at once.
fn join(cid: &CmId, addr: SocketAddr, join_flags: u32, context: *mut c_void) -> Result<(), c_int> {
    let group = canonical(addr.ip());
    {
        let mut st = cid.st.lock();
        // ULP rules the kernel checks: an id with a device, bound or resolved, and UD.
        if st.dev.is_none() || !matches!(st.phase, Phase::Bound | Phase::AddrResolved) {
            diag("rdma_join_multicast: the id must be bound to a device or have its address resolved");
            return Err(libc::EINVAL);
        }
        if cid.id.qp_type != IBV_QPT_UD {
            diag("rdma_join_multicast: only a UD id (RDMA_PS_UDP, RDMA_PS_IPOIB) joins multicast groups");
            return Err(libc::EINVAL);
        }
        if group.is_unspecified() {
            // cma_iboe_join_multicast: a zero address is refused (there is no SA to
            // assign a group).
            return Err(libc::EINVAL);
        }
        let n = st.next_mc;
        st.next_mc += 1;
        let mgid = gid_of(group);
        // SAFETY: reading the raw bytes of the GID union.
        let mgid = unsafe { mgid.raw };
        st.mcast.push(McJoin { n, addr, mgid, context: context as usize, join_flags, attached: false });
        drop(st);
        cid.push(Kind::McJoin(n));
    }
    complete(cid)
}

/// The MULTICAST_JOIN event of join `n` (`cma_make_mc_event`: the address vector to the
/// group, QPN 0xFFFFFF, the id's Q_Key), the QP attached on the way (librdmacm's
/// `ucma_process_join`; a failed attach makes it MULTICAST_ERROR). None when the join
/// was left before the program took its event.
fn mc_join_event(id: &CmId, n: u64) -> Option<Box<Event>> {
    let mut st = id.st.lock();
    let tos = st.tos;
    let m = st.mcast.iter_mut().find(|m| m.n == n)?;
    let qp = id.id.qp;
    let mut status = 0;
    if !qp.is_null() && m.join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER {
        let g = ibv_gid { raw: m.mgid };
        // SAFETY: the id's QP, one of this library's.
        status = unsafe { crate::qp::ibv_attach_mcast(qp, &g, 0) };
        m.attached = status == 0;
    }
    let (mgid, context, group) = (m.mgid, m.context, canonical(m.addr.ip()));
    drop(st);
    if status != 0 {
        return Some(new_event(id, RDMA_CM_EVENT_MULTICAST_ERROR, -status, &[]));
    }
    let mut e = new_event(id, RDMA_CM_EVENT_MULTICAST_JOIN, 0, &[]);
    // SAFETY: writing the ud member of the event's union.
    unsafe {
        let u = &mut e.ev.param.ud;
        u.private_data = context as *const c_void;
        u.private_data_len = 0;
        u.ah_attr = ah_to(group, tos);
        u.ah_attr.grh.dgid.raw = mgid;
        // cma_iboe_join_multicast: hop limit 64 (IPV6_DEFAULT_HOPLIMIT) for an IPv4
        // group over RoCEv2, 1 otherwise.
        u.ah_attr.grh.hop_limit = if group.is_ipv4() { 64 } else { 1 };
        u.qp_num = 0x00FF_FFFF;
        u.qkey = RDMA_UDP_QKEY;
    }
    Some(e)
}

/// `rdma_leave_multicast`: leaves a group joined on the id (the first join of that
/// address), detaching the QP first (librdmacm: `ibv_detach_mcast` unless joined send-only).
/// An address not joined is EADDRNOTAVAIL.
#[no_mangle]
pub unsafe extern "C" fn rnic_cm_rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    // SAFETY: an id we made; the caller's address.
    let Some(cid) = (unsafe { id_of(id) }) else { return einval() };
    // SAFETY: as above.
    let a = unsafe { read_sockaddr(addr) };
    call(|| {
        let a = a.ok_or(libc::EINVAL)?;
        let mut st = cid.st.lock();
        let at = st.mcast.iter().position(|m| m.addr == a).ok_or(libc::EADDRNOTAVAIL)?;
        let m = st.mcast.remove(at);
        drop(st);
        if m.attached && !cid.id.qp.is_null() {
            let g = ibv_gid { raw: m.mgid };
            // SAFETY: the id's QP, one of this library's.
            let r = unsafe { crate::qp::ibv_detach_mcast(cid.id.qp, &g, 0) };
            if r != 0 {
                return Err(r);
            }
        }
        Ok(())
    })
}

/// What librdmacm functions rnic does not implement jump to: rsockets. Fails with `EOPNOTSUPP`, as the verbs
/// library fails an operation a device does not support; -1 is right for every one of
/// their return types (int, ssize_t, off_t).
#[no_mangle]
pub extern "C" fn rnic_cm_unsupported() -> i64 {
    set_errno(libc::EOPNOTSUPP);
    -1
}
