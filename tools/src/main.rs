//! `rnic`: the command-line tool of the rnic software RoCEv2 NIC.
//!
//! Each subcommand lives in its own module with an `Args` struct (clap derive) and a
//! `run(&Args) -> ExitCode`; `main` only parses and dispatches.
//!
//! No `unsafe` but one call: `rnic perf reg` registers the application's own buffer
//! (`ProtectionDomain::register_mr`, unsafe by its contract), which is what it measures.
#![deny(unsafe_code)]

mod capture;
mod conform;
mod decode;
mod demo;
mod devinfo;
mod exec;
mod ladder;
mod perf;
mod pingpong;
mod rping;
mod udaddy;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// rnic: a pure-userspace RoCEv2 software RNIC.
#[derive(Debug, Parser)]
#[command(name = "rnic", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run two emulated devices in this process and move data with SEND, RDMA WRITE and READ.
    Demo(demo::Args),
    /// Decode the RoCEv2 packets in a pcap or pcapng capture and check their ICRC.
    Decode(decode::Args),
    /// Draw the RoCEv2 packets of a capture as a ladder diagram (terminal or --html).
    Ladder(ladder::Args),
    /// Ping-pong SENDs over an RC QP, speaking ibv_rc_pingpong's out-of-band protocol.
    Pingpong(pingpong::Args),
    /// rdma_cm's rping: connect through the CM and ping with RDMA READ and WRITE.
    Rping(rping::Args),
    /// rdma_cm's udaddy: resolve a UD QP through the CM (SIDR) and exchange datagrams.
    Udaddy(udaddy::Args),
    /// perftest-style benchmarks (write_bw, send_lat, ...) with a same-run UDP baseline.
    Perf(perf::Args),
    /// Show the emulated devices as ibv_devinfo does: attributes, port, GIDs, limits, counters.
    Devinfo(devinfo::Args),
    /// Run an unmodified libibverbs program (ibv_rc_pingpong, perftest, ...) on rnic's devices.
    Exec(exec::Args),
    /// Test another RoCE implementation: connect to its responder program and judge its
    /// answers to scenarios, one IBA rule each.
    Conform(conform::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match &cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Decode(args) => decode::run(args),
        Command::Ladder(args) => ladder::run(args),
        Command::Pingpong(args) => pingpong::run(args),
        Command::Rping(args) => rping::run(args),
        Command::Udaddy(args) => udaddy::run(args),
        Command::Perf(args) => perf::run(args),
        Command::Devinfo(args) => devinfo::run(args),
        Command::Exec(args) => exec::run(args),
        Command::Conform(args) => conform::run(args),
    }
}
