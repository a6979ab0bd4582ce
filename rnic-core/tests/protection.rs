#![allow(clippy::cast_possible_truncation)]
//! Memory protection at the responder, end to end over the deterministic fabric.
//!
//! Every refused RDMA WRITE or READ is a responder class C error (IBA 9.9, rxe `check_rkey`
//! then `do_class_ac_error`), which must give:
//! one NAK "remote access error" carrying the offending request's PSN, a RemAccessErr
//! completion at the requester, both QPs in the error state, everything queued behind it
//! flushed in order, and not one byte changed at either node: each node's whole memory
//! block (the target region and the guard bytes on both sides of it) is compared with
//! what it must hold.
//!
//! Each scenario runs the same story on a fresh pair:
//!
//! ```text
//! B: post recv 101, 102
//! A: post 1 SEND (good)   2 the operation under test   3 WRITE (good)   4 SEND (good)
//! ```
//!
//! so the NAK also has to acknowledge the SEND before it (MSN 1) and nothing queued behind
//! the refused request may execute. Positive controls at exactly the same boundaries keep
//! the refusals from passing vacuously.

mod common;
use common::*;
use rnic_core::engine::qp::QpAttr;
use rnic_core::mr::{AccessFlags, MrKeys, PdId};
use rnic_core::qp_state::{QpAttrMask, QpState};
use rnic_core::wr::SendFlags;
use rnic_core::wr::{RecvWr, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion};
use rnic_wire::aeth::{NakCode, Syndrome};
use rnic_wire::Psn;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

const MTU_CODE: u32 = 1;
const MTU: usize = 256;
/// A's first PSN: the multi-packet requests wrap the 24-bit PSN space.
const PSN_A: u32 = 0xFF_FFFE;
const PSN_B: u32 = 0x1234;

/// Lengths under test: one packet, and several with a short last one.
const SINGLE: usize = 100;
const MULTI: usize = 3 * MTU + 5;

/// The target region: `REGION_LEN` bytes at `REGION_OFF` in B's block, guard bytes on
/// both sides (the rest of the block, reachable only through B's whole-block key).
const REGION_OFF: usize = 1 << 20;
const REGION_LEN: usize = 64 << 10;
/// Its I/O virtual address, unrelated to the block's, so va arithmetic is the region's.
const REGION_IOVA: u64 = 0x0000_7f00_0000_0000;
/// A region whose last byte is the last byte of the 64-bit address space.
const HIGH_IOVA: u64 = u64::MAX - REGION_LEN as u64 + 1;

/// A's buffers: the WRITE source, the READ destination, the SENDs' source.
const SRC_OFF: usize = 0;
const DST_OFF: usize = 2 << 20;
const SEND_OFF: usize = 0x3000;
/// B's buffers: the two receive buffers and where the trailing WRITE lands.
const RECV_OFF: usize = 3 << 20;
const RECV2_OFF: usize = RECV_OFF + 4096;
const LATER_OFF: usize = RECV_OFF + 8192;
const FIRST_SEND: usize = 16;
const LATER_WRITE: usize = 32;
const LAST_SEND: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Write,
    Read,
}

/// Every (operation, length) the refusals are tried with.
const SHAPES: [(Op, usize); 4] = [(Op::Write, SINGLE), (Op::Write, MULTI), (Op::Read, SINGLE), (Op::Read, MULTI)];

/// The contents both blocks start with (computed once: 4 MiB of xorshift is slow unoptimised).
fn patterns() -> &'static (Vec<u8>, Vec<u8>) {
    static P: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    P.get_or_init(|| (pattern(0xA, MEM), pattern(0xB, MEM)))
}

/// A region of B's block at `REGION_OFF`.
#[derive(Debug, Clone, Copy)]
struct Target {
    keys: MrKeys,
    iova: u64,
}

