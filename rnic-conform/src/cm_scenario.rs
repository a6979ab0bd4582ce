//! CM scenarios (IBA chapter 12: the communication manager's messages and its state
//! machines, 12.9): duplicated and out-of-order MADs, a REQ the peer must reject, DREQs in
//! the wrong state. The tester is the active side; the peer's rdma_cm listener is the
//! passive side. Where a connection is made, it is then shown to work (a SEND ONLY
//! acknowledged as the RC model says) or shown not to be made twice.
//!
//! The IBA's section numbers for the CM's state machines could not be checked here (no
//! copy of the specification was at hand): each rule says "unverified" where its number is
//! from memory.

use crate::cm::{self, Connection};
use crate::judge::{answer_of, judge};
use crate::link::Link;
use crate::scenario::{Advert, Options, Outcome, Verdict};
use rnic_wire::cm::{rej_reason, CmMessage, CmTransport};
use rnic_wire::{Opcode, Psn};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How a scenario went: the verdict, what was expected, what came (a line each).
pub type Played = (Verdict, Vec<String>, Vec<String>);

/// One CM scenario: a name, the rule, and how it is played.
#[derive(Debug, Clone, Copy)]
pub struct CmScenario {
    /// Short name.
    pub name: &'static str,
    /// The rule and where the IBA states it.
    pub rule: &'static str,
    /// Plays it: the verdict, what was expected and what came.
    pub play: fn(&mut Link, &Options, cm::Request) -> Played,
}

/// A CM message in a line.
pub fn describe(m: &CmMessage) -> String {
    match m {
        CmMessage::Req(r) => format!("REQ comm {:#x} qpn {:#x}", r.local_comm_id, r.local_qpn),
        CmMessage::Mra(r) => format!("MRA comm {:#x} -> {:#x}", r.local_comm_id, r.remote_comm_id),
        CmMessage::Rej(r) => format!("REJ comm {:#x} -> {:#x} reason {}", r.local_comm_id, r.remote_comm_id, r.reason),
        CmMessage::Rep(r) => {
            format!("REP comm {:#x} -> {:#x} qpn {:#x}", r.local_comm_id, r.remote_comm_id, r.local_qpn)
        }
        CmMessage::Rtu(r) => format!("RTU comm {:#x} -> {:#x}", r.local_comm_id, r.remote_comm_id),
        CmMessage::Dreq(r) => format!("DREQ comm {:#x} -> {:#x}", r.ids.local_comm_id, r.ids.remote_comm_id),
        CmMessage::Drep(r) => format!("DREP comm {:#x} -> {:#x}", r.local_comm_id, r.remote_comm_id),
        CmMessage::SidrReq(_) => "SIDR_REQ".into(),
        CmMessage::SidrRep(_) => "SIDR_REP".into(),
    }
}

/// The CM messages addressed to communication `comm` (its remote comm ID) until `until`.
fn gather(link: &mut Link, comm: u32, until: Instant, stop: impl Fn(&CmMessage) -> bool) -> Vec<CmMessage> {
    let mut out = Vec::new();
    while let Some(m) = cm::next(link, until) {
        let to = match &m {
            CmMessage::Mra(r) => r.remote_comm_id,
            CmMessage::Rej(r) => r.remote_comm_id,
            CmMessage::Rep(r) => r.remote_comm_id,
            CmMessage::Rtu(r) | CmMessage::Drep(r) => r.remote_comm_id,
            CmMessage::Dreq(r) => r.ids.remote_comm_id,
            _ => continue,
        };
        if to != comm {
            continue;
        }
        let done = stop(&m);
        out.push(m);
        if done {
            break;
        }
    }
    out
}

fn lines(v: &[CmMessage]) -> Vec<String> {
    v.iter().map(describe).collect()
}

