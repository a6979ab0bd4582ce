//! REP: the passive side's reply to a REQ (IBA 12.6.8, Table 110).
//!
//! ```text
//!  0..4     Local Communication ID (the passive side's)
//!  4..8     Remote Communication ID (the REQ's)
//!  8..12    Local Q_Key
//! 12..15    Local QPN (24)            15   reserved
//! 16..19    Local EECN (24)           19   reserved
//! 20..23    Starting PSN (24)         23   reserved
//!           (IBA 1.4's ECE puts a Vendor ID in bytes 15, 19 and 23; rnic writes 0 and ignores it)
//! 24        Responder Resources
//! 25        Initiator Depth
//! 26        Target ACK Delay (5) Failover Accepted (2) End-to-End Flow Control (1)
//! 27        RNR Retry Count (3) SRQ (1) reserved (4)
//! 28..36    Local CA GUID
//! 36..232   private data (196)
//! ```

use super::private_len;
use crate::field::{
    bits, fixed_view, flag, set_bits, set_flag, set_u24, set_u32, set_u64, to_array, u24_at, u32_at, u64_at, Bits,
};
use crate::mad::DATA_LEN;

/// Offsets of IBA Table 110, from the start of the MAD data.
mod field {
    use super::Bits;
    use core::ops::Range;

    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    pub const LOCAL_QKEY: usize = 8;
    pub const LOCAL_QPN: usize = 12;
    pub const LOCAL_EECN: usize = 16;
    pub const STARTING_PSN: usize = 20;
    pub const RESPONDER_RESOURCES: usize = 24;
    pub const INITIATOR_DEPTH: usize = 25;
    pub const TARGET_ACK_DELAY: Bits = Bits::new(26, 0, 5);
    pub const FAILOVER_ACCEPTED: Bits = Bits::new(26, 5, 2);
    pub const END_TO_END_FLOW_CONTROL: Bits = Bits::new(26, 7, 1);
    pub const RNR_RETRY_COUNT: Bits = Bits::new(27, 0, 3);
    pub const SRQ: Bits = Bits::new(27, 3, 1);
    pub const LOCAL_CA_GUID: usize = 28;
    pub const PRIVATE_DATA: Range<usize> = 36..36 + super::private_len::REP;
}

const _: () = assert!(field::PRIVATE_DATA.end == DATA_LEN, "Table 110 fills the MAD data");

fixed_view!(
    /// A view of a REP: the 232 bytes of MAD data after the common header.
    Packet,
    DATA_LEN,
    "CM REP"
);