impl Target {
    fn new(p: &Pair, pd: PdId, iova: u64, access: AccessFlags) -> Target {
        Target { keys: p.register(B, pd, REGION_OFF, REGION_LEN, iova, access), iova }
    }

    /// The address `back` bytes before the region's end.
    fn end_minus(&self, back: usize) -> u64 {
        self.iova.wrapping_add((REGION_LEN - back) as u64)
    }

    /// The block offset of `va`, which must lie in the region.
    fn block_off(&self, va: u64) -> usize {
        REGION_OFF + usize::try_from(va - self.iova).unwrap()
    }
}

/// A fresh pair at `MTU`.
fn pair() -> Pair {
    Pair::new(MTU_CODE, PSN_A, PSN_B)
}

fn op_wr(p: &Pair, wr_id: u64, op: Op, va: u64, rkey: u32, len: usize) -> SendWr {
    let (send_op, off) = match op {
        Op::Write => (SendOp::RdmaWrite { remote_addr: va, rkey }, SRC_OFF),
        Op::Read => (SendOp::RdmaRead { remote_addr: va, rkey }, DST_OFF),
    };
    let sg = if len == 0 { vec![] } else { vec![p.sge(A, off as u64, len as u32)] };
    signaled(wr_id, send_op, sg)
}

/// What one run of the story left behind.
struct Outcome {
    send_wcs: Vec<WorkCompletion>,
    recv_wcs_b: Vec<WorkCompletion>,
    /// Every NAK (not RNR) node B sent: (PSN, NAK code, MSN).
    naks: Vec<(Psn, NakCode, u32)>,
    mem_a: Vec<u8>,
    mem_b: Vec<u8>,
    state_a: QpState,
    state_b: QpState,
    nak_sent_b: u64,
    nak_rcvd_a: u64,
    /// The asynchronous events the responder's engine raised.
    events_b: Vec<rnic_core::engine::AsyncEvent>,
}

/// Fills both blocks, runs the story with `op` as request 2, and collects what happened.
fn story(p: &mut Pair, op: Op, va: u64, rkey: u32, len: usize) -> Outcome {
    let (pa, pb) = patterns();
    p.fill(A, 0, pa);
    p.fill(B, 0, pb);
    p.trace();
    let whole_b = p.nodes[B].keys.rkey;
    let later = p.nodes[B].iova + LATER_OFF as u64;
    p.post_recv(B, RecvWr { wr_id: 101, sg_list: vec![p.sge(B, RECV_OFF as u64, 64)] }).unwrap();
    p.post_recv(B, RecvWr { wr_id: 102, sg_list: vec![p.sge(B, RECV2_OFF as u64, 64)] }).unwrap();
    p.post_send(A, signaled(1, SendOp::Send, vec![p.sge(A, SEND_OFF as u64, FIRST_SEND as u32)])).unwrap();
    p.post_send(A, op_wr(p, 2, op, va, rkey, len)).unwrap();
    let write = SendOp::RdmaWrite { remote_addr: later, rkey: whole_b };
    p.post_send(A, signaled(3, write, vec![p.sge(A, SEND_OFF as u64, LATER_WRITE as u32)])).unwrap();
    p.post_send(A, signaled(4, SendOp::Send, vec![p.sge(A, SEND_OFF as u64, LAST_SEND as u32)])).unwrap();
    p.run();
    let naks = p
        .traced()
        .into_iter()
        .filter(|(src, _)| *src == p.nodes[B].ip)
        .filter_map(|(_, r)| match r.ext.aeth.map(|a| (a.syndrome, a.msn)) {
            Some((Syndrome::Nak(code), msn)) => Some((r.bth.psn, code, msn)),
            _ => None,
        })
        .collect();
    Outcome {
        send_wcs: Pair::wcs(&p.nodes[A].scq),
        recv_wcs_b: Pair::wcs(&p.nodes[B].rcq),
        naks,
        mem_a: p.snapshot(A),
        mem_b: p.snapshot(B),
        state_a: p.nodes[A].qp.state(),
        state_b: p.nodes[B].qp.state(),
        nak_sent_b: p.fab.engine(B).counters().send_nak_err.load(Ordering::Relaxed),
        nak_rcvd_a: p.fab.engine(A).counters().rcvd_nak_err.load(Ordering::Relaxed),
        events_b: std::iter::from_fn(|| p.fab.engine(B).poll_event()).collect(),
    }
}

