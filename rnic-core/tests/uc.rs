//! UC over the deterministic fabric: SEND / SEND_WITH_IMM / WRITE / WRITE_WITH_IMM at several
//! sizes and MTUs with no acknowledgement on the wire, and the loss rules: a lost packet
//! drops its whole message silently, the responder resynchronises on the next FIRST or
//! ONLY, the receive WQE of a dropped SEND is reused, WRITE data already placed stays.
#![allow(clippy::cast_possible_truncation)]
mod common;

use common::*;
use rnic_core::engine::qp::PostError;
use rnic_core::fabric::{Verdict, Wire};
use rnic_core::qp_state::{ModifyError, QpAttrMask, QpState, QpType};
use rnic_core::wr::WcFlags;
use rnic_core::wr::{RecvWr, SendOp, WcOpcode, WcStatus};
use rnic_wire::Opcode;
use std::sync::atomic::Ordering;

const MTUS: [(u32, usize); 3] = [(1, 256), (3, 1024), (5, 4096)];

fn sizes(mtu: usize) -> Vec<usize> {
    vec![0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu, 3 * mtu + 7, 40_000]
}

/// Every packet on the wire came from A, carried a UC opcode and no AckReq: nothing is
/// acknowledged on UC.
fn only_uc_requests(p: &Pair) -> usize {
    let t = p.traced();
    for (src, r) in &t {
        assert_eq!(*src, p.nodes[A].ip, "B sent something on a UC connection: {r:?}");
        assert_eq!(r.bth.opcode.0 & 0xe0, 0x20, "not a UC opcode: {r:?}");
        assert!(!r.bth.ack_req, "AckReq set on UC: {r:?}");
    }
    t.len()
}

#[test]
fn send_and_send_with_imm_every_size_every_mtu() {
    for (code, mtu) in MTUS {
        for len in sizes(mtu) {
            let mut p = Pair::uc(code, 0xff_fff0, 77);
            p.trace();
            let data = pattern(len as u64 + 1, len);
            p.fill(A, 0, &data);
            p.post_recv(B, RecvWr { wr_id: 9, sg_list: vec![p.sge(B, 8192, len as u32 + 3)] }).unwrap();
            let imm = len % 2 == 1;
            let op = if imm { SendOp::SendWithImm { imm: 0x1234_5678 } } else { SendOp::Send };
            p.post_send(A, signaled(1, op, vec![p.sge(A, 0, len as u32)])).unwrap();
            p.run();
            let s = Pair::wcs(&p.nodes[A].scq);
            assert_eq!(
                (s.len(), s[0].status, s[0].opcode, s[0].byte_len),
                (1, WcStatus::Success, WcOpcode::Send, len as u32)
            );
            let r = Pair::wcs(&p.nodes[B].rcq);
            assert_eq!(r.len(), 1, "mtu {mtu} len {len}");
            assert_eq!(
                (r[0].wr_id, r[0].status, r[0].opcode, r[0].byte_len),
                (9, WcStatus::Success, WcOpcode::Recv, len as u32)
            );
            assert_eq!(r[0].wc_flags.contains(WcFlags::WITH_IMM), imm);
            if imm {
                assert_eq!(r[0].imm_data, 0x1234_5678);
            }
            assert_eq!(r[0].src_qp, p.nodes[A].qp.qpn.value());
            assert_eq!(p.read(B, 8192, len), data, "mtu {mtu} len {len}");
            assert_eq!(only_uc_requests(&p), len.div_ceil(mtu).max(1));
        }
    }
}

/// Work requests a poster queued between rounds (`Engine::queue_send`, the direct path
/// of a device) leave as UC packets when the round transmits them, and arrive. (The RC
/// requester's retire path once sent them with RC opcodes, which the UC responder drops.)
#[test]
fn sends_queued_between_rounds_go_out_as_uc() {
    let mut p = Pair::uc(3, 10, 20);
    p.trace();
    let data = pattern(5, 3000);
    p.fill(A, 0, &data);
    for i in 0..2u32 {
        p.post_recv(B, RecvWr { wr_id: 9 + u64::from(i), sg_list: vec![p.sge(B, 8192 * u64::from(i + 1), 3000)] })
            .unwrap();
        p.queue_send(A, signaled(1 + u64::from(i), SendOp::Send, vec![p.sge(A, 0, 3000)])).unwrap();
    }
    p.transmit_queued(A);
    p.run();
    let r = Pair::wcs(&p.nodes[B].rcq);
    assert_eq!(
        r.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect::<Vec<_>>(),
        [(9, WcStatus::Success, 3000), (10, WcStatus::Success, 3000)]
    );
    assert_eq!((p.read(B, 8192, 3000), p.read(B, 16384, 3000)), (data.clone(), data));
    assert_eq!(only_uc_requests(&p), 6);
    assert_eq!(Pair::wcs(&p.nodes[A].scq).len(), 2);
}

