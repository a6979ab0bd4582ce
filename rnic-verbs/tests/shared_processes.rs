#![allow(clippy::cast_possible_truncation)]
//! One device, many processes: eight processes open the same device (`rnic0`,
//! 127.0.0.1), connect RC QPs all to all and move data with WRITE, READ and SEND for a
//! while, every byte checked; one is killed with SIGKILL halfway. The other seven must
//! finish with every byte right, see the victim's QPs fail as the IBA says (the first
//! error RETRY_EXC_ERR, then flushes) and no other QP fail; afterwards nothing of the
//! device is left on the host (no socket on its port, no Unix name, nothing in /dev/shm).
//!
//! The workers are this test binary run again (`worker`, ignored unless the parent
//! starts it); they talk to the parent over stdin/stdout: each prints its endpoints, the
//! parent hands every worker all of them, waits until all are connected, says go, and
//! collects each one's report. `RNIC_MESH_SECS` sets the run's length (default 8 s; the
//! issue's run is 60).

use rnic_verbs::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Bytes per message: 8 packets at MTU 1024.
const LEN: usize = 8192;
/// Receives kept posted per QP.
const RECVS: usize = 8;
const IP: &str = "127.0.0.1";

/// The bytes `from` sends `to` in its `i`th exchange (WRITE and SEND alike).
fn pattern(from: usize, to: usize, i: u64, out: &mut [u8]) {
    let mut x = (from as u64) << 56 ^ (to as u64) << 48 ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x1234_5678;
    for b in out.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

#[derive(serde::Serialize, serde::Deserialize, Debug)]
struct Hello {
    rank: usize,
    /// The endpoint of this worker's QP for each peer rank.
    eps: BTreeMap<usize, Endpoint>,
    /// Where peers WRITE (slot `peer * LEN`) and READ it back.
    target: RemoteMr,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Default)]
struct Report {
    rank: usize,
    /// Exchanges completed with each peer (WRITE, READ checked, SEND).
    done: BTreeMap<usize, u64>,
    /// SENDs received and checked from each peer.
    received: BTreeMap<usize, u64>,
    /// Peers whose QP failed, with the statuses of the failed completions in order.
    failed: BTreeMap<usize, Vec<String>>,
    /// Bytes that differed (READ back or received).
    bad_bytes: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Write,
    Read,
    Send,
    /// Sent FIN (the last SEND, length 0); waiting for its completion.
    Fin,
    Finished,
    Dead,
}

/// A line to the parent: straight to the process's stdout (the test harness captures
/// `println!`, even with --nocapture in some versions).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("stdout");
    out.flush().expect("stdout");
}

fn wr_id(peer: usize, phase: u64) -> u64 {
    (peer as u64) << 8 | phase
}

