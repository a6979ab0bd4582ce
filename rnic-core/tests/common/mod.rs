//! A two-node harness over the deterministic fabric: node A and node B, each with one
//! protection domain, one region of memory, one CQ pair and one connected RC QP.
#![allow(dead_code, clippy::cast_possible_truncation)]

pub mod hostile;
pub mod net;

use rnic_core::counters::Counters;
use rnic_core::cq::Cq;
use rnic_core::engine::qp::QpInit;
use rnic_core::engine::qp::{self, QpAttr, QpCap, QpShared};
use rnic_core::engine::{Engine, EngineConfig};
use rnic_core::fabric::Fabric;
use rnic_core::mem::MemBlock;
use rnic_core::mr::{AccessFlags, MrKeys, Mtpt, PdId};
use rnic_core::qp_state::QpType;
use rnic_core::wr::{RecvWr, SendFlags, SendOp, SendWr, Sge, WorkCompletion};
use rnic_wire::roce::{RocePacket, RoceRepr};
use std::net::IpAddr;
use std::sync::Arc;

pub const A: usize = 0;
pub const B: usize = 1;

pub struct Node {
    pub ip: IpAddr,
    pub mtpt: Arc<Mtpt>,
    pub pd: PdId,
    pub mem: Arc<MemBlock>,
    pub keys: MrKeys,
    pub iova: u64,
    pub scq: Arc<Cq>,
    pub rcq: Arc<Cq>,
    pub qp: Arc<QpShared>,
}

pub struct Pair {
    pub fab: Fabric,
    pub nodes: [Node; 2],
}

pub const MEM: usize = 4 << 20;

fn node(fab: &mut Fabric, ip: &str, cap: QpCap) -> Node {
    let ip: IpAddr = ip.parse().unwrap();
    let mtpt = Arc::new(Mtpt::new(1024));
    let mut e = Engine::new(EngineConfig::new(ip), mtpt.clone(), Arc::new(Counters::default()));
    let pd = PdId(1);
    let mem = Arc::new(MemBlock::new(MEM).unwrap());
    let iova = mem.addr();
    let keys = mtpt.register(pd, mem.clone(), 0, MEM, iova, AccessFlags::REGISTRABLE).unwrap();
    let scq = Arc::new(Cq::new(1, 4096));
    let rcq = Arc::new(Cq::new(2, 4096));
    let qp = e.create_qp(QpInit::new(QpType::Rc, pd, scq.clone(), rcq.clone()).cap(cap)).unwrap();
    fab.add(e);
    Node { ip, mtpt, pd, mem, keys, iova, scq, rcq, qp }
}

/// INIT, RTR and RTS attributes of an RC QP connecting to `remote` (timeout 10, retries 7,
/// min_rnr_timer 1, 4 outstanding READs each way).
pub fn connect_attrs(remote: &Node, mtu_code: u32, sq_psn: u32, rq_psn: u32) -> [QpAttr; 3] {
    let s = net::Setup { mtu_code, psn: [sq_psn, rq_psn], timeout: 10, ..net::Setup::default() };
    net::attrs(&s, 0, remote.ip, remote.qp.qpn.value())
}

impl Pair {
    /// Two connected nodes at path MTU `mtu_code` (ibv code), with the given PSNs.
    pub fn new(mtu_code: u32, psn_a: u32, psn_b: u32) -> Pair {
        Self::with_cap(mtu_code, psn_a, psn_b, QpCap::default())
    }

    pub fn with_cap(mtu_code: u32, psn_a: u32, psn_b: u32, cap: QpCap) -> Pair {
        let mut fab = Fabric::new(2_000);
        let a = node(&mut fab, "10.0.0.1", cap);
        let b = node(&mut fab, "10.0.0.2", cap);
        let mut p = Pair { fab, nodes: [a, b] };
        for (me, other, sq, rq) in [(A, B, psn_a, psn_b), (B, A, psn_b, psn_a)] {
            let attrs = connect_attrs(&p.nodes[other], mtu_code, sq, rq);
            let qpn = p.nodes[me].qp.qpn;
            for at in attrs {
                p.fab.engine(me).modify_qp(0, qpn, &at).unwrap();
            }
        }
        p
    }

    pub fn post_send(&mut self, n: usize, wr: SendWr) -> Result<(), qp::PostError> {
        let node = &self.nodes[n];
        let wqe = qp::validate_send(&node.qp, &node.mtpt, &wr)?;
        let qpn = node.qp.qpn;
        let now = self.fab.now();
        self.fab.engine(n).post_send(now, qpn, wqe);
        Ok(())
    }