#[test]
fn write_and_write_with_imm_every_size_every_mtu() {
    for (code, mtu) in MTUS {
        for len in sizes(mtu) {
            let mut p = Pair::uc(code, 5, 0xff_ffff);
            p.trace();
            let data = pattern(len as u64 + 7, len);
            p.fill(A, 0, &data);
            let (remote, rkey) = (p.nodes[B].iova + 100_000, p.nodes[B].keys.rkey);
            p.post_send(A, signaled(1, SendOp::RdmaWrite { remote_addr: remote, rkey }, vec![p.sge(A, 0, len as u32)]))
                .unwrap();
            p.run();
            assert_eq!(p.read(B, 100_000, len), data);
            assert!(Pair::wcs(&p.nodes[B].rcq).is_empty(), "a plain WRITE consumes nothing at the responder");
            let s = Pair::wcs(&p.nodes[A].scq);
            assert_eq!((s[0].status, s[0].opcode, s[0].byte_len), (WcStatus::Success, WcOpcode::RdmaWrite, len as u32));

            let data2 = pattern(len as u64 + 8, len);
            p.fill(A, 0, &data2);
            p.post_recv(B, RecvWr { wr_id: 3, sg_list: vec![] }).unwrap();
            let op = SendOp::RdmaWriteWithImm { remote_addr: remote + 50_000, rkey, imm: 0xabcd };
            p.post_send(A, signaled(2, op, vec![p.sge(A, 0, len as u32)])).unwrap();
            p.run();
            assert_eq!(p.read(B, 150_000, len), data2);
            let r = Pair::wcs(&p.nodes[B].rcq);
            assert_eq!(r.len(), 1);
            assert_eq!(
                (r[0].wr_id, r[0].opcode, r[0].byte_len, r[0].imm_data),
                (3, WcOpcode::RecvRdmaWithImm, len as u32, 0xabcd)
            );
            assert!(r[0].wc_flags.contains(WcFlags::WITH_IMM));
            assert_eq!(only_uc_requests(&p), 2 * len.div_ceil(mtu).max(1));
        }
    }
}

#[test]
fn read_is_refused_on_uc() {
    let mut p = Pair::uc(3, 0, 0);
    let read = SendOp::RdmaRead { remote_addr: p.nodes[B].iova, rkey: p.nodes[B].keys.rkey };
    let err = p.post_send(A, signaled(1, read, vec![p.sge(A, 0, 8)])).unwrap_err();
    assert_eq!(err, PostError::NotSupported { op: "RDMA_READ", qp_type: QpType::Uc });
    assert!(err.to_string().contains("RDMA_READ is not supported on a UC QP"), "{err}");
    assert_eq!(p.nodes[A].qp.sq_outstanding.load(Ordering::Relaxed), 0);
}

#[test]
fn uc_modify_takes_the_uc_masks() {
    let mut p = Pair::uc(3, 0, 0);
    // A fresh UC QP may not be given RC-only attributes (IBA modify-QP table, UC column).
    let qpn = p.nodes[A].qp.qpn;
    let reset = rnic_core::engine::qp::QpAttr { mask: QpAttrMask::STATE, state: QpState::Reset, ..Default::default() };
    p.fab.engine(A).modify_qp(0, qpn, &reset).unwrap();
    let [init, mut rtr, _] = uc_connect_attrs(&p.nodes[B], 3, 0, 0);
    p.fab.engine(A).modify_qp(0, qpn, &init).unwrap();
    rtr.mask |= QpAttrMask::MAX_DEST_RD_ATOMIC;
    let err = p.fab.engine(A).modify_qp(0, qpn, &rtr).unwrap_err();
    assert!(
        matches!(err, rnic_core::engine::EngineError::Modify(ModifyError::AttributesNotAllowed { qp_type: QpType::Uc, extra, .. }) if extra == QpAttrMask::MAX_DEST_RD_ATOMIC),
        "{err}"
    );
    assert!(err.to_string().contains("UC QP INIT->RTR does not accept MAX_DEST_RD_ATOMIC"), "{err}");
}

