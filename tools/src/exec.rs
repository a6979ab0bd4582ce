//! `rnic exec -- PROGRAM ARGS...`: runs an unmodified libibverbs program on rnic's emulated
//! devices, by putting rnic's `libibverbs.so.1` (built by `scripts/build-ibverbs.sh` into
//! `target/rnic-ibverbs/`) first on `LD_LIBRARY_PATH`. The program's `ibv_get_device_list`
//! then returns the devices of `RNIC_DEVICES` (default `rnic0` on 127.0.0.1, `rnic1` on
//! 127.0.0.2): two processes on one host use `-d rnic0` and `-d rnic1`, with GID index 1
//! (`-g 1`, perftest's `-x 1`), as with Linux rxe.

use clap::Parser;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Arguments of `rnic exec`.
#[derive(Debug, Parser)]
#[command(trailing_var_arg = true)]
pub struct Args {
    /// The folder holding rnic's libibverbs.so.1 (default: $RNIC_IBVERBS_DIR, else
    /// target/rnic-ibverbs beside this binary's target folder).
    #[arg(long, value_name = "DIR")]
    lib: Option<PathBuf>,
    /// The program and its arguments (after `--`).
    #[arg(required = true, num_args = 1.., allow_hyphen_values = true, value_name = "PROGRAM")]
    program: Vec<OsString>,
}

/// Where to look for the library, most specific first.
fn candidates(a: &Args) -> Vec<PathBuf> {
    if let Some(d) = &a.lib {
        return vec![d.clone()];
    }
    if let Some(d) = std::env::var_os("RNIC_IBVERBS_DIR") {
        return vec![PathBuf::from(d)];
    }
    let mut v = Vec::new();
    if let Some(target) = std::env::current_exe().ok().and_then(|e| e.parent()?.parent().map(Path::to_path_buf)) {
        v.push(target.join("rnic-ibverbs"));
        v.push(target.join("rnic-ibverbs-debug"));
    }
    v.push(PathBuf::from("target/rnic-ibverbs"));
    v
}

/// Runs `rnic exec`.
pub fn run(a: &Args) -> ExitCode {
    let tried = candidates(a);
    let Some(dir) = tried.iter().find(|d| d.join("libibverbs.so.1").is_file()) else {
        eprintln!(
            "rnic exec: rnic's libibverbs.so.1 is not built (looked in {}); build it with: scripts/build-ibverbs.sh",
            tried.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
        );
        return ExitCode::from(2);
    };
    // A bad RNIC_DEVICES would only show inside the program as "no devices": say it here.
    if let Err(e) = rnic_verbs::emulated_devices() {
        eprintln!("rnic exec: {e}");
        return ExitCode::from(2);
    }
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.clone());
    let mut path = dir.into_os_string();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let (prog, rest) = a.program.split_first().expect("clap requires a program");
    let err = Command::new(prog).args(rest).env("LD_LIBRARY_PATH", path).exec();
    eprintln!("rnic exec: cannot run {}: {err}", prog.to_string_lossy());
    ExitCode::from(127)
}
