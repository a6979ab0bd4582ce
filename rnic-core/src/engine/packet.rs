//! Packet building, for the requester and the responders alike: where a packet stands in
//! its message (segmentation by MTU), its opcode (one look-up in rnic-wire's table,
//! [`Opcode::compose`]), the BTH of a request or a response, the AETH of an ACK, and the
//! extension headers each kind of packet carries.
//!
//! Nothing here touches a QP or a queue: the functions turn numbers into `RoceRepr`s,
//! which the outbox emits.

use super::qp::{InFlight, ReadResource, ResourceKind, SendWqe};
use crate::wr::SendOp;
use rnic_wire::aeth::{AethRepr, Syndrome, CREDITS_INVALID};
use rnic_wire::atomic::{AtomicAckEthRepr, AtomicEthRepr};
use rnic_wire::bth::BthRepr;
use rnic_wire::deth::DethRepr;
use rnic_wire::opcode::{Operation, Position, Suffix, Transport};
use rnic_wire::reth::RethRepr;
use rnic_wire::roce::{ExtHeaders, RoceRepr};
use rnic_wire::small::FethRepr;
use rnic_wire::{Opcode, Psn, Qpn};

/// Packets a message of `len` bytes takes at `mtu` (a zero-length message is one packet).
#[inline]
pub(crate) fn packets_for(len: usize, mtu: usize) -> u32 {
    // Path MTUs are powers of two (IBA 256..4096): a shift and a mask per work request
    // rather than a 64-bit division (~1.6% of `send_bw -s 64`'s sending thread).
    let n = if mtu.is_power_of_two() {
        (len >> mtu.trailing_zeros()) + usize::from(len & (mtu - 1) != 0)
    } else {
        len.div_ceil(mtu)
    };
    u32::try_from(n.max(1)).unwrap_or(u32::MAX)
}

/// Where packet `k` of an `n`-packet message stands.
pub(crate) fn position(k: u32, n: u32) -> Position {
    match (k == 0, k + 1 == n) {
        (true, true) => Position::Only,
        (true, false) => Position::First,
        (false, true) => Position::Last,
        (false, false) => Position::Middle,
    }
}

/// Packet `k` of a message of `len` bytes at `mtu`: its byte offset in the message and
/// its payload length.
pub(crate) fn segment(k: u32, len: usize, mtu: usize) -> (usize, usize) {
    let offset = (k as usize) * mtu;
    (offset, mtu.min(len - offset.min(len)))
}

/// The wire operation of a work request and what its last packet carries.
fn operation_of(op: &SendOp) -> (Operation, Suffix) {
    match op {
        SendOp::Send => (Operation::Send, Suffix::None),
        SendOp::SendWithImm { .. } => (Operation::Send, Suffix::Immediate),
        SendOp::SendWithInv { .. } => (Operation::Send, Suffix::Invalidate),
        SendOp::RdmaWrite { .. } => (Operation::RdmaWrite, Suffix::None),
        SendOp::RdmaWriteWithImm { .. } => (Operation::RdmaWrite, Suffix::Immediate),
        SendOp::RdmaRead { .. } => (Operation::RdmaReadRequest, Suffix::None),
        SendOp::AtomicCmpSwap { .. } => (Operation::CompareSwap, Suffix::None),
        SendOp::AtomicFetchAdd { .. } => (Operation::FetchAdd, Suffix::None),
        SendOp::AtomicWrite { .. } => (Operation::AtomicWrite, Suffix::None),
        SendOp::Flush { .. } => (Operation::Flush, Suffix::None),
        // A local operation sends nothing; it never reaches a packet builder.
        SendOp::LocalInv { .. } | SendOp::BindMw { .. } => (Operation::Send, Suffix::None),
    }
}

/// The opcode of packet `pos` of `op` on `transport`; `None` when the transport does not
/// carry the operation (UC READ, UD WRITE, a multi-packet UD message).
pub(crate) fn opcode_for(transport: Transport, op: &SendOp, pos: Position) -> Option<Opcode> {
    let (operation, suffix) = operation_of(op);
    Opcode::compose(transport, operation, pos, suffix)
}

/// The BTH of a request packet (the default partition, no migration, no congestion
/// marks); UC and UD requests have `ack_req` false.
#[inline]
pub(crate) fn request_bth(opcode: Opcode, dest_qpn: u32, psn: Psn, ack_req: bool, se: bool) -> BthRepr {
    BthRepr {
        opcode,
        se,
        migreq: false,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: Qpn::new(dest_qpn),
        ack_req,
        psn,
    }
}

/// The BTH of a response (ACK/NAK, READ response, atomic acknowledgement) to `dest_qp`.
pub(crate) fn response_bth(opcode: Opcode, dest_qp: Qpn, psn: Psn) -> BthRepr {
    BthRepr { opcode, se: false, migreq: false, pkey: 0xffff, fecn: false, becn: false, dest_qp, ack_req: false, psn }
}

