//! CPU placement of the calling thread, and how crowded the CPUs are.

use std::io;

/// Restricts the calling thread to CPU `cpu` (`sched_setaffinity`), as `taskset` does for
/// a benchmark: two busy-polling threads of a ping-pong must not share one CPU.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "CPU number beyond CPU_SETSIZE"));
    }
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is valid; CPU_SET writes
    // bit `cpu`, checked above to be inside the set; sched_setaffinity reads `size_of`
    // bytes of the set for thread 0 (the caller).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), std::ptr::addr_of!(set))
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Moves the calling thread to real-time scheduling (`SCHED_FIFO`, priority 1, reset on
/// fork) or back to the normal policy (`SCHED_OTHER`). Real time needs `CAP_SYS_NICE` or
/// an `RLIMIT_RTPRIO` of at least 1: `EPERM` otherwise.
pub fn set_realtime(realtime: bool) -> io::Result<()> {
    let (policy, priority) =
        if realtime { (libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, 1) } else { (libc::SCHED_OTHER, 0) };
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: `param` is a valid sched_param the call only reads; pid 0 is the caller.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// How many CPUs the calling thread may run on (`sched_getaffinity`); 1 if that fails.
pub fn available() -> usize {
    // SAFETY: an all-zero cpu_set_t is a valid empty set; sched_getaffinity writes at most
    // `size_of` bytes into it for thread 0 (the caller); CPU_COUNT only reads it.
    let n = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return 1;
        }
        libc::CPU_COUNT(&set)
    };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// The threads runnable on the whole host at this moment, the caller included (the
/// kernel's `nr_running`: `/proc/loadavg`'s fourth field before the slash); `None` if it
/// cannot be read.
pub fn runnable() -> Option<usize> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    parse_runnable(&s)
}

fn parse_runnable(loadavg: &str) -> Option<usize> {
    loadavg.split_whitespace().nth(3)?.split('/').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runnable_threads_come_from_loadavg() {
        assert_eq!(parse_runnable("1.72 1.40 2.29 3/78 2190\n"), Some(3));
        assert_eq!(parse_runnable("1.72 1.40 2.29"), None);
        assert_eq!(parse_runnable("1 2 3 x/78 4"), None);
        // This thread is running while it asks.
        assert!(runnable().is_some_and(|n| n >= 1));
        assert!(available() >= 1);
    }
}
