//! Mutation fuzzing of a live RC connection (issue 35): valid requests (SEND, WRITE, READ,
//! atomics, one packet or several) are built at the PSN the peer expects, one of them is
//! mutated by a [`Rule`] (a bit flip or a boundary value in a BTH, RETH or AtomicETH field
//! or the payload, a wrong opcode, a PadCnt the payload does not have, a cut at a header
//! boundary, a bad ICRC; or, on the sequence, a packet duplicated, dropped or swapped with
//! the next), and the model says what a conforming responder answers: [`classify`] reads
//! the packet as the IBA's header checks do (a packet failing one is dropped silently),
//! [`Responder::handle`] applies the transport's rules to what is left.
//!
//! After each mutant the tester acts as a conforming requester would: it retransmits the
//! rest of the message from the PSN the model says the peer expects (go-back-N), then
//! sends a probe, an RDMA READ of the memory the request aimed at, at the next PSN. The
//! probe's answer shows the QP alive and its memory as the model has it (a WRITE that
//! should have been dropped but was executed shows there). Where the model says the QP
//! went to the Error state the tester connects again. A peer that answers nothing in
//! `answer_wait` is "peer stopped answering"; one that then refuses a new connection
//! ends the run.
//!
//! Where the IBA leaves a choice (a reserved opcode dropped or NAKed, two rules broken at
//! once whose check order the IBA does not fix) every choice is a branch of the model and
//! any one passes. Where the model cannot know the peer's state (a duplicate READ at a PSN
//! it never saw a READ at, an optional operation) the mutant is "unjudged": counted, not
//! passed, and the connection made again.
//!
//! Mutant `i` of seed `s` is drawn from `Rng::new(s, i)` alone, relative to the state the
//! model holds (PSNs from the expected PSN, addresses in the advertised regions), so
//! `--fuzz-only i` replays it on a fresh connection.

use crate::cm::{self, Connection};
use crate::judge::{answer_of, judge, matches};
use crate::link::{Link, Record};
use crate::model::{classify, Answer, Request, Responder, View};
use crate::scenario::{self, Env, Options, Verdict};
use rnic_wire::atomic::AtomicEthRepr;
use rnic_wire::opcode::OpcodeInfo;
use rnic_wire::roce::ExtHeaders;
use rnic_wire::{Opcode, Psn};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A small deterministic generator (splitmix64): the same seed and index give the same
/// mutant on every machine.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The generator of mutant `index` of `seed`.
    pub fn new(seed: u64, index: u32) -> Rng {
        let mut r = Rng(seed ^ u64::from(index).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        r.next_u64();
        r
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    pub(crate) fn index(&mut self, n: usize) -> usize {
        usize::try_from(self.below(u64::try_from(n).unwrap_or(u64::MAX))).unwrap_or(0)
    }

    pub(crate) fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.index(v.len())]
    }
}

/// The transport whose connection is fuzzed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Service {
    /// Reliable connected, through the CM (this module).
    #[default]
    Rc,
    /// Unreliable connected, on a session ([`crate::fuzz_ucud`]).
    Uc,
    /// Unreliable datagram, on a session ([`crate::fuzz_ucud`]).
    Ud,
}

impl Service {
    /// "RC", "UC", "UD".
    pub fn name(self) -> &'static str {
        match self {
            Service::Rc => "RC",
            Service::Uc => "UC",
            Service::Ud => "UD",
        }
    }

    /// The rules its mutants are drawn from.
    pub fn rules(self) -> &'static [Rule] {
        match self {
            Service::Rc => &RULES,
            Service::Uc => &UC_RULES,
            Service::Ud => &UD_RULES,
        }
    }
}

/// The valid requests a mutant starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    /// SEND ONLY.
    SendOnly,
    /// SEND FIRST, MIDDLE, LAST.
    SendMulti,
    /// RDMA WRITE ONLY.
    WriteOnly,
    /// RDMA WRITE FIRST, MIDDLE, LAST.
    WriteMulti,
    /// RDMA READ.
    Read,
    /// FETCH & ADD.
    FetchAdd,
    /// COMPARE & SWAP.
    CmpSwap,
}

impl Base {
    fn name(self) -> &'static str {
        match self {
            Base::SendOnly => "SEND ONLY",
            Base::SendMulti => "SEND FIRST..LAST",
            Base::WriteOnly => "WRITE ONLY",
            Base::WriteMulti => "WRITE FIRST..LAST",
            Base::Read => "READ",
            Base::FetchAdd => "FETCH_ADD",
            Base::CmpSwap => "CMP_SWAP",
        }
    }
}

/// How a mutant is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// One bit of the BTH flipped.
    BthBitFlip,
    /// One bit of the RETH or AtomicETH flipped.
    ExtBitFlip,
    /// One bit of the payload flipped.
    PayloadBitFlip,
    /// Another opcode: another operation, the wrong place in a message, a response, another
    /// transport's, a reserved one.
    Opcode,
    /// The PSN moved: ±1, ±2, ±2^23 and the like.
    Psn,
    /// A P_Key of another partition, or the limited-member form of the default one.
    PKey,
    /// Another destination QP.
    DestQp,
    /// A transport header version other than 0.
    TVer,
    /// A PadCnt the payload does not have.
    PadCnt,
    /// The AckReq bit toggled.
    AckReq,
    /// SE, MigReq, FECN, BECN or a reserved bit set.
    Flags,
    /// The RETH's VA at a boundary.
    RethVa,
    /// The RETH's R_Key.
    RethRkey,
    /// The RETH's DMA length at a boundary.
    RethLen,
    /// The AtomicETH's VA: misaligned, at the end of the region, outside it.
    AtomicVa,
    /// The AtomicETH's R_Key.
    AtomicRkey,
    /// The AtomicETH's swap/add and compare values.
    AtomicOperands,
    /// The packet cut at a header boundary, or its payload cut short.
    Truncate,
    /// A bad ICRC.
    BadIcrc,
    /// A packet sent twice.
    Duplicate,
    /// A packet and the next swapped.
    Reorder,
    /// A packet not sent (lost).
    Drop,
    /// UD: the DETH's Q_Key, a bit of it or a boundary value (the high bit included).
    QKey,
    /// UD: the DETH's source QP.
    SrcQp,
    /// UD: the datagram's length against the receive buffer (0, exactly what fits, one
    /// byte more, a PMTU).
    Length,
}

