//! The sender state machine of an RC QP: requester and completer together (as rxe
//! merged them in 2024): segmentation, PSN assignment, the unacknowledged window,
//! ACK/NAK processing, RDMA READ responses, retransmission and completion.

use super::ctx::{CqSide, Ctx, Time};
use super::out::ZERO_COPY_MIN;
use super::packet::{self, packets_for, position};
use super::qp::{InFlight, Qp, SendWqe};
use crate::qp_state::{local_ack_timeout_ns, rnr_timer_ns, QpState, RNR_RETRY_INFINITE};
use crate::wr::{SendOp, WcStatus, WorkCompletion};
use rnic_wire::aeth::{AethRepr, NakCode, Syndrome};
use rnic_wire::opcode::{Operation, Position};
use rnic_wire::roce::RoceRepr;
use rnic_wire::Psn;
use std::net::IpAddr;
use std::sync::atomic::Ordering;

/// Appends a WQE to the send queue and assigns its PSNs (IBA 9.7.1: consecutive PSNs per
/// packet; a READ request reserves one PSN per response packet).
#[inline]
pub(crate) fn queue(qp: &mut Qp, wqe: SendWqe) {
    // Atomics, ATOMIC WRITE and FLUSH are one request and one response (IBA 9.4.5, oA19).
    let npkts = if wqe.op.is_rd_atomic() && !matches!(wqe.op, SendOp::RdmaRead { .. }) {
        1
    } else {
        packets_for(wqe.len, qp.mtu)
    };
    let first_psn = qp.req.next_psn;
    qp.req.next_psn = first_psn.add(npkts);
    qp.req.sq.push_back(InFlight { wqe, first_psn, npkts, sent: 0, read_got: 0 });
}

/// Appends a local operation (no packets, no PSN) that the engine already executed, with
/// the status it failed with, if it failed.
pub(crate) fn queue_local(qp: &mut Qp, mut wqe: SendWqe, local_err: Option<WcStatus>) {
    let first_psn = qp.req.next_psn;
    wqe.local_err = local_err;
    qp.req.sq.push_back(InFlight { wqe, first_psn, npkts: 0, sent: 0, read_got: 0 });
}

/// Transmits what the window, the RNR wait and the READ limit allow.
pub(crate) fn transmit(qp: &mut Qp, cx: &mut Ctx, now: Time) {
    if qp.state != QpState::Rts || qp.req.rnr_deadline.is_some() {
        return;
    }
    let Some(dst) = qp.attr.remote_ip else { return };
    let mut sent_any = false;
    while qp.req.next_send < qp.req.sq.len() {
        let idx = qp.req.next_send;
        let f = &qp.req.sq[idx];
        if f.is_read() && f.read_got == f.npkts {
            // Answered already (it waits to retire in order): nothing to send.
            qp.req.next_send += 1;
            continue;
        }
        if f.is_read() {
            // At most max_rd_atomic READs/atomics outstanding (rxe: `req.rd_atomic`,
            // `need_rd_atomic` wait in rxe_req.c / rxe_comp.c `complete_ack`).
            if f.sent == 0 && qp.req.reads_outstanding >= u32::from(qp.attr.max_rd_atomic.max(1)) {
                break;
            }
        } else if f.wqe.fence && qp.req.reads_outstanding > 0 {
            break;
        }
        if !f.wqe.data.is_live() {
            // Its memory was deregistered (or re-registered elsewhere) after it was
            // posted: rxe's requester finds the lkey gone when it copies the payload
            // (`copy_data`: IB_WC_LOC_PROT_ERR, the QP to error). Completed in order:
            // once the WQEs before it have.
            if idx == 0 {
                fail_front(qp, cx, WcStatus::LocProtErr);
                return;
            }
            break;
        }
        // A READ/atomic's one request, or a message's packets, as far as the window lets.
        let (sent, finished) = if f.is_read() {
            let sent = send_rd_atomic(qp, cx, now, dst, idx);
            (sent, sent)
        } else {
            send_data(qp, cx, now, dst, idx)
        };
        sent_any |= sent;
        if !finished {
            break;
        }
        qp.req.next_send += 1;
    }
    if sent_any {
        arm_rto(qp, now);
    }
}

