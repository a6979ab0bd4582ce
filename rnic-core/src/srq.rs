//! Shared receive queues (`ibv_srq`): one pool of receive WQEs that several QPs' responders
//! take from, with the SRQ limit event; and XRC domains (IBA Annex A14), whose XRC SRQs
//! an XRC target QP takes receive WQEs from by the number a request's XRCETH names.
//!
//! The application posts from its own thread straight into a lock-free bounded queue (the
//! SGEs are checked on the posting thread, as for a QP's receive queue); the progress thread
//! takes the oldest WQE when a SEND (or WRITE with immediate) starts on a QP attached to the
//! SRQ (rxe `get_srq_wqe`). No lock is shared between the two.

use crate::cq::Cq;
use crate::mr::{AccessFlags, Mtpt, PdId};
use crate::post::{PostError, RecvWqe};
use crate::wr::RecvWrRef;
use crossbeam_queue::ArrayQueue;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock, Weak};

/// Why modifying an SRQ failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SrqError {
    /// The limit is above the SRQ's depth (`ibv_modify_srq` fails with EINVAL).
    #[error("SRQ limit {limit} exceeds the SRQ's {max_wr} work requests")]
    LimitTooLarge {
        /// The limit asked for.
        limit: u32,
        /// The SRQ's depth.
        max_wr: u32,
    },
}

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq {
    id: u32,
    pd: PdId,
    max_sge: u32,
    queue: ArrayQueue<RecvWqe>,
    /// The armed limit; 0 = not armed.
    limit: AtomicU32,
    /// SGEs' keys are checked when a WQE is used ([`Srq::check_keys_at_execution`]).
    keys_at_execution: std::sync::atomic::AtomicBool,
    /// An XRC SRQ: its domain and the CQ its receives complete in.
    xrc: Option<XrcSrq>,
}

#[derive(Debug)]
struct XrcSrq {
    xrcd: u32,
    cq: Arc<Cq>,
}

/// An XRC domain (`ibv_xrcd`, IBA Annex A14): the XRC SRQs and XRC target QPs that belong
/// together. A target QP takes a request's receive WQE from the SRQ whose number the
/// request's XRCETH carries, and only from one of its own domain (IBA Annex A14).
#[derive(Debug)]
pub struct Xrcd {
    id: u32,
    srqs: RwLock<HashMap<u32, Weak<Srq>>>,
}

impl Xrcd {
    /// An empty domain.
    pub fn new(id: u32) -> Xrcd {
        Xrcd { id, srqs: RwLock::new(HashMap::new()) }
    }

    /// The domain's id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The XRC SRQ numbered `srqn` if it is alive and in this domain (the responder's
    /// look-up for an XRCETH).
    pub fn srq(&self, srqn: u32) -> Option<Arc<Srq>> {
        self.srqs.read().unwrap_or_else(|e| e.into_inner()).get(&srqn).and_then(Weak::upgrade)
    }

    /// XRC SRQs alive in the domain.
    pub fn srq_count(&self) -> usize {
        self.srqs.read().unwrap_or_else(|e| e.into_inner()).values().filter(|w| w.strong_count() > 0).count()
    }
}

impl Srq {
    /// An SRQ of `max_wr` receive WQEs of up to `max_sge` SGEs each, in protection domain `pd`.
    pub fn new(id: u32, pd: PdId, max_wr: u32, max_sge: u32) -> Srq {
        Srq {
            id,
            pd,
            max_sge,
            queue: ArrayQueue::new(usize::try_from(max_wr.max(1)).unwrap_or(1)),
            limit: AtomicU32::new(0),
            keys_at_execution: std::sync::atomic::AtomicBool::new(false),
            xrc: None,
        }
    }

