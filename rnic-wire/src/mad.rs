//! Management datagrams (IBA 13.4): the 256-byte payload of a UD SEND to QP1 (the GSI),
//! Q_Key 0x80010000. Every MAD starts with the 24-byte common header; the class decides
//! what the other 232 bytes mean ([`crate::cm`] for the Communication Manager).

use crate::field::{fixed_view, set_u16, set_u32, set_u64, u16_at, u32_at, u64_at};

/// Length of a MAD on the wire (IBA 13.4.2: every GSI MAD is exactly 256 bytes).
pub const MAD_LEN: usize = 256;
/// Length of the common MAD header.
pub const HEADER_LEN: usize = 24;
/// Bytes after the common header (the class's data).
pub const DATA_LEN: usize = MAD_LEN - HEADER_LEN;
/// The GSI's well-known Q_Key (IBA 13.4.4.1, C13-7): QP1 drops MADs carrying another one.
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The GSI's QP number.
pub const GSI_QPN: u32 = 1;
/// BaseVersion of every MAD IBA defines (IBA 13.4.3).
pub const BASE_VERSION: u8 = 1;
/// Management class of the Communication Manager (IBA 13.4.4, Table 133).
pub const CLASS_CM: u8 = 0x07;
/// The CM's ClassVersion (IBA 12.6.1: 2).
pub const CM_CLASS_VERSION: u8 = 2;

/// MAD methods (IBA 13.4.5, Table 134). The high bit (R) marks a response.
pub mod method {
    /// Get an attribute.
    pub const GET: u8 = 0x01;
    /// Set an attribute.
    pub const SET: u8 = 0x02;
    /// A datagram needing no response MAD (what every CM message is, IBA 12.6.2).
    pub const SEND: u8 = 0x03;
    /// The response bit.
    pub const RESPONSE: u8 = 0x80;
}

/// MAD status values (IBA 13.4.7, Table 135: bits 2..4 are the invalid-field code).
pub mod status {
    /// Bad version: the class or base version is not supported.
    pub const BAD_VERSION: u16 = 1 << 2;
    /// The method is not supported.
    pub const METHOD_NOT_SUPPORTED: u16 = 2 << 2;
    /// The method/attribute combination is not supported (Linux's
    /// `IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB`).
    pub const METHOD_ATTRIB_NOT_SUPPORTED: u16 = 3 << 2;
    /// An attribute or modifier value is invalid.
    pub const INVALID_ATTRIB_VALUE: u16 = 7 << 2;
}

/// Offsets of the common MAD header, from the MAD's first byte.
mod field {
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    pub const METHOD: usize = 3;
    pub const STATUS: usize = 4;
    pub const CLASS_SPECIFIC: usize = 6;
    pub const TID: usize = 8;
    pub const ATTR_ID: usize = 16;
    pub const RESERVED: usize = 18;
    pub const ATTR_MOD: usize = 20;
}

fixed_view!(
    /// A view of a MAD's common header.
    Packet,
    HEADER_LEN,
    "MAD header"
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// BaseVersion.
    pub fn base_version(&self) -> u8 {
        self.buffer.as_ref()[field::BASE_VERSION]
    }
    /// Management class.
    pub fn mgmt_class(&self) -> u8 {
        self.buffer.as_ref()[field::MGMT_CLASS]
    }
    /// The class's version.
    pub fn class_version(&self) -> u8 {
        self.buffer.as_ref()[field::CLASS_VERSION]
    }
    /// Method, with the response bit.
    pub fn method(&self) -> u8 {
        self.buffer.as_ref()[field::METHOD]
    }
    /// Status.
    pub fn status(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::STATUS)
    }
    /// Class-specific field.
    pub fn class_specific(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CLASS_SPECIFIC)
    }
    /// Transaction ID.
    pub fn tid(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::TID)
    }
    /// Attribute ID.
    pub fn attr_id(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::ATTR_ID)
    }
    /// Attribute modifier.
    pub fn attr_mod(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::ATTR_MOD)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets BaseVersion.
    pub fn set_base_version(&mut self, v: u8) {
        self.bm()[field::BASE_VERSION] = v;
    }
    /// Sets the management class.
    pub fn set_mgmt_class(&mut self, v: u8) {
        self.bm()[field::MGMT_CLASS] = v;
    }
    /// Sets the class's version.
    pub fn set_class_version(&mut self, v: u8) {
        self.bm()[field::CLASS_VERSION] = v;
    }
    /// Sets the method, response bit included.
    pub fn set_method(&mut self, v: u8) {
        self.bm()[field::METHOD] = v;
    }
    /// Sets the status.
    pub fn set_status(&mut self, v: u16) {
        set_u16(self.bm(), field::STATUS, v);
    }
    /// Sets the class-specific field.
    pub fn set_class_specific(&mut self, v: u16) {
        set_u16(self.bm(), field::CLASS_SPECIFIC, v);
    }
    /// Sets the transaction ID.
    pub fn set_tid(&mut self, v: u64) {
        set_u64(self.bm(), field::TID, v);
    }
    /// Sets the attribute ID.
    pub fn set_attr_id(&mut self, v: u16) {
        set_u16(self.bm(), field::ATTR_ID, v);
    }
    /// Sets the reserved field between the attribute ID and modifier to 0.
    pub fn clear_reserved(&mut self) {
        set_u16(self.bm(), field::RESERVED, 0);
    }
    /// Sets the attribute modifier.
    pub fn set_attr_mod(&mut self, v: u32) {
        set_u32(self.bm(), field::ATTR_MOD, v);
    }
}

