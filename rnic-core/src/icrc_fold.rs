//! The CRC of a short packet without a chain of dependent steps, for the ICRCs of a train
//! ([`TxPacket::train`](crate::engine::TxPacket::train): packets of one length, one flow
//! and one destination, back to back in one buffer, sent as one UDP GSO message whose
//! segment *j* the kernel gives IPv4 ID *j*) and for the receiver's check of each
//! datagram ([`IdVerifier`](crate::gso::IdVerifier)).
//!
//! One pseudo-header state serves the whole train: segment *j*'s is the state for ID 0
//! XOR [`ipv4_ident_delta`](rnic_wire::icrc::ipv4_ident_delta)`(j)` (the CRC is affine).
//! Each packet's CRC is then taken without a chain of dependent steps: every 16-byte
//! block is carried to the end of the packet by its own carry-less multiplication (keys
//! x^(128 k ± 32) mod P for a block k blocks before the last, as Gopal et al., "Fast CRC
//! Computation for Generic Polynomials Using PCLMULQDQ", Intel 2009, fold by one block),
//! the products are XORed and one reduction (128 to 64 bits, then Barrett's) finishes.
//! crc32fast folds a short input block after block, each multiplication waiting for the
//! last: about 17 ns for an 80-byte packet where this takes 13, and the packets of a
//! train do not wait for each other. A packet shorter than 16 or longer than 256 bytes
//! before its ICRC, or a CPU without PCLMULQDQ and SSE4.1, takes rnic-wire's ICRC
//! ([`continue_from`](rnic_wire::icrc::continue_from)), which the tests hold the fold to.
//!
//! States are crc32fast's: the CRC-32 (IEEE, reflected) of the bytes so far, final XOR
//! applied; the shift register is its complement.

use rnic_wire::bth::ICRC_MASKED_BYTE;
use rnic_wire::ICRC_LEN;

/// Segments of one GSO send, at most.
const MAX_SEGMENTS: usize = rnic_io::MAX_GSO_SEGMENTS;

/// Pseudo-header state deltas of IPv4 IDs 0..64.
#[allow(clippy::cast_possible_truncation)] // j < 64 (a const block: no `try_from`)
static ID_DELTA: [u32; MAX_SEGMENTS] = {
    let mut t = [0u32; MAX_SEGMENTS];
    let mut j = 0;
    while j < MAX_SEGMENTS {
        t[j] = rnic_wire::icrc::ipv4_ident_delta(j as u16);
        j += 1;
    }
    t
};

/// Longest packet body (BTH..ICRC exclusive) the fold takes: 16 blocks.
const MAX_BLOCKS: usize = 16;

/// Fills the ICRC of each `seg`-byte packet of `data` (a whole number of them, at most
/// 64): `prefix` is the pseudo-header state of the train's flow and length with IPv4 ID
/// 0; with `ids`, packet *j* is a GSO segment with ID *j*, else every packet goes alone
/// with ID 0. Fails (leaving the rest unfilled) for packets shorter than a BTH and ICRC.
pub(crate) fn fill_train(prefix: u32, data: &mut [u8], seg: usize, ids: bool) -> Result<(), rnic_wire::Error> {
    let body = seg.saturating_sub(ICRC_LEN);
    for (j, p) in data.chunks_exact_mut(seg.max(1)).enumerate() {
        let delta = if ids { ID_DELTA.get(j).copied().unwrap_or(0) } else { 0 };
        let crc = body_crc(prefix ^ delta, &p[..body])?;
        p[body..].copy_from_slice(&crc.to_le_bytes());
    }
    Ok(())
}

/// The ICRC from pseudo-header state `state` over a packet body (BTH first, its masked
/// byte taken as all ones): the fold where it applies, else rnic-wire's
/// [`continue_from`](rnic_wire::icrc::continue_from), which also refuses a body shorter
/// than a BTH.
#[inline]
pub(crate) fn body_crc(state: u32, body: &[u8]) -> Result<u32, rnic_wire::Error> {
    match fast(state, body) {
        Some(crc) => Ok(crc),
        None => rnic_wire::icrc::continue_from(state, body),
    }
}

/// [`body_crc`] by the fold, where the CPU, the length and the compiler allow (the
/// intrinsics are callable without `unsafe` inside a `target_feature` function from Rust
/// 1.87; the workspace builds from 1.85).
#[rustversion::since(1.87)]
#[inline]
fn fast(state: u32, body: &[u8]) -> Option<u32> {
    #[cfg(target_arch = "x86_64")]
    {
        if (16..=16 * MAX_BLOCKS).contains(&body.len()) && x86::available() {
            // SAFETY: the CPU has the features (checked above) and the length is in range.
            return Some(unsafe { x86::body_crc(state, body) });
        }
    }
    let _ = (state, body);
    None
}

