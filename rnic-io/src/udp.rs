//! UDP sockets as a RoCEv2 NIC uses them: `IP_MTU_DISCOVER`, UDP GSO/GRO, ECN in the
//! TOS byte, `sendmmsg`/`recvmmsg` with control messages, receive timestamps and the
//! receive queue's fill.
//!
//! `IP_MTU_DISCOVER` exists because the ICRC covers the IPv4 identification field, and
//! only an unconnected socket set to `IP_PMTUDISC_DO` makes the kernel send ID 0 (with DF)
//! on every datagram, which the receiving rnic can then assume
//! (`shared/notes/icrc-over-udp-sockets.md`).

use crate::setsockopt_int;
use std::io;
use std::marker::PhantomData;
use std::os::fd::AsRawFd;

/// Sets `IP_MTU_DISCOVER = IP_PMTUDISC_DO` on an IPv4 UDP socket.
pub fn set_pmtudisc_do(sock: &impl AsRawFd) -> io::Result<()> {
    let val: libc::c_int = libc::IP_PMTUDISC_DO;
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>()).unwrap_or(4);
    // SAFETY: `sock` is an open socket for the duration of the call (borrowed), `val`
    // lives on the stack for the call and `len` is its exact size; setsockopt only reads
    // `len` bytes from the pointer and has no other memory effects.
    let rc = unsafe {
        libc::setsockopt(sock.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, std::ptr::addr_of!(val).cast(), len)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `SOL_UDP` option: the segment size of a UDP GSO send (linux/udp.h; glibc's libc lacks it).
pub const UDP_SEGMENT: libc::c_int = 103;
/// `SOL_UDP` option: deliver coalesced datagrams with their segment size (UDP GRO).
pub const UDP_GRO: libc::c_int = 104;
/// The largest UDP payload one IPv4 datagram (and so one GSO send) can carry.
pub const MAX_UDP_PAYLOAD: usize = 65_507;
/// The most segments one GSO send may be cut into (linux `UDP_MAX_SEGMENTS` is at least 64).
pub const MAX_GSO_SEGMENTS: usize = 64;

/// Raises the socket's receive and send buffers to `bytes` beyond `net.core.rmem_max` /
/// `wmem_max` (`SO_RCVBUFFORCE`/`SO_SNDBUFFORCE`; needs CAP_NET_ADMIN, else fails).
pub fn force_buffers(sock: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    setsockopt_int(sock, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, v)?;
    setsockopt_int(sock, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, v)
}

/// The ECN field of the IPv4 TOS / IPv6 traffic class byte (RFC 3168).
pub const ECN_MASK: u8 = 0b11;
/// ECN-capable transport, ECT(0): what a RoCEv2 NIC with congestion control sets.
pub const ECN_ECT0: u8 = 0b10;
/// Congestion experienced: set by a congested switch (or a fault rule).
pub const ECN_CE: u8 = 0b11;

/// Asks for each datagram's TOS (IPv4) or traffic class (IPv6) as a control message, so
/// that [`recv_msgs`] reports ECN CE marks.
pub fn set_recv_tos(sock: &impl AsRawFd, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        setsockopt_int(sock, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)
    } else {
        setsockopt_int(sock, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)
    }
}

/// Sets the TOS (IPv4) or traffic class (IPv6) byte of every datagram the socket sends.
pub fn set_tos(sock: &impl AsRawFd, ipv6: bool, tos: u8) -> io::Result<()> {
    if ipv6 {
        setsockopt_int(sock, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, libc::c_int::from(tos))
    } else {
        setsockopt_int(sock, libc::IPPROTO_IP, libc::IP_TOS, libc::c_int::from(tos))
    }
}

/// The bytes waiting in the socket's receive queue and its receive buffer size
/// (`SO_MEMINFO`'s `RMEM_ALLOC` and `RCVBUF`): how full the receive side is.
pub fn rx_backlog(sock: &impl AsRawFd) -> io::Result<(u32, u32)> {
    const SO_MEMINFO: libc::c_int = 55;
    let mut v = [0u32; 16];
    let mut len = libc::socklen_t::try_from(std::mem::size_of_val(&v)).unwrap_or(64);
    // SAFETY: a borrowed open fd; `v` and `len` are live stack values and the kernel
    // writes at most `len` (the size of `v`) bytes into `v`.
    let rc =
        unsafe { libc::getsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, SO_MEMINFO, v.as_mut_ptr().cast(), &mut len) };
    if rc == 0 {
        Ok((v[0], v[1]))
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Turns UDP GRO on: the kernel may hand several datagrams of one flow to a single
/// receive, with their segment size in a `UDP_GRO` control message.
pub fn set_udp_gro(sock: &impl AsRawFd, on: bool) -> io::Result<()> {
    setsockopt_int(sock, libc::SOL_UDP, UDP_GRO, libc::c_int::from(on))
}

/// Whether this kernel accepts UDP GSO (`UDP_SEGMENT`) on the socket.
pub fn udp_segment_supported(sock: &impl AsRawFd) -> bool {
    let mut val: libc::c_int = 0;
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>()).unwrap_or(4);
    // SAFETY: a borrowed open fd; `val` and `len` are live stack values the kernel writes
    // at most `len` (= size of `val`) bytes into.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_UDP,
            UDP_SEGMENT,
            std::ptr::addr_of_mut!(val).cast(),
            std::ptr::addr_of_mut!(len),
        )
    };
    rc == 0
}

