#![allow(clippy::cast_possible_truncation)]
//! Invalid verbs calls return the precise error, name what was wrong in their message, and
//! change nothing: a refused modify leaves the QP's state and attributes as they were, and
//! a refused post takes no queue slot and puts nothing on the wire.

mod common;
use common::*;
use rnic_core::cq::Cq;
use rnic_core::engine::qp::QpInit;
use rnic_core::engine::qp::{validate_recv, validate_send, PostError, QpAttr, QpCap, QpShared};
use rnic_core::engine::EngineError;
use rnic_core::mr::{AccessError, AccessFlags, PdId};
use rnic_core::qp_state::{AttrValueError, ModifyError, QpAttrMask, QpState, QpType};
use rnic_core::wr::{RecvWr, SendFlags, SendOp, SendWr, Sge, WcStatus};
use rnic_wire::Qpn;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A second RC QP on node A, in RESET (its CQs are its own).
fn fresh_qp(p: &mut Pair) -> Arc<QpShared> {
    let (scq, rcq) = (Arc::new(Cq::new(10, 64)), Arc::new(Cq::new(11, 64)));
    p.fab.engine(A).create_qp(QpInit::new(QpType::Rc, p.nodes[A].pd, scq, rcq)).unwrap()
}

fn modify(p: &mut Pair, qp: &QpShared, attr: &QpAttr) -> Result<(), EngineError> {
    p.fab.engine(A).modify_qp(0, qp.qpn, attr)
}

/// The QP's attributes as the engine reports them.
fn query(p: &mut Pair, qp: &QpShared) -> QpAttr {
    p.fab.engine(A).query_qp(qp.qpn).unwrap()
}

/// Asserts that `err`'s message mentions every one of `words`.
fn says(err: &impl std::fmt::Display, words: &[&str]) {
    let msg = err.to_string();
    for w in words {
        assert!(msg.contains(w), "{msg:?} does not mention {w:?}");
    }
}

/// The modify attributes that bring a fresh QP of node A up against node B.
fn bring_up(p: &Pair) -> [QpAttr; 3] {
    connect_attrs(&p.nodes[B], 3, 0x100, 0x200)
}

#[test]
fn illegal_transition_names_both_states() {
    let mut p = Pair::new(3, 0, 0);
    let qp = fresh_qp(&mut p);
    let [_, _, rts] = bring_up(&p);
    let before = query(&mut p, &qp);
    let err = modify(&mut p, &qp, &rts).unwrap_err();
    assert_eq!(
        err,
        EngineError::Modify(ModifyError::IllegalTransition {
            qp_type: QpType::Rc,
            from: QpState::Reset,
            to: QpState::Rts
        })
    );
    says(&err, &["RESET", "RTS", "RC"]);
    // Nothing of the refused call was applied.
    assert_eq!(query(&mut p, &qp), before);
    assert_eq!(qp.state(), QpState::Reset);

    // RESET -> ERR is not in Linux's table either; RTS -> RTR goes backwards.
    let to_err = QpAttr { mask: QpAttrMask::STATE, state: QpState::Err, ..QpAttr::default() };
    assert!(matches!(
        modify(&mut p, &qp, &to_err),
        Err(EngineError::Modify(ModifyError::IllegalTransition { from: QpState::Reset, to: QpState::Err, .. }))
    ));
    let qpn = p.nodes[A].qp.qpn;
    let [_, rtr, _] = connect_attrs(&p.nodes[B], 3, 0, 0);
    let err = p.fab.engine(A).modify_qp(0, qpn, &rtr).unwrap_err();
    assert!(matches!(
        err,
        EngineError::Modify(ModifyError::IllegalTransition { from: QpState::Rts, to: QpState::Rtr, .. })
    ));
    says(&err, &["RTS->RTR"]);
    assert_eq!(p.nodes[A].qp.state(), QpState::Rts);
}

