//! Device memory (`ibv_alloc_dm`, `ibv_free_dm`, the `ibv_dm`'s `memcpy_to_dm` and
//! `memcpy_from_dm`, `ibv_reg_dm_mr`): memory on the device, reached by copies and by
//! zero-based regions over it.

use super::context::HwContext;
use super::{HwError, HwResult};
use rnic_verbs_sys::{self as sys, ibv_dm};
use std::fmt;
use std::sync::Arc;

struct DmInner {
    ctx: HwContext,
    dm: *mut ibv_dm,
    len: usize,
}

// SAFETY: device memory is a kernel object handle; its copies go through the provider,
// which may be called from any thread; freed only in Drop.
unsafe impl Send for DmInner {}
// SAFETY: as above.
unsafe impl Sync for DmInner {}

impl Drop for DmInner {
    fn drop(&mut self) {
        // SAFETY: regions over it hold an Arc to it, so none is left; freed once.
        unsafe { sys::ops::free_dm(self.dm) };
    }
}

/// Device memory (`ibv_dm`). Clones share it; freed with the last one (a region over it
/// holds one).
#[derive(Clone)]
pub struct HwDm {
    inner: Arc<DmInner>,
}

impl fmt::Debug for HwDm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HwDm").field("device", &self.inner.ctx.name()).field("len", &self.inner.len).finish()
    }
}

impl HwDm {
    /// The raw device memory, valid while `self` lives.
    pub fn as_ptr(&self) -> *mut ibv_dm {
        self.inner.dm
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Never true: an allocation has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// Other handles on it (regions over it among them).
    pub fn holders(&self) -> usize {
        Arc::strong_count(&self.inner) - 1
    }

    /// `ibv_memcpy_to_dm`: `src` into the memory at `offset` (the provider's rules: mlx5
    /// and rnic copy whole 4-byte words).
    pub fn copy_to(&self, offset: u64, src: &[u8]) -> HwResult<()> {
        // SAFETY: live device memory.
        let f = unsafe { (*self.inner.dm).memcpy_to_dm }
            .ok_or_else(|| HwError::Unsupported("ibv_memcpy_to_dm (the provider has none)".into()))?;
        // SAFETY: the provider's function, live device memory and `src.len()` readable bytes.
        let r = unsafe { f(self.inner.dm, offset, src.as_ptr().cast(), src.len()) };
        if r != 0 {
            return Err(HwError::ret(format!("ibv_memcpy_to_dm({} bytes at {offset})", src.len()), r));
        }
        Ok(())
    }

    /// `ibv_memcpy_from_dm`: the memory at `offset` into `dst`.
    pub fn copy_from(&self, offset: u64, dst: &mut [u8]) -> HwResult<()> {
        // SAFETY: live device memory.
        let f = unsafe { (*self.inner.dm).memcpy_from_dm }
            .ok_or_else(|| HwError::Unsupported("ibv_memcpy_from_dm (the provider has none)".into()))?;
        // SAFETY: the provider's function, live device memory and `dst.len()` writable bytes.
        let r = unsafe { f(dst.as_mut_ptr().cast(), self.inner.dm, offset, dst.len()) };
        if r != 0 {
            return Err(HwError::ret(format!("ibv_memcpy_from_dm({} bytes at {offset})", dst.len()), r));
        }
        Ok(())
    }
}

// Allocated here, beside the type, so that the context (which it holds) does not name it.
impl HwContext {
    /// Allocates `len` bytes of device memory (`ibv_alloc_dm`).
    pub fn alloc_dm(&self, len: usize) -> HwResult<HwDm> {
        let mut attr = sys::ibv_alloc_dm_attr { length: len, log_align_req: 0, comp_mask: 0 };
        // SAFETY: a live context and a valid attribute struct.
        let dm = unsafe { sys::ops::alloc_dm(self.as_ptr(), &mut attr) };
        if dm.is_null() {
            return Err(HwError::last_os(format!("ibv_alloc_dm({len} bytes)")));
        }
        Ok(HwDm { inner: Arc::new(DmInner { ctx: self.clone(), dm, len }) })
    }
}
