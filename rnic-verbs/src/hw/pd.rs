//! Protection domains: the factory for memory regions, QPs, SRQs and address handles.

use super::ah::HwAh;
use super::context::HwContext;
use super::convert::{ah_attr_to_gid, AccessFlags, Gid};
use super::mr::HwMr;
use super::qp::{HwQp, HwQpInit};
use super::srq::HwSrq;
use super::{HwError, HwResult};
use parking_lot::Mutex;
use rnic_verbs_sys::{ibv_ah_attr, ibv_pd};
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

    /// Allocates `len` bytes of zeroed, page-aligned memory owned by the region and
    /// registers it (`ibv_reg_mr`). Length 0 is refused.
    pub fn allocate_mr(&self, len: usize, access: AccessFlags) -> HwResult<HwMr> {
        HwMr::allocate(self, len, access)
    }

    /// Registers memory the caller owns (`ibv_reg_mr`).
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes and stay allocated and unmoved
    /// until the region and every clone of it are dropped; the NIC writes it from outside
    /// the program while work is outstanding, so the caller holds no Rust references to
    /// those bytes then.
    pub unsafe fn register_mr(&self, ptr: *mut u8, len: usize, access: AccessFlags) -> HwResult<HwMr> {
        // SAFETY: the caller's contract is this function's.
        unsafe { HwMr::register_borrowed(self, ptr, len, access) }
    }

    /// Creates a QP (`ibv_create_qp`) in RESET.
    pub fn create_qp(&self, init: &HwQpInit) -> HwResult<HwQp> {
        HwQp::create(self, init)
    }

    /// Creates a shared receive queue (`ibv_create_srq`).
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> HwResult<HwSrq> {
        HwSrq::create(self, max_wr, max_sge)
    }

    /// Creates an address handle from raw attributes (`ibv_create_ah`).
    pub fn create_ah(&self, attr: &ibv_ah_attr) -> HwResult<HwAh> {
        HwAh::create(self, attr, None)
    }

    /// An address handle to the RoCE GID of `ip` on port 1, from the port's RoCE v2 GID of
    /// the same IP family.
    pub fn ah_to(&self, ip: IpAddr) -> HwResult<HwAh> {
        let sgid = self.inner.ctx.gid_index_for(1, ip)?;
        HwAh::create(self, &ah_attr_to_gid(Gid::from_ip(ip), sgid, 1), Some(ip))
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
