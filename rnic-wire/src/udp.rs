//! UDP header (RFC 768) and its checksum over the IPv4 or IPv6 pseudo-header.

use crate::error::need;
use crate::field::{set_u16, u16_at};
use crate::ipv4::{fold, sum_words};
use crate::Result;
use std::net::IpAddr;

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// A view of a UDP header.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps without checks.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }
    /// Wraps after checking that the header fits.
    pub fn new_checked(buffer: T) -> Result<Self> {
        need("UDP header", buffer.as_ref(), HEADER_LEN)?;
        Ok(Packet { buffer })
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 2)
    }
    /// Length field (header plus payload).
    pub fn length(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 4)
    }
    /// Checksum field (0 = none).
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 6)
    }
}

/// How the UDP checksum is filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpChecksum {
    /// Zero: no checksum (what rxe and RoCE NICs send, over IPv4 and IPv6).
    Zero,
    /// Computed over the pseudo-header (what UDP GSO produces; receivers accept it).
    Computed,
}

/// A UDP header carrying RoCEv2. The length is derived at emit time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port (rxe: 0xC000 | a flow hash).
    pub src_port: u16,
    /// Destination port (4791).
    pub dst_port: u16,
    /// Checksum mode.
    pub checksum: UdpChecksum,
}

/// The UDP checksum of `datagram` (header with checksum field zero, plus payload)
/// between `src` and `dst`. Returns 0xFFFF in place of a computed 0 (RFC 768).
pub fn checksum(src: IpAddr, dst: IpAddr, datagram: &[u8]) -> u16 {
    let len = datagram.len();
    let mut acc = 0u32;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            acc = sum_words(acc, &s.octets());
            acc = sum_words(acc, &d.octets());
            acc = sum_words(acc, &[0, crate::ipv4::PROTO_UDP]);
            acc = sum_words(acc, &u16::try_from(len).unwrap_or(u16::MAX).to_be_bytes());
        }
        _ => {
            let s6 = match src {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            let d6 = match dst {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            acc = sum_words(acc, &s6.octets());
            acc = sum_words(acc, &d6.octets());
            acc = sum_words(acc, &u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
            acc = sum_words(acc, &[0, 0, 0, crate::ipv4::PROTO_UDP]);
        }
    }
    // The checksum field itself must be zero in `datagram`'s sum: skip bytes 6..8.
    acc = sum_words(acc, &datagram[..6.min(len)]);
    if len > HEADER_LEN {
        acc = sum_words(acc, &datagram[HEADER_LEN..]);
    }
    match !fold(acc) {
        0 => 0xffff,
        c => c,
    }
}

impl UdpRepr {
    /// Header length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header for a payload of `payload_len` bytes with a zero checksum; a
    /// computed checksum is filled in by [`fill_checksum`] once the payload is in place.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<()> {
        need("UDP header buffer", buf, HEADER_LEN)?;
        let len =
            u16::try_from(HEADER_LEN + payload_len).map_err(|_| crate::Error::FieldRange { field: "UDP length" })?;
        set_u16(buf, 0, self.src_port);
        set_u16(buf, 2, self.dst_port);
        set_u16(buf, 4, len);
        set_u16(buf, 6, 0);
        Ok(())
    }
}

/// Computes and stores the checksum of a complete datagram.
pub fn fill_checksum(src: IpAddr, dst: IpAddr, datagram: &mut [u8]) {
    if datagram.len() >= HEADER_LEN {
        let c = checksum(src, dst, datagram);
        set_u16(datagram, 6, c);
    }
}
