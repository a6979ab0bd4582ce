//! Every conversion between rnic-verbs' public types and the libibverbs structs, in one
//! place. The other files of `hw` name rnic-verbs' types only through the `use` below, so
//! reshaping the public API means adapting this file alone.
//!
//! Byte orders: immediate data is host order in rnic's types and network order in
//! `ibv_send_wr::imm_data` / `ibv_wc::imm_data` (verbs' `__be32`); the R_Key of SEND with
//! Invalidate / LOCAL_INV and a completion's invalidated R_Key are host order in both.

pub(crate) use crate::{
    AccessFlags, Advice, AsyncEvent, DeviceAttr, Gid, NetworkHdr, PathMtu, PortAttr, QpAttr, QpAttrMask, QpCap,
    QpState, QpType, RecvWrRef, SendOp, SendWrRef, Sge, UdDest, WcFlags, WcOpcode, WcStatus, WorkCompletion,
};

use super::event::{HwAsyncEvent, HwEventElement};
use super::{HwError, HwResult};
use rnic_verbs_sys::{self as sys, ibv_ah, ibv_ah_attr, ibv_qp_attr, ibv_recv_wr, ibv_send_wr, ibv_sge, ibv_wc};
use std::net::IpAddr;

// ---------------------------------------------------------------------------------------
// Flags and small enums.

/// `ibv_advise_mr`'s advice for rnic's [`Advice`].
pub fn advice_to_ibv(advice: Advice) -> sys::ibv_advise_mr_advice {
    match advice {
        Advice::Prefetch => sys::IBV_ADVISE_MR_ADVICE_PREFETCH,
        Advice::PrefetchWrite => sys::IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
        Advice::PrefetchNoFault => sys::IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
    }
}

/// rnic's access rights as `ibv_access_flags`. LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ and
/// REMOTE_ATOMIC have verbs' values; the FLUSH rights have no `IBV_ACCESS_*` in rdma-core 44.
pub fn access_to_ibv(access: AccessFlags) -> HwResult<u32> {
    let flush = AccessFlags::FLUSH_GLOBAL | AccessFlags::FLUSH_PERSISTENT;
    if access.intersects(flush) {
        return Err(HwError::Unsupported(format!(
            "access {access}: rdma-core 44 has no IBV_ACCESS_FLUSH_GLOBAL/PERSISTENT"
        )));
    }
    Ok(access.bits())
}

/// `ibv_access_flags` as rnic's rights (bits rnic does not know, such as
/// `IBV_ACCESS_MW_BIND`, dropped).
pub fn access_from_ibv(bits: u32) -> AccessFlags {
    AccessFlags::from_bits_truncate(bits & 0xf)
}

/// `enum ibv_qp_type`.
pub fn qp_type_to_ibv(t: QpType) -> u32 {
    t.to_ibv()
}

/// `ibv_qp_type` as rnic's, `Unsupported` for raw packet and driver QPs.
pub fn qp_type_from_ibv(t: u32) -> HwResult<QpType> {
    QpType::from_ibv(t)
        .ok_or_else(|| HwError::Unsupported(format!("QP type {t} (rnic knows RC, UC, UD, XRC_SEND and XRC_RECV)")))
}

/// Queue sizes as `ibv_qp_cap`.
pub fn cap_to_ibv(c: &QpCap) -> sys::ibv_qp_cap {
    sys::ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `ibv_qp_cap` (what the device granted) as rnic's sizes.
pub fn cap_from_ibv(c: &sys::ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// A GID's 16 bytes as rnic's [`Gid`].
pub fn gid_from_ibv(raw: [u8; 16]) -> Gid {
    Gid(raw)
}

/// rnic's [`Gid`] as `union ibv_gid`.
pub fn gid_to_ibv(g: Gid) -> sys::ibv_gid {
    sys::ibv_gid::from_bytes(g.0)
}

// ---------------------------------------------------------------------------------------
// Address vectors.

/// The RoCE address vector to `dgid` from source GID `sgid_index` on `port`: a GRH is
/// always present on RoCE (`is_global = 1`), LID 0. Hop limit 64, as Linux rxe sends.
pub fn ah_attr_to_gid(dgid: Gid, sgid_index: u8, port: u8) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: sys::ibv_global_route {
            dgid: gid_to_ibv(dgid),
            flow_label: 0,
            sgid_index,
            hop_limit: 64,
            traffic_class: 0,
        },
        is_global: 1,
        port_num: port,
        ..Default::default()
    }
}

