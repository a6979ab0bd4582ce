//! Memory regions (`ibv_mr`): registered memory, its keys, and the ways to reach its bytes.

use crate::pd::{PdBackend, ProtectionDomain};
use crate::types::RemoteMr;
use crate::{AccessFlags, DeviceError, Error, Result, Sge};
use rnic_core::mem::MemBlock;
use rnic_core::mr::MrKeys;
use std::sync::Arc;

#[derive(Debug)]
pub(crate) enum MrBackend {
    Emu {
        block: Arc<MemBlock>,
        keys: MrKeys,
        iova: u64,
        len: usize,
    },
    #[cfg(feature = "hw")]
    Hw(crate::hw::HwMr),
}

#[derive(Debug)]
struct MrInner {
    pd: ProtectionDomain,
    b: MrBackend,
}

impl Drop for MrInner {
    fn drop(&mut self) {
        if let MrBackend::Emu { keys, .. } = &self.b {
            let (e, _) = self.pd.emu_pd();
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
        Ok(MemoryRegion::new(self.clone(), MrBackend::Emu { block, keys, iova, len }))
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
    /// [`Error::Unsupported`] (the backend does not re-register).
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
            MrBackend::Emu { keys, .. } => {
                let (e, _) = self.inner.pd.emu_pd();
                e.dev.mtpt().rereg_access(keys.lkey, access).map_err(|m| Error::RegMr(DeviceError::Mr(m)))
            }
            #[cfg(feature = "hw")]
            MrBackend::Hw(_) => Err(Error::Unsupported {
                op: "re-register memory region",
                device: self.inner.pd.context().name().to_string(),
                why: "the hardware backend does not re-register (deregister and register again)".into(),
            }),
        }
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        match &self.inner.b {
            MrBackend::Emu { keys, .. } => keys.lkey,
            #[cfg(feature = "hw")]
            MrBackend::Hw(m) => m.lkey(),
        }
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        match &self.inner.b {
            MrBackend::Emu { keys, .. } => keys.rkey,
            #[cfg(feature = "hw")]
            MrBackend::Hw(m) => m.rkey(),
        }
    }

    /// Virtual address of the first byte (what SGEs and peers use).
    pub fn addr(&self) -> u64 {
        match &self.inner.b {
            MrBackend::Emu { iova, .. } => *iova,
            #[cfg(feature = "hw")]
            MrBackend::Hw(m) => m.addr(),
        }
    }

    /// Length.
    pub fn len(&self) -> usize {
        match &self.inner.b {
            MrBackend::Emu { len, .. } => *len,
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
            MrBackend::Emu { block, .. } => block.read(offset, dst).map_err(Error::MrAccess),
            #[cfg(feature = "hw")]
            MrBackend::Hw(m) => m
                .read(offset, dst)
                .map_err(crate::context::hw_err("read memory region", self.inner.pd.context().name())),
        }
    }

    /// Copies bytes into the region.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        match &self.inner.b {
            MrBackend::Emu { block, .. } => block.write(offset, src).map_err(Error::MrAccess),
            #[cfg(feature = "hw")]
            MrBackend::Hw(m) => m
                .write(offset, src)
                .map_err(crate::context::hw_err("write memory region", self.inner.pd.context().name())),
        }
    }

    /// Reads the whole region into a vector.
    pub fn to_vec(&self) -> Vec<u8> {
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
            MrBackend::Emu { block, .. } => block.addr() as usize as *mut u8,
            #[cfg(feature = "hw")]
            MrBackend::Hw(m) => m.addr() as usize as *mut u8,
        }
    }

    /// The region's bytes as a slice, without a copy (as the `ibverbs` crate's
    /// `MemoryRegion<T>` derefs to `[T]`).
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
        // SAFETY: as `as_slice`; exclusivity over the bytes is the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.base(), self.len()) }
    }
}
