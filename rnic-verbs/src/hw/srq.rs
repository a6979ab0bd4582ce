//! Shared receive queues.

use super::convert::{IbvRecvList, RecvWrRef};
use super::cq::HwCq;
use super::pd::HwPd;
use super::xrcd::HwXrcd;
use super::{HwError, HwResult};
use rnic_verbs_sys::{self as sys, ibv_srq};
use std::fmt;
use std::sync::Arc;

pub(super) struct SrqInner {
    pd: HwPd,
    pub(super) srq: *mut ibv_srq,
    /// An XRC SRQ's number (`ibv_get_srq_num`), domain and CQ (held while it lives).
    xrc: Option<(u32, HwXrcd, HwCq)>,
}

// SAFETY: SRQs may be posted to from any thread (the provider locks); freed only in Drop.
unsafe impl Send for SrqInner {}
// SAFETY: as above.
unsafe impl Sync for SrqInner {}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // SAFETY: QPs using the SRQ hold an Arc to it, so none is left; destroyed once.
        unsafe { (self.pd.context().verbs().ibv_destroy_srq)(self.srq) };
    }
}

/// A shared receive queue (`ibv_srq`). Clones share it.
#[derive(Clone)]
pub struct HwSrq {
    pub(super) inner: Arc<SrqInner>,
}

impl fmt::Debug for HwSrq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HwSrq").field("id", &self.id()).finish_non_exhaustive()
    }
}

impl HwSrq {
    pub(super) fn create(pd: &HwPd, max_wr: u32, max_sge: u32) -> HwResult<HwSrq> {
        let mut init = sys::ibv_srq_init_attr::default();
        init.attr.max_wr = max_wr;
        init.attr.max_sge = max_sge;
        // SAFETY: a live PD and a valid init struct.
        let srq = unsafe { (pd.context().verbs().ibv_create_srq)(pd.as_ptr(), &mut init) };
        if srq.is_null() {
            return Err(HwError::last_os(format!("ibv_create_srq(max_wr {max_wr}, max_sge {max_sge})")));
        }
        Ok(HwSrq { inner: Arc::new(SrqInner { pd: pd.clone(), srq, xrc: None }) })
    }

    pub(super) fn create_xrc(pd: &HwPd, xrcd: &HwXrcd, cq: &HwCq, max_wr: u32, max_sge: u32) -> HwResult<HwSrq> {
        let mut init = sys::ibv_srq_init_attr_ex {
            srq_context: std::ptr::null_mut(),
            attr: sys::ibv_srq_attr { max_wr, max_sge, srq_limit: 0 },
            comp_mask: sys::IBV_SRQ_INIT_ATTR_TYPE
                | sys::IBV_SRQ_INIT_ATTR_PD
                | sys::IBV_SRQ_INIT_ATTR_XRCD
                | sys::IBV_SRQ_INIT_ATTR_CQ,
            srq_type: sys::IBV_SRQT_XRC,
            pd: pd.as_ptr(),
            xrcd: xrcd.as_ptr(),
            cq: cq.as_ptr(),
            tm_cap: sys::ibv_tm_cap::default(),
        };
        // SAFETY: a live context, PD, domain and CQ (held by the SRQ) and a valid struct.
        let srq = unsafe { sys::ops::create_srq_ex(pd.context().as_ptr(), &mut init) };
        if srq.is_null() {
            return Err(HwError::last_os(format!("ibv_create_srq_ex(XRC, max_wr {max_wr}, max_sge {max_sge})")));
        }
        let mut num = 0;
        // SAFETY: a live SRQ and a writable u32.
        let r = unsafe { sys::ops::get_srq_num(srq, &mut num) };
        if r != 0 {
            // SAFETY: just created, nothing else holds it.
            unsafe { (pd.context().verbs().ibv_destroy_srq)(srq) };
            return Err(HwError::ret("ibv_get_srq_num", r));
        }
        let xrc = Some((num, xrcd.clone(), cq.clone()));
        Ok(HwSrq { inner: Arc::new(SrqInner { pd: pd.clone(), srq, xrc }) })
    }

