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
//! Where each protocol rule lives: the requester and completer (one sender state
//! machine per QP, as rxe merged them) in `requester.rs`, the responder's pipeline of
//! checks in `responder.rs`, the modify-QP table in [`crate::qp_state`]. The unreliable
//! transports are kept apart: the UC/UD sender in `unreliable.rs`, the UC responder in
//! `uc.rs`, the UD responder and its GRH area in `ud.rs`.

mod packet;
pub mod qp;
mod qp_table;
mod rd_atomic;
mod refusal;
mod requester;
mod responder;
mod uc;
pub mod ud;
mod unreliable;

use crate::counters::Counters;
use crate::cq::Cq;
use crate::mr::Mtpt;
use crate::qp_state::{self, PathMtu, QpAttrMask, QpAttrValues, QpState, QpType};
use crate::wr::{WcOpcode, WcStatus, WorkCompletion};
use qp::{Qp, QpAttr, QpCap, QpShared, RecvWqe, SendWqe};
use rnic_wire::aeth::AethRepr;
use rnic_wire::roce::{RocePacket, RoceRepr};
use rnic_wire::{Psn, Qpn};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Nanoseconds on the engine's clock (virtual in tests, monotonic in the driver).
pub type Time = u64;

/// The first QPN handed out, as rxe does (QP0 and QP1 are special; rxe starts at 0x11).
pub const FIRST_QPN: u32 = 0x11;

/// Static limits of an engine (what `query_device` reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// The device's IP address (source of every packet).
    pub local_ip: IpAddr,
    /// Most QPs.
    pub max_qp: u32,
    /// Unacknowledged packets a QP may have in flight (rxe: 128).
    pub max_unacked_pkts: u32,
    /// Packets between forced AckReq bits in a long message (rxe: 64).
    pub max_pkts_per_ack: u32,
    /// Most outstanding READs as requester or responder a QP may be given.
    pub max_rd_atomic: u8,
    /// Leave payloads of at least 512 bytes that lie in one registered region there
    /// ([`TxPacket::payload`]) instead of copying them into the packet: the UDP
    /// transport sends them from registered memory (one copy fewer per byte).
    pub zero_copy: bool,
}

impl EngineConfig {
    /// Defaults for a device at `local_ip`.
    pub fn new(local_ip: IpAddr) -> EngineConfig {
        EngineConfig {
            local_ip,
            max_qp: 65536,
            max_unacked_pkts: 128,
            max_pkts_per_ack: 64,
            max_rd_atomic: 16,
            zero_copy: false,
        }
    }
}

/// A packet for the transport: BTH..ICRC with the ICRC bytes zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxPacket {
    /// Destination IP.
    pub dst: IpAddr,
    /// UDP source port (the flow's).
    pub src_port: u16,
    /// The packet, ICRC to be filled by the transport; with a [`payload`](Self::payload)
    /// only its headers, then pad and ICRC.
    pub data: Vec<u8>,
    /// With [`EngineConfig::zero_copy`]: the payload, left in registered memory for the
    /// transport to hand to the kernel without copying it. `None`: `data` is the whole
    /// packet.
    pub payload: Option<TxPayload>,
}

/// Payload bytes a packet carries straight from registered memory: on the wire the
/// packet is `data[..at]`, these bytes, then `data[at..]` (pad and ICRC).
#[derive(Clone)]
pub struct TxPayload {
    block: Arc<crate::mem::MemBlock>,
    offset: usize,
    len: usize,
    at: usize,
}

impl std::fmt::Debug for TxPayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxPayload").field("offset", &self.offset).field("len", &self.len).field("at", &self.at).finish()
    }
}

impl PartialEq for TxPayload {
    fn eq(&self, o: &Self) -> bool {
        Arc::ptr_eq(&self.block, &o.block) && (self.offset, self.len, self.at) == (o.offset, o.len, o.at)
    }
}
impl Eq for TxPayload {}

impl TxPacket {
    /// Length on the wire (BTH..ICRC).
    pub fn len(&self) -> usize {
        self.data.len() + self.payload.as_ref().map_or(0, |p| p.len)
    }

