#![allow(clippy::cast_possible_truncation)]
//! A device on several shards (`DeviceConfig::shards`): its QPs spread over engines on
//! their own sockets and threads, the kernel steering each datagram to its QP's shard.
//! Traffic between QPs on different shards of two devices arrives whole and in order per
//! QP, through one completion queue that every shard feeds; a bad shard count is refused
//! with its reason.

mod common;
use common::net::{attrs, Setup};
use rnic_core::device::{Device, DeviceConfig, DeviceError};
use rnic_core::engine::qp::{QpCap, QpInit};
use rnic_core::mem::MemBlock;
use rnic_core::mr::AccessFlags;
use rnic_core::qp_state::QpType;
use rnic_core::share::member_of;
use rnic_core::wr::{RecvWr, SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion};
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const QPS: usize = 6;
const SENDS: u64 = 300;
const SLOT: usize = 64 << 10;

fn config(name: &str, ip: &str, shards: Option<usize>) -> DeviceConfig {
    DeviceConfig { pin_memory: false, capture: None, shards, ..DeviceConfig::new(name, ip.parse().unwrap()) }
}

/// The names of this process's threads (`/proc/self/task/*/comm`).
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect()
}

fn poll_until(cq: &rnic_core::cq::Cq, want: usize, got: &mut Vec<WorkCompletion>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < want {
        match cq.poll_one() {
            Some(wc) => got.push(wc),
            None if Instant::now() > deadline => panic!("{} of {want} completions after 30 s", got.len()),
            None => std::thread::yield_now(),
        }
    }
}

