//! Nothing may drop a work completion: a `wait` that times out leaves the completions it
//! had already taken in the CQ, in order, for the next poll.

use rnic_verbs::*;
use std::time::Duration;

#[test]
fn a_timed_out_wait_gives_back_what_it_took() {
    let a = Context::open_at("rnic0", "127.0.48.1".parse().unwrap()).unwrap();
    let b = Context::open_at("rnic1", "127.0.48.2".parse().unwrap()).unwrap();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let ma = pa.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let mb = pb.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let qa = pa.qp_builder(&ca, &ca).build().unwrap();
    let qb = pb.qp_builder(&cb, &cb).build().unwrap();
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let (qa, qb) = (qa.connect(&eb).unwrap(), qb.connect(&ea).unwrap());
    for i in 0..2 {
        qb.post_recv(&RecvWr { wr_id: 10 + i, sg_list: vec![mb.sge(0, 64)] }).unwrap();
        qa.post_send(&SendWr::send(i, vec![ma.sge(0, 8)])).unwrap();
    }
    // Both SENDs complete; wait for them to be in the CQ.
    let t0 = std::time::Instant::now();
    while ca.len() < 2 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::yield_now();
    }
    assert_eq!(ca.len(), 2);
    assert!(ca.wait(3, Duration::from_millis(300)).is_err(), "only two will ever come");
    assert_eq!(ca.len(), 2, "the two completions wait() took are still there");
    let wcs = ca.wait(2, Duration::from_secs(1)).unwrap();
    assert_eq!((wcs[0].wr_id, wcs[1].wr_id), (0, 1), "in their order");
    assert_eq!(cb.wait(2, Duration::from_secs(1)).unwrap().len(), 2);
    assert!(ca.is_empty() && ca.poll_one().unwrap().is_none());
}

/// RNIC_DEVICES that does not parse is an error naming the bad entry, never the defaults.
#[test]
fn device_lists_parse_strictly() {
    let ok = parse_devices("rnic0=127.0.0.1, rnic7 = ::1").unwrap();
    assert_eq!((ok[1].name.as_str(), ok[1].ip), ("rnic7", "::1".parse().unwrap()));
    for (spec, says) in [
        ("rnic0=notanip", "\"notanip\" is not an IP address"),
        ("=127.0.0.1", "empty device name"),
        ("rnic0=127.0.0.1,rnic0=127.0.0.2", "\"rnic0\" is named twice"),
        ("rnic0=127.0.0.1:4791", "has a port"),
        ("rnic0", "is not name=address"),
        ("rnic0=127.0.0.1,", "is not name=address"),
    ] {
        let e = parse_devices(spec).unwrap_err().to_string();
        assert!(e.starts_with("RNIC_DEVICES: ") && e.contains(says), "{spec}: {e}");
    }
}

/// Rough edges a new user hit: a default completion for poll buffers, `result()`, the PD
/// of a region and of an SRQ, a region of 0 bytes, and a CQ from another device.
#[test]
fn api_polish() {
    let mut buf = [WorkCompletion::default(); 4];
    assert_eq!((buf[0].status, buf[0].wr_id), (WcStatus::Success, 0));
    assert!(buf[0].result().is_ok());
    buf[1].status = WcStatus::RemAccessErr;
    assert_eq!(buf[1].result(), Err(WcStatus::RemAccessErr));

    let a = Context::open_at("rnic0", "127.0.48.5".parse().unwrap()).unwrap();
    let b = Context::open_at("rnic1", "127.0.48.6".parse().unwrap()).unwrap();
    let pd = a.alloc_pd().unwrap();
    let mr = pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let srq = pd.create_srq(16, 1).unwrap();
    assert_eq!(mr.pd().context().name(), "rnic0");
    assert_eq!(srq.pd().context().name(), "rnic0");
    let e = pd.allocate_mr(0, AccessFlags::LOCAL_WRITE).unwrap_err().to_string();
    assert!(e.contains("0 bytes"), "{e}");
    let (cq_a, cq_b) = (a.create_cq(8).unwrap(), b.create_cq(8).unwrap());
    let e = pd.qp_builder(&cq_a, &cq_b).build().unwrap_err().to_string();
    assert!(e.contains("receive CQ belongs to device rnic1"), "{e}");
    assert!(pd.qp_builder(&cq_a, &cq_a).build().is_ok());
}

/// What a program configures is reachable from this crate alone (the README's fault
/// snippet): a device configuration with a fault chain, by opcode.
#[test]
fn configuration_and_fault_rules_come_from_rnic_verbs() {
    let mut f = Faults::new(42);
    f.add(Fault::drop().opcode(Opcode::RC_ACKNOWLEDGE).nth(1));
    let mut cfg = DeviceConfig::new("rnic0", "127.0.48.9".parse().unwrap());
    cfg.faults = Some(FaultHandle::new(f));
    let ctx = Context::open_with(cfg).unwrap();
    assert_eq!(ctx.name(), "rnic0");
    let _: Option<&dyn std::error::Error> = None::<&DeviceError>.map(|e| e as _);
    let _ = |e: EngineError, p: PostError| (e.to_string(), p.to_string());
}
