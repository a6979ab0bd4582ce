//! Memory regions (`ibv_mr`): registered memory, its keys, and the ways to reach its bytes.

use crate::dm::DmBackend;
use crate::pd::{PdBackend, ProtectionDomain};
use crate::types::RemoteMr;
use crate::{AccessFlags, Advice, DeviceError, DeviceMemory, Error, Result, Sge};
use rnic_core::mem::MemBlock;
use rnic_core::mr::MrKeys;
use std::sync::Arc;

#[derive(Debug)]
pub(crate) enum MrBackend {
    Emu(EmuMr),
    #[cfg(feature = "hw")]
    Hw(crate::hw::HwMr),
}

/// An emulated region: the block registered (all of it, at `iova`) under `keys`, and what
/// keeps its memory alive.
#[derive(Debug)]
pub(crate) struct EmuMr {
    block: Arc<MemBlock>,
    keys: MrKeys,
    iova: u64,
    len: usize,
    /// The allocation `block` is a view of, once the region was given another PD over the
    /// same memory (which registers a new view: work posted before holds the old block).
    owner: Option<Arc<MemBlock>>,
    /// Registered without pinning (`IBV_ACCESS_ON_DEMAND`).
    on_demand: bool,
    /// The device memory it registers (`ibv_reg_dm_mr`), kept while it does.
    dm: Option<DeviceMemory>,
}

impl EmuMr {
    fn new(block: Arc<MemBlock>, keys: MrKeys, iova: u64, on_demand: bool) -> EmuMr {
        EmuMr { len: block.len(), block, keys, iova, owner: None, on_demand, dm: None }
    }
}

#[derive(Debug)]
struct MrInner {
    pd: ProtectionDomain,
    b: MrBackend,
}

impl Drop for MrInner {
    fn drop(&mut self) {
        if let MrBackend::Emu(m) = &self.b {
            let (e, _) = self.pd.emu_pd();
            let keys = &m.keys;
            // Work requests posted on the region end in error from here on, and the
            // memory is no longer reached when this returns (the caller may free it).
            let _ = e.dev.dereg_mr(keys.lkey);
        }
        // A hardware region deregisters itself (ibv_dereg_mr) when its last handle goes.
    }
}

// Registration is the memory region's business: its constructors live here, beside the
// region they make, so that the PD (which every region holds) does not name regions.
impl ProtectionDomain {
    /// Allocates `len` bytes of zeroed, page-aligned memory owned by the region and
    /// registers it (pinned, unless the device was opened with pinning off). 0 bytes is
    /// refused.
    pub fn allocate_mr(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        if len == 0 {
            return Err(Error::InvalidArgument {
                op: "allocate memory region",
                why: "0 bytes: nothing could be sent from or placed into it; ask for at least 1 byte".into(),
            });
        }
        match &self.inner.b {
            PdBackend::Emu(_) => {
                let block = Arc::new(MemBlock::new(len).map_err(|e| Error::RegMr(DeviceError::Mem(e)))?);
                self.register_block(block, access)
            }
            #[cfg(feature = "hw")]
            PdBackend::Hw(pd) => {
                let mr = pd
                    .allocate_mr(len, access)
                    .map_err(crate::context::hw_err("register memory region", self.inner.ctx.name()))?;
                Ok(MemoryRegion::new(self.clone(), MrBackend::Hw(mr)))
            }
        }
    }

    /// Registers memory the caller owns.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes, and stay allocated and
    /// unmoved until the returned region and every clone of it are dropped. The NIC
    /// writes it from another thread while work is outstanding (receive buffers, RDMA
    /// WRITE targets, READ destinations): the caller must not hold Rust references to
    /// those bytes while that can happen, and reads them only once the completion (or,
    /// for remote writes, the peer's signal) says they are written.
    pub unsafe fn register_mr(&self, ptr: *mut u8, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        match &self.inner.b {
            PdBackend::Emu(_) => {
                // SAFETY: the caller upholds `MemBlock::from_raw`'s contract, which is this
                // function's contract restated.
                let block = Arc::new(unsafe { MemBlock::from_raw(ptr, len) });
                self.register_block(block, access)
            }
            #[cfg(feature = "hw")]
            PdBackend::Hw(pd) => {
                // SAFETY: as above: `HwPd::register_mr`'s contract is this one.
                let mr = unsafe { pd.register_mr(ptr, len, access) }
                    .map_err(crate::context::hw_err("register memory region", self.inner.ctx.name()))?;
                Ok(MemoryRegion::new(self.clone(), MrBackend::Hw(mr)))
            }
        }
    }

