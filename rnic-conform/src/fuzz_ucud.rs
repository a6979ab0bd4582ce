//! Mutation fuzzing of UD and UC (issue 35), the transports that answer nothing: valid
//! datagrams (UD SEND ONLY, with immediate or not, two a mutant) or messages (UC SEND and
//! RDMA WRITE, ONLY or FIRST, MIDDLE, LAST, with immediate or not) on a [`Session`], one
//! packet of each mutant changed by a [`Rule`] of [`UD_RULES`] or [`UC_RULES`]: a bit flip
//! or a boundary value in a BTH, DETH or RETH field or the payload, another opcode (the
//! transport's own, another transport's, a reserved one), a PadCnt the payload does not
//! have, a length against the receive buffer, a cut at a header boundary, a bad ICRC; or,
//! on the sequence, a packet duplicated, dropped or swapped with the next.
//!
//! The model reads each packet as a conforming receiver does: [`classify_as`] applies the
//! header checks of IBA 9.6 (a packet failing one is dropped silently), then
//! [`UdReceiver`] or [`UcResponder`] the transport's rules to what is left. What the peer
//! did is read over the session after each mutant, once it has had `quiet` to do it: its
//! new receive completions against the model's (exact count; status, length, source QP,
//! flags, immediate data; the bytes delivered), for UC its whole region against the
//! model's, and nothing may have come back on the wire (UC and UD never answer). A UC
//! mutant ends with a probe, a valid WRITE ONLY at the PSN the model expects next: the QP
//! takes a new message after whatever the mutant left (IBA 9.8.3: a FIRST or ONLY at any
//! PSN starts one).
//!
//! A session is used until the model has fewer than 4 receives left, a mutant does not
//! pass, or the model cannot judge what a mutant left (the codec cannot read a packet);
//! then the next mutant gets a new one. Mutant `i` of seed `s` is drawn from
//! `Rng::new(s, i)` alone, relative to what the model holds (the PSN it expects, the
//! region), so `--fuzz-only i` replays it on a fresh session.

use crate::fuzz::{flip, mutate, put, FuzzOptions, FuzzReport, MutantOutcome, Rng, Rule, Service};
use crate::link::Link;
use crate::model::{classify_as, Region, Request, UcRecv, UcResponder, UdReceiver, View};
use crate::scenario::{rw_pattern, Advert, Env, Options, Verdict};
use crate::session::{Completion, Kind, Session, WC_WITH_IMM};
use crate::ud::{describe, describe_model, judge_receives};
use rnic_wire::deth::DethRepr;
use rnic_wire::opcode::Transport;
use rnic_wire::reth::RethRepr;
use rnic_wire::roce::ExtHeaders;
use rnic_wire::{Opcode, Psn, Qpn};
use std::time::Instant;

/// A packet as sent: BTH..ICRC (the ICRC filled when sent), made wrong or not.
#[derive(Debug, Clone)]
struct Wire {
    bytes: Vec<u8>,
    bad_icrc: bool,
}

impl Wire {
    fn of(r: &Request) -> Wire {
        let mut bytes = vec![0u8; r.repr.buffer_len()];
        // The builders make only what the codec writes; a failure leaves zeros, which the
        // model reads as the peer would (opcode 0: another transport's, dropped).
        let _ = r.repr.emit(&mut bytes, &r.payload);
        Wire { bytes, bad_icrc: false }
    }
}

/// One mutant: its base, its rule, what was changed, the packets in the order sent.
#[derive(Debug, Clone)]
struct Mutant {
    base: &'static str,
    rule: Rule,
    detail: String,
    wires: Vec<Wire>,
}

/// The bytes of the region kept for the UC probes (its last ones).
const PROBE_AREA: u32 = 4096;

fn packet(op: Opcode, dest: u32, psn: Psn, ext: ExtHeaders, payload: Vec<u8>) -> Request {
    Request::new(op, dest, psn, false, ext, payload)
}

fn bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next_u64().to_le_bytes()[0]).collect()
}

fn low32(rng: &mut Rng) -> u32 {
    u32::try_from(rng.next_u64() >> 32).unwrap_or(0)
}

