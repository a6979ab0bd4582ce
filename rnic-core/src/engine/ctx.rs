//! The engine's context: everything a packet handler needs besides its QP (smoltcp's
//! `InterfaceInner` beside the sockets). The engine keeps its QP table beside one `Ctx`,
//! so a handler borrows `&mut Qp` and `&mut Ctx` at once: it looks its QP up once, in
//! `Engine`, and reaches the counters, the memory table and the outbox without cloning an
//! `Arc` or looking the QP up again.

use super::out::Outbox;
use super::qp::Qp;
use crate::counters::Counters;
use crate::mr::Mtpt;
use crate::qp_state::QpState;
use crate::wr::{WcOpcode, WcStatus, WorkCompletion};
use rnic_wire::aeth::{AethRepr, NakCode, Syndrome};
use rnic_wire::{Psn, Qpn};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub use crate::Time;

/// Static limits of an engine (what `query_device` reports).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineConfig {
    /// The device's IP address (source of every packet).
    pub local_ip: IpAddr,
    /// Most QPs.
    pub max_qp: u32,
    /// Unacknowledged packets a QP may have in flight (rxe: 128). Packets of at most
    /// 1 KiB of payload (and READs whose responses are) go within
    /// `max_unacked_small_pkts` instead.
    pub max_unacked_pkts: u32,
    /// The window for small packets: 512, so that a quarter window, the AckReq interval,
    /// is 128 packets (two GSO sends of them per ACK), while the bytes in flight stay
    /// about what 128 full-size packets hold (a deeper queue of large packets at a slow
    /// receiver is a queue delay, which congestion control reads as congestion).
    pub max_unacked_small_pkts: u32,
    /// Packets between forced AckReq bits (rxe: 64, `RXE_MAX_PKT_PER_ACK`).
    pub max_pkts_per_ack: u32,
    /// Most outstanding READs as requester or responder a QP may be given.
    pub max_rd_atomic: u8,
    /// Leave payloads of at least 512 bytes that lie in one registered region there
    /// ([`TxPacket::payload`](super::TxPacket::payload)) instead of copying them into the
    /// packet: the UDP transport sends them from registered memory (one copy fewer per
    /// byte).
    pub zero_copy: bool,
    /// The CA GUID the Communication Manager puts in its REQs and REPs (rxe: the EUI-64 of
    /// the netdev's MAC). [`EngineConfig::new`] derives it from the address as from the
    /// locally administered MAC `02:52:a:b:c:d` an IPv4 device gets.
    pub ca_guid: u64,
    /// Seeds the Communication Manager's communication and transaction IDs. Fixed by
    /// default (tests replay exactly); a driver sets it from the clock and process ID, so
    /// that a restarted program does not reuse the IDs its last run's peers may remember.
    pub cm_seed: u64,
    /// Congestion control (DCQCN, [`crate::cc`]): the reaction point's rate per RC QP and
    /// the notification point's CNPs. `None` (the default of [`EngineConfig::new`], so
    /// that fabric tests see raw protocol behaviour): no CNPs, no pacing, no rate cuts.
    pub cc: Option<crate::cc::DcqcnParams>,
    /// The notification point's least time between two CNPs to one QP, ns (mlx5's
    /// `min_time_between_cnps`, 4 us).
    pub cnp_gap_ns: u64,
    /// Flow control: the most bytes an RC requester side of this engine keeps
    /// unacknowledged towards one destination address, all QPs together (packets counted
    /// at their path MTU; READ requests count their responses). New packets beyond it wait
    /// for acknowledgements; retransmissions never wait. The driver sets it from the
    /// receive buffer a peer like itself has (a quarter, at most 8 MiB), so that a thousand
    /// QPs' windows together cannot overflow the receiver's socket (each window alone is
    /// 128 full-size packets).
    pub max_inflight_per_dest: u64,
    /// The port's active MTU: a QP's path MTU may not exceed it (the wire would not carry
    /// its packets; rxe refuses the same in `rxe_qp_chk_attr`).
    pub port_mtu: crate::qp_state::PathMtu,
    /// The QPNs this engine hands out, first and last: all of them, or a sharing
    /// process's part of the device's (`transport::share`).
    pub qpns: (u32, u32),
    /// A process sharing its device: its member number, which the CM puts in its
    /// communication IDs ([`crate::cm::CmConfig::member`]).
    pub cm_member: Option<u8>,
    /// Which of its device's shards this engine is (0 for one alone): an XRC SRQ's CQ,
    /// which no QP names when it is created, is marked as fed by it when a receive
    /// completes there ([`Cq::feeding_shards`]).
    pub shard: usize,
    /// Small packets to one destination are built back to back into one buffer, up to
    /// what one UDP GSO send carries ([`TxPacket::train`](super::TxPacket::train)): no
    /// buffer, queue entry or iovec per packet. Only for a transport that sends a train
    /// as one GSO message, or splits it ([`TxPacket::split_train`](super::TxPacket::split_train)):
    /// the UDP transport. Off by default.
    pub trains: bool,
}

