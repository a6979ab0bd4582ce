//! The helpers of libibverbs that need no device: names of enums, rate conversions, fork
//! support.

use libc::{c_char, c_int, c_void, size_t};
use rnic_verbs_sys::*;

/// A static C string.
macro_rules! cstr {
    ($s:expr) => {
        concat!($s, "\0").as_ptr().cast::<c_char>()
    };
}

#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: ibv_wc_status) -> *const c_char {
    match status {
        IBV_WC_SUCCESS => cstr!("success"),
        IBV_WC_LOC_LEN_ERR => cstr!("local length error"),
        IBV_WC_LOC_QP_OP_ERR => cstr!("local QP operation error"),
        IBV_WC_LOC_EEC_OP_ERR => cstr!("local EE context operation error"),
        IBV_WC_LOC_PROT_ERR => cstr!("local protection error"),
        IBV_WC_WR_FLUSH_ERR => cstr!("Work Request Flushed Error"),
        IBV_WC_MW_BIND_ERR => cstr!("memory management operation error"),
        IBV_WC_BAD_RESP_ERR => cstr!("bad response error"),
        IBV_WC_LOC_ACCESS_ERR => cstr!("local access error"),
        IBV_WC_REM_INV_REQ_ERR => cstr!("remote invalid request error"),
        IBV_WC_REM_ACCESS_ERR => cstr!("remote access error"),
        IBV_WC_REM_OP_ERR => cstr!("remote operation error"),
        IBV_WC_RETRY_EXC_ERR => cstr!("transport retry counter exceeded"),
        IBV_WC_RNR_RETRY_EXC_ERR => cstr!("RNR retry counter exceeded"),
        IBV_WC_LOC_RDD_VIOL_ERR => cstr!("local RDD violation error"),
        IBV_WC_REM_INV_RD_REQ_ERR => cstr!("remote invalid RD request"),
        IBV_WC_REM_ABORT_ERR => cstr!("aborted error"),
        IBV_WC_INV_EECN_ERR => cstr!("invalid EE context number"),
        IBV_WC_INV_EEC_STATE_ERR => cstr!("invalid EE context state"),
        IBV_WC_FATAL_ERR => cstr!("fatal error"),
        IBV_WC_RESP_TIMEOUT_ERR => cstr!("response timeout error"),
        IBV_WC_GENERAL_ERR => cstr!("general error"),
        IBV_WC_TM_ERR => cstr!("TM error"),
        IBV_WC_TM_RNDV_INCOMPLETE => cstr!("TM software rendezvous"),
        _ => cstr!("unknown"),
    }
}

#[no_mangle]
pub extern "C" fn ibv_event_type_str(event: ibv_event_type) -> *const c_char {
    const NAMES: [&str; 20] = [
        "CQ error\0",
        "local work queue catastrophic error\0",
        "invalid request local work queue error\0",
        "local access violation work queue error\0",
        "communication established\0",
        "send queue drained\0",
        "path migrated\0",
        "path migration request error\0",
        "local catastrophic error\0",
        "port active\0",
        "port error\0",
        "LID change\0",
        "P_Key change\0",
        "SM change\0",
        "SRQ catastrophic error\0",
        "SRQ limit reached\0",
        "last WQE reached\0",
        "client reregistration\0",
        "GID table change\0",
        "WQ fatal\0",
    ];
    NAMES.get(event as usize).map_or(cstr!("unknown"), |s| s.as_ptr().cast())
}

#[no_mangle]
pub extern "C" fn ibv_node_type_str(node_type: ibv_node_type) -> *const c_char {
    match node_type {
        IBV_NODE_CA => cstr!("InfiniBand channel adapter"),
        IBV_NODE_SWITCH => cstr!("InfiniBand switch"),
        IBV_NODE_ROUTER => cstr!("InfiniBand router"),
        IBV_NODE_RNIC => cstr!("iWARP NIC"),
        IBV_NODE_USNIC => cstr!("usNIC"),
        IBV_NODE_USNIC_UDP => cstr!("usNIC UDP"),
        IBV_NODE_UNSPECIFIED => cstr!("unspecified"),
        _ => cstr!("unknown"),
    }
}

#[no_mangle]
pub extern "C" fn ibv_port_state_str(port_state: ibv_port_state) -> *const c_char {
    match port_state {
        IBV_PORT_NOP => cstr!("PORT_NOP"),
        IBV_PORT_DOWN => cstr!("PORT_DOWN"),
        IBV_PORT_INIT => cstr!("PORT_INIT"),
        IBV_PORT_ARMED => cstr!("PORT_ARMED"),
        IBV_PORT_ACTIVE => cstr!("PORT_ACTIVE"),
        IBV_PORT_ACTIVE_DEFER => cstr!("PORT_ACTIVE_DEFER"),
        _ => cstr!("invalid state"),
    }
}

/// `enum ibv_rate` codes with their multiple of 2.5 Gb/s and their Mb/s (IBA 9.7.6 and
/// rdma-core's table).
const RATES: [(c_int, c_int, c_int); 21] = [
    (2, 1, 2500),
    (5, 4, 10000),
    (3, 2, 5000),
    (6, 8, 20000),
    (7, 12, 30000),
    (4, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, 6, 14062),
    (12, 22, 56250),
    (13, 45, 112500),
    (14, 67, 168750),
    (15, 10, 25781),
    (16, 40, 103125),
    (17, 80, 206250),
    (18, 120, 309375),
    (19, 20, 53125),
    (20, 80, 106250),
    (21, 160, 212500),
    (22, 240, 318750),
];

#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}

#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES.iter().find(|r| r.1 == mult).map_or(0, |r| r.0)
}

#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
}

/// Fork support: registered memory here is plain process memory that no device DMAs
/// into, so a child process after `fork` cannot corrupt anything; nothing to set up.
#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `IBV_FORK_UNNEEDED` (2): as on kernels with copy-on-fork for pinned pages.
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    2
}

#[no_mangle]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: size_t) -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: size_t) -> c_int {
    0
}

/// rnic's devices have no sysfs directory.
#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    cstr!("/sys")
}

/// rnic's devices have no sysfs files: -1 with `ENOENT`, as for a missing file.
#[no_mangle]
pub extern "C" fn ibv_read_sysfs_file(
    _dir: *const c_char,
    _file: *const c_char,
    _buf: *mut c_char,
    _size: size_t,
) -> c_int {
    crate::set_errno(libc::ENOENT);
    -1
}
