//! `#[repr(C)]` copies of what programs read directly in rdma-core 44's
//! `<rdma/rdma_cma.h>` and `<infiniband/sa.h>`: `rdma_event_channel`, `rdma_cm_id` with its
//! `rdma_route` / `rdma_addr` / `rdma_ib_addr`, `rdma_cm_event` with `rdma_conn_param`
//! and `rdma_ud_param`, `rdma_addrinfo`, `ibv_sa_path_rec`, `rdma_cm_join_mc_attr_ex`,
//! and the enum values. `tests/abi.rs` checks each against the installed header.

use crate::types::{ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_gid, ibv_pd, ibv_qp, ibv_qp_type, ibv_srq};
use libc::{c_char, c_int, c_void, size_t, sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, socklen_t};

/// `enum rdma_cm_event_type`.
pub type rdma_cm_event_type = c_int;
/// Address resolved (`rdma_resolve_addr`).
pub const RDMA_CM_EVENT_ADDR_RESOLVED: rdma_cm_event_type = 0;
/// Address resolution failed.
pub const RDMA_CM_EVENT_ADDR_ERROR: rdma_cm_event_type = 1;
/// Route resolved (`rdma_resolve_route`).
pub const RDMA_CM_EVENT_ROUTE_RESOLVED: rdma_cm_event_type = 2;
/// Route resolution failed.
pub const RDMA_CM_EVENT_ROUTE_ERROR: rdma_cm_event_type = 3;
/// A connection request (or a SIDR request) on a listening id.
pub const RDMA_CM_EVENT_CONNECT_REQUEST: rdma_cm_event_type = 4;
/// The REP of an id without a QP (`rdma_establish` follows).
pub const RDMA_CM_EVENT_CONNECT_RESPONSE: rdma_cm_event_type = 5;
/// Bringing the connection up failed.
pub const RDMA_CM_EVENT_CONNECT_ERROR: rdma_cm_event_type = 6;
/// The peer did not answer (or answered a SIDR request with an error status).
pub const RDMA_CM_EVENT_UNREACHABLE: rdma_cm_event_type = 7;
/// The peer rejected the connection.
pub const RDMA_CM_EVENT_REJECTED: rdma_cm_event_type = 8;
/// The connection is up.
pub const RDMA_CM_EVENT_ESTABLISHED: rdma_cm_event_type = 9;
/// The connection is closed.
pub const RDMA_CM_EVENT_DISCONNECTED: rdma_cm_event_type = 10;
/// The device went away.
pub const RDMA_CM_EVENT_DEVICE_REMOVAL: rdma_cm_event_type = 11;
/// A multicast join completed.
pub const RDMA_CM_EVENT_MULTICAST_JOIN: rdma_cm_event_type = 12;
/// A multicast join failed.
pub const RDMA_CM_EVENT_MULTICAST_ERROR: rdma_cm_event_type = 13;
/// The address changed.
pub const RDMA_CM_EVENT_ADDR_CHANGE: rdma_cm_event_type = 14;
/// The connection's TimeWait ended: its QP may be reused.
pub const RDMA_CM_EVENT_TIMEWAIT_EXIT: rdma_cm_event_type = 15;

/// `enum rdma_port_space`.
pub type rdma_port_space = c_int;
/// IPoIB's port space.
pub const RDMA_PS_IPOIB: rdma_port_space = 0x0002;
/// Connected (RC) ids.
pub const RDMA_PS_TCP: rdma_port_space = 0x0106;
/// UD ids (SIDR).
pub const RDMA_PS_UDP: rdma_port_space = 0x0111;
/// Native IB addressing.
pub const RDMA_PS_IB: rdma_port_space = 0x013F;
/// The Q_Key of rdma_cm's UD QPs.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;
/// "Whatever the device allows" in `rdma_conn_param::responder_resources`.
pub const RDMA_MAX_RESP_RES: u8 = 0xFF;
/// "Whatever the device allows" in `rdma_conn_param::initiator_depth`.
pub const RDMA_MAX_INIT_DEPTH: u8 = 0xFF;

