//! The responder of RC and UC QPs: one pipeline of checks (after rxe's `rxe_resp.c`,
//! which serves both), each check its own function, each failure a [`Refusal`] whose
//! meaning lives in `refusal.rs`.
//!
//! ```text
//! PSN -> opcode sequence -> opcode valid for the QP -> resources (receive WQE, READ slot)
//!     -> length -> R_Key / PD / bounds / access -> execute -> complete -> acknowledge
//! ```
//!
//! The two transports differ where rxe's do: in the PSN check (RC: sequence NAK once or
//! duplicate; UC: resynchronise on the next FIRST or ONLY) and in what a failed check does
//! (`fail`). RC NAKs (`nak`; every refusal but RNR puts the QP in the error state). UC
//! drops the whole message silently (IBA 9.9.3 class D, rxe `resp.drop_msg`): once a
//! packet is lost, out of sequence or bad, every packet up to the next FIRST or ONLY is
//! discarded; a SEND dropped part-way gives its receive WQE back to the head of the
//! receive queue for the next message (rxe `do_class_d1e_error`); RDMA WRITE data already
//! placed stays placed, as IBA allows. The UC sender is never told, and UC is never
//! acknowledged. UD keeps its own small responder (`ud.rs`).
//!
//! The QP's state (RTR, RTS or SQD) was checked once, by `Engine::handle_packet`.

use super::ctx::{CqSide, Ctx, Time};
use super::out::ZERO_COPY_MIN;
use super::packet::{ack_aeth, ack_repr, packets_for, position, rd_atomic_reply, read_response, segment};
use super::qp::{InProgress, Qp, ReadResource, ResourceKind};
use super::rd_atomic;
use super::refusal::Refusal;
use crate::counters::Counters;
use crate::mr::{AccessFlags, MrSlice, Mtpt};
use crate::qp_state::{QpState, QpType};
use crate::wr::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
use rnic_wire::aeth::{AethRepr, NakCode, Syndrome};
use rnic_wire::opcode::{Operation, Position};
use rnic_wire::roce::RoceRepr;
use rnic_wire::{OpcodeInfo, Psn};
use std::sync::atomic::Ordering;

/// Sends a NAK now, after the acknowledgement the QP may hold (so the peer sees them in
/// PSN order).
fn send_ack(qp: &mut Qp, cx: &mut Ctx, psn: Psn, aeth: AethRepr) {
    flush_ack(qp, cx);
    emit_ack(qp, cx, psn, aeth);
}

fn emit_ack(qp: &mut Qp, cx: &mut Ctx, psn: Psn, aeth: AethRepr) {
    let Some(dst) = qp.attr.remote_ip else { return };
    let repr = ack_repr(qp.transport, qp.dest_qpn(), psn, aeth);
    cx.out.emit(&cx.counters, dst, qp.src_port, &repr, |_| {});
}

/// Sends the answers the QP holds, if any: a sequence NAK, then the ACK. IBA 9.7.5.1.1
/// lets a responder coalesce: one ACK for PSN n acknowledges every request up to n, so a
/// burst of AckReq packets handled together is answered once, for the newest.
pub(crate) fn flush_ack(qp: &mut Qp, cx: &mut Ctx) {
    if qp.resp.seq_nak.is_some() {
        flush_behind_nak(qp, cx);
        return;
    }
    let Some((psn, aeth)) = qp.resp.pending_ack.take() else { return };
    if matches!(qp.state, QpState::Reset | QpState::Init | QpState::Err) {
        return;
    }
    emit_ack(qp, cx, psn, aeth);
}

/// `flush_ack` when a sequence NAK is held: the NAK, then the ACK behind it.
#[cold]
fn flush_behind_nak(qp: &mut Qp, cx: &mut Ctx) {
    let held = qp.resp.take_held();
    if matches!(qp.state, QpState::Reset | QpState::Init | QpState::Err) {
        return;
    }
    for (psn, aeth) in held.into_iter().flatten() {
        emit_ack(qp, cx, psn, aeth);
    }
}

