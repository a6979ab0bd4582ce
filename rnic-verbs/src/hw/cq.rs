//! Completion queues and completion channels.

use super::context::{wait_readable, HwContext};
use super::convert::{wc_from_ibv, WorkCompletion};
use super::{HwError, HwResult};
use parking_lot::Mutex;
use rnic_verbs_sys::{self as sys, ibv_comp_channel, ibv_cq, ibv_wc};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

pub(super) struct ChanInner {
    ctx: HwContext,
    ch: *mut ibv_comp_channel,
    /// The CQs of this channel by address, to turn `ibv_get_cq_event`'s pointer back
    /// into a handle.
    cqs: Mutex<HashMap<usize, Weak<CqInner>>>,
}

// SAFETY: a completion channel is an fd plus library state that libibverbs locks; the
// pointer is freed only in Drop.
unsafe impl Send for ChanInner {}
// SAFETY: as above.
unsafe impl Sync for ChanInner {}

impl Drop for ChanInner {
    fn drop(&mut self) {
        // SAFETY: every CQ of the channel holds an Arc to it, so none is left (the call
        // would fail with EBUSY otherwise); destroyed once.
        unsafe { (self.ctx.verbs().ibv_destroy_comp_channel)(self.ch) };
    }
}

/// A completion channel (`ibv_comp_channel`): armed CQs created with it report their next
/// completion here, so a thread can sleep in [`HwCompChannel::get_cq_event`].
#[derive(Clone)]
pub struct HwCompChannel {
    inner: Arc<ChanInner>,
}

impl fmt::Debug for HwCompChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HwCompChannel").field("fd", &self.fd()).finish_non_exhaustive()
    }
}

impl HwCompChannel {
    pub(super) fn create(ctx: &HwContext) -> HwResult<HwCompChannel> {
        // SAFETY: a live context.
        let ch = unsafe { (ctx.verbs().ibv_create_comp_channel)(ctx.as_ptr()) };
        if ch.is_null() {
            return Err(HwError::last_os("ibv_create_comp_channel"));
        }
        Ok(HwCompChannel { inner: Arc::new(ChanInner { ctx: ctx.clone(), ch, cqs: Mutex::new(HashMap::new()) }) })
    }

    /// The channel's file descriptor (readable when an event is pending), for `poll`/`epoll`.
    pub fn fd(&self) -> i32 {
        // SAFETY: a live channel.
        unsafe { (*self.inner.ch).fd }
    }

    /// Sleeps until an armed CQ of this channel has an event or `timeout` passes; returns
    /// that CQ. Acknowledge each event with [`HwCq::ack_events`] (a CQ dropped with events
    /// unacknowledged acknowledges them itself, so destroying it never hangs).
    pub fn get_cq_event(&self, timeout: Duration) -> HwResult<HwCq> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if !wait_readable(self.fd(), left, "poll(completion channel)")? {
                return Err(HwError::Timeout(timeout));
            }
            let mut cq: *mut ibv_cq = std::ptr::null_mut();
            let mut cq_ctx: *mut libc::c_void = std::ptr::null_mut();
            // SAFETY: a live channel; the fd is readable so this does not block.
            let r = unsafe { (self.inner.ctx.verbs().ibv_get_cq_event)(self.inner.ch, &mut cq, &mut cq_ctx) };
            if r != 0 {
                return Err(HwError::last_os("ibv_get_cq_event"));
            }
            let found = self.inner.cqs.lock().get(&(cq as usize)).and_then(Weak::upgrade);
            match found {
                Some(inner) => {
                    *inner.unacked.lock() += 1;
                    return Ok(HwCq { inner });
                }
                None => {
                    // The CQ's last handle is being dropped (it left the map first):
                    // acknowledge for it, so its ibv_destroy_cq does not wait forever.
                    // SAFETY: the CQ still exists: ibv_destroy_cq waits until every event
                    // delivered for it is acknowledged, which is this call.
                    unsafe { (self.inner.ctx.verbs().ibv_ack_cq_events)(cq, 1) };
                }
            }
        }
    }
}

pub(super) struct CqInner {
    ctx: HwContext,
    pub(super) cq: *mut ibv_cq,
    channel: Option<HwCompChannel>,
    unacked: Mutex<u32>,
    /// Completions taken from the device and given back (a timed-out wait): polled first.
    stash: Mutex<std::collections::VecDeque<WorkCompletion>>,
}