fn assert_same(what: &str, got: &[u8], want: &[u8]) {
    if let Some(at) = first_diff(got, want) {
        panic!("{what}: byte {at:#x} is {:#04x}, must be {:#04x}", got[at], want[at]);
    }
}

/// B's block after the story's first SEND and nothing else.
fn b_after_first_send() -> Vec<u8> {
    let (pa, pb) = patterns();
    let mut want = pb.clone();
    want[RECV_OFF..RECV_OFF + FIRST_SEND].copy_from_slice(&pa[SEND_OFF..SEND_OFF + FIRST_SEND]);
    want
}

/// Runs the story with a request the responder must refuse with `code`, and checks
/// every consequence.
fn refused(case: &str, mut p: Pair, op: Op, va: u64, rkey: u32, len: usize, code: NakCode) {
    let case = format!("{case} ({op:?} of {len} bytes at {va:#x}, rkey {rkey:#x})");
    let status = match code {
        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
        other => unreachable!("{other:?}"),
    };
    let o = story(&mut p, op, va, rkey, len);

    // The requester: the SEND before completes, the request fails, the rest is flushed in
    // order (IBA 10.3.1), and the QP is in the error state.
    let got: Vec<_> = o.send_wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        [(1, WcStatus::Success), (2, status), (3, WcStatus::WrFlushErr), (4, WcStatus::WrFlushErr)],
        "{case}: requester completions"
    );
    let want_opcode = if op == Op::Write { WcOpcode::RdmaWrite } else { WcOpcode::RdmaRead };
    assert_eq!(o.send_wcs[1].opcode, want_opcode, "{case}");
    assert_eq!(o.state_a, QpState::Err, "{case}: requester QP state");
    assert_eq!(o.nak_rcvd_a, 1, "{case}: NAKs counted by the requester");

    // The responder: exactly one NAK, for the offending request's PSN; it acknowledges the
    // SEND before it (MSN 1). The responder QP is in the error state (rxe goto_error), so
    // the receive WQE left is flushed and nothing after the bad request executed.
    let bad_psn = Psn::new(PSN_A).add(1);
    assert_eq!(o.naks, [(bad_psn, code, 1)], "{case}: NAKs sent by the responder");
    assert_eq!(o.nak_sent_b, 1, "{case}: NAKs counted by the responder");
    assert_eq!(o.state_b, QpState::Err, "{case}: responder QP state");
    // The responder's application is told why its QP failed, as verbs tell it
    // (IBV_EVENT_QP_ACCESS_ERR / IBV_EVENT_QP_REQ_ERR, IBA 11.6.3.1), once.
    let qpn = p.nodes[B].qp.qpn.value();
    let want = match code {
        NakCode::RemoteAccessError => rnic_core::engine::AsyncEvent::QpAccessErr { qpn },
        _ => rnic_core::engine::AsyncEvent::QpReqErr { qpn },
    };
    assert_eq!(o.events_b, [want], "{case}: responder async events");
    let got: Vec<_> = o.recv_wcs_b.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect();
    assert_eq!(
        got,
        [(101, WcStatus::Success, FIRST_SEND as u32), (102, WcStatus::WrFlushErr, 0)],
        "{case}: responder completions"
    );

    // Not one byte written: B's block holds the first SEND and nothing else (the target
    // region, its guard bytes and the trailing WRITE's target included), and A's block is
    // untouched (a refused READ scatters nothing into the local buffer).
    assert_same(&format!("{case}: responder memory"), &o.mem_b, &b_after_first_send());
    assert_same(&format!("{case}: requester memory"), &o.mem_a, &patterns().0);

    // A WR posted to the QP in the error state completes at once with a flush error and
    // puts nothing on the wire.
    let sent = p.traced().len();
    p.post_send(A, signaled(5, SendOp::Send, vec![p.sge(A, SEND_OFF as u64, 4)])).unwrap();
    let wc = Pair::wcs(&p.nodes[A].scq);
    assert_eq!(wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(5, WcStatus::WrFlushErr)], "{case}");
    p.run();
    assert_eq!(p.traced().len(), sent, "{case}: a QP in the error state transmitted");
    assert_eq!(p.nodes[A].qp.sq_outstanding.load(Ordering::Relaxed), 0, "{case}: send slots leaked");
    assert_eq!(p.nodes[B].qp.rq_outstanding.load(Ordering::Relaxed), 0, "{case}: receive slots leaked");
}

