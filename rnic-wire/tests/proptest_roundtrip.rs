//! Property tests for the wire layer. The story, in four parts:
//!
//! 1. **Emit then parse is the identity.** Any valid `RoceRepr` (every opcode in the
//!    table, random field values, exactly the extension headers that opcode carries)
//!    comes back unchanged, and its ICRC catches every single-bit error outside the
//!    one masked BTH byte. Any `FrameRepr` (IPv4 or IPv6, tagged or not, UDP checksum
//!    or not, padded or not) comes back unchanged through `parse_ethernet`, and
//!    `frame_repr()` re-emits the very same bytes.
//! 2. **No input panics.** Arbitrary bytes, and valid frames and packets with bytes
//!    overwritten, flipped, inserted, removed, cut or appended, parse to `Ok` or `Err`;
//!    when `Ok`, the parse is canonical: re-emitting it parses to the same thing.
//! 3. **Truncation has one answer.** Every prefix of every opcode's packet gets exactly
//!    the verdict IBA's structural rules give it (a model below spells them out); the
//!    prefixes that are structurally valid shorter packets fail their ICRC instead.
//! 4. **Each malformation has its own error**: TVer not 0, every opcode outside the
//!    table, PadCnt beyond the payload, a length that is not whole words, payload on an
//!    opcode that carries none; and a frame reports the same error as its UDP payload.
//!
//! Each case is cheap: at proptest's default of 256 cases per property the whole file
//! runs in a few hundredths of a second. For a deeper run:
//! `PROPTEST_CASES=200000 cargo test -p rnic-wire --test proptest_roundtrip` (about 12 s).
//! The coverage-guided counterparts of part 2 are the targets in `fuzz/`.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use rnic_wire::aeth::{AethRepr, Syndrome};
use rnic_wire::atomic::{AtomicAckEthRepr, AtomicEthRepr};
use rnic_wire::bth::{self, BthRepr};
use rnic_wire::deth::DethRepr;
use rnic_wire::ethernet::{self, EthernetRepr, MacAddr, VlanTag};
use rnic_wire::frame::{self, FrameRepr, IpRepr};
use rnic_wire::icrc::IcrcContext;
use rnic_wire::ipv4::{self, Ipv4Repr};
use rnic_wire::ipv6::Ipv6Repr;
use rnic_wire::reth::RethRepr;
use rnic_wire::roce::{self, ExtHeaders, RocePacket, RoceRepr};
use rnic_wire::small::FethRepr;
use rnic_wire::udp::{self, UdpChecksum, UdpRepr};
use rnic_wire::{opcode, Error, HeaderKind, Opcode, OpcodeInfo, Psn, Qpn, ICRC_LEN, ROCEV2_UDP_PORT};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

// ---------------------------------------------------------------------------------
// Strategies: valid representations.
// ---------------------------------------------------------------------------------

/// Any opcode the table knows.
fn known_opcode() -> impl Strategy<Value = &'static OpcodeInfo> {
    proptest::sample::select(opcode::all().collect::<Vec<_>>())
}

/// A BTH for `opcode` with every other field random. PSN and QPN go through their
/// masking constructors, so any `u32` is fine.
fn bth_for(opcode: Opcode) -> impl Strategy<Value = BthRepr> {
    (any::<[bool; 5]>(), any::<u16>(), any::<u32>(), any::<u32>()).prop_map(
        move |([se, migreq, fecn, becn, ack_req], pkey, qpn, psn)| BthRepr {
            opcode,
            se,
            migreq,
            pkey,
            fecn,
            becn,
            dest_qp: Qpn::new(qpn),
            ack_req,
            psn: Psn::new(psn),
        },
    )
}

/// Random values for every extension header, of which exactly the ones `info` carries
/// are kept. Field ranges are the ones the wire can carry (MSN 24 bits, FETH placement
/// 4 bits and selectivity 2); any syndrome byte is a valid syndrome.
fn ext_for(info: &'static OpcodeInfo) -> impl Strategy<Value = ExtHeaders> {
    let deth = (any::<u32>(), any::<u32>()).prop_map(|(qkey, qp)| DethRepr { qkey, src_qp: Qpn::new(qp) });
    let reth = any::<(u64, u32, u32)>().prop_map(|(va, rkey, dma_len)| RethRepr { va, rkey, dma_len });
    let feth = (0u8..16, 0u8..4).prop_map(|(placement_type, selectivity)| FethRepr { placement_type, selectivity });
    let atomic = any::<(u64, u32, u64, u64)>().prop_map(|(va, rkey, swap_add, compare)| AtomicEthRepr {
        va,
        rkey,
        swap_add,
        compare,
    });
    let aeth = (any::<u8>(), 0u32..1 << 24).prop_map(|(s, msn)| AethRepr { syndrome: Syndrome::from_byte(s), msn });
    let atomic_ack = any::<u64>().prop_map(|orig_remote_data| AtomicAckEthRepr { orig_remote_data });
    (deth, reth, feth, atomic, aeth, atomic_ack, any::<u32>(), any::<u32>(), 0u32..1 << 24).prop_map(
        move |(deth, reth, feth, atomic_eth, aeth, atomic_ack_eth, imm, inv, srqn)| {
            let keep = |kind| info.has(kind);
            ExtHeaders {
                deth: keep(HeaderKind::Deth).then_some(deth),
                reth: keep(HeaderKind::Reth).then_some(reth),
                feth: keep(HeaderKind::Feth).then_some(feth),
                atomic_eth: keep(HeaderKind::AtomicEth).then_some(atomic_eth),
                aeth: keep(HeaderKind::Aeth).then_some(aeth),
                atomic_ack_eth: keep(HeaderKind::AtomicAckEth).then_some(atomic_ack_eth),
                imm_data: keep(HeaderKind::ImmDt).then_some(imm),
                ieth: keep(HeaderKind::Ieth).then_some(inv),
                xrc_srqn: keep(HeaderKind::Xrceth).then_some(srqn),
            }
        },
    )
}