/// Every rule, in the order the generator draws them from.
pub const RULES: [Rule; 22] = [
    Rule::BthBitFlip,
    Rule::ExtBitFlip,
    Rule::PayloadBitFlip,
    Rule::Opcode,
    Rule::Psn,
    Rule::PKey,
    Rule::DestQp,
    Rule::TVer,
    Rule::PadCnt,
    Rule::AckReq,
    Rule::Flags,
    Rule::RethVa,
    Rule::RethRkey,
    Rule::RethLen,
    Rule::AtomicVa,
    Rule::AtomicRkey,
    Rule::AtomicOperands,
    Rule::Truncate,
    Rule::BadIcrc,
    Rule::Duplicate,
    Rule::Reorder,
    Rule::Drop,
];

/// The rules of UD mutants ([`crate::fuzz_ucud`]).
pub const UD_RULES: [Rule; 18] = [
    Rule::BthBitFlip,
    Rule::ExtBitFlip,
    Rule::PayloadBitFlip,
    Rule::Opcode,
    Rule::Psn,
    Rule::PKey,
    Rule::DestQp,
    Rule::TVer,
    Rule::PadCnt,
    Rule::Flags,
    Rule::QKey,
    Rule::SrcQp,
    Rule::Length,
    Rule::Truncate,
    Rule::BadIcrc,
    Rule::Duplicate,
    Rule::Reorder,
    Rule::Drop,
];

/// The rules of UC mutants ([`crate::fuzz_ucud`]).
pub const UC_RULES: [Rule; 18] = [
    Rule::BthBitFlip,
    Rule::ExtBitFlip,
    Rule::PayloadBitFlip,
    Rule::Opcode,
    Rule::Psn,
    Rule::PKey,
    Rule::DestQp,
    Rule::TVer,
    Rule::PadCnt,
    Rule::Flags,
    Rule::RethVa,
    Rule::RethRkey,
    Rule::RethLen,
    Rule::Truncate,
    Rule::BadIcrc,
    Rule::Duplicate,
    Rule::Reorder,
    Rule::Drop,
];

impl Rule {
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Rule::BthBitFlip => "bth-bit-flip",
            Rule::ExtBitFlip => "ext-bit-flip",
            Rule::PayloadBitFlip => "payload-bit-flip",
            Rule::Opcode => "opcode",
            Rule::Psn => "psn",
            Rule::PKey => "pkey",
            Rule::DestQp => "dest-qp",
            Rule::TVer => "tver",
            Rule::PadCnt => "padcnt",
            Rule::AckReq => "ackreq",
            Rule::Flags => "flags",
            Rule::RethVa => "reth-va",
            Rule::RethRkey => "reth-rkey",
            Rule::RethLen => "reth-len",
            Rule::AtomicVa => "atomic-va",
            Rule::AtomicRkey => "atomic-rkey",
            Rule::AtomicOperands => "atomic-operands",
            Rule::Truncate => "truncate",
            Rule::BadIcrc => "bad-icrc",
            Rule::Duplicate => "duplicate",
            Rule::Reorder => "reorder",
            Rule::Drop => "drop",
            Rule::QKey => "qkey",
            Rule::SrcQp => "src-qp",
            Rule::Length => "length",
        }
    }

    /// The IBA rules a conforming receiver of `service` follows for it.
    pub fn cite_in(self, service: Service) -> &'static str {
        match (service, self) {
            (Service::Rc, r) => r.cite(),
            (_, Rule::BthBitFlip | Rule::ExtBitFlip) => "whichever field the bit lands in (the rules of the other entries); nothing is ever sent back",
            (_, Rule::PayloadBitFlip) => "IBA 9.4.3 / 9.4.1: the payload is data, delivered or placed as it came",
            (Service::Ud, Rule::Opcode) => "IBA 9.6.1 (unverified clause): a UD QP takes UD SEND ONLY (with immediate or not) alone; another transport's or a reserved opcode is dropped silently",
            (_, Rule::Opcode) => "IBA 9.6.1 / 9.8.3 (unverified clauses): another transport's or a reserved opcode is dropped silently; one out of sequence ends the message, dropped",
            (Service::Ud, Rule::Psn) => "IBA 9.8 (unverified clause): UD checks no PSN: any PSN is delivered",
            (_, Rule::Psn) => "IBA 9.8.3 (unverified clause): a PSN gap drops the message in progress; a FIRST or ONLY at any PSN starts the next",
            (_, Rule::PKey) => "IBA 9.6.2 / 10.9.3 (unverified clauses): another partition is dropped silently; 0x7FFF (limited) and 0xFFFF are the QP's",
            (_, Rule::DestQp) => "IBA 9.6.1 (unverified clause): a packet for another QP is not this QP's, and nothing is sent back",
            (_, Rule::TVer) => "IBA 9.6.1.1 (unverified clause): a TVer other than 0 is dropped silently",
            (_, Rule::PadCnt) => "IBA 9.2.2: the payload ends PadCnt bytes earlier (UC: a FIRST or MIDDLE then is not one PMTU, 9.7.5.1.4: dropped)",
            (_, Rule::Flags) => "IBA 9.2 (unverified clause): SE, MigReq, FECN/BECN, AckReq and reserved bits change nothing delivered",
            (_, Rule::QKey) => "IBA 10.2.5 / C10-15 (unverified clause): a Q_Key not the QP's, the high bit included, is dropped silently",
            (_, Rule::SrcQp) => "IBA 10.2.5 / 11.4.2.1 (unverified clauses): the DETH's source QP is reported in the completion as it came",
            (_, Rule::Length) => "IBA 10.8.3.1 / 9.9.3 class D (unverified clauses): what fits the receive less its 40-byte GRH area is delivered; one byte more is a local length error (or dropped)",
            (_, Rule::RethVa | Rule::RethRkey | Rule::RethLen) => "IBA 9.8.3 / 10.6.3.1 (unverified clauses): a WRITE failing R_Key, access, bounds or length is dropped silently, the QP staying up",
            (_, Rule::Truncate) => "IBA 9.6 (unverified clause): a packet shorter than its headers is dropped; a payload cut short (ICRC good) is a shorter payload",
            (_, Rule::BadIcrc) => "IBA C9-3: a packet with a bad ICRC is dropped silently",
            (Service::Ud, Rule::Duplicate) => "IBA 9.8 (unverified clause): UD detects no duplicates: both copies are delivered",
            (_, Rule::Duplicate) => "IBA 9.8.3 (unverified clause): UC detects no duplicates: a repeated FIRST or ONLY starts a message again, a repeated MIDDLE or LAST ends the one in progress",
            (Service::Ud, Rule::Reorder | Rule::Drop) => "IBA 9.8 (unverified clause): each datagram stands alone: delivered in the order it came, a lost one is simply not delivered",
            (_, Rule::Reorder | Rule::Drop) => "IBA 9.8.3 (unverified clause): a PSN gap drops the message in progress, no retransmission; the next FIRST or ONLY is taken",
            (_, _) => "",
        }
    }

    /// The IBA rules a conforming responder's answer to it follows.
    pub fn cite(self) -> &'static str {
        match self {
            Rule::BthBitFlip | Rule::ExtBitFlip => "whichever field the bit lands in (the rules of the other entries)",
            Rule::PayloadBitFlip => "IBA 9.4.3 / 9.4.1: the payload is data, placed as it came (seen by the probe READ)",
            Rule::Opcode => "IBA 9.7.5.1.3 (opcode sequence, invalid request); 9.6.1 (another transport's opcode dropped, unverified clause); reserved opcodes dropped or NAKed (unverified)",
            Rule::Psn => "IBA 9.7.5.1.2 (ahead: one PSN sequence error NAK) and 9.7.5.1.5 (behind, up to 2^23: a duplicate)",
            Rule::PKey => "IBA C9-42/43: a P_Key not of the QP's partition is dropped; the limited member form is accepted",
            Rule::DestQp => "IBA 9.6.1 (unverified clause): a packet for another QP is not this QP's",
            Rule::TVer => "IBA 9.6.1.1 (unverified clause): a TVer other than 0 is dropped",
            Rule::PadCnt => "IBA 9.2.2 (PadCnt) / 9.7.5.1.4 (length): the payload ends PadCnt bytes earlier",
            Rule::AckReq => "IBA 9.7.5.1.1: AckReq asks for an ACK; without it one may be coalesced",
            Rule::Flags => "IBA 9.2 (unverified clause): SE, MigReq (no path migration armed), FECN/BECN and reserved bits change no answer",
            Rule::RethVa | Rule::RethRkey | Rule::AtomicRkey => "IBA 9.7.5.2.4 / 10.6.3.1: R_Key, access and bounds: a remote access error",
            Rule::RethLen => "IBA 9.7.5.1.4 (payload against the DMA length) / 10.6.3.1 (bounds); C9-88 (zero length checks no R_Key)",
            Rule::AtomicVa => "IBA 9.4.5: an atomic's VA is 8-byte aligned (else invalid request) and in bounds (else remote access error)",
            Rule::AtomicOperands => "IBA 9.4.5: the original value is returned, the new one written (seen by the probe READ)",
            Rule::Truncate => "IBA 9.6 (unverified clause): a packet shorter than its headers is dropped; a payload cut short is a length error (9.7.5.1.4)",
            Rule::BadIcrc => "IBA C9-3: a packet with a bad ICRC is dropped silently",
            Rule::Duplicate => "IBA 9.7.5.1.5: a duplicate is acknowledged again (SEND, WRITE) or answered again (READ, atomic), not executed",
            Rule::Reorder | Rule::Drop => "IBA 9.7.5.1.2: a packet ahead gets one PSN sequence error NAK; the requester goes back to the expected PSN",
            Rule::QKey | Rule::SrcQp | Rule::Length => "",
        }
    }

    fn bases(self) -> &'static [Base] {
        use Base::*;
        match self {
            Rule::PayloadBitFlip | Rule::PadCnt => &[SendOnly, SendMulti, WriteOnly, WriteMulti],
            Rule::ExtBitFlip => &[WriteOnly, WriteMulti, Read, FetchAdd, CmpSwap],
            Rule::RethVa | Rule::RethRkey | Rule::RethLen => &[WriteOnly, WriteMulti, Read],
            Rule::AtomicVa | Rule::AtomicRkey | Rule::AtomicOperands => &[FetchAdd, CmpSwap],
            Rule::Reorder => &[SendMulti, WriteMulti],
            _ => &[SendOnly, SendMulti, WriteOnly, WriteMulti, Read, FetchAdd, CmpSwap],
        }
    }
}