/// `rdma_addrinfo::ai_flags`: a listening address.
pub const RAI_PASSIVE: c_int = 1;
/// The node is a numeric address.
pub const RAI_NUMERICHOST: c_int = 2;
/// Do not resolve a route.
pub const RAI_NOROUTE: c_int = 4;
/// `ai_family` is given.
pub const RAI_FAMILY: c_int = 8;

/// `rdma_set_option` level: the id.
pub const RDMA_OPTION_ID: c_int = 0;
/// `rdma_set_option` level: InfiniBand.
pub const RDMA_OPTION_IB: c_int = 1;
/// Type of service (`u8`).
pub const RDMA_OPTION_ID_TOS: c_int = 0;
/// Reuse the address (`int`).
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
/// IPv6 only (`int`).
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;
/// The QP's local ACK timeout (`u8`).
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;
/// Path records (`struct ibv_path_data[]`).
pub const RDMA_OPTION_IB_PATH: c_int = 1;

/// `struct ibv_sa_path_rec` (`<infiniband/sa.h>`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sa_path_rec {
    /// Destination GID.
    pub dgid: ibv_gid,
    /// Source GID.
    pub sgid: ibv_gid,
    /// Destination LID (big-endian; 0 on RoCE).
    pub dlid: u16,
    /// Source LID (big-endian).
    pub slid: u16,
    /// Raw traffic.
    pub raw_traffic: c_int,
    /// Flow label (big-endian).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Reversible path.
    pub reversible: c_int,
    /// Number of paths.
    pub numb_path: u8,
    /// P_Key (big-endian).
    pub pkey: u16,
    /// Service level.
    pub sl: u8,
    /// MTU selector.
    pub mtu_selector: u8,
    /// `enum ibv_mtu`.
    pub mtu: u8,
    /// Rate selector.
    pub rate_selector: u8,
    /// `enum ibv_rate`.
    pub rate: u8,
    /// Packet lifetime selector.
    pub packet_life_time_selector: u8,
    /// Packet lifetime (4.096 us * 2^n).
    pub packet_life_time: u8,
    /// Preference.
    pub preference: u8,
}

/// `struct rdma_ib_addr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ib_addr {
    /// Source GID.
    pub sgid: ibv_gid,
    /// Destination GID.
    pub dgid: ibv_gid,
    /// P_Key (big-endian).
    pub pkey: u16,
}

/// The source or destination address union of `struct rdma_addr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_sockaddr {
    /// Generic.
    pub addr: sockaddr,
    /// IPv4.
    pub sin: sockaddr_in,
    /// IPv6.
    pub sin6: sockaddr_in6,
    /// Room for any.
    pub storage: sockaddr_storage,
}

/// The `addr` union of `struct rdma_addr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_addr_ib {
    /// The GIDs and P_Key.
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_addr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addr {
    /// The local address (C: `src_addr`, `src_sin`, `src_sin6`, `src_storage`).
    pub src: rdma_sockaddr,
    /// The peer's address (C: `dst_addr`, ...).
    pub dst: rdma_sockaddr,
    /// The GIDs.
    pub addr: rdma_addr_ib,
}

/// `struct rdma_route`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_route {
    /// Addresses.
    pub addr: rdma_addr,
    /// The path records (`num_paths` of them).
    pub path_rec: *mut ibv_sa_path_rec,
    /// How many.
    pub num_paths: c_int,
}

/// `struct rdma_event_channel`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rdma_event_channel {
    /// Readable while events wait.
    pub fd: c_int,
}

