//! The API's plain data: device listing, GIDs, device and port attributes, the endpoint
//! two sides exchange, where a peer may RDMA.

use crate::PathMtu;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// Bytes at the head of every UD receive buffer: the GRH area (`ibv_grh`, 40 bytes). For
/// RoCEv2 over IPv4 its last 20 bytes hold the IPv4 header, over IPv6 the IPv6 header
/// fills it.
pub const GRH_LEN: usize = 40;

/// The Q_Key a UD QP gets unless [`QpBuilder::qkey`](crate::QpBuilder::qkey) says
/// otherwise: the one ibv_ud_pingpong uses.
pub const DEFAULT_QKEY: u32 = 0x1111_1111;

/// What one side of an RC or UC connection tells the other out of band; a UD QP gives the
/// same (its peers need its QPN and GID; the PSN is what ibv_ud_pingpong exchanges too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// QP number.
    pub qpn: u32,
    /// GID (address) of the device.
    pub gid: Gid,
    /// First PSN the QP will send.
    pub psn: u32,
}

/// Where a peer may RDMA: an address and the key that opens it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteMr {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Bytes.
    pub len: u64,
}

pub(crate) fn random_psn() -> u32 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut x = u64::from(t.subsec_nanos()) ^ (u64::from(std::process::id()) << 32) ^ t.as_secs();
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    u32::try_from(x & 0x00FF_FFFF).unwrap_or(0)
}

/// A device this process can open: an emulated rnic device (a name and the local IP
/// address it binds) or, with the cargo feature `hw`, a device libibverbs lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Name (`rnic0`, `rxe0`, `mlx5_0`).
    pub name: String,
    /// Address: the emulated device's; for a hardware device the address of its first
    /// RoCE v2 GID (unspecified, `0.0.0.0`, when its port has none).
    pub ip: IpAddr,
    /// Which backend runs it.
    #[serde(default)]
    pub kind: DeviceKind,
    /// An emulated device on raw Ethernet: the network interface it sends whole frames on
    /// (`RNIC_DEVICES=rnic0=10.77.0.2@veth0`); `None` runs it over a UDP socket.
    #[serde(default)]
    pub netdev: Option<String>,
    /// With `netdev`: the 802.1Q VLAN its frames carry (`name=ip@iface:vid`).
    #[serde(default)]
    pub vlan: Option<u16>,
}

/// Which backend a device runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum DeviceKind {
    /// rnic's emulated HCA (in this process, over UDP).
    #[default]
    Emulated,
    /// A real RDMA device through libibverbs (rxe, mlx5, ...): cargo feature `hw`.
    Hardware,
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceKind::Emulated => "emulated",
            DeviceKind::Hardware => "hardware (libibverbs)",
        })
    }
}

/// A RoCEv2 GID: for IPv4, the IPv4-mapped IPv6 address (`::ffff:a.b.c.d`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Gid(pub [u8; 16]);

impl DeviceInfo {
    /// An emulated device's MAC: a raw Ethernet device's is its interface's (read from
    /// sysfs, which `ip netns exec` mounts for the namespace), a UDP device's the locally
    /// administered one its address gives it (`02:52:a:b:c:d`, as captures show it).
    pub fn mac(&self) -> [u8; 6] {
        self.netdev
            .as_deref()
            .and_then(|n| std::fs::read_to_string(format!("/sys/class/net/{n}/address")).ok())
            .and_then(|text| {
                let b: Vec<u8> = text.trim().split(':').filter_map(|x| u8::from_str_radix(x, 16).ok()).collect();
                <[u8; 6]>::try_from(b.as_slice()).ok()
            })
            .unwrap_or_else(|| rnic_core::capture::mac_for(self.ip).0)
    }

    /// An emulated device's node GUID: the EUI-64 of its MAC, as rxe derives it.
    pub fn node_guid(&self) -> u64 {
        rnic_core::engine::guid_for_mac(self.mac())
    }

