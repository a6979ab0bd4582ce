//! Every struct of `rnic_verbs_sys::types` against the real `<infiniband/verbs.h>`: size,
//! alignment and the offset of every field, plus the enum and flag values, as a C program
//! compiled with the system `cc` prints them. The header comes with rdma-core's
//! development package (`apt-get install libibverbs-dev`; `.ci/run` installs it). Without
//! it the test fails when `CI` is set and is skipped (with the reason printed) otherwise.
//!
//! Field names: C's, with the anonymous unions reached through the Rust union's name
//! (`bind_mw.rkey` in C is `bind_mw_tso.bind_mw.rkey` here) and the two-`u32` anonymous
//! unions as one field (`invalidated_rkey` in C is at `imm_data`'s offset).

use rnic_verbs_sys::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::path::Path;
use std::process::Command;

const HEADER: &str = "/usr/include/infiniband/verbs.h";

struct Layout {
    c_name: String,
    size: usize,
    align: usize,
    /// (C member designator, Rust offset)
    fields: Vec<(String, usize)>,
}

macro_rules! off {
    ($s:ident; $($f:ident).+ ;) => { offset_of!($s, $($f).+) };
    ($s:ident; $($f:ident).+ ; $($r:ident).+) => { offset_of!($s, $($r).+) };
}

/// `layouts! { struct NAME { c.field (=> rust.field)?, ... } union NAME { ... } }`
macro_rules! layouts {
    ($($kind:ident $s:ident { $($($f:ident).+ $(=> $($r:ident).+)?),* $(,)? })*) => {
        vec![$(Layout {
            c_name: format!("{} {}", stringify!($kind), stringify!($s)),
            size: size_of::<$s>(),
            align: align_of::<$s>(),
            fields: vec![$((stringify!($($f).+).replace(' ', ""), off!($s; $($f).+ ; $($($r).+)?))),*],
        }),*]
    };
}

