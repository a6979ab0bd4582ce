//! Device memory: rnic1 allocates 4 KiB of device memory (`ibv_alloc_dm`), fills it by
//! copy, and registers 1 KiB of it as a zero-based region; rnic0 READs it and WRITEs into
//! it by offset. rnic1 copies the result back out, is refused freeing the memory while
//! the region lives, and frees it once the region is gone.
//!
//! Run: `cargo run -p rnic-verbs --example device_memory` (two emulated devices on
//! 127.0.0.1 and 127.0.0.2).
use rnic_verbs::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(5);

fn main() -> Result<()> {
    let (a, b) = (Context::open("rnic0")?, Context::open("rnic1")?);
    let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
    let (cq_a, cq_b) = (a.create_cq(16)?, b.create_cq(16)?);
    let local = pd_a.allocate_mr(4096, AccessFlags::LOCAL_WRITE)?;

    let dm = b.alloc_dm(4096)?;
    dm.copy_to(1024, b"kept on the device, read by offset!!")?;
    let region = pd_b.register_dm_mr(
        &dm,
        1024,
        1024,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
    )?;
    println!("B registered 1 KiB of device memory: address {:#x}, rkey {:#x}", region.addr(), region.rkey());

    let qp_a = pd_a.qp_builder(&cq_a, &cq_a).build()?;
    let qp_b = pd_b.qp_builder(&cq_b, &cq_b).build()?;
    let (ea, eb) = (qp_a.endpoint(), qp_b.endpoint());
    let (qp_a, _qp_b) = (qp_a.connect(&eb)?, qp_b.connect(&ea)?);

    // Offsets, not addresses: the region is zero-based.
    let read = SendOp::RdmaRead { remote_addr: 0, rkey: region.rkey() };
    qp_a.post_send(&SendWr::new(1, read, vec![local.sge(0, 36)]))?;
    let wc = cq_a.wait(1, T)?[0];
    let mut got = vec![0u8; 36];
    local.read(0, &mut got)?;
    println!("A READ offset 0: {} {:?}", wc.status.name(), String::from_utf8_lossy(&got));
    assert_eq!(wc.status, WcStatus::Success);

    local.write(64, b"written by A")?;
    let write = SendOp::RdmaWrite { remote_addr: 512, rkey: region.rkey() };
    qp_a.post_send(&SendWr::new(2, write, vec![local.sge(64, 12)]))?;
    assert_eq!(cq_a.wait(1, T)?[0].status, WcStatus::Success);
    let mut back = [0u8; 12];
    dm.copy_from(1024 + 512, &mut back)?;
    println!("B copies device memory at 1536: {:?}", String::from_utf8_lossy(&back));
    assert_eq!(&back, b"written by A");

    let dm = match dm.free() {
        Err(busy) => {
            println!("B frees the memory while the region lives: {busy}");
            busy.into_inner()
        }
        Ok(()) => unreachable!("a region registers it"),
    };
    drop(region);
    dm.free()?;
    println!("B freed the device memory once the region was gone");
    Ok(())
}
