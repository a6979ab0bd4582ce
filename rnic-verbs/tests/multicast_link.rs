//! UD multicast (IBA 10.5) on a real link, in network namespaces this test makes (root
//! only; skipped with a printed reason otherwise), where `multicast_udp.rs` cannot go:
//! loopback carries no IPv6 multicast.
//!
//! - IPv6 over UDP: two namespaces joined by a veth link, devices at IPv6 addresses on
//!   each end (one device shared by two members, as two processes share it), groups of
//!   global (`ff0e::`) and link-local (`ff12::`) scope: a datagram to a group reaches
//!   every attached QP across the link and the sender's own, none of a QP attached to
//!   another group or of a device outside the group; a detached member gets nothing more.
//! - Raw Ethernet: devices on a veth pair (`name=ip@iface`) send a group's datagrams to
//!   its Ethernet group address (`01:00:5e:..` for IPv4, `33:33:..` for IPv6) and take
//!   them for attached QPs only.
//!
//! Every device's capture passes `../shared/vectors/check_pcap.sh`.
#![allow(clippy::cast_possible_truncation)]
mod common;

use common::{can_run, check_pcap_script, sh_out, veth, veth_between, Netns};
use rnic_verbs::*;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);
const QKEY: u32 = 0x0123_4567;

struct Dev {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
    pcap: Option<PathBuf>,
}

struct Member<'a> {
    dev: &'a Dev,
    qp: QueuePair,
    /// Its receive completions go to their own CQ, so each QP's deliveries are counted
    /// apart from the device's other QPs'.
    rcq: CompletionQueue,
    name: &'static str,
}

/// A device in `ns` at `ip`, on the UDP transport or (with `netdev`) on raw Ethernet;
/// with `capture`, its packets go to a pcap.
fn open(ns: &Netns, name: &str, ip: &str, netdev: Option<&str>, capture: bool) -> Dev {
    let pcap =
        capture.then(|| std::env::temp_dir().join(format!("rnic-mlink-{name}-{ip}-{}.pcap", std::process::id())));
    let config = DeviceConfig {
        netdev: netdev.map(Into::into),
        pin_memory: false,
        capture: pcap.clone(),
        ..DeviceConfig::new(name, ip.parse().unwrap())
    };
    let ctx = ns.run(|| Context::open_with(config)).unwrap_or_else(|e| panic!("open {name} at {ip}: {}", e.report()));
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let mr = pd.allocate_mr(1 << 18, AccessFlags::LOCAL_WRITE).unwrap();
    Dev { ctx, pd, cq, mr, pcap }
}

impl Dev {
    fn member(&self, name: &'static str) -> Member<'_> {
        let rcq = self.ctx.create_cq(64).unwrap();
        let qp = self.pd.qp_builder(&self.cq, &rcq).qp_type(QpType::Ud).qkey(QKEY).build().unwrap().activate().unwrap();
        Member { dev: self, qp, rcq, name }
    }

    /// `qp` sends `data` to `group` and the send completes.
    fn send(&self, qp: &QueuePair, group: Gid, data: &[u8]) {
        self.mr.write(200_000, data).unwrap();
        let ah = self.pd.create_ah(group).unwrap();
        let wr = SendWr::send(99, vec![self.mr.sge(200_000, data.len() as u32)]).to(ah.dest(MULTICAST_QPN, QKEY));
        qp.post_send(&wr).unwrap();
        let wc = self.cq.wait(1, T).unwrap()[0];
        assert_eq!((wc.wr_id, wc.status), (99, WcStatus::Success), "{wc}");
    }

    fn counter(&self, name: &str) -> u64 {
        self.ctx.counter(name).unwrap()
    }

    fn nonzero(&self) -> String {
        let c = self.ctx.counters().into_iter().filter(|c| c.1 != 0);
        c.map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
    }
}

impl Member<'_> {
    /// Posts receive `slot` (each member has four 4 KiB slots of its own at `base`).
    fn post_recv(&self, base: usize, slot: u64) {
        let off = base + (slot % 4) as usize * 4096;
        self.qp.post_recv(&RecvWr { wr_id: slot, sg_list: vec![self.dev.mr.sge(off, 4096)] }).unwrap();
    }

    /// Waits for one receive into the slots at `base`: its payload, GRH area, source QPN.
    fn recv(&self, base: usize) -> (Vec<u8>, Vec<u8>, u32) {
        let wc = self.rcq.wait(1, T).unwrap_or_else(|e| panic!("{}: {e}: {}", self.name, self.dev.nonzero()))[0];
        assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Recv), "{}: {wc}", self.name);
        let off = base + (wc.wr_id % 4) as usize * 4096;
        let mut buf = vec![0; wc.byte_len as usize];
        self.dev.mr.read(off, &mut buf).unwrap();
        (buf[GRH_LEN..].to_vec(), buf[..GRH_LEN].to_vec(), wc.src_qp)
    }

    /// Nothing arrived (after giving a datagram in flight the time to land).
    fn got_nothing(&self) {
        std::thread::sleep(Duration::from_millis(200));
        assert!(self.rcq.is_empty(), "{} received a datagram not meant for it", self.name);
    }
}

