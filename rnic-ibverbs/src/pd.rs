//! Protection domains: a PD id of the device, which the context's MRs, QPs, SRQs and
//! AHs name and which may not go while any of them does.

use crate::ctx::{ctx_of, CtxShared};
use crate::{diag, guard, set_errno, Users};
use libc::c_int;
use rnic_core::device::Device;
use rnic_core::mr::PdId;
use rnic_verbs_sys::*;
use std::ptr::null_mut;
use std::sync::Arc;

/// An `ibv_pd`.
#[repr(C)]
pub struct Pd {
    pub ibv: ibv_pd,
    pub id: PdId,
    pub core: Device,
    pub ctx: Arc<CtxShared>,
    /// Its MRs, QPs, SRQs and AHs.
    pub(crate) users: Users,
    /// An import of another context's PD (`ibv_import_pd`): freeing it (`ibv_unimport_pd`,
    /// or `ibv_dealloc_pd`) frees this handle only; the PD is its maker's.
    pub(crate) imported: bool,
    /// A parent domain (`ibv_alloc_parent_domain`): the PD it was made on (its protection
    /// domain is that one's, which it holds a use of until it is freed).
    pub(crate) parent: Option<usize>,
}

impl Pd {
    /// Whether it is a parent domain (`ibv_alloc_parent_domain`).
    pub(crate) fn is_parent_domain(&self) -> bool {
        self.parent.is_some()
    }
}

