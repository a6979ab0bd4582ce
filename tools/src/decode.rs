//! `rnic decode FILE`: decode every RoCEv2 packet of a pcap or pcapng capture, check
//! its structure and ICRC, and say which packets are wrong.
//!
//! Each frame falls in one of three classes:
//!
//! * **RoCEv2**: `rnic_wire` parsed it. It is printed with its ICRC verdict.
//! * **malformed RoCEv2**: a UDP datagram to port 4791 that `rnic_wire` refused. It is
//!   named with the reason.
//! * **not RoCE**: anything else, skipped and counted. That includes a frame the wire
//!   parser refused before reaching UDP (say, a TCP segment with a bad IPv4 checksum),
//!   which is why the destination port is looked up here independently of the parser.

use crate::capture::{self, be16, CaptureError, CaptureReader, CapturedFrame, Network};
use rnic_wire::aeth::Syndrome;
use rnic_wire::frame::{self, ParsedPacket};
use rnic_wire::{bth, HeaderKind, Opcode, ROCEV2_UDP_PORT};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

/// Every RoCEv2 packet is well formed and carries a good ICRC.
const EXIT_OK: u8 = 0;
/// At least one RoCEv2 packet is malformed or carries a bad ICRC.
const EXIT_BAD_PACKETS: u8 = 1;
/// The capture could not be read (usage errors from clap exit 2 as well).
const EXIT_UNREADABLE: u8 = 2;

/// How many frame numbers the summary lists per problem before saying "and N more".
const LISTED_FRAMES: usize = 50;

/// Arguments of `rnic decode`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Exit status:
  0  every RoCEv2 packet is well formed with a good ICRC (also when there are none)
  1  some RoCEv2 packet is malformed or has a bad ICRC; each one is named
  2  the file cannot be read: missing, not a capture, or damaged part way
     (packets before the damage are still printed)

Non-RoCE frames (other EtherTypes, other IP protocols, other UDP ports) are skipped
and counted. Link types: Ethernet (with 802.1Q), Linux cooked SLL and SLL2, raw IP.")]
pub struct Args {
    /// Capture file, pcap or pcapng ("-" reads standard input).
    pub file: PathBuf,

    /// Print one JSON object per RoCEv2 packet instead of a text line.
    ///
    /// The `bth`, `ext_headers`, `payload_len`, `pad_len` and `icrc_hex` fields have
    /// the names and shapes of shared/vectors/roce_vectors.json; a malformed packet is
    /// {"frame": N, "error": "..."}. The summary goes to standard error.
    #[arg(long)]
    pub json: bool,
}

/// Runs `rnic decode`.
pub fn run(args: &Args) -> ExitCode {
    let path = args.file.display();
    let input: Box<dyn Read> = if args.file.as_os_str() == "-" {
        Box::new(io::stdin().lock())
    } else {
        match File::open(&args.file) {
            Ok(f) => Box::new(f),
            Err(e) => return unreadable(&path, &CaptureError::Io(e)),
        }
    };
    let mut reader = match CaptureReader::new(input) {
        Ok(r) => r,
        Err(e) => return unreadable(&path, &e),
    };
    if let Some(link) = reader.pcap_link_type().filter(|l| !l.is_supported()) {
        let reason =
            format!("link type {} is not supported (Ethernet, LINUX_SLL, LINUX_SLL2 and raw IP are)", link.number());
        return unreadable(&path, &CaptureError::BadHeader(reason));
    }

    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut stats = Stats::default();
    match decode_all(&mut reader, &mut out, args.json, &mut stats) {
        Ok(None) => ExitCode::from(if stats.all_good() { EXIT_OK } else { EXIT_BAD_PACKETS }),
        Ok(Some(read_error)) => unreadable(&path, &read_error),
        Err(e) => {
            // A closed pipe (`rnic decode f | head`) is the reader's choice: no message.
            if e.kind() != io::ErrorKind::BrokenPipe {
                eprintln!("rnic decode: writing the output: {e}");
            }
            ExitCode::from(EXIT_UNREADABLE)
        }
    }
}

/// Reports every frame and then the summary. Returns the error that stopped reading
/// the capture early, if one did; `Err` is a failure to write the output.
fn decode_all<R: Read>(
    reader: &mut CaptureReader<R>,
    out: &mut impl Write,
    json: bool,
    stats: &mut Stats,
) -> io::Result<Option<CaptureError>> {
    let mut read_error = None;
    while let Some(next) = reader.next_frame() {
        match next {
            Ok(f) => report(out, json, stats, &f)?,
            Err(e) => {
                read_error = Some(e);
                break;
            }
        }
    }
    let summary = stats.summary();
    if json {
        // stdout stays pure JSON lines.
        out.flush()?;
        io::stderr().lock().write_all(summary.as_bytes())?;
    } else {
        out.write_all(summary.as_bytes())?;
    }
    out.flush()?;
    Ok(read_error)
}

