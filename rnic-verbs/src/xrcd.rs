//! XRC domains (`ibv_xrcd`, IBA Annex A14): the XRC SRQs and XRC target QPs that belong
//! together. One XRC initiator QP (`QpType::XrcSend`) reaches every XRC SRQ of the domain
//! its peer target QP (`QpType::XrcRecv`) is in, naming the SRQ in each work request
//! ([`SendWrRef::to_srq`](crate::SendWrRef::to_srq)); a request naming an SRQ of another
//! domain is NAKed (invalid request) and completes in error at the initiator.

use crate::context::{Backend, Context};
use crate::{CompletionQueue, Error, ProtectionDomain, Result, SharedReceiveQueue};
use rnic_core::srq::Xrcd as CoreXrcd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Domain numbers of this crate's emulated domains (rnic-core's `Xrcd` takes one; the
/// domain is found by identity).
static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// An XRC domain (`ibv_open_xrcd` without a file: a domain of its own; share it within
/// the program by cloning the handle). XRC SRQs ([`ProtectionDomain::create_xrc_srq`]) and
/// XRC target QPs ([`QpBuilder::xrcd`](crate::QpBuilder::xrcd)) are made in it and hold
/// it; it closes with the last of them.
#[derive(Clone, Debug)]
pub struct XrcDomain {
    pub(crate) ctx: Context,
    pub(crate) b: XrcdBackend,
}

#[derive(Clone, Debug)]
pub(crate) enum XrcdBackend {
    Emu(Arc<CoreXrcd>),
    #[cfg(feature = "hw")]
    Hw(crate::hw::HwXrcd),
}

impl Context {
    /// Opens a new XRC domain (`ibv_open_xrcd`; on hardware through the provider's
    /// `verbs_context`, with no file).
    pub fn open_xrcd(&self) -> Result<XrcDomain> {
        let b = match &self.b {
            Backend::Emu(_) => XrcdBackend::Emu(Arc::new(CoreXrcd::new(NEXT_ID.fetch_add(1, Ordering::Relaxed)))),
            #[cfg(feature = "hw")]
            Backend::Hw(h) => {
                XrcdBackend::Hw(h.ctx.open_xrcd().map_err(crate::context::hw_err("open XRC domain", self.name()))?)
            }
        };
        Ok(XrcDomain { ctx: self.clone(), b })
    }
}

impl XrcDomain {
    /// The device.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Whether the two handles are the one domain.
    pub fn same(&self, other: &XrcDomain) -> bool {
        match (&self.b, &other.b) {
            (XrcdBackend::Emu(a), XrcdBackend::Emu(b)) => Arc::ptr_eq(a, b),
            #[cfg(feature = "hw")]
            (XrcdBackend::Hw(a), XrcdBackend::Hw(b)) => a.same(b),
            #[cfg(feature = "hw")]
            _ => false,
        }
    }

    /// Whether `srq` is an XRC SRQ of this domain (one a target QP of the domain reaches).
    pub fn holds(&self, srq: &SharedReceiveQueue) -> bool {
        srq.xrcd().is_some_and(|d| d.same(self))
    }
}

// An XRC SRQ is made here, beside the domain it is in, so that the PD does not name domains.
impl ProtectionDomain {
    /// Creates an XRC SRQ (`ibv_create_srq_ex` with `IBV_SRQT_XRC`) of `max_wr` receive
    /// WQEs of up to `max_sge` SGEs in XRC domain `xrcd`: an XRC target QP of the domain
    /// takes a request's receive WQE from the SRQ whose number
    /// ([`SharedReceiveQueue::id`], `ibv_get_srq_num`) the request names; the message's
    /// memory is checked against this PD and its receive completes in `cq` (IBA Annex
    /// A14). The PD, domain and CQ must be of one device.
    pub fn create_xrc_srq(
        &self,
        xrcd: &XrcDomain,
        cq: &CompletionQueue,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<SharedReceiveQueue> {
        for (what, other) in [("XRC domain", &xrcd.ctx), ("CQ", &cq.ctx)] {
            if !other.same_device(self.context()) {
                return Err(Error::InvalidArgument {
                    op: "create XRC SRQ",
                    why: format!(
                        "the {what} belongs to device {}, the protection domain to {}",
                        other.name(),
                        self.context().name()
                    ),
                });
            }
        }
        SharedReceiveQueue::create_xrc(self, xrcd, cq, max_wr, max_sge)
    }
}
