//! The oracle: what a conforming RC responder must answer, written from the IBA's rules
//! (chapter 9.7.5, the responder's side of the reliable service; 9.4 for the operations;
//! 9.9.3 for what an error does to the QP), not from any implementation's code. It keeps
//! the little a responder's answers depend on: the expected PSN, the MSN, the message in
//! progress, the receive WQEs the peer said it posted, the memory behind the regions it
//! advertised (so READ data and atomic results are predicted, not echoed), and the
//! READ/atomic requests it executed (for duplicates).
//!
//! Each request fed to [`Responder::handle`] yields the answers the rules demand.
//! Positive ACKs may be coalesced (IBA 9.7.5.1.1: one ACK may acknowledge every request up
//! to its PSN), so each is marked `required` (the request asked for it with AckReq, or
//! IBA says it must be answered) or not; see [`crate::judge`] for how answers are compared.

use rnic_wire::aeth::NakCode;
use rnic_wire::opcode::{Operation, Position, Transport};
use rnic_wire::roce::{RocePacket, RoceRepr};
use rnic_wire::{Opcode, Psn};

/// One answer of a responder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A positive ACK whose PSN lies in `lo..=hi` (a duplicate may be acknowledged with
    /// its own PSN or the latest: both acknowledge it) and whose MSN is `msn`.
    Ack {
        /// Lowest PSN allowed.
        lo: Psn,
        /// Highest PSN allowed.
        hi: Psn,
        /// MSN.
        msn: u32,
        /// The rules require it (else it may be coalesced into a later one).
        required: bool,
    },
    /// A NAK.
    Nak {
        /// PSN.
        psn: Psn,
        /// Code.
        code: NakCode,
        /// MSN.
        msn: u32,
    },
    /// A NAK with one of these codes: a request that breaks two rules whose order the IBA
    /// leaves open (a WRITE out of bounds whose payload is not its DMA length, for one).
    NakOneOf {
        /// PSN.
        psn: Psn,
        /// Codes, any one conforms.
        codes: Vec<NakCode>,
        /// MSN.
        msn: u32,
    },
    /// An RNR NAK (any timer).
    Rnr {
        /// PSN.
        psn: Psn,
        /// MSN.
        msn: u32,
    },
    /// A READ response packet.
    Read {
        /// Opcode (FIRST/MIDDLE/LAST/ONLY).
        opcode: Opcode,
        /// PSN.
        psn: Psn,
        /// The AETH's MSN, where it carries one and the rules fix it (`None`: MIDDLE, or a
        /// replay, whose MSN IBA leaves to the responder).
        msn: Option<u32>,
        /// Payload.
        data: Vec<u8>,
    },
    /// An ATOMIC ACKNOWLEDGE.
    Atomic {
        /// PSN.
        psn: Psn,
        /// The original remote data.
        orig: u64,
    },
    /// Any one of these: where the IBA leaves a packet's form open (a READ resumed from
    /// inside its responses: its first response a FIRST or the MIDDLE it would have been).
    OneOf(Vec<Answer>),
    /// Something no rule asks for (seen from a peer only): what it was.
    Unexpected(String),
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Ack { lo, hi, msn, required } => {
                let opt = if *required { "" } else { " (may be coalesced)" };
                if lo == hi {
                    write!(f, "ACK psn={:#08x} msn={msn}{opt}", lo.value())
                } else {
                    write!(f, "ACK psn={:#08x}..={:#08x} msn={msn}{opt}", lo.value(), hi.value())
                }
            }
            Answer::Nak { psn, code, msn } => write!(f, "NAK {} psn={:#08x} msn={msn}", code.name(), psn.value()),
            Answer::NakOneOf { psn, codes, msn } => {
                let names: Vec<&str> = codes.iter().map(|c| c.name()).collect();
                write!(f, "NAK {} psn={:#08x} msn={msn}", names.join(" or "), psn.value())
            }
            Answer::Rnr { psn, msn } => write!(f, "RNR NAK psn={:#08x} msn={msn}", psn.value()),
            Answer::Read { opcode, psn, msn, data } => {
                write!(f, "{} psn={:#08x}", opcode.name(), psn.value())?;
                if let Some(m) = msn {
                    write!(f, " msn={m}")?;
                }
                let head: Vec<String> = data.iter().take(4).map(|b| format!("{b:02x}")).collect();
                write!(f, " {} bytes [{}..]", data.len(), head.join(" "))
            }
            Answer::Atomic { psn, orig } => write!(f, "ATOMIC_ACK psn={:#08x} orig={orig:#x}", psn.value()),
            Answer::OneOf(v) => {
                let all: Vec<String> = v.iter().map(ToString::to_string).collect();
                write!(f, "{}", all.join(" or "))
            }
            Answer::Unexpected(s) => f.write_str(s),
        }
    }
}

/// A memory region the peer advertised, and what the model knows it holds.
#[derive(Debug, Clone)]
pub struct Region {
    /// Virtual address.
    pub va: u64,
    /// R_Key.
    pub rkey: u32,
    /// Remote write allowed.
    pub write: bool,
    /// Remote read allowed.
    pub read: bool,
    /// Remote atomics allowed.
    pub atomic: bool,
    /// Its bytes.
    pub data: Vec<u8>,
}

