//! The `AF_PACKET` socket's system calls: every `unsafe` block of rnic-core's raw-Ethernet
//! transport, each behind a safe function (as smoltcp keeps `phy/sys/raw_socket.rs` beside
//! its safe `phy/raw_socket.rs`), and [`RawSocket`], a bare socket set up as the
//! transport's is, for measuring the link itself.
//!
//! - [`open`]: the socket on `ETH_P_ALL`, bound to the interface, with the interface's
//!   index (`if_nametoindex`), MAC (`SIOCGIFHWADDR`) and MTU (`SIOCGIFMTU`), and its
//!   options: `PACKET_IGNORE_OUTGOING` (it does not see its own frames),
//!   `PACKET_VNET_HDR` (a virtio-net header before each frame: a peer's unsegmented UDP GSO
//!   send says so), `PACKET_AUXDATA` (the VLAN tag the kernel takes out of a frame),
//!   `PACKET_QDISC_BYPASS` (frames go to the driver without the qdisc, as a NIC's queue
//!   would), large buffers;
//! - [`join_group`], [`leave_group`]: `PACKET_ADD_MEMBERSHIP` / `PACKET_DROP_MEMBERSHIP`
//!   for an Ethernet multicast group;
//! - [`send`] and [`recv`]: one `sendmmsg` or `recvmmsg` over a batch of frames (the
//!   receive side reads each frame's VLAN from its `PACKET_AUXDATA` control message);
//! - [`wait_writable`]: `poll` for room in the send queue.
//!
//! A leaf: it knows sockets and byte buffers, not the transport that uses them.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const ETH_P_ALL: u16 = 0x0003;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_AUXDATA: libc::c_int = 8;
/// `TP_STATUS_VLAN_VALID`: the auxdata's VLAN TCI is the frame's (the kernel moved the tag
/// out of the frame before this socket saw it).
const TP_STATUS_VLAN_VALID: u32 = 0x10;
/// Room for one `tpacket_auxdata` control message.
pub const CMSG_ROOM: usize = 64;
/// `struct virtio_net_hdr` before every frame with `PACKET_VNET_HDR`.
pub const VNET_HDR: usize = 10;
/// `VIRTIO_NET_HDR_GSO_UDP_L4`: a UDP GSO packet not yet segmented.
pub const GSO_UDP_L4: u8 = 5;

fn last_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// What [`open`] read of the interface.
#[derive(Debug)]
pub struct Link {
    /// The socket, bound to the interface.
    pub sock: OwnedFd,
    /// The interface's index.
    pub index: i32,
    /// Its MAC.
    pub mac: [u8; 6],
    /// Its MTU (IP bytes per frame).
    pub mtu: u32,
}

