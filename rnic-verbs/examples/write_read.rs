//! One-sided RDMA: rnic0 WRITEs into rnic1's memory and READs it back. rnic1's
//! application posts nothing and sees no completion: its CPU is not involved.
//!
//! Run: `cargo run -p rnic-verbs --example write_read` (two emulated devices on
//! 127.0.0.1 and 127.0.0.2; other addresses or device names as the two arguments, e.g.
//! `--features hw --example write_read rxe0 rxe0`).
use rnic_verbs::*;
use std::time::Duration;

fn run() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let a = open(args.next(), "rnic0", "127.0.0.1")?;
    let b = open(args.next(), "rnic1", "127.0.0.2")?;
    let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
    let (cq_a, cq_b) = (a.create_cq(16)?, b.create_cq(16)?);
    let local = pd_a.allocate_mr(1 << 16, AccessFlags::LOCAL_WRITE)?;
    // The target region grants remote write and read; its rkey is what the peer needs.
    let target =
        pd_b.allocate_mr(1 << 16, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ)?;
    let remote = target.remote();
    println!("B offers addr={:#x} rkey={:#x} len={}", remote.addr, remote.rkey, remote.len);

    let qp_a = pd_a.qp_builder(&cq_a, &cq_a).mtu(PathMtu::Mtu1024).build()?;
    let qp_b = pd_b.qp_builder(&cq_b, &cq_b).build()?;
    let (ep_a, ep_b) = (qp_a.endpoint(), qp_b.endpoint());
    let qp_a = qp_a.connect(&ep_b)?;
    let _qp_b = qp_b.connect(&ep_a)?;

    // WRITE 10000 bytes (10 packets at MTU 1024) into B.
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
    local.write(0, &data)?;
    let write = SendOp::RdmaWrite { remote_addr: remote.addr + 100, rkey: remote.rkey };
    qp_a.post_send(&SendWr::new(1, write, vec![local.sge(0, u32::try_from(data.len()).expect("short message"))]))?;
    println!("A completion: {}", cq_a.wait(1, Duration::from_secs(5))?[0]);
    let mut in_b = vec![0u8; data.len()];
    target.read(100, &mut in_b)?;
    assert_eq!(in_b, data);
    println!("B's memory now holds the data; B's CQ holds {} completions", cq_b.len());

    // READ it back into another part of A's buffer.
    let read = SendOp::RdmaRead { remote_addr: remote.addr + 100, rkey: remote.rkey };
    qp_a.post_send(&SendWr::new(2, read, vec![local.sge(20_000, u32::try_from(data.len()).expect("short message"))]))?;
    println!("A completion: {}", cq_a.wait(1, Duration::from_secs(5))?[0]);
    let mut back = vec![0u8; data.len()];
    local.read(20_000, &mut back)?;
    assert_eq!(back, data);
    println!("READ returned the same {} bytes", back.len());
    assert!(cq_b.is_empty());
    Ok(())
}

/// An argument is an address (an emulated device there) or a device's name: `rxe0`
/// twice runs the example on one hardware device (built with `--features hw`), which
/// loops the traffic back.
fn open(arg: Option<String>, name: &str, default_ip: &str) -> Result<Context> {
    let arg = arg.unwrap_or_else(|| default_ip.into());
    match arg.parse::<std::net::IpAddr>() {
        Ok(ip) => Context::open_at(name, ip),
        Err(_) => Context::open(&arg),
    }
}

/// Runs the example; on failure prints the error with its causes (`Error::report`), not
/// the `Debug` form a `main` returning `Result` would print.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.report());
            std::process::ExitCode::FAILURE
        }
    }
}
