//! What a context and its objects share: our device ([`Dev`]) and context ([`Ctx`]) behind
//! the pointers the program holds, the running device every context on it shares
//! ([`Port`]), a context's object tables and asynchronous event queue ([`CtxShared`]),
//! the device limits, and the GID-to-address rule. A leaf: it uses no other module of
//! the crate, so the modules that make objects ([`crate::cq`], [`crate::qp`], ...) and
//! the one that makes the context ([`crate::device`]) all build on it.

use crate::diag;
use libc::c_int;
use parking_lot::Mutex;
use rnic_core::caps::DeviceCaps;
use rnic_core::device::{Device, DeviceConfig, DeviceError};
use rnic_core::engine::AsyncEvent;
use rnic_io::EventFd;
use rnic_verbs::{DeviceInfo, Gid};
use rnic_verbs_sys::*;
use std::collections::{HashMap, HashSet, VecDeque};
use std::mem::offset_of;
use std::net::IpAddr;
use std::sync::{Arc, Weak};

/// An `ibv_device`: one entry of `RNIC_DEVICES`. Lives as long as the process.
#[repr(C)]
pub struct Dev {
    pub ibv: ibv_device,
    pub info: DeviceInfo,
    pub index: c_int,
    /// The device while any context of this process uses it.
    port: Mutex<Weak<Port>>,
}

// SAFETY: the C struct holds only inline arrays and a null ops table; nothing in it is
// written after the device list is built.
unsafe impl Sync for Dev {}
// SAFETY: as above.
unsafe impl Send for Dev {}

impl Dev {
    /// Entry `index` of the device list; it runs nothing until a context needs it.
    pub(crate) fn new(ibv: ibv_device, info: DeviceInfo, index: c_int) -> Dev {
        Dev { ibv, info, index, port: Mutex::new(Weak::new()) }
    }
}

/// Our device behind an `ibv_device` pointer the library handed out.
pub(crate) unsafe fn dev_of<'a>(d: *mut ibv_device) -> Option<&'a Dev> {
    // SAFETY: `ibv` is the first field of the repr(C) Dev the list points at.
    (!d.is_null()).then(|| unsafe { &*d.cast::<Dev>() })
}

/// Hard limits: rnic-core's `DeviceCaps`, which `rnic_verbs::Context::query_device`
/// reports too.
pub(crate) const MAX_QP_WR: u32 = DeviceCaps::MAX_QP_WR;
pub(crate) const MAX_SGE: u32 = DeviceCaps::MAX_SGE;
pub(crate) const MAX_CQE: u32 = DeviceCaps::MAX_CQE;
pub(crate) const MAX_INLINE: u32 = DeviceCaps::MAX_INLINE;

/// A device while contexts use it: rnic-core's one running [`Device`] for every context
/// of this process on it (as every context on `rxe0` shares the kernel's device), and
/// the contexts its asynchronous events are routed to.
pub struct Port {
    pub dev: Device,
    contexts: Mutex<Vec<Weak<CtxShared>>>,
}

