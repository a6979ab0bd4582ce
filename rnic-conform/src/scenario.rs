//! The scenarios: each one IBA rule, played on a connection of its own (an error puts the
//! peer's QP in the Error state, IBA 9.9.3.1, so no scenario inherits another's), judged
//! by the model ([`crate::model`]) through [`crate::judge`].
//!
//! The peer is rnic's lab responder (`tools/conform/responder.c`) or anything that
//! answers a REP with the same private data (big-endian): `"RNCF"`, version 1, then the
//! read/write/atomic region (VA u64, R_Key u32, length u32), the read-only region (same),
//! the receive WQEs posted (u32, never reposted) and their length (u32). Byte `i` of the
//! first region holds `(7 i + 3) mod 256`, of the second `(5 i + 1) mod 256`.

use crate::cm::{self, Connection};
use crate::judge::{answer_of, judge};
use crate::link::{Link, Record};
use crate::model::{Answer, Region, Request, Responder};
use rnic_wire::atomic::AtomicEthRepr;
use rnic_wire::reth::RethRepr;
use rnic_wire::roce::ExtHeaders;
use rnic_wire::{Opcode, Psn, Qpn};
use std::time::{Duration, Instant};

/// What the responder advertised in its REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advert {
    /// Read/write/atomic region: VA, R_Key, length.
    pub rw: (u64, u32, u32),
    /// Read-only region.
    pub ro: (u64, u32, u32),
    /// Receive WQEs posted.
    pub recvs: u32,
    /// Bytes each takes.
    pub recv_len: u32,
}

impl Advert {
    /// Reads the REP's private data; `None` if it is not the responder's.
    pub fn parse(pd: &[u8]) -> Option<Advert> {
        let u32_at = |o: usize| pd.get(o..o + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        let u64_at = |o: usize| Some(u64::from(u32_at(o)?) << 32 | u64::from(u32_at(o + 4)?));
        if pd.get(0..4)? != b"RNCF" || u32_at(4)? != 1 {
            return None;
        }
        Some(Advert {
            rw: (u64_at(8)?, u32_at(16)?, u32_at(20)?),
            ro: (u64_at(24)?, u32_at(32)?, u32_at(36)?),
            recvs: u32_at(40)?,
            recv_len: u32_at(44)?,
        })
    }

    /// Writes it (for a responder written in Rust).
    pub fn emit(&self) -> [u8; 48] {
        let mut b = [0u8; 48];
        b[0..4].copy_from_slice(b"RNCF");
        b[4..8].copy_from_slice(&1u32.to_be_bytes());
        b[8..16].copy_from_slice(&self.rw.0.to_be_bytes());
        b[16..20].copy_from_slice(&self.rw.1.to_be_bytes());
        b[20..24].copy_from_slice(&self.rw.2.to_be_bytes());
        b[24..32].copy_from_slice(&self.ro.0.to_be_bytes());
        b[32..36].copy_from_slice(&self.ro.1.to_be_bytes());
        b[36..40].copy_from_slice(&self.ro.2.to_be_bytes());
        b[40..44].copy_from_slice(&self.recvs.to_be_bytes());
        b[44..48].copy_from_slice(&self.recv_len.to_be_bytes());
        b
    }
}

/// The initial contents of the read/write region.
pub fn rw_pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| i.wrapping_mul(7).wrapping_add(3).to_le_bytes()[0]).collect()
}

/// The initial contents of the read-only region.
pub fn ro_pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| i.wrapping_mul(5).wrapping_add(1).to_le_bytes()[0]).collect()
}

/// What a scenario's requests are built from.
#[derive(Debug, Clone, Copy)]
pub struct Env {
    /// The peer's QPN (the requests' destination).
    pub dest: u32,
    /// First PSN.
    pub psn: u32,
    /// Path MTU in bytes.
    pub pmtu: usize,
    /// The responder's regions and receives.
    pub ad: Advert,
}

