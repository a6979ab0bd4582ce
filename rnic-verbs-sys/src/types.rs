//! `#[repr(C)]` copies of rdma-core's `<infiniband/verbs.h>` (rdma-core 44, Debian
//! bookworm), field for field and in the header's order. `tests/abi.rs` compares every size,
//! alignment and field offset here with the real header (a C `offsetof` probe).
//!
//! C enums are integer type aliases with `const`s, not Rust enums: a value the library
//! writes that this copy does not know (a newer rdma-core, a vendor opcode) must stay a
//! number, never undefined behaviour. Anonymous C unions get a named Rust union (or, where
//! both members are one `u32`, one field; see the field's doc).

use libc::{c_char, c_int, c_uint, c_void, pthread_cond_t, pthread_mutex_t, size_t, timespec};

/// Declares opaque structs: the header defines them, the backend only passes pointers.
macro_rules! opaque {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {$(
        $(#[$m])*
        #[repr(C)]
        #[derive(Debug)]
        pub struct $name {
            _private: [u8; 0],
            _not_send_sync: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
        }
    )*};
}

opaque!(
    /// `struct ibv_flow`.
    ibv_flow,
    /// `struct ibv_flow_attr`.
    ibv_flow_attr,
    /// `struct ibv_flow_action`.
    ibv_flow_action,
    /// `struct ibv_flow_action_esp_attr`.
    ibv_flow_action_esp_attr,
    /// `struct ibv_counters`.
    ibv_counters,
    /// `struct ibv_counters_init_attr`.
    ibv_counters_init_attr,
    /// `struct ibv_counter_attach_attr`.
    ibv_counter_attach_attr,
    /// `struct ibv_ops_wr` (tag matching).
    ibv_ops_wr,
    /// `struct ibv_wq`.
    ibv_wq,
    /// `struct ibv_wq_attr`.
    ibv_wq_attr,
    /// `struct ibv_wq_init_attr`.
    ibv_wq_init_attr,
    /// `struct ibv_rwq_ind_table`.
    ibv_rwq_ind_table,
    /// `struct ibv_rwq_ind_table_init_attr`.
    ibv_rwq_ind_table_init_attr,
    /// `struct verbs_ex_private` (libibverbs-internal).
    verbs_ex_private,
    /// `struct _compat_ibv_port_attr` (what the exported `ibv_query_port` fills).
    _compat_ibv_port_attr,
);

/// Implements `Default` as all-zero bytes, the way C code `memset`s these structs.
macro_rules! zeroed_default {
    ($($t:ty),* $(,)?) => {$(
        impl Default for $t {
            fn default() -> Self {
                // SAFETY: every field of this struct is an integer, a raw pointer, an
                // `Option` of a function pointer, a pthread object (zero is the static
                // initializer on glibc) or an array/union/struct of those: all-zero is a
                // valid value of each.
                unsafe { core::mem::zeroed() }
            }
        }
    )*};
}

// ---------------------------------------------------------------------------------------
// Enums (as integer aliases) and flags.

/// `enum ibv_node_type`.
pub type ibv_node_type = c_int;
/// `IBV_NODE_UNKNOWN`.
pub const IBV_NODE_UNKNOWN: ibv_node_type = -1;
/// `IBV_NODE_CA`.
pub const IBV_NODE_CA: ibv_node_type = 1;
/// `IBV_NODE_SWITCH`.
pub const IBV_NODE_SWITCH: ibv_node_type = 2;
/// `IBV_NODE_ROUTER`.
pub const IBV_NODE_ROUTER: ibv_node_type = 3;
/// `IBV_NODE_RNIC`.
pub const IBV_NODE_RNIC: ibv_node_type = 4;
/// `IBV_NODE_USNIC`.
pub const IBV_NODE_USNIC: ibv_node_type = 5;
/// `IBV_NODE_USNIC_UDP`.
pub const IBV_NODE_USNIC_UDP: ibv_node_type = 6;
/// `IBV_NODE_UNSPECIFIED`.
pub const IBV_NODE_UNSPECIFIED: ibv_node_type = 7;

/// `enum ibv_transport_type`.
pub type ibv_transport_type = c_int;
/// `IBV_TRANSPORT_UNKNOWN`.
pub const IBV_TRANSPORT_UNKNOWN: ibv_transport_type = -1;
/// `IBV_TRANSPORT_IB` (InfiniBand and RoCE).
pub const IBV_TRANSPORT_IB: ibv_transport_type = 0;
/// `IBV_TRANSPORT_IWARP`.
pub const IBV_TRANSPORT_IWARP: ibv_transport_type = 1;
/// `IBV_TRANSPORT_USNIC`.
pub const IBV_TRANSPORT_USNIC: ibv_transport_type = 2;
/// `IBV_TRANSPORT_USNIC_UDP`.
pub const IBV_TRANSPORT_USNIC_UDP: ibv_transport_type = 3;
/// `IBV_TRANSPORT_UNSPECIFIED`.
pub const IBV_TRANSPORT_UNSPECIFIED: ibv_transport_type = 4;

/// `enum ibv_atomic_cap`.
pub type ibv_atomic_cap = c_uint;
/// `IBV_ATOMIC_NONE`.
pub const IBV_ATOMIC_NONE: ibv_atomic_cap = 0;
/// `IBV_ATOMIC_HCA`.
pub const IBV_ATOMIC_HCA: ibv_atomic_cap = 1;
/// `IBV_ATOMIC_GLOB`.
pub const IBV_ATOMIC_GLOB: ibv_atomic_cap = 2;

/// `enum ibv_gid_type` (of `ibv_gid_entry`).
pub type ibv_gid_type = c_uint;
/// `IBV_GID_TYPE_IB`.
pub const IBV_GID_TYPE_IB: ibv_gid_type = 0;
/// `IBV_GID_TYPE_ROCE_V1`.
pub const IBV_GID_TYPE_ROCE_V1: ibv_gid_type = 1;
/// `IBV_GID_TYPE_ROCE_V2`.
pub const IBV_GID_TYPE_ROCE_V2: ibv_gid_type = 2;

/// `enum ibv_mtu`.
pub type ibv_mtu = c_uint;
/// `IBV_MTU_256`.
pub const IBV_MTU_256: ibv_mtu = 1;
/// `IBV_MTU_512`.
pub const IBV_MTU_512: ibv_mtu = 2;
/// `IBV_MTU_1024`.
pub const IBV_MTU_1024: ibv_mtu = 3;
/// `IBV_MTU_2048`.
pub const IBV_MTU_2048: ibv_mtu = 4;
/// `IBV_MTU_4096`.
pub const IBV_MTU_4096: ibv_mtu = 5;

/// `enum ibv_port_state`.
pub type ibv_port_state = c_uint;
/// `IBV_PORT_NOP`.
pub const IBV_PORT_NOP: ibv_port_state = 0;
/// `IBV_PORT_DOWN`.
pub const IBV_PORT_DOWN: ibv_port_state = 1;
/// `IBV_PORT_INIT`.
pub const IBV_PORT_INIT: ibv_port_state = 2;
/// `IBV_PORT_ARMED`.
pub const IBV_PORT_ARMED: ibv_port_state = 3;
/// `IBV_PORT_ACTIVE`.
pub const IBV_PORT_ACTIVE: ibv_port_state = 4;
/// `IBV_PORT_ACTIVE_DEFER`.
pub const IBV_PORT_ACTIVE_DEFER: ibv_port_state = 5;

/// `IBV_LINK_LAYER_UNSPECIFIED` (`ibv_port_attr::link_layer`).
pub const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
/// `IBV_LINK_LAYER_INFINIBAND`.
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
/// `IBV_LINK_LAYER_ETHERNET`.
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

/// `enum ibv_event_type`.
pub type ibv_event_type = c_uint;
/// `IBV_EVENT_CQ_ERR`.
pub const IBV_EVENT_CQ_ERR: ibv_event_type = 0;
/// `IBV_EVENT_QP_FATAL`.
pub const IBV_EVENT_QP_FATAL: ibv_event_type = 1;
/// `IBV_EVENT_QP_REQ_ERR`.
pub const IBV_EVENT_QP_REQ_ERR: ibv_event_type = 2;
/// `IBV_EVENT_QP_ACCESS_ERR`.
pub const IBV_EVENT_QP_ACCESS_ERR: ibv_event_type = 3;
/// `IBV_EVENT_COMM_EST`.
pub const IBV_EVENT_COMM_EST: ibv_event_type = 4;
/// `IBV_EVENT_SQ_DRAINED`.
pub const IBV_EVENT_SQ_DRAINED: ibv_event_type = 5;
/// `IBV_EVENT_PATH_MIG`.
pub const IBV_EVENT_PATH_MIG: ibv_event_type = 6;
/// `IBV_EVENT_PATH_MIG_ERR`.
pub const IBV_EVENT_PATH_MIG_ERR: ibv_event_type = 7;
/// `IBV_EVENT_DEVICE_FATAL`.
pub const IBV_EVENT_DEVICE_FATAL: ibv_event_type = 8;
/// `IBV_EVENT_PORT_ACTIVE`.
pub const IBV_EVENT_PORT_ACTIVE: ibv_event_type = 9;
/// `IBV_EVENT_PORT_ERR`.
pub const IBV_EVENT_PORT_ERR: ibv_event_type = 10;
/// `IBV_EVENT_LID_CHANGE`.
pub const IBV_EVENT_LID_CHANGE: ibv_event_type = 11;
/// `IBV_EVENT_PKEY_CHANGE`.
pub const IBV_EVENT_PKEY_CHANGE: ibv_event_type = 12;
/// `IBV_EVENT_SM_CHANGE`.
pub const IBV_EVENT_SM_CHANGE: ibv_event_type = 13;
/// `IBV_EVENT_SRQ_ERR`.
pub const IBV_EVENT_SRQ_ERR: ibv_event_type = 14;
/// `IBV_EVENT_SRQ_LIMIT_REACHED`.
pub const IBV_EVENT_SRQ_LIMIT_REACHED: ibv_event_type = 15;
/// `IBV_EVENT_QP_LAST_WQE_REACHED`.
pub const IBV_EVENT_QP_LAST_WQE_REACHED: ibv_event_type = 16;
/// `IBV_EVENT_CLIENT_REREGISTER`.
pub const IBV_EVENT_CLIENT_REREGISTER: ibv_event_type = 17;
/// `IBV_EVENT_GID_CHANGE`.
pub const IBV_EVENT_GID_CHANGE: ibv_event_type = 18;
/// `IBV_EVENT_WQ_FATAL`.
pub const IBV_EVENT_WQ_FATAL: ibv_event_type = 19;

/// `enum ibv_wc_status`.
pub type ibv_wc_status = c_uint;
/// `IBV_WC_SUCCESS`.
pub const IBV_WC_SUCCESS: ibv_wc_status = 0;
/// `IBV_WC_LOC_LEN_ERR`.
pub const IBV_WC_LOC_LEN_ERR: ibv_wc_status = 1;
/// `IBV_WC_LOC_QP_OP_ERR`.
pub const IBV_WC_LOC_QP_OP_ERR: ibv_wc_status = 2;
/// `IBV_WC_LOC_EEC_OP_ERR`.
pub const IBV_WC_LOC_EEC_OP_ERR: ibv_wc_status = 3;
/// `IBV_WC_LOC_PROT_ERR`.
pub const IBV_WC_LOC_PROT_ERR: ibv_wc_status = 4;
/// `IBV_WC_WR_FLUSH_ERR`.
pub const IBV_WC_WR_FLUSH_ERR: ibv_wc_status = 5;
/// `IBV_WC_MW_BIND_ERR`.
pub const IBV_WC_MW_BIND_ERR: ibv_wc_status = 6;
/// `IBV_WC_BAD_RESP_ERR`.
pub const IBV_WC_BAD_RESP_ERR: ibv_wc_status = 7;
/// `IBV_WC_LOC_ACCESS_ERR`.
pub const IBV_WC_LOC_ACCESS_ERR: ibv_wc_status = 8;
/// `IBV_WC_REM_INV_REQ_ERR`.
pub const IBV_WC_REM_INV_REQ_ERR: ibv_wc_status = 9;
/// `IBV_WC_REM_ACCESS_ERR`.
pub const IBV_WC_REM_ACCESS_ERR: ibv_wc_status = 10;
/// `IBV_WC_REM_OP_ERR`.
pub const IBV_WC_REM_OP_ERR: ibv_wc_status = 11;
/// `IBV_WC_RETRY_EXC_ERR`.
pub const IBV_WC_RETRY_EXC_ERR: ibv_wc_status = 12;
/// `IBV_WC_RNR_RETRY_EXC_ERR`.
pub const IBV_WC_RNR_RETRY_EXC_ERR: ibv_wc_status = 13;
/// `IBV_WC_LOC_RDD_VIOL_ERR`.
pub const IBV_WC_LOC_RDD_VIOL_ERR: ibv_wc_status = 14;
/// `IBV_WC_REM_INV_RD_REQ_ERR`.
pub const IBV_WC_REM_INV_RD_REQ_ERR: ibv_wc_status = 15;
/// `IBV_WC_REM_ABORT_ERR`.
pub const IBV_WC_REM_ABORT_ERR: ibv_wc_status = 16;
/// `IBV_WC_INV_EECN_ERR`.
pub const IBV_WC_INV_EECN_ERR: ibv_wc_status = 17;
/// `IBV_WC_INV_EEC_STATE_ERR`.
pub const IBV_WC_INV_EEC_STATE_ERR: ibv_wc_status = 18;
/// `IBV_WC_FATAL_ERR`.
pub const IBV_WC_FATAL_ERR: ibv_wc_status = 19;
/// `IBV_WC_RESP_TIMEOUT_ERR`.
pub const IBV_WC_RESP_TIMEOUT_ERR: ibv_wc_status = 20;
/// `IBV_WC_GENERAL_ERR`.
pub const IBV_WC_GENERAL_ERR: ibv_wc_status = 21;
/// `IBV_WC_TM_ERR`.
pub const IBV_WC_TM_ERR: ibv_wc_status = 22;
/// `IBV_WC_TM_RNDV_INCOMPLETE`.
pub const IBV_WC_TM_RNDV_INCOMPLETE: ibv_wc_status = 23;

/// `enum ibv_wc_opcode`.
pub type ibv_wc_opcode = c_uint;
/// `IBV_WC_SEND`.
pub const IBV_WC_SEND: ibv_wc_opcode = 0;
/// `IBV_WC_RDMA_WRITE`.
pub const IBV_WC_RDMA_WRITE: ibv_wc_opcode = 1;
/// `IBV_WC_RDMA_READ`.
pub const IBV_WC_RDMA_READ: ibv_wc_opcode = 2;
/// `IBV_WC_COMP_SWAP`.
pub const IBV_WC_COMP_SWAP: ibv_wc_opcode = 3;
/// `IBV_WC_FETCH_ADD`.
pub const IBV_WC_FETCH_ADD: ibv_wc_opcode = 4;
/// `IBV_WC_BIND_MW`.
pub const IBV_WC_BIND_MW: ibv_wc_opcode = 5;
/// `IBV_WC_LOCAL_INV`.
pub const IBV_WC_LOCAL_INV: ibv_wc_opcode = 6;
/// `IBV_WC_TSO`.
pub const IBV_WC_TSO: ibv_wc_opcode = 7;
/// `IBV_WC_ATOMIC_WRITE`.
pub const IBV_WC_ATOMIC_WRITE: ibv_wc_opcode = 9;
/// `IBV_WC_RECV` (a receive completion has this bit set).
pub const IBV_WC_RECV: ibv_wc_opcode = 1 << 7;
/// `IBV_WC_RECV_RDMA_WITH_IMM`.
pub const IBV_WC_RECV_RDMA_WITH_IMM: ibv_wc_opcode = IBV_WC_RECV + 1;

/// `enum ibv_wc_flags`.
pub type ibv_wc_flags = c_uint;
/// `IBV_WC_GRH`.
pub const IBV_WC_GRH: ibv_wc_flags = 1 << 0;
/// `IBV_WC_WITH_IMM`.
pub const IBV_WC_WITH_IMM: ibv_wc_flags = 1 << 1;
/// `IBV_WC_IP_CSUM_OK`.
pub const IBV_WC_IP_CSUM_OK: ibv_wc_flags = 1 << 2;
/// `IBV_WC_WITH_INV`.
pub const IBV_WC_WITH_INV: ibv_wc_flags = 1 << 3;
/// `IBV_WC_TM_SYNC_REQ`.
pub const IBV_WC_TM_SYNC_REQ: ibv_wc_flags = 1 << 4;
/// `IBV_WC_TM_MATCH`.
pub const IBV_WC_TM_MATCH: ibv_wc_flags = 1 << 5;
/// `IBV_WC_TM_DATA_VALID`.
pub const IBV_WC_TM_DATA_VALID: ibv_wc_flags = 1 << 6;

/// `enum ibv_access_flags`.
pub type ibv_access_flags = c_uint;
/// `IBV_ACCESS_LOCAL_WRITE`.
pub const IBV_ACCESS_LOCAL_WRITE: ibv_access_flags = 1;
/// `IBV_ACCESS_REMOTE_WRITE`.
pub const IBV_ACCESS_REMOTE_WRITE: ibv_access_flags = 1 << 1;
/// `IBV_ACCESS_REMOTE_READ`.
pub const IBV_ACCESS_REMOTE_READ: ibv_access_flags = 1 << 2;
/// `IBV_ACCESS_REMOTE_ATOMIC`.
pub const IBV_ACCESS_REMOTE_ATOMIC: ibv_access_flags = 1 << 3;
/// `IBV_ACCESS_MW_BIND`.
pub const IBV_ACCESS_MW_BIND: ibv_access_flags = 1 << 4;
/// `IBV_ACCESS_ZERO_BASED`.
pub const IBV_ACCESS_ZERO_BASED: ibv_access_flags = 1 << 5;

/// `enum ibv_rereg_mr_flags`: `IBV_REREG_MR_CHANGE_TRANSLATION`.
pub const IBV_REREG_MR_CHANGE_TRANSLATION: c_int = 1 << 0;
/// `IBV_REREG_MR_CHANGE_PD`.
pub const IBV_REREG_MR_CHANGE_PD: c_int = 1 << 1;
/// `IBV_REREG_MR_CHANGE_ACCESS`.
pub const IBV_REREG_MR_CHANGE_ACCESS: c_int = 1 << 2;
/// `IBV_ACCESS_ON_DEMAND`.
pub const IBV_ACCESS_ON_DEMAND: ibv_access_flags = 1 << 6;
/// `IBV_ACCESS_HUGETLB`.
pub const IBV_ACCESS_HUGETLB: ibv_access_flags = 1 << 7;
/// `IBV_ACCESS_OPTIONAL_FIRST` (`verbs_api.h`): optional flags start here.
pub const IBV_ACCESS_OPTIONAL_FIRST: ibv_access_flags = 1 << 20;
/// `IBV_ACCESS_RELAXED_ORDERING`.
pub const IBV_ACCESS_RELAXED_ORDERING: ibv_access_flags = IBV_ACCESS_OPTIONAL_FIRST;

/// `enum ibv_mw_type`.
pub type ibv_mw_type = c_uint;
/// `IBV_MW_TYPE_1`.
pub const IBV_MW_TYPE_1: ibv_mw_type = 1;
/// `IBV_MW_TYPE_2`.
pub const IBV_MW_TYPE_2: ibv_mw_type = 2;

/// `enum ibv_srq_attr_mask`.
pub type ibv_srq_attr_mask = c_uint;
/// `IBV_SRQ_MAX_WR`.
pub const IBV_SRQ_MAX_WR: ibv_srq_attr_mask = 1 << 0;
/// `IBV_SRQ_LIMIT`.
pub const IBV_SRQ_LIMIT: ibv_srq_attr_mask = 1 << 1;

/// `enum ibv_srq_type`.
pub type ibv_srq_type = c_uint;
/// `IBV_SRQ_INIT_ATTR_TYPE`.
pub const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1 << 0;
/// `IBV_SRQ_INIT_ATTR_PD`.
pub const IBV_SRQ_INIT_ATTR_PD: u32 = 1 << 1;
/// `IBV_SRQ_INIT_ATTR_XRCD`.
pub const IBV_SRQ_INIT_ATTR_XRCD: u32 = 1 << 2;
/// `IBV_SRQ_INIT_ATTR_CQ`.
pub const IBV_SRQ_INIT_ATTR_CQ: u32 = 1 << 3;
/// `IBV_SRQ_INIT_ATTR_TM`.
pub const IBV_SRQ_INIT_ATTR_TM: u32 = 1 << 4;
/// `IBV_XRCD_INIT_ATTR_FD`.
pub const IBV_XRCD_INIT_ATTR_FD: u32 = 1 << 0;
/// `IBV_XRCD_INIT_ATTR_OFLAGS`.
pub const IBV_XRCD_INIT_ATTR_OFLAGS: u32 = 1 << 1;
/// `IBV_XRCD_INIT_ATTR_RESERVED`.
pub const IBV_XRCD_INIT_ATTR_RESERVED: u32 = 1 << 2;
/// `IBV_QP_OPEN_ATTR_NUM`.
pub const IBV_QP_OPEN_ATTR_NUM: u32 = 1 << 0;
/// `IBV_QP_OPEN_ATTR_XRCD`.
pub const IBV_QP_OPEN_ATTR_XRCD: u32 = 1 << 1;
/// `IBV_QP_OPEN_ATTR_CONTEXT`.
pub const IBV_QP_OPEN_ATTR_CONTEXT: u32 = 1 << 2;
/// `IBV_QP_OPEN_ATTR_TYPE`.
pub const IBV_QP_OPEN_ATTR_TYPE: u32 = 1 << 3;
/// `IBV_QP_OPEN_ATTR_RESERVED`.
pub const IBV_QP_OPEN_ATTR_RESERVED: u32 = 1 << 4;
/// `IBV_SRQT_BASIC`.
pub const IBV_SRQT_BASIC: ibv_srq_type = 0;
/// `IBV_SRQT_XRC`.
pub const IBV_SRQT_XRC: ibv_srq_type = 1;
/// `IBV_SRQT_TM`.
pub const IBV_SRQT_TM: ibv_srq_type = 2;

/// `enum ibv_qp_type`.
pub type ibv_qp_type = c_uint;
/// `IBV_QPT_RC`.
pub const IBV_QPT_RC: ibv_qp_type = 2;
/// `IBV_QPT_UC`.
pub const IBV_QPT_UC: ibv_qp_type = 3;
/// `IBV_QPT_UD`.
pub const IBV_QPT_UD: ibv_qp_type = 4;
/// `IBV_QPT_RAW_PACKET`.
pub const IBV_QPT_RAW_PACKET: ibv_qp_type = 8;
/// `IBV_QPT_XRC_SEND`.
pub const IBV_QPT_XRC_SEND: ibv_qp_type = 9;
/// `IBV_QPT_XRC_RECV`.
pub const IBV_QPT_XRC_RECV: ibv_qp_type = 10;
/// `IBV_QPT_DRIVER`.
pub const IBV_QPT_DRIVER: ibv_qp_type = 0xff;

/// `enum ibv_qp_init_attr_mask`.
pub type ibv_qp_init_attr_mask = c_uint;
/// `IBV_QP_INIT_ATTR_PD`.
pub const IBV_QP_INIT_ATTR_PD: ibv_qp_init_attr_mask = 1 << 0;
/// `IBV_QP_INIT_ATTR_XRCD`.
pub const IBV_QP_INIT_ATTR_XRCD: ibv_qp_init_attr_mask = 1 << 1;
/// `IBV_QP_INIT_ATTR_CREATE_FLAGS`.
pub const IBV_QP_INIT_ATTR_CREATE_FLAGS: ibv_qp_init_attr_mask = 1 << 2;
/// `IBV_QP_INIT_ATTR_MAX_TSO_HEADER`.
pub const IBV_QP_INIT_ATTR_MAX_TSO_HEADER: ibv_qp_init_attr_mask = 1 << 3;
/// `IBV_QP_INIT_ATTR_IND_TABLE`.
pub const IBV_QP_INIT_ATTR_IND_TABLE: ibv_qp_init_attr_mask = 1 << 4;
/// `IBV_QP_INIT_ATTR_RX_HASH`.
pub const IBV_QP_INIT_ATTR_RX_HASH: ibv_qp_init_attr_mask = 1 << 5;
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: ibv_qp_init_attr_mask = 1 << 6;

/// `enum ibv_qp_create_send_ops_flags` (`ibv_qp_init_attr_ex::send_ops_flags`).
pub type ibv_qp_create_send_ops_flags = u64;
/// `IBV_QP_EX_WITH_RDMA_WRITE`.
pub const IBV_QP_EX_WITH_RDMA_WRITE: u64 = 1 << 0;
/// `IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM`.
pub const IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
/// `IBV_QP_EX_WITH_SEND`.
pub const IBV_QP_EX_WITH_SEND: u64 = 1 << 2;
/// `IBV_QP_EX_WITH_SEND_WITH_IMM`.
pub const IBV_QP_EX_WITH_SEND_WITH_IMM: u64 = 1 << 3;
/// `IBV_QP_EX_WITH_RDMA_READ`.
pub const IBV_QP_EX_WITH_RDMA_READ: u64 = 1 << 4;
/// `IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP`.
pub const IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
/// `IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD`.
pub const IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
/// `IBV_QP_EX_WITH_LOCAL_INV`.
pub const IBV_QP_EX_WITH_LOCAL_INV: u64 = 1 << 7;
/// `IBV_QP_EX_WITH_BIND_MW`.
pub const IBV_QP_EX_WITH_BIND_MW: u64 = 1 << 8;
/// `IBV_QP_EX_WITH_SEND_WITH_INV`.
pub const IBV_QP_EX_WITH_SEND_WITH_INV: u64 = 1 << 9;
/// `IBV_QP_EX_WITH_TSO`.
pub const IBV_QP_EX_WITH_TSO: u64 = 1 << 10;
/// `IBV_QP_EX_WITH_ATOMIC_WRITE`.
pub const IBV_QP_EX_WITH_ATOMIC_WRITE: u64 = 1 << 12;

/// `enum ibv_qp_attr_mask`.
pub type ibv_qp_attr_mask = c_uint;
/// `IBV_QP_STATE`.
pub const IBV_QP_STATE: ibv_qp_attr_mask = 1 << 0;
/// `IBV_QP_CUR_STATE`.
pub const IBV_QP_CUR_STATE: ibv_qp_attr_mask = 1 << 1;
/// `IBV_QP_EN_SQD_ASYNC_NOTIFY`.
pub const IBV_QP_EN_SQD_ASYNC_NOTIFY: ibv_qp_attr_mask = 1 << 2;
/// `IBV_QP_ACCESS_FLAGS`.
pub const IBV_QP_ACCESS_FLAGS: ibv_qp_attr_mask = 1 << 3;
/// `IBV_QP_PKEY_INDEX`.
pub const IBV_QP_PKEY_INDEX: ibv_qp_attr_mask = 1 << 4;
/// `IBV_QP_PORT`.
pub const IBV_QP_PORT: ibv_qp_attr_mask = 1 << 5;
/// `IBV_QP_QKEY`.
pub const IBV_QP_QKEY: ibv_qp_attr_mask = 1 << 6;
/// `IBV_QP_AV`.
pub const IBV_QP_AV: ibv_qp_attr_mask = 1 << 7;
/// `IBV_QP_PATH_MTU`.
pub const IBV_QP_PATH_MTU: ibv_qp_attr_mask = 1 << 8;
/// `IBV_QP_TIMEOUT`.
pub const IBV_QP_TIMEOUT: ibv_qp_attr_mask = 1 << 9;
/// `IBV_QP_RETRY_CNT`.
pub const IBV_QP_RETRY_CNT: ibv_qp_attr_mask = 1 << 10;
/// `IBV_QP_RNR_RETRY`.
pub const IBV_QP_RNR_RETRY: ibv_qp_attr_mask = 1 << 11;
/// `IBV_QP_RQ_PSN`.
pub const IBV_QP_RQ_PSN: ibv_qp_attr_mask = 1 << 12;
/// `IBV_QP_MAX_QP_RD_ATOMIC`.
pub const IBV_QP_MAX_QP_RD_ATOMIC: ibv_qp_attr_mask = 1 << 13;
/// `IBV_QP_ALT_PATH`.
pub const IBV_QP_ALT_PATH: ibv_qp_attr_mask = 1 << 14;
/// `IBV_QP_MIN_RNR_TIMER`.
pub const IBV_QP_MIN_RNR_TIMER: ibv_qp_attr_mask = 1 << 15;
/// `IBV_QP_SQ_PSN`.
pub const IBV_QP_SQ_PSN: ibv_qp_attr_mask = 1 << 16;
/// `IBV_QP_MAX_DEST_RD_ATOMIC`.
pub const IBV_QP_MAX_DEST_RD_ATOMIC: ibv_qp_attr_mask = 1 << 17;
/// `IBV_QP_PATH_MIG_STATE`.
pub const IBV_QP_PATH_MIG_STATE: ibv_qp_attr_mask = 1 << 18;
/// `IBV_QP_CAP`.
pub const IBV_QP_CAP: ibv_qp_attr_mask = 1 << 19;
/// `IBV_QP_DEST_QPN`.
pub const IBV_QP_DEST_QPN: ibv_qp_attr_mask = 1 << 20;
/// `IBV_QP_RATE_LIMIT`.
pub const IBV_QP_RATE_LIMIT: ibv_qp_attr_mask = 1 << 25;

/// `enum ibv_qp_state`.
pub type ibv_qp_state = c_uint;
/// `IBV_QPS_RESET`.
pub const IBV_QPS_RESET: ibv_qp_state = 0;
/// `IBV_QPS_INIT`.
pub const IBV_QPS_INIT: ibv_qp_state = 1;
/// `IBV_QPS_RTR`.
pub const IBV_QPS_RTR: ibv_qp_state = 2;
/// `IBV_QPS_RTS`.
pub const IBV_QPS_RTS: ibv_qp_state = 3;
/// `IBV_QPS_SQD`.
pub const IBV_QPS_SQD: ibv_qp_state = 4;
/// `IBV_QPS_SQE`.
pub const IBV_QPS_SQE: ibv_qp_state = 5;
/// `IBV_QPS_ERR`.
pub const IBV_QPS_ERR: ibv_qp_state = 6;
/// `IBV_QPS_UNKNOWN`.
pub const IBV_QPS_UNKNOWN: ibv_qp_state = 7;

/// `enum ibv_mig_state`.
pub type ibv_mig_state = c_uint;
/// `IBV_MIG_MIGRATED`.
pub const IBV_MIG_MIGRATED: ibv_mig_state = 0;
/// `IBV_MIG_REARM`.
pub const IBV_MIG_REARM: ibv_mig_state = 1;
/// `IBV_MIG_ARMED`.
pub const IBV_MIG_ARMED: ibv_mig_state = 2;

/// `enum ibv_wr_opcode`.
pub type ibv_wr_opcode = c_uint;
/// `IBV_WR_RDMA_WRITE`.
pub const IBV_WR_RDMA_WRITE: ibv_wr_opcode = 0;
/// `IBV_WR_RDMA_WRITE_WITH_IMM`.
pub const IBV_WR_RDMA_WRITE_WITH_IMM: ibv_wr_opcode = 1;
/// `IBV_WR_SEND`.
pub const IBV_WR_SEND: ibv_wr_opcode = 2;
/// `IBV_WR_SEND_WITH_IMM`.
pub const IBV_WR_SEND_WITH_IMM: ibv_wr_opcode = 3;
/// `IBV_WR_RDMA_READ`.
pub const IBV_WR_RDMA_READ: ibv_wr_opcode = 4;
/// `IBV_WR_ATOMIC_CMP_AND_SWP`.
pub const IBV_WR_ATOMIC_CMP_AND_SWP: ibv_wr_opcode = 5;
/// `IBV_WR_ATOMIC_FETCH_AND_ADD`.
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: ibv_wr_opcode = 6;
/// `IBV_WR_LOCAL_INV`.
pub const IBV_WR_LOCAL_INV: ibv_wr_opcode = 7;
/// `IBV_WR_BIND_MW`.
pub const IBV_WR_BIND_MW: ibv_wr_opcode = 8;
/// `IBV_WR_SEND_WITH_INV`.
pub const IBV_WR_SEND_WITH_INV: ibv_wr_opcode = 9;
/// `IBV_WR_TSO`.
pub const IBV_WR_TSO: ibv_wr_opcode = 10;
/// `IBV_WR_DRIVER1`.
pub const IBV_WR_DRIVER1: ibv_wr_opcode = 11;
/// `IBV_WR_ATOMIC_WRITE` (only through `ibv_qp_ex::wr_atomic_write` in rdma-core 44).
pub const IBV_WR_ATOMIC_WRITE: ibv_wr_opcode = 15;

/// `enum ibv_send_flags`.
pub type ibv_send_flags = c_uint;
/// `IBV_SEND_FENCE`.
pub const IBV_SEND_FENCE: ibv_send_flags = 1 << 0;
/// `IBV_SEND_SIGNALED`.
pub const IBV_SEND_SIGNALED: ibv_send_flags = 1 << 1;
/// `IBV_SEND_SOLICITED`.
pub const IBV_SEND_SOLICITED: ibv_send_flags = 1 << 2;
/// `IBV_SEND_INLINE`.
pub const IBV_SEND_INLINE: ibv_send_flags = 1 << 3;
/// `IBV_SEND_IP_CSUM`.
pub const IBV_SEND_IP_CSUM: ibv_send_flags = 1 << 4;

/// `enum ibv_cq_init_attr_mask`.
pub type ibv_cq_init_attr_mask = c_uint;
/// `IBV_CQ_INIT_ATTR_MASK_FLAGS`.
pub const IBV_CQ_INIT_ATTR_MASK_FLAGS: ibv_cq_init_attr_mask = 1 << 0;
/// `IBV_CQ_INIT_ATTR_MASK_PD`.
pub const IBV_CQ_INIT_ATTR_MASK_PD: ibv_cq_init_attr_mask = 1 << 1;

/// `enum ibv_create_cq_wc_flags` (`ibv_cq_init_attr_ex::wc_flags`).
pub type ibv_create_cq_wc_flags = u64;
/// `IBV_WC_EX_WITH_BYTE_LEN`.
pub const IBV_WC_EX_WITH_BYTE_LEN: u64 = 1 << 0;
/// `IBV_WC_EX_WITH_IMM`.
pub const IBV_WC_EX_WITH_IMM: u64 = 1 << 1;
/// `IBV_WC_EX_WITH_QP_NUM`.
pub const IBV_WC_EX_WITH_QP_NUM: u64 = 1 << 2;
/// `IBV_WC_EX_WITH_SRC_QP`.
pub const IBV_WC_EX_WITH_SRC_QP: u64 = 1 << 3;
/// `IBV_WC_EX_WITH_SLID`.
pub const IBV_WC_EX_WITH_SLID: u64 = 1 << 4;
/// `IBV_WC_EX_WITH_SL`.
pub const IBV_WC_EX_WITH_SL: u64 = 1 << 5;
/// `IBV_WC_EX_WITH_DLID_PATH_BITS`.
pub const IBV_WC_EX_WITH_DLID_PATH_BITS: u64 = 1 << 6;
/// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`.
pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: u64 = 1 << 7;
/// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK`.
pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK: u64 = 1 << 11;
/// `IBV_VALUES_MASK_RAW_CLOCK` (`ibv_values_ex::comp_mask`).
pub const IBV_VALUES_MASK_RAW_CLOCK: u32 = 1 << 0;
/// `IBV_WC_STANDARD_FLAGS`: byte length, immediate, QP number, source QP, SLID, SL,
/// DLID path bits.
pub const IBV_WC_STANDARD_FLAGS: u64 = IBV_WC_EX_WITH_BYTE_LEN
    | IBV_WC_EX_WITH_IMM
    | IBV_WC_EX_WITH_QP_NUM
    | IBV_WC_EX_WITH_SRC_QP
    | IBV_WC_EX_WITH_SLID
    | IBV_WC_EX_WITH_SL
    | IBV_WC_EX_WITH_DLID_PATH_BITS;

/// `enum ibv_create_cq_attr_flags` (`ibv_cq_init_attr_ex::flags`).
pub type ibv_create_cq_attr_flags = u32;
/// `IBV_CREATE_CQ_ATTR_SINGLE_THREADED`.
pub const IBV_CREATE_CQ_ATTR_SINGLE_THREADED: ibv_create_cq_attr_flags = 1 << 0;
/// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`.
pub const IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: ibv_create_cq_attr_flags = 1 << 1;

/// `IBV_SYSFS_NAME_MAX`.
pub const IBV_SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const IBV_SYSFS_PATH_MAX: usize = 256;

// ---------------------------------------------------------------------------------------
// Structs.

/// `struct { __be64 subnet_prefix; __be64 interface_id; }` of `union ibv_gid`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_gid_global {
    /// Subnet prefix (network order).
    pub subnet_prefix: u64,
    /// Interface id (network order).
    pub interface_id: u64,
}

