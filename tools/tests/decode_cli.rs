//! End-to-end runs of `rnic decode` on the shared vectors and on captures built here:
//! every link type, damaged packets, damaged files. The binary must never crash.

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, Endianness, TsResolution};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

// ---- running the binary --------------------------------------------------------

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The lines that describe a packet: they start with its frame number.
    fn packet_lines(&self) -> Vec<(u64, &str)> {
        self.stdout.lines().filter_map(|l| Some((l.split_whitespace().next()?.parse().ok()?, l))).collect()
    }

    /// The `summary:` line (stdout in text mode, stderr in JSON mode).
    fn summary(&self) -> &str {
        self.stdout
            .lines()
            .chain(self.stderr.lines())
            .find(|l| l.starts_with("summary: "))
            .unwrap_or_else(|| panic!("no summary in\n{}\n{}", self.stdout, self.stderr))
    }

    fn json(&self) -> Vec<Value> {
        self.stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
    }
}

fn run_with(args: &[&OsStr], stdin: Option<&[u8]>) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rnic"));
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = cmd.spawn().expect("spawn rnic");
    if let Some(input) = stdin {
        // A failed write means rnic stopped reading early; its status says why.
        let _ = child.stdin.take().expect("stdin").write_all(input);
    }
    let out = child.wait_with_output().expect("wait for rnic");
    let stdout = String::from_utf8(out.stdout).expect("utf-8 stdout");
    let stderr = String::from_utf8(out.stderr).expect("utf-8 stderr");
    assert!(!stderr.contains("panicked"), "rnic {args:?} panicked:\n{stderr}");
    let code = out.status.code().unwrap_or_else(|| panic!("rnic {args:?} died: {}\n{stderr}", out.status));
    Run { code, stdout, stderr }
}

fn decode(path: &Path) -> Run {
    run_with(&["decode".as_ref(), path.as_os_str()], None)
}

fn decode_json(path: &Path) -> Run {
    run_with(&["decode".as_ref(), "--json".as_ref(), path.as_os_str()], None)
}

// ---- inputs ------------------------------------------------------------------------

fn vectors_dir() -> PathBuf {
    match std::env::var_os("RNIC_SHARED_DIR") {
        Some(d) => PathBuf::from(d).join("vectors"),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/vectors")),
    }
}

fn load_json(name: &str) -> Value {
    let path = vectors_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("vector JSON")
}

fn vectors() -> Vec<Value> {
    load_json("roce_vectors.json")["vectors"].as_array().expect("vectors").clone()
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex length");
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

fn frame_of(v: &Value) -> Vec<u8> {
    unhex(v["frame_hex"].as_str().expect("frame_hex"))
}

fn find(vs: &[Value], name: &str) -> Vec<u8> {
    frame_of(vs.iter().find(|v| v["name"] == name).unwrap_or_else(|| panic!("no vector {name}")))
}

/// The IP packet inside an Ethernet frame (802.1Q tag skipped, Ethernet padding kept:
/// the decoder must go by the IP length).
fn ip_of(frame: &[u8]) -> Vec<u8> {
    let start = if frame[12..14] == [0x81, 0x00] { 18 } else { 14 };
    frame[start..].to_vec()
}

/// A UDP datagram to port 53: traffic to skip.
fn dns_ipv4() -> Vec<u8> {
    let payload = b"not RoCE";
    let udp_len = 8 + payload.len();
    let mut ip = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
    ip[2..4].copy_from_slice(&u16::try_from(20 + udp_len).unwrap().to_be_bytes());
    let sum = rnic_wire::ipv4::internet_checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    ip.extend_from_slice(&40000u16.to_be_bytes());
    ip.extend_from_slice(&53u16.to_be_bytes());
    ip.extend_from_slice(&u16::try_from(udp_len).unwrap().to_be_bytes());
    ip.extend_from_slice(&[0, 0]);
    ip.extend_from_slice(payload);
    ip
}

/// An ARP request body (what follows an Ethernet or cooked header with type 0x0806).
fn arp_body() -> Vec<u8> {
    let mut b = vec![0, 1, 0x08, 0x00, 6, 4, 0, 1];
    b.extend_from_slice(&[2, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2]);
    b
}

fn ethernet(ethertype: u16, body: &[u8]) -> Vec<u8> {
    let mut f = vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(body);
    f
}

/// Linux cooked v1: packet type, ARPHRD, address length, 8 address bytes, protocol.
fn sll(protocol: u16, body: &[u8]) -> Vec<u8> {
    let mut f = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0];
    f.extend_from_slice(&protocol.to_be_bytes());
    assert_eq!(f.len(), 16);
    f.extend_from_slice(body);
    f
}

