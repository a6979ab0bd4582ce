//! `rnic ladder FILE`: a ladder (sequence) diagram of the RoCEv2 packets in a capture: one
//! column per host, one arrow per packet labelled as people read them, grouped by QP and
//! by message, with the time between arrows; retransmissions, duplicates and bad ICRCs
//! marked. In the terminal, or as one self-contained HTML file (`--html`).
//!
//! It reads captures with `capture` and classifies frames with `decode::classify`, so a
//! packet means here exactly what it means to `rnic decode`.

use crate::capture::{CaptureError, CaptureReader};
use crate::decode::{self, Outcome};
use rnic_wire::aeth::Syndrome;
use rnic_wire::opcode::{Operation, Position, Transport};
use rnic_wire::Opcode;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, IsTerminal, Read, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `rnic ladder`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Each arrow is one RoCEv2 packet, drawn from the host that sent it to the one it went to, with
the time since the previous arrow. A bracket in the left margin groups the packets of one
message (FIRST .. LAST). Marks: RETRANSMIT (a request PSN sent again after a NAK or a
wait), DUP (the same packet again at once), BAD ICRC (the receiver must drop it),
MALFORMED. Packets to QP 1 are management datagrams (the CM's REQ, REP, RTU, ...).

Exit status: 0 drawn; 2 the file cannot be read.")]
pub struct Args {
    /// Capture file, pcap or pcapng.
    pub file: PathBuf,
    /// Write a self-contained HTML page (SVG, no network) instead of drawing in the terminal.
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
    /// Only packets of this QP (either end's number, decimal or 0x hex).
    #[arg(long, value_parser = parse_u32)]
    pub qp: Option<u32>,
    /// Only from this frame number on (as `rnic decode` numbers them).
    #[arg(long)]
    pub from: Option<u64>,
    /// Only up to this frame number.
    #[arg(long)]
    pub to: Option<u64>,
    /// Draw at most this many packets.
    #[arg(long)]
    pub max: Option<usize>,
    /// Width of the terminal drawing (default: the terminal's, or 100).
    #[arg(long)]
    pub width: Option<usize>,
    /// Colour: auto (when standard output is a terminal), always, never.
    #[arg(long, default_value = "auto")]
    pub color: String,
}

fn parse_u32(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("`{s}` is not a QP number"))
}

/// What an arrow is, for colour and marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A request (SEND, WRITE, READ request, atomic, UD SEND).
    Request,
    /// A response (ACK, READ response, atomic ACK).
    Response,
    /// A NAK or RNR NAK.
    Nak,
    /// A congestion notification.
    Cnp,
    /// A management datagram (QP 1).
    Mad,
    /// A UDP datagram to 4791 that does not parse.
    Malformed,
}

/// One arrow (or a note) of the ladder.
#[derive(Debug, Clone)]
pub struct Arrow {
    /// Frame number in the capture (0 for a note that is not a packet).
    pub frame: u64,
    /// Capture time, ns.
    pub time_ns: u64,
    /// Sender.
    pub src: IpAddr,
    /// Receiver (the sender again for a note).
    pub dst: IpAddr,
    /// The label (`SEND_FIRST psn 0x12 len 1024`).
    pub label: String,
    /// Everything the decoder says about it (the HTML hover).
    pub detail: String,
    /// What it is.
    pub kind: Kind,
    /// RETRANSMIT, DUP, BAD ICRC.
    pub marks: Vec<&'static str>,
    /// The QP lane: the two ends' QP numbers where known (the receiver's first).
    pub lane: (u32, Option<u32>),
    /// Message bracket: position of this packet in its message.
    pub position: Option<Position>,
    /// A note drawn at its host instead of an arrow (a completion the CPU sees).
    pub note: bool,
}

/// A capture made into arrows, with what was skipped.
#[derive(Debug, Default)]
pub struct Ladder {
    /// The arrows in capture order.
    pub arrows: Vec<Arrow>,
    /// Hosts in order of first appearance.
    pub hosts: Vec<IpAddr>,
    /// Frames that were not RoCEv2.
    pub not_roce: u64,
}