impl Port {
    /// The device's port, started by the first context that needs it; later contexts
    /// join it. Its router thread hands each asynchronous event to the context that owns
    /// the event's object (QPNs, CQ and SRQ numbers are the device's, so one does).
    fn join(d: &'static Dev, ctx: &Arc<CtxShared>) -> Result<Arc<Port>, c_int> {
        let mut running = d.port.lock();
        if let Some(p) = running.upgrade() {
            let mut cs = p.contexts.lock();
            cs.retain(|c| c.strong_count() > 0);
            cs.push(Arc::downgrade(ctx));
            drop(cs);
            return Ok(p);
        }
        let mut config = DeviceConfig::new(d.info.name.clone(), d.info.ip);
        config.netdev = d.info.netdev.clone();
        config.vlan = d.info.vlan;
        // The program's memory is registered in place; nothing DMAs into it, so pinning
        // would only add RLIMIT_MEMLOCK failures real drivers avoid with CAP_IPC_LOCK.
        config.pin_memory = false;
        let dev = Device::open_shared(config).map_err(|e| {
            let errno = errno_of(&e);
            let hint = if errno == libc::EADDRINUSE {
                " (a program that is not rnic holds the device's address and port)"
            } else {
                ""
            };
            diag(format!("cannot start {}: {e}{hint}", d.info.name));
            errno
        })?;
        let port = Arc::new(Port { dev: dev.clone(), contexts: Mutex::new(vec![Arc::downgrade(ctx)]) });
        // Asynchronous events reach each program context through its async_fd: one
        // thread per running device moves them from the engine's channel (it ends when
        // the device stops and its channel closes).
        let rx = dev.events().clone();
        let weak = Arc::downgrade(&port);
        let spawned = std::thread::Builder::new().name(format!("{}-async", d.info.name)).spawn(move || {
            while let Ok(ev) = rx.recv() {
                let Some(port) = weak.upgrade() else { break };
                let contexts: Vec<_> = port.contexts.lock().iter().filter_map(Weak::upgrade).collect();
                for c in contexts {
                    if c.push_event(&ev) {
                        break;
                    }
                }
            }
        });
        if let Err(e) = spawned {
            diag(format!("cannot start the async event thread of {}: {e}", d.info.name));
            return Err(libc::EAGAIN);
        }
        *running = Arc::downgrade(&port);
        Ok(port)
    }
}

/// What a context shares with its objects, and with the contexts imported from it
/// (`ibv_import_device` of its `cmd_fd`: as a uverbs file shared by two contexts, they
/// see one set of objects).
pub struct CtxShared {
    pub dev: &'static Dev,
    port: Mutex<Option<Arc<Port>>>,
    pub(crate) async_fd: EventFd,
    /// The contexts open on it: the one `ibv_open_device` made and those imported from
    /// its `cmd_fd`; the objects go with the last.
    pub(crate) contexts: std::sync::atomic::AtomicUsize,
    async_q: Mutex<VecDeque<(ibv_event_type, usize)>>,
    /// The context's objects (usize pointers to ours), for the element of an
    /// asynchronous event and for what closing the context tears down: QPs, CQs and
    /// SRQs by engine number, MRs by lkey, PDs by number.
    pub qps: Mutex<HashMap<u32, usize>>,
    pub cqs: Mutex<HashMap<u32, usize>>,
    pub srqs: Mutex<HashMap<u32, usize>>,
    pub mrs: Mutex<HashMap<u32, usize>>,
    pub pds: Mutex<HashMap<u32, usize>>,
    /// Address handles (usize pointers to ours).
    pub ahs: Mutex<HashSet<usize>>,
    /// XRC domain handles (usize pointers to ours).
    pub xrcds: Mutex<HashSet<usize>>,
    /// Handles of XRC target QPs made by `ibv_open_qp` (usize pointers to ours, with
    /// the QP's number; apart from `qps`, where the QP's own handle is, by number).
    pub opened_qps: Mutex<HashMap<usize, u32>>,
    /// Device memory by handle (`ibv_import_dm` finds it there), and the next handle.
    pub dms: Mutex<HashMap<u32, Arc<rnic_core::mem::dm::DeviceMemory>>>,
    pub next_dm: std::sync::atomic::AtomicU32,
}

impl CtxShared {
    /// A new context's shared part on `dev`, its asynchronous events signalled on
    /// `async_fd`; no object yet, the device not started.
    pub(crate) fn new(dev: &'static Dev, async_fd: EventFd) -> CtxShared {
        CtxShared {
            dev,
            port: Mutex::new(None),
            async_fd,
            contexts: std::sync::atomic::AtomicUsize::new(1),
            async_q: Mutex::new(VecDeque::new()),
            qps: Mutex::default(),
            cqs: Mutex::default(),
            srqs: Mutex::default(),
            mrs: Mutex::default(),
            pds: Mutex::default(),
            ahs: Mutex::default(),
            xrcds: Mutex::default(),
            opened_qps: Mutex::default(),
            dms: Mutex::default(),
            next_dm: std::sync::atomic::AtomicU32::new(1),
        }
    }

