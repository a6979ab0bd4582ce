//! Connection management, rdma_cm's way: the passive side listens on a port and answers
//! connect requests; the active side connects to an address and port; both learn what
//! happens from the device's CM event stream. Underneath, the device's IB CM speaks REQ,
//! REP, RTU, REJ, DREQ and DREP in MADs on QP1, with rdma_cm's service IDs (TCP port
//! space) and its 36-byte addressing header, so a Linux peer's rdma_cm talks to it.
//!
//! UD QPs are not connected but *resolved*, as rdma_cm's UDP port space does: the active
//! side asks for the UD QP behind a port with a SIDR_REQ ([`Context::cm_resolve_ud`]), the
//! passive side answers with its UD QP's number and Q_Key ([`Context::cm_accept_ud`]), and
//! each datagram then names that destination (see [`Context::cm_resolve_ud`]'s example).
//!
//! ```no_run
//! use rnic_verbs::*;
//! use std::time::Duration;
//! # fn main() -> Result<()> {
//! // Passive side.
//! let ctx = Context::open("rnic0")?;
//! let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(64)?);
//! ctx.cm_listen(7174)?;
//! if let CmEvent::ConnectRequest(req) = ctx.cm_get_event(Duration::from_secs(10))? {
//!     let qp = pd.qp_builder(&cq, &cq).build()?;
//!     let conn = ctx.cm_accept(&req, qp, b"welcome")?;   // the QP is in RTS
//!     // ... post work requests on conn.qp; cm_get_event says Established, later Disconnected
//! }
//! // Active side (another device or process):
//! let ctx = Context::open("rnic1")?;
//! let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(64)?);
//! let qp = pd.qp_builder(&cq, &cq).build()?;
//! let conn = ctx.cm_connect(qp, "127.0.0.1".parse().unwrap(), 7174, b"hello", Duration::from_secs(10))?;
//! conn.disconnect(b"")?;
//! # Ok(()) }
//! ```

use crate::{Context, Error, PreparedQp, QpAttr, QpState, QpType, QueuePair, Result, UdDest};
use rnic_core::cm as core;
use rnic_wire::cm::{port_space, rej_reason, service_id, CmTransport, CmaHeader, SidrStatus, CMA_HDR_LEN};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Private data the application may put in a REQ (92 bytes less rdma_cm's header).
pub const REQ_PRIVATE_DATA: usize = 92 - CMA_HDR_LEN;

/// Private data the application may put in a SIDR_REQ (216 bytes less rdma_cm's header).
pub const SIDR_PRIVATE_DATA: usize = 216 - CMA_HDR_LEN;

/// The Q_Key of rdma_cm's UDP port space (`RDMA_UDP_QKEY`): build UD QPs that a Linux
/// rdma_cm peer resolves with it (`qp_builder(..).qkey(RDMA_UDP_QKEY)`).
pub const RDMA_UDP_QKEY: u32 = rnic_wire::cm::RDMA_UDP_QKEY;

/// A request for the UD QP behind a port, as the passive side sees it (rdma_cm's
/// CONNECT_REQUEST on a UDP-port-space ID): answer with [`Context::cm_accept_ud`] or
/// [`Context::cm_reject_ud`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdRequest {
    /// The request's ID on this side.
    pub id: u32,
    /// The requester's address.
    pub src: IpAddr,
    /// Its source port (rdma_cm's header).
    pub src_port: u16,
    /// The port it asked for.
    pub port: u16,
    /// The application's private data (after rdma_cm's header).
    pub private_data: Vec<u8>,
}

/// A remote UD QP found by [`Context::cm_resolve_ud`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdRemote {
    /// The request's ID on this side.
    pub id: u32,
    /// The address asked.
    pub dst: IpAddr,
    /// The remote UD QP.
    pub qpn: u32,
    /// The Q_Key it takes.
    pub qkey: u32,
    /// The SIDR_REP's private data (136 bytes).
    pub private_data: Vec<u8>,
}

