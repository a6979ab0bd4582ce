//! The README's Rust snippets, as pasted, in programs that run. Each snippet's lines appear
//! below in order (checked by `every_readme_snippet_is_here_line_for_line`), with the set-up
//! a snippet takes for granted (a peer, its endpoint and keys) written between them; the
//! programs run over real UDP on loopback (rnic0 = 127.0.86.1, rnic1 = 127.0.86.2) and check
//! what each snippet promises.
#![allow(clippy::cast_possible_truncation, unused_variables)]

use rnic_verbs::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

/// The README's ```rust blocks, each as its non-empty, trimmed lines.
fn readme_snippets() -> Vec<Vec<String>> {
    let readme = include_str!("../../README.md");
    let mut out = Vec::new();
    let mut cur: Option<Vec<String>> = None;
    for line in readme.lines() {
        match (&mut cur, line.trim()) {
            (None, "```rust") => cur = Some(Vec::new()),
            (Some(_), "```") => out.push(cur.take().expect("open")),
            (Some(v), l) if !l.is_empty() => v.push(l.to_string()),
            _ => {}
        }
    }
    out
}

#[test]
fn every_readme_snippet_is_here_line_for_line() {
    let me = include_str!("readme.rs");
    // Whitespace runs count as one space (alignment before a comment is the README's own).
    let norm = |l: &str| l.split_whitespace().collect::<Vec<_>>().join(" ");
    let lines: Vec<String> = me.lines().map(norm).collect();
    let snippets = readme_snippets();
    assert!(snippets.len() >= 5, "the README has {} rust snippets", snippets.len());
    for (k, snippet) in snippets.iter().enumerate() {
        // In order, each line after the previous one (set-up lines may come between).
        let mut at = 0;
        for want in snippet {
            let want = &norm(want);
            match lines[at..].iter().position(|l| l == want) {
                Some(i) => at += i + 1,
                None => panic!("README snippet {} line `{want}` is not in tests/readme.rs (in order)", k + 1),
            }
        }
    }
}

fn ok(wcs: &[WorkCompletion]) {
    for wc in wcs {
        assert_eq!(wc.status, WcStatus::Success, "{wc}");
    }
}

/// "A tour": open, register, build, connect, SEND, wait.
#[rustfmt::skip] // The README's lines, exactly as pasted.
fn tour() -> Result<()> {
    // The other side, rnic1: a QP whose endpoint comes "from the other side", a receive posted.
    let peer_ctx = Context::open("rnic1")?;
    let peer_pd = peer_ctx.alloc_pd()?;
    let peer_cq = peer_ctx.create_cq(64)?;
    let peer_mr = peer_pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE)?;
    let peer_prepared = peer_pd.qp_builder(&peer_cq, &peer_cq).build()?;
    let peer_endpoint = peer_prepared.endpoint();

    use rnic_verbs::*;
    let ctx = Context::open("rnic0")?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(64)?;
    let mr = pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE)?;
    let prepared = pd.qp_builder(&cq, &cq).build()?;
    let peer_qp = peer_prepared.connect(&prepared.endpoint())?;
    peer_qp.post_recv(&RecvWr { wr_id: 9, sg_list: vec![peer_mr.sge(0, 4096)] })?;
    let qp = prepared.connect(&peer_endpoint)?;   // peer_endpoint came from the other side
    qp.post_send(&SendWr::send(1, vec![mr.sge(0, 64)]))?;
    let wc = cq.wait(1, std::time::Duration::from_secs(1))?;
    ok(&wc);
    ok(&peer_cq.wait(1, T)?);
    Ok(())
}

