//! A whole RoCEv2 packet from the BTH to the ICRC: the UDP payload.
//!
//! [`RocePacket`] checks the structure IBA requires of every packet (C9-5, C9-6):
//! TVer 0, a known opcode, all its headers present, BTH..ICRC a multiple of four bytes,
//! PadCnt within the payload, and no payload on opcodes that carry none. The ICRC itself
//! needs the IP header and is checked with [`crate::icrc`].

use crate::aeth::{self, AethRepr};
use crate::atomic::{AtomicAckEthPacket, AtomicAckEthRepr, AtomicEthPacket, AtomicEthRepr};
use crate::bth::{self, BthRepr};
use crate::deth::{self, DethRepr};
use crate::opcode::HeaderKind;
use crate::reth::{self, RethRepr};
use crate::small::{FethRepr, Word, XRC_SRQN_MAX};
use crate::{Error, OpcodeInfo, Result, ICRC_LEN};
use core::fmt;

/// Smallest possible packet: a BTH and an ICRC.
pub const MIN_LEN: usize = bth::HEADER_LEN + ICRC_LEN;

/// A view of a RoCEv2 packet (BTH..ICRC).
#[derive(Debug, Clone, Copy)]
pub struct RocePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RocePacket<T> {
    /// Wraps without checks; the accessors may then panic.
    pub const fn new_unchecked(buffer: T) -> Self {
        RocePacket { buffer }
    }

    /// Wraps after [`RocePacket::check`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = RocePacket::new_unchecked(buffer);
        p.check()?;
        Ok(p)
    }

    /// Checks the packet's structure. After this succeeds no accessor panics.
    pub fn check(&self) -> Result<&'static OpcodeInfo> {
        let b = self.buffer.as_ref();
        crate::error::need("RoCEv2 packet (BTH + ICRC)", b, MIN_LEN)?;
        let bth = bth::Packet::new_unchecked(b);
        if bth.tver() != 0 {
            return Err(Error::BadTver(bth.tver()));
        }
        let op = bth.opcode();
        let info = op.info().ok_or(Error::UnknownOpcode(op.0))?;
        let headers_end = info.payload_offset();
        if b.len() < headers_end + ICRC_LEN {
            let what = info.headers.last().map_or("BTH", |h| h.name());
            return Err(Error::Truncated { what, need: headers_end + ICRC_LEN, have: b.len() });
        }
        if b.len() % 4 != 0 {
            return Err(Error::Unaligned { len: b.len() });
        }
        let available = b.len() - headers_end - ICRC_LEN;
        let pad = bth.pad_count();
        if usize::from(pad) > available {
            return Err(Error::PadExceedsPayload { pad, available });
        }
        if !info.payload && available > 0 {
            return Err(Error::UnexpectedPayload { opcode: op.0, len: available });
        }
        Ok(info)
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole buffer.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The BTH view.
    pub fn bth(&self) -> bth::Packet<&[u8]> {
        bth::Packet::new_unchecked(&self.buffer.as_ref()[..bth::HEADER_LEN])
    }

    /// The opcode's table entry. Panics only if the packet was not checked.
    pub fn info(&self) -> &'static OpcodeInfo {
        self.bth().opcode().info().expect("RocePacket::info on an unchecked packet")
    }

    /// The bytes of extension header `kind`, if the opcode carries it.
    pub fn header(&self, kind: HeaderKind) -> Option<&[u8]> {
        let off = self.info().offset_of(kind)?;
        self.buffer.as_ref().get(off..off + kind.wire_len())
    }

    /// Pad bytes (PadCnt).
    pub fn pad_len(&self) -> usize {
        usize::from(self.bth().pad_count())
    }

    /// The payload, pad excluded.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let start = self.info().payload_offset();
        let end = b.len() - ICRC_LEN - self.pad_len();
        &b[start..end]
    }

    /// Everything the ICRC covers after the pseudo-header: BTH up to the ICRC.
    pub fn without_icrc(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[..b.len() - ICRC_LEN]
    }

    /// The ICRC carried by the packet (CRC-32 value).
    pub fn icrc(&self) -> u32 {
        crate::icrc::received(self.buffer.as_ref()).unwrap_or(0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RocePacket<T> {
    /// The payload, mutable (pad excluded). Only on a checked packet.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.info().payload_offset();
        let pad = self.pad_len();
        let b = self.buffer.as_mut();
        let end = b.len() - ICRC_LEN - pad;
        &mut b[start..end]
    }
}

/// The extension headers of one packet. Exactly the ones its opcode carries are `Some`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExtHeaders {
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// RETH.
    pub reth: Option<RethRepr>,
    /// FETH (FLUSH).
    pub feth: Option<FethRepr>,
    /// AtomicETH.
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH.
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH.
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// Immediate data (ImmDt).
    pub imm_data: Option<u32>,
    /// R_Key to invalidate (IETH).
    pub ieth: Option<u32>,
    /// The XRC SRQ number of an XRC request (XRCETH, 24 bits).
    pub xrc_srqn: Option<u32>,
}

