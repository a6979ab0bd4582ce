//! Memory over real UDP on loopback, as rdma-core documents each verb: re-registration of
//! a region's PD and translation (`ibv_rereg_mr`: the keys stay, the peer's view changes),
//! on-demand regions (`IBV_ACCESS_ON_DEMAND`: nothing pinned), an implicit region over the
//! whole address space, `ibv_advise_mr`, and device memory (`ibv_alloc_dm`, copies, a
//! zero-based region over it, free refused while the region lives).
#![allow(clippy::cast_possible_truncation)]

use rnic_verbs::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);
const RW: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_WRITE).union(AccessFlags::REMOTE_READ);

/// Two devices on `net`.1 and `net`.2, a PD and CQ on each.
fn devices(net: &str) -> (Context, Context) {
    let a = Context::open_at("rnic0", format!("{net}.1").parse().unwrap()).unwrap();
    let b = Context::open_at("rnic1", format!("{net}.2").parse().unwrap()).unwrap();
    (a, b)
}

/// An RC pair: a QP of `pa` (completing in `ca`) connected to one of `pb` (in `cb`).
fn pair(
    pa: &ProtectionDomain,
    ca: &CompletionQueue,
    pb: &ProtectionDomain,
    cb: &CompletionQueue,
) -> (QueuePair, QueuePair) {
    let qa = pa.qp_builder(ca, ca).build().unwrap();
    let qb = pb.qp_builder(cb, cb).build().unwrap();
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    (qa.connect(&eb).unwrap(), qb.connect(&ea).unwrap())
}

/// A's RDMA WRITE of `data` to `addr`/`rkey` on `qp`: its completion status.
fn write(qp: &QueuePair, cq: &CompletionQueue, src: &MemoryRegion, data: &[u8], addr: u64, rkey: u32) -> WcStatus {
    src.write(0, data).unwrap();
    let op = SendOp::RdmaWrite { remote_addr: addr, rkey };
    qp.post_send(&SendWr::new(1, op, vec![src.sge(0, data.len() as u32)])).unwrap();
    cq.wait(1, T).unwrap()[0].status
}

#[test]
fn rereg_moves_a_region_to_another_pd_and_other_memory_under_the_same_keys() {
    let (a, b) = devices("127.0.152");
    let (pa, cqa) = (a.alloc_pd().unwrap(), a.create_cq(16).unwrap());
    let (pb1, pb2, cqb) = (b.alloc_pd().unwrap(), b.alloc_pd().unwrap(), b.create_cq(16).unwrap());
    let src = pa.allocate_mr(8192, AccessFlags::LOCAL_WRITE).unwrap();
    let mut mr = pb1.allocate_mr(4096, RW).unwrap();
    let (lkey, rkey, addr) = (mr.lkey(), mr.rkey(), mr.addr());

    let (to_pd1, _r1) = pair(&pa, &cqa, &pb1, &cqb);
    assert_eq!(write(&to_pd1, &cqa, &src, b"in pd1", addr, rkey), WcStatus::Success);

    // A clone would go on reporting the old PD: re-registration takes the only handle.
    let clone = mr.clone();
    let e = mr.rereg_pd(&pb2).unwrap_err().report();
    assert!(e.contains("1 other handle(s)"), "{e}");
    drop(clone);
    mr.rereg_pd(&pb2).unwrap();
    assert_eq!((mr.lkey(), mr.rkey(), mr.addr(), mr.len()), (lkey, rkey, addr, 4096));
    let mut got = [0u8; 6];
    mr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"in pd1", "the memory stays");
    // Through a QP of the old PD the key is now refused; through one of the new, written.
    assert_eq!(write(&to_pd1, &cqa, &src, b"nope", addr, rkey), WcStatus::RemAccessErr);
    let (to_pd2, _r2) = pair(&pa, &cqa, &pb2, &cqb);
    assert_eq!(write(&to_pd2, &cqa, &src, b"in pd2", addr + 8, rkey), WcStatus::Success);
    mr.read(8, &mut got).unwrap();
    assert_eq!(&got, b"in pd2");

    // New memory, twice the size: same keys, another address; the old one is refused.
    mr.rereg_allocate(8192).unwrap();
    assert_eq!((mr.lkey(), mr.rkey(), mr.len()), (lkey, rkey, 8192));
    assert_ne!(mr.addr(), addr);
    assert_eq!(write(&to_pd2, &cqa, &src, b"new memory", mr.addr() + 5000, rkey), WcStatus::Success);
    let mut got = [0u8; 10];
    mr.read(5000, &mut got).unwrap();
    assert_eq!(&got, b"new memory");
    assert_eq!(write(&to_pd2, &cqa, &src, b"old", addr, rkey), WcStatus::RemAccessErr);

    // Memory the program owns: the region now describes it, at its own address.
    let mut mine = vec![0u8; 4096].into_boxed_slice();
    // SAFETY: `mine` outlives the region (dropped after it, below) and is reached only
    // through the region's copies while the peer may write it.
    unsafe { mr.rereg_translation(mine.as_mut_ptr(), mine.len()) }.unwrap();
    assert_eq!((mr.addr(), mr.len(), mr.rkey()), (mine.as_ptr() as u64, 4096, rkey));
    let (to_pd2b, _r3) = pair(&pa, &cqa, &pb2, &cqb);
    assert_eq!(write(&to_pd2b, &cqa, &src, b"the program's", mr.addr() + 100, rkey), WcStatus::Success);
    let mut got = [0u8; 13];
    mr.read(100, &mut got).unwrap();
    assert_eq!(&got, b"the program's");
    // SAFETY: as above: no null or empty translation.
    assert!(unsafe { mr.rereg_translation(std::ptr::null_mut(), 8) }.is_err());

    // Bad calls.
    let elsewhere = a.alloc_pd().unwrap();
    assert!(mr.rereg_pd(&elsewhere).unwrap_err().report().contains("the PD is rnic0's"));
    assert!(matches!(mr.rereg_allocate(0), Err(Error::InvalidArgument { .. })));
    drop(mr);
    drop(mine);
}

