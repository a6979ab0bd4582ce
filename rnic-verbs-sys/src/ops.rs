//! The verbs that `<infiniband/verbs.h>` defines as `static inline`: no library symbol
//! exists for them, they call the provider through the context's tables exactly as the
//! header does. `ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`, `ibv_poll_cq` and
//! `ibv_req_notify_cq` go through `context->ops`; `ibv_query_port` (full attributes),
//! `ibv_query_device_ex`, `ibv_create_cq_ex`, `ibv_create_qp_ex`, `ibv_advise_mr` and
//! XRC's `ibv_open_xrcd`, `ibv_close_xrcd`, `ibv_create_srq_ex`, `ibv_get_srq_num`, device
//! memory's `ibv_alloc_dm`, `ibv_free_dm`, `ibv_reg_dm_mr` through the `verbs_context`
//! around the context, with the header's size check (`ibv_memcpy_to_dm` and
//! `ibv_memcpy_from_dm` are the `ibv_dm`'s own pointers).
//!
//! A missing provider function returns `EOPNOTSUPP` (the header would jump through a null
//! pointer); the other return values are the provider's (0 or an errno value, or for
//! `poll_cq` a count or a negative value).

use crate::types::*;
use libc::c_int;
use std::mem::offset_of;

/// `ibv_post_send`: `qp->context->ops.post_send(qp, wr, bad_wr)`.
///
/// # Safety
/// `qp` is a live QP; `wr` a valid list whose SGE arrays outlive the call; `bad_wr` writable.
pub unsafe fn post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr) -> c_int {
    // SAFETY: a live QP points at its live context (caller's contract).
    match unsafe { (*(*qp).context).ops.post_send } {
        // SAFETY: the provider's function with the caller's valid arguments.
        Some(f) => unsafe { f(qp, wr, bad_wr) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_post_recv`: `qp->context->ops.post_recv(qp, wr, bad_wr)`.
///
/// # Safety
/// As [`post_send`].
pub unsafe fn post_recv(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int {
    // SAFETY: a live QP points at its live context (caller's contract).
    match unsafe { (*(*qp).context).ops.post_recv } {
        // SAFETY: the provider's function with the caller's valid arguments.
        Some(f) => unsafe { f(qp, wr, bad_wr) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_post_srq_recv`: `srq->context->ops.post_srq_recv(srq, wr, bad_wr)`.
///
/// # Safety
/// `srq` is a live SRQ; otherwise as [`post_recv`].
pub unsafe fn post_srq_recv(srq: *mut ibv_srq, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int {
    // SAFETY: a live SRQ points at its live context (caller's contract).
    match unsafe { (*(*srq).context).ops.post_srq_recv } {
        // SAFETY: the provider's function with the caller's valid arguments.
        Some(f) => unsafe { f(srq, wr, bad_wr) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_poll_cq`: `cq->context->ops.poll_cq(cq, num_entries, wc)`: the number of
/// completions written to `wc`, or negative on error.
///
/// # Safety
/// `cq` is a live CQ and `wc` has room for `num_entries` entries.
pub unsafe fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: a live CQ points at its live context (caller's contract).
    match unsafe { (*(*cq).context).ops.poll_cq } {
        // SAFETY: the provider's function with the caller's valid arguments.
        Some(f) => unsafe { f(cq, num_entries, wc) },
        None => -libc::EOPNOTSUPP,
    }
}

/// `ibv_req_notify_cq`: `cq->context->ops.req_notify_cq(cq, solicited_only)`.
///
/// # Safety
/// `cq` is a live CQ.
pub unsafe fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: a live CQ points at its live context (caller's contract).
    match unsafe { (*(*cq).context).ops.req_notify_cq } {
        // SAFETY: the provider's function with a live CQ.
        Some(f) => unsafe { f(cq, solicited_only) },
        None => libc::EOPNOTSUPP,
    }
}

/// `verbs_get_ctx_op(ctx, op)`: the extended context when the provider's `verbs_context`
/// is large enough to hold the field at `field_offset` (the caller then checks the
/// pointer), else null.
///
/// # Safety
/// `ctx` is a live context from `ibv_open_device`.
pub unsafe fn verbs_get_ctx_op(ctx: *mut ibv_context, field_offset: usize) -> *mut verbs_context {
    // SAFETY: caller's contract.
    let v = unsafe { verbs_context::from_context(ctx) };
    // SAFETY: non-null `v` is the live extended context around `ctx`; `sz` is in it.
    if v.is_null() || !unsafe { (*v).has_op(field_offset) } {
        return std::ptr::null_mut();
    }
    v
}

/// `ibv_query_port` as the header's inline does it: the provider's
/// `verbs_context::query_port` with the full `ibv_port_attr`, else the exported compat
/// function (which fills the part of the struct older libraries knew).
///
/// # Safety
/// `ctx` is a live context and `attr` writable.
pub unsafe fn query_port(verbs: &crate::Verbs, ctx: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int {
    // SAFETY: caller's contract.
    let v = unsafe { verbs_get_ctx_op(ctx, offset_of!(verbs_context, query_port)) };
    // SAFETY: non-null `v` is live and large enough to hold `query_port`.
    if let Some(f) = (!v.is_null()).then(|| unsafe { (*v).query_port }).flatten() {
        // SAFETY: the provider's function with a live context and a full-size struct.
        return unsafe { f(ctx, port, attr, std::mem::size_of::<ibv_port_attr>()) };
    }
    // SAFETY: `attr` is writable: zero it, then let the compat function fill its part.
    unsafe { attr.write(ibv_port_attr::default()) };
    // SAFETY: the exported function with a live context; the compat struct is a prefix of
    // `ibv_port_attr`.
    unsafe { (verbs.ibv_query_port)(ctx, port, attr.cast()) }
}

/// `ibv_query_device_ex` (the header's inline; `EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `ctx` is a live context and `attr` writable.
pub unsafe fn query_device_ex(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
) -> c_int {
    // SAFETY: caller's contract.
    let v = unsafe { verbs_get_ctx_op(ctx, offset_of!(verbs_context, query_device_ex)) };
    // SAFETY: non-null `v` is live and large enough.
    match (!v.is_null()).then(|| unsafe { (*v).query_device_ex }).flatten() {
        // SAFETY: the provider's function with valid pointers.
        Some(f) => unsafe { f(ctx, input, attr, std::mem::size_of::<ibv_device_attr_ex>()) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_create_qp_ex` (the header's inline): null with `errno` = `EOPNOTSUPP` when the
/// provider lacks it.
///
/// # Safety
/// `ctx` is a live context and `attr` valid (its PD, CQs and SRQ live).
pub unsafe fn create_qp_ex(ctx: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    // SAFETY: caller's contract.
    let v = unsafe { verbs_get_ctx_op(ctx, offset_of!(verbs_context, create_qp_ex)) };
    // SAFETY: non-null `v` is live and large enough.
    match (!v.is_null()).then(|| unsafe { (*v).create_qp_ex }).flatten() {
        // SAFETY: the provider's function with valid pointers.
        Some(f) => unsafe { f(ctx, attr) },
        None => {
            // SAFETY: errno is thread-local.
            unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
            std::ptr::null_mut()
        }
    }
}

/// `ibv_create_cq_ex` (the header's inline): null with `errno` = `EOPNOTSUPP` when the
/// provider lacks it.
///
/// # Safety
/// `ctx` is a live context and `attr` valid.
pub unsafe fn create_cq_ex(ctx: *mut ibv_context, attr: *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex {
    // SAFETY: caller's contract.
    let v = unsafe { verbs_get_ctx_op(ctx, offset_of!(verbs_context, create_cq_ex)) };
    // SAFETY: non-null `v` is live and large enough.
    match (!v.is_null()).then(|| unsafe { (*v).create_cq_ex }).flatten() {
        // SAFETY: the provider's function with valid pointers.
        Some(f) => unsafe { f(ctx, attr) },
        None => {
            // SAFETY: errno is thread-local.
            unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
            std::ptr::null_mut()
        }
    }
}

/// `ibv_advise_mr` (the header's inline; `EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `pd` is a live PD; `sg_list` holds `num_sge` SGEs.
pub unsafe fn advise_mr(
    pd: *mut ibv_pd,
    advice: ibv_advise_mr_advice,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    // SAFETY: a live PD points at its live context (caller's contract).
    let v = unsafe { verbs_get_ctx_op((*pd).context, offset_of!(verbs_context, advise_mr)) };
    // SAFETY: non-null `v` is live and large enough.
    match (!v.is_null()).then(|| unsafe { (*v).advise_mr }).flatten() {
        // SAFETY: the provider's function with valid pointers.
        Some(f) => unsafe { f(pd, advice, flags, sg_list, num_sge) },
        None => libc::EOPNOTSUPP,
    }
}

/// The provider's `verbs_context` function at `field_offset` of `ctx`'s extended context,
/// read by `get`, when the provider's struct is large enough to hold it.
///
/// # Safety
/// `ctx` is a live context.
unsafe fn ctx_op<F>(
    ctx: *mut ibv_context,
    field_offset: usize,
    get: impl FnOnce(&verbs_context) -> Option<F>,
) -> Option<F> {
    // SAFETY: caller's contract.
    let v = unsafe { verbs_get_ctx_op(ctx, field_offset) };
    // SAFETY: non-null `v` is live and large enough to hold the field.
    (!v.is_null()).then(|| get(unsafe { &*v })).flatten()
}

/// Sets `errno` (thread-local) and returns null: a missing provider function.
fn eopnotsupp<T>() -> *mut T {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
    std::ptr::null_mut()
}

/// `ibv_open_xrcd` (the header's inline): null with `errno` = `EOPNOTSUPP` when the
/// provider lacks it.
///
/// # Safety
/// `ctx` is a live context and `attr` valid.
pub unsafe fn open_xrcd(ctx: *mut ibv_context, attr: *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd {
    // SAFETY: caller's contract.
    match unsafe { ctx_op(ctx, offset_of!(verbs_context, open_xrcd), |v| v.open_xrcd) } {
        // SAFETY: the provider's function with valid pointers.
        Some(f) => unsafe { f(ctx, attr) },
        None => eopnotsupp(),
    }
}

/// `ibv_close_xrcd` (the header's inline; `EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `xrcd` is a live XRC domain that nothing uses any more.
pub unsafe fn close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    // SAFETY: a live domain points at its live context (caller's contract).
    match unsafe { ctx_op((*xrcd).context, offset_of!(verbs_context, close_xrcd), |v| v.close_xrcd) } {
        // SAFETY: the provider's function with a live domain.
        Some(f) => unsafe { f(xrcd) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_create_srq_ex` (the header's inline): null with `errno` = `EOPNOTSUPP` when the
/// provider lacks it.
///
/// # Safety
/// `ctx` is a live context and `attr` valid (its PD, domain and CQ live).
pub unsafe fn create_srq_ex(ctx: *mut ibv_context, attr: *mut ibv_srq_init_attr_ex) -> *mut ibv_srq {
    // SAFETY: caller's contract.
    match unsafe { ctx_op(ctx, offset_of!(verbs_context, create_srq_ex), |v| v.create_srq_ex) } {
        // SAFETY: the provider's function with valid pointers.
        Some(f) => unsafe { f(ctx, attr) },
        None => eopnotsupp(),
    }
}

/// `ibv_get_srq_num` (the header's inline; `EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `srq` is a live SRQ and `num` writable.
pub unsafe fn get_srq_num(srq: *mut ibv_srq, num: *mut u32) -> c_int {
    // SAFETY: a live SRQ points at its live context (caller's contract).
    match unsafe { ctx_op((*srq).context, offset_of!(verbs_context, get_srq_num), |v| v.get_srq_num) } {
        // SAFETY: the provider's function with valid pointers.
        Some(f) => unsafe { f(srq, num) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_alloc_dm` (the header's inline): null with `errno` = `EOPNOTSUPP` when the
/// provider lacks it.
///
/// # Safety
/// `ctx` is a live context and `attr` valid.
pub unsafe fn alloc_dm(ctx: *mut ibv_context, attr: *mut ibv_alloc_dm_attr) -> *mut ibv_dm {
    // SAFETY: caller's contract.
    match unsafe { ctx_op(ctx, offset_of!(verbs_context, alloc_dm), |v| v.alloc_dm) } {
        // SAFETY: the provider's function with valid pointers.
        Some(f) => unsafe { f(ctx, attr) },
        None => eopnotsupp(),
    }
}

/// `ibv_free_dm` (the header's inline; `EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `dm` is live device memory that no region registers any more.
pub unsafe fn free_dm(dm: *mut ibv_dm) -> c_int {
    // SAFETY: live device memory points at its live context (caller's contract).
    match unsafe { ctx_op((*dm).context, offset_of!(verbs_context, free_dm), |v| v.free_dm) } {
        // SAFETY: the provider's function with live device memory.
        Some(f) => unsafe { f(dm) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_reg_dm_mr` (the header's inline): null with `errno` = `EOPNOTSUPP` when the
/// provider lacks it.
///
/// # Safety
/// `pd` and `dm` are live and of one context.
pub unsafe fn reg_dm_mr(pd: *mut ibv_pd, dm: *mut ibv_dm, offset: u64, len: libc::size_t, access: u32) -> *mut ibv_mr {
    // SAFETY: a live PD points at its live context (caller's contract).
    match unsafe { ctx_op((*pd).context, offset_of!(verbs_context, reg_dm_mr), |v| v.reg_dm_mr) } {
        // SAFETY: the provider's function with valid pointers.
        Some(f) => unsafe { f(pd, dm, offset, len, access) },
        None => eopnotsupp(),
    }
}
