#![allow(clippy::cast_possible_truncation)]
//! Every RC operation across the deterministic fabric, at every path MTU, with sizes
//! around the MTU boundaries and up to 1 MiB, several SGEs and inline data: every byte
//! is verified at the other side, and the completions say what verbs says they say.

mod common;
use common::*;
use rnic_core::wr::WcFlags;
use rnic_core::wr::{RecvWr, SendFlags, SendOp, SendWr, WcOpcode, WcStatus};

const MTUS: [(u32, usize); 5] = [(1, 256), (2, 512), (3, 1024), (4, 2048), (5, 4096)];

fn sizes(mtu: usize) -> Vec<usize> {
    vec![0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu + 7, 1 << 20]
}

#[test]
fn send_recv_every_size_every_mtu() {
    for (code, mtu) in MTUS {
        for (i, len) in sizes(mtu).into_iter().enumerate() {
            let mut p = Pair::new(code, 0xFFFFF0, 0x100);
            let data = pattern(i as u64 + mtu as u64, len);
            p.fill(A, 0, &data);
            // Receive into two SGEs split at an odd offset.
            let split = (len / 3) as u32;
            p.post_recv(
                B,
                RecvWr { wr_id: 7, sg_list: vec![p.sge(B, 4096, split), p.sge(B, 2 << 20, (len as u32 - split) + 5)] },
            )
            .unwrap();
            p.post_send(A, signaled(1, SendOp::Send, vec![p.sge(A, 0, len as u32)])).unwrap();
            p.run();
            let s = Pair::wcs(&p.nodes[A].scq);
            assert_eq!(s.len(), 1, "mtu {mtu} len {len}");
            assert_eq!((s[0].status, s[0].opcode, s[0].wr_id), (WcStatus::Success, WcOpcode::Send, 1));
            let r = Pair::wcs(&p.nodes[B].rcq);
            assert_eq!(r.len(), 1);
            assert_eq!(
                (r[0].status, r[0].opcode, r[0].byte_len, r[0].wr_id),
                (WcStatus::Success, WcOpcode::Recv, len as u32, 7)
            );
            assert!(!r[0].wc_flags.contains(WcFlags::WITH_IMM));
            let mut got = p.read(B, 4096, split as usize);
            got.extend(p.read(B, 2 << 20, len - split as usize));
            assert!(got == data, "mtu {mtu} len {len}: bytes differ");
        }
    }
}

