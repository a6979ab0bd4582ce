//! The tester's wire: one UDP socket on port 4791 of the tester's own address, every
//! packet it sends or takes recorded (with the time, before the send) for the report's
//! captures. Whatever the peer sends goes through rnic-wire's checks (ICRC, structure,
//! headers) before anything reads it; a packet that fails them is counted and dropped,
//! never trusted and never a panic.

use rnic_wire::ethernet::{EthernetRepr, MacAddr, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use rnic_wire::icrc::{IcrcContext, IcrcMatch, Ipv4IdPolicy};
use rnic_wire::ipv4::{self, Ipv4Repr};
use rnic_wire::ipv6::Ipv6Repr;
use rnic_wire::roce::{RocePacket, RoceRepr};
use rnic_wire::udp;
use rnic_wire::Opcode;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The RoCEv2 UDP port (IBA Annex A17.2.1).
pub const ROCE_PORT: u16 = 4791;

/// One packet as it went on or came off the wire: when, and the whole Ethernet frame
/// (headers rebuilt as rnic's captures rebuild them, so `rnic ladder` and
/// `check_pcap.sh` read it).
#[derive(Debug, Clone)]
pub struct Record {
    /// Time since the Unix epoch.
    pub ts: Duration,
    /// Ethernet frame.
    pub frame: Vec<u8>,
}

/// A packet from the peer that passed every check.
#[derive(Debug, Clone)]
pub struct Received {
    /// Its headers.
    pub repr: RoceRepr,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// The tester's socket and what went through it.
#[derive(Debug)]
pub struct Link {
    sock: UdpSocket,
    local: IpAddr,
    peer: IpAddr,
    records: Vec<Record>,
    /// Datagrams from the peer that failed a check (ICRC, structure), dropped.
    pub malformed: u64,
    /// Datagrams from anyone but the peer, ignored.
    pub strangers: u64,
}

fn now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO)
}

impl Link {
    /// Binds UDP 4791 on `local` to talk to `peer`. IPv4 datagrams leave with DF and ID 0,
    /// so the ICRC is filled for the header the kernel writes.
    pub fn open(local: IpAddr, peer: IpAddr) -> io::Result<Link> {
        let sock = UdpSocket::bind(SocketAddr::new(local, ROCE_PORT))
            .map_err(|e| io::Error::new(e.kind(), format!("binding UDP {local}:{ROCE_PORT}: {e}")))?;
        if local.is_ipv4() {
            rnic_io::set_pmtudisc_do(&sock)?;
        }
        Ok(Link { sock, local, peer, records: Vec::new(), malformed: 0, strangers: 0 })
    }

    /// The tester's address.
    pub fn local(&self) -> IpAddr {
        self.local
    }

    /// The peer's address.
    pub fn peer(&self) -> IpAddr {
        self.peer
    }

    fn ctx_out(&self) -> IcrcContext {
        IcrcContext::new(self.local, self.peer, ROCE_PORT, ROCE_PORT)
    }

