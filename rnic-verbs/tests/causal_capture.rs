//! Captures are causal: two devices in one process write one capture file, and every
//! acknowledgement in it comes after, and is stamped no earlier than, the request it
//! answers. A divergence found by `rnic conform` is judged from such a file, so an answer
//! drawn above its request would be a false report.
//!
//! The race this guards against: the sender's progress thread used to write its packets
//! to the capture after `sendmmsg` returned, and the receiver's thread, on the other core,
//! could take the packet, answer it and write the answer first (`rnic demo --ladder` drew
//! an ACK above its SEND in about one run of seven). One exchange rarely loses the race,
//! so the test runs many.

use rnic_verbs::*;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);
const ROUNDS: u32 = 400;

/// One captured RoCE packet: when, from where, BTH opcode and PSN.
#[derive(Debug, Clone, Copy)]
struct Rec {
    ts_us: u64,
    src: IpAddr,
    opcode: u8,
    psn: u32,
}

/// Reads the classic little-endian pcap rnic writes (Ethernet, IPv4, UDP 4791, BTH).
fn read_pcap(path: &Path) -> Vec<Rec> {
    let b = std::fs::read(path).unwrap();
    assert!(b.len() >= 24 && b[0..4] == 0xa1b2_c3d4u32.to_le_bytes(), "not a pcap rnic writes");
    let mut at = 24;
    let mut out = Vec::new();
    while at + 16 <= b.len() {
        let u = |o: usize| u32::from_le_bytes(b[at + o..at + o + 4].try_into().unwrap());
        let (sec, usec, len) = (u(0), u(4), u(8) as usize);
        let f = &b[at + 16..at + 16 + len];
        at += 16 + len;
        // Ethernet (14) + IPv4 (20) + UDP (8), then the BTH.
        if f.len() < 54 || f[12..14] != [0x08, 0x00] {
            continue;
        }
        let src = IpAddr::from([f[26], f[27], f[28], f[29]]);
        let bth = &f[42..];
        out.push(Rec {
            ts_us: u64::from(sec) * 1_000_000 + u64::from(usec),
            src,
            opcode: bth[0],
            psn: u32::from_be_bytes([0, bth[9], bth[10], bth[11]]),
        });
    }
    out
}

#[test]
fn no_acknowledgement_is_captured_ahead_of_its_request() {
    let pcap = std::env::temp_dir().join(format!("rnic-causal-{}.pcap", std::process::id()));
    let _ = std::fs::remove_file(&pcap);
    let (ip_a, ip_b): (IpAddr, IpAddr) = ("127.0.101.1".parse().unwrap(), "127.0.101.2".parse().unwrap());
    {
        let open = |name: &str, ip| {
            Context::open_with(DeviceConfig {
                capture: Some(pcap.clone()),
                pin_memory: false,
                ..DeviceConfig::new(name, ip)
            })
            .unwrap()
        };
        let (a, b) = (open("rnic0", ip_a), open("rnic1", ip_b));
        let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let (ca, cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
        let ma = pa.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
        let mb = pb.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
        let qa = pa.qp_builder(&ca, &ca).build().unwrap();
        let qb = pb.qp_builder(&cb, &cb).build().unwrap();
        let (ea, eb) = (qa.endpoint(), qb.endpoint());
        let (qa, qb) = (qa.connect(&eb).unwrap(), qb.connect(&ea).unwrap());
        // One SEND at a time, each completed by its own ACK before the next is posted.
        for i in 0..ROUNDS {
            qb.post_recv(&RecvWr { wr_id: u64::from(i), sg_list: vec![mb.sge(0, 64)] }).unwrap();
            qa.post_send(&SendWr::send(u64::from(i), vec![ma.sge(0, 16)])).unwrap();
            assert_eq!(ca.wait(1, T).unwrap()[0].status, WcStatus::Success, "SEND {i}");
            assert_eq!(cb.wait(1, T).unwrap()[0].status, WcStatus::Success, "receive {i}");
        }
    }
    let recs = read_pcap(&pcap);
    const SEND_ONLY: u8 = 0x04;
    const ACK: u8 = 0x11;
    let sends = recs.iter().filter(|r| r.src == ip_a && r.opcode == SEND_ONLY).count();
    let acks = recs.iter().filter(|r| r.src == ip_b && r.opcode == ACK).count();
    assert!(sends >= ROUNDS as usize && acks >= ROUNDS as usize, "{sends} SENDs and {acks} ACKs captured");
    let mut misplaced = Vec::new();
    for (i, ack) in recs.iter().enumerate().filter(|(_, r)| r.src == ip_b && r.opcode == ACK) {
        // The request an ACK answers carries the ACK's PSN (IBA 9.7.5.1.1: the AETH's
        // PSN is that of the last request acknowledged) and must precede it.
        let req = recs[..i].iter().rev().find(|r| r.src == ip_a && r.opcode == SEND_ONLY && r.psn == ack.psn);
        match req {
            Some(r) if r.ts_us <= ack.ts_us => {}
            Some(r) => misplaced.push(format!("ACK {:#x} at {} us, its SEND at {} us", ack.psn, ack.ts_us, r.ts_us)),
            None => misplaced.push(format!("ACK {:#x} (record {i}) comes before its SEND", ack.psn)),
        }
    }
    assert!(misplaced.is_empty(), "{} of {acks} ACKs out of order: {misplaced:?}", misplaced.len());
    check_pcap(&pcap);
    let _ = std::fs::remove_file(&pcap);
}

/// Runs ../shared/vectors/check_pcap.sh on the capture when tshark is installed.
fn check_pcap(pcap: &PathBuf) {
    let have_tshark = Command::new("tshark").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    if !have_tshark {
        eprintln!("tshark not installed: check_pcap.sh skipped");
        return;
    }
    let shared = std::env::var_os("RNIC_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared")));
    let out = Command::new(shared.join("vectors/check_pcap.sh")).arg(pcap).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "check_pcap.sh: {text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(", 0 bad"), "{text}");
}
