//! Fault injection: rules that decide the fate of every packet put on a wire.
//!
//! The same [`Faults`] chain runs inside the deterministic [`Fabric`](crate::fabric::Fabric)
//! (virtual time: a run is reproducible from its seed) and on the UDP transport of a
//! [`Device`](crate::device::Device) (real time: the rules judge each packet as it leaves).
//! A rule is a predicate over the packet ([`Fault`]'s builder methods: direction, opcode,
//! requests or responses, PSN, QPN, the nth match, a probability) and a verdict (pass,
//! drop, delay, duplicate, reorder, corrupt one bit so that the ICRC fails). The first rule
//! that does not pass decides.
//!
//! ```
//! use rnic_core::faults::{Fault, Faults};
//! use rnic_wire::Opcode;
//!
//! let mut faults = Faults::new(42); // the seed makes every probability reproducible
//! // Lose the first ACK, then 10% of everything, and duplicate every READ request once.
//! faults.add(Fault::drop().opcode(Opcode::RC_ACKNOWLEDGE).nth(1));
//! faults.add(Fault::drop().probability(0.10));
//! faults.add(Fault::duplicate(50_000).opcode(Opcode::RC_RDMA_READ_REQUEST));
//! ```
//!
//! Any `FnMut(Time, &Wire) -> Verdict` is a rule too, for predicates the builder lacks.

use crate::Time;
use rnic_wire::bth::{self, BthRepr};
use rnic_wire::roce::{RocePacket, RoceRepr};
use rnic_wire::{Opcode, Psn};
use std::collections::VecDeque;
use std::net::IpAddr;

/// A packet on a wire: BTH..ICRC with the ICRC filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wire {
    /// Sender's address.
    pub src: IpAddr,
    /// Receiver's address.
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// BTH..ICRC.
    pub data: Vec<u8>,
    /// ECN congestion-experienced in the IP header (a switch's mark; the ICRC does not
    /// cover it, IBA Annex A17.3.3).
    pub ce: bool,
}

impl Wire {
    /// The packet's BTH, if it has one.
    pub fn bth(&self) -> Option<BthRepr> {
        let p = bth::Packet::new_checked(&self.data[..]).ok()?;
        BthRepr::parse(&p).ok()
    }

    /// The opcode (first byte), if the packet has one.
    pub fn opcode(&self) -> Option<Opcode> {
        self.data.first().map(|&b| Opcode(b))
    }

    /// A one-line description (`RC SEND_FIRST psn 0x000010 qp 0x11 ...`), or a hex note
    /// when the packet does not parse.
    pub fn describe(&self) -> String {
        match RocePacket::new_checked(&self.data[..]).and_then(|p| RoceRepr::parse(&p)) {
            Ok(r) => format!("{} -> {} {r}", self.src, self.dst),
            Err(e) => format!("{} -> {} unparsable ({e})", self.src, self.dst),
        }
    }
}

/// What happens to a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Let the next rule decide (deliver normally if none does).
    Pass,
    /// Lose the packet.
    Drop,
    /// Deliver after this much extra time.
    Delay(Time),
    /// Deliver it and a copy `after` later.
    Duplicate {
        /// Extra delay of the copy.
        after: Time,
    },
    /// Hold the packet back until the next packet between the same two hosts has been
    /// sent, so that it arrives after that one (or until `max_hold` has passed).
    Reorder {
        /// Longest hold when no later packet comes.
        max_hold: Time,
    },
    /// Flip one bit (the ICRC will fail at the receiver, which must drop it).
    Corrupt {
        /// Bit index into the packet (modulo its length).
        bit: usize,
    },
    /// Deliver it with ECN congestion-experienced set in its IP header, as a congested
    /// switch marks a packet (the receiver's notification point answers with a CNP).
    MarkCe,
}

impl Verdict {
    /// A short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Drop => "drop",
            Verdict::Delay(_) => "delay",
            Verdict::Duplicate { .. } => "duplicate",
            Verdict::Reorder { .. } => "reorder",
            Verdict::Corrupt { .. } => "corrupt",
            Verdict::MarkCe => "mark-ce",
        }
    }
}