    fn register_block(&self, block: Arc<MemBlock>, access: AccessFlags) -> Result<MemoryRegion> {
        let (len, iova) = (block.len(), block.addr());
        let (e, id) = self.emu_pd();
        let keys = e.dev.reg_mr(id, block.clone(), 0, len, iova, access).map_err(Error::RegMr)?;
        Ok(MemoryRegion::new(self.clone(), MrBackend::Emu(EmuMr::new(block, keys, iova, false))))
    }

    /// Registers `block` (all of it, at `iova`) without pinning it.
    fn register_on_demand(&self, block: Arc<MemBlock>, iova: u64, access: AccessFlags) -> Result<EmuMr> {
        let (e, id) = self.emu_pd();
        let keys = e.dev.reg_mr_on_demand(id, block.clone(), 0, block.len(), iova, access).map_err(Error::RegMr)?;
        Ok(EmuMr::new(block, keys, iova, true))
    }

    /// The hardware backend's refusal of a call it does not wrap.
    #[cfg(feature = "hw")]
    pub(crate) fn unsupported(&self, op: &'static str, why: &str) -> Error {
        Error::Unsupported { op, device: self.context().name().to_string(), why: why.into() }
    }

    /// Allocates `len` bytes as [`allocate_mr`](Self::allocate_mr) does and registers them
    /// on demand (`ibv_reg_mr` with `IBV_ACCESS_ON_DEMAND`): nothing is pinned, whatever the
    /// device's pinning setting; the device reaches the pages as the program does, faulting
    /// them in when an access comes ([`advise_mr`](Self::advise_mr) faults them in ahead).
    /// On hardware it is `ibv_reg_mr` with `IBV_ACCESS_ON_DEMAND` (a device without ODP
    /// refuses it).
    pub fn allocate_mr_on_demand(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        if len == 0 {
            return Err(Error::InvalidArgument {
                op: "allocate memory region on demand",
                why: "0 bytes: nothing could be sent from or placed into it; ask for at least 1 byte".into(),
            });
        }
        match &self.inner.b {
            PdBackend::Emu(_) => {
                let block = Arc::new(MemBlock::new(len).map_err(|e| Error::RegMr(DeviceError::Mem(e)))?);
                let iova = block.addr();
                Ok(MemoryRegion::new(self.clone(), MrBackend::Emu(self.register_on_demand(block, iova, access)?)))
            }
            #[cfg(feature = "hw")]
            PdBackend::Hw(pd) => {
                let mr = pd
                    .allocate_mr_on_demand(len, access)
                    .map_err(crate::context::hw_err("register memory region on demand", self.inner.ctx.name()))?;
                Ok(MemoryRegion::new(self.clone(), MrBackend::Hw(mr)))
            }
        }
    }

    /// Registers memory the caller owns on demand (see
    /// [`allocate_mr_on_demand`](Self::allocate_mr_on_demand)).
    ///
    /// # Safety
    /// As [`register_mr`](Self::register_mr).
    pub unsafe fn register_mr_on_demand(&self, ptr: *mut u8, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        match &self.inner.b {
            PdBackend::Emu(_) => {
                // SAFETY: the caller upholds `MemBlock::from_raw`'s contract, which is this
                // function's contract restated.
                let block = Arc::new(unsafe { MemBlock::from_raw(ptr, len) });
                let iova = block.addr();
                Ok(MemoryRegion::new(self.clone(), MrBackend::Emu(self.register_on_demand(block, iova, access)?)))
            }
            #[cfg(feature = "hw")]
            PdBackend::Hw(pd) => {
                // SAFETY: as above.
                let mr = unsafe { pd.register_mr_on_demand(ptr, len, access) }
                    .map_err(crate::context::hw_err("register memory region on demand", self.inner.ctx.name()))?;
                Ok(MemoryRegion::new(self.clone(), MrBackend::Hw(mr)))
            }
        }
    }

