//! Which devices this process may open: the emulated ones (`RNIC_DEVICES` or the two
//! defaults) and, with the cargo feature `hw`, those libibverbs lists. Uses the value
//! types and the hardware backend; no handle (a [`Context`](crate::Context) looks its
//! name up here).

use crate::types::{DeviceInfo, DeviceKind};
use crate::{Error, Result};
use std::net::{IpAddr, Ipv4Addr};

/// The devices this process may open: the emulated ones ([`emulated_devices`]) and, with
/// the cargo feature `hw`, every device libibverbs lists (none where rdma-core is not
/// installed). An emulated device hides a hardware device of the same name.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    #[allow(unused_mut)]
    let mut all = emulated_devices()?;
    #[cfg(feature = "hw")]
    for d in hw_devices()? {
        if !all.iter().any(|e| e.name == d.name) {
            all.push(d);
        }
    }
    Ok(all)
}

/// The emulated devices: `RNIC_DEVICES` (`rnic0=127.0.0.1,rnic1=127.0.0.2`) or, when it
/// is unset, `rnic0` on 127.0.0.1 and `rnic1` on 127.0.0.2. A value that does not parse is
/// an error naming the bad entry (never a silent fallback to the defaults).
pub fn emulated_devices() -> Result<Vec<DeviceInfo>> {
    match std::env::var("RNIC_DEVICES") {
        Ok(spec) => parse_devices(&spec),
        Err(std::env::VarError::NotPresent) => Ok(vec![
            DeviceInfo {
                name: "rnic0".into(),
                ip: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
                kind: DeviceKind::Emulated,
                netdev: None,
                vlan: None,
            },
            DeviceInfo {
                name: "rnic1".into(),
                ip: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
                kind: DeviceKind::Emulated,
                netdev: None,
                vlan: None,
            },
        ]),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(Error::BadConfig { var: "RNIC_DEVICES", why: "the value is not UTF-8".into() })
        }
    }
}

/// Parses `name=ip,name=ip@iface,...` strictly: every entry `name=address` or
/// `name=address@interface` (raw Ethernet on that interface), names non-empty and
/// distinct, addresses plain IPv4 or IPv6 (a port is the device's business, not this
/// list's).
pub fn parse_devices(spec: &str) -> Result<Vec<DeviceInfo>> {
    let bad = |why: String| Error::BadConfig { var: "RNIC_DEVICES", why };
    let mut out: Vec<DeviceInfo> = Vec::new();
    for entry in spec.split(',') {
        let entry = entry.trim();
        let Some((name, ip)) = entry.split_once('=') else {
            return Err(bad(format!("entry {entry:?} is not name=address")));
        };
        let (name, ip) = (name.trim(), ip.trim());
        let (ip, netdev, vlan) = match ip.split_once('@') {
            Some((ip, dev)) => {
                let (dev, vlan) = match dev.trim().split_once(':') {
                    Some((d, v)) => {
                        let vid = v
                            .parse::<u16>()
                            .ok()
                            .filter(|v| (1..=4094).contains(v))
                            .ok_or_else(|| bad(format!("entry {entry:?}: VLAN {v:?} is not in 1..=4094")))?;
                        (d, Some(vid))
                    }
                    None => (dev.trim(), None),
                };
                if dev.is_empty() || dev.contains(['/', ' ']) || dev.len() > 15 {
                    return Err(bad(format!("entry {entry:?}: {dev:?} is not a network interface name")));
                }
                (ip.trim(), Some(dev.to_string()), vlan)
            }
            None => (ip, None, None),
        };
        if name.is_empty() {
            return Err(bad(format!("entry {entry:?} has an empty device name")));
        }
        let ip: IpAddr = ip.parse().map_err(|_| {
            if ip.contains(':')
                && ip.rsplit_once(':').is_some_and(|(h, p)| h.parse::<IpAddr>().is_ok() && p.parse::<u16>().is_ok())
            {
                bad(format!("entry {entry:?}: {ip:?} has a port; give the address alone (devices use UDP 4791)"))
            } else {
                bad(format!("entry {entry:?}: {ip:?} is not an IP address"))
            }
        })?;
        if out.iter().any(|d| d.name == name) {
            return Err(bad(format!("device {name:?} is named twice")));
        }
        out.push(DeviceInfo { name: name.to_string(), ip, kind: DeviceKind::Emulated, netdev, vlan });
    }
    Ok(out)
}

/// The devices libibverbs lists, with the address of each one's first RoCE v2 GID
/// (opening each to read its GID table). Where libibverbs cannot be loaded there are
/// none: the feature is built in, the machine has no rdma-core.
#[cfg(feature = "hw")]
pub(crate) fn hw_devices() -> Result<Vec<DeviceInfo>> {
    let list = match crate::hw::devices() {
        Ok(l) => l,
        Err(crate::hw::HwError::Load(_)) => return Ok(Vec::new()),
        Err(source) => return Err(Error::Hw { op: "list hardware devices", source }),
    };
    Ok(list
        .into_iter()
        .map(|d| {
            let ip = crate::hw::HwContext::open(&d.name)
                .ok()
                .and_then(|c| roce_ip(&c))
                .unwrap_or(IpAddr::from([0, 0, 0, 0]));
            DeviceInfo { name: d.name, ip, kind: DeviceKind::Hardware, netdev: None, vlan: None }
        })
        .collect())
}

/// The address of the port's first RoCE v2 GID that maps one (IPv4 first, as `-g 1`
/// picks on rxe).
#[cfg(feature = "hw")]
pub(crate) fn roce_ip(c: &crate::hw::HwContext) -> Option<IpAddr> {
    let gids = c.gids(1, 16).ok()?;
    let ips: Vec<IpAddr> = gids
        .iter()
        .filter(|g| g.gid_type.is_none_or(|t| t == rnic_verbs_sys::IBV_GID_TYPE_ROCE_V2))
        .map(|g| g.ip())
        .filter(|ip| !ip.is_unspecified() && !rnic_core::engine::is_link_local(*ip))
        .collect();
    ips.iter().find(|ip| ip.is_ipv4()).or_else(|| ips.first()).copied()
}
