//! `rnic ladder` told as stories: captures made on the deterministic virtual-time fabric
//! (so times and fates replay exactly) are drawn and compared with golden drawings; every
//! capture in ../shared/vectors and two real Linux rxe captures draw without error; the
//! HTML page opens in headless Chromium with one arrow per packet.
//!
//! Golden files live in tools/tests/golden; `UPDATE_GOLDEN=1 cargo test -p rnic-tools
//! --test ladder_cli` rewrites them (read the diff before committing it).

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
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

fn rnic() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rnic"))
}

fn shared() -> PathBuf {
    std::env::var_os("RNIC_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared")))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rnic-ladder-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

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

/// Writes the fabric's trace (every packet as sent, dropped ones included, as a sender's
/// capture holds them) as an Ethernet pcap with nanosecond timestamps from time 1 s.
fn write_pcap(fab: &mut Fabric, path: &Path) {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_3c4d_u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    for t in fab.trace.take().unwrap() {
        if matches!(t.verdict, Verdict::Drop) {
            // Lost on the way: still in the sender's capture.
        }
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
    std::fs::write(path, out).unwrap();
}

fn ladder(pcap: &Path, extra: &[&str]) -> String {
    let out = rnic().arg("ladder").arg(pcap).args(["--width", "100", "--color", "never"]).args(extra).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Compares with tools/tests/golden/NAME.txt (or writes it with UPDATE_GOLDEN=1), and
/// checks the capture with Wireshark's dissector when tshark is there.
fn golden(name: &str, fab: &mut Fabric) -> PathBuf {
    let pcap = tmp(&format!("{name}.pcap"));
    write_pcap(fab, &pcap);
    let got = ladder(&pcap, &[]);
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden")).join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("{} missing: run with UPDATE_GOLDEN=1", path.display()));
    assert_eq!(got, want, "the ladder of {name} changed:\n{got}");
    let check = shared().join("vectors/check_pcap.sh");
    if check.exists() && Command::new("tshark").arg("--version").output().is_ok() {
        let out = Command::new("bash").arg(&check).arg(&pcap).output().unwrap();
        assert!(out.status.success(), "check_pcap.sh {name}: {}", String::from_utf8_lossy(&out.stdout));
    }
    pcap
}

#[test]
fn a_send_of_three_packets_and_its_ack() {
    let (mut fab, nodes) = pair(QpType::Rc);
    recv(&mut fab, &nodes, 1, 4096);
    post(&mut fab, &nodes, 0, SendWr::send(1, vec![sge(&nodes[0], 0, 3000)]));
    fab.run_until(10_000_000);
    golden("send", &mut fab);
}

#[test]
fn a_lossy_write_draws_the_sequence_nak_and_go_back_n() {
    let (mut fab, nodes) = pair(QpType::Rc);
    // Lose the second packet of a five-packet WRITE: the responder NAKs the gap once, the
    // requester goes back to the lost PSN.
    fab.add_rule(Fault::drop().opcode(Opcode::RC_RDMA_WRITE_MIDDLE).nth(1));
    let (ip, key) = (nodes[1].iova, nodes[1].keys.rkey);
    post(
        &mut fab,
        &nodes,
        0,
        SendWr::new(1, SendOp::RdmaWrite { remote_addr: ip, rkey: key }, vec![sge(&nodes[0], 0, 4 * 1024 + 100)]),
    );
    fab.run_until(10_000_000);
    let pcap = golden("lossy_write", &mut fab);
    let text = ladder(&pcap, &[]);
    assert!(text.contains("NAK seq") && text.contains("[RETRANSMIT]"), "{text}");
}

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
    golden("read", &mut fab);
}

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
    golden("ud", &mut fab);
}

