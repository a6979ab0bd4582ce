//! The Communication Manager's stories on virtual time: two agents, a link that loses the
//! MADs a test names, and the clock jumping to the next arrival or wait. Each loss is
//! recovered by the retry IBA 12.9 prescribes, duplicates are answered from state, and a
//! peer that stops answering ends in a defined state with a counter.

use rnic_core::cm::{
    timeout_ns, AcceptParams, CmAgent, CmConfig, CmError, CmEvent, CmState, ConnectParams, MadOut, SidrParams,
    SidrRepParams, MRA_SERVICE_TIMEOUT, SIDR_WAIT_NS,
};
use rnic_wire::cm::{
    attr, port_space, rej_reason, service_id, CmMessage, CmTransport, CmaHeader, SidrStatus, RDMA_UDP_QKEY,
};
use rnic_wire::mad::{self, MadHeader, Packet, MAD_LEN};
use std::collections::HashMap;
use std::net::IpAddr;

const LATENCY: u64 = 10_000;
const A: usize = 0;
const B: usize = 1;

fn ip(i: usize) -> IpAddr {
    format!("10.0.0.{}", i + 1).parse().unwrap()
}

struct Link {
    agents: [CmAgent; 2],
    now: u64,
    /// (arrival, to, MAD)
    wire: Vec<(u64, usize, MadOut)>,
    /// How many of each message (by IBA name) from each side to lose.
    lose: HashMap<(usize, &'static str), usize>,
    /// Every MAD that went on the wire: (time, from, name).
    log: Vec<(u64, usize, &'static str)>,
    events: [Vec<CmEvent>; 2],
}

fn name(mad: &[u8; MAD_LEN]) -> &'static str {
    match CmMessage::from_mad(mad) {
        Ok((_, Some(m))) => m.name(),
        _ => "MAD",
    }
}

impl Link {
    fn new() -> Link {
        let cfg = |i: usize| CmConfig { seed: 7 + i as u64, ..CmConfig::new(ip(i), 0x0200_00ff_fe00_0000 + i as u64) };
        Link {
            agents: [CmAgent::new(cfg(A)), CmAgent::new(cfg(B))],
            now: 0,
            wire: Vec::new(),
            lose: HashMap::new(),
            log: Vec::new(),
            events: [Vec::new(), Vec::new()],
        }
    }

    fn lose(&mut self, from: usize, msg: &'static str, n: usize) {
        self.lose.insert((from, msg), n);
    }

    fn collect(&mut self) {
        for from in [A, B] {
            while let Some(o) = self.agents[from].poll_transmit() {
                let n = name(&o.mad);
                self.log.push((self.now, from, n));
                if let Some(k) = self.lose.get_mut(&(from, n)).filter(|k| **k > 0) {
                    *k -= 1;
                    continue;
                }
                let to = if o.dst == ip(A) {
                    A
                } else if o.dst == ip(B) {
                    B
                } else {
                    continue;
                };
                self.wire.push((self.now + LATENCY, to, o));
            }
            while let Some(e) = self.agents[from].poll_event() {
                self.events[from].push(e);
            }
        }
    }

    /// One step: the earliest arrival or wait; false when nothing is left before `until`.
    fn step(&mut self, until: u64) -> bool {
        self.collect();
        let arrival = self.wire.iter().map(|w| w.0).min();
        let timer = [A, B].iter().filter_map(|&i| self.agents[i].poll_timeout()).min();
        let Some(next) = [arrival, timer].into_iter().flatten().min().filter(|&t| t <= until) else {
            return false;
        };
        self.now = self.now.max(next);
        if arrival == Some(next) {
            let i = self.wire.iter().position(|w| w.0 == next).unwrap();
            let (_, to, o) = self.wire.remove(i);
            let from = if to == A { ip(B) } else { ip(A) };
            self.agents[to].handle_mad(self.now, from, 1, &o.mad);
        } else {
            for i in [A, B] {
                self.agents[i].handle_timeout(self.now);
            }
        }
        self.collect();
        true
    }

    fn run(&mut self, ns: u64) {
        let until = self.now + ns;
        while self.step(until) {}
        self.now = until;
    }

    /// Runs until side `who` has an event matching `f`, taking it (and the ones before it).
    fn until(&mut self, who: usize, max_ns: u64, f: impl Fn(&CmEvent) -> bool) -> CmEvent {
        let until = self.now + max_ns;
        loop {
            self.collect();
            if let Some(i) = self.events[who].iter().position(&f) {
                return self.events[who].drain(..=i).next_back().unwrap();
            }
            assert!(
                self.step(until),
                "side {who}: no such event by t={until}; events {:?}; log {:?}",
                self.events,
                self.log
            );
        }
    }

