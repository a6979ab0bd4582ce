//! Queue pair context: attributes, the state shared with the application's handle, and
//! work-request validation (which runs on the posting thread, so that a bad call returns
//! a precise error at once).

use crate::cq::Cq;
use crate::mr::{AccessFlags, Mtpt, PdId};
use crate::post::{check_transport, check_ud_len, reserve, WqeData, WqeDest};
use crate::qp_state::{QpState, QpType};
use crate::srq::{Srq, Xrcd};
use crate::wr::{RecvWrRef, SendFlags, SendOp, SendWrRef, UdDest};
use rnic_wire::opcode::Transport;
use rnic_wire::Qpn;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

// The posting types live in `crate::post` (shared with the SRQ); this is their old path.
pub(crate) use super::qp_req::{InFlight, ReqState};
pub(crate) use super::qp_resp::{InProgress, ReadResource, ResourceKind, RespState};
pub use crate::post::{PostError, RecvWqe, SendWqe, MAX_MSG_LEN, PORT_MTU};
// The attributes live beside the state machine that checks them (`crate::qp_state`).
pub use crate::qp_state::QpAttr;

/// Queue sizes and limits of a QP (`ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send work request.
    pub max_send_sge: u32,
    /// SGEs per receive work request.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send work request.
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap { max_send_wr: 256, max_recv_wr: 256, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 256 }
    }
}

/// What a new QP is made of (`ibv_qp_init_attr`): its transport, protection domain,
/// queue limits, completion queues and, optionally, the SRQ its responder takes receive
/// WQEs from. [`Engine::create_qp`](super::Engine::create_qp) and the driver's
/// `Device::create_qp` take it whole.
///
/// ```
/// # use std::sync::Arc;
/// # use rnic_core::{cq::Cq, engine::qp::{QpCap, QpInit}, mr::PdId, qp_state::QpType};
/// let cq = Arc::new(Cq::new(1, 64));
/// let init = QpInit::new(QpType::Rc, PdId(1), cq.clone(), cq).cap(QpCap { max_send_wr: 16, ..QpCap::default() });
/// assert!(!init.sq_sig_all && init.srq.is_none());
/// ```
#[derive(Debug, Clone)]
pub struct QpInit {
    /// Transport service.
    pub qp_type: QpType,
    /// Protection domain (an SRQ, if any, must be in the same one).
    pub pd: PdId,
    /// Queue sizes and limits.
    pub cap: QpCap,
    /// Generate a completion for every send WR (`sq_sig_all`).
    pub sq_sig_all: bool,
    /// Where send completions go.
    pub send_cq: Arc<Cq>,
    /// Where receive completions go.
    pub recv_cq: Arc<Cq>,
    /// The shared receive queue the responder takes receive WQEs from.
    pub srq: Option<Arc<Srq>>,
    /// An XRC target's domain: the XRC SRQs its requests' XRCETHs may name.
    pub xrcd: Option<Arc<Xrcd>>,
    /// Where the QP behaves as one verbs provider rather than another.
    pub conduct: QpConduct,
}

/// What verbs leaves to the provider, chosen per QP: rnic's Rust API checks keys when
/// work is posted and keeps every completion; its libibverbs behaves as the providers C
/// programs were written against (rxe, mlx5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpConduct {
    /// SGEs' keys checked when the work executes ([`QpInit::keys_at_execution`]).
    pub keys_at_execution: bool,
    /// The QP's completions removed from its CQs when it is reset
    /// ([`QpInit::purge_cqs_on_reset`]).
    pub purge_cqs_on_reset: bool,
}

impl QpInit {
    /// A QP of `qp_type` in `pd` with the default [`QpCap`], completions only for
    /// signaled sends, and its own receive queue.
    pub fn new(qp_type: QpType, pd: PdId, send_cq: Arc<Cq>, recv_cq: Arc<Cq>) -> QpInit {
        QpInit {
            qp_type,
            pd,
            cap: QpCap::default(),
            sq_sig_all: false,
            send_cq,
            recv_cq,
            srq: None,
            xrcd: None,
            conduct: QpConduct::default(),
        }
    }

