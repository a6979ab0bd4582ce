//! Two RC endpoints behind one interface, on either backend: the deterministic fabric
//! (virtual time, exact counters) or two real devices over UDP on loopback with the
//! same fault rules applied in real time. A scenario written against [`Net`] runs on
//! both, so every reliability story is checked in simulation and on real sockets.
#![allow(dead_code, clippy::cast_possible_truncation)]

use rnic_core::counters::{Counters, DeviceCounters};
use rnic_core::cq::Cq;
use rnic_core::device::{Device, DeviceConfig};
use rnic_core::engine::qp::QpInit;
use rnic_core::engine::qp::{QpAttr, QpCap, QpShared};
use rnic_core::engine::{Engine, EngineConfig};
use rnic_core::fabric::Fabric;
use rnic_core::faults::{Fault, FaultHandle, Faults, Wire};
use rnic_core::mem::MemBlock;
use rnic_core::mr::{AccessFlags, MrKeys, Mtpt, PdId};
use rnic_core::qp_state::{QpState, QpType};
use rnic_core::wr::{RecvWr, SendWr, Sge, WorkCompletion};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const MEM: usize = 2 << 20;

/// Connection parameters of a scenario.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    pub mtu_code: u32,
    pub psn: [u32; 2],
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    /// Fabric only: the engines send payloads of 512 bytes or more from registered
    /// memory (`EngineConfig::zero_copy`), as the UDP driver does.
    pub zero_copy: bool,
    /// Fabric only: congestion control (`EngineConfig::cc`; the UDP devices take
    /// `RNIC_CC`, DCQCN by default).
    pub cc: Option<rnic_core::cc::DcqcnParams>,
    /// Fabric only: flow control's in-flight bound per destination
    /// (`EngineConfig::max_inflight_per_dest`), when given.
    pub max_inflight: Option<u64>,
    /// Fabric only: work requests are queued as a device's direct posts are
    /// (`Engine::queue_send`) and leave at the fabric's next step, not at once.
    pub queued_posts: bool,
}

impl Default for Setup {
    fn default() -> Self {
        // timeout 8: 4.096 us * 2^8 = 1.05 ms; min_rnr_timer 1: 0.01 ms.
        Setup {
            mtu_code: 3,
            psn: [0x10_0000, 0x20_0000],
            timeout: 8,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            zero_copy: false,
            cc: None,
            max_inflight: None,
            queued_posts: false,
        }
    }
}

/// Which completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Q {
    Send,
    Recv,
}

pub trait Net {
    /// "fabric" or "udp".
    fn backend(&self) -> &'static str;
    /// Counters are exact on virtual time; on real time a scheduling hiccup may add a
    /// spurious retransmission, so only lower bounds hold.
    fn exact(&self) -> bool;
    /// Node `n`'s memory, keys, QP and counters (the same on both backends).
    fn end(&self, n: usize) -> &End;
    /// Adds a rule judging the packets node `from` sends.
    fn add_rule(&mut self, from: usize, f: Fault);
    fn post_send(&mut self, n: usize, wr: SendWr);
    fn post_recv(&mut self, n: usize, wr: RecvWr);
    /// Runs until node `n`'s queue holds `count` completions or `max_ns` pass; returns
    /// the completions taken so far (all of them, even if fewer).
    fn wait(&mut self, n: usize, q: Q, count: usize, max_ns: u64) -> Vec<WorkCompletion>;
    /// Lets `ns` of time pass.
    fn idle(&mut self, ns: u64);
    /// Runs until node `n`'s counter `name` reaches `at_least` (or `max_ns` pass).
    fn until_counter(&mut self, n: usize, name: &str, at_least: u64, max_ns: u64) -> bool;
    /// Sends a hand-made packet (BTH..ICRC, ICRC filled here) from node `from` to the other.
    fn inject(&mut self, from: usize, data: Vec<u8>);

