//! The raw-Ethernet transport: whole frames through an `AF_PACKET` socket bound to one
//! interface, as a RoCE NIC puts them on its link.
//!
//! The device has the interface's MAC and an IPv4 address of its own, one the host
//! kernel does **not** own (otherwise the kernel would answer UDP 4791 with ICMP port
//! unreachable and answer ARP for it). So this transport does what a NIC's firmware and
//! the kernel's neighbour code do for rxe:
//! - it answers ARP requests for its address and learns neighbours from ARP (requests
//!   and replies) and from the RoCE frames it receives (the source MAC of a frame is the
//!   next hop back to its sender, a router's when routed);
//! - to send to an address it does not know, it asks by ARP (the next hop: the gateway
//!   of the interface's route to it, read from the routing table when the device opens,
//!   or the address itself), holds the packets up to [`RESOLVE_GIVE_UP`], asking again
//!   every [`RESOLVE_RETRY`], then drops them and counts `tx_neigh_unresolved` (an RC
//!   QP's retransmissions ask again; with no answer they end in RETRY_EXC_ERR);
//! - every header is its own: IPv4 identification from a per-device counter, DF, TTL 64,
//!   ECT(0) with congestion control on (CE where a fault rule marks it), the UDP source
//!   port of the flow; the ICRC is computed over those headers and checked in full on
//!   receive (no ID solving: `icrc_ipv4_id_solved` stays 0);
//! - frames that are not for it are ignored and counted: another MAC
//!   (`rx_not_for_us`), another IP address (`rx_not_for_us`), not RoCEv2 (`rx_not_roce`);
//!   truncated or malformed frames count in `malformed_pkts`, bad ICRCs in `icrc_err`;
//! - a fault chain wraps it as it wraps the UDP transport (`faulty.rs`): what the chain lets
//!   through comes back through [`Transport::put`], framed with IPv4 ID 0 (the ID its ICRC
//!   was filled for).
//!
//! IPv4 only (an IPv6 address is refused when the device opens), untagged frames (an
//! 802.1Q-tagged RoCE frame received is accepted; this side sends untagged).
//!
//! The socket: `AF_PACKET`/`SOCK_RAW` on `ETH_P_ALL`, bound to the interface,
//! `PACKET_IGNORE_OUTGOING` (it does not see its own frames), `PACKET_QDISC_BYPASS` (frames
//! go to the driver without the qdisc, as a NIC's queue would), a large receive buffer;
//! `recvmmsg` and `sendmmsg` batches. Every `unsafe` call of this transport is in this file.

use super::{Transport, RX_BATCH};
use crate::capture::Capture;
use crate::counters::Counters;
use crate::device::{CongestionControl, DeviceConfig, DeviceError, SOCKET_BUFFER};
use crate::engine::{Engine, Time, TxPacket};
use crate::faults::Wire;
use rnic_wire::ethernet::{self, MacAddr};
use rnic_wire::icrc::IcrcContext;
use rnic_wire::ROCEV2_UDP_PORT;
use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const ETH_P_ALL: u16 = 0x0003;
const ETH_P_ARP: u16 = 0x0806;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_AUXDATA: libc::c_int = 8;
/// `TP_STATUS_VLAN_VALID`: the auxdata's VLAN TCI is the frame's (the kernel moved the tag
/// out of the frame before this socket saw it).
const TP_STATUS_VLAN_VALID: u32 = 0x10;
/// Room for one `tpacket_auxdata` control message.
const CMSG_ROOM: usize = 64;
/// `struct virtio_net_hdr` before every frame with `PACKET_VNET_HDR`.
const VNET_HDR: usize = 10;
/// `VIRTIO_NET_HDR_GSO_UDP_L4`: a UDP GSO packet not yet segmented.
const GSO_UDP_L4: u8 = 5;
/// A received frame's buffer: a 9000-byte jumbo frame and its headers fit.
const FRAME_BUF: usize = 9216 + 64;
/// IPv4 + UDP header bytes before the RoCE packet.
const IP_UDP: usize = 20 + 8;
/// Ask again for an unresolved neighbour after this long (ns).
pub(crate) const RESOLVE_RETRY: Time = 200_000_000;
/// Drop what waits for a neighbour that did not answer within this long (ns).
pub(crate) const RESOLVE_GIVE_UP: Time = 1_000_000_000;
/// Packets held per unresolved neighbour; more are dropped at once.
const RESOLVE_QUEUE: usize = 1024;
/// TTL of sent IPv4 packets (rxe: the route's hop limit, 64 by default).
const TTL: u8 = 64;

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
        const OVERHEAD: u32 = 20 + 8 + 12 + 16 + 4 + 4;
        [4096u32, 2048, 1024, 512, 256]
            .into_iter()
            .find(|m| m + OVERHEAD <= self.mtu)
            .and_then(crate::qp_state::PathMtu::from_bytes)
    }
}