// Struct sizes and the address family fit their C types.
/// Opens the `AF_PACKET` socket on `name` and reads the interface's index, MAC and MTU;
/// `buffer`: the send and receive buffer size to ask for.
/// Runs in the calling thread's network namespace (the socket stays in it).
#[allow(clippy::cast_possible_truncation)]
pub fn open(name: &str, buffer: usize) -> Result<Link, String> {
    let cname = CString::new(name).map_err(|_| format!("interface name {name:?} has a NUL byte"))?;
    // SAFETY: `cname` is a valid NUL-terminated C string that outlives the call, which
    // only reads it.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 {
        return Err(format!("no network interface named {name:?} (in this network namespace)"));
    }
    let index = libc::c_int::try_from(index).map_err(|_| format!("interface index {index} out of range"))?;
    let proto = libc::c_int::from(ETH_P_ALL.to_be());
    // SAFETY: plain socket creation with no pointer arguments; the descriptor is owned
    // below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, proto) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => format!(
                "a raw-Ethernet device needs CAP_NET_RAW to open an AF_PACKET socket \
                 (run as root, or `setcap cap_net_raw+ep` the program): {e}"
            ),
            _ => format!("AF_PACKET socket: {e}"),
        });
    }
    // SAFETY: `fd` is a new, open descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is a plain C struct (a name array and a union of plain members); all
    // zeroes is a valid value of it.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes().take(libc::IFNAMSIZ - 1)) {
        *d = s as libc::c_char;
    }
    // SAFETY: a valid socket and a valid, writable ifreq whose name is NUL-terminated (at
    // most IFNAMSIZ - 1 bytes copied into zeroes); SIOCGIFHWADDR writes the union's
    // hwaddr member and nothing beyond the struct.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut ifr) } < 0 {
        return Err(last_err("SIOCGIFHWADDR").to_string());
    }
    // SAFETY: the call above succeeded, so it filled the hwaddr member; every bit pattern
    // is a valid sockaddr anyway (plain integers).
    let hw = unsafe { ifr.ifr_ifru.ifru_hwaddr };
    if hw.sa_family != libc::ARPHRD_ETHER {
        return Err(format!("{name} is not an Ethernet interface (ARPHRD {})", hw.sa_family));
    }
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(hw.sa_data.iter()) {
        *m = *b as u8;
    }
    // SAFETY: as for SIOCGIFHWADDR: a valid socket and ifreq; SIOCGIFMTU writes the
    // union's mtu member.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut ifr) } < 0 {
        return Err(last_err("SIOCGIFMTU").to_string());
    }
    // SAFETY: the call above succeeded, so it filled the mtu member (a plain int).
    let mtu = u32::try_from(unsafe { ifr.ifr_ifru.ifru_mtu }).unwrap_or(0);
    // SAFETY: sockaddr_ll is a plain C struct of integers; all zeroes is valid. The
    // family, protocol and interface are set below.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ETH_P_ALL.to_be();
    sll.sll_ifindex = index;
    let len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: a valid socket and a pointer to a live sockaddr_ll of the stated length,
    // which bind only reads.
    if unsafe { libc::bind(sock.as_raw_fd(), std::ptr::addr_of!(sll).cast(), len) } < 0 {
        return Err(last_err("bind AF_PACKET").to_string());
    }
    let one: libc::c_int = 1;
    let set = |level, opt, v: &libc::c_int| {
        let n = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a valid socket and a pointer to a live int of the stated size, which
        // setsockopt only reads.
        unsafe { libc::setsockopt(sock.as_raw_fd(), level, opt, std::ptr::from_ref(v).cast(), n) }
    };
    // Not seeing its own frames; without it (kernels before 4.20) they are told apart by
    // their source MAC.
    let _ = set(libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &one);
    // A virtio-net header before each frame: a peer's UDP GSO send crossing a veth (or a
    // bridge) reaches this socket unsegmented, one frame holding many packets; the header
    // says so and at what size to cut it, as a NIC would have on the wire.
    if set(libc::SOL_PACKET, PACKET_VNET_HDR, &one) < 0 {
        return Err(last_err("PACKET_VNET_HDR").to_string());
    }
    // Each frame's VLAN tag, which the kernel takes out of the frame on receive.
    if set(libc::SOL_PACKET, PACKET_AUXDATA, &one) < 0 {
        return Err(last_err("PACKET_AUXDATA").to_string());
    }
    let _ = set(libc::SOL_PACKET, PACKET_QDISC_BYPASS, &one);
    let big = libc::c_int::try_from(buffer).unwrap_or(libc::c_int::MAX);
    if set(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &big) < 0 {
        let _ = set(libc::SOL_SOCKET, libc::SO_RCVBUF, &big);
    }
    if set(libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &big) < 0 {
        let _ = set(libc::SOL_SOCKET, libc::SO_SNDBUF, &big);
    }
    Ok(Link { sock, index, mac, mtu })
}

/// Joins the Ethernet multicast group `mac` on interface `index`, so that a NIC's filter
/// lets its frames (neighbour solicitations for the device's addresses, a UD multicast
/// group's datagrams) in.
pub fn join_group(sock: BorrowedFd<'_>, index: i32, mac: [u8; 6]) -> io::Result<()> {
    membership(sock, index, mac, libc::PACKET_ADD_MEMBERSHIP, "PACKET_ADD_MEMBERSHIP")
}

/// Leaves the Ethernet multicast group `mac` on interface `index` (joined by
/// [`join_group`]).
pub fn leave_group(sock: BorrowedFd<'_>, index: i32, mac: [u8; 6]) -> io::Result<()> {
    membership(sock, index, mac, libc::PACKET_DROP_MEMBERSHIP, "PACKET_DROP_MEMBERSHIP")
}