/// Handles an RC or UC request packet.
pub(crate) fn handle_request(qp: &mut Qp, cx: &mut Ctx, now: Time, repr: &RoceRepr, payload: &[u8]) {
    let Some(info) = repr.bth.opcode.info() else { return };
    if qp.resp.halted {
        // A refusal is waiting for READ responses to drain; later requests are void.
        return;
    }
    let uc = qp.shared.qp_type == QpType::Uc;
    if uc {
        if !check_psn_uc(qp, &cx.counters, info, repr.bth.psn) {
            return;
        }
    } else {
        if !check_psn(qp, cx, now, repr, info) {
            return;
        }
        if qp.shared.qp_type == QpType::XrcRecv {
            if let Err(refusal) = check_xrc_srq(qp, repr) {
                nak(qp, cx, repr.bth.psn, refusal);
                return;
            }
        }
        // RC takes an SRQ's WQE as soon as the PSN is the expected one.
        take_srq_wqe(qp, info);
    }
    match checks(qp, cx, repr, info, payload, uc) {
        Ok(done) => complete(qp, cx, repr, info, done, uc),
        Err(refusal) => fail(qp, cx, repr.bth.psn, refusal, uc),
    }
}

/// Checks 2 to 6 and execution (7). Nothing is written unless every check passed.
fn checks(
    qp: &mut Qp,
    cx: &Ctx,
    repr: &RoceRepr,
    info: &OpcodeInfo,
    payload: &[u8],
    uc: bool,
) -> Result<Done, Refusal> {
    check_op_seq(qp, &cx.counters, info, uc)?;
    if uc {
        // UC takes an SRQ's WQE once the packet continues or starts a message.
        take_srq_wqe(qp, info);
    }
    check_op_valid(qp, repr, info)?;
    check_resources(qp, info, uc)?;
    check_length(qp, info, payload)?;
    execute(qp, &cx.mtpt, repr, info, payload)
}

/// What a failed check does: RC NAKs, UC drops the message.
fn fail(qp: &mut Qp, cx: &mut Ctx, psn: Psn, refusal: Refusal, uc: bool) {
    if uc {
        drop_message(qp, &cx.counters);
    } else {
        nak(qp, cx, psn, refusal);
    }
}

/// Check 1: PSN, RC (IBA 9.7.5.1, rxe `check_psn`): ahead -> sequence NAK once; behind ->
/// duplicate. True when the packet is the expected one.
fn check_psn(qp: &mut Qp, cx: &mut Ctx, now: Time, repr: &RoceRepr, info: &OpcodeInfo) -> bool {
    let psn = repr.bth.psn;
    let d = qp.resp.epsn.distance(psn);
    if d > 0 {
        cx.counters.out_of_seq_request.fetch_add(1, Ordering::Relaxed);
        if !qp.resp.nak_seq_sent {
            qp.resp.nak_seq_sent = true;
            let (epsn, msn) = (qp.resp.epsn, qp.resp.msn);
            // The NAK carries the expected PSN (rxe `rxe_responder`, ERR_PSN_OUT_OF_SEQ:
            // class B, `send_ack(.., qp->resp.psn)`).
            cx.defer_ack(qp, epsn, AethRepr { syndrome: Syndrome::Nak(NakCode::PsnSequenceError), msn });
        }
        return false;
    }
    if d < 0 {
        cx.counters.duplicate_request.fetch_add(1, Ordering::Relaxed);
        duplicate(qp, cx, now, repr, info);
        return false;
    }
    qp.resp.nak_seq_sent = false;
    true
}

/// XRC target, after the PSN check: the XRCETH must name an XRC SRQ of the target QP's
/// XRC domain (IBA Annex A14: else the request is an invalid request, NAKed and the QP
/// to the error state, as any RC invalid request, IBA 9.9.3.1). A message continues with the SRQ it started with. The SRQ is
/// the request's from now on: its PD checks the memory, its CQ takes the completion.
fn check_xrc_srq(qp: &mut Qp, repr: &RoceRepr) -> Result<(), Refusal> {
    let srqn = repr.ext.xrc_srqn.ok_or(Refusal::InvalidRequest)?;
    let srq = qp.shared.xrcd.as_ref().and_then(|d| d.srq(srqn)).ok_or(Refusal::InvalidRequest)?;
    let holding = !qp.resp.rq.is_empty() || qp.resp.cur.is_some();
    if holding && qp.resp.xrc_srq.as_ref().is_some_and(|s| s.id() != srqn) {
        return Err(Refusal::InvalidRequest);
    }
    qp.resp.xrc_srq = Some(srq);
    Ok(())
}

