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
use rnic_wire::opcode::{Operation, Position};
use rnic_wire::roce::RoceRepr;
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
    Read { psn: Psn, region: usize, va: u64, len: u32 },
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
        }
    }

    /// The expected PSN.
    pub fn epsn(&self) -> Psn {
        self.epsn
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
        if self.dead {
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
                        None => return self.fatal(psn, NakCode::RemoteAccessError),
                    }
                }
            }
            (_, None) => return self.fatal(psn, NakCode::InvalidRequest),
        };
        let last = matches!(pos, Position::Last | Position::Only);
        // IBA 9.7.5.1.4 / C9-? (length): the payloads add up to the RETH's DMA length,
        // exactly at the last packet.
        if n > left || (last && n != left) || (!last && n == left) {
            return self.fatal(psn, NakCode::InvalidRequest);
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
        self.done.push(Done::Read { psn, region, va: reth.va, len: reth.dma_len });
        out
    }

    fn atomic(&mut self, req: &Request, op: Operation) -> Vec<Answer> {
        let psn = req.repr.bth.psn;
        let Some(a) = req.repr.ext.atomic_eth else { return self.fatal(psn, NakCode::InvalidRequest) };
        // IBA 9.4.5: the target is 8 bytes, 8-aligned, in a region with atomic access
        // (C9-? misalignment is an invalid request; access and bounds a remote access error).
        if a.va % 8 != 0 {
            return self.fatal(psn, NakCode::InvalidRequest);
        }
        let Some((i, o)) = self.find(a.rkey, a.va, 8, |r| r.atomic) else {
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
                    if let Done::Read { psn: p, region, va, len } = *d {
                        let off = p.distance(psn);
                        let pmtu = u32::try_from(self.pmtu).unwrap_or(u32::MAX).max(1);
                        let npkts = i64::from(len.div_ceil(pmtu).max(1));
                        if off >= 0 && i64::from(off) < npkts {
                            let from = u32::try_from(off).unwrap_or(0);
                            let skip = u64::from(from) * u64::from(pmtu);
                            let len2 = len - u32::try_from(skip).unwrap_or(0);
                            // The replay's packets are those of a READ of what is left
                            // (the scenarios replay whole READs only, so the opcodes of
                            // a replay from the middle are not judged yet).
                            return self.read_answers(psn, region, va + skip, len2, 0, None);
                        }
                    }
                }
                Vec::new()
            }
            Operation::CompareSwap | Operation::FetchAdd => self
                .done
                .iter()
                .rev()
                .find_map(|d| match *d {
                    Done::Atomic { psn: p, orig } if p == psn => Some(vec![Answer::Atomic { psn, orig }]),
                    _ => None,
                })
                .unwrap_or_default(),
            _ => vec![Answer::Ack { lo: psn, hi: self.epsn.sub(1), msn: self.msn, required: true }],
        }
    }
}