/// Sends `reqs` to the peer, each through `model` first (a UC or UD receiver's oracle),
/// then takes what comes back to the tester's QP `qpn` within `quiet`: such a receiver
/// answers nothing, so each line returned (opcode and PSN) is a divergence. `Err`: a send
/// failed.
pub(crate) fn play_unanswered(
    link: &mut Link,
    reqs: Vec<Request>,
    mut model: impl FnMut(&Request),
    qpn: u32,
    quiet: Duration,
) -> Result<Vec<String>, String> {
    for r in reqs {
        model(&r);
        link.send_with(&r.repr, &r.payload, |_| ()).map_err(|e| format!("sending: {e}"))?;
    }
    Ok(link
        .packets_to(qpn, Instant::now() + quiet)
        .iter()
        .map(|p| format!("{} psn={:#08x}", p.repr.bth.opcode.name(), p.repr.bth.psn.value()))
        .collect())
}

impl Env {
    /// A request with opcode `op` at PSN `psn + k`.
    pub(crate) fn req(&self, op: Opcode, k: u32, ack_req: bool, ext: ExtHeaders, payload: Vec<u8>) -> Request {
        Request::new(op, self.dest, Psn::new(self.psn).add(k), ack_req, ext, payload)
    }
    pub(crate) fn send(&self, op: Opcode, k: u32, ack_req: bool, len: usize) -> Request {
        self.req(op, k, ack_req, ExtHeaders::default(), vec![0x5a; len])
    }
    pub(crate) fn write(&self, op: Opcode, k: u32, reth: Option<(u64, u32, u32)>, payload: Vec<u8>) -> Request {
        let ext = ExtHeaders {
            reth: reth.map(|(va, rkey, dma_len)| RethRepr { va, rkey, dma_len }),
            ..ExtHeaders::default()
        };
        self.req(op, k, true, ext, payload)
    }
    pub(crate) fn read(&self, k: u32, va: u64, rkey: u32, len: u32) -> Request {
        let ext = ExtHeaders { reth: Some(RethRepr { va, rkey, dma_len: len }), ..ExtHeaders::default() };
        self.req(Opcode::RC_RDMA_READ_REQUEST, k, true, ext, Vec::new())
    }
    pub(crate) fn fetch_add(&self, k: u32, va: u64, rkey: u32, add: u64) -> Request {
        let ext = ExtHeaders {
            atomic_eth: Some(AtomicEthRepr { va, rkey, swap_add: add, compare: 0 }),
            ..ExtHeaders::default()
        };
        self.req(Opcode::RC_FETCH_ADD, k, true, ext, Vec::new())
    }
}

/// One scenario: a name, the rule with its IBA citation, and its requests.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    /// Short name (also the divergence capture's file name).
    pub name: &'static str,
    /// The rule and where the IBA states it.
    pub rule: &'static str,
    /// The PSN the tester says it expects from the peer (through the CM the peer picks the
    /// PSN the tester starts at, in its REP); for the scenarios of [`crate::wrap`], which
    /// make their QP through a session, the PSN the tester starts at.
    pub start_psn: u32,
    /// The requests, in the order they are sent.
    pub build: fn(&Env) -> Vec<Request>,
}

/// `r`, sent once the peer has answered what came before (a retransmission).
fn later(mut r: Request) -> Request {
    r.settle = true;
    r
}

fn data(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| seed.wrapping_add((i % 251).to_le_bytes()[0])).collect()
}