/// One piece of a message for [`send_msgs`]: a `struct iovec` over bytes the kernel
/// copies from, made from a slice or from a view of registered memory that is never lent
/// as a slice (the application may write it meanwhile, as with DMA: [`IoVec::from_raw_parts`]).
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct IoVec<'a> {
    v: libc::iovec,
    _bytes: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> IoVec<'a> {
    /// An iovec over `b`.
    pub fn new(b: &'a [u8]) -> IoVec<'a> {
        IoVec { v: libc::iovec { iov_base: b.as_ptr().cast_mut().cast(), iov_len: b.len() }, _bytes: PhantomData }
    }

    /// An iovec over `len` bytes at `ptr` that are never lent as a slice (memory another
    /// thread may write meanwhile, as a NIC's DMA reads memory the application owns).
    ///
    /// # Safety
    /// `ptr..ptr + len` must stay allocated and readable for `'a`. Concurrent writes are
    /// allowed: the kernel only copies the bytes, and what it sends is then whatever it read.
    pub unsafe fn from_raw_parts(ptr: *const u8, len: usize) -> IoVec<'a> {
        IoVec { v: libc::iovec { iov_base: ptr.cast_mut().cast(), iov_len: len }, _bytes: PhantomData }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.v.iov_len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.v.iov_len == 0
    }
}

impl std::fmt::Debug for IoVec<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoVec").field("len", &self.v.iov_len).finish()
    }
}

// SAFETY: an IoVec stands for a `&'a [u8]` (from a slice) or bytes its maker promised
// readable for 'a (`from_raw_parts`); either may be read from any thread while 'a lasts,
// and the kernel only reads.
unsafe impl Send for IoVec<'_> {}
// SAFETY: as for Send: nothing is ever written through it.
unsafe impl Sync for IoVec<'_> {}

/// One message for [`send_msgs`]: the `parts` concatenated, sent to `dst`. With
/// `segment > 0` the kernel cuts it into datagrams of `segment` bytes (UDP GSO), the last
/// one possibly shorter; IPv4 segment *i* of one message then carries IP ID *i*.
#[derive(Debug)]
pub struct OutMsg<'a> {
    /// Destination.
    pub dst: std::net::SocketAddr,
    /// The bytes, in order.
    pub parts: &'a [IoVec<'a>],
    /// GSO segment size, or 0 for one plain datagram.
    pub segment: u16,
}

// CMSG_SPACE(sizeof(int)) is 24 on 64-bit Linux; 4 words leave room on any ABI.
type CmsgBuf = [u64; 4];

/// Sends `msgs` with one `sendmmsg`; returns how many messages the kernel took (from the
/// first; fewer than `msgs.len()` means the caller sends the rest again).
pub fn send_msgs(sock: &impl AsRawFd, msgs: &[OutMsg<'_>]) -> io::Result<usize> {
    send_msgs_with(sock, &mut SendScratch::default(), msgs)
}

/// The per-message structures `sendmmsg` needs, kept by a sending thread between calls
/// (no allocation per send once they have grown).
#[derive(Default)]
pub struct SendScratch {
    addrs: Vec<socket2::SockAddr>,
    ctrl: Vec<CmsgBuf>,
    hdrs: Vec<libc::mmsghdr>,
}

impl std::fmt::Debug for SendScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendScratch").field("messages", &self.hdrs.capacity()).finish()
    }
}

