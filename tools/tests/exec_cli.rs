//! `rnic exec`'s device files: a program finds rnic's devices where software looks on a
//! host with rxe (`/sys/class/infiniband`, `/dev/infiniband`), in a mount namespace of its
//! own, and the host's file system is left as it was; where no namespace can be made the
//! program runs anyway and stderr says what it lacks.
//!
//! The programs run here (`sh`, `cat`) load no libibverbs, so `--lib` names a folder with
//! an empty stand-in: these tests need neither the library nor RDMA packages. Making a
//! mount namespace needs root or unprivileged user namespaces; without either the first
//! test checks the refusal instead.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn lib_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("exec-cli-lib");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("libibverbs.so.1"), b"").unwrap();
    std::fs::write(d.join("librdmacm.so.1"), b"").unwrap();
    d
}

/// A folder with only libibverbs.so.1 (an older build): `rnic exec` says rdma_cm programs
/// would load the system's librdmacm, and runs the program all the same.
#[test]
fn a_library_folder_without_librdmacm_is_named() {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("exec-cli-lib-old");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("libibverbs.so.1"), b"").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rnic"))
        .args(["exec", "--no-device-files", "--lib"])
        .arg(&d)
        .args(["--", "sh", "-c", "echo ran"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success() && stdout.contains("ran"), "{stdout}{stderr}");
    assert!(stderr.contains("has no librdmacm.so.1"), "{stderr}");
}

fn rnic_exec(extra: &[&str], script: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rnic"))
        .arg("exec")
        .arg("--lib")
        .arg(lib_dir())
        .args(extra)
        .args(["--", "sh", "-c", script])
        .env("RNIC_DEVICES", "rnic0=127.0.0.1,rnic1=127.0.0.2")
        .output()
        .expect("run rnic exec")
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// What a program reads, as rxe has it.
const READ_TREE: &str = "set -e
for d in rnic0 rnic1; do
  cat /sys/class/infiniband/$d/node_type /sys/class/infiniband/$d/node_guid
  cat /sys/class/infiniband/$d/ports/1/state /sys/class/infiniband/$d/ports/1/link_layer
  for i in 0 1; do
    echo gid$i $(cat /sys/class/infiniband/$d/ports/1/gids/$i) $(cat /sys/class/infiniband/$d/ports/1/gid_attrs/types/$i) $(cat /sys/class/infiniband/$d/ports/1/gid_attrs/ndevs/$i)
  done
  echo net $(ls /sys/class/infiniband/$d/device/net/)
done
cat /sys/class/infiniband_verbs/uverbs0/ibdev /sys/class/infiniband_verbs/uverbs1/ibdev
test -c /dev/infiniband/uverbs0 && test -r /dev/infiniband/uverbs0 && test -w /dev/infiniband/uverbs0 && echo uverbs0 is a character device
test -c /dev/infiniband/uverbs1 && echo uverbs1 is a character device
test -d /sys/class/net/lo && test -e /dev/null && test -d /dev/pts && echo host entries kept";

#[test]
fn a_program_finds_the_devices_where_rxe_puts_them() {
    let before = Path::new("/sys/class/infiniband").exists();
    let out = rnic_exec(&[], READ_TREE);
    let (stdout, stderr) = text(&out);
    if stderr.contains("running without /sys/class/infiniband") {
        // Neither root nor unprivileged user namespaces: the program still ran.
        assert!(out.status.code() == Some(1), "the program ran and failed on the missing files: {stderr}");
        eprintln!("skipped: no mount namespace here: {stderr}");
        return;
    }
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    for want in [
        "1: CA\n0052:7fff:fe00:0001\n4: ACTIVE\nEthernet\n",
        "gid0 fe80:0000:0000:0000:0052:7fff:fe00:0001 RoCE v2 lo\n",
        "gid1 0000:0000:0000:0000:0000:ffff:7f00:0001 RoCE v2 lo\n",
        "gid1 0000:0000:0000:0000:0000:ffff:7f00:0002 RoCE v2 lo\n",
        "net lo\n",
        "rnic0\nrnic1\n",
        "uverbs0 is a character device\nuverbs1 is a character device\nhost entries kept\n",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in:\n{stdout}\nstderr:\n{stderr}");
    }
    assert!(stderr.is_empty(), "nothing said when the files were provided: {stderr}");
    // The host's file system is as it was.
    assert_eq!(Path::new("/sys/class/infiniband").exists(), before);
    assert!(!Path::new("/dev/infiniband/uverbs0").exists() || before, "/dev/infiniband leaked to the host");
}

#[test]
fn no_device_files_leaves_the_file_system_alone() {
    if Path::new("/sys/class/infiniband").exists() {
        eprintln!("skipped: this host has RDMA devices of its own");
        return;
    }
    let out = rnic_exec(&["--no-device-files"], "test -e /sys/class/infiniband && echo present || echo absent");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success() && stdout == "absent\n" && stderr.is_empty(), "{stdout}{stderr}");
}