/// One worker: run as `shared_processes worker --ignored` with RNIC_MESH_RANK set.
#[test]
#[ignore = "a worker process of eight_processes_share_one_device_and_survive_a_kill"]
fn worker() {
    let Ok(rank) = std::env::var("RNIC_MESH_RANK").map(|r| r.parse::<usize>().expect("rank")) else { return };
    let secs: f64 = std::env::var("RNIC_MESH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(8.0);
    if let Err(e) = run_worker(rank, secs) {
        eprintln!("worker {rank}: {}", e.report());
        std::process::exit(2);
    }
}

fn run_worker(rank: usize, secs: f64) -> Result<()> {
    let procs: usize = std::env::var("RNIC_MESH_PROCS").ok().and_then(|s| s.parse().ok()).unwrap_or(8);
    let ip: IpAddr = IP.parse().expect("address");
    let ctx = Context::open_at("rnic0", ip)?;
    let pd = ctx.alloc_pd()?;
    let scq = ctx.create_cq(4096)?;
    let rcq = ctx.create_cq(4096)?;
    let target =
        pd.allocate_mr(procs * LEN, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ)?;
    // Per peer: the source of WRITEs and SENDs, the READ-back buffer, RECVS receive slots.
    let per = (2 + RECVS) * LEN;
    let local = pd.allocate_mr(procs * per, AccessFlags::LOCAL_WRITE)?;
    let peers: Vec<usize> = (0..procs).filter(|&p| p != rank).collect();
    let mut prepared = BTreeMap::new();
    for &p in &peers {
        let q = pd
            .qp_builder(&scq, &rcq)
            .mtu(PathMtu::Mtu1024)
            .timeout(16)
            .retry_cnt(7)
            .rnr_retry(7)
            .cap(QpCap {
                max_send_wr: 16,
                max_recv_wr: RECVS as u32 + 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            })
            .build()?;
        prepared.insert(p, q);
    }
    let hello =
        Hello { rank, eps: prepared.iter().map(|(&p, q)| (p, q.endpoint())).collect(), target: target.remote() };
    say(&format!("HELLO {}", serde_json::to_string(&hello).expect("json")));
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut others: BTreeMap<usize, Hello> = BTreeMap::new();
    while others.len() < procs {
        let l = lines.next().expect("the parent's list").expect("stdin");
        let h: Hello = serde_json::from_str(l.strip_prefix("HELLO ").expect("HELLO")).expect("hello");
        others.insert(h.rank, h);
    }
    let mut qps = BTreeMap::new();
    for (p, q) in prepared {
        let qp = q.connect(&others[&p].eps[&rank])?;
        for k in 0..RECVS {
            let off = p * per + (2 + k) * LEN;
            qp.post_recv(&RecvWr { wr_id: wr_id(p, 16 + k as u64), sg_list: vec![local.sge(off, LEN as u32)] })?;
        }
        qps.insert(p, qp);
    }
    say("READY");
    assert_eq!(lines.next().expect("go").expect("stdin"), "GO");

    let mut report = Report { rank, ..Report::default() };
    let mut phase: BTreeMap<usize, Phase> = peers.iter().map(|&p| (p, Phase::Write)).collect();
    let mut iter: BTreeMap<usize, u64> = peers.iter().map(|&p| (p, 0)).collect();
    let mut fin_from: BTreeMap<usize, bool> = peers.iter().map(|&p| (p, false)).collect();
    let mut buf = vec![0u8; LEN];
    let mut want = vec![0u8; LEN];
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let give_up = deadline + Duration::from_secs(60);
    // Start every peer's first WRITE.
    let post = |p: usize, ph: Phase, i: u64, qps: &BTreeMap<usize, QueuePair>, buf: &mut [u8]| -> Result<()> {
        let qp = &qps[&p];
        let src = p * per;
        let remote = others[&p].target;
        match ph {
            Phase::Write => {
                pattern(rank, p, i, buf);
                local.write(src, buf)?;
                let op = SendOp::RdmaWrite { remote_addr: remote.addr + (rank * LEN) as u64, rkey: remote.rkey };
                qp.post_send(&SendWr::new(wr_id(p, 0), op, vec![local.sge(src, LEN as u32)]))
            }
            Phase::Read => {
                let op = SendOp::RdmaRead { remote_addr: remote.addr + (rank * LEN) as u64, rkey: remote.rkey };
                qp.post_send(&SendWr::new(wr_id(p, 1), op, vec![local.sge(src + LEN, LEN as u32)]))
            }
            Phase::Send => qp.post_send(&SendWr::new(wr_id(p, 2), SendOp::Send, vec![local.sge(src, LEN as u32)])),
            Phase::Fin => qp.post_send(&SendWr::new(wr_id(p, 3), SendOp::Send, vec![])),
            Phase::Finished | Phase::Dead => Ok(()),
        }
    };
    for &p in &peers {
        post(p, Phase::Write, 0, &qps, &mut buf)?;
    }
    let mut wcs = vec![WorkCompletion::new(0, WcStatus::Success, WcOpcode::Send, 0); 64];
    loop {
        let finished = phase.values().all(|&ph| matches!(ph, Phase::Finished | Phase::Dead))
            && peers.iter().all(|p| fin_from[p] || phase[p] == Phase::Dead);
        if finished {
            break;
        }
        if Instant::now() > give_up {
            eprintln!("worker {rank}: stuck: {phase:?} fin {fin_from:?}");
            std::process::exit(3);
        }
        let n = scq.poll(&mut wcs)?;
        let m = if n < wcs.len() { rcq.poll(&mut wcs[n..])? } else { 0 };
        if n + m == 0 {
            std::thread::yield_now();
            continue;
        }
        for wc in &wcs[..n + m] {
            let p = (wc.wr_id >> 8) as usize;
            let what = wc.wr_id & 0xff;
            if wc.status != WcStatus::Success {
                report.failed.entry(p).or_default().push(format!("{:?}", wc.status));
                phase.insert(p, Phase::Dead);
                continue;
            }
            if what >= 16 {
                // A SEND from p: FIN (empty) or the pattern of its next exchange.
                let k = (what - 16) as usize;
                let off = p * per + (2 + k) * LEN;
                if wc.byte_len == 0 {
                    fin_from.insert(p, true);
                } else {
                    let got = report.received.entry(p).or_default();
                    local.read(off, &mut buf)?;
                    pattern(p, rank, *got, &mut want);
                    if wc.byte_len as usize != LEN || buf != want {
                        report.bad_bytes += buf.iter().zip(&want).filter(|(a, b)| a != b).count() as u64 + 1;
                    }
                    *got += 1;
                }
                if phase[&p] != Phase::Dead {
                    let _ = qps[&p].post_recv(&RecvWr { wr_id: wc.wr_id, sg_list: vec![local.sge(off, LEN as u32)] });
                }
                continue;
            }
            let i = iter[&p];
            let next = match (phase[&p], what) {
                (Phase::Write, 0) => Phase::Read,
                (Phase::Read, 1) => {
                    local.read(p * per + LEN, &mut buf)?;
                    pattern(rank, p, i, &mut want);
                    if buf != want {
                        report.bad_bytes += buf.iter().zip(&want).filter(|(a, b)| a != b).count() as u64;
                    }
                    Phase::Send
                }
                (Phase::Send, 2) => {
                    *report.done.entry(p).or_default() += 1;
                    iter.insert(p, i + 1);
                    if Instant::now() >= deadline {
                        Phase::Fin
                    } else {
                        Phase::Write
                    }
                }
                (Phase::Fin, 3) => Phase::Finished,
                (ph, w) => panic!("worker {rank}: completion {w} for peer {p} in phase {ph:?}"),
            };
            phase.insert(p, next);
            post(p, next, iter[&p], &qps, &mut buf)?;
        }
    }
    say(&format!("REPORT {}", serde_json::to_string(&report).expect("json")));
    Ok(())
}

fn leftovers() -> Vec<String> {
    let mut v = Vec::new();
    if let Ok(s) = std::fs::read_to_string("/proc/net/unix") {
        v.extend(s.lines().filter(|l| l.contains(&format!("@rnic:{IP}:4791:"))).map(str::to_string));
    }
    // The port: 127.0.0.1:4791 is 0100007F:12B7 in /proc/net/udp.
    if let Ok(s) = std::fs::read_to_string("/proc/net/udp") {
        v.extend(s.lines().filter(|l| l.contains("0100007F:12B7")).map(str::to_string));
    }
    if let Ok(d) = std::fs::read_dir("/dev/shm") {
        v.extend(d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.contains("rnic")));
    }
    v
}

