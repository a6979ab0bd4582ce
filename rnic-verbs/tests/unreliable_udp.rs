//! UC and UD through the verbs API over real UDP on loopback (addresses 127.0.52.x), a
//! capture of UD traffic checked by Wireshark's dissector, and two processes doing UD
//! ping-pong with ibv_ud_pingpong's out-of-band exchange.
#![allow(clippy::cast_possible_truncation)]

use rnic_core::device::DeviceConfig;
use rnic_verbs::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);
const QKEY: u32 = 0x1111_1111;

struct End {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn end_with(config: DeviceConfig) -> End {
    let ctx = Context::open_with(DeviceConfig { pin_memory: false, ..config }).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let mr = pd.allocate_mr(1 << 20, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).unwrap();
    End { ctx, pd, cq, mr }
}

fn end(name: &str, ip: &str) -> End {
    end_with(DeviceConfig { capture: None, ..DeviceConfig::new(name, ip.parse().unwrap()) })
}

/// A device's counters that are not zero, for a failure's message.
fn nonzero(ctx: &Context) -> Vec<(String, u64)> {
    ctx.counters().into_iter().filter(|c| c.1 != 0).collect()
}

fn bytes(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed)).collect()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rnic-unreliable-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// The GRH area of a datagram from `src` to `dst` with `payload` bytes: 20 zero bytes, then
/// the IPv4 header with ID 0, DF, TTL 64, protocol UDP, and its checksum.
fn ipv4_grh(src: Ipv4Addr, dst: Ipv4Addr, payload: usize, imm: bool) -> Vec<u8> {
    let roce = 12 + 8 + if imm { 4 } else { 0 } + payload.div_ceil(4) * 4 + 4;
    let total = ((20 + 8 + roce) as u16).to_be_bytes();
    let mut h = vec![0x45, 0, total[0], total[1], 0, 0, 0x40, 0, 64, 17, 0, 0];
    h.extend(src.octets());
    h.extend(dst.octets());
    let mut sum: u32 = h.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let mut g = vec![0; 20];
    g.extend(h);
    g
}

#[test]
fn uc_send_and_write_over_udp() {
    let a = end("rnic0", "127.0.52.1");
    let b = end("rnic1", "127.0.52.2");
    let qa = a.pd.qp_builder(&a.cq, &a.cq).qp_type(QpType::Uc).mtu(PathMtu::Mtu1024).build().unwrap();
    let qb = b.pd.qp_builder(&b.cq, &b.cq).qp_type(QpType::Uc).mtu(PathMtu::Mtu1024).build().unwrap();
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let (qa, qb) = (qa.connect(&eb).unwrap(), qb.connect(&ea).unwrap());
    assert_eq!((qa.qp_type(), qa.state()), (QpType::Uc, QpState::Rts));
    for (i, len) in [0usize, 1, 1023, 1024, 1025, 70_000].into_iter().enumerate() {
        let d = bytes(i as u8, len);
        a.mr.write(0, &d).unwrap();
        qb.post_recv(&RecvWr { wr_id: 1, sg_list: vec![b.mr.sge(0, len as u32)] }).unwrap();
        qa.post_send(&SendWr::send(2, vec![a.mr.sge(0, len as u32)])).unwrap();
        assert_eq!(a.cq.wait(1, T).unwrap()[0].status, WcStatus::Success);
        let r = b.cq.wait(1, T).unwrap()[0];
        assert_eq!((r.status, r.byte_len as usize, r.src_qp), (WcStatus::Success, len, qa.qpn()));
        let mut got = vec![0; len];
        b.mr.read(0, &mut got).unwrap();
        assert!(got == d, "UC SEND {len}");
        let rm = b.mr.remote();
        qb.post_recv(&RecvWr { wr_id: 3, sg_list: vec![] }).unwrap();
        let op = SendOp::RdmaWriteWithImm { remote_addr: rm.addr + 200_000, rkey: rm.rkey, imm: i as u32 };
        qa.post_send(&SendWr::new(4, op, vec![a.mr.sge(0, len as u32)])).unwrap();
        assert_eq!(a.cq.wait(1, T).unwrap()[0].opcode, WcOpcode::RdmaWrite);
        let r = b.cq.wait(1, T).unwrap()[0];
        assert_eq!((r.opcode, r.imm_data, r.byte_len as usize), (WcOpcode::RecvRdmaWithImm, i as u32, len));
        b.mr.read(200_000, &mut got).unwrap();
        assert!(got == d, "UC WRITE {len}");
    }
    let read = SendOp::RdmaRead { remote_addr: b.mr.remote().addr, rkey: b.mr.remote().rkey };
    let e = qa.post_send(&SendWr::new(9, read, vec![a.mr.sge(0, 8)])).unwrap_err();
    assert!(e.report().contains("RDMA_READ is not supported on a UC QP"), "{e}");
    // UC has no acknowledgements: b sent nothing but congestion notifications (a CNP,
    // when the 70,000-byte messages queued up at its socket long enough to be marked).
    let sent = b.ctx.counter("sent_pkts").unwrap() - b.ctx.counter("np_cnp_sent").unwrap();
    assert_eq!(sent, 0, "{:?}", nonzero(&b.ctx));
}

