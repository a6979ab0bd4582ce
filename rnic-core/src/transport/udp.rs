//! The UDP transport: RoCEv2 packets as UDP datagrams to port 4791 of the peer's
//! address, the kernel building the IP and UDP headers. Batches go out in `sendmmsg`
//! calls, runs of equal-size packets as one UDP GSO send (segment *i* gets IPv4 ID *i*,
//! its ICRC filled for that ID); receives take GRO batches with `recvmmsg` and cut them
//! at their segment size. A UDP socket cannot see the IP header: the ICRC of a received
//! packet is checked against the IDs this transport's senders use (and, for other peers,
//! solved; see `shared/notes/icrc-over-udp-sockets.md`).

use super::{Transport, RX_BATCH};
use crate::capture::Capture;
use crate::config::{CongestionControl, DeviceConfig, DeviceError, TransportInfo, SOCKET_BUFFER};
use crate::counters::Counters;
use crate::engine::{Engine, TxPacket};
use crate::faults::Wire;
use crate::Time;
use rnic_wire::icrc::{IcrcContext, Ipv4IdPolicy};
use rnic_wire::ROCEV2_UDP_PORT;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The UDP transport of one device.
pub(crate) struct Udp {
    pub(crate) tx: Tx,
    pub(crate) rx: Rx,
}

impl Udp {
    /// The transport over `sock` (bound by [`bind`]).
    pub(crate) fn new(
        config: &DeviceConfig,
        sock: UdpSocket,
        info: TransportInfo,
        capture: Option<Arc<Capture>>,
        counters: Arc<Counters>,
        share: Option<super::share::Share>,
    ) -> io::Result<Udp> {
        let local = sock.local_addr()?;
        let tos = if config.congestion_control == CongestionControl::Off { 0 } else { rnic_io::ECN_ECT0 };
        let tx = Tx::new(sock.try_clone()?, local, info.gso, capture.clone(), tos);
        let groups = super::groups::Groups::new(local)?;
        Ok(Udp { tx, rx: Rx::new(sock, local, counters, capture, config.ipv4_id, share, groups) })
    }
}

impl Transport for Udp {
    fn send(&mut self, _now: Time, batch: &mut [TxPacket], counters: &Counters) {
        self.tx.send(batch, counters);
    }
    fn release(&mut self, _now: Time, _counters: &Counters) {}
    fn next_due(&self) -> Option<Time> {
        self.rx.share.as_ref().and_then(super::share::Share::check_due)
    }
    fn maintain(&mut self, now: Time, engine: &mut Engine) {
        if let Some(s) = &mut self.rx.share {
            for m in s.departed(now) {
                engine.cm().member_gone(now, m);
            }
        }
    }
    fn recv(&mut self, max: usize) -> usize {
        self.rx.recv(max)
    }
    fn deliver(&mut self, i: usize, engine: &mut Engine, now: u64) -> usize {
        self.rx.deliver(i, engine, now)
    }
    fn wake_fds(&self) -> io::Result<Vec<OwnedFd>> {
        let mut fds = vec![self.rx.sock.as_fd().try_clone_to_owned()?, self.rx.groups.wake_fd()?];
        if let Some(s) = &self.rx.share {
            fds.push(s.inbox_fd()?);
        }
        Ok(fds)
    }
    fn flush(&self) {
        if let Some(c) = &self.tx.capture {
            c.flush();
        }
    }
    fn put(&mut self, _now: Time, w: Wire, counters: &Counters) {
        self.tx.put(&w.data, w.dst, w.ce, counters);
    }
    fn local_ip(&self, _dst: IpAddr) -> IpAddr {
        self.tx.local.ip()
    }
    fn join(&mut self, group: IpAddr) -> io::Result<()> {
        self.rx.groups.join(group)
    }
    fn leave(&mut self, group: IpAddr) {
        self.rx.groups.leave(group);
    }
    fn src_port(&self, _p: &TxPacket) -> u16 {
        // Every datagram leaves from the socket's port.
        self.tx.local.port()
    }
}

