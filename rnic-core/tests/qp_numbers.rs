//! QP numbers are handed out cyclically, as rxe's `xa_alloc_cyclic` does: a destroyed QP's
//! number does not come straight back, so a peer's late packets for the old connection
//! find no QP instead of landing on a new one.

mod common;
use common::*;
use rnic_core::engine::qp::QpInit;
use rnic_core::qp_state::QpType;
use rnic_core::wr::{RecvWr, SendOp};
use std::collections::HashSet;

#[test]
fn an_old_connections_late_packets_do_not_reach_a_new_qp() {
    let mut p = Pair::new(3, 0x100, 0x200);
    p.fill(A, 0, b"for the old QP only");
    // A's SEND is on its way (it leaves at the next step) when B replaces its QP.
    p.post_send(A, signaled(1, SendOp::Send, vec![p.sge(A, 0, 19)])).unwrap();
    let old = p.nodes[B].qp.qpn;
    p.fab.engine(B).destroy_qp(old).unwrap();
    let (scq, rcq) = (p.nodes[B].scq.clone(), p.nodes[B].rcq.clone());
    let pd = p.nodes[B].pd;
    let new = p.fab.engine(B).create_qp(QpInit::new(QpType::Rc, pd, scq, rcq)).unwrap();
    assert_ne!(new.qpn, old, "the destroyed QP's number came straight back");
    // The worst case: the new QP connects to the same peer QP and expects the same PSN.
    for at in connect_attrs(&p.nodes[A], 3, 0x200, 0x100) {
        p.fab.engine(B).modify_qp(0, new.qpn, &at).unwrap();
    }
    p.nodes[B].qp = new;
    p.post_recv(B, RecvWr { wr_id: 9, sg_list: vec![p.sge(B, 0, 64)] }).unwrap();
    let deadline = p.fab.now() + 3_000_000;
    p.fab.run_until(deadline);
    assert!(Pair::wcs(&p.nodes[B].rcq).is_empty(), "the old connection's SEND reached the new QP");
    assert_eq!(p.read(B, 0, 19), vec![0; 19]);
    assert!(p.fab.engine(B).counters().unknown_qp_pkts.load(std::sync::atomic::Ordering::Relaxed) >= 1);
}

#[test]
fn numbers_are_not_reused_until_the_space_is_walked_and_lookups_stay_exact() {
    let mut p = Pair::new(3, 0, 0);
    let (scq, rcq, pd) = (p.nodes[B].scq.clone(), p.nodes[B].rcq.clone(), p.nodes[B].pd);
    let e = p.fab.engine(B);
    let mut seen = HashSet::new();
    let mut live = Vec::new();
    // Grow past several table doublings with holes: create 3, destroy the middle one.
    for round in 0..400 {
        for _ in 0..3 {
            let q = e.create_qp(QpInit::new(QpType::Rc, pd, scq.clone(), rcq.clone())).unwrap();
            assert!(seen.insert(q.qpn.value()), "QPN {:#x} handed out twice (round {round})", q.qpn.value());
            live.push(q.qpn);
        }
        let gone = live.remove(live.len() - 2);
        e.destroy_qp(gone).unwrap();
        assert!(e.query_qp(gone).is_err(), "a destroyed QP still answers");
    }
    for q in &live {
        assert!(e.query_qp(*q).is_ok(), "live QP {:#x} lost", q.value());
    }
    assert_eq!(seen.len(), 1200);
}
