//! Memory regions over the program's own memory: an MTPT entry of the device, registered
//! in place (nothing is copied or pinned).

use crate::ctx::CtxShared;
use crate::pd::pd_of;
use crate::{diag, guard, set_errno, Users};
use libc::{c_int, c_uint, c_void, size_t};
use rnic_core::device::{Device, DeviceError};
use rnic_core::mem::MemBlock;
use rnic_core::mr::{AccessFlags, Advice, MrError};
use rnic_core::wr::Sge;
use rnic_verbs_sys::*;
use std::ptr::null_mut;
use std::sync::Arc;

/// An `ibv_mr`.
#[repr(C)]
pub struct Mr {
    pub ibv: ibv_mr,
    core: Device,
    ctx: Arc<CtxShared>,
    /// An import of another context's MR (`ibv_import_mr`): freeing it frees this handle
    /// only; the registration is its maker's.
    imported: bool,
    /// The use counter of the device memory it registers (`ibv_reg_dm_mr`), given back
    /// when it is deregistered.
    dm_users: Option<usize>,
}

/// Access flags rnic understands; the rest are refused with the reason, as a device
/// without the capability refuses them.
pub(crate) fn access_of(access: c_uint, what: &str) -> Result<AccessFlags, c_int> {
    let known = IBV_ACCESS_LOCAL_WRITE
        | IBV_ACCESS_REMOTE_WRITE
        | IBV_ACCESS_REMOTE_READ
        | IBV_ACCESS_REMOTE_ATOMIC
        | IBV_ACCESS_MW_BIND
        | IBV_ACCESS_ZERO_BASED;
    // Optional flags (IBV_ACCESS_OPTIONAL_RANGE, relaxed ordering) may be ignored by
    // definition.
    let access = access & !(0x3ff << 20);
    // On-demand paging: rnic pins nothing (the device reads and writes the program's
    // pages as the program does, faulting them in), so every region is one; the flag
    // asks for nothing more. Implicit regions (the whole address space) are not offered.
    if access & !(known | IBV_ACCESS_HUGETLB | IBV_ACCESS_ON_DEMAND) != 0 {
        diag(format!(
            "{what}: unknown access flags {:#x}",
            access & !(known | IBV_ACCESS_HUGETLB | IBV_ACCESS_ON_DEMAND)
        ));
        return Err(libc::EINVAL);
    }
    // IBA 10.6.3.1 (and ib_check_mr_access): remote write or atomic needs local write.
    if access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) != 0 && access & IBV_ACCESS_LOCAL_WRITE == 0 {
        diag(format!("{what}: remote write/atomic access needs IBV_ACCESS_LOCAL_WRITE too"));
        return Err(libc::EINVAL);
    }
    // The low five bits are AccessFlags' (IBV_ACCESS_MW_BIND included).
    Ok(AccessFlags::from_bits_truncate(access & 0x1f))
}

