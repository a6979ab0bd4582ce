//! Frames: the Ethernet (802.1Q-tagged with a VLAN), IP and UDP headers the raw-Ethernet
//! transport writes before each RoCE packet, and the cutting of a peer's unsegmented UDP
//! GSO send into the frames its kernel would have put on a wire.
//!
//! Every header is the device's own: IPv4 identification from the caller's per-device
//! counter, DF, TTL 64; IPv6 hop limit 64 and a flow label from the flow's UDP source port
//! (the inverse of Linux's `rdma_flow_label_to_udp_sport`); ECT(0) with congestion control
//! on (CE where a fault rule marks it); a zero UDP checksum (the ICRC covers the packet).
//!
//! A leaf: bytes in, bytes out.

use rnic_wire::ethernet::{self, MacAddr};
use rnic_wire::ROCEV2_UDP_PORT;
use std::net::IpAddr;

/// ARP's EtherType.
pub(super) const ETH_P_ARP: u16 = 0x0806;
/// A received frame's buffer: a 9000-byte jumbo frame and its headers fit.
pub(super) const FRAME_BUF: usize = 9216 + 64;
/// IPv4 + UDP header bytes before the RoCE packet.
const IP_UDP: usize = 20 + 8;
/// IPv6 + UDP header bytes before the RoCE packet.
const IP6_UDP: usize = 40 + 8;
/// ICMPv6's next-header value.
pub(super) const PROTO_ICMPV6: u8 = 58;
/// TTL of sent IPv4 packets and hop limit of IPv6 ones (rxe: the route's, 64 by default).
const TTL: u8 = 64;

/// The Ethernet group address of IP multicast group `ip` (RFC 1112 6.4: 01:00:5e and the
/// low 23 bits of an IPv4 group; RFC 2464 7: 33:33 and the low 32 bits of an IPv6 one);
/// `None` for a unicast address.
pub(super) fn multicast_mac(ip: IpAddr) -> Option<MacAddr> {
    match ip {
        IpAddr::V4(a) if a.is_multicast() => {
            let o = a.octets();
            Some(MacAddr([0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]))
        }
        IpAddr::V6(a) if a.is_multicast() => {
            let o = a.octets();
            Some(MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]]))
        }
        _ => None,
    }
}

/// How one device frames what it sends: its MAC, its VLAN, its TOS byte.
#[derive(Debug, Clone, Copy)]
pub(super) struct Framer {
    /// The source MAC of every frame (the interface's).
    pub(super) mac: MacAddr,
    /// 802.1Q: the VLAN every frame is tagged with (and the only one taken).
    pub(super) vlan: Option<u16>,
    /// TOS byte: ECT(0) with congestion control on.
    pub(super) tos: u8,
}

impl Framer {
    /// The 802.1Q tag of this device's frames.
    pub(super) fn tag(&self) -> Option<ethernet::VlanTag> {
        self.vlan.map(|vid| ethernet::VlanTag { pcp: 0, dei: false, vid })
    }

    /// Ethernet header bytes of this device's frames.
    pub(super) fn eth_len(&self) -> usize {
        ethernet::HEADER_LEN + if self.vlan.is_some() { ethernet::VLAN_TAG_LEN } else { 0 }
    }

    /// Appends the Ethernet header of a frame to `mac` and room for the IP (v6 or v4)
    /// and UDP headers ([`finish`](Self::finish) writes them once the length is known).
    pub(super) fn headers(&self, buf: &mut Vec<u8>, mac: MacAddr, v6: bool) {
        let eth = ethernet::EthernetRepr {
            dst: mac,
            src: self.mac,
            vlan: self.tag(),
            ethertype: if v6 { ethernet::ETHERTYPE_IPV6 } else { ethernet::ETHERTYPE_IPV4 },
        };
        let start = buf.len();
        buf.resize(start + eth.buffer_len() + if v6 { IP6_UDP } else { IP_UDP }, 0);
        let _ = eth.emit(&mut buf[start..]);
    }