/// A fault-injection rule: sees every packet, decides its fate.
pub trait Rule: Send {
    /// Decides the fate of `pkt` at time `now`.
    fn judge(&mut self, now: Time, pkt: &Wire) -> Verdict;

    /// Gives the rule its own random stream, derived from the chain's seed.
    fn seed(&mut self, _seed: u64) {}
}

impl<F: FnMut(Time, &Wire) -> Verdict + Send> Rule for F {
    fn judge(&mut self, now: Time, pkt: &Wire) -> Verdict {
        self(now, pkt)
    }
}

/// A small, fast, seedable generator (SplitMix64): reproducible everywhere, no dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `p` (clamped to 0..=1).
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        if p >= 1.0 {
            return true;
        }
        // 53 random bits as a float in [0, 1).
        #[allow(clippy::cast_precision_loss)]
        let x = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        x < p
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// Which packets a [`Fault`] applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Requests,
    Responses,
}

/// What a [`Fault`] does when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Drop,
    Delay(Time),
    Duplicate(Time),
    Reorder(Time),
    /// A random bit that the ICRC covers.
    Corrupt,
    CorruptBit(usize),
    MarkCe,
}

/// A rule built from a predicate and an action: `Fault::drop().opcode(..).nth(2)`.
///
/// Predicates combine with AND. Counting (`nth`, `first`) is over the packets that
/// match every other predicate, before the probability is drawn; `times` caps how often
/// the rule fires.
#[derive(Debug, Clone)]
pub struct Fault {
    action: Action,
    src: Option<IpAddr>,
    dst: Option<IpAddr>,
    opcodes: Vec<Opcode>,
    kind: Option<Kind>,
    psn: Option<(Psn, u32)>,
    qpn: Option<u32>,
    nth: Option<u64>,
    first: Option<u64>,
    probability: f64,
    times: Option<u64>,
    matched: u64,
    fired: u64,
    rng: Rng,
}

impl Fault {
    fn new(action: Action) -> Fault {
        Fault {
            action,
            src: None,
            dst: None,
            opcodes: Vec::new(),
            kind: None,
            psn: None,
            qpn: None,
            nth: None,
            first: None,
            probability: 1.0,
            times: None,
            matched: 0,
            fired: 0,
            rng: Rng::new(0),
        }
    }

    /// Lose the packet.
    pub fn drop() -> Fault {
        Fault::new(Action::Drop)
    }

    /// Deliver it `extra` ns late.
    pub fn delay(extra: Time) -> Fault {
        Fault::new(Action::Delay(extra))
    }

    /// Deliver it, and a copy `after` ns later.
    pub fn duplicate(after: Time) -> Fault {
        Fault::new(Action::Duplicate(after))
    }

    /// Let the next packet between the same hosts overtake it (held at most `max_hold` ns).
    pub fn reorder(max_hold: Time) -> Fault {
        Fault::new(Action::Reorder(max_hold))
    }

    /// Flip one random bit that the ICRC covers, so that the receiver must drop it.
    pub fn corrupt() -> Fault {
        Fault::new(Action::Corrupt)
    }

    /// Flip bit `bit` (modulo the packet's length in bits).
    pub fn corrupt_bit(bit: usize) -> Fault {
        Fault::new(Action::CorruptBit(bit))
    }

    /// Mark the packet ECN congestion-experienced, as a congested switch would: it is
    /// delivered, and the receiver's notification point sends its sender a CNP.
    pub fn mark_ce() -> Fault {
        Fault::new(Action::MarkCe)
    }

    /// Only packets sent by `ip`.
    #[must_use]
    pub fn from(mut self, ip: IpAddr) -> Fault {
        self.src = Some(ip);
        self
    }

    /// Only packets sent to `ip`.
    #[must_use]
    pub fn to(mut self, ip: IpAddr) -> Fault {
        self.dst = Some(ip);
        self
    }

    /// Only packets with this opcode (call again to allow several).
    #[must_use]
    pub fn opcode(mut self, op: Opcode) -> Fault {
        self.opcodes.push(op);
        self
    }

    /// Only requests (SEND, WRITE, READ request, atomics).
    #[must_use]
    pub fn requests(mut self) -> Fault {
        self.kind = Some(Kind::Requests);
        self
    }