fn layouts() -> Vec<Layout> {
    layouts! {
        union ibv_gid { raw, global.subnet_prefix, global.interface_id }
        struct ibv_gid_entry { gid, gid_index, port_num, gid_type, ndev_ifindex }
        struct ibv_device_attr {
            fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id, vendor_part_id, hw_ver,
            max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd,
            max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap,
            max_ee, max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
            max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr, max_srq_sge,
            max_pkeys, local_ca_ack_delay, phys_port_cnt
        }
        struct ibv_query_device_ex_input { comp_mask }
        struct ibv_odp_caps {
            general_caps, per_transport_caps.rc_odp_caps, per_transport_caps.uc_odp_caps,
            per_transport_caps.ud_odp_caps
        }
        struct ibv_tso_caps { max_tso, supported_qpts }
        struct ibv_rss_caps {
            supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size, rx_hash_fields_mask,
            rx_hash_function
        }
        struct ibv_packet_pacing_caps { qp_rate_limit_min, qp_rate_limit_max, supported_qpts }
        struct ibv_tm_caps { max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge }
        struct ibv_cq_moderation_caps { max_cq_count, max_cq_period }
        struct ibv_pci_atomic_caps { fetch_add, swap, compare_swap }
        struct ibv_device_attr_ex {
            orig_attr, comp_mask, odp_caps, completion_timestamp_mask, hca_core_clock, device_cap_flags_ex,
            tso_caps, rss_caps, max_wq_type_rq, packet_pacing_caps, raw_packet_caps, tm_caps, cq_mod_caps,
            max_dm_size, pci_atomic_caps, xrc_odp_caps, phys_port_cnt_ex
        }
        struct ibv_port_attr {
            state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr,
            pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply, active_width,
            active_speed, phys_state, link_layer, flags, port_cap_flags2
        }
        struct ibv_async_event {
            element.cq, element.qp, element.srq, element.wq, element.port_num, event_type
        }
        struct ibv_wc {
            wr_id, status, opcode, vendor_err, byte_len, imm_data, invalidated_rkey => imm_data, qp_num, src_qp,
            wc_flags, pkey_index, slid, sl, dlid_path_bits
        }
        struct ibv_mw_bind_info { mr, addr, length, mw_access_flags }
        struct ibv_pd { context, handle }
        struct ibv_td_init_attr { comp_mask }
        struct ibv_td { context }
        struct ibv_dm { context, memcpy_to_dm, memcpy_from_dm, comp_mask, handle }
        struct ibv_parent_domain_init_attr { pd, td, comp_mask, alloc, free, pd_context }
        struct ibv_xrcd_init_attr { comp_mask, fd, oflags }
        struct ibv_xrcd { context }
        struct ibv_mr { context, pd, addr, length, handle, lkey, rkey }
        struct ibv_mw { context, pd, rkey, handle, type => type_ }
        struct ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class }
        struct ibv_grh { version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid }
        struct ibv_ah_attr { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num }
        struct ibv_srq_attr { max_wr, max_sge, srq_limit }
        struct ibv_srq_init_attr { srq_context, attr }
        struct ibv_tm_cap { max_num_tags, max_ops }
        struct ibv_srq_init_attr_ex { srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap }
        struct ibv_qp_cap { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data }
        struct ibv_qp_init_attr { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
        struct ibv_rx_hash_conf { rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask }
        struct ibv_qp_init_attr_ex {
            qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd, create_flags,
            max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn, send_ops_flags
        }
        struct ibv_qp_open_attr { comp_mask, qp_num, xrcd, qp_context, qp_type }
        struct ibv_qp_attr {
            qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags,
            cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index, en_sqd_async_notify, sq_draining,
            max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry,
            alt_port_num, alt_timeout, rate_limit
        }
        struct ibv_qp_rate_limit_attr { rate_limit, max_burst_sz, typical_pkt_sz, comp_mask }
        struct ibv_data_buf { addr, length }
        struct ibv_sge { addr, length, lkey }
        struct ibv_send_wr {
            wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, invalidate_rkey => imm_data,
            wr.rdma.remote_addr, wr.rdma.rkey,
            wr.atomic.remote_addr, wr.atomic.compare_add, wr.atomic.swap, wr.atomic.rkey,
            wr.ud.ah, wr.ud.remote_qpn, wr.ud.remote_qkey,
            qp_type.xrc.remote_srqn,
            bind_mw.mw => bind_mw_tso.bind_mw.mw, bind_mw.rkey => bind_mw_tso.bind_mw.rkey,
            bind_mw.bind_info => bind_mw_tso.bind_mw.bind_info,
            tso.hdr => bind_mw_tso.tso.hdr, tso.hdr_sz => bind_mw_tso.tso.hdr_sz, tso.mss => bind_mw_tso.tso.mss
        }
        struct ibv_recv_wr { wr_id, next, sg_list, num_sge }
        struct ibv_mw_bind { wr_id, send_flags, bind_info }
        struct ibv_srq { context, srq_context, pd, handle, mutex, cond, events_completed }
        struct ibv_qp {
            context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type, mutex, cond,
            events_completed
        }
        struct ibv_qp_ex {
            qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add, wr_bind_mw, wr_local_inv,
            wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send, wr_send_imm, wr_send_inv, wr_send_tso,
            wr_set_ud_addr, wr_set_xrc_srqn, wr_set_inline_data, wr_set_inline_data_list, wr_set_sge,
            wr_set_sge_list, wr_start, wr_complete, wr_abort, wr_atomic_write
        }
        struct ibv_ece { vendor_id, options, comp_mask }
        struct ibv_comp_channel { context, fd, refcnt }
        struct ibv_cq {
            context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed, async_events_completed
        }
        struct ibv_poll_cq_attr { comp_mask }
        struct ibv_wc_tm_info { tag, priv => priv_ }
        struct ibv_cq_ex {
            context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed, async_events_completed,
            comp_mask, status, wr_id, start_poll, next_poll, end_poll, read_opcode, read_vendor_err, read_byte_len,
            read_imm_data, read_qp_num, read_src_qp, read_wc_flags, read_slid, read_sl, read_dlid_path_bits,
            read_completion_ts, read_cvlan, read_flow_tag, read_tm_info, read_completion_wallclock_ns
        }
        struct ibv_moderate_cq { cq_count, cq_period }
        struct ibv_modify_cq_attr { attr_mask, moderate }
        struct ibv_ah { context, pd, handle }
        struct _ibv_device_ops { _dummy1, _dummy2 }
        struct ibv_device { _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path }
        struct ibv_context_ops {
            _compat_query_device, _compat_query_port, _compat_alloc_pd, _compat_dealloc_pd, _compat_reg_mr,
            _compat_rereg_mr, _compat_dereg_mr, alloc_mw, bind_mw, dealloc_mw, _compat_create_cq, poll_cq,
            req_notify_cq, _compat_cq_event, _compat_resize_cq, _compat_destroy_cq, _compat_create_srq,
            _compat_modify_srq, _compat_query_srq, _compat_destroy_srq, post_srq_recv, _compat_create_qp,
            _compat_query_qp, _compat_modify_qp, _compat_destroy_qp, post_send, post_recv, _compat_create_ah,
            _compat_destroy_ah, _compat_attach_mcast, _compat_detach_mcast, _compat_async_event
        }
        struct ibv_context { device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat }
        struct ibv_cq_init_attr_ex {
            cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain
        }
        struct ibv_values_ex { comp_mask, raw_clock }
        struct ibv_alloc_dm_attr { length, log_align_req, comp_mask }
        struct verbs_context {
            query_port, advise_mr, alloc_null_mr, read_counters, attach_counters_point_flow, create_counters,
            destroy_counters, reg_dm_mr, alloc_dm, free_dm, modify_flow_action_esp, destroy_flow_action,
            create_flow_action_esp, modify_qp_rate_limit, alloc_parent_domain, dealloc_td, alloc_td, modify_cq,
            post_srq_ops, destroy_rwq_ind_table, create_rwq_ind_table, destroy_wq, modify_wq, create_wq,
            query_rt_values, create_cq_ex, priv => priv_, query_device_ex, ibv_destroy_flow, ABI_placeholder2,
            ibv_create_flow, ABI_placeholder1, open_qp, create_qp_ex, get_srq_num, create_srq_ex, open_xrcd,
            close_xrcd, _ABI_placeholder3, sz, context
        }
    }
}

