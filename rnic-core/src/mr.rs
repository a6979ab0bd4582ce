//! The memory translation and protection table (MTPT): memory regions keyed by lkey / rkey.
//!
//! A memory region maps the virtual addresses `[iova, iova + len)` onto `len` bytes of a
//! [`MemBlock`]. The application registers regions from its own thread; the progress thread
//! checks every SGE (with the lkey) and every incoming RDMA / atomic request (with the rkey)
//! against the table, and gets back an [`MrSlice`] that can only touch the checked bytes.
//!
//! Keys follow Linux rxe: `key = index << 8 | key8`, where `index` names a table slot and
//! `key8` is a generation that changes every time the slot is freed, so a stale key (of a
//! deregistered region) does not reach the region that reuses its slot. `lkey == rkey`.
//! Slot 0 is never used, so keys below 0x100, and in particular key 0, are never valid (as in
//! rxe, whose MR indices start at 1). Freed slots are reused oldest first, and `key8` only
//! repeats after 256 reuses of the same slot. Keys are predictable: rxe draws `key8` at random,
//! we count, so that runs are reproducible.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::mem::{to_u64, MemBlock, MemError};

mod window;
pub use window::{Bind, BindError, MwType};

bitflags::bitflags! {
    /// Access rights of a memory region (the `ibv_access_flags` values).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct AccessFlags: u32 {
        /// The NIC may write the region for local work (receive buffers, RDMA READ
        /// responses, atomic results). `IBV_ACCESS_LOCAL_WRITE`.
        const LOCAL_WRITE = 1;
        /// Peers may RDMA WRITE the region. `IBV_ACCESS_REMOTE_WRITE`.
        const REMOTE_WRITE = 2;
        /// Peers may RDMA READ the region. `IBV_ACCESS_REMOTE_READ`.
        const REMOTE_READ = 4;
        /// Peers may run atomics on the region. `IBV_ACCESS_REMOTE_ATOMIC`.
        const REMOTE_ATOMIC = 8;
        /// Memory windows may be bound to the region (`IBV_ACCESS_MW_BIND`).
        const MW_BIND = 1 << 4;
        /// Peers may FLUSH the region for global visibility. `IBV_ACCESS_FLUSH_GLOBAL`.
        const FLUSH_GLOBAL = 1 << 8;
        /// Peers may FLUSH the region to persistence. `IBV_ACCESS_FLUSH_PERSISTENT`. Our
        /// memory is not persistent, so registration refuses it (as rxe does for non-pmem
        /// pages).
        const FLUSH_PERSISTENT = 1 << 9;
    }
}

impl AccessFlags {
    /// Every right a region of this NIC can be registered with: every flag but
    /// FLUSH_PERSISTENT, which needs persistent memory. ([`all`](Self::all) is every flag
    /// it knows; [`from_bits`](Self::from_bits) is `None` for a bit it does not know, such
    /// as `IBV_ACCESS_MW_BIND` or `IBV_ACCESS_ZERO_BASED`.)
    pub const REGISTRABLE: AccessFlags = AccessFlags::all().difference(AccessFlags::FLUSH_PERSISTENT);
}

/// `LOCAL_WRITE | REMOTE_READ`, or `(none)`.
impl fmt::Display for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("(none)");
        }
        let mut sep = "";
        for (name, _) in self.iter_names() {
            write!(f, "{sep}{name}")?;
            sep = " | ";
        }
        Ok(())
    }
}

impl fmt::Debug for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AccessFlags({self})")
    }
}

/// What `ibv_advise_mr` advises (`Device::advise_mr`): `IBV_ADVISE_MR_ADVICE_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// Fault the pages in for reading (`IBV_ADVISE_MR_ADVICE_PREFETCH`).
    Prefetch,
    /// Fault the pages in for writing (`IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE`): the ranges
    /// need local write.
    PrefetchWrite,
    /// Map what is already present, fault nothing in
    /// (`IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT`).
    PrefetchNoFault,
}

/// A protection domain, by id. Allocated by the verbs layer; regions and QPs of different
/// protection domains cannot reach each other (IBA chapter 10, protection domains).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PdId(pub u32);

impl fmt::Display for PdId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The keys of a registered region. They are equal (as in rxe): one key names the region for
/// local and remote access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MrKeys {
    /// Local key, used in the SGEs of local work requests.
    pub lkey: u32,
    /// Remote key, given to peers for RDMA and atomics.
    pub rkey: u32,
}

/// Lifecycle state of a key's table slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MrState {
    /// Registered and usable.
    Valid,
    /// Registered but invalidated (LOCAL_INV, SEND with Invalidate): every access fails until
    /// the region is deregistered.
    Invalid,
    /// Not registered: the key names no region (never registered, deregistered, or stale).
    Free,
}

/// Highest slot index a key can carry (24 bits above the 8-bit `key8`).
pub const MAX_MR_INDEX: u32 = 0x00ff_ffff;

/// Why registering, deregistering or invalidating a region failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MrError {
    /// REMOTE_WRITE or REMOTE_ATOMIC was asked without LOCAL_WRITE (`ibv_reg_mr` fails with
    /// EINVAL: Linux `ib_check_mr_access`, following the IBA Register Memory Region verb).
    #[error("access {access} asks for remote write or atomic access without LOCAL_WRITE")]
    RemoteWriteWithoutLocalWrite {
        /// The requested rights.
        access: AccessFlags,
    },
    /// The region's bytes do not lie inside the memory block.
    #[error("{len} bytes at offset {offset} do not fit in a memory block of {block_len} bytes")]
    OutOfBlock {
        /// Offset of the region in the block.
        offset: usize,
        /// Region length.
        len: usize,
        /// Block length.
        block_len: usize,
    },
    /// `iova + len` is past the end of the 64-bit address space.
    #[error("a region of {len} bytes at I/O virtual address {iova:#x} wraps around 2^64")]
    IovaOverflow {
        /// Requested I/O virtual address of the first byte.
        iova: u64,
        /// Region length.
        len: usize,
    },
    /// FLUSH_PERSISTENT was asked for memory that is not persistent (rxe refuses it for
    /// pages that are not pmem; all of rnic's memory is volatile).
    #[error("access {access} asks for FLUSH_PERSISTENT, but this device has no persistent memory")]
    NotPersistent {
        /// The requested rights.
        access: AccessFlags,
    },
    /// Every slot is in use.
    #[error("the memory region table is full ({capacity} regions)")]
    TableFull {
        /// Number of slots.
        capacity: u32,
    },
    /// The key names no registered region.
    #[error("key {key:#x} does not name a registered memory region")]
    UnknownKey {
        /// The key given.
        key: u32,
    },
    /// Memory windows are bound to the region: it cannot be deregistered until they are
    /// invalidated or deallocated (IBA 10.6.7.1, rxe `rxe_dereg_mr`).
    #[error("memory region {key:#x} has {windows} memory window(s) bound to it")]
    WindowsBound {
        /// The region's key.
        key: u32,
        /// Windows bound to it.
        windows: u32,
    },
}

