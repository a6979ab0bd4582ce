//! The device files `rnic exec` gives a program: what software reads to find RDMA devices
//! before it opens one, shaped as Linux rxe's, in a private mount namespace so that
//! nothing outside the program and its children sees them.
//!
//! - `/sys/class/infiniband/<dev>/`: `node_type`, `node_guid`, `sys_image_guid`,
//!   `fw_ver`, `node_desc`, `device/net/<netdev>` (rdma-core's tests and rdma_cm map a
//!   device to its netdev and address there), `ports/1/` (`state`, `phys_state`,
//!   `link_layer`, `rate`, `lid`, `sm_lid`, `lid_mask_count`, `cap_mask`, `gids/N`,
//!   `gid_attrs/types/N`, `gid_attrs/ndevs/N`, `pkeys/0`);
//! - `/sys/class/infiniband_verbs/uverbsN/` (`ibdev`, `abi_version`, `dev`) and its
//!   `abi_version`;
//! - `/dev/infiniband/uverbsN`: a character device the program may read and write
//!   (`/dev/null` bound there: UCX stats it and checks `access(R_OK|W_OK)` before it
//!   offers a device; nothing reads or writes it, since rnic's library has no kernel
//!   commands).
//!
//! How: `unshare(CLONE_NEWNS)` (root, or `CAP_SYS_ADMIN`), else a user namespace with a
//! mount namespace where the kernel allows unprivileged ones (the program then runs as
//! uid 0 of that namespace, mapped to the caller). Mounts are made private; a directory to
//! extend (`/sys/class`, `/dev`, or `/sys/class/infiniband` where it exists) is covered by
//! a tmpfs in which every original entry is bound back (directories recursively, with
//! their submounts: `/dev/pts`, `/dev/shm`; device nodes and files onto empty files;
//! symbolic links recreated), and the new entries are written beside them.

use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use rnic_verbs::DeviceInfo;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{symlink, FileTypeExt};
use std::path::{Path, PathBuf};

/// What was done, or why not.
#[derive(Debug)]
pub enum Outcome {
    /// The files are in place.
    Provided,
    /// Nothing could be provided: why.
    Refused(String),
}

/// Gives this process (and what it `exec`s) the device files of `devices`.
pub fn provide(devices: &[DeviceInfo]) -> Outcome {
    match unshare(CloneFlags::CLONE_NEWNS) {
        Ok(()) => {}
        Err(first) => match enter_user_namespace() {
            Ok(()) => {}
            Err(second) => {
                return Outcome::Refused(format!(
                    "a mount namespace needs CAP_SYS_ADMIN (unshare(CLONE_NEWNS): {}) and an unprivileged user namespace was refused ({second})",
                    first.desc()
                ))
            }
        },
    }
    if let Err(e) = build(devices) {
        return Outcome::Refused(e);
    }
    Outcome::Provided
}

/// A user namespace with its own mount namespace, the caller mapped to uid/gid 0.
fn enter_user_namespace() -> Result<(), String> {
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS)
        .map_err(|e| format!("unshare(CLONE_NEWUSER): {}", e.desc()))?;
    let write = |path: &str, text: String| fs::write(path, text).map_err(|e| format!("{path}: {e}"));
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("0 {uid} 1\n"))?;
    write("/proc/self/gid_map", format!("0 {gid} 1\n"))?;
    Ok(())
}

fn build(devices: &[DeviceInfo]) -> Result<(), String> {
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
        .map_err(|e| format!("making mounts private: {}", e.desc()))?;
    let mut ours = Vec::new();
    let ib = Path::new("/sys/class/infiniband");
    writable_dir(ib, &mut ours)?;
    let verbs = Path::new("/sys/class/infiniband_verbs");
    writable_dir(verbs, &mut ours)?;
    let dev = Path::new("/dev/infiniband");
    writable_dir(dev, &mut ours)?;
    if !verbs.join("abi_version").exists() {
        put(&verbs.join("abi_version"), "6")?;
    }
    for (i, d) in devices.iter().enumerate() {
        device_tree(&ib.join(&d.name), d)?;
        let uverbs = format!("uverbs{i}");
        let u = verbs.join(&uverbs);
        mkdir(&u)?;
        put(&u.join("ibdev"), &d.name)?;
        put(&u.join("abi_version"), "1")?;
        put(&u.join("dev"), &format!("231:{}", 192 + i))?;
        // A character device the program may open read-write.
        let node = dev.join(&uverbs);
        fs::write(&node, b"").map_err(|e| format!("{}: {e}", node.display()))?;
        bind("/dev/null", &node, false)?;
    }
    Ok(())
}

/// The interface a UDP device's address is on (`lo` for a loopback address no interface
/// names, as Linux routes it), or a raw Ethernet device's own.
fn netdev_of(d: &DeviceInfo) -> Option<String> {
    if let Some(n) = &d.netdev {
        return Some(n.clone());
    }
    if let Ok(addrs) = nix::ifaddrs::getifaddrs() {
        for a in addrs {
            let Some(addr) = a.address else { continue };
            let ip = match (addr.as_sockaddr_in(), addr.as_sockaddr_in6()) {
                (Some(v4), _) => std::net::IpAddr::V4(v4.ip()),
                (_, Some(v6)) => std::net::IpAddr::V6(v6.ip()),
                _ => continue,
            };
            if ip == d.ip {
                return Some(a.interface_name);
            }
        }
    }
    d.ip.is_loopback().then(|| "lo".to_string())
}

/// A GID as sysfs prints it: eight groups of four hex digits.
fn gid_text(g: &[u8; 16]) -> String {
    g.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1])).collect::<Vec<_>>().join(":")
}

fn guid_text(guid: u64) -> String {
    let b = guid.to_be_bytes();
    b.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1])).collect::<Vec<_>>().join(":")
}

