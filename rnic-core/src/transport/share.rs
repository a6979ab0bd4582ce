//! One UDP device, many processes: every process that opens a device runs its own engine
//! on its own socket, bound to the device's address and port 4791 in one `SO_REUSEPORT`
//! group, and the kernel steers each datagram to the process that owns its destination
//! QP. Nothing else is shared: a process's memory is reachable only through its own
//! engine (an rkey it granted), and whatever it held (QPNs, sockets, names) goes when it
//! exits, however it exits. ARCHITECTURE.md ("Processes sharing a device") has the
//! design, the alternatives weighed and the measurements.
//!
//! - **Members.** A process joins a device as one of [`MEMBERS`] members by binding the
//!   abstract Unix name `rnic:<ip>:<port>:<m>` (no file; the kernel releases it when the
//!   process dies). Member *m* hands out the QPNs whose top bits are *m*
//!   ([`qpn_range`]), so a QPN names its process.
//! - **Steering.** The group's classic BPF program ([`program`]) reads BTH's DestQP from
//!   each datagram and returns the group index of the owner's socket; QP1 (the CM) goes to
//!   the *agent*, the lowest live member. The kernel numbers a group's sockets by when
//!   they joined and, when one leaves, moves the last into its place, so the index of a
//!   member is learnt, never assumed: a member *probes* (a datagram to the device for
//!   each index *k*, which the program sends to socket *k*; its owner replies with its
//!   member number to the prober's Unix name) and attaches the program for what it found.
//! - **Forwarding.** A packet that reaches a member that does not own its QP (the program
//!   not yet updated after a join or an exit, or a GSO batch from a peer that mixed
//!   members) is forwarded, ICRC already checked, to the owner's Unix name and delivered
//!   there; it also makes the member probe again. A packet for a member that no longer
//!   exists is dropped, as a packet for a destroyed QP is (its peers time out: IBA
//!   C9-140's retry counter, as on hardware when a process dies).
//!
//! The Unix datagrams carry the sender's credentials (`SO_PASSCRED`): only a process of
//! the same user (the only one the kernel lets join the group) is listened to, and a
//! message that does not parse is counted and dropped.

use crate::counters::Counters;
use crate::engine::{FIRST_QPN, LAST_QPN};
use rnic_io::BpfInsn;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Processes that can share one device.
pub const MEMBERS: u8 = 64;
/// A QPN's member is its top 6 bits: each member has 2^18 QPNs.
pub const MEMBER_SHIFT: u32 = 18;

/// The member that owns `qpn`.
pub fn member_of(qpn: u32) -> u8 {
    u8::try_from((qpn & 0xFF_FFFF) >> MEMBER_SHIFT).unwrap_or(u8::MAX)
}

/// The QPNs member `m` hands out, first and last (QP0, QP1 and the multicast QPN are
/// nobody's).
pub fn qpn_range(m: u8) -> (u32, u32) {
    let base = u32::from(m) << MEMBER_SHIFT;
    (base.max(FIRST_QPN), (base | ((1 << MEMBER_SHIFT) - 1)).min(LAST_QPN))
}

/// The first byte of a probe datagram: a BTH opcode of the manufacturer-specific range
/// (IBA 9.2.1, 11xxxxxx) that rnic never sends as traffic.
const PROBE_OPCODE: u8 = 0xFF;
const PROBE_MAGIC: &[u8; 4] = b"RNSP";
/// opcode, index, magic, nonce, prober.
const PROBE_LEN: usize = 2 + 4 + 8 + 1;

/// The DestQP of the QP1 (GSI) that carries the CM's MADs.
const GSI_QPN: u32 = 1;

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20;
const LD_B_ABS: u16 = 0x30;
const ALU_AND_K: u16 = 0x54;
const ALU_RSH_K: u16 = 0x74;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
const RET_A: u16 = 0x16;
/// A return past the group's end: the kernel's hash decides.
const NO_INDEX: u32 = u32::MAX;

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> BpfInsn {
    BpfInsn { code, jt, jf, k }
}

/// The group's steering program for `table` (the member at each socket index): a probe
/// goes to the index it names; QP1 to the agent (the lowest member of the table); any
/// other packet to the index of its DestQP's member, or to the hash when that member is
/// not in the table. A datagram too short to read fails the load, and the program then
/// returns 0 (the kernel's rule): socket 0 drops it as malformed.
pub fn program(table: &[u8]) -> Vec<BpfInsn> {
    let agent = table
        .iter()
        .enumerate()
        .min_by_key(|&(_, m)| *m)
        .map_or(NO_INDEX, |(i, _)| u32::try_from(i).unwrap_or(NO_INDEX));
    let mut p = vec![
        insn(LD_B_ABS, 0, 0, 0),
        insn(JEQ_K, 0, 2, u32::from(PROBE_OPCODE)),
        insn(LD_B_ABS, 0, 0, 1),
        insn(RET_A, 0, 0, 0),
        // BTH bytes 4..8: reserved, DestQP.
        insn(LD_W_ABS, 0, 0, 4),
        insn(ALU_AND_K, 0, 0, 0xFF_FFFF),
        insn(JEQ_K, 0, 1, GSI_QPN),
        insn(RET_K, 0, 0, agent),
        insn(ALU_RSH_K, 0, 0, MEMBER_SHIFT),
    ];
    for (i, &m) in table.iter().enumerate() {
        p.push(insn(JEQ_K, 0, 1, u32::from(m)));
        p.push(insn(RET_K, 0, 0, u32::try_from(i).unwrap_or(NO_INDEX)));
    }
    p.push(insn(RET_K, 0, 0, NO_INDEX));
    p
}

