//! Memory regions: memory the region owns (page-aligned, zeroed) or the caller's, registered
//! with `ibv_reg_mr`.

use super::convert::{access_to_ibv, advice_to_ibv, sge_to_ibv, AccessFlags, Advice, Sge};
use super::dm::HwDm;
use super::pd::HwPd;
use super::{HwError, HwResult};
use rnic_verbs_sys::{self as sys, ibv_mr};
use std::fmt;
use std::sync::Arc;

/// Page-aligned anonymous memory owned by a region (`mmap`), unmapped after deregistration.
struct Owned {
    ptr: *mut u8,
    map_len: usize,
}

impl Owned {
    fn new(len: usize) -> HwResult<Owned> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
        let map_len = len
            .div_ceil(page)
            .checked_mul(page)
            .ok_or_else(|| HwError::InvalidArgument { op: "allocate MR", why: format!("{len} bytes is too large") })?;
        // SAFETY: an anonymous private mapping at an address of the kernel's choice.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(HwError::last_os(format!("mmap({map_len} bytes) for a memory region")));
        }
        Ok(Owned { ptr: p.cast(), map_len })
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once, after the region was deregistered
        // (`MrInner` drops `mr` before `owned`).
        unsafe { libc::munmap(self.ptr.cast(), self.map_len) };
    }
}

struct MrInner {
    pd: HwPd,
    mr: *mut ibv_mr,
    addr: *mut u8,
    len: usize,
    /// Registered with `IBV_ACCESS_ON_DEMAND`.
    on_demand: bool,
    /// The device memory it registers from this offset (`ibv_reg_dm_mr`): its bytes are
    /// reached by the device memory's copies, its address is 0.
    dm: Option<(HwDm, u64)>,
    /// Declared after `mr` is deregistered in Drop.
    _owned: Option<Owned>,
}

// SAFETY: the region's bytes are shared with the NIC by design and reached only through
// copying calls that check bounds; the ibv_mr pointer is freed only in Drop.
unsafe impl Send for MrInner {}
// SAFETY: as above.
unsafe impl Sync for MrInner {}

impl Drop for MrInner {
    fn drop(&mut self) {
        // SAFETY: a live region (QPs do not hold regions; work still outstanding on it
        // completes in error, as with any verbs program); deregistered once, before the
        // owned memory is unmapped (fields drop after this body).
        unsafe { (self.pd.context().verbs().ibv_dereg_mr)(self.mr) };
    }
}

/// A registered memory region (`ibv_mr`). Its bytes are reached through copies
/// ([`HwMr::read`], [`HwMr::write`]) since the NIC may write them at any time.
/// Clones share it; deregistered (and, if owned, freed) with the last one.
#[derive(Clone)]
pub struct HwMr {
    inner: Arc<MrInner>,
}

impl fmt::Debug for HwMr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HwMr")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .field("lkey", &format_args!("{:#x}", self.lkey()))
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}

impl HwMr {
    pub(super) fn allocate(pd: &HwPd, len: usize, access: AccessFlags, on_demand: bool) -> HwResult<HwMr> {
        if len == 0 {
            return Err(HwError::InvalidArgument { op: "allocate MR", why: "length 0".into() });
        }
        let owned = Owned::new(len)?;
        let ptr = owned.ptr;
        // SAFETY: `ptr..ptr+len` is our mapping, alive as long as the region (it is moved in).
        unsafe { HwMr::register_inner(pd, ptr, len, access, on_demand, Some(owned)) }
    }

    /// # Safety
    /// `ptr..ptr+len` stays valid (for reads and writes by the NIC) until the region is dropped.
    pub(super) unsafe fn register_borrowed(
        pd: &HwPd,
        ptr: *mut u8,
        len: usize,
        access: AccessFlags,
        on_demand: bool,
    ) -> HwResult<HwMr> {
        // SAFETY: the caller's contract is this function's.
        unsafe { HwMr::register_inner(pd, ptr, len, access, on_demand, None) }
    }

    /// # Safety
    /// As [`HwMr::register_borrowed`].
    unsafe fn register_inner(
        pd: &HwPd,
        ptr: *mut u8,
        len: usize,
        access: AccessFlags,
        on_demand: bool,
        owned: Option<Owned>,
    ) -> HwResult<HwMr> {
        let odp = if on_demand { sys::IBV_ACCESS_ON_DEMAND } else { 0 };
        let bits = libc::c_int::try_from(access_to_ibv(access)? | odp)
            .map_err(|_| HwError::InvalidArgument { op: "register MR", why: format!("access {access}") })?;
        // SAFETY: a live PD; the range's validity is the caller's contract.
        let mr = unsafe { (pd.context().verbs().ibv_reg_mr)(pd.as_ptr(), ptr.cast(), len, bits) };
        if mr.is_null() {
            let odp = if on_demand { " | ON_DEMAND" } else { "" };
            let e = HwError::last_os(format!("ibv_reg_mr({len} bytes, {access}{odp})"));
            drop(owned);
            return Err(e);
        }
        Ok(HwMr { inner: Arc::new(MrInner { pd: pd.clone(), mr, addr: ptr, len, on_demand, dm: None, _owned: owned }) })
    }