pub(crate) unsafe fn pd_of<'a>(pd: *mut ibv_pd) -> Option<&'a Pd> {
    // SAFETY: every ibv_pd we hand out is the first field of a live Pd.
    (!pd.is_null()).then(|| unsafe { &*pd.cast::<Pd>() })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    guard(null_mut(), || {
        // SAFETY: a context we handed out.
        let Some(ctx) = (unsafe { ctx_of(context) }) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        let core = match ctx.sh.core() {
            Ok(c) => c,
            Err(e) => {
                set_errno(e);
                return null_mut();
            }
        };
        let id = core.alloc_pd();
        let ibv = ibv_pd { context, handle: id.0 };
        let p = Box::into_raw(Box::new(Pd {
            ibv,
            id,
            core,
            ctx: ctx.sh.clone(),
            users: Users::default(),
            imported: false,
            parent: None,
        }));
        ctx.sh.pds.lock().insert(id.0, p as usize);
        p.cast()
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    if pd.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a PD we handed out.
    if unsafe { &*pd.cast::<Pd>() }.users.in_use() {
        diag("ibv_dealloc_pd: the PD still has memory regions, QPs, SRQs or address handles");
        return libc::EBUSY;
    }
    // SAFETY: allocated by Box in ibv_alloc_pd; nothing names it any more and the program
    // does not use it again.
    let p = unsafe { Box::from_raw(pd.cast::<Pd>()) };
    if let Some(parent) = p.parent {
        // SAFETY: the PD this parent domain was made on, alive while it has users.
        unsafe { &*(parent as *const Pd) }.users.release();
    } else if !p.imported {
        p.ctx.pds.lock().remove(&p.id.0);
    }
    0
}

/// `ibv_alloc_parent_domain` (through `verbs_context.alloc_parent_domain`): a PD handle
/// whose QPs, SRQs, CQs and MRs are in `attr.pd`'s protection domain, with an optional
/// thread domain and custom allocators. rnic's queues are its own memory, never the
/// program's, so the allocators are accepted and never called (the verbs let a provider
/// allocate nothing through them); the thread domain is a promise of single-threaded use,
/// which costs nothing to accept. Freed by `ibv_dealloc_pd`, before its PD.
pub(crate) unsafe extern "C" fn alloc_parent_domain(
    context: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    guard(null_mut(), || {
        // SAFETY: a context we handed out; the caller's attributes.
        let (Some(ctx), Some(a)) = (unsafe { ctx_of(context) }, unsafe { attr.as_ref() }) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        let known = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
        if a.comp_mask & !known != 0 {
            diag(format!("ibv_alloc_parent_domain: unknown comp_mask bits {:#x}", a.comp_mask & !known));
            set_errno(libc::EINVAL);
            return null_mut();
        }
        if a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS != 0 && (a.alloc.is_none() || a.free.is_none()) {
            diag("ibv_alloc_parent_domain: IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS needs both alloc and free");
            set_errno(libc::EINVAL);
            return null_mut();
        }
        // SAFETY: a PD we handed out, or null.
        let Some(p) = (unsafe { pd_of(a.pd) }).filter(|p| p.parent.is_none() && Arc::ptr_eq(&p.ctx, &ctx.sh)) else {
            diag("ibv_alloc_parent_domain: attr.pd must be a PD (not a parent domain) of this context");
            set_errno(libc::EINVAL);
            return null_mut();
        };
        // SAFETY: a thread domain we handed out, or null.
        if !a.td.is_null() && unsafe { (*a.td).context } != context {
            diag("ibv_alloc_parent_domain: the thread domain belongs to another context");
            set_errno(libc::EINVAL);
            return null_mut();
        }
        p.users.hold();
        let ibv = ibv_pd { context, handle: p.id.0 };
        Box::into_raw(Box::new(Pd {
            ibv,
            id: p.id,
            core: p.core.clone(),
            ctx: p.ctx.clone(),
            users: Users::default(),
            imported: false,
            parent: Some(std::ptr::from_ref(p) as usize),
        }))
        .cast()
    })
}

/// `ibv_alloc_td` (through `verbs_context.alloc_td`): a thread domain, for a parent
/// domain (a promise of single-threaded use; nothing to set up).
pub(crate) unsafe extern "C" fn alloc_td(context: *mut ibv_context, attr: *mut ibv_td_init_attr) -> *mut ibv_td {
    guard(null_mut(), || {
        // SAFETY: a context we handed out; the caller's attributes or null.
        if unsafe { ctx_of(context) }.is_none() || unsafe { attr.as_ref() }.is_some_and(|a| a.comp_mask != 0) {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        Box::into_raw(Box::new(ibv_td { context }))
    })
}

/// `ibv_dealloc_td` (through `verbs_context.dealloc_td`).
pub(crate) unsafe extern "C" fn dealloc_td(td: *mut ibv_td) -> c_int {
    if td.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: allocated by Box in alloc_td; the program does not use it again.
    drop(unsafe { Box::from_raw(td) });
    0
}

/// Another handle on the PD `handle` of a context that shares its objects with `context`
/// (itself, or one imported from or into it: `ibv_import_device`), as the kernel's
/// `ibv_import_pd`. Its MRs, QPs, SRQs and AHs are the PD's: the protection domain is
/// one. ENOENT when no PD has that handle.
#[no_mangle]
pub unsafe extern "C" fn ibv_import_pd(context: *mut ibv_context, handle: u32) -> *mut ibv_pd {
    guard(null_mut(), || {
        // SAFETY: a context we handed out.
        let Some(ctx) = (unsafe { ctx_of(context) }) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        let Some(&orig) = ctx.sh.pds.lock().get(&handle) else {
            diag(format!("ibv_import_pd: no PD with handle {handle} in this context"));
            set_errno(libc::ENOENT);
            return null_mut();
        };
        // SAFETY: a live PD of the table (removed from it before it is freed).
        let o = unsafe { &*(orig as *const Pd) };
        let ibv = ibv_pd { context, handle };
        let p = Pd {
            ibv,
            id: o.id,
            core: o.core.clone(),
            ctx: ctx.sh.clone(),
            users: Users::default(),
            imported: true,
            parent: None,
        };
        Box::into_raw(Box::new(p)).cast()
    })
}

/// Frees an imported PD's handle (`ibv_import_pd`); the PD stays its maker's.
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_pd(pd: *mut ibv_pd) {
    // SAFETY: a PD we handed out.
    if let Some(p) = unsafe { pd_of(pd) } {
        if !p.imported {
            diag("ibv_unimport_pd: the PD was not imported (ibv_dealloc_pd frees it)");
            return;
        }
        if p.users.in_use() {
            // rdma-core lets a program unimport a PD its QPs still name (the kernel object
            // lives on); those QPs' teardown reads this handle, so it stays (a few bytes,
            // until the process ends) instead of being freed under them.
            return;
        }
        // SAFETY: allocated by Box in ibv_import_pd; the program does not use it again.
        drop(unsafe { Box::from_raw(pd.cast::<Pd>()) });
    }
}

/// Frees a PD of a context being closed (its MRs, QPs, SRQs and AHs are gone).
pub(crate) fn free_with_context(ptr: usize) {
    // SAFETY: a live PD of the closing context, out of its table: nothing else frees it.
    drop(unsafe { Box::from_raw(ptr as *mut Pd) });
}
