//! Neighbours: ARP (RFC 826) and IPv6 neighbour discovery (RFC 4861), the neighbour cache
//! and the packets waiting for a neighbour to answer.
//!
//! - ARP requests for the device's IPv4 address are answered and their senders learned
//!   (RFC 826's merge: a known sender is updated, one asking for the device added);
//! - neighbour solicitations for its IPv6 addresses are answered with advertisements
//!   carrying the target link-layer option (a solicitation's source link-layer option is
//!   learned, RFC 4861 7.2.3), advertisements update known entries (7.2.5), both checked
//!   as 7.1 says (hop limit 255, code 0, a valid checksum, a unicast target);
//! - to send to an address it does not know, the device asks by ARP or by a neighbour
//!   solicitation to the address's solicited-node group (7.2.2), holds the packets up to
//!   [`RESOLVE_GIVE_UP`], asking again every [`RESOLVE_RETRY`], then drops them (the
//!   transport counts `tx_neigh_unresolved`).
//!
//! The handlers say what to do ([`Heard`]: a neighbour to learn, a frame to answer with);
//! the transport does it, since learning a neighbour sends what waited for it. Uses
//! [`super::frame`] and [`super::route`], not the transport.

use super::frame::{Framer, ETH_P_ARP, PROTO_ICMPV6};
use super::route::Addrs;
use crate::counters::Counters;
use crate::Time;
use rnic_wire::ethernet::{self, MacAddr};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::Ordering;

/// Ask again for an unresolved neighbour after this long (ns).
pub(crate) const RESOLVE_RETRY: Time = 200_000_000;
/// Drop what waits for a neighbour that did not answer within this long (ns).
pub(crate) const RESOLVE_GIVE_UP: Time = 1_000_000_000;
/// Packets held per unresolved neighbour; more are dropped at once.
const RESOLVE_QUEUE: usize = 1024;
/// Neighbours remembered (learned ones beyond this are not added).
const NEIGH_MAX: usize = 4096;
/// ICMPv6 Neighbor Solicitation and Advertisement (RFC 4861 4.3, 4.4).
const ND_SOLICIT: u8 = 135;
const ND_ADVERT: u8 = 136;

/// A packet waiting for its next hop's MAC: (destination, UDP source port, BTH..ICRC with
/// the ICRC not yet filled).
pub(super) type Held = (IpAddr, u16, Vec<u8>);

/// Packets waiting for a neighbour's MAC.
#[derive(Debug)]
struct Pending {
    since: Time,
    asked: Time,
    packets: Vec<Held>,
}

/// The neighbour cache and the packets waiting for neighbours being asked for.
#[derive(Debug, Default)]
pub(super) struct Neighbors {
    known: HashMap<IpAddr, MacAddr>,
    pending: HashMap<IpAddr, Pending>,
}

/// What holding a packet for an unresolved neighbour came to.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hold {
    /// Nothing waited for that neighbour yet: ask for it now.
    pub(super) first: bool,
    /// Its queue was full: the packet was dropped.
    pub(super) dropped: bool,
}

/// What a received ARP or neighbour discovery message asks of the transport, in order.
#[derive(Debug, Default)]
pub(super) struct Heard {
    /// A neighbour to learn (and to send what waited for it).
    pub(super) learn: Option<(IpAddr, MacAddr)>,
    /// A frame to answer with.
    pub(super) answer: Option<Vec<u8>>,
}

impl Neighbors {
    /// The MAC of `ip`, if known.
    pub(super) fn get(&self, ip: IpAddr) -> Option<MacAddr> {
        self.known.get(&ip).copied()
    }

    /// Whether `ip` has an entry: known, or being asked for.
    fn has_entry(&self, ip: IpAddr) -> bool {
        self.known.contains_key(&ip) || self.pending.contains_key(&ip)
    }

    /// Learns that `ip` is at `mac`; returns what waited for it, to be sent.
    pub(super) fn learn(&mut self, ip: IpAddr, mac: MacAddr) -> Vec<Held> {
        if mac.0[0] & 1 != 0 || mac.0 == [0; 6] {
            return Vec::new();
        }
        // A bounded table: frames from ever new sources (a peer spraying addresses) do not
        // grow it past NEIGH_MAX; what this device asked for is always learned.
        if self.known.len() >= NEIGH_MAX && !self.has_entry(ip) {
            return Vec::new();
        }
        self.known.insert(ip, mac);
        self.pending.remove(&ip).map(|p| p.packets).unwrap_or_default()
    }