/// An IPv4 route of the interface, read from the kernel's table when the device opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Route {
    net: u32,
    mask: u32,
    gateway: Option<Ipv4Addr>,
}

fn last_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

// Struct sizes and the address family fit their C types.
/// Opens the `AF_PACKET` socket on `name` and reads the interface's index, MAC and MTU.
/// Runs in the calling thread's network namespace (the socket stays in it).
#[allow(clippy::cast_possible_truncation)]
fn open_socket(name: &str) -> Result<(OwnedFd, Interface), String> {
    let cname = CString::new(name).map_err(|_| format!("interface name {name:?} has a NUL byte"))?;
    // SAFETY: a valid C string.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 {
        return Err(format!("no network interface named {name:?} (in this network namespace)"));
    }
    let index = libc::c_int::try_from(index).map_err(|_| format!("interface index {index} out of range"))?;
    let proto = libc::c_int::from(ETH_P_ALL.to_be());
    // SAFETY: plain socket creation; the descriptor is owned below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, proto) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => format!(
                "a raw-Ethernet device needs CAP_NET_RAW to open an AF_PACKET socket \
                 (run as root, or `setcap cap_net_raw+ep` the program): {e}"
            ),
            _ => format!("AF_PACKET socket: {e}"),
        });
    }
    // SAFETY: `fd` is a new descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes().take(libc::IFNAMSIZ - 1)) {
        *d = s as libc::c_char;
    }
    // SAFETY: a valid socket and ifreq; SIOCGIFHWADDR writes the union's hwaddr.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut ifr) } < 0 {
        return Err(last_err("SIOCGIFHWADDR").to_string());
    }
    // SAFETY: the call above filled the hwaddr member.
    let hw = unsafe { ifr.ifr_ifru.ifru_hwaddr };
    if hw.sa_family != libc::ARPHRD_ETHER {
        return Err(format!("{name} is not an Ethernet interface (ARPHRD {})", hw.sa_family));
    }
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(hw.sa_data.iter()) {
        *m = *b as u8;
    }
    // SAFETY: as above, for the MTU member.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut ifr) } < 0 {
        return Err(last_err("SIOCGIFMTU").to_string());
    }
    // SAFETY: the call above filled the mtu member.
    let mtu = u32::try_from(unsafe { ifr.ifr_ifru.ifru_mtu }).unwrap_or(0);
    // SAFETY: a zeroed sockaddr_ll with the family, protocol and interface set.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ETH_P_ALL.to_be();
    sll.sll_ifindex = index;
    let len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: a valid socket and address of the stated length.
    if unsafe { libc::bind(sock.as_raw_fd(), std::ptr::addr_of!(sll).cast(), len) } < 0 {
        return Err(last_err("bind AF_PACKET").to_string());
    }
    let one: libc::c_int = 1;
    let set = |level, opt, v: &libc::c_int| {
        let n = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a valid socket and an int option value.
        unsafe { libc::setsockopt(sock.as_raw_fd(), level, opt, std::ptr::from_ref(v).cast(), n) }
    };
    // Not seeing its own frames; without it (kernels before 4.20) they are told apart by
    // their source MAC.
    let _ = set(libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &one);
    // A virtio-net header before each frame: a peer's UDP GSO send crossing a veth (or a
    // bridge) reaches this socket unsegmented, one frame holding many packets; the header
    // says so and at what size to cut it, as a NIC would have on the wire.
    if set(libc::SOL_PACKET, PACKET_VNET_HDR, &one) < 0 {
        return Err(last_err("PACKET_VNET_HDR").to_string());
    }
    // Each frame's VLAN tag, which the kernel takes out of the frame on receive.
    if set(libc::SOL_PACKET, PACKET_AUXDATA, &one) < 0 {
        return Err(last_err("PACKET_AUXDATA").to_string());
    }
    let _ = set(libc::SOL_PACKET, PACKET_QDISC_BYPASS, &one);
    let big = libc::c_int::try_from(SOCKET_BUFFER).unwrap_or(libc::c_int::MAX);
    if set(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &big) < 0 {
        let _ = set(libc::SOL_SOCKET, libc::SO_RCVBUF, &big);
    }
    if set(libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &big) < 0 {
        let _ = set(libc::SOL_SOCKET, libc::SO_SNDBUF, &big);
    }
    Ok((sock, Interface { name: name.to_string(), index, mac: MacAddr(mac), mtu }))
}

