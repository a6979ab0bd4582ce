//! The Communication Manager (IBA chapter 12) as rdma_cm speaks it, sans-IO.
//!
//! A [`CmAgent`] is one device's CM: it turns the application's `listen` / `connect` /
//! `accept` / `reject` / `ready_to_use` / `disconnect` into MADs, and the MADs its GSI
//! (QP1) receives into [`CmEvent`]s. Like the engine it does no I/O and reads no clock:
//! MADs and time go in (`handle_mad`, `handle_timeout`), MADs and events come out
//! (`poll_transmit`, `poll_event`), `poll_timeout` says when to call back. It never
//! touches a QP: as with Linux's ib_cm, the owner moves its QP through INIT/RTR/RTS from
//! the parameters an event carries (the passive side before `accept`, the active side on
//! [`CmEvent::ConnectReply`] before `ready_to_use`).
//!
//! Protocol (IBA 12.9; behaviour as Linux's `drivers/infiniband/core/cm.c`):
//! - Every connection keeps one transaction ID, the active side's, for all its MADs (as
//!   Linux's cm_id does: rping's REQ, REP, RTU, DREQ and DREP all carry the REQ's).
//! - A REQ, REP or DREQ waits for its answer `2 x packet lifetime + 4.096 us x 2^t` (t: the
//!   peer's CM response timeout from the REQ; rdma_cm sends 20, about 4.3 s) and is sent
//!   again up to Max CM Retries times (rdma_cm: 15); then the connection times out. An MRA
//!   for it makes that wait `2 x packet lifetime + 4.096 us x 2^service timeout` for the
//!   message's remaining sends (`cm_mra_handler` and `ib_modify_mad`; later MRAs for the
//!   same message change nothing).
//! - Duplicates are answered from state: a repeated REQ after the REP by the REP again, a
//!   repeated REP after the RTU by the RTU again, a repeated DREQ by the DREP again; a REQ
//!   for a connection in TimeWait by REJ "stale connection" (cm_dup_req_handler,
//!   cm_dup_rep_handler). A repeated REQ while the application still holds it (or a
//!   repeated REP before the RTU) is answered with an MRA of service timeout 24 (68.7 s), as
//!   rdma_cm does for every user-space consumer (it prepares the MRA on each REQ and REP,
//!   and cm.c sends it only when the peer repeats itself): an application may take seconds
//!   to accept without the peer timing out.
//! - A REQ for a service nobody listens on is rejected with "invalid service ID"; a REQ
//!   from a QP that already has a live connection with this agent with "stale
//!   connection" (cm_insert_remote_qpn); a REP for an unknown communication ID with
//!   "invalid comm ID"; a DREQ for an unknown ID is answered with a DREP (cm_issue_drep).
//! - After a disconnect (or a reject, or a timeout) a connection waits in TimeWait before its
//!   ID is forgotten, long enough that the peer's next retry of a message finds it: one wait
//!   of the peer's (`2 x packet lifetime + 4.096 us x 2^t`, t this side's response timeout as
//!   the peer knows it: the interval of its DREQ retries; the active peer's packet lifetime
//!   read from its REQ as Linux reads it) plus a packet lifetime for that retry to arrive:
//!   5.1 s between rnic devices, 7.5 s for rdma_cm on Linux rxe; a DREQ that comes in TimeWait is answered with the DREP again (as
//!   Linux's cm_dreq_handler answers it in IB_CM_TIMEWAIT) and starts TimeWait over, so
//!   every retry of a peer whose DREPs keep getting lost finds the connection. Linux's own
//!   TimeWait is shorter (`cm_enter_timewait`: about the QP's ACK timeout, 0.5-2 s with
//!   rdma_cm on rxe), so a DREQ retry it misses is answered as for an unknown connection
//!   (`cm_issue_drep`), as rnic answers one after TimeWait.
//!
//! Service ID resolution (IBA 12.11; rdma_cm's UDP port space resolves a remote UD QP with
//! it): `sidr_request` sends a SIDR_REQ and resends it after each `SidrParams::wait_ns`
//! up to Max CM Retries times (Linux's `ib_send_cm_sidr_req` with rdma_cm's 4.096 s and
//! 15), ending in [`CmEvent::SidrReply`] or [`CmEvent::TimedOut`]. A SIDR_REQ for a
//! listened service ID becomes [`CmEvent::SidrRequest`], answered with `sidr_reply`; one
//! nobody listens for is answered at once with status "service ID not supported", keeping
//! no state (`cm_sidr_req_handler`). A repeat of a SIDR_REQ still waiting for the
//! application is dropped, as cm.c drops it; a repeat of one already answered gets the same
//! SIDR_REP again (cm.c has forgotten it by then and hands the repeat to the listener as a
//! new request; rnic keeps the answer `CmConfig::sidr_keep_ns`, so the peer gets the QP it
//! was given, not a second one).
//!
//! What is not a CM MAD the GSI answers as Linux's MAD layer does (`generate_unmatched_resp`):
//! a Get or Set for a class/version nobody serves gets a GetResp with status "unsupported
//! method/attribute"; anything else is dropped. Both are counted in [`CmStats`].

use crate::Time;
use rnic_wire::cm::{
    self, rej_reason, CmDreq, CmIds, CmMessage, CmMra, CmPath, CmRej, CmRep, CmReq, CmSidrRep, CmSidrReq, CmTransport,
    MsgRef, SidrStatus,
};
use rnic_wire::mad::{self, MadHeader, Packet as MadPacket, MAD_LEN};
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::net::IpAddr;

/// A MAD on its way out: to `dst`'s QP `dst_qpn` (1 for every CM MAD).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadOut {
    /// Destination address.
    pub dst: IpAddr,
    /// Destination QP (the GSI, 1, except for answers to a MAD from another QP).
    pub dst_qpn: u32,
    /// The 256 bytes.
    pub mad: [u8; MAD_LEN],
}

/// Configuration of an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmConfig {
    /// The device's address (its GID's IP).
    pub local_ip: IpAddr,
    /// The device's CA GUID (rxe: the EUI-64 of its MAC).
    pub ca_guid: u64,
    /// Packet lifetime, ns, counted twice into every MAD's wait (rdma_cm's RoCE default
    /// 4.096 us x 2^16 = 268 ms), and once more into TimeWait.
    pub packet_lifetime_ns: u64,
    /// How long an answered SIDR_REQ is remembered, so that a repeat of it (the SIDR_REP
    /// was lost) gets the same answer; an unanswered one is forgotten after as long.
    pub sidr_keep_ns: u64,
    /// Seeds the communication IDs and transaction IDs (tests replay exactly).
    pub seed: u64,
    /// A process sharing its device with others: its member number, put in the top 6
    /// bits of every communication ID it hands out, so that a peer's answer (which names
    /// the ID) reaches this process (`share`).
    pub member: Option<u8>,
}

impl CmConfig {
    /// rdma_cm's defaults for a device at `local_ip`.
    pub fn new(local_ip: IpAddr, ca_guid: u64) -> CmConfig {
        CmConfig {
            local_ip,
            ca_guid,
            packet_lifetime_ns: 4096 << 16,
            // rdma_cm's SIDR_REQ and its 15 retries, 4.096 s apart.
            sidr_keep_ns: 16 * SIDR_WAIT_NS,
            seed: 0x5eed,
            member: None,
        }
    }
}

/// Where a sharing process's member number sits in its communication IDs.
pub const COMM_ID_MEMBER_SHIFT: u32 = 26;

/// The member that handed out communication ID `id` (see [`CmConfig::member`]).
pub fn comm_id_member(id: u32) -> u8 {
    u8::try_from(id >> COMM_ID_MEMBER_SHIFT).unwrap_or(u8::MAX)
}

