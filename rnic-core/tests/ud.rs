//! UD over the deterministic fabric: DETH on every packet, the GRH area of every receive
//! buffer byte for byte, wc.src_qp / GRH flag / immediate / byte_len, Q_Key checks and the
//! high-bit rule, the one-packet limit, short receive buffers, and one QP talking to two.
#![allow(clippy::cast_possible_truncation)]
mod common;

use common::*;
use rnic_core::engine::qp::QpInit;
use rnic_core::engine::qp::{self, PostError, QpCap, PORT_MTU};
use rnic_core::engine::ud::GRH_LEN;
use rnic_core::fabric::Fabric;
use rnic_core::qp_state::{ModifyError, QpAttrMask, QpType};
use rnic_core::wr::WcFlags;
use rnic_core::wr::{NetworkHdr, RecvWr, SendOp, SendWr, UdDest, WcOpcode, WcStatus, WorkCompletion};
use rnic_wire::Opcode;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::Ordering;

const QKEY: u32 = 0x1111_1111;

/// A few nodes, each with one UD QP in RTS.
struct Ud {
    fab: Fabric,
    nodes: Vec<Node>,
}

impl Ud {
    fn new(ips: &[&str], qkeys: &[u32]) -> Ud {
        let mut fab = Fabric::new(2_000);
        let nodes: Vec<Node> = ips.iter().map(|ip| typed_node(&mut fab, ip, QpCap::default(), QpType::Ud)).collect();
        for (i, n) in nodes.iter().enumerate() {
            for at in ud_attrs(qkeys[i], 1000 * i as u32) {
                fab.engine(i).modify_qp(0, n.qp.qpn, &at).unwrap();
            }
        }
        Ud { fab, nodes }
    }
    fn dest(&self, to: usize, qkey: u32) -> UdDest {
        UdDest { dst: self.nodes[to].ip, remote_qpn: self.nodes[to].qp.qpn.value(), remote_qkey: qkey }
    }
    fn sge(&self, n: usize, off: u64, len: u32) -> rnic_core::wr::Sge {
        rnic_core::wr::Sge { addr: self.nodes[n].iova + off, length: len, lkey: self.nodes[n].keys.lkey }
    }
    fn post_send(&mut self, n: usize, wr: SendWr) -> Result<(), PostError> {
        let node = &self.nodes[n];
        let wqe = qp::validate_send(&node.qp, &node.mtpt, &wr)?;
        let now = self.fab.now();
        let qpn = node.qp.qpn;
        self.fab.engine(n).post_send(now, qpn, wqe);
        Ok(())
    }
    fn post_recv(&mut self, n: usize, wr_id: u64, off: u64, len: u32) {
        let node = &self.nodes[n];
        let wqe =
            qp::validate_recv(&node.qp, &node.mtpt, &RecvWr { wr_id, sg_list: vec![self.sge(n, off, len)] }).unwrap();
        let qpn = node.qp.qpn;
        self.fab.engine(n).post_recv(qpn, wqe);
    }
    fn run(&mut self) {
        let deadline = self.fab.now() + 1_000_000_000;
        self.fab.run_until(deadline);
    }
    fn fill(&self, n: usize, off: usize, data: &[u8]) {
        self.nodes[n].mem.write(off, data).unwrap();
    }
    fn read(&self, n: usize, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.nodes[n].mem.read(off, &mut v).unwrap();
        v
    }
    fn counter(&mut self, n: usize, name: &str) -> u64 {
        self.fab.engine(n).counters().get(name).unwrap()
    }
}

fn recv_wcs(u: &Ud, n: usize) -> Vec<WorkCompletion> {
    Pair::wcs(&u.nodes[n].rcq)
}

/// The GRH area rnic writes for RoCEv2 over IPv4, spelled out: 20 zero bytes, then the IPv4
/// header (version 4, IHL 5, TOS 0, total length, ID 0, DF, TTL 64, UDP, checksum, addresses).
fn expected_grh(src: [u8; 4], dst: [u8; 4], roce_len: usize) -> Vec<u8> {
    let total = u16::try_from(20 + 8 + roce_len).unwrap().to_be_bytes();
    let mut h = vec![0x45, 0x00, total[0], total[1], 0x00, 0x00, 0x40, 0x00, 64, 17, 0, 0];
    h.extend(src);
    h.extend(dst);
    // One's-complement sum of the 16-bit words, written by hand here (not the crate's helper).
    let mut sum: u32 = h.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let c = (!(sum as u16)).to_be_bytes();
    h[10] = c[0];
    h[11] = c[1];
    let mut g = vec![0u8; 20];
    g.extend(h);
    g
}