/// After a connection: a SEND ONLY at the PSN the REP gave is acknowledged as the RC
/// model says (the connection works). `Err` says how it did not.
fn works(link: &mut Link, c: &Connection, o: &Options) -> Result<(), String> {
    let ad = Advert::parse(&c.private_data).ok_or("the REP's private data is not rnic's responder's")?;
    let pmtu = 128usize << o.mtu_code;
    let mut model =
        crate::model::Responder::new(Psn::new(c.start_psn), ad.recvs, u64::from(ad.recv_len), pmtu, Vec::new());
    let env = crate::scenario::Env { dest: c.remote_qpn, psn: c.start_psn, pmtu, ad };
    let r = env.send(Opcode::RC_SEND_ONLY, 0, true, 8);
    let want = model.handle(&r);
    link.send_with(&r.repr, &r.payload, |_| ()).map_err(|e| e.to_string())?;
    let end = Instant::now() + o.answer_wait;
    let mut seen = Vec::new();
    while let Some(p) = link.recv(end) {
        if p.repr.bth.dest_qp.value() == c.local_qpn && p.repr.bth.opcode != Opcode::CNP {
            seen.push(answer_of(&p.repr, &p.payload));
            break;
        }
    }
    judge(&want, &seen).map_err(|e| format!("the connection does not work: {e}"))
}

fn first_rep(link: &mut Link, req: cm::Request, o: &Options) -> Result<(Connection, Vec<CmMessage>), Vec<CmMessage>> {
    let got =
        gather(link, req.comm_id, Instant::now() + o.cm_wait, |m| matches!(m, CmMessage::Rep(_) | CmMessage::Rej(_)));
    match got.last() {
        Some(CmMessage::Rep(rep)) => Ok((Connection::from_rep(req, rep), got.clone())),
        _ => Err(got),
    }
}

fn send(link: &mut Link, psn: &mut u32, m: &CmMessage, tid: u64) -> Result<(), Played> {
    cm::send(link, psn, m, tid).map_err(|e| (Verdict::NotRun(e), Vec::new(), Vec::new()))
}

macro_rules! try_send {
    ($e:expr) => {
        if let Err(x) = $e {
            return x;
        }
    };
}

fn no_rep(req: cm::Request, o: &Options, got: &[CmMessage]) -> Played {
    let v = if got.is_empty() {
        Verdict::NoAnswer(format!("no REP to a REQ for port {} in {:?}", req.port, o.cm_wait))
    } else {
        Verdict::Diverges("the REQ was not answered with a REP".into())
    };
    (v, vec!["REP".into()], lines(got))
}

fn duplicate_req(link: &mut Link, o: &Options, req: cm::Request) -> Played {
    let m = match cm::req_message(link, req, CmTransport::Rc) {
        Ok(m) => m,
        Err(e) => return (Verdict::NotRun(e), Vec::new(), Vec::new()),
    };
    let mut psn = 1;
    let tid = cm::tid(req.comm_id, 0x10);
    try_send!(send(link, &mut psn, &m, tid));
    let (c, mut seen) = match first_rep(link, req, o) {
        Ok(x) => x,
        Err(got) => return no_rep(req, o, &got),
    };
    // The same REQ again, as the active side's retry would send it.
    try_send!(send(link, &mut psn, &m, tid));
    let again = gather(link, req.comm_id, Instant::now() + 2 * o.quiet, |_| false);
    let expected = vec![
        describe(&seen[seen.len() - 1]),
        "after the duplicate REQ: the same REP again, an MRA, or nothing".into(),
        "the connection works".into(),
    ];
    let (lc, rc) = c.comm_ids();
    let bad = again.iter().find(|m| match m {
        CmMessage::Rep(r) => r.local_comm_id != rc || r.local_qpn & 0xff_ffff != c.remote_qpn,
        CmMessage::Mra(_) => false,
        _ => true,
    });
    seen.extend(again.iter().cloned());
    let mut observed = lines(&seen);
    if let Some(b) = bad {
        return (
            Verdict::Diverges(format!("{} after a duplicate REQ: not the REP already sent", describe(b))),
            expected,
            observed,
        );
    }
    try_send!(send(link, &mut psn, &cm::rtu(lc, rc), tid + 1));
    let v = match works(link, &c, o) {
        Ok(()) => Verdict::Pass,
        Err(e) => Verdict::Diverges(e),
    };
    observed.push(if v == Verdict::Pass {
        "the connection works".into()
    } else {
        "the connection does not work".into()
    });
    cm::disconnect(link, &c, o.quiet);
    (v, expected, observed)
}

