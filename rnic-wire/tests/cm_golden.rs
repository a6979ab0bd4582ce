//! CM messages as Linux's rdma_cm sent them: the REQ, REP, RTU, DREQ and DREP of an
//! `rping -c -a 10.77.0.11 -p 7174 -C 3 -S 64` between two Linux rxe guests (kernel 6.1,
//! rdma-core 44), captured on the lab bridge with ../shared/rxe-lab/pair-capture.sh
//! (rping_rdmacm.pcap, frames 1, 2, 3, 40, 41: UD SEND_ONLY to QP1, Q_Key 0x80010000).
//! Each MAD parses to the fields Wireshark shows and is emitted back byte for byte.

use rnic_wire::cm::{
    attr, port_space, service_id, CmMessage, CmSidrRep, CmSidrReq, CmTransport, CmaHeader, SidrStatus, RDMA_UDP_QKEY,
};
use rnic_wire::mad::{MadHeader, Packet, MAD_LEN};
use std::net::{IpAddr, Ipv4Addr};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// A MAD: the first bytes given, the rest zero.
fn mad(head: &str) -> [u8; MAD_LEN] {
    let mut m = [0u8; MAD_LEN];
    let h = hex(head);
    m[..h.len()].copy_from_slice(&h);
    m
}

const REQ: &str = "010702030000000000000002266900f30010000000000000f3006926000000000000000001061c06505400fffe77000c00000000000000000000230100000001000000a00d0c3fa7ffff37f0ffffffff00000000000000000000ffff0a4d000c00000000000000000000ffff0a4d000bab55e0000040009800000000000000000000000000000000000000000000000000000000000000000000000000000000000000000040dba80000000000000000000000000a4d000c0000000000000000000000000a4d000b";
const REP: &str = "010702030000000000000002266900f300130000000000008f3c0e4cf3006926000000000000230000000000d1f9de00010178e0505400fffe77000b";
const RTU: &str = "010702030000000000000002266900f30014000000000000f30069268f3c0e4c";
const DREQ: &str = "010702030000000000000002266900f30015000000000000f30069268f3c0e4c000023";
const DREP: &str = "010702030000000000000002266900f300160000000000008f3c0e4cf3006926";

fn round_trip(m: &[u8; MAD_LEN]) -> (MadHeader, CmMessage) {
    let (h, msg) = CmMessage::from_mad(m).unwrap();
    let msg = msg.expect("a CM message rnic implements");
    assert_eq!(&msg.to_mad(h.tid)[..], &m[..], "{} is not emitted back byte for byte", msg.name());
    (h, msg)
}

#[test]
fn rxe_req_parses_and_round_trips() {
    let (h, msg) = round_trip(&mad(REQ));
    assert_eq!((h.attr_id, h.tid, h.method), (attr::REQ, 0x2266900f3, 0x03));
    let CmMessage::Req(r) = msg else { panic!("not a REQ") };
    assert_eq!(r.local_comm_id, 0xf300_6926);
    assert_eq!(r.service_id, service_id(port_space::TCP, 7174));
    assert_eq!(r.local_ca_guid, 0x5054_00ff_fe77_000c, "rxe's GUID: EUI-64 of MAC 52:54:00:77:00:0c");
    assert_eq!((r.local_qkey, r.local_qpn, r.responder_resources, r.initiator_depth), (0, 0x23, 1, 1));
    assert_eq!(
        (r.remote_cm_response_timeout, r.local_cm_response_timeout),
        (20, 20),
        "rdma_cm's CM response timeout 20"
    );
    assert_eq!((r.transport, r.end_to_end_flow_control), (CmTransport::Rc, false));
    assert_eq!((r.starting_psn, r.retry_count, r.rnr_retry_count), (0x0d0c3f, 7, 7));
    assert_eq!((r.pkey, r.path_mtu, r.max_cm_retries, r.srq), (0xffff, 3, 15, false), "MTU 1024, 15 MAD retries");
    let p = &r.primary;
    assert_eq!((p.local_lid, p.remote_lid), (0xffff, 0xffff));
    assert_eq!(p.local_gid, Ipv4Addr::new(10, 77, 0, 12).to_ipv6_mapped().octets());
    assert_eq!(p.remote_gid, Ipv4Addr::new(10, 77, 0, 11).to_ipv6_mapped().octets());
    // The flow label's 20 bits lead the word at offset 88 (Linux's CM_REQ_PRIMARY_FLOW_LABEL;
    // Wireshark 4.0 reads this word one byte early and shows 0x00ab5 and rate 0x2b).
    assert_eq!((p.flow_label, p.packet_rate, p.traffic_class, p.hop_limit), (0xab55e, 0, 0, 64));
    assert_eq!((p.sl, p.subnet_local, p.local_ack_timeout), (0, false, 19));
    assert_eq!(r.alternate, Default::default());
    let cma = CmaHeader::parse(&r.private_data).expect("rdma_cm's header");
    assert_eq!(
        cma,
        CmaHeader {
            src_port: 0xdba8,
            src: IpAddr::V4(Ipv4Addr::new(10, 77, 0, 12)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 77, 0, 11))
        }
    );
    let mut pd = [0u8; 92];
    cma.emit(&mut pd).unwrap();
    assert_eq!(pd, r.private_data);
}