/// The destination address of a UD send or a connected QP: the IP of the GID.
pub fn ip_of_ah_attr(a: &ibv_ah_attr) -> Option<IpAddr> {
    (a.is_global != 0).then(|| Gid(a.grh.dgid.bytes()).to_ip())
}

/// The peer address a UD destination names (the key of the PD's AH cache).
pub fn ud_dest_ip(d: &UdDest) -> IpAddr {
    d.dst
}

// ---------------------------------------------------------------------------------------
// Modify / query QP.

/// Attribute-mask bits `QpAttr` has no values for.
const NO_VALUE_BITS: u32 = sys::IBV_QP_CUR_STATE
    | sys::IBV_QP_EN_SQD_ASYNC_NOTIFY
    | sys::IBV_QP_ALT_PATH
    | sys::IBV_QP_PATH_MIG_STATE
    | sys::IBV_QP_CAP
    | sys::IBV_QP_RATE_LIMIT;

/// rnic's modify-QP attributes as `ibv_qp_attr` and its mask (the `QpAttrMask` bits are
/// verbs' `IBV_QP_*` bits). `sgid_index` is the source GID for the address vector (`AV`,
/// built from `remote_ip`).
pub fn qp_attr_to_ibv(attr: &QpAttr, sgid_index: u8) -> HwResult<(ibv_qp_attr, libc::c_int)> {
    let mask = attr.mask.bits();
    if mask & NO_VALUE_BITS != 0 {
        return Err(HwError::Unsupported(format!(
            "modify QP with {:?}: rnic's QpAttr carries no values for those attributes",
            QpAttrMask::from_bits_retain(mask & NO_VALUE_BITS)
        )));
    }
    let mut a = ibv_qp_attr {
        qp_state: attr.state.to_ibv(),
        qp_access_flags: access_to_ibv(attr.access)?,
        path_mtu: attr.path_mtu,
        dest_qp_num: attr.dest_qpn,
        rq_psn: attr.rq_psn,
        sq_psn: attr.sq_psn,
        timeout: attr.timeout,
        retry_cnt: attr.retry_cnt,
        rnr_retry: attr.rnr_retry,
        min_rnr_timer: attr.min_rnr_timer,
        max_rd_atomic: attr.max_rd_atomic,
        max_dest_rd_atomic: attr.max_dest_rd_atomic,
        qkey: attr.qkey,
        pkey_index: attr.pkey_index,
        port_num: attr.port,
        ..Default::default()
    };
    if mask & sys::IBV_QP_AV != 0 {
        let ip = attr.remote_ip.ok_or_else(|| HwError::InvalidArgument {
            op: "modify QP",
            why: "AV is in the mask but no remote address (remote_ip) is given".into(),
        })?;
        a.ah_attr = ah_attr_to_gid(Gid::from_ip(ip), sgid_index, attr.port.max(1));
    }
    let mask = libc::c_int::try_from(mask)
        .map_err(|_| HwError::InvalidArgument { op: "modify QP", why: format!("mask {mask:#x}") })?;
    Ok((a, mask))
}

/// Every attribute `ibv_query_qp` is asked for.
pub const QUERY_MASK: u32 = sys::IBV_QP_STATE
    | sys::IBV_QP_ACCESS_FLAGS
    | sys::IBV_QP_PKEY_INDEX
    | sys::IBV_QP_PORT
    | sys::IBV_QP_QKEY
    | sys::IBV_QP_AV
    | sys::IBV_QP_PATH_MTU
    | sys::IBV_QP_TIMEOUT
    | sys::IBV_QP_RETRY_CNT
    | sys::IBV_QP_RNR_RETRY
    | sys::IBV_QP_RQ_PSN
    | sys::IBV_QP_MAX_QP_RD_ATOMIC
    | sys::IBV_QP_MIN_RNR_TIMER
    | sys::IBV_QP_SQ_PSN
    | sys::IBV_QP_MAX_DEST_RD_ATOMIC
    | sys::IBV_QP_DEST_QPN;

