//! Completion queues: a bounded queue the device's rounds (on a progress thread or a program's) push into and the
//! application polls, with no lock shared between the two.

use crate::wr::WorkCompletion;
use crossbeam_queue::ArrayQueue;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// A completion queue of fixed depth.
///
/// IBA 11.4.2.1 (rxe `rxe_cq_post`: IB_EVENT_CQ_ERR): a CQ that overflows is in error; the QPs that tried to complete
/// into it are moved to the error state and an asynchronous CQ error is raised. Nothing
/// is silently dropped: [`Cq::push`] reports the overflow to the engine.
#[derive(Debug)]
pub struct Cq {
    id: u32,
    /// The entries. Swappable only so that [`Cq::resize`] can replace the queue: a push
    /// or a poll loads it without writing any word another thread reads (a read-write
    /// lock here made every empty poll of a busy-polling program write the lock's word,
    /// which the progress thread's push then had to take back).
    queue: arc_swap::ArcSwap<ArrayQueue<WorkCompletion>>,
    overflowed: AtomicBool,
    /// Completions pushed since the last notification request was armed (for events).
    armed: AtomicU32,
    notify: parking_lot::Mutex<Option<crossbeam_channel::Sender<u32>>>,
    /// Called with the CQ's id when a notification fires, after the channel send (a
    /// completion channel that must wake a file descriptor: the libibverbs library).
    notifier: parking_lot::Mutex<Option<CqNotifier>>,
    /// Events handed to the application (`ibv_get_cq_event`) and not yet acknowledged.
    events_unacked: AtomicU32,
    /// Completions a poller took and gave back ([`Cq::give_back`]), oldest first: polled
    /// before the queue. `has_returned` keeps the common path free of the lock.
    returned: parking_lot::Mutex<std::collections::VecDeque<WorkCompletion>>,
    has_returned: AtomicBool,
    /// Completions are stamped with the clock as they are pushed
    /// ([`Cq::stamp_completions`]).
    stamp: AtomicBool,
    /// The device shards whose QPs complete here (bit *i*: shard *i*), so that a poll
    /// that runs a round itself runs it where this CQ's completions come from.
    shards: std::sync::atomic::AtomicU64,
}

/// A resize below the completions waiting ([`Cq::resize`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{waiting} completions wait in the CQ, more than the {depth} asked for")]
pub struct CqResizeError {
    /// Entries asked for.
    pub depth: usize,
    /// Completions waiting.
    pub waiting: usize,
}

/// A callback run on the thread running the device's round when an armed notification fires: it must be
/// quick and must not block (write an eventfd, push to a queue).
#[derive(Clone)]
pub struct CqNotifier(pub std::sync::Arc<dyn Fn(u32) + Send + Sync>);

impl std::fmt::Debug for CqNotifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CqNotifier")
    }
}

/// The CQ was full: the completion could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqOverflow {
    /// The CQ's id.
    pub cq: u32,
}

/// Notification request armed on a CQ.
const ARM_NONE: u32 = 0;
const ARM_NEXT: u32 = 1;
const ARM_SOLICITED: u32 = 2;

impl Cq {
    /// Notes that a QP of device shard `shard` completes here.
    pub(crate) fn fed_by(&self, shard: usize) {
        if shard < 64 {
            self.shards.fetch_or(1 << shard, Ordering::Relaxed);
        }
    }

    /// [`fed_by`](Self::fed_by) unless already marked: a load, and a locked write only
    /// the first time (per completion, for the CQ of an XRC SRQ).
    #[inline]
    pub(crate) fn fed_by_once(&self, shard: usize) {
        if shard < 64 && self.shards.load(Ordering::Relaxed) & (1 << shard) == 0 {
            self.fed_by(shard);
        }
    }

    /// The device shards whose QPs complete here (bit *i*: shard *i*); 0 before any QP.
    pub fn feeding_shards(&self) -> u64 {
        self.shards.load(Ordering::Relaxed)
    }