/// Why an lkey / rkey check failed. The checks run in the order of the variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AccessError {
    /// The key's index is out of range, its slot is free, or its `key8` is stale.
    #[error("key {key:#x} does not name a registered memory region")]
    BadKey {
        /// The key given.
        key: u32,
    },
    /// The region has been invalidated.
    #[error("memory region {key:#x} has been invalidated")]
    Invalidated {
        /// The key given.
        key: u32,
    },
    /// The region belongs to another protection domain than the QP.
    #[error("memory region {key:#x} belongs to protection domain {mr_pd}, not {pd}")]
    PdMismatch {
        /// The key given.
        key: u32,
        /// The QP's protection domain.
        pd: PdId,
        /// The region's protection domain.
        mr_pd: PdId,
    },
    /// The region does not grant the rights the access needs.
    #[error("memory region {key:#x} grants {have} but the access needs {need}")]
    AccessDenied {
        /// The key given.
        key: u32,
        /// Rights the access needs.
        need: AccessFlags,
        /// Rights the region grants.
        have: AccessFlags,
    },
    /// The access is not inside `[iova, iova + region_len)`.
    #[error(
        "{len} bytes at {va:#x} are outside memory region {key:#x} \
         ({region_len} bytes at {iova:#x})"
    )]
    OutOfBounds {
        /// The key given.
        key: u32,
        /// First address accessed.
        va: u64,
        /// Access length.
        len: usize,
        /// First address of the region.
        iova: u64,
        /// Region length.
        region_len: usize,
    },
    /// `va + len` is past the end of the 64-bit address space (so outside any region).
    #[error("{len} bytes at {va:#x} wrap around the 64-bit address space")]
    AddressOverflow {
        /// The key given.
        key: u32,
        /// First address accessed.
        va: u64,
        /// Access length.
        len: usize,
    },
    /// A type 2 memory window used by another QP than the one it is bound to (IBA
    /// 10.6.7.2.3: a type 2B window is reached only through its QP), or a window's key
    /// used where only a region's is valid (an SGE's lkey).
    #[error("memory window {key:#x} cannot be used here: {why}")]
    Window {
        /// The key given.
        key: u32,
        /// Why.
        why: &'static str,
    },
}

/// A registered region.
struct Region {
    pd: PdId,
    block: Arc<MemBlock>,
    /// Offset of the region's first byte (at `iova`) in `block`.
    block_offset: usize,
    len: usize,
    iova: u64,
    access: AccessFlags,
    /// Memory windows bound to it (it cannot be deregistered while any is).
    windows: u32,
}

enum Entry {
    Free,
    Valid(Region),
    Invalid(Region),
    /// A memory window (`window.rs`).
    Window(window::Window),
}

struct Slot {
    /// Generation: the low 8 bits of the keys of the region in this slot.
    key8: u8,
    entry: Entry,
}

struct Table {
    /// Slot 0 is a placeholder that stays free, so no key below 0x100 is ever valid.
    slots: Vec<Slot>,
    /// Freed slot indices, oldest first.
    free: VecDeque<u32>,
    capacity: u32,
    live: usize,
}

impl Table {
    /// The slot named by `key`, if the key's index and `key8` match a used slot.
    fn slot(&self, key: u32) -> Option<&Slot> {
        let slot = self.slots.get(usize::try_from(key >> 8).ok()?)?;
        (u32::from(slot.key8) == key & 0xff && !matches!(slot.entry, Entry::Free)).then_some(slot)
    }

    fn slot_mut(&mut self, key: u32) -> Option<&mut Slot> {
        let slot = self.slots.get_mut(usize::try_from(key >> 8).ok()?)?;
        (u32::from(slot.key8) == key & 0xff && !matches!(slot.entry, Entry::Free)).then_some(slot)
    }

    /// Puts `entry` in a free slot (the oldest freed, else a new one) and returns its key.
    fn alloc(&mut self, entry: Entry) -> Result<u32, MrError> {
        let index = match self.free.pop_front() {
            Some(index) => index,
            None => {
                // slots.len() - 1 slots are in use (slot 0 is the placeholder).
                let index = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
                if index > self.capacity {
                    return Err(MrError::TableFull { capacity: self.capacity });
                }
                self.slots.push(Slot { key8: 0, entry: Entry::Free });
                index
            }
        };
        let Some(slot) = usize::try_from(index).ok().and_then(|i| self.slots.get_mut(i)) else {
            // Unreachable: free indices and the pushed index name existing slots.
            return Err(MrError::TableFull { capacity: self.capacity });
        };
        slot.entry = entry;
        let key = index << 8 | u32::from(slot.key8);
        self.live += 1;
        Ok(key)
    }

    /// Frees the slot `index` (its next occupant gets other keys).
    fn release(&mut self, index: u32) {
        if let Some(slot) = usize::try_from(index).ok().and_then(|i| self.slots.get_mut(i)) {
            slot.entry = Entry::Free;
            slot.key8 = slot.key8.wrapping_add(1);
            self.free.push_back(index);
            self.live -= 1;
        }
    }
}

/// The rights a region may be registered (or re-registered) with. IBA Register Memory
/// Region verb, Linux `ib_check_mr_access`: remote write and remote atomic access need
/// local write access too; FLUSH_PERSISTENT needs persistent memory, which this NIC's is not.
fn check_access(access: AccessFlags) -> Result<(), MrError> {
    if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
        && !access.contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(MrError::RemoteWriteWithoutLocalWrite { access });
    }
    if access.contains(AccessFlags::FLUSH_PERSISTENT) {
        return Err(MrError::NotPersistent { access });
    }
    Ok(())
}

/// The memory translation and protection table.
///
/// Shared by the application thread (register, deregister) and the progress thread (checks).
/// A check takes the read lock, indexes the slot array and clones one `Arc`: O(1), no
/// allocation.
pub struct Mtpt {
    table: RwLock<Table>,
}

impl Mtpt {
    /// A table for up to `capacity` regions (at most [`MAX_MR_INDEX`]; larger is clamped).
    /// Slots are allocated as regions are registered.
    pub fn new(capacity: u32) -> Mtpt {
        let placeholder = Slot { key8: 0, entry: Entry::Free };
        Mtpt {
            table: RwLock::new(Table {
                slots: vec![placeholder],
                free: VecDeque::new(),
                capacity: capacity.min(MAX_MR_INDEX),
                live: 0,
            }),
        }
    }

    /// Maximum number of registered regions.
    pub fn capacity(&self) -> u32 {
        self.table.read().capacity
    }

    /// Number of registered regions (valid or invalidated).
    pub fn len(&self) -> usize {
        self.table.read().live
    }