#[test]
fn filters_cut_the_ladder() {
    let (mut fab, nodes) = pair(QpType::Rc);
    recv(&mut fab, &nodes, 1, 4096);
    post(&mut fab, &nodes, 0, SendWr::send(1, vec![sge(&nodes[0], 0, 3000)]));
    fab.run_until(10_000_000);
    let pcap = tmp("filters.pcap");
    write_pcap(&mut fab, &pcap);
    let all = ladder(&pcap, &[]);
    assert!(all.starts_with(' ') && all.contains("SEND_FIRST"), "{all}");
    let two = ladder(&pcap, &["--max", "2"]);
    assert!(two.contains("2 packets between"), "{two}");
    let late = ladder(&pcap, &["--from", "3"]);
    assert!(!late.contains("SEND_FIRST") && late.contains("ACK"), "{late}");
    let none = ladder(&pcap, &["--qp", "0x999"]);
    assert!(none.contains("0 packets"), "{none}");
    let mine = ladder(&pcap, &["--qp", &nodes[1].qp.qpn.value().to_string()]);
    assert!(mine.contains("4 packets"), "{mine}");
    // Colour only when asked (stdout here is a pipe).
    assert!(!all.contains('\x1b'));
    let out = rnic().arg("ladder").arg(&pcap).args(["--color", "always"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("\x1b[32m"));
}

#[test]
fn every_vector_and_rxe_capture_draws() {
    let v = shared().join("vectors");
    let data = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data"));
    for (p, arrows) in [
        (v.join("roce_vectors.pcap"), 289),
        (v.join("roce_bad_icrc.pcap"), 6),
        (data.join("rc_pingpong_64.pcap"), 16),
        (data.join("rping_rdmacm.pcap"), 41),
    ] {
        let text = ladder(&p, &[]);
        assert!(
            text.contains(&format!("{arrows} packets between")),
            "{}: {}",
            p.display(),
            text.lines().last().unwrap()
        );
    }
    let bad = ladder(&v.join("roce_bad_icrc.pcap"), &[]);
    assert!(bad.contains("6 with a bad ICRC"), "{bad}");
    let cm = ladder(&data.join("rping_rdmacm.pcap"), &[]);
    for m in ["MAD CM REQ", "MAD CM REP", "MAD CM RTU", "MAD CM DREQ", "MAD CM DREP", "READ req"] {
        assert!(cm.contains(m), "{m} missing:\n{cm}");
    }
    // Not a capture, and a truncated one: an error, not a panic.
    let out = rnic().arg("ladder").arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let whole = std::fs::read(data.join("rc_pingpong_64.pcap")).unwrap();
    let cut = tmp("cut.pcap");
    std::fs::write(&cut, &whole[..whole.len() - 7]).unwrap();
    let out = rnic().arg("ladder").arg(&cut).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
}

/// The HTML page in a real browser: it renders (the screenshot is not blank) and its DOM
/// has one arrow per packet.
#[test]
fn the_html_page_opens_in_headless_chromium_with_one_arrow_per_packet() {
    let data = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data"));
    let html = tmp("rping.html");
    let out = rnic().arg("ladder").arg(data.join("rping_rdmacm.pcap")).arg("--html").arg(&html).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(!page.contains("http://") && !page.contains("https://"), "self-contained: no network");
    let Some(chromium) = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
    else {
        assert!(std::env::var_os("CI").is_none(), "CI must have chromium (.ci/run installs it)");
        eprintln!("SKIPPED: no chromium on this machine (apt-get install chromium)");
        return;
    };
    let profile = tmp("chromium-profile");
    let base = |extra: &[&str]| {
        let mut c = Command::new(chromium);
        c.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra);
        c
    };
    let url = format!("file://{}", html.display());
    let dom = base(&["--dump-dom"]).arg(&url).output().unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert_eq!(dom.matches("class=\"arrow ").count(), 41, "one arrow per packet in the DOM");
    assert!(dom.contains("MAD CM REQ"));
    let png = tmp("rping.png");
    let _ = std::fs::remove_file(&png);
    let shot =
        base(&[&format!("--screenshot={}", png.display()), "--window-size=1100,900"]).arg(&url).output().unwrap();
    let bytes =
        std::fs::read(&png).unwrap_or_else(|_| panic!("no screenshot: {}", String::from_utf8_lossy(&shot.stderr)));
    assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
    // A blank white page compresses to a few hundred bytes; a drawn ladder does not.
    assert!(bytes.len() > 10_000, "the screenshot looks blank ({} bytes)", bytes.len());
}
