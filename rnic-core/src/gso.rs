//! UDP GSO / GRO for the UDP transport: which packets can share one send, and how a
//! receiver checks the ICRC of a datagram whose IPv4 ID it cannot see.
//!
//! The ICRC covers the IPv4 identification field (IBA A17.3.3: only TOS, TTL and the
//! header checksum are masked). An unconnected socket with `IP_PMTUDISC_DO` sends ID 0,
//! but one UDP GSO send is cut by the kernel into segments with IDs 0, 1, 2, ... (see
//! `shared/notes/icrc-over-udp-sockets.md`). So the sender fills segment *i*'s ICRC with
//! ID *i* ([`rnic_io::run_end`] says which packets go together), and the receiver, which gets no IP
//! header from a UDP socket, accepts a packet whose ICRC matches ID 0, or the packet's
//! index inside its GRO batch, or any ID below [`ID_WINDOW`] ([`IdVerifier`]).
//!
//! Strength: a packet is accepted if its ICRC equals one of `ID_WINDOW` (64) candidate
//! values. A corrupted packet's ICRC is, for CRC-32, a uniformly random 32-bit value
//! against them, so it passes with probability 64 * 2^-32 = 2^-26: the check keeps 26 of
//! its 32 bits (6 bits lost) for datagrams that do not match ID 0 or their batch index,
//! and 31 bits for those that match ID 0 or the index (two candidates).
//! IPv6 has no ID, so IPv6 packets are checked with the full 32 bits. A packet that
//! matches no ID here is left to the device's `RNIC_IPV4_ID` policy
//! ([`crate::rx_icrc`]: solve for any ID, 16 bits, or drop).

use rnic_wire::icrc::{self, IcrcContext};
use std::net::IpAddr;

/// IDs below this are tried: the most segments our sender puts in one GSO send.
pub const ID_WINDOW: u16 = 64;
const _: () = assert!(ID_WINDOW as usize == rnic_io::MAX_GSO_SEGMENTS);

/// Which IPv4 ID made a received packet's ICRC match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdMatch {
    /// ID 0: a plain send (or the first segment of a GSO send).
    Zero,
    /// The packet's index inside the GRO batch it arrived in (segment *i* of one send).
    Index(u16),
    /// Another ID below [`ID_WINDOW`] (a GSO segment delivered without its batch, e.g.
    /// when the receiving kernel split the batch or GRO is off).
    Window(u16),
}

impl IdMatch {
    /// The ID.
    pub fn ident(self) -> u16 {
        match self {
            IdMatch::Zero => 0,
            IdMatch::Index(i) | IdMatch::Window(i) => i,
        }
    }
}

/// Checks ICRCs with unknown small IPv4 IDs, computing the packet's CRC once.
///
/// The CRC is affine: for two messages of equal length, `crc(a) ^ crc(b)` depends only on
/// `a ^ b`. Two pseudo-headers that differ only in the ID differ only in those 16 bits, so
/// `icrc(id) = icrc(0) ^ g(id)` where `g` is linear in the bits of `id` and depends on
/// nothing but the packet's length. `g` of each single bit is computed once per length
/// (on a zero packet) and cached; every candidate ID is then a few XORs.
#[derive(Debug, Default)]
pub struct IdVerifier {
    // Direct-mapped by length: (length, g(1 << k) for k in 0..16).
    cache: Vec<(usize, [u32; 16])>,
    // Pseudo-header CRC states for ID 0.
    icrc: icrc::IcrcCache,
}

const CACHE_SLOTS: usize = 64;

impl IdVerifier {
    /// A verifier with an empty cache.
    pub fn new() -> IdVerifier {
        IdVerifier { cache: vec![(0, [0; 16]); CACHE_SLOTS], icrc: icrc::IcrcCache::new() }
    }

