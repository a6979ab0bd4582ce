//! Work requests as the application posts them (the shapes of `ibv_send_wr` /
//! `ibv_recv_wr`), and the completion records the NIC writes back (`ibv_wc`).

use std::fmt;
use std::net::IpAddr;

/// A scatter/gather element: `length` bytes at `addr` in the region named by `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Number of bytes.
    pub length: u32,
    /// Local key of the memory region holding the bytes.
    pub lkey: u32,
}

/// What a send work request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendOp {
    /// SEND: the bytes land in the peer's next receive buffer.
    Send,
    /// SEND with 32 bits of immediate data delivered in the peer's completion.
    SendWithImm {
        /// Immediate data, as the application sees it (host order).
        imm: u32,
    },
    /// RDMA WRITE into the peer's memory; the peer's CPU sees nothing.
    RdmaWrite {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA WRITE that also consumes a receive WQE at the peer and completes there with
    /// the immediate data.
    RdmaWriteWithImm {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate data.
        imm: u32,
    },
    /// RDMA READ from the peer's memory into the local SGEs.
    RdmaRead {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// ATOMIC COMPARE & SWAP on the 8 bytes at `remote_addr` (8-byte aligned): if they
    /// equal `compare` they become `swap`. The original value lands in the local SGE
    /// (exactly 8 bytes, host byte order). `IBV_WR_ATOMIC_CMP_AND_SWP`.
    AtomicCmpSwap {
        /// Remote virtual address (8-byte aligned).
        remote_addr: u64,
        /// Remote key (the region needs REMOTE_ATOMIC).
        rkey: u32,
        /// Value compared with the target.
        compare: u64,
        /// Value stored when they are equal.
        swap: u64,
    },
    /// ATOMIC FETCH & ADD on the 8 bytes at `remote_addr` (8-byte aligned, wrapping
    /// add); the original value lands in the local SGE. `IBV_WR_ATOMIC_FETCH_AND_ADD`.
    AtomicFetchAdd {
        /// Remote virtual address (8-byte aligned).
        remote_addr: u64,
        /// Remote key (the region needs REMOTE_ATOMIC).
        rkey: u32,
        /// Addend.
        add: u64,
    },
    /// SEND that also invalidates the peer's memory region named by `invalidate_rkey`
    /// (IETH); the peer's receive completion carries the key. `IBV_WR_SEND_WITH_INV`.
    SendWithInv {
        /// R_Key the responder invalidates.
        invalidate_rkey: u32,
    },
    /// Invalidates a local memory region (lkey or rkey, they are equal) or a type 2
    /// memory window; a local operation that sends nothing and completes in order.
    /// `IBV_WR_LOCAL_INV`.
    LocalInv {
        /// The key to invalidate.
        rkey: u32,
    },
    /// Binds the memory window whose handle is `rkey >> 8` to a range of a region, with
    /// the key `rkey` (the window's index; the low byte is the consumer's): a local
    /// operation that sends nothing and completes in order (`IBV_WR_BIND_MW`, and
    /// `ibv_bind_mw` for a type 1 window). Completes with `MW_BIND_ERR` where IBA 10.6.7.2
    /// refuses the bind.
    BindMw {
        /// The window's new key.
        rkey: u32,
        /// What it is bound to (a zero length unbinds a type 1 window).
        bind: crate::mr::Bind,
    },
    /// ATOMIC WRITE (IBA 1.5): the 8 bytes of `value` (host byte order, as
    /// `ibv_wr_atomic_write` copies them from memory) are written at once to
    /// `remote_addr` (8-byte aligned; the region needs REMOTE_WRITE). No local SGE.
    AtomicWrite {
        /// Remote virtual address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// The value.
        value: u64,
    },
    /// FLUSH (IBA 1.5): makes earlier writes to the range (or the whole region) globally
    /// visible. `ibv_wr_flush`. No local SGE.
    Flush {
        /// Remote virtual address of the range.
        remote_addr: u64,
        /// Remote key (the region needs FLUSH_GLOBAL / FLUSH_PERSISTENT for `placement`).
        rkey: u32,
        /// Bytes of the range (ignored for a whole-region flush).
        len: u32,
        /// Placement type bits: [`FLUSH_GLOBAL`] and/or [`FLUSH_PERSISTENT`].
        placement: u8,
        /// Flush the whole memory region rather than the range (`IBV_FLUSH_MR`).
        whole_region: bool,
    },
}

/// FLUSH placement type: global visibility (`IBV_FLUSH_GLOBAL`).
pub const FLUSH_GLOBAL: u8 = 1;
/// FLUSH placement type: persistence (`IBV_FLUSH_PERSISTENT`).
pub const FLUSH_PERSISTENT: u8 = 2;

impl SendOp {
    /// The completion opcode this request completes with.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. } => WcOpcode::Send,
            SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
            SendOp::AtomicCmpSwap { .. } => WcOpcode::CompSwap,
            SendOp::AtomicFetchAdd { .. } => WcOpcode::FetchAdd,
            SendOp::LocalInv { .. } => WcOpcode::LocalInv,
            SendOp::BindMw { .. } => WcOpcode::BindMw,
            SendOp::AtomicWrite { .. } => WcOpcode::AtomicWrite,
            SendOp::Flush { .. } => WcOpcode::Flush,
        }
    }

    /// True for operations whose local buffers the NIC writes.
    pub fn writes_local(&self) -> bool {
        matches!(self, SendOp::RdmaRead { .. } | SendOp::AtomicCmpSwap { .. } | SendOp::AtomicFetchAdd { .. })
    }

    /// COMPARE & SWAP or FETCH & ADD (answered by an ATOMIC ACKNOWLEDGE).
    pub fn is_atomic(&self) -> bool {
        matches!(self, SendOp::AtomicCmpSwap { .. } | SendOp::AtomicFetchAdd { .. })
    }

    /// One request packet answered by responses, limited by `max_rd_atomic` and kept
    /// by the responder as a resource: READ, the atomics, ATOMIC WRITE and FLUSH.
    pub fn is_rd_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::RdmaRead { .. }
                | SendOp::AtomicCmpSwap { .. }
                | SendOp::AtomicFetchAdd { .. }
                | SendOp::AtomicWrite { .. }
                | SendOp::Flush { .. }
        )
    }

    /// The name, as verbs spell it (`IBV_WR_SEND`...).
    pub fn name(&self) -> &'static str {
        match self {
            SendOp::Send => "SEND",
            SendOp::SendWithImm { .. } => "SEND_WITH_IMM",
            SendOp::RdmaWrite { .. } => "RDMA_WRITE",
            SendOp::RdmaWriteWithImm { .. } => "RDMA_WRITE_WITH_IMM",
            SendOp::RdmaRead { .. } => "RDMA_READ",
            SendOp::AtomicCmpSwap { .. } => "ATOMIC_CMP_AND_SWP",
            SendOp::AtomicFetchAdd { .. } => "ATOMIC_FETCH_AND_ADD",
            SendOp::SendWithInv { .. } => "SEND_WITH_INV",
            SendOp::LocalInv { .. } => "LOCAL_INV",
            SendOp::BindMw { .. } => "BIND_MW",
            SendOp::AtomicWrite { .. } => "ATOMIC_WRITE",
            SendOp::Flush { .. } => "FLUSH",
        }
    }
}

