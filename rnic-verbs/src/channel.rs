//! Completion channels (`ibv_comp_channel`).

use crate::context::{Backend, Context};
use crate::Result;
use rnic_core::cq::Cq;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

#[derive(Debug)]
pub(crate) enum ChanBackend {
    Emu {
        tx: crossbeam_channel::Sender<u32>,
        rx: crossbeam_channel::Receiver<u32>,
        cqs: parking_lot::Mutex<HashMap<u32, Weak<Cq>>>,
        /// Readable once an event is queued: `get_cq_event` sleeps on it while it does the
        /// device's work (`Device::wait_driving`).
        wake: Arc<rnic_io::EventFd>,
    },
    #[cfg(feature = "hw")]
    Hw(crate::hw::HwCompChannel),
}

#[derive(Debug)]
pub(crate) struct ChannelInner {
    pub(crate) ctx: Context,
    pub(crate) b: ChanBackend,
}

/// A completion channel (`ibv_comp_channel`): where armed CQs report their next
/// completion, so a thread can sleep instead of polling.
///
/// The pattern is ibverbs': `cq.req_notify(false)`; poll the CQ once more (a completion
/// that arrived before arming raises no event); `chan.get_cq_event(timeout)` sleeps until
/// an armed CQ gets a completion and returns it; `cq.ack_events(1)`; arm again; poll.
#[derive(Clone, Debug)]
pub struct CompChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

impl CompChannel {
    pub(crate) fn create(ctx: &Context) -> Result<CompChannel> {
        let b = match &ctx.b {
            Backend::Emu(_) => {
                let (tx, rx) = crossbeam_channel::unbounded();
                let wake = Arc::new(
                    rnic_io::EventFd::new()
                        .map_err(|e| crate::Error::Host { op: "create completion channel", source: e })?,
                );
                ChanBackend::Emu { tx, rx, cqs: parking_lot::Mutex::new(HashMap::new()), wake }
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
        if let ChanBackend::Emu { tx, cqs, wake, .. } = &self.inner.b {
            cq.set_channel(Some(tx.clone()));
            let wake = wake.clone();
            cq.set_notifier(Some(rnic_core::cq::CqNotifier(Arc::new(move |_| wake.notify()))));
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
}
