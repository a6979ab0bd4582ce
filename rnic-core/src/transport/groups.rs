//! The UDP transport's multicast groups: one socket per IP multicast group a QP of this
//! process is attached to (`ibv_attach_mcast`), bound to the group's address and port
//! 4791 and joined on the device's interface (`IP_ADD_MEMBERSHIP` on the device's IPv4
//! address, `IPV6_JOIN_GROUP` on the index of the interface holding its IPv6 address).
//!
//! Why a socket per group rather than the device's socket: that one is bound to the
//! device's unicast address (the reuseport group of the processes sharing the device), and
//! Linux gives a multicast datagram only to sockets bound to the group's address or to
//! the wildcard. A wildcard socket would also take unicast datagrams for every other
//! address of the host; one bound to the group takes exactly the group's datagrams.
//! Every socket bound to the group gets its own copy (the kernel's multicast delivery
//! clones a datagram to each matching socket and applies no reuseport selection), so each
//! process sharing a device receives the group's datagrams and hands them to its own
//! attached QPs, as a NIC gives a multicast packet to every attached QP (IBA 10.5).
//! Sending needs nothing here: the device's socket sends to the group's address with
//! `IP_MULTICAST_IF` on the device's interface and `IP_MULTICAST_LOOP` on (set in
//! [`super::udp::bind`]), so local members, other processes of this device included,
//! receive what it sends.
//!
//! The sockets sit in one epoll set whose descriptor is among the transport's wake-up
//! descriptors: the progress thread's list is fixed when the device opens, and joining a
//! group later adds to the set, not to the list.

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};

/// The multicast group sockets of one device's UDP transport.
pub(crate) struct Groups {
    /// Readable while a group socket is.
    epoll: rnic_io::Epoll,
    /// Group, socket and its epoll token.
    socks: Vec<(IpAddr, UdpSocket, u64)>,
    next_token: u64,
    /// The device's address (the interface to join on) and port.
    local: SocketAddr,
    /// Tokens of the sockets found readable.
    ready: Vec<u64>,
}

impl Groups {
    /// No groups yet, for a device bound to `local`.
    pub(crate) fn new(local: SocketAddr) -> io::Result<Groups> {
        Ok(Groups {
            epoll: rnic_io::Epoll::new()?,
            socks: Vec::new(),
            next_token: 0,
            local,
            ready: Vec::with_capacity(64),
        })
    }

    /// The descriptor the progress thread sleeps on.
    pub(crate) fn wake_fd(&self) -> io::Result<OwnedFd> {
        self.epoll.as_fd().try_clone_to_owned()
    }

    /// Whether no group is joined.
    pub(crate) fn is_empty(&self) -> bool {
        self.socks.is_empty()
    }

    /// Joins `group` (a QP of this process attached to it first); joining one already
    /// joined does nothing.
    pub(crate) fn join(&mut self, group: IpAddr) -> io::Result<()> {
        if self.socks.iter().any(|(g, _, _)| *g == group) {
            return Ok(());
        }
        let sock = open(group, self.local)?;
        let token = self.next_token;
        self.epoll.add(sock.as_fd(), token)?;
        self.next_token += 1;
        self.socks.push((group, sock, token));
        Ok(())
    }

    /// Leaves `group` (its last QP of this process detached): closing the socket drops
    /// the membership.
    pub(crate) fn leave(&mut self, group: IpAddr) {
        if let Some(at) = self.socks.iter().position(|(g, _, _)| *g == group) {
            let (_, sock, _) = self.socks.swap_remove(at);
            self.epoll.remove(sock.as_fd());
        }
    }

    /// The group sockets that have datagrams now (one `epoll_wait`, not blocking).
    pub(crate) fn readable(&mut self) -> impl Iterator<Item = (IpAddr, &UdpSocket)> + '_ {
        if self.epoll.ready(&mut self.ready).is_err() {
            self.ready.clear();
        }
        let socks = &self.socks;
        self.ready.iter().filter_map(move |t| socks.iter().find(|(_, _, k)| k == t).map(|(g, s, _)| (*g, s)))
    }
}

/// A socket bound to `group` and the device's port, joined on the device's interface.
fn open(group: IpAddr, local: SocketAddr) -> io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let family_mismatch = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("group {group} is not of the device's address family ({})", local.ip()),
        )
    };
    let domain = if local.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    // Other processes of this device, and other devices of the host, bind it too.
    s.set_reuse_address(true)?;
    rnic_io::set_reuseport(&s)?;
    s.set_nonblocking(true)?;
    let _ = s.set_recv_buffer_size(8 << 20);
    rnic_io::set_recv_tos(&s, local.is_ipv6())?;
    match (group, local.ip()) {
        (IpAddr::V4(g), IpAddr::V4(dev)) => {
            s.bind(&SocketAddr::new(group, local.port()).into())?;
            s.join_multicast_v4(&g, &dev)?;
        }
        (IpAddr::V6(g), IpAddr::V6(dev)) => {
            let index = rnic_io::interface_index_of(IpAddr::V6(dev)).unwrap_or(0);
            s.set_only_v6(true)?;
            // A group of interface- or link-local scope (ff01::/16, ff02::/16, ff12::, ...)
            // names a group only together with its zone (RFC 4007 6): Linux refuses to
            // bind one without the interface (EINVAL, `__ipv6_addr_needs_scope_id`).
            let scope_id = if needs_zone(g) { index } else { 0 };
            s.bind(&SocketAddr::V6(SocketAddrV6::new(g, local.port(), 0, scope_id)).into())?;
            s.join_multicast_v6(&g, index)?;
        }
        _ => return Err(family_mismatch()),
    }
    Ok(s.into())
}

/// Whether an IPv6 group's scope (RFC 4291 2.7: the low 4 bits of its second byte) is
/// interface-local (1) or link-local (2): such a group is bound with its interface.
fn needs_zone(g: Ipv6Addr) -> bool {
    matches!(g.octets()[1] & 0x0f, 1 | 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_joined_group_wakes_the_set_and_names_its_socket() {
        // Port 0 would give the group socket its own port; a fixed high port keeps the
        // sender and the group on one.
        let port = 47_911;
        let local: SocketAddr = SocketAddr::new("127.0.0.1".parse().unwrap(), port);
        let mut g = Groups::new(local).unwrap();
        let group: IpAddr = "239.7.7.7".parse().unwrap();
        g.join(group).unwrap();
        g.join(group).unwrap();
        assert_eq!(g.socks.len(), 1, "joined once");
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.set_multicast_loop_v4(true).unwrap();
        let s2 = socket2::SockRef::from(&tx);
        s2.set_multicast_if_v4(&"127.0.0.1".parse().unwrap()).unwrap();
        tx.send_to(b"x", SocketAddr::new(group, port)).unwrap();
        let wake = g.wake_fd().unwrap();
        assert!(rnic_io::wait_readable(&[wake.as_fd()], Some(std::time::Duration::from_secs(5))).unwrap());
        let got: Vec<IpAddr> = g.readable().map(|(grp, _)| grp).collect();
        assert_eq!(got, [group]);
        g.leave(group);
        assert!(g.is_empty());
        assert!(g.join("ff0e::1".parse().unwrap()).is_err(), "an IPv6 group on an IPv4 device");
    }

    #[test]
    fn link_and_interface_local_groups_need_their_zone() {
        for (g, zone) in
            [("ff02::1", true), ("ff12::65:2", true), ("ff01::9", true), ("ff0e::1", false), ("ff05::2", false)]
        {
            assert_eq!(needs_zone(g.parse().unwrap()), zone, "{g}");
        }
    }
}