#[test]
fn rxe_rep_rtu_dreq_drep_parse_and_round_trip() {
    let CmMessage::Rep(rep) = round_trip(&mad(REP)).1 else { panic!("not a REP") };
    assert_eq!((rep.local_comm_id, rep.remote_comm_id), (0x8f3c_0e4c, 0xf300_6926));
    assert_eq!((rep.local_qpn, rep.starting_psn, rep.responder_resources, rep.initiator_depth), (0x23, 0xd1f9de, 1, 1));
    // Target ACK delay: rxe's local_ca_ack_delay (15).
    assert_eq!((rep.target_ack_delay, rep.failover_accepted, rep.rnr_retry_count, rep.srq), (15, 0, 7, false));
    assert_eq!(rep.local_ca_guid, 0x5054_00ff_fe77_000b);
    let rtu = round_trip(&mad(RTU)).1;
    assert_eq!((rtu.name(), rtu.local_comm_id(), rtu.remote_comm_id()), ("RTU", 0xf300_6926, 0x8f3c_0e4c));
    let CmMessage::Dreq(dreq) = round_trip(&mad(DREQ)).1 else { panic!("not a DREQ") };
    assert_eq!((dreq.ids.local_comm_id, dreq.remote_qpn), (0xf300_6926, 0x23));
    let drep = round_trip(&mad(DREP)).1;
    assert_eq!((drep.name(), drep.local_comm_id()), ("DREP", 0x8f3c_0e4c));
    // Every message of the exchange shares the REQ's transaction ID, as Linux's CM does.
    for m in [REQ, REP, RTU, DREQ, DREP] {
        let h = MadHeader::parse(&Packet::new_checked(&mad(m)[..24]).unwrap()).unwrap();
        assert_eq!(h.tid, 0x2266900f3);
    }
}