    /// GID `index` of an emulated device's port 1, rxe's table: index 0 the link-local
    /// GID of its MAC, index 1 its address's RoCEv2 GID; `None` past the table
    /// ([`Context::gid`](crate::Context::gid) answers the same on an open device).
    pub fn gid(&self, index: u32) -> Option<Gid> {
        match index {
            0 => Some(Gid::from_ip(IpAddr::V6(rnic_core::engine::link_local(self.node_guid())))),
            1 => Some(Gid::from_ip(self.ip)),
            _ => None,
        }
    }
}

impl Gid {
    /// The GID of an address.
    pub fn from_ip(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(a) => Gid(a.to_ipv6_mapped().octets()),
            IpAddr::V6(a) => Gid(a.octets()),
        }
    }

    /// The address a GID stands for (IPv4 for mapped GIDs).
    pub fn to_ip(self) -> IpAddr {
        let a = Ipv6Addr::from(self.0);
        match a.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(a),
        }
    }

    /// 32 hex digits, network order (the form ibv_rc_pingpong exchanges).
    pub fn to_wire_hex(self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses 32 hex digits.
    pub fn from_wire_hex(s: &str) -> Option<Gid> {
        if s.len() != 32 {
            return None;
        }
        let mut g = [0u8; 16];
        for (i, b) in g.iter_mut().enumerate() {
            *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Gid(g))
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// Device attributes (`ibv_device_attr`, the fields rnic has).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID (from the address, EUI-64 style).
    pub node_guid: u64,
    /// Vendor id (0: none).
    pub vendor_id: u32,
    /// Vendor part id (0 on the emulator and on rxe).
    pub vendor_part_id: u32,
    /// Hardware version (0 on the emulator and on rxe).
    pub hw_ver: u32,
    /// Most QPs.
    pub max_qp: u32,
    /// Most outstanding work requests per queue.
    pub max_qp_wr: u32,
    /// Most SGEs per work request.
    pub max_sge: u32,
    /// Most CQs.
    pub max_cq: u32,
    /// Most entries per CQ.
    pub max_cqe: u32,
    /// Most memory regions.
    pub max_mr: u32,
    /// Largest memory region.
    pub max_mr_size: u64,
    /// Page sizes a region may use (a bit per size).
    pub page_size_cap: u64,
    /// Most PDs.
    pub max_pd: u32,
    /// Most outstanding RDMA READ / atomic per QP as responder.
    pub max_qp_rd_atom: u32,
    /// Most outstanding RDMA READ / atomic per QP as requester.
    pub max_qp_init_rd_atom: u32,
    /// Atomic capability: `ATOMIC_HCA` (atomics are atomic with respect to other atomics
    /// on this device; they are CPU atomics on the target memory).
    pub atomic_cap: &'static str,
    /// Most shared receive queues.
    pub max_srq: u32,
    /// Most receive WQEs per SRQ.
    pub max_srq_wr: u32,
    /// Most SGEs per SRQ receive WQE.
    pub max_srq_sge: u32,
    /// Largest inline data.
    pub max_inline_data: u32,
    /// Physical ports.
    pub phys_port_cnt: u8,
}

/// Port attributes (`ibv_port_attr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    /// `PORT_ACTIVE` once the device is open.
    pub state: &'static str,
    /// Largest MTU.
    pub max_mtu: PathMtu,
    /// MTU in use (rnic: the largest, as loopback has no frame limit below 4096).
    pub active_mtu: PathMtu,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// Always Ethernet (RoCE).
    pub link_layer: &'static str,
    /// LID (0 on RoCE).
    pub lid: u16,
}

/// Hard limits of every emulated device.
pub(crate) const MAX_QP_WR: u32 = rnic_core::caps::DeviceCaps::MAX_QP_WR;
pub(crate) const MAX_SGE: u32 = rnic_core::caps::DeviceCaps::MAX_SGE;
pub(crate) const MAX_CQE: u32 = rnic_core::caps::DeviceCaps::MAX_CQE;
pub(crate) const MAX_INLINE: u32 = rnic_core::caps::DeviceCaps::MAX_INLINE;

/// The QPN a UD send to a multicast group names (IBA 10.5.2.1): the datagram goes to every
/// QP attached to the group ([`QueuePair::attach_mcast`](crate::QueuePair::attach_mcast)).
pub const MULTICAST_QPN: u32 = 0xFF_FFFF;