/// A packet as it goes on the wire.
#[derive(Debug, Clone)]
struct Wire {
    /// BTH..ICRC (the ICRC filled when sent).
    bytes: Vec<u8>,
    bad_icrc: bool,
    /// Sent once the answers to the packets before it have come (a retransmission).
    settle: bool,
}

impl Wire {
    fn of(r: &Request) -> Wire {
        let mut bytes = vec![0u8; r.repr.buffer_len()];
        // The builders make only what the codec writes; a failure leaves a packet of
        // zeros, which the model reads as the peer would (opcode 0 to QP 0: dropped).
        let _ = r.repr.emit(&mut bytes, &r.payload);
        Wire { bytes, bad_icrc: false, settle: false }
    }

    /// What a conforming responder makes of it.
    fn views(&self, qpn: u32) -> Vec<View> {
        if self.bad_icrc {
            return vec![View::Drop("bad ICRC (IBA C9-3)")];
        }
        classify(&self.bytes, qpn)
    }
}

/// One mutant: the base, the rule, what was changed, and the packets in the order sent.
#[derive(Debug, Clone)]
struct Mutant {
    base: Base,
    rule: Rule,
    detail: String,
    /// The base's requests, unmutated (for the go-back-N retransmission).
    original: Vec<Request>,
    wires: Vec<Wire>,
    /// What the probe READ reads: VA and length.
    probe: (u64, u32),
}

pub(crate) fn flip(bytes: &mut [u8], from: usize, to: usize, rng: &mut Rng) -> String {
    let bits = to.saturating_sub(from) * 8;
    let bit = rng.index(bits.max(1));
    let (byte, b) = (from + bit / 8, 7 - bit % 8);
    if let Some(x) = bytes.get_mut(byte) {
        *x ^= 1 << b;
    }
    format!("bit {b} of byte {byte} flipped")
}

pub(crate) fn put(bytes: &mut [u8], at: usize, v: &[u8]) {
    if let Some(s) = bytes.get_mut(at..at + v.len()) {
        s.copy_from_slice(v);
    }
}

