//! The raw-Ethernet transport: whole frames through an `AF_PACKET` socket bound to one
//! interface, as a RoCE NIC puts them on its link.
//!
//! The device has the interface's MAC and an address of its own (IPv4 or IPv6), one the
//! host kernel does **not** own (otherwise the kernel would answer UDP 4791 with ICMP port
//! unreachable and answer ARP for it), plus the link-local IPv6 address of its MAC (GID 0,
//! as on rxe). So this transport does what a NIC's firmware and the kernel's neighbour code
//! do for rxe:
//! - it answers ARP requests for its IPv4 address and neighbour solicitations for its
//!   IPv6 addresses (RFC 4861: advertisements with the target link-layer option; it joins
//!   their solicited-node groups so a NIC's filter lets the solicitations in), and learns
//!   neighbours from ARP, from neighbour discovery and from the RoCE frames it receives
//!   (the source MAC of a frame is the next hop back to its sender, a router's when
//!   routed);
//! - to send to an address it does not know, it asks by ARP or by a neighbour
//!   solicitation (the next hop: the gateway of the interface's route to it, read from the
//!   IPv4 or IPv6 routing table when the device opens, or the address itself; a
//!   link-local one always), holds the packets up to [`neighbor::RESOLVE_GIVE_UP`], asking
//!   again every [`neighbor::RESOLVE_RETRY`], then drops them and counts
//!   `tx_neigh_unresolved` (an RC QP's retransmissions ask again; with no answer they end
//!   in RETRY_EXC_ERR);
//! - every header is its own: IPv4 identification from a per-device counter, DF, TTL 64;
//!   IPv6 hop limit 64 and a flow label from the flow's UDP source port (the inverse of
//!   Linux's `rdma_flow_label_to_udp_sport`); ECT(0) with congestion control on (CE where
//!   a fault rule marks it); the ICRC is computed over those headers and checked in full
//!   on receive (no ID solving: `icrc_ipv4_id_solved` stays 0); packets to a link-local
//!   GID leave from the link-local address, others from the device's address of their
//!   family (none: `send_err`);
//! - frames that are not for it are ignored and counted: another MAC
//!   (`rx_not_for_us`), another IP address (`rx_not_for_us`), not RoCEv2 (`rx_not_roce`);
//!   truncated or malformed frames count in `malformed_pkts`, bad ICRCs in `icrc_err`;
//! - a fault chain wraps it as it wraps the UDP transport (`faulty.rs`): what the chain lets
//!   through comes back through [`Transport::put`], framed with IPv4 ID 0 (the ID its ICRC
//!   was filled for);
//! - a capture holds the RoCE frames and the ARP and neighbour discovery exchanges.
//!
//! Optional 802.1Q: with a VLAN, every frame it sends is tagged and it takes only its
//! VLAN's frames.
//!
//! The socket: `AF_PACKET`/`SOCK_RAW` on `ETH_P_ALL`, bound to the interface,
//! `PACKET_IGNORE_OUTGOING` (it does not see its own frames), `PACKET_QDISC_BYPASS` (frames
//! go to the driver without the qdisc, as a NIC's queue would), a large receive buffer;
//! `recvmmsg` and `sendmmsg` batches.
//!
//! One job per module, as smoltcp splits its interface and its raw socket:
//! - `sys` (`rnic_io::packet`, in the `rnic-io` crate): the socket's system calls, each
//!   behind a safe function; every `unsafe` of this transport is there (smoltcp's
//!   `phy/sys/raw_socket.rs`), with the bare `RawSocket` for `rnic perf`'s baseline;
//! - [`frame`]: the Ethernet, IP and UDP headers of what it sends, and the cutting of a
//!   peer's unsegmented GSO send;
//! - [`neighbor`]: ARP, neighbour discovery, the neighbour cache and the packets waiting
//!   for a neighbour (smoltcp's `iface/neighbor.rs`);
//! - [`route`]: the interface's routes, the next hop, the source address (smoltcp's
//!   `iface/route.rs`);
//! - this module: the [`Interface`] and [`Packet`], the state machine that is the [`Transport`], using all of them.
//!   `sys`, `frame` and `route` use none of the others; `neighbor` uses `frame` and
//!   `route`, and nothing of the transport.

