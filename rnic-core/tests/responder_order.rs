//! The RC responder's answers to a burst: requests that reach it in one round (one
//! delivery on the virtual-time fabric, as a batch of datagrams does on a device) are
//! answered as if each had been answered alone, in PSN order (IBA 9.7.5.1), where
//! coalescing ACKs is all the IBA allows the responder to batch (9.7.5.1.1). Each test
//! injects a hand-made burst from node A's address and reads node B's answers off the
//! fabric's trace. (Found by `rnic conform --fuzz-eager`, issue 35.)

mod common;

use common::net::{FabricNet, Net, Setup};
use rnic_wire::aeth::{AethRepr, NakCode, Syndrome};
use rnic_wire::atomic::AtomicEthRepr;
use rnic_wire::bth::BthRepr;
use rnic_wire::reth::RethRepr;
use rnic_wire::roce::{ExtHeaders, RocePacket, RoceRepr};
use rnic_wire::{Opcode, Psn, Qpn};

const A: usize = 0;
const B: usize = 1;
const MS: u64 = 1_000_000;

/// What the responder sent, as the tests compare it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ans {
    Ack { psn: u32, msn: u32 },
    SeqNak { psn: u32 },
    Read { psn: u32, msn: Option<u32>, len: usize },
    Atomic { psn: u32, orig: u64 },
    Other(String),
}

struct Burst {
    net: FabricNet,
    /// The first PSN B expects.
    psn0: u32,
}

impl Burst {
    fn new() -> Burst {
        let mut net = FabricNet::new(Setup::default(), 1);
        net.fab.trace = Some(Vec::new());
        Burst { net, psn0: Setup::default().psn[A] }
    }

    fn psn(&self, k: u32) -> Psn {
        Psn::new(self.psn0).add(k)
    }

    fn req(&self, opcode: Opcode, k: u32, ack_req: bool, ext: ExtHeaders, payload: &[u8]) -> Vec<u8> {
        let repr = RoceRepr {
            bth: BthRepr {
                opcode,
                se: false,
                migreq: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: Qpn::new(self.net.qpn(B)),
                ack_req,
                psn: self.psn(k),
            },
            ext,
            payload_len: payload.len(),
        };
        let mut pkt = vec![0; repr.buffer_len()];
        repr.emit(&mut pkt, payload).unwrap();
        pkt
    }

    /// An RDMA WRITE ONLY of 8 bytes at B's offset `off`, PSN `psn0 + k`, AckReq set.
    fn write(&self, k: u32, off: u64) -> Vec<u8> {
        let reth = RethRepr { va: self.net.iova(B) + off, rkey: self.net.keys(B).rkey, dma_len: 8 };
        self.req(Opcode::RC_RDMA_WRITE_ONLY, k, true, ExtHeaders { reth: Some(reth), ..Default::default() }, &[7; 8])
    }

    /// An RDMA READ of `len` bytes of B's memory, PSN `psn0 + k`.
    fn read(&self, k: u32, len: u32) -> Vec<u8> {
        let reth = RethRepr { va: self.net.iova(B), rkey: self.net.keys(B).rkey, dma_len: len };
        self.req(Opcode::RC_RDMA_READ_REQUEST, k, true, ExtHeaders { reth: Some(reth), ..Default::default() }, &[])
    }

    /// A FETCH & ADD of 1 to B's word at offset 64, PSN `psn0 + k`.
    fn fetch_add(&self, k: u32) -> Vec<u8> {
        let a = AtomicEthRepr { va: self.net.iova(B) + 64, rkey: self.net.keys(B).rkey, swap_add: 1, compare: 0 };
        self.req(Opcode::RC_FETCH_ADD, k, true, ExtHeaders { atomic_eth: Some(a), ..Default::default() }, &[])
    }

