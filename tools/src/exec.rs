//! `rnic exec -- PROGRAM ARGS...`: runs an unmodified libibverbs or rdma_cm program on
//! rnic's emulated devices, by putting rnic's `libibverbs.so.1` and `librdmacm.so.1` (built
//! by `scripts/build-ibverbs.sh` into `target/rnic-ibverbs/`) first on `LD_LIBRARY_PATH`. The program's `ibv_get_device_list`
//! then returns the devices of `RNIC_DEVICES` (default `rnic0` on 127.0.0.1, `rnic1` on
//! 127.0.0.2): two processes on one host use `-d rnic0` and `-d rnic1`, with GID index 1
//! (`-g 1`, perftest's `-x 1`), as with Linux rxe.
//!
//! Software that looks for devices before it opens one finds them where it looks on a
//! host with rxe: `rnic exec` gives the program `/sys/class/infiniband/<dev>/` and
//! `/dev/infiniband/uverbsN` in a private mount namespace ([`devfiles`]) where the
//! process may make one (root, or an unprivileged user namespace); where it may not, it
//! says so once on stderr and runs the program anyway. `--no-device-files` leaves the
//! file system as it is.

mod devfiles;

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
    /// Do not give the program /sys/class/infiniband and /dev/infiniband (by default it
    /// gets them, in a mount namespace of its own).
    #[arg(long)]
    no_device_files: bool,
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
    if !dir.join("librdmacm.so.1").is_file() {
        eprintln!(
            "rnic exec: {} has no librdmacm.so.1 (an older build): rdma_cm programs would load the system's, \
             which needs the kernel's /dev/infiniband/rdma_cm; rebuild with scripts/build-ibverbs.sh",
            dir.display()
        );
    }
    // A bad RNIC_DEVICES would only show inside the program as "no devices": say it here.
    let devices = match rnic_verbs::emulated_devices() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("rnic exec: {e}");
            return ExitCode::from(2);
        }
    };
    if !a.no_device_files {
        if let devfiles::Outcome::Refused(why) = devfiles::provide(&devices) {
            eprintln!(
                "rnic exec: running without /sys/class/infiniband and /dev/infiniband for {}: {why}; \
                 programs that look there first (UCX, rdma-core's tests, rdma_cm) will not find the devices \
                 (run as root, or allow unprivileged user namespaces; --no-device-files silences this)",
                devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ")
            );
        }
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
