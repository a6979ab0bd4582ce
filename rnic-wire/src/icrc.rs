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
    compute_parts(ip_header, udp_header, &[roce])
}

/// [`compute`] for a packet given in pieces: `roce` concatenated is BTH..ICRC with the
/// ICRC excluded, and its first piece holds at least the BTH (a sender that keeps the
/// headers and the payload apart, the payload in registered memory).
pub fn compute_parts(ip_header: &[u8], udp_header: &[u8], roce: &[&[u8]]) -> Result<Icrc> {
    finish(prefix(ip_header, udp_header)?, roce)
}

/// How the pseudo-header's CRC state changes with the IPv4 identification: for two
/// pseudo-headers equal but for the ID, `state(a) ^ state(b) == ipv4_ident_delta(a ^ b)`,
/// whatever the addresses, ports and length. The CRC is affine, so the difference is the
/// zero-initialised CRC of the difference: the ID's two bytes, then the 22 bytes that
/// follow them (the rest of the IPv4 header and the UDP header). A sender of a GSO send
/// (segment *i* gets ID *i*) takes one state per send and this per segment.
pub const fn ipv4_ident_delta(ident: u16) -> u32 {
    const AFTER_ID: usize = ipv4::HEADER_LEN - 6 + udp::HEADER_LEN;
    let id = ident.to_be_bytes();
    let mut r: u32 = 0;
    let mut i = 0;
    while i < 2 + AFTER_ID {
        if i < 2 {
            r ^= id[i] as u32;
        }
        let mut bit = 0;
        while bit < 8 {
            r = if r & 1 != 0 { (r >> 1) ^ 0xEDB8_8320 } else { r >> 1 };
            bit += 1;
        }
        i += 1;
    }
    r
}

/// The CRC state after the pseudo-header: the LRH stand-in, then the IP and UDP headers
/// masked. Every packet of one flow, length and IP ID shares it ([`IcrcCache`]).
fn prefix(ip_header: &[u8], udp_header: &[u8]) -> Result<u32> {
    crate::error::need("IP header", ip_header, 1)?;
    crate::error::need("UDP header", udp_header, udp::HEADER_LEN)?;
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
    Ok(h.finalize())
}

/// The ICRC of a packet (BTH..ICRC exclusive, the BTH masked here) from the state after
/// its pseudo-header ([`IcrcCache::prefix_state`]): for a caller that takes one state for
/// many packets, or computes the CRC its own way and checks against this.
pub fn continue_from(state: u32, roce: &[u8]) -> Result<Icrc> {
    finish(state, &[roce])
}

/// Continues a [`prefix`] state over the BTH (masked) and the rest of the packet.
fn finish(state: u32, roce: &[&[u8]]) -> Result<Icrc> {
    let mut s = IcrcStream::begin(state, roce.first().copied().unwrap_or(&[]))?;
    for part in roce.iter().skip(1) {
        s.update(part);
    }
    Ok(s.finish())
}

/// An ICRC taken piece by piece after its first piece (for a payload read out of memory
/// that cannot be lent as one slice): [`IcrcCache::begin`], then [`update`](Self::update)
/// with the rest of BTH..ICRC in order (the ICRC excluded), then [`finish`](Self::finish).
#[derive(Debug, Clone)]
pub struct IcrcStream(crc32fast::Hasher);

impl IcrcStream {
    /// Continues a pseudo-header state over `head`, which holds at least the BTH (masked).
    #[inline]
    fn begin(state: u32, head: &[u8]) -> Result<IcrcStream> {
        crate::error::need("BTH", head, bth::HEADER_LEN)?;
        let mut h = crc32fast::Hasher::new_with_initial(state);
        let mut b = [0u8; bth::HEADER_LEN];
        b.copy_from_slice(&head[..bth::HEADER_LEN]);
        b[bth::ICRC_MASKED_BYTE] = 0xff;
        h.update(&b);
        h.update(&head[bth::HEADER_LEN..]);
        Ok(IcrcStream(h))
    }