    /// Verifies `pkt` (BTH..ICRC) received from `ctx.src` by `ctx.dst`, the `index`-th
    /// datagram of its GRO batch (0 if it came alone). `None`: no candidate ID matches.
    pub fn verify(&mut self, ctx: &IcrcContext, pkt: &[u8], index: usize) -> Option<IdMatch> {
        let body = pkt.len().checked_sub(rnic_wire::ICRC_LEN)?;
        let received = icrc::received(pkt)?;
        let with_id;
        let ctx0 = if ctx.ipv4_ident == 0 {
            ctx
        } else {
            with_id = IcrcContext { ipv4_ident: 0, ..*ctx };
            &with_id
        };
        // The CRC of the packet for ID 0, by the fold (`icrc_fold::body_crc`).
        let f0 = crate::icrc_fold::body_crc(self.icrc.prefix_state(ctx0, pkt.len()).ok()?, &pkt[..body]).ok()?;
        if f0 == received {
            return Some(IdMatch::Zero);
        }
        if !matches!((ctx.src, ctx.dst), (IpAddr::V4(_), IpAddr::V4(_))) {
            return None; // IPv6: nothing to guess, the full 32-bit check failed.
        }
        let want = f0 ^ received;
        let g = self.basis(ctx0, body);
        // g(id): the XOR of g(1 << k) over the set bits of id (borrowed, not copied: this
        // runs for every datagram after the first of a GRO batch).
        let g_of = |id: u16| {
            let (mut bits, mut acc) = (id, 0u32);
            while bits != 0 {
                acc ^= g[bits.trailing_zeros() as usize];
                bits &= bits - 1;
            }
            acc
        };
        if let Ok(i) = u16::try_from(index) {
            if i != 0 && i < ID_WINDOW && g_of(i) == want {
                return Some(IdMatch::Index(i));
            }
        }
        (1..ID_WINDOW).find(|&id| g_of(id) == want).map(IdMatch::Window)
    }

    /// `g(1 << k)` for a packet body of `body` bytes (BTH..ICRC exclusive).
    fn basis(&mut self, ctx0: &IcrcContext, body: usize) -> &[u32; 16] {
        let slot = body % CACHE_SLOTS;
        if self.cache[slot].0 == body && body != 0 {
            return &self.cache[slot].1;
        }
        let zero = vec![0u8; body];
        let f0 = ctx0.compute(&zero).unwrap_or(0);
        let mut g = [0u32; 16];
        for (k, gk) in g.iter_mut().enumerate() {
            let c = IcrcContext { ipv4_ident: 1 << k, ..*ctx0 };
            *gk = c.compute(&zero).unwrap_or(0) ^ f0;
        }
        self.cache[slot] = (body, g);
        &self.cache[slot].1
    }
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;

    fn ctx() -> IcrcContext {
        IcrcContext::new("127.0.21.1".parse().unwrap(), "127.0.21.2".parse().unwrap(), 4791, 4791)
    }

    fn packet(len: usize, ident: u16, seed: u8) -> Vec<u8> {
        let mut p: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
        p[0] = 0x0a; // RC RDMA WRITE ONLY
        IcrcContext { ipv4_ident: ident, ..ctx() }.fill(&mut p).unwrap();
        p
    }

    #[test]
    fn id_zero_index_and_window_are_recognised() {
        let mut v = IdVerifier::new();
        assert_eq!(v.verify(&ctx(), &packet(4124, 0, 1), 0), Some(IdMatch::Zero));
        assert_eq!(v.verify(&ctx(), &packet(4124, 5, 1), 5), Some(IdMatch::Index(5)));
        assert_eq!(v.verify(&ctx(), &packet(4124, 5, 2), 0), Some(IdMatch::Window(5)));
        assert_eq!(v.verify(&ctx(), &packet(64, 63, 3), 2), Some(IdMatch::Window(63)));
        // An ID outside the window is not accepted.
        assert_eq!(v.verify(&ctx(), &packet(64, 64, 3), 0), None);
        assert_eq!(v.verify(&ctx(), &packet(64, 0x1234, 3), 0), None);
    }

    #[test]
    fn corruption_is_still_caught_with_ids() {
        let mut v = IdVerifier::new();
        for ident in [0u16, 1, 7, 40] {
            let good = packet(1500, ident, 9);
            assert!(v.verify(&ctx(), &good, usize::from(ident)).is_some());
            for pos in [0usize, 12, 700, 1495] {
                for bit in 0..8 {
                    let mut bad = good.clone();
                    bad[pos] ^= 1 << bit;
                    if pos == 4 {
                        continue; // masked byte
                    }
                    assert_eq!(v.verify(&ctx(), &bad, usize::from(ident)), None, "id {ident} pos {pos} bit {bit}");
                }
            }
        }
        // Addresses are covered too.
        let good = packet(200, 3, 1);
        let other = IcrcContext::new("127.0.21.9".parse().unwrap(), "127.0.21.2".parse().unwrap(), 4791, 4791);
        assert_eq!(v.verify(&other, &good, 3), None);
    }

    #[test]
    fn ipv6_has_no_ids_to_guess() {
        let c6 = IcrcContext::new("::1".parse().unwrap(), "::1".parse().unwrap(), 4791, 4791);
        let mut p = vec![0u8; 64];
        p[0] = 0x0a;
        c6.fill(&mut p).unwrap();
        let mut v = IdVerifier::new();
        assert_eq!(v.verify(&c6, &p, 0), Some(IdMatch::Zero));
        p[20] ^= 1;
        assert_eq!(v.verify(&c6, &p, 1), None);
    }
}
