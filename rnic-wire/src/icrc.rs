//! The invariant CRC (IBA Vol 1 7.8.1 and Annex A17.3.3), exactly as Linux rxe computes it.
//!
//! ```text
//! crc32( FF FF FF FF FF FF FF FF                 stands in for the IB LRH
//!      + IP header   with 1s in IPv4 TOS, TTL, header checksum
//!                    or IPv6 traffic class, flow label, hop limit
//!      + UDP header  with 1s in the checksum
//!      + BTH         with 1s in byte 4 (FECN, BECN, Resv6a)
//!      + everything after the BTH up to the ICRC )
//! stored on the wire little-endian
//! ```
//!
//! Byte order catches people out: the CRC-32 value is stored least significant byte
//! first (rxe: `cpu_to_le32(~crc)`), while Wireshark and scapy display the big-endian
//! read of those bytes. [`Icrc`] values here are always the CRC-32 value.
//!
//! Over a UDP socket the receiver never sees the IP header, so [`IcrcContext`]
//! rebuilds it from what the endpoints know (see `shared/notes/icrc-over-udp-sockets.md`:
//! an unconnected socket with `IP_PMTUDISC_DO` sends IP ID 0 and DF, and with UDP GSO
//! the ID of segment *i* is *i*).

use crate::{bth, ipv4, ipv6, udp, Error, Result, ICRC_LEN};
use std::net::IpAddr;

/// A CRC-32 value as computed; the wire carries `to_le_bytes()` of it.
pub type Icrc = u32;

const LRH_STANDIN: [u8; 8] = [0xff; 8];
const MAX_IPV4_HEADER: usize = 60;

/// Computes the ICRC over raw header bytes as they are (or will be) on the wire.
///
/// `ip_header` is the whole IPv4 header (options included) or the 40-byte IPv6 header;
/// `udp_header` the 8 UDP bytes; `roce` runs from the BTH up to, **not including**, the
/// ICRC. Masked fields may hold anything. Returns `Err` only if a slice is too short.
pub fn compute(ip_header: &[u8], udp_header: &[u8], roce: &[u8]) -> Result<Icrc> {
    crate::error::need("IP header", ip_header, 1)?;
    crate::error::need("UDP header", udp_header, udp::HEADER_LEN)?;
    crate::error::need("BTH", roce, bth::HEADER_LEN)?;
    let mut h = crc32fast::Hasher::new();
    h.update(&LRH_STANDIN);
    match ip_header[0] >> 4 {
        4 => {
            let len = ip_header.len().min(MAX_IPV4_HEADER);
            crate::error::need("IPv4 header", ip_header, ipv4::HEADER_LEN)?;
            let mut ip = [0u8; MAX_IPV4_HEADER];
            ip[..len].copy_from_slice(&ip_header[..len]);
            for i in ipv4::ICRC_MASK {
                ip[i] = 0xff;
            }
            h.update(&ip[..len]);
        }
        6 => {
            crate::error::need("IPv6 header", ip_header, ipv6::HEADER_LEN)?;
            let mut ip = [0u8; ipv6::HEADER_LEN];
            ip.copy_from_slice(&ip_header[..ipv6::HEADER_LEN]);
            // Traffic class and flow label: the low 28 bits of the first word.
            ip[0] |= 0x0f;
            ip[1] = 0xff;
            ip[2] = 0xff;
            ip[3] = 0xff;
            ip[7] = 0xff; // hop limit
            h.update(&ip);
        }
        v => return Err(Error::BadIpVersion(v)),
    }
    let mut u = [0u8; udp::HEADER_LEN];
    u.copy_from_slice(&udp_header[..udp::HEADER_LEN]);
    u[6] = 0xff;
    u[7] = 0xff;
    h.update(&u);
    let mut b = [0u8; bth::HEADER_LEN];
    b.copy_from_slice(&roce[..bth::HEADER_LEN]);
    b[bth::ICRC_MASKED_BYTE] = 0xff;
    h.update(&b);
    h.update(&roce[bth::HEADER_LEN..]);
    Ok(h.finalize())
}

/// Reads the ICRC carried at the end of a BTH..ICRC buffer.
pub fn received(roce_with_icrc: &[u8]) -> Option<Icrc> {
    let n = roce_with_icrc.len();
    let tail = roce_with_icrc.get(n.checked_sub(ICRC_LEN)?..)?;
    Some(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]))
}

/// The IP-level facts a UDP-socket endpoint knows about a datagram, from which the
/// masked pseudo-header is rebuilt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcrcContext {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// IPv4 identification (ignored for IPv6).
    pub ipv4_ident: u16,
    /// IPv4 don't-fragment flag (ignored for IPv6).
    pub ipv4_df: bool,
}

