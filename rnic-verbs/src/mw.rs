//! Memory windows (`ibv_mw`): an R_Key for a range of a memory region, bound and unbound
//! without registering anything (IBA 10.6.7.2).

use crate::pd::{PdBackend, ProtectionDomain};
use crate::{AccessFlags, Error, MemoryRegion, QueuePair, Result, SendOp, SendWr};
pub use rnic_core::mr::MwType;
use std::sync::atomic::{AtomicU32, Ordering};

/// A memory window. A type 2 window ([`MwType::Two`]) is bound to a range of a region by
/// a work request of a QP ([`MemoryWindow::bind`]): the peer then reaches that range, with
/// the rights given, through [`MemoryWindow::rkey`], by that QP only; `LOCAL_INV` of the
/// key (or the peer's SEND with Invalidate) unbinds it. A type 1 window is bound the same
/// way and unbound by a zero-length bind. Deallocated when dropped.
#[derive(Debug)]
pub struct MemoryWindow {
    pd: ProtectionDomain,
    kind: MwType,
    rkey: AtomicU32,
}

impl ProtectionDomain {
    /// Allocates an unbound memory window of `kind` (`ibv_alloc_mw`). On hardware it is
    /// [`Error::Unsupported`] (the backend does not wrap windows).
    pub fn alloc_mw(&self, kind: MwType) -> Result<MemoryWindow> {
        match &self.inner.b {
            PdBackend::Emu(_) => {
                let (e, id) = self.emu_pd();
                let rkey = e.dev.mtpt().alloc_mw(id, kind).map_err(|m| Error::RegMr(m.into()))?;
                Ok(MemoryWindow { pd: self.clone(), kind, rkey: AtomicU32::new(rkey) })
            }
            #[cfg(feature = "hw")]
            PdBackend::Hw(_) => Err(Error::Unsupported {
                op: "alloc_mw",
                device: self.context().name().to_string(),
                why: "memory windows are not wrapped by the hardware backend".into(),
            }),
        }
    }
}

impl MemoryWindow {
    /// The window's key: what the peer uses once a bind completed.
    pub fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Acquire)
    }

    /// Its type.
    pub fn kind(&self) -> MwType {
        self.kind
    }

    /// Posts on `qp` the bind of this window to `len` bytes of `mr` from byte `offset`,
    /// with the remote rights `access` (`len` 0 unbinds a type 1 window), under the next
    /// key (`ibv_inc_rkey`), which [`rkey`](Self::rkey) returns from now on. The bind
    /// completes in order on `qp`'s send CQ (`WcOpcode::BindMw`), or with
    /// `WcStatus::MwBindErr` where IBA 10.6.7.2 refuses it (the region lacks
    /// `MW_BIND`, another PD, remote write without local write, ...). Returns the key.
    pub fn bind(
        &self,
        qp: &QueuePair,
        wr_id: u64,
        mr: &MemoryRegion,
        offset: usize,
        len: usize,
        access: AccessFlags,
    ) -> Result<u32> {
        let old = self.rkey();
        let rkey = (old & 0xffff_ff00) | (old.wrapping_add(1) & 0xff);
        let addr = mr.addr().checked_add(offset as u64).ok_or(Error::InvalidArgument {
            op: "bind memory window",
            why: format!("offset {offset} past the end of the address space"),
        })?;
        let bind = rnic_core::mr::Bind { mr_lkey: mr.lkey(), addr, len, access };
        qp.post_send(&SendWr::new(wr_id, SendOp::BindMw { rkey, bind }, Vec::new()))?;
        self.rkey.store(rkey, Ordering::Release);
        Ok(rkey)
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        if let PdBackend::Emu(_) = &self.pd.inner.b {
            let (e, _) = self.pd.emu_pd();
            let _ = e.dev.mtpt().dealloc_mw(self.rkey() >> 8);
        }
    }
}