// SAFETY: the raw pointers in `hdrs` are written at the start of every `send_msgs_with`
// call (pointing into this scratch and the call's buffers) and read only by the kernel
// during that call, which borrows the scratch exclusively; between calls they are dead
// values never dereferenced. Moving the scratch to another thread is therefore sound.
unsafe impl Send for SendScratch {}

/// [`send_msgs`] with the headers built in `scratch`.
pub fn send_msgs_with(sock: &impl AsRawFd, scratch: &mut SendScratch, msgs: &[OutMsg<'_>]) -> io::Result<usize> {
    if msgs.is_empty() {
        return Ok(0);
    }
    let SendScratch { addrs, ctrl, hdrs } = scratch;
    addrs.clear();
    addrs.extend(msgs.iter().map(|m| socket2::SockAddr::from(m.dst)));
    ctrl.clear();
    ctrl.resize(msgs.len(), [0; 4]);
    hdrs.clear();
    for (i, m) in msgs.iter().enumerate() {
        // SAFETY: msghdr/mmsghdr are plain C structs for which all-zero is a valid value.
        let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
        h.msg_hdr.msg_name = addrs[i].as_ptr().cast_mut().cast();
        h.msg_hdr.msg_namelen = addrs[i].len();
        // IoVec is a transparent `struct iovec`; the kernel only reads through it for a
        // send.
        h.msg_hdr.msg_iov = m.parts.as_ptr().cast_mut().cast();
        h.msg_hdr.msg_iovlen = m.parts.len();
        if m.segment > 0 {
            let c = &mut ctrl[i];
            h.msg_hdr.msg_control = c.as_mut_ptr().cast();
            let two = libc::c_uint::try_from(std::mem::size_of::<u16>()).unwrap_or(2);
            // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic.
            h.msg_hdr.msg_controllen = unsafe { libc::CMSG_SPACE(two) } as usize;
            // SAFETY: msg_control points at `c` (32 bytes, 8-aligned), which is at least
            // CMSG_SPACE(2) bytes, so CMSG_FIRSTHDR returns a header inside it and
            // CMSG_DATA a pointer with room for the u16, written unaligned.
            unsafe {
                let cm = libc::CMSG_FIRSTHDR(std::ptr::addr_of!(h.msg_hdr));
                (*cm).cmsg_level = libc::SOL_UDP;
                (*cm).cmsg_type = UDP_SEGMENT;
                (*cm).cmsg_len = libc::CMSG_LEN(two) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(cm).cast::<u16>(), m.segment);
            }
        }
        hdrs.push(h);
    }
    if hdrs.len() == 1 {
        // One message: `sendmsg`, a little cheaper than `sendmmsg` (a ping-pong's case).
        // SAFETY: as below, for the one header.
        let rc = unsafe { libc::sendmsg(sock.as_raw_fd(), std::ptr::addr_of!(hdrs[0].msg_hdr), 0) };
        return if rc >= 0 { Ok(1) } else { Err(io::Error::last_os_error()) };
    }
    let n = libc::c_uint::try_from(hdrs.len()).unwrap_or(libc::c_uint::MAX);
    // SAFETY: every header points at memory that lives until this call returns (`addrs`,
    // the callers' IoVecs and their bytes, `ctrl`), with the lengths set from those same objects; the
    // kernel reads them and writes only `msg_len` in each header.
    let rc = unsafe { libc::sendmmsg(sock.as_raw_fd(), hdrs.as_mut_ptr(), n, 0) };
    usize::try_from(rc).map_err(|_| io::Error::last_os_error())
}

