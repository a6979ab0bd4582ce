//! QP states, the modify-QP table of legal transitions and their attributes, and the checks of
//! attribute values made at modify time.
//!
//! [`check_modify`] implements the IBA modify-QP rules (the QP state diagram of IBA chapter 10
//! and the attribute table of the Modify Queue Pair verb, chapter 11) as Linux does in
//! `qp_state_table` /
//! `ib_modify_qp_is_ok` (drivers/infiniband/core/verbs.c), so an application gets the same
//! EINVAL here as on a kernel RNIC. Only the RC, UC and UD columns are kept.

use crate::mr::AccessFlags;
use std::fmt;
use std::net::IpAddr;

/// State of a queue pair (`enum ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Reset: freshly created or reset; no work is processed.
    Reset,
    /// Initialized: receive WRs may be posted; nothing is sent or received.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drain(ed).
    Sqd,
    /// Send queue error (UC / UD only in practice).
    Sqe,
    /// Error: outstanding and new WRs complete with a flush error.
    Err,
}

impl QpState {
    /// Every state, in `ibv_qp_state` order.
    pub const ALL: [QpState; 7] =
        [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts, QpState::Sqd, QpState::Sqe, QpState::Err];

    /// From the `ibv_qp_state` value (`IBV_QPS_RESET` = 0 .. `IBV_QPS_ERR` = 6).
    pub const fn from_ibv(value: u32) -> Option<QpState> {
        Some(match value {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Err,
            _ => return None,
        })
    }

    /// The `ibv_qp_state` value.
    pub const fn to_ibv(self) -> u32 {
        match self {
            QpState::Reset => 0,
            QpState::Init => 1,
            QpState::Rtr => 2,
            QpState::Rts => 3,
            QpState::Sqd => 4,
            QpState::Sqe => 5,
            QpState::Err => 6,
        }
    }

    /// Upper-case name as in the specification: `RESET`, `INIT`, `RTR`, ...
    pub const fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        }
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Transport service type of a queue pair (`enum ibv_qp_type`, the ones this NIC implements).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
    /// XRC initiator (`IBV_QPT_XRC_SEND`, IBA Annex A14): RC's requester, each message to
    /// the XRC SRQ its work request names; no receive queue.
    XrcSend,
    /// XRC target (`IBV_QPT_XRC_RECV`, IBA Annex A14): RC's responder in an XRC domain,
    /// taking each message's receive WQE from the XRC SRQ its XRCETH names; no send queue.
    XrcRecv,
}

impl QpType {
    /// Every type.
    pub const ALL: [QpType; 5] = [QpType::Rc, QpType::Uc, QpType::Ud, QpType::XrcSend, QpType::XrcRecv];

    /// From the `ibv_qp_type` value (`IBV_QPT_RC` = 2, `IBV_QPT_UC` = 3, `IBV_QPT_UD` = 4).
    pub const fn from_ibv(value: u32) -> Option<QpType> {
        match value {
            2 => Some(QpType::Rc),
            3 => Some(QpType::Uc),
            4 => Some(QpType::Ud),
            9 => Some(QpType::XrcSend),
            10 => Some(QpType::XrcRecv),
            _ => None,
        }
    }

    /// The `ibv_qp_type` value.
    pub const fn to_ibv(self) -> u32 {
        match self {
            QpType::Rc => 2,
            QpType::Uc => 3,
            QpType::Ud => 4,
            QpType::XrcSend => 9,
            QpType::XrcRecv => 10,
        }
    }

    /// `RC`, `UC` or `UD`.
    pub const fn name(self) -> &'static str {
        match self {
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
            QpType::XrcSend => "XRC_SEND",
            QpType::XrcRecv => "XRC_RECV",
        }
    }

    /// RC's reliable protocol (PSNs, acknowledgements, retries): RC and both XRC halves.
    pub const fn reliable(self) -> bool {
        matches!(self, QpType::Rc | QpType::XrcSend | QpType::XrcRecv)
    }

    /// The QP sends requests (has a send queue): all but the XRC target.
    pub const fn has_send_queue(self) -> bool {
        !matches!(self, QpType::XrcRecv)
    }

    /// The QP takes requests (has a receive side): all but the XRC initiator.
    pub const fn has_receive_side(self) -> bool {
        !matches!(self, QpType::XrcSend)
    }
}

impl fmt::Display for QpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

bitflags::bitflags! {
    /// Which attributes a modify-QP call sets (`enum ibv_qp_attr_mask`, same bit values).
    ///
    /// May hold bits this NIC does not know (see [`from_bits_retain`](Self::from_bits_retain)):
    /// [`check_modify`] refuses them, and they print as hex.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct QpAttrMask: u32 {
        /// `IBV_QP_STATE`: the QP moves to `qp_state`.
        const STATE = 1 << 0;
        /// `IBV_QP_CUR_STATE`: the caller asserts the current state.
        const CUR_STATE = 1 << 1;
        /// `IBV_QP_EN_SQD_ASYNC_NOTIFY`: raise an event when the SQ is drained.
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// `IBV_QP_ACCESS_FLAGS`: remote access rights of the QP.
        const ACCESS_FLAGS = 1 << 3;
        /// `IBV_QP_PKEY_INDEX`.
        const PKEY_INDEX = 1 << 4;
        /// `IBV_QP_PORT`.
        const PORT = 1 << 5;
        /// `IBV_QP_QKEY` (UD).
        const QKEY = 1 << 6;
        /// `IBV_QP_AV`: primary path address vector.
        const AV = 1 << 7;
        /// `IBV_QP_PATH_MTU`.
        const PATH_MTU = 1 << 8;
        /// `IBV_QP_TIMEOUT`: local ACK timeout.
        const TIMEOUT = 1 << 9;
        /// `IBV_QP_RETRY_CNT`: transport retry count.
        const RETRY_CNT = 1 << 10;
        /// `IBV_QP_RNR_RETRY`: RNR retry count.
        const RNR_RETRY = 1 << 11;
        /// `IBV_QP_RQ_PSN`: expected PSN of the receive queue.
        const RQ_PSN = 1 << 12;
        /// `IBV_QP_MAX_QP_RD_ATOMIC`: outstanding RDMA READs / atomics as requester.
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// `IBV_QP_ALT_PATH`: alternate path (APM).
        const ALT_PATH = 1 << 14;
        /// `IBV_QP_MIN_RNR_TIMER`: RNR NAK timer code advertised to the peer.
        const MIN_RNR_TIMER = 1 << 15;
        /// `IBV_QP_SQ_PSN`: first PSN of the send queue.
        const SQ_PSN = 1 << 16;
        /// `IBV_QP_MAX_DEST_RD_ATOMIC`: outstanding RDMA READs / atomics as responder.
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// `IBV_QP_PATH_MIG_STATE`.
        const PATH_MIG_STATE = 1 << 18;
        /// `IBV_QP_CAP`: resize the queues.
        const CAP = 1 << 19;
        /// `IBV_QP_DEST_QPN`: the remote QP number.
        const DEST_QPN = 1 << 20;
    }
}

