//! Device memory (`ibv_alloc_dm`, `ibv_memcpy_to_dm`/`ibv_memcpy_from_dm`,
//! `ibv_reg_dm_mr`) over rnic-core's `mem::dm::DeviceMemory`: memory the device owns
//! rather than the program, which the program reaches only by copies, as on hardware, and
//! which an MR registers zero-based. Its rules (size: `DeviceCaps::MAX_DM_SIZE`; whole
//! 4-byte words) are rnic-core's.

use crate::ctx::{ctx_of, CtxShared};
use crate::pd::pd_of;
use crate::{diag, guard, set_errno, Users};
use libc::{c_int, c_uint, c_void, size_t};
use rnic_core::mem::dm::DeviceMemory;
use rnic_verbs_sys::*;
use std::ptr::null_mut;
use std::sync::Arc;

/// An `ibv_dm`.
#[repr(C)]
pub struct Dm {
    pub ibv: ibv_dm,
    pub(crate) mem: Arc<DeviceMemory>,
    /// Its MRs (`ibv_free_dm` waits for them: EBUSY).
    pub(crate) users: Users,
    /// The contexts it is known in (by its handle: `ibv_import_dm`).
    ctx: Arc<CtxShared>,
    /// An import (`ibv_import_dm`): freeing it frees this handle only.
    imported: bool,
}

pub(crate) unsafe fn dm_of<'a>(dm: *mut ibv_dm) -> Option<&'a Dm> {
    // SAFETY: every ibv_dm we hand out is the first field of a live Dm.
    (!dm.is_null()).then(|| unsafe { &*dm.cast::<Dm>() })
}

/// Says why a copy or registration of the DM's bytes `offset .. offset + len` is refused.
fn refused(e: &rnic_core::mem::dm::DmError, verb: &str) -> c_int {
    diag(format!("{verb}: {e}"));
    libc::EINVAL
}

unsafe extern "C" fn memcpy_to_dm(dm: *mut ibv_dm, offset: u64, host: *const c_void, len: size_t) -> c_int {
    guard(libc::EINVAL, || {
        // SAFETY: a DM we handed out.
        let Some(d) = (unsafe { dm_of(dm) }) else { return libc::EINVAL };
        let src: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: the program's `len` bytes at `host`, readable (the verb's contract).
            unsafe { std::slice::from_raw_parts(host.cast::<u8>(), len) }
        };
        d.mem.copy_to(offset, src).map_or_else(|e| refused(&e, "ibv_memcpy_to_dm"), |()| 0)
    })
}

unsafe extern "C" fn memcpy_from_dm(host: *mut c_void, dm: *mut ibv_dm, offset: u64, len: size_t) -> c_int {
    guard(libc::EINVAL, || {
        // SAFETY: a DM we handed out.
        let Some(d) = (unsafe { dm_of(dm) }) else { return libc::EINVAL };
        let dst: &mut [u8] = if len == 0 {
            &mut []
        } else {
            // SAFETY: the program's `len` writable bytes at `host` (the verb's contract).
            unsafe { std::slice::from_raw_parts_mut(host.cast::<u8>(), len) }
        };
        d.mem.copy_from(offset, dst).map_or_else(|e| refused(&e, "ibv_memcpy_from_dm"), |()| 0)
    })
}

/// `ibv_alloc_dm` (through `verbs_context.alloc_dm`): `attr.length` bytes (at most
/// `max_dm_size`, zeroed), alignment up to a page (`log_align_req` at most 12).
pub(crate) unsafe extern "C" fn alloc_dm(context: *mut ibv_context, attr: *mut ibv_alloc_dm_attr) -> *mut ibv_dm {
    guard(null_mut(), || {
        // SAFETY: a context we handed out.
        let Some(ctx) = (unsafe { ctx_of(context) }) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        // SAFETY: the caller's attributes.
        let Some(a) = (unsafe { attr.as_ref() }) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        if a.comp_mask != 0 || a.log_align_req > 12 {
            diag(format!(
                "ibv_alloc_dm: aligned to 2^{} (comp_mask {:#x}): no comp_mask bits, alignment up to a page",
                a.log_align_req, a.comp_mask
            ));
            set_errno(libc::EINVAL);
            return null_mut();
        }
        let mem = match DeviceMemory::new(a.length) {
            Ok(m) => Arc::new(m),
            Err(e @ rnic_core::mem::dm::DmError::Mem(_)) => {
                diag(format!("ibv_alloc_dm: {e}"));
                set_errno(libc::ENOMEM);
                return null_mut();
            }
            Err(e) => {
                diag(format!("ibv_alloc_dm: {e}"));
                set_errno(libc::EINVAL);
                return null_mut();
            }
        };
        let handle = ctx.sh.next_dm.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ctx.sh.dms.lock().insert(handle, mem.clone());
        new_dm(context, mem, handle, ctx.sh.clone(), false)
    })
}

