//! Datagram extended transport header (IBA 9.3.2, 8 bytes): Q_Key, reserved byte, source QP.

use crate::field::{fixed_view, set_u24, set_u32, u24_at, u32_at};
use crate::Qpn;

/// Length of the DETH.
pub const HEADER_LEN: usize = 8;

mod field {
    pub const QKEY: usize = 0;
    pub const RESERVED: usize = 4;
    pub const SRC_QP: usize = 5;
}

fixed_view!(
    /// A view of a DETH.
    Packet,
    HEADER_LEN,
    "DETH"
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Queue key.
    pub fn qkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::QKEY)
    }
    /// Source QP of the sender.
    pub fn src_qp(&self) -> Qpn {
        Qpn::new(u24_at(self.buffer.as_ref(), field::SRC_QP))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the Q_Key.
    pub fn set_qkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::QKEY, v);
    }
    /// Sets the source QP; the reserved byte becomes 0.
    pub fn set_src_qp(&mut self, v: Qpn) {
        self.buffer.as_mut()[field::RESERVED] = 0;
        set_u24(self.buffer.as_mut(), field::SRC_QP, v.value());
    }
}

/// A DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DethRepr {
    /// Queue key, checked against the destination QP's (IBA C10-15).
    pub qkey: u32,
    /// The sending QP.
    pub src_qp: Qpn,
}

impl DethRepr {
    /// Parses a DETH (the reserved byte is ignored).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> crate::Result<DethRepr> {
        p.check_len()?;
        Ok(DethRepr { qkey: p.qkey(), src_qp: p.src_qp() })
    }
    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_qkey(self.qkey);
        p.set_src_qp(self.src_qp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_golden() {
        let golden = [0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x15];
        let r = DethRepr::parse(&Packet::new_checked(&golden[..]).unwrap()).unwrap();
        assert_eq!(r, DethRepr { qkey: 0x1111_1111, src_qp: Qpn::new(0x15) });
        let mut buf = [0xa5u8; 8];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, golden);
    }
}
