//! The one socket option neither std nor socket2 offers: `IP_MTU_DISCOVER`.
//!
//! This is the only `unsafe` in rnic-core outside [`crate::mem`]. It exists because
//! the ICRC covers the IPv4 identification field, and only an unconnected socket set to
//! `IP_PMTUDISC_DO` makes the kernel send ID 0 (with DF) on every datagram, which the
//! receiving rnic can then assume (`shared/notes/icrc-over-udp-sockets.md`).

use std::io;
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
