#![allow(clippy::cast_possible_truncation, clippy::needless_range_loop)]
//! Congestion and flow control, driven deterministically: fault rules mark packets ECN
//! congestion-experienced (`Fault::mark_ce`) as a congested switch would, and the
//! virtual-time fabric shows what DCQCN does with the marks: the receiver's CNPs (at most
//! one per QP per gap), the sender's rate cut by the documented amount, recovery on the
//! timers, pacing at the rate, two QPs converging to fair shares of one bottleneck. Then
//! the same marks through real sockets (the TOS byte on the wire), and flow control's
//! bound on bytes in flight.

mod common;

use common::net::{FabricNet, Net, Setup, UdpNet, Q};
use common::pattern;
use rnic_core::cc::DcqcnParams;
use rnic_core::counters::Counters;
use rnic_core::cq::Cq;
use rnic_core::engine::qp::QpInit;
use rnic_core::engine::qp::{QpCap, QpShared};
use rnic_core::engine::{Engine, EngineConfig};
use rnic_core::fabric::{Fabric, Verdict, Wire};
use rnic_core::faults::Fault;
use rnic_core::mem::MemBlock;
use rnic_core::mr::{AccessFlags, Mtpt, PdId};
use rnic_core::qp_state::QpType;
use rnic_core::wr::{SendFlags, SendOp, SendWr, WcStatus};
use rnic_wire::Opcode;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

const A: usize = 0;
const B: usize = 1;
const MS: u64 = 1_000_000;

/// DCQCN at a line rate of 100 MB/s (mlx5's other parameters).
fn dcqcn() -> DcqcnParams {
    DcqcnParams::mlx5(100e6)
}

fn write(net: &mut dyn Net, wr_id: u64, len: usize) {
    let (va, rkey) = (net.iova(B), net.keys(B).rkey);
    let sge = net.sge(A, 0, len as u32);
    net.post_send(
        A,
        SendWr {
            wr_id,
            op: SendOp::RdmaWrite { remote_addr: va, rkey },
            sg_list: vec![sge],
            flags: SendFlags::SIGNALED,
            ud: None,
        },
    );
}

fn rate(net: &mut FabricNet, n: usize) -> Option<f64> {
    let qpn = rnic_wire::Qpn::new(net.qpn(n));
    net.fab.engine(n).qp_rate(qpn)
}

#[test]
fn a_marked_request_brings_one_cnp_that_halves_the_senders_rate() {
    let p = dcqcn();
    let mut net = FabricNet::new(Setup { cc: Some(p), ..Setup::default() }, 1);
    net.add_rule(A, Fault::mark_ce().requests().nth(1));
    write(&mut net, 1, 1000);
    let wcs = net.wait(A, Q::Send, 1, 10 * MS);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(net.counter(B, "np_ecn_marked_roce_packets"), 1);
    assert_eq!(net.counter(B, "np_cnp_sent"), 1);
    assert_eq!(net.counter(A, "rp_cnp_handled"), 1);
    // DCQCN: alpha starts at 1, so the first CNP cuts by alpha / 2 = one half.
    let r = rate(&mut net, A).expect("an RC QP that sent has a rate");
    assert!((r - p.max_rate / 2.0).abs() < 1.0, "rate {r}");
}

#[test]
fn cnps_come_at_most_one_per_qp_per_gap() {
    let mut net = FabricNet::new(Setup { cc: Some(dcqcn()), ..Setup::default() }, 1);
    // Every packet of a 64-packet WRITE marked: they arrive within the same few
    // microseconds, so the 4 us gap lets very few CNPs out.
    net.add_rule(A, Fault::mark_ce().requests());
    write(&mut net, 1, 64 * 1024);
    assert_eq!(net.wait(A, Q::Send, 1, 10 * MS)[0].status, WcStatus::Success);
    let (marked, cnps) = (net.counter(B, "np_ecn_marked_roce_packets"), net.counter(B, "np_cnp_sent"));
    assert_eq!(marked, 64);
    assert!((1..=4).contains(&cnps), "{cnps} CNPs for 64 marks within microseconds");
    assert_eq!(net.counter(A, "rp_cnp_handled"), cnps);
}