/// Whether packet `psn` is outside the window of `window` unacknowledged packets from
/// `una`.
fn beyond_window(una: Psn, window: u32, psn: Psn) -> bool {
    una.distance(psn) >= i32::try_from(window).unwrap_or(i32::MAX)
}

/// Bytes a packet of `payload` bytes puts on the wire besides its payload (IPv4, UDP, BTH,
/// a RETH, ICRC), as the pacer counts it.
const WIRE_OVERHEAD: u64 = 20 + 8 + 12 + 16 + 4;

/// Congestion and flow control, asked before each packet leaves (`bytes` on the wire;
/// `reserve` packets of the PSN space it adds beyond what was ever sent: 0 for a
/// retransmission). Flow control first: a packet that adds to the destination's in-flight
/// bytes needs room there, or the QP waits in line for it. Then DCQCN's pacer, when the
/// QP's rate is below line rate. `None` when the packet must wait; else whether the
/// destination is under pressure (half its in-flight bound or more used).
fn admit(qp: &mut Qp, cx: &mut Ctx, now: Time, dst: IpAddr, bytes: u64, reserve: u32) -> Option<bool> {
    let reserve_bytes = u64::from(reserve) * qp.mtu as u64;
    if reserve > 0 && !cx.dest_room(qp, dst, reserve_bytes) {
        return None;
    }
    if let Some(p) = &cx.config.cc {
        let c = qp.req.cc.get_or_insert_with(|| super::qp_req::Cc {
            rate: crate::cc::RateState::new(p),
            pacer: crate::cc::Pacer::new(now, PACER_BURST),
        });
        // At line rate nothing is paced (and the bucket is not drawn on): the common
        // case costs one comparison.
        if c.rate.current < p.max_rate {
            if let Err(at) = c.pacer.take(now, bytes, c.rate.current) {
                qp.req.pace_deadline = Some(at);
                cx.counters.rp_paced.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        }
        c.rate.on_sent(bytes, p);
    }
    if reserve > 0 {
        return Some(cx.take_dest(qp, dst, reserve_bytes));
    }
    Some(false)
}

/// The pacer's largest burst: 64 KiB (a GSO batch of 16 packets of 4 KiB) may leave at
/// once; at a rate of R bytes/s the bucket refills in 64 KiB / R.
const PACER_BURST: f64 = 65_536.0;

/// Packets beyond the highest PSN sent that a packet spanning `first..=last` adds.
fn new_packets(sent_end: Psn, first: Psn, last: Psn) -> u32 {
    let end = last.next();
    let from = if sent_end.distance(first) > 0 { first } else { sent_end };
    u32::try_from(from.distance(end).max(0)).unwrap_or(0)
}

/// Sends the one request of the READ, atomic, ATOMIC WRITE or FLUSH at `idx` of the send
/// queue (a READ asks for the responses not yet received). False when the window is full,
/// the pacer holds it or the destination has no room.
fn send_rd_atomic(qp: &mut Qp, cx: &mut Ctx, now: Time, dst: IpAddr, idx: usize) -> bool {
    let f = &qp.req.sq[idx];
    let psn = f.first_psn.add(f.read_got);
    // Its responses' size sets the window (a READ's responses are what fills the pipe).
    let window = cx.config.window_for(f.response_len().min(qp.mtu));
    if beyond_window(qp.req.una, window, psn) {
        return false;
    }
    // The request reserves its responses' PSNs (and the receive room they take here).
    let reserve = new_packets(qp.req.sent_end, psn, f.last_psn());
    // The request's own size: its RETH or AtomicETH (28 bytes at most) and headers.
    let bytes = WIRE_OVERHEAD + 12;
    if admit(qp, cx, now, dst, bytes, reserve).is_none() {
        return false;
    }
    let f = &mut qp.req.sq[idx];
    let repr = packet::rd_atomic_request(qp.transport, f, qp.mtu, qp.attr.dest_qpn, psn);
    let data = &f.wqe.data;
    let with_payload = repr.payload_len > 0;
    cx.out.emit(&cx.counters, dst, qp.src_port, &repr, |p| {
        if with_payload {
            data.gather(0, p);
        }
    });
    if f.sent == 0 {
        qp.req.reads_outstanding += 1;
    }
    f.sent = f.npkts;
    let end = f.last_psn().next();
    if qp.req.sent_end.distance(end) > 0 {
        qp.req.sent_end = end;
    }
    true
}

/// Sends the packets of the SEND or RDMA WRITE at `idx` of the send queue that the window
/// allows. Returns whether any went and whether all have.
fn send_data(qp: &mut Qp, cx: &mut Ctx, now: Time, dst: IpAddr, idx: usize) -> (bool, bool) {
    let (per_ack, zero_copy) = (cx.config.max_pkts_per_ack, cx.config.zero_copy);
    let mut sent_any = false;
    loop {
        let f = &qp.req.sq[idx];
        if f.sent >= f.npkts {
            break;
        }
        let k = f.sent;
        let psn = f.first_psn.add(k);
        let (offset, plen) = packet::segment(k, f.wqe.len, qp.mtu);
        let window = cx.config.window_for(plen);
        if beyond_window(qp.req.una, window, psn) {
            return (sent_any, false);
        }
        let reserve = new_packets(qp.req.sent_end, psn, psn);
        let Some(pressure) = admit(qp, cx, now, dst, plen as u64 + WIRE_OVERHEAD, reserve) else {
            return (sent_any, false);
        };
        let (out, counters) = (&mut cx.out, &*cx.counters);
        let queued = qp.req.sq.len();
        let f = &mut qp.req.sq[idx];
        let pos = position(k, f.npkts);
        qp.req.pkts_since_ackreq += 1;
        // AckReq on the last packet, and every `per_ack` packets (at most half this
        // packet's window) of a long message so the window keeps moving (rxe
        // RXE_MAX_PKT_PER_ACK).
        // Flow control: with the destination's in-flight bound half used or more, every
        // packet asks for an ACK (the responder still coalesces them per QP), so that the
        // room a QP holds comes back even when it has to wait before its message's end.
        //
        // A message with another behind it in the send queue goes without: the ACK of a
        // later one covers it (cumulative, IBA 9.7.5.1.1), and the responder sends none
        // it was not asked for (rxe acknowledges AckReq packets only). That holds for a
        // signaled message too: its completion comes with that later ACK, at most a
        // quarter window on (a stream's completions are what it polls for in batches; a
        // message alone in the queue asks at once). The last message queued always asks,
        // so a burst ends acknowledged; so does one sent again (the ones behind may be
        // what is not getting through) and any while draining (SQD sends nothing new, so
        // nothing behind would ask); and a message end a quarter window after the last
        // that asked, so that ACKs come often enough to keep the window open. Each ACK
        // costs the responder a `sendmsg` (on loopback, the requester's receive path too)
        // and the requester a receive: `send_bw -s 64`, whose `-Q 100` signals every
        // hundredth message, sent one ACK per 64 packets while signaled ends asked, one
        // per 128 without (with the 512-packet window of small packets), and moved
        // 1.11-1.16x the messages.
        let resend = qp.req.sent_end.distance(psn) < 0;
        let wanted =
            idx + 1 == queued || resend || qp.state != QpState::Rts || qp.req.pkts_since_ackreq >= (window / 4).max(1);
        let ack_req = (pos.ends() && wanted) || qp.req.pkts_since_ackreq >= per_ack.min(window / 2).max(1) || pressure;
        if ack_req {
            qp.req.pkts_since_ackreq = 0;
        }
        let Some(repr) = packet::data_request(qp.transport, &f.wqe, pos, plen, qp.attr.dest_qpn, psn, ack_req, None)
        else {
            // Validation lets only packet-carrying operations reach here.
            return (sent_any, false);
        };
        let data = &f.wqe.data;
        match data.contiguous(offset, plen).filter(|_| plen >= ZERO_COPY_MIN) {
            Some((block, at)) => out.emit_from_memory(counters, dst, qp.src_port, &repr, block, at, zero_copy),
            None => out.emit(counters, dst, qp.src_port, &repr, |p| data.gather(offset, p)),
        }
        if pos.ends() && matches!(f.wqe.op, SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. }) {
            out.count_send();
        }
        f.sent += 1;
        let end = psn.next();
        if qp.req.sent_end.distance(end) > 0 {
            qp.req.sent_end = end;
        }
        sent_any = true;
    }
    (sent_any, true)
}

