//! The raw-Ethernet transport in network namespaces this test creates (root only, as CI
//! runs; skipped with a printed reason otherwise): two devices over a veth pair move
//! verified data; a raw device talks to a UDP device through a router namespace (ARP both
//! ways: the device asks for its gateway and answers the router); frames that are not for
//! the device are dropped and counted, each under its own counter.
//!
//! Devices are opened on a thread that entered the namespace (`setns`): an `AF_PACKET`
//! or UDP socket belongs to the namespace it was created in.
#![allow(clippy::cast_possible_truncation)]
mod common;

use common::{can_run, sh_out, veth, Netns};
use rnic_verbs::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn open_raw(ns: &Netns, name: &str, ip: &str, netdev: &str) -> Context {
    let config =
        DeviceConfig { netdev: Some(netdev.into()), pin_memory: false, ..DeviceConfig::new(name, ip.parse().unwrap()) };
    ns.run(|| Context::open_with(config)).unwrap_or_else(|e| panic!("open {name} on {netdev}: {}", e.report()))
}

struct Side {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn side(ctx: Context) -> Side {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let access =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let mr = pd.allocate_mr(1 << 20, access).unwrap();
    Side { ctx, pd, cq, mr }
}

/// An RC QP that takes WRITE, READ and atomics, not yet connected.
fn rc_qp(s: &Side, mtu: PathMtu) -> PreparedQp {
    s.pd.qp_builder(&s.cq, &s.cq)
        .mtu(mtu)
        .access(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC)
        .max_rd_atomic(4)
        .max_dest_rd_atomic(4)
        .build()
        .unwrap()
}

fn connect(a: &Side, b: &Side, mtu: PathMtu) -> (QueuePair, QueuePair) {
    let (qa, qb) = (rc_qp(a, mtu), rc_qp(b, mtu));
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    (qa.connect(&eb).unwrap(), qb.connect(&ea).unwrap())
}

fn ok(cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    let wcs = cq.wait(n, T).unwrap_or_else(|e| panic!("waiting for {n} completions: {}", e.report()));
    for wc in &wcs {
        assert_eq!(wc.status, WcStatus::Success, "{wc}");
    }
    wcs
}

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed)).collect()
}

/// SEND, RDMA WRITE, RDMA READ and FETCH_ADD from `a` to `b`, every byte checked.
fn transfers(a: &Side, b: &Side, qa: &QueuePair, qb: &QueuePair) {
    let n = 200_000usize;
    let data = pattern(3, n);
    a.mr.write(0, &data).unwrap();
    let remote = b.mr.remote();
    qa.post_send(&SendWr::new(
        1,
        SendOp::RdmaWrite { remote_addr: remote.addr + 64, rkey: remote.rkey },
        vec![a.mr.sge(0, n as u32)],
    ))
    .unwrap();
    ok(&a.cq, 1);
    let mut got = vec![0u8; n];
    b.mr.read(64, &mut got).unwrap();
    assert!(got == data, "the WRITE landed intact");
    qa.post_send(&SendWr::new(
        2,
        SendOp::RdmaRead { remote_addr: remote.addr + 64, rkey: remote.rkey },
        vec![a.mr.sge(300_000, n as u32)],
    ))
    .unwrap();
    ok(&a.cq, 1);
    a.mr.read(300_000, &mut got).unwrap();
    assert!(got == data, "the READ returned what was written");
    let msg = pattern(9, 9000);
    a.mr.write(600_000, &msg).unwrap();
    qb.post_recv(&RecvWr { wr_id: 3, sg_list: vec![b.mr.sge(700_000, 16384)] }).unwrap();
    qa.post_send(&SendWr::send(4, vec![a.mr.sge(600_000, msg.len() as u32)])).unwrap();
    ok(&a.cq, 1);
    let wc = ok(&b.cq, 1)[0];
    assert_eq!(wc.byte_len, msg.len() as u32);
    let mut back = vec![0u8; msg.len()];
    b.mr.read(700_000, &mut back).unwrap();
    assert!(back == msg, "the SEND arrived intact");
    b.mr.write(900_000, &40u64.to_ne_bytes()).unwrap();
    let add = SendOp::AtomicFetchAdd { remote_addr: remote.addr + 900_000, rkey: remote.rkey, add: 2 };
    qa.post_send(&SendWr::new(5, add, vec![a.mr.sge(950_000, 8)])).unwrap();
    ok(&a.cq, 1);
    let mut v = [0u8; 8];
    b.mr.read(900_000, &mut v).unwrap();
    assert_eq!(u64::from_ne_bytes(v), 42);
}