/// `union ibv_gid`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_gid {
    /// The 16 bytes, network order.
    pub raw: [u8; 16],
    /// The two halves.
    pub global: ibv_gid_global,
}

impl ibv_gid {
    /// The 16 bytes.
    pub fn bytes(&self) -> [u8; 16] {
        // SAFETY: both members are 16 bytes of plain data; any bit pattern is valid `[u8; 16]`.
        unsafe { self.raw }
    }
    /// A GID from its 16 bytes.
    pub fn from_bytes(raw: [u8; 16]) -> ibv_gid {
        ibv_gid { raw }
    }
}

impl core::fmt::Debug for ibv_gid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ibv_gid({:02x?})", self.bytes())
    }
}

/// `struct ibv_gid_entry` (`ibv_query_gid_ex`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_gid_entry {
    /// The GID.
    pub gid: ibv_gid,
    /// Its index.
    pub gid_index: u32,
    /// Port.
    pub port_num: u32,
    /// `ibv_gid_type`.
    pub gid_type: u32,
    /// Net device of the GID.
    pub ndev_ifindex: u32,
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device_attr {
    /// Firmware version, NUL-terminated.
    pub fw_ver: [c_char; 64],
    /// Node GUID (network order).
    pub node_guid: u64,
    /// System image GUID (network order).
    pub sys_image_guid: u64,
    /// Largest MR.
    pub max_mr_size: u64,
    /// Supported page sizes.
    pub page_size_cap: u64,
    /// Vendor id.
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Most QPs.
    pub max_qp: c_int,
    /// Most WRs per queue.
    pub max_qp_wr: c_int,
    /// `enum ibv_device_cap_flags`.
    pub device_cap_flags: c_uint,
    /// Most SGEs per WR.
    pub max_sge: c_int,
    /// Most SGEs per RDMA READ WR.
    pub max_sge_rd: c_int,
    /// Most CQs.
    pub max_cq: c_int,
    /// Most CQEs per CQ.
    pub max_cqe: c_int,
    /// Most MRs.
    pub max_mr: c_int,
    /// Most PDs.
    pub max_pd: c_int,
    /// Responder READ/atomic resources per QP.
    pub max_qp_rd_atom: c_int,
    /// Per EE context.
    pub max_ee_rd_atom: c_int,
    /// Per device.
    pub max_res_rd_atom: c_int,
    /// Requester READ/atomic depth per QP.
    pub max_qp_init_rd_atom: c_int,
    /// Per EE context.
    pub max_ee_init_rd_atom: c_int,
    /// `enum ibv_atomic_cap`.
    pub atomic_cap: ibv_atomic_cap,
    /// Most EE contexts.
    pub max_ee: c_int,
    /// Most RDDs.
    pub max_rdd: c_int,
    /// Most MWs.
    pub max_mw: c_int,
    /// Most raw IPv6 QPs.
    pub max_raw_ipv6_qp: c_int,
    /// Most raw Ethertype QPs.
    pub max_raw_ethy_qp: c_int,
    /// Most multicast groups.
    pub max_mcast_grp: c_int,
    /// Most QPs per multicast group.
    pub max_mcast_qp_attach: c_int,
    /// Most QP attachments in total.
    pub max_total_mcast_qp_attach: c_int,
    /// Most AHs.
    pub max_ah: c_int,
    /// Most FMRs.
    pub max_fmr: c_int,
    /// Most maps per FMR.
    pub max_map_per_fmr: c_int,
    /// Most SRQs.
    pub max_srq: c_int,
    /// Most WRs per SRQ.
    pub max_srq_wr: c_int,
    /// Most SGEs per SRQ WR.
    pub max_srq_sge: c_int,
    /// P_Key table length.
    pub max_pkeys: u16,
    /// Local CA ACK delay.
    pub local_ca_ack_delay: u8,
    /// Physical ports.
    pub phys_port_cnt: u8,
}

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_query_device_ex_input {
    /// Compatibility mask.
    pub comp_mask: u32,
}