fn reg(pd: *mut ibv_pd, addr: *mut c_void, length: size_t, iova: u64, access: c_uint) -> *mut ibv_mr {
    guard(null_mut(), || {
        // SAFETY: a PD we handed out.
        let Some(p) = (unsafe { pd_of(pd) }) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        let flags = match access_of(access, "ibv_reg_mr") {
            Ok(f) => f,
            Err(e) => {
                set_errno(e);
                return null_mut();
            }
        };
        if addr.is_null() && length == usize::MAX && access & IBV_ACCESS_ON_DEMAND != 0 {
            // An implicit on-demand region: the whole address space, at addresses as they
            // are (iova 0), every access checked by the kernel (MemBlock::implicit): a
            // peer's WRITE to an address the program has not mapped is refused, not a fault.
            let block = Arc::new(MemBlock::implicit());
            return register(p, pd, block, flags, 0, addr, "ibv_reg_mr (implicit)");
        }
        if length == 0 || addr.is_null() {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        let iova = if access & IBV_ACCESS_ZERO_BASED != 0 { 0 } else { iova };
        // SAFETY: the verbs contract: `addr .. addr + length` is the program's memory,
        // mapped read/write until ibv_dereg_mr, and the NIC may read and write it while
        // work that names the region is outstanding. The block never frees it.
        let block = Arc::new(unsafe { MemBlock::from_raw(addr.cast(), length) });
        register(p, pd, block, flags, iova, addr, "ibv_reg_mr")
    })
}

/// Registers `block` (all of it, at `iova`, with `flags`) in `p` (which is `pd`) and
/// makes its `ibv_mr` (`addr` is what the program sees there); NULL with errno set.
pub(crate) fn register(
    p: &crate::pd::Pd,
    pd: *mut ibv_pd,
    block: Arc<MemBlock>,
    flags: AccessFlags,
    iova: u64,
    addr: *mut c_void,
    verb: &str,
) -> *mut ibv_mr {
    let length = block.len();
    match p.core.reg_mr(p.id, block, 0, length, iova, flags) {
        Ok(keys) => {
            let ibv = ibv_mr {
                context: p.ibv.context,
                pd,
                addr,
                length,
                handle: keys.lkey,
                lkey: keys.lkey,
                rkey: keys.rkey,
            };
            p.users.hold();
            let m = Box::into_raw(Box::new(Mr {
                ibv,
                core: p.core.clone(),
                ctx: p.ctx.clone(),
                imported: false,
                dm_users: None,
            }));
            p.ctx.mrs.lock().insert(keys.lkey, m as usize);
            m.cast()
        }
        Err(e) => {
            diag(format!("{verb} of {length} bytes at {addr:p}: {e}"));
            set_errno(libc::ENOMEM);
            null_mut()
        }
    }
}

/// The region `mr` registers device memory whose uses `users` counts: its
/// deregistration gives the use back.
///
/// # Safety
/// `mr` was just made by [`register`]; `users` outlives it (the device memory is not
/// freed while it has users).
pub(crate) unsafe fn set_dm_users(mr: *mut ibv_mr, users: &Users) {
    // SAFETY: an MR we made (the caller's promise).
    unsafe { (*mr.cast::<Mr>()).dm_users = Some(std::ptr::from_ref(users) as usize) };
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: size_t, access: c_int) -> *mut ibv_mr {
    reg(pd, addr, length, addr as u64, access as c_uint)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    reg(pd, addr, length, iova, access as c_uint)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    reg(pd, addr, length, iova, access)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    if mr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: an MR we handed out.
    let r = unsafe { &*mr.cast::<Mr>() };
    let mut rc = 0;
    if !r.imported {
        // Work requests posted on it end in error from here on; when this returns the
        // device no longer reaches the memory, which the program may then free.
        match r.core.dereg_mr(r.ibv.lkey) {
            Ok(()) => {}
            Err(e @ DeviceError::Mr(MrError::WindowsBound { .. })) => {
                // IBA 10.6.7.1: not while windows are bound to it; the region and its
                // handle stay.
                diag(format!("ibv_dereg_mr(lkey {:#x}): {e}", r.ibv.lkey));
                return libc::EBUSY;
            }
            Err(e) => {
                diag(format!("ibv_dereg_mr(lkey {:#x}): {e}", r.ibv.lkey));
                rc = libc::EINVAL;
            }
        }
    }
    // SAFETY: allocated by Box in ibv_reg_mr (or ibv_import_mr); the program does not use
    // it again.
    let m = unsafe { Box::from_raw(mr.cast::<Mr>()) };
    if m.imported {
        // A handle on another context's registration: that one is its maker's to end.
        return 0;
    }
    // SAFETY: the MR's PD, alive while it has users.
    if let Some(p) = unsafe { pd_of(m.ibv.pd) } {
        p.users.release();
    }
    m.ctx.mrs.lock().remove(&m.ibv.lkey);
    if let Some(users) = m.dm_users {
        // SAFETY: the device memory's counter (set_dm_users), alive while it has users.
        unsafe { &*(users as *const Users) }.release();
    }
    rc
}

/// Another handle on the MR `handle` (its lkey) of the contexts `pd`'s context shares its
/// objects with (`ibv_import_device`), as the kernel's `ibv_import_mr`: the same keys,
/// address and length, on `pd` (which must be the MR's protection domain or an import
/// of it: EINVAL otherwise). ENOENT when no MR has that handle.
#[no_mangle]
pub unsafe extern "C" fn ibv_import_mr(pd: *mut ibv_pd, handle: u32) -> *mut ibv_mr {
    guard(null_mut(), || {
        // SAFETY: a PD we handed out.
        let Some(p) = (unsafe { pd_of(pd) }) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        let Some(&orig) = p.ctx.mrs.lock().get(&handle) else {
            diag(format!("ibv_import_mr: no MR with handle {handle:#x} in this context"));
            set_errno(libc::ENOENT);
            return null_mut();
        };
        // SAFETY: a live MR of the table (removed from it before it is freed).
        let o = unsafe { &*(orig as *const Mr) };
        // SAFETY: the original's PD, alive while the MR names it.
        if unsafe { pd_of(o.ibv.pd) }.is_none_or(|op| op.id != p.id) {
            diag(format!("ibv_import_mr: MR {handle:#x} is not in this protection domain"));
            set_errno(libc::EINVAL);
            return null_mut();
        }
        let ibv = ibv_mr { context: p.ibv.context, pd, ..o.ibv };
        let m = Mr { ibv, core: o.core.clone(), ctx: p.ctx.clone(), imported: true, dm_users: None };
        Box::into_raw(Box::new(m)).cast()
    })
}

/// Frees an imported MR's handle (`ibv_import_mr`); the registration stays its maker's.
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_mr(mr: *mut ibv_mr) {
    if mr.is_null() {
        return;
    }
    // SAFETY: an MR we handed out.
    if !unsafe { &*mr.cast::<Mr>() }.imported {
        diag("ibv_unimport_mr: the MR was not imported (ibv_dereg_mr frees it)");
        return;
    }
    // SAFETY: allocated by Box in ibv_import_mr; the program does not use it again.
    drop(unsafe { Box::from_raw(mr.cast::<Mr>()) });
}

/// `enum ibv_rereg_mr_err_code`: the input was refused.
const IBV_REREG_MR_ERR_INPUT: c_int = -1;
/// The driver's command failed.
const IBV_REREG_MR_ERR_CMD: c_int = -4;
const IBV_REREG_MR_CHANGE_TRANSLATION: c_int = 1;
const IBV_REREG_MR_CHANGE_PD: c_int = 2;
const IBV_REREG_MR_CHANGE_ACCESS: c_int = 4;

/// Re-registration (`ibv_rereg_mr`), in place: the keys stay; the access rights, the PD
/// and the memory change as `flags` say. The input is checked as rdma-core's
/// `ibv_rereg_mr` checks it (EINVAL, IBV_REREG_MR_ERR_INPUT). A peer's later RDMA WRITE,
/// READ or atomic is checked against the new rights, PD and translation; work requests
/// posted before a new PD or translation no longer reach the region (they complete in
/// error, a peer's SEND into such a receive is NAKed with a remote operational error), as
/// on rxe, whose responder looks the lkey up again when it places the data and finds it
/// in another PD or over other pages. As rdma-core does after the driver's command, the
/// `ibv_mr`'s `pd`, `addr` and `length` are updated.
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    access: c_int,
) -> c_int {
    guard(IBV_REREG_MR_ERR_INPUT, || {
        let all = IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
        let translation = flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0;
        // rdma-core's checks, before the driver sees the call.
        let given = !addr.is_null() || length != 0;
        let whole = !addr.is_null() && length != 0;
        if mr.is_null() || flags == 0 || flags & !all != 0 || (translation && !whole) || (!translation && given) {
            set_errno(libc::EINVAL);
            return IBV_REREG_MR_ERR_INPUT;
        }
        // SAFETY: an MR we handed out; the program does not use it from another thread
        // during the call (verbs leaves that undefined).
        let m = unsafe { &mut *mr.cast::<Mr>() };
        if m.imported {
            diag("ibv_rereg_mr: an imported MR is re-registered through its maker's handle");
            set_errno(libc::EINVAL);
            return IBV_REREG_MR_ERR_INPUT;
        }
        let rights = if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
            match access_of(access as c_uint, "ibv_rereg_mr") {
                Ok(f) => Some(f),
                Err(e) => {
                    set_errno(e);
                    return IBV_REREG_MR_ERR_INPUT;
                }
            }
        } else {
            None
        };
        let new_pd = if flags & IBV_REREG_MR_CHANGE_PD != 0 {
            // SAFETY: a PD we handed out, or null.
            match unsafe { pd_of(pd) } {
                Some(p) if Arc::ptr_eq(&p.ctx, &m.ctx) => Some(p),
                _ => {
                    diag("ibv_rereg_mr: IBV_REREG_MR_CHANGE_PD needs a PD of the MR's context");
                    set_errno(libc::EINVAL);
                    return IBV_REREG_MR_ERR_INPUT;
                }
            }
        } else {
            None
        };
        // A new translation, or the same memory under a new PD: a new block either way,
        // so that work requests posted before (which hold the old one) fail as they do
        // on a NIC that checks them against the region when it runs them.
        let (at, len) = if translation { (addr, length) } else { (m.ibv.addr, m.ibv.length) };
        let memory = (translation || new_pd.is_some()).then(|| {
            // SAFETY: the verbs contract, as for ibv_reg_mr: the program's memory, mapped
            // read/write until the MR is deregistered or re-registered elsewhere.
            (Arc::new(unsafe { MemBlock::from_raw(at.cast(), len) }), 0, len)
        });
        let lkey = m.ibv.lkey;
        // The rights first: the check most likely to refuse, before anything changed.
        if let Some(rights) = rights {
            if let Err(e) = m.core.mtpt().rereg_access(lkey, rights) {
                diag(format!("ibv_rereg_mr(lkey {lkey:#x}): {e}"));
                set_errno(libc::EINVAL);
                return IBV_REREG_MR_ERR_CMD;
            }
        }
        if let Some(memory) = memory {
            let iova = translation.then_some(addr as u64);
            if let Err(e) = m.core.rereg_mr(lkey, new_pd.map(|p| p.id), Some(memory), iova) {
                diag(format!("ibv_rereg_mr(lkey {lkey:#x}): {e}"));
                set_errno(libc::EINVAL);
                return IBV_REREG_MR_ERR_CMD;
            }
        }
        if let Some(p) = new_pd {
            // The region counts against the PD it is in now (ibv_dealloc_pd's EBUSY).
            p.users.hold();
            // SAFETY: the MR's PD until now, alive while it has users.
            if let Some(old) = unsafe { pd_of(m.ibv.pd) } {
                old.users.release();
            }
            m.ibv.pd = pd;
        }
        if translation {
            m.ibv.addr = addr;
            m.ibv.length = length;
        }
        0
    })
}

