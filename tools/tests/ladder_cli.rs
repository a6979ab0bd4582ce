//! `rnic ladder` told as stories: captures made on the deterministic virtual-time fabric
//! (so times and fates replay exactly) are drawn and compared with golden drawings; every
//! capture in ../shared/vectors and two real Linux rxe captures draw without error; the
//! HTML page opens in headless Chromium with one arrow per packet.
//!
//! The fabric's captures are committed beside the drawings, tools/tests/golden/NAME.pcap;
//! rnic-core's test `ladder_captures` makes them and proves the fabric still produces exactly
//! these bytes (`UPDATE_GOLDEN=1 cargo test -p rnic-core --test ladder_captures` rewrites
//! them). The drawings are tools/tests/golden/NAME.txt; `UPDATE_GOLDEN=1 cargo test -p
//! rnic-tools --test ladder_cli` rewrites them (read the diff before committing it).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The responder's QPN in the fabric's captures (rnic-core's tests/ladder_captures.rs
/// checks it).
const RESPONDER_QPN: u32 = 0x11;

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

fn golden_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden"))
}

fn ladder(pcap: &Path, extra: &[&str]) -> String {
    let out = rnic().arg("ladder").arg(pcap).args(["--width", "100", "--color", "never"]).args(extra).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Draws the fabric's capture tools/tests/golden/NAME.pcap and compares the drawing with
/// tools/tests/golden/NAME.txt (or writes it with UPDATE_GOLDEN=1), and checks the capture
/// with Wireshark's dissector when tshark is there.
fn golden(name: &str) -> PathBuf {
    let pcap = golden_dir().join(format!("{name}.pcap"));
    assert!(pcap.exists(), "{} missing: rnic-core's ladder_captures test makes it", pcap.display());
    let got = ladder(&pcap, &[]);
    let path = golden_dir().join(format!("{name}.txt"));
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

/// A three-packet SEND and its ACK.
#[test]
fn a_send_of_three_packets_and_its_ack() {
    golden("send");
}

/// The second packet of a five-packet WRITE is lost: the responder NAKs the gap once, the
/// requester goes back to the lost PSN.
#[test]
fn a_lossy_write_draws_the_sequence_nak_and_go_back_n() {
    let pcap = golden("lossy_write");
    let text = ladder(&pcap, &[]);
    assert!(text.contains("NAK seq") && text.contains("[RETRANSMIT]"), "{text}");
}

/// A 2500-byte READ and its responses.
#[test]
fn a_read_and_its_responses() {
    golden("read");
}

/// One UD SEND each way.
#[test]
fn a_ud_exchange() {
    golden("ud");
}

/// The SEND's capture cut by --max, --from and --qp, and coloured only when asked.
#[test]
fn filters_cut_the_ladder() {
    let pcap = golden_dir().join("send.pcap");
    let all = ladder(&pcap, &[]);
    assert!(all.starts_with(' ') && all.contains("SEND_FIRST"), "{all}");
    let two = ladder(&pcap, &["--max", "2"]);
    assert!(two.contains("2 packets between"), "{two}");
    let late = ladder(&pcap, &["--from", "3"]);
    assert!(!late.contains("SEND_FIRST") && late.contains("ACK"), "{late}");
    let none = ladder(&pcap, &["--qp", "0x999"]);
    assert!(none.contains("0 packets"), "{none}");
    let mine = ladder(&pcap, &["--qp", &RESPONDER_QPN.to_string()]);
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