// SAFETY: libibverbs CQs may be polled and armed from any thread (the provider locks);
// the pointer is freed only in Drop.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        let v = self.ctx.verbs();
        if let Some(ch) = &self.channel {
            ch.inner.cqs.lock().remove(&(self.cq as usize));
        }
        let n = *self.unacked.lock();
        if n > 0 {
            // SAFETY: a live CQ; these events were delivered and not acknowledged.
            unsafe { (v.ibv_ack_cq_events)(self.cq, n) };
        }
        // SAFETY: no QP uses the CQ any more (QPs hold an Arc to it); destroyed once.
        unsafe { (v.ibv_destroy_cq)(self.cq) };
    }
}

/// A completion queue (`ibv_cq`). Clones share it; destroyed with the last handle.
#[derive(Clone)]
pub struct HwCq {
    pub(super) inner: Arc<CqInner>,
}

impl fmt::Debug for HwCq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HwCq").field("id", &self.id()).field("cqe", &self.capacity()).finish_non_exhaustive()
    }
}

impl HwCq {
    pub(super) fn create(ctx: &HwContext, depth: usize, channel: Option<&HwCompChannel>) -> HwResult<HwCq> {
        let cqe = libc::c_int::try_from(depth)
            .ok()
            .filter(|&d| d > 0)
            .ok_or_else(|| HwError::InvalidArgument { op: "create CQ", why: format!("depth {depth}") })?;
        let ch = channel.map_or(std::ptr::null_mut(), |c| c.inner.ch);
        // SAFETY: a live context and channel (or null); no CQ context pointer.
        let cq = unsafe { (ctx.verbs().ibv_create_cq)(ctx.as_ptr(), cqe, std::ptr::null_mut(), ch, 0) };
        if cq.is_null() {
            return Err(HwError::last_os(format!("ibv_create_cq({depth} entries)")));
        }
        let inner = Arc::new(CqInner {
            ctx: ctx.clone(),
            cq,
            channel: channel.cloned(),
            unacked: Mutex::new(0),
            stash: Mutex::default(),
        });
        if let Some(c) = channel {
            c.inner.cqs.lock().insert(cq as usize, Arc::downgrade(&inner));
        }
        Ok(HwCq { inner })
    }

    /// The CQ's kernel handle (named in CQ error events).
    pub fn id(&self) -> u32 {
        // SAFETY: a live CQ.
        unsafe { (*self.inner.cq).handle }
    }

    /// Entries the device granted (at least the depth asked for).
    pub fn capacity(&self) -> usize {
        // SAFETY: a live CQ.
        usize::try_from(unsafe { (*self.inner.cq).cqe }).unwrap_or(0)
    }

    /// The raw CQ, valid while `self` lives.
    pub fn as_ptr(&self) -> *mut ibv_cq {
        self.inner.cq
    }

    /// The device.
    pub fn context(&self) -> &HwContext {
        &self.inner.ctx
    }

    /// `ibv_poll_cq` through `context->ops`: takes up to `out.len()` completions.
    pub fn poll(&self, out: &mut [ibv_wc]) -> HwResult<usize> {
        let n = libc::c_int::try_from(out.len()).unwrap_or(libc::c_int::MAX);
        // SAFETY: a live CQ and room for `n` completions.
        let r = unsafe { sys::ops::poll_cq(self.inner.cq, n, out.as_mut_ptr()) };
        usize::try_from(r).map_err(|_| HwError::ret("ibv_poll_cq", r))
    }