/// Names joined by `|` in bit order (`PATH_MTU|DEST_QPN`), unknown bits as hex, or `(none)`.
impl fmt::Display for QpAttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("(none)");
        }
        let mut sep = "";
        for (name, _) in self.iter_names() {
            write!(f, "{sep}{name}")?;
            sep = "|";
        }
        let unknown = self.bits() & !Self::all().bits();
        if unknown != 0 {
            write!(f, "{sep}{unknown:#x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for QpAttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QpAttrMask({self})")
    }
}

/// The attributes of one legal transition, for one QP type. `STATE` is in neither set:
/// it is required whenever the state changes and allowed otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// Attributes that must be given.
    pub required: QpAttrMask,
    /// Attributes that may be given.
    pub optional: QpAttrMask,
}

/// The modify-QP table cell for `qp_type` going from `from` to `to`; `None` if the
/// transition is illegal.
///
/// Same cells as Linux `qp_state_table`: any state -> RESET; any state but RESET -> ERR (IBA
/// also allows RESET -> ERR, Linux refuses it with EINVAL and so do we); RESET -> INIT;
/// INIT -> INIT; INIT -> RTR; RTR -> RTS; RTS -> RTS; RTS -> SQD; SQD -> SQD; SQD -> RTS;
/// SQE -> RTS.
pub const fn transition(qp_type: QpType, from: QpState, to: QpState) -> Option<Transition> {
    use QpState::{Err, Init, Reset, Rtr, Rts, Sqd, Sqe};
    const NONE: QpAttrMask = QpAttrMask::empty();
    const fn m(masks: &[QpAttrMask]) -> QpAttrMask {
        let mut bits = 0;
        let mut i = 0;
        while i < masks.len() {
            bits |= masks[i].bits();
            i += 1;
        }
        QpAttrMask::from_bits_retain(bits)
    }
    const fn per_type(t: QpType, ud: QpAttrMask, uc: QpAttrMask, rc: QpAttrMask) -> QpAttrMask {
        match t {
            QpType::Ud => ud,
            QpType::Uc => uc,
            // Linux's qp_state_table gives XRC_INI and XRC_TGT RC's cells except INIT->RTR
            // (initiator) and RTR->RTS (target), below.
            QpType::Rc | QpType::XrcSend | QpType::XrcRecv => rc,
        }
    }
    type A = QpAttrMask;
    // Optional attributes of RTR->RTS, RTS->RTS and SQD->RTS (the path-changing ones).
    let to_rts_opt = per_type(
        qp_type,
        m(&[A::CUR_STATE, A::QKEY]),
        m(&[A::CUR_STATE, A::ACCESS_FLAGS, A::ALT_PATH, A::PATH_MIG_STATE]),
        m(&[A::CUR_STATE, A::ACCESS_FLAGS, A::ALT_PATH, A::PATH_MIG_STATE, A::MIN_RNR_TIMER]),
    );
    let (required, optional) = match (from, to) {
        (Reset, Err) => return None, // Linux verbs.c: not in qp_state_table
        (_, Reset | Err) => (NONE, NONE),
        (Reset, Init) => (
            per_type(
                qp_type,
                m(&[A::PKEY_INDEX, A::PORT, A::QKEY]),
                m(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS]),
                m(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS]),
            ),
            NONE,
        ),
        (Init, Init) => (
            NONE,
            per_type(
                qp_type,
                m(&[A::PKEY_INDEX, A::PORT, A::QKEY]),
                m(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS]),
                m(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS]),
            ),
        ),
        // An XRC initiator has no responder: no READ credits nor RNR timer to give.
        (Init, Rtr) if matches!(qp_type, QpType::XrcSend) => {
            (m(&[A::AV, A::PATH_MTU, A::DEST_QPN, A::RQ_PSN]), m(&[A::ALT_PATH, A::ACCESS_FLAGS, A::PKEY_INDEX]))
        }
        (Init, Rtr) => (
            per_type(
                qp_type,
                NONE,
                m(&[A::AV, A::PATH_MTU, A::DEST_QPN, A::RQ_PSN]),
                m(&[A::AV, A::PATH_MTU, A::DEST_QPN, A::RQ_PSN, A::MAX_DEST_RD_ATOMIC, A::MIN_RNR_TIMER]),
            ),
            per_type(
                qp_type,
                m(&[A::PKEY_INDEX, A::QKEY]),
                m(&[A::ALT_PATH, A::ACCESS_FLAGS, A::PKEY_INDEX]),
                m(&[A::ALT_PATH, A::ACCESS_FLAGS, A::PKEY_INDEX]),
            ),
        ),
        // An XRC target sends no requests: no retry counts nor READ credits to set.
        (Rtr, Rts) if matches!(qp_type, QpType::XrcRecv) => (m(&[A::TIMEOUT, A::SQ_PSN]), to_rts_opt),
        (Rtr, Rts) => (
            per_type(
                qp_type,
                A::SQ_PSN,
                A::SQ_PSN,
                m(&[A::TIMEOUT, A::RETRY_CNT, A::RNR_RETRY, A::SQ_PSN, A::MAX_QP_RD_ATOMIC]),
            ),
            to_rts_opt,
        ),
        (Rts | Sqd, Rts) => (NONE, to_rts_opt),
        (Rts, Sqd) => (NONE, A::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (
            NONE,
            per_type(
                qp_type,
                m(&[A::PKEY_INDEX, A::QKEY]),
                m(&[A::AV, A::ALT_PATH, A::ACCESS_FLAGS, A::PKEY_INDEX, A::PATH_MIG_STATE]),
                m(&[
                    A::PORT,
                    A::AV,
                    A::TIMEOUT,
                    A::RETRY_CNT,
                    A::RNR_RETRY,
                    A::MAX_QP_RD_ATOMIC,
                    A::MAX_DEST_RD_ATOMIC,
                    A::ALT_PATH,
                    A::ACCESS_FLAGS,
                    A::PKEY_INDEX,
                    A::MIN_RNR_TIMER,
                    A::PATH_MIG_STATE,
                ]),
            ),
        ),
        // An RC QP goes to ERR, not SQE, on a send error; Linux still lists SQE->RTS for RC,
        // with no optional attribute.
        (Sqe, Rts) => (NONE, per_type(qp_type, m(&[A::CUR_STATE, A::QKEY]), m(&[A::CUR_STATE, A::ACCESS_FLAGS]), NONE)),
        _ => return None,
    };
    Some(Transition { required, optional })
}

