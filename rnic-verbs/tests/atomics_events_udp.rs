//! Atomics, invalidation, SRQ, completion channels and async events through the verbs API
//! over real UDP on loopback (addresses 127.0.51.x), and a capture of atomic and
//! invalidate traffic checked by Wireshark's dissector.
#![allow(clippy::cast_possible_truncation)]

use rnic_core::device::DeviceConfig;
use rnic_verbs::*;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);
const ALL: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

fn connect(
    a: &ProtectionDomain,
    acq: &CompletionQueue,
    b: &ProtectionDomain,
    bcq: &CompletionQueue,
    srq: Option<&SharedReceiveQueue>,
) -> (QueuePair, QueuePair) {
    let access = ALL.difference(AccessFlags::LOCAL_WRITE);
    let qa = a.qp_builder(acq, acq).access(access).max_rd_atomic(4).max_dest_rd_atomic(4).build().unwrap();
    let mut bb = b.qp_builder(bcq, bcq).access(access).max_rd_atomic(4).max_dest_rd_atomic(4);
    if let Some(s) = srq {
        bb = bb.srq(s);
    }
    let qb = bb.build().unwrap();
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    (qa.connect(&eb).unwrap(), qb.connect(&ea).unwrap())
}

#[test]
fn atomics_and_invalidation_over_udp_with_a_checked_capture() {
    let pcap = std::env::temp_dir().join(format!("rnic-atomics-{}.pcap", std::process::id()));
    let mut cfg = DeviceConfig::new("rnic0", "127.0.51.1".parse().unwrap());
    cfg.capture = Some(pcap.clone());
    let actx = Context::open_with(cfg).unwrap();
    let bctx = Context::open_at("rnic1", "127.0.51.2".parse().unwrap()).unwrap();
    assert_eq!(actx.query_device().atomic_cap, "ATOMIC_HCA");
    {
        let (apd, bpd) = (actx.alloc_pd().unwrap(), bctx.alloc_pd().unwrap());
        let (acq, bcq) = (actx.create_cq(64).unwrap(), bctx.create_cq(64).unwrap());
        let amr = apd.allocate_mr(4096, ALL).unwrap();
        let bmr = bpd.allocate_mr(4096, ALL).unwrap();
        let (qa, qb) = connect(&apd, &acq, &bpd, &bcq, None);
        let target = bmr.remote();
        bmr.write(0, &100u64.to_ne_bytes()).unwrap();

        qa.post_send(&SendWr::fetch_add(1, amr.sge(0, 8), target.addr, target.rkey, 23)).unwrap();
        qa.post_send(&SendWr::compare_swap(2, amr.sge(8, 8), target.addr, target.rkey, 123, 7)).unwrap();
        qa.post_send(&SendWr::compare_swap(3, amr.sge(16, 8), target.addr, target.rkey, 123, 9)).unwrap();
        let wcs = acq.wait(3, T).unwrap();
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
        assert_eq!(
            wcs.iter().map(|w| w.opcode).collect::<Vec<_>>(),
            [WcOpcode::FetchAdd, WcOpcode::CompSwap, WcOpcode::CompSwap]
        );
        let word = |mr: &MemoryRegion, off: usize| {
            let mut b = [0u8; 8];
            mr.read(off, &mut b).unwrap();
            u64::from_ne_bytes(b)
        };
        assert_eq!((word(&amr, 0), word(&amr, 8), word(&amr, 16)), (100, 123, 7));
        assert_eq!(word(&bmr, 0), 7);

        // SEND with Invalidate of B's region, then a WRITE to it fails.
        qb.post_recv(&RecvWr { wr_id: 9, sg_list: vec![bmr.sge(64, 64)] }).unwrap();
        let inv = SendWr::new(4, SendOp::SendWithInv { invalidate_rkey: target.rkey }, vec![amr.sge(0, 8)]);
        qa.post_send(&inv).unwrap();
        assert_eq!(acq.wait(1, T).unwrap()[0].status, WcStatus::Success);
        let r = bcq.wait(1, T).unwrap()[0];
        assert!(r.wc_flags.contains(WcFlags::WITH_INV) && r.invalidated_rkey == target.rkey, "{r:?}");
        let w = SendWr::new(5, SendOp::RdmaWrite { remote_addr: target.addr, rkey: target.rkey }, vec![amr.sge(0, 8)]);
        qa.post_send(&w).unwrap();
        assert_eq!(acq.wait(1, T).unwrap()[0].status, WcStatus::RemAccessErr);
        drop((qa, qb));
    }
    drop(actx);
    drop(bctx);
    let check = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/vectors/check_pcap.sh"));
    let have_tshark = Command::new("tshark").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    if have_tshark && check.exists() {
        let st = Command::new(&check).arg("-q").arg(&pcap).output().unwrap();
        assert!(st.status.success(), "check_pcap.sh: {}", String::from_utf8_lossy(&st.stdout));
        let txt = Command::new("tshark").arg("-r").arg(&pcap).output().unwrap();
        let txt = String::from_utf8_lossy(&txt.stdout);
        for op in ["Fetch Add", "Compare Swap", "Atomic Acknowledge", "Invalidate"] {
            assert!(txt.contains(op), "{op} missing from the capture:\n{txt}");
        }
    } else {
        eprintln!("tshark or check_pcap.sh missing: capture check skipped");
    }
    let _ = std::fs::remove_file(&pcap);
}