/// `per_transport_caps` of `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_odp_caps_per_transport {
    /// RC.
    pub rc_odp_caps: u32,
    /// UC.
    pub uc_odp_caps: u32,
    /// UD.
    pub ud_odp_caps: u32,
}

/// `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_odp_caps {
    /// General ODP capabilities.
    pub general_caps: u64,
    /// Per transport.
    pub per_transport_caps: ibv_odp_caps_per_transport,
}

/// `struct ibv_tso_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_tso_caps {
    /// Largest TSO.
    pub max_tso: u32,
    /// QP types.
    pub supported_qpts: u32,
}

/// `struct ibv_rss_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_rss_caps {
    /// QP types.
    pub supported_qpts: u32,
    /// Indirection tables.
    pub max_rwq_indirection_tables: u32,
    /// Table size.
    pub max_rwq_indirection_table_size: u32,
    /// `enum ibv_rx_hash_fields`.
    pub rx_hash_fields_mask: u64,
    /// `enum ibv_rx_hash_function_flags`.
    pub rx_hash_function: u8,
}

/// `struct ibv_packet_pacing_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_packet_pacing_caps {
    /// kbps.
    pub qp_rate_limit_min: u32,
    /// kbps.
    pub qp_rate_limit_max: u32,
    /// QP types.
    pub supported_qpts: u32,
}

