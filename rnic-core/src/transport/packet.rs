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
//!   link-local one always), holds the packets up to [`RESOLVE_GIVE_UP`], asking again
//!   every [`RESOLVE_RETRY`], then drops them and counts `tx_neigh_unresolved` (an RC
//!   QP's retransmissions ask again; with no answer they end in RETRY_EXC_ERR);
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
//! `recvmmsg` and `sendmmsg` batches. Every `unsafe` call of this transport is in this file.

use super::{Transport, RX_BATCH};
use crate::capture::Capture;
use crate::config::{CongestionControl, DeviceConfig, DeviceError, SOCKET_BUFFER};
use crate::counters::Counters;
use crate::engine::{Engine, TxPacket};
use crate::faults::Wire;
use crate::Time;
use rnic_wire::ethernet::{self, MacAddr};
use rnic_wire::icrc::IcrcContext;
use rnic_wire::ROCEV2_UDP_PORT;
use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
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
/// IPv6 + UDP header bytes before the RoCE packet.
const IP6_UDP: usize = 40 + 8;
/// ICMPv6's next-header value.
const PROTO_ICMPV6: u8 = 58;
/// ICMPv6 Neighbor Solicitation and Advertisement (RFC 4861 4.3, 4.4).
const ND_SOLICIT: u8 = 135;
const ND_ADVERT: u8 = 136;
/// Ask again for an unresolved neighbour after this long (ns).
pub(crate) const RESOLVE_RETRY: Time = 200_000_000;
/// Drop what waits for a neighbour that did not answer within this long (ns).
pub(crate) const RESOLVE_GIVE_UP: Time = 1_000_000_000;
/// Packets held per unresolved neighbour; more are dropped at once.
const RESOLVE_QUEUE: usize = 1024;
/// Neighbours remembered (learned ones beyond this are not added).
const NEIGH_MAX: usize = 4096;
/// TTL of sent IPv4 packets and hop limit of IPv6 ones (rxe: the route's, 64 by default).
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

/// An IPv4 route of the interface, read from the kernel's table when the device opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Route {
    net: u32,
    mask: u32,
    gateway: Option<Ipv4Addr>,
}

/// An IPv6 route of the interface, read from the kernel's table when the device opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Route6 {
    net: u128,
    len: u8,
    gateway: Option<Ipv6Addr>,
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

/// The interface's IPv6 routes (`/proc/thread-self/net/ipv6_route`: destination, prefix
/// length, source, its length, next hop, metric, refcount, use, flags, device). Missing:
/// none (every destination on-link).
fn read_routes6(ifname: &str) -> Vec<Route6> {
    let text = std::fs::read_to_string("/proc/thread-self/net/ipv6_route")
        .or_else(|_| std::fs::read_to_string("/proc/net/ipv6_route"))
        .unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[9] != ifname {
            continue;
        }
        let (Ok(net), Ok(len), Ok(gw)) =
            (u128::from_str_radix(f[0], 16), u8::from_str_radix(f[1], 16), u128::from_str_radix(f[4], 16))
        else {
            continue;
        };
        // Multicast and local routes are not ways out.
        if net >> 120 == 0xff || len > 128 {
            continue;
        }
        out.push(Route6 { net, len, gateway: (gw != 0).then(|| Ipv6Addr::from(gw)) });
    }
    out.sort_by_key(|r| std::cmp::Reverse(r.len));
    out
}

/// The solicited-node multicast address of `ip` (RFC 4291 2.7.1: `ff02::1:ff` and its
/// last 24 bits) and the Ethernet group it maps to (RFC 2464 7: `33:33` and the last 32).
fn solicited_node(ip: Ipv6Addr) -> (Ipv6Addr, MacAddr) {
    let o = ip.octets();
    let group = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00 | u16::from(o[13]), u16::from_be_bytes([o[14], o[15]]));
    let g = group.octets();
    (group, MacAddr([0x33, 0x33, g[12], g[13], g[14], g[15]]))
}

/// Joins the Ethernet multicast group `mac` on the socket's interface, so that a NIC's
/// filter lets its frames (neighbour solicitations for the device's addresses) in.
// Struct sizes fit their C types.
#[allow(clippy::cast_possible_truncation)]
fn join_group(sock: &OwnedFd, index: i32, mac: MacAddr) -> io::Result<()> {
    // SAFETY: packet_mreq is a plain C struct; all-zero is valid.
    let mut mr: libc::packet_mreq = unsafe { std::mem::zeroed() };
    mr.mr_ifindex = index;
    mr.mr_type = libc::PACKET_MR_MULTICAST as u16;
    mr.mr_alen = 6;
    mr.mr_address[..6].copy_from_slice(&mac.0);
    let n = std::mem::size_of::<libc::packet_mreq>() as libc::socklen_t;
    // SAFETY: a valid socket and a packet_mreq of the stated size.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            std::ptr::from_ref(&mr).cast(),
            n,
        )
    };
    if r < 0 {
        Err(last_err("PACKET_ADD_MEMBERSHIP"))
    } else {
        Ok(())
    }
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
    packets: Vec<(IpAddr, u16, Vec<u8>)>,
}