/// The peer as a mutant is drawn for it.
#[derive(Debug, Clone, Copy)]
struct Peer {
    /// Its QPN.
    qpn: u32,
    /// The tester's QPN (UD: the DETH's source QP).
    src: u32,
    /// UD: its Q_Key.
    qkey: u32,
    /// UC: the PSN the model expects next.
    psn: u32,
    /// Its region: VA, R_Key, length.
    rw: (u64, u32, u32),
    /// Path MTU in bytes.
    pmtu: usize,
    /// Bytes a receive takes (UD: the 40-byte GRH area included).
    recv_len: u32,
    recvs: u32,
}

impl Peer {
    /// What `fuzz::mutate` reads: the region and the PMTU (no read-only region: its VA
    /// and R_Key 0, which no region has).
    fn env(&self) -> Env {
        Env {
            dest: self.qpn,
            psn: self.psn,
            pmtu: self.pmtu,
            ad: Advert { rw: self.rw, ro: (0, 0, 0), recvs: self.recvs, recv_len: self.recv_len },
        }
    }
}

/// Another opcode for the packet `w`: of the transport `own` (its every opcode and
/// reserved ones), of another transport, or reserved.
fn other_opcode(w: &mut [u8], rng: &mut Rng, own: &[u8]) -> String {
    const OTHERS: [u8; 12] = [0x00, 0x04, 0x06, 0x0a, 0x10, 0x11, 0x24, 0x2a, 0x64, 0x81, 0xa4, 0xff];
    let mut op = if rng.below(2) == 0 { rng.pick(own) } else { rng.pick(&OTHERS) };
    if op == w[0] {
        op = op.wrapping_add(1);
    }
    let was = Opcode(w[0]);
    w[0] = op;
    format!("opcode {} -> {} ({op:#04x})", was.name(), Opcode(op).name())
}

/// Changes one field of the packet `w` (of `req`) as `rule` says; what it did.
fn change(rule: Rule, w: &mut Vec<u8>, req: &Request, rng: &mut Rng, p: &Peer, service: Service) -> String {
    let info = req.repr.info();
    let ext_end = info.map_or(12, |i| i.payload_offset());
    let len = w.len();
    let payload_end = len - 4 - (4 - req.payload.len() % 4) % 4;
    match rule {
        Rule::Opcode => {
            let own: Vec<u8> = match service {
                // UD: its two SEND opcodes and the reserved rest of 0x60..0x7F.
                Service::Ud => vec![0x64, 0x65, 0x60, 0x66, 0x6f, 0x7f],
                _ => (0x20..0x2c).chain([0x2c, 0x30, 0x3f]).collect(),
            };
            other_opcode(w, rng, &own)
        }
        Rule::PKey => {
            let k = rng.pick(&[0x7fffu16, 0xffff, 0x0000, 0x8000, 0xfffe, 0x7ffe, 0x8001, 0x8123, 0x1234]);
            put(w, 2, &k.to_be_bytes());
            format!("P_Key {k:#06x}")
        }
        Rule::QKey => {
            let old = u32::from_be_bytes([w[12], w[13], w[14], w[15]]);
            let bit = rng.below(32);
            let new = rng.pick(&[
                old ^ (1 << bit),
                old ^ 0x8000_0000,
                old | 0x8000_0000,
                0,
                u32::MAX,
                0x8000_0000,
                0x7fff_ffff,
                old.wrapping_add(1),
            ]);
            put(w, 12, &new.to_be_bytes());
            format!("Q_Key {old:#010x} -> {new:#010x}")
        }
        Rule::SrcQp => {
            let old = u32::from_be_bytes([0, w[17], w[18], w[19]]);
            let bit = rng.index(24);
            let any = low32(rng) & 0xff_ffff;
            let new = rng.pick(&[0, 1, 0xff_ffff, old ^ (1 << bit), any]);
            put(w, 17, &new.to_be_bytes()[1..]);
            format!("source QP {old:#08x} -> {new:#08x}")
        }
        Rule::ExtBitFlip => flip(w, 12, ext_end.max(13), rng),
        Rule::PayloadBitFlip => flip(w, ext_end, payload_end.max(ext_end + 1), rng),
        _ => mutate(rule, w, rng, &p.env(), info, ext_end, payload_end),
    }
}

