//! The clocks a device reports: `CLOCK_MONOTONIC` (its "HCA clock", what completions are
//! stamped with) and `CLOCK_REALTIME`, in nanoseconds.

fn now_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given; both clocks always exist.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_ns() -> u64 {
    now_ns(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_REALTIME` in nanoseconds since the epoch.
pub fn realtime_ns() -> u64 {
    now_ns(libc::CLOCK_REALTIME)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_clocks_move_forward_and_the_wall_clock_is_after_2020() {
        let a = super::monotonic_ns();
        let b = super::monotonic_ns();
        assert!(b >= a && a > 0);
        assert!(super::realtime_ns() > 1_577_836_800 * 1_000_000_000);
    }
}
