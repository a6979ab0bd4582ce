//! XRC domains (`ibv_open_xrcd`, `ibv_close_xrcd`): an `ibv_xrcd` over rnic-core's
//! `srq::Xrcd`, the XRC SRQs and XRC target QPs that belong together (IBA Annex A14).
//!
//! As uverbs' `ib_uverbs_open_xrcd`: a domain opened with a file descriptor is the one
//! domain of that file's inode, shared by every open of it (here within the process: rnic
//! runs in the process that uses it); without one (`fd` -1, or no `IBV_XRCD_INIT_ATTR_FD`)
//! it is a domain of its own. Opening an inode that has no domain needs `O_CREAT` (else
//! `EAGAIN`); `O_EXCL` with a domain already there is `EINVAL`.

use crate::ctx::{ctx_of, CtxShared};
use crate::{diag, guard, set_errno, Users};
use libc::c_int;
use rnic_core::srq::Xrcd as CoreXrcd;
use rnic_verbs_sys::*;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// An `ibv_xrcd`.
#[repr(C)]
pub struct Xrcd {
    pub ibv: ibv_xrcd,
    pub xrcd: Arc<CoreXrcd>,
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

/// A file's identity: its device and inode.
type Inode = (u64, u64);

/// The domains of inodes, while they live.
static BY_INODE: Mutex<Vec<(Inode, Weak<CoreXrcd>)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU32 = AtomicU32::new(1);

fn inode_of(fd: c_int) -> Result<Inode, c_int> {
    // SAFETY: an all-zero stat is valid output space for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes only into `st`; a bad fd is its EBADF.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EBADF));
    }
    Ok((st.st_dev, st.st_ino))
}

fn domain(attr: &ibv_xrcd_init_attr) -> Result<Arc<CoreXrcd>, c_int> {
    if attr.comp_mask & !(IBV_XRCD_INIT_ATTR_RESERVED - 1) != 0 {
        diag(format!("ibv_open_xrcd: comp_mask {:#x} has unknown bits", attr.comp_mask));
        return Err(libc::EINVAL);
    }
    let fd = if attr.comp_mask & IBV_XRCD_INIT_ATTR_FD != 0 { attr.fd } else { -1 };
    let oflags = if attr.comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS != 0 { attr.oflags } else { 0 };
    let fresh = || Arc::new(CoreXrcd::new(NEXT_ID.fetch_add(1, Ordering::Relaxed)));
    if fd == -1 {
        return Ok(fresh());
    }
    let key = inode_of(fd).inspect_err(|_| diag(format!("ibv_open_xrcd: fd {fd} is not an open file")))?;
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
            let d = fresh();
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
        match domain(unsafe { &*attr }) {
            Ok(xrcd) => Box::into_raw(Box::new(Xrcd {
                ibv: ibv_xrcd { context },
                xrcd,
                ctx: ctx.sh.clone(),
                users: Users::default(),
            }))
            .cast(),
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
        drop(unsafe { Box::from_raw(x.cast::<Xrcd>()) });
        0
    })
}
