//! The README's main job and a two-process RC exchange, run as a user would: through
//! the `rnic` binary, over UDP on loopback.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

fn rnic() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rnic"))
}

fn shared() -> PathBuf {
    std::env::var_os("RNIC_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared")))
}

/// The number of records in a classic pcap file (24-byte file header, then a 16-byte
/// header before each record whose bytes 8..12 are its captured length).
fn pcap_records(path: &std::path::Path) -> usize {
    let b = std::fs::read(path).unwrap();
    let (mut at, mut n) = (24, 0);
    while at + 16 <= b.len() {
        let len = u32::from_le_bytes([b[at + 8], b[at + 9], b[at + 10], b[at + 11]]) as usize;
        at += 16 + len;
        n += 1;
    }
    n
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rnic-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// `rnic demo` verifies every transfer, and its capture decodes with good ICRCs, in
/// rnic's own decoder and (when tshark is installed) in Wireshark's dissector.
#[test]
fn demo_verifies_everything_and_its_capture_checks_out() {
    let pcap = tmp("demo.pcap");
    // Addresses of its own, so that parallel tests do not collide on 127.0.0.1:4791.
    let out =
        rnic().args(["demo", "--ip", "127.0.10.1", "--peer-ip", "127.0.10.2", "--pcap"]).arg(&pcap).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("36 of 36 transfers verified byte for byte"), "{stdout}");
    assert!(stdout.contains("rnic1's CPU sees: nothing (one-sided"), "{stdout}");

    let dec = rnic().arg("decode").arg(&pcap).output().unwrap();
    let text = String::from_utf8_lossy(&dec.stdout);
    assert!(dec.status.success(), "{text}");
    assert!(text.contains("RC_RDMA_READ_RESPONSE_MIDDLE") && text.contains("RC_ACKNOWLEDGE"), "{text}");
    assert!(!text.contains("BAD"));

    let check = shared().join("vectors/check_pcap.sh");
    let have_tshark = Command::new("tshark").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    if have_tshark {
        let st = Command::new(&check).arg(&pcap).output().unwrap();
        let text = String::from_utf8_lossy(&st.stdout);
        if !st.status.success() {
            // Keep what failed for a look: the frames in question, the demo's counters.
            let keep = std::env::temp_dir().join("rnic-e2e-demo-failed.pcap");
            let _ = std::fs::copy(&pcap, &keep);
            let bad: Vec<&str> = text.lines().filter(|l| l.contains("BAD") || l.starts_with("FAIL")).collect();
            panic!("check_pcap.sh on {} failed:\n{}\ndemo said:\n{stdout}", keep.display(), bad.join("\n"));
        }
    } else {
        eprintln!("tshark not installed: check_pcap.sh skipped (.ci/run installs it)");
    }
}