impl ExtHeaders {
    /// True if the header of `kind` is present (the CNP body always counts as present).
    pub fn has(&self, kind: HeaderKind) -> bool {
        match kind {
            HeaderKind::Deth => self.deth.is_some(),
            HeaderKind::Reth => self.reth.is_some(),
            HeaderKind::Feth => self.feth.is_some(),
            HeaderKind::AtomicEth => self.atomic_eth.is_some(),
            HeaderKind::Aeth => self.aeth.is_some(),
            HeaderKind::AtomicAckEth => self.atomic_ack_eth.is_some(),
            HeaderKind::ImmDt => self.imm_data.is_some(),
            HeaderKind::Ieth => self.ieth.is_some(),
            HeaderKind::CnpBody => true,
            HeaderKind::Xrceth => self.xrc_srqn.is_some(),
        }
    }
}

/// A RoCEv2 packet, validated: BTH, extension headers and the payload length.
/// PadCnt is derived from the payload length (IBA 9.2: the pad makes the payload a
/// whole number of words, so it is always `(4 - len % 4) % 4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceRepr {
    /// The BTH.
    pub bth: BthRepr,
    /// The extension headers.
    pub ext: ExtHeaders,
    /// Payload bytes, pad excluded.
    pub payload_len: usize,
}

/// Pad bytes for a payload of `len` bytes.
pub const fn pad_for(len: usize) -> usize {
    (4 - len % 4) % 4
}

impl RoceRepr {
    /// A placeholder to [`parse_into`](Self::parse_into): opcode 0, every field zero, no
    /// extension header.
    pub const EMPTY: RoceRepr = RoceRepr {
        bth: BthRepr {
            opcode: crate::Opcode(0),
            se: false,
            migreq: false,
            pkey: 0,
            fecn: false,
            becn: false,
            dest_qp: crate::Qpn::new(0),
            ack_req: false,
            psn: crate::Psn::new(0),
        },
        ext: ExtHeaders {
            deth: None,
            reth: None,
            feth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            imm_data: None,
            ieth: None,
            xrc_srqn: None,
        },
        payload_len: 0,
    };

    /// Parses a packet, checking its structure first.
    pub fn parse<T: AsRef<[u8]>>(p: &RocePacket<T>) -> Result<RoceRepr> {
        let mut r = RoceRepr::EMPTY;
        RoceRepr::parse_into(p, &mut r)?;
        Ok(r)
    }

