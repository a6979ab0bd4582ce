//! Memory windows (IBA 10.6.7.2; rxe `rxe_mw.c`): an R_Key that grants remote access to a
//! range of a memory region, bound and unbound without registering anything.
//!
//! A window lives in the MTPT's slot table beside the regions (its keys are made as theirs
//! are: `index << 8 | key8`). It is allocated unbound in a protection domain. Binding gives
//! it a range of a region that allows `MW_BIND`, rights, and a key: a type 1 window is
//! bound by `ibv_bind_mw` (and unbound by a zero-length bind), a type 2 window by a BIND_MW
//! work request of the QP it is then bound to (the consumer picks the key's low byte), and
//! unbound by LOCAL_INV or a SEND with Invalidate. A remote access through a window checks
//! the window (bound, its QP or PD, its rights and range), then uses the region's memory.
//! The region cannot be deregistered while a window is bound to it.

use super::{AccessError, AccessFlags, Entry, MrError, MrSlice, Mtpt, PdId, Table};

/// The type of a memory window (`enum ibv_mw_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Bound by `ibv_bind_mw`, in its protection domain; invalidated by a zero-length bind.
    One,
    /// Bound by a BIND_MW work request to the QP that posts it (type 2B); invalidated by
    /// LOCAL_INV or SEND with Invalidate.
    Two,
}

/// A window in the table.
pub(super) struct Window {
    pd: PdId,
    kind: MwType,
    bound: Option<Binding>,
}

/// What a bound window grants.
#[derive(Clone, Copy)]
struct Binding {
    /// The region's key.
    mr: u32,
    /// The window: `[iova, iova + len)` of the region's addresses.
    iova: u64,
    len: usize,
    access: AccessFlags,
    /// The QP it is bound to (type 2).
    qpn: u32,
}

/// What a bind asks for (`struct ibv_mw_bind_info`): `len` bytes of the region `mr_lkey`
/// from address `addr`, with the remote rights `access`. `len == 0` unbinds (type 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bind {
    /// The region's key.
    pub mr_lkey: u32,
    /// First address of the window, in the region's addresses.
    pub addr: u64,
    /// Bytes.
    pub len: usize,
    /// `REMOTE_READ`, `REMOTE_WRITE`, `REMOTE_ATOMIC`.
    pub access: AccessFlags,
}

/// Why a bind failed: it completes with `IBV_WC_MW_BIND_ERR` (rxe `rxe_check_bind_mw`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// The handle names no window.
    #[error("no memory window {handle:#x}")]
    NoWindow {
        /// The handle given.
        handle: u32,
    },
    /// The new key's index is not the window's (only the low byte is the consumer's).
    #[error("key {key:#x} is not one of window {handle:#x}'s (its index must stay)")]
    KeyIndex {
        /// The window.
        handle: u32,
        /// The key asked for.
        key: u32,
    },
    /// The window, the QP and the region must be in one protection domain.
    #[error("the window is in protection domain {window}, the QP in {qp}, the region in {region}")]
    Pd {
        /// The window's PD.
        window: PdId,
        /// The QP's PD.
        qp: PdId,
        /// The region's PD (the QP's where no region is named).
        region: PdId,
    },
    /// A type 2 window already bound (IBA o10-37.2.26: bind it once, invalidate, rebind).
    #[error("type 2 window {key:#x} is bound already: invalidate it first")]
    Bound {
        /// Its key.
        key: u32,
    },
    /// The region named does not exist or is invalidated.
    #[error("memory region {key:#x} is not a valid region")]
    BadRegion {
        /// The key given.
        key: u32,
    },
    /// The region was not registered with `MW_BIND`.
    #[error("memory region {key:#x} was not registered with MW_BIND access")]
    NoBindAccess {
        /// The region's key.
        key: u32,
    },
    /// The window reaches outside its region.
    #[error("{len} bytes at {addr:#x} are outside memory region {key:#x}")]
    OutOfRegion {
        /// The region's key.
        key: u32,
        /// First address asked for.
        addr: u64,
        /// Bytes asked for.
        len: usize,
    },
    /// Remote write or atomic rights through a window need a locally writable region
    /// (IBA 10.6.7.2.2, rxe `rxe_check_bind_mw`).
    #[error("rights {access} cannot be granted through a window of a region with {region}")]
    Rights {
        /// Rights asked for.
        access: AccessFlags,
        /// The region's.
        region: AccessFlags,
    },
    /// A zero-length type 2 bind (a type 2 window is unbound by invalidation).
    #[error("a type 2 window is bound to at least one byte (invalidate it to unbind)")]
    Empty,
}

