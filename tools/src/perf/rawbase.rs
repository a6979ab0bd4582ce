//! The same-run raw-frame baseline of the raw-Ethernet transport: plain Ethernet frames of
//! the RoCEv2 frame size between the same interfaces, through `AF_PACKET` sockets set up
//! as the transport's (`sendmmsg` / `recvmmsg` batches), so that `rnic perf --netdev`
//! reports its result against the transport's own ceiling, not a UDP socket's.
//!
//! The frames carry EtherType 0x88B5 (IEEE 802 local experimental): no stack and no rnic
//! device takes them for its own.

use super::udp::SinkResult;
use rnic_io::RawSocket;
use std::io;
use std::time::{Duration, Instant};

/// IEEE 802 local experimental EtherType.
const ETHERTYPE: u16 = 0x88B5;
/// Frames per `sendmmsg` / `recvmmsg`.
const BATCH: usize = 64;
/// Ethernet + IPv4 + UDP bytes a RoCEv2 frame has around its packet.
pub const FRAME_OVERHEAD: usize = 14 + 20 + 8;

/// How the bandwidth baseline moved its frames.
pub const BW_METHOD: &str = "raw Ethernet frames, AF_PACKET sendmmsg + recvmmsg (the raw transport's ceiling)";
/// How the latency baseline moved its frames.
pub const LAT_METHOD: &str = "raw Ethernet ping-pong, both sides busy polling AF_PACKET sockets";

/// Opens the baseline's socket on `ifname`.
pub fn open(ifname: &str) -> Result<RawSocket, String> {
    RawSocket::open(ifname).map_err(|e| format!("raw baseline on {ifname}: {e}"))
}

fn frame(sock: &RawSocket, dst: [u8; 6], len: usize, tag: u8) -> Vec<u8> {
    let mut f = vec![0u8; len.max(60)];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&sock.mac());
    f[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    f[14] = tag;
    f
}

fn ours(buf: &[u8]) -> bool {
    buf.len() >= 15 && buf[12..14] == ETHERTYPE.to_be_bytes()
}

/// Sends `count` frames of `len` bytes to `dst`, as fast as the socket takes them.
pub fn source(sock: &RawSocket, dst: [u8; 6], len: usize, count: u64) -> io::Result<()> {
    let f = frame(sock, dst, len, 0);
    let batch: Vec<&[u8]> = vec![&f[..]; BATCH];
    let mut sent = 0u64;
    let start = Instant::now();
    while sent < count {
        let want = usize::try_from((count - sent).min(BATCH as u64)).unwrap_or(BATCH);
        match sock.send(&batch[..want])? {
            0 => {
                if start.elapsed() > Duration::from_secs(120) {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "the interface's queue never drained"));
                }
                std::hint::spin_loop();
            }
            k => sent += k as u64,
        }
    }
    Ok(())
}

/// Receives the baseline's frames until `expect` arrived or none came for `idle`;
/// times from the end of the first receive to the end of the last.
pub fn sink(sock: &RawSocket, expect: u64, idle: Duration) -> io::Result<SinkResult> {
    let mut bufs: Vec<Vec<u8>> = (0..BATCH).map(|_| vec![0u8; 65_536 + 64]).collect();
    let mut lens = vec![0usize; BATCH];
    let (mut got, mut timed) = (0u64, 0u64);
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut quiet_since = Instant::now();
    while got < expect {
        let n = sock.recv(&mut bufs, &mut lens)?;
        let mine = (0..n).filter(|&i| ours(&bufs[i][RawSocket::RX_OFFSET..RawSocket::RX_OFFSET + lens[i]])).count();
        if mine == 0 {
            if quiet_since.elapsed() > idle && (got > 0 || quiet_since.elapsed() > Duration::from_secs(10)) {
                break;
            }
            std::hint::spin_loop();
            continue;
        }
        quiet_since = Instant::now();
        got += mine as u64;
        match first {
            None => first = Some(Instant::now()),
            Some(_) => timed += mine as u64,
        }
        last = Instant::now();
    }
    let secs = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    Ok(SinkResult { datagrams: got, secs, timed })
}

/// The measuring side of the latency baseline: `iters` round trips of `len`-byte
/// frames to `dst` and back, busy polling; then the stop frame.
pub fn ping(sock: &RawSocket, dst: [u8; 6], len: usize, iters: u64) -> io::Result<Vec<Duration>> {
    let mut out = frame(sock, dst, len, 1);
    let mut bufs = vec![vec![0u8; 65_536 + 64]];
    let mut lens = [0usize];
    let mut rtts = Vec::with_capacity(usize::try_from(iters.min(1 << 20)).unwrap_or(1 << 20));
    for i in 0..iters {
        out[15] = i.to_le_bytes()[0];
        let t = Instant::now();
        while sock.send(&[&out])? == 0 {
            std::hint::spin_loop();
        }
        loop {
            if sock.recv(&mut bufs, &mut lens)? == 1 {
                let f = &bufs[0][RawSocket::RX_OFFSET..RawSocket::RX_OFFSET + lens[0]];
                if ours(f) && f.len() > 15 && f[15] == out[15] {
                    break;
                }
            } else if t.elapsed() > Duration::from_secs(5) {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "raw ping lost (no answer in 5 s)"));
            } else {
                std::hint::spin_loop();
            }
        }
        rtts.push(t.elapsed());
    }
    let stop = frame(sock, dst, 60, 2);
    for _ in 0..3 {
        sock.send(&[&stop])?;
    }
    Ok(rtts)
}

/// The answering side of the latency baseline: echoes every ping frame back to its
/// sender until the stop frame; busy polls.
pub fn pong(sock: &RawSocket, deadline: Duration) -> io::Result<u64> {
    let mut bufs = vec![vec![0u8; 65_536 + 64]];
    let mut lens = [0usize];
    let start = Instant::now();
    let mut n = 0u64;
    loop {
        if sock.recv(&mut bufs, &mut lens)? == 1 {
            let f = &mut bufs[0][RawSocket::RX_OFFSET..RawSocket::RX_OFFSET + lens[0]];
            if !ours(f) {
                continue;
            }
            if f[14] == 2 {
                return Ok(n);
            }
            let src: [u8; 6] = f[6..12].try_into().unwrap_or([0; 6]);
            f.copy_within(0..6, 6);
            f[..6].copy_from_slice(&src);
            while sock.send(&[&*f])? == 0 {
                std::hint::spin_loop();
            }
            n += 1;
        } else if start.elapsed() > deadline {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no stop frame from the pinging side"));
        } else {
            std::hint::spin_loop();
        }
    }
}