/// Check 1: PSN, UC (IBA 9.8.3.1, rxe `check_psn` for UC): after a gap, or while a message is
/// being dropped, only a FIRST or ONLY packet is accepted, whatever its PSN: it
/// resynchronises the responder. Anything else is dropped and keeps the message dropped.
fn check_psn_uc(qp: &mut Qp, counters: &Counters, info: &OpcodeInfo, psn: Psn) -> bool {
    if qp.resp.uc_drop || psn != qp.resp.epsn {
        if !info.position.starts() {
            drop_message(qp, counters);
            return false;
        }
        qp.resp.uc_drop = false;
    }
    true
}

/// Check 2: Opcode sequence (IBA 9.8.3.1, rxe `check_op_seq`): MIDDLE/LAST only continue a
/// message of the same kind; FIRST/ONLY only start one. On UC a FIRST/ONLY while a
/// message is in progress means that message's tail was lost: it is abandoned and the new
/// one starts (where rxe also drops the new FIRST).
fn check_op_seq(qp: &mut Qp, counters: &Counters, info: &OpcodeInfo, uc: bool) -> Result<(), Refusal> {
    let continuing = match qp.resp.cur {
        Some(InProgress::Send { .. }) => Some(Operation::Send),
        Some(InProgress::Write { .. }) => Some(Operation::RdmaWrite),
        None => None,
    };
    match (continuing, info.position.starts()) {
        (None, true) => Ok(()),
        (Some(kind), false) if kind == info.operation => Ok(()),
        (Some(_), true) if uc => {
            abandon(qp, counters);
            Ok(())
        }
        _ => Err(Refusal::InvalidRequest),
    }
}

/// Check 3: Opcode valid for this QP: the QP's remote access flags (rxe `check_op_valid`) and the operations this device implements.
fn check_op_valid(qp: &Qp, repr: &RoceRepr, info: &OpcodeInfo) -> Result<(), Refusal> {
    let access = qp.attr.access;
    match info.operation {
        Operation::Send => Ok(()),
        Operation::RdmaWrite if access.contains(AccessFlags::REMOTE_WRITE) => Ok(()),
        Operation::RdmaReadRequest if access.contains(AccessFlags::REMOTE_READ) => Ok(()),
        Operation::CompareSwap | Operation::FetchAdd if access.contains(AccessFlags::REMOTE_ATOMIC) => Ok(()),
        // rxe: ATOMIC WRITE needs remote write; FLUSH the flush rights of its placement.
        Operation::AtomicWrite if access.contains(AccessFlags::REMOTE_WRITE) => Ok(()),
        Operation::Flush
            if repr.ext.feth.is_some_and(|f| access.contains(rd_atomic::flush_access(f.placement_type))) =>
        {
            Ok(())
        }
        _ => Err(Refusal::InvalidRequest),
    }
}