bitflags::bitflags! {
    /// Flags of a send work request (`ibv_send_flags`, same bit values).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u32 {
        /// Wait for earlier RDMA READs to complete before starting. `IBV_SEND_FENCE`.
        const FENCE = 1;
        /// Generate a completion even if the QP was created without `sq_sig_all`.
        /// `IBV_SEND_SIGNALED`.
        const SIGNALED = 1 << 1;
        /// Set the solicited-event bit on the last packet. `IBV_SEND_SOLICITED`.
        const SOLICITED = 1 << 2;
        /// Copy the SGE bytes at post time (no lkey needed; at most `max_inline_data`).
        /// `IBV_SEND_INLINE`.
        const INLINE = 1 << 3;
    }
}

/// Where a UD send goes (`ibv_send_wr.wr.ud`: the address handle, remote QPN and Q_Key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdDest {
    /// The destination's address (the IP of its GID: the address handle).
    pub dst: IpAddr,
    /// The destination QP.
    pub remote_qpn: u32,
    /// The Q_Key to put in the DETH. A value with the high bit set means "use the sending
    /// QP's own Q_Key" (IBA 10.2.5, C10-15; [`UdDest::USE_QP_QKEY`]).
    pub remote_qkey: u32,
}

impl UdDest {
    /// A Q_Key with this bit set is replaced by the sending QP's Q_Key (IBA C10-15): such
    /// "controlled" Q_Keys can only be sent by a QP that was given one by privileged code.
    pub const USE_QP_QKEY: u32 = 0x8000_0000;