impl<T: AsRef<[u8]>> Packet<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Local Communication ID: the passive side's.
    pub fn local_comm_id(&self) -> u32 {
        u32_at(self.b(), field::LOCAL_COMM_ID)
    }
    /// Remote Communication ID: the active side's.
    pub fn remote_comm_id(&self) -> u32 {
        u32_at(self.b(), field::REMOTE_COMM_ID)
    }
    /// Local Q_Key.
    pub fn local_qkey(&self) -> u32 {
        u32_at(self.b(), field::LOCAL_QKEY)
    }
    /// Local QPN (24 bits).
    pub fn local_qpn(&self) -> u32 {
        u24_at(self.b(), field::LOCAL_QPN)
    }
    /// Local EECN (24 bits).
    pub fn local_eecn(&self) -> u32 {
        u24_at(self.b(), field::LOCAL_EECN)
    }
    /// Starting PSN (24 bits).
    pub fn starting_psn(&self) -> u32 {
        u24_at(self.b(), field::STARTING_PSN)
    }
    /// Responder Resources.
    pub fn responder_resources(&self) -> u8 {
        self.b()[field::RESPONDER_RESOURCES]
    }
    /// Initiator Depth.
    pub fn initiator_depth(&self) -> u8 {
        self.b()[field::INITIATOR_DEPTH]
    }
    /// Target ACK Delay (5 bits).
    pub fn target_ack_delay(&self) -> u8 {
        bits(self.b(), field::TARGET_ACK_DELAY)
    }
    /// Failover Accepted (2 bits).
    pub fn failover_accepted(&self) -> u8 {
        bits(self.b(), field::FAILOVER_ACCEPTED)
    }
    /// End-to-End Flow Control.
    pub fn end_to_end_flow_control(&self) -> bool {
        flag(self.b(), field::END_TO_END_FLOW_CONTROL)
    }
    /// RNR Retry Count (3 bits).
    pub fn rnr_retry_count(&self) -> u8 {
        bits(self.b(), field::RNR_RETRY_COUNT)
    }
    /// SRQ.
    pub fn srq(&self) -> bool {
        flag(self.b(), field::SRQ)
    }
    /// Local CA GUID.
    pub fn local_ca_guid(&self) -> u64 {
        u64_at(self.b(), field::LOCAL_CA_GUID)
    }
    /// Private data (196 bytes).
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
    /// Sets the Local Q_Key.
    pub fn set_local_qkey(&mut self, v: u32) {
        set_u32(self.bm(), field::LOCAL_QKEY, v);
    }
    /// Sets the Local QPN (low 24 bits).
    pub fn set_local_qpn(&mut self, v: u32) {
        set_u24(self.bm(), field::LOCAL_QPN, v);
    }
    /// Sets the Local EECN (low 24 bits).
    pub fn set_local_eecn(&mut self, v: u32) {
        set_u24(self.bm(), field::LOCAL_EECN, v);
    }
    /// Sets the Starting PSN (low 24 bits).
    pub fn set_starting_psn(&mut self, v: u32) {
        set_u24(self.bm(), field::STARTING_PSN, v);
    }
    /// Sets Responder Resources.
    pub fn set_responder_resources(&mut self, v: u8) {
        self.bm()[field::RESPONDER_RESOURCES] = v;
    }
    /// Sets Initiator Depth.
    pub fn set_initiator_depth(&mut self, v: u8) {
        self.bm()[field::INITIATOR_DEPTH] = v;
    }
    /// Sets the Target ACK Delay (low 5 bits).
    pub fn set_target_ack_delay(&mut self, v: u8) {
        set_bits(self.bm(), field::TARGET_ACK_DELAY, v);
    }
    /// Sets Failover Accepted (low 2 bits).
    pub fn set_failover_accepted(&mut self, v: u8) {
        set_bits(self.bm(), field::FAILOVER_ACCEPTED, v);
    }
    /// Sets End-to-End Flow Control.
    pub fn set_end_to_end_flow_control(&mut self, v: bool) {
        set_flag(self.bm(), field::END_TO_END_FLOW_CONTROL, v);
    }
    /// Sets the RNR Retry Count (low 3 bits).
    pub fn set_rnr_retry_count(&mut self, v: u8) {
        set_bits(self.bm(), field::RNR_RETRY_COUNT, v);
    }
    /// Sets SRQ.
    pub fn set_srq(&mut self, v: bool) {
        set_flag(self.bm(), field::SRQ, v);
    }
    /// Sets the Local CA GUID.
    pub fn set_local_ca_guid(&mut self, v: u64) {
        set_u64(self.bm(), field::LOCAL_CA_GUID, v);
    }
    /// Sets the private data.
    pub fn set_private_data(&mut self, v: &[u8; private_len::REP]) {
        self.bm()[field::PRIVATE_DATA].copy_from_slice(v);
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
    /// Reads a REP. Every value is accepted; reserved bits are ignored.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> crate::Result<CmRep> {
        p.check_len()?;
        Ok(CmRep {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            local_qkey: p.local_qkey(),
            local_qpn: p.local_qpn(),
            local_eecn: p.local_eecn(),
            starting_psn: p.starting_psn(),
            responder_resources: p.responder_resources(),
            initiator_depth: p.initiator_depth(),
            target_ack_delay: p.target_ack_delay(),
            failover_accepted: p.failover_accepted(),
            end_to_end_flow_control: p.end_to_end_flow_control(),
            rnr_retry_count: p.rnr_retry_count(),
            srq: p.srq(),
            local_ca_guid: p.local_ca_guid(),
            private_data: to_array(p.private_data()),
        })
    }

    /// Bytes needed to emit (the whole MAD data).
    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }

    /// Writes the REP: every field, and 0 in every reserved bit.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.bm()[..DATA_LEN].fill(0);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_local_qkey(self.local_qkey);
        p.set_local_qpn(self.local_qpn);
        p.set_local_eecn(self.local_eecn);
        p.set_starting_psn(self.starting_psn);
        p.set_responder_resources(self.responder_resources);
        p.set_initiator_depth(self.initiator_depth);
        p.set_target_ack_delay(self.target_ack_delay);
        p.set_failover_accepted(self.failover_accepted);
        p.set_end_to_end_flow_control(self.end_to_end_flow_control);
        p.set_rnr_retry_count(self.rnr_retry_count);
        p.set_srq(self.srq);
        p.set_local_ca_guid(self.local_ca_guid);
        p.set_private_data(&self.private_data);
    }
}
