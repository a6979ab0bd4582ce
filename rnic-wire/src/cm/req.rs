//! REQ: a connection request (IBA 12.6.5, Table 106), and the two paths it carries.
//!
//! ```text
//!   0..4     Local Communication ID
//!   4..8     reserved (IBA 1.4's ECE puts a Vendor ID in 5..8; rnic writes 0 and ignores it)
//!   8..16    Service ID
//!  16..24    Local CA GUID
//!  24..28    reserved
//!  28..32    Local Q_Key
//!  32..35    Local QPN (24)                35   Responder Resources
//!  36..39    Local EECN (24)               39   Initiator Depth
//!  40..43    Remote EECN (24)
//!  43        Remote CM Response Timeout (5) Transport Service Type (2) End-to-End Flow Control (1)
//!  44..47    Starting PSN (24)
//!  47        Local CM Response Timeout (5) Retry Count (3)
//!  48..50    Partition Key
//!  50        Path Packet Payload MTU (4) RDC Exists (1) RNR Retry Count (3)
//!  51        Max CM Retries (4) SRQ (1) Extended Transport Type (3)
//!  52..96    primary path ([`Path`])
//!  96..140   alternate path ([`Path`]); its last byte also holds SAP Supported (139, bit 5)
//! 140..232   private data (92)
//! ```

use super::{private_len, CmTransport};
use crate::field::{
    bits, fixed_view, flag, set_bits, set_flag, set_u16, set_u24, set_u32, set_u64, to_array, u16_at, u24_at, u32_at,
    u64_at, Bits,
};
use crate::mad::DATA_LEN;

/// Bytes a path takes in a REQ (IBA Table 106: 44 each, primary then alternate).
pub const PATH_LEN: usize = 44;

/// Offsets of IBA Table 106, from the start of the MAD data.
mod field {
    use super::{Bits, PATH_LEN};
    use core::ops::Range;

    pub const LOCAL_COMM_ID: usize = 0;
    pub const SERVICE_ID: usize = 8;
    pub const LOCAL_CA_GUID: usize = 16;
    pub const LOCAL_QKEY: usize = 28;
    pub const LOCAL_QPN: usize = 32;
    pub const RESPONDER_RESOURCES: usize = 35;
    pub const LOCAL_EECN: usize = 36;
    pub const INITIATOR_DEPTH: usize = 39;
    pub const REMOTE_EECN: usize = 40;
    pub const REMOTE_CM_RESPONSE_TIMEOUT: Bits = Bits::new(43, 0, 5);
    pub const TRANSPORT: Bits = Bits::new(43, 5, 2);
    pub const END_TO_END_FLOW_CONTROL: Bits = Bits::new(43, 7, 1);
    pub const STARTING_PSN: usize = 44;
    pub const LOCAL_CM_RESPONSE_TIMEOUT: Bits = Bits::new(47, 0, 5);
    pub const RETRY_COUNT: Bits = Bits::new(47, 5, 3);
    pub const PKEY: usize = 48;
    pub const PATH_MTU: Bits = Bits::new(50, 0, 4);
    pub const RDC_EXISTS: Bits = Bits::new(50, 4, 1);
    pub const RNR_RETRY_COUNT: Bits = Bits::new(50, 5, 3);
    pub const MAX_CM_RETRIES: Bits = Bits::new(51, 0, 4);
    pub const SRQ: Bits = Bits::new(51, 4, 1);
    pub const EXTENDED_TRANSPORT_TYPE: Bits = Bits::new(51, 5, 3);
    pub const PRIMARY_PATH: Range<usize> = 52..52 + PATH_LEN;
    pub const ALTERNATE_PATH: Range<usize> = PRIMARY_PATH.end..PRIMARY_PATH.end + PATH_LEN;
    pub const SAP_SUPPORTED: Bits = Bits::new(139, 5, 1);
    pub const PRIVATE_DATA: Range<usize> = ALTERNATE_PATH.end..ALTERNATE_PATH.end + super::private_len::REQ;
}

/// Offsets of one path within a REQ (IBA Table 106, counted from the path's first byte:
/// the primary path's local LID is at 52, the alternate's at 96).
mod path_field {
    use super::Bits;
    use core::ops::Range;