/// Payload bytes: none for an opcode without payload, otherwise up to `max` bytes, with
/// short payloads (where the pad arithmetic lives) drawn as often as long ones.
fn payload_for(info: &'static OpcodeInfo, max: usize) -> impl Strategy<Value = Vec<u8>> {
    let max = if info.payload { max } else { 0 };
    prop_oneof![vec(any::<u8>(), 0..=max.min(8)), vec(any::<u8>(), 0..=max)]
}

/// A valid RoCEv2 packet description and the payload it carries.
fn roce_case(max_payload: usize) -> impl Strategy<Value = (RoceRepr, Vec<u8>)> {
    roce_case_for(known_opcode(), max_payload)
}

/// Like [`roce_case`], for the opcodes `opcodes` picks.
fn roce_case_for(
    opcodes: impl Strategy<Value = &'static OpcodeInfo>,
    max_payload: usize,
) -> impl Strategy<Value = (RoceRepr, Vec<u8>)> {
    opcodes
        .prop_flat_map(move |info| (bth_for(info.opcode), ext_for(info), payload_for(info, max_payload)))
        .prop_map(|(bth, ext, payload)| (RoceRepr { bth, ext, payload_len: payload.len() }, payload))
}

/// What a UDP-socket endpoint knows about a datagram. Mixed address families are
/// allowed: the context maps IPv4 into IPv6 then.
fn icrc_context() -> impl Strategy<Value = IcrcContext> {
    (any::<IpAddr>(), any::<IpAddr>(), any::<(u16, u16, u16)>(), any::<bool>()).prop_map(
        |(src, dst, (src_port, dst_port, ipv4_ident), ipv4_df)| IcrcContext {
            src,
            dst,
            src_port,
            dst_port,
            ipv4_ident,
            ipv4_df,
        },
    )
}

fn mac() -> impl Strategy<Value = MacAddr> {
    any::<[u8; 6]>().prop_map(MacAddr)
}

/// An Ethernet header. The EtherType is random on purpose: `FrameRepr::emit` must set
/// it from the IP version.
fn eth_repr() -> impl Strategy<Value = EthernetRepr> {
    let vlan = (0u8..8, any::<bool>(), 0u16..4096).prop_map(|(pcp, dei, vid)| VlanTag { pcp, dei, vid });
    (mac(), mac(), proptest::option::of(vlan), any::<u16>()).prop_map(|(dst, src, vlan, ethertype)| EthernetRepr {
        dst,
        src,
        vlan,
        ethertype,
    })
}

fn ip_repr() -> impl Strategy<Value = IpRepr> {
    let v4 = (any::<Ipv4Addr>(), any::<Ipv4Addr>(), any::<(u8, u16, bool, u8)>()).prop_map(
        |(src, dst, (tos, ident, df, ttl))| {
            IpRepr::V4(Ipv4Repr { src, dst, tos, ident, df, ttl, protocol: ipv4::PROTO_UDP })
        },
    );
    let v6 = (any::<Ipv6Addr>(), any::<Ipv6Addr>(), any::<(u8, u8)>(), 0u32..1 << 20).prop_map(
        |(src, dst, (traffic_class, hop_limit), flow_label)| {
            IpRepr::V6(Ipv6Repr { src, dst, traffic_class, flow_label, hop_limit, next_header: ipv4::PROTO_UDP })
        },
    );
    prop_oneof![v4, v6]
}

fn udp_repr() -> impl Strategy<Value = UdpRepr> {
    (any::<u16>(), prop_oneof![Just(UdpChecksum::Zero), Just(UdpChecksum::Computed)])
        .prop_map(|(src_port, checksum)| UdpRepr { src_port, dst_port: ROCEV2_UDP_PORT, checksum })
}

/// A valid frame description and the payload of its RoCEv2 packet.
fn frame_case(max_payload: usize) -> impl Strategy<Value = (FrameRepr, Vec<u8>)> {
    (eth_repr(), ip_repr(), udp_repr(), roce_case(max_payload), any::<bool>()).prop_map(
        |(eth, ip, udp, (roce, payload), pad_to_minimum)| (FrameRepr { eth, ip, udp, roce, pad_to_minimum }, payload),
    )
}

// ---------------------------------------------------------------------------------
// Strategies: damage.
// ---------------------------------------------------------------------------------

/// One edit to a byte string, positions chosen relative to its current length.
#[derive(Debug, Clone)]
enum Mutation {
    Set(Index, u8),
    FlipBit(Index, u8),
    Insert(Index, u8),
    Remove(Index),
    Truncate(Index),
    Extend(Vec<u8>),
}

impl Mutation {
    fn apply(&self, b: &mut Vec<u8>) {
        let n = b.len();
        match self {
            Mutation::Set(at, v) if n > 0 => b[at.index(n)] = *v,
            Mutation::FlipBit(at, bit) if n > 0 => b[at.index(n)] ^= 1 << *bit,
            Mutation::Insert(at, v) => b.insert(at.index(n + 1), *v),
            Mutation::Remove(at) if n > 0 => {
                b.remove(at.index(n));
            }
            Mutation::Truncate(at) if n > 0 => b.truncate(at.index(n)),
            Mutation::Extend(more) => b.extend_from_slice(more),
            _ => {}
        }
    }

