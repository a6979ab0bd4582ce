//! The engine alone, without sockets or threads: what the protocol costs per message.
//! Two engines with one connected RC QP each hand their packets to each other directly
//! (the ICRC is the transport's, measured separately below). Each measurement is a whole
//! exchange, both sides' work: the post, the packets built, the responder's checks and
//! placement, the ACK, the completion.
//!
//! `cargo bench -p rnic-core --bench engine`. Instruction counts under
//! `valgrind --tool=callgrind` are repeatable for a given binary; wall-clock figures are
//! criterion's, so compare them within one run.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rnic_core::counters::Counters;
use rnic_core::cq::Cq;
use rnic_core::engine::qp::QpInit;
use rnic_core::engine::qp::{validate_recv, validate_send, QpAttr, QpCap, QpShared};
use rnic_core::engine::{Engine, EngineConfig, TxPacket};
use rnic_core::mem::MemBlock;
use rnic_core::mr::{AccessFlags, MrKeys, Mtpt, PdId};
use rnic_core::qp_state::{QpState, QpType};
use rnic_core::wr::{RecvWr, SendFlags, SendOp, SendWr, Sge};
use rnic_wire::icrc::IcrcContext;
use std::hint::black_box;
use std::net::IpAddr;
use std::sync::Arc;

const MEM: usize = 1 << 20;

struct Side {
    ip: IpAddr,
    engine: Engine,
    mtpt: Arc<Mtpt>,
    mem: Arc<MemBlock>,
    keys: MrKeys,
    scq: Arc<Cq>,
    rcq: Arc<Cq>,
    qp: Arc<QpShared>,
}

fn side(ip: &str, zero_copy: bool) -> Side {
    let ip: IpAddr = ip.parse().expect("an address");
    let mtpt = Arc::new(Mtpt::new(16));
    let engine_cfg = EngineConfig { zero_copy, ..EngineConfig::new(ip) };
    let mut engine = Engine::new(engine_cfg, mtpt.clone(), Arc::new(Counters::default()));
    let mem = Arc::new(MemBlock::new(MEM).expect("memory"));
    let keys = mtpt.register(PdId(1), mem.clone(), 0, MEM, mem.addr(), AccessFlags::REGISTRABLE).expect("registered");
    let (scq, rcq) = (Arc::new(Cq::new(1, 1 << 16)), Arc::new(Cq::new(2, 1 << 16)));
    let cap = QpCap { max_send_wr: 1024, max_recv_wr: 1024, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 64 };
    let qp = engine.create_qp(QpInit::new(QpType::Rc, PdId(1), scq.clone(), rcq.clone()).cap(cap)).expect("a QP");
    Side { ip, engine, mtpt, mem, keys, scq, rcq, qp }
}

/// Two sides, connected at path MTU 4096.
fn pair(zero_copy: bool) -> [Side; 2] {
    let mut s = [side("10.0.0.1", zero_copy), side("10.0.0.2", zero_copy)];
    for me in 0..2 {
        let (ip, qpn) = (s[1 - me].ip, s[1 - me].qp.qpn.value());
        let attr = QpAttr {
            access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            remote_ip: Some(ip),
            path_mtu: 5,
            dest_qpn: qpn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            ..QpAttr::default()
        };
        for a in attr.bring_up(QpType::Rc) {
            let qpn = s[me].qp.qpn;
            s[me].engine.modify_qp(0, qpn, &a).expect("modify");
        }
    }
    assert!(s.iter().all(|x| x.engine.query_qp(x.qp.qpn).map(|a| a.state) == Ok(QpState::Rts)));
    s
}

/// Moves everything `from` wants to send into `to`, as whole packets.
fn deliver(s: &mut [Side; 2], from: usize, out: &mut Vec<TxPacket>) -> usize {
    let src = s[from].ip;
    s[from].engine.drain_transmits(out);
    let n = out.len();
    for mut p in out.drain(..) {
        p.make_contiguous();
        s[1 - from].engine.handle_packet(0, src, &p.data);
        s[from].engine.recycle(p.data);
    }
    n
}

fn write_wr(s: &Side, remote: (u64, u32), len: u32) -> SendWr {
    SendWr {
        wr_id: 1,
        op: SendOp::RdmaWrite { remote_addr: remote.0, rkey: remote.1 },
        sg_list: vec![Sge { addr: s.mem.addr(), length: len, lkey: s.keys.lkey }],
        flags: SendFlags::SIGNALED,
        ud: None,
    }
}

