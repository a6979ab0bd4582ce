//! SEND with Invalidate, LOCAL_INV, shared receive queues and their limit event, and CQ
//! notification (next / solicited only) over the virtual-time fabric.
#![allow(clippy::cast_possible_truncation)]
mod common;

use common::*;
use rnic_core::engine::AsyncEvent;
use rnic_core::mr::{AccessFlags, MrState, PdId};
use rnic_core::qp_state::QpState;
use rnic_core::srq::Srq;
use rnic_core::wr::WcFlags;
use rnic_core::wr::{RecvWr, SendFlags, SendOp, SendWr, WcOpcode, WcStatus};
use std::sync::Arc;

const MTU1024: u32 = 3;
const REGION: u64 = 0x4000_0000;

fn recv(p: &mut Pair, n: usize, wr_id: u64, off: u64) {
    let sge = p.sge(n, off, 4096);
    p.post_recv(n, RecvWr { wr_id, sg_list: vec![sge] }).unwrap();
}

#[test]
fn send_with_invalidate_invalidates_and_later_write_fails() {
    let mut p = Pair::new(MTU1024, 10, 20);
    let keys = p.register(B, PdId(1), 0x10_000, 4096, REGION, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
    recv(&mut p, B, 1, 0);
    p.fill(A, 0, b"bye");
    let wr = SendWr::new(5, SendOp::SendWithInv { invalidate_rkey: keys.rkey }, vec![p.sge(A, 0, 3)]);
    p.post_send(A, wr).unwrap();
    p.run();
    let rwc = Pair::wcs(&p.nodes[B].rcq);
    assert_eq!(rwc.len(), 1);
    assert_eq!((rwc[0].status, rwc[0].opcode, rwc[0].byte_len), (WcStatus::Success, WcOpcode::Recv, 3));
    assert!(rwc[0].wc_flags.contains(WcFlags::WITH_INV));
    assert_eq!(rwc[0].invalidated_rkey, keys.rkey);
    assert_eq!(Pair::wcs(&p.nodes[A].scq)[0].opcode, WcOpcode::Send);
    assert_eq!(p.nodes[B].mtpt.state(keys.rkey), MrState::Invalid);

    // A WRITE with the invalidated key: NAK remote access error, nothing written.
    p.fill(A, 0x100, b"late");
    let wr = SendWr::new(6, SendOp::RdmaWrite { remote_addr: REGION, rkey: keys.rkey }, vec![p.sge(A, 0x100, 4)]);
    p.post_send(A, wr).unwrap();
    p.run();
    assert_eq!(Pair::wcs(&p.nodes[A].scq)[0].status, WcStatus::RemAccessErr);
    assert_eq!(p.read(B, 0x10_000, 4), [0; 4]);
}

#[test]
fn send_with_invalidate_of_a_foreign_key_fails_the_receive() {
    let mut p = Pair::new(MTU1024, 10, 20);
    // A region of another PD: the QP may not invalidate it (IBA 10.6.7).
    let other = p.register(B, PdId(2), 0x10_000, 4096, REGION, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
    recv(&mut p, B, 1, 0);
    let wr = SendWr::new(5, SendOp::SendWithInv { invalidate_rkey: other.rkey }, vec![p.sge(A, 0, 3)]);
    p.post_send(A, wr).unwrap();
    p.run();
    let rwc = Pair::wcs(&p.nodes[B].rcq);
    assert_eq!((rwc[0].wr_id, rwc[0].status), (1, WcStatus::RemInvReqErr));
    assert_eq!(Pair::wcs(&p.nodes[A].scq)[0].status, WcStatus::RemInvReqErr);
    assert_eq!(p.nodes[B].mtpt.state(other.rkey), MrState::Valid);
    assert_eq!(p.nodes[B].qp.state(), QpState::Err);
}

#[test]
fn local_invalidate_completes_in_order_and_blocks_remote_access() {
    let mut p = Pair::new(MTU1024, 10, 20);
    let keys = p.register(B, PdId(1), 0x10_000, 4096, REGION, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
    // B invalidates its own region locally, after a SEND it posted earlier.
    recv(&mut p, A, 1, 0);
    p.post_send(B, SendWr::send(1, vec![p.sge(B, 0, 16)])).unwrap();
    p.post_send(B, SendWr::local_inv(2, keys.lkey)).unwrap();
    p.run();
    let wcs = Pair::wcs(&p.nodes[B].scq);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        [(1, WcStatus::Success, WcOpcode::Send), (2, WcStatus::Success, WcOpcode::LocalInv)]
    );
    let wr = SendWr::new(6, SendOp::RdmaWrite { remote_addr: REGION, rkey: keys.rkey }, vec![p.sge(A, 0x100, 4)]);
    p.post_send(A, wr).unwrap();
    p.run();
    assert_eq!(Pair::wcs(&p.nodes[A].scq).last().unwrap().status, WcStatus::RemAccessErr);

    // LOCAL_INV with a key naming nothing: LOC_QP_OP_ERR and the QP in error (rxe).
    let mut p = Pair::new(MTU1024, 10, 20);
    p.post_send(B, SendWr::local_inv(3, 0xdead_0001)).unwrap();
    p.run();
    let wcs = Pair::wcs(&p.nodes[B].scq);
    assert_eq!((wcs[0].wr_id, wcs[0].status, wcs[0].opcode), (3, WcStatus::LocQpOpErr, WcOpcode::LocalInv));
    assert_eq!(p.nodes[B].qp.state(), QpState::Err);
}

/// A poster that finds the engine between rounds queues its work requests
/// (`Engine::queue_send`): nothing leaves until the round's `transmit_queued` (the
/// fabric's next step runs it, as a device's next round does), which sends them in
/// send-queue order together with a WR posted the usual way after them, and runs a
/// queued LOCAL_INV in that order. Queued on a QP already in error, a WR is flushed.
#[test]
fn work_requests_queued_between_rounds_leave_in_order_at_the_next_round() {
    let mut p = Pair::new(MTU1024, 10, 20);
    let keys = p.register(B, PdId(1), 0x10_000, 4096, REGION, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
    for i in 0..3 {
        recv(&mut p, A, 10 + i, 4096 * i);
    }
    p.fill(B, 0, b"first");
    p.fill(B, 64, b"second");
    p.fill(B, 128, b"third");
    p.queue_send(B, SendWr::send(1, vec![p.sge(B, 0, 5)])).unwrap();
    p.queue_send(B, SendWr::send(2, vec![p.sge(B, 64, 6)])).unwrap();
    p.queue_send(B, SendWr::local_inv(3, keys.lkey)).unwrap();
    assert!(p.fab.engine(B).has_queued());
    // Nothing was sent when posting.
    assert!(!p.fab.engine(B).has_pending_transmit());
    // LOCAL_INV is executed when the engine takes it, as `post_send` does; it completes
    // in order with the rest.
    assert_eq!(p.nodes[B].mtpt.state(keys.rkey), MrState::Invalid);
    p.transmit_queued(B);
    assert!(!p.fab.engine(B).has_queued());
    assert!(p.fab.engine(B).has_pending_transmit());
    p.post_send(B, SendWr::send(4, vec![p.sge(B, 128, 5)])).unwrap();
    p.run();
    let wcs = Pair::wcs(&p.nodes[B].scq);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        [
            (1, WcStatus::Success, WcOpcode::Send),
            (2, WcStatus::Success, WcOpcode::Send),
            (3, WcStatus::Success, WcOpcode::LocalInv),
            (4, WcStatus::Success, WcOpcode::Send)
        ]
    );
    let got: Vec<(u64, u32)> = Pair::wcs(&p.nodes[A].rcq).iter().map(|w| (w.wr_id, w.byte_len)).collect();
    assert_eq!(got, [(10, 5), (11, 6), (12, 5)]);
    assert_eq!(p.read(A, 0, 5), b"first");
    assert_eq!(p.read(A, 4096, 6), b"second");
    assert_eq!(p.read(A, 8192, 5), b"third");

    // A QP in error (a LOCAL_INV of a key naming nothing put it there): flushed at once.
    // (No explicit transmit_queued: the fabric's step runs it.)
    p.queue_send(B, SendWr::local_inv(5, 0xdead_0001)).unwrap();
    p.run();
    assert_eq!(p.nodes[B].qp.state(), QpState::Err);
    p.queue_send(B, SendWr::send(6, vec![p.sge(B, 0, 5)])).unwrap();
    let wcs = Pair::wcs(&p.nodes[B].scq);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(5, WcStatus::LocQpOpErr), (6, WcStatus::WrFlushErr)]
    );
    assert!(!p.fab.engine(B).has_queued());
}