    /// Registers the whole address space of the process as one on-demand region
    /// (`ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | access)`, an implicit
    /// region): its address is 0 and an SGE or a peer's RDMA names any address of the
    /// process under its keys. Safe, because every access goes through the kernel
    /// (`process_vm_readv`/`_writev`), which refuses an address the process has not mapped
    /// (or not for the access) instead of faulting: such a work request completes in
    /// error, a peer's WRITE there is NAKed. Atomics on it are refused (remote operational
    /// error), and it has no bytes of its own to view ([`MemoryRegion::as_slice`] is
    /// empty). On hardware it is [`Error::Unsupported`].
    pub fn register_implicit_mr(&self, access: AccessFlags) -> Result<MemoryRegion> {
        match &self.inner.b {
            PdBackend::Emu(_) => {
                let m = self.register_on_demand(Arc::new(MemBlock::implicit()), 0, access)?;
                Ok(MemoryRegion::new(self.clone(), MrBackend::Emu(m)))
            }
            #[cfg(feature = "hw")]
            PdBackend::Hw(_) => Err(self.unsupported(
                "ibv_reg_mr(implicit, IBV_ACCESS_ON_DEMAND)",
                "the hardware backend reaches a region's bytes by pointer, which an implicit region's unmapped \
                 addresses would fault",
            )),
        }
    }

    /// Advises the device about ranges of this PD's regions (`ibv_advise_mr`): each SGE
    /// is checked as a work request's would be (its lkey a valid region of this PD, the
    /// range inside it, [`Advice::PrefetchWrite`] needs local write), then
    /// [`Advice::Prefetch`] and [`Advice::PrefetchWrite`] fault the pages in (what a first
    /// access to an on-demand region would wait for); [`Advice::PrefetchNoFault`] only
    /// checks. Done when it returns. No SGE, or one refused, is
    /// [`Error::InvalidArgument`] naming it. On hardware it is the provider's
    /// `ibv_advise_mr` (with `IBV_ADVISE_MR_FLAG_FLUSH`).
    pub fn advise_mr(&self, advice: Advice, sges: &[Sge]) -> Result<()> {
        let bad = |why: String| Error::InvalidArgument { op: "advise memory region", why };
        if sges.is_empty() {
            return Err(bad("no SGE given".into()));
        }
        match &self.inner.b {
            PdBackend::Emu(_) => {
                let (e, id) = self.emu_pd();
                e.dev.advise_mr(id, advice, sges).map_err(|(i, why)| bad(format!("SGE {i}: {why}")))
            }
            #[cfg(feature = "hw")]
            PdBackend::Hw(pd) => pd
                .advise_mr(advice, sges)
                .map_err(crate::context::hw_err("advise memory region", self.inner.ctx.name())),
        }
    }

    /// Registers `len` bytes of device memory `dm` from `offset` (`ibv_reg_dm_mr`),
    /// zero-based (its address is 0: SGEs and peers name offsets into it), in whole 4-byte
    /// words. The region holds the device memory: [`DeviceMemory::free`] is refused while
    /// it lives.
    pub fn register_dm_mr(
        &self,
        dm: &DeviceMemory,
        offset: u64,
        len: u64,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        if !dm.ctx.same_device(self.context()) {
            return Err(Error::InvalidArgument {
                op: "register device memory",
                why: format!(
                    "the device memory is {}'s, the protection domain {}'s",
                    dm.ctx.name(),
                    self.context().name()
                ),
            });
        }
        const OP: &str = "register device memory";
        match (&self.inner.b, &dm.b) {
            (PdBackend::Emu(_), DmBackend::Emu(mem)) => {
                let (e, id) = self.emu_pd();
                // SAFETY: the region keeps `dm` (its `dm` field) until it is dropped, and its
                // drop deregisters it (revoking the view and waiting for accesses in
                // progress) before the fields, `dm` among them, go.
                let view = unsafe { mem.view(offset, len) }
                    .map_err(|why| Error::InvalidArgument { op: OP, why: why.to_string() })?;
                let block = Arc::new(view);
                let keys = e.dev.reg_mr(id, block.clone(), 0, block.len(), 0, access).map_err(Error::RegMr)?;
                let m = EmuMr { dm: Some(dm.clone()), ..EmuMr::new(block, keys, 0, false) };
                Ok(MemoryRegion::new(self.clone(), MrBackend::Emu(m)))
            }
            #[cfg(feature = "hw")]
            (PdBackend::Hw(pd), DmBackend::Hw(mem)) => {
                let len =
                    usize::try_from(len).map_err(|_| Error::InvalidArgument { op: OP, why: format!("{len} bytes") })?;
                let mr = pd
                    .register_dm_mr(mem, offset, len, access)
                    .map_err(crate::context::hw_err(OP, self.inner.ctx.name()))?;
                Ok(MemoryRegion::new(self.clone(), MrBackend::Hw(mr)))
            }
            #[cfg(feature = "hw")]
            _ => unreachable!("checked: same device"),
        }
    }
}

