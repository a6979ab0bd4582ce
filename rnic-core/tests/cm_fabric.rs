//! Connection management through QP1 on the virtual-time fabric: two engines connect RC
//! and UC QPs with the CM as rdma_cm does (REQ, REP, RTU, then DREQ, DREP), the QPs are
//! brought up from what the messages carry, and data moves; each lost handshake message
//! is recovered by the agent's retry, and a peer that vanishes ends in a timeout with no
//! half-open QP. The MADs on the wire have the shape of Linux rxe's.

use rnic_core::cm::{self, AcceptParams, CmEvent, CmState, ConnectParams};
use rnic_core::counters::Counters;
use rnic_core::cq::Cq;
use rnic_core::engine::qp::QpInit;
use rnic_core::engine::qp::{validate_recv, validate_send, QpAttr, QpShared};
use rnic_core::engine::{Engine, EngineConfig};
use rnic_core::fabric::Fabric;
use rnic_core::faults::Fault;
use rnic_core::mem::MemBlock;
use rnic_core::mr::{AccessFlags, MrKeys, Mtpt, PdId};
use rnic_core::qp_state::{QpState, QpType};
use rnic_core::wr::SendFlags;
use rnic_core::wr::{RecvWr, SendOp, SendWr, Sge, WcStatus, WorkCompletion};
use rnic_wire::cm::{port_space, service_id, CmTransport, CmaHeader};
use rnic_wire::Opcode;
use std::net::IpAddr;
use std::sync::Arc;

const A: usize = 0;
const B: usize = 1;
const MEM: usize = 1 << 20;
const PORT: u16 = 7174;
/// A CM wait (2 x 268 ms + 4.096 us x 2^20) and a bit.
const WAIT: u64 = 4_900_000_000;
const UD_SEND_ONLY: Opcode = Opcode(0x64);

struct Node {
    mtpt: Arc<Mtpt>,
    mem: Arc<MemBlock>,
    keys: MrKeys,
    scq: Arc<Cq>,
    rcq: Arc<Cq>,
    qp: Option<Arc<QpShared>>,
    events: Vec<CmEvent>,
}

struct Net {
    fab: Fabric,
    n: [Node; 2],
}

fn ip(i: usize) -> IpAddr {
    format!("10.1.0.{}", i + 1).parse().unwrap()
}

impl Net {
    fn new() -> Net {
        let mut fab = Fabric::new(10_000).with_seed(3);
        fab.trace = Some(Vec::new());
        let mut n = Vec::new();
        for i in [A, B] {
            let mtpt = Arc::new(Mtpt::new(16));
            let e = Engine::new(EngineConfig::new(ip(i)), mtpt.clone(), Arc::new(Counters::default()));
            let mem = Arc::new(MemBlock::new(MEM).unwrap());
            let keys = mtpt.register(PdId(1), mem.clone(), 0, MEM, 0x10_0000, AccessFlags::REGISTRABLE).unwrap();
            fab.add(e);
            n.push(Node {
                mtpt,
                mem,
                keys,
                scq: Arc::new(Cq::new(1, 256)),
                rcq: Arc::new(Cq::new(2, 256)),
                qp: None,
                events: Vec::new(),
            });
        }
        Net { fab, n: n.try_into().ok().unwrap() }
    }

    fn create_qp(&mut self, i: usize, t: QpType) -> u32 {
        let (s, r) = (self.n[i].scq.clone(), self.n[i].rcq.clone());
        let qp = self.fab.engine(i).create_qp(QpInit::new(t, PdId(1), s, r)).unwrap();
        let qpn = qp.qpn.value();
        self.n[i].qp = Some(qp);
        qpn
    }

    fn modify(&mut self, i: usize, attrs: &[QpAttr]) {
        let qpn = self.n[i].qp.as_ref().unwrap().qpn;
        for a in attrs {
            self.fab.engine(i).modify_qp(0, qpn, a).unwrap();
        }
    }

    fn state(&mut self, i: usize) -> QpState {
        let qpn = self.n[i].qp.as_ref().unwrap().qpn;
        self.fab.engine(i).query_qp(qpn).unwrap().state
    }