pub(crate) fn bind(config: &DeviceConfig) -> Result<UdpSocket, DeviceError> {
    let addr = SocketAddr::new(config.ip, config.port);
    let err = |source| DeviceError::Bind { name: config.name.clone(), addr, source };
    let domain = if config.ip.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)).map_err(err)?;
    // Every process that opens the device binds its address and port: one reuseport
    // group, its datagrams steered to the owner of their QP (`share`).
    rnic_io::set_reuseport(&s).map_err(err)?;
    s.set_recv_buffer_size(8 << 20).map_err(err)?;
    s.set_send_buffer_size(8 << 20).map_err(err)?;
    // UDP has no flow control: a receive buffer that holds a burst of many QPs' windows
    // saves retransmissions. Above rmem_max only with CAP_NET_ADMIN; else 8 MiB stays.
    let _ = rnic_io::force_buffers(&s, SOCKET_BUFFER);
    if config.ip.is_ipv4() {
        // IPv4 ID 0 and DF on every datagram, so the ICRC is computable at both ends.
        rnic_io::set_pmtudisc_do(&s).map_err(err)?;
    }
    // ECN: each datagram's TOS comes with it (CE marks count at the notification point),
    // and with congestion control on, what this device sends is ECN-capable (ECT(0)), as
    // a RoCE NIC marks its packets for the switches.
    rnic_io::set_recv_tos(&s, config.ip.is_ipv6()).map_err(err)?;
    // The kernel's receive time of each datagram: how long it waited for this device.
    rnic_io::set_rx_timestamps(&s).map_err(err)?;
    if config.congestion_control != CongestionControl::Off {
        rnic_io::set_tos(&s, config.ip.is_ipv6(), rnic_io::ECN_ECT0).map_err(err)?;
    }
    // Datagrams to a multicast group (a UD send to a multicast GID) leave on the device's
    // interface, with the TTL the receiver's rebuilt GRH area assumes (`engine::ud`), and
    // are looped back to this host's members (other processes of this device included;
    // see `groups`).
    match config.ip {
        IpAddr::V4(ip) => {
            s.set_multicast_if_v4(&ip).map_err(err)?;
            s.set_multicast_ttl_v4(64).map_err(err)?;
            s.set_multicast_loop_v4(true).map_err(err)?;
        }
        IpAddr::V6(_) => {
            if let Some(index) = rnic_io::interface_index_of(config.ip) {
                s.set_multicast_if_v6(index).map_err(err)?;
            }
            s.set_multicast_hops_v6(64).map_err(err)?;
            s.set_multicast_loop_v6(true).map_err(err)?;
        }
    }
    s.bind(&addr.into()).map_err(err)?;
    let u: UdpSocket = s.into();
    u.set_read_timeout(Some(Duration::from_millis(50))).map_err(err)?;
    Ok(u)
}

/// Detects UDP GSO and turns GRO on, as far as the configuration and the kernel allow.
pub(crate) fn transport_info(config: &DeviceConfig, sock: &UdpSocket) -> TransportInfo {
    let gso = config.gso && rnic_io::udp_segment_supported(sock);
    let gro = config.gro && rnic_io::set_udp_gro(sock, true).is_ok();
    TransportInfo { gso, gro, spin: config.spin, raw: false }
}

/// A datagram that waited in the socket queue longer than this counts as
/// congestion-experienced: the receiver is not keeping up (descheduled, or fed faster than
/// it processes), as a switch queue that long would have marked it.
const RX_CE_WAIT_NS: u64 = 1_000_000;

/// One receive buffer: room for the largest GRO batch (64 KiB of datagrams).
const RX_BUF: usize = 65_536;
/// Messages per `sendmmsg` (the kernel takes at most UIO_MAXIOV = 1024).
const TX_MSGS: usize = 512;

/// The sending half of the UDP transport (owned by the progress thread).
pub(crate) struct Tx {
    sock: UdpSocket,
    local: SocketAddr,
    /// UDP GSO in use (turned off for good if the kernel refuses a GSO send).
    gso: bool,
    capture: Option<Arc<Capture>>,
    /// The messages of the current send.
    parts: Vec<Span>,
    /// Small pieces of the current send copied together (see `send_from`).
    glue: Vec<u8>,
    /// The current send's iovecs, in order: glued bytes or a packet's piece.
    plan: Vec<Piece>,
    /// Pseudo-header CRC states of recent flows and lengths.
    icrc: rnic_wire::icrc::IcrcCache,
    /// `sendmmsg` headers, packet lengths and message starts, kept between sends.
    scratch: rnic_io::SendScratch,
    lens: Vec<usize>,
    msg_first: Vec<usize>,
    /// The allocations of the current send's iovec and message lists, kept empty
    /// between sends (see [`reuse`]).
    iovs: Vec<rnic_io::IoVec<'static>>,
    msgs: Vec<rnic_io::OutMsg<'static>>,
    /// The socket's TOS byte (ECT(0) with congestion control), restored after a packet a
    /// fault rule marked CE.
    tos: u8,
}

/// An empty vector with `v`'s allocation, for elements that borrow for another
/// lifetime: a send's iovecs borrow its packets, so the list cannot be kept between
/// sends, but its allocation can (the in-place `collect` of an empty iterator keeps it;
/// the closure never runs). Saves two allocations per send on the latency path.
fn reuse<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter().map(|_| unreachable!("the vector was cleared")).collect()
}

