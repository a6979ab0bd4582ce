//! `rnic perf`: perftest's benchmarks (`ib_write_bw`, `ib_send_lat`, ...) over rnic, each
//! reported next to a plain-UDP baseline of the same wire size measured in the same run.
//!
//! ```text
//! rnic perf write_bw -s 65536 -m 4096           both sides in this process (127.0.0.1, 127.0.0.2)
//! rnic perf write_bw --server [--ip A]          one side; the other runs:
//! rnic perf write_bw HOST [--ip B] -s 65536     the client, which chooses the parameters
//! ```
//! Each size runs `--rounds` interleaved rounds: the UDP baseline, then the RDMA test and
//! a data check on both sides, then the baseline again, and so on; each RDMA run is
//! compared with the better of the two baselines beside it, and the median ratio is
//! reported with the smallest and largest (`median_round`).
//! Out of band, the sides talk JSON lines over TCP (`ctrl`), not perftest's format.

mod ctrl;
mod plot;
mod rawbase;
mod rdma;
// Registers a buffer it owns (`register_mr`): the one unsafe call of the tools.
#[allow(unsafe_code)]
mod reg;
mod udp;

use ctrl::{Ctrl, Msg, Params};
use serde_json::json;
use std::io::IsTerminal;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of `rnic perf` (perftest's letters and meanings).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The test: send_bw, send_lat, write_bw, write_lat, read_bw, read_lat, atomic_bw,
    /// atomic_lat, the plain-UDP baselines udp_bw, udp_lat, or reg (registration versus
    /// copy, 4 KiB up to -s bytes, default 1 GiB).
    pub test: String,
    /// Server to connect to (client mode). Without it and without --server, both sides
    /// run in this process (--loopback).
    pub host: Option<String>,
    /// Wait for a client (server mode).
    #[arg(long, conflicts_with = "host")]
    pub server: bool,
    /// Both sides in this process, on --ip and --peer-ip (the default without HOST).
    #[arg(long, conflicts_with_all = ["host", "server"])]
    pub loopback: bool,
    /// Message size in bytes (default 65536 for bandwidth, 2 for latency tests).
    #[arg(short = 's', long = "size")]
    pub size: Option<u64>,
    /// Run every size from 2 to 2^23 bytes, doubling.
    #[arg(short = 'a', long = "all", conflicts_with = "size")]
    pub all: bool,
    /// Iterations (per QP); default 5000 for bandwidth, 1000 for latency tests.
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Run for this many seconds instead of -n iterations.
    #[arg(short = 'D', long = "duration")]
    pub duration: Option<f64>,
    /// Number of QPs.
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u32,
    /// Send queue depth per QP (default: 1 for latency tests; for bandwidth 128 in total,
    /// that is 128 / -q per QP, at least 1).
    #[arg(short = 't', long = "tx-depth")]
    pub tx_depth: Option<u32>,
    /// Receive queue depth (SEND tests).
    #[arg(short = 'r', long = "rx-depth", default_value_t = 512)]
    pub rx_depth: u32,
    /// Send messages of at most this many bytes inline (copied at post time).
    #[arg(short = 'I', long = "inline-size", default_value_t = 0)]
    pub inline: u32,
    /// Path MTU in bytes: 256, 512, 1024, 2048, 4096 (default: the client port's active
    /// MTU, as perftest: 4096 on UDP, what the link carries on raw Ethernet or hardware).
    #[arg(short = 'm', long = "mtu")]
    pub mtu: Option<u32>,
    /// Connection type: RC, UC or UD.
    #[arg(short = 'c', long = "connection", default_value = "RC")]
    pub connection: String,
    /// Completion moderation: signal one work request in this many (bandwidth tests).
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 100)]
    pub cq_mod: u32,
    /// Sleep on completion events instead of busy polling.
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Bidirectional: both sides send (bandwidth tests).
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// This side's device address (default 127.0.0.1; a client of another process:
    /// 127.0.0.2).
    #[arg(long)]
    pub ip: Option<IpAddr>,
    /// Run on this device instead of an emulated one at --ip: a hardware device
    /// (`rxe0`, `mlx5_0`; the binary built with `--features hw`) or a name from
    /// RNIC_DEVICES. A hardware device has no UDP baseline: no ratio is reported. With
    /// --server or a host only.
    #[arg(short = 'd', long = "ib-dev", conflicts_with = "netdev")]
    pub device: Option<String>,
    /// Raw Ethernet: run this side's emulated device on this network interface (whole
    /// frames through an AF_PACKET socket; needs CAP_NET_RAW) at --ip, an address the host
    /// does not own. With --server or a host only.
    #[arg(long, requires = "ip")]
    pub netdev: Option<String>,
    /// Raw Ethernet, both sides in this process: the second device's interface (at
    /// --peer-ip), e.g. the other end of --netdev's veth pair.
    #[arg(long, requires = "netdev")]
    pub peer_netdev: Option<String>,
    /// The second device's address with --loopback.
    #[arg(long, default_value = "127.0.0.2")]
    pub peer_ip: IpAddr,
    /// Skip the same-run UDP baseline (for profiling the RDMA path alone); no ratio is
    /// reported.
    #[arg(long)]
    pub no_baseline: bool,
    /// The UDP baseline sends what rnic sends. Latency tests: the packet and an ACK-sized
    /// datagram in one UDP GSO send per hop, received with recvmsg and the control
    /// messages rnic asks for (GRO, TOS, timestamps). Bandwidth tests: each message's
    /// packets at their own lengths, grouped into GSO sends as rnic's transport groups
    /// them (a WRITE's first packet carries a RETH, so it cannot share a GSO send with the
    /// rest). The ratio then says what rnic's own work adds to the kernel's cost of its
    /// system calls.
    #[arg(long)]
    pub roce_shape: bool,
    /// Interleaved rounds per size: the baseline and the test take turns (baseline, test,
    /// baseline, ..., baseline), each test run is compared with the better of the two
    /// baselines beside it, and the median ratio is reported with its min and max. Each
    /// round runs the whole -n or -D.
    #[arg(long, default_value_t = DEFAULT_ROUNDS)]
    pub rounds: u32,
    /// Print one JSON object (an array with -a) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Connect the QPs through the Communication Manager (perftest's -R, rdma_cm): the
    /// server listens on the -p port, the client sends a REQ per QP. RC and UC only.
    #[arg(short = 'R', long = "rdma-cm")]
    pub rdma_cm: bool,
    /// Also draw the results as an SVG: the figure and the same-run UDP baseline against
    /// message size, and their ratio with its spread (with -a, every size).
    #[arg(long, value_name = "OUT.svg")]
    pub plot: Option<std::path::PathBuf>,
}

/// `--rounds` unless given: enough for a median and a spread, short enough for `-a`.
pub const DEFAULT_ROUNDS: u32 = 3;

/// What a test does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestKind {
    /// SEND / RECV.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// Atomics.
    Atomic,
    /// Plain UDP (the baseline alone).
    Udp,
}

/// A test: kind and measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Test {
    /// Operation.
    pub kind: TestKind,
    /// Latency (else bandwidth).
    pub lat: bool,
}

impl Test {
    /// Parses `write_bw` and friends.
    pub fn parse(s: &str) -> Option<Test> {
        let (op, m) = s.rsplit_once('_')?;
        let kind = match op {
            "send" => TestKind::Send,
            "write" => TestKind::Write,
            "read" => TestKind::Read,
            "atomic" => TestKind::Atomic,
            "udp" => TestKind::Udp,
            _ => return None,
        };
        let lat = match m {
            "bw" => false,
            "lat" => true,
            _ => return None,
        };
        Some(Test { kind, lat })
    }

    fn title(self) -> String {
        let op = match self.kind {
            TestKind::Send => "Send",
            TestKind::Write => "RDMA_Write",
            TestKind::Read => "RDMA_Read",
            TestKind::Atomic => "Atomic",
            TestKind::Udp => "UDP",
        };
        format!("{op} {} Test", if self.lat { "Latency" } else { "BW" })
    }