/// The interface's IPv4 routes (`/proc/thread-self/net/route`: the calling thread's
/// network namespace). Missing or unreadable: none (every destination is on-link).
fn read_routes(ifname: &str) -> Vec<Route> {
    let text = std::fs::read_to_string("/proc/thread-self/net/route")
        .or_else(|_| std::fs::read_to_string("/proc/net/route"))
        .unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || f[0] != ifname {
            continue;
        }
        // The table holds addresses as little-endian hex of the network-order bytes.
        let hex = |s: &str| u32::from_str_radix(s, 16).ok().map(|v| u32::from_be_bytes(v.to_le_bytes()));
        let (Some(net), Some(gw), Some(mask)) = (hex(f[1]), hex(f[2]), hex(f[7])) else { continue };
        out.push(Route { net, mask, gateway: (gw != 0).then(|| Ipv4Addr::from(gw)) });
    }
    // Longest prefix first.
    out.sort_by_key(|r| std::cmp::Reverse(r.mask.count_ones()));
    out
}

/// A bare `AF_PACKET` socket on an interface, set up as the raw transport's is: for
/// measuring the link itself (`rnic perf`'s raw-frame baseline: the transport's own
/// ceiling over the same interfaces).
#[derive(Debug)]
pub struct RawSocket {
    sock: OwnedFd,
    iface: Interface,
}

impl RawSocket {
    /// Bytes before each received frame in a buffer given to [`RawSocket::recv`] (the
    /// socket's virtio-net header).
    pub const RX_OFFSET: usize = VNET_HDR;

    /// Opens the socket on `ifname` (in the calling thread's network namespace); needs
    /// CAP_NET_RAW.
    pub fn open(ifname: &str) -> Result<RawSocket, String> {
        let (sock, iface) = open_socket(ifname)?;
        Ok(RawSocket { sock, iface })
    }

