//! IPv4 header (RFC 791), as far as RoCEv2 needs it: options are carried, fragments
//! are refused.

use crate::error::need;
use crate::field::{set_u16, u16_at};
use crate::{Error, Result};
use std::net::Ipv4Addr;

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = 20;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;

/// Byte offsets the ICRC masks (Annex A17.3.3): TOS, TTL, header checksum.
pub(crate) const ICRC_MASK: [usize; 4] = [1, 8, 10, 11];

/// A view of an IPv4 header and payload.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps without checks.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }
    /// Wraps after [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the version, IHL and total length against the buffer. A buffer longer
    /// than the total length (Ethernet padding) is fine: [`Packet::payload`] stops at
    /// the total length.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        need("IPv4 header", b, HEADER_LEN)?;
        if b[0] >> 4 != 4 {
            return Err(Error::BadIpVersion(b[0] >> 4));
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Error::BadIpLength { what: "IHL", value: hl / 4 });
        }
        need("IPv4 header with options", b, hl)?;
        let total = usize::from(self.total_len());
        if total < hl {
            return Err(Error::BadIpLength { what: "total length", value: total });
        }
        need("IPv4 datagram (total length)", b, total)
    }
    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Header length in bytes (IHL * 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[0] & 0x0f) * 4
    }
    /// TOS byte (DSCP << 2 | ECN).
    pub fn tos(&self) -> u8 {
        self.b()[1]
    }
    /// Total length.
    pub fn total_len(&self) -> u16 {
        u16_at(self.b(), 2)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        u16_at(self.b(), 4)
    }
    /// Don't fragment.
    pub fn df(&self) -> bool {
        self.b()[6] & 0x40 != 0
    }
    /// More fragments.
    pub fn mf(&self) -> bool {
        self.b()[6] & 0x20 != 0
    }
    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        u16_at(self.b(), 6) & 0x1fff
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b()[8]
    }
    /// Protocol.
    pub fn protocol(&self) -> u8 {
        self.b()[9]
    }
    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        u16_at(self.b(), 10)
    }
    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(b[12], b[13], b[14], b[15])
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(b[16], b[17], b[18], b[19])
    }
    /// The header bytes, options included.
    pub fn header(&self) -> &[u8] {
        &self.b()[..self.header_len()]
    }
    /// The payload, up to the total length (Ethernet padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..usize::from(self.total_len())]
    }
    /// True if the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        internet_checksum(self.header()) == 0
    }
}

/// The ones'-complement sum of RFC 1071, folded and complemented.
pub fn internet_checksum(data: &[u8]) -> u16 {
    !fold(sum_words(0, data))
}

pub(crate) fn sum_words(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc = acc.wrapping_add(u32::from(u16::from_be_bytes([c[0], c[1]])));
        acc = (acc & 0xffff) + (acc >> 16);
    }
    if let [last] = chunks.remainder() {
        acc = acc.wrapping_add(u32::from(*last) << 8);
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc
}

pub(crate) fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    u16::try_from(acc).unwrap_or(0xffff)
}

/// An IPv4 header carrying RoCEv2. Lengths are derived at emit time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// TOS byte: DSCP (6 bits) and ECN (2 bits).
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// Don't fragment (rxe sets it; so must a UDP sender whose ICRC is to be predictable).
    pub df: bool,
    /// Time to live.
    pub ttl: u8,
    /// Protocol (17 for RoCEv2).
    pub protocol: u8,
}

impl Ipv4Repr {
    /// Parses a checked header: refuses fragments and bad header checksums. Options are
    /// skipped (and remain covered by the ICRC, which is computed from the raw bytes).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Ipv4Repr> {
        p.check_len()?;
        if p.mf() || p.frag_offset() != 0 {
            return Err(Error::Fragmented);
        }
        if !p.verify_checksum() {
            return Err(Error::BadIpChecksum);
        }
        Ok(Ipv4Repr {
            src: p.src(),
            dst: p.dst(),
            tos: p.tos(),
            ident: p.ident(),
            df: p.df(),
            ttl: p.ttl(),
            protocol: p.protocol(),
        })
    }

    /// Header length (this crate emits no options).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes a 20-byte header for a payload of `payload_len` bytes, checksum included.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<()> {
        need("IPv4 header buffer", buf, HEADER_LEN)?;
        let total =
            u16::try_from(HEADER_LEN + payload_len).map_err(|_| Error::FieldRange { field: "IPv4 total length" })?;
        buf[0] = 0x45;
        buf[1] = self.tos;
        set_u16(buf, 2, total);
        set_u16(buf, 4, self.ident);
        set_u16(buf, 6, if self.df { 0x4000 } else { 0 });
        buf[8] = self.ttl;
        buf[9] = self.protocol;
        set_u16(buf, 10, 0);
        buf[12..16].copy_from_slice(&self.src.octets());
        buf[16..20].copy_from_slice(&self.dst.octets());
        let c = internet_checksum(&buf[..HEADER_LEN]);
        set_u16(buf, 10, c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_of_golden_header() {
        // From rc_send_first_len256_ipv4: checksum 0xb0c8.
        let h = [
            0x45, 0x00, 0x01, 0x2c, 0x8b, 0x46, 0x40, 0x00, 0x40, 0x11, 0xb0, 0xc8, 0xac, 0x49, 0xf3, 0x16, 0xc0, 0xe1,
            0x9d, 0x70,
        ];
        let mut buf = h.to_vec();
        buf.resize(300, 0);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum());
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(r.ident, 0x8b46);
        let mut out = [0xa5u8; 20];
        r.emit(&mut out, 280).unwrap();
        assert_eq!(out, h);
    }

    #[test]
    fn refuses_short_and_bad_ihl() {
        assert!(matches!(Packet::new_checked(&[0x45u8; 19][..]), Err(Error::Truncated { .. })));
        let mut h = [0u8; 20];
        h[0] = 0x44;
        assert!(matches!(Packet::new_checked(&h[..]), Err(Error::BadIpLength { what: "IHL", .. })));
        h[0] = 0x65;
        assert_eq!(Packet::new_checked(&h[..]).err(), Some(Error::BadIpVersion(6)));
    }
}
