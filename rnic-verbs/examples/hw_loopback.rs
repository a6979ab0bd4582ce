//! The hardware backend on a real libibverbs device, in one process: two RC QPs on the
//! same device connected to each other (rxe and mlx5 loop back), running SEND (and SEND
//! with immediate, slept on through a completion channel), RDMA WRITE, RDMA READ, FETCH &
//! ADD, COMPARE & SWAP, a shared receive queue, a remote access error and its async
//! event, then UC and UD, checking every byte.
//!
//! Run (needs rdma-core and an RDMA device; see README "The hardware backend"):
//! `cargo run -p rnic-verbs --features hw --example hw_loopback -- rxe0`
//! Prints one `PASS`/`FAIL` line per check and exits 0 only if all passed; a machine
//! without libibverbs or without the device exits 2 with the reason.
use rnic_verbs::hw::{convert, HwContext, HwCq, HwError, HwMr, HwPd, HwQp, HwQpInit};
use rnic_verbs::WcFlags;
use rnic_verbs::{
    AccessFlags, PathMtu, QpAttr, QpCap, QpState, QpType, RecvWr, SendOp, SendWr, UdDest, WcOpcode, WcStatus,
    WorkCompletion, GRH_LEN,
};
use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

struct Report {
    failed: usize,
}

impl Report {
    fn check(&mut self, name: &str, r: Result<String, String>) {
        match r {
            Ok(detail) => println!("PASS {name}: {detail}"),
            Err(why) => {
                self.failed += 1;
                println!("FAIL {name}: {why}");
            }
        }
    }
}

fn e(err: HwError) -> String {
    err.to_string()
}

fn wait1(cq: &HwCq) -> Result<WorkCompletion, String> {
    let mut got = Vec::new();
    cq.wait_into(1, T, &mut got).map_err(|x| format!("{x} ({} completions arrived)", got.len()))?;
    Ok(got[0])
}

