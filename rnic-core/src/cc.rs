//! Congestion control as RoCEv2 NICs do it: DCQCN (Zhu et al., "Congestion Control for
//! Large-Scale RDMA Deployments", SIGCOMM 2015), sans-IO.
//!
//! - The **notification point** (the receiver) answers a congestion-experienced packet with
//!   a CNP to its sender QP, at most one per QP per `min_time_between_cnps`
//!   ([`CnpLimiter`], mlx5's `np/min_time_between_cnps`).
//! - The **reaction point** (the sender) keeps a rate per QP ([`RateState`]): a CNP cuts the
//!   current rate by `alpha / 2` and raises `alpha`; without CNPs `alpha` decays every
//!   `dce_tcp_rtt`, and the rate climbs back in three phases driven by a timer
//!   (`rpg_time_reset`) and a byte counter (`rpg_byte_reset`): fast recovery (halfway to
//!   the target), additive increase (`rpg_ai_rate`), hyper increase (`rpg_hai_rate`).
//!   A loss signal (a sequence NAK or a retransmission timeout) cuts the rate too, so a
//!   peer that sends no CNPs (Linux rxe) still gets a sender that backs off.
//! - A token bucket per QP ([`Pacer`]) turns the rate into "may this packet leave now, or
//!   when".
//!
//! Parameter names and defaults are mlx5's (`/sys/class/net/<if>/ecn/roce_rp/*`,
//! `roce_np/*`), scaled where a software NIC on loopback needs it (documented per field).
//! Nothing here reads a clock: time is an input, in nanoseconds.

use crate::Time;
use std::collections::HashMap;

/// Fixed-point scale of `alpha` (mlx5: 1024 = 1.0).
pub const ALPHA_ONE: u32 = 1024;

/// DCQCN's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DcqcnParams {
    /// The line rate a QP starts at and never exceeds, bytes/s (`rpg_max_rate`).
    pub max_rate: f64,
    /// The floor a QP is never cut below, bytes/s (`rpg_min_rate`: 1 Mbit/s).
    pub min_rate: f64,
    /// Additive increase step, bytes/s (`rpg_ai_rate`: 5 Mbit/s).
    pub ai_rate: f64,
    /// Hyper increase step, bytes/s (`rpg_hai_rate`: 50 Mbit/s).
    pub hai_rate: f64,
    /// Rate-increase timer, ns (`rpg_time_reset`: 300 us).
    pub time_reset_ns: u64,
    /// Rate-increase byte counter, bytes (`rpg_byte_reset`: 32767).
    pub byte_reset: u64,
    /// Timer or byte events before leaving fast recovery (`rpg_threshold`; the paper's F = 5).
    pub threshold: u32,
    /// Alpha update period without CNPs, ns (`dce_tcp_rtt`; the paper's K = 55 us).
    pub alpha_period_ns: u64,
    /// Alpha gain g = 1 / 2^gd (`rpg_gd`: 11 in mlx5 firmware's fixed point, the paper's
    /// g = 1/256 reads as 8).
    pub gd: u32,
    /// The most one CNP may cut, percent of the current rate (`rpg_min_dec_fac`: 50).
    pub min_dec_fac: u32,
}

impl DcqcnParams {
    /// mlx5's defaults at line rate `max_rate` bytes/s (the paper's F = 5 for the
    /// threshold, as mlx5's firmware uses).
    pub fn mlx5(max_rate: f64) -> DcqcnParams {
        const MBIT: f64 = 1e6 / 8.0;
        DcqcnParams {
            max_rate,
            min_rate: MBIT,
            ai_rate: 5.0 * MBIT,
            hai_rate: 50.0 * MBIT,
            time_reset_ns: 300_000,
            byte_reset: 32_767,
            threshold: 5,
            alpha_period_ns: 55_000,
            gd: 8,
            min_dec_fac: 50,
        }
    }
}

/// Which increase phase a QP is in (the paper's Figure 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// At line rate: nothing to recover.
    Line,
    /// Halfway to the target each event.
    FastRecovery,
    /// The target grows by `ai_rate` each event.
    AdditiveIncrease,
    /// The target grows by a multiple of `hai_rate` each event.
    HyperIncrease,
}

/// One QP's reaction point.
#[derive(Debug, Clone, PartialEq)]
pub struct RateState {
    /// Current rate, bytes/s (R_C).
    pub current: f64,
    /// Target rate, bytes/s (R_T).
    pub target: f64,
    /// Alpha, [`ALPHA_ONE`] = 1.0.
    pub alpha: u32,
    /// Timer events since the last cut (T).
    timer_events: u32,
    /// Byte-counter events since the last cut (BC).
    byte_events: u32,
    bytes: u64,
    next_increase: Option<Time>,
    next_alpha: Option<Time>,
    /// CNPs that cut this QP's rate.
    pub cnps_handled: u64,
    /// Loss signals that cut it.
    pub losses_handled: u64,
    /// The lowest current rate it has had, bytes/s.
    pub lowest: f64,
}