impl Window {
    /// Whether it is bound (its key reaches memory).
    pub(super) fn is_bound(&self) -> bool {
        self.bound.is_some()
    }

    /// A remote access by QP `qpn` (where known) of `pd` through this window, key `key`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn check(
        &self,
        table: &Table,
        key: u32,
        pd: PdId,
        qpn: Option<u32>,
        va: u64,
        len: usize,
        need: AccessFlags,
    ) -> Result<MrSlice, AccessError> {
        let Some(b) = self.bound else { return Err(AccessError::Invalidated { key }) };
        match self.kind {
            // IBA 10.6.7.2.3 (type 2B): only the QP the window is bound to reaches it.
            MwType::Two if qpn != Some(b.qpn) => {
                return Err(AccessError::Window {
                    key,
                    why: "a type 2 window is reached only by the QP it is bound to",
                })
            }
            // IBA 10.6.7.2.1: a type 1 window is reached by QPs of its protection domain.
            MwType::One if self.pd != pd => return Err(AccessError::PdMismatch { key, pd, mr_pd: self.pd }),
            _ => {}
        }
        if !b.access.contains(need) {
            return Err(AccessError::AccessDenied { key, need, have: b.access });
        }
        let region = match table.slot(b.mr).map(|s| &s.entry) {
            Some(Entry::Valid(r)) => r,
            // The region was invalidated under the window: nothing is reached through it.
            _ => return Err(AccessError::Invalidated { key }),
        };
        region.slice(key, va, len, (b.iova, b.len))
    }
}

impl Mtpt {
    /// Allocates an unbound memory window of `kind` in `pd` (`ibv_alloc_mw`); returns its
    /// key, whose index (`key >> 8`) is its handle for [`bind_mw`](Self::bind_mw) and
    /// [`dealloc_mw`](Self::dealloc_mw).
    pub fn alloc_mw(&self, pd: PdId, kind: MwType) -> Result<u32, MrError> {
        self.table.write().alloc(Entry::Window(Window { pd, kind, bound: None }))
    }

    /// Deallocates window `handle` (`ibv_dealloc_mw`): its keys name nothing any more, and
    /// the region it was bound to may be deregistered again.
    pub fn dealloc_mw(&self, handle: u32) -> Result<(), MrError> {
        let mut table = self.table.write();
        let Some(Slot { entry: Entry::Window(w), .. }) = usize::try_from(handle).ok().and_then(|i| table.slots.get(i))
        else {
            return Err(MrError::UnknownKey { key: handle << 8 });
        };
        if let Some(b) = w.bound {
            unbind_region(&mut table, b.mr);
        }
        table.release(handle);
        Ok(())
    }