/// Runs a program of the instructions [`program`] uses over `data` as the kernel would
/// (a load past the end returns 0). For tests and the fuzz target: the program is checked
/// against what it must do, not against itself.
pub fn run_program(prog: &[BpfInsn], data: &[u8]) -> Option<u32> {
    let mut a: u32 = 0;
    let mut pc = 0usize;
    loop {
        let i = prog.get(pc)?;
        pc += 1;
        match i.code {
            LD_W_ABS => {
                let k = usize::try_from(i.k).ok()?;
                let Some(b) = data.get(k..k + 4) else { return Some(0) };
                a = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            }
            LD_B_ABS => {
                let Some(&b) = data.get(usize::try_from(i.k).ok()?) else { return Some(0) };
                a = u32::from(b);
            }
            ALU_AND_K => a &= i.k,
            ALU_RSH_K => a = a.checked_shr(i.k).unwrap_or(0),
            JEQ_K => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
            RET_K => return Some(i.k),
            RET_A => return Some(a),
            _ => return None,
        }
    }
}

/// What members say to each other through their Unix names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg<'a> {
    /// A packet the sender received for a QP of the addressee: its source, whether it was
    /// congestion-experienced, the IPv4 ID its ICRC was checked for (for the capture).
    Packet {
        /// Where it came from.
        src: SocketAddr,
        /// ECN CE (or a congested receive queue).
        ce: bool,
        /// The IPv4 ID its ICRC matched.
        ident: u16,
        /// A CM REQ or SIDR_REQ offered to every member: taken only by one that listens on its
        /// service ID.
        offer: bool,
        /// A CM MAD the agent chose this member for (not to be routed again).
        decided: bool,
        /// The RoCE packet, BTH first.
        data: &'a [u8],
    },
    /// The answer to probe `nonce`: the sender's socket is at group index `index`.
    ProbeReply {
        /// The probe's.
        nonce: u64,
        /// Where the probe landed.
        index: u8,
        /// Who got it.
        member: u8,
    },
    /// The group's sockets, as a probe found them (the member at each index).
    Table(&'a [u8]),
    /// A member left cleanly: the group's numbering changed.
    Left,
    /// Member `member` has just joined: the lower members (the agent among them) count
    /// it at once, before any probe (a REQ for its listener is offered to it).
    Joined {
        /// Who joined.
        member: u8,
    },
    /// Member `member` does not listen on the REQ offered as `key` ([`offer_key`]).
    Decline {
        /// The offer's.
        key: u64,
        /// Who declines.
        member: u8,
    },
}

const MSG_MAGIC: &[u8; 4] = b"RNSH";

impl<'a> Msg<'a> {
    /// The message's bytes, into `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(MSG_MAGIC);
        match self {
            Msg::Packet { src, ce, ident, offer, decided, data } => {
                let v6 = src.is_ipv6();
                out.push(1);
                out.push(u8::from(*ce) | u8::from(v6) << 1 | u8::from(*offer) << 2 | u8::from(*decided) << 3);
                out.extend_from_slice(&ident.to_be_bytes());
                out.extend_from_slice(&src.port().to_be_bytes());
                match src.ip() {
                    IpAddr::V4(a) => out.extend_from_slice(&a.octets()),
                    IpAddr::V6(a) => out.extend_from_slice(&a.octets()),
                }
                out.extend_from_slice(data);
            }
            Msg::ProbeReply { nonce, index, member } => {
                out.push(2);
                out.extend_from_slice(&nonce.to_be_bytes());
                out.push(*index);
                out.push(*member);
            }
            Msg::Table(t) => {
                out.push(3);
                out.extend_from_slice(t);
            }
            Msg::Left => out.push(4),
            Msg::Joined { member } => {
                out.push(6);
                out.push(*member);
            }
            Msg::Decline { key, member } => {
                out.push(5);
                out.extend_from_slice(&key.to_be_bytes());
                out.push(*member);
            }
        }
    }

    /// Reads a message; `None` for anything else (never panics: any bytes).
    pub fn decode(b: &'a [u8]) -> Option<Msg<'a>> {
        let rest = b.strip_prefix(MSG_MAGIC)?;
        let (&kind, rest) = rest.split_first()?;
        match kind {
            1 => {
                let (&flags, rest) = rest.split_first()?;
                if flags & !15 != 0 {
                    return None;
                }
                let ident = u16::from_be_bytes(rest.get(0..2)?.try_into().ok()?);
                let port = u16::from_be_bytes(rest.get(2..4)?.try_into().ok()?);
                let (ip, data): (IpAddr, _) = if flags & 2 != 0 {
                    let o: [u8; 16] = rest.get(4..20)?.try_into().ok()?;
                    (o.into(), rest.get(20..)?)
                } else {
                    let o: [u8; 4] = rest.get(4..8)?.try_into().ok()?;
                    (o.into(), rest.get(8..)?)
                };
                Some(Msg::Packet {
                    src: SocketAddr::new(ip, port),
                    ce: flags & 1 != 0,
                    ident,
                    offer: flags & 4 != 0,
                    decided: flags & 8 != 0,
                    data,
                })
            }
            2 if rest.len() == 10 => Some(Msg::ProbeReply {
                nonce: u64::from_be_bytes(rest[..8].try_into().ok()?),
                index: rest[8],
                member: rest[9],
            }),
            3 if rest.len() <= usize::from(MEMBERS) && rest.iter().all(|&m| m < MEMBERS) => Some(Msg::Table(rest)),
            4 if rest.is_empty() => Some(Msg::Left),
            5 if rest.len() == 9 => {
                Some(Msg::Decline { key: u64::from_be_bytes(rest[..8].try_into().ok()?), member: rest[8] })
            }
            6 if rest.len() == 1 && rest[0] < MEMBERS => Some(Msg::Joined { member: rest[0] }),
            _ => None,
        }
    }
}

/// A probe datagram: (index, nonce, prober), or `None` if `pkt` is not one.
pub fn parse_probe(pkt: &[u8]) -> Option<(u8, u64, u8)> {
    if pkt.len() != PROBE_LEN || pkt[0] != PROBE_OPCODE || &pkt[2..6] != PROBE_MAGIC {
        return None;
    }
    Some((pkt[1], u64::from_be_bytes(pkt[6..14].try_into().ok()?), pkt[14]))
}