/// Why a modify-QP call is refused (`ibv_modify_qp` returns EINVAL for each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModifyError {
    /// The state diagram has no edge from `from` to `to`.
    #[error("{qp_type} QP {from}->{to} is not a legal transition")]
    IllegalTransition {
        /// QP type.
        qp_type: QpType,
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// Required attributes are missing from the mask.
    #[error("{qp_type} QP {from}->{to} is missing {missing}")]
    MissingAttributes {
        /// QP type.
        qp_type: QpType,
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// The required attributes not in the mask.
        missing: QpAttrMask,
    },
    /// The mask has attributes this transition does not take.
    #[error("{qp_type} QP {from}->{to} does not accept {extra}")]
    AttributesNotAllowed {
        /// QP type.
        qp_type: QpType,
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// The attributes in the mask that are neither required nor optional.
        extra: QpAttrMask,
    },
}

/// Checks a modify-QP call: moving a `qp_type` QP from `cur` to `next` with the attributes in
/// `mask` (`next == cur` when the mask has no `STATE`).
///
/// Checked in order: the transition is legal, every required attribute is given (and `STATE`
/// when the state changes), and nothing else is given but `STATE` and the optional ones.
/// `CUR_STATE` is optional only on the transitions out of RTR, RTS, SQD and SQE that list it,
/// which gives Linux's separate rule for it.
pub fn check_modify(qp_type: QpType, cur: QpState, next: QpState, mask: QpAttrMask) -> Result<(), ModifyError> {
    let Some(t) = transition(qp_type, cur, next) else {
        return Err(ModifyError::IllegalTransition { qp_type, from: cur, to: next });
    };
    let mut required = t.required;
    if cur != next {
        required |= QpAttrMask::STATE;
    }
    let missing = required.difference(mask);
    if !missing.is_empty() {
        return Err(ModifyError::MissingAttributes { qp_type, from: cur, to: next, missing });
    }
    let extra = mask.difference(t.required | t.optional | QpAttrMask::STATE);
    if !extra.is_empty() {
        return Err(ModifyError::AttributesNotAllowed { qp_type, from: cur, to: next, extra });
    }
    Ok(())
}

/// Path MTU (`enum ibv_mtu`): the largest payload of one packet on the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathMtu {
    /// 256 bytes (`IBV_MTU_256` = 1).
    Mtu256,
    /// 512 bytes (`IBV_MTU_512` = 2).
    Mtu512,
    /// 1024 bytes (`IBV_MTU_1024` = 3).
    Mtu1024,
    /// 2048 bytes (`IBV_MTU_2048` = 4).
    Mtu2048,
    /// 4096 bytes (`IBV_MTU_4096` = 5).
    Mtu4096,
}

impl PathMtu {
    /// Every MTU, smallest first.
    pub const ALL: [PathMtu; 5] =
        [PathMtu::Mtu256, PathMtu::Mtu512, PathMtu::Mtu1024, PathMtu::Mtu2048, PathMtu::Mtu4096];

    /// From the `ibv_mtu` code (1 to 5).
    pub const fn from_ibv(code: u32) -> Option<PathMtu> {
        match code {
            1 => Some(PathMtu::Mtu256),
            2 => Some(PathMtu::Mtu512),
            3 => Some(PathMtu::Mtu1024),
            4 => Some(PathMtu::Mtu2048),
            5 => Some(PathMtu::Mtu4096),
            _ => None,
        }
    }

    /// The `ibv_mtu` code (1 to 5).
    pub const fn to_ibv(self) -> u32 {
        match self {
            PathMtu::Mtu256 => 1,
            PathMtu::Mtu512 => 2,
            PathMtu::Mtu1024 => 3,
            PathMtu::Mtu2048 => 4,
            PathMtu::Mtu4096 => 5,
        }
    }

