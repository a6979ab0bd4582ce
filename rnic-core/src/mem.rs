//! Memory the emulated NIC reads and writes ("DMA"), and the only `unsafe` code of the crate.
//!
//! A [`MemBlock`] is a contiguous range of bytes. It either owns an anonymous mapping
//! ([`MemBlock::new`]) or describes application memory handed to us by
//! [`MemBlock::from_raw`]. Registered application memory is written by the NIC (on its progress
//! thread) while the application keeps running, exactly as a hardware NIC writes through DMA. So
//! the block never creates a `&[u8]` or `&mut [u8]` over its bytes: every access is a
//! bounds-checked copy through a raw pointer, or an 8-byte atomic for the RDMA atomics.
//!
//! The block does not serialize its own accesses: two overlapping copies issued at once from two
//! threads leave unspecified bytes behind, as two overlapping DMA writes would. The engine keeps
//! the NIC's accesses to one QP's memory on one progress thread.
//!
//! Device memory ([`dm`]) is a block the device owns, reached by copies and by the regions
//! registered over views of it.

use std::fmt;
use std::io;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use memmap2::{MmapMut, MmapRaw};
use parking_lot::Mutex;

pub mod dm;

/// Size and required alignment, in bytes, of the operand of an RDMA atomic.
pub const ATOMIC_SIZE: usize = 8;

// `to_u64` widens; an address must always fit in a u64.
const _: () = assert!(usize::BITS <= u64::BITS);
// `AtomicU64::from_ptr` needs this alignment; we check it as `ATOMIC_SIZE`.
const _: () = assert!(std::mem::align_of::<AtomicU64>() == ATOMIC_SIZE);

/// Widening `usize` to `u64` conversion; lossless by the assertion above.
#[inline]
pub(crate) fn to_u64(v: usize) -> u64 {
    v as u64
}

/// Why a memory block operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemError {
    /// `offset + len` is past the end of the block (or overflows).
    #[error("{len} bytes at offset {offset} do not fit in a block of {block_len} bytes")]
    OutOfBounds {
        /// Requested offset into the block.
        offset: usize,
        /// Requested length.
        len: usize,
        /// Length of the block (or of the slice the offset is relative to).
        block_len: usize,
    },
    /// The absolute address of an atomic operand is not 8-byte aligned.
    #[error("address {addr:#x} of an 8-byte atomic operand is not 8-byte aligned")]
    Misaligned {
        /// The absolute virtual address that was accessed.
        addr: u64,
    },
    /// `mlock` refused to pin the block because of the locked-memory resource limit.
    #[error(
        "cannot pin {requested} bytes of registered memory: the locked-memory limit \
         RLIMIT_MEMLOCK is {limit} and memory this process has already locked counts against it; \
         raise it (`ulimit -l unlimited`, or LimitMEMLOCK=infinity for a systemd service) \
         or turn memory pinning off",
        limit = ByteLimit(.limit_bytes)
    )]
    MemlockLimit {
        /// Bytes we tried to lock (the block rounded out to whole pages).
        requested: usize,
        /// The soft RLIMIT_MEMLOCK in bytes at the time of the failure.
        limit_bytes: u64,
    },
    /// `mlock` failed for a reason other than the resource limit.
    #[error("cannot pin registered memory: {0}")]
    Pin(#[source] io::Error),
    /// Creating the anonymous mapping failed.
    #[error("cannot map anonymous memory: {0}")]
    Map(#[source] io::Error),
    /// The block was revoked ([`MemBlock::revoke`]): its region was deregistered or given
    /// another translation, and the memory may be gone.
    #[error("the memory was deregistered (the block is revoked)")]
    Revoked,
    /// An address of an implicit region ([`MemBlock::implicit`]) that the process has not
    /// mapped (or not for this access).
    #[error("{len} bytes at {addr:#x} are not mapped (or not for this access) in the process")]
    Unmapped {
        /// First address.
        addr: u64,
        /// Bytes.
        len: usize,
    },
    /// What an implicit region does not do: an atomic (its 8 bytes would be reached by a
    /// plain access, which an unmapped address would fault), or a view for a zero-copy send.
    #[error("{what} is not done on an implicit region")]
    NotOnImplicit {
        /// The operation.
        what: &'static str,
    },
}

/// Formats a byte count for the RLIMIT_MEMLOCK message.
struct ByteLimit<'a>(&'a u64);

impl fmt::Display for ByteLimit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = *self.0;
        if bytes >= 1024 && bytes % 1024 == 0 {
            write!(f, "{bytes} bytes ({} KiB)", bytes / 1024)
        } else {
            write!(f, "{bytes} bytes")
        }
    }
}

/// Where a block's bytes come from.
enum Backing {
    /// Our own anonymous mapping, unmapped when the block is dropped.
    Owned(MmapRaw),
    /// Application memory registered through [`MemBlock::from_raw`].
    Foreign,
    /// A zero-length owned block: nothing is mapped.
    Empty,
    /// The whole address space of the process (an implicit on-demand region): reached only
    /// through `process_vm_readv`/`process_vm_writev` on the process itself, which report
    /// an unmapped address (EFAULT) where a plain access would fault.
    Implicit,
}

/// A contiguous range of bytes the NIC reads and writes.
///
/// Shared between the application thread and the progress thread as `Arc<MemBlock>`. All
/// accesses are bounds-checked against [`MemBlock::len`]; offsets are relative to
/// [`MemBlock::addr`].
pub struct MemBlock {
    /// Base of the range; null for an empty owned block.
    ptr: *mut u8,
    len: usize,
    backing: Backing,
    /// Whether `pin` has locked the pages (unlocked again on drop).
    pinned: Mutex<bool>,
    /// Set by [`revoke`](Self::revoke): every later access fails.
    revoked: AtomicBool,
}

