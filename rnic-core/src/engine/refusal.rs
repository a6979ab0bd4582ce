//! Why a responder refuses a request, and what each refusal becomes, on both ends: the
//! one place where a failed check turns into a NAK syndrome and a receive completion
//! status at the responder, and where a NAK turns into the send completion status at the
//! requester (IBA 9.9.3, rxe `rxe_resp.c`'s error states and `rxe_comp.c`'s NAK
//! handling). On UC every refusal is instead a silent drop of the message (class D, IBA
//! 9.9.3; rxe `do_class_d1e_error`), in `responder.rs` `fail`.

use crate::mr::AccessError;
use crate::wr::WcStatus;
use rnic_wire::aeth::{NakCode, Syndrome};

/// Why the responder refused a request: the one place where check failures become NAKs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Opcode out of sequence, unsupported, or a length error (NAK invalid request).
    InvalidRequest,
    /// The receive buffers are too small for the SEND: the receive WQE completes with
    /// LOC_LEN_ERR and the requester gets NAK invalid request (rxe RESPST_ERR_LENGTH).
    LengthError,
    /// R_Key, PD, access right or bounds (NAK remote access error).
    RemoteAccess(Option<AccessError>),
    /// The responder could not carry it out (NAK remote operational error).
    RemoteOperational,
    /// No receive WQE: RNR NAK; the QP stays usable.
    Rnr,
    /// The R_Key of a SEND with Invalidate names no region of the QP's PD: the receive
    /// WQE completes with REM_INV_REQ_ERR (rxe `RESPST_ERR_INVALIDATE_RKEY`, class J) and
    /// the requester gets NAK invalid request.
    InvalidateRkey,
}

impl Refusal {
    /// The syndrome of the NAK an RC responder answers with.
    pub(crate) fn syndrome(self, min_rnr_timer: u8) -> Syndrome {
        match self {
            Refusal::InvalidRequest | Refusal::LengthError | Refusal::InvalidateRkey => {
                Syndrome::Nak(NakCode::InvalidRequest)
            }
            Refusal::RemoteAccess(_) => Syndrome::Nak(NakCode::RemoteAccessError),
            Refusal::RemoteOperational => Syndrome::Nak(NakCode::RemoteOperationalError),
            Refusal::Rnr => Syndrome::RnrNak { timer: min_rnr_timer },
        }
    }

    /// The status the receive WQE of the refused SEND completes with, when the refusal
    /// consumes one (the others leave it to be flushed or reused).
    pub(crate) fn recv_status(self) -> Option<WcStatus> {
        match self {
            Refusal::LengthError => Some(WcStatus::LocLenErr),
            Refusal::InvalidateRkey => Some(WcStatus::RemInvReqErr),
            _ => None,
        }
    }

    /// The asynchronous event a fatal refusal raises on the responder's QP (IBA 11.6.3.1;
    /// verbs' `IBV_EVENT_QP_ACCESS_ERR` / `QP_REQ_ERR` / `QP_FATAL`).
    pub(crate) fn event(self, qpn: u32) -> Option<super::ctx::AsyncEvent> {
        use super::ctx::AsyncEvent;
        match self {
            Refusal::Rnr => None,
            Refusal::RemoteAccess(_) => Some(AsyncEvent::QpAccessErr { qpn }),
            Refusal::InvalidRequest | Refusal::LengthError | Refusal::InvalidateRkey => {
                Some(AsyncEvent::QpReqErr { qpn })
            }
            Refusal::RemoteOperational => Some(AsyncEvent::QpFatal { qpn }),
        }
    }

    /// Whether the QP survives the refusal: only an RNR NAK leaves it usable (IBA 9.9.3.1,
    /// rxe: every other NAK is followed by `goto_error`).
    pub(crate) fn is_fatal(self) -> bool {
        self != Refusal::Rnr
    }
}

/// At the requester: the status a fatal NAK gives the WQE it names (IBA 9.9.2, rxe
/// `rxe_comp.c` `check_ack`). Sequence errors and RNR NAKs are not fatal and never get here.
pub(crate) fn nak_status(code: NakCode) -> WcStatus {
    match code {
        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
        NakCode::RemoteOperationalError => WcStatus::RemOpErr,
        _ => WcStatus::BadRespErr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The map written out against rxe's responder error states (`rxe_responder`: class
    /// B RNR, class C invalid request / remote access, class A remote operational, class J
    /// invalidate) and its completer's NAK handling.
    #[test]
    fn each_refusal_has_its_rxe_nak_and_status() {
        let inv = Syndrome::Nak(NakCode::InvalidRequest);
        let rows = [
            (Refusal::InvalidRequest, inv, None, true),
            (Refusal::LengthError, inv, Some(WcStatus::LocLenErr), true),
            (Refusal::InvalidateRkey, inv, Some(WcStatus::RemInvReqErr), true),
            (Refusal::RemoteAccess(None), Syndrome::Nak(NakCode::RemoteAccessError), None, true),
            (Refusal::RemoteOperational, Syndrome::Nak(NakCode::RemoteOperationalError), None, true),
            (Refusal::Rnr, Syndrome::RnrNak { timer: 12 }, None, false),
        ];
        for (r, syn, status, fatal) in rows {
            assert_eq!((r.syndrome(12), r.recv_status(), r.is_fatal()), (syn, status, fatal), "{r:?}");
        }
        assert_eq!(nak_status(NakCode::InvalidRequest), WcStatus::RemInvReqErr);
        assert_eq!(nak_status(NakCode::RemoteAccessError), WcStatus::RemAccessErr);
        assert_eq!(nak_status(NakCode::RemoteOperationalError), WcStatus::RemOpErr);
    }
}
