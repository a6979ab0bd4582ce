//! DREQ: a disconnect request (IBA 12.6.10, Table 112).
//!
//! ```text
//!  0..4     Local Communication ID (the sender's)
//!  4..8     Remote Communication ID (the receiver's)
//!  8..11    Remote QPN/EECN (24)      11   reserved
//! 12..232   private data (220)
//! ```

use super::{private_len, CmIds};
use crate::field::{fixed_view, set_u24, set_u32, to_array, u24_at, u32_at};
use crate::mad::DATA_LEN;

/// Offsets of IBA Table 112, from the start of the MAD data.
mod field {
    use core::ops::Range;

    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    pub const REMOTE_QPN: usize = 8;
    pub const PRIVATE_DATA: Range<usize> = 12..12 + super::private_len::DREQ;
}

const _: () = assert!(field::PRIVATE_DATA.end == DATA_LEN, "Table 112 fills the MAD data");

fixed_view!(
    /// A view of a DREQ: the 232 bytes of MAD data after the common header.
    Packet,
    DATA_LEN,
    "CM DREQ"
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
    /// Remote QPN/EECN (24 bits): the receiver's QP.
    pub fn remote_qpn(&self) -> u32 {
        u24_at(self.b(), field::REMOTE_QPN)
    }
    /// Private data (220 bytes).
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
    /// Sets the Remote QPN/EECN (low 24 bits).
    pub fn set_remote_qpn(&mut self, v: u32) {
        set_u24(self.bm(), field::REMOTE_QPN, v);
    }
    /// Sets the private data.
    pub fn set_private_data(&mut self, v: &[u8; private_len::DREQ]) {
        self.bm()[field::PRIVATE_DATA].copy_from_slice(v);
    }
}

/// A disconnect request (IBA 12.6.10, Table 112).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmDreq {
    /// IDs and private data.
    pub ids: CmIds<{ private_len::DREQ }>,
    /// The receiver's QPN (or EECN).
    pub remote_qpn: u32,
}

impl CmDreq {
    /// Reads a DREQ. Every value is accepted; reserved bits are ignored.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> crate::Result<CmDreq> {
        p.check_len()?;
        Ok(CmDreq {
            ids: CmIds {
                local_comm_id: p.local_comm_id(),
                remote_comm_id: p.remote_comm_id(),
                private_data: to_array(p.private_data()),
            },
            remote_qpn: p.remote_qpn(),
        })
    }

    /// Bytes needed to emit (the whole MAD data).
    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }

    /// Writes the DREQ: every field, and 0 in the reserved byte.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.bm()[..DATA_LEN].fill(0);
        p.set_local_comm_id(self.ids.local_comm_id);
        p.set_remote_comm_id(self.ids.remote_comm_id);
        p.set_remote_qpn(self.remote_qpn);
        p.set_private_data(&self.ids.private_data);
    }
}
