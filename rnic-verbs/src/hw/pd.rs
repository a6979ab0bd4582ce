//! Protection domains: the factory for memory regions, QPs, SRQs and address handles.

use super::context::HwContext;
use super::convert::{ah_attr_to_gid, Gid};
use super::{HwError, HwResult};
use parking_lot::Mutex;
use rnic_verbs_sys::ibv_pd;
use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

/// A raw AH owned by the PD's cache.
struct AhPtr(*mut rnic_verbs_sys::ibv_ah);

pub(super) struct PdInner {
    ctx: HwContext,
    pd: *mut ibv_pd,
    /// Address handles of UD sends given as rnic `UdDest`s, by destination; destroyed
    /// with the PD (a QP posting them holds the PD).
    ud_ahs: Mutex<HashMap<IpAddr, AhPtr>>,
}

// SAFETY: a PD is an immutable kernel object handle usable from any thread; freed only in Drop.
unsafe impl Send for PdInner {}
// SAFETY: as above.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        let v = self.ctx.verbs();
        for (_, ah) in self.ud_ahs.get_mut().drain() {
            // SAFETY: AHs this PD made for UD sends; the QPs that posted them are gone
            // (they hold the PD); each destroyed once.
            unsafe { (v.ibv_destroy_ah)(ah.0) };
        }
        // SAFETY: regions, QPs, SRQs and AHs hold an Arc to the PD, so none is left.
        unsafe { (v.ibv_dealloc_pd)(self.pd) };
    }
}

/// A protection domain (`ibv_pd`). Clones share it.
#[derive(Clone)]
pub struct HwPd {
    inner: Arc<PdInner>,
}

impl fmt::Debug for HwPd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HwPd").field("device", &self.inner.ctx.name()).finish_non_exhaustive()
    }
}

impl HwPd {
    pub(super) fn alloc(ctx: &HwContext) -> HwResult<HwPd> {
        // SAFETY: a live context.
        let pd = unsafe { (ctx.verbs().ibv_alloc_pd)(ctx.as_ptr()) };
        if pd.is_null() {
            return Err(HwError::last_os("ibv_alloc_pd"));
        }
        Ok(HwPd { inner: Arc::new(PdInner { ctx: ctx.clone(), pd, ud_ahs: Mutex::new(HashMap::new()) }) })
    }

    /// The device.
    pub fn context(&self) -> &HwContext {
        &self.inner.ctx
    }

    /// The raw PD, valid while `self` lives.
    pub fn as_ptr(&self) -> *mut ibv_pd {
        self.inner.pd
    }

    /// The AH a UD send to `ip` uses: made once per destination and kept until the PD
    /// goes (a QP posting it holds the PD).
    pub(crate) fn ud_ah(&self, ip: IpAddr) -> HwResult<*mut rnic_verbs_sys::ibv_ah> {
        let mut ahs = self.inner.ud_ahs.lock();
        if let Some(ah) = ahs.get(&ip) {
            return Ok(ah.0);
        }
        let sgid = self.inner.ctx.gid_index_for(1, ip)?;
        let mut attr = ah_attr_to_gid(Gid::from_ip(ip), sgid, 1);
        // SAFETY: a live PD and a valid attribute struct.
        let ah = unsafe { (self.inner.ctx.verbs().ibv_create_ah)(self.inner.pd, &mut attr) };
        if ah.is_null() {
            return Err(HwError::last_os(format!("ibv_create_ah(to {ip})")));
        }
        ahs.insert(ip, AhPtr(ah));
        Ok(ah)
    }
}

// A PD is made here, beside the type, so that the context (which every PD holds) does not name PDs.
impl HwContext {
    /// Allocates a protection domain (`ibv_alloc_pd`).
    pub fn alloc_pd(&self) -> HwResult<HwPd> {
        HwPd::alloc(self)
    }
}