#[test]
fn the_rate_recovers_on_the_timers_back_to_line_rate() {
    let p = dcqcn();
    let mut net = FabricNet::new(Setup { cc: Some(p), ..Setup::default() }, 1);
    net.add_rule(A, Fault::mark_ce().requests().nth(1));
    write(&mut net, 1, 100);
    net.wait(A, Q::Send, 1, 10 * MS);
    let r0 = rate(&mut net, A).unwrap();
    assert!((r0 - p.max_rate / 2.0).abs() < 1.0);
    // Fast recovery: every 300 us (rpg_time_reset) the rate goes halfway to the target
    // (the rate before the cut): 75%, 87.5%, ... of line rate.
    let cut_at = net.fab.now();
    net.idle(p.time_reset_ns + 50_000 - (net.fab.now() - cut_at));
    let r1 = rate(&mut net, A).unwrap();
    assert!((r1 / p.max_rate - 0.75).abs() < 0.01, "after one timer period: {r1}");
    net.idle(p.time_reset_ns);
    let r2 = rate(&mut net, A).unwrap();
    assert!((r2 / p.max_rate - 0.875).abs() < 0.01, "after two: {r2}");
    // And eventually line rate, where no timer runs any more.
    net.idle(2_000 * MS);
    assert_eq!(rate(&mut net, A), Some(p.max_rate));
    assert_eq!(net.fab.next_event(), None, "a QP at line rate keeps no timers");
}

#[test]
fn a_cut_qp_is_paced_at_its_rate() {
    // No recovery during the test (timer and byte counter out of reach): one CNP, then
    // 2 MiB at exactly half of 100 MB/s.
    let p = DcqcnParams { time_reset_ns: 10_000 * MS, byte_reset: u64::MAX / 4, ..dcqcn() };
    let mut net = FabricNet::new(Setup { cc: Some(p), ..Setup::default() }, 1);
    net.add_rule(A, Fault::mark_ce().requests().nth(1));
    write(&mut net, 1, 100);
    net.wait(A, Q::Send, 1, 10 * MS);
    let len = 2 << 20;
    let data = pattern(3, len);
    net.write(A, 0, &data);
    let t0 = net.fab.now();
    write(&mut net, 2, len);
    assert_eq!(net.wait(A, Q::Send, 1, 1_000 * MS)[0].status, WcStatus::Success);
    let took = (net.fab.now() - t0) as f64 / 1e9;
    // Packets are paced at 50 MB/s counting their headers; the first 64 KiB leave as a burst.
    let expect = (len as f64 * (1.0 + 60.0 / 1024.0) - 65_536.0) / (p.max_rate / 2.0);
    assert!((took / expect - 1.0).abs() < 0.05, "took {took:.4} s, expected {expect:.4} s at the cut rate");
    assert!(net.counter(A, "rp_paced") > 100);
    assert!(net.read(B, 0, len) == data);
}

#[test]
fn loss_cuts_the_rate_without_cnps() {
    // A peer that sends no CNPs (Linux rxe) still gets a sender that backs off: the
    // sequence NAK after a lost packet cuts the rate as a CNP would.
    let p = dcqcn();
    let mut net = FabricNet::new(Setup { cc: Some(p), ..Setup::default() }, 1);
    net.add_rule(A, Fault::drop().opcode(Opcode::RC_RDMA_WRITE_FIRST).nth(1));
    write(&mut net, 1, 5000);
    assert_eq!(net.wait(A, Q::Send, 1, 10 * MS)[0].status, WcStatus::Success);
    assert_eq!((net.counter(A, "rp_loss_handled"), net.counter(A, "rp_cnp_handled")), (1, 0));
    let r = rate(&mut net, A).unwrap();
    assert!((r - p.max_rate / 2.0).abs() < 1.0, "rate {r}");
}