/// Starts (or restarts) the local ACK timer if packets are unacknowledged
/// (IBA 9.7.6.1.3: 4.096 us * 2^timeout; timeout 0 means never).
fn arm_rto(qp: &mut Qp, now: Time) {
    if qp.req.una == qp.req.sent_end {
        qp.req.rto_deadline = None;
        return;
    }
    qp.req.rto_deadline = local_ack_timeout_ns(qp.attr.timeout).map(|d| now.saturating_add(d));
}

/// Handles an ACK, a NAK, an RDMA READ response or an ATOMIC ACK.
pub(crate) fn handle_response(qp: &mut Qp, cx: &mut Ctx, now: Time, repr: &RoceRepr, payload: &[u8]) {
    if !matches!(qp.state, QpState::Rts | QpState::Sqd) {
        return;
    }
    let psn = repr.bth.psn;
    // IBA 9.7.5.1.1: a response for a PSN never sent (beyond the highest sent) is a
    // ghost and ignored; one older than the oldest outstanding is a duplicate.
    let ahead = qp.req.sent_end.distance(psn);
    let behind = qp.req.una.distance(psn);
    if ahead >= 0 {
        cx.counters.ghost_acks.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if behind < -1 || (behind == -1 && !matches!(repr.ext.aeth.map(|a| a.syndrome), Some(Syndrome::Nak(_)))) {
        // Old (duplicate) response: nothing to learn.
        return;
    }
    let info = repr.bth.opcode.info().expect("checked packet");
    match info.operation {
        Operation::RdmaReadResponse => read_response(qp, cx, now, repr, payload),
        Operation::Acknowledge => {
            let Some(aeth) = repr.ext.aeth else { return };
            ack(qp, cx, now, psn, aeth);
        }
        Operation::AtomicAcknowledge => atomic_response(qp, cx, now, repr),
        _ => {
            cx.counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn ack(qp: &mut Qp, cx: &mut Ctx, now: Time, psn: Psn, aeth: AethRepr) {
    match aeth.syndrome {
        Syndrome::Ack { .. } => {
            acknowledge_through(qp, cx, now, psn);
        }
        Syndrome::RnrNak { timer } => {
            cx.counters.rcvd_rnr_err.fetch_add(1, Ordering::Relaxed);
            // The NAK implicitly acknowledges everything before its PSN (IBA 9.7.5.1.3).
            acknowledge_through(qp, cx, now, psn.sub(1));
            if qp.req.rnr_left == 0 {
                cx.counters.retry_rnr_exceeded_err.fetch_add(1, Ordering::Relaxed);
                fail_front(qp, cx, WcStatus::RnrRetryExcErr);
                return;
            }
            if qp.attr.rnr_retry != RNR_RETRY_INFINITE {
                qp.req.rnr_left -= 1;
            }
            qp.req.rnr_deadline = Some(now.saturating_add(rnr_timer_ns(timer)));
            qp.req.rto_deadline = None;
            rewind(qp, psn);
        }
        Syndrome::Nak(NakCode::PsnSequenceError) => {
            cx.counters.rcvd_seq_err.fetch_add(1, Ordering::Relaxed);
            // The NAK implicitly acknowledges everything before its PSN (IBA 9.7.5.1.3),
            // then go back N from that PSN.
            acknowledge_through(qp, cx, now, psn.sub(1));
            start_retry(qp, cx, now, Some(psn), false);
        }
        Syndrome::Nak(code) => {
            cx.counters.rcvd_nak_err.fetch_add(1, Ordering::Relaxed);
            acknowledge_through(qp, cx, now, psn.sub(1));
            fail_front(qp, cx, super::refusal::nak_status(code));
        }
        Syndrome::Reserved(_) => {
            cx.counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Everything up to and including `psn` is acknowledged: retire the WQEs it covers.
fn acknowledge_through(qp: &mut Qp, cx: &mut Ctx, now: Time, psn: Psn) {
    let mut new_una = psn.next();
    // A READ or atomic is finished only by its responses, never by a later ACK: the
    // acknowledged point stops at its first missing response. An acknowledgement beyond
    // it means those responses were lost: ask again from there (IBA 9.7.5.1.5; rxe
    // check_psn returns ERROR_RETRY and does not move past the READ).
    // Only entries that start before `new_una` can hold it back (the queue is in PSN
    // order, and a READ's gap is at or after its first PSN): the scan stops there, so an
    // ACK looks at the entries it acknowledges, not at a deep queue's unsent tail (with
    // 1024 WQEs queued the whole-queue scan was 3% of `send_bw`'s sending thread).
    let gap = qp
        .req
        .sq
        .iter()
        .take_while(|f| f.first_psn.distance(new_una) > 0)
        .find(|f| f.is_read() && f.read_got < f.npkts)
        .map(|f| f.first_psn.add(f.read_got));
    let mut missing = None;
    if let Some(g) = gap {
        if g.distance(new_una) > 0 {
            new_una = g;
            missing = Some(g);
        }
    }
    // Only move forward, and never beyond what was sent.
    if qp.req.una.distance(new_una) > 0 && new_una.distance(qp.req.sent_end) >= 0 {
        qp.req.una = new_una;
        // Flow control: what is acknowledged no longer takes room towards the peer.
        cx.account_inflight(qp);
        // Forward progress: the retry counters start over (rxe reset_retry_counters).
        qp.req.started_retry = false;
        qp.req.retry_left = qp.attr.retry_cnt;
        if qp.attr.rnr_retry != RNR_RETRY_INFINITE {
            qp.req.rnr_left = qp.attr.rnr_retry;
        }
    }
    retire(qp, cx, now);
    if let Some(psn) = missing {
        start_retry(qp, cx, now, Some(psn), false);
    }
}

/// Completes what is finished at the front of the send queue (after a local operation
/// was queued).
pub(crate) fn retire_done(qp: &mut Qp, cx: &mut Ctx, now: Time) {
    retire(qp, cx, now);
}

/// Completes WQEs from the front of the send queue while they are finished.
fn retire(qp: &mut Qp, cx: &mut Ctx, now: Time) {
    // Send queue slots freed and not yet given back to posters (one atomic subtraction
    // for a run of them, before any completion the program could answer by posting).
    let mut freed = 0u32;
    while let Some(f) = qp.req.sq.front() {
        if let Some(status) = f.wqe.local_err {
            // A failed local operation reached the front: it completes in error and the
            // QP enters the error state (rxe: LOC_QP_OP_ERR for a failed LOCAL_INV).
            qp.shared.sq_outstanding.fetch_sub(freed, Ordering::AcqRel);
            fail_front(qp, cx, status);
            return;
        }
        let done = if f.npkts == 0 {
            true
        } else if f.is_read() {
            f.read_got == f.npkts
        } else {
            qp.req.una.distance(f.last_psn()) < 0
        };
        if !done {
            break;
        }
        // What the completion needs is read in place, not from a copy of the entry moved
        // out (an entry is 144 bytes: the copies showed in profiles).
        let (is_read, end) = (f.is_read(), f.last_psn().next());
        let wc = f.wqe.signaled.then(|| {
            let byte_len = if f.wqe.op.is_atomic() { 8 } else { f.wqe.len };
            WorkCompletion {
                byte_len: u32::try_from(byte_len).unwrap_or(u32::MAX),
                src_qp: qp.attr.dest_qpn,
                ..WorkCompletion::new(f.wqe.wr_id, WcStatus::Success, f.wqe.op.wc_opcode(), qp.qpn().value())
            }
        });
        qp.req.sq.pop_front();
        qp.req.next_send = qp.req.next_send.saturating_sub(1);
        if is_read {
            qp.req.reads_outstanding = qp.req.reads_outstanding.saturating_sub(1);
            // Its last response acknowledges it through its last PSN.
            if qp.req.una.distance(end) > 0 {
                qp.req.una = end;
            }
        }
        freed += 1;
        if let Some(wc) = wc {
            qp.shared.sq_outstanding.fetch_sub(std::mem::take(&mut freed), Ordering::AcqRel);
            cx.push_wc(qp, CqSide::Send, wc, false);
        }
    }
    if freed > 0 {
        qp.shared.sq_outstanding.fetch_sub(freed, Ordering::AcqRel);
    }
    arm_rto(qp, now);
    transmit(qp, cx, now);
}

/// The front WQE fails with `status`; the QP enters the error state and the rest is
/// flushed (IBA 9.9.2: NAKs other than sequence errors and RNR are fatal to the QP).
fn fail_front(qp: &mut Qp, cx: &mut Ctx, status: WcStatus) {
    let first = qp.req.sq.pop_front().map(|f| {
        qp.shared.sq_outstanding.fetch_sub(1, Ordering::AcqRel);
        WorkCompletion {
            src_qp: qp.attr.dest_qpn,
            ..WorkCompletion::new(f.wqe.wr_id, status, f.wqe.op.wc_opcode(), qp.qpn().value())
        }
    });
    cx.enter_error(qp, first);
}

/// Go back N: the next transmission restarts at `psn` (IBA 9.7.5.1.1).
pub(crate) fn rewind(qp: &mut Qp, psn: Psn) {
    let mut found = None;
    for (i, f) in qp.req.sq.iter_mut().enumerate() {
        if f.is_read() && f.read_got == f.npkts {
            // Every response is in: nothing to ask again (it retires in order).
            if found.is_none() && f.contains(psn) {
                found = Some(i + 1);
            }
            continue;
        }
        if found.is_some() {
            if f.is_read() && f.sent > 0 {
                qp.req.reads_outstanding = qp.req.reads_outstanding.saturating_sub(1);
            }
            f.sent = 0;
            continue;
        }
        if f.contains(psn) || f.first_psn.distance(psn) < 0 {
            found = Some(i);
            if f.is_read() {
                if f.sent > 0 {
                    qp.req.reads_outstanding = qp.req.reads_outstanding.saturating_sub(1);
                }
                f.sent = 0;
            } else {
                let k = f.first_psn.distance(psn).max(0);
                f.sent = u32::try_from(k).unwrap_or(0).min(f.npkts);
            }
        }
    }
    if let Some(i) = found {
        qp.req.next_send = i;
    }
}

fn read_response(qp: &mut Qp, cx: &mut Ctx, now: Time, repr: &RoceRepr, payload: &[u8]) {
    let psn = repr.bth.psn;
    let mtu = qp.mtu;
    // The response belongs to the oldest READ whose range holds the PSN.
    let Some(idx) = qp.req.sq.iter().position(|f| f.is_read() && f.contains(psn)) else {
        cx.counters.ghost_acks.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let f = &mut qp.req.sq[idx];
    let expected = f.first_psn.add(f.read_got);
    if psn != expected {
        // A response beyond the expected one: the responses in between were lost. Ask
        // again from `expected` at once (IBA 9.7.5.1.5; rxe check_psn: ERROR_RETRY), once
        // per gap; an older one is a duplicate and is dropped.
        if expected.distance(psn) > 0 {
            start_retry(qp, cx, now, Some(expected), false);
        }
        return;
    }
    let pos = repr.bth.opcode.info().map(|i| i.position);
    if f.wqe.op.is_atomic() {
        // IBA 9.9.2.3: an atomic is answered by an ATOMIC ACKNOWLEDGE only.
        fail_front(qp, cx, WcStatus::BadRespErr);
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
        // IBA 9.9.2.3: an unexpected response is a fatal BAD_RESP_ERR; a READ whose
        // buffer was deregistered since it was posted, a local protection error (rxe:
        // the lkey is looked up when the response is copied).
        let status = if f.wqe.data.is_live() { WcStatus::BadRespErr } else { WcStatus::LocProtErr };
        fail_front(qp, cx, status);
        return;
    }
    f.read_got += 1;
    // A read response implicitly acknowledges every earlier PSN (IBA 9.7.5.1.2).
    acknowledge_through(qp, cx, now, psn);
}

/// An ATOMIC ACKNOWLEDGE: the original value goes into the atomic's result buffer and,
/// like a READ response, it implicitly acknowledges every earlier PSN (IBA 9.7.5.1.2).
fn atomic_response(qp: &mut Qp, cx: &mut Ctx, now: Time, repr: &RoceRepr) {
    let psn = repr.bth.psn;
    let (Some(aeth), Some(orig)) = (repr.ext.aeth, repr.ext.atomic_ack_eth) else {
        cx.counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if !matches!(aeth.syndrome, Syndrome::Ack { .. }) {
        // Not an acknowledgement after all: handle the syndrome as an ACK packet's.
        ack(qp, cx, now, psn, aeth);
        return;
    }
    let Some(idx) = qp.req.sq.iter().position(|f| f.is_read() && f.contains(psn)) else {
        cx.counters.ghost_acks.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let f = &mut qp.req.sq[idx];
    if !f.wqe.op.is_atomic() {
        // IBA 9.9.2.3: an ATOMIC ACKNOWLEDGE for a READ / ATOMIC WRITE / FLUSH is unexpected.
        fail_front(qp, cx, WcStatus::BadRespErr);
        return;
    }
    if f.read_got == 0 {
        // Host byte order: the value the target's CPU saw (verbs hands back a uint64_t).
        if !f.wqe.data.scatter(0, &orig.orig_remote_data.to_ne_bytes()) {
            fail_front(qp, cx, WcStatus::LocLenErr);
            return;
        }
        f.read_got = 1;
    }
    acknowledge_through(qp, cx, now, psn);
}

/// A timer fired: DCQCN's rate increase and alpha decay, the pacer's next packet, a
/// retransmission (local ACK timeout) or the end of an RNR wait.
pub(crate) fn on_timer(qp: &mut Qp, cx: &mut Ctx, now: Time) {
    if let (Some(p), Some(c)) = (cx.config.cc, qp.req.cc.as_mut()) {
        if c.rate.next_timeout().is_some_and(|t| t <= now) {
            c.rate.on_timer(now, &p);
        }
    }
    if qp.req.pace_deadline.is_some_and(|t| t <= now) {
        qp.req.pace_deadline = None;
        transmit(qp, cx, now);
    }
    if qp.req.rnr_deadline.is_some_and(|t| t <= now) {
        qp.req.rnr_deadline = None;
        transmit(qp, cx, now);
        return;
    }
    if qp.req.rto_deadline.is_some_and(|t| t <= now) {
        qp.req.rto_deadline = None;
        if qp.req.una == qp.req.sent_end {
            return;
        }
        start_retry(qp, cx, now, None, true);
    }
}

/// Starts a retransmission from `from` (the oldest unacknowledged PSN if `None`),
/// counted against retry_cnt; when none is left the front WQE fails with RETRY_EXC_ERR
/// and the QP enters the error state (IBA 9.7.6.1.3, C9-141). As rxe (`started_retry`),
/// a NAK or a gap seen while a retry is already under way starts no second one: only
/// forward progress (which resets the counters) or a timeout does.
fn start_retry(qp: &mut Qp, cx: &mut Ctx, now: Time, from: Option<Psn>, timeout: bool) {
    if qp.req.sq.is_empty() || (qp.req.una == qp.req.sent_end && qp.req.sq.front().is_some_and(|f| f.sent == 0)) {
        return; // Nothing outstanding.
    }
    if qp.req.started_retry && !timeout {
        return;
    }
    if qp.req.retry_left == 0 {
        cx.counters.retry_exceeded_err.fetch_add(1, Ordering::Relaxed);
        fail_front(qp, cx, WcStatus::RetryExcErr);
        return;
    }
    qp.req.retry_left -= 1;
    qp.req.started_retry = true;
    cx.counters.completer_retry_err.fetch_add(1, Ordering::Relaxed);
    // A loss signal cuts the rate as a CNP does (DCQCN's reaction point; a peer such as
    // Linux rxe sends no CNPs, so loss is the only signal it gives).
    if let (Some(p), Some(c)) = (cx.config.cc, qp.req.cc.as_mut()) {
        c.rate.on_loss(now, &p);
        cx.counters.rp_loss_handled.fetch_add(1, Ordering::Relaxed);
    }
    let at = from.unwrap_or(qp.req.una);
    rewind(qp, at);
    transmit(qp, cx, now);
    if qp.req.rto_deadline.is_none() {
        arm_rto(qp, now);
    }
}
