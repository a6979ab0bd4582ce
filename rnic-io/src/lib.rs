//! The Linux system calls rnic needs that neither std nor socket2 offers, behind safe
//! functions: UDP sockets as a RoCEv2 NIC uses them ([`udp`]: GSO/GRO, ECN, batched
//! `sendmmsg`/`recvmmsg`, timestamps), waiting and waking ([`wait`]: `ppoll`, eventfd),
//! raw Ethernet frames through an `AF_PACKET` socket ([`packet`]), CPU placement ([`cpu`])
//! and what processes sharing a device need ([`share`]: a
//! reuseport group's BPF program, Unix datagrams with their sender's user ID).
//!
//! A crate of its own (as quinn keeps `quinn-udp`) so that the driver's public API does
//! not carry them, and so that a program measuring the host's own UDP path (`rnic perf`'s
//! baseline) uses exactly the calls the driver uses. Every `unsafe` block here has a
//! `SAFETY:` comment; the rest of the workspace reaches these calls only through this
//! crate's safe API. Linux only.
#![warn(missing_docs)]

pub mod cpu;
pub mod packet;
pub mod share;
pub mod time;
pub mod udp;
pub mod wait;

pub use cpu::pin_current_thread;
pub use packet::RawSocket;
pub use share::{attach_reuseport_cbpf, euid, recv_with_uid, set_passcred, set_reuseport, BpfInsn};
pub use udp::{
    force_buffers, interface_index_of, recv_msgs, run_end, rx_backlog, send_msgs, send_msgs_with, set_pmtudisc_do,
    set_recv_tos, set_rx_timestamps, set_tos, set_udp_gro, udp_segment_supported, IoVec, OutMsg, RecvMeta, RecvScratch,
    SendScratch, ECN_CE, ECN_ECT0, ECN_MASK, MAX_GSO_SEGMENTS, MAX_UDP_PAYLOAD, UDP_GRO, UDP_SEGMENT,
};
pub use wait::{wait_readable, Epoll, EventFd};

use std::io;
use std::os::fd::AsRawFd;

/// The send and receive buffer, in bytes, rnic's sockets ask for (UDP and `AF_PACKET`):
/// room for a burst of full-size packets at line rate while the progress thread is away.
pub const SOCKET_BUFFER: usize = 64 << 20;

/// `setsockopt` of one `int`.
pub(crate) fn setsockopt_int(
    sock: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    val: libc::c_int,
) -> io::Result<()> {
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>()).unwrap_or(4);
    // SAFETY: a borrowed open fd, a pointer to a live stack int
    // and its exact size; the kernel only reads it.
    let rc = unsafe { libc::setsockopt(sock.as_raw_fd(), level, name, std::ptr::addr_of!(val).cast(), len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
