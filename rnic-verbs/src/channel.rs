//! Completion channels (`ibv_comp_channel`).

use crate::context::{Backend, Context};
use crate::cq::{CompletionQueue, CqBackend};
use crate::{Error, Result};
use rnic_core::cq::Cq;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

#[derive(Debug)]
enum ChanBackend {
    Emu {
        tx: crossbeam_channel::Sender<u32>,
        rx: crossbeam_channel::Receiver<u32>,
        cqs: parking_lot::Mutex<HashMap<u32, Weak<Cq>>>,
    },
    #[cfg(feature = "hw")]
    Hw(crate::hw::HwCompChannel),
}

#[derive(Debug)]
struct ChannelInner {
    ctx: Context,
    b: ChanBackend,
}

/// A completion channel (`ibv_comp_channel`): where armed CQs report their next
/// completion, so a thread can sleep instead of polling.
///
/// The pattern is ibverbs': `cq.req_notify(false)`; poll the CQ once more (a completion
/// that arrived before arming raises no event); `chan.get_cq_event(timeout)` sleeps until
/// an armed CQ gets a completion and returns it; `cq.ack_events(1)`; arm again; poll.
#[derive(Clone, Debug)]
pub struct CompChannel {
    inner: Arc<ChannelInner>,
}

impl CompChannel {
    pub(crate) fn create(ctx: &Context) -> Result<CompChannel> {
        let b = match &ctx.b {
            Backend::Emu(_) => {
                let (tx, rx) = crossbeam_channel::unbounded();
                ChanBackend::Emu { tx, rx, cqs: parking_lot::Mutex::new(HashMap::new()) }
            }
            #[cfg(feature = "hw")]
            Backend::Hw(h) => ChanBackend::Hw(
                h.ctx.create_comp_channel().map_err(crate::context::hw_err("create completion channel", ctx.name()))?,
            ),
        };
        Ok(CompChannel { inner: Arc::new(ChannelInner { ctx: ctx.clone(), b }) })
    }

    /// The device.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Connects an emulated CQ to this channel.
    pub(crate) fn attach_emu(&self, cq: &Arc<Cq>) {
        if let ChanBackend::Emu { tx, cqs, .. } = &self.inner.b {
            cq.set_channel(Some(tx.clone()));
            cqs.lock().insert(cq.id(), Arc::downgrade(cq));
        }
    }

    /// The hardware channel.
    #[cfg(feature = "hw")]
    pub(crate) fn hw(&self) -> Option<&crate::hw::HwCompChannel> {
        match &self.inner.b {
            ChanBackend::Hw(c) => Some(c),
            ChanBackend::Emu { .. } => None,
        }
    }

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
            ChanBackend::Emu { rx, cqs, .. } => {
                let deadline = Instant::now() + timeout;
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let id = match rx.recv_timeout(left) {
                        Ok(id) => id,
                        Err(_) => return Err(Error::EventTimeout(timeout)),
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