/// The service timeout of the MRAs this agent sends: 4.096 us x 2^24, about 68.7 s
/// (Linux's `CM_MRA_SETTING`, formerly rdma_cm's `CMA_CM_MRA_SETTING`).
pub const MRA_SERVICE_TIMEOUT: u8 = 24;

/// 4.096 us x 2^t in ns (IBA's timeout encoding; t above 31 is clamped).
pub fn timeout_ns(t: u8) -> u64 {
    4096u64 << u32::from(t.min(31))
}

/// What the active side asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    /// The passive side's address.
    pub dst: IpAddr,
    /// Its service ID ([`cm::service_id`]).
    pub service_id: u64,
    /// RC or UC.
    pub transport: CmTransport,
    /// The active side's QP.
    pub qpn: u32,
    /// The PSN it expects to receive first (the REQ's Starting PSN: the passive side sends
    /// from it, as Linux's CM and rxe do).
    pub psn: u32,
    /// READ/atomic requests it answers at once.
    pub responder_resources: u8,
    /// READ/atomic requests it will have outstanding.
    pub initiator_depth: u8,
    /// Path MTU (ibv enum: 1 = 256 .. 5 = 4096).
    pub path_mtu: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// The QP's local ACK timeout (5 bits).
    pub local_ack_timeout: u8,
    /// CM response timeout, both ways (rdma_cm: 20).
    pub response_timeout: u8,
    /// MAD retries (rdma_cm: 15; 4 bits).
    pub max_cm_retries: u8,
    /// The QP takes receives from an SRQ.
    pub srq: bool,
    /// Private data, at most 92 bytes (rdma_cm's header, then the application's).
    pub private_data: Vec<u8>,
}

/// How long rdma_cm's SIDR_REQ waits for its SIDR_REP before it is sent again, ns
/// (`cma_resolve_ib_udp`: `1 << (CMA_CM_RESPONSE_TIMEOUT - 8)` ms, 4.096 s).
pub const SIDR_WAIT_NS: u64 = 4_096_000_000;

/// rdma_cm's Max CM Retries (`CMA_MAX_CM_RETRIES`), for REQs and SIDR_REQs alike.
pub const RDMA_CM_RETRIES: u8 = 15;

/// What the active side of a service ID resolution asks for (IBA 12.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrParams {
    /// The address to ask.
    pub dst: IpAddr,
    /// The service whose UD QP is wanted ([`cm::service_id`] of [`cm::port_space::UDP`]
    /// for rdma_cm).
    pub service_id: u64,
    /// Private data, at most 216 bytes (rdma_cm: its header, then the application's).
    pub private_data: Vec<u8>,
    /// How long each SIDR_REQ waits for the SIDR_REP, ns.
    pub wait_ns: u64,
    /// How many times the SIDR_REQ is sent again before the request times out.
    pub max_cm_retries: u8,
}

impl SidrParams {
    /// A request with rdma_cm's wait (4.096 s) and retries (15): about 65 s before it
    /// times out.
    pub fn new(dst: IpAddr, service_id: u64, private_data: Vec<u8>) -> SidrParams {
        SidrParams { dst, service_id, private_data, wait_ns: SIDR_WAIT_NS, max_cm_retries: RDMA_CM_RETRIES }
    }
}

/// What the passive side answers a SIDR_REQ with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrRepParams {
    /// [`SidrStatus::Valid`] with a QPN and Q_Key; any other status refuses.
    pub status: SidrStatus,
    /// The UD QP that serves the service.
    pub qpn: u32,
    /// Its Q_Key ([`cm::RDMA_UDP_QKEY`] in rdma_cm's UDP port space).
    pub qkey: u32,
    /// Private data, at most 136 bytes.
    pub private_data: Vec<u8>,
}

/// What the passive side answers with.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AcceptParams {
    /// The passive side's QP.
    pub qpn: u32,
    /// The PSN it expects to receive first (the REP's Starting PSN: the active side sends
    /// from it).
    pub psn: u32,
    /// READ/atomic requests it answers at once.
    pub responder_resources: u8,
    /// READ/atomic requests it will have outstanding.
    pub initiator_depth: u8,
    /// RNR retry count the active side should use (3 bits).
    pub rnr_retry_count: u8,
    /// Target ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// The QP takes receives from an SRQ.
    pub srq: bool,
    /// Private data, at most 196 bytes.
    pub private_data: Vec<u8>,
}

/// A connection request as the passive side sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqInfo {
    /// Where it came from.
    pub src: IpAddr,
    /// The service asked for.
    pub service_id: u64,
    /// RC or UC.
    pub transport: CmTransport,
    /// The active side's QP (the passive QP's destination).
    pub remote_qpn: u32,
    /// The REQ's Starting PSN: the PSN the active side expects first, so the passive QP's
    /// first send PSN.
    pub remote_psn: u32,
    /// Path MTU (ibv enum).
    pub path_mtu: u8,
    /// READ/atomic requests the active side answers at once (bounds the passive side's
    /// initiator depth).
    pub responder_resources: u8,
    /// READ/atomic requests the active side will have outstanding (bounds the passive
    /// side's responder resources).
    pub initiator_depth: u8,
    /// Transport retry count for the passive QP.
    pub retry_count: u8,
    /// RNR retry count for the passive QP.
    pub rnr_retry_count: u8,
    /// Local ACK timeout for the passive QP.
    pub local_ack_timeout: u8,
    /// The active side's CA GUID.
    pub remote_ca_guid: u64,
    /// The REQ's private data (92 bytes).
    pub private_data: Vec<u8>,
}

/// A reply as the active side sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepInfo {
    /// The passive side's QP (the active QP's destination).
    pub remote_qpn: u32,
    /// The REP's Starting PSN: the PSN the passive side expects first, so the active QP's
    /// first send PSN.
    pub remote_psn: u32,
    /// READ/atomic requests the passive side answers at once.
    pub responder_resources: u8,
    /// READ/atomic requests the passive side will have outstanding.
    pub initiator_depth: u8,
    /// RNR retry count for the active QP.
    pub rnr_retry_count: u8,
    /// Target ACK delay.
    pub target_ack_delay: u8,
    /// The REP's private data (196 bytes).
    pub private_data: Vec<u8>,
}

/// What happened, for the owner of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a service this agent listens on: answer with `accept` or `reject`.
    ConnectRequest {
        /// The new connection.
        id: u32,
        /// What was asked.
        req: Box<ReqInfo>,
    },
    /// The passive side accepted: bring the QP to RTR and RTS, then `ready_to_use`.
    ConnectReply {
        /// The connection.
        id: u32,
        /// What was answered.
        rep: Box<RepInfo>,
    },
    /// The connection is up (active: RTU sent; passive: RTU received or the QP saw the
    /// peer's first packet).
    Established {
        /// The connection.
        id: u32,
        /// The RTU's private data (passive side; empty on the active side).
        private_data: Vec<u8>,
    },
    /// The peer rejected (or nobody listens: reason [`rej_reason::INVALID_SERVICE_ID`]).
    Rejected {
        /// The connection.
        id: u32,
        /// IBA Table 109.
        reason: u16,
        /// The REJ's private data.
        private_data: Vec<u8>,
    },
    /// The connection is closed (DREQ received, or DREP received / timed out after ours).
    Disconnected {
        /// The connection.
        id: u32,
        /// The DREQ's or DREP's private data (empty after a timeout).
        private_data: Vec<u8>,
    },
    /// The peer stopped answering: the named message was sent Max CM Retries + 1 times.
    TimedOut {
        /// The connection (or SIDR request).
        id: u32,
        /// "REQ", "REP" or "SIDR_REQ".
        waiting_for_answer_to: &'static str,
    },
    /// A SIDR_REQ for a service ID this agent listens on: answer with `sidr_reply`.
    SidrRequest {
        /// This side's handle of the request.
        id: u32,
        /// Who asks.
        src: IpAddr,
        /// The service asked for.
        service_id: u64,
        /// The requester's partition.
        pkey: u16,
        /// The SIDR_REQ's private data (216 bytes; rdma_cm's header first).
        private_data: Vec<u8>,
    },
    /// The connection's TimeWait ended (after a disconnect, a rejection or a timeout): its
    /// ID is forgotten, and its QP may be reused without meeting the old connection's
    /// packets (IBA 12.9.6; Linux's IB_CM_TIMEWAIT_EXIT).
    TimewaitExit {
        /// The connection.
        id: u32,
    },
    /// The answer to `sidr_request`.
    SidrReply {
        /// The request.
        id: u32,
        /// Whether `qpn` and `qkey` are valid ([`SidrStatus::Valid`]), and if not why
        /// (nobody listens: [`SidrStatus::ServiceIdNotSupported`]).
        status: SidrStatus,
        /// The peer's UD QP.
        qpn: u32,
        /// The Q_Key to send to it with.
        qkey: u32,
        /// The SIDR_REP's private data (136 bytes).
        private_data: Vec<u8>,
    },
}

