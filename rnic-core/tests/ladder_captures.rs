//! The captures `rnic ladder` is told with (tools/tests/ladder_cli.rs), made here on the
//! deterministic virtual-time fabric so times and fates replay exactly: two engines, one QP
//! each, a fixed seed, fixed PSNs and a fixed I/O address; the fabric's trace of every packet
//! sent (dropped ones included, as a sender's capture holds them) is written as a pcap and
//! compared byte for byte with the committed golden capture tools/tests/golden/NAME.pcap.
//! So this test proves "the fabric produces exactly these captures", and the tools crate
//! draws them without depending on rnic-core.
//!
//! `UPDATE_GOLDEN=1 cargo test -p rnic-core --test ladder_captures` rewrites the captures
//! (then `UPDATE_GOLDEN=1 cargo test -p rnic-tools --test ladder_cli` redraws the ladders;
//! read both diffs before committing them).

use rnic_core::counters::Counters;
use rnic_core::cq::Cq;
use rnic_core::engine::qp::QpInit;
use rnic_core::engine::qp::{validate_recv, validate_send, QpAttr, QpShared};
use rnic_core::engine::{Engine, EngineConfig};
use rnic_core::fabric::Fabric;
use rnic_core::faults::{Fault, Verdict};
use rnic_core::mem::MemBlock;
use rnic_core::mr::{AccessFlags, MrKeys, Mtpt, PdId};
use rnic_core::qp_state::QpType;
use rnic_core::wr::{RecvWr, SendOp, SendWr, Sge, UdDest};
use rnic_wire::Opcode;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// The responder's (node 1's) QPN in every capture: tools/tests/ladder_cli.rs filters the
/// send capture with `--qp` on it.
const RESPONDER_QPN: u32 = 0x11;

struct Node {
    ip: IpAddr,
    mtpt: Arc<Mtpt>,
    keys: MrKeys,
    iova: u64,
    qp: Arc<QpShared>,
}

const MEM: usize = 1 << 20;

/// Two engines on the fabric with one QP each of `qp_type`, connected (RC/UC) or active
/// (UD), at path MTU 1024; the fabric keeps a trace of every packet sent.
fn pair(qp_type: QpType) -> (Fabric, [Node; 2]) {
    let mut fab = Fabric::new(5_000).with_seed(1);
    fab.trace = Some(Vec::new());
    let mut nodes = Vec::new();
    for ip in ["10.0.0.1", "10.0.0.2"] {
        let ip: IpAddr = ip.parse().unwrap();
        let mtpt = Arc::new(Mtpt::new(16));
        let mut e = Engine::new(EngineConfig::new(ip), mtpt.clone(), Arc::new(Counters::default()));
        let mem = Arc::new(MemBlock::new(MEM).unwrap());
        // A fixed I/O address, so the drawings (which show RETH addresses) replay exactly.
        let iova = 0x10_0000;
        let keys = mtpt.register(PdId(1), mem.clone(), 0, MEM, iova, AccessFlags::REGISTRABLE).unwrap();
        let (scq, rcq) = (Arc::new(Cq::new(1, 256)), Arc::new(Cq::new(2, 256)));
        let qp = e.create_qp(QpInit::new(qp_type, PdId(1), scq, rcq)).unwrap();
        fab.add(e);
        nodes.push(Node { ip, mtpt, keys, iova, qp });
    }
    let nodes: [Node; 2] = nodes.try_into().ok().unwrap();
    assert_eq!(nodes[1].qp.qpn.value(), RESPONDER_QPN, "ladder_cli's --qp filter names this QPN");
    for me in 0..2 {
        let other = &nodes[1 - me];
        let attr = QpAttr {
            access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            remote_ip: (qp_type != QpType::Ud).then_some(other.ip),
            path_mtu: 3,
            dest_qpn: other.qp.qpn.value(),
            rq_psn: [0x100, 0x200][1 - me],
            sq_psn: [0x100, 0x200][me],
            max_dest_rd_atomic: 4,
            max_rd_atomic: 4,
            min_rnr_timer: 1,
            timeout: 8,
            retry_cnt: 7,
            rnr_retry: 7,
            qkey: 0x1111_1111,
            ..QpAttr::default()
        };
        for a in attr.bring_up(qp_type) {
            fab.engine(me).modify_qp(0, nodes[me].qp.qpn, &a).unwrap();
        }
    }
    (fab, nodes)
}

fn sge(n: &Node, off: u64, len: u32) -> Sge {
    Sge { addr: n.iova + off, length: len, lkey: n.keys.lkey }
}

fn post(fab: &mut Fabric, nodes: &[Node; 2], i: usize, wr: SendWr) {
    let wqe = validate_send(&nodes[i].qp, &nodes[i].mtpt, &wr).unwrap();
    let now = fab.now();
    fab.engine(i).post_send(now, nodes[i].qp.qpn, wqe);
}

