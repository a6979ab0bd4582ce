//! The RC responder: a pipeline of checks, each failure mapped to its NAK in one place
//! (after rxe's `rxe_resp.c`).
//!
//! ```text
//! PSN -> opcode sequence -> opcode valid for the QP -> receive WQE available
//!     -> length -> R_Key / PD / bounds / access -> execute -> complete -> acknowledge
//! ```

use super::ctx::{CqSide, Ctx, Time};
use super::out::ZERO_COPY_MIN;
use super::packet::{ack_aeth, ack_repr, packets_for, position, rd_atomic_reply, read_response, segment};
use super::qp::{InProgress, Qp, ReadResource, ResourceKind};
use super::rd_atomic;
use super::refusal::Refusal;
use crate::mr::Mtpt;
use crate::mr::{AccessError, AccessFlags};
use crate::qp_state::QpState;
use crate::wr::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
use rnic_wire::aeth::{AethRepr, NakCode, Syndrome};
use rnic_wire::opcode::{Operation, Position};
use rnic_wire::roce::RoceRepr;
use rnic_wire::Psn;
use std::sync::atomic::Ordering;

/// Sends a NAK now, after the acknowledgement the QP may hold (so the peer sees them in
/// PSN order).
fn send_ack(qp: &mut Qp, cx: &mut Ctx, psn: Psn, aeth: AethRepr) {
    flush_ack(qp, cx);
    emit_ack(qp, cx, psn, aeth);
}

fn emit_ack(qp: &mut Qp, cx: &mut Ctx, psn: Psn, aeth: AethRepr) {
    let Some(dst) = qp.attr.remote_ip else { return };
    let repr = ack_repr(qp.dest_qpn(), psn, aeth);
    cx.out.emit(&cx.counters, dst, qp.src_port, &repr, |_| {});
}

/// Sends the ACK the QP holds, if any. IBA 9.7.5.1.1 lets a responder coalesce: one ACK
/// for PSN n acknowledges every request up to n, so a burst of AckReq packets handled
/// together is answered once, for the newest.
pub(crate) fn flush_ack(qp: &mut Qp, cx: &mut Ctx) {
    let Some((psn, aeth)) = qp.resp.pending_ack.take() else { return };
    if matches!(qp.state, QpState::Reset | QpState::Init | QpState::Err) {
        return;
    }
    emit_ack(qp, cx, psn, aeth);
}

/// Handles a request packet for `qpn`.
pub(crate) fn handle_request(qp: &mut Qp, cx: &mut Ctx, now: Time, repr: &RoceRepr, payload: &[u8]) {
    if qp.resp.halted {
        // A refusal is waiting for READ responses to drain; later requests are void.
        return;
    }
    let info = repr.bth.opcode.info().expect("checked packet");
    let psn = repr.bth.psn;

    // 1. PSN (IBA 9.7.5.1): ahead -> sequence NAK once; behind -> duplicate.
    let d = qp.resp.epsn.distance(psn);
    if d > 0 {
        cx.counters.out_of_seq_request.fetch_add(1, Ordering::Relaxed);
        if !qp.resp.nak_seq_sent {
            qp.resp.nak_seq_sent = true;
            let (epsn, msn) = (qp.resp.epsn, qp.resp.msn);
            // IBA C9-?: the NAK carries the expected PSN.
            cx.defer_ack(qp, epsn, AethRepr { syndrome: Syndrome::Nak(NakCode::PsnSequenceError), msn });
        }
        return;
    }
    if d < 0 {
        cx.counters.duplicate_request.fetch_add(1, Ordering::Relaxed);
        duplicate(qp, cx, now, repr);
        return;
    }
    qp.resp.nak_seq_sent = false;
    take_srq_wqe(qp, info);

    match check_and_execute(qp, &cx.mtpt, repr, payload) {
        Ok(done) => finish(qp, cx, repr, info, done),
        Err(refusal) => refuse(qp, cx, psn, refusal),
    }
}