/// A connection's state (IBA 12.9.6 / Linux's `enum ib_cm_state`, the states rnic uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmState {
    /// Active: REQ sent, waiting for REP (or MRA, which only extends the wait).
    ReqSent,
    /// Passive: REQ received, the application has not answered.
    ReqRcvd,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Active: REP received, the application has not sent the RTU.
    RepRcvd,
    /// Both: connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// Closed, the ID kept a while so late MADs are recognised.
    TimeWait,
}

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CmError {
    /// No such connection (or SIDR request).
    #[error("no CM connection or SIDR request with ID {0:#x}")]
    NoSuchConnection(u32),
    /// The SIDR request was answered already.
    #[error("SIDR request {0:#x} was answered already")]
    AlreadyAnswered(u32),
    /// The call does not fit the connection's state.
    #[error("CM connection {id:#x} is in state {state:?}; {call} needs {needs}")]
    WrongState {
        /// The connection.
        id: u32,
        /// Its state.
        state: CmState,
        /// The call.
        call: &'static str,
        /// The state(s) it needs.
        needs: &'static str,
    },
    /// Someone already listens on the service.
    #[error("service ID {0:#x} already has a listener")]
    AlreadyListening(u64),
    /// Private data longer than the message carries.
    #[error("{what}: {len} bytes of private data, at most {max}")]
    PrivateDataTooLong {
        /// The message.
        what: &'static str,
        /// Given.
        len: usize,
        /// Allowed.
        max: usize,
    },
    /// Only RC and UC connect through the CM here.
    #[error("the CM connects RC and UC QPs only")]
    Transport,
}

/// What the agent counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CmStats {
    /// CM MADs received and understood.
    pub mads_rcvd: u64,
    /// MADs sent (first transmissions and answers).
    pub mads_sent: u64,
    /// REQ, REP and DREQ sent again after their wait ran out.
    pub retransmits: u64,
    /// Duplicate REQ/REP/DREQ answered from state (or ignored while the application decides).
    pub duplicates: u64,
    /// REJs sent.
    pub rej_sent: u64,
    /// MADs for a communication ID this agent does not know (REP rejected, DREQ answered,
    /// others dropped).
    pub unknown_comm_id: u64,
    /// CM messages that do not fit the connection's state, dropped.
    pub out_of_state: u64,
    /// MRAs sent (a REQ or REP repeated while the application holds it).
    pub mra_sent: u64,
    /// MADs that do not parse (short, wrong base or CM class version), dropped.
    pub bad_mads: u64,
    /// MADs of another class: answered "unsupported" (Get/Set) or dropped.
    pub non_cm_mads: u64,
    /// CM attributes rnic does not implement (LAP, APR, ClassPortInfo), dropped.
    pub unsupported_attrs: u64,
    /// Connections and SIDR requests whose peer stopped answering.
    pub timeouts: u64,
    /// SIDR_REQs for a service ID nobody listens on, answered "service ID not supported".
    pub sidr_unsupported: u64,
    /// Connections closed because the process at their other end, on this same shared
    /// device, exited ([`CmAgent::member_gone`]).
    pub peer_process_gone: u64,
}

#[derive(Debug, Clone)]
struct Conn {
    state: CmState,
    peer: IpAddr,
    remote_id: u32,
    tid: u64,
    /// The peer's QPN (its REQ's or REP's), for the stale-connection check and DREQ.
    remote_qpn: u32,
    /// This side's QPN.
    local_qpn: u32,
    /// The MAD to send again when the wait runs out (REQ, REP, DREQ) or to answer a
    /// duplicate with (REP, RTU, DREP, REJ).
    last: Option<[u8; MAD_LEN]>,
    retries_left: u8,
    /// The wait for an answer to `last`.
    wait_ns: u64,
    /// The wait an MRA for `last` asked for, for its remaining sends (`None`: no MRA).
    mra_wait_ns: Option<u64>,
    /// How long TimeWait lasts: how long the peer waits for this side's answers (the
    /// interval of its retries) and a packet lifetime.
    timewait_ns: u64,
    /// Retries granted by the peer's REQ (the passive side's REP and DREQ use them).
    max_retries: u8,
}

/// A SIDR_REQ this agent sent, waiting for its SIDR_REP.
#[derive(Debug, Clone)]
struct SidrOut {
    peer: IpAddr,
    mad: [u8; MAD_LEN],
    retries_left: u8,
    wait_ns: u64,
}

/// A SIDR_REQ this agent received for a service it listens on.
#[derive(Debug, Clone)]
struct SidrIn {
    peer: IpAddr,
    request_id: u32,
    tid: u64,
    service_id: u64,
    /// The SIDR_REP sent, for a repeat of the request.
    answer: Option<[u8; MAD_LEN]>,
}

/// One device's Communication Manager. See the module documentation.
#[derive(Debug)]
pub struct CmAgent {
    cfg: CmConfig,
    conns: HashMap<u32, Conn>,
    /// (peer, peer's comm ID) -> our comm ID: duplicate REQs.
    by_remote: HashMap<(IpAddr, u32), u32>,
    sidr_out: HashMap<u32, SidrOut>,
    sidr_in: HashMap<u32, SidrIn>,
    /// (peer, peer's request ID) -> our ID: repeated SIDR_REQs.
    sidr_by_remote: HashMap<(IpAddr, u32), u32>,
    listeners: HashSet<u64>,
    /// Every wait (connections and SIDR requests share the ID space), and its deadline.
    timers: BTreeSet<(Time, u32)>,
    deadlines: HashMap<u32, Time>,
    out: VecDeque<MadOut>,
    events: VecDeque<CmEvent>,
    stats: CmStats,
    rng: u64,
}

impl CmAgent {
    /// A new agent with no listener and no connection.
    pub fn new(cfg: CmConfig) -> CmAgent {
        CmAgent {
            cfg,
            conns: HashMap::new(),
            by_remote: HashMap::new(),
            sidr_out: HashMap::new(),
            sidr_in: HashMap::new(),
            sidr_by_remote: HashMap::new(),
            listeners: HashSet::new(),
            timers: BTreeSet::new(),
            deadlines: HashMap::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: CmStats::default(),
            rng: cfg.seed | 1,
        }
    }

    /// The counters.
    pub fn stats(&self) -> CmStats {
        self.stats
    }

    /// A connection's state (`None` once forgotten).
    pub fn state(&self, id: u32) -> Option<CmState> {
        self.conns.get(&id).map(|c| c.state)
    }

