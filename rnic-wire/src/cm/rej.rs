//! REJ: a reject (IBA 12.6.7, Table 108).
//!
//! ```text
//!  0..4     Local Communication ID (0 if the sender has none yet)
//!  4..8     Remote Communication ID
//!  8        Message REJected (2) reserved (6)
//!  9        Reject Info Length (7) reserved (1)
//! 10..12    Reason (Table 109)
//! 12..84    Additional Rejection Information (72)
//! 84..232   private data (148)
//! ```

use super::{private_len, MsgRef};
use crate::field::{bits, fixed_view, set_bits, set_u16, set_u32, to_array, u16_at, u32_at, Bits};
use crate::mad::DATA_LEN;

/// Bytes of a REJ's Additional Rejection Information (IBA Table 108).
pub const ARI_LEN: usize = 72;

/// Offsets of IBA Table 108, from the start of the MAD data.
mod field {
    use super::Bits;
    use core::ops::Range;

    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    pub const MESSAGE_REJECTED: Bits = Bits::new(8, 0, 2);
    pub const REJECTED_INFO_LENGTH: Bits = Bits::new(9, 0, 7);
    pub const REASON: usize = 10;
    pub const ARI: Range<usize> = 12..12 + super::ARI_LEN;
    pub const PRIVATE_DATA: Range<usize> = ARI.end..ARI.end + super::private_len::REJ;
}

const _: () = assert!(field::PRIVATE_DATA.end == DATA_LEN, "Table 108 fills the MAD data");

fixed_view!(
    /// A view of a REJ: the 232 bytes of MAD data after the common header.
    Packet,
    DATA_LEN,
    "CM REJ"
);

impl<T: AsRef<[u8]>> Packet<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Local Communication ID: the sender's.
    pub fn local_comm_id(&self) -> u32 {
        u32_at(self.b(), field::LOCAL_COMM_ID)
    }
    /// Remote Communication ID: the receiver's.
    pub fn remote_comm_id(&self) -> u32 {
        u32_at(self.b(), field::REMOTE_COMM_ID)
    }
    /// Message REJected.
    pub fn message_rejected(&self) -> MsgRef {
        MsgRef::from_bits(bits(self.b(), field::MESSAGE_REJECTED))
    }
    /// Reject Info Length (7 bits).
    pub fn rejected_info_length(&self) -> u8 {
        bits(self.b(), field::REJECTED_INFO_LENGTH)
    }
    /// Reason ([`super::rej_reason`]).
    pub fn reason(&self) -> u16 {
        u16_at(self.b(), field::REASON)
    }
    /// Additional Rejection Information (72 bytes).
    pub fn ari(&self) -> &[u8] {
        &self.b()[field::ARI]
    }
    /// Private data (148 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.b()[field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the Local Communication ID.
    pub fn set_local_comm_id(&mut self, v: u32) {
        set_u32(self.bm(), field::LOCAL_COMM_ID, v);
    }
    /// Sets the Remote Communication ID.
    pub fn set_remote_comm_id(&mut self, v: u32) {
        set_u32(self.bm(), field::REMOTE_COMM_ID, v);
    }
    /// Sets Message REJected.
    pub fn set_message_rejected(&mut self, v: MsgRef) {
        set_bits(self.bm(), field::MESSAGE_REJECTED, v.bits());
    }
    /// Sets the Reject Info Length (low 7 bits).
    pub fn set_rejected_info_length(&mut self, v: u8) {
        set_bits(self.bm(), field::REJECTED_INFO_LENGTH, v);
    }
    /// Sets the Reason.
    pub fn set_reason(&mut self, v: u16) {
        set_u16(self.bm(), field::REASON, v);
    }
    /// Sets the Additional Rejection Information.
    pub fn set_ari(&mut self, v: &[u8; ARI_LEN]) {
        self.bm()[field::ARI].copy_from_slice(v);
    }
    /// Sets the private data.
    pub fn set_private_data(&mut self, v: &[u8; private_len::REJ]) {
        self.bm()[field::PRIVATE_DATA].copy_from_slice(v);
    }
}

/// A reject (IBA 12.6.7, Table 108).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmRej {
    /// The sender's communication ID (0 if it has none yet).
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// Which message is rejected.
    pub message_rejected: MsgRef,
    /// Bytes of `ari` that mean something (7 bits).
    pub rejected_info_length: u8,
    /// Why ([`super::rej_reason`]).
    pub reason: u16,
    /// Additional rejection information.
    pub ari: [u8; ARI_LEN],
    /// Private data.
    pub private_data: [u8; private_len::REJ],
}

impl CmRej {
    /// Reads a REJ. Every value is accepted; reserved bits are ignored.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> crate::Result<CmRej> {
        p.check_len()?;
        Ok(CmRej {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            message_rejected: p.message_rejected(),
            rejected_info_length: p.rejected_info_length(),
            reason: p.reason(),
            ari: to_array(p.ari()),
            private_data: to_array(p.private_data()),
        })
    }

    /// Bytes needed to emit (the whole MAD data).
    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }

    /// Writes the REJ: every field, and 0 in every reserved bit.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.bm()[..DATA_LEN].fill(0);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_message_rejected(self.message_rejected);
        p.set_rejected_info_length(self.rejected_info_length);
        p.set_reason(self.reason);
        p.set_ari(&self.ari);
        p.set_private_data(&self.private_data);
    }
}
