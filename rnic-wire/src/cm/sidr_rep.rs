//! SIDR_REP: a service ID resolution reply (IBA 12.11, Table 120).
//!
//! ```text
//!  0..4     Request ID (the SIDR_REQ's)
//!  4        Status
//!  5        Additional Information Length
//!  6..8     Vendor ID, high 16 bits (IBA 1.4's ECE; 0 otherwise)
//!  8..11    QPN (24)
//! 11        Vendor ID, low 8 bits
//! 12..20    Service ID
//! 20..24    Q_Key
//! 24..96    Additional Information (72: ClassPortInfo on redirect)
//! 96..232   private data (136)
//! ```

use super::{private_len, SidrStatus, SIDR_INFO_LEN};
use crate::field::{fixed_view, set_u16, set_u24, set_u32, set_u64, to_array, u16_at, u24_at, u32_at, u64_at};
use crate::mad::DATA_LEN;

/// Offsets of IBA Table 120, from the start of the MAD data.
mod field {
    use core::ops::Range;

    pub const REQUEST_ID: usize = 0;
    pub const STATUS: usize = 4;
    pub const INFO_LEN: usize = 5;
    pub const VENDOR_ID_HIGH: usize = 6;
    pub const QPN: usize = 8;
    pub const VENDOR_ID_LOW: usize = 11;
    pub const SERVICE_ID: usize = 12;
    pub const QKEY: usize = 20;
    pub const INFO: Range<usize> = 24..24 + super::SIDR_INFO_LEN;
    pub const PRIVATE_DATA: Range<usize> = INFO.end..INFO.end + super::private_len::SIDR_REP;
}

const _: () = assert!(field::PRIVATE_DATA.end == DATA_LEN, "Table 120 fills the MAD data");

fixed_view!(
    /// A view of a SIDR_REP: the 232 bytes of MAD data after the common header.
    Packet,
    DATA_LEN,
    "CM SIDR_REP"
);

impl<T: AsRef<[u8]>> Packet<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Request ID.
    pub fn request_id(&self) -> u32 {
        u32_at(self.b(), field::REQUEST_ID)
    }
    /// Status.
    pub fn status(&self) -> SidrStatus {
        SidrStatus::from(self.b()[field::STATUS])
    }
    /// Additional Information Length.
    pub fn info_len(&self) -> u8 {
        self.b()[field::INFO_LEN]
    }
    /// Vendor ID (24 bits, in two parts around the QPN).
    pub fn vendor_id(&self) -> u32 {
        u32::from(u16_at(self.b(), field::VENDOR_ID_HIGH)) << 8 | u32::from(self.b()[field::VENDOR_ID_LOW])
    }
    /// QPN (24 bits).
    pub fn qpn(&self) -> u32 {
        u24_at(self.b(), field::QPN)
    }
    /// Service ID.
    pub fn service_id(&self) -> u64 {
        u64_at(self.b(), field::SERVICE_ID)
    }
    /// Q_Key.
    pub fn qkey(&self) -> u32 {
        u32_at(self.b(), field::QKEY)
    }
    /// Additional Information (72 bytes).
    pub fn info(&self) -> &[u8] {
        &self.b()[field::INFO]
    }
    /// Private data (136 bytes).
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
    /// Sets the Status.
    pub fn set_status(&mut self, v: SidrStatus) {
        self.bm()[field::STATUS] = u8::from(v);
    }
    /// Sets the Additional Information Length.
    pub fn set_info_len(&mut self, v: u8) {
        self.bm()[field::INFO_LEN] = v;
    }
    /// Sets the Vendor ID (low 24 bits).
    pub fn set_vendor_id(&mut self, v: u32) {
        let [_, high, mid, low] = v.to_be_bytes();
        set_u16(self.bm(), field::VENDOR_ID_HIGH, u16::from_be_bytes([high, mid]));
        self.bm()[field::VENDOR_ID_LOW] = low;
    }
    /// Sets the QPN (low 24 bits).
    pub fn set_qpn(&mut self, v: u32) {
        set_u24(self.bm(), field::QPN, v);
    }
    /// Sets the Service ID.
    pub fn set_service_id(&mut self, v: u64) {
        set_u64(self.bm(), field::SERVICE_ID, v);
    }
    /// Sets the Q_Key.
    pub fn set_qkey(&mut self, v: u32) {
        set_u32(self.bm(), field::QKEY, v);
    }
    /// Sets the Additional Information.
    pub fn set_info(&mut self, v: &[u8; SIDR_INFO_LEN]) {
        self.bm()[field::INFO].copy_from_slice(v);
    }
    /// Sets the private data.
    pub fn set_private_data(&mut self, v: &[u8; private_len::SIDR_REP]) {
        self.bm()[field::PRIVATE_DATA].copy_from_slice(v);
    }
}

/// A service ID resolution reply (IBA 12.11, Table 120).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmSidrRep {
    /// The SIDR_REQ's request ID.
    pub request_id: u32,
    /// Whether `qpn` and `qkey` are valid, and if not why.
    pub status: SidrStatus,
    /// Bytes of `info` that mean something.
    pub info_len: u8,
    /// The vendor ID (24 bits) of IBA 1.4's enhanced connection establishment; 0 here.
    pub vendor_id: u32,
    /// The UD QP that serves the service (24 bits).
    pub qpn: u32,
    /// The service ID (Linux echoes the request's).
    pub service_id: u64,
    /// The Q_Key the requester must send with (rdma_cm's UDP port space: 0x01234567).
    pub qkey: u32,
    /// Additional information (a ClassPortInfo when `status` is a redirect).
    pub info: [u8; SIDR_INFO_LEN],
    /// Private data.
    pub private_data: [u8; private_len::SIDR_REP],
}

impl CmSidrRep {
    /// Reads a SIDR_REP. Every value is accepted (a status IBA does not define is kept).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> crate::Result<CmSidrRep> {
        p.check_len()?;
        Ok(CmSidrRep {
            request_id: p.request_id(),
            status: p.status(),
            info_len: p.info_len(),
            vendor_id: p.vendor_id(),
            qpn: p.qpn(),
            service_id: p.service_id(),
            qkey: p.qkey(),
            info: to_array(p.info()),
            private_data: to_array(p.private_data()),
        })
    }

    /// Bytes needed to emit (the whole MAD data).
    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }

    /// Writes the SIDR_REP: every field.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.bm()[..DATA_LEN].fill(0);
        p.set_request_id(self.request_id);
        p.set_status(self.status);
        p.set_info_len(self.info_len);
        p.set_vendor_id(self.vendor_id);
        p.set_qpn(self.qpn);
        p.set_service_id(self.service_id);
        p.set_qkey(self.qkey);
        p.set_info(&self.info);
        p.set_private_data(&self.private_data);
    }
}
