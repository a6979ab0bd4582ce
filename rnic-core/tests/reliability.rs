//! RC reliability, one story per test (IBA 9.7): a packet is lost, duplicated, delayed,
//! reordered or corrupted at a chosen point, and the story checks how the QPs recover:
//! which completions, which bytes, which counters. Every story runs twice: on the
//! deterministic fabric (virtual time; counters exact) and over UDP on loopback with the
//! same fault rules applied in real time (counters as lower bounds, since a scheduling
//! hiccup may add a spurious retransmission).
//!
//! Node 0 is the requester, node 1 the responder. Path MTU 1024 unless a story says.
#![allow(clippy::cast_possible_truncation)]

mod common;

use common::net::{FabricNet, Net, Setup, UdpNet, Q};
use common::pattern;
use rnic_core::faults::Fault;
use rnic_core::qp_state::QpState;
use rnic_core::wr::{RecvWr, SendFlags, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion};
use rnic_wire::aeth::Syndrome;
use rnic_wire::Opcode;

const A: usize = 0;
const B: usize = 1;
/// 1 ms of local ACK timeout (timeout 8) is the unit of patience.
const MS: u64 = 1_000_000;
/// Five packets at MTU 1024: FIRST, MIDDLE x3, LAST.
const FIVE: usize = 4 * 1024 + 100;

/// Runs a story on both backends, the fabric once copying payloads into packets and once
/// sending them from registered memory (zero copy, as the UDP driver does without faults).
/// `$a`/`$b` pick the UDP story's loopback addresses.
macro_rules! story {
    ($name:ident, $setup:expr, $a:literal, $b:literal, $body:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn fabric() {
                let mut net = FabricNet::new($setup, 1);
                ($body)(&mut net as &mut dyn Net);
            }
            #[test]
            fn fabric_zero_copy() {
                let mut net = FabricNet::new(Setup { zero_copy: true, ..$setup }, 1);
                ($body)(&mut net as &mut dyn Net);
            }
            #[test]
            fn udp() {
                let mut net = UdpNet::new($setup, 1, concat!("127.0.41.", $a), concat!("127.0.41.", $b));
                ($body)(&mut net as &mut dyn Net);
            }
        }
    };
}

fn wr(wr_id: u64, op: SendOp, sg: Vec<rnic_core::wr::Sge>) -> SendWr {
    SendWr { wr_id, op, sg_list: sg, flags: SendFlags::SIGNALED, ud: None }
}

