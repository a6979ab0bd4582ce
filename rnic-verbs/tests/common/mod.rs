//! Network namespaces and veth links for the tests that need a real link (root only, as
//! CI runs; each test skips with a printed reason otherwise): `raw_ethernet.rs` and
//! `multicast_link.rs`.
//!
//! Devices are opened on a thread that entered the namespace (`setns`): an `AF_PACKET`
//! or UDP socket belongs to the namespace it was created in, and the threads a device
//! starts there (its progress thread) stay in it.
#![allow(dead_code)]

use std::process::Command;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn have_ip_tool() -> bool {
    Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success())
}

/// Skips (printing why) unless this process can make namespaces.
pub fn can_run(test: &str) -> bool {
    if !is_root() {
        eprintln!("{test}: skipped: needs root (network namespaces, veth pairs, AF_PACKET)");
        return false;
    }
    if !have_ip_tool() {
        eprintln!("{test}: skipped: the `ip` tool (iproute2) is not installed");
        return false;
    }
    true
}

pub fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().expect("run a command");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

pub fn sh_out(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).output().expect("run a command");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A network namespace, deleted on drop.
pub struct Netns(pub String);

impl Netns {
    /// A namespace with IPv6 off (no router solicitations or MLD reports on the links:
    /// counters count exactly what a test sends).
    pub fn new(tag: &str) -> Netns {
        let ns = Netns::with_ipv6(tag);
        ns.exec(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]);
        ns.exec(&["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"]);
        ns
    }

    /// A namespace whose kernel runs IPv6 (the UDP transport's IPv6 sockets need it).
    pub fn with_ipv6(tag: &str) -> Netns {
        let name = format!("rnic-{tag}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        sh(&["ip", "netns", "add", &name]);
        let ns = Netns(name);
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    pub fn ip(&self, args: &[&str]) {
        let mut a = vec!["ip", "-n", &self.0];
        a.extend_from_slice(args);
        sh(&a);
    }

    pub fn exec(&self, args: &[&str]) {
        let mut a = vec!["ip", "netns", "exec", &self.0];
        a.extend_from_slice(args);
        sh(&a);
    }

    /// Runs `f` on a thread inside this namespace.
    pub fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        let path = format!("/var/run/netns/{}", self.0);
        std::thread::scope(|s| {
            s.spawn(|| {
                let file = std::fs::File::open(&path).expect("namespace file");
                use std::os::fd::AsRawFd;
                // SAFETY: a valid namespace descriptor; only this thread moves.
                let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .expect("namespace thread")
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// A veth pair `a`/`b` in `ns`, up, with this MTU.
pub fn veth(ns: &Netns, a: &str, b: &str, mtu: u32) {
    ns.ip(&["link", "add", a, "type", "veth", "peer", "name", b]);
    for d in [a, b] {
        ns.ip(&["link", "set", d, "mtu", &mtu.to_string()]);
        ns.ip(&["link", "set", d, "up"]);
    }
}

/// A veth link between two namespaces: `a` in `na`, `b` in `nb`, both up.
pub fn veth_between(na: &Netns, a: &str, nb: &Netns, b: &str) {
    na.ip(&["link", "add", a, "type", "veth", "peer", "name", b, "netns", &nb.0]);
    na.ip(&["link", "set", a, "up"]);
    nb.ip(&["link", "set", b, "up"]);
}

/// Whether `check_pcap.sh` (../shared/vectors) and tshark are here to check a capture;
/// says why not when they are not.
pub fn check_pcap_script() -> Option<&'static str> {
    let check = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/vectors/check_pcap.sh");
    let tshark = Command::new("tshark").arg("--version").output().is_ok_and(|o| o.status.success());
    if tshark && std::path::Path::new(check).exists() {
        Some(check)
    } else {
        eprintln!("capture not checked: tshark or {check} is missing");
        None
    }
}
