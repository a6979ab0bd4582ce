//! What an emulated device offers: the one source of its limits and attributes, as rxe's
//! `rxe_param.h` and `rxe_init_device_param` are rxe's. Both front ends report these
//! (rnic-verbs' `Context::query_device`, the libibverbs library's `ibv_query_device`),
//! and the engine and the verbs check work against them.

use crate::config::DeviceConfig;

/// An emulated device's limits and attributes (`ibv_device_attr`'s fields that mean
/// something on rnic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Firmware version: the crate's version.
    pub fw_ver: &'static str,
    /// Vendor ID: 0xFFFFFF, "none", as rxe reports (programs that tune for a vendor, as
    /// perftest does for mlx5, take their generic path).
    pub vendor_id: u32,
    /// Vendor part ID (0, as rxe).
    pub vendor_part_id: u32,
    /// Hardware version (0, as rxe).
    pub hw_ver: u32,
    /// Largest memory region, bytes.
    pub max_mr_size: u64,
    /// Page sizes a region may be registered with (4 KiB and up).
    pub page_size_cap: u64,
    /// Most QPs.
    pub max_qp: u32,
    /// Most work requests per send or receive queue.
    pub max_qp_wr: u32,
    /// Most SGEs per work request.
    pub max_sge: u32,
    /// Most SGEs per RDMA READ.
    pub max_sge_rd: u32,
    /// Most CQs.
    pub max_cq: u32,
    /// Most entries per CQ.
    pub max_cqe: u32,
    /// Most memory regions (the MTPT's size: `DeviceConfig::max_mr`).
    pub max_mr: u32,
    /// Most memory windows: they take MTPT entries beside the regions
    /// (`Mtpt::alloc_mw`), so as many as regions.
    pub max_mw: u32,
    /// Largest device memory allocation (`ibv_alloc_dm`), bytes: as much as mlx5's
    /// on-chip memory.
    pub max_dm_size: u64,
    /// Most PDs.
    pub max_pd: u32,
    /// Most RDMA READ / atomic requests a QP answers at once (responder resources).
    pub max_qp_rd_atom: u32,
    /// Most RDMA READ / atomic requests a QP has outstanding (initiator depth).
    pub max_qp_init_rd_atom: u32,
    /// Responder resources over all QPs.
    pub max_res_rd_atom: u32,
    /// Most address handles.
    pub max_ah: u32,
    /// Most SRQs.
    pub max_srq: u32,
    /// Most receive WQEs per SRQ.
    pub max_srq_wr: u32,
    /// Most SGEs per SRQ receive WQE.
    pub max_srq_sge: u32,
    /// Largest inline send, bytes.
    pub max_inline_data: u32,
    /// Most multicast groups (each a socket joined to its IP group on UDP).
    pub max_mcast_grp: u32,
    /// Most QPs attached to one multicast group.
    pub max_mcast_qp_attach: u32,
    /// Most multicast attachments over all groups.
    pub max_total_mcast_qp_attach: u32,
    /// P_Key table length.
    pub max_pkeys: u16,
    /// The CA's ACK delay (4.096 us x 2^n), what rxe reports.
    pub local_ca_ack_delay: u8,
    /// Ports.
    pub phys_port_cnt: u8,
}

impl DeviceCaps {
    /// Most QPs.
    pub const MAX_QP: u32 = 65536;
    /// Most work requests per queue.
    pub const MAX_QP_WR: u32 = 16384;
    /// Most SGEs per work request.
    pub const MAX_SGE: u32 = 32;
    /// Most entries per CQ.
    pub const MAX_CQE: u32 = 1 << 20;
    /// Largest inline send.
    pub const MAX_INLINE: u32 = 1024;
    /// READ/atomic depth per QP, either way.
    pub const MAX_RD_ATOMIC: u8 = 16;
    /// Most CQs, PDs, SRQs and AHs.
    pub const MAX_OBJECTS: u32 = 65536;
    /// Most multicast groups: fewer than rxe's 8192, since each costs a socket per
    /// process on UDP.
    pub const MAX_MCAST_GRP: u32 = 64;
    /// Most QPs per multicast group (rxe's `RXE_MAX_MCAST_QP_ATTACH`).
    pub const MAX_MCAST_QP_ATTACH: u32 = 56;
    /// Most multicast attachments in all.
    pub const MAX_TOTAL_MCAST_QP_ATTACH: u32 = Self::MAX_MCAST_GRP * Self::MAX_MCAST_QP_ATTACH;
    /// Largest device memory allocation (device memory's own rule, `mem::dm`).
    pub const MAX_DM_SIZE: u64 = crate::mem::dm::MAX_DM_SIZE;

    /// The caps of a device opened with `config` (its MTPT size is configured).
    pub fn of(config: &DeviceConfig) -> DeviceCaps {
        DeviceCaps::with_max_mr(config.max_mr)
    }

    /// The caps of a device whose MTPT holds `max_mr` regions.
    pub fn with_max_mr(max_mr: u32) -> DeviceCaps {
        let rd = u32::from(Self::MAX_RD_ATOMIC);
        DeviceCaps {
            fw_ver: env!("CARGO_PKG_VERSION"),
            vendor_id: 0x00ff_ffff,
            vendor_part_id: 0,
            hw_ver: 0,
            max_mr_size: 1 << 40,
            page_size_cap: 0xffff_f000,
            max_qp: Self::MAX_QP,
            max_qp_wr: Self::MAX_QP_WR,
            max_sge: Self::MAX_SGE,
            max_sge_rd: Self::MAX_SGE,
            max_cq: Self::MAX_OBJECTS,
            max_cqe: Self::MAX_CQE,
            max_mr,
            max_mw: max_mr,
            max_dm_size: Self::MAX_DM_SIZE,
            max_pd: Self::MAX_OBJECTS,
            max_qp_rd_atom: rd,
            max_qp_init_rd_atom: rd,
            max_res_rd_atom: Self::MAX_QP * rd,
            max_ah: Self::MAX_OBJECTS,
            max_srq: Self::MAX_OBJECTS,
            max_srq_wr: Self::MAX_QP_WR,
            max_srq_sge: Self::MAX_SGE,
            max_inline_data: Self::MAX_INLINE,
            max_mcast_grp: Self::MAX_MCAST_GRP,
            max_mcast_qp_attach: Self::MAX_MCAST_QP_ATTACH,
            max_total_mcast_qp_attach: Self::MAX_TOTAL_MCAST_QP_ATTACH,
            max_pkeys: 1,
            local_ca_ack_delay: 15,
            phys_port_cnt: 1,
        }
    }
}

impl Default for DeviceCaps {
    /// A device with the default configuration's MTPT.
    fn default() -> DeviceCaps {
        DeviceCaps::with_max_mr(crate::config::DEFAULT_MAX_MR)
    }
}