/// Another worker: opens rnic0, makes a QP connected to itself, hands the device bad
/// work (a WRITE from outside its memory region, more sends than the queue holds), checks
/// the errors it gets, closes everything, and again, until the time is up: every open
/// and close joins and leaves the device's socket group, which renumbers it.
#[test]
#[ignore = "a worker process of processes_keep_their_traffic_beside_a_bad_neighbour"]
fn churn() {
    if std::env::var("RNIC_MESH_CHURN").is_err() {
        return;
    }
    let secs: f64 = std::env::var("RNIC_MESH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(8.0);
    let ip: IpAddr = IP.parse().expect("address");
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut opens = 0u64;
    say("READY");
    while Instant::now() < deadline {
        let ctx = Context::open_at("rnic0", ip).expect("open");
        let pd = ctx.alloc_pd().expect("pd");
        let cq = ctx.create_cq(64).expect("cq");
        let mr = pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).expect("mr");
        let q = pd.qp_builder(&cq, &cq).cap(QpCap { max_send_wr: 4, ..QpCap::default() }).build().expect("qp");
        let ep = q.endpoint();
        let qp = q.connect(&ep).expect("connect to itself");
        // A gather entry past the region's end: refused when posted, naming the bounds (or,
        // where a library checks later, a local protection error completion, as rxe's
        // copy_data fails it); nothing is read from outside the region either way.
        let mut bad = mr.sge(0, 4096);
        bad.addr += 4096;
        let op = SendOp::RdmaWrite { remote_addr: mr.addr(), rkey: mr.rkey() };
        match qp.post_send(&SendWr::new(1, op, vec![bad])) {
            Err(e) => assert!(format!("{e:?}").contains("OutOfBounds"), "{e:?}"),
            Ok(()) => {
                let wc = cq.wait(1, Duration::from_secs(10)).expect("completion");
                assert_eq!(wc[0].status, WcStatus::LocProtErr, "{}", wc[0]);
            }
        }
        // A flood of posts: past the queue's depth a post is refused with an error, never
        // a hang (no receive is posted, so the SENDs wait on RNR).
        let refused = (0..16).any(|i| qp.post_send(&SendWr::new(2 + i, SendOp::Send, vec![mr.sge(0, 8)])).is_err());
        assert!(refused, "a send queue of 4 took 16 posts");
        drop(qp);
        opens += 1;
    }
    say(&format!("REPORT {opens}"));
}