#[test]
fn qps_on_three_shards_keep_their_order_and_bytes() {
    let ips = ["127.0.84.1", "127.0.84.2"];
    let devs: Vec<Device> =
        ips.iter().enumerate().map(|(i, ip)| Device::open(config(&format!("shd{i}"), ip, Some(3))).unwrap()).collect();
    for d in &devs {
        assert_eq!(d.shards(), 3);
    }
    // A new thread names itself once it runs: wait for that.
    let deadline = Instant::now() + Duration::from_secs(10);
    for want in ["shd0-progress", "shd0-prog1", "shd0-prog2", "shd1-progress", "shd1-prog1", "shd1-prog2"] {
        while !thread_names().iter().any(|n| n == want) {
            assert!(Instant::now() < deadline, "no thread {want}: {:?}", thread_names());
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let cap = QpCap { max_send_wr: 512, max_recv_wr: 512, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 64 };
    struct Side {
        mem: Arc<MemBlock>,
        lkey: u32,
        rkey: u32,
        scq: Arc<rnic_core::cq::Cq>,
        rcq: Arc<rnic_core::cq::Cq>,
        qps: Vec<Arc<rnic_core::engine::qp::QpShared>>,
    }
    let sides: Vec<Side> = devs
        .iter()
        .map(|d| {
            let mem = Arc::new(MemBlock::new(QPS * 2 * SLOT).unwrap());
            let pd = d.alloc_pd();
            let keys = d.reg_mr(pd, mem.clone(), 0, mem.len(), mem.addr(), AccessFlags::REGISTRABLE).unwrap();
            // One send and one receive CQ for every QP: fed by all three shards.
            let (scq, rcq) = (d.create_cq(4096), d.create_cq(4096));
            let qps = (0..QPS)
                .map(|_| d.create_qp(QpInit::new(QpType::Rc, pd, scq.clone(), rcq.clone()).cap(cap)).unwrap())
                .collect();
            Side { mem, lkey: keys.lkey, rkey: keys.rkey, scq, rcq, qps }
        })
        .collect();
    // Spread evenly: each shard's member number holds two of the six QPs.
    for s in &sides {
        let members: Vec<u8> = s.qps.iter().map(|q| member_of(q.qpn.value())).collect();
        let distinct: BTreeSet<u8> = members.iter().copied().collect();
        assert_eq!(distinct.len(), 3, "QPs over three shards: {members:?}");
        for m in &distinct {
            assert_eq!(members.iter().filter(|x| *x == m).count(), 2, "{members:?}");
        }
    }
    // QP k of one device to QP k of the other: pairs cross shards (the second device's
    // QP k sits on a shard of its own numbering).
    let setup = Setup { timeout: 14, ..Setup::default() };
    for me in 0..2 {
        let other = 1 - me;
        let remote_ip: IpAddr = ips[other].parse().unwrap();
        for k in 0..QPS {
            for a in attrs(&setup, me, remote_ip, sides[other].qps[k].qpn.value()) {
                devs[me].modify_qp(sides[me].qps[k].qpn, a).unwrap();
            }
        }
    }
    let (a, b) = (&sides[0], &sides[1]);
    // B: receives, each into its own 8 bytes of QP k's slot.
    for (k, qp) in b.qps.iter().enumerate() {
        for i in 0..SENDS {
            let sge = Sge { addr: b.mem.addr() + (k * 2 * SLOT) as u64 + i * 8, length: 8, lkey: b.lkey };
            devs[1].post_recv(qp, &RecvWr { wr_id: (k as u64) << 32 | i, sg_list: vec![sge] }).unwrap();
        }
    }
    // A: on every QP, a 64 KiB WRITE of its own pattern, then the numbered SENDs,
    // interleaved across QPs so that all shards work at once.
    for (k, qp) in a.qps.iter().enumerate() {
        let pattern: Vec<u8> = (0..SLOT).map(|j| (j * 7 + k * 13) as u8).collect();
        a.mem.write(k * 2 * SLOT + SLOT, &pattern).unwrap();
        let wr = SendWr {
            wr_id: u64::MAX - k as u64,
            op: SendOp::RdmaWrite { remote_addr: b.mem.addr() + (k * 2 * SLOT + SLOT) as u64, rkey: b.rkey },
            sg_list: vec![Sge { addr: a.mem.addr() + (k * 2 * SLOT + SLOT) as u64, length: SLOT as u32, lkey: a.lkey }],
            flags: SendFlags::SIGNALED,
            ud: None,
        };
        devs[0].post_send(qp, &wr).unwrap();
    }
    let mut sent: Vec<WorkCompletion> = Vec::new();
    for i in 0..SENDS {
        for (k, qp) in a.qps.iter().enumerate() {
            let value = (k as u64) << 32 | i;
            let at = k * 2 * SLOT + (i as usize % 64) * 8;
            a.mem.write(at, &value.to_le_bytes()).unwrap();
            let wr = SendWr {
                wr_id: value,
                op: SendOp::Send,
                sg_list: vec![Sge { addr: a.mem.addr() + at as u64, length: 8, lkey: a.lkey }],
                flags: SendFlags::SIGNALED | SendFlags::INLINE,
                ud: None,
            };
            // The send queue holds 512: wait for room every 64 rounds.
            while devs[0].post_send(qp, &wr).is_err() {
                poll_until(&a.scq, sent.len() + 1, &mut sent);
            }
        }
    }
    let total = QPS * (SENDS as usize + 1);
    poll_until(&a.scq, total, &mut sent);
    assert!(
        sent.iter().all(|wc| wc.status == WcStatus::Success),
        "{:?}",
        sent.iter().find(|w| w.status != WcStatus::Success)
    );
    let mut got = Vec::new();
    poll_until(&b.rcq, QPS * SENDS as usize, &mut got);
    // Per QP: the receives completed in the order they were posted and sent, each holding
    // its own number.
    for k in 0..QPS {
        let qpn = b.qps[k].qpn;
        let mine: Vec<&WorkCompletion> = got.iter().filter(|wc| wc.qp_num == qpn.value()).collect();
        assert_eq!(mine.len(), SENDS as usize, "QP {k}");
        for (i, wc) in mine.iter().enumerate() {
            assert_eq!((wc.status, wc.opcode, wc.byte_len), (WcStatus::Success, WcOpcode::Recv, 8));
            assert_eq!(wc.wr_id, (k as u64) << 32 | i as u64, "QP {k}: receive {i} out of order");
            let mut v = [0u8; 8];
            b.mem.read(k * 2 * SLOT + i * 8, &mut v).unwrap();
            assert_eq!(u64::from_le_bytes(v), (k as u64) << 32 | i as u64, "QP {k}: message {i}");
        }
        let mut written = vec![0u8; SLOT];
        b.mem.read(k * 2 * SLOT + SLOT, &mut written).unwrap();
        assert!(written.iter().enumerate().all(|(j, &x)| x == (j * 7 + k * 13) as u8), "QP {k}: WRITE bytes differ");
    }
    for d in &devs {
        assert_eq!(d.counters().get("unknown_qp_pkts"), Some(0));
    }
}

#[test]
fn a_bad_shard_count_is_refused_with_its_reason() {
    let refused = |cfg: DeviceConfig, needle: &str| match Device::open(cfg) {
        Err(DeviceError::Config { why, .. }) => assert!(why.contains(needle), "{why}"),
        other => panic!("expected a configuration error naming {needle:?}, got {other:?}"),
    };
    refused(config("bad0", "127.0.84.9", Some(0)), "at least one");
    refused(config("bad1", "127.0.84.9", Some(65)), "64 members");
    // Raw Ethernet runs one shard (checked before the interface is opened).
    let raw = DeviceConfig { netdev: Some("lo".into()), ..config("bad2", "10.84.0.9", Some(2)) };
    refused(raw, "raw-Ethernet");
    // One shard asked for is one shard.
    assert_eq!(Device::open(config("one0", "127.0.84.10", Some(1))).unwrap().shards(), 1);
}