/// `struct ibv_tm_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_tm_caps {
    /// Largest rendezvous header.
    pub max_rndv_hdr_size: u32,
    /// Tags per SRQ.
    pub max_num_tags: u32,
    /// `enum ibv_tm_cap_flags`.
    pub flags: u32,
    /// Outstanding list operations.
    pub max_ops: u32,
    /// SGEs per tagged buffer.
    pub max_sge: u32,
}

/// `struct ibv_cq_moderation_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_cq_moderation_caps {
    /// Completions.
    pub max_cq_count: u16,
    /// Microseconds.
    pub max_cq_period: u16,
}

/// `struct ibv_pci_atomic_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_pci_atomic_caps {
    /// Sizes (`enum ibv_pci_atomic_op_size`).
    pub fetch_add: u16,
    /// Sizes.
    pub swap: u16,
    /// Sizes.
    pub compare_swap: u16,
}

/// `struct ibv_device_attr_ex` (`ibv_query_device_ex`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device_attr_ex {
    /// The classic attributes.
    pub orig_attr: ibv_device_attr,
    /// Compatibility mask.
    pub comp_mask: u32,
    /// On-demand paging.
    pub odp_caps: ibv_odp_caps,
    /// Timestamp mask.
    pub completion_timestamp_mask: u64,
    /// kHz.
    pub hca_core_clock: u64,
    /// Extended capability flags.
    pub device_cap_flags_ex: u64,
    /// TSO.
    pub tso_caps: ibv_tso_caps,
    /// RSS.
    pub rss_caps: ibv_rss_caps,
    /// Receive WQs.
    pub max_wq_type_rq: u32,
    /// Pacing.
    pub packet_pacing_caps: ibv_packet_pacing_caps,
    /// `enum ibv_raw_packet_caps`.
    pub raw_packet_caps: u32,
    /// Tag matching.
    pub tm_caps: ibv_tm_caps,
    /// CQ moderation.
    pub cq_mod_caps: ibv_cq_moderation_caps,
    /// Device memory.
    pub max_dm_size: u64,
    /// PCI atomics.
    pub pci_atomic_caps: ibv_pci_atomic_caps,
    /// XRC ODP.
    pub xrc_odp_caps: u32,
    /// Ports beyond 255.
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_port_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_port_attr {
    /// `enum ibv_port_state`.
    pub state: ibv_port_state,
    /// `enum ibv_mtu`.
    pub max_mtu: ibv_mtu,
    /// `enum ibv_mtu`.
    pub active_mtu: ibv_mtu,
    /// GID table length.
    pub gid_tbl_len: c_int,
    /// `enum ibv_port_cap_flags`.
    pub port_cap_flags: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// Bad P_Key counter.
    pub bad_pkey_cntr: u32,
    /// Q_Key violation counter.
    pub qkey_viol_cntr: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// SM LID.
    pub sm_lid: u16,
    /// LMC.
    pub lmc: u8,
    /// VLs.
    pub max_vl_num: u8,
    /// SM SL.
    pub sm_sl: u8,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// Init type reply.
    pub init_type_reply: u8,
    /// Width.
    pub active_width: u8,
    /// Speed.
    pub active_speed: u8,
    /// Physical state.
    pub phys_state: u8,
    /// `IBV_LINK_LAYER_*`.
    pub link_layer: u8,
    /// Flags.
    pub flags: u8,
    /// `enum ibv_port_cap_flags2`.
    pub port_cap_flags2: u16,
}