    /// The peer's QPN on connection `id` (the REQ's or REP's).
    pub fn remote_qpn(&self, id: u32) -> Option<u32> {
        self.conns.get(&id).map(|c| c.remote_qpn)
    }

    /// Accepts REQs and SIDR_REQs for `service_id` from now on.
    pub fn listen(&mut self, service_id: u64) -> Result<(), CmError> {
        if !self.listeners.insert(service_id) {
            return Err(CmError::AlreadyListening(service_id));
        }
        Ok(())
    }

    /// Whether a listener is on `service_id`.
    pub fn is_listening(&self, service_id: u64) -> bool {
        self.listeners.contains(&service_id)
    }

    /// Stops accepting REQs for `service_id` (connections already made stay).
    pub fn unlisten(&mut self, service_id: u64) {
        self.listeners.remove(&service_id);
    }

    fn next_rand(&mut self) -> u64 {
        // xorshift64*: IDs need only be unlikely to repeat, not secret.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn new_comm_id(&mut self) -> u32 {
        loop {
            let mut id = (self.next_rand() >> 32) as u32;
            if let Some(m) = self.cfg.member {
                id = id & !(0x3F << COMM_ID_MEMBER_SHIFT) | u32::from(m & 0x3F) << COMM_ID_MEMBER_SHIFT;
            }
            if id != 0
                && !self.conns.contains_key(&id)
                && !self.sidr_out.contains_key(&id)
                && !self.sidr_in.contains_key(&id)
            {
                return id;
            }
        }
    }

    /// Sends a REQ: the connection starts in [`CmState::ReqSent`]; its ID names it in
    /// every event.
    pub fn connect(&mut self, now: Time, p: &ConnectParams) -> Result<u32, CmError> {
        if !matches!(p.transport, CmTransport::Rc | CmTransport::Uc) {
            return Err(CmError::Transport);
        }
        let private_data = fixed::<{ cm::private_len::REQ }>("REQ", &p.private_data)?;
        let id = self.new_comm_id();
        let tid = self.next_rand() & 0xffff_ffff_ffff;
        let gid = |ip: IpAddr| match ip {
            IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            IpAddr::V6(a) => a.octets(),
        };
        let req = CmReq {
            local_comm_id: id,
            service_id: p.service_id,
            local_ca_guid: self.cfg.ca_guid,
            local_qkey: 0,
            local_qpn: p.qpn & 0xff_ffff,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: p.response_timeout & 0x1f,
            transport: p.transport,
            end_to_end_flow_control: false,
            starting_psn: p.psn & 0xff_ffff,
            local_cm_response_timeout: p.response_timeout & 0x1f,
            retry_count: p.retry_count & 7,
            pkey: 0xffff,
            path_mtu: p.path_mtu & 0xf,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count & 7,
            max_cm_retries: p.max_cm_retries & 0xf,
            srq: p.srq,
            extended_transport_type: 0,
            // RoCE: LIDs are the permissive LID, the GIDs the IP addresses (as Linux's CM
            // fills them; rping's REQ carries 0xffff).
            primary: CmPath {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: gid(self.cfg.local_ip),
                remote_gid: gid(p.dst),
                hop_limit: 64,
                local_ack_timeout: p.local_ack_timeout & 0x1f,
                ..CmPath::default()
            },
            alternate: CmPath::default(),
            sap_supported: false,
            private_data,
        };
        let mad = CmMessage::Req(Box::new(req)).to_mad(tid);
        let wait_ns = 2 * self.cfg.packet_lifetime_ns + timeout_ns(p.response_timeout);
        let conn = Conn {
            state: CmState::ReqSent,
            peer: p.dst,
            remote_id: 0,
            tid,
            remote_qpn: 0,
            local_qpn: p.qpn,
            last: Some(mad),
            retries_left: p.max_cm_retries & 0xf,
            wait_ns,
            mra_wait_ns: None,
            // The REQ tells the peer this side's response timeout is `response_timeout`.
            timewait_ns: wait_ns + self.cfg.packet_lifetime_ns,
            max_retries: p.max_cm_retries & 0xf,
        };
        self.conns.insert(id, conn);
        self.send(p.dst, mad);
        self.arm(id, now + wait_ns);
        Ok(id)
    }

    /// Answers a [`CmEvent::ConnectRequest`] with a REP: the connection waits for the RTU in
    /// [`CmState::RepSent`]. The QP must already be in RTR (the peer may send as soon as it
    /// has the REP).
    pub fn accept(&mut self, now: Time, id: u32, p: &AcceptParams) -> Result<(), CmError> {
        let private_data = fixed::<{ cm::private_len::REP }>("REP", &p.private_data)?;
        let ca_guid = self.cfg.ca_guid;
        let c = self.conn_in(id, CmState::ReqRcvd, "accept", "ReqRcvd")?;
        let rep = CmRep {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            local_qkey: 0,
            local_qpn: p.qpn & 0xff_ffff,
            local_eecn: 0,
            starting_psn: p.psn & 0xff_ffff,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: p.target_ack_delay & 0x1f,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: p.rnr_retry_count & 7,
            srq: p.srq,
            local_ca_guid: ca_guid,
            private_data,
        };
        let mad = CmMessage::Rep(Box::new(rep)).to_mad(c.tid);
        let (peer, wait) = (c.peer, c.wait_ns);
        c.state = CmState::RepSent;
        c.local_qpn = p.qpn;
        c.last = Some(mad);
        c.retries_left = c.max_retries;
        c.mra_wait_ns = None;
        self.send(peer, mad);
        self.arm(id, now + wait);
        Ok(())
    }

    /// Rejects: a REQ (passive, [`CmState::ReqRcvd`]) or a REP (active,
    /// [`CmState::RepRcvd`]), with reason "consumer reject" and `private_data` (at most
    /// 148 bytes). The connection goes to TimeWait.
    pub fn reject(&mut self, now: Time, id: u32, private_data: &[u8]) -> Result<(), CmError> {
        let pd = fixed::<{ cm::private_len::REJ }>("REJ", private_data)?;
        let c = self.conns.get(&id).ok_or(CmError::NoSuchConnection(id))?;
        let which = match c.state {
            CmState::ReqRcvd => MsgRef::Req,
            CmState::RepRcvd => MsgRef::Rep,
            state => return Err(CmError::WrongState { id, state, call: "reject", needs: "ReqRcvd or RepRcvd" }),
        };
        let (peer, remote, tid) = (c.peer, c.remote_id, c.tid);
        let mad = rej(id, remote, which, rej_reason::CONSUMER_REJECT, pd).to_mad(tid);
        self.stats.rej_sent += 1;
        self.send(peer, mad);
        self.enter_timewait(now, id, Some(mad));
        Ok(())
    }

    /// Active side, after the QP is in RTS: sends the RTU; the connection is established.
    pub fn ready_to_use(&mut self, now: Time, id: u32, private_data: &[u8]) -> Result<(), CmError> {
        let pd = fixed::<{ cm::private_len::RTU }>("RTU", private_data)?;
        let c = self.conn_in(id, CmState::RepRcvd, "ready_to_use", "RepRcvd")?;
        let mad = CmMessage::Rtu(Box::new(CmIds { local_comm_id: id, remote_comm_id: c.remote_id, private_data: pd }))
            .to_mad(c.tid);
        let peer = c.peer;
        c.state = CmState::Established;
        c.last = Some(mad);
        self.send(peer, mad);
        self.disarm(id);
        let _ = now;
        self.events.push_back(CmEvent::Established { id, private_data: Vec::new() });
        Ok(())
    }