#[test]
fn on_demand_regions_pin_nothing_and_advice_checks_every_range() {
    let (a, b) = devices("127.0.153");
    let (pa, cqa) = (a.alloc_pd().unwrap(), a.create_cq(16).unwrap());
    let (pb, cqb) = (b.alloc_pd().unwrap(), b.create_cq(16).unwrap());
    let src = pa.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    // The devices pin (DeviceConfig's default): a plain region is pinned, an on-demand
    // one is not, and stays so when given new memory.
    let pinned = pb.allocate_mr(4096, RW).unwrap();
    assert!(pinned.is_pinned() && !pinned.is_on_demand());
    let mut odp = pb.allocate_mr_on_demand(1 << 20, RW).unwrap();
    assert!(odp.is_on_demand() && !odp.is_pinned());
    let (qp, _peer) = pair(&pa, &cqa, &pb, &cqb);
    assert_eq!(write(&qp, &cqa, &src, b"faulted in", odp.addr() + 700_000, odp.rkey()), WcStatus::Success);
    let mut got = [0u8; 10];
    odp.read(700_000, &mut got).unwrap();
    assert_eq!(&got, b"faulted in");
    odp.rereg_allocate(2 << 20).unwrap();
    assert!(odp.is_on_demand() && !odp.is_pinned());

    // Advice: prefetch for reading and writing, no-fault; every SGE checked first.
    pb.advise_mr(Advice::Prefetch, &[odp.sge(0, 1 << 20), pinned.sge(0, 4096)]).unwrap();
    pb.advise_mr(Advice::PrefetchWrite, &[odp.sge(4096, 8192)]).unwrap();
    pb.advise_mr(Advice::PrefetchNoFault, &[odp.sge(0, 16)]).unwrap();
    let read_only = pb.allocate_mr_on_demand(4096, AccessFlags::empty()).unwrap();
    let e = pb.advise_mr(Advice::PrefetchWrite, &[odp.sge(0, 8), read_only.sge(0, 8)]).unwrap_err().report();
    assert!(e.starts_with("advise memory region: SGE 1:"), "{e}");
    let e = pb.advise_mr(Advice::Prefetch, &[odp.sge((2 << 20) - 4, 8)]).unwrap_err().report();
    assert!(e.contains("SGE 0"), "{e}");
    let other_pd = b.alloc_pd().unwrap();
    let e = other_pd.advise_mr(Advice::Prefetch, &[odp.sge(0, 8)]).unwrap_err().report();
    assert!(e.contains("SGE 0"), "{e}");
    assert!(pb.advise_mr(Advice::Prefetch, &[]).unwrap_err().report().contains("no SGE"));
}

