//! Communication Manager messages (IBA 12.6): the 232 bytes after a CM MAD's common
//! header ([`crate::mad`]), and the rdma_cm addressing carried in a REQ's private data.
//!
//! Each message is a module after the crate's pattern: a view `Packet<T>` with a getter
//! and a setter per field, the field offsets as named constants in its `mod field` (REQ
//! Table 106 in [`req`], MRA 107 in [`mra`], REJ 108 in [`rej`], REP 110 in [`rep`], RTU
//! 111 in [`rtu`], DREQ 112 in [`dreq`], DREP 113 in [`drep`], SIDR_REQ 119 in
//! [`sidr_req`], SIDR_REP 120 in [`sidr_rep`]), and a representation (`CmReq`, ...) with
//! `parse(&view)` and `emit(&mut view)`. [`CmMessage`] picks the message by attribute ID.
//!
//! The views cover the MAD data, not the whole MAD: the IBA tables count their offsets
//! from the end of the common header (Linux's `CM_FIELD_*` macros add
//! `sizeof(struct ib_mad_hdr)` to them), so each constant is the table's number as
//! printed, and the common header stays [`crate::mad::Packet`]'s alone. Every message
//! fills the 232 bytes exactly (private data to the end), so every view checks for all
//! of them.
//!
//! Bit positions within a byte count from its most significant bit, as IBA draws them
//! (the crate's shared `field::Bits`). Reserved bits are written as 0 and ignored on parse.
//! Fields that only InfiniBand link layers use (LIDs, SL, packet rate) are kept as
//! received, so a REQ round-trips byte for byte. ClassPortInfo, LAP and APR have no
//! view: rnic does not implement them ([`CmMessage::parse_data`] answers `None`).

use crate::field::{set_u16, to_array, u16_at};
use crate::mad::{MadHeader, Packet as MadPacket, CLASS_CM, DATA_LEN, HEADER_LEN, MAD_LEN};
use crate::Error;

pub mod drep;
pub mod dreq;
pub mod mra;
pub mod rej;
pub mod rep;
pub mod req;
pub mod rtu;
pub mod sidr_rep;
pub mod sidr_req;

pub use dreq::CmDreq;
pub use mra::CmMra;
pub use rej::CmRej;
pub use rep::CmRep;
pub use req::{CmPath, CmReq};
pub use sidr_rep::CmSidrRep;
pub use sidr_req::CmSidrReq;

/// CM attribute IDs: which message a CM MAD carries (IBA 12.6.3, Table 104).
pub mod attr {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// Connection request.
    pub const REQ: u16 = 0x0010;
    /// Message receipt acknowledgement (more time needed).
    pub const MRA: u16 = 0x0011;
    /// Reject.
    pub const REJ: u16 = 0x0012;
    /// Reply to a REQ.
    pub const REP: u16 = 0x0013;
    /// Ready to use.
    pub const RTU: u16 = 0x0014;
    /// Disconnect request.
    pub const DREQ: u16 = 0x0015;
    /// Disconnect reply.
    pub const DREP: u16 = 0x0016;
    /// Service ID resolution request (UD).
    pub const SIDR_REQ: u16 = 0x0017;
    /// Service ID resolution reply.
    pub const SIDR_REP: u16 = 0x0018;
    /// Load alternate path.
    pub const LAP: u16 = 0x0019;
    /// Alternate path response.
    pub const APR: u16 = 0x001a;
}

/// Private data lengths (IBA Tables 106-113).
pub mod private_len {
    /// REQ.
    pub const REQ: usize = 92;
    /// MRA.
    pub const MRA: usize = 222;
    /// REJ.
    pub const REJ: usize = 148;
    /// REP.
    pub const REP: usize = 196;
    /// RTU.
    pub const RTU: usize = 224;
    /// DREQ.
    pub const DREQ: usize = 220;
    /// DREP.
    pub const DREP: usize = 224;
    /// SIDR_REQ.
    pub const SIDR_REQ: usize = 216;
    /// SIDR_REP.
    pub const SIDR_REP: usize = 136;
}

