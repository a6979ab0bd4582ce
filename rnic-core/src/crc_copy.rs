//! Copying a payload out of registered memory and taking its CRC-32 in one pass.
//!
//! A packet's payload is read from registered memory once: each 256-byte block is loaded,
//! stored into the packet and folded into the CRC while it is still in registers, instead
//! of a copy followed by a second pass of the CRC over the copy (the two were ~26% of the
//! sending thread of `perf write_bw -s 65536`, with the kernel's own copy).
//!
//! The fold is the carry-less multiplication scheme of Intel's "Fast CRC Computation for
//! Generic Polynomials Using PCLMULQDQ" (Gopal et al., 2009), on AVX-512 registers
//! (`VPCLMULQDQ`): four 512-bit accumulators hold sixteen 128-bit remainders, each folded
//! across 2048 bits per step. Folding keeps "the message so far is congruent, modulo the
//! CRC polynomial, to the accumulators' 256 bytes"; at the end every 128-bit lane is moved
//! on to where the last one ends and all are XORed into 16 bytes, and an ordinary CRC
//! (crc32fast) over those 16 bytes and the tail finishes. No Barrett reduction: the keys
//! are powers of x modulo the polynomial (two for the loop, sixteen pairs for the final
//! move), computed here at compile time. Without those instructions the copy and the CRC
//! are two passes.
//!
//! States are crc32fast's: the CRC-32 (IEEE, reflected) of the bytes so far, the final
//! XOR applied; the shift register is its complement.

/// The CRC-32 polynomial without its x^32 term, in normal bit order (bit d: x^d).
const POLY: u32 = 0x04C1_1DB7;

/// x^e mod P, normal bit order.
const fn xpow_mod(e: u32) -> u32 {
    let mut r: u32 = 1;
    let mut i = 0;
    while i < e {
        let carry = r & 0x8000_0000 != 0;
        r <<= 1;
        if carry {
            r ^= POLY;
        }
        i += 1;
    }
    r
}

/// The multiplier that moves a 64-bit lane `d` bits further along the message, in the
/// reflected 64-bit form `VPCLMULQDQ` takes. A reflected carry-less product comes out one
/// bit position short (the product of two 64-bit reflected operands has 127 bits), so the
/// power is one less than the distance.
const fn fold_key(d: u32) -> u64 {
    (xpow_mod(d - 1) as u64).reverse_bits()
}

/// Bytes folded per step: four 512-bit accumulators.
const BLOCK: usize = 256;
/// The fold distance in bits (`8 * BLOCK`).
const FOLD_BITS: u32 = 2048;
const _: () = assert!(FOLD_BITS as usize == 8 * BLOCK);
/// For the low (earlier) 64 bits of a 128-bit lane: they sit 64 bits further from the end.
const K_LOW_LANE: u64 = fold_key(FOLD_BITS + 64);
/// For the high (later) 64 bits of a 128-bit lane.
const K_HIGH_LANE: u64 = fold_key(FOLD_BITS);

/// The keys of one 128-bit lane that must move `d` bits on: its low (earlier) 64 bits by
/// `d + 64`, its high 64 bits by `d`; zero for `d == 0` (the lane is added as it is).
const fn lane_keys(d: u32) -> [u64; 2] {
    if d == 0 {
        [0, 0]
    } else {
        [fold_key(d + 64), fold_key(d)]
    }
}

/// For the final reduction: per accumulator `j`, per lane `l`, the keys that move it to
/// the end of the last lane, `128 * (15 - 4j - l)` bits on.
const REDUCE_KEYS: [[u64; 8]; 4] = {
    let mut k = [[0u64; 8]; 4];
    let mut j = 0u32;
    while j < 4 {
        let mut l = 0u32;
        while l < 4 {
            let pair = lane_keys(128 * (15 - 4 * j - l));
            k[j as usize][2 * l as usize] = pair[0];
            k[j as usize][2 * l as usize + 1] = pair[1];
            l += 1;
        }
        j += 1;
    }
    k
};

/// Below this the fused loop does not pay for its set-up: copy, then CRC.
pub(crate) const FUSED_MIN: usize = 2 * BLOCK;

/// Copies `n` bytes from `src` to `dst` and returns `state` continued over them.
///
/// # Safety
/// `src` must be valid for reads of `n` bytes and `dst` valid for writes of `n` bytes,
/// the two not overlapping. `src` may be written by another thread meanwhile (registered
/// memory, as under DMA): the CRC is then that of the bytes written to `dst`, whatever
/// they are, because every byte is loaded once and both stored and folded from the same
/// register.
pub(crate) unsafe fn copy_crc(state: u32, src: *const u8, dst: *mut u8, n: usize) -> u32 {
    if n >= FUSED_MIN {
        // SAFETY: the caller's contract.
        if let Some(crc) = unsafe { fused(state, src, dst, n) } {
            return crc;
        }
    }
    // SAFETY: the caller's contract.
    unsafe { copy_then_crc(state, src, dst, n) }
}