#[test]
fn an_implicit_region_reaches_mapped_memory_and_refuses_the_rest() {
    let (a, b) = devices("127.0.154");
    let (pa, cqa) = (a.alloc_pd().unwrap(), a.create_cq(16).unwrap());
    let (pb, cqb) = (b.alloc_pd().unwrap(), b.create_cq(16).unwrap());
    let src = pa.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let all = pb.register_implicit_mr(RW).unwrap();
    assert!(all.is_implicit() && all.is_on_demand());
    assert_eq!((all.addr(), all.len()), (0, usize::MAX));
    assert!(all.to_vec().is_empty());
    // SAFETY: nothing writes the implicit region while the slice lives (it is empty).
    assert!(unsafe { all.as_slice() }.is_empty());

    // Memory the program has, never registered by itself: the peer writes it through the
    // implicit region's key, at its own address.
    let target = vec![0u8; 64].into_boxed_slice();
    let at = target.as_ptr() as u64;
    let (qp, _peer) = pair(&pa, &cqa, &pb, &cqb);
    assert_eq!(write(&qp, &cqa, &src, b"anywhere mapped", at + 8, all.rkey()), WcStatus::Success);
    let mut got = [0u8; 15];
    all.read(at as usize + 8, &mut got).unwrap();
    assert_eq!(&got, b"anywhere mapped");
    // Page 0 is not mapped: the kernel refuses the write, the peer's WRITE is NAKed.
    assert_eq!(write(&qp, &cqa, &src, b"nowhere", 16, all.rkey()), WcStatus::RemOpErr);
    assert!(matches!(all.read(16, &mut got), Err(Error::MrAccess(_))));
    drop(target);
}

#[test]
fn device_memory_is_copied_registered_zero_based_and_not_freed_under_a_region() {
    let (a, b) = devices("127.0.155");
    let (pa, cqa) = (a.alloc_pd().unwrap(), a.create_cq(16).unwrap());
    let (pb, cqb) = (b.alloc_pd().unwrap(), b.create_cq(16).unwrap());
    let src = pa.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let dm = b.alloc_dm(4096).unwrap();
    assert_eq!(dm.len(), 4096);
    dm.copy_to(64, b"on the card!").unwrap();
    let mut got = [0u8; 12];
    dm.copy_from(64, &mut got).unwrap();
    assert_eq!(&got, b"on the card!");
    // Whole 4-byte words, in bounds; sizes 1..=256 KiB.
    assert!(dm.copy_to(2, b"abcd").unwrap_err().report().contains("whole 4-byte words"));
    assert!(dm.copy_from(4096, &mut got).is_err());
    assert!(b.alloc_dm(0).is_err() && b.alloc_dm((256 << 10) + 1).is_err());

    // A zero-based region over 1 KiB of it from offset 1024: the peer names offsets.
    let mr = pb.register_dm_mr(&dm, 1024, 1024, RW).unwrap();
    assert_eq!((mr.addr(), mr.len()), (0, 1024));
    let (qp, _peer) = pair(&pa, &cqa, &pb, &cqb);
    assert_eq!(write(&qp, &cqa, &src, b"via the region!!", 16, mr.rkey()), WcStatus::Success);
    let mut got = [0u8; 16];
    dm.copy_from(1024 + 16, &mut got).unwrap();
    assert_eq!(&got, b"via the region!!");
    // Past the region's 1 KiB: refused although the memory goes on.
    assert_eq!(write(&qp, &cqa, &src, b"past", 1024, mr.rkey()), WcStatus::RemAccessErr);
    assert!(pb.register_dm_mr(&dm, 4000, 100, RW).is_err());
    assert!(pa.register_dm_mr(&dm, 0, 64, RW).unwrap_err().report().contains("rnic1's"));

    // Not freed while the region registers it; freed once it is gone.
    let busy = dm.free().unwrap_err();
    assert_eq!(busy.holders(), 1);
    assert!(busy.to_string().contains("1 memory region(s)"), "{busy}");
    let dm = busy.into_inner();
    drop(mr);
    dm.free().unwrap();
}