/// The AETH of an ACK (credit field "invalid", as rxe sends).
pub(crate) fn ack_aeth(msn: u32) -> AethRepr {
    AethRepr { syndrome: Syndrome::Ack { credits: CREDITS_INVALID }, msn }
}

/// An ACKNOWLEDGE packet (ACK, NAK or RNR NAK) for `psn`, of RC or XRC (IBA Annex A14:
/// an XRC target answers with XRC's responses).
pub(crate) fn ack_repr(transport: Transport, dest_qp: Qpn, psn: Psn, aeth: AethRepr) -> RoceRepr {
    let opcode = Opcode::compose(transport, Operation::Acknowledge, Position::Only, Suffix::None)
        .unwrap_or(Opcode::RC_ACKNOWLEDGE);
    RoceRepr {
        bth: response_bth(opcode, dest_qp, psn),
        ext: ExtHeaders { aeth: Some(aeth), ..ExtHeaders::default() },
        payload_len: 0,
    }
}

/// Packet `k` (`pos`, `plen` payload bytes) of a SEND or RDMA WRITE message on
/// `transport`: a RETH on the first packet of a WRITE, the immediate or the R_Key to
/// invalidate on the last, the DETH on every UD packet, the XRCETH on every XRC packet
/// (IBA Annex A14), SE on the last packet when the opcode allows it. `None` when the
/// transport does not carry the operation.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn data_request(
    transport: Transport,
    wqe: &SendWqe,
    pos: Position,
    plen: usize,
    dest_qpn: u32,
    psn: Psn,
    ack_req: bool,
    deth: Option<DethRepr>,
) -> Option<RoceRepr> {
    let opcode = opcode_for(transport, &wqe.op, pos)?;
    let xrc_srqn = wqe.dest.xrc_srqn().filter(|_| transport == Transport::Xrc);
    let mut ext = ExtHeaders { deth, xrc_srqn, ..ExtHeaders::default() };
    match wqe.op {
        SendOp::RdmaWrite { remote_addr, rkey } | SendOp::RdmaWriteWithImm { remote_addr, rkey, .. }
            if pos.starts() =>
        {
            ext.reth = Some(RethRepr { va: remote_addr, rkey, dma_len: u32::try_from(wqe.len).unwrap_or(u32::MAX) });
        }
        _ => {}
    }
    if pos.ends() {
        match wqe.op {
            SendOp::SendWithImm { imm } | SendOp::RdmaWriteWithImm { imm, .. } => ext.imm_data = Some(imm),
            SendOp::SendWithInv { invalidate_rkey } => ext.ieth = Some(invalidate_rkey),
            _ => {}
        }
    }
    let se = wqe.solicited && pos.ends() && opcode.info().is_some_and(|i| i.se_allowed);
    Some(RoceRepr { bth: request_bth(opcode, dest_qpn, psn, ack_req, se), ext, payload_len: plen })
}

/// The request packet of a READ (asking for the responses from `read_got` on), an
/// atomic, an ATOMIC WRITE or a FLUSH: one packet, AckReq set; on XRC with its XRCETH.
pub(crate) fn rd_atomic_request(transport: Transport, f: &InFlight, mtu: usize, dest_qpn: u32, psn: Psn) -> RoceRepr {
    let xrc_srqn = f.wqe.dest.xrc_srqn().filter(|_| transport == Transport::Xrc);
    let mut ext = ExtHeaders { xrc_srqn, ..ExtHeaders::default() };
    let mut payload_len = 0;
    match f.wqe.op {
        SendOp::AtomicCmpSwap { remote_addr, rkey, compare, swap } => {
            ext.atomic_eth = Some(AtomicEthRepr { va: remote_addr, rkey, swap_add: swap, compare });
        }
        SendOp::AtomicFetchAdd { remote_addr, rkey, add } => {
            ext.atomic_eth = Some(AtomicEthRepr { va: remote_addr, rkey, swap_add: add, compare: 0 });
        }
        SendOp::AtomicWrite { remote_addr, rkey, .. } => {
            ext.reth = Some(RethRepr { va: remote_addr, rkey, dma_len: 8 });
            payload_len = 8;
        }
        SendOp::Flush { remote_addr, rkey, len, placement, whole_region } => {
            ext.feth = Some(FethRepr { placement_type: placement, selectivity: u8::from(whole_region) });
            ext.reth = Some(RethRepr { va: remote_addr, rkey, dma_len: len });
        }
        SendOp::RdmaRead { remote_addr, rkey } => {
            let done = (f.read_got as usize).saturating_mul(mtu).min(f.wqe.len);
            ext.reth = Some(RethRepr {
                va: remote_addr.wrapping_add(done as u64),
                rkey,
                dma_len: u32::try_from(f.wqe.len - done).unwrap_or(u32::MAX),
            });
        }
        _ => {}
    }
    // Every one of these operations has exactly one (ONLY) request opcode on RC; on XRC
    // all but ATOMIC WRITE and FLUSH, which an XRC initiator refuses at post.
    let opcode = opcode_for(transport, &f.wqe.op, Position::Only).unwrap_or(Opcode::RC_RDMA_READ_REQUEST);
    RoceRepr { bth: request_bth(opcode, dest_qpn, psn, true, false), ext, payload_len }
}