#[test]
fn ud_api_errors_are_precise() {
    let a = end("rnic0", "127.0.52.5");
    let prepared = a.pd.qp_builder(&a.cq, &a.cq).qp_type(QpType::Ud).build().unwrap();
    let e =
        a.pd.qp_builder(&a.cq, &a.cq).qp_type(QpType::Ud).build().unwrap().connect(&prepared.endpoint()).unwrap_err();
    assert!(e.report().contains("UD, which is not connected: use activate()"), "{e}");
    let e = a.pd.qp_builder(&a.cq, &a.cq).build().unwrap().activate().unwrap_err();
    assert!(e.report().contains("connected QPs use connect"), "{e}");
    let qp = prepared.activate().unwrap();
    assert_eq!(qp.query().unwrap().qkey, DEFAULT_QKEY);
    let e = a.pd.create_ah(Gid([0; 16])).unwrap_err();
    assert!(e.report().contains("all zeros"), "{e}");
    let e = a.pd.create_ah(Gid::from_ip("fd00::1".parse().unwrap())).unwrap_err();
    assert!(e.report().contains("not of the same IP version"), "{e}");
    let e = qp.post_send(&SendWr::send(1, vec![a.mr.sge(0, 8)])).unwrap_err();
    assert!(e.report().contains("needs a destination"), "{e}");
    let ah = a.pd.create_ah(Gid::from_ip("127.0.52.6".parse().unwrap())).unwrap();
    let e = qp.post_send(&SendWr::send(1, vec![a.mr.sge(0, 4097)]).to(ah.dest(0x11, QKEY))).unwrap_err();
    assert!(e.report().contains("UD message of 4097 bytes exceeds the port MTU of 4096"), "{e}");
    let e = a.pd.create_ah_from_grh(&[0; 40]).unwrap_err();
    assert!(e.report().contains("neither an IPv4 header"), "{e}");
}