    pub const LOCAL_LID: usize = 0;
    pub const REMOTE_LID: usize = 2;
    pub const LOCAL_GID: Range<usize> = 4..20;
    pub const REMOTE_GID: Range<usize> = 20..36;
    /// The flow label's 20 bits lead this 32-bit word; then 4 reserved bits, 2 reserved
    /// bits and the packet rate.
    pub const FLOW_LABEL: usize = 36;
    pub const PACKET_RATE: Bits = Bits::new(39, 2, 6);
    pub const TRAFFIC_CLASS: usize = 40;
    pub const HOP_LIMIT: usize = 41;
    pub const SL: Bits = Bits::new(42, 0, 4);
    pub const SUBNET_LOCAL: Bits = Bits::new(42, 4, 1);
    pub const LOCAL_ACK_TIMEOUT: Bits = Bits::new(43, 0, 5);
}

const _: () = assert!(field::PRIVATE_DATA.end == DATA_LEN, "Table 106 fills the MAD data");

fixed_view!(
    /// A view of a REQ: the 232 bytes of MAD data after the common header.
    Packet,
    DATA_LEN,
    "CM REQ"
);

impl<T: AsRef<[u8]>> Packet<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Local Communication ID: the active side's.
    pub fn local_comm_id(&self) -> u32 {
        u32_at(self.b(), field::LOCAL_COMM_ID)
    }
    /// Service ID.
    pub fn service_id(&self) -> u64 {
        u64_at(self.b(), field::SERVICE_ID)
    }
    /// Local CA GUID.
    pub fn local_ca_guid(&self) -> u64 {
        u64_at(self.b(), field::LOCAL_CA_GUID)
    }
    /// Local Q_Key.
    pub fn local_qkey(&self) -> u32 {
        u32_at(self.b(), field::LOCAL_QKEY)
    }
    /// Local QPN (24 bits).
    pub fn local_qpn(&self) -> u32 {
        u24_at(self.b(), field::LOCAL_QPN)
    }
    /// Responder Resources.
    pub fn responder_resources(&self) -> u8 {
        self.b()[field::RESPONDER_RESOURCES]
    }
    /// Local EECN (24 bits).
    pub fn local_eecn(&self) -> u32 {
        u24_at(self.b(), field::LOCAL_EECN)
    }
    /// Initiator Depth.
    pub fn initiator_depth(&self) -> u8 {
        self.b()[field::INITIATOR_DEPTH]
    }
    /// Remote EECN (24 bits).
    pub fn remote_eecn(&self) -> u32 {
        u24_at(self.b(), field::REMOTE_EECN)
    }
    /// Remote CM Response Timeout (5 bits).
    pub fn remote_cm_response_timeout(&self) -> u8 {
        bits(self.b(), field::REMOTE_CM_RESPONSE_TIMEOUT)
    }
    /// Transport Service Type.
    pub fn transport(&self) -> CmTransport {
        CmTransport::from_bits(bits(self.b(), field::TRANSPORT))
    }
    /// End-to-End Flow Control.
    pub fn end_to_end_flow_control(&self) -> bool {
        flag(self.b(), field::END_TO_END_FLOW_CONTROL)
    }
    /// Starting PSN (24 bits).
    pub fn starting_psn(&self) -> u32 {
        u24_at(self.b(), field::STARTING_PSN)
    }
    /// Local CM Response Timeout (5 bits).
    pub fn local_cm_response_timeout(&self) -> u8 {
        bits(self.b(), field::LOCAL_CM_RESPONSE_TIMEOUT)
    }
    /// Retry Count (3 bits).
    pub fn retry_count(&self) -> u8 {
        bits(self.b(), field::RETRY_COUNT)
    }
    /// Partition Key.
    pub fn pkey(&self) -> u16 {
        u16_at(self.b(), field::PKEY)
    }
    /// Path Packet Payload MTU (4 bits).
    pub fn path_mtu(&self) -> u8 {
        bits(self.b(), field::PATH_MTU)
    }
    /// RDC Exists.
    pub fn rdc_exists(&self) -> bool {
        flag(self.b(), field::RDC_EXISTS)
    }
    /// RNR Retry Count (3 bits).
    pub fn rnr_retry_count(&self) -> u8 {
        bits(self.b(), field::RNR_RETRY_COUNT)
    }
    /// Max CM Retries (4 bits).
    pub fn max_cm_retries(&self) -> u8 {
        bits(self.b(), field::MAX_CM_RETRIES)
    }
    /// SRQ.
    pub fn srq(&self) -> bool {
        flag(self.b(), field::SRQ)
    }
    /// Extended Transport Type (3 bits).
    pub fn extended_transport_type(&self) -> u8 {
        bits(self.b(), field::EXTENDED_TRANSPORT_TYPE)
    }
    /// The primary path.
    pub fn primary_path(&self) -> Path<&[u8]> {
        Path::new_unchecked(&self.b()[field::PRIMARY_PATH])
    }
    /// The alternate path.
    pub fn alternate_path(&self) -> Path<&[u8]> {
        Path::new_unchecked(&self.b()[field::ALTERNATE_PATH])
    }
    /// SAP Supported.
    pub fn sap_supported(&self) -> bool {
        flag(self.b(), field::SAP_SUPPORTED)
    }
    /// Private data (92 bytes).
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
    /// Sets the Service ID.
    pub fn set_service_id(&mut self, v: u64) {
        set_u64(self.bm(), field::SERVICE_ID, v);
    }
    /// Sets the Local CA GUID.
    pub fn set_local_ca_guid(&mut self, v: u64) {
        set_u64(self.bm(), field::LOCAL_CA_GUID, v);
    }
    /// Sets the Local Q_Key.
    pub fn set_local_qkey(&mut self, v: u32) {
        set_u32(self.bm(), field::LOCAL_QKEY, v);
    }
    /// Sets the Local QPN (low 24 bits).
    pub fn set_local_qpn(&mut self, v: u32) {
        set_u24(self.bm(), field::LOCAL_QPN, v);
    }
    /// Sets Responder Resources.
    pub fn set_responder_resources(&mut self, v: u8) {
        self.bm()[field::RESPONDER_RESOURCES] = v;
    }
    /// Sets the Local EECN (low 24 bits).
    pub fn set_local_eecn(&mut self, v: u32) {
        set_u24(self.bm(), field::LOCAL_EECN, v);
    }
    /// Sets Initiator Depth.
    pub fn set_initiator_depth(&mut self, v: u8) {
        self.bm()[field::INITIATOR_DEPTH] = v;
    }
    /// Sets the Remote EECN (low 24 bits).
    pub fn set_remote_eecn(&mut self, v: u32) {
        set_u24(self.bm(), field::REMOTE_EECN, v);
    }
    /// Sets the Remote CM Response Timeout (low 5 bits).
    pub fn set_remote_cm_response_timeout(&mut self, v: u8) {
        set_bits(self.bm(), field::REMOTE_CM_RESPONSE_TIMEOUT, v);
    }
    /// Sets the Transport Service Type.
    pub fn set_transport(&mut self, v: CmTransport) {
        set_bits(self.bm(), field::TRANSPORT, v.bits());
    }
    /// Sets End-to-End Flow Control.
    pub fn set_end_to_end_flow_control(&mut self, v: bool) {
        set_flag(self.bm(), field::END_TO_END_FLOW_CONTROL, v);
    }
    /// Sets the Starting PSN (low 24 bits).
    pub fn set_starting_psn(&mut self, v: u32) {
        set_u24(self.bm(), field::STARTING_PSN, v);
    }
    /// Sets the Local CM Response Timeout (low 5 bits).
    pub fn set_local_cm_response_timeout(&mut self, v: u8) {
        set_bits(self.bm(), field::LOCAL_CM_RESPONSE_TIMEOUT, v);
    }
    /// Sets the Retry Count (low 3 bits).
    pub fn set_retry_count(&mut self, v: u8) {
        set_bits(self.bm(), field::RETRY_COUNT, v);
    }
    /// Sets the Partition Key.
    pub fn set_pkey(&mut self, v: u16) {
        set_u16(self.bm(), field::PKEY, v);
    }
    /// Sets the Path Packet Payload MTU (low 4 bits).
    pub fn set_path_mtu(&mut self, v: u8) {
        set_bits(self.bm(), field::PATH_MTU, v);
    }
    /// Sets RDC Exists.
    pub fn set_rdc_exists(&mut self, v: bool) {
        set_flag(self.bm(), field::RDC_EXISTS, v);
    }
    /// Sets the RNR Retry Count (low 3 bits).
    pub fn set_rnr_retry_count(&mut self, v: u8) {
        set_bits(self.bm(), field::RNR_RETRY_COUNT, v);
    }
    /// Sets Max CM Retries (low 4 bits).
    pub fn set_max_cm_retries(&mut self, v: u8) {
        set_bits(self.bm(), field::MAX_CM_RETRIES, v);
    }
    /// Sets SRQ.
    pub fn set_srq(&mut self, v: bool) {
        set_flag(self.bm(), field::SRQ, v);
    }
    /// Sets the Extended Transport Type (low 3 bits).
    pub fn set_extended_transport_type(&mut self, v: u8) {
        set_bits(self.bm(), field::EXTENDED_TRANSPORT_TYPE, v);
    }
    /// The primary path, to write.
    pub fn primary_path_mut(&mut self) -> Path<&mut [u8]> {
        Path::new_unchecked(&mut self.bm()[field::PRIMARY_PATH])
    }
    /// The alternate path, to write.
    pub fn alternate_path_mut(&mut self) -> Path<&mut [u8]> {
        Path::new_unchecked(&mut self.bm()[field::ALTERNATE_PATH])
    }
    /// Sets SAP Supported.
    pub fn set_sap_supported(&mut self, v: bool) {
        set_flag(self.bm(), field::SAP_SUPPORTED, v);
    }
    /// Sets the private data.
    pub fn set_private_data(&mut self, v: &[u8; private_len::REQ]) {
        self.bm()[field::PRIVATE_DATA].copy_from_slice(v);
    }
}

