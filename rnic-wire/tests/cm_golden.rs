//! CM messages as Linux's rdma_cm sent them: the REQ, REP, RTU, DREQ and DREP of an
//! `rping -c -a 10.77.0.11 -p 7174 -C 3 -S 64` between two Linux rxe guests (kernel 6.1,
//! rdma-core 44), captured on the lab bridge with ../shared/rxe-lab/pair-capture.sh
//! (rping_rdmacm.pcap, frames 1, 2, 3, 40, 41: UD SEND_ONLY to QP1, Q_Key 0x80010000).
//! Each MAD parses to the fields Wireshark shows and is emitted back byte for byte.

use rnic_wire::cm::{attr, port_space, service_id, CmMessage, CmTransport, CmaHeader};
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
    m[17] = 0x17; // SIDR_REQ
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
                Just(attr::RTU), Just(attr::DREQ), Just(attr::DREP), any::<u16>()],
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