    /// Runs until side `i` has a CM event matching `f` (taking it), within `max` ns.
    fn until(&mut self, i: usize, max: u64, f: impl Fn(&CmEvent) -> bool) -> CmEvent {
        let deadline = self.fab.now() + max;
        let n = &mut self.n;
        let found = self.fab.run_while(
            |fab| {
                for j in [A, B] {
                    while let Some(e) = fab.engine(j).poll_cm_event() {
                        n[j].events.push(e);
                    }
                }
                n[i].events.iter().any(&f)
            },
            deadline,
        );
        assert!(found, "side {i}: no such CM event by t={deadline}: {:?}", self.n[i].events);
        let k = self.n[i].events.iter().position(f).unwrap();
        self.n[i].events.remove(k)
    }

    fn sge(&self, i: usize, off: u64, len: u32) -> Sge {
        Sge { addr: 0x10_0000 + off, length: len, lkey: self.n[i].keys.lkey }
    }

    fn post(&mut self, i: usize, wr: SendWr) {
        let n = &self.n[i];
        let qp = n.qp.as_ref().unwrap().clone();
        let wqe = validate_send(&qp, &n.mtpt, &wr).unwrap();
        let now = self.fab.now();
        self.fab.engine(i).post_send(now, qp.qpn, wqe);
    }

    fn post_recv(&mut self, i: usize, len: u32) {
        let n = &self.n[i];
        let qp = n.qp.as_ref().unwrap().clone();
        let wr = RecvWr { wr_id: 7, sg_list: vec![self.sge(i, 0x8_0000, len)] };
        let wqe = validate_recv(&qp, &n.mtpt, &wr).unwrap();
        self.fab.engine(i).post_recv(qp.qpn, wqe);
    }

    fn wcs(cq: &Cq) -> Vec<WorkCompletion> {
        std::iter::from_fn(|| cq.poll_one()).collect()
    }