#[test]
fn foreign_classes_versions_and_short_mads_are_errors_and_unknown_attributes_are_none() {
    let mut m = mad(RTU);
    m[1] = 0x04; // PerfMgmt
    assert!(CmMessage::from_mad(&m).is_err());
    let mut m = mad(RTU);
    m[2] = 1; // CM class version 1
    assert!(CmMessage::from_mad(&m).unwrap_err().to_string().contains("class version"));
    assert!(CmMessage::from_mad(&mad(RTU)[..255]).is_err());
    let mut m = mad(RTU);
    m[17] = 0x19; // LAP
    assert_eq!(CmMessage::from_mad(&m).unwrap().1, None);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any 256 bytes (with a CM header, so the message parsers run): no panic, and a
        /// message that parses is emitted back to bytes that parse to the same message.
        #[test]
        fn any_cm_mad_parses_without_panic_and_re_emits_stably(
            body in proptest::collection::vec(any::<u8>(), MAD_LEN),
            attr_id in prop_oneof![Just(attr::REQ), Just(attr::MRA), Just(attr::REJ), Just(attr::REP),
                Just(attr::RTU), Just(attr::DREQ), Just(attr::DREP), Just(attr::SIDR_REQ),
                Just(attr::SIDR_REP), any::<u16>()],
            len in 0usize..=MAD_LEN + 8,
        ) {
            let mut m = body.clone();
            m.resize(MAD_LEN, 0);
            m[..4].copy_from_slice(&[1, 7, 2, 3]);
            m[16..18].copy_from_slice(&attr_id.to_be_bytes());
            let mut cut = m.clone();
            cut.resize(len, 0);
            let _ = CmMessage::from_mad(&cut);
            if let Ok((h, Some(msg))) = CmMessage::from_mad(&m) {
                let again = msg.to_mad(h.tid);
                let (_, back) = CmMessage::from_mad(&again).unwrap();
                prop_assert_eq!(back, Some(msg));
            }
        }
    }
}

/// Linux rxe's answer to `rnic rping -c` for a port nobody listens on (captured on the lab
/// bridge, 2026-11-24): a REJ "invalid service ID" (8) for the REQ, with no local
/// communication ID of its own and rnic's REQ's transaction ID.
const REJ: &str = "01070203000000000000c283945e48d8001200000000000000000000970d784200000008";

#[test]
fn rxe_rej_for_no_listener_parses_and_round_trips() {
    let (h, msg) = round_trip(&mad(REJ));
    assert_eq!((h.attr_id, h.tid), (attr::REJ, 0xc283_945e_48d8));
    let CmMessage::Rej(r) = msg else { panic!("not a REJ") };
    assert_eq!(
        (r.local_comm_id, r.remote_comm_id, r.reason),
        (0, 0x970d_7842, rnic_wire::cm::rej_reason::INVALID_SERVICE_ID)
    );
    assert_eq!((r.message_rejected, r.rejected_info_length), (rnic_wire::cm::MsgRef::Req, 0));
}

// SIDR as Linux's rdma_cm speaks it for its UDP port space: `udaddy -s 10.77.0.11` in
// guest b (10.77.0.12) against `udaddy` in guest a (10.77.0.11), Linux rxe 6.1 and
// rdma-core 44, captured on the lab bridge (tools/tests/data/udaddy_rdmacm.pcap: SIDR_REQ,
// SIDR_REP, then two 100-byte SEND_ONLY with immediate each way with Q_Key 0x01234567), and
// the same client with no server (udaddy_nolistener.pcap: the SIDR_REP says status 1,
// "service ID not supported", and udaddy reports RDMA_CM_EVENT_UNREACHABLE, error 1).

const SIDR_REQ: &str = "010702030000000000000002ea7eb570001700000000000070b57eeaffff00000000000001111c060040a5710000000000000000000000000a4d000c0000000000000000000000000a4d000b";
const SIDR_REP: &str =
    "010702030000000000000002ea7eb570001800000000000070b57eea00000000000011000000000001111c0601234567";
const SIDR_REQ_NOBODY: &str = "010702030000000000000002ea7eb571001700000000000071b57eeaffff00000000000001111c06004085f10000000000000000000000000a4d000c0000000000000000000000000a4d000b";
const SIDR_REP_NOBODY: &str =
    "010702030000000000000002ea7eb571001800000000000071b57eea01000000000000000000000001111c06";

/// The MADs (UD SEND_ONLY to QP1) of a capture, in order, each with its ICRC checked.
fn mads_in(pcap: &str) -> Vec<Vec<u8>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/tests/data").join(pcap);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[..4], &[0xd4, 0xc3, 0xb2, 0xa1], "a little-endian pcap");
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &bytes[at + 16..at + 16 + len];
        at += 16 + len;
        let Ok(p) = rnic_wire::frame::parse_ethernet(frame) else { continue };
        p.check_icrc().unwrap();
        if p.roce.bth.dest_qp.value() == 1 {
            out.push(p.payload.to_vec());
        }
    }
    out
}

