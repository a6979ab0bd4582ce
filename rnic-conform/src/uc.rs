//! UC scenarios (IBA 9.8.3, the UC responder; clause numbers unverified): a UC responder
//! answers nothing on the wire, so what it did is read from the lab responder over a
//! [`Session`] (its receive completions and the bytes of its region and receive buffers),
//! which also sets the UC QP up: rdma_cm has no UC port space on RoCE.
//!
//! Each scenario's packets go through the UC model ([`UcResponder`]); then the tester
//! checks that nothing came back on the wire, that the completions are the model's (count,
//! status, length, data) and that the memory the scenario names is the model's.

use crate::link::Link;
use crate::model::{Region, Request, UcResponder};
use crate::scenario::{rw_pattern, Options, Outcome, Verdict};
use crate::session::{Kind, Session};
use rnic_wire::reth::RethRepr;
use rnic_wire::roce::ExtHeaders;
use rnic_wire::{Opcode, Psn};

/// What a UC scenario's requests are built from.
#[derive(Debug, Clone, Copy)]
pub struct UcEnv {
    /// The peer's QPN.
    pub dest: u32,
    /// The PSN it expects.
    pub psn: u32,
    /// Path MTU in bytes.
    pub pmtu: usize,
    /// Its region.
    pub rw: (u64, u32, u32),
}

impl UcEnv {
    fn req(&self, op: Opcode, k: u32, reth: Option<(u64, u32, u32)>, payload: Vec<u8>) -> Request {
        let ext = ExtHeaders {
            reth: reth.map(|(va, rkey, dma_len)| RethRepr { va, rkey, dma_len }),
            ..ExtHeaders::default()
        };
        Request::new(op, self.dest, Psn::new(self.psn).add(k), false, ext, payload)
    }
}

fn data(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| seed.wrapping_add((i % 253).to_le_bytes()[0]).wrapping_mul(3)).collect()
}

/// One UC scenario: the rule, the requests, and the region ranges whose bytes are
/// checked against the model (offset, length).
#[derive(Debug, Clone, Copy)]
pub struct UcScenario {
    /// Short name.
    pub name: &'static str,
    /// The rule and where the IBA states it.
    pub rule: &'static str,
    /// The requests, in order.
    pub build: fn(&UcEnv) -> Vec<Request>,
    /// Region ranges to compare (offset, length).
    pub check: &'static [(u32, u32)],
    /// The PSN the responder is asked to expect first (`None`: it picks one).
    pub start_psn: Option<u32>,
}

/// Every UC scenario.
pub fn all() -> Vec<UcScenario> {
    use Opcode as O;
    vec![
        UcScenario {
            name: "uc-send-in-order",
            rule: "IBA 9.8.3 (unverified clause): UC SENDs in sequence each complete a receive with their bytes; nothing is sent back (no ACK on UC)",
            build: |e| {
                vec![
                    e.req(O::UC_SEND_ONLY, 0, None, data(1, 16)),
                    e.req(O::UC_SEND_FIRST, 1, None, data(2, e.pmtu)),
                    e.req(O::UC_SEND_LAST, 2, None, data(3, 100)),
                    e.req(O::UC_SEND_ONLY, 3, None, data(4, 1000)),
                ]
            },
            check: &[],
            start_psn: None,
        },
        UcScenario {
            name: "uc-psn-gap-send",
            rule: "IBA 9.8.3 (unverified clause): a PSN gap drops the message in progress (a SEND whose MIDDLE was lost completes nothing); a FIRST or ONLY at any PSN starts the next, which completes",
            build: |e| {
                vec![
                    e.req(O::UC_SEND_FIRST, 0, None, data(5, e.pmtu)),
                    e.req(O::UC_SEND_LAST, 2, None, data(6, 64)),
                    e.req(O::UC_SEND_ONLY, 7, None, data(7, 48)),
                ]
            },
            check: &[],
            start_psn: None,
        },
        UcScenario {
            name: "uc-psn-gap-write",
            rule: "IBA 9.8.3 (unverified clause): a WRITE whose MIDDLE was lost is dropped from the gap on (its LAST writes nothing); a WRITE ONLY at a later PSN lands",
            build: |e| {
                let (va, rkey, _) = e.rw;
                let p = e.pmtu;
                let len = u32::try_from(3 * p).unwrap_or(0);
                vec![
                    e.req(O::UC_RDMA_WRITE_FIRST, 0, Some((va + 8192, rkey, len)), data(8, p)),
                    e.req(O::UC_RDMA_WRITE_LAST, 2, None, data(9, p)),
                    e.req(O::UC_RDMA_WRITE_ONLY, 9, Some((va + 16384, rkey, 200)), data(10, 200)),
                ]
            },
            // The LAST's range (not written) and the ONLY's; the FIRST's range may hold its
            // bytes or not (placed before the gap was seen).
            check: &[(8192 + 2048, 1024), (16384, 200)],
            start_psn: None,
        },
        UcScenario {
            name: "uc-after-write-gap",
            rule: "IBA 9.8.3 (unverified clause): after a WRITE dropped at a PSN gap every later message starts afresh: two WRITE ONLYs land and a SEND ONLY completes",
            build: |e| {
                let (va, rkey, _) = e.rw;
                let p = e.pmtu;
                let len = u32::try_from(3 * p).unwrap_or(0);
                vec![
                    e.req(O::UC_RDMA_WRITE_FIRST, 0, Some((va + 24576, rkey, len)), data(14, p)),
                    e.req(O::UC_RDMA_WRITE_LAST, 2, None, data(15, p)),
                    e.req(O::UC_RDMA_WRITE_ONLY, 3, Some((va + 32768, rkey, 64)), data(16, 64)),
                    e.req(O::UC_RDMA_WRITE_ONLY, 4, Some((va + 32768 + 64, rkey, 64)), data(17, 64)),
                    e.req(O::UC_SEND_ONLY, 5, None, data(18, 24)),
                ]
            },
            check: &[(32768, 128)],
            start_psn: None,
        },
        UcScenario {
            name: "uc-psn-wrap",
            rule: "IBA 9.8.3 / 9.7.1 (PSNs modulo 2^24, unverified clauses): a UC SEND FIRST, MIDDLE, LAST at 0xFFFFFE, 0xFFFFFF, 0 is in sequence and completes; a WRITE ONLY at 1 lands",
            build: |e| {
                let (va, rkey, _) = e.rw;
                let p = e.pmtu;
                vec![
                    e.req(O::UC_SEND_FIRST, 0, None, data(19, p)),
                    e.req(O::UC_SEND_MIDDLE, 1, None, data(20, p)),
                    e.req(O::UC_SEND_LAST, 2, None, data(21, 77)),
                    e.req(O::UC_RDMA_WRITE_ONLY, 3, Some((va + 40960, rkey, 96)), data(22, 96)),
                ]
            },
            check: &[(40960, 96)],
            start_psn: Some(0xff_fffe),
        },
        UcScenario {
            name: "uc-write-bad-rkey",
            rule: "IBA 9.8.3 / 10.6.3.1 (unverified clauses): a UC WRITE with an R_Key naming no region is dropped silently, the QP staying up: the next WRITE and SEND complete",
            build: |e| {
                let (va, rkey, _) = e.rw;
                vec![
                    e.req(O::UC_RDMA_WRITE_ONLY, 0, Some((va + 4096, rkey ^ 0x0080_0000, 64)), data(11, 64)),
                    e.req(O::UC_RDMA_WRITE_ONLY, 1, Some((va + 4096 + 64, rkey, 64)), data(12, 64)),
                    e.req(O::UC_SEND_ONLY, 2, None, data(13, 32)),
                ]
            },
            check: &[(4096, 128)],
            start_psn: None,
        },
    ]
}

