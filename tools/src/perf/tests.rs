//! Option parsing (golden clap parses), the wire sizes the baseline copies, the JSON shape.

use super::*;
use clap::Parser;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: Args,
}

fn parse(line: &str) -> Result<Args, String> {
    Cli::try_parse_from(std::iter::once("perf").chain(line.split_whitespace()))
        .map(|c| c.args)
        .map_err(|e| rnic_verbs::report(&e))
}

fn params(line: &str) -> Result<(Test, Params), String> {
    parse(line)?.params()
}

#[test]
fn perftest_letters_mean_what_perftest_means() {
    let a = parse("write_bw -s 65536 -m 4096 -n 50 -q 4 -t 64 -r 256 -I 128 -Q 10 -p 20000 --json").unwrap();
    assert_eq!(a.test, "write_bw");
    assert_eq!((a.size, a.mtu, a.iters, a.qps), (Some(65536), Some(4096), Some(50), 4));
    assert_eq!((a.tx_depth, a.rx_depth, a.inline, a.cq_mod, a.port), (Some(64), 256, 128, 10, 20000));
    assert!(a.json && !a.server && !a.bidirectional && !a.events && a.host.is_none());
    let (t, p) = a.params().unwrap();
    assert_eq!(t, Test { kind: TestKind::Write, lat: false });
    assert_eq!(
        p,
        Params {
            test: "write_bw".into(),
            sizes: vec![65536],
            iters: 50,
            duration: None,
            qps: 4,
            tx_depth: 64,
            rx_depth: 256,
            inline: 128,
            mtu: 4096,
            mtu_auto: false,
            cq_mod: 10,
            bidirectional: false,
            events: false,
            uc: false,
            no_baseline: false,
            ud: false,
            rounds: 3,
            cm_port: None,
            raw: false,
            roce_shape: false,
        }
    );
}

#[test]
fn defaults_follow_perftest() {
    let (t, p) = params("send_lat").unwrap();
    assert!(t.lat);
    assert_eq!((p.sizes.clone(), p.iters, p.tx_depth, p.cq_mod, p.qps), (vec![2], 1000, 1, 1, 1));
    let (_, p) = params("read_bw").unwrap();
    assert_eq!((p.sizes.clone(), p.iters, p.tx_depth, p.cq_mod, p.mtu), (vec![65536], 5000, 128, 100, 4096));
    // No -m: the client's port decides (perftest); -m fixes it.
    assert!(p.mtu_auto);
    let (_, p) = params("read_bw -m 1024").unwrap();
    assert!(!p.mtu_auto && p.mtu == 1024);
    let (_, p) = params("write_bw -a -D 2.5 -b").unwrap();
    assert_eq!(p.sizes.len(), 23);
    assert_eq!((p.sizes[0], p.sizes[22]), (2, 1 << 23));
    assert_eq!(p.duration, Some(2.5));
    assert!(p.bidirectional);
    // Atomics are 8-byte FETCH_ADDs whatever -s says (perftest).
    let (t, p) = params("atomic_bw -s 4096").unwrap();
    assert_eq!((t.kind, p.sizes.clone()), (TestKind::Atomic, vec![8]));
    assert_eq!(t.wire_packets(8, 4096), vec![12 + 28 + 4]);
    // CQ moderation is clamped to the send queue depth, as perftest does.
    assert_eq!(params("write_bw -t 16 -Q 100").unwrap().1.cq_mod, 16);
    // With many QPs the default queue is shared: 128 in total, at least 1 per QP.
    assert_eq!(params("write_bw -q 4").unwrap().1.tx_depth, 32);
    assert_eq!(params("write_bw -q 1024").unwrap().1.tx_depth, 1);
    assert_eq!(params("write_bw -q 1024 -t 8").unwrap().1.tx_depth, 8);
}

#[test]
fn ud_is_send_only_and_one_packet_per_message() {
    let (_, p) = params("send_bw -c UD -s 1024 -m 1024").unwrap();
    assert!(p.ud && !p.uc);
    assert_eq!(p.sizes, vec![1024]);
    // -a under UD stops at the path MTU, as perftest.
    let (_, p) = params("send_lat -c ud -a -m 2048").unwrap();
    assert_eq!(p.sizes.last(), Some(&2048));
    assert!(params("send_lat -c UD -s 2049 -m 2048").is_err());
}

