//! Address handles: where UD sends go.

use super::convert::{ah_attr_to_gid, Gid};
use super::pd::HwPd;
use super::{HwError, HwResult};
use rnic_verbs_sys::{ibv_ah, ibv_ah_attr};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

struct AhInner {
    pd: HwPd,
    ah: *mut ibv_ah,
    dest: Option<IpAddr>,
}

// SAFETY: an address handle is immutable after creation; freed only in Drop.
unsafe impl Send for AhInner {}
// SAFETY: as above.
unsafe impl Sync for AhInner {}

impl Drop for AhInner {
    fn drop(&mut self) {
        // SAFETY: a live AH, destroyed once (a UD WR using it holds a clone until posted).
        unsafe { (self.pd.context().verbs().ibv_destroy_ah)(self.ah) };
    }
}

/// An address handle (`ibv_ah`). Clones share it.
#[derive(Clone)]
pub struct HwAh {
    inner: Arc<AhInner>,
}

impl fmt::Debug for HwAh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HwAh").field("dest", &self.inner.dest).finish_non_exhaustive()
    }
}

impl HwAh {
    pub(super) fn create(pd: &HwPd, attr: &ibv_ah_attr, dest: Option<IpAddr>) -> HwResult<HwAh> {
        let mut a = *attr;
        // SAFETY: a live PD and a valid attribute struct.
        let ah = unsafe { (pd.context().verbs().ibv_create_ah)(pd.as_ptr(), &mut a) };
        if ah.is_null() {
            let what = dest.map_or_else(|| "ibv_create_ah".to_string(), |d| format!("ibv_create_ah(to {d})"));
            return Err(HwError::last_os(what));
        }
        Ok(HwAh { inner: Arc::new(AhInner { pd: pd.clone(), ah, dest }) })
    }

    /// The raw AH, valid while `self` lives.
    pub fn as_ptr(&self) -> *mut ibv_ah {
        self.inner.ah
    }

    /// The destination address, when the AH was made for one.
    pub fn dest(&self) -> Option<IpAddr> {
        self.inner.dest
    }

    /// The protection domain.
    pub fn pd(&self) -> &HwPd {
        &self.inner.pd
    }
}

// Made here, beside the type, so that the PD (which it holds) does not name it.
impl HwPd {
    /// Creates an address handle from raw attributes (`ibv_create_ah`).
    pub fn create_ah(&self, attr: &ibv_ah_attr) -> HwResult<HwAh> {
        HwAh::create(self, attr, None)
    }

    /// An address handle to the RoCE GID of `ip` on port 1, from the port's RoCE v2 GID of
    /// the same IP family.
    pub fn ah_to(&self, ip: IpAddr) -> HwResult<HwAh> {
        let sgid = self.context().gid_index_for(1, ip)?;
        HwAh::create(self, &ah_attr_to_gid(Gid::from_ip(ip), sgid, 1), Some(ip))
    }
}