    /// Bytes on the wire (BTH..ICRC, UDP payload) of each packet of one `size`-byte
    /// message at path MTU `mtu`, in the data direction.
    pub fn wire_packets(self, size: u64, mtu: u64) -> Vec<u64> {
        const BTH: u64 = 12;
        const RETH: u64 = 16;
        const AETH: u64 = 4;
        const ICRC: u64 = 4;
        if self.kind == TestKind::Atomic {
            // FETCH_ADD request: BTH + AtomicETH (28) + ICRC.
            return vec![BTH + 28 + ICRC];
        }
        let n = size.div_ceil(mtu).max(1);
        (0..n)
            .map(|i| {
                let chunk = if i + 1 == n { size - mtu * (n - 1) } else { mtu };
                let ext = match self.kind {
                    TestKind::Write if i == 0 => RETH,
                    // READ responses: AETH on the first and the last (and only).
                    TestKind::Read if i == 0 || i + 1 == n => AETH,
                    _ => 0,
                };
                BTH + ext + chunk.div_ceil(4) * 4 + ICRC
            })
            .collect()
    }
}

/// Every size `-a` runs: 2 to 2^23, doubling.
pub fn all_sizes() -> Vec<u64> {
    (1..=23).map(|k| 1u64 << k).collect()
}

impl Args {
    /// The parameters both sides use, or why these options cannot run.
    pub fn params(&self) -> Result<(Test, Params), String> {
        let test = Test::parse(&self.test).ok_or_else(|| {
            format!(
                "unknown test {:?}: use send_bw, send_lat, write_bw, write_lat, read_bw, read_lat, atomic_bw, atomic_lat, udp_bw or udp_lat",
                self.test
            )
        })?;
        let conn = self.connection.to_ascii_uppercase();
        let (uc, ud) = match conn.as_str() {
            "RC" => (false, false),
            // perftest: UC carries SEND and RDMA WRITE (IBA: no READ, no atomics on UC).
            "UC" if matches!(test.kind, TestKind::Send | TestKind::Write) => (true, false),
            "UC" => return Err(format!("-c UC: {} needs RC (UC carries SEND and RDMA WRITE only)", self.test)),
            // UD carries SEND only (IBA 9.8.2), each message one packet.
            "UD" if test.kind == TestKind::Send => (false, true),
            "UD" => return Err(format!("-c UD: {} needs RC or UC (UD carries SEND only)", self.test)),
            other => return Err(format!("-c {other}: not a connection type (RC, UC or UD)")),
        };
        if self.no_baseline && test.kind == TestKind::Udp {
            return Err("--no-baseline: the udp tests are the baseline".into());
        }
        if self.events && test.lat && test.kind == TestKind::Write {
            return Err("-e: write_lat polls memory, not a completion queue (as perftest)".into());
        }
        let mtu = self.mtu.unwrap_or(4096);
        if rnic_verbs::PathMtu::from_bytes(mtu).is_none() {
            return Err(format!("-m {mtu}: not 256, 512, 1024, 2048 or 4096"));
        }
        let sizes = if test.kind == TestKind::Atomic {
            // perftest: atomics are 8 bytes whatever -s says.
            vec![8]
        } else if self.all {
            all_sizes()
        } else {
            vec![self.size.unwrap_or(if test.lat { 2 } else { 65536 })]
        };
        if let Some(&s) = sizes.iter().find(|&&s| s == 0 || s > 1 << 30) {
            return Err(format!("-s {s}: must be 1 to 2^30 bytes"));
        }
        // A UD message is one packet: at most the path MTU (perftest's -a stops there).
        let sizes = if ud && self.all { sizes.into_iter().filter(|&s| s <= u64::from(mtu)).collect() } else { sizes };
        if let Some(&s) = sizes.iter().find(|&&s| ud && s > u64::from(mtu)) {
            return Err(format!("-s {s}: a UD message is one packet, at most the path MTU (-m {mtu})"));
        }
        if test.lat && self.qps != 1 {
            return Err("-q: latency tests use one QP".into());
        }
        if test.lat && self.bidirectional {
            return Err("-b: latency tests are ping-pong, already both ways".into());
        }
        if self.rdma_cm && ud {
            return Err("-R: UD QPs are not connected (perftest resolves them with SIDR, which rnic lacks)".into());
        }
        if self.rdma_cm && test.kind == TestKind::Udp {
            return Err("-R: the udp tests have no QP to connect".into());
        }
        if self.roce_shape && self.netdev.is_some() {
            return Err(
                "--roce-shape: shapes the UDP baseline; a raw Ethernet run (--netdev) has a raw-frame baseline".into(),
            );
        }
        if self.rounds == 0 || self.rounds > 1000 {
            return Err(format!("--rounds {}: must be 1 to 1000", self.rounds));
        }
        if self.qps == 0 || self.qps > 16384 {
            return Err(format!("-q {}: must be 1 to 16384", self.qps));
        }
        // perftest's default send queue is 128 per QP. Here the default keeps 128 in
        // flight in total (at least 1 per QP): a software NIC on shared CPUs has no wire to
        // pace it, and 1024 QPs x 128 x 64 KiB would only measure loss and retransmission.
        let tx_depth = self.tx_depth.unwrap_or(if test.lat { 1 } else { (128 / self.qps.max(1)).max(1) });
        if tx_depth == 0 || tx_depth > 16384 {
            return Err(format!("-t {tx_depth}: must be 1 to 16384"));
        }
        if self.rx_depth == 0 || self.rx_depth > 16384 {
            return Err(format!("-r {}: must be 1 to 16384", self.rx_depth));
        }
        if self.inline > 1024 {
            return Err(format!("-I {}: the device inlines at most 1024 bytes", self.inline));
        }
        if let Some(d) = self.duration {
            if !(d > 0.0 && d <= 3600.0) {
                return Err(format!("-D {d}: must be more than 0 and at most 3600 seconds"));
            }
        }
        let iters = self.iters.unwrap_or(if test.lat { 1000 } else { 5000 });
        if iters == 0 {
            return Err("-n 0: at least one iteration".into());
        }
        // perftest: CQ moderation cannot exceed the send queue depth (nothing would be
        // signaled while the queue is full).
        let cq_mod = if test.lat { 1 } else { self.cq_mod.clamp(1, tx_depth) };
        Ok((
            test,
            Params {
                test: self.test.clone(),
                sizes,
                iters,
                duration: self.duration,
                qps: self.qps,
                tx_depth,
                rx_depth: self.rx_depth,
                inline: self.inline,
                mtu,
                mtu_auto: self.mtu.is_none(),
                cq_mod,
                bidirectional: self.bidirectional,
                events: self.events,
                uc,
                no_baseline: self.no_baseline,
                ud,
                rounds: self.rounds,
                cm_port: self.rdma_cm.then_some(self.port),
                raw: false,
                roce_shape: self.roce_shape,
            },
        ))
    }
}

/// A bar on stderr while stdout is a terminal, for runs longer than a second or so.
#[derive(Debug)]
pub struct Progress {
    on: bool,
    start: Instant,
    last: Instant,
    duration: Option<Duration>,
    total: u64,
}

impl Progress {
    fn new(want: bool, duration: Option<Duration>, total: u64) -> Progress {
        let on = want && std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
        let now = Instant::now();
        Progress { on, start: now, last: now, duration, total }
    }

    fn tick(&mut self, done: u64) {
        // Only after a second (short runs stay quiet), at most 10 times a second.
        if !self.on || self.last.elapsed() < Duration::from_millis(100) || self.start.elapsed() < Duration::from_secs(1)
        {
            return;
        }
        self.last = Instant::now();
        let frac = match self.duration {
            Some(d) => self.start.elapsed().as_secs_f64() / d.as_secs_f64(),
            None => done as f64 / self.total.max(1) as f64,
        }
        .clamp(0.0, 1.0);
        let w = 40;
        // Display only: frac is in [0, 1].
        #[allow(clippy::cast_possible_truncation)]
        let fill = ((frac * w as f64) as usize).min(w);
        eprint!("\r [{}{}] {:3.0}%", "#".repeat(fill), ".".repeat(w - fill), frac * 100.0);
    }