/// Enum and flag values: (C expression, Rust value).
macro_rules! consts {
    ($($c:ident),* $(,)?) => { vec![$((stringify!($c), $c as i128)),*] };
}

fn constants() -> Vec<(&'static str, i128)> {
    let mut v = consts!(
        IBV_NODE_UNKNOWN,
        IBV_NODE_CA,
        IBV_NODE_SWITCH,
        IBV_NODE_ROUTER,
        IBV_NODE_RNIC,
        IBV_NODE_USNIC,
        IBV_NODE_USNIC_UDP,
        IBV_NODE_UNSPECIFIED,
        IBV_TRANSPORT_UNKNOWN,
        IBV_TRANSPORT_IB,
        IBV_TRANSPORT_IWARP,
        IBV_TRANSPORT_USNIC,
        IBV_TRANSPORT_USNIC_UDP,
        IBV_TRANSPORT_UNSPECIFIED,
        IBV_ATOMIC_NONE,
        IBV_ATOMIC_HCA,
        IBV_ATOMIC_GLOB,
        IBV_GID_TYPE_IB,
        IBV_GID_TYPE_ROCE_V1,
        IBV_GID_TYPE_ROCE_V2,
        IBV_MTU_256,
        IBV_MTU_512,
        IBV_MTU_1024,
        IBV_MTU_2048,
        IBV_MTU_4096,
        IBV_PORT_NOP,
        IBV_PORT_DOWN,
        IBV_PORT_INIT,
        IBV_PORT_ARMED,
        IBV_PORT_ACTIVE,
        IBV_PORT_ACTIVE_DEFER,
        IBV_LINK_LAYER_UNSPECIFIED,
        IBV_LINK_LAYER_INFINIBAND,
        IBV_LINK_LAYER_ETHERNET,
        IBV_EVENT_CQ_ERR,
        IBV_EVENT_QP_FATAL,
        IBV_EVENT_QP_REQ_ERR,
        IBV_EVENT_QP_ACCESS_ERR,
        IBV_EVENT_COMM_EST,
        IBV_EVENT_SQ_DRAINED,
        IBV_EVENT_PATH_MIG,
        IBV_EVENT_PATH_MIG_ERR,
        IBV_EVENT_DEVICE_FATAL,
        IBV_EVENT_PORT_ACTIVE,
        IBV_EVENT_PORT_ERR,
        IBV_EVENT_LID_CHANGE,
        IBV_EVENT_PKEY_CHANGE,
        IBV_EVENT_SM_CHANGE,
        IBV_EVENT_SRQ_ERR,
        IBV_EVENT_SRQ_LIMIT_REACHED,
        IBV_EVENT_QP_LAST_WQE_REACHED,
        IBV_EVENT_CLIENT_REREGISTER,
        IBV_EVENT_GID_CHANGE,
        IBV_EVENT_WQ_FATAL,
        IBV_WC_SUCCESS,
        IBV_WC_LOC_LEN_ERR,
        IBV_WC_LOC_QP_OP_ERR,
        IBV_WC_LOC_EEC_OP_ERR,
        IBV_WC_LOC_PROT_ERR,
        IBV_WC_WR_FLUSH_ERR,
        IBV_WC_MW_BIND_ERR,
        IBV_WC_BAD_RESP_ERR,
        IBV_WC_LOC_ACCESS_ERR,
        IBV_WC_REM_INV_REQ_ERR,
        IBV_WC_REM_ACCESS_ERR,
        IBV_WC_REM_OP_ERR,
        IBV_WC_RETRY_EXC_ERR,
        IBV_WC_RNR_RETRY_EXC_ERR,
        IBV_WC_LOC_RDD_VIOL_ERR,
        IBV_WC_REM_INV_RD_REQ_ERR,
        IBV_WC_REM_ABORT_ERR,
        IBV_WC_INV_EECN_ERR,
        IBV_WC_INV_EEC_STATE_ERR,
        IBV_WC_FATAL_ERR,
        IBV_WC_RESP_TIMEOUT_ERR,
        IBV_WC_GENERAL_ERR,
        IBV_WC_TM_ERR,
        IBV_WC_TM_RNDV_INCOMPLETE,
        IBV_WC_SEND,
        IBV_WC_RDMA_WRITE,
        IBV_WC_RDMA_READ,
        IBV_WC_COMP_SWAP,
        IBV_WC_FETCH_ADD,
        IBV_WC_BIND_MW,
        IBV_WC_LOCAL_INV,
        IBV_WC_TSO,
        IBV_WC_ATOMIC_WRITE,
        IBV_WC_RECV,
        IBV_WC_RECV_RDMA_WITH_IMM,
        IBV_WC_GRH,
        IBV_WC_WITH_IMM,
        IBV_WC_IP_CSUM_OK,
        IBV_WC_WITH_INV,
        IBV_WC_TM_SYNC_REQ,
        IBV_WC_TM_MATCH,
        IBV_WC_TM_DATA_VALID,
        IBV_ACCESS_LOCAL_WRITE,
        IBV_ACCESS_REMOTE_WRITE,
        IBV_ACCESS_REMOTE_READ,
        IBV_ACCESS_REMOTE_ATOMIC,
        IBV_ACCESS_MW_BIND,
        IBV_ACCESS_ZERO_BASED,
        IBV_REREG_MR_CHANGE_TRANSLATION,
        IBV_REREG_MR_CHANGE_PD,
        IBV_REREG_MR_CHANGE_ACCESS,
        IBV_ACCESS_ON_DEMAND,
        IBV_ACCESS_HUGETLB,
        IBV_ACCESS_OPTIONAL_FIRST,
        IBV_ACCESS_RELAXED_ORDERING,
        IBV_MW_TYPE_1,
        IBV_MW_TYPE_2,
        IBV_SRQ_MAX_WR,
        IBV_SRQ_LIMIT,
        IBV_SRQT_BASIC,
        IBV_SRQT_XRC,
        IBV_SRQ_INIT_ATTR_TYPE,
        IBV_SRQ_INIT_ATTR_PD,
        IBV_SRQ_INIT_ATTR_XRCD,
        IBV_SRQ_INIT_ATTR_CQ,
        IBV_SRQ_INIT_ATTR_TM,
        IBV_XRCD_INIT_ATTR_FD,
        IBV_XRCD_INIT_ATTR_OFLAGS,
        IBV_XRCD_INIT_ATTR_RESERVED,
        IBV_QP_OPEN_ATTR_NUM,
        IBV_QP_OPEN_ATTR_XRCD,
        IBV_QP_OPEN_ATTR_CONTEXT,
        IBV_QP_OPEN_ATTR_TYPE,
        IBV_QP_OPEN_ATTR_RESERVED,
        IBV_SRQT_TM,
        IBV_QPT_RC,
        IBV_QPT_UC,
        IBV_QPT_UD,
        IBV_QPT_RAW_PACKET,
        IBV_QPT_XRC_SEND,
        IBV_QPT_XRC_RECV,
        IBV_QPT_DRIVER,
        IBV_QP_INIT_ATTR_PD,
        IBV_QP_INIT_ATTR_XRCD,
        IBV_QP_INIT_ATTR_CREATE_FLAGS,
        IBV_QP_INIT_ATTR_MAX_TSO_HEADER,
        IBV_QP_INIT_ATTR_IND_TABLE,
        IBV_QP_INIT_ATTR_RX_HASH,
        IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        IBV_QP_EX_WITH_RDMA_WRITE,
        IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
        IBV_QP_EX_WITH_SEND,
        IBV_QP_EX_WITH_SEND_WITH_IMM,
        IBV_QP_EX_WITH_RDMA_READ,
        IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
        IBV_QP_EX_WITH_LOCAL_INV,
        IBV_QP_EX_WITH_BIND_MW,
        IBV_QP_EX_WITH_SEND_WITH_INV,
        IBV_QP_EX_WITH_TSO,
        IBV_QP_EX_WITH_ATOMIC_WRITE,
        IBV_QP_STATE,
        IBV_QP_CUR_STATE,
        IBV_QP_EN_SQD_ASYNC_NOTIFY,
        IBV_QP_ACCESS_FLAGS,
        IBV_QP_PKEY_INDEX,
        IBV_QP_PORT,
        IBV_QP_QKEY,
        IBV_QP_AV,
        IBV_QP_PATH_MTU,
        IBV_QP_TIMEOUT,
        IBV_QP_RETRY_CNT,
        IBV_QP_RNR_RETRY,
        IBV_QP_RQ_PSN,
        IBV_QP_MAX_QP_RD_ATOMIC,
        IBV_QP_ALT_PATH,
        IBV_QP_MIN_RNR_TIMER,
        IBV_QP_SQ_PSN,
        IBV_QP_MAX_DEST_RD_ATOMIC,
        IBV_QP_PATH_MIG_STATE,
        IBV_QP_CAP,
        IBV_QP_DEST_QPN,
        IBV_QP_RATE_LIMIT,
        IBV_QPS_RESET,
        IBV_QPS_INIT,
        IBV_QPS_RTR,
        IBV_QPS_RTS,
        IBV_QPS_SQD,
        IBV_QPS_SQE,
        IBV_QPS_ERR,
        IBV_QPS_UNKNOWN,
        IBV_MIG_MIGRATED,
        IBV_MIG_REARM,
        IBV_MIG_ARMED,
        IBV_WR_RDMA_WRITE,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        IBV_WR_SEND,
        IBV_WR_SEND_WITH_IMM,
        IBV_WR_RDMA_READ,
        IBV_WR_ATOMIC_CMP_AND_SWP,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        IBV_WR_LOCAL_INV,
        IBV_WR_BIND_MW,
        IBV_WR_SEND_WITH_INV,
        IBV_WR_TSO,
        IBV_WR_DRIVER1,
        IBV_WR_ATOMIC_WRITE,
        IBV_SEND_FENCE,
        IBV_SEND_SIGNALED,
        IBV_SEND_SOLICITED,
        IBV_SEND_INLINE,
        IBV_SEND_IP_CSUM,
        IBV_CQ_INIT_ATTR_MASK_FLAGS,
        IBV_CQ_INIT_ATTR_MASK_PD,
        IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS,
        IBV_ADVISE_MR_ADVICE_PREFETCH,
        IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
        IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
        IBV_ADVISE_MR_FLAG_FLUSH,
        IBV_ODP_SUPPORT,
        IBV_ODP_SUPPORT_IMPLICIT,
        IBV_ODP_SUPPORT_SEND,
        IBV_ODP_SUPPORT_RECV,
        IBV_ODP_SUPPORT_WRITE,
        IBV_ODP_SUPPORT_READ,
        IBV_ODP_SUPPORT_ATOMIC,
        IBV_ODP_SUPPORT_SRQ_RECV,
        IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
        IBV_WC_EX_WITH_BYTE_LEN,
        IBV_WC_EX_WITH_IMM,
        IBV_WC_EX_WITH_QP_NUM,
        IBV_WC_EX_WITH_SRC_QP,
        IBV_WC_EX_WITH_SLID,
        IBV_WC_EX_WITH_SL,
        IBV_WC_EX_WITH_DLID_PATH_BITS,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
        IBV_WC_STANDARD_FLAGS,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
        IBV_VALUES_MASK_RAW_CLOCK,
        IBV_CREATE_CQ_ATTR_SINGLE_THREADED,
        IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN,
        IBV_SYSFS_NAME_MAX,
        IBV_SYSFS_PATH_MAX,
    );
    v.push(("(long long)(uintptr_t)__VERBS_ABI_IS_EXTENDED", VERBS_ABI_IS_EXTENDED as usize as i128));
    v
}

