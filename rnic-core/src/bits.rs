//! Set operations shared by the hand-written flag types ([`crate::mr::AccessFlags`],
//! [`crate::qp_state::QpAttrMask`]): each is a `u32` newtype with its own names and
//! Display; the algebra is the same and lives here once.

/// Implements `contains`, `intersects`, `union`, `difference`, `is_empty`, `|` and `|=`
/// for a `struct $t(u32)`.
macro_rules! bit_set_ops {
    ($t:ident) => {
        impl $t {
            /// Whether every bit of `other` is in `self`.
            pub const fn contains(self, other: $t) -> bool {
                self.0 & other.0 == other.0
            }

            /// Whether `self` and `other` share a bit.
            pub const fn intersects(self, other: $t) -> bool {
                self.0 & other.0 != 0
            }

            /// Bits in either.
            #[must_use]
            pub const fn union(self, other: $t) -> $t {
                $t(self.0 | other.0)
            }

            /// Bits in `self` but not in `other`.
            #[must_use]
            pub const fn difference(self, other: $t) -> $t {
                $t(self.0 & !other.0)
            }

            /// Whether no bit is set.
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }
        }

        impl std::ops::BitOr for $t {
            type Output = $t;
            fn bitor(self, rhs: $t) -> $t {
                self.union(rhs)
            }
        }

        impl std::ops::BitOrAssign for $t {
            fn bitor_assign(&mut self, rhs: $t) {
                *self = self.union(rhs);
            }
        }
    };
}
pub(crate) use bit_set_ops;