/// The raw-Ethernet transport of one device.
pub(crate) struct Packet {
    sock: OwnedFd,
    iface: Interface,
    /// The device's address (IPv4 or IPv6), which the host does not own.
    ip: IpAddr,
    /// Its link-local IPv6 address from the MAC (GID 0), also answered and used.
    ll6: Ipv6Addr,
    routes: Vec<Route>,
    routes6: Vec<Route6>,
    neigh: HashMap<IpAddr, MacAddr>,
    pending: HashMap<IpAddr, Pending>,
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
            join_group(&sock, iface.index, solicited_node(a).1).map_err(|e| bad(e.to_string()))?;
        }
        Ok(Packet {
            sock,
            routes: read_routes(netdev),
            routes6: read_routes6(netdev),
            iface,
            ip,
            ll6,
            neigh: HashMap::new(),
            pending: HashMap::new(),
            counters,
            capture,
            tos: if config.congestion_control == CongestionControl::Off { 0 } else { rnic_io::ECN_ECT0 },
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
    /// else `dst` itself (on-link; a link-local IPv6 address always is).
    fn next_hop(&self, dst: IpAddr) -> IpAddr {
        match dst {
            IpAddr::V4(d4) => {
                let d = u32::from(d4);
                self.routes.iter().find(|r| d & r.mask == r.net).and_then(|r| r.gateway).map_or(dst, IpAddr::V4)
            }
            _ if crate::engine::is_link_local(dst) => dst,
            IpAddr::V6(d6) => {
                let d = u128::from(d6);
                let matches = |r: &&Route6| r.len == 0 || (d ^ r.net) >> (128 - u32::from(r.len)) == 0;
                self.routes6.iter().find(matches).and_then(|r| r.gateway).map_or(dst, IpAddr::V6)
            }
        }
    }

    /// The address packets to `dst` leave from: the device's own of that family (a
    /// link-local destination: the link-local address), if it has one.
    fn src_for(&self, dst: IpAddr) -> Option<IpAddr> {
        match (dst, self.ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) => Some(self.ip),
            (IpAddr::V6(_), _) if crate::engine::is_link_local(dst) => Some(IpAddr::V6(self.ll6)),
            (IpAddr::V6(_), IpAddr::V6(_)) => Some(self.ip),
            _ => None,
        }
    }

    /// Whether `a` is one of this device's addresses.
    fn is_mine(&self, a: IpAddr) -> bool {
        a == self.ip || a == IpAddr::V6(self.ll6)
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

    /// Appends the Ethernet header of a frame to `mac` and room for the IP (v6 or v4)
    /// and UDP headers ([`finish`](Self::finish) writes them once the length is known).
    fn headers(&self, buf: &mut Vec<u8>, mac: MacAddr, v6: bool) {
        let eth = ethernet::EthernetRepr {
            dst: mac,
            src: self.iface.mac,
            vlan: self.tag(),
            ethertype: if v6 { ethernet::ETHERTYPE_IPV6 } else { ethernet::ETHERTYPE_IPV4 },
        };
        let start = buf.len();
        buf.resize(start + eth.buffer_len() + if v6 { IP6_UDP } else { IP_UDP }, 0);
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
    fn finish(&self, frame: &mut [u8], src: IpAddr, dst: IpAddr, src_port: u16, ident: u16, ce: bool) {
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

    /// Frames a packet whose ICRC is already filled (for `ident`) and queues it.
    fn push_sealed(&mut self, mac: MacAddr, src: IpAddr, w: &Wire) {
        let mut buf = std::mem::take(self.frame_buf());
        self.headers(&mut buf, mac, w.dst.is_ipv6());
        buf.extend_from_slice(&w.data);
        self.queue_frame(buf, src, w.dst, w.src_port, 0, w.ce);
    }

    /// Finishes a frame's headers, captures it and puts it in the current send's slot.
    fn queue_frame(&mut self, mut buf: Vec<u8>, src: IpAddr, dst: IpAddr, src_port: u16, ident: u16, ce: bool) {
        self.finish(&mut buf[VNET_HDR..], src, dst, src_port, ident, ce);
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
    fn frame_packet(&mut self, mac: MacAddr, p: &mut TxPacket) {
        let Some(src) = self.src_for(p.dst) else {
            self.counters.send_err.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let ident = if p.dst.is_ipv4() { self.next_ident() } else { 0 };
        let ctx = IcrcContext { ipv4_ident: ident, ..IcrcContext::new(src, p.dst, p.src_port, ROCEV2_UDP_PORT) };
        let mut buf = std::mem::take(self.frame_buf());
        self.headers(&mut buf, mac, p.dst.is_ipv6());
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

    /// Asks for `ip`'s MAC: an ARP request, or for IPv6 a neighbour solicitation to its
    /// solicited-node group (RFC 4861 7.2.2).
    fn ask(&mut self, ip: IpAddr) {
        match ip {
            IpAddr::V4(t) => {
                let IpAddr::V4(me) = self.ip else { return };
                let frame = arp_frame(self.vlan, 1, self.iface.mac, me, MacAddr([0xff; 6]), MacAddr([0; 6]), t);
                self.push_control(&frame);
                self.counters.arp_requests_sent.fetch_add(1, Ordering::Relaxed);
            }
            IpAddr::V6(t) => {
                let Some(IpAddr::V6(src)) = self.src_for(ip) else { return };
                let (group, gmac) = solicited_node(t);
                let frame = self.nd_frame(ND_SOLICIT, src, group, gmac, t, false);
                self.push_control(&frame);
                self.counters.nd_solicits_sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// An Ethernet frame holding a neighbour solicitation (for `target`, with this
    /// device's MAC as its source link-layer option) or advertisement (of `target`, with
    /// its target link-layer option; `solicited`: an answer), hop limit 255 as RFC 4861
    /// requires.
    fn nd_frame(
        &self,
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
            data: self.iface.mac.0.to_vec(),
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
            src: self.iface.mac,
            vlan: self.tag(),
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

    /// Learns that `ip` is at `mac`; sends what waited for it.
    fn learn(&mut self, ip: IpAddr, mac: MacAddr) {
        if mac.0[0] & 1 != 0 || mac.0 == [0; 6] {
            return;
        }
        // A bounded table: frames from ever new sources (a peer spraying addresses) do not
        // grow it past NEIGH_MAX; what this device asked for is always learned.
        if self.neigh.len() >= NEIGH_MAX && !self.neigh.contains_key(&ip) && !self.pending.contains_key(&ip) {
            return;
        }
        self.neigh.insert(ip, mac);
        if let Some(p) = self.pending.remove(&ip) {
            for (dst, sport, data) in p.packets {
                let mut tx = TxPacket { dst, src_port: sport, data, payload: None };
                self.frame_packet(mac, &mut tx);
            }
        }
    }

    /// Sends `p` (its ICRC not filled): framed at once when its next hop is known, held
    /// (and asked for) when not.
    fn route(&mut self, now: Time, p: &mut TxPacket) {
        if self.src_for(p.dst).is_none() {
            // No address of that family to send from (an IPv4 device and a global IPv6
            // destination, or the other way round).
            self.counters.send_err.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let hop = self.next_hop(p.dst);
        if let Some(&mac) = self.neigh.get(&hop) {
            self.frame_packet(mac, p);
            return;
        }
        let first = !self.pending.contains_key(&hop);
        let q = self.pending.entry(hop).or_insert(Pending { since: now, asked: now, packets: Vec::new() });
        if q.packets.len() >= RESOLVE_QUEUE {
            self.counters.tx_neigh_unresolved.fetch_add(1, Ordering::Relaxed);
        } else {
            p.make_contiguous();
            q.packets.push((p.dst, p.src_port, std::mem::take(&mut p.data)));
        }
        if first {
            self.ask(hop);
        }
    }

    /// Frames a packet the fault chain let through (its ICRC filled for IPv4 ID 0).
    fn put_sealed(&mut self, now: Time, w: Wire) {
        // The fault chain sealed it for `local_ip(dst)`: with no address of the
        // destination's family that is not a source this device can send from.
        if self.src_for(w.dst) != Some(w.src) {
            self.counters.send_err.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let hop = self.next_hop(w.dst);
        match self.neigh.get(&hop).copied() {
            Some(mac) => self.push_sealed(mac, w.src, &w),
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
        use pnet_packet::arp::{ArpHardwareTypes, ArpOperations, ArpPacket};
        use pnet_packet::ethernet::EtherTypes;
        // Ethernet and IPv4: htype 1, ptype 0x0800, hlen 6, plen 4.
        let Some(a) = ArpPacket::new(body).filter(|a| {
            a.get_hardware_type() == ArpHardwareTypes::Ethernet
                && a.get_protocol_type() == EtherTypes::Ipv4
                && (a.get_hw_addr_len(), a.get_proto_addr_len()) == (6, 4)
        }) else {
            self.counters.rx_not_roce.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let request = a.get_operation() == ArpOperations::Request;
        let sha = MacAddr(a.get_sender_hw_addr().octets());
        let (spa, tpa) = (a.get_sender_proto_addr(), a.get_target_proto_addr());
        let IpAddr::V4(me) = self.ip else { return };
        // RFC 826: update a known sender; add it when the request is for us.
        let sender = IpAddr::V4(spa);
        if tpa == me || self.neigh.contains_key(&sender) || self.pending.contains_key(&sender) {
            self.learn(sender, sha);
        }
        if request && tpa == me {
            let reply = arp_frame(self.vlan, 2, self.iface.mac, me, sha, sha, spa);
            self.push_control(&reply);
            self.counters.arp_replies_sent.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Handles an ICMPv6 packet (`ip6`: its IPv6 header and what follows): answers a
    /// neighbour solicitation for one of this device's addresses with an advertisement
    /// and learns its sender; learns the target of an advertisement. Checked as RFC 4861
    /// 7.1 says: hop limit 255, code 0, a valid checksum, a unicast target.
    fn nd(&mut self, ip6: &[u8], eth_src: MacAddr) {
        if ip6.len() < 40 {
            self.counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let plen = usize::from(u16::from_be_bytes([ip6[4], ip6[5]]));
        let src = Ipv6Addr::from(<[u8; 16]>::try_from(&ip6[8..24]).unwrap_or([0; 16]));
        let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&ip6[24..40]).unwrap_or([0; 16]));
        let Some(msg) = ip6.get(40..40 + plen).filter(|m| !m.is_empty()) else {
            self.counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let kind = msg[0];
        if kind != ND_SOLICIT && kind != ND_ADVERT {
            // Other ICMPv6 (router advertisements, MLD, ...): not this device's business.
            self.counters.rx_not_roce.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let sum_ok = pnet_packet::icmpv6::Icmpv6Packet::new(msg)
            .is_some_and(|p| pnet_packet::icmpv6::checksum(&p, &src, &dst) == u16::from_be_bytes([msg[2], msg[3]]));
        if msg.len() < 24 || ip6[7] != 255 || msg[1] != 0 || !sum_ok {
            self.counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
            return;
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
            if !self.is_mine(IpAddr::V6(target)) {
                return;
            }
            // Duplicate address detection (unspecified source) is answered to all nodes.
            let (to, to_mac) = if src.is_unspecified() {
                (Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1), MacAddr([0x33, 0x33, 0, 0, 0, 1]))
            } else {
                // RFC 4861 7.2.3: a solicitation with a source link-layer option creates
                // or updates the sender's entry.
                if lladdr.is_some() {
                    self.learn(IpAddr::V6(src), mac);
                }
                (src, mac)
            };
            let frame = self.nd_frame(ND_ADVERT, target, to, to_mac, target, !src.is_unspecified());
            self.push_control(&frame);
            self.counters.nd_adverts_sent.fetch_add(1, Ordering::Relaxed);
        } else if !target.is_multicast() {
            let t = IpAddr::V6(target);
            // RFC 4861 7.2.5: an advertisement for an address without an entry is dropped.
            if self.neigh.contains_key(&t) || self.pending.contains_key(&t) {
                self.learn(t, mac);
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
        let v6 = f.get(at).is_some_and(|b| b >> 4 == 6);
        let ihl = if v6 { 40 } else { f.get(at).map_or(0, |b| usize::from(b & 0x0f) * 4) };
        let head = at + ihl + 8;
        if ihl < 20 || f.len() <= head || (!v6 && f[at] >> 4 != 4) {
            self.counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
            return 0;
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
        // IPv6 multicast (33:33:...): a neighbour solicitation to a solicited-node group.
        let multicast6 = dst.0[0] == 0x33 && dst.0[1] == 0x33;
        if dst != self.iface.mac && !broadcast && !multicast6 {
            self.counters.rx_not_for_us.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        if et == ETH_P_ARP {
            if let Some(c) = &self.capture {
                c.record_frame(f);
            }
            self.arp(&f[at..]);
            return 0;
        }
        if et == ethernet::ETHERTYPE_IPV6 && f.len() >= at + 40 && f[at + 6] == PROTO_ICMPV6 {
            if let Some(c) = &self.capture {
                c.record_frame(f);
            }
            self.nd(&f[at..], src);
            return 0;
        }
        if broadcast || multicast6 {
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
        if !self.is_mine(dip) {
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
        engine.handle_packet_ecn(now, sip, p.roce_bytes, ce);
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
        self.src_for(dst).unwrap_or(self.ip)
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
