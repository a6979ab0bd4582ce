//! Completion queues (`ibv_cq`).

use crate::channel::{ChanBackend, CompChannel};
use crate::context::{Backend, Context};
use crate::types::MAX_CQE;
use crate::{Error, Result, WorkCompletion};
use rnic_core::cq::Cq;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub(crate) enum CqBackend {
    Emu(Arc<Cq>),
    #[cfg(feature = "hw")]
    Hw(crate::hw::HwCq),
}

/// A completion queue (`ibv_cq`). Clones share it.
#[derive(Clone, Debug)]
pub struct CompletionQueue {
    pub(crate) ctx: Context,
    pub(crate) b: CqBackend,
}

#[cfg(feature = "hw")]
macro_rules! hw {
    ($self:ident, $op:literal) => {
        crate::context::hw_err($op, $self.ctx.name())
    };
}

impl CompletionQueue {
    pub(crate) fn create(ctx: &Context, depth: usize, channel: Option<&CompChannel>) -> Result<CompletionQueue> {
        if depth == 0 || depth > MAX_CQE as usize {
            return Err(Error::InvalidArgument { op: "create CQ", why: format!("depth {depth} not in 1..={MAX_CQE}") });
        }
        if let Some(ch) = channel {
            if !ch.context().same_device(ctx) {
                return Err(Error::InvalidArgument {
                    op: "create CQ",
                    why: format!(
                        "the completion channel belongs to device {}, the CQ to {}",
                        ch.context().name(),
                        ctx.name()
                    ),
                });
            }
        }
        let b = match &ctx.b {
            Backend::Emu(e) => {
                let cq = e.dev.create_cq(depth);
                if let Some(ch) = channel {
                    ch.attach_emu(&cq);
                }
                CqBackend::Emu(cq)
            }
            #[cfg(feature = "hw")]
            Backend::Hw(h) => CqBackend::Hw(
                h.ctx
                    .create_cq(depth, channel.and_then(CompChannel::hw))
                    .map_err(crate::context::hw_err("create CQ", ctx.name()))?,
            ),
        };
        Ok(CompletionQueue { ctx: ctx.clone(), b })
    }

    /// The CQ's number (named in its events).
    pub fn id(&self) -> u32 {
        match &self.b {
            CqBackend::Emu(cq) => cq.id(),
            #[cfg(feature = "hw")]
            CqBackend::Hw(cq) => cq.id(),
        }
    }

