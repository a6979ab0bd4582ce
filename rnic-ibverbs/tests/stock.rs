//! Stock libibverbs programs on rnic: Debian's `ibverbs-utils` and `perftest` binaries (not
//! built here), run against the library `scripts/build-ibverbs.sh` links, two processes on
//! one host (`-d rnic0` and `-d rnic1`, GID index 1).
//!
//! - `exports_cover_every_import`: every symbol and version those programs, the vendor
//!   libraries they load and librdmacm import from libibverbs (and from libmlx5/libefa)
//!   is exported by ours.
//! - the other tests run the programs and check their exit status and their numbers.
//!
//! Needs the packages (`.ci/run` installs them) and a C compiler for the link; without
//! them each test prints why it is skipped, except under CI (`CI` set), where a missing
//! piece is a failure.

mod common;

use common::{compile_c, dyn_syms, finish, have, lib_dir, serial, unavailable};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const VERBS_H: &str = "/usr/include/infiniband/verbs.h";

/// Library folder and the programs, or None (skipped).
fn setup(programs: &[&str]) -> Option<&'static Path> {
    if let Some(p) = programs.iter().find(|p| !have(p)) {
        unavailable(&format!("/usr/bin/{p} is not installed (apt-get install ibverbs-utils perftest)"));
        return None;
    }
    match lib_dir() {
        Some(d) => Some(d),
        None => {
            unavailable("no C compiler (cc) to link libibverbs.so.1");
            None
        }
    }
}

#[test]
fn exports_cover_every_import() {
    let programs = ["ibv_devinfo", "ibv_rc_pingpong", "ib_write_bw"];
    let Some(dir) = setup(&programs) else { return };
    // Every binary of the two packages, as dpkg lists them.
    let out = Command::new("dpkg").args(["-L", "ibverbs-utils", "perftest"]).output().expect("dpkg");
    let files: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("/usr/bin/"))
        .map(PathBuf::from)
        // Programs, not scripts (perftest ships run_perftest_loopback).
        .filter(|p| std::fs::read(p).is_ok_and(|b| b.starts_with(b"\x7fELF")))
        .collect();
    assert!(files.len() >= 10, "dpkg lists the packages' programs: {files:?}");
    let mut importers = files.clone();
    // The system's librdmacm (perftest links it) loads beside our library.
    for lib in ["/usr/lib/x86_64-linux-gnu/librdmacm.so.1", "/usr/lib/aarch64-linux-gnu/librdmacm.so.1"] {
        if Path::new(lib).is_file() {
            importers.push(lib.into());
        }
    }
    // The libraries that load the vendor libraries (issue: pyverbs failed with
    // `version 'EFA_1.2' not found`, UCX's libuct_ib with 'MLX5_1.2'): every shared
    // object of pyverbs, UCX, libfabric and Open MPI, as dpkg lists them.
    let vendor_users = ["python3-pyverbs", "libucx0", "libfabric1", "libopenmpi3"];
    let out = Command::new("dpkg").arg("-L").args(vendor_users).output().expect("dpkg");
    let libs: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(".so"))
        .map(PathBuf::from)
        .filter(|p| !p.is_symlink() && std::fs::read(p).is_ok_and(|b| b.starts_with(b"\x7fELF")))
        .collect();
    if libs.iter().filter(|l| l.to_string_lossy().contains("pyverbs")).count() < 5 {
        unavailable(&format!(
            "{} are not all installed (apt-get install python3-pyverbs ucx-utils libfabric1 libopenmpi3)",
            vendor_users.join(", ")
        ));
    }
    importers.extend(libs);
    let mut ours = BTreeSet::new();
    for lib in ["libibverbs.so.1", "libmlx5.so.1", "libefa.so.1"] {
        ours.extend(dyn_syms(&dir.join(lib), false));
    }
    let mut missing = Vec::new();
    let mut checked = 0;
    for f in &importers {
        for (ver, name) in dyn_syms(f, true) {
            if ver.starts_with("IBVERBS_") || ver.starts_with("MLX5_") || ver.starts_with("EFA_") {
                checked += 1;
                if !ours.contains(&(ver.clone(), name.clone())) {
                    missing.push(format!("{}: {name}@{ver}", f.display()));
                }
            }
        }
    }
    assert!(checked > 500, "only {checked} imports found: is objdump's output parsed?");
    assert!(missing.is_empty(), "imports rnic's libraries do not export:\n{}", missing.join("\n"));
    eprintln!("{checked} imports of {} programs and libraries: all exported", importers.len());
}