    /// Whether no region is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Registers `block[offset_in_block .. offset_in_block + len]` as the region
    /// `[iova, iova + len)` of protection domain `pd` with rights `access`.
    ///
    /// A zero-length region is allowed; only zero-length accesses at `iova` fit in it.
    /// `iova + len` may reach 2^64 exactly but not go past it.
    pub fn register(
        &self,
        pd: PdId,
        block: Arc<MemBlock>,
        offset_in_block: usize,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys, MrError> {
        check_access(access)?;
        match offset_in_block.checked_add(len) {
            Some(end) if end <= block.len() => {}
            _ => return Err(MrError::OutOfBlock { offset: offset_in_block, len, block_len: block.len() }),
        }
        if u128::from(iova) + u128::from(to_u64(len)) > 1u128 << 64 {
            return Err(MrError::IovaOverflow { iova, len });
        }
        let region = Region { pd, block, block_offset: offset_in_block, len, iova, access, windows: 0 };
        let key = self.table.write().alloc(Entry::Valid(region))?;
        Ok(MrKeys { lkey: key, rkey: key })
    }

    /// Changes the access rights of the region named by `lkey` (valid or invalidated), in
    /// place: its keys, PD and translation stay (`ibv_rereg_mr` with
    /// `IBV_REREG_MR_CHANGE_ACCESS`). Checked as [`register`](Self::register) checks them;
    /// every later check (an incoming RDMA WRITE, READ or atomic) sees the new rights.
    pub fn rereg_access(&self, lkey: u32, access: AccessFlags) -> Result<(), MrError> {
        check_access(access)?;
        let mut table = self.table.write();
        let slot = table.slot_mut(lkey).ok_or(MrError::UnknownKey { key: lkey })?;
        match &mut slot.entry {
            Entry::Valid(r) | Entry::Invalid(r) => r.access = access,
            Entry::Free | Entry::Window(_) => return Err(MrError::UnknownKey { key: lkey }),
        }
        Ok(())
    }

    /// Deregisters the region named by `lkey` (valid or invalidated) and frees its slot;
    /// returns the region's memory block.
    ///
    /// Slices already handed out (posted work requests) keep the block alive until they
    /// are dropped; memory the block does not own is safe to free only once the block is
    /// revoked and the accesses in progress have ended (`Device::dereg_mr` does both).
    pub fn deregister(&self, lkey: u32) -> Result<Arc<MemBlock>, MrError> {
        let mut table = self.table.write();
        let slot = table.slot_mut(lkey).ok_or(MrError::UnknownKey { key: lkey })?;
        let block = match &slot.entry {
            Entry::Valid(r) | Entry::Invalid(r) if r.windows > 0 => {
                return Err(MrError::WindowsBound { key: lkey, windows: r.windows })
            }
            Entry::Valid(r) | Entry::Invalid(r) => r.block.clone(),
            Entry::Free | Entry::Window(_) => return Err(MrError::UnknownKey { key: lkey }),
        };
        // The next region in this slot gets other keys, so this key goes stale.
        table.release(lkey >> 8);
        Ok(block)
    }

    /// Re-registers the region named by `lkey` (valid or invalidated) in place, keeping its
    /// keys (`ibv_rereg_mr` with `IBV_REREG_MR_CHANGE_PD` and/or
    /// `IBV_REREG_MR_CHANGE_TRANSLATION`): a new protection domain, and/or new memory
    /// (`block[offset .. offset + len]`, at `iova` or, without one, at the region's
    /// address as before), checked as [`register`](Self::register) checks them. Returns
    /// the block the region held before when `memory` replaced it: work requests posted
    /// earlier hold that one and must not reach the region any more (a hardware NIC looks
    /// their keys up again and finds another PD or other pages), so the caller revokes it
    /// (`Device::rereg_mr`). A new PD alone over the same memory comes with a new block
    /// over it for that reason.
    pub fn rereg(
        &self,
        lkey: u32,
        pd: Option<PdId>,
        memory: Option<(Arc<MemBlock>, usize, usize)>,
        iova: Option<u64>,
    ) -> Result<Option<Arc<MemBlock>>, MrError> {
        let mut table = self.table.write();
        let slot = table.slot_mut(lkey).ok_or(MrError::UnknownKey { key: lkey })?;
        let (Entry::Valid(r) | Entry::Invalid(r)) = &mut slot.entry else {
            return Err(MrError::UnknownKey { key: lkey });
        };
        if memory.is_some() && r.windows > 0 {
            // The windows' ranges are in the old translation (IBA 10.6.7.1: a region
            // with windows bound cannot be re-registered).
            return Err(MrError::WindowsBound { key: lkey, windows: r.windows });
        }
        let len = memory.as_ref().map_or(r.len, |m| m.2);
        let iova = iova.unwrap_or(r.iova);
        if let Some((block, offset, len)) = &memory {
            match offset.checked_add(*len) {
                Some(end) if end <= block.len() => {}
                _ => return Err(MrError::OutOfBlock { offset: *offset, len: *len, block_len: block.len() }),
            }
        }
        if u128::from(iova) + u128::from(to_u64(len)) > 1u128 << 64 {
            return Err(MrError::IovaOverflow { iova, len });
        }
        if let Some(pd) = pd {
            r.pd = pd;
        }
        r.iova = iova;
        Ok(memory.map(|(block, offset, len)| {
            r.block_offset = offset;
            r.len = len;
            std::mem::replace(&mut r.block, block)
        }))
    }

    /// Invalidates the region named by `rkey`: every later check with its key fails with
    /// [`AccessError::Invalidated`]. Invalidating an invalidated region succeeds (idempotent);
    /// the region stays registered until [`deregister`](Self::deregister).
    pub fn invalidate(&self, rkey: u32) -> Result<(), MrError> {
        let mut table = self.table.write();
        let slot = table.slot_mut(rkey).ok_or(MrError::UnknownKey { key: rkey })?;
        slot.entry = match std::mem::replace(&mut slot.entry, Entry::Free) {
            Entry::Valid(region) | Entry::Invalid(region) => Entry::Invalid(region),
            Entry::Window(w) => {
                slot.entry = Entry::Window(w);
                return Err(MrError::UnknownKey { key: rkey });
            }
            Entry::Free => Entry::Free, // slot_mut never returns a free slot
        };
        Ok(())
    }

    /// Invalidates the region named by `key` on behalf of a QP of protection domain `pd`
    /// (LOCAL_INV, SEND with Invalidate). IBA 10.6.7 (invalidation of a memory region):
    /// the region must belong to the QP's PD. Fails with [`AccessError::BadKey`] if the
    /// key names no region, [`AccessError::PdMismatch`] for another PD.
    pub fn invalidate_for(&self, key: u32, pd: PdId) -> Result<(), AccessError> {
        let mut table = self.table.write();
        let slot = table.slot_mut(key).ok_or(AccessError::BadKey { key })?;
        let region_pd = match &slot.entry {
            Entry::Valid(r) | Entry::Invalid(r) => r.pd,
            Entry::Window(_) => return window::invalidate(&mut table, key, pd),
            Entry::Free => return Err(AccessError::BadKey { key }),
        };
        if region_pd != pd {
            return Err(AccessError::PdMismatch { key, pd, mr_pd: region_pd });
        }
        slot.entry = match std::mem::replace(&mut slot.entry, Entry::Free) {
            Entry::Valid(region) | Entry::Invalid(region) => Entry::Invalid(region),
            other => other,
        };
        Ok(())
    }

    /// Checks a remote access to a whole region (FLUSH with selectivity "memory region":
    /// rxe skips the range check) and returns all its bytes.
    pub fn check_remote_whole(&self, rkey: u32, pd: PdId, need: AccessFlags) -> Result<MrSlice, AccessError> {
        let iova = {
            let table = self.table.read();
            match table.slot(rkey).map(|s| &s.entry) {
                Some(Entry::Valid(region)) => (region.iova, region.len),
                Some(Entry::Invalid(_)) => return Err(AccessError::Invalidated { key: rkey }),
                Some(Entry::Window(_)) => {
                    return Err(AccessError::Window { key: rkey, why: "a FLUSH of a whole region names a region" })
                }
                Some(Entry::Free) | None => return Err(AccessError::BadKey { key: rkey }),
            }
        };
        self.check(rkey, pd, Some(None), iova.0, iova.1, need)
    }

    /// Whether the memory of the region named by `lkey` (valid or invalidated) is pinned:
    /// false for a region registered on demand (`Device::reg_mr_on_demand`) and for a key
    /// that names no region.
    pub fn is_pinned(&self, lkey: u32) -> bool {
        match self.table.read().slot(lkey).map(|s| &s.entry) {
            Some(Entry::Valid(r) | Entry::Invalid(r)) => r.block.is_pinned(),
            _ => false,
        }
    }

    /// State of the region `key` names; [`MrState::Free`] if it names none.
    pub fn state(&self, key: u32) -> MrState {
        match self.table.read().slot(key).map(|s| &s.entry) {
            Some(Entry::Valid(_)) => MrState::Valid,
            Some(Entry::Invalid(_)) => MrState::Invalid,
            Some(Entry::Window(w)) if w.is_bound() => MrState::Valid,
            Some(Entry::Window(_)) => MrState::Invalid,
            Some(Entry::Free) | None => MrState::Free,
        }
    }

    /// Checks a local access (an SGE of a local work request) and returns its bytes.
    ///
    /// Reading a region locally needs no right (any valid lkey can be the source of a SEND or
    /// RDMA WRITE): pass `AccessFlags::empty()`. Writing it (receive buffers, RDMA READ
    /// response targets, atomic result buffers) needs `AccessFlags::LOCAL_WRITE`.
    /// The checks run as for [`check_remote`](Self::check_remote).
    #[inline]
    pub fn check_local(
        &self,
        lkey: u32,
        pd: PdId,
        addr: u64,
        len: usize,
        need: AccessFlags,
    ) -> Result<MrSlice, AccessError> {
        self.check(lkey, pd, None, addr, len, need)
    }

    /// The bytes of a local access that passes every check of
    /// [`check_local`](Self::check_local), else `None` (and `check_local` says why).
    #[cfg(test)]
    pub(crate) fn local_slice(&self, lkey: u32, pd: PdId, addr: u64, len: usize, need: AccessFlags) -> Option<MrSlice> {
        let mut out = None;
        self.with_local_slice(lkey, pd, addr, len, need, |s| out = Some(s));
        out
    }

    /// Hands `put` the bytes of a local access that passes every check of
    /// [`check_local`](Self::check_local) and returns true; else false (and `check_local`
    /// says why). The per-work-request path: no error is built, and `put` (inlined) stores
    /// the slice where it is kept: a `Result<MrSlice, _>` or `Option<MrSlice>` returned
    /// and then moved cost a store-forwarding stall per SGE (its halves stored as words,
    /// reloaded as one 16-byte move).
    #[inline(always)]
    pub(crate) fn with_local_slice(
        &self,
        lkey: u32,
        pd: PdId,
        addr: u64,
        len: usize,
        need: AccessFlags,
        put: impl FnOnce(MrSlice),
    ) -> bool {
        let table = self.table.read();
        let Some(Entry::Valid(region)) = table.slot(lkey).map(|s| &s.entry) else {
            return false;
        };
        if region.pd != pd || !region.access.contains(need) {
            return false;
        }
        let Some(offset) = region.offset_of(addr, len, (region.iova, region.len)) else {
            return false;
        };
        put(MrSlice { block: Arc::clone(&region.block), offset, len });
        true
    }

    /// Checks a remote access (RDMA READ / WRITE, atomic) against the rkey and returns its
    /// bytes.
    ///
    /// Checked in order: the key names a registered region (`BadKey`), the region is valid
    /// (`Invalidated`), it belongs to `pd` (`PdMismatch`), it grants `need` (`AccessDenied`),
    /// and `[va, va + len)` lies inside it (`AddressOverflow`, `OutOfBounds`).
    ///
    /// A zero-length access still checks the key here (and fits only inside or at the end of
    /// the region). IBA C9-88 lets a zero-length RDMA READ / WRITE carry any rkey and VA: the
    /// responder must skip this call for those, as rxe's `check_rkey` does.
    pub fn check_remote(
        &self,
        rkey: u32,
        pd: PdId,
        va: u64,
        len: usize,
        need: AccessFlags,
    ) -> Result<MrSlice, AccessError> {
        self.check(rkey, pd, Some(None), va, len, need)
    }

    /// [`check_remote`](Self::check_remote) by QP `qpn`: the key may also name a memory
    /// window, which must be bound (`Invalidated` otherwise), to this QP if it is of type
    /// 2 (IBA 10.6.7.2.3) and in `pd` if of type 1, grant `need` and hold
    /// `[va, va + len)`; the bytes are its region's.
    pub fn check_remote_by(
        &self,
        rkey: u32,
        pd: PdId,
        qpn: u32,
        va: u64,
        len: usize,
        need: AccessFlags,
    ) -> Result<MrSlice, AccessError> {
        self.check(rkey, pd, Some(Some(qpn)), va, len, need)
    }

    /// `remote`: `None` for a local access (an lkey: never a window's), `Some(qpn)` for a
    /// remote one (by that QP, where known).
    #[inline]
    fn check(
        &self,
        key: u32,
        pd: PdId,
        remote: Option<Option<u32>>,
        va: u64,
        len: usize,
        need: AccessFlags,
    ) -> Result<MrSlice, AccessError> {
        let table = self.table.read();
        let region = match table.slot(key).map(|s| &s.entry) {
            Some(Entry::Valid(region)) => region,
            Some(Entry::Invalid(_)) => return Err(AccessError::Invalidated { key }),
            Some(Entry::Window(w)) => {
                let Some(qpn) = remote else {
                    return Err(AccessError::Window { key, why: "a window's key is an R_Key, never an L_Key" });
                };
                return w.check(&table, key, pd, qpn, va, len, need);
            }
            Some(Entry::Free) | None => return Err(AccessError::BadKey { key }),
        };
        if region.pd != pd {
            return Err(AccessError::PdMismatch { key, pd, mr_pd: region.pd });
        }
        if !region.access.contains(need) {
            return Err(AccessError::AccessDenied { key, need, have: region.access });
        }
        region.slice(key, va, len, (region.iova, region.len))
    }
}

impl Region {
    /// Where `[va, va + len)` starts in the block, if it lies inside `[start, start + span)`
    /// (the region's own range, or a window's inside it) and inside the region; `None`
    /// otherwise. Builds no error: the work-request fast path calls it per SGE.
    #[inline(always)]
    fn offset_of(&self, va: u64, len: usize, (start, span): (u64, usize)) -> Option<usize> {
        // In u128 nothing here can overflow: every term is below 2^64.
        let first = u128::from(va);
        let end = first + u128::from(to_u64(len));
        let range_end = u128::from(start) + u128::from(to_u64(span));
        let region_end = u128::from(self.iova) + u128::from(to_u64(self.len));
        if first < u128::from(start) || end > range_end || first < u128::from(self.iova) || end > region_end {
            return None;
        }
        // va - iova <= self.len, so it fits in usize and offset + it stays inside the block.
        usize::try_from(va - self.iova).ok().and_then(|rel| self.block_offset.checked_add(rel))
    }