/// Runs the story with a request that must succeed and checks the bytes it moved,
/// including that nothing around them changed.
fn accepted(case: &str, mut p: Pair, op: Op, va: u64, rkey: u32, len: usize, block_off: usize) {
    let case = format!("{case} ({op:?} of {len} bytes at {va:#x})");
    let o = story(&mut p, op, va, rkey, len);
    let got: Vec<_> = o.send_wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, (1..=4).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>(), "{case}");
    assert_eq!(o.send_wcs[1].byte_len, len as u32, "{case}");
    assert!(o.naks.is_empty(), "{case}: NAKs {:?}", o.naks);
    assert_eq!((o.state_a, o.state_b), (QpState::Rts, QpState::Rts), "{case}");
    assert_eq!((o.nak_sent_b, o.nak_rcvd_a), (0, 0), "{case}");

    let (pa, pb) = patterns();
    let mut want_b = b_after_first_send();
    want_b[LATER_OFF..LATER_OFF + LATER_WRITE].copy_from_slice(&pa[SEND_OFF..SEND_OFF + LATER_WRITE]);
    want_b[RECV2_OFF..RECV2_OFF + LAST_SEND].copy_from_slice(&pa[SEND_OFF..SEND_OFF + LAST_SEND]);
    let mut want_a = pa.clone();
    match op {
        Op::Write => want_b[block_off..block_off + len].copy_from_slice(&pa[SRC_OFF..SRC_OFF + len]),
        Op::Read => want_a[DST_OFF..DST_OFF + len].copy_from_slice(&pb[block_off..block_off + len]),
    }
    assert_same(&format!("{case}: responder memory"), &o.mem_b, &want_b);
    assert_same(&format!("{case}: requester memory"), &o.mem_a, &want_a);
}

/// The access right each operation needs in the region and in the QP.
fn needed(op: Op) -> AccessFlags {
    match op {
        Op::Write => AccessFlags::REMOTE_WRITE,
        Op::Read => AccessFlags::REMOTE_READ,
    }
}

#[test]
fn wrong_rkey_is_refused() {
    for (op, len) in SHAPES {
        let p = pair();
        let t = Target::new(&p, PdId(1), REGION_IOVA, AccessFlags::REGISTRABLE);
        let va = t.end_minus(len + 100);
        // A key naming nothing: slot 0 (never used), an index past the table, and the
        // target's own index with another generation byte.
        for rkey in [0, 0xdead_be5a, t.keys.rkey ^ 0x01] {
            let p = pair();
            let _ = Target::new(&p, PdId(1), REGION_IOVA, AccessFlags::REGISTRABLE);
            refused("unknown rkey", p, op, va, rkey, len, NakCode::RemoteAccessError);
        }
        // The control: the target's own key at the same address.
        accepted("right rkey", p, op, va, t.keys.rkey, len, t.block_off(va));
    }
}