    /// True if the edit keeps the length (so a frame's length fields still agree).
    fn keeps_length(&self) -> bool {
        matches!(self, Mutation::Set(..) | Mutation::FlipBit(..))
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<Index>(), any::<u8>()).prop_map(|(at, v)| Mutation::Set(at, v)),
        4 => (any::<Index>(), 0u8..8).prop_map(|(at, bit)| Mutation::FlipBit(at, bit)),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(at, v)| Mutation::Insert(at, v)),
        1 => any::<Index>().prop_map(Mutation::Remove),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        1 => vec(any::<u8>(), 1..8).prop_map(Mutation::Extend),
    ]
}

// ---------------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------------

/// Emits a RoCEv2 packet (BTH..ICRC), ICRC left zero.
fn emit_roce(repr: &RoceRepr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; repr.buffer_len()];
    let n = repr.emit(&mut buf, payload).expect("emit of a valid RoceRepr");
    assert_eq!(n, buf.len());
    buf
}

/// Emits a RoCEv2 packet and fills its ICRC for `ctx`.
fn emit_roce_with_icrc(repr: &RoceRepr, payload: &[u8], ctx: &IcrcContext) -> Vec<u8> {
    let mut buf = emit_roce(repr, payload);
    ctx.fill(&mut buf).expect("ICRC fill");
    buf
}

fn emit_frame(repr: &FrameRepr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; repr.buffer_len()];
    let n = repr.emit(&mut buf, payload).expect("emit of a valid FrameRepr");
    assert_eq!(n, buf.len());
    buf
}

fn ethertype_of(ip: &IpRepr) -> u16 {
    match ip {
        IpRepr::V4(_) => ethernet::ETHERTYPE_IPV4,
        IpRepr::V6(_) => ethernet::ETHERTYPE_IPV6,
    }
}

/// The ICRC context a UDP socket would rebuild for a datagram with these headers.
fn socket_context(ip: &IpRepr, udp: &UdpRepr) -> IcrcContext {
    let base = IcrcContext::new(ip.src(), ip.dst(), udp.src_port, udp.dst_port);
    match ip {
        IpRepr::V4(v4) => IcrcContext { ipv4_ident: v4.ident, ipv4_df: v4.df, ..base },
        IpRepr::V6(_) => base,
    }
}

/// The IP header a sender with context `ctx` puts on the wire: the one whose unmasked
/// fields the context describes. `tos` and `ttl` are masked by the ICRC, so any will do.
fn ip_for_context(ctx: &IcrcContext, tos: u8, ttl: u8) -> IpRepr {
    let to6 = |a: IpAddr| match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    };
    match (ctx.src, ctx.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => IpRepr::V4(Ipv4Repr {
            src,
            dst,
            tos,
            ident: ctx.ipv4_ident,
            df: ctx.ipv4_df,
            ttl,
            protocol: ipv4::PROTO_UDP,
        }),
        (src, dst) => IpRepr::V6(Ipv6Repr {
            src: to6(src),
            dst: to6(dst),
            traffic_class: tos,
            flow_label: u32::from(ttl) << 12,
            hop_limit: ttl,
            next_header: ipv4::PROTO_UDP,
        }),
    }
}

/// Wraps arbitrary bytes as the UDP payload of an Ethernet frame (UDP checksum zero),
/// so that whatever they are reaches the RoCEv2 parser through `parse_ethernet`.
fn wrap_in_frame(ip: &IpRepr, src_port: u16, roce_bytes: &[u8]) -> Vec<u8> {
    let eth = EthernetRepr {
        dst: MacAddr([2, 0, 0, 0, 0, 2]),
        src: MacAddr([2, 0, 0, 0, 0, 1]),
        vlan: None,
        ethertype: ethertype_of(ip),
    };
    let udp_len = udp::HEADER_LEN + roce_bytes.len();
    let mut buf = vec![0u8; ethernet::HEADER_LEN + ip.buffer_len() + udp_len];
    eth.emit(&mut buf).unwrap();
    let ip_end = ethernet::HEADER_LEN + ip.buffer_len();
    match ip {
        IpRepr::V4(r) => r.emit(&mut buf[ethernet::HEADER_LEN..ip_end], udp_len).unwrap(),
        IpRepr::V6(r) => r.emit(&mut buf[ethernet::HEADER_LEN..ip_end], udp_len).unwrap(),
    }
    let u = UdpRepr { src_port, dst_port: ROCEV2_UDP_PORT, checksum: UdpChecksum::Zero };
    u.emit(&mut buf[ip_end..ip_end + udp::HEADER_LEN], roce_bytes.len()).unwrap();
    buf[ip_end + udp::HEADER_LEN..].copy_from_slice(roce_bytes);
    buf
}