impl UdRemote {
    /// Where a UD send to this QP goes ([`SendWr::to`](crate::SendWr::to)).
    pub fn dest(&self) -> UdDest {
        UdDest { dst: self.dst, remote_qpn: self.qpn, remote_qkey: self.qkey }
    }
}

/// A connection request, as the passive side sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    /// The connection's ID on this side.
    pub id: u32,
    /// The active side's address.
    pub src: IpAddr,
    /// Its source port (rdma_cm's header).
    pub src_port: u16,
    /// The port it asked for.
    pub port: u16,
    /// The application's private data (after rdma_cm's header).
    pub private_data: Vec<u8>,
    req: Box<core::ReqInfo>,
}

/// What the Communication Manager tells the application.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CmEvent {
    /// Someone wants to connect to a port this device listens on: `cm_accept` or `cm_reject`.
    ConnectRequest(ConnectRequest),
    /// Someone asks for the UD QP behind a UDP port this device listens on
    /// (`cm_listen_ud`): `cm_accept_ud` or `cm_reject_ud`.
    UdRequest(UdRequest),
    /// A connection is up (the passive side learns it from the RTU).
    Established {
        /// The connection.
        id: u32,
    },
    /// The peer rejected a connection (or nobody listened: `reason` 8).
    Rejected {
        /// The connection.
        id: u32,
        /// IBA Table 109.
        reason: u16,
        /// The REJ's private data.
        private_data: Vec<u8>,
    },
    /// The connection was closed by either side.
    Disconnected {
        /// The connection.
        id: u32,
        /// The DREQ's private data.
        private_data: Vec<u8>,
    },
    /// The peer stopped answering during the handshake.
    TimedOut {
        /// The connection.
        id: u32,
    },
}

/// rdma_cm's words for a SIDR_REP status that is not "valid".
fn sidr_refusal(status: SidrStatus) -> String {
    match status {
        SidrStatus::Valid => "valid".into(),
        SidrStatus::ServiceIdNotSupported => "service ID not supported".into(),
        SidrStatus::Rejected => "rejected".into(),
        SidrStatus::NoQp => "no QP".into(),
        SidrStatus::Redirect => "redirect (not followed)".into(),
        SidrStatus::ClassVersionNotSupported => "class version not supported".into(),
        SidrStatus::Unknown(v) => format!("status {v}"),
    }
}

/// A connected QP and the ID of its connection.
#[derive(Debug)]
pub struct Connection {
    /// The QP, in RTS.
    pub qp: QueuePair,
    /// The connection's ID on this side.
    pub id: u32,
    /// The peer's private data (the REP's for the active side; the REQ's application part
    /// for the passive side).
    pub private_data: Vec<u8>,
    ctx: Context,
}

impl Connection {
    /// Sends a DREQ; [`CmEvent::Disconnected`] follows. Move the QP to ERR (or destroy it)
    /// to flush what it still holds.
    pub fn disconnect(&self, private_data: &[u8]) -> Result<()> {
        let (id, pd) = (self.id, private_data.to_vec());
        self.ctx.cm_call("disconnect", move |cm, now| cm.disconnect(now, id, &pd))
    }
}

fn cm_err(op: &'static str, e: impl std::fmt::Display) -> Error {
    Error::Cm { op, why: e.to_string() }
}