#[test]
fn stale_rkey_after_deregister_is_refused() {
    for (op, len) in SHAPES {
        let p = pair();
        let old = Target::new(&p, PdId(1), REGION_IOVA, AccessFlags::REGISTRABLE);
        p.nodes[B].mtpt.deregister(old.keys.lkey).unwrap();
        // The same bytes registered again reuse the slot under a new key: the old key must
        // stay dead even though its slot names a valid region covering the address.
        let new = Target::new(&p, PdId(1), REGION_IOVA, AccessFlags::REGISTRABLE);
        assert_eq!(new.keys.rkey >> 8, old.keys.rkey >> 8, "the slot is reused");
        assert_ne!(new.keys.rkey, old.keys.rkey);
        let va = old.end_minus(len);
        refused("stale rkey", p, op, va, old.keys.rkey, len, NakCode::RemoteAccessError);

        let p = pair();
        let t = Target::new(&p, PdId(1), REGION_IOVA, AccessFlags::REGISTRABLE);
        p.nodes[B].mtpt.invalidate(t.keys.rkey).unwrap();
        refused("invalidated rkey", p, op, va, t.keys.rkey, len, NakCode::RemoteAccessError);
    }
}

#[test]
fn rkey_of_another_pd_is_refused() {
    for (op, len) in SHAPES {
        let p = pair();
        let t = Target::new(&p, PdId(2), REGION_IOVA, AccessFlags::REGISTRABLE);
        refused("region of PD 2", p, op, t.end_minus(len), t.keys.rkey, len, NakCode::RemoteAccessError);
    }
}

#[test]
fn region_without_the_access_right_is_refused() {
    for (op, len) in SHAPES {
        // Every right but the one needed (REMOTE_WRITE needs LOCAL_WRITE to register).
        let p = pair();
        let t = Target::new(&p, PdId(1), REGION_IOVA, AccessFlags::REGISTRABLE.difference(needed(op)));
        let va = t.end_minus(len);
        refused("region lacks the right", p, op, va, t.keys.rkey, len, NakCode::RemoteAccessError);

        // The control: only the right needed (plus LOCAL_WRITE, which REMOTE_WRITE requires).
        let p = pair();
        let t = Target::new(&p, PdId(1), REGION_IOVA, needed(op) | AccessFlags::LOCAL_WRITE);
        accepted("region has just the right", p, op, va, t.keys.rkey, len, t.block_off(va));
    }
}

#[test]
fn access_outside_the_region_is_refused() {
    for (op, len) in SHAPES {
        let mk = || {
            let p = pair();
            let t = Target::new(&p, PdId(1), REGION_IOVA, AccessFlags::REGISTRABLE);
            (p, t)
        };
        let (p, t) = mk();
        refused("one byte past the end", p, op, t.end_minus(len - 1), t.keys.rkey, len, NakCode::RemoteAccessError);
        let (p, t) = mk();
        refused("starting at the end", p, op, t.end_minus(0), t.keys.rkey, len, NakCode::RemoteAccessError);
        let (p, t) = mk();
        refused("one byte below the start", p, op, t.iova - 1, t.keys.rkey, len, NakCode::RemoteAccessError);
        let (p, t) = mk();
        refused("longer than the region", p, op, t.iova, t.keys.rkey, REGION_LEN + 1, NakCode::RemoteAccessError);

        // The controls: ending exactly at the region's last byte, and starting at its first.
        let (p, t) = mk();
        let va = t.end_minus(len);
        accepted("ending at the last byte", p, op, va, t.keys.rkey, len, t.block_off(va));
        let (p, t) = mk();
        accepted("starting at the first byte", p, op, t.iova, t.keys.rkey, len, t.block_off(t.iova));
    }
}