fn statuses(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

/// Asserts a counter: exactly `n` on the fabric, at least `n` over UDP.
fn count(net: &dyn Net, node: usize, name: &str, n: u64) {
    let got = net.counter(node, name);
    if net.exact() {
        assert_eq!(got, n, "{}: node {node} {name}", net.backend());
    } else {
        assert!(got >= n, "{}: node {node} {name} = {got}, expected at least {n}", net.backend());
    }
}

/// WRITEs `len` bytes of a pattern from A's offset 0 to B's offset 0 and checks the bytes.
fn write_and_check(net: &mut dyn Net, len: usize, seed: u64) {
    let data = pattern(seed, len);
    net.write(A, 0, &data);
    let rkey = net.keys(B).rkey;
    let va = net.iova(B);
    net.post_send(A, wr(1, SendOp::RdmaWrite { remote_addr: va, rkey }, vec![net.sge(A, 0, len as u32)]));
    let wcs = net.wait(A, Q::Send, 1, 100 * MS);
    assert_eq!(statuses(&wcs), [(1, WcStatus::Success)], "{}", net.backend());
    assert!(net.read(B, 0, len) == data, "{}: the responder's memory differs", net.backend());
    assert_eq!((net.state(A), net.state(B)), (QpState::Rts, QpState::Rts));
}

story!(lost_first_packet_of_a_write, Setup::default(), 1, 2, |net: &mut dyn Net| {
    // FIRST is lost: the four packets after it are out of sequence; the responder NAKs
    // once (PSN sequence error, for the expected PSN) and the requester goes back to it.
    net.add_rule(A, Fault::drop().opcode(Opcode::RC_RDMA_WRITE_FIRST).nth(1));
    write_and_check(net, FIVE, 1);
    count(net, B, "out_of_seq_request", 4);
    count(net, A, "rcvd_seq_err", 1);
    count(net, A, "completer_retry_err", 1);
    count(net, B, "duplicate_request", 0);
    count(net, A, "sent_pkts", 10);
});

story!(lost_middle_packet_of_a_write, Setup::default(), 3, 4, |net: &mut dyn Net| {
    // The second MIDDLE is lost: FIRST and MIDDLE 1 land; the NAK names the lost PSN, which
    // implicitly acknowledges the two before it; only three packets go again.
    net.add_rule(A, Fault::drop().opcode(Opcode::RC_RDMA_WRITE_MIDDLE).nth(2));
    write_and_check(net, FIVE, 2);
    count(net, B, "out_of_seq_request", 2);
    count(net, A, "rcvd_seq_err", 1);
    count(net, A, "completer_retry_err", 1);
    count(net, A, "sent_pkts", 8);
});

story!(lost_last_packet_of_a_write, Setup::default(), 5, 6, |net: &mut dyn Net| {
    // LAST is lost: nothing follows it, so no NAK. The local ACK timer fires and the
    // requester goes back to its oldest unacknowledged PSN (go-back-N: all five, since
    // only LAST asks for an ACK); the responder sees four duplicates and ACKs once more.
    net.add_rule(A, Fault::drop().opcode(Opcode::RC_RDMA_WRITE_LAST).nth(1));
    write_and_check(net, FIVE, 3);
    count(net, A, "completer_retry_err", 1);
    count(net, A, "rcvd_seq_err", 0);
    count(net, B, "duplicate_request", 4);
    count(net, B, "out_of_seq_request", 0);
    count(net, A, "sent_pkts", 10);
});

story!(lost_ack, Setup::default(), 7, 8, |net: &mut dyn Net| {
    // The SEND lands but its ACK is lost: the requester retransmits on timeout, the
    // responder recognises the duplicate, does not deliver it again and re-ACKs.
    net.add_rule(B, Fault::drop().opcode(Opcode::RC_ACKNOWLEDGE).nth(1));
    net.write(A, 0, b"exactly once");
    net.post_recv(B, RecvWr { wr_id: 10, sg_list: vec![net.sge(B, 0, 64)] });
    net.post_recv(B, RecvWr { wr_id: 11, sg_list: vec![net.sge(B, 64, 64)] });
    net.post_send(A, wr(1, SendOp::Send, vec![net.sge(A, 0, 12)]));
    assert_eq!(statuses(&net.wait(A, Q::Send, 1, 100 * MS)), [(1, WcStatus::Success)]);
    net.idle(5 * MS);
    let recv = net.wait(B, Q::Recv, 2, 0);
    assert_eq!(statuses(&recv), [(10, WcStatus::Success)], "{}: delivered once", net.backend());
    assert_eq!(net.read(B, 0, 12), b"exactly once");
    count(net, B, "duplicate_request", 1);
    count(net, A, "completer_retry_err", 1);
    count(net, B, "rdma_recvs", 1);
});

story!(lost_read_response_in_the_middle, Setup::default(), 9, 10, |net: &mut dyn Net| {
    // READ of five responses; the second MIDDLE response is lost. The next response is
    // beyond the expected PSN: the requester asks again at once from the missing one
    // (a READ request for the rest, at the matching offset), and the responder answers
    // it from its saved READ resource as a duplicate.
    net.add_rule(B, Fault::drop().opcode(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE).nth(2));
    let data = pattern(5, FIVE);
    net.write(B, 0, &data);
    let (va, rkey) = (net.iova(B), net.keys(B).rkey);
    net.post_send(A, wr(1, SendOp::RdmaRead { remote_addr: va, rkey }, vec![net.sge(A, 0, FIVE as u32)]));
    let wcs = net.wait(A, Q::Send, 1, 100 * MS);
    assert_eq!(statuses(&wcs), [(1, WcStatus::Success)]);
    assert_eq!((wcs[0].opcode, wcs[0].byte_len as usize), (WcOpcode::RdmaRead, FIVE));
    assert!(net.read(A, 0, FIVE) == data, "{}: READ data", net.backend());
    count(net, A, "completer_retry_err", 1);
    count(net, B, "duplicate_request", 1);
});

story!(duplicated_request, Setup::default(), 11, 12, |net: &mut dyn Net| {
    // The network delivers a SEND twice: the copy is a duplicate, acknowledged and not
    // executed, so it consumes no second receive WQE.
    net.add_rule(A, Fault::duplicate(20_000).opcode(Opcode::RC_SEND_ONLY).nth(1));
    net.write(A, 0, b"once");
    net.post_recv(B, RecvWr { wr_id: 10, sg_list: vec![net.sge(B, 0, 64)] });
    net.post_recv(B, RecvWr { wr_id: 11, sg_list: vec![net.sge(B, 64, 64)] });
    net.post_send(A, wr(1, SendOp::Send, vec![net.sge(A, 0, 4)]));
    assert_eq!(statuses(&net.wait(A, Q::Send, 1, 100 * MS)), [(1, WcStatus::Success)]);
    assert!(net.until_counter(B, "duplicate_request", 1, 10 * MS), "the copy arrived");
    net.idle(MS);
    assert_eq!(statuses(&net.wait(B, Q::Recv, 2, 0)), [(10, WcStatus::Success)]);
    count(net, B, "duplicate_request", 1);
    count(net, A, "completer_retry_err", 0);
});

story!(out_of_order_arrival, Setup::default(), 13, 14, |net: &mut dyn Net| {
    // MIDDLE 1 is overtaken by MIDDLE 2: arrival order FIRST, M2, M1, M3, LAST. M2 is out
    // of sequence and dropped (the responder keeps no out-of-order data); M1 fills the
    // gap; M3 and LAST are then out of sequence too. The requester goes back to M2 and the
    // message completes, every byte placed once and in order.
    net.add_rule(A, Fault::reorder(50 * MS).opcode(Opcode::RC_RDMA_WRITE_MIDDLE).nth(1));
    write_and_check(net, FIVE, 6);
    count(net, B, "out_of_seq_request", 3);
    count(net, A, "rcvd_seq_err", 1);
    count(net, A, "completer_retry_err", 1);
});

story!(corrupted_packet, Setup::default(), 15, 16, |net: &mut dyn Net| {
    // One bit of MIDDLE 1 flips on the wire: the receiver's ICRC check fails and drops it
    // (IBA C9-3, silently), which then plays out as a loss.
    net.add_rule(A, Fault::corrupt().opcode(Opcode::RC_RDMA_WRITE_MIDDLE).nth(1));
    write_and_check(net, FIVE, 7);
    count(net, B, "icrc_err", 1);
    count(net, A, "rcvd_seq_err", 1);
    count(net, A, "completer_retry_err", 1);
});

story!(rnr_then_recovery, Setup { min_rnr_timer: 14, ..Setup::default() }, 17, 18, |net: &mut dyn Net| {
    // No receive WQE: the responder answers RNR NAK with its min_rnr_timer (14: 1.28 ms).
    // The requester waits that long and tries again; by then a buffer is posted.
    net.write(A, 0, b"patience");
    net.post_send(A, wr(1, SendOp::Send, vec![net.sge(A, 0, 8)]));
    assert!(net.until_counter(B, "send_rnr_err", 1, 10 * MS), "the responder refused with RNR");
    assert!(net.wait(A, Q::Send, 1, 0).is_empty(), "no completion while the responder has no buffer");
    net.post_recv(B, RecvWr { wr_id: 10, sg_list: vec![net.sge(B, 0, 64)] });
    assert_eq!(statuses(&net.wait(A, Q::Send, 1, 100 * MS)), [(1, WcStatus::Success)]);
    assert_eq!(statuses(&net.wait(B, Q::Recv, 1, 10 * MS)), [(10, WcStatus::Success)]);
    assert_eq!(net.read(B, 0, 8), b"patience");
    count(net, B, "send_rnr_err", 1);
    count(net, A, "rcvd_rnr_err", 1);
    count(net, A, "retry_rnr_exceeded_err", 0);
});

story!(rnr_retry_exhausted, Setup { rnr_retry: 2, ..Setup::default() }, 19, 20, |net: &mut dyn Net| {
    // Never a receive WQE, rnr_retry 2: three RNR NAKs (the first try and two retries),
    // then RNR_RETRY_EXC_ERR, the QP in error, and the WR after it flushed.
    net.post_send(A, wr(1, SendOp::Send, vec![net.sge(A, 0, 8)]));
    net.post_send(A, wr(2, SendOp::Send, vec![net.sge(A, 0, 8)]));
    let wcs = net.wait(A, Q::Send, 2, 100 * MS);
    assert_eq!(statuses(&wcs), [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]);
    assert_eq!(net.state(A), QpState::Err);
    assert_eq!(net.state(B), QpState::Rts, "RNR leaves the responder usable");
    count(net, A, "rcvd_rnr_err", 3);
    count(net, B, "send_rnr_err", 3);
    count(net, A, "retry_rnr_exceeded_err", 1);
});

story!(retry_exhausted, Setup { retry_cnt: 3, ..Setup::default() }, 21, 22, |net: &mut dyn Net| {
    // Every packet A sends is lost: the first try and retry_cnt (3) retransmissions, then
    // RETRY_EXC_ERR; the QP enters the error state and flushes the rest, in order.
    net.add_rule(A, Fault::drop());
    net.post_send(
        A,
        wr(1, SendOp::RdmaWrite { remote_addr: net.iova(B), rkey: net.keys(B).rkey }, vec![net.sge(A, 0, 8)]),
    );
    net.post_send(A, wr(2, SendOp::Send, vec![net.sge(A, 0, 8)]));
    let wcs = net.wait(A, Q::Send, 2, 100 * MS);
    assert_eq!(statuses(&wcs), [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]);
    assert_eq!(net.state(A), QpState::Err);
    count(net, A, "completer_retry_err", 3);
    count(net, A, "retry_exceeded_err", 1);
});

story!(ghost_ack, Setup::default(), 23, 24, |net: &mut dyn Net| {
    // The peer acknowledges a PSN that was never sent (IBA 9.7.5.1.1): ignored and
    // counted; a later real transfer is unaffected.
    let ghost = rnic_wire::roce::RoceRepr {
        bth: rnic_wire::bth::BthRepr {
            opcode: Opcode::RC_ACKNOWLEDGE,
            se: false,
            migreq: false,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: rnic_wire::Qpn::new(net.qpn(A)),
            ack_req: false,
            psn: rnic_wire::Psn::new(Setup::default().psn[A]).add(1000),
        },
        ext: rnic_wire::roce::ExtHeaders {
            aeth: Some(rnic_wire::aeth::AethRepr { syndrome: Syndrome::Ack { credits: 31 }, msn: 7 }),
            ..Default::default()
        },
        payload_len: 0,
    };
    let mut pkt = vec![0; ghost.buffer_len()];
    ghost.emit(&mut pkt, &[]).unwrap();
    net.inject(B, pkt);
    assert!(net.until_counter(A, "ghost_acks", 1, 10 * MS), "the ghost ACK was seen and counted");
    count(net, A, "ghost_acks", 1);
    assert_eq!(net.wait(A, Q::Send, 1, 0).len(), 0);
    write_and_check(net, FIVE, 8);
});

story!(foreign_partition, Setup::default(), 29, 30, |net: &mut dyn Net| {
    // A packet from another partition (P_Key low 15 bits not 0x7fff: IBA C9-42/43) is
    // dropped and counted in bad_pkey_cntr as rxe's check_keys does, not as malformed; the
    // connection is unaffected.
    let foreign = rnic_wire::roce::RoceRepr {
        bth: rnic_wire::bth::BthRepr {
            opcode: Opcode::RC_ACKNOWLEDGE,
            se: false,
            migreq: false,
            pkey: 0x8001,
            fecn: false,
            becn: false,
            dest_qp: rnic_wire::Qpn::new(net.qpn(A)),
            ack_req: false,
            psn: rnic_wire::Psn::new(Setup::default().psn[A]),
        },
        ext: rnic_wire::roce::ExtHeaders {
            aeth: Some(rnic_wire::aeth::AethRepr { syndrome: Syndrome::Ack { credits: 31 }, msn: 1 }),
            ..Default::default()
        },
        payload_len: 0,
    };
    let mut pkt = vec![0; foreign.buffer_len()];
    foreign.emit(&mut pkt, &[]).unwrap();
    net.inject(B, pkt);
    assert!(net.until_counter(A, "bad_pkey_cntr", 1, 10 * MS), "the foreign P_Key was counted");
    count(net, A, "bad_pkey_cntr", 1);
    count(net, A, "malformed_pkts", 0);
    write_and_check(net, FIVE, 10);
});

story!(psn_wrap_under_loss, Setup { psn: [0xFF_FFFD, 0xFF_FFFE], ..Setup::default() }, 25, 26, |net: &mut dyn Net| {
    // The message crosses PSN 0xFFFFFF -> 0 and loses the packet at PSN 0: the NAK, the
    // implicit acknowledgement and the go-back-N all compute across the wrap.
    net.add_rule(A, Fault::drop().psn(0).nth(1));
    write_and_check(net, FIVE, 9);
    count(net, A, "rcvd_seq_err", 1);
    count(net, A, "completer_retry_err", 1);
    // And a READ across the responder's wrap, with its first response lost.
    net.add_rule(B, Fault::drop().opcode(Opcode::RC_RDMA_READ_RESPONSE_FIRST).nth(1));
    let (va, rkey) = (net.iova(B), net.keys(B).rkey);
    net.post_send(A, wr(2, SendOp::RdmaRead { remote_addr: va, rkey }, vec![net.sge(A, 1 << 20, FIVE as u32)]));
    assert_eq!(statuses(&net.wait(A, Q::Send, 1, 100 * MS)), [(2, WcStatus::Success)]);
    assert!(net.read(A, 1 << 20, FIVE) == net.read(B, 0, FIVE));
});

story!(timeout_zero_never_retransmits, Setup { timeout: 0, ..Setup::default() }, 27, 28, |net: &mut dyn Net| {
    // timeout 0 disables the local ACK timer (IBA 9.7.6.1.3): a lost LAST is never sent
    // again and the WR stays outstanding, however long we wait.
    net.add_rule(A, Fault::drop().opcode(Opcode::RC_RDMA_WRITE_LAST).nth(1));
    net.post_send(
        A,
        wr(1, SendOp::RdmaWrite { remote_addr: net.iova(B), rkey: net.keys(B).rkey }, vec![net.sge(A, 0, FIVE as u32)]),
    );
    net.idle(50 * MS);
    assert!(net.wait(A, Q::Send, 1, 0).is_empty(), "{}: completed without an ACK", net.backend());
    assert_eq!(net.state(A), QpState::Rts);
    count(net, A, "completer_retry_err", 0);
    count(net, A, "sent_pkts", 5);
});

// ---------------------------------------------------------------------------------------
// Protocol details that only the fabric can observe exactly.

/// Every packet node `from` put on the fabric since tracing started, parsed.
fn sent_by(net: &FabricNet, from: usize) -> Vec<rnic_wire::roce::RoceRepr> {
    let ip = net.ip(from);
    net.fab
        .trace
        .iter()
        .flatten()
        .filter(|t| t.pkt.src == ip)
        .map(|t| {
            let p = rnic_wire::roce::RocePacket::new_checked(&t.pkt.data[..]).unwrap();
            rnic_wire::roce::RoceRepr::parse(&p).unwrap()
        })
        .collect()
}

#[test]
fn acks_are_coalesced_and_carry_msn_and_invalid_credits() {
    // Eight SENDs arrive together; each asks for an ACK (AckReq on ONLY). The responder
    // answers once, for the newest PSN: MSN 8 (messages completed), credit field 31
    // ("invalid", as rxe sends it). All eight complete at the requester.
    let mut net = FabricNet::new(Setup::default(), 1);
    net.fab.trace = Some(Vec::new());
    for i in 0..8 {
        net.post_recv(B, RecvWr { wr_id: 100 + i, sg_list: vec![net.sge(B, i * 64, 64)] });
    }
    for i in 0..8 {
        net.post_send(A, wr(i, SendOp::Send, vec![net.sge(A, 0, 16)]));
    }
    assert_eq!(net.wait(A, Q::Send, 8, 100 * MS).len(), 8);
    let reqs = sent_by(&net, A);
    assert_eq!(reqs.len(), 8);
    assert!(reqs.iter().all(|r| r.bth.ack_req), "AckReq on every ONLY packet");
    let acks = sent_by(&net, B);
    assert_eq!(acks.len(), 1, "one coalesced ACK: {acks:?}");
    assert_eq!(acks[0].bth.psn, reqs[7].bth.psn);
    assert_eq!(
        acks[0].ext.aeth.map(|a| (a.syndrome, a.msn)),
        Some((Syndrome::Ack { credits: rnic_wire::aeth::CREDITS_INVALID }, 8))
    );
    count(&net, B, "ack_deferred", 7);
}

#[test]
fn ack_req_every_128_packets_and_the_window_holds_512() {
    // A 600-packet WRITE at MTU 256 with every response lost: the requester sends exactly
    // the window of small packets (512 unacknowledged) and stops; AckReq on every 128th.
    let mut net = FabricNet::new(Setup { mtu_code: 1, ..Setup::default() }, 1);
    net.fab.trace = Some(Vec::new());
    net.add_rule(B, Fault::drop());
    let len = 600 * 256;
    net.post_send(
        A,
        wr(1, SendOp::RdmaWrite { remote_addr: net.iova(B), rkey: net.keys(B).rkey }, vec![net.sge(A, 0, len)]),
    );
    net.idle(MS / 2); // less than the 1 ms timeout: no retransmission yet
    let reqs = sent_by(&net, A);
    assert_eq!(reqs.len(), 512);
    let with_ack_req: Vec<usize> = reqs.iter().enumerate().filter(|(_, r)| r.bth.ack_req).map(|(i, _)| i + 1).collect();
    assert_eq!(with_ack_req, [128, 256, 384, 512]);
    // Once responses flow again the rest follows: 600 packets in all, the last with AckReq.
    let mut net = FabricNet::new(Setup { mtu_code: 1, ..Setup::default() }, 1);
    net.fab.trace = Some(Vec::new());
    net.post_send(
        A,
        wr(1, SendOp::RdmaWrite { remote_addr: net.iova(B), rkey: net.keys(B).rkey }, vec![net.sge(A, 0, len)]),
    );
    assert_eq!(statuses(&net.wait(A, Q::Send, 1, 100 * MS)), [(1, WcStatus::Success)]);
    let reqs = sent_by(&net, A);
    assert_eq!(reqs.len(), 600);
    assert!(reqs[599].bth.ack_req);
}

#[test]
fn full_size_packets_keep_a_window_of_128() {
    // Packets over 1 KiB go within 128 unacknowledged (rxe's window), a quarter of the small
    // packets' 512, so that the bytes in flight stay bounded: a 300-packet WRITE at MTU
    // 4096 with every response lost sends 128 packets, AckReq on every 64th (half the
    // window: inside one message the forced interval is at most that).
    let mut net = FabricNet::new(Setup { mtu_code: 5, ..Setup::default() }, 1);
    net.fab.trace = Some(Vec::new());
    net.add_rule(B, Fault::drop());
    let len = 300 * 4096;
    net.post_send(
        A,
        wr(1, SendOp::RdmaWrite { remote_addr: net.iova(B), rkey: net.keys(B).rkey }, vec![net.sge(A, 0, len)]),
    );
    net.idle(MS / 2);
    let reqs = sent_by(&net, A);
    assert_eq!(reqs.len(), 128);
    let with_ack_req: Vec<usize> = reqs.iter().enumerate().filter(|(_, r)| r.bth.ack_req).map(|(i, _)| i + 1).collect();
    assert_eq!(with_ack_req, [64, 128]);
}

#[test]
fn max_rd_atomic_limits_outstanding_reads() {
    // max_rd_atomic 2 and no response ever: of six READs only two requests go out.
    let mut net = FabricNet::new(Setup { max_rd_atomic: 2, ..Setup::default() }, 1);
    net.fab.trace = Some(Vec::new());
    net.add_rule(B, Fault::drop());
    for i in 0..6 {
        net.post_send(
            A,
            wr(i, SendOp::RdmaRead { remote_addr: net.iova(B), rkey: net.keys(B).rkey }, vec![net.sge(A, 0, 8)]),
        );
    }
    net.idle(MS / 2);
    assert_eq!(sent_by(&net, A).len(), 2);
}

#[test]
fn read_responses_are_paced_a_burst_per_drain() {
    // A 1 MiB READ at MTU 1024 is 1024 response packets. The responder holds at most
    // READ_BURST of them at a time: a peer cannot make it buffer the whole read.
    let mut net = FabricNet::new(Setup::default(), 1);
    let (va, rkey) = (net.iova(B), net.keys(B).rkey);
    net.post_send(A, wr(1, SendOp::RdmaRead { remote_addr: va, rkey }, vec![net.sge(A, 0, 1 << 20)]));
    let mut out = Vec::new();
    net.fab.engine(A).drain_transmits(&mut out);
    assert_eq!(out.len(), 1, "one READ request");
    let src = net.ip(A);
    net.fab.engine(B).handle_packet(0, src, &out[0].data);
    let mut total = 0;
    let mut psns = Vec::new();
    while net.fab.engine(B).has_pending_transmit() {
        let mut burst = Vec::new();
        net.fab.engine(B).drain_transmits(&mut burst);
        assert!(burst.len() <= rnic_core::engine::READ_BURST, "a drain produced {} packets", burst.len());
        total += burst.len();
        for p in &burst {
            psns.push(rnic_wire::roce::RocePacket::new_checked(&p.data[..]).unwrap().bth().psn());
        }
    }
    assert_eq!(total, 1024);
    let first = psns[0];
    assert!(psns.iter().enumerate().all(|(i, p)| *p == first.add(i as u32)), "responses in PSN order");
}

#[test]
fn a_held_ack_leaves_at_the_next_drain_or_when_the_qp_is_destroyed() {
    // The UDP driver holds the ACK for what an application's own round received until
    // the next drain (the answer goes first). Nothing may lose it: the next drain sends
    // it, and so does destroying the QP (an application that destroys its QP the moment
    // it sees the last completion must not leave the peer retrying to RETRY_EXC_ERR).
    for destroy in [false, true] {
        let mut net = FabricNet::new(Setup::default(), 1);
        net.post_recv(B, RecvWr { wr_id: 1, sg_list: vec![net.sge(B, 0, 8)] });
        net.post_send(A, wr(2, SendOp::Send, vec![net.sge(A, 0, 8)]));
        let mut out = Vec::new();
        net.fab.engine(A).drain_transmits(&mut out);
        assert_eq!(out.len(), 1, "one SEND");
        let src = net.ip(A);
        net.fab.engine(B).handle_packet(0, src, &out[0].data);
        let mut first = Vec::new();
        net.fab.engine(B).drain_transmits_holding_acks(&mut first);
        assert!(first.is_empty(), "the ACK is held: {first:?}");
        assert!(net.fab.engine(B).has_held_acks());
        assert_eq!(net.fab.engine(B).poll_timeout(), Some(0), "a held ACK asks for the next round now");
        if destroy {
            let qpn = rnic_wire::Qpn::new(net.qpn(B));
            net.fab.engine(B).destroy_qp(qpn).unwrap();
        }
        let mut next = Vec::new();
        net.fab.engine(B).drain_transmits(&mut next);
        assert_eq!(next.len(), 1, "destroy {destroy}: the held ACK left");
        assert_eq!(common::opcode_psn(&next[0].data).0, 0x11, "an RC ACKNOWLEDGE");
    }
}

#[test]
fn the_requester_waits_the_rnr_timer_the_responder_names() {
    // min_rnr_timer 14 is 1.28 ms in IBA's RNR timer table (Table 45): the retried SEND
    // leaves exactly that long after the RNR NAK arrives (2 us fabric latency).
    let mut net = FabricNet::new(Setup { min_rnr_timer: 14, rnr_retry: 1, ..Setup::default() }, 1);
    net.fab.trace = Some(Vec::new());
    net.post_send(A, wr(1, SendOp::Send, vec![net.sge(A, 0, 8)]));
    let wcs = net.wait(A, Q::Send, 1, 100 * MS);
    assert_eq!(statuses(&wcs), [(1, WcStatus::RnrRetryExcErr)]);
    let times: Vec<(u64, bool)> = net.fab.trace.iter().flatten().map(|t| (t.at, t.pkt.src == net.ip(A))).collect();
    // SEND, RNR NAK, SEND again, RNR NAK: then rnr_retry (1) is spent.
    assert_eq!(times.iter().map(|t| t.1).collect::<Vec<_>>(), [true, false, true, false]);
    let nak_arrives = times[1].0 + 2_000;
    assert_eq!(times[2].0 - nak_arrives, rnic_core::qp_state::rnr_timer_ns(14));
    assert_eq!(rnic_core::qp_state::rnr_timer_ns(14), 1_280_000);
}
