//! `rnic conform`: runs rnic-conform's scenarios against a peer's responder program
//! (`tools/conform/responder.c`, on rxe, on rnic or on anything with librdmacm) and
//! prints the report; each scenario that does not pass leaves a capture of its exchange
//! (`<dir>/<scenario>.pcap`, for `rnic ladder` and `rnic decode`).

use clap::Parser;
use rnic_conform::link::{pcap, Link};
use rnic_conform::scenario::{self, Options, Verdict};
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
}

/// Runs the scenarios; 0 when every one passes, 1 when one does not, 2 on a setup error.
pub fn run(a: &Args) -> ExitCode {
    let all = scenario::all();
    if a.list {
        for s in &all {
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
    let mut outcomes = Vec::new();
    for (n, s) in all.iter().enumerate() {
        if a.only.as_deref().is_some_and(|f| !s.name.contains(f)) {
            continue;
        }
        outcomes.push(scenario::run(&mut link, s, u32::try_from(n).unwrap_or(0), &o));
    }
    print!("{}", scenario::report(&outcomes));
    if link.malformed > 0 {
        println!("{} packets from the peer failed the ICRC or structure checks and were dropped", link.malformed);
    }
    let mut failed = false;
    for o in &outcomes {
        if matches!(o.verdict, Verdict::Pass) {
            continue;
        }
        failed = true;
        if o.capture.is_empty() {
            continue;
        }
        let path = a.captures.join(format!("{}.pcap", o.name));
        let written = std::fs::create_dir_all(&a.captures).and_then(|()| std::fs::write(&path, pcap(&o.capture)));
        match written {
            Ok(()) => println!("{}: capture in {1} (rnic ladder {1})", o.name, path.display()),
            Err(e) => eprintln!("rnic conform: writing {}: {e}", path.display()),
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
