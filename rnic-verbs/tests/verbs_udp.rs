//! The verbs API over real UDP on loopback: transfers, precise errors for bad calls, and
//! CQ overflow handled as IBA says. Each test uses its own 127.0.x.y addresses so tests
//! can run in parallel (every device binds UDP 4791 on its address).
#![allow(clippy::cast_possible_truncation)]

use rnic_verbs::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

struct End {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn end(name: &str, ip: &str, len: usize) -> End {
    let ctx = Context::open_at(name, ip.parse().unwrap()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let mr =
        pd.allocate_mr(len, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ).unwrap();
    End { ctx, pd, cq, mr }
}

fn pair(a: &End, b: &End, mtu: PathMtu) -> (QueuePair, QueuePair) {
    let qa = a.pd.qp_builder(&a.cq, &a.cq).mtu(mtu).max_rd_atomic(4).max_dest_rd_atomic(4).build().unwrap();
    let qb = b.pd.qp_builder(&b.cq, &b.cq).mtu(mtu).max_rd_atomic(4).max_dest_rd_atomic(4).build().unwrap();
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    // Endpoints survive a serde round trip (what an out-of-band exchange does).
    let eb: Endpoint = serde_json::from_str(&serde_json::to_string(&eb).unwrap()).unwrap();
    (qa.connect(&eb).unwrap(), qb.connect(&ea).unwrap())
}

fn bytes(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn every_operation_over_udp_at_the_extreme_mtus() {
    let a = end("rnic0", "127.0.12.1", 4 << 20);
    let b = end("rnic1", "127.0.12.2", 4 << 20);
    for mtu in [PathMtu::Mtu256, PathMtu::Mtu4096] {
        let (qa, qb) = pair(&a, &b, mtu);
        let m = mtu.bytes() as usize;
        for (i, len) in [0, 1, m - 1, m, m + 1, 1 << 20].into_iter().enumerate() {
            let d = bytes(i as u8, len);
            a.mr.write(0, &d).unwrap();
            // SEND from two SGEs into one receive buffer.
            qb.post_recv(&RecvWr { wr_id: 1, sg_list: vec![b.mr.sge(0, len as u32)] }).unwrap();
            let h = (len / 2) as u32;
            qa.post_send(&SendWr::send(2, vec![a.mr.sge(0, h), a.mr.sge(h as usize, len as u32 - h)])).unwrap();
            assert_eq!(a.cq.wait(1, T).unwrap()[0].status, WcStatus::Success);
            let r = b.cq.wait(1, T).unwrap()[0];
            assert_eq!((r.status, r.byte_len as usize), (WcStatus::Success, len));
            let mut got = vec![0; len];
            b.mr.read(0, &mut got).unwrap();
            assert!(got == d, "SEND {len} at {m}");
            // WRITE_WITH_IMM to an offset, then READ it back elsewhere.
            let rm = b.mr.remote();
            qb.post_recv(&RecvWr { wr_id: 3, sg_list: vec![] }).unwrap();
            let op = SendOp::RdmaWriteWithImm { remote_addr: rm.addr + (2 << 20), rkey: rm.rkey, imm: 9 };
            qa.post_send(&SendWr::new(4, op, vec![a.mr.sge(0, len as u32)])).unwrap();
            assert_eq!(a.cq.wait(1, T).unwrap()[0].status, WcStatus::Success);
            assert_eq!(b.cq.wait(1, T).unwrap()[0].opcode, WcOpcode::RecvRdmaWithImm);
            let op = SendOp::RdmaRead { remote_addr: rm.addr + (2 << 20), rkey: rm.rkey };
            qa.post_send(&SendWr::new(5, op, vec![a.mr.sge(2 << 20, len as u32)])).unwrap();
            let w = a.cq.wait(1, T).unwrap()[0];
            assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::RdmaRead));
            let mut back = vec![0; len];
            a.mr.read(2 << 20, &mut back).unwrap();
            assert!(back == d, "WRITE+READ {len} at {m}");
        }
    }
    // Counters are readable and moved.
    assert!(a.ctx.counter("sent_pkts").unwrap() > 8000);
    assert!(b.ctx.counter("rdma_recvs").unwrap() >= 12);
    assert_eq!(a.ctx.counter("icrc_err"), Some(0));
}

#[test]
fn bad_calls_return_errors_naming_what_was_wrong() {
    let a = end("rnic0", "127.0.13.1", 1 << 16);
    let other_pd = a.ctx.alloc_pd().unwrap();
    let foreign = other_pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let prepared = a.pd.qp_builder(&a.cq, &a.cq).cap(QpCap { max_send_wr: 2, ..QpCap::default() }).build().unwrap();
    // Posting a send in INIT.
    let e = prepared.qp().post_send(&SendWr::send(1, vec![a.mr.sge(0, 8)])).unwrap_err();
    assert!(e.report().contains("state Init"), "{e}");
    // A bad transition through the escape hatch.
    let bad = QpAttr { mask: QpAttrMask::STATE, state: QpState::Rts, ..QpAttr::default() };
    let e = prepared.qp().modify(&bad).unwrap_err();
    assert!(matches!(e, Error::ModifyQp { .. }), "{e:?}");
    assert!(e.report().contains("INIT->RTS"), "{e}");
    // Connect to a peer that does not exist: nothing will ever be acknowledged.
    let ghost = Endpoint { qpn: 0x11, gid: Gid::from_ip("127.0.13.99".parse().unwrap()), psn: 0 };
    let qp = prepared.connect(&ghost).unwrap();
    // lkey of another PD.
    let e = qp.post_send(&SendWr::send(1, vec![foreign.sge(0, 8)])).unwrap_err();
    assert!(e.report().contains("protection domain"), "{e}");
    // SGE over the region's end.
    let e = qp.post_send(&SendWr::send(1, vec![a.mr.sge(0, 8), a.mr.sge(65530, 7)])).unwrap_err();
    assert!(e.report().starts_with("post send on QP 0x11: SGE 1:"), "{e}");
    // Queue full: two posts fit, the third does not.
    qp.post_send(&SendWr::send(1, vec![a.mr.sge(0, 8)])).unwrap();
    qp.post_send(&SendWr::send(2, vec![a.mr.sge(0, 8)])).unwrap();
    let e = qp.post_send(&SendWr::send(3, vec![a.mr.sge(0, 8)])).unwrap_err();
    assert!(e.report().contains("send queue is full (2"), "{e}");
    // Display says what failed, `source()` why, `report()` both, each once (a chain
    // printer would otherwise print the cause twice).
    let cause = std::error::Error::source(&e).expect("a cause").to_string();
    assert_eq!(e.to_string(), "post send on QP 0x11");
    assert_eq!(e.report(), format!("post send on QP 0x11: {cause}"));
    assert_eq!(rnic_verbs::report(&e), e.report());
    // Unknown device.
    assert!(matches!(Context::open("mlx5_0"), Err(Error::NoSuchDevice { .. })));
}

#[test]
fn cq_overflow_puts_the_qp_in_error_and_raises_async_events() {
    let a = end("rnic0", "127.0.14.1", 1 << 16);
    let b = end("rnic1", "127.0.14.2", 1 << 16);
    let small = b.ctx.create_cq(1).unwrap();
    let qa = a.pd.qp_builder(&a.cq, &a.cq).build().unwrap();
    let qb = b.pd.qp_builder(&b.cq, &small).build().unwrap();
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let qa = qa.connect(&eb).unwrap();
    let qb = qb.connect(&ea).unwrap();
    for i in 0..3 {
        qb.post_recv(&RecvWr { wr_id: i, sg_list: vec![b.mr.sge(0, 64)] }).unwrap();
    }
    for i in 0..3 {
        qa.post_send(&SendWr::send(i, vec![a.mr.sge(0, 16)])).unwrap();
    }
    // The first receive completion fits; the second overflows the 1-entry CQ.
    let deadline = std::time::Instant::now() + T;
    while qb.state() != QpState::Err && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(qb.state(), QpState::Err);
    let mut events = Vec::new();
    while events.len() < 2 && std::time::Instant::now() < deadline {
        match b.ctx.poll_async_event().unwrap() {
            // Raised once when the device opened.
            Some(AsyncEvent::PortActive { .. }) => {}
            Some(e) => events.push(e),
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    assert!(events.contains(&AsyncEvent::CqError { cq: 2 }), "{events:?}");
    assert!(events.contains(&AsyncEvent::QpFatal { qpn: qb.qpn() }), "{events:?}");
    assert_eq!(small.poll_one().unwrap().map(|w| w.wr_id), Some(0));
    assert!(b.ctx.counter("cq_overflow").unwrap() >= 1);
}

/// The defaults `QpBuilder`'s documentation lists are what a connected QP has (and what
/// `cap` defaults to), so the table there cannot drift from the code.
#[test]
fn builder_defaults_are_the_documented_ones() {
    let a = end("rnic0", "127.0.15.1", 1 << 16);
    let b = end("rnic1", "127.0.15.2", 1 << 16);
    let qa = a.pd.qp_builder(&a.cq, &a.cq).build().unwrap();
    let qb = b.pd.qp_builder(&b.cq, &b.cq).build().unwrap();
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let qa = qa.connect(&eb).unwrap();
    let _qb = qb.connect(&ea).unwrap();
    let at = qa.query().unwrap();
    assert_eq!(at.access, AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ);
    assert_eq!(PathMtu::from_ibv(at.path_mtu), Some(PathMtu::Mtu1024));
    assert_eq!((at.timeout, at.retry_cnt, at.rnr_retry, at.min_rnr_timer), (14, 7, 7, 12));
    assert_eq!((at.max_rd_atomic, at.max_dest_rd_atomic), (1, 1));
    assert_eq!(
        QpCap::default(),
        QpCap { max_send_wr: 256, max_recv_wr: 256, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 256 }
    );
    // And the device limits the table compares them with (devinfo's).
    let d = a.ctx.query_device();
    assert_eq!((d.max_qp_wr, d.max_sge, d.max_qp_rd_atom), (16384, 32, 16));
    assert_eq!(a.ctx.query_port().unwrap().active_mtu, PathMtu::Mtu4096);
}

/// Lists of work requests in one call, built from borrowed SGE slices (no `Vec` per WR):
/// all posted in order and completed; a list with a bad WR stops there, says which, and
/// the ones before it still complete.
#[test]
fn lists_of_borrowed_work_requests_post_in_one_call() {
    let a = end("rnic0", "127.0.16.1", 1 << 16);
    let b = end("rnic1", "127.0.16.2", 1 << 16);
    let (qa, qb) = pair(&a, &b, PathMtu::Mtu1024);
    let sges: Vec<Sge> = (0..4).map(|k| b.mr.sge(k * 1024, 1024)).collect();
    let recvs: Vec<RecvWrRef<'_>> =
        sges.iter().enumerate().map(|(k, s)| RecvWrRef { wr_id: k as u64, sg_list: std::slice::from_ref(s) }).collect();
    assert_eq!(qb.post_recv_list(&recvs).unwrap(), 4);
    for k in 0..4u8 {
        a.mr.write(usize::from(k) * 100, &[k + 1; 100]).unwrap();
    }
    let src: Vec<Sge> = (0..4).map(|k| a.mr.sge(k * 100, 100)).collect();
    let flags = SendFlags::SIGNALED;
    let sends: Vec<SendWrRef<'_>> = src
        .iter()
        .enumerate()
        .map(|(k, s)| SendWrRef {
            wr_id: 10 + k as u64,
            op: SendOp::Send,
            sg_list: std::slice::from_ref(s),
            flags,
            ud: None,
            xrc_srqn: None,
        })
        .collect();
    assert_eq!(qa.post_send_list(sends.iter()).unwrap(), 4);
    let wcs = a.cq.wait(4, Duration::from_secs(5)).unwrap();
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        (10..14).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    let got = b.cq.wait(4, Duration::from_secs(5)).unwrap();
    for (k, wc) in got.iter().enumerate() {
        assert_eq!((wc.wr_id, wc.byte_len), (k as u64, 100));
        let mut v = [0u8; 100];
        b.mr.read(k * 1024, &mut v).unwrap();
        assert_eq!(v, [k as u8 + 1; 100]);
    }
    // A list whose third WR names more SGEs than the QP takes: two posted, the error says so.
    let too_many = [a.mr.sge(0, 8); 5];
    let bad = [
        SendWrRef {
            wr_id: 20,
            op: SendOp::RdmaWrite { remote_addr: b.mr.addr(), rkey: b.mr.rkey() },
            sg_list: &src[..1],
            flags,
            ud: None,
            xrc_srqn: None,
        },
        SendWrRef {
            wr_id: 21,
            op: SendOp::RdmaWrite { remote_addr: b.mr.addr(), rkey: b.mr.rkey() },
            sg_list: &src[..1],
            flags,
            ud: None,
            xrc_srqn: None,
        },
        SendWrRef {
            wr_id: 22,
            op: SendOp::RdmaWrite { remote_addr: b.mr.addr(), rkey: b.mr.rkey() },
            sg_list: &too_many,
            flags,
            ud: None,
            xrc_srqn: None,
        },
    ];
    let e = qa.post_send_list(bad).unwrap_err();
    assert!(matches!(e, Error::PostList { index: 2, queue: "send", .. }), "{}", e.report());
    assert!(e.report().contains("work request 2 refused (2 before it posted)"), "{}", e.report());
    let wcs = a.cq.wait(2, Duration::from_secs(5)).unwrap();
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![20, 21]);
}

#[test]
fn a_region_is_reachable_as_a_slice_without_a_copy() {
    let a = end("rnic0", "127.0.17.1", 8192);
    let b = end("rnic1", "127.0.17.2", 8192);
    let (qa, qb) = pair(&a, &b, PathMtu::Mtu1024);
    let mut mine = a.mr.clone();
    let msg = bytes(5, 3000);
    // SAFETY: nothing is posted on this region yet and the peer has not been told its
    // rkey: this handle is the only one touching it.
    unsafe { mine.as_mut_slice()[..msg.len()].copy_from_slice(&msg) };
    assert_eq!(a.mr.to_vec()[..msg.len()], msg[..], "the slice is the region's memory, not a copy");
    qb.post_recv(&RecvWr { wr_id: 1, sg_list: vec![b.mr.sge(100, 4000)] }).unwrap();
    qa.post_send(&SendWr::send(2, vec![a.mr.sge(0, msg.len() as u32)])).unwrap();
    let got = b.cq.wait(1, T).unwrap();
    assert_eq!((got[0].status, got[0].byte_len), (WcStatus::Success, msg.len() as u32));
    // SAFETY: the receive completed and nothing else is posted on or can write b's region.
    let seen = unsafe { &b.mr.as_slice()[100..100 + msg.len()] };
    assert_eq!(seen, &msg[..]);
    assert_eq!(unsafe { b.mr.as_slice() }.len(), b.mr.len());
    a.cq.wait(1, T).unwrap();
}

#[test]
fn devices_say_which_backend_runs_them() {
    let listed = devices().unwrap();
    for name in ["rnic0", "rnic1"] {
        let d = listed.iter().find(|d| d.name == name).unwrap_or_else(|| panic!("{name} listed: {listed:?}"));
        assert_eq!(d.kind, DeviceKind::Emulated);
    }
    assert!(emulated_devices().unwrap().iter().all(|d| d.kind == DeviceKind::Emulated));
    let ctx = Context::open_at("rnic7", "127.0.17.7".parse().unwrap()).unwrap();
    assert_eq!(ctx.kind(), DeviceKind::Emulated);
    assert!(ctx.transport().is_some());
    // A name that is neither configured nor (with the `hw` feature) a libibverbs device.
    let e = Context::open("no-such-rdma-device").unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::NoSuchDevice { .. }), "{e:?}");
    assert!(text.contains("no-such-rdma-device") && text.contains("rnic0=127.0.0.1"), "{text}");
}