#[test]
fn modes_host_server_loopback() {
    let a = parse("write_bw 10.0.0.1 --ip 10.0.0.2").unwrap();
    assert_eq!(a.host.as_deref(), Some("10.0.0.1"));
    assert_eq!(a.ip, Some("10.0.0.2".parse().unwrap()));
    assert!(parse("write_bw --server --ip 127.0.0.1").unwrap().server);
    assert!(parse("write_bw 127.0.0.1 --server").is_err());
    assert!(parse("write_bw --loopback --server").is_err());
    assert!(parse("write_bw -a -s 64").is_err());
    let l = parse("write_bw --loopback --ip 127.0.31.1 --peer-ip 127.0.31.2").unwrap();
    assert!(l.loopback && l.host.is_none());
}

#[test]
fn what_this_build_cannot_do_is_refused_by_name() {
    for (line, says) in [
        ("write_bw -c UD", "-c UD: write_bw needs RC or UC (UD carries SEND only)"),
        ("send_bw -c UD -s 8192 -m 4096", "-s 8192: a UD message is one packet, at most the path MTU (-m 4096)"),
        ("udp_bw --no-baseline", "--no-baseline: the udp tests are the baseline"),
        ("read_bw -c uc", "-c UC: read_bw needs RC"),
        ("write_bw -c XY", "not a connection type"),
        ("write_lat -e", "-e: write_lat polls memory"),
        ("write_bw -m 1500", "-m 1500: not 256"),
        ("write_lat -q 2", "latency tests use one QP"),
        ("write_lat -b", "-b: latency tests"),
        ("write_bw -I 4096", "inlines at most 1024"),
        ("write_bw -n 0", "-n 0"),
        ("write_bw -s 0", "-s 0"),
        ("flush_bw", "unknown test"),
        ("write_xx", "unknown test"),
    ] {
        let e = params(line).unwrap_err();
        assert!(e.contains(says), "{line}: {e}");
    }
}

#[test]
fn wire_sizes_are_roce_packets() {
    let w = Test::parse("write_bw").unwrap();
    let p = w.wire_packets(65536, 4096);
    assert_eq!(p.len(), 16);
    assert_eq!(p[0], 12 + 16 + 4096 + 4); // BTH + RETH + payload + ICRC
    assert!(p[1..].iter().all(|&x| x == 12 + 4096 + 4));
    assert_eq!(w.wire_packets(8, 4096), vec![12 + 16 + 8 + 4]);
    let r = Test::parse("read_bw").unwrap().wire_packets(10000, 4096);
    assert_eq!(r, vec![12 + 4 + 4096 + 4, 12 + 4096 + 4, 12 + 4 + 1808 + 4]);
    // Payload padded to 4 bytes (PadCnt).
    assert_eq!(Test::parse("send_bw").unwrap().wire_packets(2, 1024), vec![12 + 4 + 4]);
}

#[test]
fn json_has_exactly_the_issue_fields() {
    let bw = Report {
        test: "write_bw".into(),
        bytes: 65536,
        iterations: 5000,
        figures: Figures::Bw { peak_mbps: 3000.0, avg_mbps: 2500.0, msg_rate_mpps: 0.04 },
        baseline: Some(5000.0),
        baseline_method: "m".into(),
        baseline_msg_rate_mpps: Some(0.08),
        ratio: Some(0.5),
        ratio_min: Some(0.4),
        ratio_max: Some(0.6),
        rounds: 5,
        lost: None,
        verified: true,
        error: None,
        cc: None,
    };
    let v = bw.json();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "baseline",
            "baseline_method",
            "baseline_msg_rate_mpps",
            "bw_avg_mbps",
            "bw_peak_mbps",
            "bytes",
            "iterations",
            "msg_rate_mpps",
            "ratio",
            "ratio_max",
            "ratio_min",
            "rounds",
            "test",
            "verified"
        ]
    );
    assert_eq!((v["ratio"].as_f64(), v["ratio_min"].as_f64(), v["rounds"].as_u64()), (Some(0.5), Some(0.4), Some(5)));
    let lat = Report {
        figures: Figures::Lat(LatStats { min: 1.0, typical: 2.0, avg: 2.5, p99: 4.0, p999: 5.0, max: 9.0 }),
        verified: false,
        error: Some("byte 3".into()),
        cc: None,
        ..bw
    };
    let v = lat.json();
    for k in ["lat_min_us", "lat_typical_us", "lat_avg_us", "lat_p99_us", "lat_p999_us", "lat_max_us", "error"] {
        assert!(v.get(k).is_some(), "{k} missing: {v}");
    }
    assert!(v.get("bw_avg_mbps").is_none());
    assert_eq!(v["verified"], false);
}