    /// The bytes `[va, va + len)` of the region, which must lie inside `[start, start +
    /// span)` (the region's own range, or a window's inside it), checked under `key`.
    fn slice(&self, key: u32, va: u64, len: usize, (start, span): (u64, usize)) -> Result<MrSlice, AccessError> {
        match self.offset_of(va, len, (start, span)) {
            Some(offset) => Ok(MrSlice { block: Arc::clone(&self.block), offset, len }),
            // A range never ends past 2^64 (registration and binding refuse it), so an
            // access that does was refused above: say which way.
            None if u128::from(va) + u128::from(to_u64(len)) > 1u128 << 64 => {
                Err(AccessError::AddressOverflow { key, va, len })
            }
            None => Err(AccessError::OutOfBounds { key, va, len, iova: start, region_len: span }),
        }
    }
}

impl Default for Mtpt {
    /// A table with the largest capacity, [`MAX_MR_INDEX`] regions.
    fn default() -> Mtpt {
        Mtpt::new(MAX_MR_INDEX)
    }
}

impl fmt::Debug for Mtpt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let table = self.table.read();
        f.debug_struct("Mtpt").field("capacity", &table.capacity).field("live", &table.live).finish()
    }
}

/// The bytes of one checked access: `len` bytes of a block from `offset` on.
///
/// Every method takes offsets relative to the slice and is bounds-checked against the slice,
/// so it can never touch a byte outside the access that was checked. Errors report
/// [`MemError::OutOfBounds`] with `block_len` set to the slice length.
#[derive(Clone, Debug)]
pub struct MrSlice {
    block: Arc<MemBlock>,
    offset: usize,
    len: usize,
}