fn probe_datagram(index: u8, nonce: u64, prober: u8) -> [u8; PROBE_LEN] {
    let mut p = [0u8; PROBE_LEN];
    p[0] = PROBE_OPCODE;
    p[1] = index;
    p[2..6].copy_from_slice(PROBE_MAGIC);
    p[6..14].copy_from_slice(&nonce.to_be_bytes());
    p[14] = prober;
    p
}

/// The DestQP of a RoCE packet (BTH bytes 5..8), if it has a BTH.
fn dest_qp(pkt: &[u8]) -> Option<u32> {
    let b = pkt.get(4..8)?;
    Some(u32::from_be_bytes([0, b[1], b[2], b[3]]))
}

/// The abstract Unix name of member `m` of the device at `addr`.
fn name_of(addr: SocketAddr, m: u8) -> io::Result<UnixAddr> {
    UnixAddr::from_abstract_name(format!("rnic:{}:{}:{m}", addr.ip(), addr.port()))
}

/// A running probe.
#[derive(Debug)]
struct Probe {
    nonce: u64,
    /// The live members when it started (sorted).
    live: Vec<u8>,
    /// The member found at each index.
    found: Vec<Option<u8>>,
    started: Instant,
}

/// How long a probe waits for its replies before it starts again.
const PROBE_TIMEOUT: Duration = Duration::from_millis(100);
/// The shortest gap between probes; doubles (up to [`PROBE_GAP_MAX`]) while probes find
/// nothing new, so that a peer that keeps mixing members costs little.
const PROBE_GAP: Duration = Duration::from_millis(10);
const PROBE_GAP_MAX: Duration = Duration::from_secs(1);
/// How long an answer or a table waits for room in another member's inbox.
const CTL_WAIT: Duration = Duration::from_millis(20);

/// This process's membership of a shared device (owned by the UDP transport's receiver).
#[derive(Debug)]
pub struct Share {
    addr: SocketAddr,
    member: u8,
    inbox: UnixDatagram,
    uid: u32,
    /// The member at each group index, as last learnt.
    table: Vec<u8>,
    /// The lowest live member, which takes QP1's MADs.
    agent: u8,
    probe: Option<Probe>,
    want_probe: bool,
    last_probe: Option<Instant>,
    gap: Duration,
    /// Receives since the inbox was last read.
    rounds: u32,
    /// REQs offered to the other members, waiting for their declines.
    offers: Vec<Offer>,
    /// The last read of the inbox found something: read it at every receive until it
    /// is empty (its queue holds few datagrams: `net.unix.max_dgram_qlen`, 10 by default).
    busy: bool,
    /// Sends this member's answers and tables, waiting up to [`CTL_WAIT`] for room in a
    /// busy inbox (they are few, and a lost one costs a probe).
    ctl: UnixDatagram,
    scratch: Vec<u8>,
    nonce_seed: u64,
    /// When the other members' names are next checked ([`Share::departed`]), on the
    /// device's clock.
    next_check: crate::Time,
    /// Members of the table already reported gone.
    mourned: Vec<u8>,
    /// Members a new table left out, not yet checked by [`Share::departed`]: a probe
    /// that ran after a member was killed drops it from the table, and without this its
    /// death was never reported (the survivor's connections to it waited forever).
    dropped: Vec<u8>,
}

/// How often a member checks that the members it knows still hold their names.
const LIVENESS_EVERY_NS: crate::Time = 1_000_000_000;

/// Claims a member of the device at `addr`: the lowest free one.
pub fn join(addr: SocketAddr) -> io::Result<Share> {
    // The members whose names are taken are alive (the kernel releases a dead process's
    // name): the lowest of them is the agent from the start. A new member that took
    // itself for the agent until its first probe answered handled QP1's MADs that the
    // group's hash gave it meanwhile: a REQ for another process's listener was rejected
    // (reason 8) while that listener took the same REQ from the real agent.
    let mut below = Vec::new();
    for m in 0..MEMBERS {
        let name = name_of(addr, m)?;
        match UnixDatagram::bind_addr(&name) {
            Ok(inbox) => {
                inbox.set_nonblocking(true)?;
                rnic_io::set_passcred(&inbox)?;
                let seed = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
                    ^ (u64::from(std::process::id()) << 40);
                let mut share = Share {
                    addr,
                    member: m,
                    inbox,
                    uid: rnic_io::euid(),
                    agent: below.first().copied().unwrap_or(m),
                    table: below.iter().copied().chain([m]).collect(),
                    probe: None,
                    want_probe: true,
                    last_probe: None,
                    gap: PROBE_GAP,
                    rounds: 0,
                    offers: Vec::new(),
                    busy: false,
                    ctl: {
                        let c = UnixDatagram::unbound()?;
                        c.set_write_timeout(Some(CTL_WAIT))?;
                        c
                    },
                    scratch: Vec::with_capacity(2048),
                    nonce_seed: seed,
                    next_check: 0,
                    mourned: Vec::new(),
                    dropped: Vec::new(),
                };
                share.announce(&below);
                return Ok(share);
            }
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                below.push(m);
                continue;
            }
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!(
            "the device at {addr} has all its {MEMBERS} members taken (each process sharing it holds one per shard: \
             RNIC_SHARDS=1 takes the fewest)"
        ),
    ))
}

/// Where the agent sends a CM MAD ([`Share::gsi_route`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsiRoute {
    /// This member's CM.
    Here,
    /// Member `m`'s.
    To(u8),
    /// Every other member's, for the one that listens.
    Offer,
}

/// Whether a packet is for QP1 (a MAD).
pub fn is_gsi(pkt: &[u8]) -> bool {
    dest_qp(pkt) == Some(GSI_QPN)
}

/// The service ID of a CM REQ or SIDR_REQ in a QP1 packet: the requests a member takes
/// only when it listens on it.
pub fn req_service_id(pkt: &[u8]) -> Option<u64> {
    match cm_message(pkt)? {
        rnic_wire::cm::CmMessage::Req(r) => Some(r.service_id),
        rnic_wire::cm::CmMessage::SidrReq(r) => Some(r.service_id),
        _ => None,
    }
}