fn spawn(test: &str, env: &[(&str, String)]) -> std::process::Child {
    let exe = std::env::current_exe().expect("test binary");
    let mut c = Command::new(exe);
    c.args([test, "--ignored", "--exact", "--nocapture", "--test-threads=1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().expect("worker")
}

/// A child's stdout, read for lines carrying a tag (the harness's "test worker ... " may
/// start the line).
struct Lines(std::io::Lines<BufReader<std::process::ChildStdout>>, String);

impl Lines {
    fn new(k: &mut std::process::Child, who: String) -> Lines {
        Lines(BufReader::new(k.stdout.take().expect("stdout")).lines(), who)
    }
    fn next_tagged(&mut self, tag: &str) -> String {
        loop {
            let l = self.0.next().unwrap_or_else(|| panic!("{} ended before {tag}", self.1)).expect("line");
            if let Some(at) = l.find(tag) {
                return l[at + tag.len()..].trim().to_string();
            }
        }
    }
}

/// Runs `procs` mesh workers for `secs`; kills `victim` halfway; with `churn`, a
/// neighbour opens and closes the device meanwhile. Checks every report.
fn mesh(procs: usize, secs: f64, victim: Option<usize>, churn: bool) {
    // One mesh at a time: they share the device and the host's look for leftovers.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    assert!(leftovers().is_empty(), "something holds the device before the test: {:?}", leftovers());
    let env = |r: usize| {
        vec![
            ("RNIC_MESH_RANK", r.to_string()),
            ("RNIC_MESH_SECS", secs.to_string()),
            ("RNIC_MESH_PROCS", procs.to_string()),
        ]
    };
    let mut kids: Vec<_> = (0..procs).map(|r| spawn("worker", &env(r))).collect();
    let mut outs: Vec<_> = kids.iter_mut().enumerate().map(|(r, k)| Lines::new(k, format!("worker {r}"))).collect();
    let hellos: Vec<String> = outs.iter_mut().map(|o| o.next_tagged("HELLO")).collect();
    for k in &mut kids {
        let mut i = k.stdin.as_ref().expect("stdin");
        for h in &hellos {
            writeln!(i, "HELLO {h}").expect("to worker");
        }
    }
    for o in &mut outs {
        o.next_tagged("READY");
    }
    let mut neighbour = churn.then(|| {
        let mut k = spawn("churn", &[("RNIC_MESH_CHURN", "1".into()), ("RNIC_MESH_SECS", (secs * 0.8).to_string())]);
        let mut o = Lines::new(&mut k, "churn".into());
        o.next_tagged("READY");
        (k, o)
    });
    for k in &mut kids {
        writeln!(k.stdin.as_ref().expect("stdin"), "GO").expect("to worker");
    }
    if let Some(v) = victim {
        std::thread::sleep(Duration::from_secs_f64(secs / 2.0));
        kids[v].kill().expect("kill");
        let _ = kids[v].wait();
    }
    let live: Vec<usize> = (0..procs).filter(|&r| Some(r) != victim).collect();
    let mut reports = BTreeMap::new();
    for &r in &live {
        let rep: Report = serde_json::from_str(&outs[r].next_tagged("REPORT")).expect("report");
        reports.insert(r, rep);
    }
    for &r in &live {
        let st = kids[r].wait().expect("wait");
        assert!(st.success(), "worker {r}: {st}");
    }
    if let Some((mut k, mut o)) = neighbour.take() {
        let opens: u64 = o.next_tagged("REPORT").parse().expect("count");
        assert!(k.wait().expect("wait").success(), "the churning neighbour failed");
        assert!(opens > 0, "the neighbour never opened the device");
        eprintln!("the neighbour opened and closed rnic0 {opens} times meanwhile");
    }
    for (r, rep) in &reports {
        assert_eq!(rep.bad_bytes, 0, "worker {r}: bytes differ: {rep:?}");
        let failed: Vec<_> = rep.failed.keys().copied().collect();
        assert_eq!(failed, victim.into_iter().collect::<Vec<_>>(), "worker {r}: only the victim's QP fails: {rep:?}");
        if let Some(v) = victim {
            // One request times out (IBA C9-140: retries exhausted), and the QP's other
            // work requests (its posted receives) are flushed (IBA 10.8.3.1).
            let st = &rep.failed[&v];
            assert_eq!(st.iter().filter(|s| *s == "RetryExcErr").count(), 1, "worker {r}: {st:?}");
            assert!(st.iter().all(|s| s == "RetryExcErr" || s == "WrFlushErr"), "worker {r}: {st:?}");
        }
        for p in live.iter().copied().filter(|p| p != r) {
            assert!(rep.done[&p] > 0 && rep.received[&p] > 0, "worker {r} moved nothing with {p}: {rep:?}");
            // Both sides counted the same SENDs: every one arrived, in order, checked.
            assert_eq!(rep.received[&p], reports[&p].done[r], "worker {r} from {p}");
        }
    }
    let total: u64 = reports.values().flat_map(|r| r.done.values()).sum();
    eprintln!("{procs} processes, {secs} s, victim {victim:?}: {total} exchanges of {LEN} bytes (WRITE, READ, SEND), all checked");
    // Everything the processes held is gone (the kernel closes a killed process's files;
    // give it a moment).
    let t = Instant::now();
    while !leftovers().is_empty() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
}

fn secs() -> f64 {
    std::env::var("RNIC_MESH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(8.0)
}

/// Eight processes, one SIGKILLed halfway (a middle one, whose exit renumbers the socket
/// group; not member 0, the CM's agent).
#[test]
fn eight_processes_share_one_device_and_survive_a_kill() {
    mesh(8, secs(), Some(3), false);
}

/// Two processes move data while a third opens and closes the device in a loop and
/// hands it bad work: their traffic is untouched, the neighbour gets its errors.
#[test]
fn processes_keep_their_traffic_beside_a_bad_neighbour() {
    mesh(2, secs().min(6.0), None, true);
}