    fn finish(&self) {
        if self.on && self.start.elapsed() >= Duration::from_secs(1) {
            eprint!("\r{}\r", " ".repeat(50));
        }
    }
}

/// The result of one size.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Test name.
    pub test: String,
    /// Message size.
    pub bytes: u64,
    /// Work requests (bandwidth: all QPs) or round trips (latency).
    pub iterations: u64,
    /// The figures.
    pub figures: Figures,
    /// The UDP baseline in the same unit (MB/s, or typical usec), when one ran.
    pub baseline: Option<f64>,
    /// How the baseline moved its datagrams.
    pub baseline_method: String,
    /// The baseline's message rate (bandwidth tests), Mpps.
    pub baseline_msg_rate_mpps: Option<f64>,
    /// Figure / baseline (bandwidth: higher is better; latency: lower is better): the
    /// median over the rounds.
    pub ratio: Option<f64>,
    /// The smallest and largest ratio of the rounds (the spread of `ratio`).
    pub ratio_min: Option<f64>,
    /// See `ratio_min`.
    pub ratio_max: Option<f64>,
    /// Rounds measured (the figures are those of the median round).
    pub rounds: u32,
    /// UD: messages sent that never arrived (dropped by the receiver for want of a
    /// posted receive, as IBA says); the bandwidth figures count delivered messages.
    pub lost: Option<u64>,
    /// Whether every byte checked out.
    pub verified: bool,
    /// Why not.
    pub error: Option<String>,
    /// Congestion and flow control on the client's device after the run (rnic devices).
    pub cc: Option<CcSummary>,
}

/// What congestion and flow control did: the DCQCN rate of the device's QPs and the
/// counters of its notification and reaction points (cumulative over the run so far).
#[derive(Debug, Clone, PartialEq)]
pub struct CcSummary {
    /// `dcqcn` or `off`.
    pub mode: &'static str,
    /// QPs with a rate.
    pub qps: usize,
    /// Smallest, median and largest current rate, MB/s.
    pub rate_mbps: Option<(f64, f64, f64)>,
    /// The lowest rate any QP had during the run, MB/s.
    pub lowest_mbps: Option<f64>,
    /// `np_*`, `rp_*` and `tx_dest_blocked` counters.
    pub counters: Vec<(String, u64)>,
}

impl CcSummary {
    /// From a device.
    pub fn of(ctx: &rnic_verbs::Context) -> CcSummary {
        let mode = match ctx.config().map(|c| c.congestion_control) {
            None | Some(rnic_verbs::CongestionControl::Off) => "off",
            _ => "dcqcn",
        };
        let all = ctx.qp_rates();
        let mut rates: Vec<f64> = all.iter().map(|r| r.rate / MB).collect();
        rates.sort_by(f64::total_cmp);
        let rate_mbps = (!rates.is_empty()).then(|| (rates[0], rates[rates.len() / 2], rates[rates.len() - 1]));
        let lowest_mbps = all.iter().map(|r| r.lowest / MB).min_by(f64::total_cmp);
        let counters = ctx
            .counters()
            .into_iter()
            .filter(|(k, _)| k.starts_with("np_") || k.starts_with("rp_") || *k == "tx_dest_blocked")
            .collect();
        CcSummary { mode, qps: rates.len(), rate_mbps, lowest_mbps, counters }
    }

    /// One line under the table row.
    pub fn line(&self) -> String {
        let mut s = format!(" congestion control: {}", self.mode);
        if let Some((lo, med, hi)) = self.rate_mbps {
            s += &format!(", rate per QP min/median/max {lo:.0}/{med:.0}/{hi:.0} MB/s ({} QPs)", self.qps);
        }
        if let Some(l) = self.lowest_mbps {
            s += &format!(", lowest during the run {l:.0} MB/s");
        }
        let c: Vec<String> = self.counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
        s + &format!("\n   {}", c.join(" "))
    }

    fn json(&self) -> serde_json::Value {
        let counters: serde_json::Map<String, serde_json::Value> =
            self.counters.iter().map(|(k, v)| ((*k).to_string(), json!(v))).collect();
        json!({
            "mode": self.mode,
            "qps_with_rate": self.qps,
            "rate_min_mbps": self.rate_mbps.map(|r| r.0),
            "rate_median_mbps": self.rate_mbps.map(|r| r.1),
            "rate_max_mbps": self.rate_mbps.map(|r| r.2),
            "rate_lowest_mbps": self.lowest_mbps,
            "counters": counters,
        })
    }
}

/// Bandwidth or latency figures.
#[derive(Debug, Clone, PartialEq)]
pub enum Figures {
    /// MB/s (2^20 bytes, as perftest) and Mpps.
    Bw {
        /// Best window.
        peak_mbps: f64,
        /// Whole run.
        avg_mbps: f64,
        /// Messages per second / 1e6.
        msg_rate_mpps: f64,
    },
    /// Microseconds.
    Lat(LatStats),
}

/// Latency statistics in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LatStats {
    /// Minimum.
    pub min: f64,
    /// Median (perftest's "typical").
    pub typical: f64,
    /// Mean.
    pub avg: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

impl LatStats {
    /// From samples, each scaled by `scale` (0.5 for a half round trip).
    pub fn from(samples: &[Duration], scale: f64) -> LatStats {
        let mut us: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e6 * scale).collect();
        if us.is_empty() {
            return LatStats::default();
        }
        us.sort_by(f64::total_cmp);
        // The rank of quantile q, clamped into the samples.
        #[allow(clippy::cast_possible_truncation)]
        let at = |q: f64| us[((us.len() as f64 * q).ceil() as usize).clamp(1, us.len()) - 1];
        LatStats {
            min: us[0],
            typical: us[us.len() / 2],
            avg: us.iter().sum::<f64>() / us.len() as f64,
            p99: at(0.99),
            p999: at(0.999),
            max: us[us.len() - 1],
        }
    }
}

const MB: f64 = 1_048_576.0;

impl Report {
    fn set_baseline(&mut self, b: Baseline) {
        let value = match &self.figures {
            Figures::Bw { avg_mbps, .. } => *avg_mbps,
            Figures::Lat(l) => l.typical,
        };
        self.ratio = (b.value > 0.0).then(|| value / b.value);
        self.baseline = Some(b.value);
        self.baseline_method = b.method;
        self.baseline_msg_rate_mpps = b.msg_rate;
    }

    /// The `--json` object.
    pub fn json(&self) -> serde_json::Value {
        let mut v = json!({
            "test": self.test,
            "bytes": self.bytes,
            "iterations": self.iterations,
            "baseline": self.baseline,
            "baseline_method": self.baseline_method,
            "ratio": self.ratio,
            "ratio_min": self.ratio_min,
            "ratio_max": self.ratio_max,
            "rounds": self.rounds,
            "verified": self.verified,
        });
        let o = v.as_object_mut().expect("an object");
        match &self.figures {
            Figures::Bw { peak_mbps, avg_mbps, msg_rate_mpps } => {
                o.insert("bw_peak_mbps".into(), json!(peak_mbps));
                o.insert("bw_avg_mbps".into(), json!(avg_mbps));
                o.insert("msg_rate_mpps".into(), json!(msg_rate_mpps));
                o.insert("baseline_msg_rate_mpps".into(), json!(self.baseline_msg_rate_mpps));
            }
            Figures::Lat(l) => {
                o.insert("lat_min_us".into(), json!(l.min));
                o.insert("lat_typical_us".into(), json!(l.typical));
                o.insert("lat_avg_us".into(), json!(l.avg));
                o.insert("lat_p99_us".into(), json!(l.p99));
                o.insert("lat_p999_us".into(), json!(l.p999));
                o.insert("lat_max_us".into(), json!(l.max));
            }
        }
        if let Some(e) = &self.error {
            o.insert("error".into(), json!(e));
        }
        if let Some(c) = &self.cc {
            o.insert("congestion".into(), c.json());
        }
        if let Some(l) = self.lost {
            o.insert("lost".into(), json!(l));
        }
        v
    }
}

const LINE: &str = "---------------------------------------------------------------------------------------";