/// A registered memory region (`ibv_mr`). Its bytes are reached through copies
/// ([`MemoryRegion::read`], [`MemoryRegion::write`]) because the NIC may write them at
/// any time, or, under a contract the caller upholds, as a slice
/// ([`MemoryRegion::as_slice`]); the region is deregistered when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct MemoryRegion {
    inner: Arc<MrInner>,
}

impl MemoryRegion {
    pub(crate) fn new(pd: ProtectionDomain, b: MrBackend) -> MemoryRegion {
        MemoryRegion { inner: Arc::new(MrInner { pd, b }) }
    }

    /// The protection domain the region is registered in.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    /// Changes the region's access rights in place (`ibv_rereg_mr` with
    /// `IBV_REREG_MR_CHANGE_ACCESS`): the keys, the PD and the memory stay, and every later
    /// check of a peer's RDMA WRITE, READ or atomic sees the new rights. Checked as
    /// registration is (remote write or atomic needs local write). On hardware it is
    /// [`Error::Unsupported`] (`ibv_rereg_mr` may rewrite keys other handles read).
    ///
    /// ```no_run
    /// # use rnic_verbs::*;
    /// # let pd = Context::open("rnic0")?.alloc_pd()?;
    /// let mr = pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    /// // ... the peer writes; then no more:
    /// mr.rereg_access(AccessFlags::LOCAL_WRITE)?; // a WRITE now gets a remote access NAK
    /// # Ok::<(), rnic_verbs::Error>(())
    /// ```
    pub fn rereg_access(&self, access: AccessFlags) -> Result<()> {
        match &self.inner.b {
            MrBackend::Emu(m) => {
                let (e, _) = self.inner.pd.emu_pd();
                e.dev.mtpt().rereg_access(m.keys.lkey, access).map_err(|m| Error::RegMr(DeviceError::Mr(m)))
            }
            // ibv_rereg_mr may rewrite the ibv_mr (its keys) that other handles read
            // concurrently: on hardware a re-registration takes the only handle
            // (rereg_pd, rereg_allocate, rereg_translation).
            #[cfg(feature = "hw")]
            MrBackend::Hw(_) => Err(Error::Unsupported {
                op: "ibv_rereg_mr(IBV_REREG_MR_CHANGE_ACCESS)",
                device: self.inner.pd.context().name().to_string(),
                why: "on hardware the rights change through a call that takes the only handle, which this &self \
                      call cannot promise (deregister and register again)"
                    .into(),
            }),
        }
    }

    /// The handle itself, for a re-registration: refused while other clones exist, since
    /// it changes what a handle says (its PD, address, length).
    fn only_handle(&mut self, op: &'static str) -> Result<&mut MrInner> {
        let others = Arc::strong_count(&self.inner) - 1;
        Arc::get_mut(&mut self.inner).ok_or_else(|| Error::InvalidArgument {
            op,
            why: format!(
                "{others} other handle(s) of the region exist; re-registration changes the PD, address or length \
                 every handle reports, so it takes the only one (drop the clones first)"
            ),
        })
    }