    /// An XRC target QP (`IBV_QPT_XRC_RECV`) in `xrcd`. It has neither a PD nor CQs of
    /// its own (IBA Annex A14): a request's memory is checked against the PD of the XRC
    /// SRQ its XRCETH names, and its receive completes in that SRQ's CQ. The CQ it is
    /// given is one of its own that nothing completes in (it has no send queue, and every
    /// receive WQE it holds came from an XRC SRQ).
    pub fn xrc_target(xrcd: Arc<Xrcd>) -> QpInit {
        let none = Arc::new(Cq::new(u32::MAX, 1));
        QpInit { xrcd: Some(xrcd), ..QpInit::new(QpType::XrcRecv, PdId(0), none.clone(), none) }
    }

    /// With these queue limits.
    #[must_use]
    pub fn cap(mut self, cap: QpCap) -> QpInit {
        self.cap = cap;
        self
    }

    /// With a completion for every send WR, or only for signaled ones.
    #[must_use]
    pub fn sq_sig_all(mut self, all: bool) -> QpInit {
        self.sq_sig_all = all;
        self
    }

    /// Taking receive WQEs from `srq`.
    #[must_use]
    pub fn srq(mut self, srq: Option<Arc<Srq>>) -> QpInit {
        self.srq = srq;
        self
    }

    /// With an SGE's memory key, PD, bounds and access checked when the work request
    /// executes rather than when it is posted: a post succeeds, and a send that names
    /// memory it may not use completes with `LOC_PROT_ERR` (the QP to error), a receive
    /// the peer's SEND reaches is NAKed with a remote operational error. What rxe and
    /// mlx5 do (their post verbs never look at lkeys), and what programs written for them
    /// expect (rdma-core's `test_mr_rereg_pd` posts a receive over a region moved to
    /// another PD and waits for the error); the default, checking at post, names the
    /// fault at the call that made it.
    #[must_use]
    pub fn keys_at_execution(mut self, late: bool) -> QpInit {
        self.conduct.keys_at_execution = late;
        self
    }

    /// With the QP's completions still in its CQs removed when it moves to RESET, as
    /// libmlx5 cleans its CQs in `mlx5_modify_qp` (`mlx5_cq_clean`): a program that
    /// resets a QP after an error and uses it again polls no stale flush completions
    /// (rdma-core's `test_mr_rereg_pd` restarts a QP in error this way). The default
    /// keeps them: nothing is lost that the program did not throw away.
    #[must_use]
    pub fn purge_cqs_on_reset(mut self, purge: bool) -> QpInit {
        self.conduct.purge_cqs_on_reset = purge;
        self
    }
}

/// The part of a QP both the application's handle and the engine see.
#[derive(Debug)]
pub struct QpShared {
    /// QP number.
    pub qpn: Qpn,
    /// Transport service.
    pub qp_type: QpType,
    /// Protection domain.
    pub pd: PdId,
    /// Limits.
    pub cap: QpCap,
    /// Generate a completion for every send WR.
    pub sq_sig_all: bool,
    /// The shared receive queue the responder takes receive WQEs from, if any.
    pub srq: Option<Arc<Srq>>,
    /// An XRC target's domain.
    pub xrcd: Option<Arc<Xrcd>>,
    /// Where it behaves as one provider rather than another.
    pub conduct: QpConduct,
    state: AtomicU32,
    /// Send WRs posted and not yet completed.
    pub sq_outstanding: AtomicU32,
    /// Receive WRs posted and not yet consumed.
    pub rq_outstanding: AtomicU32,
}

impl QpShared {
    /// The shared part of QP `qpn` made of `init`.
    pub(crate) fn new(qpn: Qpn, init: &QpInit) -> QpShared {
        QpShared {
            qpn,
            qp_type: init.qp_type,
            pd: init.pd,
            cap: init.cap,
            sq_sig_all: init.sq_sig_all,
            srq: init.srq.clone(),
            xrcd: init.xrcd.clone(),
            conduct: init.conduct,
            state: AtomicU32::new(QpState::Reset.to_ibv()),
            sq_outstanding: AtomicU32::new(0),
            rq_outstanding: AtomicU32::new(0),
        }
    }