/// An unprivileged user (nobody) gets the files through a user namespace where the kernel
/// allows it; where it does not, stderr says so once and the program runs. Needs root to
/// become nobody (`setpriv`).
#[test]
fn unprivileged_runs_get_the_files_or_a_clear_message() {
    if !nix_is_root() || Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped: needs root and setpriv to run as nobody");
        return;
    }
    // nobody must reach the binary and the stand-in folder.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("exec-cli-nobody");
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("rnic");
    std::fs::copy(env!("CARGO_BIN_EXE_rnic"), &bin).unwrap();
    std::fs::write(dir.join("libibverbs.so.1"), b"").unwrap();
    let mut d = dir.clone();
    while let Some(p) = d.parent() {
        // Each folder on the way must be searchable by nobody (it is under /tmp and a
        // target folder on a CI clone; say so otherwise).
        if std::fs::metadata(p).is_ok_and(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o001 == 0) {
            eprintln!("skipped: {} is not searchable by nobody", p.display());
            return;
        }
        d = p.to_path_buf();
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(dir.join("libibverbs.so.1"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .arg("exec")
        .arg("--lib")
        .arg(&dir)
        .args(["--", "sh", "-c", "cat /sys/class/infiniband/rnic0/ports/1/gids/1 && echo ran"])
        .env("RNIC_DEVICES", "rnic0=127.0.0.1")
        .output()
        .expect("setpriv");
    let (stdout, stderr) = text(&out);
    if stderr.contains("running without") {
        assert!(stderr.contains("unprivileged user namespace was refused"), "{stderr}");
        assert_eq!(stderr.matches("rnic exec:").count(), 1, "said once: {stderr}");
        eprintln!("this kernel refuses unprivileged user namespaces: {stderr}");
    } else {
        assert!(out.status.success(), "{stdout}{stderr}");
        assert_eq!(stdout, "0000:0000:0000:0000:0000:ffff:7f00:0001\nran\n", "{stderr}");
    }
}

fn nix_is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n")
}

/// Skips (prints why) or, under CI, fails.
fn unavailable(why: &str) {
    assert!(std::env::var_os("CI").is_none(), "{why} (CI must provide it: see .ci/run)");
    eprintln!("skipped: {why}");
}

/// rnic's libibverbs.so.1 and librdmacm.so.1, built as `scripts/build-ibverbs.sh --debug`
/// builds them, once per test binary (tests run in parallel).
fn real_lib() -> Option<PathBuf> {
    static BUILT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        if Command::new("cc").arg("--version").output().is_err() {
            return None;
        }
        let out =
            Command::new(root.join("scripts/build-ibverbs.sh")).arg("--debug").current_dir(root).output().unwrap();
        assert!(out.status.success(), "build-ibverbs.sh: {}", String::from_utf8_lossy(&out.stderr));
        Some(root.join("target/rnic-ibverbs-debug"))
    });
    if built.is_none() {
        unavailable("no C compiler (cc) to link libibverbs.so.1");
    }
    built.clone()
}