    /// The Q_Key that goes on the wire for a QP whose own Q_Key is `qp_qkey`.
    pub fn wire_qkey(&self, qp_qkey: u32) -> u32 {
        if self.remote_qkey & Self::USE_QP_QKEY != 0 {
            qp_qkey
        } else {
            self.remote_qkey
        }
    }
}

/// A send work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Local buffers: gathered from for SEND / WRITE, scattered into for READ.
    pub sg_list: Vec<Sge>,
    /// Flags.
    pub flags: SendFlags,
    /// UD only: the destination (required on a UD QP, refused on a connected one).
    pub ud: Option<UdDest>,
}

/// A send work request that borrows its scatter/gather list: what [`SendWr`] says,
/// without owning a `Vec`. Post a list of them in one call, or build them from another
/// representation (a C `ibv_send_wr`) without allocating. Every posting call takes either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWrRef<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Local buffers.
    pub sg_list: &'a [Sge],
    /// Flags.
    pub flags: SendFlags,
    /// UD only: the destination.
    pub ud: Option<UdDest>,
    /// XRC initiator only: the number of the remote XRC SRQ the message is for
    /// (`qp_type.xrc.remote_srqn`, `ibv_wr_set_xrc_srqn`), carried in every request
    /// packet's XRCETH.
    pub xrc_srqn: Option<u32>,
}

impl<'a> SendWrRef<'a> {
    /// The same work request for the remote XRC SRQ numbered `srqn` (an XRC initiator's
    /// `qp_type.xrc.remote_srqn`; IBA Annex A14: every request packet's XRCETH carries it).
    #[must_use]
    pub fn to_srq(mut self, srqn: u32) -> SendWrRef<'a> {
        self.xrc_srqn = Some(srqn);
        self
    }
}

impl<'a> From<&'a SendWr> for SendWrRef<'a> {
    fn from(w: &'a SendWr) -> SendWrRef<'a> {
        SendWrRef { wr_id: w.wr_id, op: w.op, sg_list: &w.sg_list, flags: w.flags, ud: w.ud, xrc_srqn: None }
    }
}

impl<'a> From<&'a mut SendWr> for SendWrRef<'a> {
    fn from(w: &'a mut SendWr) -> SendWrRef<'a> {
        SendWrRef::from(&*w)
    }
}

impl<'a> From<&'a SendWrRef<'a>> for SendWrRef<'a> {
    fn from(w: &'a SendWrRef<'a>) -> SendWrRef<'a> {
        *w
    }
}

/// A receive work request that borrows its scatter list (see [`SendWrRef`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWrRef<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Buffers an incoming SEND is scattered into, in order.
    pub sg_list: &'a [Sge],
}

impl<'a> From<&'a RecvWr> for RecvWrRef<'a> {
    fn from(w: &'a RecvWr) -> RecvWrRef<'a> {
        RecvWrRef { wr_id: w.wr_id, sg_list: &w.sg_list }
    }
}

impl<'a> From<&'a mut RecvWr> for RecvWrRef<'a> {
    fn from(w: &'a mut RecvWr) -> RecvWrRef<'a> {
        RecvWrRef::from(&*w)
    }
}

impl<'a> From<&'a RecvWrRef<'a>> for RecvWrRef<'a> {
    fn from(w: &'a RecvWrRef<'a>) -> RecvWrRef<'a> {
        *w
    }
}

impl SendWr {
    /// A signaled SEND of `sg_list`.
    pub fn send(wr_id: u64, sg_list: Vec<Sge>) -> SendWr {
        SendWr::new(wr_id, SendOp::Send, sg_list)
    }

    /// A signaled work request.
    pub fn new(wr_id: u64, op: SendOp, sg_list: Vec<Sge>) -> SendWr {
        SendWr { wr_id, op, sg_list, flags: SendFlags::SIGNALED, ud: None }
    }

    /// The same request, sent to `dest` (UD QPs).
    #[must_use]
    pub fn to(mut self, dest: UdDest) -> SendWr {
        self.ud = Some(dest);
        self
    }

    /// A signaled COMPARE & SWAP of the 8 bytes at `remote_addr`; the original value is
    /// written to `result` (an 8-byte SGE).
    pub fn compare_swap(wr_id: u64, result: Sge, remote_addr: u64, rkey: u32, compare: u64, swap: u64) -> SendWr {
        SendWr::new(wr_id, SendOp::AtomicCmpSwap { remote_addr, rkey, compare, swap }, vec![result])
    }

