//! The sender's state of a QP (rxe `qp->req` and `qp->comp`, merged as rxe merged its
//! requester and completer): the send queue with each WQE's place in the PSN space, the
//! acknowledged and sent points, retry counters and the two timers.

use crate::post::SendWqe;
use crate::wr::SendOp;
use rnic_wire::Psn;
use std::collections::VecDeque;

/// The requester and completer state of a QP.
#[derive(Debug)]
pub(crate) struct ReqState {
    pub(crate) sq: VecDeque<InFlight>,
    /// Index in `sq` of the first WQE with packets left to send.
    pub(crate) next_send: usize,
    /// PSN the next new WQE starts at.
    pub(crate) next_psn: Psn,
    /// Oldest unacknowledged PSN.
    pub(crate) una: Psn,
    /// One past the highest PSN transmitted.
    pub(crate) sent_end: Psn,
    pub(crate) retry_left: u8,
    /// On the engine's list of QPs with work requests queued but not yet transmitted
    /// (`Engine::queue_send`).
    pub(crate) queued: bool,
    /// A local operation (LOCAL_INV, RC only) is among them: the next
    /// `Engine::transmit_queued` retires it when it reached the front, as `post_send`
    /// does at once.
    pub(crate) queued_local: bool,
    pub(crate) rnr_left: u8,
    /// A retransmission is under way: further NAKs or gaps start no other until
    /// progress is made or the timer fires (rxe `comp.started_retry`).
    pub(crate) started_retry: bool,
    pub(crate) rto_deadline: Option<u64>,
    pub(crate) rnr_deadline: Option<u64>,
    pub(crate) pkts_since_ackreq: u32,
    pub(crate) reads_outstanding: u32,
    /// Congestion control's reaction point for this QP (RC with
    /// [`EngineConfig::cc`](super::EngineConfig::cc)): its rate and pacer.
    pub(crate) cc: Option<Cc>,
    /// The pacer holds the next packet until then.
    pub(crate) pace_deadline: Option<u64>,
    /// Flow control: this QP's share of its destination's in-flight bytes.
    pub(crate) inflight_bytes: u64,
    /// Waiting in line for room towards the destination.
    pub(crate) dest_blocked: bool,
}

/// A QP's DCQCN reaction point: its rate, and the token bucket that spaces its packets
/// at that rate.
#[derive(Debug, Clone)]
pub(crate) struct Cc {
    pub(crate) rate: crate::cc::RateState,
    pub(crate) pacer: crate::cc::Pacer,
}

impl ReqState {
    pub(crate) fn new() -> ReqState {
        ReqState {
            sq: VecDeque::new(),
            next_send: 0,
            next_psn: Psn::new(0),
            una: Psn::new(0),
            sent_end: Psn::new(0),
            retry_left: 7,
            queued: false,
            queued_local: false,
            rnr_left: 7,
            started_retry: false,
            rto_deadline: None,
            rnr_deadline: None,
            pkts_since_ackreq: 0,
            reads_outstanding: 0,
            cc: None,
            pace_deadline: None,
            inflight_bytes: 0,
            dest_blocked: false,
        }
    }
}

/// A send WQE in the engine, with its place in the PSN space.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub(crate) wqe: SendWqe,
    /// PSN of the first packet (READ: of the request; responses use the same range).
    pub(crate) first_psn: Psn,
    /// Packets (READ: response packets) the message spans.
    pub(crate) npkts: u32,
    /// Packets transmitted in the current pass (READ: 0 or 1 for the request).
    pub(crate) sent: u32,
    /// READ: response packets received so far.
    pub(crate) read_got: u32,
}

// A send queue entry is moved twice per work request (in, and out when it retires):
// at 128 bytes or less a move is inline, above it a `memcpy` call (see `WqeData`).
const _: () = assert!(std::mem::size_of::<InFlight>() <= 128);

impl InFlight {
    pub(crate) fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts.saturating_sub(1))
    }
    /// READ or any other request answered by responses rather than ACKs (atomics,
    /// ATOMIC WRITE, FLUSH): one request packet, counted against `max_rd_atomic`,
    /// completed when its responses arrived (`read_got == npkts`).
    pub(crate) fn is_read(&self) -> bool {
        self.wqe.op.is_rd_atomic()
    }
    /// Bytes of response payload expected (READ: the message; the others: none, an
    /// atomic's 8 bytes come in the AtomicAckETH).
    pub(crate) fn response_len(&self) -> usize {
        if matches!(self.wqe.op, SendOp::RdmaRead { .. }) {
            self.wqe.len
        } else {
            0
        }
    }
    /// True once every packet (READ: every response) is accounted for.
    pub(crate) fn contains(&self, psn: Psn) -> bool {
        let d = self.first_psn.distance(psn);
        d >= 0 && (d as u64) < u64::from(self.npkts)
    }
}
