//! rnic-verbs' `hw` backend driven through a real libibverbs ABI: rnic's own
//! `libibverbs.so.1` (the library `rnic exec` puts in front of stock programs). The hw
//! backend dlopens `libibverbs.so.1` and reaches every verb through the ABI's structs and
//! its `verbs_context` ops, exactly as it would on rxe or mlx5, so this runs the backend's
//! XRC, device memory, on-demand and re-registration paths in CI, where no RDMA hardware
//! is (the lab's `scripts/rxe-hw.sh` runs the basic verbs on Linux rxe).
//!
//! The parent test builds the library (`scripts/build-ibverbs.sh --debug`) and runs this
//! binary again, only the ignored `child_flows`, with the library first on
//! `LD_LIBRARY_PATH` and its devices in `RNIC_DEVICES`. The child lists the hardware
//! devices (the library reads `RNIC_DEVICES` once), then points `RNIC_DEVICES` elsewhere,
//! so that `Context::open` finds no emulated device of those names and takes the
//! hardware backend.

use rnic_verbs::{
    AccessFlags, Advice, Context, DeviceKind, MemoryRegion, ProtectionDomain, QpType, QueuePair, RecvWr, SendOp,
    SendWr, SendWrRef, WcStatus,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);
const DEVICES: &str = "hwa=127.0.91.1,hwb=127.0.91.2";
const CHILD: &str = "RNIC_TEST_HW_CHILD";

/// rnic's libraries, built as `scripts/build-ibverbs.sh --debug` builds them.
fn built_lib() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    if Command::new("cc").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no C compiler (cc) to link rnic's libibverbs.so.1");
        return None;
    }
    let out = Command::new(root.join("scripts/build-ibverbs.sh")).arg("--debug").current_dir(root).output().unwrap();
    assert!(out.status.success(), "build-ibverbs.sh: {}", String::from_utf8_lossy(&out.stderr));
    Some(root.join("target/rnic-ibverbs-debug"))
}

#[test]
fn the_hw_backend_runs_xrc_dm_odp_and_rereg_through_libibverbs() {
    let Some(lib) = built_lib() else { return };
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_flows", "--ignored", "--nocapture", "--test-threads", "1"])
        .env(CHILD, "1")
        .env("LD_LIBRARY_PATH", &lib)
        .env("RNIC_DEVICES", DEVICES)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child failed:\n{text}");
    for flow in ["hardware backend", "xrc", "device memory", "on demand", "rereg pd", "rereg allocate"] {
        assert!(text.contains(&format!("ok {flow}")), "no 'ok {flow}' in:\n{text}");
    }
}

/// The child's body: run only by the test above (it needs rnic's library loaded).
#[test]
#[ignore = "run by the_hw_backend_runs_xrc_dm_odp_and_rereg_through_libibverbs"]
fn child_flows() {
    assert!(std::env::var_os(CHILD).is_some(), "run by the_hw_backend_runs_xrc_dm_odp_and_rereg_through_libibverbs");
    let listed: Vec<String> =
        rnic_verbs::hw::devices().expect("rnic's libibverbs lists its devices").into_iter().map(|d| d.name).collect();
    assert_eq!(listed, ["hwa", "hwb"], "the library's devices");
    // The library has read RNIC_DEVICES; the emulated discovery must not find these names.
    std::env::set_var("RNIC_DEVICES", "emu=127.0.91.9");
    let (a, b) = (Context::open("hwa").unwrap(), Context::open("hwb").unwrap());
    assert_eq!((a.kind(), b.kind()), (DeviceKind::Hardware, DeviceKind::Hardware));
    println!("ok hardware backend");
    xrc(&a, &b);
    println!("ok xrc");
    device_memory(&a, &b);
    println!("ok device memory");
    on_demand(&a, &b);
    println!("ok on demand");
    rereg(&a, &b);
}