    /// Only responses (ACK/NAK, READ responses, atomic ACKs).
    #[must_use]
    pub fn responses(mut self) -> Fault {
        self.kind = Some(Kind::Responses);
        self
    }

    /// Only the packet with this PSN.
    #[must_use]
    pub fn psn(self, psn: u32) -> Fault {
        self.psn_range(psn, 1)
    }

    /// Only packets with a PSN in `first .. first + count` (24-bit, wrapping).
    #[must_use]
    pub fn psn_range(mut self, first: u32, count: u32) -> Fault {
        self.psn = Some((Psn::new(first), count));
        self
    }

    /// Only packets for destination QP `qpn`.
    #[must_use]
    pub fn qpn(mut self, qpn: u32) -> Fault {
        self.qpn = Some(qpn & 0x00FF_FFFF);
        self
    }

    /// Only the `n`th matching packet (from 1).
    #[must_use]
    pub fn nth(mut self, n: u64) -> Fault {
        self.nth = Some(n);
        self
    }

    /// Only the first `n` matching packets.
    #[must_use]
    pub fn first(mut self, n: u64) -> Fault {
        self.first = Some(n);
        self
    }

    /// Fire with probability `p` for each matching packet (drawn from the seeded stream).
    #[must_use]
    pub fn probability(mut self, p: f64) -> Fault {
        self.probability = p;
        self
    }

    /// Fire at most `n` times.
    #[must_use]
    pub fn times(mut self, n: u64) -> Fault {
        self.times = Some(n);
        self
    }

    /// How many packets matched the predicates so far.
    pub fn matched(&self) -> u64 {
        self.matched
    }

    /// How many times the rule fired.
    pub fn fired(&self) -> u64 {
        self.fired
    }

    fn matches(&self, pkt: &Wire) -> bool {
        if self.src.is_some_and(|s| s != pkt.src) || self.dst.is_some_and(|d| d != pkt.dst) {
            return false;
        }
        let needs_bth = !self.opcodes.is_empty() || self.kind.is_some() || self.psn.is_some() || self.qpn.is_some();
        if !needs_bth {
            return true;
        }
        let Some(bth) = pkt.bth() else { return false };
        if !self.opcodes.is_empty() && !self.opcodes.contains(&bth.opcode) {
            return false;
        }
        if let Some(kind) = self.kind {
            let request = bth.opcode.info().is_some_and(|i| i.request);
            if request != (kind == Kind::Requests) {
                return false;
            }
        }
        if let Some((first, count)) = self.psn {
            let d = first.distance(bth.psn);
            if d < 0 || u64::try_from(d).unwrap_or(u64::MAX) >= u64::from(count) {
                return false;
            }
        }
        if self.qpn.is_some_and(|q| q != bth.dest_qp.value()) {
            return false;
        }
        true
    }
}

impl Rule for Fault {
    fn judge(&mut self, _now: Time, pkt: &Wire) -> Verdict {
        if !self.matches(pkt) {
            return Verdict::Pass;
        }
        self.matched += 1;
        if self.nth.is_some_and(|n| self.matched != n) || self.first.is_some_and(|n| self.matched > n) {
            return Verdict::Pass;
        }
        if self.times.is_some_and(|n| self.fired >= n) || !self.rng.chance(self.probability) {
            return Verdict::Pass;
        }
        self.fired += 1;
        match self.action {
            Action::Drop => Verdict::Drop,
            Action::Delay(t) => Verdict::Delay(t),
            Action::Duplicate(t) => Verdict::Duplicate { after: t },
            Action::Reorder(t) => Verdict::Reorder { max_hold: t },
            Action::CorruptBit(bit) => Verdict::Corrupt { bit },
            Action::Corrupt => Verdict::Corrupt { bit: icrc_covered_bit(&mut self.rng, pkt.data.len()) },
            Action::MarkCe => Verdict::MarkCe,
        }
    }

    fn seed(&mut self, seed: u64) {
        self.rng = Rng::new(seed);
    }
}

/// A random bit of a `len`-byte packet that the ICRC covers: anything but BTH byte 4
/// (FECN, BECN, Resv6a), which the ICRC masks (IBA Annex A17.3.3).
fn icrc_covered_bit(rng: &mut Rng, len: usize) -> usize {
    let bits = (len as u64).saturating_mul(8);
    if bits <= 8 {
        return 0;
    }
    let masked = (bth::ICRC_MASKED_BYTE * 8) as u64;
    let mut b = rng.below(bits - 8);
    if b >= masked {
        b += 8;
    }
    usize::try_from(b).unwrap_or(0)
}