// SAFETY: a MemBlock is a base pointer, a length and an owner of the mapping. It hands out no
// mutable references into its memory (and shared ones only to the transport's zero-copy
// send, `bytes`): every other access is a raw-pointer copy or an atomic, valid from any
// thread because the memory is either our own mapping (alive as long as the block) or foreign
// memory whose validity for the block's whole lifetime, on any thread, is the `from_raw` contract.
// The only interior state, the pinned flag, is behind a Mutex.
unsafe impl Send for MemBlock {}
// SAFETY: see `Send` above; every `&self` method is safe to call concurrently (the data race
// caveat for overlapping concurrent copies is documented on the module, as it is for DMA).
unsafe impl Sync for MemBlock {}

impl MemBlock {
    /// Allocates a zero-filled block of `len` bytes as an anonymous private mapping.
    ///
    /// `len == 0` gives a block that maps nothing; its [`addr`](Self::addr) is 0.
    pub fn new(len: usize) -> Result<MemBlock, MemError> {
        if len == 0 {
            return Ok(MemBlock {
                ptr: ptr::null_mut(),
                len: 0,
                backing: Backing::Empty,
                pinned: Mutex::new(false),
                revoked: AtomicBool::new(false),
            });
        }
        let map = MmapRaw::from(MmapMut::map_anon(len).map_err(MemError::Map)?);
        Ok(MemBlock {
            ptr: map.as_mut_ptr(),
            len,
            backing: Backing::Owned(map),
            pinned: Mutex::new(false),
            revoked: AtomicBool::new(false),
        })
    }

    /// Describes `len` bytes of caller memory at `ptr`, which the NIC will read and write.
    ///
    /// The block does not own the memory and never frees it.
    ///
    /// # Safety
    ///
    /// If `len > 0`:
    /// - `ptr` is non-null and `ptr .. ptr + len` lies inside one live allocation or mapping that
    ///   is valid for reads and writes from any thread;
    /// - that memory stays valid (not freed, unmapped, or made read-only) until this block and
    ///   everything holding it (every clone of the `Arc` it is put in, every
    ///   [`MrSlice`](crate::mr::MrSlice)) has been dropped, or until the block has been
    ///   [revoked](Self::revoke) and every access begun before that has ended (what
    ///   `Device::dereg_mr` waits for);
    /// - the caller accepts that the NIC writes this memory from another thread at any time
    ///   while work that targets it is outstanding. While the block is alive the caller holds no
    ///   `&mut` to any of these bytes, and no `&` to bytes the NIC may write while it may write
    ///   them (from posting the work request until its completion has been polled). The caller
    ///   reaches such bytes only through raw pointers or after the completion.
    ///
    /// If `len == 0`, `ptr` is only reported by [`addr`](Self::addr) and never dereferenced.
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> MemBlock {
        MemBlock { ptr, len, backing: Backing::Foreign, pinned: Mutex::new(false), revoked: AtomicBool::new(false) }
    }

    /// Ends every later access to the block: each fails with [`MemError::Revoked`], and
    /// a view is refused. What deregistering a region does to the memory under work
    /// requests posted earlier (which hold the block): a hardware NIC looks the key up
    /// again when it executes them and finds it gone (rxe: `lookup_mr` fails, the WQE
    /// completes in error); here the block they hold says so.
    ///
    /// An access that began before this call may still be running when it returns: the
    /// owner of the accesses waits for those (the device runs them all under one lock
    /// and takes it after revoking, `Device::dereg_mr`) before the memory may be freed.
    pub fn revoke(&self) {
        self.revoked.store(true, Ordering::Release);
    }