#[test]
fn send_with_imm_and_inline() {
    let mut p = Pair::new(3, 5, 9);
    p.fill(A, 100, b"inline bytes!");
    p.post_recv(B, RecvWr { wr_id: 1, sg_list: vec![p.sge(B, 0, 64)] }).unwrap();
    let wr = SendWr {
        wr_id: 2,
        op: SendOp::SendWithImm { imm: 0xdead_beef },
        sg_list: vec![p.sge(A, 100, 6), p.sge(A, 106, 7)],
        flags: SendFlags::SIGNALED | SendFlags::INLINE | SendFlags::SOLICITED,
        ud: None,
    };
    p.post_send(A, wr).unwrap();
    // Inline data was copied at post time: changing the source now must not matter.
    p.fill(A, 100, b"XXXXXXXXXXXXX");
    p.run();
    let r = Pair::wcs(&p.nodes[B].rcq);
    assert_eq!(r[0].imm_data, 0xdead_beef);
    assert!(r[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(p.read(B, 0, 13), b"inline bytes!");
}

#[test]
fn write_and_write_with_imm_every_size() {
    for (code, mtu) in MTUS {
        for (i, len) in sizes(mtu).into_iter().enumerate() {
            let mut p = Pair::new(code, 0x7FFFFE, 0xFFFFFF);
            let data = pattern(99 + i as u64, len);
            p.fill(A, 8, &data);
            let remote = p.nodes[B].iova + 1000;
            let rkey = p.nodes[B].keys.rkey;
            // Three SGEs at the sender.
            let a = (len / 2) as u32;
            let b = (len as u32 - a) / 2;
            let c = len as u32 - a - b;
            let sg = vec![p.sge(A, 8, a), p.sge(A, 8 + a as u64, b), p.sge(A, 8 + (a + b) as u64, c)];
            p.post_send(A, signaled(3, SendOp::RdmaWrite { remote_addr: remote, rkey }, sg)).unwrap();
            p.run();
            assert_eq!(Pair::wcs(&p.nodes[A].scq)[0].status, WcStatus::Success);
            assert!(Pair::wcs(&p.nodes[B].rcq).is_empty(), "plain WRITE creates no responder completion");
            assert!(p.read(B, 1000, len) == data, "WRITE mtu {mtu} len {len}");

            // WRITE with immediate consumes a receive WQE.
            p.post_recv(B, RecvWr { wr_id: 77, sg_list: vec![] }).unwrap();
            let data2 = pattern(7 + i as u64, len);
            p.fill(A, 8, &data2);
            p.post_send(
                A,
                signaled(
                    4,
                    SendOp::RdmaWriteWithImm { remote_addr: remote, rkey, imm: 42 },
                    vec![p.sge(A, 8, len as u32)],
                ),
            )
            .unwrap();
            p.run();
            let r = Pair::wcs(&p.nodes[B].rcq);
            assert_eq!(r.len(), 1);
            assert_eq!(
                (r[0].opcode, r[0].imm_data, r[0].byte_len, r[0].wr_id),
                (WcOpcode::RecvRdmaWithImm, 42, len as u32, 77)
            );
            assert!(p.read(B, 1000, len) == data2, "WRITE_WITH_IMM mtu {mtu} len {len}");
        }
    }
}

#[test]
fn read_every_size_every_mtu() {
    for (code, mtu) in MTUS {
        for (i, len) in sizes(mtu).into_iter().enumerate() {
            let mut p = Pair::new(code, 0xFFFFFE, 3);
            let data = pattern(500 + i as u64, len);
            p.fill(B, 12345, &data);
            let remote = p.nodes[B].iova + 12345;
            let rkey = p.nodes[B].keys.rkey;
            let half = (len / 2) as u32;
            let sg = vec![p.sge(A, 0, half), p.sge(A, 3 << 20, len as u32 - half)];
            p.post_send(A, signaled(5, SendOp::RdmaRead { remote_addr: remote, rkey }, sg)).unwrap();
            p.run();
            let s = Pair::wcs(&p.nodes[A].scq);
            assert_eq!(s.len(), 1);
            assert_eq!((s[0].status, s[0].opcode, s[0].byte_len), (WcStatus::Success, WcOpcode::RdmaRead, len as u32));
            let mut got = p.read(A, 0, half as usize);
            got.extend(p.read(A, 3 << 20, len - half as usize));
            assert!(got == data, "READ mtu {mtu} len {len}");
        }
    }
}

#[test]
fn many_messages_in_order_and_unsignaled() {
    let mut p = Pair::new(1, 0xFFFF00, 0xFFFF80);
    for i in 0..200u64 {
        p.post_recv(B, RecvWr { wr_id: i, sg_list: vec![p.sge(B, i * 1024, 1024)] }).unwrap();
    }
    for i in 0..200u64 {
        let len = (i * 7 % 1000 + 1) as u32;
        p.fill(A, (i * 1024) as usize, &pattern(i, len as usize));
        let mut wr = signaled(i, SendOp::Send, vec![p.sge(A, i * 1024, len)]);
        wr.flags.set(SendFlags::SIGNALED, i % 10 == 9);
        p.post_send(A, wr).unwrap();
    }
    p.run();
    let s = Pair::wcs(&p.nodes[A].scq);
    assert_eq!(s.iter().map(|w| w.wr_id).collect::<Vec<_>>(), (0..200).filter(|i| i % 10 == 9).collect::<Vec<_>>());
    let r = Pair::wcs(&p.nodes[B].rcq);
    assert_eq!(r.len(), 200);
    for (i, wc) in r.iter().enumerate() {
        assert_eq!(wc.wr_id, i as u64);
        let len = (i as u64 * 7 % 1000 + 1) as usize;
        assert_eq!(wc.byte_len as usize, len);
        assert_eq!(p.read(B, i * 1024, len), pattern(i as u64, len));
    }
    assert_eq!(p.nodes[A].qp.sq_outstanding.load(std::sync::atomic::Ordering::Relaxed), 0);
}

/// Inline SEND, SEND with immediate, WRITE and WRITE with immediate at every MTU, with
/// sizes up to the QP's inline limit (256): the bytes are copied when posted, so the
/// source is overwritten before the fabric runs and must not matter.
#[test]
fn inline_every_opcode_every_mtu() {
    for (code, mtu) in MTUS {
        for len in [0usize, 1, 255, 256] {
            let mut p = Pair::new(code, 0xFFFFFF, 0);
            let data = pattern(len as u64 + mtu as u64, len);
            let rkey = p.nodes[B].keys.rkey;
            let remote = p.nodes[B].iova + 9000;
            let ops = [
                SendOp::Send,
                SendOp::SendWithImm { imm: 1 },
                SendOp::RdmaWrite { remote_addr: remote, rkey },
                SendOp::RdmaWriteWithImm { remote_addr: remote, rkey, imm: 2 },
            ];
            for (i, op) in ops.into_iter().enumerate() {
                p.fill(A, 0, &data);
                if !matches!(op, SendOp::RdmaWrite { .. }) {
                    p.post_recv(B, RecvWr { wr_id: i as u64, sg_list: vec![p.sge(B, 0, 256)] }).unwrap();
                }
                let mut wr = signaled(i as u64, op, vec![p.sge(A, 0, len as u32)]);
                wr.flags.set(SendFlags::INLINE, true);
                p.post_send(A, wr).unwrap();
                p.fill(A, 0, &vec![0xEE; len]);
                p.run();
                assert_eq!(Pair::wcs(&p.nodes[A].scq)[0].status, WcStatus::Success, "{op:?} {len} at {mtu}");
                let at = if matches!(op, SendOp::Send | SendOp::SendWithImm { .. }) { 0 } else { 9000 };
                assert!(p.read(B, at, len) == data, "{op:?} {len} at {mtu}");
                let r = Pair::wcs(&p.nodes[B].rcq);
                assert_eq!(r.len(), usize::from(!matches!(op, SendOp::RdmaWrite { .. })));
            }
        }
    }
}

/// AckReq only where an acknowledgement is wanted: a message with another queued behind
/// it goes without, signaled or not (the later ACK covers it, cumulatively); the last one
/// queued asks. Every WRITE lands, the one signaled completes (with that last ACK), and
/// the send queue (four deep) drains: its slots come back, so four more posts fit.
#[test]
fn messages_inside_a_burst_skip_ack_req() {
    let cap = rnic_core::engine::qp::QpCap { max_send_wr: 4, ..Default::default() };
    let mut p = Pair::with_cap(3, 0x10, 0x20, cap);
    p.trace();
    let (remote, rkey) = (p.nodes[B].iova, p.nodes[B].keys.rkey);
    let write = |i: u64| SendOp::RdmaWrite { remote_addr: remote + 1024 * i, rkey };
    for i in 0..4u64 {
        let data = pattern(i, 100);
        p.fill(A, 1024 * i as usize, &data);
        let mut wr = signaled(i + 1, write(i), vec![p.sge(A, 1024 * i, 100)]);
        wr.flags.set(SendFlags::SIGNALED, i == 1);
        p.queue_send(A, wr).unwrap();
    }
    p.transmit_queued(A);
    p.run();
    let sent: Vec<bool> =
        p.traced().iter().filter(|(src, _)| *src == p.nodes[A].ip).map(|(_, r)| r.bth.ack_req).collect();
    assert_eq!(sent, [false, false, false, true]);
    let acks = p.traced().iter().filter(|(src, _)| *src == p.nodes[B].ip).count();
    assert_eq!(acks, 1, "one ACK, for the last");
    for i in 0..4usize {
        assert_eq!(p.read(B, 1024 * i, 100), pattern(i as u64, 100));
    }
    let s = Pair::wcs(&p.nodes[A].scq);
    assert_eq!(s.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(2, WcStatus::Success)]);
    for i in 0..4u64 {
        p.post_send(A, signaled(10 + i, write(i), vec![p.sge(A, 1024 * i, 100)])).unwrap();
    }
    p.run();
    assert_eq!(Pair::wcs(&p.nodes[A].scq).len(), 4);
}

/// A burst sent again after its ACK was lost asks for an ACK on every message: the
/// retransmission may be all that still moves, so none of it is left to a later one.
#[test]
fn a_resent_burst_asks_on_every_message() {
    let mut p = Pair::new(3, 0x10, 0x20);
    p.trace();
    let b_ip = p.nodes[B].ip;
    p.fab
        .add_rule(rnic_core::faults::Fault::drop().from(b_ip).opcode(rnic_wire::opcode::Opcode::RC_ACKNOWLEDGE).nth(1));
    let (remote, rkey) = (p.nodes[B].iova, p.nodes[B].keys.rkey);
    for i in 0..3u64 {
        let mut wr = signaled(i + 1, SendOp::RdmaWrite { remote_addr: remote, rkey }, vec![p.sge(A, 0, 100)]);
        wr.flags.set(SendFlags::SIGNALED, i == 2);
        p.queue_send(A, wr).unwrap();
    }
    p.transmit_queued(A);
    p.run();
    let sent: Vec<bool> =
        p.traced().iter().filter(|(src, _)| *src == p.nodes[A].ip).map(|(_, r)| r.bth.ack_req).collect();
    assert_eq!(sent, [false, false, true, true, true, true], "sent once, then again after the timeout");
    let s = Pair::wcs(&p.nodes[A].scq);
    assert_eq!(s.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(3, WcStatus::Success)]);
}

