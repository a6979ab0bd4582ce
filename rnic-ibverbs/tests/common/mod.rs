//! What the tests of rnic's C libraries share: the library built once per test binary,
//! the programs it is tried with, their symbols, and running them to a deadline.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

/// The tests that run programs take turns: two processes per run already fill a 2-CPU
/// machine, and the latency checks mean something only without a neighbour.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Skips (prints why) or, under CI, fails.
pub fn unavailable(why: &str) -> bool {
    if std::env::var_os("CI").is_some() {
        panic!("{why} (CI must provide it: see .ci/run)");
    }
    eprintln!("skipped: {why}");
    true
}

/// Builds the library once per test binary (debug profile); its folder.
pub fn lib_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        if Command::new("cc").arg("--version").output().is_err() {
            return None;
        }
        let out = Command::new(root().join("scripts/build-ibverbs.sh"))
            .arg("--debug")
            .current_dir(root())
            .output()
            .expect("run scripts/build-ibverbs.sh");
        assert!(
            out.status.success(),
            "scripts/build-ibverbs.sh --debug failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Some(root().join("target/rnic-ibverbs-debug"))
    })
    .as_deref()
}

pub fn have(program: &str) -> bool {
    Path::new("/usr/bin").join(program).is_file()
}

/// `(version, name)` of the dynamic symbols of `file`: imported (`undefined`) or exported.
pub fn dyn_syms(file: &Path, undefined: bool) -> BTreeSet<(String, String)> {
    let out = Command::new("objdump").arg("-T").arg(file).output().expect("objdump (binutils)");
    assert!(out.status.success(), "objdump -T {}", file.display());
    let mut set = BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 || !line.contains(" DF ") && !line.contains(" DO ") && !line.contains("*UND*") {
            continue;
        }
        if line.contains("*UND*") != undefined {
            continue;
        }
        let (ver, name) = (f[f.len() - 2], f[f.len() - 1]);
        // Hidden compat versions print in parentheses when defined: not a default.
        if !undefined && ver.starts_with('(') {
            continue;
        }
        let ver = ver.trim_matches(|c| c == '(' || c == ')');
        set.insert((ver.to_string(), name.to_string()));
    }
    set
}

pub fn finish(mut child: Child, what: &str, deadline: Instant) -> Output {
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut stdout = Vec::new();
            let mut stderr = Vec::new();
            child.stdout.take().map(|mut s| s.read_to_end(&mut stdout));
            child.stderr.take().map(|mut s| s.read_to_end(&mut stderr));
            return Output { status, stdout, stderr };
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!(
                "{what} did not finish in time\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `tests/c/NAME.c` compiled against rdma-core's headers and linked with `libs` (`-libverbs`,
/// `-lrdmacm`), which resolve to rnic's libraries at run time: the library folder and the
/// program, or None (skipped, or under CI failed: `header` from Debian's `package` is
/// missing, or no C compiler).
pub fn compile_c(name: &str, header: &str, package: &str, libs: &[&str]) -> Option<(&'static Path, PathBuf)> {
    if !Path::new(header).is_file() {
        unavailable(&format!("{header} is missing (apt-get install {package})"));
        return None;
    }
    let Some(dir) = lib_dir() else {
        unavailable("no C compiler (cc) to link the libraries");
        return None;
    };
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("rnic-ibverbs-{name}"));
    let out = Command::new("cc")
        .args(["-Wall", "-Werror", "-pthread", "-o"])
        .arg(&exe)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c")))
        .arg(format!("-L{}", dir.display()))
        .args(libs)
        .output()
        .expect("cc");
    assert!(out.status.success(), "compiling {name}.c:\n{}", String::from_utf8_lossy(&out.stderr));
    Some((dir, exe))
}