/// "Atomics, invalidation, SRQ, sleeping on completions".
#[rustfmt::skip] // The README's lines, exactly as pasted.
fn atomics() -> Result<()> {
    let remote_access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let peer_ctx = Context::open("rnic1")?;
    let peer_pd = peer_ctx.alloc_pd()?;
    let peer_cq = peer_ctx.create_cq(64)?;
    let peer_mr = peer_pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE | remote_access | AccessFlags::FLUSH_GLOBAL)?;
    let peer_buf = peer_pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE)?;
    let ctx = Context::open("rnic0")?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(64)?;
    let mr = pd.allocate_mr(8192, AccessFlags::LOCAL_WRITE)?;
    let my_mr = pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE)?;
    let qa = pd.qp_builder(&cq, &cq).access(remote_access).max_rd_atomic(4).build()?;
    let qb = peer_pd
        .qp_builder(&peer_cq, &peer_cq)
        .access(remote_access | AccessFlags::FLUSH_GLOBAL)
        .max_dest_rd_atomic(4)
        .build()?;
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let qp = qa.connect(&eb)?;
    let peer_qp = qb.connect(&ea)?;
    peer_qp.post_recv(&RecvWr { wr_id: 50, sg_list: vec![peer_buf.sge(0, 64)] })?;
    let peer = peer_mr.remote();
    peer_mr.write(0, &5u64.to_ne_bytes())?;
    let (old, new) = (6u64, 100u64);
    let (remote_addr, rkey, len) = (peer.addr + 64, peer.rkey, 64);

    // FETCH_ADD / COMPARE_SWAP: the original value lands in an 8-byte local SGE (host order);
    // the target must be 8-byte aligned, its region registered with REMOTE_ATOMIC and the
    // peer's QP built with .access(... | AccessFlags::REMOTE_ATOMIC).
    qp.post_send(&SendWr::fetch_add(1, mr.sge(0, 8), peer.addr, peer.rkey, 1))?;
    qp.post_send(&SendWr::compare_swap(2, mr.sge(8, 8), peer.addr, peer.rkey, old, new))?;
    // ATOMIC_WRITE and FLUSH (IBA 1.5) as rxe answers them (FLUSH: QP and region FLUSH_GLOBAL):
    qp.post_send(&SendWr::new(3, SendOp::AtomicWrite { remote_addr, rkey, value: 42 }, vec![]))?;
    qp.post_send(&SendWr::new(4, SendOp::Flush { remote_addr, rkey, len, placement: FLUSH_GLOBAL, whole_region: false }, vec![]))?;
    // Invalidation: the peer's region `rkey` stops working; its receive WC says so.
    qp.post_send(&SendWr::new(5, SendOp::SendWithInv { invalidate_rkey: rkey }, vec![mr.sge(0, 8)]))?;
    qp.post_send(&SendWr::local_inv(6, my_mr.lkey()))?;
    ok(&cq.wait(6, T)?);
    let mut got = [0u8; 8];
    mr.read(0, &mut got)?;
    assert_eq!(u64::from_ne_bytes(got), 5, "FETCH_ADD returned the original value");
    mr.read(8, &mut got)?;
    assert_eq!(u64::from_ne_bytes(got), 6, "COMPARE_SWAP saw 5 + 1");
    peer_mr.read(0, &mut got)?;
    assert_eq!(u64::from_ne_bytes(got), 100, "and swapped in 100");
    peer_mr.read(64, &mut got)?;
    assert_eq!(u64::from_ne_bytes(got), 42, "ATOMIC_WRITE placed its value");
    let inv = peer_cq.wait(1, T)?;
    assert!(inv[0].wc_flags.contains(WcFlags::WITH_INV) && inv[0].invalidated_rkey == peer.rkey, "{}", inv[0]);

    // A shared receive queue for several QPs, with its limit event.
    let srq = pd.create_srq(256, 1)?;
    let qp = pd.qp_builder(&cq, &cq).srq(&srq).build()?;
    srq.post_recv(&RecvWr { wr_id: 7, sg_list: vec![mr.sge(0, 4096)] })?;
    srq.modify_limit(16)?;   // AsyncEvent::SrqLimitReached once fewer than 16 remain
    // Sleep instead of spinning: a completion channel.
    let chan = ctx.create_comp_channel()?;
    let cq = ctx.create_cq_with_channel(64, &chan)?;
    // (Traffic for the new CQ: another QP pair, SENDs into receives the peer posted.)
    let qa = pd.qp_builder(&cq, &cq).build()?;
    let qb = peer_pd.qp_builder(&peer_cq, &peer_cq).build()?;
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let (qa, qb) = (qa.connect(&eb)?, qb.connect(&ea)?);
    for k in 0..2 {
        qb.post_recv(&RecvWr { wr_id: 60 + k, sg_list: vec![peer_buf.sge(0, 64)] })?;
    }
    cq.req_notify(false)?;                       // or true: solicited (and failed) completions only
    qa.post_send(&SendWr::send(70, vec![mr.sge(0, 64)]))?;
    let which = chan.get_cq_event(Duration::from_secs(1))?;
    which.ack_events(1)?;
    ok(&which.wait(1, T)?);
    qa.post_send(&SendWr::send(71, vec![mr.sge(0, 64)]))?;
    let wc = cq.wait_event(&chan, Duration::from_secs(1))?;   // the whole dance in one call
    assert_eq!(wc.wr_id, 71);
    let ev = ctx.get_async_event(Duration::from_secs(1))?;   // QpAccessErr, QpReqErr, QpFatal, CqError, SrqLimitReached, PortActive
    assert_eq!(ev, AsyncEvent::PortActive { port: 1 });
    Ok(())
}