impl MrSlice {
    /// Length of the slice in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the slice has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memory block the slice lies in.
    pub fn block(&self) -> &Arc<MemBlock> {
        &self.block
    }

    /// Offset of the slice's first byte in [`block`](Self::block).
    pub fn block_offset(&self) -> usize {
        self.offset
    }

    /// A slice of `len` bytes that no access reaches (every read and write fails, it is
    /// never [live](Self::is_live)): what an SGE whose key was refused stands for when
    /// keys are checked at execution (`QpInit::keys_at_execution`).
    pub fn unreachable(len: usize) -> MrSlice {
        static NOWHERE: std::sync::OnceLock<Arc<MemBlock>> = std::sync::OnceLock::new();
        let block = NOWHERE.get_or_init(|| {
            let b = MemBlock::new(0).expect("a zero-length block maps nothing and cannot fail");
            b.revoke();
            Arc::new(b)
        });
        MrSlice { block: block.clone(), offset: 0, len }
    }

    /// Whether the memory can still be reached: false once its region was deregistered
    /// or given other memory ([`MemBlock::revoke`]).
    pub fn is_live(&self) -> bool {
        !self.block.is_revoked()
    }

    /// Offset in the block of `at .. at + len`, after checking it against the slice.
    fn span(&self, at: usize, len: usize) -> Result<usize, MemError> {
        let out_of_bounds = MemError::OutOfBounds { offset: at, len, block_len: self.len };
        match at.checked_add(len) {
            Some(end) if end <= self.len => self.offset.checked_add(at).ok_or(out_of_bounds),
            _ => Err(out_of_bounds),
        }
    }

    /// The sub-slice `at .. at + len` (for example the part of an SGE one packet carries).
    pub fn subslice(&self, at: usize, len: usize) -> Result<MrSlice, MemError> {
        Ok(MrSlice { block: Arc::clone(&self.block), offset: self.span(at, len)?, len })
    }

    /// Copies `dst.len()` bytes at `at` out of the slice.
    pub fn read(&self, at: usize, dst: &mut [u8]) -> Result<(), MemError> {
        self.block.read(self.span(at, dst.len())?, dst)
    }

    /// Copies `src` into the slice at `at`.
    pub fn write(&self, at: usize, src: &[u8]) -> Result<(), MemError> {
        self.block.write(self.span(at, src.len())?, src)
    }

    /// Copies `len` bytes from `self[at..]` to `dst[dst_at..]` (memmove semantics).
    pub fn copy_to(&self, at: usize, dst: &MrSlice, dst_at: usize, len: usize) -> Result<(), MemError> {
        let from = self.span(at, len)?;
        let to = dst.span(dst_at, len)?;
        self.block.copy_to(from, &dst.block, to, len)
    }

    /// [`MemBlock::atomic_compare_swap`] on the 8 bytes at `at`.
    pub fn atomic_compare_swap(&self, at: usize, compare: u64, swap: u64) -> Result<u64, MemError> {
        self.block.atomic_compare_swap(self.span(at, 8)?, compare, swap)
    }

    /// [`MemBlock::atomic_fetch_add`] on the 8 bytes at `at`.
    pub fn atomic_fetch_add(&self, at: usize, add: u64) -> Result<u64, MemError> {
        self.block.atomic_fetch_add(self.span(at, 8)?, add)
    }