fn counter(s: &Side, name: &str) -> u64 {
    s.ctx.counter(name).unwrap_or_else(|| panic!("no counter {name}"))
}

#[test]
fn two_devices_over_a_veth_pair_move_verified_data_at_both_mtus() {
    if !can_run("two_devices_over_a_veth_pair") {
        return;
    }
    let ns = Netns::new("raw1");
    veth(&ns, "ra", "rb", 9000);
    let a = side(open_raw(&ns, "rnic0", "10.91.0.1", "ra"));
    let b = side(open_raw(&ns, "rnic1", "10.91.0.2", "rb"));
    assert_eq!(a.ctx.query_port().unwrap().active_mtu, PathMtu::Mtu4096, "a 9000-byte link carries MTU 4096");
    for mtu in [PathMtu::Mtu1024, PathMtu::Mtu4096] {
        let (qa, qb) = connect(&a, &b, mtu);
        transfers(&a, &b, &qa, &qb);
    }
    // UD: a datagram with its GRH area.
    let ud = |s: &Side| s.pd.qp_builder(&s.cq, &s.cq).qp_type(QpType::Ud).build().unwrap();
    let (pa, pb) = (ud(&a), ud(&b));
    let eb = pb.endpoint();
    let (ua, ub) = (pa.activate().unwrap(), pb.activate().unwrap());
    ub.post_recv(&RecvWr { wr_id: 7, sg_list: vec![b.mr.sge(0, (GRH_LEN + 2048) as u32)] }).unwrap();
    let ah = a.pd.create_ah(eb.gid).unwrap();
    a.mr.write(0, &pattern(5, 1000)).unwrap();
    ua.post_send(&SendWr::send(8, vec![a.mr.sge(0, 1000)]).to(ah.dest(eb.qpn, DEFAULT_QKEY))).unwrap();
    ok(&a.cq, 1);
    assert_eq!(ok(&b.cq, 1)[0].byte_len, (GRH_LEN + 1000) as u32);
    let mut got = vec![0u8; 1000];
    b.mr.read(GRH_LEN, &mut got).unwrap();
    assert!(got == pattern(5, 1000));
    // The full ICRC checked on every frame: nothing solved, nothing bad.
    for s in [&a, &b] {
        assert_eq!(counter(s, "icrc_ipv4_id_solved"), 0);
        assert_eq!(counter(s, "icrc_err"), 0);
        assert_eq!(counter(s, "tx_neigh_unresolved"), 0);
    }
    // ARP both ways: rnic0 asked for rnic1 (it sent first) and rnic1 answered.
    assert!(counter(&a, "arp_requests_sent") >= 1 && counter(&b, "arp_replies_sent") >= 1);
    // GID 0 is the link-local GID of the interface's MAC, as on rxe.
    let mac = a.ctx.mac().unwrap();
    let g0 = a.ctx.gid(0).unwrap().0;
    assert_eq!((g0[0], g0[1], g0[8] ^ 2, g0[11], g0[12], g0[15]), (0xfe, 0x80, mac[0], 0xff, 0xfe, mac[5]));
}