/// The CM message a QP1 packet (a UD SEND_ONLY: BTH, DETH, then the 256-byte MAD) carries.
fn cm_message(pkt: &[u8]) -> Option<rnic_wire::cm::CmMessage> {
    const MAD_AT: usize = 20;
    if pkt.first() != Some(&0x64) {
        return None;
    }
    rnic_wire::cm::CmMessage::from_mad(pkt.get(MAD_AT..MAD_AT + rnic_wire::mad::MAD_LEN)?).ok()?.1
}

/// Names an offered REQ or SIDR_REQ the same way in every member: the requester's address
/// and its communication (or request) ID, which one ID space of the requester's CM hands
/// out (stable across builds: CRC-32 of the address).
pub fn offer_key(src: SocketAddr, pkt: &[u8]) -> Option<u64> {
    let id = match cm_message(pkt)? {
        rnic_wire::cm::CmMessage::Req(r) => r.local_comm_id,
        rnic_wire::cm::CmMessage::SidrReq(r) => r.request_id,
        _ => return None,
    };
    let ip = match src.ip() {
        IpAddr::V4(a) => crc32fast::hash(&a.octets()),
        IpAddr::V6(a) => crc32fast::hash(&a.octets()),
    };
    Some(u64::from(ip) << 32 | u64::from(id))
}

/// A REQ (or SIDR_REQ) the agent offered to the other members, waiting for their declines: when every
/// one declined, the agent's own CM takes it (and rejects it: nobody listens).
#[derive(Debug)]
struct Offer {
    key: u64,
    waiting: Vec<u8>,
    pkt: Vec<u8>,
    src: SocketAddr,
    ident: u16,
    at: Instant,
}

/// Offers kept at most (the oldest goes), and how long one waits.
const OFFERS: usize = 64;
const OFFER_WAIT: Duration = Duration::from_secs(2);

/// How a packet another member passed on came: checked there, and for a CM MAD, what
/// the agent made of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passed {
    /// The IPv4 ID its ICRC matched (for the capture).
    pub ident: u16,
    /// A CM REQ or SIDR_REQ offered to every member ([`Msg::Packet::offer`]).
    pub offer: bool,
    /// A CM MAD the agent chose this member for.
    pub decided: bool,
}

/// What [`Share::inbox`] took.
#[derive(Debug)]
pub enum Inbound {
    /// A forwarded packet now at `buf[..len]`.
    Packet {
        /// Its bytes in the buffer.
        len: usize,
        /// Its source.
        src: SocketAddr,
        /// ECN CE.
        ce: bool,
        /// How it came.
        via: Passed,
    },
    /// Nothing more waits.
    Empty,
}