/// The environment every program runs with: our library first, the test's own devices
/// (addresses no other test uses), quiet spinning (see README: two programs spinning on a
/// 2-CPU machine).
fn command(dir: &Path, program: &str, base: u8) -> Command {
    let mut c = Command::new(program);
    c.env("LD_LIBRARY_PATH", dir)
        .env("RNIC_DEVICES", format!("rnic0=127.0.81.{base},rnic1=127.0.81.{}", base + 1))
        .env("RNIC_SPIN_US", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// True once a TCP socket listens on `port` (from /proc/net/tcp: a probe connection would
/// be taken as the program's client).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f)
            .map(|t| {
                t.lines().any(|l| {
                    l.split_whitespace().nth(1).is_some_and(|a| format!("{a} ").contains(&want))
                        && l.split_whitespace().nth(3) == Some("0A")
                })
            })
            .unwrap_or(false)
    })
}

/// Runs `program` as server (`-d rnic0`) and client (`-d rnic1 ... 127.0.0.1`) with
/// `args`; returns the client's stdout after checking both succeeded.
fn pair(dir: &Path, program: &str, args: &[&str], base: u8, port: u16, gid_flag: &str) -> String {
    let what = format!("{program} {}", args.join(" "));
    let mut full = vec![gid_flag, "1"];
    full.extend_from_slice(args);
    let (c, s) = pair_raw(dir, program, &full, base, port);
    let show = |o: &Output| format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(c.status.success(), "{what}: client failed ({}):\n{}\nserver:\n{}", c.status, show(&c), show(&s));
    assert!(s.status.success(), "{what}: server failed ({}):\n{}\nclient:\n{}", s.status, show(&s), show(&c));
    String::from_utf8_lossy(&c.stdout).into_owned()
}