/// "Connections through the Communication Manager": both sides, on two threads.
#[rustfmt::skip] // The README's lines, exactly as pasted.
fn cm() -> Result<()> {
    let server_ip: std::net::IpAddr = "127.0.86.1".parse().unwrap();
    std::thread::scope(|sc| -> Result<()> {
        let passive = sc.spawn(|| -> Result<()> {
            let ctx = Context::open("rnic0")?;
            let pd = ctx.alloc_pd()?;
            let cq = ctx.create_cq(64)?;
            let mr = pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE)?;
            // passive side
            ctx.cm_listen(7174)?;
            if let CmEvent::ConnectRequest(req) = ctx.cm_get_event(Duration::from_secs(10))? {
                let qp = pd.qp_builder(&cq, &cq).build()?;           // in INIT
                qp.qp().post_recv(&RecvWr { wr_id: 1, sg_list: vec![mr.sge(0, 4096)] })?;
                let conn = ctx.cm_accept(&req, qp, b"welcome")?;     // RTR + RTS from the REQ, then the REP
                ok(&cq.wait(1, T)?);
                loop {
                    if let CmEvent::Disconnected { .. } = ctx.cm_get_event(T)? {
                        return Ok(());
                    }
                }
            }
            panic!("no connect request");
        });
        std::thread::sleep(Duration::from_millis(100));
        let ctx = Context::open("rnic1")?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(64)?;
        let mr = pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE)?;
        // active side
        let qp = pd.qp_builder(&cq, &cq).build()?;
        let conn = ctx.cm_connect(qp, server_ip, 7174, b"hello", Duration::from_secs(10))?;   // server_ip: an IpAddr
        conn.qp.post_send(&SendWr::send(1, vec![mr.sge(0, 64)]))?;
        ok(&cq.wait(1, T)?);
        conn.disconnect(b"")?;                                    // CmEvent::Disconnected on both sides
        passive.join().expect("the passive side panicked")
    })
}

/// "Fault injection": the chain on rnic0's transmit side; a WRITE still completes intact.
#[rustfmt::skip] // The README's lines, exactly as pasted.
fn faults() -> Result<()> {
    let ip_a: std::net::IpAddr = "127.0.86.1".parse().unwrap();
    use rnic_verbs::{DeviceConfig, Fault, FaultHandle, Faults, Opcode};
    let mut f = Faults::new(42);                                         // seeded: reproducible
    f.add(Fault::drop().opcode(Opcode::RC_ACKNOWLEDGE).nth(1));          // lose the first ACK
    f.add(Fault::drop().requests().psn_range(0x10, 4).probability(0.5));  // predicates AND together
    f.add(Fault::reorder(1_000_000).from(ip_a).first(3));                // next packet overtakes (hold <= 1 ms)
    f.add(Fault::corrupt().probability(0.01));                           // flip an ICRC-covered bit
    f.add(Fault::duplicate(50_000).opcode(Opcode::RC_RDMA_READ_REQUEST));
    // Real time, on a device's UDP transport (every packet it sends):
    let mut cfg = DeviceConfig::new("rnic0", ip_a);
    cfg.faults = Some(FaultHandle::new(f));        // read stats/log through the handle later
    let ctx = Context::open_with(cfg)?;
    // Virtual time, deterministic: rnic_core::fabric::Fabric::new(latency).with_seed(42)
    // with fab.add_rule(...), fab.inject(...) for hand-made packets, fab.trace for a log.
    let peer_ctx = Context::open("rnic1")?;
    let (pd, peer_pd) = (ctx.alloc_pd().unwrap(), peer_ctx.alloc_pd().unwrap());
    let (cq, peer_cq) = (ctx.create_cq(16)?, peer_ctx.create_cq(16)?);
    let mr = pd.allocate_mr(1 << 16, AccessFlags::LOCAL_WRITE)?;
    let target = peer_pd.allocate_mr(1 << 16, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    let (qa, qb) = (pd.qp_builder(&cq, &cq).build()?, peer_pd.qp_builder(&peer_cq, &peer_cq).build()?);
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let (qa, _qb) = (qa.connect(&eb)?, qb.connect(&ea)?);
    let data: Vec<u8> = (0..1u32 << 16).map(|i| (i % 251) as u8).collect();
    mr.write(0, &data)?;
    let r = target.remote();
    qa.post_send(&SendWr::new(1, SendOp::RdmaWrite { remote_addr: r.addr, rkey: r.rkey }, vec![mr.sge(0, 1 << 16)]))?;
    ok(&cq.wait(1, T)?);
    assert_eq!(target.to_vec(), data);
    Ok(())
}

/// "UC and UD": a datagram to the peer's UD QP.
#[rustfmt::skip] // The README's lines, exactly as pasted.
fn ud() -> Result<()> {
    let peer_ctx = Context::open("rnic1")?;
    let peer_pd = peer_ctx.alloc_pd()?;
    let peer_cq = peer_ctx.create_cq(16)?;
    let peer_mr = peer_pd.allocate_mr(8192, AccessFlags::LOCAL_WRITE)?;
    let peer_prepared = peer_pd.qp_builder(&peer_cq, &peer_cq).qp_type(QpType::Ud).qkey(0x1111_1111).build()?;
    let peer = peer_prepared.endpoint();
    let peer_qp = peer_prepared.activate()?;
    peer_qp.post_recv(&RecvWr { wr_id: 5, sg_list: vec![peer_mr.sge(0, (GRH_LEN + 1024) as u32)] })?;
    let ctx = Context::open("rnic0")?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16)?;
    let mr = pd.allocate_mr(8192, AccessFlags::LOCAL_WRITE)?;
    let qp = pd.qp_builder(&cq, &cq).qp_type(QpType::Ud).qkey(0x1111_1111).build()?.activate()?;
    qp.post_recv(&RecvWr { wr_id: 1, sg_list: vec![mr.sge(0, (GRH_LEN + 1024) as u32)] })?;
    let ah = pd.create_ah(peer.gid)?;                 // peer: the other side's Endpoint
    qp.post_send(&SendWr::send(2, vec![mr.sge(4096, 512)]).to(ah.dest(peer.qpn, 0x1111_1111)))?;
    ok(&cq.wait(1, T)?);
    let got = peer_cq.wait(1, T)?;
    ok(&got);
    assert_eq!(got[0].byte_len as usize, GRH_LEN + 512);
    Ok(())
}