// Struct sizes fit their C types.
#[allow(clippy::cast_possible_truncation)]
fn membership(sock: BorrowedFd<'_>, index: i32, mac: [u8; 6], opt: libc::c_int, what: &str) -> io::Result<()> {
    // SAFETY: packet_mreq is a plain C struct of integers; all zeroes is valid.
    let mut mr: libc::packet_mreq = unsafe { std::mem::zeroed() };
    mr.mr_ifindex = index;
    mr.mr_type = libc::PACKET_MR_MULTICAST as u16;
    mr.mr_alen = 6;
    mr.mr_address[..6].copy_from_slice(&mac);
    let n = std::mem::size_of::<libc::packet_mreq>() as libc::socklen_t;
    // SAFETY: a valid socket and a pointer to a live packet_mreq of the stated size, which
    // setsockopt only reads.
    let r = unsafe { libc::setsockopt(sock.as_raw_fd(), libc::SOL_PACKET, opt, std::ptr::from_ref(&mr).cast(), n) };
    if r < 0 {
        Err(last_err(what))
    } else {
        Ok(())
    }
}

/// Sends `frames` in one `sendmmsg`, each as one message, after `prefix` when given (a
/// virtio-net header); no address (the socket is bound to the interface). Returns how
/// many the kernel took; the error is the call's (`WouldBlock` when its queue is full).
pub fn send<F: AsRef<[u8]>>(
    sock: BorrowedFd<'_>,
    prefix: Option<&[u8]>,
    frames: &[F],
    flags: libc::c_int,
) -> io::Result<usize> {
    let iov_of = |b: &[u8]| libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: b.len() };
    let per = if prefix.is_some() { 2 } else { 1 };
    let mut iov: Vec<libc::iovec> = Vec::with_capacity(frames.len() * per);
    for f in frames {
        if let Some(p) = prefix {
            iov.push(iov_of(p));
        }
        iov.push(iov_of(f.as_ref()));
    }
    let mut msgs: Vec<libc::mmsghdr> = iov
        .chunks_exact_mut(per)
        .map(|v| {
            // SAFETY: mmsghdr is a plain C struct of integers and pointers; all zeroes is
            // valid (no name, no control buffer).
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = v.as_mut_ptr();
            m.msg_hdr.msg_iovlen = per;
            m
        })
        .collect();
    let len = u32::try_from(msgs.len()).unwrap_or(u32::MAX);
    // SAFETY: a valid socket; `msgs` holds `len` headers (a u32 less than or equal to its
    // length), each pointing at `per` iovecs of `iov`, which point at `prefix` and the
    // frames: all live, unmoved, across the call. The kernel only reads the iovecs' bytes
    // (the `*mut` is the C type's) and writes each header's `msg_len`.
    let r = unsafe { libc::sendmmsg(sock.as_raw_fd(), msgs.as_mut_ptr(), len, flags) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(r).unwrap_or(0))
}

/// One received frame, as [`recv`] reports it.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Bytes written to its buffer (the virtio-net header first).
    pub len: usize,
    /// It was longer than its buffer (`MSG_TRUNC`).
    pub truncated: bool,
    /// The VLAN the kernel took its tag out of (with control buffers only).
    pub vid: Option<u16>,
}

