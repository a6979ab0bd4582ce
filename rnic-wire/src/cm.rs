//! Communication Manager messages (IBA 12.6): the 232 bytes after a CM MAD's common
//! header ([`crate::mad`]), and the rdma_cm addressing carried in a REQ's private data.
//!
//! Offsets are the IBA tables' (REQ Table 106, MRA 107, REJ 108, REP 110, RTU 111,
//! DREQ 112, DREP 113, SIDR_REQ 119, SIDR_REP 120), counted from the start of the MAD
//! data; bit positions within a
//! byte count from its most significant bit, as IBA draws them. Reserved bits are written
//! as 0 and ignored on parse. Fields that only InfiniBand link layers use (LIDs, SL,
//! packet rate) are kept as received, so a REQ round-trips byte for byte.

use crate::mad::{MadHeader, Packet as MadPacket, CLASS_CM, DATA_LEN, HEADER_LEN, MAD_LEN};
use crate::Error;

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

// Bit access, MSB-first as IBA numbers bits.

/// `width` bits of byte `b[at]` starting `bit` bits below its most significant bit.
fn bits(b: &[u8], at: usize, bit: u32, width: u32) -> u8 {
    (b[at] >> (8 - bit - width)) & low_mask(width)
}

/// The `width` (1..=8) low bits set.
fn low_mask(width: u32) -> u8 {
    u8::MAX >> (8 - width)
}

fn set_bits(b: &mut [u8], at: usize, bit: u32, width: u32, v: u8) {
    let mask = low_mask(width) << (8 - bit - width);
    b[at] = (b[at] & !mask) | ((v << (8 - bit - width)) & mask);
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn u24_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(w)
}
fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
fn put24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}
fn arr<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

/// One path of a REQ (primary or alternate, IBA Table 106: 44 bytes each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CmPath {
    /// Local port LID (0 on RoCE).
    pub local_lid: u16,
    /// Remote port LID.
    pub remote_lid: u16,
    /// Local port GID (RoCEv2: the sender's address).
    pub local_gid: [u8; 16],
    /// Remote port GID.
    pub remote_gid: [u8; 16],
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Packet rate (6 bits).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Subnet local.
    pub subnet_local: bool,
    /// Local ACK timeout (5 bits): the QP's timeout attribute.
    pub local_ack_timeout: u8,
}

/// Bytes a path takes in a REQ.
const PATH_LEN: usize = 44;

impl CmPath {
    fn parse(b: &[u8], at: usize) -> CmPath {
        CmPath {
            local_lid: u16_at(b, at),
            remote_lid: u16_at(b, at + 2),
            local_gid: arr(b, at + 4),
            remote_gid: arr(b, at + 20),
            flow_label: u32_at(b, at + 36) >> 12,
            packet_rate: bits(b, at + 39, 2, 6),
            traffic_class: b[at + 40],
            hop_limit: b[at + 41],
            sl: bits(b, at + 42, 0, 4),
            subnet_local: bits(b, at + 42, 4, 1) != 0,
            local_ack_timeout: bits(b, at + 43, 0, 5),
        }
    }

