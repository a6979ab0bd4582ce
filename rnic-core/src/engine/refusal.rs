//! Why a responder refuses a request, and what each refusal becomes: the one place where
//! a failed check turns into a NAK syndrome (RC) and a receive completion status (IBA
//! 9.9.3, rxe `rxe_resp.c`'s error states). UC maps every refusal to a silent drop of the
//! message instead (class D, IBA 9.9.3; rxe `do_class_d1e_error`), in `responder.rs`.

use crate::mr::AccessError;
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
}
