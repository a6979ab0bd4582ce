//! The CM message views field by field: every setter writes only its own bits and its
//! getter reads back what it wrote (whatever the bytes around it), the fields of each
//! message and the reserved bits of its IBA table tile the 232 bytes of MAD data exactly,
//! and every view refuses a short buffer with an error instead of panicking.
#![allow(clippy::cast_possible_truncation)] // the test narrows random u64s on purpose

use rnic_wire::cm::{
    attr, drep, dreq, mra, rej, rep, req, rtu, sidr_rep, sidr_req, CmDreq, CmIds, CmMessage, CmMra, CmPath, CmRej,
    CmRep, CmReq, CmSidrRep, CmSidrReq, CmTransport, MsgRef, SidrStatus,
};
use rnic_wire::mad::DATA_LEN;
use rnic_wire::Error;

/// splitmix64: a fixed-seed generator, so a failure names a reproducible case.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn buffer(&mut self) -> [u8; DATA_LEN] {
        std::array::from_fn(|_| self.next() as u8)
    }
}

/// What one field holds, as a number the test can compare.
#[derive(Clone, Copy)]
enum Kind {
    /// An integer, flag or enum of this many bits: `get` reads back `v` masked to them.
    Bits(u32),
    /// A byte region: `set` writes `pattern(v)`, `get` returns its hash.
    Bytes(usize),
}

/// One field of a view, reached through the view's getter and setter.
struct Field {
    name: &'static str,
    kind: Kind,
    get: fn(&[u8]) -> u64,
    set: fn(&mut [u8], u64),
}

impl Field {
    fn expect(&self, v: u64) -> u64 {
        match self.kind {
            Kind::Bits(64) => v,
            Kind::Bits(w) => v & ((1 << w) - 1),
            Kind::Bytes(n) => hash(&pattern(n, v)),
        }
    }
}

/// `n` bytes from `v`: all 0 for 0, all 0xff for `u64::MAX`, mixed otherwise.
fn pattern(n: usize, v: u64) -> Vec<u8> {
    (0..n).map(|k| v.rotate_left(7 * k as u32) as u8).collect()
}

/// FNV-1a.
fn hash(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3))
}

fn to_array<const N: usize>(v: Vec<u8>) -> [u8; N] {
    v.try_into().unwrap()
}

const TRANSPORTS: [CmTransport; 4] = [CmTransport::Rc, CmTransport::Uc, CmTransport::Rd, CmTransport::Other];
const MSG_REFS: [MsgRef; 4] = [MsgRef::Req, MsgRef::Rep, MsgRef::Other, MsgRef::Reserved];

/// An integer field of `$width` bits whose setter takes `$ty`.
macro_rules! int {
    ($m:ident, $get:ident, $set:ident, $ty:ty, $width:expr) => {
        Field {
            name: stringify!($get),
            kind: Kind::Bits($width),
            get: |b| u64::from($m::Packet::new_unchecked(b).$get()),
            set: |b, v| $m::Packet::new_unchecked(b).$set(v as $ty),
        }
    };
}

macro_rules! flag {
    ($m:ident, $get:ident, $set:ident) => {
        Field {
            name: stringify!($get),
            kind: Kind::Bits(1),
            get: |b| u64::from($m::Packet::new_unchecked(b).$get()),
            set: |b, v| $m::Packet::new_unchecked(b).$set(v & 1 != 0),
        }
    };
}

/// A two-bit enum field: `v & 3` indexes `$all`.
macro_rules! two_bits {
    ($m:ident, $get:ident, $set:ident, $all:expr) => {
        Field {
            name: stringify!($get),
            kind: Kind::Bits(2),
            get: |b| {
                let x = $m::Packet::new_unchecked(b).$get();
                $all.iter().position(|&y| y == x).unwrap() as u64
            },
            set: |b, v| $m::Packet::new_unchecked(b).$set($all[(v & 3) as usize]),
        }
    };
}

macro_rules! bytes {
    ($m:ident, $get:ident, $set:ident, $n:expr) => {
        Field {
            name: stringify!($get),
            kind: Kind::Bytes($n),
            get: |b| hash(&$m::Packet::new_unchecked(b).$get()),
            set: |b, v| $m::Packet::new_unchecked(b).$set(&to_array(pattern($n, v))),
        }
    };
}

