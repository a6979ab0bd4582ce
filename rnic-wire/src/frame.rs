//! Full frames: Ethernet II (optionally 802.1Q-tagged) / IPv4 or IPv6 / UDP 4791 /
//! RoCEv2, as a raw-Ethernet transport sends them and a capture file holds them.
//!
//! Parsing trims Ethernet minimum-size padding by trusting the IP length (rxe does the
//! same), accepts a zero UDP checksum (what rxe and NICs send) and verifies a non-zero
//! one, and computes the ICRC from the IP and UDP header bytes exactly as received.

use crate::ethernet::{self, EthernetRepr};
use crate::icrc::{self, Icrc};
use crate::ipv4::{self, Ipv4Repr};
use crate::ipv6::{self, Ipv6Repr};
use crate::roce::{RocePacket, RoceRepr};
use crate::udp::{self, UdpChecksum, UdpRepr};
use crate::{Error, Result, ROCEV2_UDP_PORT};
use std::net::IpAddr;

/// The IP header of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpRepr {
    /// IPv4.
    V4(Ipv4Repr),
    /// IPv6.
    V6(Ipv6Repr),
}

impl IpRepr {
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => IpAddr::V4(r.src),
            IpRepr::V6(r) => IpAddr::V6(r.src),
        }
    }
    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => IpAddr::V4(r.dst),
            IpRepr::V6(r) => IpAddr::V6(r.dst),
        }
    }
    /// Header length.
    pub fn buffer_len(&self) -> usize {
        match self {
            IpRepr::V4(r) => r.buffer_len(),
            IpRepr::V6(r) => r.buffer_len(),
        }
    }
    fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<()> {
        match self {
            IpRepr::V4(r) => r.emit(buf, payload_len),
            IpRepr::V6(r) => r.emit(buf, payload_len),
        }
    }
    fn ethertype(&self) -> u16 {
        match self {
            IpRepr::V4(_) => ethernet::ETHERTYPE_IPV4,
            IpRepr::V6(_) => ethernet::ETHERTYPE_IPV6,
        }
    }
}

/// A RoCEv2 packet found in a frame or an IP packet, with everything needed to print,
/// check or re-emit it.
#[derive(Debug, Clone, Copy)]
pub struct ParsedPacket<'a> {
    /// The Ethernet header (`None` when parsed from a bare IP packet).
    pub eth: Option<EthernetRepr>,
    /// The IP header.
    pub ip: IpRepr,
    /// The UDP header.
    pub udp: UdpRepr,
    /// The RoCEv2 packet.
    pub roce: RoceRepr,
    /// BTH..ICRC, as received.
    pub roce_bytes: &'a [u8],
    /// The payload (pad excluded).
    pub payload: &'a [u8],
    /// ICRC carried by the packet.
    pub icrc_received: Icrc,
    /// ICRC computed over the received bytes.
    pub icrc_computed: Icrc,
    /// Bytes after the IP datagram in the frame (Ethernet minimum-size padding).
    pub eth_padding: usize,
}

impl ParsedPacket<'_> {
    /// True if the carried ICRC matches.
    pub fn icrc_ok(&self) -> bool {
        self.icrc_received == self.icrc_computed
    }

    /// `Err(BadIcrc)` unless the ICRC matches (IBA C9-3: such packets are dropped).
    pub fn check_icrc(&self) -> Result<()> {
        if self.icrc_ok() {
            Ok(())
        } else {
            Err(Error::BadIcrc { computed: self.icrc_computed, received: self.icrc_received })
        }
    }

    /// The representation that re-emits this frame (Ethernet frames only).
    pub fn frame_repr(&self) -> Option<FrameRepr> {
        Some(FrameRepr {
            eth: self.eth?,
            ip: self.ip,
            udp: self.udp,
            roce: self.roce,
            pad_to_minimum: self.eth_padding > 0,
        })
    }
}

