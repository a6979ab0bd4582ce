//! RC against a model, under random faults (proptest; the case count comes from
//! `PROPTEST_CASES`, default 48 here so CI stays quick).
//!
//! A random sequence of work requests (SEND, SEND with immediate, WRITE, WRITE with
//! immediate, READ; sizes from 0 to a few MTUs; one to three SGEs) runs on the fabric
//! under a random fault schedule (loss up to 30%, duplication, reordering, corruption).
//! The WRs are posted either as `post_send` does (sent at once) or as a device's direct
//! path does (`queue_send`, sent at the fabric's next step), chosen per case.
//!
//! 1. Within the retry limits (at most retry_cnt harmful faults, so no retry can run
//!    out): every WR completes exactly once, in order, successfully; every receive too;
//!    and both nodes' memory equals the model's.
//! 2. With unbounded loss (everything lost from some packet on): a prefix of the WRs
//!    succeeds (and its effects are in memory), the first unfinished one fails with
//!    RETRY_EXC_ERR, every later one is flushed, each exactly once, and the requester's QP
//!    is in the error state while the responder's is not.
#![allow(clippy::cast_possible_truncation)]

mod common;

use common::net::{FabricNet, Net, Setup, Q};
use common::pattern;
use proptest::prelude::*;
use rnic_core::faults::{Rng, Verdict, Wire};
use rnic_core::qp_state::QpState;
use rnic_core::wr::{RecvWr, SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus};

const A: usize = 0;
const B: usize = 1;
/// Each WR owns a slot of this size on both nodes: its source, target and receive buffer.
const SLOT: usize = 16 * 1024;
const MS: u64 = 1_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
}

#[derive(Debug, Clone)]
struct Op {
    kind: Kind,
    len: usize,
    sges: usize,
}

fn op() -> impl Strategy<Value = Op> {
    (
        prop_oneof![Just(Kind::Send), Just(Kind::SendImm), Just(Kind::Write), Just(Kind::WriteImm), Just(Kind::Read)],
        prop_oneof![0..=8usize, 9..=1100usize, 1100..=4200usize],
        1..=3usize,
    )
        .prop_map(|(kind, len, sges)| Op { kind, len, sges })
}

#[derive(Debug, Clone, Copy)]
struct Schedule {
    seed: u64,
    loss: f64,
    dup: f64,
    reorder: f64,
    corrupt: f64,
}

fn schedule() -> impl Strategy<Value = Schedule> {
    (any::<u64>(), 0.0..0.3f64, 0.0..0.1f64, 0.0..0.1f64, 0.0..0.05f64)
        .prop_map(|(seed, loss, dup, reorder, corrupt)| Schedule { seed, loss, dup, reorder, corrupt })
}

/// A random fault rule that stops doing harm after `budget` drops, corruptions and
/// reorderings (duplicates are harmless and unlimited).
fn bounded(s: Schedule, budget: u32) -> impl FnMut(u64, &Wire) -> Verdict + Send {
    let mut rng = Rng::new(s.seed);
    let mut harm = 0;
    move |_, _pkt| {
        let x = rng.next_u64();
        let roll = (x >> 11) as f64 / (1u64 << 53) as f64;
        if harm < budget {
            if roll < s.loss {
                harm += 1;
                return Verdict::Drop;
            }
            if roll < s.loss + s.corrupt {
                harm += 1;
                // A bit of the PSN field: inside what the ICRC covers.
                return Verdict::Corrupt { bit: 9 * 8 + (x as usize % 24) };
            }
            if roll < s.loss + s.corrupt + s.reorder {
                harm += 1;
                return Verdict::Reorder { max_hold: 3 * MS };
            }
        }
        if roll > 1.0 - s.dup {
            return Verdict::Duplicate { after: 5_000 + x % 50_000 };
        }
        Verdict::Pass
    }
}