/// A field of one of the REQ's paths (`$path`/`$path_mut`: primary or alternate).
macro_rules! path {
    ($path:ident, $path_mut:ident, int $get:ident, $set:ident, $ty:ty, $width:expr) => {
        Field {
            name: concat!(stringify!($path), ".", stringify!($get)),
            kind: Kind::Bits($width),
            get: |b| u64::from(req::Packet::new_unchecked(b).$path().$get()),
            set: |b, v| req::Packet::new_unchecked(b).$path_mut().$set(v as $ty),
        }
    };
    ($path:ident, $path_mut:ident, flag $get:ident, $set:ident) => {
        Field {
            name: concat!(stringify!($path), ".", stringify!($get)),
            kind: Kind::Bits(1),
            get: |b| u64::from(req::Packet::new_unchecked(b).$path().$get()),
            set: |b, v| req::Packet::new_unchecked(b).$path_mut().$set(v & 1 != 0),
        }
    };
    ($path:ident, $path_mut:ident, gid $get:ident, $set:ident) => {
        Field {
            name: concat!(stringify!($path), ".", stringify!($get)),
            kind: Kind::Bytes(16),
            get: |b| hash(&req::Packet::new_unchecked(b).$path().$get()),
            set: |b, v| req::Packet::new_unchecked(b).$path_mut().$set(&to_array(pattern(16, v))),
        }
    };
}

macro_rules! path_fields {
    ($path:ident, $path_mut:ident) => {
        [
            path!($path, $path_mut, int local_lid, set_local_lid, u16, 16),
            path!($path, $path_mut, int remote_lid, set_remote_lid, u16, 16),
            path!($path, $path_mut, gid local_gid, set_local_gid),
            path!($path, $path_mut, gid remote_gid, set_remote_gid),
            path!($path, $path_mut, int flow_label, set_flow_label, u32, 20),
            path!($path, $path_mut, int packet_rate, set_packet_rate, u8, 6),
            path!($path, $path_mut, int traffic_class, set_traffic_class, u8, 8),
            path!($path, $path_mut, int hop_limit, set_hop_limit, u8, 8),
            path!($path, $path_mut, int sl, set_sl, u8, 4),
            path!($path, $path_mut, flag subnet_local, set_subnet_local),
            path!($path, $path_mut, int local_ack_timeout, set_local_ack_timeout, u8, 5),
        ]
    };
}

fn req_fields() -> Vec<Field> {
    let mut f = vec![
        int!(req, local_comm_id, set_local_comm_id, u32, 32),
        int!(req, service_id, set_service_id, u64, 64),
        int!(req, local_ca_guid, set_local_ca_guid, u64, 64),
        int!(req, local_qkey, set_local_qkey, u32, 32),
        int!(req, local_qpn, set_local_qpn, u32, 24),
        int!(req, responder_resources, set_responder_resources, u8, 8),
        int!(req, local_eecn, set_local_eecn, u32, 24),
        int!(req, initiator_depth, set_initiator_depth, u8, 8),
        int!(req, remote_eecn, set_remote_eecn, u32, 24),
        int!(req, remote_cm_response_timeout, set_remote_cm_response_timeout, u8, 5),
        two_bits!(req, transport, set_transport, TRANSPORTS),
        flag!(req, end_to_end_flow_control, set_end_to_end_flow_control),
        int!(req, starting_psn, set_starting_psn, u32, 24),
        int!(req, local_cm_response_timeout, set_local_cm_response_timeout, u8, 5),
        int!(req, retry_count, set_retry_count, u8, 3),
        int!(req, pkey, set_pkey, u16, 16),
        int!(req, path_mtu, set_path_mtu, u8, 4),
        flag!(req, rdc_exists, set_rdc_exists),
        int!(req, rnr_retry_count, set_rnr_retry_count, u8, 3),
        int!(req, max_cm_retries, set_max_cm_retries, u8, 4),
        flag!(req, srq, set_srq),
        int!(req, extended_transport_type, set_extended_transport_type, u8, 3),
        flag!(req, sap_supported, set_sap_supported),
        bytes!(req, private_data, set_private_data, 92),
    ];
    f.extend(path_fields!(primary_path, primary_path_mut));
    f.extend(path_fields!(alternate_path, alternate_path_mut));
    f
}