fn unreadable(path: &std::path::Display<'_>, e: &CaptureError) -> ExitCode {
    eprintln!("rnic decode: {path}: {e}");
    ExitCode::from(EXIT_UNREADABLE)
}

/// What one frame turned out to be.
// Lives for one frame on the stack; boxing the parsed packet would only add a malloc.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Outcome<'a> {
    Roce(ParsedPacket<'a>),
    Malformed {
        at: Endpoints,
        error: String,
    },
    NotRoce,
    /// On a pcapng interface whose link type this tool cannot peel.
    UnsupportedLink,
}

/// What a captured frame is: the one classification `rnic decode` and `rnic ladder` share.
pub(crate) fn classify<'a>(f: &CapturedFrame<'a>) -> Outcome<'a> {
    let net = f.network();
    let parsed = match net {
        Network::Ethernet(b) => frame::parse_ethernet(b),
        Network::Ip(b) => frame::parse_ip(b),
        Network::NotIp(_) | Network::Truncated => return Outcome::NotRoce,
        Network::Unsupported(_) => return Outcome::UnsupportedLink,
    };
    let error = match parsed {
        Ok(p) => return Outcome::Roce(p),
        Err(e) if e.is_not_roce() => return Outcome::NotRoce,
        Err(e) => e,
    };
    match peek_udp(net) {
        Some(at) if at.dport == ROCEV2_UDP_PORT => {
            let mut error = error.to_string();
            if f.is_snapped() {
                let _ = write!(error, " (the capture kept {} of {} bytes)", f.data.len(), f.orig_len);
            }
            Outcome::Malformed { at, error }
        }
        _ => Outcome::NotRoce,
    }
}

/// Addresses and ports of a UDP datagram, read without validating anything else.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Endpoints {
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
    pub(crate) sport: u16,
    pub(crate) dport: u16,
}

fn array<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at + N)?.try_into().ok()
}

/// Finds the UDP ports of a frame or IP packet, if it is an unfragmented (or first
/// fragment of a) UDP datagram whose header is in the capture.
fn peek_udp(net: Network<'_>) -> Option<Endpoints> {
    let ip = match net {
        Network::Ip(b) => b,
        Network::Ethernet(b) => match capture::ethernet_payload(b) {
            Network::Ip(ip) => ip,
            _ => return None,
        },
        _ => return None,
    };
    let (src, dst, udp_start) = match ip.first()? >> 4 {
        4 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let first_fragment = be16(ip, 6)? & 0x1fff == 0;
            if ihl < 20 || *ip.get(9)? != 17 || !first_fragment {
                return None;
            }
            let src = Ipv4Addr::from(array::<4>(ip, 12)?);
            let dst = Ipv4Addr::from(array::<4>(ip, 16)?);
            (IpAddr::V4(src), IpAddr::V4(dst), ihl)
        }
        6 => {
            if *ip.get(6)? != 17 {
                return None;
            }
            let src = Ipv6Addr::from(array::<16>(ip, 8)?);
            let dst = Ipv6Addr::from(array::<16>(ip, 24)?);
            (IpAddr::V6(src), IpAddr::V6(dst), 40)
        }
        _ => return None,
    };
    Some(Endpoints { src, dst, sport: be16(ip, udp_start)?, dport: be16(ip, udp_start + 2)? })
}

/// Counters for the summary.
#[derive(Debug, Default)]
struct Stats {
    frames: u64,
    roce: u64,
    icrc_ok: u64,
    bad_icrc: Vec<u64>,
    malformed: Vec<u64>,
    not_roce: u64,
    unsupported_link: u64,
    by_opcode: BTreeMap<u8, u64>,
}

impl Stats {
    fn all_good(&self) -> bool {
        self.bad_icrc.is_empty() && self.malformed.is_empty()
    }