/// Parses an Ethernet frame (no FCS) holding a RoCEv2 packet. Errors for which
/// [`Error::is_not_roce`] holds mean "some other traffic".
pub fn parse_ethernet(frame: &[u8]) -> Result<ParsedPacket<'_>> {
    let (eth, hl) = EthernetRepr::parse(frame)?;
    eth.check_ip()?;
    let ip_bytes = &frame[hl..];
    // The EtherType and the version nibble must agree (found by fuzzing: an IPv4 packet
    // under EtherType 0x86DD was accepted and re-emitted as a different frame).
    let want = if eth.ethertype == ethernet::ETHERTYPE_IPV4 { 4 } else { 6 };
    if let Some(&b) = ip_bytes.first() {
        if b >> 4 != want {
            return Err(Error::BadIpVersion(b >> 4));
        }
    }
    let mut p = parse_ip(ip_bytes)?;
    let ip_len = p.ip.buffer_len_of(ip_bytes);
    p.eth = Some(eth);
    p.eth_padding = ip_bytes.len() - ip_len;
    Ok(p)
}

impl IpRepr {
    /// Datagram length as the IP header says (for padding computation).
    fn buffer_len_of(&self, ip_bytes: &[u8]) -> usize {
        match self {
            IpRepr::V4(_) => usize::from(ipv4::Packet::new_unchecked(ip_bytes).total_len()),
            IpRepr::V6(_) => ipv6::HEADER_LEN + usize::from(ipv6::Packet::new_unchecked(ip_bytes).payload_len()),
        }
    }
}

/// Parses an IP packet (IPv4 or IPv6, told apart by the version nibble) holding a
/// RoCEv2 packet; bytes after the IP length are ignored.
pub fn parse_ip(bytes: &[u8]) -> Result<ParsedPacket<'_>> {
    crate::error::need("IP header", bytes, 1)?;
    let (ip, ip_header, udp_bytes) = match bytes[0] >> 4 {
        4 => {
            let p = ipv4::Packet::new_checked(bytes)?;
            // Other traffic is "not RoCE" whatever state its IP header is in: look at
            // the protocol (and below, the port) before checksum and fragment checks.
            if p.protocol() != ipv4::PROTO_UDP {
                return Err(Error::NotUdp(p.protocol()));
            }
            if p.frag_offset() == 0 {
                let l4 = &bytes[p.header_len()..usize::from(p.total_len())];
                if l4.len() >= 4 && crate::field::u16_at(l4, 2) != ROCEV2_UDP_PORT {
                    return Err(Error::NotRoceV2Port(crate::field::u16_at(l4, 2)));
                }
            }
            let r = Ipv4Repr::parse(&p)?;
            let (hl, total) = (p.header_len(), usize::from(p.total_len()));
            (IpRepr::V4(r), &bytes[..hl], &bytes[hl..total])
        }
        6 => {
            let p = ipv6::Packet::new_checked(bytes)?;
            let r = Ipv6Repr::parse(&p)?;
            if r.next_header != ipv4::PROTO_UDP {
                return Err(Error::NotUdp(r.next_header));
            }
            let end = ipv6::HEADER_LEN + usize::from(p.payload_len());
            (IpRepr::V6(r), &bytes[..ipv6::HEADER_LEN], &bytes[ipv6::HEADER_LEN..end])
        }
        v => return Err(Error::BadIpVersion(v)),
    };
    let u = udp::Packet::new_checked(udp_bytes)?;
    if u.dst_port() != ROCEV2_UDP_PORT {
        return Err(Error::NotRoceV2Port(u.dst_port()));
    }
    if usize::from(u.length()) != udp_bytes.len() {
        return Err(Error::BadUdpLength(u.length()));
    }
    let checksum = if u.checksum() == 0 {
        UdpChecksum::Zero
    } else {
        let mut c = udp::checksum(ip.src(), ip.dst(), udp_bytes);
        if c == 0 {
            c = 0xffff;
        }
        if c != u.checksum() {
            return Err(Error::BadUdpChecksum);
        }
        UdpChecksum::Computed
    };
    let udp = UdpRepr { src_port: u.src_port(), dst_port: u.dst_port(), checksum };
    let roce_bytes = &udp_bytes[udp::HEADER_LEN..];
    let rp = RocePacket::new_checked(roce_bytes)?;
    let roce = RoceRepr::parse(&rp)?;
    let icrc_computed = icrc::compute(ip_header, &udp_bytes[..udp::HEADER_LEN], rp.without_icrc())?;
    let payload_start = rp.info().payload_offset();
    let payload = &roce_bytes[payload_start..payload_start + roce.payload_len];
    Ok(ParsedPacket {
        eth: None,
        ip,
        udp,
        roce,
        roce_bytes,
        payload,
        icrc_received: rp.icrc(),
        icrc_computed,
        eth_padding: 0,
    })
}

