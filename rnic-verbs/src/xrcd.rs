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

/// Domain numbers of this crate's domains (the domain is found by identity, the number
/// only tells them apart in `Debug` output).
static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// An XRC domain (`ibv_open_xrcd` without a file: a domain of its own; share it within
/// the program by cloning the handle). XRC SRQs ([`ProtectionDomain::create_xrc_srq`]) and
/// XRC target QPs ([`QpBuilder::xrcd`](crate::QpBuilder::xrcd)) are made in it and hold
/// it; it closes with the last of them.
#[derive(Clone, Debug)]
pub struct XrcDomain {
    pub(crate) ctx: Context,
    pub(crate) xrcd: Arc<CoreXrcd>,
}

impl Context {
    /// Opens a new XRC domain (`ibv_open_xrcd`). On hardware it is
    /// [`Error::Unsupported`] (the backend does not wrap XRC).
    pub fn open_xrcd(&self) -> Result<XrcDomain> {
        match &self.b {
            Backend::Emu(_) => Ok(XrcDomain {
                ctx: self.clone(),
                xrcd: Arc::new(CoreXrcd::new(NEXT_ID.fetch_add(1, Ordering::Relaxed))),
            }),
            #[cfg(feature = "hw")]
            Backend::Hw(_) => Err(Error::Unsupported {
                op: "ibv_open_xrcd",
                device: self.name().to_string(),
                why: "the hardware backend does not wrap XRC domains, XRC SRQs or XRC QPs".into(),
            }),
        }
    }
}

impl XrcDomain {
    /// The device.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The domain's number (for messages; domains are told apart by identity).
    pub fn id(&self) -> u32 {
        self.xrcd.id()
    }

    /// XRC SRQs alive in the domain.
    pub fn srq_count(&self) -> usize {
        self.xrcd.srq_count()
    }

    /// Whether `srq` is an XRC SRQ of this domain (one a target QP of the domain reaches).
    pub fn holds(&self, srq: &SharedReceiveQueue) -> bool {
        self.xrcd.srq(srq.id()).is_some_and(|s| srq.is_core(&s))
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
