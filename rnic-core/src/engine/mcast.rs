//! Multicast groups: which UD QPs of this engine are attached to which group (IBA 10.5,
//! `ibv_attach_mcast`). A group is named by its IP multicast address, the address a
//! RoCEv2 multicast GID maps to (an IPv4-mapped GID `::ffff:224.x.y.z` is IPv4
//! multicast, a GID `ff..` IPv6 multicast), as rxe names its `rxe_mcg` by the MGID.
//!
//! A datagram to the group with DestQP 0xFFFFFF is given to every QP attached here
//! (IBA 10.5.2.1; rxe `rxe_rcv_mcast_pkt`), each QP checking its Q_Key as for any UD
//! datagram. The table knows nothing of sockets: attaching the first QP of a group and
//! detaching the last say so, and the driver joins or leaves the group on the wire.

use super::EngineError;
use crate::caps::DeviceCaps;
use rnic_wire::Qpn;
use std::collections::HashMap;
use std::net::IpAddr;

/// The groups of one engine and their QPs.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    groups: HashMap<IpAddr, Vec<Qpn>>,
    /// Attachments over all groups.
    attached: usize,
}

impl Groups {
    /// Attaches `qpn` to `group`; `Ok(true)` when the group is new here (the wire must
    /// join it). Attaching twice is no error and changes nothing: verbs says a QP
    /// attached more than once still receives one copy (the kernel's
    /// `ib_uverbs_attach_mcast` returns 0 for a repeat).
    pub(crate) fn attach(&mut self, group: IpAddr, qpn: Qpn) -> Result<bool, EngineError> {
        if !group.is_multicast() {
            return Err(EngineError::BadAttr(format!("{group} is not a multicast address")));
        }
        let new = !self.groups.contains_key(&group);
        if new && self.groups.len() >= DeviceCaps::MAX_MCAST_GRP as usize {
            // rxe_get_mcg: ENOMEM past max_mcast_grp.
            return Err(EngineError::Limit(format!(
                "the device already has its maximum of {} multicast groups",
                DeviceCaps::MAX_MCAST_GRP
            )));
        }
        let qps = self.groups.get(&group).map_or(&[][..], Vec::as_slice);
        if qps.contains(&qpn) {
            return Ok(false);
        }
        if qps.len() >= DeviceCaps::MAX_MCAST_QP_ATTACH as usize {
            // rxe_attach_mcg: ENOMEM past max_mcast_qp_attach.
            return Err(EngineError::Limit(format!(
                "group {group} already has its maximum of {} QPs",
                DeviceCaps::MAX_MCAST_QP_ATTACH
            )));
        }
        if self.attached >= DeviceCaps::MAX_TOTAL_MCAST_QP_ATTACH as usize {
            return Err(EngineError::Limit(format!(
                "the device already has its maximum of {} multicast attachments",
                DeviceCaps::MAX_TOTAL_MCAST_QP_ATTACH
            )));
        }
        self.groups.entry(group).or_default().push(qpn);
        self.attached += 1;
        Ok(new)
    }

    /// Detaches `qpn` from `group`; `Ok(true)` when no QP is left in it (the wire may
    /// leave it). A QP that is not attached is refused, as the kernel's
    /// `ib_uverbs_detach_mcast` refuses it (EINVAL).
    pub(crate) fn detach(&mut self, group: IpAddr, qpn: Qpn) -> Result<bool, EngineError> {
        let not = || EngineError::BadAttr(format!("QP {:#x} is not attached to {group}", qpn.value()));
        let qps = self.groups.get_mut(&group).ok_or_else(not)?;
        let at = qps.iter().position(|&q| q == qpn).ok_or_else(not)?;
        qps.swap_remove(at);
        self.attached -= 1;
        let empty = qps.is_empty();
        if empty {
            self.groups.remove(&group);
        }
        Ok(empty)
    }

    /// Detaches `qpn` from every group (its QP is destroyed); returns the groups left
    /// without a QP.
    pub(crate) fn forget(&mut self, qpn: Qpn) -> Vec<IpAddr> {
        let of: Vec<IpAddr> = self.groups.iter().filter(|(_, q)| q.contains(&qpn)).map(|(g, _)| *g).collect();
        of.into_iter().filter(|&g| self.detach(g, qpn).unwrap_or(false)).collect()
    }

    /// The QPs attached to `group`, copied into `out` (cleared first).
    pub(crate) fn members(&self, group: IpAddr, out: &mut Vec<Qpn>) {
        out.clear();
        if let Some(q) = self.groups.get(&group) {
            out.extend_from_slice(q);
        }
    }

    /// Whether `group` has a QP.
    pub(crate) fn has(&self, group: IpAddr) -> bool {
        self.groups.contains_key(&group)
    }

    /// The groups with at least one QP.
    pub(crate) fn groups(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.groups.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn first_attach_joins_and_last_detach_leaves() {
        let mut t = Groups::default();
        let (a, b) = (Qpn::new(0x11), Qpn::new(0x12));
        assert_eq!(t.attach(g("230.0.0.1"), a), Ok(true));
        assert_eq!(t.attach(g("230.0.0.1"), b), Ok(false));
        // A repeat changes nothing: one copy per QP.
        assert_eq!(t.attach(g("230.0.0.1"), a), Ok(false));
        let mut m = Vec::new();
        t.members(g("230.0.0.1"), &mut m);
        assert_eq!(m, vec![a, b]);
        assert_eq!(t.detach(g("230.0.0.1"), a), Ok(false));
        assert!(t.detach(g("230.0.0.1"), a).is_err(), "detached twice");
        assert_eq!(t.detach(g("230.0.0.1"), b), Ok(true));
        t.members(g("230.0.0.1"), &mut m);
        assert!(m.is_empty());
        assert_eq!(t.groups().count(), 0);
    }

    #[test]
    fn unicast_is_refused_and_limits_hold() {
        let mut t = Groups::default();
        assert!(matches!(t.attach(g("10.0.0.1"), Qpn::new(0x11)), Err(EngineError::BadAttr(_))));
        assert!(matches!(t.attach(g("fd00::1"), Qpn::new(0x11)), Err(EngineError::BadAttr(_))));
        for i in 0..DeviceCaps::MAX_MCAST_QP_ATTACH {
            assert!(t.attach(g("ff0e::1"), Qpn::new(0x11 + i)).is_ok());
        }
        let over = Qpn::new(0x11 + DeviceCaps::MAX_MCAST_QP_ATTACH);
        assert!(matches!(t.attach(g("ff0e::1"), over), Err(EngineError::Limit(_))));
        for i in 1..DeviceCaps::MAX_MCAST_GRP {
            let grp = IpAddr::V4(std::net::Ipv4Addr::from(0xE600_0000 + i));
            assert_eq!(t.attach(grp, over), Ok(true));
        }
        assert!(matches!(t.attach(g("239.1.1.1"), over), Err(EngineError::Limit(_))));
    }

    #[test]
    fn forget_reports_the_groups_left_empty() {
        let mut t = Groups::default();
        let (a, b) = (Qpn::new(0x11), Qpn::new(0x12));
        t.attach(g("230.0.0.1"), a).unwrap();
        t.attach(g("230.0.0.2"), a).unwrap();
        t.attach(g("230.0.0.2"), b).unwrap();
        assert_eq!(t.forget(a), vec![g("230.0.0.1")]);
        assert_eq!(t.groups().collect::<Vec<_>>(), vec![g("230.0.0.2")]);
    }
}