    /// `ibv_rereg_mr(mr, flags, pd, addr, len, 0)` on the only handle of the region.
    fn rereg(&mut self, flags: libc::c_int, pd: *mut sys::ibv_pd, addr: *mut u8, len: usize) -> HwResult<&mut MrInner> {
        let inner = Arc::get_mut(&mut self.inner).ok_or_else(|| HwError::InvalidArgument {
            op: "re-register MR",
            why: "other handles of the region exist".into(),
        })?;
        let v = inner.pd.context().verbs();
        let f = v.ibv_rereg_mr.ok_or_else(|| HwError::Unsupported("ibv_rereg_mr (libibverbs has none)".into()))?;
        // SAFETY: a live region of which this is the only handle; `pd` is null or a live PD
        // (the caller keeps it); the new memory's validity is the caller's contract.
        let r = unsafe { f(inner.mr, flags, pd, addr.cast(), len, 0) };
        if r != 0 {
            return Err(HwError::last_os(format!("ibv_rereg_mr(flags {flags:#x}) = {r}")));
        }
        Ok(inner)
    }

    /// Moves the region to `pd` (`ibv_rereg_mr` with `IBV_REREG_MR_CHANGE_PD`); the keys
    /// the provider gives back may differ. Refused while other handles exist.
    pub fn rereg_pd(&mut self, pd: &HwPd) -> HwResult<()> {
        let inner = self.rereg(sys::IBV_REREG_MR_CHANGE_PD, pd.as_ptr(), std::ptr::null_mut(), 0)?;
        inner.pd = pd.clone();
        Ok(())
    }

    /// Gives the region `len` bytes of new, zeroed memory it owns (`ibv_rereg_mr` with
    /// `IBV_REREG_MR_CHANGE_TRANSLATION`); the old memory is released once the device no
    /// longer reaches it (the call returned). Refused while other handles exist.
    pub fn rereg_allocate(&mut self, len: usize) -> HwResult<()> {
        if len == 0 {
            return Err(HwError::InvalidArgument { op: "re-register MR", why: "length 0".into() });
        }
        let owned = Owned::new(len)?;
        let ptr = owned.ptr;
        let flags = sys::IBV_REREG_MR_CHANGE_TRANSLATION;
        let inner = self.rereg(flags, std::ptr::null_mut(), ptr, len)?;
        (inner.addr, inner.len, inner._owned, inner.dm) = (ptr, len, Some(owned), None);
        Ok(())
    }

    /// Gives the region memory the caller owns (`IBV_REREG_MR_CHANGE_TRANSLATION`).
    ///
    /// # Safety
    /// As [`HwPd::register_mr`] for the new memory.
    pub unsafe fn rereg_translation(&mut self, ptr: *mut u8, len: usize) -> HwResult<()> {
        if len == 0 || ptr.is_null() {
            return Err(HwError::InvalidArgument { op: "re-register MR", why: format!("{len} bytes at {ptr:p}") });
        }
        let inner = self.rereg(sys::IBV_REREG_MR_CHANGE_TRANSLATION, std::ptr::null_mut(), ptr, len)?;
        (inner.addr, inner.len, inner._owned, inner.dm) = (ptr, len, None, None);
        Ok(())
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: a live region.
        unsafe { (*self.inner.mr).lkey }
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: a live region.
        unsafe { (*self.inner.mr).rkey }
    }

    /// Virtual address of the first byte (what SGEs and peers use).
    pub fn addr(&self) -> u64 {
        self.inner.addr as u64
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Registered on demand (`IBV_ACCESS_ON_DEMAND`).
    pub fn is_on_demand(&self) -> bool {
        self.inner.on_demand
    }

    /// True for an empty region (never: allocation refuses length 0).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The protection domain.
    pub fn pd(&self) -> &HwPd {
        &self.inner.pd
    }

    /// The raw region, valid while `self` lives.
    pub fn as_ptr(&self) -> *mut ibv_mr {
        self.inner.mr
    }

    /// An SGE over `len` bytes at `offset`.
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        Sge { addr: self.addr().wrapping_add(offset as u64), length: len, lkey: self.lkey() }
    }

    fn check(&self, offset: usize, n: usize) -> HwResult<()> {
        match offset.checked_add(n) {
            Some(end) if end <= self.inner.len => Ok(()),
            _ => Err(HwError::InvalidArgument {
                op: "memory region access",
                why: format!("{n} bytes at offset {offset} outside the region's {} bytes", self.inner.len),
            }),
        }
    }