/// Builds mutant `index` of `seed` for a responder in the state `model` holds.
fn draw(seed: u64, index: u32, model: &Responder, env: &Env) -> Mutant {
    let mut rng = Rng::new(seed, index);
    let rule = rng.pick(&RULES);
    let mut bases: Vec<Base> = rule.bases().to_vec();
    // A SEND of several packets only where two PMTUs fit the receive buffer.
    if env.pmtu * 3 > usize::try_from(env.ad.recv_len).unwrap_or(0) && bases.len() > 1 {
        bases.retain(|b| *b != Base::SendMulti);
    }
    let base = rng.pick(&bases);
    let e = Env { psn: model.epsn().value(), ..*env };
    let p = e.pmtu;
    let (rva, rkey, rlen) = e.ad.rw;
    // Targets in the read/write region, leaving room for three PMTUs and 8-aligned.
    let room = u64::from(rlen).saturating_sub(3 * u64::try_from(p).unwrap_or(0)).max(8);
    let va = rva + (rng.below(room) & !7);
    let bytes = |rng: &mut Rng, n: usize| -> Vec<u8> { (0..n).map(|_| rng.next_u64().to_le_bytes()[0]).collect() };
    let u32_of = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let (original, probe): (Vec<Request>, (u64, u32)) = match base {
        Base::SendOnly => {
            let n = 1 + rng.index(p);
            (vec![e.req(Opcode::RC_SEND_ONLY, 0, true, ExtHeaders::default(), bytes(&mut rng, n))], (va, 16))
        }
        Base::SendMulti => {
            let last = 1 + rng.index(p);
            let v = vec![
                e.req(Opcode::RC_SEND_FIRST, 0, false, ExtHeaders::default(), bytes(&mut rng, p)),
                e.req(Opcode::RC_SEND_MIDDLE, 1, false, ExtHeaders::default(), bytes(&mut rng, p)),
                e.req(Opcode::RC_SEND_LAST, 2, true, ExtHeaders::default(), bytes(&mut rng, last)),
            ];
            (v, (va, 16))
        }
        Base::WriteOnly => {
            let n = 1 + rng.index(p);
            (
                vec![e.write(Opcode::RC_RDMA_WRITE_ONLY, 0, Some((va, rkey, u32_of(n))), bytes(&mut rng, n))],
                (va, u32_of(n)),
            )
        }
        Base::WriteMulti => {
            let last = 1 + rng.index(p);
            let total = u32_of(2 * p + last);
            let v = vec![
                e.write(Opcode::RC_RDMA_WRITE_FIRST, 0, Some((va, rkey, total)), bytes(&mut rng, p)),
                e.write(Opcode::RC_RDMA_WRITE_MIDDLE, 1, None, bytes(&mut rng, p)),
                e.write(Opcode::RC_RDMA_WRITE_LAST, 2, None, bytes(&mut rng, last)),
            ];
            (v, (va, u32_of(p)))
        }
        Base::Read => {
            let n = 1 + rng.index(2 * p);
            (vec![e.read(0, va, rkey, u32_of(n))], (va, 16))
        }
        Base::FetchAdd => (vec![e.fetch_add(0, va, rkey, rng.next_u64())], (va, 8)),
        Base::CmpSwap => {
            // Half the time the compare value is the one the model says is there.
            let at = usize::try_from(va - rva).unwrap_or(0);
            let now = model.region(0).and_then(|r| r.data.get(at..at + 8)).map_or(0, |b| {
                let mut w = [0u8; 8];
                w.copy_from_slice(b);
                u64::from_le_bytes(w)
            });
            let compare = if rng.below(2) == 0 { now } else { rng.next_u64() };
            let ext = ExtHeaders {
                atomic_eth: Some(AtomicEthRepr { va, rkey, swap_add: rng.next_u64(), compare }),
                ..ExtHeaders::default()
            };
            (vec![e.req(Opcode::RC_COMPARE_SWAP, 0, true, ext, Vec::new())], (va, 8))
        }
    };
    let mut wires: Vec<Wire> = original.iter().map(Wire::of).collect();
    let n = wires.len();
    let j = match rule {
        // The RETH and AtomicETH are in the first packet.
        Rule::ExtBitFlip
        | Rule::RethVa
        | Rule::RethRkey
        | Rule::RethLen
        | Rule::AtomicVa
        | Rule::AtomicRkey
        | Rule::AtomicOperands => 0,
        Rule::Reorder => rng.index(n.saturating_sub(1).max(1)),
        _ => rng.index(n),
    };
    let info = original[j].repr.info();
    let ext_end = info.map_or(12, |i| i.payload_offset());
    let len = wires[j].bytes.len();
    let payload_end = len - 4 - (4 - original[j].payload.len() % 4) % 4;
    let detail = match rule {
        Rule::BadIcrc => {
            wires[j].bad_icrc = true;
            "ICRC wrong".into()
        }
        Rule::Duplicate => {
            let mut d = wires[j].clone();
            d.settle = true;
            wires.insert(j + 1, d);
            format!("packet {j} sent twice")
        }
        Rule::Reorder => {
            if j + 1 < wires.len() {
                // The later packet first; the earlier one once the peer has answered it
                // (in one burst with `eager`).
                wires.swap(j, j + 1);
                wires[j + 1].settle = true;
            }
            format!("packets {j} and {} swapped", j + 1)
        }
        Rule::Drop => {
            wires.remove(j);
            format!("packet {j} not sent")
        }
        _ => mutate(rule, &mut wires[j].bytes, &mut rng, &e, info, ext_end, payload_end),
    };
    let detail = if n > 1 && !matches!(rule, Rule::Duplicate | Rule::Reorder | Rule::Drop) {
        format!("packet {j}: {detail}")
    } else {
        detail
    };
    Mutant { base, rule, detail, original, wires, probe }
}

