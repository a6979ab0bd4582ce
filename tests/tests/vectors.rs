//! The shared RoCEv2 vectors (built by scapy's RoCE layer, cross-checked against rxe's
//! ICRC and Wireshark): every frame parses to exactly its JSON fields, and re-emitting
//! the parsed representation with the same payload reproduces the frame byte for byte.

use rnic_tests::{hex, shared_dir, unhex};
use rnic_wire::aeth::Syndrome;
use rnic_wire::bth;
use rnic_wire::frame::{self, IpRepr};
use rnic_wire::roce::RocePacket;
use rnic_wire::udp::UdpChecksum;
use rnic_wire::{HeaderKind, Opcode};
use serde_json::Value;

fn load(name: &str) -> Value {
    let path = shared_dir().join("vectors").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("vector JSON")
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("field {k} missing in {v}"))
}

#[test]
fn every_vector_parses_to_its_json_and_reemits_byte_for_byte() {
    let doc = load("roce_vectors.json");
    let vectors = doc["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), 289);
    for v in vectors {
        let name = v["name"].as_str().unwrap();
        let frame_bytes = unhex(v["frame_hex"].as_str().unwrap());
        let p = frame::parse_ethernet(&frame_bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(p.icrc_ok(), "{name}: ICRC {:08x} vs {:08x}", p.icrc_received, p.icrc_computed);
        check_fields(name, v, &p);

        // Byte-for-byte re-emission, VLAN-tagged and Ethernet-padded frames included.
        let repr = p.frame_repr().unwrap();
        let mut out = vec![0xa5u8; repr.buffer_len()];
        let n = repr.emit(&mut out, p.payload).unwrap_or_else(|e| panic!("{name}: emit {e}"));
        assert_eq!(hex(&out[..n]), hex(&frame_bytes), "{name}: re-emitted frame differs");

        // The UDP-payload form (what a UDP socket hands over) checks out on its own.
        let udp_payload = unhex(v["udp_payload_hex"].as_str().unwrap());
        assert_eq!(udp_payload, p.roce_bytes, "{name}");
        let rp = RocePacket::new_checked(&udp_payload[..]).unwrap();
        assert_eq!(rp.payload(), p.payload, "{name}");
        // And re-emitting just the RoCE part with the endpoint-known IP fields gives
        // the same ICRC when those fields match the capture's.
        if let IpRepr::V6(ip6) = p.ip {
            // IPv6 masks everything a socket cannot see: the ICRC is reproducible.
            let ctx = rnic_wire::icrc::IcrcContext::new(ip6.src.into(), ip6.dst.into(), p.udp.src_port, p.udp.dst_port);
            ctx.verify(&udp_payload).unwrap_or_else(|e| panic!("{name}: {e}"));
        } else if let IpRepr::V4(ip4) = p.ip {
            let ctx = rnic_wire::icrc::IcrcContext {
                ipv4_ident: ip4.ident,
                ipv4_df: ip4.df,
                ..rnic_wire::icrc::IcrcContext::new(ip4.src.into(), ip4.dst.into(), p.udp.src_port, p.udp.dst_port)
            };
            ctx.verify(&udp_payload).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

fn check_fields(name: &str, v: &Value, p: &frame::ParsedPacket<'_>) {
    // Ethernet.
    let eth = p.eth.unwrap();
    assert_eq!(eth.dst.to_string(), v["eth"]["dst"].as_str().unwrap(), "{name}");
    assert_eq!(eth.src.to_string(), v["eth"]["src"].as_str().unwrap(), "{name}");
    assert_eq!(u64::from(eth.ethertype), u(&v["eth"], "ethertype"), "{name}");
    match (&eth.vlan, v["eth"].get("vlan")) {
        (Some(t), Some(j)) => {
            assert_eq!(u64::from(t.pcp), u(j, "pcp"));
            assert_eq!(u64::from(t.dei), u(j, "dei"));
            assert_eq!(u64::from(t.vid), u(j, "vid"));
        }
        (None, None) => {}
        other => panic!("{name}: VLAN mismatch {other:?}"),
    }
    assert_eq!(p.eth_padding as u64, u(v, "eth_padding_len"), "{name}");

    // IP.
    let ipj = &v["ip"];
    match p.ip {
        IpRepr::V4(r) => {
            assert_eq!(u(v, "ip_version"), 4);
            assert_eq!(r.src.to_string(), ipj["src"].as_str().unwrap());
            assert_eq!(r.dst.to_string(), ipj["dst"].as_str().unwrap());
            assert_eq!(u64::from(r.tos), u(ipj, "tos"));
            assert_eq!(u64::from(r.ttl), u(ipj, "ttl"));
            assert_eq!(u64::from(r.ident), u(ipj, "id"));
            assert_eq!(u64::from(r.df), u(ipj, "df"));
        }
        IpRepr::V6(r) => {
            assert_eq!(u(v, "ip_version"), 6);
            assert_eq!(r.src.to_string(), ipj["src"].as_str().unwrap());
            assert_eq!(r.dst.to_string(), ipj["dst"].as_str().unwrap());
            assert_eq!(u64::from(r.traffic_class), u(ipj, "traffic_class"));
            assert_eq!(u64::from(r.flow_label), u(ipj, "flow_label"));
            assert_eq!(u64::from(r.hop_limit), u(ipj, "hop_limit"));
        }
    }
    // UDP.
    let uj = &v["udp"];
    assert_eq!(u64::from(p.udp.src_port), u(uj, "sport"), "{name}");
    assert_eq!(u64::from(p.udp.dst_port), u(uj, "dport"), "{name}");
    let mode = match p.udp.checksum {
        UdpChecksum::Zero => "zero",
        UdpChecksum::Computed => "computed",
    };
    assert_eq!(mode, uj["checksum_mode"].as_str().unwrap(), "{name}");

    // BTH: every field, through the view (reserved bits and PadCnt included).
    let bj = &v["bth"];
    let view = bth::Packet::new_checked(p.roce_bytes).unwrap();
    let b = p.roce.bth;
    assert_eq!(u64::from(b.opcode.0), u(bj, "opcode"), "{name}");
    if bj["opcode_name"].as_str() != Some("CNP") {
        assert_eq!(b.opcode.name(), bj["opcode_name"].as_str().unwrap(), "{name}");
    } else {
        assert_eq!(b.opcode, Opcode::CNP);
    }
    assert_eq!(u64::from(b.se), u(bj, "se"), "{name}");
    assert_eq!(u64::from(b.migreq), u(bj, "m"), "{name}");
    assert_eq!(u64::from(view.pad_count()), u(bj, "padcnt"), "{name}");
    assert_eq!(u64::from(view.tver()), u(bj, "tver"), "{name}");
    assert_eq!(u64::from(b.pkey), u(bj, "pkey"), "{name}");
    assert_eq!(u64::from(b.fecn), u(bj, "fecn"), "{name}");
    assert_eq!(u64::from(b.becn), u(bj, "becn"), "{name}");
    assert_eq!(u64::from(view.resv6()), u(bj, "resv6"), "{name}");
    assert_eq!(u64::from(b.dest_qp.value()), u(bj, "destqp"), "{name}");
    assert_eq!(u64::from(b.ack_req), u(bj, "ackreq"), "{name}");
    assert_eq!(u64::from(view.resv7()), u(bj, "resv7"), "{name}");
    assert_eq!(u64::from(b.psn.value()), u(bj, "psn"), "{name}");
    assert_eq!(hex(&p.roce_bytes[..12]), v["bth_hex"].as_str().unwrap(), "{name}");

    // Extension headers, in wire order.
    let info = b.opcode.info().unwrap();
    let exts: Vec<&Value> = v["ext_headers"].as_array().unwrap().iter().collect();
    let listed: Vec<HeaderKind> = info.headers.iter().copied().filter(|h| *h != HeaderKind::CnpBody).collect();
    assert_eq!(exts.len(), listed.len(), "{name}: header count");
    for (j, kind) in exts.iter().zip(&listed) {
        assert_eq!(j["type"].as_str().unwrap(), kind.name(), "{name}");
        let off = info.offset_of(*kind).unwrap();
        assert_eq!(
            hex(&p.roce_bytes[off..off + kind.wire_len()]),
            j["hex"].as_str().unwrap(),
            "{name}: {} bytes",
            kind.name()
        );
        let e = &p.roce.ext;
        match kind {
            HeaderKind::Reth => {
                let r = e.reth.unwrap();
                assert_eq!(
                    (r.va, u64::from(r.rkey), u64::from(r.dma_len)),
                    (u(j, "va"), u(j, "rkey"), u(j, "dma_len"))
                );
            }
            HeaderKind::Aeth => {
                let a = e.aeth.unwrap();
                assert_eq!(u64::from(a.syndrome.to_byte()), u(j, "syndrome"), "{name}");
                assert_eq!(u64::from(a.msn), u(j, "msn"), "{name}");
                assert_eq!(a.syndrome.type_name(), j["aeth_type"].as_str().unwrap(), "{name}");
                match a.syndrome {
                    Syndrome::Ack { credits } => assert_eq!(u64::from(credits), u(j, "credit_count")),
                    Syndrome::RnrNak { timer } => assert_eq!(u64::from(timer), u(j, "rnr_timer")),
                    Syndrome::Nak(c) => {
                        assert_eq!(u64::from(c.code()), u(j, "nak_code"));
                        assert_eq!(c.name(), j["nak_name"].as_str().unwrap());
                    }
                    Syndrome::Reserved(_) => panic!("{name}: reserved syndrome"),
                }
            }
            HeaderKind::AtomicEth => {
                let a = e.atomic_eth.unwrap();
                assert_eq!(a.va, u(j, "va"));
                assert_eq!(u64::from(a.rkey), u(j, "rkey"));
                assert_eq!(a.swap_add, u(j, "swap_add_data"));
                assert_eq!(a.compare, u(j, "compare_data"));
            }
            HeaderKind::AtomicAckEth => {
                assert_eq!(e.atomic_ack_eth.unwrap().orig_remote_data, u(j, "orig_remote_data"));
            }
            HeaderKind::ImmDt => assert_eq!(u64::from(e.imm_data.unwrap()), u(j, "imm_data")),
            HeaderKind::Ieth => assert_eq!(u64::from(e.ieth.unwrap()), u(j, "rkey")),
            HeaderKind::Xrceth => assert_eq!(u64::from(e.xrc_srqn.unwrap()), u(j, "xrc_srqn")),
            HeaderKind::Deth => {
                let d = e.deth.unwrap();
                assert_eq!(u64::from(d.qkey), u(j, "qkey"));
                assert_eq!(u64::from(d.src_qp.value()), u(j, "srcqp"));
            }
            HeaderKind::Feth | HeaderKind::CnpBody => panic!("{name}: no such header in the vectors"),
        }
    }
    // Payload, pad, ICRC.
    assert_eq!(info.payload_offset() as u64, u(v, "payload_offset"), "{name}");
    assert_eq!(p.payload.len() as u64, u(v, "payload_len"), "{name}");
    assert_eq!(p.roce.pad_len() as u64, u(v, "pad_len"), "{name}");
    assert_eq!(hex(&p.icrc_received.to_le_bytes()), v["icrc_hex"].as_str().unwrap(), "{name}");
    let crc = u64::from_str_radix(v["icrc_crc32"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    assert_eq!(u64::from(p.icrc_received), crc, "{name}");
}

#[test]
fn every_bad_icrc_frame_is_rejected_for_its_icrc() {
    let doc = load("roce_bad_icrc.json");
    let vectors = doc["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), 6);
    for v in vectors {
        let name = v["name"].as_str().unwrap();
        let frame_bytes = unhex(v["frame_hex"].as_str().unwrap());
        let p = frame::parse_ethernet(&frame_bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!p.icrc_ok(), "{name} was accepted");
        assert!(matches!(p.check_icrc(), Err(rnic_wire::Error::BadIcrc { .. })));
        assert_eq!(hex(&p.icrc_received.to_le_bytes()), v["icrc_hex_in_frame"].as_str().unwrap());
        assert_eq!(hex(&p.icrc_computed.to_le_bytes()), v["icrc_hex_correct"].as_str().unwrap(), "{name}");
    }
}

/// Masked-variant vectors carry the same ICRC as the vector they derive from.
#[test]
fn masked_variants_share_their_icrc() {
    let doc = load("roce_vectors.json");
    let vectors = doc["vectors"].as_array().unwrap();
    let mut n = 0;
    for v in vectors {
        if let Some(base) = v.get("icrc_equivalent_to").and_then(Value::as_str) {
            let b = vectors.iter().find(|x| x["name"] == base).unwrap();
            assert_eq!(v["icrc_hex"], b["icrc_hex"]);
            let bytes = unhex(v["frame_hex"].as_str().unwrap());
            assert!(frame::parse_ethernet(&bytes).unwrap().icrc_ok());
            if name_of(v).contains("masked_variant") {
                n += 1;
            }
        }
    }
    assert_eq!(n, 6, "the README lists six masked variants");
}

fn name_of(v: &Value) -> &str {
    v["name"].as_str().unwrap()
}

/// What a UDP-socket receiver sees of each IPv4 vector: the RoCE bytes, but not the IP
/// ID (the vectors carry real, non-zero IDs, as Linux rxe sends). Assuming ID 0 fails;
/// solving for the ID recovers exactly the one in the frame's header.
#[test]
fn unknown_ipv4_id_is_recovered_for_every_ipv4_vector() {
    use rnic_wire::icrc::{IcrcContext, IcrcMatch, Ipv4IdPolicy};
    let doc = load("roce_vectors.json");
    let mut solved = 0;
    for v in doc["vectors"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let frame_bytes = unhex(v["frame_hex"].as_str().unwrap());
        let p = frame::parse_ethernet(&frame_bytes).unwrap();
        let IpRepr::V4(ip4) = p.ip else { continue };
        let ctx = IcrcContext {
            ipv4_df: ip4.df,
            ..IcrcContext::new(ip4.src.into(), ip4.dst.into(), p.udp.src_port, p.udp.dst_port)
        };
        let expect = if ip4.ident == 0 { IcrcMatch::Exact } else { IcrcMatch::SolvedIpv4Id(ip4.ident) };
        assert_eq!(ctx.verify_with(p.roce_bytes, Ipv4IdPolicy::SolveUnknown).unwrap(), expect, "{name}");
        if ip4.ident != 0 {
            assert!(ctx.verify_with(p.roce_bytes, Ipv4IdPolicy::Strict).is_err(), "{name}");
            solved += 1;
        }
    }
    assert!(solved > 100, "only {solved} vectors had a non-zero ID");
}

/// The bad-ICRC frames over IPv4, seen through a socket with an unknown ID: a flipped
/// payload or ICRC bit is still rejected; a changed IPv4 ID is invisible to a socket
/// (it never sees the ID), so the solve recovers the original ID, not the frame's.
#[test]
fn bad_icrc_ipv4_frames_under_the_id_solve() {
    use rnic_wire::icrc::{IcrcContext, IcrcMatch, Ipv4IdPolicy};
    let doc = load("roce_bad_icrc.json");
    let mut checked = 0;
    for v in doc["vectors"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let frame_bytes = unhex(v["frame_hex"].as_str().unwrap());
        let p = frame::parse_ethernet(&frame_bytes).unwrap();
        let IpRepr::V4(ip4) = p.ip else { continue };
        let ctx = IcrcContext {
            ipv4_df: ip4.df,
            ..IcrcContext::new(ip4.src.into(), ip4.dst.into(), p.udp.src_port, p.udp.dst_port)
        };
        let got = ctx.verify_with(p.roce_bytes, Ipv4IdPolicy::SolveUnknown);
        if name.ends_with("_ip_id") {
            assert!(matches!(got, Ok(IcrcMatch::SolvedIpv4Id(id)) if id != ip4.ident), "{name}: {got:?}");
        } else {
            assert!(got.is_err(), "{name} was accepted: {got:?}");
        }
        checked += 1;
    }
    assert_eq!(checked, 3);
}
