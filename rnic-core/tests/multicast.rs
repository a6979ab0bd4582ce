//! UD multicast over the deterministic fabric (IBA 10.5): a datagram to a group's address
//! with DestQP 0xFFFFFF reaches every QP attached to the group, on every node, the
//! sender's own attached QP included (as IP_MULTICAST_LOOP delivers on a host); each QP
//! checks its Q_Key; a detached QP, a QP of another group and a node without the group get
//! nothing; anything else sent to a group is dropped.
#![allow(clippy::cast_possible_truncation)]
mod common;

use common::*;
use rnic_core::engine::qp::{self, QpCap, QpInit, QpShared};
use rnic_core::engine::ud::GRH_LEN;
use rnic_core::engine::EngineError;
use rnic_core::fabric::Fabric;
use rnic_core::faults::Wire;
use rnic_core::qp_state::QpType;
use rnic_core::wr::{RecvWr, SendWr, UdDest, WcStatus, WorkCompletion};
use rnic_wire::Qpn;
use std::net::IpAddr;
use std::sync::Arc;

const QKEY: u32 = 0x0123_4567;
const GROUP: &str = "230.0.0.1";

fn group() -> IpAddr {
    GROUP.parse().unwrap()
}

/// Nodes with one UD QP each in RTS, all with Q_Key `QKEY`.
struct Net {
    fab: Fabric,
    nodes: Vec<Node>,
}