impl Share {
    /// A descriptor readable when something waits in the inbox.
    pub fn inbox_fd(&self) -> io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        self.inbox.as_fd().try_clone_to_owned()
    }

    /// Whether this member takes QP1's MADs from the wire.
    pub fn is_agent(&self) -> bool {
        self.agent == self.member
    }

    /// This process's member number.
    pub fn member(&self) -> u8 {
        self.member
    }

    /// Whether no other member holds its name now (this one is the device's only one).
    pub fn alone(&self) -> bool {
        (0..MEMBERS).all(|m| m == self.member || !self.alive(m))
    }

    /// Whether this member owns the packet's QP (QP1: whether it is the agent). A packet
    /// too short to have a BTH is the engine's to count.
    pub fn owns(&self, pkt: &[u8]) -> bool {
        match dest_qp(pkt) {
            None => true,
            Some(GSI_QPN) => self.agent == self.member,
            Some(q) => member_of(q) == self.member,
        }
    }

    /// The member a packet this member does not own goes to.
    fn owner(&self, pkt: &[u8]) -> u8 {
        match dest_qp(pkt) {
            Some(GSI_QPN) => self.agent,
            Some(q) => member_of(q),
            None => self.member,
        }
    }

    fn alive(&self, m: u8) -> bool {
        if m == self.member {
            return true;
        }
        let Ok(s) = UnixDatagram::unbound() else { return false };
        name_of(self.addr, m).and_then(|n| s.connect_addr(&n)).is_ok()
    }

    /// When [`Share::departed`] is next due: while other members are known.
    pub fn check_due(&self) -> Option<crate::Time> {
        (self.table.len() > 1 || !self.dropped.is_empty()).then_some(self.next_check)
    }

    /// The members that have gone since the last look (their names are free: the kernel
    /// released them with the process, or the device was closed), once a second, each
    /// reported once (until a new process takes the name). The table and the steering
    /// program are left to the probes, as before: every survivor probing at the same
    /// moment made them guess, and a wrong program broke QPs between live processes.
    /// Members a probe dropped from the table meanwhile are checked too.
    pub fn departed(&mut self, now: crate::Time) -> Vec<u8> {
        if self.check_due().is_none() || now < self.next_check {
            return Vec::new();
        }
        self.next_check = now + LIVENESS_EVERY_NS;
        let mut looked: Vec<u8> = self.table.iter().chain(&self.dropped).copied().collect();
        self.dropped.clear();
        looked.sort_unstable();
        looked.dedup();
        let dead: Vec<u8> = looked.into_iter().filter(|&m| !self.alive(m)).collect();
        // A name taken again is a new process: its death will be news.
        self.mourned.retain(|m| dead.contains(m));
        let gone: Vec<u8> = dead.into_iter().filter(|m| !self.mourned.contains(m)).collect();
        self.mourned.extend(&gone);
        gone
    }

    /// Sends a forwarded packet (never waits: a full inbox drops it, as a full receive
    /// queue would, and RC retransmits).
    fn send(&self, m: u8, bytes: &[u8]) -> io::Result<()> {
        self.inbox.send_to_addr(bytes, &name_of(self.addr, m)?).map(|_| ())
    }

    /// Sends an answer, a table or a farewell, waiting a little for room.
    fn send_ctl(&self, m: u8, bytes: &[u8]) -> io::Result<()> {
        self.ctl.send_to_addr(bytes, &name_of(self.addr, m)?).map(|_| ())
    }

    /// Called once per receive: whether the inbox is to be read now (a probe is running,
    /// or every 32nd receive: forwarded packets are rare, a `recv` costs).
    pub fn inbox_due(&mut self) -> bool {
        self.rounds = self.rounds.wrapping_add(1);
        let due = self.probe.is_some() || self.want_probe || self.busy || self.rounds % 32 == 0;
        self.busy = false;
        due
    }

    /// Starts or restarts a probe when one is wanted and due.
    pub fn tick(&mut self, sock: &UdpSocket, counters: &Counters) {
        // Called every round: no clock read unless a probe runs or is wanted.
        if self.probe.is_none() && !self.want_probe {
            return;
        }
        let now = Instant::now();
        if let Some(p) = &self.probe {
            if now.duration_since(p.started) < PROBE_TIMEOUT {
                return;
            }
            // Unanswered (a member exited meanwhile, or a reply was lost): again. The
            // program stays: a guess could be worse than what another member attached.
            self.probe = None;
            self.want_probe = true;
        }
        if !self.want_probe || self.last_probe.is_some_and(|t| now.duration_since(t) < self.gap) {
            return;
        }
        self.want_probe = false;
        self.last_probe = Some(now);
        self.nonce_seed = self.nonce_seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let nonce = self.nonce_seed;
        let live: Vec<u8> = (0..MEMBERS).filter(|&m| self.alive(m)).collect();
        counters.share_probes.fetch_add(1, Ordering::Relaxed);
        for k in 0..live.len() {
            let d = probe_datagram(u8::try_from(k).unwrap_or(u8::MAX), nonce, self.member);
            if sock.send_to(&d, self.addr).is_err() {
                counters.send_err.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.probe = Some(Probe { nonce, found: vec![None; live.len()], live, started: now });
    }

    /// Answers a probe datagram that reached this member's socket; `false` if `pkt` is
    /// not one.
    pub fn answer_probe(&mut self, pkt: &[u8]) -> bool {
        let Some((index, nonce, prober)) = parse_probe(pkt) else { return false };
        if prober < MEMBERS {
            let mut out = std::mem::take(&mut self.scratch);
            Msg::ProbeReply { nonce, index, member: self.member }.encode(&mut out);
            let _ = self.send_ctl(prober, &out);
            self.scratch = out;
        }
        true
    }

    /// The agent's choice for a QP1 packet (a CM MAD): which member's CM takes it. A REQ
    /// or SIDR_REQ goes to the agent's own CM when it listens on the service ID (or no
    /// other member exists), else it is offered to every other member (the one that
    /// listens takes it, the others decline; declined by all, it comes back to the agent's
    /// CM, which rejects it: REJ, or SIDR_REP "service ID not supported"); any other CM
    /// message to the member whose communication ID it names (a SIDR_REP: its request ID;
    /// `cm::comm_id_member`). What does not parse stays here, for the agent's CM to count.
    pub fn gsi_route(&self, pkt: &[u8], listening: impl FnOnce(u64) -> bool) -> GsiRoute {
        use rnic_wire::cm::CmMessage;
        // Who is there is asked of the names, not the learnt table: a process that has
        // just joined may be listening already while this member has not read its
        // `Joined` yet (its inbox is read every few receives). CM MADs are few; a name
        // check is one `connect`.
        let others = || (0..MEMBERS).any(|m| m != self.member && self.alive(m));
        let named = match cm_message(pkt) {
            Some(CmMessage::Req(r)) => {
                return if listening(r.service_id) || !others() { GsiRoute::Here } else { GsiRoute::Offer };
            }
            Some(CmMessage::SidrReq(r)) => {
                return if listening(r.service_id) || !others() { GsiRoute::Here } else { GsiRoute::Offer };
            }
            Some(CmMessage::SidrRep(r)) => r.request_id,
            Some(CmMessage::Rep(r)) => r.remote_comm_id,
            Some(CmMessage::Rtu(r)) => r.remote_comm_id,
            Some(CmMessage::Rej(r)) => r.remote_comm_id,
            Some(CmMessage::Mra(r)) => r.remote_comm_id,
            Some(CmMessage::Dreq(r)) => r.ids.remote_comm_id,
            Some(CmMessage::Drep(r)) => r.remote_comm_id,
            None => return GsiRoute::Here,
        };
        let m = crate::cm::comm_id_member(named);
        if named == 0 || m == self.member || !self.alive(m) {
            GsiRoute::Here
        } else {
            GsiRoute::To(m)
        }
    }

    /// At the agent: passes a CM MAD to the member whose connection it is (or offers a
    /// REQ to all), as [`Share::gsi_route`] chooses; `false` when it is this member's.
    pub fn take_gsi(
        &mut self,
        pkt: &[u8],
        src: SocketAddr,
        ident: u16,
        listening: impl FnOnce(u64) -> bool,
        counters: &Counters,
    ) -> bool {
        let route = self.gsi_route(pkt, listening);
        if route == GsiRoute::Here {
            return false;
        }
        self.pass_gsi(pkt, src, ident, route, counters);
        true
    }

    /// Passes a CM MAD the agent received to member `to`, or offers a REQ to every other
    /// member.
    fn pass_gsi(&mut self, pkt: &[u8], src: SocketAddr, ident: u16, route: GsiRoute, counters: &Counters) {
        let mut out = std::mem::take(&mut self.scratch);
        let offer = route == GsiRoute::Offer;
        Msg::Packet { src, ce: false, ident, offer, decided: true, data: pkt }.encode(&mut out);
        let to: Vec<u8> = match route {
            GsiRoute::To(m) => vec![m],
            GsiRoute::Offer => (0..MEMBERS).filter(|&m| m != self.member && self.alive(m)).collect(),
            GsiRoute::Here => Vec::new(),
        };
        // Every live member is waited for, even one the offer could not reach now (its
        // inbox full): the agent refuses a REQ only when all have declined; one nobody
        // answered is forgotten, and the peer's next REQ is offered again.
        let mut waiting = Vec::new();
        for m in to {
            if self.send_ctl(m, &out).is_ok() {
                counters.share_forwarded.fetch_add(1, Ordering::Relaxed);
            }
            waiting.push(m);
        }
        self.scratch = out;
        if let (true, Some(key)) = (offer, offer_key(src, pkt)) {
            // A retried REQ replaces its earlier offer.
            self.offers.retain(|o| o.key != key);
            if self.offers.len() >= OFFERS {
                self.offers.remove(0);
            }
            self.offers.push(Offer { key, waiting, pkt: pkt.to_vec(), src, ident, at: Instant::now() });
        }
    }

    /// Tells the members below this one that it joined ([`Msg::Joined`]).
    fn announce(&mut self, below: &[u8]) {
        let mut out = std::mem::take(&mut self.scratch);
        Msg::Joined { member: self.member }.encode(&mut out);
        for &m in below {
            let _ = self.send_ctl(m, &out);
        }
        self.scratch = out;
    }

    /// Tells the agent this member does not listen on an offered REQ's service.
    pub fn decline(&mut self, pkt: &[u8], src: SocketAddr) {
        let Some(key) = offer_key(src, pkt) else { return };
        let mut out = std::mem::take(&mut self.scratch);
        Msg::Decline { key, member: self.member }.encode(&mut out);
        let _ = self.send_ctl(self.agent, &out);
        self.scratch = out;
    }

    /// An offer every member declined, for this member's CM (which rejects it), into `buf`.
    fn declined(&mut self, buf: &mut [u8]) -> Option<Inbound> {
        let now = Instant::now();
        self.offers.retain(|o| now.duration_since(o.at) < OFFER_WAIT);
        let i = self.offers.iter().position(|o| o.waiting.is_empty())?;
        let o = self.offers.remove(i);
        let n = o.pkt.len().min(buf.len());
        buf[..n].copy_from_slice(&o.pkt[..n]);
        Some(Inbound::Packet {
            len: n,
            src: o.src,
            ce: false,
            via: Passed { ident: o.ident, offer: false, decided: true },
        })
    }

    /// Forwards a packet this member does not own to its owner. A packet for a member
    /// that has gone is dropped (counted as for an unknown QP).
    pub fn forward(&mut self, pkt: &[u8], src: SocketAddr, ce: bool, ident: u16, counters: &Counters) {
        let owner = self.owner(pkt);
        let mut out = std::mem::take(&mut self.scratch);
        Msg::Packet { src, ce, ident, offer: false, decided: false, data: pkt }.encode(&mut out);
        match self.send(owner, &out) {
            Ok(()) => {
                counters.share_forwarded.fetch_add(1, Ordering::Relaxed);
                // The program sent it astray: learn the group again.
                self.want_probe = true;
            }
            Err(e) => {
                counters.unknown_qp_pkts.fetch_add(1, Ordering::Relaxed);
                if e.kind() != io::ErrorKind::WouldBlock && self.table.contains(&owner) {
                    // A member the table names has gone: the numbering changed.
                    self.want_probe = true;
                }
            }
        }
        self.scratch = out;
    }

    /// Reads one message from the inbox into `buf`: a forwarded packet is returned; probe
    /// replies and tables are taken in here (attaching the program when a probe is
    /// complete), as is anything malformed (counted).
    pub fn inbox(&mut self, buf: &mut [u8], sock: &UdpSocket, counters: &Counters) -> Inbound {
        loop {
            let (len, uid) = match rnic_io::recv_with_uid(&self.inbox, buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Err(_) => return self.declined(buf).unwrap_or(Inbound::Empty),
            };
            self.busy = true;
            if uid != Some(self.uid) {
                counters.share_refused.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let (hdr, pkt) = match Msg::decode(&buf[..len]) {
                Some(Msg::Packet { src, ce, ident, offer, decided, data }) => {
                    ((src, ce, ident, offer, decided), (data.as_ptr() as usize - buf.as_ptr() as usize, data.len()))
                }
                Some(Msg::ProbeReply { nonce, index, member }) => {
                    self.take_reply(nonce, index, member, sock, counters);
                    continue;
                }
                Some(Msg::Table(t)) => {
                    self.learn(t.to_vec());
                    continue;
                }
                Some(Msg::Left) => {
                    self.want_probe = true;
                    self.gap = PROBE_GAP;
                    continue;
                }
                Some(Msg::Joined { member }) => {
                    if !self.table.contains(&member) {
                        let mut t = self.table.clone();
                        t.push(member);
                        t.sort_unstable();
                        self.learn(t);
                    }
                    self.want_probe = true;
                    self.gap = PROBE_GAP;
                    continue;
                }
                Some(Msg::Decline { key, member }) => {
                    if let Some(o) = self.offers.iter_mut().find(|o| o.key == key) {
                        o.waiting.retain(|&m| m != member);
                    }
                    if let Some(p) = self.declined(buf) {
                        return p;
                    }
                    continue;
                }
                None => {
                    counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            };
            let (at, n) = pkt;
            buf.copy_within(at..at + n, 0);
            // QP1's MADs come from the agent, which chose this member (`gsi_route`).
            if dest_qp(&buf[..n]) != Some(GSI_QPN) && !self.owns(&buf[..n]) {
                // Never forwarded twice: the sender's view and ours disagree.
                counters.unknown_qp_pkts.fetch_add(1, Ordering::Relaxed);
                self.want_probe = true;
                continue;
            }
            let (src, ce, ident, offer, decided) = hdr;
            return Inbound::Packet { len: n, src, ce, via: Passed { ident, offer, decided } };
        }
    }

    fn learn(&mut self, table: Vec<u8>) {
        for &m in &self.table {
            if !table.contains(&m) && !self.dropped.contains(&m) {
                self.dropped.push(m);
            }
        }
        self.agent = table.iter().copied().min().unwrap_or(self.member);
        self.table = table;
    }

    fn take_reply(&mut self, nonce: u64, index: u8, member: u8, sock: &UdpSocket, counters: &Counters) {
        let Some(p) = &mut self.probe else { return };
        if p.nonce != nonce || member >= MEMBERS {
            return;
        }
        let Some(slot) = p.found.get_mut(usize::from(index)) else { return };
        *slot = Some(member);
        if p.found.iter().any(Option::is_none) {
            return;
        }
        let table: Vec<u8> = p.found.iter().flatten().copied().collect();
        let mut sorted = table.clone();
        sorted.sort_unstable();
        let live = std::mem::take(&mut p.live);
        self.probe = None;
        if sorted != live {
            // The group changed while it was probed: again. A member that answered for
            // two indices means the probes were hashed: the group has no program yet
            // (two processes joined at once, each seeing the other). The best guess
            // (members join in order) goes in, with the probe rule.
            self.want_probe = true;
            self.gap = PROBE_GAP;
            if sorted.windows(2).any(|w| w[0] == w[1]) {
                let _ = rnic_io::attach_reuseport_cbpf(sock, &program(&live));
            }
            return;
        }
        if table == self.table {
            self.gap = (self.gap * 2).min(PROBE_GAP_MAX);
        } else {
            self.gap = PROBE_GAP;
        }
        if rnic_io::attach_reuseport_cbpf(sock, &program(&table)).is_err() {
            counters.share_refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        counters.share_steered.fetch_add(1, Ordering::Relaxed);
        let mut out = std::mem::take(&mut self.scratch);
        Msg::Table(&table).encode(&mut out);
        for &m in &table {
            if m != self.member {
                let _ = self.send_ctl(m, &out);
            }
        }
        self.scratch = out;
        self.learn(table);
    }
}

impl Drop for Share {
    /// Leaving: the group's numbering changes once this process's socket is closed (the
    /// transport closes it first), which the others learn from this message; a process
    /// that is killed says nothing, and the others learn it from the packets that then go
    /// astray.
    fn drop(&mut self) {
        let mut out = Vec::new();
        Msg::Left.encode(&mut out);
        for m in 0..MEMBERS {
            if m != self.member && self.alive(m) {
                let _ = self.send_ctl(m, &out);
            }
        }
    }
}

/// Claims a raw-Ethernet device's interface and address for this process: processes
/// share UDP devices only (a raw device's frames reach every `AF_PACKET` socket on the
/// interface, and each would answer them).
pub fn claim_raw(netdev: &str, vlan: Option<u16>, ip: IpAddr) -> io::Result<UnixDatagram> {
    let vlan = vlan.map_or(String::new(), |v| format!(".{v}"));
    UnixDatagram::bind_addr(&UnixAddr::from_abstract_name(format!("rnic:raw:{netdev}{vlan}:{ip}"))?)
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;

    fn bth(qpn: u32) -> Vec<u8> {
        let mut p = vec![0x04u8, 0, 0xff, 0xff, 0];
        p.extend_from_slice(&qpn.to_be_bytes()[1..]);
        p.extend_from_slice(&[0; 4]);
        p
    }

    #[test]
    fn qpn_ranges_partition_the_space() {
        assert_eq!(qpn_range(0), (FIRST_QPN, 0x3_FFFF));
        assert_eq!(qpn_range(1), (0x4_0000, 0x7_FFFF));
        assert_eq!(qpn_range(MEMBERS - 1), (0xFC_0000, LAST_QPN));
        for m in 0..MEMBERS {
            let (a, b) = qpn_range(m);
            assert_eq!((member_of(a), member_of(b)), (m, m));
        }
    }

    #[test]
    fn the_program_steers_by_member_probe_and_agent() {
        // Members 5, 2, 9 at indices 0, 1, 2: the agent is member 2 (index 1).
        let table = [5u8, 2, 9];
        let p = program(&table);
        for (i, &m) in table.iter().enumerate() {
            let (a, b) = qpn_range(m);
            for q in [a, a + 1, (a + b) / 2, b] {
                assert_eq!(run_program(&p, &bth(q)), Some(i as u32), "qpn {q:#x}");
            }
        }
        assert_eq!(run_program(&p, &bth(1)), Some(1), "QP1 goes to the agent");
        assert_eq!(run_program(&p, &bth(qpn_range(7).0)), Some(NO_INDEX), "no member 7: hash");
        for k in 0..3u8 {
            assert_eq!(run_program(&p, &probe_datagram(k, 99, 5)), Some(u32::from(k)));
        }
        assert_eq!(run_program(&p, &[0x04, 0, 0]), Some(0), "too short: index 0, dropped there");
        assert!(p.len() < 4096, "BPF_MAXINSNS");
        assert_eq!(program(&[]).last(), Some(&insn(RET_K, 0, 0, NO_INDEX)));
    }

    #[test]
    fn messages_round_trip_and_garbage_is_refused() {
        let src: SocketAddr = "[fe80::1]:4791".parse().unwrap();
        let msgs = [
            Msg::Packet { src, ce: true, ident: 7, offer: false, decided: true, data: &[1, 2, 3] },
            Msg::Packet {
                src: "10.0.0.1:4791".parse().unwrap(),
                ce: false,
                ident: 0,
                offer: true,
                decided: false,
                data: &[],
            },
            Msg::ProbeReply { nonce: 0xdead_beef, index: 3, member: 63 },
            Msg::Table(&[0, 4, 2]),
            Msg::Left,
            Msg::Decline { key: 0x0123_4567_89ab_cdef, member: 9 },
            Msg::Joined { member: 17 },
        ];
        let mut b = Vec::new();
        for m in &msgs {
            m.encode(&mut b);
            assert_eq!(Msg::decode(&b).as_ref(), Some(m));
            // Cut anywhere: refused or read as what the shorter bytes say (a packet's or a
            // table's length is the rest), never a panic.
            for cut in 0..b.len() {
                let _ = Msg::decode(&b[..cut]);
            }
        }
        assert_eq!(Msg::decode(b"RNSH\x03\x40"), None, "member 64 does not exist");
        assert_eq!(Msg::decode(b"RNSH\x06\x40"), None, "member 64 did not join");
        assert_eq!(Msg::decode(b"RNSH\x02\0\0\0\0\0\0\0\x01\x02"), None, "a reply cut short");
        assert_eq!(Msg::decode(b"RNSX\x04"), None, "not ours");
        assert_eq!(Msg::decode(b"RNSH\x01\x10"), None, "unknown flag");
        assert_eq!(parse_probe(&probe_datagram(2, 5, 1)), Some((2, 5, 1)));
        assert_eq!(parse_probe(&bth(0x11)), None);
    }

    /// A UD SEND_ONLY to QP1 (BTH, DETH) carrying `msg`.
    fn gsi_packet(msg: rnic_wire::cm::CmMessage) -> Vec<u8> {
        let mut p = vec![0x64u8, 0, 0xff, 0xff, 0, 0, 0, 1, 0x80, 0, 0, 0];
        p.extend_from_slice(&[0x80, 1, 0, 0, 0, 0, 0, 1]);
        p.extend_from_slice(&msg.to_mad(7));
        p
    }

    #[test]
    fn the_agent_offers_sidr_reqs_and_routes_sidr_reps_by_their_request_id() {
        use rnic_wire::cm::{CmMessage, CmSidrRep, CmSidrReq, SidrStatus};
        let addr = "127.0.93.1:4791".parse().unwrap();
        let s = join(addr).unwrap();
        // Two more processes of the device (members hold names; the agent asks the names).
        let others = [join(addr).unwrap(), join(addr).unwrap()];
        let m1 = others[0].member();
        let sid = rnic_wire::cm::service_id(rnic_wire::cm::port_space::UDP, 7174);
        let member3 = u32::from(m1) << crate::cm::COMM_ID_MEMBER_SHIFT | 0x1234;
        let req = gsi_packet(CmMessage::SidrReq(Box::new(CmSidrReq {
            request_id: member3,
            pkey: 0xffff,
            service_id: sid,
            private_data: [0; 216],
        })));
        assert_eq!(req_service_id(&req), Some(sid));
        assert_eq!(s.gsi_route(&req, |x| x == sid), GsiRoute::Here, "the agent listens");
        assert_eq!(s.gsi_route(&req, |_| false), GsiRoute::Offer, "another member may");
        let src: SocketAddr = "10.0.0.1:4791".parse().unwrap();
        assert_eq!(offer_key(src, &req).map(|k| k & 0xffff_ffff), Some(u64::from(member3)));
        let rep = |request_id| {
            gsi_packet(CmMessage::SidrRep(Box::new(CmSidrRep {
                request_id,
                status: SidrStatus::Valid,
                info_len: 0,
                vendor_id: 0,
                qpn: 0x11,
                service_id: sid,
                qkey: rnic_wire::cm::RDMA_UDP_QKEY,
                info: [0; 72],
                private_data: [0; 136],
            })))
        };
        assert_eq!(req_service_id(&rep(member3)), None, "a reply is never offered");
        assert_eq!(s.gsi_route(&rep(member3), |_| true), GsiRoute::To(m1), "member 1's request");
        let member9 = 9 << crate::cm::COMM_ID_MEMBER_SHIFT | 1;
        assert_eq!(s.gsi_route(&rep(member9), |_| true), GsiRoute::Here, "no member 9: the agent counts it");
        assert_eq!(s.gsi_route(&rep(0), |_| true), GsiRoute::Here);
        // Alone on the device: a REQ nobody here listens on is the agent's own to refuse.
        drop(others);
        assert_eq!(s.gsi_route(&req, |_| false), GsiRoute::Here, "no other member");
    }

    #[test]
    fn a_member_a_probe_dropped_before_its_death_was_seen_is_still_reported() {
        let addr = "127.0.93.2:4791".parse().unwrap();
        let mut s = join(addr).unwrap();
        let other = join(addr).unwrap();
        let m = other.member();
        s.learn(vec![s.member(), m]);
        assert_eq!(s.departed(0), Vec::<u8>::new(), "alive");
        // Killed; a probe that ran before the next check found the group without it.
        drop(other);
        s.learn(vec![s.member()]);
        assert!(s.check_due().is_some(), "a dropped member is still to be checked");
        assert_eq!(s.departed(LIVENESS_EVERY_NS - 1), Vec::<u8>::new(), "not due yet");
        assert_eq!(s.departed(LIVENESS_EVERY_NS), vec![m], "its death is news once");
        assert_eq!(s.departed(2 * LIVENESS_EVERY_NS), Vec::<u8>::new());
        assert_eq!(s.check_due(), None, "alone, nothing left to check");
        // Dropped by a probe's race while alive: not reported.
        let again = join(addr).unwrap();
        s.learn(vec![s.member(), again.member()]);
        s.learn(vec![s.member()]);
        assert_eq!(s.departed(3 * LIVENESS_EVERY_NS), Vec::<u8>::new(), "alive, only left out");
    }

    proptest::proptest! {
        /// Any group (distinct members in any order), any QPN: the program returns the
        /// index of the QPN's member, the agent's for QP1, the hash's for a member not in
        /// the group.
        #[test]
        fn the_program_matches_the_design(
            members in proptest::sample::subsequence((0..MEMBERS).collect::<Vec<_>>(), 0..=64),
            order in proptest::collection::vec(proptest::prelude::any::<u32>(), 64),
            qpn in 0u32..0x100_0000,
        ) {
            let mut table = members;
            // Shuffle by the generated keys: the kernel's indices are any order.
            let mut keyed: Vec<_> = table.iter().copied().zip(order).collect();
            keyed.sort_by_key(|&(_, k)| k);
            table = keyed.into_iter().map(|(m, _)| m).collect();
            let index_of = |m: u8| table.iter().position(|&x| x == m).map_or(NO_INDEX, |i| i as u32);
            let want = if qpn == GSI_QPN {
                table.iter().min().map_or(NO_INDEX, |&a| index_of(a))
            } else {
                index_of(member_of(qpn))
            };
            proptest::prop_assert_eq!(run_program(&program(&table), &bth(qpn)), Some(want));
        }
    }
}
