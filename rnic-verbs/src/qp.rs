//! Queue pairs (`ibv_qp`): the builder, the QP in INIT waiting to be connected, and the
//! QP itself.

use crate::cq::{CompletionQueue, CqBackend};
use crate::pd::{PdBackend, ProtectionDomain};
use crate::srq::{SharedReceiveQueue, SrqBackend};
use crate::types::{random_psn, Endpoint, Gid, MAX_INLINE, MAX_QP_WR, MAX_SGE};
use crate::xrcd::XrcdBackend;
use crate::{
    AccessFlags, Context, EngineError, Error, PathMtu, QpAttr, QpCap, QpState, QpType, RecvWrRef, Result, SendWrRef,
    XrcDomain,
};
use rnic_core::engine::qp::{QpInit, QpShared};
use std::sync::Arc;

/// Builds a queue pair (`ibv_create_qp` plus the attributes `connect` will use).
///
/// Defaults, each changed by the setter of the same name:
///
/// | attribute | default | note |
/// |---|---|---|
/// | `qp_type` | RC | |
/// | `cap` | 256 send and 256 receive WRs, 4 SGEs each, 256 bytes inline | devinfo's limits: `max_qp_wr` 16384, `max_sge` 32 |
/// | `access` | REMOTE_WRITE, REMOTE_READ | add REMOTE_ATOMIC (and FLUSH_GLOBAL) for atomics and FLUSH |
/// | `mtu` | 1024 | `ibv_rc_pingpong`'s default; devinfo's `active_mtu` (4096) is the most the port takes, and `rnic perf` uses it (`-m 4096`), as perftest uses the port's |
/// | `timeout` | 14 (4.096 us x 2^14 = 67 ms) | as perftest and rdma_cm |
/// | `retry_cnt`, `rnr_retry` | 7, 7 (7 = retry RNR forever) | as perftest |
/// | `min_rnr_timer` | 12 (0.64 ms) | as `ibv_rc_pingpong` |
/// | `max_rd_atomic`, `max_dest_rd_atomic` | 1, 1 | devinfo's `max_qp_rd_atom` is 16, and `rnic perf` asks for 16 on RC |
/// | `sq_sig_all` | false | |
/// | `psn` | random | |
/// | `qkey` (UD) | [`DEFAULT_QKEY`](crate::DEFAULT_QKEY) | |
///
/// XRC (IBA Annex A14): `.qp_type(QpType::XrcSend)` builds an initiator, which has no
/// receive side (the receive CQ is not used) and names the remote XRC SRQ in each work
/// request ([`SendWrRef::to_srq`]); `.qp_type(QpType::XrcRecv).xrcd(&domain)` builds a
/// target in an XRC domain, which has no PD, CQ or receive queue of its own: each request
/// is checked against the PD of the XRC SRQ it names and completes in that SRQ's CQ. The
/// target's PD and CQs given to the builder are only its handle's parents (the device it
/// is on); nothing completes in them. Both connect as RC does.
#[derive(Debug, Clone)]
pub struct QpBuilder {
    pub(crate) pd: ProtectionDomain,
    pub(crate) send_cq: CompletionQueue,
    pub(crate) recv_cq: CompletionQueue,
    pub(crate) qp_type: QpType,
    pub(crate) cap: QpCap,
    pub(crate) sq_sig_all: bool,
    pub(crate) access: AccessFlags,
    pub(crate) mtu: PathMtu,
    pub(crate) timeout: u8,
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
    pub(crate) min_rnr_timer: u8,
    pub(crate) max_rd_atomic: u8,
    pub(crate) max_dest_rd_atomic: u8,
    pub(crate) psn: Option<u32>,
    pub(crate) srq: Option<SharedReceiveQueue>,
    pub(crate) xrcd: Option<XrcDomain>,
    pub(crate) qkey: u32,
}