/// `MemoryRegion::rereg_access`: a region that loses REMOTE_WRITE NAKs the next WRITE
/// with a remote access error (IBA 9.7.5.2.4: R_Key violation, NAK remote access error)
/// and its memory stays as it was; given the right back, a fresh QP writes again with the
/// same keys.
#[test]
fn a_region_whose_remote_write_is_taken_away_refuses_writes() {
    let a = end("rnic0", "127.0.18.1", 4096);
    let b = end("rnic1", "127.0.18.2", 4096);
    let write = |qa: &QueuePair, id: u64, seed: u8| {
        a.mr.write(0, &bytes(seed, 64)).unwrap();
        let op = SendOp::RdmaWrite { remote_addr: b.mr.addr(), rkey: b.mr.rkey() };
        qa.post_send(&SendWr::new(id, op, vec![a.mr.sge(0, 64)])).unwrap();
        a.cq.wait(1, T).unwrap()[0].status
    };
    let (qa, _qb) = pair(&a, &b, PathMtu::Mtu1024);
    assert_eq!(write(&qa, 1, 1), WcStatus::Success);
    let keys = (b.mr.lkey(), b.mr.rkey());
    b.mr.rereg_access(AccessFlags::LOCAL_WRITE).unwrap();
    assert_eq!(write(&qa, 2, 2), WcStatus::RemAccessErr);
    let mut got = vec![0; 64];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, bytes(1, 64), "the refused WRITE left the memory alone");
    // Checked as registration is: remote write needs local write.
    assert!(b.mr.rereg_access(AccessFlags::REMOTE_WRITE).is_err());
    b.mr.rereg_access(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).unwrap();
    assert_eq!((b.mr.lkey(), b.mr.rkey()), keys, "the keys stay");
    let (qa, _qb) = pair(&a, &b, PathMtu::Mtu1024);
    assert_eq!(write(&qa, 3, 3), WcStatus::Success);
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, bytes(3, 64));
}