/// A complete frame to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRepr {
    /// Ethernet header; its EtherType is set from the IP version when emitting.
    pub eth: EthernetRepr,
    /// IP header.
    pub ip: IpRepr,
    /// UDP header.
    pub udp: UdpRepr,
    /// The RoCEv2 packet.
    pub roce: RoceRepr,
    /// Pad the frame with zeros to the 60-byte Ethernet minimum, as a NIC does on the
    /// wire (a capture of the sender's side shows the frame unpadded).
    pub pad_to_minimum: bool,
}

impl FrameRepr {
    /// Length of the frame before Ethernet padding.
    pub fn unpadded_len(&self) -> usize {
        self.eth.buffer_len() + self.ip.buffer_len() + udp::HEADER_LEN + self.roce.buffer_len()
    }

    /// Length of the frame, padded to the Ethernet minimum of 60 bytes if asked.
    pub fn buffer_len(&self) -> usize {
        if self.pad_to_minimum {
            self.unpadded_len().max(ethernet::MIN_FRAME_LEN)
        } else {
            self.unpadded_len()
        }
    }

    /// Writes the whole frame (headers, payload, pad, ICRC, UDP checksum if asked,
    /// Ethernet padding) and returns its length.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize> {
        if let Some(v) = self.eth.vlan {
            if v.pcp > 7 || v.vid > 0x0fff {
                return Err(Error::FieldRange { field: "802.1Q PCP or VID" });
            }
        }
        if let IpRepr::V6(r) = &self.ip {
            if r.flow_label > 0x000f_ffff {
                return Err(Error::FieldRange { field: "IPv6 flow label" });
            }
        }
        let len = self.buffer_len();
        crate::error::need("frame buffer", buf, len)?;
        let mut eth = self.eth;
        eth.ethertype = self.ip.ethertype();
        let eh = eth.buffer_len();
        let ih = self.ip.buffer_len();
        let roce_len = self.roce.buffer_len();
        let udp_len = udp::HEADER_LEN + roce_len;
        eth.emit(&mut buf[..eh])?;
        self.ip.emit(&mut buf[eh..eh + ih], udp_len)?;
        let ustart = eh + ih;
        self.udp.emit(&mut buf[ustart..ustart + udp::HEADER_LEN], roce_len)?;
        let rstart = ustart + udp::HEADER_LEN;
        let rend = rstart + roce_len;
        self.roce.emit(&mut buf[rstart..rend], payload)?;
        let c = icrc::compute(
            &buf[eh..eh + ih],
            &buf[ustart..ustart + udp::HEADER_LEN],
            &buf[rstart..rend - crate::ICRC_LEN],
        )?;
        buf[rend - crate::ICRC_LEN..rend].copy_from_slice(&c.to_le_bytes());
        if self.udp.checksum == UdpChecksum::Computed {
            udp::fill_checksum(self.ip.src(), self.ip.dst(), &mut buf[ustart..rend]);
        }
        buf[rend..len].fill(0);
        Ok(len)
    }
}