#[test]
fn a_path_mtu_the_link_cannot_carry_is_refused_naming_the_fix() {
    if !can_run("a_path_mtu_the_link_cannot_carry") {
        return;
    }
    let ns = Netns::new("raw2");
    veth(&ns, "sa", "sb", 1500);
    let a = side(open_raw(&ns, "rnic0", "10.94.0.1", "sa"));
    assert_eq!(a.ctx.query_port().unwrap().active_mtu, PathMtu::Mtu1024);
    let q = a.pd.qp_builder(&a.cq, &a.cq).mtu(PathMtu::Mtu4096).build().unwrap();
    let peer = Endpoint { qpn: 0x11, gid: Gid::from_ip("10.94.0.2".parse().unwrap()), psn: 0 };
    let e = q.connect(&peer).unwrap_err().report();
    assert!(e.contains("active MTU 1024") && e.contains("mtu 9000"), "{e}");
    // A device on an interface that does not exist, or at an address no link can have:
    // clear errors.
    let bad = DeviceConfig { netdev: Some("nosuch0".into()), ..DeviceConfig::new("x", "10.94.0.9".parse().unwrap()) };
    let e = ns.run(|| Context::open_with(bad)).unwrap_err().report();
    assert!(e.contains("no network interface named \"nosuch0\""), "{e}");
    for addr in ["ff02::1", "::ffff:10.94.0.9", "127.0.0.5"] {
        let cfg = DeviceConfig { netdev: Some("sa".into()), ..DeviceConfig::new("x", addr.parse().unwrap()) };
        let e = ns.run(|| Context::open_with(cfg)).unwrap_err().report();
        assert!(e.contains("cannot be a device address on a link"), "{addr}: {e}");
    }
}

/// IPv6 on raw frames: two devices at IPv6 addresses the namespace does not own (its
/// kernel's IPv6 is off) find each other by neighbour discovery, which rnic does itself,
/// and move verified data; and two IPv4 devices reach each other at their link-local
/// GID 0 (the `-g 0` habit of rxe users), over IPv6, with no ARP at all. The capture
/// holds the solicitations, advertisements and RoCE frames with their flow labels.
#[test]
fn ipv6_and_link_local_gids_find_each_other_by_neighbour_discovery() {
    if !can_run("ipv6_and_link_local_gids") {
        return;
    }
    let ns = Netns::new("raw6");
    veth(&ns, "ga", "gb", 9000);
    let pcap = std::env::temp_dir().join(format!("rnic-raw6-{}.pcap", std::process::id()));
    let config = DeviceConfig {
        netdev: Some("ga".into()),
        pin_memory: false,
        capture: Some(pcap.clone()),
        ..DeviceConfig::new("rnic0", "fd00:96::1".parse().unwrap())
    };
    let a = side(ns.run(|| Context::open_with(config)).unwrap_or_else(|e| panic!("open rnic0: {}", e.report())));
    let b = side(open_raw(&ns, "rnic1", "fd00:96::2", "gb"));
    assert_eq!(a.ctx.query_port().unwrap().active_mtu, PathMtu::Mtu4096);
    let (qa, qb) = connect(&a, &b, PathMtu::Mtu4096);
    transfers(&a, &b, &qa, &qb);
    assert!(counter(&a, "nd_solicits_sent") >= 1, "rnic0 asked for rnic1's MAC");
    assert!(counter(&b, "nd_adverts_sent") >= 1, "rnic1 answered for its address");
    assert_eq!(counter(&a, "arp_requests_sent") + counter(&b, "arp_requests_sent"), 0);

    veth(&ns, "la", "lb", 1500);
    let c = side(open_raw(&ns, "rnic2", "10.96.0.1", "la"));
    let d = side(open_raw(&ns, "rnic3", "10.96.0.2", "lb"));
    let (pc, pd) = (rc_qp(&c, PathMtu::Mtu1024), rc_qp(&d, PathMtu::Mtu1024));
    let gid0 = |s: &Side| s.ctx.gid(0).unwrap();
    let (ec, ed) = (Endpoint { gid: gid0(&c), ..pc.endpoint() }, Endpoint { gid: gid0(&d), ..pd.endpoint() });
    assert_eq!(ec.gid.0[..2], [0xfe, 0x80], "GID 0 is link-local");
    let (qc, qd) = (pc.connect(&ed).unwrap(), pd.connect(&ec).unwrap());
    transfers(&c, &d, &qc, &qd);
    assert_eq!(counter(&c, "arp_requests_sent"), 0, "link-local GIDs need no ARP");
    assert!(counter(&c, "nd_solicits_sent") >= 1 && counter(&d, "nd_adverts_sent") >= 1);
    for s in [&a, &b, &c, &d] {
        assert_eq!(counter(s, "icrc_err"), 0);
        assert_eq!(counter(s, "tx_neigh_unresolved"), 0);
        assert_eq!(counter(s, "malformed_pkts"), 0);
    }
    drop((qa, qb, a));
    let check = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/vectors/check_pcap.sh");
    let tshark = Command::new("tshark").arg("--version").output().is_ok_and(|o| o.status.success());
    if tshark && std::path::Path::new(check).exists() {
        let out = Command::new(check).arg(&pcap).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "check_pcap.sh {}:\n{text}", pcap.display());
        let info = sh_out(&[
            "tshark",
            "-r",
            pcap.to_str().unwrap(),
            "-Y",
            "icmpv6 || ipv6.flow > 0",
            "-T",
            "fields",
            "-e",
            "_ws.col.Info",
        ]);
        assert!(info.contains("Neighbor Solicitation for fd00:96::2"), "{info}");
        assert!(info.contains("Neighbor Advertisement fd00:96::2"), "{info}");
        assert!(info.contains("RC RDMA Write First"), "RoCE frames carry a flow label: {info}");
    }
    let _ = std::fs::remove_file(&pcap);
}