/// Linux cooked v2: protocol, reserved, ifindex, ARPHRD, packet type, address length,
/// 8 address bytes.
fn sll2(protocol: u16, body: &[u8]) -> Vec<u8> {
    let mut f = protocol.to_be_bytes().to_vec();
    f.extend_from_slice(&[0, 0, 0, 0, 0, 3, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0]);
    assert_eq!(f.len(), 20);
    f.extend_from_slice(body);
    f
}

fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("decode_cli-{name}"))
}

/// Writes a classic pcap; each record is (captured bytes, length on the wire).
fn write_pcap(name: &str, link: DataLink, endianness: Endianness, records: &[(Vec<u8>, usize)]) -> PathBuf {
    let path = tmp(name);
    let header =
        PcapHeader { datalink: link, endianness, ts_resolution: TsResolution::NanoSecond, ..Default::default() };
    let mut w = PcapWriter::with_header(File::create(&path).expect("create"), header).expect("pcap header");
    for (i, (data, orig_len)) in records.iter().enumerate() {
        let ts = Duration::from_micros(u64::try_from(i).unwrap());
        let p = PcapPacket::new(ts, u32::try_from(*orig_len).unwrap(), data);
        w.write_packet(&p).expect("pcap record");
    }
    path
}

fn whole(frames: Vec<Vec<u8>>) -> Vec<(Vec<u8>, usize)> {
    frames.into_iter().map(|f| (f.clone(), f.len())).collect()
}

/// An enhanced packet block, little-endian, built by hand (the writer refuses an
/// interface that was not declared).
fn raw_epb(interface_id: u32, data: &[u8]) -> Vec<u8> {
    let padded = data.len().div_ceil(4) * 4;
    let block_len = u32::try_from(32 + padded).unwrap();
    let mut b = vec![];
    for word in
        [6, block_len, interface_id, 0, 0, u32::try_from(data.len()).unwrap(), u32::try_from(data.len()).unwrap()]
    {
        b.extend_from_slice(&word.to_le_bytes());
    }
    b.extend_from_slice(data);
    b.resize(28 + padded, 0);
    b.extend_from_slice(&block_len.to_le_bytes());
    b
}

/// Writes a little-endian pcapng with the given interfaces; each packet is
/// (interface, bytes).
fn write_pcapng(name: &str, interfaces: &[DataLink], packets: &[(u32, Vec<u8>)]) -> PathBuf {
    let path = tmp(name);
    let file = File::create(&path).expect("create");
    let mut w = PcapNgWriter::with_endianness(file, Endianness::Little).expect("pcapng header");
    for &linktype in interfaces {
        let idb = InterfaceDescriptionBlock { linktype, snaplen: 0xffff, options: vec![] };
        w.write_pcapng_block(idb).expect("IDB");
    }
    for (i, (interface_id, data)) in packets.iter().enumerate() {
        if usize::try_from(*interface_id).unwrap() >= interfaces.len() {
            w.get_mut().write_all(&raw_epb(*interface_id, data)).expect("raw EPB");
            continue;
        }
        let epb = EnhancedPacketBlock {
            interface_id: *interface_id,
            timestamp: Duration::from_micros(u64::try_from(i).unwrap()),
            original_len: u32::try_from(data.len()).unwrap(),
            data: Cow::Borrowed(data),
            options: vec![],
        };
        w.write_pcapng_block(epb).expect("EPB");
    }
    path
}