    fn sent(&self, from: usize, msg: &str) -> usize {
        self.log.iter().filter(|l| l.1 == from && l.2 == msg).count()
    }
}

const PORT: u16 = 7174;

fn params(dst: IpAddr) -> ConnectParams {
    let mut pd = vec![0u8; 92];
    CmaHeader { src_port: 0xdba8, src: ip(A), dst }.emit(&mut pd).unwrap();
    pd[36..41].copy_from_slice(b"hello");
    ConnectParams {
        dst,
        service_id: service_id(port_space::TCP, PORT),
        transport: CmTransport::Rc,
        qpn: 0x11,
        psn: 0x0abcde,
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
    }
}

fn accept_params() -> AcceptParams {
    AcceptParams {
        qpn: 0x22,
        psn: 0x123456,
        responder_resources: 2,
        initiator_depth: 4,
        rnr_retry_count: 7,
        private_data: b"welcome".to_vec(),
        ..AcceptParams::default()
    }
}

fn packet_lifetime() -> u64 {
    CmConfig::new(ip(A), 0).packet_lifetime_ns
}

/// The wait of a REQ/REP: 2 x packet lifetime + 4.096 us x 2^20.
fn wait() -> u64 {
    2 * packet_lifetime() + timeout_ns(20)
}

/// TimeWait: the peer's wait (its retry interval) and a packet lifetime.
fn timewait() -> u64 {
    wait() + packet_lifetime()
}

fn is_req(e: &CmEvent) -> bool {
    matches!(e, CmEvent::ConnectRequest { .. })
}
fn is_rep(e: &CmEvent) -> bool {
    matches!(e, CmEvent::ConnectReply { .. })
}
fn is_est(e: &CmEvent) -> bool {
    matches!(e, CmEvent::Established { .. })
}
fn is_disc(e: &CmEvent) -> bool {
    matches!(e, CmEvent::Disconnected { .. })
}

/// Connects A to B through every step; returns (A's ID, B's ID).
fn establish(l: &mut Link) -> (u32, u32) {
    let a = l.agents[A].connect(l.now, &params(ip(B))).unwrap();
    let CmEvent::ConnectRequest { id: b, req } = l.until(B, 200 * wait(), is_req) else { unreachable!() };
    assert_eq!((req.remote_qpn, req.remote_psn, req.path_mtu, req.src), (0x11, 0x0abcde, 3, ip(A)));
    assert_eq!((req.responder_resources, req.initiator_depth, req.local_ack_timeout), (4, 2, 14));
    assert_eq!(&req.private_data[36..41], b"hello");
    l.agents[B].accept(l.now, b, &accept_params()).unwrap();
    let CmEvent::ConnectReply { id, rep } = l.until(A, 200 * wait(), is_rep) else { unreachable!() };
    assert_eq!(
        (id, rep.remote_qpn, rep.remote_psn, rep.responder_resources, rep.initiator_depth),
        (a, 0x22, 0x123456, 2, 4)
    );
    assert_eq!(&rep.private_data[..7], b"welcome");
    l.agents[A].ready_to_use(l.now, a, b"rtu").unwrap();
    assert!(matches!(l.until(A, 0, is_est), CmEvent::Established { id, .. } if id == a));
    let CmEvent::Established { id, private_data } = l.until(B, 200 * wait(), is_est) else { unreachable!() };
    assert_eq!((id, &private_data[..3]), (b, &b"rtu"[..]));
    (a, b)
}

fn listening() -> Link {
    let mut l = Link::new();
    l.agents[B].listen(service_id(port_space::TCP, PORT)).unwrap();
    l
}

#[test]
fn connect_and_disconnect_with_private_data_both_ways() {
    let mut l = listening();
    let (a, b) = establish(&mut l);
    assert_eq!((l.agents[A].state(a), l.agents[B].state(b)), (Some(CmState::Established), Some(CmState::Established)));
    assert_eq!(l.agents[A].remote_qpn(a), Some(0x22));
    l.agents[B].disconnect(l.now, b, b"bye").unwrap();
    let CmEvent::Disconnected { id, private_data } = l.until(A, wait(), is_disc) else { unreachable!() };
    assert_eq!((id, &private_data[..3]), (a, &b"bye"[..]));
    assert!(matches!(l.until(B, wait(), is_disc), CmEvent::Disconnected { id, .. } if id == b));
    assert_eq!((l.agents[A].state(a), l.agents[B].state(b)), (Some(CmState::TimeWait), Some(CmState::TimeWait)));
    // TimeWait ends: the IDs are forgotten, and each side hears of it (IB_CM_TIMEWAIT_EXIT,
    // rdma_cm's RDMA_CM_EVENT_TIMEWAIT_EXIT), once.
    l.run(timewait());
    assert_eq!((l.agents[A].state(a), l.agents[B].state(b)), (None, None));
    for (side, id) in [(A, a), (B, b)] {
        let exits = l.events[side].iter().filter(|e| matches!(e, CmEvent::TimewaitExit { .. })).collect::<Vec<_>>();
        assert_eq!(exits, [&CmEvent::TimewaitExit { id }], "side {side}");
    }
    assert_eq!(l.log.iter().map(|x| x.2).collect::<Vec<_>>(), ["REQ", "REP", "RTU", "DREQ", "DREP"]);
    assert_eq!(l.agents[A].stats().retransmits + l.agents[B].stats().retransmits, 0);
}

#[test]
fn a_lost_req_is_sent_again_after_its_wait() {
    let mut l = listening();
    l.lose(A, "REQ", 1);
    establish(&mut l);
    assert_eq!(l.sent(A, "REQ"), 2);
    let second = l.log.iter().filter(|x| x.2 == "REQ").nth(1).unwrap().0;
    assert_eq!(second, wait(), "resent exactly one wait later");
    assert_eq!(l.agents[A].stats().retransmits, 1);
}

#[test]
fn a_lost_rep_is_recovered_and_the_repeated_req_answered_from_state() {
    let mut l = listening();
    l.lose(B, "REP", 1);
    let (_, b) = establish(&mut l);
    // A's REQ came again (B's REP was lost); B answered it with the REP it had sent.
    assert!(l.sent(B, "REP") >= 2, "{:?}", l.log);
    assert_eq!(l.agents[B].state(b), Some(CmState::Established));
    assert!(l.agents[B].stats().duplicates + l.agents[B].stats().retransmits >= 1);
}

#[test]
fn a_lost_rtu_makes_the_rep_come_again_and_the_rtu_is_repeated() {
    let mut l = listening();
    l.lose(A, "RTU", 1);
    let (a, b) = establish(&mut l);
    assert_eq!((l.sent(A, "RTU"), l.sent(B, "REP")), (2, 2));
    assert_eq!(l.agents[A].stats().duplicates, 1, "the duplicate REP was answered with the RTU again");
    assert_eq!((l.agents[A].state(a), l.agents[B].state(b)), (Some(CmState::Established), Some(CmState::Established)));
}

#[test]
fn a_lost_dreq_is_sent_again() {
    let mut l = listening();
    let (a, b) = establish(&mut l);
    l.lose(A, "DREQ", 1);
    l.agents[A].disconnect(l.now, a, b"").unwrap();
    l.until(B, 3 * wait(), is_disc);
    l.until(A, 3 * wait(), is_disc);
    assert_eq!(l.sent(A, "DREQ"), 2);
    assert_eq!((l.agents[A].state(a), l.agents[B].state(b)), (Some(CmState::TimeWait), Some(CmState::TimeWait)));
}

#[test]
fn a_lost_drep_is_answered_again_from_timewait() {
    let mut l = listening();
    let (a, b) = establish(&mut l);
    l.lose(B, "DREP", 1);
    l.agents[A].disconnect(l.now, a, b"").unwrap();
    l.until(A, 3 * wait(), is_disc);
    assert_eq!((l.sent(A, "DREQ"), l.sent(B, "DREP")), (2, 2));
    // The DREQ came again one wait (4.8 s) later: B was still in TimeWait and answered
    // from the connection, not as for an unknown one.
    let s = l.agents[B].stats();
    assert_eq!((s.duplicates, s.unknown_comm_id), (1, 0));
    assert_eq!(l.agents[B].state(b), Some(CmState::TimeWait));
}

#[test]
fn timewait_lasts_the_peers_wait_and_a_packet_lifetime() {
    let mut l = listening();
    let (a, b) = establish(&mut l);
    l.agents[A].disconnect(l.now, a, b"").unwrap();
    l.until(B, wait(), is_disc);
    let entered = l.now;
    l.until(A, wait(), is_disc);
    l.run(entered + timewait() - 1 - l.now);
    assert_eq!(l.agents[B].state(b), Some(CmState::TimeWait));
    l.run(1);
    assert_eq!(l.agents[B].state(b), None, "forgotten {} ns after it closed", timewait());
    assert!(timewait() > 5_000_000_000, "longer than rdma_cm's DREQ retry interval (4.83 s)");
}

#[test]
fn every_dreq_retry_finds_timewait_until_the_peer_gives_up() {
    let mut l = listening();
    let (a, b) = establish(&mut l);
    // Every DREP B sends is lost: A sends its DREQ 1 + 15 times, 4.83 s apart (77 s in
    // all), and each finds B's connection, because a DREQ in TimeWait starts it over.
    l.lose(B, "DREP", usize::MAX);
    l.agents[A].disconnect(l.now, a, b"").unwrap();
    l.until(A, 20 * wait(), is_disc);
    assert_eq!(l.sent(A, "DREQ"), 16);
    let s = l.agents[B].stats();
    assert_eq!((s.duplicates, s.unknown_comm_id, l.sent(B, "DREP")), (15, 0, 16));
    let last = l.log.iter().rev().find(|x| x.2 == "DREQ").unwrap().0 + LATENCY;
    l.run(last + timewait() - l.now);
    assert_eq!(l.agents[B].state(b), None);
    // A DREQ after TimeWait is still answered (Linux's cm_issue_drep), as for an unknown
    // connection.
    l.lose.clear();
    let mut dreq = [0u8; MAD_LEN];
    MadHeader::cm(attr::DREQ, 6).emit(&mut Packet::new_unchecked(&mut dreq[..]));
    dreq[28..32].copy_from_slice(&b.to_be_bytes());
    l.agents[B].handle_mad(l.now, ip(A), 1, &dreq);
    assert_eq!(name(&l.agents[B].poll_transmit().unwrap().mad), "DREP");
    assert_eq!(l.agents[B].stats().unknown_comm_id, 1);
}

#[test]
fn a_duplicate_req_after_the_rep_gets_the_rep_again_and_no_second_connection() {
    let mut l = listening();
    let a = l.agents[A].connect(0, &params(ip(B))).unwrap();
    l.collect();
    let req = l.wire[0].2.clone();
    let CmEvent::ConnectRequest { id: b, .. } = l.until(B, wait(), is_req) else { unreachable!() };
    l.agents[B].accept(l.now, b, &accept_params()).unwrap();
    // The same REQ arrives again (duplicated by the network).
    l.agents[B].handle_mad(l.now, ip(A), 1, &req.mad);
    l.collect();
    assert_eq!(l.sent(B, "REP"), 2);
    assert_eq!(l.agents[B].stats().duplicates, 1);
    assert!(l.events[B].iter().all(|e| !is_req(e)), "no second connect request");
    l.until(A, wait(), is_rep);
    l.agents[A].ready_to_use(l.now, a, b"").unwrap();
    l.until(B, wait(), is_est);
}

#[test]
fn a_peer_that_is_gone_times_out_after_every_retry() {
    let mut l = listening();
    // Nothing is at 10.0.0.9: the REQ is sent 1 + 15 times, then the connection times out.
    let a = l.agents[A].connect(0, &params("10.0.0.9".parse().unwrap())).unwrap();
    let e = l.until(A, 17 * wait(), |e| matches!(e, CmEvent::TimedOut { .. }));
    assert_eq!(e, CmEvent::TimedOut { id: a, waiting_for_answer_to: "REQ" });
    assert_eq!(l.sent(A, "REQ"), 16);
    assert_eq!(l.now, 16 * wait());
    assert_eq!((l.agents[A].state(a), l.agents[A].stats().timeouts), (Some(CmState::TimeWait), 1));
    l.run(timewait());
    assert_eq!(l.agents[A].state(a), None, "forgotten after TimeWait: no half-open state");
}

#[test]
fn an_active_side_that_vanishes_after_the_rep_times_the_passive_side_out() {
    let mut l = listening();
    l.lose(A, "REQ", 0);
    l.agents[A].connect(0, &params(ip(B))).unwrap();
    let CmEvent::ConnectRequest { id: b, .. } = l.until(B, wait(), is_req) else { unreachable!() };
    l.lose(A, "RTU", usize::MAX);
    l.lose(A, "REQ", usize::MAX);
    // Gone: not even its CM answers (else the MRA for the repeated REP would ask B to wait).
    l.lose(A, "MRA", usize::MAX);
    l.agents[B].accept(l.now, b, &accept_params()).unwrap();
    // A never calls ready_to_use: no RTU ever comes.
    let e = l.until(B, 20 * wait(), |e| matches!(e, CmEvent::TimedOut { .. }));
    assert_eq!(e, CmEvent::TimedOut { id: b, waiting_for_answer_to: "REP" });
    assert_eq!(l.sent(B, "REP"), 16);
}

#[test]
fn a_req_nobody_listens_for_is_rejected_invalid_service_id() {
    let mut l = Link::new();
    let a = l.agents[A].connect(0, &params(ip(B))).unwrap();
    let e = l.until(A, wait(), |e| matches!(e, CmEvent::Rejected { .. }));
    assert!(matches!(e, CmEvent::Rejected { id, reason: rej_reason::INVALID_SERVICE_ID, .. } if id == a), "{e:?}");
    assert_eq!(l.agents[A].state(a), Some(CmState::TimeWait));
}

#[test]
fn a_consumer_reject_carries_its_private_data() {
    let mut l = listening();
    let a = l.agents[A].connect(0, &params(ip(B))).unwrap();
    let CmEvent::ConnectRequest { id: b, .. } = l.until(B, wait(), is_req) else { unreachable!() };
    assert!(l.agents[B].reject(l.now, b, &[0u8; 149]).is_err(), "149 bytes do not fit a REJ");
    l.agents[B].reject(l.now, b, b"go away").unwrap();
    let CmEvent::Rejected { id, reason, private_data } = l.until(A, wait(), |e| matches!(e, CmEvent::Rejected { .. }))
    else {
        unreachable!()
    };
    assert_eq!((id, reason, &private_data[..7]), (a, rej_reason::CONSUMER_REJECT, &b"go away"[..]));
    // Calls that do not fit the state are refused, naming it.
    let err = l.agents[B].accept(l.now, b, &accept_params()).unwrap_err().to_string();
    assert!(err.contains("TimeWait") && err.contains("accept"), "{err}");
}

#[test]
fn a_second_req_from_a_connected_qp_is_a_stale_connection() {
    let mut l = listening();
    establish(&mut l);
    // The same QP (0x11) asks again under a new communication ID.
    let again = l.agents[A].connect(l.now, &params(ip(B))).unwrap();
    let e = l.until(A, wait(), |e| matches!(e, CmEvent::Rejected { .. }));
    assert!(matches!(e, CmEvent::Rejected { id, reason: rej_reason::STALE_CONN, .. } if id == again), "{e:?}");
}

#[test]
fn hostile_mads_are_counted_and_answered_as_the_gsi_does() {
    let mut l = listening();
    let b = &mut l.agents[B];
    // Too short, and a CM MAD of class version 1: dropped (the latter as an unserved class).
    b.handle_mad(0, ip(A), 1, &[1, 7, 2]);
    let mut v1 = [0u8; MAD_LEN];
    MadHeader { class_version: 1, ..MadHeader::cm(attr::REQ, 9) }.emit(&mut Packet::new_unchecked(&mut v1[..]));
    b.handle_mad(0, ip(A), 1, &v1);
    // A Get for the Performance Management class from QP 7: GetResp, "unsupported".
    let mut get = [0u8; MAD_LEN];
    MadHeader { mgmt_class: 0x04, class_version: 1, method: mad::method::GET, ..MadHeader::cm(0x0012, 0x77) }
        .emit(&mut Packet::new_unchecked(&mut get[..]));
    b.handle_mad(0, ip(A), 7, &get);
    let resp = b.poll_transmit().expect("a GetResp");
    let h = MadHeader::parse(&Packet::new_checked(&resp.mad[..]).unwrap()).unwrap();
    assert_eq!((resp.dst_qpn, h.method, h.status, h.tid, h.mgmt_class), (7, 0x81, 0x000c, 0x77, 0x04));
    // A REP and an RTU for connections nobody has; a DREQ likewise; a LAP (not
    // implemented); a SIDR_REP for a request nobody made.
    let mut rep = [0u8; MAD_LEN];
    MadHeader::cm(attr::REP, 5).emit(&mut Packet::new_unchecked(&mut rep[..]));
    rep[24..28].copy_from_slice(&0xdead_beef_u32.to_be_bytes());
    rep[28..32].copy_from_slice(&0x1234_5678_u32.to_be_bytes());
    b.handle_mad(0, ip(A), 1, &rep);
    let rej = b.poll_transmit().expect("REJ");
    let Ok((_, Some(CmMessage::Rej(r)))) = CmMessage::from_mad(&rej.mad) else { panic!("not a REJ") };
    assert_eq!((r.reason, r.remote_comm_id), (rej_reason::INVALID_COMM_ID, 0xdead_beef));
    let mut dreq = [0u8; MAD_LEN];
    MadHeader::cm(attr::DREQ, 6).emit(&mut Packet::new_unchecked(&mut dreq[..]));
    b.handle_mad(0, ip(A), 1, &dreq);
    assert_eq!(name(&b.poll_transmit().expect("DREP").mad), "DREP");
    let mut lap = [0u8; MAD_LEN];
    MadHeader::cm(attr::LAP, 8).emit(&mut Packet::new_unchecked(&mut lap[..]));
    b.handle_mad(0, ip(A), 1, &lap);
    let mut sidr_rep = [0u8; MAD_LEN];
    MadHeader::cm(attr::SIDR_REP, 9).emit(&mut Packet::new_unchecked(&mut sidr_rep[..]));
    sidr_rep[24..28].copy_from_slice(&0x0bad_cafe_u32.to_be_bytes());
    b.handle_mad(0, ip(A), 1, &sidr_rep);
    let s = b.stats();
    assert_eq!((s.bad_mads, s.non_cm_mads, s.unknown_comm_id, s.unsupported_attrs), (1, 2, 3, 1), "{s:?}");
    assert!(b.poll_transmit().is_none() && b.poll_event().is_none());
    // Random bytes never panic.
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..2000 {
        let mut m = [0u8; MAD_LEN];
        for byte in m.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *byte = x.to_le_bytes()[0];
        }
        m[..3].copy_from_slice(&[1, 7, 2]);
        m[16] = 0;
        m[17] = 0x10 + x.to_le_bytes()[1] % 8;
        l.agents[B].handle_mad(0, ip(A), 1, &m);
    }
}