impl Context {
    fn cm_call<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut core::CmAgent, u64) -> std::result::Result<T, core::CmError> + Send + 'static,
    ) -> Result<T> {
        self.emu(op)?.dev.cm_call(f).map_err(Error::DeviceStopped)?.map_err(|e| cm_err(op, e))
    }

    /// Accepts connect requests for `port` (rdma_cm's TCP port space, as `rdma_listen`).
    pub fn cm_listen(&self, port: u16) -> Result<()> {
        self.cm_call("listen", move |cm, _| cm.listen(service_id(port_space::TCP, port)))
    }

    /// The next CM event, waiting up to `timeout`.
    pub fn cm_get_event(&self, timeout: Duration) -> Result<CmEvent> {
        let e = self.emu("CM get event")?;
        let deadline = Instant::now() + timeout;
        loop {
            let raw = match self.take_stashed() {
                Some(e) => e,
                None => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    e.dev.cm_events().recv_timeout(left).map_err(|_| Error::EventTimeout(timeout))?
                }
            };
            e.dev.cm_fd_rearm();
            if let Some(ev) = convert(raw) {
                return Ok(ev);
            }
        }
    }

    /// The next CM event, if one is waiting.
    pub fn cm_poll_event(&self) -> Result<Option<CmEvent>> {
        let e = self.emu("CM poll event")?;
        loop {
            let raw = self.take_stashed().or_else(|| e.dev.cm_events().try_recv().ok());
            // The fd stays readable exactly while events wait.
            e.dev.cm_fd_rearm();
            let Some(raw) = raw else { return Ok(None) };
            if let Some(ev) = convert(raw) {
                return Ok(Some(ev));
            }
        }
    }

    /// A descriptor readable while CM events wait: `poll` or `epoll` it beside other
    /// descriptors (as rdma_cm's `event_channel->fd`), then take events with
    /// [`cm_poll_event`](Self::cm_poll_event).
    pub fn cm_event_fd(&self) -> Result<std::os::fd::BorrowedFd<'_>> {
        Ok(self.emu("CM event fd")?.dev.cm_fd())
    }

    fn take_stashed(&self) -> Option<core::CmEvent> {
        self.emu("CM").ok()?.cm_stash.lock().pop_front()
    }

    /// Connects `qp` (built, in INIT) to `port` at `dst`, as `rdma_connect`: sends the REQ
    /// with `private_data` (at most [`REQ_PRIVATE_DATA`] bytes) after rdma_cm's header,
    /// brings the QP to RTR and RTS from the REP, sends the RTU. Waits up to `timeout`;
    /// a rejection, nobody listening and the CM's own timeout are errors that say so.
    pub fn cm_connect(
        &self,
        qp: PreparedQp,
        dst: IpAddr,
        port: u16,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Connection> {
        let transport = match qp.b.qp_type {
            QpType::Rc => CmTransport::Rc,
            QpType::Uc => CmTransport::Uc,
            t => return Err(cm_err("connect", format!("a {t} QP is not connected through the CM"))),
        };
        if private_data.len() > REQ_PRIVATE_DATA {
            return Err(cm_err(
                "connect",
                format!("{} bytes of private data, at most {REQ_PRIVATE_DATA}", private_data.len()),
            ));
        }
        let mut pd = vec![0u8; CMA_HDR_LEN];
        let src_port = 0xC000 | (u16::try_from(qp.qp.qpn() & 0x3fff).unwrap_or(0));
        CmaHeader { src_port, src: self.ip(), dst }
            .emit(&mut pd)
            .ok_or_else(|| cm_err("connect", format!("{dst} is not of the device address's IP version")))?;
        pd.extend_from_slice(private_data);
        let b = &qp.b;
        let params = core::ConnectParams {
            dst,
            service_id: service_id(port_space::TCP, port),
            transport,
            qpn: qp.qp.qpn(),
            psn: qp.psn,
            responder_resources: b.max_dest_rd_atomic,
            initiator_depth: b.max_rd_atomic,
            path_mtu: u8::try_from(b.mtu.to_ibv()).unwrap_or(3),
            retry_count: b.retry_cnt,
            rnr_retry_count: b.rnr_retry,
            local_ack_timeout: b.timeout,
            response_timeout: 20,
            max_cm_retries: 15,
            srq: b.srq.is_some(),
            private_data: pd,
        };
        let p2 = params.clone();
        let id = self.cm_call("connect", move |cm, now| cm.connect(now, &p2))?;
        let deadline = Instant::now() + timeout;
        let mut others = Vec::new();
        let result = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ev = match self.emu("CM connect")?.dev.cm_events().recv_timeout(left) {
                Ok(e) => e,
                Err(_) => break Err(Error::EventTimeout(timeout)),
            };
            match ev {
                core::CmEvent::ConnectReply { id: i, rep } if i == id => {
                    let attrs = core::active_attrs(&params, &rep, b.access);
                    let access = QpAttr { access: b.access, ..attrs };
                    for a in &access.bring_up(b.qp_type)[1..] {
                        let qpn = qp.qp.qpn();
                        qp.qp.modify_as(a, "CM", |source| Error::Connect { qpn, step: "CM", source })?;
                    }
                    self.cm_call("connect", move |cm, now| cm.ready_to_use(now, id, &[]))?;
                    break Ok(rep.private_data);
                }
                core::CmEvent::Rejected { id: i, reason, private_data } if i == id => {
                    let why = if reason == rej_reason::INVALID_SERVICE_ID {
                        format!("nobody listens on {dst} port {port}")
                    } else {
                        format!("{dst} rejected the connection (reason {reason})")
                    };
                    let _ = private_data;
                    break Err(cm_err("connect", why));
                }
                core::CmEvent::TimedOut { id: i, .. } if i == id => {
                    break Err(cm_err("connect", format!("{dst} did not answer (16 REQs, the CM's retries)")));
                }
                other => others.push(other),
            }
        };
        self.emu("CM connect")?.cm_stash.lock().extend(others);
        let private = result?;
        Ok(Connection { qp: qp.qp, id, private_data: private, ctx: self.clone() })
    }

    /// Accepts `req` with `qp` (built, in INIT): brings the QP to RTR and RTS from the
    /// REQ (the peer's QPN and first PSN, path MTU, timeouts, READ depths negotiated) and
    /// sends the REP with `private_data` (at most 196 bytes). [`CmEvent::Established`]
    /// follows when the RTU arrives; the QP may be used at once.
    pub fn cm_accept(&self, req: &ConnectRequest, qp: PreparedQp, private_data: &[u8]) -> Result<Connection> {
        let b = &qp.b;
        let accept = core::AcceptParams {
            qpn: qp.qp.qpn(),
            psn: qp.psn,
            responder_resources: b.max_dest_rd_atomic,
            initiator_depth: b.max_rd_atomic,
            rnr_retry_count: b.rnr_retry,
            target_ack_delay: 0,
            srq: b.srq.is_some(),
            private_data: private_data.to_vec(),
        };
        let attrs = core::passive_attrs(&req.req, &accept, b.access);
        for a in &attrs.bring_up(b.qp_type)[1..] {
            let qpn = qp.qp.qpn();
            qp.qp.modify_as(a, "CM", |source| Error::Connect { qpn, step: "CM", source })?;
        }
        let id = req.id;
        self.cm_call("accept", move |cm, now| cm.accept(now, id, &accept))?;
        Ok(Connection { qp: qp.qp, id, private_data: req.private_data.clone(), ctx: self.clone() })
    }

    /// Rejects `req` with `private_data` (at most 148 bytes): the peer's connect fails.
    pub fn cm_reject(&self, req: &ConnectRequest, private_data: &[u8]) -> Result<()> {
        let (id, pd) = (req.id, private_data.to_vec());
        self.cm_call("reject", move |cm, now| cm.reject(now, id, &pd))
    }

    /// Answers requests for the UD QP behind `port` in rdma_cm's UDP port space (as
    /// `rdma_listen` on an `RDMA_PS_UDP` ID): each becomes a [`CmEvent::UdRequest`].
    pub fn cm_listen_ud(&self, port: u16) -> Result<()> {
        self.cm_call("listen", move |cm, _| cm.listen(service_id(port_space::UDP, port)))
    }

    /// Finds the UD QP behind `port` at `dst` (as `rdma_connect` on an `RDMA_PS_UDP` ID):
    /// sends a SIDR_REQ with rdma_cm's header and `private_data` (at most
    /// [`SIDR_PRIVATE_DATA`] bytes), and returns the QPN and Q_Key the SIDR_REP names. The
    /// SIDR_REQ is sent again every 4.096 s, 15 times at most, as rdma_cm does; `timeout`
    /// bounds the whole wait. Nobody listening (the peer's status "service ID not
    /// supported"), a refusal and silence are errors that say so.
    ///
    /// ```no_run
    /// use rnic_verbs::*;
    /// use std::time::Duration;
    /// # fn main() -> Result<()> {
    /// const T: Duration = Duration::from_secs(10);
    /// // Passive side: a UD QP with rdma_cm's Q_Key, answering requests for port 7174.
    /// let ctx = Context::open("rnic0")?;
    /// let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(64)?);
    /// let qp = pd.qp_builder(&cq, &cq).qp_type(QpType::Ud).qkey(RDMA_UDP_QKEY).build()?.activate()?;
    /// ctx.cm_listen_ud(7174)?;
    /// if let CmEvent::UdRequest(req) = ctx.cm_get_event(T)? {
    ///     ctx.cm_accept_ud(&req, &qp, b"")?;
    /// }
    /// // Active side (another device or process): resolve, then send datagrams there.
    /// let ctx = Context::open("rnic1")?;
    /// let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(64)?);
    /// let qp = pd.qp_builder(&cq, &cq).qp_type(QpType::Ud).qkey(RDMA_UDP_QKEY).build()?.activate()?;
    /// let remote = ctx.cm_resolve_ud("127.0.0.1".parse().unwrap(), 7174, b"hello", T)?;
    /// let mr = pd.allocate_mr(64, AccessFlags::LOCAL_WRITE)?;
    /// mr.write(0, b"a datagram")?;
    /// qp.post_send(&SendWr::send(1, vec![mr.sge(0, 10)]).to(remote.dest()))?;
    /// # Ok(()) }
    /// ```
    pub fn cm_resolve_ud(&self, dst: IpAddr, port: u16, private_data: &[u8], timeout: Duration) -> Result<UdRemote> {
        if private_data.len() > SIDR_PRIVATE_DATA {
            return Err(cm_err(
                "resolve",
                format!("{} bytes of private data, at most {SIDR_PRIVATE_DATA}", private_data.len()),
            ));
        }
        let mut pd = vec![0u8; CMA_HDR_LEN];
        // rdma_cm puts its ID's bound port here; a UD resolve binds an ephemeral one.
        let src_port = 0xC000 | u16::try_from(crate::types::random_psn() & 0x3fff).unwrap_or(0);
        CmaHeader { src_port, src: self.ip(), dst }
            .emit(&mut pd)
            .ok_or_else(|| cm_err("resolve", format!("{dst} is not of the device address's IP version")))?;
        pd.extend_from_slice(private_data);
        let params = core::SidrParams::new(dst, service_id(port_space::UDP, port), pd);
        let id = self.cm_call("resolve", move |cm, now| cm.sidr_request(now, &params))?;
        let deadline = Instant::now() + timeout;
        let mut others = Vec::new();
        let result = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ev = match self.emu("CM resolve")?.dev.cm_events().recv_timeout(left) {
                Ok(e) => e,
                Err(_) => {
                    // Nothing more is to come for it: no stray event later.
                    let _ = self.cm_call("resolve", move |cm, _| cm.cancel_sidr(id));
                    break Err(Error::EventTimeout(timeout));
                }
            };
            match ev {
                core::CmEvent::SidrReply { id: i, status, qpn, qkey, private_data } if i == id => {
                    break match status {
                        SidrStatus::Valid => Ok(UdRemote { id, dst, qpn, qkey, private_data }),
                        SidrStatus::ServiceIdNotSupported => {
                            Err(cm_err("resolve", format!("nobody listens on {dst} UDP port {port}")))
                        }
                        s => Err(cm_err(
                            "resolve",
                            format!("{dst} refused UDP port {port} (SIDR status {}: {})", u8::from(s), sidr_refusal(s)),
                        )),
                    };
                }
                core::CmEvent::TimedOut { id: i, .. } if i == id => {
                    break Err(cm_err("resolve", format!("{dst} did not answer (16 SIDR_REQs, the CM's retries)")));
                }
                other => others.push(other),
            }
        };
        self.emu("CM resolve")?.cm_stash.lock().extend(others);
        result
    }

    /// Answers `req` with `qp` (UD, in RTS): the SIDR_REP names its QPN and Q_Key (an
    /// rdma_cm peer expects [`RDMA_UDP_QKEY`]) and carries `private_data` (at most 136
    /// bytes).
    pub fn cm_accept_ud(&self, req: &UdRequest, qp: &QueuePair, private_data: &[u8]) -> Result<()> {
        let qpn = qp.qpn();
        if qp.qp_type() != QpType::Ud || qp.state() != QpState::Rts {
            return Err(cm_err(
                "accept",
                format!(
                    "QP {qpn:#x} is {} in {:?}: a request is answered with a UD QP in RTS",
                    qp.qp_type(),
                    qp.state()
                ),
            ));
        }
        let qkey = qp.query()?.qkey;
        let rep = core::SidrRepParams { status: SidrStatus::Valid, qpn, qkey, private_data: private_data.to_vec() };
        let id = req.id;
        self.cm_call("accept", move |cm, now| cm.sidr_reply(now, id, &rep))
    }

    /// Refuses `req` (SIDR status "rejected") with `private_data` (at most 136 bytes):
    /// the peer's resolve fails.
    pub fn cm_reject_ud(&self, req: &UdRequest, private_data: &[u8]) -> Result<()> {
        let rep =
            core::SidrRepParams { status: SidrStatus::Rejected, qpn: 0, qkey: 0, private_data: private_data.to_vec() };
        let id = req.id;
        self.cm_call("reject", move |cm, now| cm.sidr_reply(now, id, &rep))
    }
}