mod frame;
mod neighbor;
mod route;

use super::{Transport, RX_BATCH};
use crate::capture::Capture;
use crate::config::{CongestionControl, DeviceConfig, DeviceError, SOCKET_BUFFER};
use crate::counters::Counters;
use crate::engine::{Engine, TxPacket};
use crate::faults::Wire;
use crate::Time;
use frame::{Framer, ETH_P_ARP, FRAME_BUF, PROTO_ICMPV6};
use neighbor::{Heard, Neighbors};
use rnic_io::packet as sys;
use rnic_wire::ethernet::{self, MacAddr};
use rnic_wire::icrc::IcrcContext;
use rnic_wire::ROCEV2_UDP_PORT;
use route::{Addrs, Routes};
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use sys::{CMSG_ROOM, GSO_UDP_L4, VNET_HDR};

/// The interface a raw device runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Its name (`veth0`).
    pub name: String,
    /// Its index.
    pub index: i32,
    /// Its MAC, which the device uses.
    pub mac: MacAddr,
    /// Its MTU (IP bytes per frame).
    pub mtu: u32,
}

impl Interface {
    /// The largest IBA path MTU whose packets fit the interface (headers: IPv4, UDP,
    /// BTH, RETH or AtomicETH, ImmDt, ICRC), as rxe derives the port's active MTU from
    /// its netdev's.
    pub fn active_mtu(&self) -> Option<crate::qp_state::PathMtu> {
        self.active_mtu_for(false)
    }

    /// [`active_mtu`](Self::active_mtu) for a device whose address is IPv6 (a 40-byte IP
    /// header instead of 20).
    pub fn active_mtu_for(&self, ipv6: bool) -> Option<crate::qp_state::PathMtu> {
        Interface::port_mtu(self.mtu, ipv6)
    }

    /// The active MTU of a port on a link of MTU `link_mtu` bytes (for a caller that has
    /// only the link's MTU, such as the libibverbs library reading sysfs).
    pub fn port_mtu(link_mtu: u32, ipv6: bool) -> Option<crate::qp_state::PathMtu> {
        let overhead: u32 = if ipv6 { 40 } else { 20 } + 8 + 12 + 16 + 4 + 4;
        [4096u32, 2048, 1024, 512, 256]
            .into_iter()
            .find(|m| m + overhead <= link_mtu)
            .and_then(crate::qp_state::PathMtu::from_bytes)
    }
}

/// Opens the `AF_PACKET` socket on `name` and reads the interface's index, MAC and MTU.
/// Runs in the calling thread's network namespace (the socket stays in it).
fn open_socket(name: &str) -> Result<(OwnedFd, Interface), String> {
    let l = sys::open(name, SOCKET_BUFFER)?;
    Ok((l.sock, Interface { name: name.to_string(), index: l.index, mac: MacAddr(l.mac), mtu: l.mtu }))
}

/// The raw-Ethernet transport of one device.
pub(crate) struct Packet {
    sock: OwnedFd,
    iface: Interface,
    /// The device's address (IPv4 or IPv6, which the host does not own) and its
    /// link-local IPv6 address from the MAC (GID 0), also answered and used.
    addrs: Addrs,
    routes: Routes,
    neigh: Neighbors,
    counters: Arc<Counters>,
    capture: Option<Arc<Capture>>,
    /// Its MAC, its VLAN (the one its frames carry and the only one it takes), its TOS.
    framer: Framer,
    ident: u16,
    icrc: rnic_wire::icrc::IcrcCache,
    /// Frames of the current send.
    out: Vec<Vec<u8>>,
    out_len: usize,
    bufs: Vec<Vec<u8>>,
    lens: Vec<usize>,
    /// One segment of a received GSO frame.
    seg: Vec<u8>,
    /// The received frames' VLAN IDs the kernel reported beside them.
    vids: Vec<Option<u16>>,
    cmsgs: Vec<[u8; CMSG_ROOM]>,
    /// The clock of the last round (the receive path's learning flushes held packets).
    now: Time,
    /// The IP multicast groups a QP of the device is attached to (their Ethernet groups
    /// joined on the interface).
    groups: Vec<IpAddr>,
}