/// Payload bytes up to which a packet counts as small for the window
/// ([`EngineConfig::max_unacked_small_pkts`]).
pub(crate) const SMALL_PKT: usize = 1024;

impl EngineConfig {
    /// The window for packets of `plen` payload bytes.
    #[inline]
    pub(crate) fn window_for(&self, plen: usize) -> u32 {
        if plen <= SMALL_PKT {
            self.max_unacked_small_pkts.max(self.max_unacked_pkts)
        } else {
            self.max_unacked_pkts
        }
    }

    /// Defaults for a device at `local_ip`.
    pub fn new(local_ip: IpAddr) -> EngineConfig {
        EngineConfig {
            local_ip,
            max_qp: crate::caps::DeviceCaps::MAX_QP,
            max_unacked_pkts: 128,
            max_unacked_small_pkts: 512,
            max_pkts_per_ack: 128,
            max_rd_atomic: crate::caps::DeviceCaps::MAX_RD_ATOMIC,
            zero_copy: false,
            ca_guid: guid_for(local_ip),
            cm_seed: 0x5eed,
            cc: None,
            cnp_gap_ns: 4_000,
            max_inflight_per_dest: 16 << 20,
            port_mtu: crate::qp_state::PathMtu::Mtu4096,
            qpns: (super::qp_table::FIRST_QPN, super::qp_table::LAST_QPN),
            cm_member: None,
            shard: 0,
            trains: false,
        }
    }
}

/// The EUI-64 GUID of a MAC (the U/L bit flipped, `ff:fe` in the middle), as rxe derives
/// its node GUID from its netdev's MAC (`addrconf_addr_eui48`).
pub fn guid_for_mac(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]])
}

/// The link-local IPv6 address of a port whose EUI-64 is `guid` (`fe80::/64` and the
/// GUID): GID 0 of a RoCE port, as rxe's, and the address a raw-Ethernet device answers.
pub fn link_local(guid: u64) -> std::net::Ipv6Addr {
    std::net::Ipv6Addr::from((0xfe80u128 << 112) | u128::from(guid))
}

/// Whether `ip` is a link-local IPv6 address (`fe80::/10`, a GID 0).
pub fn is_link_local(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(a) if a.segments()[0] & 0xffc0 == 0xfe80)
}

/// The GUID of a device at `ip` that has no interface of its own (the UDP transport): the
/// EUI-64 of the MAC it shows in captures and in GID 0 (`capture::mac_for`), so its node GUID,
/// GID 0 and captured frames agree, as rxe's all come from its netdev's MAC.
pub fn guid_for(ip: IpAddr) -> u64 {
    guid_for_mac(crate::capture::mac_for(ip).0)
}

/// The IPv4 address of the device without an interface (the UDP transport) whose GID 0
/// is `gid`: [`guid_for`] puts the address into the MAC (`02:52:a:b:c:d`) and so into the
/// link-local GID (`fe80::52:aff:feb:c0d`), so that GID names the address as well. Only
/// an exact match counts (the GID rebuilt from the address equals `gid`).
pub fn udp_device_of_link_local(gid: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let b = gid.octets();
    let ip = std::net::Ipv4Addr::new(b[10], b[13], b[14], b[15]);
    (link_local(guid_for(IpAddr::V4(ip))) == gid).then_some(ip)
}