#[test]
fn latency_statistics() {
    let s: Vec<Duration> = (1..=1000).map(Duration::from_micros).collect();
    let l = LatStats::from(&s, 0.5);
    let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(near(l.min, 0.5) && near(l.max, 500.0), "{l:?}");
    assert!(near(l.typical, 250.5), "{l:?}");
    assert!(near(l.p99, 495.0) && near(l.p999, 499.5), "{l:?}");
    assert!(near(l.avg, 250.25), "{l:?}");
    assert_eq!(LatStats::from(&[], 1.0), LatStats::default());
}

fn round(ratio: Option<f64>, avg: f64, verified: bool) -> Report {
    Report {
        test: "write_bw".into(),
        bytes: 8,
        iterations: 1,
        figures: Figures::Bw { peak_mbps: avg, avg_mbps: avg, msg_rate_mpps: 0.0 },
        baseline: ratio.map(|r| avg / r),
        baseline_method: String::new(),
        baseline_msg_rate_mpps: None,
        ratio,
        ratio_min: None,
        ratio_max: None,
        rounds: 1,
        lost: None,
        verified,
        error: (!verified).then(|| "bad byte".to_string()),
        cc: None,
    }
}

#[test]
fn the_median_round_carries_the_spread() {
    let r = median_round(
        vec![round(Some(0.5), 5.0, true), round(Some(0.2), 2.0, true), round(Some(0.9), 9.0, true)],
        false,
    );
    assert_eq!((r.ratio, r.ratio_min, r.ratio_max, r.rounds), (Some(0.5), Some(0.2), Some(0.9), 3));
    assert_eq!(
        r.figures,
        Figures::Bw { peak_mbps: 5.0, avg_mbps: 5.0, msg_rate_mpps: 0.0 },
        "the median round's own figures"
    );
    // Even count: the pessimistic middle (bandwidth: the lower ratio; latency: the higher).
    let two = || vec![round(Some(0.4), 4.0, true), round(Some(0.6), 6.0, true)];
    assert_eq!(median_round(two(), false).ratio, Some(0.4));
    assert_eq!(median_round(two(), true).ratio, Some(0.6));
    // Without a baseline the figure itself picks the median; no spread is claimed.
    let r = median_round(vec![round(None, 3.0, true), round(None, 1.0, true), round(None, 2.0, true)], false);
    assert_eq!((r.ratio, r.ratio_min, r.rounds), (None, None, 3));
    assert_eq!(r.figures, Figures::Bw { peak_mbps: 2.0, avg_mbps: 2.0, msg_rate_mpps: 0.0 });
    // A round that did not verify decides the result.
    let r = median_round(vec![round(Some(0.5), 5.0, true), round(Some(0.6), 6.0, false)], false);
    assert!(!r.verified && r.error.as_deref() == Some("bad byte"));
}

/// The bandwidth baseline sends the lengths it is given, in order, over and over, and in
/// rnic's grouping: two 64 KiB WRITEs' packets at 4 KiB MTU arrive as 4128, 15 x 4112,
/// 4128, 15 x 4112 (a receiver with GRO sees each GSO send as one buffer cut at its
/// segment size).
#[test]
fn the_shaped_udp_source_sends_each_packet_at_its_length() {
    let lens: Vec<usize> = Test::parse("write_bw")
        .unwrap()
        .wire_packets(65536, 4096)
        .into_iter()
        .map(|l| usize::try_from(l).unwrap())
        .collect();
    assert_eq!((lens[0], lens[1], lens.len()), (4128, 4112, 16));
    let rx = super::udp::bind("127.0.0.1".parse().unwrap()).unwrap();
    let tx = super::udp::bind("127.0.0.1".parse().unwrap()).unwrap();
    let gro = rnic_io::set_udp_gro(&rx, true).is_ok();
    let gso = super::udp::source(&tx, rx.local_addr().unwrap(), &lens, 32).unwrap();
    rx.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let mut bufs: Vec<Vec<u8>> = (0..8).map(|_| vec![0u8; 65_536]).collect();
    let mut meta = vec![rnic_io::RecvMeta::default(); 8];
    let mut scratch = rnic_io::RecvScratch::new(8);
    let (mut got, mut buffers) = (Vec::new(), Vec::new());
    while got.len() < 32 {
        let n = rnic_io::recv_msgs(&rx, &mut scratch, &mut bufs, &mut meta, true).unwrap();
        for m in &meta[..n] {
            let seg = if m.segment > 0 { m.segment } else { m.len };
            buffers.push(m.len.div_ceil(seg));
            got.extend((0..m.len).step_by(seg).map(|off| seg.min(m.len - off)));
        }
    }
    let want: Vec<usize> = lens.iter().chain(&lens).copied().collect();
    assert_eq!(got, want);
    if gso && gro {
        assert_eq!(buffers, [1, 15, 1, 15], "one GSO send per run of equal packets");
    }
}