    /// Holds the packet `take` gives (called only when there is room) until `hop`
    /// answers.
    pub(super) fn hold(&mut self, now: Time, hop: IpAddr, take: impl FnOnce() -> Held) -> Hold {
        let first = !self.pending.contains_key(&hop);
        let q = self.pending.entry(hop).or_insert(Pending { since: now, asked: now, packets: Vec::new() });
        let dropped = q.packets.len() >= RESOLVE_QUEUE;
        if !dropped {
            q.packets.push(take());
        }
        Hold { first, dropped }
    }

    /// Neighbours that did not answer: gives up on what waited [`RESOLVE_GIVE_UP`] and
    /// returns how many packets that dropped, and the neighbours to ask again (asked
    /// [`RESOLVE_RETRY`] ago).
    pub(super) fn expire(&mut self, now: Time) -> (u64, Vec<IpAddr>) {
        let mut ask = Vec::new();
        let mut dropped = 0u64;
        self.pending.retain(|&hop, p| {
            if now.saturating_sub(p.since) >= RESOLVE_GIVE_UP {
                dropped += p.packets.len() as u64;
                return false;
            }
            if now.saturating_sub(p.asked) >= RESOLVE_RETRY {
                p.asked = now;
                ask.push(hop);
            }
            true
        });
        (dropped, ask)
    }

    /// When [`expire`](Self::expire) next has something to do.
    pub(super) fn next_due(&self) -> Option<Time> {
        self.pending.values().map(|p| (p.asked + RESOLVE_RETRY).min(p.since + RESOLVE_GIVE_UP)).min()
    }

    /// Handles an ARP frame's body: answers requests for the device's address, learns the
    /// sender of any request or reply.
    pub(super) fn arp(&self, body: &[u8], me: &Addrs, framer: &Framer, counters: &Counters) -> Heard {
        use pnet_packet::arp::{ArpHardwareTypes, ArpOperations, ArpPacket};
        use pnet_packet::ethernet::EtherTypes;
        let mut heard = Heard::default();
        // Ethernet and IPv4: htype 1, ptype 0x0800, hlen 6, plen 4.
        let Some(a) = ArpPacket::new(body).filter(|a| {
            a.get_hardware_type() == ArpHardwareTypes::Ethernet
                && a.get_protocol_type() == EtherTypes::Ipv4
                && (a.get_hw_addr_len(), a.get_proto_addr_len()) == (6, 4)
        }) else {
            counters.rx_not_roce.fetch_add(1, Ordering::Relaxed);
            return heard;
        };
        let request = a.get_operation() == ArpOperations::Request;
        let sha = MacAddr(a.get_sender_hw_addr().octets());
        let (spa, tpa) = (a.get_sender_proto_addr(), a.get_target_proto_addr());
        let IpAddr::V4(ip) = me.ip else { return heard };
        // RFC 826: update a known sender; add it when the request is for us.
        let sender = IpAddr::V4(spa);
        if tpa == ip || self.has_entry(sender) {
            heard.learn = Some((sender, sha));
        }
        if request && tpa == ip {
            heard.answer = Some(arp_frame(framer.vlan, 2, framer.mac, ip, sha, sha, spa));
            counters.arp_replies_sent.fetch_add(1, Ordering::Relaxed);
        }
        heard
    }