#[test]
fn with_congestion_control_off_marks_are_counted_and_cnps_ignored() {
    let mut net = FabricNet::new(Setup::default(), 1);
    net.add_rule(A, Fault::mark_ce().requests());
    write(&mut net, 1, 4096);
    assert_eq!(net.wait(A, Q::Send, 1, 10 * MS)[0].status, WcStatus::Success);
    assert_eq!(net.counter(B, "np_ecn_marked_roce_packets"), 4);
    assert_eq!(net.counter(B, "np_cnp_sent"), 0);
    assert_eq!(rate(&mut net, A), None);
    // A CNP from the peer (an mlx5 notification point, say) is counted and ignored.
    let mut cnp = vec![0x81, 0, 0xff, 0xff, 0x40, 0, 0, 0, 0, 0, 0, 0];
    cnp[5..8].copy_from_slice(&net.qpn(A).to_be_bytes()[1..]);
    cnp.extend_from_slice(&[0; 16 + 4]);
    net.inject(B, cnp);
    net.idle(MS);
    assert_eq!((net.counter(A, "rp_cnp_ignored"), net.counter(A, "rp_cnp_handled")), (1, 0));
}

#[test]
fn flow_control_bounds_the_bytes_in_flight_to_a_destination() {
    // 16 KiB towards B at most (16 packets at MTU 1024, below the 128-packet window):
    // checked after every event of a 2 MiB transfer, which still completes intact.
    let limit = 16 * 1024;
    let mut net = FabricNet::new(Setup { max_inflight: Some(limit), ..Setup::default() }, 1);
    let len = 2 << 20;
    let data = pattern(9, len);
    net.write(A, 0, &data);
    write(&mut net, 1, len);
    let b_ip = net.ip(B);
    let mut peak = 0;
    let deadline = net.fab.now() + 100 * MS;
    while net.fab.now() < deadline && net.fab.step() {
        let inflight = net.fab.engine(A).inflight_to(b_ip);
        peak = peak.max(inflight);
        assert!(inflight <= limit, "{inflight} bytes in flight, bound {limit}");
    }
    assert_eq!(peak, limit, "the bound is reached, not just respected");
    assert_eq!(net.wait(A, Q::Send, 1, 0)[0].status, WcStatus::Success);
    assert!(net.read(B, 0, len) == data);
    assert!(net.counter(A, "tx_dest_blocked") > 0);
    assert_eq!(net.fab.engine(A).inflight_to(b_ip), 0, "everything acknowledged");
}

/// Node `ip` with `n` RC QPs (MTU 1024) and one registered region, on `fab`.
struct Host {
    ip: IpAddr,
    mtpt: Arc<Mtpt>,
    mem: Arc<MemBlock>,
    keys: rnic_core::mr::MrKeys,
    qps: Vec<Arc<QpShared>>,
    scq: Arc<Cq>,
    idx: usize,
}

fn host(fab: &mut Fabric, ip: &str, n: usize, cc: Option<DcqcnParams>) -> Host {
    host_with(fab, EngineConfig { cc, ..EngineConfig::new(ip.parse().unwrap()) }, n)
}