/// What one received message was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvMeta {
    /// Bytes received into the buffer.
    pub len: usize,
    /// Sender.
    pub src: std::net::SocketAddr,
    /// With UDP GRO: the size of each coalesced datagram (the last may be shorter);
    /// 0 when the buffer holds one datagram.
    pub segment: usize,
    /// The datagram did not fit the buffer (`MSG_TRUNC`).
    pub truncated: bool,
    /// Its IP header carried ECN congestion-experienced (needs [`set_recv_tos`]).
    pub ce: bool,
    /// When the kernel received it, ns since the Unix epoch (`CLOCK_REALTIME`; needs
    /// [`set_rx_timestamps`]); 0 when not reported.
    pub stamp_ns: u64,
}

impl Default for RecvMeta {
    fn default() -> RecvMeta {
        RecvMeta {
            len: 0,
            src: std::net::SocketAddr::from(([0, 0, 0, 0], 0)),
            segment: 0,
            truncated: false,
            ce: false,
            stamp_ns: 0,
        }
    }
}

// Room for the UDP_GRO int, the TOS byte and the timestamp cmsgs (24 + 24 + 32 bytes)
// plus anything else the kernel might add.
type RecvCmsgBuf = [u64; 16];

/// `SO_TIMESTAMPNS` (the "old" one, a 64-bit `struct timespec` on 64-bit Linux), and its
/// control message type.
const SO_TIMESTAMPNS_OLD: libc::c_int = 35;

/// Asks for each datagram's kernel receive time (`SO_TIMESTAMPNS`), so that
/// [`recv_msgs`] reports how long it waited in the socket queue.
pub fn set_rx_timestamps(sock: &impl AsRawFd) -> io::Result<()> {
    setsockopt_int(sock, libc::SOL_SOCKET, SO_TIMESTAMPNS_OLD, 1)
}

/// The per-message structures `recvmmsg` needs, allocated once per receiving thread.
pub struct RecvScratch {
    iovs: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    ctrl: Vec<RecvCmsgBuf>,
    hdrs: Vec<libc::mmsghdr>,
}

impl std::fmt::Debug for RecvScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvScratch").field("messages", &self.hdrs.len()).finish()
    }
}

// SAFETY: the raw pointers inside are written at the start of every `recv_msgs` call
// (pointing into this scratch's own vectors and the call's buffers) and read only by the
// kernel during that call, which borrows the scratch exclusively; between calls they are
// dead values never dereferenced. Moving the scratch to another thread is therefore sound.
unsafe impl Send for RecvScratch {}

impl RecvScratch {
    /// Room for `n` messages per call.
    pub fn new(n: usize) -> RecvScratch {
        RecvScratch {
            iovs: vec![libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; n],
            // SAFETY: plain C structs for which all-zero is a valid value.
            names: vec![unsafe { std::mem::zeroed() }; n],
            ctrl: vec![[0; 16]; n],
            // SAFETY: as above.
            hdrs: vec![unsafe { std::mem::zeroed() }; n],
        }
    }
}