    /// Binds window `handle` by QP `qpn` of `pd`, giving it the key `new_key` (same index;
    /// the low byte chosen by the consumer, `ibv_inc_rkey` for type 1) and `bind` (a
    /// zero-length `bind` unbinds a type 1 window). Checked as IBA 10.6.7.2 and rxe's
    /// `rxe_check_bind_mw` check it; the rest of the table is left as it was on an error.
    /// Returns the window's key.
    pub fn bind_mw(&self, handle: u32, new_key: u32, qpn: u32, pd: PdId, bind: Bind) -> Result<u32, BindError> {
        let mut table = self.table.write();
        if new_key >> 8 != handle {
            return Err(BindError::KeyIndex { handle, key: new_key });
        }
        let Some(Slot { key8, entry: Entry::Window(w) }) =
            usize::try_from(handle).ok().and_then(|i| table.slots.get(i))
        else {
            return Err(BindError::NoWindow { handle });
        };
        let (kind, old, window_pd) = (w.kind, w.bound, w.pd);
        let key = handle << 8 | u32::from(*key8);
        if kind == MwType::Two && old.is_some() {
            return Err(BindError::Bound { key });
        }
        let unbinding = bind.len == 0;
        if unbinding && kind == MwType::Two {
            return Err(BindError::Empty);
        }
        let binding = if unbinding {
            // IBA 10.6.7.2.1: the window is the QP's PD's.
            if window_pd != pd {
                return Err(BindError::Pd { window: window_pd, qp: pd, region: pd });
            }
            None
        } else {
            let Some(Entry::Valid(r)) = table.slot(bind.mr_lkey).map(|s| &s.entry) else {
                return Err(BindError::BadRegion { key: bind.mr_lkey });
            };
            // IBA 10.6.7.2.1/2: the window, the QP and the region share one PD.
            if window_pd != pd || r.pd != pd {
                return Err(BindError::Pd { window: window_pd, qp: pd, region: r.pd });
            }
            if !r.access.contains(AccessFlags::MW_BIND) {
                return Err(BindError::NoBindAccess { key: bind.mr_lkey });
            }
            // Only remote rights mean anything for a window (rxe keeps the rest and uses
            // none of it: LOCAL_WRITE asked for a window is no error).
            let access =
                bind.access & (AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC);
            let writes = access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC);
            if writes && !r.access.contains(AccessFlags::LOCAL_WRITE) {
                return Err(BindError::Rights { access, region: r.access });
            }
            let (start, end) = (u128::from(bind.addr), u128::from(bind.addr) + bind.len as u128);
            if start < u128::from(r.iova) || end > u128::from(r.iova) + r.len as u128 {
                return Err(BindError::OutOfRegion { key: bind.mr_lkey, addr: bind.addr, len: bind.len });
            }
            Some(Binding { mr: bind.mr_lkey, iova: bind.addr, len: bind.len, access, qpn })
        };
        // Checked: now change the table.
        if let Some(o) = old {
            unbind_region(&mut table, o.mr);
        }
        if let Some(b) = binding {
            if let Some(Slot { entry: Entry::Valid(r), .. }) = table.slot_mut(b.mr) {
                r.windows += 1;
            }
        }
        let Some(slot) = usize::try_from(handle).ok().and_then(|i| table.slots.get_mut(i)) else {
            return Err(BindError::NoWindow { handle });
        };
        slot.key8 = (new_key & 0xff) as u8;
        if let Entry::Window(w) = &mut slot.entry {
            w.bound = binding;
        }
        Ok(new_key)
    }
}

use super::Slot;

/// One window fewer bound to region `mr`.
fn unbind_region(table: &mut Table, mr: u32) {
    if let Some(Slot { entry: Entry::Valid(r) | Entry::Invalid(r), .. }) = table.slot_mut(mr) {
        r.windows = r.windows.saturating_sub(1);
    }
}

