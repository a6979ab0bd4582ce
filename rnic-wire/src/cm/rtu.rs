//! RTU: ready to use, the active side's answer to a REP (IBA 12.6.9, Table 111).
//!
//! ```text
//!  0..4     Local Communication ID (the sender's)
//!  4..8     Remote Communication ID (the receiver's)
//!  8..232   private data (224)
//! ```
//!
//! DREP (Table 113) has the same layout: [`super::drep`] is this view, and both read into a
//! [`CmIds`] ([`CmIds::parse`], [`CmIds::emit`]).

use super::{private_len, CmIds};
use crate::field::{fixed_view, set_u32, to_array, u32_at};
use crate::mad::DATA_LEN;

/// Offsets of IBA Table 111 (and Table 113), from the start of the MAD data.
mod field {
    use core::ops::Range;

    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    pub const PRIVATE_DATA: Range<usize> = 8..8 + super::private_len::RTU;
}

const _: () = assert!(field::PRIVATE_DATA.end == DATA_LEN, "Table 111 fills the MAD data");

fixed_view!(
    /// A view of a RTU or a DREP: the 232 bytes of MAD data after the common header.
    Packet,
    DATA_LEN,
    "CM RTU/DREP"
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
    /// Private data (224 bytes).
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
    /// Sets the private data.
    pub fn set_private_data(&mut self, v: &[u8; private_len::RTU]) {
        self.bm()[field::PRIVATE_DATA].copy_from_slice(v);
    }
}

impl CmIds<{ private_len::RTU }> {
    /// Reads a RTU or a DREP. Every value is accepted.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> crate::Result<Self> {
        p.check_len()?;
        Ok(CmIds {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            private_data: to_array(p.private_data()),
        })
    }

    /// Writes a RTU or a DREP (all 232 bytes).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.bm()[..DATA_LEN].fill(0);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_private_data(&self.private_data);
    }
}