impl RateState {
    /// A QP at line rate (mlx5's `rate_to_set_on_first_cnp` 0: the first CNP cuts from there).
    pub fn new(p: &DcqcnParams) -> RateState {
        RateState {
            current: p.max_rate,
            target: p.max_rate,
            alpha: ALPHA_ONE,
            timer_events: 0,
            byte_events: 0,
            bytes: 0,
            next_increase: None,
            next_alpha: None,
            cnps_handled: 0,
            losses_handled: 0,
            lowest: p.max_rate,
        }
    }

    /// The increase phase.
    pub fn phase(&self, p: &DcqcnParams) -> Phase {
        if self.next_increase.is_none() && self.current >= p.max_rate {
            return Phase::Line;
        }
        let (hi, lo) = (self.timer_events.max(self.byte_events), self.timer_events.min(self.byte_events));
        if hi < p.threshold {
            Phase::FastRecovery
        } else if lo < p.threshold {
            Phase::AdditiveIncrease
        } else {
            Phase::HyperIncrease
        }
    }

    /// A CNP for this QP: R_T = R_C, R_C *= (1 - alpha/2) (at most `min_dec_fac`),
    /// alpha = (1 - g) alpha + g, the increase counters restart.
    pub fn on_cnp(&mut self, now: Time, p: &DcqcnParams) {
        self.cnps_handled += 1;
        self.cut(now, p);
        let g_alpha = self.alpha >> p.gd;
        self.alpha = (self.alpha - g_alpha + (ALPHA_ONE >> p.gd)).min(ALPHA_ONE);
    }

    /// A loss signal (sequence NAK, retransmission timeout): the same cut, alpha unchanged.
    pub fn on_loss(&mut self, now: Time, p: &DcqcnParams) {
        self.losses_handled += 1;
        self.cut(now, p);
    }

    fn cut(&mut self, now: Time, p: &DcqcnParams) {
        self.target = self.current;
        let factor = (f64::from(self.alpha) / f64::from(ALPHA_ONE) / 2.0).min(f64::from(p.min_dec_fac) / 100.0);
        self.current = (self.current * (1.0 - factor)).max(p.min_rate);
        self.lowest = self.lowest.min(self.current);
        self.timer_events = 0;
        self.byte_events = 0;
        self.bytes = 0;
        self.next_increase = Some(now + p.time_reset_ns);
        self.next_alpha = Some(now + p.alpha_period_ns);
    }

    /// `n` bytes sent: the byte counter may fire an increase.
    pub fn on_sent(&mut self, n: u64, p: &DcqcnParams) {
        if self.next_increase.is_none() {
            return;
        }
        self.bytes += n;
        while self.bytes >= p.byte_reset.max(1) {
            self.bytes -= p.byte_reset.max(1);
            self.byte_events = self.byte_events.saturating_add(1);
            self.increase(p);
        }
    }

    /// When `on_timer` wants to run next.
    pub fn next_timeout(&self) -> Option<Time> {
        match (self.next_increase, self.next_alpha) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs the alpha decay and the increase timer up to `now`.
    pub fn on_timer(&mut self, now: Time, p: &DcqcnParams) {
        while let Some(at) = self.next_alpha.filter(|&at| at <= now) {
            // No CNP for a period: alpha = (1 - g) alpha.
            self.alpha -= self.alpha >> p.gd;
            self.next_alpha = (self.alpha > 0 && self.next_increase.is_some()).then_some(at + p.alpha_period_ns);
        }
        while let Some(at) = self.next_increase.filter(|&at| at <= now) {
            self.timer_events = self.timer_events.saturating_add(1);
            self.next_increase = Some(at + p.time_reset_ns);
            self.increase(p);
        }
    }

    fn increase(&mut self, p: &DcqcnParams) {
        let (hi, lo) = (self.timer_events.max(self.byte_events), self.timer_events.min(self.byte_events));
        if hi >= p.threshold && lo >= p.threshold {
            // Hyper increase: i x R_HAI, i counting events past the threshold.
            self.target += f64::from(lo - p.threshold + 1) * p.hai_rate;
        } else if hi >= p.threshold {
            self.target += p.ai_rate;
        }
        self.target = self.target.min(p.max_rate);
        self.current = ((self.current + self.target) / 2.0).min(p.max_rate);
        if self.current >= p.max_rate * 0.999 {
            // Back at line rate: nothing more to recover, no timers.
            self.current = p.max_rate;
            self.target = p.max_rate;
            self.next_increase = None;
            self.next_alpha = None;
        }
    }
}

/// The notification point's rule: at most one CNP per QP per `min_gap_ns`.
#[derive(Debug, Clone, Default)]
pub struct CnpLimiter {
    min_gap_ns: u64,
    last: HashMap<u32, Time>,
    /// CE-marked packets seen (`np_ecn_marked_roce_packets`).
    pub marked: u64,
    /// CNPs allowed out (`np_cnp_sent`).
    pub sent: u64,
}

impl CnpLimiter {
    /// mlx5's `min_time_between_cnps` is 4 us by default.
    pub fn new(min_gap_ns: u64) -> CnpLimiter {
        CnpLimiter { min_gap_ns, ..CnpLimiter::default() }
    }