/// Bytes of a SIDR_REP's additional information (IBA Table 120: the ClassPortInfo a
/// redirect names).
pub const SIDR_INFO_LEN: usize = 72;

/// What a SIDR_REP says about the request (IBA Table 120's Status; Linux's
/// `enum ib_cm_sidr_status`). A value IBA does not define is kept, not refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SidrStatus {
    /// 0: the QPN and Q_Key are valid.
    Valid,
    /// 1: nobody serves the service ID (what Linux's CM answers when nobody listens).
    ServiceIdNotSupported,
    /// 2: the service provider rejected the request.
    Rejected,
    /// 3: no QP available.
    NoQp,
    /// 4: redirect: the additional information is a ClassPortInfo to ask instead.
    Redirect,
    /// 5: the requested class version is not supported.
    ClassVersionNotSupported,
    /// Any other value.
    Unknown(u8),
}

impl From<u8> for SidrStatus {
    fn from(v: u8) -> SidrStatus {
        match v {
            0 => SidrStatus::Valid,
            1 => SidrStatus::ServiceIdNotSupported,
            2 => SidrStatus::Rejected,
            3 => SidrStatus::NoQp,
            4 => SidrStatus::Redirect,
            5 => SidrStatus::ClassVersionNotSupported,
            v => SidrStatus::Unknown(v),
        }
    }
}

impl From<SidrStatus> for u8 {
    fn from(s: SidrStatus) -> u8 {
        match s {
            SidrStatus::Valid => 0,
            SidrStatus::ServiceIdNotSupported => 1,
            SidrStatus::Rejected => 2,
            SidrStatus::NoQp => 3,
            SidrStatus::Redirect => 4,
            SidrStatus::ClassVersionNotSupported => 5,
            SidrStatus::Unknown(v) => v,
        }
    }
}

/// REJ reasons (IBA 12.6.7.2, Table 109; Linux's `enum ib_cm_rej_reason`) rnic sends or
/// must recognise.
pub mod rej_reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// No resources available.
    pub const NO_RESOURCES: u16 = 3;
    /// Timeout: the sender gave up waiting for a response.
    pub const TIMEOUT: u16 = 4;
    /// Unsupported request.
    pub const UNSUPPORTED: u16 = 5;
    /// Invalid communication ID (a REP/RTU/DREQ for a connection the receiver does not know).
    pub const INVALID_COMM_ID: u16 = 6;
    /// Invalid service ID: nobody listens (rdma_cm reports it as unreachable).
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Invalid transport service type.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// Stale connection: the QPN/comm ID pair is still in use (or in TimeWait).
    pub const STALE_CONN: u16 = 10;
    /// Invalid path packet payload MTU.
    pub const INVALID_MTU: u16 = 26;
    /// Consumer defined: the application said no (rdma_reject; private data may say why).
    pub const CONSUMER_REJECT: u16 = 28;
}

/// Which message a REJ or MRA refers to (IBA Tables 107/108: "Message REJected/MRAed").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgRef {
    /// The REQ.
    Req,
    /// The REP.
    Rep,
    /// Another (LAP for MRA; "other" for REJ).
    Other,
    /// The reserved value 3, kept.
    Reserved,
}

impl MsgRef {
    fn from_bits(v: u8) -> MsgRef {
        match v & 3 {
            0 => MsgRef::Req,
            1 => MsgRef::Rep,
            2 => MsgRef::Other,
            _ => MsgRef::Reserved,
        }
    }
    fn bits(self) -> u8 {
        match self {
            MsgRef::Req => 0,
            MsgRef::Rep => 1,
            MsgRef::Other => 2,
            MsgRef::Reserved => 3,
        }
    }
}

/// Transport service types a REQ asks for (IBA Table 106).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmTransport {
    /// Reliable connection.
    Rc,
    /// Unreliable connection.
    Uc,
    /// Reliable datagram (rnic refuses it).
    Rd,
    /// The reserved value 3 (or an extended type, see `extended_transport_type`).
    Other,
}