/// What [`Faults`] did to one packet, for logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultEvent {
    /// When.
    pub at: Time,
    /// What was done.
    pub verdict: Verdict,
    /// The packet, one line.
    pub packet: String,
}

/// Counts of what a chain did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Packets judged.
    pub packets: u64,
    /// Dropped.
    pub dropped: u64,
    /// Delayed.
    pub delayed: u64,
    /// Duplicated.
    pub duplicated: u64,
    /// Held back for reordering.
    pub reordered: u64,
    /// Corrupted.
    pub corrupted: u64,
    /// Marked ECN congestion-experienced.
    pub marked_ce: u64,
}

#[derive(Debug)]
struct Held {
    until: Time,
    pkt: Wire,
}

/// A chain of rules plus the packets it holds back for reordering.
///
/// `apply` judges a packet and says when each resulting copy is to be delivered (as extra
/// delay); a held packet comes out right after the next packet between the same two hosts,
/// or from `release_due` once its hold expires.
pub struct Faults {
    rules: Vec<Box<dyn Rule>>,
    seed: u64,
    held: Vec<Held>,
    log: Option<VecDeque<FaultEvent>>,
    stats: FaultStats,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("rules", &self.rules.len())
            .field("seed", &self.seed)
            .field("held", &self.held.len())
            .field("stats", &self.stats)
            .finish()
    }
}

/// Most events kept by [`Faults::log`].
const LOG_CAP: usize = 65_536;

impl Faults {
    /// An empty chain; `seed` derives every rule's random stream.
    pub fn new(seed: u64) -> Faults {
        Faults { rules: Vec::new(), seed, held: Vec::new(), log: None, stats: FaultStats::default() }
    }

    /// The common case: each packet is independently lost with probability `loss`,
    /// duplicated with `dup`, held back for reordering with `reorder` and corrupted with
    /// `corrupt` (checked in that order).
    pub fn random(seed: u64, loss: f64, dup: f64, reorder: f64, corrupt: f64, max_hold: Time) -> Faults {
        let mut f = Faults::new(seed);
        if loss > 0.0 {
            f.add(Fault::drop().probability(loss));
        }
        if dup > 0.0 {
            f.add(Fault::duplicate(max_hold / 4).probability(dup));
        }
        if reorder > 0.0 {
            f.add(Fault::reorder(max_hold).probability(reorder));
        }
        if corrupt > 0.0 {
            f.add(Fault::corrupt().probability(corrupt));
        }
        f
    }

    /// The seed.
    pub fn seed_value(&self) -> u64 {
        self.seed
    }

    /// Appends a rule; it gets its own random stream derived from the seed and its place.
    pub fn add(&mut self, mut rule: impl Rule + 'static) {
        let idx = self.rules.len() as u64;
        let mut mix = Rng::new(self.seed ^ idx.wrapping_mul(0xD6E8_FEB8_6659_FD93));
        rule.seed(mix.next_u64());
        self.rules.push(Box::new(rule));
    }

    /// Removes every rule (packets held for reordering still come out when due).
    pub fn clear(&mut self) {
        self.rules.clear();
    }

    /// True when no rule is installed.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Starts keeping a log of every fault applied (the most recent 65536).
    pub fn enable_log(&mut self) {
        self.log.get_or_insert_with(VecDeque::new);
    }

    /// Takes the log so far.
    pub fn take_log(&mut self) -> Vec<FaultEvent> {
        self.log.as_mut().map(|l| l.drain(..).collect()).unwrap_or_default()
    }

    /// What the chain has done so far.
    pub fn stats(&self) -> FaultStats {
        self.stats
    }