    /// Handles an ICMPv6 packet (`ip6`: its IPv6 header and what follows): answers a
    /// neighbour solicitation for one of the device's addresses with an advertisement and
    /// learns its sender; learns the target of an advertisement. Checked as RFC 4861 7.1
    /// says: hop limit 255, code 0, a valid checksum, a unicast target.
    pub(super) fn nd(&self, ip6: &[u8], eth_src: MacAddr, me: &Addrs, framer: &Framer, counters: &Counters) -> Heard {
        let mut heard = Heard::default();
        if ip6.len() < 40 {
            counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
            return heard;
        }
        let plen = usize::from(u16::from_be_bytes([ip6[4], ip6[5]]));
        let src = Ipv6Addr::from(<[u8; 16]>::try_from(&ip6[8..24]).unwrap_or([0; 16]));
        let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&ip6[24..40]).unwrap_or([0; 16]));
        let Some(msg) = ip6.get(40..40 + plen).filter(|m| !m.is_empty()) else {
            counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
            return heard;
        };
        let kind = msg[0];
        if kind != ND_SOLICIT && kind != ND_ADVERT {
            // Other ICMPv6 (router advertisements, MLD, ...): not this device's business.
            counters.rx_not_roce.fetch_add(1, Ordering::Relaxed);
            return heard;
        }
        let sum_ok = pnet_packet::icmpv6::Icmpv6Packet::new(msg)
            .is_some_and(|p| pnet_packet::icmpv6::checksum(&p, &src, &dst) == u16::from_be_bytes([msg[2], msg[3]]));
        if msg.len() < 24 || ip6[7] != 255 || msg[1] != 0 || !sum_ok {
            counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
            return heard;
        }
        // Solicitation and advertisement share the target's place (bytes 8..24).
        let target = pnet_packet::icmpv6::ndp::NeighborSolicitPacket::new(msg)
            .map_or(Ipv6Addr::UNSPECIFIED, |p| p.get_target_addr());
        // The link-layer address option (1: source, in a solicitation; 2: target, in an
        // advertisement); else the frame's source. Walked here, not with pnet_packet's
        // option iterator, whose length function computes `length * 8` in a u8 (a hostile
        // option length of 32 or more overflows it).
        let mut lladdr = None;
        let mut opts = &msg[24..];
        while opts.len() >= 8 {
            let len = usize::from(opts[1]) * 8;
            if len == 0 || len > opts.len() {
                break;
            }
            if (opts[0] == 1 && kind == ND_SOLICIT) || (opts[0] == 2 && kind == ND_ADVERT) {
                lladdr = Some(MacAddr([opts[2], opts[3], opts[4], opts[5], opts[6], opts[7]]));
            }
            opts = &opts[len..];
        }
        let mac = lladdr.unwrap_or(eth_src);
        if kind == ND_SOLICIT {
            if !me.is_mine(IpAddr::V6(target)) {
                return heard;
            }
            // Duplicate address detection (unspecified source) is answered to all nodes.
            let (to, to_mac) = if src.is_unspecified() {
                (Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1), MacAddr([0x33, 0x33, 0, 0, 0, 1]))
            } else {
                // RFC 4861 7.2.3: a solicitation with a source link-layer option creates
                // or updates the sender's entry.
                if lladdr.is_some() {
                    heard.learn = Some((IpAddr::V6(src), mac));
                }
                (src, mac)
            };
            heard.answer = Some(nd_frame(framer, ND_ADVERT, target, to, to_mac, target, !src.is_unspecified()));
            counters.nd_adverts_sent.fetch_add(1, Ordering::Relaxed);
        } else if !target.is_multicast() {
            let t = IpAddr::V6(target);
            // RFC 4861 7.2.5: an advertisement for an address without an entry is dropped.
            if self.has_entry(t) {
                heard.learn = Some((t, mac));
            }
        }
        heard
    }
}

/// The frame asking for `ip`'s MAC: an ARP request, or for IPv6 a neighbour solicitation
/// to its solicited-node group (RFC 4861 7.2.2). None when the device has no address to
/// ask from.
pub(super) fn solicitation(ip: IpAddr, me: &Addrs, framer: &Framer, counters: &Counters) -> Option<Vec<u8>> {
    match ip {
        IpAddr::V4(t) => {
            let IpAddr::V4(from) = me.ip else { return None };
            let frame = arp_frame(framer.vlan, 1, framer.mac, from, MacAddr([0xff; 6]), MacAddr([0; 6]), t);
            counters.arp_requests_sent.fetch_add(1, Ordering::Relaxed);
            Some(frame)
        }
        IpAddr::V6(t) => {
            let Some(IpAddr::V6(src)) = me.src_for(ip) else { return None };
            let (group, gmac) = solicited_node(t);
            let frame = nd_frame(framer, ND_SOLICIT, src, group, gmac, t, false);
            counters.nd_solicits_sent.fetch_add(1, Ordering::Relaxed);
            Some(frame)
        }
    }
}

/// The solicited-node multicast address of `ip` (RFC 4291 2.7.1: `ff02::1:ff` and its
/// last 24 bits) and the Ethernet group it maps to (RFC 2464 7: `33:33` and the last 32).
pub(super) fn solicited_node(ip: Ipv6Addr) -> (Ipv6Addr, MacAddr) {
    let o = ip.octets();
    let group = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00 | u16::from(o[13]), u16::from_be_bytes([o[14], o[15]]));
    let g = group.octets();
    (group, MacAddr([0x33, 0x33, g[12], g[13], g[14], g[15]]))
}