/// Changes one field of `w` (a packet of the base) as `rule` says; what it did.
pub(crate) fn mutate(
    rule: Rule,
    w: &mut Vec<u8>,
    rng: &mut Rng,
    e: &Env,
    info: Option<&OpcodeInfo>,
    ext_end: usize,
    payload_end: usize,
) -> String {
    let len = w.len();
    let p = e.pmtu;
    let (rva, _, rlen) = e.ad.rw;
    let u32_of = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let psn_of = |w: &[u8]| u32::from_be_bytes([0, w[9], w[10], w[11]]);
    match rule {
        Rule::BthBitFlip => flip(w, 0, 12, rng),
        Rule::ExtBitFlip => flip(w, 12, ext_end, rng),
        Rule::PayloadBitFlip => flip(w, ext_end, payload_end, rng),
        Rule::Opcode => {
            const OPS: [u8; 30] = [
                0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x10, 0x11, 0x12,
                0x13, 0x14, 0x15, 0x16, 0x18, 0x1c, 0x1f, 0x24, 0x2a, 0x64, 0x81, 0xe0, 0xff,
            ];
            let mut op = rng.pick(&OPS);
            if op == w[0] {
                op = OPS[(OPS.iter().position(|&o| o == op).unwrap_or(0) + 1) % OPS.len()];
            }
            let was = Opcode(w[0]);
            w[0] = op;
            format!("opcode {} -> {} ({op:#04x})", was.name(), Opcode(op).name())
        }
        Rule::Psn => {
            const HALF: i64 = 1 << 23;
            let d = rng.pick(&[1i64, 2, 3, -1, -2, -3, HALF - 1, HALF, -HALF + 1, HALF / 2, -(HALF / 2), 0x1234]);
            let old = psn_of(w);
            let new = Psn::new(u32::try_from((i64::from(old) + d).rem_euclid(1 << 24)).unwrap_or(0)).value();
            put(w, 9, &new.to_be_bytes()[1..]);
            format!("PSN {old:#08x} -> {new:#08x} ({d:+})")
        }
        Rule::PKey => {
            let k = rng.pick(&[0x0000u16, 0x7fff, 0x8000, 0xfffe, 0x7ffe, 0x8001, 0x1234]);
            put(w, 2, &k.to_be_bytes());
            format!("P_Key {k:#06x}")
        }
        Rule::DestQp => {
            let q = u32::from_be_bytes([0, w[5], w[6], w[7]]);
            let bit = rng.index(24);
            let to = rng.pick(&[0u32, 1, 0xff_ffff, q ^ (1 << bit)]);
            put(w, 5, &to.to_be_bytes()[1..]);
            format!("destination QP {q:#08x} -> {to:#08x}")
        }
        Rule::TVer => {
            let t = 1 + rng.index(15);
            w[1] = (w[1] & 0xf0) | u8::try_from(t).unwrap_or(1);
            format!("TVer {t}")
        }
        Rule::PadCnt => {
            let was = (w[1] >> 4) & 3;
            let pad = (was + 1 + u8::try_from(rng.index(3)).unwrap_or(0)) & 3;
            w[1] = (w[1] & !0x30) | (pad << 4);
            format!("PadCnt {was} -> {pad}")
        }
        Rule::AckReq => {
            w[8] ^= 0x80;
            format!("AckReq {} -> {}", w[8] & 0x80 == 0, w[8] & 0x80 != 0)
        }
        Rule::Flags => {
            let (byte, mask, what) = rng.pick(&[
                (1usize, 0x80u8, "SE"),
                (1, 0x40, "MigReq"),
                (4, 0x80, "FECN"),
                (4, 0x40, "BECN"),
                (4, 0x3f, "the 6 reserved bits of byte 4"),
                (8, 0x7f, "the 7 reserved bits of byte 8"),
            ]);
            w[byte] ^= mask;
            format!("{what} toggled")
        }
        Rule::RethVa | Rule::AtomicVa => {
            let at = 12;
            let old = u64::from_be_bytes(w[at..at + 8].try_into().unwrap_or([0; 8]));
            let end = rva + u64::from(rlen);
            let new = if rule == Rule::RethVa {
                let dl = u64::from(u32::from_be_bytes(w[at + 12..at + 16].try_into().unwrap_or([0; 4])));
                {
                    let bit = rng.below(64);
                    rng.pick(&[
                        0,
                        u64::MAX,
                        end,
                        end - dl + 1,
                        end.wrapping_sub(dl),
                        rva.wrapping_sub(1),
                        e.ad.ro.0,
                        old ^ (1 << bit),
                    ])
                }
            } else {
                {
                    let mis = old + 1 + rng.below(7);
                    rng.pick(&[mis, end - 8, end, end - 4, 0, !7u64, e.ad.ro.0, rva])
                }
            };
            put(w, at, &new.to_be_bytes());
            format!("VA {old:#x} -> {new:#x}")
        }
        Rule::RethRkey | Rule::AtomicRkey => {
            let at = 20;
            let old = u32::from_be_bytes(w[at..at + 4].try_into().unwrap_or([0; 4]));
            let bit = rng.below(32);
            let new = rng.pick(&[0, u32::MAX, e.ad.ro.1, old ^ (1 << bit), old.wrapping_add(1)]);
            put(w, at, &new.to_be_bytes());
            format!("R_Key {old:#x} -> {new:#x}")
        }
        Rule::RethLen => {
            let at = 24;
            let old = u32::from_be_bytes(w[at..at + 4].try_into().unwrap_or([0; 4]));
            let pm = u32_of(p);
            let new =
                rng.pick(&[0, 1, old.wrapping_sub(1), old + 1, u32::MAX, 0x8000_0000, pm, rlen, rlen + 1, old + pm]);
            put(w, at, &new.to_be_bytes());
            format!("DMA length {old} -> {new}")
        }
        Rule::AtomicOperands => {
            let (swap, cmp) = (rng.next_u64(), rng.next_u64());
            put(w, 24, &swap.to_be_bytes());
            put(w, 32, &cmp.to_be_bytes());
            format!("swap/add {swap:#x}, compare {cmp:#x}")
        }
        Rule::Truncate => {
            // Header boundaries below the payload, then 4-byte cuts of the payload.
            let mut cuts: Vec<usize> = vec![12];
            if let Some(i) = info {
                let mut at = 12;
                for h in i.headers {
                    at += h.wire_len();
                    if at < ext_end {
                        cuts.push(at);
                    }
                }
            }
            cuts.retain(|&c| c < ext_end);
            if cuts.is_empty() {
                cuts.push(ext_end);
            }
            let mut c = ext_end;
            while c + 4 < len - 4 {
                cuts.push(c);
                c += 4 * (1 + rng.index(64));
            }
            let at = rng.pick(&cuts);
            w.truncate(at);
            w.extend_from_slice(&[0; 4]);
            format!("cut to {at} bytes before the ICRC (was {})", len - 4)
        }
        Rule::BadIcrc | Rule::Duplicate | Rule::Reorder | Rule::Drop | Rule::QKey | Rule::SrcQp | Rule::Length => {
            String::new()
        }
    }
}

/// One line of the model's reasoning: the answers it expects under one reading.
#[derive(Debug, Clone)]
struct Branch {
    /// `None`: the peer's state is unknown from here (an unjudged case).
    model: Option<Responder>,
    want: Vec<Answer>,
    unjudged: Option<String>,
    choices: Vec<String>,
    /// Where the answers to the packets of the stage under way begin in `want`.
    from: usize,
}

impl Branch {
    fn feed(&mut self, r: &Request) {
        if let Some(m) = self.model.as_mut() {
            self.want.extend(m.handle(r));
            self.settle();
        }
    }
    fn settle(&mut self) {
        if let Some(why) = self.model.as_ref().and_then(|m| m.unsure().map(str::to_string)) {
            self.unjudged = Some(why);
            self.model = None;
        }
    }
}