/// The C probe: one line per struct (`S name size align`), field (`F name.field offset`)
/// and constant (`C name value`).
fn probe_source(header: &str, layouts: &[Layout], consts: &[(&str, i128)]) -> String {
    let include = header.trim_start_matches("/usr/include/");
    let mut c = format!(
        "#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <{include}>\nint main(void) {{\n"
    );
    for l in layouts {
        let _ = writeln!(c, "printf(\"S {0}|%zu|%zu\\n\", sizeof({0}), _Alignof({0}));", l.c_name);
        for (f, _) in &l.fields {
            let _ = writeln!(c, "printf(\"F {0}.{1}|%zu\\n\", offsetof({0}, {1}));", l.c_name, f);
        }
    }
    for (name, _) in consts {
        let key = if name.starts_with('(') { "VERBS_ABI_IS_EXTENDED" } else { name };
        let _ = writeln!(c, "printf(\"C {key}|%lld\\n\", (long long)({name}));");
    }
    c.push_str("return 0;\n}\n");
    c
}

#[test]
fn layouts_match_the_installed_verbs_h() {
    check_header(HEADER, "libibverbs-dev", &layouts(), &constants());
}

/// rnic's librdmacm.so.1 hands programs these structs: the same check against
/// `<rdma/rdma_cma.h>` (librdmacm-dev).
#[test]
fn rdmacm_layouts_match_the_installed_rdma_cma_h() {
    check_header("/usr/include/rdma/rdma_cma.h", "librdmacm-dev", &rdmacm_layouts(), &rdmacm_constants());
}