    fn emit(&self, b: &mut [u8], at: usize) {
        put16(b, at, self.local_lid);
        put16(b, at + 2, self.remote_lid);
        b[at + 4..at + 20].copy_from_slice(&self.local_gid);
        b[at + 20..at + 36].copy_from_slice(&self.remote_gid);
        put32(b, at + 36, (self.flow_label & 0xf_ffff) << 12);
        set_bits(b, at + 39, 2, 6, self.packet_rate);
        b[at + 40] = self.traffic_class;
        b[at + 41] = self.hop_limit;
        b[at + 42] = 0;
        set_bits(b, at + 42, 0, 4, self.sl);
        set_bits(b, at + 42, 4, 1, u8::from(self.subnet_local));
        b[at + 43] = 0;
        set_bits(b, at + 43, 0, 5, self.local_ack_timeout);
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

/// A connection request (IBA 12.6.5, Table 106).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmReq {
    /// The active side's communication ID.
    pub local_comm_id: u32,
    /// Service ID (rdma_cm: port space << 16 | port).
    pub service_id: u64,
    /// The active side's CA GUID.
    pub local_ca_guid: u64,
    /// Q_Key (UD only; 0 otherwise).
    pub local_qkey: u32,
    /// The active side's QPN.
    pub local_qpn: u32,
    /// RDMA READ / atomic requests the active side can answer at once.
    pub responder_resources: u8,
    /// Local EE context (RD only).
    pub local_eecn: u32,
    /// RDMA READ / atomic requests the active side will have outstanding.
    pub initiator_depth: u8,
    /// Remote EE context (RD only).
    pub remote_eecn: u32,
    /// How long the passive side may take to answer: 4.096 us x 2^n (5 bits).
    pub remote_cm_response_timeout: u8,
    /// Transport service.
    pub transport: CmTransport,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// The active side's first send PSN (the passive side's expected PSN).
    pub starting_psn: u32,
    /// How long the active side takes to answer (5 bits).
    pub local_cm_response_timeout: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path MTU (ibv enum value: 1 = 256 ... 5 = 4096; 4 bits).
    pub path_mtu: u8,
    /// RDC exists.
    pub rdc_exists: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// How many times the active side resends a MAD (4 bits).
    pub max_cm_retries: u8,
    /// The active side's QP uses an SRQ.
    pub srq: bool,
    /// Extended transport type (3 bits).
    pub extended_transport_type: u8,
    /// The primary path.
    pub primary: CmPath,
    /// The alternate path (all zeros when there is none).
    pub alternate: CmPath,
    /// SAP supported.
    pub sap_supported: bool,
    /// Private data (rdma_cm: its 36-byte header first, [`CmaHeader`]).
    pub private_data: [u8; private_len::REQ],
}

impl CmReq {
    fn parse(b: &[u8]) -> CmReq {
        CmReq {
            local_comm_id: u32_at(b, 0),
            service_id: u64_at(b, 8),
            local_ca_guid: u64_at(b, 16),
            local_qkey: u32_at(b, 28),
            local_qpn: u24_at(b, 32),
            responder_resources: b[35],
            local_eecn: u24_at(b, 36),
            initiator_depth: b[39],
            remote_eecn: u24_at(b, 40),
            remote_cm_response_timeout: bits(b, 43, 0, 5),
            transport: CmTransport::from_bits(bits(b, 43, 5, 2)),
            end_to_end_flow_control: bits(b, 43, 7, 1) != 0,
            starting_psn: u24_at(b, 44),
            local_cm_response_timeout: bits(b, 47, 0, 5),
            retry_count: bits(b, 47, 5, 3),
            pkey: u16_at(b, 48),
            path_mtu: bits(b, 50, 0, 4),
            rdc_exists: bits(b, 50, 4, 1) != 0,
            rnr_retry_count: bits(b, 50, 5, 3),
            max_cm_retries: bits(b, 51, 0, 4),
            srq: bits(b, 51, 4, 1) != 0,
            extended_transport_type: bits(b, 51, 5, 3),
            primary: CmPath::parse(b, 52),
            alternate: CmPath::parse(b, 52 + PATH_LEN),
            sap_supported: bits(b, 139, 5, 1) != 0,
            private_data: arr(b, 140),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.local_comm_id);
        put64(b, 8, self.service_id);
        put64(b, 16, self.local_ca_guid);
        put32(b, 28, self.local_qkey);
        put24(b, 32, self.local_qpn);
        b[35] = self.responder_resources;
        put24(b, 36, self.local_eecn);
        b[39] = self.initiator_depth;
        put24(b, 40, self.remote_eecn);
        set_bits(b, 43, 0, 5, self.remote_cm_response_timeout);
        set_bits(b, 43, 5, 2, self.transport.bits());
        set_bits(b, 43, 7, 1, u8::from(self.end_to_end_flow_control));
        put24(b, 44, self.starting_psn);
        set_bits(b, 47, 0, 5, self.local_cm_response_timeout);
        set_bits(b, 47, 5, 3, self.retry_count);
        put16(b, 48, self.pkey);
        set_bits(b, 50, 0, 4, self.path_mtu);
        set_bits(b, 50, 4, 1, u8::from(self.rdc_exists));
        set_bits(b, 50, 5, 3, self.rnr_retry_count);
        set_bits(b, 51, 0, 4, self.max_cm_retries);
        set_bits(b, 51, 4, 1, u8::from(self.srq));
        set_bits(b, 51, 5, 3, self.extended_transport_type);
        self.primary.emit(b, 52);
        self.alternate.emit(b, 52 + PATH_LEN);
        set_bits(b, 139, 5, 1, u8::from(self.sap_supported));
        b[140..140 + private_len::REQ].copy_from_slice(&self.private_data);
    }
}

/// A reply to a REQ (IBA 12.6.8, Table 110).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmRep {
    /// The passive side's communication ID.
    pub local_comm_id: u32,
    /// The active side's communication ID (from the REQ).
    pub remote_comm_id: u32,
    /// Q_Key (UD).
    pub local_qkey: u32,
    /// The passive side's QPN.
    pub local_qpn: u32,
    /// Local EE context (RD).
    pub local_eecn: u32,
    /// The passive side's first send PSN.
    pub starting_psn: u32,
    /// Responder resources the passive side grants.
    pub responder_resources: u8,
    /// Initiator depth of the passive side.
    pub initiator_depth: u8,
    /// Target ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// RNR retry count the passive side asks for (3 bits).
    pub rnr_retry_count: u8,
    /// The passive side's QP uses an SRQ.
    pub srq: bool,
    /// The passive side's CA GUID.
    pub local_ca_guid: u64,
    /// Private data.
    pub private_data: [u8; private_len::REP],
}

