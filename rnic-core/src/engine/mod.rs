//! The sans-IO protocol engine of one device.
//!
//! The engine does no I/O and never reads the clock (quinn-proto's rule): time and
//! packets go in, packets, completions and the next wake-up come out. That is what
//! makes it deterministic under test (`crate::fabric`) and lets one driver
//! (`crate::device`) run it on a progress thread over any transport.
//!
//! # Call order
//! 1. `create_qp` / `modify_qp` / `destroy_qp` as the application asks.
//! 2. `post_send` / `post_recv` with work requests validated on the posting thread
//!    (`qp::validate_send`, `qp::validate_recv`).
//! 3. `handle_packet` for every packet received (BTH..ICRC, ICRC already verified by
//!    the transport), `handle_timeout` when `poll_timeout` says.
//! 4. After any of the above, drain `poll_transmit` and hand the packets to the
//!    transport, which fills in the ICRC. Completions go straight into the CQs, and
//!    asynchronous events come out of `poll_event`.
//!
//! # Structure
//! `Engine` is the QP table beside one `Ctx` (`ctx.rs`; smoltcp's `Interface` /
//! `InterfaceInner` split): a public call looks its QP up once and hands `&mut Qp` and
//! `&mut Ctx` to the handlers. A QP's state is split as rxe's: common attributes
//! (`qp.rs`), sender (`qp_req.rs`), responder (`qp_resp.rs`).
//!
//! Where each protocol rule lives: the requester and completer (one sender state
//! machine per QP, as rxe merged them) in `requester.rs`; the responder's pipeline of
//! checks for RC and UC in `responder.rs`, what its refusals become in `refusal.rs`, its
//! atomics in `rd_atomic.rs`; the UC/UD sender in `unreliable.rs`; the UD responder and
//! its GRH area in `ud.rs`; packet building in `packet.rs`; the modify-QP table in
//! [`crate::qp_state`]; posting checks in [`crate::post`].

mod ctx;
mod mcast;
mod out;
mod packet;
pub mod qp;
mod qp_req;
mod qp_resp;
mod qp_table;
mod rd_atomic;
mod refusal;
mod requester;
mod responder;
pub mod ud;
mod unreliable;

pub use ctx::{
    guid_for, guid_for_mac, is_link_local, link_local, udp_device_of_link_local, AsyncEvent, EngineConfig, Time,
};
pub use out::{TxPacket, TxPayload};
pub use qp_table::{FIRST_QPN, LAST_QPN};

use crate::counters::Counters;
use crate::mr::Mtpt;
use crate::qp_state::{self, PathMtu, QpAttrMask, QpAttrValues, QpState, QpType};
use crate::wr::{WcOpcode, WcStatus};
use ctx::{flush_wc, CqSide, Ctx};
use qp::{Qp, QpAttr, QpInit, QpShared, RecvWqe, SendWqe};
use rnic_wire::roce::{RocePacket, RoceRepr};
use rnic_wire::{Psn, Qpn};
use std::cmp::Reverse;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Why an engine call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// No QP has this number.
    #[error("no QP {0:#x}")]
    NoSuchQp(u32),
    /// The device has its maximum number of QPs.
    #[error("the device already has its maximum of {0} QPs")]
    TooManyQps(u32),
    /// The transition or mask is not allowed by IBA's table.
    #[error(transparent)]
    Modify(#[from] qp_state::ModifyError),
    /// An attribute value is out of range.
    #[error(transparent)]
    AttrValue(#[from] qp_state::AttrValueError),
    /// An attribute value is in range for its field but not allowed here.
    #[error("{0}")]
    BadAttr(String),
    /// A device limit would be passed (multicast groups, attachments): ENOMEM in verbs.
    #[error("{0}")]
    Limit(String),
}

/// The protocol engine of one device: the QP table beside the context every handler
/// borrows with its QP (smoltcp's `Interface { inner, sockets }`).
#[derive(Debug)]
pub struct Engine {
    qps: qp_table::QpTable,
    cx: Ctx,
    gsi: Gsi,
    /// QPs given work requests by [`Engine::queue_send`] since the last
    /// [`Engine::transmit_queued`] (a QP at most once: `ReqState::queued`).
    queued: Vec<Qpn>,
    /// The packet being received, parsed in place ([`RoceRepr::parse_into`]): kept here so
    /// that no packet pays to set up a fresh 144-byte value or to move one.
    rx_repr: RoceRepr,
    /// Multicast groups and their QPs.
    mcast: mcast::Groups,
    /// The QPs of the multicast group a packet is being delivered to (kept: no
    /// allocation per packet).
    rx_members: Vec<Qpn>,
}

/// QP1, the general services interface (IBA 13.5): not a QP of the table but the device's
/// Communication Manager behind a UD endpoint. A MAD is a UD SEND_ONLY to QPN 1 with the
/// GSI's Q_Key and a 256-byte payload; what the agent sends leaves the same way, from QPN 1.
#[derive(Debug)]
struct Gsi {
    agent: crate::cm::CmAgent,
    /// The GSI's send PSN (a UD QP counts its packets; nobody checks them).
    psn: Psn,
}

/// One RC QP's DCQCN reaction point, as [`Engine::qp_rates`] reports it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QpRate {
    /// The QP.
    pub qpn: u32,
    /// Its current rate, bytes/s.
    pub rate: f64,
    /// The lowest rate it has had, bytes/s.
    pub lowest: f64,
    /// CNPs that cut it.
    pub cnps: u64,
    /// Loss signals that cut it.
    pub losses: u64,
}