/// A UCX program under `rnic exec` with rnic's libraries in `lib`, the devices of
/// `devices`, the transports of `tls`, quiet progress threads, its output piped.
fn ucx_exec(lib: &Path, devices: &str, tls: &str, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rnic"));
    c.arg("exec")
        .arg("--lib")
        .arg(lib)
        .arg("--")
        .args(args)
        .env("RNIC_DEVICES", devices)
        .env("RNIC_SPIN_US", "0")
        .env("UCX_TLS", tls)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    c
}

/// UCX on rnic: `ucx_info -d` offers `rc_verbs` and `ud_verbs` on rnic0 and rnic1 (it
/// looks for the device files first), and `ucx_perftest` moves tagged messages between two
/// processes (rnic0 and rnic1) over UD alone and over RC with UD for its wire-up. UCX's UD
/// transport drops a datagram whose GRH destination is not one of its GIDs, reading the
/// header type where mlx5 reports it (the completion's `sl`): without it every datagram is
/// dropped and UCX aborts on an endpoint timeout.
#[test]
fn ucx_finds_the_devices_and_moves_data() {
    for p in ["ucx_info", "ucx_perftest"] {
        if !Path::new("/usr/bin").join(p).is_file() {
            return unavailable(&format!("/usr/bin/{p} is not installed (apt-get install ucx-utils)"));
        }
    }
    let Some(lib) = real_lib() else { return };
    let run = |devices: &str, args: &[&str], tls: &str| ucx_exec(&lib, devices, tls, args);
    let out = run("rnic0=127.0.0.1,rnic1=127.0.0.2", &["ucx_info", "-d"], "all").output().unwrap();
    let (info, stderr) = text(&out);
    if stderr.contains("running without /sys/class/infiniband") {
        return unavailable(&format!("no mount namespace for the device files: {stderr}"));
    }
    for dev in ["rnic0", "rnic1"] {
        let md = info.split("# Memory domain: ").find(|s| s.starts_with(dev)).unwrap_or_else(|| {
            panic!("ucx_info -d lists no memory domain {dev}:\n{info}\n{stderr}");
        });
        for tl in ["rc_verbs", "ud_verbs"] {
            assert!(md.contains(&format!("Transport: {tl}")), "{dev} has no {tl}:\n{md}");
        }
    }
    for (i, tls) in ["ud_verbs,self", "rc_verbs,ud_verbs,self"].into_iter().enumerate() {
        let port = (13370 + i).to_string();
        let mut server = run("rnic0=127.0.0.1", &["ucx_perftest", "-p", &port], tls)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // The client retries while the server is not listening yet (the refusal is all
        // it says then).
        let mut client = None;
        for _ in 0..30 {
            std::thread::sleep(std::time::Duration::from_millis(500));
            let out = run(
                "rnic1=127.0.0.2",
                &[
                    "timeout",
                    "60",
                    "ucx_perftest",
                    "127.0.0.1",
                    "-p",
                    &port,
                    "-t",
                    "tag_bw",
                    "-n",
                    "200",
                    "-s",
                    "65536",
                ],
                tls,
            )
            .output()
            .unwrap();
            let refused = text(&out).1.contains("Connection refused");
            client = Some(out);
            if !refused {
                break;
            }
        }
        let client = client.unwrap();
        let _ = Command::new("kill").arg(server.id().to_string()).status();
        let _ = server.wait();
        let (stdout, stderr) = text(&client);
        assert!(
            client.status.success() && stdout.contains("Final:"),
            "ucx_perftest over {tls} failed:\n{stdout}\n{stderr}"
        );
        eprintln!("{tls}: {}", stdout.lines().find(|l| l.starts_with("Final:")).unwrap_or(""));
    }
}