    /// A CE-marked packet for the sender QP `qpn` arrived at `now`: whether to send it a CNP.
    pub fn on_marked(&mut self, now: Time, qpn: u32) -> bool {
        self.marked += 1;
        let due = self.last.get(&qpn).is_none_or(|&t| now >= t + self.min_gap_ns);
        if due {
            self.last.insert(qpn, now);
            self.sent += 1;
        }
        due
    }

    /// Forgets a QP (destroyed).
    pub fn forget(&mut self, qpn: u32) {
        self.last.remove(&qpn);
    }
}

/// A token bucket at a QP's current rate: when may a packet of `n` bytes leave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pacer {
    /// Tokens in bytes (may go negative by one packet: a packet is never split).
    tokens: f64,
    last: Time,
    /// Largest burst, bytes.
    burst: f64,
}

impl Pacer {
    /// A full bucket of `burst` bytes at `now`.
    pub fn new(now: Time, burst: f64) -> Pacer {
        Pacer { tokens: burst, last: now, burst }
    }

    fn refill(&mut self, now: Time, rate: f64) {
        if now > self.last {
            self.tokens = (self.tokens + rate * (now - self.last) as f64 / 1e9).min(self.burst);
            self.last = now;
        }
    }

    /// `Ok` and the bytes are taken, or `Err(when)`: the earliest time they may leave.
    pub fn take(&mut self, now: Time, n: u64, rate: f64) -> Result<(), Time> {
        self.refill(now, rate);
        if self.tokens > 0.0 {
            self.tokens -= n as f64;
            return Ok(());
        }
        let wait = (-self.tokens + 1.0) / rate.max(1.0) * 1e9;
        // A float wait in ns, positive and at most a packet at the 1 B/s floor: it fits.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let wait = wait.ceil().min(1e18) as Time;
        Err(now + wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GBYTE: f64 = 1e9;

    #[test]
    fn the_first_cnp_halves_the_rate_and_alpha_stays_one() {
        let p = DcqcnParams::mlx5(GBYTE);
        let mut r = RateState::new(&p);
        assert_eq!(r.phase(&p), Phase::Line);
        r.on_cnp(0, &p);
        assert_eq!((r.current, r.target, r.alpha), (GBYTE / 2.0, GBYTE, ALPHA_ONE));
        assert_eq!(r.phase(&p), Phase::FastRecovery);
        // Alpha decays by g = 1/256 each 55 us without a CNP.
        r.on_timer(55_000, &p);
        assert_eq!(r.alpha, ALPHA_ONE - ALPHA_ONE / 256);
        // A second CNP cuts by the smaller alpha / 2 and raises alpha again.
        let before = r.current;
        let a = r.alpha;
        r.on_cnp(60_000, &p);
        let cut = 1.0 - f64::from(a) / f64::from(ALPHA_ONE) / 2.0;
        assert!((r.current - before * cut).abs() < 1.0, "{} vs {}", r.current, before * cut);
        assert_eq!(r.alpha, a - (a >> 8) + (ALPHA_ONE >> 8));
    }

    #[test]
    fn recovery_goes_fast_then_additive_then_hyper_back_to_line_rate() {
        let p = DcqcnParams::mlx5(GBYTE);
        let mut r = RateState::new(&p);
        r.on_cnp(0, &p);
        // Five timer events of fast recovery: halfway to the target each time.
        for i in 1..=4u64 {
            r.on_timer(i * 300_000, &p);
            assert_eq!(r.phase(&p), Phase::FastRecovery);
        }
        assert!((r.current - GBYTE * (1.0 - 0.5f64.powi(5))).abs() < 1.0, "{}", r.current);
        r.on_timer(5 * 300_000, &p);
        assert_eq!(r.phase(&p), Phase::AdditiveIncrease, "the timer alone reached F");
        // Bytes as well: hyper increase, and soon line rate, timers off.
        r.on_sent(6 * p.byte_reset, &p);
        let mut t = 6 * 300_000;
        while r.phase(&p) != Phase::Line {
            r.on_timer(t, &p);
            t += 300_000;
            assert!(t < 1_000_000_000, "never recovered: {r:?}");
        }
        assert_eq!((r.current, r.next_timeout()), (GBYTE, None));
    }

    #[test]
    fn a_loss_cuts_without_raising_alpha_and_the_floor_holds() {
        let p = DcqcnParams { min_rate: 1000.0, ..DcqcnParams::mlx5(GBYTE) };
        let mut r = RateState::new(&p);
        for i in 0..200 {
            r.on_loss(i, &p);
        }
        assert_eq!((r.current, r.alpha, r.losses_handled), (1000.0, ALPHA_ONE, 200));
    }

    #[test]
    fn the_notification_point_sends_one_cnp_per_qp_per_gap() {
        let mut np = CnpLimiter::new(4_000);
        assert!(np.on_marked(0, 0x11));
        assert!(!np.on_marked(3_999, 0x11));
        assert!(np.on_marked(1, 0x12), "another QP has its own gap");
        assert!(np.on_marked(4_000, 0x11));
        assert_eq!((np.marked, np.sent), (4, 3));
    }

    #[test]
    fn the_pacer_spaces_packets_at_the_rate() {
        let mut b = Pacer::new(0, 4096.0);
        assert!(b.take(0, 4096, 1e6).is_ok());
        let when = b.take(0, 4096, 1e6).unwrap_err();
        assert!((1_000..=1_100).contains(&when), "{when}");
        // 1 MB/s: 4096 bytes take 4.096 ms to earn.
        assert!(b.take(when, 4096, 1e6).is_ok());
        assert!(b.take(when + 4_000_000, 4096, 1e6).is_err(), "the bucket went negative by one packet");
        assert!(b.take(when + 4_096_000, 4096, 1e6).is_ok());
    }

    /// Two QPs through one bottleneck: a fluid queue of capacity C whose switch marks
    /// packets CE with RED's probability (0 below 5 KB of queue, rising to 1% at 200 KB,
    /// as DCQCN's paper configures it), so a QP is marked in proportion to the packets it
    /// sends; each marked QP gets a CNP at most every 50 us. The second QP starts at a
    /// tenth of the first's rate; over the second half of 400 ms they share the link fairly
    /// and keep it busy, and the queue stays bounded.
    #[test]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn two_qps_sharing_a_bottleneck_converge_to_fair_shares() {
        let c = 1.25e9; // 10 Gbit/s
        let p = DcqcnParams::mlx5(c);
        let mut qps = [RateState::new(&p), RateState::new(&p)];
        qps[1].current = c / 10.0;
        qps[1].target = c / 10.0;
        qps[1].next_increase = Some(0);
        let mut np = CnpLimiter::new(50_000);
        let dt = 1_000u64;
        let (kmin, kmax, pmax, mtu) = (5_000.0, 200_000.0, 0.01, 1024.0);
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut uniform = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut queue = 0.0f64;
        let mut max_queue: f64 = 0.0;
        let mut share = [0.0f64; 2];
        let total = 400_000_000u64;
        for step in 0..total / dt {
            let now = step * dt;
            let arrived: f64 = qps.iter().map(|q| q.current * dt as f64 / 1e9).sum();
            queue = (queue + arrived - c * dt as f64 / 1e9).max(0.0);
            max_queue = max_queue.max(queue);
            let pm = if queue <= kmin { 0.0 } else { (pmax * (queue - kmin) / (kmax - kmin)).min(1.0) };
            for (i, q) in qps.iter_mut().enumerate() {
                let sent = q.current * dt as f64 / 1e9;
                q.on_sent(sent as u64, &p);
                let marked = 1.0 - (1.0 - pm).powf(sent / mtu);
                if uniform() < marked && np.on_marked(now, i as u32) {
                    q.on_cnp(now, &p);
                }
                q.on_timer(now, &p);
                if now > total / 2 {
                    share[i] += sent;
                }
            }
        }
        let ratio = share[0] / share[1];
        assert!((0.75..1.33).contains(&ratio), "unfair: {share:?} ratio {ratio}");
        let used = (share[0] + share[1]) / (c * (total / 2) as f64 / 1e9);
        assert!(used > 0.8, "the bottleneck sat idle: {used}");
        assert!(max_queue < 4e6, "the queue grew without bound: {max_queue}");
    }
}