/// READ response packets generated per drain of the engine's output (all QPs together):
/// a peer's large READ costs at most this many buffered packets at a time.
pub const READ_BURST: usize = 64;

impl Engine {
    /// A new engine using `mtpt` for every key check.
    pub fn new(config: EngineConfig, mtpt: Arc<Mtpt>, counters: Arc<Counters>) -> Engine {
        let cm = crate::cm::CmConfig {
            seed: config.cm_seed,
            member: config.cm_member,
            ..crate::cm::CmConfig::new(config.local_ip, config.ca_guid)
        };
        Engine {
            qps: qp_table::QpTable::with_range(config.qpns.0, config.qpns.1),
            cx: Ctx::new(config, mtpt, counters),
            gsi: Gsi { agent: crate::cm::CmAgent::new(cm), psn: Psn::new(0) },
            queued: Vec::new(),
            rx_repr: RoceRepr::EMPTY,
            mcast: mcast::Groups::default(),
            rx_members: Vec::new(),
        }
    }

    /// The device's Communication Manager (QP1): `listen`, `connect`, `accept`, `reject`,
    /// `ready_to_use`, `disconnect`. What it sends leaves at the next drain; what QP1
    /// receives reaches it through [`handle_packet`](Self::handle_packet).
    pub fn cm(&mut self) -> &mut crate::cm::CmAgent {
        &mut self.gsi.agent
    }

    /// The next Communication Manager event (a connect request, a reply, established,
    /// rejected, disconnected, timed out).
    pub fn poll_cm_event(&mut self) -> Option<crate::cm::CmEvent> {
        self.gsi.agent.poll_event()
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.cx.config
    }

