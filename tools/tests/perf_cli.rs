//! `rnic perf` run as a user would: the JSON shape, verified data and exit codes. Never
//! speed (the numbers depend on the machine): only that the figures exist and are sane.

use std::process::{Command, Output};

fn rnic() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rnic"))
}

fn json(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "rnic perf failed ({:?}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn positive(v: &serde_json::Value, k: &str) -> f64 {
    let x = v[k].as_f64().unwrap_or_else(|| panic!("{k} missing or not a number: {v}"));
    assert!(x > 0.0 && x.is_finite(), "{k} = {x}: {v}");
    x
}

/// The loopback write_bw of the README: both sides in one process, data verified, the
/// UDP baseline measured and the ratio given.
#[test]
fn loopback_write_bw_json_is_verified_and_complete() {
    let out = rnic()
        .args(["perf", "write_bw", "-n", "50", "--json", "--ip", "127.0.32.1", "--peer-ip", "127.0.32.2"])
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!(v["test"], "write_bw");
    assert_eq!(v["bytes"], 65536);
    assert_eq!(v["iterations"], 50);
    assert_eq!(v["verified"], true);
    for k in ["bw_peak_mbps", "bw_avg_mbps", "msg_rate_mpps", "baseline", "ratio"] {
        positive(&v, k);
    }
    // Three interleaved rounds by default: the median ratio inside its spread.
    assert_eq!(v["rounds"], 3, "{v}");
    let (lo, hi) = (v["ratio_min"].as_f64().unwrap(), v["ratio_max"].as_f64().unwrap());
    let ratio = v["ratio"].as_f64().unwrap();
    assert!(lo <= ratio && ratio <= hi, "{v}");
    let (avg, base) = (v["bw_avg_mbps"].as_f64().unwrap(), v["baseline"].as_f64().unwrap());
    assert!((ratio - avg / base).abs() < 1e-9 * ratio.max(1.0));
    assert!(v["baseline_method"].as_str().unwrap().contains("send"), "{v}");
}

/// SEND latency and READ bandwidth at a small MTU, several packets per message.
#[test]
fn loopback_send_lat_and_read_bw_verify() {
    let out = rnic()
        .args(["perf", "send_lat", "-s", "3000", "-m", "1024", "-n", "20", "--json", "--rounds", "1"])
        .args(["--ip", "127.0.32.5", "--peer-ip", "127.0.32.6"])
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!((v["test"].as_str(), v["verified"].as_bool()), (Some("send_lat"), Some(true)));
    for k in ["lat_min_us", "lat_typical_us", "lat_avg_us", "lat_p99_us", "lat_p999_us", "lat_max_us", "baseline"] {
        positive(&v, k);
    }
    assert!(v["lat_min_us"].as_f64() <= v["lat_max_us"].as_f64());
    // The same SEND latency sleeping on completion events.
    let out = rnic()
        .args([
            "perf",
            "send_lat",
            "-e",
            "-s",
            "64",
            "-n",
            "20",
            "--json",
            "--rounds",
            "1",
            "--ip",
            "127.0.32.5",
            "--peer-ip",
            "127.0.32.6",
        ])
        .output()
        .unwrap();
    assert_eq!(json(&out)["verified"], true);
    let out = rnic()
        .args(["perf", "read_bw", "-s", "10000", "-m", "1024", "-n", "30", "-q", "2", "--json", "--rounds", "1"])
        .args(["--ip", "127.0.32.5", "--peer-ip", "127.0.32.6"])
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!((v["verified"].as_bool(), v["iterations"].as_u64()), (Some(true), Some(60)));
}

/// FETCH_ADD bandwidth on two QPs: the target's counter must equal the number of adds.
#[test]
fn loopback_atomic_bw_counts_every_fetch_add() {
    let out = rnic()
        .args([
            "perf",
            "atomic_bw",
            "-n",
            "100",
            "-q",
            "2",
            "--json",
            "--ip",
            "127.0.32.13",
            "--peer-ip",
            "127.0.32.14",
        ])
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!(
        (v["bytes"].as_u64(), v["iterations"].as_u64(), v["verified"].as_bool()),
        (Some(8), Some(200), Some(true))
    );
    positive(&v, "msg_rate_mpps");
}