// Service ID resolution (IBA 12.11), as rdma_cm's UDP port space uses it.

const UD_PORT: u16 = 7174;

fn udp_sid() -> u64 {
    service_id(port_space::UDP, UD_PORT)
}

fn sidr_params(dst: IpAddr) -> SidrParams {
    let mut pd = vec![0u8; 40];
    CmaHeader { src_port: 0xa571, src: ip(A), dst }.emit(&mut pd).unwrap();
    pd[36..40].copy_from_slice(b"who?");
    SidrParams::new(dst, udp_sid(), pd)
}

fn valid(qpn: u32) -> SidrRepParams {
    SidrRepParams { status: SidrStatus::Valid, qpn, qkey: RDMA_UDP_QKEY, private_data: b"ud here".to_vec() }
}

fn is_sidr_req(e: &CmEvent) -> bool {
    matches!(e, CmEvent::SidrRequest { .. })
}
fn is_sidr_rep(e: &CmEvent) -> bool {
    matches!(e, CmEvent::SidrReply { .. })
}

fn udp_listening() -> Link {
    let mut l = Link::new();
    l.agents[B].listen(udp_sid()).unwrap();
    l
}

/// A asks B for the UD QP behind the service; B answers. Returns (A's ID, B's ID).
fn resolve(l: &mut Link) -> (u32, u32) {
    let a = l.agents[A].sidr_request(l.now, &sidr_params(ip(B))).unwrap();
    let CmEvent::SidrRequest { id: b, src, service_id, pkey, private_data } =
        l.until(B, 20 * SIDR_WAIT_NS, is_sidr_req)
    else {
        unreachable!()
    };
    assert_eq!((src, service_id, pkey, private_data.len()), (ip(A), udp_sid(), 0xffff, 216));
    assert_eq!(CmaHeader::parse(&private_data).map(|h| (h.src_port, h.dst)), Some((0xa571, ip(B))));
    assert_eq!(&private_data[36..40], b"who?");
    l.agents[B].sidr_reply(l.now, b, &valid(0x33)).unwrap();
    let e = l.until(A, 20 * SIDR_WAIT_NS, is_sidr_rep);
    let CmEvent::SidrReply { id, status, qpn, qkey, private_data } = e else { unreachable!() };
    assert_eq!((id, status, qpn, qkey), (a, SidrStatus::Valid, 0x33, RDMA_UDP_QKEY));
    assert_eq!((private_data.len(), &private_data[..7]), (136, &b"ud here"[..]));
    (a, b)
}

