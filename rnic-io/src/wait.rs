//! Waiting on descriptors: `ppoll` on several at once, and the eventfd a thread bumps to
//! wake another (the device's progress thread, a completion channel's `fd`, a context's
//! `async_fd`, an rdma_cm event channel's `fd`).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Waits until one of `fds` has something to read or `timeout` passes (`None`: no
/// limit). Returns whether one is readable.
pub fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> io::Result<bool> {
    let mut pfds: Vec<libc::pollfd> =
        fds.iter().map(|f| libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(d.subsec_nanos()),
    });
    let tsp = ts.as_ref().map_or(std::ptr::null(), std::ptr::from_ref);
    let n = libc::nfds_t::try_from(pfds.len()).unwrap_or(0);
    // SAFETY: `pfds` holds `n` live pollfds (the fds are borrowed, so open); `tsp` is null
    // or points at a live timespec; a null signal mask leaves the mask unchanged.
    let rc = unsafe { libc::ppoll(pfds.as_mut_ptr(), n, tsp, std::ptr::null()) };
    match rc {
        n if n > 0 => Ok(true),
        0 => Ok(false),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}

/// A Linux eventfd: a counter another thread bumps to wake a thread waiting in
/// [`wait_readable`] or [`EventFd::wait`].
///
/// [`new`](Self::new) makes the non-blocking one a thread of rnic waits on;
/// [`blocking`](Self::blocking) the one a program is handed as a descriptor (a completion
/// channel's `fd`, a context's `async_fd`), blocking as rdma-core's are until the program
/// sets `O_NONBLOCK`. [`clear`](Self::clear) never blocks in either mode.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A non-blocking eventfd at zero.
    pub fn new() -> io::Result<EventFd> {
        Self::with_flags(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)
    }

    /// A blocking eventfd at zero, to hand to a program as its descriptor.
    pub fn blocking() -> io::Result<EventFd> {
        Self::with_flags(libc::EFD_CLOEXEC)
    }

    fn with_flags(flags: libc::c_int) -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers; on success it returns a new fd we own.
        let fd = unsafe { libc::eventfd(0, flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a freshly created descriptor nothing else owns.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Makes it readable (wakes a waiter).
    pub fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes the 8 bytes of a live u64 to our open fd. Failure (counter
        // saturated) leaves it readable, which is all a notification needs; the write
        // never blocks short of that.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), std::ptr::addr_of!(one).cast(), 8) };
    }

    /// Resets it to zero (not readable), without blocking whatever mode it is in.
    pub fn clear(&self) {
        if self.wait(Some(Duration::ZERO)) {
            let mut v: u64 = 0;
            // SAFETY: the fd is readable (just polled; only its owner reads it), so this
            // read of at most 8 bytes into a live u64 returns at once.
            let _ = unsafe { libc::read(self.0.as_raw_fd(), std::ptr::addr_of_mut!(v).cast(), 8) };
        }
    }

    /// Waits until it is readable or `timeout` passes (`None`: no limit); true when
    /// readable. A signal ends the wait early (false), as for [`wait_readable`].
    pub fn wait(&self, timeout: Option<Duration>) -> bool {
        wait_readable(&[self.0.as_fd()], timeout).unwrap_or(false)
    }

    /// Whether `O_NONBLOCK` is set on the descriptor (a program may set it on the one it
    /// was handed).
    pub fn nonblocking(&self) -> bool {
        // SAFETY: F_GETFL on our open fd.
        let fl = unsafe { libc::fcntl(self.0.as_raw_fd(), libc::F_GETFL) };
        fl >= 0 && fl & libc::O_NONBLOCK != 0
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eventfd_is_readable_from_notify_to_clear_in_either_mode() {
        for e in [EventFd::new().unwrap(), EventFd::blocking().unwrap()] {
            assert!(!e.wait(Some(Duration::ZERO)));
            e.notify();
            e.notify();
            assert!(e.wait(Some(Duration::from_secs(1))));
            e.clear();
            assert!(!e.wait(Some(Duration::ZERO)), "one clear takes every notification");
            e.clear(); // never blocks, even on the blocking one
        }
        assert!(EventFd::new().unwrap().nonblocking());
        assert!(!EventFd::blocking().unwrap().nonblocking());
    }
}

/// An epoll set: one descriptor that is readable while any descriptor in the set is,
/// so that a thread sleeping in [`wait_readable`] on a fixed list of descriptors also
/// wakes for ones added later (the UDP transport's multicast group sockets), and a
/// poller learns in one call which of them are ready.
#[derive(Debug)]
pub struct Epoll(OwnedFd);

impl Epoll {
    /// An empty set.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointers; on success it returns a new fd we own.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Adds `fd` (level-triggered, readable), reported by [`ready`](Self::ready) as `token`.
    pub fn add(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
        // SAFETY: both descriptors are open (one owned, one borrowed); `ev` is a live
        // epoll_event the kernel only reads.
        let rc = unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut ev) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Removes `fd` from the set (closing it removes it too).
    pub fn remove(&self, fd: BorrowedFd<'_>) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as in `add`; a descriptor not in the set is refused (ENOENT), harmlessly.
        unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_DEL, fd.as_raw_fd(), &mut ev) };
    }

    /// The tokens of the descriptors readable now (up to `out`'s capacity, at least 1),
    /// without waiting; `out` is cleared first.
    pub fn ready(&self, out: &mut Vec<u64>) -> io::Result<()> {
        out.clear();
        let max = out.capacity().clamp(1, 64);
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
        let n = libc::c_int::try_from(max).unwrap_or(64);
        // SAFETY: `evs` has room for `n` <= 64 events; timeout 0 never blocks.
        let rc = unsafe { libc::epoll_wait(self.0.as_raw_fd(), evs.as_mut_ptr(), n, 0) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted { Ok(()) } else { Err(e) };
        }
        let n = usize::try_from(rc).unwrap_or(0);
        out.extend(evs[..n].iter().map(|e| e.u64));
        Ok(())
    }
}

impl AsFd for Epoll {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(test)]
mod epoll_tests {
    use super::*;

    #[test]
    fn a_member_made_readable_wakes_the_set_and_is_named() {
        let ep = Epoll::new().unwrap();
        let (a, b) = (EventFd::new().unwrap(), EventFd::new().unwrap());
        ep.add(a.as_fd(), 7).unwrap();
        ep.add(b.as_fd(), 9).unwrap();
        let mut out = Vec::with_capacity(8);
        ep.ready(&mut out).unwrap();
        assert!(out.is_empty());
        assert!(!wait_readable(&[ep.as_fd()], Some(Duration::ZERO)).unwrap());
        b.notify();
        assert!(wait_readable(&[ep.as_fd()], Some(Duration::ZERO)).unwrap());
        ep.ready(&mut out).unwrap();
        assert_eq!(out, [9]);
        ep.remove(b.as_fd());
        ep.ready(&mut out).unwrap();
        assert!(out.is_empty());
    }
}