/// Runs the pair and returns (client, server) outputs, whatever their status.
fn pair_raw(dir: &Path, program: &str, args: &[&str], base: u8, port: u16) -> (Output, Output) {
    let what = format!("{program} {}", args.join(" "));
    let port_s = port.to_string();
    let mut srv = command(dir, program, base);
    srv.args(["-d", "rnic0", "-p", &port_s]).args(args);
    let srv = srv.spawn().expect("spawn server");
    let t0 = Instant::now();
    while !listening(port) {
        assert!(t0.elapsed() < Duration::from_secs(20), "{what}: the server never listened on TCP {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut cli = command(dir, program, base);
    cli.args(["-d", "rnic1", "-p", &port_s]).args(args).arg("127.0.0.1");
    let cli = cli.spawn().expect("spawn client");
    let deadline = Instant::now() + Duration::from_secs(90);
    let c = finish(cli, &format!("{what} (client)"), deadline);
    let s = finish(srv, &format!("{what} (server)"), deadline);
    (c, s)
}

/// ibv_*_pingpong prints `N iters in T seconds = X usec/iter`.
fn usec_per_iter(out: &str) -> f64 {
    let line = out.lines().find(|l| l.contains("usec/iter")).unwrap_or_else(|| panic!("no usec/iter in:\n{out}"));
    let v: f64 = line
        .split('=')
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .expect("a number");
    v
}

#[test]
fn ibverbs_utils() {
    let Some(dir) = setup(&["ibv_devices", "ibv_devinfo", "ibv_rc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong"])
    else {
        return;
    };
    let _turn = serial();
    // ibv_devices: both devices with their node GUIDs (EUI-64 of the MAC 02:52:7f:00:51:0a).
    let out = command(dir, "ibv_devices", 10).output().expect("ibv_devices");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("rnic0") && text.contains("rnic1"), "{text}");
    assert!(text.contains("00527ffffe00510a"), "node GUID of rnic0 (127.0.81.10): {text}");
    // ibv_devinfo -v: attributes, port and both GIDs, RoCE v2.
    let out = command(dir, "ibv_devinfo", 10).args(["-v", "-d", "rnic1"]).output().expect("ibv_devinfo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for want in [
        "hca_id:\trnic1",
        "PORT_ACTIVE",
        "link_layer:\t\tEthernet",
        "::ffff:127.0.81.11, RoCE v2",
        "fe80::",
        "max_qp_wr:\t\t\t16384",
    ] {
        assert!(text.contains(want), "ibv_devinfo -v lacks {want:?}:\n{text}");
    }
    let mut port = 18910;
    let mut next = || {
        port += 1;
        port
    };
    // RC: plain, with events, data checked over sizes from 1 byte to 1 MiB.
    let t = usec_per_iter(&pair(dir, "ibv_rc_pingpong", &["-n", "500"], 10, next(), "-g"));
    assert!(t > 0.0 && t < 5000.0, "rc_pingpong {t} usec/iter");
    pair(dir, "ibv_rc_pingpong", &["-e", "-n", "200"], 10, next(), "-g");
    for size in ["1", "4096", "65536", "1048576"] {
        pair(dir, "ibv_rc_pingpong", &["-c", "-s", size, "-n", "20"], 10, next(), "-g");
    }
    pair(dir, "ibv_rc_pingpong", &["-e", "-c", "-s", "1048576", "-n", "10", "-m", "1024"], 10, next(), "-g");
    pair(dir, "ibv_ud_pingpong", &["-n", "500"], 10, next(), "-g");
    pair(dir, "ibv_ud_pingpong", &["-e", "-c", "-s", "1024", "-n", "100"], 10, next(), "-g");
    pair(dir, "ibv_srq_pingpong", &["-n", "500"], 10, next(), "-g");
    pair(dir, "ibv_srq_pingpong", &["-e", "-c", "-s", "8192", "-q", "4", "-n", "100"], 10, next(), "-g");
    if have("ibv_uc_pingpong") {
        pair(dir, "ibv_uc_pingpong", &["-c", "-n", "200"], 10, next(), "-g");
    }
    // XRC: an XRC domain on a file, XRC SRQs, XRC_SEND and XRC_RECV QPs, each side's
    // SENDs steered to the other's SRQ by number.
    if have("ibv_xsrq_pingpong") {
        for args in [&["-n", "50"][..], &["-e", "-s", "65536", "-n", "10"]] {
            let out = pair(dir, "ibv_xsrq_pingpong", args, 10, next(), "-g");
            assert!(out.contains("SRQN") && out.lines().any(|l| l == "success"), "ibv_xsrq_pingpong {args:?}:\n{out}");
        }
    }
    // Without a GID (the habit on InfiniBand, wrong on RoCE) both sides fail, and the
    // library says why and what to pass.
    let (c, s) = pair_raw(dir, "ibv_rc_pingpong", &["-n", "10"], 10, next());
    let err = format!("{}{}", String::from_utf8_lossy(&c.stderr), String::from_utf8_lossy(&s.stderr));
    assert!(!c.status.success() && !s.status.success(), "rc_pingpong without -g must fail on RoCE");
    assert!(err.contains("rnic: ") && err.contains("-g 1"), "the reason is on stderr: {err}");
}

/// perftest prints a result row: `#bytes #iterations BW-peak BW-average MsgRate` or, for
/// latency, `#bytes #iterations t_min t_max t_typical ...`. The numbers after the first two.
fn result_row(out: &str) -> Vec<f64> {
    let row = out
        .lines()
        .rfind(|l| {
            l.split_whitespace().next().is_some_and(|w| w.parse::<u64>().is_ok()) && l.split_whitespace().count() >= 5
        })
        .unwrap_or_else(|| panic!("no result row in:\n{out}"));
    row.split_whitespace().skip(2).filter_map(|w| w.parse().ok()).collect()
}

#[test]
fn perftest() {
    let tests = [
        "ib_send_bw",
        "ib_write_bw",
        "ib_read_bw",
        "ib_atomic_bw",
        "ib_send_lat",
        "ib_write_lat",
        "ib_read_lat",
        "ib_atomic_lat",
    ];
    let Some(dir) = setup(&tests) else { return };
    let _turn = serial();
    let mut port = 18950;
    let mut report = Vec::new();
    for t in tests {
        let conns: &[&str] = match t {
            "ib_send_bw" | "ib_send_lat" => &["RC", "UC", "UD"],
            "ib_write_bw" | "ib_write_lat" => &["RC", "UC"],
            _ => &["RC"],
        };
        for conn in conns {
            for api in [None, Some("--use_old_post_send")] {
                port += 1;
                let mut args = vec!["-c", conn, "-n", "200"];
                args.extend(api);
                let out = pair(dir, t, &args, 20, port, "-x");
                let row = result_row(&out);
                let what = format!("{t} -c {conn} {}", api.unwrap_or("(ibv_wr_* API)"));
                if t.ends_with("_bw") {
                    // BW peak, average (MB/s), message rate.
                    assert!(row.len() >= 3 && row[1] > 0.0, "{what}: no bandwidth in {row:?}\n{out}");
                    report.push(format!("{what}: {:.0} MB/s", row[1]));
                } else {
                    // t_min, t_max, t_typical (usec): a latency row that makes sense (above
                    // zero, typical between min and max). How fast is the benchmarks'
                    // business (scripts/bench.sh), not a test's: a bound here failed on a
                    // busy 2-core host.
                    let sane = row.len() >= 3 && row[0] > 0.0 && row[0] <= row[2] && row[2] <= row[1];
                    assert!(sane, "{what}: latency row {row:?}\n{out}");
                    report.push(format!("{what}: {:.2} usec typical", row[2]));
                }
            }
        }
    }
    eprintln!("{}", report.join("\n"));
}

/// Stock perftest latency tests sleeping on completion events (`-e`). Debian's perftest
/// 4.5 waits for its send and receive CQs on one completion channel and, after an event,
/// polls the CQ it expected once: it takes the first event as its send's and, finding the
/// send CQ empty, goes on, until a send CQ of one entry overflows (the QP errs: RETRY_EXC
/// at the client, FLUSH at the server, within about 400 messages). On rxe the ACK always
/// comes before the answer; rnic's ACK rides with the answer in one send, after it, so
/// the program must not see the receive's event before the ACK's completion is queued: a
/// round raises its completions' events once it has handled every packet it received.
#[test]
fn perftest_on_completion_events() {
    let tests = ["ib_send_lat", "ib_read_lat", "ib_atomic_lat"];
    let Some(dir) = setup(&tests) else { return };
    let _turn = serial();
    let mut port = 19040;
    let mut report = Vec::new();
    for t in tests {
        let conns: &[&str] = if t == "ib_send_lat" { &["RC", "UC", "UD"] } else { &["RC"] };
        for conn in conns {
            port += 1;
            let out = pair(dir, t, &["-e", "-c", conn, "-n", "5000"], 20, port, "-x");
            let row = result_row(&out);
            let sane = row.len() >= 3 && row[0] > 0.0 && row[0] <= row[2] && row[2] <= row[1];
            assert!(sane, "{t} -e -c {conn}: latency row {row:?}\n{out}");
            report.push(format!("{t} -e -c {conn}: {:.2} usec typical", row[2]));
        }
    }
    eprintln!("{}", report.join("\n"));
}

/// `tests/c/contract.c`, compiled against rdma-core's own `<infiniband/verbs.h>` and linked
/// with rnic's library: the verbs contract as C sees it (errno values, inline sends,
/// immediate data byte order, completion channel fd semantics, atomics through both post
/// APIs, protection errors and their async event, flushing).
#[test]
fn c_contract() {
    let Some((dir, exe)) = compile_c("contract", VERBS_H, "libibverbs-dev", &["-libverbs"]) else { return };
    let _turn = serial();
    let out = command(dir, exe.to_str().expect("utf-8 path"), 30).output().expect("run contract");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "contract.c failed:\n{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("ok: ")).count(), 15, "every check ran:\n{text}");
    eprintln!("{text}");
}

/// `tests/c/contexts.c`: every context of a process on one device (rdma-core's suite
/// opens its server and client on the same device): traffic between two contexts of
/// rnic0, another context's CQ or channel refused, EBUSY for a PD or CQ in use, a context
/// closed with live objects while the others move data, contexts opened and closed from
/// four threads beside checked transfers, the device's port released once every context
/// is closed, and the device started again.
#[test]
fn c_contexts_share_a_device() {
    let Some((dir, exe)) = compile_c("contexts", VERBS_H, "libibverbs-dev", &["-libverbs"]) else { return };
    let _turn = serial();
    let child = command(dir, exe.to_str().expect("utf-8 path"), 34).spawn().expect("run contexts");
    let out = finish(child, "contexts.c", Instant::now() + Duration::from_secs(120));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "contexts.c failed:\n{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("ok: ")).count(), 7, "every check ran:\n{text}");
    eprintln!("{}", text.lines().filter(|l| l.starts_with("ok: ")).collect::<Vec<_>>().join("\n"));
}

/// `tests/c/import.c`: `ibv_import_device` of a dup of a context's `cmd_fd` gives a second
/// context on the same objects (rdma-core's test_shared_pd does this): the PD and MR
/// imported by handle carry a QP and take a WRITE into the original memory, unimport and
/// closing the imported context leave the original's objects alone, and a descriptor that
/// is no context's is refused.
#[test]
fn c_import_shares_a_contexts_objects() {
    let Some((dir, exe)) = compile_c("import", VERBS_H, "libibverbs-dev", &["-libverbs"]) else { return };
    let _turn = serial();
    let out = command(dir, exe.to_str().expect("utf-8 path"), 30).output().expect("run import");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "import.c failed:\n{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("ok: ")).count(), 4, "every check ran:\n{text}");
    eprintln!("{text}");
}

/// `tests/c/xrc.c`: XRC domains shared by two contexts through a file's inode, XRC SRQs
/// and target QPs, `ibv_open_qp` (its EINVAL refusals; a handle in another context that
/// keeps the QP after its creator's destroy; the QP gone with its last handle), and
/// `ibv_close_device` with XRC domains, SRQs, target and opened QPs alive: torn down,
/// another context's handle keeps its QP, and nothing keeps the device running.
#[test]
fn c_xrc_domains_open_qp_and_teardown() {
    let Some((dir, exe)) = compile_c("xrc", VERBS_H, "libibverbs-dev", &["-libverbs"]) else { return };
    let _turn = serial();
    let child = command(dir, exe.to_str().expect("utf-8 path"), 38).spawn().expect("run xrc");
    let out = finish(child, "xrc.c", Instant::now() + Duration::from_secs(60));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "xrc.c failed:\n{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("ok: ")).count(), 6, "every check ran:\n{text}");
    eprintln!("{text}");
}

/// Unmodified C programs on raw Ethernet devices (root: a network namespace and a veth
/// pair this test makes; skipped otherwise): `ibv_devinfo` shows the port's active MTU from
/// the link (1500 bytes: 1024) and GID 0 from the interface's MAC, and `ibv_rc_pingpong
/// -g 0` runs between two raw devices over their link-local GIDs (IPv6 found by neighbour
/// discovery, which rnic answers itself).
#[test]
fn stock_programs_on_raw_ethernet_use_the_link() {
    let Some(dir) = setup(&["ibv_devinfo", "ibv_rc_pingpong"]) else {
        return;
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || Command::new("ip").arg("-V").output().is_err() {
        eprintln!("stock_programs_on_raw_ethernet_use_the_link: skipped: needs root and iproute2");
        return;
    }
    let _turn = serial();
    let ns = format!("rnic-ibv-raw-{}", std::process::id());
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
    ip(&["link", "set", "lo", "up"]);
    ip(&["link", "add", "ea", "type", "veth", "peer", "name", "eb"]);
    ip(&["link", "set", "ea", "up"]);
    ip(&["link", "set", "eb", "up"]);
    let link = Command::new("ip").args(["-n", &ns, "-br", "link", "show", "ea"]).output().unwrap();
    let mac: Vec<u8> = String::from_utf8_lossy(&link.stdout)
        .split_whitespace()
        .nth(2)
        .unwrap()
        .split(':')
        .map(|x| u8::from_str_radix(x, 16).unwrap())
        .collect();
    let gid0 = format!(
        "fe80::{:x}:{:x}:{:x}:{:x}",
        u16::from_be_bytes([mac[0] ^ 2, mac[1]]),
        u16::from_be_bytes([mac[2], 0xff]),
        u16::from_be_bytes([0xfe, mac[3]]),
        u16::from_be_bytes([mac[4], mac[5]])
    );
    let in_ns = |program: &str| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &ns, program])
            .env("LD_LIBRARY_PATH", dir)
            .env("RNIC_DEVICES", "rnic0=10.98.0.1@ea,rnic1=10.98.0.2@eb")
            .env("RNIC_SPIN_US", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let out = in_ns("ibv_devinfo").args(["-v", "-d", "rnic0"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("active_mtu:\t\t1024 (3)"), "a 1500-byte link carries MTU 1024:\n{text}");
    assert!(text.contains(&format!("GID[  0]:\t\t{gid0}, RoCE v2")), "GID 0 from ea's MAC ({gid0}):\n{text}");
    let server =
        in_ns("ibv_rc_pingpong").args(["-d", "rnic0", "-g", "0", "-n", "200", "-c", "-p", "18777"]).spawn().unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
        }
    }
    let mut server = Kill(server);
    std::thread::sleep(Duration::from_millis(500));
    let client = in_ns("ibv_rc_pingpong")
        .args(["-d", "rnic1", "-g", "0", "-n", "200", "-c", "-p", "18777", "127.0.0.1"])
        .output()
        .unwrap();
    let ctext = String::from_utf8_lossy(&client.stdout);
    assert!(client.status.success(), "client: {ctext}{}", String::from_utf8_lossy(&client.stderr));
    assert!(ctext.contains("200 iters in") && ctext.contains("GID fe80::"), "{ctext}");
    let st = server.0.wait().unwrap();
    assert!(st.success(), "server exit {st}");
}