/// How one mutant fared.
#[derive(Debug, Clone)]
pub struct MutantOutcome {
    /// Its index (with the seed, all it takes to make it again).
    pub index: u32,
    /// Rule.
    pub rule: Rule,
    /// The base request.
    pub base: &'static str,
    /// What was changed.
    pub detail: String,
    /// Pass, diverges, or peer stopped answering.
    pub verdict: Verdict,
    /// Why it was not judged, if it was not.
    pub unjudged: Option<String>,
    /// What the model expected (each reading it allows, `|` between them).
    pub expected: Vec<String>,
    /// What the peer answered.
    pub observed: Vec<String>,
    /// The mutant's exchange: its packets, the retransmission, the probe, the answers.
    pub capture: Vec<Record>,
}

/// What to fuzz.
#[derive(Debug, Clone)]
pub struct FuzzOptions {
    /// Seed.
    pub seed: u64,
    /// How many mutants (indices `0..count`).
    pub count: u32,
    /// Only these indices, each on a fresh connection (to reproduce one).
    pub only: Option<Vec<u32>>,
    /// After the answer the model expects last, how long to wait for any more.
    pub grace: Duration,
    /// Send the mutant, the retransmission and the probe back to back, without waiting
    /// for answers in between (a peer's handling of requests arriving in one burst).
    pub eager: bool,
    /// For the tests of the tester: UC and UD models told a key other than the peer's
    /// (UD: its Q_Key, UC: its region's R_Key), as a peer that takes a wrong key would
    /// look to a right model: each delivery or WRITE the peer makes then diverges. The
    /// RC fuzzer ignores it.
    pub plant: bool,
}

/// The result of a fuzzing run.
#[derive(Debug, Clone, Default)]
pub struct FuzzReport {
    /// The transport fuzzed.
    pub service: Service,
    /// Seed.
    pub seed: u64,
    /// Mutants played.
    pub played: u32,
    /// Mutants whose answers conformed.
    pub passed: u32,
    /// Mutants the model could not judge.
    pub unjudged: u32,
    /// Connections made.
    pub connections: u32,
    /// Every mutant that did not pass (diverges, peer stopped answering).
    pub failures: Vec<MutantOutcome>,
    /// Every mutant not judged: index, rule, why.
    pub not_judged: Vec<(u32, Rule, String)>,
    /// Why the run ended early, if it did (the peer refused a new connection).
    pub stopped: Option<String>,
    /// Mutants per rule: (rule, played, passed).
    pub per_rule: Vec<(Rule, u32, u32)>,
}

/// A live connection and the model of the peer's side of it.
struct Live {
    c: Connection,
    model: Responder,
    env: Env,
}

/// Connections made by this process's fuzzers: each its own QPN and communication ID, so
/// a replay right after a run is no duplicate REQ to the peer's CM.
static CONNECTIONS: AtomicU32 = AtomicU32::new(0);

fn connect(link: &mut Link, o: &Options) -> Result<Live, String> {
    let n = CONNECTIONS.fetch_add(1, Ordering::Relaxed) & 0xf_ffff;
    let (c, model, env) = scenario::open(link, 0x00d0_0000 + n, 0x1000 + n, 0x50_0000, o)?;
    Ok(Live { c, model, env })
}

/// Answers to `qpn` until one in the place of `last` of some reading has come (then
/// `grace` more), the peer has been quiet `o.quiet` where no answer is due, or
/// `o.answer_wait` has passed.
fn collect(link: &mut Link, qpn: u32, o: &Options, grace: Duration, lasts: &[Answer]) -> Vec<Answer> {
    let end = Instant::now() + o.answer_wait;
    let mut seen: Vec<Answer> = Vec::new();
    let mut done_at: Option<Instant> = None;
    let same_slot = |w: &Answer, s: &Answer| match (w, s) {
        (Answer::Read { psn, .. }, Answer::Read { psn: p, .. }) => psn == p,
        (
            Answer::Nak { psn, .. } | Answer::NakOneOf { psn, .. } | Answer::Rnr { psn, .. },
            Answer::Nak { psn: p, .. } | Answer::Rnr { psn: p, .. },
        ) => psn == p,
        (Answer::Atomic { psn, .. }, Answer::Atomic { psn: p, .. }) => psn == p,
        (w, s) => matches(w, s),
    };
    loop {
        let until = match done_at {
            Some(t) => t.min(end),
            None if lasts.is_empty() => (Instant::now() + o.quiet).min(end),
            None => end,
        };
        let Some(p) = link.recv(until) else { break };
        if p.repr.bth.dest_qp.value() != qpn || p.repr.bth.opcode == Opcode::CNP {
            continue;
        }
        let a = answer_of(&p.repr, &p.payload);
        if done_at.is_none() && lasts.iter().any(|l| same_slot(l, &a)) {
            done_at = Some(Instant::now() + grace);
        }
        seen.push(a);
    }
    seen
}

/// Every reading of `branches` after a packet the responder may read as any of `views`.
fn expand(branches: &[Branch], views: &[View]) -> Vec<Branch> {
    let mut next = Vec::new();
    for b in branches {
        for v in views {
            let mut nb = b.clone();
            match v {
                View::Drop(why) => nb.choices.push(format!("dropped: {why}")),
                View::Request(r) => nb.feed(r),
                View::Invalid { psn, why } => {
                    nb.choices.push(format!("refused: {why}"));
                    if let Some(md) = nb.model.as_mut() {
                        nb.want.extend(md.invalid(*psn));
                    }
                    nb.settle();
                }
                View::Unjudged(why) => {
                    nb.unjudged = Some(why.clone());
                    nb.model = None;
                }
            }
            next.push(nb);
        }
    }
    // Two packets read two ways each at most in one mutant: eight readings bound it.
    next.truncate(8);
    next
}

/// Takes the answers to what was sent so far: until the answer each reading expects
/// last (of those not yet seen) has come, or, where none is due, `grace` of quiet.
fn wait_stage(link: &mut Link, qpn: u32, o: &Options, grace: Duration, branches: &[Branch], seen: &mut Vec<Answer>) {
    let lasts: Vec<Answer> = branches
        .iter()
        .filter(|b| b.model.is_some())
        .filter_map(|b| {
            let stage = b.want.get(b.from..)?;
            // An ACK that may be coalesced need not come: wait for what must.
            stage.iter().rev().find(|a| !matches!(a, Answer::Ack { required: false, .. })).cloned()
        })
        .collect();
    let quiet = Options { quiet: grace, ..*o };
    seen.extend(collect(link, qpn, &quiet, grace, &lasts));
}

fn begin_stage(branches: &mut [Branch]) {
    for b in branches {
        b.from = b.want.len();
    }
}