fixed_view!(
    /// A view of one of a REQ's two paths (44 bytes; [`Packet::primary_path`]).
    Path,
    PATH_LEN,
    "CM REQ path"
);

impl<T: AsRef<[u8]>> Path<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Local Port LID.
    pub fn local_lid(&self) -> u16 {
        u16_at(self.b(), path_field::LOCAL_LID)
    }
    /// Remote Port LID.
    pub fn remote_lid(&self) -> u16 {
        u16_at(self.b(), path_field::REMOTE_LID)
    }
    /// Local Port GID.
    pub fn local_gid(&self) -> [u8; 16] {
        to_array(&self.b()[path_field::LOCAL_GID])
    }
    /// Remote Port GID.
    pub fn remote_gid(&self) -> [u8; 16] {
        to_array(&self.b()[path_field::REMOTE_GID])
    }
    /// Flow Label (20 bits).
    pub fn flow_label(&self) -> u32 {
        u32_at(self.b(), path_field::FLOW_LABEL) >> 12
    }
    /// Packet Rate (6 bits).
    pub fn packet_rate(&self) -> u8 {
        bits(self.b(), path_field::PACKET_RATE)
    }
    /// Traffic Class.
    pub fn traffic_class(&self) -> u8 {
        self.b()[path_field::TRAFFIC_CLASS]
    }
    /// Hop Limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[path_field::HOP_LIMIT]
    }
    /// SL (4 bits).
    pub fn sl(&self) -> u8 {
        bits(self.b(), path_field::SL)
    }
    /// Subnet Local.
    pub fn subnet_local(&self) -> bool {
        flag(self.b(), path_field::SUBNET_LOCAL)
    }
    /// Local ACK Timeout (5 bits).
    pub fn local_ack_timeout(&self) -> u8 {
        bits(self.b(), path_field::LOCAL_ACK_TIMEOUT)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Path<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the Local Port LID.
    pub fn set_local_lid(&mut self, v: u16) {
        set_u16(self.bm(), path_field::LOCAL_LID, v);
    }
    /// Sets the Remote Port LID.
    pub fn set_remote_lid(&mut self, v: u16) {
        set_u16(self.bm(), path_field::REMOTE_LID, v);
    }
    /// Sets the Local Port GID.
    pub fn set_local_gid(&mut self, v: &[u8; 16]) {
        self.bm()[path_field::LOCAL_GID].copy_from_slice(v);
    }
    /// Sets the Remote Port GID.
    pub fn set_remote_gid(&mut self, v: &[u8; 16]) {
        self.bm()[path_field::REMOTE_GID].copy_from_slice(v);
    }
    /// Sets the Flow Label (low 20 bits); the rest of its word is kept.
    pub fn set_flow_label(&mut self, v: u32) {
        let rest = u32_at(self.b(), path_field::FLOW_LABEL) & 0xfff;
        set_u32(self.bm(), path_field::FLOW_LABEL, (v & 0xf_ffff) << 12 | rest);
    }
    /// Sets the Packet Rate (low 6 bits).
    pub fn set_packet_rate(&mut self, v: u8) {
        set_bits(self.bm(), path_field::PACKET_RATE, v);
    }
    /// Sets the Traffic Class.
    pub fn set_traffic_class(&mut self, v: u8) {
        self.bm()[path_field::TRAFFIC_CLASS] = v;
    }
    /// Sets the Hop Limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.bm()[path_field::HOP_LIMIT] = v;
    }
    /// Sets the SL (low 4 bits).
    pub fn set_sl(&mut self, v: u8) {
        set_bits(self.bm(), path_field::SL, v);
    }
    /// Sets Subnet Local.
    pub fn set_subnet_local(&mut self, v: bool) {
        set_flag(self.bm(), path_field::SUBNET_LOCAL, v);
    }
    /// Sets the Local ACK Timeout (low 5 bits).
    pub fn set_local_ack_timeout(&mut self, v: u8) {
        set_bits(self.bm(), path_field::LOCAL_ACK_TIMEOUT, v);
    }
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