/// Before Rust 1.87 the fold is not compiled.
#[rustversion::before(1.87)]
#[inline]
fn fast(_state: u32, _body: &[u8]) -> Option<u32> {
    None
}

#[rustversion::since(1.87)]
#[cfg(target_arch = "x86_64")]
#[allow(clippy::incompatible_msrv)]
// compiled from 1.87 only (`rustversion`)
// Casts: a remainder below 2^32 and block counts below 17 in const fns (no `try_from`),
// byte lanes below 16 for the byte intrinsics.
#[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
mod x86 {
    use super::{ICRC_MASKED_BYTE, MAX_BLOCKS};
    use std::arch::x86_64::{
        __m128i, _mm_add_epi8, _mm_and_si128, _mm_clmulepi64_si128, _mm_cmpeq_epi8, _mm_cvtsi32_si128,
        _mm_extract_epi32, _mm_loadu_si128, _mm_or_si128, _mm_set1_epi8, _mm_set_epi32, _mm_set_epi64x, _mm_setr_epi8,
        _mm_shuffle_epi8, _mm_srli_si128, _mm_xor_si128,
    };

    /// The CRC-32 polynomial, normal bit order, with its x^32 term.
    const P: u64 = 0x1_04C1_1DB7;

    /// x^e mod P, normal bit order.
    const fn xpow(e: u32) -> u32 {
        let mut r: u64 = 1;
        let mut i = 0;
        while i < e {
            r <<= 1;
            if r & (1 << 32) != 0 {
                r ^= P;
            }
            i += 1;
        }
        r as u32
    }

    /// x^e mod P as a reflected 33-bit multiplier (the form the fold's products need).
    const fn key(e: u32) -> i64 {
        ((xpow(e).reverse_bits() as u64) << 1) as i64
    }

    /// Per distance in blocks k (1..16): the keys that carry a block 128 k bits on, for its
    /// low and high 64 bits (x^(128k+32), x^(128k-32)).
    static FOLD: [(i64, i64); MAX_BLOCKS] = {
        let mut t = [(0i64, 0i64); MAX_BLOCKS];
        let mut k = 1;
        while k < MAX_BLOCKS {
            let d = 128 * k as u32;
            t[k] = (key(d + 32), key(d - 32));
            k += 1;
        }
        t
    };
    /// 128 to 96 bits.
    const K96: i64 = key(96);
    /// 96 to 64 bits.
    const K64: i64 = key(64);
    /// Barrett reduction: the reflected polynomial and floor(x^64 / P), reflected.
    const P_X: i64 = 0x1_DB71_0641;
    const MU: i64 = 0x1_F701_1641;