impl Region {
    /// `va..va+len` within the region: its offset.
    fn offset(&self, va: u64, len: u64) -> Option<usize> {
        let end = va.checked_add(len)?;
        let rend = self.va.checked_add(u64::try_from(self.data.len()).ok()?)?;
        if va >= self.va && end <= rend {
            usize::try_from(va - self.va).ok()
        } else {
            None
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InMsg {
    Send { bytes: u64 },
    Write { region: usize, va: u64, left: u64 },
}

#[derive(Debug, Clone)]
enum Done {
    Read { psn: Psn, region: usize, va: u64, len: u32, rkey: u32 },
    Atomic { psn: Psn, orig: u64 },
}

/// The model of a conforming RC responder.
#[derive(Debug, Clone)]
pub struct Responder {
    epsn: Psn,
    msn: u32,
    nak_seq_sent: bool,
    msg: Option<InMsg>,
    recvs: u32,
    recv_len: u64,
    pmtu: usize,
    regions: Vec<Region>,
    done: Vec<Done>,
    dead: bool,
    unsure: Option<String>,
}

/// A request as the tester sends it.
#[derive(Debug, Clone)]
pub struct Request {
    /// Its headers (the BTH's pad count is the one on the wire: see `pad`).
    pub repr: RoceRepr,
    /// Payload.
    pub payload: Vec<u8>,
    /// The pad count on the wire, where the tester wrote one other than the payload's.
    pub pad: Option<u8>,
    /// Sent only once the peer has gone quiet (a retransmission comes after its timer,
    /// when the original's answer has had time to leave).
    pub settle: bool,
}

impl Request {
    /// A request of `op` to QP `dest` at `psn`, with the default partition and no other
    /// BTH flag than AckReq (the tester's requests: the scenarios, UC, the fuzzers).
    pub fn new(
        op: Opcode,
        dest: u32,
        psn: Psn,
        ack_req: bool,
        ext: rnic_wire::roce::ExtHeaders,
        payload: Vec<u8>,
    ) -> Request {
        let bth = rnic_wire::bth::BthRepr {
            opcode: op,
            se: false,
            migreq: false,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: rnic_wire::Qpn::new(dest),
            ack_req,
            psn,
        };
        Request { repr: RoceRepr { bth, ext, payload_len: payload.len() }, payload, pad: None, settle: false }
    }
}

impl Responder {
    /// A responder whose expected PSN is `epsn`, with `recvs` receive WQEs of `recv_len`
    /// bytes posted, path MTU `pmtu` bytes, and these regions.
    pub fn new(epsn: Psn, recvs: u32, recv_len: u64, pmtu: usize, regions: Vec<Region>) -> Responder {
        Responder {
            epsn,
            msn: 0,
            nak_seq_sent: false,
            msg: None,
            recvs,
            recv_len,
            pmtu,
            regions,
            done: Vec::new(),
            dead: false,
            unsure: None,
        }
    }

    /// The expected PSN.
    pub fn epsn(&self) -> Psn {
        self.epsn
    }

    /// Receive WQEs left.
    pub fn recvs(&self) -> u32 {
        self.recvs
    }

    /// The QP is in the Error state (a fatal NAK was due): it answers nothing more.
    pub fn is_dead(&self) -> bool {
        self.dead
    }

    /// A multi-packet message is in progress.
    pub fn in_message(&self) -> bool {
        self.msg.is_some()
    }

    /// Set once a request reached a case the IBA leaves to the responder (a duplicate READ
    /// whose PSN is not one the model saw a READ at, for one): from then on the model no
    /// longer knows the peer's state. Says what it was.
    pub fn unsure(&self) -> Option<&str> {
        self.unsure.as_deref()
    }

    fn give_up(&mut self, why: &str) -> Vec<Answer> {
        if self.unsure.is_none() {
            self.unsure = Some(why.to_string());
        }
        Vec::new()
    }

    /// The bytes of region `i` as the model has them.
    pub fn region(&self, i: usize) -> Option<&Region> {
        self.regions.get(i)
    }

    fn fatal(&mut self, psn: Psn, code: NakCode) -> Vec<Answer> {
        // IBA 9.9.3.1: an invalid request or a remote access error is reported with its
        // NAK, and the responder's QP goes to the Error state: it answers nothing more.
        self.dead = true;
        vec![Answer::Nak { psn, code, msn: self.msn }]
    }

    /// A request breaking both an access rule and a length rule: the IBA does not order
    /// the two checks (unverified: no responder check order found in 9.7.5), so either NAK
    /// conforms.
    fn fatal_either(&mut self, psn: Psn, access: bool, length: bool) -> Vec<Answer> {
        match (access, length) {
            (true, true) => {
                self.dead = true;
                let codes = vec![NakCode::RemoteAccessError, NakCode::InvalidRequest];
                vec![Answer::NakOneOf { psn, codes, msn: self.msn }]
            }
            (true, false) => self.fatal(psn, NakCode::RemoteAccessError),
            _ => self.fatal(psn, NakCode::InvalidRequest),
        }
    }

    fn find(&self, rkey: u32, va: u64, len: u64, want: fn(&Region) -> bool) -> Option<(usize, usize)> {
        let (i, r) = self.regions.iter().enumerate().find(|(_, r)| r.rkey == rkey)?;
        if !want(r) {
            return None;
        }
        r.offset(va, len).map(|o| (i, o))
    }

    /// The answers a conforming responder gives to `req`, and the state it leaves.
    pub fn handle(&mut self, req: &Request) -> Vec<Answer> {
        // IBA 9.9.3.1 / 10.3.1: a QP in the Error state takes no request.
        if self.dead || self.unsure.is_some() {
            return Vec::new();
        }
        let Some(info) = req.repr.info() else { return Vec::new() };
        let bth = &req.repr.bth;
        let psn = bth.psn;
        let d = self.epsn.distance(psn);
        if d > 0 {
            // IBA 9.7.5.1.2 (out of sequence): one PSN sequence error NAK carrying the
            // expected PSN, then silence until the expected PSN arrives.
            if self.nak_seq_sent {
                return Vec::new();
            }
            self.nak_seq_sent = true;
            return vec![Answer::Nak { psn: self.epsn, code: NakCode::PsnSequenceError, msn: self.msn }];
        }
        if d < 0 {
            return self.duplicate(req, info.operation);
        }
        self.nak_seq_sent = false;
        // IBA 9.7.5.1.3 (opcode sequence): a MIDDLE or LAST continues a message of its
        // kind; anything else starts one.
        let cont = matches!(info.position, Position::Middle | Position::Last);
        let same = match (self.msg, info.operation) {
            (Some(InMsg::Send { .. }), Operation::Send) | (Some(InMsg::Write { .. }), Operation::RdmaWrite) => true,
            (Some(_), _) => false,
            (None, _) => !cont,
        };
        if (self.msg.is_some() && !cont) || !same {
            return self.fatal(psn, NakCode::InvalidRequest);
        }
        // IBA 9.7.5.1.4 / C9-20 (length): a FIRST or MIDDLE carries exactly one PMTU and
        // no pad; a LAST or ONLY at most one PMTU. The pad count must be the payload's.
        // A pad count other than the payload's moves where the responder sees the
        // payload end: it reads the packet as the wire has it.
        let pad_true = (4 - req.payload.len() % 4) % 4;
        let pad_wire = req.pad.map_or(pad_true, usize::from);
        let n = (req.payload.len() + pad_true).saturating_sub(pad_wire);
        let len_ok = match info.position {
            Position::First | Position::Middle => n == self.pmtu && pad_wire == 0,
            _ => n <= self.pmtu,
        };
        if info.payload && !len_ok {
            return self.fatal(psn, NakCode::InvalidRequest);
        }
        match info.operation {
            Operation::Send => self.send(req, info.position),
            Operation::RdmaWrite => self.write(req, info.position),
            Operation::RdmaReadRequest => self.read(req),
            Operation::CompareSwap | Operation::FetchAdd => self.atomic(req, info.operation),
            // Operations the model does not judge: the tester sends none.
            _ => Vec::new(),
        }
    }

    /// A packet whose headers the transport cannot take ([`View::Invalid`]): at the
    /// expected PSN an invalid request (IBA 9.9.3.1, class C); ahead of it the PSN rule
    /// first (9.7.5.1.2); behind it, a duplicate of what the IBA does not say.
    pub fn invalid(&mut self, psn: Psn) -> Vec<Answer> {
        if self.dead || self.unsure.is_some() {
            return Vec::new();
        }
        let d = self.epsn.distance(psn);
        if d > 0 {
            if self.nak_seq_sent {
                return Vec::new();
            }
            self.nak_seq_sent = true;
            return vec![Answer::Nak { psn: self.epsn, code: NakCode::PsnSequenceError, msn: self.msn }];
        }
        if d < 0 {
            return self.give_up("a malformed duplicate");
        }
        self.fatal(psn, NakCode::InvalidRequest)
    }

    fn ack(&mut self, psn: Psn, last: bool, ack_req: bool) -> Vec<Answer> {
        self.epsn = psn.next();
        if last {
            self.msg = None;
            self.msn = (self.msn + 1) & 0xff_ffff;
        }
        vec![Answer::Ack { lo: psn, hi: psn, msn: self.msn, required: ack_req }]
    }

    fn send(&mut self, req: &Request, pos: Position) -> Vec<Answer> {
        let psn = req.repr.bth.psn;
        let n = u64::try_from(req.payload.len()).unwrap_or(u64::MAX);
        let so_far = match self.msg {
            Some(InMsg::Send { bytes }) => bytes,
            _ => {
                // IBA 9.7.5.2.8 (RNR): no receive WQE for a new SEND: RNR NAK with its
                // PSN; the QP stays as it was and the request is expected again.
                if self.recvs == 0 {
                    return vec![Answer::Rnr { psn, msn: self.msn }];
                }
                self.recvs -= 1;
                0
            }
        };
        let total = so_far + n;
        // IBA 9.7.5.2.2 / C9-? (length error): a message longer than the receive buffer is
        // an invalid request.
        if total > self.recv_len {
            return self.fatal(psn, NakCode::InvalidRequest);
        }
        let last = matches!(pos, Position::Last | Position::Only);
        self.msg = Some(InMsg::Send { bytes: total });
        self.ack(psn, last, req.repr.bth.ack_req)
    }

    fn write(&mut self, req: &Request, pos: Position) -> Vec<Answer> {
        let psn = req.repr.bth.psn;
        let n = u64::try_from(req.payload.len()).unwrap_or(u64::MAX);
        let last = matches!(pos, Position::Last | Position::Only);
        // IBA 9.7.5.1.4 / C9-? (length): the payloads add up to the RETH's DMA length,
        // exactly at the last packet.
        let len_bad = |left: u64| n > left || (last && n != left) || (!last && n == left);
        let (region, va, left) = match (self.msg, req.repr.ext.reth) {
            (Some(InMsg::Write { region, va, left }), _) => (region, va, left),
            (_, Some(reth)) => {
                let len = u64::from(reth.dma_len);
                // IBA C9-88: a zero-length WRITE checks no R_Key.
                if len == 0 {
                    (usize::MAX, reth.va, 0)
                } else {
                    // IBA 9.7.4.1.4 / 10.6.3: the R_Key names a region with remote write
                    // access and the range lies within it, else a remote access error.
                    match self.find(reth.rkey, reth.va, len, |r| r.write) {
                        Some((i, _)) => (i, reth.va, len),
                        None => return self.fatal_either(psn, true, len_bad(len)),
                    }
                }
            }
            (_, None) => return self.fatal(psn, NakCode::InvalidRequest),
        };
        if len_bad(left) {
            return self.fatal(psn, NakCode::InvalidRequest);
        }
        // IBA 9.4.3 / 9.7.5.2.8: an RDMA WRITE with immediate consumes a receive WQE at its
        // last packet; none posted is an RNR NAK, nothing done (unverified: C9-? number).
        let imm = req.repr.info().is_some_and(|i| i.immediate());
        if last && imm {
            if self.recvs == 0 {
                return vec![Answer::Rnr { psn, msn: self.msn }];
            }
            self.recvs -= 1;
        }
        if n > 0 {
            if let Some(r) = self.regions.get_mut(region) {
                if let Some(o) = r.offset(va, n) {
                    r.data[o..o + req.payload.len()].copy_from_slice(&req.payload);
                }
            }
        }
        self.msg = if last { None } else { Some(InMsg::Write { region, va: va + n, left: left - n }) };
        self.ack(psn, last, req.repr.bth.ack_req)
    }

    fn read_answers(&self, first: Psn, region: usize, va: u64, len: u32, from: u32, msn: Option<u32>) -> Vec<Answer> {
        let pmtu = u32::try_from(self.pmtu).unwrap_or(u32::MAX).max(1);
        let npkts = len.div_ceil(pmtu).max(1);
        let data = self.regions.get(region).and_then(|r| r.offset(va, u64::from(len)).map(|o| (r, o)));
        (from..npkts)
            .map(|i| {
                let opcode = match (npkts, i) {
                    (1, _) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    (_, 0) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                    (_, i) if i + 1 == npkts => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                    _ => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                };
                let a = usize::try_from(i * pmtu).unwrap_or(usize::MAX);
                let b = usize::try_from((i * pmtu + pmtu).min(len)).unwrap_or(usize::MAX);
                let bytes = data.map(|(r, o)| r.data[o + a..o + b].to_vec()).unwrap_or_default();
                let carries_aeth = opcode != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE;
                Answer::Read { opcode, psn: first.add(i), msn: msn.filter(|_| carries_aeth), data: bytes }
            })
            .collect()
    }

    fn read(&mut self, req: &Request) -> Vec<Answer> {
        let psn = req.repr.bth.psn;
        let Some(reth) = req.repr.ext.reth else { return self.fatal(psn, NakCode::InvalidRequest) };
        let region = if reth.dma_len == 0 {
            usize::MAX
        } else {
            // IBA 9.7.4.1.4 / 10.6.3: remote read access and bounds.
            match self.find(reth.rkey, reth.va, u64::from(reth.dma_len), |r| r.read) {
                Some((i, _)) => i,
                None => return self.fatal(psn, NakCode::RemoteAccessError),
            }
        };
        // IBA C9-148: a READ counts as a message when it is accepted; its responses take
        // one PSN each (IBA 9.7.5.1.1), so the next request's PSN is after them.
        self.msn = (self.msn + 1) & 0xff_ffff;
        let out = self.read_answers(psn, region, reth.va, reth.dma_len, 0, Some(self.msn));
        self.epsn = psn.add(u32::try_from(out.len()).unwrap_or(1));
        self.done.push(Done::Read { psn, region, va: reth.va, len: reth.dma_len, rkey: reth.rkey });
        out
    }

    fn atomic(&mut self, req: &Request, op: Operation) -> Vec<Answer> {
        let psn = req.repr.bth.psn;
        let Some(a) = req.repr.ext.atomic_eth else { return self.fatal(psn, NakCode::InvalidRequest) };
        // IBA 9.4.5: the target is 8 bytes, 8-aligned, in a region with atomic access
        // (C9-? misalignment is an invalid request; access and bounds a remote access error).
        let found = self.find(a.rkey, a.va, 8, |r| r.atomic);
        if a.va % 8 != 0 {
            return self.fatal_either(psn, found.is_none(), true);
        }
        let Some((i, o)) = found else {
            return self.fatal(psn, NakCode::RemoteAccessError);
        };
        let r = &mut self.regions[i];
        let mut w = [0u8; 8];
        w.copy_from_slice(&r.data[o..o + 8]);
        // Atomics act on host-order (little-endian here) 64-bit words.
        let orig = u64::from_le_bytes(w);
        let new = match op {
            Operation::FetchAdd => orig.wrapping_add(a.swap_add),
            _ if orig == a.compare => a.swap_add,
            _ => orig,
        };
        r.data[o..o + 8].copy_from_slice(&new.to_le_bytes());
        self.msn = (self.msn + 1) & 0xff_ffff;
        self.epsn = psn.next();
        self.done.push(Done::Atomic { psn, orig });
        vec![Answer::Atomic { psn, orig }]
    }

    /// IBA 9.7.5.1.5: a duplicate is never executed again. SEND and WRITE are
    /// acknowledged again (C9-105) with the current MSN; a READ is answered again from
    /// the requested PSN on, with the memory as it is now; an atomic returns the
    /// original value it returned the first time.
    fn duplicate(&mut self, req: &Request, op: Operation) -> Vec<Answer> {
        let psn = req.repr.bth.psn;
        match op {
            Operation::RdmaReadRequest => {
                for d in self.done.iter().rev() {
                    if let Done::Read { psn: p, region, va, len, rkey } = *d {
                        if p == psn {
                            let same = req.repr.ext.reth.is_some_and(|r| r.va == va && r.dma_len == len);
                            if !same {
                                return self.give_up("a duplicate READ whose RETH is not the original's");
                            }
                            return self.read_answers(psn, region, va, len, 0, None);
                        }
                        let pmtu = u32::try_from(self.pmtu).unwrap_or(u32::MAX).max(1);
                        let npkts = len.div_ceil(pmtu).max(1);
                        let off = p.distance(psn);
                        if off > 0 && i64::from(off) < i64::from(npkts) {
                            // A READ partly answered, asked again from inside (IBA 9.7.5.1.5,
                            // clause unverified): the requester restarts at the PSN of the
                            // first response it lacks, its RETH moved on by the bytes before
                            // it (VA up, length down, R_Key the same); the responder answers
                            // from that PSN with those bytes, as the memory is now. Whether
                            // that first response is a FIRST (a new READ's) or the MIDDLE /
                            // LAST it would have been in the original the IBA leaves open
                            // here: either is allowed, packet by packet.
                            let k = u32::try_from(off).unwrap_or(0);
                            let done = u64::from(k) * u64::from(pmtu);
                            let resumed = req.repr.ext.reth.is_some_and(|r| {
                                r.rkey == rkey
                                    && r.va == va.wrapping_add(done)
                                    && u64::from(r.dma_len) + done == u64::from(len)
                            });
                            if !resumed {
                                return self.give_up("a duplicate READ from inside an earlier READ's responses, its RETH not moved on to that PSN");
                            }
                            let rest = len - k * pmtu;
                            let fresh = self.read_answers(psn, region, va.wrapping_add(done), rest, 0, None);
                            let cont = self.read_answers(p, region, va, len, k, None);
                            return fresh.into_iter().zip(cont).map(|(a, b)| Answer::OneOf(vec![a, b])).collect();
                        }
                    }
                }
                self.give_up("a duplicate READ at a PSN no READ was seen at")
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let orig = self.done.iter().rev().find_map(|d| match *d {
                    Done::Atomic { psn: p, orig } if p == psn => Some(orig),
                    _ => None,
                });
                match orig {
                    Some(orig) => vec![Answer::Atomic { psn, orig }],
                    None => self.give_up("a duplicate atomic at a PSN no atomic was seen at"),
                }
            }
            _ => {
                // A duplicate SEND or WRITE at the PSN of a READ or atomic the model saw:
                // which request it duplicates is not settled by the IBA.
                let clash = self.done.iter().any(|d| match *d {
                    Done::Atomic { psn: p, .. } => p == psn,
                    Done::Read { psn: p, len, .. } => {
                        let pmtu = u32::try_from(self.pmtu).unwrap_or(u32::MAX).max(1);
                        let off = p.distance(psn);
                        off >= 0 && i64::from(off) < i64::from(len.div_ceil(pmtu).max(1))
                    }
                });
                if clash {
                    return self.give_up("a duplicate SEND or WRITE at the PSN of an earlier READ or atomic");
                }
                vec![Answer::Ack { lo: psn, hi: self.epsn.sub(1), msn: self.msn, required: true }]
            }
        }
    }
}

/// What a responder makes of a packet, before its transport rules (9.7.5) see it.
#[derive(Debug, Clone)]
pub enum View {
    /// Silently dropped, for this rule.
    Drop(&'static str),
    /// A request for the transport's rules ([`Responder::handle`]).
    Request(Request),
    /// A packet the transport refuses as an invalid request (when its PSN is the expected
    /// one: [`Responder::invalid`]), for this rule.
    Invalid {
        /// Its PSN.
        psn: Psn,
        /// Why.
        why: &'static str,
    },
    /// A packet the model does not judge (an optional operation): why.
    Unjudged(String),
}

/// What a conforming RC responder whose QP is `qpn` makes of `bytes` (BTH..ICRC, the ICRC
/// good: a bad one is dropped before anything else, IBA C9-3): the header checks of IBA
/// 9.6 (a packet failing one is silently dropped, no NAK), then the request its headers
/// describe. Where the IBA leaves a choice (a reserved opcode: drop it or NAK it), every
/// choice is listed.
pub fn classify(bytes: &[u8], qpn: u32) -> Vec<View> {
    classify_as(bytes, qpn, Transport::Rc)
}

/// [`classify`] for a QP of service `service` (RC, UC or UD). UC and UD answer nothing:
/// where an RC responder may NAK (a reserved opcode, a PadCnt larger than the payload)
/// they drop silently (IBA 9.8.3 / 9.6, unverified clauses), so only [`View::Drop`] and
/// [`View::Request`] come back for them. A UD datagram's P_Key and destination QP are
/// checked here as for the others (the UD model checks them again, to the same effect).
pub fn classify_as(bytes: &[u8], qpn: u32, service: Transport) -> Vec<View> {
    const BTH: usize = 12;
    const ICRC: usize = 4;
    let psn = Psn::new(u32::from_be_bytes([
        0,
        bytes.get(9).copied().unwrap_or(0),
        bytes.get(10).copied().unwrap_or(0),
        bytes.get(11).copied().unwrap_or(0),
    ]));
    let acked = service == Transport::Rc;
    let fatal_or_drop = |why: &'static str| {
        if acked {
            vec![View::Drop(why), View::Invalid { psn, why }]
        } else {
            vec![View::Drop(why)]
        }
    };
    let (code, other) = match service {
        Transport::Uc => (1u8, "opcode of another transport than UC (IBA 9.6.1, unverified)"),
        Transport::Ud => (3u8, "opcode of another transport than UD (IBA 9.6.1, unverified)"),
        _ => (0u8, "opcode of another transport than RC (IBA 9.6.1, unverified)"),
    };
    if bytes.len() < BTH + ICRC {
        return vec![View::Drop("shorter than a BTH (IBA 9.6, malformed; unverified clause)")];
    }
    // IBA 9.6.1 (BTH checks, unverified clause numbers): TVer 0, the P_Key of the QP's
    // partition (C9-42/43: RoCE's one default partition, low 15 bits all ones), the
    // destination QP this one; a packet failing one is dropped silently.
    if bytes[1] & 0x0f != 0 {
        return vec![View::Drop("TVer not 0 (IBA 9.6.1.1, unverified)")];
    }
    if u16::from_be_bytes([bytes[2], bytes[3]]) & 0x7fff != 0x7fff {
        return vec![View::Drop("P_Key not the QP's partition (IBA C9-42/43)")];
    }
    if u32::from_be_bytes([0, bytes[5], bytes[6], bytes[7]]) != qpn {
        return vec![View::Drop("destination QP not this connection's")];
    }
    // IBA 9.6.1 (unverified clause): the opcode's transport (its top three bits) must be
    // the QP's service type.
    let op = Opcode(bytes[0]);
    if op.0 >> 5 != code {
        return vec![View::Drop(other)];
    }
    let Some(info) = op.info() else {
        // An opcode the IBA reserves: unverified whether an RC responder drops it or NAKs
        // it as an invalid request (class C, 9.9.3.1): both listed, the NAK unjudged. UC
        // and UD drop it.
        return fatal_or_drop("a reserved opcode of the QP's transport");
    };
    if info.transport != service {
        return vec![View::Drop(other)];
    }
    if !info.request {
        // A response reaching the peer's requester, which has nothing outstanding: a
        // ghost response is dropped (IBA 9.7.6.1, unverified clause).
        return vec![View::Drop("a response opcode, nothing outstanding at the peer's requester")];
    }
    if info.invalidate() || matches!(info.operation, Operation::Flush | Operation::AtomicWrite) {
        return vec![View::Unjudged(format!("{}: an optional operation the model does not judge", info.name))];
    }
    let headers_end = info.payload_offset();
    if bytes.len() < headers_end + ICRC {
        return vec![View::Drop("shorter than its opcode's headers (IBA 9.6, malformed; unverified clause)")];
    }
    if bytes.len() % 4 != 0 {
        return vec![View::Drop("not a whole number of 4-byte words (IBA 9.2.2)")];
    }
    let available = bytes.len() - headers_end - ICRC;
    let pad = usize::from((bytes[1] >> 4) & 3);
    if pad > available {
        return fatal_or_drop("a PadCnt larger than the payload");
    }
    if !info.payload && available > 0 {
        return fatal_or_drop("a payload on an opcode that carries none");
    }
    let parsed = RocePacket::new_checked(bytes).and_then(|p| Ok((RoceRepr::parse(&p)?, p.payload().to_vec())));
    match parsed {
        Ok((repr, payload)) => vec![View::Request(Request { repr, payload, pad: None, settle: false })],
        Err(e) => vec![View::Unjudged(format!("the codec does not read it: {e}"))],
    }
}

/// A receive completion at a UC responder, as the model has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UcRecv {
    /// The message's bytes (a SEND's; empty for an RDMA WRITE with immediate).
    pub data: Vec<u8>,
    /// Its immediate data, if it carried one.
    pub imm: Option<u32>,
    /// An RDMA WRITE with immediate (its data went to the region; verbs implementations
    /// differ on the completion's byte count, which is not judged).
    pub write: bool,
}

/// The model of a conforming UC responder (IBA 9.8.3, unverified clause numbers): no
/// ACK, no NAK, ever; a packet at a PSN other than the expected one ends the message in
/// progress, which is dropped, and only a FIRST or ONLY (at any PSN) starts the next; an
/// RDMA WRITE whose R_Key, access or bounds fail is dropped (the whole message), the QP
/// staying as it was; so is one whose length breaks the rules of 9.7.5.1.4 (a FIRST or
/// MIDDLE of exactly one PMTU, a LAST or ONLY of at most one). What it did shows in its
/// memory and its receive completions.
#[derive(Debug, Clone)]
pub struct UcResponder {
    epsn: Psn,
    dropping: bool,
    msg: Option<InMsg>,
    send_data: Vec<u8>,
    recvs: u32,
    recv_len: u64,
    pmtu: usize,
    regions: Vec<Region>,
    /// The receive completions, in order.
    pub completions: Vec<UcRecv>,
}

impl UcResponder {
    /// A UC responder expecting `epsn`, with `recvs` receives of `recv_len` bytes, path
    /// MTU `pmtu` bytes.
    pub fn new(epsn: Psn, recvs: u32, recv_len: u64, pmtu: usize, regions: Vec<Region>) -> UcResponder {
        UcResponder {
            epsn,
            dropping: false,
            msg: None,
            send_data: Vec::new(),
            recvs,
            recv_len,
            pmtu,
            regions,
            completions: Vec::new(),
        }
    }

    /// Region `i` as the model has it.
    pub fn region(&self, i: usize) -> Option<&Region> {
        self.regions.get(i)
    }

    /// Receives still posted.
    pub fn recvs(&self) -> u32 {
        self.recvs
    }

    /// The PSN it expects next.
    pub fn epsn(&self) -> Psn {
        self.epsn
    }

    /// Takes `req` (a UC request); a UC responder answers nothing.
    pub fn handle(&mut self, req: &Request) {
        let Some(info) = req.repr.info() else { return };
        let psn = req.repr.bth.psn;
        let starts = matches!(info.position, Position::First | Position::Only);
        if psn != self.epsn || self.dropping {
            // The message in progress is lost; resynchronise on a FIRST or ONLY.
            self.msg = None;
            if !starts {
                self.dropping = true;
                self.epsn = psn.next();
                return;
            }
            self.dropping = false;
        }
        self.epsn = psn.next();
        let last = matches!(info.position, Position::Last | Position::Only);
        // IBA 9.7.5.1.4 (length, as 9.8.3 applies it to UC; unverified clause): a FIRST or
        // MIDDLE carries exactly one PMTU, a LAST or ONLY at most one; else the message is
        // dropped.
        let n = req.payload.len();
        let len_ok = if last { n <= self.pmtu } else { n == self.pmtu };
        if !len_ok {
            self.msg = None;
            self.dropping = !last;
            return;
        }
        let imm = info.has(rnic_wire::opcode::HeaderKind::ImmDt).then(|| req.repr.ext.imm_data.unwrap_or(0));
        match info.operation {
            Operation::Send => {
                if starts {
                    // A new message: one in progress is abandoned (its receive WQE not
                    // consumed).
                    self.msg = Some(InMsg::Send { bytes: 0 });
                    self.send_data.clear();
                } else if !matches!(self.msg, Some(InMsg::Send { .. })) {
                    self.dropping = true;
                    return;
                }
                self.send_data.extend_from_slice(&req.payload);
                if last {
                    self.msg = None;
                    let n = u64::try_from(self.send_data.len()).unwrap_or(u64::MAX);
                    if self.recvs > 0 && n <= self.recv_len {
                        self.recvs -= 1;
                        self.completions.push(UcRecv { data: std::mem::take(&mut self.send_data), imm, write: false });
                    }
                }
            }
            Operation::RdmaWrite => {
                let (region, va, left) = match (starts, self.msg, req.repr.ext.reth) {
                    (true, _, Some(r)) => {
                        let len = u64::from(r.dma_len);
                        match self.regions.iter().enumerate().find(|(_, g)| g.rkey == r.rkey && g.write) {
                            Some((i, g)) if g.offset(r.va, len).is_some() => (i, r.va, len),
                            _ => {
                                // IBA 9.8.3 (unverified clause): dropped, no NAK.
                                self.msg = None;
                                self.dropping = !last;
                                return;
                            }
                        }
                    }
                    (false, Some(InMsg::Write { region, va, left }), _) => (region, va, left),
                    _ => {
                        self.msg = None;
                        self.dropping = !last;
                        return;
                    }
                };
                let n = u64::try_from(req.payload.len()).unwrap_or(u64::MAX);
                if n > left || (last && n != left) {
                    self.msg = None;
                    self.dropping = !last;
                    return;
                }
                if let Some(r) = self.regions.get_mut(region) {
                    if let Some(o) = r.offset(va, n) {
                        r.data[o..o + req.payload.len()].copy_from_slice(&req.payload);
                    }
                }
                self.msg = if last { None } else { Some(InMsg::Write { region, va: va + n, left: left - n }) };
                // IBA 9.4.3 (unverified clause): a WRITE with immediate consumes a receive
                // when its last packet lands.
                if last && imm.is_some() && self.recvs > 0 {
                    self.recvs -= 1;
                    self.completions.push(UcRecv { data: Vec::new(), imm, write: true });
                }
            }
            _ => {}
        }
    }
}

/// How a UD receive completes, as the model has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdStatus {
    /// Delivered.
    Success,
    /// A datagram longer than the receive buffer (less its GRH area): a local length
    /// error, or dropped before any receive is taken (see [`UdReceiver::handle`]).
    LengthError,
}

/// A receive completion at a UD receiver, as the model has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdRecv {
    /// How it completes.
    pub status: UdStatus,
    /// The datagram's payload.
    pub data: Vec<u8>,
    /// The DETH's source QP.
    pub src_qp: u32,
    /// Its immediate data, if it carried one.
    pub imm: Option<u32>,
    /// A conforming receiver may instead drop the datagram without a completion.
    pub optional: bool,
}

