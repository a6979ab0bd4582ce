//! XRC domains (`ibv_open_xrcd`, `ibv_close_xrcd`): an `ibv_xrcd` over rnic-core's
//! `srq::Xrcd`, the XRC SRQs and XRC target QPs that belong together (IBA Annex A14).
//!
//! As uverbs' `ib_uverbs_open_xrcd`: a domain opened with a file descriptor is the one
//! domain of that file's inode on that device, shared by every open of it (here within
//! the process: rnic runs in the process that uses it); without one (`fd` -1, or no
//! `IBV_XRCD_INIT_ATTR_FD`) it is a domain of its own. Opening an inode that has no domain
//! needs `O_CREAT` (else `EAGAIN`); `O_EXCL` with a domain already there is `EINVAL`.
//!
//! A domain keeps its XRC target QPs by number ([`Domain::target`]), for `ibv_open_qp`:
//! each `ibv_qp` handle of a target (the one `ibv_create_qp_ex` made and those opened)
//! holds the same [`Target`], and the QP is destroyed in the engine with the last handle,
//! as the kernel's `__ib_destroy_shared_qp` does. An XRC domain is a context's object
//! like any other: closing the context frees the handles it still holds (after its QPs
//! and SRQs), so neither the domain nor the running device outlives it.

use crate::ctx::{ctx_of, CtxShared};
use crate::{diag, guard, set_errno, Users};
use libc::c_int;
use rnic_core::device::{Device, DeviceError};
use rnic_core::engine::qp::QpShared;
use rnic_core::srq::Xrcd as CoreXrcd;
use rnic_verbs_sys::*;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// An XRC domain of one device: rnic-core's domain (its XRC SRQs) and its target QPs.
#[derive(Debug)]
pub struct Domain {
    pub core: Arc<CoreXrcd>,
    /// The XRC target QPs made in the domain, by number, while a handle holds them.
    targets: Mutex<Vec<(u32, Weak<Target>)>>,
}

impl Domain {
    fn new() -> Domain {
        Domain { core: Arc::new(CoreXrcd::new(NEXT_ID.fetch_add(1, Ordering::Relaxed))), targets: Mutex::default() }
    }

    /// Records a target QP made in the domain.
    pub(crate) fn add_target(&self, t: &Arc<Target>) {
        let mut v = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|(_, w)| w.strong_count() > 0);
        v.push((t.shared.qpn.value(), Arc::downgrade(t)));
    }

    /// The live target QP numbered `qpn` of this domain (`ibv_open_qp`'s look-up, the
    /// kernel's `xa_load(&xrcd->tgt_qps, qp_num)`).
    pub(crate) fn target(&self, qpn: u32) -> Option<Arc<Target>> {
        let v = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        v.iter().filter(|(n, _)| *n == qpn).find_map(|(_, w)| w.upgrade())
    }
}

/// An XRC target QP, shared by its handles; destroyed in the engine when the last goes.
#[derive(Debug)]
pub struct Target {
    pub shared: Arc<QpShared>,
    /// The device; taken when the QP is destroyed.
    core: Mutex<Option<Device>>,
}

impl Target {
    pub(crate) fn new(shared: Arc<QpShared>, core: Device) -> Target {
        Target { shared, core: Mutex::new(Some(core)) }
    }

    /// Destroys the QP in the engine (the last handle is going), once.
    pub(crate) fn destroy(&self) -> Result<(), DeviceError> {
        let core = self.core.lock().unwrap_or_else(|e| e.into_inner()).take();
        core.map_or(Ok(()), |c| c.destroy_qp(self.shared.qpn))
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        // The last handle went without `destroy` (a closed context's, or two handles
        // destroyed at once, each seeing the other's reference).
        let _ = self.destroy();
    }
}

/// An `ibv_xrcd`.
#[repr(C)]
pub struct Xrcd {
    pub ibv: ibv_xrcd,
    pub domain: Arc<Domain>,
    pub ctx: Arc<CtxShared>,
    /// The XRC SRQs and target QPs opened through this handle.
    pub(crate) users: Users,
}

/// # Safety
/// `x` is NULL or an `ibv_xrcd` this library handed out and the program has not closed.
pub(crate) unsafe fn xrcd_of<'a>(x: *mut ibv_xrcd) -> Option<&'a Xrcd> {
    // SAFETY: every ibv_xrcd we hand out is the first field of a live Xrcd.
    (!x.is_null()).then(|| unsafe { &*x.cast::<Xrcd>() })
}

