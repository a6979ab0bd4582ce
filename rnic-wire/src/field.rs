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