/// Receives up to one frame per buffer of `bufs` (and per control buffer of `cmsgs`, when
/// given: `PACKET_AUXDATA`'s VLAN) in one non-blocking `recvmmsg`; calls `got` with each
/// frame's index and what it was. Returns how many; the error is the call's (`WouldBlock`
/// when nothing waits).
pub fn recv(
    sock: BorrowedFd<'_>,
    bufs: &mut [Vec<u8>],
    mut cmsgs: Option<&mut [[u8; CMSG_ROOM]]>,
    mut got: impl FnMut(usize, Received),
) -> io::Result<usize> {
    let count = cmsgs.as_ref().map_or(bufs.len(), |c| c.len().min(bufs.len()));
    let mut iov: Vec<libc::iovec> =
        bufs[..count].iter_mut().map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() }).collect();
    let mut msgs: Vec<libc::mmsghdr> = iov
        .iter_mut()
        .enumerate()
        .map(|(i, v)| {
            // SAFETY: mmsghdr is a plain C struct of integers and pointers; all zeroes is
            // valid (no name, no control buffer until one is set below).
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = std::ptr::from_mut(v);
            m.msg_hdr.msg_iovlen = 1;
            if let Some(c) = cmsgs.as_deref_mut() {
                m.msg_hdr.msg_control = c[i].as_mut_ptr().cast();
                m.msg_hdr.msg_controllen = CMSG_ROOM;
            }
            m
        })
        .collect();
    let len = u32::try_from(msgs.len()).unwrap_or(u32::MAX);
    // SAFETY: a valid socket; `msgs` holds `len` headers (at most its length), each
    // pointing at one iovec over a whole buffer of `bufs` and, when given, at a whole
    // control buffer of CMSG_ROOM bytes: all exclusively borrowed, live and unmoved across
    // the call, which writes at most their stated lengths. MSG_DONTWAIT: it does not
    // block; no timeout pointer.
    let r =
        unsafe { libc::recvmmsg(sock.as_raw_fd(), msgs.as_mut_ptr(), len, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = usize::try_from(r).unwrap_or(0);
    for (i, m) in msgs[..n].iter().enumerate() {
        got(
            i,
            Received {
                len: m.msg_len as usize,
                truncated: m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
                vid: if cmsgs.is_some() { auxdata_vid(&m.msg_hdr) } else { None },
            },
        );
    }
    Ok(n)
}

/// The VLAN ID of a received frame from its `PACKET_AUXDATA` control message, when the
/// kernel took the tag out of the frame.
// A tpacket_auxdata is 20 bytes: its size fits a u32.
#[allow(clippy::cast_possible_truncation)]
fn auxdata_vid(h: &libc::msghdr) -> Option<u16> {
    // SAFETY: `h` was filled by recvmmsg and its control buffer (CMSG_ROOM bytes, still
    // borrowed by the caller) is live; CMSG_FIRSTHDR/NXTHDR walk it within
    // msg_controllen, and each data pointer is read (unaligned) only when the message is
    // PACKET_AUXDATA and long enough for a tpacket_auxdata, a plain C struct of integers.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let want = libc::CMSG_LEN(std::mem::size_of::<libc::tpacket_auxdata>() as u32) as usize;
            if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == PACKET_AUXDATA && (*c).cmsg_len >= want {
                let a: libc::tpacket_auxdata = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                return (a.tp_status & TP_STATUS_VLAN_VALID != 0).then_some(a.tp_vlan_tci & 0x0fff);
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
        None
    }
}

/// Waits up to 10 ms for room in the socket's send queue.
pub fn wait_writable(sock: BorrowedFd<'_>) {
    let mut p = libc::pollfd { fd: sock.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
    // SAFETY: one valid, live pollfd, matching the count of 1, for the duration of the
    // call.
    let _ = unsafe { libc::poll(&mut p, 1, 10) };
}

/// A bare `AF_PACKET` socket on an interface, set up as rnic's raw-Ethernet transport's
/// is: for measuring the link itself (`rnic perf`'s raw-frame baseline: the transport's
/// own ceiling over the same interfaces).
#[derive(Debug)]
pub struct RawSocket {
    link: Link,
    name: String,
}

impl RawSocket {
    /// Bytes before each received frame in a buffer given to [`RawSocket::recv`] (the
    /// socket's virtio-net header).
    pub const RX_OFFSET: usize = VNET_HDR;

    /// Opens the socket on `ifname` (in the calling thread's network namespace) with the
    /// buffers rnic's transport asks for ([`SOCKET_BUFFER`](crate::SOCKET_BUFFER)); needs
    /// CAP_NET_RAW.
    pub fn open(ifname: &str) -> Result<RawSocket, String> {
        Ok(RawSocket { link: open(ifname, crate::SOCKET_BUFFER)?, name: ifname.to_string() })
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface's MAC.
    pub fn mac(&self) -> [u8; 6] {
        self.link.mac
    }

    /// The interface's MTU.
    pub fn mtu(&self) -> u32 {
        self.link.mtu
    }

    /// Sends whole Ethernet frames in one `sendmmsg`; returns how many the kernel took
    /// (0 when its queue is full).
    pub fn send(&self, frames: &[&[u8]]) -> io::Result<usize> {
        // The virtio-net header of a frame sent as it is (no offloads).
        let hdr = [0u8; VNET_HDR];
        match send(self.link.sock.as_fd(), Some(&hdr), frames, libc::MSG_DONTWAIT) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            r => r,
        }
    }

    /// Receives up to `bufs.len()` frames without blocking; frame *i* is
    /// `bufs[i][RX_OFFSET..RX_OFFSET + lens[i]]`. Returns how many.
    pub fn recv(&self, bufs: &mut [Vec<u8>], lens: &mut [usize]) -> io::Result<usize> {
        let got = |i: usize, r: Received| {
            if let Some(l) = lens.get_mut(i) {
                *l = r.len.saturating_sub(VNET_HDR);
            }
        };
        match recv(self.link.sock.as_fd(), bufs, None, got) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            r => r,
        }
    }
}