/// The responder's ACK covers what arrived after the packet that asked, in the same
/// round: WRITE 1 asks (it is sent alone, the last queued), WRITE 2 does not (another is
/// queued behind it), WRITE 3 is lost on its first way. The first ACK acknowledges
/// WRITE 2, so only WRITE 3 is sent again.
#[test]
fn a_held_ack_moves_on_to_later_packets_of_its_round() {
    let psn_a = 0x10;
    let mut p = Pair::new(3, psn_a, 0x20);
    p.trace();
    let a_ip = p.nodes[A].ip;
    p.fab.add_rule(rnic_core::faults::Fault::drop().from(a_ip).psn_range(psn_a + 2, 1).nth(1));
    let (remote, rkey) = (p.nodes[B].iova, p.nodes[B].keys.rkey);
    for i in 0..3u64 {
        let mut wr = signaled(i + 1, SendOp::RdmaWrite { remote_addr: remote, rkey }, vec![p.sge(A, 0, 100)]);
        wr.flags.set(SendFlags::SIGNALED, i != 1);
        p.queue_send(A, wr).unwrap();
        if i == 0 {
            p.transmit_queued(A);
        }
    }
    p.transmit_queued(A);
    p.run();
    let t = p.traced();
    let asked: Vec<bool> = t.iter().filter(|(src, _)| *src == a_ip).map(|(_, r)| r.bth.ack_req).collect();
    assert_eq!(asked[..3], [true, false, true]);
    let acks: Vec<u32> = t.iter().filter(|(src, _)| *src == p.nodes[B].ip).map(|(_, r)| r.bth.psn.value()).collect();
    assert_eq!(acks[0], psn_a + 1, "the first ACK covers WRITE 2, which did not ask");
    let from_a: Vec<u32> = t.iter().filter(|(src, _)| *src == a_ip).map(|(_, r)| r.bth.psn.value()).collect();
    assert_eq!(from_a, [psn_a, psn_a + 1, psn_a + 2, psn_a + 2], "only WRITE 3 again");
    let s = Pair::wcs(&p.nodes[A].scq);
    assert_eq!(
        s.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (3, WcStatus::Success)]
    );
}
