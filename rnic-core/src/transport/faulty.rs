//! Fault injection as a transport wrapping another one, so that every transport gets it:
//! each packet's ICRC is filled first (for IPv4 ID 0 with DF, which both transports send
//! a sealed packet with), then the fault chain runs on it (after the ICRC, so that a
//! corrupted packet fails its check at the receiver) and may drop, duplicate, corrupt,
//! mark CE, hold or delay it; what it lets through goes to the inner transport's
//! [`Transport::put`] one packet at a time (no GSO), now or when due.

use super::Transport;
use crate::counters::Counters;
use crate::engine::{Engine, TxPacket};
use crate::faults::{FaultHandle, Wire};
use crate::Time;
use rnic_wire::icrc::IcrcContext;
use rnic_wire::ROCEV2_UDP_PORT;
use std::collections::BinaryHeap;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

/// A packet the fault chain delays, in send order.
struct Delayed {
    at: Time,
    seq: u64,
    wire: Wire,
}
impl PartialEq for Delayed {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Delayed {}
impl PartialOrd for Delayed {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Delayed {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq)) // min-heap
    }
}

/// Another transport with a fault chain on everything it sends.
pub(crate) struct Faulty {
    inner: Box<dyn Transport>,
    faults: FaultHandle,
    delayed: BinaryHeap<Delayed>,
    seq: u64,
}

impl Faulty {
    pub(crate) fn new(inner: Box<dyn Transport>, faults: FaultHandle) -> Faulty {
        Faulty { inner, faults, delayed: BinaryHeap::new(), seq: 0 }
    }
}

impl Faulty {
    /// One packet through the rules (a train's packets come one by one).
    fn send_one(&mut self, now: Time, p: &mut TxPacket, counters: &Counters) {
        let src = self.inner.local_ip(p.dst);
        let src_port = self.inner.src_port(p);
        p.make_contiguous();
        if IcrcContext::new(src, p.dst, src_port, ROCEV2_UDP_PORT).fill(&mut p.data).is_err() {
            counters.send_err.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let w = Wire { src, dst: p.dst, src_port, data: p.data.clone(), ce: false };
        let mut later = Vec::new();
        let inner = &mut self.inner;
        self.faults.lock().apply(now, w, |extra, w| {
            if extra == 0 {
                inner.put(now, w, counters);
            } else {
                later.push((now.saturating_add(extra), w));
            }
        });
        for (at, wire) in later {
            self.seq += 1;
            self.delayed.push(Delayed { at, seq: self.seq, wire });
        }
    }
}

impl Transport for Faulty {
    fn send(&mut self, now: Time, batch: &mut [TxPacket], counters: &Counters) {
        for p in batch.iter_mut() {
            if p.train > 1 {
                // The rules take packets one by one.
                let train = std::mem::replace(p, TxPacket::new(p.dst, p.src_port, Vec::new()));
                for mut one in train.split_train() {
                    self.send_one(now, &mut one, counters);
                }
            } else {
                self.send_one(now, p, counters);
            }
        }
        self.inner.send(now, &mut [], counters);
    }

    fn release(&mut self, now: Time, counters: &Counters) {
        let mut due = Vec::new();
        while self.delayed.peek().is_some_and(|d| d.at <= now) {
            due.push(self.delayed.pop().expect("peeked").wire);
        }
        self.faults.lock().release_due(now, |w| due.push(w));
        for w in due {
            self.inner.put(now, w, counters);
        }
        self.inner.release(now, counters);
    }

    fn next_due(&self) -> Option<Time> {
        let held = self.faults.lock().next_release();
        [self.delayed.peek().map(|d| d.at), held, self.inner.next_due()].into_iter().flatten().min()
    }

    fn recv(&mut self, max: usize) -> usize {
        self.inner.recv(max)
    }

    fn deliver(&mut self, i: usize, engine: &mut Engine, now: u64) -> usize {
        self.inner.deliver(i, engine, now)
    }

    fn wake_fds(&self) -> io::Result<Vec<OwnedFd>> {
        self.inner.wake_fds()
    }

    fn flush(&self) {
        self.inner.flush();
    }

    fn put(&mut self, now: Time, w: Wire, counters: &Counters) {
        self.inner.put(now, w, counters);
    }

    fn local_ip(&self, dst: std::net::IpAddr) -> std::net::IpAddr {
        self.inner.local_ip(dst)
    }

    fn src_port(&self, p: &TxPacket) -> u16 {
        self.inner.src_port(p)
    }

    fn join(&mut self, group: std::net::IpAddr) -> std::io::Result<()> {
        self.inner.join(group)
    }

    fn leave(&mut self, group: std::net::IpAddr) {
        self.inner.leave(group);
    }

    fn maintain(&mut self, now: Time, engine: &mut Engine) {
        self.inner.maintain(now, engine);
    }
}