    fn ip(&self, n: usize) -> IpAddr {
        self.end(n).ip
    }
    fn qpn(&self, n: usize) -> u32 {
        self.end(n).qp.qpn.value()
    }
    fn keys(&self, n: usize) -> MrKeys {
        self.end(n).keys
    }
    fn iova(&self, n: usize) -> u64 {
        self.end(n).mem.addr()
    }
    fn read(&self, n: usize, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.end(n).mem.read(off, &mut v).unwrap();
        v
    }
    fn write(&self, n: usize, off: usize, data: &[u8]) {
        self.end(n).mem.write(off, data).unwrap();
    }
    fn counter(&self, n: usize, name: &str) -> u64 {
        self.end(n).counters.get(name).unwrap_or_else(|| panic!("no counter {name}"))
    }
    fn state(&self, n: usize) -> QpState {
        self.end(n).qp.state()
    }
    fn sge(&self, n: usize, off: u64, len: u32) -> Sge {
        Sge { addr: self.iova(n) + off, length: len, lkey: self.keys(n).lkey }
    }
}

/// INIT, RTR and RTS attributes of node `me`'s RC QP connecting to `dest_qpn` at `remote_ip`.
pub fn attrs(s: &Setup, me: usize, remote_ip: IpAddr, dest_qpn: u32) -> [QpAttr; 3] {
    QpAttr {
        access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        remote_ip: Some(remote_ip),
        path_mtu: s.mtu_code,
        dest_qpn,
        rq_psn: s.psn[1 - me],
        max_dest_rd_atomic: s.max_rd_atomic,
        min_rnr_timer: s.min_rnr_timer,
        sq_psn: s.psn[me],
        timeout: s.timeout,
        retry_cnt: s.retry_cnt,
        rnr_retry: s.rnr_retry,
        max_rd_atomic: s.max_rd_atomic,
        ..QpAttr::default()
    }
    .bring_up(QpType::Rc)
}

pub struct End {
    ip: IpAddr,
    mtpt: Arc<Mtpt>,
    mem: Arc<MemBlock>,
    keys: MrKeys,
    scq: Arc<Cq>,
    rcq: Arc<Cq>,
    qp: Arc<QpShared>,
    counters: DeviceCounters,
    taken: [Vec<WorkCompletion>; 2],
}

impl End {
    fn take(&mut self, q: Q) -> &mut Vec<WorkCompletion> {
        let (cq, i) = if q == Q::Send { (&self.scq, 0) } else { (&self.rcq, 1) };
        while let Some(wc) = cq.poll_one() {
            self.taken[i].push(wc);
        }
        &mut self.taken[i]
    }
}

const CAP: QpCap =
    QpCap { max_send_wr: 1024, max_recv_wr: 1024, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 256 };

// ---------------------------------------------------------------------------------------

pub struct FabricNet {
    pub fab: Fabric,
    ends: Vec<End>,
    queued_posts: bool,
}

impl FabricNet {
    pub fn new(s: Setup, seed: u64) -> FabricNet {
        let mut fab = Fabric::new(2_000).with_seed(seed);
        let mut ends = Vec::new();
        for ip in ["10.0.0.1", "10.0.0.2"] {
            let ip: IpAddr = ip.parse().unwrap();
            let mtpt = Arc::new(Mtpt::new(64));
            let counters = Arc::new(Counters::default());
            let mut cfg = EngineConfig::new(ip);
            cfg.zero_copy = s.zero_copy;
            cfg.cc = s.cc;
            if let Some(m) = s.max_inflight {
                cfg.max_inflight_per_dest = m;
            }
            let mut e = Engine::new(cfg, mtpt.clone(), counters.clone());
            let mem = Arc::new(MemBlock::new(MEM).unwrap());
            let keys = mtpt.register(PdId(1), mem.clone(), 0, MEM, mem.addr(), AccessFlags::REGISTRABLE).unwrap();
            let (scq, rcq) = (Arc::new(Cq::new(1, 4096)), Arc::new(Cq::new(2, 4096)));
            let qp = e.create_qp(QpInit::new(QpType::Rc, PdId(1), scq.clone(), rcq.clone()).cap(CAP)).unwrap();
            fab.add(e);
            ends.push(End {
                ip,
                mtpt,
                mem,
                keys,
                scq,
                rcq,
                qp,
                counters: DeviceCounters::new(vec![counters]),
                taken: [Vec::new(), Vec::new()],
            });
        }
        for me in 0..2 {
            let other = 1 - me;
            let qpn = ends[me].qp.qpn;
            for a in attrs(&s, me, ends[other].ip, ends[other].qp.qpn.value()) {
                fab.engine(me).modify_qp(0, qpn, &a).unwrap();
            }
        }
        FabricNet { fab, ends, queued_posts: s.queued_posts }
    }
}

