//! Memory windows (`ibv_alloc_mw`, `ibv_dealloc_mw`): a window of the device's MTPT in a
//! PD (`rnic_core::mr::Mtpt::alloc_mw`). Binding is a work request, posted by `qp.rs`
//! (`ibv_bind_mw` for type 1, `IBV_WR_BIND_MW` and `ibv_wr_bind_mw` for type 2), which
//! reads the window's handle and key from the `ibv_mw` itself.

use crate::pd::pd_of;
use crate::{diag, guard, set_errno};
use libc::c_int;
use rnic_core::device::Device;
use rnic_core::mr::MwType;
use rnic_verbs_sys::*;
use std::ptr::null_mut;

/// An `ibv_mw`.
#[repr(C)]
pub struct Mw {
    pub ibv: ibv_mw,
    core: Device,
}

/// `ibv_alloc_mw` (through `context->ops.alloc_mw`): an unbound window of type 1 or 2 in
/// `pd`; its `rkey` names it (a type 2 window's key reaches nothing until it is bound).
pub(crate) unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, type_: ibv_mw_type) -> *mut ibv_mw {
    guard(null_mut(), || {
        // SAFETY: a PD we handed out.
        let Some(p) = (unsafe { pd_of(pd) }) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        let kind = match type_ {
            IBV_MW_TYPE_1 => MwType::One,
            IBV_MW_TYPE_2 => MwType::Two,
            other => {
                diag(format!("ibv_alloc_mw: type {other}: a window is of type 1 or 2"));
                set_errno(libc::EINVAL);
                return null_mut();
            }
        };
        match p.core.mtpt().alloc_mw(p.id, kind) {
            Ok(rkey) => {
                p.users.hold();
                let ibv = ibv_mw { context: p.ibv.context, pd, rkey, handle: rkey >> 8, type_ };
                Box::into_raw(Box::new(Mw { ibv, core: p.core.clone() })).cast()
            }
            Err(e) => {
                diag(format!("ibv_alloc_mw: {e}"));
                set_errno(libc::ENOMEM);
                null_mut()
            }
        }
    })
}

/// `ibv_dealloc_mw` (through `context->ops.dealloc_mw`): its keys name nothing any more;
/// the region it was bound to may be deregistered.
pub(crate) unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    if mw.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: allocated by Box in alloc_mw; the program does not use it again.
    let m = unsafe { Box::from_raw(mw.cast::<Mw>()) };
    // SAFETY: the window's PD, alive while it has users.
    if let Some(p) = unsafe { pd_of(m.ibv.pd) } {
        p.users.release();
    }
    match m.core.mtpt().dealloc_mw(m.ibv.handle) {
        Ok(()) => 0,
        Err(e) => {
            diag(format!("ibv_dealloc_mw: {e}"));
            libc::EINVAL
        }
    }
}