/// The `element` union of `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    /// CQ events.
    pub cq: *mut ibv_cq,
    /// QP events.
    pub qp: *mut ibv_qp,
    /// SRQ events.
    pub srq: *mut ibv_srq,
    /// WQ events.
    pub wq: *mut ibv_wq,
    /// Port events.
    pub port_num: c_int,
}

/// `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    /// What the event is about; which member is valid follows from `event_type`.
    pub element: ibv_async_event_element,
    /// `enum ibv_event_type`.
    pub event_type: ibv_event_type,
}

impl core::fmt::Debug for ibv_async_event {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ibv_async_event").field("event_type", &self.event_type).finish_non_exhaustive()
    }
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_wc {
    /// The work request's id.
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: ibv_wc_status,
    /// `enum ibv_wc_opcode`.
    pub opcode: ibv_wc_opcode,
    /// Vendor error syndrome.
    pub vendor_err: u32,
    /// Bytes transferred.
    pub byte_len: u32,
    /// The header's anonymous union `{ __be32 imm_data; uint32_t invalidated_rkey; }`:
    /// with `IBV_WC_WITH_IMM` the immediate data in network order, with `IBV_WC_WITH_INV`
    /// the invalidated R_Key (host order).
    pub imm_data: u32,
    /// Local QP.
    pub qp_num: u32,
    /// Source QP.
    pub src_qp: u32,
    /// `enum ibv_wc_flags`.
    pub wc_flags: c_uint,
    /// P_Key index.
    pub pkey_index: u16,
    /// Source LID.
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// DLID path bits.
    pub dlid_path_bits: u8,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_mw_bind_info {
    /// The MR.
    pub mr: *mut ibv_mr,
    /// Start.
    pub addr: u64,
    /// Length.
    pub length: u64,
    /// `ibv_access_flags`.
    pub mw_access_flags: c_uint,
}

/// `struct ibv_pd`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_pd {
    /// The device.
    pub context: *mut ibv_context,
    /// Kernel handle.
    pub handle: u32,
}

/// `struct ibv_dm`: device memory, reached by the provider's copy functions.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_dm {
    /// The device.
    pub context: *mut ibv_context,
    /// `ibv_memcpy_to_dm`.
    pub memcpy_to_dm: Option<unsafe extern "C" fn(*mut ibv_dm, u64, *const c_void, size_t) -> c_int>,
    /// `ibv_memcpy_from_dm`.
    pub memcpy_from_dm: Option<unsafe extern "C" fn(*mut c_void, *mut ibv_dm, u64, size_t) -> c_int>,
    /// Compatibility mask.
    pub comp_mask: u32,
    /// Kernel handle.
    pub handle: u32,
}

/// `struct ibv_td_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_td_init_attr {
    /// Compatibility mask.
    pub comp_mask: u32,
}

/// `struct ibv_td`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_td {
    /// The device.
    pub context: *mut ibv_context,
}

/// `IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS`.
pub const IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS: u32 = 1 << 0;
/// `IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT`.
pub const IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT: u32 = 1 << 1;

/// `struct ibv_parent_domain_init_attr`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_parent_domain_init_attr {
    /// The protection domain (never NULL).
    pub pd: *mut ibv_pd,
    /// A thread domain, or NULL.
    pub td: *mut ibv_td,
    /// `enum ibv_parent_domain_init_attr_mask`.
    pub comp_mask: u32,
    /// Custom allocator of the provider's buffers.
    pub alloc: Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, size_t, size_t, u64) -> *mut c_void>,
    /// Its free.
    pub free: Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64)>,
    /// Passed to both.
    pub pd_context: *mut c_void,
}

/// `struct ibv_xrcd_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_xrcd_init_attr {
    /// Compatibility mask.
    pub comp_mask: u32,
    /// File.
    pub fd: c_int,
    /// Open flags.
    pub oflags: c_int,
}

/// `struct ibv_xrcd`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_xrcd {
    /// The device.
    pub context: *mut ibv_context,
}