/// LOCAL_INV or SEND with Invalidate of the window `key` by a QP of `pd`: a type 2 window
/// becomes unbound (its key stays, and reaches nothing: IBA 10.6.7.2.4); a type 1 window
/// cannot be invalidated so (IBA o10-37.2.26: only a zero-length bind does).
pub(super) fn invalidate(table: &mut Table, key: u32, pd: PdId) -> Result<(), AccessError> {
    let Some(Slot { entry: Entry::Window(w), .. }) = table.slot_mut(key) else {
        return Err(AccessError::BadKey { key });
    };
    if w.kind == MwType::One {
        return Err(AccessError::Window { key, why: "a type 1 window is invalidated by a zero-length bind only" });
    }
    if w.pd != pd {
        return Err(AccessError::PdMismatch { key, pd, mr_pd: w.pd });
    }
    let old = w.bound.take();
    if let Some(b) = old {
        unbind_region(table, b.mr);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Windows against a model written from IBA 10.6.7.2: any sequence of allocations,
    //! binds, invalidations, deallocations, region invalidations and remote accesses gives
    //! the table's answers the model's (success or refusal, and the bytes reached).
    use super::*;
    use crate::mem::MemBlock;
    use proptest::prelude::*;
    use std::sync::Arc;

    const REMOTE: [AccessFlags; 3] = [AccessFlags::REMOTE_READ, AccessFlags::REMOTE_WRITE, AccessFlags::REMOTE_ATOMIC];

    #[derive(Debug, Clone)]
    enum Op {
        Alloc { pd: u32, two: bool },
        Bind { win: usize, region: usize, off: u64, len: usize, rights: u8, qpn: u32, pd: u32, key8: u8 },
        Invalidate { win: usize, pd: u32 },
        Dealloc { win: usize },
        InvalidateRegion { region: usize },
        Access { win: usize, qpn: Option<u32>, pd: u32, off: u64, len: usize, need: u8 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..2u32, any::<bool>()).prop_map(|(pd, two)| Op::Alloc { pd, two }),
            (0..6usize, 0..3usize, 0..80u64, 0..80usize, 0..16u8, 0..2u32, 0..2u32, any::<u8>()).prop_map(
                |(win, region, off, len, rights, qpn, pd, key8)| Op::Bind {
                    win,
                    region,
                    off,
                    len,
                    rights,
                    qpn,
                    pd,
                    key8
                }
            ),
            (0..6usize, 0..2u32).prop_map(|(win, pd)| Op::Invalidate { win, pd }),
            (0..6usize).prop_map(|win| Op::Dealloc { win }),
            (0..3usize).prop_map(|region| Op::InvalidateRegion { region }),
            (0..6usize, proptest::option::of(0..2u32), 0..2u32, 0..80u64, 0..40usize, 0..8u8)
                .prop_map(|(win, qpn, pd, off, len, need)| Op::Access { win, qpn, pd, off, len, need }),
        ]
    }

    fn rights(bits: u8) -> AccessFlags {
        let mut a = AccessFlags::empty();
        for (i, r) in REMOTE.iter().enumerate() {
            if bits & (1 << i) != 0 {
                a |= *r;
            }
        }
        if bits & 8 != 0 {
            a |= AccessFlags::LOCAL_WRITE; // asked for, meaningless for a window
        }
        a
    }

    /// A region as the model sees it.
    struct MRegion {
        key: u32,
        pd: u32,
        iova: u64,
        len: usize,
        access: AccessFlags,
        valid: bool,
    }

    /// A window as the model sees it: its key, PD, type and binding (region index, first
    /// address, length, rights, QP).
    struct MWin {
        key: u32,
        pd: u32,
        two: bool,
        bound: Option<(usize, u64, usize, AccessFlags, u32)>,
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn windows_follow_the_model(ops in proptest::collection::vec(op(), 1..60)) {
            let t = Mtpt::new(64);
            let block = Arc::new(MemBlock::new(4096).unwrap());
            let lw = AccessFlags::LOCAL_WRITE;
            // Region 0 allows binding and local write; 1 allows binding, not local write;
            // 2 does not allow binding. Each 64 bytes at its own address.
            let specs = [
                (0, 0x1000u64, lw | AccessFlags::MW_BIND | AccessFlags::REMOTE_READ),
                (0, 0x2000, AccessFlags::MW_BIND),
                (0, 0x3000, lw),
            ];
            let mut regions: Vec<MRegion> = specs
                .iter()
                .enumerate()
                .map(|(i, &(pd, iova, access))| {
                    let k = t.register(PdId(pd), block.clone(), i * 64, 64, iova, access).unwrap();
                    MRegion { key: k.lkey, pd, iova, len: 64, access, valid: true }
                })
                .collect();
            let mut wins: Vec<Option<MWin>> = Vec::new();
            for op in ops {
                match op {
                    Op::Alloc { pd, two } => {
                        let kind = if two { MwType::Two } else { MwType::One };
                        let key = t.alloc_mw(PdId(pd), kind).unwrap();
                        wins.push(Some(MWin { key, pd, two, bound: None }));
                    }
                    Op::Bind { win, region, off, len, rights: bits, qpn, pd, key8 } => {
                        let Some(Some(w)) = wins.get_mut(win) else { continue };
                        let r = &regions[region];
                        let new_key = (w.key & !0xff) | u32::from(key8);
                        let access = rights(bits);
                        let bind = Bind { mr_lkey: r.key, addr: r.iova + off, len, access };
                        let got = t.bind_mw(w.key >> 8, new_key, qpn, PdId(pd), bind);
                        // The model: IBA 10.6.7.2.
                        let remote = access & (AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC);
                        let ok = if w.two && w.bound.is_some() {
                            false // a bound type 2 window is invalidated before it is bound again
                        } else if len == 0 {
                            !w.two && pd == w.pd
                        } else {
                            // Remote write or atomic rights need a locally writable region.
                            let writes = remote.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC);
                            r.valid
                                && pd == w.pd
                                && r.pd == pd
                                && r.access.contains(AccessFlags::MW_BIND)
                                && (r.access.contains(lw) || !writes)
                                && off + len as u64 <= r.len as u64
                        };
                        prop_assert_eq!(got.is_ok(), ok, "bind {:?}: {:?}", bind, got);
                        if ok {
                            w.key = new_key;
                            w.bound = (len > 0).then_some((region, r.iova + off, len, remote, qpn));
                        }
                    }
                    Op::Invalidate { win, pd } => {
                        let Some(Some(w)) = wins.get_mut(win) else { continue };
                        let got = t.invalidate_for(w.key, PdId(pd));
                        let ok = w.two && pd == w.pd;
                        prop_assert_eq!(got.is_ok(), ok, "invalidate: {:?}", got);
                        if ok {
                            w.bound = None;
                        }
                    }
                    Op::Dealloc { win } => {
                        let Some(slot) = wins.get_mut(win) else { continue };
                        let Some(w) = slot.take() else { continue };
                        prop_assert!(t.dealloc_mw(w.key >> 8).is_ok());
                        // Its key reaches nothing any more.
                        prop_assert!(t.check_remote_by(w.key, PdId(w.pd), 0, 0x1000, 1, AccessFlags::empty()).is_err());
                    }
                    Op::InvalidateRegion { region } => {
                        t.invalidate(regions[region].key).unwrap();
                        regions[region].valid = false;
                    }
                    Op::Access { win, qpn, pd, off, len, need } => {
                        let Some(Some(w)) = wins.get(win) else { continue };
                        let need = rights(need & 7);
                        // Near the window's region, so that accesses land inside and out.
                        let va = w.bound.map_or(0x1000, |b| regions[b.0].iova) + off;
                        let got = match qpn {
                            Some(q) => t.check_remote_by(w.key, PdId(pd), q, va, len, need),
                            None => t.check_remote(w.key, PdId(pd), va, len, need),
                        };
                        let want = w.bound.and_then(|(region, start, blen, access, bqpn)| {
                            let r = &regions[region];
                            let by_ok = if w.two { qpn == Some(bqpn) } else { pd == w.pd };
                            let inside = va >= start && va + len as u64 <= start + blen as u64;
                            let rel = usize::try_from(va.checked_sub(r.iova)?).ok()?;
                            (by_ok && access.contains(need) && r.valid && inside).then_some(region * 64 + rel)
                        });
                        match (got, want) {
                            (Ok(s), Some(offset)) => {
                                prop_assert_eq!((s.block_offset(), s.len()), (offset, len));
                            }
                            (Err(_), None) => {}
                            (got, want) => prop_assert!(false, "access {:#x}+{} need {:?}: got {:?}, model {:?}", va, len, need, got.map(|s| s.block_offset()), want),
                        }
                    }
                }
                // A region with windows bound to it is not deregistered (IBA 10.6.7.1).
                let bound_to_0 = wins.iter().flatten().filter(|w| matches!(w.bound, Some((0, ..)))).count();
                if bound_to_0 > 0 {
                    let refused = matches!(t.deregister(regions[0].key), Err(MrError::WindowsBound { .. }));
                    prop_assert!(refused, "a region with a window bound was deregistered");
                }
            }
        }
    }
}