/// `ibv_query_qp`'s answer as rnic's attributes (mask: the attributes queried).
pub fn qp_attr_from_ibv(a: &ibv_qp_attr) -> HwResult<QpAttr> {
    let state = QpState::from_ibv(a.qp_state)
        .ok_or_else(|| HwError::Unsupported(format!("QP state {} from ibv_query_qp", a.qp_state)))?;
    Ok(QpAttr {
        mask: QpAttrMask::from_bits_retain(QUERY_MASK),
        state,
        access: access_from_ibv(a.qp_access_flags),
        path_mtu: a.path_mtu,
        dest_qpn: a.dest_qp_num,
        remote_ip: ip_of_ah_attr(&a.ah_attr),
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        min_rnr_timer: a.min_rnr_timer,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        qkey: a.qkey,
        pkey_index: a.pkey_index,
        port: a.port_num,
    })
}

// ---------------------------------------------------------------------------------------
// Work requests.

pub(crate) fn sge_to_ibv(s: &Sge) -> ibv_sge {
    ibv_sge { addr: s.addr, length: s.length, lkey: s.lkey }
}

fn send_flags_to_ibv(wr: &SendWrRef<'_>) -> u32 {
    // SendFlags has ibv_send_flags' bit values.
    wr.flags.bits()
}

/// One `ibv_send_wr` for `wr` (without its SGE pointer and list link). `ah_for` gives the
/// address handle of a UD destination.
pub fn send_wr_to_ibv(
    wr: &SendWrRef<'_>,
    ah_for: &mut dyn FnMut(&UdDest) -> HwResult<*mut ibv_ah>,
) -> HwResult<ibv_send_wr> {
    let mut r = ibv_send_wr { wr_id: wr.wr_id, send_flags: send_flags_to_ibv(wr), ..Default::default() };
    r.num_sge = libc::c_int::try_from(wr.sg_list.len())
        .map_err(|_| HwError::InvalidArgument { op: "post send", why: "too many SGEs".into() })?;
    match wr.op {
        SendOp::Send => r.opcode = sys::IBV_WR_SEND,
        SendOp::SendWithImm { imm } => {
            r.opcode = sys::IBV_WR_SEND_WITH_IMM;
            r.imm_data = imm.to_be();
        }
        SendOp::RdmaWrite { remote_addr, rkey } => {
            r.opcode = sys::IBV_WR_RDMA_WRITE;
            r.wr.rdma = sys::ibv_send_wr_rdma { remote_addr, rkey };
        }
        SendOp::RdmaWriteWithImm { remote_addr, rkey, imm } => {
            r.opcode = sys::IBV_WR_RDMA_WRITE_WITH_IMM;
            r.imm_data = imm.to_be();
            r.wr.rdma = sys::ibv_send_wr_rdma { remote_addr, rkey };
        }
        SendOp::RdmaRead { remote_addr, rkey } => {
            r.opcode = sys::IBV_WR_RDMA_READ;
            r.wr.rdma = sys::ibv_send_wr_rdma { remote_addr, rkey };
        }
        SendOp::AtomicCmpSwap { remote_addr, rkey, compare, swap } => {
            r.opcode = sys::IBV_WR_ATOMIC_CMP_AND_SWP;
            r.wr.atomic = sys::ibv_send_wr_atomic { remote_addr, compare_add: compare, swap, rkey };
        }
        SendOp::AtomicFetchAdd { remote_addr, rkey, add } => {
            r.opcode = sys::IBV_WR_ATOMIC_FETCH_AND_ADD;
            r.wr.atomic = sys::ibv_send_wr_atomic { remote_addr, compare_add: add, swap: 0, rkey };
        }
        SendOp::SendWithInv { invalidate_rkey } => {
            r.opcode = sys::IBV_WR_SEND_WITH_INV;
            r.imm_data = invalidate_rkey;
        }
        SendOp::LocalInv { rkey } => {
            r.opcode = sys::IBV_WR_LOCAL_INV;
            r.imm_data = rkey;
        }
        op @ (SendOp::AtomicWrite { .. } | SendOp::Flush { .. }) => {
            return Err(HwError::Unsupported(format!(
                "{}: rdma-core 44 posts it only through ibv_qp_ex's ibv_wr_* builders, and Linux 6.1's rxe lacks it",
                op.name()
            )))
        }
        op => return Err(HwError::Unsupported(format!("work request {}", op.name()))),
    }
    if let Some(dest) = &wr.ud {
        if !matches!(wr.op, SendOp::Send | SendOp::SendWithImm { .. }) {
            return Err(HwError::InvalidArgument {
                op: "post send",
                why: format!("{} with a UD destination: UD carries SEND and SEND_WITH_IMM only", wr.op.name()),
            });
        }
        r.wr.ud = sys::ibv_send_wr_ud { ah: ah_for(dest)?, remote_qpn: dest.remote_qpn, remote_qkey: dest.remote_qkey };
    }
    if let Some(remote_srqn) = wr.xrc_srqn {
        // What an XRC initiator's work request names (the device ignores it elsewhere).
        r.qp_type.xrc = sys::ibv_send_wr_xrc { remote_srqn };
    }
    Ok(r)
}

