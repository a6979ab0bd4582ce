//! Atomics (COMPARE & SWAP, FETCH & ADD), ATOMIC WRITE and FLUSH over the virtual-time
//! fabric: results against a model, atomicity across QPs, the responder's checks, and a
//! duplicate atomic that must not execute twice.
#![allow(clippy::cast_possible_truncation)]
mod common;

use common::*;
use rnic_core::fabric::{Verdict, Wire};
use rnic_core::mr::{AccessFlags, PdId};
use rnic_core::qp_state::QpState;
use rnic_core::wr::{SendOp, SendWr, WcOpcode, WcStatus, FLUSH_GLOBAL, FLUSH_PERSISTENT};
use rnic_wire::aeth::{NakCode, Syndrome};
use rnic_wire::roce::{RocePacket, RoceRepr};
use rnic_wire::Opcode;

const MTU1024: u32 = 3;
/// B's target word (8-byte aligned: the block is page aligned).
const T: usize = 0x1000;
/// A's result buffer.
const R: usize = 0x2000;

fn opcode_of(w: &Wire) -> Opcode {
    RocePacket::new_checked(&w.data[..]).unwrap().bth().opcode()
}

fn cas(p: &Pair, wr_id: u64, off: usize, compare: u64, swap: u64) -> SendWr {
    let b = &p.nodes[B];
    SendWr::compare_swap(wr_id, p.sge(A, R as u64, 8), b.iova + off as u64, b.keys.rkey, compare, swap)
}

fn fadd(p: &Pair, wr_id: u64, result: usize, off: usize, add: u64) -> SendWr {
    let b = &p.nodes[B];
    SendWr::fetch_add(wr_id, p.sge(A, result as u64, 8), b.iova + off as u64, b.keys.rkey, add)
}

#[test]
fn fetch_add_and_compare_swap_follow_a_model() {
    let mut p = Pair::new(MTU1024, 10, 20);
    p.set_u64(B, T, 0x1234);
    let mut model: u64 = 0x1234;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..200u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (wr, expect_orig, next) = match x % 3 {
            0 => (fadd(&p, i, R, T, x), model, model.wrapping_add(x)),
            // A compare that matches...
            1 => (cas(&p, i, T, model, x), model, x),
            // ...and one that does not.
            _ => (cas(&p, i, T, model ^ 1, x), model, model),
        };
        p.post_send(A, wr).unwrap();
        p.run();
        let wcs = Pair::wcs(&p.nodes[A].scq);
        assert_eq!(wcs.len(), 1, "op {i}");
        let wc = wcs[0];
        assert_eq!((wc.wr_id, wc.status, wc.byte_len), (i, WcStatus::Success, 8));
        assert_eq!(wc.opcode, if x % 3 == 0 { WcOpcode::FetchAdd } else { WcOpcode::CompSwap });
        assert_eq!(p.u64_at(A, R), expect_orig, "op {i}: original value");
        model = next;
        assert_eq!(p.u64_at(B, T), model, "op {i}: target");
    }
    // Several atomics in flight at once (max_rd_atomic 4), results in order.
    for i in 0..16u64 {
        p.post_send(A, fadd(&p, 1000 + i, R + 8 * i as usize, T, 1)).unwrap();
    }
    p.run();
    let wcs = Pair::wcs(&p.nodes[A].scq);
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), (1000..1016).collect::<Vec<_>>());
    for i in 0..16u64 {
        assert_eq!(p.u64_at(A, R + 8 * i as usize), model.wrapping_add(i));
    }
    assert_eq!(p.u64_at(B, T), model.wrapping_add(16));
}

#[test]
fn concurrent_fetch_add_from_two_qps_loses_no_update() {
    let mut p = Pair::new(MTU1024, 10, 20);
    let (qa2, _qb2) = p.extra_qp_pair(None, MTU1024);
    let qa1 = p.nodes[A].qp.clone();
    const N: usize = 64;
    // Both QPs hammer the same word, interleaved on the wire.
    for i in 0..N {
        let w1 = fadd(&p, i as u64, R + 16 * i, T, 1);
        let w2 = fadd(&p, (N + i) as u64, R + 16 * i + 8, T, 1);
        p.post_send_on(A, &qa1, w1).unwrap();
        p.post_send_on(A, &qa2, w2).unwrap();
    }
    p.run();
    let wcs = Pair::wcs(&p.nodes[A].scq);
    assert_eq!(wcs.len(), 2 * N);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(p.u64_at(B, T), 2 * N as u64);
    // Every fetched value distinct and together exactly 0..2N: no update was lost or doubled.
    let mut seen: Vec<u64> = (0..2 * N).map(|k| p.u64_at(A, R + 8 * k)).collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..2 * N as u64).collect::<Vec<_>>());
}