/// Server and client as two processes, the client choosing the parameters.
#[test]
fn two_processes_send_bw() {
    let port = (20000 + std::process::id() % 1000).to_string();
    let mut server = rnic()
        .args(["perf", "send_bw", "--server", "--ip", "127.0.32.9", "-p", &port])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = rnic()
        .args(["perf", "send_bw", "127.0.32.9", "--ip", "127.0.32.10", "-p", &port])
        .args(["-s", "64", "-n", "200", "-t", "32", "-Q", "8", "--json", "--rounds", "2"])
        .output()
        .unwrap();
    let status = server.wait().unwrap();
    let v = json(&out);
    assert_eq!(
        (v["bytes"].as_u64(), v["iterations"].as_u64(), v["verified"].as_bool()),
        (Some(64), Some(200), Some(true))
    );
    assert_eq!(v["rounds"], 2, "the server followed the client's --rounds: {v}");
    positive(&v, "baseline_msg_rate_mpps");
    assert!(status.success(), "server exited {status:?}");
}

/// `--roce-shape`: the latency baseline sends rnic's shape (a GSO pair per hop) and says
/// so; the ratio is still reported and the data verified. A bandwidth baseline sends each
/// message's packets at their lengths (a 64 KiB WRITE: the first packet longer by its
/// RETH, alone in its GSO send). Raw Ethernet runs refuse it.
#[test]
fn roce_shaped_latency_baseline() {
    let out = rnic()
        .args(["perf", "write_lat", "-s", "8", "-n", "200", "--json", "--rounds", "1", "--roce-shape"])
        .args(["--ip", "127.0.32.31", "--peer-ip", "127.0.32.32"])
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!(v["verified"].as_bool(), Some(true), "{v}");
    assert!(v["baseline_method"].as_str().unwrap().contains("rnic's shape"), "{v}");
    positive(&v, "baseline");
    positive(&v, "ratio");
    let out = rnic()
        .args(["perf", "write_bw", "-s", "65536", "-m", "4096", "-n", "200", "--json", "--rounds", "1", "--roce-shape"])
        .args(["--ip", "127.0.32.33", "--peer-ip", "127.0.32.34"])
        .output()
        .unwrap();
    let v = json(&out);
    assert!(v["baseline_method"].as_str().unwrap().contains("rnic's packet shape: 4128 + 15x4112 bytes"), "{v}");
    positive(&v, "ratio");
    let out = rnic()
        .args(["perf", "write_bw", "--server", "--netdev", "lo", "--ip", "10.9.9.9", "--roce-shape"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--roce-shape: shapes the UDP baseline"));
}

/// What this build does not have is refused with a reason and exit code 2.
#[test]
fn unsupported_options_exit_2_with_the_reason() {
    for (args, says) in [
        (&["perf", "write_bw", "-c", "UD"][..], "write_bw needs RC or UC (UD carries SEND only)"),
        (&["perf", "write_lat", "-e"][..], "write_lat polls memory"),
        (&["perf", "nope_bw"][..], "unknown test"),
    ] {
        let out = rnic().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `-c UC`: SEND and WRITE over unreliable connected QPs, data verified (loopback loses
/// nothing, so every message arrives); READ is refused as perftest refuses it.
#[test]
fn uc_send_and_write_verify_and_read_is_refused() {
    for test in ["write_bw", "send_bw", "send_lat"] {
        let out = rnic()
            .args(["perf", test, "-c", "UC", "-n", "50", "-s", "3000", "-m", "1024", "--json", "--rounds", "1"])
            .args(["--ip", "127.0.32.17", "--peer-ip", "127.0.32.18"])
            .output()
            .unwrap();
        let v = json(&out);
        assert_eq!((v["test"].as_str(), v["verified"].as_bool()), (Some(test), Some(true)), "{v}");
    }
    let out = rnic().args(["perf", "read_bw", "-c", "UC"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("read_bw needs RC"));
}

/// `-c UD`: SEND over datagram QPs through address handles (Q_Key 0x11111111), the GRH
/// area in every receive buffer; a latency run loses nothing and verifies, a bandwidth run
/// reports how many datagrams the receiver had no receive posted for (`lost`) and counts
/// only delivered ones.
#[test]
fn ud_send_lat_and_send_bw_verify() {
    let out = rnic()
        .args(["perf", "send_lat", "-c", "UD", "-n", "200", "-s", "1000", "-m", "1024", "--json", "--rounds", "1"])
        .args(["--ip", "127.0.32.19", "--peer-ip", "127.0.32.20"])
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!(v["verified"].as_bool(), Some(true), "{v}");
    positive(&v, "lat_typical_us");
    let out = rnic()
        .args(["perf", "send_bw", "-c", "UD", "-n", "2000", "-s", "512", "-m", "1024", "--json", "--rounds", "1"])
        .args(["--ip", "127.0.32.19", "--peer-ip", "127.0.32.20"])
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!(v["verified"].as_bool(), Some(true), "{v}");
    let lost = v["lost"].as_u64().expect("UD reports lost");
    assert!(lost < 2000, "{v}");
    positive(&v, "msg_rate_mpps");
}

/// `--plot` draws the figure next to the same-run baseline, with the ratio, as an SVG.
#[test]
fn plot_writes_an_svg_with_both_series() {
    let svg = std::env::temp_dir().join(format!("rnic-plot-{}.svg", std::process::id()));
    let out = rnic()
        .args(["perf", "write_bw", "-s", "8192", "-n", "50", "--rounds", "2", "--plot"])
        .arg(&svg)
        .args(["--ip", "127.0.32.21", "--peer-ip", "127.0.32.22"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"), "not an SVG");
    for want in ["rnic perf write_bw", "plain UDP, same run", "message size (bytes)", "ratio (rnic / UDP"] {
        assert!(text.contains(want), "{want} missing");
    }
    assert!(text.matches("<circle").count() >= 3, "points for rnic, the baseline and the ratio");
}

/// `perf reg`: registration versus copy over sizes, with the crossover in the JSON.
#[test]
fn reg_measures_registration_against_copy() {
    let out = rnic().args(["perf", "reg", "-s", "65536", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["bytes"].as_u64().unwrap()).collect::<Vec<_>>(), [4096, 16384, 65536]);
    for r in rows {
        assert!(r["copy_us"].as_f64().unwrap() > 0.0 && r["reg_dereg_unpinned_us"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(v.get("crossover_pinned_bytes").is_some());
    let text = rnic().args(["perf", "reg", "-s", "16384"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("reuses to pay off") && text.contains("What it means"), "{text}");
}

/// `-R`: the QPs connected through the Communication Manager (perftest's rdma_cm mode),
/// one REQ per QP, then the same verified run.
#[test]
fn rdma_cm_connects_every_qp() {
    for test in ["write_bw", "read_bw", "send_lat"] {
        let out = rnic()
            .args([
                "perf",
                test,
                "-R",
                "-q",
                if test == "send_lat" { "1" } else { "3" },
                "-n",
                "50",
                "--rounds",
                "1",
                "--json",
            ])
            .args(["--ip", "127.0.32.23", "--peer-ip", "127.0.32.24", "-p", "20777"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{test}: {}", String::from_utf8_lossy(&out.stderr));
        let v = json(&out);
        assert_eq!(v["verified"], true, "{test}: {v}");
    }
    let out = rnic().args(["perf", "send_bw", "-R", "-c", "UD", "-s", "512"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("-R: UD QPs are not connected"));
}