/// Receives up to `bufs.len()` messages with one `recvmmsg` into `bufs` (each filled from
/// its start), describing each in `meta`. `wait`: block (up to the socket's read timeout)
/// for the first message, then take what is queued; otherwise never block.
pub fn recv_msgs(
    sock: &impl AsRawFd,
    scratch: &mut RecvScratch,
    bufs: &mut [Vec<u8>],
    meta: &mut [RecvMeta],
    wait: bool,
) -> io::Result<usize> {
    let count = bufs.len().min(meta.len()).min(scratch.hdrs.len());
    if count == 0 {
        return Ok(0);
    }
    let RecvScratch { iovs, names, ctrl, hdrs } = scratch;
    for i in 0..count {
        iovs[i] = libc::iovec { iov_base: bufs[i].as_mut_ptr().cast(), iov_len: bufs[i].len() };
        // SAFETY: all-zero is a valid mmsghdr.
        let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
        h.msg_hdr.msg_name = std::ptr::addr_of_mut!(names[i]).cast();
        h.msg_hdr.msg_namelen = libc::socklen_t::try_from(std::mem::size_of::<libc::sockaddr_storage>()).unwrap_or(128);
        h.msg_hdr.msg_iov = std::ptr::addr_of_mut!(iovs[i]);
        h.msg_hdr.msg_iovlen = 1;
        h.msg_hdr.msg_control = ctrl[i].as_mut_ptr().cast();
        h.msg_hdr.msg_controllen = std::mem::size_of::<RecvCmsgBuf>();
        hdrs[i] = h;
    }
    let flags = if wait { libc::MSG_WAITFORONE } else { libc::MSG_DONTWAIT };
    let got = if count == 1 && !wait {
        // One message: `recvmsg`, cheaper than `recvmmsg` (a busy poll's common case,
        // most calls finding nothing).
        // SAFETY: as below, for the first header; the kernel sets its msg_namelen,
        // msg_controllen and msg_flags, and the length goes into msg_len here.
        let rc = unsafe { libc::recvmsg(sock.as_raw_fd(), std::ptr::addr_of_mut!(hdrs[0].msg_hdr), flags) };
        let len = usize::try_from(rc).map_err(|_| io::Error::last_os_error())?;
        hdrs[0].msg_len = libc::c_uint::try_from(len).unwrap_or(libc::c_uint::MAX);
        1
    } else {
        let n = libc::c_uint::try_from(count).unwrap_or(libc::c_uint::MAX);
        // SAFETY: each of the first `count` headers points at a live, exclusively borrowed
        // buffer (`bufs[i]`, its length in the iovec), a sockaddr_storage and a control
        // buffer of the sizes given, all owned by `scratch` or the caller for the whole call;
        // the kernel writes at most those many bytes into each. A null timeout: the socket's
        // SO_RCVTIMEO bounds the wait.
        let rc = unsafe { libc::recvmmsg(sock.as_raw_fd(), hdrs.as_mut_ptr(), n, flags, std::ptr::null_mut()) };
        usize::try_from(rc).map_err(|_| io::Error::last_os_error())?
    };
    for i in 0..got.min(count) {
        let h = &hdrs[i];
        // SAFETY: the kernel filled `names[i]` and set msg_namelen to its length.
        let addr = unsafe { socket2::SockAddr::new(names[i], h.msg_hdr.msg_namelen) };
        let mut segment = 0;
        let mut tos = 0u8;
        let mut stamp_ns = 0u64;
        // SAFETY: the kernel wrote msg_controllen bytes of well-formed cmsgs into
        // `ctrl[i]`; CMSG_FIRSTHDR/NXTHDR stay within msg_controllen and the int payload
        // is read unaligned (IP_TOS carries one byte, IPV6_TCLASS an int).
        unsafe {
            let mut cm = libc::CMSG_FIRSTHDR(std::ptr::addr_of!(h.msg_hdr));
            while !cm.is_null() {
                let (level, kind) = ((*cm).cmsg_level, (*cm).cmsg_type);
                if level == libc::SOL_UDP && kind == UDP_GRO {
                    let v = std::ptr::read_unaligned(libc::CMSG_DATA(cm).cast::<libc::c_int>());
                    segment = usize::try_from(v).unwrap_or(0);
                } else if level == libc::IPPROTO_IP && kind == libc::IP_TOS {
                    tos = *libc::CMSG_DATA(cm);
                } else if level == libc::SOL_SOCKET && kind == SO_TIMESTAMPNS_OLD {
                    let t = std::ptr::read_unaligned(libc::CMSG_DATA(cm).cast::<libc::timespec>());
                    let (sec, ns) = (u64::try_from(t.tv_sec).unwrap_or(0), u64::try_from(t.tv_nsec).unwrap_or(0));
                    stamp_ns = sec.saturating_mul(1_000_000_000).saturating_add(ns);
                } else if level == libc::IPPROTO_IPV6 && kind == libc::IPV6_TCLASS {
                    let v = std::ptr::read_unaligned(libc::CMSG_DATA(cm).cast::<libc::c_int>());
                    tos = u8::try_from(v & 0xff).unwrap_or(0);
                }
                cm = libc::CMSG_NXTHDR(std::ptr::addr_of!(h.msg_hdr), cm);
            }
        }
        meta[i] = RecvMeta {
            len: usize::try_from(h.msg_len).unwrap_or(0).min(bufs[i].len()),
            src: addr.as_socket().unwrap_or_else(|| std::net::SocketAddr::from(([0, 0, 0, 0], 0))),
            segment,
            truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            ce: tos & ECN_MASK == ECN_CE,
            stamp_ns,
        };
    }
    Ok(got)
}