/// Drops the packets whose PSN is in `psns` (once each).
fn drop_psns(psns: Vec<u32>) -> impl FnMut(u64, &Wire) -> Verdict + Send {
    let mut left = psns;
    move |_, w: &Wire| {
        let (_, psn) = opcode_psn(&w.data);
        match left.iter().position(|&p| p == psn) {
            Some(i) => {
                left.remove(i);
                Verdict::Drop
            }
            None => Verdict::Pass,
        }
    }
}

#[test]
fn lost_middle_packet_loses_that_send_and_the_receive_wqe_is_reused() {
    for (code, mtu) in MTUS {
        let mut p = Pair::uc(code, 100, 0);
        // Message 1: PSNs 100..=102 (FIRST, MIDDLE, LAST); lose the MIDDLE.
        p.fab.add_rule(drop_psns(vec![101]));
        p.trace();
        p.post_recv(B, RecvWr { wr_id: 1, sg_list: vec![p.sge(B, 0, 3 * mtu as u32)] }).unwrap();
        p.post_recv(B, RecvWr { wr_id: 2, sg_list: vec![p.sge(B, 1 << 20, 3 * mtu as u32)] }).unwrap();
        let m1 = pattern(1, 3 * mtu);
        let m2 = pattern(2, 2 * mtu + 5);
        p.fill(A, 0, &m1);
        p.fill(A, 1 << 20, &m2);
        p.post_send(A, signaled(11, SendOp::Send, vec![p.sge(A, 0, m1.len() as u32)])).unwrap();
        p.post_send(A, signaled(12, SendOp::SendWithImm { imm: 7 }, vec![p.sge(A, 1 << 20, m2.len() as u32)])).unwrap();
        p.run();
        // The requester knows nothing: both complete as soon as they were sent.
        let s = Pair::wcs(&p.nodes[A].scq);
        assert_eq!(
            s.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            [(11, WcStatus::Success), (12, WcStatus::Success)]
        );
        // The responder: message 1 vanished, message 2 landed in the first receive WQE.
        let r = Pair::wcs(&p.nodes[B].rcq);
        assert_eq!(r.len(), 1, "mtu {mtu}: {r:?}");
        assert_eq!((r[0].wr_id, r[0].byte_len, r[0].imm_data), (1, m2.len() as u32, 7));
        assert_eq!(p.read(B, 0, m2.len()), m2);
        assert_eq!(p.nodes[B].qp.rq_outstanding.load(Ordering::Relaxed), 1, "WQE 2 is still posted");
        let c = p.fab.engine(B).counters().clone();
        assert_eq!(c.uc_dropped_pkts.load(Ordering::Relaxed), 1, "the LAST after the lost MIDDLE");
        assert_eq!(c.uc_abandoned_msgs.load(Ordering::Relaxed), 1);
        assert_eq!(p.nodes[B].qp.state(), QpState::Rts);
        // A later message takes WQE 2.
        p.post_send(A, signaled(13, SendOp::Send, vec![p.sge(A, 0, 10)])).unwrap();
        p.run();
        let r = Pair::wcs(&p.nodes[B].rcq);
        assert_eq!((r[0].wr_id, r[0].byte_len), (2, 10));
        assert_eq!(p.read(B, 1 << 20, 10), m1[..10]);
    }
}

#[test]
fn lost_write_packet_keeps_what_was_placed_and_the_next_message_arrives() {
    let (code, mtu) = (1, 256);
    let mut p = Pair::uc(code, 0, 0);
    // WRITE of 4 packets at PSNs 0..=3: lose PSN 2.
    p.fab.add_rule(drop_psns(vec![2]));
    let data = pattern(3, 4 * mtu);
    p.fill(A, 0, &data);
    let (remote, rkey) = (p.nodes[B].iova + 65536, p.nodes[B].keys.rkey);
    p.post_send(A, signaled(1, SendOp::RdmaWrite { remote_addr: remote, rkey }, vec![p.sge(A, 0, data.len() as u32)]))
        .unwrap();
    p.post_recv(B, RecvWr { wr_id: 5, sg_list: vec![] }).unwrap();
    let op = SendOp::RdmaWriteWithImm { remote_addr: remote + 8192, rkey, imm: 99 };
    p.post_send(A, signaled(2, op, vec![p.sge(A, 0, 600)])).unwrap();
    p.run();
    let got = p.read(B, 65536, 4 * mtu);
    // IBA: data of a dropped WRITE already placed stays placed; nothing after the loss is.
    assert_eq!(got[..2 * mtu], data[..2 * mtu]);
    assert!(got[2 * mtu..].iter().all(|&b| b == 0), "bytes after the lost packet were written");
    let r = Pair::wcs(&p.nodes[B].rcq);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].wr_id, r[0].opcode, r[0].imm_data), (5, WcOpcode::RecvRdmaWithImm, 99));
    assert_eq!(p.read(B, 65536 + 8192, 600), data[..600]);
    assert_eq!(p.fab.engine(B).counters().uc_dropped_pkts.load(Ordering::Relaxed), 1);
}