    /// [`MemBlock::atomic_write`] on the 8 bytes at `at`.
    pub fn atomic_write(&self, at: usize, value: u64) -> Result<(), MemError> {
        self.block.atomic_write(self.span(at, 8)?, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LW: AccessFlags = AccessFlags::LOCAL_WRITE;
    const RW: AccessFlags = AccessFlags::REMOTE_WRITE;
    const RR: AccessFlags = AccessFlags::REMOTE_READ;
    const RA: AccessFlags = AccessFlags::REMOTE_ATOMIC;
    const PD: PdId = PdId(1);
    const GUARD: u8 = 0xa5;

    fn block(len: usize) -> Arc<MemBlock> {
        Arc::new(MemBlock::new(len).unwrap())
    }

    #[test]
    fn access_flags_values_and_names() {
        assert_eq!([LW.bits(), RW.bits(), RR.bits(), RA.bits()], [1, 2, 4, 8]);
        assert_eq!(AccessFlags::REGISTRABLE, LW | RW | RR | RA | AccessFlags::MW_BIND | AccessFlags::FLUSH_GLOBAL);
        assert_eq!(format!("{:?}", LW | RR), "AccessFlags(LOCAL_WRITE | REMOTE_READ)");
        assert_eq!(AccessFlags::empty().to_string(), "(none)");
        assert_eq!(
            AccessFlags::REGISTRABLE.to_string(),
            "LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC | MW_BIND | FLUSH_GLOBAL"
        );
        assert!((LW | RR).contains(RR));
        assert!((LW | RR).contains(AccessFlags::empty()));
        assert!(!(LW | RR).contains(RR | RW));
        assert!((LW | RR).intersects(RR | RW));
        assert_eq!((LW | RR).difference(LW), RR);
        let mut f = LW;
        f |= RA;
        assert_eq!(f.bits(), 9);
        assert_eq!(AccessFlags::from_bits(0x11f), Some(AccessFlags::REGISTRABLE));
        assert_eq!(AccessFlags::from_bits(0x200), Some(AccessFlags::FLUSH_PERSISTENT));
        assert_eq!(AccessFlags::from_bits(0x10), Some(AccessFlags::MW_BIND)); // IBV_ACCESS_MW_BIND
        assert_eq!(AccessFlags::from_bits_truncate(0x25), LW | RR);
    }

    #[test]
    fn register_validates_access_and_placement() {
        let t = Mtpt::new(16);
        let b = block(4096);
        let reg = |off, len, iova, access| t.register(PD, Arc::clone(&b), off, len, iova, access);
        // IBA / ib_check_mr_access: remote write or atomic needs local write.
        for access in [RW, RA, RW | RR, RA | RR, RW | RA] {
            assert_eq!(reg(0, 16, 0, access), Err(MrError::RemoteWriteWithoutLocalWrite { access }));
        }
        for access in [AccessFlags::empty(), LW, RR, LW | RW, LW | RA, AccessFlags::REGISTRABLE] {
            assert!(reg(0, 16, 0, access).is_ok(), "{access:?}");
        }
        assert_eq!(reg(4000, 97, 0, LW), Err(MrError::OutOfBlock { offset: 4000, len: 97, block_len: 4096 }));
        assert_eq!(reg(usize::MAX, 2, 0, LW), Err(MrError::OutOfBlock { offset: usize::MAX, len: 2, block_len: 4096 }));
        assert_eq!(reg(0, 16, u64::MAX - 14, LW), Err(MrError::IovaOverflow { iova: u64::MAX - 14, len: 16 }));
        // Ending exactly at 2^64 is fine, and so are empty regions.
        let top = reg(0, 16, u64::MAX - 15, LW).unwrap();
        t.check_local(top.lkey, PD, u64::MAX - 7, 8, LW).unwrap();
        reg(4096, 0, 0, LW).unwrap();
        assert_eq!(t.len(), 8);
    }

    #[test]
    fn rereg_access_changes_the_rights_remote_checks_see() {
        let t = Mtpt::new(4);
        let k = t.register(PD, block(64), 0, 64, 0x1000, LW | RW).unwrap();
        t.check_remote(k.rkey, PD, 0x1000, 8, RW).unwrap();
        t.rereg_access(k.lkey, LW).unwrap();
        assert!(matches!(t.check_remote(k.rkey, PD, 0x1000, 8, RW), Err(AccessError::AccessDenied { .. })));
        t.rereg_access(k.lkey, LW | RW).unwrap();
        t.check_remote(k.rkey, PD, 0x1000, 8, RW).unwrap();
        // Checked as registration is; unknown keys refused.
        assert_eq!(t.rereg_access(k.lkey, RW), Err(MrError::RemoteWriteWithoutLocalWrite { access: RW }));
        assert_eq!(t.rereg_access(0x4242, LW), Err(MrError::UnknownKey { key: 0x4242 }));
        t.deregister(k.lkey).unwrap();
        assert_eq!(t.rereg_access(k.lkey, LW), Err(MrError::UnknownKey { key: k.lkey }));
    }

    #[test]
    fn keys_carry_index_and_generation() {
        let t = Mtpt::new(4);
        let b = block(64);
        let reg = || t.register(PD, Arc::clone(&b), 0, 64, 0x1000, LW | RR).unwrap();
        let a = reg();
        let c = reg();
        assert_eq!(a, MrKeys { lkey: 0x100, rkey: 0x100 });
        assert_eq!(c, MrKeys { lkey: 0x200, rkey: 0x200 });
        assert_eq!(t.state(a.lkey), MrState::Valid);

        t.deregister(a.lkey).unwrap();
        assert_eq!(t.state(a.lkey), MrState::Free);
        assert_eq!(t.deregister(a.lkey).err(), Some(MrError::UnknownKey { key: 0x100 }));
        // Slot 1 is reused with a new generation: the stale key does not reach the new region.
        let d = reg();
        let e = reg();
        assert_eq!(e.lkey, 0x300);
        assert_eq!(d.lkey, 0x101);
        assert_eq!(t.check_remote(a.rkey, PD, 0x1000, 8, RR).unwrap_err(), AccessError::BadKey { key: 0x100 });
        t.check_remote(d.rkey, PD, 0x1000, 8, RR).unwrap();
        // Keys below 0x100 (slot 0), including 0, never name a region.
        for key in [0, 1, 0xff, 0x0000_0400, u32::MAX] {
            assert_eq!(
                t.check_local(key, PD, 0x1000, 0, AccessFlags::empty()).unwrap_err(),
                AccessError::BadKey { key }
            );
            assert_eq!(t.state(key), MrState::Free);
        }
    }

    #[test]
    fn generation_wraps_after_256_reuses() {
        let t = Mtpt::new(1);
        let b = block(8);
        let first = t.register(PD, Arc::clone(&b), 0, 8, 0, LW).unwrap();
        let mut key = first.lkey;
        for i in 1..=256u32 {
            t.deregister(key).unwrap();
            key = t.register(PD, Arc::clone(&b), 0, 8, 0, LW).unwrap().lkey;
            assert_eq!(key, 0x100 | (i & 0xff));
        }
        assert_eq!(key, first.lkey);
    }

    #[test]
    fn table_full_and_oldest_free_slot_first() {
        let t = Mtpt::new(3);
        let b = block(8);
        let reg = || t.register(PD, Arc::clone(&b), 0, 8, 0, LW);
        let keys: Vec<u32> = (0..3).map(|_| reg().unwrap().lkey).collect();
        assert_eq!(keys, [0x100, 0x200, 0x300]);
        assert_eq!(reg(), Err(MrError::TableFull { capacity: 3 }));
        t.deregister(0x200).unwrap();
        t.deregister(0x100).unwrap();
        assert_eq!(reg().unwrap().lkey, 0x201);
        assert_eq!(reg().unwrap().lkey, 0x101);
        assert_eq!(reg(), Err(MrError::TableFull { capacity: 3 }));
        assert_eq!(Mtpt::new(u32::MAX).capacity(), MAX_MR_INDEX);
        assert_eq!(Mtpt::new(0).register(PD, b, 0, 8, 0, LW), Err(MrError::TableFull { capacity: 0 }));
    }

    /// One region, then accesses with one or more faults: the first check in the documented
    /// order is the one reported.
    #[test]
    fn check_order_table() {
        let t = Mtpt::new(8);
        let k = t.register(PD, block(0x100), 0, 0x100, 0x1000, LW | RR).unwrap().rkey;
        let bad_pd = PdId(2);
        let bounds = |va, len| AccessError::OutOfBounds { key: k, va, len, iova: 0x1000, region_len: 0x100 };
        let denied = AccessError::AccessDenied { key: k, need: RW, have: LW | RR };
        let pd_err = AccessError::PdMismatch { key: k, pd: bad_pd, mr_pd: PD };
        type Case = (u32, PdId, u64, usize, AccessFlags, Result<(), AccessError>);
        #[rustfmt::skip]
        let cases: &[Case] = &[
            // key       pd      va       len    need  result
            (k,          PD,     0x1000,  0x100, RR,   Ok(())),
            (k,          PD,     0x10ff,  1,     RR,   Ok(())),
            (k,          PD,     0x1100,  0,     RR,   Ok(())),
            (k,          PD,     0x1000,  0,     AccessFlags::empty(), Ok(())),
            (k ^ 1,      bad_pd, 0,       1,     RW,   Err(AccessError::BadKey { key: k ^ 1 })),
            (k + 0x100,  PD,     0x1000,  1,     RR,   Err(AccessError::BadKey { key: k + 0x100 })),
            (k,          bad_pd, 0,       1,     RW,   Err(pd_err)),
            (k,          PD,     0,       1,     RW,   Err(denied)),
            (k,          PD,     0x1000,  1,     RR | RA, Err(AccessError::AccessDenied { key: k, need: RR | RA, have: LW | RR })),
            (k,          PD,     0xfff,   1,     RR,   Err(bounds(0xfff, 1))),
            (k,          PD,     0x1000,  0x101, RR,   Err(bounds(0x1000, 0x101))),
            (k,          PD,     0x1100,  1,     RR,   Err(bounds(0x1100, 1))),
            (k,          PD,     0x1101,  0,     RR,   Err(bounds(0x1101, 0))),
            (k,          PD,     0x1000,  usize::MAX, RR, Err(AccessError::AddressOverflow { key: k, va: 0x1000, len: usize::MAX })),
            (k,          PD,     0,       usize::MAX, RR, Err(bounds(0, usize::MAX))),
            (k,          PD,     u64::MAX, 2,    RR,   Err(AccessError::AddressOverflow { key: k, va: u64::MAX, len: 2 })),
            (k,          PD,     u64::MAX, 1,    RR,   Err(bounds(u64::MAX, 1))),
        ];
        for &(key, pd, va, len, need, expect) in cases {
            let got = t.check_remote(key, pd, va, len, need).map(|_| ());
            assert_eq!(got, expect, "key {key:#x} pd {pd} va {va:#x} len {len} need {need}");
            let got = t.check_local(key, pd, va, len, need).map(|_| ());
            assert_eq!(got, expect, "local: key {key:#x} pd {pd} va {va:#x} len {len} need {need}");
        }
        t.invalidate(k).unwrap();
        // Invalidated comes right after the key check, before the PD / access / bounds checks.
        assert_eq!(t.check_remote(k, bad_pd, 0, 1, RW).unwrap_err(), AccessError::Invalidated { key: k });
    }

    #[test]
    fn local_read_needs_no_right_local_write_needs_local_write() {
        let t = Mtpt::new(8);
        let ro = t.register(PD, block(64), 0, 64, 0x40, AccessFlags::empty()).unwrap().lkey;
        t.check_local(ro, PD, 0x40, 64, AccessFlags::empty()).unwrap();
        assert_eq!(
            t.check_local(ro, PD, 0x40, 64, LW).unwrap_err(),
            AccessError::AccessDenied { key: ro, need: LW, have: AccessFlags::empty() }
        );
        assert!(matches!(t.check_remote(ro, PD, 0x40, 8, RR), Err(AccessError::AccessDenied { .. })));
    }

    #[test]
    fn invalidate_then_deregister() {
        let t = Mtpt::new(8);
        let k = t.register(PD, block(64), 0, 64, 0, LW | RW).unwrap();
        t.invalidate(k.rkey).unwrap();
        assert_eq!(t.state(k.rkey), MrState::Invalid);
        assert_eq!(t.check_remote(k.rkey, PD, 0, 8, RW).unwrap_err(), AccessError::Invalidated { key: k.rkey });
        assert_eq!(t.check_local(k.lkey, PD, 0, 8, LW).unwrap_err(), AccessError::Invalidated { key: k.lkey });
        t.invalidate(k.rkey).unwrap(); // idempotent
        assert_eq!(t.len(), 1);
        assert_eq!(t.invalidate(k.rkey ^ 0x1), Err(MrError::UnknownKey { key: k.rkey ^ 1 }));
        t.deregister(k.lkey).unwrap();
        assert_eq!(t.state(k.rkey), MrState::Free);
        assert_eq!(t.invalidate(k.rkey), Err(MrError::UnknownKey { key: k.rkey }));
        assert!(t.is_empty());
    }

    #[test]
    fn zero_length_remote_access_still_checks_the_key() {
        // The choice documented on check_remote: C9-88 is the responder's business.
        let t = Mtpt::new(8);
        assert_eq!(t.check_remote(0x1234, PD, 0, 0, RW).unwrap_err(), AccessError::BadKey { key: 0x1234 });
    }

    #[test]
    fn slice_maps_va_to_block_offset_and_stays_inside() {
        let t = Mtpt::new(8);
        let b = block(256);
        b.fill(0, 256, GUARD).unwrap();
        let k = t.register(PD, Arc::clone(&b), 64, 128, 0x7000, LW | RW | RR | RA).unwrap().rkey;
        let s = t.check_remote(k, PD, 0x7010, 32, RW).unwrap();
        assert_eq!((s.block_offset(), s.len(), s.is_empty()), (80, 32, false));
        assert!(Arc::ptr_eq(s.block(), &b));
        s.write(0, b"abcd").unwrap();
        s.write(30, b"yz").unwrap();
        assert_eq!(
            s.write(31, b"yz").unwrap_err().to_string(),
            "2 bytes at offset 31 do not fit in a block of 32 bytes"
        );
        let mut out = [0u8; 4];
        b.read(80, &mut out).unwrap();
        assert_eq!(&out, b"abcd");
        s.read(30, &mut out[..2]).unwrap();
        assert_eq!(&out[..2], b"yz");
        assert!(s.read(usize::MAX, &mut out).is_err());

        let sub = s.subslice(30, 2).unwrap();
        assert_eq!((sub.block_offset(), sub.len()), (110, 2));
        assert!(sub.write(0, b"abc").is_err());
        assert!(s.subslice(31, 2).is_err());

        // Atomics through a slice: aligned at 0x7010 (block offset 80).
        s.atomic_write(8, 10).unwrap();
        assert_eq!(s.atomic_fetch_add(8, 5).unwrap(), 10);
        assert_eq!(s.atomic_compare_swap(8, 15, 1).unwrap(), 15);
        assert!(matches!(s.atomic_write(28, 1), Err(MemError::OutOfBounds { .. })));
        assert!(matches!(s.atomic_write(4, 1), Err(MemError::Misaligned { .. })));

        // copy_to between slices, bounded by both.
        let d = t.check_local(k, PD, 0x7040, 8, LW).unwrap();
        s.copy_to(0, &d, 4, 4).unwrap();
        assert!(s.copy_to(0, &d, 5, 4).is_err());
        assert!(s.copy_to(30, &d, 0, 4).is_err());
        let mut out = [0u8; 8];
        d.read(0, &mut out).unwrap();
        assert_eq!(&out, &[GUARD, GUARD, GUARD, GUARD, b'a', b'b', b'c', b'd']);

        // Exactly the written bytes changed.
        let mut expect = vec![GUARD; 256];
        expect[80..84].copy_from_slice(b"abcd");
        expect[88..96].copy_from_slice(&1u64.to_ne_bytes());
        expect[110..112].copy_from_slice(b"yz");
        expect[132..136].copy_from_slice(b"abcd");
        let mut all = vec![0u8; 256];
        b.read(0, &mut all).unwrap();
        assert_eq!(all, expect);
    }

    #[test]
    fn slice_outlives_deregistration() {
        let t = Mtpt::new(8);
        let k = t.register(PD, block(64), 0, 64, 0, LW).unwrap();
        let s = t.check_local(k.lkey, PD, 0, 64, LW).unwrap();
        t.deregister(k.lkey).unwrap();
        // In-flight DMA still has valid memory to finish into.
        s.write(0, b"late").unwrap();
    }

    #[test]
    fn errors_display_the_details() {
        let e = AccessError::PdMismatch { key: 0x100, pd: PdId(2), mr_pd: PdId(1) };
        assert_eq!(e.to_string(), "memory region 0x100 belongs to protection domain 1, not 2");
        let e = AccessError::AccessDenied { key: 0x100, need: RW, have: LW | RR };
        assert_eq!(
            e.to_string(),
            "memory region 0x100 grants LOCAL_WRITE | REMOTE_READ but the access needs REMOTE_WRITE"
        );
        let e = MrError::RemoteWriteWithoutLocalWrite { access: RW };
        assert_eq!(e.to_string(), "access REMOTE_WRITE asks for remote write or atomic access without LOCAL_WRITE");
        assert_eq!(format!("{:?}", Mtpt::new(4)), "Mtpt { capacity: 4, live: 0 }");
    }

    #[test]
    fn concurrent_registration_and_lookup() {
        let t = Arc::new(Mtpt::new(64));
        let b = block(64);
        let stable = t.register(PD, Arc::clone(&b), 0, 64, 0, LW | RR).unwrap().rkey;
        let churn = {
            let t = Arc::clone(&t);
            let b = Arc::clone(&b);
            std::thread::spawn(move || {
                for _ in 0..2000 {
                    let k = t.register(PD, Arc::clone(&b), 0, 64, 0, LW).unwrap();
                    t.invalidate(k.rkey).unwrap();
                    t.deregister(k.lkey).unwrap();
                }
            })
        };
        for i in 0..20_000u32 {
            t.check_remote(stable, PD, 0, 64, RR).unwrap();
            // Random keys never panic, whatever the churn is doing.
            let _ = t.check_remote(i.wrapping_mul(0x9e37_79b9), PD, 0, 1, RR);
        }
        churn.join().unwrap();
        assert_eq!(t.len(), 1);
    }

    /// Addresses near the interesting edges: 0, 2^64, and around a region.
    fn edge_u64() -> impl Strategy<Value = u64> {
        prop_oneof![any::<u64>(), 0..4096u64, (u64::MAX - 4096)..=u64::MAX,]
    }

    const PROP_BLOCK: usize = 512;

    proptest! {
        /// check_remote's bounds against a u128 model: Ok exactly when
        /// iova <= va and va + len <= iova + region_len.
        #[test]
        fn check_remote_bounds_match_model(
            iova in edge_u64(),
            region_len in 0..=PROP_BLOCK,
            delta in -1024i64..1024,
            far_va in any::<u64>(),
            use_far in any::<bool>(),
            len in prop_oneof![0..1024usize, any::<usize>(), (usize::MAX - 16)..=usize::MAX],
        ) {
            let t = Mtpt::new(2);
            let b = block(PROP_BLOCK);
            let model_end = u128::from(iova) + region_len as u128;
            let reg = t.register(PD, Arc::clone(&b), 0, region_len, iova, RR);
            if model_end > 1u128 << 64 {
                prop_assert_eq!(reg, Err(MrError::IovaOverflow { iova, len: region_len }));
                return Ok(());
            }
            let key = reg.unwrap().rkey;
            let va = if use_far { far_va } else { iova.wrapping_add_signed(delta) };
            let access_end = u128::from(va) + len as u128;
            let in_bounds = u128::from(va) >= u128::from(iova) && access_end <= model_end;
            match t.check_remote(key, PD, va, len, RR) {
                Ok(s) => {
                    prop_assert!(in_bounds);
                    prop_assert_eq!(s.len(), len);
                    prop_assert_eq!(to_u64(s.block_offset()), va - iova);
                }
                Err(AccessError::AddressOverflow { .. }) => {
                    prop_assert!(access_end > 1u128 << 64);
                }
                Err(AccessError::OutOfBounds { .. }) => {
                    prop_assert!(!in_bounds);
                    prop_assert!(access_end <= 1u128 << 64);
                }
                Err(e) => prop_assert!(false, "unexpected {e:?}"),
            }
        }

        /// The work-request fast path (`local_slice`) gives a slice exactly when
        /// `check_local` does, the same one, whatever the key, PD, access and bounds: it
        /// lets nothing through that the full check refuses.
        #[test]
        fn local_slice_agrees_with_check_local(
            iova in edge_u64(),
            region_len in 0..=PROP_BLOCK,
            region_off in 0..64usize,
            delta in prop_oneof![0..600i64, -1024i64..1024],
            far_va in any::<u64>(),
            use_far in proptest::bool::weighted(0.1),
            len in prop_oneof![0..600usize, any::<usize>(), (usize::MAX - 16)..=usize::MAX],
            to_end in proptest::bool::weighted(0.4),
            end_delta in -2i64..=2,
            key_kind in 0..6u8,
            other_pd in proptest::bool::weighted(0.2),
            need_write in any::<bool>(),
            grant_write in proptest::bool::weighted(0.8),
        ) {
            let t = Mtpt::new(4);
            let b = block(PROP_BLOCK + 64);
            let access = if grant_write { LW } else { AccessFlags::empty() };
            let Ok(keys) = t.register(PD, Arc::clone(&b), region_off, region_len, iova, access) else {
                return Ok(());
            };
            let key = match key_kind {
                1 => keys.lkey ^ 1,     // another generation of the slot
                2 => keys.lkey + 0x100, // a slot never used
                3 => {
                    t.invalidate(keys.lkey).unwrap();
                    keys.lkey
                }
                _ => keys.lkey,
            };
            let pd = if other_pd { PdId(PD.0 + 1) } else { PD };
            let need = if need_write { LW } else { AccessFlags::empty() };
            let va = if use_far { far_va } else { iova.wrapping_add_signed(delta) };
            // Often an access that ends at the region's end, or just before or after it.
            let region_end = u128::from(iova) + region_len as u128;
            let len = match (to_end, region_end.checked_sub(u128::from(va))) {
                (true, Some(room)) => usize::try_from(room as i128 + i128::from(end_delta)).unwrap_or(len),
                _ => len,
            };
            let fast = t.local_slice(key, pd, va, len, need);
            let full = t.check_local(key, pd, va, len, need);
            prop_assert_eq!(fast.is_some(), full.is_ok(), "{:?}", full.as_ref().err());
            if let (Some(f), Ok(s)) = (fast, full) {
                prop_assert_eq!((f.block_offset(), f.len()), (s.block_offset(), s.len()));
                prop_assert!(Arc::ptr_eq(f.block(), s.block()));
            }
        }

        /// Whatever the region and the write, MrSlice::write never changes a byte outside the
        /// slice, and changes exactly the written bytes when it succeeds.
        #[test]
        fn slice_write_never_escapes(
            region_off in 0..PROP_BLOCK,
            region_len in 0..PROP_BLOCK,
            access_off in 0..PROP_BLOCK,
            access_len in 0..PROP_BLOCK,
            at in prop_oneof![0..PROP_BLOCK, any::<usize>()],
            data in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let b = block(PROP_BLOCK);
            b.fill(0, PROP_BLOCK, GUARD).unwrap();
            let t = Mtpt::new(1);
            let Ok(keys) = t.register(PD, Arc::clone(&b), region_off, region_len, 0x10_000, LW) else {
                prop_assert!(region_off + region_len > PROP_BLOCK);
                return Ok(());
            };
            let Ok(s) = t.check_local(keys.lkey, PD, 0x10_000 + access_off as u64, access_len, LW) else {
                prop_assert!(access_off + access_len > region_len);
                return Ok(());
            };
            let fits = at.checked_add(data.len()).is_some_and(|end| end <= s.len());
            prop_assert_eq!(s.write(at, &data).is_ok(), fits);

            let mut after = vec![0u8; PROP_BLOCK];
            b.read(0, &mut after).unwrap();
            let (lo, hi) = (s.block_offset(), s.block_offset() + s.len());
            for (i, &byte) in after.iter().enumerate() {
                if fits && i >= lo + at && i < lo + at + data.len() {
                    prop_assert_eq!(byte, data[i - lo - at]);
                } else {
                    prop_assert_eq!(byte, GUARD, "byte {} changed (slice {}..{})", i, lo, hi);
                }
            }
        }
    }
}