#[test]
fn missing_attribute_is_named() {
    let mut p = Pair::new(3, 0, 0);
    let qp = fresh_qp(&mut p);
    let [init, rtr, rts] = bring_up(&p);
    modify(&mut p, &qp, &init).unwrap();
    let before = query(&mut p, &qp);
    let no_mtu = QpAttr { mask: rtr.mask.difference(QpAttrMask::PATH_MTU), ..rtr };
    let err = modify(&mut p, &qp, &no_mtu).unwrap_err();
    assert_eq!(
        err,
        EngineError::Modify(ModifyError::MissingAttributes {
            qp_type: QpType::Rc,
            from: QpState::Init,
            to: QpState::Rtr,
            missing: QpAttrMask::PATH_MTU,
        })
    );
    says(&err, &["INIT", "RTR", "PATH_MTU"]);
    assert_eq!(query(&mut p, &qp), before, "a refused modify applied something");

    // Two missing at once are both named.
    modify(&mut p, &qp, &rtr).unwrap();
    let short = QpAttr { mask: rts.mask.difference(QpAttrMask::SQ_PSN | QpAttrMask::TIMEOUT), ..rts };
    let err = modify(&mut p, &qp, &short).unwrap_err();
    assert!(matches!(
        err,
        EngineError::Modify(ModifyError::MissingAttributes { missing, .. })
            if missing == QpAttrMask::SQ_PSN | QpAttrMask::TIMEOUT
    ));
    says(&err, &["RTR", "RTS", "SQ_PSN", "TIMEOUT"]);
    // A state change without STATE in the mask is not a state change: RTR stays RTR.
    assert_eq!(qp.state(), QpState::Rtr);
    modify(&mut p, &qp, &rts).unwrap();
    assert_eq!(qp.state(), QpState::Rts);
}

#[test]
fn attribute_not_allowed_is_named() {
    let mut p = Pair::new(3, 0, 0);
    let qp = fresh_qp(&mut p);
    let [init, _, _] = bring_up(&p);
    let with_psn = QpAttr { mask: init.mask | QpAttrMask::SQ_PSN, sq_psn: 77, ..init };
    let err = modify(&mut p, &qp, &with_psn).unwrap_err();
    assert_eq!(
        err,
        EngineError::Modify(ModifyError::AttributesNotAllowed {
            qp_type: QpType::Rc,
            from: QpState::Reset,
            to: QpState::Init,
            extra: QpAttrMask::SQ_PSN,
        })
    );
    says(&err, &["RESET", "INIT", "SQ_PSN"]);
    assert_eq!(qp.state(), QpState::Reset);
    assert_eq!(query(&mut p, &qp).sq_psn, 0, "the refused SQ_PSN was applied");

    // A bit this NIC does not know (IBV_QP_RATE_LIMIT, 1 << 25) is refused, printed in hex.
    let unknown = QpAttr { mask: init.mask | QpAttrMask::from_bits_retain(1 << 25), ..init };
    let err = modify(&mut p, &qp, &unknown).unwrap_err();
    assert!(matches!(err, EngineError::Modify(ModifyError::AttributesNotAllowed { .. })));
    says(&err, &["0x2000000"]);
    modify(&mut p, &qp, &init).unwrap();
    assert_eq!(qp.state(), QpState::Init);
}

