//! Device memory (`ibv_alloc_dm`): memory the device owns rather than the program, reached
//! by copies and by memory regions registered over it
//! ([`ProtectionDomain::register_dm_mr`](crate::ProtectionDomain::register_dm_mr)).
//! The emulated device's is rnic-core's `mem::dm::DeviceMemory` (at most
//! [`MAX_DM_SIZE`](rnic_core::mem::dm::MAX_DM_SIZE) bytes, copies and registrations in
//! whole 4-byte words, as mlx5's MEMIC).

use crate::context::{Backend, Context};
use crate::{Error, Result};
use rnic_core::mem::dm::DeviceMemory as CoreDm;
use std::sync::Arc;

/// An allocation of device memory. Clones share it; the memory is freed with the last
/// clone, and a memory region over it holds one, so it is never freed under a region.
/// [`free`](Self::free) says so explicitly: it is refused while a region registers it
/// (`ibv_free_dm`'s `EBUSY`, [`DmBusy`]).
#[derive(Clone, Debug)]
pub struct DeviceMemory {
    pub(crate) ctx: Context,
    pub(crate) b: DmBackend,
}

#[derive(Clone, Debug)]
pub(crate) enum DmBackend {
    Emu(Arc<CoreDm>),
    #[cfg(feature = "hw")]
    Hw(crate::hw::HwDm),
}

impl Context {
    /// Allocates `len` bytes of zeroed device memory (`ibv_alloc_dm`; on the emulated
    /// device 1 to [`MAX_DM_SIZE`](rnic_core::mem::dm::MAX_DM_SIZE) bytes; on hardware
    /// the provider's `ibv_alloc_dm`, within its `max_dm_size`).
    pub fn alloc_dm(&self, len: usize) -> Result<DeviceMemory> {
        let b = match &self.b {
            Backend::Emu(_) => {
                DmBackend::Emu(Arc::new(CoreDm::new(len).map_err(|e| dm_err("allocate device memory", &e))?))
            }
            #[cfg(feature = "hw")]
            Backend::Hw(h) => DmBackend::Hw(
                h.ctx.alloc_dm(len).map_err(crate::context::hw_err("allocate device memory", self.name()))?,
            ),
        };
        Ok(DeviceMemory { ctx: self.clone(), b })
    }
}

fn dm_err(op: &'static str, e: &rnic_core::mem::dm::DmError) -> Error {
    Error::InvalidArgument { op, why: e.to_string() }
}

impl DeviceMemory {
    /// The device.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        match &self.b {
            DmBackend::Emu(m) => m.len(),
            #[cfg(feature = "hw")]
            DmBackend::Hw(m) => m.len(),
        }
    }

    /// Never true: an allocation has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `src` into the memory at `offset` (`ibv_memcpy_to_dm`): in bounds, offset
    /// and length in whole 4-byte words.
    pub fn copy_to(&self, offset: u64, src: &[u8]) -> Result<()> {
        const OP: &str = "copy to device memory";
        match &self.b {
            DmBackend::Emu(m) => m.copy_to(offset, src).map_err(|e| dm_err(OP, &e)),
            #[cfg(feature = "hw")]
            DmBackend::Hw(m) => m.copy_to(offset, src).map_err(crate::context::hw_err(OP, self.ctx.name())),
        }
    }

    /// Copies the memory at `offset` into `dst` (`ibv_memcpy_from_dm`), under the same
    /// rules.
    pub fn copy_from(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        const OP: &str = "copy from device memory";
        match &self.b {
            DmBackend::Emu(m) => m.copy_from(offset, dst).map_err(|e| dm_err(OP, &e)),
            #[cfg(feature = "hw")]
            DmBackend::Hw(m) => m.copy_from(offset, dst).map_err(crate::context::hw_err(OP, self.ctx.name())),
        }
    }

    /// Frees the memory (`ibv_free_dm`), unless memory regions register it or other
    /// handles exist: then the refusal says so and gives the handle back
    /// ([`DmBusy::into_inner`]); the memory lives on while they do.
    pub fn free(self) -> std::result::Result<(), DmBusy> {
        let holders = match &self.b {
            DmBackend::Emu(m) => Arc::strong_count(m) - 1,
            #[cfg(feature = "hw")]
            DmBackend::Hw(m) => m.holders(),
        };
        if holders > 0 {
            return Err(DmBusy { dm: self, holders });
        }
        Ok(())
    }
}

/// [`DeviceMemory::free`] refused: regions still register the memory, or other handles
/// share it (`ibv_free_dm`'s `EBUSY`). Holds the handle, to free again later.
#[derive(Debug)]
pub struct DmBusy {
    dm: DeviceMemory,
    holders: usize,
}

impl DmBusy {
    /// The handle the refused call took.
    pub fn into_inner(self) -> DeviceMemory {
        self.dm
    }

    /// Regions and other handles that hold the memory.
    pub fn holders(&self) -> usize {
        self.holders
    }
}

impl std::fmt::Display for DmBusy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "free device memory: {} memory region(s) or other handle(s) still hold it", self.holders)
    }
}

impl std::error::Error for DmBusy {}

impl From<DmBusy> for Error {
    fn from(e: DmBusy) -> Error {
        Error::InvalidArgument {
            op: "free device memory",
            why: format!("{} memory region(s) or other handle(s) still hold it", e.holders),
        }
    }
}