/// Reserved bits of IBA Table 106: two reserved words, and in each path the 4 bits after
/// the flow label, the 2 before the packet rate, the 3 after SubnetLocal and the 3 after
/// the local ACK timeout (2 in the alternate path, whose last byte also holds SAP Supported).
const REQ_RESERVED: &[(usize, u8)] = &[
    (4, 0xff),
    (5, 0xff),
    (6, 0xff),
    (7, 0xff),
    (24, 0xff),
    (25, 0xff),
    (26, 0xff),
    (27, 0xff),
    (52 + 38, 0x0f),
    (52 + 39, 0xc0),
    (52 + 42, 0x07),
    (52 + 43, 0x07),
    (96 + 38, 0x0f),
    (96 + 39, 0xc0),
    (96 + 42, 0x07),
    (96 + 43, 0x03),
];

fn rep_fields() -> Vec<Field> {
    vec![
        int!(rep, local_comm_id, set_local_comm_id, u32, 32),
        int!(rep, remote_comm_id, set_remote_comm_id, u32, 32),
        int!(rep, local_qkey, set_local_qkey, u32, 32),
        int!(rep, local_qpn, set_local_qpn, u32, 24),
        int!(rep, local_eecn, set_local_eecn, u32, 24),
        int!(rep, starting_psn, set_starting_psn, u32, 24),
        int!(rep, responder_resources, set_responder_resources, u8, 8),
        int!(rep, initiator_depth, set_initiator_depth, u8, 8),
        int!(rep, target_ack_delay, set_target_ack_delay, u8, 5),
        int!(rep, failover_accepted, set_failover_accepted, u8, 2),
        flag!(rep, end_to_end_flow_control, set_end_to_end_flow_control),
        int!(rep, rnr_retry_count, set_rnr_retry_count, u8, 3),
        flag!(rep, srq, set_srq),
        int!(rep, local_ca_guid, set_local_ca_guid, u64, 64),
        bytes!(rep, private_data, set_private_data, 196),
    ]
}

/// IBA Table 110: the byte after each 24-bit field, and the low 4 bits of byte 27.
const REP_RESERVED: &[(usize, u8)] = &[(15, 0xff), (19, 0xff), (23, 0xff), (27, 0x0f)];

fn rej_fields() -> Vec<Field> {
    vec![
        int!(rej, local_comm_id, set_local_comm_id, u32, 32),
        int!(rej, remote_comm_id, set_remote_comm_id, u32, 32),
        two_bits!(rej, message_rejected, set_message_rejected, MSG_REFS),
        int!(rej, rejected_info_length, set_rejected_info_length, u8, 7),
        int!(rej, reason, set_reason, u16, 16),
        bytes!(rej, ari, set_ari, 72),
        bytes!(rej, private_data, set_private_data, 148),
    ]
}

fn mra_fields() -> Vec<Field> {
    vec![
        int!(mra, local_comm_id, set_local_comm_id, u32, 32),
        int!(mra, remote_comm_id, set_remote_comm_id, u32, 32),
        two_bits!(mra, message_mraed, set_message_mraed, MSG_REFS),
        int!(mra, service_timeout, set_service_timeout, u8, 5),
        bytes!(mra, private_data, set_private_data, 222),
    ]
}

fn rtu_fields() -> Vec<Field> {
    vec![
        int!(rtu, local_comm_id, set_local_comm_id, u32, 32),
        int!(rtu, remote_comm_id, set_remote_comm_id, u32, 32),
        bytes!(rtu, private_data, set_private_data, 224),
    ]
}

fn dreq_fields() -> Vec<Field> {
    vec![
        int!(dreq, local_comm_id, set_local_comm_id, u32, 32),
        int!(dreq, remote_comm_id, set_remote_comm_id, u32, 32),
        int!(dreq, remote_qpn, set_remote_qpn, u32, 24),
        bytes!(dreq, private_data, set_private_data, 220),
    ]
}

fn drep_fields() -> Vec<Field> {
    vec![
        int!(drep, local_comm_id, set_local_comm_id, u32, 32),
        int!(drep, remote_comm_id, set_remote_comm_id, u32, 32),
        bytes!(drep, private_data, set_private_data, 224),
    ]
}

fn sidr_req_fields() -> Vec<Field> {
    vec![
        int!(sidr_req, request_id, set_request_id, u32, 32),
        int!(sidr_req, pkey, set_pkey, u16, 16),
        int!(sidr_req, service_id, set_service_id, u64, 64),
        bytes!(sidr_req, private_data, set_private_data, 216),
    ]
}

