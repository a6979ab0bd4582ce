//! `rnic pingpong` options end to end: two processes, each with its own device.

use std::process::{Command, Stdio};
use std::time::Duration;

fn rnic() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rnic"))
}

fn pair(port: u16, server_ip: &str, client_ip: &str, extra: &[&str]) -> (String, String) {
    let p = port.to_string();
    let server = rnic()
        .args(["pingpong", "--ip", server_ip, "-p", &p, "--counters"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let client =
        rnic().args(["pingpong", "127.0.0.1", "--ip", client_ip, "-p", &p, "--counters"]).args(extra).output().unwrap();
    let server = server.wait_with_output().unwrap();
    let (cs, ss) =
        (String::from_utf8_lossy(&client.stdout).to_string(), String::from_utf8_lossy(&server.stdout).to_string());
    assert!(client.status.success(), "client: {cs}{}", String::from_utf8_lossy(&client.stderr));
    assert!(server.status.success(), "server: {ss}{}", String::from_utf8_lossy(&server.stderr));
    (cs, ss)
}

/// `-e` (sleep on completion events) with rc_pingpong's -c page pattern checked on both
/// sides, a message spanning three path MTUs, and the counters printed at the end.
#[test]
fn events_mode_and_counters() {
    let port = 20515 + u16::try_from(std::process::id() % 1000).unwrap();
    let (cs, ss) = pair(port, "127.0.62.21", "127.0.62.22", &["-e", "-c", "-n", "100", "-s", "0x2800", "-m", "4096"]);
    for s in [&cs, &ss] {
        assert!(s.contains("2048000 bytes in "), "{s}");
        assert!(s.contains("100 iters in "), "{s}");
        // 100 messages of 3 packets each way, all ICRCs exact (another rnic sends ID 0).
        assert!(s.contains("rdma_sends=100 rdma_recvs=100"), "{s}");
        assert!(!s.contains("icrc_ipv4_id_solved"), "{s}");
    }
}

/// A client that is not a pingpong peer (it sends garbage) gets a clear error from the
/// server, not a hang or a panic.
#[test]
fn a_malformed_address_message_is_refused() {
    use std::io::Write;
    let port = 21515 + u16::try_from(std::process::id() % 1000).unwrap();
    let server = rnic()
        .args(["pingpong", "--ip", "127.0.62.23", "-p", &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut s = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    s.write_all(&[b'x'; 52]).unwrap();
    let out = server.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("malformed address message from the client"), "{e}");
}

/// `--ud`: ibv_ud_pingpong between two processes, 40-byte GRH area in every receive
/// buffer, the payload checked (-c) at offset 40 on both sides.
#[test]
fn ud_pingpong_between_two_processes() {
    let port = 22515 + u16::try_from(std::process::id() % 1000).unwrap();
    let (cs, ss) = pair(port, "127.0.62.24", "127.0.62.25", &["--ud", "-s", "1000", "-m", "1024", "-n", "50", "-c"]);
    for s in [&cs, &ss] {
        assert!(s.contains("100000 bytes in "), "{s}");
        assert!(s.contains("50 iters in "), "{s}");
        assert!(s.contains("rdma_sends=50 rdma_recvs=50"), "{s}");
    }
}