fn header(test: Test, p: &Params, device: &str, transport: Option<rnic_verbs::TransportInfo>) -> String {
    let mut s = format!("{LINE}\n                    {}\n", test.title());
    s += &format!(" Number of qps   : {:<10} Device         : {device}\n", p.qps);
    s += " Connection type : RC         Using SRQ      : OFF\n";
    s += &format!(" TX depth        : {:<10} RX depth       : {}\n", p.tx_depth, p.rx_depth);
    s += &format!(" CQ Moderation   : {:<10} Mtu            : {}[B]\n", p.cq_mod, p.mtu);
    let link =
        if transport.is_some_and(|t| t.raw) { "Ethernet (raw RoCEv2 frames)" } else { "Ethernet (RoCEv2 over UDP)" };
    s += &format!(" Max inline data : {}[B]{:<5} Link type      : {link}\n", p.inline, "");
    s += &format!(
        " Bidirectional   : {:<10} Polling        : {}\n",
        if p.bidirectional { "ON" } else { "OFF" },
        if p.events { "completion events (-e)" } else { "busy" }
    );
    if let Some(t) = transport.filter(|t| t.raw) {
        s += &format!(
            " Transport       : raw Ethernet frames (AF_PACKET sendmmsg/recvmmsg), spin {} us\n",
            t.spin.as_micros()
        );
    } else if let Some(t) = transport {
        s += &format!(
            " Transport       : UDP GSO {}, GRO {}, spin {} us\n",
            if t.gso { "on" } else { "off" },
            if t.gro { "on" } else { "off" },
            t.spin.as_micros()
        );
    }
    s += LINE;
    s
}

fn table_head(lat: bool) -> &'static str {
    if lat {
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    99% percentile[usec]   99.9% percentile[usec]"
    } else {
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
    }
}

fn table_row(r: &Report) -> String {
    let mut s = match &r.figures {
        Figures::Bw { peak_mbps, avg_mbps, msg_rate_mpps } => {
            format!(" {:<10} {:<14} {:<18.2} {:<20.2} {:.6}", r.bytes, r.iterations, peak_mbps, avg_mbps, msg_rate_mpps)
        }
        Figures::Lat(l) => format!(
            " {:<6} {:<11} {:<14.2} {:<14.2} {:<16.2} {:<14.2} {:<22.2} {:.2}",
            r.bytes, r.iterations, l.min, l.max, l.typical, l.avg, l.p99, l.p999
        ),
    };
    if let (Some(b), Some(ratio)) = (r.baseline, r.ratio) {
        let unit = if matches!(r.figures, Figures::Lat(_)) { "usec typical" } else { "MB/sec" };
        let which = if r.baseline_method.starts_with("raw") { "raw-frame" } else { "udp" };
        s += &format!("\n   {which} baseline: {b:.2} {unit} ({}); ratio {ratio:.3}", r.baseline_method);
        if let (Some(lo), Some(hi)) = (r.ratio_min, r.ratio_max) {
            s += &format!(" (median of {} rounds, {lo:.3}-{hi:.3})", r.rounds);
        }
        if let Some(m) = r.baseline_msg_rate_mpps {
            s += &format!(", baseline {m:.6} Mpps");
        }
    }
    if r.baseline.is_none() && !r.baseline_method.is_empty() {
        s += &format!("\n   method: {}", r.baseline_method);
    }
    if let Some(l) = r.lost.filter(|&l| l > 0) {
        s += &format!(
            "\n   UD: {l} of {} messages lost (no receive posted in time; the figures count delivered ones)",
            r.iterations
        );
    }
    if !r.verified {
        s += &format!("\n   NOT VERIFIED: {}", r.error.as_deref().unwrap_or("unknown"));
    }
    s
}

/// Latency tests with both ends in this process pin the pinging thread to CPU 0 and the
/// answering one to CPU 1 (UDP baseline and RDMA alike).
static PIN: AtomicBool = AtomicBool::new(false);

fn pin(cpu: usize) {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    if PIN.load(Ordering::Relaxed) && cpus >= 2 {
        let _ = rnic_io::pin_current_thread(cpu % cpus);
    }
}

/// Runs `rnic perf`.
pub fn run(a: &Args) -> ExitCode {
    if a.test == "reg" {
        // The registration-versus-copy measurement: no peer, no baseline.
        let max = a.size.unwrap_or(1 << 30);
        let max = usize::try_from(max).unwrap_or(usize::MAX).max(4096);
        return match reg::run(max, a.json) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rnic perf reg: {e}");
                ExitCode::from(1)
            }
        };
    }
    let (test, params) = match a.params() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("rnic perf: {e}");
            return ExitCode::from(2);
        }
    };
    let progress = !a.json;
    let dev = match (&a.device, &a.netdev) {
        (Some(d), _) => Some(rdma::DevSel::Named(d.clone())),
        (None, Some(n)) => Some(rdma::DevSel::Netdev(n.clone())),
        (None, None) => None,
    };
    let result = if a.server {
        let ip = a.ip.unwrap_or(IpAddr::from([127, 0, 0, 1]));
        serve(ip, dev, a.port).map(|()| Vec::new())
    } else if let Some(host) = &a.host {
        let ip = a.ip.unwrap_or(IpAddr::from([127, 0, 0, 2]));
        connect(host, a.port).and_then(|c| client(c, ip, dev, test, &params, progress, a.json))
    } else if a.device.is_some() || a.netdev.is_some() != a.peer_netdev.is_some() {
        Err("-d, or --netdev without --peer-netdev: one device per process; run the server (--server) and the \
             client (a host) apart, or give both --netdev and --peer-netdev"
            .into())
    } else {
        let (ip, peer) = (a.ip.unwrap_or(IpAddr::from([127, 0, 0, 1])), a.peer_ip);
        let (c, s) = Ctrl::pair();
        // Both ends of a ping-pong in one process: keep their two busy-polling threads on
        // two CPUs, as the UDP baseline's are (the scheduler may otherwise stack them).
        // Not threads that sleep on completion events (-e): a woken thread pinned to one
        // CPU waits for it, where the scheduler would have run it on the other.
        PIN.store(test.lat && !a.events, Ordering::Relaxed);
        let peer_dev = a.peer_netdev.clone().map(rdma::DevSel::Netdev);
        let server = std::thread::spawn(move || server_side(s, peer, peer_dev));
        let r = client(c, ip, dev, test, &params, progress, a.json);
        match server.join() {
            Ok(Ok(())) => r,
            Ok(Err(e)) => r.and(Err(e)),
            Err(_) => Err("the server side panicked".into()),
        }
    };
    match result {
        Ok(reports) => {
            if let Some(path) = a.plot.as_ref().filter(|_| !a.server) {
                let title = format!("rnic perf {} ({})", a.test, if test.lat { "latency" } else { "bandwidth" });
                if let Err(e) = plot::plot(path, &title, &reports) {
                    eprintln!("rnic perf: {e}");
                    return ExitCode::from(1);
                }
                if !a.json {
                    println!("plot: {}", path.display());
                }
            }
            if a.json && !a.server {
                let v: Vec<_> = reports.iter().map(Report::json).collect();
                let out = if a.all { json!(v) } else { v.into_iter().next().unwrap_or(json!(null)) };
                println!("{out}");
            }
            if let Some(bad) = reports.iter().find(|r| !r.verified) {
                eprintln!(
                    "rnic perf: {} bytes: data did not verify: {}",
                    bad.bytes,
                    bad.error.as_deref().unwrap_or("unknown")
                );
                return ExitCode::from(1);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rnic perf: {e}");
            ExitCode::from(1)
        }
    }
}