fn ok_wc(wc: WorkCompletion, op: WcOpcode) -> Result<WorkCompletion, String> {
    if wc.status != WcStatus::Success || wc.opcode != op {
        return Err(format!("completion {wc}, expected {} SUCCESS", op.name()));
    }
    Ok(wc)
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| u8::try_from(i % 251).unwrap_or(0).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// RESET -> INIT -> RTR -> RTS with the attributes rnic-verbs' `connect` uses, each step
/// masked by the modify-QP table for the QP type.
fn connect(qp: &HwQp, t: QpType, peer_qpn: u32, peer_ip: IpAddr, my_psn: u32, peer_psn: u32) -> Result<(), String> {
    let access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let steps = [
        (QpAttr { state: QpState::Init, access, qkey: 0x1111_1111, ..QpAttr::default() }, QpState::Reset),
        (
            QpAttr {
                state: QpState::Rtr,
                remote_ip: Some(peer_ip),
                path_mtu: PathMtu::Mtu1024.to_ibv(),
                dest_qpn: peer_qpn,
                rq_psn: peer_psn,
                max_dest_rd_atomic: 4,
                min_rnr_timer: 12,
                ..QpAttr::default()
            },
            QpState::Init,
        ),
        (
            QpAttr {
                state: QpState::Rts,
                sq_psn: my_psn,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                max_rd_atomic: 4,
                ..QpAttr::default()
            },
            QpState::Rtr,
        ),
    ];
    for (a, from) in steps {
        let a = a.required_from(t, from).ok_or_else(|| format!("{t}: no transition {from} -> {}", a.state))?;
        qp.modify(&a).map_err(e)?;
    }
    Ok(())
}

fn qp(pd: &HwPd, t: QpType, cq: &HwCq, rcq: &HwCq, srq: Option<&rnic_verbs::hw::HwSrq>) -> Result<HwQp, String> {
    pd.create_qp(&HwQpInit {
        qp_type: t,
        cap: QpCap { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 64 },
        sq_sig_all: false,
        send_cq: cq.clone(),
        recv_cq: rcq.clone(),
        srq: srq.cloned(),
        xrcd: None,
    })
    .map_err(e)
}

fn run(dev: &str, rep: &mut Report) -> Result<(), String> {
    let ctx = HwContext::open(dev).map_err(e)?;
    let attr = ctx.query_device().map_err(e)?;
    let port = ctx.query_port(1).map_err(e)?;
    let da = convert::device_attr(&attr);
    let pa = convert::port_attr(&port).map_err(e)?;
    println!(
        "device {dev}: fw {} node_guid {:016x} max_qp {} max_cqe {} atomic {}; port 1 {} {} active_mtu {} gid_tbl_len {}",
        da.fw_ver,
        da.node_guid,
        da.max_qp,
        da.max_cqe,
        da.atomic_cap,
        pa.state,
        pa.link_layer,
        pa.active_mtu.bytes(),
        pa.gid_tbl_len
    );
    let gids = ctx.gids(1, 8).map_err(e)?;
    for g in &gids {
        println!("  GID[{}] {} type {:?}", g.index, convert::gid_from_ibv(g.gid), g.gid_type);
    }
    let me = gids.iter().map(|g| g.ip()).find(IpAddr::is_ipv4).ok_or("no IPv4 GID on port 1")?;
    println!("  loopback to {me} (source GID index {})", ctx.gid_index_for(1, me).map_err(e)?);

    let pd = ctx.alloc_pd().map_err(e)?;
    let chan = ctx.create_comp_channel().map_err(e)?;
    let cq_a = ctx.create_cq(64, None).map_err(e)?;
    let cq_b = ctx.create_cq(64, Some(&chan)).map_err(e)?;
    let all =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let mr_a: HwMr = pd.allocate_mr(1 << 16, all).map_err(e)?;
    let mr_b: HwMr = pd.allocate_mr(1 << 16, all).map_err(e)?;
    println!("  MR a {mr_a:?}\n  MR b {mr_b:?}");

    // RC pair.
    let a = qp(&pd, QpType::Rc, &cq_a, &cq_a, None)?;
    let b = qp(&pd, QpType::Rc, &cq_b, &cq_b, None)?;
    connect(&a, QpType::Rc, b.qpn(), me, 0x10_0000, 0x20_0000)?;
    connect(&b, QpType::Rc, a.qpn(), me, 0x20_0000, 0x10_0000)?;
    let q = a.query().map_err(e)?;
    rep.check(
        "rc-connect",
        (q.state == QpState::Rts && q.dest_qpn == b.qpn() && q.remote_ip == Some(me))
            .then(|| {
                format!("QP {:#x} <-> {:#x} in RTS, dest {:?}, granted {:?}", a.qpn(), b.qpn(), q.remote_ip, a.cap())
            })
            .ok_or_else(|| format!("query says {q:?}")),
    );

    // SEND: 4000 bytes (4 packets at MTU 1024).
    let data = pattern(4000, 1);
    let r = (|| {
        b.post_recv(&[RecvWr { wr_id: 10, sg_list: vec![mr_b.sge(0, 8192)] }]).map_err(e)?;
        mr_a.write(0, &data).map_err(e)?;
        a.post_send(&[SendWr::send(1, vec![mr_a.sge(0, 4000)])]).map_err(e)?;
        ok_wc(wait1(&cq_a)?, WcOpcode::Send)?;
        let w = ok_wc(wait1(&cq_b)?, WcOpcode::Recv)?;
        let mut got = vec![0; 4000];
        mr_b.read(0, &mut got).map_err(e)?;
        if w.byte_len != 4000 || got != data || w.wr_id != 10 {
            return Err(format!("receive {w}, data equal: {}", got == data));
        }
        Ok(format!("4000 bytes, receive {w}"))
    })();
    rep.check("rc-send", r);

    // SEND with immediate, sleeping on the completion channel.
    let r = (|| {
        b.post_recv(&[RecvWr { wr_id: 11, sg_list: vec![mr_b.sge(8192, 64)] }]).map_err(e)?;
        cq_b.req_notify(false).map_err(e)?;
        mr_a.write(0, b"immediate").map_err(e)?;
        a.post_send(&[SendWr::new(2, SendOp::SendWithImm { imm: 0xdead_beef }, vec![mr_a.sge(0, 9)])]).map_err(e)?;
        let woke = chan.get_cq_event(T).map_err(e)?;
        woke.ack_events(1).map_err(e)?;
        let w = ok_wc(wait1(&cq_b)?, WcOpcode::Recv)?;
        ok_wc(wait1(&cq_a)?, WcOpcode::Send)?;
        if woke.id() != cq_b.id()
            || !w.wc_flags.contains(WcFlags::WITH_IMM)
            || w.imm_data != 0xdead_beef
            || w.byte_len != 9
        {
            return Err(format!("event for CQ {} (b is {}), receive {w}", woke.id(), cq_b.id()));
        }
        Ok(format!("woken by CQ event, receive {w}"))
    })();
    rep.check("rc-send-imm-event", r);

    // RDMA WRITE 10000 bytes into b, then READ them back into a.
    let data = pattern(10_000, 7);
    let r = (|| {
        mr_a.write(0, &data).map_err(e)?;
        let op = SendOp::RdmaWrite { remote_addr: mr_b.addr() + 100, rkey: mr_b.rkey() };
        a.post_send(&[SendWr::new(3, op, vec![mr_a.sge(0, 10_000)])]).map_err(e)?;
        ok_wc(wait1(&cq_a)?, WcOpcode::RdmaWrite)?;
        let mut got = vec![0; 10_000];
        mr_b.read(100, &mut got).map_err(e)?;
        if got != data {
            return Err("target memory differs".into());
        }
        let mut w = [WorkCompletion::new(0, WcStatus::Success, WcOpcode::Send, 0)];
        if cq_b.poll_wc(&mut w).map_err(e)? != 0 {
            return Err(format!("the target saw a completion: {}", w[0]));
        }
        Ok("10000 bytes landed, target CQ empty".into())
    })();
    rep.check("rc-rdma-write", r);
    let r = (|| {
        let op = SendOp::RdmaRead { remote_addr: mr_b.addr() + 100, rkey: mr_b.rkey() };
        a.post_send(&[SendWr::new(4, op, vec![mr_a.sge(20_000, 6000), mr_a.sge(30_000, 4000)])]).map_err(e)?;
        let w = ok_wc(wait1(&cq_a)?, WcOpcode::RdmaRead)?;
        let (mut x, mut y) = (vec![0; 6000], vec![0; 4000]);
        mr_a.read(20_000, &mut x).map_err(e)?;
        mr_a.read(30_000, &mut y).map_err(e)?;
        if [x, y].concat() != data {
            return Err(format!("read data differs ({w})"));
        }
        Ok(format!("10000 bytes into two SGEs, {w}"))
    })();
    rep.check("rc-rdma-read", r);

    // Atomics on b's 8 bytes at offset 40000 (8-byte aligned).
    let r = (|| {
        let target = mr_b.addr() + 40_000;
        mr_b.write(40_000, &100u64.to_ne_bytes()).map_err(e)?;
        a.post_send(&[SendWr::fetch_add(5, mr_a.sge(50_000, 8), target, mr_b.rkey(), 23)]).map_err(e)?;
        ok_wc(wait1(&cq_a)?, WcOpcode::FetchAdd)?;
        a.post_send(&[SendWr::compare_swap(6, mr_a.sge(50_008, 8), target, mr_b.rkey(), 123, 7)]).map_err(e)?;
        ok_wc(wait1(&cq_a)?, WcOpcode::CompSwap)?;
        let rd = |mr: &HwMr, off| -> Result<u64, String> {
            let mut b8 = [0u8; 8];
            mr.read(off, &mut b8).map_err(e)?;
            Ok(u64::from_ne_bytes(b8))
        };
        let (orig1, orig2, now) = (rd(&mr_a, 50_000)?, rd(&mr_a, 50_008)?, rd(&mr_b, 40_000)?);
        if (orig1, orig2, now) != (100, 123, 7) {
            return Err(format!(
                "fetch_add returned {orig1}, cmp_swap returned {orig2}, target {now} (want 100, 123, 7)"
            ));
        }
        Ok("FETCH_ADD 100+23 returned 100, CMP_SWAP(123 -> 7) returned 123, target now 7 (host order)".into())
    })();
    rep.check("rc-atomics", r);

    // SRQ: a second RC pair whose receiver takes WQEs from an SRQ, with the limit event.
    let r = (|| {
        let srq = pd.create_srq(16, 1).map_err(e)?;
        let c = qp(&pd, QpType::Rc, &cq_a, &cq_a, None)?;
        let d = qp(&pd, QpType::Rc, &cq_b, &cq_b, Some(&srq))?;
        connect(&c, QpType::Rc, d.qpn(), me, 0x30_0000, 0x40_0000)?;
        connect(&d, QpType::Rc, c.qpn(), me, 0x40_0000, 0x30_0000)?;
        let wrs: Vec<RecvWr> = (0..4usize)
            .map(|i| RecvWr { wr_id: 100 + i as u64, sg_list: vec![mr_b.sge(50_000 + 256 * i, 256)] })
            .collect();
        srq.post_recv(&wrs).map_err(e)?;
        srq.modify_limit(4).map_err(e)?;
        mr_a.write(0, b"via srq").map_err(e)?;
        c.post_send(&[SendWr::send(7, vec![mr_a.sge(0, 7)])]).map_err(e)?;
        ok_wc(wait1(&cq_a)?, WcOpcode::Send)?;
        let w = ok_wc(wait1(&cq_b)?, WcOpcode::Recv)?;
        let ev = ctx.get_async_event(T).map_err(e)?;
        let mapped = convert::async_event(&ev);
        if w.wr_id != 100
            || w.qp_num != d.qpn()
            || mapped != Some(rnic_verbs::AsyncEvent::SrqLimitReached { srq: srq.id() })
        {
            return Err(format!("receive {w}, event {ev} -> {mapped:?}"));
        }
        Ok(format!("receive {w}; async event {ev}"))
    })();
    rep.check("rc-srq-limit-event", r);

    // A remote access error: WRITE with a wrong rkey.
    let r = (|| {
        let op = SendOp::RdmaWrite { remote_addr: mr_b.addr(), rkey: mr_b.rkey() ^ 0x5a5a_0000 };
        a.post_send(&[SendWr::new(8, op, vec![mr_a.sge(0, 8)])]).map_err(e)?;
        let w = wait1(&cq_a)?;
        if w.status != WcStatus::RemAccessErr {
            return Err(format!("completion {w}, expected REM_ACCESS_ERR"));
        }
        let ev = ctx
            .get_async_event(Duration::from_secs(2))
            .map(|x| x.to_string())
            .unwrap_or_else(|x| format!("none ({x})"));
        let st = a.query().map_err(e)?.state;
        Ok(format!("{w}; requester QP now {st}; async event: {ev}"))
    })();
    rep.check("rc-remote-access-error", r);

    // UC: WRITE with immediate.
    let r = (|| {
        let c = qp(&pd, QpType::Uc, &cq_a, &cq_a, None)?;
        let d = qp(&pd, QpType::Uc, &cq_b, &cq_b, None)?;
        connect(&c, QpType::Uc, d.qpn(), me, 0x50_0000, 0x60_0000)?;
        connect(&d, QpType::Uc, c.qpn(), me, 0x60_0000, 0x50_0000)?;
        d.post_recv(&[RecvWr { wr_id: 20, sg_list: vec![] }]).map_err(e)?;
        let data = pattern(3000, 9);
        mr_a.write(0, &data).map_err(e)?;
        let op = SendOp::RdmaWriteWithImm { remote_addr: mr_b.addr() + 60_000, rkey: mr_b.rkey(), imm: 42 };
        c.post_send(&[SendWr::new(9, op, vec![mr_a.sge(0, 3000)])]).map_err(e)?;
        ok_wc(wait1(&cq_a)?, WcOpcode::RdmaWrite)?;
        let w = ok_wc(wait1(&cq_b)?, WcOpcode::RecvRdmaWithImm)?;
        let mut got = vec![0; 3000];
        mr_b.read(60_000, &mut got).map_err(e)?;
        if got != data || w.imm_data != 42 {
            return Err(format!("receive {w}, data equal: {}", got == data));
        }
        Ok(format!("3000 bytes, receive {w}"))
    })();
    rep.check("uc-write-imm", r);

    // UD: a datagram to the other QP, addressed by GID, with the GRH area.
    let r = (|| {
        let qkey = 0x1111_1111;
        let c = qp(&pd, QpType::Ud, &cq_a, &cq_a, None)?;
        let d = qp(&pd, QpType::Ud, &cq_b, &cq_b, None)?;
        for x in [&c, &d] {
            for (st, from) in
                [(QpState::Init, QpState::Reset), (QpState::Rtr, QpState::Init), (QpState::Rts, QpState::Rtr)]
            {
                let attr = QpAttr { state: st, qkey, sq_psn: 0x77, ..QpAttr::default() }
                    .required_from(QpType::Ud, from)
                    .ok_or("no UD transition")?;
                x.modify(&attr).map_err(e)?;
            }
        }
        d.post_recv(&[RecvWr { wr_id: 30, sg_list: vec![mr_b.sge(0, 40 + 1024)] }]).map_err(e)?;
        let data = pattern(512, 3);
        mr_a.write(0, &data).map_err(e)?;
        let dest = UdDest { dst: me, remote_qpn: d.qpn(), remote_qkey: qkey };
        c.post_send(&[SendWr::send(10, vec![mr_a.sge(0, 512)]).to(dest)]).map_err(e)?;
        ok_wc(wait1(&cq_a)?, WcOpcode::Send)?;
        let w = ok_wc(wait1(&cq_b)?, WcOpcode::Recv)?;
        let mut got = vec![0; 512];
        mr_b.read(40, &mut got).map_err(e)?;
        if got != data
            || w.byte_len != 40 + 512
            || GRH_LEN != 40
            || !w.wc_flags.contains(WcFlags::GRH)
            || w.src_qp != c.qpn()
        {
            return Err(format!("receive {w} src_qp {:#x}, data equal: {}", w.src_qp, got == data));
        }
        Ok(format!("512 bytes after the 40-byte GRH, receive {w} from QP {:#x}", w.src_qp))
    })();
    rep.check("ud-send", r);

    let counters = ctx.counters(1);
    let nz: Vec<String> = counters.iter().filter(|(_, v)| *v != 0).map(|(k, v)| format!("{k}={v}")).collect();
    println!("counters (non-zero of {}): {}", counters.len(), nz.join(" "));
    Ok(())
}

fn main() -> ExitCode {
    let dev = std::env::args().nth(1).unwrap_or_else(|| "rxe0".into());
    match rnic_verbs::hw::devices() {
        Ok(list) => println!(
            "libibverbs devices: {}",
            list.iter().map(|d| format!("{} [{}]", d.name, d.kind)).collect::<Vec<_>>().join(", ")
        ),
        Err(x) => {
            eprintln!("hw_loopback: {x}");
            return ExitCode::from(2);
        }
    }
    let mut rep = Report { failed: 0 };
    if let Err(why) = run(&dev, &mut rep) {
        eprintln!("hw_loopback: {why}");
        return ExitCode::from(2);
    }
    if rep.failed == 0 {
        println!("hw_loopback: all checks passed on {dev}");
        ExitCode::SUCCESS
    } else {
        println!("hw_loopback: {} checks failed on {dev}", rep.failed);
        ExitCode::FAILURE
    }
}