impl CmPath {
    /// Reads a path. Reserved bits are ignored.
    pub fn parse<T: AsRef<[u8]>>(p: &Path<T>) -> crate::Result<CmPath> {
        p.check_len()?;
        Ok(CmPath {
            local_lid: p.local_lid(),
            remote_lid: p.remote_lid(),
            local_gid: p.local_gid(),
            remote_gid: p.remote_gid(),
            flow_label: p.flow_label(),
            packet_rate: p.packet_rate(),
            traffic_class: p.traffic_class(),
            hop_limit: p.hop_limit(),
            sl: p.sl(),
            subnet_local: p.subnet_local(),
            local_ack_timeout: p.local_ack_timeout(),
        })
    }

    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        PATH_LEN
    }

    /// Writes every field of the path; reserved bits keep what the buffer held (a REQ's
    /// [`CmReq::emit`] has zeroed them, and the alternate path's last byte also holds the
    /// REQ's SAP Supported bit).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Path<T>) {
        p.set_local_lid(self.local_lid);
        p.set_remote_lid(self.remote_lid);
        p.set_local_gid(&self.local_gid);
        p.set_remote_gid(&self.remote_gid);
        p.set_flow_label(self.flow_label);
        p.set_packet_rate(self.packet_rate);
        p.set_traffic_class(self.traffic_class);
        p.set_hop_limit(self.hop_limit);
        p.set_sl(self.sl);
        p.set_subnet_local(self.subnet_local);
        p.set_local_ack_timeout(self.local_ack_timeout);
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
    /// Private data (rdma_cm: its 36-byte header first, [`super::CmaHeader`]).
    pub private_data: [u8; private_len::REQ],
}