/// UD mutant `index` of `seed`: two valid datagrams, one of them mutated.
fn draw_ud(seed: u64, index: u32, p: &Peer) -> Mutant {
    let mut rng = Rng::new(seed, index);
    let rule = rng.pick(&crate::fuzz::UD_RULES);
    let imm = rng.below(2) == 0;
    let base = if imm { "UD SEND ONLY with immediate" } else { "UD SEND ONLY" };
    // What fits a receive after its GRH area, and a PMTU.
    let fit = usize::try_from(p.recv_len).unwrap_or(0).saturating_sub(40).min(p.pmtu).max(1);
    let j = if rule == Rule::Reorder { 0 } else { rng.index(2) };
    let dgram = |rng: &mut Rng, imm: bool, n: usize| {
        let op = if imm { Opcode::UD_SEND_ONLY_WITH_IMMEDIATE } else { Opcode::UD_SEND_ONLY };
        let ext = ExtHeaders {
            deth: Some(DethRepr { qkey: p.qkey, src_qp: Qpn::new(p.src) }),
            imm_data: imm.then(|| low32(rng)),
            ..ExtHeaders::default()
        };
        let psn = Psn::new(low32(rng) & 0xff_ffff);
        let payload = bytes(rng, n);
        packet(op, p.qpn, psn, ext, payload)
    };
    let mut reqs = Vec::new();
    for k in 0..2 {
        let n = 1 + rng.index(fit);
        let i = if k == j { imm } else { rng.below(2) == 0 };
        reqs.push(dgram(&mut rng, i, n));
    }
    let mut detail = String::new();
    if rule == Rule::Length {
        let mut lens = vec![0, 1, fit - 1, fit, fit + 1, p.pmtu];
        lens.retain(|&n| n <= p.pmtu);
        let n = rng.pick(&lens);
        reqs[j] = dgram(&mut rng, imm, n);
        detail = format!("{n} bytes of payload ({fit} fit the receive after its GRH area)");
    }
    sequence(rule, reqs, j, &mut rng, p, Service::Ud, base, detail)
}

/// Applies `rule` to packet `j` of `reqs` (the packets of a mutant, valid), or to the
/// sequence.
#[allow(clippy::too_many_arguments)]
fn sequence(
    rule: Rule,
    reqs: Vec<Request>,
    j: usize,
    rng: &mut Rng,
    p: &Peer,
    service: Service,
    base: &'static str,
    detail: String,
) -> Mutant {
    let mut wires: Vec<Wire> = reqs.iter().map(Wire::of).collect();
    let n = wires.len();
    let detail = match rule {
        Rule::Length => detail,
        Rule::BadIcrc => {
            wires[j].bad_icrc = true;
            "ICRC wrong".into()
        }
        Rule::Duplicate => {
            let d = wires[j].clone();
            wires.insert(j + 1, d);
            format!("packet {j} sent twice")
        }
        Rule::Reorder => {
            if j + 1 < wires.len() {
                wires.swap(j, j + 1);
            }
            format!("packets {j} and {} swapped", j + 1)
        }
        Rule::Drop => {
            wires.remove(j);
            format!("packet {j} not sent")
        }
        _ => change(rule, &mut wires[j].bytes, &reqs[j], rng, p, service),
    };
    let detail = if n > 1 && !matches!(rule, Rule::Duplicate | Rule::Reorder | Rule::Drop) {
        format!("packet {j}: {detail}")
    } else {
        detail
    };
    Mutant { base, rule, detail, wires }
}

