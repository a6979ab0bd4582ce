//! `DeviceConfig::wake_boost`: the progress thread sleeps as a real-time thread
//! (`SCHED_FIFO`, so that a packet wakes it ahead of busy-polling threads) when the
//! process may, and as a normal one when the boost is off (the default).

use rnic_core::device::{Device, DeviceConfig};
use std::time::{Duration, Instant};

/// The scheduling policy (`/proc/self/task/TID/stat` field 41) of this process's thread
/// named `comm`.
fn policy_of(comm: &str) -> Option<u32> {
    for t in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        if std::fs::read_to_string(t.path().join("comm")).ok()?.trim() != comm {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
        // Fields after the command name, which is in parentheses and may hold spaces.
        let rest = &stat[stat.rfind(')')? + 2..];
        return rest.split(' ').nth(41 - 3)?.parse().ok();
    }
    None
}

/// The policy of `comm` once it is asleep (idle, past its spin), within a few seconds.
fn settled_policy(comm: &str, want: u32) -> Option<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let p = policy_of(comm);
        if p == Some(want) || Instant::now() > deadline {
            return p;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_progress_thread_sleeps_as_a_real_time_thread_only_when_asked() {
    const SCHED_OTHER: u32 = 0;
    const SCHED_FIFO: u32 = 1;
    let ip = "127.0.83.1".parse().unwrap();
    let plain = Device::open(DeviceConfig { pin_memory: false, ..DeviceConfig::new("boost0", ip) }).unwrap();
    assert_eq!(settled_policy("boost0-progress", SCHED_OTHER), Some(SCHED_OTHER), "the default is no boost");
    drop(plain);

    let allowed = rnic_io::cpu::set_realtime(true).is_ok() && rnic_io::cpu::set_realtime(false).is_ok();
    let ip = "127.0.83.2".parse().unwrap();
    let cfg = DeviceConfig { pin_memory: false, wake_boost: true, ..DeviceConfig::new("boost1", ip) };
    let boosted = Device::open(cfg).unwrap();
    if !allowed {
        // Without CAP_SYS_NICE or RLIMIT_RTPRIO the boost is quietly off, as documented.
        assert_eq!(settled_policy("boost1-progress", SCHED_OTHER), Some(SCHED_OTHER));
        eprintln!("skipped the real-time half: this process may not use SCHED_FIFO");
        return;
    }
    assert_eq!(settled_policy("boost1-progress", SCHED_FIFO), Some(SCHED_FIFO), "asleep as SCHED_FIFO");
    drop(boosted);
}