impl CmTransport {
    fn from_bits(v: u8) -> CmTransport {
        match v & 3 {
            0 => CmTransport::Rc,
            1 => CmTransport::Uc,
            2 => CmTransport::Rd,
            _ => CmTransport::Other,
        }
    }
    fn bits(self) -> u8 {
        match self {
            CmTransport::Rc => 0,
            CmTransport::Uc => 1,
            CmTransport::Rd => 2,
            CmTransport::Other => 3,
        }
    }
}

/// RTU, DREP (and the ID pair heading DREQ): two communication IDs and private data.
/// [`rtu`]'s view (which [`drep`] shares) reads and writes it ([`CmIds::parse`], [`CmIds::emit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmIds<const N: usize> {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; N],
}

/// A CM message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmMessage {
    /// REQ.
    Req(Box<CmReq>),
    /// MRA.
    Mra(Box<CmMra>),
    /// REJ.
    Rej(Box<CmRej>),
    /// REP.
    Rep(Box<CmRep>),
    /// RTU.
    Rtu(Box<CmIds<{ private_len::RTU }>>),
    /// DREQ.
    Dreq(Box<CmDreq>),
    /// DREP.
    Drep(Box<CmIds<{ private_len::DREP }>>),
    /// SIDR_REQ.
    SidrReq(Box<CmSidrReq>),
    /// SIDR_REP.
    SidrRep(Box<CmSidrRep>),
}