    /// Whether [`revoke`](Self::revoke) was called.
    pub fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }

    /// The first byte, as a pointer (null for an empty owned block): for a view of part
    /// of the block made with [`from_raw`](Self::from_raw), whose contract the caller then
    /// upholds (the block outlives the view's use).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The whole address space of the process as one block (an implicit on-demand region,
    /// `ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND)`): offsets are addresses. Safe,
    /// because every access goes through the kernel (`process_vm_readv`/`_writev` on the
    /// process itself), which refuses an unmapped address instead of faulting; atomics and
    /// zero-copy views are refused ([`MemError::NotOnImplicit`]).
    pub fn implicit() -> MemBlock {
        MemBlock {
            ptr: ptr::null_mut(),
            len: usize::MAX,
            backing: Backing::Implicit,
            pinned: Mutex::new(false),
            revoked: AtomicBool::new(false),
        }
    }

    /// Whether it is the implicit block ([`implicit`](Self::implicit)).
    pub fn is_implicit(&self) -> bool {
        matches!(self.backing, Backing::Implicit)
    }

    /// Reads (`write == false`: into `buf` from `addr`) or writes (from `buf` to `addr`) the
    /// process's own memory through the kernel: an unmapped or read-only address is an
    /// error, never a fault.
    fn checked_copy(addr: usize, buf: *mut u8, len: usize, write: bool) -> Result<(), MemError> {
        let local = libc::iovec { iov_base: buf.cast(), iov_len: len };
        let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: len };
        // SAFETY: `local` describes `len` bytes of a buffer the caller lends (readable, and
        // writable when the kernel writes it); `remote` is only an address the kernel checks
        // against this process's mappings (it copies nothing where it is not mapped for the
        // access and returns a short count or EFAULT); pid is our own.
        let n = unsafe {
            let pid = libc::getpid();
            if write {
                libc::process_vm_writev(pid, &local, 1, &remote, 1, 0)
            } else {
                libc::process_vm_readv(pid, &local, 1, &remote, 1, 0)
            }
        };
        if usize::try_from(n).ok() == Some(len) {
            Ok(())
        } else {
            Err(MemError::Unmapped { addr: to_u64(addr), len })
        }
    }

    /// Virtual address of the first byte (what the application would use as a pointer).
    pub fn addr(&self) -> u64 {
        to_u64(self.ptr as usize)
    }

    /// Length of the block in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the block has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether [`pin`](Self::pin) has locked the block's pages.
    pub fn is_pinned(&self) -> bool {
        *self.pinned.lock()
    }

    /// Checks `offset .. offset + len` against the block and returns a pointer to `offset`.
    fn span(&self, offset: usize, len: usize) -> Result<*mut u8, MemError> {
        if self.is_revoked() {
            return Err(MemError::Revoked);
        }
        match offset.checked_add(len) {
            // wrapping_add cannot wrap here: offset <= self.len, inside (or one past) the range.
            Some(end) if end <= self.len => Ok(self.ptr.wrapping_add(offset)),
            _ => Err(MemError::OutOfBounds { offset, len, block_len: self.len }),
        }
    }

    /// Copies `dst.len()` bytes starting at `offset` out of the block.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), MemError> {
        let src = self.span(offset, dst.len())?;
        if self.is_implicit() && !dst.is_empty() {
            return MemBlock::checked_copy(src as usize, dst.as_mut_ptr(), dst.len(), false);
        }
        if dst.is_empty() {
            // The block's pointer may be null (empty block); copy needs non-null even for 0.
            return Ok(());
        }
        // SAFETY: `src .. src + dst.len()` is inside the block (span), which is valid for reads
        // (owned mapping alive as long as `self`, or the from_raw contract). `dst` is a separate
        // exclusive borrow: the block never hands out mutable references, and the from_raw contract
        // forbids a `&mut` into the block while it is alive, so the ranges do not overlap.
        unsafe { ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// A view of the bytes `offset .. offset + len`, for the transport to checksum and
    /// hand to the kernel without copying them first (zero-copy send).
    ///
    /// The view holds a raw pointer, never a `&[u8]`: the application may write these
    /// bytes meanwhile (`write`, or its own pointer), as it may write a buffer a NIC is
    /// reading by DMA. Reading through the view copies ([`Shared::copy_to`],
    /// [`Shared::chunks`]) or hands the kernel the address ([`Shared::as_ptr`]). What the
    /// application writes into a buffer under an outstanding send is undefined in verbs
    /// as on hardware; here such a write can make the kernel send other bytes than the
    /// ICRC covered, and the receiver drops the packet as corrupt (RC retransmits it).
    pub(crate) fn view(&self, offset: usize, len: usize) -> Result<Shared<'_>, MemError> {
        if self.is_implicit() {
            return Err(MemError::NotOnImplicit { what: "a zero-copy view" });
        }
        let ptr = self.span(offset, len)?;
        Ok(Shared { ptr: ptr.cast_const(), len, _block: std::marker::PhantomData })
    }

    /// Copies `src` into the block starting at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), MemError> {
        let dst = self.span(offset, src.len())?;
        if self.is_implicit() && !src.is_empty() {
            // The kernel only reads `src` for a write.
            return MemBlock::checked_copy(dst as usize, src.as_ptr().cast_mut(), src.len(), true);
        }
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: `dst .. dst + src.len()` is inside the block (span), which is valid for writes
        // (owned mapping, or the from_raw contract). `src` cannot overlap it: the block hands out
        // no references, and the from_raw contract forbids a `&` to bytes the NIC may write.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        Ok(())
    }

    /// Copies `len` bytes from `self[offset..]` to `dst[dst_offset..]`.
    ///
    /// `dst` may be `self` (or another block over the same memory) and the ranges may overlap:
    /// the copy behaves like `memmove`. Nothing is copied unless both ranges are in bounds.
    pub fn copy_to(&self, offset: usize, dst: &MemBlock, dst_offset: usize, len: usize) -> Result<(), MemError> {
        if self.is_implicit() || dst.is_implicit() {
            // Through a buffer: each side's access checked as its block requires.
            dst.span(dst_offset, len)?;
            let mut tmp = vec![0u8; len];
            self.read(offset, &mut tmp)?;
            return dst.write(dst_offset, &tmp);
        }
        let from = self.span(offset, len)?;
        let to = dst.span(dst_offset, len)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges were bounds-checked against their blocks, which are valid for
        // reads (self) and writes (dst). `ptr::copy` allows the ranges to overlap.
        unsafe { ptr::copy(from, to, len) };
        Ok(())
    }

    /// Sets `len` bytes starting at `offset` to `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), MemError> {
        if self.is_implicit() {
            self.span(offset, len)?;
            return self.write(offset, &vec![byte; len]);
        }
        let dst = self.span(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: `dst .. dst + len` is inside the block (span), which is valid for writes.
        unsafe { ptr::write_bytes(dst, byte, len) };
        Ok(())
    }

    /// The 8 bytes at `offset` as an atomic, after checking bounds and absolute alignment.
    fn atomic_at(&self, offset: usize) -> Result<&AtomicU64, MemError> {
        if self.is_implicit() {
            return Err(MemError::NotOnImplicit { what: "an atomic" });
        }
        let p = self.span(offset, ATOMIC_SIZE)?;
        let addr = to_u64(p as usize);
        // IBA requires the VA of an atomic operand to be 8-byte aligned (the responder checks
        // that). Here it is the real address that matters: AtomicU64 needs it.
        if addr % to_u64(ATOMIC_SIZE) != 0 {
            return Err(MemError::Misaligned { addr });
        }
        // SAFETY: `p .. p + 8` is inside the block (span) and 8-byte aligned (checked above,
        // and align_of::<AtomicU64>() == 8 by the const assertion). The memory is valid for
        // reads and writes for as long as `&self` (owned mapping, or the from_raw contract),
        // which bounds the returned lifetime. The NIC's own accesses to the 8 bytes of an atomic
        // operand are all atomic (the engine runs RDMA atomics through these methods only);
        // concurrent plain accesses by the application are the from_raw contract's caveat,
        // exactly as for a hardware NIC.
        Ok(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }

    /// RDMA COMPARE & SWAP on the 8 bytes at `offset`: if they equal `compare`, store `swap`.
    ///
    /// Returns the original value. Values are in host byte order (the caller converts from and
    /// to the wire's big-endian). `offset` must be 8-byte aligned in absolute address terms.
    pub fn atomic_compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, MemError> {
        let a = self.atomic_at(offset)?;
        Ok(match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(v) | Err(v) => v,
        })
    }

    /// RDMA FETCH & ADD on the 8 bytes at `offset` (wrapping). Returns the original value.
    ///
    /// Host byte order; `offset` must be 8-byte aligned in absolute address terms.
    pub fn atomic_fetch_add(&self, offset: usize, add: u64) -> Result<u64, MemError> {
        Ok(self.atomic_at(offset)?.fetch_add(add, Ordering::SeqCst))
    }

    /// Atomically stores `value` (host byte order) into the 8 bytes at `offset`.
    ///
    /// `offset` must be 8-byte aligned in absolute address terms.
    pub fn atomic_write(&self, offset: usize, value: u64) -> Result<(), MemError> {
        self.atomic_at(offset)?.store(value, Ordering::SeqCst);
        Ok(())
    }

    /// Locks the block's pages into RAM (`mlock`) so that they are never swapped out.
    ///
    /// Idempotent. The pages are unlocked when the block is dropped. Linux memory locks do not
    /// nest: unlocking also unlocks a page that the application (or another block sharing the
    /// page) locked itself.
    ///
    /// Fails with [`MemError::MemlockLimit`] when RLIMIT_MEMLOCK is too small.
    pub fn pin(&self) -> Result<(), MemError> {
        let mut pinned = self.pinned.lock();
        if *pinned || self.len == 0 {
            return Ok(());
        }
        let Some((head, rounded)) = self.page_span() else {
            return Err(MemError::Pin(io::Error::from(io::ErrorKind::InvalidInput)));
        };
        let locked = match &self.backing {
            Backing::Owned(map) => map.lock(),
            Backing::Foreign => {
                // SAFETY: mlock only changes the residency of the pages covering the block;
                // they are mapped (from_raw contract), and `head` steps back inside the first
                // page, so the range is exactly those pages.
                let rc = unsafe { libc::mlock(self.ptr.wrapping_sub(head).cast(), rounded) };
                if rc == 0 {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                }
            }
            // Nothing to lock: the whole address space is never pinned.
            Backing::Empty | Backing::Implicit => Ok(()),
        };
        locked.map_err(|e| pin_error(e, rounded, memlock_limit()))?;
        *pinned = true;
        Ok(())
    }

    /// Unlocks the block's pages if [`pin`](Self::pin) locked them: what deregistering a
    /// region does to its memory (`rnic perf reg` times the pair). Idempotent.
    pub fn unpin(&self) {
        let mut pinned = self.pinned.lock();
        if *pinned {
            self.unpin_pages();
            *pinned = false;
        }
    }

    /// Offset of the block inside its first page, and its length rounded out to whole pages.
    fn page_span(&self) -> Option<(usize, usize)> {
        let page = page_size();
        let head = (self.ptr as usize) % page;
        let rounded = head.checked_add(self.len)?.checked_next_multiple_of(page)?;
        Some((head, rounded))
    }

    fn unpin_pages(&self) {
        match &self.backing {
            Backing::Owned(map) => {
                let _ = map.unlock();
            }
            Backing::Foreign => {
                if let Some((head, rounded)) = self.page_span() {
                    // SAFETY: the same page range `pin` locked; the memory is still mapped
                    // (from_raw contract: valid until the block is dropped).
                    let _ = unsafe { libc::munlock(self.ptr.wrapping_sub(head).cast(), rounded) };
                }
            }
            Backing::Empty | Backing::Implicit => {}
        }
    }
}