#[test]
fn access_wrapping_the_address_space_is_refused() {
    for (op, len) in SHAPES {
        // The region's last byte is the last byte of the address space, so a check done in
        // wrapping u64 arithmetic (va + len wraps to a small number) would let these in.
        let mk = || {
            let p = pair();
            let t = Target::new(&p, PdId(1), HIGH_IOVA, AccessFlags::REGISTRABLE);
            (p, t)
        };
        let (p, t) = mk();
        refused(
            "ends one byte past 2^64",
            p,
            op,
            u64::MAX - len as u64 + 2,
            t.keys.rkey,
            len,
            NakCode::RemoteAccessError,
        );
        let (p, t) = mk();
        refused("starts at the last address", p, op, u64::MAX, t.keys.rkey, len, NakCode::RemoteAccessError);
        // The same wrap against an ordinary region.
        let p = pair();
        let t = Target::new(&p, PdId(1), REGION_IOVA, AccessFlags::REGISTRABLE);
        refused(
            "wraps to inside an ordinary region",
            p,
            op,
            u64::MAX - 2,
            t.keys.rkey,
            len,
            NakCode::RemoteAccessError,
        );

        // The control: ending exactly at 2^64 is allowed.
        let (p, t) = mk();
        let va = u64::MAX - len as u64 + 1;
        accepted("ends exactly at 2^64", p, op, va, t.keys.rkey, len, t.block_off(va));
    }
}

#[test]
fn qp_without_the_remote_access_flag_refuses_with_invalid_request() {
    for (op, len) in SHAPES {
        // B's QP is told (RTS->RTS, ACCESS_FLAGS) to allow everything but what `op` needs.
        // The region would allow it; the QP does not. rxe check_op_valid (for RC) answers
        // RESPST_ERR_UNSUPPORTED_OPCODE, which is NAK invalid request and
        // IB_WC_REM_INV_REQ_ERR, and so does the engine.
        let mut p = pair();
        let t = Target::new(&p, PdId(1), REGION_IOVA, AccessFlags::REGISTRABLE);
        let attr = QpAttr {
            mask: QpAttrMask::ACCESS_FLAGS,
            access: (AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC)
                .difference(needed(op)),
            ..QpAttr::default()
        };
        let qpn = p.nodes[B].qp.qpn;
        p.fab.engine(B).modify_qp(0, qpn, &attr).unwrap();
        assert_eq!(p.fab.engine(B).query_qp(qpn).unwrap().access, attr.access);
        let va = t.end_minus(len);
        refused("QP lacks the flag", p, op, va, t.keys.rkey, len, NakCode::InvalidRequest);
    }
}

#[test]
fn zero_length_rdma_is_not_rkey_checked() {
    // IBA C9-88: the responder does not check the R_Key or the VA of a zero-length RDMA
    // READ or WRITE (rxe check_rkey skips them too). A bogus key and an address that
    // could not be in any region both succeed, and nothing moves.
    for op in [Op::Write, Op::Read] {
        for (rkey, va) in [(0xdead_be5a, u64::MAX), (0, 0), (0x0000_0100, 0x1234)] {
            let p = pair();
            accepted("zero-length, bogus rkey", p, op, va, rkey, 0, 0);
        }
    }
}