/// Deterministic pseudo-random bytes (xorshift64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % u64::try_from(n).unwrap()).unwrap()
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next().to_le_bytes()[3]).collect()
    }
}

// ---- the shared vectors ---------------------------------------------------------

#[test]
fn vectors_pcap_decodes_all_289_clean() {
    let r = decode(&vectors_dir().join("roce_vectors.pcap"));
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let lines = r.packet_lines();
    assert_eq!(lines.len(), 289);
    for (i, (n, line)) in lines.iter().enumerate() {
        assert_eq!(*n, u64::try_from(i + 1).unwrap(), "{line}");
        assert!(line.ends_with("ICRC ok"), "{line}");
        assert!(line.contains(":4791 "), "{line}");
    }
    assert_eq!(
        r.summary(),
        "summary: 289 frames: 289 RoCEv2 (289 ICRC ok, 0 bad ICRC, 0 malformed), 0 non-RoCE skipped"
    );
    assert!(r.stdout.contains("\nPASS"), "{}", r.stdout);

    // The per-opcode histogram agrees with the vectors' own count.
    let expected: BTreeMap<String, u64> = load_json("roce_vectors.json")["counts_by_opcode"]
        .as_object()
        .expect("counts_by_opcode")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect();
    let got: BTreeMap<String, u64> = r
        .stdout
        .lines()
        .filter(|l| l.starts_with("  0x"))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[1].to_string(), w[2].parse().unwrap())
        })
        .collect();
    assert_eq!(got, expected);

    // Spot checks of the text line: addresses, opcode, QPN, PSN, AckReq, RETH, length.
    let (_, l13) = lines[12];
    assert_eq!(
        l13.trim_start(),
        "13 172.220.89.115:49646 -> 172.18.94.254:4791 RC_RDMA_WRITE_FIRST qp=0xb1d7a3 psn=9176104 A \
         va=0x2c99c79720c3f455 rkey=0xf0b5c0b0 dmalen=13214 len=256 ICRC ok"
    );
    assert!(lines[1].1.contains("[fe80::a59d:638e:99b4:6cd1]:49705 -> "), "{}", lines[1].1);
}