impl CmMessage {
    /// The attribute ID that carries this message.
    pub fn attr_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// The name IBA gives it.
    pub fn name(&self) -> &'static str {
        attr_name(self.attr_id())
    }

    /// The sender's communication ID (a SIDR_REQ's request ID; 0 in a SIDR_REP, which
    /// names only the requester's).
    pub fn local_comm_id(&self) -> u32 {
        match self {
            CmMessage::Req(m) => m.local_comm_id,
            CmMessage::Mra(m) => m.local_comm_id,
            CmMessage::Rej(m) => m.local_comm_id,
            CmMessage::Rep(m) => m.local_comm_id,
            CmMessage::Rtu(m) => m.local_comm_id,
            CmMessage::Dreq(m) => m.ids.local_comm_id,
            CmMessage::Drep(m) => m.local_comm_id,
            CmMessage::SidrReq(m) => m.request_id,
            CmMessage::SidrRep(_) => 0,
        }
    }

    /// The receiver's communication ID (0 in a REQ and a SIDR_REQ, which have none yet; a
    /// SIDR_REP's request ID).
    pub fn remote_comm_id(&self) -> u32 {
        match self {
            CmMessage::Req(_) => 0,
            CmMessage::Mra(m) => m.remote_comm_id,
            CmMessage::Rej(m) => m.remote_comm_id,
            CmMessage::Rep(m) => m.remote_comm_id,
            CmMessage::Rtu(m) => m.remote_comm_id,
            CmMessage::Dreq(m) => m.ids.remote_comm_id,
            CmMessage::Drep(m) => m.remote_comm_id,
            CmMessage::SidrReq(_) => 0,
            CmMessage::SidrRep(m) => m.request_id,
        }
    }

    /// Parses the CM data (the 232 bytes after the MAD header) of attribute `attr_id`.
    /// Parses the CM data (the 232 bytes after the MAD header) of attribute `attr_id`.
    /// `Ok(None)`: a CM attribute rnic does not implement (LAP, APR, ClassPortInfo), to be
    /// counted and dropped or answered by the caller.
    pub fn parse_data(attr_id: u16, data: &[u8]) -> crate::Result<Option<CmMessage>> {
        crate::error::need("CM message", data, DATA_LEN)?;
        Ok(Some(match attr_id {
            attr::REQ => CmMessage::Req(Box::new(CmReq::parse(&req::Packet::new_checked(data)?)?)),
            attr::MRA => CmMessage::Mra(Box::new(CmMra::parse(&mra::Packet::new_checked(data)?)?)),
            attr::REJ => CmMessage::Rej(Box::new(CmRej::parse(&rej::Packet::new_checked(data)?)?)),
            attr::REP => CmMessage::Rep(Box::new(CmRep::parse(&rep::Packet::new_checked(data)?)?)),
            attr::RTU => CmMessage::Rtu(Box::new(CmIds::parse(&rtu::Packet::new_checked(data)?)?)),
            attr::DREQ => CmMessage::Dreq(Box::new(CmDreq::parse(&dreq::Packet::new_checked(data)?)?)),
            attr::DREP => CmMessage::Drep(Box::new(CmIds::parse(&drep::Packet::new_checked(data)?)?)),
            attr::SIDR_REQ => CmMessage::SidrReq(Box::new(CmSidrReq::parse(&sidr_req::Packet::new_checked(data)?)?)),
            attr::SIDR_REP => CmMessage::SidrRep(Box::new(CmSidrRep::parse(&sidr_rep::Packet::new_checked(data)?)?)),
            _ => return Ok(None),
        }))
    }

    /// Writes the CM data into `data` (at least 232 bytes; what a message does not use is
    /// zeroed).
    pub fn emit_data(&self, data: &mut [u8]) -> crate::Result<()> {
        crate::error::need("CM message", data, DATA_LEN)?;
        let data = &mut data[..DATA_LEN];
        match self {
            CmMessage::Req(m) => m.emit(&mut req::Packet::new_unchecked(data)),
            CmMessage::Mra(m) => m.emit(&mut mra::Packet::new_unchecked(data)),
            CmMessage::Rej(m) => m.emit(&mut rej::Packet::new_unchecked(data)),
            CmMessage::Rep(m) => m.emit(&mut rep::Packet::new_unchecked(data)),
            CmMessage::Rtu(m) => m.emit(&mut rtu::Packet::new_unchecked(data)),
            CmMessage::Dreq(m) => m.emit(&mut dreq::Packet::new_unchecked(data)),
            CmMessage::Drep(m) => m.emit(&mut drep::Packet::new_unchecked(data)),
            CmMessage::SidrReq(m) => m.emit(&mut sidr_req::Packet::new_unchecked(data)),
            CmMessage::SidrRep(m) => m.emit(&mut sidr_rep::Packet::new_unchecked(data)),
        }
        Ok(())
    }

    /// A whole 256-byte MAD carrying this message with transaction ID `tid`.
    pub fn to_mad(&self, tid: u64) -> [u8; MAD_LEN] {
        let mut mad = [0u8; MAD_LEN];
        MadHeader::cm(self.attr_id(), tid).emit(&mut MadPacket::new_unchecked(&mut mad[..HEADER_LEN]));
        // A 232-byte slice: emit_data cannot fail.
        let _ = self.emit_data(&mut mad[HEADER_LEN..]);
        mad
    }

    /// Parses a whole CM MAD: the header (class CM, base version 1, class version 2) and
    /// the message. Another class or version is an error naming it; an unimplemented CM
    /// attribute is `Ok((header, None))`.
    pub fn from_mad(mad: &[u8]) -> crate::Result<(MadHeader, Option<CmMessage>)> {
        crate::error::need("MAD", mad, MAD_LEN)?;
        let h = MadHeader::parse(&MadPacket::new_checked(&mad[..HEADER_LEN])?)?;
        if h.mgmt_class != CLASS_CM {
            return Err(Error::BadValue { field: "MAD management class (not CM)", value: u64::from(h.mgmt_class) });
        }
        if h.base_version != crate::mad::BASE_VERSION {
            return Err(Error::BadValue { field: "MAD base version", value: u64::from(h.base_version) });
        }
        if h.class_version != crate::mad::CM_CLASS_VERSION {
            return Err(Error::BadValue { field: "CM class version", value: u64::from(h.class_version) });
        }
        Ok((h, CmMessage::parse_data(h.attr_id, &mad[HEADER_LEN..])?))
    }
}

/// The IBA name of a CM attribute.
pub fn attr_name(attr_id: u16) -> &'static str {
    match attr_id {
        attr::CLASS_PORT_INFO => "ClassPortInfo",
        attr::REQ => "REQ",
        attr::MRA => "MRA",
        attr::REJ => "REJ",
        attr::REP => "REP",
        attr::RTU => "RTU",
        attr::DREQ => "DREQ",
        attr::DREP => "DREP",
        attr::SIDR_REQ => "SIDR_REQ",
        attr::SIDR_REP => "SIDR_REP",
        attr::LAP => "LAP",
        attr::APR => "APR",
        _ => "CM attribute",
    }
}