#[test]
fn sidr_resolves_a_listened_service_to_its_ud_qp() {
    let mut l = udp_listening();
    resolve(&mut l);
    assert_eq!(l.log.iter().map(|x| x.2).collect::<Vec<_>>(), ["SIDR_REQ", "SIDR_REP"]);
    assert_eq!(l.now, 2 * LATENCY, "one round trip");
    // Nothing is left waiting on the requester's side; the answer stays on B's, for repeats.
    assert_eq!(l.agents[A].poll_timeout(), None);
    assert_eq!(l.agents[B].poll_timeout(), Some(LATENCY + CmConfig::new(ip(B), 0).sidr_keep_ns));
}

#[test]
fn the_sidr_rep_echoes_the_request_id_service_id_and_transaction_id() {
    let mut l = udp_listening();
    let a = l.agents[A].sidr_request(0, &sidr_params(ip(B))).unwrap();
    let req = l.agents[A].poll_transmit().unwrap();
    l.agents[B].handle_mad(0, ip(A), 1, &req.mad);
    let Some(CmEvent::SidrRequest { id: b, .. }) = l.agents[B].poll_event() else { panic!("no request") };
    l.agents[B].sidr_reply(0, b, &valid(0xab45_6789)).unwrap();
    let rep = l.agents[B].poll_transmit().unwrap();
    let (hq, Some(CmMessage::SidrReq(q))) = CmMessage::from_mad(&req.mad).unwrap() else { panic!() };
    let (hp, Some(CmMessage::SidrRep(p))) = CmMessage::from_mad(&rep.mad).unwrap() else { panic!() };
    assert_eq!((rep.dst, rep.dst_qpn), (ip(A), 1));
    assert_eq!((hp.tid, p.request_id, p.service_id), (hq.tid, q.request_id, q.service_id));
    assert_eq!((q.request_id, p.qpn, p.qkey), (a, 0x45_6789, RDMA_UDP_QKEY), "the QPN's 24 bits");
}