    /// Moves the region to protection domain `pd` (`ibv_rereg_mr` with
    /// `IBV_REREG_MR_CHANGE_PD`): the keys, memory and rights stay; from now on QPs of `pd`
    /// reach it and those of its old PD do not (a peer's RDMA through a QP of the old PD
    /// gets a remote access error). Work requests posted on it before no longer reach it
    /// (they complete in error), as on a NIC that checks them against the region when it
    /// runs them. Takes the only handle of the region (clones are refused: they would
    /// report the old PD). On hardware it is `ibv_rereg_mr`, whose provider may give new keys.
    ///
    /// ```no_run
    /// # use rnic_verbs::*;
    /// # let ctx = Context::open("rnic0")?;
    /// let (pd_a, pd_b) = (ctx.alloc_pd()?, ctx.alloc_pd()?);
    /// let mut mr = pd_a.allocate_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    /// mr.rereg_pd(&pd_b)?; // same keys; now only pd_b's QPs reach it
    /// # Ok::<(), rnic_verbs::Error>(())
    /// ```
    pub fn rereg_pd(&mut self, pd: &ProtectionDomain) -> Result<()> {
        const OP: &str = "re-register memory region (change PD)";
        if !pd.context().same_device(self.inner.pd.context()) {
            return Err(Error::InvalidArgument {
                op: OP,
                why: format!("the PD is {}'s, the region {}'s", pd.context().name(), self.inner.pd.context().name()),
            });
        }
        let inner = self.only_handle(OP)?;
        match &mut inner.b {
            MrBackend::Emu(m) => {
                let (e, _) = inner.pd.emu_pd();
                let (_, new_pd) = pd.emu_pd();
                // A new block over the same memory: work posted before holds the old one,
                // which is revoked (Device::rereg_mr).
                let view = if m.block.is_implicit() {
                    MemBlock::implicit()
                } else {
                    // SAFETY: the same bytes the region's block describes, kept alive for as
                    // long as the region by `owner` (the old block: the allocation itself or
                    // a view of memory kept by the caller's contract or by `dm`), which drops
                    // only after the region is deregistered or given other memory.
                    unsafe { MemBlock::from_raw(m.block.as_ptr(), m.len) }
                };
                let view = Arc::new(view);
                e.dev
                    .rereg_mr(m.keys.lkey, Some(new_pd), Some((view.clone(), 0, m.len)), None)
                    .map_err(Error::RegMr)?;
                let old = std::mem::replace(&mut m.block, view);
                m.owner.get_or_insert(old);
            }
            #[cfg(feature = "hw")]
            MrBackend::Hw(m) => {
                let PdBackend::Hw(new_pd) = &pd.inner.b else { unreachable!("checked: same device") };
                m.rereg_pd(new_pd).map_err(crate::context::hw_err(OP, pd.context().name()))?;
            }
        }
        inner.pd = pd.clone();
        Ok(())
    }

    /// Gives the region `len` bytes of new, zeroed memory it owns (`ibv_rereg_mr` with
    /// `IBV_REREG_MR_CHANGE_TRANSLATION`): the keys, PD and rights stay; the address and
    /// length are the new memory's. Work posted before no longer reaches the region, and
    /// the old memory is released. Takes the only handle (see [`rereg_pd`](Self::rereg_pd)).
    /// On hardware it is `ibv_rereg_mr` with `IBV_REREG_MR_CHANGE_TRANSLATION`.
    pub fn rereg_allocate(&mut self, len: usize) -> Result<()> {
        const OP: &str = "re-register memory region (change translation)";
        if len == 0 {
            return Err(Error::InvalidArgument { op: OP, why: "0 bytes: ask for at least 1 byte".into() });
        }
        #[cfg(feature = "hw")]
        if let MrBackend::Hw(_) = &self.inner.b {
            let inner = self.only_handle(OP)?;
            let MrBackend::Hw(m) = &mut inner.b else { unreachable!() };
            return m.rereg_allocate(len).map_err(crate::context::hw_err(OP, inner.pd.context().name()));
        }
        let block = MemBlock::new(len).map_err(|e| Error::RegMr(DeviceError::Mem(e)))?;
        self.rereg_memory(OP, Arc::new(block))
    }