/// One RDMA WRITE of `len` bytes, both engines' work: post, packets, placement, ACK,
/// completion.
fn write_round(s: &mut [Side; 2], wr: &SendWr, out: &mut Vec<TxPacket>) {
    let wqe = validate_send(&s[0].qp, &s[0].mtpt, wr).expect("valid");
    let qpn = s[0].qp.qpn;
    s[0].engine.post_send(0, qpn, wqe);
    while deliver(s, 0, out) + deliver(s, 1, out) > 0 {}
    black_box(s[0].scq.poll_one().expect("a completion"));
}

/// One SEND of `len` bytes with its receive posted first.
fn send_round(s: &mut [Side; 2], wr: &SendWr, rwr: &RecvWr, out: &mut Vec<TxPacket>) {
    let rwqe = validate_recv(&s[1].qp, &s[1].mtpt, rwr).expect("valid");
    let qpn_b = s[1].qp.qpn;
    s[1].engine.post_recv(qpn_b, rwqe);
    let wqe = validate_send(&s[0].qp, &s[0].mtpt, wr).expect("valid");
    let qpn = s[0].qp.qpn;
    s[0].engine.post_send(0, qpn, wqe);
    while deliver(s, 0, out) + deliver(s, 1, out) > 0 {}
    black_box(s[0].scq.poll_one().expect("a send completion"));
    black_box(s[1].rcq.poll_one().expect("a receive completion"));
}