    /// The next bytes of the packet.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// Continues over bytes the caller feeds its own way (copying them out of memory it
    /// cannot lend as a slice, in the same pass): `f` takes the CRC-32 state so far and
    /// returns it continued over those bytes. States are crc32fast's: the CRC-32 (IEEE,
    /// reflected) of the bytes so far with the final XOR applied.
    pub fn continue_with(&mut self, f: impl FnOnce(u32) -> u32) {
        self.0 = crc32fast::Hasher::new_with_initial(f(self.0.clone().finalize()));
    }

    /// The ICRC.
    pub fn finish(self) -> Icrc {
        self.0.finalize()
    }
}

/// Remembers the pseudo-header CRC state of recent (context, length) pairs, so that
/// the ICRC of a packet costs the CRC of its BTH and body only: a flow's packets share
/// addresses, ports and, mostly, lengths (a 40-byte WRITE costs ~3x less).
#[derive(Debug, Clone)]
pub struct IcrcCache {
    // (context, BTH..ICRC length, the CRC-32 value after the pseudo-header).
    slots: Vec<Option<(IcrcContext, usize, u32)>>,
}

const CACHE_SLOTS: usize = 64;

impl Default for IcrcCache {
    fn default() -> IcrcCache {
        IcrcCache::new()
    }
}

impl IcrcCache {
    /// An empty cache.
    pub fn new() -> IcrcCache {
        IcrcCache { slots: vec![None; CACHE_SLOTS] }
    }

    /// [`IcrcContext::compute_parts`], with the pseudo-header state from the cache.
    pub fn compute_parts(&mut self, ctx: &IcrcContext, roce: &[&[u8]]) -> Result<Icrc> {
        let roce_len = roce.iter().map(|p| p.len()).sum::<usize>() + ICRC_LEN;
        finish(self.prefix(ctx, roce_len)?, roce)
    }

    /// Starts the ICRC of a packet whose BTH..ICRC (ICRC included) is `roce_len` bytes and
    /// whose first piece is `head` (at least the BTH); the caller feeds the rest to the
    /// returned stream. The same value as [`compute_parts`](Self::compute_parts).
    pub fn begin(&mut self, ctx: &IcrcContext, roce_len: usize, head: &[u8]) -> Result<IcrcStream> {
        IcrcStream::begin(self.prefix(ctx, roce_len)?, head)
    }

    /// The pseudo-header state for `ctx` and a packet of `roce_len` bytes, cached.
    #[inline]
    fn prefix(&mut self, ctx: &IcrcContext, roce_len: usize) -> Result<u32> {
        let slot = Self::slot_of(ctx, roce_len);
        // The hit returns a plain `u32` (in a register): per packet, nothing is moved
        // through memory that was just written in narrower pieces.
        match &self.slots[slot] {
            Some((c, l, state)) if *l == roce_len && c == ctx => Ok(*state),
            _ => self.fill_slot(slot, ctx, roce_len),
        }
    }

    #[inline]
    fn slot_of(ctx: &IcrcContext, roce_len: usize) -> usize {
        let key = (roce_len ^ usize::from(ctx.ipv4_ident).rotate_left(7) ^ usize::from(ctx.src_port).rotate_left(17))
            .wrapping_mul(0x9e37_79b9)
            >> 7;
        key % CACHE_SLOTS
    }

    #[cold]
    fn fill_slot(&mut self, slot: usize, ctx: &IcrcContext, roce_len: usize) -> Result<u32> {
        let state = ctx.prefix(roce_len)?;
        self.slots[slot] = Some((*ctx, roce_len, state));
        Ok(state)
    }

    /// The CRC-32 state after the pseudo-header of `ctx` for a packet of `roce_len` bytes
    /// (BTH..ICRC), cached: for a sender that continues it over the packet its own way
    /// (the state is crc32fast's: the CRC of the bytes so far, final XOR applied). The
    /// packet's BTH goes in with its masked byte ([`bth::ICRC_MASKED_BYTE`]) all ones.
    pub fn prefix_state(&mut self, ctx: &IcrcContext, roce_len: usize) -> Result<u32> {
        self.prefix(ctx, roce_len)
    }

    /// [`IcrcContext::compute`] through the cache.
    pub fn compute(&mut self, ctx: &IcrcContext, roce: &[u8]) -> Result<Icrc> {
        self.compute_parts(ctx, &[roce])
    }