/// The model of a conforming UD receiver (IBA 9.8 / 10.2.5 / 9.6, clause numbers
/// unverified): one packet is one message, nothing is ever sent back (no ACK, no NAK), no
/// PSN is checked (UD has no sequence). A datagram is delivered when its BTH names this QP,
/// carries a P_Key of its partition (RoCE's default, 0xFFFF: low 15 bits all ones, and a
/// limited member 0x7FFF matches a full one, IBA 10.9.3), a UD SEND opcode and the QP's
/// Q_Key in its DETH, and a receive WQE is posted; anything else is dropped silently.
#[derive(Debug, Clone)]
pub struct UdReceiver {
    qpn: u32,
    qkey: u32,
    recvs: u32,
    recv_len: u64,
    /// The receive completions, in order.
    pub completions: Vec<UdRecv>,
    /// Why each datagram not delivered was dropped, in order.
    pub dropped: Vec<&'static str>,
}

/// The bytes at the head of a UD receive buffer that hold the GRH (verbs; RoCEv2 Annex
/// A17: for IPv4, the IPv4 header in the last 20 of them).
pub const GRH_AREA: u64 = 40;

impl UdReceiver {
    /// The UD QP `qpn` with Q_Key `qkey` and `recvs` receives of `recv_len` bytes each (the
    /// 40-byte GRH area included).
    pub fn new(qpn: u32, qkey: u32, recvs: u32, recv_len: u64) -> UdReceiver {
        UdReceiver { qpn, qkey, recvs, recv_len, completions: Vec::new(), dropped: Vec::new() }
    }