#[test]
fn out_of_range_values_are_refused() {
    let mut p = Pair::new(3, 0, 0);
    let qp = fresh_qp(&mut p);
    let [init, rtr, rts] = bring_up(&p);
    modify(&mut p, &qp, &init).unwrap();
    let before = query(&mut p, &qp);

    let cases: [(QpAttr, EngineError, &str); 5] = [
        (QpAttr { path_mtu: 7, ..rtr }, AttrValueError::PathMtu(7).into(), "path_mtu 7"),
        (QpAttr { path_mtu: 0, ..rtr }, AttrValueError::PathMtu(0).into(), "path_mtu 0"),
        (QpAttr { min_rnr_timer: 32, ..rtr }, AttrValueError::MinRnrTimer(32).into(), "min_rnr_timer 32"),
        (
            QpAttr { max_dest_rd_atomic: 17, ..rtr },
            EngineError::BadAttr("max_dest_rd_atomic 17 exceeds the device's 16".into()),
            "max_dest_rd_atomic 17",
        ),
        (
            QpAttr { dest_qpn: 1 << 24, ..rtr },
            EngineError::BadAttr("dest_qpn 0x1000000 does not fit 24 bits".into()),
            "dest_qpn 0x1000000",
        ),
    ];
    for (attr, want, word) in cases {
        let err = modify(&mut p, &qp, &attr).unwrap_err();
        assert_eq!(err, want);
        says(&err, &[word]);
        assert_eq!(query(&mut p, &qp), before, "{word}: a refused modify applied something");
    }
    let no_ip = QpAttr { remote_ip: None, ..rtr };
    assert!(matches!(modify(&mut p, &qp, &no_ip), Err(EngineError::BadAttr(m)) if m.contains("AV")));
    assert_eq!(query(&mut p, &qp), before);

    modify(&mut p, &qp, &rtr).unwrap();
    let before = query(&mut p, &qp);
    let cases: [(QpAttr, AttrValueError, &str); 3] = [
        (QpAttr { retry_cnt: 8, ..rts }, AttrValueError::RetryCnt(8), "retry_cnt 8"),
        (QpAttr { rnr_retry: 8, ..rts }, AttrValueError::RnrRetry(8), "rnr_retry 8"),
        (QpAttr { timeout: 32, ..rts }, AttrValueError::Timeout(32), "timeout 32"),
    ];
    for (attr, want, word) in cases {
        let err = modify(&mut p, &qp, &attr).unwrap_err();
        assert_eq!(err, EngineError::AttrValue(want));
        says(&err, &[word]);
        assert_eq!(query(&mut p, &qp), before, "{word}: a refused modify applied something");
    }
    let err = modify(&mut p, &qp, &QpAttr { max_rd_atomic: 200, ..rts }).unwrap_err();
    says(&err, &["max_rd_atomic 200", "16"]);
    assert_eq!(qp.state(), QpState::Rtr);
    modify(&mut p, &qp, &rts).unwrap();
    assert_eq!(qp.state(), QpState::Rts);
}

#[test]
fn unknown_qp_is_named() {
    let mut p = Pair::new(3, 0, 0);
    let [init, _, _] = bring_up(&p);
    let err = p.fab.engine(A).modify_qp(0, Qpn::new(0x999), &init).unwrap_err();
    assert_eq!(err, EngineError::NoSuchQp(0x999));
    says(&err, &["0x999"]);
    assert_eq!(p.fab.engine(A).query_qp(Qpn::new(0x999)).unwrap_err(), EngineError::NoSuchQp(0x999));
    assert_eq!(p.fab.engine(A).destroy_qp(Qpn::new(3)).unwrap_err(), EngineError::NoSuchQp(3));
}

fn write_wr(p: &Pair, wr_id: u64, len: u32) -> SendWr {
    let op = SendOp::RdmaWrite { remote_addr: p.nodes[B].iova, rkey: p.nodes[B].keys.rkey };
    signaled(wr_id, op, vec![p.sge(A, 0, len)])
}

#[test]
fn send_queue_full() {
    let cap = QpCap { max_send_wr: 4, ..QpCap::default() };
    let mut p = Pair::with_cap(3, 0, 0, cap);
    for i in 0..4 {
        p.post_send(A, write_wr(&p, i, 10)).unwrap();
    }
    let err = p.post_send(A, write_wr(&p, 4, 10)).unwrap_err();
    assert_eq!(err, PostError::QueueFull { queue: "send", depth: 4 });
    says(&err, &["send", "full", "4"]);
    assert_eq!(p.nodes[A].qp.sq_outstanding.load(Ordering::Relaxed), 4, "a refused post took a slot");
    // Completions free the slots.
    p.run();
    assert_eq!(Pair::wcs(&p.nodes[A].scq).len(), 4);
    for i in 5..9 {
        p.post_send(A, write_wr(&p, i, 10)).unwrap();
    }
    assert!(matches!(p.post_send(A, write_wr(&p, 9, 10)), Err(PostError::QueueFull { .. })));
    p.run();
    let wcs = Pair::wcs(&p.nodes[A].scq);
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, (5..9).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>());
}