macro_rules! setter {
    ($(#[$m:meta])* $name:ident: $t:ty) => {
        $(#[$m])*
        pub fn $name(mut self, v: $t) -> Self {
            self.$name = v;
            self
        }
    };
}

impl QpBuilder {
    setter!(
        /// Queue sizes and limits.
        cap: QpCap
    );
    setter!(
        /// Complete every send WR (else only those flagged signaled).
        sq_sig_all: bool
    );
    setter!(
        /// Remote operations the QP accepts (REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC).
        access: AccessFlags
    );
    setter!(
        /// Path MTU.
        mtu: PathMtu
    );
    setter!(
        /// Local ACK timeout exponent (4.096 us * 2^timeout; 0 = infinite).
        timeout: u8
    );
    setter!(
        /// Transport retries.
        retry_cnt: u8
    );
    setter!(
        /// RNR retries (7 = infinite).
        rnr_retry: u8
    );
    setter!(
        /// RNR timer code this QP's responder sends.
        min_rnr_timer: u8
    );
    setter!(
        /// Outstanding READs as requester.
        max_rd_atomic: u8
    );
    setter!(
        /// Outstanding READs as responder.
        max_dest_rd_atomic: u8
    );
    setter!(
        /// Transport: [`QpType::Rc`] (the default), [`QpType::Uc`], [`QpType::Ud`], or an
        /// XRC initiator ([`QpType::XrcSend`]) or target ([`QpType::XrcRecv`], with
        /// [`xrcd`](Self::xrcd)).
        qp_type: QpType
    );
    setter!(
        /// UD: the QP's Q_Key, checked against every datagram received and sent by WRs whose
        /// Q_Key has the high bit set (default [`DEFAULT_QKEY`](crate::DEFAULT_QKEY)).
        qkey: u32
    );

    /// Takes receive WQEs from `srq` instead of the QP's own receive queue (posting
    /// receives to the QP then fails).
    pub fn srq(mut self, srq: &SharedReceiveQueue) -> Self {
        self.srq = Some(srq.clone());
        self
    }

    /// An XRC target ([`QpType::XrcRecv`]): the XRC domain whose SRQs its requests name.
    pub fn xrcd(mut self, xrcd: &XrcDomain) -> Self {
        self.xrcd = Some(xrcd.clone());
        self
    }

    /// The first PSN (random if not set).
    pub fn psn(mut self, psn: u32) -> Self {
        self.psn = Some(psn & 0x00FF_FFFF);
        self
    }

    /// The XRC rules the builder can check before the device does: a target needs a
    /// domain of the PD's device, nothing else takes one, and no XRC QP takes an SRQ.
    fn check_xrc(&self) -> Result<()> {
        let bad = |why: String| Err(Error::InvalidArgument { op: "create QP", why });
        match (self.qp_type, &self.xrcd) {
            (QpType::XrcRecv, None) => {
                return bad("an XRC target (XrcRecv) lives in an XRC domain: give it one with .xrcd(&domain)".into())
            }
            (QpType::XrcRecv, Some(d)) if !d.ctx.same_device(&self.pd.inner.ctx) => {
                return bad(format!(
                    "the XRC domain belongs to device {}, the protection domain to {}",
                    d.ctx.name(),
                    self.pd.inner.ctx.name()
                ))
            }
            (t, Some(_)) if t != QpType::XrcRecv => {
                return bad(format!("a {t} QP has no XRC domain (only an XrcRecv target takes .xrcd)"))
            }
            _ => {}
        }
        if let (QpType::XrcSend | QpType::XrcRecv, Some(_)) = (self.qp_type, &self.srq) {
            return bad(format!(
                "a {} QP takes no SRQ (IBA Annex A14: a target's requests name the XRC SRQs of its domain, \
                 an initiator has no receive side)",
                self.qp_type,
            ));
        }
        Ok(())
    }

    /// Creates the QP and moves it to INIT.
    pub fn build(self) -> Result<PreparedQp> {
        let ctx = self.pd.inner.ctx.clone();
        let c = self.cap;
        // A QP, its CQs and its SRQ live on one device (ibv_create_qp: EINVAL otherwise).
        for (what, other) in [("send CQ", &self.send_cq.ctx), ("receive CQ", &self.recv_cq.ctx)]
            .into_iter()
            .chain(self.srq.as_ref().map(|s| ("SRQ", &s.pd.inner.ctx)))
        {
            if !other.same_device(&ctx) {
                return Err(Error::InvalidArgument {
                    op: "create QP",
                    why: format!(
                        "the {what} belongs to device {} ({}), the protection domain to {} ({})",
                        other.name(),
                        other.ip(),
                        ctx.name(),
                        ctx.ip()
                    ),
                });
            }
        }
        self.check_xrc()?;
        if let Some(s) = &self.srq {
            if !Arc::ptr_eq(&s.pd.inner, &self.pd.inner) {
                return Err(Error::InvalidArgument {
                    op: "create QP",
                    why: format!("SRQ {} belongs to another protection domain", s.id()),
                });
            }
        }
        if ctx.kind() == crate::DeviceKind::Emulated {
            // The emulator's limits (a hardware device checks its own and may grant more).
            if c.max_send_wr > MAX_QP_WR || c.max_recv_wr > MAX_QP_WR {
                return Err(Error::InvalidArgument { op: "create QP", why: format!("queue depth above {MAX_QP_WR}") });
            }
            if c.max_send_sge > MAX_SGE || c.max_recv_sge > MAX_SGE {
                return Err(Error::InvalidArgument { op: "create QP", why: format!("more than {MAX_SGE} SGEs") });
            }
            if c.max_inline_data > MAX_INLINE {
                return Err(Error::InvalidArgument {
                    op: "create QP",
                    why: format!("inline data above {MAX_INLINE} bytes"),
                });
            }
        }
        let b = match &self.pd.inner.b {
            PdBackend::Emu(_) => {
                let (e, id) = self.pd.emu_pd();
                let emu_cq = |cq: &CompletionQueue| match &cq.b {
                    CqBackend::Emu(c) => c.clone(),
                    #[cfg(feature = "hw")]
                    CqBackend::Hw(_) => unreachable!("checked: same device"),
                };
                let srq = self.srq.as_ref().map(|s| match &s.b {
                    SrqBackend::Emu(s) => s.clone(),
                    #[cfg(feature = "hw")]
                    SrqBackend::Hw(_) => unreachable!("checked: same device"),
                });
                let init = match (&self.xrcd, self.qp_type) {
                    (Some(XrcDomain { b: XrcdBackend::Emu(d), .. }), _) => QpInit::xrc_target(d.clone()),
                    #[cfg(feature = "hw")]
                    (Some(_), _) => unreachable!("checked: same device"),
                    // IBA Annex A14: an initiator has no receive queue.
                    (None, QpType::XrcSend) => {
                        QpInit::new(self.qp_type, id, emu_cq(&self.send_cq), emu_cq(&self.send_cq))
                            .cap(QpCap { max_recv_wr: 0, max_recv_sge: 0, ..c })
                            .sq_sig_all(self.sq_sig_all)
                    }
                    (None, _) => QpInit::new(self.qp_type, id, emu_cq(&self.send_cq), emu_cq(&self.recv_cq))
                        .cap(c)
                        .sq_sig_all(self.sq_sig_all)
                        .srq(srq),
                };
                let shared = e.dev.create_qp(init).map_err(|e| Error::from_device(e, Error::CreateQp))?;
                QpBackend::Emu(shared)
            }
            #[cfg(feature = "hw")]
            PdBackend::Hw(pd) => {
                let hw_cq = |cq: &CompletionQueue| match &cq.b {
                    CqBackend::Hw(c) => c.clone(),
                    CqBackend::Emu(_) => unreachable!("checked: same device"),
                };
                let init = crate::hw::HwQpInit {
                    qp_type: self.qp_type,
                    cap: c,
                    sq_sig_all: self.sq_sig_all,
                    send_cq: hw_cq(&self.send_cq),
                    recv_cq: hw_cq(&self.recv_cq),
                    srq: self.srq.as_ref().map(|s| match &s.b {
                        SrqBackend::Hw(s) => s.clone(),
                        SrqBackend::Emu(_) => unreachable!("checked: same device"),
                    }),
                    xrcd: self.xrcd.as_ref().map(|d| match &d.b {
                        XrcdBackend::Hw(d) => d.clone(),
                        XrcdBackend::Emu(_) => unreachable!("checked: same device"),
                    }),
                };
                QpBackend::Hw(pd.create_qp(&init).map_err(crate::context::hw_err("create QP", ctx.name()))?)
            }
        };
        let qp = QueuePair {
            inner: Arc::new(QpInner {
                pd: self.pd.clone(),
                send_cq: self.send_cq.clone(),
                recv_cq: self.recv_cq.clone(),
                b,
            }),
        };
        // The INIT attributes of the QP type's column of the modify-QP table: a UD QP
        // takes a Q_Key and no access flags.
        let init = QpAttr {
            state: QpState::Init,
            access: self.access,
            qkey: self.qkey,
            pkey_index: 0,
            port: 1,
            ..QpAttr::default()
        }
        .required_from(self.qp_type, QpState::Reset)
        .ok_or_else(|| Error::InvalidArgument { op: "create QP", why: "no RESET->INIT transition".into() })?;
        qp.modify(&init)?;
        let psn = self.psn.unwrap_or_else(random_psn);
        Ok(PreparedQp { qp, psn, b: self })
    }
}

/// A QP in INIT, ready to be connected.
#[derive(Debug)]
pub struct PreparedQp {
    pub(crate) qp: QueuePair,
    pub(crate) psn: u32,
    pub(crate) b: QpBuilder,
}

impl PreparedQp {
    /// This side's endpoint, to send to the peer.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint { qpn: self.qp.qpn(), gid: Gid::from_ip(self.qp.context().ip()), psn: self.psn }
    }

    /// The QP (already usable for posting receives).
    pub fn qp(&self) -> &QueuePair {
        &self.qp
    }

    /// Moves a UD QP to RTR and RTS: a datagram QP has no peer to connect to (each send
    /// names its destination).
    pub fn activate(self) -> Result<QueuePair> {
        let qpn = self.qp.qpn();
        if self.b.qp_type != QpType::Ud {
            return Err(Error::InvalidArgument {
                op: "activate QP",
                why: format!("QP {qpn:#x} is {}: connected QPs use connect(peer endpoint)", self.b.qp_type),
            });
        }
        self.bring_up(QpAttr::default())
    }

    /// Connects to `remote`: INIT -> RTR -> RTS.
    pub fn connect(self, remote: &Endpoint) -> Result<QueuePair> {
        if self.b.qp_type == QpType::Ud {
            return Err(Error::InvalidArgument {
                op: "connect QP",
                why: format!("QP {:#x} is UD, which is not connected: use activate()", self.qp.qpn()),
            });
        }
        let b = &self.b;
        let path = QpAttr {
            remote_ip: Some(remote.gid.to_ip()),
            path_mtu: b.mtu.to_ibv(),
            dest_qpn: remote.qpn,
            rq_psn: remote.psn,
            max_dest_rd_atomic: b.max_dest_rd_atomic,
            min_rnr_timer: b.min_rnr_timer,
            ..QpAttr::default()
        };
        self.bring_up(path)
    }

    /// INIT -> RTR with the attributes in `rtr`, then RTS with this side's PSN and retry
    /// settings; each step takes what the QP type's column of the modify-QP table
    /// requires (RC: everything; UC: no READ/atomic, RNR or acknowledgement-timer
    /// attributes; UD: only the PSN).
    fn bring_up(self, rtr: QpAttr) -> Result<QueuePair> {
        let (qpn, t, b) = (self.qp.qpn(), self.b.qp_type, &self.b);
        let step = |a: QpAttr, from: QpState, name: &'static str| {
            let a = a.required_from(t, from).ok_or_else(|| Error::InvalidArgument {
                op: "connect QP",
                why: format!("{t} has no {name} transition"),
            })?;
            self.qp.modify_as(&a, name, |source| Error::Connect { qpn, step: name, source })
        };
        step(QpAttr { state: QpState::Rtr, ..rtr }, QpState::Init, "INIT->RTR")?;
        let rts = QpAttr {
            state: QpState::Rts,
            sq_psn: self.psn,
            timeout: b.timeout,
            retry_cnt: b.retry_cnt,
            rnr_retry: b.rnr_retry,
            max_rd_atomic: b.max_rd_atomic,
            ..QpAttr::default()
        };
        step(rts, QpState::Rtr, "RTR->RTS")?;
        Ok(self.qp)
    }
}