fn rdmacm_layouts() -> Vec<Layout> {
    layouts! {
        struct ibv_sa_path_rec {
            dgid, sgid, dlid, slid, raw_traffic, flow_label, hop_limit, traffic_class, reversible, numb_path,
            pkey, sl, mtu_selector, mtu, rate_selector, rate, packet_life_time_selector, packet_life_time,
            preference
        }
        struct rdma_ib_addr { sgid, dgid, pkey }
        struct rdma_addr {
            src_addr => src.addr, src_sin => src.sin, src_sin6 => src.sin6, src_storage => src.storage,
            dst_addr => dst.addr, dst_sin => dst.sin, dst_sin6 => dst.sin6, dst_storage => dst.storage,
            addr.ibaddr
        }
        struct rdma_route { addr, path_rec, num_paths }
        struct rdma_event_channel { fd }
        struct rdma_cm_id {
            verbs, channel, context, qp, route, ps, port_num, event, send_cq_channel, send_cq, recv_cq_channel,
            recv_cq, srq, pd, qp_type
        }
        struct rdma_conn_param {
            private_data, private_data_len, responder_resources, initiator_depth, flow_control, retry_count,
            rnr_retry_count, srq, qp_num
        }
        struct rdma_ud_param { private_data, private_data_len, ah_attr, qp_num, qkey }
        struct rdma_cm_event { id, listen_id, event, status, param.conn, param.ud }
        struct rdma_addrinfo {
            ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len, ai_src_addr, ai_dst_addr,
            ai_src_canonname, ai_dst_canonname, ai_route_len, ai_route, ai_connect_len, ai_connect, ai_next
        }
        struct rdma_cm_join_mc_attr_ex { comp_mask, join_flags, addr }
    }
}