#[test]
fn raw_frames_and_a_udp_socket_talk_through_a_router() {
    if !can_run("raw_frames_and_a_udp_socket_talk_through_a_router") {
        return;
    }
    let (na, nr, nb) = (Netns::new("rawa"), Netns::new("rawr"), Netns::new("rawb"));
    // a0 (in a) <-> r0 (in r); r1 (in r) <-> b1 (in b).
    na.ip(&["link", "add", "a0", "type", "veth", "peer", "name", "r0", "netns", &nr.0]);
    nr.ip(&["link", "add", "r1", "type", "veth", "peer", "name", "b1", "netns", &nb.0]);
    na.ip(&["link", "set", "a0", "up"]);
    nr.ip(&["addr", "add", "10.92.1.1/24", "dev", "r0"]);
    nr.ip(&["addr", "add", "10.92.2.1/24", "dev", "r1"]);
    nr.ip(&["link", "set", "r0", "up"]);
    nr.ip(&["link", "set", "r1", "up"]);
    nr.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    nb.ip(&["addr", "add", "10.92.2.2/24", "dev", "b1"]);
    nb.ip(&["link", "set", "b1", "up"]);
    nb.ip(&["route", "add", "10.92.1.0/24", "via", "10.92.2.1"]);
    // The raw device's namespace owns no address: only routes, read when it opens.
    na.ip(&["route", "add", "10.92.1.0/24", "dev", "a0"]);
    na.ip(&["route", "add", "10.92.2.0/24", "via", "10.92.1.1", "dev", "a0"]);
    let raw = side(open_raw(&na, "rnic0", "10.92.1.2", "a0"));
    let udp = side(nb.run(|| Context::open_at("rnic1", "10.92.2.2".parse().unwrap())).unwrap());
    for (x, y) in [(&raw, &udp), (&udp, &raw)] {
        let (qx, qy) = connect(x, y, PathMtu::Mtu1024);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| transfers(x, y, &qx, &qy)));
        if let Err(e) = r {
            let show = |s: &Side| {
                s.ctx
                    .counters()
                    .into_iter()
                    .filter(|(_, v)| *v > 0)
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            eprintln!(
                "raw: {}\nudp: {}\nrouter neighbours: {}",
                show(&raw),
                show(&udp),
                sh_out(&["ip", "-n", &nr.0, "neigh"])
            );
            std::panic::resume_unwind(e);
        }
    }
    // The raw device asked for its gateway (and the router learned it from that
    // request). Forgotten by the router, it is asked for, and answers.
    assert!(counter(&raw, "arp_requests_sent") >= 1);
    nr.ip(&["neigh", "flush", "dev", "r0"]);
    let (qu, qr) = connect(&udp, &raw, PathMtu::Mtu1024);
    transfers(&udp, &raw, &qu, &qr);
    assert!(counter(&raw, "arp_replies_sent") >= 1, "rnic answered the router's ARP request");
    assert_eq!(counter(&raw, "icrc_ipv4_id_solved"), 0, "the raw side checks the full ICRC");
    assert_eq!(counter(&raw, "icrc_err"), 0);
    let mac = rnic_wire::ethernet::MacAddr(raw.ctx.mac().unwrap()).to_string();
    let neigh = sh_out(&["ip", "-n", &nr.0, "neigh", "show", "10.92.1.2"]);
    assert!(neigh.contains(&mac), "the router learned rnic's MAC {mac}: {neigh}");
}