#[derive(Debug)]
enum QpBackend {
    Emu(Arc<QpShared>),
    #[cfg(feature = "hw")]
    Hw(crate::hw::HwQp),
}

#[derive(Debug)]
struct QpInner {
    pd: ProtectionDomain,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    b: QpBackend,
}

impl Drop for QpInner {
    fn drop(&mut self) {
        if let QpBackend::Emu(shared) = &self.b {
            let (e, _) = self.pd.emu_pd();
            let _ = e.dev.destroy_qp(shared.qpn);
        }
        // A hardware QP is destroyed (ibv_destroy_qp) when its last handle goes.
    }
}

#[cfg(feature = "hw")]
macro_rules! hw {
    ($self:ident, $op:literal) => {
        crate::context::hw_err($op, $self.context().name())
    };
}

/// A queue pair (`ibv_qp`). Clones share the QP; it is destroyed with the last one.
#[derive(Clone, Debug)]
pub struct QueuePair {
    inner: Arc<QpInner>,
}

impl QueuePair {
    /// QP number.
    pub fn qpn(&self) -> u32 {
        match &self.inner.b {
            QpBackend::Emu(s) => s.qpn.value(),
            #[cfg(feature = "hw")]
            QpBackend::Hw(q) => q.qpn(),
        }
    }