    /// [`IcrcContext::fill`] through the cache.
    pub fn fill(&mut self, ctx: &IcrcContext, roce_with_icrc: &mut [u8]) -> Result<()> {
        fill_with(roce_with_icrc, |body| self.compute(ctx, body))
    }
}

/// Computes the ICRC of a BTH..ICRC buffer's body with `compute` and writes it into
/// the last four bytes.
fn fill_with(roce_with_icrc: &mut [u8], compute: impl FnOnce(&[u8]) -> Result<Icrc>) -> Result<()> {
    let n = roce_with_icrc.len();
    let body = n.checked_sub(ICRC_LEN).ok_or(Error::Truncated { what: "RoCEv2 packet", need: ICRC_LEN, have: n })?;
    let c = compute(&roce_with_icrc[..body])?;
    roce_with_icrc[body..].copy_from_slice(&c.to_le_bytes());
    Ok(())
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
        self.compute_parts(&[roce])
    }

    /// [`compute`](Self::compute) for a packet given in pieces (BTH..ICRC exclusive,
    /// concatenated; the first piece holds at least the BTH).
    pub fn compute_parts(&self, roce: &[&[u8]]) -> Result<Icrc> {
        let roce_len = roce.iter().map(|p| p.len()).sum::<usize>() + ICRC_LEN;
        finish(self.prefix(roce_len)?, roce)
    }

    /// The CRC state after the pseudo-header of a packet of `roce_len` bytes (BTH..ICRC).
    fn prefix(&self, roce_len: usize) -> Result<u32> {
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
                prefix(&ip, &u)
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
                prefix(&ip, &u)
            }
        }
    }

    /// Computes the ICRC of a complete BTH..ICRC buffer and writes it into its last
    /// four bytes.
    pub fn fill(&self, roce_with_icrc: &mut [u8]) -> Result<()> {
        fill_with(roce_with_icrc, |body| self.compute(body))
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

    /// Verifies a complete BTH..ICRC buffer under `policy`: first with this context's
    /// IPv4 ID; with [`Ipv4IdPolicy::SolveUnknown`] and IPv4, failing that, with the
    /// one ID that makes the ICRC match, if there is one (see [`Ipv4IdPolicy`] for the
    /// strength this leaves). The error names the exact (context ID) computation.
    pub fn verify_with(&self, roce_with_icrc: &[u8], policy: Ipv4IdPolicy) -> Result<IcrcMatch> {
        let err = match self.verify(roce_with_icrc) {
            Ok(()) => return Ok(IcrcMatch::Exact),
            Err(e) => e,
        };
        let (Error::BadIcrc { computed, received }, Ipv4IdPolicy::SolveUnknown, IpAddr::V4(_), IpAddr::V4(_)) =
            (err, policy, self.src, self.dst)
        else {
            return Err(err);
        };
        // `computed` used self.ipv4_ident; solve relative to it.
        let n_after = ipv4::HEADER_LEN - 6 + udp::HEADER_LEN + roce_with_icrc.len() - ICRC_LEN;
        match solve_ipv4_id(received, computed, n_after) {
            Some(delta) => Ok(IcrcMatch::SolvedIpv4Id(self.ipv4_ident ^ delta)),
            None => Err(err),
        }
    }
}

const _: () = assert!(ID_STREAM_OFFSET + 2 + ipv4::HEADER_LEN - 6 == LRH_STANDIN.len() + ipv4::HEADER_LEN);

/// What a receiver that cannot see the IPv4 header assumes about the Identification
/// field (the ICRC covers it; see `shared/notes/icrc-over-udp-sockets.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ipv4IdPolicy {
    /// The ID must be the context's (0 for a peer on an unconnected `IP_PMTUDISC_DO`
    /// socket, such as another rnic): the full 32-bit ICRC check.
    Strict,
    /// Check with the context's ID first; if that fails, solve for the one 16-bit ID
    /// that makes the ICRC match (Linux rxe's IDs come from the kernel's generator and
    /// are unpredictable). A packet accepted this way was checked by 16 of the 32 ICRC
    /// bits: a corrupted packet still passes with probability 2^-16.
    #[default]
    SolveUnknown,
}