fn sidr_rep_fields() -> Vec<Field> {
    vec![
        int!(sidr_rep, request_id, set_request_id, u32, 32),
        Field {
            name: "status",
            kind: Kind::Bits(8),
            get: |b| u64::from(u8::from(sidr_rep::Packet::new_unchecked(b).status())),
            set: |b, v| sidr_rep::Packet::new_unchecked(b).set_status(SidrStatus::from(v as u8)),
        },
        int!(sidr_rep, info_len, set_info_len, u8, 8),
        int!(sidr_rep, vendor_id, set_vendor_id, u32, 24),
        int!(sidr_rep, qpn, set_qpn, u32, 24),
        int!(sidr_rep, service_id, set_service_id, u64, 64),
        int!(sidr_rep, qkey, set_qkey, u32, 32),
        bytes!(sidr_rep, info, set_info, 72),
        bytes!(sidr_rep, private_data, set_private_data, 136),
    ]
}

/// A message: its name, its fields, and the reserved bits (byte, mask) its IBA table lists.
type Message = (&'static str, Vec<Field>, &'static [(usize, u8)]);

/// Every message with a view.
fn messages() -> Vec<Message> {
    vec![
        ("REQ", req_fields(), REQ_RESERVED),
        ("MRA", mra_fields(), &[(8, 0x3f), (9, 0x07)]),
        ("REJ", rej_fields(), &[(8, 0x3f), (9, 0x01)]),
        ("REP", rep_fields(), REP_RESERVED),
        ("RTU", rtu_fields(), &[]),
        ("DREQ", dreq_fields(), &[(11, 0xff)]),
        ("DREP", drep_fields(), &[]),
        ("SIDR_REQ", sidr_req_fields(), &[(6, 0xff), (7, 0xff)]),
        ("SIDR_REP", sidr_rep_fields(), &[]),
    ]
}

/// The attributes with a view.
const ALL: [u16; 9] =
    [attr::REQ, attr::MRA, attr::REJ, attr::REP, attr::RTU, attr::DREQ, attr::DREP, attr::SIDR_REQ, attr::SIDR_REP];

fn xor(a: &[u8; DATA_LEN], b: &[u8; DATA_LEN]) -> [u8; DATA_LEN] {
    std::array::from_fn(|i| a[i] ^ b[i])
}

#[test]
fn fields_and_reserved_bits_tile_the_mad_data() {
    let mut rng = Rng(1);
    for (msg, fields, reserved) in messages() {
        let mut covered = [0u8; DATA_LEN];
        for f in &fields {
            // The bits a field owns: those that differ between writing all zeros and all ones.
            let base = rng.buffer();
            let (mut zeros, mut ones) = (base, base);
            (f.set)(&mut zeros, 0);
            (f.set)(&mut ones, u64::MAX);
            let owned = xor(&zeros, &ones);
            for (i, (&o, &c)) in owned.iter().zip(&covered).enumerate() {
                assert_eq!(o & c, 0, "{msg}: {} overlaps another field in byte {i}", f.name);
            }
            let bits: u32 = owned.iter().map(|b| b.count_ones()).sum();
            let want = match f.kind {
                Kind::Bits(w) => w,
                Kind::Bytes(n) => 8 * n as u32,
            };
            assert_eq!(bits, want, "{msg}: {} owns {bits} bits", f.name);
            covered.iter_mut().zip(owned).for_each(|(c, o)| *c |= o);
        }
        let unowned: Vec<(usize, u8)> =
            covered.iter().enumerate().filter(|&(_, &c)| c != 0xff).map(|(i, &c)| (i, !c)).collect();
        assert_eq!(unowned, reserved, "{msg}: the bits no field owns (byte, mask) are not the table's reserved bits");
    }
}

#[test]
fn every_getter_reads_what_its_setter_wrote_and_nothing_else_changes() {
    let mut rng = Rng(2);
    for (msg, fields, _) in messages() {
        for _ in 0..200 {
            for f in &fields {
                let before = rng.buffer();
                let mut after = before;
                let v = rng.next();
                (f.set)(&mut after, v);
                assert_eq!((f.get)(&after), f.expect(v), "{msg}: {} after set({v:#x})", f.name);
                for g in fields.iter().filter(|g| g.name != f.name) {
                    assert_eq!((g.get)(&after), (g.get)(&before), "{msg}: setting {} changed {}", f.name, g.name);
                }
                // Nothing outside the field changed either (reserved bits included).
                let (mut zeros, mut ones) = (before, before);
                (f.set)(&mut zeros, 0);
                (f.set)(&mut ones, u64::MAX);
                let owned = xor(&zeros, &ones);
                for (i, d) in xor(&before, &after).iter().enumerate() {
                    assert_eq!(d & !owned[i], 0, "{msg}: setting {} changed byte {i} outside it", f.name);
                }
            }
        }
    }
}

