//! Routes: the interface's IPv4 and IPv6 routes, read from the kernel's tables when the
//! device opens, the next hop they give a destination, and the device's addresses (which
//! one a packet leaves from, which ones are its own).
//!
//! The next hop is the gateway of the longest matching route with one, else the
//! destination itself (on-link; a link-local IPv6 address always is). A missing or
//! unreadable table means no routes: every destination is on-link.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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

/// The interface's routes, longest prefix first.
#[derive(Debug, Clone)]
pub(super) struct Routes {
    v4: Vec<Route>,
    v6: Vec<Route6>,
}

impl Routes {
    /// Reads interface `ifname`'s routes (in the calling thread's network namespace).
    pub(super) fn read(ifname: &str) -> Routes {
        Routes { v4: read_routes(ifname), v6: read_routes6(ifname) }
    }

    /// The next hop towards `dst`: the gateway of the longest matching route with one,
    /// else `dst` itself (on-link; a link-local IPv6 address always is).
    pub(super) fn next_hop(&self, dst: IpAddr) -> IpAddr {
        match dst {
            IpAddr::V4(d4) => {
                let d = u32::from(d4);
                self.v4.iter().find(|r| d & r.mask == r.net).and_then(|r| r.gateway).map_or(dst, IpAddr::V4)
            }
            _ if crate::engine::is_link_local(dst) => dst,
            IpAddr::V6(d6) => {
                let d = u128::from(d6);
                let matches = |r: &&Route6| r.len == 0 || (d ^ r.net) >> (128 - u32::from(r.len)) == 0;
                self.v6.iter().find(matches).and_then(|r| r.gateway).map_or(dst, IpAddr::V6)
            }
        }
    }
}

/// The device's addresses: the one it was given (IPv4 or IPv6, which the host does not
/// own) and the link-local IPv6 address of its MAC (GID 0).
#[derive(Debug, Clone, Copy)]
pub(super) struct Addrs {
    /// The device's address.
    pub(super) ip: IpAddr,
    /// Its link-local IPv6 address, also answered and used.
    pub(super) ll6: Ipv6Addr,
}

impl Addrs {
    /// The address packets to `dst` leave from: the device's own of that family (a
    /// link-local destination: the link-local address), if it has one.
    pub(super) fn src_for(&self, dst: IpAddr) -> Option<IpAddr> {
        match (dst, self.ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) => Some(self.ip),
            (IpAddr::V6(_), _) if crate::engine::is_link_local(dst) => Some(IpAddr::V6(self.ll6)),
            (IpAddr::V6(_), IpAddr::V6(_)) => Some(self.ip),
            _ => None,
        }
    }

    /// Whether `a` is one of this device's addresses.
    pub(super) fn is_mine(&self, a: IpAddr) -> bool {
        a == self.ip || a == IpAddr::V6(self.ll6)
    }
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