#[test]
fn duplicate_atomic_returns_the_saved_value_and_never_adds_twice() {
    let mut p = Pair::new(MTU1024, 10, 20);
    p.set_u64(B, T, 41);
    p.trace();
    // Lose the first ATOMIC ACKNOWLEDGE: the requester times out and sends the FETCH_ADD
    // again with the same PSN; the responder must answer from its saved resource.
    let mut dropped = 0;
    p.fab.add_rule(move |_now, w: &Wire| {
        if opcode_of(w) == Opcode::RC_ATOMIC_ACKNOWLEDGE && dropped == 0 {
            dropped += 1;
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    });
    p.post_send(A, fadd(&p, 7, R, T, 5)).unwrap();
    p.run();
    let wcs = Pair::wcs(&p.nodes[A].scq);
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].status, wcs[0].opcode), (WcStatus::Success, WcOpcode::FetchAdd));
    assert_eq!(p.u64_at(A, R), 41, "the requester gets the original value");
    assert_eq!(p.u64_at(B, T), 46, "added exactly once");
    let traced = p.traced();
    let requests: Vec<_> = traced.iter().filter(|(_, r)| r.bth.opcode == Opcode::RC_FETCH_ADD).collect();
    assert_eq!(requests.len(), 2, "the request was retransmitted");
    assert_eq!(requests[0].1.bth.psn, requests[1].1.bth.psn);
    let acks: Vec<_> = traced.iter().filter(|(_, r)| r.bth.opcode == Opcode::RC_ATOMIC_ACKNOWLEDGE).collect();
    assert_eq!(acks.len(), 2);
    assert!(acks.iter().all(|(_, r)| r.ext.atomic_ack_eth.unwrap().orig_remote_data == 41));
    assert_eq!(p.fab.engine(B).counters().duplicate_request.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[test]
fn duplicate_compare_swap_is_not_executed_again() {
    // Same with a COMPARE & SWAP whose second execution would succeed (target reset
    // between the two by the rule): the saved value must be returned instead.
    let mut p = Pair::new(MTU1024, 10, 20);
    p.set_u64(B, T, 1);
    let mem_b = p.nodes[B].mem.clone();
    let mut dropped = false;
    p.fab.add_rule(move |_now, w: &Wire| {
        if opcode_of(w) == Opcode::RC_ATOMIC_ACKNOWLEDGE && !dropped {
            dropped = true;
            // The host sets the word back to 1 meanwhile: a re-execution would swap again.
            mem_b.write(T, &1u64.to_ne_bytes()).unwrap();
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    });
    p.post_send(A, cas(&p, 1, T, 1, 2)).unwrap();
    p.run();
    let wcs = Pair::wcs(&p.nodes[A].scq);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(p.u64_at(A, R), 1);
    assert_eq!(p.u64_at(B, T), 1, "not swapped a second time");
}

fn first_nak(p: &Pair) -> Option<Syndrome> {
    p.traced().iter().find_map(|(_, r)| match r.ext.aeth.map(|a| a.syndrome) {
        Some(s @ Syndrome::Nak(_)) => Some(s),
        _ => None,
    })
}

#[test]
fn misaligned_atomic_is_an_invalid_request() {
    let mut p = Pair::new(MTU1024, 10, 20);
    p.set_u64(B, T, 9);
    p.trace();
    p.post_send(A, fadd(&p, 1, R, T + 4, 1)).unwrap();
    p.run();
    let wcs = Pair::wcs(&p.nodes[A].scq);
    assert_eq!((wcs[0].status, wcs[0].opcode), (WcStatus::RemInvReqErr, WcOpcode::FetchAdd));
    assert_eq!(first_nak(&p), Some(Syndrome::Nak(NakCode::InvalidRequest)));
    assert_eq!(p.u64_at(B, T), 9);
    assert_eq!(p.read(B, T, 16), [9u64.to_ne_bytes(), [0; 8]].concat(), "no byte touched");
    assert_eq!(p.nodes[B].qp.state(), QpState::Err);
}

#[test]
fn atomic_without_remote_atomic_right_is_a_remote_access_error() {
    let mut p = Pair::new(MTU1024, 10, 20);
    // A region of B without REMOTE_ATOMIC.
    let keys = p.register(B, PdId(1), T, 64, 0x5000_0000, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
    p.trace();
    let wr = SendWr::fetch_add(1, p.sge(A, R as u64, 8), 0x5000_0000, keys.rkey, 1);
    p.post_send(A, wr).unwrap();
    p.run();
    let wcs = Pair::wcs(&p.nodes[A].scq);
    assert_eq!(wcs[0].status, WcStatus::RemAccessErr);
    assert_eq!(first_nak(&p), Some(Syndrome::Nak(NakCode::RemoteAccessError)));
    assert_eq!(p.u64_at(B, T), 0);
}

#[test]
fn atomic_to_a_qp_without_remote_atomic_is_an_invalid_request() {
    // rxe check_op_valid: the QP's access flags gate the opcode (class C, invalid request).
    let mut p = Pair::new(MTU1024, 10, 20);
    let qpn = p.nodes[B].qp.qpn;
    let attr = rnic_core::engine::qp::QpAttr {
        mask: rnic_core::qp_state::QpAttrMask::ACCESS_FLAGS,
        access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        ..Default::default()
    };
    p.fab.engine(B).modify_qp(0, qpn, &attr).unwrap();
    p.post_send(A, fadd(&p, 1, R, T, 1)).unwrap();
    p.run();
    assert_eq!(Pair::wcs(&p.nodes[A].scq)[0].status, WcStatus::RemInvReqErr);
    assert_eq!(p.u64_at(B, T), 0);
}

#[test]
fn atomic_result_buffer_must_be_8_bytes_and_writable() {
    let mut p = Pair::new(MTU1024, 10, 20);
    let b = &p.nodes[B];
    let (va, rkey) = (b.iova + T as u64, b.keys.rkey);
    let wr = SendWr::fetch_add(1, p.sge(A, R as u64, 4), va, rkey, 1);
    let err = p.post_send(A, wr).unwrap_err();
    assert_eq!(err.to_string(), "ATOMIC_FETCH_AND_ADD: the result SGEs must add up to exactly 8 bytes");
    let ro = p.register(A, PdId(1), R, 8, 0x7000_0000, AccessFlags::empty());
    let wr =
        SendWr::compare_swap(2, rnic_core::wr::Sge { addr: 0x7000_0000, length: 8, lkey: ro.lkey }, va, rkey, 0, 1);
    assert!(p.post_send(A, wr).unwrap_err().to_string().contains("needs LOCAL_WRITE"));
}

#[test]
fn atomic_write_and_flush_as_rxe_answers_them() {
    let mut p = Pair::new(MTU1024, 10, 20);
    // rxe check_qp_attr_access: FLUSH needs the QP's FLUSH_GLOBAL right too.
    let qpn = p.nodes[B].qp.qpn;
    let attr = rnic_core::engine::qp::QpAttr {
        mask: rnic_core::qp_state::QpAttrMask::ACCESS_FLAGS,
        access: AccessFlags::REMOTE_WRITE | AccessFlags::FLUSH_GLOBAL,
        ..Default::default()
    };
    p.fab.engine(B).modify_qp(0, qpn, &attr).unwrap();
    let b = &p.nodes[B];
    let (va, rkey) = (b.iova + T as u64, b.keys.rkey);
    p.trace();
    let v: u64 = 0x0102_0304_0506_0708;
    p.post_send(A, SendWr::new(1, SendOp::AtomicWrite { remote_addr: va, rkey, value: v }, vec![])).unwrap();
    let flush = SendOp::Flush { remote_addr: va, rkey, len: 64, placement: FLUSH_GLOBAL, whole_region: false };
    p.post_send(A, SendWr::new(2, flush, vec![])).unwrap();
    let whole = SendOp::Flush { remote_addr: 0, rkey, len: 0, placement: FLUSH_GLOBAL, whole_region: true };
    p.post_send(A, SendWr::new(3, whole, vec![])).unwrap();
    p.run();
    let wcs = Pair::wcs(&p.nodes[A].scq);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        [
            (1, WcStatus::Success, WcOpcode::AtomicWrite),
            (2, WcStatus::Success, WcOpcode::Flush),
            (3, WcStatus::Success, WcOpcode::Flush)
        ]
    );
    assert_eq!(p.u64_at(B, T), v);
    // Each answered by a zero-length READ RESPONSE ONLY (rxe send_read_response_ack).
    let responses: Vec<RoceRepr> = p
        .traced()
        .into_iter()
        .filter(|(ip, _)| *ip == p.nodes[B].ip)
        .map(|(_, r)| r)
        .filter(|r| r.bth.opcode == Opcode::RC_RDMA_READ_RESPONSE_ONLY)
        .collect();
    assert_eq!(responses.len(), 3);
    assert!(responses.iter().all(|r| r.payload_len == 0));
}

#[test]
fn misaligned_atomic_write_and_unpermitted_flush_are_refused() {
    let mut p = Pair::new(MTU1024, 10, 20);
    let b = &p.nodes[B];
    let (va, rkey) = (b.iova + T as u64, b.keys.rkey);
    p.post_send(A, SendWr::new(1, SendOp::AtomicWrite { remote_addr: va + 4, rkey, value: 1 }, vec![])).unwrap();
    p.run();
    assert_eq!(Pair::wcs(&p.nodes[A].scq)[0].status, WcStatus::RemInvReqErr);
    assert_eq!(p.u64_at(B, T), 0);

    // The QP grants no FLUSH right (the harness QPs have write/read/atomic only).
    let mut p = Pair::new(MTU1024, 10, 20);
    let b = &p.nodes[B];
    let (va, rkey) = (b.iova + T as u64, b.keys.rkey);
    let flush = SendOp::Flush { remote_addr: va, rkey, len: 8, placement: FLUSH_PERSISTENT, whole_region: false };
    p.post_send(A, SendWr::new(1, flush, vec![])).unwrap();
    p.run();
    assert_eq!(Pair::wcs(&p.nodes[A].scq)[0].status, WcStatus::RemInvReqErr);
}