#[test]
fn a_sidr_req_nobody_listens_for_gets_status_1_at_once_and_leaves_nothing() {
    let mut l = Link::new();
    let a = l.agents[A].sidr_request(0, &sidr_params(ip(B))).unwrap();
    let e = l.until(A, SIDR_WAIT_NS, is_sidr_rep);
    assert!(
        matches!(e, CmEvent::SidrReply { id, status: SidrStatus::ServiceIdNotSupported, qpn: 0, qkey: 0, .. } if id == a),
        "{e:?}"
    );
    assert_eq!(l.now, 2 * LATENCY);
    assert!(l.events[B].is_empty(), "the application on B hears nothing");
    assert_eq!((l.agents[B].stats().sidr_unsupported, l.agents[B].poll_timeout()), (1, None), "no state kept");
}

#[test]
fn a_lost_sidr_req_is_sent_again_after_rdma_cms_wait() {
    let mut l = udp_listening();
    l.lose(A, "SIDR_REQ", 1);
    resolve(&mut l);
    assert_eq!(l.sent(A, "SIDR_REQ"), 2);
    let second = l.log.iter().filter(|x| x.2 == "SIDR_REQ").nth(1).unwrap().0;
    assert_eq!(second, SIDR_WAIT_NS, "4.096 s later, as cma_resolve_ib_udp asks");
    assert_eq!(l.agents[A].stats().retransmits, 1);
}

#[test]
fn a_lost_sidr_rep_is_sent_again_for_the_repeated_request_without_asking_the_application() {
    let mut l = udp_listening();
    l.lose(B, "SIDR_REP", 1);
    let (_, b) = resolve(&mut l);
    assert_eq!((l.sent(A, "SIDR_REQ"), l.sent(B, "SIDR_REP")), (2, 2));
    assert!(l.events[B].iter().all(|e| !is_sidr_req(e)), "one request event only");
    assert_eq!(l.agents[B].stats().duplicates, 1);
    // Answering it again is refused: it was answered.
    assert_eq!(l.agents[B].sidr_reply(l.now, b, &valid(0x33)), Err(CmError::AlreadyAnswered(b)));
}