/// The packets a capture holds that this device sent (IPv4 source `me`), each with its
/// send's timestamp and BTH opcode: packets of one `sendmmsg` share a timestamp (the
/// capture stamps a send before the system call).
fn sent_opcodes(pcap: &Path, me: [u8; 4]) -> Vec<((u32, u32), u8)> {
    let d = std::fs::read(pcap).unwrap_or_else(|e| panic!("{}: {e}", pcap.display()));
    assert!(d.len() >= 24, "{}: no pcap header", pcap.display());
    let link = u32::from_le_bytes(d[20..24].try_into().unwrap());
    let (mut off, mut out) = (24, Vec::new());
    while off + 16 <= d.len() {
        let w = |i: usize| u32::from_le_bytes(d[off + i..off + i + 4].try_into().unwrap());
        let (ts, len) = ((w(0), w(4)), w(8) as usize);
        let p = &d[off + 16..(off + 16 + len).min(d.len())];
        off += 16 + len;
        let ip = if link == 1 { 14 } else { 0 };
        if p.len() < ip + 20 || (link == 1 && p[12..14] != [8, 0]) || p[ip + 9] != 17 || p[ip + 12..ip + 16] != me {
            continue;
        }
        let udp = ip + usize::from(p[ip] & 15) * 4;
        if p.len() > udp + 8 && u16::from_be_bytes([p[udp + 2], p[udp + 3]]) == 4791 {
            out.push((ts, p[udp + 8]));
        }
    }
    out
}