/// Whether two packets (BTH first) go to QPs of the same sharing process.
fn same_member(a: &[u8], b: &[u8]) -> bool {
    let m = |p: &[u8]| p.get(5).map(|b| b >> 2);
    m(a) == m(b)
}

/// Pieces this small are copied into one iovec with their neighbours.
const GLUE_MAX: usize = 128;

/// One iovec of a send: `glue[a..e]`, piece `j` of packet `k`, or bytes `a..e` of
/// train `k`'s buffer.
#[derive(Debug, Clone, Copy)]
enum Piece {
    Glue(usize, usize),
    Packet(usize, usize),
    Train(usize, usize, usize),
}

/// One message of a send: packets `first..end` of the batch (one packet, a GSO run of
/// them, or one train: a GSO send of its packets); or, with `lone` > 0, packet `lone - 1`
/// of train `first` alone (GSO off).
#[derive(Debug, Clone, Copy)]
struct Span {
    first: usize,
    end: usize,
    lone: u16,
}

impl Span {
    /// The packets the message carries.
    fn packets(self, batch: &[TxPacket]) -> usize {
        match (self.lone, batch[self.first].train) {
            (0, t) if t > 1 => usize::from(t),
            (0, _) => self.end - self.first,
            _ => 1,
        }
    }

    /// The GSO segment size of the message (0: one datagram).
    fn segment(self, batch: &[TxPacket], lens: &[usize]) -> u16 {
        let seg = match (self.lone, batch[self.first].train) {
            (0, t) if t > 1 => batch[self.first].seg_len(),
            (0, _) if self.end - self.first > 1 => lens[self.first],
            _ => 0,
        };
        u16::try_from(seg).unwrap_or(0)
    }

    /// A train's message: which of its packets it carries (all, or the lone one).
    fn train_packets(self, batch: &[TxPacket]) -> std::ops::Range<usize> {
        match self.lone {
            0 => 0..usize::from(batch[self.first].train),
            l => usize::from(l - 1)..usize::from(l),
        }
    }

    /// The message's packets in order: (packet index, byte range in its `data` when it
    /// is a train's, IPv4 ID).
    fn wire(self, batch: &[TxPacket]) -> impl Iterator<Item = (usize, Option<std::ops::Range<usize>>, u16)> + '_ {
        let p = &batch[self.first];
        let seg = p.seg_len();
        let (trains, singles) =
            if p.train > 1 { (self.train_packets(batch), 0..0) } else { (0..0, self.first..self.end) };
        let gso = self.lone == 0;
        let run = singles.len();
        let id = |i: usize, many: bool| if many { u16::try_from(i).unwrap_or(0) } else { 0 };
        trains
            .map(move |j| (self.first, Some(j * seg..(j + 1) * seg), id(j, gso)))
            .chain(singles.enumerate().map(move |(i, k)| (k, None, id(i, run > 1))))
    }
}

fn gso_refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOPROTOOPT))
}

impl Tx {
    /// The sending half over `sock` (bound at `local`), with GSO or not, its capture and
    /// the socket's TOS byte.
    fn new(sock: UdpSocket, local: SocketAddr, gso: bool, capture: Option<Arc<Capture>>, tos: u8) -> Tx {
        Tx {
            sock,
            local,
            gso,
            capture,
            parts: Vec::new(),
            glue: Vec::new(),
            plan: Vec::new(),
            icrc: rnic_wire::icrc::IcrcCache::new(),
            scratch: rnic_io::SendScratch::default(),
            lens: Vec::new(),
            msg_first: Vec::new(),
            iovs: Vec::new(),
            msgs: Vec::new(),
            tos,
        }
    }

    /// Sends a batch with as few system calls as the kernel allows: runs of equal-size
    /// packets to one destination become one UDP GSO message (segment *i* gets IPv4 ID
    /// *i*, so its ICRC is filled for that ID), and all messages go in `sendmmsg` calls.
    /// Without GSO every packet is its own message, ID 0 (unconnected socket,
    /// `IP_PMTUDISC_DO`: see `shared/notes/icrc-over-udp-sockets.md`).
    fn send(&mut self, batch: &mut [TxPacket], counters: &Counters) {
        let mut start = 0;
        while start < batch.len() {
            start = self.send_from(batch, start, counters);
        }
    }