    /// The QP's current state (as last set by the engine).
    pub fn state(&self) -> QpState {
        QpState::from_ibv(self.state.load(Ordering::Acquire)).unwrap_or(QpState::Err)
    }

    pub(crate) fn set_state(&self, s: QpState) {
        self.state.store(s.to_ibv(), Ordering::Release);
    }
}

/// Checks a send WR against the QP and the memory table and reserves its queue slot.
#[inline]
pub fn validate_send<'a>(shared: &QpShared, mtpt: &Mtpt, wr: impl Into<SendWrRef<'a>>) -> Result<SendWqe, PostError> {
    let wr = &wr.into();
    let mut wqe = empty_send_wqe(shared, wr);
    validate_send_into(shared, mtpt, wr, &mut wqe)?;
    Ok(wqe)
}

/// The WQE [`validate_send_into`] fills: `wr`'s id, operation and flags, no SGE yet.
#[inline]
pub(crate) fn empty_send_wqe(shared: &QpShared, wr: &SendWrRef<'_>) -> SendWqe {
    send_wqe(shared, wr, WqeData::no_sges(), 0)
}

/// [`validate_send`] into `wqe`, made by [`empty_send_wqe`] for `wr`. The posting path
/// keeps the WQE where it was built and checks the SGEs straight into it: a WQE returned
/// inside a `Result` and read back at once (it was just written in 8-byte and 1-byte
/// pieces) stalls store forwarding, on every post.
#[inline]
pub(crate) fn validate_send_into(
    shared: &QpShared,
    mtpt: &Mtpt,
    wr: &SendWrRef<'_>,
    wqe: &mut SendWqe,
) -> Result<(), PostError> {
    let state = shared.state();
    // IBA 10.8.2 / verbs: send WRs are accepted in RTS, SQD and (to be flushed) ERR.
    if matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
        return Err(PostError::BadState { queue: "send", state });
    }
    check_transport(shared.qp_type, &wr.op, wr.ud.as_ref(), wr.xrc_srqn)?;
    if wr.sg_list.len() > shared.cap.max_send_sge as usize {
        return Err(PostError::TooManySges { given: wr.sg_list.len(), max: shared.cap.max_send_sge });
    }
    if let Some(extended) = validate_extended_op(shared, wr)? {
        *wqe = extended;
        return Ok(());
    }
    if wr.flags.contains(SendFlags::INLINE) {
        if wr.op.writes_local() {
            return Err(PostError::InlineNotAllowed { op: wr.op.name() });
        }
        let total: u64 = wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
        if total > u64::from(shared.cap.max_inline_data) {
            return Err(PostError::InlineTooLong {
                len: usize::try_from(total).unwrap_or(usize::MAX),
                max: shared.cap.max_inline_data,
            });
        }
        // Inline data is copied now, so its buffers need no lkey (verbs semantics), but it
        // must still be memory the caller owns: it is read through registered regions when
        // an lkey is valid, otherwise the caller must use the API's inline helper.
        let mut sges = WqeData::no_sges();
        // Inline data is read now: its keys are checked now.
        let len = sges.check_sges(mtpt, shared.pd, wr.sg_list, AccessFlags::empty(), false)?;
        let mut v = vec![0u8; len];
        sges.gather(0, &mut v);
        check_ud_len(shared.qp_type, len)?;
        reserve(&shared.sq_outstanding, shared.cap.max_send_wr, "send")?;
        *wqe = send_wqe(shared, wr, WqeData::Inline(v.into_boxed_slice()), len);
        return Ok(());
    }
    let need = if wr.op.writes_local() { AccessFlags::LOCAL_WRITE } else { AccessFlags::empty() };
    wqe.len = wqe.data.check_sges(mtpt, shared.pd, wr.sg_list, need, shared.conduct.keys_at_execution)?;
    check_ud_len(shared.qp_type, wqe.len)?;
    reserve(&shared.sq_outstanding, shared.cap.max_send_wr, "send")?;
    Ok(())
}