    /// The CM handshake: B listens, A connects, each side brings its QP up from what the
    /// messages carry. Returns the connection IDs (A's, B's).
    fn connect(&mut self, t: QpType) -> (u32, u32, ConnectParams) {
        self.fab.engine(B).cm().listen(service_id(port_space::TCP, PORT)).unwrap();
        let qa = self.create_qp(A, t);
        let mut pd = vec![0u8; 92];
        CmaHeader { src_port: 40000, src: ip(A), dst: ip(B) }.emit(&mut pd).unwrap();
        pd[36..41].copy_from_slice(b"hello");
        let params = ConnectParams {
            dst: ip(B),
            service_id: service_id(port_space::TCP, PORT),
            transport: if t == QpType::Rc { CmTransport::Rc } else { CmTransport::Uc },
            qpn: qa,
            psn: 0x00ab_cdef,
            responder_resources: 4,
            initiator_depth: 2,
            path_mtu: 3,
            retry_count: 7,
            rnr_retry_count: 7,
            local_ack_timeout: 14,
            response_timeout: 20,
            max_cm_retries: 15,
            srq: false,
            private_data: pd,
        };
        // rdma_cm's active side: the QP goes to INIT before the REQ.
        let init =
            QpAttr { access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ, ..QpAttr::default() }.bring_up(t)[0];
        self.modify(A, &[init]);
        let now = self.fab.now();
        let a_id = self.fab.engine(A).cm().connect(now, &params).unwrap();
        let CmEvent::ConnectRequest { id: b_id, req } =
            self.until(B, 20 * WAIT, |e| matches!(e, CmEvent::ConnectRequest { .. }))
        else {
            unreachable!()
        };
        assert_eq!(
            (req.remote_qpn, req.remote_psn, req.src, &req.private_data[36..41]),
            (qa, 0x00ab_cdef, ip(A), &b"hello"[..])
        );
        // rdma_cm's passive side: the QP to RTR and RTS, then the REP.
        self.create_qp(B, t);
        let accept = AcceptParams {
            qpn: self.n[B].qp.as_ref().unwrap().qpn.value(),
            psn: 0x0012_3456,
            responder_resources: 2,
            initiator_depth: 4,
            rnr_retry_count: 7,
            private_data: b"welcome".to_vec(),
            ..AcceptParams::default()
        };
        let attrs = cm::passive_attrs(&req, &accept, AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ);
        assert_eq!((attrs.max_dest_rd_atomic, attrs.max_rd_atomic), (2, 4), "negotiated: min(own, peer's)");
        self.modify(B, &attrs.bring_up(t));
        let now = self.fab.now();
        self.fab.engine(B).cm().accept(now, b_id, &accept).unwrap();
        let CmEvent::ConnectReply { id, rep } = self.until(A, 20 * WAIT, |e| matches!(e, CmEvent::ConnectReply { .. }))
        else {
            unreachable!()
        };
        assert_eq!(
            (id, rep.remote_qpn, rep.remote_psn, &rep.private_data[..7]),
            (a_id, accept.qpn, 0x0012_3456, &b"welcome"[..])
        );
        let attrs = cm::active_attrs(&params, &rep, AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ);
        self.modify(A, &attrs.bring_up(t)[1..]);
        let now = self.fab.now();
        self.fab.engine(A).cm().ready_to_use(now, a_id, b"").unwrap();
        self.until(A, 0, |e| matches!(e, CmEvent::Established { .. }));
        self.until(B, 20 * WAIT, |e| matches!(e, CmEvent::Established { .. }));
        assert_eq!((self.state(A), self.state(B)), (QpState::Rts, QpState::Rts));
        // Each side sends from the Starting PSN the other advertised, as Linux rxe does
        // (rping's capture: the passive side's first request carries the REQ's PSN).
        let qpa = self.n[A].qp.as_ref().unwrap().qpn;
        let qpb = self.n[B].qp.as_ref().unwrap().qpn;
        let (sa, sb) = (self.fab.engine(A).query_qp(qpa).unwrap(), self.fab.engine(B).query_qp(qpb).unwrap());
        assert_eq!((sa.sq_psn, sa.rq_psn), (0x0012_3456, 0x00ab_cdef));
        assert_eq!((sb.sq_psn, sb.rq_psn), (0x00ab_cdef, 0x0012_3456));
        (a_id, b_id, params)
    }

    /// An RDMA WRITE and a SEND from A, checked byte for byte at B (RC: completions too).
    fn transfer(&mut self, t: QpType) {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        self.n[A].mem.write(0, &data).unwrap();
        self.post_recv(B, 8192);
        let mut w = SendWr::new(
            1,
            SendOp::RdmaWrite { remote_addr: 0x10_0000 + 0x4_0000, rkey: self.n[B].keys.rkey },
            vec![self.sge(A, 0, 5000)],
        );
        w.flags.set(SendFlags::SIGNALED, true);
        self.post(A, w);
        self.post(A, SendWr::send(2, vec![self.sge(A, 0, 3000)]));
        let deadline = self.fab.now() + 1_000_000_000;
        self.fab.run_until(deadline);
        let mut got = vec![0u8; 5000];
        self.n[B].mem.read(0x4_0000, &mut got).unwrap();
        assert_eq!(got, data, "the WRITE's bytes");
        let r = Self::wcs(&self.n[B].rcq);
        assert_eq!((r.len(), r[0].status, r[0].byte_len), (1, WcStatus::Success, 3000));
        let mut got = vec![0u8; 3000];
        self.n[B].mem.read(0x8_0000, &mut got).unwrap();
        assert_eq!(&got[..], &data[..3000], "the SEND's bytes");
        if t == QpType::Rc {
            let s = Self::wcs(&self.n[A].scq);
            assert!(s.iter().all(|w| w.status == WcStatus::Success) && s.len() == 2, "{s:?}");
        }
    }