    /// Current state (on hardware, `ibv_query_qp`'s; a query that fails reads as ERR).
    pub fn state(&self) -> QpState {
        match &self.inner.b {
            QpBackend::Emu(s) => s.state(),
            #[cfg(feature = "hw")]
            QpBackend::Hw(q) => q.query().map_or(QpState::Err, |a| a.state),
        }
    }

    /// Transport service (RC, UC or UD).
    pub fn qp_type(&self) -> QpType {
        match &self.inner.b {
            QpBackend::Emu(s) => s.qp_type,
            #[cfg(feature = "hw")]
            QpBackend::Hw(q) => q.qp_type(),
        }
    }

    /// Queue sizes granted (a hardware device may grant more than asked).
    pub fn cap(&self) -> QpCap {
        match &self.inner.b {
            QpBackend::Emu(s) => s.cap,
            #[cfg(feature = "hw")]
            QpBackend::Hw(q) => q.cap(),
        }
    }

    /// The device.
    pub fn context(&self) -> &Context {
        &self.inner.pd.inner.ctx
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    /// The send CQ.
    pub fn send_cq(&self) -> &CompletionQueue {
        &self.inner.send_cq
    }

    /// The receive CQ.
    pub fn recv_cq(&self) -> &CompletionQueue {
        &self.inner.recv_cq
    }

    /// A modify whose failure `wrap` turns into the caller's error (emulator) or the
    /// hardware error naming `op`.
    #[cfg_attr(not(feature = "hw"), allow(unused_variables))]
    pub(crate) fn modify_as(
        &self,
        attr: &QpAttr,
        op: &'static str,
        wrap: impl FnOnce(EngineError) -> Error,
    ) -> Result<()> {
        match &self.inner.b {
            QpBackend::Emu(s) => {
                let (e, _) = self.inner.pd.emu_pd();
                e.dev.modify_qp(s.qpn, *attr).map_err(|e| match e {
                    rnic_core::device::DeviceError::Engine(x) => wrap(x),
                    other => wrap(EngineError::BadAttr(other.to_string())),
                })
            }
            #[cfg(feature = "hw")]
            QpBackend::Hw(q) => {
                // Refused here as the emulator refuses it: rxe accepts a path MTU above its
                // netdev's and then retries each too-large packet's send error forever (the
                // guest's rxe counted millions of send_err with nothing completing).
                if attr.mask.contains(crate::QpAttrMask::PATH_MTU) {
                    let active = self.context().query_port()?.active_mtu;
                    if let Some(m) = PathMtu::from_ibv(attr.path_mtu).filter(|&m| m > active) {
                        return Err(wrap(EngineError::BadAttr(format!(
                            "path MTU {} is above {}'s active MTU {} (set by its link's MTU: raise that, or use a \
                             smaller path MTU)",
                            m.bytes(),
                            self.context().name(),
                            active.bytes()
                        ))));
                    }
                }
                q.modify(attr).map_err(crate::context::hw_err(op, self.context().name()))
            }
        }
    }

    /// Attaches this UD QP to the multicast group `gid` (`ibv_attach_mcast`): every
    /// datagram sent to the group with the multicast QPN ([`MULTICAST_QPN`](crate::MULTICAST_QPN)) and this QP's
    /// Q_Key arrives on it as on every other QP attached, on any device (IBA 10.5). On
    /// RoCEv2 the GID is the group's IP address: `::ffff:224.x.y.z` (an IPv4 group, as
    /// [`Gid::from_ip`](crate::Gid::from_ip) makes it) or an IPv6 `ff..` address, of the
    /// device's IP version; the device joins the IP group on its interface. Attaching
    /// twice is no error; a QP that is not UD and a GID that is not multicast are refused.
    pub fn attach_mcast(&self, gid: crate::Gid) -> Result<()> {
        self.mcast(gid, true)
    }

    /// Detaches this QP from multicast group `gid` (`ibv_detach_mcast`); a QP that is not
    /// attached is refused.
    pub fn detach_mcast(&self, gid: crate::Gid) -> Result<()> {
        self.mcast(gid, false)
    }

    fn mcast(&self, gid: crate::Gid, attach: bool) -> Result<()> {
        let op = if attach { "attach to multicast group" } else { "detach from multicast group" };
        let qpn = self.qpn();
        match &self.inner.b {
            QpBackend::Emu(s) => {
                let (e, _) = self.inner.pd.emu_pd();
                let (group, dev) = (gid.to_ip(), &e.dev);
                let r = if attach { dev.attach_mcast(s.qpn, group) } else { dev.detach_mcast(s.qpn, group) };
                r.map_err(|source| Error::Mcast { op, qpn, gid, source })
            }
            #[cfg(feature = "hw")]
            QpBackend::Hw(q) => q.mcast(gid.0, attach).map_err(hw!(self, "attach/detach multicast")),
        }
    }

    /// Modifies the QP (`ibv_modify_qp`), checked against IBA's table of transitions and
    /// required/optional attributes.
    pub fn modify(&self, attr: &QpAttr) -> Result<()> {
        let qpn = self.qpn();
        self.modify_as(attr, "modify QP", |source| Error::ModifyQp { qpn, source })
    }

    /// Reads the QP's attributes (`ibv_query_qp`).
    pub fn query(&self) -> Result<QpAttr> {
        let qpn = self.qpn();
        match &self.inner.b {
            QpBackend::Emu(s) => {
                let (e, _) = self.inner.pd.emu_pd();
                e.dev.query_qp(s.qpn).map_err(|e| Error::from_device(e, |source| Error::QueryQp { qpn, source }))
            }
            #[cfg(feature = "hw")]
            QpBackend::Hw(q) => q.query().map_err(hw!(self, "query QP")),
        }
    }

    /// Posts a send work request (`ibv_post_send`): a [`SendWr`](crate::SendWr) or a
    /// [`SendWrRef`] that borrows its SGE list.
    pub fn post_send<'a>(&self, wr: impl Into<SendWrRef<'a>>) -> Result<()> {
        match &self.inner.b {
            QpBackend::Emu(s) => {
                let (e, _) = self.inner.pd.emu_pd();
                e.dev.post_send(s, wr).map_err(|source| Error::PostSend { qpn: self.qpn(), source })
            }
            #[cfg(feature = "hw")]
            QpBackend::Hw(q) => q.post_send([wr.into()]).map_err(hw!(self, "post send")),
        }
    }