    /// Posts as a poster between rounds does (`Engine::queue_send`): queued, not sent.
    pub fn queue_send(&mut self, n: usize, wr: SendWr) -> Result<(), qp::PostError> {
        let node = &self.nodes[n];
        let wqe = qp::validate_send(&node.qp, &node.mtpt, &wr)?;
        let qpn = node.qp.qpn;
        self.fab.engine(n).queue_send(qpn, wqe);
        Ok(())
    }

    /// What the round after such posts does first.
    pub fn transmit_queued(&mut self, n: usize) {
        let now = self.fab.now();
        self.fab.engine(n).transmit_queued(now);
    }

    pub fn post_recv(&mut self, n: usize, wr: RecvWr) -> Result<(), qp::PostError> {
        let node = &self.nodes[n];
        let wqe = qp::validate_recv(&node.qp, &node.mtpt, &wr)?;
        let qpn = node.qp.qpn;
        self.fab.engine(n).post_recv(qpn, wqe);
        Ok(())
    }

    /// Runs until `n` completions are in node `node`'s send CQ (or nothing more happens).
    pub fn run(&mut self) {
        let deadline = self.fab.now() + 60_000_000_000;
        self.fab.run_until(deadline);
    }

    pub fn sge(&self, n: usize, offset: u64, len: u32) -> Sge {
        let node = &self.nodes[n];
        Sge { addr: node.iova + offset, length: len, lkey: node.keys.lkey }
    }

    pub fn fill(&self, n: usize, offset: usize, data: &[u8]) {
        self.nodes[n].mem.write(offset, data).unwrap();
    }

    pub fn read(&self, n: usize, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.nodes[n].mem.read(offset, &mut v).unwrap();
        v
    }

    pub fn wcs(cq: &Cq) -> Vec<WorkCompletion> {
        std::iter::from_fn(|| cq.poll_one()).collect()
    }
}

pub fn signaled(wr_id: u64, op: SendOp, sg_list: Vec<Sge>) -> SendWr {
    SendWr { wr_id, op, sg_list, flags: SendFlags::SIGNALED, ud: None }
}

/// Deterministic pseudo-random bytes (xorshift), so a mismatch is reproducible.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

impl Pair {
    /// Registers `len` bytes of node `n`'s block from `offset` as a region of `pd` at `iova`
    /// with rights `access` (the node's whole-block region stays registered too).
    pub fn register(&self, n: usize, pd: PdId, offset: usize, len: usize, iova: u64, access: AccessFlags) -> MrKeys {
        let node = &self.nodes[n];
        node.mtpt.register(pd, node.mem.clone(), offset, len, iova, access).unwrap()
    }

    /// Records every packet put on the fabric from now on.
    pub fn trace(&mut self) {
        self.fab.trace = Some(Vec::new());
    }

    /// Every packet recorded since [`trace`](Self::trace), parsed, with its sender.
    pub fn traced(&self) -> Vec<(IpAddr, RoceRepr)> {
        self.fab
            .trace
            .iter()
            .flatten()
            .map(|t| {
                let pkt = RocePacket::new_checked(&t.pkt.data[..]).expect("the engine emitted a malformed packet");
                (t.pkt.src, RoceRepr::parse(&pkt).expect("the engine emitted an unparsable packet"))
            })
            .collect()
    }

    /// A copy of node `n`'s whole memory block.
    pub fn snapshot(&self, n: usize) -> Vec<u8> {
        self.read(n, 0, MEM)
    }
}

/// The first offset at which `a` and `b` differ (or where the shorter ends).
pub fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y).or((a.len() != b.len()).then(|| a.len().min(b.len())))
}

// ---- UC and UD harness pieces ----

/// A node whose QP is of `qp_type` (left in RESET).
pub fn typed_node(fab: &mut Fabric, ip: &str, cap: QpCap, qp_type: QpType) -> Node {
    let ip: IpAddr = ip.parse().unwrap();
    let mtpt = Arc::new(Mtpt::new(1024));
    let mut e = Engine::new(EngineConfig::new(ip), mtpt.clone(), Arc::new(Counters::default()));
    let pd = PdId(1);
    let mem = Arc::new(MemBlock::new(MEM).unwrap());
    let iova = mem.addr();
    let keys = mtpt.register(pd, mem.clone(), 0, MEM, iova, AccessFlags::REGISTRABLE).unwrap();
    let scq = Arc::new(Cq::new(1, 4096));
    let rcq = Arc::new(Cq::new(2, 4096));
    let qp = e.create_qp(QpInit::new(qp_type, pd, scq.clone(), rcq.clone()).cap(cap)).unwrap();
    fab.add(e);
    Node { ip, mtpt, pd, mem, keys, iova, scq, rcq, qp }
}