/// The bits of a BTH..ICRC packet that parsing may discard: reserved bits (IBA: ignored
/// on receive, zero on send), the pad bytes, and the ICRC. Everything else must survive
/// parse then emit.
fn dont_care_mask(info: &OpcodeInfo, pad: usize, len: usize) -> Vec<u8> {
    let mut m = vec![0u8; len];
    m[4] = 0x3f; // BTH Resv6a
    m[8] = 0x7f; // BTH Resv7
    if let Some(off) = info.offset_of(HeaderKind::Deth) {
        m[off + 4] = 0xff; // DETH reserved byte
    }
    if let Some(off) = info.offset_of(HeaderKind::Feth) {
        m[off..off + 3].fill(0xff); // FETH: only the low six bits mean anything
        m[off + 3] = 0xc0;
    }
    if let Some(off) = info.offset_of(HeaderKind::CnpBody) {
        m[off..off + HeaderKind::CnpBody.wire_len()].fill(0xff);
    }
    if let Some(off) = info.offset_of(HeaderKind::Xrceth) {
        m[off] = 0xff; // XRCETH reserved byte
    }
    m[len - ICRC_LEN - pad..].fill(0xff);
    m
}

// ---------------------------------------------------------------------------------
// Checks on arbitrary input: never panic; when accepted, the parse is canonical.
// ---------------------------------------------------------------------------------

/// `bytes` as the UDP payload (BTH..ICRC).
fn check_roce_bytes(bytes: &[u8]) -> Result<(), TestCaseError> {
    let checked = RocePacket::new_checked(bytes);
    let parsed = RoceRepr::parse(&RocePacket::new_unchecked(bytes));
    match (checked, parsed) {
        (Ok(p), Ok(repr)) => {
            // After `check`, no accessor panics and they agree with the repr.
            let info = p.info();
            prop_assert_eq!(info.opcode, repr.bth.opcode);
            for kind in HeaderKind::ALL {
                prop_assert_eq!(p.header(kind).map(<[u8]>::len), info.has(kind).then(|| kind.wire_len()));
            }
            prop_assert_eq!(p.payload().len(), repr.payload_len);
            prop_assert_eq!(p.pad_len(), repr.pad_len());
            prop_assert_eq!(p.without_icrc().len() + ICRC_LEN, bytes.len());
            prop_assert_eq!(&p.icrc().to_le_bytes()[..], &bytes[bytes.len() - ICRC_LEN..]);
            prop_assert_eq!(repr.validate(), Ok(info));
            prop_assert_eq!(repr.buffer_len(), bytes.len());
            prop_assert!(!repr.to_string().is_empty());
            // Re-emitting gives a packet that parses the same, and differs from the
            // input only in bits the parse is allowed to drop.
            let again = emit_roce(&repr, p.payload());
            let reparsed = RoceRepr::parse(&RocePacket::new_checked(&again[..])?)?;
            prop_assert_eq!(reparsed, repr);
            let mask = dont_care_mask(info, repr.pad_len(), bytes.len());
            for (i, ((a, b), m)) in bytes.iter().zip(&again).zip(&mask).enumerate() {
                prop_assert_eq!((a ^ b) & !m, 0, "byte {} lost in parse: {:02x} became {:02x}", i, a, b);
            }
        }
        (Err(a), Err(b)) => {
            prop_assert_eq!(a, b, "new_checked and parse disagree");
            prop_assert!(!a.to_string().is_empty());
        }
        (a, b) => {
            let why = format!("new_checked gave {:?} but parse {:?}", a.map(|_| ()), b);
            return Err(TestCaseError::fail(why));
        }
    }
    Ok(())
}

/// `bytes` as an Ethernet frame.
fn check_frame_bytes(bytes: &[u8]) -> Result<(), TestCaseError> {
    let p = match frame::parse_ethernet(bytes) {
        Ok(p) => p,
        Err(e) => {
            prop_assert!(!e.to_string().is_empty());
            return Ok(());
        }
    };
    // The layers agree with each other.
    prop_assert_eq!(RoceRepr::parse(&RocePacket::new_checked(p.roce_bytes)?)?, p.roce);
    prop_assert_eq!(p.icrc_ok(), p.check_icrc().is_ok());
    // The EtherType and the IP version nibble tell the same story.
    let eth = p.eth.expect("parse_ethernet fills eth");
    prop_assert_eq!(eth.ethertype, ethertype_of(&p.ip), "EtherType disagrees with the IP version");
    // Re-emitting gives a frame that parses the same, now with a good ICRC.
    let repr = p.frame_repr().expect("frame_repr of an Ethernet parse");
    let out = emit_frame(&repr, p.payload);
    let q = frame::parse_ethernet(&out)?;
    prop_assert_eq!((q.eth, q.ip, q.udp, q.roce, q.payload), (p.eth, p.ip, p.udp, p.roce, p.payload));
    prop_assert!(q.icrc_ok());
    Ok(())
}

/// `bytes` as a bare IP packet.
fn check_ip_bytes(bytes: &[u8]) -> Result<(), TestCaseError> {
    let p = match frame::parse_ip(bytes) {
        Ok(p) => p,
        Err(e) => {
            prop_assert!(!e.to_string().is_empty());
            return Ok(());
        }
    };
    prop_assert_eq!(p.eth, None);
    prop_assert_eq!(p.eth_padding, 0);
    prop_assert!(p.frame_repr().is_none());
    let eth = EthernetRepr { dst: MacAddr::default(), src: MacAddr::default(), vlan: None, ethertype: 0 };
    let repr = FrameRepr { eth, ip: p.ip, udp: p.udp, roce: p.roce, pad_to_minimum: false };
    let out = emit_frame(&repr, p.payload);
    let q = frame::parse_ip(&out[ethernet::HEADER_LEN..])?;
    prop_assert_eq!((q.ip, q.udp, q.roce, q.payload), (p.ip, p.udp, p.roce, p.payload));
    prop_assert!(q.icrc_ok());
    Ok(())
}

fn check_any_bytes(bytes: &[u8]) -> Result<(), TestCaseError> {
    check_roce_bytes(bytes)?;
    check_frame_bytes(bytes)?;
    check_ip_bytes(bytes)
}

