//! The tester against rnic itself: the lab responder (`tools/conform/responder.c`, an
//! ordinary librdmacm program) on rnic's libraries in another process, every scenario
//! judged by the model. Then the same responder with a planted rule violation (its
//! device sends every packet twice, `RNIC_FAULTS=dup=1`: a second PSN sequence error NAK
//! breaks IBA 9.7.5.1.2, a READ answered twice breaks the one-response-per-PSN rule) must
//! fail exactly those scenarios: the oracle judges, it does not echo.
//!
//! The fuzzer (`fuzz.rs`) the same way: a seed's mutants all conform against rnic, and
//! the responder that answers twice is found out, a divergence made again from its seed
//! and index.
//!
//! Needs cc, the rdma-core headers and scripts/build-ibverbs.sh; without them each test
//! says why it is skipped.

use rnic_conform::cm_scenario;
use rnic_conform::fuzz::{FuzzOptions, FuzzReport, Service};
use rnic_conform::link::Link;
use rnic_conform::scenario::{self, Options, Outcome, Verdict};
use rnic_conform::{uc, ud, wrap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// rnic's libibverbs/librdmacm and the compiled responder, or why not.
fn setup() -> Result<(PathBuf, PathBuf), String> {
    static S: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    S.get_or_init(|| {
        if Command::new("cc").arg("--version").output().is_err() {
            return Err("no C compiler (cc)".into());
        }
        if !Path::new("/usr/include/rdma/rdma_cma.h").is_file() {
            return Err("no /usr/include/rdma/rdma_cma.h (apt-get install librdmacm-dev)".into());
        }
        let out = Command::new(root().join("scripts/build-ibverbs.sh"))
            .arg("--debug")
            .current_dir(root())
            .output()
            .map_err(|e| format!("scripts/build-ibverbs.sh: {e}"))?;
        assert!(out.status.success(), "build-ibverbs.sh failed: {}", String::from_utf8_lossy(&out.stderr));
        let exe = std::env::temp_dir().join(format!("rnic-conform-responder-{}", std::process::id()));
        let cc = Command::new("cc")
            .args(["-O2", "-Wall", "-o"])
            .arg(&exe)
            .arg(root().join("tools/conform/responder.c"))
            .args(["-lrdmacm", "-libverbs"])
            .output()
            .map_err(|e| format!("cc: {e}"))?;
        assert!(cc.status.success(), "responder.c does not compile: {}", String::from_utf8_lossy(&cc.stderr));
        Ok((root().join("target/rnic-ibverbs-debug"), exe))
    })
    .clone()
}

struct Responder(Child);

impl Drop for Responder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the responder on rnic0 at `ip`, port `port`, with `faults` if any; returns once
/// it listens.
fn responder(libs: &Path, exe: &Path, ip: &str, port: u16, faults: Option<&str>) -> Responder {
    let mut c = Command::new(exe);
    c.arg(port.to_string())
        .env("LD_LIBRARY_PATH", libs)
        .env("RNIC_DEVICES", format!("rnic0={ip}"))
        .env("RNIC_SPIN_US", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(f) = faults {
        c.env("RNIC_FAULTS", f);
    }
    let mut child = c.spawn().expect("start the responder");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains("listening"), "the responder said {line:?}");
    Responder(child)
}

fn run_all(local: &str, peer: &str, port: u16) -> Vec<Outcome> {
    let mut link = Link::open(local.parse().unwrap(), peer.parse().unwrap()).unwrap();
    let o = Options { port, ..Options::default() };
    let mut out: Vec<Outcome> = scenario::all()
        .iter()
        .enumerate()
        .map(|(n, s)| scenario::run(&mut link, s, u32::try_from(n).unwrap(), &o))
        .collect();
    out.extend(cm_scenario::all().iter().map(|s| cm_scenario::run(&mut link, s, &o)));
    out.extend(uc::all().iter().map(|s| uc::run(&mut link, s, &o)));
    out.extend(ud::all().iter().map(|s| ud::run(&mut link, s, &o)));
    out.extend(wrap::all().iter().map(|s| wrap::run(&mut link, s, &o)));
    out
}

#[test]
fn rnic_passes_every_scenario() {
    let (libs, exe) = match setup() {
        Ok(x) => x,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let _r = responder(&libs, &exe, "127.0.105.2", 7471, None);
    let out = run_all("127.0.105.1", "127.0.105.2", 7471);
    let report = scenario::report(&out);
    println!("{report}");
    let total =
        scenario::all().len() + cm_scenario::all().len() + uc::all().len() + ud::all().len() + wrap::all().len();
    assert_eq!(out.len(), total);
    assert!(out.iter().all(|o| o.verdict == Verdict::Pass), "{report}");
}

#[test]
fn a_responder_that_answers_twice_fails_the_rules_it_breaks() {
    let (libs, exe) = match setup() {
        Ok(x) => x,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let _r = responder(&libs, &exe, "127.0.106.2", 7472, Some("dup=1"));
    let out = run_all("127.0.106.1", "127.0.106.2", 7472);
    let report = scenario::report(&out);
    println!("{report}");
    let verdict = |name: &str| &out.iter().find(|o| o.name == name).unwrap().verdict;
    // One sequence-error NAK is the rule; the planted fault sends two.
    match verdict("psn-ahead") {
        Verdict::Diverges(why) => assert!(why.contains("PSN_SEQUENCE_ERROR") && why.contains("observed"), "{why}"),
        v => panic!("psn-ahead: {v:?}\n{report}"),
    }
    assert!(matches!(verdict("duplicate-read"), Verdict::Diverges(_)), "{report}");
    // A fatal NAK sent twice (the second after the QP is in the Error state, IBA 9.9.3.1).
    assert!(matches!(verdict("write-bad-rkey"), Verdict::Diverges(_)), "{report}");
    // Every divergence carries its exchange.
    for o in out.iter().filter(|o| matches!(o.verdict, Verdict::Diverges(_))) {
        assert!(!o.capture.is_empty(), "{}: no capture", o.name);
    }
    // ... which Wireshark decodes with every ICRC right (when tshark is installed).
    let o = out.iter().find(|o| o.name == "psn-ahead").unwrap();
    let pcap = std::env::temp_dir().join(format!("rnic-conform-{}.pcap", std::process::id()));
    std::fs::write(&pcap, rnic_conform::link::pcap(&o.capture)).unwrap();
    if Command::new("tshark").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success()) {
        let check = root().join("../shared/vectors/check_pcap.sh");
        let r = Command::new(check).arg(&pcap).output().unwrap();
        let text = String::from_utf8_lossy(&r.stdout);
        assert!(r.status.success() && text.contains(", 0 bad"), "check_pcap.sh: {text}");
    }
    let _ = std::fs::remove_file(&pcap);
}

/// A CM that never sends a DREP (`RNIC_FAULTS=cm_drop=drep` on the responder's device:
/// every DREP its CM sends is dropped before the wire): the CM scenarios that need the
/// peer's DREP (IBA 12.6.10 / 12.9.8) fail, each saying no DREP came, and the others, which
/// only end with a DREQ, still pass: the CM scenarios judge the peer's CM, they do not
/// echo it.
#[test]
fn a_cm_that_never_sends_a_drep_fails_the_scenarios_that_need_one() {
    let (libs, exe) = match setup() {
        Ok(x) => x,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let _r = responder(&libs, &exe, "127.0.111.2", 7476, Some("cm_drop=drep"));
    let mut link = Link::open("127.0.111.1".parse().unwrap(), "127.0.111.2".parse().unwrap()).unwrap();
    let o = Options { port: 7476, answer_wait: Duration::from_secs(1), ..Options::default() };
    let out: Vec<Outcome> = cm_scenario::all().iter().map(|s| cm_scenario::run(&mut link, s, &o)).collect();
    let report = scenario::report(&out);
    println!("{report}");
    let need_drep = ["cm-dreq-unknown", "cm-dreq-before-rtu", "cm-dreq-twice", "cm-request-after-dreq"];
    for o in &out {
        if need_drep.contains(&o.name) {
            match &o.verdict {
                Verdict::NoAnswer(why) => assert!(why.contains("no DREP"), "{}: {why}\n{report}", o.name),
                v => panic!("{}: {v:?} with every DREP dropped\n{report}", o.name),
            }
        } else {
            assert_eq!(o.verdict, Verdict::Pass, "{}\n{report}", o.name);
        }
    }
}

fn fuzz(local: &str, peer: &str, port: u16, f: &FuzzOptions) -> FuzzReport {
    let mut link = Link::open(local.parse().unwrap(), peer.parse().unwrap()).unwrap();
    let o = Options { port, ..Options::default() };
    rnic_conform::fuzz::run(&mut link, &o, f)
}

/// The fuzzer against rnic: every mutant of a fixed seed is answered as the model says
/// (or is one the model does not judge), every rule among them.
#[test]
fn rnic_passes_the_fuzzer() {
    let (libs, exe) = match setup() {
        Ok(x) => x,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let _r = responder(&libs, &exe, "127.0.107.2", 7473, None);
    let f = FuzzOptions {
        seed: 0x5eed,
        count: 200,
        only: None,
        grace: Duration::from_millis(30),
        eager: false,
        plant: false,
    };
    let r = fuzz("127.0.107.1", "127.0.107.2", 7473, &f);
    let report = rnic_conform::fuzz::report(&r);
    println!("{report}");
    assert_eq!(r.played, 200, "{report}");
    assert!(r.failures.is_empty() && r.stopped.is_none(), "{report}");
    assert_eq!(r.passed + r.unjudged, 200);
    // Nearly all are judged: "not judged" is for what the IBA leaves open, not a way out.
    assert!(r.unjudged <= 10, "{report}");
    for (rule, played, passed) in &r.per_rule {
        assert!(*played > 0 && *passed > 0, "{} not exercised:\n{report}", rule.name());
    }
}

/// The same responder answering every packet twice (`RNIC_FAULTS=dup=1`): the fuzzer
/// reports divergences, each with its capture, and `--fuzz-only` makes one again.
#[test]
fn the_fuzzer_finds_a_responder_that_answers_twice() {
    let (libs, exe) = match setup() {
        Ok(x) => x,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let _r = responder(&libs, &exe, "127.0.108.2", 7474, Some("dup=1"));
    let f = FuzzOptions {
        seed: 0x5eed,
        count: 30,
        only: None,
        grace: Duration::from_millis(30),
        eager: false,
        plant: false,
    };
    let r = fuzz("127.0.108.1", "127.0.108.2", 7474, &f);
    let report = rnic_conform::fuzz::report(&r);
    println!("{report}");
    assert!(r.stopped.is_none(), "{report}");
    assert!(r.failures.len() >= 20, "{report}");
    for m in &r.failures {
        assert!(matches!(m.verdict, Verdict::Diverges(_)), "{report}");
        assert!(!m.capture.is_empty(), "mutant {}: no capture", m.index);
    }
    // Made again alone, from its seed and index, on a fresh connection.
    let first = &r.failures[0];
    let again = FuzzOptions { only: Some(vec![first.index]), ..f };
    let r2 = fuzz("127.0.108.1", "127.0.108.2", 7474, &again);
    assert_eq!(r2.played, 1);
    assert_eq!(r2.failures.len(), 1, "{}", rnic_conform::fuzz::report(&r2));
    // The same mutation (absolute PSNs and addresses are the new connection's).
    assert_eq!((r2.failures[0].rule, r2.failures[0].base), (first.rule, first.base));
    // A divergence whose packets are all well formed decodes with every ICRC right
    // (when tshark is installed): the capture is the mutant's exchange alone.
    use rnic_conform::fuzz::Rule;
    let clean = [Rule::Duplicate, Rule::Drop, Rule::Reorder, Rule::AckReq, Rule::AtomicOperands, Rule::PayloadBitFlip];
    let Some(m) = r.failures.iter().find(|m| clean.contains(&m.rule)) else { return };
    let pcap = std::env::temp_dir().join(format!("rnic-conform-fuzz-{}.pcap", std::process::id()));
    std::fs::write(&pcap, rnic_conform::link::pcap(&m.capture)).unwrap();
    if Command::new("tshark").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success()) {
        let check = root().join("../shared/vectors/check_pcap.sh");
        let out = Command::new(check).arg(&pcap).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains(", 0 bad"), "check_pcap.sh: {text}");
    }
    let _ = std::fs::remove_file(&pcap);
}

/// The peer killed in the middle of a run: the mutant then under way is "peer stopped
/// answering" (or the next connection is refused), the run ends with the reason, bounded
/// by the waits, never hung.
#[test]
fn a_peer_that_dies_ends_the_fuzzer_with_a_verdict() {
    let (libs, exe) = match setup() {
        Ok(x) => x,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let r = responder(&libs, &exe, "127.0.110.2", 7475, None);
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        drop(r);
    });
    let f = FuzzOptions {
        seed: 0x5eed,
        count: 100_000,
        only: None,
        grace: Duration::from_millis(30),
        eager: false,
        plant: false,
    };
    let o = Options {
        port: 7475,
        cm_wait: Duration::from_secs(2),
        answer_wait: Duration::from_secs(1),
        ..Options::default()
    };
    let mut link = Link::open("127.0.110.1".parse().unwrap(), "127.0.110.2".parse().unwrap()).unwrap();
    let rep = rnic_conform::fuzz::run(&mut link, &o, &f);
    killer.join().unwrap();
    let report = rnic_conform::fuzz::report(&rep);
    println!("{report}");
    assert!(rep.played > 0 && rep.played < 100_000, "{report}");
    let why = rep.stopped.as_deref().unwrap_or_default();
    assert!(why.contains("no REP"), "{report}");
    // At most the mutant under way when it died fails: answered in part (diverges) or not
    // at all (peer stopped answering), and it is the last one played.
    assert!(rep.failures.len() <= 1, "{report}");
    if let Some(m) = rep.failures.first() {
        assert!(matches!(m.verdict, Verdict::NoAnswer(_) | Verdict::Diverges(_)), "{report}");
        assert!(why.contains(&format!("after mutant {}", m.index)), "{report}");
    }
}

fn fuzz_ucud(local: &str, peer: &str, port: u16, f: &FuzzOptions, service: Service) -> FuzzReport {
    let mut link = Link::open(local.parse().unwrap(), peer.parse().unwrap()).unwrap();
    let o = Options { port, quiet: Duration::from_millis(60), ..Options::default() };
    rnic_conform::fuzz_ucud::run(&mut link, &o, f, service)
}

/// The UD and UC fuzzers against rnic: every mutant of a fixed seed is delivered, placed
/// or dropped as the models say (the completions, the bytes and, for UC, the whole region
/// read back over the session; nothing on the wire), every rule among them.
#[test]
fn rnic_passes_the_ud_and_uc_fuzzers() {
    let (libs, exe) = match setup() {
        Ok(x) => x,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let _r = responder(&libs, &exe, "127.0.112.2", 7477, None);
    for (service, count) in [(Service::Ud, 80u32), (Service::Uc, 80)] {
        let f = FuzzOptions {
            seed: 0x5eed,
            count,
            only: None,
            grace: Duration::from_millis(30),
            eager: false,
            plant: false,
        };
        let r = fuzz_ucud("127.0.112.1", "127.0.112.2", 7477, &f, service);
        let report = rnic_conform::fuzz::report(&r);
        println!("{report}");
        assert_eq!(r.played, count, "{report}");
        assert!(r.failures.is_empty() && r.stopped.is_none(), "{report}");
        assert!(r.unjudged <= 2, "{report}");
        for (rule, played, passed) in &r.per_rule {
            assert!(*played > 0 && *passed > 0, "{} {} not exercised:\n{report}", service.name(), rule.name());
        }
    }
}

/// The models told a key other than the responder's (`plant`: UD's Q_Key, UC's R_Key), as
/// a peer that takes a wrong key looks to a right model: the datagrams it delivers and the
/// WRITEs it places diverge, each with its capture, and `--fuzz-only` makes one again.
#[test]
fn the_ud_and_uc_fuzzers_find_a_peer_that_takes_a_wrong_key() {
    let (libs, exe) = match setup() {
        Ok(x) => x,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let _r = responder(&libs, &exe, "127.0.113.2", 7478, None);
    for service in [Service::Ud, Service::Uc] {
        let f = FuzzOptions {
            seed: 0x5eed,
            count: 20,
            only: None,
            grace: Duration::from_millis(30),
            eager: false,
            plant: true,
        };
        let r = fuzz_ucud("127.0.113.1", "127.0.113.2", 7478, &f, service);
        let report = rnic_conform::fuzz::report(&r);
        println!("{report}");
        assert!(r.stopped.is_none(), "{report}");
        assert!(r.failures.len() >= 10, "{report}");
        for m in &r.failures {
            assert!(matches!(m.verdict, Verdict::Diverges(_)), "{report}");
            assert!(!m.capture.is_empty(), "mutant {}: no capture", m.index);
        }
        let first = &r.failures[0];
        let again = FuzzOptions { only: Some(vec![first.index]), ..f };
        let r2 = fuzz_ucud("127.0.113.1", "127.0.113.2", 7478, &again, service);
        assert_eq!(r2.played, 1);
        assert_eq!(r2.failures.len(), 1, "{}", rnic_conform::fuzz::report(&r2));
        assert_eq!((r2.failures[0].rule, r2.failures[0].base), (first.rule, first.base));
        assert!(rnic_conform::fuzz::report(&r2).contains(&format!(
            "again: --fuzz-transport {} --fuzz-only {}",
            service.name().to_lowercase(),
            first.index
        )));
    }
}