impl Net for FabricNet {
    fn backend(&self) -> &'static str {
        "fabric"
    }
    fn exact(&self) -> bool {
        true
    }
    fn end(&self, n: usize) -> &End {
        &self.ends[n]
    }
    fn add_rule(&mut self, from: usize, f: Fault) {
        let ip = self.ends[from].ip;
        self.fab.add_rule(f.from(ip));
    }
    fn post_send(&mut self, n: usize, wr: SendWr) {
        let e = &self.ends[n];
        let wqe = rnic_core::engine::qp::validate_send(&e.qp, &e.mtpt, &wr).unwrap();
        let (qpn, now) = (e.qp.qpn, self.fab.now());
        if self.queued_posts {
            self.fab.engine(n).queue_send(qpn, wqe);
        } else {
            self.fab.engine(n).post_send(now, qpn, wqe);
        }
    }
    fn post_recv(&mut self, n: usize, wr: RecvWr) {
        let e = &self.ends[n];
        let wqe = rnic_core::engine::qp::validate_recv(&e.qp, &e.mtpt, &wr).unwrap();
        let qpn = e.qp.qpn;
        self.fab.engine(n).post_recv(qpn, wqe);
    }
    fn wait(&mut self, n: usize, q: Q, count: usize, max_ns: u64) -> Vec<WorkCompletion> {
        let deadline = self.fab.now() + max_ns;
        let ends = &mut self.ends;
        self.fab.run_while(|_| ends[n].take(q).len() >= count, deadline);
        std::mem::take(self.ends[n].take(q))
    }
    fn idle(&mut self, ns: u64) {
        let t = self.fab.now() + ns;
        self.fab.run_until(t);
    }
    fn until_counter(&mut self, n: usize, name: &str, at_least: u64, max_ns: u64) -> bool {
        let deadline = self.fab.now() + max_ns;
        let c = self.ends[n].counters.clone();
        self.fab.run_while(|_| c.get(name).unwrap_or(0) >= at_least, deadline)
    }
    fn inject(&mut self, from: usize, data: Vec<u8>) {
        let (src, dst) = (self.ends[from].ip, self.ends[1 - from].ip);
        self.fab.inject(Wire { src, dst, src_port: rnic_wire::ROCEV2_UDP_PORT, data, ce: false });
    }
}

// ---------------------------------------------------------------------------------------

pub struct UdpNet {
    devs: Vec<Device>,
    faults: Vec<FaultHandle>,
    ends: Vec<End>,
}

