//! The active side of the IB CM (IBA 12.6) over RoCEv2, as rdma_cm speaks it (IBA Annex
//! A11: the service ID of a TCP port-space port, `struct cma_hdr` heading the REQ's private
//! data): REQ, the peer's REP, RTU; DREQ at the end. The MADs ride UD SEND_ONLY packets
//! between the QP1s of the two ends (IBA 13.5, GSI Q_Key, C13-7). The tester has no QP of
//! its own: it names a QPN in the REQ and from then on plays that QP byte by byte.

use crate::link::{Link, Received};
use rnic_wire::bth::BthRepr;
use rnic_wire::cm::{self, CmDreq, CmIds, CmMessage, CmPath, CmRep, CmReq, CmTransport, CmaHeader};
use rnic_wire::deth::DethRepr;
use rnic_wire::mad::{GSI_QKEY, GSI_QPN, MAD_LEN};
use rnic_wire::roce::{ExtHeaders, RoceRepr};
use rnic_wire::{Opcode, Psn, Qpn};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// What the CM settled.
#[derive(Debug, Clone)]
pub struct Connection {
    /// The QPN the tester plays.
    pub local_qpn: u32,
    /// The peer's QPN.
    pub remote_qpn: u32,
    /// The first PSN the tester sends: the REP's starting PSN, the PSN the peer's QP
    /// expects (as Linux's CM and rnic's fill it: the REQ's starting PSN is what the
    /// active side expects to receive; seen in tools/tests/data/rping_rdmacm.pcap).
    pub start_psn: u32,
    /// Path MTU code asked for (IBA Table 106: 1 = 256 ... 5 = 4096).
    pub mtu_code: u8,
    /// The REP's private data.
    pub private_data: Vec<u8>,
    local_comm_id: u32,
    remote_comm_id: u32,
}

/// What to ask for in the REQ.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// rdma_cm port the peer listens on.
    pub port: u16,
    /// QPN the tester plays.
    pub qpn: u32,
    /// The PSN the tester expects its peer's requests to start at (it sends none).
    pub psn: u32,
    /// Path MTU code.
    pub mtu_code: u8,
    /// Communication ID (distinct per connection).
    pub comm_id: u32,
}

/// The GID of an address (IPv4-mapped for IPv4, RoCEv2 A17.4.5.1).
fn gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// The GSI's send PSN: any, UD has no sequence (IBA 9.8.3.2); counted for the capture's sake.
fn send_mad(link: &mut Link, psn: &mut u32, msg: &CmMessage, tid: u64) -> Result<(), String> {
    let mad = msg.to_mad(tid);
    let repr = RoceRepr {
        bth: BthRepr {
            opcode: Opcode::UD_SEND_ONLY,
            se: false,
            migreq: false,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: Qpn::new(GSI_QPN),
            ack_req: false,
            psn: Psn::new(*psn),
        },
        ext: ExtHeaders { deth: Some(DethRepr { qkey: GSI_QKEY, src_qp: Qpn::new(GSI_QPN) }), ..ExtHeaders::default() },
        payload_len: MAD_LEN,
    };
    *psn = psn.wrapping_add(1) & 0xff_ffff;
    link.send_with(&repr, &mad, |_| ()).map_err(|e| format!("sending the {}: {e}", msg.name()))
}

/// A CM message from the peer's QP1, if `p` is one.
fn cm_of(p: &Received) -> Option<CmMessage> {
    if p.repr.bth.opcode != Opcode::UD_SEND_ONLY || p.repr.bth.dest_qp.value() != GSI_QPN {
        return None;
    }
    CmMessage::from_mad(&p.payload).ok().and_then(|(_, m)| m)
}

/// The REQ the tester sends for `req` (rdma_cm's header in its private data), with
/// `transport` as its transport service type.
pub fn req_message(link: &Link, req: Request, transport: CmTransport) -> Result<CmMessage, String> {
    let mut pd = [0u8; cm::private_len::REQ];
    CmaHeader { src_port: 0x4791, src: link.local(), dst: link.peer() }
        .emit(&mut pd)
        .ok_or("the rdma_cm header does not fit the REQ")?;
    Ok(CmMessage::Req(Box::new(CmReq {
        local_comm_id: req.comm_id,
        service_id: cm::service_id(cm::port_space::TCP, req.port),
        local_ca_guid: 0x0252_ffff_fe00_c0f0,
        local_qkey: 0,
        local_qpn: req.qpn & 0xff_ffff,
        responder_resources: 4,
        local_eecn: 0,
        initiator_depth: 4,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport,
        end_to_end_flow_control: false,
        starting_psn: req.psn & 0xff_ffff,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: req.mtu_code,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary: CmPath {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: gid(link.local()),
            remote_gid: gid(link.peer()),
            hop_limit: 64,
            local_ack_timeout: 14,
            ..CmPath::default()
        },
        alternate: CmPath::default(),
        sap_supported: false,
        private_data: pd,
    })))
}