/// Runs `rnic ladder`.
pub fn run(args: &Args) -> ExitCode {
    let ladder = match load(&args.file) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("rnic ladder: {}: {e}", args.file.display());
            return ExitCode::from(2);
        }
    };
    let ladder = ladder.filtered(args.qp, args.from, args.to, args.max);
    if let Some(out) = &args.html {
        let title = args.file.file_name().map_or("capture".into(), |n| n.to_string_lossy().into_owned());
        if let Err(e) = std::fs::write(out, ladder.html(&title)) {
            eprintln!("rnic ladder: writing {}: {e}", out.display());
            return ExitCode::from(2);
        }
        println!("{}: {} arrows, {} hosts", out.display(), ladder.arrows.len(), ladder.hosts.len());
        return ExitCode::SUCCESS;
    }
    let tty = io::stdout().is_terminal();
    let color = match args.color.as_str() {
        "always" => true,
        "never" => false,
        _ => tty && std::env::var_os("NO_COLOR").is_none(),
    };
    let width = args.width.or_else(|| tty.then(terminal_width).flatten()).unwrap_or(100).clamp(40, 400);
    let text = ladder.text(width, color);
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            eprintln!("rnic ladder: {e}");
            ExitCode::from(2)
        }
        _ => ExitCode::SUCCESS,
    }
}

fn terminal_width() -> Option<usize> {
    std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok())
}

/// Reads a capture into a ladder.
pub fn load(path: &Path) -> Result<Ladder, CaptureError> {
    let f = File::open(path).map_err(CaptureError::Io)?;
    from_reader(f)
}

/// Reads a capture from any reader into a ladder.
pub fn from_reader(r: impl Read) -> Result<Ladder, CaptureError> {
    let mut reader = CaptureReader::new(r)?;
    let mut b = Builder::default();
    while let Some(next) = reader.next_frame() {
        let f = next?;
        match decode::classify(&f) {
            Outcome::Roce(p) => b.packet(f.number, f.time_ns, &p),
            Outcome::Malformed { at, error } => b.push(Arrow {
                frame: f.number,
                time_ns: f.time_ns,
                src: at.src,
                dst: at.dst,
                label: "MALFORMED".into(),
                detail: error,
                kind: Kind::Malformed,
                marks: vec!["MALFORMED"],
                lane: (0, None),
                position: None,
                note: false,
            }),
            Outcome::NotRoce | Outcome::UnsupportedLink => b.ladder.not_roce += 1,
        }
    }
    Ok(b.finish())
}

/// A request as sent: (sender, receiver, destination QP, PSN, opcode).
type RequestKey = (IpAddr, IpAddr, u32, u32, u8);

/// Turns packets into arrows: labels, lanes, message brackets, marks.
#[derive(Default)]
struct Builder {
    ladder: Ladder,
    /// (src, dst, dest QP, PSN, opcode) -> (time, frame) of its first sending.
    seen_requests: HashMap<RequestKey, (u64, u64)>,
    /// (src, dst, dest QP, PSN, opcode, AETH/bytes) of responses seen.
    seen_responses: HashMap<(IpAddr, IpAddr, u32, u32, u8, u32), u64>,
    /// The QP a request from `a` to `b` last went to: a response from `b` to `a` belongs
    /// to that QP's lane.
    last_request_qp: HashMap<(IpAddr, IpAddr), u32>,
    /// A NAK or timeout-suspect time per (requester, responder, responder's QP).
    last_nak: HashMap<(IpAddr, IpAddr), u64>,
}

fn short_name(op: Opcode) -> String {
    let n = op.name();
    let n = ["RC_", "UC_", "UD_", "XRC_"].iter().find_map(|p| n.strip_prefix(p)).unwrap_or(n);
    let n = n.replace("RDMA_", "").replace("_WITH_IMMEDIATE", "_IMM").replace("_WITH_INVALIDATE", "_INV");
    match op.info().map(|i| i.transport) {
        Some(Transport::Uc) => format!("UC {n}"),
        Some(Transport::Ud) => format!("UD {n}"),
        Some(Transport::Xrc) => format!("XRC {n}"),
        _ => n,
    }
}

impl Builder {
    fn push(&mut self, a: Arrow) {
        for h in [a.src, a.dst] {
            if !self.ladder.hosts.contains(&h) {
                self.ladder.hosts.push(h);
            }
        }
        self.ladder.arrows.push(a);
    }