impl Ipv4IdPolicy {
    /// Parses `strict` or `solve` (the `RNIC_IPV4_ID` environment variable's values).
    pub fn from_name(s: &str) -> Option<Ipv4IdPolicy> {
        match s.trim().to_ascii_lowercase().as_str() {
            "strict" | "zero" | "0" => Some(Ipv4IdPolicy::Strict),
            "solve" | "any" => Some(Ipv4IdPolicy::SolveUnknown),
            _ => None,
        }
    }
}

/// How an ICRC check passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcrcMatch {
    /// With the context's IPv4 ID (or IPv6, which has none): all 32 bits checked.
    Exact,
    /// Only with this solved IPv4 ID: 16 bits of the ICRC checked.
    SolvedIpv4Id(u16),
}

// --- Solving for the IPv4 ID -------------------------------------------------------
//
// The CRC is linear over GF(2): for two streams of the same length that differ only in
// the 16 ID bits, the ICRCs differ by L_N(dID) = M^N * lin(dID), where lin(dID) is the CRC
// register after feeding the two ID bytes into a zero register, and M is "feed one zero
// byte" (the N bytes after the ID leave a difference in the register only shifted).
// So with d = received ^ computed(ID 0): dID exists iff M^-N * d lies in the image of
// the injective map lin (a 16-dimensional subspace of the 2^32 values), and it is unique.
// M^-(2^k) are built at compile time; lin is inverted by a precomputed echelon basis.

/// The reflected CRC-32 polynomial (crc32fast, zlib, rxe).
const POLY: u32 = 0xEDB8_8320;
/// Offset of the IPv4 ID in the ICRC stream: 8 LRH stand-in bytes + 4 IPv4 bytes.
const ID_STREAM_OFFSET: usize = 8 + 4;
/// `M^-(2^k)` for k < 17 covers every N below 2^17 (a UDP payload is below 2^16).
const UNSHIFT_POWERS: usize = 17;

type Gf2Mat = [u32; 32];

const fn mat_vec(m: &Gf2Mat, v: u32) -> u32 {
    let mut r = 0;
    let mut j = 0;
    while j < 32 {
        if (v >> j) & 1 == 1 {
            r ^= m[j];
        }
        j += 1;
    }
    r
}

const fn mat_mul(a: &Gf2Mat, b: &Gf2Mat) -> Gf2Mat {
    let mut r = [0u32; 32];
    let mut j = 0;
    while j < 32 {
        r[j] = mat_vec(a, b[j]);
        j += 1;
    }
    r
}

/// Undoes one zero-bit step of the reflected register `s' = s>>1 ^ (s&1 ? POLY : 0)`:
/// POLY's top bit is set and `s>>1`'s is clear, so the top bit of `s'` says which branch.
const fn unshift_zero_bit(s: u32) -> u32 {
    if s & 0x8000_0000 != 0 {
        ((s ^ POLY) << 1) | 1
    } else {
        s << 1
    }
}

const UNSHIFT: [Gf2Mat; UNSHIFT_POWERS] = {
    let mut t = [[0u32; 32]; UNSHIFT_POWERS];
    let mut j = 0;
    while j < 32 {
        let mut s = 1u32 << j;
        let mut b = 0;
        while b < 8 {
            s = unshift_zero_bit(s);
            b += 1;
        }
        t[0][j] = s;
        j += 1;
    }
    let mut k = 1;
    while k < UNSHIFT_POWERS {
        t[k] = mat_mul(&t[k - 1], &t[k - 1]);
        k += 1;
    }
    t
};

/// The register after feeding byte `b` into register `r` (no init, no final xor).
const fn feed(mut r: u32, b: u8) -> u32 {
    r ^= b as u32;
    let mut i = 0;
    while i < 8 {
        r = if r & 1 == 1 { (r >> 1) ^ POLY } else { r >> 1 };
        i += 1;
    }
    r
}

/// `lin(id)`: the register difference the two ID bytes (big-endian on the wire) leave.
const fn lin(id: u16) -> u32 {
    let [hi, lo] = id.to_be_bytes();
    feed(feed(0, hi), lo)
}

