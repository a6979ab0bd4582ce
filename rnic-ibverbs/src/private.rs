//! `IBVERBS_PRIVATE_34`: the interface between libibverbs and rdma-core's provider libraries
//! (`libmlx5`, `libefa`, ...: `ibv_cmd_*` kernel commands, `verbs_register_driver_34`,
//! context set-up). A provider library loaded beside this one (perftest links libmlx5 and
//! libefa) registers its driver from its constructor; with rnic no kernel device exists for
//! it to bind, so registration is accepted and ignored, and every kernel command fails with
//! `EOPNOTSUPP` (pointer-returning ones with NULL and errno). `ibv_query_gid_type`, the one
//! private symbol a program (ibv_devinfo) calls, is implemented in [`crate::device`].
//!
//! The functions take no parameters here: with the x86-64 and AArch64 C calling
//! conventions the caller owns its arguments, so ignoring them is sound.

use crate::set_errno;
use libc::{c_int, c_void};
use std::ptr::null_mut;

#[no_mangle]
pub extern "C" fn __ioctl_final_num_attrs() -> u32 {
    0
}

#[no_mangle]
pub extern "C" fn __verbs_log() {}

#[no_mangle]
pub extern "C" fn _verbs_init_and_alloc_context() -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    null_mut()
}

#[no_mangle]
pub extern "C" fn execute_ioctl() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_advise_mr() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_alloc_dm() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_alloc_mw() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_alloc_pd() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_attach_mcast() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_close_xrcd() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_create_ah() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_create_counters() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_create_cq() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_create_cq_ex() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_create_flow() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_create_flow_action_esp() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_create_qp() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_create_qp_ex() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_create_qp_ex2() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_create_rwq_ind_table() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_create_srq() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_create_srq_ex() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_create_wq() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_dealloc_mw() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_dealloc_pd() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_dereg_mr() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_destroy_ah() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_destroy_counters() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_destroy_cq() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_destroy_flow() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_destroy_flow_action() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_destroy_qp() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_destroy_rwq_ind_table() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_destroy_srq() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_destroy_wq() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_detach_mcast() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_free_dm() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_get_context() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_modify_cq() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_modify_flow_action_esp() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_modify_qp() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_modify_qp_ex() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_modify_srq() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_modify_wq() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_open_qp() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_open_xrcd() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_poll_cq() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_post_recv() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_post_send() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_post_srq_recv() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_query_context() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_query_device_any() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_query_mr() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_query_port() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_query_qp() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_query_srq() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_read_counters() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_reg_dm_mr() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_reg_dmabuf_mr() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_reg_mr() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_req_notify_cq() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_rereg_mr() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_cmd_resize_cq() -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_read_ibdev_sysfs_file() -> c_int {
    set_errno(libc::ENOENT);
    -1
}

#[no_mangle]
pub extern "C" fn verbs_allow_disassociate_destroy() {}

#[no_mangle]
pub extern "C" fn verbs_init_cq() {}

#[no_mangle]
pub extern "C" fn verbs_open_device() -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    null_mut()
}

#[no_mangle]
pub extern "C" fn verbs_register_driver_34() {}

#[no_mangle]
pub extern "C" fn verbs_set_ops() {}

#[no_mangle]
pub extern "C" fn verbs_uninit_context() {}