/// Plays one mutant on `live`; returns its outcome and whether the connection is still
/// good for the next one (the model knows its state).
fn play(
    link: &mut Link,
    live: &mut Live,
    m: &Mutant,
    index: u32,
    o: &Options,
    f: &FuzzOptions,
) -> (MutantOutcome, bool) {
    let qpn = live.c.local_qpn;
    let mut branches = vec![Branch {
        model: Some(live.model.clone()),
        want: Vec::new(),
        unjudged: None,
        choices: Vec::new(),
        from: 0,
    }];
    let mark = link.mark();
    let mut seen = Vec::new();
    let mut sent = Ok(());
    // The mutant's packets, in groups: a packet marked `settle` (a duplicate, as a
    // retransmission would come) waits for the answers to those before it.
    let mut groups: Vec<Vec<&Wire>> = vec![Vec::new()];
    for w in &m.wires {
        if w.settle && !f.eager {
            groups.push(Vec::new());
        }
        if let Some(g) = groups.last_mut() {
            g.push(w);
        }
    }
    for g in groups.iter().filter(|g| !g.is_empty()) {
        begin_stage(&mut branches);
        for w in g {
            branches = expand(&branches, &w.views(live.env.dest));
            sent = sent.and_then(|()| link.send_raw(w.bytes.clone(), w.bad_icrc));
        }
        if !f.eager {
            wait_stage(link, qpn, o, f.grace, &branches, &mut seen);
        }
    }
    // The requester's side, once the peer has answered (a requester goes back on the NAK
    // or its timer, not at once): the rest of the message from the PSN the model says the
    // peer expects (go-back-N), answered; then the probe.
    if let Some(plan) = branches.iter().find_map(|b| b.model.clone().filter(|md| !md.is_dead())) {
        let first = m.original[0].repr.bth.psn;
        let k = first.distance(plan.epsn());
        let mut repair: Vec<Request> = Vec::new();
        if k >= 0 {
            let k = usize::try_from(k).unwrap_or(usize::MAX);
            if k < m.original.len() {
                repair.extend(m.original[k..].iter().cloned());
            }
        }
        let mut p = plan.clone();
        for r in &repair {
            p.handle(r);
        }
        let e = Env { psn: p.epsn().value(), ..live.env };
        let (va, len) = m.probe;
        let probe = e.read(0, va, live.env.ad.rw.1, len);
        for stage in [repair, vec![probe]] {
            if stage.is_empty() {
                continue;
            }
            begin_stage(&mut branches);
            for r in &stage {
                for b in branches.iter_mut() {
                    b.feed(r);
                }
                sent = sent.and_then(|()| link.send_raw(Wire::of(r).bytes, false));
            }
            if !f.eager {
                wait_stage(link, qpn, o, f.grace, &branches, &mut seen);
            }
        }
    }
    if f.eager {
        for b in branches.iter_mut() {
            b.from = 0;
        }
        wait_stage(link, qpn, o, f.grace, &branches, &mut seen);
    }
    let mut out = MutantOutcome {
        index,
        rule: m.rule,
        base: m.base.name(),
        detail: m.detail.clone(),
        verdict: Verdict::Pass,
        unjudged: None,
        expected: branches
            .iter()
            .map(|b| {
                let mut s: Vec<String> = b.choices.clone();
                s.extend(b.want.iter().map(ToString::to_string));
                if let Some(u) = &b.unjudged {
                    s.push(format!("then not judged: {u}"));
                }
                s.join("; ")
            })
            .collect(),
        observed: seen.iter().map(ToString::to_string).collect(),
        capture: link.records_since(mark).to_vec(),
    };
    if let Err(e) = sent {
        out.verdict = Verdict::NotRun(format!("sending: {e}"));
        return (out, false);
    }
    // A reading passes when what was seen conforms to it; an unjudged one accepts
    // whatever came once its judged part does (its answers so far are a prefix of what
    // was seen: they are only checked as a whole below when the model went on).
    let mut errors = Vec::new();
    for b in &branches {
        let r = match &b.model {
            Some(_) => judge(&b.want, &seen),
            None => Ok(()),
        };
        match r {
            Ok(()) => {
                if let Some(md) = &b.model {
                    let alive = !md.is_dead() && b.unjudged.is_none();
                    if alive {
                        live.model = md.clone();
                    }
                    return (out, alive);
                }
                out.unjudged = b.unjudged.clone();
                return (out, false);
            }
            Err(e) => errors.push(e),
        }
    }
    let due = branches.iter().any(|b| b.want.iter().any(|a| !matches!(a, Answer::Ack { required: false, .. })));
    out.verdict = if seen.is_empty() && due {
        Verdict::NoAnswer(format!("nothing in {:?}", o.answer_wait))
    } else {
        Verdict::Diverges(errors.join(" | "))
    };
    (out, false)
}

/// Runs the fuzzer: `f.count` mutants (or `f.only`) against the peer.
pub fn run(link: &mut Link, o: &Options, f: &FuzzOptions) -> FuzzReport {
    let mut rep = FuzzReport {
        service: Service::Rc,
        seed: f.seed,
        per_rule: RULES.iter().map(|&r| (r, 0, 0)).collect(),
        ..FuzzReport::default()
    };
    let indices: Vec<u32> = f.only.clone().unwrap_or_else(|| (0..f.count).collect());
    let fresh_each = f.only.is_some();
    let mut live: Option<Live> = None;
    let mut last: Option<u32> = None;
    for index in indices {
        let stale = live.as_ref().is_some_and(|l| fresh_each || l.model.recvs() < 4);
        if stale {
            if let Some(l) = live.take() {
                cm::disconnect(link, &l.c, o.quiet.min(Duration::from_millis(50)));
            }
        }
        if live.is_none() {
            match connect(link, o) {
                Ok(l) => {
                    rep.connections += 1;
                    live = Some(l);
                }
                Err(e) => {
                    rep.stopped = Some(match last {
                        Some(i) => format!("after mutant {i}, the peer takes no new connection: {e}"),
                        None => format!("no connection: {e}"),
                    });
                    break;
                }
            }
        }
        let Some(l) = live.as_mut() else { break };
        let m = draw(f.seed, index, &l.model, &l.env);
        let (out, keep) = play(link, l, &m, index, o, f);
        last = Some(index);
        rep.played += 1;
        let slot = rep.per_rule.iter_mut().find(|(r, _, _)| *r == m.rule);
        if let Some(s) = slot {
            s.1 += 1;
        }
        match (&out.verdict, &out.unjudged) {
            (Verdict::Pass, None) => {
                rep.passed += 1;
                if let Some(s) = rep.per_rule.iter_mut().find(|(r, _, _)| *r == m.rule) {
                    s.2 += 1;
                }
            }
            (Verdict::Pass, Some(why)) => {
                rep.unjudged += 1;
                rep.not_judged.push((index, m.rule, format!("{}, {}: {why}", m.base.name(), m.detail)));
            }
            _ => rep.failures.push(out),
        }
        if !keep {
            if let Some(l) = live.take() {
                cm::disconnect(link, &l.c, o.quiet.min(Duration::from_millis(50)));
            }
        }
    }
    if let Some(l) = live.take() {
        cm::disconnect(link, &l.c, o.quiet.min(Duration::from_millis(50)));
    }
    rep
}

