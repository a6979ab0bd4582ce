//! The UC responder: the RC pipeline without acknowledgements, where every failure drops
//! the message silently instead of NAKing (IBA 9.9.3 class D; rxe `rxe_resp.c` UC cases).
//!
//! ```text
//! PSN (resync on FIRST/ONLY) -> opcode sequence -> opcode valid for the QP -> length
//!     -> receive WQE / R_Key -> execute -> complete (LAST/ONLY)
//! ```
//!
//! A message is dropped as a whole: once a packet is lost, out of sequence or bad, every
//! packet up to the next FIRST or ONLY is discarded (`uc_drop`, rxe `resp.drop_msg`). A SEND
//! dropped part-way gives its receive WQE back to the head of the receive queue, to be
//! reused by the next message (IBA 9.8.3 / rxe class D1); RDMA WRITE data already placed
//! stays placed, as IBA allows. The sender is never told.

use super::ctx::{CqSide, Ctx};
use super::qp::{InProgress, Qp};
use crate::counters::Counters;
use crate::mr::AccessFlags;
use crate::mr::Mtpt;
use crate::wr::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
use rnic_wire::opcode::{Operation, Position};
use rnic_wire::roce::RoceRepr;
use std::sync::atomic::Ordering;

/// Handles a UC request packet for `qpn`.
pub(crate) fn handle_request(qp: &mut Qp, cx: &mut Ctx, repr: &RoceRepr, payload: &[u8]) {
    let Some(info) = repr.bth.opcode.info() else { return };
    let psn = repr.bth.psn;
    let starts = info.position.starts();

    // 1. PSN (IBA 9.8.3.1, rxe check_psn for UC): after a gap, or while a message is being
    //    dropped, only a FIRST or ONLY packet is accepted, whatever its PSN: it resynchronises
    //    the responder. Anything else is dropped and keeps the message dropped.
    if qp.resp.uc_drop || psn != qp.resp.epsn {
        if !starts {
            drop_message(qp, &cx.counters);
            return;
        }
        qp.resp.uc_drop = false;
    }

    // 2. Opcode sequence (IBA 9.8.3.1): MIDDLE/LAST must continue a message of their kind.
    //    A FIRST/ONLY while a message is in progress means that message's tail was lost: it
    //    is abandoned and the new one starts (where rxe also drops the new FIRST).
    let continuing = match qp.resp.cur {
        Some(InProgress::Send { .. }) => Some(Operation::Send),
        Some(InProgress::Write { .. }) => Some(Operation::RdmaWrite),
        None => None,
    };
    match (continuing, starts) {
        (Some(_), true) => abandon(qp, &cx.counters),
        (Some(kind), false) if kind == info.operation => {}
        (_, false) => {
            drop_message(qp, &cx.counters);
            return;
        }
        (None, true) => {}
    }

    // A QP on an SRQ takes its receive WQE from it when a message needing one starts.
    super::responder::take_srq_wqe(qp, info);
    match execute(qp, &cx.mtpt, repr, payload, info.operation, info.position) {
        Some(done) => {
            qp.resp.epsn = psn.next();
            if let Some(wc) = done {
                if info.operation == Operation::Send {
                    cx.counters.rdma_recvs.fetch_add(1, Ordering::Relaxed);
                }
                cx.push_wc(qp, CqSide::Recv, wc, repr.bth.se);
            }
        }
        None => drop_message(qp, &cx.counters),
    }
}

/// Drops the current packet and the rest of its message (class D).
fn drop_message(qp: &mut Qp, counters: &Counters) {
    counters.uc_dropped_pkts.fetch_add(1, Ordering::Relaxed);
    abandon(qp, counters);
    qp.resp.uc_drop = true;
}

/// Forgets the message in progress; a SEND's receive WQE goes back to the head of the
/// receive queue for the next message (rxe `do_class_d1e_error` resets it).
fn abandon(qp: &mut Qp, counters: &Counters) {
    match qp.resp.cur.take() {
        Some(InProgress::Send { rwqe, .. }) => {
            counters.uc_abandoned_msgs.fetch_add(1, Ordering::Relaxed);
            qp.resp.rq.push_front(rwqe);
        }
        Some(InProgress::Write { .. }) => {
            counters.uc_abandoned_msgs.fetch_add(1, Ordering::Relaxed);
        }
        None => {}
    }
}

