//! `rnic devinfo` through the binary, devices configured by RNIC_DEVICES.

use std::process::Command;

fn devinfo(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rnic"))
        .arg("devinfo")
        .args(args)
        .env("RNIC_DEVICES", "rnicA=127.0.62.11,rnicB=127.0.62.12")
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn lists_the_configured_devices() {
    let (ok, out, _) = devinfo(&["-l"]);
    assert!(ok);
    assert_eq!(out, "2 HCAs found:\n\trnicA\n\trnicB\n");
}

#[test]
fn shows_one_device_with_its_gid_and_limits() {
    let (ok, out, err) = devinfo(&["-d", "rnicB", "-v"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("hca_id:\trnicB\n"), "{out}");
    assert!(!out.contains("rnicA"));
    for want in [
        "PORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        "GID[  0]:\t\tfe80::52:7fff:fe00:3e0c, RoCE v2",
        "GID[  1]:\t\t::ffff:127.0.62.12, RoCE v2",
        "max_qp_wr:",
        "counters:",
    ] {
        assert!(out.contains(want), "missing {want:?}:\n{out}");
    }
}

/// A device in use by another process (its UDP 4791 bound) can still be queried.
#[test]
fn a_device_in_use_can_be_shown() {
    let _busy = std::net::UdpSocket::bind("127.0.62.11:4791").unwrap();
    let (ok, out, err) = devinfo(&["-d", "rnicA"]);
    assert!(ok, "{err}");
    assert!(out.contains("::ffff:127.0.62.11"));
}

#[test]
fn unknown_device_and_port_are_named() {
    let (ok, _, err) = devinfo(&["-d", "mlx5_0"]);
    assert!(!ok);
    assert!(err.contains("'mlx5_0' wasn't found") && err.contains("rnicA, rnicB"), "{err}");
    let (ok, _, err) = devinfo(&["-i", "2"]);
    assert!(!ok && err.contains("invalid port 2"), "{err}");
}

fn rnic() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rnic"))
}

/// Configuration that does not parse is an error naming it, never a silent default.
#[test]
fn bad_environment_is_named() {
    let out = rnic().arg("devinfo").env("RNIC_DEVICES", "rnic0=127.0.0.1:4791").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("RNIC_DEVICES: entry \"rnic0=127.0.0.1:4791\""));
    let out = rnic()
        .args(["demo", "-q", "--ip", "127.0.49.5", "--peer-ip", "127.0.49.6"])
        .env("RNIC_SPIN_US", "fast")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("RNIC_SPIN_US=\"fast\""));
    let out = rnic()
        .args(["demo", "-q", "--ip", "127.0.49.5", "--peer-ip", "127.0.49.6"])
        .env("RNIC_WAKE_BOOST", "yes")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("RNIC_WAKE_BOOST=\"yes\""));
}