    /// Posts a list of send work requests in one call, in order (`ibv_post_send` with a
    /// chained list): `&[SendWr]`, `&[SendWrRef]` or any iterator of either, so a batch
    /// built from borrowed SGE slices allocates nothing on the emulator. Stops at the
    /// first one refused: the error says which (those before it are posted, as `bad_wr`
    /// tells in verbs). Returns how many were posted. On hardware the list goes to the
    /// provider as one chained call.
    pub fn post_send_list<'a, W: Into<SendWrRef<'a>>>(&self, wrs: impl IntoIterator<Item = W>) -> Result<usize> {
        match &self.inner.b {
            QpBackend::Emu(s) => {
                let (e, _) = self.inner.pd.emu_pd();
                let mut n = 0;
                for wr in wrs {
                    e.dev.post_send(s, wr).map_err(|source| Error::PostList {
                        qpn: self.qpn(),
                        queue: "send",
                        index: n,
                        source,
                    })?;
                    n += 1;
                }
                Ok(n)
            }
            #[cfg(feature = "hw")]
            QpBackend::Hw(q) => {
                let wrs: Vec<SendWrRef<'a>> = wrs.into_iter().map(Into::into).collect();
                q.post_send(wrs.iter().copied()).map_err(hw!(self, "post send list"))?;
                Ok(wrs.len())
            }
        }
    }