/// Asynchronous events (`ibv_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AsyncEvent {
    /// A QP entered the error state because of an error no completion could report.
    QpFatal {
        /// The QP.
        qpn: u32,
    },
    /// A responder QP refused an RDMA request for a memory access violation (R_Key, PD,
    /// rights or bounds) and entered the error state (`IBV_EVENT_QP_ACCESS_ERR`, IBA
    /// 11.6.3.1 "local access violation work queue error").
    QpAccessErr {
        /// The QP.
        qpn: u32,
    },
    /// A responder QP refused an invalid request (opcode sequence, length, invalidation)
    /// and entered the error state (`IBV_EVENT_QP_REQ_ERR`, IBA 11.6.3.1 "invalid request
    /// local work queue error").
    QpReqErr {
        /// The QP.
        qpn: u32,
    },
    /// A completion queue overflowed.
    CqError {
        /// The CQ.
        cq: u32,
    },
    /// An armed SRQ limit was crossed: fewer receive WQEs than the limit remain
    /// (`IBV_EVENT_SRQ_LIMIT_REACHED`); the limit is now disarmed.
    SrqLimitReached {
        /// The SRQ.
        srq: u32,
    },
    /// The port became active (`IBV_EVENT_PORT_ACTIVE`; raised once when a device opens).
    PortActive {
        /// The port (always 1).
        port: u8,
    },
}

/// The engine's state apart from its QPs.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) config: EngineConfig,
    pub(crate) mtpt: Arc<Mtpt>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) out: Outbox,
    pub(crate) events: VecDeque<AsyncEvent>,
    /// Armed timers, earliest first: (deadline, QPN). An entry is live only while it is
    /// the QP's `timer_key`; others are skipped lazily, so arming is O(log n) and finding
    /// the next wake-up is O(1) however many QPs there are.
    pub(crate) timers: BinaryHeap<Reverse<(Time, u32)>>,
    /// QPs holding a coalesced ACK, to be sent at the next drain.
    pub(crate) acks: Vec<Qpn>,
    /// `acks`' other buffer while a drain walks it.
    pub(crate) acks_scratch: Vec<Qpn>,
    /// QPs with READ responses still to send, served round-robin a burst at a time.
    pub(crate) reads: VecDeque<Qpn>,
    /// The notification point's CNP rate limiter.
    pub(crate) cnp: crate::cc::CnpLimiter,
    /// Flow control: per destination, the bytes unacknowledged (all QPs) and the QPs
    /// waiting for room, oldest first.
    pub(crate) dests: Dests,
    /// Destinations whose in-flight bytes went down since the waiters were last served.
    pub(crate) freed: Vec<IpAddr>,
    /// CQs whose notification is due, raised together by `Engine::raise_cq_events`;
    /// `None`: each is raised as its completion is queued.
    pub(crate) due_events: Option<Vec<Arc<crate::cq::Cq>>>,
}

/// Which of a QP's completion queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CqSide {
    Send,
    Recv,
}

impl Ctx {
    pub(crate) fn new(config: EngineConfig, mtpt: Arc<Mtpt>, counters: Arc<Counters>) -> Ctx {
        Ctx {
            config,
            mtpt,
            counters,
            out: Outbox::new(config.trains),
            due_events: None,
            events: VecDeque::new(),
            timers: BinaryHeap::new(),
            acks: Vec::new(),
            acks_scratch: Vec::new(),
            reads: VecDeque::new(),
            cnp: crate::cc::CnpLimiter::new(config.cnp_gap_ns),
            dests: Dests::default(),
            freed: Vec::new(),
        }
    }