/// The application's view of a core event (a reply is the connecting or resolving call's
/// business).
fn convert(e: core::CmEvent) -> Option<CmEvent> {
    Some(match e {
        core::CmEvent::ConnectRequest { id, req } => {
            let hdr = CmaHeader::parse(&req.private_data);
            let port = u16::try_from(req.service_id & 0xffff).unwrap_or(0);
            let private_data =
                if hdr.is_some() { req.private_data[CMA_HDR_LEN..].to_vec() } else { req.private_data.clone() };
            CmEvent::ConnectRequest(ConnectRequest {
                id,
                src: req.src,
                src_port: hdr.map_or(0, |h| h.src_port),
                port,
                private_data,
                req,
            })
        }
        core::CmEvent::Established { id, .. } => CmEvent::Established { id },
        core::CmEvent::Rejected { id, reason, private_data } => CmEvent::Rejected { id, reason, private_data },
        core::CmEvent::Disconnected { id, private_data } => CmEvent::Disconnected { id, private_data },
        core::CmEvent::TimedOut { id, .. } => CmEvent::TimedOut { id },
        core::CmEvent::SidrRequest { id, src, service_id, private_data, .. } => {
            let hdr = CmaHeader::parse(&private_data);
            let port = u16::try_from(service_id & 0xffff).unwrap_or(0);
            let private_data = if hdr.is_some() { private_data[CMA_HDR_LEN..].to_vec() } else { private_data };
            CmEvent::UdRequest(UdRequest { id, src, src_port: hdr.map_or(0, |h| h.src_port), port, private_data })
        }
        // A reply is the connecting call's business; the end of TimeWait is librdmacm's.
        core::CmEvent::ConnectReply { .. } | core::CmEvent::SidrReply { .. } | core::CmEvent::TimewaitExit { .. } => {
            return None
        }
    })
}