    /// The interface.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// Sends whole Ethernet frames in one `sendmmsg`; returns how many the kernel took
    /// (0 when its queue is full).
    pub fn send(&self, frames: &[&[u8]]) -> io::Result<usize> {
        let hdr = [0u8; VNET_HDR];
        let mut iov: Vec<[libc::iovec; 2]> = frames
            .iter()
            .map(|f| {
                [
                    libc::iovec { iov_base: hdr.as_ptr() as *mut libc::c_void, iov_len: VNET_HDR },
                    libc::iovec { iov_base: f.as_ptr() as *mut libc::c_void, iov_len: f.len() },
                ]
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iov
            .iter_mut()
            .map(|v| {
                // SAFETY: a zeroed mmsghdr is valid; it points at two iovecs.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = v.as_mut_ptr();
                m.msg_hdr.msg_iovlen = 2;
                m
            })
            .collect();
        let len = u32::try_from(msgs.len()).unwrap_or(u32::MAX);
        // SAFETY: valid socket; headers, iovecs and frames live across the call.
        let r = unsafe { libc::sendmmsg(self.sock.as_raw_fd(), msgs.as_mut_ptr(), len, libc::MSG_DONTWAIT) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock { Ok(0) } else { Err(e) };
        }
        Ok(usize::try_from(r).unwrap_or(0))
    }

    /// Receives up to `bufs.len()` frames without blocking; frame *i* is
    /// `bufs[i][RX_OFFSET..RX_OFFSET + lens[i]]`. Returns how many.
    pub fn recv(&self, bufs: &mut [Vec<u8>], lens: &mut [usize]) -> io::Result<usize> {
        let mut iov: Vec<libc::iovec> =
            bufs.iter_mut().map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() }).collect();
        let mut msgs: Vec<libc::mmsghdr> = iov
            .iter_mut()
            .map(|v| {
                // SAFETY: a zeroed mmsghdr is valid; it points at one iovec.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = std::ptr::from_mut(v);
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        let len = u32::try_from(msgs.len()).unwrap_or(u32::MAX);
        // SAFETY: valid socket; headers and buffers live across the call; non-blocking.
        let r = unsafe {
            libc::recvmmsg(self.sock.as_raw_fd(), msgs.as_mut_ptr(), len, libc::MSG_DONTWAIT, std::ptr::null_mut())
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock { Ok(0) } else { Err(e) };
        }
        let n = usize::try_from(r).unwrap_or(0);
        for (l, m) in lens.iter_mut().zip(&msgs[..n]) {
            *l = (m.msg_len as usize).saturating_sub(VNET_HDR);
        }
        Ok(n)
    }
}

/// Packets waiting for a neighbour's MAC.
#[derive(Debug)]
struct Pending {
    since: Time,
    asked: Time,
    /// (destination, UDP source port, BTH..ICRC with the ICRC not yet filled)
    packets: Vec<(Ipv4Addr, u16, Vec<u8>)>,
}

/// The raw-Ethernet transport of one device.
pub(crate) struct Packet {
    sock: OwnedFd,
    iface: Interface,
    ip: Ipv4Addr,
    routes: Vec<Route>,
    neigh: HashMap<Ipv4Addr, MacAddr>,
    pending: HashMap<Ipv4Addr, Pending>,
    counters: Arc<Counters>,
    capture: Option<Arc<Capture>>,
    /// TOS byte: ECT(0) with congestion control on.
    tos: u8,
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
    /// 802.1Q: the VLAN this device's frames carry, and the only one it takes.
    vlan: Option<u16>,
    /// The clock of the last round (the receive path's learning flushes held packets).
    now: Time,
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
        let IpAddr::V4(ip) = config.ip else {
            return Err(bad(format!(
                "{}: the raw-Ethernet transport takes an IPv4 address (IPv6 neighbour discovery is not implemented)",
                config.ip
            )));
        };
        if ip.is_unspecified() || ip.is_loopback() || ip.is_multicast() || ip.is_broadcast() {
            return Err(bad(format!("{ip} cannot be a device address on a link")));
        }
        if let Some(v) = config.vlan {
            if v == 0 || v >= 4095 {
                return Err(bad(format!("VLAN ID {v} is not in 1..=4094")));
            }
        }
        let (sock, iface) = open_socket(netdev).map_err(bad)?;
        if iface.active_mtu().is_none() {
            return Err(bad(format!("MTU {} is too small for RoCE (at least 256 + 64 bytes)", iface.mtu)));
        }
        Ok(Packet {
            sock,
            routes: read_routes(netdev),
            iface,
            ip,
            neigh: HashMap::new(),
            pending: HashMap::new(),
            counters,
            capture,
            tos: if config.congestion_control == CongestionControl::Off { 0 } else { crate::sys::ECN_ECT0 },
            ident: 0,
            icrc: rnic_wire::icrc::IcrcCache::new(),
            out: Vec::new(),
            out_len: 0,
            // A received frame can be a whole UDP GSO send (up to 64 KiB).
            bufs: (0..RX_BATCH).map(|_| vec![0u8; 65_536 + 256]).collect(),
            seg: Vec::with_capacity(FRAME_BUF),
            vids: vec![None; RX_BATCH],
            cmsgs: vec![[0u8; CMSG_ROOM]; RX_BATCH],
            vlan: config.vlan,
            lens: vec![0; RX_BATCH],
            now: 0,
        })
    }

    /// The interface.
    pub(crate) fn interface(&self) -> &Interface {
        &self.iface
    }

    /// The next hop towards `dst`: the gateway of the longest matching route with one,
    /// else `dst` itself (on-link).
    fn next_hop(&self, dst: Ipv4Addr) -> Ipv4Addr {
        let d = u32::from(dst);
        self.routes.iter().find(|r| d & r.mask == r.net).and_then(|r| r.gateway).unwrap_or(dst)
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

    /// Appends the Ethernet header of a frame to `mac` and room for the IPv4 and UDP
    /// headers ([`finish`](Self::finish) writes them once the length is known).
    fn headers(&self, buf: &mut Vec<u8>, mac: MacAddr) {
        let eth = ethernet::EthernetRepr {
            dst: mac,
            src: self.iface.mac,
            vlan: self.tag(),
            ethertype: ethernet::ETHERTYPE_IPV4,
        };
        let start = buf.len();
        buf.resize(start + eth.buffer_len() + IP_UDP, 0);
        let _ = eth.emit(&mut buf[start..]);
    }

    /// The 802.1Q tag of this device's frames.
    fn tag(&self) -> Option<ethernet::VlanTag> {
        self.vlan.map(|vid| ethernet::VlanTag { pcp: 0, dei: false, vid })
    }

    /// Ethernet header bytes of this device's frames.
    fn eth_len(&self) -> usize {
        ethernet::HEADER_LEN + if self.vlan.is_some() { ethernet::VLAN_TAG_LEN } else { 0 }
    }

    /// Finishes the headers written by [`headers`](Self::headers) once the RoCE bytes
    /// follow them (lengths and the IPv4 checksum need the total).
    fn finish(&self, frame: &mut [u8], dst: Ipv4Addr, src_port: u16, ident: u16, ce: bool) {
        let at = self.eth_len();
        let roce_len = frame.len() - at - IP_UDP;
        let tos = if ce { self.tos | crate::sys::ECN_CE } else { self.tos };
        let ip = rnic_wire::ipv4::Ipv4Repr {
            src: self.ip,
            dst,
            tos,
            ident,
            df: true,
            ttl: TTL,
            protocol: rnic_wire::ipv4::PROTO_UDP,
        };
        let _ = ip.emit(&mut frame[at..at + 20], 8 + roce_len);
        let u = &mut frame[at + 20..at + 28];
        u[0..2].copy_from_slice(&src_port.to_be_bytes());
        u[2..4].copy_from_slice(&ROCEV2_UDP_PORT.to_be_bytes());
        u[4..6].copy_from_slice(&u16::try_from(8 + roce_len).unwrap_or(u16::MAX).to_be_bytes());
        // A zero UDP checksum, as rxe and RoCE NICs send (the ICRC covers the packet).
        u[6..8].copy_from_slice(&[0, 0]);
    }

    /// Frames a packet whose ICRC is already filled (for `ident`) and queues it.
    fn push_sealed(&mut self, mac: MacAddr, dst: Ipv4Addr, src_port: u16, ident: u16, ce: bool, roce: &[u8]) {
        let mut buf = std::mem::take(self.frame_buf());
        self.headers(&mut buf, mac);
        buf.extend_from_slice(roce);
        self.queue_frame(buf, dst, src_port, ident, ce);
    }

    /// Finishes a frame's headers, captures it and puts it in the current send's slot.
    fn queue_frame(&mut self, mut buf: Vec<u8>, dst: Ipv4Addr, src_port: u16, ident: u16, ce: bool) {
        self.finish(&mut buf[VNET_HDR..], dst, src_port, ident, ce);
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
            let mut iov: Vec<libc::iovec> = self.out[done..done + chunk]
                .iter()
                .map(|f| libc::iovec { iov_base: f.as_ptr() as *mut libc::c_void, iov_len: f.len() })
                .collect();
            // SAFETY: zeroed mmsghdrs pointing at the iovecs above (no address: the socket
            // is bound to the interface).
            let mut msgs: Vec<libc::mmsghdr> = iov
                .iter_mut()
                .map(|v| {
                    let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                    m.msg_hdr.msg_iov = std::ptr::from_mut(v);
                    m.msg_hdr.msg_iovlen = 1;
                    m
                })
                .collect();
            let len = u32::try_from(msgs.len()).unwrap_or(0);
            // SAFETY: valid socket; `msgs` and the buffers they point to live across the call.
            let r = unsafe { libc::sendmmsg(self.sock.as_raw_fd(), msgs.as_mut_ptr(), len, 0) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if e.kind() == io::ErrorKind::WouldBlock {
                    // The device queue is full: wait for room rather than drop (a NIC's
                    // ring would backpressure the same way).
                    wait_writable(&self.sock);
                    continue;
                }
                // The first frame was refused (EMSGSIZE: above the interface MTU).
                self.counters.send_err.fetch_add(1, Ordering::Relaxed);
                done += 1;
                continue;
            }
            done += usize::try_from(r).unwrap_or(0).max(1);
        }
        self.out_len = 0;
    }

    /// Sends one engine packet to `dst` now that `mac` is its next hop's.
    fn frame_packet(&mut self, mac: MacAddr, dst: Ipv4Addr, p: &mut TxPacket) {
        let ident = self.next_ident();
        let ctx = IcrcContext {
            ipv4_ident: ident,
            ..IcrcContext::new(IpAddr::V4(self.ip), p.dst, p.src_port, ROCEV2_UDP_PORT)
        };
        let mut buf = std::mem::take(self.frame_buf());
        self.headers(&mut buf, mac);
        let roce_at = buf.len();
        for part in p.parts() {
            part.extend_vec(&mut buf);
        }
        // The ICRC over the bytes copied into the frame (a payload straight from
        // registered memory is read once): the frame is what its ICRC covers even if the
        // application writes that memory meanwhile.
        if self.icrc.fill(&ctx, &mut buf[roce_at..]).is_err() {
            self.counters.send_err.fetch_add(1, Ordering::Relaxed);
            self.out_len -= 1;
            self.out[self.out_len] = buf;
            return;
        }
        self.queue_frame(buf, dst, p.src_port, ident, false);
    }

    /// Sends an ARP request for `ip`.
    fn ask(&mut self, ip: Ipv4Addr) {
        let frame = arp_frame(self.vlan, 1, self.iface.mac, self.ip, MacAddr([0xff; 6]), MacAddr([0; 6]), ip);
        let buf = self.frame_buf();
        buf.extend_from_slice(&frame);
        self.counters.arp_requests_sent.fetch_add(1, Ordering::Relaxed);
    }

    /// Learns that `ip` is at `mac`; sends what waited for it.
    fn learn(&mut self, ip: Ipv4Addr, mac: MacAddr) {
        if mac.0[0] & 1 != 0 || mac.0 == [0; 6] {
            return;
        }
        self.neigh.insert(ip, mac);
        if let Some(p) = self.pending.remove(&ip) {
            for (dst, sport, data) in p.packets {
                let mut tx = TxPacket { dst: IpAddr::V4(dst), src_port: sport, data, payload: None };
                self.frame_packet(mac, dst, &mut tx);
            }
        }
    }

    /// Sends `p` (its ICRC not filled): framed at once when its next hop is known, held
    /// (and asked for) when not.
    fn route(&mut self, now: Time, p: &mut TxPacket) {
        let IpAddr::V4(dst) = p.dst else {
            self.counters.send_err.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let hop = self.next_hop(dst);
        if let Some(&mac) = self.neigh.get(&hop) {
            self.frame_packet(mac, dst, p);
            return;
        }
        let first = !self.pending.contains_key(&hop);
        let q = self.pending.entry(hop).or_insert(Pending { since: now, asked: now, packets: Vec::new() });
        if q.packets.len() >= RESOLVE_QUEUE {
            self.counters.tx_neigh_unresolved.fetch_add(1, Ordering::Relaxed);
        } else {
            p.make_contiguous();
            q.packets.push((dst, p.src_port, std::mem::take(&mut p.data)));
        }
        if first {
            self.ask(hop);
        }
    }

    /// Frames a packet the fault chain let through (its ICRC filled for IPv4 ID 0).
    fn put_sealed(&mut self, now: Time, w: Wire) {
        let IpAddr::V4(dst) = w.dst else { return };
        let hop = self.next_hop(dst);
        match self.neigh.get(&hop).copied() {
            Some(mac) => self.push_sealed(mac, dst, w.src_port, 0, w.ce, &w.data),
            None => {
                // Rare (a fault chain on a device that has not resolved its peer yet): the
                // packet waits as an unsealed one would; its ICRC is refilled for its ID.
                let mut p = TxPacket { dst: w.dst, src_port: w.src_port, data: w.data, payload: None };
                self.route(now, &mut p);
            }
        }
    }

    /// Handles an ARP frame: answers requests for this device's address, learns the
    /// sender of any request or reply.
    fn arp(&mut self, body: &[u8]) {
        // htype 1, ptype 0x0800, hlen 6, plen 4.
        if body.len() < 28 || body[0..2] != [0, 1] || body[2..4] != [8, 0] || body[4] != 6 || body[5] != 4 {
            self.counters.rx_not_roce.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let op = u16::from_be_bytes([body[6], body[7]]);
        let sha = MacAddr([body[8], body[9], body[10], body[11], body[12], body[13]]);
        let spa = Ipv4Addr::new(body[14], body[15], body[16], body[17]);
        let tpa = Ipv4Addr::new(body[24], body[25], body[26], body[27]);
        // RFC 826: update a known sender; add it when the request is for us.
        if tpa == self.ip || self.neigh.contains_key(&spa) || self.pending.contains_key(&spa) {
            self.learn(spa, sha);
        }
        if op == 1 && tpa == self.ip {
            let reply = arp_frame(self.vlan, 2, self.iface.mac, self.ip, sha, sha, spa);
            self.frame_buf().extend_from_slice(&reply);
            self.counters.arp_replies_sent.fetch_add(1, Ordering::Relaxed);
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
            let n = self.segments(&buf[VNET_HDR..len], gso_size, vid, &mut seg, engine, now);
            self.seg = seg;
            n
        } else {
            self.frame_in(&mut buf[VNET_HDR..len], vid, engine, now)
        };
        self.bufs[i] = buf;
        n
    }

    /// Cuts a UDP GSO frame (Ethernet, IPv4 and UDP headers, then the packets'
    /// datagrams of `size` bytes each, the last maybe shorter) into the frames the
    /// sender's kernel would have put on a wire: the headers repeated with each one's
    /// lengths and checksum, the IPv4 ID counting up from the first (Linux's UDP
    /// segmentation), and hands each on.
    fn segments(
        &mut self,
        f: &[u8],
        size: usize,
        vid: Option<u16>,
        seg: &mut Vec<u8>,
        engine: &mut Engine,
        now: u64,
    ) -> usize {
        let mut at = ethernet::HEADER_LEN;
        if f.len() >= at && u16::from_be_bytes([f[12], f[13]]) == ethernet::TPID_8021Q {
            at += 4;
        }
        let ihl = f.get(at).map_or(0, |b| usize::from(b & 0x0f) * 4);
        let head = at + ihl + 8;
        if ihl < 20 || f.len() <= head || f[at] >> 4 != 4 {
            self.counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        let id0 = u16::from_be_bytes([f[at + 4], f[at + 5]]);
        let mut n = 0;
        for (k, body) in f[head..].chunks(size).enumerate() {
            seg.clear();
            seg.extend_from_slice(&f[..head]);
            seg.extend_from_slice(body);
            let ip_len = u16::try_from(ihl + 8 + body.len()).unwrap_or(u16::MAX);
            let ip = &mut seg[at..at + ihl];
            ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
            ip[4..6].copy_from_slice(&id0.wrapping_add(u16::try_from(k).unwrap_or(0)).to_be_bytes());
            ip[10..12].copy_from_slice(&[0, 0]);
            let sum = rnic_wire::ipv4::internet_checksum(ip);
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
            let udp_len = u16::try_from(8 + body.len()).unwrap_or(u16::MAX);
            seg[at + ihl + 4..at + ihl + 6].copy_from_slice(&udp_len.to_be_bytes());
            n += self.frame_in(seg, vid, engine, now);
        }
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
        if vid != self.vlan {
            self.counters.rx_not_for_us.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        let broadcast = dst.0 == [0xff; 6];
        if dst != self.iface.mac && !broadcast {
            self.counters.rx_not_for_us.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        if et == ETH_P_ARP {
            self.arp(&f[at..]);
            return 0;
        }
        if broadcast {
            self.counters.rx_not_roce.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        // The UDP checksum is not checked: a sender with checksum offload (veth, most NICs)
        // hands AF_PACKET the frame before it is finished (CHECKSUM_PARTIAL), and the ICRC
        // covers everything the checksum would, the checksum field itself masked (IBA
        // A17.3.3; rxe sends 0). Zeroed here, it reads as "none" to the parser.
        if et == ethernet::ETHERTYPE_IPV4 && f.len() >= at + 20 && f[at] >> 4 == 4 && f[at + 9] == 17 {
            let u = at + usize::from(f[at] & 0x0f) * 4;
            if f.len() >= u + 8 {
                f[u + 6] = 0;
                f[u + 7] = 0;
            }
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
        let (IpAddr::V4(sip), IpAddr::V4(dip)) = (p.ip.src(), p.ip.dst()) else {
            self.counters.rx_not_for_us.fetch_add(1, Ordering::Relaxed);
            return 0;
        };
        if dip != self.ip {
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
        if self.neigh.get(&sip) != Some(&src) {
            self.learn(sip, src);
        }
        if let Some(c) = &self.capture {
            c.record_frame(f);
        }
        engine.handle_packet_ecn(now, IpAddr::V4(sip), p.roce_bytes, ce);
        1
    }
}

/// The VLAN ID of a received frame from its `PACKET_AUXDATA` control message, when the
/// kernel took the tag out of the frame.
// A tpacket_auxdata is 20 bytes: its size fits a u32.
#[allow(clippy::cast_possible_truncation)]
fn auxdata_vid(h: &libc::msghdr) -> Option<u16> {
    // SAFETY: `h` was filled by recvmmsg; CMSG_FIRSTHDR/NXTHDR walk its control buffer
    // within msg_controllen, and each data pointer is read only when the message is
    // PACKET_AUXDATA and long enough for a tpacket_auxdata.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let want = libc::CMSG_LEN(std::mem::size_of::<libc::tpacket_auxdata>() as u32) as usize;
            if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == PACKET_AUXDATA && (*c).cmsg_len >= want {
                let a: libc::tpacket_auxdata = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                return (a.tp_status & TP_STATUS_VLAN_VALID != 0).then_some(a.tp_vlan_tci & 0x0fff);
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
        None
    }
}

/// Waits up to 10 ms for room in the socket's send queue.
fn wait_writable(sock: &OwnedFd) {
    let mut p = libc::pollfd { fd: sock.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
    // SAFETY: one valid pollfd for the duration of the call.
    let _ = unsafe { libc::poll(&mut p, 1, 10) };
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
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&eth_dst.0);
    f.extend_from_slice(&sha.0);
    if let Some(vid) = vlan {
        f.extend_from_slice(&ethernet::TPID_8021Q.to_be_bytes());
        f.extend_from_slice(&(vid & 0x0fff).to_be_bytes());
    }
    f.extend_from_slice(&ETH_P_ARP.to_be_bytes());
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4]);
    f.extend_from_slice(&op.to_be_bytes());
    f.extend_from_slice(&sha.0);
    f.extend_from_slice(&spa.octets());
    f.extend_from_slice(&tha.0);
    f.extend_from_slice(&tpa.octets());
    f.resize(ethernet::MIN_FRAME_LEN, 0);
    f
}

impl Transport for Packet {
    fn send(&mut self, now: Time, batch: &mut [TxPacket], _counters: &Counters) {
        self.now = now;
        for p in batch.iter_mut() {
            self.route(now, p);
        }
        self.flush_out();
    }

    fn release(&mut self, now: Time, _counters: &Counters) {
        self.now = now;
        // Neighbours that did not answer: ask again, or give up on what waits.
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
        self.counters.tx_neigh_unresolved.fetch_add(dropped, Ordering::Relaxed);
        for hop in ask {
            self.ask(hop);
        }
        self.flush_out();
    }

    fn next_due(&self) -> Option<Time> {
        self.pending.values().map(|p| (p.asked + RESOLVE_RETRY).min(p.since + RESOLVE_GIVE_UP)).min()
    }

    fn recv(&mut self, max: usize) -> usize {
        let max = max.clamp(1, self.bufs.len());
        let mut iov: Vec<libc::iovec> = self.bufs[..max]
            .iter_mut()
            .map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iov
            .iter_mut()
            .zip(self.cmsgs.iter_mut())
            .map(|(v, c)| {
                // SAFETY: a zeroed mmsghdr is valid; it points at one iovec and a control
                // buffer.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = std::ptr::from_mut(v);
                m.msg_hdr.msg_iovlen = 1;
                m.msg_hdr.msg_control = c.as_mut_ptr().cast();
                m.msg_hdr.msg_controllen = CMSG_ROOM;
                m
            })
            .collect();
        let len = u32::try_from(msgs.len()).unwrap_or(0);
        // SAFETY: valid socket; the headers and buffers live across the call; non-blocking.
        let r = unsafe {
            libc::recvmmsg(self.sock.as_raw_fd(), msgs.as_mut_ptr(), len, libc::MSG_DONTWAIT, std::ptr::null_mut())
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) {
                self.counters.rx_socket_err.fetch_add(1, Ordering::Relaxed);
            }
            return 0;
        }
        let n = usize::try_from(r).unwrap_or(0);
        for (i, m) in msgs[..n].iter().enumerate() {
            let truncated = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            self.lens[i] = if truncated { 0 } else { m.msg_len as usize };
            self.vids[i] = auxdata_vid(&m.msg_hdr);
        }
        n
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

    fn wake_fd(&self) -> io::Result<OwnedFd> {
        self.sock.as_fd().try_clone_to_owned()
    }

    fn flush(&self) {
        if let Some(c) = &self.capture {
            c.flush();
        }
    }

    fn put(&mut self, now: Time, w: Wire, _counters: &Counters) {
        self.put_sealed(now, w);
    }

    fn local_ip(&self) -> IpAddr {
        IpAddr::V4(self.ip)
    }

    fn src_port(&self, p: &TxPacket) -> u16 {
        p.src_port
    }
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
