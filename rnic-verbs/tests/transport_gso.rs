//! The UDP transport's batching, observed from outside: UDP GSO sends, GRO receives, and
//! the ICRC of GSO segments (IPv4 ID = segment index) accepted with and without GRO,
//! and refused for IDs outside the window or corrupted bytes. Addresses 127.0.33.x.
#![allow(clippy::cast_possible_truncation)]

use rnic_core::device::DeviceConfig;
use rnic_verbs::*;
use rnic_wire::icrc::IcrcContext;
use std::net::UdpSocket;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn open(name: &str, ip: &str, gso: bool, gro: bool) -> Context {
    let mut cfg = DeviceConfig::new(name, ip.parse().unwrap());
    cfg.gso = gso;
    cfg.gro = gro;
    cfg.pin_memory = false;
    Context::open_with(cfg).unwrap()
}

fn c(ctx: &Context, name: &str) -> u64 {
    ctx.counter(name).unwrap()
}

/// A 256 KiB WRITE at MTU 1024 between `a` and `b`, checked byte for byte.
fn write_256k(a: &Context, b: &Context) {
    transfer_256k(a, b, false);
}

/// 256 KiB at MTU 1024 between `a` and `b`, checked byte for byte: `a` WRITEs into `b`'s
/// region, or (`read`) `a` READs it (then `b` sends the data, as READ responses).
fn transfer_256k(a: &Context, b: &Context, read: bool) {
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let acc = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let (ma, mb) = (pa.allocate_mr(256 << 10, acc).unwrap(), pb.allocate_mr(256 << 10, acc).unwrap());
    let qa = pa.qp_builder(&ca, &ca).mtu(PathMtu::Mtu1024).build().unwrap();
    let qb = pb.qp_builder(&cb, &cb).mtu(PathMtu::Mtu1024).build().unwrap();
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let (qa, _qb) = (qa.connect(&eb).unwrap(), qb.connect(&ea).unwrap());
    let data: Vec<u8> = (0..256 << 10).map(|i: usize| (i * 7 + i / 4096) as u8).collect();
    let (from, to) = if read { (&mb, &ma) } else { (&ma, &mb) };
    from.write(0, &data).unwrap();
    let r = mb.remote();
    let op = if read {
        SendOp::RdmaRead { remote_addr: r.addr, rkey: r.rkey }
    } else {
        SendOp::RdmaWrite { remote_addr: r.addr, rkey: r.rkey }
    };
    qa.post_send(&SendWr::new(1, op, vec![ma.sge(0, 256 << 10)])).unwrap();
    assert_eq!(ca.wait(1, T).unwrap()[0].status, WcStatus::Success);
    assert!(to.to_vec() == data, "{} data differs", if read { "READ" } else { "WRITE" });
}

#[test]
fn gso_batches_arrive_as_gro_batches_with_segment_ids() {
    let a = open("rnic0", "127.0.33.1", true, true);
    let b = open("rnic1", "127.0.33.2", true, true);
    let t = a.transport().unwrap();
    if !t.gso || !b.transport().unwrap().gro {
        eprintln!("this kernel lacks UDP GSO/GRO: {t:?}; nothing to observe");
        return;
    }
    write_256k(&a, &b);
    assert!(c(&a, "tx_gso_batches") > 0);
    assert!(c(&b, "rx_gro_batches") > 0);
    // Segments after the first of each batch match ID = their index in the batch.
    assert!(c(&b, "icrc_gso_index") > 0);
    assert_eq!((c(&b, "icrc_err"), c(&a, "icrc_err")), (0, 0));
}

/// `RNIC_ZERO_COPY=1` (off by default since copying measured faster): RC payloads go
/// to the kernel straight from registered memory, WRITE data and READ responses alike,
/// and arrive intact with their ICRCs right.
#[test]
fn zero_copy_sends_arrive_intact() {
    let open_zc = |name: &str, ip: &str| {
        let mut cfg = DeviceConfig::new(name, ip.parse().unwrap());
        cfg.zero_copy = true;
        cfg.pin_memory = false;
        Context::open_with(cfg).unwrap()
    };
    let (a, b) = (open_zc("rnic0", "127.0.33.13"), open_zc("rnic1", "127.0.33.14"));
    write_256k(&a, &b);
    // A READ: B's responses are the zero-copy packets now.
    transfer_256k(&a, &b, true);
    assert_eq!((c(&a, "icrc_err"), c(&b, "icrc_err")), (0, 0));
}

#[test]
fn without_gro_segments_match_by_the_id_window() {
    let a = open("rnic0", "127.0.33.3", true, true);
    let b = open("rnic1", "127.0.33.4", true, false);
    if !a.transport().unwrap().gso {
        return;
    }
    write_256k(&a, &b);
    // The receiving kernel splits the GSO batches: every segment arrives alone, its ID
    // (its index in the send) found in the window.
    assert_eq!(c(&b, "rx_gro_batches"), 0);
    assert!(c(&b, "icrc_gso_window") > 0);
    assert_eq!(c(&b, "icrc_err"), 0);
}

#[test]
fn without_gso_every_packet_is_id_zero() {
    let a = open("rnic0", "127.0.33.5", false, true);
    let b = open("rnic1", "127.0.33.6", true, true);
    assert!(!a.transport().unwrap().gso);
    write_256k(&a, &b);
    assert_eq!(c(&a, "tx_gso_batches"), 0);
    assert_eq!((c(&b, "icrc_gso_index"), c(&b, "icrc_gso_window"), c(&b, "icrc_err")), (0, 0, 0));
}