impl Drop for MemBlock {
    fn drop(&mut self) {
        if *self.pinned.get_mut() {
            self.unpin_pages();
        }
        // An owned mapping is unmapped when `backing` drops, after this.
    }
}

impl fmt::Debug for MemBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let origin = match self.backing {
            Backing::Owned(_) => "owned",
            Backing::Foreign => "foreign",
            Backing::Empty => "empty",
            Backing::Implicit => "implicit",
        };
        f.debug_struct("MemBlock")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("origin", &origin)
            .field("pinned", &self.is_pinned())
            .finish()
    }
}

/// The system page size (4096 if it cannot be read).
fn page_size() -> usize {
    // SAFETY: sysconf reads a configuration value and has no memory-safety preconditions.
    let raw = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(raw).ok().filter(|p| p.is_power_of_two()).unwrap_or(4096)
}

/// The soft RLIMIT_MEMLOCK in bytes, or `None` when it is unlimited or cannot be read.
pub fn memlock_limit() -> Option<u64> {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit only writes the struct it is given, a valid exclusive borrow.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) };
    if rc != 0 || rl.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(rl.rlim_cur)
}

/// Maps an `mlock` failure to a [`MemError`]. Linux `mlock(2)`: ENOMEM when the locked total
/// would exceed RLIMIT_MEMLOCK for an unprivileged process, EPERM when the limit is 0. With no
/// finite limit, ENOMEM means something else (an unmapped range), so it stays an I/O error.
fn pin_error(err: io::Error, requested: usize, limit_bytes: Option<u64>) -> MemError {
    match (err.raw_os_error(), limit_bytes) {
        (Some(libc::ENOMEM | libc::EPERM), Some(limit_bytes)) => MemError::MemlockLimit { requested, limit_bytes },
        _ => MemError::Pin(err),
    }
}