    /// Posts a receive work request (`ibv_post_recv`): a [`RecvWr`](crate::RecvWr) or a
    /// [`RecvWrRef`].
    pub fn post_recv<'a>(&self, wr: impl Into<RecvWrRef<'a>>) -> Result<()> {
        match &self.inner.b {
            QpBackend::Emu(s) => {
                let (e, _) = self.inner.pd.emu_pd();
                e.dev.post_recv(s, wr).map_err(|source| Error::PostRecv { qpn: self.qpn(), source })
            }
            #[cfg(feature = "hw")]
            QpBackend::Hw(q) => q.post_recv([wr.into()]).map_err(hw!(self, "post receive")),
        }
    }

    /// Posts a list of receive work requests in one call (see [`post_send_list`](Self::post_send_list)).
    pub fn post_recv_list<'a, W: Into<RecvWrRef<'a>>>(&self, wrs: impl IntoIterator<Item = W>) -> Result<usize> {
        match &self.inner.b {
            QpBackend::Emu(s) => {
                let (e, _) = self.inner.pd.emu_pd();
                let mut n = 0;
                for wr in wrs {
                    e.dev.post_recv(s, wr).map_err(|source| Error::PostList {
                        qpn: self.qpn(),
                        queue: "receive",
                        index: n,
                        source,
                    })?;
                    n += 1;
                }
                Ok(n)
            }
            #[cfg(feature = "hw")]
            QpBackend::Hw(q) => {
                let wrs: Vec<RecvWrRef<'a>> = wrs.into_iter().map(Into::into).collect();
                q.post_recv(wrs.iter().copied()).map_err(hw!(self, "post receive list"))?;
                Ok(wrs.len())
            }
        }
    }
}