fn rtu_before_rep(link: &mut Link, o: &Options, req: cm::Request) -> Played {
    let m = match cm::req_message(link, req, CmTransport::Rc) {
        Ok(m) => m,
        Err(e) => return (Verdict::NotRun(e), Vec::new(), Vec::new()),
    };
    let mut psn = 1;
    let tid = cm::tid(req.comm_id, 0x10);
    try_send!(send(link, &mut psn, &m, tid));
    // An RTU before the REP: the peer's communication ID is not known yet (0).
    try_send!(send(link, &mut psn, &cm::rtu(req.comm_id, 0), tid + 1));
    let expected = vec!["REP (the early RTU discarded)".into(), "the connection works".into()];
    let (c, seen) = match first_rep(link, req, o) {
        Ok(x) => x,
        Err(got) => return no_rep(req, o, &got),
    };
    let mut observed = lines(&seen);
    let (lc, rc) = c.comm_ids();
    try_send!(send(link, &mut psn, &cm::rtu(lc, rc), tid + 2));
    let v = match works(link, &c, o) {
        Ok(()) => Verdict::Pass,
        Err(e) => Verdict::Diverges(e),
    };
    observed.push(if v == Verdict::Pass {
        "the connection works".into()
    } else {
        "the connection does not work".into()
    });
    cm::disconnect(link, &c, o.quiet);
    (v, expected, observed)
}

/// A REQ the peer must reject, and the reasons that conform.
fn rejected(link: &mut Link, o: &Options, req: cm::Request, t: CmTransport, reasons: &[u16]) -> Played {
    let m = match cm::req_message(link, req, t) {
        Ok(m) => m,
        Err(e) => return (Verdict::NotRun(e), Vec::new(), Vec::new()),
    };
    let mut psn = 1;
    try_send!(send(link, &mut psn, &m, cm::tid(req.comm_id, 0x10)));
    let got = gather(link, req.comm_id, Instant::now() + o.answer_wait, |m| {
        matches!(m, CmMessage::Rep(_) | CmMessage::Rej(_))
    });
    let want: Vec<String> = reasons.iter().map(|r| format!("REJ reason {r}")).collect();
    let expected = vec![want.join(" or ")];
    let observed = lines(&got);
    let v = match got.last() {
        Some(CmMessage::Rej(r)) if reasons.contains(&r.reason) => Verdict::Pass,
        Some(CmMessage::Rej(r)) => Verdict::Diverges(format!("rejected with reason {}", r.reason)),
        Some(CmMessage::Rep(rep)) => {
            // Accepted: say so, and leave no half-open connection behind.
            let c = Connection::from_rep(req, rep);
            cm::disconnect(link, &c, o.quiet);
            Verdict::Diverges("accepted (REP) instead of rejected".into())
        }
        _ => Verdict::NoAnswer(format!("no REJ in {:?}", o.answer_wait)),
    };
    (v, expected, observed)
}

fn unknown_service(link: &mut Link, o: &Options, req: cm::Request) -> Played {
    // A port next to the listener's: nothing listens there in the lab.
    let req = cm::Request { port: req.port.wrapping_add(1000), ..req };
    rejected(link, o, req, CmTransport::Rc, &[rej_reason::INVALID_SERVICE_ID])
}

fn rd_transport(link: &mut Link, o: &Options, req: cm::Request) -> Played {
    rejected(link, o, req, CmTransport::Rd, &[rej_reason::INVALID_TRANSPORT_TYPE, rej_reason::UNSUPPORTED])
}

fn drep_for(
    link: &mut Link,
    o: &Options,
    psn: &mut u32,
    lc: u32,
    rc: u32,
    qpn: u32,
    k: u8,
) -> Result<Vec<CmMessage>, Played> {
    send(link, psn, &cm::dreq(lc, rc, qpn), cm::tid(lc, k))?;
    Ok(gather(link, lc, Instant::now() + o.answer_wait, |m| matches!(m, CmMessage::Drep(_))))
}

fn got_drep(v: &[CmMessage]) -> bool {
    v.iter().any(|m| matches!(m, CmMessage::Drep(_)))
}

