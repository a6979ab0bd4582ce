//! Two-sided RDMA: a SEND from rnic0 lands in a receive buffer posted by rnic1.
//!
//! Both devices run in this process on 127.0.0.1 and 127.0.0.2 (override with the
//! first two arguments: addresses, or device names such as `rxe0 rxe0` with `--features hw`). Run: `cargo run -p rnic-verbs --example send_recv`.
use rnic_verbs::*;
use std::time::Duration;

fn run() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let a = open(args.next(), "rnic0", "127.0.0.1")?;
    let b = open(args.next(), "rnic1", "127.0.0.2")?;

    // Each side: a protection domain, a completion queue, a registered buffer, a QP.
    let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
    let (cq_a, cq_b) = (a.create_cq(16)?, b.create_cq(16)?);
    let buf_a = pd_a.allocate_mr(4096, AccessFlags::LOCAL_WRITE)?;
    let buf_b = pd_b.allocate_mr(4096, AccessFlags::LOCAL_WRITE)?;
    let qp_a = pd_a.qp_builder(&cq_a, &cq_a).build()?;
    let qp_b = pd_b.qp_builder(&cq_b, &cq_b).build()?;

    // Exchange endpoints (out of band: here, just variables) and connect.
    let (ep_a, ep_b) = (qp_a.endpoint(), qp_b.endpoint());
    println!("A endpoint {}", serde_json_like(&ep_a));
    println!("B endpoint {}", serde_json_like(&ep_b));
    let qp_a = qp_a.connect(&ep_b)?;
    let qp_b = qp_b.connect(&ep_a)?;

    // The receiver must post a buffer before the SEND arrives.
    qp_b.post_recv(&RecvWr { wr_id: 100, sg_list: vec![buf_b.sge(0, 4096)] })?;
    let msg = b"hello from rnic0, by SEND";
    buf_a.write(0, msg)?;
    qp_a.post_send(&SendWr::send(1, vec![buf_a.sge(0, u32::try_from(msg.len()).expect("short message"))]))?;

    let sent = cq_a.wait(1, Duration::from_secs(5))?;
    let got = cq_b.wait(1, Duration::from_secs(5))?;
    println!("A completion: {}", sent[0]);
    println!("B completion: {}", got[0]);
    let mut back = vec![0u8; got[0].byte_len as usize];
    buf_b.read(0, &mut back)?;
    println!("B received: {:?}", String::from_utf8_lossy(&back));
    assert_eq!(back, msg);
    Ok(())
}

fn serde_json_like(e: &Endpoint) -> String {
    format!("{{qpn: {:#x}, gid: {}, psn: {:#x}}}", e.qpn, e.gid, e.psn)
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
