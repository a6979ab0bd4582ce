//! QPs the lab responder makes by hand, over a TCP control connection to it
//! (`tools/conform/responder.c`, the rdma_cm port number in TCP), for what rdma_cm cannot
//! set up or a wire cannot show:
//!
//! - UC QPs (rdma_cm has no UC port space on RoCE: its UC service is IPoIB's);
//! - UD QPs with a Q_Key the tester knows (rdma_cm's UDP port space would make one, but
//!   a UD receiver's completions are all there is to judge, and they are told here);
//! - RC QPs whose first expected PSN the tester picks (through the CM the passive side
//!   picks it, in its REP, so a PSN wrap could not be asked for).
//!
//! The tester sends `"RNUC"` / `"RNUD"` / `"RNRC"`, version 1, its QPN, the path MTU code,
//! its GID (16 bytes) and the PSN it asks for (bit 31 set, else the responder picks); the
//! responder makes the QP (the GID index of the RoCE v2 GID of the address the TCP
//! connection came to), a region with every remote right filled as the RC responder's
//! read/write region, posts its receives, and answers with its QPN, the PSN it expects,
//! the region (VA u64, R_Key, length), the receives (count, bytes each) and, for UD, its
//! Q_Key. Then, until the tester closes the socket: `C` the receive completions so far,
//! `M` bytes of the region, `R` bytes of the receive buffers. All big-endian.

use crate::link::Link;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

/// The QP a session makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Unreliable connected, connected to the tester's QP.
    Uc,
    /// Unreliable datagram.
    Ud,
    /// Reliable connected, connected to the tester's QP.
    Rc,
}

impl Kind {
    fn magic(self) -> &'static [u8; 4] {
        match self {
            Kind::Uc => b"RNUC",
            Kind::Ud => b"RNUD",
            Kind::Rc => b"RNRC",
        }
    }
}

/// `ibv_wc_flags`' GRH bit (verbs: the first 40 bytes of the buffer hold a GRH).
pub const WC_GRH: u32 = 1;
/// `ibv_wc_flags`' immediate-data bit.
pub const WC_WITH_IMM: u32 = 2;
/// `IBV_WC_LOC_LEN_ERR`.
pub const WC_LOC_LEN_ERR: u32 = 1;

/// A receive completion as the responder reported it (`struct ibv_wc`'s fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The receive's wr_id (its buffer's index).
    pub wr_id: u32,
    /// `ibv_wc_status` (0: success).
    pub status: u32,
    /// `ibv_wc_opcode`.
    pub opcode: u32,
    /// Bytes received (for UD, the 40-byte GRH area included).
    pub byte_len: u32,
    /// Immediate data, in host order.
    pub imm: u32,
    /// `ibv_wc_flags`.
    pub flags: u32,
    /// Source QP (UD).
    pub src_qp: u32,
    /// P_Key index (UD).
    pub pkey_index: u32,
}

/// The responder's side of a session.
#[derive(Debug)]
pub struct Session {
    tcp: TcpStream,
    /// Its QPN.
    pub qpn: u32,
    /// The PSN it expects first.
    pub epsn: u32,
    /// Its region: VA, R_Key, length.
    pub rw: (u64, u32, u32),
    /// Receives posted.
    pub recvs: u32,
    /// Bytes each (for UD, the 40-byte GRH area included).
    pub recv_len: u32,
    /// Its Q_Key (UD).
    pub qkey: u32,
}

fn be32(b: &[u8], o: usize) -> u32 {
    b.get(o..o + 4).map_or(0, |x| u32::from_be_bytes([x[0], x[1], x[2], x[3]]))
}

/// The GID of an address (IPv4-mapped for IPv4, RoCEv2 A17.4.5.1).
pub fn gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// Sessions this process opened: each tester QPN is taken once.
static OPENED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The tester's QPN for a new session: `base` plus a number below `span` that no recent
/// session of this process used (every session gets its own, so a late packet of an
/// earlier one never lands on a later one's QP).
pub(crate) fn tester_qpn(base: u32, span: u32) -> u32 {
    base + OPENED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % span.max(1)
}

/// Bytes of an answer to a hello.
const ANSWER_LEN: usize = 44;

