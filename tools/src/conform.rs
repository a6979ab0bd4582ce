//! `rnic conform`: runs rnic-conform's scenarios against a peer's responder program
//! (`tools/conform/responder.c`, on rxe, on rnic or on anything with librdmacm) and
//! prints the report; each scenario that does not pass leaves a capture of its exchange
//! (`<dir>/<scenario>.pcap`, for `rnic ladder` and `rnic decode`).

use clap::Parser;
use rnic_conform::cm_scenario;
use rnic_conform::fuzz::{self, FuzzOptions, Service};
use rnic_conform::fuzz_ucud;
use rnic_conform::link::{pcap, Link};
use rnic_conform::scenario::{self, Options, Verdict};
use rnic_conform::{uc, ud, wrap};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `rnic conform`.
#[derive(Debug, Parser)]
pub struct Args {
    /// The peer's address (its RoCE device's IP).
    pub peer: IpAddr,
    /// The tester's own address: UDP 4791 is bound there, so no RoCE device may own it.
    #[arg(long)]
    pub local: IpAddr,
    /// The rdma_cm port the responder listens on.
    #[arg(long, default_value_t = 7471)]
    pub port: u16,
    /// Only the scenarios whose name contains this.
    #[arg(long)]
    pub only: Option<String>,
    /// Path MTU code to ask for (1 = 256 ... 5 = 4096).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=5))]
    pub mtu: u8,
    /// Where the captures of divergences go.
    #[arg(long, default_value = "conform-captures")]
    pub captures: PathBuf,
    /// How long (ms) the peer may stay quiet before an exchange counts as over.
    #[arg(long, default_value_t = 300)]
    pub quiet_ms: u64,
    /// List the scenarios and their rules, and stop.
    #[arg(long)]
    pub list: bool,
    /// Mutation fuzzing instead of the scenarios: this many mutants of valid requests on a
    /// live connection, each judged by the model (rnic-conform's fuzz.rs).
    #[arg(long, value_name = "N")]
    pub fuzz: Option<u32>,
    /// The fuzzer's seed (decimal or 0x hex): mutant i of seed s is always the same.
    #[arg(long, default_value = "0x5eed", value_parser = parse_seed)]
    pub seed: u64,
    /// Only these mutants (comma-separated indices), each on a fresh connection: how a
    /// divergence is made again.
    #[arg(long, value_delimiter = ',', value_name = "I,J,...")]
    pub fuzz_only: Option<Vec<u32>>,
    /// After the answer the model expects last, how long (ms) to wait for more.
    #[arg(long, default_value_t = 30)]
    pub grace_ms: u64,
    /// Send each mutant, its retransmission and the probe in one burst instead of waiting
    /// for the answers in between.
    #[arg(long)]
    pub fuzz_eager: bool,
    /// Which transports' connections the fuzzer mutates, in turn (comma-separated): rc
    /// (through the CM), uc or ud (on a session with the responder), or all three; each
    /// with the seed, the count and any --fuzz-only.
    #[arg(long, default_value = "rc", value_delimiter = ',', value_parser = ["rc", "uc", "ud", "all"])]
    pub fuzz_transport: Vec<String>,
}

fn parse_seed(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s}: {e}"))
}

/// Writes each capture of `list` (name, records) to the captures folder.
fn write_captures<'a>(dir: &std::path::Path, list: impl Iterator<Item = (String, &'a [rnic_conform::link::Record])>) {
    for (name, recs) in list {
        if recs.is_empty() {
            continue;
        }
        let path = dir.join(format!("{name}.pcap"));
        let written = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, pcap(recs)));
        match written {
            Ok(()) => println!("{name}: capture in {0} (rnic ladder {0})", path.display()),
            Err(e) => eprintln!("rnic conform: writing {}: {e}", path.display()),
        }
    }
}