#[test]
fn srq_serves_two_qps_and_raises_its_limit_event_once() {
    let mut p = Pair::new(MTU1024, 10, 20);
    let srq = Arc::new(Srq::new(1, PdId(1), 16, 2));
    let (a1, b1) = p.extra_qp_pair(Some(srq.clone()), MTU1024);
    let (a2, b2) = p.extra_qp_pair(Some(srq.clone()), MTU1024);
    for i in 0..6u64 {
        let sge = p.sge(B, 0x1000 * i, 64);
        srq.post_recv(&p.nodes[B].mtpt, &RecvWr { wr_id: 100 + i, sg_list: vec![sge] }).unwrap();
    }
    // Posting to a QP that has an SRQ is refused.
    let wr = RecvWr { wr_id: 1, sg_list: vec![p.sge(B, 0, 8)] };
    let err = rnic_core::engine::qp::validate_recv(&b1, &p.nodes[B].mtpt, &wr).unwrap_err();
    assert_eq!(err.to_string(), "the QP takes its receive WQEs from SRQ 1: post receives to the SRQ");
    srq.set_limit(3).unwrap();
    assert!(srq.set_limit(17).is_err());
    // Four SENDs alternate between the two QPs: each takes the oldest SRQ WQE.
    for i in 0..4u64 {
        let qp = if i % 2 == 0 { &a1 } else { &a2 };
        p.fill(A, 0x100 * i as usize, &[i as u8; 10]);
        let wr = SendWr::send(i, vec![p.sge(A, 0x100 * i, 10)]);
        p.post_send_on(A, qp, wr).unwrap();
        p.run();
    }
    let rwc = Pair::wcs(&p.nodes[B].rcq);
    assert_eq!(rwc.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [100, 101, 102, 103]);
    assert_eq!(
        rwc.iter().map(|w| w.qp_num).collect::<Vec<_>>(),
        [b1.qpn.value(), b2.qpn.value(), b1.qpn.value(), b2.qpn.value()]
    );
    for i in 0..4usize {
        assert_eq!(p.read(B, 0x1000 * i, 10), [i as u8; 10]);
    }
    assert_eq!(srq.len(), 2);
    // 6 -> 5 -> 4 -> 3 -> 2: the limit (3) was crossed by the fourth take, once.
    let events: Vec<_> = std::iter::from_fn(|| p.fab.engine(B).poll_event()).collect();
    assert_eq!(events, [AsyncEvent::SrqLimitReached { srq: 1 }]);
    assert_eq!(srq.limit(), 0, "the limit disarmed itself");
    // Empty SRQ: RNR NAK until a WQE is posted.
    for i in 4..7u64 {
        p.post_send_on(A, &a1, SendWr::send(i, vec![p.sge(A, 0, 4)])).unwrap();
    }
    let now = p.fab.now();
    p.fab.run_until(now + 200_000);
    assert!(p.fab.engine(B).counters().send_rnr_err.load(std::sync::atomic::Ordering::Relaxed) > 0);
    let sge = p.sge(B, 0x9000, 64);
    srq.post_recv(&p.nodes[B].mtpt, &RecvWr { wr_id: 200, sg_list: vec![sge] }).unwrap();
    p.run();
    assert_eq!(Pair::wcs(&p.nodes[B].rcq).iter().map(|w| w.wr_id).collect::<Vec<_>>(), [104, 105, 200]);
}