/// One device's directory, as rxe's.
fn device_tree(root: &Path, d: &DeviceInfo) -> Result<(), String> {
    mkdir(root)?;
    let guid = guid_text(d.node_guid());
    put(&root.join("node_type"), "1: CA")?;
    put(&root.join("node_guid"), &guid)?;
    put(&root.join("sys_image_guid"), &guid)?;
    put(&root.join("fw_ver"), env!("CARGO_PKG_VERSION"))?;
    put(&root.join("node_desc"), &format!("rnic {}", d.name))?;
    put(&root.join("hca_type"), "rnic")?;
    let netdev = netdev_of(d);
    mkdir(&root.join("device/net"))?;
    if let Some(n) = &netdev {
        let target = Path::new("/sys/class/net").join(n);
        symlink(&target, root.join("device/net").join(n)).map_err(|e| format!("{}: {e}", target.display()))?;
    }
    let port = root.join("ports/1");
    for dir in ["gids", "gid_attrs/types", "gid_attrs/ndevs", "pkeys", "counters", "hw_counters"] {
        mkdir(&port.join(dir))?;
    }
    put(&port.join("state"), "4: ACTIVE")?;
    put(&port.join("phys_state"), "5: LinkUp")?;
    put(&port.join("link_layer"), "Ethernet")?;
    put(&port.join("rate"), "100 Gb/sec (4X EDR)")?;
    put(&port.join("lid"), "0x0")?;
    put(&port.join("sm_lid"), "0x0")?;
    put(&port.join("sm_sl"), "0")?;
    put(&port.join("lid_mask_count"), "0")?;
    // IB_PORT_CM_SUP, as ibv_query_port reports.
    put(&port.join("cap_mask"), "0x00010000")?;
    put(&port.join("pkeys/0"), "0xffff")?;
    let mut index = 0;
    while let Some(g) = d.gid(index) {
        put(&port.join(format!("gids/{index}")), &gid_text(&g.0))?;
        put(&port.join(format!("gid_attrs/types/{index}")), "RoCE v2")?;
        put(&port.join(format!("gid_attrs/ndevs/{index}")), netdev.as_deref().unwrap_or(""))?;
        index += 1;
    }
    Ok(())
}

fn mkdir(p: &Path) -> Result<(), String> {
    fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))
}

fn put(p: &Path, text: &str) -> Result<(), String> {
    fs::write(p, format!("{text}\n")).map_err(|e| format!("{}: {e}", p.display()))
}

fn bind(src: impl AsRef<Path>, dst: &Path, recursive: bool) -> Result<(), String> {
    let flags = if recursive { MsFlags::MS_BIND | MsFlags::MS_REC } else { MsFlags::MS_BIND };
    mount(Some(src.as_ref()), dst, None::<&str>, flags, None::<&str>)
        .map_err(|e| format!("binding {} on {}: {}", src.as_ref().display(), dst.display(), e.desc()))
}

/// Makes `dir` a directory this process may add entries to, keeping what is in it: an
/// existing one is covered by a tmpfs into which its entries are bound back; a missing
/// one is made in its parent, made writable the same way (never in the original
/// directory, which the rest of the host shares). `ours`: the tmpfs already laid.
fn writable_dir(dir: &Path, ours: &mut Vec<PathBuf>) -> Result<(), String> {
    if ours.iter().any(|o| dir.starts_with(o)) {
        return mkdir(dir);
    }
    if !dir.exists() {
        let parent = dir.parent().ok_or_else(|| format!("{}: no parent", dir.display()))?;
        writable_dir(parent, ours)?;
        return mkdir(dir);
    }
    // The original, reachable through this descriptor once covered.
    let orig = fs::File::open(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let through = PathBuf::from(format!("/proc/self/fd/{}", orig.as_raw_fd()));
    let entries: Vec<_> =
        fs::read_dir(&through).map_err(|e| format!("{}: {e}", dir.display()))?.filter_map(Result::ok).collect();
    mount(Some("tmpfs"), dir, Some("tmpfs"), MsFlags::empty(), Some("mode=0755"))
        .map_err(|e| format!("mounting a tmpfs on {}: {}", dir.display(), e.desc()))?;
    ours.push(dir.to_path_buf());
    for e in entries {
        let name = e.file_name();
        let (src, dst) = (through.join(&name), dir.join(&name));
        let Ok(ty) = e.file_type() else { continue };
        if ty.is_symlink() {
            let target = fs::read_link(&src).map_err(|err| format!("{}: {err}", src.display()))?;
            symlink(&target, &dst).map_err(|err| format!("{}: {err}", dst.display()))?;
        } else if ty.is_dir() {
            mkdir(&dst)?;
            bind(&src, &dst, true)?;
        } else if ty.is_file() || ty.is_char_device() || ty.is_block_device() || ty.is_socket() || ty.is_fifo() {
            fs::write(&dst, b"").map_err(|err| format!("{}: {err}", dst.display()))?;
            bind(&src, &dst, false)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gids_and_guids_print_as_sysfs_does() {
        let d = DeviceInfo {
            name: "rnic0".into(),
            ip: "127.0.0.1".parse().unwrap(),
            kind: Default::default(),
            netdev: None,
            vlan: None,
        };
        assert_eq!(guid_text(d.node_guid()), "0052:7fff:fe00:0001");
        assert_eq!(gid_text(&d.gid(0).unwrap().0), "fe80:0000:0000:0000:0052:7fff:fe00:0001");
        assert_eq!(gid_text(&d.gid(1).unwrap().0), "0000:0000:0000:0000:0000:ffff:7f00:0001");
        assert_eq!(netdev_of(&d).as_deref(), Some("lo"));
    }
}