    /// Finishes the headers written by [`headers`](Self::headers) once the RoCE bytes
    /// follow them (lengths and the IPv4 checksum need the total).
    pub(super) fn finish(&self, frame: &mut [u8], src: IpAddr, dst: IpAddr, src_port: u16, ident: u16, ce: bool) {
        let at = self.eth_len();
        let tos = if ce { self.tos | rnic_io::ECN_CE } else { self.tos };
        let ip_len = match (src, dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                let roce_len = frame.len() - at - IP_UDP;
                let ip = rnic_wire::ipv4::Ipv4Repr {
                    src,
                    dst,
                    tos,
                    ident,
                    df: true,
                    ttl: TTL,
                    protocol: rnic_wire::ipv4::PROTO_UDP,
                };
                let _ = ip.emit(&mut frame[at..at + 20], 8 + roce_len);
                20
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                let roce_len = frame.len() - at - IP6_UDP;
                // The flow label from the UDP source port (the flow's entropy): Linux's
                // rdma_flow_label_to_udp_sport maps it back to the same port.
                let ip = rnic_wire::ipv6::Ipv6Repr {
                    src,
                    dst,
                    traffic_class: tos,
                    flow_label: u32::from(src_port & 0x3fff),
                    hop_limit: TTL,
                    next_header: rnic_wire::ipv4::PROTO_UDP,
                };
                let _ = ip.emit(&mut frame[at..at + 40], 8 + roce_len);
                40
            }
            // Callers pass one family (src_for).
            _ => return,
        };
        let roce_len = frame.len() - at - ip_len - 8;
        let u = &mut frame[at + ip_len..at + ip_len + 8];
        u[0..2].copy_from_slice(&src_port.to_be_bytes());
        u[2..4].copy_from_slice(&ROCEV2_UDP_PORT.to_be_bytes());
        u[4..6].copy_from_slice(&u16::try_from(8 + roce_len).unwrap_or(u16::MAX).to_be_bytes());
        // A zero UDP checksum, as rxe and RoCE NICs send (the ICRC covers the packet).
        u[6..8].copy_from_slice(&[0, 0]);
    }
}

/// Cuts a UDP GSO frame `f` (Ethernet, IPv4 or IPv6 and UDP headers, then the packets'
/// datagrams of `size` bytes each, the last maybe shorter) into the frames the sender's
/// kernel would have put on a wire: the headers repeated with each one's lengths and
/// checksum, the IPv4 ID counting up from the first (Linux's UDP segmentation). Each is
/// built in `seg` and handed to `each`; returns the sum of what `each` returned, or `None`
/// when the headers are malformed.
pub(super) fn cut_gso(
    f: &[u8],
    size: usize,
    seg: &mut Vec<u8>,
    mut each: impl FnMut(&mut [u8]) -> usize,
) -> Option<usize> {
    let mut at = ethernet::HEADER_LEN;
    if f.len() >= at && u16::from_be_bytes([f[12], f[13]]) == ethernet::TPID_8021Q {
        at += 4;
    }
    let v6 = f.get(at).is_some_and(|b| b >> 4 == 6);
    let ihl = if v6 { 40 } else { f.get(at).map_or(0, |b| usize::from(b & 0x0f) * 4) };
    let head = at + ihl + 8;
    if ihl < 20 || f.len() <= head || (!v6 && f[at] >> 4 != 4) {
        return None;
    }
    let id0 = u16::from_be_bytes([f[at + 4], f[at + 5]]);
    let mut n = 0;
    for (k, body) in f[head..].chunks(size).enumerate() {
        seg.clear();
        seg.extend_from_slice(&f[..head]);
        seg.extend_from_slice(body);
        let ip = &mut seg[at..at + ihl];
        if v6 {
            // IPv6 has no ID or header checksum: only the payload length changes.
            let plen = u16::try_from(8 + body.len()).unwrap_or(u16::MAX);
            ip[4..6].copy_from_slice(&plen.to_be_bytes());
        } else {
            let ip_len = u16::try_from(ihl + 8 + body.len()).unwrap_or(u16::MAX);
            ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
            ip[4..6].copy_from_slice(&id0.wrapping_add(u16::try_from(k).unwrap_or(0)).to_be_bytes());
            ip[10..12].copy_from_slice(&[0, 0]);
            let sum = rnic_wire::ipv4::internet_checksum(ip);
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        let udp_len = u16::try_from(8 + body.len()).unwrap_or(u16::MAX);
        seg[at + ihl + 4..at + ihl + 6].copy_from_slice(&udp_len.to_be_bytes());
        n += each(seg);
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multicast_groups_map_to_their_ethernet_groups() {
        let mac = |s: &str| multicast_mac(s.parse().unwrap()).map(|m| m.0);
        // The 24th bit from the top of the group is dropped (224.128.x.y and 224.0.x.y share).
        assert_eq!(mac("230.129.2.3"), Some([0x01, 0x00, 0x5e, 0x01, 0x02, 0x03]));
        assert_eq!(mac("ff0e::1:ff12:3456"), Some([0x33, 0x33, 0xff, 0x12, 0x34, 0x56]));
        assert_eq!(mac("10.0.0.1"), None);
        assert_eq!(mac("fd00::1"), None);
    }
}