#[test]
fn get_cq_event_wakes_a_sleeping_thread_and_counts_acks() {
    let actx = Context::open_at("rnic0", "127.0.51.3".parse().unwrap()).unwrap();
    let bctx = Context::open_at("rnic1", "127.0.51.4".parse().unwrap()).unwrap();
    let (apd, bpd) = (actx.alloc_pd().unwrap(), bctx.alloc_pd().unwrap());
    let chan = bctx.create_comp_channel().unwrap();
    let acq = actx.create_cq(16).unwrap();
    let bcq = bctx.create_cq_with_channel(16, &chan).unwrap();
    let amr = apd.allocate_mr(4096, ALL).unwrap();
    let bmr = bpd.allocate_mr(4096, ALL).unwrap();
    let (qa, qb) = connect(&apd, &acq, &bpd, &bcq, None);
    qb.post_recv(&RecvWr { wr_id: 1, sg_list: vec![bmr.sge(0, 64)] }).unwrap();
    bcq.req_notify(false).unwrap();
    // Nothing yet: the wait times out.
    assert!(matches!(chan.get_cq_event(Duration::from_millis(50)), Err(Error::EventTimeout(_))));
    let sleeper = {
        let (chan, bcq) = (chan.clone(), bcq.clone());
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let cq = chan.get_cq_event(T).unwrap();
            let wc = cq.poll_one().unwrap().unwrap();
            assert_eq!(bcq.unacked_events(), 1);
            cq.ack_events(1).unwrap();
            (wc, t0.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    qa.post_send(&SendWr::send(2, vec![amr.sge(0, 16)])).unwrap();
    let (wc, slept) = sleeper.join().unwrap();
    assert_eq!((wc.wr_id, wc.status, wc.byte_len), (1, WcStatus::Success, 16));
    assert!(slept >= Duration::from_millis(90), "the thread slept until the completion");
    assert!(matches!(bcq.ack_events(1), Err(Error::AckCqEvents { n: 1, outstanding: 0, .. })));
    // wait_event sleeps through the channel.
    qb.post_recv(&RecvWr { wr_id: 3, sg_list: vec![bmr.sge(0, 64)] }).unwrap();
    qa.post_send(&SendWr::send(4, vec![amr.sge(0, 8)])).unwrap();
    assert_eq!(bcq.wait_event(&chan, T).unwrap().wr_id, 3);
    // A CQ without a channel cannot be armed.
    assert!(acq.req_notify(false).is_err());
    // Destroying with an unacknowledged event is refused.
    qb.post_recv(&RecvWr { wr_id: 5, sg_list: vec![bmr.sge(0, 64)] }).unwrap();
    bcq.req_notify(false).unwrap();
    qa.post_send(&SendWr::send(6, vec![amr.sge(0, 8)])).unwrap();
    let cq = chan.get_cq_event(T).unwrap();
    assert!(matches!(cq.destroy(), Err(Error::UnackedCqEvents { outstanding: 1, .. })));
    bcq.ack_events(1).unwrap();
    bcq.destroy().unwrap();
}

#[test]
fn srq_limit_and_port_events_arrive_on_the_async_queue() {
    let actx = Context::open_at("rnic0", "127.0.51.5".parse().unwrap()).unwrap();
    let bctx = Context::open_at("rnic1", "127.0.51.6".parse().unwrap()).unwrap();
    assert_eq!(bctx.get_async_event(T).unwrap(), AsyncEvent::PortActive { port: 1 });
    let (apd, bpd) = (actx.alloc_pd().unwrap(), bctx.alloc_pd().unwrap());
    let (acq, bcq) = (actx.create_cq(64).unwrap(), bctx.create_cq(64).unwrap());
    let amr = apd.allocate_mr(4096, ALL).unwrap();
    let bmr = bpd.allocate_mr(4096, ALL).unwrap();
    let srq = bpd.create_srq(8, 1).unwrap();
    let (qa1, qb1) = connect(&apd, &acq, &bpd, &bcq, Some(&srq));
    let (qa2, _qb2) = connect(&apd, &acq, &bpd, &bcq, Some(&srq));
    assert!(matches!(
        qb1.post_recv(&RecvWr { wr_id: 0, sg_list: vec![bmr.sge(0, 8)] }),
        Err(Error::PostRecv { source: rnic_core::engine::qp::PostError::HasSrq { .. }, .. })
    ));
    for i in 0..4 {
        srq.post_recv(&RecvWr { wr_id: i, sg_list: vec![bmr.sge(64 * i as usize, 64)] }).unwrap();
    }
    srq.modify_limit(2).unwrap();
    qa1.post_send(&SendWr::send(10, vec![amr.sge(0, 8)])).unwrap();
    qa2.post_send(&SendWr::send(11, vec![amr.sge(0, 8)])).unwrap();
    assert_eq!(bcq.wait(2, T).unwrap().len(), 2);
    assert!(matches!(bctx.get_async_event(Duration::from_millis(50)), Err(Error::EventTimeout(_))));
    qa1.post_send(&SendWr::send(12, vec![amr.sge(0, 8)])).unwrap();
    assert_eq!(bcq.wait(1, T).unwrap()[0].wr_id, 2);
    assert_eq!(bctx.get_async_event(T).unwrap(), AsyncEvent::SrqLimitReached { srq: srq.id() });
    assert_eq!(srq.limit().unwrap(), 0);
    assert_eq!(acq.wait(3, T).unwrap().len(), 3);
}
