//! RC scenarios across the PSN wrap (IBA 9.7.1 / 9.7.5.1: PSNs are 24-bit, compared modulo
//! 2^24; clause numbers unverified). Through the CM the passive side picks the first PSN
//! the tester sends (its REP's starting PSN), so these connect their RC QP through a
//! [`Session`] instead, asking the responder to expect a PSN just short of 0xFFFFFF; then
//! they are played and judged as the RC scenarios are ([`crate::scenario`], the same
//! model).

use crate::link::Link;
use crate::model::{Region, Responder};
use crate::scenario::{self, rw_pattern, Advert, Env, Options, Outcome, Scenario, Verdict};
use crate::session::{Kind, Session};
use rnic_wire::{Opcode, Psn};

fn data(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| seed.wrapping_add((i % 239).to_le_bytes()[0]).wrapping_mul(5)).collect()
}

/// Every PSN-wrap scenario; `start_psn` is the PSN the tester starts at.
pub fn all() -> Vec<Scenario> {
    use Opcode as O;
    vec![
        Scenario {
            name: "psn-wrap-write",
            rule: "IBA 9.7.1 / 9.7.5.1.1 (PSNs modulo 2^24, unverified clauses): a three-packet WRITE from 0xFFFFFE over 0xFFFFFF to 0 is in sequence: it lands, the ACKs carry the wrapped PSNs, a READ after it returns its bytes",
            start_psn: 0xff_fffd,
            build: |e| {
                let (va, rkey, _) = e.ad.rw;
                let p = e.pmtu;
                let d = data(0x21, 3 * p);
                let len = u32::try_from(3 * p).unwrap_or(0);
                vec![
                    e.send(O::RC_SEND_ONLY, 0, true, 16),
                    e.write(O::RC_RDMA_WRITE_FIRST, 1, Some((va + 256, rkey, len)), d[..p].to_vec()),
                    e.write(O::RC_RDMA_WRITE_MIDDLE, 2, None, d[p..2 * p].to_vec()),
                    e.write(O::RC_RDMA_WRITE_LAST, 3, None, d[2 * p..].to_vec()),
                    e.send(O::RC_SEND_ONLY, 4, true, 16),
                    e.read(5, va + 256, rkey, len),
                ]
            },
        },
        Scenario {
            name: "psn-wrap-read",
            rule: "IBA 9.7.5.1.1 / 9.4.4 (unverified clauses): a READ at 0xFFFFFE of four PMTUs is answered at 0xFFFFFE, 0xFFFFFF, 0, 1; the next request is at 2",
            start_psn: 0xff_fffe,
            build: |e| {
                let (va, rkey, _) = e.ad.rw;
                let len = u32::try_from(4 * e.pmtu).unwrap_or(0);
                // The SEND waits for the READ's answers, as the RC scenarios' requests after a
                // READ do: rnic's READ responses carry the MSN of when they leave (README, the
                // fuzzer's --fuzz-eager), a SEND right behind them already counted.
                let mut send = e.send(O::RC_SEND_ONLY, 4, true, 8);
                send.settle = true;
                vec![e.read(0, va + 512, rkey, len), send]
            },
        },
        Scenario {
            name: "psn-wrap-sequence",
            rule: "IBA 9.7.5.1.2 / 9.7.5.1.5 across the wrap: with 0 expected, 1 is ahead (one PSN sequence error NAK carrying 0); after 0 and 1, 0xFFFFFF is behind, a duplicate, acknowledged again",
            start_psn: 0xff_ffff,
            build: |e| {
                let later = |mut r: crate::model::Request| {
                    r.settle = true;
                    r
                };
                vec![
                    e.send(O::RC_SEND_ONLY, 0, true, 8),
                    e.send(O::RC_SEND_ONLY, 2, true, 8),
                    later(e.send(O::RC_SEND_ONLY, 1, true, 8)),
                    e.send(O::RC_SEND_ONLY, 2, true, 8),
                    later(e.send(O::RC_SEND_ONLY, 0, true, 8)),
                ]
            },
        },
    ]
}

/// Runs one PSN-wrap scenario on an RC session of its own.
pub fn run(link: &mut Link, s: &Scenario, o: &Options) -> Outcome {
    let mut out = Outcome::new(s.name, s.rule);
    let qpn = crate::session::tester_qpn(0x00b0_0000, 0x1_0000);
    let peer = match Session::open(link, o.port, Kind::Rc, qpn, o.mtu_code, Some(s.start_psn), o.cm_wait) {
        Ok(p) => p,
        Err(e) => {
            out.verdict = Verdict::NotRun(e);
            return out;
        }
    };
    let pmtu = 128usize << o.mtu_code;
    let rw_len = usize::try_from(peer.rw.2).unwrap_or(0);
    let region =
        Region { va: peer.rw.0, rkey: peer.rw.1, write: true, read: true, atomic: true, data: rw_pattern(rw_len) };
    let mut model = Responder::new(Psn::new(peer.epsn), peer.recvs, u64::from(peer.recv_len), pmtu, vec![region]);
    let ad = Advert { rw: peer.rw, ro: (0, 0, 0), recvs: peer.recvs, recv_len: peer.recv_len };
    let env = Env { dest: peer.qpn, psn: peer.epsn, pmtu, ad };
    let reqs = (s.build)(&env);
    scenario::exchange(link, qpn, env.dest, &mut model, &reqs, o, &mut out);
    // Closing the session destroys the responder's QP.
    drop(peer);
    out
}