#[test]
fn send_recv_fills_the_grh_area_and_the_completion() {
    for len in [0usize, 1, 3, 100, 1024, PORT_MTU] {
        let mut u = Ud::new(&["10.0.1.1", "10.0.1.2"], &[QKEY, QKEY]);
        u.fab.trace = Some(Vec::new());
        let data = pattern(len as u64 + 3, len);
        u.fill(0, 0, &data);
        // Pre-fill the receive buffer so that every byte written shows.
        u.fill(1, 0, &vec![0xa5; GRH_LEN + len + 16]);
        u.post_recv(1, 77, 0, (GRH_LEN + len + 16) as u32);
        let imm = len % 2 == 1;
        let op = if imm { SendOp::SendWithImm { imm: 0xfeed_f00d } } else { SendOp::Send };
        let dest = u.dest(1, QKEY);
        u.post_send(0, SendWr::new(5, op, vec![u.sge(0, 0, len as u32)]).to(dest)).unwrap();
        u.run();

        let s = Pair::wcs(&u.nodes[0].scq);
        assert_eq!(
            (s.len(), s[0].wr_id, s[0].status, s[0].opcode, s[0].byte_len),
            (1, 5, WcStatus::Success, WcOpcode::Send, len as u32)
        );
        let r = recv_wcs(&u, 1);
        assert_eq!(r.len(), 1, "len {len}");
        let wc = r[0];
        assert_eq!((wc.wr_id, wc.status, wc.opcode), (77, WcStatus::Success, WcOpcode::Recv));
        assert_eq!(wc.byte_len as usize, GRH_LEN + len, "verbs: byte_len counts the 40 GRH bytes");
        assert_eq!(wc.src_qp, u.nodes[0].qp.qpn.value());
        assert_eq!(wc.qp_num, u.nodes[1].qp.qpn.value());
        assert!(wc.wc_flags.contains(WcFlags::GRH));
        assert_eq!(wc.network_hdr, NetworkHdr::Ipv4, "the GRH area holds the IPv4 header");
        assert_eq!(wc.wc_flags.contains(WcFlags::WITH_IMM), imm);
        if imm {
            assert_eq!(wc.imm_data, 0xfeed_f00d);
        }
        assert_eq!(wc.pkey_index, 0);
        // The packet: UD_SEND_ONLY(_WITH_IMMEDIATE), DETH with the Q_Key and our QPN.
        let trace = u.fab.trace.clone().unwrap();
        assert_eq!(trace.len(), 1, "one packet, no acknowledgement");
        let w = &trace[0].pkt;
        let pkt = rnic_wire::roce::RocePacket::new_checked(&w.data[..]).unwrap();
        let repr = rnic_wire::roce::RoceRepr::parse(&pkt).unwrap();
        assert_eq!(repr.bth.opcode, if imm { Opcode::UD_SEND_ONLY_WITH_IMMEDIATE } else { Opcode::UD_SEND_ONLY });
        assert!(!repr.bth.ack_req);
        assert_eq!(repr.bth.dest_qp, u.nodes[1].qp.qpn);
        let deth = repr.ext.deth.unwrap();
        assert_eq!((deth.qkey, deth.src_qp), (QKEY, u.nodes[0].qp.qpn));
        // rxe's UD source port: 0xC000 + hash_32(qpn, 14).
        assert_eq!(w.src_port, qp::ud_udp_sport(u.nodes[0].qp.qpn.value()));
        // The receive buffer: GRH area, payload, and nothing after it touched.
        let buf = u.read(1, 0, GRH_LEN + len + 16);
        assert_eq!(buf[..GRH_LEN], expected_grh([10, 0, 1, 1], [10, 0, 1, 2], w.data.len())[..], "len {len}");
        assert_eq!(buf[GRH_LEN..GRH_LEN + len], data[..]);
        assert!(buf[GRH_LEN + len..].iter().all(|&b| b == 0xa5));
    }
}

