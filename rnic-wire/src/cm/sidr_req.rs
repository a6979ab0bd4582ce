//! SIDR_REQ: a service ID resolution request (IBA 12.11, Table 119). The sender asks which
//! UD QP (and Q_Key) serves a service ID at the receiver; rdma_cm's UDP port space
//! resolves a destination with it.
//!
//! ```text
//!  0..4     Request ID (the sender's; the SIDR_REP echoes it)
//!  4..6     P_Key
//!  6..8     reserved
//!  8..16    Service ID
//! 16..232   private data (216; rdma_cm's 36-byte header first)
//! ```

use super::private_len;
use crate::field::{fixed_view, set_u16, set_u32, set_u64, to_array, u16_at, u32_at, u64_at};
use crate::mad::DATA_LEN;

/// Offsets of IBA Table 119, from the start of the MAD data.
mod field {
    use core::ops::Range;

    pub const REQUEST_ID: usize = 0;
    pub const PKEY: usize = 4;
    pub const SERVICE_ID: usize = 8;
    pub const PRIVATE_DATA: Range<usize> = 16..16 + super::private_len::SIDR_REQ;
}

const _: () = assert!(field::PRIVATE_DATA.end == DATA_LEN, "Table 119 fills the MAD data");

fixed_view!(
    /// A view of a SIDR_REQ: the 232 bytes of MAD data after the common header.
    Packet,
    DATA_LEN,
    "CM SIDR_REQ"
);

impl<T: AsRef<[u8]>> Packet<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Request ID.
    pub fn request_id(&self) -> u32 {
        u32_at(self.b(), field::REQUEST_ID)
    }
    /// P_Key.
    pub fn pkey(&self) -> u16 {
        u16_at(self.b(), field::PKEY)
    }
    /// Service ID.
    pub fn service_id(&self) -> u64 {
        u64_at(self.b(), field::SERVICE_ID)
    }
    /// Private data (216 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.b()[field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the Request ID.
    pub fn set_request_id(&mut self, v: u32) {
        set_u32(self.bm(), field::REQUEST_ID, v);
    }
    /// Sets the P_Key.
    pub fn set_pkey(&mut self, v: u16) {
        set_u16(self.bm(), field::PKEY, v);
    }
    /// Sets the Service ID.
    pub fn set_service_id(&mut self, v: u64) {
        set_u64(self.bm(), field::SERVICE_ID, v);
    }
    /// Sets the private data.
    pub fn set_private_data(&mut self, v: &[u8; private_len::SIDR_REQ]) {
        self.bm()[field::PRIVATE_DATA].copy_from_slice(v);
    }
}

/// A service ID resolution request (IBA 12.11, Table 119): the sender asks which UD QP
/// (and Q_Key) serves `service_id` at the receiver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmSidrReq {
    /// The requester's ID for this request.
    pub request_id: u32,
    /// The partition the requester's UD QP is in.
    pub pkey: u16,
    /// The service asked for (rdma_cm: port space 0x0111 << 16 | port).
    pub service_id: u64,
    /// Private data (rdma_cm: its header first, [`super::CmaHeader`]).
    pub private_data: [u8; private_len::SIDR_REQ],
}

impl CmSidrReq {
    /// Reads a SIDR_REQ. Every value is accepted; the reserved bytes are ignored.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> crate::Result<CmSidrReq> {
        p.check_len()?;
        Ok(CmSidrReq {
            request_id: p.request_id(),
            pkey: p.pkey(),
            service_id: p.service_id(),
            private_data: to_array(p.private_data()),
        })
    }

    /// Bytes needed to emit (the whole MAD data).
    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }

    /// Writes the SIDR_REQ: every field, and 0 in the reserved bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.bm()[..DATA_LEN].fill(0);
        p.set_request_id(self.request_id);
        p.set_pkey(self.pkey);
        p.set_service_id(self.service_id);
        p.set_private_data(&self.private_data);
    }
}