/// An echelon basis of lin's image: `(vector, pivot bit, the ID bits that make it)`,
/// each vector clear at the pivots of the ones before it.
const ID_BASIS: [(u32, u32, u16); 16] = {
    let mut basis = [(0u32, 0u32, 0u16); 16];
    let mut k = 0;
    while k < 16 {
        let mut v = lin(1 << k);
        let mut comb: u16 = 1 << k;
        let mut i = 0;
        while i < k {
            if v & basis[i].1 != 0 {
                v ^= basis[i].0;
                comb ^= basis[i].2;
            }
            i += 1;
        }
        // CRC-32 detects every burst of up to 32 bits, so lin is injective.
        assert!(v != 0, "lin is injective");
        basis[k] = (v, v & v.wrapping_neg(), comb);
        k += 1;
    }
    basis
};

/// The IPv4 ID whose change turns an ICRC computed with ID 0 into the received one,
/// given `n_after`, the number of ICRC-stream bytes after the ID field.
fn solve_ipv4_id(received: Icrc, computed_id0: Icrc, n_after: usize) -> Option<u16> {
    if n_after >> UNSHIFT_POWERS != 0 {
        return None;
    }
    let mut d = received ^ computed_id0;
    for (k, m) in UNSHIFT.iter().enumerate() {
        if (n_after >> k) & 1 == 1 {
            d = mat_vec(m, d);
        }
    }
    let mut id = 0u16;
    for &(v, pivot, comb) in &ID_BASIS {
        if d & pivot != 0 {
            d ^= v;
            id ^= comb;
        }
    }
    (d == 0).then_some(id)
}