fn dreq_unknown(link: &mut Link, o: &Options, req: cm::Request) -> Played {
    let mut psn = 1;
    let got = match drep_for(link, o, &mut psn, req.comm_id, req.comm_id ^ 0x5a5a_0000, 0x00ab_cdef, 0x15) {
        Ok(g) => g,
        Err(x) => return x,
    };
    let v = if got_drep(&got) { Verdict::Pass } else { Verdict::NoAnswer(format!("no DREP in {:?}", o.answer_wait)) };
    (v, vec!["DREP".into()], lines(&got))
}

fn dreq_before_rtu(link: &mut Link, o: &Options, req: cm::Request) -> Played {
    let m = match cm::req_message(link, req, CmTransport::Rc) {
        Ok(m) => m,
        Err(e) => return (Verdict::NotRun(e), Vec::new(), Vec::new()),
    };
    let mut psn = 1;
    try_send!(send(link, &mut psn, &m, cm::tid(req.comm_id, 0x10)));
    let (c, mut seen) = match first_rep(link, req, o) {
        Ok(x) => x,
        Err(got) => return no_rep(req, o, &got),
    };
    let (lc, rc) = c.comm_ids();
    let got = match drep_for(link, o, &mut psn, lc, rc, c.remote_qpn, 0x15) {
        Ok(g) => g,
        Err(x) => return x,
    };
    seen.extend(got.iter().cloned());
    let v = if got_drep(&got) { Verdict::Pass } else { Verdict::NoAnswer(format!("no DREP in {:?}", o.answer_wait)) };
    (v, vec!["REP".into(), "DREP".into()], lines(&seen))
}

fn dreq_twice(link: &mut Link, o: &Options, req: cm::Request) -> Played {
    let c = match cm::connect(link, req, o.cm_wait) {
        Ok(c) => c,
        Err(e) => return (Verdict::NotRun(e), Vec::new(), Vec::new()),
    };
    let (lc, rc) = c.comm_ids();
    let mut psn = 0x20;
    let mut seen = Vec::new();
    for k in [0x15u8, 0x15] {
        match drep_for(link, o, &mut psn, lc, rc, c.remote_qpn, k) {
            Ok(g) => {
                let ok = got_drep(&g);
                seen.extend(g);
                if !ok {
                    let v = Verdict::NoAnswer(format!("no DREP in {:?}", o.answer_wait));
                    return (v, vec!["DREP".into(), "DREP".into()], lines(&seen));
                }
            }
            Err(x) => return x,
        }
    }
    (Verdict::Pass, vec!["DREP".into(), "DREP".into()], lines(&seen))
}

/// A connection made, shown to work, then ended by the tester's DREQ: once the peer has
/// answered with its DREP (and had a moment for its consumer to disconnect), a request on
/// the connection gets no answer.
fn request_after_dreq(link: &mut Link, o: &Options, req: cm::Request) -> Played {
    let c = match cm::connect(link, req, o.cm_wait) {
        Ok(c) => c,
        Err(e) => return (Verdict::NotRun(e), Vec::new(), Vec::new()),
    };
    let expected = vec!["the connection works".into(), "DREP".into(), "no answer to a SEND after it".into()];
    if let Err(e) = works(link, &c, o) {
        cm::disconnect(link, &c, o.quiet);
        return (Verdict::NotRun(e), expected, Vec::new());
    }
    let mut observed = vec!["the connection works".to_string()];
    let (lc, rc) = c.comm_ids();
    let mut psn = 0x30;
    let got = match drep_for(link, o, &mut psn, lc, rc, c.remote_qpn, 0x15) {
        Ok(g) => g,
        Err(x) => return x,
    };
    observed.extend(lines(&got));
    if !got_drep(&got) {
        return (Verdict::NoAnswer(format!("no DREP in {:?}", o.answer_wait)), expected, observed);
    }
    let Some(ad) = Advert::parse(&c.private_data) else {
        return (Verdict::NotRun("the REP's private data is not rnic's responder's".into()), expected, observed);
    };
    // The consumer's turn: rdma_cm tells it DISCONNECTED and it disconnects (librdmacm's
    // rdma_disconnect moves the QP to the Error state before Linux's CM sends the DREP;
    // rnic's CM sends the DREP at once, the QP going to Error when the consumer acts): the
    // request goes once the peer has been quiet a while, not in that window.
    let _ = gather(link, u32::MAX, Instant::now() + o.quiet, |_| false);
    let env = crate::scenario::Env { dest: c.remote_qpn, psn: c.start_psn, pmtu: 128usize << o.mtu_code, ad };
    // The next PSN, as if the connection were still up (the first went to `works`).
    let r = env.send(Opcode::RC_SEND_ONLY, 1, true, 8);
    if let Err(e) = link.send_with(&r.repr, &r.payload, |_| ()) {
        return (Verdict::NotRun(e.to_string()), expected, observed);
    }
    let end = Instant::now() + o.answer_wait.min(2 * o.quiet);
    let back: Vec<String> =
        link.packets_to(c.local_qpn, end).iter().map(|p| answer_of(&p.repr, &p.payload).to_string()).collect();
    if back.is_empty() {
        observed.push("no answer to the SEND".into());
        (Verdict::Pass, expected, observed)
    } else {
        let why = format!("the SEND after the DREP was answered: {}", back.join("; "));
        observed.extend(back);
        (Verdict::Diverges(why), expected, observed)
    }
}