    /// The counters.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.cx.counters
    }

    /// The memory table.
    pub fn mtpt(&self) -> &Arc<Mtpt> {
        &self.cx.mtpt
    }

    /// Creates a QP in the RESET state. Its responder takes receive WQEs from
    /// `init.srq` when there is one (which must belong to the same protection domain).
    pub fn create_qp(&mut self, init: QpInit) -> Result<Arc<QpShared>, EngineError> {
        let QpInit { qp_type, pd, ref srq, ref xrcd, .. } = init;
        // IBA Annex A14: an XRC target lives in an XRC domain and takes its receive WQEs from
        // the domain's XRC SRQs; no other QP has a domain; no QP names an XRC SRQ.
        match (qp_type, xrcd, srq) {
            (QpType::XrcRecv, None, _) => {
                return Err(EngineError::BadAttr("an XRC_RECV QP needs an XRC domain".into()))
            }
            (QpType::XrcRecv | QpType::XrcSend, _, Some(_)) => {
                return Err(EngineError::BadAttr(format!("an {qp_type} QP takes no SRQ")))
            }
            (QpType::Rc | QpType::Uc | QpType::Ud | QpType::XrcSend, Some(_), _) => {
                return Err(EngineError::BadAttr(format!("an {qp_type} QP has no XRC domain")))
            }
            _ => {}
        }
        if let Some(s) = srq.as_ref().filter(|s| s.xrcd().is_some()) {
            return Err(EngineError::BadAttr(format!("SRQ {} is an XRC SRQ: only XRC targets reach it", s.id())));
        }
        if let Some(s) = &srq {
            if s.pd() != pd {
                return Err(EngineError::BadAttr(format!(
                    "SRQ {} belongs to protection domain {}, the QP to {pd}",
                    s.id(),
                    s.pd()
                )));
            }
        }
        let max_qp = self.cx.config.max_qp;
        if u32::try_from(self.qps.len()).unwrap_or(u32::MAX) >= max_qp {
            return Err(EngineError::TooManyQps(max_qp));
        }
        let mut shared = None;
        self.qps
            .insert(|qpn| {
                let s = Arc::new(QpShared::new(qpn, &init));
                shared = Some(s.clone());
                Qp::new(s, init.send_cq.clone(), init.recv_cq.clone())
            })
            .ok_or(EngineError::TooManyQps(max_qp))?;
        shared.ok_or(EngineError::TooManyQps(max_qp))
    }

    /// Destroys a QP; its outstanding work is dropped without completions (verbs
    /// semantics: destroy is not a flush).
    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), EngineError> {
        // What was received is acknowledged, even when the application destroys the QP
        // the moment it sees the last completion (a held ACK would die with the QP and
        // the peer retry until RETRY_EXC_ERR).
        if let Some(qp) = self.qps.get_mut(qpn) {
            responder::flush_ack(qp, &mut self.cx);
            // Its bytes in flight no longer count against the destination.
            qp.state = QpState::Reset;
            self.cx.account_inflight(qp);
        }
        self.cx.cnp.forget(qpn.value());
        // A destroyed QP receives from no group. (The libibverbs front end refuses to
        // destroy an attached QP, EBUSY, as the kernel's uverbs does; the Rust API and a
        // closing context detach it here.)
        self.mcast.forget(qpn);
        // QPs waiting for the room it held are served at the next call with a clock
        // (`poll_timeout` says "now" while one is due).
        // Its number is not handed out again until the cursor has walked the whole QPN
        // space (qp_table: rxe's cyclic allocation), so the peer's late packets for it
        // find no QP.
        self.qps.remove(qpn).map(drop).ok_or(EngineError::NoSuchQp(qpn.value()))
    }

    /// The QP's current attributes and state.
    pub fn query_qp(&self, qpn: Qpn) -> Result<QpAttr, EngineError> {
        let qp = self.qps.get(qpn).ok_or(EngineError::NoSuchQp(qpn.value()))?;
        let mut a = qp.attr;
        a.state = qp.state;
        a.sq_psn = qp.req.next_psn.value();
        a.rq_psn = qp.resp.epsn.value();
        Ok(a)
    }

    /// Modifies a QP, checked against IBA's transition table (`ibv_modify_qp`).
    pub fn modify_qp(&mut self, now: Time, qpn: Qpn, attr: &QpAttr) -> Result<(), EngineError> {
        let cx = &mut self.cx;
        let qp = self.qps.get_mut(qpn).ok_or(EngineError::NoSuchQp(qpn.value()))?;
        // As for destroy: a held ACK leaves before the QP changes state.
        responder::flush_ack(qp, cx);
        let cur = qp.state;
        let next = check_modify(qp, attr, cx.config.max_rd_atomic, cx.config.port_mtu)?;
        apply_attrs(qp, attr);
        if next != cur {
            match next {
                QpState::Err => cx.enter_error(qp, None),
                QpState::Reset => {
                    qp.state = QpState::Reset;
                    cx.account_inflight(qp);
                    reset_qp(qp);
                }
                _ => {
                    qp.state = next;
                    qp.shared.set_state(next);
                }
            }
        }
        if next == QpState::Rts {
            // Work posted in SQD (or before a re-arm) can go now.
            progress(qp, cx, now);
            cx.note_timers(qp);
        }
        Ok(())
    }

    /// Queues a validated send WQE and transmits what the window allows (with whatever
    /// [`queue_send`](Self::queue_send) left queued).
    pub fn post_send(&mut self, now: Time, qpn: Qpn, wqe: SendWqe) {
        self.queue_send(qpn, wqe);
        self.transmit_queued(now);
    }

    /// Queues a validated send WQE without transmitting it or reading the clock: the next
    /// [`transmit_queued`](Self::transmit_queued) sends it. A poster that puts work
    /// straight into the engine between rounds uses this, so that a post costs no clock
    /// read (the round that follows reads it once for every WQE queued meanwhile) and the
    /// packets are built where they are sent. Order is that of the send queue either way.
    #[inline]
    pub fn queue_send(&mut self, qpn: Qpn, wqe: SendWqe) {
        let cx = &mut self.cx;
        let Some(qp) = self.qps.get_mut(qpn) else { return };
        if qp.state == QpState::Err {
            // IBA 10.3.1 / verbs: WRs posted to a QP in error complete with a flush error.
            qp.shared.sq_outstanding.fetch_sub(1, Ordering::AcqRel);
            let wc = flush_wc(wqe.wr_id, wqe.op.wc_opcode(), qpn);
            cx.push_wc(qp, CqSide::Send, wc, false);
            return;
        }
        if let crate::wr::SendOp::LocalInv { rkey } = wqe.op {
            // LOCAL_INV (IBA 10.6.7, rxe `rxe_do_local_ops`): a local operation executed
            // when the engine takes it (after every earlier WQE of the queue was handed to
            // the engine) and completed in order with the rest of the send queue, when
            // `transmit_queued` retires it. A key naming no region, or a region of another
            // PD, fails it with LOC_QP_OP_ERR and the QP enters the error state (rxe's
            // status for a failed local operation).
            let status = cx.mtpt.invalidate_for(rkey, qp.shared.pd).err().map(|_| WcStatus::LocQpOpErr);
            requester::queue_local(qp, wqe, status);
            qp.req.queued_local = true;
        } else if let crate::wr::SendOp::BindMw { rkey, bind } = wqe.op {
            // BIND_MW (IBA 10.6.7.2, rxe `rxe_bind_mw`): executed as LOCAL_INV is; a bind
            // the checks refuse completes with MW_BIND_ERR and the QP enters the error state.
            let (qpn, pd) = (qp.qpn().value(), qp.shared.pd);
            let status = cx.mtpt.bind_mw(rkey >> 8, rkey, qpn, pd, bind).err().map(|_| WcStatus::MwBindErr);
            requester::queue_local(qp, wqe, status);
            qp.req.queued_local = true;
        } else {
            requester::queue(qp, wqe);
        }
        if !qp.req.queued {
            qp.req.queued = true;
            self.queued.push(qpn);
        }
    }

    /// Whether [`queue_send`](Self::queue_send) left work requests to transmit.
    pub fn has_queued(&self) -> bool {
        !self.queued.is_empty()
    }

    /// Transmits what [`queue_send`](Self::queue_send) queued (what the window allows, as
    /// `post_send` would have) and retires local operations that reached the front.
    pub fn transmit_queued(&mut self, now: Time) {
        let cx = &mut self.cx;
        for qpn in self.queued.drain(..) {
            // Destroyed meanwhile: nothing left to send.
            let Some(qp) = self.qps.get_mut(qpn) else { continue };
            qp.req.queued = false;
            let local = std::mem::take(&mut qp.req.queued_local);
            if qp.state == QpState::Err {
                continue;
            }
            // Only for a local operation, as `post_send`: retiring re-arms the local ACK
            // timer (which must run from the last acknowledged progress, not from each
            // post) and is the RC requester's (a UC QP has none).
            if local {
                requester::retire_done(qp, cx, now);
            }
            progress(qp, cx, now);
            cx.note_timers(qp);
        }
    }

    /// Queues a validated receive WQE.
    pub fn post_recv(&mut self, qpn: Qpn, wqe: RecvWqe) {
        let cx = &mut self.cx;
        let Some(qp) = self.qps.get_mut(qpn) else { return };
        if qp.state == QpState::Err {
            qp.shared.rq_outstanding.fetch_sub(1, Ordering::AcqRel);
            let wc = flush_wc(wqe.wr_id, WcOpcode::Recv, qpn);
            cx.push_wc(qp, CqSide::Recv, wc, false);
            return;
        }
        qp.resp.rq.push_back(wqe);
    }

    /// Handles one received packet: BTH..ICRC, the ICRC already verified.
    pub fn handle_packet(&mut self, now: Time, src: IpAddr, data: &[u8]) {
        self.handle_packet_ecn(now, src, data, false);
    }

    /// Handles one received packet that arrived congestion-experienced when `ce`: its IP
    /// header carried ECN CE, or the transport's receive queue was above its threshold
    /// (where a switch would have marked it). With congestion control on, the
    /// notification point answers a marked RC or UC request with a CNP to the QP that sent
    /// it (RoCEv2 Annex A17.9.2), at most one per QP per `cnp_gap_ns`.
    pub fn handle_packet_ecn(&mut self, now: Time, src: IpAddr, data: &[u8], ce: bool) {
        self.receive(now, src, None, data, ce);
        if !self.cx.freed.is_empty() {
            self.serve_dest_waiters(now);
        }
    }

    /// Handles one packet received on multicast group `group` (its IP destination), the
    /// ICRC already verified for that destination: given to every QP attached to the
    /// group (see [`attach_mcast`](Self::attach_mcast)).
    pub fn handle_multicast(&mut self, now: Time, src: IpAddr, group: IpAddr, data: &[u8], ce: bool) {
        self.receive(now, src, Some(group), data, ce);
    }

    /// Attaches UD QP `qpn` to multicast group `group` (`ibv_attach_mcast`; the group is
    /// the IP address its GID maps to). `Ok(true)` when the group is new to this engine:
    /// the caller then joins it on the wire. Only UD QPs may be attached (verbs; the
    /// kernel's `ib_attach_mcast` refuses others with EINVAL); attaching twice is no error.
    pub fn attach_mcast(&mut self, qpn: Qpn, group: IpAddr) -> Result<bool, EngineError> {
        let qp = self.qps.get(qpn).ok_or(EngineError::NoSuchQp(qpn.value()))?;
        if qp.shared.qp_type != QpType::Ud {
            return Err(EngineError::BadAttr(format!(
                "QP {:#x} is {:?}: only UD QPs attach to multicast groups",
                qpn.value(),
                qp.shared.qp_type
            )));
        }
        self.mcast.attach(group, qpn)
    }

    /// Detaches QP `qpn` from `group`; `Ok(true)` when no QP of this engine is left in
    /// it (the caller may leave it on the wire). A QP not attached is refused.
    pub fn detach_mcast(&mut self, qpn: Qpn, group: IpAddr) -> Result<bool, EngineError> {
        self.mcast.detach(group, qpn)
    }

    /// Detaches QP `qpn` from every group; returns the groups left without a QP.
    pub fn detach_all_mcast(&mut self, qpn: Qpn) -> Vec<IpAddr> {
        self.mcast.forget(qpn)
    }

    /// The multicast groups at least one QP is attached to.
    pub fn mcast_groups(&self) -> Vec<IpAddr> {
        self.mcast.groups().collect()
    }

    /// Whether a QP is attached to `group`.
    pub fn is_mcast_member(&self, group: IpAddr) -> bool {
        self.mcast.has(group)
    }

    fn receive(&mut self, now: Time, src: IpAddr, group: Option<IpAddr>, data: &[u8], ce: bool) {
        let cx = &mut self.cx;
        let pkt = match RocePacket::new_checked(data) {
            Ok(p) => p,
            Err(_) => {
                cx.counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        // Parsed in place: see `rx_repr`.
        if RoceRepr::parse_into(&pkt, &mut self.rx_repr).is_err() {
            cx.counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let repr = &self.rx_repr;
        cx.counters.rcvd_pkts.fetch_add(1, Ordering::Relaxed);
        if let Some(group) = group {
            // IBA 10.5.2.1 (rxe `rxe_rcv_mcast_pkt`): a packet to a multicast group is a
            // UD datagram to DestQP 0xFFFFFF, and every QP attached to the group gets a
            // copy, each checking it as its own (state, P_Key, Q_Key, receive WQE).
            // Anything else sent to a group is addressed to no QP.
            let ud = pkt.info().transport == rnic_wire::opcode::Transport::Ud;
            self.mcast.members(group, &mut self.rx_members);
            if repr.bth.dest_qp != Qpn::MULTICAST || !ud || self.rx_members.is_empty() {
                cx.counters.unknown_qp_pkts.fetch_add(1, Ordering::Relaxed);
                return;
            }
            for &qpn in &self.rx_members {
                if let Some(qp) = self.qps.get_mut(qpn) {
                    to_qp(qp, cx, now, (src, Some(group)), repr, &pkt, data.len(), ce);
                }
            }
            return;
        }
        if repr.bth.dest_qp.value() == rnic_wire::mad::GSI_QPN {
            gsi_receive(&mut self.gsi, cx, now, src, repr, pkt.payload());
            return;
        }
        let Some(qp) = self.qps.get_mut(repr.bth.dest_qp) else {
            cx.counters.unknown_qp_pkts.fetch_add(1, Ordering::Relaxed);
            return;
        };
        to_qp(qp, cx, now, (src, None), repr, &pkt, data.len(), ce);
    }

    /// The earliest time at which `handle_timeout` may have work to do (it can be early:
    /// a timer pushed back by an ACK is found later when the old deadline passes).
    /// `Some(0)` means output is waiting to be generated (paced READ responses): drain
    /// the transmits again without sleeping.
    pub fn poll_timeout(&self) -> Option<Time> {
        if !self.cx.acks.is_empty() {
            return Some(0);
        }
        self.poll_timeout_holding_acks()
    }

    /// Like [`poll_timeout`](Self::poll_timeout), with held ACKs not counted as due (the
    /// driver holds a libibverbs program's ACKs for a while, with its own deadline).
    pub fn poll_timeout_holding_acks(&self) -> Option<Time> {
        let pending = !self.cx.out.tx.is_empty() || !self.cx.reads.is_empty() || self.gsi.agent.has_transmit();
        if pending || self.cx.freed.iter().any(|&d| self.dest_due(d)) {
            return Some(0);
        }
        let qps = self.cx.timers.peek().map(|Reverse((t, _))| *t);
        match (qps, self.gsi.agent.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// True when `drain_transmits` has (or will generate) packets.
    pub fn has_pending_transmit(&self) -> bool {
        !self.cx.out.tx.is_empty()
            || !self.cx.acks.is_empty()
            || !self.cx.reads.is_empty()
            || self.gsi.agent.has_transmit()
    }

    /// Runs every timer that is due at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        self.gsi.agent.handle_timeout(now);
        let cx = &mut self.cx;
        while let Some(&Reverse((t, q))) = cx.timers.peek() {
            if t > now {
                break;
            }
            cx.timers.pop();
            let Some(qp) = self.qps.get_mut(Qpn::new(q)) else { continue };
            if qp.timer_key != Some(t) {
                continue; // Superseded by an earlier entry, or the QP was re-created.
            }
            qp.timer_key = None;
            requester::on_timer(qp, cx, now);
            cx.account_inflight(qp);
            cx.note_timers(qp);
        }
        if !self.cx.freed.is_empty() {
            self.serve_dest_waiters(now);
        }
    }

    /// Flow control: QPs waiting for room towards a destination whose in-flight bytes
    /// went down transmit again, oldest first, until one has to wait again (the room is
    /// used up) or none is left. Only once an eighth of the bound is free: served a packet's
    /// room at a time, every waiting QP would send its messages a packet per turn (one ACK
    /// and one system call per packet: half the bandwidth of 1024 QPs on loopback).
    fn serve_dest_waiters(&mut self, now: Time) {
        let max = self.cx.config.max_inflight_per_dest;
        let mut i = 0;
        while i < self.cx.freed.len() {
            let dst = self.cx.freed[i];
            if !self.dest_due(dst) {
                i += 1; // Not yet: later acknowledgements free more.
                continue;
            }
            let cx = &mut self.cx;
            cx.freed.swap_remove(i);
            loop {
                if cx.dests.used(dst) >= max {
                    break;
                }
                let Some(qpn) = cx.dests.get(dst).waiters.pop_front() else {
                    break;
                };
                let Some(qp) = self.qps.get_mut(qpn) else { continue };
                if !qp.req.dest_blocked || qp.attr.remote_ip != Some(dst) {
                    continue; // Re-created, reset or moved since it got in line.
                }
                qp.req.dest_blocked = false;
                requester::transmit(qp, cx, now);
                cx.note_timers(qp);
                if qp.req.dest_blocked {
                    break; // In line again: the room is used up.
                }
            }
        }
    }

    /// Whether the QPs waiting for room towards `dst` are to be served now: nothing is in
    /// flight there, or an eighth of the bound is free.
    fn dest_due(&self, dst: IpAddr) -> bool {
        let (used, max) = (self.cx.dests.used(dst), self.cx.config.max_inflight_per_dest);
        used == 0 || max.saturating_sub(used) >= max / 8
    }

    /// The current DCQCN rate of an RC QP, bytes/s (`None`: congestion control off, or
    /// the QP has sent nothing yet).
    pub fn qp_rate(&self, qpn: Qpn) -> Option<f64> {
        self.qps.get(qpn).and_then(|qp| qp.req.cc.as_ref()).map(|c| c.rate.current)
    }

    /// Every RC QP's DCQCN reaction point (congestion control on, and the QP has sent).
    pub fn qp_rates(&self) -> Vec<QpRate> {
        self.qps
            .iter()
            .filter_map(|qp| {
                qp.req.cc.as_ref().map(|c| QpRate {
                    qpn: qp.qpn().value(),
                    rate: c.rate.current,
                    lowest: c.rate.lowest,
                    cnps: c.rate.cnps_handled,
                    losses: c.rate.losses_handled,
                })
            })
            .collect()
    }

    /// Bytes unacknowledged towards `dst` (all RC QPs; flow control's count).
    pub fn inflight_to(&self, dst: IpAddr) -> u64 {
        self.cx.dests.used(dst)
    }

    /// The next packet to transmit.
    pub fn poll_transmit(&mut self) -> Option<TxPacket> {
        if self.cx.out.tx.is_empty() {
            self.generate(true);
        }
        self.cx.out.flush_counts(&self.cx.counters);
        self.cx.out.tx.pop_front()
    }

    /// Moves the queued packets into `out`, after sending the coalesced ACKs and the next
    /// burst of READ responses. Call again while [`has_pending_transmit`](Self::has_pending_transmit)
    /// says so: a large READ comes out [`READ_BURST`] packets per call.
    pub fn drain_transmits(&mut self, out: &mut Vec<TxPacket>) {
        self.generate(true);
        self.cx.out.move_into(out, &self.cx.counters);
    }

    /// Like [`drain_transmits`](Self::drain_transmits), but the coalesced ACKs stay held
    /// (and [`has_held_acks`](Self::has_held_acks) says so) for the next drain.
    ///
    /// The driver uses it when the application itself runs the device's rounds and is
    /// likely to answer what just arrived: the ACK then leaves after the answer, in the
    /// same system call, instead of in front of it on the answer's critical path (a
    /// datagram's send costs the sending CPU ~3 us on loopback). IBA 9.7.5.1.1 lets a
    /// responder coalesce and delay ACKs; the next drain, at the latest, sends them.
    pub fn drain_transmits_holding_acks(&mut self, out: &mut Vec<TxPacket>) {
        self.generate(false);
        self.cx.out.move_into(out, &self.cx.counters);
    }

    /// From now on, the completion notifications that work makes due wait for
    /// [`raise_cq_events`](Self::raise_cq_events) instead of being raised as each
    /// completion is queued. The driver raises a round's events once it has handled what
    /// the round received (and again at its end, for what its sends completed), when
    /// every completion those packets made is queued: a program that takes an event and polls
    /// another CQ for a completion the same packets brought (the send's, from the ACK that
    /// came with the answer) finds it there (Debian's perftest `-e` waits for both CQs on
    /// one channel, and took the receive's event first while the ACK's completion was
    /// still being made).
    pub fn defer_cq_events(&mut self) {
        self.cx.due_events.get_or_insert_with(Vec::new);
    }

    /// Raises the notifications deferred since the last call ([`defer_cq_events`](Self::defer_cq_events)).
    #[inline]
    pub fn raise_cq_events(&mut self) {
        if let Some(due) = &mut self.cx.due_events {
            for cq in due.drain(..) {
                cq.raise();
            }
        }
    }

    /// Whether coalesced ACKs are waiting for a drain.
    pub fn has_held_acks(&self) -> bool {
        !self.cx.acks.is_empty()
    }

    /// Sends the held ACKs (unless `acks` is false), the CM's MADs and the next burst of
    /// READ responses.
    fn generate(&mut self, acks: bool) {
        let cx = &mut self.cx;
        while let Some(m) = self.gsi.agent.poll_transmit() {
            let repr = packet::gsi_send(m.dst_qpn, self.gsi.psn);
            self.gsi.psn = self.gsi.psn.add(1);
            cx.out.emit(&cx.counters, m.dst, qp::ud_udp_sport(rnic_wire::mad::GSI_QPN), &repr, |b| {
                b.copy_from_slice(&m.mad)
            });
        }
        if acks {
            // An ACK must not overtake READ responses for earlier PSNs: it waits for them.
            // (Swap with a kept buffer rather than take: no allocation per drain.)
            let mut held = std::mem::take(&mut cx.acks_scratch);
            std::mem::swap(&mut held, &mut cx.acks);
            for qpn in held.drain(..) {
                let Some(qp) = self.qps.get_mut(qpn) else { continue };
                if qp.resp.reads_queued {
                    cx.acks.push(qpn);
                } else {
                    responder::flush_ack(qp, cx);
                }
            }
            cx.acks_scratch = held;
        }
        let mut budget = READ_BURST;
        while budget > 0 {
            let Some(qpn) = cx.reads.pop_front() else { break };
            let Some(qp) = self.qps.get_mut(qpn) else { continue };
            let (sent, more) = responder::pump_reads(qp, cx, budget);
            budget = budget.saturating_sub(sent);
            if more {
                cx.reads.push_back(qpn);
            } else {
                qp.resp.reads_queued = false;
                let halted = qp.resp.halted;
                responder::flush_ack(qp, cx);
                if halted {
                    cx.enter_error(qp, None);
                }
            }
        }
    }

    /// Returns a transmitted packet's buffer for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.cx.out.put(buf);
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.cx.events.pop_front()
    }
}

/// A packet for QP1: a UD SEND_ONLY with the GSI's Q_Key (IBA 13.5.3.1, C13-7; rxe's
/// `check_keys` applies it to QP1 as to any UD QP) and exactly one MAD (IBA 13.4.2).
/// Hands a parsed packet from `src` (to `group` when it was multicast) to `qp`: the
/// checks every QP makes of an incoming packet, then its transport's handler.
#[allow(clippy::too_many_arguments)]
fn to_qp(
    qp: &mut Qp,
    cx: &mut Ctx,
    now: Time,
    (src, group): (IpAddr, Option<IpAddr>),
    repr: &RoceRepr,
    pkt: &RocePacket<&[u8]>,
    data_len: usize,
    ce: bool,
) {
    let info = pkt.info();
    let qp_type = qp.shared.qp_type;
    let peer_ok = qp_type == QpType::Ud || qp.attr.remote_ip == Some(src);
    if ce {
        cx.counters.np_ecn_marked_roce_packets.fetch_add(1, Ordering::Relaxed);
    }
    if info.transport == rnic_wire::opcode::Transport::Cnp {
        // The reaction point (DCQCN): a CNP from the QP's peer cuts its rate.
        let p = cx.config.cc.filter(|_| qp_type.reliable() && qp_type.has_send_queue() && peer_ok);
        match (p, qp.req.cc.as_mut()) {
            (Some(p), Some(c)) => {
                c.rate.on_cnp(now, &p);
                cx.counters.rp_cnp_handled.fetch_add(1, Ordering::Relaxed);
                cx.note_timers(qp);
            }
            _ => {
                cx.counters.rp_cnp_ignored.fetch_add(1, Ordering::Relaxed);
            }
        }
        return;
    }
    // rxe `check_type_state` / `check_addr`: a QP takes only its
    // transport's opcodes; a connected (RC, UC) QP only from its peer, a UD QP from
    // anyone (the DETH says who).
    let transport_ok = matches!(
        (qp_type, info.transport),
        (QpType::Rc, rnic_wire::opcode::Transport::Rc)
            | (QpType::Uc, rnic_wire::opcode::Transport::Uc)
            | (QpType::Ud, rnic_wire::opcode::Transport::Ud)
            | (QpType::XrcSend | QpType::XrcRecv, rnic_wire::opcode::Transport::Xrc)
    );
    if !transport_ok || !peer_ok || matches!(qp.state, QpState::Reset | QpState::Init) {
        cx.counters.unknown_qp_pkts.fetch_add(1, Ordering::Relaxed);
        return;
    }
    // P_Key (IBA C9-42/43): the default partition's low 15 bits must match.
    if repr.bth.pkey & 0x7fff != 0x7fff {
        cx.counters.bad_pkey_cntr.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if !info.request {
        if qp_type.reliable() && qp_type.has_send_queue() {
            requester::handle_response(qp, cx, now, repr, pkt.payload());
            cx.account_inflight(qp);
            cx.note_timers(qp);
        }
        return;
    }
    if ce && cx.config.cc.is_some() && qp_type != QpType::Ud && cx.cnp.on_marked(now, qp.qpn().value()) {
        // The notification point: one CNP per QP per gap, to the sending QP. (UD has no
        // reaction point here: its marked packets are counted, not answered.)
        let repr = packet::cnp_repr(Qpn::new(qp.attr.dest_qpn));
        cx.out.emit(&cx.counters, src, qp.src_port, &repr, |_| {});
        cx.counters.np_cnp_sent.fetch_add(1, Ordering::Relaxed);
    }
    // The one place a QP's state is checked for incoming requests (IBA 10.3.1).
    if !qp.receives() {
        cx.counters.unknown_qp_pkts.fetch_add(1, Ordering::Relaxed);
        return;
    }
    match qp_type {
        QpType::Ud => ud::handle_request(qp, cx, src, group, repr, pkt.payload(), data_len),
        QpType::Rc | QpType::Uc | QpType::XrcRecv => responder::handle_request(qp, cx, now, repr, pkt.payload()),
        // IBA Annex A14: an XRC initiator has no responder; a request to it is dropped.
        QpType::XrcSend => {
            cx.counters.unknown_qp_pkts.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    cx.raise_srq_events(qp);
    if qp_type.reliable() {
        cx.note_timers(qp);
    }
}

fn gsi_receive(gsi: &mut Gsi, cx: &mut Ctx, now: Time, src: IpAddr, repr: &RoceRepr, payload: &[u8]) {
    let Some(deth) = repr.ext.deth.filter(|_| repr.bth.opcode == rnic_wire::Opcode(0x64)) else {
        // Not a plain UD SEND_ONLY (RC/UC opcodes, or SEND with immediate): QP1 takes none.
        cx.counters.unknown_qp_pkts.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if deth.qkey != rnic_wire::mad::GSI_QKEY {
        cx.counters.qkey_viol_cntr.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if payload.len() != rnic_wire::mad::MAD_LEN {
        cx.counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
        return;
    }
    gsi.agent.handle_mad(now, src, deth.src_qp.value(), payload);
}

/// Checks a modify-QP call against IBA's transition table, the attribute ranges and the
/// device's limits; returns the state the QP goes to.
fn check_modify(qp: &Qp, attr: &QpAttr, max_rd: u8, port_mtu: PathMtu) -> Result<QpState, EngineError> {
    let cur = qp.state;
    let mask = attr.mask;
    let next = if mask.contains(QpAttrMask::STATE) { attr.state } else { cur };
    if mask.contains(QpAttrMask::CUR_STATE) && attr.state != cur && !mask.contains(QpAttrMask::STATE) {
        return Err(EngineError::BadAttr(format!("CUR_STATE given as {:?} but the QP is {:?}", attr.state, cur)));
    }
    qp_state::check_modify(qp.shared.qp_type, cur, next, mask)?;
    qp_state::check_values(
        mask,
        &QpAttrValues {
            path_mtu: attr.path_mtu,
            timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            min_rnr_timer: attr.min_rnr_timer,
        },
    )?;
    if mask.contains(QpAttrMask::MAX_QP_RD_ATOMIC) && attr.max_rd_atomic > max_rd {
        return Err(EngineError::BadAttr(format!(
            "max_rd_atomic {} exceeds the device's {max_rd}",
            attr.max_rd_atomic
        )));
    }
    if mask.contains(QpAttrMask::MAX_DEST_RD_ATOMIC) && attr.max_dest_rd_atomic > max_rd {
        return Err(EngineError::BadAttr(format!(
            "max_dest_rd_atomic {} exceeds the device's {max_rd}",
            attr.max_dest_rd_atomic
        )));
    }
    if mask.contains(QpAttrMask::PATH_MTU) && PathMtu::from_ibv(attr.path_mtu).is_some_and(|m| m > port_mtu) {
        return Err(EngineError::BadAttr(format!(
            "path MTU {} is above the port's active MTU {} (on raw Ethernet, the interface's MTU must hold the \
             path MTU plus 64 bytes of headers: raise it, e.g. `ip link set DEV mtu 9000`, or use a smaller path MTU)",
            PathMtu::from_ibv(attr.path_mtu).map_or(0, |m| m.bytes()),
            port_mtu.bytes()
        )));
    }
    if mask.contains(QpAttrMask::AV) && attr.remote_ip.is_none() {
        return Err(EngineError::BadAttr("AV given without a destination address".into()));
    }
    if mask.contains(QpAttrMask::DEST_QPN) && attr.dest_qpn > 0x00FF_FFFF {
        return Err(EngineError::BadAttr(format!("dest_qpn {:#x} does not fit 24 bits", attr.dest_qpn)));
    }
    Ok(next)
}

/// Applies the attributes named by the mask (already checked).
fn apply_attrs(qp: &mut Qp, attr: &QpAttr) {
    let mask = attr.mask;
    let a = &mut qp.attr;
    if mask.contains(QpAttrMask::ACCESS_FLAGS) {
        a.access = attr.access;
    }
    if mask.contains(QpAttrMask::PATH_MTU) {
        a.path_mtu = attr.path_mtu;
        qp.mtu = PathMtu::from_ibv(attr.path_mtu).map_or(1024, |m| m.bytes() as usize);
    }
    if mask.contains(QpAttrMask::DEST_QPN) {
        a.dest_qpn = attr.dest_qpn;
    }
    if mask.contains(QpAttrMask::AV) {
        a.remote_ip = attr.remote_ip;
    }
    if mask.contains(QpAttrMask::RQ_PSN) {
        a.rq_psn = attr.rq_psn & 0x00FF_FFFF;
        qp.resp.epsn = Psn::new(attr.rq_psn);
    }
    if mask.contains(QpAttrMask::SQ_PSN) {
        a.sq_psn = attr.sq_psn & 0x00FF_FFFF;
        qp.req.next_psn = Psn::new(attr.sq_psn);
        qp.req.una = qp.req.next_psn;
        qp.req.sent_end = qp.req.next_psn;
    }
    if mask.contains(QpAttrMask::TIMEOUT) {
        a.timeout = attr.timeout;
    }
    if mask.contains(QpAttrMask::RETRY_CNT) {
        a.retry_cnt = attr.retry_cnt;
        qp.req.retry_left = attr.retry_cnt;
    }
    if mask.contains(QpAttrMask::RNR_RETRY) {
        a.rnr_retry = attr.rnr_retry;
        qp.req.rnr_left = attr.rnr_retry;
    }
    if mask.contains(QpAttrMask::MIN_RNR_TIMER) {
        a.min_rnr_timer = attr.min_rnr_timer;
    }
    if mask.contains(QpAttrMask::MAX_QP_RD_ATOMIC) {
        a.max_rd_atomic = attr.max_rd_atomic;
    }
    if mask.contains(QpAttrMask::MAX_DEST_RD_ATOMIC) {
        a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
    }
    if mask.contains(QpAttrMask::QKEY) {
        a.qkey = attr.qkey;
    }
    if mask.contains(QpAttrMask::PKEY_INDEX) {
        a.pkey_index = attr.pkey_index;
    }
    if mask.contains(QpAttrMask::PORT) {
        a.port = attr.port;
    }
    if mask.contains(QpAttrMask::AV) || mask.contains(QpAttrMask::DEST_QPN) {
        qp.src_port = qp::rc_udp_sport(qp.qpn().value(), qp.attr.dest_qpn);
    }
}

/// Back to a fresh QP in RESET: both sides' state is dropped, the attributes too (and,
/// where the QP asked for it, its completions still in its CQs).
fn reset_qp(qp: &mut Qp) {
    let shared = qp.shared.clone();
    if shared.conduct.purge_cqs_on_reset {
        let qpn = shared.qpn.value();
        qp.send_cq.purge_qp(qpn);
        if !Arc::ptr_eq(&qp.send_cq, &qp.recv_cq) {
            qp.recv_cq.purge_qp(qpn);
        }
    }
    *qp = Qp::new(shared, qp.send_cq.clone(), qp.recv_cq.clone());
    qp.shared.sq_outstanding.store(0, Ordering::Release);
    qp.shared.rq_outstanding.store(0, Ordering::Release);
    qp.shared.set_state(QpState::Reset);
}

/// Sends what the QP's window allows.
fn progress(qp: &mut Qp, cx: &mut Ctx, now: Time) {
    if !qp.shared.qp_type.reliable() {
        unreliable::transmit(qp, cx, now);
    } else {
        requester::transmit(qp, cx, now);
    }
}