    /// A CQ holding up to `depth` completions.
    pub fn new(id: u32, depth: usize) -> Cq {
        Cq {
            id,
            queue: arc_swap::ArcSwap::from_pointee(ArrayQueue::new(depth.max(1))),
            overflowed: AtomicBool::new(false),
            armed: AtomicU32::new(ARM_NONE),
            notify: parking_lot::Mutex::new(None),
            notifier: parking_lot::Mutex::new(None),
            events_unacked: AtomicU32::new(0),
            returned: parking_lot::Mutex::new(std::collections::VecDeque::new()),
            has_returned: AtomicBool::new(false),
            stamp: AtomicBool::new(false),
            shards: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Puts completions a poller took back at the head of the queue, in their order (a
    /// `wait` that timed out: nothing may drop a completion). They come out of the next
    /// polls before anything newer.
    pub fn give_back(&self, wcs: Vec<WorkCompletion>) {
        if wcs.is_empty() {
            return;
        }
        let mut r = self.returned.lock();
        for wc in wcs.into_iter().rev() {
            r.push_front(wc);
        }
        self.has_returned.store(true, Ordering::Release);
    }

    fn take_returned(&self) -> Option<WorkCompletion> {
        if !self.has_returned.load(Ordering::Acquire) {
            return None;
        }
        let mut r = self.returned.lock();
        let wc = r.pop_front();
        if r.is_empty() {
            self.has_returned.store(false, Ordering::Release);
        }
        wc
    }

    fn returned_len(&self) -> usize {
        if self.has_returned.load(Ordering::Acquire) {
            self.returned.lock().len()
        } else {
            0
        }
    }

    /// The CQ's id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Depth.
    pub fn capacity(&self) -> usize {
        self.queue.load().capacity()
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.queue.load().len() + self.returned_len()
    }

    /// True when no completion waits.
    pub fn is_empty(&self) -> bool {
        self.queue.load().is_empty() && self.returned_len() == 0
    }

    /// True once the CQ has overflowed (it stays in error).
    pub fn overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Acquire)
    }

    /// Queues a completion (a device's round) and raises the notification it makes due.
    /// On overflow the CQ enters the error state.
    #[inline]
    pub fn push(&self, wc: WorkCompletion, solicited: bool) -> Result<(), CqOverflow> {
        if self.push_quiet(wc, solicited)? {
            self.raise();
        }
        Ok(())
    }

    /// Queues a completion like [`push`](Self::push) and disarms the notification it
    /// makes due, without raising it: returns whether one is due, for the caller to
    /// [`raise`](Self::raise) (the driver raises a round's events at its end).
    #[inline]
    pub(crate) fn push_quiet(&self, mut wc: WorkCompletion, solicited: bool) -> Result<bool, CqOverflow> {
        if self.overflowed() {
            return Err(CqOverflow { cq: self.id });
        }
        if self.stamp.load(Ordering::Relaxed) {
            wc.timestamp_ns = rnic_io::time::monotonic_ns();
        }
        let status = wc.status;
        if self.queue.load().push(wc).is_err() {
            self.overflowed.store(true, Ordering::Release);
            return Err(CqOverflow { cq: self.id });
        }
        let arm = self.armed.load(Ordering::Acquire);
        // IBA 11.4.2.2: the notification fires once per request.
        Ok((arm == ARM_NEXT || (arm == ARM_SOLICITED && (solicited || status != crate::wr::WcStatus::Success)))
            && self.armed.compare_exchange(arm, ARM_NONE, Ordering::AcqRel, Ordering::Acquire).is_ok())
    }

    /// Delivers a notification [`push_quiet`](Self::push_quiet) made due: to the channel
    /// and the notifier attached.
    pub(crate) fn raise(&self) {
        if let Some(tx) = self.notify.lock().as_ref() {
            let _ = tx.send(self.id);
        }
        if let Some(n) = self.notifier.lock().as_ref() {
            (n.0)(self.id);
        }
    }

    /// Takes up to `out.len()` completions, oldest first; returns how many.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        let mut n = 0;
        // Completions given back come first (rare: a lock, checked per entry).
        while n < out.len() && self.has_returned.load(Ordering::Acquire) {
            match self.take_returned() {
                Some(wc) => {
                    out[n] = wc;
                    n += 1;
                }
                None => break,
            }
        }
        // One load of the queue for the whole batch (a load is a thread-local lookup and
        // two atomic writes). A resize meanwhile moves the entries this poll did not take
        // into the new queue, in order, for the next poll.
        let queue = self.queue.load();
        while n < out.len() {
            match queue.pop() {
                Some(wc) => {
                    out[n] = wc;
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    /// From now on every completion carries the time it entered the CQ
    /// ([`WorkCompletion::timestamp_ns`]; `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`). Off by
    /// default: a clock read per completion.
    pub fn stamp_completions(&self) {
        self.stamp.store(true, Ordering::Relaxed);
    }

    /// Gives the CQ room for `depth` completions (`ibv_resize_cq`), keeping those waiting,
    /// in order. Refused when more than `depth` wait ([`CqResizeError`], EINVAL for
    /// verbs: IBA 11.2.8.3 lets the new size be no smaller than the entries present).
    ///
    /// Nothing may push meanwhile (a completion pushed into the old queue after its
    /// entries moved would be lost): the device calls it under its lock, between rounds
    /// (`Device::resize_cq`). A poller meanwhile takes each entry from the old queue or the
    /// new one, oldest first, never twice.
    pub fn resize(&self, depth: usize) -> Result<(), CqResizeError> {
        let depth = depth.max(1);
        let old = self.queue.load_full();
        let waiting = old.len() + self.returned_len();
        if waiting > depth {
            return Err(CqResizeError { depth, waiting });
        }
        let new = std::sync::Arc::new(ArrayQueue::new(depth));
        while let Some(wc) = old.pop() {
            // Cannot fail: depth >= waiting.
            let _ = new.push(wc);
        }
        self.queue.store(new);
        Ok(())
    }

    /// Removes QP `qpn`'s completions, keeping the others in their order; returns how
    /// many went. Called by the engine (no completion is pushed meanwhile); a poller on
    /// another thread at the same moment may take a kept completion ahead of an older
    /// kept one, as it may on libmlx5 whose `mlx5_cq_clean` this is.
    pub fn purge_qp(&self, qpn: u32) -> usize {
        let mut all: Vec<WorkCompletion> = Vec::with_capacity(self.len());
        while let Some(wc) = self.poll_one() {
            all.push(wc);
        }
        let before = all.len();
        all.retain(|wc| wc.qp_num != qpn);
        let gone = before - all.len();
        self.give_back(all);
        gone
    }

    /// Takes one completion.
    pub fn poll_one(&self) -> Option<WorkCompletion> {
        self.take_returned().or_else(|| self.queue.load().pop())
    }

    /// Arms a notification for the next completion (or the next solicited one); it is
    /// delivered on the channel given to [`Cq::set_channel`].
    pub fn req_notify(&self, solicited_only: bool) {
        self.armed.store(if solicited_only { ARM_SOLICITED } else { ARM_NEXT }, Ordering::Release);
    }

    /// Attaches the channel notifications go to.
    pub fn set_channel(&self, tx: Option<crossbeam_channel::Sender<u32>>) {
        *self.notify.lock() = tx;
    }

    /// Attaches a callback run when a notification fires (beside or instead of a channel).
    pub fn set_notifier(&self, notifier: Option<CqNotifier>) {
        *self.notifier.lock() = notifier;
    }

    /// True when a completion channel (or a notifier) is attached.
    pub fn has_channel(&self) -> bool {
        self.notify.lock().is_some() || self.notifier.lock().is_some()
    }

    /// Counts an event handed to the application (`ibv_get_cq_event`).
    pub fn note_event_delivered(&self) {
        self.events_unacked.fetch_add(1, Ordering::AcqRel);
    }

    /// Acknowledges `n` events (`ibv_ack_cq_events`); fails, acknowledging none, with the
    /// number outstanding if `n` is more than that.
    pub fn ack_events(&self, n: u32) -> Result<(), u32> {
        self.events_unacked.fetch_update(Ordering::AcqRel, Ordering::Acquire, |have| have.checked_sub(n)).map(|_| ())
    }

    /// Events delivered and not yet acknowledged.
    pub fn unacked_events(&self) -> u32 {
        self.events_unacked.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wr::{WcOpcode, WcStatus};

    fn wc(id: u64, qpn: u32) -> WorkCompletion {
        WorkCompletion::new(id, WcStatus::Success, WcOpcode::Send, qpn)
    }

    #[test]
    fn a_resize_keeps_the_waiting_completions_in_order_and_refuses_less_room_than_they_need() {
        let cq = Cq::new(1, 4);
        for i in 0..3 {
            cq.push(wc(i, 7), false).unwrap();
        }
        assert_eq!(cq.resize(2), Err(CqResizeError { depth: 2, waiting: 3 }));
        assert_eq!(cq.capacity(), 4, "a refused resize changes nothing");
        cq.resize(3).unwrap();
        assert_eq!(cq.capacity(), 3);
        assert!(cq.push(wc(3, 7), false).is_err(), "full at the new size: overflow, as IBA 11.4.2.1 says");
        let cq = Cq::new(2, 2);
        cq.push(wc(0, 7), false).unwrap();
        cq.give_back(vec![wc(9, 7)]);
        cq.resize(64).unwrap();
        for i in 10..20 {
            cq.push(wc(i, 7), false).unwrap();
        }
        let mut out = [WorkCompletion::default(); 16];
        let n = cq.poll(&mut out);
        let ids: Vec<u64> = out[..n].iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, [9, 0, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19], "given back first, then in order");
    }

    #[test]
    fn completions_are_stamped_only_when_asked_and_purged_by_qp() {
        let cq = Cq::new(3, 8);
        cq.push(wc(1, 5), false).unwrap();
        cq.stamp_completions();
        let before = rnic_io::time::monotonic_ns();
        cq.push(wc(2, 6), false).unwrap();
        cq.push(wc(3, 5), false).unwrap();
        let after = rnic_io::time::monotonic_ns();
        assert_eq!(cq.purge_qp(6), 1);
        let a = cq.poll_one().unwrap();
        let b = cq.poll_one().unwrap();
        assert_eq!((a.wr_id, a.timestamp_ns), (1, 0), "pushed before stamping was asked");
        assert_eq!(b.wr_id, 3);
        assert!((before..=after).contains(&b.timestamp_ns), "{before} <= {} <= {after}", b.timestamp_ns);
        assert!(cq.poll_one().is_none());
    }
}
