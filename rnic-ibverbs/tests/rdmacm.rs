//! Stock rdma_cm programs on rnic's `librdmacm.so.1`: Debian's `rdmacm-utils` and
//! `perftest -R` binaries (not built here), run against the libraries
//! `scripts/build-ibverbs.sh` links, as two processes on one host.
//!
//! - `librdmacm_exports_what_programs_import`: every `rdma_*`/`r*`@`RDMACM_*` symbol the
//!   installed rdmacm-utils, perftest, qperf, libfabric, UCX and pyverbs import is exported,
//!   and the export list is exactly the system librdmacm's.
//! - the other tests run programs: both sides on one shared device and on two devices, the
//!   synchronous API's examples, perftest's rdma_cm mode, failures that must be events
//!   (a port nobody listens on), and `tests/c/cm_contract.c` for what programs rely on
//!   and these do not show.
//!
//! Needs the packages (`.ci/run` installs them); without them each test says why it is
//! skipped, except under CI, where a missing piece is a failure.

mod common;

use common::{compile_c, dyn_syms, finish, have, lib_dir, serial, unavailable};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const RDMA_CMA_H: &str = "/usr/include/rdma/rdma_cma.h";
const RDMACM_LIBS: &[&str] = &["-lrdmacm", "-libverbs"];

/// The library folder, if the programs are installed (else skipped).
fn setup(programs: &[&str]) -> Option<&'static Path> {
    if let Some(p) = programs.iter().find(|p| !have(p)) {
        unavailable(&format!("/usr/bin/{p} is not installed (apt-get install rdmacm-utils perftest)"));
        return None;
    }
    match lib_dir() {
        Some(d) => Some(d),
        None => {
            unavailable("no C compiler (cc) to link the libraries");
            None
        }
    }
}

