//! The same-run UDP baseline: plain UDP datagrams of the RoCEv2 wire size between the
//! same addresses, moved the fastest way this kernel offers at rnic's GSO size (64
//! segments, below), so that every `rnic perf` figure has its ceiling measured next to it.
//!
//! - bandwidth: UDP GSO on send (`UDP_SEGMENT`, up to 64 datagrams per system call,
//!   several such messages per `sendmmsg`) and UDP GRO on receive (`recvmmsg` of
//!   coalesced buffers); without GSO, `sendmmsg` of single datagrams. 64 segments is what
//!   rnic's transport sends and every UDP GSO kernel accepts; kernels that accept 128 move
//!   small datagrams faster with 128 (README, Benchmarks).
//! - latency: ping-pong with both sides busy polling a non-blocking socket (no sleeping
//!   in the kernel, no wake-up across CPUs).

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

/// How the bandwidth baseline in rnic's packet shape (`--roce-shape`) moved its
/// datagrams: `lens`, one message's packets.
pub fn shaped_bw_method(gso: bool, gro: bool, lens: &[usize]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &l in lens {
        match runs.last_mut() {
            Some((len, k)) if *len == l => *k += 1,
            _ => runs.push((l, 1)),
        }
    }
    let shape: Vec<String> =
        runs.iter().map(|&(l, k)| if k > 1 { format!("{k}x{l}") } else { l.to_string() }).collect();
    format!("{}, in rnic's packet shape: {} bytes per message", bw_method(gso, gro), shape.join(" + "))
}

/// How the latency baseline moved its datagrams.
pub const LAT_METHOD: &str = "ping-pong, both sides busy polling non-blocking sockets";

/// The wire size of an RC ACK (BTH, AETH, ICRC): what rides with each answer of an rnic
/// ping-pong (its held acknowledgement of the peer's message).
pub const ACK_WIRE: usize = 20;

/// How a latency baseline hop looks to the kernel: one datagram (`sendto`/`recvfrom`,
/// the fastest UDP round trip), or rnic's shape (`--roce-shape`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// With the shape, the ACK-sized datagram after each `wire`-byte one (0: plain).
    ack: usize,
}

impl Shape {
    /// Plain, or rnic's shape for `wire`-byte packets: the packet and an ACK-sized
    /// datagram (at most the packet's size, as UDP GSO requires of a last segment) in one
    /// GSO `sendmsg`, received by `recvmsg` with GRO, TOS and timestamps on.
    pub fn new(roce: bool, wire: usize) -> Shape {
        Shape { ack: if roce { ACK_WIRE.min(wire) } else { 0 } }
    }

    /// What the baseline did, for the report.
    pub fn method(self) -> &'static str {
        if self.ack == 0 {
            LAT_METHOD
        } else {
            "ping-pong in rnic's shape: each hop one UDP GSO sendmsg of the packet and a 20-byte ACK, \
             recvmsg with GRO, TOS and timestamp control messages; both sides busy polling"
        }
    }
}

/// One side's socket and buffers for a latency hop of either shape.
struct Hop<'a> {
    sock: &'a UdpSocket,
    shape: Shape,
    scratch: rnic_io::SendScratch,
    rscratch: rnic_io::RecvScratch,
    bufs: Vec<Vec<u8>>,
    meta: Vec<rnic_io::RecvMeta>,
    /// The packet and the ACK behind it, built here for each send (no allocation).
    pair: Vec<u8>,
}