/// Checks 3 to 6 and execution. `None`: drop the message. `Some(wc)`: the packet was placed,
/// with the receive completion if it ended a message that consumes a receive WQE.
fn execute(
    qp: &mut Qp,
    mtpt: &Mtpt,
    repr: &RoceRepr,
    payload: &[u8],
    op: Operation,
    pos: Position,
) -> Option<Option<WorkCompletion>> {
    // 3. Opcode valid for the QP (rxe check_op_valid for UC): WRITE needs REMOTE_WRITE.
    if op == Operation::RdmaWrite && !qp.attr.access.contains(AccessFlags::REMOTE_WRITE) {
        return None;
    }
    // 4. Length (IBA C9-?, rxe check_length): FIRST and MIDDLE carry exactly one MTU, LAST
    //    between 1 and MTU bytes, ONLY at most MTU.
    let mtu = qp.mtu;
    let len_ok = match pos {
        Position::First | Position::Middle => payload.len() == mtu,
        Position::Last => !payload.is_empty() && payload.len() <= mtu,
        Position::Only => payload.len() <= mtu,
    };
    if !len_ok {
        return None;
    }
    let qp_num = qp.qpn().value();
    let src_qp = qp.attr.dest_qpn;
    match op {
        Operation::Send => {
            // 5. A receive WQE for FIRST/ONLY (none: class D, dropped; UC has no RNR).
            let (rwqe, offset) = match qp.resp.cur.take() {
                Some(InProgress::Send { rwqe, offset }) => (rwqe, offset),
                _ => (qp.resp.rq.pop_front()?, 0),
            };
            // Receive buffer too small: class D, the message is dropped (rxe ERR_LENGTH for
            // UC); the WQE is reused.
            if offset + payload.len() > rwqe.len || !rwqe.data.scatter(offset, payload) {
                qp.resp.cur = Some(InProgress::Send { rwqe, offset });
                return None;
            }
            let offset = offset + payload.len();
            if !pos.ends() {
                qp.resp.cur = Some(InProgress::Send { rwqe, offset });
                return Some(None);
            }
            qp.shared.rq_outstanding.fetch_sub(1, Ordering::AcqRel);
            Some(Some(WorkCompletion {
                byte_len: u32::try_from(offset).unwrap_or(u32::MAX),
                imm_data: repr.ext.imm_data.unwrap_or(0),
                src_qp,
                wc_flags: WcFlags { with_imm: repr.ext.imm_data.is_some(), ..WcFlags::default() },
                ..WorkCompletion::new(rwqe.wr_id, WcStatus::Success, WcOpcode::Recv, qp_num)
            }))
        }
        Operation::RdmaWrite => {
            let (target, offset, dma_len) = match qp.resp.cur.take() {
                Some(InProgress::Write { target, offset, dma_len }) => (target, offset, dma_len),
                _ => {
                    // 6. R_Key on FIRST/ONLY (IBA C9-88: a zero-length WRITE is not checked); a
                    //    violation drops the message (rxe: UC without SRQ, class D).
                    let reth = repr.ext.reth?;
                    let dma_len = reth.dma_len as usize;
                    let target = if dma_len == 0 {
                        None
                    } else {
                        Some(
                            mtpt.check_remote(reth.rkey, qp.shared.pd, reth.va, dma_len, AccessFlags::REMOTE_WRITE)
                                .ok()?,
                        )
                    };
                    (target, 0, dma_len)
                }
            };
            // The payload must stay inside the RETH's DMA length, and the last packet must
            // end it exactly.
            let end = offset + payload.len();
            if end > dma_len || (pos.ends() && end != dma_len) {
                return None;
            }
            // 5 (WRITE with immediate). The receive WQE is taken by the packet carrying the
            // immediate (rxe RXE_RWR_MASK); none: the message is dropped, its data stays.
            if pos.ends() && repr.ext.imm_data.is_some() && qp.resp.rq.is_empty() {
                return None;
            }
            if let Some(t) = &target {
                if !payload.is_empty() && t.write(offset, payload).is_err() {
                    return None;
                }
            }
            if !pos.ends() {
                qp.resp.cur = Some(InProgress::Write { target, offset: end, dma_len });
                return Some(None);
            }
            let Some(imm) = repr.ext.imm_data else { return Some(None) };
            let rwqe = qp.resp.rq.pop_front()?;
            qp.shared.rq_outstanding.fetch_sub(1, Ordering::AcqRel);
            Some(Some(WorkCompletion {
                byte_len: u32::try_from(dma_len).unwrap_or(u32::MAX),
                imm_data: imm,
                src_qp,
                wc_flags: WcFlags { with_imm: true, ..WcFlags::default() },
                ..WorkCompletion::new(rwqe.wr_id, WcStatus::Success, WcOpcode::RecvRdmaWithImm, qp_num)
            }))
        }
        // UC carries nothing else (the opcode table has no other UC opcode).
        _ => None,
    }
}