impl UdpNet {
    /// Two devices at `ip_a` and `ip_b` (distinct per test, so tests run in parallel).
    ///
    /// Real threads can be descheduled for milliseconds on a loaded machine, which a 1 ms
    /// local ACK timer would read as loss: a non-zero timeout is lengthened 16-fold here
    /// (same stories, same recoveries; only a spurious timeout becomes unlikely).
    pub fn new(s: Setup, seed: u64, ip_a: &str, ip_b: &str) -> UdpNet {
        let s = Setup { timeout: if s.timeout == 0 { 0 } else { (s.timeout + 4).min(31) }, ..s };
        let (mut devs, mut faults, mut ends) = (Vec::new(), Vec::new(), Vec::new());
        for (i, ip) in [ip_a, ip_b].into_iter().enumerate() {
            let ip: IpAddr = ip.parse().unwrap();
            let f = FaultHandle::new(Faults::new(seed.wrapping_add(i as u64)));
            let mut cfg = DeviceConfig::new(format!("rnic{i}"), ip);
            cfg.pin_memory = false;
            cfg.capture = None;
            cfg.faults = Some(f.clone());
            let dev = Device::open(cfg).unwrap();
            let mem = Arc::new(MemBlock::new(MEM).unwrap());
            let pd = dev.alloc_pd();
            let keys = dev.reg_mr(pd, mem.clone(), 0, MEM, mem.addr(), AccessFlags::REGISTRABLE).unwrap();
            let (scq, rcq) = (dev.create_cq(4096), dev.create_cq(4096));
            let qp = dev.create_qp(QpInit::new(QpType::Rc, pd, scq.clone(), rcq.clone()).cap(CAP)).unwrap();
            let counters = dev.counters().clone();
            ends.push(End {
                ip,
                mtpt: dev.mtpt().clone(),
                mem,
                keys,
                scq,
                rcq,
                qp,
                counters,
                taken: [Vec::new(), Vec::new()],
            });
            devs.push(dev);
            faults.push(f);
        }
        for me in 0..2 {
            let other = 1 - me;
            for a in attrs(&s, me, ends[other].ip, ends[other].qp.qpn.value()) {
                devs[me].modify_qp(ends[me].qp.qpn, a).unwrap();
            }
        }
        UdpNet { devs, faults, ends }
    }

    pub fn faults(&self, n: usize) -> &FaultHandle {
        &self.faults[n]
    }

    pub fn device(&self, n: usize) -> &Device {
        &self.devs[n]
    }
}

impl Net for UdpNet {
    fn backend(&self) -> &'static str {
        "udp"
    }
    fn exact(&self) -> bool {
        false
    }
    fn end(&self, n: usize) -> &End {
        &self.ends[n]
    }
    fn add_rule(&mut self, from: usize, f: Fault) {
        self.faults[from].lock().add(f);
    }
    fn post_send(&mut self, n: usize, wr: SendWr) {
        self.devs[n].post_send(&self.ends[n].qp, &wr).unwrap();
    }
    fn post_recv(&mut self, n: usize, wr: RecvWr) {
        self.devs[n].post_recv(&self.ends[n].qp, &wr).unwrap();
    }
    fn wait(&mut self, n: usize, q: Q, count: usize, max_ns: u64) -> Vec<WorkCompletion> {
        // Real time runs slower than the fabric's: allow generously more, never less
        // (0 means: only what is already there).
        let allow = if max_ns == 0 {
            Duration::ZERO
        } else {
            Duration::from_nanos(max_ns.saturating_mul(20)).max(Duration::from_secs(5))
        };
        let deadline = Instant::now() + allow;
        while self.ends[n].take(q).len() < count && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        std::mem::take(self.ends[n].take(q))
    }
    fn idle(&mut self, ns: u64) {
        std::thread::sleep(Duration::from_nanos(ns));
    }
    fn until_counter(&mut self, n: usize, name: &str, at_least: u64, max_ns: u64) -> bool {
        let deadline = Instant::now() + Duration::from_nanos(max_ns.saturating_mul(20)).max(Duration::from_secs(5));
        while self.counter(n, name) < at_least {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        true
    }
    fn inject(&mut self, from: usize, mut data: Vec<u8>) {
        // A socket on the sender's address (any port: the receiver checks the IP).
        let (src, dst) = (self.ends[from].ip, self.ends[1 - from].ip);
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        rnic_io::set_pmtudisc_do(&s).unwrap(); // IPv4 ID 0, as the ICRC assumes
        s.bind(&std::net::SocketAddr::new(src, 0).into()).unwrap();
        let sock: std::net::UdpSocket = s.into();
        let port = sock.local_addr().unwrap().port();
        rnic_wire::icrc::IcrcContext::new(src, dst, port, rnic_wire::ROCEV2_UDP_PORT).fill(&mut data).unwrap();
        sock.send_to(&data, (dst, rnic_wire::ROCEV2_UDP_PORT)).unwrap();
    }
}