/// A receive posted before the peer sends is there when the datagram arrives, however the
/// post meets the receiver's progress round: a post made while a round runs is queued for
/// the progress thread, and a round that then read the datagram handled it first (a UD
/// drop that failed the capture test below in CI; this test failed 3 runs in 5 before).
#[test]
fn a_receive_posted_before_the_peer_sends_is_always_there() {
    // Three pairs at once: six progress threads and three posting threads on a few cores,
    // so that posts often land while the receiver's round is between its two halves.
    let pairs: Vec<_> = (0..3u8)
        .map(|p| {
            std::thread::spawn(move || {
                let a = end("rnic0", &format!("127.0.52.{}", 31 + 2 * p));
                let b = end("rnic1", &format!("127.0.52.{}", 32 + 2 * p));
                let ud = |e: &End| e.pd.qp_builder(&e.cq, &e.cq).qp_type(QpType::Ud).qkey(QKEY).build().unwrap();
                let (pa, pb) = (ud(&a), ud(&b));
                let eb = pb.endpoint();
                let (qa, qb) = (pa.activate().unwrap(), pb.activate().unwrap());
                let ah = a.pd.create_ah(eb.gid).unwrap();
                for i in 0..3000u32 {
                    qb.post_recv(&RecvWr { wr_id: u64::from(i), sg_list: vec![b.mr.sge(0, 100)] }).unwrap();
                    qa.post_send(&SendWr::send(1, vec![a.mr.sge(0, 8)]).to(ah.dest(eb.qpn, QKEY))).unwrap();
                    assert_eq!(a.cq.wait(1, T).unwrap()[0].status, WcStatus::Success);
                    let wc = b.cq.wait(1, T).unwrap_or_else(|e| panic!("datagram {i}: {e}; {:?}", nonzero(&b.ctx)));
                    assert_eq!((wc[0].status, wc[0].wr_id), (WcStatus::Success, u64::from(i)));
                }
                assert_eq!(b.ctx.counter("ud_dropped_pkts"), Some(0));
            })
        })
        .collect();
    for p in pairs {
        p.join().unwrap();
    }
}