    /// Builds a packet from `repr` and `payload`, lets `tamper` change its bytes (a
    /// violation the codecs' `emit` refuses to write, such as a pad count that does not
    /// match the payload), fills the ICRC over the result and sends it.
    pub fn send_with(&mut self, repr: &RoceRepr, payload: &[u8], tamper: impl FnOnce(&mut Vec<u8>)) -> io::Result<()> {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut buf, payload).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        tamper(&mut buf);
        self.send_bytes(buf)
    }

    /// Sends BTH..ICRC after filling its ICRC; recorded first, with the time before the send.
    pub fn send_bytes(&mut self, buf: Vec<u8>) -> io::Result<()> {
        self.send_raw(buf, false)
    }

    /// [`Link::send_bytes`], with the ICRC made wrong (one bit of it flipped) when
    /// `bad_icrc`: a packet a conforming receiver drops silently (IBA C9-3).
    pub fn send_raw(&mut self, mut buf: Vec<u8>, bad_icrc: bool) -> io::Result<()> {
        let ctx = self.ctx_out();
        ctx.fill(&mut buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        if bad_icrc {
            if let Some(b) = buf.last_mut() {
                *b ^= 0x01;
            }
        }
        self.records.push(Record { ts: now(), frame: frame((self.local, ROCE_PORT), (self.peer, ROCE_PORT), 0, &buf) });
        self.sock.send_to(&buf, SocketAddr::new(self.peer, ROCE_PORT))?;
        Ok(())
    }

    /// Every packet the peer sends to the tester's QP `qpn` until `deadline` (CNPs aside:
    /// congestion notifications answer no request).
    pub fn packets_to(&mut self, qpn: u32, deadline: Instant) -> Vec<Received> {
        std::iter::from_fn(|| self.recv(deadline))
            .filter(|p| p.repr.bth.dest_qp.value() == qpn && p.repr.bth.opcode != Opcode::CNP)
            .collect()
    }

    /// The next packet from the peer that passes every check, or `None` at `deadline`.
    pub fn recv(&mut self, deadline: Instant) -> Option<Received> {
        let mut buf = vec![0u8; 65_536];
        loop {
            let left = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())?;
            self.sock.set_read_timeout(Some(left)).ok()?;
            let (n, from) = match self.sock.recv_from(&mut buf) {
                Ok(x) => x,
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => return None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return None,
            };
            if from.ip() != self.peer {
                self.strangers += 1;
                continue;
            }
            let bytes = buf[..n].to_vec();
            // IBA C9-3 / A17.3.3: the ICRC first. A peer's IPv4 ID is not visible to a
            // socket, so the one ID that matches is solved for (as rnic's receiver does).
            let ctx = IcrcContext::new(self.peer, self.local, from.port(), ROCE_PORT);
            let ident = match ctx.verify_with(&bytes, Ipv4IdPolicy::SolveUnknown) {
                Ok(IcrcMatch::Exact) => 0,
                Ok(IcrcMatch::SolvedIpv4Id(id)) => id,
                Err(_) => {
                    self.malformed += 1;
                    continue;
                }
            };
            let parsed =
                RocePacket::new_checked(&bytes[..]).and_then(|p| Ok((RoceRepr::parse(&p)?, p.payload().to_vec())));
            let (repr, payload) = match parsed {
                Ok(r) => r,
                Err(_) => {
                    self.malformed += 1;
                    continue;
                }
            };
            // The peer's own UDP source port (any, RoCEv2 A17.2.2; rxe's is 0xC000 | a
            // hash of the QPNs): the ICRC covers the UDP ports (A17.3.3), so a capture
            // showing 4791 instead would hold a packet whose ICRC does not match.
            self.records.push(Record {
                ts: now(),
                frame: frame((self.peer, from.port()), (self.local, ROCE_PORT), ident, &bytes),
            });
            return Some(Received { repr, payload });
        }
    }

    /// How many packets have been recorded so far (a mark to cut a capture from).
    pub fn mark(&self) -> usize {
        self.records.len()
    }

    /// The records from `mark` on.
    pub fn records_since(&self, mark: usize) -> &[Record] {
        self.records.get(mark..).unwrap_or(&[])
    }
}

/// The MAC shown for an address (locally administered, from the IP), as rnic's captures.
fn mac_for(ip: IpAddr) -> MacAddr {
    let b = match ip {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(a) => {
            let o = a.octets();
            [o[12], o[13], o[14], o[15]]
        }
    };
    MacAddr([0x02, 0x52, b[0], b[1], b[2], b[3]])
}

