//! Shared receive queues (`ibv_srq`).

use crate::cq::CqBackend;
use crate::pd::{PdBackend, ProtectionDomain};
use crate::xrcd::XrcdBackend;
use crate::{CompletionQueue, Error, RecvWrRef, Result, XrcDomain};
use std::sync::Arc;

#[derive(Clone, Debug)]
pub(crate) enum SrqBackend {
    Emu(Arc<rnic_core::srq::Srq>),
    #[cfg(feature = "hw")]
    Hw(crate::hw::HwSrq),
}

/// A shared receive queue (`ibv_srq`), plain or XRC
/// ([`ProtectionDomain::create_xrc_srq`]). Clones share it.
#[derive(Clone, Debug)]
pub struct SharedReceiveQueue {
    pub(crate) pd: ProtectionDomain,
    pub(crate) b: SrqBackend,
    /// An XRC SRQ's domain and the CQ its receives complete in, held while it lives.
    pub(crate) xrc: Option<(XrcDomain, CompletionQueue)>,
}

#[cfg(feature = "hw")]
macro_rules! hw {
    ($self:ident, $op:literal) => {
        crate::context::hw_err($op, $self.pd.context().name())
    };
}

impl SharedReceiveQueue {
    pub(crate) fn create(pd: &ProtectionDomain, max_wr: u32, max_sge: u32) -> Result<SharedReceiveQueue> {
        ProtectionDomain::check_srq_size(max_wr, max_sge)?;
        let b = match &pd.inner.b {
            PdBackend::Emu(_) => {
                let (e, id) = pd.emu_pd();
                SrqBackend::Emu(e.dev.create_srq(id, max_wr, max_sge))
            }
            #[cfg(feature = "hw")]
            PdBackend::Hw(h) => SrqBackend::Hw(
                h.create_srq(max_wr, max_sge).map_err(crate::context::hw_err("create SRQ", pd.context().name()))?,
            ),
        };
        Ok(SharedReceiveQueue { pd: pd.clone(), b, xrc: None })
    }

    /// An XRC SRQ (the caller checked that the PD, domain and CQ are of one device).
    pub(crate) fn create_xrc(
        pd: &ProtectionDomain,
        xrcd: &XrcDomain,
        cq: &CompletionQueue,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<SharedReceiveQueue> {
        ProtectionDomain::check_srq_size(max_wr, max_sge)?;
        // The caller checked that the PD, domain and CQ are of one device (one backend).
        let b = match (&pd.inner.b, &xrcd.b, &cq.b) {
            (PdBackend::Emu(_), XrcdBackend::Emu(d), CqBackend::Emu(c)) => {
                let (e, id) = pd.emu_pd();
                SrqBackend::Emu(e.dev.create_xrc_srq(id, max_wr, max_sge, d, c.clone()))
            }
            #[cfg(feature = "hw")]
            (PdBackend::Hw(p), XrcdBackend::Hw(d), CqBackend::Hw(c)) => SrqBackend::Hw(
                p.create_xrc_srq(d, c, max_wr, max_sge)
                    .map_err(crate::context::hw_err("create XRC SRQ", pd.context().name()))?,
            ),
            #[cfg(feature = "hw")]
            _ => unreachable!("checked: one device"),
        };
        Ok(SharedReceiveQueue { pd: pd.clone(), b, xrc: Some((xrcd.clone(), cq.clone())) })
    }

    /// An XRC SRQ's domain (`None` for a plain SRQ).
    pub fn xrcd(&self) -> Option<&XrcDomain> {
        self.xrc.as_ref().map(|(d, _)| d)
    }

    /// The CQ an XRC SRQ's receives complete in (`None` for a plain SRQ, whose receives
    /// complete in the receive CQ of the QP that took them).
    pub fn cq(&self) -> Option<&CompletionQueue> {
        self.xrc.as_ref().map(|(_, c)| c)
    }

    /// The protection domain the SRQ belongs to.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The SRQ's number (named in its limit event; for an XRC SRQ also `ibv_get_srq_num`:
    /// what an initiator's work request names it by, [`SendWrRef::to_srq`](crate::SendWrRef::to_srq)).
    pub fn id(&self) -> u32 {
        match &self.b {
            SrqBackend::Emu(s) => s.id(),
            #[cfg(feature = "hw")]
            SrqBackend::Hw(s) => s.id(),
        }
    }

    /// Posts a receive work request (`ibv_post_srq_recv`); its buffers must be locally
    /// writable regions of the SRQ's protection domain.
    pub fn post_recv<'a>(&self, wr: impl Into<RecvWrRef<'a>>) -> Result<()> {
        match &self.b {
            SrqBackend::Emu(s) => {
                let (e, _) = self.pd.emu_pd();
                e.dev.post_srq_recv(s, wr).map_err(|source| Error::PostSrqRecv { srq: self.id(), source })
            }
            #[cfg(feature = "hw")]
            SrqBackend::Hw(s) => s.post_recv([wr.into()]).map_err(hw!(self, "post receive on SRQ")),
        }
    }

    /// Arms the SRQ limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): when a receive WQE is
    /// taken and fewer than `limit` remain, [`AsyncEvent::SrqLimitReached`](crate::AsyncEvent)
    /// is raised once and the limit disarms; arm it again to hear of the next time. 0
    /// disarms.
    pub fn modify_limit(&self, limit: u32) -> Result<()> {
        match &self.b {
            SrqBackend::Emu(s) => s.set_limit(limit).map_err(|source| Error::ModifySrq { srq: self.id(), source }),
            #[cfg(feature = "hw")]
            SrqBackend::Hw(s) => s.modify_limit(limit).map_err(hw!(self, "modify SRQ")),
        }
    }

    /// The armed limit (`ibv_query_srq`), 0 when not armed.
    pub fn limit(&self) -> Result<u32> {
        match &self.b {
            SrqBackend::Emu(s) => Ok(s.limit()),
            #[cfg(feature = "hw")]
            SrqBackend::Hw(s) => s.limit().map_err(hw!(self, "query SRQ")),
        }
    }

    /// Receive WQEs waiting, where the device can tell (an emulated SRQ; verbs have no
    /// call for it, so a hardware SRQ returns [`Error::Unsupported`]).
    pub fn len(&self) -> Result<usize> {
        match &self.b {
            SrqBackend::Emu(s) => Ok(s.len()),
            #[cfg(feature = "hw")]
            SrqBackend::Hw(_) => Err(Error::Unsupported {
                op: "SRQ length",
                device: self.pd.context().name().to_string(),
                why: "verbs cannot count a hardware SRQ's posted receives".into(),
            }),
        }
    }

    /// True when no receive WQE waits (see [`len`](Self::len)).
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
}