fn rdmacm_constants() -> Vec<(&'static str, i128)> {
    consts!(
        RDMA_CM_EVENT_ADDR_RESOLVED,
        RDMA_CM_EVENT_ADDR_ERROR,
        RDMA_CM_EVENT_ROUTE_RESOLVED,
        RDMA_CM_EVENT_ROUTE_ERROR,
        RDMA_CM_EVENT_CONNECT_REQUEST,
        RDMA_CM_EVENT_CONNECT_RESPONSE,
        RDMA_CM_EVENT_CONNECT_ERROR,
        RDMA_CM_EVENT_UNREACHABLE,
        RDMA_CM_EVENT_REJECTED,
        RDMA_CM_EVENT_ESTABLISHED,
        RDMA_CM_EVENT_DISCONNECTED,
        RDMA_CM_EVENT_DEVICE_REMOVAL,
        RDMA_CM_EVENT_MULTICAST_JOIN,
        RDMA_CM_EVENT_MULTICAST_ERROR,
        RDMA_CM_EVENT_ADDR_CHANGE,
        RDMA_CM_EVENT_TIMEWAIT_EXIT,
        RDMA_PS_IPOIB,
        RDMA_PS_TCP,
        RDMA_PS_UDP,
        RDMA_PS_IB,
        RDMA_UDP_QKEY,
        RDMA_CM_JOIN_MC_ATTR_ADDRESS,
        RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
        RDMA_CM_JOIN_MC_ATTR_RESERVED,
        RDMA_MC_JOIN_FLAG_FULLMEMBER,
        RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
        RDMA_MC_JOIN_FLAG_RESERVED,
        RDMA_MAX_RESP_RES,
        RDMA_MAX_INIT_DEPTH,
        RAI_PASSIVE,
        RAI_NUMERICHOST,
        RAI_NOROUTE,
        RAI_FAMILY,
        RDMA_OPTION_ID,
        RDMA_OPTION_IB,
        RDMA_OPTION_ID_TOS,
        RDMA_OPTION_ID_REUSEADDR,
        RDMA_OPTION_ID_AFONLY,
        RDMA_OPTION_ID_ACK_TIMEOUT,
        RDMA_OPTION_IB_PATH,
    )
}