    /// A signaled FETCH & ADD of `add` to the 8 bytes at `remote_addr`; the original
    /// value is written to `result` (an 8-byte SGE).
    pub fn fetch_add(wr_id: u64, result: Sge, remote_addr: u64, rkey: u32, add: u64) -> SendWr {
        SendWr::new(wr_id, SendOp::AtomicFetchAdd { remote_addr, rkey, add }, vec![result])
    }

    /// A signaled LOCAL_INV of `rkey`.
    pub fn local_inv(wr_id: u64, rkey: u32) -> SendWr {
        SendWr::new(wr_id, SendOp::LocalInv { rkey }, Vec::new())
    }

    /// The same request, unsignaled.
    #[must_use]
    pub fn unsignaled(mut self) -> SendWr {
        self.flags.set(SendFlags::SIGNALED, false);
        self
    }

    /// The same request, with data copied at post time.
    #[must_use]
    pub fn inline(mut self) -> SendWr {
        self.flags.set(SendFlags::INLINE, true);
        self
    }
}

/// A receive work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Buffers an incoming SEND is scattered into, in order.
    pub sg_list: Vec<Sge>,
}

/// Completion status (`enum ibv_wc_status`). A failed completion is data, not an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum WcStatus {
    /// The work request completed.
    #[default]
    Success,
    /// A local length error: an incoming message did not fit the receive buffers.
    LocLenErr,
    /// A local QP operation error.
    LocQpOpErr,
    /// A local protection error: an SGE failed its lkey check.
    LocProtErr,
    /// The QP entered the error state before this work request completed.
    WrFlushErr,
    /// The responder returned an unexpected response.
    BadRespErr,
    /// A local access error at the responder (e.g. a receive buffer not writable).
    LocAccessErr,
    /// The responder NAKed the request as invalid (NAK code 1).
    RemInvReqErr,
    /// The responder NAKed the request for an R_Key, PD, access or bounds violation
    /// (NAK code 2).
    RemAccessErr,
    /// The responder could not complete the request (NAK code 3).
    RemOpErr,
    /// The transport retry counter ran out.
    RetryExcErr,
    /// The RNR retry counter ran out.
    RnrRetryExcErr,
    /// The completion queue overflowed.
    GeneralErr,
    /// A memory window bind was refused (IBA 10.6.7.2). `IBV_WC_MW_BIND_ERR`.
    MwBindErr,
}

