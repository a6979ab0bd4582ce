//! The engine's QP table: QP numbers handed out cyclically, looked up in O(1).
//!
//! Linux rxe allocates QP numbers with `xa_alloc_cyclic` (rxe_pool.c): the next QP gets
//! the number after the last one handed out, not the lowest free one, so a destroyed QP's
//! number comes back only after the whole space has been walked. A peer's late packets
//! for a destroyed QP (retransmissions, a held ACK, a READ response still on the wire)
//! then find no QP and are dropped (`unknown_qp_pkts`) instead of landing on a new QP
//! that happens to get the same number. rnic does the same over QPNs
//! [`FIRST_QPN`]..=[`LAST_QPN`].
//!
//! Lookup stays a mask and a compare: a QP lives at `(qpn - FIRST_QPN) & (len - 1)` of a
//! power-of-two table kept at most half full, and a slot answers only for the QPN it
//! holds. Two live QPs never share a slot: allocation skips a number whose slot is taken.

use super::qp::Qp;
/// The first QPN handed out, as rxe does (QP0 and QP1 are special; rxe starts at 0x11).
pub const FIRST_QPN: u32 = 0x11;
use rnic_wire::Qpn;

/// The last QPN handed out before the cursor wraps to [`FIRST_QPN`]. QPN 0xFFFFFF is the
/// multicast QPN (IBA 10.5.2.1), never a QP of its own.
pub const LAST_QPN: u32 = 0xFF_FFFE;

/// The smallest table allocated (slots).
const MIN_SLOTS: usize = 16;

#[derive(Debug)]
pub(crate) struct QpTable {
    /// Power-of-two length (or empty); at most half the slots are taken.
    slots: Vec<Option<Qp>>,
    live: usize,
    /// The next QPN to try.
    next: u32,
    /// The QPNs handed out, first and last.
    first: u32,
    last: u32,
}

impl QpTable {
    #[cfg(test)]
    pub(crate) fn new() -> QpTable {
        QpTable::with_range(FIRST_QPN, LAST_QPN)
    }

    /// A table handing out `first..=last` (a process sharing a device has a part of the
    /// QPN space: `transport::share`).
    pub(crate) fn with_range(first: u32, last: u32) -> QpTable {
        let first = first.max(FIRST_QPN);
        QpTable { slots: Vec::new(), live: 0, next: first, first, last: last.clamp(first, LAST_QPN) }
    }

    /// Live QPs.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    fn index(&self, qpn: u32) -> Option<usize> {
        let off = usize::try_from(qpn.checked_sub(self.first)?).ok()?;
        (!self.slots.is_empty()).then(|| off & (self.slots.len() - 1))
    }

    /// Every live QP, in slot order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Qp> {
        self.slots.iter().flatten()
    }

    pub(crate) fn get(&self, qpn: Qpn) -> Option<&Qp> {
        let i = self.index(qpn.value())?;
        self.slots[i].as_ref().filter(|q| q.shared.qpn == qpn)
    }

    pub(crate) fn get_mut(&mut self, qpn: Qpn) -> Option<&mut Qp> {
        let i = self.index(qpn.value())?;
        self.slots[i].as_mut().filter(|q| q.shared.qpn == qpn)
    }

    /// Picks the next free QPN (the cursor moves past it) and stores the QP `make`
    /// builds for it. The caller enforces the device's QP limit; the table holds at most
    /// 2^22 QPs (half its largest size for the 24-bit space), `None` beyond.
    pub(crate) fn insert(&mut self, make: impl FnOnce(Qpn) -> Qp) -> Option<Qpn> {
        if self.live >= 1 << 22 || (self.live as u64 + 1) * 2 > u64::from(self.last - self.first + 1) {
            return None;
        }
        if (self.live + 1) * 2 > self.slots.len() {
            self.grow();
        }
        // At most half the slots are taken, so a free one turns up within len tries:
        // consecutive QPNs map to consecutive slots.
        let qpn = loop {
            let candidate = self.next;
            self.next = if candidate >= self.last { self.first } else { candidate + 1 };
            let i = self.index(candidate).unwrap_or(0);
            if self.slots[i].is_none() {
                break candidate;
            }
        };
        let qpn = Qpn::new(qpn);
        let i = self.index(qpn.value()).unwrap_or(0);
        self.slots[i] = Some(make(qpn));
        self.live += 1;
        Some(qpn)
    }

    /// Removes and returns the QP `qpn`.
    pub(crate) fn remove(&mut self, qpn: Qpn) -> Option<Qp> {
        let i = self.index(qpn.value())?;
        if self.slots[i].as_ref().is_some_and(|q| q.shared.qpn == qpn) {
            self.live -= 1;
            self.slots[i].take()
        } else {
            None
        }
    }

    /// Doubles the table; every QP moves to its slot under the new mask (distinct slots
    /// under the old mask stay distinct under the larger one).
    fn grow(&mut self) {
        let len = (self.slots.len() * 2).max(MIN_SLOTS);
        let old = std::mem::replace(&mut self.slots, (0..len).map(|_| None).collect());
        for qp in old.into_iter().flatten() {
            let i = self.index(qp.shared.qpn.value()).unwrap_or(0);
            debug_assert!(self.slots[i].is_none());
            self.slots[i] = Some(qp);
        }
    }

    #[cfg(test)]
    pub(crate) fn set_cursor(&mut self, qpn: u32) {
        self.next = qpn;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cq::Cq;
    use crate::engine::qp::{QpInit, QpShared};
    use crate::mr::PdId;
    use crate::qp_state::QpType;
    use std::sync::Arc;

    fn add(t: &mut QpTable) -> Qpn {
        let cq = Arc::new(Cq::new(1, 1));
        t.insert(|qpn| {
            let s = Arc::new(QpShared::new(qpn, &QpInit::new(QpType::Rc, PdId(1), cq.clone(), cq.clone())));
            Qp::new(s, cq.clone(), cq)
        })
        .unwrap()
    }

    #[test]
    fn the_cursor_wraps_past_the_last_qpn_and_skips_live_numbers() {
        let mut t = QpTable::new();
        let first = add(&mut t);
        assert_eq!(first.value(), FIRST_QPN);
        t.set_cursor(LAST_QPN - 1);
        assert_eq!(add(&mut t).value(), LAST_QPN - 1);
        assert_eq!(add(&mut t).value(), LAST_QPN);
        // 0xFFFFFF (multicast) is never handed out; FIRST_QPN is still live: skipped.
        assert_eq!(add(&mut t).value(), FIRST_QPN + 1);
        assert_eq!(t.len(), 4);
        assert!(t.get(Qpn::new(0xFF_FFFF)).is_none());
        assert!(t.remove(first).is_some());
        assert!(t.get(first).is_none() && t.remove(first).is_none());
        assert_eq!(t.len(), 3);
        for q in [LAST_QPN - 1, LAST_QPN, FIRST_QPN + 1] {
            assert_eq!(t.get(Qpn::new(q)).map(|qp| qp.shared.qpn.value()), Some(q));
        }
    }

    #[test]
    fn numbers_below_the_first_qpn_and_aliases_find_nothing() {
        let mut t = QpTable::new();
        assert!(t.get(Qpn::new(1)).is_none(), "empty table");
        let q = add(&mut t);
        assert!(t.get(Qpn::new(0)).is_none() && t.get(Qpn::new(1)).is_none());
        // Same slot under the table's mask, another number.
        let alias = Qpn::new(q.value() + u32::try_from(t.slots.len()).unwrap());
        assert!(t.get(alias).is_none() && t.remove(alias).is_none());
    }
}