    fn packet(&mut self, frame: u64, t: u64, p: &rnic_wire::frame::ParsedPacket<'_>) {
        let r = &p.roce;
        let (src, dst) = (p.ip.src(), p.ip.dst());
        let b = &r.bth;
        let qp = b.dest_qp.value();
        let psn = b.psn.value();
        let info = r.info();
        let mut label;
        let mut kind = Kind::Request;
        let mut marks = Vec::new();
        let op = b.opcode;
        let e = &r.ext;
        match info.map(|i| i.operation) {
            Some(Operation::Acknowledge) | Some(Operation::AtomicAcknowledge) => {
                kind = Kind::Response;
                label = String::new();
                if let Some(a) = e.aeth {
                    match a.syndrome {
                        Syndrome::Ack { .. } if op.info().is_some_and(|i| i.operation == Operation::Acknowledge) => {
                            let _ = write!(label, "ACK psn {psn:#x} msn {}", a.msn);
                        }
                        Syndrome::Ack { .. } => {
                            let _ = write!(label, "ATOMIC_ACK psn {psn:#x} msn {}", a.msn);
                        }
                        Syndrome::RnrNak { timer } => {
                            kind = Kind::Nak;
                            let _ = write!(label, "RNR NAK psn {psn:#x} timer {timer}");
                        }
                        Syndrome::Nak(c) => {
                            kind = Kind::Nak;
                            let what = match c.name() {
                                "PSN_SEQUENCE_ERROR" => "seq",
                                "INVALID_REQUEST" => "inv-req",
                                "REMOTE_ACCESS_ERROR" => "rem-access",
                                "REMOTE_OPERATIONAL_ERROR" => "rem-op",
                                other => other,
                            };
                            let _ = write!(label, "NAK {what} psn {psn:#x} msn {}", a.msn);
                        }
                        Syndrome::Reserved(x) => {
                            let _ = write!(label, "AETH reserved {x:#04x} psn {psn:#x}");
                        }
                    }
                }
                if let Some(a) = e.atomic_ack_eth {
                    let _ = write!(label, " orig {:#x}", a.orig_remote_data);
                }
            }
            Some(Operation::RdmaReadResponse) => {
                kind = Kind::Response;
                label = format!("{} psn {psn:#x} len {}", short_name(op), r.payload_len);
            }
            Some(Operation::Cnp) => {
                kind = Kind::Cnp;
                label = "CNP".into();
            }
            Some(Operation::RdmaReadRequest) => {
                label = format!("READ req psn {psn:#x}");
                if let Some(x) = e.reth {
                    let _ = write!(label, " va {:#x} len {}", x.va, x.dma_len);
                }
            }
            Some(Operation::FetchAdd) | Some(Operation::CompareSwap) => {
                label = format!("{} psn {psn:#x}", short_name(op));
                if let Some(a) = e.atomic_eth {
                    let _ = write!(label, " va {:#x}", a.va);
                    if matches!(info.map(|i| i.operation), Some(Operation::FetchAdd)) {
                        let _ = write!(label, " add {}", a.swap_add);
                    } else {
                        let _ = write!(label, " cmp {:#x} swap {:#x}", a.compare, a.swap_add);
                    }
                }
            }
            _ if qp == rnic_wire::mad::GSI_QPN => {
                kind = Kind::Mad;
                label = mad_label(p.payload);
            }
            _ => {
                label = format!("{} psn {psn:#x} len {}", short_name(op), r.payload_len);
                if let Some(x) = e.reth {
                    let _ = write!(label, " va {:#x}", x.va);
                }
                if let Some(i) = e.imm_data {
                    let _ = write!(label, " imm {i:#x}");
                }
                if let Some(d) = e.deth {
                    let _ = write!(label, " qkey {:#x}", d.qkey);
                }
            }
        }
        if info.is_none() {
            label = format!("opcode {:#04x} psn {psn:#x}", op.0);
        }
        // Lanes: a request names the responder's QP; a response names the requester's,
        // paired with the QP the last request between the two hosts went to.
        let lane = match kind {
            Kind::Request | Kind::Mad => {
                self.last_request_qp.insert((src, dst), qp);
                (qp, None)
            }
            _ => match self.last_request_qp.get(&(dst, src)) {
                Some(&q) => (q, Some(qp)),
                None => (qp, None),
            },
        };
        // Marks.
        if !p.icrc_ok() {
            marks.push("BAD ICRC");
        }
        match kind {
            Kind::Request => {
                let key = (src, dst, qp, psn, op.0);
                if let Some(&(t0, _)) = self.seen_requests.get(&key) {
                    let nak_since = self.last_nak.get(&(src, dst)).is_some_and(|&n| n > t0);
                    // Sent again after a NAK, or after a wait a network duplicate would
                    // not take: a retransmission; at once: a duplicate.
                    marks.push(if nak_since || t.saturating_sub(t0) > 200_000 { "RETRANSMIT" } else { "DUP" });
                } else {
                    self.seen_requests.insert(key, (t, frame));
                }
            }
            Kind::Response | Kind::Nak => {
                if kind == Kind::Nak {
                    self.last_nak.insert((dst, src), t);
                }
                let extra = e.aeth.map_or(u32::try_from(r.payload_len).unwrap_or(u32::MAX), |a| a.msn);
                let key = (src, dst, qp, psn, op.0, extra);
                if self.seen_responses.insert(key, t).is_some() {
                    marks.push("DUP");
                }
            }
            _ => {}
        }
        let detail = format!(
            "frame {frame}: {}:{} -> {}:{} {r} ICRC {}",
            src,
            p.udp.src_port,
            dst,
            p.udp.dst_port,
            if p.icrc_ok() { "ok" } else { "BAD" }
        );
        let position = info.filter(|i| i.payload && i.operation != Operation::Acknowledge).map(|i| i.position);
        self.push(Arrow { frame, time_ns: t, src, dst, label, detail, kind, marks, lane, position, note: false });
    }

