//! What processes sharing one device need from the kernel: a reuseport group whose
//! classic BPF program steers each datagram to its QP's process, and Unix datagrams that
//! carry their sender's user ID.

use crate::setsockopt_int;
use std::io;
use std::os::fd::AsRawFd;

/// Sets `SO_REUSEPORT`: sockets of one user bound to the same address and port form a
/// group, and each datagram goes to one of them (chosen by the group's program, see
/// [`attach_reuseport_cbpf`], else by a hash of its addresses).
pub fn set_reuseport(sock: &impl AsRawFd) -> io::Result<()> {
    setsockopt_int(sock, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)
}

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BpfInsn {
    /// Operation.
    pub code: u16,
    /// Jump offset when the condition holds.
    pub jt: u8,
    /// Jump offset when it does not.
    pub jf: u8,
    /// Operand.
    pub k: u32,
}

/// Gives the socket's reuseport group a classic BPF program
/// (`SO_ATTACH_REUSEPORT_CBPF`): it runs on each datagram's UDP payload and returns the
/// index of the group's socket that gets it (an index past the group's end falls back
/// to the hash). Replaces the group's program; needs no privilege.
pub fn attach_reuseport_cbpf(sock: &impl AsRawFd, prog: &[BpfInsn]) -> io::Result<()> {
    let mut filter: Vec<libc::sock_filter> =
        prog.iter().map(|i| libc::sock_filter { code: i.code, jt: i.jt, jf: i.jf, k: i.k }).collect();
    // Zeroed first: the padding after `len` is passed to the kernel too (valgrind reports
    // uninitialised bytes in a program that runs on rnic otherwise).
    // SAFETY: all-zero is a valid sock_fprog (an integer and a null pointer).
    let mut fprog: libc::sock_fprog = unsafe { std::mem::zeroed() };
    fprog.len = u16::try_from(filter.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    fprog.filter = filter.as_mut_ptr();
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::sock_fprog>()).unwrap_or(16);
    // SAFETY: a borrowed open fd; `fprog` points at `filter`, which holds `fprog.len`
    // instructions and lives until the call returns; the kernel copies the program.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            std::ptr::addr_of!(fprog).cast(),
            len,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks a Unix socket for each sender's credentials (`SO_PASSCRED`), which
/// [`recv_with_uid`] then reports.
pub fn set_passcred(sock: &impl AsRawFd) -> io::Result<()> {
    setsockopt_int(sock, libc::SOL_SOCKET, libc::SO_PASSCRED, 1)
}

/// Receives one datagram from a Unix socket without blocking, with the user ID of the
/// process that sent it (the kernel's `SCM_CREDENTIALS`; `None` if it was not reported).
/// A datagram longer than `buf` is an error (`InvalidData`), not a shorter message.
pub fn recv_with_uid(sock: &impl AsRawFd, buf: &mut [u8]) -> io::Result<(usize, Option<u32>)> {
    // Room for one `struct ucred` control message (u64s: the header's alignment).
    let mut cbuf = [0u64; 8];
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: an all-zero msghdr is a valid empty one.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = std::ptr::addr_of_mut!(iov);
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf);
    // SAFETY: a borrowed open fd; `msg` points at `iov` (over `buf`) and `cbuf`, all live
    // for the call, with their exact lengths; the kernel writes within them.
    let rc = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if msg.msg_flags & libc::MSG_TRUNC != 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "a Unix datagram longer than the buffer"));
    }
    let mut uid = None;
    // SAFETY: the CMSG_* macros walk the control buffer the kernel filled, within
    // `msg_controllen`; a `SCM_CREDENTIALS` message's data is one `struct ucred`, read
    // unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_CREDENTIALS {
                let cred: libc::ucred = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                uid = Some(cred.uid);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((usize::try_from(rc).unwrap_or(0), uid))
}

/// This process's effective user ID.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}