/// A linked `ibv_send_wr` list with its SGE arrays, ready for `ibv_post_send`. The
/// pointers point into this value's own heap buffers: keep it alive across the call.
#[derive(Debug)]
pub struct IbvSendList {
    wrs: Vec<ibv_send_wr>,
    sges: Vec<ibv_sge>,
}

impl IbvSendList {
    /// Converts `wrs` and links them.
    pub fn new<'a, W: Into<SendWrRef<'a>>>(
        wrs: impl IntoIterator<Item = W>,
        ah_for: &mut dyn FnMut(&UdDest) -> HwResult<*mut ibv_ah>,
    ) -> HwResult<IbvSendList> {
        let mut sges = Vec::new();
        let mut raw = Vec::new();
        let mut counts = Vec::new();
        for wr in wrs {
            let wr: SendWrRef<'a> = wr.into();
            raw.push(send_wr_to_ibv(&wr, ah_for)?);
            sges.extend(wr.sg_list.iter().map(sge_to_ibv));
            counts.push(wr.sg_list.len());
        }
        let mut l = IbvSendList { wrs: raw, sges };
        l.link(counts.into_iter());
        Ok(l)
    }

    /// True when the list is empty.
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    fn link(&mut self, counts: impl Iterator<Item = usize>) {
        let base = self.sges.as_mut_ptr();
        let mut at = 0;
        for (r, n) in self.wrs.iter_mut().zip(counts) {
            r.sg_list = if n == 0 { std::ptr::null_mut() } else { base.wrapping_add(at) };
            at += n;
        }
        let wbase = self.wrs.as_mut_ptr();
        let len = self.wrs.len();
        for (i, r) in self.wrs.iter_mut().enumerate() {
            r.next = if i + 1 < len { wbase.wrapping_add(i + 1) } else { std::ptr::null_mut() };
        }
    }

    /// The head of the list (null when empty).
    pub fn head(&mut self) -> *mut ibv_send_wr {
        if self.wrs.is_empty() {
            std::ptr::null_mut()
        } else {
            self.wrs.as_mut_ptr()
        }
    }

    /// The first entry's id (0 when empty).
    pub fn first_id(&self) -> u64 {
        self.wrs.first().map_or(0, |w| w.wr_id)
    }

    /// Which entry `bad` (the provider's `bad_wr`) is, and its id.
    pub fn index_of(&self, bad: *const ibv_send_wr) -> Option<(usize, u64)> {
        self.wrs.iter().position(|w| std::ptr::eq(w, bad)).map(|i| (i, self.wrs[i].wr_id))
    }
}

/// A linked `ibv_recv_wr` list with its SGE arrays (see [`IbvSendList`]).
#[derive(Debug)]
pub struct IbvRecvList {
    wrs: Vec<ibv_recv_wr>,
    sges: Vec<ibv_sge>,
}