/// A QP with a shared receive queue takes a WQE from it when a message that needs one
/// starts and the QP holds none (rxe `get_srq_wqe`); the WQE is then the QP's, counted in
/// its receive queue. Crossing the armed SRQ limit is noted for the engine's event.
pub(super) fn take_srq_wqe(qp: &mut Qp, info: &rnic_wire::OpcodeInfo) {
    let Some(srq) = &qp.shared.srq else { return };
    if !info.consumes_rwqe || !qp.resp.rq.is_empty() || matches!(qp.resp.cur, Some(InProgress::Send { .. })) {
        return;
    }
    if let Some((wqe, limit_hit)) = srq.take() {
        qp.shared.rq_outstanding.fetch_add(1, Ordering::AcqRel);
        qp.resp.rq.push_back(wqe);
        qp.resp.srq_limit_hit |= limit_hit;
    }
}

/// What executing a packet produced.
struct Done {
    /// A receive completion to queue.
    wc: Option<WorkCompletion>,
    /// A READ to answer.
    read: Option<ReadResource>,
}

/// Checks 2 to 7 and execution. Nothing is written unless every check passed.
fn check_and_execute(qp: &mut Qp, mtpt: &Mtpt, repr: &RoceRepr, payload: &[u8]) -> Result<Done, Refusal> {
    let info = repr.bth.opcode.info().expect("checked packet");
    let op = info.operation;
    let pos = info.position;

    // 2. Opcode sequence (IBA 9.8.3.1, rxe check_op_seq): MIDDLE/LAST only continue a
    //    message of the same kind; FIRST/ONLY only start one.
    let continuing = match qp.resp.cur {
        Some(InProgress::Send { .. }) => Some(Operation::Send),
        Some(InProgress::Write { .. }) => Some(Operation::RdmaWrite),
        None => None,
    };
    match (continuing, pos) {
        (Some(kind), Position::Middle | Position::Last) if kind == op => {}
        (None, Position::First | Position::Only) => {}
        _ => return Err(Refusal::InvalidRequest),
    }

    // 3. Opcode valid for this QP: the QP's remote access flags (IBA 10.2.?, rxe
    //    check_op_valid) and the operations this device implements.
    let access = qp.attr.access;
    match op {
        Operation::Send => {}
        Operation::RdmaWrite if access.contains(AccessFlags::REMOTE_WRITE) => {}
        Operation::RdmaReadRequest if access.contains(AccessFlags::REMOTE_READ) => {}
        Operation::CompareSwap | Operation::FetchAdd if access.contains(AccessFlags::REMOTE_ATOMIC) => {}
        // rxe: ATOMIC WRITE needs remote write; FLUSH the flush rights of its placement.
        Operation::AtomicWrite if access.contains(AccessFlags::REMOTE_WRITE) => {}
        Operation::Flush
            if repr.ext.feth.is_some_and(|f| access.contains(rd_atomic::flush_access(f.placement_type))) => {}
        _ => return Err(Refusal::InvalidRequest),
    }

    // 4. Resources: a receive WQE for SEND FIRST/ONLY and WRITE with immediate.
    if info.consumes_rwqe && op == Operation::Send && qp.resp.rq.is_empty() {
        return Err(Refusal::Rnr);
    }
    if info.consumes_rwqe && op == Operation::RdmaWrite && qp.resp.rq.is_empty() {
        return Err(Refusal::Rnr);
    }
    let rd_atomic = matches!(
        op,
        Operation::RdmaReadRequest
            | Operation::CompareSwap
            | Operation::FetchAdd
            | Operation::AtomicWrite
            | Operation::Flush
    );
    if rd_atomic && qp.resp.reads.len() >= usize::from(qp.attr.max_dest_rd_atomic.max(1)) {
        // More outstanding READs than negotiated: drop the oldest saved resource (it can
        // no longer be answered as a duplicate), as rxe reuses its resource ring.
        qp.resp.reads.pop_front();
    }

    // 5. Length (IBA 9.7.4.1.?, C9-?): FIRST and MIDDLE carry exactly one MTU, LAST
    //    between 1 and MTU, ONLY at most MTU.
    let mtu = qp.mtu;
    let len_ok = match pos {
        Position::First | Position::Middle => payload.len() == mtu,
        Position::Last => !payload.is_empty() && payload.len() <= mtu,
        Position::Only => payload.len() <= mtu,
    };
    if !len_ok && op != Operation::RdmaReadRequest {
        return Err(Refusal::InvalidRequest);
    }

    match op {
        Operation::Send => {
            let offset = match &qp.resp.cur {
                Some(InProgress::Send { offset, .. }) => *offset,
                _ => 0,
            };
            let rwqe_len = match &qp.resp.cur {
                Some(InProgress::Send { rwqe, .. }) => rwqe.len,
                _ => qp.resp.rq.front().map_or(0, |r| r.len),
            };
            if offset + payload.len() > rwqe_len {
                return Err(Refusal::LengthError);
            }
            // 7. Execute: scatter into the receive buffers.
            let cur = match qp.resp.cur.take() {
                Some(InProgress::Send { rwqe, offset }) => InProgress::Send { rwqe, offset },
                _ => {
                    let rwqe = qp.resp.rq.pop_front().expect("checked above");
                    InProgress::Send { rwqe, offset: 0 }
                }
            };
            let InProgress::Send { rwqe, offset } = cur else { unreachable!() };
            if !rwqe.data.scatter(offset, payload) {
                qp.resp.cur = Some(InProgress::Send { rwqe, offset });
                return Err(Refusal::RemoteOperational);
            }
            let offset = offset + payload.len();
            if pos.ends() {
                if let Some(rkey) = repr.ext.ieth {
                    // IBA 10.6.7 / rxe `invalidate_rkey`: after the data is placed, the
                    // region named by the IETH becomes invalid.
                    if mtpt.invalidate_for(rkey, qp.shared.pd).is_err() {
                        qp.resp.cur = Some(InProgress::Send { rwqe, offset });
                        return Err(Refusal::InvalidateRkey);
                    }
                }
                let wc = WorkCompletion {
                    byte_len: u32::try_from(offset).unwrap_or(u32::MAX),
                    imm_data: repr.ext.imm_data.unwrap_or(0),
                    src_qp: qp.attr.dest_qpn,
                    wc_flags: WcFlags {
                        with_imm: repr.ext.imm_data.is_some(),
                        with_inv: repr.ext.ieth.is_some(),
                        ..WcFlags::default()
                    },
                    invalidated_rkey: repr.ext.ieth.unwrap_or(0),
                    ..WorkCompletion::new(rwqe.wr_id, WcStatus::Success, WcOpcode::Recv, qp.qpn().value())
                };
                qp.shared.rq_outstanding.fetch_sub(1, Ordering::AcqRel);
                Ok(Done { wc: Some(wc), read: None })
            } else {
                qp.resp.cur = Some(InProgress::Send { rwqe, offset });
                Ok(Done { wc: None, read: None })
            }
        }
        Operation::RdmaWrite => {
            let (target, offset, dma_len) = match qp.resp.cur.take() {
                Some(InProgress::Write { target, offset, dma_len }) => (target, offset, dma_len),
                _ => {
                    // 6. R_Key on the first packet (IBA C9-88: a zero-length WRITE is not
                    //    checked).
                    let reth = repr.ext.reth.expect("FIRST/ONLY WRITE carries a RETH");
                    let dma_len = reth.dma_len as usize;
                    let target = if dma_len == 0 {
                        None
                    } else {
                        Some(
                            e_check(qp, mtpt, reth.rkey, reth.va, dma_len, AccessFlags::REMOTE_WRITE)
                                .map_err(|a| Refusal::RemoteAccess(Some(a)))?,
                        )
                    };
                    (target, 0, dma_len)
                }
            };
            // 5 (cont.). The payload must stay inside the RETH's DMA length, and the last
            // packet must end it exactly (rxe: resid must reach 0).
            let end = offset + payload.len();
            if end > dma_len || (pos.ends() && end != dma_len) {
                qp.resp.cur = None;
                return Err(Refusal::InvalidRequest);
            }
            if let Some(t) = &target {
                if !payload.is_empty() && t.write(offset, payload).is_err() {
                    return Err(Refusal::RemoteOperational);
                }
            }
            if pos.ends() {
                let wc = if repr.ext.imm_data.is_some() {
                    let rwqe = qp.resp.rq.pop_front().expect("checked above");
                    qp.shared.rq_outstanding.fetch_sub(1, Ordering::AcqRel);
                    Some(WorkCompletion {
                        byte_len: u32::try_from(dma_len).unwrap_or(u32::MAX),
                        imm_data: repr.ext.imm_data.unwrap_or(0),
                        src_qp: qp.attr.dest_qpn,
                        wc_flags: WcFlags { with_imm: true, ..WcFlags::default() },
                        ..WorkCompletion::new(
                            rwqe.wr_id,
                            WcStatus::Success,
                            WcOpcode::RecvRdmaWithImm,
                            qp.qpn().value(),
                        )
                    })
                } else {
                    None
                };
                Ok(Done { wc, read: None })
            } else {
                qp.resp.cur = Some(InProgress::Write { target, offset: end, dma_len });
                Ok(Done { wc: None, read: None })
            }
        }
        Operation::RdmaReadRequest => {
            let reth = repr.ext.reth.expect("READ carries a RETH");
            let len = reth.dma_len as usize;
            if len > 0 {
                e_check(qp, mtpt, reth.rkey, reth.va, len, AccessFlags::REMOTE_READ)
                    .map_err(|a| Refusal::RemoteAccess(Some(a)))?;
            }
            let res = ReadResource {
                psn: repr.bth.psn,
                npkts: packets_for(len, mtu),
                va: reth.va,
                rkey: reth.rkey,
                len,
                next: 0,
                kind: ResourceKind::Read,
            };
            Ok(Done { wc: None, read: Some(res) })
        }
        Operation::CompareSwap | Operation::FetchAdd => {
            Ok(Done { wc: None, read: Some(rd_atomic::execute_atomic(qp, mtpt, repr, op)?) })
        }
        Operation::AtomicWrite => {
            Ok(Done { wc: None, read: Some(rd_atomic::execute_atomic_write(qp, mtpt, repr, payload)?) })
        }
        Operation::Flush => Ok(Done { wc: None, read: Some(rd_atomic::execute_flush(qp, mtpt, repr)?) }),
        _ => Err(Refusal::InvalidRequest),
    }
}