/// Two processes, each with its own device on its own 127.0.0.x address, run RC
/// ping-pong: ibv_rc_pingpong's TCP exchange, then SENDs both ways, data checked.
#[test]
fn two_processes_do_rc_over_udp() {
    let port = 18515 + u16::try_from(std::process::id() % 1000).unwrap();
    let server = rnic()
        .args([
            "pingpong",
            "--ip",
            "127.0.11.1",
            "-p",
            &port.to_string(),
            "-n",
            "200",
            "-s",
            "3000",
            "-m",
            "1024",
            "-c",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let client = rnic()
        .args(["pingpong", "127.0.0.1", "--ip", "127.0.11.2", "-p", &port.to_string(), "-n", "200", "-s", "3000"])
        .args(["-m", "1024", "-c"])
        .output()
        .unwrap();
    let server = server.wait_with_output().unwrap();
    let (cs, ss) = (String::from_utf8_lossy(&client.stdout), String::from_utf8_lossy(&server.stdout));
    assert!(client.status.success(), "client: {cs}{}", String::from_utf8_lossy(&client.stderr));
    assert!(server.status.success(), "server: {ss}{}", String::from_utf8_lossy(&server.stderr));
    for s in [&cs, &ss] {
        assert!(s.contains("200 iters in"), "{s}");
        assert!(s.contains("remote address: LID 0x0000, QPN 0x000011"), "{s}");
    }
    assert!(cs.contains("GID ::ffff:127.0.11.1") && ss.contains("GID ::ffff:127.0.11.2"));
}

/// The verbs error for a bad call names the operation.
#[test]
fn unknown_device_is_named() {
    let out = rnic().args(["pingpong", "-d", "mlx5_0"]).output().unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("no device named \"mlx5_0\""), "{e}");
}

/// `rnic demo` under faults: every transfer still verifies, and the narration shows what
/// the network did and how RC recovered. Total loss instead ends it with the reason and a
/// non-zero exit.
#[test]
fn demo_recovers_from_faults_and_fails_loudly_when_it_cannot() {
    let out = rnic()
        .args(["demo", "--ip", "127.0.10.5", "--peer-ip", "127.0.10.6"])
        .args(["--loss", "0.05", "--dup", "0.02", "--reorder", "0.02", "--corrupt", "0.01", "--seed", "7"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("36 of 36 transfers verified byte for byte"), "{stdout}");
    for what in ["fault  rnic0: drop", "recover rnic0", "retransmission(s) (go-back-N)", "faults applied:"] {
        assert!(stdout.contains(what), "no `{what}` in:\n{stdout}");
    }

    let out = rnic()
        .args(["demo", "--ip", "127.0.10.7", "--peer-ip", "127.0.10.8", "--mtus", "1024", "--loss", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("RETRY_EXC_ERR") || stderr.contains("retry"), "{stderr}");

    let bad = rnic().args(["demo", "--loss", "1.5"]).output().unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a probability"));

    // RNIC_FAULTS puts any program on a bad network without a code change.
    let out = rnic()
        .env("RNIC_FAULTS", "loss=0.1,seed=3")
        .args(["demo", "--ip", "127.0.10.9", "--peer-ip", "127.0.10.10", "--mtus", "1024"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("12 of 12 transfers verified") && stdout.contains("completer_retry_err"), "{stdout}");
    let out = rnic().env("RNIC_FAULTS", "lose=0.1").args(["demo", "--ip", "127.0.10.11"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("RNIC_FAULTS: unknown fault spec key `lose`"), "{stderr}");
}

/// `rnic demo --congest`: under CE marks the QP's rate falls far below line rate and CNPs
/// flow both ways' counters; after the marks it recovers; the data verifies. `RNIC_CC=off`
/// is refused with the reason, and a bad `RNIC_CC` is named.
#[test]
fn demo_congest_shows_dcqcn_cutting_and_recovering() {
    let out = rnic()
        .env_remove("RNIC_CC")
        .args(["demo", "--congest", "--ip", "127.0.10.12", "--peer-ip", "127.0.10.13"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("16 of 16 target slots verified byte for byte"), "{stdout}");
    let low: f64 = stdout
        .split("rate fell to ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no rate line in {stdout}"));
    assert!(low < 5_000.0, "the rate never fell far below line rate (12500 MB/s): {low}\n{stdout}");
    let cnps: u64 = stdout
        .split("rnic0 rp_cnp_handled=")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(cnps > 10, "{stdout}");
    assert!(stdout.contains("back at line rate"), "{stdout}");

    let off = rnic()
        .env("RNIC_CC", "off")
        .args(["demo", "--congest", "--ip", "127.0.10.14", "--peer-ip", "127.0.10.15"])
        .output()
        .unwrap();
    assert!(!off.status.success() && String::from_utf8_lossy(&off.stderr).contains("RNIC_CC=off"));
    let bad = rnic()
        .env("RNIC_CC", "cubic")
        .args(["demo", "--ip", "127.0.10.16", "--peer-ip", "127.0.10.17"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && stderr.contains("RNIC_CC=\"cubic\""), "{stderr}");
}

/// `rnic demo --ladder --html`: the transfers drawn with what each CPU saw; rnic1's CPU
/// sees nothing of a READ, and the page is written.
#[test]
fn demo_draws_its_ladder_with_the_completions_each_cpu_sees() {
    let html = tmp("demo.html");
    let pcap = tmp("ladder.pcap");
    let out = rnic()
        .args(["demo", "--ladder", "--ip", "127.0.19.1", "--peer-ip", "127.0.19.2", "--html"])
        .arg(&html)
        .arg("--pcap")
        .arg(&pcap)
        .env("COLUMNS", "120")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("6 of 6 transfers verified"), "{stdout}");
    for want in
        ["SEND_FIRST", "READ req", "READ_RESPONSE_LAST", "* CPU: RECV SUCCESS", "* CPU: nothing (one-sided READ"]
    {
        assert!(stdout.contains(want), "{want} missing:\n{stdout}");
    }
    let page = std::fs::read_to_string(&html).unwrap();
    // One arrow per packet of the run: 21 on a quiet machine; under load a coalesced ACK
    // can go out as two, so the capture of the same run is the count to meet.
    let packets = pcap_records(&pcap);
    assert!(packets >= 21, "the transfers take at least 21 packets, the capture holds {packets}");
    assert_eq!(page.matches("class=\"arrow ").count(), packets, "one arrow per packet");
    assert!(page.matches("class=\"note\"").count() >= 12, "the CPUs' completions are drawn");
}

/// Children killed and reaped when a test ends, passed or failed.
struct Reap(Vec<std::process::Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `rnic rping` as two processes: the connection made by the CM (REQ, REP, RTU on QP1),
/// ten pings of RDMA READ and WRITE validated, the disconnect ending the server.
#[test]
fn rping_two_processes_connect_through_the_cm() {
    let server = rnic()
        .args(["rping", "-s", "-a", "127.0.19.5", "-p", "7300", "-v", "-S", "100"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A failing assertion must not leave the server running.
    let mut server = Reap(vec![server]);
    std::thread::sleep(Duration::from_millis(300));
    let out = rnic()
        .args([
            "rping",
            "-c",
            "-a",
            "127.0.19.5",
            "-I",
            "127.0.19.6",
            "-p",
            "7300",
            "-C",
            "10",
            "-v",
            "-V",
            "-S",
            "100",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "client: {text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.matches("ping data: rdma-ping-").count(), 10, "{text}");
    assert!(text.contains("ping data: rdma-ping-9: JKLMNOP"), "{text}");
    let s = server.0.remove(0).wait_with_output().unwrap();
    let stext = String::from_utf8_lossy(&s.stdout);
    assert!(s.status.success(), "server: {stext}\n{}", String::from_utf8_lossy(&s.stderr));
    assert_eq!(stext.matches("server ping data: rdma-ping-").count(), 10, "{stext}");
    // A port nobody listens on: every member declines the offered REQ, and the agent's CM
    // rejects it (REJ, invalid service ID), as one process would.
    let out =
        rnic().args(["rping", "-c", "-a", "127.0.19.7", "-I", "127.0.19.7", "-p", "7399", "-C", "1"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("nobody listens"), "{err}");
}

/// The main job on raw Ethernet: `rnic demo --netdev/--peer-netdev` over a veth pair in a
/// network namespace this test makes (root only, as CI runs; skipped with the reason
/// otherwise): every transfer at every MTU verified, ARP both ways, and the capture of
/// whole frames checks out in Wireshark.
#[test]
fn demo_runs_on_raw_ethernet_over_a_veth_pair() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || Command::new("ip").arg("-V").output().is_err() {
        eprintln!("demo_runs_on_raw_ethernet_over_a_veth_pair: skipped: needs root and iproute2");
        return;
    }
    let ns = format!("rnic-e2e-raw-{}", std::process::id());
    let ip = |args: &[&str]| {
        let st = Command::new("ip").args(["-n", &ns]).args(args).status().unwrap();
        assert!(st.success(), "ip {args:?}");
    };
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    assert!(Command::new("ip").args(["netns", "add", &ns]).status().unwrap().success());
    struct Del(String);
    impl Drop for Del {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    let _del = Del(ns.clone());
    ip(&["link", "add", "ea", "type", "veth", "peer", "name", "eb"]);
    for d in ["ea", "eb"] {
        ip(&["link", "set", d, "mtu", "9000", "up"]);
    }
    let pcap = tmp("raw-demo.pcap");
    let out = Command::new("ip")
        .args(["netns", "exec", &ns])
        .arg(env!("CARGO_BIN_EXE_rnic"))
        .args([
            "demo",
            "--ip",
            "10.95.0.1",
            "--netdev",
            "ea",
            "--peer-ip",
            "10.95.0.2",
            "--peer-netdev",
            "eb",
            "--pcap",
        ])
        .arg(&pcap)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("on raw Ethernet: rnic0 on ea, rnic1 on eb"), "{stdout}");
    assert!(stdout.contains("36 of 36 transfers verified byte for byte"), "{stdout}");
    assert!(stdout.contains("arp_requests_sent") && stdout.contains("arp_replies_sent"), "{stdout}");
    let have_tshark = Command::new("tshark").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    if have_tshark {
        let st = Command::new(shared().join("vectors/check_pcap.sh")).arg("-q").arg(&pcap).output().unwrap();
        assert!(st.status.success(), "check_pcap.sh: {}", String::from_utf8_lossy(&st.stdout));
    }

    let rnic = |args: &[&str]| {
        let out = Command::new("ip").args(["netns", "exec", &ns]).arg(env!("CARGO_BIN_EXE_rnic")).args(args).output();
        let out = out.unwrap();
        let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    };
    let pair = ["--ip", "10.95.0.1", "--netdev", "ea", "--peer-ip", "10.95.0.2", "--peer-netdev", "eb"];
    // Fault injection wraps the raw transport as it wraps UDP: RC recovers every transfer.
    let mut args = vec!["demo", "--mtus", "1024", "--loss", "0.05", "--dup", "0.02", "--reorder", "0.02"];
    args.extend(["--corrupt", "0.01", "--seed", "7"]);
    args.extend(pair);
    let (ok, text) = rnic(&args);
    assert!(ok, "lossy demo on raw Ethernet failed:\n{text}");
    assert!(text.contains("12 of 12 transfers verified byte for byte"), "{text}");
    assert!(text.contains("fault") && text.contains("recover"), "{text}");

    // perf without -m takes the link's MTU, as perftest takes the port's active MTU: a
    // 1500-byte link carries path MTU 1024.
    for d in ["ea", "eb"] {
        ip(&["link", "set", d, "mtu", "1500"]);
    }
    let mut args = vec!["perf", "write_bw", "-s", "8192", "-n", "300", "--rounds", "1"];
    args.extend(pair);
    let (ok, text) = rnic(&args);
    assert!(ok, "perf on raw Ethernet failed:\n{text}");
    assert!(text.contains("Mtu            : 1024[B]"), "{text}");
    assert!(text.contains("raw-frame baseline"), "{text}");
}

/// `rnic rping` with server and client on ONE device (127.0.19.7), in two processes, while
/// a third process that opened the device first (another rping server, on another port)
/// is the member QP1's MADs reach: it offers the REQ to the member that listens, and
/// passes the REP and RTU to the member whose communication ID they name; a REQ for a port
/// nobody listens on is rejected once every member has declined it.
#[test]
fn rping_between_two_processes_of_one_device() {
    let spawn = |port: &str| {
        rnic()
            .args(["rping", "-s", "-a", "127.0.19.7", "-p", port, "-S", "100", "-v"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut kids = Reap(vec![spawn("7301")]);
    std::thread::sleep(Duration::from_millis(300));
    kids.0.push(spawn("7302"));
    std::thread::sleep(Duration::from_millis(300));
    let out = rnic()
        .args([
            "rping",
            "-c",
            "-a",
            "127.0.19.7",
            "-I",
            "127.0.19.7",
            "-p",
            "7302",
            "-C",
            "10",
            "-V",
            "-v",
            "-S",
            "100",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "client: {text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.matches("ping data: rdma-ping-").count(), 10, "{text}");
    let s = kids.0.remove(1).wait_with_output().unwrap();
    let stext = String::from_utf8_lossy(&s.stdout);
    assert!(s.status.success(), "server: {stext}\n{}", String::from_utf8_lossy(&s.stderr));
    assert_eq!(stext.matches("server ping data: rdma-ping-").count(), 10, "{stext}");
}

/// `rnic udaddy` with server and client on ONE device (127.0.19.8), in two processes,
/// while a third process that opened the device first (an rping server) is the member
/// QP1's MADs reach: it offers the SIDR_REQ to the member that listens on the UDP port,
/// and passes the SIDR_REP to the member whose request ID it names; the datagrams then go
/// QP to QP. A SIDR_REQ for a port nobody listens on is answered "service ID not
/// supported" once every member has declined it.
#[test]
fn udaddy_between_two_processes_of_one_device() {
    let agent = rnic()
        .args(["rping", "-s", "-a", "127.0.19.8", "-p", "7305"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut kids = Reap(vec![agent]);
    std::thread::sleep(Duration::from_millis(300));
    let server = rnic()
        .args(["udaddy", "-b", "127.0.19.8", "--port", "7306", "-C", "4", "-S", "200"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    kids.0.push(server);
    std::thread::sleep(Duration::from_millis(300));
    let out = rnic()
        .args(["udaddy", "-s", "127.0.19.8", "-b", "127.0.19.8", "--port", "7306", "-C", "4", "-S", "200"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "client: {text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("data transfers complete"), "{text}");
    let s = kids.0.remove(1).wait_with_output().unwrap();
    let stext = String::from_utf8_lossy(&s.stdout);
    assert!(s.status.success(), "server: {stext}\n{}", String::from_utf8_lossy(&s.stderr));
    assert!(stext.contains("sending replies") && stext.contains("return status 0"), "{stext}");
    let t0 = std::time::Instant::now();
    let out =
        rnic().args(["udaddy", "-s", "127.0.19.8", "-b", "127.0.19.8", "--port", "7399", "-C", "1"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("nobody listens on 127.0.19.8 UDP port 7399"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(3), "answered, not timed out: {:?}", t0.elapsed());
}

/// A server that holds the connect request (`rnic rping -s --hold 6`): the client's REQ
/// comes again after its wait (4.83 s), the server's CM answers the repeat with an MRA, and
/// the client waits for the REP instead of sending its REQ again; the capture starts REQ,
/// REQ, MRA, REP, RTU.
#[test]
fn rping_waits_for_a_server_that_holds_the_request() {
    let server = rnic()
        .args(["rping", "-s", "-a", "127.0.19.9", "-p", "7307", "-S", "64", "--hold", "6"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut kids = Reap(vec![server]);
    std::thread::sleep(Duration::from_millis(300));
    let pcap = tmp("hold.pcap");
    let t0 = std::time::Instant::now();
    let out = rnic()
        .env("RNIC_PCAP", &pcap)
        .args(["rping", "-c", "-a", "127.0.19.9", "-I", "127.0.19.10", "-p", "7307", "-C", "2", "-V", "-S", "64"])
        .output()
        .unwrap();
    assert!(out.status.success(), "client: {}", String::from_utf8_lossy(&out.stderr));
    assert!(t0.elapsed() >= Duration::from_secs(6), "connected only once the server accepted");
    let s = kids.0.remove(0).wait_with_output().unwrap();
    assert!(s.status.success(), "server: {}", String::from_utf8_lossy(&s.stderr));
    let ladder = rnic().arg("ladder").arg(&pcap).output().unwrap();
    let text = String::from_utf8_lossy(&ladder.stdout);
    let cm: Vec<_> = text.split("MAD CM ").skip(1).filter_map(|rest| rest.split_whitespace().next()).take(5).collect();
    assert_eq!(cm, ["REQ", "REQ", "MRA", "REP", "RTU"], "{text}");
}