/// Packets built by hand with chosen IPv4 IDs, sent from a plain socket: the ICRC is
/// accepted for IDs below 64 (the GSO window); beyond it only the `SolveUnknown` policy
/// (the default, for rxe) accepts, counted apart; a corrupted byte is refused either way.
#[test]
fn hand_built_packets_with_nonzero_ids() {
    let mut cfg = DeviceConfig::new("rnic1", "127.0.33.8".parse().unwrap());
    cfg.ipv4_id = rnic_wire::icrc::Ipv4IdPolicy::Strict;
    cfg.pin_memory = false;
    let b = Context::open_with(cfg).unwrap();
    let s = UdpSocket::bind("127.0.33.7:0").unwrap();
    let from = s.local_addr().unwrap();
    let to = b.local_addr().unwrap();
    let packet = |ident: u16| {
        // RC SEND ONLY to QP 0x99 (none: counted as unknown after the ICRC check).
        let mut p = vec![0x04, 0, 0xff, 0xff, 0, 0, 0, 0x99, 0, 0, 0, 1, 1, 2, 3, 4, 0, 0, 0, 0];
        let ctx = IcrcContext { ipv4_ident: ident, ..IcrcContext::new(from.ip(), to.ip(), from.port(), to.port()) };
        ctx.fill(&mut p).unwrap();
        p
    };
    let wait_for = |name: &str, n: u64| {
        let until = std::time::Instant::now() + T;
        while c(&b, name) < n {
            assert!(std::time::Instant::now() < until, "{name} never reached {n}");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    s.send_to(&packet(0), to).unwrap();
    wait_for("unknown_qp_pkts", 1);
    s.send_to(&packet(17), to).unwrap();
    wait_for("icrc_gso_window", 1);
    wait_for("unknown_qp_pkts", 2);
    s.send_to(&packet(64), to).unwrap();
    wait_for("icrc_err", 1);
    let mut bad = packet(5);
    bad[13] ^= 0x40;
    s.send_to(&bad, to).unwrap();
    wait_for("icrc_err", 2);
    assert_eq!((c(&b, "icrc_gso_window"), c(&b, "unknown_qp_pkts"), c(&b, "icrc_ipv4_id_solved")), (1, 2, 0));
    // The default policy solves for an ID beyond the window, and counts it.
    let d = open("rnic2", "127.0.33.9", true, true);
    let to = d.local_addr().unwrap();
    let packet = |ident: u16| {
        let mut p = vec![0x04, 0, 0xff, 0xff, 0, 0, 0, 0x99, 0, 0, 0, 1, 1, 2, 3, 4, 0, 0, 0, 0];
        let ctx = IcrcContext { ipv4_ident: ident, ..IcrcContext::new(from.ip(), to.ip(), from.port(), to.port()) };
        ctx.fill(&mut p).unwrap();
        p
    };
    s.send_to(&packet(5), to).unwrap();
    s.send_to(&packet(0x4d2), to).unwrap();
    let until = std::time::Instant::now() + T;
    while c(&d, "unknown_qp_pkts") < 2 {
        assert!(std::time::Instant::now() < until, "packets not accepted");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!((c(&d, "icrc_gso_window"), c(&d, "icrc_ipv4_id_solved"), c(&d, "icrc_err")), (1, 1, 0));
}

/// An application that drives the device itself (`Context::progress`) while the progress
/// thread sleeps at once (spin 0): SENDs go through, and control calls made afterwards
/// (which need the progress thread) still get their answer: no wake-up is lost to a
/// round run on the application's thread.
#[test]
fn application_driven_progress_loses_no_wakeup() {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mk = |name: &str, ip: &str| {
            let mut cfg = DeviceConfig::new(name, ip.parse().unwrap());
            cfg.spin = Duration::ZERO;
            cfg.pin_memory = false;
            Context::open_with(cfg).unwrap()
        };
        let (a, b) = (mk("rnic0", "127.0.33.11"), mk("rnic1", "127.0.33.12"));
        let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let (ca, cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
        let (ma, mb) = (
            pa.allocate_mr(64, AccessFlags::LOCAL_WRITE).unwrap(),
            pb.allocate_mr(64, AccessFlags::LOCAL_WRITE).unwrap(),
        );
        let qa = pa.qp_builder(&ca, &ca).build().unwrap();
        let qb = pb.qp_builder(&cb, &cb).build().unwrap();
        let (ea, eb) = (qa.endpoint(), qb.endpoint());
        let (qa, qb) = (qa.connect(&eb).unwrap(), qb.connect(&ea).unwrap());
        for i in 0..200u64 {
            ma.write(0, &i.to_le_bytes()).unwrap();
            qb.post_recv(&RecvWr { wr_id: i, sg_list: vec![mb.sge(0, 8)] }).unwrap();
            qa.post_send(&SendWr::send(i, vec![ma.sge(0, 8)])).unwrap();
            let until = std::time::Instant::now() + T;
            let (mut sent, mut got) = (false, false);
            while !(sent && got) {
                assert!(std::time::Instant::now() < until, "iteration {i} stuck");
                a.progress();
                b.progress();
                sent |= ca.poll_one().unwrap().is_some_and(|w| w.status == WcStatus::Success);
                got |= cb.poll_one().unwrap().is_some_and(|w| w.status == WcStatus::Success && w.wr_id == i);
            }
            let mut v = [0u8; 8];
            mb.read(0, &mut v).unwrap();
            assert_eq!(u64::from_le_bytes(v), i);
        }
        // Control calls need the (sleeping) progress thread.
        assert_eq!(qa.query().unwrap().state, QpState::Rts);
        drop((qa, qb));
        done_tx.send(()).unwrap();
    });
    done_rx.recv_timeout(Duration::from_secs(60)).expect("a control call never got its answer");
}