#[test]
fn json_fields_equal_the_vector_json() {
    let r = decode_json(&vectors_dir().join("roce_vectors.pcap"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let objs = r.json();
    let vs = vectors();
    assert_eq!(objs.len(), vs.len());
    assert_eq!(objs.len(), 289);
    for (i, (o, v)) in objs.iter().zip(&vs).enumerate() {
        let name = v["name"].as_str().unwrap();
        assert_eq!(o["frame"], Value::from(i + 1), "{name}");
        assert_eq!(v["pcap_frame_number"], o["frame"], "{name}");
        for key in ["bth", "ext_headers", "payload_len", "pad_len", "icrc_hex"] {
            assert_eq!(o[key], v[key], "{name}: {key}");
        }
        assert_eq!(o["icrc_ok"], Value::Bool(true), "{name}");
        assert_eq!(o["icrc_computed_hex"], v["icrc_hex"], "{name}");
        assert_eq!(o["src"], v["ip"]["src"], "{name}");
        assert_eq!(o["dst"], v["ip"]["dst"], "{name}");
        assert_eq!(o["sport"], v["udp"]["sport"], "{name}");
        assert_eq!(o["dport"], v["udp"]["dport"], "{name}");
    }
    // stdout is pure JSON lines; the summary went to stderr.
    assert!(r.stderr.starts_with("summary: 289 frames: 289 RoCEv2"), "{}", r.stderr);
}

#[test]
fn bad_icrc_pcap_names_all_six_frames() {
    let path = vectors_dir().join("roce_bad_icrc.pcap");
    let r = decode(&path);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    let lines = r.packet_lines();
    assert_eq!(lines.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6]);
    for (_, line) in &lines {
        assert!(line.contains("ICRC BAD (carried "), "{line}");
    }
    assert!(r.stdout.contains("\nbad ICRC: frames 1 2 3 4 5 6\n"), "{}", r.stdout);
    assert!(r.stdout.contains("\nFAIL"), "{}", r.stdout);
    assert_eq!(r.summary(), "summary: 6 frames: 6 RoCEv2 (0 ICRC ok, 6 bad ICRC, 0 malformed), 0 non-RoCE skipped");

    // JSON: the carried and the correct ICRC, as the bad-vector file records them.
    let bad = load_json("roce_bad_icrc.json");
    let objs = decode_json(&path).json();
    let expected = bad["vectors"].as_array().unwrap();
    assert_eq!(objs.len(), expected.len());
    for (o, v) in objs.iter().zip(expected) {
        assert_eq!(o["icrc_ok"], Value::Bool(false));
        assert_eq!(o["icrc_hex"], v["icrc_hex_in_frame"], "{}", v["name"]);
        assert_eq!(o["icrc_computed_hex"], v["icrc_hex_correct"], "{}", v["name"]);
    }

    // The same file on standard input.
    let bytes = std::fs::read(&path).unwrap();
    let r = run_with(&["decode".as_ref(), "-".as_ref()], Some(&bytes));
    assert_eq!(r.code, 1);
    assert_eq!(r.packet_lines().len(), 6);
}

// ---- files that cannot be read ----------------------------------------------------

#[test]
fn missing_file_exits_2_with_path_and_reason() {
    let path = tmp("does-not-exist.pcap");
    let _ = std::fs::remove_file(&path);
    let r = decode(&path);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains(&*path.to_string_lossy()), "{}", r.stderr);
    assert!(r.stderr.contains("No such file"), "{}", r.stderr);
    assert!(r.stdout.is_empty());
}

#[test]
fn garbage_and_empty_files_exit_2() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let garbage = tmp("garbage.bin");
    std::fs::write(&garbage, rng.bytes(4096)).unwrap();
    let r = decode(&garbage);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("garbage.bin") && r.stderr.contains("not a pcap or pcapng file"), "{}", r.stderr);

    let empty = tmp("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let r = decode(&empty);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("empty.pcap: empty file"), "{}", r.stderr);

    // A right magic number followed by garbage: damaged, never a crash.
    for (name, magic) in [("garbage-pcap", [0xd4, 0xc3, 0xb2, 0xa1]), ("garbage-pcapng", [0x0a, 0x0d, 0x0d, 0x0a])] {
        let path = tmp(name);
        let mut bytes = magic.to_vec();
        bytes.extend(rng.bytes(4096));
        std::fs::write(&path, bytes).unwrap();
        let r = decode(&path);
        assert_eq!(r.code, 2, "{name}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains(name), "{}", r.stderr);
    }

    // A classic pcap of a link type the decoder does not know.
    let path = write_pcap("unsupported-link.pcap", DataLink::PPP, Endianness::Little, &whole(vec![vec![0; 40]]));
    let r = decode(&path);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("link type 9 is not supported"), "{}", r.stderr);
}

// ---- link types -------------------------------------------------------------------

#[test]
fn raw_ip_pcap_big_endian_nanoseconds() {
    let vs = vectors();
    let frames = vec![
        ip_of(&frame_of(&vs[0])),
        dns_ipv4(),
        ip_of(&frame_of(&vs[1])),
        ip_of(&find(&vs, "rc_send_only_len0_ipv4_eth_padded")),
    ];
    let path = write_pcap("raw.pcap", DataLink::RAW, Endianness::Big, &whole(frames));
    let r = decode(&path);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.summary(), "summary: 4 frames: 3 RoCEv2 (3 ICRC ok, 0 bad ICRC, 0 malformed), 1 non-RoCE skipped");
    assert_eq!(r.packet_lines().iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 3, 4]);
    let objs = decode_json(&path).json();
    assert_eq!(objs[0]["bth"], vs[0]["bth"]);
    assert_eq!(objs[1]["icrc_hex"], vs[1]["icrc_hex"]);
}