/// rdma-core's own test suite (the installed python3-pyverbs suite, `run_tests.py`) under
/// `rnic exec`: no failure and no error, at least 141 tests passing, among them the
/// rdma_cm tests (`test_rdmacm.py`, on rnic's librdmacm.so.1: synchronous and asynchronous
/// connections, READ and WRITE traffic, a rejection with its private data, an external QP
/// through `rdma_init_qp_attr`/`rdma_establish`, UD through SIDR, the 3 multicast ones:
/// `rdma_join_multicast`, `_ex`, and a leave after which nothing arrives) and the shared PD (`test_shared_pd.py`: `ibv_import_device` of a
/// dup of `cmd_fd`, PD and MR imported by handle) and the MR re-registrations
/// (`test_mr_rereg_*`: access rights, PD, translation, with receives posted before them
/// failing as the suite expects) and the extended CQ (`test_cqex`: RC and UD traffic
/// polled through `ibv_start_poll`/`ibv_next_poll`) and memory windows (`MWTest`: type 1
/// and 2, bound, used, invalidated locally, remotely and by deallocation) and parent
/// domains (`test_parent_domain`: RC and UD traffic with and without custom allocators,
/// an SRQ and an extended CQ of the domain) and on-demand paging (`test_odp`: explicit
/// on-demand regions for SEND, RECV, WRITE, READ, atomics, SRQ and UD, with
/// `ibv_advise_mr` prefetches) and device memory (`DMTest`, `SharedDMTest`,
/// `DeviceMemoryAPITest`, `DeviceMemoryTest`: allocation, copies and their bad flows,
/// zero-based MRs over it with local and remote traffic, an import by handle). What rnic
/// does not have skips, as on a
/// device without it. The rdma_cm tests fork their passive and active sides, which start
/// the shared device at the same moment.
///
/// The suite runs twice: with the default shards (one on a 2-CPU machine) and with every
/// device on three shards (`RNIC_SHARDS=3`), so that QPs the suite connects to each other
/// live on different engines and threads, and the CM's shard is not theirs.
#[test]
fn rdma_cores_test_suite_passes() {
    let suite = Path::new("/usr/share/doc/rdma-core/tests");
    if !suite.join("run_tests.py").is_file() || !Path::new("/usr/bin/python3").is_file() {
        return unavailable("rdma-core's test suite is not installed (apt-get install python3-pyverbs)");
    }
    let Some(lib) = real_lib() else { return };
    // The suite ships some files gzipped (Debian): a copy with them unpacked.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rdma-core-tests");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(suite).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let bytes = std::fs::read(e.path()).unwrap();
        if let Some(plain) = name.strip_suffix(".gz") {
            let out = Command::new("gzip").arg("-dc").arg(e.path()).output().unwrap();
            assert!(out.status.success(), "gunzip {name}");
            std::fs::write(dir.join(plain), out.stdout).unwrap();
        } else {
            std::fs::write(dir.join(&name), bytes).unwrap();
        }
    }
    for shards in [None, Some("3")] {
        if !suite_passes(&lib, &dir, shards) {
            return;
        }
    }
}