impl CmRep {
    fn parse(b: &[u8]) -> CmRep {
        CmRep {
            local_comm_id: u32_at(b, 0),
            remote_comm_id: u32_at(b, 4),
            local_qkey: u32_at(b, 8),
            local_qpn: u24_at(b, 12),
            local_eecn: u24_at(b, 16),
            starting_psn: u24_at(b, 20),
            responder_resources: b[24],
            initiator_depth: b[25],
            target_ack_delay: bits(b, 26, 0, 5),
            failover_accepted: bits(b, 26, 5, 2),
            end_to_end_flow_control: bits(b, 26, 7, 1) != 0,
            rnr_retry_count: bits(b, 27, 0, 3),
            srq: bits(b, 27, 3, 1) != 0,
            local_ca_guid: u64_at(b, 28),
            private_data: arr(b, 36),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        put32(b, 8, self.local_qkey);
        put24(b, 12, self.local_qpn);
        put24(b, 16, self.local_eecn);
        put24(b, 20, self.starting_psn);
        b[24] = self.responder_resources;
        b[25] = self.initiator_depth;
        set_bits(b, 26, 0, 5, self.target_ack_delay);
        set_bits(b, 26, 5, 2, self.failover_accepted);
        set_bits(b, 26, 7, 1, u8::from(self.end_to_end_flow_control));
        set_bits(b, 27, 0, 3, self.rnr_retry_count);
        set_bits(b, 27, 3, 1, u8::from(self.srq));
        put64(b, 28, self.local_ca_guid);
        b[36..36 + private_len::REP].copy_from_slice(&self.private_data);
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
    /// Why ([`rej_reason`]).
    pub reason: u16,
    /// Additional rejection information.
    pub ari: [u8; 72],
    /// Private data.
    pub private_data: [u8; private_len::REJ],
}

impl CmRej {
    fn parse(b: &[u8]) -> CmRej {
        CmRej {
            local_comm_id: u32_at(b, 0),
            remote_comm_id: u32_at(b, 4),
            message_rejected: MsgRef::from_bits(bits(b, 8, 0, 2)),
            rejected_info_length: bits(b, 9, 0, 7),
            reason: u16_at(b, 10),
            ari: arr(b, 12),
            private_data: arr(b, 84),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        set_bits(b, 8, 0, 2, self.message_rejected.bits());
        set_bits(b, 9, 0, 7, self.rejected_info_length);
        put16(b, 10, self.reason);
        b[12..84].copy_from_slice(&self.ari);
        b[84..84 + private_len::REJ].copy_from_slice(&self.private_data);
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
    fn parse(b: &[u8]) -> CmMra {
        CmMra {
            local_comm_id: u32_at(b, 0),
            remote_comm_id: u32_at(b, 4),
            message_mraed: MsgRef::from_bits(bits(b, 8, 0, 2)),
            service_timeout: bits(b, 9, 0, 5),
            private_data: arr(b, 10),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        set_bits(b, 8, 0, 2, self.message_mraed.bits());
        set_bits(b, 9, 0, 5, self.service_timeout);
        b[10..10 + private_len::MRA].copy_from_slice(&self.private_data);
    }
}

/// RTU, DREP (and the ID pair heading DREQ): two communication IDs and private data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmIds<const N: usize> {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; N],
}

impl<const N: usize> CmIds<N> {
    fn parse(b: &[u8], data_at: usize) -> CmIds<N> {
        CmIds { local_comm_id: u32_at(b, 0), remote_comm_id: u32_at(b, 4), private_data: arr(b, data_at) }
    }
    fn emit(&self, b: &mut [u8], data_at: usize) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        b[data_at..data_at + N].copy_from_slice(&self.private_data);
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

/// A service ID resolution request (IBA 12.11, Table 119): the sender asks which UD QP
/// (and Q_Key) serves `service_id` at the receiver. rdma_cm's UDP port space resolves a
/// destination with it.
///
/// ```text
///  0..4     Request ID (the sender's; the SIDR_REP echoes it)
///  4..6     P_Key
///  6..8     reserved
///  8..16    Service ID
/// 16..232   private data (216; rdma_cm's 36-byte header first)
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmSidrReq {
    /// The requester's ID for this request.
    pub request_id: u32,
    /// The partition the requester's UD QP is in.
    pub pkey: u16,
    /// The service asked for (rdma_cm: port space 0x0111 << 16 | port).
    pub service_id: u64,
    /// Private data (rdma_cm: its header first, [`CmaHeader`]).
    pub private_data: [u8; private_len::SIDR_REQ],
}

impl CmSidrReq {
    fn parse(b: &[u8]) -> CmSidrReq {
        CmSidrReq { request_id: u32_at(b, 0), pkey: u16_at(b, 4), service_id: u64_at(b, 8), private_data: arr(b, 16) }
    }

    fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.request_id);
        put16(b, 4, self.pkey);
        put64(b, 8, self.service_id);
        b[16..16 + private_len::SIDR_REQ].copy_from_slice(&self.private_data);
    }
}

/// A service ID resolution reply (IBA 12.11, Table 120).
///
/// ```text
///  0..4     Request ID (the SIDR_REQ's)
///  4        Status
///  5        Additional information length
///  6..8     Vendor ID, high 16 bits (IBA 1.4's ECE; 0 otherwise)
///  8..11    QPN (24)
/// 11        Vendor ID, low 8 bits
/// 12..20    Service ID
/// 20..24    Q_Key
/// 24..96    additional information (72: ClassPortInfo on redirect)
/// 96..232   private data (136)
/// ```
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
    fn parse(b: &[u8]) -> CmSidrRep {
        CmSidrRep {
            request_id: u32_at(b, 0),
            status: SidrStatus::from(b[4]),
            info_len: b[5],
            vendor_id: u32::from(u16_at(b, 6)) << 8 | u32::from(b[11]),
            qpn: u24_at(b, 8),
            service_id: u64_at(b, 12),
            qkey: u32_at(b, 20),
            info: arr(b, 24),
            private_data: arr(b, 96),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.request_id);
        b[4] = u8::from(self.status);
        b[5] = self.info_len;
        let [_, vh, vm, vl] = self.vendor_id.to_be_bytes();
        b[6..8].copy_from_slice(&[vh, vm]);
        put24(b, 8, self.qpn);
        b[11] = vl;
        put64(b, 12, self.service_id);
        put32(b, 20, self.qkey);
        b[24..96].copy_from_slice(&self.info);
        b[96..96 + private_len::SIDR_REP].copy_from_slice(&self.private_data);
    }
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
    /// `Ok(None)`: a CM attribute rnic does not implement (LAP, APR, ClassPortInfo), to be
    /// counted and dropped or answered by the caller.
    pub fn parse_data(attr_id: u16, data: &[u8]) -> crate::Result<Option<CmMessage>> {
        crate::error::need("CM message", data, DATA_LEN)?;
        Ok(Some(match attr_id {
            attr::REQ => CmMessage::Req(Box::new(CmReq::parse(data))),
            attr::MRA => CmMessage::Mra(Box::new(CmMra::parse(data))),
            attr::REJ => CmMessage::Rej(Box::new(CmRej::parse(data))),
            attr::REP => CmMessage::Rep(Box::new(CmRep::parse(data))),
            attr::RTU => CmMessage::Rtu(Box::new(CmIds::parse(data, 8))),
            attr::DREQ => {
                CmMessage::Dreq(Box::new(CmDreq { ids: CmIds::parse(data, 12), remote_qpn: u24_at(data, 8) }))
            }
            attr::DREP => CmMessage::Drep(Box::new(CmIds::parse(data, 8))),
            attr::SIDR_REQ => CmMessage::SidrReq(Box::new(CmSidrReq::parse(data))),
            attr::SIDR_REP => CmMessage::SidrRep(Box::new(CmSidrRep::parse(data))),
            _ => return Ok(None),
        }))
    }

    /// Writes the CM data into `data` (at least 232 bytes; what a message does not use is
    /// zeroed).
    pub fn emit_data(&self, data: &mut [u8]) -> crate::Result<()> {
        crate::error::need("CM message", data, DATA_LEN)?;
        let data = &mut data[..DATA_LEN];
        data.fill(0);
        match self {
            CmMessage::Req(m) => m.emit(data),
            CmMessage::Mra(m) => m.emit(data),
            CmMessage::Rej(m) => m.emit(data),
            CmMessage::Rep(m) => m.emit(data),
            CmMessage::Rtu(m) => m.emit(data, 8),
            CmMessage::Dreq(m) => {
                m.ids.emit(data, 12);
                put24(data, 8, m.remote_qpn);
            }
            CmMessage::Drep(m) => m.emit(data, 8),
            CmMessage::SidrReq(m) => m.emit(data),
            CmMessage::SidrRep(m) => m.emit(data),
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
        if pd.len() < CMA_HDR_LEN || pd[0] != 0 {
            return None;
        }
        let addr = |at: usize, v: u8| -> Option<IpAddr> {
            let b: [u8; 16] = arr(pd, at);
            match v {
                4 => Some(IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15]))),
                6 => Some(IpAddr::V6(Ipv6Addr::from(b))),
                _ => None,
            }
        };
        let v = pd[1] >> 4;
        Some(CmaHeader { src_port: u16_at(pd, 2), src: addr(4, v)?, dst: addr(20, v)? })
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
        pd[0] = 0;
        pd[1] = v << 4;
        put16(pd, 2, self.src_port);
        pd[4..20].copy_from_slice(&s);
        pd[20..36].copy_from_slice(&d);
        Some(())
    }
}