/// The fused loop, where the CPU and the compiler have it (the AVX-512 intrinsics are
/// stable from Rust 1.89; the workspace builds from 1.85, Debian trixie's rustc).
///
/// # Safety
/// As [`copy_crc`], with `n >= FUSED_MIN`.
#[rustversion::since(1.89)]
unsafe fn fused(state: u32, src: *const u8, dst: *mut u8, n: usize) -> Option<u32> {
    #[cfg(target_arch = "x86_64")]
    {
        if fused_available() {
            // SAFETY: the CPU has the features (checked above); the caller's contract.
            return Some(unsafe { x86::copy_crc_avx512(state, src, dst, n) });
        }
    }
    let _ = (state, src, dst, n);
    None
}

/// Before Rust 1.89: always the two passes.
///
/// # Safety
/// None needed: nothing is read or written.
#[rustversion::before(1.89)]
unsafe fn fused(_state: u32, _src: *const u8, _dst: *mut u8, _n: usize) -> Option<u32> {
    None
}

/// The two-pass fallback: copy, then CRC the copy.
///
/// # Safety
/// As [`copy_crc`].
unsafe fn copy_then_crc(state: u32, src: *const u8, dst: *mut u8, n: usize) -> u32 {
    if n == 0 {
        return state;
    }
    // SAFETY: the caller's contract; after the copy `dst[..n]` is initialised and only
    // this function holds it.
    let copied = unsafe {
        std::ptr::copy_nonoverlapping(src, dst, n);
        std::slice::from_raw_parts(dst, n)
    };
    let mut h = crc32fast::Hasher::new_with_initial(state);
    h.update(copied);
    h.finalize()
}

/// Whether this CPU runs the fused loop (AVX-512F and VPCLMULQDQ; the result is cached by
/// the standard library).
#[rustversion::since(1.89)]
pub(crate) fn fused_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("vpclmulqdq")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Before Rust 1.89 the fused loop is not compiled.
#[rustversion::before(1.89)]
pub(crate) fn fused_available() -> bool {
    false
}

#[rustversion::since(1.89)]
#[cfg(target_arch = "x86_64")]
#[allow(clippy::incompatible_msrv)] // compiled from 1.89 only (`rustversion`)
mod x86 {
    use super::{BLOCK, K_HIGH_LANE, K_LOW_LANE, REDUCE_KEYS};
    use std::arch::x86_64::{
        __m512i, _mm256_castsi256_si128, _mm256_extracti128_si256, _mm256_xor_si256, _mm512_broadcast_i32x4,
        _mm512_castsi128_si512, _mm512_clmulepi64_epi128, _mm512_extracti64x4_epi64, _mm512_loadu_si512,
        _mm512_mask_blend_epi64, _mm512_setzero_si512, _mm512_storeu_si512, _mm512_ternarylogic_epi64,
        _mm512_xor_si512, _mm_cvtsi32_si128, _mm_set_epi64x, _mm_storeu_si128, _mm_xor_si128,
    };

    /// One accumulator folded 2048 bits on, with the next 64 bytes added in: per 128-bit
    /// lane, low half times its key XOR high half times its key XOR data (`0x96`: a three-
    /// way XOR).
    #[inline]
    #[target_feature(enable = "avx512f,avx2,vpclmulqdq")]
    fn fold(acc: __m512i, keys: __m512i, data: __m512i) -> __m512i {
        _mm512_ternarylogic_epi64::<0x96>(
            _mm512_clmulepi64_epi128::<0x00>(acc, keys),
            _mm512_clmulepi64_epi128::<0x11>(acc, keys),
            data,
        )
    }