    /// Judges `pkt` at `now`; `deliver(extra_delay, packet)` is called for each copy to be
    /// delivered, in delivery order. Returns the verdict.
    pub fn apply(&mut self, now: Time, pkt: Wire, mut deliver: impl FnMut(Time, Wire)) -> Verdict {
        self.stats.packets += 1;
        let mut verdict = Verdict::Pass;
        for r in &mut self.rules {
            let v = r.judge(now, &pkt);
            if v != Verdict::Pass {
                verdict = v;
                break;
            }
        }
        if verdict != Verdict::Pass {
            if let Some(log) = &mut self.log {
                if log.len() >= LOG_CAP {
                    log.pop_front();
                }
                log.push_back(FaultEvent { at: now, verdict: verdict.clone(), packet: pkt.describe() });
            }
        }
        let (src, dst) = (pkt.src, pkt.dst);
        match verdict {
            Verdict::Pass => deliver(0, pkt),
            Verdict::Drop => self.stats.dropped += 1,
            Verdict::Delay(d) => {
                self.stats.delayed += 1;
                deliver(d, pkt);
            }
            Verdict::Duplicate { after } => {
                self.stats.duplicated += 1;
                deliver(0, pkt.clone());
                deliver(after, pkt);
            }
            Verdict::Reorder { max_hold } => {
                self.stats.reordered += 1;
                // It waits for the next packet on this path; earlier held ones go now.
                self.release_path(src, dst, &mut deliver);
                self.held.push(Held { until: now.saturating_add(max_hold), pkt });
                return verdict;
            }
            Verdict::Corrupt { bit } => {
                self.stats.corrupted += 1;
                let mut pkt = pkt;
                let n = pkt.data.len() * 8;
                if n > 0 {
                    let b = bit % n;
                    pkt.data[b / 8] ^= 1 << (b % 8);
                }
                deliver(0, pkt);
            }
            Verdict::MarkCe => {
                self.stats.marked_ce += 1;
                deliver(0, Wire { ce: true, ..pkt });
            }
        }
        // A packet went out on this path: what was held for it follows.
        self.release_path(src, dst, &mut deliver);
        verdict
    }

    fn release_path(&mut self, src: IpAddr, dst: IpAddr, deliver: &mut impl FnMut(Time, Wire)) {
        let mut i = 0;
        while i < self.held.len() {
            if self.held[i].pkt.src == src && self.held[i].pkt.dst == dst {
                deliver(0, self.held.remove(i).pkt);
            } else {
                i += 1;
            }
        }
    }

    /// When the earliest held packet must go out, if any is held.
    pub fn next_release(&self) -> Option<Time> {
        self.held.iter().map(|h| h.until).min()
    }

    /// Releases every held packet whose hold has expired at `now`.
    pub fn release_due(&mut self, now: Time, mut deliver: impl FnMut(Wire)) {
        let mut i = 0;
        while i < self.held.len() {
            if self.held[i].until <= now {
                deliver(self.held.remove(i).pkt);
            } else {
                i += 1;
            }
        }
    }
}

/// A [`Faults`] chain shared between a device's transport and the application, which
/// may read its statistics and log while the device runs.
#[derive(Clone)]
pub struct FaultHandle(std::sync::Arc<parking_lot::Mutex<Faults>>);

impl FaultHandle {
    /// Wraps a chain.
    pub fn new(faults: Faults) -> FaultHandle {
        FaultHandle(std::sync::Arc::new(parking_lot::Mutex::new(faults)))
    }

    /// Locks the chain.
    pub fn lock(&self) -> parking_lot::MutexGuard<'_, Faults> {
        self.0.lock()
    }
}

impl std::fmt::Debug for FaultHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("FaultHandle").field(&*self.0.lock()).finish()
    }
}

