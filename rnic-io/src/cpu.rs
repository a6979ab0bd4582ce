//! CPU placement of the calling thread.

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
