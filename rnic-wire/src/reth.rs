//! RDMA extended transport header (IBA 9.3.3, 16 bytes): virtual address, R_Key, DMA length.

use crate::field::{fixed_view, set_u32, set_u64, u32_at, u64_at};

/// Length of the RETH.
pub const HEADER_LEN: usize = 16;

mod field {
    pub const VA: usize = 0;
    pub const RKEY: usize = 8;
    pub const DMA_LEN: usize = 12;
}

fixed_view!(
    /// A view of a RETH.
    Packet,
    HEADER_LEN,
    "RETH"
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Virtual address.
    pub fn va(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::VA)
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::RKEY)
    }
    /// DMA length of the whole operation.
    pub fn dma_len(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::DMA_LEN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the virtual address.
    pub fn set_va(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::VA, v);
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::RKEY, v);
    }
    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::DMA_LEN, v);
    }
}

/// A RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RethRepr {
    /// Virtual address at the responder.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length of the whole RDMA operation in bytes.
    pub dma_len: u32,
}

impl RethRepr {
    /// Parses a RETH. Every bit pattern is a valid RETH; meaning is checked by the responder.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> crate::Result<RethRepr> {
        p.check_len()?;
        Ok(RethRepr { va: p.va(), rkey: p.rkey(), dma_len: p.dma_len() })
    }
    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_va(self.va);
        p.set_rkey(self.rkey);
        p.set_dma_len(self.dma_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_golden() {
        let golden: [u8; 16] =
            [0x00, 0x00, 0x7f, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x00, 0x10, 0x01];
        let r = RethRepr::parse(&Packet::new_checked(&golden[..]).unwrap()).unwrap();
        assert_eq!(r, RethRepr { va: 0x7f12_3456_789a, rkey: 0xdead_beef, dma_len: 4097 });
        let mut buf = [0xa5u8; 16];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, golden);
    }
}