impl IcrcContext {
    /// A context for IPv4 with DF set and ID 0, as an unconnected socket with
    /// `IP_PMTUDISC_DO` sends (the rnic UDP transport's setting), or IPv6.
    pub fn new(src: IpAddr, dst: IpAddr, src_port: u16, dst_port: u16) -> IcrcContext {
        IcrcContext { src, dst, src_port, dst_port, ipv4_ident: 0, ipv4_df: true }
    }

    /// Builds the IP and UDP headers for a RoCE packet of `roce_len` bytes (BTH..ICRC)
    /// and computes the ICRC over `roce` (BTH..ICRC with the ICRC excluded).
    pub fn compute(&self, roce: &[u8]) -> Result<Icrc> {
        let roce_len = roce.len() + ICRC_LEN;
        let mut u = [0u8; udp::HEADER_LEN];
        let urepr = udp::UdpRepr { src_port: self.src_port, dst_port: self.dst_port, checksum: udp::UdpChecksum::Zero };
        urepr.emit(&mut u, roce_len)?;
        let udp_len = udp::HEADER_LEN + roce_len;
        match (self.src, self.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                let mut ip = [0u8; ipv4::HEADER_LEN];
                ipv4::Ipv4Repr {
                    src,
                    dst,
                    tos: 0,
                    ident: self.ipv4_ident,
                    df: self.ipv4_df,
                    ttl: 0,
                    protocol: ipv4::PROTO_UDP,
                }
                .emit(&mut ip, udp_len)?;
                compute(&ip, &u, roce)
            }
            (src, dst) => {
                let to6 = |a: IpAddr| match a {
                    IpAddr::V4(a) => a.to_ipv6_mapped(),
                    IpAddr::V6(a) => a,
                };
                let mut ip = [0u8; ipv6::HEADER_LEN];
                ipv6::Ipv6Repr {
                    src: to6(src),
                    dst: to6(dst),
                    traffic_class: 0,
                    flow_label: 0,
                    hop_limit: 0,
                    next_header: ipv4::PROTO_UDP,
                }
                .emit(&mut ip, udp_len)?;
                compute(&ip, &u, roce)
            }
        }
    }

    /// Computes the ICRC of a complete BTH..ICRC buffer and writes it into its last
    /// four bytes.
    pub fn fill(&self, roce_with_icrc: &mut [u8]) -> Result<()> {
        let n = roce_with_icrc.len();
        let body =
            n.checked_sub(ICRC_LEN).ok_or(Error::Truncated { what: "RoCEv2 packet", need: ICRC_LEN, have: n })?;
        let c = self.compute(&roce_with_icrc[..body])?;
        roce_with_icrc[body..].copy_from_slice(&c.to_le_bytes());
        Ok(())
    }

    /// Verifies the ICRC of a complete BTH..ICRC buffer.
    pub fn verify(&self, roce_with_icrc: &[u8]) -> Result<()> {
        let n = roce_with_icrc.len();
        let body =
            n.checked_sub(ICRC_LEN).ok_or(Error::Truncated { what: "RoCEv2 packet", need: ICRC_LEN, have: n })?;
        let computed = self.compute(&roce_with_icrc[..body])?;
        let received = received(roce_with_icrc).unwrap_or(0);
        if computed == received {
            Ok(())
        } else {
            Err(Error::BadIcrc { computed, received })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cnp_ipv4` from shared/vectors (ICRC wire bytes a3 a2 5c d6), whose IPv4 header
    /// has a TOS, TTL and ID that a rebuilt header would not have.
    #[test]
    fn golden_cnp_frame() {
        let frame = hex("027ac064862c0204f2d2059708004503003cab680000ff110f05c0c5cd1dac08c754ea1112b7002800008100ffff40fffffe0000000000000000000000000000000000000000a3a25cd6");
        let (ip, u, roce) = (&frame[14..34], &frame[34..42], &frame[42..]);
        let c = compute(ip, u, &roce[..roce.len() - 4]).unwrap();
        assert_eq!(c, 0xd65c_a2a3);
        assert_eq!(received(roce), Some(c));
        assert_eq!(&c.to_le_bytes(), &[0xa3, 0xa2, 0x5c, 0xd6]);
    }

    #[test]
    fn masked_fields_do_not_change_the_icrc() {
        let ctx = IcrcContext::new("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), 49152, 4791);
        let mut pkt = vec![0x04, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 5, 1, 2, 3, 4, 0, 0, 0, 0];
        ctx.fill(&mut pkt).unwrap();
        ctx.verify(&pkt).unwrap();
        pkt[4] = 0xc0; // FECN+BECN: masked
        ctx.verify(&pkt).unwrap();
        pkt[8] = 0x00; // AckReq: not masked
        assert!(matches!(ctx.verify(&pkt), Err(Error::BadIcrc { .. })));
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }
}