/// A UD QP on a device capturing its traffic pings two peers, which answer from the GRH;
/// the capture passes Wireshark's dissector (DETH decoded) and the ICRC check.
#[test]
fn ud_ping_two_peers_over_udp_with_a_checked_capture() {
    let pcap = tmp("ud.pcap");
    let _ = std::fs::remove_file(&pcap);
    let (ip_a, ip_b, ip_c) = ("127.0.52.11", "127.0.52.12", "127.0.52.13");
    {
        let a =
            end_with(DeviceConfig { capture: Some(pcap.clone()), ..DeviceConfig::new("rnic0", ip_a.parse().unwrap()) });
        let b = end("rnic1", ip_b);
        let c = end("rnic2", ip_c);
        let ud = |e: &End| e.pd.qp_builder(&e.cq, &e.cq).qp_type(QpType::Ud).qkey(QKEY).build().unwrap();
        let (pa, pb, pc) = (ud(&a), ud(&b), ud(&c));
        let (eb, ec) = (pb.endpoint(), pc.endpoint());
        let (qa, qb, qc) = (pa.activate().unwrap(), pb.activate().unwrap(), pc.activate().unwrap());
        for round in 0..3u8 {
            for (peer, q, ep) in [(&b, &qb, &eb), (&c, &qc, &ec)] {
                peer.mr.write(0, &[0xa5; 200]).unwrap();
                q.post_recv(&RecvWr { wr_id: 1, sg_list: vec![peer.mr.sge(0, 200)] }).unwrap();
                qa.post_recv(&RecvWr { wr_id: 2, sg_list: vec![a.mr.sge(4096, 200)] }).unwrap();
                let ping = bytes(round, 100);
                a.mr.write(0, &ping).unwrap();
                let ah = a.pd.create_ah(ep.gid).unwrap();
                let wr = SendWr::new(3, SendOp::SendWithImm { imm: u32::from(round) }, vec![a.mr.sge(0, 100)]);
                qa.post_send(&wr.to(ah.dest(ep.qpn, QKEY))).unwrap();
                assert_eq!(a.cq.wait(1, T).unwrap()[0].status, WcStatus::Success);
                let wc = peer.cq.wait(1, T).unwrap_or_else(|e| {
                    panic!("round {round}, {}: {e}; its counters {:?}", peer.ctx.ip(), nonzero(&peer.ctx))
                })[0];
                assert_eq!(
                    (wc.status, wc.byte_len, wc.src_qp, wc.imm_data),
                    (WcStatus::Success, 140, qa.qpn(), u32::from(round))
                );
                assert!(wc.wc_flags.contains(WcFlags::GRH) && wc.wc_flags.contains(WcFlags::WITH_IMM));
                let mut got = vec![0; 200];
                peer.mr.read(0, &mut got).unwrap();
                let me: Ipv4Addr = peer.ctx.ip().to_string().parse().unwrap();
                assert_eq!(got[..40], ipv4_grh(ip_a.parse().unwrap(), me, 100, true)[..], "GRH area");
                assert_eq!(got[40..140], ping[..]);
                assert!(got[140..].iter().all(|&x| x == 0xa5));
                // Answer whoever it was, from the GRH and the completion (ibv_create_ah_from_wc).
                let back = peer.pd.create_ah_from_grh(&got[..40]).unwrap();
                assert_eq!(back.gid().to_ip(), ip_a.parse::<IpAddr>().unwrap());
                let pong: Vec<u8> = ping.iter().rev().copied().collect();
                peer.mr.write(1024, &pong).unwrap();
                q.post_send(&SendWr::send(4, vec![peer.mr.sge(1024, 100)]).to(back.dest(wc.src_qp, QKEY))).unwrap();
                assert_eq!(peer.cq.wait(1, T).unwrap()[0].status, WcStatus::Success);
                let wc = a.cq.wait(1, T).unwrap()[0];
                assert_eq!((wc.status, wc.src_qp, wc.byte_len), (WcStatus::Success, q.qpn(), 140));
                let mut got = vec![0; 100];
                a.mr.read(4096 + 40, &mut got).unwrap();
                assert_eq!(got, pong);
            }
        }
        // A Q_Key mismatch over UDP: dropped and counted by the receiving port.
        qb.post_recv(&RecvWr { wr_id: 5, sg_list: vec![b.mr.sge(0, 200)] }).unwrap();
        let ah = a.pd.create_ah(eb.gid).unwrap();
        qa.post_send(&SendWr::send(6, vec![a.mr.sge(0, 10)]).to(ah.dest(eb.qpn, 0x2222))).unwrap();
        a.cq.wait(1, T).unwrap();
        let deadline = Instant::now() + T;
        while b.ctx.counter("qkey_viol_cntr") != Some(1) {
            assert!(Instant::now() < deadline, "the mismatched datagram was not counted");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(b.cq.is_empty());
        assert_eq!(a.ctx.counter("sent_pkts"), Some(7));
    }
    check_capture(&pcap, 13, &["UD Send Only Immediate", "UD Send Only", "0x0000000011111111", "0x0000000000002222"]);
}

/// Runs ../shared/vectors/check_pcap.sh on a capture when tshark is installed.
fn check_capture(pcap: &PathBuf, min_packets: usize, must_show: &[&str]) {
    let len = std::fs::metadata(pcap).unwrap().len();
    assert!(len > 24 + min_packets as u64 * 16, "the capture is too short: {len} bytes");
    let have_tshark = Command::new("tshark").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    if !have_tshark {
        eprintln!("tshark not installed: check_pcap.sh skipped (.ci/run installs it)");
        return;
    }
    let shared = std::env::var_os("RNIC_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared")));
    let out = Command::new(shared.join("vectors/check_pcap.sh")).arg(pcap).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "check_pcap.sh: {text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(&format!("RoCEv2 check summary: {min_packets} ok, 0 bad")), "{text}");
    for s in must_show {
        assert!(text.contains(s), "{s:?} not in the decode:\n{text}");
    }
}

// ---- two processes ----

/// ibv_ud_pingpong's out-of-band message: `"%04x:%06x:%06x:%s"` (LID, QPN, PSN, GID as 32
/// hex digits) and a NUL, 52 bytes.
fn oob_message(ep: &Endpoint) -> Vec<u8> {
    let mut v = format!("{:04x}:{:06x}:{:06x}:{}", 0, ep.qpn, ep.psn, ep.gid.to_wire_hex()).into_bytes();
    v.push(0);
    v
}