/// Check 4: Resources (rxe `check_resource`): a receive WQE for SEND FIRST/ONLY (none: RNR on
/// RC, a drop on UC) and, on RC, for the packet of a WRITE with immediate (UC checks
/// that one where it places the packet: `execute_write`); a slot for a READ or atomic.
fn check_resources(qp: &mut Qp, info: &OpcodeInfo, uc: bool) -> Result<(), Refusal> {
    let op = info.operation;
    let needs_rwqe = info.consumes_rwqe && (op == Operation::Send || (op == Operation::RdmaWrite && !uc));
    if needs_rwqe && qp.resp.rq.is_empty() {
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
    if rd_atomic && saved(qp) >= usize::from(qp.attr.max_dest_rd_atomic.max(1)) {
        // More outstanding READs than negotiated: drop the oldest saved resource (it can
        // no longer be answered as a duplicate), as rxe reuses its resource ring.
        if let Some(i) = qp.resp.reads.iter().position(|r| !r.replay) {
            qp.resp.reads.remove(i);
        }
    }
    Ok(())
}

/// The saved READ/atomic resources (the replays for duplicates not counted).
fn saved(qp: &Qp) -> usize {
    qp.resp.reads.iter().filter(|r| !r.replay).count()
}

/// Check 5: Length (rxe `check_length`): FIRST and MIDDLE carry
/// exactly one MTU, LAST between 1 and MTU, ONLY at most MTU. A READ request carries none.
fn check_length(qp: &Qp, info: &OpcodeInfo, payload: &[u8]) -> Result<(), Refusal> {
    let mtu = qp.mtu;
    let len_ok = match info.position {
        Position::First | Position::Middle => payload.len() == mtu,
        Position::Last => !payload.is_empty() && payload.len() <= mtu,
        Position::Only => payload.len() <= mtu,
    };
    if !len_ok && info.operation != Operation::RdmaReadRequest {
        return Err(Refusal::InvalidRequest);
    }
    Ok(())
}

/// What executing a packet produced.
struct Done {
    /// A receive completion to queue.
    wc: Option<WorkCompletion>,
    /// A READ to answer.
    read: Option<ReadResource>,
}

/// Checks 6 and 7: R_Key checks and execution, per operation.
fn execute(qp: &mut Qp, mtpt: &Mtpt, repr: &RoceRepr, info: &OpcodeInfo, payload: &[u8]) -> Result<Done, Refusal> {
    let reply = |res| Ok(Done { wc: None, read: Some(res) });
    match info.operation {
        Operation::Send => Ok(Done { wc: execute_send(qp, mtpt, repr, info.position, payload)?, read: None }),
        Operation::RdmaWrite => Ok(Done { wc: execute_write(qp, mtpt, repr, info.position, payload)?, read: None }),
        Operation::RdmaReadRequest => reply(execute_read(qp, mtpt, repr)?),
        op @ (Operation::CompareSwap | Operation::FetchAdd) => reply(rd_atomic::execute_atomic(qp, mtpt, repr, op)?),
        Operation::AtomicWrite => reply(rd_atomic::execute_atomic_write(qp, mtpt, repr, payload)?),
        Operation::Flush => reply(rd_atomic::execute_flush(qp, mtpt, repr)?),
        _ => Err(Refusal::InvalidRequest),
    }
}

/// SEND: the payload is scattered into the receive WQE the message took; the last packet
/// completes it (after invalidating the IETH's region, IBA 10.6.7 / rxe
/// `invalidate_rkey`). A receive buffer too small is a length error (rxe
/// `RESPST_ERR_LENGTH`); the WQE stays the message's for `fail` to complete or give back.
fn execute_send(
    qp: &mut Qp,
    mtpt: &Mtpt,
    repr: &RoceRepr,
    pos: Position,
    payload: &[u8],
) -> Result<Option<WorkCompletion>, Refusal> {
    let (rwqe, offset) = match qp.resp.cur.take() {
        Some(InProgress::Send { rwqe, offset }) => (rwqe, offset),
        _ => (qp.resp.rq.pop_front().ok_or(Refusal::Rnr)?, 0),
    };
    if offset + payload.len() > rwqe.len {
        qp.resp.cur = Some(InProgress::Send { rwqe, offset });
        return Err(Refusal::LengthError);
    }
    if !rwqe.data.scatter(offset, payload) {
        qp.resp.cur = Some(InProgress::Send { rwqe, offset });
        return Err(Refusal::RemoteOperational);
    }
    let offset = offset + payload.len();
    if !pos.ends() {
        qp.resp.cur = Some(InProgress::Send { rwqe, offset });
        return Ok(None);
    }
    if let Some(rkey) = repr.ext.ieth {
        if mtpt.invalidate_for(rkey, qp.resp_pd()).is_err() {
            qp.resp.cur = Some(InProgress::Send { rwqe, offset });
            return Err(Refusal::InvalidateRkey);
        }
    }
    qp.shared.rq_outstanding.fetch_sub(1, Ordering::AcqRel);
    Ok(Some(WorkCompletion {
        byte_len: u32::try_from(offset).unwrap_or(u32::MAX),
        imm_data: repr.ext.imm_data.unwrap_or(0),
        src_qp: qp.attr.dest_qpn,
        wc_flags: {
            let mut f = WcFlags::empty();
            f.set(WcFlags::WITH_IMM, repr.ext.imm_data.is_some());
            f.set(WcFlags::WITH_INV, repr.ext.ieth.is_some());
            f
        },
        invalidated_rkey: repr.ext.ieth.unwrap_or(0),
        ..WorkCompletion::new(rwqe.wr_id, WcStatus::Success, WcOpcode::Recv, qp.qpn().value())
    }))
}

/// RDMA WRITE: the R_Key is checked on the first packet (IBA C9-88: a zero-length WRITE
/// is not checked); every packet must stay inside the RETH's DMA length and the last must
/// end it exactly (rxe: resid must reach 0); the immediate-carrying packet takes a receive
/// WQE (rxe `RXE_RWR_MASK`) and completes it.
fn execute_write(
    qp: &mut Qp,
    mtpt: &Mtpt,
    repr: &RoceRepr,
    pos: Position,
    payload: &[u8],
) -> Result<Option<WorkCompletion>, Refusal> {
    let (target, offset, dma_len) = match qp.resp.cur.take() {
        Some(InProgress::Write { target, offset, dma_len }) => (target, offset, dma_len),
        _ => {
            let reth = repr.ext.reth.ok_or(Refusal::InvalidRequest)?;
            let dma_len = reth.dma_len as usize;
            let target = if dma_len == 0 {
                None
            } else {
                Some(remote(qp, mtpt, reth.rkey, reth.va, dma_len, AccessFlags::REMOTE_WRITE)?)
            };
            (target, 0, dma_len)
        }
    };
    let end = offset + payload.len();
    if end > dma_len || (pos.ends() && end != dma_len) {
        return Err(Refusal::InvalidRequest);
    }
    // UC's receive-WQE check for a WRITE with immediate (RC's was `check_resources`):
    // none, and the message is dropped; its earlier data stays.
    if pos.ends() && repr.ext.imm_data.is_some() && qp.resp.rq.is_empty() {
        return Err(Refusal::Rnr);
    }
    if let Some(t) = &target {
        if !payload.is_empty() && t.write(offset, payload).is_err() {
            return Err(Refusal::RemoteOperational);
        }
    }
    if !pos.ends() {
        qp.resp.cur = Some(InProgress::Write { target, offset: end, dma_len });
        return Ok(None);
    }
    let Some(imm) = repr.ext.imm_data else { return Ok(None) };
    let rwqe = qp.resp.rq.pop_front().ok_or(Refusal::Rnr)?;
    qp.shared.rq_outstanding.fetch_sub(1, Ordering::AcqRel);
    Ok(Some(WorkCompletion {
        byte_len: u32::try_from(dma_len).unwrap_or(u32::MAX),
        imm_data: imm,
        src_qp: qp.attr.dest_qpn,
        wc_flags: WcFlags::WITH_IMM,
        ..WorkCompletion::new(rwqe.wr_id, WcStatus::Success, WcOpcode::RecvRdmaWithImm, qp.qpn().value())
    }))
}

/// RDMA READ request: the R_Key is checked now (a zero-length READ is not); the responses
/// are paced out later from the saved resource (`pump_reads`).
fn execute_read(qp: &Qp, mtpt: &Mtpt, repr: &RoceRepr) -> Result<ReadResource, Refusal> {
    let reth = repr.ext.reth.ok_or(Refusal::InvalidRequest)?;
    let len = reth.dma_len as usize;
    if len > 0 {
        remote(qp, mtpt, reth.rkey, reth.va, len, AccessFlags::REMOTE_READ)?;
    }
    Ok(ReadResource {
        psn: repr.bth.psn,
        npkts: packets_for(len, qp.mtu),
        va: reth.va,
        rkey: reth.rkey,
        len,
        pd: qp.resp_pd(),
        next: 0,
        kind: ResourceKind::Read,
        msn: 0,
        before: [None, None],
        replay: false,
    })
}

/// The R_Key check of a remote access (key, PD, access right, bounds), refused as a
/// remote access error.
fn remote(qp: &Qp, mtpt: &Mtpt, rkey: u32, va: u64, len: usize, need: AccessFlags) -> Result<MrSlice, Refusal> {
    mtpt.check_remote_by(rkey, qp.resp_pd(), qp.qpn().value(), va, len, need)
        .map_err(|a| Refusal::RemoteAccess(Some(a)))
}

/// Steps 8 and 9: completions, MSN, ePSN, acknowledgement (RC only), READ responses.
fn complete(qp: &mut Qp, cx: &mut Ctx, repr: &RoceRepr, info: &OpcodeInfo, done: Done, uc: bool) {
    let psn = repr.bth.psn;
    if let Some(res) = done.read {
        complete_reply(qp, cx, psn, res);
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
    // Nobody acknowledges a UC packet, whatever its AckReq bit says.
    if repr.bth.ack_req && !uc {
        cx.defer_ack(qp, psn, ack_aeth(msn));
    } else if !uc {
        cx.extend_ack(qp, psn, ack_aeth(msn));
    }
}

/// Step 9 for a READ or atomic: the ePSN moves past its responses, the MSN counts it, the
/// reply is queued. (Out of line: the SEND and WRITE path of `complete` stays small.)
#[inline(never)]
fn complete_reply(qp: &mut Qp, cx: &mut Ctx, psn: Psn, mut res: ReadResource) {
    qp.resp.epsn = psn.add(res.npkts);
    // A READ counts as a message when it is accepted (IBA C9-148, quoted by rxe
    // `execute`); its responses carry this MSN, not a later request's (rxe sends them
    // before it takes the next request).
    qp.resp.msn = (qp.resp.msn + 1) & 0x00FF_FFFF;
    res.msn = qp.resp.msn;
    queue_reply(qp, cx, res);
}

/// Queues a reply (READ responses, an atomic acknowledgement) behind every answer owed
/// before it: every reply goes out through the paced queue, so none overtakes an earlier
/// one, and the answers held for the round (a sequence NAK, an ACK) answer earlier
/// requests, so they leave just before it (IBA 9.7.5.1: responses in PSN order).
fn queue_reply(qp: &mut Qp, cx: &mut Ctx, mut res: ReadResource) {
    res.before = qp.resp.take_held();
    qp.resp.reads.push_back(res);
    cx.queue_reads(qp);
}

/// UC: drops the current packet and the rest of its message (class D).
fn drop_message(qp: &mut Qp, counters: &Counters) {
    counters.uc_dropped_pkts.fetch_add(1, Ordering::Relaxed);
    abandon(qp, counters);
    qp.resp.uc_drop = true;
}

/// UC: forgets the message in progress; a SEND's receive WQE goes back to the head of the
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

/// A QP with a shared receive queue takes a WQE from it when a message that needs one
/// starts and the QP holds none (rxe `get_srq_wqe`); the WQE is then the QP's, counted in
/// its receive queue. Crossing the armed SRQ limit is noted for the engine's event.
pub(super) fn take_srq_wqe(qp: &mut Qp, info: &OpcodeInfo) {
    // An XRC target's SRQ is the one its request named (`check_xrc_srq`).
    let Some(srq) = qp.resp.xrc_srq.as_ref().or(qp.shared.srq.as_ref()) else { return };
    if !info.consumes_rwqe || !qp.resp.rq.is_empty() || matches!(qp.resp.cur, Some(InProgress::Send { .. })) {
        return;
    }
    if let Some((wqe, limit_hit)) = srq.take() {
        qp.shared.rq_outstanding.fetch_add(1, Ordering::AcqRel);
        qp.resp.rq.push_back(wqe);
        qp.resp.srq_limit_hit |= limit_hit;
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
    let (mtu, sport, dest_qp) = (qp.mtu, qp.src_port, qp.dest_qpn());
    let (qpn, transport) = (qp.qpn().value(), qp.transport);
    let mut sent = 0;
    while sent < budget {
        let Some(res) = qp.resp.reads.iter_mut().find(|r| r.next < r.npkts) else { break };
        for (psn, aeth) in res.before.iter_mut().filter_map(Option::take) {
            out.emit(counters, dst, sport, &ack_repr(transport, dest_qp, psn, aeth), |_| {});
            sent += 1;
        }
        let msn = res.msn;
        if res.kind != ResourceKind::Read {
            // One packet: the atomic acknowledgement or the zero-length response.
            let repr = rd_atomic_reply(transport, res, dest_qp, msn);
            out.emit(counters, dst, sport, &repr, |_| {});
            res.next = res.npkts;
            sent += 1;
            continue;
        }
        let slice = if res.len > 0 {
            match mtpt.check_remote_by(res.rkey, res.pd, qpn, res.va, res.len, AccessFlags::REMOTE_READ) {
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
        if slice.as_ref().is_some_and(|s| !s.is_live()) {
            // Deregistered while its key was still in the table (a region is retired
            // after it leaves it): as gone.
            res.next = res.npkts;
            continue;
        }
        while sent < budget && res.next < res.npkts {
            let k = res.next;
            let pos = position(k, res.npkts);
            let (offset, plen) = segment(k, res.len, mtu);
            let repr = read_response(transport, dest_qp, res.psn, k, pos, plen, msn);
            let s = slice.as_ref();
            match s.filter(|s| plen >= ZERO_COPY_MIN && !s.block().is_implicit()) {
                Some(s) => {
                    out.emit_from_memory(counters, dst, sport, &repr, s.block(), s.block_offset() + offset, zero_copy)
                }
                None => out.emit(counters, dst, sport, &repr, |p| {
                    // Zeros, never a recycled buffer's old bytes, if the region is being
                    // deregistered right now.
                    if s.is_some_and(|s| s.read(offset, p).is_err()) {
                        p.fill(0);
                    }
                }),
            }
            res.next += 1;
            sent += 1;
        }
    }
    let more = qp.resp.reads.iter().any(|r| r.next < r.npkts);
    if !more {
        // Every replay is sent: they go (the saved resources stay for duplicates).
        qp.resp.reads.retain(|r| !r.replay);
    }
    (sent, more)
}

/// A duplicate request (IBA 9.7.5.1.5): SEND and WRITE are acknowledged again and not
/// executed; a READ is answered again from the saved resource, an atomic with its saved
/// result. Each duplicate READ or atomic is answered, also one that arrives before the
/// original's answer left: its replay queues behind what is still to go.
fn duplicate(qp: &mut Qp, cx: &mut Ctx, _now: Time, repr: &RoceRepr, info: &OpcodeInfo) {
    if info.operation == Operation::RdmaReadRequest {
        let psn = repr.bth.psn;
        let found = qp.resp.reads.iter().find(|r| {
            let d = r.psn.distance(psn);
            !r.replay && d >= 0 && (d as u64) < u64::from(r.npkts)
        });
        if let Some(r) = found.filter(|r| r.kind == ResourceKind::Read) {
            // Answer again from the requested packet on (the requester asks from its
            // first missing response).
            let next = u32::try_from(r.psn.distance(psn)).unwrap_or(0);
            let replay = ReadResource { next, replay: true, ..r.clone() };
            replay_reply(qp, cx, replay);
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
        let found = qp.resp.reads.iter().find(|r| {
            !r.replay
                && r.psn == psn
                && matches!(r.kind, ResourceKind::Atomic { .. }) == atomic
                && r.kind != ResourceKind::Read
        });
        if let Some(r) = found {
            let replay = ReadResource { next: 0, replay: true, ..r.clone() };
            replay_reply(qp, cx, replay);
        }
        return;
    }
    // IBA C9-105 (quoted by rxe `duplicate_request`): a duplicate SEND or WRITE is
    // acknowledged again. rxe acknowledges the most recent PSN received, whatever the
    // duplicate's AckReq; a burst of duplicates (a go-back-N retransmission) is
    // answered by one coalesced ACK.
    let (last, msn) = (qp.resp.epsn.sub(1), qp.resp.msn);
    cx.defer_ack(qp, last, ack_aeth(msn));
}

/// Queues the replay of a saved resource for a duplicate, unless as many replays as the
/// QP may have READs outstanding are already waiting: a peer repeating a request faster
/// than it is answered is then dropped (as a duplicate with no resource is, rxe), and its
/// requester's timer asks again.
fn replay_reply(qp: &mut Qp, cx: &mut Ctx, replay: ReadResource) {
    let waiting = qp.resp.reads.iter().filter(|r| r.replay && r.next < r.npkts).count();
    if waiting >= usize::from(qp.attr.max_dest_rd_atomic.max(1)) {
        return;
    }
    queue_reply(qp, cx, replay);
}

/// RC: sends the NAK for a refusal; every refusal but RNR puts the QP in the error state
/// (IBA 9.9.3.1, rxe `goto_error`).
fn nak(qp: &mut Qp, cx: &mut Ctx, psn: Psn, refusal: Refusal) {
    let syndrome = refusal.syndrome(qp.attr.min_rnr_timer);
    let msn = qp.resp.msn;
    let len_err_wc = if let Some(status) = refusal.recv_status() {
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
    if refusal.is_fatal() {
        if let Some(wc) = len_err_wc {
            cx.push_wc(qp, CqSide::Recv, wc, false);
        }
        if let Some(ev) = refusal.event(qp.qpn().value()).filter(|_| qp.state != QpState::Err) {
            cx.events.push_back(ev);
        }
        if !reads_going {
            cx.enter_error(qp, None);
        }
    }
}