    /// From a size in bytes (exactly 256, 512, 1024, 2048 or 4096).
    pub const fn from_bytes(bytes: u32) -> Option<PathMtu> {
        match bytes {
            256 => Some(PathMtu::Mtu256),
            512 => Some(PathMtu::Mtu512),
            1024 => Some(PathMtu::Mtu1024),
            2048 => Some(PathMtu::Mtu2048),
            4096 => Some(PathMtu::Mtu4096),
            _ => None,
        }
    }

    /// Size in bytes.
    pub const fn bytes(self) -> u32 {
        128 << self.to_ibv()
    }
}

/// `rnr_retry` value meaning "retry forever" (`ibv_modify_qp(3)`).
pub const RNR_RETRY_INFINITE: u8 = 7;

/// Raw attribute values of a modify-QP call, as the application gave them in `ibv_qp_attr`.
/// Only the ones whose bit is in the mask are checked by [`check_values`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpAttrValues {
    /// `ibv_mtu` code (`PATH_MTU`).
    pub path_mtu: u32,
    /// Local ACK timeout exponent (`TIMEOUT`).
    pub timeout: u8,
    /// Transport retry count (`RETRY_CNT`).
    pub retry_cnt: u8,
    /// RNR retry count (`RNR_RETRY`).
    pub rnr_retry: u8,
    /// RNR NAK timer code (`MIN_RNR_TIMER`).
    pub min_rnr_timer: u8,
}

/// An attribute value out of its range (`ibv_modify_qp` returns EINVAL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AttrValueError {
    /// Not an `ibv_mtu` code.
    #[error("path_mtu {0} is not an ibv_mtu code (1 = 256 bytes .. 5 = 4096 bytes)")]
    PathMtu(u32),
    /// Not a 5-bit local ACK timeout.
    #[error("timeout {0} is out of range 0..=31")]
    Timeout(u8),
    /// Not a 3-bit retry count.
    #[error("retry_cnt {0} is out of range 0..=7")]
    RetryCnt(u8),
    /// Not a 3-bit RNR retry count.
    #[error("rnr_retry {0} is out of range 0..=7 (7 = retry forever)")]
    RnrRetry(u8),
    /// Not a 5-bit RNR NAK timer code.
    #[error("min_rnr_timer {0} is out of range 0..=31")]
    MinRnrTimer(u8),
}

/// Checks the values of the attributes selected by `mask` against the widths of their
/// fields: the path MTU is an `ibv_mtu` code, timeout and min_rnr_timer are 5-bit codes
/// (IBA Table 45 for the RNR timer, the AETH / QP context fields), retry_cnt and rnr_retry
/// are 3-bit counts.
pub fn check_values(mask: QpAttrMask, values: &QpAttrValues) -> Result<(), AttrValueError> {
    if mask.contains(QpAttrMask::PATH_MTU) && PathMtu::from_ibv(values.path_mtu).is_none() {
        return Err(AttrValueError::PathMtu(values.path_mtu));
    }
    if mask.contains(QpAttrMask::TIMEOUT) && values.timeout > 31 {
        return Err(AttrValueError::Timeout(values.timeout));
    }
    if mask.contains(QpAttrMask::RETRY_CNT) && values.retry_cnt > 7 {
        return Err(AttrValueError::RetryCnt(values.retry_cnt));
    }
    if mask.contains(QpAttrMask::RNR_RETRY) && values.rnr_retry > 7 {
        return Err(AttrValueError::RnrRetry(values.rnr_retry));
    }
    if mask.contains(QpAttrMask::MIN_RNR_TIMER) && values.min_rnr_timer > 31 {
        return Err(AttrValueError::MinRnrTimer(values.min_rnr_timer));
    }
    Ok(())
}

/// IBA Table 45 "Encoding for RNR NAK Timer Field", in nanoseconds, indexed by code.
/// Code 0 is the longest wait (655.36 ms); codes 1 to 31 run from 0.01 ms to 491.52 ms.
pub const RNR_TIMER_NS: [u64; 32] = [
    655_360_000, // 0: 655.36 ms
    10_000,      // 1: 0.01 ms
    20_000,
    30_000,
    40_000,
    60_000,
    80_000,
    120_000,
    160_000,
    240_000,
    320_000, // 10: 0.32 ms
    480_000,
    640_000,
    960_000,
    1_280_000,
    1_920_000,
    2_560_000,
    3_840_000,
    5_120_000,
    7_680_000,
    10_240_000, // 20: 10.24 ms
    15_360_000,
    20_480_000,
    30_720_000,
    40_960_000,
    61_440_000,
    81_920_000,
    122_880_000,
    163_840_000,
    245_760_000,
    327_680_000, // 30: 327.68 ms
    491_520_000, // 31: 491.52 ms
];

/// The RNR NAK wait for a 5-bit timer `code` (IBA Table 45), in nanoseconds.
///
/// Only the low 5 bits are used, as for the AETH field the code comes from.
pub const fn rnr_timer_ns(code: u8) -> u64 {
    RNR_TIMER_NS[(code & 0x1f) as usize]
}

/// The local ACK timeout for the 5-bit `timeout` exponent: 4.096 us * 2^timeout, in
/// nanoseconds (`ibv_modify_qp(3)`; the IBA transport timer).
///
/// `None` for 0, which disables the timer (wait forever), and for values above 31, which
/// [`check_values`] refuses.
pub const fn local_ack_timeout_ns(timeout: u8) -> Option<u64> {
    if timeout == 0 || timeout > 31 {
        None
    } else {
        Some(4096 << timeout)
    }
}

