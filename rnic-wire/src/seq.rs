//! 24-bit packet sequence numbers and queue pair numbers.
//!
//! IBA 9.7.1: PSNs are 24 bits and wrap. Whether one PSN is "before" another only makes
//! sense within half the space (2^23), so these types deliberately do not implement
//! `Ord`: compare with [`Psn::distance`] instead. Nothing here panics on any value.

use core::fmt;

const MASK: u32 = 0x00FF_FFFF;

/// A 24-bit packet sequence number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// Largest PSN (2^24 - 1).
    pub const MAX: Psn = Psn(MASK);
    /// Half the PSN space: the window inside which "before" and "after" are defined.
    pub const HALF: u32 = 1 << 23;

    /// A PSN from the low 24 bits of `v` (the high bits are dropped, as on the wire).
    pub const fn new(v: u32) -> Psn {
        Psn(v & MASK)
    }

    /// The PSN as a number in `0..2^24`.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n`, modulo 2^24.
    #[must_use]
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & MASK)
    }

    /// `self - n`, modulo 2^24.
    #[must_use]
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & MASK)
    }

    /// The next PSN.
    #[must_use]
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// Signed distance from `self` to `other`: how many steps forward (positive) or
    /// backward (negative) `other` is, in `-2^23 .. 2^23`.
    ///
    /// IBA 9.7.2 (rxe `psn_compare`, `check_psn`): a responder treats PSNs up to 2^23 behind its expected PSN as
    /// duplicates and those ahead as out of sequence; this is that split.
    pub const fn distance(self, other: Psn) -> i32 {
        let d = other.0.wrapping_sub(self.0) & MASK;
        // Sign-extend the 24-bit difference. `d` < 2^24 so both arms fit in i32.
        if d >= Self::HALF {
            d as i32 - (1 << 24)
        } else {
            d as i32
        }
    }

    /// True if `self` comes strictly before `other` within the half-space window.
    pub const fn is_before(self, other: Psn) -> bool {
        self.distance(other) > 0
    }

    /// True if `self` is `other` or comes after it within the half-space window.
    pub const fn is_at_or_after(self, other: Psn) -> bool {
        other.distance(self) >= 0
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({:#08x})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A 24-bit queue pair number (BTH DestQP, DETH SrcQP).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Qpn(u32);

impl Qpn {
    /// QP1, the general services interface (GSI), target of connection management MADs.
    pub const GSI: Qpn = Qpn(1);
    /// The largest QPN, 0xFFFFFF, which IBA reserves for multicast.
    pub const MULTICAST: Qpn = Qpn(MASK);

    /// A QPN from the low 24 bits of `v`.
    pub const fn new(v: u32) -> Qpn {
        Qpn(v & MASK)
    }

    /// The QPN as a number in `0..2^24`.
    pub const fn value(self) -> u32 {
        self.0
    }
}

impl fmt::Debug for Qpn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Qpn({:#08x})", self.0)
    }
}

impl fmt::Display for Qpn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps_at_24_bits() {
        assert_eq!(Psn::MAX.next(), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), Psn::MAX);
        assert_eq!(Psn::new(0x1_000_005).value(), 5);
        assert_eq!(Psn::new(0xFFFFFE).add(3), Psn::new(1));
    }

    #[test]
    fn distance_is_signed_and_wraps() {
        assert_eq!(Psn::new(0xFFFFFF).distance(Psn::new(0)), 1);
        assert_eq!(Psn::new(0).distance(Psn::new(0xFFFFFF)), -1);
        assert_eq!(Psn::new(10).distance(Psn::new(10)), 0);
        // Exactly half way is "behind": the window is [-2^23, 2^23).
        assert_eq!(Psn::new(0).distance(Psn::new(0x800000)), -(1 << 23));
        assert_eq!(Psn::new(0).distance(Psn::new(0x7FFFFF)), (1 << 23) - 1);
        assert!(Psn::new(0xFFFFF0).is_before(Psn::new(3)));
        assert!(!Psn::new(3).is_before(Psn::new(0xFFFFF0)));
        assert!(Psn::new(3).is_at_or_after(Psn::new(3)));
    }

    proptest! {
        #[test]
        fn add_then_distance_roundtrips(a in any::<u32>(), n in 0u32..(1 << 23)) {
            let p = Psn::new(a);
            prop_assert_eq!(p.distance(p.add(n)), i32::try_from(n).unwrap());
            prop_assert_eq!(p.add(n).sub(n), p);
        }

        #[test]
        fn distance_is_antisymmetric(a in any::<u32>(), b in any::<u32>()) {
            let (a, b) = (Psn::new(a), Psn::new(b));
            let d = a.distance(b);
            prop_assert!((-(1 << 23)..(1 << 23)).contains(&d));
            if d != -(1 << 23) {
                prop_assert_eq!(b.distance(a), -d);
            }
        }
    }
}