    /// Gives the region memory the caller owns, `len` bytes at `ptr` (`ibv_rereg_mr` with
    /// `IBV_REREG_MR_CHANGE_TRANSLATION`; see [`rereg_allocate`](Self::rereg_allocate)).
    ///
    /// # Safety
    /// As [`ProtectionDomain::register_mr`] for the new memory.
    pub unsafe fn rereg_translation(&mut self, ptr: *mut u8, len: usize) -> Result<()> {
        const OP: &str = "re-register memory region (change translation)";
        if len == 0 || ptr.is_null() {
            return Err(Error::InvalidArgument { op: OP, why: format!("{len} bytes at {ptr:p}") });
        }
        #[cfg(feature = "hw")]
        if let MrBackend::Hw(_) = &self.inner.b {
            let inner = self.only_handle(OP)?;
            let MrBackend::Hw(m) = &mut inner.b else { unreachable!() };
            // SAFETY: the caller's contract is this function's.
            return unsafe { m.rereg_translation(ptr, len) }
                .map_err(crate::context::hw_err(OP, inner.pd.context().name()));
        }
        // SAFETY: the caller upholds `MemBlock::from_raw`'s contract (this function's).
        let block = unsafe { MemBlock::from_raw(ptr, len) };
        self.rereg_memory(OP, Arc::new(block))
    }

    fn rereg_memory(&mut self, op: &'static str, block: Arc<MemBlock>) -> Result<()> {
        let inner = self.only_handle(op)?;
        match &mut inner.b {
            MrBackend::Emu(m) => {
                let (e, _) = inner.pd.emu_pd();
                let (len, iova) = (block.len(), block.addr());
                e.dev.rereg_mr(m.keys.lkey, None, Some((block.clone(), 0, len)), Some(iova)).map_err(Error::RegMr)?;
                // The old memory is no longer reached (Device::rereg_mr waited): what kept
                // it (an allocation, device memory) may go.
                m.block = block;
                (m.iova, m.len, m.dm) = (iova, len, None);
                m.owner = None;
                Ok(())
            }
            #[cfg(feature = "hw")]
            MrBackend::Hw(_) => unreachable!("the hardware backend re-registers in its own call"),
        }
    }

    /// Whether the region was registered on demand
    /// ([`ProtectionDomain::allocate_mr_on_demand`], an implicit region): its pages are
    /// not pinned.
    pub fn is_on_demand(&self) -> bool {
        match &self.inner.b {
            MrBackend::Emu(m) => m.on_demand,
            #[cfg(feature = "hw")]
            MrBackend::Hw(m) => m.is_on_demand(),
        }
    }

    /// Whether it is an implicit region over the whole address space
    /// ([`ProtectionDomain::register_implicit_mr`]).
    pub fn is_implicit(&self) -> bool {
        match &self.inner.b {
            MrBackend::Emu(m) => m.block.is_implicit(),
            #[cfg(feature = "hw")]
            MrBackend::Hw(_) => false,
        }
    }

    /// A hardware region over device memory: its bytes are the device's, reached by copies.
    fn copies_only(&self) -> bool {
        match &self.inner.b {
            MrBackend::Emu(_) => false,
            #[cfg(feature = "hw")]
            MrBackend::Hw(m) => m.is_dm(),
        }
    }

    /// Whether the device holds the region's pages in memory (pinned at registration on
    /// a device that pins; never for an on-demand region).
    pub fn is_pinned(&self) -> bool {
        match &self.inner.b {
            MrBackend::Emu(m) => m.block.is_pinned(),
            // ibv_reg_mr without IBV_ACCESS_ON_DEMAND pins.
            #[cfg(feature = "hw")]
            MrBackend::Hw(m) => !m.is_on_demand(),
        }
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        match &self.inner.b {
            MrBackend::Emu(m) => m.keys.lkey,
            #[cfg(feature = "hw")]
            MrBackend::Hw(m) => m.lkey(),
        }
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        match &self.inner.b {
            MrBackend::Emu(m) => m.keys.rkey,
            #[cfg(feature = "hw")]
            MrBackend::Hw(m) => m.rkey(),
        }
    }