/// `ibv_advise_mr` (through `verbs_context.advise_mr`): rnic-core's `Device::advise_mr`, each
/// SGE checked as a work request's would be (EINVAL otherwise), PREFETCH and
/// PREFETCH_WRITE faulting the pages in, PREFETCH_NO_FAULT only checking. The work is done
/// when the call returns, with or without IBV_ADVISE_MR_FLAG_FLUSH.
pub(crate) unsafe extern "C" fn advise_mr(
    pd: *mut ibv_pd,
    advice: ibv_advise_mr_advice,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    guard(libc::EINVAL, || {
        // SAFETY: a PD we handed out.
        let Some(p) = (unsafe { pd_of(pd) }) else { return libc::EINVAL };
        let advice = match advice {
            IBV_ADVISE_MR_ADVICE_PREFETCH => Advice::Prefetch,
            IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE => Advice::PrefetchWrite,
            IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT => Advice::PrefetchNoFault,
            other => {
                diag(format!("ibv_advise_mr: unknown advice {other}"));
                return libc::EINVAL;
            }
        };
        if flags & !IBV_ADVISE_MR_FLAG_FLUSH != 0 || sg_list.is_null() || num_sge == 0 {
            diag("ibv_advise_mr: flags other than IBV_ADVISE_MR_FLAG_FLUSH, or no SGE");
            return libc::EINVAL;
        }
        // SAFETY: the caller's `num_sge` SGEs.
        let sges = unsafe { std::slice::from_raw_parts(sg_list, num_sge as usize) };
        let sges: Vec<Sge> = sges.iter().map(|s| Sge { addr: s.addr, length: s.length, lkey: s.lkey }).collect();
        match p.core.advise_mr(p.id, advice, &sges) {
            Ok(()) => 0,
            Err((i, e)) => {
                diag(format!("ibv_advise_mr: SGE {i}: {e}"));
                libc::EINVAL
            }
        }
    })
}

/// Frees an MR of a context being closed: deregistered at once, so no peer reaches
/// memory the program may now free (the kernel's teardown of a closed context).
pub(crate) fn free_with_context(ptr: usize) {
    // SAFETY: a live MR of the closing context, out of its table: nothing else frees it.
    let m = unsafe { Box::from_raw(ptr as *mut Mr) };
    if m.core.dereg_mr(m.ibv.lkey).is_err() {
        // Windows of the context are still bound to it: no peer reaches it through them
        // once it is invalid (a window reaches a valid region only).
        let _ = m.core.mtpt().invalidate(m.ibv.lkey);
    }
}