/// `struct ibv_mr`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_mr {
    /// The device.
    pub context: *mut ibv_context,
    /// The PD.
    pub pd: *mut ibv_pd,
    /// First byte.
    pub addr: *mut c_void,
    /// Bytes.
    pub length: size_t,
    /// Kernel handle.
    pub handle: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// `struct ibv_mw`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_mw {
    /// The device.
    pub context: *mut ibv_context,
    /// The PD.
    pub pd: *mut ibv_pd,
    /// Remote key.
    pub rkey: u32,
    /// Kernel handle.
    pub handle: u32,
    /// `enum ibv_mw_type`.
    pub type_: ibv_mw_type,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_global_route {
    /// Destination GID.
    pub dgid: ibv_gid,
    /// Flow label.
    pub flow_label: u32,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// `struct ibv_grh` (the 40 bytes at the head of a UD receive buffer).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_grh {
    /// Version, traffic class, flow label (network order).
    pub version_tclass_flow: u32,
    /// Payload length (network order).
    pub paylen: u16,
    /// Next header.
    pub next_hdr: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source GID.
    pub sgid: ibv_gid,
    /// Destination GID.
    pub dgid: ibv_gid,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_ah_attr {
    /// GRH fields (RoCE: always, with `is_global = 1`).
    pub grh: ibv_global_route,
    /// Destination LID (0 on RoCE).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// `enum ibv_rate`.
    pub static_rate: u8,
    /// A GRH is used.
    pub is_global: u8,
    /// Port.
    pub port_num: u8,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_srq_attr {
    /// Receive WRs.
    pub max_wr: u32,
    /// SGEs per WR.
    pub max_sge: u32,
    /// Limit event threshold.
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_srq_init_attr {
    /// Returned in events.
    pub srq_context: *mut c_void,
    /// Sizes.
    pub attr: ibv_srq_attr,
}

/// `struct ibv_tm_cap`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_tm_cap {
    /// Tags.
    pub max_num_tags: u32,
    /// Outstanding operations.
    pub max_ops: u32,
}

/// `struct ibv_srq_init_attr_ex`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_srq_init_attr_ex {
    /// Returned in events.
    pub srq_context: *mut c_void,
    /// Sizes.
    pub attr: ibv_srq_attr,
    /// `enum ibv_srq_init_attr_mask`.
    pub comp_mask: u32,
    /// `enum ibv_srq_type`.
    pub srq_type: ibv_srq_type,
    /// The PD.
    pub pd: *mut ibv_pd,
    /// XRC domain.
    pub xrcd: *mut ibv_xrcd,
    /// CQ (XRC).
    pub cq: *mut ibv_cq,
    /// Tag matching.
    pub tm_cap: ibv_tm_cap,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_qp_cap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline bytes.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_init_attr {
    /// Returned in events.
    pub qp_context: *mut c_void,
    /// Send CQ.
    pub send_cq: *mut ibv_cq,
    /// Receive CQ.
    pub recv_cq: *mut ibv_cq,
    /// SRQ or null.
    pub srq: *mut ibv_srq,
    /// Sizes (updated with what was granted).
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: ibv_qp_type,
    /// Signal every send WR.
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_rx_hash_conf {
    /// `enum ibv_rx_hash_function_flags`.
    pub rx_hash_function: u8,
    /// Key length.
    pub rx_hash_key_len: u8,
    /// Key.
    pub rx_hash_key: *mut u8,
    /// `enum ibv_rx_hash_fields`.
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_init_attr_ex {
    /// Returned in events.
    pub qp_context: *mut c_void,
    /// Send CQ.
    pub send_cq: *mut ibv_cq,
    /// Receive CQ.
    pub recv_cq: *mut ibv_cq,
    /// SRQ or null.
    pub srq: *mut ibv_srq,
    /// Sizes.
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: ibv_qp_type,
    /// Signal every send WR.
    pub sq_sig_all: c_int,
    /// `enum ibv_qp_init_attr_mask`.
    pub comp_mask: u32,
    /// The PD (`IBV_QP_INIT_ATTR_PD`).
    pub pd: *mut ibv_pd,
    /// XRC domain.
    pub xrcd: *mut ibv_xrcd,
    /// `enum ibv_qp_create_flags`.
    pub create_flags: u32,
    /// TSO header.
    pub max_tso_header: u16,
    /// RSS indirection table.
    pub rwq_ind_tbl: *mut ibv_rwq_ind_table,
    /// RSS hash.
    pub rx_hash_conf: ibv_rx_hash_conf,
    /// Source QPN.
    pub source_qpn: u32,
    /// `enum ibv_qp_create_send_ops_flags`.
    pub send_ops_flags: u64,
}

/// `struct ibv_qp_open_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_open_attr {
    /// `enum ibv_qp_open_attr_mask`.
    pub comp_mask: u32,
    /// QPN.
    pub qp_num: u32,
    /// XRC domain.
    pub xrcd: *mut ibv_xrcd,
    /// Returned in events.
    pub qp_context: *mut c_void,
    /// `enum ibv_qp_type`.
    pub qp_type: ibv_qp_type,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_attr {
    /// `enum ibv_qp_state`.
    pub qp_state: ibv_qp_state,
    /// `enum ibv_qp_state`.
    pub cur_qp_state: ibv_qp_state,
    /// `enum ibv_mtu`.
    pub path_mtu: ibv_mtu,
    /// `enum ibv_mig_state`.
    pub path_mig_state: ibv_mig_state,
    /// Q_Key.
    pub qkey: u32,
    /// Expected receive PSN.
    pub rq_psn: u32,
    /// First send PSN.
    pub sq_psn: u32,
    /// Remote QPN.
    pub dest_qp_num: u32,
    /// `enum ibv_access_flags`.
    pub qp_access_flags: c_uint,
    /// Sizes.
    pub cap: ibv_qp_cap,
    /// Primary path.
    pub ah_attr: ibv_ah_attr,
    /// Alternate path.
    pub alt_ah_attr: ibv_ah_attr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// SQD event.
    pub en_sqd_async_notify: u8,
    /// Draining.
    pub sq_draining: u8,
    /// Requester READ/atomic depth.
    pub max_rd_atomic: u8,
    /// Responder READ/atomic resources.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code.
    pub min_rnr_timer: u8,
    /// Port.
    pub port_num: u8,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// Alternate port.
    pub alt_port_num: u8,
    /// Alternate timeout.
    pub alt_timeout: u8,
    /// kbps.
    pub rate_limit: u32,
}

/// `struct ibv_qp_rate_limit_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_qp_rate_limit_attr {
    /// kbps.
    pub rate_limit: u32,
    /// Bytes.
    pub max_burst_sz: u32,
    /// Bytes.
    pub typical_pkt_sz: u16,
    /// Compatibility mask.
    pub comp_mask: u32,
}

/// `struct ibv_data_buf`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_data_buf {
    /// Start.
    pub addr: *mut c_void,
    /// Bytes.
    pub length: size_t,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_sge {
    /// Address.
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

/// `wr.rdma` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_send_wr_rdma {
    /// Remote address.
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// `wr.atomic` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_send_wr_atomic {
    /// Remote address (8-byte aligned).
    pub remote_addr: u64,
    /// Compare (CMP_AND_SWP) or addend (FETCH_AND_ADD).
    pub compare_add: u64,
    /// Swap value.
    pub swap: u64,
    /// Remote key.
    pub rkey: u32,
}

/// `wr.ud` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_ud {
    /// Address handle.
    pub ah: *mut ibv_ah,
    /// Remote QPN.
    pub remote_qpn: u32,
    /// Remote Q_Key.
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    /// RDMA WRITE / READ.
    pub rdma: ibv_send_wr_rdma,
    /// Atomics.
    pub atomic: ibv_send_wr_atomic,
    /// UD.
    pub ud: ibv_send_wr_ud,
}

/// `qp_type.xrc` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_send_wr_xrc {
    /// Remote SRQ number.
    pub remote_srqn: u32,
}

/// The `qp_type` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_qp_type {
    /// XRC.
    pub xrc: ibv_send_wr_xrc,
}

/// `bind_mw` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_bind_mw {
    /// The window.
    pub mw: *mut ibv_mw,
    /// Its new key.
    pub rkey: u32,
    /// What to bind.
    pub bind_info: ibv_mw_bind_info,
}

/// `tso` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_tso {
    /// Header.
    pub hdr: *mut c_void,
    /// Header size.
    pub hdr_sz: u16,
    /// MSS.
    pub mss: u16,
}

/// The last, anonymous union of `struct ibv_send_wr` (`bind_mw` / `tso`).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_bind_mw_tso {
    /// MW bind.
    pub bind_mw: ibv_send_wr_bind_mw,
    /// TSO.
    pub tso: ibv_send_wr_tso,
}

/// `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Next in the list, or null.
    pub next: *mut ibv_send_wr,
    /// Gather list.
    pub sg_list: *mut ibv_sge,
    /// Entries in `sg_list`.
    pub num_sge: c_int,
    /// `enum ibv_wr_opcode`.
    pub opcode: ibv_wr_opcode,
    /// `enum ibv_send_flags`.
    pub send_flags: c_uint,
    /// The header's anonymous union `{ __be32 imm_data; uint32_t invalidate_rkey; }`:
    /// immediate data (network order) for `*_WITH_IMM`, the R_Key to invalidate for
    /// `*_INV`.
    pub imm_data: u32,
    /// Operation-specific.
    pub wr: ibv_send_wr_wr,
    /// QP-type-specific.
    pub qp_type: ibv_send_wr_qp_type,
    /// The anonymous `bind_mw` / `tso` union.
    pub bind_mw_tso: ibv_send_wr_bind_mw_tso,
}

impl core::fmt::Debug for ibv_send_wr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ibv_send_wr")
            .field("wr_id", &self.wr_id)
            .field("opcode", &self.opcode)
            .field("num_sge", &self.num_sge)
            .field("send_flags", &self.send_flags)
            .finish_non_exhaustive()
    }
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_recv_wr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Next in the list, or null.
    pub next: *mut ibv_recv_wr,
    /// Scatter list.
    pub sg_list: *mut ibv_sge,
    /// Entries in `sg_list`.
    pub num_sge: c_int,
}

/// `struct ibv_mw_bind`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_mw_bind {
    /// Returned in the completion.
    pub wr_id: u64,
    /// `enum ibv_send_flags`.
    pub send_flags: c_uint,
    /// What to bind.
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct ibv_srq {
    /// The device.
    pub context: *mut ibv_context,
    /// Returned in events.
    pub srq_context: *mut c_void,
    /// The PD.
    pub pd: *mut ibv_pd,
    /// Kernel handle.
    pub handle: u32,
    /// Library lock.
    pub mutex: pthread_mutex_t,
    /// Library condition.
    pub cond: pthread_cond_t,
    /// Async events acknowledged.
    pub events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    /// The device.
    pub context: *mut ibv_context,
    /// Returned in events.
    pub qp_context: *mut c_void,
    /// The PD.
    pub pd: *mut ibv_pd,
    /// Send CQ.
    pub send_cq: *mut ibv_cq,
    /// Receive CQ.
    pub recv_cq: *mut ibv_cq,
    /// SRQ or null.
    pub srq: *mut ibv_srq,
    /// Kernel handle.
    pub handle: u32,
    /// QP number.
    pub qp_num: u32,
    /// `enum ibv_qp_state` (as last set through this library).
    pub state: ibv_qp_state,
    /// `enum ibv_qp_type`.
    pub qp_type: ibv_qp_type,
    /// Library lock.
    pub mutex: pthread_mutex_t,
    /// Library condition.
    pub cond: pthread_cond_t,
    /// Async events acknowledged.
    pub events_completed: u32,
}