    fn disconnect(&mut self, a_id: u32, b_id: u32) {
        let now = self.fab.now();
        self.fab.engine(A).cm().disconnect(now, a_id, b"bye").unwrap();
        let CmEvent::Disconnected { id, private_data } =
            self.until(B, 20 * WAIT, |e| matches!(e, CmEvent::Disconnected { .. }))
        else {
            unreachable!()
        };
        assert_eq!((id, &private_data[..3]), (b_id, &b"bye"[..]));
        self.until(A, 20 * WAIT, |e| matches!(e, CmEvent::Disconnected { .. }));
        assert_eq!(self.fab.engine(A).cm().state(a_id), Some(CmState::TimeWait));
    }

    /// How many UD SEND_ONLY packets to QP 1 side `from` sent.
    fn mads_sent(&self, from: usize) -> usize {
        self.fab.trace.as_ref().unwrap().iter().filter(|t| t.pkt.src == ip(from) && t.pkt.data[0] == 0x64).count()
    }
}

/// rdma_cm's defaults for an RC REQ from A's QP `qa` to B, no private data.
fn plain_params(qa: u32) -> ConnectParams {
    ConnectParams {
        dst: ip(B),
        service_id: service_id(port_space::TCP, PORT),
        transport: CmTransport::Rc,
        qpn: qa,
        psn: 1,
        responder_resources: 1,
        initiator_depth: 1,
        path_mtu: 3,
        retry_count: 7,
        rnr_retry_count: 7,
        local_ack_timeout: 14,
        response_timeout: 20,
        max_cm_retries: 15,
        srq: false,
        private_data: vec![],
    }
}

#[test]
fn rc_connects_through_the_cm_moves_data_and_disconnects() {
    let mut net = Net::new();
    let (a, b, _) = net.connect(QpType::Rc);
    net.transfer(QpType::Rc);
    net.disconnect(a, b);
    // REQ, RTU, DREQ from A; REP, DREP from B; nothing resent.
    assert_eq!((net.mads_sent(A), net.mads_sent(B)), (3, 2));
    assert_eq!(net.fab.engine(A).cm().stats().retransmits, 0);
}

#[test]
fn uc_connects_through_the_cm_too() {
    let mut net = Net::new();
    net.connect(QpType::Uc);
    net.transfer(QpType::Uc);
}

/// Each handshake message lost once: the agent's wait runs out and it is sent again.
#[test]
fn each_lost_handshake_message_is_recovered_by_retry() {
    for (who, nth, what) in [(A, 1, "REQ"), (B, 1, "REP"), (A, 2, "RTU"), (A, 3, "DREQ")] {
        let mut net = Net::new();
        net.fab.add_rule(Fault::drop().from(ip(who)).opcode(UD_SEND_ONLY).qpn(1).nth(nth));
        let (a, b, _) = net.connect(QpType::Rc);
        net.transfer(QpType::Rc);
        net.disconnect(a, b);
        let retx = net.fab.engine(A).cm().stats().retransmits + net.fab.engine(B).cm().stats().retransmits;
        assert!(retx >= 1, "{what}: nothing was sent again");
        assert!(net.fab.faults().stats().dropped == 1, "{what}: one MAD lost");
    }
}

/// The REQ delivered twice, the copy 15 us later, after B answered and before the RTU
/// came: B sends its REP again (answered from state), and one connection is made.
#[test]
fn a_duplicated_req_is_answered_from_state() {
    let mut net = Net::new();
    net.fab.add_rule(Fault::duplicate(15_000).from(ip(A)).opcode(UD_SEND_ONLY).qpn(1).nth(1));
    net.connect(QpType::Rc);
    let deadline = net.fab.now() + 4_000_000_000;
    net.fab.run_until(deadline);
    // B: the duplicate REQ (answered with the REP again), then A's second RTU (A answered
    // the repeated REP from state too).
    assert_eq!((net.fab.engine(B).cm().stats().duplicates, net.fab.engine(A).cm().stats().duplicates), (2, 1));
    assert_eq!(net.mads_sent(B), 2, "the REP, and the REP again for the duplicate REQ");
    net.transfer(QpType::Rc);
}

