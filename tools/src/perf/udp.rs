//! The same-run UDP baseline: plain UDP datagrams of the RoCEv2 wire size between the
//! same addresses, moved the fastest way this kernel offers, so that every `rnic perf`
//! figure has its ceiling measured next to it.
//!
//! - bandwidth: UDP GSO on send (`UDP_SEGMENT`, up to 64 datagrams per system call,
//!   several such messages per `sendmmsg`) and UDP GRO on receive (`recvmmsg` of
//!   coalesced buffers); without GSO, `sendmmsg` of single datagrams.
//! - latency: ping-pong with both sides busy polling a non-blocking socket (no sleeping
//!   in the kernel, no wake-up across CPUs).

use rnic_core::sys;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// How the bandwidth baseline moved its datagrams.
pub fn bw_method(gso: bool, gro: bool) -> String {
    let send = if gso { "UDP GSO send (UDP_SEGMENT, sendmmsg)" } else { "sendmmsg" };
    let recv = if gro { "GRO receive (UDP_GRO, recvmmsg)" } else { "recvmmsg" };
    format!("{send} + {recv}")
}

/// How the latency baseline moved its datagrams.
pub const LAT_METHOD: &str = "ping-pong, both sides busy polling non-blocking sockets";

/// A UDP socket on `ip` (ephemeral port) with big buffers, DF set like the transport's.
pub fn bind(ip: IpAddr) -> io::Result<UdpSocket> {
    let domain = if ip.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_recv_buffer_size(8 << 20)?;
    s.set_send_buffer_size(8 << 20)?;
    if ip.is_ipv4() {
        sys::set_pmtudisc_do(&s)?;
    }
    s.bind(&SocketAddr::new(ip, 0).into())?;
    Ok(s.into())
}

/// What the receiving side of the bandwidth baseline measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SinkResult {
    /// Datagrams received.
    pub datagrams: u64,
    /// Seconds from the end of the first receive to the end of the last.
    pub secs: f64,
    /// Datagrams counted in that interval (those of the first receive excluded).
    pub timed: u64,
}