#[test]
fn receive_queue_full() {
    let cap = QpCap { max_recv_wr: 3, ..QpCap::default() };
    let mut p = Pair::with_cap(3, 0, 0, cap);
    for i in 0..3 {
        p.post_recv(B, RecvWr { wr_id: i, sg_list: vec![p.sge(B, i * 64, 64)] }).unwrap();
    }
    let err = p.post_recv(B, RecvWr { wr_id: 3, sg_list: vec![p.sge(B, 0, 64)] }).unwrap_err();
    assert_eq!(err, PostError::QueueFull { queue: "receive", depth: 3 });
    says(&err, &["receive", "full", "3"]);
    assert_eq!(p.nodes[B].qp.rq_outstanding.load(Ordering::Relaxed), 3);
    // A SEND consumes one; then exactly one more fits.
    p.post_send(A, signaled(1, SendOp::Send, vec![p.sge(A, 0, 8)])).unwrap();
    p.run();
    assert_eq!(Pair::wcs(&p.nodes[B].rcq).len(), 1);
    p.post_recv(B, RecvWr { wr_id: 4, sg_list: vec![] }).unwrap();
    assert!(matches!(p.post_recv(B, RecvWr { wr_id: 5, sg_list: vec![] }), Err(PostError::QueueFull { .. })));
}

/// A message over 2^31 bytes (verbs' limit) is refused, whether one SGE or several make it
/// up, on both queues, and takes no slot. The region is 3 GiB of untouched anonymous
/// memory: nothing is read or written.
#[test]
fn a_message_over_two_gib_is_refused() {
    let mut p = Pair::new(3, 0, 0);
    let big = Arc::new(rnic_core::mem::MemBlock::new(3 << 30).unwrap());
    let access = AccessFlags::LOCAL_WRITE;
    let keys = p.nodes[A].mtpt.register(p.nodes[A].pd, big, 0, 3 << 30, 0x1_0000_0000, access).unwrap();
    let sge = |off: u64, len: u32| Sge { addr: 0x1_0000_0000 + off, length: len, lkey: keys.lkey };
    let over = (1u32 << 31) + 1;
    let half = 1u32 << 30;
    for sg in [vec![sge(0, over)], vec![sge(0, half), sge(u64::from(half), half + 1)]] {
        let err = p.post_send(A, signaled(1, SendOp::Send, sg.clone())).unwrap_err();
        assert_eq!(err, PostError::MessageTooLong { len: u64::from(over) });
        let err = p.post_recv(A, RecvWr { wr_id: 2, sg_list: sg }).unwrap_err();
        assert_eq!(err, PostError::MessageTooLong { len: u64::from(over) });
    }
    assert_eq!(p.nodes[A].qp.sq_outstanding.load(Ordering::Relaxed), 0);
    assert_eq!(p.nodes[A].qp.rq_outstanding.load(Ordering::Relaxed), 0);
    // Exactly 2^31 is allowed.
    p.post_recv(A, RecvWr { wr_id: 3, sg_list: vec![sge(0, 1 << 31)] }).unwrap();
}

