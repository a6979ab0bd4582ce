//! The receive-side ICRC check of the UDP transport, under the device's IPv4 ID policy.
//!
//! A UDP socket hands over BTH..ICRC but not the IP header, and the ICRC covers the
//! IPv4 Identification field. Another rnic sends ID 0 (unconnected socket with
//! `IP_PMTUDISC_DO`), so that is checked first, with all 32 ICRC bits. Linux rxe takes
//! its IDs from the kernel's generator, so a packet of rxe's fails that check; under
//! [`Ipv4IdPolicy::SolveUnknown`] (the default) the one ID that makes the ICRC match is
//! solved for, and the packet is accepted and counted in `icrc_ipv4_id_solved`. Such a
//! packet was checked by 16 bits: a corrupted one passes with probability 2^-16.
//! `RNIC_IPV4_ID=strict` (or [`crate::device::DeviceConfig::ipv4_id`]) turns that off.

use crate::counters::Counters;
use rnic_wire::icrc::{IcrcContext, IcrcMatch, Ipv4IdPolicy};
use std::sync::atomic::Ordering;

/// The environment variable that sets the policy: `strict` or `solve`.
pub const ENV: &str = "RNIC_IPV4_ID";

/// Checks a received BTH..ICRC buffer; returns the IPv4 ID it was accepted with (for
/// the capture), or `None` when it must be dropped. Counts `icrc_err` for a drop
/// (IBA C9-3: a bad ICRC is dropped silently) and `icrc_ipv4_id_solved` for a packet
/// accepted only through the solve.
pub fn check(ctx: &IcrcContext, roce: &[u8], policy: Ipv4IdPolicy, counters: &Counters) -> Option<u16> {
    match ctx.verify_with(roce, policy) {
        Ok(IcrcMatch::Exact) => Some(ctx.ipv4_ident),
        Ok(IcrcMatch::SolvedIpv4Id(id)) => {
            counters.icrc_ipv4_id_solved.fetch_add(1, Ordering::Relaxed);
            Some(id)
        }
        Err(_) => {
            counters.icrc_err.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// The policy `RNIC_IPV4_ID` asks for: `Ok(None)` when unset, `Err` naming a bad value.
pub fn policy_from_env() -> Result<Option<Ipv4IdPolicy>, String> {
    match std::env::var(ENV) {
        Err(_) => Ok(None),
        Ok(v) => Ipv4IdPolicy::from_name(&v)
            .map(Some)
            .ok_or_else(|| format!("{ENV}={v:?}: expected \"strict\" (ID 0 only) or \"solve\" (ID 0, else solve)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> IcrcContext {
        IcrcContext::new("10.77.0.11".parse().unwrap(), "10.77.0.1".parse().unwrap(), 49441, 4791)
    }

    fn packet_with_id(id: u16) -> Vec<u8> {
        // An RC ACK (opcode 0x11): BTH, AETH, ICRC.
        let mut p = vec![0x11, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0xb4, 0x53, 0x2e, 0x1f, 0, 0, 1, 0, 0, 0, 0];
        IcrcContext { ipv4_ident: id, ..ctx() }.fill(&mut p).unwrap();
        p
    }

    #[test]
    fn counts_what_it_accepts_and_drops() {
        let c = Counters::default();
        assert_eq!(check(&ctx(), &packet_with_id(0), Ipv4IdPolicy::Strict, &c), Some(0));
        assert_eq!(check(&ctx(), &packet_with_id(0x4d2), Ipv4IdPolicy::Strict, &c), None);
        assert_eq!(c.get("icrc_err"), Some(1));
        assert_eq!(check(&ctx(), &packet_with_id(0x4d2), Ipv4IdPolicy::SolveUnknown, &c), Some(0x4d2));
        assert_eq!(c.get("icrc_ipv4_id_solved"), Some(1));
        let mut bad = packet_with_id(0x4d2);
        bad[13] ^= 0x40;
        assert_eq!(check(&ctx(), &bad, Ipv4IdPolicy::SolveUnknown, &c), None);
        assert_eq!((c.get("icrc_err"), c.get("icrc_ipv4_id_solved")), (Some(2), Some(1)));
    }
}