impl WcStatus {
    /// The name verbs prints (`ibv_wc_status_str` spelling, abbreviated).
    pub fn name(self) -> &'static str {
        match self {
            WcStatus::Success => "SUCCESS",
            WcStatus::LocLenErr => "LOC_LEN_ERR",
            WcStatus::LocQpOpErr => "LOC_QP_OP_ERR",
            WcStatus::LocProtErr => "LOC_PROT_ERR",
            WcStatus::WrFlushErr => "WR_FLUSH_ERR",
            WcStatus::BadRespErr => "BAD_RESP_ERR",
            WcStatus::LocAccessErr => "LOC_ACCESS_ERR",
            WcStatus::RemInvReqErr => "REM_INV_REQ_ERR",
            WcStatus::RemAccessErr => "REM_ACCESS_ERR",
            WcStatus::RemOpErr => "REM_OP_ERR",
            WcStatus::RetryExcErr => "RETRY_EXC_ERR",
            WcStatus::RnrRetryExcErr => "RNR_RETRY_EXC_ERR",
            WcStatus::GeneralErr => "GENERAL_ERR",
            WcStatus::MwBindErr => "MW_BIND_ERR",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Completion opcode (`enum ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum WcOpcode {
    /// A SEND (with or without immediate) completed at the requester.
    #[default]
    Send,
    /// An RDMA WRITE completed at the requester.
    RdmaWrite,
    /// An RDMA READ completed at the requester.
    RdmaRead,
    /// A SEND arrived in a receive buffer.
    Recv,
    /// An RDMA WRITE with immediate arrived (consuming a receive WQE).
    RecvRdmaWithImm,
    /// An ATOMIC COMPARE & SWAP completed at the requester.
    CompSwap,
    /// An ATOMIC FETCH & ADD completed at the requester.
    FetchAdd,
    /// A LOCAL_INV completed.
    LocalInv,
    /// A memory window bind completed.
    BindMw,
    /// An ATOMIC WRITE completed at the requester.
    AtomicWrite,
    /// A FLUSH completed at the requester.
    Flush,
}

impl WcOpcode {
    /// The name verbs uses.
    pub fn name(self) -> &'static str {
        match self {
            WcOpcode::Send => "SEND",
            WcOpcode::RdmaWrite => "RDMA_WRITE",
            WcOpcode::RdmaRead => "RDMA_READ",
            WcOpcode::Recv => "RECV",
            WcOpcode::RecvRdmaWithImm => "RECV_RDMA_WITH_IMM",
            WcOpcode::CompSwap => "COMP_SWAP",
            WcOpcode::FetchAdd => "FETCH_ADD",
            WcOpcode::LocalInv => "LOCAL_INV",
            WcOpcode::BindMw => "BIND_MW",
            WcOpcode::AtomicWrite => "ATOMIC_WRITE",
            WcOpcode::Flush => "FLUSH",
        }
    }
}

bitflags::bitflags! {
    /// Work completion flags (`ibv_wc_flags`, same bit values).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct WcFlags: u32 {
        /// The first 40 bytes of the receive buffer hold a GRH (UD). `IBV_WC_GRH`.
        const GRH = 1;
        /// `imm_data` is valid. `IBV_WC_WITH_IMM`.
        const WITH_IMM = 1 << 1;
        /// `invalidated_rkey` is valid. `IBV_WC_WITH_INV`.
        const WITH_INV = 1 << 3;
    }
}

/// A work completion (`struct ibv_wc`). `Default` is a zeroed one (wr_id 0, SEND,
/// success), for buffers handed to `poll`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    /// The work request's id.
    pub wr_id: u64,
    /// Success or the reason for failure.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Bytes transferred (receive side: bytes placed in the buffers).
    pub byte_len: u32,
    /// Immediate data (valid with `wc_flags.contains(WcFlags::WITH_IMM)`).
    pub imm_data: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote QP number (UD; for RC the connected QP).
    pub src_qp: u32,
    /// Flags.
    pub wc_flags: WcFlags,
    /// The R_Key invalidated by a SEND with Invalidate (valid with `wc_flags.contains(WcFlags::WITH_INV)`).
    pub invalidated_rkey: u32,
    /// P_Key index of the receiving QP (UD receive completions).
    pub pkey_index: u16,
    /// Which L3 header fills the GRH area (UD receive completions; the kernel's
    /// `ib_wc.network_hdr_type`).
    pub network_hdr: NetworkHdr,
    /// When the completion entered its CQ, in nanoseconds of `CLOCK_MONOTONIC` (the
    /// device's clock: `hca_core_clock` 1 GHz); 0 unless the CQ stamps its completions
    /// ([`Cq::stamp_completions`](crate::cq::Cq::stamp_completions)).
    pub timestamp_ns: u64,
}

/// The L3 header a UD receive's 40-byte GRH area holds (`enum rdma_network_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NetworkHdr {
    /// No GRH area (not a UD receive).
    #[default]
    None,
    /// RoCEv2 over IPv4: the IPv4 header in the area's last 20 bytes.
    Ipv4,
    /// RoCEv2 over IPv6: the IPv6 header fills the area.
    Ipv6,
}

impl WorkCompletion {
    /// `Ok(self)` for a successful completion, `Err(status)` for a failed one, so a
    /// poller can use `?` (a failed completion is data, not an error of the poll).
    pub fn result(self) -> Result<WorkCompletion, WcStatus> {
        if self.status == WcStatus::Success {
            Ok(self)
        } else {
            Err(self.status)
        }
    }

    /// A completion with no byte count, immediate, source QP or flags; set the fields
    /// that apply with struct update syntax.
    pub fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: u32) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            byte_len: 0,
            imm_data: 0,
            qp_num,
            src_qp: 0,
            wc_flags: WcFlags::default(),
            invalidated_rkey: 0,
            pkey_index: 0,
            network_hdr: NetworkHdr::None,
            timestamp_ns: 0,
        }
    }
}

impl fmt::Display for WorkCompletion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "wr_id={} {} {} len={} qp={:#x}",
            self.wr_id,
            self.opcode.name(),
            self.status,
            self.byte_len,
            self.qp_num
        )?;
        if self.wc_flags.contains(WcFlags::WITH_IMM) {
            write!(f, " imm={:#x}", self.imm_data)?;
        }
        if self.wc_flags.contains(WcFlags::WITH_INV) {
            write!(f, " invalidated={:#x}", self.invalidated_rkey)?;
        }
        Ok(())
    }
}