#[test]
fn the_sidr_goldens_are_the_captured_mads() {
    assert_eq!(mads_in("udaddy_rdmacm.pcap"), [mad(SIDR_REQ).to_vec(), mad(SIDR_REP).to_vec()]);
    assert_eq!(mads_in("udaddy_nolistener.pcap"), [mad(SIDR_REQ_NOBODY).to_vec(), mad(SIDR_REP_NOBODY).to_vec()]);
}

#[test]
fn rxe_sidr_req_parses_and_round_trips() {
    let (h, msg) = round_trip(&mad(SIDR_REQ));
    assert_eq!((h.attr_id, h.tid, h.method), (attr::SIDR_REQ, 0x2_ea7e_b570, 0x03));
    let CmMessage::SidrReq(r) = msg else { panic!("not a SIDR_REQ") };
    // Linux's request ID is the cm_id's local ID; the transaction ID's low 32 bits are the
    // same ID in the other byte order (cm_form_tid).
    assert_eq!((r.request_id, r.pkey), (0x70b5_7eea, 0xffff));
    assert_eq!(r.service_id, service_id(port_space::UDP, 7174), "udaddy's port in the UDP port space");
    let cma = CmaHeader::parse(&r.private_data).expect("rdma_cm's header leads the private data");
    assert_eq!(
        cma,
        CmaHeader {
            src_port: 0xa571,
            src: IpAddr::V4(Ipv4Addr::new(10, 77, 0, 12)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 77, 0, 11))
        }
    );
    assert!(r.private_data[36..].iter().all(|&b| b == 0), "udaddy sends no private data of its own");
}

#[test]
fn rxe_sidr_rep_parses_and_round_trips() {
    let (h, msg) = round_trip(&mad(SIDR_REP));
    assert_eq!((h.attr_id, h.tid), (attr::SIDR_REP, 0x2_ea7e_b570), "the SIDR_REQ's transaction ID");
    let CmMessage::SidrRep(r) = msg else { panic!("not a SIDR_REP") };
    assert_eq!((r.request_id, r.status, r.info_len, r.vendor_id), (0x70b5_7eea, SidrStatus::Valid, 0, 0));
    assert_eq!((r.qpn, r.qkey), (0x11, RDMA_UDP_QKEY), "the server's UD QP and rdma_cm's UDP Q_Key");
    assert_eq!(r.service_id, service_id(port_space::UDP, 7174), "the request's service ID, echoed");
    assert_eq!((r.info, r.private_data), ([0; 72], [0; 136]));
    assert_eq!(msg_ids(&mad(SIDR_REP)), (0, 0x70b5_7eea), "a reply names only the requester's ID");
}

fn msg_ids(m: &[u8; MAD_LEN]) -> (u32, u32) {
    let msg = CmMessage::from_mad(m).unwrap().1.unwrap();
    (msg.local_comm_id(), msg.remote_comm_id())
}

#[test]
fn rxe_answers_a_sidr_req_nobody_listens_for_with_status_1() {
    let CmMessage::SidrReq(req) = round_trip(&mad(SIDR_REQ_NOBODY)).1 else { panic!("not a SIDR_REQ") };
    let (h, msg) = round_trip(&mad(SIDR_REP_NOBODY));
    let CmMessage::SidrRep(r) = msg else { panic!("not a SIDR_REP") };
    assert_eq!(h.tid, 0x2_ea7e_b571);
    assert_eq!((r.request_id, r.status), (req.request_id, SidrStatus::ServiceIdNotSupported));
    // Linux's cm_reject_sidr_req: no QPN, no Q_Key, the service ID echoed.
    assert_eq!((r.qpn, r.qkey, r.service_id), (0, 0, req.service_id));
}