#[test]
fn a_repeated_sidr_req_while_the_application_decides_is_dropped() {
    let mut l = udp_listening();
    l.agents[A].sidr_request(0, &sidr_params(ip(B))).unwrap();
    let req = l.agents[A].poll_transmit().unwrap();
    l.agents[B].handle_mad(0, ip(A), 1, &req.mad);
    l.agents[B].handle_mad(1, ip(A), 1, &req.mad);
    assert!(l.agents[B].poll_transmit().is_none(), "cm.c drops it (cm_insert_remote_sidr)");
    assert!(is_sidr_req(&l.agents[B].poll_event().unwrap()));
    assert_eq!((l.agents[B].poll_event(), l.agents[B].stats().duplicates), (None, 1));
    // The same request ID from another address is another request.
    l.agents[B].handle_mad(2, ip(2), 1, &req.mad);
    assert!(matches!(l.agents[B].poll_event(), Some(CmEvent::SidrRequest { src, .. }) if src == ip(2)));
}

#[test]
fn a_sidr_peer_that_is_gone_times_out_after_every_retry_and_a_late_reply_is_counted() {
    let mut l = udp_listening();
    l.lose(B, "SIDR_REP", usize::MAX);
    let a = l.agents[A].sidr_request(0, &sidr_params(ip(B))).unwrap();
    let e = l.until(A, 17 * SIDR_WAIT_NS, |e| matches!(e, CmEvent::TimedOut { .. }));
    assert_eq!(e, CmEvent::TimedOut { id: a, waiting_for_answer_to: "SIDR_REQ" });
    assert_eq!(l.sent(A, "SIDR_REQ"), 16, "1 + rdma_cm's 15 retries");
    assert_eq!(l.now, 16 * SIDR_WAIT_NS);
    assert_eq!((l.agents[A].stats().timeouts, l.agents[A].poll_timeout()), (1, None));
    // B's one answer, delivered now: nobody waits for it.
    l.lose.clear();
    let CmEvent::SidrRequest { id: b, .. } = l.events[B].remove(0) else { panic!() };
    let _ = b;
    let stray = CmMessage::SidrRep(Box::new(rnic_wire::cm::CmSidrRep {
        request_id: a,
        status: SidrStatus::Valid,
        info_len: 0,
        vendor_id: 0,
        qpn: 0x33,
        service_id: udp_sid(),
        qkey: RDMA_UDP_QKEY,
        info: [0; 72],
        private_data: [0; 136],
    }));
    l.agents[A].handle_mad(l.now, ip(B), 1, &stray.to_mad(1));
    assert_eq!((l.agents[A].stats().unknown_comm_id, l.agents[A].poll_event()), (1, None));
}

#[test]
fn a_sidr_rep_from_another_address_does_not_answer_the_request() {
    let mut l = udp_listening();
    let a = l.agents[A].sidr_request(0, &sidr_params(ip(B))).unwrap();
    let req = l.agents[A].poll_transmit().unwrap();
    l.agents[B].handle_mad(0, ip(A), 1, &req.mad);
    let Some(CmEvent::SidrRequest { id: b, .. }) = l.agents[B].poll_event() else { panic!() };
    l.agents[B].sidr_reply(0, b, &valid(0x33)).unwrap();
    let rep = l.agents[B].poll_transmit().unwrap();
    l.agents[A].handle_mad(0, ip(2), 1, &rep.mad);
    assert_eq!((l.agents[A].poll_event(), l.agents[A].stats().unknown_comm_id), (None, 1));
    l.agents[A].handle_mad(0, ip(B), 1, &rep.mad);
    assert!(matches!(l.agents[A].poll_event(), Some(CmEvent::SidrReply { id, .. }) if id == a));
}

#[test]
fn an_answered_sidr_req_is_forgotten_after_sidr_keep_and_a_cancelled_one_is_quiet() {
    let mut l = udp_listening();
    let keep = CmConfig::new(ip(B), 0).sidr_keep_ns;
    l.agents[A].sidr_request(0, &sidr_params(ip(B))).unwrap();
    let req = l.agents[A].poll_transmit().unwrap();
    l.agents[B].handle_mad(0, ip(A), 1, &req.mad);
    let Some(CmEvent::SidrRequest { id: b, .. }) = l.agents[B].poll_event() else { panic!() };
    l.agents[B].sidr_reply(0, b, &valid(0x33)).unwrap();
    l.agents[B].handle_timeout(keep);
    assert_eq!(l.agents[B].sidr_reply(keep, b, &valid(0x33)), Err(CmError::NoSuchConnection(b)));
    l.agents[B].handle_mad(keep, ip(A), 1, &req.mad);
    assert!(matches!(l.agents[B].poll_event(), Some(CmEvent::SidrRequest { id, .. }) if id != b), "a new request");
    // Cancelled: no resend, no event, no timer; cancelling again is an error.
    let mut l = udp_listening();
    let a = l.agents[A].sidr_request(0, &sidr_params("10.0.0.9".parse().unwrap())).unwrap();
    l.agents[A].cancel_sidr(a).unwrap();
    l.run(20 * SIDR_WAIT_NS);
    assert_eq!((l.sent(A, "SIDR_REQ"), l.events[A].len()), (1, 0));
    assert_eq!(l.agents[A].cancel_sidr(a), Err(CmError::NoSuchConnection(a)));
}