    fn summary(&self) -> String {
        let mut s = String::new();
        let roce_total = self.roce + count(&self.malformed);
        let _ = write!(
            s,
            "summary: {} frames: {} RoCEv2 ({} ICRC ok, {} bad ICRC, {} malformed), {} non-RoCE skipped",
            self.frames,
            roce_total,
            self.icrc_ok,
            self.bad_icrc.len(),
            self.malformed.len(),
            self.not_roce,
        );
        if self.unsupported_link > 0 {
            let _ = write!(s, " ({} on interfaces of an unsupported link type)", self.unsupported_link);
        }
        s.push('\n');
        if !self.by_opcode.is_empty() {
            s.push_str("by opcode:\n");
        }
        for (&op, &n) in &self.by_opcode {
            let _ = writeln!(s, "  0x{op:02x} {:<34} {n:>8}", Opcode(op).name());
        }
        list_frames(&mut s, "bad ICRC", &self.bad_icrc);
        list_frames(&mut s, "malformed", &self.malformed);
        if self.all_good() {
            let what = if roce_total == 0 { "no RoCEv2 packets found" } else { "all RoCEv2 packets good" };
            let _ = writeln!(s, "PASS: {what}");
        } else {
            let _ = writeln!(
                s,
                "FAIL: {} RoCEv2 packet(s) with a bad ICRC, {} malformed",
                self.bad_icrc.len(),
                self.malformed.len()
            );
        }
        s
    }
}

fn count(v: &[u64]) -> u64 {
    u64::try_from(v.len()).unwrap_or(u64::MAX)
}

fn list_frames(s: &mut String, what: &str, frames: &[u64]) {
    if frames.is_empty() {
        return;
    }
    let _ = write!(s, "{what}: frame");
    if frames.len() > 1 {
        s.push('s');
    }
    for n in frames.iter().take(LISTED_FRAMES) {
        let _ = write!(s, " {n}");
    }
    if frames.len() > LISTED_FRAMES {
        let _ = write!(s, " and {} more", frames.len() - LISTED_FRAMES);
    }
    s.push('\n');
}

fn report(out: &mut impl Write, json: bool, stats: &mut Stats, f: &CapturedFrame<'_>) -> io::Result<()> {
    stats.frames += 1;
    match classify(f) {
        Outcome::UnsupportedLink => {
            stats.not_roce += 1;
            stats.unsupported_link += 1;
            Ok(())
        }
        Outcome::NotRoce => {
            stats.not_roce += 1;
            Ok(())
        }
        Outcome::Malformed { at, error } => {
            stats.malformed.push(f.number);
            if json {
                let obj = JsonMalformed {
                    frame: f.number,
                    error,
                    src: at.src.to_string(),
                    dst: at.dst.to_string(),
                    sport: at.sport,
                    dport: at.dport,
                };
                write_json(out, &obj)
            } else {
                let (src, dst) = (SocketAddr::new(at.src, at.sport), SocketAddr::new(at.dst, at.dport));
                writeln!(out, "{:>6} {src} -> {dst} MALFORMED: {error}", f.number)
            }
        }
        Outcome::Roce(p) => {
            stats.roce += 1;
            *stats.by_opcode.entry(p.roce.bth.opcode.0).or_insert(0) += 1;
            if p.icrc_ok() {
                stats.icrc_ok += 1;
            } else {
                stats.bad_icrc.push(f.number);
            }
            if json {
                write_json(out, &json_packet(f.number, &p))
            } else {
                text_line(out, f.number, &p)
            }
        }
    }
}

