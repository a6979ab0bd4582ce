//! The responder's state of a QP (rxe `qp->resp`): the receive queue, the expected PSN
//! and MSN, the message in progress, the saved READ/atomic resources, the held
//! acknowledgement.

use crate::mr::MrSlice;
use crate::post::RecvWqe;
use rnic_wire::Psn;
use std::collections::VecDeque;

/// The responder state of a QP.
#[derive(Debug)]
pub(crate) struct RespState {
    pub(crate) rq: VecDeque<RecvWqe>,
    pub(crate) epsn: Psn,
    pub(crate) msn: u32,
    pub(crate) cur: Option<InProgress>,
    pub(crate) nak_seq_sent: bool,
    pub(crate) reads: VecDeque<ReadResource>,
    /// UC responder: the message in progress is being dropped until the next FIRST or
    /// ONLY packet (rxe `resp.drop_msg`).
    pub(crate) uc_drop: bool,
    /// A PSN sequence error NAK the responder owes, held for the round like an ACK; it
    /// leaves before `pending_ack` (it answers an earlier request) and is replaced only by
    /// the NAK of a later gap (`Ctx::defer_ack`).
    pub(crate) seq_nak: Option<HeldAnswer>,
    /// An acknowledgement (ACK, RNR NAK) the responder owes but holds back so that several
    /// can be coalesced into one; sent when the engine's output is drained.
    pub(crate) pending_ack: Option<HeldAnswer>,
    /// Whether this QP is in the engine's list of QPs with READ responses to send.
    pub(crate) reads_queued: bool,
    /// The responder refused a request while READ responses were still going out: it
    /// takes no more requests, and the QP enters the error state once they are sent and
    /// the NAK after them (rxe finishes a READ reply before it looks at the next packet).
    pub(crate) halted: bool,
    /// The responder took a WQE from the SRQ that crossed its limit: the engine raises
    /// the event.
    pub(crate) srq_limit_hit: bool,
    /// XRC target: the XRC SRQ the request being handled names (its XRCETH), whose PD
    /// its memory is checked against and whose CQ its receive completes in.
    pub(crate) xrc_srq: Option<std::sync::Arc<crate::srq::Srq>>,
}

impl RespState {
    pub(crate) fn new() -> RespState {
        RespState {
            rq: VecDeque::new(),
            epsn: Psn::new(0),
            msn: 0,
            cur: None,
            nak_seq_sent: false,
            reads: VecDeque::new(),
            uc_drop: false,
            seq_nak: None,
            pending_ack: None,
            reads_queued: false,
            halted: false,
            srq_limit_hit: false,
            xrc_srq: None,
        }
    }
}

/// An acknowledgement held for the round: its PSN and AETH.
pub(crate) type HeldAnswer = (Psn, rnic_wire::aeth::AethRepr);

impl RespState {
    /// Takes the answers held for the round, in the order they must leave.
    pub(crate) fn take_held(&mut self) -> [Option<HeldAnswer>; 2] {
        [self.seq_nak.take(), self.pending_ack.take()]
    }
}

/// A message the responder is in the middle of.
#[derive(Debug)]
pub(crate) enum InProgress {
    Send { rwqe: RecvWqe, offset: usize },
    Write { target: Option<MrSlice>, offset: usize, dma_len: usize },
}

/// A READ (or atomic, ATOMIC WRITE, FLUSH) the responder executed, kept to answer a
/// duplicate (IBA 9.7.5.1.5; rxe `resp_res`): at most `max_dest_rd_atomic` of them.
#[derive(Debug, Clone)]
pub(crate) struct ReadResource {
    pub(crate) psn: Psn,
    pub(crate) npkts: u32,
    pub(crate) va: u64,
    pub(crate) rkey: u32,
    pub(crate) len: usize,
    /// The protection domain its memory is checked against (an XRC target's requests
    /// name SRQs of different PDs).
    pub(crate) pd: crate::mr::PdId,
    /// The next response packet to send (`npkts` once all are out): responses are paced
    /// out a burst at a time, not queued all at once.
    pub(crate) next: u32,
    /// What was executed; for atomics the saved result a duplicate gets again.
    pub(crate) kind: ResourceKind,
    /// The MSN as of this request (it counted itself), which its responses' AETH carries
    /// however many requests were counted before they leave.
    pub(crate) msn: u32,
    /// Answers to earlier requests that were held when this one was accepted: they leave
    /// before its first response (IBA 9.7.5.1: responses in PSN order).
    pub(crate) before: [Option<HeldAnswer>; 2],
    /// A replay for a duplicate request, queued behind what was still to go: not a saved
    /// resource (no duplicate is matched against it, it does not count against
    /// `max_dest_rd_atomic`), dropped once sent.
    pub(crate) replay: bool,
}

/// The operation a responder resource belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResourceKind {
    /// RDMA READ: a duplicate is answered by reading the memory again.
    Read,
    /// COMPARE & SWAP / FETCH & ADD: a duplicate gets the saved original value and is
    /// never executed again (IBA 9.7.5.1.5: atomics are not idempotent; rxe
    /// `duplicate_request` replays the saved resource).
    Atomic {
        /// The value the target held before the operation.
        orig: u64,
    },
    /// ATOMIC WRITE or FLUSH: a duplicate is acknowledged again, not executed (rxe
    /// replays the zero-length READ RESPONSE; IBA oA19-14/15 for FLUSH).
    Acked,
}