    /// The running device, started (or joined) on first use.
    pub(crate) fn core(self: &Arc<Self>) -> Result<Device, c_int> {
        let mut g = self.port.lock();
        if let Some(p) = g.as_ref() {
            return Ok(p.dev.clone());
        }
        let p = Port::join(self.dev, self)?;
        let dev = p.dev.clone();
        *g = Some(p);
        Ok(dev)
    }

    /// Queues an event for the program if its object is this context's; false if not.
    fn push_event(&self, ev: &AsyncEvent) -> bool {
        // A QP's event goes to the context of its own handle; an XRC target's whose own
        // handle is gone (or in a closed context), to a context holding a handle
        // `ibv_open_qp` made.
        let qp = |qpn: u32| {
            let own = self.qps.lock().get(&qpn).copied();
            own.or_else(|| self.opened_qps.lock().iter().find(|(_, n)| **n == qpn).map(|(p, _)| *p))
        };
        let (ty, element) = match *ev {
            AsyncEvent::QpFatal { qpn } => (IBV_EVENT_QP_FATAL, qp(qpn)),
            AsyncEvent::QpAccessErr { qpn } => (IBV_EVENT_QP_ACCESS_ERR, qp(qpn)),
            AsyncEvent::QpReqErr { qpn } => (IBV_EVENT_QP_REQ_ERR, qp(qpn)),
            AsyncEvent::CqError { cq } => (IBV_EVENT_CQ_ERR, self.cqs.lock().get(&cq).copied()),
            AsyncEvent::SrqLimitReached { srq } => (IBV_EVENT_SRQ_LIMIT_REACHED, self.srqs.lock().get(&srq).copied()),
            // The kernel raises no PORT_ACTIVE when a context opens; neither does this library.
            _ => return false,
        };
        // Another context's object, or one the program already destroyed.
        let Some(element) = element else { return false };
        self.async_q.lock().push_back((ty, element));
        self.async_fd.notify();
        true
    }

    /// The next queued asynchronous event (its type and element), if any. The fd is
    /// cleared first, then re-armed if anything is (still or newly) queued: it is
    /// readable exactly while an event waits.
    pub(crate) fn pop_event(&self) -> Option<(ibv_event_type, usize)> {
        self.async_fd.clear();
        let mut q = self.async_q.lock();
        let next = q.pop_front();
        if !q.is_empty() {
            self.async_fd.notify();
        }
        next
    }

    /// Whether the program still holds objects made in this context.
    pub(crate) fn has_objects(&self) -> bool {
        !(self.qps.lock().is_empty()
            && self.cqs.lock().is_empty()
            && self.srqs.lock().is_empty()
            && self.mrs.lock().is_empty()
            && self.pds.lock().is_empty()
            && self.ahs.lock().is_empty()
            && self.xrcds.lock().is_empty()
            && self.opened_qps.lock().is_empty())
    }
}

/// The contexts' command descriptors: each context's `cmd_fd` is a memfd of its own (a
/// file no other context has), found again from any descriptor of it, a `dup` included,
/// by its inode: what `ibv_import_device` needs to find the context to share.
static CMD_FDS: Mutex<Vec<(u64, Weak<CtxShared>)>> = Mutex::new(Vec::new());

/// A new command descriptor for `sh`, registered for `ibv_import_device`.
pub(crate) fn new_cmd_fd(sh: &Arc<CtxShared>) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: a NUL-terminated name and flags; on success a new descriptor we own.
    let fd = unsafe { libc::memfd_create(c"rnic-context".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just created, owned by nothing else.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let ino = inode(&fd)?;
    let mut t = CMD_FDS.lock();
    t.retain(|(_, w)| w.strong_count() > 0);
    t.push((ino, Arc::downgrade(sh)));
    Ok(fd)
}

fn inode(fd: &impl std::os::fd::AsFd) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::File::from(fd.as_fd().try_clone_to_owned()?).metadata()?.ino())
}

