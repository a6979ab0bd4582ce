//! An in-process fabric with virtual time: several engines, one wire, no threads.
//!
//! Every packet an engine emits gets its ICRC exactly as the UDP transport computes it
//! (IPv4 ID 0, DF), crosses the fabric after `latency`, is checked for its ICRC and
//! delivered. Time only moves when [`Fabric::step`] jumps to the next event (a delivery
//! or a timer), so a run is exactly reproducible (quinn-proto's test harness and
//! turmoil are the models).
//!
//! A [`Faults`] chain sees every packet put on the wire and may pass, drop, delay,
//! duplicate, reorder or corrupt it ([`crate::faults`]); its randomness comes from the
//! fabric's seed, so a failing run is replayed exactly by its seed.
//!
//! ```
//! use rnic_core::fabric::Fabric;
//! use rnic_core::faults::Fault;
//!
//! let mut fab = Fabric::new(2_000).with_seed(7); // 2 us per hop, seed 7
//! fab.add_rule(Fault::drop().probability(0.05).requests());
//! // fab.add(engine_a); fab.add(engine_b); ... fab.run_until(deadline);
//! ```

use crate::engine::{Engine, TxPacket};
use crate::faults::Faults;
use crate::Time;
use rnic_wire::icrc::IcrcContext;
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering;

pub use crate::faults::{Rule, Verdict, Wire};

#[derive(Debug, PartialEq, Eq)]
struct InFlight {
    at: Time,
    seq: u64,
    pkt: Wire,
}

impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Min-heap on (time, sequence).
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// A record of one packet delivered or dropped, for tests and tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// When it was sent.
    pub at: Time,
    /// The packet.
    pub pkt: Wire,
    /// What the rules decided.
    pub verdict: Verdict,
}

/// The fabric.
pub struct Fabric {
    engines: Vec<Engine>,
    wire: BinaryHeap<InFlight>,
    seq: u64,
    now: Time,
    latency: Time,
    faults: Faults,
    /// Every packet sent, in order, with its verdict (when tracing is on).
    pub trace: Option<Vec<Trace>>,
    scratch: Vec<TxPacket>,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric").field("now", &self.now).field("in_flight", &self.wire.len()).finish()
    }
}

impl Fabric {
    /// An empty fabric whose wire delays every packet by `latency` ns.
    pub fn new(latency: Time) -> Fabric {
        Fabric {
            engines: Vec::new(),
            wire: BinaryHeap::new(),
            seq: 0,
            now: 0,
            latency,
            faults: Faults::new(0),
            trace: None,
            scratch: Vec::new(),
        }
    }

    /// Attaches an engine; returns its index.
    pub fn add(&mut self, e: Engine) -> usize {
        self.engines.push(e);
        self.engines.len() - 1
    }

    /// An engine.
    pub fn engine(&mut self, i: usize) -> &mut Engine {
        &mut self.engines[i]
    }

    /// Current virtual time.
    pub fn now(&self) -> Time {
        self.now
    }

    /// The same fabric with fault randomness seeded by `seed` (call before adding rules).
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Fabric {
        self.faults = Faults::new(seed);
        self
    }

    /// Appends a rule to the fault chain.
    pub fn add_rule(&mut self, r: impl Rule + 'static) {
        self.faults.add(r);
    }

    /// Replaces the fault chain.
    pub fn set_faults(&mut self, faults: Faults) {
        self.faults = faults;
    }

    /// The fault chain (its statistics and log).
    pub fn faults(&mut self) -> &mut Faults {
        &mut self.faults
    }

    /// Puts a hand-made packet (BTH..ICRC, the ICRC bytes filled here) on the wire as if
    /// `pkt.src` had sent it, past the fault rules: how tests play a hostile or buggy peer.
    pub fn inject(&mut self, mut pkt: Wire) {
        let ctx = IcrcContext::new(pkt.src, pkt.dst, pkt.src_port, rnic_wire::ROCEV2_UDP_PORT);
        if ctx.fill(&mut pkt.data).is_ok() {
            let at = self.now + self.latency;
            self.put(at, pkt);
        }
    }

    /// Packets on the wire.
    pub fn in_flight(&self) -> usize {
        self.wire.len()
    }