#[test]
fn too_many_sges() {
    let mut p = Pair::new(3, 0, 0);
    let sg: Vec<Sge> = (0..5).map(|i| p.sge(A, i * 16, 16)).collect();
    let err = p.post_send(A, signaled(1, SendOp::Send, sg.clone())).unwrap_err();
    assert_eq!(err, PostError::TooManySges { given: 5, max: 4 });
    says(&err, &["5 SGEs", "4"]);
    let err = p.post_recv(A, RecvWr { wr_id: 1, sg_list: sg.clone() }).unwrap_err();
    assert_eq!(err, PostError::TooManySges { given: 5, max: 4 });
    // Four is the limit, not one past it.
    p.post_recv(B, RecvWr { wr_id: 1, sg_list: (0..4).map(|i| p.sge(B, i * 16, 16)).collect() }).unwrap();
    p.post_send(A, signaled(2, SendOp::Send, sg[..4].to_vec())).unwrap();
    p.run();
    assert_eq!(Pair::wcs(&p.nodes[B].rcq)[0].byte_len, 64);
    assert_eq!(p.nodes[A].qp.sq_outstanding.load(Ordering::Relaxed), 0);
}

#[test]
fn inline_limits() {
    let mut p = Pair::new(3, 0, 0);
    let inline =
        |wr_id, op, sg_list| SendWr { wr_id, op, sg_list, flags: SendFlags::SIGNALED | SendFlags::INLINE, ud: None };
    let err = p.post_send(A, inline(1, SendOp::Send, vec![p.sge(A, 0, 200), p.sge(A, 200, 57)])).unwrap_err();
    assert_eq!(err, PostError::InlineTooLong { len: 257, max: 256 });
    says(&err, &["257", "256", "inline"]);
    let read = SendOp::RdmaRead { remote_addr: p.nodes[B].iova, rkey: p.nodes[B].keys.rkey };
    let err = p.post_send(A, inline(2, read, vec![p.sge(A, 0, 8)])).unwrap_err();
    assert_eq!(err, PostError::InlineNotAllowed { op: "RDMA_READ" });
    says(&err, &["RDMA_READ", "inline"]);
    assert_eq!(p.nodes[A].qp.sq_outstanding.load(Ordering::Relaxed), 0);
    // Exactly the limit is fine.
    p.post_recv(B, RecvWr { wr_id: 1, sg_list: vec![p.sge(B, 0, 256)] }).unwrap();
    p.post_send(A, inline(3, SendOp::Send, vec![p.sge(A, 0, 256)])).unwrap();
    p.run();
    assert_eq!(Pair::wcs(&p.nodes[B].rcq)[0].byte_len, 256);
}

/// A 4 KiB region of A's block at offset 64 KiB, I/O virtual address `IOVA`.
const SMALL_OFF: usize = 64 << 10;
const SMALL_LEN: usize = 4096;
const IOVA: u64 = 0x5000_0000;

fn small_sge(lkey: u32, at: u64, len: u32) -> Sge {
    Sge { addr: IOVA + at, length: len, lkey }
}