/// The UC bring-up: IBA's UC column of the modify-QP table (no RC-only attribute).
pub fn uc_connect_attrs(remote: &Node, mtu_code: u32, sq_psn: u32, rq_psn: u32) -> [QpAttr; 3] {
    QpAttr {
        access: AccessFlags::REMOTE_WRITE,
        remote_ip: Some(remote.ip),
        path_mtu: mtu_code,
        dest_qpn: remote.qp.qpn.value(),
        rq_psn,
        sq_psn,
        ..QpAttr::default()
    }
    .bring_up(QpType::Uc)
}

/// The UD bring-up (ibv_ud_pingpong's): INIT with P_Key index, port and Q_Key; RTR with
/// nothing; RTS with the send PSN.
pub fn ud_attrs(qkey: u32, sq_psn: u32) -> [QpAttr; 3] {
    QpAttr { qkey, sq_psn, ..QpAttr::default() }.bring_up(QpType::Ud)
}

impl Pair {
    /// Two nodes with connected UC QPs at path MTU `mtu_code`.
    pub fn uc(mtu_code: u32, psn_a: u32, psn_b: u32) -> Pair {
        let mut fab = Fabric::new(2_000);
        let a = typed_node(&mut fab, "10.0.0.1", QpCap::default(), QpType::Uc);
        let b = typed_node(&mut fab, "10.0.0.2", QpCap::default(), QpType::Uc);
        let mut p = Pair { fab, nodes: [a, b] };
        for (me, other, sq, rq) in [(A, B, psn_a, psn_b), (B, A, psn_b, psn_a)] {
            let attrs = uc_connect_attrs(&p.nodes[other], mtu_code, sq, rq);
            let qpn = p.nodes[me].qp.qpn;
            for at in attrs {
                p.fab.engine(me).modify_qp(0, qpn, &at).unwrap();
            }
        }
        p
    }
}

/// The opcode and PSN of a packet on the fabric (BTH bytes 0 and 9..12).
pub fn opcode_psn(data: &[u8]) -> (u8, u32) {
    (data[0], u32::from_be_bytes([0, data[9], data[10], data[11]]))
}

impl Pair {
    /// Creates one more connected RC QP pair between A and B (A's side first), on the
    /// nodes' CQs; B's QP takes its receive WQEs from `srq_b` if given.
    pub fn extra_qp_pair(
        &mut self,
        srq_b: Option<Arc<rnic_core::srq::Srq>>,
        mtu_code: u32,
    ) -> (Arc<QpShared>, Arc<QpShared>) {
        let mut qps = Vec::new();
        for (n, srq) in [(A, None), (B, srq_b)] {
            let node = &self.nodes[n];
            let (pd, scq, rcq) = (node.pd, node.scq.clone(), node.rcq.clone());
            let qp = self.fab.engine(n).create_qp(QpInit::new(QpType::Rc, pd, scq, rcq).srq(srq)).unwrap();
            qps.push(qp);
        }
        let (qa, qb) = (qps[0].clone(), qps[1].clone());
        for (me, qp, peer) in [(A, &qa, &qb), (B, &qb, &qa)] {
            let other = &self.nodes[1 - me];
            let mut attrs = connect_attrs(other, mtu_code, 100, 100);
            attrs[1].dest_qpn = peer.qpn.value();
            for at in attrs {
                self.fab.engine(me).modify_qp(0, qp.qpn, &at).unwrap();
            }
        }
        (qa, qb)
    }

    /// Posts a send WR on an arbitrary QP of node `n`.
    pub fn post_send_on(&mut self, n: usize, qp: &QpShared, wr: SendWr) -> Result<(), qp::PostError> {
        let wqe = qp::validate_send(qp, &self.nodes[n].mtpt, &wr)?;
        let now = self.fab.now();
        self.fab.engine(n).post_send(now, qp.qpn, wqe);
        Ok(())
    }

    /// Reads the native-endian u64 at `offset` of node `n`'s memory.
    pub fn u64_at(&self, n: usize, offset: usize) -> u64 {
        u64::from_ne_bytes(self.read(n, offset, 8).try_into().unwrap())
    }

    /// Writes a native-endian u64 at `offset` of node `n`'s memory.
    pub fn set_u64(&self, n: usize, offset: usize, v: u64) {
        self.fill(n, offset, &v.to_ne_bytes());
    }
}