/// Modify-QP attributes (`ibv_qp_attr`); only those whose bit is in `mask` are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// Which attributes are given.
    pub mask: QpAttrMask,
    /// Target state (`STATE`).
    pub state: QpState,
    /// Remote operations the QP accepts (`ACCESS_FLAGS`).
    pub access: AccessFlags,
    /// Path MTU (`PATH_MTU`, as an `ibv_mtu` code 1..=5).
    pub path_mtu: u32,
    /// Remote QP (`DEST_QPN`).
    pub dest_qpn: u32,
    /// Remote address: the IP of the destination GID (`AV`).
    pub remote_ip: Option<IpAddr>,
    /// Expected PSN of the responder (`RQ_PSN`).
    pub rq_psn: u32,
    /// First PSN of the requester (`SQ_PSN`).
    pub sq_psn: u32,
    /// Local ACK timeout exponent: 4.096 us * 2^timeout, 0 = infinite (`TIMEOUT`).
    pub timeout: u8,
    /// Transport retries (`RETRY_CNT`).
    pub retry_cnt: u8,
    /// RNR retries, 7 = infinite (`RNR_RETRY`).
    pub rnr_retry: u8,
    /// RNR NAK timer code the responder sends (`MIN_RNR_TIMER`).
    pub min_rnr_timer: u8,
    /// Outstanding RDMA READ / atomic requests as requester (`MAX_QP_RD_ATOMIC`).
    pub max_rd_atomic: u8,
    /// Outstanding RDMA READ / atomic requests as responder (`MAX_DEST_RD_ATOMIC`).
    pub max_dest_rd_atomic: u8,
    /// Q_Key (`QKEY`, UD).
    pub qkey: u32,
    /// P_Key index (`PKEY_INDEX`).
    pub pkey_index: u16,
    /// Port (`PORT`).
    pub port: u8,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            mask: QpAttrMask::empty(),
            state: QpState::Reset,
            access: AccessFlags::empty(),
            path_mtu: PathMtu::Mtu1024.to_ibv(),
            dest_qpn: 0,
            remote_ip: None,
            rq_psn: 0,
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            qkey: 0,
            pkey_index: 0,
            port: 1,
        }
    }
}

impl QpAttr {
    /// These attributes with `mask` set to exactly what the modify-QP table requires of a
    /// `qp_type` QP going from `from` to `self.state`, plus `STATE`
    /// ([`transition`]): one set of values serves every QP type, and what a
    /// type's column does not take stays out of the mask. `None` for an illegal transition.
    pub fn required_from(self, qp_type: QpType, from: QpState) -> Option<QpAttr> {
        let t = transition(qp_type, from, self.state)?;
        Some(QpAttr { mask: QpAttrMask::STATE | t.required, ..self })
    }