    /// Pushes a completion to the QP's send or receive CQ; on overflow the QP goes to the
    /// error state and a CQ error is raised (IBA 11.4.2.1).
    #[inline]
    pub(crate) fn push_wc(&mut self, qp: &mut Qp, side: CqSide, wc: WorkCompletion, solicited: bool) {
        let cq = match side {
            CqSide::Send => &qp.send_cq,
            CqSide::Recv => qp.resp_cq(),
        };
        if qp.resp.xrc_srq.is_some() && side == CqSide::Recv {
            // An XRC SRQ's CQ: the target QPs that complete into it were not known when
            // it was made, so the shard marks it here, once (a poll of it then runs this
            // shard's rounds: `Device::progress_shared`).
            cq.fed_by_once(self.config.shard);
        }
        match cq.push_quiet(wc, solicited) {
            Ok(false) => return,
            Ok(true) => {
                match &mut self.due_events {
                    Some(due) => due.push(cq.clone()),
                    None => cq.raise(),
                }
                return;
            }
            Err(_) => {}
        }
        let cq = cq.id();
        self.counters.cq_overflow.fetch_add(1, Ordering::Relaxed);
        if !self.events.contains(&AsyncEvent::CqError { cq }) {
            self.events.push_back(AsyncEvent::CqError { cq });
        }
        if qp.state != QpState::Err {
            self.events.push_back(AsyncEvent::QpFatal { qpn: qp.qpn().value() });
            self.enter_error(qp, None);
        }
    }

    /// Moves a QP to the error state and flushes every outstanding WQE of both queues
    /// with a flush error, in order (IBA 10.3.1; rxe flushes with
    /// IB_WC_WR_FLUSH_ERR in `rxe_drain_resp_pkts` and `check_resource`'s error state). `first` is a completion that
    /// must come before the flushes (the one that caused the error).
    pub(crate) fn enter_error(&mut self, qp: &mut Qp, first: Option<WorkCompletion>) {
        if qp.state == QpState::Err && first.is_none() {
            return;
        }
        qp.state = QpState::Err;
        qp.shared.set_state(QpState::Err);
        qp.req.rto_deadline = None;
        qp.req.rnr_deadline = None;
        qp.req.pace_deadline = None;
        // Nothing of it is in flight any more, as flow control counts.
        self.account_inflight(qp);
        let qpn = qp.qpn();
        let dest = qp.attr.dest_qpn;
        let mut push = |cq: &crate::cq::Cq, wc: WorkCompletion| {
            if cq.push(wc, false).is_err() {
                self.counters.cq_overflow.fetch_add(1, Ordering::Relaxed);
                if !self.events.contains(&AsyncEvent::CqError { cq: cq.id() }) {
                    self.events.push_back(AsyncEvent::CqError { cq: cq.id() });
                }
            }
        };
        if let Some(f) = first {
            push(&qp.send_cq, f);
        }
        for f in qp.req.sq.drain(..) {
            qp.shared.sq_outstanding.fetch_sub(1, Ordering::AcqRel);
            let mut wc = flush_wc(f.wqe.wr_id, f.wqe.op.wc_opcode(), qpn);
            wc.src_qp = dest;
            push(&qp.send_cq, wc);
        }
        qp.req.next_send = 0;
        // A SEND in progress holds the oldest receive WQE.
        let in_progress = match qp.resp.cur.take() {
            Some(super::qp::InProgress::Send { rwqe, .. }) => Some(rwqe),
            _ => None,
        };
        // An XRC target's WQEs came from the XRC SRQ: they flush to its CQ.
        let rcq = qp.resp_cq().clone();
        for r in in_progress.into_iter().chain(qp.resp.rq.drain(..)) {
            qp.shared.rq_outstanding.fetch_sub(1, Ordering::AcqRel);
            push(&rcq, flush_wc(r.wr_id, WcOpcode::Recv, qpn));
        }
    }

    /// Holds an acknowledgement (ACK, sequence NAK or RNR NAK) for the QP until the next
    /// drain. A newer ACK replaces a held one: each acknowledges everything before its
    /// PSN, so only the newest needs to go (IBA 9.7.5.1.1 allows coalescing).
    ///
    /// A PSN sequence error NAK is held apart and leaves first: the requests that fill its
    /// gap later in the round are answered after it, never instead of it (IBA 9.7.5.1.2:
    /// the NAK is owed). Only the NAK of a later gap replaces it: that gap was found after
    /// the first was filled, and its NAK acknowledges every request before its PSN (IBA
    /// 9.7.5.2: the requester completes everything before a NAK's PSN and resends from
    /// it), so the requester goes back once, straight to the later gap, rather than twice.
    pub(crate) fn defer_ack(&mut self, qp: &mut Qp, psn: Psn, aeth: AethRepr) {
        let seq = matches!(aeth.syndrome, Syndrome::Nak(NakCode::PsnSequenceError));
        if seq || qp.resp.seq_nak.is_some() {
            self.defer_by_gap(qp, psn, aeth, seq);
            return;
        }
        if qp.resp.pending_ack.is_none() {
            self.acks.push(qp.qpn());
        }
        self.hold_ack(qp, psn, aeth);
    }

