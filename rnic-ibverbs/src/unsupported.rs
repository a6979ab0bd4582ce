//! The public verbs rnic does not implement: each returns what rdma-core returns for an
//! operation the device does not support (`EOPNOTSUPP`, or NULL with `errno` set), so a
//! program reports it instead of crashing. Memory windows, device memory, flow steering,
//! XRC and ODP are not exported at all by rdma-core's library either (they go through the
//! context's tables, which rnic leaves empty: the header's inline wrappers then return
//! `EOPNOTSUPP`).

use crate::set_errno;
use libc::{c_int, c_void, size_t};
use rnic_verbs_sys::*;
use std::ptr::null_mut;

#[no_mangle]
pub extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _length: size_t,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    set_errno(libc::EOPNOTSUPP);
    null_mut()
}

#[no_mangle]
pub extern "C" fn ibv_resolve_eth_l2_from_gid(
    _context: *mut ibv_context,
    _attr: *mut ibv_ah_attr,
    _eth_mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

/// Whether data of a QP lands in order: rnic writes a message's packets in PSN order, but
/// promises nothing beyond what verbs does (0).
#[no_mangle]
pub extern "C" fn ibv_query_qp_data_in_order(_qp: *mut ibv_qp, _op: c_int, _flags: u32) -> c_int {
    0
}

/// Conversions from and to the kernel's uverbs structs, which librdmacm calls after its
/// kernel commands (`/dev/infiniband/rdma_cm`). No kernel command ever succeeds with rnic
/// (there is no such device), so librdmacm never reaches them: they leave their output
/// untouched.
#[no_mangle]
pub extern "C" fn ibv_copy_qp_attr_from_kern(_dst: *mut ibv_qp_attr, _src: *const c_void) {}

#[no_mangle]
pub extern "C" fn ibv_copy_ah_attr_from_kern(_dst: *mut ibv_ah_attr, _src: *const c_void) {}

#[no_mangle]
pub extern "C" fn ibv_copy_path_rec_from_kern(_dst: *mut c_void, _src: *const c_void) {}

#[no_mangle]
pub extern "C" fn ibv_copy_path_rec_to_kern(_dst: *mut c_void, _src: *const c_void) {}