impl<'a> Hop<'a> {
    fn new(sock: &'a UdpSocket, shape: Shape) -> io::Result<Hop<'a>> {
        sock.set_nonblocking(true)?;
        if shape.ack > 0 {
            // What the UDP transport turns on for its socket (transport/udp.rs `bind`).
            let v6 = sock.local_addr()?.is_ipv6();
            rnic_io::set_udp_gro(sock, true)?;
            rnic_io::set_recv_tos(sock, v6)?;
            rnic_io::set_rx_timestamps(sock)?;
        }
        Ok(Hop {
            sock,
            shape,
            scratch: rnic_io::SendScratch::default(),
            rscratch: rnic_io::RecvScratch::new(1),
            bufs: vec![vec![0u8; 65_536]],
            meta: vec![rnic_io::RecvMeta::default()],
            pair: Vec::with_capacity(65_536),
        })
    }

    /// Sends `data` (with the ACK-sized datagram behind it in rnic's shape).
    fn send(&mut self, data: &[u8], to: SocketAddr) -> io::Result<()> {
        send_shaped(self.sock, self.shape, &mut self.scratch, &mut self.pair, data, to)
    }

    /// Sends back the first `n` bytes [`recv`](Self::recv) took, from the receive buffer.
    fn echo(&mut self, n: usize, to: SocketAddr) -> io::Result<()> {
        send_shaped(self.sock, self.shape, &mut self.scratch, &mut self.pair, &self.bufs[0][..n], to)
    }

    /// One receive: the length of the first datagram and who sent it (`WouldBlock` when
    /// nothing is there); its bytes are [`received`](Self::received). In rnic's shape the
    /// ACK-sized segment behind it is dropped, as the engine would consume it.
    fn recv(&mut self) -> io::Result<(usize, SocketAddr)> {
        if self.shape.ack == 0 {
            return self.sock.recv_from(&mut self.bufs[0]);
        }
        rnic_io::recv_msgs(self.sock, &mut self.rscratch, &mut self.bufs[..1], &mut self.meta[..1], false)?;
        let m = self.meta[0];
        Ok((if m.segment > 0 { m.segment.min(m.len) } else { m.len }, m.src))
    }

    /// The first `n` bytes the last [`recv`](Self::recv) took.
    fn received(&self, n: usize) -> &[u8] {
        &self.bufs[0][..n]
    }
}

/// Sends `data` plainly, or in rnic's shape: in one GSO `sendmsg` with `shape`'s ACK-sized
/// datagram behind it (built in `pair`, no allocation).
fn send_shaped(
    sock: &UdpSocket,
    shape: Shape,
    scratch: &mut rnic_io::SendScratch,
    pair: &mut Vec<u8>,
    data: &[u8],
    to: SocketAddr,
) -> io::Result<()> {
    if shape.ack == 0 || data.len() < shape.ack || data.len() > usize::from(u16::MAX) {
        return send_spin(sock, data, to);
    }
    pair.clear();
    pair.extend_from_slice(data);
    pair.resize(data.len() + shape.ack, 0);
    let parts = [rnic_io::IoVec::new(pair)];
    let msg = rnic_io::OutMsg { dst: to, parts: &parts, segment: u16::try_from(data.len()).unwrap_or(u16::MAX) };
    loop {
        match rnic_io::send_msgs_with(sock, scratch, std::slice::from_ref(&msg)) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
}

/// A UDP socket on `ip` (ephemeral port) with big buffers, DF set like the transport's.
pub fn bind(ip: IpAddr) -> io::Result<UdpSocket> {
    let domain = if ip.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_recv_buffer_size(8 << 20)?;
    s.set_send_buffer_size(8 << 20)?;
    if ip.is_ipv4() {
        rnic_io::set_pmtudisc_do(&s)?;
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
    let gro = rnic_io::set_udp_gro(sock, true).is_ok();
    sock.set_read_timeout(Some(idle))?;
    const N: usize = 32;
    let mut bufs: Vec<Vec<u8>> = (0..N).map(|_| vec![0u8; 65_536]).collect();
    let mut meta = vec![rnic_io::RecvMeta::default(); N];
    let mut scratch = rnic_io::RecvScratch::new(N);
    let mut got = 0u64;
    let mut first: Option<(Instant, u64)> = None;
    let mut last = Instant::now();
    let start = Instant::now();
    while got < expect {
        match rnic_io::recv_msgs(sock, &mut scratch, &mut bufs, &mut meta, true) {
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

/// Sends `count` datagrams to `dst` as fast as the kernel takes them; returns whether
/// GSO was used. The datagrams have the lengths of `lens`, over and over: one length for
/// the plain baseline (datagrams of the mean packet size), or an RDMA message's packets
/// (`--roce-shape`). Consecutive datagrams go in one UDP GSO message as rnic's transport
/// groups packets ([`rnic_io::run_end`]: equal lengths, the last may be shorter,
/// at most 64 and 64 KiB), up to 16 such messages per `sendmmsg`.
pub fn source(sock: &UdpSocket, dst: SocketAddr, lens: &[usize], count: u64) -> io::Result<bool> {
    let lens: Vec<usize> = lens.iter().map(|&l| l.clamp(1, rnic_io::MAX_UDP_PAYLOAD)).collect();
    if lens.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no datagram lengths"));
    }
    let gso = rnic_io::udp_segment_supported(sock);
    let buf: Vec<u8> = (0..rnic_io::MAX_UDP_PAYLOAD).map(|i| u8::try_from(i % 251).unwrap_or(0)).collect();
    const MSGS: usize = 16;
    // The next datagrams' lengths from position `at` of the repeated list, as many as a
    // GSO message can hold.
    let mut window = Vec::with_capacity(rnic_io::MAX_GSO_SEGMENTS + 1);
    let mut at = 0usize;
    let mut left = count;
    while left > 0 {
        let mut slices: Vec<[rnic_io::IoVec<'_>; 1]> = Vec::with_capacity(MSGS);
        let mut segs: Vec<(u64, usize)> = Vec::with_capacity(MSGS);
        let mut planned = 0u64;
        let mut pos = at;
        while slices.len() < MSGS && planned < left {
            window.clear();
            let room = usize::try_from(left - planned).unwrap_or(usize::MAX).min(rnic_io::MAX_GSO_SEGMENTS + 1);
            window.extend((0..room).map(|k| lens[(pos + k) % lens.len()]));
            let k = if gso { rnic_io::run_end(&window, 0, |_, _| true).min(room) } else { 1 };
            let bytes: usize = window[..k].iter().sum();
            slices.push([rnic_io::IoVec::new(&buf[..bytes])]);
            segs.push((k as u64, if gso && k > 1 { window[0] } else { 0 }));
            planned += k as u64;
            pos = (pos + k) % lens.len();
        }
        let msgs: Vec<rnic_io::OutMsg<'_>> = slices
            .iter()
            .zip(&segs)
            .map(|(s, &(_, seg))| rnic_io::OutMsg { dst, parts: s, segment: u16::try_from(seg).unwrap_or(0) })
            .collect();
        let sent: u64 = match rnic_io::send_msgs(sock, &msgs) {
            Ok(n) => segs[..n].iter().map(|&(k, _)| k).sum(),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN | libc::EINTR)) => 0,
            Err(e) => return Err(e),
        };
        left -= sent;
        // The length pattern resumes after what went out.
        at = (at + usize::try_from(sent % lens.len() as u64).unwrap_or(0)) % lens.len();
    }
    Ok(gso)
}

/// The answering side of the latency baseline: echoes every datagram until one of a
/// single byte (the stop signal) arrives; busy polls.
pub fn pong(sock: &UdpSocket, deadline: Duration, shape: Shape) -> io::Result<u64> {
    let mut hop = Hop::new(sock, shape)?;
    let mut n = 0u64;
    let start = Instant::now();
    loop {
        match hop.recv() {
            Ok((1, _)) => return Ok(n),
            Ok((len, _)) if shape.ack > 0 && len == shape.ack && hop.received(len).iter().all(|&b| b == 0) => {
                // A lone ACK-sized datagram (a kernel without GRO split the pair): the
                // engine would consume it; nothing to answer.
            }
            Ok((len, from)) => {
                hop.echo(len, from)?;
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
    shape: Shape,
) -> io::Result<Vec<Duration>> {
    let mut hop = Hop::new(sock, shape)?;
    let size = size.clamp(2, rnic_io::MAX_UDP_PAYLOAD - ACK_WIRE);
    // Never all zeros: a pong in rnic's shape tells a lone ACK-sized datagram by that.
    let mut out = vec![0xa5u8; size];
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
        hop.send(&out, dst)?;
        loop {
            match hop.recv() {
                Ok((len, _)) if len == size && hop.received(len)[0] == out[0] => break,
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