/// Wraps BTH..ICRC in Ethernet, IP (this IPv4 ID, DF, TTL 64) and UDP headers, from and
/// to these addresses and ports.
fn frame((src, sport): (IpAddr, u16), (dst, dport): (IpAddr, u16), ident: u16, roce: &[u8]) -> Vec<u8> {
    let udp_len = udp::HEADER_LEN + roce.len();
    let v4 = matches!((src, dst), (IpAddr::V4(_), IpAddr::V4(_)));
    let eth = EthernetRepr {
        dst: mac_for(dst),
        src: mac_for(src),
        vlan: None,
        ethertype: if v4 { ETHERTYPE_IPV4 } else { ETHERTYPE_IPV6 },
    };
    let (eh, ih) = (eth.buffer_len(), if v4 { ipv4::HEADER_LEN } else { rnic_wire::ipv6::HEADER_LEN });
    let mut buf = vec![0u8; eh + ih + udp_len];
    let _ = eth.emit(&mut buf[..eh]);
    let _ = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            Ipv4Repr { src: s, dst: d, tos: 0, ident, df: true, ttl: 64, protocol: ipv4::PROTO_UDP }
                .emit(&mut buf[eh..eh + ih], udp_len)
        }
        (s, d) => {
            let to6 = |a: IpAddr| match a {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            Ipv6Repr {
                src: to6(s),
                dst: to6(d),
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 64,
                next_header: ipv4::PROTO_UDP,
            }
            .emit(&mut buf[eh..eh + ih], udp_len)
        }
    };
    let u = udp::UdpRepr { src_port: sport, dst_port: dport, checksum: udp::UdpChecksum::Zero };
    let _ = u.emit(&mut buf[eh + ih..eh + ih + udp::HEADER_LEN], roce.len());
    buf[eh + ih + udp::HEADER_LEN..].copy_from_slice(roce);
    buf
}

/// A classic pcap file (microsecond timestamps, Ethernet) of these records.
pub fn pcap(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65_535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    for r in records {
        let len = u32::try_from(r.frame.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&u32::try_from(r.ts.as_secs()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&r.ts.subsec_micros().to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&r.frame);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_wire::aeth::{AethRepr, Syndrome};
    use rnic_wire::bth::BthRepr;
    use rnic_wire::roce::ExtHeaders;
    use rnic_wire::{Opcode, Psn, Qpn};

    /// A peer answering from its own UDP source port, as rxe does (49368 was one of rxe's
    /// in the lab): the recorded frame carries that port, so its ICRC, recomputed from
    /// the frame's own IP and UDP headers, is the one on the wire (what `check_pcap.sh`
    /// checks). With 4791 written in its place it would not be.
    #[test]
    fn a_peers_packet_is_recorded_with_its_own_source_port() {
        let (local, peer): (IpAddr, IpAddr) = ("127.0.107.1".parse().unwrap(), "127.0.107.2".parse().unwrap());
        let mut link = Link::open(local, peer).unwrap();
        let ack = RoceRepr {
            bth: BthRepr {
                opcode: Opcode::RC_ACKNOWLEDGE,
                se: false,
                migreq: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: Qpn::new(0xc0_0001),
                ack_req: false,
                psn: Psn::new(0x12_3456),
            },
            ext: ExtHeaders {
                aeth: Some(AethRepr { syndrome: Syndrome::Ack { credits: 31 }, msn: 7 }),
                ..ExtHeaders::default()
            },
            payload_len: 0,
        };
        let mut buf = vec![0u8; ack.buffer_len()];
        ack.emit(&mut buf, &[]).unwrap();
        IcrcContext::new(peer, local, 49368, ROCE_PORT).fill(&mut buf).unwrap();
        let sock = UdpSocket::bind(SocketAddr::new(peer, 49368)).unwrap();
        sock.send_to(&buf, SocketAddr::new(local, ROCE_PORT)).unwrap();
        let got = link.recv(Instant::now() + Duration::from_secs(5)).expect("the ACK passes the checks");
        assert_eq!(got.repr.ext.aeth.map(|a| a.msn), Some(7));
        let f = &link.records_since(0)[0].frame;
        let (eh, ih) = (14, ipv4::HEADER_LEN);
        let udp_hdr = &f[eh + ih..eh + ih + udp::HEADER_LEN];
        assert_eq!(u16::from_be_bytes([udp_hdr[0], udp_hdr[1]]), 49368);
        let roce = &f[eh + ih + udp::HEADER_LEN..];
        let (body, icrc) = roce.split_at(roce.len() - 4);
        let want = rnic_wire::icrc::compute(&f[eh..eh + ih], udp_hdr, body).unwrap();
        assert_eq!(icrc, want.to_le_bytes());
    }
}