    /// An XRC SRQ (`ibv_create_srq_ex` with `IBV_SRQT_XRC`) in `xrcd`, its receives
    /// checked against `pd` and completed in `cq`; numbered `id` (`ibv_get_srq_num`),
    /// which the domain finds it by.
    pub fn new_xrc(id: u32, pd: PdId, max_wr: u32, max_sge: u32, xrcd: &Xrcd, cq: Arc<Cq>) -> Arc<Srq> {
        let srq = Arc::new(Srq { xrc: Some(XrcSrq { xrcd: xrcd.id, cq }), ..Srq::new(id, pd, max_wr, max_sge) });
        let mut srqs = xrcd.srqs.write().unwrap_or_else(|e| e.into_inner());
        srqs.retain(|_, w| w.strong_count() > 0);
        srqs.insert(id, Arc::downgrade(&srq));
        srq
    }

    /// The XRC domain of an XRC SRQ.
    pub fn xrcd(&self) -> Option<u32> {
        self.xrc.as_ref().map(|x| x.xrcd)
    }

    /// The CQ an XRC SRQ's receives complete in (a plain SRQ's complete in the CQ of the
    /// QP that took them).
    pub fn cq(&self) -> Option<&Arc<Cq>> {
        self.xrc.as_ref().map(|x| &x.cq)
    }

    /// From now on a receive posted with a key it may not use is accepted, and fails
    /// when a SEND reaches it, as a QP's with
    /// [`QpInit::keys_at_execution`](crate::engine::qp::QpInit::keys_at_execution).
    pub fn check_keys_at_execution(&self) {
        self.keys_at_execution.store(true, Ordering::Relaxed);
    }

    /// The SRQ's id (named in its limit event).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The protection domain.
    pub fn pd(&self) -> PdId {
        self.pd
    }

    /// Depth.
    pub fn max_wr(&self) -> u32 {
        u32::try_from(self.queue.capacity()).unwrap_or(u32::MAX)
    }

    /// SGEs per WQE.
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// Receive WQEs waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True when no receive WQE waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The armed limit (0: not armed).
    pub fn limit(&self) -> u32 {
        self.limit.load(Ordering::Acquire)
    }

    /// Posts a receive WQE (`ibv_post_srq_recv`): its buffers must be locally writable
    /// regions of the SRQ's PD.
    pub fn post_recv<'a>(&self, mtpt: &Mtpt, wr: impl Into<RecvWrRef<'a>>) -> Result<(), PostError> {
        let wr = &wr.into();
        if wr.sg_list.len() > self.max_sge as usize {
            return Err(PostError::TooManySges { given: wr.sg_list.len(), max: self.max_sge });
        }
        // The same checks as a QP's receive queue (validate_recv).
        let mut wqe = RecvWqe::unchecked(wr.wr_id);
        let late = self.keys_at_execution.load(Ordering::Relaxed);
        wqe.len = wqe.data.check_sges(mtpt, self.pd, wr.sg_list, AccessFlags::LOCAL_WRITE, late)?;
        self.queue.push(wqe).map_err(|_| PostError::QueueFull { queue: "shared receive", depth: self.max_wr() })
    }

    /// Arms the limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): once a WQE is taken and
    /// fewer than `limit` remain, the SRQ-limit event is raised once and the limit
    /// disarms (rxe `get_srq_wqe`). 0 disarms.
    pub fn set_limit(&self, limit: u32) -> Result<(), SrqError> {
        if limit > self.max_wr() {
            return Err(SrqError::LimitTooLarge { limit, max_wr: self.max_wr() });
        }
        self.limit.store(limit, Ordering::Release);
        Ok(())
    }

    /// Takes the oldest WQE (progress thread). The flag says the limit was crossed by
    /// this take: the caller raises the event.
    pub(crate) fn take(&self) -> Option<(RecvWqe, bool)> {
        let wqe = self.queue.pop()?;
        let left = u32::try_from(self.queue.len()).unwrap_or(u32::MAX);
        let limit = self.limit.load(Ordering::Acquire);
        let fired = limit != 0
            && left < limit
            && self.limit.compare_exchange(limit, 0, Ordering::AcqRel, Ordering::Acquire).is_ok();
        Some((wqe, fired))
    }
}