/// One run of rdma-core's suite in `dir` (see above); `false` when it cannot run here.
fn suite_passes(lib: &Path, dir: &Path, shards: Option<&str>) -> bool {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rnic"));
    cmd.arg("exec")
        .arg("--lib")
        .arg(lib)
        .args(["--", "timeout", "300", "/usr/bin/python3", "run_tests.py", "--dev", "rnic0", "-v"])
        .current_dir(dir)
        .env("RNIC_DEVICES", "rnic0=127.0.0.1,rnic1=127.0.0.2")
        .env_remove("RNIC_SHARDS");
    if let Some(n) = shards {
        cmd.env("RNIC_SHARDS", n);
    }
    let out = cmd.output().unwrap();
    let shards = shards.unwrap_or("default");
    let (stdout, stderr) = text(&out);
    let all = format!("{stdout}{stderr}");
    if all.contains("running without /sys/class/infiniband") {
        unavailable(&format!("no mount namespace for the device files: {stderr}"));
        return false;
    }
    let passed = |module: &str| {
        all.lines().filter(|l| l.contains(&format!("(tests.{module}")) && l.trim_end().ends_with("... ok")).count()
    };
    // unittest's summary: "Ran N tests" and "OK (skipped=K)" (a test that prints lets its
    // "ok" fall on a later line, so the summary counts, not the lines).
    let num = |after: &str, end: char| -> Option<usize> {
        let i = all.find(after)? + after.len();
        all[i..].split(end).next()?.trim().parse().ok()
    };
    let ok = num("Ran ", ' ').unwrap_or(0).saturating_sub(num("skipped=", ')').unwrap_or(0));
    let (cm, shared_pd, cqex) = (passed("test_rdmacm."), passed("test_shared_pd."), passed("test_cqex."));
    let mw = passed("test_mr.MWTest.");
    let parent = passed("test_parent_domain.");
    let odp = passed("test_odp.");
    let dm = passed("test_mr.DeviceMemory");
    // XRC: the initiator/target traffic tests of test_atomic, test_cqex, test_qpex,
    // test_relaxed_ordering and test_odp.
    let xrc = all.lines().filter(|l| l.contains("_xrc_") && l.trim_end().ends_with("... ok")).count();
    let mcast = all.lines().filter(|l| l.contains("multicast_traffic") && l.trim_end().ends_with("... ok")).count();
    // The one-line ones (a test with a docstring prints its "ok" on the docstring's line).
    let rereg = all.lines().filter(|l| l.contains("test_mr_rereg") && l.trim_end().ends_with("... ok")).count();
    // The whole suite: no failure and no error (unittest's "OK"), and at least what it
    // passed when this test was written (141 of 273, 2026-11-27; Linux rxe 6.1: 86).
    assert!(
        out.status.success()
            && all.contains("\nOK")
            && ok >= 141
            && cm >= 10
            && mcast >= 3
            && shared_pd >= 1
            && rereg >= 2
            && cqex >= 2
            && mw >= 6
            && parent >= 5
            && odp >= 15
            && dm >= 3
            && xrc >= 6,
        "shards {shards}: {ok} of rdma-core's tests passed (141 expected), {cm} rdma_cm (10), {mcast} multicast (3), \
         {shared_pd} shared PD (1), \
         {rereg} MR re-registrations (2: access, translation), {cqex} extended CQ (2), {mw} memory windows (6), \
         {parent} parent domain (5), {odp} on-demand paging (15), \
         {dm} device memory MRs (3 with one-line names), {xrc} XRC (6):\n{all}"
    );
    eprintln!("shards {shards}: {ok} of rdma-core's tests pass on rnic ({cm} of them rdma_cm's)");
    true
}