    /// Lanes learned late (a request seen before the first response named the other
    /// end's QP) join the lane of their QP pair.
    fn finish(mut self) -> Ladder {
        let mut pairs: HashMap<u32, u32> = HashMap::new();
        for a in &self.ladder.arrows {
            if let (q, Some(p)) = a.lane {
                pairs.entry(q).or_insert(p);
                pairs.entry(p).or_insert(q);
            }
        }
        for a in &mut self.ladder.arrows {
            if let (q, None) = a.lane {
                a.lane.1 = pairs.get(&q).copied();
            }
            // One name per pair, whichever end spoke first.
            if let (q, Some(p)) = a.lane {
                if q > p {
                    a.lane = (p, Some(q));
                }
            }
        }
        self.ladder
    }
}

/// What a MAD to QP 1 is: the CM message name when it is one.
fn mad_label(payload: &[u8]) -> String {
    match rnic_wire::cm::CmMessage::from_mad(payload) {
        Ok((h, Some(m))) => format!("MAD CM {} tid {:#x}", m.name(), h.tid),
        Ok((h, None)) => format!("MAD CM {}", rnic_wire::cm::attr_name(h.attr_id)),
        Err(_) => match payload.get(1) {
            Some(class) => format!("MAD class {class:#04x} len {}", payload.len()),
            None => format!("MAD len {}", payload.len()),
        },
    }
}

impl Ladder {
    /// Keeps the arrows of QP `qp` (either end), frames `from..=to`, at most `max`.
    pub fn filtered(mut self, qp: Option<u32>, from: Option<u64>, to: Option<u64>, max: Option<usize>) -> Ladder {
        self.arrows.retain(|a| {
            qp.is_none_or(|q| a.lane.0 == q || a.lane.1 == Some(q))
                && from.is_none_or(|f| a.frame >= f || a.note)
                && to.is_none_or(|t| a.frame <= t || a.note)
        });
        if let Some(m) = max {
            self.arrows.truncate(m);
        }
        self
    }

    /// Adds notes (a host's CPU seeing a completion) at their times, among the arrows.
    pub fn with_notes(mut self, notes: Vec<(u64, IpAddr, String)>) -> Ladder {
        for (t, host, text) in notes {
            if !self.hosts.contains(&host) {
                self.hosts.push(host);
            }
            self.arrows.push(Arrow {
                frame: 0,
                time_ns: t,
                src: host,
                dst: host,
                label: text.clone(),
                detail: text,
                kind: Kind::Request,
                marks: Vec::new(),
                lane: (0, None),
                position: None,
                note: true,
            });
        }
        // Stable: notes stamped at the same time as a packet follow it.
        self.arrows.sort_by_key(|a| a.time_ns);
        self
    }

