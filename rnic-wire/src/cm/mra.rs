//! MRA: a message receipt acknowledgement, "more time needed" (IBA 12.6.6, Table 107).
//!
//! ```text
//!  0..4     Local Communication ID
//!  4..8     Remote Communication ID
//!  8        Message MRAed (2) reserved (6)
//!  9        Service Timeout (5) reserved (3)
//! 10..232   private data (222)
//! ```

use super::{private_len, MsgRef};
use crate::field::{bits, fixed_view, set_bits, set_u32, to_array, u32_at, Bits};
use crate::mad::DATA_LEN;

/// Offsets of IBA Table 107, from the start of the MAD data.
mod field {
    use super::Bits;
    use core::ops::Range;

    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    pub const MESSAGE_MRAED: Bits = Bits::new(8, 0, 2);
    pub const SERVICE_TIMEOUT: Bits = Bits::new(9, 0, 5);
    pub const PRIVATE_DATA: Range<usize> = 10..10 + super::private_len::MRA;
}

const _: () = assert!(field::PRIVATE_DATA.end == DATA_LEN, "Table 107 fills the MAD data");

fixed_view!(
    /// A view of an MRA: the 232 bytes of MAD data after the common header.
    Packet,
    DATA_LEN,
    "CM MRA"
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
    /// Message MRAed.
    pub fn message_mraed(&self) -> MsgRef {
        MsgRef::from_bits(bits(self.b(), field::MESSAGE_MRAED))
    }
    /// Service Timeout (5 bits).
    pub fn service_timeout(&self) -> u8 {
        bits(self.b(), field::SERVICE_TIMEOUT)
    }
    /// Private data (222 bytes).
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
    /// Sets Message MRAed.
    pub fn set_message_mraed(&mut self, v: MsgRef) {
        set_bits(self.bm(), field::MESSAGE_MRAED, v.bits());
    }
    /// Sets the Service Timeout (low 5 bits).
    pub fn set_service_timeout(&mut self, v: u8) {
        set_bits(self.bm(), field::SERVICE_TIMEOUT, v);
    }
    /// Sets the private data.
    pub fn set_private_data(&mut self, v: &[u8; private_len::MRA]) {
        self.bm()[field::PRIVATE_DATA].copy_from_slice(v);
    }
}

/// A message receipt acknowledgement (IBA 12.6.6, Table 107).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmMra {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// Which message is MRAed.
    pub message_mraed: MsgRef,
    /// Service timeout: 4.096 us x 2^n the sender needs (5 bits).
    pub service_timeout: u8,
    /// Private data.
    pub private_data: [u8; private_len::MRA],
}

impl CmMra {
    /// Reads an MRA. Every value is accepted; reserved bits are ignored.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> crate::Result<CmMra> {
        p.check_len()?;
        Ok(CmMra {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            message_mraed: p.message_mraed(),
            service_timeout: p.service_timeout(),
            private_data: to_array(p.private_data()),
        })
    }

    /// Bytes needed to emit (the whole MAD data).
    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }

    /// Writes the MRA: every field, and 0 in every reserved bit.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.bm()[..DATA_LEN].fill(0);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_message_mraed(self.message_mraed);
        p.set_service_timeout(self.service_timeout);
        p.set_private_data(&self.private_data);
    }
}