    /// Whether the packet is empty (never, for a packet the engine built).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The packet in wire order as up to three pieces: headers, payload, pad and ICRC.
    /// (A packet without a separate payload is one piece.)
    pub fn pieces(&self) -> [&[u8]; 3] {
        match &self.payload {
            None => [&self.data[..], &[], &[]],
            Some(p) => {
                // Bounds were checked when the packet was built (`emit_zero_copy`) and a
                // block never shrinks: the empty fallback is never taken, only no panic.
                let bytes = p.block.bytes(p.offset, p.len).unwrap_or(&[]);
                let at = p.at.min(self.data.len());
                [&self.data[..at], bytes, &self.data[at..]]
            }
        }
    }

    /// The whole packet in one buffer (a copy when the payload is separate).
    pub fn to_vec(&self) -> Vec<u8> {
        if self.payload.is_none() {
            return self.data.clone();
        }
        self.pieces().concat()
    }

    /// Copies a separate payload into `data`, so that `data` is the whole packet.
    pub fn make_contiguous(&mut self) {
        if self.payload.is_some() {
            self.data = self.to_vec();
            self.payload = None;
        }
    }

    /// Writes the ICRC (computed for `ctx`, through `cache`) into the packet's last four
    /// bytes.
    pub fn fill_icrc(
        &mut self,
        cache: &mut rnic_wire::icrc::IcrcCache,
        ctx: &rnic_wire::icrc::IcrcContext,
    ) -> Result<(), rnic_wire::Error> {
        if self.payload.is_none() {
            return cache.fill(ctx, &mut self.data);
        }
        let n = self.data.len();
        let body = n.checked_sub(rnic_wire::ICRC_LEN).ok_or(rnic_wire::Error::Truncated {
            what: "RoCEv2 packet",
            need: rnic_wire::ICRC_LEN,
            have: n,
        })?;
        let icrc = {
            let [head, payload, tail] = self.pieces();
            let tail = &tail[..tail.len().saturating_sub(rnic_wire::ICRC_LEN)];
            cache.compute_parts(ctx, &[head, payload, tail])?
        };
        self.data[body..].copy_from_slice(&icrc.to_le_bytes());
        Ok(())
    }
}

/// Payloads shorter than this are copied into the packet even with zero copy: copying a
/// few hundred bytes costs about what the block's reference count, the bounds check and
/// a third piece per packet do, and small packets then glue into one iovec.
pub(crate) const ZERO_COPY_MIN: usize = 512;

/// Asynchronous events (`ibv_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AsyncEvent {
    /// A QP entered the error state because of an error no completion could report.
    QpFatal {
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
}

/// The protocol engine of one device.
#[derive(Debug)]
pub struct Engine {
    config: EngineConfig,
    mtpt: Arc<Mtpt>,
    counters: Arc<Counters>,
    qps: qp_table::QpTable,
    pub(crate) out: Outbox,
    events: VecDeque<AsyncEvent>,
    /// Armed timers, earliest first: (deadline, QPN). An entry is live only while it is
    /// the QP's `timer_key`; others are skipped lazily, so arming is O(log n) and finding
    /// the next wake-up is O(1) however many QPs there are.
    timers: BinaryHeap<Reverse<(Time, u32)>>,
    /// QPs holding a coalesced ACK, to be sent at the next drain.
    acks: Vec<Qpn>,
    /// `acks`' other buffer while a drain walks it.
    acks_scratch: Vec<Qpn>,
    /// QPs with READ responses still to send, served round-robin a burst at a time.
    reads: VecDeque<Qpn>,
}

/// READ response packets generated per drain of the engine's output (all QPs together):
/// a peer's large READ costs at most this many buffered packets at a time.
pub const READ_BURST: usize = 64;

/// Packets and buffers on their way out; separate from the QPs so both can be borrowed.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    tx: VecDeque<TxPacket>,
    pool: Vec<Vec<u8>>,
    small: Vec<Vec<u8>>,
}

/// Packets up to this size (ACKs, READ requests, small messages) use the small pool.
const SMALL_BUF: usize = 512;
/// Buffers kept per pool.
const POOL_MAX: usize = 1024;

impl Outbox {
    /// Keeps a sent packet's buffer for reuse.
    fn put(&mut self, buf: Vec<u8>) {
        let pool = if buf.capacity() <= SMALL_BUF { &mut self.small } else { &mut self.pool };
        if pool.len() < POOL_MAX {
            pool.push(buf);
        }
    }