#[test]
fn sidr_messages_built_here_are_byte_exact_and_write_every_field() {
    // Every field a distinct value, every reserved byte checked against a buffer that
    // started as 0xa5: emit_data zeroes what a message does not use.
    let req = CmSidrReq {
        request_id: 0x0102_0304,
        pkey: 0x8005,
        service_id: 0x1112_1314_1516_1718,
        private_data: std::array::from_fn(|i| u8::try_from(i).unwrap()),
    };
    let mut data = [0xa5u8; 232];
    CmMessage::SidrReq(Box::new(req.clone())).emit_data(&mut data).unwrap();
    assert_eq!(&data[..16], &[1, 2, 3, 4, 0x80, 0x05, 0, 0, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]);
    assert_eq!(data[16], 0);
    assert_eq!(data[231], 215);
    assert_eq!(CmMessage::parse_data(attr::SIDR_REQ, &data).unwrap(), Some(CmMessage::SidrReq(Box::new(req))));
    let rep = CmSidrRep {
        request_id: 0x0102_0304,
        status: SidrStatus::Unknown(9),
        info_len: 72,
        vendor_id: 0x00ab_cdef,
        qpn: 0x00fe_dcba,
        service_id: 0x2122_2324_2526_2728,
        qkey: 0x3132_3334,
        info: [0x44; 72],
        private_data: [0x55; 136],
    };
    let mut data = [0xa5u8; 232];
    CmMessage::SidrRep(Box::new(rep.clone())).emit_data(&mut data).unwrap();
    assert_eq!(
        &data[..24],
        &[
            1, 2, 3, 4, 9, 72, 0xab, 0xcd, 0xfe, 0xdc, 0xba, 0xef, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,
            0x31, 0x32, 0x33, 0x34
        ]
    );
    assert_eq!((data[24], data[95], data[96], data[231]), (0x44, 0x44, 0x55, 0x55));
    assert_eq!(CmMessage::parse_data(attr::SIDR_REP, &data).unwrap(), Some(CmMessage::SidrRep(Box::new(rep))));
    // Every status byte survives: the six IBA names and the rest as Unknown.
    for v in 0..=u8::MAX {
        let s = SidrStatus::from(v);
        assert_eq!(u8::from(s), v);
        assert_eq!(matches!(s, SidrStatus::Unknown(_)), v > 5);
    }
}

// MRA, as Linux's CM sends it (tools/tests/data/rping_mra_linux.pcap, 2026-11-27): `rnic rping
// -c` with RNIC_FAULTS=dup=1 sent its REQ twice to `rping -s` on Linux rxe 6.1; the repeat
// found Linux's connection in MRA_REQ_SENT (rdma_cm prepares an MRA for every REQ it hands to
// user space) and was answered with this MRA before the REP.
const MRA_LINUX: &str = "0107020300000000000059ad876a72690011000000000000e7f6c9fd02429a3300c0";

#[test]
fn linux_mra_for_a_repeated_req_parses_and_round_trips() {
    let mads = mads_in("rping_mra_linux.pcap");
    assert_eq!(mads[2], mad(MRA_LINUX).to_vec(), "the third MAD of the exchange");
    let CmMessage::Req(req) = CmMessage::from_mad(&mads[0]).unwrap().1.unwrap() else { panic!("not a REQ") };
    assert_eq!(mads[0], mads[1], "the REQ, twice");
    let (h, msg) = round_trip(&mad(MRA_LINUX));
    let CmMessage::Mra(m) = msg else { panic!("not an MRA") };
    assert_eq!((h.attr_id, h.tid), (attr::MRA, 0x59ad_876a_7269), "the REQ's transaction ID");
    assert_eq!((m.local_comm_id, m.remote_comm_id), (0xe7f6_c9fd, req.local_comm_id));
    // "REQ" MRAed; service timeout 24 (4.096 us x 2^24, 68.7 s: Linux's CM_MRA_SETTING).
    assert_eq!((m.message_mraed, m.service_timeout), (rnic_wire::cm::MsgRef::Req, 24));
    assert_eq!(m.private_data, [0; 222]);
}