    /// Holds an ACK or RNR NAK in the QP's slot. The newer PSN wins; at the same PSN a NAK
    /// is never replaced (an RNR NAK must reach the requester as such).
    #[inline]
    fn hold_ack(&mut self, qp: &mut Qp, psn: Psn, aeth: AethRepr) {
        match qp.resp.pending_ack {
            None => qp.resp.pending_ack = Some((psn, aeth)),
            Some((held, held_aeth)) => {
                self.counters.ack_deferred.fetch_add(1, Ordering::Relaxed);
                let d = held.distance(psn);
                let held_is_ack = matches!(held_aeth.syndrome, Syndrome::Ack { .. });
                if d > 0 || (d == 0 && held_is_ack) {
                    qp.resp.pending_ack = Some((psn, aeth));
                }
            }
        }
    }

    /// `defer_ack` for a sequence NAK (`seq`) or while one is held.
    #[cold]
    fn defer_by_gap(&mut self, qp: &mut Qp, psn: Psn, aeth: AethRepr, seq: bool) {
        if qp.resp.seq_nak.is_none() && qp.resp.pending_ack.is_none() {
            self.acks.push(qp.qpn());
        }
        let r = &mut qp.resp;
        if seq {
            if r.seq_nak.is_some() || r.pending_ack.is_some() {
                self.counters.ack_deferred.fetch_add(1, Ordering::Relaxed);
            }
            // Whatever is held answers requests before `psn`: the NAK acknowledges them.
            r.pending_ack = None;
            r.seq_nak = Some((psn, aeth));
            return;
        }
        if r.seq_nak.is_some_and(|(n, _)| n.distance(psn) < 0) {
            // A duplicate's ACK behind the gap the held NAK reports: the NAK covers it.
            self.counters.ack_deferred.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.hold_ack(qp, psn, aeth);
    }

    /// Moves an ACK already held for this round on to `psn`, a later packet that did not
    /// ask for one: the ACK then covers everything received so far (an ACK acknowledges
    /// every request up to its PSN, IBA 9.7.5.1.1), so a requester that asks only now and
    /// then still sees its window open as far as the responder got. A held NAK stays.
    pub(crate) fn extend_ack(&mut self, qp: &mut Qp, psn: Psn, aeth: AethRepr) {
        if let Some((held, held_aeth)) = qp.resp.pending_ack {
            if matches!(held_aeth.syndrome, Syndrome::Ack { .. }) && held.distance(psn) > 0 {
                qp.resp.pending_ack = Some((psn, aeth));
            }
        }
    }

    /// Puts the QP in the list of QPs with READ responses to send.
    pub(crate) fn queue_reads(&mut self, qp: &mut Qp) {
        if !qp.resp.reads_queued {
            qp.resp.reads_queued = true;
            self.reads.push_back(qp.qpn());
        }
    }

    /// Puts the QP's earliest deadline in the timer heap if it is earlier than the one
    /// already there (a later deadline is found when the earlier entry fires).
    pub(crate) fn note_timers(&mut self, qp: &mut Qp) {
        // Each deadline read on its own (an array of the Options copied just-written
        // fields with wider loads: a store-forwarding stall on every post and ACK).
        let never = Time::MAX;
        let mut want = qp.req.rto_deadline.unwrap_or(never);
        want = want.min(qp.req.rnr_deadline.unwrap_or(never));
        want = want.min(qp.req.pace_deadline.unwrap_or(never));
        if let Some(d) = qp.req.cc.as_ref().and_then(|c| c.rate.next_timeout()) {
            want = want.min(d);
        }
        if want == never {
            return;
        }
        if qp.timer_key.is_none_or(|k| want < k) {
            qp.timer_key = Some(want);
            self.timers.push(Reverse((want, qp.qpn().value())));
        }
    }

    /// Queues the SRQ-limit event the responder of the QP noted, if any.
    pub(crate) fn raise_srq_events(&mut self, qp: &mut Qp) {
        if std::mem::take(&mut qp.resp.srq_limit_hit) {
            if let Some(srq) = qp.resp.xrc_srq.as_ref().or(qp.shared.srq.as_ref()).map(|s| s.id()) {
                self.events.push_back(AsyncEvent::SrqLimitReached { srq });
            }
        }
    }
}

impl Ctx {
    /// Flow control: is there room for `bytes` more towards `dst`? If not, the QP waits in
    /// line for that destination (served as acknowledgements free room, oldest first). A
    /// QP already in line waits for its turn; a destination with nothing in flight always
    /// takes a packet, so that a bound below a packet cannot stop traffic for good.
    pub(crate) fn dest_room(&mut self, qp: &mut Qp, dst: IpAddr, bytes: u64) -> bool {
        if !qp.req.dest_blocked {
            let d = self.dests.get(dst);
            if d.used + bytes <= self.config.max_inflight_per_dest || d.used == 0 {
                return true;
            }
            qp.req.dest_blocked = true;
            self.counters.tx_dest_blocked.fetch_add(1, Ordering::Relaxed);
            d.waiters.push_back(qp.qpn());
        }
        false
    }