#[test]
fn resync_on_only_after_a_lost_last_and_late_packets_are_dropped() {
    let (code, mtu) = (1, 256);
    let mut p = Pair::uc(code, 50, 0);
    // Message 1 (PSN 50, 51): delay its LAST past message 2 (an ONLY at PSN 52); message 3
    // (FIRST 53, LAST 54) follows. The late LAST must not complete anything.
    let mut first = true;
    p.fab.add_rule(move |_, w: &Wire| {
        let (op, psn) = opcode_psn(&w.data);
        if psn == 51 && first {
            first = false;
            assert_eq!(Opcode(op), Opcode::UC_SEND_LAST);
            Verdict::Delay(10_000)
        } else {
            Verdict::Pass
        }
    });
    for (i, off) in [(1u64, 0u64), (2, 1 << 20), (3, 2 << 20)] {
        p.post_recv(B, RecvWr { wr_id: i, sg_list: vec![p.sge(B, off, 2 * mtu as u32)] }).unwrap();
    }
    let m1 = pattern(11, 2 * mtu);
    let m2 = pattern(12, 100);
    let m3 = pattern(13, mtu + 1);
    p.fill(A, 0, &m1);
    p.fill(A, 8192, &m2);
    p.fill(A, 16384, &m3);
    p.post_send(A, signaled(1, SendOp::Send, vec![p.sge(A, 0, m1.len() as u32)])).unwrap();
    p.post_send(A, signaled(2, SendOp::Send, vec![p.sge(A, 8192, m2.len() as u32)])).unwrap();
    p.post_send(A, signaled(3, SendOp::Send, vec![p.sge(A, 16384, m3.len() as u32)])).unwrap();
    p.run();
    let r = Pair::wcs(&p.nodes[B].rcq);
    // Message 1 was abandoned when message 2's ONLY arrived (resync); WQE 1 took message 2,
    // WQE 2 message 3; the late LAST of message 1 was dropped.
    assert_eq!(r.iter().map(|w| (w.wr_id, w.byte_len)).collect::<Vec<_>>(), [(1, 100), (2, m3.len() as u32)]);
    assert_eq!(p.read(B, 0, 100), m2);
    assert_eq!(p.read(B, 1 << 20, m3.len()), m3);
    let c = p.fab.engine(B).counters().clone();
    assert_eq!(c.uc_abandoned_msgs.load(Ordering::Relaxed), 1);
    assert_eq!(c.uc_dropped_pkts.load(Ordering::Relaxed), 1, "the late LAST");
}

#[test]
fn resync_on_first_after_a_lost_first() {
    let (code, mtu) = (1, 256);
    let mut p = Pair::uc(code, 0xff_fffe, 0);
    // Message 1: FIRST 0xfffffe (lost), MIDDLE 0xffffff, LAST 0 (PSN wrap); message 2 FIRST 1.
    p.fab.add_rule(drop_psns(vec![0xff_fffe]));
    p.post_recv(B, RecvWr { wr_id: 1, sg_list: vec![p.sge(B, 0, 4 * mtu as u32)] }).unwrap();
    let m1 = pattern(21, 3 * mtu);
    let m2 = pattern(22, 2 * mtu);
    p.fill(A, 0, &m1);
    p.fill(A, 8192, &m2);
    p.post_send(A, signaled(1, SendOp::Send, vec![p.sge(A, 0, m1.len() as u32)])).unwrap();
    p.post_send(A, signaled(2, SendOp::Send, vec![p.sge(A, 8192, m2.len() as u32)])).unwrap();
    p.run();
    let r = Pair::wcs(&p.nodes[B].rcq);
    assert_eq!(r.iter().map(|w| (w.wr_id, w.byte_len)).collect::<Vec<_>>(), [(1, m2.len() as u32)]);
    assert_eq!(p.read(B, 0, m2.len()), m2);
    // MIDDLE and LAST of message 1 dropped; nothing half-received to abandon.
    let c = p.fab.engine(B).counters().clone();
    assert_eq!(c.uc_dropped_pkts.load(Ordering::Relaxed), 2);
    assert_eq!(c.uc_abandoned_msgs.load(Ordering::Relaxed), 0);
}