    fn column(&self, h: IpAddr) -> usize {
        self.hosts.iter().position(|&x| x == h).unwrap_or(0)
    }

    /// The terminal drawing, `width` columns wide, with ANSI colour if `color`.
    pub fn text(&self, width: usize, color: bool) -> String {
        let mut s = String::new();
        let n = self.hosts.len().max(1);
        // Left: frame (6), delta time (11), bracket (2). The rest holds the columns.
        let left = 6 + 1 + 11 + 2;
        let body = width.saturating_sub(left).max(20);
        let step = if n > 1 { (body - 1) / (n - 1) } else { body - 1 };
        let col = |i: usize| i * step;
        let mut head = " ".repeat(left);
        let mut line = vec![' '; body];
        for (i, h) in self.hosts.iter().enumerate() {
            let name = h.to_string();
            let x = col(i).min(body.saturating_sub(name.len()));
            let x = if i + 1 == n && n > 1 { body.saturating_sub(name.len()) } else { x };
            for (k, c) in name.chars().enumerate() {
                if x + k < body {
                    line[x + k] = c;
                }
            }
        }
        head.extend(line.iter());
        let _ = writeln!(s, "{}", head.trim_end());
        let mut prev: Option<u64> = None;
        let mut open_msg: HashMap<(u32, IpAddr), bool> = HashMap::new();
        for a in &self.arrows {
            let dt = match prev {
                None => "0".to_string(),
                Some(p) => fmt_dt(a.time_ns.saturating_sub(p)),
            };
            prev = Some(a.time_ns);
            let bracket = match a.position {
                Some(Position::First) => {
                    open_msg.insert((a.lane.0, a.src), true);
                    "┌ "
                }
                Some(Position::Middle) => "│ ",
                Some(Position::Last) => {
                    open_msg.remove(&(a.lane.0, a.src));
                    "└ "
                }
                _ => "  ",
            };
            let frame = if a.note { "·".to_string() } else { a.frame.to_string() };
            let _ = write!(s, "{frame:>6} {:>11}{bracket}", format!("+{dt}"));
            let mut row: Vec<char> = vec![' '; body];
            for i in 0..n {
                let x = if i + 1 == n && n > 1 { body - 1 } else { col(i) };
                row[x] = '|';
            }
            let lastx = |i: usize| if i + 1 == n && n > 1 { body - 1 } else { col(i) };
            let mut text = a.label.clone();
            for m in &a.marks {
                let _ = write!(text, " [{m}]");
            }
            let (fg, reset) = if color { (ansi(a), "\x1b[0m") } else { ("", "") };
            if a.note {
                let x = lastx(self.column(a.src));
                let t = format!("* {text}");
                let start = if x + t.len() + 2 < body { x + 2 } else { x.saturating_sub(t.len() + 1) };
                put(&mut row, start, &t);
                let _ = writeln!(s, "{}{}{}", fg, row.iter().collect::<String>().trim_end(), reset);
                continue;
            }
            let (xa, xb) = (lastx(self.column(a.src)), lastx(self.column(a.dst)));
            let (lo, hi) = (xa.min(xb), xa.max(xb));
            for c in row.iter_mut().take(hi).skip(lo + 1) {
                *c = '-';
            }
            if xb > xa {
                row[hi - 1] = '>';
            } else if hi > lo {
                row[lo + 1] = '<';
            }
            let room = hi.saturating_sub(lo + 4);
            let shown: String = if text.chars().count() > room {
                text.chars().take(room.saturating_sub(1)).chain(['…']).collect()
            } else {
                text.clone()
            };
            let len = shown.chars().count();
            let start = lo + 2 + (room.saturating_sub(len)) / 2;
            put(&mut row, start.saturating_sub(1), &format!(" {shown} "));
            let _ = writeln!(s, "{}{}{}", fg, row.iter().collect::<String>().trim_end(), reset);
        }
        let packets = self.arrows.iter().filter(|a| !a.note).count();
        let retx = self.arrows.iter().filter(|a| a.marks.contains(&"RETRANSMIT")).count();
        let dups = self.arrows.iter().filter(|a| a.marks.contains(&"DUP")).count();
        let bad = self.arrows.iter().filter(|a| a.marks.contains(&"BAD ICRC")).count();
        let _ = writeln!(
            s,
            "{packets} packets between {} hosts: {retx} retransmitted, {dups} duplicated, {bad} with a bad ICRC; {} non-RoCE frames skipped",
            self.hosts.len(),
            self.not_roce
        );
        s
    }