/// A program on rnic's libraries with this test's devices: rnic0 at 127.0.82.`base`,
/// rnic1 at the next address.
fn command(dir: &Path, program: &str, base: u8) -> Command {
    let mut c = Command::new(program);
    c.env("LD_LIBRARY_PATH", dir)
        .env("RNIC_DEVICES", format!("rnic0=127.0.82.{base},rnic1=127.0.82.{}", base + 1))
        .env("RNIC_SPIN_US", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn ip(base: u8) -> String {
    format!("127.0.82.{base}")
}

/// Waits until the server's device CM runs (its `rnicN-cm` router thread, started by
/// `rdma_listen`), then a little more for the listen itself: an rdma_cm server has no
/// socket to watch, and a probe connection would be taken as the program's client.
fn wait_listening(server: &Child, what: &str) {
    let t0 = Instant::now();
    let task = PathBuf::from(format!("/proc/{}/task", server.id()));
    loop {
        let cm = std::fs::read_dir(&task)
            .into_iter()
            .flatten()
            .flatten()
            .any(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end().ends_with("-cm")));
        if cm {
            std::thread::sleep(Duration::from_millis(300));
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{what}: the server's CM never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Runs `server` then `client` (argument lists, program first) to completion; both must
/// succeed. Returns the client's and the server's output.
fn pair(dir: &Path, base: u8, server: &[&str], client: &[&str]) -> (String, String) {
    let what = client.join(" ");
    let srv = command(dir, server[0], base).args(&server[1..]).spawn().expect("spawn server");
    wait_listening(&srv, &what);
    let cli = command(dir, client[0], base).args(&client[1..]).spawn().expect("spawn client");
    let deadline = Instant::now() + Duration::from_secs(90);
    let c = finish(cli, &format!("{what} (client)"), deadline);
    let s = finish(srv, &format!("{what} (server)"), deadline);
    assert!(c.status.success(), "{what}: client failed ({}):\n{}\nserver:\n{}", c.status, text(&c), text(&s));
    assert!(s.status.success(), "{what}: server failed ({}):\n{}\nclient:\n{}", s.status, text(&s), text(&c));
    (text(&c), text(&s))
}

#[test]
fn librdmacm_exports_what_programs_import() {
    let Some(dir) = setup(&["rping", "ib_write_bw"]) else { return };
    let ours: BTreeSet<_> =
        dyn_syms(&dir.join("librdmacm.so.1"), false).into_iter().filter(|(v, _)| v.starts_with("RDMACM_")).collect();
    let system = ["/usr/lib/x86_64-linux-gnu/librdmacm.so.1", "/usr/lib/aarch64-linux-gnu/librdmacm.so.1"]
        .iter()
        .map(Path::new)
        .find(|p| p.is_file());
    if let Some(sys) = system {
        let theirs: BTreeSet<_> = dyn_syms(sys, false).into_iter().filter(|(v, _)| v.starts_with("RDMACM_")).collect();
        let missing: Vec<_> = theirs.difference(&ours).collect();
        let extra: Vec<_> = ours.difference(&theirs).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "not rdma-core's exports: missing {missing:?}, extra {extra:?}"
        );
    }
    let packages = ["rdmacm-utils", "perftest", "qperf", "libfabric1", "libucx0", "python3-pyverbs"];
    let out = Command::new("dpkg").arg("-L").args(packages).output().expect("dpkg");
    let files: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("/usr/bin/") || l.contains(".so"))
        .map(PathBuf::from)
        .filter(|p| !p.is_symlink() && std::fs::read(p).is_ok_and(|b| b.starts_with(b"\x7fELF")))
        .collect();
    if !have("qperf") || !files.iter().any(|f| f.to_string_lossy().contains("pyverbs")) {
        unavailable("qperf or python3-pyverbs is not installed (apt-get install qperf python3-pyverbs)");
    }
    let (mut checked, mut importers, mut missing) = (0, 0, Vec::new());
    for f in &files {
        let mut any = false;
        for (ver, name) in dyn_syms(f, true) {
            if ver.starts_with("RDMACM_") {
                (checked, any) = (checked + 1, true);
                if !ours.contains(&(ver.clone(), name.clone())) {
                    missing.push(format!("{}: {name}@{ver}", f.display()));
                }
            }
        }
        importers += usize::from(any);
    }
    assert!(checked > 100, "only {checked} imports found: is objdump's output parsed?");
    assert!(missing.is_empty(), "imports rnic's librdmacm does not export:\n{}", missing.join("\n"));
    eprintln!("{checked} rdma_cm imports of {importers} programs and libraries: all exported");
}

/// rping, client validating every ping (`-V`): both sides on one device (two processes
/// sharing rnic0), then server on rnic1 and client on rnic0 (`-I`), then over IPv6 (::1).
#[test]
fn rping_validates_on_one_device_and_on_two() {
    let Some(dir) = setup(&["rping"]) else { return };
    let _turn = serial();
    let (a, b) = (ip(1), ip(2));
    for (srv, cli_src) in [(&a, None), (&b, Some(&a))] {
        let server = ["rping", "-s", "-a", srv, "-p", "7174", "-C", "20"];
        let mut client = vec!["rping", "-c", "-a", srv, "-p", "7174", "-C", "20", "-V", "-v"];
        if let Some(s) = cli_src {
            client.extend_from_slice(&["-I", s]);
        }
        let (c, _) = pair(dir, 1, &server, &client);
        let pings = c.lines().filter(|l| l.starts_with("ping data: rdma-ping-")).count();
        assert_eq!(pings, 20, "20 validated pings:\n{c}");
    }
    // IPv6: a device on ::1 (rdma_cm's header and GIDs carry the IPv6 addresses).
    let srv = command(dir, "rping", 1)
        .env("RNIC_DEVICES", "rnic0=::1")
        .args(["-s", "-a", "::1", "-p", "7175", "-C", "5"])
        .spawn()
        .expect("rping");
    wait_listening(&srv, "rping over IPv6");
    let cli = command(dir, "rping", 1)
        .env("RNIC_DEVICES", "rnic0=::1")
        .args(["-c", "-a", "::1", "-p", "7175", "-C", "5", "-V", "-v"])
        .spawn()
        .expect("rping");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (c, s) = (finish(cli, "rping -c ::1", deadline), finish(srv, "rping -s ::1", deadline));
    assert!(c.status.success() && s.status.success(), "rping over IPv6:\n{}\n{}", text(&c), text(&s));
    assert_eq!(text(&c).lines().filter(|l| l.starts_with("ping data: rdma-ping-")).count(), 5, "{}", text(&c));
}

/// ucmatose (4 connections, 10 messages each way), cmtime (50 connections set up and torn
/// down, its table of steps) and the synchronous API's examples (rdma_server, rdma_client:
/// rdma_getaddrinfo, rdma_create_ep, rdma_get_request, the rdma_verbs.h helpers).
#[test]
fn ucmatose_cmtime_and_the_synchronous_examples() {
    let Some(dir) = setup(&["ucmatose", "cmtime", "rdma_server", "rdma_client"]) else { return };
    let _turn = serial();
    let a = ip(5);
    let (c, s) =
        pair(dir, 5, &["ucmatose", "-b", &a, "-c", "4", "-C", "10"], &["ucmatose", "-s", &a, "-c", "4", "-C", "10"]);
    assert!(c.contains("data transfers complete") && s.contains("data transfers complete"), "{c}\n{s}");
    assert!(c.contains("return status 0") && s.contains("return status 0"), "{c}\n{s}");
    let srv = command(dir, "cmtime", 5).args(["-b", &a, "-c", "50"]).spawn().expect("spawn cmtime server");
    wait_listening(&srv, "cmtime");
    let cli = command(dir, "cmtime", 5).args(["-s", &a, "-c", "50"]).spawn().expect("spawn cmtime");
    let c = finish(cli, "cmtime (client)", Instant::now() + Duration::from_secs(60));
    // The cmtime server of rdma-core 44 serves until it is stopped.
    let mut srv = srv;
    let _ = srv.kill();
    let _ = srv.wait();
    assert!(c.status.success(), "cmtime failed:\n{}", text(&c));
    let t = text(&c);
    for step in ["resolve addr", "resolve route", "create qp", "connect", "disconnect"] {
        assert!(t.lines().any(|l| l.starts_with(step)), "cmtime's table has {step}:\n{t}");
    }
    let (c, s) = pair(dir, 5, &["rdma_server", "-s", &a, "-p", "7471"], &["rdma_client", "-s", &a, "-p", "7471"]);
    assert!(c.contains("rdma_client: end 0") && s.contains("rdma_server: end 0"), "{c}\n{s}");
}

/// UD through the CM (SIDR): udaddy, 2 ids and 5 datagrams each way, both sides on rnic0;
/// and a SIDR request nobody listens for: UNREACHABLE with the SIDR status 1 (what Linux's
/// udaddy prints against Linux's CM), at once.
#[test]
fn udaddy_resolves_ud_qps_through_sidr() {
    let Some(dir) = setup(&["udaddy"]) else { return };
    let _turn = serial();
    let a = ip(18);
    let (c, s) =
        pair(dir, 18, &["udaddy", "-b", &a, "-c", "2", "-C", "5"], &["udaddy", "-s", &a, "-c", "2", "-C", "5"]);
    assert!(c.contains("data transfers complete") && s.contains("data transfers complete"), "{c}\n{s}");
    assert!(c.contains("return status 0") && s.contains("return status 0"), "{c}\n{s}");
    let t0 = Instant::now();
    let cli = command(dir, "udaddy", 20).args(["-s", &ip(20), "-C", "1"]).spawn().expect("udaddy");
    let c = finish(cli, "udaddy to nobody", Instant::now() + Duration::from_secs(20));
    assert!(text(&c).contains("RDMA_CM_EVENT_UNREACHABLE, error: 1"), "{}", text(&c));
    assert!(t0.elapsed() < Duration::from_secs(5), "the refusal took {:?}", t0.elapsed());
}

/// Whether the host has joined IPv4 group `g` on any interface (`/proc/net/igmp` lists
/// groups in the kernel's byte order, hex).
fn igmp_joined(g: std::net::Ipv4Addr) -> bool {
    let hex = format!("{:08X}", u32::from_le_bytes(g.octets()));
    std::fs::read_to_string("/proc/self/net/igmp").is_ok_and(|t| t.split_whitespace().any(|w| w == hex))
}

/// UD multicast through the CM: mckey's receiver (two ids, each QP attached, as
/// `rdma_join_multicast` does on the MULTICAST_JOIN event) and sender on rnic0, two
/// processes of one device; each of the receiver's QPs gets every datagram. The sender
/// starts once the receiver's device has joined the IP group on the host. Then a leave:
/// `rdma_leave_multicast` (at mckey's end) leaves the host's group.
#[test]
fn mckey_sends_to_a_multicast_group() {
    let Some(dir) = setup(&["mckey"]) else { return };
    let _turn = serial();
    let (a, group) = (ip(22), "239.82.22.1");
    let g: std::net::Ipv4Addr = group.parse().unwrap();
    let rcv = command(dir, "mckey", 22).args(["-m", group, "-b", &a, "-c", "2", "-C", "5"]).spawn().expect("mckey");
    let t0 = Instant::now();
    while !igmp_joined(g) {
        assert!(t0.elapsed() < Duration::from_secs(20), "the receiver never joined {group}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let snd = command(dir, "mckey", 22).args(["-m", group, "-b", &a, "-s", "-C", "5"]).spawn().expect("mckey");
    let deadline = Instant::now() + Duration::from_secs(60);
    let s = finish(snd, "mckey -s", deadline);
    let r = finish(rcv, "mckey (receiver)", deadline);
    let (s, r) = (text(&s), text(&r));
    for out in [&s, &r] {
        assert!(out.contains("joined dgid: ::ffff:239.82.22.1 mlid 0x0"), "{out}");
        assert!(out.contains("data transfers complete") && out.contains("return status 0"), "{s}\n{r}");
    }
    assert!(!igmp_joined(g), "the group is still joined after both left");
}

/// perftest's rdma_cm mode (`-R`): the connection, the exchange of addresses over the
/// connected QP and the measured test; UD (`-c UD`) through SIDR.
#[test]
fn perftest_connects_through_rdma_cm() {
    let Some(dir) = setup(&["ib_send_bw", "ib_write_bw", "ib_read_lat"]) else { return };
    let _turn = serial();
    let a = ip(9);
    let runs = [("ib_send_bw", "RC"), ("ib_write_bw", "RC"), ("ib_read_lat", "RC"), ("ib_send_bw", "UD")];
    for (i, (program, conn)) in runs.into_iter().enumerate() {
        let port = (18_515 + i).to_string();
        let args = ["-R", "-d", "rnic0", "-n", "200", "-p", &port, "-c", conn];
        let mut server = vec![program];
        server.extend_from_slice(&args);
        let mut client = server.clone();
        client.push(&a);
        let (c, _) = pair(dir, 9, &server, &client);
        assert!(c.contains("Data ex. method : rdma_cm"), "{program}: rdma_cm was used:\n{c}");
        let row = c.lines().skip_while(|l| !l.contains("#bytes")).nth(1).unwrap_or("");
        let cols: Vec<f64> = row.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        assert!(cols.len() >= 4 && cols[1] >= 200.0, "{program} -c {conn}: a result row:\n{c}");
    }
}

/// Connecting to a port nobody listens on is a REJECTED event (status 8, invalid service
/// ID, as the kernel's CM answers), at once: never a hang.
#[test]
fn a_port_nobody_listens_on_is_rejected_at_once() {
    let Some(dir) = setup(&["rping"]) else { return };
    let _turn = serial();
    let t0 = Instant::now();
    let cli = command(dir, "rping", 12).args(["-c", "-a", &ip(12), "-p", "7999", "-C", "1"]).spawn().expect("rping");
    let c = finish(cli, "rping to an unlistened port", Instant::now() + Duration::from_secs(20));
    assert!(!c.status.success(), "rping to a port nobody listens on succeeded:\n{}", text(&c));
    assert!(text(&c).contains("RDMA_CM_EVENT_REJECTED, error 8"), "{}", text(&c));
    assert!(t0.elapsed() < Duration::from_secs(5), "the rejection took {:?}", t0.elapsed());
}

/// `tests/c/cm_peer_killed.c`: the active process SIGKILLed after ESTABLISHED, both on one
/// shared device, nothing in flight: the passive side gets DISCONNECTED (within about a
/// second: the device's members check each other's names once a second), as Linux's
/// kernel sends a dead process's DREQ. Without it the survivor waited forever.
#[test]
fn a_killed_peer_on_the_same_device_is_disconnected() {
    let Some((dir, exe)) = compile_c("cm_peer_killed", RDMA_CMA_H, "librdmacm-dev", RDMACM_LIBS) else { return };
    let _turn = serial();
    let child = command(dir, exe.to_str().expect("utf-8 path"), 22).arg(ip(22)).spawn().expect("run");
    let out = finish(child, "cm_peer_killed.c", Instant::now() + Duration::from_secs(60));
    let t = text(&out);
    assert!(out.status.success(), "cm_peer_killed.c failed:\n{t}");
    assert_eq!(t.lines().filter(|l| l.starts_with("ok: ")).count(), 2, "every check ran:\n{t}");
    eprintln!("{t}");
}

/// `tests/c/cm_contract.c`: non-blocking channels, EADDRINUSE, rejection with private
/// data, an external QP through rdma_init_qp_attr and rdma_establish, DISCONNECTED on both
/// sides, rdma_migrate_id, rdma_getaddrinfo and rdma_create_ep, an id destroyed with an
/// event waiting, TIMEWAIT_EXIT for both sides of a closed connection.
#[test]
fn c_cm_contract() {
    let Some((dir, exe)) = compile_c("cm_contract", RDMA_CMA_H, "librdmacm-dev", RDMACM_LIBS) else { return };
    let _turn = serial();
    let child = command(dir, exe.to_str().expect("utf-8 path"), 14).arg(ip(14)).spawn().expect("run");
    let out = finish(child, "cm_contract.c", Instant::now() + Duration::from_secs(60));
    let t = text(&out);
    assert!(out.status.success(), "cm_contract.c failed:\n{t}");
    assert_eq!(t.lines().filter(|l| l.starts_with("ok: ")).count(), 8, "every check ran:\n{t}");
    eprintln!("{t}");
}

/// `tests/py/join_at_once.py`, ten times: a passive and an active process forked at once
/// (rdma-core's rdma_cm tests fork theirs), each starting the shared device while the other
/// does, connect (without `Msg::Joined` about one run in ten failed here, and most of
/// rdma-core's rdma_cm tests). Needs python3-pyverbs.
#[test]
fn processes_that_start_the_device_at_once_connect() {
    let Some(dir) = setup(&[]) else { return };
    if std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import pyverbs.cmid"])
        .output()
        .map_or(true, |o| !o.status.success())
    {
        unavailable("python3-pyverbs is not installed (apt-get install python3-pyverbs)");
        return;
    }
    let _turn = serial();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/join_at_once.py");
    for run in 0..10 {
        // The devices spin (the default) so that both start within microseconds.
        let child = command(dir, "/usr/bin/python3", 16)
            .env_remove("RNIC_SPIN_US")
            .arg(&script)
            .arg(ip(16))
            .spawn()
            .expect("python3");
        let out = finish(child, "join_at_once.py", Instant::now() + Duration::from_secs(60));
        assert!(out.status.success(), "run {run}:\n{}", text(&out));
    }
}