#[cfg(test)]
mod tests {
    /// The pseudo-header state of one ID is that of another XOR `ipv4_ident_delta` of
    /// their difference, for any addresses, ports and length (IPv4).
    #[test]
    fn ipv4_ident_delta_moves_the_pseudo_header_state() {
        let ctxs = [
            IcrcContext::new("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap(), 49152, 4791),
            IcrcContext::new("10.1.2.3".parse().unwrap(), "192.168.200.9".parse().unwrap(), 4791, 4791),
        ];
        for ctx in ctxs {
            for len in [20usize, 80, 300, 4124] {
                let base = ctx.prefix(len).unwrap();
                for id in (0..64u16).chain([0x1234, 0xffff]) {
                    let with = IcrcContext { ipv4_ident: id, ..ctx }.prefix(len).unwrap();
                    assert_eq!(with ^ base, ipv4_ident_delta(id), "ID {id}, {len} bytes");
                }
            }
        }
    }

    #[test]
    fn the_cache_gives_what_the_context_computes() {
        let mut cache = IcrcCache::new();
        let a = "127.0.0.1".parse().unwrap();
        let b = "127.0.0.2".parse().unwrap();
        let v6 = "::1".parse().unwrap();
        let body: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3).to_le_bytes()[0]).collect();
        for round in 0..3 {
            for (src, dst) in [(a, b), (b, a), (v6, v6)] {
                for ident in [0u16, 1, 5, 63] {
                    for port in [4791u16, 50000] {
                        let ctx = IcrcContext { ipv4_ident: ident, ..IcrcContext::new(src, dst, port, 4791) };
                        for len in [12usize, 13, 40, 100, 300] {
                            let want = ctx.compute(&body[..len]).unwrap();
                            assert_eq!(cache.compute(&ctx, &body[..len]).unwrap(), want, "round {round} len {len}");
                            let (h, t) = body[..len].split_at(12);
                            assert_eq!(cache.compute_parts(&ctx, &[h, t]).unwrap(), want);
                            // Streamed: the body after the first piece in 7-byte chunks.
                            let mut st = cache.begin(&ctx, len + ICRC_LEN, h).unwrap();
                            t.chunks(7).for_each(|c| st.update(c));
                            assert_eq!(st.finish(), want, "streamed, len {len}");
                        }
                    }
                }
            }
        }
        assert!(cache.compute(&IcrcContext::new(a, b, 1, 2), &body[..11]).is_err(), "shorter than a BTH");
    }
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

    /// The CNP vector carries IPv4 ID 0xab68 and no DF: a receiver that assumes ID 0
    /// rejects it, the solve finds the real ID, and strict mode keeps rejecting it.
    #[test]
    fn unknown_ipv4_id_is_solved_from_the_icrc() {
        let frame = hex("027ac064862c0204f2d2059708004503003cab680000ff110f05c0c5cd1dac08c754ea1112b7002800008100ffff40fffffe0000000000000000000000000000000000000000a3a25cd6");
        let roce = &frame[42..];
        let mut ctx =
            IcrcContext::new("192.197.205.29".parse().unwrap(), "172.8.199.84".parse().unwrap(), 0xea11, 4791);
        ctx.ipv4_df = false;
        assert!(ctx.verify(roce).is_err());
        assert!(ctx.verify_with(roce, Ipv4IdPolicy::Strict).is_err());
        assert_eq!(ctx.verify_with(roce, Ipv4IdPolicy::SolveUnknown).unwrap(), IcrcMatch::SolvedIpv4Id(0xab68));
        // Relative to any assumed ID, the same answer.
        ctx.ipv4_ident = 0x1234;
        assert_eq!(ctx.verify_with(roce, Ipv4IdPolicy::SolveUnknown).unwrap(), IcrcMatch::SolvedIpv4Id(0xab68));
        ctx.ipv4_ident = 0xab68;
        assert_eq!(ctx.verify_with(roce, Ipv4IdPolicy::Strict).unwrap(), IcrcMatch::Exact);
        // A flipped bit anywhere in the BTH..payload is still caught.
        for bit in [0, 7, 64, 100, 200] {
            let mut bad = roce.to_vec();
            bad[bit / 8] ^= 1 << (bit % 8);
            if bit / 8 == bth::ICRC_MASKED_BYTE {
                continue;
            }
            assert!(ctx.verify_with(&bad, Ipv4IdPolicy::SolveUnknown).is_err(), "bit {bit}");
        }
        // IPv6 has no ID: nothing to solve, the policy changes nothing.
        let v6 = IcrcContext::new("::1".parse().unwrap(), "::2".parse().unwrap(), 1, 4791);
        assert!(v6.verify_with(roce, Ipv4IdPolicy::SolveUnknown).is_err());
    }

    /// Every ID at every length round-trips: fill with ID x, solve from ID 0, get x.
    /// Random corruptions are accepted about once in 2^16 (here: rarely, counted).
    #[test]
    fn solve_round_trips_and_random_corruption_mostly_fails() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (src, dst) = ("10.77.0.11".parse().unwrap(), "10.77.0.1".parse().unwrap());
        let mut accepted_corrupt = 0;
        let trials = 3000;
        for t in 0..trials {
            let len = 16 + 4 * (usize::try_from(rnd() % 1100).unwrap());
            let mut pkt: Vec<u8> = (0..len).map(|_| rnd().to_le_bytes()[0]).collect();
            pkt[0] = 0x04;
            let id = u16::try_from(rnd() & 0xffff).unwrap();
            let mut sender = IcrcContext::new(src, dst, 49441, 4791);
            sender.ipv4_ident = id;
            sender.fill(&mut pkt).unwrap();
            let receiver = IcrcContext::new(src, dst, 49441, 4791);
            let m = receiver.verify_with(&pkt, Ipv4IdPolicy::SolveUnknown).unwrap();
            assert_eq!(m, if id == 0 { IcrcMatch::Exact } else { IcrcMatch::SolvedIpv4Id(id) }, "trial {t}");
            if id != 0 {
                assert!(receiver.verify_with(&pkt, Ipv4IdPolicy::Strict).is_err());
            }
            // Corrupt a random unmasked byte.
            let at = 5 + usize::try_from(rnd()).unwrap() % (len - 5);
            pkt[at] ^= 1 + rnd().to_le_bytes()[1] % 255;
            if receiver.verify_with(&pkt, Ipv4IdPolicy::SolveUnknown).is_ok() {
                accepted_corrupt += 1;
            }
        }
        // Expected 3000 / 65536 = 0.05.
        assert!(accepted_corrupt <= 2, "{accepted_corrupt} corrupted packets passed");
    }

    #[test]
    fn unshift_undoes_a_zero_byte() {
        for j in 0..32 {
            let s = 1u32 << j;
            assert_eq!(mat_vec(&UNSHIFT[0], feed(s, 0)), s);
            assert_eq!(mat_vec(&UNSHIFT[3], (0..8).fold(s, |r, _| feed(r, 0))), s);
        }
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }
}