#[test]
fn solicited_only_notification_ignores_unsolicited_completions() {
    let mut p = Pair::new(MTU1024, 10, 20);
    let (tx, rx) = crossbeam_channel::unbounded();
    p.nodes[B].rcq.set_channel(Some(tx));
    for i in 0..3 {
        recv(&mut p, B, i, 0x1000 * i);
    }
    p.nodes[B].rcq.req_notify(true);
    p.post_send(A, SendWr::send(1, vec![p.sge(A, 0, 8)])).unwrap();
    p.run();
    assert!(rx.try_recv().is_err(), "an unsolicited SEND raised a solicited-only event");
    let mut wr = SendWr::send(2, vec![p.sge(A, 0, 8)]);
    wr.flags = SendFlags::SIGNALED | SendFlags::SOLICITED;
    p.post_send(A, wr).unwrap();
    p.run();
    assert_eq!(rx.try_recv(), Ok(p.nodes[B].rcq.id()));
    // Once per request: the next completion raises nothing until re-armed.
    let mut wr = SendWr::send(3, vec![p.sge(A, 0, 8)]);
    wr.flags.set(SendFlags::SOLICITED, true);
    p.post_send(A, wr).unwrap();
    p.run();
    assert!(rx.try_recv().is_err());
    assert_eq!(Pair::wcs(&p.nodes[B].rcq).len(), 3);
}