/// UC mutant `index` of `seed`: a valid message at the PSN the model expects, one of its
/// packets mutated.
fn draw_uc(seed: u64, index: u32, p: &Peer) -> Mutant {
    let mut rng = Rng::new(seed, index);
    let rule = rng.pick(&crate::fuzz::UC_RULES);
    const ALL: [&str; 6] = [
        "SEND ONLY",
        "SEND ONLY with immediate",
        "SEND FIRST..LAST",
        "WRITE ONLY",
        "WRITE ONLY with immediate",
        "WRITE FIRST..LAST",
    ];
    let mut bases: Vec<&str> = match rule {
        Rule::RethVa | Rule::RethRkey | Rule::RethLen => vec![ALL[3], ALL[4], ALL[5]],
        Rule::ExtBitFlip => vec![ALL[1], ALL[3], ALL[4], ALL[5]],
        Rule::Reorder => vec![ALL[2], ALL[5]],
        _ => ALL.to_vec(),
    };
    // A SEND of several packets only where three PMTUs fit the receive buffer.
    if p.pmtu * 3 > usize::try_from(p.recv_len).unwrap_or(0) {
        bases.retain(|b| *b != ALL[2]);
    }
    let base = rng.pick(&bases);
    let pm = p.pmtu;
    let (rva, rkey, rlen) = p.rw;
    let room = u64::from(rlen.saturating_sub(PROBE_AREA)).saturating_sub(3 * u64::try_from(pm).unwrap_or(0)).max(8);
    let va = rva + (rng.below(room) & !7);
    let psn = Psn::new(p.psn);
    let u32_of = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let reth = |va: u64, len: usize| ExtHeaders {
        reth: Some(RethRepr { va, rkey, dma_len: u32_of(len) }),
        ..ExtHeaders::default()
    };
    let d = p.qpn;
    let reqs: Vec<Request> = match base {
        "SEND ONLY" => {
            let n = 1 + rng.index(pm);
            vec![packet(Opcode::UC_SEND_ONLY, d, psn, ExtHeaders::default(), bytes(&mut rng, n))]
        }
        "SEND ONLY with immediate" => {
            let n = 1 + rng.index(pm);
            let ext = ExtHeaders { imm_data: Some(low32(&mut rng)), ..ExtHeaders::default() };
            vec![packet(Opcode::UC_SEND_ONLY_WITH_IMMEDIATE, d, psn, ext, bytes(&mut rng, n))]
        }
        "SEND FIRST..LAST" => {
            let last = 1 + rng.index(pm);
            vec![
                packet(Opcode::UC_SEND_FIRST, d, psn, ExtHeaders::default(), bytes(&mut rng, pm)),
                packet(Opcode::UC_SEND_MIDDLE, d, psn.add(1), ExtHeaders::default(), bytes(&mut rng, pm)),
                packet(Opcode::UC_SEND_LAST, d, psn.add(2), ExtHeaders::default(), bytes(&mut rng, last)),
            ]
        }
        "WRITE ONLY" => {
            let n = 1 + rng.index(pm);
            vec![packet(Opcode::UC_RDMA_WRITE_ONLY, d, psn, reth(va, n), bytes(&mut rng, n))]
        }
        "WRITE ONLY with immediate" => {
            let n = 1 + rng.index(pm);
            let ext = ExtHeaders { imm_data: Some(low32(&mut rng)), ..reth(va, n) };
            vec![packet(Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, d, psn, ext, bytes(&mut rng, n))]
        }
        _ => {
            let last = 1 + rng.index(pm);
            vec![
                packet(Opcode::UC_RDMA_WRITE_FIRST, d, psn, reth(va, 2 * pm + last), bytes(&mut rng, pm)),
                packet(Opcode::UC_RDMA_WRITE_MIDDLE, d, psn.add(1), ExtHeaders::default(), bytes(&mut rng, pm)),
                packet(Opcode::UC_RDMA_WRITE_LAST, d, psn.add(2), ExtHeaders::default(), bytes(&mut rng, last)),
            ]
        }
    };
    let n = reqs.len();
    let j = match rule {
        // The RETH is in the first packet.
        Rule::ExtBitFlip | Rule::RethVa | Rule::RethRkey | Rule::RethLen => 0,
        Rule::Reorder => rng.index(n.saturating_sub(1).max(1)),
        _ => rng.index(n),
    };
    sequence(rule, reqs, j, &mut rng, p, Service::Uc, base, String::new())
}

/// The model of the peer's QP on a session.
#[derive(Debug, Clone)]
enum Model {
    Ud(UdReceiver),
    Uc(UcResponder),
}

/// A session and the model of the peer's QP on it.
struct Live {
    peer: Session,
    model: Model,
    /// The tester's QPN.
    src: u32,
    /// The peer's receive completions read so far.
    seen: usize,
    pmtu: usize,
}

impl Live {
    fn recvs(&self) -> u32 {
        match &self.model {
            Model::Ud(m) => m.recvs(),
            Model::Uc(m) => m.recvs(),
        }
    }

    fn peer_now(&self) -> Peer {
        let psn = match &self.model {
            Model::Uc(m) => m.epsn().value(),
            Model::Ud(_) => 0,
        };
        Peer {
            qpn: self.peer.qpn,
            src: self.src,
            qkey: self.peer.qkey,
            psn,
            rw: self.peer.rw,
            pmtu: self.pmtu,
            recv_len: self.peer.recv_len,
            recvs: self.peer.recvs,
        }
    }
}