    /// Counts `bytes` more in flight towards `dst`, as the QP's share. Returns whether
    /// the destination is now under pressure: half its bound or more in flight.
    pub(crate) fn take_dest(&mut self, qp: &mut Qp, dst: IpAddr, bytes: u64) -> bool {
        let d = self.dests.get(dst);
        d.used += bytes;
        qp.req.inflight_bytes += bytes;
        d.used >= self.config.max_inflight_per_dest / 2
    }

    /// Brings the QP's share of its destination's in-flight bytes down to what is still
    /// unacknowledged (nothing once it leaves RTS/SQD), noting the destination freed.
    pub(crate) fn account_inflight(&mut self, qp: &mut Qp) {
        if qp.req.inflight_bytes == 0 {
            return;
        }
        let Some(dst) = qp.attr.remote_ip else { return };
        let want = if matches!(qp.state, QpState::Rts | QpState::Sqd) {
            u64::try_from(qp.req.una.distance(qp.req.sent_end).max(0)).unwrap_or(0) * qp.mtu as u64
        } else {
            0
        };
        if want < qp.req.inflight_bytes {
            let freed = qp.req.inflight_bytes - want;
            qp.req.inflight_bytes = want;
            let d = self.dests.get(dst);
            d.used = d.used.saturating_sub(freed);
            if !d.waiters.is_empty() && !self.freed.contains(&dst) {
                self.freed.push(dst);
            }
        }
    }
}

/// One destination's flow-control state.
#[derive(Debug)]
pub(crate) struct Dest {
    pub(crate) ip: IpAddr,
    /// Bytes unacknowledged towards it, all QPs.
    pub(crate) used: u64,
    /// QPs waiting for room, oldest first.
    pub(crate) waiters: VecDeque<Qpn>,
}

/// The destinations an engine sends to: a handful at most in practice, so a vector
/// searched from the most recently used end (no hashing on the per-packet path).
#[derive(Debug, Default)]
pub(crate) struct Dests(Vec<Dest>);

impl Dests {
    /// `ip`'s state, created empty on first use.
    pub(crate) fn get(&mut self, ip: IpAddr) -> &mut Dest {
        match self.0.iter().position(|d| d.ip == ip) {
            Some(i) => &mut self.0[i],
            None => {
                self.0.push(Dest { ip, used: 0, waiters: VecDeque::new() });
                self.0.last_mut().expect("just pushed")
            }
        }
    }

    /// Bytes unacknowledged towards `ip`.
    pub(crate) fn used(&self, ip: IpAddr) -> u64 {
        self.0.iter().find(|d| d.ip == ip).map_or(0, |d| d.used)
    }
}

pub(crate) fn flush_wc(wr_id: u64, opcode: WcOpcode, qpn: Qpn) -> WorkCompletion {
    WorkCompletion::new(wr_id, WcStatus::WrFlushErr, opcode, qpn.value())
}