/// Bytes inside a [`MemBlock`] that others may write while the view exists, reached
/// through a raw pointer only (see [`MemBlock::view`]). Valid while the block is borrowed.
#[derive(Clone, Copy)]
pub(crate) struct Shared<'a> {
    ptr: *const u8,
    len: usize,
    _block: std::marker::PhantomData<&'a MemBlock>,
}

impl fmt::Debug for Shared<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared").field("len", &self.len).finish()
    }
}

impl<'a> Shared<'a> {
    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// An iovec over the bytes, for a send the kernel copies from.
    pub(crate) fn io_vec(self) -> rnic_io::IoVec<'a> {
        // SAFETY: `ptr .. ptr + len` was bounds-checked against the block (`view`), which
        // stays allocated for 'a; writers meanwhile are allowed (the kernel only copies).
        unsafe { rnic_io::IoVec::from_raw_parts(self.ptr, self.len) }
    }

    /// Appends the bytes to `out` and continues `crc` over them, reading each byte of
    /// the block once (a concurrent writer leaves unspecified bytes in `out`, and the CRC
    /// is that of those bytes).
    pub(crate) fn append_with_crc(&self, out: &mut Vec<u8>, crc: &mut rnic_wire::icrc::IcrcStream) {
        out.reserve(self.len);
        let start = out.len();
        // SAFETY: `ptr .. ptr + len` was bounds-checked against the block (`view`), which
        // outlives 'a: valid for reads. `out` has room for `len` more bytes (reserved) and
        // is an exclusive borrow of other memory. `copy_crc` writes all `len` of them, so
        // the new length covers initialised bytes only.
        crc.continue_with(|s| unsafe { crate::crc_copy::copy_crc(s, self.ptr, out.as_mut_ptr().add(start), self.len) });
        unsafe { out.set_len(start + self.len) };
    }

    /// Copies the bytes into `dst[..self.len()]` (`dst` at least that long; a shorter
    /// `dst` takes its length's worth).
    pub(crate) fn copy_to(&self, dst: &mut [u8]) {
        let n = self.len.min(dst.len());
        if n == 0 {
            return;
        }
        // SAFETY: `ptr .. ptr + len` was bounds-checked against the block (`view`) and the
        // block outlives `'a`, so it is valid for reads; `dst` is an exclusive borrow of
        // other memory (the block lends no references). A concurrent writer leaves
        // unspecified bytes in `dst`, as DMA would, never anything outside it.
        unsafe { ptr::copy_nonoverlapping(self.ptr, dst.as_mut_ptr(), n) };
    }

    /// Appends the bytes to `v`.
    pub(crate) fn extend_vec(&self, v: &mut Vec<u8>) {
        let at = v.len();
        v.resize(at + self.len, 0);
        self.copy_to(&mut v[at..]);
    }

    /// Feeds the bytes to `f` in order, copied a chunk at a time (4 KiB) through a stack
    /// buffer: for a checksum over memory that must not be lent as a slice.
    pub(crate) fn chunks(&self, mut f: impl FnMut(&[u8])) {
        const CHUNK: usize = 4096;
        // Not zeroed first: a 4 KiB memset cost as much as the copy (criterion, icrc group).
        let mut scratch = [std::mem::MaybeUninit::<u8>::uninit(); CHUNK];
        let mut done = 0;
        while done < self.len {
            let n = (self.len - done).min(CHUNK);
            // SAFETY: `ptr + done .. ptr + done + n` is inside the view (bounds-checked by
            // `view`, the block outlives 'a), valid for reads; `scratch` is this frame's
            // own buffer of CHUNK >= n bytes, so the ranges do not overlap. After the
            // copy its first n bytes are initialized, which is what the slice covers.
            let chunk = unsafe {
                ptr::copy_nonoverlapping(self.ptr.add(done), scratch.as_mut_ptr().cast::<u8>(), n);
                std::slice::from_raw_parts(scratch.as_ptr().cast::<u8>(), n)
            };
            f(chunk);
            done += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view reads what the block holds, by copy, whole or in chunks, and is refused
    /// past the block's end.
    #[test]
    fn a_shared_view_copies_what_the_block_holds() {
        let b = MemBlock::new(4096).unwrap();
        let bytes: Vec<u8> = (0..4096u32).map(|i| (i * 31 + 1).to_le_bytes()[0]).collect();
        b.write(0, &bytes).unwrap();
        let v = b.view(100, 3000).unwrap();
        assert_eq!(v.len(), 3000);
        let mut out = vec![9u8; 5];
        v.extend_vec(&mut out);
        assert_eq!((&out[..5], &out[5..]), (&[9u8; 5][..], &bytes[100..3100]));
        let mut seen = Vec::new();
        let mut sizes = Vec::new();
        let v = b.view(100, 3996).unwrap();
        v.chunks(|c| {
            sizes.push(c.len());
            seen.extend_from_slice(c);
        });
        assert_eq!((seen.as_slice(), sizes), (&bytes[100..], vec![3996]));
        let big = MemBlock::new(10_000).unwrap();
        let pattern: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        big.write(0, &pattern).unwrap();
        let mut seen = Vec::new();
        let mut sizes = Vec::new();
        big.view(1, 9999).unwrap().chunks(|c| {
            sizes.push(c.len());
            seen.extend_from_slice(c);
        });
        assert_eq!((seen.as_slice(), sizes), (&pattern[1..], vec![4096, 4096, 1807]));
        assert!(b.view(4000, 97).is_err());
        assert_eq!(b.view(4096, 0).unwrap().len(), 0);
    }
    use std::sync::Arc;

    const GUARD: u8 = 0xa5;

    fn block(len: usize) -> MemBlock {
        MemBlock::new(len).expect("anonymous mapping")
    }

    fn contents(b: &MemBlock) -> Vec<u8> {
        let mut v = vec![0; b.len()];
        b.read(0, &mut v).unwrap();
        v
    }

    #[test]
    fn block_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<MemBlock>();
        assert_send_sync::<Arc<MemBlock>>();
    }

    #[test]
    fn new_block_is_zeroed_and_page_aligned() {
        let b = block(5000);
        assert_eq!(b.len(), 5000);
        assert!(!b.is_empty());
        assert_eq!(b.addr() % to_u64(page_size()), 0);
        assert!(contents(&b).iter().all(|&x| x == 0));
    }

    #[test]
    fn write_then_read_round_trips() {
        let b = block(64);
        b.write(10, b"hello").unwrap();
        let mut out = [0u8; 7];
        b.read(9, &mut out).unwrap();
        assert_eq!(&out, b"\0hello\0");
        // The last byte and an empty access at the very end are in bounds.
        b.write(63, &[7]).unwrap();
        b.read(64, &mut []).unwrap();
        b.write(64, &[]).unwrap();
        let mut last = [0u8];
        b.read(63, &mut last).unwrap();
        assert_eq!(last, [7]);
    }

    #[test]
    fn out_of_bounds_accesses_are_refused_and_touch_nothing() {
        let b = block(64);
        b.fill(0, 64, GUARD).unwrap();
        let cases: &[(usize, usize)] =
            &[(60, 5), (64, 1), (65, 0), (usize::MAX, 1), (1, usize::MAX), (usize::MAX, usize::MAX)];
        for &(offset, len) in cases {
            let expected = |e: MemError| {
                assert!(
                    matches!(e, MemError::OutOfBounds { offset: o, len: l, block_len: 64 }
                        if o == offset && l == len),
                    "{offset} {len}: {e:?}"
                );
            };
            expected(b.fill(offset, len, 0).unwrap_err());
            if len <= 16 {
                let mut buf = vec![0; len];
                expected(b.read(offset, &mut buf).unwrap_err());
                expected(b.write(offset, &buf).unwrap_err());
            }
            expected(b.copy_to(offset, &b, 0, len).unwrap_err());
            // The source range is checked first; either way nothing is copied.
            assert!(matches!(b.copy_to(0, &b, offset, len), Err(MemError::OutOfBounds { .. })));
        }
        assert!(contents(&b).iter().all(|&x| x == GUARD));
    }

    #[test]
    fn empty_block_maps_nothing() {
        let b = block(0);
        assert_eq!((b.addr(), b.len(), b.is_empty()), (0, 0, true));
        b.read(0, &mut []).unwrap();
        b.write(0, &[]).unwrap();
        b.fill(0, 0, 1).unwrap();
        b.copy_to(0, &b, 0, 0).unwrap();
        assert!(matches!(b.write(0, &[1]), Err(MemError::OutOfBounds { .. })));
        assert!(matches!(b.read(1, &mut []), Err(MemError::OutOfBounds { .. })));
        assert!(matches!(b.atomic_fetch_add(0, 1), Err(MemError::OutOfBounds { .. })));
        b.pin().unwrap();
        assert_eq!(format!("{b:?}"), "MemBlock { addr: 0x0, len: 0, origin: \"empty\", pinned: false }");
    }

    #[test]
    fn fill_sets_exactly_the_range() {
        let b = block(16);
        b.fill(3, 4, 0xee).unwrap();
        let mut expect = [0u8; 16];
        expect[3..7].fill(0xee);
        assert_eq!(contents(&b), expect);
    }

    #[test]
    fn copy_to_behaves_like_memmove() {
        let pattern: Vec<u8> = (0..32).collect();
        // Forward overlap: dst after src.
        let b = block(32);
        b.write(0, &pattern).unwrap();
        b.copy_to(0, &b, 4, 16).unwrap();
        let mut expect = pattern.clone();
        expect.copy_within(0..16, 4);
        assert_eq!(contents(&b), expect);
        // Backward overlap: dst before src.
        b.write(0, &pattern).unwrap();
        b.copy_to(4, &b, 0, 16).unwrap();
        let mut expect = pattern.clone();
        expect.copy_within(4..20, 0);
        assert_eq!(contents(&b), expect);
        // Between blocks.
        let other = block(8);
        b.write(0, &pattern).unwrap();
        b.copy_to(30, &other, 6, 2).unwrap();
        assert_eq!(contents(&other), [0, 0, 0, 0, 0, 0, 30, 31]);
    }

    #[test]
    fn atomics_golden() {
        let b = block(32);
        b.write(8, &5u64.to_ne_bytes()).unwrap();
        // Compare & swap: mismatch leaves memory alone, match swaps; both return the original.
        assert_eq!(b.atomic_compare_swap(8, 4, 9).unwrap(), 5);
        assert_eq!(b.atomic_compare_swap(8, 5, 9).unwrap(), 5);
        // Fetch & add wraps.
        assert_eq!(b.atomic_fetch_add(8, u64::MAX).unwrap(), 9);
        assert_eq!(b.atomic_fetch_add(8, 0).unwrap(), 8);
        // Host byte order in memory; neighbours untouched.
        b.atomic_write(16, 0x0102_0304_0506_0708).unwrap();
        let mut raw = [0u8; 24];
        b.read(0, &mut raw).unwrap();
        assert_eq!(raw[..8], [0; 8]);
        assert_eq!(raw[8..16], 8u64.to_ne_bytes());
        assert_eq!(raw[16..], 0x0102_0304_0506_0708u64.to_ne_bytes());
        // Last aligned word is in bounds; one past is not.
        b.atomic_write(24, 1).unwrap();
        assert!(matches!(b.atomic_write(32, 1), Err(MemError::OutOfBounds { .. })));
    }

    #[test]
    fn atomics_refuse_misaligned_and_out_of_bounds() {
        let b = block(32);
        for offset in [1, 4, 7, 12] {
            let addr = b.addr() + to_u64(offset);
            assert!(matches!(
                b.atomic_fetch_add(offset, 1),
                Err(MemError::Misaligned { addr: a }) if a == addr
            ));
            assert!(matches!(b.atomic_compare_swap(offset, 0, 1), Err(MemError::Misaligned { .. })));
            assert!(matches!(b.atomic_write(offset, 1), Err(MemError::Misaligned { .. })));
        }
        // Bounds are checked before alignment.
        assert!(matches!(b.atomic_fetch_add(28, 1), Err(MemError::OutOfBounds { .. })));
        assert!(matches!(b.atomic_fetch_add(usize::MAX, 1), Err(MemError::OutOfBounds { .. })));
        assert!(contents(&b).iter().all(|&x| x == 0));
    }

    #[test]
    fn fetch_add_is_atomic_across_threads() {
        let b = Arc::new(block(8));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let b = Arc::clone(&b);
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        b.atomic_fetch_add(0, 1).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(b.atomic_fetch_add(0, 0).unwrap(), 40_000);
    }

    #[test]
    fn foreign_memory_is_read_and_written_in_place() {
        let mut backing = vec![0u64; 4];
        let base = backing.as_mut_ptr().cast::<u8>();
        {
            // SAFETY: `backing` outlives the block, and no reference to it is used until the
            // block is dropped at the end of this scope.
            let b = unsafe { MemBlock::from_raw(base, 32) };
            assert_eq!(b.addr(), to_u64(base as usize));
            b.write(0, &[1, 2, 3]).unwrap();
            b.atomic_write(8, 42).unwrap();
            assert_eq!(b.atomic_fetch_add(8, 1).unwrap(), 42);
            assert!(format!("{b:?}").contains("foreign"));
        }
        assert_eq!(backing[0].to_ne_bytes()[..3], [1, 2, 3]);
        assert_eq!(backing[1], 43);
    }

    #[test]
    fn atomic_alignment_is_absolute_not_relative() {
        let mut backing = vec![0u64; 4];
        // A block starting one byte into an aligned buffer: offset 7 is the aligned one.
        let base = backing.as_mut_ptr().cast::<u8>().wrapping_add(1);
        {
            // SAFETY: 31 bytes inside `backing`, which outlives the block; no references to
            // `backing` are used while the block is alive.
            let b = unsafe { MemBlock::from_raw(base, 31) };
            assert!(matches!(b.atomic_write(0, 1), Err(MemError::Misaligned { .. })));
            b.atomic_write(7, 0xdead_beef).unwrap();
            assert!(matches!(b.atomic_write(31, 1), Err(MemError::OutOfBounds { .. })));
        }
        assert_eq!(backing[1], 0xdead_beef);
    }

    #[test]
    fn a_revoked_block_refuses_every_access() {
        let b = block(64);
        b.write(0, &[7; 8]).unwrap();
        assert!(!b.is_revoked());
        b.revoke();
        assert!(b.is_revoked());
        let mut d = [0u8; 8];
        assert!(matches!(b.read(0, &mut d), Err(MemError::Revoked)));
        assert!(matches!(b.write(0, &[1]), Err(MemError::Revoked)));
        assert!(matches!(b.fill(0, 8, 0), Err(MemError::Revoked)));
        assert!(matches!(b.atomic_fetch_add(0, 1), Err(MemError::Revoked)));
        assert!(matches!(b.atomic_compare_swap(0, 0, 1), Err(MemError::Revoked)));
        assert!(b.view(0, 8).is_err());
        let other = block(64);
        assert!(matches!(b.copy_to(0, &other, 0, 8), Err(MemError::Revoked)));
        assert!(matches!(other.copy_to(0, &b, 0, 8), Err(MemError::Revoked)));
        assert_eq!(d, [0; 8], "nothing was read");
    }

    #[test]
    fn the_implicit_block_reaches_mapped_memory_and_refuses_the_rest_without_faulting() {
        let b = MemBlock::implicit();
        let mut target = vec![0u8; 64];
        let at = target.as_mut_ptr() as usize;
        b.write(at + 8, b"implicit").unwrap();
        let mut got = [0u8; 8];
        b.read(at + 8, &mut got).unwrap();
        assert_eq!(&got, b"implicit");
        b.fill(at, 4, 0x77).unwrap();
        let other = block(64);
        b.copy_to(at, &other, 0, 16).unwrap();
        let mut back = [0u8; 16];
        other.read(0, &mut back).unwrap();
        assert_eq!(&back[..4], &[0x77; 4]);
        assert_eq!(&back[8..16], b"implicit");
        assert_eq!(target[8..16], *b"implicit");
        // Address 0, and a page that is never mapped: errors, not a fault.
        assert!(matches!(b.read(0, &mut got), Err(MemError::Unmapped { addr: 0, len: 8 })));
        assert!(matches!(b.write(16, &got), Err(MemError::Unmapped { .. })));
        // Read-only memory (a string literal's page) refuses a write.
        let rodata = b"constant".as_ptr() as usize;
        assert!(b.read(rodata, &mut got).is_ok());
        assert!(matches!(b.write(rodata, b"changed!"), Err(MemError::Unmapped { .. })));
        assert!(matches!(b.atomic_fetch_add(at, 1), Err(MemError::NotOnImplicit { .. })));
        assert!(b.view(at, 8).is_err());
        b.revoke();
        assert!(matches!(b.read(at, &mut got), Err(MemError::Revoked)));
    }

    #[test]
    fn zero_length_foreign_block_never_dereferences() {
        // SAFETY: len 0: the pointer is never dereferenced, null is allowed.
        let b = unsafe { MemBlock::from_raw(ptr::null_mut(), 0) };
        b.read(0, &mut []).unwrap();
        b.pin().unwrap();
        assert!(matches!(b.write(0, &[0]), Err(MemError::OutOfBounds { .. })));
    }

    #[test]
    fn pin_owned_and_foreign_blocks() {
        // Small enough for the default RLIMIT_MEMLOCK of unprivileged users (64 KiB or 8 MiB).
        let b = block(4096);
        assert!(!b.is_pinned());
        b.pin().unwrap();
        assert!(b.is_pinned());
        b.pin().unwrap(); // idempotent
        drop(b); // unlocks, then unmaps

        let mut backing = vec![0u8; 3000];
        {
            // SAFETY: an unaligned sub-range of `backing`, which outlives the block and is not
            // referenced while the block is alive.
            let b = unsafe { MemBlock::from_raw(backing.as_mut_ptr().wrapping_add(100), 2000) };
            b.pin().unwrap();
            assert!(b.is_pinned());
            assert!(format!("{b:?}").contains("pinned: true"));
        }
        backing[0] = 1;
    }

    #[test]
    fn pin_error_mapping() {
        let limit = |errno| pin_error(io::Error::from_raw_os_error(errno), 8192, Some(65536));
        for errno in [libc::ENOMEM, libc::EPERM] {
            assert!(matches!(limit(errno), MemError::MemlockLimit { requested: 8192, limit_bytes: 65536 }));
        }
        assert!(matches!(limit(libc::EAGAIN), MemError::Pin(_)));
        // Unlimited (or unreadable) limit: ENOMEM is not about the limit.
        let unlimited = pin_error(io::Error::from_raw_os_error(libc::ENOMEM), 8192, None);
        assert!(matches!(unlimited, MemError::Pin(ref e) if e.raw_os_error() == Some(libc::ENOMEM)));
    }

    #[test]
    fn memlock_limit_message_tells_what_to_do() {
        let e = MemError::MemlockLimit { requested: 1 << 20, limit_bytes: 65536 };
        let msg = e.to_string();
        assert!(msg.contains("1048576 bytes"), "{msg}");
        assert!(msg.contains("RLIMIT_MEMLOCK is 65536 bytes (64 KiB)"), "{msg}");
        assert!(msg.contains("ulimit -l"), "{msg}");
        assert!(msg.contains("turn memory pinning off"), "{msg}");
        let zero = MemError::MemlockLimit { requested: 4096, limit_bytes: 0 };
        assert!(zero.to_string().contains("RLIMIT_MEMLOCK is 0 bytes and"));
    }

    const CHILD_ENV: &str = "RNIC_TEST_MEMLOCK_CHILD";
    const CHILD_SKIPPED: &str = "memlock-child: skipped";

    /// Runs `memlock_child` in a child process with RLIMIT_MEMLOCK lowered to `limit`, so the
    /// limit change cannot leak into other tests. Returns false when the child had to skip.
    fn run_memlock_child(limit: u64) -> bool {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args(["--exact", "mem::tests::memlock_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, limit.to_string())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
        assert!(stdout.contains("1 passed"), "child did not run the test:\n{stdout}");
        !stdout.contains(CHILD_SKIPPED)
    }

    #[test]
    fn pin_reports_memlock_limit_in_a_child_process() {
        for limit in [65536, 0] {
            if !run_memlock_child(limit) {
                eprintln!("note: cannot drop CAP_IPC_LOCK here; memlock child test skipped");
            }
        }
    }

    /// The child half of the test above; does nothing unless started by it.
    #[test]
    fn memlock_child() {
        let Some(limit) = std::env::var(CHILD_ENV).ok().and_then(|v| v.parse::<u64>().ok()) else {
            return;
        };
        let rl = libc::rlimit { rlim_cur: limit, rlim_max: limit };
        // SAFETY: setrlimit reads the struct it is given; lowering a limit is always allowed.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rl) }, 0);
        // CAP_IPC_LOCK ignores RLIMIT_MEMLOCK; root drops it by becoming `nobody`.
        // SAFETY: plain syscalls without memory arguments; glibc applies them to all threads.
        let dropped = unsafe { libc::geteuid() != 0 || (libc::setgid(65534) == 0 && libc::setuid(65534) == 0) };
        if !dropped {
            println!("{CHILD_SKIPPED}");
            return;
        }
        let len = 1 << 20;
        let b = block(len);
        match b.pin() {
            Err(MemError::MemlockLimit { requested, limit_bytes }) => {
                assert_eq!(requested, len);
                assert_eq!(limit_bytes, limit);
            }
            other => panic!("expected MemlockLimit, got {other:?}"),
        }
        assert!(!b.is_pinned());
        assert_eq!(memlock_limit(), Some(limit));
    }
}
