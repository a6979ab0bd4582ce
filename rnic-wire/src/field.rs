//! Big-endian field access on byte slices. Callers check lengths first (`check_len`),
//! so an out-of-range index here is a bug in this crate, never in the input.

pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

pub(crate) fn u24_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(w)
}

pub(crate) fn set_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

pub(crate) fn set_u24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}

pub(crate) fn set_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

pub(crate) fn set_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// A field of one to eight bits inside one byte, placed as IBA draws it: bits are
/// numbered from the byte's most significant (bit 0) down, so `Bits::new(43, 5, 2)` is
/// the third and second least significant bits of byte 43 (IBA's "43.5, 2 bits").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bits {
    at: usize,
    shift: u32,
    mask: u8,
}

impl Bits {
    /// `width` bits of byte `at`, the first `first` bits below its most significant.
    /// A field that does not fit in the byte fails to compile where it is a constant.
    pub(crate) const fn new(at: usize, first: u32, width: u32) -> Bits {
        assert!(width >= 1 && first + width <= 8, "a bit field lies inside one byte");
        let shift = 8 - first - width;
        Bits { at, shift, mask: (u8::MAX >> (8 - width)) << shift }
    }
}

/// The value of a bit field (in its low bits).
pub(crate) fn bits(b: &[u8], f: Bits) -> u8 {
    (b[f.at] & f.mask) >> f.shift
}

/// Sets a bit field to the low bits of `v`; the byte's other bits are kept.
pub(crate) fn set_bits(b: &mut [u8], f: Bits, v: u8) {
    b[f.at] = (b[f.at] & !f.mask) | ((v << f.shift) & f.mask);
}

/// A one-bit field.
pub(crate) fn flag(b: &[u8], f: Bits) -> bool {
    bits(b, f) != 0
}

/// Sets a one-bit field; the byte's other bits are kept.
pub(crate) fn set_flag(b: &mut [u8], f: Bits, v: bool) {
    set_bits(b, f, u8::from(v));
}

/// A copy of `s`, which is exactly `N` bytes (a field's range, so a length mismatch is a
/// bug in this crate).
pub(crate) fn to_array<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(s);
    a
}

/// Declares a zero-copy view type over a fixed-length header with the common
/// constructor set (`new_unchecked`, `new_checked`, `check_len`, `into_inner`).
macro_rules! fixed_view {
    ($(#[$m:meta])* $name:ident, $len:expr, $what:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps a buffer without checking its length; getters may then panic.
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps a buffer after checking that it holds the whole header.
            pub fn new_checked(buffer: T) -> crate::Result<Self> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// Checks that the buffer holds the whole header. After this, no getter panics.
            pub fn check_len(&self) -> crate::Result<()> {
                crate::error::need($what, self.buffer.as_ref(), $len)
            }

            /// The wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}
pub(crate) use fixed_view;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_fields_count_from_the_most_significant_bit_and_keep_their_neighbours() {
        // IBA's "byte 43, bit 5, 2 bits": 0b0000_0110.
        const F: Bits = Bits::new(43, 5, 2);
        let mut b = [0u8; 44];
        b[43] = 0b1010_1001;
        assert_eq!(bits(&b, F), 0b00);
        set_bits(&mut b, F, 0b1111_1111);
        assert_eq!(b[43], 0b1010_1111, "only the field's bits change, the value is masked");
        assert_eq!(bits(&b, F), 0b11);
        set_bits(&mut b, F, 0b01);
        assert_eq!(b[43], 0b1010_1011);
        let whole = Bits::new(0, 0, 8);
        set_bits(&mut b, whole, 0x5a);
        assert_eq!((bits(&b, whole), b[0]), (0x5a, 0x5a));
        let top = Bits::new(1, 0, 1);
        set_flag(&mut b, top, true);
        assert!(flag(&b, top));
        assert_eq!(b[1], 0x80);
    }
}