fn open(link: &Link, o: &Options, f: &FuzzOptions, service: Service) -> Result<Live, String> {
    let (kind, src) = match service {
        Service::Ud => (Kind::Ud, crate::session::tester_qpn(0x00e0_0000, 0x8_0000)),
        _ => (Kind::Uc, crate::session::tester_qpn(0x00e8_0000, 0x8_0000)),
    };
    let peer = Session::open(link, o.port, kind, src, o.mtu_code, None, o.cm_wait)?;
    let pmtu = 128usize << o.mtu_code;
    // The planted violation (tests only): the model told a key the peer does not have.
    let twist = if f.plant { 1 } else { 0 };
    let model = match service {
        Service::Ud => Model::Ud(UdReceiver::new(peer.qpn, peer.qkey ^ twist, peer.recvs, u64::from(peer.recv_len))),
        _ => {
            let rw_len = usize::try_from(peer.rw.2).unwrap_or(0);
            let region = Region {
                va: peer.rw.0,
                rkey: peer.rw.1 ^ twist,
                write: true,
                read: false,
                atomic: false,
                data: rw_pattern(rw_len),
            };
            Model::Uc(UcResponder::new(Psn::new(peer.epsn), peer.recvs, u64::from(peer.recv_len), pmtu, vec![region]))
        }
    };
    Ok(Live { peer, model, src, seen: 0, pmtu })
}

/// What a UC completion is, in a line.
fn describe_uc(c: &Completion) -> String {
    let mut s = format!("receive completion: status {}, {} bytes (wr_id {})", c.status, c.byte_len, c.wr_id);
    if c.flags & WC_WITH_IMM != 0 {
        s += &format!(", imm {:#x}", c.imm);
    }
    s
}

fn describe_uc_model(w: &UcRecv) -> String {
    let mut s = if w.write {
        "receive completion: success (an RDMA WRITE with immediate)".to_string()
    } else {
        format!("receive completion: success, {} bytes", w.data.len())
    };
    if let Some(i) = w.imm {
        s += &format!(", imm {i:#x}");
    }
    s
}

/// Where the UC completions `got` differ from the model's `want`: the same count, in
/// order, each a success with the model's length and immediate data (a WRITE with
/// immediate: its length not judged), each SEND's buffer holding its bytes.
fn judge_uc(peer: &mut Session, want: &[UcRecv], got: &[Completion]) -> Vec<String> {
    let mut why = Vec::new();
    if got.len() != want.len() {
        why.push(format!("{} receive completion(s), the model has {}", got.len(), want.len()));
        return why;
    }
    for (g, w) in got.iter().zip(want) {
        let imm_ok = (g.flags & WC_WITH_IMM != 0) == w.imm.is_some() && w.imm.is_none_or(|i| i == g.imm);
        let len_ok = w.write || usize::try_from(g.byte_len).ok() == Some(w.data.len());
        if g.status != 0 || !len_ok || !imm_ok {
            why.push(format!("{}, not {}", describe_uc(g), describe_uc_model(w)));
        } else if !w.write {
            let len = u32::try_from(w.data.len()).unwrap_or(0);
            match peer.receive_buffer(g.wr_id, len) {
                Ok(b) if b == w.data => {}
                Ok(_) => why.push(format!("receive buffer {} does not hold the message's bytes", g.wr_id)),
                Err(e) => why.push(e),
            }
        }
    }
    why
}