impl Session {
    /// Opens a session of `kind` with the responder at `link.peer()`, TCP port `port`: its
    /// QP for the tester's QP `qpn`, expecting `psn` first when given. Every wait is bounded
    /// by `wait`.
    pub fn open(
        link: &Link,
        port: u16,
        kind: Kind,
        qpn: u32,
        mtu_code: u8,
        psn: Option<u32>,
        wait: Duration,
    ) -> Result<Session, String> {
        let to = SocketAddr::new(link.peer(), port);
        let mut tcp =
            TcpStream::connect_timeout(&to, wait).map_err(|e| format!("TCP {to} (a {kind:?} session): {e}"))?;
        tcp.set_read_timeout(Some(wait)).map_err(|e| e.to_string())?;
        tcp.set_write_timeout(Some(wait)).map_err(|e| e.to_string())?;
        let mut hello = Vec::with_capacity(36);
        hello.extend_from_slice(kind.magic());
        hello.extend_from_slice(&1u32.to_be_bytes());
        hello.extend_from_slice(&(qpn & 0xff_ffff).to_be_bytes());
        hello.extend_from_slice(&u32::from(mtu_code).to_be_bytes());
        hello.extend_from_slice(&gid(link.local()));
        hello.extend_from_slice(&psn.map_or(0, |p| 0x8000_0000 | (p & 0xff_ffff)).to_be_bytes());
        tcp.write_all(&hello).map_err(|e| format!("the {kind:?} session hello: {e}"))?;
        let mut rep = [0u8; ANSWER_LEN];
        tcp.read_exact(&mut rep).map_err(|e| format!("no {kind:?} session answer from {to}: {e}"))?;
        if &rep[0..4] != kind.magic() || be32(&rep, 4) != 1 {
            return Err(format!("the {kind:?} session answer is not rnic's responder's"));
        }
        let va = u64::from(be32(&rep, 16)) << 32 | u64::from(be32(&rep, 20));
        let s = Session {
            tcp,
            qpn: be32(&rep, 8) & 0xff_ffff,
            epsn: be32(&rep, 12) & 0xff_ffff,
            rw: (va, be32(&rep, 24), be32(&rep, 28)),
            recvs: be32(&rep, 32),
            recv_len: be32(&rep, 36),
            qkey: be32(&rep, 40),
        };
        if psn.is_some_and(|p| p & 0xff_ffff != s.epsn) {
            return Err(format!("the responder expects PSN {:#08x}, not the one asked for", s.epsn));
        }
        Ok(s)
    }

    /// The receive completions so far.
    pub fn completions(&mut self) -> Result<Vec<Completion>, String> {
        self.tcp.write_all(b"C").map_err(|e| e.to_string())?;
        let mut n = [0u8; 4];
        self.tcp.read_exact(&mut n).map_err(|e| format!("completions: {e}"))?;
        let n = u32::from_be_bytes(n).min(4096);
        let mut b = vec![0u8; usize::try_from(n).unwrap_or(0) * 32];
        self.tcp.read_exact(&mut b).map_err(|e| format!("completions: {e}"))?;
        Ok(b.chunks(32)
            .map(|e| Completion {
                wr_id: be32(e, 0),
                status: be32(e, 4),
                opcode: be32(e, 8),
                byte_len: be32(e, 12),
                imm: be32(e, 16),
                flags: be32(e, 20),
                src_qp: be32(e, 24) & 0xff_ffff,
                pkey_index: be32(e, 28),
            })
            .collect())
    }

    fn bytes(&mut self, cmd: u8, off: u32, len: u32) -> Result<Vec<u8>, String> {
        let mut q = vec![cmd];
        q.extend_from_slice(&off.to_be_bytes());
        q.extend_from_slice(&len.to_be_bytes());
        self.tcp.write_all(&q).map_err(|e| e.to_string())?;
        let mut b = vec![0u8; usize::try_from(len).unwrap_or(0)];
        self.tcp.read_exact(&mut b).map_err(|e| format!("memory: {e}"))?;
        Ok(b)
    }

    /// `len` bytes of the region from `off`.
    pub fn memory(&mut self, off: u32, len: u32) -> Result<Vec<u8>, String> {
        self.bytes(b'M', off, len)
    }

    /// `len` bytes of receive buffer `wr_id`.
    pub fn receive_buffer(&mut self, wr_id: u32, len: u32) -> Result<Vec<u8>, String> {
        self.bytes(b'R', wr_id.saturating_mul(self.recv_len), len)
    }
}
