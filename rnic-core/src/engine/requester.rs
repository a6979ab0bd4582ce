//! The sender state machine of an RC QP: requester and completer together (as rxe
//! merged them in 2024): segmentation, PSN assignment, the unacknowledged window,
//! ACK/NAK processing, RDMA READ responses, retransmission and completion.

use super::packet::{self, packets_for, position};
use super::qp::{InFlight, Qp, SendWqe};
use super::{Engine, Time};
use crate::qp_state::{local_ack_timeout_ns, rnr_timer_ns, QpState, RNR_RETRY_INFINITE};
use crate::wr::{SendOp, WcStatus, WorkCompletion};
use rnic_wire::aeth::{AethRepr, NakCode, Syndrome};
use rnic_wire::opcode::{Operation, Position, Transport};
use rnic_wire::roce::RoceRepr;
use rnic_wire::Psn;
use std::sync::atomic::Ordering;

/// Appends a WQE to the send queue and assigns its PSNs (IBA 9.7.1: consecutive PSNs per
/// packet; a READ request reserves one PSN per response packet).
pub(crate) fn queue(qp: &mut Qp, wqe: SendWqe) {
    // Atomics, ATOMIC WRITE and FLUSH are one request and one response (IBA 9.4.5, oA19).
    let npkts = if wqe.op.is_rd_atomic() && !matches!(wqe.op, SendOp::RdmaRead { .. }) {
        1
    } else {
        packets_for(wqe.len, qp.mtu)
    };
    let first_psn = qp.next_psn;
    qp.next_psn = first_psn.add(npkts);
    qp.sq.push_back(InFlight { wqe, first_psn, npkts, sent: 0, read_got: 0, local_err: None });
}

/// Appends a local operation (no packets, no PSN) that the engine already executed, with
/// the status it failed with, if it failed.
pub(crate) fn queue_local(qp: &mut Qp, wqe: SendWqe, local_err: Option<WcStatus>) {
    let first_psn = qp.next_psn;
    qp.sq.push_back(InFlight { wqe, first_psn, npkts: 0, sent: 0, read_got: 0, local_err });
}

/// Transmits what the window, the RNR wait and the READ limit allow.
pub(crate) fn transmit(e: &mut Engine, now: Time, qpn: rnic_wire::Qpn) {
    let window = e.config.max_unacked_pkts;
    let zero_copy = e.config.zero_copy;
    let per_ack = e.config.max_pkts_per_ack;
    let counters = e.counters.clone();
    let Some((qp, out)) = e.qp_and_out(qpn) else { return };
    if qp.state != QpState::Rts || qp.rnr_deadline.is_some() {
        return;
    }
    let Some(dst) = qp.attr.remote_ip else { return };
    let mut sent_any = false;
    while qp.next_send < qp.sq.len() {
        let mtu = qp.mtu;
        let idx = qp.next_send;
        let max_rd = u32::from(qp.attr.max_rd_atomic.max(1));
        let f = &qp.sq[idx];
        if f.is_read() && f.read_got == f.npkts {
            // Answered already (it waits to retire in order): nothing to send.
            qp.next_send += 1;
            continue;
        }
        if f.is_read() {
            // IBA C9-? / o9-?: at most max_rd_atomic READs outstanding.
            if f.sent == 0 && qp.reads_outstanding >= max_rd {
                break;
            }
        } else if f.wqe.fence && qp.reads_outstanding > 0 {
            break;
        }
        let f = &mut qp.sq[idx];
        if f.is_read() {
            // One request for the responses not yet received.
            let got = f.read_got;
            let psn = f.first_psn.add(got);
            if qp.una.distance(psn) >= i32::try_from(window).unwrap_or(i32::MAX) {
                break;
            }
            let repr = packet::rd_atomic_request(f, mtu, qp.attr.dest_qpn, psn);
            let data = &f.wqe.data;
            let with_payload = repr.payload_len > 0;
            out.emit(&counters, dst, qp.src_port, &repr, |p| {
                if with_payload {
                    data.gather(0, p);
                }
            });
            if f.sent == 0 {
                qp.reads_outstanding += 1;
            }
            f.sent = f.npkts;
            let end = f.last_psn().next();
            if qp.sent_end.distance(end) > 0 {
                qp.sent_end = end;
            }
            qp.next_send += 1;
            sent_any = true;
            continue;
        }
        let mut blocked = false;
        while f.sent < f.npkts {
            let k = f.sent;
            let psn = f.first_psn.add(k);
            if qp.una.distance(psn) >= i32::try_from(window).unwrap_or(i32::MAX) {
                blocked = true;
                break;
            }
            let pos = position(k, f.npkts);
            let (offset, plen) = packet::segment(k, f.wqe.len, mtu);
            qp.pkts_since_ackreq += 1;
            // AckReq on the last packet, and every `per_ack` packets of a long message so
            // the window keeps moving (rxe RXE_MAX_PKT_PER_ACK).
            let ack_req = pos.ends() || qp.pkts_since_ackreq >= per_ack;
            if ack_req {
                qp.pkts_since_ackreq = 0;
            }
            let Some(repr) =
                packet::data_request(Transport::Rc, &f.wqe, pos, plen, qp.attr.dest_qpn, psn, ack_req, None)
            else {
                // Validation lets only packet-carrying operations reach here.
                blocked = true;
                break;
            };
            let data = &f.wqe.data;
            match data.contiguous(offset, plen).filter(|_| zero_copy && plen >= super::ZERO_COPY_MIN) {
                Some((block, at)) => out.emit_zero_copy(&counters, dst, qp.src_port, &repr, block, at),
                None => out.emit(&counters, dst, qp.src_port, &repr, |p| data.gather(offset, p)),
            }
            if pos.ends() && matches!(f.wqe.op, SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. })
            {
                counters.rdma_sends.fetch_add(1, Ordering::Relaxed);
            }
            f.sent += 1;
            let end = psn.next();
            if qp.sent_end.distance(end) > 0 {
                qp.sent_end = end;
            }
            sent_any = true;
        }
        if blocked {
            break;
        }
        qp.next_send += 1;
    }
    if sent_any {
        arm_rto(qp, now);
    }
}