    /// Takes up to `out.len()` completions, oldest first (`ibv_poll_cq`). An error is the
    /// device's (a hardware provider refusing the poll), never "nothing there" (that is 0).
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        match &self.b {
            CqBackend::Emu(cq) => Ok(cq.poll(out)),
            #[cfg(feature = "hw")]
            CqBackend::Hw(cq) => cq.poll_wc(out).map_err(hw!(self, "poll CQ")),
        }
    }

    /// Takes one completion.
    pub fn poll_one(&self) -> Result<Option<WorkCompletion>> {
        match &self.b {
            CqBackend::Emu(cq) => Ok(cq.poll_one()),
            #[cfg(feature = "hw")]
            CqBackend::Hw(_) => {
                let mut one = [WorkCompletion::default()];
                Ok((self.poll(&mut one)? == 1).then_some(one[0]))
            }
        }
    }

    /// Busy-polls (yielding between tries) until `n` completions arrived or `timeout`
    /// passed; returns what arrived, in order. On a timeout the completions already taken
    /// stay in the CQ (the next poll returns them first): none is ever lost.
    pub fn wait(&self, n: usize, timeout: Duration) -> Result<Vec<WorkCompletion>> {
        let mut got = Vec::with_capacity(n);
        match &self.b {
            CqBackend::Emu(cq) => {
                let deadline = Instant::now() + timeout;
                while got.len() < n {
                    match cq.poll_one() {
                        Some(wc) => got.push(wc),
                        None if Instant::now() > deadline => {
                            // Nothing may drop a completion: what was taken goes back, in order.
                            cq.give_back(got);
                            return Err(Error::Timeout(timeout));
                        }
                        None => std::thread::yield_now(),
                    }
                }
            }
            #[cfg(feature = "hw")]
            CqBackend::Hw(cq) => {
                if let Err(e) = cq.wait_into(n, timeout, &mut got) {
                    cq.give_back(got);
                    return Err(hw!(self, "wait for completions")(e));
                }
            }
        }
        Ok(got)
    }

    /// Completions waiting. On hardware this polls the device (what it takes stays at
    /// the head of the CQ for the next poll).
    pub fn len(&self) -> usize {
        match &self.b {
            CqBackend::Emu(cq) => cq.len(),
            #[cfg(feature = "hw")]
            CqBackend::Hw(cq) => {
                let mut all = Vec::new();
                let mut buf = vec![WorkCompletion::default(); 64];
                while let Ok(k @ 1..) = cq.poll_wc(&mut buf) {
                    all.extend_from_slice(&buf[..k]);
                }
                cq.give_back(all);
                cq.stashed()
            }
        }
    }

    /// True when none is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Arms a notification (`ibv_req_notify_cq`): the next completion (with
    /// `solicited_only`, the next one for a message with the solicited-event bit, or an
    /// error completion) raises one event on the CQ's completion channel.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        match &self.b {
            CqBackend::Emu(cq) => {
                if !cq.has_channel() {
                    return Err(Error::InvalidArgument {
                        op: "req_notify_cq",
                        why: "the CQ has no completion channel".into(),
                    });
                }
                cq.req_notify(solicited_only);
                Ok(())
            }
            #[cfg(feature = "hw")]
            CqBackend::Hw(cq) => cq.req_notify(solicited_only).map_err(hw!(self, "req_notify_cq")),
        }
    }

    /// Acknowledges `n` events returned by [`CompChannel::get_cq_event`] for this CQ
    /// (`ibv_ack_cq_events`).
    pub fn ack_events(&self, n: u32) -> Result<()> {
        let refused = |outstanding| Error::AckCqEvents { cq: self.id(), n, outstanding };
        match &self.b {
            CqBackend::Emu(cq) => cq.ack_events(n).map_err(|_| refused(cq.unacked_events())),
            #[cfg(feature = "hw")]
            CqBackend::Hw(cq) => cq.ack_events(n).map_err(|_| refused(cq.unacked_events())),
        }
    }

    /// Events delivered and not yet acknowledged.
    pub fn unacked_events(&self) -> u32 {
        match &self.b {
            CqBackend::Emu(cq) => cq.unacked_events(),
            #[cfg(feature = "hw")]
            CqBackend::Hw(cq) => cq.unacked_events(),
        }
    }

    /// Gives the CQ room for `depth` completions (`ibv_resize_cq`), keeping those
    /// waiting; refused with [`Error::InvalidArgument`] below their number (work posted
    /// before the call counts once it completed: the device runs a round first). On hardware
    /// it is [`Error::Unsupported`].
    pub fn resize(&self, depth: usize) -> Result<()> {
        match &self.b {
            CqBackend::Emu(cq) => {
                let e = self.ctx.emu("resize_cq")?;
                e.dev.resize_cq(cq, depth).map_err(|e| Error::InvalidArgument { op: "resize_cq", why: e.to_string() })
            }
            #[cfg(feature = "hw")]
            CqBackend::Hw(_) => Err(Error::Unsupported {
                op: "resize_cq",
                device: self.ctx.name().to_string(),
                why: "the hardware backend does not resize CQs".into(),
            }),
        }
    }

    /// Stamps every completion from now on with the time it entered the CQ
    /// ([`WorkCompletion::timestamp_ns`], `CLOCK_MONOTONIC` nanoseconds; what
    /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` gives). On hardware it is
    /// [`Error::Unsupported`].
    pub fn stamp_completions(&self) -> Result<()> {
        match &self.b {
            CqBackend::Emu(cq) => {
                cq.stamp_completions();
                Ok(())
            }
            #[cfg(feature = "hw")]
            CqBackend::Hw(_) => Err(Error::Unsupported {
                op: "stamp_completions",
                device: self.ctx.name().to_string(),
                why: "the hardware backend polls ibv_cq, which carries no timestamp".into(),
            }),
        }
    }

    /// Destroys this handle, checking as `ibv_destroy_cq` does that every delivered event
    /// was acknowledged (the CQ itself goes when its last handle and QP are gone; a plain
    /// drop does not check, as Rust's `Drop` cannot report).
    pub fn destroy(self) -> Result<()> {
        match self.unacked_events() {
            0 => Ok(()),
            outstanding => Err(Error::UnackedCqEvents { cq: self.id(), outstanding }),
        }
    }

    /// Sleeps until a completion is available, using `channel` (to which this CQ must
    /// belong), or `timeout` passes; then takes it. The sleeping counterpart of
    /// [`CompletionQueue::wait`].
    pub fn wait_event(&self, channel: &CompChannel, timeout: Duration) -> Result<WorkCompletion> {
        if !channel.reports(self) {
            return Err(Error::InvalidArgument {
                op: "wait_event",
                why: format!("CQ {} does not report to this completion channel", self.id()),
            });
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(wc) = self.poll_one()? {
                return Ok(wc);
            }
            self.req_notify(false)?;
            // A completion that landed before arming raises no event: poll again.
            if let Some(wc) = self.poll_one()? {
                return Ok(wc);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let cq = match channel.get_cq_event(left) {
                Ok(cq) => cq,
                Err(Error::EventTimeout(_)) => return Err(Error::Timeout(timeout)),
                Err(e) => return Err(e),
            };
            cq.ack_events(1)?;
        }
    }

    /// The device.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}

// What a channel hands back is a CQ: these live here, beside the CQ they make, so that
// the channel (which every CQ on it holds) does not name CQs.
impl CompChannel {
    /// True when `cq` reports its events here.
    pub(crate) fn reports(&self, cq: &CompletionQueue) -> bool {
        match (&self.inner.b, &cq.b) {
            (ChanBackend::Emu { cqs, .. }, CqBackend::Emu(c)) => {
                cqs.lock().get(&c.id()).is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(c)))
            }
            #[cfg(feature = "hw")]
            (ChanBackend::Hw(ch), CqBackend::Hw(c)) => c.reports_to(ch),
            #[cfg(feature = "hw")]
            _ => false,
        }
    }

    /// Sleeps until an armed CQ of this channel raises its event (`ibv_get_cq_event`) or
    /// `timeout` passes. Each event must be acknowledged with
    /// [`CompletionQueue::ack_events`]. The CQ is disarmed: arm it again for the next.
    pub fn get_cq_event(&self, timeout: Duration) -> Result<CompletionQueue> {
        let ctx = self.inner.ctx.clone();
        match &self.inner.b {
            ChanBackend::Emu { rx, cqs, wake, .. } => {
                let deadline = Instant::now() + timeout;
                loop {
                    wake.clear();
                    let id = match rx.try_recv() {
                        Ok(id) => id,
                        Err(crossbeam_channel::TryRecvError::Disconnected) => return Err(Error::EventTimeout(timeout)),
                        Err(crossbeam_channel::TryRecvError::Empty) => {
                            let left = deadline.saturating_duration_since(Instant::now());
                            if left.is_zero() {
                                return Err(Error::EventTimeout(timeout));
                            }
                            // Sleep doing the device's work for the channel's first CQ on this
                            // thread: a datagram wakes it, one wake-up per message.
                            let first = cqs.lock().values().find_map(Weak::upgrade);
                            match (first, &ctx.b) {
                                (Some(cq), crate::context::Backend::Emu(e)) => {
                                    e.dev.wait_driving(&cq, std::os::fd::AsFd::as_fd(&**wake), Some(left));
                                }
                                _ => {
                                    wake.wait(Some(left));
                                }
                            }
                            continue;
                        }
                    };
                    // An event of a CQ dropped meanwhile is skipped.
                    let cq = cqs.lock().get(&id).and_then(Weak::upgrade);
                    if let Some(cq) = cq {
                        cq.note_event_delivered();
                        return Ok(CompletionQueue { ctx, b: CqBackend::Emu(cq) });
                    }
                }
            }
            #[cfg(feature = "hw")]
            ChanBackend::Hw(ch) => match ch.get_cq_event(timeout) {
                Ok(cq) => Ok(CompletionQueue { ctx, b: CqBackend::Hw(cq) }),
                Err(crate::hw::HwError::Timeout(_)) => Err(Error::EventTimeout(timeout)),
                Err(e) => Err(crate::context::hw_err("get CQ event", self.inner.ctx.name())(e)),
            },
        }
    }
}