/// A send WQE for `wr` with `data` of `len` bytes.
#[inline]
fn send_wqe(shared: &QpShared, wr: &SendWrRef<'_>, data: WqeData, len: usize) -> SendWqe {
    SendWqe {
        wr_id: wr.wr_id,
        op: wr.op,
        signaled: wr.flags.contains(SendFlags::SIGNALED) || shared.sq_sig_all,
        solicited: wr.flags.contains(SendFlags::SOLICITED),
        fence: wr.flags.contains(SendFlags::FENCE),
        data,
        len,
        dest: WqeDest::of(wr.ud, wr.xrc_srqn),
        local_err: None,
    }
}

/// Checks the operations of the atomics / invalidation issue: atomics need exactly one
/// 8-byte locally writable result buffer (IBA 9.4.5: the atomic returns 8 bytes), and
/// ATOMIC WRITE, FLUSH and LOCAL_INV carry no SGE. Returns the WQE for the operations
/// whose data is not gathered from SGEs, `None` for the rest.
fn validate_extended_op(shared: &QpShared, wr: &SendWrRef<'_>) -> Result<Option<SendWqe>, PostError> {
    let op = wr.op.name();
    let data = match wr.op {
        SendOp::AtomicCmpSwap { .. } | SendOp::AtomicFetchAdd { .. } => {
            if wr.flags.contains(SendFlags::INLINE) {
                return Err(PostError::InlineNotAllowed { op });
            }
            let total: u64 = wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
            if total != 8 {
                return Err(PostError::BadWr { op, why: "the result SGEs must add up to exactly 8 bytes" });
            }
            return Ok(None);
        }
        SendOp::AtomicWrite { value, .. } => WqeData::Inline(Box::new(value.to_ne_bytes())),
        SendOp::Flush { placement, .. } => {
            if placement & !(crate::wr::FLUSH_GLOBAL | crate::wr::FLUSH_PERSISTENT) != 0 || placement == 0 {
                return Err(PostError::BadWr { op, why: "placement must be FLUSH_GLOBAL and/or FLUSH_PERSISTENT" });
            }
            WqeData::Inline(Box::default())
        }
        SendOp::LocalInv { .. } | SendOp::BindMw { .. } => WqeData::Inline(Box::default()),
        _ => return Ok(None),
    };
    if !wr.sg_list.is_empty() {
        return Err(PostError::BadWr { op, why: "takes no SGE" });
    }
    let len = match &data {
        WqeData::Inline(v) => v.len(),
        WqeData::One(_) | WqeData::Many(_) => 0,
    };
    reserve(&shared.sq_outstanding, shared.cap.max_send_wr, "send")?;
    Ok(Some(SendWqe {
        wr_id: wr.wr_id,
        op: wr.op,
        signaled: wr.flags.contains(SendFlags::SIGNALED) || shared.sq_sig_all,
        solicited: false,
        fence: wr.flags.contains(SendFlags::FENCE),
        data,
        len,
        dest: WqeDest::of(None, wr.xrc_srqn),
        local_err: None,
    }))
}

/// Builds an inline send WQE straight from bytes (no registered memory involved); on a
/// UD QP `ud` is the destination.
pub fn validate_send_inline(
    shared: &QpShared,
    wr_id: u64,
    op: SendOp,
    bytes: &[u8],
    signaled: bool,
    solicited: bool,
    ud: Option<UdDest>,
) -> Result<SendWqe, PostError> {
    let state = shared.state();
    if matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
        return Err(PostError::BadState { queue: "send", state });
    }
    check_transport(shared.qp_type, &op, ud.as_ref(), None)?;
    check_ud_len(shared.qp_type, bytes.len())?;
    if op.writes_local() {
        return Err(PostError::InlineNotAllowed { op: op.name() });
    }
    if bytes.len() > shared.cap.max_inline_data as usize {
        return Err(PostError::InlineTooLong { len: bytes.len(), max: shared.cap.max_inline_data });
    }
    reserve(&shared.sq_outstanding, shared.cap.max_send_wr, "send")?;
    Ok(SendWqe {
        wr_id,
        op,
        signaled: signaled || shared.sq_sig_all,
        solicited,
        fence: false,
        data: WqeData::Inline(bytes.into()),
        len: bytes.len(),
        dest: WqeDest::of(ud, None),
        local_err: None,
    })
}