    fn drop(&mut self, why: &'static str) {
        self.dropped.push(why);
    }

    /// Receives still posted.
    pub fn recvs(&self) -> u32 {
        self.recvs
    }

    /// Takes the datagram `req`; a UD receiver answers nothing.
    pub fn handle(&mut self, req: &Request) {
        let bth = &req.repr.bth;
        // IBA 9.6.1 (unverified clause): a packet for a QP that does not exist is dropped.
        if bth.dest_qp.value() != self.qpn {
            return self.drop("destination QP not this one (IBA 9.6.1, unverified)");
        }
        // IBA 9.6.2 / 10.9.3 (P_Key check, unverified clauses): the low 15 bits are the
        // partition; a limited member (bit 15 clear) matches the QP's full membership.
        if bth.pkey & 0x7fff != 0x7fff {
            return self.drop("P_Key of another partition (IBA 9.6.2, unverified)");
        }
        // IBA 9.6.1 (unverified clause): the opcode's transport must be the QP's; UD carries
        // SEND ONLY (with or without immediate) alone.
        let imm = match bth.opcode {
            Opcode::UD_SEND_ONLY => None,
            Opcode::UD_SEND_ONLY_WITH_IMMEDIATE => Some(req.repr.ext.imm_data.unwrap_or(0)),
            _ => return self.drop("not a UD SEND opcode (IBA 9.6.1, unverified)"),
        };
        // IBA 10.2.5 / C10-15 (Q_Key, unverified clause): the DETH's Q_Key must be the QP's,
        // else the datagram is dropped (and counted), never answered.
        let Some(deth) = req.repr.ext.deth else { return self.drop("no DETH") };
        if deth.qkey != self.qkey {
            return self.drop("Q_Key not the QP's (IBA 10.2.5, unverified)");
        }
        // IBA 9.9.3 class D (unverified): no receive WQE, the datagram is dropped (UD has no
        // RNR).
        if self.recvs == 0 {
            return self.drop("no receive posted (IBA 9.9.3, class D)");
        }
        let src_qp = deth.src_qp.value();
        let n = u64::try_from(req.payload.len()).unwrap_or(u64::MAX);
        if n + GRH_AREA > self.recv_len {
            // Longer than the receive buffer after its GRH area: the IBA's local length
            // error completes the receive in error (IBA 10.8.3.1 / 9.9.3 class D, unverified
            // clauses: the QP is not put in the Error state); a receiver that drops the
            // datagram instead, its receive kept for the next one (rnic does), is allowed
            // too. Either way the next datagram is delivered.
            self.recvs -= 1;
            self.completions.push(UdRecv {
                status: UdStatus::LengthError,
                data: Vec::new(),
                src_qp,
                imm,
                optional: true,
            });
            return;
        }
        self.recvs -= 1;
        self.completions.push(UdRecv {
            status: UdStatus::Success,
            data: req.payload.clone(),
            src_qp,
            imm,
            optional: false,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_wire::bth::BthRepr;
    use rnic_wire::deth::DethRepr;
    use rnic_wire::reth::RethRepr;
    use rnic_wire::roce::ExtHeaders;
    use rnic_wire::Qpn;

    fn packet(opcode: Opcode, pkey: u16, dest: u32, psn: u32, ext: ExtHeaders, payload: Vec<u8>) -> Request {
        let bth = BthRepr {
            opcode,
            se: false,
            migreq: false,
            pkey,
            fecn: false,
            becn: false,
            dest_qp: Qpn::new(dest),
            ack_req: true,
            psn: Psn::new(psn),
        };
        Request { repr: RoceRepr { bth, ext, payload_len: payload.len() }, payload, pad: None, settle: false }
    }

    fn dgram(pkey: u16, dest: u32, qkey: u32, n: usize) -> Request {
        let ext = ExtHeaders { deth: Some(DethRepr { qkey, src_qp: Qpn::new(0x77) }), ..ExtHeaders::default() };
        packet(Opcode::UD_SEND_ONLY, pkey, dest, 5, ext, vec![9; n])
    }

    #[test]
    fn the_ud_receiver_delivers_only_what_passes_every_check() {
        let mut m = UdReceiver::new(0x12, 0xabc, 16, 40 + 256);
        m.handle(&dgram(0xffff, 0x12, 0xabd, 8));
        m.handle(&dgram(0x8123, 0x12, 0xabc, 8));
        m.handle(&dgram(0xffff, 0x13, 0xabc, 8));
        let mut rc = dgram(0xffff, 0x12, 0xabc, 8);
        rc.repr.bth.opcode = Opcode::RC_SEND_ONLY;
        m.handle(&rc);
        assert!(m.completions.is_empty());
        assert_eq!(m.dropped.len(), 4, "{:?}", m.dropped);
        m.handle(&dgram(0x7fff, 0x12, 0xabc, 256));
        m.handle(&dgram(0xffff, 0x12, 0xabc, 257));
        let got: Vec<(UdStatus, usize, bool)> =
            m.completions.iter().map(|c| (c.status, c.data.len(), c.optional)).collect();
        assert_eq!(got, vec![(UdStatus::Success, 256, false), (UdStatus::LengthError, 0, true)]);
        assert_eq!(m.completions[0].src_qp, 0x77);
    }

    fn read(psn: u32, va: u64, rkey: u32, len: u32) -> Request {
        let ext = ExtHeaders { reth: Some(RethRepr { va, rkey, dma_len: len }), ..ExtHeaders::default() };
        packet(Opcode::RC_RDMA_READ_REQUEST, 0xffff, 1, psn, ext, Vec::new())
    }

    #[test]
    fn a_read_resumed_from_inside_is_answered_from_its_psn_with_either_opcode() {
        let region = Region { va: 0x1000, rkey: 7, write: true, read: true, atomic: true, data: (0..=255).collect() };
        let mut m = Responder::new(Psn::new(0xff_fffe), 0, 0, 64, vec![region]);
        assert_eq!(m.handle(&read(0xff_fffe, 0x1000, 7, 256)).len(), 4);
        // The two responses from 0 on, their bytes 128.., asked for again.
        let again = m.handle(&read(0, 0x1080, 7, 128));
        assert_eq!(again.len(), 2);
        let seen = |op, psn, from: u8| Answer::Read {
            opcode: op,
            psn: Psn::new(psn),
            msn: None,
            data: (0..64u8).map(|i| from + i).collect(),
        };
        let fresh =
            [seen(Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0, 128), seen(Opcode::RC_RDMA_READ_RESPONSE_LAST, 1, 192)];
        let cont =
            [seen(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 0, 128), seen(Opcode::RC_RDMA_READ_RESPONSE_LAST, 1, 192)];
        assert!(crate::judge::judge(&again, &fresh).is_ok());
        assert!(crate::judge::judge(&again, &cont).is_ok());
        let only = [seen(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 0, 128), seen(Opcode::RC_RDMA_READ_RESPONSE_LAST, 1, 192)];
        assert!(crate::judge::judge(&again, &only).is_err());
        let stale = [seen(Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0, 0), seen(Opcode::RC_RDMA_READ_RESPONSE_LAST, 1, 64)];
        assert!(crate::judge::judge(&again, &stale).is_err(), "the bytes are the resumed RETH's");
        assert_eq!(m.epsn(), Psn::new(2), "a duplicate moves no PSN");
        // A RETH not moved on to its PSN: the IBA does not say.
        assert!(m.handle(&read(0xff_ffff, 0x1000, 7, 256)).is_empty());
        assert!(m.unsure().is_some());
    }
}