#[test]
fn sge_over_the_region_end_names_its_index() {
    let mut p = Pair::new(3, 0, 0);
    let keys = p.register(A, PdId(1), SMALL_OFF, SMALL_LEN, IOVA, AccessFlags::REGISTRABLE);
    let k = keys.lkey;
    let sg = vec![small_sge(k, 0, 100), small_sge(k, 100, 100), small_sge(k, 4000, 97)];
    let want = PostError::Sge {
        index: 2,
        source: AccessError::OutOfBounds { key: k, va: IOVA + 4000, len: 97, iova: IOVA, region_len: SMALL_LEN },
    };
    let err = p.post_send(A, signaled(1, SendOp::Send, sg.clone())).unwrap_err();
    assert_eq!(err, want);
    says(&err, &["SGE 2", "97 bytes", "outside memory region", "4096 bytes"]);
    let err = p.post_recv(A, RecvWr { wr_id: 1, sg_list: sg.clone() }).unwrap_err();
    assert_eq!(err, want);
    let read = SendOp::RdmaRead { remote_addr: p.nodes[B].iova, rkey: p.nodes[B].keys.rkey };
    assert_eq!(p.post_send(A, signaled(2, read, sg)).unwrap_err(), want);
    // Below the start, as the first SGE.
    let err = p.post_send(A, signaled(3, SendOp::Send, vec![Sge { addr: IOVA - 1, length: 2, lkey: k }])).unwrap_err();
    assert!(matches!(err, PostError::Sge { index: 0, source: AccessError::OutOfBounds { .. } }));
    // Wrapping the address space.
    let err = p.post_send(A, signaled(4, SendOp::Send, vec![Sge { addr: u64::MAX, length: 2, lkey: k }])).unwrap_err();
    assert!(matches!(err, PostError::Sge { index: 0, source: AccessError::AddressOverflow { .. } }));
    assert_eq!(p.nodes[A].qp.sq_outstanding.load(Ordering::Relaxed), 0, "a refused post took a slot");
    assert_eq!(p.nodes[A].qp.rq_outstanding.load(Ordering::Relaxed), 0, "a refused post took a slot");

    // The control: ending exactly at the region's last byte goes through, and the bytes
    // come from the region's block offset.
    p.fill(A, SMALL_OFF + 4000, &pattern(4000, 96));
    let sg = vec![small_sge(k, 4000, 96)];
    let remote = SendOp::RdmaWrite { remote_addr: p.nodes[B].iova, rkey: p.nodes[B].keys.rkey };
    p.post_send(A, signaled(5, remote, sg)).unwrap();
    p.run();
    assert_eq!(Pair::wcs(&p.nodes[A].scq)[0].status, WcStatus::Success);
    assert_eq!(p.read(B, 0, 96), pattern(4000, 96));
}

#[test]
fn lkey_of_another_pd() {
    let mut p = Pair::new(3, 0, 0);
    let other = p.register(A, PdId(2), SMALL_OFF, SMALL_LEN, IOVA, AccessFlags::REGISTRABLE);
    let sg = vec![p.sge(A, 0, 8), small_sge(other.lkey, 0, 8)];
    let want =
        PostError::Sge { index: 1, source: AccessError::PdMismatch { key: other.lkey, pd: PdId(1), mr_pd: PdId(2) } };
    let err = p.post_send(A, signaled(1, SendOp::Send, sg.clone())).unwrap_err();
    assert_eq!(err, want);
    says(&err, &["SGE 1", "protection domain 2, not 1"]);
    assert_eq!(p.post_recv(A, RecvWr { wr_id: 1, sg_list: sg }).unwrap_err(), want);
    // Inline data is read through its lkey too, so the PD still matters.
    let wr = SendWr {
        wr_id: 2,
        op: SendOp::Send,
        sg_list: vec![small_sge(other.lkey, 0, 8)],
        flags: SendFlags::INLINE,
        ud: None,
    };
    assert!(matches!(p.post_send(A, wr), Err(PostError::Sge { index: 0, source: AccessError::PdMismatch { .. } })));
}

#[test]
fn bad_and_stale_lkeys() {
    let mut p = Pair::new(3, 0, 0);
    let err =
        p.post_send(A, signaled(1, SendOp::Send, vec![Sge { addr: IOVA, length: 8, lkey: 0xdead_be5a }])).unwrap_err();
    assert_eq!(err, PostError::Sge { index: 0, source: AccessError::BadKey { key: 0xdead_be5a } });
    says(&err, &["0xdeadbe5a", "does not name"]);
    let keys = p.register(A, PdId(1), SMALL_OFF, SMALL_LEN, IOVA, AccessFlags::REGISTRABLE);
    p.nodes[A].mtpt.deregister(keys.lkey).unwrap();
    let err = p.post_recv(A, RecvWr { wr_id: 1, sg_list: vec![small_sge(keys.lkey, 0, 8)] }).unwrap_err();
    assert_eq!(err, PostError::Sge { index: 0, source: AccessError::BadKey { key: keys.lkey } });
    let keys = p.register(A, PdId(1), SMALL_OFF, SMALL_LEN, IOVA, AccessFlags::REGISTRABLE);
    p.nodes[A].mtpt.invalidate(keys.lkey).unwrap();
    let err = p.post_send(A, signaled(2, SendOp::Send, vec![small_sge(keys.lkey, 0, 8)])).unwrap_err();
    assert_eq!(err, PostError::Sge { index: 0, source: AccessError::Invalidated { key: keys.lkey } });
    says(&err, &["invalidated"]);
}