    /// Collects what every engine wants to send and puts it on the wire.
    fn collect(&mut self) {
        for i in 0..self.engines.len() {
            let src = self.engines[i].config().local_ip;
            // Paced output (READ responses) comes a burst per drain: on virtual time all
            // of it leaves now.
            while self.engines[i].has_pending_transmit() {
                self.engines[i].drain_transmits(&mut self.scratch);
            }
            let mut batch: Vec<TxPacket> = Vec::with_capacity(self.scratch.len());
            for p in self.scratch.drain(..) {
                if p.train > 1 {
                    batch.extend(p.split_train());
                } else {
                    batch.push(p);
                }
            }
            for mut tx in batch {
                // A zero-copy packet carries its payload apart (TxPacket::payload): the
                // wire gets the whole packet, as the UDP transport's iovecs make it.
                tx.make_contiguous();
                let mut data = tx.data;
                let ctx = IcrcContext::new(src, tx.dst, tx.src_port, rnic_wire::ROCEV2_UDP_PORT);
                if ctx.fill(&mut data).is_err() {
                    continue;
                }
                let pkt = Wire { src, dst: tx.dst, src_port: tx.src_port, data, ce: false };
                let at = self.now + self.latency;
                let traced = self.trace.is_some().then(|| pkt.clone());
                let (wire, seq) = (&mut self.wire, &mut self.seq);
                let verdict = self.faults.apply(self.now, pkt, |extra, p| {
                    *seq += 1;
                    wire.push(InFlight { at: at + extra, seq: *seq, pkt: p });
                });
                if let (Some(t), Some(pkt)) = (&mut self.trace, traced) {
                    t.push(Trace { at: self.now, pkt, verdict });
                }
            }
        }
    }

    fn put(&mut self, at: Time, pkt: Wire) {
        self.seq += 1;
        self.wire.push(InFlight { at, seq: self.seq, pkt });
    }

    /// The time of the next event (delivery or timer), if any.
    pub fn next_event(&mut self) -> Option<Time> {
        self.collect();
        let wire = self.wire.peek().map(|f| f.at);
        let timers = self.engines.iter().filter_map(Engine::poll_timeout).min();
        let held = self.faults.next_release();
        // Work requests queued between steps (`Engine::queue_send`) go out now.
        let queued = self.engines.iter().any(Engine::has_queued).then_some(self.now);
        [wire, timers, held, queued].into_iter().flatten().min()
    }

    /// Advances to the next event and handles everything due then. Returns false when
    /// nothing is left to happen.
    pub fn step(&mut self) -> bool {
        let Some(t) = self.next_event() else { return false };
        self.now = self.now.max(t);
        let (now, latency) = (self.now, self.latency);
        // As a device round does: what was queued since the last step leaves first.
        for e in &mut self.engines {
            if e.has_queued() {
                e.transmit_queued(now);
            }
        }
        let mut released = Vec::new();
        self.faults.release_due(now, |p| released.push(p));
        for p in released {
            self.put(now + latency, p);
        }
        while self.wire.peek().is_some_and(|f| f.at <= self.now) {
            let f = self.wire.pop().expect("peeked");
            self.deliver(f.pkt);
        }
        for e in &mut self.engines {
            if e.poll_timeout().is_some_and(|d| d <= self.now) {
                e.handle_timeout(self.now);
            }
        }
        self.collect();
        true
    }

    fn deliver(&mut self, pkt: Wire) {
        let now = self.now;
        if pkt.dst.is_multicast() {
            // A multicast datagram reaches every node whose QPs joined the group, its
            // sender's too (as IP_MULTICAST_LOOP does on a host).
            let ctx = IcrcContext::new(pkt.src, pkt.dst, pkt.src_port, rnic_wire::ROCEV2_UDP_PORT);
            let good = ctx.verify(&pkt.data).is_ok();
            for e in self.engines.iter_mut().filter(|e| e.is_mcast_member(pkt.dst)) {
                if good {
                    e.handle_multicast(now, pkt.src, pkt.dst, &pkt.data, pkt.ce);
                } else {
                    e.counters().icrc_err.fetch_add(1, Ordering::Relaxed);
                }
            }
            return;
        }
        let Some(e) = self.engines.iter_mut().find(|e| e.config().local_ip == pkt.dst) else { return };
        let ctx = IcrcContext::new(pkt.src, pkt.dst, pkt.src_port, rnic_wire::ROCEV2_UDP_PORT);
        if ctx.verify(&pkt.data).is_err() {
            // IBA C9-3: a packet with a bad ICRC is dropped silently.
            e.counters().icrc_err.fetch_add(1, Ordering::Relaxed);
            return;
        }
        e.handle_packet_ecn(now, pkt.src, &pkt.data, pkt.ce);
    }

    /// Steps until nothing is left to happen or virtual time passes `deadline`.
    /// Returns the number of steps taken.
    pub fn run_until(&mut self, deadline: Time) -> usize {
        let mut n = 0;
        while self.next_event().is_some_and(|t| t <= deadline) {
            self.step();
            n += 1;
        }
        n
    }

    /// Steps until `done` holds or nothing is left to happen; returns whether `done` held.
    pub fn run_while(&mut self, mut done: impl FnMut(&mut Fabric) -> bool, deadline: Time) -> bool {
        loop {
            if done(self) {
                return true;
            }
            match self.next_event() {
                Some(t) if t <= deadline => {
                    self.step();
                }
                _ => return done(self),
            }
        }
    }
}
