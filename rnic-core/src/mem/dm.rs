//! Device memory (`ibv_alloc_dm`): memory the device owns rather than the program. On a
//! NIC it is on the card (mlx5's MEMIC); here it is a block the device allocates, which
//! the program reaches only by copies (`ibv_memcpy_to_dm`/`ibv_memcpy_from_dm`), as on
//! hardware, and which a memory region registers zero-based (`ibv_reg_dm_mr`). The rules
//! are mlx5's, which rdma-core's tests check: at most [`MAX_DM_SIZE`] bytes, copies and
//! registrations in whole [`DM_ALIGN`]-byte words.

use super::{to_u64, MemBlock, MemError};
use std::sync::Arc;

/// The most device memory one allocation may have, as much as mlx5's MEMIC offers (the
/// device reports it as `DeviceCaps::max_dm_size`).
pub const MAX_DM_SIZE: u64 = 256 * 1024;

/// Copies and registrations are in whole 4-byte words (mlx5's MEMIC rule: a copy at an
/// unaligned offset or of an unaligned length is refused).
pub const DM_ALIGN: usize = 4;

/// Why a device-memory call was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DmError {
    /// An allocation of 0 bytes or more than [`MAX_DM_SIZE`].
    #[error("{len} bytes of device memory asked for: 1..={MAX_DM_SIZE} bytes can be allocated")]
    Size {
        /// Bytes asked for.
        len: usize,
    },
    /// A copy or registration outside the memory or not in whole words.
    #[error(
        "{len} bytes at offset {offset} of {dm_len} bytes of device memory: in bounds and in whole \
         {DM_ALIGN}-byte words (offset and length)"
    )]
    Range {
        /// Offset asked for.
        offset: u64,
        /// Bytes asked for.
        len: u64,
        /// The memory's size.
        dm_len: usize,
    },
    /// Allocating the memory failed.
    #[error("allocating device memory: {0}")]
    Mem(#[from] MemError),
}

/// An allocation of device memory: zeroed when allocated, reached by copies and by the
/// regions registered over it ([`view`](Self::view)).
#[derive(Debug)]
pub struct DeviceMemory {
    block: Arc<MemBlock>,
}

impl DeviceMemory {
    /// Allocates `len` zeroed bytes (1 ..= [`MAX_DM_SIZE`]).
    pub fn new(len: usize) -> Result<DeviceMemory, DmError> {
        if len == 0 || to_u64(len) > MAX_DM_SIZE {
            return Err(DmError::Size { len });
        }
        Ok(DeviceMemory { block: Arc::new(MemBlock::new(len)?) })
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.block.len()
    }

    /// Never: an allocation has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.block.is_empty()
    }

    /// The memory's block (shared with `ibv_import_dm`'s handles).
    pub fn block(&self) -> &Arc<MemBlock> {
        &self.block
    }

    /// Checks `len` bytes at `offset` against the memory and the word rule; the offset as
    /// an index.
    pub fn check_range(&self, offset: u64, len: u64) -> Result<usize, DmError> {
        check_range(self.block.len(), offset, len)
    }

    /// Copies `src` into the memory at `offset` (`ibv_memcpy_to_dm`).
    pub fn copy_to(&self, offset: u64, src: &[u8]) -> Result<(), DmError> {
        let at = self.check_range(offset, src.len() as u64)?;
        Ok(self.block.write(at, src)?)
    }

    /// Copies the memory at `offset` into `dst` (`ibv_memcpy_from_dm`).
    pub fn copy_from(&self, offset: u64, dst: &mut [u8]) -> Result<(), DmError> {
        let at = self.check_range(offset, dst.len() as u64)?;
        Ok(self.block.read(at, dst)?)
    }

    /// A block over `len` bytes of the memory from `offset` (checked as a copy is), for a
    /// region registered over them (`ibv_reg_dm_mr`): deregistering the region revokes the
    /// view, which leaves the memory and its other regions alone.
    ///
    /// # Safety
    /// The view, and everything holding it, is not used after this memory is dropped: the
    /// caller keeps the memory while a region registers the view (`ibv_free_dm` is EBUSY
    /// then), and the region's deregistration (which revokes the view and waits for the
    /// accesses in progress) comes first.
    pub unsafe fn view(&self, offset: u64, len: u64) -> Result<MemBlock, DmError> {
        let at = self.check_range(offset, len)?;
        // In range (checked), so it fits a usize.
        let len = usize::try_from(len).unwrap_or(0);
        // SAFETY: `at .. at + len` lies inside the block (check_range), an owned mapping
        // valid for reads and writes from any thread, alive as long as this memory; that
        // the view is not used after it is the caller's promise.
        Ok(unsafe { MemBlock::from_raw(self.block.as_ptr().wrapping_add(at), len) })
    }
}

/// `len` bytes at `offset` of `dm_len` bytes of device memory: in bounds and in whole words;
/// the offset as an index.
pub fn check_range(dm_len: usize, offset: u64, len: u64) -> Result<usize, DmError> {
    let word = DM_ALIGN as u64;
    let fits = offset.checked_add(len).is_some_and(|end| end <= dm_len as u64);
    if !fits || offset % word != 0 || len % word != 0 {
        return Err(DmError::Range { offset, len, dm_len });
    }
    usize::try_from(offset).map_err(|_| DmError::Range { offset, len, dm_len })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_in_bounds_and_in_whole_words() {
        let dm = DeviceMemory::new(64).unwrap();
        dm.copy_to(8, b"abcdefgh").unwrap();
        let mut back = [0u8; 8];
        dm.copy_from(8, &mut back).unwrap();
        assert_eq!(&back, b"abcdefgh");
        assert!(matches!(dm.copy_to(2, b"abcd"), Err(DmError::Range { offset: 2, .. })));
        assert!(matches!(dm.copy_to(0, b"abc"), Err(DmError::Range { len: 3, .. })));
        assert!(matches!(dm.copy_from(64, &mut back), Err(DmError::Range { .. })));
        assert!(matches!(dm.check_range(u64::MAX - 3, 8), Err(DmError::Range { .. })));
        assert!(matches!(DeviceMemory::new(0), Err(DmError::Size { len: 0 })));
        assert!(matches!(DeviceMemory::new(256 * 1024 + 1), Err(DmError::Size { .. })));
    }
}