    /// Whether it registers device memory (its bytes are reached by copies only).
    pub fn is_dm(&self) -> bool {
        self.inner.dm.is_some()
    }

    /// Copies bytes out of the region.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> HwResult<()> {
        self.check(offset, dst.len())?;
        if let Some((dm, at)) = &self.inner.dm {
            return dm.copy_from(at + offset as u64, dst);
        }
        // SAFETY: in bounds (checked); the region's memory is valid for its lifetime. The
        // NIC may write concurrently, as with any verbs buffer: the caller reads after the
        // completion that says the bytes are there.
        unsafe { std::ptr::copy_nonoverlapping(self.inner.addr.add(offset), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies bytes into the region.
    pub fn write(&self, offset: usize, src: &[u8]) -> HwResult<()> {
        self.check(offset, src.len())?;
        if let Some((dm, at)) = &self.inner.dm {
            return dm.copy_to(at + offset as u64, src);
        }
        // SAFETY: in bounds (checked) and valid for writes; see `read`.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.inner.addr.add(offset), src.len()) };
        Ok(())
    }

    /// The whole region as a vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.inner.len];
        // In bounds by construction.
        let _ = self.read(0, &mut v);
        v
    }
}

// Made here, beside the type, so that the PD (which it holds) does not name it.
impl HwPd {
    /// Allocates `len` bytes of zeroed, page-aligned memory owned by the region and
    /// registers it (`ibv_reg_mr`). Length 0 is refused.
    pub fn allocate_mr(&self, len: usize, access: AccessFlags) -> HwResult<HwMr> {
        HwMr::allocate(self, len, access, false)
    }

    /// As [`allocate_mr`](Self::allocate_mr), registered on demand (`ibv_reg_mr` with
    /// `IBV_ACCESS_ON_DEMAND`: the device must offer ODP, else the call fails).
    pub fn allocate_mr_on_demand(&self, len: usize, access: AccessFlags) -> HwResult<HwMr> {
        HwMr::allocate(self, len, access, true)
    }

    /// As [`register_mr`](Self::register_mr), on demand.
    ///
    /// # Safety
    /// As [`register_mr`](Self::register_mr).
    pub unsafe fn register_mr_on_demand(&self, ptr: *mut u8, len: usize, access: AccessFlags) -> HwResult<HwMr> {
        // SAFETY: the caller's contract is this function's.
        unsafe { HwMr::register_borrowed(self, ptr, len, access, true) }
    }

    /// Registers `len` bytes of device memory `dm` from `offset` (`ibv_reg_dm_mr`,
    /// zero-based: `IBV_ACCESS_ZERO_BASED`). The region holds the device memory.
    pub fn register_dm_mr(&self, dm: &HwDm, offset: u64, len: usize, access: AccessFlags) -> HwResult<HwMr> {
        let bits = access_to_ibv(access)? | sys::IBV_ACCESS_ZERO_BASED;
        // SAFETY: a live PD and device memory (the region holds both).
        let mr = unsafe { sys::ops::reg_dm_mr(self.as_ptr(), dm.as_ptr(), offset, len, bits) };
        if mr.is_null() {
            return Err(HwError::last_os(format!("ibv_reg_dm_mr({len} bytes at {offset}, {access})")));
        }
        let inner = MrInner {
            pd: self.clone(),
            mr,
            addr: std::ptr::null_mut(),
            len,
            on_demand: false,
            dm: Some((dm.clone(), offset)),
            _owned: None,
        };
        Ok(HwMr { inner: Arc::new(inner) })
    }

    /// `ibv_advise_mr` over `sges` (regions of this PD), done before it returns
    /// (`IBV_ADVISE_MR_FLAG_FLUSH`). `EOPNOTSUPP` where the provider has no such verb.
    pub fn advise_mr(&self, advice: Advice, sges: &[Sge]) -> HwResult<()> {
        let mut list: Vec<sys::ibv_sge> = sges.iter().map(sge_to_ibv).collect();
        let n = u32::try_from(list.len())
            .map_err(|_| HwError::InvalidArgument { op: "advise MR", why: format!("{} SGEs", list.len()) })?;
        let flags = sys::IBV_ADVISE_MR_FLAG_FLUSH;
        // SAFETY: a live PD and `n` SGEs that live across the call.
        let r = unsafe { sys::ops::advise_mr(self.as_ptr(), advice_to_ibv(advice), flags, list.as_mut_ptr(), n) };
        if r != 0 {
            return Err(HwError::ret(format!("ibv_advise_mr({advice:?}, {n} SGEs)"), r));
        }
        Ok(())
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
        unsafe { HwMr::register_borrowed(self, ptr, len, access, false) }
    }
}