    /// Passive side: the QP received the peer's first packet before the RTU (verbs'
    /// communication-established event, IBA 12.9.7.2): the connection is established.
    pub fn notify_established(&mut self, id: u32) -> Result<(), CmError> {
        let c = self.conn_in(id, CmState::RepSent, "notify_established", "RepSent")?;
        c.state = CmState::Established;
        self.disarm(id);
        self.events.push_back(CmEvent::Established { id, private_data: Vec::new() });
        Ok(())
    }

    /// Sends a DREQ on an established connection; [`CmEvent::Disconnected`] follows the
    /// DREP (or the last retry).
    pub fn disconnect(&mut self, now: Time, id: u32, private_data: &[u8]) -> Result<(), CmError> {
        let pd = fixed::<{ cm::private_len::DREQ }>("DREQ", private_data)?;
        let c = self.conn_in(id, CmState::Established, "disconnect", "Established")?;
        let mad = CmMessage::Dreq(Box::new(CmDreq {
            ids: CmIds { local_comm_id: id, remote_comm_id: c.remote_id, private_data: pd },
            remote_qpn: c.remote_qpn,
        }))
        .to_mad(c.tid);
        let (peer, wait) = (c.peer, c.wait_ns);
        c.state = CmState::DreqSent;
        c.last = Some(mad);
        c.retries_left = c.max_retries;
        c.mra_wait_ns = None;
        self.send(peer, mad);
        self.arm(id, now + wait);
        Ok(())
    }

    /// Asks `p.dst` which UD QP serves `p.service_id` (a SIDR_REQ, IBA 12.11); the
    /// returned ID names the request in [`CmEvent::SidrReply`] or [`CmEvent::TimedOut`].
    /// The SIDR_REQ is sent again after every `p.wait_ns` without an answer, at most
    /// `p.max_cm_retries` times.
    pub fn sidr_request(&mut self, now: Time, p: &SidrParams) -> Result<u32, CmError> {
        let private_data = fixed::<{ cm::private_len::SIDR_REQ }>("SIDR_REQ", &p.private_data)?;
        let id = self.new_comm_id();
        let tid = self.next_rand() & 0xffff_ffff_ffff;
        // RoCE has only the default partition (IBA C9-42; rnic drops others).
        let req = CmSidrReq { request_id: id, pkey: 0xffff, service_id: p.service_id, private_data };
        let mad = CmMessage::SidrReq(Box::new(req)).to_mad(tid);
        self.sidr_out.insert(id, SidrOut { peer: p.dst, mad, retries_left: p.max_cm_retries, wait_ns: p.wait_ns });
        self.send(p.dst, mad);
        self.arm(id, now + p.wait_ns);
        Ok(id)
    }

    /// Gives up a SIDR request still waiting for its SIDR_REP (no event follows; a late
    /// SIDR_REP is counted as for an unknown ID), as Linux's `ib_destroy_cm_id` cancels
    /// the SIDR_REQ's MAD.
    pub fn cancel_sidr(&mut self, id: u32) -> Result<(), CmError> {
        self.sidr_out.remove(&id).ok_or(CmError::NoSuchConnection(id))?;
        self.disarm(id);
        Ok(())
    }

    /// Answers a [`CmEvent::SidrRequest`] with a SIDR_REP (once; a repeat of the request
    /// is answered with the same SIDR_REP for `CmConfig::sidr_keep_ns`).
    pub fn sidr_reply(&mut self, now: Time, id: u32, p: &SidrRepParams) -> Result<(), CmError> {
        let private_data = fixed::<{ cm::private_len::SIDR_REP }>("SIDR_REP", &p.private_data)?;
        let s = self.sidr_in.get_mut(&id).ok_or(CmError::NoSuchConnection(id))?;
        if s.answer.is_some() {
            return Err(CmError::AlreadyAnswered(id));
        }
        let mad = sidr_rep(s.request_id, p.status, p.qpn & 0xff_ffff, p.qkey, s.service_id, private_data).to_mad(s.tid);
        s.answer = Some(mad);
        let peer = s.peer;
        self.send(peer, mad);
        let keep = self.cfg.sidr_keep_ns;
        self.arm(id, now + keep);
        Ok(())
    }

    /// A SIDR wait that ran out: the SIDR_REQ again, or the request timed out; a
    /// received request forgotten.
    fn sidr_timeout(&mut self, now: Time, id: u32) {
        if let Some(o) = self.sidr_out.get_mut(&id) {
            if o.retries_left > 0 {
                o.retries_left -= 1;
                let (peer, mad, wait) = (o.peer, o.mad, o.wait_ns);
                self.stats.retransmits += 1;
                self.send(peer, mad);
                self.arm(id, now + wait);
            } else {
                // Linux: IB_CM_SIDR_REQ_ERROR, which rdma_cm reports as UNREACHABLE,
                // -ETIMEDOUT.
                self.sidr_out.remove(&id);
                self.stats.timeouts += 1;
                self.events.push_back(CmEvent::TimedOut { id, waiting_for_answer_to: "SIDR_REQ" });
            }
        } else if let Some(s) = self.sidr_in.remove(&id) {
            if self.sidr_by_remote.get(&(s.peer, s.request_id)) == Some(&id) {
                self.sidr_by_remote.remove(&(s.peer, s.request_id));
            }
        }
    }

    fn conn_in(
        &mut self,
        id: u32,
        want: CmState,
        call: &'static str,
        needs: &'static str,
    ) -> Result<&mut Conn, CmError> {
        let c = self.conns.get_mut(&id).ok_or(CmError::NoSuchConnection(id))?;
        if c.state != want {
            return Err(CmError::WrongState { id, state: c.state, call, needs });
        }
        Ok(c)
    }

    fn send(&mut self, dst: IpAddr, mad: [u8; MAD_LEN]) {
        self.stats.mads_sent += 1;
        self.out.push_back(MadOut { dst, dst_qpn: mad::GSI_QPN, mad });
    }

    fn arm(&mut self, id: u32, at: Time) {
        self.disarm(id);
        self.deadlines.insert(id, at);
        self.timers.insert((at, id));
    }

    fn disarm(&mut self, id: u32) {
        if let Some(at) = self.deadlines.remove(&id) {
            self.timers.remove(&(at, id));
        }
    }

    fn enter_timewait(&mut self, now: Time, id: u32, answer: Option<[u8; MAD_LEN]>) {
        let Some(c) = self.conns.get_mut(&id) else { return };
        c.state = CmState::TimeWait;
        if answer.is_some() {
            c.last = answer;
        }
        // The peer's next retry leaves one of its waits after the message this side
        // answered (or did not) and takes up to a packet lifetime to come.
        let tw = c.timewait_ns;
        self.arm(id, now + tw);
    }

    /// An MRA for connection `id`'s message `which`, from `c`'s state.
    fn mra(&mut self, id: u32, which: MsgRef) {
        let Some(c) = self.conns.get(&id) else { return };
        let m = CmMessage::Mra(Box::new(CmMra {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            message_mraed: which,
            service_timeout: MRA_SERVICE_TIMEOUT,
            private_data: [0; cm::private_len::MRA],
        }))
        .to_mad(c.tid);
        let peer = c.peer;
        self.stats.mra_sent += 1;
        self.send(peer, m);
    }

