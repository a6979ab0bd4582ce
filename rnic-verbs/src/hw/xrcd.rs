//! XRC domains (`ibv_open_xrcd`, `ibv_close_xrcd`, through the provider's `verbs_context`).

use super::context::HwContext;
use super::{HwError, HwResult};
use rnic_verbs_sys::{self as sys, ibv_xrcd};
use std::fmt;
use std::sync::Arc;

struct XrcdInner {
    ctx: HwContext,
    xrcd: *mut ibv_xrcd,
}

// SAFETY: a domain is a kernel object handle usable from any thread; closed only in Drop.
unsafe impl Send for XrcdInner {}
// SAFETY: as above.
unsafe impl Sync for XrcdInner {}

impl Drop for XrcdInner {
    fn drop(&mut self) {
        // SAFETY: XRC SRQs and QPs of the domain hold an Arc to it, so none is left;
        // closed once.
        unsafe { sys::ops::close_xrcd(self.xrcd) };
    }
}

/// An XRC domain (`ibv_xrcd`) of its own (no file: `fd` -1). Clones share it; closed
/// with the last one.
#[derive(Clone)]
pub struct HwXrcd {
    inner: Arc<XrcdInner>,
}

impl fmt::Debug for HwXrcd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HwXrcd").field("device", &self.inner.ctx.name()).finish_non_exhaustive()
    }
}

impl HwXrcd {
    /// The raw domain, valid while `self` lives.
    pub fn as_ptr(&self) -> *mut ibv_xrcd {
        self.inner.xrcd
    }

    /// The device.
    pub fn context(&self) -> &HwContext {
        &self.inner.ctx
    }

    /// Whether two handles are the one domain.
    pub fn same(&self, other: &HwXrcd) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

// Opened here, beside the type, so that the context (which it holds) does not name it.
impl HwContext {
    /// Opens a new XRC domain (`ibv_open_xrcd` with no file, `O_CREAT`).
    pub fn open_xrcd(&self) -> HwResult<HwXrcd> {
        let mut attr = sys::ibv_xrcd_init_attr {
            comp_mask: sys::IBV_XRCD_INIT_ATTR_FD | sys::IBV_XRCD_INIT_ATTR_OFLAGS,
            fd: -1,
            oflags: libc::O_CREAT,
        };
        // SAFETY: a live context and a valid attribute struct.
        let xrcd = unsafe { sys::ops::open_xrcd(self.as_ptr(), &mut attr) };
        if xrcd.is_null() {
            return Err(HwError::last_os("ibv_open_xrcd"));
        }
        Ok(HwXrcd { inner: Arc::new(XrcdInner { ctx: self.clone(), xrcd }) })
    }
}