/// A frame from `src` to the device, BTH..ICRC `roce`, its ICRC computed when `good`.
fn roce_frame(dst_mac: [u8; 6], src: Ipv4Addr, dst: Ipv4Addr, dst_port: u16, good: bool) -> Vec<u8> {
    // A SEND ONLY to QP 0x11: BTH, 4 bytes of payload, ICRC.
    let mut roce = vec![0x04, 0x00, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 1, 1, 2, 3, 4, 0, 0, 0, 0];
    if good {
        let ctx = rnic_wire::icrc::IcrcContext::new(IpAddr::V4(src), IpAddr::V4(dst), 0xc000, dst_port);
        ctx.fill(&mut roce).unwrap();
    } else {
        let l = roce.len();
        roce[l - 4..].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    }
    let mut f = rnic_core::capture::frame_for(IpAddr::V4(src), IpAddr::V4(dst), 0xc000, dst_port, &roce);
    f[..6].copy_from_slice(&dst_mac);
    f
}

/// Sends raw frames on `ifname` (from a thread in the namespace).
fn inject(ns: &Netns, ifname: &str, frames: Vec<Vec<u8>>) {
    let ifname = ifname.to_string();
    ns.run(move || {
        let c = std::ffi::CString::new(ifname).unwrap();
        // SAFETY: plain libc calls with valid arguments; the descriptor is closed below.
        unsafe {
            let index = libc::if_nametoindex(c.as_ptr()) as i32;
            assert!(index > 0);
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(0x0003u16.to_be()));
            assert!(fd >= 0, "AF_PACKET: {}", std::io::Error::last_os_error());
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_ifindex = index;
            sll.sll_halen = 6;
            for f in &frames {
                let n = libc::sendto(
                    fd,
                    f.as_ptr().cast(),
                    f.len(),
                    0,
                    std::ptr::addr_of!(sll).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                );
                assert_eq!(n, f.len() as isize, "sendto: {}", std::io::Error::last_os_error());
            }
            libc::close(fd);
        }
    });
}