/// Builds the WR for op `i` and applies it to the model's memories.
fn post(net: &mut dyn Net, i: usize, op: &Op, model: &mut [Vec<u8>; 2]) {
    let base = i * SLOT;
    // Split [base, base+len) of A into `sges` SGEs.
    let cuts: Vec<usize> = (0..=op.sges).map(|k| op.len * k / op.sges).collect();
    let sg: Vec<Sge> = cuts.windows(2).map(|w| net.sge(A, (base + w[0]) as u64, (w[1] - w[0]) as u32)).collect();
    let (rkey, b_va) = (net.keys(B).rkey, net.iova(B) + base as u64);
    let src_a = model[A][base..base + op.len].to_vec();
    let wr_op = match op.kind {
        Kind::Send | Kind::SendImm => {
            // The receive buffer is B's slot, in one SGE.
            net.post_recv(B, RecvWr { wr_id: 1000 + i as u64, sg_list: vec![net.sge(B, base as u64, SLOT as u32)] });
            model[B][base..base + op.len].copy_from_slice(&src_a);
            if op.kind == Kind::Send {
                SendOp::Send
            } else {
                SendOp::SendWithImm { imm: i as u32 }
            }
        }
        Kind::Write | Kind::WriteImm => {
            model[B][base..base + op.len].copy_from_slice(&src_a);
            if op.kind == Kind::Write {
                SendOp::RdmaWrite { remote_addr: b_va, rkey }
            } else {
                net.post_recv(B, RecvWr { wr_id: 1000 + i as u64, sg_list: vec![] });
                SendOp::RdmaWriteWithImm { remote_addr: b_va, rkey, imm: i as u32 }
            }
        }
        Kind::Read => {
            let src_b = model[B][base..base + op.len].to_vec();
            model[A][base..base + op.len].copy_from_slice(&src_b);
            SendOp::RdmaRead { remote_addr: b_va, rkey }
        }
    };
    let flags = SendFlags::SIGNALED;
    net.post_send(A, SendWr { wr_id: i as u64, op: wr_op, sg_list: sg, flags, ud: None });
}

/// `queued`: post as a device's direct path does (queued, sent at the next step).
fn fresh(ops: &[Op], mtu_code: u32, seed: u64, queued: bool) -> (FabricNet, [Vec<u8>; 2]) {
    let net = FabricNet::new(Setup { mtu_code, queued_posts: queued, ..Setup::default() }, seed);
    let span = ops.len() * SLOT;
    let model = [pattern(seed ^ 0xA, span), pattern(seed ^ 0xB, span)];
    net.write(A, 0, &model[A]);
    net.write(B, 0, &model[B]);
    (net, model)
}

