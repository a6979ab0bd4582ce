//! UD scenarios (IBA 9.8 and 10.2.5: the UD receiver; 9.6: the header checks; clause
//! numbers unverified): a UD receiver answers nothing on the wire, so what it did is read
//! from the lab responder over a [`Session`]: its receive completions (status, length,
//! source QP, the GRH flag, immediate data) and the bytes of its receive buffers (the
//! 40-byte GRH area, then the payload). The session makes the UD QP and tells the tester
//! its QPN and Q_Key.
//!
//! Each scenario's datagrams go through the UD model ([`UdReceiver`]); then the tester
//! checks that nothing came back on the wire, that the completions are the model's (a
//! length error the model allows to be a silent drop may be missing) and that each
//! delivered datagram's buffer holds its payload after a GRH area naming the tester and
//! the responder (RoCEv2 Annex A17: over IPv4 its last 20 bytes are the IPv4 header).

use crate::link::Link;
use crate::model::{Request, UdReceiver, UdRecv, UdStatus, GRH_AREA};
use crate::scenario::{Options, Outcome, Verdict};
use crate::session::{gid, Completion, Kind, Session, WC_GRH, WC_LOC_LEN_ERR, WC_WITH_IMM};
use rnic_wire::bth::BthRepr;
use rnic_wire::deth::DethRepr;
use rnic_wire::roce::{ExtHeaders, RoceRepr};
use rnic_wire::{Opcode, Psn, Qpn};
use std::net::IpAddr;

/// `IBV_WC_RECV`.
const WC_RECV: u32 = 128;

/// What a UD scenario's datagrams are built from.
#[derive(Debug, Clone, Copy)]
pub struct UdEnv {
    /// The peer's UD QPN.
    pub dest: u32,
    /// Its Q_Key.
    pub qkey: u32,
    /// The tester's QPN (the DETH's source QP).
    pub src: u32,
}

/// A datagram's headers, changed from the right ones by a scenario.
#[derive(Debug, Clone, Copy)]
struct Dgram {
    opcode: Opcode,
    pkey: u16,
    dest: u32,
    qkey: u32,
    psn: u32,
    imm: Option<u32>,
}

impl UdEnv {
    fn good(&self) -> Dgram {
        Dgram { opcode: Opcode::UD_SEND_ONLY, pkey: 0xffff, dest: self.dest, qkey: self.qkey, psn: 0, imm: None }
    }

    fn build(&self, d: Dgram, payload: Vec<u8>) -> Request {
        let bth = BthRepr {
            opcode: d.opcode,
            se: false,
            migreq: false,
            pkey: d.pkey,
            fecn: false,
            becn: false,
            dest_qp: Qpn::new(d.dest),
            ack_req: false,
            psn: Psn::new(d.psn),
        };
        let deth = d.opcode.info().is_some_and(|i| i.has(rnic_wire::opcode::HeaderKind::Deth));
        let ext = ExtHeaders {
            deth: deth.then(|| DethRepr { qkey: d.qkey, src_qp: Qpn::new(self.src) }),
            imm_data: d.imm,
            ..ExtHeaders::default()
        };
        Request { repr: RoceRepr { bth, ext, payload_len: payload.len() }, payload, pad: None, settle: false }
    }

    fn send(&self, psn: u32, payload: Vec<u8>) -> Request {
        self.build(Dgram { psn, ..self.good() }, payload)
    }
}

fn data(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| seed.wrapping_mul(13).wrapping_add((i % 241).to_le_bytes()[0])).collect()
}

/// One UD scenario: the rule and the datagrams.
#[derive(Debug, Clone, Copy)]
pub struct UdScenario {
    /// Short name.
    pub name: &'static str,
    /// The rule and where the IBA states it.
    pub rule: &'static str,
    /// The datagrams, in order.
    pub build: fn(&UdEnv) -> Vec<Request>,
}