fn host_with(fab: &mut Fabric, cfg: EngineConfig, n: usize) -> Host {
    let ip = cfg.local_ip;
    let mtpt = Arc::new(Mtpt::new(16));
    let mut e = Engine::new(cfg, mtpt.clone(), Arc::new(Counters::default()));
    let mem = Arc::new(MemBlock::new(1 << 20).unwrap());
    let keys = mtpt.register(PdId(1), mem.clone(), 0, 1 << 20, mem.addr(), AccessFlags::REGISTRABLE).unwrap();
    let (scq, rcq) = (Arc::new(Cq::new(1, 1 << 16)), Arc::new(Cq::new(2, 1 << 16)));
    let cap = QpCap { max_send_wr: 256, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qps = (0..n)
        .map(|_| e.create_qp(QpInit::new(QpType::Rc, PdId(1), scq.clone(), rcq.clone()).cap(cap)).unwrap())
        .collect();
    let idx = fab.add(e);
    Host { ip, mtpt, mem, keys, qps, scq, idx }
}

/// Connects QP k of `a` with QP k of `b` (MTU 1024).
fn connect(fab: &mut Fabric, a: &Host, b: &Host) {
    for k in 0..a.qps.len() {
        let attrs_a = common::net::attrs(&Setup::default(), 0, b.ip, b.qps[k].qpn.value());
        let attrs_b = common::net::attrs(&Setup::default(), 1, a.ip, a.qps[k].qpn.value());
        for x in attrs_a {
            fab.engine(a.idx).modify_qp(0, a.qps[k].qpn, &x).unwrap();
        }
        for x in attrs_b {
            fab.engine(b.idx).modify_qp(0, b.qps[k].qpn, &x).unwrap();
        }
    }
}

fn post_write(fab: &mut Fabric, a: &Host, b: &Host, k: usize, wr_id: u64, len: u32) {
    let wqe = rnic_core::engine::qp::validate_send(
        &a.qps[k],
        &a.mtpt,
        &SendWr {
            wr_id,
            op: SendOp::RdmaWrite { remote_addr: b.mem.addr() + (k as u64 % 16) * 65_536, rkey: b.keys.rkey },
            sg_list: vec![rnic_core::wr::Sge { addr: a.mem.addr(), length: len, lkey: a.keys.lkey }],
            flags: SendFlags::SIGNALED,
            ud: None,
        },
    )
    .unwrap();
    let now = fab.now();
    fab.engine(a.idx).post_send(now, a.qps[k].qpn, wqe);
}

/// 64 QPs to one destination whose in-flight bound is 64 KiB (what one of them alone
/// could have in flight): they take turns, every WRITE completes, nothing deadlocks, and
/// the bound holds.
#[test]
fn many_qps_share_the_in_flight_bound_and_all_complete() {
    let limit = 64 * 1024;
    let mut fab = Fabric::new(2_000).with_seed(3);
    let cfg = |ip: &str| EngineConfig { max_inflight_per_dest: limit, ..EngineConfig::new(ip.parse().unwrap()) };
    let a = host_with(&mut fab, cfg("10.0.0.1"), 64);
    let b = host_with(&mut fab, cfg("10.0.0.2"), 64);
    connect(&mut fab, &a, &b);
    for round in 0..3 {
        for k in 0..64 {
            post_write(&mut fab, &a, &b, k, (round << 8 | k) as u64, 48 * 1024);
        }
    }
    let (mut done, mut peak) = (0, 0);
    while fab.step() {
        peak = peak.max(fab.engine(a.idx).inflight_to(b.ip));
        while let Some(wc) = a.scq.poll_one() {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            done += 1;
        }
        assert!(fab.now() < 1_000 * MS, "stuck with {done} of 192 done");
    }
    assert_eq!(done, 192);
    assert!(peak <= limit, "peak {peak} in flight, bound {limit}");
    assert!(peak >= limit, "the bound was never reached: peak {peak}");
    let c = fab.engine(a.idx).counters().clone();
    assert_eq!(c.completer_retry_err.load(std::sync::atomic::Ordering::Relaxed), 0, "no retransmission needed");
    assert!(c.tx_dest_blocked.load(std::sync::atomic::Ordering::Relaxed) > 64);
}

/// Two QPs from A to B through one bottleneck of capacity C: a queue drained at C that
/// marks CE every packet arriving while it holds more than K bytes (a switch's ECN
/// threshold). Each QP alone could send at twice C. The second QP starts 20 ms after the
/// first, which has the link to itself by then; over the last 200 ms of 500 they share it
/// fairly, keep it busy, and the queue stays bounded.
#[test]
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn two_qps_through_one_bottleneck_converge_to_fair_shares() {
    let c = 50e6; // bytes/s
    let p = DcqcnParams::mlx5(2.0 * c);
    let mut fab = Fabric::new(2_000).with_seed(5);
    let a = host(&mut fab, "10.0.0.1", 2, Some(p));
    let b = host(&mut fab, "10.0.0.2", 2, Some(p));
    connect(&mut fab, &a, &b);
    // The bottleneck, and what each QP got through it after the warm-up.
    let (total, warmup) = (500 * MS, 300 * MS);
    let qpns = [b.qps[0].qpn.value(), b.qps[1].qpn.value()];
    let stats = Arc::new(Mutex::new(([0u64; 2], 0.0f64)));
    {
        let stats = stats.clone();
        let (mut queue, mut last) = (0.0f64, 0u64);
        let k = 20_000.0;
        fab.add_rule(move |now: u64, w: &Wire| {
            let Some(bth) = w.bth().filter(|b| b.opcode.info().is_some_and(|i| i.request)) else {
                return Verdict::Pass;
            };
            queue = (queue - c * (now - last) as f64 / 1e9).max(0.0) + w.data.len() as f64;
            last = now;
            let mut s = stats.lock().unwrap();
            s.1 = s.1.max(queue);
            if now >= warmup {
                if let Some(i) = qpns.iter().position(|&q| q == bth.dest_qp.value()) {
                    s.0[i] += w.data.len() as u64;
                }
            }
            if queue > k {
                Verdict::MarkCe
            } else {
                Verdict::Pass
            }
        });
    }
    // Each QP keeps 8 WRITEs of 16 KiB posted (QP 1 from 20 ms on).
    let mut started = [false; 2];
    let mut next_id = 0;
    while fab.now() < total {
        for k in 0..2 {
            if !started[k] && fab.now() >= k as u64 * 20 * MS {
                started[k] = true;
                for _ in 0..8 {
                    next_id += 1;
                    post_write(&mut fab, &a, &b, k, (k as u64) << 32 | next_id, 16 * 1024);
                }
            }
        }
        while let Some(wc) = a.scq.poll_one() {
            assert_eq!(wc.status, WcStatus::Success);
            next_id += 1;
            let k = (wc.wr_id >> 32) as usize;
            post_write(&mut fab, &a, &b, k, (k as u64) << 32 | next_id, 16 * 1024);
        }
        if !fab.step() {
            break;
        }
    }
    let (bytes, max_queue) = *stats.lock().unwrap();
    let secs = (total - warmup) as f64 / 1e9;
    let ratio = bytes[0] as f64 / bytes[1] as f64;
    let used = (bytes[0] + bytes[1]) as f64 / (c * secs);
    let rates = [0, 1].map(|k| fab.engine(a.idx).qp_rate(a.qps[k].qpn).unwrap());
    eprintln!("bytes {bytes:?} ratio {ratio:.3} utilisation {used:.3} max queue {max_queue:.0} rates {rates:?}");
    assert!((0.75..=1.33).contains(&ratio), "unfair shares: {bytes:?} (ratio {ratio:.3})");
    assert!((0.8..=1.25).contains(&used), "the bottleneck was not kept busy (or was overrun): {used:.3}");
    assert!(max_queue < 2e6, "the queue grew to {max_queue:.0} bytes");
}

/// The same marks through real sockets: the fault rule sets ECN CE in the TOS byte of
/// the datagrams A sends, B's socket reports it (IP_RECVTOS), B's notification point
/// sends CNPs, A's reaction point cuts its rate.
#[test]
fn ce_marks_in_the_ip_header_reach_the_notification_point_over_udp() {
    let mut net = UdpNet::new(Setup::default(), 1, "127.0.83.1", "127.0.83.2");
    if net.device(A).config().congestion_control == rnic_core::device::CongestionControl::Off {
        eprintln!("skipped: RNIC_CC=off in the environment");
        return;
    }
    net.add_rule(A, Fault::mark_ce().requests().first(4));
    write(&mut net, 1, 8 * 1024);
    assert_eq!(net.wait(A, Q::Send, 1, 100 * MS)[0].status, WcStatus::Success);
    // The four marked ones at least (a datagram that waited over 1 ms in B's socket on a
    // busy machine counts too).
    assert!(net.counter(B, "np_ecn_marked_roce_packets") >= 4);
    assert!(net.counter(B, "np_cnp_sent") >= 1);
    assert!(net.until_counter(A, "rp_cnp_handled", 1, 100 * MS));
    let rates = net.device(A).qp_rates();
    assert_eq!(rates.len(), 1);
    assert!(rates[0].lowest < rnic_core::device::CC_LINE_RATE && rates[0].cnps >= 1, "{rates:?}");
}

/// A slow receiver over real sockets: B's progress thread is held up for 30 ms (what a
/// descheduled receiver looks like) while A streams WRITEs. The datagrams that waited in
/// B's socket longer than 1 ms count as congestion-experienced (their kernel receive
/// time against B's clock), B sends CNPs, A's rate falls; once B keeps up again A's rate
/// rises back to line rate, and every byte arrived.
#[test]
fn a_slow_receiver_makes_the_senders_rate_fall_and_rise_back() {
    // A local ACK timeout of about a second: A's rate is cut by B's CNPs, not by a
    // retransmission timeout during the stall.
    let mut net = UdpNet::new(Setup { timeout: 14, ..Setup::default() }, 1, "127.0.83.3", "127.0.83.4");
    if net.device(A).config().congestion_control == rnic_core::device::CongestionControl::Off {
        eprintln!("skipped: RNIC_CC=off in the environment");
        return;
    }
    let len = 1 << 20;
    let data = pattern(11, len);
    net.write(A, 0, &data);
    let line = rnic_core::device::CC_LINE_RATE;
    let dev_a = net.device(A).clone();
    let dev_b = net.device(B).clone();
    // Hold B up, then stream.
    let stall = std::thread::spawn(move || {
        dev_b.cm_call(|_, _| std::thread::sleep(std::time::Duration::from_millis(30))).unwrap();
    });
    std::thread::sleep(std::time::Duration::from_millis(2));
    write(&mut net, 1, len);
    // Watch A's rate (a look a millisecond, not a tight loop: each takes A's lock).
    let t0 = std::time::Instant::now();
    let mut low = line;
    while t0.elapsed() < std::time::Duration::from_secs(5) {
        if let Some(r) = dev_a.qp_rates().first() {
            low = r.lowest;
            if low < line && r.rate >= line {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    stall.join().unwrap();
    assert!(net.counter(B, "np_rx_queue_delayed") > 0, "no datagram waited over 1 ms in B's queue");
    assert!(net.counter(B, "np_cnp_sent") >= 1);
    let (ca, cb) = (net.device(A).counters().clone(), net.device(B).counters().clone());
    let nonzero = |n: usize| -> String {
        let c = if n == A { ca.snapshot() } else { cb.snapshot() };
        c.into_iter().filter(|(_, v)| *v > 0).map(|(k, v)| format!("{k}={v} ")).collect()
    };
    assert!(net.until_counter(A, "rp_cnp_handled", 1, 100 * MS), "A: {}\nB: {}", nonzero(A), nonzero(B));
    assert_eq!(net.counter(A, "rp_loss_handled"), 0, "A: {}", nonzero(A));
    assert!(low < line, "A's rate never fell");
    assert_eq!(net.wait(A, Q::Send, 1, 100 * MS)[0].status, WcStatus::Success);
    assert!(net.read(B, 0, len) == data);
    let t1 = std::time::Instant::now();
    let mut back = 0.0;
    while t1.elapsed() < std::time::Duration::from_secs(2) {
        back = dev_a.qp_rates()[0].rate;
        if back >= line {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(back >= line, "A's rate fell to {low:.0} B/s and is at {back:.0}, not back at line rate");
}

/// A QP that holds a destination's room is destroyed while another waits for it with
/// nothing in flight (and nothing else will arrive: the first QP's packets are lost): the
/// waiter is served at the next timeout call, not left waiting for an ACK that never comes.
#[test]
fn destroying_the_qp_that_holds_the_room_lets_the_waiters_go() {
    let limit = 16 * 1024;
    let mut fab = Fabric::new(2_000).with_seed(9);
    let cfg = |ip: &str| EngineConfig { max_inflight_per_dest: limit, ..EngineConfig::new(ip.parse().unwrap()) };
    let a = host_with(&mut fab, cfg("10.0.0.1"), 2);
    let b = host_with(&mut fab, cfg("10.0.0.2"), 2);
    connect(&mut fab, &a, &b);
    let lost = b.qps[0].qpn.value();
    fab.add_rule(Fault::drop().qpn(lost));
    post_write(&mut fab, &a, &b, 0, 1, 64 * 1024);
    post_write(&mut fab, &a, &b, 1, 2, 4096);
    assert_eq!(fab.engine(a.idx).inflight_to(b.ip), limit, "QP 0 took the room");
    let qpn0 = a.qps[0].qpn;
    fab.engine(a.idx).destroy_qp(qpn0).unwrap();
    assert_eq!(fab.engine(a.idx).inflight_to(b.ip), 0);
    assert_eq!(fab.engine(a.idx).poll_timeout(), Some(0), "the waiter is due now");
    // Well within QP 0's 1 ms retransmission timer (whose stale entry would also wake the
    // engine): the waiter goes at once.
    let deadline = fab.now() + MS / 2;
    fab.run_while(|_| false, deadline);
    let wc = a.scq.poll_one().expect("QP 1's WRITE completed");
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
}