    /// [`parse`](Self::parse) into `out`, which a failure may leave partly written. A
    /// receiver that parses into a value on its own stack writes each field once where it
    /// is read: the representation returned inside a `Result` and read back at once, just
    /// after its narrower stores, stalls store forwarding on every packet.
    #[inline]
    pub fn parse_into<T: AsRef<[u8]>>(p: &RocePacket<T>, out: &mut RoceRepr) -> Result<()> {
        let info = p.check()?;
        let b = p.as_bytes();
        out.bth = BthRepr::parse(&bth::Packet::new_unchecked(b))?;
        let ext = &mut out.ext;
        *ext = RoceRepr::EMPTY.ext;
        for &kind in info.headers {
            let off = info.offset_of(kind).unwrap_or(0);
            let h = &b[off..off + kind.wire_len()];
            match kind {
                HeaderKind::Deth => ext.deth = Some(DethRepr::parse(&deth::Packet::new_unchecked(h))?),
                HeaderKind::Reth => ext.reth = Some(RethRepr::parse(&reth::Packet::new_unchecked(h))?),
                HeaderKind::Feth => ext.feth = Some(FethRepr::parse(&Word::new_unchecked(h))?),
                HeaderKind::AtomicEth => {
                    ext.atomic_eth = Some(AtomicEthRepr::parse(&AtomicEthPacket::new_unchecked(h))?)
                }
                HeaderKind::Aeth => ext.aeth = Some(AethRepr::parse(&aeth::Packet::new_unchecked(h))?),
                HeaderKind::AtomicAckEth => {
                    ext.atomic_ack_eth = Some(AtomicAckEthRepr::parse(&AtomicAckEthPacket::new_unchecked(h))?)
                }
                HeaderKind::ImmDt => ext.imm_data = Some(Word::new_unchecked(h).value()),
                HeaderKind::Ieth => ext.ieth = Some(Word::new_unchecked(h).value()),
                HeaderKind::CnpBody => {}
                // IBA Annex A14: the top byte is reserved (sent as zero, ignored).
                HeaderKind::Xrceth => ext.xrc_srqn = Some(Word::new_unchecked(h).value() & XRC_SRQN_MAX),
            }
        }
        out.payload_len = p.payload().len();
        Ok(())
    }