fn e_check(
    qp: &Qp,
    mtpt: &Mtpt,
    rkey: u32,
    va: u64,
    len: usize,
    need: AccessFlags,
) -> Result<crate::mr::MrSlice, AccessError> {
    mtpt.check_remote(rkey, qp.shared.pd, va, len, need)
}

/// Step 8 and 9: completions, MSN, ePSN, acknowledgement, READ responses.
fn finish(qp: &mut Qp, cx: &mut Ctx, repr: &RoceRepr, info: &rnic_wire::OpcodeInfo, done: Done) {
    let psn = repr.bth.psn;
    if let Some(res) = done.read {
        qp.resp.epsn = psn.add(res.npkts);
        qp.resp.msn = (qp.resp.msn + 1) & 0x00FF_FFFF;
        // Every reply (READ responses, atomic acknowledgement) goes out through the
        // paced queue, so none overtakes an earlier one.
        qp.resp.reads.push_back(res);
        cx.queue_reads(qp);
        return;
    }
    qp.resp.epsn = psn.next();
    if info.position.ends() {
        qp.resp.msn = (qp.resp.msn + 1) & 0x00FF_FFFF;
    }
    let msn = qp.resp.msn;
    if let Some(wc) = done.wc {
        if info.operation == Operation::Send {
            cx.counters.rdma_recvs.fetch_add(1, Ordering::Relaxed);
        }
        cx.push_wc(qp, CqSide::Recv, wc, repr.bth.se);
    }
    if repr.bth.ack_req {
        cx.defer_ack(qp, psn, ack_aeth(msn));
    }
}