/// `struct ibv_qp_ex`: the QP with the work-request builder functions
/// (`ibv_qp_to_qp_ex`; the static-inline `ibv_wr_*` call these pointers).
#[repr(C)]
pub struct ibv_qp_ex {
    /// The plain QP.
    pub qp_base: ibv_qp,
    /// Compatibility mask.
    pub comp_mask: u64,
    /// Id of the WR being built.
    pub wr_id: u64,
    /// `enum ibv_send_flags` of the WR being built.
    pub wr_flags: c_uint,
    /// `ibv_wr_atomic_cmp_swp`.
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64)>,
    /// `ibv_wr_atomic_fetch_add`.
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64)>,
    /// `ibv_wr_bind_mw`.
    pub wr_bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_mw, u32, *const ibv_mw_bind_info)>,
    /// `ibv_wr_local_inv`.
    pub wr_local_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    /// `ibv_wr_rdma_read`.
    pub wr_rdma_read: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    /// `ibv_wr_rdma_write`.
    pub wr_rdma_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    /// `ibv_wr_rdma_write_imm` (immediate in network order).
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    /// `ibv_wr_send`.
    pub wr_send: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    /// `ibv_wr_send_imm` (immediate in network order).
    pub wr_send_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    /// `ibv_wr_send_inv`.
    pub wr_send_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    /// `ibv_wr_send_tso`.
    pub wr_send_tso: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, u16, u16)>,
    /// `ibv_wr_set_ud_addr`.
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32)>,
    /// `ibv_wr_set_xrc_srqn`.
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    /// `ibv_wr_set_inline_data`.
    pub wr_set_inline_data: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, size_t)>,
    /// `ibv_wr_set_inline_data_list`.
    pub wr_set_inline_data_list: Option<unsafe extern "C" fn(*mut ibv_qp_ex, size_t, *const ibv_data_buf)>,
    /// `ibv_wr_set_sge`.
    pub wr_set_sge: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    /// `ibv_wr_set_sge_list`.
    pub wr_set_sge_list: Option<unsafe extern "C" fn(*mut ibv_qp_ex, size_t, *const ibv_sge)>,
    /// `ibv_wr_start`.
    pub wr_start: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    /// `ibv_wr_complete`.
    pub wr_complete: Option<unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int>,
    /// `ibv_wr_abort`.
    pub wr_abort: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    /// `ibv_wr_atomic_write` (8 bytes at the pointer).
    pub wr_atomic_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, *const c_void)>,
}

/// `struct ibv_ece`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_ece {
    /// IEEE OUI.
    pub vendor_id: u32,
    /// Provider options.
    pub options: u32,
    /// Compatibility mask.
    pub comp_mask: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_comp_channel {
    /// The device.
    pub context: *mut ibv_context,
    /// Readable when an event is pending.
    pub fd: c_int,
    /// CQs using the channel.
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    /// The device.
    pub context: *mut ibv_context,
    /// Completion channel or null.
    pub channel: *mut ibv_comp_channel,
    /// Returned by `ibv_get_cq_event`.
    pub cq_context: *mut c_void,
    /// Kernel handle.
    pub handle: u32,
    /// Entries.
    pub cqe: c_int,
    /// Library lock.
    pub mutex: pthread_mutex_t,
    /// Library condition.
    pub cond: pthread_cond_t,
    /// Completion events acknowledged.
    pub comp_events_completed: u32,
    /// Async events acknowledged.
    pub async_events_completed: u32,
}

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_poll_cq_attr {
    /// Compatibility mask.
    pub comp_mask: u32,
}

/// `struct ibv_wc_tm_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_wc_tm_info {
    /// Tag.
    pub tag: u64,
    /// Opaque user data.
    pub priv_: u32,
}

/// `struct ibv_cq_ex` (`ibv_create_cq_ex`; the static-inline `ibv_start_poll`, ... call
/// these pointers).
#[repr(C)]
pub struct ibv_cq_ex {
    /// The device.
    pub context: *mut ibv_context,
    /// Completion channel or null.
    pub channel: *mut ibv_comp_channel,
    /// Returned by `ibv_get_cq_event`.
    pub cq_context: *mut c_void,
    /// Kernel handle.
    pub handle: u32,
    /// Entries.
    pub cqe: c_int,
    /// Library lock.
    pub mutex: pthread_mutex_t,
    /// Library condition.
    pub cond: pthread_cond_t,
    /// Completion events acknowledged.
    pub comp_events_completed: u32,
    /// Async events acknowledged.
    pub async_events_completed: u32,
    /// Compatibility mask.
    pub comp_mask: u32,
    /// Status of the current completion.
    pub status: ibv_wc_status,
    /// Id of the current completion.
    pub wr_id: u64,
    /// `ibv_start_poll`.
    pub start_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int>,
    /// `ibv_next_poll`.
    pub next_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int>,
    /// `ibv_end_poll`.
    pub end_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex)>,
    /// `ibv_wc_read_opcode`.
    pub read_opcode: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> ibv_wc_opcode>,
    /// `ibv_wc_read_vendor_err`.
    pub read_vendor_err: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    /// `ibv_wc_read_byte_len`.
    pub read_byte_len: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    /// `ibv_wc_read_imm_data` (network order).
    pub read_imm_data: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    /// `ibv_wc_read_qp_num`.
    pub read_qp_num: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    /// `ibv_wc_read_src_qp`.
    pub read_src_qp: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    /// `ibv_wc_read_wc_flags`.
    pub read_wc_flags: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_uint>,
    /// `ibv_wc_read_slid`.
    pub read_slid: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    /// `ibv_wc_read_sl`.
    pub read_sl: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u8>,
    /// `ibv_wc_read_dlid_path_bits`.
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u8>,
    /// `ibv_wc_read_completion_ts`.
    pub read_completion_ts: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u64>,
    /// `ibv_wc_read_cvlan`.
    pub read_cvlan: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u16>,
    /// `ibv_wc_read_flow_tag`.
    pub read_flow_tag: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    /// `ibv_wc_read_tm_info`.
    pub read_tm_info: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_wc_tm_info)>,
    /// `ibv_wc_read_completion_wallclock_ns`.
    pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u64>,
}

/// `struct ibv_moderate_cq`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_moderate_cq {
    /// Completions.
    pub cq_count: u16,
    /// Microseconds.
    pub cq_period: u16,
}

/// `struct ibv_modify_cq_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_modify_cq_attr {
    /// `enum ibv_cq_attr_mask`.
    pub attr_mask: u32,
    /// Moderation.
    pub moderate: ibv_moderate_cq,
}

/// `struct ibv_ah`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_ah {
    /// The device.
    pub context: *mut ibv_context,
    /// The PD.
    pub pd: *mut ibv_pd,
    /// Kernel handle.
    pub handle: u32,
}

/// `struct _ibv_device_ops` ("obsolete, never used, do not touch").
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct _ibv_device_ops {
    /// Unused.
    pub _dummy1: Option<unsafe extern "C" fn(*mut ibv_device, c_int) -> *mut ibv_context>,
    /// Unused.
    pub _dummy2: Option<unsafe extern "C" fn(*mut ibv_context)>,
}

/// `struct ibv_device`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_device {
    /// Obsolete.
    pub _ops: _ibv_device_ops,
    /// `enum ibv_node_type`.
    pub node_type: ibv_node_type,
    /// `enum ibv_transport_type`.
    pub transport_type: ibv_transport_type,
    /// Kernel device name (`rxe0`, `mlx5_0`).
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    /// uverbs device name (`uverbs0`).
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    /// sysfs path of the uverbs device.
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    /// sysfs path of the IB device.
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// A `void *(*)(void)` slot of `ibv_context_ops` kept for ABI compatibility.
pub type compat_fn = Option<unsafe extern "C" fn() -> *mut c_void>;

/// `struct ibv_context_ops`: the provider's data-path functions. rdma-core's static-inline
/// `ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`, `ibv_req_notify_cq` (and
/// `ibv_post_srq_recv`) call `context->ops.<fn>` directly.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_context_ops {
    /// Compat.
    pub _compat_query_device: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int>,
    /// Compat.
    pub _compat_query_port: Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut _compat_ibv_port_attr) -> c_int>,
    /// Compat.
    pub _compat_alloc_pd: compat_fn,
    /// Compat.
    pub _compat_dealloc_pd: compat_fn,
    /// Compat.
    pub _compat_reg_mr: compat_fn,
    /// Compat.
    pub _compat_rereg_mr: compat_fn,
    /// Compat.
    pub _compat_dereg_mr: compat_fn,
    /// `ibv_alloc_mw`.
    pub alloc_mw: Option<unsafe extern "C" fn(*mut ibv_pd, ibv_mw_type) -> *mut ibv_mw>,
    /// `ibv_bind_mw`.
    pub bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int>,
    /// `ibv_dealloc_mw`.
    pub dealloc_mw: Option<unsafe extern "C" fn(*mut ibv_mw) -> c_int>,
    /// Compat.
    pub _compat_create_cq: compat_fn,
    /// `ibv_poll_cq`: completions written, or negative on error.
    pub poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
    /// `ibv_req_notify_cq`.
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    /// Compat.
    pub _compat_cq_event: compat_fn,
    /// Compat.
    pub _compat_resize_cq: compat_fn,
    /// Compat.
    pub _compat_destroy_cq: compat_fn,
    /// Compat.
    pub _compat_create_srq: compat_fn,
    /// Compat.
    pub _compat_modify_srq: compat_fn,
    /// Compat.
    pub _compat_query_srq: compat_fn,
    /// Compat.
    pub _compat_destroy_srq: compat_fn,
    /// `ibv_post_srq_recv`.
    pub post_srq_recv: Option<unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    /// Compat.
    pub _compat_create_qp: compat_fn,
    /// Compat.
    pub _compat_query_qp: compat_fn,
    /// Compat.
    pub _compat_modify_qp: compat_fn,
    /// Compat.
    pub _compat_destroy_qp: compat_fn,
    /// `ibv_post_send`.
    pub post_send: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int>,
    /// `ibv_post_recv`.
    pub post_recv: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    /// Compat.
    pub _compat_create_ah: compat_fn,
    /// Compat.
    pub _compat_destroy_ah: compat_fn,
    /// Compat.
    pub _compat_attach_mcast: compat_fn,
    /// Compat.
    pub _compat_detach_mcast: compat_fn,
    /// Compat.
    pub _compat_async_event: compat_fn,
}

/// `struct ibv_context`. A real one is the last field of a [`verbs_context`]; its
/// `abi_compat` is then [`VERBS_ABI_IS_EXTENDED`].
#[repr(C)]
pub struct ibv_context {
    /// The device.
    pub device: *mut ibv_device,
    /// Data-path functions.
    pub ops: ibv_context_ops,
    /// uverbs command fd.
    pub cmd_fd: c_int,
    /// Readable when an async event is pending.
    pub async_fd: c_int,
    /// Completion vectors.
    pub num_comp_vectors: c_int,
    /// Library lock.
    pub mutex: pthread_mutex_t,
    /// `VERBS_ABI_IS_EXTENDED` for a `verbs_context`.
    pub abi_compat: *mut c_void,
}