#[test]
fn qkey_mismatch_is_dropped_and_counted() {
    let mut u = Ud::new(&["10.0.1.1", "10.0.1.2"], &[QKEY, QKEY]);
    u.post_recv(1, 1, 0, 1000);
    let dest = u.dest(1, 0x2222_2222);
    u.post_send(0, SendWr::send(1, vec![u.sge(0, 0, 10)]).to(dest)).unwrap();
    u.run();
    assert!(recv_wcs(&u, 1).is_empty());
    assert_eq!(u.counter(1, "qkey_viol_cntr"), 1);
    // The sender cannot know: its WR completed when the packet left.
    assert_eq!(Pair::wcs(&u.nodes[0].scq)[0].status, WcStatus::Success);
    // The receive WQE is still there for a datagram with the right key.
    let dest = u.dest(1, QKEY);
    u.post_send(0, SendWr::send(2, vec![u.sge(0, 0, 10)]).to(dest)).unwrap();
    u.run();
    assert_eq!(recv_wcs(&u, 1).iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1]);
    assert_eq!(u.counter(1, "qkey_viol_cntr"), 1);
}

#[test]
fn a_wr_qkey_with_the_high_bit_means_the_qps_own() {
    // A's own Q_Key is the receiver's; the WR says 0x80000000: the DETH must carry A's.
    let own = 0x0bad_cafe;
    let mut u = Ud::new(&["10.0.1.1", "10.0.1.2"], &[own, own]);
    u.fab.trace = Some(Vec::new());
    u.post_recv(1, 1, 0, 100);
    let dest = u.dest(1, UdDest::USE_QP_QKEY);
    u.post_send(0, SendWr::send(1, vec![u.sge(0, 0, 8)]).to(dest)).unwrap();
    // Any value with the high bit set counts, not only 0x80000000.
    u.post_recv(1, 2, 100, 100);
    let dest = u.dest(1, 0xffff_ffff);
    u.post_send(0, SendWr::send(2, vec![u.sge(0, 0, 8)]).to(dest)).unwrap();
    u.run();
    assert_eq!(
        recv_wcs(&u, 1).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    for t in u.fab.trace.clone().unwrap() {
        assert_eq!(&t.pkt.data[12..16], &own.to_be_bytes(), "the DETH Q_Key");
    }
    assert_eq!(u.counter(1, "qkey_viol_cntr"), 0);
}

#[test]
fn a_message_longer_than_the_mtu_fails_locally() {
    let mut u = Ud::new(&["10.0.1.1", "10.0.1.2"], &[QKEY, QKEY]);
    let dest = u.dest(1, QKEY);
    let err = u.post_send(0, SendWr::send(1, vec![u.sge(0, 0, 4000), u.sge(0, 4000, 97)]).to(dest)).unwrap_err();
    assert_eq!(err, PostError::UdMessageTooLong { len: 4097, mtu: 4096 });
    let text = err.to_string();
    assert!(text.contains("4097") && text.contains("4096") && text.contains("one packet"), "{text}");
    assert_eq!(u.nodes[0].qp.sq_outstanding.load(Ordering::Relaxed), 0, "nothing was queued");
    // Inline too.
    let node = &u.nodes[0];
    let err = qp::validate_send_inline(&node.qp, 1, SendOp::Send, &[0; 5000], true, false, Some(dest)).unwrap_err();
    assert!(matches!(err, PostError::UdMessageTooLong { len: 5000, .. } | PostError::InlineTooLong { .. }), "{err}");
    u.run();
    assert_eq!(u.fab.trace.as_ref().map_or(0, Vec::len), 0);
}

#[test]
fn wrong_operations_and_missing_destinations_are_named() {
    let mut u = Ud::new(&["10.0.1.1", "10.0.1.2"], &[QKEY, QKEY]);
    let dest = u.dest(1, QKEY);
    let write = SendOp::RdmaWrite { remote_addr: 0, rkey: 0 };
    let err = u.post_send(0, SendWr::new(1, write, vec![]).to(dest)).unwrap_err();
    assert_eq!(err, PostError::NotSupported { op: "RDMA_WRITE", qp_type: QpType::Ud });
    let err = u.post_send(0, SendWr::send(1, vec![])).unwrap_err();
    assert_eq!(err, PostError::NoDestination);
    assert!(err.to_string().contains("needs a destination"), "{err}");
    // An RC QP refuses a UD destination.
    let mut p = Pair::new(3, 0, 0);
    let err = p.post_send(A, SendWr::send(1, vec![]).to(dest)).unwrap_err();
    assert_eq!(err, PostError::DestinationNotAllowed { qp_type: QpType::Rc });
}

#[test]
fn short_receive_buffer_or_no_buffer_drops_silently() {
    let mut u = Ud::new(&["10.0.1.1", "10.0.1.2"], &[QKEY, QKEY]);
    let dest = u.dest(1, QKEY);
    // No receive WQE: dropped, counted.
    u.post_send(0, SendWr::send(1, vec![u.sge(0, 0, 10)]).to(dest)).unwrap();
    u.run();
    assert_eq!(u.counter(1, "ud_dropped_pkts"), 1);
    // 40 + 99 bytes of buffer for 100 bytes of payload: dropped (IBA, rxe), the WQE stays...
    u.post_recv(1, 7, 0, (GRH_LEN + 99) as u32);
    u.post_send(0, SendWr::send(2, vec![u.sge(0, 0, 100)]).to(dest)).unwrap();
    u.run();
    assert!(recv_wcs(&u, 1).is_empty());
    assert_eq!(u.counter(1, "ud_dropped_pkts"), 2);
    // ...and takes the next datagram that fits exactly.
    u.fill(0, 0, &pattern(9, 99));
    u.post_send(0, SendWr::send(3, vec![u.sge(0, 0, 99)]).to(dest)).unwrap();
    u.run();
    let r = recv_wcs(&u, 1);
    assert_eq!((r[0].wr_id, r[0].byte_len), (7, (GRH_LEN + 99) as u32));
    assert_eq!(u.read(1, GRH_LEN, 99), pattern(9, 99));
    assert_eq!(u.nodes[1].qp.state(), rnic_core::qp_state::QpState::Rts);
}

#[test]
fn one_ud_qp_talks_to_two_peers_and_answers_from_the_grh() {
    let mut u = Ud::new(&["10.0.1.1", "10.0.1.2", "10.0.1.3"], &[QKEY, QKEY, QKEY]);
    // B and C each post one buffer and wait for a ping; A posts two buffers for the pongs.
    u.post_recv(1, 10, 0, 200);
    u.post_recv(2, 20, 0, 200);
    u.post_recv(0, 1, 0, 200);
    u.post_recv(0, 2, 200, 200);
    u.fill(0, 4096, b"ping to B");
    u.fill(0, 8192, b"ping to C");
    let (to_b, to_c) = (u.dest(1, QKEY), u.dest(2, QKEY));
    u.post_send(0, SendWr::send(100, vec![u.sge(0, 4096, 9)]).to(to_b)).unwrap();
    u.post_send(0, SendWr::send(101, vec![u.sge(0, 8192, 9)]).to(to_c)).unwrap();
    u.run();
    // Each peer answers whoever pinged: the source QPN from the completion, the source
    // address from the GRH (what ibv_create_ah_from_wc does).
    for (n, word) in [(1usize, b"pong from B"), (2, b"pong from C")] {
        let wc = recv_wcs(&u, n)[0];
        assert_eq!(u.read(n, GRH_LEN, 9), if n == 1 { b"ping to B" } else { b"ping to C" });
        let grh = u.read(n, 0, GRH_LEN);
        let src = IpAddr::V4(Ipv4Addr::new(grh[32], grh[33], grh[34], grh[35]));
        assert_eq!(src, u.nodes[0].ip);
        u.fill(n, 4096, word);
        let back = UdDest { dst: src, remote_qpn: wc.src_qp, remote_qkey: QKEY };
        u.post_send(n, SendWr::send(n as u64, vec![u.sge(n, 4096, 11)]).to(back)).unwrap();
    }
    u.run();
    let r = recv_wcs(&u, 0);
    assert_eq!(r.len(), 2);
    let mut from: Vec<(u32, Vec<u8>, [u8; 4])> = r
        .iter()
        .map(|wc| {
            let off = if wc.wr_id == 1 { 0 } else { 200 };
            let g = u.read(0, off + 32, 4);
            (wc.src_qp, u.read(0, off + GRH_LEN, 11), [g[0], g[1], g[2], g[3]])
        })
        .collect();
    from.sort();
    let mut want = vec![
        (u.nodes[1].qp.qpn.value(), b"pong from B".to_vec(), [10, 0, 1, 2]),
        (u.nodes[2].qp.qpn.value(), b"pong from C".to_vec(), [10, 0, 1, 3]),
    ];
    want.sort();
    assert_eq!(from, want);
}

#[test]
fn ud_modify_takes_the_ud_masks() {
    let mut fab = Fabric::new(1000);
    let n = typed_node(&mut fab, "10.0.1.9", QpCap::default(), QpType::Ud);
    let [mut init, _, _] = ud_attrs(QKEY, 0);
    init.mask = init.mask.difference(QpAttrMask::QKEY);
    let err = fab.engine(0).modify_qp(0, n.qp.qpn, &init).unwrap_err();
    assert!(
        matches!(err, rnic_core::engine::EngineError::Modify(ModifyError::MissingAttributes { qp_type: QpType::Ud, missing, .. }) if missing == QpAttrMask::QKEY),
        "{err}"
    );
    let [init, mut rtr, _] = ud_attrs(QKEY, 0);
    fab.engine(0).modify_qp(0, n.qp.qpn, &init).unwrap();
    rtr.mask |= QpAttrMask::AV;
    let err = fab.engine(0).modify_qp(0, n.qp.qpn, &rtr).unwrap_err();
    assert!(err.to_string().contains("UD QP INIT->RTR does not accept AV"), "{err}");
    assert_eq!(fab.engine(0).query_qp(n.qp.qpn).unwrap().qkey, QKEY);
}

#[test]
fn two_ud_qps_share_an_srq_and_its_limit_event_fires() {
    use rnic_core::engine::AsyncEvent;
    use rnic_core::srq::Srq;
    use std::sync::Arc;
    let mut u = Ud::new(&["10.0.1.1", "10.0.1.2"], &[QKEY, QKEY]);
    // Node B gets two more UD QPs that take their receive WQEs from one SRQ.
    let node = &u.nodes[1];
    let srq = Arc::new(Srq::new(1, node.pd, 8, 1));
    let (pd, scq, rcq) = (node.pd, node.scq.clone(), node.rcq.clone());
    let mut qps = Vec::new();
    for _ in 0..2 {
        let qp = u
            .fab
            .engine(1)
            .create_qp(QpInit::new(QpType::Ud, pd, scq.clone(), rcq.clone()).srq(Some(srq.clone())))
            .unwrap();
        for at in ud_attrs(QKEY, 0) {
            u.fab.engine(1).modify_qp(0, qp.qpn, &at).unwrap();
        }
        qps.push(qp);
    }
    for i in 0..4u64 {
        let sge = u.sge(1, i * 1024, 1024);
        srq.post_recv(&u.nodes[1].mtpt, &RecvWr { wr_id: 50 + i, sg_list: vec![sge] }).unwrap();
    }
    srq.set_limit(3).unwrap();
    for (i, qp) in qps.iter().enumerate() {
        let dest = UdDest { dst: u.nodes[1].ip, remote_qpn: qp.qpn.value(), remote_qkey: QKEY };
        u.post_send(0, SendWr::send(i as u64, vec![u.sge(0, 0, 64)]).to(dest)).unwrap();
    }
    u.run();
    let r = recv_wcs(&u, 1);
    let got: Vec<(u64, u32)> = r.iter().map(|w| (w.wr_id, w.qp_num)).collect();
    assert_eq!(got, [(50, qps[0].qpn.value()), (51, qps[1].qpn.value())]);
    assert!(r.iter().all(|w| w.status == WcStatus::Success && w.byte_len == (GRH_LEN + 64) as u32));
    assert_eq!(srq.len(), 2);
    // Taking the second WQE left fewer than 3: the limit event, once.
    let events: Vec<AsyncEvent> = std::iter::from_fn(|| u.fab.engine(1).poll_event()).collect();
    assert_eq!(events, [AsyncEvent::SrqLimitReached { srq: 1 }]);
}

#[test]
fn over_ipv6_the_grh_area_is_the_ipv6_header() {
    let mut u = Ud::new(&["fd00::1", "fd00::2"], &[QKEY, QKEY]);
    u.fab.trace = Some(Vec::new());
    u.post_recv(1, 1, 0, 200);
    u.fill(0, 0, b"over IPv6");
    let dest = u.dest(1, QKEY);
    u.post_send(0, SendWr::send(1, vec![u.sge(0, 0, 9)]).to(dest)).unwrap();
    u.run();
    let r = recv_wcs(&u, 1);
    assert_eq!((r[0].status, r[0].byte_len, r[0].src_qp), (WcStatus::Success, 49, u.nodes[0].qp.qpn.value()));
    assert_eq!(r[0].network_hdr, NetworkHdr::Ipv6);
    let roce_len = u.fab.trace.as_ref().unwrap()[0].pkt.data.len();
    let g = u.read(1, 0, GRH_LEN);
    // Version 6, traffic class 0, flow label 0; payload length (UDP + BTH..ICRC); UDP; hop
    // limit 64; source; destination.
    assert_eq!(g[..4], [0x60, 0, 0, 0]);
    assert_eq!(u16::from_be_bytes([g[4], g[5]]) as usize, 8 + roce_len);
    assert_eq!((g[6], g[7]), (17, 64));
    assert_eq!(g[8..24], "fd00::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
    assert_eq!(g[24..40], "fd00::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
    assert_eq!(u.read(1, GRH_LEN, 9), b"over IPv6");
}