/// Sends up to `budget` READ response packets of the QP, oldest READ first (IBA 9.7.5.1:
/// responses go in request order). Returns the packets sent and whether more remain.
pub(crate) fn pump_reads(qp: &mut Qp, cx: &mut Ctx, budget: usize) -> (usize, bool) {
    let zero_copy = cx.config.zero_copy;
    let (out, counters, mtpt) = (&mut cx.out, &*cx.counters, &*cx.mtpt);
    if !qp.receives() {
        return (0, false);
    }
    let Some(dst) = qp.attr.remote_ip else { return (0, false) };
    let (mtu, msn, sport, dest_qp) = (qp.mtu, qp.resp.msn, qp.src_port, qp.dest_qpn());
    let mut sent = 0;
    while sent < budget {
        let Some(res) = qp.resp.reads.iter_mut().find(|r| r.next < r.npkts) else { break };
        if res.kind != ResourceKind::Read {
            // One packet: the atomic acknowledgement or the zero-length response.
            let repr = rd_atomic_reply(res, dest_qp, msn);
            out.emit(counters, dst, sport, &repr, |_| {});
            res.next = res.npkts;
            sent += 1;
            continue;
        }
        let slice = if res.len > 0 {
            match mtpt.check_remote(res.rkey, qp.shared.pd, res.va, res.len, AccessFlags::REMOTE_READ) {
                Ok(s) => Some(s),
                Err(_) => {
                    // The region went away since the READ was accepted (deregistered or
                    // invalidated): nothing more can be sent for it.
                    res.next = res.npkts;
                    continue;
                }
            }
        } else {
            None
        };
        while sent < budget && res.next < res.npkts {
            let k = res.next;
            let pos = position(k, res.npkts);
            let (offset, plen) = segment(k, res.len, mtu);
            let repr = read_response(dest_qp, res.psn, k, pos, plen, msn);
            let s = slice.as_ref();
            match s.filter(|_| zero_copy && plen >= ZERO_COPY_MIN) {
                Some(s) => out.emit_zero_copy(counters, dst, sport, &repr, s.block(), s.block_offset() + offset),
                None => out.emit(counters, dst, sport, &repr, |p| {
                    if let Some(s) = s {
                        let _ = s.read(offset, p);
                    }
                }),
            }
            res.next += 1;
            sent += 1;
        }
    }
    let more = qp.resp.reads.iter().any(|r| r.next < r.npkts);
    (sent, more)
}

