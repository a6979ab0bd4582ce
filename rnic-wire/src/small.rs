//! The four-byte extension headers (ImmDt, IETH, FETH) and the CNP body.

use crate::field::{fixed_view, set_u32, u32_at};

/// Length of ImmDt.
pub const IMMDT_LEN: usize = 4;
/// Length of the IETH.
pub const IETH_LEN: usize = 4;
/// Length of the XRCETH (IBA Annex A14).
pub const XRCETH_LEN: usize = 4;
/// The largest XRC SRQ number an XRCETH carries (24 bits).
pub const XRC_SRQN_MAX: u32 = 0x00FF_FFFF;
/// Length of the FETH.
pub const FETH_LEN: usize = 4;
/// Length of the reserved body of a CNP (Annex A17.9.3: 16 bytes after the BTH).
pub const CNP_BODY_LEN: usize = 16;

fixed_view!(
    /// A view of a 4-byte word header: ImmDt (immediate data), IETH (R_Key to
    /// invalidate) or FETH (flush placement and selectivity).
    Word,
    4,
    "4-byte extension header"
);

impl<T: AsRef<[u8]>> Word<T> {
    /// The big-endian word.
    pub fn value(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Word<T> {
    /// Sets the word.
    pub fn set_value(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 0, v);
    }
}

/// A FETH (IBA 1.5 FLUSH; rxe `rxe_feth`): placement type in bits 3..0, selectivity
/// level in bits 5..4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FethRepr {
    /// Placement type (1 = global visibility, 2 = persistence).
    pub placement_type: u8,
    /// Selectivity level (0 = the memory region range, 1 = the whole region).
    pub selectivity: u8,
}

impl FethRepr {
    /// Parses a FETH from its word (reserved bits ignored).
    pub fn parse<T: AsRef<[u8]>>(p: &Word<T>) -> crate::Result<FethRepr> {
        p.check_len()?;
        let v = p.value();
        Ok(FethRepr {
            placement_type: u8::try_from(v & 0xf).unwrap_or(0),
            selectivity: u8::try_from((v >> 4) & 0x3).unwrap_or(0),
        })
    }
    /// Writes the FETH word.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Word<T>) {
        p.set_value(u32::from(self.placement_type & 0xf) | (u32::from(self.selectivity & 0x3) << 4));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_and_feth() {
        let w = Word::new_checked(&[0x1e, 0x37, 0xcf, 0xe5][..]).unwrap();
        assert_eq!(w.value(), 506974181);
        let f = FethRepr { placement_type: 2, selectivity: 1 };
        let mut buf = [0xa5u8; 4];
        f.emit(&mut Word::new_unchecked(&mut buf[..]));
        assert_eq!(buf, [0, 0, 0, 0x12]);
        assert_eq!(FethRepr::parse(&Word::new_unchecked(&buf[..])).unwrap(), f);
        assert!(Word::new_checked(&[1u8, 2, 3][..]).is_err());
    }
}