fn parse_oob(msg: &[u8]) -> Endpoint {
    let s = std::str::from_utf8(&msg[..51]).unwrap();
    let f: Vec<&str> = s.split(':').collect();
    Endpoint {
        qpn: u32::from_str_radix(f[1], 16).unwrap(),
        psn: u32::from_str_radix(f[2], 16).unwrap(),
        gid: Gid::from_wire_hex(f[3]).unwrap(),
    }
}

const ITERS: usize = 50;

/// Kills the child process if the test fails before waiting for it.
struct ChildGuard(Option<std::process::Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
const SIZE: usize = 2048;

/// The server side, run in a child process by `two_processes_do_ud_over_udp` (ignored on
/// its own: it waits for a client).
#[test]
#[ignore = "the server half of two_processes_do_ud_over_udp, run in a child process"]
fn ud_server_child_process() {
    let ip = std::env::var("RNIC_UD_SERVER_IP").expect("run by two_processes_do_ud_over_udp");
    let s = end("rnic1", &ip);
    let qp = s.pd.qp_builder(&s.cq, &s.cq).qp_type(QpType::Ud).qkey(QKEY).build().unwrap();
    let mine = qp.endpoint();
    let qp = qp.activate().unwrap();
    for i in 0..8 {
        qp.post_recv(&RecvWr { wr_id: i, sg_list: vec![s.mr.sge(i as usize * 8192, (GRH_LEN + SIZE) as u32)] })
            .unwrap();
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    println!("PORT {}", l.local_addr().unwrap().port());
    std::io::stdout().flush().unwrap();
    // Never outlive a client that died: give up after a while.
    l.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut tcp = loop {
        match l.accept() {
            Ok((t, _)) => break t,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("no client: {e}"),
        }
    };
    tcp.set_nonblocking(false).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut buf = [0u8; 52];
    tcp.read_exact(&mut buf).unwrap();
    let client = parse_oob(&buf);
    tcp.write_all(&oob_message(&mine)).unwrap();
    let mut done = [0u8; 5];
    tcp.read_exact(&mut done).unwrap();
    assert_eq!(&done, b"done\0");
    let ah = s.pd.create_ah(client.gid).unwrap();
    for n in 0..ITERS {
        let wc = loop {
            let wc = s.cq.wait(1, T).unwrap()[0];
            if wc.opcode == WcOpcode::Recv {
                break wc;
            }
            assert_eq!(wc.status, WcStatus::Success);
        };
        assert_eq!((wc.status, wc.byte_len as usize, wc.src_qp), (WcStatus::Success, GRH_LEN + SIZE, client.qpn));
        let off = wc.wr_id as usize * 8192;
        let mut got = vec![0; GRH_LEN + SIZE];
        s.mr.read(off, &mut got).unwrap();
        // The GRH says who sent it: the client's address, as its GID said.
        assert_eq!(s.pd.create_ah_from_grh(&got).unwrap().gid(), client.gid);
        assert!(got[GRH_LEN..] == bytes(n as u8, SIZE)[..], "ping {n}");
        // Pong: the same bytes plus one, from the same region after the GRH.
        let pong: Vec<u8> = got[GRH_LEN..].iter().map(|b| b.wrapping_add(1)).collect();
        s.mr.write(off + GRH_LEN, &pong).unwrap();
        qp.post_send(&SendWr::send(100, vec![s.mr.sge(off + GRH_LEN, SIZE as u32)]).to(ah.dest(client.qpn, QKEY)))
            .unwrap();
        // The send copies at transmission; wait for it before reusing the buffer.
        let sent = loop {
            let w = s.cq.wait(1, T).unwrap()[0];
            if w.opcode == WcOpcode::Send {
                break w;
            }
        };
        assert_eq!(sent.status, WcStatus::Success);
        qp.post_recv(&RecvWr { wr_id: wc.wr_id, sg_list: vec![s.mr.sge(off, (GRH_LEN + SIZE) as u32)] }).unwrap();
    }
    println!("SERVER OK {ITERS} pongs");
}

/// Two processes, each with its own device on its own 127.0.52.x address: the client (this
/// test) and a server (this test binary run again as a child) exchange ibv_ud_pingpong's
/// LID:QPN:PSN:GID over TCP, then ping-pong UD datagrams; the client captures its traffic.
#[test]
fn two_processes_do_ud_over_udp() {
    let (client_ip, server_ip) = ("127.0.52.21", "127.0.52.22");
    let mut child = ChildGuard(Some(
        Command::new(std::env::current_exe().unwrap())
            .args(["ud_server_child_process", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env("RNIC_UD_SERVER_IP", server_ip)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let mut lines = BufReader::new(child.0.as_mut().unwrap().stdout.take().unwrap()).lines();
    let port: u16 = loop {
        let line = lines.next().expect("the server exited before listening").unwrap();
        // libtest may print "test ud_server_child_process ... " on the same line first.
        if let Some(i) = line.find("PORT ") {
            break line[i + 5..].trim().parse().unwrap();
        }
    };
    let pcap = tmp("ud-two-process.pcap");
    let _ = std::fs::remove_file(&pcap);
    {
        let c = end_with(DeviceConfig {
            capture: Some(pcap.clone()),
            ..DeviceConfig::new("rnic0", client_ip.parse().unwrap())
        });
        let qp = c.pd.qp_builder(&c.cq, &c.cq).qp_type(QpType::Ud).qkey(QKEY).build().unwrap();
        let mine = qp.endpoint();
        let qp = qp.activate().unwrap();
        let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
        tcp.write_all(&oob_message(&mine)).unwrap();
        let mut buf = [0u8; 52];
        tcp.read_exact(&mut buf).unwrap();
        let server = parse_oob(&buf);
        assert_eq!(server.gid, Gid::from_ip(server_ip.parse().unwrap()));
        tcp.write_all(b"done\0").unwrap();
        let ah = c.pd.create_ah(server.gid).unwrap();
        for n in 0..ITERS {
            qp.post_recv(&RecvWr { wr_id: 1, sg_list: vec![c.mr.sge(65536, (GRH_LEN + SIZE) as u32)] }).unwrap();
            c.mr.write(0, &bytes(n as u8, SIZE)).unwrap();
            qp.post_send(&SendWr::send(2, vec![c.mr.sge(0, SIZE as u32)]).to(ah.dest(server.qpn, QKEY))).unwrap();
            let mut wcs = c.cq.wait(2, T).unwrap();
            wcs.sort_by_key(|w| w.wr_id);
            assert_eq!((wcs[0].status, wcs[0].opcode, wcs[0].src_qp), (WcStatus::Success, WcOpcode::Recv, server.qpn));
            assert_eq!((wcs[1].status, wcs[1].opcode), (WcStatus::Success, WcOpcode::Send));
            let mut got = vec![0; GRH_LEN + SIZE];
            c.mr.read(65536, &mut got).unwrap();
            assert_eq!(
                got[..GRH_LEN],
                ipv4_grh(server_ip.parse().unwrap(), client_ip.parse().unwrap(), SIZE, false)[..]
            );
            let want: Vec<u8> = bytes(n as u8, SIZE).iter().map(|b| b.wrapping_add(1)).collect();
            assert!(got[GRH_LEN..] == want[..], "pong {n}");
        }
    }
    let rest: Vec<String> = lines.map_while(std::result::Result::ok).collect();
    let out = child.0.take().unwrap().wait_with_output().unwrap();
    assert!(out.status.success(), "server: {}\n{}", rest.join("\n"), String::from_utf8_lossy(&out.stderr));
    assert!(rest.iter().any(|l| l.contains(&format!("SERVER OK {ITERS} pongs"))), "{rest:?}");
    check_capture(&pcap, 2 * ITERS, &["UD Send Only", "0x0000000011111111"]);
}