fn recv(fab: &mut Fabric, nodes: &[Node; 2], i: usize, len: u32) {
    let wr = RecvWr { wr_id: 9, sg_list: vec![sge(&nodes[i], 0, len)] };
    let wqe = validate_recv(&nodes[i].qp, &nodes[i].mtpt, &wr).unwrap();
    fab.engine(i).post_recv(nodes[i].qp.qpn, wqe);
}

/// The fabric's trace (every packet as sent, dropped ones included, as a sender's capture
/// holds them) as an Ethernet pcap with nanosecond timestamps from time 1 s, and how many
/// of its packets the fabric dropped.
fn write_pcap(fab: &mut Fabric) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_3c4d_u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    let mut dropped = 0;
    for t in fab.trace.take().unwrap() {
        // Lost on the way: still in the sender's capture.
        dropped += usize::from(matches!(t.verdict, Verdict::Drop));
        let frame = rnic_core::capture::frame_for(
            t.pkt.src,
            t.pkt.dst,
            t.pkt.src_port,
            rnic_wire::ROCEV2_UDP_PORT,
            &t.pkt.data,
        );
        let ns = 1_000_000_000 + t.at;
        out.extend_from_slice(&u32::try_from(ns / 1_000_000_000).unwrap().to_le_bytes());
        out.extend_from_slice(&u32::try_from(ns % 1_000_000_000).unwrap().to_le_bytes());
        let len = u32::try_from(frame.len()).unwrap().to_le_bytes();
        out.extend_from_slice(&len);
        out.extend_from_slice(&len);
        out.extend_from_slice(&frame);
    }
    (out, dropped)
}

/// Compares the fabric's capture with tools/tests/golden/NAME.pcap (or writes it with
/// UPDATE_GOLDEN=1); returns how many of its packets were dropped.
fn golden(name: &str, fab: &mut Fabric) -> usize {
    let (got, dropped) = write_pcap(fab);
    let path =
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../tools/tests/golden")).join(format!("{name}.pcap"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read(&path).unwrap_or_else(|_| panic!("{} missing: run with UPDATE_GOLDEN=1", path.display()));
    if got != want {
        let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
        panic!(
            "the capture of {name} changed: {} bytes, golden {} bytes, first difference at byte {at} \
             (UPDATE_GOLDEN=1 rewrites it; then redraw the ladders)",
            got.len(),
            want.len()
        );
    }
    dropped
}

/// send.pcap: a three-packet SEND (MTU 1024) and its ACK. ladder_cli draws it and also
/// cuts it with the filters (--max, --from, --qp).
#[test]
fn a_send_of_three_packets_and_its_ack() {
    let (mut fab, nodes) = pair(QpType::Rc);
    recv(&mut fab, &nodes, 1, 4096);
    post(&mut fab, &nodes, 0, SendWr::send(1, vec![sge(&nodes[0], 0, 3000)]));
    fab.run_until(10_000_000);
    assert_eq!(golden("send", &mut fab), 0);
}

/// lossy_write.pcap: a five-packet WRITE whose second packet is lost; the responder NAKs
/// the gap once, the requester goes back to the lost PSN.
#[test]
fn a_lossy_write_with_a_sequence_nak_and_go_back_n() {
    let (mut fab, nodes) = pair(QpType::Rc);
    fab.add_rule(Fault::drop().opcode(Opcode::RC_RDMA_WRITE_MIDDLE).nth(1));
    let (ip, key) = (nodes[1].iova, nodes[1].keys.rkey);
    post(
        &mut fab,
        &nodes,
        0,
        SendWr::new(1, SendOp::RdmaWrite { remote_addr: ip, rkey: key }, vec![sge(&nodes[0], 0, 4 * 1024 + 100)]),
    );
    fab.run_until(10_000_000);
    assert_eq!(golden("lossy_write", &mut fab), 1, "one WRITE_MIDDLE lost");
}

/// read.pcap: a 2500-byte READ and its three responses.
#[test]
fn a_read_and_its_responses() {
    let (mut fab, nodes) = pair(QpType::Rc);
    let (ip, key) = (nodes[1].iova, nodes[1].keys.rkey);
    post(
        &mut fab,
        &nodes,
        0,
        SendWr::new(1, SendOp::RdmaRead { remote_addr: ip, rkey: key }, vec![sge(&nodes[0], 0, 2500)]),
    );
    fab.run_until(10_000_000);
    assert_eq!(golden("read", &mut fab), 0);
}

/// ud.pcap: one 512-byte UD SEND each way.
#[test]
fn a_ud_exchange() {
    let (mut fab, nodes) = pair(QpType::Ud);
    recv(&mut fab, &nodes, 1, 40 + 512);
    recv(&mut fab, &nodes, 0, 40 + 512);
    for (from, to) in [(0, 1), (1, 0)] {
        let mut wr = SendWr::send(1, vec![sge(&nodes[from], 4096, 512)]);
        wr.ud = Some(UdDest { dst: nodes[to].ip, remote_qpn: nodes[to].qp.qpn.value(), remote_qkey: 0x1111_1111 });
        post(&mut fab, &nodes, from, wr);
        fab.run_until(fab.now() + 1_000_000);
    }
    assert_eq!(golden("ud", &mut fab), 0);
}
