//! The checks the fuzz targets run. Each takes arbitrary bytes and hands them to one of
//! rnic-wire's parsers. libFuzzer reports a crash when the parser panics, or when one of
//! the assertions here fails: an input the parser accepts must be canonical, that is,
//! re-emitting what was parsed gives bytes that parse to the same thing, and nothing
//! but reserved bits, pad bytes and the ICRC is lost on the way.
//!
//! `rnic-wire/tests/proptest_roundtrip.rs` states the same properties over generated
//! inputs; these are their coverage-guided counterparts.
#![forbid(unsafe_code)]

use rnic_wire::ethernet::{self, EthernetRepr, MacAddr};
use rnic_wire::frame::{self, FrameRepr};
use rnic_wire::ipv4::{self, Ipv4Repr};
use rnic_wire::roce::{RocePacket, RoceRepr};
use rnic_wire::udp::{self, UdpChecksum, UdpRepr};
use rnic_wire::{HeaderKind, OpcodeInfo, ICRC_LEN, ROCEV2_UDP_PORT};

/// `data` as a UDP payload: BTH..ICRC.
pub fn check_roce(data: &[u8]) {
    let checked = RocePacket::new_checked(data);
    let parsed = RoceRepr::parse(&RocePacket::new_unchecked(data));
    let (p, repr) = match (checked, parsed) {
        (Ok(p), Ok(repr)) => (p, repr),
        (Err(a), Err(b)) => {
            assert_eq!(a, b, "new_checked and parse disagree");
            let _ = a.to_string();
            return;
        }
        (a, b) => panic!("new_checked gave {:?} but parse gave {:?}", a.map(|_| ()), b),
    };
    // After `check` no accessor panics, and they agree with the representation.
    let info = p.info();
    assert_eq!(info.opcode, repr.bth.opcode);
    for kind in HeaderKind::ALL {
        assert_eq!(p.header(kind).map(<[u8]>::len), info.has(kind).then(|| kind.wire_len()));
    }
    assert_eq!(p.payload().len(), repr.payload_len);
    assert_eq!(p.pad_len(), repr.pad_len());
    assert_eq!(p.without_icrc().len() + ICRC_LEN, data.len());
    assert_eq!(&p.icrc().to_le_bytes()[..], &data[data.len() - ICRC_LEN..]);
    assert_eq!(repr.validate(), Ok(info));
    assert_eq!(repr.buffer_len(), data.len());
    let _ = repr.to_string();

    let mut again = vec![0u8; repr.buffer_len()];
    repr.emit(&mut again, p.payload()).expect("re-emit of a parsed packet");
    let reparsed = RoceRepr::parse(&RocePacket::new_checked(&again[..]).expect("re-emitted packet checks"))
        .expect("re-emitted packet parses");
    assert_eq!(reparsed, repr, "re-emitted packet parses differently");
    let mask = dont_care_mask(info, repr.pad_len(), data.len());
    for (i, ((a, b), m)) in data.iter().zip(&again).zip(&mask).enumerate() {
        assert_eq!((a ^ b) & !m, 0, "byte {i} lost in parse: {a:02x} became {b:02x}");
    }
}

/// `data` as an Ethernet frame.
pub fn check_frame(data: &[u8]) {
    let p = match frame::parse_ethernet(data) {
        Ok(p) => p,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let roce =
        RoceRepr::parse(&RocePacket::new_checked(p.roce_bytes).expect("roce_bytes check")).expect("roce_bytes parse");
    assert_eq!(roce, p.roce);
    assert_eq!(p.icrc_ok(), p.check_icrc().is_ok());
    let repr = p.frame_repr().expect("an Ethernet parse has a frame_repr");
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut out, p.payload).expect("re-emit of a parsed frame");
    let q = frame::parse_ethernet(&out).expect("re-emitted frame parses");
    assert_eq!(
        (q.eth, q.ip, q.udp, q.roce, q.payload),
        (p.eth, p.ip, p.udp, p.roce, p.payload),
        "re-emitted frame parses differently"
    );
    assert!(q.icrc_ok(), "re-emitted frame has a bad ICRC");
}

/// `data` as a bare IPv4 or IPv6 packet.
pub fn check_ip(data: &[u8]) {
    let p = match frame::parse_ip(data) {
        Ok(p) => p,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    assert!(p.eth.is_none() && p.eth_padding == 0 && p.frame_repr().is_none());
    let eth = EthernetRepr { dst: MacAddr::default(), src: MacAddr::default(), vlan: None, ethertype: 0 };
    let repr = FrameRepr { eth, ip: p.ip, udp: p.udp, roce: p.roce, pad_to_minimum: false };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut out, p.payload).expect("re-emit of a parsed IP packet");
    let q = frame::parse_ip(&out[ethernet::HEADER_LEN..]).expect("re-emitted IP packet parses");
    assert_eq!((q.ip, q.udp, q.roce, q.payload), (p.ip, p.udp, p.roce, p.payload));
    assert!(q.icrc_ok(), "re-emitted IP packet has a bad ICRC");
}