    /// Whether this CPU has the instructions (cached by the standard library).
    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("sse4.1")
            && std::arch::is_x86_feature_detected!("ssse3")
    }

    /// [`super::body_crc`] by the fold.
    ///
    /// # Safety
    /// The CPU has PCLMULQDQ, SSE4.1 and SSSE3, and `16 <= body.len() <= 256`.
    #[target_feature(enable = "pclmulqdq,sse4.1,ssse3")]
    pub(super) unsafe fn body_crc(state: u32, body: &[u8]) -> u32 {
        let n = body.len();
        debug_assert!((16..=16 * MAX_BLOCKS).contains(&n));
        // The body as whole blocks: its first r bytes (1..=16) end a head block led by
        // zeros (leading zeros leave a zero-started CRC as it is), then (n - r) / 16
        // blocks. Continuing from register R is starting from zero with R XORed into the
        // first four bytes.
        let r = if n % 16 == 0 { 16 } else { n % 16 };
        let blocks = (n - r) / 16 + 1;
        let register = !state;
        // SAFETY (every load): 16 bytes at an offset at most n - 16, inside `body`.
        let load = |at: usize| unsafe { _mm_loadu_si128(body[at..at + 16].as_ptr().cast::<__m128i>()) };
        let seq = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        // Lane i of the head takes byte i - (16 - r) of the first load; the rest zero
        // (a shuffle index with its top bit set).
        let shift = _mm_add_epi8(seq, _mm_set1_epi8(r as i8 - 16));
        let head = _mm_shuffle_epi8(_mm_xor_si128(load(0), _mm_cvtsi32_si128(register as i32)), shift);
        // The register's bytes past the head's r go into the first whole block.
        let spill = if r < 4 { register >> (8 * r) } else { 0 };
        // The masked byte, all ones: in the head (lane 16 - r + m) or the first block.
        let m = ICRC_MASKED_BYTE;
        let (mask_block, lane) = if m < r { (0, 16 - r + m) } else { (1 + (m - r) / 16, (m - r) % 16) };
        let ones = _mm_cmpeq_epi8(seq, _mm_set1_epi8(lane as i8));
        let mut acc = _mm_set_epi64x(0, 0);
        for b in 0..blocks {
            let mut x = if b == 0 { head } else { load(r + 16 * (b - 1)) };
            if b == 1 {
                x = _mm_xor_si128(x, _mm_cvtsi32_si128(spill as i32));
            }
            if b == mask_block {
                x = _mm_or_si128(x, ones);
            }
            // Carried to the end of the body: `blocks - 1 - b` blocks on.
            let (lo, hi) = FOLD[blocks - 1 - b];
            if lo != 0 {
                let k = _mm_set_epi64x(hi, lo);
                x = _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
            }
            acc = _mm_xor_si128(acc, x);
        }
        // 128 bits to 96, to 64, then Barrett's reduction to the 32-bit register.
        let low32 = _mm_set_epi32(0, 0, 0, !0);
        let x = _mm_xor_si128(_mm_clmulepi64_si128(acc, _mm_set_epi64x(K96, 0), 0x10), _mm_srli_si128(acc, 8));
        let x = _mm_xor_si128(
            _mm_clmulepi64_si128(_mm_and_si128(x, low32), _mm_set_epi64x(0, K64), 0x00),
            _mm_srli_si128(x, 4),
        );
        let pu = _mm_set_epi64x(MU, P_X);
        let t1 = _mm_clmulepi64_si128(_mm_and_si128(x, low32), pu, 0x10);
        let t2 = _mm_clmulepi64_si128(_mm_and_si128(t1, low32), pu, 0x00);
        !(_mm_extract_epi32(_mm_xor_si128(x, t2), 1) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rnic_wire::icrc::{IcrcCache, IcrcContext};

    /// The reference: each packet's ICRC as `IcrcContext` computes it, with its ID.
    fn reference(data: &[u8], seg: usize, ids: bool, ctx: IcrcContext) -> Vec<u8> {
        let mut want = data.to_vec();
        for (j, p) in want.chunks_exact_mut(seg).enumerate() {
            let id = if ids { u16::try_from(j).unwrap() } else { 0 };
            IcrcContext { ipv4_ident: id, ..ctx }.fill(p).unwrap();
        }
        want
    }

    proptest! {
        /// Every packet of every train length and body length the fold takes (and the
        /// portable path around it) gets the ICRC the reference computes, with or
        /// without GSO IDs, whatever its bytes.
        #[test]
        fn train_icrcs_match_the_reference(
            seg in 16usize..=280,
            count in 1usize..=64,
            seed in any::<u64>(),
            ids in any::<bool>(),
        ) {
            let ctx = IcrcContext::new("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), 50000, 4791);
            let mut x = seed | 1;
            let mut data: Vec<u8> = (0..seg * count).map(|_| {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                x.to_le_bytes()[0]
            }).collect();
            let want = reference(&data, seg, ids, ctx);
            let prefix = IcrcCache::new().prefix_state(&ctx, seg).unwrap();
            fill_train(prefix, &mut data, seg, ids).unwrap();
            prop_assert_eq!(data, want);
        }
    }

    /// The fold agrees with rnic-wire's ICRC for every length it takes, from any state,
    /// and a body shorter than a BTH is refused, not given a CRC.
    #[test]
    fn fold_equals_the_wire_crates_icrc_for_every_length() {
        let body: Vec<u8> = (0..256u32).map(|i| (i * 37 + 11).to_le_bytes()[0]).collect();
        for n in 12..=256 {
            for state in [0u32, 0x1234_5678, !0, 0x8000_0001] {
                let want = rnic_wire::icrc::continue_from(state, &body[..n]).unwrap();
                assert_eq!(body_crc(state, &body[..n]).unwrap(), want, "{n} bytes from {state:#x}");
            }
        }
        assert!(body_crc(0, &body[..11]).is_err());
        assert!(fill_train(0, &mut [0u8; 30], 10, true).is_err());
    }
}