    /// The opcode's table entry, if the opcode is known.
    pub fn info(&self) -> Option<&'static OpcodeInfo> {
        self.bth.opcode.info()
    }

    /// Pad bytes this packet carries.
    pub const fn pad_len(&self) -> usize {
        pad_for(self.payload_len)
    }

    /// Checks that the opcode is known and the extension headers are exactly the ones it
    /// carries, and that a no-payload opcode has no payload.
    pub fn validate(&self) -> Result<&'static OpcodeInfo> {
        let op = self.bth.opcode;
        let info = op.info().ok_or(Error::UnknownOpcode(op.0))?;
        for kind in HeaderKind::ALL {
            if info.has(kind) != self.ext.has(kind) && kind != HeaderKind::CnpBody {
                return Err(Error::HeaderMismatch { opcode: op.0, header: kind.name() });
            }
        }
        if !info.payload && self.payload_len > 0 {
            return Err(Error::UnexpectedPayload { opcode: op.0, len: self.payload_len });
        }
        // Values their fields cannot carry are refused rather than silently masked, so
        // that emit-then-parse is the identity for everything emit accepts.
        if let Some(a) = self.ext.aeth {
            if a.msn > 0x00FF_FFFF {
                return Err(Error::FieldRange { field: "AETH MSN" });
            }
            if aeth::Syndrome::from_byte(a.syndrome.to_byte()) != a.syndrome {
                return Err(Error::FieldRange { field: "AETH syndrome" });
            }
        }
        if self.ext.xrc_srqn.is_some_and(|n| n > XRC_SRQN_MAX) {
            return Err(Error::FieldRange { field: "XRCETH XRC SRQ number" });
        }
        if let Some(f) = self.ext.feth {
            if f.placement_type > 0xf || f.selectivity > 3 {
                return Err(Error::FieldRange { field: "FETH placement type or selectivity" });
            }
        }
        Ok(info)
    }

    /// Length of BTH..ICRC. Returns 0 for an unknown opcode.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        self.info().map_or(0, |i| i.payload_offset() + self.payload_len + self.pad_len() + ICRC_LEN)
    }

    /// Writes the packet into `buf[..buffer_len()]`, copying `payload` (which must be
    /// `payload_len` bytes). Pad and ICRC are written as zeros; fill the ICRC with
    /// [`crate::icrc::IcrcContext::fill`] or the frame layer.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize> {
        if payload.len() != self.payload_len {
            return Err(Error::FieldRange { field: "payload length" });
        }
        self.emit_with(buf, |p| p.copy_from_slice(payload))
    }

    /// Like [`RoceRepr::emit`], but the payload is written in place by `fill`, which
    /// gets exactly `payload_len` bytes (so a sender can copy straight from registered
    /// memory). Returns the number of bytes written.
    #[inline]
    pub fn emit_with(&self, buf: &mut [u8], fill: impl FnOnce(&mut [u8])) -> Result<usize> {
        let info = self.validate()?;
        let len = self.buffer_len();
        crate::error::need("RoCEv2 packet buffer", buf, len)?;
        let buf = &mut buf[..len];
        self.emit_headers(info, buf);
        let start = info.payload_offset();
        let end = start + self.payload_len;
        fill(&mut buf[start..end]);
        buf[end..].fill(0);
        Ok(len)
    }

    /// Writes the packet without its payload, for a sender that hands the payload to
    /// the kernel straight from registered memory: `buf` (exactly
    /// `buffer_len() - payload_len` bytes) gets the headers, then the pad and ICRC as
    /// zeros. Returns where the payload belongs (the headers' length): the packet is
    /// `buf[..at]`, the payload, `buf[at..]`.
    pub fn emit_without_payload(&self, buf: &mut [u8]) -> Result<usize> {
        let info = self.validate()?;
        let len = self.buffer_len() - self.payload_len;
        if buf.len() != len {
            return Err(Error::FieldRange { field: "header buffer length" });
        }
        let at = info.payload_offset();
        // (The BTH's pad count is that of the whole packet, payload included.)
        self.emit_headers(info, buf);
        buf[at..].fill(0);
        Ok(at)
    }

    /// BTH and extension headers into `buf[..payload_offset]` (`buf` may be longer).
    fn emit_headers(&self, info: &OpcodeInfo, buf: &mut [u8]) {
        let pad = self.pad_len();
        self.bth.emit(&mut bth::Packet::new_unchecked(&mut buf[..]), u8::try_from(pad).unwrap_or(0));
        for &kind in info.headers {
            let off = info.offset_of(kind).unwrap_or(0);
            let h = &mut buf[off..off + kind.wire_len()];
            match kind {
                HeaderKind::Deth => {
                    if let Some(r) = self.ext.deth {
                        r.emit(&mut deth::Packet::new_unchecked(h));
                    }
                }
                HeaderKind::Reth => {
                    if let Some(r) = self.ext.reth {
                        r.emit(&mut reth::Packet::new_unchecked(h));
                    }
                }
                HeaderKind::Feth => {
                    if let Some(r) = self.ext.feth {
                        r.emit(&mut Word::new_unchecked(h));
                    }
                }
                HeaderKind::AtomicEth => {
                    if let Some(r) = self.ext.atomic_eth {
                        r.emit(&mut AtomicEthPacket::new_unchecked(h));
                    }
                }
                HeaderKind::Aeth => {
                    if let Some(r) = self.ext.aeth {
                        r.emit(&mut aeth::Packet::new_unchecked(h));
                    }
                }
                HeaderKind::AtomicAckEth => {
                    if let Some(r) = self.ext.atomic_ack_eth {
                        r.emit(&mut AtomicAckEthPacket::new_unchecked(h));
                    }
                }
                HeaderKind::ImmDt => Word::new_unchecked(h).set_value(self.ext.imm_data.unwrap_or(0)),
                HeaderKind::Ieth => Word::new_unchecked(h).set_value(self.ext.ieth.unwrap_or(0)),
                HeaderKind::CnpBody => h.fill(0),
                HeaderKind::Xrceth => Word::new_unchecked(h).set_value(self.ext.xrc_srqn.unwrap_or(0)),
            }
        }
    }
}