fn new_dm(
    context: *mut ibv_context,
    mem: Arc<DeviceMemory>,
    handle: u32,
    ctx: Arc<CtxShared>,
    imported: bool,
) -> *mut ibv_dm {
    let ibv = ibv_dm {
        context,
        memcpy_to_dm: Some(memcpy_to_dm),
        memcpy_from_dm: Some(memcpy_from_dm),
        comp_mask: 0,
        handle,
    };
    Box::into_raw(Box::new(Dm { ibv, mem, users: Users::default(), ctx, imported })).cast()
}

/// `ibv_import_dm`: another handle on the device memory `handle` of the contexts
/// `context` shares its objects with (`ibv_import_device`); the memory is one (it lives
/// while any handle does). ENOENT when no DM has that handle.
#[no_mangle]
pub unsafe extern "C" fn ibv_import_dm(context: *mut ibv_context, handle: u32) -> *mut ibv_dm {
    guard(null_mut(), || {
        // SAFETY: a context we handed out.
        let Some(ctx) = (unsafe { ctx_of(context) }) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        let Some(mem) = ctx.sh.dms.lock().get(&handle).cloned() else {
            diag(format!("ibv_import_dm: no device memory with handle {handle} in this context"));
            set_errno(libc::ENOENT);
            return null_mut();
        };
        new_dm(context, mem, handle, ctx.sh.clone(), true)
    })
}

/// `ibv_unimport_dm`: frees an imported handle (the memory stays its maker's).
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_dm(dm: *mut ibv_dm) {
    // SAFETY: a DM we handed out, or null.
    let Some(d) = (unsafe { dm_of(dm) }) else { return };
    if !d.imported {
        diag("ibv_unimport_dm: the DM was not imported (ibv_free_dm frees it)");
        return;
    }
    if d.users.in_use() {
        diag("ibv_unimport_dm: memory regions still register this device memory");
        return;
    }
    // SAFETY: allocated by Box in ibv_import_dm; the program does not use it again.
    drop(unsafe { Box::from_raw(dm.cast::<Dm>()) });
}

/// `ibv_free_dm` (through `verbs_context.free_dm`): EBUSY while MRs register it.
pub(crate) unsafe extern "C" fn free_dm(dm: *mut ibv_dm) -> c_int {
    // SAFETY: a DM we handed out, or null.
    let Some(d) = (unsafe { dm_of(dm) }) else { return libc::EINVAL };
    if d.users.in_use() {
        diag("ibv_free_dm: memory regions still register this device memory");
        return libc::EBUSY;
    }
    // SAFETY: allocated by Box in alloc_dm (or ibv_import_dm); nothing names it and the
    // program does not use it again.
    let d = unsafe { Box::from_raw(dm.cast::<Dm>()) };
    if !d.imported {
        d.ctx.dms.lock().remove(&d.ibv.handle);
    }
    0
}

/// `ibv_reg_dm_mr` (through `verbs_context.reg_dm_mr`): `length` bytes of the DM from
/// `dm_offset`, zero-based (IBV_ACCESS_ZERO_BASED is required, as uverbs requires it).
pub(crate) unsafe extern "C" fn reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: size_t,
    access: c_uint,
) -> *mut ibv_mr {
    guard(null_mut(), || {
        // SAFETY: a PD and a DM we handed out, or null.
        let (Some(p), Some(d)) = (unsafe { pd_of(pd) }, unsafe { dm_of(dm) }) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        let flags = match crate::mr::access_of(access, "ibv_reg_dm_mr") {
            Ok(f) => f,
            Err(e) => {
                set_errno(e);
                return null_mut();
            }
        };
        if access & IBV_ACCESS_ZERO_BASED == 0 {
            diag("ibv_reg_dm_mr: device memory is registered zero-based (IBV_ACCESS_ZERO_BASED)");
            set_errno(libc::EINVAL);
            return null_mut();
        }
        // Zero bytes is a region too (rdma-core's test_create_dm_mr registers one). The
        // region's block is a view of the DM's memory, so that deregistering it (which
        // revokes its block) leaves the DM and its other regions alone.
        // SAFETY: the DM is not freed while this region holds a use of it (free_dm:
        // EBUSY), and the region's block is revoked when it is deregistered.
        let view = match unsafe { d.mem.view(dm_offset, length as u64) } {
            Ok(v) => v,
            Err(e) => {
                set_errno(refused(&e, "ibv_reg_dm_mr"));
                return null_mut();
            }
        };
        let r = crate::mr::register(p, pd, Arc::new(view), flags, 0, null_mut(), "ibv_reg_dm_mr");
        if !r.is_null() {
            d.users.hold();
            // SAFETY: just made by register; the DM is not freed while it has users.
            unsafe { crate::mr::set_dm_users(r, &d.users) };
        }
        r
    })
}