fn write_json(out: &mut impl Write, value: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer(&mut *out, value).map_err(io::Error::from)?;
    out.write_all(b"\n")
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

fn text_line(out: &mut impl Write, number: u64, p: &ParsedPacket<'_>) -> io::Result<()> {
    let src = SocketAddr::new(p.ip.src(), p.udp.src_port);
    let dst = SocketAddr::new(p.ip.dst(), p.udp.dst_port);
    write!(out, "{number:>6} {src} -> {dst} {} ", p.roce)?;
    if p.icrc_ok() {
        writeln!(out, "ICRC ok")
    } else {
        // Wire byte order, as a hex dump and the vectors' icrc_hex show it.
        writeln!(
            out,
            "ICRC BAD (carried {}, computed {}, wire byte order)",
            hex(&p.icrc_received.to_le_bytes()),
            hex(&p.icrc_computed.to_le_bytes())
        )
    }
}

/// One RoCEv2 packet in `--json` output.
#[derive(Debug, Serialize)]
struct JsonPacket {
    frame: u64,
    src: String,
    dst: String,
    sport: u16,
    dport: u16,
    bth: JsonBth,
    ext_headers: Vec<JsonExt>,
    payload_len: usize,
    pad_len: u8,
    /// The ICRC as carried, in wire byte order.
    icrc_hex: String,
    /// The ICRC computed over the received bytes, in wire byte order.
    icrc_computed_hex: String,
    icrc_ok: bool,
}

/// A malformed RoCEv2 packet in `--json` output.
#[derive(Debug, Serialize)]
struct JsonMalformed {
    frame: u64,
    error: String,
    src: String,
    dst: String,
    sport: u16,
    dport: u16,
}

/// The BTH as roce_vectors.json spells it: every field by its raw wire value, flags
/// as 0/1, reserved bits included.
#[derive(Debug, Serialize)]
struct JsonBth {
    opcode: u8,
    opcode_name: &'static str,
    se: u8,
    m: u8,
    padcnt: u8,
    tver: u8,
    pkey: u16,
    fecn: u8,
    becn: u8,
    resv6: u8,
    destqp: u32,
    ackreq: u8,
    resv7: u8,
    psn: u32,
}

/// One extension header, tagged with `type` as in roce_vectors.json.
#[derive(Debug, Serialize)]
#[serde(tag = "type")]
enum JsonExt {
    #[serde(rename = "DETH")]
    Deth { qkey: u32, srcqp: u32, hex: String },
    #[serde(rename = "RETH")]
    Reth { va: u64, rkey: u32, dma_len: u32, hex: String },
    #[serde(rename = "FETH")]
    Feth { placement_type: u8, selectivity: u8, hex: String },
    #[serde(rename = "AtomicETH")]
    AtomicEth { va: u64, rkey: u32, swap_add_data: u64, compare_data: u64, hex: String },
    #[serde(rename = "AETH")]
    Aeth {
        syndrome: u8,
        msn: u32,
        aeth_type: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        credit_count: Option<u8>,
        #[serde(skip_serializing_if = "Option::is_none")]
        rnr_timer: Option<u8>,
        #[serde(skip_serializing_if = "Option::is_none")]
        nak_code: Option<u8>,
        #[serde(skip_serializing_if = "Option::is_none")]
        nak_name: Option<&'static str>,
        hex: String,
    },
    #[serde(rename = "AtomicAckETH")]
    AtomicAckEth { orig_remote_data: u64, hex: String },
    #[serde(rename = "ImmDt")]
    ImmDt { imm_data: u32, hex: String },
    #[serde(rename = "IETH")]
    Ieth { rkey: u32, hex: String },
    #[serde(rename = "XRCETH")]
    Xrceth { xrc_srqn: u32, hex: String },
}

fn json_packet(number: u64, p: &ParsedPacket<'_>) -> JsonPacket {
    // The parse succeeded, so the BTH is all there; read it raw for the fields the
    // representation normalises away (PadCnt, TVer, reserved bits).
    let b = bth::Packet::new_unchecked(p.roce_bytes);
    let bth = JsonBth {
        opcode: b.opcode().0,
        opcode_name: b.opcode().name(),
        se: b.se().into(),
        m: b.migreq().into(),
        padcnt: b.pad_count(),
        tver: b.tver(),
        pkey: b.pkey(),
        fecn: b.fecn().into(),
        becn: b.becn().into(),
        resv6: b.resv6(),
        destqp: b.dest_qp().value(),
        ackreq: b.ack_req().into(),
        resv7: b.resv7(),
        psn: b.psn().value(),
    };
    JsonPacket {
        frame: number,
        src: p.ip.src().to_string(),
        dst: p.ip.dst().to_string(),
        sport: p.udp.src_port,
        dport: p.udp.dst_port,
        bth,
        ext_headers: ext_headers(p),
        payload_len: p.roce.payload_len,
        pad_len: b.pad_count(),
        icrc_hex: hex(&p.icrc_received.to_le_bytes()),
        icrc_computed_hex: hex(&p.icrc_computed.to_le_bytes()),
        icrc_ok: p.icrc_ok(),
    }
}

/// The extension headers in wire order, each with its bytes.
fn ext_headers(p: &ParsedPacket<'_>) -> Vec<JsonExt> {
    let Some(info) = p.roce.info() else { return Vec::new() };
    let e = &p.roce.ext;
    let mut v = Vec::with_capacity(info.headers.len());
    for &kind in info.headers {
        let bytes = info.offset_of(kind).and_then(|off| p.roce_bytes.get(off..off + kind.wire_len()));
        let hex = hex(bytes.unwrap_or_default());
        let h = match kind {
            HeaderKind::Deth => e.deth.map(|d| JsonExt::Deth { qkey: d.qkey, srcqp: d.src_qp.value(), hex }),
            HeaderKind::Reth => e.reth.map(|r| JsonExt::Reth { va: r.va, rkey: r.rkey, dma_len: r.dma_len, hex }),
            HeaderKind::Feth => {
                e.feth.map(|f| JsonExt::Feth { placement_type: f.placement_type, selectivity: f.selectivity, hex })
            }
            HeaderKind::AtomicEth => e.atomic_eth.map(|a| JsonExt::AtomicEth {
                va: a.va,
                rkey: a.rkey,
                swap_add_data: a.swap_add,
                compare_data: a.compare,
                hex,
            }),
            HeaderKind::Aeth => e.aeth.map(|a| {
                let (mut credit_count, mut rnr_timer, mut nak_code, mut nak_name) = (None, None, None, None);
                match a.syndrome {
                    Syndrome::Ack { credits } => credit_count = Some(credits),
                    Syndrome::RnrNak { timer } => rnr_timer = Some(timer),
                    Syndrome::Nak(c) => (nak_code, nak_name) = (Some(c.code()), Some(c.name())),
                    Syndrome::Reserved(_) => {}
                }
                JsonExt::Aeth {
                    syndrome: a.syndrome.to_byte(),
                    msn: a.msn,
                    aeth_type: a.syndrome.type_name(),
                    credit_count,
                    rnr_timer,
                    nak_code,
                    nak_name,
                    hex,
                }
            }),
            HeaderKind::AtomicAckEth => {
                e.atomic_ack_eth.map(|a| JsonExt::AtomicAckEth { orig_remote_data: a.orig_remote_data, hex })
            }
            HeaderKind::ImmDt => e.imm_data.map(|imm_data| JsonExt::ImmDt { imm_data, hex }),
            HeaderKind::Ieth => e.ieth.map(|rkey| JsonExt::Ieth { rkey, hex }),
            HeaderKind::Xrceth => e.xrc_srqn.map(|xrc_srqn| JsonExt::Xrceth { xrc_srqn, hex }),
            // The CNP's 16 reserved bytes are not an extension header in the vectors.
            HeaderKind::CnpBody => None,
        };
        v.extend(h);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_udp(proto: u8, frag: u16, dport: u16) -> Vec<u8> {
        let mut b = vec![0u8; 28];
        b[0] = 0x45;
        b[6..8].copy_from_slice(&frag.to_be_bytes());
        b[9] = proto;
        b[12..16].copy_from_slice(&[10, 0, 0, 1]);
        b[16..20].copy_from_slice(&[10, 0, 0, 2]);
        b[20..22].copy_from_slice(&49152u16.to_be_bytes());
        b[22..24].copy_from_slice(&dport.to_be_bytes());
        b
    }

    #[test]
    fn peek_finds_udp_ports_only_where_they_are() {
        let b = ipv4_udp(17, 0x4000, 4791);
        let at = peek_udp(Network::Ip(&b)).unwrap();
        assert_eq!((at.sport, at.dport), (49152, 4791));
        assert_eq!(at.src, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        // TCP, a non-first fragment, a header cut before the ports: no ports.
        assert!(peek_udp(Network::Ip(&ipv4_udp(6, 0, 4791))).is_none());
        assert!(peek_udp(Network::Ip(&ipv4_udp(17, 0x0010, 4791))).is_none());
        assert!(peek_udp(Network::Ip(&b[..23])).is_none());
        // Behind Ethernet and an 802.1Q tag.
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x81, 0x00, 0x60, 0x05, 0x08, 0x00]);
        eth.extend_from_slice(&b);
        assert_eq!(peek_udp(Network::Ethernet(&eth)).unwrap().dport, 4791);
        for n in 0..eth.len() {
            let _ = peek_udp(Network::Ethernet(&eth[..n]));
        }
    }

    #[test]
    fn summary_names_problem_frames() {
        let mut s = Stats { frames: 3, roce: 2, icrc_ok: 1, bad_icrc: vec![2], malformed: vec![3], ..Stats::default() };
        s.by_opcode.insert(4, 2);
        let text = s.summary();
        assert!(text.starts_with("summary: 3 frames: 3 RoCEv2 (1 ICRC ok, 1 bad ICRC, 1 malformed), 0 non-RoCE"));
        assert!(text.contains("RC_SEND_ONLY"));
        assert!(text.contains("bad ICRC: frame 2\n"));
        assert!(text.contains("malformed: frame 3\n"));
        assert!(text.contains("FAIL"));
        assert!(!s.all_good());
    }
}
