//! Atomic extended transport header (IBA 9.3.4, 28 bytes) and the atomic ACK extended
//! transport header (IBA 9.3.6, 8 bytes).

use crate::field::{fixed_view, set_u32, set_u64, u32_at, u64_at};

/// Length of the AtomicETH.
pub const ATOMIC_ETH_LEN: usize = 28;
/// Length of the AtomicAckETH.
pub const ATOMIC_ACK_ETH_LEN: usize = 8;

mod field {
    pub const VA: usize = 0;
    pub const RKEY: usize = 8;
    pub const SWAP_ADD: usize = 12;
    pub const COMPARE: usize = 20;
}

fixed_view!(
    /// A view of an AtomicETH.
    AtomicEthPacket,
    ATOMIC_ETH_LEN,
    "AtomicETH"
);

impl<T: AsRef<[u8]>> AtomicEthPacket<T> {
    /// Virtual address (must be 8-byte aligned, IBA 9.4.5; the responder checks,
    /// as rxe `atomic_reply` does).
    pub fn va(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::VA)
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::RKEY)
    }
    /// Swap value (COMPARE & SWAP) or addend (FETCH & ADD).
    pub fn swap_add(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::SWAP_ADD)
    }
    /// Compare value (COMPARE & SWAP only).
    pub fn compare(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::COMPARE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEthPacket<T> {
    /// Sets the virtual address.
    pub fn set_va(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::VA, v);
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::RKEY, v);
    }
    /// Sets the swap/add value.
    pub fn set_swap_add(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::SWAP_ADD, v);
    }
    /// Sets the compare value.
    pub fn set_compare(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::COMPARE, v);
    }
}

/// An AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicEthRepr {
    /// Virtual address at the responder.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap value or addend.
    pub swap_add: u64,
    /// Compare value.
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Parses an AtomicETH.
    pub fn parse<T: AsRef<[u8]>>(p: &AtomicEthPacket<T>) -> crate::Result<AtomicEthRepr> {
        p.check_len()?;
        Ok(AtomicEthRepr { va: p.va(), rkey: p.rkey(), swap_add: p.swap_add(), compare: p.compare() })
    }
    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_ETH_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut AtomicEthPacket<T>) {
        p.set_va(self.va);
        p.set_rkey(self.rkey);
        p.set_swap_add(self.swap_add);
        p.set_compare(self.compare);
    }
}

fixed_view!(
    /// A view of an AtomicAckETH.
    AtomicAckEthPacket,
    ATOMIC_ACK_ETH_LEN,
    "AtomicAckETH"
);

impl<T: AsRef<[u8]>> AtomicAckEthPacket<T> {
    /// The value the target held before the atomic operation.
    pub fn orig_remote_data(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEthPacket<T> {
    /// Sets the original remote data.
    pub fn set_orig_remote_data(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), 0, v);
    }
}

/// An AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicAckEthRepr {
    /// The value the target held before the atomic operation.
    pub orig_remote_data: u64,
}

impl AtomicAckEthRepr {
    /// Parses an AtomicAckETH.
    pub fn parse<T: AsRef<[u8]>>(p: &AtomicAckEthPacket<T>) -> crate::Result<AtomicAckEthRepr> {
        p.check_len()?;
        Ok(AtomicAckEthRepr { orig_remote_data: p.orig_remote_data() })
    }
    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_ACK_ETH_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut AtomicAckEthPacket<T>) {
        p.set_orig_remote_data(self.orig_remote_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_eth_golden() {
        // From shared/vectors (RC_COMPARE_SWAP).
        let hex = [
            0xbd, 0x20, 0xfa, 0xeb, 0xef, 0xb4, 0x9a, 0xd8, 0x1e, 0x74, 0x00, 0xa4, 0x49, 0x62, 0xcd, 0x60, 0x6f, 0x5f,
            0x5f, 0x1a, 0xa9, 0x62, 0x0e, 0x3c, 0xa9, 0x4f, 0xae, 0xbe,
        ];
        let r = AtomicEthRepr::parse(&AtomicEthPacket::new_checked(&hex[..]).unwrap()).unwrap();
        assert_eq!(r.va, 13628168363668970200);
        assert_eq!(r.rkey, 510918820);
        assert_eq!(r.swap_add, 5288014726555459354);
        assert_eq!(r.compare, 12205333593828863678);
        let mut buf = [0xa5; 28];
        r.emit(&mut AtomicEthPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, hex);
    }
}