/// B answers nothing at all: A's REQ is sent 16 times, then the connection times out;
/// A's QP never left INIT, and after TimeWait the CM forgets the connection.
#[test]
fn a_peer_that_is_gone_times_out_with_no_half_open_qp() {
    let mut net = Net::new();
    net.fab.add_rule(Fault::drop().from(ip(B)));
    let qa = net.create_qp(A, QpType::Rc);
    let init = QpAttr::default().bring_up(QpType::Rc)[0];
    net.modify(A, &[init]);
    let params = plain_params(qa);
    let now = net.fab.now();
    let id = net.fab.engine(A).cm().connect(now, &params).unwrap();
    let e = net.until(A, 20 * WAIT, |e| matches!(e, CmEvent::TimedOut { .. }));
    assert_eq!(e, CmEvent::TimedOut { id, waiting_for_answer_to: "REQ" });
    assert_eq!(net.mads_sent(A), 16);
    assert_eq!(net.state(A), QpState::Init, "the QP never went further than the REQ");
    // TimeWait: the peer's wait (4.83 s) and a packet lifetime (268 ms).
    let deadline = net.fab.now() + WAIT + 268_435_456;
    net.fab.run_until(deadline);
    assert_eq!(net.fab.engine(A).cm().state(id), None);
}

/// QP1 takes only UD SEND_ONLY MADs with the GSI's Q_Key: another Q_Key is a Q_Key
/// violation, a short payload is malformed; and what rnic sends has the shape of the REQ
/// Linux rxe sent in rping's exchange (UD SEND_ONLY to QP 1, AckReq, P_Key 0xffff, DETH
/// Q_Key 0x80010000 from QP 1, one 256-byte CM MAD of class version 2).
#[test]
fn qp1_checks_its_packets_and_sends_rxe_shaped_mads() {
    let mut net = Net::new();
    net.fab.engine(B).cm().listen(service_id(port_space::TCP, PORT)).unwrap();
    let qa = net.create_qp(A, QpType::Rc);
    let params = plain_params(qa);
    let now = net.fab.now();
    net.fab.engine(A).cm().connect(now, &params).unwrap();
    net.until(B, WAIT, |e| matches!(e, CmEvent::ConnectRequest { .. }));
    let req = net.fab.trace.as_ref().unwrap()[0].pkt.clone();
    let d = &req.data;
    assert_eq!(d[0], 0x64, "UD SEND_ONLY");
    assert_eq!(&d[2..4], &[0xff, 0xff], "P_Key");
    assert_eq!(&d[5..8], &[0, 0, 1], "to QP 1");
    assert_eq!(d[8] & 0x80, 0x80, "AckReq, as rxe sets it");
    assert_eq!(&d[12..16], &0x8001_0000u32.to_be_bytes(), "the GSI Q_Key");
    assert_eq!(&d[17..20], &[0, 0, 1], "from QP 1");
    assert_eq!(d.len(), 12 + 8 + 256 + 4, "BTH, DETH, one MAD, ICRC");
    assert_eq!(&d[20..24], &[1, 7, 2, 3], "MAD: base version 1, class CM, version 2, Send");
    assert_eq!(&d[36..38], &[0, 0x10], "attribute REQ");
    assert_eq!(req.src_port, rnic_core::engine::qp::ud_udp_sport(1), "QP1's UDP source port, as rxe's");
    // A MAD with another Q_Key, and one cut short.
    let before = net.fab.engine(B).counters().get("qkey_viol_cntr").unwrap();
    let mut bad = req.data.clone();
    bad[12..16].copy_from_slice(&0x1111_1111u32.to_be_bytes());
    net.fab.inject(rnic_core::faults::Wire { data: bad, ..req.clone() });
    let mut short = req.data[..12 + 8 + 128].to_vec();
    short.extend_from_slice(&[0; 4]);
    net.fab.inject(rnic_core::faults::Wire { data: short, ..req });
    let deadline = net.fab.now() + 1_000_000;
    net.fab.run_until(deadline);
    assert_eq!(net.fab.engine(B).counters().get("qkey_viol_cntr").unwrap(), before + 1);
    assert!(net.fab.engine(B).counters().get("malformed_pkts").unwrap() >= 1);
}