fn engine(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    for &(len, zero_copy) in &[(8u32, false), (4096, false), (65_536, false), (65_536, true)] {
        let mut s = pair(zero_copy);
        let remote = (s[1].mem.addr(), s[1].keys.rkey);
        let wr = write_wr(&s[0], remote, len);
        let mut out = Vec::new();
        g.throughput(Throughput::Bytes(u64::from(len)));
        let name = format!("rc_write_{len}{}", if zero_copy { "_zero_copy" } else { "" });
        g.bench_function(name, |b| b.iter(|| write_round(&mut s, &wr, &mut out)));
    }
    for &len in &[8u32, 4096] {
        let mut s = pair(false);
        let mut wr = write_wr(&s[0], (0, 0), len);
        wr.op = SendOp::Send;
        let rwr = RecvWr { wr_id: 2, sg_list: vec![Sge { addr: s[1].mem.addr(), length: len, lkey: s[1].keys.lkey }] };
        let mut out = Vec::new();
        g.throughput(Throughput::Bytes(u64::from(len)));
        g.bench_function(format!("rc_send_{len}"), |b| b.iter(|| send_round(&mut s, &wr, &rwr, &mut out)));
    }
    g.finish();

    // Posting alone, on the posting thread: a one-SGE work request checked against the
    // memory table and the QP, its slot reserved, then released (as a completion would).
    let mut g = c.benchmark_group("post");
    let s = pair(false);
    let mut wr = write_wr(&s[0], (s[1].mem.addr(), s[1].keys.rkey), 64);
    wr.op = SendOp::Send;
    let rwr = RecvWr { wr_id: 2, sg_list: vec![Sge { addr: s[0].mem.addr(), length: 64, lkey: s[0].keys.lkey }] };
    g.bench_function("validate_send_64", |b| {
        b.iter(|| {
            let wqe = validate_send(black_box(&s[0].qp), &s[0].mtpt, &wr).expect("valid");
            drop(black_box(wqe));
            s[0].qp.sq_outstanding.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        })
    });
    g.bench_function("validate_recv_64", |b| {
        b.iter(|| {
            let wqe = validate_recv(black_box(&s[0].qp), &s[0].mtpt, &rwr).expect("valid");
            drop(black_box(wqe));
            s[0].qp.rq_outstanding.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        })
    });
    g.finish();

    // The transport's share: the ICRC of a full 4 KiB packet (sender fills, receiver checks).
    let mut g = c.benchmark_group("icrc");
    let ctx = IcrcContext::new("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), 4791, 4791);
    let mut pkt = vec![0u8; 12 + 16 + 4096 + 4];
    pkt[0] = 0x0a; // RC RDMA WRITE ONLY: BTH, RETH, payload, ICRC
    g.throughput(Throughput::Bytes(pkt.len() as u64));
    g.bench_function("fill_4k", |b| {
        b.iter_batched_ref(|| pkt.clone(), |p| ctx.fill(black_box(p)).expect("fits"), BatchSize::SmallInput)
    });
    // What the UDP transport does per 4 KiB packet: through the pseudo-header cache, for
    // a packet with its payload in the packet and for one whose payload stays in
    // registered memory (read in chunks through a stack buffer, never lent as a slice);
    // and, without zero copy, the payload copied into the packet in the CRC's pass
    // (against `fill_4k_cached`, which leaves out the copy).
    let mut s = pair(true);
    let wr = write_wr(&s[0], (s[1].mem.addr(), s[1].keys.rkey), 4096);
    let wqe = validate_send(&s[0].qp, &s[0].mtpt, &wr).expect("valid");
    let qpn = s[0].qp.qpn;
    s[0].engine.post_send(0, qpn, wqe);
    let mut out = Vec::new();
    s[0].engine.drain_transmits(&mut out);
    let split = out.pop().expect("the WRITE's packet");
    assert!(split.payload.is_some(), "4 KiB goes zero copy");
    let mut whole = split.clone();
    whole.make_contiguous();
    let mut cache = rnic_wire::icrc::IcrcCache::new();
    for (name, p) in [("fill_4k_cached", whole), ("fill_4k_cached_zero_copy", split)] {
        let mut p = p;
        g.bench_function(name, |b| b.iter(|| black_box(&mut p).fill_icrc(&mut cache, &ctx).expect("fits")));
    }
    let mut s = pair(false);
    let wr = write_wr(&s[0], (s[1].mem.addr(), s[1].keys.rkey), 4096);
    let wqe = validate_send(&s[0].qp, &s[0].mtpt, &wr).expect("valid");
    s[0].engine.post_send(0, qpn, wqe);
    let mut out = Vec::new();
    s[0].engine.drain_transmits(&mut out);
    let deferred = out.pop().expect("the WRITE's packet");
    assert!(deferred.payload.is_some(), "4 KiB is copied in with its ICRC");
    g.bench_function("fill_4k_cached_copied_in", |b| {
        b.iter_batched_ref(
            || {
                // As the outbox's pooled buffers have: room for the payload.
                let mut p = deferred.clone();
                p.data.reserve(4200);
                p
            },
            |p| black_box(p).fill_icrc(&mut cache, &ctx).expect("fits"),
            BatchSize::SmallInput,
        )
    });
    // The receiving side of a latency hop: an 8-byte WRITE (ID 0) and the ACK behind it
    // in the same GSO send (ID 1, matched through the batch index).
    let mut ver = rnic_core::gso::IdVerifier::new();
    let mut write8 = vec![0u8; 12 + 16 + 8 + 4];
    write8[0] = 0x0a;
    ctx.fill(&mut write8).expect("fits");
    let mut ack = vec![0u8; 12 + 4 + 4];
    ack[0] = 0x11;
    IcrcContext { ipv4_ident: 1, ..ctx }.fill(&mut ack).expect("fits");
    assert!(ver.verify(&ctx, &write8, 0).is_some() && ver.verify(&ctx, &ack, 1).is_some());
    g.bench_function("verify_write8_id0", |b| b.iter(|| ver.verify(black_box(&ctx), black_box(&write8), 0)));
    g.bench_function("verify_ack_id1", |b| b.iter(|| ver.verify(black_box(&ctx), black_box(&ack), 1)));
    // A `send_bw -s 64` packet (SEND ONLY, 64 bytes), fifth in its GRO batch; and its
    // sender's side, through the pseudo-header cache.
    let mut send64 = vec![0u8; 12 + 64 + 4];
    send64[0] = 0x04;
    IcrcContext { ipv4_ident: 5, ..ctx }.fill(&mut send64).expect("fits");
    assert!(ver.verify(&ctx, &send64, 5).is_some());
    g.bench_function("verify_send64_id5", |b| b.iter(|| ver.verify(black_box(&ctx), black_box(&send64), 5)));
    let mut icrc = rnic_wire::icrc::IcrcCache::new();
    g.bench_function("fill_send64_cached", |b| {
        b.iter(|| icrc.fill(black_box(&ctx), black_box(&mut send64)).expect("fits"))
    });
    g.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