#[test]
fn sidr_calls_check_their_private_data_and_ids() {
    let mut l = udp_listening();
    let too_long = SidrParams { private_data: vec![0; 217], ..sidr_params(ip(B)) };
    let err = l.agents[A].sidr_request(0, &too_long).unwrap_err().to_string();
    assert!(err.contains("SIDR_REQ") && err.contains("217") && err.contains("216"), "{err}");
    assert_eq!(l.agents[B].sidr_reply(0, 77, &valid(1)), Err(CmError::NoSuchConnection(77)));
    l.agents[A].sidr_request(0, &sidr_params(ip(B))).unwrap();
    let req = l.agents[A].poll_transmit().unwrap();
    l.agents[B].handle_mad(0, ip(A), 1, &req.mad);
    let Some(CmEvent::SidrRequest { id: b, .. }) = l.agents[B].poll_event() else { panic!() };
    let long = SidrRepParams { private_data: vec![0; 137], ..valid(1) };
    assert!(l.agents[B].sidr_reply(0, b, &long).unwrap_err().to_string().contains("136"));
    // A refusal is a reply too.
    let no = SidrRepParams { status: SidrStatus::Rejected, qpn: 0, qkey: 0, private_data: b"full".to_vec() };
    l.agents[B].sidr_reply(0, b, &no).unwrap();
    let rep = l.agents[B].poll_transmit().unwrap();
    l.agents[A].handle_mad(0, ip(B), 1, &rep.mad);
    let e = l.agents[A].poll_event().unwrap();
    assert!(
        matches!(&e, CmEvent::SidrReply { status: SidrStatus::Rejected, private_data, .. } if private_data.starts_with(b"full")),
        "{e:?}"
    );
}

// MRA: an application that holds a request for a while.

/// The wait an MRA with rnic's service timeout asks for: 2 x packet lifetime + 68.7 s.
fn mra_wait() -> u64 {
    2 * packet_lifetime() + timeout_ns(MRA_SERVICE_TIMEOUT)
}

/// A connects to B; B's application holds the request `hold` ns before accepting.
/// Returns the log's names and whether A timed out.
fn accept_after(l: &mut Link, hold: u64) -> bool {
    let a = l.agents[A].connect(0, &params(ip(B))).unwrap();
    let CmEvent::ConnectRequest { id: b, .. } = l.until(B, wait(), is_req) else { unreachable!() };
    l.run(hold);
    if l.events[A].iter().any(|e| matches!(e, CmEvent::TimedOut { .. })) {
        return true;
    }
    l.agents[B].accept(l.now, b, &accept_params()).unwrap();
    l.until(A, wait(), is_rep);
    l.agents[A].ready_to_use(l.now, a, b"").unwrap();
    l.until(B, wait(), is_est);
    false
}

#[test]
fn a_repeated_req_while_the_application_holds_it_gets_an_mra() {
    let mut l = listening();
    // Ten seconds: A's REQ comes again at 4.83 s; B answers with an MRA, A waits 68.7 s
    // more and sends nothing until B's REP.
    assert!(!accept_after(&mut l, 10_000_000_000));
    let names: Vec<_> = l.log.iter().map(|x| (x.1, x.2)).collect();
    assert_eq!(names, [(A, "REQ"), (A, "REQ"), (B, "MRA"), (B, "REP"), (A, "RTU")]);
    assert_eq!((l.agents[B].stats().mra_sent, l.agents[B].stats().duplicates), (1, 1));
    // The MRA: both IDs, "REQ" MRAed, service timeout 24, the connection's transaction ID.
    let mut l = listening();
    let a = l.agents[A].connect(0, &params(ip(B))).unwrap();
    let req = l.agents[A].poll_transmit().unwrap();
    l.agents[B].handle_mad(0, ip(A), 1, &req.mad);
    let Some(CmEvent::ConnectRequest { id: b, .. }) = l.agents[B].poll_event() else { panic!() };
    l.agents[B].handle_mad(1, ip(A), 1, &req.mad);
    let mra = l.agents[B].poll_transmit().unwrap();
    let (h, Some(CmMessage::Mra(m))) = CmMessage::from_mad(&mra.mad).unwrap() else { panic!("not an MRA") };
    let (hq, _) = CmMessage::from_mad(&req.mad).unwrap();
    assert_eq!((m.local_comm_id, m.remote_comm_id, h.tid), (b, a, hq.tid));
    assert_eq!((m.message_mraed, m.service_timeout), (rnic_wire::cm::MsgRef::Req, MRA_SERVICE_TIMEOUT));
}

#[test]
fn an_mra_keeps_a_peer_with_rdma_cms_retries_from_timing_out() {
    // rdma_cm's REQ (response timeout 20, 15 retries) gives up after 16 waits: 77 s.
    // Held 80 s, the request survives because of the MRA ...
    let mut l = listening();
    assert!(!accept_after(&mut l, 80_000_000_000));
    // ... A sent its REQ three times: at 0, after one wait, then after the MRA's wait.
    let reqs: Vec<_> = l.log.iter().filter(|x| x.2 == "REQ").map(|x| x.0).collect();
    assert_eq!(reqs, [0, wait(), wait() + 2 * LATENCY + mra_wait()]);
    assert_eq!(l.agents[B].stats().mra_sent, 2, "each repeat answered");
    assert_eq!(l.agents[A].stats().duplicates, 1, "the second MRA changes nothing");
    // ... and without it (every MRA lost) A times out before the application answers.
    let mut l = listening();
    l.lose(B, "MRA", usize::MAX);
    assert!(accept_after(&mut l, 80_000_000_000));
    assert_eq!(l.sent(A, "REQ"), 16);
}

#[test]
fn a_repeated_rep_before_the_rtu_gets_an_mra_and_the_passive_side_waits() {
    let mut l = listening();
    let a = l.agents[A].connect(0, &params(ip(B))).unwrap();
    let CmEvent::ConnectRequest { id: b, .. } = l.until(B, wait(), is_req) else { unreachable!() };
    l.agents[B].accept(l.now, b, &accept_params()).unwrap();
    l.until(A, wait(), is_rep);
    // A's application takes 80 s to bring its QP up (B's REP has 15 retries: 77 s).
    l.run(80_000_000_000);
    assert!(l.events[B].iter().all(|e| !matches!(e, CmEvent::TimedOut { .. })), "{:?}", l.events[B]);
    assert_eq!((l.sent(B, "REP"), l.sent(A, "MRA")), (3, 2));
    l.agents[A].ready_to_use(l.now, a, b"").unwrap();
    l.until(B, wait(), is_est);
}