/// `__VERBS_ABI_IS_EXTENDED`: the `abi_compat` value of a context inside a `verbs_context`.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_cq_init_attr_ex {
    /// Entries.
    pub cqe: u32,
    /// Returned by `ibv_get_cq_event`.
    pub cq_context: *mut c_void,
    /// Completion channel or null.
    pub channel: *mut ibv_comp_channel,
    /// Completion vector.
    pub comp_vector: u32,
    /// `enum ibv_create_cq_wc_flags`.
    pub wc_flags: u64,
    /// `enum ibv_cq_init_attr_mask`.
    pub comp_mask: u32,
    /// `enum ibv_create_cq_attr_flags`.
    pub flags: u32,
    /// Parent domain.
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_values_ex`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_values_ex {
    /// `enum ibv_values_mask`.
    pub comp_mask: u32,
    /// Raw clock.
    pub raw_clock: timespec,
}

/// `struct ibv_alloc_dm_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_alloc_dm_attr {
    /// Bytes.
    pub length: size_t,
    /// log2 alignment.
    pub log_align_req: u32,
    /// Compatibility mask.
    pub comp_mask: u32,
}

/// `enum ibv_advise_mr_advice`.
pub type ibv_advise_mr_advice = c_uint;
/// `IBV_ADVISE_MR_ADVICE_PREFETCH`.
pub const IBV_ADVISE_MR_ADVICE_PREFETCH: ibv_advise_mr_advice = 0;
/// `IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE`.
pub const IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE: ibv_advise_mr_advice = 1;
/// `IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT`.
pub const IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT: ibv_advise_mr_advice = 2;
/// `IBV_ADVISE_MR_FLAG_FLUSH`.
pub const IBV_ADVISE_MR_FLAG_FLUSH: u32 = 1 << 0;
/// `IBV_ODP_SUPPORT` (`ibv_odp_caps::general_caps`).
pub const IBV_ODP_SUPPORT: u64 = 1 << 0;
/// `IBV_ODP_SUPPORT_IMPLICIT`.
pub const IBV_ODP_SUPPORT_IMPLICIT: u64 = 1 << 1;
/// `IBV_ODP_SUPPORT_SEND` (`per_transport_caps`).
pub const IBV_ODP_SUPPORT_SEND: u32 = 1 << 0;
/// `IBV_ODP_SUPPORT_RECV`.
pub const IBV_ODP_SUPPORT_RECV: u32 = 1 << 1;
/// `IBV_ODP_SUPPORT_WRITE`.
pub const IBV_ODP_SUPPORT_WRITE: u32 = 1 << 2;
/// `IBV_ODP_SUPPORT_READ`.
pub const IBV_ODP_SUPPORT_READ: u32 = 1 << 3;
/// `IBV_ODP_SUPPORT_ATOMIC`.
pub const IBV_ODP_SUPPORT_ATOMIC: u32 = 1 << 4;
/// `IBV_ODP_SUPPORT_SRQ_RECV`.
pub const IBV_ODP_SUPPORT_SRQ_RECV: u32 = 1 << 5;

/// `struct verbs_context`: the extended context that a provider allocates, with the
/// `ibv_context` programs see as its last field. New verbs "grow up" (are added at the
/// top), so a field's offset from the end never changes; `sz` says how much of the struct
/// a provider filled (see [`verbs_context::has_op`]).
#[repr(C)]
pub struct verbs_context {
    /// `ibv_query_port` with the full `ibv_port_attr` (the header's inline uses it).
    pub query_port: Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, size_t) -> c_int>,
    /// `ibv_advise_mr`.
    pub advise_mr: Option<unsafe extern "C" fn(*mut ibv_pd, ibv_advise_mr_advice, u32, *mut ibv_sge, u32) -> c_int>,
    /// `ibv_alloc_null_mr`.
    pub alloc_null_mr: Option<unsafe extern "C" fn(*mut ibv_pd) -> *mut ibv_mr>,
    /// `ibv_read_counters`.
    pub read_counters: Option<unsafe extern "C" fn(*mut ibv_counters, *mut u64, u32, u32) -> c_int>,
    /// `ibv_attach_counters_point_flow`.
    pub attach_counters_point_flow:
        Option<unsafe extern "C" fn(*mut ibv_counters, *mut ibv_counter_attach_attr, *mut ibv_flow) -> c_int>,
    /// `ibv_create_counters`.
    pub create_counters:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_counters_init_attr) -> *mut ibv_counters>,
    /// `ibv_destroy_counters`.
    pub destroy_counters: Option<unsafe extern "C" fn(*mut ibv_counters) -> c_int>,
    /// `ibv_reg_dm_mr`.
    pub reg_dm_mr: Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_dm, u64, size_t, c_uint) -> *mut ibv_mr>,
    /// `ibv_alloc_dm`.
    pub alloc_dm: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_alloc_dm_attr) -> *mut ibv_dm>,
    /// `ibv_free_dm`.
    pub free_dm: Option<unsafe extern "C" fn(*mut ibv_dm) -> c_int>,
    /// `ibv_modify_flow_action_esp`.
    pub modify_flow_action_esp:
        Option<unsafe extern "C" fn(*mut ibv_flow_action, *mut ibv_flow_action_esp_attr) -> c_int>,
    /// `ibv_destroy_flow_action`.
    pub destroy_flow_action: Option<unsafe extern "C" fn(*mut ibv_flow_action) -> c_int>,
    /// `ibv_create_flow_action_esp`.
    pub create_flow_action_esp:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_flow_action_esp_attr) -> *mut ibv_flow_action>,
    /// `ibv_modify_qp_rate_limit`.
    pub modify_qp_rate_limit: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_rate_limit_attr) -> c_int>,
    /// `ibv_alloc_parent_domain`.
    pub alloc_parent_domain:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd>,
    /// `ibv_dealloc_td`.
    pub dealloc_td: Option<unsafe extern "C" fn(*mut ibv_td) -> c_int>,
    /// `ibv_alloc_td`.
    pub alloc_td: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_td_init_attr) -> *mut ibv_td>,
    /// `ibv_modify_cq`.
    pub modify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, *mut ibv_modify_cq_attr) -> c_int>,
    /// `ibv_post_srq_ops`.
    pub post_srq_ops: Option<unsafe extern "C" fn(*mut ibv_srq, *mut ibv_ops_wr, *mut *mut ibv_ops_wr) -> c_int>,
    /// `ibv_destroy_rwq_ind_table`.
    pub destroy_rwq_ind_table: Option<unsafe extern "C" fn(*mut ibv_rwq_ind_table) -> c_int>,
    /// `ibv_create_rwq_ind_table`.
    pub create_rwq_ind_table:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_rwq_ind_table_init_attr) -> *mut ibv_rwq_ind_table>,
    /// `ibv_destroy_wq`.
    pub destroy_wq: Option<unsafe extern "C" fn(*mut ibv_wq) -> c_int>,
    /// `ibv_modify_wq`.
    pub modify_wq: Option<unsafe extern "C" fn(*mut ibv_wq, *mut ibv_wq_attr) -> c_int>,
    /// `ibv_create_wq`.
    pub create_wq: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_wq_init_attr) -> *mut ibv_wq>,
    /// `ibv_query_rt_values_ex`.
    pub query_rt_values: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_values_ex) -> c_int>,
    /// `ibv_create_cq_ex`.
    pub create_cq_ex: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex>,
    /// libibverbs-private data.
    pub priv_: *mut verbs_ex_private,
    /// `ibv_query_device_ex`.
    pub query_device_ex: Option<
        unsafe extern "C" fn(
            *mut ibv_context,
            *const ibv_query_device_ex_input,
            *mut ibv_device_attr_ex,
            size_t,
        ) -> c_int,
    >,
    /// `ibv_destroy_flow`.
    pub ibv_destroy_flow: Option<unsafe extern "C" fn(*mut ibv_flow) -> c_int>,
    /// ABI placeholder.
    pub ABI_placeholder2: Option<unsafe extern "C" fn()>,
    /// `ibv_create_flow`.
    pub ibv_create_flow: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_flow_attr) -> *mut ibv_flow>,
    /// ABI placeholder.
    pub ABI_placeholder1: Option<unsafe extern "C" fn()>,
    /// `ibv_open_qp`.
    pub open_qp: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_open_attr) -> *mut ibv_qp>,
    /// `ibv_create_qp_ex`.
    pub create_qp_ex: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp>,
    /// `ibv_get_srq_num`.
    pub get_srq_num: Option<unsafe extern "C" fn(*mut ibv_srq, *mut u32) -> c_int>,
    /// `ibv_create_srq_ex`.
    pub create_srq_ex: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq>,
    /// `ibv_open_xrcd`.
    pub open_xrcd: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd>,
    /// `ibv_close_xrcd`.
    pub close_xrcd: Option<unsafe extern "C" fn(*mut ibv_xrcd) -> c_int>,
    /// ABI placeholder.
    pub _ABI_placeholder3: u64,
    /// Bytes of this struct the provider filled, counted back from the end (must be
    /// immediately before `context`).
    pub sz: size_t,
    /// The context programs see (must be last).
    pub context: ibv_context,
}

impl verbs_context {
    /// `verbs_get_ctx`: the extended context around `ctx`, or null when `ctx` is not one
    /// (`abi_compat` is not [`VERBS_ABI_IS_EXTENDED`]).
    ///
    /// # Safety
    /// `ctx` must point to a live `ibv_context` returned by `ibv_open_device`.
    pub unsafe fn from_context(ctx: *mut ibv_context) -> *mut verbs_context {
        // SAFETY: the caller gives a live context; reading its `abi_compat` is in bounds.
        if unsafe { (*ctx).abi_compat } != VERBS_ABI_IS_EXTENDED {
            return core::ptr::null_mut();
        }
        let off = core::mem::offset_of!(verbs_context, context);
        // SAFETY: an extended context is the last field of a `verbs_context`, so stepping
        // back by that field's offset stays inside the provider's allocation.
        unsafe { ctx.cast::<u8>().sub(off).cast::<verbs_context>() }
    }

    /// `verbs_get_ctx_op`'s size check: true when the provider's struct is large enough to
    /// hold the field at `field_offset` (`offset_of!(verbs_context, op)`). The caller must
    /// still check the pointer for `None`.
    pub fn has_op(&self, field_offset: usize) -> bool {
        self.sz >= core::mem::size_of::<verbs_context>() - field_offset
    }
}

zeroed_default!(
    ibv_device_attr,
    ibv_device_attr_ex,
    ibv_gid_entry,
    ibv_async_event,
    ibv_global_route,
    ibv_grh,
    ibv_ah_attr,
    ibv_srq_init_attr,
    ibv_srq_init_attr_ex,
    ibv_qp_init_attr,
    ibv_qp_init_attr_ex,
    ibv_qp_open_attr,
    ibv_qp_attr,
    ibv_send_wr,
    ibv_recv_wr,
    ibv_cq_init_attr_ex,
    ibv_mw_bind_info,
);