/// Checks a receive WR (its buffers must be locally writable) and reserves its slot.
#[inline]
pub fn validate_recv<'a>(shared: &QpShared, mtpt: &Mtpt, wr: impl Into<RecvWrRef<'a>>) -> Result<RecvWqe, PostError> {
    let wr = &wr.into();
    let mut wqe = RecvWqe::unchecked(wr.wr_id);
    validate_recv_into(shared, mtpt, wr, &mut wqe)?;
    Ok(wqe)
}

/// [`validate_recv`] into `wqe`, made by `RecvWqe::unchecked` for `wr` (kept where it was
/// built, as [`validate_send_into`] does).
#[inline]
pub(crate) fn validate_recv_into(
    shared: &QpShared,
    mtpt: &Mtpt,
    wr: &RecvWrRef<'_>,
    wqe: &mut RecvWqe,
) -> Result<(), PostError> {
    let state = shared.state();
    // Verbs: receive WRs may be posted from INIT on (not in RESET).
    if state == QpState::Reset {
        return Err(PostError::BadState { queue: "receive", state });
    }
    if let Some(srq) = &shared.srq {
        return Err(PostError::HasSrq { srq: srq.id() });
    }
    // IBA Annex A14: an XRC initiator has no receive queue, and a target's receive WQEs are
    // posted to the XRC SRQs of its domain.
    if matches!(shared.qp_type, QpType::XrcSend | QpType::XrcRecv) {
        return Err(PostError::NotSupported { op: "RECV", qp_type: shared.qp_type });
    }
    if wr.sg_list.len() > shared.cap.max_recv_sge as usize {
        return Err(PostError::TooManySges { given: wr.sg_list.len(), max: shared.cap.max_recv_sge });
    }
    let late = shared.conduct.keys_at_execution;
    wqe.len = wqe.data.check_sges(mtpt, shared.pd, wr.sg_list, AccessFlags::LOCAL_WRITE, late)?;
    reserve(&shared.rq_outstanding, shared.cap.max_recv_wr, "receive")?;
    Ok(())
}

/// The engine's QP context, split as rxe splits it (`qp->req`/`qp->comp`,
/// `qp->resp`): the attributes both sides read here, the sender's state in
/// [`ReqState`] (`qp_req.rs`), the responder's in [`RespState`] (`qp_resp.rs`).
#[derive(Debug)]
pub(crate) struct Qp {
    pub(crate) shared: Arc<QpShared>,
    pub(crate) send_cq: Arc<Cq>,
    pub(crate) recv_cq: Arc<Cq>,
    pub(crate) state: QpState,
    pub(crate) attr: QpAttr,
    pub(crate) mtu: usize,
    pub(crate) src_port: u16,
    /// The deadline this QP has in the engine's timer heap, if any.
    pub(crate) timer_key: Option<u64>,
    /// The transport its packets carry (RC, UC, UD, or XRC for both XRC halves).
    pub(crate) transport: Transport,
    /// Requester and completer.
    pub(crate) req: ReqState,
    /// Responder.
    pub(crate) resp: RespState,
}