    /// Takes up to `out.len()` completions as rnic's type.
    pub fn poll_wc(&self, out: &mut [WorkCompletion]) -> HwResult<usize> {
        let mut raw = [ibv_wc::default(); 16];
        let mut done = 0;
        {
            let mut stash = self.inner.stash.lock();
            while done < out.len() {
                match stash.pop_front() {
                    Some(wc) => out[done] = wc,
                    None => break,
                }
                done += 1;
            }
        }
        while done < out.len() {
            let want = (out.len() - done).min(raw.len());
            let n = self.poll(&mut raw[..want])?;
            for (o, w) in out[done..].iter_mut().zip(&raw[..n]) {
                *o = wc_from_ibv(w);
            }
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    /// Puts completions back at the head of the CQ (in order): the next poll returns them
    /// first. A wait that times out gives back what it took, so none is lost.
    pub fn give_back(&self, wcs: Vec<WorkCompletion>) {
        let mut stash = self.inner.stash.lock();
        for wc in wcs.into_iter().rev() {
            stash.push_front(wc);
        }
    }

    /// Completions given back and not yet polled again.
    pub fn stashed(&self) -> usize {
        self.inner.stash.lock().len()
    }

    /// Polls (yielding between tries) until `got` holds `n` completions or `timeout`
    /// passed. Every completion taken is pushed to `got` before anything can fail, so a
    /// timeout loses none: they are in `got` beside the error.
    pub fn wait_into(&self, n: usize, timeout: Duration, got: &mut Vec<WorkCompletion>) -> HwResult<()> {
        let deadline = Instant::now() + timeout;
        let mut raw = [ibv_wc::default(); 16];
        {
            let mut stash = self.inner.stash.lock();
            while got.len() < n {
                match stash.pop_front() {
                    Some(wc) => got.push(wc),
                    None => break,
                }
            }
        }
        while got.len() < n {
            let want = (n - got.len()).min(raw.len());
            let k = self.poll(&mut raw[..want])?;
            got.extend(raw[..k].iter().map(wc_from_ibv));
            if k == 0 {
                if Instant::now() > deadline {
                    return Err(HwError::Timeout(timeout));
                }
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// `ibv_req_notify_cq` through `context->ops`: the next completion (with
    /// `solicited_only`, the next solicited or error one) raises an event on the channel.
    pub fn req_notify(&self, solicited_only: bool) -> HwResult<()> {
        if self.inner.channel.is_none() {
            return Err(HwError::InvalidArgument {
                op: "req_notify_cq",
                why: "the CQ has no completion channel".into(),
            });
        }
        // SAFETY: a live CQ.
        let r = unsafe { sys::ops::req_notify_cq(self.inner.cq, libc::c_int::from(solicited_only)) };
        if r != 0 {
            return Err(HwError::ret("ibv_req_notify_cq", r));
        }
        Ok(())
    }

    /// `ibv_ack_cq_events` for `n` events returned by [`HwCompChannel::get_cq_event`].
    pub fn ack_events(&self, n: u32) -> HwResult<()> {
        let mut un = self.inner.unacked.lock();
        if n > *un {
            return Err(HwError::InvalidArgument {
                op: "ack_cq_events",
                why: format!("acknowledging {n} events but only {} are unacknowledged", *un),
            });
        }
        // SAFETY: a live CQ; `n` delivered events.
        unsafe { (self.inner.ctx.verbs().ibv_ack_cq_events)(self.inner.cq, n) };
        *un -= n;
        Ok(())
    }

    /// Events delivered and not acknowledged.
    pub fn unacked_events(&self) -> u32 {
        *self.inner.unacked.lock()
    }

    /// True when this CQ reports its events to `channel`.
    pub fn reports_to(&self, channel: &HwCompChannel) -> bool {
        self.inner.channel.as_ref().is_some_and(|c| Arc::ptr_eq(&c.inner, &channel.inner))
    }

    /// Sleeps on `channel` until a completion is available or `timeout` passes, then takes
    /// it (arm, poll again, sleep, acknowledge: the verbs pattern).
    pub fn wait_event(&self, channel: &HwCompChannel, timeout: Duration) -> HwResult<WorkCompletion> {
        if !self.reports_to(channel) {
            return Err(HwError::InvalidArgument {
                op: "wait for a completion event",
                why: format!("CQ {} does not report to that completion channel", self.id()),
            });
        }
        let deadline = Instant::now() + timeout;
        let mut one = [WorkCompletion::new(0, super::convert::WcStatus::Success, super::convert::WcOpcode::Send, 0)];
        loop {
            if self.poll_wc(&mut one)? == 1 {
                return Ok(one[0]);
            }
            self.req_notify(false)?;
            if self.poll_wc(&mut one)? == 1 {
                return Ok(one[0]);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let cq = channel.get_cq_event(left).map_err(|e| match e {
                HwError::Timeout(_) => HwError::Timeout(timeout),
                e => e,
            })?;
            // Another CQ of the channel may have fired: its event is acknowledged on its own
            // handle (counted there), and this CQ is polled again.
            cq.ack_events(1)?;
        }
    }
}

// CQs and channels are made here, so that the context (which each holds) does not name them.
impl HwContext {
    /// Creates a completion channel (`ibv_create_comp_channel`).
    pub fn create_comp_channel(&self) -> HwResult<HwCompChannel> {
        HwCompChannel::create(self)
    }

    /// Creates a CQ of at least `depth` entries (`ibv_create_cq`), reporting armed
    /// notifications to `channel`.
    pub fn create_cq(&self, depth: usize, channel: Option<&HwCompChannel>) -> HwResult<HwCq> {
        HwCq::create(self, depth, channel)
    }
}