/// "XRC, re-registration, on-demand paging, device memory".
#[rustfmt::skip] // The README's lines, exactly as pasted.
fn memory() -> Result<()> {
    let ctx = Context::open("rnic0")?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(64)?;
    let buf = pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE)?;
    // XRC: one initiator reaches every XRC SRQ of the target's domain, naming one per message.
    let domain = ctx.open_xrcd()?;
    let srq = pd.create_xrc_srq(&domain, &cq, 256, 1)?;        // its receives complete in cq
    let target = pd.qp_builder(&cq, &cq).qp_type(QpType::XrcRecv).xrcd(&domain).build()?;
    let initiator = pd.qp_builder(&cq, &cq).qp_type(QpType::XrcSend).build()?;
    // Both on rnic0: the initiator sends to its own device's target.
    let (ei, et) = (initiator.endpoint(), target.endpoint());
    let (qp, _target) = (initiator.connect(&et)?, target.connect(&ei)?);
    srq.post_recv(&RecvWr { wr_id: 1, sg_list: vec![buf.sge(1024, 1024)] })?;
    buf.write(0, b"to the SRQ")?;
    let wr = SendWr::send(2, vec![buf.sge(0, 10)]);
    qp.post_send(SendWrRef::from(&wr).to_srq(srq.id()))?;      // qp: the connected initiator
    let wcs = cq.wait(2, T)?;
    ok(&wcs);
    let mut got = [0u8; 10];
    buf.read(1024, &mut got)?;
    assert_eq!(&got, b"to the SRQ");
    let other_pd = ctx.alloc_pd()?;
    let mut mr = pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    let rkey = mr.rkey();
    // Re-registration: the keys stay, the PD or the memory changes (on the only handle).
    mr.rereg_pd(&other_pd)?;
    mr.rereg_allocate(8192)?;
    assert_eq!((mr.rkey(), mr.len(), mr.pd().context().name()), (rkey, 8192, "rnic0"));
    // On-demand paging: nothing pinned; an implicit region spans the address space; advice.
    let odp = pd.allocate_mr_on_demand(1 << 20, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    let all = pd.register_implicit_mr(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)?;
    pd.advise_mr(Advice::PrefetchWrite, &[odp.sge(0, 1 << 20)])?;
    assert!(odp.is_on_demand() && !odp.is_pinned() && all.is_implicit());
    // Device memory: copies in whole 4-byte words, a zero-based region over it.
    let dm = ctx.alloc_dm(4096)?;
    dm.copy_to(0, b"on the card!")?;
    let dm_mr = pd.register_dm_mr(&dm, 0, 4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)?;
    assert_eq!(dm_mr.addr(), 0);
    Ok(())
}

#[test]
fn the_readme_snippets_run() {
    // This test binary's only test that opens devices: the variable is set before any does.
    std::env::set_var("RNIC_DEVICES", "rnic0=127.0.86.1,rnic1=127.0.86.2");
    tour().expect("the tour snippet");
    atomics().expect("the atomics snippet");
    cm().expect("the CM snippet");
    faults().expect("the fault-injection snippet");
    ud().expect("the UD snippet");
    memory().expect("the XRC and memory snippet");
}
