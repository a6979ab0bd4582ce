//! IPv6 fixed header (RFC 8200). Extension headers are not supported: RoCEv2 does not
//! use them, and a packet with one is reported as not UDP.

use crate::error::need;
use crate::field::{set_u16, u16_at, u32_at};
use crate::{Error, Result};
use std::net::Ipv6Addr;

/// Length of the IPv6 fixed header.
pub const HEADER_LEN: usize = 40;

/// A view of an IPv6 header and payload.
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
    /// Checks the version and that the payload length fits the buffer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        need("IPv6 header", b, HEADER_LEN)?;
        if b[0] >> 4 != 6 {
            return Err(Error::BadIpVersion(b[0] >> 4));
        }
        need("IPv6 datagram (payload length)", b, HEADER_LEN + usize::from(self.payload_len()))
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        let w = u32_at(self.b(), 0);
        u8::try_from((w >> 20) & 0xff).unwrap_or(0)
    }
    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        u32_at(self.b(), 0) & 0x000f_ffff
    }
    /// Payload length.
    pub fn payload_len(&self) -> u16 {
        u16_at(self.b(), 4)
    }
    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }
    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.b()[8..24]);
        Ipv6Addr::from(a)
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.b()[24..40]);
        Ipv6Addr::from(a)
    }
    /// The header bytes.
    pub fn header(&self) -> &[u8] {
        &self.b()[..HEADER_LEN]
    }
    /// The payload, up to the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..HEADER_LEN + usize::from(self.payload_len())]
    }
}

/// An IPv6 header carrying RoCEv2. The payload length is derived at emit time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Next header (17 for RoCEv2).
    pub next_header: u8,
}

impl Ipv6Repr {
    /// Parses a checked header.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Ipv6Repr> {
        p.check_len()?;
        Ok(Ipv6Repr {
            src: p.src(),
            dst: p.dst(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
            hop_limit: p.hop_limit(),
            next_header: p.next_header(),
        })
    }
    /// Header length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header for a payload of `payload_len` bytes.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<()> {
        need("IPv6 header buffer", buf, HEADER_LEN)?;
        let len = u16::try_from(payload_len).map_err(|_| Error::FieldRange { field: "IPv6 payload length" })?;
        let w = (6u32 << 28) | (u32::from(self.traffic_class) << 20) | (self.flow_label & 0x000f_ffff);
        buf[0..4].copy_from_slice(&w.to_be_bytes());
        set_u16(buf, 4, len);
        buf[6] = self.next_header;
        buf[7] = self.hop_limit;
        buf[8..24].copy_from_slice(&self.src.octets());
        buf[24..40].copy_from_slice(&self.dst.octets());
        Ok(())
    }
}