impl PartialEq for FaultHandle {
    fn eq(&self, other: &FaultHandle) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for FaultHandle {}

/// Default longest hold of a reordered packet on real time (1 ms).
pub const DEFAULT_MAX_HOLD_NS: Time = 1_000_000;

impl Faults {
    /// Parses the `RNIC_FAULTS` form: comma-separated `loss=P`, `dup=P`, `reorder=P`,
    /// `corrupt=P`, `ce=P` (ECN congestion-experienced marks; probabilities from 0 to 1),
    /// `seed=N`, `hold_us=N` (the longest a reordered packet is held) and `cm_drop=KINDS`
    /// (every CM MAD of these kinds, `+`-separated among req, mra, rej, rep, rtu, dreq,
    /// drep, is dropped: a CM that never sends them, to test a peer's judge of a CM), e.g.
    /// `loss=0.05,reorder=0.01,seed=7` or `cm_drop=drep`.
    pub fn from_spec(spec: &str) -> Result<Faults, String> {
        let (mut loss, mut dup, mut reorder, mut corrupt, mut seed) = (0.0, 0.0, 0.0, 0.0, 0u64);
        let mut ce = 0.0;
        let mut cm_drop: Vec<u16> = Vec::new();
        let mut hold = DEFAULT_MAX_HOLD_NS;
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| format!("fault spec item `{part}` is not key=value"))?;
            let prob = |v: &str| -> Result<f64, String> {
                let p: f64 = v.trim().parse().map_err(|_| format!("`{k}={v}`: not a number"))?;
                if (0.0..=1.0).contains(&p) {
                    Ok(p)
                } else {
                    Err(format!("`{k}={v}`: a probability must be between 0 and 1"))
                }
            };
            match k.trim() {
                "loss" | "drop" => loss = prob(v)?,
                "dup" | "duplicate" => dup = prob(v)?,
                "reorder" => reorder = prob(v)?,
                "corrupt" => corrupt = prob(v)?,
                "ce" => ce = prob(v)?,
                "seed" => seed = v.trim().parse().map_err(|_| format!("`seed={v}`: not an unsigned integer"))?,
                "hold_us" => {
                    let us: u64 = v.trim().parse().map_err(|_| format!("`hold_us={v}`: not an unsigned integer"))?;
                    hold = us.saturating_mul(1_000);
                }
                "cm_drop" => {
                    for kind in v.split('+').map(str::trim) {
                        cm_drop.push(cm_attr(kind).ok_or_else(|| {
                            format!("`cm_drop={v}`: `{kind}` is not a CM message (req, mra, rej, rep, rtu, dreq, drep)")
                        })?);
                    }
                }
                other => {
                    return Err(format!(
                    "unknown fault spec key `{other}` (known: loss, dup, reorder, corrupt, ce, seed, hold_us, cm_drop)"
                ))
                }
            }
        }
        let mut f = Faults::random(seed, loss, dup, reorder, corrupt, hold);
        if ce > 0.0 {
            f.add(Fault::mark_ce().probability(ce));
        }
        if !cm_drop.is_empty() {
            f.add(move |_: Time, w: &Wire| match cm_attr_of(w) {
                Some(a) if cm_drop.contains(&a) => Verdict::Drop,
                _ => Verdict::Pass,
            });
        }
        Ok(f)
    }
}

/// The MAD attribute ID of a CM message's name (IBA 12.6, Table 99's attribute IDs).
fn cm_attr(name: &str) -> Option<u16> {
    use rnic_wire::cm::attr;
    Some(match name.to_ascii_lowercase().as_str() {
        "req" => attr::REQ,
        "mra" => attr::MRA,
        "rej" => attr::REJ,
        "rep" => attr::REP,
        "rtu" => attr::RTU,
        "dreq" => attr::DREQ,
        "drep" => attr::DREP,
        _ => return None,
    })
}