impl Packet {
    /// Opens the transport on `netdev` for the device at `config.ip`.
    pub(crate) fn open(
        config: &DeviceConfig,
        netdev: &str,
        capture: Option<Arc<Capture>>,
        counters: Arc<Counters>,
    ) -> Result<Packet, DeviceError> {
        let bad = |why: String| DeviceError::Netdev { name: config.name.clone(), netdev: netdev.to_string(), why };
        let ip = config.ip;
        let unusable = match ip {
            IpAddr::V4(a) => a.is_unspecified() || a.is_loopback() || a.is_multicast() || a.is_broadcast(),
            IpAddr::V6(a) => a.is_unspecified() || a.is_loopback() || a.is_multicast() || a.to_ipv4_mapped().is_some(),
        };
        if unusable {
            return Err(bad(format!("{ip} cannot be a device address on a link")));
        }
        if let Some(v) = config.vlan {
            if v == 0 || v >= 4095 {
                return Err(bad(format!("VLAN ID {v} is not in 1..=4094")));
            }
        }
        let (sock, iface) = open_socket(netdev).map_err(bad)?;
        if iface.active_mtu_for(ip.is_ipv6()).is_none() {
            return Err(bad(format!("MTU {} is too small for RoCE (at least 256 + 64 bytes)", iface.mtu)));
        }
        let ll6 = crate::engine::link_local(crate::engine::guid_for_mac(iface.mac.0));
        // Neighbour solicitations for its IPv6 addresses come to their solicited-node
        // groups: a NIC's multicast filter must let them in.
        for a in std::iter::once(ll6).chain(match ip {
            IpAddr::V6(a) => Some(a),
            IpAddr::V4(_) => None,
        }) {
            sys::join_group(sock.as_fd(), iface.index, neighbor::solicited_node(a).1 .0)
                .map_err(|e| bad(e.to_string()))?;
        }
        Ok(Packet {
            sock,
            routes: Routes::read(netdev),
            framer: Framer {
                mac: iface.mac,
                vlan: config.vlan,
                tos: if config.congestion_control == CongestionControl::Off { 0 } else { rnic_io::ECN_ECT0 },
            },
            iface,
            addrs: Addrs { ip, ll6 },
            neigh: Neighbors::default(),
            counters,
            capture,
            ident: 0,
            icrc: rnic_wire::icrc::IcrcCache::new(),
            out: Vec::new(),
            out_len: 0,
            // A received frame can be a whole UDP GSO send (up to 64 KiB).
            bufs: (0..RX_BATCH).map(|_| vec![0u8; 65_536 + 256]).collect(),
            seg: Vec::with_capacity(FRAME_BUF),
            vids: vec![None; RX_BATCH],
            cmsgs: vec![[0u8; CMSG_ROOM]; RX_BATCH],
            lens: vec![0; RX_BATCH],
            now: 0,
            groups: Vec::new(),
        })
    }

    /// The interface.
    pub(crate) fn interface(&self) -> &Interface {
        &self.iface
    }

    fn next_ident(&mut self) -> u16 {
        self.ident = self.ident.wrapping_add(1);
        self.ident
    }

    /// A frame buffer for the current send (reusing the last send's allocations).
    fn frame_buf(&mut self) -> &mut Vec<u8> {
        if self.out_len == self.out.len() {
            self.out.push(Vec::with_capacity(FRAME_BUF));
        }
        let b = &mut self.out[self.out_len];
        self.out_len += 1;
        b.clear();
        // The virtio-net header of a frame sent as it is (no offloads).
        b.resize(VNET_HDR, 0);
        b
    }

    /// Frames a packet whose ICRC is already filled (for `ident`) and queues it.
    fn push_sealed(&mut self, mac: MacAddr, src: IpAddr, w: &Wire) {
        let mut buf = std::mem::take(self.frame_buf());
        self.framer.headers(&mut buf, mac, w.dst.is_ipv6());
        buf.extend_from_slice(&w.data);
        self.queue_frame(buf, src, w.dst, w.src_port, 0, w.ce);
    }