impl IbvRecvList {
    /// Converts `wrs` and links them.
    pub fn new<'a, W: Into<RecvWrRef<'a>>>(wrs: impl IntoIterator<Item = W>) -> HwResult<IbvRecvList> {
        let wrs: Vec<RecvWrRef<'a>> = wrs.into_iter().map(Into::into).collect();
        let mut sges = Vec::with_capacity(wrs.iter().map(|w| w.sg_list.len()).sum());
        let mut raw = Vec::with_capacity(wrs.len());
        for wr in &wrs {
            let num_sge = libc::c_int::try_from(wr.sg_list.len())
                .map_err(|_| HwError::InvalidArgument { op: "post receive", why: "too many SGEs".into() })?;
            raw.push(ibv_recv_wr { wr_id: wr.wr_id, num_sge, ..Default::default() });
            sges.extend(wr.sg_list.iter().map(sge_to_ibv));
        }
        let mut l = IbvRecvList { wrs: raw, sges };
        let base = l.sges.as_mut_ptr();
        let mut at = 0;
        for (r, w) in l.wrs.iter_mut().zip(&wrs) {
            r.sg_list = if w.sg_list.is_empty() { std::ptr::null_mut() } else { base.wrapping_add(at) };
            at += w.sg_list.len();
        }
        let wbase = l.wrs.as_mut_ptr();
        let len = l.wrs.len();
        for (i, r) in l.wrs.iter_mut().enumerate() {
            r.next = if i + 1 < len { wbase.wrapping_add(i + 1) } else { std::ptr::null_mut() };
        }
        Ok(l)
    }

    /// True when the list is empty.
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    /// The head of the list (null when empty).
    pub fn head(&mut self) -> *mut ibv_recv_wr {
        if self.wrs.is_empty() {
            std::ptr::null_mut()
        } else {
            self.wrs.as_mut_ptr()
        }
    }

    /// The first entry's id (0 when empty).
    pub fn first_id(&self) -> u64 {
        self.wrs.first().map_or(0, |w| w.wr_id)
    }

    /// Which entry `bad` is, and its id.
    pub fn index_of(&self, bad: *const ibv_recv_wr) -> Option<(usize, u64)> {
        self.wrs.iter().position(|w| std::ptr::eq(w, bad)).map(|i| (i, self.wrs[i].wr_id))
    }
}

// ---------------------------------------------------------------------------------------
// Completions.

/// `ibv_wc_status` as rnic's. Statuses rnic's type lacks (EEC and RDD errors from
/// reliable datagram, MW bind, remote abort, fatal, response timeout, tag matching)
/// become `GeneralErr`; `ibv_wc_status_str` of the raw value says which it was.
pub fn wc_status_from_ibv(s: u32) -> WcStatus {
    match s {
        sys::IBV_WC_SUCCESS => WcStatus::Success,
        sys::IBV_WC_LOC_LEN_ERR => WcStatus::LocLenErr,
        sys::IBV_WC_LOC_QP_OP_ERR => WcStatus::LocQpOpErr,
        sys::IBV_WC_LOC_PROT_ERR => WcStatus::LocProtErr,
        sys::IBV_WC_WR_FLUSH_ERR => WcStatus::WrFlushErr,
        sys::IBV_WC_BAD_RESP_ERR => WcStatus::BadRespErr,
        sys::IBV_WC_LOC_ACCESS_ERR => WcStatus::LocAccessErr,
        sys::IBV_WC_REM_INV_REQ_ERR => WcStatus::RemInvReqErr,
        sys::IBV_WC_REM_ACCESS_ERR => WcStatus::RemAccessErr,
        sys::IBV_WC_REM_OP_ERR => WcStatus::RemOpErr,
        sys::IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExcErr,
        sys::IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
        sys::IBV_WC_MW_BIND_ERR => WcStatus::MwBindErr,
        _ => WcStatus::GeneralErr,
    }
}

/// `ibv_wc_opcode` as rnic's. Verbs define the opcode only for successful completions; an
/// error completion's unknown opcode becomes `Recv` when it has the receive bit, else
/// `Send`.
pub fn wc_opcode_from_ibv(op: u32) -> WcOpcode {
    match op {
        sys::IBV_WC_SEND => WcOpcode::Send,
        sys::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
        sys::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
        sys::IBV_WC_COMP_SWAP => WcOpcode::CompSwap,
        sys::IBV_WC_FETCH_ADD => WcOpcode::FetchAdd,
        sys::IBV_WC_LOCAL_INV => WcOpcode::LocalInv,
        sys::IBV_WC_BIND_MW => WcOpcode::BindMw,
        sys::IBV_WC_ATOMIC_WRITE => WcOpcode::AtomicWrite,
        sys::IBV_WC_RECV => WcOpcode::Recv,
        sys::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
        o if o & sys::IBV_WC_RECV != 0 => WcOpcode::Recv,
        _ => WcOpcode::Send,
    }
}

