//! Where a ping-pong hop's time goes, from timestamp counters read at fixed steps of one
//! thread's path (feature `hop-trace`; without it every function here is empty).
//!
//! A hop, on the thread that answers: the application sees the peer's data
//! ([`seen`], which also starts the measurement), reaps its completion, posts its
//! answer, runs a device round that builds the answer, drains the engine's output (the
//! held ACK joins it) and sends it; then, until the next answer arrives, nothing is
//! measured; from the `recvmsg` that returns it, the round checks each packet's ICRC and
//! hands it to the engine, ends, and the application sees the data again. Each step's
//! time is what passed since the previous mark, on this thread, so the steps add up to
//! the user-space and system-call time of a hop, minus the wait for the peer.
//!
//! `cargo run --release -p rnic-tools --features hop-trace -- perf write_lat -s 8`
//! prints the table at the end of each side's run.

/// The steps, by the point each ends at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Step {
    /// The round that received the peer's packets ended -> the application saw the data.
    Seen,
    /// -> the application reaped its send completions.
    Reaped,
    /// -> `post_send` returned (validation, the MTPT, queueing into the engine).
    Posted,
    /// -> the device round started (its lock, its clock read).
    RoundStarted,
    /// -> the engine built the queued request packet.
    RequestBuilt,
    /// -> the engine's output was drained (held ACKs built and added).
    Drained,
    /// -> the transport called the kernel (ICRCs filled, iovecs and headers built).
    SendCalled,
    /// The `sendmsg`/`sendmmsg` call itself (on loopback it runs the receiver's stack).
    Send,
    /// The rest of the sending round (an empty receive, timers), off the critical path.
    RoundTail,
    /// The `recvmsg` that returned packets -> one packet's ICRC checked.
    IcrcChecked,
    /// -> the engine handled that packet (placement, completions, held ACK).
    Handled,
    /// -> the receiving round's output (holding its ACK) and bookkeeping done.
    RoundEnded,
}

/// Every step, in hop order.
pub const STEPS: [Step; 12] = [
    Step::Reaped,
    Step::Posted,
    Step::RoundStarted,
    Step::RequestBuilt,
    Step::Drained,
    Step::SendCalled,
    Step::Send,
    Step::RoundTail,
    Step::IcrcChecked,
    Step::Handled,
    Step::RoundEnded,
    Step::Seen,
];

impl Step {
    /// What the step covers, for the table.
    pub fn describe(self) -> &'static str {
        match self {
            Step::Seen => "round end -> application sees the data",
            Step::Reaped => "reap send completions",
            Step::Posted => "post_send (validate, MTPT, queue)",
            Step::RoundStarted => "round start (lock, clock)",
            Step::RequestBuilt => "build the request packet",
            Step::Drained => "drain output (held ACK)",
            Step::SendCalled => "transport: ICRCs, iovecs",
            Step::Send => "sendmsg (kernel)",
            Step::RoundTail => "rest of the sending round (off path)",
            Step::IcrcChecked => "recvmsg return -> ICRC checked, per packet",
            Step::Handled => "engine handles the packet, per packet",
            Step::RoundEnded => "receiving round's end (hold ACK)",
        }
    }
}

// Compiled (and so type-checked by every build and `cargo test`) with or without the
// feature; without it nothing calls it.
mod imp {
    #![allow(unsafe_code)]
    #![cfg_attr(not(feature = "hop-trace"), allow(dead_code))]
    use super::Step;
    use std::cell::Cell;

    thread_local! {
        static ON: Cell<bool> = const { Cell::new(false) };
        static LAST: Cell<u64> = const { Cell::new(0) };
        // One cell per step: a mark touches two words, not two 96-byte arrays (whose copies
        // the next step would be charged for).
        static SUM: [Cell<u64>; 12] = const { [const { Cell::new(0) }; 12] };
        static COUNT: [Cell<u64>; 12] = const { [const { Cell::new(0) }; 12] };
    }

    #[inline]
    pub(super) fn ticks() -> u64 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: RDTSC has no memory effects; every x86_64 CPU has it.
        unsafe {
            std::arch::x86_64::_rdtsc()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            use std::sync::OnceLock;
            static T0: OnceLock<std::time::Instant> = OnceLock::new();
            u64::try_from(T0.get_or_init(std::time::Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX)
        }
    }

    pub(super) fn mark(s: Step) {
        let t = ticks();
        if ON.with(Cell::get) {
            let d = t.saturating_sub(LAST.with(Cell::get));
            let i = s as usize;
            SUM.with(|c| c[i].set(c[i].get() + d));
            COUNT.with(|c| c[i].set(c[i].get() + 1));
        }
        LAST.with(|c| c.set(t));
    }

    pub(super) fn set_on(on: bool) {
        ON.with(|c| c.set(on));
        LAST.with(|c| c.set(ticks()));
    }

    pub(super) fn take() -> ([u64; 12], [u64; 12]) {
        let take = |c: &[Cell<u64>; 12]| std::array::from_fn(|i| c[i].take());
        (SUM.with(take), COUNT.with(take))
    }
}

/// Whether the tracer is compiled in.
pub const ENABLED: bool = cfg!(feature = "hop-trace");

/// Charges the time since this thread's previous mark to `s`, if measuring.
#[inline(always)]
pub fn mark(s: Step) {
    #[cfg(feature = "hop-trace")]
    imp::mark(s);
    #[cfg(not(feature = "hop-trace"))]
    let _ = s;
}

/// Starts measuring on this thread (a `recvmsg` returned packets: the hop's receiving
/// part begins).
#[inline(always)]
pub fn start() {
    #[cfg(feature = "hop-trace")]
    imp::set_on(true);
}

/// Stops measuring on this thread (the answer is sent: what follows is waiting).
#[inline(always)]
pub fn stop() {
    #[cfg(feature = "hop-trace")]
    imp::set_on(false);
}

/// The application saw the peer's data: ends the receiving part and starts the sending
/// part of the next hop.
#[inline(always)]
pub fn seen() {
    mark(Step::Seen);
    start();
}

/// This thread's steps so far, as (step, mean nanoseconds, count), and resets them.
/// Empty without the feature. Nanoseconds from the timestamp counter, calibrated here
/// against the monotonic clock over 20 ms.
pub fn take() -> Vec<(Step, f64, u64)> {
    #[cfg(feature = "hop-trace")]
    {
        let (sum, count) = imp::take();
        let (t0, c0) = (std::time::Instant::now(), imp::ticks());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let per_ns = imp::ticks().saturating_sub(c0) as f64 / t0.elapsed().as_nanos().max(1) as f64;
        STEPS
            .iter()
            .filter(|s| count[**s as usize] > 0)
            .map(|&s| (s, sum[s as usize] as f64 / count[s as usize] as f64 / per_ns.max(1e-9), count[s as usize]))
            .collect()
    }
    #[cfg(not(feature = "hop-trace"))]
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Marks count only between `start` and `stop`, each to its step; without the
    /// feature nothing is recorded at all.
    #[test]
    fn steps_count_only_while_measuring() {
        mark(Step::Posted);
        start();
        mark(Step::Posted);
        mark(Step::Send);
        mark(Step::Send);
        stop();
        mark(Step::Handled);
        let got: Vec<(Step, u64)> = take().into_iter().map(|(s, _, n)| (s, n)).collect();
        if ENABLED {
            assert_eq!(got, [(Step::Posted, 1), (Step::Send, 2)]);
            assert!(take().is_empty(), "take resets");
        } else {
            assert!(got.is_empty());
        }
    }
}