impl CmReq {
    /// Reads a REQ. Every value is accepted; reserved bits are ignored.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> crate::Result<CmReq> {
        p.check_len()?;
        Ok(CmReq {
            local_comm_id: p.local_comm_id(),
            service_id: p.service_id(),
            local_ca_guid: p.local_ca_guid(),
            local_qkey: p.local_qkey(),
            local_qpn: p.local_qpn(),
            responder_resources: p.responder_resources(),
            local_eecn: p.local_eecn(),
            initiator_depth: p.initiator_depth(),
            remote_eecn: p.remote_eecn(),
            remote_cm_response_timeout: p.remote_cm_response_timeout(),
            transport: p.transport(),
            end_to_end_flow_control: p.end_to_end_flow_control(),
            starting_psn: p.starting_psn(),
            local_cm_response_timeout: p.local_cm_response_timeout(),
            retry_count: p.retry_count(),
            pkey: p.pkey(),
            path_mtu: p.path_mtu(),
            rdc_exists: p.rdc_exists(),
            rnr_retry_count: p.rnr_retry_count(),
            max_cm_retries: p.max_cm_retries(),
            srq: p.srq(),
            extended_transport_type: p.extended_transport_type(),
            primary: CmPath::parse(&p.primary_path())?,
            alternate: CmPath::parse(&p.alternate_path())?,
            sap_supported: p.sap_supported(),
            private_data: to_array(p.private_data()),
        })
    }

    /// Bytes needed to emit (the whole MAD data).
    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }

    /// Writes the REQ: every field, and 0 in every reserved bit.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.bm()[..DATA_LEN].fill(0);
        p.set_local_comm_id(self.local_comm_id);
        p.set_service_id(self.service_id);
        p.set_local_ca_guid(self.local_ca_guid);
        p.set_local_qkey(self.local_qkey);
        p.set_local_qpn(self.local_qpn);
        p.set_responder_resources(self.responder_resources);
        p.set_local_eecn(self.local_eecn);
        p.set_initiator_depth(self.initiator_depth);
        p.set_remote_eecn(self.remote_eecn);
        p.set_remote_cm_response_timeout(self.remote_cm_response_timeout);
        p.set_transport(self.transport);
        p.set_end_to_end_flow_control(self.end_to_end_flow_control);
        p.set_starting_psn(self.starting_psn);
        p.set_local_cm_response_timeout(self.local_cm_response_timeout);
        p.set_retry_count(self.retry_count);
        p.set_pkey(self.pkey);
        p.set_path_mtu(self.path_mtu);
        p.set_rdc_exists(self.rdc_exists);
        p.set_rnr_retry_count(self.rnr_retry_count);
        p.set_max_cm_retries(self.max_cm_retries);
        p.set_srq(self.srq);
        p.set_extended_transport_type(self.extended_transport_type);
        self.primary.emit(&mut p.primary_path_mut());
        self.alternate.emit(&mut p.alternate_path_mut());
        p.set_sap_supported(self.sap_supported);
        p.set_private_data(&self.private_data);
    }
}