    /// Whether MADs wait to be sent.
    pub fn has_transmit(&self) -> bool {
        !self.out.is_empty()
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<MadOut> {
        self.out.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// When `handle_timeout` wants to run next.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.timers.first().map(|&(at, _)| at)
    }

    /// Member `m` of this shared device exited (its process is gone: nobody will speak for
    /// its connections, where Linux's kernel would close them with a DREQ). Each
    /// connection of this agent whose other end was that process (the device's own
    /// address, a remote communication ID carrying `m`) ends as if the peer had closed it:
    /// an established one (or one closing) with [`CmEvent::Disconnected`], a REP waiting
    /// for its RTU with [`CmEvent::TimedOut`], a request not answered yet with
    /// [`CmEvent::Rejected`] (reason 4, timeout: the active side's CM gave up); each then
    /// waits out TimeWait. Returns how many.
    pub fn member_gone(&mut self, now: Time, m: u8) -> usize {
        let local = self.cfg.local_ip;
        let ids: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.peer == local && c.remote_id != 0 && comm_id_member(c.remote_id) == m && c.state != CmState::TimeWait
            })
            .map(|(&id, _)| id)
            .collect();
        for &id in &ids {
            let Some(c) = self.conns.get(&id) else { continue };
            let ev = match c.state {
                CmState::ReqRcvd => CmEvent::Rejected { id, reason: rej_reason::TIMEOUT, private_data: Vec::new() },
                CmState::RepSent => CmEvent::TimedOut { id, waiting_for_answer_to: "REP" },
                CmState::ReqSent => CmEvent::TimedOut { id, waiting_for_answer_to: "REQ" },
                _ => CmEvent::Disconnected { id, private_data: Vec::new() },
            };
            self.stats.peer_process_gone += 1;
            self.events.push_back(ev);
            self.enter_timewait(now, id, None);
        }
        ids.len()
    }

    /// Runs every wait that has run out: resends, times out, or forgets a TimeWait.
    pub fn handle_timeout(&mut self, now: Time) {
        while let Some(&(at, id)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.remove(&(at, id));
            self.deadlines.remove(&id);
            let Some(c) = self.conns.get_mut(&id) else {
                self.sidr_timeout(now, id);
                continue;
            };
            match c.state {
                CmState::TimeWait => {
                    let key = (c.peer, c.remote_id);
                    self.conns.remove(&id);
                    if self.by_remote.get(&key) == Some(&id) {
                        self.by_remote.remove(&key);
                    }
                    // Linux's cm_timewait_handler: IB_CM_TIMEWAIT_EXIT, which rdma_cm
                    // passes on as RDMA_CM_EVENT_TIMEWAIT_EXIT (the QP may be reused).
                    self.events.push_back(CmEvent::TimewaitExit { id });
                }
                CmState::ReqSent | CmState::RepSent | CmState::DreqSent if c.retries_left > 0 => {
                    c.retries_left -= 1;
                    let (peer, wait, mad) = (c.peer, c.mra_wait_ns.unwrap_or(c.wait_ns), c.last);
                    self.stats.retransmits += 1;
                    if let Some(m) = mad {
                        self.send(peer, m);
                    }
                    self.arm(id, now + wait);
                }
                CmState::ReqSent | CmState::RepSent => {
                    let what = if c.state == CmState::ReqSent { "REQ" } else { "REP" };
                    self.stats.timeouts += 1;
                    self.events.push_back(CmEvent::TimedOut { id, waiting_for_answer_to: what });
                    self.enter_timewait(now, id, None);
                }
                CmState::DreqSent => {
                    // No DREP: the connection is gone all the same (Linux: DREQ_ERROR ->
                    // rdma_cm's DISCONNECTED).
                    self.stats.timeouts += 1;
                    self.events.push_back(CmEvent::Disconnected { id, private_data: Vec::new() });
                    self.enter_timewait(now, id, None);
                }
                CmState::ReqRcvd | CmState::RepRcvd | CmState::Established => {}
            }
        }
    }

    /// Takes one MAD the GSI received from `src` (QP `src_qpn`).
    pub fn handle_mad(&mut self, now: Time, src: IpAddr, src_qpn: u32, bytes: &[u8]) {
        let Ok(hp) = MadPacket::new_checked(bytes) else {
            self.stats.bad_mads += 1;
            return;
        };
        let Ok(h) = MadHeader::parse(&hp) else {
            self.stats.bad_mads += 1;
            return;
        };
        if h.mgmt_class != mad::CLASS_CM
            || h.base_version != mad::BASE_VERSION
            || h.class_version != mad::CM_CLASS_VERSION
        {
            self.unmatched(src, src_qpn, &h, bytes);
            return;
        }
        let msg = match CmMessage::from_mad(bytes) {
            Ok((_, Some(m))) => m,
            Ok((_, None)) => {
                self.stats.unsupported_attrs += 1;
                return;
            }
            Err(_) => {
                self.stats.bad_mads += 1;
                return;
            }
        };
        self.stats.mads_rcvd += 1;
        match msg {
            CmMessage::Req(r) => self.on_req(now, src, h.tid, *r),
            CmMessage::Rep(r) => self.on_rep(now, src, h.tid, *r),
            CmMessage::Rtu(r) => self.on_rtu(r.remote_comm_id, src, r.private_data.to_vec()),
            CmMessage::Rej(r) => self.on_rej(now, src, *r),
            CmMessage::Mra(r) => self.on_mra(now, src, *r),
            CmMessage::Dreq(r) => self.on_dreq(now, src, h.tid, *r),
            CmMessage::Drep(r) => self.on_drep(now, r.remote_comm_id, r.private_data.to_vec()),
            CmMessage::SidrReq(r) => self.on_sidr_req(now, src, h.tid, *r),
            CmMessage::SidrRep(r) => self.on_sidr_rep(src, *r),
        }
    }

    /// A MAD for a class/version the GSI does not serve (Linux `generate_unmatched_resp`).
    fn unmatched(&mut self, src: IpAddr, src_qpn: u32, h: &MadHeader, bytes: &[u8]) {
        self.stats.non_cm_mads += 1;
        if (h.method == mad::method::GET || h.method == mad::method::SET) && bytes.len() >= MAD_LEN {
            let mut m = [0u8; MAD_LEN];
            m.copy_from_slice(&bytes[..MAD_LEN]);
            let resp = MadHeader {
                method: mad::method::GET | mad::method::RESPONSE,
                status: mad::status::METHOD_ATTRIB_NOT_SUPPORTED,
                ..*h
            };
            resp.emit(&mut MadPacket::new_unchecked(&mut m[..]));
            self.stats.mads_sent += 1;
            self.out.push_back(MadOut { dst: src, dst_qpn: src_qpn, mad: m });
        }
    }

    fn reject_unknown(&mut self, src: IpAddr, tid: u64, remote: u32, which: MsgRef, reason: u16) {
        self.stats.rej_sent += 1;
        let mad = rej(0, remote, which, reason, [0; cm::private_len::REJ]).to_mad(tid);
        self.send(src, mad);
    }

    fn on_req(&mut self, now: Time, src: IpAddr, tid: u64, r: CmReq) {
        if let Some(&id) = self.by_remote.get(&(src, r.local_comm_id)) {
            self.stats.duplicates += 1;
            let Some(c) = self.conns.get(&id) else { return };
            match c.state {
                // The REP again.
                CmState::RepSent => {
                    if let Some(m) = c.last {
                        let peer = c.peer;
                        self.send(peer, m);
                    }
                }
                // The application still holds the REQ: the peer is told to wait
                // (cm_dup_req_handler in MRA_REQ_SENT, which rdma_cm enters for every REQ
                // it hands to user space).
                CmState::ReqRcvd => self.mra(id, MsgRef::Req),
                CmState::TimeWait => {
                    let remote = c.remote_id;
                    self.reject_unknown(src, tid, remote, MsgRef::Req, rej_reason::STALE_CONN);
                }
                _ => {}
            }
            return;
        }
        if !self.listeners.contains(&r.service_id) {
            self.reject_unknown(src, tid, r.local_comm_id, MsgRef::Req, rej_reason::INVALID_SERVICE_ID);
            return;
        }
        if !matches!(r.transport, CmTransport::Rc | CmTransport::Uc) {
            self.reject_unknown(src, tid, r.local_comm_id, MsgRef::Req, rej_reason::INVALID_TRANSPORT_TYPE);
            return;
        }
        // A QP of the peer's that already has a live connection here (cm_insert_remote_qpn).
        let stale = self.conns.values().any(|c| {
            c.peer == src && c.remote_qpn == r.local_qpn && c.state != CmState::TimeWait && c.state != CmState::ReqSent
        });
        if stale {
            self.reject_unknown(src, tid, r.local_comm_id, MsgRef::Req, rej_reason::STALE_CONN);
            return;
        }
        let id = self.new_comm_id();
        // The passive side waits as long as the active side said it may take to answer;
        // the active side waits as long as it was told the passive side takes, over its own
        // packet lifetime, which Linux takes to be one less than the REQ's local ACK timeout
        // (cm_format_paths_from_req): rdma_cm on rxe sends 19, so 1.07 s, and repeats its
        // MADs every 6.1 s.
        let wait_ns = 2 * self.cfg.packet_lifetime_ns + timeout_ns(r.local_cm_response_timeout);
        let peer_lifetime = timeout_ns(r.primary.local_ack_timeout.saturating_sub(1)).max(self.cfg.packet_lifetime_ns);
        let timewait_ns = 3 * peer_lifetime + timeout_ns(r.remote_cm_response_timeout);
        self.conns.insert(
            id,
            Conn {
                state: CmState::ReqRcvd,
                peer: src,
                remote_id: r.local_comm_id,
                tid,
                remote_qpn: r.local_qpn,
                local_qpn: 0,
                last: None,
                retries_left: r.max_cm_retries,
                wait_ns,
                mra_wait_ns: None,
                timewait_ns,
                max_retries: r.max_cm_retries,
            },
        );
        self.by_remote.insert((src, r.local_comm_id), id);
        let _ = now;
        self.events.push_back(CmEvent::ConnectRequest {
            id,
            req: Box::new(ReqInfo {
                src,
                service_id: r.service_id,
                transport: r.transport,
                remote_qpn: r.local_qpn,
                remote_psn: r.starting_psn,
                path_mtu: r.path_mtu,
                responder_resources: r.responder_resources,
                initiator_depth: r.initiator_depth,
                retry_count: r.retry_count,
                rnr_retry_count: r.rnr_retry_count,
                local_ack_timeout: r.primary.local_ack_timeout,
                remote_ca_guid: r.local_ca_guid,
                private_data: r.private_data.to_vec(),
            }),
        });
    }

    fn on_rep(&mut self, now: Time, src: IpAddr, tid: u64, r: CmRep) {
        let Some(c) = self.conns.get_mut(&r.remote_comm_id).filter(|c| c.peer == src) else {
            self.stats.unknown_comm_id += 1;
            self.reject_unknown(src, tid, r.local_comm_id, MsgRef::Rep, rej_reason::INVALID_COMM_ID);
            return;
        };
        let id = r.remote_comm_id;
        match c.state {
            CmState::ReqSent => {
                c.state = CmState::RepRcvd;
                c.remote_id = r.local_comm_id;
                c.remote_qpn = r.local_qpn;
                c.last = None;
                let key = (src, r.local_comm_id);
                self.disarm(id);
                self.by_remote.insert(key, id);
                self.events.push_back(CmEvent::ConnectReply {
                    id,
                    rep: Box::new(RepInfo {
                        remote_qpn: r.local_qpn,
                        remote_psn: r.starting_psn,
                        responder_resources: r.responder_resources,
                        initiator_depth: r.initiator_depth,
                        rnr_retry_count: r.rnr_retry_count,
                        target_ack_delay: r.target_ack_delay,
                        private_data: r.private_data.to_vec(),
                    }),
                });
            }
            // Our RTU (or REJ) was lost: the same answer again (cm_dup_rep_handler). Only
            // those: after a disconnect `last` is this side's DREQ, no answer to a REP.
            CmState::Established | CmState::TimeWait if c.remote_id == r.local_comm_id => {
                self.stats.duplicates += 1;
                let answer = c
                    .last
                    .filter(|m| matches!(MadPacket::new_unchecked(&m[..]).attr_id(), cm::attr::RTU | cm::attr::REJ));
                if let Some(m) = answer {
                    let peer = c.peer;
                    self.send(peer, m);
                }
            }
            // The application has not answered the first REP yet: the peer is told to wait
            // (cm_dup_rep_handler in MRA_REP_SENT, rdma_cm's state for every REP).
            CmState::RepRcvd if c.remote_id == r.local_comm_id => {
                self.stats.duplicates += 1;
                self.mra(id, MsgRef::Rep);
            }
            _ => self.stats.out_of_state += 1,
        }
        let _ = now;
    }

    fn on_rtu(&mut self, id: u32, src: IpAddr, private_data: Vec<u8>) {
        let Some(c) = self.conns.get_mut(&id).filter(|c| c.peer == src) else {
            self.stats.unknown_comm_id += 1;
            return;
        };
        if c.state != CmState::RepSent {
            // A late duplicate after notify_established, or out of place.
            if c.state == CmState::Established {
                self.stats.duplicates += 1;
            } else {
                self.stats.out_of_state += 1;
            }
            return;
        }
        c.state = CmState::Established;
        c.last = None;
        self.disarm(id);
        self.events.push_back(CmEvent::Established { id, private_data });
    }

    fn on_rej(&mut self, now: Time, src: IpAddr, r: CmRej) {
        let Some(c) = self.conns.get(&r.remote_comm_id).filter(|c| c.peer == src) else {
            self.stats.unknown_comm_id += 1;
            return;
        };
        let id = r.remote_comm_id;
        match c.state {
            CmState::ReqSent | CmState::RepSent | CmState::RepRcvd | CmState::ReqRcvd => {
                self.events.push_back(CmEvent::Rejected {
                    id,
                    reason: r.reason,
                    private_data: r.private_data.to_vec(),
                });
                self.enter_timewait(now, id, None);
            }
            _ => self.stats.out_of_state += 1,
        }
    }

    fn on_mra(&mut self, now: Time, src: IpAddr, r: CmMra) {
        let pl = self.cfg.packet_lifetime_ns;
        let Some(c) = self.conns.get_mut(&r.remote_comm_id).filter(|c| c.peer == src) else {
            self.stats.unknown_comm_id += 1;
            return;
        };
        let waiting =
            matches!((c.state, r.message_mraed), (CmState::ReqSent, MsgRef::Req) | (CmState::RepSent, MsgRef::Rep));
        if !waiting {
            self.stats.out_of_state += 1;
        } else if c.mra_wait_ns.is_some() {
            // cm_mra_handler in MRA_REQ_RCVD / MRA_REP_RCVD: counted, nothing changes.
            self.stats.duplicates += 1;
        } else {
            // The peer needs longer (IBA 12.6.6): its service timeout (and the round trip)
            // before this message is sent again, for each of its remaining sends (Linux
            // changes the pending MAD's timeout: cm_mra_handler, ib_modify_mad).
            let wait = 2 * pl + timeout_ns(r.service_timeout);
            c.mra_wait_ns = Some(wait);
            let id = r.remote_comm_id;
            self.arm(id, now + wait);
        }
    }

    fn on_dreq(&mut self, now: Time, src: IpAddr, tid: u64, r: CmDreq) {
        let id = r.ids.remote_comm_id;
        let drep = |local: u32, remote: u32| {
            CmMessage::Drep(Box::new(CmIds { local_comm_id: local, remote_comm_id: remote, private_data: [0; 224] }))
        };
        let Some(c) = self.conns.get(&id).filter(|c| c.peer == src) else {
            // Answered anyway, so the peer stops resending (cm_issue_drep).
            self.stats.unknown_comm_id += 1;
            let m = drep(id, r.ids.local_comm_id).to_mad(tid);
            self.send(src, m);
            return;
        };
        match c.state {
            CmState::Established | CmState::RepSent | CmState::DreqSent => {
                let m = drep(id, c.remote_id).to_mad(c.tid);
                let peer = c.peer;
                self.send(peer, m);
                self.events.push_back(CmEvent::Disconnected { id, private_data: r.ids.private_data.to_vec() });
                self.enter_timewait(now, id, Some(m));
            }
            CmState::TimeWait => {
                // Our DREP was lost: again (cm_dreq_handler in IB_CM_TIMEWAIT), and the
                // peer's next retry must find the connection too.
                self.stats.duplicates += 1;
                let m = drep(id, c.remote_id).to_mad(c.tid);
                let peer = c.peer;
                self.send(peer, m);
                self.enter_timewait(now, id, None);
            }
            _ => self.stats.out_of_state += 1,
        }
    }

    fn on_sidr_req(&mut self, now: Time, src: IpAddr, tid: u64, r: CmSidrReq) {
        if let Some(&id) = self.sidr_by_remote.get(&(src, r.request_id)) {
            // cm.c drops a repeat while the request waits for the application
            // (cm_insert_remote_sidr finds it); an answered one gets its answer again.
            self.stats.duplicates += 1;
            if let Some(m) = self.sidr_in.get(&id).and_then(|s| s.answer) {
                self.send(src, m);
            }
            return;
        }
        if !self.listeners.contains(&r.service_id) {
            // cm_sidr_req_handler: nobody listens -> cm_reject_sidr_req(IB_SIDR_UNSUPPORTED),
            // the request's service ID echoed, nothing kept.
            self.stats.sidr_unsupported += 1;
            let m = sidr_rep(r.request_id, SidrStatus::ServiceIdNotSupported, 0, 0, r.service_id, [0; 136]).to_mad(tid);
            self.send(src, m);
            return;
        }
        let id = self.new_comm_id();
        self.sidr_in
            .insert(id, SidrIn { peer: src, request_id: r.request_id, tid, service_id: r.service_id, answer: None });
        self.sidr_by_remote.insert((src, r.request_id), id);
        // Forgotten if never answered (the requester has long given up by then).
        let keep = self.cfg.sidr_keep_ns;
        self.arm(id, now + keep);
        self.events.push_back(CmEvent::SidrRequest {
            id,
            src,
            service_id: r.service_id,
            pkey: r.pkey,
            private_data: r.private_data.to_vec(),
        });
    }

    fn on_sidr_rep(&mut self, src: IpAddr, r: CmSidrRep) {
        let id = r.request_id;
        // cm_sidr_rep_handler: only a request still waiting takes it (a late or repeated
        // SIDR_REP finds none and is dropped).
        if self.sidr_out.get(&id).is_none_or(|o| o.peer != src) {
            self.stats.unknown_comm_id += 1;
            return;
        }
        self.sidr_out.remove(&id);
        self.disarm(id);
        self.events.push_back(CmEvent::SidrReply {
            id,
            status: r.status,
            qpn: r.qpn,
            qkey: r.qkey,
            private_data: r.private_data.to_vec(),
        });
    }

    fn on_drep(&mut self, now: Time, id: u32, private_data: Vec<u8>) {
        match self.conns.get(&id).map(|c| c.state) {
            Some(CmState::DreqSent) => {
                self.events.push_back(CmEvent::Disconnected { id, private_data });
                self.enter_timewait(now, id, None);
            }
            Some(_) => self.stats.duplicates += 1,
            None => self.stats.unknown_comm_id += 1,
        }
    }
}