/// Every UD scenario.
pub fn all() -> Vec<UdScenario> {
    vec![
        UdScenario {
            name: "ud-send-delivered",
            rule: "IBA 9.8 / 10.2.5 (unverified clauses): a UD SEND with the QP's Q_Key completes a receive: 40 + its length, its source QP, the GRH flag, its immediate data; the buffer holds the GRH area (the IPv4 header in its last 20 bytes, RoCEv2 A17) and the payload; nothing is sent back",
            build: |e| {
                let imm = Dgram { opcode: Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, psn: 1, imm: Some(0x1234_abcd), ..e.good() };
                vec![e.send(0, data(1, 64)), e.build(imm, data(2, 200))]
            },
        },
        UdScenario {
            name: "ud-any-psn",
            rule: "IBA 9.8 (unverified clause): UD has no PSN sequence: datagrams at any PSN, backwards or across the wrap, are each delivered",
            build: |e| vec![e.send(0x10_0000, data(3, 16)), e.send(0x00_0005, data(4, 24)), e.send(0xff_ffff, data(5, 32))],
        },
        UdScenario {
            name: "ud-wrong-qkey",
            rule: "IBA 10.2.5 / C10-15 (Q_Key, unverified clause): a datagram whose DETH Q_Key is not the QP's is dropped silently; the next, with the right one, is delivered",
            build: |e| {
                let bad = Dgram { qkey: e.qkey ^ 0x0100_0000, ..e.good() };
                vec![e.build(bad, data(6, 64)), e.send(1, data(7, 32))]
            },
        },
        UdScenario {
            name: "ud-wrong-pkey",
            rule: "IBA 9.6.2 / 10.9.3 (P_Key, unverified clauses): a datagram of another partition (P_Key 0x8123) is dropped silently; a limited member of the QP's partition (0x7FFF) matches its full membership and is delivered, as is 0xFFFF",
            build: |e| {
                vec![
                    e.build(Dgram { pkey: 0x8123, ..e.good() }, data(8, 48)),
                    e.build(Dgram { pkey: 0x7fff, psn: 1, ..e.good() }, data(9, 40)),
                    e.send(2, data(10, 56)),
                ]
            },
        },
        UdScenario {
            name: "ud-unknown-qpn",
            rule: "IBA 9.6.1 (unverified clause): a datagram to a QPN no QP has is dropped silently, nothing sent back; the QP next to it still takes its own",
            build: |e| {
                let mut other = (e.dest + 0x1000) & 0xff_ffff;
                if other <= 1 || other == 0xff_ffff {
                    other = 0x10_0000;
                }
                vec![e.build(Dgram { dest: other, ..e.good() }, data(11, 64)), e.send(1, data(12, 20))]
            },
        },
        UdScenario {
            name: "ud-too-long",
            rule: "IBA 10.8.3.1 / 9.9.3 class D (unverified clauses): a datagram longer than the receive buffer less its GRH area is not delivered: the receive completes with a local length error (or the datagram is dropped), the QP stays up and the next is delivered",
            build: |e| vec![e.send(0, data(13, 512)), e.send(1, data(14, 100))],
        },
        UdScenario {
            name: "ud-no-receive",
            rule: "IBA 9.9.3 class D (unverified clause): UD has no RNR: a datagram finding no receive posted is dropped silently; the 16 before it each complete one",
            build: |e| (0..17u8).map(|k| e.send(u32::from(k), data(17 + k, 8 + usize::from(k)))).collect(),
        },
        UdScenario {
            name: "ud-rc-opcode",
            rule: "IBA 9.6.1 (unverified clause): a packet whose opcode is another transport's (an RC SEND ONLY) is dropped silently by a UD QP, no NAK; the next datagram is delivered",
            build: |e| {
                vec![e.build(Dgram { opcode: Opcode::RC_SEND_ONLY, ..e.good() }, data(15, 32)), e.send(1, data(16, 32))]
            },
        },
    ]
}

/// What a completion is, in a line.
pub(crate) fn describe(c: &Completion) -> String {
    let mut s = format!(
        "receive completion: status {}, {} bytes, src QP {:#x}, flags {:#x} (wr_id {})",
        c.status, c.byte_len, c.src_qp, c.flags, c.wr_id
    );
    if c.flags & WC_WITH_IMM != 0 {
        s += &format!(", imm {:#x}", c.imm);
    }
    s
}

pub(crate) fn describe_model(w: &UdRecv) -> String {
    let mut s = match w.status {
        UdStatus::Success => format!(
            "receive completion: success, {} bytes (40 + {}), src QP {:#x}, GRH",
            40 + w.data.len(),
            w.data.len(),
            w.src_qp
        ),
        UdStatus::LengthError => "receive completion: local length error (or the datagram dropped)".into(),
    };
    if let Some(i) = w.imm {
        s += &format!(", imm {i:#x}");
    }
    s
}

/// Where `g` differs from `w` (header fields only), or `None`.
fn differs(g: &Completion, w: &UdRecv) -> Option<String> {
    match w.status {
        UdStatus::LengthError => {
            (g.status != WC_LOC_LEN_ERR).then(|| format!("status {}, not a local length error", g.status))
        }
        UdStatus::Success => {
            let want_len = u64::try_from(w.data.len()).unwrap_or(u64::MAX) + GRH_AREA;
            let want_flags = WC_GRH | if w.imm.is_some() { WC_WITH_IMM } else { 0 };
            if g.status != 0 {
                Some(format!("status {}", g.status))
            } else if g.opcode != WC_RECV {
                Some(format!("opcode {}, not IBV_WC_RECV", g.opcode))
            } else if u64::from(g.byte_len) != want_len {
                Some(format!("{} bytes, not {want_len}", g.byte_len))
            } else if g.src_qp != w.src_qp {
                Some(format!("source QP {:#x}, not {:#x}", g.src_qp, w.src_qp))
            } else if g.flags & (WC_GRH | WC_WITH_IMM) != want_flags {
                Some(format!("flags {:#x}, not {want_flags:#x}", g.flags))
            } else if w.imm.is_some_and(|i| i != g.imm) {
                Some(format!("immediate {:#x}", g.imm))
            } else {
                None
            }
        }
    }
}