/// Plays mutant `m` on `live`; its outcome and whether the session is good for the next.
fn play(
    link: &mut Link,
    live: &mut Live,
    m: &Mutant,
    index: u32,
    o: &Options,
    service: Service,
) -> (MutantOutcome, bool) {
    let qpn = live.peer.qpn;
    let t = if service == Service::Ud { Transport::Ud } else { Transport::Uc };
    let mark = link.mark();
    let (before, dropped_before) = match &live.model {
        Model::Ud(md) => (md.completions.len(), md.dropped.len()),
        Model::Uc(md) => (md.completions.len(), 0),
    };
    let mut unjudged: Option<String> = None;
    let mut drops: Vec<String> = Vec::new();
    let mut sent = Ok(());
    // The QPNs an answer would go to: the tester's and each source QP a DETH named.
    let mut ours = vec![live.src];
    let mut send = |link: &mut Link, w: &Wire, live: &mut Live, drops: &mut Vec<String>| {
        let views = if w.bad_icrc { vec![View::Drop("bad ICRC (IBA C9-3)")] } else { classify_as(&w.bytes, qpn, t) };
        for v in views.into_iter().take(1) {
            match v {
                View::Request(r) => match &mut live.model {
                    Model::Ud(md) => md.handle(&r),
                    Model::Uc(md) => md.handle(&r),
                },
                View::Drop(why) => drops.push(format!("packet dropped: {why}")),
                View::Invalid { why, .. } => drops.push(format!("packet dropped: {why}")),
                View::Unjudged(why) => unjudged = Some(why),
            }
        }
        if service == Service::Ud && w.bytes.len() >= 20 {
            ours.push(u32::from_be_bytes([0, w.bytes[17], w.bytes[18], w.bytes[19]]));
        }
        link.send_raw(w.bytes.clone(), w.bad_icrc)
    };
    for w in &m.wires {
        sent = sent.and_then(|()| send(link, w, live, &mut drops));
    }
    // UC: the probe, a WRITE ONLY at the PSN the model expects next, into the probe area.
    let mut probe_at = None;
    let epsn = match &live.model {
        Model::Uc(md) => Some(md.epsn()),
        Model::Ud(_) => None,
    };
    if let Some(epsn) = epsn {
        let (rva, rkey, rlen) = live.peer.rw;
        let off = rlen.saturating_sub(PROBE_AREA) + (index % (PROBE_AREA / 16)) * 16;
        let ext = ExtHeaders {
            reth: Some(RethRepr { va: rva + u64::from(off), rkey, dma_len: 16 }),
            ..ExtHeaders::default()
        };
        let payload: Vec<u8> = (0..16u8).map(|i| i ^ index.to_le_bytes()[0] ^ 0xa5).collect();
        let probe = packet(Opcode::UC_RDMA_WRITE_ONLY, qpn, epsn, ext, payload);
        probe_at = Some(off);
        sent = sent.and_then(|()| send(link, &Wire::of(&probe), live, &mut drops));
    }
    // Nothing comes back from UC or UD: whatever reaches the tester's QPNs in `quiet`
    // (time for the peer to take what was sent, too) is a divergence.
    let mut back = Vec::new();
    let end = Instant::now() + o.quiet;
    while let Some(p) = link.recv(end) {
        if ours.contains(&p.repr.bth.dest_qp.value()) && p.repr.bth.opcode != Opcode::CNP {
            back.push(format!(
                "{} to QP {:#x} psn={:#08x}",
                p.repr.bth.opcode.name(),
                p.repr.bth.dest_qp.value(),
                p.repr.bth.psn.value()
            ));
        }
    }
    let mut out = MutantOutcome {
        index,
        rule: m.rule,
        base: m.base,
        detail: m.detail.clone(),
        verdict: Verdict::Pass,
        unjudged: unjudged.clone(),
        expected: Vec::new(),
        observed: Vec::new(),
        capture: link.records_since(mark).to_vec(),
    };
    if let Err(e) = sent {
        out.verdict = Verdict::NotRun(format!("sending: {e}"));
        return (out, false);
    }
    let all = match live.peer.completions() {
        Ok(c) => c,
        Err(e) => {
            out.verdict = Verdict::NoAnswer(format!("the responder's completions: {e}"));
            return (out, false);
        }
    };
    let got: Vec<Completion> = all.get(live.seen..).map(<[Completion]>::to_vec).unwrap_or_default();
    live.seen = all.len();
    let mut why: Vec<String> = Vec::new();
    if !back.is_empty() {
        why.push(format!("a {} receiver sent {} packet(s) back", service.name(), back.len()));
    }
    out.expected = drops;
    match &live.model {
        Model::Ud(md) => {
            let want = md.completions.get(before..).unwrap_or_default();
            out.expected
                .extend(md.dropped.get(dropped_before..).unwrap_or_default().iter().map(|d| format!("dropped: {d}")));
            out.expected.extend(want.iter().map(describe_model));
            out.observed = got.iter().map(describe).collect();
            if unjudged.is_none() {
                why.extend(judge_receives(&mut live.peer, link, want, &got));
            }
        }
        Model::Uc(md) => {
            let want = md.completions.get(before..).unwrap_or_default();
            out.expected.extend(want.iter().map(describe_uc_model));
            out.observed = got.iter().map(describe_uc).collect();
            if unjudged.is_none() {
                why.extend(judge_uc(&mut live.peer, want, &got));
                // The whole region against the model's: a WRITE that should have been
                // dropped, or one that landed elsewhere, shows here.
                let rlen = live.peer.rw.2;
                let model_bytes = md.region(0).map(|r| r.data.clone()).unwrap_or_default();
                out.expected.push("the region as the model has it".into());
                match live.peer.memory(0, rlen) {
                    Ok(b) if b == model_bytes => out.observed.push("the region as the model has it".into()),
                    Ok(b) => {
                        let diff: Vec<usize> =
                            (0..b.len().min(model_bytes.len())).filter(|&i| b[i] != model_bytes[i]).collect();
                        let first = diff.first().copied().unwrap_or(0);
                        let last = diff.last().copied().unwrap_or(0);
                        let probe = probe_at.map_or(String::new(), |p| format!(" (the probe wrote at {p})"));
                        let s = format!(
                            "region bytes {first}..={last} differ from the model's ({} bytes){probe}",
                            diff.len()
                        );
                        out.observed.push(s.clone());
                        why.push(s);
                    }
                    Err(e) => why.push(e),
                }
            }
        }
    }
    out.observed.extend(back.iter().map(|b| format!("on the wire: {b}")));
    if out.observed.is_empty() {
        out.observed.push("nothing".into());
    }
    if unjudged.is_some() {
        return (out, false);
    }
    if !why.is_empty() {
        out.verdict = Verdict::Diverges(why.join("; "));
        return (out, false);
    }
    (out, true)
}