impl Qp {
    pub(crate) fn new(shared: Arc<QpShared>, send_cq: Arc<Cq>, recv_cq: Arc<Cq>) -> Qp {
        let (qp_type, qpn) = (shared.qp_type, shared.qpn.value());
        Qp {
            shared,
            send_cq,
            recv_cq,
            state: QpState::Reset,
            attr: QpAttr::default(),
            // UD has no path MTU attribute: its packets are limited by the port MTU.
            mtu: if qp_type == QpType::Ud { PORT_MTU } else { 1024 },
            // rxe sets every QP's port from its QPN at creation; RC/UC replace it with the
            // flow's port when the address vector is given, UD keeps it.
            src_port: ud_udp_sport(qpn),
            timer_key: None,
            transport: match qp_type {
                QpType::Rc => Transport::Rc,
                QpType::Uc => Transport::Uc,
                QpType::Ud => Transport::Ud,
                QpType::XrcSend | QpType::XrcRecv => Transport::Xrc,
            },
            req: ReqState::new(),
            resp: RespState::new(),
        }
    }

    pub(crate) fn qpn(&self) -> Qpn {
        self.shared.qpn
    }

    pub(crate) fn dest_qpn(&self) -> Qpn {
        Qpn::new(self.attr.dest_qpn)
    }

    /// The protection domain a request's memory is checked against: an XRC target's is
    /// the PD of the XRC SRQ the request names (IBA Annex A14), everyone else's its own.
    pub(crate) fn resp_pd(&self) -> PdId {
        self.resp.xrc_srq.as_ref().map_or(self.shared.pd, |s| s.pd())
    }

    /// Where the responder's receives complete: an XRC SRQ's CQ for an XRC target, the
    /// QP's receive CQ otherwise.
    pub(crate) fn resp_cq(&self) -> &Arc<Cq> {
        self.resp.xrc_srq.as_ref().and_then(|s| s.cq()).unwrap_or(&self.recv_cq)
    }

    /// IBA 10.3.1 (rxe `check_type_state`): a QP takes incoming requests in RTR, RTS and
    /// SQD; the one place that rule is checked (`Engine::handle_packet`).
    pub(crate) fn receives(&self) -> bool {
        matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
    }
}

/// The UDP source port for an RC/UC flow, as Linux computes it (`rdma_calc_flow_label`
/// then `rdma_flow_label_to_udp_sport`), so that both directions of a connection use the
/// same port and a capture matches rxe's (QPN 0x11 to 0x11 gives 49441).
pub fn rc_udp_sport(lqpn: u32, rqpn: u32) -> u16 {
    let mut v = u64::from(lqpn) * u64::from(rqpn);
    v ^= v >> 20;
    v ^= v >> 40;
    let fl = v & 0xFFFFF;
    let low = (fl & 0x03FFF) ^ ((fl & 0xFC000) >> 14);
    rnic_wire::ROCEV2_SPORT_MIN | u16::try_from(low & 0x3FFF).unwrap_or(0)
}

/// The UDP source port of a UD QP (and of every QP before its address vector is set), as
/// rxe computes it at QP creation: `0xC000 + hash_32(qpn, 14)` (`hash_32` multiplies by
/// the 32-bit golden ratio and keeps the top bits).
pub fn ud_udp_sport(qpn: u32) -> u16 {
    const GOLDEN_RATIO_32: u32 = 0x61C8_8647;
    let h = qpn.wrapping_mul(GOLDEN_RATIO_32) >> (32 - 14);
    rnic_wire::ROCEV2_SPORT_MIN + u16::try_from(h & 0x3FFF).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ud_sport_matches_rxe_observations() {
        // shared/rxe-lab README: QPN 0x15 gives 49500, QP1 gives 55410.
        assert_eq!(ud_udp_sport(0x15), 49500);
        assert_eq!(ud_udp_sport(1), 55410);
    }

    #[test]
    fn sport_matches_rxe_observations() {
        // shared/rxe-lab README: 0x11<->0x11 gives 49441, 0x11->0xa1 gives 51889.
        assert_eq!(rc_udp_sport(0x11, 0x11), 49441);
        assert_eq!(rc_udp_sport(0x11, 0xa1), 51889);
        assert_eq!(rc_udp_sport(0xa1, 0x11), 51889);
    }
}