/// The common MAD header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MadHeader {
    /// BaseVersion (1).
    pub base_version: u8,
    /// Management class ([`CLASS_CM`]).
    pub mgmt_class: u8,
    /// The class's version.
    pub class_version: u8,
    /// Method, response bit included.
    pub method: u8,
    /// Status (0 on requests).
    pub status: u16,
    /// Class-specific.
    pub class_specific: u16,
    /// Transaction ID: the requester's, echoed by the responder (IBA 13.4.6.4).
    pub tid: u64,
    /// Attribute ID (for the CM: which message).
    pub attr_id: u16,
    /// Attribute modifier.
    pub attr_mod: u32,
}

impl MadHeader {
    /// A CM message header (`Send` method, class version 2).
    pub fn cm(attr_id: u16, tid: u64) -> MadHeader {
        MadHeader {
            base_version: BASE_VERSION,
            mgmt_class: CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: method::SEND,
            attr_id,
            tid,
            ..MadHeader::default()
        }
    }

    /// Parses the header (the reserved field is ignored).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> crate::Result<MadHeader> {
        p.check_len()?;
        Ok(MadHeader {
            base_version: p.base_version(),
            mgmt_class: p.mgmt_class(),
            class_version: p.class_version(),
            method: p.method(),
            status: p.status(),
            class_specific: p.class_specific(),
            tid: p.tid(),
            attr_id: p.attr_id(),
            attr_mod: p.attr_mod(),
        })
    }

    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header; the reserved field becomes 0.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_base_version(self.base_version);
        p.set_mgmt_class(self.mgmt_class);
        p.set_class_version(self.class_version);
        p.set_method(self.method);
        p.set_status(self.status);
        p.set_class_specific(self.class_specific);
        p.set_tid(self.tid);
        p.set_attr_id(self.attr_id);
        p.clear_reserved();
        p.set_attr_mod(self.attr_mod);
    }

    /// Whether this is a response (the method's R bit).
    pub fn is_response(&self) -> bool {
        self.method & method::RESPONSE != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_golden_bytes() {
        let h = MadHeader {
            status: 0x0004,
            class_specific: 0xbeef,
            attr_mod: 7,
            ..MadHeader::cm(0x0010, 0x0123_4567_89ab_cdef)
        };
        let mut b = [0xa5u8; HEADER_LEN];
        h.emit(&mut Packet::new_unchecked(&mut b[..]));
        assert_eq!(
            b,
            [
                0x01, 0x07, 0x02, 0x03, 0x00, 0x04, 0xbe, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x00,
                0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07
            ]
        );
        assert_eq!(MadHeader::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap(), h);
        assert!(!h.is_response());
        assert!(MadHeader { method: 0x83, ..h }.is_response());
    }

    #[test]
    fn a_short_buffer_is_an_error() {
        assert!(Packet::new_checked(&[0u8; HEADER_LEN - 1][..]).is_err());
    }
}