/// One line for logs and tools: opcode, QPN, PSN, flags and the key extension fields.
impl fmt::Display for RoceRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.bth;
        write!(f, "{} qp={} psn={}", b.opcode, b.dest_qp, b.psn)?;
        if b.ack_req {
            f.write_str(" A")?;
        }
        if b.se {
            f.write_str(" SE")?;
        }
        if b.fecn || b.becn {
            write!(f, " ecn={}{}", if b.fecn { "F" } else { "" }, if b.becn { "B" } else { "" })?;
        }
        let e = &self.ext;
        if let Some(n) = e.xrc_srqn {
            write!(f, " xrcsrq={n}")?;
        }
        if let Some(d) = e.deth {
            write!(f, " qkey={:#010x} srcqp={}", d.qkey, d.src_qp)?;
        }
        if let Some(x) = e.feth {
            write!(f, " plt={} sel={}", x.placement_type, x.selectivity)?;
        }
        if let Some(r) = e.reth {
            write!(f, " va={:#x} rkey={:#010x} dmalen={}", r.va, r.rkey, r.dma_len)?;
        }
        if let Some(a) = e.atomic_eth {
            write!(f, " va={:#x} rkey={:#010x} swap_add={:#x} cmp={:#x}", a.va, a.rkey, a.swap_add, a.compare)?;
        }
        if let Some(a) = e.aeth {
            write!(f, " {} msn={}", a.syndrome, a.msn)?;
        }
        if let Some(a) = e.atomic_ack_eth {
            write!(f, " orig={:#x}", a.orig_remote_data)?;
        }
        if let Some(i) = e.imm_data {
            write!(f, " imm={i:#010x}")?;
        }
        if let Some(k) = e.ieth {
            write!(f, " inv_rkey={k:#010x}")?;
        }
        if self.info().is_some_and(|i| i.payload) {
            write!(f, " len={}", self.payload_len)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Opcode, Psn, Qpn};

    fn send_only(len: usize) -> RoceRepr {
        RoceRepr {
            bth: BthRepr {
                opcode: Opcode::RC_SEND_ONLY,
                se: false,
                migreq: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: Qpn::new(0x11),
                ack_req: true,
                psn: Psn::new(7),
            },
            ext: ExtHeaders::default(),
            payload_len: len,
        }
    }

    #[test]
    fn emit_parse_with_pad() {
        let r = send_only(5);
        assert_eq!(r.buffer_len(), 12 + 5 + 3 + 4);
        let mut buf = [0xa5u8; 24];
        r.emit(&mut buf, b"hello").unwrap();
        assert_eq!(buf[1] >> 4 & 3, 3);
        assert_eq!(&buf[17..24], &[0; 7]);
        let p = RocePacket::new_checked(&buf[..]).unwrap();
        assert_eq!(p.payload(), b"hello");
        assert_eq!(RoceRepr::parse(&p).unwrap(), r);
        assert_eq!(r.to_string(), "RC_SEND_ONLY qp=0x000011 psn=7 A len=5");
    }

    #[test]
    fn structural_errors() {
        let mut buf = [0u8; 24];
        send_only(5).emit(&mut buf, b"hello").unwrap();
        // Truncated at every offset below the minimum gives Truncated, never a panic.
        for n in 0..16 {
            assert!(matches!(RocePacket::new_checked(&buf[..n]), Err(Error::Truncated { .. })), "{n}");
        }
        assert_eq!(RocePacket::new_checked(&buf[..23]).err(), Some(Error::Unaligned { len: 23 }));
        let mut b = buf;
        b[1] |= 0x02;
        assert_eq!(RocePacket::new_checked(&b[..]).err(), Some(Error::BadTver(2)));
        let mut b = buf;
        b[0] = 0x15;
        assert_eq!(RocePacket::new_checked(&b[..]).err(), Some(Error::UnknownOpcode(0x15)));
        // 16 bytes: BTH + ICRC, no payload, but PadCnt 3.
        let mut b = [0u8; 16];
        b.copy_from_slice(&buf[..16]);
        assert_eq!(RocePacket::new_checked(&b[..]).err(), Some(Error::PadExceedsPayload { pad: 3, available: 0 }));
        // An ACK with payload.
        let mut b = [0u8; 24];
        b[0] = 0x11;
        assert_eq!(RocePacket::new_checked(&b[..]).err(), Some(Error::UnexpectedPayload { opcode: 0x11, len: 4 }));
        // A READ REQUEST cut inside its RETH names the RETH.
        let mut b = [0u8; 20];
        b[0] = 0x0c;
        assert!(matches!(RocePacket::new_checked(&b[..]), Err(Error::Truncated { what: "RETH", .. })));
    }

    /// An XRC RDMA WRITE ONLY with immediate, byte for byte (IBA Annex A14, Table 35): the
    /// BTH (opcode 0xab), the XRCETH (a reserved zero byte and the 24-bit SRQ number)
    /// first, then the RETH and the ImmDt, then 2 payload bytes, 2 pad bytes and the ICRC.
    #[test]
    fn xrc_golden_bytes() {
        let repr = RoceRepr {
            bth: BthRepr {
                opcode: Opcode::XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                se: true,
                migreq: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: Qpn::new(0x00_0123),
                ack_req: true,
                psn: Psn::new(0x00_0456),
            },
            ext: ExtHeaders {
                xrc_srqn: Some(0x00_abcdef),
                reth: Some(RethRepr { va: 0x1122_3344_5566_7788, rkey: 0x99aa_bbcc, dma_len: 2 }),
                imm_data: Some(0xdead_beef),
                ..ExtHeaders::default()
            },
            payload_len: 2,
        };
        let mut buf = [0xa5u8; 44];
        assert_eq!(repr.emit(&mut buf, b"hi"), Ok(44));
        #[rustfmt::skip]
        let want: [u8; 44] = [
            0xab, 0xa0, 0xff, 0xff, 0x00, 0x00, 0x01, 0x23, 0x80, 0x00, 0x04, 0x56, // BTH: SE, pad 2, AckReq
            0x00, 0xab, 0xcd, 0xef,                                                 // XRCETH
            0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, // RETH: VA, R_Key
            0x00, 0x00, 0x00, 0x02,                                                 //       DMA length
            0xde, 0xad, 0xbe, 0xef,                                                 // ImmDt
            b'h', b'i', 0x00, 0x00,                                                 // payload, pad
            0x00, 0x00, 0x00, 0x00,                                                 // ICRC (left to fill)
        ];
        assert_eq!(buf, want);
        let p = RocePacket::new_checked(&buf[..]).unwrap();
        assert_eq!(RoceRepr::parse(&p), Ok(repr));
        assert_eq!(p.header(HeaderKind::Xrceth), Some(&[0x00, 0xab, 0xcd, 0xef][..]));
        assert_eq!(
            repr.to_string(),
            "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE qp=0x000123 psn=1110 A SE xrcsrq=11259375 va=0x1122334455667788 \
             rkey=0x99aabbcc dmalen=2 imm=0xdeadbeef len=2"
        );
        // The reserved byte is ignored on receipt; an SRQ number over 24 bits is refused.
        let mut b = buf;
        b[12] = 0x7f;
        assert_eq!(RoceRepr::parse(&RocePacket::new_checked(&b[..]).unwrap()).unwrap().ext.xrc_srqn, Some(0xabcdef));
        let mut r = repr;
        r.ext.xrc_srqn = Some(0x0100_0000);
        assert!(r.emit(&mut buf, b"hi").is_err());
        // An XRC request without its XRCETH, or an XRC response with one, does not emit.
        r.ext.xrc_srqn = None;
        assert_eq!(r.emit(&mut buf, b"hi"), Err(Error::HeaderMismatch { opcode: 0xab, header: "XRCETH" }));
        // An XRC SEND cut inside its XRCETH names it.
        let mut b = [0u8; 16];
        b[0] = 0xa4;
        assert!(matches!(RocePacket::new_checked(&b[..]), Err(Error::Truncated { what: "XRCETH", .. })));
    }

    #[test]
    fn emit_refuses_mismatched_headers() {
        let mut r = send_only(0);
        r.bth.opcode = Opcode::RC_RDMA_WRITE_ONLY;
        let mut buf = [0u8; 64];
        assert_eq!(r.emit(&mut buf, &[]), Err(Error::HeaderMismatch { opcode: 0x0a, header: "RETH" }));
        r.bth.opcode = Opcode::RC_SEND_ONLY;
        r.ext.imm_data = Some(1);
        assert!(r.emit(&mut buf, &[]).is_err());
    }
}