// ---------------------------------------------------------------------------------
// The model of IBA's structural rules for a prefix of a packet (C9-5, C9-6).
// ---------------------------------------------------------------------------------

/// What a receiver must make of a packet: `Error::Truncated` is compared on `need` and
/// `have` only (its `what` is a label for humans).
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Accept { payload_len: usize },
    Truncated { need: usize, have: usize },
    Reject(Error),
}

impl Verdict {
    fn of(r: rnic_wire::Result<RoceRepr>) -> Verdict {
        match r {
            Ok(r) => Verdict::Accept { payload_len: r.payload_len },
            Err(Error::Truncated { need, have, .. }) => Verdict::Truncated { need, have },
            Err(e) => Verdict::Reject(e),
        }
    }
}

/// The verdict for `n` bytes whose BTH says opcode `info` and PadCnt `pad`: too short
/// for BTH + ICRC, then too short for the opcode's headers, then not whole words, then
/// PadCnt beyond what follows the headers, then payload on an opcode without one.
fn expected_verdict(info: &OpcodeInfo, pad: u8, n: usize) -> Verdict {
    let headers = info.payload_offset() + ICRC_LEN;
    if n < roce::MIN_LEN {
        return Verdict::Truncated { need: roce::MIN_LEN, have: n };
    }
    if n < headers {
        return Verdict::Truncated { need: headers, have: n };
    }
    if n % 4 != 0 {
        return Verdict::Reject(Error::Unaligned { len: n });
    }
    let available = n - headers;
    if usize::from(pad) > available {
        return Verdict::Reject(Error::PadExceedsPayload { pad, available });
    }
    if !info.payload && available > 0 {
        return Verdict::Reject(Error::UnexpectedPayload { opcode: info.opcode.0, len: available });
    }
    Verdict::Accept { payload_len: available - usize::from(pad) }
}

/// A fixed, non-trivial packet for `info` (every field non-zero where it can be).
fn sample_repr(info: &'static OpcodeInfo, payload_len: usize) -> RoceRepr {
    let keep = |kind| info.has(kind);
    RoceRepr {
        bth: BthRepr {
            opcode: info.opcode,
            se: info.se_allowed,
            migreq: true,
            pkey: 0xffff,
            fecn: false,
            becn: true,
            dest_qp: Qpn::new(0x12_3456),
            ack_req: info.request,
            psn: Psn::new(0xff_fffe),
        },
        ext: ExtHeaders {
            deth: keep(HeaderKind::Deth).then_some(DethRepr { qkey: 0x1111_1111, src_qp: Qpn::new(0x15) }),
            reth: keep(HeaderKind::Reth).then_some(RethRepr { va: 0x7f00_1234_5678, rkey: 0xdead_beef, dma_len: 4097 }),
            feth: keep(HeaderKind::Feth).then_some(FethRepr { placement_type: 2, selectivity: 1 }),
            atomic_eth: keep(HeaderKind::AtomicEth).then_some(AtomicEthRepr {
                va: 0x1000,
                rkey: 0x42,
                swap_add: 7,
                compare: 9,
            }),
            aeth: keep(HeaderKind::Aeth).then_some(AethRepr { syndrome: Syndrome::from_byte(0x1f), msn: 0x0a_bcde }),
            atomic_ack_eth: keep(HeaderKind::AtomicAckEth).then_some(AtomicAckEthRepr { orig_remote_data: 3 }),
            imm_data: keep(HeaderKind::ImmDt).then_some(0x0102_0304),
            ieth: keep(HeaderKind::Ieth).then_some(0x0506_0708),
            xrc_srqn: keep(HeaderKind::Xrceth).then_some(0x00ab_cdef),
        },
        payload_len,
    }
}

fn sample_payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| u8::try_from((i * 37 + 11) % 256).unwrap()).collect()
}