/// Every scenario, in the order they run.
pub fn all() -> Vec<Scenario> {
    use Opcode as O;
    vec![
        Scenario {
            name: "send-in-order",
            rule: "IBA 9.7.5.1.1: in-order requests are executed and acknowledged, the MSN counting completed messages",
            start_psn: 0x00_1000,
            build: |e| (0..3).map(|k| e.send(O::RC_SEND_ONLY, k, true, 16)).collect(),
        },
        Scenario {
            name: "ackreq-coalescing",
            rule: "IBA 9.7.5.1.1 / 9.2.3 (AckReq): a request with AckReq is acknowledged; those before it may be covered by the same ACK",
            start_psn: 0x00_2000,
            build: |e| vec![e.send(O::RC_SEND_ONLY, 0, false, 8), e.send(O::RC_SEND_ONLY, 1, false, 8), e.send(O::RC_SEND_ONLY, 2, true, 8)],
        },
        Scenario {
            name: "write-then-read",
            rule: "IBA 9.4.3 / 9.4.4 / 9.7.5.1.1: a three-packet WRITE lands where its RETH says and a READ returns it, one response per PMTU, PSNs after the READ's",
            start_psn: 0x00_3000,
            build: |e| {
                let p = e.pmtu;
                let (va, rkey, _) = e.ad.rw;
                let d = data(0x11, 3 * p);
                let len = u32::try_from(3 * p).unwrap_or(0);
                vec![
                    e.write(O::RC_RDMA_WRITE_FIRST, 0, Some((va + 64, rkey, len)), d[..p].to_vec()),
                    e.write(O::RC_RDMA_WRITE_MIDDLE, 1, None, d[p..2 * p].to_vec()),
                    e.write(O::RC_RDMA_WRITE_LAST, 2, None, d[2 * p..].to_vec()),
                    e.read(3, va + 64, rkey, len),
                ]
            },
        },
        Scenario {
            name: "duplicate-send",
            rule: "IBA 9.7.5.1.5 / C9-105: a duplicate SEND is acknowledged again and not executed (the MSN does not move)",
            start_psn: 0x00_4000,
            build: |e| vec![e.send(O::RC_SEND_ONLY, 0, true, 16), later(e.send(O::RC_SEND_ONLY, 0, true, 16)), e.send(O::RC_SEND_ONLY, 1, true, 16)],
        },
        Scenario {
            name: "psn-ahead",
            rule: "IBA 9.7.5.1.2: a request ahead of the expected PSN gets one PSN sequence error NAK carrying the expected PSN, later ones none",
            start_psn: 0x00_5000,
            build: |e| {
                vec![
                    e.send(O::RC_SEND_ONLY, 2, true, 16),
                    e.send(O::RC_SEND_ONLY, 3, true, 16),
                    later(e.send(O::RC_SEND_ONLY, 0, true, 16)),
                    e.send(O::RC_SEND_ONLY, 1, true, 16),
                ]
            },
        },
        Scenario {
            name: "write-bad-rkey",
            rule: "IBA 9.7.5.2.4 / 10.6.3.1: a WRITE whose R_Key names no region is a remote access error",
            start_psn: 0x00_6000,
            build: |e| {
                let (va, rkey, _) = e.ad.rw;
                let mut bad = rkey ^ 0x0080_0000;
                if bad == e.ad.ro.1 {
                    bad ^= 0x0040_0000;
                }
                vec![e.write(O::RC_RDMA_WRITE_ONLY, 0, Some((va, bad, 16)), data(1, 16))]
            },
        },
        Scenario {
            name: "write-out-of-bounds",
            rule: "IBA 9.7.5.2.4 / 10.6.3.1: a WRITE reaching past its region's end is a remote access error",
            start_psn: 0x00_7000,
            build: |e| {
                let (va, rkey, len) = e.ad.rw;
                vec![e.write(O::RC_RDMA_WRITE_ONLY, 0, Some((va + u64::from(len) - 8, rkey, 16)), data(2, 16))]
            },
        },
        Scenario {
            name: "write-without-access",
            rule: "IBA 9.7.5.2.4 / 10.6.3.1: a WRITE to a region without remote write access is a remote access error",
            start_psn: 0x00_8000,
            build: |e| {
                let (va, rkey, _) = e.ad.ro;
                vec![e.write(O::RC_RDMA_WRITE_ONLY, 0, Some((va, rkey, 16)), data(3, 16))]
            },
        },
        Scenario {
            name: "atomic-without-access",
            rule: "IBA 9.4.5 / 10.6.3.1: an atomic on a region without remote atomic access is a remote access error",
            start_psn: 0x00_8800,
            build: |e| {
                let (va, rkey, _) = e.ad.ro;
                vec![e.fetch_add(0, va, rkey, 1)]
            },
        },
        Scenario {
            name: "middle-without-first",
            rule: "IBA 9.7.5.1.3 (opcode sequence): a SEND MIDDLE with no message begun is an invalid request",
            start_psn: 0x00_9000,
            build: |e| vec![e.send(O::RC_SEND_MIDDLE, 0, true, e.pmtu)],
        },
        Scenario {
            name: "only-inside-message",
            rule: "IBA 9.7.5.1.3 (opcode sequence): a SEND ONLY while a SEND is in progress is an invalid request",
            start_psn: 0x00_a000,
            build: |e| vec![e.send(O::RC_SEND_FIRST, 0, false, e.pmtu), e.send(O::RC_SEND_ONLY, 1, true, 16)],
        },
        Scenario {
            name: "reth-length-mismatch",
            rule: "IBA 9.7.5.1.4 (length): a WRITE ONLY whose payload is not the RETH's DMA length is an invalid request",
            start_psn: 0x00_b000,
            build: |e| {
                let (va, rkey, _) = e.ad.rw;
                vec![e.write(O::RC_RDMA_WRITE_ONLY, 0, Some((va, rkey, 100)), data(4, 64))]
            },
        },
        Scenario {
            name: "pad-on-first",
            rule: "IBA 9.7.5.1.4 / 9.2.2 (PadCnt): a FIRST packet carries a whole PMTU and no pad; PadCnt 1 makes it one byte short, an invalid request",
            start_psn: 0x00_c000,
            build: |e| {
                let mut r = e.send(O::RC_SEND_FIRST, 0, true, e.pmtu);
                r.pad = Some(1);
                vec![r]
            },
        },
        Scenario {
            name: "send-too-long",
            rule: "IBA 9.7.5.2.2 (length error): a SEND longer than the receive WQE's buffer is an invalid request",
            start_psn: 0x00_d000,
            build: |e| {
                let p = e.pmtu;
                let n = usize::try_from(e.ad.recv_len).unwrap_or(0) / p;
                let mut v = vec![e.send(O::RC_SEND_FIRST, 0, false, p)];
                for k in 1..n {
                    v.push(e.send(O::RC_SEND_MIDDLE, u32::try_from(k).unwrap_or(0), false, p));
                }
                v.push(e.send(O::RC_SEND_LAST, u32::try_from(n).unwrap_or(0), true, 16));
                v
            },
        },
        Scenario {
            name: "rnr-no-receive",
            rule: "IBA 9.7.5.2.8 (RNR): a SEND finding no receive WQE gets an RNR NAK with its PSN",
            start_psn: 0x00_e000,
            build: |e| (0..=e.ad.recvs).map(|k| e.send(O::RC_SEND_ONLY, k, true, 8)).collect(),
        },
        Scenario {
            name: "duplicate-read",
            rule: "IBA 9.7.5.1.5: a duplicate READ is answered again, same PSNs, from the memory",
            start_psn: 0x00_f000,
            build: |e| {
                let (va, rkey, _) = e.ad.rw;
                let len = u32::try_from(2 * e.pmtu).unwrap_or(0);
                vec![e.read(0, va, rkey, len), later(e.read(0, va, rkey, len))]
            },
        },
        Scenario {
            name: "read-resume",
            rule: "IBA 9.7.5.1.5 (clause unverified): a READ asked again from inside its responses (PSN and RETH moved on by the two answered) is answered from that PSN with the rest, as a FIRST or as the MIDDLE it was; the next request follows the original's last PSN",
            start_psn: 0x01_1000,
            build: |e| {
                let (va, rkey, _) = e.ad.rw;
                let p = e.pmtu;
                let len = u32::try_from(4 * p).unwrap_or(0);
                let done = u32::try_from(2 * p).unwrap_or(0);
                vec![
                    e.read(0, va + 128, rkey, len),
                    later(e.read(2, va + 128 + u64::from(done), rkey, len - done)),
                    later(e.send(O::RC_SEND_ONLY, 4, true, 8)),
                ]
            },
        },
        Scenario {
            name: "rc-unknown-qpn",
            rule: "IBA 9.6.1 / 10.3.1 (unverified clauses): a request to a QPN with no connection (the peer's QPN with bit 22 flipped) is dropped silently, no NAK; the connected QP still answers",
            start_psn: 0x01_2000,
            build: |e| {
                let mut stray = e.send(O::RC_SEND_ONLY, 0, true, 8);
                stray.repr.bth.dest_qp = Qpn::new(e.dest ^ 0x40_0000);
                vec![stray, later(e.send(O::RC_SEND_ONLY, 0, true, 8))]
            },
        },
        Scenario {
            name: "atomic-replay",
            rule: "IBA 9.7.5.1.5: a duplicate atomic returns the original value and is not executed again",
            start_psn: 0x01_0000,
            build: |e| {
                let (va, rkey, _) = e.ad.rw;
                vec![e.fetch_add(0, va + 8, rkey, 1), later(e.fetch_add(0, va + 8, rkey, 1)), e.read(1, va + 8, rkey, 8)]
            },
        },
    ]
}