/// The context whose command descriptor `fd` is (itself or a `dup` of it), if it is
/// still open in this process.
pub(crate) fn by_cmd_fd(fd: std::os::fd::BorrowedFd<'_>) -> Option<Arc<CtxShared>> {
    let ino = inode(&fd).ok()?;
    // A closed context's memfd inode may be reused: only a live context counts.
    CMD_FDS.lock().iter().filter(|(i, _)| *i == ino).find_map(|(_, w)| w.upgrade())
}

fn errno_of(e: &DeviceError) -> c_int {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if let Some(code) = io.raw_os_error() {
                return code;
            }
        }
        src = s.source();
    }
    libc::EINVAL
}

/// An open context: the `verbs_context` (with the `ibv_context` the program sees at its
/// end) first, then ours.
#[repr(C)]
pub struct Ctx {
    pub v: verbs_context,
    pub sh: Arc<CtxShared>,
    /// Its `cmd_fd`: the memfd of the context `ibv_open_device` made, or the descriptor
    /// an imported context was given (closed with it, as rdma-core's).
    pub(crate) cmd_fd: std::os::fd::OwnedFd,
}

/// Our context behind an `ibv_context` pointer the library handed out.
pub(crate) unsafe fn ctx_of<'a>(c: *mut ibv_context) -> Option<&'a Ctx> {
    if c.is_null() {
        return None;
    }
    // SAFETY: every context we hand out is the `context` field of the `verbs_context` at
    // the start of a live Ctx.
    Some(unsafe { &*c.cast::<u8>().sub(offset_of!(verbs_context, context)).cast::<Ctx>() })
}

/// Whether a device carries link-local GID 0 traffic (a raw Ethernet device does; the UDP
/// transport's socket is bound to the device's address).
pub(crate) fn carries_link_local(info: &DeviceInfo) -> bool {
    info.netdev.is_some()
}

/// The IP address a GID names. A link-local GID (index 0) names an address only on a
/// device that carries link-local traffic (raw Ethernet) or, on a UDP device, when it is
/// the GID 0 of another rnic UDP device, whose address it encodes; otherwise it is
/// refused with the reason.
pub(crate) fn ip_of_gid(raw: [u8; 16], what: &str, link_local_ok: bool) -> Result<IpAddr, c_int> {
    if raw == [0u8; 16] {
        diag(format!(
            "{what}: the destination GID is zero (the program exchanged no GID: RoCE needs one, e.g. -g 1 / -x 1)"
        ));
        return Err(libc::EINVAL);
    }
    if rnic_core::engine::is_link_local(Gid(raw).to_ip()) && !link_local_ok {
        if let Some(v4) = rnic_core::engine::udp_device_of_link_local(std::net::Ipv6Addr::from(raw)) {
            return Ok(IpAddr::V4(v4));
        }
        diag(format!(
            "{what}: the destination GID {} is link-local (GID index 0) and not an rnic UDP device's: rnic's UDP devices reach other hosts from index 1, the RoCEv2 GID ::ffff:a.b.c.d (use -g 1 / -x 1; a raw Ethernet device, name=ip@iface, carries GID 0)",
            Gid(raw)
        ));
        return Err(libc::EINVAL);
    }
    Ok(Gid(raw).to_ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_udp_devices_gid_0_names_its_address() {
        let info = |ip: &str| DeviceInfo {
            name: "rnic0".into(),
            ip: ip.parse().unwrap(),
            kind: Default::default(),
            netdev: None,
            vlan: None,
        };
        for ip in ["127.0.0.1", "127.0.81.34", "10.1.2.3"] {
            let g0 = info(ip).gid(0).unwrap().0;
            assert_eq!(ip_of_gid(g0, "test", false), Ok(ip.parse().unwrap()));
        }
        // Any other link-local GID is refused.
        let mut other = info("127.0.0.1").gid(0).unwrap().0;
        other[9] ^= 1;
        assert_eq!(ip_of_gid(other, "test", false), Err(libc::EINVAL));
        assert_eq!(ip_of_gid([0; 16], "test", false), Err(libc::EINVAL));
    }
}