    /// A self-contained HTML page: one SVG ladder per QP lane, hover for the decoded
    /// header, each message folded into a `<details>` that unfolds.
    pub fn html(&self, title: &str) -> String {
        let mut lanes: Vec<(u32, Option<u32>)> = Vec::new();
        for a in self.arrows.iter().filter(|a| !a.note) {
            let key = lane_key(a.lane);
            if !lanes.contains(&key) {
                lanes.push(key);
            }
        }
        let mut s = String::new();
        let _ = write!(
            s,
            "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>rnic ladder: {}</title>\n<style>{CSS}</style></head><body>\n<h1>rnic ladder: {}</h1>\n<p class=\"sum\">{} packets, {} hosts, {} QP lanes. Hover an arrow for its decoded headers; click a message to fold or unfold it.</p>\n",
            esc(title),
            esc(title),
            self.arrows.iter().filter(|a| !a.note).count(),
            self.hosts.len(),
            lanes.len()
        );
        let t0 = self.arrows.first().map_or(0, |a| a.time_ns);
        for lane in lanes {
            let name = match lane.1 {
                Some(b) => format!("QP {:#x} ⇄ QP {b:#x}", lane.0),
                None => format!("QP {:#x}", lane.0),
            };
            let _ = writeln!(s, "<section class=\"lane\"><h2>{}</h2>", esc(&name));
            let _ = write!(s, "{}", self.lane_header());
            // Messages: a FIRST opens a <details>, its LAST closes it.
            let mut open = false;
            for a in self.arrows.iter().filter(|a| a.note || lane_key(a.lane) == lane) {
                if a.position == Some(Position::First) && !open {
                    let _ = writeln!(s, "<details class=\"msg\" open><summary>message: {}</summary>", esc(&a.label));
                    open = true;
                }
                let _ = write!(s, "{}", self.svg_row(a, t0));
                if a.position == Some(Position::Last) && open {
                    s.push_str("</details>\n");
                    open = false;
                }
            }
            if open {
                s.push_str("</details>\n");
            }
            s.push_str("</section>\n");
        }
        let _ = writeln!(s, "<script>{JS}</script></body></html>");
        s
    }

    fn x(&self, i: usize) -> usize {
        let n = self.hosts.len().max(2);
        80 + i * (840 / (n - 1))
    }

    fn lane_header(&self) -> String {
        let mut s = String::from("<svg class=\"hosts\" width=\"1000\" height=\"28\">");
        for (i, h) in self.hosts.iter().enumerate() {
            let _ =
                write!(s, "<text x=\"{}\" y=\"20\" text-anchor=\"middle\">{}</text>", self.x(i), esc(&h.to_string()));
        }
        s.push_str("</svg>\n");
        s
    }