/// Takes the peer's answers to `qpn` until it has been quiet `o.quiet`, or for
/// `o.answer_wait` at most: a peer that never stops talking cannot hold the tester.
fn collect(link: &mut Link, qpn: u32, o: &Options, seen: &mut Vec<Answer>) {
    let end = Instant::now() + o.answer_wait;
    loop {
        let until = (Instant::now() + o.quiet).min(end);
        let Some(p) = link.recv(until) else { break };
        if p.repr.bth.dest_qp.value() != qpn {
            continue; // CM traffic, or another connection's late answer
        }
        if p.repr.bth.opcode == Opcode::CNP {
            continue; // congestion control (RoCEv2 A17.9), no answer to a request
        }
        seen.push(answer_of(&p.repr, &p.payload));
    }
}

/// [`collect`], then, while what has come is not yet a conforming answer to `want` and may
/// still become one (no more NAKs and READ or atomic answers than the rules ask for: only
/// something due is missing), up to `o.answer_wait` more: a slow peer (rxe under qemu's TCG
/// took 486 ms for one ACK) is not judged by the `quiet` it happened to leave before
/// answering, and a peer that answered wrongly is not waited for.
fn settle(link: &mut Link, qpn: u32, o: &Options, want: &[Answer], seen: &mut Vec<Answer>) {
    collect(link, qpn, o, seen);
    let firm = |v: &[Answer]| v.iter().filter(|a| !matches!(a, Answer::Ack { .. })).count();
    if judge(want, seen).is_err() && firm(seen) <= firm(want) {
        let patient = Options { quiet: o.answer_wait, ..*o };
        collect(link, qpn, &patient, seen);
    }
}