fn sidr_rep(
    request_id: u32,
    status: SidrStatus,
    qpn: u32,
    qkey: u32,
    service_id: u64,
    private_data: [u8; cm::private_len::SIDR_REP],
) -> CmMessage {
    CmMessage::SidrRep(Box::new(CmSidrRep {
        request_id,
        status,
        info_len: 0,
        vendor_id: 0,
        qpn,
        service_id,
        qkey,
        info: [0; cm::SIDR_INFO_LEN],
        private_data,
    }))
}

fn rej(local: u32, remote: u32, which: MsgRef, reason: u16, private_data: [u8; cm::private_len::REJ]) -> CmMessage {
    CmMessage::Rej(Box::new(CmRej {
        local_comm_id: local,
        remote_comm_id: remote,
        message_rejected: which,
        rejected_info_length: 0,
        reason,
        ari: [0; 72],
        private_data,
    }))
}

/// `data` in a zero-padded array of the message's private data length.
fn fixed<const N: usize>(what: &'static str, data: &[u8]) -> Result<[u8; N], CmError> {
    if data.len() > N {
        return Err(CmError::PrivateDataTooLong { what, len: data.len(), max: N });
    }
    let mut a = [0u8; N];
    a[..data.len()].copy_from_slice(data);
    Ok(a)
}