fn connect(host: &str, port: u16) -> Result<Ctrl, String> {
    let addrs: Vec<SocketAddr> =
        std::net::ToSocketAddrs::to_socket_addrs(&(host, port)).map_err(|e| format!("{host}: {e}"))?.collect();
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let mut last = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, Duration::from_secs(2)) {
                Ok(s) => return Ctrl::tcp(s),
                Err(e) => last = Some(e),
            }
        }
        if Instant::now() > until {
            return Err(format!(
                "cannot reach the server at {host}:{port}: {}",
                last.map_or("no address".into(), |e| e.to_string())
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn serve(ip: IpAddr, dev: Option<rdma::DevSel>, port: u16) -> Result<(), String> {
    let l = TcpListener::bind((ip, port)).map_err(|e| format!("cannot listen on {ip}:{port}: {e}"))?;
    eprintln!("rnic perf: waiting for a client on {ip}:{port}");
    let (s, from) = l.accept().map_err(|e| rnic_verbs::report(&e))?;
    eprintln!("rnic perf: client {from}");
    server_side(Ctrl::tcp(s)?, ip, dev)
}

/// Number of datagrams the bandwidth baseline sends: as many as the test moves, and
/// at least a steady-state run (a million datagrams or 1 GiB, whichever is less), at
/// most 2 GiB.
///
/// A short burst measures the socket buffer, not the kernel: 20 000 datagrams of 64
/// bytes fit in the receiver's buffer, and a receiver draining an already full buffer
/// counted 35 M datagrams/s where the sustained rate on the same machine was 8 M/s.
fn baseline_count(p: &Params, test: Test, size: u64) -> (u64, u64) {
    let pk = test.wire_packets(size, u64::from(p.mtu));
    let avg = pk.iter().sum::<u64>() / pk.len() as u64;
    let steady = (1u64 << 20).min((1u64 << 30) / avg.max(1)).max(20_000);
    let n = (p.iters * u64::from(p.qps) * pk.len() as u64).max(steady).min((2u64 << 30) / avg.max(1));
    (n, avg)
}

/// Bytes of each latency datagram: the mean of the request and response packets.
fn lat_wire(test: Test, size: u64, mtu: u64) -> u64 {
    match test.kind {
        TestKind::Read => (32 + Test { kind: TestKind::Read, lat: true }.wire_packets(size, mtu)[0]) / 2,
        // FETCH_ADD request (44) and ATOMIC ACKNOWLEDGE response (BTH + AETH + 8 + ICRC = 28).
        TestKind::Atomic => (44 + 28) / 2,
        _ => test.wire_packets(size, mtu)[0],
    }
}

/// The bandwidth data flows from the client, except for READ.
fn client_sources(test: Test) -> bool {
    test.kind != TestKind::Read
}

/// The bandwidth baseline's datagram lengths, repeated: the mean packet size `dgram`, or
/// with `--roce-shape` every packet of one message at its own length.
fn baseline_lens(p: &Params, test: Test, size: u64, dgram: u64) -> Result<Vec<usize>, String> {
    let lens = if p.roce_shape { test.wire_packets(size, u64::from(p.mtu)) } else { vec![dgram] };
    lens.into_iter().map(|l| usize::try_from(l).map_err(|_| "UDP baseline: size too large".to_string())).collect()
}

/// Baseline, source side.
fn udp_source(
    ctrl: &mut Ctrl,
    local: IpAddr,
    peer: IpAddr,
    n: u64,
    lens: &[usize],
) -> Result<(u64, f64, bool), String> {
    let port = ctrl.expect("udp_ready", |m| if let Msg::UdpReady { port } = m { Some(port) } else { None })?;
    let sock = udp::bind(local).map_err(|e| format!("UDP baseline: bind {local}: {e}"))?;
    let gso = udp::source(&sock, SocketAddr::new(peer, port), lens, n).map_err(|e| format!("UDP baseline: {e}"))?;
    let (d, secs) =
        ctrl.expect(
            "udp_done",
            |m| if let Msg::UdpDone { datagrams, secs } = m { Some((datagrams, secs)) } else { None },
        )?;
    Ok((d, secs, gso))
}

/// Baseline, receiving side: returns (datagrams timed, seconds, gro).
fn udp_sink(ctrl: &mut Ctrl, local: IpAddr, n: u64) -> Result<(u64, f64, bool), String> {
    let sock = udp::bind(local).map_err(|e| format!("UDP baseline: bind {local}: {e}"))?;
    let port = sock.local_addr().map_err(|e| rnic_verbs::report(&e))?.port();
    ctrl.send(&Msg::UdpReady { port })?;
    let (r, gro) = udp::sink(&sock, n, Duration::from_millis(300)).map_err(|e| format!("UDP baseline: {e}"))?;
    ctrl.send(&Msg::UdpDone { datagrams: r.timed, secs: r.secs })?;
    Ok((r.timed, r.secs, gro))
}

/// Baseline with -b: both sides send and receive at once. Returns (datagrams both sides
/// timed, the longer of the two intervals, gso, gro).
fn udp_both(ctrl: &mut Ctrl, local: IpAddr, peer: IpAddr, n: u64, lens: &[usize]) -> Result<(u64, f64, bool), String> {
    let sink = udp::bind(local).map_err(|e| format!("UDP baseline: bind {local}: {e}"))?;
    let src = udp::bind(local).map_err(|e| format!("UDP baseline: bind {local}: {e}"))?;
    ctrl.send(&Msg::UdpReady { port: sink.local_addr().map_err(|e| rnic_verbs::report(&e))?.port() })?;
    let port = ctrl.expect("udp_ready", |m| if let Msg::UdpReady { port } = m { Some(port) } else { None })?;
    let (mine, gso) = std::thread::scope(|sc| {
        let h = sc.spawn(|| udp::sink(&sink, n, Duration::from_millis(300)));
        let gso = udp::source(&src, SocketAddr::new(peer, port), lens, n);
        (h.join(), gso)
    });
    let (r, _gro) = match mine {
        Ok(r) => r.map_err(|e| format!("UDP baseline: {e}"))?,
        Err(_) => return Err("UDP baseline: the receiving thread panicked".into()),
    };
    let gso = gso.map_err(|e| format!("UDP baseline: {e}"))?;
    ctrl.send(&Msg::UdpDone { datagrams: r.timed, secs: r.secs })?;
    let (d, secs) =
        ctrl.expect(
            "udp_done",
            |m| if let Msg::UdpDone { datagrams, secs } = m { Some((datagrams, secs)) } else { None },
        )?;
    Ok((r.timed + d, r.secs.max(secs), gso))
}

thread_local! {
    /// The interface of this side's raw baseline, set when the side (a thread: both run
    /// in one process with --loopback) opens on raw Ethernet; the baseline functions are
    /// called where only the control channel is at hand.
    static RAW_NETDEV: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

fn set_raw_netdev(side: Option<&rdma::Side>) {
    RAW_NETDEV.with(|r| *r.borrow_mut() = side.and_then(rdma::Side::netdev));
}

fn raw_socket() -> Result<rnic_io::RawSocket, String> {
    let name = RAW_NETDEV.with(|r| r.borrow().clone());
    let name = name.ok_or("the client runs on raw Ethernet (--netdev): run this side with --netdev too")?;
    rawbase::open(&name)
}

/// The raw-frame baseline, client side (see [`rawbase`]).
fn raw_client_baseline(ctrl: &mut Ctrl, test: Test, p: &Params, size: u64) -> Result<Baseline, String> {
    let mtu = u64::from(p.mtu);
    let sock = raw_socket()?;
    let mac = ctrl.expect("raw_ready", |m| if let Msg::RawReady { mac } = m { Some(mac) } else { None })?;
    if test.lat {
        let wire =
            usize::try_from(lat_wire(test, size, mtu)).map_err(|_| "raw baseline: size too large".to_string())?;
        pin(0);
        let rtts = rawbase::ping(&sock, mac, wire + rawbase::FRAME_OVERHEAD, p.iters.max(1000))
            .map_err(|e| format!("raw baseline: {e}"))?;
        let scale = if matches!(test.kind, TestKind::Read | TestKind::Atomic) { 1.0 } else { 0.5 };
        let l = LatStats::from(&rtts, scale);
        return Ok(Baseline { value: l.typical, lat: Some(l), msg_rate: None, method: rawbase::LAT_METHOD.into() });
    }
    if p.bidirectional {
        return Err("-b with --netdev: the raw-frame baseline is one way; add --no-baseline".into());
    }
    let (n, dgram) = baseline_count(p, test, size);
    let frame =
        usize::try_from(dgram).map_err(|_| "raw baseline: size too large".to_string())? + rawbase::FRAME_OVERHEAD;
    let (timed, secs) = if client_sources(test) {
        rawbase::source(&sock, mac, frame, n).map_err(|e| format!("raw baseline: {e}"))?;
        ctrl.expect(
            "udp_done",
            |m| if let Msg::UdpDone { datagrams, secs } = m { Some((datagrams, secs)) } else { None },
        )?
    } else {
        ctrl.send(&Msg::RawReady { mac: sock.mac() })?;
        let r = rawbase::sink(&sock, n, Duration::from_millis(300)).map_err(|e| format!("raw baseline: {e}"))?;
        (r.timed, r.secs)
    };
    if secs <= 0.0 || timed == 0 {
        return Err("raw baseline: too few frames arrived to measure".into());
    }
    let pkts = test.wire_packets(size, mtu).len() as f64;
    let msgs = timed as f64 / pkts / secs;
    Ok(Baseline {
        value: msgs * size as f64 / MB,
        lat: None,
        msg_rate: Some(msgs / 1e6),
        method: rawbase::BW_METHOD.into(),
    })
}

/// The raw-frame baseline, server side.
fn raw_server_baseline(ctrl: &mut Ctrl, test: Test, p: &Params, size: u64) -> Result<(), String> {
    let sock = raw_socket()?;
    ctrl.send(&Msg::RawReady { mac: sock.mac() })?;
    if test.lat {
        pin(1);
        rawbase::pong(&sock, Duration::from_secs(600)).map_err(|e| format!("raw baseline: {e}"))?;
        return Ok(());
    }
    if p.bidirectional {
        return Err("-b with --netdev: the raw-frame baseline is one way; add --no-baseline".into());
    }
    let (n, dgram) = baseline_count(p, test, size);
    if client_sources(test) {
        let r = rawbase::sink(&sock, n, Duration::from_millis(300)).map_err(|e| format!("raw baseline: {e}"))?;
        ctrl.send(&Msg::UdpDone { datagrams: r.timed, secs: r.secs })?;
    } else {
        let mac = ctrl.expect("raw_ready", |m| if let Msg::RawReady { mac } = m { Some(mac) } else { None })?;
        let frame =
            usize::try_from(dgram).map_err(|_| "raw baseline: size too large".to_string())? + rawbase::FRAME_OVERHEAD;
        rawbase::source(&sock, mac, frame, n).map_err(|e| format!("raw baseline: {e}"))?;
    }
    Ok(())
}

/// The better of two baseline measurements: more bandwidth, or less latency.
fn best(a: Baseline, b: Baseline, lat: bool) -> Baseline {
    if (b.value > a.value) != lat {
        b
    } else {
        a
    }
}

#[derive(Clone)]
struct Baseline {
    value: f64,
    lat: Option<LatStats>,
    msg_rate: Option<f64>,
    method: String,
}

fn client_baseline(
    ctrl: &mut Ctrl,
    ip: IpAddr,
    peer: IpAddr,
    test: Test,
    p: &Params,
    size: u64,
) -> Result<Baseline, String> {
    if p.raw {
        return raw_client_baseline(ctrl, test, p, size);
    }
    let mtu = u64::from(p.mtu);
    if test.lat {
        let port = ctrl.expect("udp_ready", |m| if let Msg::UdpReady { port } = m { Some(port) } else { None })?;
        let sock = udp::bind(ip).map_err(|e| format!("UDP baseline: bind {ip}: {e}"))?;
        let wire =
            usize::try_from(lat_wire(test, size, mtu)).map_err(|_| "UDP baseline: size too large".to_string())?;
        pin(0);
        let shape = udp::Shape::new(p.roce_shape, wire);
        let rtts = udp::ping(&sock, SocketAddr::new(peer, port), wire, p.iters.max(1000), None, shape)
            .map_err(|e| format!("UDP baseline: {e}"))?;
        let scale = if matches!(test.kind, TestKind::Read | TestKind::Atomic) { 1.0 } else { 0.5 };
        let l = LatStats::from(&rtts, scale);
        return Ok(Baseline { value: l.typical, lat: Some(l), msg_rate: None, method: shape.method().into() });
    }
    let (n, dgram) = baseline_count(p, test, size);
    let pkts = test.wire_packets(size, mtu).len() as f64;
    let lens = baseline_lens(p, test, size, dgram)?;
    let (timed, secs, flag) = if p.bidirectional {
        udp_both(ctrl, ip, peer, n, &lens)?
    } else if client_sources(test) {
        udp_source(ctrl, ip, peer, n, &lens)?
    } else {
        udp_sink(ctrl, ip, n)?
    };
    // The other side's method flag is not exchanged; report what this side saw.
    let (gso, gro) = if client_sources(test) { (flag, true) } else { (true, flag) };
    if secs <= 0.0 || timed == 0 {
        return Err("UDP baseline: too few datagrams arrived to measure".into());
    }
    let msgs = timed as f64 / pkts / secs;
    Ok(Baseline {
        value: msgs * size as f64 / MB,
        lat: None,
        msg_rate: Some(msgs / 1e6),
        method: if p.roce_shape { udp::shaped_bw_method(gso, gro, &lens) } else { udp::bw_method(gso, gro) },
    })
}

fn server_baseline(ctrl: &mut Ctrl, ip: IpAddr, peer: IpAddr, test: Test, p: &Params, size: u64) -> Result<(), String> {
    if p.raw {
        return raw_server_baseline(ctrl, test, p, size);
    }
    if test.lat {
        let sock = udp::bind(ip).map_err(|e| format!("UDP baseline: bind {ip}: {e}"))?;
        let port = sock.local_addr().map_err(|e| rnic_verbs::report(&e))?.port();
        ctrl.send(&Msg::UdpReady { port })?;
        pin(1);
        let wire = usize::try_from(lat_wire(test, size, u64::from(p.mtu)))
            .map_err(|_| "UDP baseline: size too large".to_string())?;
        udp::pong(&sock, Duration::from_secs(600), udp::Shape::new(p.roce_shape, wire))
            .map_err(|e| format!("UDP baseline: {e}"))?;
        return Ok(());
    }
    let (n, dgram) = baseline_count(p, test, size);
    let lens = baseline_lens(p, test, size, dgram)?;
    if p.bidirectional {
        udp_both(ctrl, ip, peer, n, &lens)?;
    } else if client_sources(test) {
        udp_sink(ctrl, ip, n)?;
    } else {
        udp_source(ctrl, ip, peer, n, &lens)?;
    }
    Ok(())
}

fn client(
    mut ctrl: Ctrl,
    ip: IpAddr,
    dev: Option<rdma::DevSel>,
    test: Test,
    p: &Params,
    progress: bool,
    quiet: bool,
) -> Result<Vec<Report>, String> {
    let r = client_inner(&mut ctrl, ip, dev.as_ref(), test, p, progress, quiet);
    if let Err(e) = &r {
        let _ = ctrl.send(&Msg::Error { why: e.clone() });
    }
    r
}

fn client_inner(
    ctrl: &mut Ctrl,
    ip: IpAddr,
    dev: Option<&rdma::DevSel>,
    test: Test,
    p: &Params,
    progress: bool,
    quiet: bool,
) -> Result<Vec<Report>, String> {
    let mut side = if test.kind == TestKind::Udp { None } else { Some(rdma::Side::open("rnic0", ip, dev, p)?) };
    set_raw_netdev(side.as_ref());
    // A hardware device has no UDP baseline: neither side runs one.
    let hw = side.as_ref().is_some_and(|s| s.ctx.transport().is_none());
    let netdev = side.as_ref().and_then(|s| s.netdev());
    // The server takes the path MTU the client settled on (its port's active MTU unless -m).
    let mtu = side.as_ref().map_or(p.mtu, |s| s.mtu);
    let p = &Params { no_baseline: p.no_baseline || hw, raw: netdev.is_some(), mtu, mtu_auto: false, ..p.clone() };
    ctrl.send(&Msg::Hello { params: p.clone() })?;
    let peer_ip = if let Some(s) = &mut side {
        ctrl.send(&Msg::Setup { qps: s.endpoints(), mr: s.remote_mr() })?;
        let (eps, mr) =
            ctrl.expect("setup", |m| if let Msg::Setup { qps, mr } = m { Some((qps, mr)) } else { None })?;
        s.connect(&eps, mr, true)?;
        s.peer_ip(&eps).ok_or("the server sent no QP")?
    } else {
        ctrl.send(&address_only(ip))?;
        ctrl.expect(
            "setup",
            |m| if let Msg::Setup { qps, .. } = m { qps.first().map(|e| e.gid.to_ip()) } else { None },
        )?
    };
    if !quiet {
        let t = side.as_ref().and_then(|s| s.ctx.transport());
        println!("{}", header(test, p, side.as_ref().map_or("udp", |s| s.ctx.name()), t));
        if side.as_ref().is_some_and(|s| s.ctx.transport().is_none()) {
            println!(
                " Baseline        : none: {} is a hardware device, and a UDP socket's speed says nothing about a NIC's",
                side.as_ref().map_or("", |s| s.ctx.name())
            );
        }
        println!("{}", table_head(test.lat));
    }
    let mut reports = Vec::new();
    let rounds = p.rounds.max(1);
    for &size in &p.sizes {
        let r = match &side {
            None if p.no_baseline => return Err("--no-baseline: the udp tests are the baseline".into()),
            None => {
                let mut runs = Vec::new();
                for _ in 0..rounds {
                    runs.push(udp_report(test, p, size, &client_baseline(ctrl, ip, peer_ip, test, p, size)?));
                }
                median_round(runs, test.lat)
            }
            Some(s) => {
                // baseline, test, baseline, ..., test, baseline: each test run against the
                // better of the two baselines beside it (on a shared machine either can
                // catch a busy moment), so slow drifts of the machine cancel out.
                // A hardware device has no UDP baseline to be compared with.
                let baseline = !p.no_baseline && s.ctx.transport().is_some();
                let mut before = if baseline { Some(client_baseline(ctrl, ip, peer_ip, test, p, size)?) } else { None };
                let mut runs = Vec::new();
                for _ in 0..rounds {
                    let mut r = client_size(ctrl, s, test, p, size, progress).map_err(|e| with_counters(e, s))?;
                    if let Some(b) = before.take() {
                        let after = client_baseline(ctrl, ip, peer_ip, test, p, size)?;
                        r.set_baseline(best(b, after.clone(), test.lat));
                        before = Some(after);
                    }
                    runs.push(r);
                }
                let mut r = median_round(runs, test.lat);
                r.cc = s.ctx.config().is_some().then(|| CcSummary::of(&s.ctx));
                r
            }
        };
        if !quiet {
            println!("{}", table_row(&r));
            if let Some(c) = &r.cc {
                println!("{}", c.line());
            }
        }
        reports.push(r);
    }
    if !quiet {
        println!("{LINE}");
    }
    Ok(reports)
}

/// A `Setup` that only tells this side's address (the UDP tests have no QP).
fn address_only(ip: IpAddr) -> Msg {
    Msg::Setup {
        qps: vec![rnic_verbs::Endpoint { qpn: 0, gid: rnic_verbs::Gid::from_ip(ip), psn: 0 }],
        mr: rnic_verbs::RemoteMr { addr: 0, rkey: 0, len: 0 },
    }
}

/// An error, followed by the device's non-zero counters (what went wrong on the wire).
fn with_counters(e: String, side: &rdma::Side) -> String {
    let c: Vec<String> =
        side.ctx.counters().into_iter().filter(|&(_, v)| v > 0).map(|(k, v)| format!("{k}={v}")).collect();
    format!("{e}\n  {} counters: {}", side.ctx.name(), c.join(" "))
}

fn udp_report(test: Test, p: &Params, size: u64, base: &Baseline) -> Report {
    let figures = if test.lat {
        Figures::Lat(base.lat.unwrap_or_default())
    } else {
        Figures::Bw { peak_mbps: base.value, avg_mbps: base.value, msg_rate_mpps: base.msg_rate.unwrap_or(0.0) }
    };
    Report {
        test: p.test.clone(),
        bytes: size,
        iterations: p.iters,
        figures,
        baseline: None,
        baseline_method: base.method.clone(),
        baseline_msg_rate_mpps: None,
        ratio: None,
        ratio_min: None,
        ratio_max: None,
        rounds: 1,
        lost: None,
        verified: true,
        error: None,
        cc: None,
    }
}

/// The round whose ratio (or, without a baseline, whose figure) is the median, carrying
/// the spread of the ratios and the number of rounds. A round that did not verify wins:
/// the run fails with its reason.
fn median_round(mut runs: Vec<Report>, lat: bool) -> Report {
    let n = u32::try_from(runs.len()).unwrap_or(u32::MAX);
    if let Some(i) = runs.iter().position(|r| !r.verified) {
        let mut r = runs.swap_remove(i);
        r.rounds = n;
        return r;
    }
    let key = |r: &Report| {
        r.ratio.unwrap_or(match &r.figures {
            Figures::Bw { avg_mbps, .. } => *avg_mbps,
            Figures::Lat(l) => l.typical,
        })
    };
    let ratios: Vec<f64> = runs.iter().filter_map(|r| r.ratio).collect();
    let (lo, hi) = ratios.iter().fold((None, None), |(lo, hi): (Option<f64>, Option<f64>), &x| {
        (Some(lo.map_or(x, |l| l.min(x))), Some(hi.map_or(x, |h| h.max(x))))
    });
    runs.sort_by(|a, b| key(a).total_cmp(&key(b)));
    // The lower middle for an even count of latency rounds and the upper for bandwidth:
    // either way the pessimistic one of the two middles.
    let mid = if lat { runs.len() / 2 } else { (runs.len() - 1) / 2 };
    let mut r = runs.swap_remove(mid.min(runs.len().saturating_sub(1)));
    r.ratio_min = lo;
    r.ratio_max = hi;
    r.rounds = n;
    r
}

fn client_size(
    ctrl: &mut Ctrl,
    side: &rdma::Side,
    test: Test,
    p: &Params,
    size: u64,
    progress: bool,
) -> Result<Report, String> {
    let sz = usize::try_from(size).map_err(|_| format!("-s {size}: too large"))?;
    side.prepare(test.kind, sz)?;
    ctrl.send(&Msg::Ready)?;
    ctrl.expect("ready", |m| matches!(m, Msg::Ready).then_some(()))?;
    let target = Arc::new(AtomicU64::new(u64::MAX));
    let abort = AtomicBool::new(false);
    let (figures, iterations, own_check) = if test.lat {
        pin(0);
        let (rtts, last) = rdma::latency(side, p, test.kind, sz, true, &target, progress)?;
        ctrl.send(&Msg::Finished { count: rtts.len() as u64, secs: 0.0 })?;
        // perftest reports half the round trip for SEND and WRITE, the whole one for READ
        // and atomics.
        let scale = if matches!(test.kind, TestKind::Read | TestKind::Atomic) { 1.0 } else { 0.5 };
        let own = match (test.kind, last) {
            (TestKind::Read, _) => side.verify(test.kind, sz, None),
            (TestKind::Atomic, _) => side.verify_fetched(rtts.len() as u64, true),
            (_, Some(last)) => side.verify(test.kind, sz, Some(last)),
            (_, None) => Err("no round trip completed".into()),
        };
        (Figures::Lat(LatStats::from(&rtts, scale)), rtts.len() as u64, own)
    } else {
        let (run, own) = std::thread::scope(|sc| -> Result<(rdma::BwRun, Result<(), String>), String> {
            // -b: this side is also a target.
            let tgt = (p.bidirectional && test.kind == TestKind::Send)
                .then(|| sc.spawn(|| rdma::target_send(side, sz, &target, &abort, &AtomicU64::new(0))));
            let run = rdma::initiator_bw(side, p, test.kind, sz, progress);
            if run.is_err() {
                abort.store(true, Ordering::Release);
            }
            let run = run?;
            ctrl.send(&Msg::Finished { count: run.count, secs: run.secs })?;
            // What this side's own requests brought back: READ data, FETCH_ADD results.
            let mut own = match test.kind {
                TestKind::Read => side.verify(test.kind, sz, None),
                TestKind::Atomic => side.verify_fetched(run.count, p.qps == 1),
                _ => Ok(()),
            };
            let mut total = run.clone();
            if p.bidirectional {
                let (count, secs) = ctrl.expect_end("finished", |m| {
                    if let Msg::Finished { count, secs } = m {
                        Some((count, secs))
                    } else {
                        None
                    }
                })?;
                target.store(count, Ordering::Release);
                // -b: what the other side's requests did to this one.
                let as_target = match tgt.map(|h| h.join()) {
                    Some(Ok(Ok(last))) => {
                        let pat = rdma::pattern(sz);
                        side.verify(test.kind, sz, last.map(|o| (o, pat[sz - 1])))
                    }
                    Some(Ok(Err(e))) => Err(e),
                    Some(Err(_)) => Err("the receiving thread panicked".into()),
                    None if test.kind == TestKind::Atomic => side.verify_counter(count),
                    None if test.kind == TestKind::Read => Ok(()),
                    None => side.verify(test.kind, sz, None),
                };
                own = own.and(as_target);
                // Both directions: bytes add up over the longer of the two runs.
                total.count += count;
                total.secs = total.secs.max(secs);
                total.peak_wr_per_sec += run.peak_wr_per_sec * count as f64 / run.count.max(1) as f64;
            }
            Ok((total, own))
        })?;
        let avg = run.count as f64 * size as f64 / run.secs / MB;
        let figures = Figures::Bw {
            peak_mbps: (run.peak_wr_per_sec * size as f64 / MB).max(avg),
            avg_mbps: avg,
            msg_rate_mpps: run.count as f64 / run.secs / 1e6,
        };
        (figures, run.count, own)
    };
    let (ok, why, lost) =
        ctrl.expect(
            "verified",
            |m| {
                if let Msg::Verified { ok, why, lost } = m {
                    Some((ok, why, lost))
                } else {
                    None
                }
            },
        )?;
    // UD: what was lost does not count as moved.
    let figures = match figures {
        Figures::Bw { peak_mbps, avg_mbps, msg_rate_mpps } if lost > 0 && iterations > 0 => {
            let f = iterations.saturating_sub(lost) as f64 / iterations as f64;
            Figures::Bw { peak_mbps: peak_mbps * f, avg_mbps: avg_mbps * f, msg_rate_mpps: msg_rate_mpps * f }
        }
        f => f,
    };
    let error = match (own_check, ok) {
        (Err(e), _) => Some(format!("this side: {e}")),
        (Ok(()), false) => Some(format!("the other side: {why}")),
        _ => None,
    };
    Ok(Report {
        test: p.test.clone(),
        bytes: size,
        iterations,
        figures,
        baseline: None,
        baseline_method: String::new(),
        baseline_msg_rate_mpps: None,
        ratio: None,
        ratio_min: None,
        ratio_max: None,
        rounds: 1,
        lost: p.ud.then_some(lost),
        verified: error.is_none(),
        error,
        cc: None,
    })
}

fn server_side(mut ctrl: Ctrl, ip: IpAddr, dev: Option<rdma::DevSel>) -> Result<(), String> {
    let r = server_inner(&mut ctrl, ip, dev.as_ref());
    if let Err(e) = &r {
        let _ = ctrl.send(&Msg::Error { why: e.clone() });
    }
    r
}

fn server_inner(ctrl: &mut Ctrl, ip: IpAddr, dev: Option<&rdma::DevSel>) -> Result<(), String> {
    let p = ctrl.expect("hello", |m| if let Msg::Hello { params } = m { Some(params) } else { None })?;
    let test = Test::parse(&p.test).ok_or_else(|| format!("unknown test {}", p.test))?;
    let mut side = if test.kind == TestKind::Udp { None } else { Some(rdma::Side::open("rnic1", ip, dev, &p)?) };
    set_raw_netdev(side.as_ref());
    let peer_ip = match &mut side {
        Some(s) => {
            let (eps, mr) =
                ctrl.expect("setup", |m| if let Msg::Setup { qps, mr } = m { Some((qps, mr)) } else { None })?;
            // -R: listen before the client learns it may connect.
            if let Some(port) = p.cm_port {
                s.ctx.cm_listen(port).map_err(|e| rnic_verbs::report(&e))?;
            }
            ctrl.send(&Msg::Setup { qps: s.endpoints(), mr: s.remote_mr() })?;
            s.connect(&eps, mr, false)?;
            s.peer_ip(&eps).ok_or("the client sent no QP")?
        }
        None => {
            // The UDP tests: only the addresses are exchanged.
            let peer = ctrl.expect("setup", |m| {
                if let Msg::Setup { qps, .. } = m {
                    qps.first().map(|e| e.gid.to_ip())
                } else {
                    None
                }
            })?;
            ctrl.send(&address_only(ip))?;
            peer
        }
    };
    let mut failed = None;
    for &size in &p.sizes {
        let Some(s) = &side else {
            // The UDP tests: one baseline per round.
            for _ in 0..p.rounds.max(1) {
                server_baseline(ctrl, ip, peer_ip, test, &p, size)?;
            }
            continue;
        };
        if !p.no_baseline {
            server_baseline(ctrl, ip, peer_ip, test, &p, size)?;
        }
        for _ in 0..p.rounds.max(1) {
            let sz = usize::try_from(size).map_err(|_| format!("-s {size}: too large"))?;
            s.prepare(test.kind, sz)?;
            ctrl.send(&Msg::Ready)?;
            ctrl.expect("ready", |m| matches!(m, Msg::Ready).then_some(()))?;
            let target = AtomicU64::new(u64::MAX);
            let abort = AtomicBool::new(false);
            let lost = AtomicU64::new(0);
            let check = std::thread::scope(|sc| -> Result<Result<(), String>, String> {
                let worker = sc.spawn(|| -> Result<Option<(usize, u8)>, String> {
                    if test.lat {
                        pin(1);
                        rdma::latency(s, &p, test.kind, sz, false, &target, false).map(|(_, last)| last)
                    } else if test.kind == TestKind::Send {
                        let pat = rdma::pattern(sz);
                        rdma::target_send(s, sz, &target, &abort, &lost).map(|o| o.map(|o| (o, pat[sz - 1])))
                    } else {
                        Ok(None)
                    }
                });
                if p.bidirectional {
                    let run = rdma::initiator_bw(s, &p, test.kind, sz, false);
                    let run = match run {
                        Ok(r) => r,
                        Err(e) => {
                            abort.store(true, Ordering::Release);
                            return Err(e);
                        }
                    };
                    ctrl.send(&Msg::Finished { count: run.count, secs: run.secs })?;
                }
                let count =
                    ctrl.expect_end(
                        "finished",
                        |m| if let Msg::Finished { count, .. } = m { Some(count) } else { None },
                    );
                let count = match count {
                    Ok(c) => c,
                    Err(e) => {
                        abort.store(true, Ordering::Release);
                        target.store(0, Ordering::Release);
                        return Err(e);
                    }
                };
                target.store(count, Ordering::Release);
                let last = worker.join().map_err(|_| "the server's worker panicked".to_string())?;
                Ok(last.and_then(|last| match (test.lat, test.kind) {
                    (_, TestKind::Read) => {
                        if test.lat || !p.bidirectional {
                            Ok(()) // nothing arrived at this side
                        } else {
                            s.verify(test.kind, sz, None)
                        }
                    }
                    (false, TestKind::Write) => s.verify(test.kind, sz, None),
                    (_, TestKind::Atomic) => s.verify_counter(count),
                    (true, _) if count == 0 => Ok(()),
                    _ => s.verify(test.kind, sz, last),
                }))
            })?;
            let (ok, why) = match &check {
                Ok(()) => (true, String::new()),
                Err(e) => (false, e.clone()),
            };
            if !ok {
                failed = Some(why.clone());
            }
            ctrl.send(&Msg::Verified { ok, why, lost: lost.load(Ordering::Acquire) })?;
            if !p.no_baseline {
                server_baseline(ctrl, ip, peer_ip, test, &p, size)?;
            }
        }
    }
    match failed {
        Some(e) => Err(format!("data did not verify: {e}")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