    /// Builds one packet: the payload is written in place by `fill`.
    pub(crate) fn emit(
        &mut self,
        counters: &Counters,
        dst: IpAddr,
        src_port: u16,
        repr: &RoceRepr,
        fill: impl FnOnce(&mut [u8]),
    ) {
        let mut buf = self.buffer(repr.buffer_len());
        let ok = repr.emit_with(&mut buf, fill).is_ok();
        self.queue(counters, TxPacket { dst, src_port, data: buf, payload: None }, ok);
    }

    /// Builds one packet whose payload stays in registered memory: `block[offset..]`,
    /// `repr.payload_len` bytes (bounds checked here, once: a block never shrinks).
    pub(crate) fn emit_zero_copy(
        &mut self,
        counters: &Counters,
        dst: IpAddr,
        src_port: u16,
        repr: &RoceRepr,
        block: &Arc<crate::mem::MemBlock>,
        offset: usize,
    ) {
        if block.bytes(offset, repr.payload_len).is_err() {
            counters.send_err.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut buf = self.buffer(repr.buffer_len() - repr.payload_len);
        let at = repr.emit_without_payload(&mut buf);
        let payload = at.as_ref().ok().map(|&at| TxPayload { block: block.clone(), offset, len: repr.payload_len, at });
        self.queue(counters, TxPacket { dst, src_port, data: buf, payload }, at.is_ok());
    }

    /// A buffer of `len` bytes from the pool. Small (ACK-sized) and large buffers are
    /// pooled apart, so that a data packet reuses one already long enough; it is not
    /// zeroed, since the emitters write every byte.
    fn buffer(&mut self, len: usize) -> Vec<u8> {
        let pool = if len <= SMALL_BUF { &mut self.small } else { &mut self.pool };
        let mut buf = pool.pop().unwrap_or_default();
        buf.truncate(len);
        buf.resize(len, 0);
        buf
    }

    /// Queues an emitted packet, or (`ok` false: a repr inconsistent with its opcode, an
    /// engine bug) counts it and keeps its buffer.
    fn queue(&mut self, counters: &Counters, p: TxPacket, ok: bool) {
        if ok {
            counters.sent_pkts.fetch_add(1, Ordering::Relaxed);
            self.tx.push_back(p);
        } else {
            counters.send_err.fetch_add(1, Ordering::Relaxed);
            self.put(p.data);
        }
    }
}

impl Engine {
    /// A new engine using `mtpt` for every key check.
    pub fn new(config: EngineConfig, mtpt: Arc<Mtpt>, counters: Arc<Counters>) -> Engine {
        Engine {
            config,
            mtpt,
            counters,
            qps: qp_table::QpTable::new(),
            out: Outbox::default(),
            events: VecDeque::new(),
            timers: BinaryHeap::new(),
            acks: Vec::new(),
            acks_scratch: Vec::new(),
            reads: VecDeque::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The counters.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// The memory table.
    pub fn mtpt(&self) -> &Arc<Mtpt> {
        &self.mtpt
    }

    pub(crate) fn qp_mut(&mut self, qpn: Qpn) -> Option<&mut Qp> {
        self.qps.get_mut(qpn)
    }

    /// A QP and the outbox, borrowed together.
    pub(crate) fn qp_and_out(&mut self, qpn: Qpn) -> Option<(&mut Qp, &mut Outbox)> {
        let qp = self.qps.get_mut(qpn)?;
        Some((qp, &mut self.out))
    }

    /// Creates a QP in the RESET state.
    pub fn create_qp(
        &mut self,
        qp_type: QpType,
        pd: crate::mr::PdId,
        cap: QpCap,
        sq_sig_all: bool,
        send_cq: Arc<Cq>,
        recv_cq: Arc<Cq>,
    ) -> Result<Arc<QpShared>, EngineError> {
        self.create_qp_with_srq(qp_type, pd, cap, sq_sig_all, send_cq, recv_cq, None)
    }

    /// Creates a QP in the RESET state whose responder takes its receive WQEs from
    /// `srq` (which must belong to the same protection domain).
    #[allow(clippy::too_many_arguments)]
    pub fn create_qp_with_srq(
        &mut self,
        qp_type: QpType,
        pd: crate::mr::PdId,
        cap: QpCap,
        sq_sig_all: bool,
        send_cq: Arc<Cq>,
        recv_cq: Arc<Cq>,
        srq: Option<Arc<crate::srq::Srq>>,
    ) -> Result<Arc<QpShared>, EngineError> {
        if let Some(s) = &srq {
            if s.pd() != pd {
                return Err(EngineError::BadAttr(format!(
                    "SRQ {} belongs to protection domain {}, the QP to {pd}",
                    s.id(),
                    s.pd()
                )));
            }
        }
        if u32::try_from(self.qps.len()).unwrap_or(u32::MAX) >= self.config.max_qp {
            return Err(EngineError::TooManyQps(self.config.max_qp));
        }
        let mut shared = None;
        let mtpt = self.mtpt.clone();
        self.qps
            .insert(|qpn| {
                let s = Arc::new(QpShared::new(qpn, qp_type, pd, cap, sq_sig_all, srq));
                shared = Some(s.clone());
                Qp::new(s, mtpt, send_cq, recv_cq)
            })
            .ok_or(EngineError::TooManyQps(self.config.max_qp))?;
        shared.ok_or(EngineError::TooManyQps(self.config.max_qp))
    }

    /// Destroys a QP; its outstanding work is dropped without completions (verbs
    /// semantics: destroy is not a flush).
    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), EngineError> {
        // What was received is acknowledged, even when the application destroys the QP
        // the moment it sees the last completion (a held ACK would die with the QP and
        // the peer retry until RETRY_EXC_ERR).
        responder::flush_ack(self, qpn);
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
        a.sq_psn = qp.next_psn.value();
        a.rq_psn = qp.epsn.value();
        Ok(a)
    }

    /// Modifies a QP, checked against IBA's transition table (`ibv_modify_qp`).
    pub fn modify_qp(&mut self, now: Time, qpn: Qpn, attr: &QpAttr) -> Result<(), EngineError> {
        // As for destroy: a held ACK leaves before the QP changes state.
        responder::flush_ack(self, qpn);
        let max_rd = self.config.max_rd_atomic;
        let qp = self.qp_mut(qpn).ok_or(EngineError::NoSuchQp(qpn.value()))?;
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
        if mask.contains(QpAttrMask::AV) && attr.remote_ip.is_none() {
            return Err(EngineError::BadAttr("AV given without a destination address".into()));
        }
        if mask.contains(QpAttrMask::DEST_QPN) && attr.dest_qpn > 0x00FF_FFFF {
            return Err(EngineError::BadAttr(format!("dest_qpn {:#x} does not fit 24 bits", attr.dest_qpn)));
        }
        // Apply.
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
            qp.epsn = Psn::new(attr.rq_psn);
        }
        if mask.contains(QpAttrMask::SQ_PSN) {
            a.sq_psn = attr.sq_psn & 0x00FF_FFFF;
            qp.next_psn = Psn::new(attr.sq_psn);
            qp.una = qp.next_psn;
            qp.sent_end = qp.next_psn;
        }
        if mask.contains(QpAttrMask::TIMEOUT) {
            a.timeout = attr.timeout;
        }
        if mask.contains(QpAttrMask::RETRY_CNT) {
            a.retry_cnt = attr.retry_cnt;
            qp.retry_left = attr.retry_cnt;
        }
        if mask.contains(QpAttrMask::RNR_RETRY) {
            a.rnr_retry = attr.rnr_retry;
            qp.rnr_left = attr.rnr_retry;
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
        if next != cur {
            match next {
                QpState::Err => self.enter_error(qpn, None),
                QpState::Reset => self.reset_qp(qpn),
                _ => {
                    if let Some(qp) = self.qp_mut(qpn) {
                        qp.state = next;
                        qp.shared.set_state(next);
                    }
                }
            }
        }
        if next == QpState::Rts {
            // Work posted in SQD (or before a re-arm) can go now.
            self.progress(now, qpn);
            self.note_timers(qpn);
        }
        Ok(())
    }

    fn reset_qp(&mut self, qpn: Qpn) {
        if let Some(qp) = self.qp_mut(qpn) {
            let shared = qp.shared.clone();
            let (s, r) = (qp.send_cq.clone(), qp.recv_cq.clone());
            *qp = Qp::new(shared.clone(), qp.mtpt.clone(), s, r);
            shared.sq_outstanding.store(0, Ordering::Release);
            shared.rq_outstanding.store(0, Ordering::Release);
            shared.set_state(QpState::Reset);
        }
    }

    /// Queues a validated send WQE and transmits what the window allows.
    pub fn post_send(&mut self, now: Time, qpn: Qpn, wqe: SendWqe) {
        let Some(qp) = self.qp_mut(qpn) else { return };
        if qp.state == QpState::Err {
            // IBA 10.3.1 / verbs: WRs posted to a QP in error complete with a flush error.
            let shared = qp.shared.clone();
            let cq = qp.send_cq.clone();
            shared.sq_outstanding.fetch_sub(1, Ordering::AcqRel);
            let wc = flush_wc(wqe.wr_id, wqe.op.wc_opcode(), qpn);
            self.push_wc(&cq, qpn, wc, false);
            return;
        }
        if let crate::wr::SendOp::LocalInv { rkey } = wqe.op {
            self.local_invalidate(now, qpn, wqe, rkey);
            return;
        }
        requester::queue(qp, wqe);
        self.progress(now, qpn);
        self.note_timers(qpn);
    }

    /// LOCAL_INV (IBA 10.6.7, rxe `rxe_do_local_ops`): a local operation executed when the
    /// engine takes it (after every earlier WQE of the queue was handed to the engine) and
    /// completed in order with the rest of the send queue. A key naming no region, or a
    /// region of another PD, fails it with LOC_QP_OP_ERR and the QP enters the error state
    /// (rxe's status for a failed local operation).
    fn local_invalidate(&mut self, now: Time, qpn: Qpn, wqe: SendWqe, rkey: u32) {
        let Some(qp) = self.qp_mut(qpn) else { return };
        let status = qp.mtpt.invalidate_for(rkey, qp.shared.pd).err().map(|_| WcStatus::LocQpOpErr);
        requester::queue_local(qp, wqe, status);
        requester::retire_done(self, now, qpn);
    }

    /// Queues a validated receive WQE.
    pub fn post_recv(&mut self, qpn: Qpn, wqe: RecvWqe) {
        let Some(qp) = self.qp_mut(qpn) else { return };
        if qp.state == QpState::Err {
            let shared = qp.shared.clone();
            let cq = qp.recv_cq.clone();
            shared.rq_outstanding.fetch_sub(1, Ordering::AcqRel);
            let wc = flush_wc(wqe.wr_id, WcOpcode::Recv, qpn);
            self.push_wc(&cq, qpn, wc, false);
            return;
        }
        qp.rq.push_back(wqe);
    }

    /// Handles one received packet: BTH..ICRC, the ICRC already verified.
    pub fn handle_packet(&mut self, now: Time, src: IpAddr, data: &[u8]) {
        let counters = self.counters.clone();
        let pkt = match RocePacket::new_checked(data) {
            Ok(p) => p,
            Err(_) => {
                counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let repr = match RoceRepr::parse(&pkt) {
            Ok(r) => r,
            Err(_) => {
                counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        counters.rcvd_pkts.fetch_add(1, Ordering::Relaxed);
        let info = pkt.info();
        let qpn = repr.bth.dest_qp;
        let Some(qp) = self.qp_mut(qpn) else {
            counters.unknown_qp_pkts.fetch_add(1, Ordering::Relaxed);
            return;
        };
        // IBA C9-? (rxe check_type_state, check_addr): a QP takes only its transport's
        // opcodes; a connected (RC, UC) QP only from its peer, a UD QP from anyone (the
        // DETH says who).
        let qp_type = qp.shared.qp_type;
        let transport_ok = matches!(
            (qp_type, info.transport),
            (QpType::Rc, rnic_wire::opcode::Transport::Rc)
                | (QpType::Uc, rnic_wire::opcode::Transport::Uc)
                | (QpType::Ud, rnic_wire::opcode::Transport::Ud)
        );
        let peer_ok = qp_type == QpType::Ud || qp.attr.remote_ip == Some(src);
        if !transport_ok || !peer_ok || matches!(qp.state, QpState::Reset | QpState::Init) {
            counters.unknown_qp_pkts.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // P_Key (IBA C9-42/43): the default partition's low 15 bits must match.
        if repr.bth.pkey & 0x7fff != 0x7fff {
            self.counters.bad_pkey_cntr.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match qp_type {
            QpType::Ud => ud::handle_request(self, qpn, src, &repr, pkt.payload(), data.len()),
            QpType::Uc => uc::handle_request(self, qpn, &repr, pkt.payload()),
            QpType::Rc => {}
        }
        if qp_type != QpType::Rc {
            self.raise_srq_events(qpn);
            return;
        }
        if info.request {
            responder::handle_request(self, now, qpn, &repr, pkt.payload());
            self.raise_srq_events(qpn);
        } else {
            requester::handle_response(self, now, qpn, &repr, pkt.payload());
        }
        self.note_timers(qpn);
    }

    /// Puts the QP's earliest deadline in the timer heap if it is earlier than the one
    /// already there (a later deadline is found when the earlier entry fires).
    fn note_timers(&mut self, qpn: Qpn) {
        let Some(qp) = self.qp_mut(qpn) else { return };
        let Some(want) = [qp.rto_deadline, qp.rnr_deadline].into_iter().flatten().min() else { return };
        if qp.timer_key.is_none_or(|k| want < k) {
            qp.timer_key = Some(want);
            self.timers.push(Reverse((want, qpn.value())));
        }
    }

    /// The earliest time at which `handle_timeout` may have work to do (it can be early:
    /// a timer pushed back by an ACK is found later when the old deadline passes).
    /// `Some(0)` means output is waiting to be generated (paced READ responses): drain
    /// the transmits again without sleeping.
    pub fn poll_timeout(&self) -> Option<Time> {
        if self.has_pending_transmit() {
            return Some(0);
        }
        self.timers.peek().map(|Reverse((t, _))| *t)
    }

    /// True when `drain_transmits` has (or will generate) packets.
    pub fn has_pending_transmit(&self) -> bool {
        !self.out.tx.is_empty() || !self.acks.is_empty() || !self.reads.is_empty()
    }

    /// Runs every timer that is due at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        while let Some(&Reverse((t, q))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let qpn = Qpn::new(q);
            let Some(qp) = self.qp_mut(qpn) else { continue };
            if qp.timer_key != Some(t) {
                continue; // Superseded by an earlier entry, or the QP was re-created.
            }
            qp.timer_key = None;
            let due = qp.rto_deadline.is_some_and(|d| d <= now) || qp.rnr_deadline.is_some_and(|d| d <= now);
            if due {
                requester::on_timer(self, now, qpn);
            }
            self.note_timers(qpn);
        }
    }

    /// The next packet to transmit.
    pub fn poll_transmit(&mut self) -> Option<TxPacket> {
        if self.out.tx.is_empty() {
            self.generate(true);
        }
        self.out.tx.pop_front()
    }

    /// Moves the queued packets into `out`, after sending the coalesced ACKs and the next
    /// burst of READ responses. Call again while [`has_pending_transmit`](Self::has_pending_transmit)
    /// says so: a large READ comes out [`READ_BURST`] packets per call.
    pub fn drain_transmits(&mut self, out: &mut Vec<TxPacket>) {
        self.generate(true);
        out.extend(self.out.tx.drain(..));
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
        out.extend(self.out.tx.drain(..));
    }

    /// Whether coalesced ACKs are waiting for a drain.
    pub fn has_held_acks(&self) -> bool {
        !self.acks.is_empty()
    }

    /// Sends the held ACKs (unless `acks` is false) and the next burst of READ responses.
    fn generate(&mut self, acks: bool) {
        if acks {
            // An ACK must not overtake READ responses for earlier PSNs: it waits for them.
            // (Swap with a kept buffer rather than take: no allocation per drain.)
            let mut held = std::mem::take(&mut self.acks_scratch);
            std::mem::swap(&mut held, &mut self.acks);
            for qpn in held.drain(..) {
                if self.qp_mut(qpn).is_some_and(|q| q.reads_queued) {
                    self.acks.push(qpn);
                } else {
                    responder::flush_ack(self, qpn);
                }
            }
            self.acks_scratch = held;
        }
        let mut budget = READ_BURST;
        while budget > 0 {
            let Some(qpn) = self.reads.pop_front() else { break };
            let (sent, more) = responder::pump_reads(self, qpn, budget);
            budget = budget.saturating_sub(sent);
            if more {
                self.reads.push_back(qpn);
            } else if let Some(qp) = self.qp_mut(qpn) {
                qp.reads_queued = false;
                let halted = qp.halted;
                responder::flush_ack(self, qpn);
                if halted {
                    self.enter_error(qpn, None);
                }
            }
        }
    }

    /// Holds an acknowledgement (ACK, sequence NAK or RNR NAK) for the QP until the next
    /// drain. A newer one replaces it: each acknowledges everything before its PSN, so
    /// only the newest needs to go (IBA 9.7.5.1.1 allows coalescing).
    pub(crate) fn defer_ack(&mut self, qpn: Qpn, psn: Psn, aeth: AethRepr) {
        let counters = self.counters.clone();
        let Some(qp) = self.qp_mut(qpn) else { return };
        match qp.pending_ack {
            None => {
                qp.pending_ack = Some((psn, aeth));
                self.acks.push(qpn);
            }
            Some((held, held_aeth)) => {
                counters.ack_deferred.fetch_add(1, Ordering::Relaxed);
                // The newer PSN wins; at the same PSN a NAK is never replaced (an RNR NAK
                // must reach the requester as such).
                let d = held.distance(psn);
                let held_is_ack = matches!(held_aeth.syndrome, rnic_wire::aeth::Syndrome::Ack { .. });
                if d > 0 || (d == 0 && held_is_ack) {
                    qp.pending_ack = Some((psn, aeth));
                }
            }
        }
    }

    /// Puts the QP in the list of QPs with READ responses to send.
    pub(crate) fn queue_reads(&mut self, qpn: Qpn) {
        let Some(qp) = self.qp_mut(qpn) else { return };
        if !qp.reads_queued {
            qp.reads_queued = true;
            self.reads.push_back(qpn);
        }
    }

    /// Returns a transmitted packet's buffer for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.out.put(buf);
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    /// Queues the SRQ-limit event the responder of `qpn` noted, if any.
    fn raise_srq_events(&mut self, qpn: Qpn) {
        let Some(qp) = self.qp_mut(qpn) else { return };
        if std::mem::take(&mut qp.srq_limit_hit) {
            if let Some(srq) = qp.shared.srq.as_ref().map(|s| s.id()) {
                self.events.push_back(AsyncEvent::SrqLimitReached { srq });
            }
        }
    }

    /// Sends what the QP's window allows.
    pub(crate) fn progress(&mut self, now: Time, qpn: Qpn) {
        if self.qp_mut(qpn).is_some_and(|q| q.shared.qp_type != QpType::Rc) {
            unreliable::transmit(self, now, qpn);
            return;
        }
        requester::transmit(self, now, qpn);
    }

    /// Pushes a completion; on overflow the QP goes to the error state and a CQ error
    /// is raised (IBA 11.4.2.1).
    pub(crate) fn push_wc(&mut self, cq: &Arc<Cq>, qpn: Qpn, wc: WorkCompletion, solicited: bool) {
        if cq.push(wc, solicited).is_err() {
            self.counters.cq_overflow.fetch_add(1, Ordering::Relaxed);
            if !self.events.contains(&AsyncEvent::CqError { cq: cq.id() }) {
                self.events.push_back(AsyncEvent::CqError { cq: cq.id() });
            }
            let in_error = self.qp_mut(qpn).is_none_or(|q| q.state == QpState::Err);
            if !in_error {
                self.events.push_back(AsyncEvent::QpFatal { qpn: qpn.value() });
                self.enter_error(qpn, None);
            }
        }
    }

    /// Moves a QP to the error state and flushes every outstanding WQE of both queues
    /// with a flush error, in order (IBA 10.3.1, C10-?). `first` is a completion that
    /// must come before the flushes (the one that caused the error).
    pub(crate) fn enter_error(&mut self, qpn: Qpn, first: Option<WorkCompletion>) {
        let Some(qp) = self.qp_mut(qpn) else { return };
        if qp.state == QpState::Err && first.is_none() {
            return;
        }
        qp.state = QpState::Err;
        qp.shared.set_state(QpState::Err);
        qp.rto_deadline = None;
        qp.rnr_deadline = None;
        let send_cq = qp.send_cq.clone();
        let recv_cq = qp.recv_cq.clone();
        let shared = qp.shared.clone();
        let dest = qp.attr.dest_qpn;
        let sq: Vec<_> = qp.sq.drain(..).collect();
        qp.next_send = 0;
        let mut rq: Vec<RecvWqe> = qp.rq.drain(..).collect();
        if let Some(qp::InProgress::Send { rwqe, .. }) = qp.cur.take() {
            rq.insert(0, rwqe);
        }
        let mut wcs = Vec::new();
        if let Some(f) = first {
            wcs.push((true, f));
        }
        for f in sq {
            shared.sq_outstanding.fetch_sub(1, Ordering::AcqRel);
            let mut wc = flush_wc(f.wqe.wr_id, f.wqe.op.wc_opcode(), qpn);
            wc.src_qp = dest;
            wcs.push((true, wc));
        }
        for r in rq {
            shared.rq_outstanding.fetch_sub(1, Ordering::AcqRel);
            wcs.push((false, flush_wc(r.wr_id, WcOpcode::Recv, qpn)));
        }
        for (send, wc) in wcs {
            let cq = if send { &send_cq } else { &recv_cq };
            if cq.push(wc, false).is_err() {
                self.counters.cq_overflow.fetch_add(1, Ordering::Relaxed);
                if !self.events.contains(&AsyncEvent::CqError { cq: cq.id() }) {
                    self.events.push_back(AsyncEvent::CqError { cq: cq.id() });
                }
            }
        }
    }
}

fn flush_wc(wr_id: u64, opcode: WcOpcode, qpn: Qpn) -> WorkCompletion {
    WorkCompletion::new(wr_id, WcStatus::WrFlushErr, opcode, qpn.value())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_wire::icrc::{IcrcCache, IcrcContext};

    /// A packet whose payload stays in registered memory goes on the wire byte for byte
    /// as the copied one, ICRC included, whatever the pad; and a failed bounds check
    /// sends nothing.
    #[test]
    fn zero_copy_packets_equal_copied_ones() {
        let block = Arc::new(crate::mem::MemBlock::new(8192).unwrap());
        let bytes: Vec<u8> = (0..8192u32).map(|i| (i * 13 + 5).to_le_bytes()[0]).collect();
        block.write(0, &bytes).unwrap();
        let counters = Counters::default();
        let ctx = IcrcContext::new("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap(), 49152, 4791);
        let mut cache = IcrcCache::new();
        let send_only = |len: usize| RoceRepr {
            bth: rnic_wire::bth::BthRepr {
                opcode: rnic_wire::opcode::Opcode::RC_SEND_ONLY,
                se: false,
                migreq: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: Qpn::new(0x11),
                ack_req: true,
                psn: Psn::new(42),
            },
            ext: rnic_wire::roce::ExtHeaders::default(),
            payload_len: len,
        };
        for (len, offset) in [(512usize, 0usize), (513, 7), (1023, 100), (4096, 4096)] {
            let repr = send_only(len);
            let mut out = Outbox::default();
            out.emit(&counters, ctx.dst, 49152, &repr, |p| p.copy_from_slice(&bytes[offset..offset + len]));
            out.emit_zero_copy(&counters, ctx.dst, 49152, &repr, &block, offset);
            let mut copied = out.tx.pop_front().unwrap();
            let mut split = out.tx.pop_front().unwrap();
            assert!(copied.payload.is_none() && split.payload.is_some());
            assert_eq!(split.len(), copied.len());
            copied.fill_icrc(&mut cache, &ctx).unwrap();
            split.fill_icrc(&mut cache, &ctx).unwrap();
            assert_eq!(split.to_vec(), copied.data, "len {len} at {offset}");
            ctx.verify(&split.to_vec()).unwrap();
        }
        let mut out = Outbox::default();
        out.emit_zero_copy(&counters, ctx.dst, 1, &send_only(600), &block, 8000);
        assert!(out.tx.is_empty(), "a payload past the block's end is not sent");
        assert_eq!(counters.send_err.load(Ordering::Relaxed), 1);
    }
}