#[test]
fn frames_not_for_the_device_are_dropped_and_counted_each_under_its_own_counter() {
    if !can_run("frames_not_for_the_device_are_dropped_and_counted") {
        return;
    }
    let ns = Netns::new("raw3");
    veth(&ns, "ta", "tb", 1500);
    let a = side(open_raw(&ns, "rnic0", "10.93.0.1", "ta"));
    let mac = a.ctx.mac().unwrap();
    let (me, peer) = (Ipv4Addr::new(10, 93, 0, 1), Ipv4Addr::new(10, 93, 0, 2));
    let before: Vec<u64> =
        ["icrc_err", "rx_not_for_us", "malformed_pkts", "rx_not_roce"].iter().map(|c| counter(&a, c)).collect();
    let bad_icrc = roce_frame(mac, peer, me, 4791, false);
    let other_mac = roce_frame([0x02, 0x11, 0x22, 0x33, 0x44, 0x55], peer, me, 4791, true);
    let mut truncated = roce_frame(mac, peer, me, 4791, true);
    truncated.truncate(14 + 20 + 8 + 6); // the IP header says more than the frame holds
    let not_roce = roce_frame(mac, peer, me, 53, true); // UDP to port 53
    inject(&ns, "tb", vec![bad_icrc, other_mac, truncated, not_roce]);
    let want = [1u64, 1, 1, 1];
    let deadline = std::time::Instant::now() + T;
    loop {
        let now: Vec<u64> =
            ["icrc_err", "rx_not_for_us", "malformed_pkts", "rx_not_roce"].iter().map(|c| counter(&a, c)).collect();
        let delta: Vec<u64> = now.iter().zip(&before).map(|(n, b)| n - b).collect();
        if delta == want {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "counter deltas {delta:?}, want {want:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // None of them reached a QP.
    assert_eq!(counter(&a, "unknown_qp_pkts"), 0);
    assert!(a.cq.is_empty());
}

#[test]
fn devices_on_a_vlan_tag_their_frames_and_take_only_their_vlan() {
    if !can_run("devices_on_a_vlan") {
        return;
    }
    let ns = Netns::new("raw4");
    veth(&ns, "wa", "wb", 1500);
    let open_vlan = |name: &str, ip: &str, dev: &str, vlan| {
        let config = DeviceConfig {
            netdev: Some(dev.into()),
            vlan: Some(vlan),
            pin_memory: false,
            ..DeviceConfig::new(name, ip.parse().unwrap())
        };
        side(ns.run(|| Context::open_with(config)).unwrap_or_else(|e| panic!("{}", e.report())))
    };
    let a = open_vlan("rnic0", "10.96.0.1", "wa", 42);
    let b = open_vlan("rnic1", "10.96.0.2", "wb", 42);
    // Beside b on the same link and address, a device on VLAN 43.
    let c = open_vlan("rnic2", "10.96.0.2", "wb", 43);
    // The kernel takes the tag out of a received frame and reports it beside it
    // (PACKET_AUXDATA): the transfers below cross the veth tagged.
    let (qa, qb) = connect(&a, &b, PathMtu::Mtu1024);
    transfers(&a, &b, &qa, &qb);
    assert_eq!(counter(&b, "icrc_err") + counter(&b, "malformed_pkts"), 0);
    // The device on the other VLAN saw every frame go by and took none, not even the ARP.
    assert_eq!((counter(&c, "rcvd_pkts"), counter(&c, "arp_replies_sent")), (0, 0));
    assert!(counter(&c, "rx_not_for_us") > 0);
    // RNIC_DEVICES names the VLAN after the interface.
    let d = parse_devices("rnic0=10.96.0.1@wa:42").unwrap();
    assert_eq!((d[0].netdev.as_deref(), d[0].vlan), (Some("wa"), Some(42)));
    assert!(parse_devices("rnic0=10.96.0.1@wa:4095").unwrap_err().to_string().contains("not in 1..=4094"));
}

#[test]
fn a_destination_nobody_answers_fails_the_work_request() {
    if !can_run("a_destination_nobody_answers") {
        return;
    }
    let ns = Netns::new("raw5");
    veth(&ns, "na", "nb", 1500);
    let a = side(open_raw(&ns, "rnic0", "10.97.0.1", "na"));
    // Retry fast: 4.096 us x 2^8 = 1 ms ACK timeout, 2 retries.
    let q = a.pd.qp_builder(&a.cq, &a.cq).timeout(8).retry_cnt(2).build().unwrap();
    let nobody = Endpoint { qpn: 0x11, gid: Gid::from_ip("10.97.0.99".parse().unwrap()), psn: 0 };
    let q = q.connect(&nobody).unwrap();
    q.post_send(&SendWr::send(1, vec![a.mr.sge(0, 64)])).unwrap();
    let wc = a.cq.wait(1, Duration::from_secs(20)).unwrap()[0];
    assert_eq!(wc.status, WcStatus::RetryExcErr, "{wc}");
    assert!(counter(&a, "arp_requests_sent") >= 1);
    // Each try asked again and its packet waited for an answer that never came.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while counter(&a, "tx_neigh_unresolved") == 0 {
        assert!(std::time::Instant::now() < deadline, "no packet was counted unresolved");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A neighbour solicitation frame from `src_mac`/`src` for `target`, to its
/// solicited-node group, with this hop limit; `good_sum`: a correct ICMPv6 checksum.
fn solicitation(src_mac: [u8; 6], src: Ipv6Addr, target: Ipv6Addr, hop_limit: u8, good_sum: bool) -> Vec<u8> {
    let t = target.octets();
    let group = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00 | u16::from(t[13]), u16::from_be_bytes([t[14], t[15]]));
    let mut msg = vec![135u8, 0, 0, 0, 0, 0, 0, 0];
    msg.extend_from_slice(&t);
    msg.extend_from_slice(&[1, 1]);
    msg.extend_from_slice(&src_mac);
    let mut sum: u32 = 0;
    let mut add = |b: &[u8]| b.chunks(2).for_each(|c| sum += u32::from(u16::from_be_bytes([c[0], c[1]])));
    add(&src.octets());
    add(&group.octets());
    add(&(msg.len() as u32).to_be_bytes());
    add(&[0, 0, 0, 58]);
    add(&msg);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let sum = !(sum as u16) ^ u16::from(!good_sum);
    msg[2..4].copy_from_slice(&sum.to_be_bytes());
    let g = group.octets();
    let mut f = vec![0x33, 0x33, g[12], g[13], g[14], g[15]];
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    f.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    f.extend_from_slice(&[58, hop_limit]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&g);
    f.extend_from_slice(&msg);
    f
}

/// Neighbour discovery from a hostile or careless peer: a solicitation with a hop limit
/// other than 255 (it crossed a router), one with a bad checksum and a cut one are
/// malformed (RFC 4861 7.1.1), one for an address that is not the device's is ignored;
/// only a good solicitation for its link-local GID 0 is answered.
#[test]
fn neighbour_solicitations_are_checked_before_they_are_answered() {
    if !can_run("neighbour_solicitations_are_checked") {
        return;
    }
    let ns = Netns::new("raw7");
    veth(&ns, "na", "nb", 1500);
    let a = side(open_raw(&ns, "rnic0", "fd00:97::1", "na"));
    let ll = Ipv6Addr::from(a.ctx.gid(0).unwrap().0);
    let peer_mac = [0x02, 0x99, 0, 0, 0, 2];
    let peer: Ipv6Addr = "fe80::99:ff:fe00:2".parse().unwrap();
    let before = |c: &str| counter(&a, c);
    let (m0, n0) = (before("malformed_pkts"), before("nd_adverts_sent"));
    let mut cut = solicitation(peer_mac, peer, ll, 255, true);
    cut.truncate(14 + 40 + 20);
    inject(
        &ns,
        "nb",
        vec![
            solicitation(peer_mac, peer, ll, 64, true),
            solicitation(peer_mac, peer, ll, 255, false),
            cut,
            solicitation(peer_mac, peer, "fd00:97::7".parse().unwrap(), 255, true),
        ],
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(counter(&a, "malformed_pkts") - m0, 3, "hop limit, checksum, cut");
    assert_eq!(counter(&a, "nd_adverts_sent") - n0, 0, "nothing answered");
    inject(&ns, "nb", vec![solicitation(peer_mac, peer, ll, 255, true)]);
    let deadline = std::time::Instant::now() + T;
    while counter(&a, "nd_adverts_sent") == n0 {
        assert!(std::time::Instant::now() < deadline, "the good solicitation was not answered");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(counter(&a, "nd_adverts_sent") - n0, 1);
}

/// A raw-Ethernet device is one process's: a second open of the same interface, VLAN and
/// address (here from the same process, as another process would) is refused, naming why.
#[test]
fn a_raw_device_is_not_shared() {
    if !can_run("a_raw_device_is_not_shared") {
        return;
    }
    let ns = Netns::new("raw6");
    veth(&ns, "xa", "xb", 1500);
    let open = || {
        let config = DeviceConfig {
            netdev: Some("xa".into()),
            pin_memory: false,
            ..DeviceConfig::new("rnic0", "10.95.0.1".parse().unwrap())
        };
        ns.run(|| Context::open_with(config))
    };
    let first = open().unwrap_or_else(|e| panic!("{}", e.report()));
    let second = open().map(|_| ()).expect_err("a second open of the raw device");
    let why = second.report();
    assert!(why.contains("processes share UDP devices only") && why.contains("xa"), "{why}");
    drop(first);
    open().unwrap_or_else(|e| panic!("free again after the close: {}", e.report()));
}