/// Receives datagrams with GRO (when the kernel has it) until `expect` arrived or none
/// came for `idle`. Returns the count and the receive-side rate's interval.
pub fn sink(sock: &UdpSocket, expect: u64, idle: Duration) -> io::Result<(SinkResult, bool)> {
    let gro = sys::set_udp_gro(sock, true).is_ok();
    sock.set_read_timeout(Some(idle))?;
    const N: usize = 32;
    let mut bufs: Vec<Vec<u8>> = (0..N).map(|_| vec![0u8; 65_536]).collect();
    let mut meta = vec![sys::RecvMeta::default(); N];
    let mut scratch = sys::RecvScratch::new(N);
    let mut got = 0u64;
    let mut first: Option<(Instant, u64)> = None;
    let mut last = Instant::now();
    let start = Instant::now();
    while got < expect {
        match sys::recv_msgs(sock, &mut scratch, &mut bufs, &mut meta, true) {
            Ok(n) => {
                for m in &meta[..n] {
                    got += if m.segment > 0 { m.len.div_ceil(m.segment) as u64 } else { 1 };
                }
                last = Instant::now();
                if first.is_none() {
                    first = Some((last, got));
                }
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                if first.is_some() || start.elapsed() > Duration::from_secs(10) {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let (t0, c0) = first.unwrap_or((last, got));
    Ok((SinkResult { datagrams: got, secs: last.duration_since(t0).as_secs_f64(), timed: got - c0 }, gro))
}

/// Sends `count` datagrams of `size` bytes to `dst` as fast as the kernel takes them;
/// returns whether GSO was used.
pub fn source(sock: &UdpSocket, dst: SocketAddr, size: usize, count: u64) -> io::Result<bool> {
    let size = size.clamp(1, sys::MAX_UDP_PAYLOAD);
    let gso = sys::udp_segment_supported(sock);
    let per_msg = if gso { sys::MAX_GSO_SEGMENTS.min(sys::MAX_UDP_PAYLOAD / size).max(1) } else { 1 };
    let buf: Vec<u8> = (0..size * per_msg).map(|i| u8::try_from(i % 251).unwrap_or(0)).collect();
    const MSGS: usize = 16;
    let mut left = count;
    while left > 0 {
        // Full messages of `per_msg` datagrams, then one shorter message for the rest.
        let mut slices: Vec<[sys::IoVec<'_>; 1]> = Vec::with_capacity(MSGS);
        let mut segs = Vec::with_capacity(MSGS);
        let mut planned = 0u64;
        while slices.len() < MSGS && planned < left {
            let k = usize::try_from((left - planned).min(per_msg as u64)).unwrap_or(per_msg);
            slices.push([sys::IoVec::new(&buf[..k * size])]);
            segs.push(k);
            planned += k as u64;
        }
        let msgs: Vec<sys::OutMsg<'_>> = slices
            .iter()
            .zip(&segs)
            .map(|(s, &k)| sys::OutMsg {
                dst,
                parts: s,
                segment: if gso && k > 1 { u16::try_from(size).unwrap_or(0) } else { 0 },
            })
            .collect();
        match sys::send_msgs(sock, &msgs) {
            Ok(n) => left -= segs[..n].iter().map(|&k| k as u64).sum::<u64>(),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN | libc::EINTR)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(gso)
}

/// The answering side of the latency baseline: echoes every datagram until one of a
/// single byte (the stop signal) arrives; busy polls.
pub fn pong(sock: &UdpSocket, deadline: Duration) -> io::Result<u64> {
    sock.set_nonblocking(true)?;
    let mut buf = vec![0u8; 65_536];
    let mut n = 0u64;
    let start = Instant::now();
    loop {
        match sock.recv_from(&mut buf) {
            Ok((1, _)) => return Ok(n),
            Ok((len, from)) => {
                send_spin(sock, &buf[..len], from)?;
                n += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if start.elapsed() > deadline {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "no stop signal from the pinging side"));
                }
                std::hint::spin_loop();
            }
            Err(e) => return Err(e),
        }
    }
}

fn send_spin(sock: &UdpSocket, data: &[u8], to: SocketAddr) -> io::Result<()> {
    loop {
        match sock.send_to(data, to) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
}

/// The measuring side of the latency baseline: `iters` round trips of `size`-byte
/// datagrams (or as many as fit in `duration`), busy polling; returns each round trip.
pub fn ping(
    sock: &UdpSocket,
    dst: SocketAddr,
    size: usize,
    iters: u64,
    duration: Option<Duration>,
) -> io::Result<Vec<Duration>> {
    sock.set_nonblocking(true)?;
    let size = size.clamp(2, sys::MAX_UDP_PAYLOAD);
    let mut out = vec![0u8; size];
    let mut inb = vec![0u8; 65_536];
    let mut rtts = Vec::with_capacity(usize::try_from(iters.min(1 << 24)).unwrap_or(1 << 20));
    let start = Instant::now();
    let mut i = 0u64;
    loop {
        match duration {
            Some(d) if start.elapsed() >= d => break,
            None if i >= iters => break,
            _ => {}
        }
        out[0] = i.to_le_bytes()[0];
        let t = Instant::now();
        send_spin(sock, &out, dst)?;
        loop {
            match sock.recv_from(&mut inb) {
                Ok((len, _)) if len == size && inb[0] == out[0] => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if t.elapsed() > Duration::from_secs(5) {
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "UDP ping lost (no answer in 5 s)"));
                    }
                    std::hint::spin_loop();
                }
                Err(e) => return Err(e),
            }
        }
        rtts.push(t.elapsed());
        i += 1;
    }
    send_spin(sock, &[0], dst)?;
    Ok(rtts)
}