    /// Sends one packet; `ce`: with ECN congestion-experienced in its IP header (a fault
    /// rule playing a congested switch), the socket's TOS set for it alone.
    fn put(&self, data: &[u8], dst: IpAddr, ce: bool, counters: &Counters) {
        if let Some(c) = &self.capture {
            c.record(self.local.ip(), dst, self.local.port(), ROCEV2_UDP_PORT, data);
        }
        let v6 = self.local.is_ipv6();
        if ce && rnic_io::set_tos(&self.sock, v6, self.tos | rnic_io::ECN_CE).is_err() {
            counters.send_err.fetch_add(1, Ordering::Relaxed);
        }
        if self.sock.send_to(data, SocketAddr::new(dst, ROCEV2_UDP_PORT)).is_err() {
            counters.send_err.fetch_add(1, Ordering::Relaxed);
        }
        if ce && rnic_io::set_tos(&self.sock, v6, self.tos).is_err() {
            counters.send_err.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sends `batch[start..]`; returns where to resume (the end, or the first packet of a
    /// GSO message the kernel refused, to be sent again without GSO).
    fn send_from(&mut self, batch: &mut [TxPacket], start: usize, counters: &Counters) -> usize {
        let mut lens = std::mem::take(&mut self.lens);
        lens.clear();
        lens.extend(batch.iter().map(TxPacket::len));
        self.parts.clear();
        let mut i = start;
        while i < batch.len() {
            let ctx0 = IcrcContext::new(self.local.ip(), batch[i].dst, self.local.port(), ROCEV2_UDP_PORT);
            let train = batch[i].train;
            if train > 1 {
                // A train (small packets built back to back) is one GSO send, packet j
                // with IPv4 ID j; without GSO, a datagram per packet, each ID 0.
                // One pseudo-header state for the train (`icrc_fold`).
                let seg = batch[i].seg_len();
                let filled = self
                    .icrc
                    .prefix_state(&ctx0, seg)
                    .and_then(|prefix| crate::icrc_fold::fill_train(prefix, &mut batch[i].data, seg, self.gso));
                if filled.is_err() {
                    counters.send_err.fetch_add(u64::from(train), Ordering::Relaxed);
                }
                if self.gso {
                    self.parts.push(Span { first: i, end: i + 1, lone: 0 });
                } else {
                    self.parts.extend((1..=train).map(|lone| Span { first: i, end: i + 1, lone }));
                }
                i += 1;
                continue;
            }
            // A GSO send reaches one socket of the peer's group: a run takes packets for
            // QPs of one process of the peer device (`share`); a train goes alone.
            let end = if self.gso {
                rnic_io::run_end(&lens, i, |a, b| {
                    batch[b].train <= 1 && batch[a].dst == batch[b].dst && same_member(&batch[a].data, &batch[b].data)
                })
            } else {
                i + 1
            };
            let run = end - i;
            for (k, p) in batch[i..end].iter_mut().enumerate() {
                let ident = if run > 1 { u16::try_from(k).unwrap_or(0) } else { 0 };
                // (A run has one destination: `ctx0`'s.)
                let ctx = IcrcContext { ipv4_ident: ident, ..ctx0 };
                if p.fill_icrc(&mut self.icrc, &ctx).is_err() {
                    counters.send_err.fetch_add(1, Ordering::Relaxed);
                }
            }
            self.parts.push(Span { first: i, end, lone: 0 });
            i = end;
        }
        // Each packet is one piece, or three (headers, payload in registered memory, pad
        // and ICRC). Small pieces next to each other in a message (one packet's pad and
        // ICRC and the next one's headers; whole ACKs and small packets) are copied
        // together into `glue`: 64 one-piece SENDs of 64 bytes in one iovec instead of
        // 64 made `send_bw -s 64` ~15% faster (A/B runs); for 4 KiB segments the iovec
        // count made no difference. A train is already one piece.
        let mut glue = std::mem::take(&mut self.glue);
        let mut plan = std::mem::take(&mut self.plan);
        glue.clear();
        plan.clear();
        let mut msg_first = std::mem::take(&mut self.msg_first);
        msg_first.clear();
        for &sp in &self.parts {
            let (a, e) = (sp.first, sp.end);
            msg_first.push(plan.len());
            if batch[a].train > 1 {
                let (seg, k) = (batch[a].seg_len(), sp.train_packets(batch));
                plan.push(Piece::Train(a, k.start * seg, k.end * seg));
                continue;
            }
            let mut open: Option<usize> = None;
            for (k, p) in batch.iter().enumerate().take(e).skip(a) {
                for (j, x) in p.parts().into_iter().enumerate() {
                    if x.is_empty() {
                        continue;
                    }
                    if x.len() <= GLUE_MAX {
                        open.get_or_insert(glue.len());
                        x.extend_vec(&mut glue);
                    } else {
                        if let Some(o) = open.take() {
                            plan.push(Piece::Glue(o, glue.len()));
                        }
                        plan.push(Piece::Packet(k, j));
                    }
                }
            }
            if let Some(o) = open.take() {
                plan.push(Piece::Glue(o, glue.len()));
            }
        }
        msg_first.push(plan.len());
        let mut slices: Vec<rnic_io::IoVec<'_>> = reuse(std::mem::take(&mut self.iovs));
        slices.extend(plan.iter().map(|&piece| match piece {
            Piece::Glue(a, e) => rnic_io::IoVec::new(&glue[a..e]),
            Piece::Packet(k, j) => batch[k].parts()[j].io_vec(),
            Piece::Train(k, a, e) => rnic_io::IoVec::new(&batch[k].data[a..e]),
        }));
        let mut msgs: Vec<rnic_io::OutMsg<'_>> = reuse(std::mem::take(&mut self.msgs));
        msgs.extend(self.parts.iter().zip(msg_first.windows(2)).map(|(&sp, w)| rnic_io::OutMsg {
            dst: SocketAddr::new(batch[sp.first].dst, ROCEV2_UDP_PORT),
            parts: &slices[w[0]..w[1]],
            segment: sp.segment(batch, &lens),
        }));
        // The capture copies each packet before it is sent: a payload lent from registered
        // memory can change once the peer has it (its completion lets the owner write
        // there), and a copy taken after the send could then disagree with its ICRC.
        let snap: Vec<Vec<u8>> = match &self.capture {
            Some(_) => batch.iter().map(TxPacket::to_vec).collect(),
            None => Vec::new(),
        };
        let mut m = 0;
        let mut resume = batch.len();
        while m < msgs.len() {
            let chunk = &msgs[m..msgs.len().min(m + TX_MSGS)];
            // Causal captures: the capture is held (and its timestamp taken) before the
            // system call, so the peer's answer cannot be written or stamped ahead of
            // the request it answers; the packets are recorded once the kernel says
            // which it took.
            let mut held = self.capture.as_ref().map(|c| c.hold());
            crate::hop_trace::mark(crate::hop_trace::Step::SendCalled);
            let sent = rnic_io::send_msgs_with(&self.sock, &mut self.scratch, chunk);
            crate::hop_trace::mark(crate::hop_trace::Step::Send);
            match sent {
                Ok(k) if k > 0 => {
                    for (sp, msg) in self.parts[m..m + k].iter().zip(chunk) {
                        if msg.segment > 0 {
                            counters.tx_gso_batches.fetch_add(1, Ordering::Relaxed);
                        }
                        if let Some(c) = &mut held {
                            for (k, range, id) in sp.wire(batch) {
                                let ports = (self.local.port(), ROCEV2_UDP_PORT);
                                let bytes = range.map_or(&snap[k][..], |r| &snap[k][r]);
                                c.record_ipv4_id(self.local.ip(), batch[k].dst, ports, id, bytes);
                            }
                        }
                    }
                    m += k;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if chunk[0].segment > 0 && gso_refused(&e) => {
                    // The kernel (or the route's device) does not do GSO after all:
                    // resend from this message one datagram at a time, ICRCs for ID 0.
                    self.gso = false;
                    resume = self.parts[m].first;
                    break;
                }
                _ => {
                    let lost = self.parts[m].packets(batch);
                    counters.send_err.fetch_add(u64::try_from(lost).unwrap_or(u64::MAX), Ordering::Relaxed);
                    m += 1;
                }
            }
        }
        self.msgs = reuse(msgs);
        self.iovs = reuse(slices);
        self.glue = glue;
        self.plan = plan;
        self.lens = lens;
        self.msg_first = msg_first;
        resume
    }
}

/// The receiving half of the UDP transport (owned by the progress thread).
pub(crate) struct Rx {
    sock: UdpSocket,
    local: SocketAddr,
    counters: Arc<Counters>,
    capture: Option<Arc<Capture>>,
    bufs: Vec<Vec<u8>>,
    meta: Vec<rnic_io::RecvMeta>,
    scratch: rnic_io::RecvScratch,
    verifier: crate::gso::IdVerifier,
    ipv4_id: Ipv4IdPolicy,
    /// The last receive found the queue above its threshold: what it took counts as
    /// congestion-experienced (where a switch would have marked it).
    congested: bool,
    /// Per buffer: a packet another process sharing the device received for this one,
    /// its ICRC checked there for this IPv4 ID, and how a CM MAD came (offered, decided).
    forwarded: Vec<Option<super::share::Passed>>,
    /// The multicast groups' sockets.
    groups: super::groups::Groups,
    /// Per buffer: the multicast group it was received on (its IP destination).
    group_of: Vec<Option<IpAddr>>,
    /// This process's part of a device shared with others (dropped after the socket:
    /// the last field).
    share: Option<super::share::Share>,
}

impl Rx {
    fn new(
        sock: UdpSocket,
        local: SocketAddr,
        counters: Arc<Counters>,
        capture: Option<Arc<Capture>>,
        ipv4_id: Ipv4IdPolicy,
        share: Option<super::share::Share>,
        groups: super::groups::Groups,
    ) -> Rx {
        Rx {
            sock,
            local,
            counters,
            capture,
            bufs: (0..RX_BATCH).map(|_| vec![0u8; RX_BUF]).collect(),
            meta: vec![rnic_io::RecvMeta::default(); RX_BATCH],
            scratch: rnic_io::RecvScratch::new(RX_BATCH),
            verifier: crate::gso::IdVerifier::new(),
            ipv4_id,
            congested: false,
            forwarded: vec![None; RX_BATCH],
            groups,
            group_of: vec![None; RX_BATCH],
            share,
        }
    }

    /// Takes what the socket holds: one `recvmmsg` of up to `max` datagrams, never
    /// blocking. Returns the number of datagrams, to be handed on with [`Rx::deliver`].
    fn recv(&mut self, max: usize) -> usize {
        let max = max.clamp(1, self.bufs.len());
        let mut n = self.recv_socket(max);
        self.group_of[..n].fill(None);
        if !self.groups.is_empty() && n < max {
            n += self.recv_groups(n, max);
        }
        self.forwarded[..n].fill(None);
        match &mut self.share {
            Some(s) => {
                s.tick(&self.sock, &self.counters);
                if !s.inbox_due() {
                    return n;
                }
                // What other processes passed on, into the buffers after the socket's
                // (at least one, even when the socket filled `max`).
                let mut n = n;
                while n < self.bufs.len() {
                    match s.inbox(&mut self.bufs[n], &self.sock, &self.counters) {
                        super::share::Inbound::Packet { len, src, ce, via } => {
                            self.meta[n] = rnic_io::RecvMeta { len, src, ce, ..Default::default() };
                            self.forwarded[n] = Some(via);
                            self.group_of[n] = None;
                            n += 1;
                        }
                        super::share::Inbound::Empty => break,
                    }
                }
                n
            }
            None => n,
        }
    }

    /// What the readable multicast group sockets hold, into buffers `from..max`; returns
    /// how many datagrams.
    fn recv_groups(&mut self, from: usize, max: usize) -> usize {
        let mut n = from;
        let Rx { groups, scratch, bufs, meta, group_of, counters, .. } = self;
        for (group, sock) in groups.readable() {
            if n >= max {
                break;
            }
            match rnic_io::recv_msgs(sock, scratch, &mut bufs[n..max], &mut meta[n..max], false) {
                Ok(k) => {
                    group_of[n..n + k].fill(Some(group));
                    n += k;
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                Err(_) => {
                    counters.rx_socket_err.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        n - from
    }

    /// One `recvmmsg` of up to `max` datagrams.
    fn recv_socket(&mut self, max: usize) -> usize {
        self.congested = false;
        match rnic_io::recv_msgs(&self.sock, &mut self.scratch, &mut self.bufs[..max], &mut self.meta, false) {
            Ok(n) => {
                if n > 0 {
                    crate::hop_trace::start();
                    // One clock read per receive: which datagrams waited too long.
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
                    for m in &mut self.meta[..n] {
                        if m.stamp_ns > 0 && now.saturating_sub(m.stamp_ns) > RX_CE_WAIT_NS {
                            m.ce = true;
                            self.counters.np_rx_queue_delayed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                if n == RX_BATCH {
                    // A full batch: the receiver is behind. The congestion signal of a
                    // software NIC on a host without switches is its own receive queue:
                    // above an eighth of the buffer, what this receive took counts as
                    // marked, as a switch marks packets above its queue threshold
                    // (DCQCN's K_min), so the senders slow down before the queue overflows.
                    if let Ok((queued, size)) = rnic_io::rx_backlog(&self.sock) {
                        self.congested = queued >= size / 8;
                        if self.congested {
                            self.counters.np_rx_queue_congested.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                n
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => 0,
            Err(_) => {
                // A receive the socket refused (not a packet: nothing was malformed).
                self.counters.rx_socket_err.fetch_add(1, Ordering::Relaxed);
                0
            }
        }
    }

    /// Checks the ICRC of every packet of received datagram `i` (a GRO batch is cut at
    /// its segment size) and hands the good ones to the engine straight from the
    /// receive buffer. Returns the number of packets in the datagram.
    fn deliver(&mut self, i: usize, engine: &mut Engine, now: u64) -> usize {
        let m = self.meta[i];
        if let Some(super::share::Passed { ident, offer, decided }) = self.forwarded[i] {
            // Checked by the process that received it (`share`).
            let pkt = &self.bufs[i][..m.len];
            if let Some(s) = &mut self.share {
                if offer {
                    // A REQ offered to every member: this one's only if it listens.
                    if !super::share::req_service_id(pkt).is_some_and(|sid| engine.cm().is_listening(sid)) {
                        s.decline(pkt, m.src);
                        return 1;
                    }
                } else if !decided
                    && s.is_agent()
                    && super::share::is_gsi(pkt)
                    && s.take_gsi(pkt, m.src, ident, |sid| engine.cm().is_listening(sid), &self.counters)
                {
                    // A MAD another member took from the wire: the agent passed it on.
                    return 1;
                }
            }
            if let Some(c) = &self.capture {
                c.record_rx_ipv4_id(m.src.ip(), self.local.ip(), (m.src.port(), self.local.port()), ident, pkt);
            }
            engine.handle_packet_ecn(now, m.src.ip(), pkt, m.ce);
            return 1;
        }
        if m.truncated || m.len == 0 {
            self.counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        if let Some(group) = self.group_of[i] {
            return self.deliver_group(i, group, engine, now);
        }
        let seg = if m.segment == 0 { m.len } else { m.segment };
        if m.segment > 0 {
            self.counters.rx_gro_batches.fetch_add(1, Ordering::Relaxed);
        }
        let ctx = IcrcContext::new(m.src.ip(), self.local.ip(), m.src.port(), self.local.port());
        let mut count = 0;
        for (index, off) in (0..m.len).step_by(seg).enumerate() {
            count += 1;
            let pkt = &self.bufs[i][off..(off + seg).min(m.len)];
            if let Some(s) = &mut self.share {
                if s.answer_probe(pkt) {
                    continue;
                }
            }
            let ident = match self.verifier.verify(&ctx, pkt, index) {
                Some(id) => {
                    match id {
                        crate::gso::IdMatch::Zero => {}
                        crate::gso::IdMatch::Index(_) => {
                            self.counters.icrc_gso_index.fetch_add(1, Ordering::Relaxed);
                        }
                        crate::gso::IdMatch::Window(_) => {
                            self.counters.icrc_gso_window.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Some(id.ident())
                }
                // Not an ID an rnic sender produces: a peer such as Linux rxe, whose
                // IDs come from the kernel's generator; the policy decides (rx_icrc
                // counts icrc_err or icrc_ipv4_id_solved).
                None if self.ipv4_id == Ipv4IdPolicy::SolveUnknown && ctx.src.is_ipv4() => {
                    crate::rx_icrc::check(&ctx, pkt, self.ipv4_id, &self.counters)
                }
                None => {
                    // IBA C9-3: a bad ICRC is dropped silently (and counted here).
                    self.counters.icrc_err.fetch_add(1, Ordering::Relaxed);
                    None
                }
            };
            crate::hop_trace::mark(crate::hop_trace::Step::IcrcChecked);
            let Some(ident) = ident else { continue };
            if let Some(s) = &mut self.share {
                if !s.owns(pkt) {
                    // Another process's QP: passed on to it.
                    s.forward(pkt, m.src, m.ce || self.congested, ident, &self.counters);
                    continue;
                }
                // A CM MAD at the agent: the member whose connection it is takes it.
                if super::share::is_gsi(pkt)
                    && s.take_gsi(pkt, m.src, ident, |sid| engine.cm().is_listening(sid), &self.counters)
                {
                    continue;
                }
            }
            if let Some(c) = &self.capture {
                let (s, d) = (m.src, self.local);
                c.record_rx_ipv4_id(s.ip(), d.ip(), (s.port(), d.port()), ident, pkt);
            }
            engine.handle_packet_ecn(now, m.src.ip(), pkt, m.ce || self.congested);
            crate::hop_trace::mark(crate::hop_trace::Step::Handled);
        }
        count
    }

    /// Delivers datagram `i`, received on `group`'s socket: its ICRC is checked for the
    /// group as destination (the address the sender's IP header carried), and it goes to
    /// this process's QPs attached to the group. Never forwarded to another process: each
    /// process sharing the device has its own copy (see `groups`).
    fn deliver_group(&mut self, i: usize, group: IpAddr, engine: &mut Engine, now: u64) -> usize {
        let m = self.meta[i];
        let pkt = &self.bufs[i][..m.len];
        let ctx = IcrcContext::new(m.src.ip(), group, m.src.port(), self.local.port());
        let ident = match self.verifier.verify(&ctx, pkt, 0) {
            Some(id) => Some(id.ident()),
            None if self.ipv4_id == Ipv4IdPolicy::SolveUnknown && ctx.src.is_ipv4() => {
                crate::rx_icrc::check(&ctx, pkt, self.ipv4_id, &self.counters)
            }
            None => {
                // IBA C9-3: a bad ICRC is dropped silently (and counted here).
                self.counters.icrc_err.fetch_add(1, Ordering::Relaxed);
                None
            }
        };
        let Some(ident) = ident else { return 1 };
        if let Some(c) = &self.capture {
            c.record_rx_ipv4_id(m.src.ip(), group, (m.src.port(), self.local.port()), ident, pkt);
        }
        engine.handle_multicast(now, m.src.ip(), group, pkt, m.ce);
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_wire::icrc::IcrcContext;

    /// A packet of `len` bytes (BTH..ICRC, ICRC zero) for QP `qpn`, PSN `psn`.
    fn packet(len: usize, qpn: u32, psn: u8) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x04; // RC SEND ONLY
        p[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        p[11] = psn;
        for (i, b) in p[12..len - 4].iter_mut().enumerate() {
            *b = psn.wrapping_add(i.to_le_bytes()[0]);
        }
        p
    }

    /// A train goes out as one GSO send whose packet j carries the ICRC for IPv4 ID j
    /// (the kernel's ID for segment j), or, with GSO off, as a datagram per packet, each
    /// with the ICRC for ID 0; in either case in order with the packets around it, and
    /// each datagram is exactly one packet.
    #[test]
    fn trains_go_out_as_one_gso_send_or_one_datagram_per_packet() {
        let peer: IpAddr = "127.201.7.1".parse().unwrap();
        let rx = UdpSocket::bind(SocketAddr::new(peer, ROCEV2_UDP_PORT)).expect("bind the peer");
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        for gso in [true, false] {
            let sock = UdpSocket::bind("127.201.7.2:0").expect("bind the sender");
            let gso = gso && rnic_io::udp_segment_supported(&sock);
            let local = sock.local_addr().unwrap();
            let mut tx = Tx::new(sock, local, gso, None, 0);
            // An ACK-sized packet, a train of five 80-byte packets, another packet.
            let mut train = TxPacket::new(peer, local.port(), Vec::new());
            train.train = 5;
            for psn in 1..=5 {
                train.data.extend(packet(80, 0x11, psn));
            }
            let mut batch = vec![
                TxPacket::new(peer, local.port(), packet(20, 0x11, 0)),
                train,
                TxPacket::new(peer, local.port(), packet(96, 0x11, 6)),
            ];
            let counters = Counters::default();
            tx.send(&mut batch, &counters);
            assert_eq!(counters.send_err.load(Ordering::Relaxed), 0);
            let mut buf = [0u8; 2048];
            for (psn, len) in [(0u8, 20usize), (1, 80), (2, 80), (3, 80), (4, 80), (5, 80), (6, 96)] {
                let (n, from) = rx.recv_from(&mut buf).expect("every packet arrives");
                assert_eq!((n, buf[11]), (len, psn), "GSO {gso}: packets in order, one per datagram");
                assert_eq!(buf[..n - 4], packet(len, 0x11, psn)[..len - 4]);
                let ident = if gso && (1..=5).contains(&psn) { u16::from(psn - 1) } else { 0 };
                let ctx = IcrcContext {
                    ipv4_ident: ident,
                    ..IcrcContext::new(local.ip(), peer, from.port(), ROCEV2_UDP_PORT)
                };
                ctx.verify(&buf[..n]).unwrap_or_else(|e| panic!("GSO {gso}, PSN {psn}: ICRC for ID {ident}: {e}"));
            }
            let gso_sends = counters.tx_gso_batches.load(Ordering::Relaxed);
            assert_eq!(gso_sends, u64::from(gso), "the train is one GSO send when GSO is on");
        }
    }

    #[test]
    fn reuse_keeps_the_allocation_across_lifetimes() {
        let data = vec![1u8, 2, 3];
        let mut v: Vec<rnic_io::IoVec<'static>> = Vec::with_capacity(64);
        let ptr = v.as_ptr() as usize;
        let mut borrowed: Vec<rnic_io::IoVec<'_>> = reuse(std::mem::take(&mut v));
        borrowed.push(rnic_io::IoVec::new(&data));
        assert_eq!(borrowed.as_ptr() as usize, ptr, "the iovec list was reallocated");
        let back: Vec<rnic_io::IoVec<'static>> = reuse(borrowed);
        assert!(back.is_empty());
        assert_eq!((back.as_ptr() as usize, back.capacity() >= 64), (ptr, true));
    }
}