    /// The SRQ's number: an XRC SRQ's `ibv_get_srq_num` (what an initiator's work
    /// request names), any other's kernel handle (named in its limit event).
    pub fn id(&self) -> u32 {
        match &self.inner.xrc {
            Some((num, ..)) => *num,
            // SAFETY: a live SRQ.
            None => unsafe { (*self.inner.srq).handle },
        }
    }

    /// An XRC SRQ's domain.
    pub fn xrcd(&self) -> Option<&HwXrcd> {
        self.inner.xrc.as_ref().map(|(_, d, _)| d)
    }

    /// The protection domain.
    pub fn pd(&self) -> &HwPd {
        &self.inner.pd
    }

    /// The raw SRQ, valid while `self` lives.
    pub fn as_ptr(&self) -> *mut ibv_srq {
        self.inner.srq
    }

    /// `ibv_post_srq_recv` through `context->ops`, the whole list in one call.
    pub fn post_recv<'a, W: Into<RecvWrRef<'a>>>(&self, wrs: impl IntoIterator<Item = W>) -> HwResult<()> {
        let mut l = IbvRecvList::new(wrs)?;
        if l.is_empty() {
            return Ok(());
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live SRQ; the list and its SGEs live across the call.
        let r = unsafe { sys::ops::post_srq_recv(self.inner.srq, l.head(), &mut bad) };
        if r != 0 {
            let (index, wr_id) = l.index_of(bad).unwrap_or((0, l.first_id()));
            return Err(HwError::Post {
                op: "ibv_post_srq_recv",
                index,
                wr_id,
                source: std::io::Error::from_raw_os_error(r.abs()),
            });
        }
        Ok(())
    }

    /// Arms the limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`); 0 disarms.
    pub fn modify_limit(&self, limit: u32) -> HwResult<()> {
        let mut a = sys::ibv_srq_attr { srq_limit: limit, ..Default::default() };
        let mask = sys::IBV_SRQ_LIMIT as libc::c_int;
        // SAFETY: a live SRQ and a valid attribute struct.
        let r = unsafe { (self.pd().context().verbs().ibv_modify_srq)(self.inner.srq, &mut a, mask) };
        if r != 0 {
            return Err(HwError::ret(format!("ibv_modify_srq(limit {limit})"), r));
        }
        Ok(())
    }

    /// `ibv_query_srq`: (max_wr, max_sge, armed limit).
    pub fn query(&self) -> HwResult<sys::ibv_srq_attr> {
        let mut a = sys::ibv_srq_attr::default();
        // SAFETY: a live SRQ and a writable attribute struct.
        let r = unsafe { (self.pd().context().verbs().ibv_query_srq)(self.inner.srq, &mut a) };
        if r != 0 {
            return Err(HwError::ret("ibv_query_srq", r));
        }
        Ok(a)
    }

    /// The armed limit (0 when not armed).
    pub fn limit(&self) -> HwResult<u32> {
        Ok(self.query()?.srq_limit)
    }
}

// Made here, beside the type, so that the PD (which it holds) does not name it.
impl HwPd {
    /// Creates a shared receive queue (`ibv_create_srq`).
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> HwResult<HwSrq> {
        HwSrq::create(self, max_wr, max_sge)
    }

    /// Creates an XRC SRQ in `xrcd` whose receives complete in `cq`
    /// (`ibv_create_srq_ex` with `IBV_SRQT_XRC`; its number from `ibv_get_srq_num`).
    pub fn create_xrc_srq(&self, xrcd: &HwXrcd, cq: &HwCq, max_wr: u32, max_sge: u32) -> HwResult<HwSrq> {
        HwSrq::create_xrc(self, xrcd, cq, max_wr, max_sge)
    }
}