#[test]
fn refusal_of_a_write_in_the_middle_of_others_leaves_the_rest_untouched() {
    // A burst of valid multi-packet WRITEs into the target region with one bad WRITE in
    // the middle: everything before it lands, nothing from it or after it does.
    let mut p = pair();
    let t = Target::new(&p, PdId(1), REGION_IOVA, AccessFlags::REGISTRABLE);
    let (pa, pb) = patterns();
    p.fill(A, 0, pa);
    p.fill(B, 0, pb);
    p.trace();
    let mut want = pb.clone();
    for i in 0..6u64 {
        let va = t.iova + i * MULTI as u64;
        // WRITE 3 is REGION_LEN bytes from inside the region: it ends past the region's end.
        let len = if i == 3 { REGION_LEN } else { MULTI };
        let sg = vec![p.sge(A, (i as usize * MULTI) as u64, len as u32)];
        p.post_send(A, signaled(i, SendOp::RdmaWrite { remote_addr: va, rkey: t.keys.rkey }, sg)).unwrap();
        if i < 3 {
            let off = t.block_off(va);
            want[off..off + MULTI].copy_from_slice(&pa[i as usize * MULTI..(i as usize + 1) * MULTI]);
        }
    }
    p.run();
    let got: Vec<_> = Pair::wcs(&p.nodes[A].scq).iter().map(|w| (w.wr_id, w.status)).collect();
    let mut expect: Vec<_> = (0..3).map(|i| (i, WcStatus::Success)).collect();
    expect.extend([(3, WcStatus::RemAccessErr), (4, WcStatus::WrFlushErr), (5, WcStatus::WrFlushErr)]);
    assert_eq!(got, expect);
    // WRITEs 0..3 take 4 packets each, so WRITE 3 starts 12 PSNs after A's first.
    let naks: Vec<_> = p
        .traced()
        .into_iter()
        .filter_map(|(_, r)| match r.ext.aeth.map(|a| a.syndrome) {
            Some(Syndrome::Nak(code)) => Some((r.bth.psn, code)),
            _ => None,
        })
        .collect();
    assert_eq!(naks, [(Psn::new(PSN_A).add(12), NakCode::RemoteAccessError)]);
    assert_same("burst: responder memory", &p.snapshot(B), &want);
    assert_eq!((p.nodes[A].qp.state(), p.nodes[B].qp.state()), (QpState::Err, QpState::Err));
}

#[test]
fn unsignaled_refusal_still_completes_and_reads_before_it_land() {
    // Error completions are generated whatever the signaling (verbs; rxe do_complete posts
    // every WQE whose status is not success), and flushes too. A READ answered before the
    // refused request delivers its bytes; the NAK then retires it and fails the next.
    let mut p = pair();
    let t = Target::new(&p, PdId(1), REGION_IOVA, AccessFlags::REGISTRABLE);
    let (pa, pb) = patterns();
    p.fill(A, 0, pa);
    p.fill(B, 0, pb);
    p.trace();
    p.post_send(A, op_wr(&p, 1, Op::Read, t.iova, t.keys.rkey, MULTI)).unwrap();
    let mut bad = op_wr(&p, 2, Op::Write, t.end_minus(SINGLE - 1), t.keys.rkey, SINGLE);
    bad.flags.set(SendFlags::SIGNALED, false);
    p.post_send(A, bad).unwrap();
    let mut send = signaled(3, SendOp::Send, vec![p.sge(A, SEND_OFF as u64, 8)]);
    send.flags.set(SendFlags::SIGNALED, false);
    p.post_send(A, send).unwrap();
    p.run();
    let got: Vec<_> = Pair::wcs(&p.nodes[A].scq).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, [(1, WcStatus::Success), (2, WcStatus::RemAccessErr), (3, WcStatus::WrFlushErr)]);
    let mut want_a = pa.clone();
    want_a[DST_OFF..DST_OFF + MULTI].copy_from_slice(&pb[REGION_OFF..REGION_OFF + MULTI]);
    assert_same("requester memory", &p.snapshot(A), &want_a);
    assert_same("responder memory", &p.snapshot(B), pb);
    // The READ took 4 PSNs, so the WRITE is at PSN_A + 4; the READ counted as a message.
    let naks: Vec<_> = p
        .traced()
        .into_iter()
        .filter_map(|(_, r)| match r.ext.aeth.map(|a| (a.syndrome, a.msn)) {
            Some((Syndrome::Nak(code), msn)) => Some((r.bth.psn, code, msn)),
            _ => None,
        })
        .collect();
    assert_eq!(naks, [(Psn::new(PSN_A).add(4), NakCode::RemoteAccessError, 1)]);
}