/// A file's identity on a device: the device's index, the file's device and inode (the
/// kernel keeps its inode-to-domain table per device, `ib_uverbs_device.xrcd_tree`).
type Inode = (c_int, u64, u64);

/// The domains of inodes, while they live.
static BY_INODE: Mutex<Vec<(Inode, Weak<Domain>)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU32 = AtomicU32::new(1);

fn inode_of(dev: c_int, fd: c_int) -> Result<Inode, c_int> {
    // SAFETY: an all-zero stat is valid output space for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes only into `st`; a bad fd is its EBADF.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EBADF));
    }
    Ok((dev, st.st_dev, st.st_ino))
}

fn domain(dev: c_int, attr: &ibv_xrcd_init_attr) -> Result<Arc<Domain>, c_int> {
    if attr.comp_mask & !(IBV_XRCD_INIT_ATTR_RESERVED - 1) != 0 {
        diag(format!("ibv_open_xrcd: comp_mask {:#x} has unknown bits", attr.comp_mask));
        return Err(libc::EINVAL);
    }
    let fd = if attr.comp_mask & IBV_XRCD_INIT_ATTR_FD != 0 { attr.fd } else { -1 };
    let oflags = if attr.comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS != 0 { attr.oflags } else { 0 };
    if fd == -1 {
        return Ok(Arc::new(Domain::new()));
    }
    let key = inode_of(dev, fd).inspect_err(|_| diag(format!("ibv_open_xrcd: fd {fd} is not an open file")))?;
    let mut table = BY_INODE.lock().unwrap_or_else(|e| e.into_inner());
    table.retain(|(_, w)| w.strong_count() > 0);
    match table.iter().find(|(k, _)| *k == key).and_then(|(_, w)| w.upgrade()) {
        Some(_) if oflags & libc::O_EXCL != 0 => {
            diag("ibv_open_xrcd: O_EXCL, and the file already has an XRC domain");
            Err(libc::EINVAL)
        }
        Some(d) => Ok(d),
        None if oflags & libc::O_CREAT == 0 => {
            diag("ibv_open_xrcd: the file has no XRC domain and O_CREAT is not given");
            Err(libc::EAGAIN)
        }
        None => {
            let d = Arc::new(Domain::new());
            table.push((key, Arc::downgrade(&d)));
            Ok(d)
        }
    }
}

/// `ibv_open_xrcd` (through `verbs_context.open_xrcd`).
pub(crate) unsafe extern "C" fn open_xrcd(context: *mut ibv_context, attr: *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd {
    guard(null_mut(), || {
        // SAFETY: a context we handed out.
        let (Some(ctx), false) = (unsafe { ctx_of(context) }, attr.is_null()) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        // SAFETY: the caller's attributes.
        match domain(ctx.sh.dev.index, unsafe { &*attr }) {
            Ok(domain) => {
                let x = Box::into_raw(Box::new(Xrcd {
                    ibv: ibv_xrcd { context },
                    domain,
                    ctx: ctx.sh.clone(),
                    users: Users::default(),
                }));
                ctx.sh.xrcds.lock().insert(x as usize);
                x.cast()
            }
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        }
    })
}

/// `ibv_close_xrcd` (through `verbs_context.close_xrcd`): `EBUSY` while XRC SRQs or
/// target QPs opened through it live, as the kernel refuses a domain in use.
pub(crate) unsafe extern "C" fn close_xrcd(x: *mut ibv_xrcd) -> c_int {
    guard(libc::EINVAL, || {
        // SAFETY: an XRCD we handed out.
        let Some(d) = (unsafe { xrcd_of(x) }) else { return libc::EINVAL };
        if d.users.in_use() {
            diag("ibv_close_xrcd: XRC SRQs or target QPs of the domain still exist");
            return libc::EBUSY;
        }
        // SAFETY: allocated by Box in open_xrcd; nothing names it any more.
        let d = unsafe { Box::from_raw(x.cast::<Xrcd>()) };
        d.ctx.xrcds.lock().remove(&(x as usize));
        0
    })
}

/// Frees an XRC domain handle of a context being closed (after its QPs and SRQs): the
/// domain itself lives on while another context's handle holds it, as the kernel's
/// per-inode domain outlives one file's handle.
pub(crate) fn free_with_context(ptr: usize) {
    // SAFETY: a live handle of the closing context, out of its table: nothing else frees
    // it (the program may not use a closed context's objects).
    drop(unsafe { Box::from_raw(ptr as *mut Xrcd) });
}