    /// Finishes a frame's headers, captures it and puts it in the current send's slot.
    fn queue_frame(&mut self, mut buf: Vec<u8>, src: IpAddr, dst: IpAddr, src_port: u16, ident: u16, ce: bool) {
        self.framer.finish(&mut buf[VNET_HDR..], src, dst, src_port, ident, ce);
        if let Some(c) = &self.capture {
            c.record_frame(&buf[VNET_HDR..]);
        }
        let i = self.out_len - 1;
        self.out[i] = buf;
    }

    /// Sends the frames queued by this send, in `sendmmsg` batches.
    fn flush_out(&mut self) {
        let n = self.out_len;
        let mut done = 0;
        while done < n {
            let chunk = (n - done).min(256);
            match sys::send(self.sock.as_fd(), None, &self.out[done..done + chunk], 0) {
                Ok(k) => done += k.max(1),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // The device queue is full: wait for room rather than drop (a NIC's
                    // ring would backpressure the same way).
                    sys::wait_writable(self.sock.as_fd());
                }
                Err(_) => {
                    // The first frame was refused (EMSGSIZE: above the interface MTU).
                    self.counters.send_err.fetch_add(1, Ordering::Relaxed);
                    done += 1;
                }
            }
        }
        self.out_len = 0;
    }

    /// Sends one engine packet to `dst` now that `mac` is its next hop's.
    fn frame_packet(&mut self, mac: MacAddr, p: &mut TxPacket) {
        let Some(src) = self.addrs.src_for(p.dst) else {
            self.counters.send_err.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let ident = if p.dst.is_ipv4() { self.next_ident() } else { 0 };
        let ctx = IcrcContext { ipv4_ident: ident, ..IcrcContext::new(src, p.dst, p.src_port, ROCEV2_UDP_PORT) };
        let mut buf = std::mem::take(self.frame_buf());
        self.framer.headers(&mut buf, mac, p.dst.is_ipv6());
        // The ICRC over the bytes copied into the frame (a payload straight from
        // registered memory is read once, copied and folded into the CRC in one pass):
        // the frame is what its ICRC covers even if the application writes that memory
        // meanwhile.
        if p.append_with_icrc(&mut buf, &mut self.icrc, &ctx).is_err() {
            self.counters.send_err.fetch_add(1, Ordering::Relaxed);
            self.out_len -= 1;
            self.out[self.out_len] = buf;
            return;
        }
        self.queue_frame(buf, src, p.dst, p.src_port, ident, false);
    }

    /// Queues an ARP or neighbour discovery frame (and captures it: a capture shows how
    /// the device found its peers).
    fn push_control(&mut self, frame: &[u8]) {
        self.frame_buf().extend_from_slice(frame);
        if let Some(c) = &self.capture {
            c.record_frame(frame);
        }
    }

    /// Asks for `ip`'s MAC (an ARP request or a neighbour solicitation).
    fn ask(&mut self, ip: IpAddr) {
        if let Some(frame) = neighbor::solicitation(ip, &self.addrs, &self.framer, &self.counters) {
            self.push_control(&frame);
        }
    }

    /// Learns that `ip` is at `mac`; sends what waited for it.
    fn learn(&mut self, ip: IpAddr, mac: MacAddr) {
        for (dst, sport, data) in self.neigh.learn(ip, mac) {
            let mut tx = TxPacket::new(dst, sport, data);
            self.frame_packet(mac, &mut tx);
        }
    }

    /// Does what an ARP or neighbour discovery message asked: learns, then answers.
    fn heard(&mut self, h: Heard) {
        if let Some((ip, mac)) = h.learn {
            self.learn(ip, mac);
        }
        if let Some(frame) = h.answer {
            self.push_control(&frame);
        }
    }

    /// Sends `p` (its ICRC not filled): framed at once when its next hop is known, held
    /// (and asked for) when not.
    fn route(&mut self, now: Time, p: &mut TxPacket) {
        if self.addrs.src_for(p.dst).is_none() {
            // No address of that family to send from (an IPv4 device and a global IPv6
            // destination, or the other way round).
            self.counters.send_err.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // A multicast group's Ethernet address is computed, never asked for.
        if let Some(mac) = frame::multicast_mac(p.dst) {
            self.frame_packet(mac, p);
            return;
        }
        let hop = self.routes.next_hop(p.dst);
        if let Some(mac) = self.neigh.get(hop) {
            self.frame_packet(mac, p);
            return;
        }
        let held = self.neigh.hold(now, hop, || {
            p.make_contiguous();
            (p.dst, p.src_port, std::mem::take(&mut p.data))
        });
        if held.dropped {
            self.counters.tx_neigh_unresolved.fetch_add(1, Ordering::Relaxed);
        }
        if held.first {
            self.ask(hop);
        }
    }

    /// Frames a packet the fault chain let through (its ICRC filled for IPv4 ID 0).
    fn put_sealed(&mut self, now: Time, w: Wire) {
        // The fault chain sealed it for `local_ip(dst)`: with no address of the
        // destination's family that is not a source this device can send from.
        if self.addrs.src_for(w.dst) != Some(w.src) {
            self.counters.send_err.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let hop = self.routes.next_hop(w.dst);
        match frame::multicast_mac(w.dst).or_else(|| self.neigh.get(hop)) {
            Some(mac) => self.push_sealed(mac, w.src, &w),
            None => {
                // Rare (a fault chain on a device that has not resolved its peer yet): the
                // packet waits as an unsealed one would; its ICRC is refilled for its ID.
                let mut p = TxPacket::new(w.dst, w.src_port, w.data);
                self.route(now, &mut p);
            }
        }
    }

    /// Checks received frame `i` and hands its RoCE packet to the engine; a UDP GSO
    /// frame (many packets, not yet segmented) is cut into its packets first.
    fn frame(&mut self, i: usize, engine: &mut Engine, now: u64) -> usize {
        let len = self.lens[i];
        if len < VNET_HDR {
            self.counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        let mut buf = std::mem::take(&mut self.bufs[i]);
        let (gso_type, gso_size) = (buf[1] & 0x7f, usize::from(u16::from_ne_bytes([buf[4], buf[5]])));
        let vid = self.vids[i];
        let n = if gso_type == GSO_UDP_L4 && gso_size > 0 {
            let mut seg = std::mem::take(&mut self.seg);
            let cut = frame::cut_gso(&buf[VNET_HDR..len], gso_size, &mut seg, |s| self.frame_in(s, vid, engine, now));
            self.seg = seg;
            cut.unwrap_or_else(|| {
                self.counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
                0
            })
        } else {
            self.frame_in(&mut buf[VNET_HDR..len], vid, engine, now)
        };
        self.bufs[i] = buf;
        n
    }

    /// `vid`: the VLAN the kernel reported beside the frame (its tag taken out).
    fn frame_in(&mut self, f: &mut [u8], vid: Option<u16>, engine: &mut Engine, now: u64) -> usize {
        if f.len() < ethernet::HEADER_LEN {
            self.counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        let dst = MacAddr([f[0], f[1], f[2], f[3], f[4], f[5]]);
        let src = MacAddr([f[6], f[7], f[8], f[9], f[10], f[11]]);
        if src == self.iface.mac {
            // Its own frame (a kernel without PACKET_IGNORE_OUTGOING).
            return 0;
        }
        let mut et = u16::from_be_bytes([f[12], f[13]]);
        let mut at = ethernet::HEADER_LEN;
        let mut vid = vid;
        if et == ethernet::TPID_8021Q && f.len() >= at + 4 {
            vid = Some(u16::from_be_bytes([f[14], f[15]]) & 0x0fff);
            et = u16::from_be_bytes([f[16], f[17]]);
            at += 4;
        }
        // Only this device's VLAN (or, without one, untagged frames).
        if vid != self.framer.vlan {
            self.counters.rx_not_for_us.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        let broadcast = dst.0 == [0xff; 6];
        // IPv6 multicast (33:33:...): a neighbour solicitation to a solicited-node group,
        // or a UD multicast group's datagram; IPv4 multicast (01:00:5e:...): a group's.
        let multicast6 = dst.0[0] == 0x33 && dst.0[1] == 0x33;
        let multicast4 = dst.0[..3] == [0x01, 0x00, 0x5e];
        if dst != self.iface.mac && !broadcast && !multicast6 && !multicast4 {
            self.counters.rx_not_for_us.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        if et == ETH_P_ARP {
            if let Some(c) = &self.capture {
                c.record_frame(f);
            }
            let h = self.neigh.arp(&f[at..], &self.addrs, &self.framer, &self.counters);
            self.heard(h);
            return 0;
        }
        if et == ethernet::ETHERTYPE_IPV6 && f.len() >= at + 40 && f[at + 6] == PROTO_ICMPV6 {
            if let Some(c) = &self.capture {
                c.record_frame(f);
            }
            let h = self.neigh.nd(&f[at..], src, &self.addrs, &self.framer, &self.counters);
            self.heard(h);
            return 0;
        }
        if broadcast || ((multicast6 || multicast4) && self.groups.is_empty()) {
            self.counters.rx_not_roce.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        // The UDP checksum is not checked: a sender with checksum offload (veth, most NICs)
        // hands AF_PACKET the frame before it is finished (CHECKSUM_PARTIAL), and the ICRC
        // covers everything the checksum would, the checksum field itself masked (IBA
        // A17.3.3; rxe sends 0). Zeroed here, it reads as "none" to the parser.
        let udp_at = if et == ethernet::ETHERTYPE_IPV4 && f.len() >= at + 20 && f[at] >> 4 == 4 && f[at + 9] == 17 {
            Some(at + usize::from(f[at] & 0x0f) * 4)
        } else if et == ethernet::ETHERTYPE_IPV6 && f.len() >= at + 40 && f[at] >> 4 == 6 && f[at + 6] == 17 {
            Some(at + 40)
        } else {
            None
        };
        if let Some(u) = udp_at.filter(|&u| f.len() >= u + 8) {
            f[u + 6] = 0;
            f[u + 7] = 0;
        }
        let f: &[u8] = f;
        let p = match rnic_wire::frame::parse_ethernet(f) {
            Ok(p) => p,
            Err(e) if e.is_not_roce() => {
                self.counters.rx_not_roce.fetch_add(1, Ordering::Relaxed);
                return 0;
            }
            Err(_) => {
                self.counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
                return 0;
            }
        };
        let (sip, dip) = (p.ip.src(), p.ip.dst());
        // A group's datagram comes to the group's Ethernet address (IBA 10.5: given to
        // the QPs attached to it); anything else to this device's own.
        let group = (multicast4 || multicast6)
            .then_some(dip)
            .filter(|g| self.groups.contains(g) && frame::multicast_mac(*g) == Some(dst));
        if group.is_none() && (!self.addrs.is_mine(dip) || dst != self.iface.mac) {
            self.counters.rx_not_for_us.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        // IBA C9-3: the ICRC over the headers as received; a bad one is dropped silently.
        if !p.icrc_ok() {
            self.counters.icrc_err.fetch_add(1, Ordering::Relaxed);
            return 1;
        }
        let ce = match p.ip {
            rnic_wire::frame::IpRepr::V4(r) => r.tos & 3 == 3,
            rnic_wire::frame::IpRepr::V6(r) => r.traffic_class & 3 == 3,
        };
        // The frame's source MAC is the next hop back to its sender.
        if self.neigh.get(sip) != Some(src) {
            self.learn(sip, src);
        }
        if let Some(c) = &self.capture {
            c.record_frame(f);
        }
        match group {
            Some(g) => engine.handle_multicast(now, sip, g, p.roce_bytes, ce),
            None => engine.handle_packet_ecn(now, sip, p.roce_bytes, ce),
        }
        1
    }
}

impl Transport for Packet {
    fn send(&mut self, now: Time, batch: &mut [TxPacket], _counters: &Counters) {
        self.now = now;
        for p in batch.iter_mut() {
            if p.train > 1 {
                // Each packet of a train is a frame of its own.
                let train = std::mem::replace(p, TxPacket::new(p.dst, p.src_port, Vec::new()));
                for mut one in train.split_train() {
                    self.route(now, &mut one);
                }
            } else {
                self.route(now, p);
            }
        }
        self.flush_out();
    }

    fn release(&mut self, now: Time, _counters: &Counters) {
        self.now = now;
        // Neighbours that did not answer: ask again, or give up on what waits.
        let (dropped, ask) = self.neigh.expire(now);
        self.counters.tx_neigh_unresolved.fetch_add(dropped, Ordering::Relaxed);
        for hop in ask {
            self.ask(hop);
        }
        self.flush_out();
    }

    fn next_due(&self) -> Option<Time> {
        self.neigh.next_due()
    }

    fn join(&mut self, group: IpAddr) -> io::Result<()> {
        if self.groups.contains(&group) {
            return Ok(());
        }
        let mac = frame::multicast_mac(group)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{group} is not a multicast group")))?;
        if self.addrs.src_for(group).is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the device has no address of group {group}'s family to send from"),
            ));
        }
        // A NIC's multicast filter must let the group's frames in (PACKET_ADD_MEMBERSHIP).
        sys::join_group(self.sock.as_fd(), self.iface.index, mac.0)?;
        self.groups.push(group);
        Ok(())
    }

    fn leave(&mut self, group: IpAddr) {
        if let Some(at) = self.groups.iter().position(|&g| g == group) {
            self.groups.swap_remove(at);
            if let Some(mac) = frame::multicast_mac(group) {
                // Another group of the same Ethernet address keeps its own membership:
                // the kernel counts memberships per address.
                let _ = sys::leave_group(self.sock.as_fd(), self.iface.index, mac.0);
            }
        }
    }

    fn recv(&mut self, max: usize) -> usize {
        let max = max.clamp(1, self.bufs.len());
        let (lens, vids) = (&mut self.lens, &mut self.vids);
        let got = |i: usize, r: sys::Received| {
            lens[i] = if r.truncated { 0 } else { r.len };
            vids[i] = r.vid;
        };
        match sys::recv(self.sock.as_fd(), &mut self.bufs[..max], Some(self.cmsgs.as_mut_slice()), got) {
            Ok(n) => n,
            Err(e) => {
                if !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) {
                    self.counters.rx_socket_err.fetch_add(1, Ordering::Relaxed);
                }
                0
            }
        }
    }

    fn deliver(&mut self, i: usize, engine: &mut Engine, now: u64) -> usize {
        self.now = now;
        let n = self.frame(i, engine, now);
        // ARP replies and packets a learned neighbour released.
        if self.out_len > 0 {
            self.flush_out();
        }
        n
    }

    fn wake_fds(&self) -> io::Result<Vec<OwnedFd>> {
        Ok(vec![self.sock.as_fd().try_clone_to_owned()?])
    }

    fn flush(&self) {
        if let Some(c) = &self.capture {
            c.flush();
        }
    }

    fn put(&mut self, now: Time, w: Wire, _counters: &Counters) {
        self.put_sealed(now, w);
    }

    fn local_ip(&self, dst: IpAddr) -> IpAddr {
        self.addrs.src_for(dst).unwrap_or(self.addrs.ip)
    }

    fn src_port(&self, p: &TxPacket) -> u16 {
        p.src_port
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_mtu_leaves_room_for_the_headers() {
        let i = |mtu| Interface { name: "x".into(), index: 1, mac: MacAddr([2, 0, 0, 0, 0, 1]), mtu };
        use crate::qp_state::PathMtu;
        assert_eq!(i(1500).active_mtu(), Some(PathMtu::Mtu1024));
        assert_eq!(i(9000).active_mtu(), Some(PathMtu::Mtu4096));
        assert_eq!(i(4096).active_mtu(), Some(PathMtu::Mtu2048));
        assert_eq!(i(4160).active_mtu(), Some(PathMtu::Mtu4096));
        assert_eq!(i(300).active_mtu(), None);
    }
}