    fn svg_row(&self, a: &Arrow, t0: u64) -> String {
        let mut s = String::from("<svg class=\"row\" width=\"1000\" height=\"26\">");
        for i in 0..self.hosts.len() {
            let x = self.x(i);
            let _ = write!(s, "<line class=\"life\" x1=\"{x}\" y1=\"0\" x2=\"{x}\" y2=\"26\"/>");
        }
        let t = fmt_dt(a.time_ns.saturating_sub(t0));
        let _ = write!(s, "<text class=\"time\" x=\"4\" y=\"17\">{}</text>", esc(&t));
        let mut label = a.label.clone();
        for m in &a.marks {
            let _ = write!(label, " [{m}]");
        }
        let cls = match a.kind {
            _ if a.note => "note",
            _ if !a.marks.is_empty() => "marked",
            Kind::Request => "req",
            Kind::Response => "resp",
            Kind::Nak => "nak",
            Kind::Cnp => "cnp",
            Kind::Mad => "mad",
            Kind::Malformed => "marked",
        };
        if a.note {
            let x = self.x(self.column(a.src));
            let _ = write!(
                s,
                "<g class=\"note\"><title>{}</title><circle cx=\"{x}\" cy=\"13\" r=\"4\"/><text x=\"{}\" y=\"17\">{}</text></g>",
                esc(&a.detail),
                x + 8,
                esc(&label)
            );
        } else {
            let (xa, xb) = (self.x(self.column(a.src)), self.x(self.column(a.dst)));
            let dir: i64 = if xb >= xa { -1 } else { 1 };
            let tip = i64::try_from(xb).unwrap_or(0);
            let _ = write!(
                s,
                "<g class=\"arrow {cls}\" data-frame=\"{}\"><title>{}</title><line x1=\"{xa}\" y1=\"20\" x2=\"{xb}\" y2=\"20\"/><path d=\"M{tip},20 l{},-4 l0,8 z\"/><text x=\"{}\" y=\"14\" text-anchor=\"middle\">{}</text></g>",
                a.frame,
                esc(&a.detail),
                8 * dir,
                (xa + xb) / 2,
                esc(&label)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

fn lane_key(l: (u32, Option<u32>)) -> (u32, Option<u32>) {
    l
}

fn put(row: &mut [char], start: usize, text: &str) {
    for (k, c) in text.chars().enumerate() {
        if let Some(slot) = row.get_mut(start + k) {
            *slot = c;
        }
    }
}

fn ansi(a: &Arrow) -> &'static str {
    if a.note {
        "\x1b[36m"
    } else if a.marks.iter().any(|m| *m == "BAD ICRC" || *m == "MALFORMED") || a.kind == Kind::Nak {
        "\x1b[31m"
    } else if !a.marks.is_empty() {
        "\x1b[33m"
    } else {
        match a.kind {
            Kind::Request => "\x1b[32m",
            Kind::Response => "\x1b[34m",
            Kind::Cnp | Kind::Mad => "\x1b[35m",
            _ => "",
        }
    }
}

/// A time difference as people read it: 850ns, 12.3us, 4.56ms, 1.20s.
pub fn fmt_dt(ns: u64) -> String {
    match ns {
        0..=999 => format!("{ns}ns"),
        1_000..=999_999 => format!("{:.1}us", ns as f64 / 1e3),
        1_000_000..=999_999_999 => format!("{:.2}ms", ns as f64 / 1e6),
        _ => format!("{:.2}s", ns as f64 / 1e9),
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const CSS: &str = "body{font-family:sans-serif;margin:1em 2em;color:#222}h1{font-size:1.3em}h2{font-size:1.05em;margin:1.2em 0 .2em}\
svg{display:block}svg text{font-family:monospace;font-size:12px}.life{stroke:#bbb;stroke-width:1}\
.arrow line{stroke-width:1.6}.arrow text{fill:#222}.req line{stroke:#2a8}.req path{fill:#2a8}.resp line{stroke:#36c}.resp path{fill:#36c}\
.nak line,.marked line{stroke:#d33}.nak path,.marked path{fill:#d33}.nak text,.marked text{fill:#b00}.cnp line,.mad line{stroke:#a3a}.cnp path,.mad path{fill:#a3a}\
.note circle{fill:#0aa}.note text{fill:#077;font-style:italic}.time{fill:#888}.arrow:hover line{stroke-width:3}\
details.msg{border-left:3px solid #ddd;margin-left:2px}details.msg summary{font-family:monospace;font-size:12px;color:#555;cursor:pointer}\
.sum{color:#555}";

const JS: &str =
    "document.querySelectorAll('details.msg summary').forEach(function(s){s.title='click to fold or unfold';});";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_people_read_them() {
        assert_eq!(fmt_dt(850), "850ns");
        assert_eq!(fmt_dt(12_345), "12.3us");
        assert_eq!(fmt_dt(4_560_000), "4.56ms");
        assert_eq!(fmt_dt(1_200_000_000), "1.20s");
    }

    #[test]
    fn short_names() {
        assert_eq!(short_name(Opcode::RC_RDMA_WRITE_FIRST), "WRITE_FIRST");
        assert_eq!(short_name(Opcode(0x2a)), "UC WRITE_ONLY");
        assert_eq!(short_name(Opcode(0x64)), "UD SEND_ONLY");
    }

    #[test]
    fn qp_numbers_parse_in_both_bases() {
        assert_eq!(parse_u32("0x11"), Ok(17));
        assert_eq!(parse_u32("17"), Ok(17));
        assert!(parse_u32("q").is_err());
    }
}