/// Starts (or restarts) the local ACK timer if packets are unacknowledged
/// (IBA 9.7.6.1.3: 4.096 us * 2^timeout; timeout 0 means never).
fn arm_rto(qp: &mut Qp, now: Time) {
    if qp.una == qp.sent_end {
        qp.rto_deadline = None;
        return;
    }
    qp.rto_deadline = local_ack_timeout_ns(qp.attr.timeout).map(|d| now.saturating_add(d));
}

/// Handles an ACK, a NAK, an RDMA READ response or an ATOMIC ACK.
pub(crate) fn handle_response(e: &mut Engine, now: Time, qpn: rnic_wire::Qpn, repr: &RoceRepr, payload: &[u8]) {
    let counters = e.counters.clone();
    let Some(qp) = e.qp_mut(qpn) else { return };
    if !matches!(qp.state, QpState::Rts | QpState::Sqd) {
        return;
    }
    let psn = repr.bth.psn;
    // IBA 9.7.5.1.1: a response for a PSN never sent (beyond the highest sent) is a
    // ghost and ignored; one older than the oldest outstanding is a duplicate.
    let ahead = qp.sent_end.distance(psn);
    let behind = qp.una.distance(psn);
    if ahead >= 0 {
        counters.ghost_acks.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if behind < -1 || (behind == -1 && !matches!(repr.ext.aeth.map(|a| a.syndrome), Some(Syndrome::Nak(_)))) {
        // Old (duplicate) response: nothing to learn.
        return;
    }
    let info = repr.bth.opcode.info().expect("checked packet");
    match info.operation {
        Operation::RdmaReadResponse => read_response(e, now, qpn, repr, payload),
        Operation::Acknowledge => {
            let Some(aeth) = repr.ext.aeth else { return };
            ack(e, now, qpn, psn, aeth);
        }
        Operation::AtomicAcknowledge => atomic_response(e, now, qpn, repr),
        _ => {
            counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn ack(e: &mut Engine, now: Time, qpn: rnic_wire::Qpn, psn: Psn, aeth: AethRepr) {
    let counters = e.counters.clone();
    match aeth.syndrome {
        Syndrome::Ack { .. } => {
            acknowledge_through(e, now, qpn, psn);
        }
        Syndrome::RnrNak { timer } => {
            counters.rcvd_rnr_err.fetch_add(1, Ordering::Relaxed);
            // The NAK implicitly acknowledges everything before its PSN (IBA 9.7.5.1.3).
            acknowledge_through(e, now, qpn, psn.sub(1));
            let Some(qp) = e.qp_mut(qpn) else { return };
            if qp.rnr_left == 0 {
                counters.retry_rnr_exceeded_err.fetch_add(1, Ordering::Relaxed);
                fail_front(e, qpn, WcStatus::RnrRetryExcErr);
                return;
            }
            if qp.attr.rnr_retry != RNR_RETRY_INFINITE {
                qp.rnr_left -= 1;
            }
            qp.rnr_deadline = Some(now.saturating_add(rnr_timer_ns(timer)));
            qp.rto_deadline = None;
            rewind(qp, psn);
        }
        Syndrome::Nak(NakCode::PsnSequenceError) => {
            counters.rcvd_seq_err.fetch_add(1, Ordering::Relaxed);
            // The NAK implicitly acknowledges everything before its PSN (IBA 9.7.5.1.3),
            // then go back N from that PSN.
            acknowledge_through(e, now, qpn, psn.sub(1));
            start_retry(e, now, qpn, Some(psn), false);
        }
        Syndrome::Nak(code) => {
            counters.rcvd_nak_err.fetch_add(1, Ordering::Relaxed);
            acknowledge_through(e, now, qpn, psn.sub(1));
            let status = match code {
                NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                _ => WcStatus::BadRespErr,
            };
            fail_front(e, qpn, status);
        }
        Syndrome::Reserved(_) => {
            counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Everything up to and including `psn` is acknowledged: retire the WQEs it covers.
fn acknowledge_through(e: &mut Engine, now: Time, qpn: rnic_wire::Qpn, psn: Psn) {
    let Some(qp) = e.qp_mut(qpn) else { return };
    let mut new_una = psn.next();
    // A READ or atomic is finished only by its responses, never by a later ACK: the
    // acknowledged point stops at its first missing response. An acknowledgement beyond
    // it means those responses were lost: ask again from there (IBA 9.7.5.1.5; rxe
    // check_psn returns ERROR_RETRY and does not move past the READ).
    let gap = qp.sq.iter().find(|f| f.is_read() && f.read_got < f.npkts).map(|f| f.first_psn.add(f.read_got));
    let mut missing = None;
    if let Some(g) = gap {
        if g.distance(new_una) > 0 {
            new_una = g;
            missing = Some(g);
        }
    }
    // Only move forward, and never beyond what was sent.
    if qp.una.distance(new_una) > 0 && new_una.distance(qp.sent_end) >= 0 {
        qp.una = new_una;
        // Forward progress: the retry counters start over (rxe reset_retry_counters).
        qp.started_retry = false;
        qp.retry_left = qp.attr.retry_cnt;
        if qp.attr.rnr_retry != RNR_RETRY_INFINITE {
            qp.rnr_left = qp.attr.rnr_retry;
        }
    }
    retire(e, now, qpn);
    if let Some(psn) = missing {
        start_retry(e, now, qpn, Some(psn), false);
    }
}

/// Completes what is finished at the front of the send queue (after a local operation
/// was queued).
pub(crate) fn retire_done(e: &mut Engine, now: Time, qpn: rnic_wire::Qpn) {
    retire(e, now, qpn);
}

/// Completes WQEs from the front of the send queue while they are finished.
fn retire(e: &mut Engine, now: Time, qpn: rnic_wire::Qpn) {
    loop {
        let Some(qp) = e.qp_mut(qpn) else { return };
        let Some(f) = qp.sq.front() else { break };
        if let Some(status) = f.local_err {
            // A failed local operation reached the front: it completes in error and the
            // QP enters the error state (rxe: LOC_QP_OP_ERR for a failed LOCAL_INV).
            fail_front(e, qpn, status);
            return;
        }
        let done = if f.npkts == 0 {
            true
        } else if f.is_read() {
            f.read_got == f.npkts
        } else {
            qp.una.distance(f.last_psn()) < 0
        };
        if !done {
            break;
        }
        let f = qp.sq.pop_front().expect("front exists");
        qp.next_send = qp.next_send.saturating_sub(1);
        if f.is_read() {
            qp.reads_outstanding = qp.reads_outstanding.saturating_sub(1);
            // Its last response acknowledges it through its last PSN.
            let end = f.last_psn().next();
            if qp.una.distance(end) > 0 {
                qp.una = end;
            }
        }
        qp.shared.sq_outstanding.fetch_sub(1, Ordering::AcqRel);
        if f.wqe.signaled {
            let byte_len = if f.wqe.op.is_atomic() { 8 } else { f.wqe.len };
            let wc = WorkCompletion {
                byte_len: u32::try_from(byte_len).unwrap_or(u32::MAX),
                src_qp: qp.attr.dest_qpn,
                ..WorkCompletion::new(f.wqe.wr_id, WcStatus::Success, f.wqe.op.wc_opcode(), qpn.value())
            };
            let cq = qp.send_cq.clone();
            e.push_wc(&cq, qpn, wc, false);
        }
    }
    if let Some(qp) = e.qp_mut(qpn) {
        arm_rto(qp, now);
    }
    transmit(e, now, qpn);
}

/// The front WQE fails with `status`; the QP enters the error state and the rest is
/// flushed (IBA 9.9.2: NAKs other than sequence errors and RNR are fatal to the QP).
fn fail_front(e: &mut Engine, qpn: rnic_wire::Qpn, status: WcStatus) {
    let Some(qp) = e.qp_mut(qpn) else { return };
    let first = qp.sq.pop_front().map(|f| {
        qp.shared.sq_outstanding.fetch_sub(1, Ordering::AcqRel);
        WorkCompletion {
            src_qp: qp.attr.dest_qpn,
            ..WorkCompletion::new(f.wqe.wr_id, status, f.wqe.op.wc_opcode(), qpn.value())
        }
    });
    e.enter_error(qpn, first);
}

/// Go back N: the next transmission restarts at `psn` (IBA 9.7.5.1.1).
pub(crate) fn rewind(qp: &mut Qp, psn: Psn) {
    let mut found = None;
    for (i, f) in qp.sq.iter_mut().enumerate() {
        if f.is_read() && f.read_got == f.npkts {
            // Every response is in: nothing to ask again (it retires in order).
            if found.is_none() && f.contains(psn) {
                found = Some(i + 1);
            }
            continue;
        }
        if found.is_some() {
            if f.is_read() && f.sent > 0 {
                qp.reads_outstanding = qp.reads_outstanding.saturating_sub(1);
            }
            f.sent = 0;
            continue;
        }
        if f.contains(psn) || f.first_psn.distance(psn) < 0 {
            found = Some(i);
            if f.is_read() {
                if f.sent > 0 {
                    qp.reads_outstanding = qp.reads_outstanding.saturating_sub(1);
                }
                f.sent = 0;
            } else {
                let k = f.first_psn.distance(psn).max(0);
                f.sent = u32::try_from(k).unwrap_or(0).min(f.npkts);
            }
        }
    }
    if let Some(i) = found {
        qp.next_send = i;
    }
}

fn read_response(e: &mut Engine, now: Time, qpn: rnic_wire::Qpn, repr: &RoceRepr, payload: &[u8]) {
    let counters = e.counters.clone();
    let Some(qp) = e.qp_mut(qpn) else { return };
    let psn = repr.bth.psn;
    let mtu = qp.mtu;
    // The response belongs to the oldest READ whose range holds the PSN.
    let Some(idx) = qp.sq.iter().position(|f| f.is_read() && f.contains(psn)) else {
        counters.ghost_acks.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let f = &mut qp.sq[idx];
    let expected = f.first_psn.add(f.read_got);
    if psn != expected {
        // A response beyond the expected one: the responses in between were lost. Ask
        // again from `expected` at once (IBA 9.7.5.1.5; rxe check_psn: ERROR_RETRY), once
        // per gap; an older one is a duplicate and is dropped.
        if expected.distance(psn) > 0 {
            start_retry(e, now, qpn, Some(expected), false);
        }
        return;
    }
    let pos = repr.bth.opcode.info().map(|i| i.position);
    if f.wqe.op.is_atomic() {
        // IBA 9.9.2.3: an atomic is answered by an ATOMIC ACKNOWLEDGE only.
        fail_front(e, qpn, WcStatus::BadRespErr);
        return;
    }
    let k = f.read_got;
    let offset = (k as usize) * mtu;
    let want = mtu.min(f.response_len().saturating_sub(offset));
    let pos_ok = matches!(
        (pos, k == 0, k + 1 == f.npkts),
        (Some(Position::Only), true, true)
            | (Some(Position::First), true, false)
            | (Some(Position::Middle), false, false)
            | (Some(Position::Last), false, true)
    );
    if !pos_ok || payload.len() != want || (want > 0 && !f.wqe.data.scatter(offset, payload)) {
        // IBA 9.9.2.3: an unexpected response is a fatal BAD_RESP_ERR.
        let _ = f;
        fail_front(e, qpn, WcStatus::BadRespErr);
        return;
    }
    f.read_got += 1;
    // A read response implicitly acknowledges every earlier PSN (IBA 9.7.5.1.2).
    acknowledge_through(e, now, qpn, psn);
}

/// An ATOMIC ACKNOWLEDGE: the original value goes into the atomic's result buffer and,
/// like a READ response, it implicitly acknowledges every earlier PSN (IBA 9.7.5.1.2).
fn atomic_response(e: &mut Engine, now: Time, qpn: rnic_wire::Qpn, repr: &RoceRepr) {
    let counters = e.counters.clone();
    let psn = repr.bth.psn;
    let (Some(aeth), Some(orig)) = (repr.ext.aeth, repr.ext.atomic_ack_eth) else {
        counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if !matches!(aeth.syndrome, Syndrome::Ack { .. }) {
        // Not an acknowledgement after all: handle the syndrome as an ACK packet's.
        ack(e, now, qpn, psn, aeth);
        return;
    }
    let Some(qp) = e.qp_mut(qpn) else { return };
    let Some(idx) = qp.sq.iter().position(|f| f.is_read() && f.contains(psn)) else {
        counters.ghost_acks.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let f = &mut qp.sq[idx];
    if !f.wqe.op.is_atomic() {
        // IBA 9.9.2.3: an ATOMIC ACKNOWLEDGE for a READ / ATOMIC WRITE / FLUSH is unexpected.
        fail_front(e, qpn, WcStatus::BadRespErr);
        return;
    }
    if f.read_got == 0 {
        // Host byte order: the value the target's CPU saw (verbs hands back a uint64_t).
        if !f.wqe.data.scatter(0, &orig.orig_remote_data.to_ne_bytes()) {
            fail_front(e, qpn, WcStatus::LocLenErr);
            return;
        }
        f.read_got = 1;
    }
    acknowledge_through(e, now, qpn, psn);
}

/// A timer fired: retransmit (local ACK timeout) or resume after an RNR wait.
pub(crate) fn on_timer(e: &mut Engine, now: Time, qpn: rnic_wire::Qpn) {
    let Some(qp) = e.qp_mut(qpn) else { return };
    if qp.rnr_deadline.is_some_and(|t| t <= now) {
        qp.rnr_deadline = None;
        transmit(e, now, qpn);
        return;
    }
    if qp.rto_deadline.is_some_and(|t| t <= now) {
        qp.rto_deadline = None;
        if qp.una == qp.sent_end {
            return;
        }
        start_retry(e, now, qpn, None, true);
    }
}

/// Starts a retransmission from `from` (the oldest unacknowledged PSN if `None`),
/// counted against retry_cnt; when none is left the front WQE fails with RETRY_EXC_ERR
/// and the QP enters the error state (IBA 9.7.6.1.3, C9-141). As rxe (`started_retry`),
/// a NAK or a gap seen while a retry is already under way starts no second one: only
/// forward progress (which resets the counters) or a timeout does.
fn start_retry(e: &mut Engine, now: Time, qpn: rnic_wire::Qpn, from: Option<Psn>, timeout: bool) {
    let counters = e.counters.clone();
    let Some(qp) = e.qp_mut(qpn) else { return };
    if qp.sq.is_empty() || (qp.una == qp.sent_end && qp.sq.front().is_some_and(|f| f.sent == 0)) {
        return; // Nothing outstanding.
    }
    if qp.started_retry && !timeout {
        return;
    }
    if qp.retry_left == 0 {
        counters.retry_exceeded_err.fetch_add(1, Ordering::Relaxed);
        fail_front(e, qpn, WcStatus::RetryExcErr);
        return;
    }
    qp.retry_left -= 1;
    qp.started_retry = true;
    counters.completer_retry_err.fetch_add(1, Ordering::Relaxed);
    let at = from.unwrap_or(qp.una);
    rewind(qp, at);
    transmit(e, now, qpn);
    if let Some(qp) = e.qp_mut(qpn) {
        if qp.rto_deadline.is_none() {
            arm_rto(qp, now);
        }
    }
}