/// Runs the scenarios; 0 when every one passes, 1 when one does not, 2 on a setup error.
pub fn run(a: &Args) -> ExitCode {
    let all = scenario::all();
    if a.list {
        for s in &all {
            println!("{:<24} {}", s.name, s.rule);
        }
        for s in cm_scenario::all() {
            println!("{:<24} {}", s.name, s.rule);
        }
        for s in uc::all() {
            println!("{:<24} {}", s.name, s.rule);
        }
        for s in ud::all() {
            println!("{:<24} {}", s.name, s.rule);
        }
        for s in wrap::all() {
            println!("{:<24} {}", s.name, s.rule);
        }
        return ExitCode::SUCCESS;
    }
    let mut link = match Link::open(a.local, a.peer) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("rnic conform: {e}");
            return ExitCode::from(2);
        }
    };
    let o = Options { port: a.port, mtu_code: a.mtu, quiet: Duration::from_millis(a.quiet_ms), ..Options::default() };
    if a.fuzz.is_some() || a.fuzz_only.is_some() {
        let f = FuzzOptions {
            seed: a.seed,
            count: a.fuzz.unwrap_or(0),
            only: a.fuzz_only.clone(),
            grace: Duration::from_millis(a.grace_ms),
            eager: a.fuzz_eager,
            plant: false,
        };
        let mut services = Vec::new();
        for t in &a.fuzz_transport {
            let these: &[Service] = match t.as_str() {
                "uc" => &[Service::Uc],
                "ud" => &[Service::Ud],
                "all" => &[Service::Rc, Service::Uc, Service::Ud],
                _ => &[Service::Rc],
            };
            for s in these {
                if !services.contains(s) {
                    services.push(*s);
                }
            }
        }
        let mut ok = true;
        for service in services {
            let r = match service {
                Service::Rc => fuzz::run(&mut link, &o, &f),
                s => fuzz_ucud::run(&mut link, &o, &f, s),
            };
            print!("{}", fuzz::report(&r));
            // RC's captures keep their names; UC's and UD's name their transport.
            let prefix = match service {
                Service::Rc => "fuzz".to_string(),
                s => format!("fuzz-{}", s.name().to_lowercase()),
            };
            let caps = r.failures.iter().map(|m| (format!("{prefix}-{:x}-{}", r.seed, m.index), &m.capture[..]));
            write_captures(&a.captures, caps);
            ok &= r.failures.is_empty() && r.stopped.is_none();
        }
        if link.malformed > 0 {
            println!("{} packets from the peer failed the ICRC or structure checks and were dropped", link.malformed);
        }
        return if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    }
    let mut outcomes = Vec::new();
    for (n, s) in all.iter().enumerate() {
        if a.only.as_deref().is_some_and(|f| !s.name.contains(f)) {
            continue;
        }
        outcomes.push(scenario::run(&mut link, s, u32::try_from(n).unwrap_or(0), &o));
    }
    for s in &cm_scenario::all() {
        if a.only.as_deref().is_some_and(|f| !s.name.contains(f)) {
            continue;
        }
        outcomes.push(cm_scenario::run(&mut link, s, &o));
    }
    for s in &uc::all() {
        if a.only.as_deref().is_some_and(|f| !s.name.contains(f)) {
            continue;
        }
        outcomes.push(uc::run(&mut link, s, &o));
    }
    for s in &ud::all() {
        if a.only.as_deref().is_some_and(|f| !s.name.contains(f)) {
            continue;
        }
        outcomes.push(ud::run(&mut link, s, &o));
    }
    for s in &wrap::all() {
        if a.only.as_deref().is_some_and(|f| !s.name.contains(f)) {
            continue;
        }
        outcomes.push(wrap::run(&mut link, s, &o));
    }
    print!("{}", scenario::report(&outcomes));
    if link.malformed > 0 {
        println!("{} packets from the peer failed the ICRC or structure checks and were dropped", link.malformed);
    }
    let failed = outcomes.iter().any(|o| !matches!(o.verdict, Verdict::Pass));
    let caps =
        outcomes.iter().filter(|o| !matches!(o.verdict, Verdict::Pass)).map(|o| (o.name.to_string(), &o.capture[..]));
    write_captures(&a.captures, caps);
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