/// A duplicate request (IBA 9.7.5.1.5): SEND and WRITE are acknowledged again and not
/// executed; a READ is answered again from the saved resource.
fn duplicate(qp: &mut Qp, cx: &mut Ctx, _now: Time, repr: &RoceRepr) {
    let info = repr.bth.opcode.info().expect("checked packet");
    if info.operation == Operation::RdmaReadRequest {
        let psn = repr.bth.psn;
        let found = qp.resp.reads.iter_mut().find(|r| {
            let d = r.psn.distance(psn);
            d >= 0 && (d as u64) < u64::from(r.npkts)
        });
        if let Some(r) = found.filter(|r| r.kind == ResourceKind::Read) {
            // Answer again from the requested packet on (the requester asks from its
            // first missing response), replacing whatever of it was still to go.
            r.next = u32::try_from(r.psn.distance(psn)).unwrap_or(0);
            cx.queue_reads(qp);
        }
        return;
    }
    if matches!(
        info.operation,
        Operation::CompareSwap | Operation::FetchAdd | Operation::AtomicWrite | Operation::Flush
    ) {
        // IBA 9.7.5.1.5: a duplicate atomic gets the saved result and is never executed
        // again; a duplicate ATOMIC WRITE / FLUSH is acknowledged again (rxe replays the
        // resource). No resource left (evicted): class D, dropped silently (rxe).
        let psn = repr.bth.psn;
        let atomic = matches!(info.operation, Operation::CompareSwap | Operation::FetchAdd);
        let found = qp.resp.reads.iter_mut().find(|r| {
            r.psn == psn && matches!(r.kind, ResourceKind::Atomic { .. }) == atomic && r.kind != ResourceKind::Read
        });
        if let Some(r) = found {
            r.next = 0;
            cx.queue_reads(qp);
        }
        return;
    }
    // rxe: acknowledge the most recent PSN received, whatever the duplicate's AckReq; a
    // burst of duplicates (a go-back-N retransmission) is answered by one coalesced ACK.
    let (last, msn) = (qp.resp.epsn.sub(1), qp.resp.msn);
    cx.defer_ack(qp, last, ack_aeth(msn));
}