/// Checks a capture with check_pcap.sh; returns each frame's Ethernet and IP destination
/// and UDP port (tab-separated, a line each), or None when it cannot be checked here.
fn check_capture(pcap: &std::path::Path) -> Option<String> {
    let check = check_pcap_script()?;
    let out = Command::new(check).arg(pcap).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "check_pcap.sh {}:\n{text}", pcap.display());
    let p = pcap.to_str().unwrap();
    Some(sh_out(&[
        "tshark",
        "-r",
        p,
        "-T",
        "fields",
        "-e",
        "eth.dst",
        "-e",
        "ipv6.dst",
        "-e",
        "ip.dst",
        "-e",
        "udp.dstport",
    ]))
}

/// IPv6 over UDP across a veth link between two namespaces: groups of global and
/// link-local scope, a device shared by two members, a device outside the group.
#[test]
fn ipv6_groups_over_udp_reach_every_attached_qp_across_a_link() {
    if !can_run("ipv6_groups_over_udp") {
        return;
    }
    let (na, nb) = (Netns::with_ipv6("m6a"), Netns::with_ipv6("m6b"));
    veth_between(&na, "m6a", &nb, "m6b");
    // nodad: the addresses are usable at once (no duplicate address detection wait).
    na.ip(&["addr", "add", "fd00:65::1/64", "dev", "m6a", "nodad"]);
    nb.ip(&["addr", "add", "fd00:65::2/64", "dev", "m6b", "nodad"]);
    nb.ip(&["addr", "add", "fd00:65::3/64", "dev", "m6b", "nodad"]);
    // The kernel routes ff00::/8 on every IPv6 interface that is up (loopback has none).
    let routes = sh_out(&["ip", "-n", &nb.0, "-6", "route", "show", "table", "local"]);
    assert!(routes.contains("ff00::/8 dev m6b"), "no multicast route on the link: {routes}");

    let a = open(&na, "rnic0", "fd00:65::1", None, true);
    let b = open(&nb, "rnic1", "fd00:65::2", None, true);
    // A second member of b's device (another process opening it shares it this way).
    let b2 = open(&nb, "rnic1", "fd00:65::2", None, false);
    // A device on the same link that joins nothing.
    let c = open(&nb, "rnic2", "fd00:65::3", None, false);

    let global = Gid::from_ip("ff0e::65:1".parse().unwrap());
    let link = Gid::from_ip("ff12::65:2".parse().unwrap());
    let sender = a.member("a's sender");
    let (mb, mb2) = (b.member("b"), b2.member("b's second member"));
    let other = b.member("b's QP of the link-local group");
    let outside = c.member("c, outside the groups");
    for m in [&sender, &mb, &mb2] {
        m.qp.attach_mcast(global).unwrap();
    }
    other.qp.attach_mcast(link).unwrap();
    for (i, m) in [&sender, &mb, &mb2, &other, &outside].into_iter().enumerate() {
        m.post_recv(i * 16384, 0);
    }

    a.send(&sender.qp, global, b"to the global group");
    let (src_ip, group_ip): ([u8; 16], [u8; 16]) = (a.ctx.gid(1).unwrap().0, global.0);
    for (i, m) in [(0, &sender), (1, &mb), (2, &mb2)] {
        let (data, grh, src) = m.recv(i * 16384);
        assert_eq!((data.as_slice(), src), (&b"to the global group"[..], sender.qp.qpn()), "{}", m.name);
        // The GRH area holds the IPv6 header: version 6, the sender, the group.
        assert_eq!(grh[0] >> 4, 6, "{}: an IPv6 header in the GRH area", m.name);
        assert_eq!(grh[8..24], src_ip, "{}: the source", m.name);
        assert_eq!(grh[24..40], group_ip, "{}: the group as destination", m.name);
    }
    other.got_nothing();
    outside.got_nothing();

    // The link-local group: only its QP, across the link.
    other.post_recv(3 * 16384, 1);
    let link_sender = a.member("a's link-local sender");
    a.send(&link_sender.qp, link, b"link-local scope");
    assert_eq!(other.recv(3 * 16384).0, b"link-local scope");
    for m in [&sender, &mb, &mb2, &outside] {
        m.got_nothing();
    }

    // b's second member detaches: its device (that process's copy) leaves the group, and
    // b still receives.
    mb2.qp.detach_mcast(global).unwrap();
    for (i, m) in [(0, &sender), (1, &mb), (2, &mb2)] {
        m.post_recv(i * 16384, 1);
    }
    a.send(&sender.qp, global, b"after the detach");
    assert_eq!(mb.recv(16384).0, b"after the detach");
    assert_eq!(sender.recv(0).0, b"after the detach");
    mb2.got_nothing();
    outside.got_nothing();
    assert_eq!(c.counter("rcvd_pkts"), 0, "nothing reached a device outside the groups");
    for d in [&a, &b, &b2, &c] {
        assert_eq!(d.counter("icrc_err"), 0, "{}", d.nonzero());
        assert_eq!(d.counter("unknown_qp_pkts"), 0, "{}", d.nonzero());
    }
    // The captures are complete once their devices are closed.
    let pcaps = [a.pcap.clone().unwrap(), b.pcap.clone().unwrap()];
    drop((sender, link_sender, mb, mb2, other, outside));
    drop((a, b, b2, c));
    let sent = check_capture(&pcaps[0]);
    let received = check_capture(&pcaps[1]);
    for (what, s) in [("a's capture", sent), ("b's capture", received)] {
        if let Some(s) = s {
            assert!(s.contains("ff0e::65:1\t\t4791") && s.contains("ff12::65:2\t\t4791"), "{what}: {s}");
        }
    }
    for p in pcaps {
        let _ = std::fs::remove_file(p);
    }
}