/// One source of a device's limits and attributes (rnic-core's `DeviceCaps`): the stock
/// `ibv_devinfo -v` on rnic's libibverbs.so.1 and `rnic devinfo -v` (rnic-verbs) print the
/// same value for every attribute both show (they had drifted: vendor_id, fw_ver, max_mr).
#[test]
fn devinfo_and_stock_ibv_devinfo_agree() {
    if !Path::new("/usr/bin/ibv_devinfo").is_file() {
        return unavailable("/usr/bin/ibv_devinfo is not installed (apt-get install ibverbs-utils)");
    }
    let Some(lib) = real_lib() else { return };
    let devices = "rnic0=127.0.63.1";
    let stock = Command::new("ibv_devinfo")
        .args(["-v", "-d", "rnic0"])
        .env("LD_LIBRARY_PATH", &lib)
        .env("RNIC_DEVICES", devices)
        .output()
        .unwrap();
    let ours = Command::new(env!("CARGO_BIN_EXE_rnic"))
        .args(["devinfo", "-v", "-d", "rnic0"])
        .env("RNIC_DEVICES", devices)
        .output()
        .unwrap();
    let fields = |o: &Output| -> std::collections::BTreeMap<String, String> {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.trim().split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.split_whitespace().collect::<Vec<_>>().join(" ")))
            .collect()
    };
    let (a, b) = (fields(&stock), fields(&ours));
    let want = [
        "fw_ver",
        "vendor_id",
        "vendor_part_id",
        "max_qp",
        "max_qp_wr",
        "max_sge",
        "max_cq",
        "max_cqe",
        "max_mr",
        "max_pd",
        "max_qp_rd_atom",
        "max_qp_init_rd_atom",
        "phys_port_cnt",
    ];
    for k in want {
        assert!(a.contains_key(k) && b.contains_key(k), "{k} missing:\n{a:?}\n{b:?}");
    }
    // The device's attributes (the port's counters are another matter: the library's
    // port reports 0, rnic devinfo the device's counters).
    let device_attr = |k: &str| {
        k.starts_with("max_")
            || ["fw_ver", "vendor_id", "vendor_part_id", "hw_ver", "page_size_cap", "node_guid", "sys_image_guid"]
                .contains(&k)
            || ["phys_port_cnt", "local_ca_ack_delay"].contains(&k)
    };
    let differ: Vec<_> = a
        .iter()
        .filter(|(k, _)| device_attr(k))
        .filter(|(k, v)| b.get(*k).is_some_and(|w| w != *v))
        .map(|(k, v)| format!("{k}: ibv_devinfo {v}, rnic devinfo {}", b[k]))
        .collect();
    assert!(differ.is_empty(), "the front ends disagree:\n{}", differ.join("\n"));
}

/// UCX's connection manager over rnic's librdmacm: UCX 1.13's `io_demo` (a ucp listener,
/// which `ucx_info -d` offers "Connection manager: rdmacm" for under `rnic exec`) runs
/// server and client on rnic0, the client's endpoint made and connected on the rdmacm CM
/// (UCX's debug log says so; with RC alone its address fits the REQ's private data, with
/// RC and UD UCX falls back to its TCP CM), and completes 100 writes.
#[test]
fn ucx_connects_through_rdma_cm() {
    if !Path::new("/usr/bin/io_demo").is_file() {
        return unavailable("/usr/bin/io_demo is not installed (apt-get install ucx-utils)");
    }
    let Some(lib) = real_lib() else { return };
    let run = |args: &[&str]| ucx_exec(&lib, "rnic0=127.0.0.1", "rc_verbs,self", args);
    let probe = run(&["ucx_info", "-d"]).output().unwrap();
    let (info, stderr) = text(&probe);
    if stderr.contains("running without /sys/class/infiniband") {
        return unavailable(&format!("no mount namespace for the device files: {stderr}"));
    }
    assert!(info.contains("Connection manager: rdmacm"), "ucx_info -d offers no rdmacm CM:\n{info}");
    let mut server = run(&["timeout", "60", "io_demo", "-p", "13510", "-d", "1024:4096"]).spawn().unwrap();
    // The client retries until the server listens (-c).
    let out =
        run(&["timeout", "50", "io_demo", "-p", "13510", "-d", "1024:4096", "-i", "100", "-c", "20", "127.0.0.1"])
            .env("UCX_LOG_LEVEL", "debug")
            .output()
            .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success() && stdout.contains("Client exit with status 'OK'"),
        "io_demo client:\n{stdout}\n{stderr}"
    );
    let log = format!("{stdout}{stderr}");
    assert!(
        log.contains("on cm rdmacm") && log.contains("client connected status Success"),
        "the client did not connect on UCX's rdmacm CM:\n{}",
        log.lines().filter(|l| l.contains(" cm")).take(40).collect::<Vec<_>>().join("\n")
    );
}