/// The CM attribute ID of a packet that is a CM MAD (a UD SEND ONLY to QP1 whose MAD is of
/// the CM class), else `None`.
fn cm_attr_of(w: &Wire) -> Option<u16> {
    let p = RocePacket::new_checked(&w.data[..]).ok()?;
    let r = RoceRepr::parse(&p).ok()?;
    if r.bth.opcode != Opcode::UD_SEND_ONLY || r.bth.dest_qp.value() != rnic_wire::mad::GSI_QPN {
        return None;
    }
    let mad = p.payload();
    if mad.get(1) != Some(&rnic_wire::mad::CLASS_CM) {
        return None;
    }
    Some(u16::from_be_bytes([*mad.get(16)?, *mad.get(17)?]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_wire::roce::ExtHeaders;

    fn pkt(src: &str, dst: &str, opcode: Opcode, psn: u32, qpn: u32) -> Wire {
        let repr = RoceRepr {
            bth: BthRepr {
                opcode,
                se: false,
                migreq: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: rnic_wire::Qpn::new(qpn),
                ack_req: false,
                psn: Psn::new(psn),
            },
            ext: ExtHeaders::default(),
            payload_len: 0,
        };
        let mut data = vec![0; repr.buffer_len()];
        repr.emit(&mut data, &[]).unwrap();
        Wire { src: src.parse().unwrap(), dst: dst.parse().unwrap(), src_port: 4791, data, ce: false }
    }

    fn run(f: &mut Faults, pkts: &[Wire]) -> Vec<(Time, u32)> {
        let mut out = Vec::new();
        for p in pkts {
            f.apply(0, p.clone(), |d, w| out.push((d, w.bth().unwrap().psn.value())));
        }
        f.release_due(Time::MAX, |w| out.push((Time::MAX, w.bth().unwrap().psn.value())));
        out
    }

    fn stream(n: u32) -> Vec<Wire> {
        (0..n).map(|i| pkt("10.0.0.1", "10.0.0.2", Opcode::RC_SEND_MIDDLE, 0xFF_FFFE + i, 0x11)).collect()
    }

    #[test]
    fn nth_counts_only_matching_packets() {
        let mut f = Faults::new(1);
        f.add(Fault::drop().opcode(Opcode::RC_SEND_MIDDLE).nth(2));
        let mut pkts = stream(3);
        pkts.insert(1, pkt("10.0.0.1", "10.0.0.2", Opcode::RC_SEND_FIRST, 5, 0x11));
        let got: Vec<u32> = run(&mut f, &pkts).into_iter().map(|(_, p)| p).collect();
        assert_eq!(got, vec![0xFF_FFFE, 5, 0]);
    }

    #[test]
    fn psn_range_wraps_and_direction_filters() {
        let mut f = Faults::new(1);
        f.add(Fault::drop().psn_range(0xFF_FFFF, 2).from("10.0.0.1".parse().unwrap()));
        let got: Vec<u32> = run(&mut f, &stream(4)).into_iter().map(|(_, p)| p).collect();
        assert_eq!(got, vec![0xFF_FFFE, 1]);
        let mut g = Faults::new(1);
        g.add(Fault::drop().from("10.0.0.9".parse().unwrap()));
        assert_eq!(run(&mut g, &stream(4)).len(), 4);
    }

    #[test]
    fn reorder_lets_the_next_packet_overtake() {
        let mut f = Faults::new(1);
        f.add(Fault::reorder(1_000).nth(1));
        let got: Vec<u32> = run(&mut f, &stream(3)).into_iter().map(|(_, p)| p).collect();
        assert_eq!(got, vec![0xFF_FFFF, 0xFF_FFFE, 0]);
        // Nothing comes after it: the hold expires.
        let mut g = Faults::new(1);
        g.add(Fault::reorder(1_000));
        g.apply(5, stream(1).remove(0), |_, _| panic!("held"));
        assert_eq!(g.next_release(), Some(1_005));
        let mut n = 0;
        g.release_due(1_004, |_| n += 1);
        assert_eq!(n, 0);
        g.release_due(1_005, |_| n += 1);
        assert_eq!(n, 1);
    }

    #[test]
    fn probability_is_reproducible_from_the_seed_and_near_its_rate() {
        let count = |seed| {
            let mut f = Faults::new(seed);
            f.add(Fault::drop().probability(0.3));
            run(&mut f, &stream(10_000)).len()
        };
        assert_eq!(count(7), count(7));
        assert_ne!(count(7), count(8));
        let kept = count(7);
        assert!((6_600..=7_400).contains(&kept), "kept {kept} of 10000 at 30% loss");
    }

    #[test]
    fn corruption_never_touches_the_masked_bth_byte_and_times_caps_firing() {
        let mut f = Faults::new(3);
        f.add(Fault::corrupt().times(500));
        let orig = stream(1).remove(0);
        let mut changed = 0;
        for _ in 0..1000 {
            f.apply(0, orig.clone(), |_, w| {
                let diff: Vec<usize> = (0..w.data.len()).filter(|&i| w.data[i] != orig.data[i]).collect();
                assert!(diff.len() <= 1);
                if let [i] = diff[..] {
                    assert_ne!(i, bth::ICRC_MASKED_BYTE);
                    changed += 1;
                }
            });
        }
        assert_eq!(changed, 500);
        assert_eq!(f.stats().corrupted, 500);
    }

    #[test]
    fn spec_parses_and_names_what_is_wrong() {
        let f = Faults::from_spec("loss=0.1, dup=0.05,seed=9,hold_us=20").unwrap();
        assert_eq!((f.rules.len(), f.seed_value()), (2, 9));
        assert!(Faults::from_spec("").unwrap().is_empty());
        assert!(Faults::from_spec("loss=2").unwrap_err().contains("between 0 and 1"));
        assert!(Faults::from_spec("los=0.1").unwrap_err().contains("unknown fault spec key `los`"));
        assert!(Faults::from_spec("loss").unwrap_err().contains("key=value"));
        assert!(Faults::from_spec("seed=-1").unwrap_err().contains("seed"));
    }

    #[test]
    fn mark_ce_delivers_the_packet_marked_and_counts() {
        let mut f = Faults::from_spec("ce=1").unwrap();
        let mut got = Vec::new();
        for p in stream(3) {
            f.apply(0, p.clone(), |d, w| got.push((d, w.ce, w.data == p.data)));
        }
        assert_eq!(got, vec![(0, true, true); 3], "delivered at once, marked, bytes untouched");
        assert_eq!(f.stats().marked_ce, 3);
        assert!(Faults::from_spec("ce=1.5").unwrap_err().contains("between 0 and 1"));
    }

    /// A CM MAD from QP1 to QP1 (a UD SEND ONLY with the GSI's DETH).
    fn mad(msg: &rnic_wire::cm::CmMessage) -> Wire {
        use rnic_wire::mad::{GSI_QKEY, GSI_QPN, MAD_LEN};
        let repr = RoceRepr {
            bth: BthRepr {
                opcode: Opcode::UD_SEND_ONLY,
                se: false,
                migreq: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: rnic_wire::Qpn::new(GSI_QPN),
                ack_req: false,
                psn: Psn::new(3),
            },
            ext: ExtHeaders {
                deth: Some(rnic_wire::deth::DethRepr { qkey: GSI_QKEY, src_qp: rnic_wire::Qpn::new(GSI_QPN) }),
                ..ExtHeaders::default()
            },
            payload_len: MAD_LEN,
        };
        let mut data = vec![0; repr.buffer_len()];
        repr.emit(&mut data, &msg.to_mad(7)).unwrap();
        Wire { src: "10.0.0.1".parse().unwrap(), dst: "10.0.0.2".parse().unwrap(), src_port: 4791, data, ce: false }
    }

    #[test]
    fn cm_drop_drops_the_cm_messages_named_and_nothing_else() {
        use rnic_wire::cm::{self, CmIds, CmMessage};
        let rtu = mad(&CmMessage::Rtu(Box::new(CmIds {
            local_comm_id: 1,
            remote_comm_id: 9,
            private_data: [0; cm::private_len::RTU],
        })));
        let drep = mad(&CmMessage::Drep(Box::new(CmIds {
            local_comm_id: 2,
            remote_comm_id: 9,
            private_data: [0; cm::private_len::DREP],
        })));
        let mut f = Faults::from_spec("cm_drop=drep").unwrap();
        let mut got = Vec::new();
        for p in [rtu.clone(), drep.clone(), stream(1).remove(0), drep] {
            f.apply(0, p, |_, w| got.push(cm_attr_of(&w)));
        }
        assert_eq!(got, vec![Some(cm::attr::RTU), None], "the RTU and the RC packet pass, both DREPs are dropped");
        let mut both = Faults::from_spec("cm_drop=rtu+DREP").unwrap();
        let mut n = 0;
        both.apply(0, rtu, |_, _| n += 1);
        assert_eq!(n, 0);
        assert!(Faults::from_spec("cm_drop=drep+bye").unwrap_err().contains("`bye` is not a CM message"));
    }

    #[test]
    fn duplicate_and_delay_say_when() {
        let mut f = Faults::new(1);
        f.add(Fault::duplicate(70).nth(1));
        f.add(Fault::delay(30).psn(0xFF_FFFF));
        let got = run(&mut f, &stream(2));
        assert_eq!(got, vec![(0, 0xFF_FFFE), (70, 0xFF_FFFE), (30, 0xFF_FFFF)]);
    }
}