/// `struct ibv_wc` as rnic's completion.
pub fn wc_from_ibv(wc: &ibv_wc) -> WorkCompletion {
    // The same bit values (IBV_WC_GRH, _WITH_IMM, _WITH_INV); others are not rnic's.
    let flags = WcFlags::from_bits_truncate(wc.wc_flags);
    WorkCompletion {
        wr_id: wc.wr_id,
        status: wc_status_from_ibv(wc.status),
        opcode: wc_opcode_from_ibv(wc.opcode),
        byte_len: wc.byte_len,
        imm_data: if flags.contains(WcFlags::WITH_IMM) { u32::from_be(wc.imm_data) } else { 0 },
        qp_num: wc.qp_num,
        src_qp: wc.src_qp,
        wc_flags: flags,
        invalidated_rkey: if flags.contains(WcFlags::WITH_INV) { wc.imm_data } else { 0 },
        pkey_index: wc.pkey_index,
        // `struct ibv_wc` does not carry the kernel's network_hdr_type (only mlx5 encodes
        // it in `sl`); the GRH area itself says which header it holds.
        network_hdr: NetworkHdr::None,
        // `struct ibv_wc` carries no timestamp (an extended CQ would).
        timestamp_ns: 0,
    }
}

// ---------------------------------------------------------------------------------------
// Device and port attributes, events.

fn atomic_cap_name(c: u32) -> &'static str {
    match c {
        sys::IBV_ATOMIC_NONE => "ATOMIC_NONE",
        sys::IBV_ATOMIC_HCA => "ATOMIC_HCA",
        sys::IBV_ATOMIC_GLOB => "ATOMIC_GLOB",
        _ => "ATOMIC_UNKNOWN",
    }
}

fn nonneg(v: libc::c_int) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

/// `ibv_device_attr` as rnic's. `max_inline_data` is not a device attribute in verbs
/// (a QP's granted `cap.max_inline_data` is): it is 0 here.
pub fn device_attr(a: &sys::ibv_device_attr) -> DeviceAttr {
    let fw: Vec<u8> = a.fw_ver.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    DeviceAttr {
        fw_ver: String::from_utf8_lossy(&fw).into_owned(),
        node_guid: u64::from_be(a.node_guid),
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        max_qp: nonneg(a.max_qp),
        max_qp_wr: nonneg(a.max_qp_wr),
        max_sge: nonneg(a.max_sge),
        max_cq: nonneg(a.max_cq),
        max_cqe: nonneg(a.max_cqe),
        max_mr: nonneg(a.max_mr),
        max_mr_size: a.max_mr_size,
        page_size_cap: a.page_size_cap,
        max_pd: nonneg(a.max_pd),
        max_qp_rd_atom: nonneg(a.max_qp_rd_atom),
        max_qp_init_rd_atom: nonneg(a.max_qp_init_rd_atom),
        atomic_cap: atomic_cap_name(a.atomic_cap),
        max_srq: nonneg(a.max_srq),
        max_srq_wr: nonneg(a.max_srq_wr),
        max_srq_sge: nonneg(a.max_srq_sge),
        max_inline_data: 0,
        phys_port_cnt: a.phys_port_cnt,
    }
}

fn port_state_name(s: u32) -> &'static str {
    match s {
        sys::IBV_PORT_NOP => "PORT_NOP",
        sys::IBV_PORT_DOWN => "PORT_DOWN",
        sys::IBV_PORT_INIT => "PORT_INIT",
        sys::IBV_PORT_ARMED => "PORT_ARMED",
        sys::IBV_PORT_ACTIVE => "PORT_ACTIVE",
        sys::IBV_PORT_ACTIVE_DEFER => "PORT_ACTIVE_DEFER",
        _ => "PORT_UNKNOWN",
    }
}