#[test]
fn linux_sll_pcap() {
    let vs = vectors();
    let (v4, v6) = (ip_of(&frame_of(&vs[0])), ip_of(&frame_of(&vs[1])));
    let frames = vec![
        sll(0x0800, &v4),
        sll(0x0806, &arp_body()),
        sll(0x86dd, &v6),
        sll(0x0800, &dns_ipv4()),
        sll(0x0800, &v4[..0]), // a cooked header and nothing after it
    ];
    let path = write_pcap("sll.pcap", DataLink::LINUX_SLL, Endianness::Little, &whole(frames));
    let r = decode(&path);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.summary(), "summary: 5 frames: 2 RoCEv2 (2 ICRC ok, 0 bad ICRC, 0 malformed), 3 non-RoCE skipped");
    assert_eq!(r.packet_lines().iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 3]);
}

#[test]
fn linux_sll2_pcap() {
    let vs = vectors();
    let vlan = ip_of(&find(&vs, "rc_acknowledge_ack_credit31_ipv6_vlan"));
    let mut tagged = vec![0x60, 0x05, 0x86, 0xdd]; // an inline 802.1Q tag, then IPv6
    tagged.extend_from_slice(&vlan);
    let frames = vec![
        sll2(0x0800, &dns_ipv4()),
        sll2(0x0800, &ip_of(&frame_of(&vs[0]))),
        sll2(0x8100, &tagged),
        sll2(0x0806, &arp_body()),
        sll2(0x86dd, &ip_of(&frame_of(&vs[1]))),
    ];
    let path = write_pcap("sll2.pcap", DataLink::LINUX_SLL2, Endianness::Little, &whole(frames));
    let r = decode(&path);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.summary(), "summary: 5 frames: 3 RoCEv2 (3 ICRC ok, 0 bad ICRC, 0 malformed), 2 non-RoCE skipped");
    assert_eq!(r.packet_lines().iter().map(|(n, _)| *n).collect::<Vec<_>>(), [2, 3, 5]);
    assert!(r.stdout.contains("RC_ACKNOWLEDGE"), "{}", r.stdout);
}

#[test]
fn pcapng_with_ethernet_and_raw_interfaces() {
    let vs = vectors();
    let packets = vec![
        (0, frame_of(&vs[0])),
        (0, find(&vs, "rc_rdma_write_first_len256_ipv4_vlan")),
        (0, ethernet(0x0806, &arp_body())),
        (1, ip_of(&frame_of(&vs[1]))),
        (0, ethernet(0x0800, &dns_ipv4())),
        (0, find(&vs, "uc_send_only_len0_ipv4_eth_padded")),
    ];
    let path = write_pcapng("eth.pcapng", &[DataLink::ETHERNET, DataLink::RAW], &packets);
    let r = decode(&path);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.summary(), "summary: 6 frames: 4 RoCEv2 (4 ICRC ok, 0 bad ICRC, 0 malformed), 2 non-RoCE skipped");
    assert_eq!(r.packet_lines().iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 2, 4, 6]);
    let objs = decode_json(&path).json();
    assert_eq!(objs.iter().map(|o| o["frame"].as_u64().unwrap()).collect::<Vec<_>>(), [1, 2, 4, 6]);
    assert_eq!(objs[0]["ext_headers"], vs[0]["ext_headers"]);
    assert_eq!(objs[2]["bth"], vs[1]["bth"]);

    // An interface of a link type the decoder does not know: its packets are skipped.
    let path =
        write_pcapng("ppp.pcapng", &[DataLink::ETHERNET, DataLink::PPP], &[(0, frame_of(&vs[0])), (1, vec![0; 30])]);
    let r = decode(&path);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.summary().ends_with("1 non-RoCE skipped (1 on interfaces of an unsupported link type)"),
        "{}",
        r.summary()
    );

    // A packet on an interface that was never declared damages the file.
    let path = write_pcapng("no-idb.pcapng", &[DataLink::ETHERNET], &[(0, frame_of(&vs[0])), (3, frame_of(&vs[2]))]);
    let r = decode(&path);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("after frame 1: packet on interface 3"), "{}", r.stderr);
    assert_eq!(r.packet_lines().len(), 1);
}