/// `data` as the UDP payload of an otherwise well-formed IPv4 frame: the frame parser
/// must report exactly what the packet parser reports.
pub fn check_roce_in_frame(data: &[u8]) {
    let v4 = Ipv4Repr {
        src: [10, 0, 0, 1].into(),
        dst: [10, 0, 0, 2].into(),
        tos: 0,
        ident: 0,
        df: true,
        ttl: 64,
        protocol: ipv4::PROTO_UDP,
    };
    let eth = EthernetRepr {
        dst: MacAddr([2, 0, 0, 0, 0, 2]),
        src: MacAddr([2, 0, 0, 0, 0, 1]),
        vlan: None,
        ethertype: ethernet::ETHERTYPE_IPV4,
    };
    let udp_len = udp::HEADER_LEN + data.len();
    let ip_end = ethernet::HEADER_LEN + ipv4::HEADER_LEN;
    let mut f = vec![0u8; ip_end + udp_len];
    eth.emit(&mut f).expect("Ethernet header");
    if v4.emit(&mut f[ethernet::HEADER_LEN..ip_end], udp_len).is_err() {
        return; // longer than an IPv4 datagram can be
    }
    let u = UdpRepr { src_port: 0xc000, dst_port: ROCEV2_UDP_PORT, checksum: UdpChecksum::Zero };
    u.emit(&mut f[ip_end..ip_end + udp::HEADER_LEN], data.len()).expect("UDP header");
    f[ip_end + udp::HEADER_LEN..].copy_from_slice(data);
    match (frame::parse_ethernet(&f), RocePacket::new_checked(data)) {
        (Ok(p), Ok(_)) => assert_eq!(p.roce_bytes, data),
        (Err(a), Err(b)) => assert_eq!(a, b, "the frame and its UDP payload get different errors"),
        (a, b) => panic!("frame gave {:?} but packet gave {:?}", a.map(|_| ()), b.map(|_| ())),
    }
}

/// The bits of a BTH..ICRC packet that parsing may discard: reserved bits (ignored on
/// receive, zero on send), the pad bytes and the ICRC.
fn dont_care_mask(info: &OpcodeInfo, pad: usize, len: usize) -> Vec<u8> {
    let mut m = vec![0u8; len];
    m[4] = 0x3f; // BTH Resv6a
    m[8] = 0x7f; // BTH Resv7
    if let Some(off) = info.offset_of(HeaderKind::Deth) {
        m[off + 4] = 0xff;
    }
    if let Some(off) = info.offset_of(HeaderKind::Feth) {
        m[off..off + 3].fill(0xff);
        m[off + 3] = 0xc0;
    }
    if let Some(off) = info.offset_of(HeaderKind::CnpBody) {
        m[off..off + HeaderKind::CnpBody.wire_len()].fill(0xff);
    }
    m[len - ICRC_LEN - pad..].fill(0xff);
    m
}

/// `data` as a message between processes sharing a device, and as a datagram their
/// steering program reads (with the message's table, if it is one, else a table made of
/// its first bytes).
pub fn check_share(data: &[u8]) {
    use rnic_core::share::{member_of, parse_probe, program, run_program, Msg, MEMBERS};
    let table: Vec<u8> = match Msg::decode(data) {
        Some(msg) => {
            let mut again = Vec::new();
            msg.encode(&mut again);
            assert_eq!(again, data, "a decoded message re-encodes to other bytes");
            match msg {
                Msg::Table(t) => t.to_vec(),
                _ => Vec::new(),
            }
        }
        None => {
            let mut t: Vec<u8> = data.iter().take(8).map(|b| b % MEMBERS).collect();
            t.dedup();
            t
        }
    };
    let mut seen = [false; 64];
    let table: Vec<u8> = table.into_iter().filter(|&m| !std::mem::replace(&mut seen[usize::from(m)], true)).collect();
    let got = run_program(&program(&table), data).expect("the program runs to a return");
    let want = if data.first() == Some(&0xFF) {
        u32::from(*data.get(1).unwrap_or(&0))
    } else if data.len() < 8 {
        0
    } else {
        let qpn = u32::from_be_bytes([0, data[5], data[6], data[7]]);
        let index_of = |m: u8| table.iter().position(|&x| x == m).map_or(u32::MAX, |i| i as u32);
        if qpn == 1 {
            table.iter().min().map_or(u32::MAX, |&a| index_of(a))
        } else {
            index_of(member_of(qpn))
        }
    };
    assert_eq!(got, want, "table {table:?}");
    let _ = parse_probe(data);
}