fn rc_pair(
    pd_a: &ProtectionDomain,
    pd_b: &ProtectionDomain,
    a: &Context,
    b: &Context,
) -> (QueuePair, QueuePair, rnic_verbs::CompletionQueue) {
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let qa = pd_a.qp_builder(&cq_a, &cq_a).build().unwrap();
    let qb = pd_b.qp_builder(&cq_b, &cq_b).build().unwrap();
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    (qa.connect(&eb).unwrap(), qb.connect(&ea).unwrap(), cq_a)
}

/// One initiator to two SRQs of a domain, then an SRQ of another domain: NAKed.
fn xrc(a: &Context, b: &Context) {
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let cq_a = a.create_cq(16).unwrap();
    let src = pd_a.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let dst = pd_b.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let domain = b.open_xrcd().unwrap();
    let (cq_1, cq_2) = (b.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let s1 = pd_b.create_xrc_srq(&domain, &cq_1, 16, 1).unwrap();
    let s2 = pd_b.create_xrc_srq(&domain, &cq_2, 16, 1).unwrap();
    s1.post_recv(&RecvWr { wr_id: 1, sg_list: vec![dst.sge(0, 1024)] }).unwrap();
    s2.post_recv(&RecvWr { wr_id: 2, sg_list: vec![dst.sge(1024, 1024)] }).unwrap();
    let ini = pd_a.qp_builder(&cq_a, &cq_a).qp_type(QpType::XrcSend).build().unwrap();
    let tgt = pd_b.qp_builder(&cq_1, &cq_1).qp_type(QpType::XrcRecv).xrcd(&domain).build().unwrap();
    let (ei, et) = (ini.endpoint(), tgt.endpoint());
    let (ini, _tgt) = (ini.connect(&et).unwrap(), tgt.connect(&ei).unwrap());
    for (i, (srq, cq, off)) in [(&s1, &cq_1, 0usize), (&s2, &cq_2, 1024)].into_iter().enumerate() {
        let msg = format!("to SRQ {} ({i})", srq.id());
        src.write(0, msg.as_bytes()).unwrap();
        let len = u32::try_from(msg.len()).unwrap();
        let wr = SendWr::send(i as u64, vec![src.sge(0, len)]);
        ini.post_send(SendWrRef::from(&wr).to_srq(srq.id())).unwrap();
        assert_eq!(cq_a.wait(1, T).unwrap()[0].status, WcStatus::Success);
        let got = cq.wait(1, T).unwrap()[0];
        assert_eq!((got.status, got.byte_len as usize), (WcStatus::Success, msg.len()), "SRQ {}", srq.id());
        let mut text = vec![0u8; msg.len()];
        dst.read(off, &mut text).unwrap();
        assert_eq!(text, msg.as_bytes());
    }
    let other = b.open_xrcd().unwrap();
    let cq_o = b.create_cq(4).unwrap();
    let stranger = pd_b.create_xrc_srq(&other, &cq_o, 4, 1).unwrap();
    stranger.post_recv(&RecvWr { wr_id: 3, sg_list: vec![dst.sge(2048, 1024)] }).unwrap();
    let wr = SendWr::send(9, vec![src.sge(0, 8)]);
    ini.post_send(SendWrRef::from(&wr).to_srq(stranger.id())).unwrap();
    assert_eq!(cq_a.wait(1, T).unwrap()[0].status, WcStatus::RemInvReqErr);
    assert!(cq_o.poll_one().unwrap().is_none(), "the other domain's SRQ took a message");
}

/// A zero-based region over device memory, READ and WRITTEN by offset (copies in whole
/// 4-byte words); free refused while it lives.
fn device_memory(a: &Context, b: &Context) {
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let local = pd_a.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let dm = b.alloc_dm(4096).unwrap();
    dm.copy_to(1024, b"on the device, 4").unwrap();
    let region = pd_b
        .register_dm_mr(
            &dm,
            1024,
            1024,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let (qa, _qb, cq_a) = rc_pair(&pd_a, &pd_b, a, b);
    qa.post_send(&SendWr::new(1, SendOp::RdmaRead { remote_addr: 0, rkey: region.rkey() }, vec![local.sge(0, 16)]))
        .unwrap();
    assert_eq!(cq_a.wait(1, T).unwrap()[0].status, WcStatus::Success);
    let mut got = [0u8; 16];
    local.read(0, &mut got).unwrap();
    assert_eq!(&got, b"on the device, 4");
    local.write(64, b"from A:)").unwrap();
    qa.post_send(&SendWr::new(2, SendOp::RdmaWrite { remote_addr: 512, rkey: region.rkey() }, vec![local.sge(64, 8)]))
        .unwrap();
    assert_eq!(cq_a.wait(1, T).unwrap()[0].status, WcStatus::Success);
    let mut back = [0u8; 8];
    dm.copy_from(1536, &mut back).unwrap();
    assert_eq!(&back, b"from A:)");
    let dm = dm.free().expect_err("a region registers it").into_inner();
    drop(region);
    dm.free().unwrap();
}

/// An on-demand region, advised, then written by the peer.
fn on_demand(a: &Context, b: &Context) {
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let local = pd_a.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let odp = pd_b.allocate_mr_on_demand(8192, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).unwrap();
    assert!(odp.is_on_demand());
    pd_b.advise_mr(Advice::PrefetchWrite, &[odp.sge(0, 8192)]).unwrap();
    let (qa, _qb, cq_a) = rc_pair(&pd_a, &pd_b, a, b);
    local.write(0, b"paged in").unwrap();
    let write = SendOp::RdmaWrite { remote_addr: odp.addr() + 5000, rkey: odp.rkey() };
    qa.post_send(&SendWr::new(1, write, vec![local.sge(0, 8)])).unwrap();
    assert_eq!(cq_a.wait(1, T).unwrap()[0].status, WcStatus::Success);
    let mut got = [0u8; 8];
    odp.read(5000, &mut got).unwrap();
    assert_eq!(&got, b"paged in");
}

/// A WRITE through a region's rkey after it moved to another PD (refused: the QP's PD is
/// the old one) and after it got new memory (lands in the new memory).
fn rereg(a: &Context, b: &Context) {
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let local = pd_a.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mut target: MemoryRegion = pd_b.allocate_mr(4096, access).unwrap();
    let (qa, _qb, cq_a) = rc_pair(&pd_a, &pd_b, a, b);
    local.write(0, b"rereg").unwrap();
    let write = |t: &MemoryRegion, id| {
        let op = SendOp::RdmaWrite { remote_addr: t.addr(), rkey: t.rkey() };
        qa.post_send(&SendWr::new(id, op, vec![local.sge(0, 5)])).unwrap();
        cq_a.wait(1, T).unwrap()[0].status
    };
    let elsewhere = b.alloc_pd().unwrap();
    target.rereg_pd(&elsewhere).unwrap();
    assert_eq!(write(&target, 1), WcStatus::RemAccessErr, "a WRITE through a region of another PD");
    println!("ok rereg pd");
    // The refused WRITE put both QPs in the error state: a fresh pair on the region's PD.
    let (qa2, _qb2, cq_a2) = rc_pair(&pd_a, &elsewhere, a, b);
    target.rereg_allocate(8192).unwrap();
    let op = SendOp::RdmaWrite { remote_addr: target.addr() + 4096, rkey: target.rkey() };
    qa2.post_send(&SendWr::new(2, op, vec![local.sge(0, 5)])).unwrap();
    assert_eq!(cq_a2.wait(1, T).unwrap()[0].status, WcStatus::Success);
    let mut got = [0u8; 5];
    target.read(4096, &mut got).unwrap();
    assert_eq!(&got, b"rereg");
    println!("ok rereg allocate");
}