#[test]
fn local_writes_need_local_write() {
    let mut p = Pair::new(3, 0, 0);
    let ro = p.register(A, PdId(1), SMALL_OFF, SMALL_LEN, IOVA, AccessFlags::REMOTE_READ);
    let want = PostError::Sge {
        index: 0,
        source: AccessError::AccessDenied {
            key: ro.lkey,
            need: AccessFlags::LOCAL_WRITE,
            have: AccessFlags::REMOTE_READ,
        },
    };
    // A receive buffer and an RDMA READ destination are written by the NIC.
    let err = p.post_recv(A, RecvWr { wr_id: 1, sg_list: vec![small_sge(ro.lkey, 0, 64)] }).unwrap_err();
    assert_eq!(err, want);
    says(&err, &["SGE 0", "LOCAL_WRITE", "REMOTE_READ"]);
    let read = SendOp::RdmaRead { remote_addr: p.nodes[B].iova, rkey: p.nodes[B].keys.rkey };
    assert_eq!(p.post_send(A, signaled(2, read, vec![small_sge(ro.lkey, 0, 64)])).unwrap_err(), want);
    // Reading it locally needs no right: it can be the source of a SEND or a WRITE.
    let write = SendOp::RdmaWrite { remote_addr: p.nodes[B].iova, rkey: p.nodes[B].keys.rkey };
    p.post_send(A, signaled(3, write, vec![small_sge(ro.lkey, 0, 64)])).unwrap();
    p.run();
    assert_eq!(Pair::wcs(&p.nodes[A].scq)[0].status, WcStatus::Success);
}

#[test]
fn posting_in_the_wrong_state() {
    let mut p = Pair::new(3, 0, 0);
    let qp = fresh_qp(&mut p);
    let mtpt = p.nodes[A].mtpt.clone();
    let send = signaled(1, SendOp::Send, vec![p.sge(A, 0, 8)]);
    let recv = RecvWr { wr_id: 1, sg_list: vec![p.sge(A, 0, 8)] };

    let err = validate_recv(&qp, &mtpt, &recv).unwrap_err();
    assert_eq!(err, PostError::BadState { queue: "receive", state: QpState::Reset });
    says(&err, &["receive", "Reset"]);
    let err = validate_send(&qp, &mtpt, &send).unwrap_err();
    assert_eq!(err, PostError::BadState { queue: "send", state: QpState::Reset });

    let [init, rtr, rts] = bring_up(&p);
    modify(&mut p, &qp, &init).unwrap();
    // Receives may be posted from INIT on; sends only from RTS.
    validate_recv(&qp, &mtpt, &recv).unwrap();
    let err = validate_send(&qp, &mtpt, &send).unwrap_err();
    assert_eq!(err, PostError::BadState { queue: "send", state: QpState::Init });
    says(&err, &["send", "Init"]);
    modify(&mut p, &qp, &rtr).unwrap();
    let err = validate_send(&qp, &mtpt, &send).unwrap_err();
    assert_eq!(err, PostError::BadState { queue: "send", state: QpState::Rtr });
    says(&err, &["send", "Rtr"]);
    assert_eq!(qp.sq_outstanding.load(Ordering::Relaxed), 0, "a refused post took a slot");
    modify(&mut p, &qp, &rts).unwrap();
    validate_send(&qp, &mtpt, &send).unwrap();
    assert_eq!(qp.sq_outstanding.load(Ordering::Relaxed), 1);
}