/// `ibv_port_attr` as rnic's; an MTU code outside 1..=5 is an error naming it.
pub fn port_attr(a: &sys::ibv_port_attr) -> HwResult<PortAttr> {
    let mtu = |code: u32| {
        PathMtu::from_ibv(code).ok_or_else(|| HwError::Unsupported(format!("port MTU code {code} (not 1..=5)")))
    };
    Ok(PortAttr {
        state: port_state_name(a.state),
        max_mtu: mtu(a.max_mtu)?,
        active_mtu: mtu(a.active_mtu)?,
        gid_tbl_len: nonneg(a.gid_tbl_len),
        link_layer: match a.link_layer {
            sys::IBV_LINK_LAYER_ETHERNET => "Ethernet",
            sys::IBV_LINK_LAYER_INFINIBAND => "InfiniBand",
            _ => "Unspecified",
        },
        lid: a.lid,
    })
}

/// An async event as rnic's [`AsyncEvent`], when rnic's type has it (QP fatal, QP access
/// and request errors, CQ error, SRQ limit, port active); `None` for the others
/// (COMM_EST, SQ drained, port error, ...), which [`HwAsyncEvent`] still describes.
pub fn async_event(e: &HwAsyncEvent) -> Option<AsyncEvent> {
    match (e.event_type, e.element) {
        (sys::IBV_EVENT_QP_FATAL, HwEventElement::Qp(qpn)) => Some(AsyncEvent::QpFatal { qpn }),
        (sys::IBV_EVENT_QP_ACCESS_ERR, HwEventElement::Qp(qpn)) => Some(AsyncEvent::QpAccessErr { qpn }),
        (sys::IBV_EVENT_QP_REQ_ERR, HwEventElement::Qp(qpn)) => Some(AsyncEvent::QpReqErr { qpn }),
        (sys::IBV_EVENT_CQ_ERR, HwEventElement::Cq(cq)) => Some(AsyncEvent::CqError { cq }),
        (sys::IBV_EVENT_SRQ_LIMIT_REACHED, HwEventElement::Srq(srq)) => Some(AsyncEvent::SrqLimitReached { srq }),
        (sys::IBV_EVENT_PORT_ACTIVE, HwEventElement::Port(port)) => Some(AsyncEvent::PortActive { port }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SendWr;

    fn no_ah(_: &UdDest) -> HwResult<*mut ibv_ah> {
        panic!("no UD here")
    }

    #[test]
    fn send_wr_fields_land_where_verbs_reads_them() {
        let wr = SendWr::new(
            7,
            SendOp::AtomicCmpSwap { remote_addr: 0x1000, rkey: 0x55, compare: 3, swap: 9 },
            vec![Sge { addr: 0x2000, length: 8, lkey: 0x66 }],
        );
        let mut l = IbvSendList::new(std::slice::from_ref(&wr), &mut no_ah).expect("converts");
        let head = l.head();
        // SAFETY: the list is alive and `head` points to its first entry.
        let r = unsafe { &*head };
        assert_eq!((r.wr_id, r.opcode, r.num_sge), (7, sys::IBV_WR_ATOMIC_CMP_AND_SWP, 1));
        assert_eq!(r.send_flags, sys::IBV_SEND_SIGNALED);
        // SAFETY: `atomic` is the member this opcode uses.
        let a = unsafe { r.wr.atomic };
        assert_eq!((a.remote_addr, a.compare_add, a.swap, a.rkey), (0x1000, 3, 9, 0x55));
        // SAFETY: one SGE at `sg_list`.
        let s = unsafe { *r.sg_list };
        assert_eq!((s.addr, s.length, s.lkey), (0x2000, 8, 0x66));
        assert!(r.next.is_null());
    }

    #[test]
    fn a_list_is_linked_in_order_with_its_own_sges() {
        let wrs = [
            SendWr::new(1, SendOp::SendWithImm { imm: 0x0102_0304 }, vec![Sge { addr: 1, length: 1, lkey: 1 }]),
            SendWr::new(2, SendOp::RdmaWrite { remote_addr: 9, rkey: 8 }, vec![]),
            SendWr::send(3, vec![Sge { addr: 2, length: 2, lkey: 2 }, Sge { addr: 3, length: 3, lkey: 3 }])
                .unsignaled(),
        ];
        let mut l = IbvSendList::new(&wrs, &mut no_ah).expect("converts");
        let mut p = l.head();
        let mut seen = Vec::new();
        while !p.is_null() {
            // SAFETY: every `next` points into the live list or is null.
            let r = unsafe { &*p };
            let sges: Vec<u64> = (0..r.num_sge as usize)
                // SAFETY: `num_sge` entries at `sg_list`.
                .map(|i| unsafe { (*r.sg_list.add(i)).addr })
                .collect();
            seen.push((r.wr_id, r.imm_data, sges, r.send_flags));
            p = r.next;
        }
        assert_eq!(
            seen,
            vec![
                (1, 0x0102_0304u32.to_be(), vec![1], sys::IBV_SEND_SIGNALED),
                (2, 0, vec![], sys::IBV_SEND_SIGNALED),
                (3, 0, vec![2, 3], 0)
            ]
        );
        assert_eq!(l.index_of(l.wrs.as_ptr().wrapping_add(2)), Some((2, 3)));
    }

    #[test]
    fn flush_and_atomic_write_are_refused_by_name() {
        let wr = SendWr::new(1, SendOp::AtomicWrite { remote_addr: 0, rkey: 0, value: 1 }, vec![]);
        let e = IbvSendList::new(&[wr], &mut no_ah).expect_err("refused");
        assert!(e.to_string().contains("ATOMIC_WRITE"), "{e}");
        assert!(access_to_ibv(AccessFlags::LOCAL_WRITE | AccessFlags::FLUSH_GLOBAL).is_err());
        assert_eq!(access_to_ibv(AccessFlags::from_bits_truncate(0xf)).ok(), Some(0xf));
    }

    #[test]
    fn completions_convert_byte_orders_and_flags() {
        let wc = ibv_wc {
            wr_id: 5,
            status: sys::IBV_WC_SUCCESS,
            opcode: sys::IBV_WC_RECV_RDMA_WITH_IMM,
            byte_len: 100,
            imm_data: 0xdead_beefu32.to_be(),
            qp_num: 0x11,
            src_qp: 0x12,
            wc_flags: sys::IBV_WC_WITH_IMM | sys::IBV_WC_GRH,
            ..Default::default()
        };
        let w = wc_from_ibv(&wc);
        assert_eq!((w.wr_id, w.opcode, w.imm_data, w.byte_len), (5, WcOpcode::RecvRdmaWithImm, 0xdead_beef, 100));
        assert!(
            w.wc_flags.contains(WcFlags::WITH_IMM)
                && w.wc_flags.contains(WcFlags::GRH)
                && !w.wc_flags.contains(WcFlags::WITH_INV)
        );
        assert_eq!(wc_status_from_ibv(sys::IBV_WC_REM_ACCESS_ERR), WcStatus::RemAccessErr);
        assert_eq!(wc_status_from_ibv(sys::IBV_WC_FATAL_ERR), WcStatus::GeneralErr);
    }

    #[test]
    fn qp_attrs_round_trip_and_av_needs_an_address() {
        let a = QpAttr {
            state: QpState::Rtr,
            dest_qpn: 0x22,
            rq_psn: 0x123,
            remote_ip: Some("10.77.0.11".parse().expect("ip")),
            path_mtu: PathMtu::Mtu1024.to_ibv(),
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
            ..QpAttr::default()
        }
        .required_from(QpType::Rc, QpState::Init)
        .expect("legal");
        let (raw, mask) = qp_attr_to_ibv(&a, 1).expect("converts");
        assert_eq!(mask as u32, a.mask.bits());
        assert_eq!(raw.ah_attr.is_global, 1);
        assert_eq!(raw.ah_attr.grh.sgid_index, 1);
        assert_eq!(raw.ah_attr.grh.dgid.bytes(), Gid::from_ip(a.remote_ip.expect("ip")).0);
        let back = qp_attr_from_ibv(&raw).expect("back");
        assert_eq!((back.state, back.dest_qpn, back.rq_psn, back.remote_ip), (a.state, 0x22, 0x123, a.remote_ip));
        let no_ip = QpAttr { remote_ip: None, ..a };
        assert!(qp_attr_to_ibv(&no_ip, 1).is_err());
    }
}