fn receives(ops: &[Op]) -> usize {
    ops.iter().filter(|o| matches!(o.kind, Kind::Send | Kind::SendImm | Kind::WriteImm)).count()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48)
    ))]

    #[test]
    fn within_the_retry_limits_everything_completes_once_in_order(
        ops in prop::collection::vec(op(), 1..12),
        mtu_code in prop_oneof![Just(1u32), Just(3u32)],
        s in schedule(),
        queued in any::<bool>(),
    ) {
        let (mut net, mut model) = fresh(&ops, mtu_code, s.seed, queued);
        // retry_cnt is 7: seven harmful faults can cost at most seven retries in a row.
        net.fab.add_rule(bounded(s, 7));
        for (i, op) in ops.iter().enumerate() {
            post(&mut net, i, op, &mut model);
        }
        let wcs = net.wait(A, Q::Send, ops.len(), 10_000 * MS);
        let got: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
        let want: Vec<(u64, WcStatus)> = (0..ops.len() as u64).map(|i| (i, WcStatus::Success)).collect();
        prop_assert_eq!(got, want);
        for (w, op) in wcs.iter().zip(&ops) {
            let opcode = match op.kind {
                Kind::Send | Kind::SendImm => WcOpcode::Send,
                Kind::Write | Kind::WriteImm => WcOpcode::RdmaWrite,
                Kind::Read => WcOpcode::RdmaRead,
            };
            prop_assert_eq!((w.opcode, w.byte_len as usize), (opcode, op.len));
        }
        let recv = net.wait(B, Q::Recv, receives(&ops), 10 * MS);
        let recv_ids: Vec<u64> = recv.iter().map(|w| w.wr_id).collect();
        let want_ids: Vec<u64> = ops.iter().enumerate()
            .filter(|(_, o)| matches!(o.kind, Kind::Send | Kind::SendImm | Kind::WriteImm))
            .map(|(i, _)| 1000 + i as u64).collect();
        prop_assert_eq!(recv_ids, want_ids, "receives complete once, in order");
        prop_assert!(recv.iter().all(|w| w.status == WcStatus::Success));
        // Nothing more arrives later (no completion twice).
        net.idle(50 * MS);
        prop_assert!(net.wait(A, Q::Send, 1, 0).is_empty() && net.wait(B, Q::Recv, 1, 0).is_empty());
        let span = ops.len() * SLOT;
        prop_assert!(net.read(A, 0, span) == model[A], "requester memory differs from the model");
        prop_assert!(net.read(B, 0, span) == model[B], "responder memory differs from the model");
        prop_assert_eq!((net.state(A), net.state(B)), (QpState::Rts, QpState::Rts));
    }

    #[test]
    fn with_unbounded_loss_the_first_unfinished_wr_fails_and_the_rest_flush(
        ops in prop::collection::vec(op(), 1..10),
        mtu_code in prop_oneof![Just(1u32), Just(3u32)],
        cut in 0u64..40,
        seed in any::<u64>(),
        queued in any::<bool>(),
    ) {
        let (mut net, mut model) = fresh(&ops, mtu_code, seed, queued);
        let before = model.clone();
        // Everything on the wire is lost from the `cut`th packet on, both directions.
        let mut seen = 0u64;
        net.fab.add_rule(move |_, _: &Wire| {
            seen += 1;
            if seen > cut { Verdict::Drop } else { Verdict::Pass }
        });
        let mut models = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            post(&mut net, i, op, &mut model);
            models.push(model.clone());
        }
        let wcs = net.wait(A, Q::Send, ops.len(), 100_000 * MS);
        prop_assert_eq!(wcs.len(), ops.len(), "every WR completes exactly once");
        let ok = wcs.iter().take_while(|w| w.status == WcStatus::Success).count();
        for (i, w) in wcs.iter().enumerate() {
            prop_assert_eq!(w.wr_id, i as u64, "in order");
            let want = match i.cmp(&ok) {
                std::cmp::Ordering::Less => WcStatus::Success,
                std::cmp::Ordering::Equal => WcStatus::RetryExcErr,
                std::cmp::Ordering::Greater => WcStatus::WrFlushErr,
            };
            prop_assert_eq!(w.status, want, "WR {}", i);
        }
        prop_assert!(ok < ops.len() || cut >= 1, "with nothing delivered nothing can succeed");
        if ok < ops.len() {
            prop_assert_eq!(net.state(A), QpState::Err);
            prop_assert_eq!(net.counter(A, "retry_exceeded_err"), 1);
            prop_assert!(net.counter(A, "completer_retry_err") >= 7);
        }
        prop_assert_ne!(net.state(B), QpState::Err, "the responder never learns of it");
        // What completed successfully is in memory: A's READ targets of the successful
        // prefix, and B's targets of the successful prefix, equal the model at that point.
        let done = if ok == 0 { &before } else { &models[ok - 1] };
        for (i, op) in ops.iter().enumerate().take(ok) {
            let r = i * SLOT..i * SLOT + op.len;
            if op.kind == Kind::Read {
                prop_assert!(net.read(A, r.start, op.len) == done[A][r.clone()], "READ {} landed", i);
            } else {
                prop_assert!(net.read(B, r.start, op.len) == done[B][r.clone()], "WR {} landed", i);
            }
        }
    }
}