/// Runs the UD or UC fuzzer: `f.count` mutants (or `f.only`) against the peer's
/// responder, over sessions.
pub fn run(link: &mut Link, o: &Options, f: &FuzzOptions, service: Service) -> FuzzReport {
    let mut rep = FuzzReport {
        service,
        seed: f.seed,
        per_rule: service.rules().iter().map(|&r| (r, 0, 0)).collect(),
        ..FuzzReport::default()
    };
    let indices: Vec<u32> = f.only.clone().unwrap_or_else(|| (0..f.count).collect());
    let fresh_each = f.only.is_some();
    let mut live: Option<Live> = None;
    let mut last: Option<u32> = None;
    for index in indices {
        if live.as_ref().is_some_and(|l| fresh_each || l.recvs() < 4) {
            live = None;
        }
        if live.is_none() {
            match open(link, o, f, service) {
                Ok(l) => {
                    rep.connections += 1;
                    live = Some(l);
                }
                Err(e) => {
                    rep.stopped = Some(match last {
                        Some(i) => format!("after mutant {i}, the peer makes no new session: {e}"),
                        None => format!("no session: {e}"),
                    });
                    break;
                }
            }
        }
        let Some(l) = live.as_mut() else { break };
        let p = l.peer_now();
        let m = if service == Service::Ud { draw_ud(f.seed, index, &p) } else { draw_uc(f.seed, index, &p) };
        let (out, keep) = play(link, l, &m, index, o, service);
        last = Some(index);
        rep.played += 1;
        let slot = rep.per_rule.iter_mut().find(|(r, _, _)| *r == m.rule);
        match (&out.verdict, &out.unjudged) {
            (Verdict::Pass, None) => {
                rep.passed += 1;
                if let Some(s) = slot {
                    s.1 += 1;
                    s.2 += 1;
                }
            }
            (Verdict::Pass, Some(why)) => {
                if let Some(s) = slot {
                    s.1 += 1;
                }
                rep.unjudged += 1;
                rep.not_judged.push((index, m.rule, format!("{}, {}: {why}", m.base, m.detail)));
            }
            _ => {
                if let Some(s) = slot {
                    s.1 += 1;
                }
                rep.failures.push(out);
            }
        }
        if !keep {
            live = None;
        }
    }
    rep
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::{UC_RULES, UD_RULES};

    fn peer() -> Peer {
        Peer {
            qpn: 0x42,
            src: 0xe0_0001,
            qkey: 0x11a5_c0de,
            psn: 0x100,
            rw: (0x10_0000, 0x111, 65536),
            pmtu: 1024,
            recv_len: 40 + 256,
            recvs: 16,
        }
    }

    #[test]
    fn a_mutant_is_the_same_for_the_same_seed_and_index_and_every_rule_is_drawn() {
        let p = peer();
        for draw in [draw_ud, draw_uc] {
            for i in 0..100 {
                let (a, b) = (draw(7, i, &p), draw(7, i, &p));
                assert_eq!(a.detail, b.detail);
                assert_eq!(
                    a.wires.iter().map(|w| &w.bytes).collect::<Vec<_>>(),
                    b.wires.iter().map(|w| &w.bytes).collect::<Vec<_>>()
                );
            }
        }
        let ud: Vec<Rule> = (0..1000).map(|i| draw_ud(1, i, &p).rule).collect();
        let uc: Vec<Rule> = (0..1000).map(|i| draw_uc(1, i, &p).rule).collect();
        assert!(UD_RULES.iter().all(|r| ud.contains(r)));
        assert!(UC_RULES.iter().all(|r| uc.contains(r)));
    }

    /// What the UD model makes of every mutant of a seed: the header checks drop what
    /// they must, and a valid datagram is delivered.
    #[test]
    fn the_ud_model_delivers_and_drops_as_the_rules_say() {
        let p = peer();
        let mut delivered = 0;
        let mut dropped = 0;
        for i in 0..400 {
            let m = draw_ud(3, i, &p);
            let mut md = UdReceiver::new(p.qpn, p.qkey, 64, u64::from(p.recv_len));
            let mut drops = 0;
            for w in &m.wires {
                let v =
                    if w.bad_icrc { vec![View::Drop("bad ICRC")] } else { classify_as(&w.bytes, p.qpn, Transport::Ud) };
                assert_eq!(v.len(), 1, "{v:?}");
                match &v[0] {
                    View::Request(r) => md.handle(r),
                    View::Drop(_) => drops += 1,
                    View::Invalid { .. } => panic!("UD refuses nothing"),
                    View::Unjudged(_) => {}
                }
            }
            let gone = drops + md.dropped.len();
            match m.rule {
                Rule::TVer | Rule::BadIcrc => assert_eq!(gone, 1, "{}", m.detail),
                Rule::QKey => assert_eq!(gone, 1, "{}", m.detail),
                Rule::SrcQp | Rule::Psn | Rule::Flags => {
                    assert_eq!(gone, 0, "{}", m.detail);
                    assert_eq!(md.completions.len(), 2);
                }
                Rule::Duplicate => assert_eq!(md.completions.len(), 3, "{}", m.detail),
                Rule::Drop => assert_eq!(md.completions.len(), 1, "{}", m.detail),
                _ => {}
            }
            delivered += md.completions.len();
            dropped += gone;
        }
        assert!(delivered > 400 && dropped > 50, "{delivered} {dropped}");
    }

    #[test]
    fn the_uc_model_takes_a_message_after_any_mutant() {
        let p = peer();
        let region = Region { va: p.rw.0, rkey: p.rw.1, write: true, read: false, atomic: false, data: vec![0; 65536] };
        for i in 0..300 {
            let m = draw_uc(5, i, &p);
            let mut md = UcResponder::new(Psn::new(p.psn), 64, 4096, p.pmtu, vec![region.clone()]);
            for w in &m.wires {
                let v =
                    if w.bad_icrc { vec![View::Drop("bad ICRC")] } else { classify_as(&w.bytes, p.qpn, Transport::Uc) };
                assert_eq!(v.len(), 1, "{v:?}");
                if let View::Request(r) = &v[0] {
                    md.handle(r);
                }
            }
            // A SEND ONLY at the PSN expected next is always taken.
            let before = md.completions.len();
            md.handle(&packet(Opcode::UC_SEND_ONLY, p.qpn, md.epsn(), ExtHeaders::default(), vec![1; 8]));
            assert_eq!(md.completions.len(), before + 1, "mutant {i}: {}", m.detail);
            if m.rule == Rule::TVer || m.rule == Rule::BadIcrc {
                assert_eq!(before, 0, "{}", m.detail);
            }
        }
    }
}