#[test]
fn every_view_refuses_a_short_buffer() {
    let buf = [0u8; DATA_LEN];
    for have in 0..DATA_LEN {
        let b = &buf[..have];
        let short = |r: Result<(), Error>| {
            assert!(matches!(r, Err(Error::Truncated { need: DATA_LEN, have: h, .. }) if h == have), "{have}: {r:?}");
        };
        short(req::Packet::new_checked(b).map(drop));
        short(rep::Packet::new_checked(b).map(drop));
        short(rej::Packet::new_checked(b).map(drop));
        short(mra::Packet::new_checked(b).map(drop));
        short(rtu::Packet::new_checked(b).map(drop));
        short(dreq::Packet::new_checked(b).map(drop));
        short(drep::Packet::new_checked(b).map(drop));
        short(sidr_req::Packet::new_checked(b).map(drop));
        short(sidr_rep::Packet::new_checked(b).map(drop));
        // A representation's parse checks too, even through an unchecked view.
        short(CmReq::parse(&req::Packet::new_unchecked(b)).map(drop));
        short(CmRep::parse(&rep::Packet::new_unchecked(b)).map(drop));
        short(CmRej::parse(&rej::Packet::new_unchecked(b)).map(drop));
        short(CmMra::parse(&mra::Packet::new_unchecked(b)).map(drop));
        short(CmIds::parse(&rtu::Packet::new_unchecked(b)).map(drop));
        short(CmDreq::parse(&dreq::Packet::new_unchecked(b)).map(drop));
        short(CmIds::parse(&drep::Packet::new_unchecked(b)).map(drop));
        short(CmSidrReq::parse(&sidr_req::Packet::new_unchecked(b)).map(drop));
        short(CmSidrRep::parse(&sidr_rep::Packet::new_unchecked(b)).map(drop));
        for a in ALL {
            assert!(CmMessage::parse_data(a, b).is_err());
        }
        let mut out = vec![0u8; have];
        let rtu = CmMessage::Rtu(Box::new(CmIds { local_comm_id: 1, remote_comm_id: 2, private_data: [0; 224] }));
        assert!(rtu.emit_data(&mut out).is_err());
    }
    for have in 0..req::PATH_LEN {
        let r = req::Path::new_checked(&buf[..have]);
        assert!(matches!(r, Err(Error::Truncated { need: req::PATH_LEN, .. })), "{have}: {r:?}");
        assert!(CmPath::parse(&req::Path::new_unchecked(&buf[..have])).is_err());
    }
}

#[test]
fn a_repr_written_over_garbage_reads_back_and_zeroes_the_reserved_bits() {
    let mut rng = Rng(3);
    for _ in 0..100 {
        let mut garbage = rng.buffer();
        let buf = rng.buffer();
        let data = |len: usize, rng: &mut Rng| pattern(len, rng.next());
        // Any bytes parse; the message written back over other bytes reads the same, and
        // matches what CmMessage writes into a zeroed buffer (reserved bits are 0).
        for a in ALL {
            let m = CmMessage::parse_data(a, &buf).unwrap().unwrap();
            let mut zeroed = [0u8; DATA_LEN];
            m.emit_data(&mut zeroed).unwrap();
            m.emit_data(&mut garbage).unwrap();
            assert_eq!(garbage, zeroed, "{}", m.name());
            assert_eq!(CmMessage::parse_data(a, &garbage).unwrap(), Some(m));
        }
        let rep = CmSidrRep {
            request_id: rng.next() as u32,
            status: SidrStatus::from(rng.next() as u8),
            info_len: rng.next() as u8,
            vendor_id: rng.next() as u32 & 0xff_ffff,
            qpn: rng.next() as u32 & 0xff_ffff,
            service_id: rng.next(),
            qkey: rng.next() as u32,
            info: to_array(data(72, &mut rng)),
            private_data: to_array(data(136, &mut rng)),
        };
        let mut b = rng.buffer();
        rep.emit(&mut sidr_rep::Packet::new_unchecked(&mut b[..]));
        assert_eq!(CmSidrRep::parse(&sidr_rep::Packet::new_checked(&b[..]).unwrap()).unwrap(), rep);
    }
}