/// The report: totals, per rule, and every mutant that did not pass with how to make it
/// again.
pub fn report(r: &FuzzReport) -> String {
    let t = r.service.name();
    let mut s = format!(
        "fuzz {t} seed {:#x}: {} mutants, {} pass, {} not judged, {} do not pass; {} {}\n",
        r.seed,
        r.played,
        r.passed,
        r.unjudged,
        r.failures.len(),
        r.connections,
        if r.service == Service::Rc { "connections" } else { "sessions" }
    );
    for (rule, played, passed) in &r.per_rule {
        if *played > 0 {
            s += &format!("  {:<18} {passed:>4} of {played:>4} pass   {}\n", rule.name(), rule.cite_in(r.service));
        }
    }
    for m in &r.failures {
        let v = match &m.verdict {
            Verdict::Pass => "pass".to_string(),
            Verdict::Diverges(why) => format!("DIVERGES: {why}"),
            Verdict::NoAnswer(why) => format!("PEER STOPPED ANSWERING: {why}"),
            Verdict::NotRun(why) => format!("not run: {why}"),
        };
        s += &format!("{t} mutant {} ({}, {}: {}): {v}\n", m.index, m.rule.name(), m.base, m.detail);
        s += &format!(
            "    expected: {}\n    observed: {}\n",
            m.expected.join("  |  "),
            if m.observed.is_empty() { "nothing".into() } else { m.observed.join("; ") }
        );
        let flag = match r.service {
            Service::Rc => String::new(),
            other => format!("--fuzz-transport {} ", other.name().to_lowercase()),
        };
        s += &format!("    again: {flag}--fuzz-only {} --seed {:#x}\n", m.index, r.seed);
    }
    for (i, rule, why) in &r.not_judged {
        s += &format!("not judged: {t} mutant {i} ({}, {why})\n", rule.name());
    }
    if let Some(why) = &r.stopped {
        s += &format!("stopped: {why}\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Region;
    use crate::scenario::Advert;

    fn env() -> (Responder, Env) {
        let ad = Advert { rw: (0x10_0000, 0x111, 65536), ro: (0x20_0000, 0x222, 4096), recvs: 16, recv_len: 4096 };
        let regions = vec![
            Region {
                va: ad.rw.0,
                rkey: ad.rw.1,
                write: true,
                read: true,
                atomic: true,
                data: scenario::rw_pattern(65536),
            },
            Region {
                va: ad.ro.0,
                rkey: ad.ro.1,
                write: false,
                read: true,
                atomic: false,
                data: scenario::ro_pattern(4096),
            },
        ];
        (Responder::new(Psn::new(0x100), 16, 4096, 1024, regions), Env { dest: 0x42, psn: 0x100, pmtu: 1024, ad })
    }

    #[test]
    fn a_mutant_is_the_same_for_the_same_seed_and_index() {
        let (m, e) = env();
        for i in 0..200 {
            let (a, b) = (draw(7, i, &m, &e), draw(7, i, &m, &e));
            assert_eq!(a.detail, b.detail);
            assert_eq!(
                a.wires.iter().map(|w| &w.bytes).collect::<Vec<_>>(),
                b.wires.iter().map(|w| &w.bytes).collect::<Vec<_>>()
            );
        }
        // Different seeds differ somewhere.
        assert!((0..50).any(|i| draw(7, i, &m, &e).detail != draw(8, i, &m, &e).detail));
    }

    #[test]
    fn every_rule_is_drawn() {
        let (m, e) = env();
        let drawn: Vec<Rule> = (0..2000).map(|i| draw(1, i, &m, &e).rule).collect();
        for r in RULES {
            assert!(drawn.contains(&r), "{} never drawn", r.name());
        }
    }

    #[test]
    fn the_header_checks_drop_what_they_must() {
        let (mut m, e) = env();
        let ok = e.req(Opcode::RC_SEND_ONLY, 0, true, ExtHeaders::default(), vec![1; 16]);
        let w = Wire::of(&ok);
        let only = |v: Vec<View>| match v.as_slice() {
            [View::Drop(why)] => *why,
            other => panic!("{other:?}"),
        };
        assert!(matches!(classify(&w.bytes, 0x42).as_slice(), [View::Request(_)]));
        let mut t = w.bytes.clone();
        t[1] |= 1;
        assert!(only(classify(&t, 0x42)).contains("TVer"));
        let mut t = w.bytes.clone();
        t[2] = 0x12;
        assert!(only(classify(&t, 0x42)).contains("P_Key"));
        // The limited member form of the default partition is accepted.
        let mut t = w.bytes.clone();
        t[2] = 0x7f;
        assert!(matches!(classify(&t, 0x42).as_slice(), [View::Request(_)]));
        assert!(only(classify(&w.bytes, 0x43)).contains("destination QP"));
        let mut t = w.bytes.clone();
        t[0] = 0x24; // UC SEND ONLY to an RC QP
        assert!(only(classify(&t, 0x42)).contains("another transport"));
        let mut t = w.bytes.clone();
        t[0] = 0x11; // an ACK to the peer's requester
        assert!(only(classify(&t, 0x42)).contains("response"));
        // A READ request cut inside its RETH.
        let rd = Wire::of(&e.read(0, 0x10_0000, 0x111, 16));
        let mut t = rd.bytes[..20].to_vec();
        t.extend_from_slice(&[0; 4]);
        assert!(only(classify(&t, 0x42)).contains("shorter than its opcode's headers"));
        // A reserved RC opcode: dropped, or refused as an invalid request.
        let mut t = w.bytes.clone();
        t[0] = 0x15;
        let v = classify(&t, 0x42);
        assert!(matches!(v.as_slice(), [View::Drop(_), View::Invalid { .. }]), "{v:?}");
        // And the transport's rules still apply to what passes them.
        let v = classify(&w.bytes, 0x42);
        let Some(View::Request(r)) = v.first() else { panic!("{v:?}") };
        assert!(matches!(m.handle(r).as_slice(), [Answer::Ack { msn: 1, .. }]));
    }
}
