//! Base transport header (IBA 9.2, 12 bytes).
//!
//! ```text
//!  0       OpCode
//!  1       SE(1) M(1) PadCnt(2) TVer(4)
//!  2..4    P_Key
//!  4       FECN(1) BECN(1) Resv6a(6)      <- masked to 0xFF in the ICRC
//!  5..8    DestQP (24)
//!  8       AckReq(1) Resv7(7)
//!  9..12   PSN (24)
//! ```

use crate::field::{fixed_view, set_u16, set_u24, u16_at, u24_at};
use crate::{Opcode, Psn, Qpn};

/// Length of the BTH.
pub const HEADER_LEN: usize = 12;

mod field {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: usize = 2;
    pub const FECN_BECN: usize = 4;
    pub const DEST_QP: usize = 5;
    pub const ACK_REQ: usize = 8;
    pub const PSN: usize = 9;
}

/// Byte offset of the FECN/BECN/Resv6a byte, which the ICRC masks (Annex A17.3.3).
pub const ICRC_MASKED_BYTE: usize = field::FECN_BECN;

fixed_view!(
    /// A view of a BTH.
    Packet,
    HEADER_LEN,
    "BTH"
);

impl<T: AsRef<[u8]>> Packet<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// OpCode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[field::OPCODE])
    }
    /// Solicited event.
    pub fn se(&self) -> bool {
        self.b()[field::FLAGS] & 0x80 != 0
    }
    /// MigReq.
    pub fn migreq(&self) -> bool {
        self.b()[field::FLAGS] & 0x40 != 0
    }
    /// PadCnt: pad bytes between payload and ICRC.
    pub fn pad_count(&self) -> u8 {
        (self.b()[field::FLAGS] >> 4) & 0x3
    }
    /// Transport header version; 0 is the only one defined.
    pub fn tver(&self) -> u8 {
        self.b()[field::FLAGS] & 0x0f
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        u16_at(self.b(), field::PKEY)
    }
    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.b()[field::FECN_BECN] & 0x80 != 0
    }
    /// Backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.b()[field::FECN_BECN] & 0x40 != 0
    }
    /// The six reserved bits after BECN.
    pub fn resv6(&self) -> u8 {
        self.b()[field::FECN_BECN] & 0x3f
    }
    /// Destination QP.
    pub fn dest_qp(&self) -> Qpn {
        Qpn::new(u24_at(self.b(), field::DEST_QP))
    }
    /// Acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.b()[field::ACK_REQ] & 0x80 != 0
    }
    /// The seven reserved bits after AckReq.
    pub fn resv7(&self) -> u8 {
        self.b()[field::ACK_REQ] & 0x7f
    }
    /// Packet sequence number.
    pub fn psn(&self) -> Psn {
        Psn::new(u24_at(self.b(), field::PSN))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets OpCode.
    pub fn set_opcode(&mut self, v: Opcode) {
        self.bm()[field::OPCODE] = v.0;
    }
    /// Sets SE, M, PadCnt and TVer together.
    pub fn set_flags(&mut self, se: bool, migreq: bool, pad: u8, tver: u8) {
        self.bm()[field::FLAGS] = (u8::from(se) << 7) | (u8::from(migreq) << 6) | ((pad & 3) << 4) | (tver & 0xf);
    }
    /// Sets the P_Key.
    pub fn set_pkey(&mut self, v: u16) {
        set_u16(self.bm(), field::PKEY, v);
    }
    /// Sets FECN and BECN; the reserved bits become 0.
    pub fn set_ecn(&mut self, fecn: bool, becn: bool) {
        self.bm()[field::FECN_BECN] = (u8::from(fecn) << 7) | (u8::from(becn) << 6);
    }
    /// Sets DestQP.
    pub fn set_dest_qp(&mut self, v: Qpn) {
        set_u24(self.bm(), field::DEST_QP, v.value());
    }
    /// Sets AckReq; the reserved bits become 0.
    pub fn set_ack_req(&mut self, v: bool) {
        self.bm()[field::ACK_REQ] = u8::from(v) << 7;
    }
    /// Sets the PSN.
    pub fn set_psn(&mut self, v: Psn) {
        set_u24(self.bm(), field::PSN, v.value());
    }
}

/// A BTH, validated. PadCnt is not stored: it follows from the payload length
/// (see [`crate::roce::RoceRepr`]); TVer is always 0 and the reserved bits are 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BthRepr {
    /// OpCode.
    pub opcode: Opcode,
    /// Solicited event.
    pub se: bool,
    /// MigReq (path migration state; rxe sends 0 on RoCE, the vectors vary it).
    pub migreq: bool,
    /// Partition key (0xFFFF, the default partition, unless configured).
    pub pkey: u16,
    /// Forward ECN.
    pub fecn: bool,
    /// Backward ECN.
    pub becn: bool,
    /// Destination QP.
    pub dest_qp: Qpn,
    /// Acknowledge request.
    pub ack_req: bool,
    /// Packet sequence number.
    pub psn: Psn,
}

impl BthRepr {
    /// Parses a BTH: TVer must be 0 (IBA C9-5). Reserved bits are ignored, as IBA
    /// requires of receivers. Whether the opcode is known is the packet layer's check.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> crate::Result<BthRepr> {
        p.check_len()?;
        if p.tver() != 0 {
            return Err(crate::Error::BadTver(p.tver()));
        }
        Ok(BthRepr {
            opcode: p.opcode(),
            se: p.se(),
            migreq: p.migreq(),
            pkey: p.pkey(),
            fecn: p.fecn(),
            becn: p.becn(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            psn: p.psn(),
        })
    }

    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header with the given PadCnt.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>, pad: u8) {
        p.set_opcode(self.opcode);
        p.set_flags(self.se, self.migreq, pad, 0);
        p.set_pkey(self.pkey);
        p.set_ecn(self.fecn, self.becn);
        p.set_dest_qp(self.dest_qp);
        p.set_ack_req(self.ack_req);
        p.set_psn(self.psn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // rc_send_first_len256_ipv4 from shared/vectors.
    const GOLDEN: [u8; 12] = [0x00, 0x00, 0x49, 0xff, 0x00, 0xd9, 0x0f, 0x71, 0x00, 0x01, 0x9f, 0x3b];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(p.opcode(), Opcode::RC_SEND_FIRST);
        assert_eq!(p.pkey(), 0x49ff);
        assert_eq!(p.dest_qp(), Qpn::new(14225265));
        assert_eq!(p.psn(), Psn::new(106299));
        assert!(!p.ack_req());
    }

    #[test]
    fn construct_over_poisoned_buffer() {
        let repr = BthRepr::parse(&Packet::new_checked(&GOLDEN[..]).unwrap()).unwrap();
        let mut buf = [0xa5u8; 12];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]), 0);
        assert_eq!(buf, GOLDEN);
    }

    #[test]
    fn rejects_tver_and_short() {
        let mut b = GOLDEN;
        b[1] |= 1;
        assert_eq!(BthRepr::parse(&Packet::new_unchecked(&b[..])), Err(crate::Error::BadTver(1)));
        assert!(matches!(Packet::new_checked(&GOLDEN[..11]), Err(crate::Error::Truncated { need: 12, have: 11, .. })));
    }
}