/// Every CM scenario, in the order they run.
pub fn all() -> Vec<CmScenario> {
    vec![
        CmScenario {
            name: "cm-duplicate-req",
            rule: "IBA 12.9.5 (passive side, unverified clause): a REQ repeated before the RTU is a duplicate: the same REP again, an MRA or nothing, never a second connection; the first still completes",
            play: duplicate_req,
        },
        CmScenario {
            name: "cm-rtu-before-rep",
            rule: "IBA 12.9.5 / 12.6.4 (unverified clauses): an RTU for no communication the passive side knows is discarded; the REQ before it is still answered with a REP",
            play: rtu_before_rep,
        },
        CmScenario {
            name: "cm-unknown-service",
            rule: "IBA 12.6.7 / Table 112 (unverified numbers): a REQ for a service ID nobody listens on is rejected, reason 8 (invalid service ID)",
            play: unknown_service,
        },
        CmScenario {
            name: "cm-rd-transport",
            rule: "IBA 12.6.7 / Table 112 (unverified numbers): a REQ for the RD transport, which an rdma_cm RC listener does not serve, is rejected, reason 9 (invalid transport service type) or 5 (unsupported)",
            play: rd_transport,
        },
        CmScenario {
            name: "cm-dreq-unknown",
            rule: "IBA 12.9.8 (unverified clause): a DREQ for no connection the peer knows is answered with a DREP",
            play: dreq_unknown,
        },
        CmScenario {
            name: "cm-dreq-before-rtu",
            rule: "IBA 12.9.5 / 12.6.10 (unverified clauses): a DREQ in the REP-sent state (no RTU yet) ends the connection with a DREP",
            play: dreq_before_rtu,
        },
        CmScenario {
            name: "cm-dreq-twice",
            rule: "IBA 12.9.8 (unverified clause): a DREQ repeated in the TimeWait state is answered with a DREP again",
            play: dreq_twice,
        },
        CmScenario {
            name: "cm-request-after-dreq",
            rule: "IBA 12.6.10 / 10.3.1 (unverified clauses): a connection ended by a DREQ (its DREP received, then a quiet period: --quiet-ms, 300 by default) has its QP in the Error state or destroyed: a request on it is dropped silently, no ACK or NAK",
            play: request_after_dreq,
        },
    ]
}

/// Communication IDs of CM scenarios across runs of one process.
static RUNS: AtomicU32 = AtomicU32::new(0);

/// Runs one CM scenario, with its own communication ID and QPN.
pub fn run(link: &mut Link, s: &CmScenario, o: &Options) -> Outcome {
    let n = RUNS.fetch_add(1, Ordering::Relaxed) & 0xffff;
    let comm_id = (std::process::id() << 16) ^ n ^ 0x3c00_0000;
    let req = cm::Request { port: o.port, qpn: 0x00e0_0000 + n, psn: 0x60_0000, mtu_code: o.mtu_code, comm_id };
    let mark = link.mark();
    let (verdict, expected, observed) = (s.play)(link, o, req);
    // Leave the peer's CM its time: a REP it keeps resending would be the next scenario's.
    let _ = gather(link, u32::MAX, Instant::now() + Duration::from_millis(20), |_| false);
    Outcome { name: s.name, rule: s.rule, verdict, expected, observed, capture: link.records_since(mark).to_vec() }
}