/// The minimum RNR NAK timer a CM-connected QP advertises (code 12, 0.64 ms: what
/// `ibv_rc_pingpong` and most rdma_cm users set).
pub const MIN_RNR_TIMER: u8 = 12;

/// The attributes that bring the passive side's QP through INIT, RTR and RTS for `req`,
/// answering with `accept` (`QpAttr::bring_up` takes each step's share). As Linux's
/// `cm_init_qp_rtr_attr` / `cm_init_qp_rts_attr` and rdma_cm's `cma_modify_qp_rtr/rts`:
/// the destination and its first PSN from the REQ, this side's first PSN from `accept`,
/// the path MTU, local ACK timeout and retry counts from the REQ (IBA 12.7.27-12.7.34),
/// and READ/atomic depths negotiated: each side may have outstanding no more than the
/// other can answer.
pub fn passive_attrs(req: &ReqInfo, accept: &AcceptParams, access: crate::mr::AccessFlags) -> crate::qp_state::QpAttr {
    crate::qp_state::QpAttr {
        access,
        remote_ip: Some(req.src),
        path_mtu: u32::from(req.path_mtu),
        dest_qpn: req.remote_qpn,
        rq_psn: accept.psn,
        sq_psn: req.remote_psn,
        max_dest_rd_atomic: accept.responder_resources.min(req.initiator_depth),
        max_rd_atomic: accept.initiator_depth.min(req.responder_resources),
        min_rnr_timer: MIN_RNR_TIMER,
        timeout: req.local_ack_timeout,
        retry_cnt: req.retry_count,
        rnr_retry: accept.rnr_retry_count,
        ..crate::qp_state::QpAttr::default()
    }
}

/// The attributes that bring the active side's QP through INIT, RTR and RTS once `rep`
/// answered the REQ made from `conn` (see [`passive_attrs`]; the RNR retry count is the
/// one the REP asks for).
pub fn active_attrs(conn: &ConnectParams, rep: &RepInfo, access: crate::mr::AccessFlags) -> crate::qp_state::QpAttr {
    crate::qp_state::QpAttr {
        access,
        remote_ip: Some(conn.dst),
        path_mtu: u32::from(conn.path_mtu),
        dest_qpn: rep.remote_qpn,
        rq_psn: conn.psn,
        sq_psn: rep.remote_psn,
        max_dest_rd_atomic: conn.responder_resources.min(rep.initiator_depth),
        max_rd_atomic: conn.initiator_depth.min(rep.responder_resources),
        min_rnr_timer: MIN_RNR_TIMER,
        timeout: conn.local_ack_timeout,
        retry_cnt: conn.retry_count,
        rnr_retry: rep.rnr_retry_count,
        ..crate::qp_state::QpAttr::default()
    }
}