/// A region of the caller's memory deregistered while work requests still name it: the
/// device never reaches that memory again (the caller frees it at once), and the work
/// completes in error, as on a NIC that looks the keys up when it executes the work
/// (rxe: `lookup_mr` fails). A receive posted into it: the peer's SEND is NAKed with a
/// remote operational error and the bytes stay as they were. A SEND from it that must be
/// sent again (its first transmission was lost): a local protection error, nothing sent.
#[test]
fn memory_deregistered_under_posted_work_is_never_reached() {
    let ip_a: std::net::IpAddr = "127.0.19.1".parse().unwrap();
    let faults = FaultHandle::new(Faults::new(7));
    let mut cfg = DeviceConfig::new("rnic0", ip_a);
    cfg.faults = Some(faults.clone());
    let ctx = Context::open_with(cfg).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let mr = pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let a = End { ctx, pd, cq, mr };
    let b = end("rnic1", "127.0.19.2", 4096);

    // The receive side.
    let (qa, qb) = pair(&a, &b, PathMtu::Mtu1024);
    let mut inbox = vec![0xeeu8; 4096];
    // SAFETY: `inbox` outlives the region, which is dropped below before it is.
    let region = unsafe { b.pd.register_mr(inbox.as_mut_ptr(), inbox.len(), AccessFlags::LOCAL_WRITE) }.unwrap();
    qb.post_recv(&RecvWr { wr_id: 1, sg_list: vec![region.sge(0, 64)] }).unwrap();
    drop(region);
    a.mr.write(0, &bytes(5, 64)).unwrap();
    qa.post_send(&SendWr::send(2, vec![a.mr.sge(0, 64)])).unwrap();
    assert_eq!(a.cq.wait(1, T).unwrap()[0].status, WcStatus::RemOpErr);
    let r = b.cq.wait(1, T).unwrap()[0];
    assert_eq!(r.wr_id, 1);
    assert_ne!(r.status, WcStatus::Success);
    assert!(inbox.iter().all(|&x| x == 0xee), "the deregistered receive buffer was written");
    drop(inbox);

    // The send side: the SEND's only transmission is lost, its memory deregistered
    // before the retransmission.
    let (qa, qb) = pair(&a, &b, PathMtu::Mtu1024);
    qb.post_recv(&RecvWr { wr_id: 3, sg_list: vec![b.mr.sge(0, 64)] }).unwrap();
    let mut outbox = bytes(9, 4096);
    // SAFETY: as above.
    let region = unsafe { a.pd.register_mr(outbox.as_mut_ptr(), outbox.len(), AccessFlags::LOCAL_WRITE) }.unwrap();
    faults.lock().add(Fault::drop().requests().first(1));
    qa.post_send(&SendWr::send(4, vec![region.sge(0, 64)])).unwrap();
    let deadline = std::time::Instant::now() + T;
    while faults.lock().stats().dropped == 0 {
        assert!(std::time::Instant::now() < deadline, "the SEND never left");
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(region);
    drop(std::mem::take(&mut outbox));
    let w = a.cq.wait(1, T).unwrap()[0];
    assert_eq!((w.wr_id, w.status), (4, WcStatus::LocProtErr));
    // Nothing reached the peer: its receive is flushed when its QP is destroyed, not filled.
    assert!(b.cq.poll_one().unwrap().is_none(), "the peer received the SEND");
    drop(qb);
}

/// Memory windows through the Rust API: a type 2 window bound on B's QP lends A 64 bytes
/// of a region with no remote right of its own; A READs them; the window refuses a WRITE
/// (no write right) and, once B invalidated it (LOCAL_INV), the READ; a bind of a region
/// without MW_BIND completes with MW_BIND_ERR. CQ resize and completion stamps ride along.
#[test]
fn a_memory_window_lends_a_range_and_takes_it_back() {
    let a = end("rnic0", "127.0.20.1", 4096);
    let b = end("rnic1", "127.0.20.2", 4096);
    let region = b.pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND).unwrap();
    region.write(1024, &bytes(7, 64)).unwrap();
    let (qa, qb) = pair(&a, &b, PathMtu::Mtu1024);
    let mw = b.pd.alloc_mw(MwType::Two).unwrap();
    let before = mw.rkey();
    let rkey = mw.bind(&qb, 1, &region, 1024, 64, AccessFlags::REMOTE_READ).unwrap();
    assert_eq!((rkey >> 8, rkey != before, mw.rkey()), (before >> 8, true, rkey), "same index, next key");
    let w = b.cq.wait(1, T).unwrap()[0];
    assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::BindMw));
    a.cq.stamp_completions().unwrap();
    let read = |id, len: u32| {
        let op = SendOp::RdmaRead { remote_addr: region.addr() + 1024, rkey };
        qa.post_send(&SendWr::new(id, op, vec![a.mr.sge(0, len)])).unwrap();
        a.cq.wait(1, T).unwrap()[0]
    };
    let w = read(2, 64);
    assert_eq!(w.status, WcStatus::Success);
    assert!(w.timestamp_ns > 0, "the stamped CQ stamps");
    let mut got = vec![0; 64];
    a.mr.read(0, &mut got).unwrap();
    assert_eq!(got, bytes(7, 64));
    // B takes the loan back; the same READ is now refused.
    qb.post_send(&SendWr::local_inv(3, rkey)).unwrap();
    assert_eq!(b.cq.wait(1, T).unwrap()[0].status, WcStatus::Success);
    assert_eq!(read(4, 64).status, WcStatus::RemAccessErr, "invalidated");
    // A region without MW_BIND cannot be lent.
    let (_qa, qb) = pair(&a, &b, PathMtu::Mtu1024);
    let mw1 = b.pd.alloc_mw(MwType::One).unwrap();
    mw1.bind(&qb, 6, &b.mr, 0, 64, AccessFlags::REMOTE_READ).unwrap();
    assert_eq!(b.cq.wait(1, T).unwrap()[0].status, WcStatus::MwBindErr);
    // Resize: room for at least what waits.
    b.cq.resize(8).unwrap();
    assert!(b.cq.resize(0).is_ok(), "an empty CQ shrinks to one entry");
}