/// rdma_cm's port spaces (the high 16 bits of a service ID's low 32, `enum rdma_ucm_port_space`).
pub mod port_space {
    /// TCP-like (RC), what rping and perftest's `-R` use.
    pub const TCP: u16 = 0x0106;
    /// UDP-like (UD): a destination is resolved by SIDR, not connected.
    pub const UDP: u16 = 0x0111;
    /// IB (any QP type).
    pub const IB: u16 = 0x013f;
}

/// The service ID rdma_cm listens on for `port` in `space` (`cma_get_service_id`:
/// `cpu_to_be64(((u64)ps << 16) + port)`).
pub fn service_id(space: u16, port: u16) -> u64 {
    (u64::from(space) << 16) + u64::from(port)
}

/// The Q_Key of rdma_cm's UDP port space (`RDMA_UDP_QKEY`): what a SIDR_REP for it carries
/// and what its UD QPs use.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// Length of rdma_cm's header at the start of a REQ's (and SIDR_REQ's) private data
/// (`struct cma_hdr`).
pub const CMA_HDR_LEN: usize = 36;

/// Offsets of `struct cma_hdr` (Linux's drivers/infiniband/core/cma.c).
mod cma_field {
    use core::ops::Range;

    pub const CMA_VERSION: usize = 0;
    /// The IP version in the high nibble.
    pub const IP_VERSION: usize = 1;
    pub const PORT: usize = 2;
    pub const SRC_ADDR: Range<usize> = 4..20;
    pub const DST_ADDR: Range<usize> = 20..36;
}

/// rdma_cm's addressing header (`struct cma_hdr`): version 0, the IP version in the high
/// nibble, the source port, then source and destination addresses (IPv4 in the last 4 of
/// 16 bytes). Linux's rdma_cm rejects a REQ on a TCP/UDP port space without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaHeader {
    /// Source port (the active side's).
    pub src_port: u16,
    /// Source address.
    pub src: std::net::IpAddr,
    /// Destination address (the passive side's).
    pub dst: std::net::IpAddr,
}

impl CmaHeader {
    /// Parses the header from private data; `None` if it is not a version-0 header of IP
    /// version 4 or 6 with both addresses of that version.
    pub fn parse(pd: &[u8]) -> Option<CmaHeader> {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
        if pd.len() < CMA_HDR_LEN || pd[cma_field::CMA_VERSION] != 0 {
            return None;
        }
        let addr = |at: core::ops::Range<usize>, v: u8| -> Option<IpAddr> {
            let b: [u8; 16] = to_array(&pd[at]);
            match v {
                4 => Some(IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15]))),
                6 => Some(IpAddr::V6(Ipv6Addr::from(b))),
                _ => None,
            }
        };
        let v = pd[cma_field::IP_VERSION] >> 4;
        Some(CmaHeader {
            src_port: u16_at(pd, cma_field::PORT),
            src: addr(cma_field::SRC_ADDR, v)?,
            dst: addr(cma_field::DST_ADDR, v)?,
        })
    }

    /// Writes the header into the first 36 bytes of `pd` (`None` if `pd` is shorter or the
    /// two addresses are of different versions).
    pub fn emit(&self, pd: &mut [u8]) -> Option<()> {
        use std::net::IpAddr;
        if pd.len() < CMA_HDR_LEN {
            return None;
        }
        let (v, s, d) = match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut sb = [0u8; 16];
                let mut db = [0u8; 16];
                sb[12..].copy_from_slice(&s.octets());
                db[12..].copy_from_slice(&d.octets());
                (4u8, sb, db)
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => (6u8, s.octets(), d.octets()),
            _ => return None,
        };
        pd[cma_field::CMA_VERSION] = 0;
        pd[cma_field::IP_VERSION] = v << 4;
        set_u16(pd, cma_field::PORT, self.src_port);
        pd[cma_field::SRC_ADDR].copy_from_slice(&s);
        pd[cma_field::DST_ADDR].copy_from_slice(&d);
        Some(())
    }
}