/// Runs one UC scenario on a UC session of its own.
pub fn run(link: &mut Link, s: &UcScenario, o: &Options) -> Outcome {
    let mut out = Outcome::new(s.name, s.rule);
    let qpn = crate::session::tester_qpn(0x00f0_0000, 0x1_0000);
    let mut peer = match Session::open(link, o.port, Kind::Uc, qpn, o.mtu_code, s.start_psn, o.cm_wait) {
        Ok(p) => p,
        Err(e) => {
            out.verdict = Verdict::NotRun(e);
            return out;
        }
    };
    let pmtu = 128usize << o.mtu_code;
    let rw_len = usize::try_from(peer.rw.2).unwrap_or(0);
    let region =
        Region { va: peer.rw.0, rkey: peer.rw.1, write: true, read: false, atomic: false, data: rw_pattern(rw_len) };
    let mut model = UcResponder::new(Psn::new(peer.epsn), peer.recvs, u64::from(peer.recv_len), pmtu, vec![region]);
    let env = UcEnv { dest: peer.qpn, psn: peer.epsn, pmtu, rw: peer.rw };
    let mark = link.mark();
    let back = match crate::scenario::play_unanswered(link, (s.build)(&env), |r| model.handle(r), qpn, o.quiet) {
        Ok(back) => back,
        Err(e) => {
            out.verdict = Verdict::NotRun(e);
            return out;
        }
    };
    out.capture = link.records_since(mark).to_vec();
    let want: Vec<String> =
        model.completions.iter().map(|c| format!("receive completion: success, {} bytes", c.data.len())).collect();
    out.expected = want.clone();
    let got = match peer.completions() {
        Ok(c) => c,
        Err(e) => {
            out.verdict = Verdict::NoAnswer(format!("the responder's completions: {e}"));
            return out;
        }
    };
    out.observed = got
        .iter()
        .map(|c| format!("receive completion: status {}, {} bytes (wr_id {})", c.status, c.byte_len, c.wr_id))
        .collect();
    out.observed.extend(back.iter().map(|b| format!("on the wire: {b}")));
    let mut why: Vec<String> = Vec::new();
    if !back.is_empty() {
        why.push(format!("a UC responder sent {} packet(s) back", back.len()));
    }
    let ok_list = got.len() == model.completions.len()
        && got
            .iter()
            .zip(&model.completions)
            .all(|(g, w)| g.status == 0 && usize::try_from(g.byte_len).ok() == Some(w.data.len()));
    if !ok_list {
        why.push("the receive completions are not the model's".into());
    } else {
        for (g, w) in got.iter().zip(&model.completions) {
            let len = u32::try_from(w.data.len()).unwrap_or(0);
            match peer.receive_buffer(g.wr_id, len) {
                Ok(b) if b == w.data => {}
                Ok(_) => why.push(format!("receive buffer {} does not hold the message's bytes", g.wr_id)),
                Err(e) => why.push(e),
            }
        }
    }
    for &(off, len) in s.check {
        let want = model.region(0).and_then(|r| r.data.get(off as usize..(off + len) as usize)).map(<[u8]>::to_vec);
        out.expected.push(format!("region bytes {off}..{} as the model has them", off + len));
        match peer.memory(off, len) {
            Ok(b) if Some(&b) == want.as_ref() => {
                out.observed.push(format!("region bytes {off}..{}: as the model", off + len))
            }
            Ok(_) => {
                out.observed.push(format!("region bytes {off}..{}: not as the model", off + len));
                why.push(format!("region bytes {off}..{} differ from the model's", off + len));
            }
            Err(e) => why.push(e),
        }
    }
    if !why.is_empty() {
        out.verdict = Verdict::Diverges(why.join("; "));
    }
    out
}