/// Whether the GRH area `b` (40 bytes) is a network header from `src` to `dst`.
fn grh_ok(b: &[u8], src: IpAddr, dst: IpAddr) -> bool {
    if b.len() < 40 {
        return false;
    }
    match (src, dst) {
        // RoCEv2 A17.4.5.2 (unverified clause): over IPv4 the IPv4 header fills the last 20
        // bytes: version 4 / IHL 5, protocol UDP, the addresses.
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            b[20] == 0x45 && b[29] == 17 && b[32..36] == s.octets() && b[36..40] == d.octets()
        }
        (s, d) => b[0] >> 4 == 6 && b[6] == 17 && b[8..24] == gid(s) && b[24..40] == gid(d),
    }
}

/// Where the receive completions `got` (and the buffers they name, read over `peer`)
/// differ from the model's `want`, in order: the same count (a length error the model
/// allows to be a silent drop may be missing), each one's status, length, source QP,
/// flags and immediate data, and each delivered datagram's buffer: its payload after a
/// GRH area naming the tester and the responder.
pub(crate) fn judge_receives(peer: &mut Session, link: &Link, want: &[UdRecv], got: &[Completion]) -> Vec<String> {
    let mut why: Vec<String> = Vec::new();
    // Each model completion in order; an optional one may be missing.
    let mut at = 0;
    let mut delivered: Vec<(&Completion, &UdRecv)> = Vec::new();
    for w in want {
        match got.get(at) {
            Some(g) if differs(g, w).is_none() => {
                if w.status == UdStatus::Success {
                    delivered.push((g, w));
                }
                at += 1;
            }
            _ if w.optional => {}
            Some(g) => {
                why.push(format!("{}: {}", describe(g), differs(g, w).unwrap_or_default()));
                at = got.len();
                break;
            }
            None => {
                why.push(format!("missing: {}", describe_model(w)));
                break;
            }
        }
    }
    if why.is_empty() && at < got.len() {
        why.push(format!("{} receive completion(s) more than the model's", got.len() - at));
    }
    for (g, w) in delivered {
        let len = u32::try_from(w.data.len()).unwrap_or(0) + 40;
        match peer.receive_buffer(g.wr_id, len) {
            Ok(b) => {
                if b.get(40..) != Some(&w.data[..]) {
                    why.push(format!("receive buffer {} does not hold the datagram's payload after 40 bytes", g.wr_id));
                }
                if !grh_ok(&b, link.local(), link.peer()) {
                    why.push(format!(
                        "receive buffer {}: the GRH area is not the network header from the tester",
                        g.wr_id
                    ));
                }
            }
            Err(e) => why.push(e),
        }
    }
    why
}

/// Runs one UD scenario on a UD session of its own.
pub fn run(link: &mut Link, s: &UdScenario, o: &Options) -> Outcome {
    let mut out = Outcome::new(s.name, s.rule);
    let qpn = crate::session::tester_qpn(0x00d0_0000, 0x1_0000);
    let mut peer = match Session::open(link, o.port, Kind::Ud, qpn, o.mtu_code, None, o.cm_wait) {
        Ok(p) => p,
        Err(e) => {
            out.verdict = Verdict::NotRun(e);
            return out;
        }
    };
    let mut model = UdReceiver::new(peer.qpn, peer.qkey, peer.recvs, u64::from(peer.recv_len));
    let env = UdEnv { dest: peer.qpn, qkey: peer.qkey, src: qpn };
    let mark = link.mark();
    let back = match crate::scenario::play_unanswered(link, (s.build)(&env), |r| model.handle(r), qpn, o.quiet) {
        Ok(back) => back,
        Err(e) => {
            out.verdict = Verdict::NotRun(e);
            return out;
        }
    };
    out.capture = link.records_since(mark).to_vec();
    out.expected = model.completions.iter().map(describe_model).collect();
    out.expected.extend(model.dropped.iter().map(|d| format!("dropped: {d}")));
    let got = match peer.completions() {
        Ok(c) => c,
        Err(e) => {
            out.verdict = Verdict::NoAnswer(format!("the responder's completions: {e}"));
            return out;
        }
    };
    out.observed = got.iter().map(describe).collect();
    out.observed.extend(back.iter().map(|b| format!("on the wire: {b}")));
    let mut why: Vec<String> = Vec::new();
    if !back.is_empty() {
        why.push(format!("a UD receiver sent {} packet(s) back", back.len()));
    }
    why.extend(judge_receives(&mut peer, link, &model.completions, &got));
    if !why.is_empty() {
        out.verdict = Verdict::Diverges(why.join("; "));
    }
    out
}