#[test]
fn an_mra_counts_only_from_the_peer_and_for_the_message_awaited() {
    let mut l = listening();
    let a = l.agents[A].connect(0, &params(ip(B))).unwrap();
    let _ = l.agents[A].poll_transmit();
    let mra = |which| {
        CmMessage::Mra(Box::new(rnic_wire::cm::CmMra {
            local_comm_id: 0x77,
            remote_comm_id: a,
            message_mraed: which,
            service_timeout: 24,
            private_data: [0; 222],
        }))
        .to_mad(1)
    };
    l.agents[A].handle_mad(5, ip(2), 1, &mra(rnic_wire::cm::MsgRef::Req));
    l.agents[A].handle_mad(5, ip(B), 1, &mra(rnic_wire::cm::MsgRef::Rep));
    let s = l.agents[A].stats();
    assert_eq!((s.unknown_comm_id, s.out_of_state), (1, 1));
    assert_eq!(l.agents[A].poll_timeout(), Some(wait()), "the REQ's wait is unchanged");
    l.agents[A].handle_mad(5, ip(B), 1, &mra(rnic_wire::cm::MsgRef::Req));
    assert_eq!(l.agents[A].poll_timeout(), Some(5 + mra_wait()));
    l.agents[A].handle_mad(6, ip(B), 1, &mra(rnic_wire::cm::MsgRef::Req));
    assert_eq!(l.agents[A].poll_timeout(), Some(5 + mra_wait()), "a second MRA changes nothing");
}

// Against Linux's own MADs (captures in tools/tests/data).

/// The MADs of a capture (UD SEND_ONLY to QP1), in order, with their senders.
fn captured(pcap: &str) -> Vec<(IpAddr, [u8; MAD_LEN])> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/tests/data").join(pcap);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &bytes[at + 16..at + 16 + len];
        at += 16 + len;
        let Ok(p) = rnic_wire::frame::parse_ethernet(frame) else { continue };
        if p.roce.bth.dest_qp.value() == 1 {
            out.push((p.ip.src(), p.payload.try_into().unwrap()));
        }
    }
    out
}

#[test]
fn the_mra_for_a_repeated_req_is_the_one_linux_sends() {
    // rping_mra_linux.pcap: rnic's REQ came twice to Linux rxe, which answered the repeat
    // with an MRA. The same REQ twice to rnic's CM draws the same MRA, byte for byte but
    // for the (random) local communication ID.
    let mads = captured("rping_mra_linux.pcap");
    let (client, req) = mads[0];
    let linux_mra = mads[2].1;
    assert_eq!(name(&linux_mra), "MRA");
    let mut b = CmAgent::new(CmConfig::new("10.77.0.11".parse().unwrap(), 0x5054_00ff_fe77_000b));
    b.listen(service_id(port_space::TCP, 7402)).unwrap();
    b.handle_mad(0, client, 1, &req);
    let Some(CmEvent::ConnectRequest { id, .. }) = b.poll_event() else { panic!("no request") };
    assert!(b.poll_transmit().is_none());
    b.handle_mad(1, client, 1, &req);
    let mra = b.poll_transmit().expect("an MRA");
    assert_eq!((mra.dst, mra.dst_qpn), (client, 1));
    let mut want = linux_mra;
    want[24..28].copy_from_slice(&id.to_be_bytes());
    assert_eq!(mra.mad[..], want[..]);
}

#[test]
fn timewait_after_a_linux_rdma_cm_req_outlasts_linuxs_dreq_retries() {
    // rping_mra_rnic.pcap: Linux rxe's rping client asked rnic (held 8 s by `rnic rping -s
    // --hold 8`): its REQ came again 6.375 s after the first (2 x 1.07 s packet lifetime, from
    // its local ACK timeout 19, + 4.096 s), was answered with rnic's MRA, and the REP at 8 s
    // was taken. A DREQ of Linux's repeats on the same interval, so B's TimeWait after that
    // REQ must outlast it: 3 x 1.07 s + 4.29 s = 7.5 s.
    let mads = captured("rping_mra_rnic.pcap");
    let names: Vec<_> = mads.iter().map(|m| name(&m.1)).collect();
    assert_eq!(names, ["REQ", "REQ", "MRA", "REP", "RTU", "DREQ", "DREP"]);
    let (linux, req) = mads[0];
    let Ok((h, Some(CmMessage::Req(r)))) = CmMessage::from_mad(&req) else { panic!() };
    assert_eq!((r.primary.local_ack_timeout, r.remote_cm_response_timeout), (19, 20));
    let mut b = CmAgent::new(CmConfig::new("10.77.0.1".parse().unwrap(), 1));
    b.listen(r.service_id).unwrap();
    b.handle_mad(0, linux, 1, &req);
    let Some(CmEvent::ConnectRequest { id, .. }) = b.poll_event() else { panic!() };
    b.accept(0, id, &accept_params()).unwrap();
    let dreq = CmMessage::Dreq(Box::new(rnic_wire::cm::CmDreq {
        ids: rnic_wire::cm::CmIds { local_comm_id: r.local_comm_id, remote_comm_id: id, private_data: [0; 220] },
        remote_qpn: 0x22,
    }))
    .to_mad(h.tid);
    b.handle_mad(1_000, linux, 1, &dreq);
    assert!(matches!(b.poll_event(), Some(CmEvent::Disconnected { .. })));
    let tw = 3 * timeout_ns(18) + timeout_ns(20);
    assert!(tw > 7_500_000_000 && tw > 6_375_000_000 + packet_lifetime());
    assert_eq!(b.poll_timeout(), Some(1_000 + tw));
    // Linux's DREQ again at 6.375 s (its DREP lost): answered from TimeWait, which starts
    // over.
    b.handle_timeout(6_375_000_000);
    assert_eq!(b.state(id), Some(CmState::TimeWait));
    b.handle_mad(6_375_000_000, linux, 1, &dreq);
    assert_eq!((b.stats().duplicates, b.stats().unknown_comm_id), (1, 0));
    b.handle_timeout(6_375_000_000 + tw - 1);
    assert_eq!(b.state(id), Some(CmState::TimeWait));
    b.handle_timeout(6_375_000_000 + tw);
    assert_eq!(b.state(id), None);
}