/// READ response packet `k` (`pos`, `plen` bytes) for the READ at `first_psn`. IBA
/// 9.7.5.1.2: FIRST, LAST and ONLY carry an AETH, MIDDLE none.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_response(
    transport: Transport,
    dest_qp: Qpn,
    first_psn: Psn,
    k: u32,
    pos: Position,
    plen: usize,
    msn: u32,
) -> RoceRepr {
    let opcode = Opcode::compose(transport, Operation::RdmaReadResponse, pos, Suffix::None)
        .unwrap_or(Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    let aeth = (pos != Position::Middle).then(|| ack_aeth(msn));
    RoceRepr {
        bth: response_bth(opcode, dest_qp, first_psn.add(k)),
        ext: ExtHeaders { aeth, ..ExtHeaders::default() },
        payload_len: plen,
    }
}

/// The answer to an executed (or duplicate) atomic, ATOMIC WRITE or FLUSH: an ATOMIC
/// ACKNOWLEDGE with the saved original value, or a zero-length RDMA READ RESPONSE ONLY
/// (rxe `send_read_response_ack`). Sent through the responder's paced reply queue.
pub(crate) fn rd_atomic_reply(transport: Transport, res: &ReadResource, dest_qp: Qpn, msn: u32) -> RoceRepr {
    let (operation, atomic_ack_eth) = match res.kind {
        ResourceKind::Atomic { orig } => {
            (Operation::AtomicAcknowledge, Some(AtomicAckEthRepr { orig_remote_data: orig }))
        }
        _ => (Operation::RdmaReadResponse, None),
    };
    let opcode =
        Opcode::compose(transport, operation, Position::Only, Suffix::None).unwrap_or(Opcode::RC_ATOMIC_ACKNOWLEDGE);
    RoceRepr {
        bth: response_bth(opcode, dest_qp, res.psn),
        ext: ExtHeaders { aeth: Some(ack_aeth(msn)), atomic_ack_eth, ..ExtHeaders::default() },
        payload_len: 0,
    }
}

/// A MAD from QP1 to `dest_qpn` (IBA 13.5): a UD SEND_ONLY with the GSI's Q_Key and source
/// QP 1, and AckReq set as Linux rxe sets it on its MADs (seen in rping's CM exchange).
pub(crate) fn gsi_send(dest_qpn: u32, psn: Psn) -> RoceRepr {
    RoceRepr {
        bth: request_bth(Opcode(0x64), dest_qpn, psn, true, false),
        ext: ExtHeaders {
            deth: Some(DethRepr { qkey: rnic_wire::mad::GSI_QKEY, src_qp: Qpn::new(rnic_wire::mad::GSI_QPN) }),
            ..ExtHeaders::default()
        },
        payload_len: rnic_wire::mad::MAD_LEN,
    }
}

/// A CNP (RoCEv2 Annex A17.9.2): opcode 0x81 to the QP whose packets arrived marked, BECN
/// set, PSN 0, the default P_Key and 16 reserved bytes (as mlx5 sends it; see
/// `shared/vectors` `cnp_ipv4`).
pub(crate) fn cnp_repr(dest_qp: Qpn) -> RoceRepr {
    RoceRepr {
        bth: BthRepr {
            opcode: Opcode::CNP,
            se: false,
            migreq: false,
            pkey: 0xffff,
            fecn: false,
            becn: true,
            dest_qp,
            ack_req: false,
            psn: Psn::new(0),
        },
        ext: ExtHeaders::default(),
        payload_len: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Byte for byte the BTH and body of the CNP vector in `shared/vectors`
    /// (`8100ffff40fffffe00000000` and 16 zero bytes).
    #[test]
    fn cnp_matches_the_vector() {
        let repr = cnp_repr(Qpn::new(0xff_fffe));
        let mut buf = vec![0xAAu8; repr.buffer_len()];
        repr.emit(&mut buf, &[]).unwrap();
        assert_eq!(buf.len(), 12 + 16 + 4);
        assert_eq!(&buf[..12], &[0x81, 0, 0xff, 0xff, 0x40, 0xff, 0xff, 0xfe, 0, 0, 0, 0]);
        assert!(buf[12..28].iter().all(|&b| b == 0), "reserved body: {:x?}", &buf[12..28]);
    }

    proptest::proptest! {
        /// The shift agrees with the division for every length, at every MTU a path can
        /// have and at MTUs that are not powers of two (which take the division).
        #[test]
        fn packets_for_is_the_division(len in proptest::prop_oneof![0..20_000usize, proptest::arbitrary::any::<usize>()], m in 0..7usize, odd in 1..5000usize) {
            for mtu in [256usize << (m % 5), odd] {
                proptest::prop_assert_eq!(packets_for(len, mtu), u32::try_from(len.div_ceil(mtu).max(1)).unwrap_or(u32::MAX));
            }
        }
    }
}