    /// Virtual address of the first byte (what SGEs and peers use).
    pub fn addr(&self) -> u64 {
        match &self.inner.b {
            MrBackend::Emu(m) => m.iova,
            #[cfg(feature = "hw")]
            MrBackend::Hw(m) => m.addr(),
        }
    }

    /// Length.
    pub fn len(&self) -> usize {
        match &self.inner.b {
            MrBackend::Emu(m) => m.len,
            #[cfg(feature = "hw")]
            MrBackend::Hw(m) => m.len(),
        }
    }

    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An SGE over `len` bytes at `offset`.
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        Sge { addr: self.addr().wrapping_add(offset as u64), length: len, lkey: self.lkey() }
    }

    /// What to tell a peer so it can RDMA into this region.
    pub fn remote(&self) -> RemoteMr {
        RemoteMr { addr: self.addr(), rkey: self.rkey(), len: self.len() as u64 }
    }

    /// Copies bytes out of the region.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        match &self.inner.b {
            MrBackend::Emu(m) => m.block.read(offset, dst).map_err(Error::MrAccess),
            #[cfg(feature = "hw")]
            MrBackend::Hw(m) => m
                .read(offset, dst)
                .map_err(crate::context::hw_err("read memory region", self.inner.pd.context().name())),
        }
    }

    /// Copies bytes into the region.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        match &self.inner.b {
            MrBackend::Emu(m) => m.block.write(offset, src).map_err(Error::MrAccess),
            #[cfg(feature = "hw")]
            MrBackend::Hw(m) => m
                .write(offset, src)
                .map_err(crate::context::hw_err("write memory region", self.inner.pd.context().name())),
        }
    }

    /// Reads the whole region into a vector (an implicit region, which spans the address
    /// space, gives an empty one: read it with [`read`](Self::read)).
    pub fn to_vec(&self) -> Vec<u8> {
        if self.is_implicit() {
            return Vec::new();
        }
        let mut v = vec![0; self.len()];
        // In bounds by construction.
        let _ = self.read(0, &mut v);
        v
    }

    // The address came from a pointer of this process (the block's mapping or the
    // registered range), so it fits a usize.
    #[allow(clippy::cast_possible_truncation)]
    fn base(&self) -> *mut u8 {
        match &self.inner.b {
            MrBackend::Emu(m) => m.block.as_ptr(),
            #[cfg(feature = "hw")]
            MrBackend::Hw(m) => m.addr() as usize as *mut u8,
        }
    }

    /// The region's bytes as a slice, without a copy (as the `ibverbs` crate's
    /// `MemoryRegion<T>` derefs to `[T]`); empty for an implicit region and for a
    /// hardware region over device memory (its bytes are on the device).
    ///
    /// # Safety
    /// While the slice lives nothing may write the region: no work request that writes
    /// it (a posted receive, an RDMA READ or atomic landing in it) is outstanding, no
    /// peer can write it (its rkey was never given out with REMOTE_WRITE/REMOTE_ATOMIC
    /// rights, or the peer is known to be done, e.g. it sent the message that says so),
    /// and no other clone of this handle writes it ([`write`](Self::write),
    /// [`as_mut_slice`](Self::as_mut_slice)). The NIC writes from other threads, so
    /// breaking this is a data race, not just a stale read.
    pub unsafe fn as_slice(&self) -> &[u8] {
        if self.is_implicit() || self.copies_only() {
            return &[];
        }
        // SAFETY: the region's memory is valid for `len` bytes as long as `self` (it holds
        // the block or the hardware registration); the caller promises no concurrent write.
        unsafe { std::slice::from_raw_parts(self.base(), self.len()) }
    }

    /// The region's bytes as a mutable slice, without a copy: fill a send buffer in place.
    ///
    /// # Safety
    /// As [`as_slice`](Self::as_slice), and also nothing may read the region while the
    /// slice lives: no posted send, RDMA WRITE or peer's RDMA READ of it is outstanding,
    /// and no other clone reads it.
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.is_implicit() || self.copies_only() {
            return &mut [];
        }
        // SAFETY: as `as_slice`; exclusivity over the bytes is the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.base(), self.len()) }
    }
}