/// The transaction ID of the tester's MADs of a communication (`k` tells them apart).
pub fn tid(comm_id: u32, k: u8) -> u64 {
    u64::from(comm_id) << 8 | u64::from(k)
}

/// Sends `msg` from QP1 to the peer's QP1 (the GSI PSN counted in `psn`).
pub fn send(link: &mut Link, psn: &mut u32, msg: &CmMessage, tid: u64) -> Result<(), String> {
    send_mad(link, psn, msg, tid)
}

/// The next CM message from the peer before `until`.
pub fn next(link: &mut Link, until: Instant) -> Option<CmMessage> {
    while let Some(p) = link.recv(until) {
        if let Some(m) = cm_of(&p) {
            return Some(m);
        }
    }
    None
}

/// The RTU for a REP.
pub fn rtu(local_comm_id: u32, remote_comm_id: u32) -> CmMessage {
    CmMessage::Rtu(Box::new(CmIds { local_comm_id, remote_comm_id, private_data: [0; cm::private_len::RTU] }))
}

/// The DREQ of a connection (or of any pair of communication IDs).
pub fn dreq(local_comm_id: u32, remote_comm_id: u32, remote_qpn: u32) -> CmMessage {
    CmMessage::Dreq(Box::new(CmDreq {
        ids: CmIds { local_comm_id, remote_comm_id, private_data: [0; cm::private_len::DREQ] },
        remote_qpn,
    }))
}

impl Connection {
    /// The connection a REP to `req` settles.
    pub fn from_rep(req: Request, rep: &CmRep) -> Connection {
        Connection {
            local_qpn: req.qpn & 0xff_ffff,
            remote_qpn: rep.local_qpn & 0xff_ffff,
            start_psn: rep.starting_psn & 0xff_ffff,
            mtu_code: req.mtu_code,
            private_data: rep.private_data.to_vec(),
            local_comm_id: req.comm_id,
            remote_comm_id: rep.local_comm_id,
        }
    }

    /// The tester's and the peer's communication IDs.
    pub fn comm_ids(&self) -> (u32, u32) {
        (self.local_comm_id, self.remote_comm_id)
    }
}

/// Connects to the rdma_cm listener on `req.port`: REQ (sent again every second, four
/// times at most), REP, RTU. The peer's answer is bounded: no REP in `wait` is an error
/// saying so; a REJ names its reason.
pub fn connect(link: &mut Link, req: Request, wait: Duration) -> Result<Connection, String> {
    let m = req_message(link, req, CmTransport::Rc)?;
    let tid = u64::from(req.comm_id) << 8 | 0x10;
    let mut psn = req.comm_id & 0xff_ffff;
    let give_up = Instant::now() + wait;
    let mut tries = 0;
    let rep = 'outer: loop {
        if tries == 4 || Instant::now() >= give_up {
            return Err(format!("no REP from {} to a REQ for port {} in {wait:?}", link.peer(), req.port));
        }
        send_mad(link, &mut psn, &m, tid)?;
        tries += 1;
        let next = (Instant::now() + Duration::from_secs(1)).min(give_up);
        while let Some(p) = link.recv(next) {
            match cm_of(&p) {
                Some(CmMessage::Rep(r)) if r.remote_comm_id == req.comm_id => break 'outer r,
                Some(CmMessage::Rej(r)) if r.remote_comm_id == req.comm_id => {
                    return Err(format!("{} rejected the REQ: reason {}", link.peer(), r.reason));
                }
                _ => {}
            }
        }
    };
    send_mad(link, &mut psn, &rtu(req.comm_id, rep.local_comm_id), tid + 1)?;
    Ok(Connection::from_rep(req, &rep))
}

/// Sends a DREQ (IBA 12.6.10) and waits up to `wait` for the DREP; a peer that does not
/// answer is left to its own timers.
pub fn disconnect(link: &mut Link, c: &Connection, wait: Duration) {
    let m = dreq(c.local_comm_id, c.remote_comm_id, c.remote_qpn);
    let mut psn = 0x5000;
    if send_mad(link, &mut psn, &m, u64::from(c.local_comm_id) << 8 | 0x15).is_err() {
        return;
    }
    let until = Instant::now() + wait;
    while let Some(p) = link.recv(until) {
        if matches!(cm_of(&p), Some(CmMessage::Drep(d)) if d.remote_comm_id == c.local_comm_id) {
            return;
        }
    }
}