/// Stock `ib_write_lat` polls its buffer, not its CQ, for the peer's WRITE, and polls the
/// CQ only for its own WRITE's completion. The library's poll runs the device's round on
/// the program's thread and holds the ACKs of what it received for a moment, so the ACK
/// of the peer's WRITE leaves with the program's answer, in one send, and the peer's own
/// CQ poll takes both: its memory is written before it starts polling it, and no
/// progress thread has to wake for the packet (on two CPUs that wake-up was 19 us typical
/// against 5.9). Without holding, no ACK shares a send with a WRITE.
#[test]
fn ib_write_lat_acks_ride_with_the_answer() {
    let Some(dir) = setup(&["ib_write_lat"]) else { return };
    let _turn = serial();
    let caps = Path::new(env!("CARGO_TARGET_TMPDIR")).join("acks-ride");
    std::fs::create_dir_all(&caps).unwrap();
    let (srv_cap, cli_cap) = (caps.join("server.pcap"), caps.join("client.pcap"));
    let port = "18990";
    let mut srv = command(dir, "ib_write_lat", 70);
    srv.env("RNIC_PCAP", &srv_cap).args(["-d", "rnic0", "-x", "1", "-s", "8", "-n", "300", "-p", port]);
    let srv = srv.spawn().expect("spawn server");
    let t0 = Instant::now();
    while !listening(18990) {
        assert!(t0.elapsed() < Duration::from_secs(20), "ib_write_lat never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut cli = command(dir, "ib_write_lat", 70);
    cli.env("RNIC_PCAP", &cli_cap).args(["-d", "rnic1", "-x", "1", "-s", "8", "-n", "300", "-p", port, "127.0.0.1"]);
    let cli = cli.spawn().expect("spawn client");
    let deadline = Instant::now() + Duration::from_secs(90);
    let (c, s) = (finish(cli, "ib_write_lat client", deadline), finish(srv, "ib_write_lat server", deadline));
    assert!(c.status.success() && s.status.success(), "ib_write_lat:\n{}", String::from_utf8_lossy(&c.stderr));
    for (cap, me) in [(&srv_cap, [127, 0, 81, 70]), (&cli_cap, [127, 0, 81, 71])] {
        let sent = sent_opcodes(cap, me);
        let acks: Vec<usize> = (0..sent.len()).filter(|&i| sent[i].1 == 0x11).collect();
        // An ACK in the same send as an RDMA WRITE ONLY next to it.
        let riding = acks
            .iter()
            .filter(|&&i| {
                [i.wrapping_sub(1), i + 1].iter().any(|&j| sent.get(j).is_some_and(|p| p.0 == sent[i].0 && p.1 == 0x0a))
            })
            .count();
        eprintln!("{}: {} ACKs sent, {riding} with a WRITE", cap.display(), acks.len());
        assert!(acks.len() >= 250, "{}: {} ACKs for 300 WRITEs", cap.display(), acks.len());
        assert!(riding * 3 >= acks.len(), "{}: only {riding} of {} ACKs left with a WRITE", cap.display(), acks.len());
    }
}