/// Sends the NAK for a refusal; every refusal but RNR puts the QP in the error state
/// (IBA 9.9.3.1, rxe `goto_error`).
fn refuse(qp: &mut Qp, cx: &mut Ctx, psn: Psn, refusal: Refusal) {
    let syndrome = refusal.syndrome(qp.attr.min_rnr_timer);
    let msn = qp.resp.msn;
    let len_err_wc = if matches!(refusal, Refusal::LengthError | Refusal::InvalidateRkey) {
        let status = if refusal == Refusal::LengthError { WcStatus::LocLenErr } else { WcStatus::RemInvReqErr };
        // The SEND in progress (or the one about to start) completes with LOC_LEN_ERR
        // (or REM_INV_REQ_ERR for a bad IETH).
        let rwqe = match qp.resp.cur.take() {
            Some(InProgress::Send { rwqe, .. }) => Some(rwqe),
            _ => qp.resp.rq.pop_front(),
        };
        rwqe.map(|r| {
            qp.shared.rq_outstanding.fetch_sub(1, Ordering::AcqRel);
            WorkCompletion {
                src_qp: qp.attr.dest_qpn,
                ..WorkCompletion::new(r.wr_id, status, WcOpcode::Recv, qp.qpn().value())
            }
        })
    } else {
        None
    };
    if refusal == Refusal::Rnr {
        cx.counters.send_rnr_err.fetch_add(1, Ordering::Relaxed);
    } else {
        cx.counters.send_nak_err.fetch_add(1, Ordering::Relaxed);
    }
    let reads_going = qp.resp.reads_queued;
    if refusal == Refusal::Rnr {
        // The QP stays usable: the RNR NAK queues behind READ responses like an ACK. It
        // also stands for the one NAK of this gap: the packets behind the refused one
        // are now out of sequence, and the RNR NAK already sends the requester back to
        // its PSN, so they draw no sequence NAK (which would cost a transport retry).
        qp.resp.nak_seq_sent = true;
        cx.defer_ack(qp, psn, AethRepr { syndrome, msn });
    } else if reads_going {
        // Earlier READ responses are still going out: the NAK follows them, and the QP
        // enters the error state then (see `Engine::generate`).
        qp.resp.halted = true;
        qp.resp.pending_ack = None;
        cx.defer_ack(qp, psn, AethRepr { syndrome, msn });
    } else {
        send_ack(qp, cx, psn, AethRepr { syndrome, msn });
    }
    if refusal != Refusal::Rnr {
        if let Some(wc) = len_err_wc {
            cx.push_wc(qp, CqSide::Recv, wc, false);
        }
        if !reads_going {
            cx.enter_error(qp, None);
        }
    }
}