/// An Ethernet ARP frame (operation 1 request, 2 reply), 802.1Q-tagged with `vlan`,
/// padded to the 60-byte minimum.
fn arp_frame(
    vlan: Option<u16>,
    op: u16,
    sha: MacAddr,
    spa: Ipv4Addr,
    eth_dst: MacAddr,
    tha: MacAddr,
    tpa: Ipv4Addr,
) -> Vec<u8> {
    use pnet_packet::arp::{ArpHardwareTypes, ArpOperation, MutableArpPacket};
    use pnet_packet::ethernet::EtherTypes;
    let eth = ethernet::EthernetRepr {
        dst: eth_dst,
        src: sha,
        vlan: vlan.map(|vid| ethernet::VlanTag { pcp: 0, dei: false, vid }),
        ethertype: ETH_P_ARP,
    };
    let at = eth.buffer_len();
    let mut f = vec![0u8; (at + MutableArpPacket::minimum_packet_size()).max(ethernet::MIN_FRAME_LEN)];
    let _ = eth.emit(&mut f[..]);
    if let Some(mut a) = MutableArpPacket::new(&mut f[at..]) {
        a.set_hardware_type(ArpHardwareTypes::Ethernet);
        a.set_protocol_type(EtherTypes::Ipv4);
        a.set_hw_addr_len(6);
        a.set_proto_addr_len(4);
        a.set_operation(ArpOperation::new(op));
        a.set_sender_hw_addr(sha.0.into());
        a.set_sender_proto_addr(spa);
        a.set_target_hw_addr(tha.0.into());
        a.set_target_proto_addr(tpa);
    }
    f
}

/// An Ethernet frame holding a neighbour solicitation (for `target`, with the device's MAC
/// as its source link-layer option) or advertisement (of `target`, with its target
/// link-layer option; `solicited`: an answer), hop limit 255 as RFC 4861 requires.
fn nd_frame(
    framer: &Framer,
    kind: u8,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    eth_dst: MacAddr,
    target: Ipv6Addr,
    solicited: bool,
) -> Vec<u8> {
    use pnet_packet::icmpv6::ndp::{
        MutableNeighborAdvertPacket, MutableNeighborSolicitPacket, NdpOption, NdpOptionTypes, NeighborAdvertFlags,
    };
    use pnet_packet::icmpv6::{Icmpv6Code, Icmpv6Packet, Icmpv6Types};
    // The fixed part (24 bytes) and one 8-byte link-layer address option: the source
    // one in a solicitation, the target one in an advertisement.
    let mut msg = vec![0u8; 24 + 8];
    let mac = NdpOption {
        option_type: if kind == ND_SOLICIT { NdpOptionTypes::SourceLLAddr } else { NdpOptionTypes::TargetLLAddr },
        length: 1,
        data: framer.mac.0.to_vec(),
    };
    if kind == ND_SOLICIT {
        if let Some(mut p) = MutableNeighborSolicitPacket::new(&mut msg) {
            p.set_icmpv6_type(Icmpv6Types::NeighborSolicit);
            p.set_icmpv6_code(Icmpv6Code(0));
            p.set_target_addr(target);
            p.set_options(&[mac]);
        }
    } else if let Some(mut p) = MutableNeighborAdvertPacket::new(&mut msg) {
        p.set_icmpv6_type(Icmpv6Types::NeighborAdvert);
        p.set_icmpv6_code(Icmpv6Code(0));
        // Override: the device speaks for its own address; Solicited: an answer.
        let solicited = if solicited { NeighborAdvertFlags::Solicited } else { 0 };
        p.set_flags(NeighborAdvertFlags::Override | solicited);
        p.set_target_addr(target);
        p.set_options(&[mac]);
    }
    let sum = Icmpv6Packet::new(&msg).map_or(0, |p| pnet_packet::icmpv6::checksum(&p, &src, &dst));
    msg[2..4].copy_from_slice(&sum.to_be_bytes());
    let eth = ethernet::EthernetRepr {
        dst: eth_dst,
        src: framer.mac,
        vlan: framer.tag(),
        ethertype: ethernet::ETHERTYPE_IPV6,
    };
    let at = eth.buffer_len();
    let mut f = vec![0u8; at + 40];
    let _ = eth.emit(&mut f[..]);
    let ip = rnic_wire::ipv6::Ipv6Repr {
        src,
        dst,
        traffic_class: 0,
        flow_label: 0,
        hop_limit: 255,
        next_header: PROTO_ICMPV6,
    };
    let _ = ip.emit(&mut f[at..at + 40], msg.len());
    f.extend_from_slice(&msg);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arp_request_is_what_wireshark_expects() {
        let f = arp_frame(
            None,
            1,
            MacAddr([2, 0, 0, 0, 0, 1]),
            Ipv4Addr::new(10, 0, 0, 1),
            MacAddr([0xff; 6]),
            MacAddr([0; 6]),
            Ipv4Addr::new(10, 0, 0, 2),
        );
        let want = [
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x06, // Ethernet
            0, 1, 8, 0, 6, 4, 0, 1, // htype, ptype, hlen, plen, op
            2, 0, 0, 0, 0, 1, 10, 0, 0, 1, // sender
            0, 0, 0, 0, 0, 0, 10, 0, 0, 2, // target
        ];
        assert_eq!(&f[..want.len()], &want[..]);
        assert_eq!(f.len(), 60);
        assert!(f[want.len()..].iter().all(|&b| b == 0));
    }
}