    /// The three modify-QP calls that bring a fresh `qp_type` QP from RESET to RTS
    /// (INIT, RTR, RTS), each taking from these values what its transition requires.
    pub fn bring_up(self, qp_type: QpType) -> [QpAttr; 3] {
        [(QpState::Reset, QpState::Init), (QpState::Init, QpState::Rtr), (QpState::Rtr, QpState::Rts)].map(
            |(from, to)| {
                let a = QpAttr { state: to, ..self };
                // Every QP type has these three transitions; were one missing, the bare
                // state change would fail in modify_qp with the table's error.
                a.required_from(qp_type, from).unwrap_or(QpAttr { mask: QpAttrMask::STATE, ..a })
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
    const ERR: QpState = QpState::Err;
    use QpType::*;

    type A = QpAttrMask;

    #[test]
    fn mask_bits_are_the_ibverbs_values() {
        #[rustfmt::skip]
        let golden = [
            (A::STATE, 1 << 0), (A::CUR_STATE, 1 << 1), (A::EN_SQD_ASYNC_NOTIFY, 1 << 2),
            (A::ACCESS_FLAGS, 1 << 3), (A::PKEY_INDEX, 1 << 4), (A::PORT, 1 << 5),
            (A::QKEY, 1 << 6), (A::AV, 1 << 7), (A::PATH_MTU, 1 << 8), (A::TIMEOUT, 1 << 9),
            (A::RETRY_CNT, 1 << 10), (A::RNR_RETRY, 1 << 11), (A::RQ_PSN, 1 << 12),
            (A::MAX_QP_RD_ATOMIC, 1 << 13), (A::ALT_PATH, 1 << 14), (A::MIN_RNR_TIMER, 1 << 15),
            (A::SQ_PSN, 1 << 16), (A::MAX_DEST_RD_ATOMIC, 1 << 17), (A::PATH_MIG_STATE, 1 << 18),
            (A::CAP, 1 << 19), (A::DEST_QPN, 1 << 20),
        ];
        for (mask, bits) in golden {
            assert_eq!(mask.bits(), bits, "{mask}");
        }
        assert_eq!(A::all().bits(), 0x1f_ffff);
        assert_eq!(A::from_bits(1 << 25), None); // IBV_QP_RATE_LIMIT
        assert_eq!(A::from_bits(0x101), Some(A::STATE | A::PATH_MTU));
    }

    #[test]
    fn mask_display() {
        assert_eq!((A::DEST_QPN | A::PATH_MTU).to_string(), "PATH_MTU|DEST_QPN");
        assert_eq!(A::empty().to_string(), "(none)");
        assert_eq!(format!("{:?}", A::STATE | A::AV), "QpAttrMask(STATE|AV)");
        assert_eq!(A::from_bits_retain(1 << 25 | 1).to_string(), "STATE|0x2000000");
        assert_eq!(A::from_bits_retain(1 << 31).to_string(), "0x80000000");
        let all = A::all().to_string();
        assert_eq!(all.split('|').count(), 21);
    }

    #[test]
    fn state_and_type_codes_round_trip() {
        for (i, s) in QpState::ALL.into_iter().enumerate() {
            assert_eq!(usize::try_from(s.to_ibv()).unwrap(), i);
            assert_eq!(QpState::from_ibv(s.to_ibv()), Some(s));
        }
        assert_eq!(QpState::from_ibv(7), None); // IBV_QPS_UNKNOWN
        for t in QpType::ALL {
            assert_eq!(QpType::from_ibv(t.to_ibv()), Some(t));
        }
        assert_eq!(QpType::from_ibv(1), None);
        assert_eq!(Rts.to_string(), "RTS");
        assert_eq!(Ud.to_string(), "UD");
    }

    /// The expected table, written as the attribute names Display prints (bit order), per
    /// (from, to): (UD required, UD optional, UC required, UC optional, RC required,
    /// RC optional). Transitions not listed are illegal.
    #[rustfmt::skip]
    const TABLE: &[(QpState, QpState, [&str; 6])] = &[
        (Reset, Reset, ["", "", "", "", "", ""]),
        (Reset, Init, [
            "PKEY_INDEX|PORT|QKEY", "",
            "ACCESS_FLAGS|PKEY_INDEX|PORT", "",
            "ACCESS_FLAGS|PKEY_INDEX|PORT", "",
        ]),
        (Init, Reset, ["", "", "", "", "", ""]),
        (Init, ERR, ["", "", "", "", "", ""]),
        (Init, Init, [
            "", "PKEY_INDEX|PORT|QKEY",
            "", "ACCESS_FLAGS|PKEY_INDEX|PORT",
            "", "ACCESS_FLAGS|PKEY_INDEX|PORT",
        ]),
        (Init, Rtr, [
            "", "PKEY_INDEX|QKEY",
            "AV|PATH_MTU|RQ_PSN|DEST_QPN", "ACCESS_FLAGS|PKEY_INDEX|ALT_PATH",
            "AV|PATH_MTU|RQ_PSN|MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC|DEST_QPN",
            "ACCESS_FLAGS|PKEY_INDEX|ALT_PATH",
        ]),
        (Rtr, Reset, ["", "", "", "", "", ""]),
        (Rtr, ERR, ["", "", "", "", "", ""]),
        (Rtr, Rts, [
            "SQ_PSN", "CUR_STATE|QKEY",
            "SQ_PSN", "CUR_STATE|ACCESS_FLAGS|ALT_PATH|PATH_MIG_STATE",
            "TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC|SQ_PSN",
            "CUR_STATE|ACCESS_FLAGS|ALT_PATH|MIN_RNR_TIMER|PATH_MIG_STATE",
        ]),
        (Rts, Reset, ["", "", "", "", "", ""]),
        (Rts, ERR, ["", "", "", "", "", ""]),
        (Rts, Rts, [
            "", "CUR_STATE|QKEY",
            "", "CUR_STATE|ACCESS_FLAGS|ALT_PATH|PATH_MIG_STATE",
            "", "CUR_STATE|ACCESS_FLAGS|ALT_PATH|MIN_RNR_TIMER|PATH_MIG_STATE",
        ]),
        (Rts, Sqd, [
            "", "EN_SQD_ASYNC_NOTIFY", "", "EN_SQD_ASYNC_NOTIFY", "", "EN_SQD_ASYNC_NOTIFY",
        ]),
        (Sqd, Reset, ["", "", "", "", "", ""]),
        (Sqd, ERR, ["", "", "", "", "", ""]),
        (Sqd, Rts, [
            "", "CUR_STATE|QKEY",
            "", "CUR_STATE|ACCESS_FLAGS|ALT_PATH|PATH_MIG_STATE",
            "", "CUR_STATE|ACCESS_FLAGS|ALT_PATH|MIN_RNR_TIMER|PATH_MIG_STATE",
        ]),
        (Sqd, Sqd, [
            "", "PKEY_INDEX|QKEY",
            "", "ACCESS_FLAGS|PKEY_INDEX|AV|ALT_PATH|PATH_MIG_STATE",
            "", "ACCESS_FLAGS|PKEY_INDEX|PORT|AV|TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC|\
                 ALT_PATH|MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC|PATH_MIG_STATE",
        ]),
        (Sqe, Reset, ["", "", "", "", "", ""]),
        (Sqe, ERR, ["", "", "", "", "", ""]),
        (Sqe, Rts, ["", "CUR_STATE|QKEY", "", "CUR_STATE|ACCESS_FLAGS", "", ""]),
        (ERR, Reset, ["", "", "", "", "", ""]),
        (ERR, ERR, ["", "", "", "", "", ""]),
    ];

    fn parse(names: &str) -> QpAttrMask {
        let mut mask = A::empty();
        for name in names.split('|').filter(|n| !n.is_empty()) {
            mask |= A::from_name(name).unwrap_or_else(|| panic!("unknown attribute {name}"));
        }
        mask
    }

    fn expected(t: QpType, from: QpState, to: QpState) -> Option<(&'static str, &'static str)> {
        // Linux's qp_state_table: XRC_INI and XRC_TGT have RC's cells but these two.
        match (t, from, to) {
            (XrcSend, Init, Rtr) => return Some(("AV|PATH_MTU|RQ_PSN|DEST_QPN", "ACCESS_FLAGS|PKEY_INDEX|ALT_PATH")),
            (XrcRecv, Rtr, Rts) => {
                return Some(("TIMEOUT|SQ_PSN", "CUR_STATE|ACCESS_FLAGS|ALT_PATH|MIN_RNR_TIMER|PATH_MIG_STATE"))
            }
            _ => {}
        }
        let col = match t {
            Ud => 0,
            Uc => 2,
            Rc | XrcSend | XrcRecv => 4,
        };
        TABLE.iter().find(|(f, to_, _)| *f == from && *to_ == to).map(|(_, _, cells)| (cells[col], cells[col + 1]))
    }

    /// Every cell of the 5 x 7 x 7 table: legal transitions accept exactly their required
    /// attributes (plus STATE), each optional one, and nothing less or more; illegal ones
    /// refuse every mask.
    #[test]
    fn every_cell_of_the_modify_table() {
        let mut legal = 0;
        for t in QpType::ALL {
            for from in QpState::ALL {
                for to in QpState::ALL {
                    let Some((req, opt)) = expected(t, from, to) else {
                        assert_eq!(transition(t, from, to), None, "{t} {from}->{to}");
                        for mask in [A::empty(), A::STATE, A::all()] {
                            assert_eq!(
                                check_modify(t, from, to, mask),
                                Err(ModifyError::IllegalTransition { qp_type: t, from, to })
                            );
                        }
                        continue;
                    };
                    legal += 1;
                    let cell = transition(t, from, to).unwrap();
                    assert_eq!(cell.required.to_string(), if req.is_empty() { "(none)" } else { req });
                    assert_eq!(cell.optional.to_string(), if opt.is_empty() { "(none)" } else { opt });
                    let (req, opt) = (parse(req), parse(opt));
                    let state = if from == to { A::empty() } else { A::STATE };
                    let ok = |mask| check_modify(t, from, to, mask);

                    assert_eq!(ok(req | state), Ok(()), "{t} {from}->{to} minimal");
                    assert_eq!(ok(req | opt | A::STATE), Ok(()), "{t} {from}->{to} maximal");
                    for bit in A::all().iter() {
                        if opt.contains(bit) {
                            assert_eq!(ok(req | state | bit), Ok(()), "{t} {from}->{to} +{bit}");
                        }
                        if req.contains(bit) || (bit == A::STATE && from != to) {
                            assert_eq!(
                                ok((req | opt | A::STATE).difference(bit)),
                                Err(ModifyError::MissingAttributes { qp_type: t, from, to, missing: bit }),
                            );
                        }
                        if !(req | opt | A::STATE).contains(bit) {
                            assert_eq!(
                                ok(req | state | bit),
                                Err(ModifyError::AttributesNotAllowed { qp_type: t, from, to, extra: bit }),
                            );
                        }
                    }
                    // Everything at once: all missing are named together, then all extras.
                    if !req.is_empty() {
                        assert_eq!(
                            ok(A::empty()),
                            Err(ModifyError::MissingAttributes { qp_type: t, from, to, missing: req | state }),
                        );
                    }
                    assert_eq!(
                        ok(A::all()).err().map(|e| match e {
                            ModifyError::AttributesNotAllowed { extra, .. } => extra,
                            other => panic!("{other}"),
                        }),
                        Some(A::all().difference(req | opt | A::STATE)).filter(|m| !m.is_empty()),
                    );
                    // Unknown bits are refused by name.
                    assert_eq!(
                        ok(req | state | A::from_bits_retain(1 << 25)),
                        Err(ModifyError::AttributesNotAllowed {
                            qp_type: t,
                            from,
                            to,
                            extra: A::from_bits_retain(1 << 25),
                        }),
                    );
                }
            }
        }
        assert_eq!(legal, QpType::ALL.len() * TABLE.len());
    }

    #[test]
    fn reset_to_err_follows_linux() {
        // IBA allows it; Linux ib_modify_qp_is_ok refuses it, and so do we.
        for t in QpType::ALL {
            assert!(matches!(check_modify(t, Reset, ERR, A::STATE), Err(ModifyError::IllegalTransition { .. })));
        }
    }

    #[test]
    fn cur_state_only_out_of_rtr_rts_sqd_sqe() {
        // Linux's separate CUR_STATE rule falls out of the table.
        for t in QpType::ALL {
            for from in QpState::ALL {
                for to in QpState::ALL {
                    let Some(cell) = transition(t, from, to) else {
                        continue;
                    };
                    if cell.optional.contains(A::CUR_STATE) {
                        assert!(matches!(from, Rtr | Rts | Sqd | Sqe), "{t} {from}->{to}");
                    }
                }
            }
        }
    }

    #[test]
    fn error_messages_name_the_attributes() {
        let e = check_modify(Rc, Init, Rtr, A::STATE | A::AV | A::RQ_PSN | A::MAX_DEST_RD_ATOMIC | A::MIN_RNR_TIMER)
            .unwrap_err();
        assert_eq!(e.to_string(), "RC QP INIT->RTR is missing PATH_MTU|DEST_QPN");
        let e = check_modify(Ud, Rtr, Rts, A::STATE | A::SQ_PSN | A::PKEY_INDEX).unwrap_err();
        assert_eq!(e.to_string(), "UD QP RTR->RTS does not accept PKEY_INDEX");
        let e = check_modify(Uc, Reset, Rts, A::STATE).unwrap_err();
        assert_eq!(e.to_string(), "UC QP RESET->RTS is not a legal transition");
        let e = check_modify(Rc, Rts, Sqd, A::EN_SQD_ASYNC_NOTIFY).unwrap_err();
        assert_eq!(e.to_string(), "RC QP RTS->SQD is missing STATE");
    }

    #[test]
    fn typical_rc_bring_up() {
        let steps = [
            (Reset, Init, A::STATE | A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS),
            (
                Init,
                Rtr,
                A::STATE | A::AV | A::PATH_MTU | A::DEST_QPN | A::RQ_PSN | A::MAX_DEST_RD_ATOMIC | A::MIN_RNR_TIMER,
            ),
            (Rtr, Rts, A::STATE | A::SQ_PSN | A::TIMEOUT | A::RETRY_CNT | A::RNR_RETRY | A::MAX_QP_RD_ATOMIC),
            (Rts, ERR, A::STATE),
            (ERR, Reset, A::STATE),
        ];
        for (from, to, mask) in steps {
            assert_eq!(check_modify(Rc, from, to, mask), Ok(()), "{from}->{to}");
        }
    }

    #[test]
    fn path_mtu_codes() {
        let golden = [(1, 256), (2, 512), (3, 1024), (4, 2048), (5, 4096)];
        for (mtu, (code, bytes)) in PathMtu::ALL.into_iter().zip(golden) {
            assert_eq!((mtu.to_ibv(), mtu.bytes()), (code, bytes));
            assert_eq!(PathMtu::from_ibv(code), Some(mtu));
            assert_eq!(PathMtu::from_bytes(bytes), Some(mtu));
        }
        for code in [0, 6, u32::MAX] {
            assert_eq!(PathMtu::from_ibv(code), None);
        }
        for bytes in [0, 255, 1500, 8192] {
            assert_eq!(PathMtu::from_bytes(bytes), None);
        }
    }

    #[test]
    fn attribute_value_ranges() {
        let good =
            QpAttrValues { path_mtu: 5, timeout: 31, retry_cnt: 7, rnr_retry: RNR_RETRY_INFINITE, min_rnr_timer: 31 };
        assert_eq!(check_values(A::all(), &good), Ok(()));
        let cases = [
            (A::PATH_MTU, QpAttrValues { path_mtu: 0, ..good }, AttrValueError::PathMtu(0)),
            (A::PATH_MTU, QpAttrValues { path_mtu: 6, ..good }, AttrValueError::PathMtu(6)),
            (A::TIMEOUT, QpAttrValues { timeout: 32, ..good }, AttrValueError::Timeout(32)),
            (A::RETRY_CNT, QpAttrValues { retry_cnt: 8, ..good }, AttrValueError::RetryCnt(8)),
            (A::RNR_RETRY, QpAttrValues { rnr_retry: 255, ..good }, AttrValueError::RnrRetry(255)),
            (A::MIN_RNR_TIMER, QpAttrValues { min_rnr_timer: 32, ..good }, AttrValueError::MinRnrTimer(32)),
        ];
        for (bit, values, err) in cases {
            assert_eq!(check_values(bit | A::STATE, &values), Err(err));
            // Values whose bit is not in the mask are ignored.
            assert_eq!(check_values(A::all().difference(bit), &values), Ok(()));
        }
        // Zero values are all in range except the MTU code.
        assert_eq!(check_values(A::all().difference(A::PATH_MTU), &QpAttrValues::default()), Ok(()));
        assert_eq!(AttrValueError::RnrRetry(9).to_string(), "rnr_retry 9 is out of range 0..=7 (7 = retry forever)");
    }

    #[test]
    fn rnr_timer_table_45() {
        #[rustfmt::skip]
        let golden_us: [(u8, u64); 8] = [
            (0, 655_360), (1, 10), (2, 20), (5, 60), (13, 960), (14, 1280), (30, 327_680), (31, 491_520),
        ];
        for (code, us) in golden_us {
            assert_eq!(rnr_timer_ns(code), us * 1000, "code {code}");
        }
        // 1..=31 strictly increase, and code 0 is the longest wait of all.
        for code in 1..31u8 {
            assert!(rnr_timer_ns(code) < rnr_timer_ns(code + 1));
        }
        assert!(rnr_timer_ns(0) > rnr_timer_ns(31));
        // Only the 5-bit field counts; no input panics.
        for code in 0..=u8::MAX {
            assert_eq!(rnr_timer_ns(code), rnr_timer_ns(code & 0x1f));
        }
    }

    #[test]
    fn local_ack_timeout() {
        assert_eq!(local_ack_timeout_ns(0), None);
        assert_eq!(local_ack_timeout_ns(1), Some(8192));
        assert_eq!(local_ack_timeout_ns(14), Some(67_108_864)); // ~67 ms, a common choice
        assert_eq!(local_ack_timeout_ns(31), Some(4096 << 31)); // ~2.4 hours
        for t in 32..=u8::MAX {
            assert_eq!(local_ack_timeout_ns(t), None);
        }
    }

    /// `bring_up` asks each step for exactly the attributes ibv_rc_pingpong,
    /// ibv_uc_pingpong and ibv_ud_pingpong pass (written out here by hand, not taken from
    /// the table it reads).
    #[test]
    fn bring_up_masks_are_the_pingpongs_for_each_qp_type() {
        use QpAttrMask as A;
        let masks = |t| QpAttr::default().bring_up(t).map(|a| (a.state, a.mask));
        let rc_rtr = A::AV | A::PATH_MTU | A::DEST_QPN | A::RQ_PSN | A::MAX_DEST_RD_ATOMIC | A::MIN_RNR_TIMER;
        let rc_rts = A::SQ_PSN | A::TIMEOUT | A::RETRY_CNT | A::RNR_RETRY | A::MAX_QP_RD_ATOMIC;
        let init = A::STATE | A::PKEY_INDEX | A::PORT;
        assert_eq!(
            masks(QpType::Rc),
            [
                (QpState::Init, init | A::ACCESS_FLAGS),
                (QpState::Rtr, A::STATE | rc_rtr),
                (QpState::Rts, A::STATE | rc_rts)
            ]
        );
        assert_eq!(
            masks(QpType::Uc),
            [
                (QpState::Init, init | A::ACCESS_FLAGS),
                (QpState::Rtr, A::STATE | A::AV | A::PATH_MTU | A::DEST_QPN | A::RQ_PSN),
                (QpState::Rts, A::STATE | A::SQ_PSN)
            ]
        );
        assert_eq!(
            masks(QpType::Ud),
            [(QpState::Init, init | A::QKEY), (QpState::Rtr, A::STATE), (QpState::Rts, A::STATE | A::SQ_PSN)]
        );
        // Values pass through untouched; only the mask and state are set.
        let v = QpAttr { dest_qpn: 0x42, sq_psn: 7, ..QpAttr::default() };
        assert!(v.bring_up(QpType::Rc).iter().all(|a| a.dest_qpn == 0x42 && a.sq_psn == 7));
    }
}