    /// [`super::copy_crc`] for `n >= FUSED_MIN` on a CPU with AVX-512F and VPCLMULQDQ.
    ///
    /// # Safety
    /// As [`super::copy_crc`], and the CPU has both features.
    #[target_feature(enable = "avx512f,avx2,vpclmulqdq")]
    pub(super) unsafe fn copy_crc_avx512(state: u32, src: *const u8, dst: *mut u8, n: usize) -> u32 {
        debug_assert!(n >= 2 * BLOCK);
        // SAFETY (every load and store below): offsets stay below `n` (`off + BLOCK <= n`
        // in the loop), inside what the caller vouched for; `loadu`/`storeu` take
        // unaligned addresses.
        let keys = _mm512_broadcast_i32x4(_mm_set_epi64x(K_HIGH_LANE as i64, K_LOW_LANE as i64));
        let mut acc = [_mm512_setzero_si512(); 4];
        for (i, a) in acc.iter_mut().enumerate() {
            unsafe {
                *a = _mm512_loadu_si512(src.add(64 * i).cast());
                _mm512_storeu_si512(dst.add(64 * i).cast(), *a);
            }
        }
        // Continuing from a shift register r is starting from zero with r XORed into the
        // first four bytes (reflected CRC).
        let register = !state;
        acc[0] = _mm512_xor_si512(acc[0], _mm512_castsi128_si512(_mm_cvtsi32_si128(register as i32)));
        let mut off = BLOCK;
        while off + BLOCK <= n {
            for (i, a) in acc.iter_mut().enumerate() {
                let at = off + 64 * i;
                let d = unsafe { _mm512_loadu_si512(src.add(at).cast()) };
                unsafe { _mm512_storeu_si512(dst.add(at).cast(), d) };
                *a = fold(*a, keys, d);
            }
            off += BLOCK;
        }
        // Every 128-bit lane moved on to where the last one ends, and all XORed: 16
        // bytes congruent to the message so far. Lane l of accumulator j is 16 * (15 - 4j
        // - l) bytes before the end; the very last lane stays as it is.
        let mut sum = _mm512_setzero_si512();
        for (j, a) in acc.iter().enumerate() {
            // SAFETY: each row holds 8 u64, one 512-bit load.
            let keys = unsafe { _mm512_loadu_si512(REDUCE_KEYS[j].as_ptr().cast()) };
            sum = _mm512_xor_si512(sum, fold(*a, keys, _mm512_setzero_si512()));
        }
        // The last lane's keys are zero: it joins unmoved.
        sum = _mm512_mask_blend_epi64(0xc0, sum, _mm512_xor_si512(sum, acc[3]));
        let lanes = [_mm512_extracti64x4_epi64::<0>(sum), _mm512_extracti64x4_epi64::<1>(sum)];
        let quarter = _mm256_xor_si256(lanes[0], lanes[1]);
        let folded = _mm_xor_si128(_mm256_castsi256_si128(quarter), _mm256_extracti128_si256::<1>(quarter));
        let mut last = [0u8; 16];
        // SAFETY: `last` holds 16 bytes.
        unsafe { _mm_storeu_si128(last.as_mut_ptr().cast(), folded) };
        let rest = n - off;
        // SAFETY: `src[off..n]` and `dst[off..n]` are inside the caller's ranges; after the
        // copy `dst[off..n]` is initialised and only this function holds it.
        let tail = unsafe {
            std::ptr::copy_nonoverlapping(src.add(off), dst.add(off), rest);
            std::slice::from_raw_parts(dst.add(off), rest)
        };
        // The message is now congruent to `last` followed by the tail, from a zero
        // register (state !0).
        let mut h = crc32fast::Hasher::new_with_initial(!0);
        h.update(&last);
        h.update(tail);
        h.finalize()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn crc_from(state: u32, bytes: &[u8]) -> u32 {
        let mut h = crc32fast::Hasher::new_with_initial(state);
        h.update(bytes);
        h.finalize()
    }

    fn run(f: unsafe fn(u32, *const u8, *mut u8, usize) -> u32, state: u32, src: &[u8]) -> (u32, Vec<u8>) {
        let mut dst = vec![0u8; src.len() + 1];
        // Written one byte in, so that source and destination alignments differ.
        // SAFETY: `src` and `dst[1..]` are valid, distinct and long enough.
        let crc = unsafe { f(state, src.as_ptr(), dst.as_mut_ptr().add(1), src.len()) };
        (crc, dst.split_off(1))
    }

    /// Known values: the CRC-32 check value, and a large buffer against crc32fast.
    #[test]
    fn the_check_value_and_a_long_buffer() {
        let (crc, copy) = run(copy_crc, 0, b"123456789");
        assert_eq!((crc, &copy[..]), (0xcbf4_3926, &b"123456789"[..]));
        let big: Vec<u8> = (0..70_000u32).map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()[2]).collect();
        let (crc, copy) = run(copy_crc, 0x1234_5678, &big);
        assert_eq!(crc, crc_from(0x1234_5678, &big));
        assert!(copy == big, "the copy differs");
    }

    /// The fold keys are what the algebra says: moving a lane by 64 bits more is one
    /// more multiplication by x^64.
    #[test]
    fn the_keys_follow_from_the_polynomial() {
        assert_eq!(xpow_mod(0), 1);
        assert_eq!(xpow_mod(32), POLY, "x^32 = P - x^32");
        let mul_x64 = |mut r: u32| {
            for _ in 0..64 {
                let c = r & 0x8000_0000 != 0;
                r <<= 1;
                if c {
                    r ^= POLY;
                }
            }
            r
        };
        assert_eq!(mul_x64(xpow_mod(FOLD_BITS - 1)), xpow_mod(FOLD_BITS + 63));
        assert_eq!(K_LOW_LANE, u64::from(xpow_mod(FOLD_BITS + 63)).reverse_bits());
    }

    proptest! {
        /// Both paths copy exactly and give crc32fast's CRC, for every length around the
        /// block boundaries, any start state and any source alignment.
        #[test]
        fn copy_and_crc_agree_with_crc32fast(
            len in 0usize..3000,
            skew in 0usize..64,
            state in any::<u32>(),
            seed in any::<u32>(),
        ) {
            let buf: Vec<u8> = (0..len + skew)
                .map(|i| seed.wrapping_add(u32::try_from(i).unwrap()).wrapping_mul(2_654_435_761).to_le_bytes()[2])
                .collect();
            let src = &buf[skew..];
            let want = crc_from(state, src);
            for f in [copy_crc as unsafe fn(u32, *const u8, *mut u8, usize) -> u32, copy_then_crc] {
                let (crc, copy) = run(f, state, src);
                prop_assert_eq!(crc, want);
                prop_assert!(copy == src);
            }
        }
    }
}