impl Net {
    fn new(ips: &[&str]) -> Net {
        let mut fab = Fabric::new(2_000);
        let nodes: Vec<Node> = ips.iter().map(|ip| typed_node(&mut fab, ip, QpCap::default(), QpType::Ud)).collect();
        for (i, n) in nodes.iter().enumerate() {
            for at in ud_attrs(QKEY, 0) {
                fab.engine(i).modify_qp(0, n.qp.qpn, &at).unwrap();
            }
        }
        Net { fab, nodes }
    }
    /// A second UD QP on node `n` (same PD, memory and CQs), in RTS with Q_Key `qkey`.
    fn extra_qp(&mut self, n: usize, qkey: u32) -> Arc<QpShared> {
        let node = &self.nodes[n];
        let init = QpInit::new(QpType::Ud, node.pd, node.scq.clone(), node.rcq.clone());
        let qp = self.fab.engine(n).create_qp(init).unwrap();
        for at in ud_attrs(qkey, 0) {
            self.fab.engine(n).modify_qp(0, qp.qpn, &at).unwrap();
        }
        qp
    }
    fn attach(&mut self, n: usize, qpn: Qpn) {
        self.fab.engine(n).attach_mcast(qpn, group()).unwrap();
    }
    fn sge(&self, n: usize, off: u64, len: u32) -> rnic_core::wr::Sge {
        rnic_core::wr::Sge { addr: self.nodes[n].iova + off, length: len, lkey: self.nodes[n].keys.lkey }
    }
    fn post_recv(&mut self, n: usize, qp: &QpShared, wr_id: u64, off: u64) {
        let node = &self.nodes[n];
        let wr = RecvWr { wr_id, sg_list: vec![self.sge(n, off, 1024)] };
        let wqe = qp::validate_recv(qp, &node.mtpt, &wr).unwrap();
        self.fab.engine(n).post_recv(qp.qpn, wqe);
    }
    /// Node `n`'s first QP sends `data` to the group.
    fn send_to_group(&mut self, n: usize, data: &[u8], qkey: u32) {
        self.nodes[n].mem.write(0, data).unwrap();
        let dest = UdDest { dst: group(), remote_qpn: Qpn::MULTICAST.value(), remote_qkey: qkey };
        let wr = SendWr::send(9, vec![self.sge(n, 0, data.len() as u32)]).to(dest);
        let node = &self.nodes[n];
        let wqe = qp::validate_send(&node.qp, &node.mtpt, &wr).unwrap();
        let (now, qpn) = (self.fab.now(), node.qp.qpn);
        self.fab.engine(n).post_send(now, qpn, wqe);
        let deadline = self.fab.now() + 1_000_000_000;
        self.fab.run_until(deadline);
    }
    fn recvs(&self, n: usize) -> Vec<WorkCompletion> {
        Pair::wcs(&self.nodes[n].rcq)
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

#[test]
fn a_datagram_to_the_group_reaches_every_attached_qp() {
    let mut net = Net::new(&["10.0.2.1", "10.0.2.2", "10.0.2.3", "10.0.2.4"]);
    // B has two QPs in the group; C one; D none; A (the sender) is attached too.
    let b2 = net.extra_qp(1, QKEY);
    for n in 0..3 {
        let qpn = net.nodes[n].qp.qpn;
        net.attach(n, qpn);
    }
    net.attach(1, b2.qpn);
    // D's QP could take the datagram if it were for it.
    for n in 0..4 {
        let qp = net.nodes[n].qp.clone();
        net.post_recv(n, &qp, 100 + n as u64, 0);
    }
    net.post_recv(1, &b2, 200, 2048);
    let data = pattern(7, 300);
    net.send_to_group(0, &data, QKEY);

    let sender = net.nodes[0].qp.qpn.value();
    for (n, want) in [(0usize, vec![100u64]), (1, vec![101, 200]), (2, vec![102]), (3, vec![])] {
        let mut got: Vec<(u64, WcStatus, u32, u32)> =
            net.recvs(n).iter().map(|w| (w.wr_id, w.status, w.src_qp, w.byte_len)).collect();
        got.sort_unstable_by_key(|g| g.0);
        let want: Vec<_> = want.iter().map(|&id| (id, WcStatus::Success, sender, (GRH_LEN + 300) as u32)).collect();
        assert_eq!(got, want, "node {n}");
    }
    // Each copy holds the payload after a GRH area whose destination is the group.
    for (n, off) in [(1usize, 0usize), (1, 2048), (2, 0)] {
        let buf = net.read(n, off, GRH_LEN + 300);
        assert_eq!(buf[GRH_LEN..], data[..], "node {n} at {off}");
        assert_eq!(buf[36..40], [230, 0, 0, 1], "the IPv4 destination in the GRH area");
        assert_eq!(buf[32..36], [10, 0, 2, 1], "the IPv4 source");
    }
    // The datagram left once.
    assert_eq!(Pair::wcs(&net.nodes[0].scq).len(), 1);
}

#[test]
fn each_qp_checks_its_own_qkey() {
    let mut net = Net::new(&["10.0.2.1", "10.0.2.2"]);
    let other = net.extra_qp(1, 0x7777_7777);
    let qpn = net.nodes[1].qp.qpn;
    net.attach(1, qpn);
    net.attach(1, other.qpn);
    let qp = net.nodes[1].qp.clone();
    net.post_recv(1, &qp, 1, 0);
    net.post_recv(1, &other, 2, 2048);
    net.send_to_group(0, b"hello", QKEY);
    // IBA C10-15: the QP whose Q_Key differs drops its copy; the other takes it.
    assert_eq!(net.recvs(1).iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1]);
    assert_eq!(net.counter(1, "qkey_viol_cntr"), 1);
}

#[test]
fn a_detached_qp_receives_nothing_and_an_empty_group_nothing_at_all() {
    let mut net = Net::new(&["10.0.2.1", "10.0.2.2"]);
    let b2 = net.extra_qp(1, QKEY);
    let qpn = net.nodes[1].qp.qpn;
    net.attach(1, qpn);
    net.attach(1, b2.qpn);
    let qp = net.nodes[1].qp.clone();
    net.post_recv(1, &qp, 1, 0);
    net.post_recv(1, &b2, 2, 2048);
    // The first QP leaves: the group stays (b2 is in it).
    assert_eq!(net.fab.engine(1).detach_mcast(qpn, group()), Ok(false));
    net.send_to_group(0, b"one", QKEY);
    assert_eq!(net.recvs(1).iter().map(|w| w.wr_id).collect::<Vec<_>>(), [2]);
    // The last QP leaves: the node is no longer in the group.
    assert_eq!(net.fab.engine(1).detach_mcast(b2.qpn, group()), Ok(true));
    assert!(!net.fab.engine(1).is_mcast_member(group()));
    net.send_to_group(0, b"two", QKEY);
    assert!(net.recvs(1).is_empty());
    // A packet that reaches an engine for a group it has no QP in is addressed to no QP.
    let before = net.counter(1, "unknown_qp_pkts");
    let wire = ud_packet(Qpn::MULTICAST, QKEY, net.nodes[0].qp.qpn);
    net.fab.engine(1).handle_multicast(0, "10.0.2.1".parse().unwrap(), group(), &wire, false);
    assert_eq!(net.counter(1, "unknown_qp_pkts"), before + 1);
}

/// A UD SEND_ONLY of 4 bytes to `dest_qp` from `src_qp` (BTH, DETH, payload, ICRC space).
fn ud_packet(dest_qp: Qpn, qkey: u32, src_qp: Qpn) -> Vec<u8> {
    let mut p = vec![0x64, 0, 0xff, 0xff, 0];
    p.extend(&dest_qp.value().to_be_bytes()[1..]);
    p.extend([0, 0, 0, 1]);
    p.extend(qkey.to_be_bytes());
    p.push(0);
    p.extend(&src_qp.value().to_be_bytes()[1..]);
    p.extend(b"data");
    p.extend([0; 4]);
    p
}

#[test]
fn a_packet_to_the_group_must_be_for_qpn_0xffffff() {
    let mut net = Net::new(&["10.0.2.1", "10.0.2.2"]);
    let qpn = net.nodes[1].qp.qpn;
    net.attach(1, qpn);
    let qp = net.nodes[1].qp.clone();
    net.post_recv(1, &qp, 1, 0);
    // Sent to the group's address but to B's QPN: IBA 10.5.2.1 gives a multicast packet
    // DestQP 0xFFFFFF, so this one is for no QP.
    let src: IpAddr = "10.0.2.1".parse().unwrap();
    let data = ud_packet(qpn, QKEY, net.nodes[0].qp.qpn);
    net.fab.inject(Wire { src, dst: group(), src_port: 0xc000, data, ce: false });
    let deadline = net.fab.now() + 1_000_000_000;
    net.fab.run_until(deadline);
    assert!(net.recvs(1).is_empty());
    assert_eq!(net.counter(1, "unknown_qp_pkts"), 1);
    // And QPN 0xFFFFFF sent to B's own (unicast) address finds no QP either.
    let data = ud_packet(Qpn::MULTICAST, QKEY, net.nodes[0].qp.qpn);
    net.fab.inject(Wire { src, dst: net.nodes[1].ip, src_port: 0xc000, data, ce: false });
    let deadline = net.fab.now() + 1_000_000_000;
    net.fab.run_until(deadline);
    assert!(net.recvs(1).is_empty());
    assert_eq!(net.counter(1, "unknown_qp_pkts"), 2);
    // The right packet is taken.
    let data = ud_packet(Qpn::MULTICAST, QKEY, net.nodes[0].qp.qpn);
    net.fab.inject(Wire { src, dst: group(), src_port: 0xc000, data, ce: false });
    let deadline = net.fab.now() + 1_000_000_000;
    net.fab.run_until(deadline);
    assert_eq!(net.recvs(1).iter().map(|w| (w.wr_id, w.byte_len)).collect::<Vec<_>>(), [(1, 44)]);
}

#[test]
fn only_ud_qps_attach_and_a_destroyed_qp_leaves_its_groups() {
    let mut fab = Fabric::new(2_000);
    let rc = typed_node(&mut fab, "10.0.2.1", QpCap::default(), QpType::Rc);
    let e = fab.engine(0);
    assert!(matches!(e.attach_mcast(rc.qp.qpn, group()), Err(EngineError::BadAttr(_))));
    assert_eq!(e.attach_mcast(Qpn::new(0x999), group()), Err(EngineError::NoSuchQp(0x999)));
    let ud = e.create_qp(QpInit::new(QpType::Ud, rc.pd, rc.scq.clone(), rc.rcq.clone())).unwrap();
    assert!(matches!(e.attach_mcast(ud.qpn, "10.0.0.9".parse().unwrap()), Err(EngineError::BadAttr(_))));
    assert!(matches!(e.detach_mcast(ud.qpn, group()), Err(EngineError::BadAttr(_))), "not attached");
    assert_eq!(e.attach_mcast(ud.qpn, group()), Ok(true));
    assert_eq!(e.attach_mcast(ud.qpn, "ff0e::1".parse().unwrap()), Ok(true));
    let mut left = e.detach_all_mcast(ud.qpn);
    left.sort();
    assert_eq!(left, vec![group(), "ff0e::1".parse::<IpAddr>().unwrap()]);
    assert_eq!(e.attach_mcast(ud.qpn, group()), Ok(true));
    e.destroy_qp(ud.qpn).unwrap();
    assert!(e.mcast_groups().is_empty());
}
