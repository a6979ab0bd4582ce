//! A memory window: rnic1 lends rnic0 64 bytes of a larger region, read-only, through a
//! type 2 window bound to its QP, then takes the loan back (LOCAL_INV) without touching
//! the region's registration. rnic0 READs through the window, is refused a WRITE
//! (remote access error), and after the invalidation is refused the READ too.
//!
//! Run: `cargo run -p rnic-verbs --example memory_window` (two emulated devices on
//! 127.0.0.1 and 127.0.0.2).
use rnic_verbs::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(5);

fn main() -> Result<()> {
    let (a, b) = (Context::open("rnic0")?, Context::open("rnic1")?);
    let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
    let (cq_a, cq_b) = (a.create_cq(16)?, b.create_cq(16)?);
    let local = pd_a.allocate_mr(4096, AccessFlags::LOCAL_WRITE)?;
    // The region itself grants no remote right: only the window will.
    let region = pd_b.allocate_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND)?;
    region.write(1024, b"lent through a window, 64 bytes, read-only: nothing else of it.....")?;
    let qp_a = pd_a.qp_builder(&cq_a, &cq_a).max_rd_atomic(1).build()?;
    let qp_b = pd_b.qp_builder(&cq_b, &cq_b).max_dest_rd_atomic(1).build()?;
    let (ea, eb) = (qp_a.endpoint(), qp_b.endpoint());
    let (qp_a, qp_b) = (qp_a.connect(&eb)?, qp_b.connect(&ea)?);

    let mw = pd_b.alloc_mw(MwType::Two)?;
    let rkey = mw.bind(&qp_b, 1, &region, 1024, 64, AccessFlags::REMOTE_READ)?;
    let done = cq_b.wait(1, T)?[0];
    println!("B bound window {rkey:#x}: {done}");
    let addr = region.addr() + 1024;

    let read = |id| -> Result<WorkCompletion> {
        qp_a.post_send(&SendWr::new(id, SendOp::RdmaRead { remote_addr: addr, rkey }, vec![local.sge(0, 64)]))?;
        Ok(cq_a.wait(1, T)?[0])
    };
    let wc = read(2)?;
    let mut got = vec![0u8; 64];
    local.read(0, &mut got)?;
    println!("A READ through the window: {} {:?}", wc.status.name(), String::from_utf8_lossy(&got));
    assert_eq!(wc.status, WcStatus::Success);

    // The window grants no write: a remote access error, and A's QP is now in error.
    let write = SendOp::RdmaWrite { remote_addr: addr, rkey };
    qp_a.post_send(&SendWr::new(3, write, vec![local.sge(0, 8)]))?;
    let wc = cq_a.wait(1, T)?[0];
    println!("A WRITE through the read-only window: {}", wc.status.name());
    assert_eq!(wc.status, WcStatus::RemAccessErr);
    Ok(())
}