/// Compiles and runs the probe for `header` (from the Debian package `package`) and
/// compares every layout and constant.
fn check_header(header: &str, package: &str, layouts: &[Layout], consts: &[(&str, i128)]) {
    if !Path::new(header).exists() {
        let why = format!("{header} is missing: install {package} to compare the ABI with the header");
        assert!(std::env::var_os("CI").is_none(), "CI is set and {why}");
        println!("SKIPPED the layouts of {header}: {why}");
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("abi-probe-{package}"));
    std::fs::create_dir_all(&dir).expect("create probe dir");
    let src = dir.join("probe.c");
    let bin = dir.join("probe");
    std::fs::write(&src, probe_source(header, layouts, consts)).expect("write probe.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=gnu11", "-Wall", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc:?}: {e}"));
    assert!(out.status.success(), "compiling the probe failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let run = Command::new(&bin).output().expect("run probe");
    assert!(run.status.success(), "probe failed");
    let text = String::from_utf8(run.stdout).expect("utf-8");
    let c: BTreeMap<String, Vec<usize>> = text
        .lines()
        .filter(|l| !l.starts_with('C'))
        .map(|l| {
            let (k, v) = l[2..].split_once('|').expect("probe line");
            (k.to_string(), v.split('|').map(|n| n.parse().expect("number")).collect())
        })
        .collect();
    let c_consts: BTreeMap<&str, i128> = text
        .lines()
        .filter(|l| l.starts_with('C'))
        .map(|l| {
            let (k, v) = l[2..].split_once('|').expect("probe line");
            (k, v.parse().expect("number"))
        })
        .collect();

    let mut bad = Vec::new();
    let mut checked = 0;
    for l in layouts {
        let s = &c[&l.c_name];
        if s[0] != l.size || s[1] != l.align {
            bad.push(format!("{}: C size/align {}/{}, Rust {}/{}", l.c_name, s[0], s[1], l.size, l.align));
        }
        for (f, rust) in &l.fields {
            let c_off = c[&format!("{}.{}", l.c_name, f)][0];
            if c_off != *rust {
                bad.push(format!("{}.{f}: C offset {c_off}, Rust {rust}", l.c_name));
            }
            checked += 1;
        }
    }
    for (name, rust) in consts {
        let key = if name.starts_with('(') { "VERBS_ABI_IS_EXTENDED" } else { name };
        // The C side prints through `long long`: compare modulo 2^64 (the truncation is the point).
        #[allow(clippy::cast_possible_truncation)]
        let (cv, rv) = (c_consts[key] as i64, *rust as i64);
        if cv != rv {
            bad.push(format!("{key}: C {cv}, Rust {rv}"));
        }
    }
    assert!(bad.is_empty(), "ABI mismatches with {header}:\n{}", bad.join("\n"));
    println!("{} structs, {checked} fields, {} constants match {header}", layouts.len(), consts.len());
}

/// A missing library is an error naming it, never a crash.
#[test]
fn a_missing_library_is_a_clear_error() {
    let e = Verbs::load("libibverbs-does-not-exist.so.1").expect_err("no such library");
    let text = e.to_string();
    assert!(text.contains("libibverbs-does-not-exist.so.1"), "{text}");
    assert!(matches!(e, LoadError::Library { .. }));
}

/// A library without the verbs (here: libc) fails on the first symbol, naming it and its
/// version.
#[test]
fn a_library_without_the_symbols_is_a_clear_error() {
    match Verbs::load("libc.so.6") {
        Err(LoadError::Symbol { symbol, version, .. }) => {
            assert_eq!((symbol, version), ("ibv_get_device_list", "IBVERBS_1.1"));
        }
        other => panic!("expected a missing-symbol error, got {other:?}"),
    }
}
