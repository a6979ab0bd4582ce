//! The sender of UC and UD QPs. The unreliable services have no acknowledgements, so no
//! window, no AckReq, no retransmission and no timers (IBA 9.8.1 / 9.8.2): the packets of a
//! work request are emitted back to back, and the request completes successfully as soon as
//! its last packet is handed to the transport (rxe completes UC/UD send WQEs once they are
//! sent). A lost packet is the responder's business: UC drops the message, UD the datagram.
//!
//! Kept apart from the RC requester (`requester.rs`) on purpose: segmentation is the same
//! idea, but nothing of the reliability machinery applies.

use super::ctx::{CqSide, Ctx, Time};
use super::packet::{self, opcode_for, position};
use super::qp::{InFlight, Qp, PORT_MTU};
use crate::qp_state::{QpState, QpType};
use crate::wr::{SendOp, WcStatus, WorkCompletion};
use rnic_wire::deth::DethRepr;
use rnic_wire::opcode::{Position, Transport};
use rnic_wire::Psn;
use std::net::IpAddr;
use std::sync::atomic::Ordering;

/// Where the front WQE goes: destination address, destination QP, DETH (UD), payload limit.
fn route(qp: &Qp, f: &InFlight) -> Option<(IpAddr, u32, Option<DethRepr>, usize)> {
    if qp.shared.qp_type == QpType::Ud {
        let d = f.wqe.dest.ud()?;
        // IBA C10-15: a WR Q_Key with the high bit set means the QP's own Q_Key.
        let deth = DethRepr { qkey: d.wire_qkey(qp.attr.qkey), src_qp: qp.qpn() };
        Some((d.dst, d.remote_qpn, Some(deth), PORT_MTU))
    } else {
        Some((qp.attr.remote_ip?, qp.attr.dest_qpn, None, qp.mtu))
    }
}

/// Emits every queued WQE of a UC or UD QP and completes each once its last packet is out.
pub(crate) fn transmit(qp: &mut Qp, cx: &mut Ctx, _now: Time) {
    let mut completions = Vec::new();
    let mut failed = None;
    {
        let (out, counters) = (&mut cx.out, &*cx.counters);
        if qp.state != QpState::Rts {
            return;
        }
        let transport = if qp.shared.qp_type == QpType::Ud { Transport::Ud } else { Transport::Uc };
        while let Some(front) = qp.req.sq.front() {
            if !front.wqe.data.is_live() {
                // Its memory was deregistered after it was posted: rxe's `copy_data` finds
                // the lkey gone, IB_WC_LOC_PROT_ERR and the QP to error.
                let f = qp.req.sq.pop_front().expect("front exists");
                qp.shared.sq_outstanding.fetch_sub(1, Ordering::AcqRel);
                failed = Some(WorkCompletion::new(
                    f.wqe.wr_id,
                    WcStatus::LocProtErr,
                    f.wqe.op.wc_opcode(),
                    qp.qpn().value(),
                ));
                break;
            }
            // Validation guarantees a route (UD destination, UC address vector in RTS) and an
            // operation the transport carries; a WQE without them fails rather than blocking
            // the queue.
            let routed = route(qp, front).filter(|_| opcode_for(transport, &front.wqe.op, Position::Only).is_some());
            let Some((dst, dest_qpn, deth, mtu)) = routed else {
                let f = qp.req.sq.pop_front().expect("front exists");
                qp.shared.sq_outstanding.fetch_sub(1, Ordering::AcqRel);
                completions.push(WorkCompletion::new(
                    f.wqe.wr_id,
                    WcStatus::LocQpOpErr,
                    f.wqe.op.wc_opcode(),
                    qp.qpn().value(),
                ));
                continue;
            };
            let f = qp.req.sq.front_mut().expect("front exists");
            while f.sent < f.npkts {
                let k = f.sent;
                let pos = position(k, f.npkts);
                let (offset, plen) = packet::segment(k, f.wqe.len, mtu);
                let psn = f.first_psn.add(k);
                // No AckReq: nobody acknowledges an unreliable packet.
                let Some(repr) = packet::data_request(transport, &f.wqe, pos, plen, dest_qpn, psn, false, deth) else {
                    break;
                };
                let data = &f.wqe.data;
                out.emit(counters, dst, qp.src_port, &repr, |p| data.gather(offset, p));
                if pos.ends() && matches!(f.wqe.op, SendOp::Send | SendOp::SendWithImm { .. }) {
                    counters.rdma_sends.fetch_add(1, Ordering::Relaxed);
                }
                f.sent += 1;
            }
            let f = qp.req.sq.pop_front().expect("front exists");
            let end: Psn = f.last_psn().next();
            qp.req.una = end;
            qp.req.sent_end = end;
            qp.shared.sq_outstanding.fetch_sub(1, Ordering::AcqRel);
            if f.wqe.signaled {
                completions.push(WorkCompletion {
                    byte_len: u32::try_from(f.wqe.len).unwrap_or(u32::MAX),
                    src_qp: dest_qpn,
                    ..WorkCompletion::new(f.wqe.wr_id, WcStatus::Success, f.wqe.op.wc_opcode(), qp.qpn().value())
                });
            }
        }
        qp.req.next_send = 0;
    }
    for wc in completions {
        cx.push_wc(qp, CqSide::Send, wc, false);
    }
    if let Some(wc) = failed {
        cx.enter_error(qp, Some(wc));
    }
}