/// Splits `lens` (packet lengths, in send order) into runs that one GSO send can carry:
/// consecutive packets to the same destination (`same_dst(i, j)`) with the same length,
/// optionally ending with one shorter packet, at most [`MAX_GSO_SEGMENTS`]
/// and [`MAX_UDP_PAYLOAD`] bytes. Returns the end index of the run that
/// starts at `start`.
pub fn run_end(lens: &[usize], start: usize, same_dst: impl Fn(usize, usize) -> bool) -> usize {
    let Some(&size) = lens.get(start) else { return start };
    if size == 0 {
        return start + 1;
    }
    let max = MAX_GSO_SEGMENTS.min(MAX_UDP_PAYLOAD / size).max(1);
    let mut end = start + 1;
    while end < lens.len() && end - start < max && same_dst(start, end) {
        let l = lens[end];
        if l == size {
            end += 1;
        } else {
            // A shorter last segment ends the run, unless it starts a run of its own
            // (a WRITE's first packet carries a RETH and is longer than the middles).
            let starts_run = lens.get(end + 1) == Some(&l) && same_dst(end, end + 1);
            if l < size && l > 0 && !starts_run {
                end += 1;
            }
            break;
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_follow_the_gso_rules() {
        let all = |_: usize, _: usize| true;
        // First packet of a WRITE carries a RETH (longer): alone; then equal middles and a short last.
        let lens = [4128, 4112, 4112, 4112, 100, 4112];
        assert_eq!(run_end(&lens, 0, all), 1);
        assert_eq!(run_end(&lens, 1, all), 5);
        assert_eq!(run_end(&lens, 5, all), 6);
        // A shorter packet that does not start a run is a short last segment.
        assert_eq!(run_end(&[4128, 4112, 100], 0, all), 2);
        // A longer packet after a run starts a new one.
        assert_eq!(run_end(&[100, 100, 200], 0, all), 2);
        // Different destinations split runs.
        assert_eq!(run_end(&[100, 100, 100], 0, |_, j| j < 2), 2);
        // At most 64 segments, and at most 65507 bytes.
        assert_eq!(run_end(&[40; 100], 0, all), 64);
        assert_eq!(run_end(&[4112; 100], 0, all), 15);
        assert_eq!(run_end(&[], 0, all), 0);
    }
}

/// The index of the interface that holds address `ip` (`getifaddrs`), for an IPv6
/// multicast join or send on the interface of a device's address; `None` when no
/// interface holds it.
pub fn interface_index_of(ip: std::net::IpAddr) -> Option<u32> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut p = list;
    while !p.is_null() {
        // SAFETY: a node of the list getifaddrs made; its address may be NULL.
        let (addr, name, next) = unsafe { ((*p).ifa_addr, (*p).ifa_name, (*p).ifa_next) };
        // SAFETY: NULL or a sockaddr of the list, at least as long as its family says.
        let a = unsafe { sockaddr_ip(addr) };
        if a == Some(ip) && !name.is_null() {
            // SAFETY: the interface's NUL-terminated name, alive until freeifaddrs.
            let index = unsafe { libc::if_nametoindex(name) };
            found = (index != 0).then_some(index);
            break;
        }
        p = next;
    }
    // SAFETY: the list getifaddrs returned, freed once.
    unsafe { libc::freeifaddrs(list) };
    found
}

/// The IP address of a `sockaddr` of family `AF_INET` or `AF_INET6`.
///
/// # Safety
/// `sa` is NULL or points at a sockaddr as long as its family's.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<std::net::IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller's promise; every sockaddr starts with its family.
    match i32::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: an AF_INET sockaddr is a sockaddr_in.
            let s = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            Some(std::net::Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)).into())
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 sockaddr is a sockaddr_in6.
            let s = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            Some(std::net::Ipv6Addr::from(s.sin6_addr.s6_addr).into())
        }
        _ => None,
    }
}

#[cfg(test)]
mod iface_tests {
    #[test]
    fn loopback_is_found_and_a_foreign_address_is_not() {
        let lo = super::interface_index_of("127.0.0.1".parse().unwrap());
        assert!(lo.is_some_and(|i| i > 0));
        assert_eq!(super::interface_index_of("192.0.2.254".parse().unwrap()), None);
    }
}