// ---- malformed RoCEv2 packets ---------------------------------------------------

/// Sets the IPv4 total length, the UDP length, a zero UDP checksum and a fresh IPv4
/// header checksum of an untagged Ethernet frame to match its current length.
fn fix_ipv4_lengths(frame: &mut [u8]) {
    let total = u16::try_from(frame.len() - 14).unwrap();
    frame[16..18].copy_from_slice(&total.to_be_bytes());
    frame[24..26].fill(0);
    let sum = rnic_wire::ipv4::internet_checksum(&frame[14..34]);
    frame[24..26].copy_from_slice(&sum.to_be_bytes());
    frame[38..40].copy_from_slice(&(total - 20).to_be_bytes());
    frame[40..42].fill(0);
}

#[test]
fn truncated_and_damaged_roce_frames_are_named() {
    let vs = vectors();
    let good = frame_of(&vs[0]);
    // 1. Cut inside the payload, IP and UDP lengths left alone.
    let cut = good[..good.len() - 100].to_vec();
    // 2. Cut inside the RETH, lengths fixed so only the RoCE structure is wrong.
    let write_first = find(&vs, "rc_rdma_write_first_len256_ipv4");
    let mut in_reth = write_first[..14 + 20 + 8 + 12 + 8].to_vec();
    fix_ipv4_lengths(&mut in_reth);
    // 3. The whole frame on the wire, but the capture kept only 60 bytes.
    let snapped = (good[..60].to_vec(), good.len());
    // 4. TVer 1 (UDP checksum zeroed so that it is the only fault).
    let mut tver = good.clone();
    tver[42 + 1] |= 0x01;
    tver[40..42].fill(0);
    // 5. A TCP segment to port 4791 with a bad IPv4 checksum: not RoCE, skipped.
    let mut tcp = good.clone();
    tcp[14 + 9] = 6;

    let records = vec![
        (good.clone(), good.len()),
        (cut.clone(), cut.len()),
        (in_reth.clone(), in_reth.len()),
        snapped,
        (tver.clone(), tver.len()),
        (tcp.clone(), tcp.len()),
    ];
    let path = write_pcap("malformed.pcap", DataLink::ETHERNET, Endianness::Little, &records);
    let r = decode(&path);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    let lines = r.packet_lines();
    assert_eq!(lines.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    assert!(lines[0].1.ends_with("ICRC ok"));
    assert!(lines[1].1.contains("MALFORMED: truncated IPv4 datagram"), "{}", lines[1].1);
    assert!(lines[2].1.contains("MALFORMED: truncated RETH"), "{}", lines[2].1);
    let kept = format!("(the capture kept 60 of {} bytes)", good.len());
    assert!(lines[3].1.contains("MALFORMED: truncated") && lines[3].1.ends_with(&kept), "{}", lines[3].1);
    assert!(lines[4].1.contains("MALFORMED: BTH TVer is 1"), "{}", lines[4].1);
    assert!(lines[1].1.contains("172.73.243.22:50609 -> 192.225.157.112:4791"), "{}", lines[1].1);
    assert!(r.stdout.contains("\nmalformed: frames 2 3 4 5\n"), "{}", r.stdout);
    assert_eq!(r.summary(), "summary: 6 frames: 5 RoCEv2 (1 ICRC ok, 0 bad ICRC, 4 malformed), 1 non-RoCE skipped");

    let objs = decode_json(&path).json();
    assert_eq!(objs.len(), 5);
    assert_eq!(objs[2]["frame"], Value::from(3));
    assert!(objs[2]["error"].as_str().unwrap().starts_with("truncated RETH"), "{}", objs[2]);
    assert!(objs[2].get("bth").is_none());
}

// ---- damaged files: never a crash ---------------------------------------------

/// Byte offsets where each record of a little-endian classic pcap starts, and its end.
fn pcap_record_starts(bytes: &[u8]) -> Vec<usize> {
    assert_eq!(bytes[..4], [0xd4, 0xc3, 0xb2, 0xa1]);
    let mut starts = vec![];
    let mut at = 24;
    while at < bytes.len() {
        starts.push(at);
        let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
        at += 16 + usize::try_from(incl).unwrap();
    }
    assert_eq!(at, bytes.len());
    starts.push(at);
    starts
}

#[test]
fn truncated_pcap_copies_exit_0_at_record_boundaries_and_2_inside() {
    let bytes = std::fs::read(vectors_dir().join("roce_vectors.pcap")).unwrap();
    let starts = pcap_record_starts(&bytes);
    let mut cuts: Vec<usize> = (0..=26).collect();
    for &k in &[1usize, 2, 57, 140, 288] {
        let (s, next) = (starts[k], starts[k + 1]);
        cuts.extend([s, s + 1, s + 15, s + 16, s + 17, (s + next) / 2, next - 1]);
    }
    let path = tmp("cut.pcap");
    for cut in cuts {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let r = decode(&path);
        let at_boundary = cut == 24 || starts.contains(&cut);
        let expected = if at_boundary { 0 } else { 2 };
        assert_eq!(r.code, expected, "cut at {cut}: {}", r.stderr);
        if !at_boundary {
            assert!(r.stderr.contains("cut.pcap: "), "cut at {cut}: {}", r.stderr);
        }
        // Every complete record before the cut was still decoded.
        let complete = starts.iter().filter(|&&s| s > 24 && s <= cut).count();
        assert_eq!(r.packet_lines().len(), complete, "cut at {cut}");
    }
}

#[test]
fn corrupted_pcap_and_pcapng_never_crash() {
    let vs = vectors();
    let pcap = std::fs::read(vectors_dir().join("roce_vectors.pcap")).unwrap();
    let packets: Vec<(u32, Vec<u8>)> = vs.iter().take(40).map(|v| (0, frame_of(v))).collect();
    let ng_path = write_pcapng("fuzz-base.pcapng", &[DataLink::ETHERNET], &packets);
    let pcapng = std::fs::read(&ng_path).unwrap();
    let r = decode(&ng_path);
    assert_eq!((r.code, r.packet_lines().len()), (0, 40), "{}", r.stderr);

    let mut rng = Rng(0x0dd_f00d_cafe_beef);
    let path = tmp("fuzz.cap");
    for round in 0..60 {
        let base = if round % 2 == 0 { &pcap } else { &pcapng };
        let mut bytes = base.clone();
        // Cut somewhere, then flip a few bytes (headers, lengths, payloads alike).
        if round % 3 == 0 {
            bytes.truncate(rng.below(bytes.len()));
        }
        for _ in 0..=rng.below(6) {
            if bytes.is_empty() {
                break;
            }
            let at = rng.below(bytes.len().min(if round % 4 == 0 { 64 } else { usize::MAX }));
            bytes[at] ^= rng.bytes(1)[0] | 1;
        }
        std::fs::write(&path, &bytes).unwrap();
        let r = decode(&path);
        assert!((0..=2).contains(&r.code), "round {round}: exit {}", r.code);
        let r = decode_json(&path);
        assert!((0..=2).contains(&r.code), "round {round}: exit {}", r.code);
        for line in r.stdout.lines() {
            serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("round {round}: {e}: {line}"));
        }
    }
}