#[test]
fn no_receive_wqe_or_a_short_one_drops_the_message_silently() {
    let mut p = Pair::uc(3, 0, 0);
    // No receive WQE: dropped (UC has no RNR NAK), the QP stays usable.
    p.post_send(A, signaled(1, SendOp::Send, vec![p.sge(A, 0, 100)])).unwrap();
    p.run();
    assert!(Pair::wcs(&p.nodes[B].rcq).is_empty());
    assert_eq!(p.nodes[B].qp.state(), QpState::Rts);
    // A receive buffer too small: dropped, the WQE stays for the next message that fits.
    p.post_recv(B, RecvWr { wr_id: 2, sg_list: vec![p.sge(B, 0, 50)] }).unwrap();
    p.post_send(A, signaled(2, SendOp::Send, vec![p.sge(A, 0, 2000)])).unwrap();
    p.post_send(A, signaled(3, SendOp::Send, vec![p.sge(A, 0, 50)])).unwrap();
    // A WRITE to a bad R_Key: dropped too, silently.
    let bad = SendOp::RdmaWrite { remote_addr: p.nodes[B].iova, rkey: p.nodes[B].keys.rkey ^ 0x55 };
    p.post_send(A, signaled(4, bad, vec![p.sge(A, 0, 10)])).unwrap();
    p.run();
    let s = Pair::wcs(&p.nodes[A].scq);
    assert!(s.iter().all(|w| w.status == WcStatus::Success) && s.len() == 4);
    let r = Pair::wcs(&p.nodes[B].rcq);
    assert_eq!(r.iter().map(|w| (w.wr_id, w.byte_len)).collect::<Vec<_>>(), [(2, 50)]);
    // 1 (no WQE) + 2 packets of the 2000-byte SEND (FIRST refused, LAST dropped) + the WRITE.
    assert_eq!(p.fab.engine(B).counters().uc_dropped_pkts.load(Ordering::Relaxed), 4);
    assert_eq!(p.nodes[B].qp.state(), QpState::Rts);
    assert_eq!(p.nodes[A].qp.state(), QpState::Rts);
}

/// RC and UC share one responder pipeline, but only RC acknowledges: a UC SEND whose
/// AckReq bit a peer set anyway is delivered, and nothing at all goes back.
#[test]
fn an_ack_req_on_uc_draws_no_acknowledgement() {
    let mut p = Pair::uc(3, 0x42, 0x100);
    p.trace();
    p.post_recv(B, RecvWr { wr_id: 5, sg_list: vec![p.sge(B, 0, 64)] }).unwrap();
    let send = rnic_wire::roce::RoceRepr {
        bth: rnic_wire::bth::BthRepr {
            opcode: Opcode::UC_SEND_ONLY,
            se: false,
            migreq: false,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: p.nodes[B].qp.qpn,
            ack_req: true,
            psn: rnic_wire::Psn::new(0x42),
        },
        ext: rnic_wire::roce::ExtHeaders::default(),
        payload_len: 16,
    };
    let mut pkt = vec![0; send.buffer_len()];
    send.emit(&mut pkt, &[0xab; 16]).unwrap();
    let (src, dst) = (p.nodes[A].ip, p.nodes[B].ip);
    p.fab.inject(Wire { src, dst, src_port: rnic_wire::ROCEV2_UDP_PORT, data: pkt, ce: false });
    p.run();
    let r = Pair::wcs(&p.nodes[B].rcq);
    assert_eq!(r.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect::<Vec<_>>(), [(5, WcStatus::Success, 16)]);
    assert_eq!(p.read(B, 0, 16), [0xab; 16]);
    let from_b: Vec<_> = p.traced().into_iter().filter(|(ip, _)| *ip == dst).collect();
    assert!(from_b.is_empty(), "B answered a UC packet: {from_b:?}");
}