/// `struct rdma_cm_id`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_id {
    /// The device's context (NULL until bound to a device).
    pub verbs: *mut ibv_context,
    /// Where its events go.
    pub channel: *mut rdma_event_channel,
    /// The program's.
    pub context: *mut c_void,
    /// Its QP (`rdma_create_qp`).
    pub qp: *mut ibv_qp,
    /// Addresses and path.
    pub route: rdma_route,
    /// Port space.
    pub ps: rdma_port_space,
    /// Port number.
    pub port_num: u8,
    /// The event a synchronous call took.
    pub event: *mut rdma_cm_event,
    /// CQ channels and CQs `rdma_create_qp` made.
    pub send_cq_channel: *mut ibv_comp_channel,
    /// Send CQ.
    pub send_cq: *mut ibv_cq,
    /// Receive CQ channel.
    pub recv_cq_channel: *mut ibv_comp_channel,
    /// Receive CQ.
    pub recv_cq: *mut ibv_cq,
    /// SRQ (`rdma_create_srq`).
    pub srq: *mut ibv_srq,
    /// PD.
    pub pd: *mut ibv_pd,
    /// QP type.
    pub qp_type: ibv_qp_type,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rdma_conn_param {
    /// Private data.
    pub private_data: *const c_void,
    /// Its length.
    pub private_data_len: u8,
    /// READs/atomics the peer may have outstanding at us.
    pub responder_resources: u8,
    /// READs/atomics we may have outstanding at the peer.
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: u8,
    /// Transport retries.
    pub retry_count: u8,
    /// RNR retries.
    pub rnr_retry_count: u8,
    /// The QP uses an SRQ.
    pub srq: u8,
    /// The QP (for an id without one).
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rdma_ud_param {
    /// Private data.
    pub private_data: *const c_void,
    /// Its length.
    pub private_data_len: u8,
    /// The address to send to.
    pub ah_attr: ibv_ah_attr,
    /// The remote QP.
    pub qp_num: u32,
    /// Its Q_Key.
    pub qkey: u32,
}

/// The `param` union of `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    /// Connected ids.
    pub conn: rdma_conn_param,
    /// UD ids.
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_event {
    /// The id it is for (the new id of a CONNECT_REQUEST).
    pub id: *mut rdma_cm_id,
    /// The listening id (CONNECT_REQUEST).
    pub listen_id: *mut rdma_cm_id,
    /// What happened.
    pub event: rdma_cm_event_type,
    /// 0, a negative errno, or a reject reason.
    pub status: c_int,
    /// The parameters.
    pub param: rdma_cm_event_param,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rdma_addrinfo {
    /// `RAI_*`.
    pub ai_flags: c_int,
    /// Address family.
    pub ai_family: c_int,
    /// `enum ibv_qp_type`.
    pub ai_qp_type: c_int,
    /// `enum rdma_port_space`.
    pub ai_port_space: c_int,
    /// Source address length.
    pub ai_src_len: socklen_t,
    /// Destination address length.
    pub ai_dst_len: socklen_t,
    /// Source address.
    pub ai_src_addr: *mut sockaddr,
    /// Destination address.
    pub ai_dst_addr: *mut sockaddr,
    /// Source name.
    pub ai_src_canonname: *mut c_char,
    /// Destination name.
    pub ai_dst_canonname: *mut c_char,
    /// Route data length.
    pub ai_route_len: size_t,
    /// Route data.
    pub ai_route: *mut c_void,
    /// Connect data length.
    pub ai_connect_len: size_t,
    /// Connect data.
    pub ai_connect: *mut c_void,
    /// Next in the list.
    pub ai_next: *mut rdma_addrinfo,
}

/// `rdma_cm_join_mc_attr_ex.comp_mask`: `addr` is set.
pub const RDMA_CM_JOIN_MC_ATTR_ADDRESS: u32 = 1 << 0;
/// `rdma_cm_join_mc_attr_ex.comp_mask`: `join_flags` is set.
pub const RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS: u32 = 1 << 1;
/// The first `comp_mask` bit librdmacm does not know.
pub const RDMA_CM_JOIN_MC_ATTR_RESERVED: u32 = 1 << 2;
/// Join as a full member (send and receive).
pub const RDMA_MC_JOIN_FLAG_FULLMEMBER: u32 = 0;
/// Join to send only (the QP is not attached).
pub const RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: u32 = 1;
/// The first join flag librdmacm does not know.
pub const RDMA_MC_JOIN_FLAG_RESERVED: u32 = 2;

/// `struct rdma_cm_join_mc_attr_ex`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rdma_cm_join_mc_attr_ex {
    /// `RDMA_CM_JOIN_MC_ATTR_*`.
    pub comp_mask: u32,
    /// `RDMA_MC_JOIN_FLAG_*`.
    pub join_flags: u32,
    /// The group.
    pub addr: *mut sockaddr,
}