    /// Puts every packet on the wire at once (they reach B in one round), runs the fabric
    /// and returns what B answered.
    fn answers(&mut self, pkts: Vec<Vec<u8>>) -> Vec<Ans> {
        for p in pkts {
            self.net.inject(A, p);
        }
        self.net.idle(MS / 10);
        let ip = self.net.ip(B);
        let trace = self.net.fab.trace.replace(Vec::new()).unwrap_or_default();
        trace
            .iter()
            .filter(|t| t.pkt.src == ip)
            .map(|t| {
                let p = RocePacket::new_checked(&t.pkt.data[..]).unwrap();
                let r = RoceRepr::parse(&p).unwrap();
                let psn = r.bth.psn.value().wrapping_sub(self.psn0) & 0xff_ffff;
                match (r.bth.opcode, r.ext.aeth) {
                    (Opcode::RC_ACKNOWLEDGE, Some(AethRepr { syndrome: Syndrome::Ack { .. }, msn })) => {
                        Ans::Ack { psn, msn }
                    }
                    (
                        Opcode::RC_ACKNOWLEDGE,
                        Some(AethRepr { syndrome: Syndrome::Nak(NakCode::PsnSequenceError), .. }),
                    ) => Ans::SeqNak { psn },
                    (Opcode::RC_ATOMIC_ACKNOWLEDGE, _) => {
                        Ans::Atomic { psn, orig: r.ext.atomic_ack_eth.map_or(u64::MAX, |a| a.orig_remote_data) }
                    }
                    (
                        Opcode::RC_RDMA_READ_RESPONSE_ONLY
                        | Opcode::RC_RDMA_READ_RESPONSE_FIRST
                        | Opcode::RC_RDMA_READ_RESPONSE_MIDDLE
                        | Opcode::RC_RDMA_READ_RESPONSE_LAST,
                        aeth,
                    ) => Ans::Read { psn, msn: aeth.map(|a| a.msn), len: r.payload_len },
                    (op, aeth) => Ans::Other(format!("{} {aeth:?}", op.name())),
                }
            })
            .collect()
    }
}

#[test]
fn a_sequence_nak_is_not_replaced_by_the_ack_of_the_request_that_fills_its_gap() {
    // WRITE 1 arrives before WRITE 0: PSN sequence error NAK for 0 (IBA 9.7.5.1.2). WRITE 0
    // and then WRITE 1 again arrive in the same round; their ACKs coalesce into one
    // (9.7.5.1.1), but the NAK was owed before them: it leaves, then the ACK.
    let mut b = Burst::new();
    let burst = vec![b.write(1, 8), b.write(0, 0), b.write(1, 8)];
    assert_eq!(b.answers(burst), [Ans::SeqNak { psn: 0 }, Ans::Ack { psn: 1, msn: 2 }]);
}

#[test]
fn two_sequence_naks_of_one_round_coalesce_into_the_later_gap() {
    // 1 arrives before 0, then 0, then 3 (2 missing): the first gap is filled before its
    // NAK left, so the NAK for 2 stands for both (it acknowledges 0 and 1), and the
    // requester goes back once, straight to 2 (reliability.rs `out_of_order_arrival`).
    let mut b = Burst::new();
    let burst = vec![b.write(1, 8), b.write(0, 0), b.write(3, 24)];
    assert_eq!(b.answers(burst), [Ans::SeqNak { psn: 1 }]);
}

#[test]
fn a_read_response_carries_the_msn_of_its_read() {
    // READ 0 (MSN 1) and WRITE 1 (MSN 2) in one round: the READ response's AETH says 1,
    // the MSN as of the READ (IBA C9-148: a READ counts as a message when accepted), not
    // the MSN when the response leaves.
    let mut b = Burst::new();
    let burst = vec![b.read(0, 16), b.write(1, 0)];
    assert_eq!(b.answers(burst), [Ans::Read { psn: 0, msn: Some(1), len: 16 }, Ans::Ack { psn: 1, msn: 2 }]);
}

#[test]
fn a_held_sequence_nak_leaves_before_a_later_reads_responses() {
    // WRITE 1 early (NAK for 0), WRITE 0, READ 1: the NAK and the ACK for 0 answer requests
    // before the READ, so they leave before its response (IBA 9.7.5.1: responses in PSN
    // order), and an atomic's acknowledgement waits behind them the same way.
    let mut b = Burst::new();
    let burst = vec![b.write(1, 8), b.write(0, 0), b.read(1, 16), b.fetch_add(2)];
    assert_eq!(
        b.answers(burst),
        [
            Ans::SeqNak { psn: 0 },
            Ans::Ack { psn: 0, msn: 1 },
            Ans::Read { psn: 1, msn: Some(2), len: 16 },
            Ans::Atomic { psn: 2, orig: 0 },
        ]
    );
}

#[test]
fn a_duplicate_read_or_atomic_before_the_original_answer_left_is_answered_again() {
    // READ 0 and its duplicate in one round: two responses (IBA 9.7.5.1.5: every duplicate
    // READ is answered again). FETCH & ADD 1 and its duplicate: two acknowledgements with
    // the same original value, and the add done once.
    let mut b = Burst::new();
    let burst = vec![b.read(0, 16), b.read(0, 16), b.fetch_add(1), b.fetch_add(1)];
    let got = b.answers(burst);
    assert_eq!(
        got,
        [
            Ans::Read { psn: 0, msn: Some(1), len: 16 },
            Ans::Read { psn: 0, msn: Some(1), len: 16 },
            Ans::Atomic { psn: 1, orig: 0 },
            Ans::Atomic { psn: 1, orig: 0 },
        ]
    );
    assert_eq!(b.net.read(B, 64, 8), 1u64.to_le_bytes(), "the add is done once");
}