/// How a scenario ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The peer answered as the rules say.
    Pass,
    /// It answered otherwise: what differs.
    Diverges(String),
    /// Something was due and nothing came in the time allowed.
    NoAnswer(String),
    /// It could not run (connection refused, no regions advertised): why.
    NotRun(String),
}

/// One scenario's result.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Scenario name.
    pub name: &'static str,
    /// Rule and citation.
    pub rule: &'static str,
    /// Verdict.
    pub verdict: Verdict,
    /// What the model expected, one answer a line.
    pub expected: Vec<String>,
    /// What the peer answered.
    pub observed: Vec<String>,
    /// The scenario's packets after the connection was made (its shortest exchange).
    pub capture: Vec<Record>,
}

impl Outcome {
    /// A scenario's outcome before it runs: passing, nothing expected or seen yet.
    pub fn new(name: &'static str, rule: &'static str) -> Outcome {
        Outcome { name, rule, verdict: Verdict::Pass, expected: Vec::new(), observed: Vec::new(), capture: Vec::new() }
    }
}

/// How to reach the peer and how long to wait for it.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// rdma_cm port it listens on.
    pub port: u16,
    /// Path MTU code to ask for (3 = 1024).
    pub mtu_code: u8,
    /// Longest wait for the CM.
    pub cm_wait: Duration,
    /// An exchange is over once the peer has been quiet this long...
    pub quiet: Duration,
    /// ... or this long after the last request at most.
    pub answer_wait: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            port: 7471,
            mtu_code: 3,
            cm_wait: Duration::from_secs(5),
            quiet: Duration::from_millis(300),
            answer_wait: Duration::from_secs(3),
        }
    }
}

/// Connects as QP `qpn` (`n` makes the communication ID; the tester says it expects the
/// peer's PSNs to start at `start_psn`) and reads the responder's REP: the connection, a
/// model of the responder as it stands, and what requests are built from.
pub fn open(
    link: &mut Link,
    qpn: u32,
    n: u32,
    start_psn: u32,
    o: &Options,
) -> Result<(Connection, Responder, Env), String> {
    let comm_id = (std::process::id() << 12) ^ (n + 1) ^ 0x7000_0000;
    let req = cm::Request { port: o.port, qpn, psn: start_psn, mtu_code: o.mtu_code, comm_id };
    let c: Connection = cm::connect(link, req, o.cm_wait)?;
    let Some(ad) = Advert::parse(&c.private_data) else {
        cm::disconnect(link, &c, o.quiet);
        return Err("the REP's private data is not rnic's responder's (no \"RNCF\")".into());
    };
    let pmtu = 128usize << o.mtu_code;
    let rw_len = usize::try_from(ad.rw.2).unwrap_or(0);
    let ro_len = usize::try_from(ad.ro.2).unwrap_or(0);
    let regions = vec![
        Region { va: ad.rw.0, rkey: ad.rw.1, write: true, read: true, atomic: true, data: rw_pattern(rw_len) },
        Region { va: ad.ro.0, rkey: ad.ro.1, write: false, read: true, atomic: false, data: ro_pattern(ro_len) },
    ];
    let model = Responder::new(Psn::new(c.start_psn), ad.recvs, u64::from(ad.recv_len), pmtu, regions);
    let env = Env { dest: c.remote_qpn, psn: c.start_psn, pmtu, ad };
    Ok((c, model, env))
}