fn sample_context() -> IcrcContext {
    IcrcContext::new("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), 0xc123, ROCEV2_UDP_PORT)
}

// ---------------------------------------------------------------------------------
// 1. Emit then parse is the identity.
// ---------------------------------------------------------------------------------

proptest! {
    #[test]
    fn roce_emit_then_parse_is_identity(
        (repr, payload) in roce_case(4096),
        ctx in icrc_context(),
        flips in vec((any::<Index>(), 0u8..8, any::<bool>()), 1..6),
    ) {
        let info = repr.validate()?;
        let len = repr.buffer_len();
        prop_assert_eq!(len, info.payload_offset() + payload.len() + roce::pad_for(payload.len()) + ICRC_LEN);
        prop_assert_eq!(len % 4, 0);

        // Over a poisoned buffer with room to spare, emit writes exactly `len` bytes,
        // and the pad and (not yet computed) ICRC are zeros.
        let mut buf = vec![0xa5u8; len + 8];
        prop_assert_eq!(repr.emit(&mut buf, &payload), Ok(len));
        prop_assert!(buf[len..].iter().all(|&b| b == 0xa5), "emit wrote past buffer_len()");
        buf.truncate(len);
        prop_assert!(buf[info.payload_offset() + payload.len()..].iter().all(|&b| b == 0));

        let p = RocePacket::new_checked(&buf[..])?;
        prop_assert_eq!(RoceRepr::parse(&p), Ok(repr));
        prop_assert_eq!(p.payload(), &payload[..]);
        prop_assert_eq!(p.pad_len(), roce::pad_for(payload.len()));

        // The ICRC verifies, and does not change what the packet parses to.
        ctx.fill(&mut buf)?;
        ctx.verify(&buf)?;
        prop_assert_eq!(RoceRepr::parse(&RocePacket::new_checked(&buf[..])?), Ok(repr));

        // FECN, BECN and Resv6a are masked (Annex A17.3.3): switches may mark them.
        for bit in 0..8 {
            buf[bth::ICRC_MASKED_BYTE] ^= 1 << bit;
            prop_assert_eq!(ctx.verify(&buf), Ok(()), "masked bit {} changed the ICRC", bit);
            buf[bth::ICRC_MASKED_BYTE] ^= 1 << bit;
        }
        // Any other single-bit error is caught (CRC-32 detects all of them), whether in
        // the headers, the payload, the pad or the ICRC itself.
        for (at, bit, in_headers) in flips {
            let i = at.index(if in_headers { info.payload_offset() } else { len });
            if i == bth::ICRC_MASKED_BYTE {
                continue;
            }
            buf[i] ^= 1 << bit;
            let verdict = ctx.verify(&buf);
            buf[i] ^= 1 << bit;
            prop_assert!(
                matches!(verdict, Err(Error::BadIcrc { .. })),
                "flipping byte {} bit {} of {} went unnoticed: {:?}", i, bit, len, verdict
            );
        }
    }

    #[test]
    fn frame_emit_then_parse_is_identity((repr, payload) in frame_case(4096)) {
        let n = repr.buffer_len();
        let unpadded = repr.unpadded_len();
        let eth_len = repr.eth.buffer_len();
        prop_assert_eq!(unpadded, eth_len + repr.ip.buffer_len() + udp::HEADER_LEN + repr.roce.buffer_len());
        prop_assert_eq!(n, if repr.pad_to_minimum { unpadded.max(ethernet::MIN_FRAME_LEN) } else { unpadded });

        let mut buf = vec![0xa5u8; n + 8];
        prop_assert_eq!(repr.emit(&mut buf, &payload), Ok(n));
        prop_assert!(buf[n..].iter().all(|&b| b == 0xa5), "emit wrote past buffer_len()");
        buf.truncate(n);

        let p = frame::parse_ethernet(&buf)?;
        let want_eth = EthernetRepr { ethertype: ethertype_of(&repr.ip), ..repr.eth };
        prop_assert_eq!(p.eth, Some(want_eth));
        prop_assert_eq!(p.ip, repr.ip);
        prop_assert_eq!(p.udp, repr.udp);
        prop_assert_eq!(p.roce, repr.roce);
        prop_assert_eq!(p.payload, &payload[..]);
        prop_assert_eq!(p.eth_padding, n - unpadded);
        prop_assert!(p.icrc_ok(), "ICRC {:08x} computed {:08x}", p.icrc_received, p.icrc_computed);

        // A UDP socket sees only BTH..ICRC and rebuilds the rest from what it knows:
        // the ICRC masks exactly what it cannot know (TOS, TTL, flow label, checksum).
        socket_context(&p.ip, &p.udp).verify(p.roce_bytes)?;

        // The parse re-emits the very same bytes.
        let again = p.frame_repr().expect("an Ethernet parse has a frame_repr");
        prop_assert_eq!(emit_frame(&again, p.payload), buf.clone());

        // The bare IP packet parses the same, Ethernet padding ignored.
        let ip = frame::parse_ip(&buf[eth_len..])?;
        prop_assert_eq!((ip.ip, ip.udp, ip.roce, ip.payload), (repr.ip, repr.udp, repr.roce, &payload[..]));
        prop_assert!(ip.icrc_ok());
    }
}

// ---------------------------------------------------------------------------------
// 2. No input panics.
// ---------------------------------------------------------------------------------

proptest! {
    /// A receiver parses every packet into the one representation it keeps
    /// (`RoceRepr::parse_into`): whatever the previous packet left there, a good packet
    /// parses to what a fresh parse gives, and a bad one fails as it does.
    #[test]
    fn parse_into_a_reused_repr_equals_a_fresh_parse(
        (first, first_payload) in roce_case(256),
        (second, second_payload) in roce_case(256),
        cut in 0usize..64,
    ) {
        let mut kept = RoceRepr::EMPTY;
        let a = emit_roce(&first, &first_payload);
        RoceRepr::parse_into(&RocePacket::new_checked(&a[..])?, &mut kept)?;
        prop_assert_eq!(kept, first);
        let b = emit_roce(&second, &second_payload);
        RoceRepr::parse_into(&RocePacket::new_checked(&b[..])?, &mut kept)?;
        prop_assert_eq!(kept, second);
        // Damaged: the same verdict as `parse`, and a good packet after it still parses.
        let short = &a[..a.len().saturating_sub(cut + 1)];
        if let Ok(p) = RocePacket::new_checked(short) {
            let fresh = RoceRepr::parse(&p);
            let into = RoceRepr::parse_into(&p, &mut kept).map(|()| kept);
            prop_assert_eq!(fresh, into);
        }
        RoceRepr::parse_into(&RocePacket::new_checked(&b[..])?, &mut kept)?;
        prop_assert_eq!(kept, second);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..2048)) {
        check_any_bytes(&bytes)?;
    }

    #[test]
    fn damaged_frames_never_panic(
        (repr, payload) in frame_case(64),
        edits in vec(mutation(), 1..4),
    ) {
        let mut bytes = emit_frame(&repr, &payload);
        for m in &edits {
            m.apply(&mut bytes);
        }
        check_any_bytes(&bytes)?;
        // And the IP packet and UDP payload inside, wherever they now are.
        let ip_at = repr.eth.buffer_len();
        let roce_at = repr.unpadded_len() - repr.roce.buffer_len();
        if let Some(ip) = bytes.get(ip_at..) {
            check_ip_bytes(ip)?;
        }
        if let Some(roce) = bytes.get(roce_at..) {
            check_roce_bytes(roce)?;
        }
    }

    /// Damaged UDP payloads, alone and inside a frame: the frame reports exactly the
    /// error the bare packet gets, and its ICRC verdict is the socket context's.
    #[test]
    fn damaged_roce_packets_never_panic(
        (repr, payload) in roce_case(64),
        ctx in icrc_context(),
        (tos, ttl) in any::<(u8, u8)>(),
        edits in vec(mutation(), 1..4),
    ) {
        // The frame's UDP header must say 4791 for the ICRC verdicts to be comparable.
        let ctx = IcrcContext { dst_port: ROCEV2_UDP_PORT, ..ctx };
        let mut bytes = emit_roce_with_icrc(&repr, &payload, &ctx);
        for m in &edits {
            m.apply(&mut bytes);
        }
        check_roce_bytes(&bytes)?;

        let ip = ip_for_context(&ctx, tos, ttl);
        let framed = wrap_in_frame(&ip, ctx.src_port, &bytes);
        check_frame_bytes(&framed)?;
        match (frame::parse_ethernet(&framed), RocePacket::new_checked(&bytes[..])) {
            (Ok(f), Ok(_)) => {
                prop_assert_eq!(f.roce_bytes, &bytes[..]);
                prop_assert_eq!(f.icrc_ok(), ctx.verify(&bytes).is_ok());
                if edits.iter().all(Mutation::keeps_length) {
                    // Same length: the ICRC is good exactly when no unmasked byte changed
                    // (up to a 2^-32 coincidence for multi-byte damage).
                    let orig = emit_roce_with_icrc(&repr, &payload, &ctx);
                    let changed = orig.iter().zip(&bytes).enumerate()
                        .any(|(i, (a, b))| i != bth::ICRC_MASKED_BYTE && a != b);
                    prop_assert_eq!(f.icrc_ok(), !changed);
                }
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => {
                let why = format!("frame {:?} but packet {:?}", a.map(|_| ()), b.map(|_| ()));
                return Err(TestCaseError::fail(why));
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// 3. Truncation at every offset.
// ---------------------------------------------------------------------------------

/// Every prefix of a packet of every opcode (payloads 0..=13 bytes, so every pad
/// value and every alignment occurs) gets the model's verdict. The prefixes the model
/// accepts are real, shorter packets of the same opcode (a SEND cut at a word boundary
/// is structurally fine), so there the ICRC is what must catch the cut.
///
/// Deterministic rather than random: with fixed bytes the "ICRC catches the cut"
/// assertion cannot fail by a 2^-32 coincidence on some unlucky run.
#[test]
fn every_prefix_of_every_opcode_gets_the_model_verdict() {
    let ctx = sample_context();
    let mut accepted_prefixes = 0;
    for info in opcode::all() {
        let lens = if info.payload { 0..=13 } else { 0..=0 };
        for payload_len in lens {
            let repr = sample_repr(info, payload_len);
            let packet = emit_roce_with_icrc(&repr, &sample_payload(payload_len), &ctx);
            let pad = u8::try_from(repr.pad_len()).unwrap();
            assert_eq!(
                Verdict::of(RoceRepr::parse(&RocePacket::new_unchecked(&packet[..]))),
                Verdict::Accept { payload_len },
                "{} len {payload_len}: the whole packet",
                info.name
            );
            for n in 0..packet.len() {
                let prefix = &packet[..n];
                let got = RoceRepr::parse(&RocePacket::new_unchecked(prefix));
                let want = expected_verdict(info, pad, n);
                assert_eq!(Verdict::of(got), want, "{} len {payload_len} cut at {n}", info.name);
                assert_eq!(RocePacket::new_checked(prefix).err(), got.err(), "{} cut at {n}", info.name);
                if let Ok(short) = got {
                    accepted_prefixes += 1;
                    assert_eq!((short.bth, short.ext), (repr.bth, repr.ext), "{} cut at {n}", info.name);
                    assert!(
                        matches!(ctx.verify(prefix), Err(Error::BadIcrc { .. })),
                        "{} len {payload_len} cut at {n}: the ICRC did not catch the cut",
                        info.name
                    );
                }
            }
        }
    }
    // The ICRC branch above is not vacuous.
    assert!(accepted_prefixes > 100, "{accepted_prefixes}");
}

proptest! {
    /// A frame cut anywhere short of its IP datagram is `Truncated`, at whatever layer
    /// the cut falls; cutting only Ethernet padding changes nothing.
    #[test]
    fn truncated_frames_are_truncated((repr, payload) in frame_case(64)) {
        let frame_bytes = emit_frame(&repr, &payload);
        let whole = frame::parse_ethernet(&frame_bytes)?;
        for n in 0..frame_bytes.len() {
            let got = frame::parse_ethernet(&frame_bytes[..n]);
            if n < repr.unpadded_len() {
                prop_assert!(matches!(got, Err(Error::Truncated { .. })), "cut at {}: {:?}", n, got.map(|_| ()));
            } else {
                let got = got?;
                prop_assert_eq!((got.eth, got.ip, got.udp, got.roce), (whole.eth, whole.ip, whole.udp, whole.roce));
                prop_assert!(got.icrc_ok());
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// 4. Each malformation has its own error.
// ---------------------------------------------------------------------------------

proptest! {
    /// IBA C9-5: TVer must be 0.
    #[test]
    fn tver_other_than_zero_is_bad_tver((repr, payload) in roce_case(64), tver in 1u8..16) {
        let mut b = emit_roce(&repr, &payload);
        prop_assert_eq!(b[1] & 0x0f, 0);
        b[1] |= tver;
        prop_assert_eq!(RocePacket::new_checked(&b[..]).err(), Some(Error::BadTver(tver)));
        prop_assert_eq!(RoceRepr::parse(&RocePacket::new_unchecked(&b[..])).err(), Some(Error::BadTver(tver)));
        prop_assert_eq!(BthRepr::parse(&bth::Packet::new_unchecked(&b[..])).err(), Some(Error::BadTver(tver)));
    }

    /// PadCnt can only exceed what follows the headers when nothing does: any non-zero
    /// PadCnt on an empty payload, whatever the opcode.
    #[test]
    fn pad_beyond_the_payload_is_refused((repr, payload) in roce_case(0), pad in 1u8..4) {
        let mut b = emit_roce(&repr, &payload);
        b[1] |= pad << 4;
        let want = Some(Error::PadExceedsPayload { pad, available: 0 });
        prop_assert_eq!(RocePacket::new_checked(&b[..]).err(), want);
        prop_assert_eq!(RoceRepr::parse(&RocePacket::new_unchecked(&b[..])).err(), want);
    }

    /// IBA C9-5: BTH..ICRC is whole words.
    #[test]
    fn length_not_whole_words_is_unaligned((repr, payload) in roce_case(64), extra in vec(any::<u8>(), 1..4)) {
        let mut b = emit_roce(&repr, &payload);
        b.extend_from_slice(&extra);
        let want = Some(Error::Unaligned { len: b.len() });
        prop_assert_eq!(RocePacket::new_checked(&b[..]).err(), want);
        prop_assert_eq!(RoceRepr::parse(&RocePacket::new_unchecked(&b[..])).err(), want);
    }

    /// Words after the headers of an opcode that carries no payload.
    #[test]
    fn payload_on_an_opcode_without_one_is_refused(
        (repr, payload) in roce_case_for(
            proptest::sample::select(opcode::all().filter(|i| !i.payload).collect::<Vec<_>>()),
            0,
        ),
        words in 1usize..64,
    ) {
        let mut b = emit_roce(&repr, &payload);
        let at = b.len() - ICRC_LEN;
        b.splice(at..at, vec![0u8; 4 * words]);
        let want = Some(Error::UnexpectedPayload { opcode: repr.bth.opcode.0, len: 4 * words });
        prop_assert_eq!(RocePacket::new_checked(&b[..]).err(), want);
    }
}

/// IBA C9-6: every opcode byte outside the table is `UnknownOpcode`, whatever the
/// packet's length, alone and inside a frame; no opcode in the table is.
#[test]
fn every_opcode_outside_the_table_is_unknown_opcode() {
    let ctx = sample_context();
    let ip = ip_for_context(&ctx, 0, 64);
    let mut unknown = 0;
    for op in 0..=255u8 {
        for len in [16, 20, 64, 1024] {
            let mut b = vec![0u8; len];
            b[0] = op;
            let got = RocePacket::new_checked(&b[..]).err();
            if Opcode(op).info().is_none() {
                assert_eq!(got, Some(Error::UnknownOpcode(op)), "opcode {op:#04x} len {len}");
                let framed = wrap_in_frame(&ip, ctx.src_port, &b);
                assert_eq!(frame::parse_ethernet(&framed).err(), Some(Error::UnknownOpcode(op)));
            } else {
                assert_ne!(got, Some(Error::UnknownOpcode(op)), "{op:#04x} is in the table");
            }
        }
        unknown += usize::from(Opcode(op).info().is_none());
    }
    assert_eq!(unknown, 256 - opcode::all().count());
}

/// A frame's EtherType and its IP version nibble must tell the same story, or the parse
/// is not canonical: `frame_repr()` re-emits the EtherType from the version nibble, so
/// an IPv4 packet accepted under EtherType 0x86DD comes back under 0x0800.
///
/// Found by `fuzz/parse_frame` within seconds, when `parse_ethernet` dispatched on the
/// version nibble alone; it now refuses the mismatch.
#[test]
fn ethertype_must_agree_with_the_ip_version() {
    let repr = sample_repr(Opcode::RC_SEND_ONLY.info().unwrap(), 3);
    let v4 = sample_context();
    let v6 = IcrcContext::new("fe80::1".parse().unwrap(), "fe80::2".parse().unwrap(), 0xc123, ROCEV2_UDP_PORT);
    for (ctx, wrong) in [(v4, ethernet::ETHERTYPE_IPV6), (v6, ethernet::ETHERTYPE_IPV4)] {
        let packet = emit_roce_with_icrc(&repr, &sample_payload(3), &ctx);
        let mut f = wrap_in_frame(&ip_for_context(&ctx, 0, 64), ctx.src_port, &packet);
        assert!(frame::parse_ethernet(&f).is_ok());
        f[12..14].copy_from_slice(&wrong.to_be_bytes());
        let got = frame::parse_ethernet(&f).map(|p| (p.eth.map(|e| e.ethertype), p.ip));
        assert!(matches!(got, Err(Error::BadIpVersion(_))), "EtherType {wrong:#06x}: {got:?}");
    }
}