/// Raw Ethernet on a veth pair: an IPv4 and an IPv6 group, each between a sender on one
/// end and two devices on the other, one of them with a QP attached and one without.
/// Frames go to the group's Ethernet address (RFC 1112 6.4, RFC 2464 7) and reach the
/// attached QP only; after the detach, the group's frames are no device's.
#[test]
fn raw_ethernet_groups_go_to_their_mac_and_reach_attached_qps_only() {
    if !can_run("raw_ethernet_groups") {
        return;
    }
    let ns = Netns::new("mraw");
    veth(&ns, "ya", "yb", 1500);
    for (v, (sip, rip, oip, group, mac)) in [
        ("10.98.0.1", "10.98.0.2", "10.98.0.3", "239.98.0.1", "01:00:5e:62:00:01"),
        ("fd00:98::1", "fd00:98::2", "fd00:98::3", "ff0e::98:1", "33:33:00:98:00:01"),
    ]
    .into_iter()
    .enumerate()
    {
        let v = if v == 0 { "IPv4" } else { "IPv6" };
        let a = open(&ns, "rnic0", sip, Some("ya"), true);
        let b = open(&ns, "rnic1", rip, Some("yb"), true);
        // Another device on b's link, with no QP in the group.
        let c = open(&ns, "rnic2", oip, Some("yb"), false);
        let group = Gid::from_ip(group.parse().unwrap());
        let sender = a.member("a's sender");
        let (attached, beside) = (b.member("b's attached QP"), b.member("b's QP beside it"));
        let outside = c.member("c's QP");
        attached.qp.attach_mcast(group).unwrap();
        for (i, m) in [&attached, &beside, &outside].into_iter().enumerate() {
            m.post_recv(i * 16384, 0);
        }
        a.send(&sender.qp, group, b"to the group's MAC");
        let (data, grh, src) = attached.recv(0);
        assert_eq!((data.as_slice(), src), (&b"to the group's MAC"[..], sender.qp.qpn()), "{v}");
        let to = group.to_ip();
        match to {
            IpAddr::V4(g) => assert_eq!(grh[36..40], g.octets(), "{v}: the group in the GRH area"),
            IpAddr::V6(g) => assert_eq!(grh[24..40], g.octets(), "{v}: the group in the GRH area"),
        }
        beside.got_nothing();
        outside.got_nothing();
        assert_eq!(c.counter("rcvd_pkts"), 0, "{v}: {}", c.nonzero());
        // No neighbour resolution for a group: its MAC is computed.
        assert_eq!(a.counter("tx_neigh_unresolved"), 0, "{v}: {}", a.nonzero());

        // Detached, b leaves the group's MAC: the next datagram is no QP's.
        attached.qp.detach_mcast(group).unwrap();
        let dropped = b.counter("rx_not_for_us") + b.counter("rx_not_roce");
        a.send(&sender.qp, group, b"after the detach");
        attached.got_nothing();
        beside.got_nothing();
        let deadline = std::time::Instant::now() + T;
        while b.counter("rx_not_for_us") + b.counter("rx_not_roce") == dropped {
            assert!(std::time::Instant::now() < deadline, "{v}: b never saw the frame: {}", b.nonzero());
            std::thread::sleep(Duration::from_millis(20));
        }
        for d in [&a, &b, &c] {
            assert_eq!(d.counter("icrc_err") + d.counter("malformed_pkts"), 0, "{v}: {}", d.nonzero());
        }
        let pcaps = [a.pcap.clone().unwrap(), b.pcap.clone().unwrap()];
        drop((sender, attached, beside, outside));
        drop((a, b, c));
        for (who, p) in ["sender", "receiver"].into_iter().zip(&pcaps) {
            let (v6, v4) = if to.is_ipv6() { (to.to_string(), String::new()) } else { (String::new(), to.to_string()) };
            let want = format!("{mac}\t{v6}\t{v4}\t4791");
            if let Some(frames) = check_capture(p) {
                assert!(frames.contains(&want), "{v}, {who}: no frame {want:?} in\n{frames}");
            }
            let _ = std::fs::remove_file(p);
        }
    }
}