/// Runs one scenario on a connection of its own. `n` makes its QPN and communication ID.
pub fn run(link: &mut Link, s: &Scenario, n: u32, o: &Options) -> Outcome {
    let mut out = Outcome::new(s.name, s.rule);
    let (c, mut model, env) = match open(link, 0x00c0_0000 + n, n, s.start_psn, o) {
        Ok(x) => x,
        Err(e) => {
            out.verdict = Verdict::NotRun(e);
            return out;
        }
    };
    let reqs = (s.build)(&env);
    exchange(link, c.local_qpn, env.dest, &mut model, &reqs, o, &mut out);
    cm::disconnect(link, &c, o.quiet);
    out
}

/// Sends `reqs` to the peer's QP `dest` (answers come to the tester's `qpn`), each through
/// `model`, and judges what came back into `out` (its capture, expected and observed
/// answers, verdict).
pub(crate) fn exchange(
    link: &mut Link,
    qpn: u32,
    dest: u32,
    model: &mut Responder,
    reqs: &[Request],
    o: &Options,
    out: &mut Outcome,
) {
    let mark = link.mark();
    let mut want: Vec<Answer> = Vec::new();
    let mut seen = Vec::new();
    for r in reqs {
        if r.settle {
            settle(link, qpn, o, &want, &mut seen);
        }
        // IBA 9.6.1 (unverified clause): a request to another QPN is not the modelled
        // responder's: its HCA drops it (no QP, or not this connection's), no answer.
        if r.repr.bth.dest_qp.value() == dest {
            want.extend(model.handle(r));
        }
        let pad = r.pad;
        let sent = link.send_with(&r.repr, &r.payload, |b| {
            if let Some(p) = pad {
                // BTH byte 1: SE, MigReq, PadCnt (2 bits), TVer.
                b[1] = (b[1] & !0x30) | ((p & 3) << 4);
            }
        });
        if let Err(e) = sent {
            out.verdict = Verdict::NotRun(format!("sending a request: {e}"));
            return;
        }
    }
    settle(link, qpn, o, &want, &mut seen);
    out.capture = link.records_since(mark).to_vec();
    out.expected = want.iter().map(ToString::to_string).collect();
    out.observed = seen.iter().map(ToString::to_string).collect();
    let due = want.iter().any(|a| !matches!(a, Answer::Ack { required: false, .. }));
    out.verdict = match judge(&want, &seen) {
        Ok(()) => Verdict::Pass,
        Err(_) if seen.is_empty() && due => {
            Verdict::NoAnswer(format!("nothing in {:?}; expected {}", o.answer_wait, out.expected.join("; ")))
        }
        Err(e) => Verdict::Diverges(e),
    };
}

/// The report of a run: one line a scenario, and the expected and observed answers of each
/// that did not pass.
pub fn report(outcomes: &[Outcome]) -> String {
    let mut s = String::new();
    for o in outcomes {
        let v = match &o.verdict {
            Verdict::Pass => "pass".to_string(),
            Verdict::Diverges(_) => "DIVERGES".to_string(),
            Verdict::NoAnswer(_) => "PEER STOPPED ANSWERING".to_string(),
            Verdict::NotRun(_) => "not run".to_string(),
        };
        s += &format!("{:<24} {v:<24} {}\n", o.name, o.rule);
        match &o.verdict {
            Verdict::Pass => {}
            Verdict::Diverges(why) | Verdict::NoAnswer(why) | Verdict::NotRun(why) => {
                s += &format!("    {why}\n");
                if !matches!(o.verdict, Verdict::NotRun(_)) {
                    s += &format!("    expected: {}\n    observed: {}\n", o.expected.join("; "), o.observed.join("; "));
                }
            }
        }
    }
    let pass = outcomes.iter().filter(|o| o.verdict == Verdict::Pass).count();
    s += &format!("{pass} of {} scenarios pass\n", outcomes.len());
    s
}
