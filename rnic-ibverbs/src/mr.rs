//! Protection domains, memory regions over the program's own memory, address handles.

use crate::device::{ctx_of, ip_of_gid, CtxShared};
use crate::{diag, guard, set_errno, Users};
use libc::{c_int, c_uint, c_void, size_t};
use rnic_core::device::Device;
use rnic_core::mem::MemBlock;
use rnic_core::mr::{AccessFlags, PdId};
use rnic_verbs_sys::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
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
        let p = Box::into_raw(Box::new(Pd { ibv, id, core, ctx: ctx.sh.clone(), users: Users::default() }));
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
    p.ctx.pds.lock().remove(&p.id.0);
    0
}

/// Frees a PD of a context being closed (its MRs, QPs, SRQs and AHs are gone).
pub(crate) fn free_pd_with_context(ptr: usize) {
    // SAFETY: a live PD of the closing context, out of its table: nothing else frees it.
    drop(unsafe { Box::from_raw(ptr as *mut Pd) });
}

/// An `ibv_mr`.
#[repr(C)]
pub struct Mr {
    pub ibv: ibv_mr,
    core: Device,
    ctx: Arc<CtxShared>,
}

/// Access flags rnic understands; the rest are refused with the reason, as a device
/// without the capability refuses them.
fn access_of(access: c_uint, what: &str) -> Result<AccessFlags, c_int> {
    let known = IBV_ACCESS_LOCAL_WRITE
        | IBV_ACCESS_REMOTE_WRITE
        | IBV_ACCESS_REMOTE_READ
        | IBV_ACCESS_REMOTE_ATOMIC
        | IBV_ACCESS_MW_BIND
        | IBV_ACCESS_ZERO_BASED;
    // Optional flags (IBV_ACCESS_OPTIONAL_RANGE, relaxed ordering) may be ignored by
    // definition.
    let access = access & !(0x3ff << 20);
    if access & IBV_ACCESS_ON_DEMAND != 0 {
        diag(format!("{what}: on-demand paging (IBV_ACCESS_ON_DEMAND) is not supported"));
        return Err(libc::EOPNOTSUPP);
    }
    if access & !(known | IBV_ACCESS_HUGETLB) != 0 {
        diag(format!("{what}: unknown access flags {:#x}", access & !known));
        return Err(libc::EINVAL);
    }
    // IBA 10.6.3.1 (and ib_check_mr_access): remote write or atomic needs local write.
    if access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) != 0 && access & IBV_ACCESS_LOCAL_WRITE == 0 {
        diag(format!("{what}: remote write/atomic access needs IBV_ACCESS_LOCAL_WRITE too"));
        return Err(libc::EINVAL);
    }
    Ok(AccessFlags::from_bits_truncate(access & 0xf))
}

fn reg(pd: *mut ibv_pd, addr: *mut c_void, length: size_t, iova: u64, access: c_uint) -> *mut ibv_mr {
    guard(null_mut(), || {
        // SAFETY: a PD we handed out.
        let Some(p) = (unsafe { pd_of(pd) }) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        let flags = match access_of(access, "ibv_reg_mr") {
            Ok(f) => f,
            Err(e) => {
                set_errno(e);
                return null_mut();
            }
        };
        if length == 0 || addr.is_null() {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        let iova = if access & IBV_ACCESS_ZERO_BASED != 0 { 0 } else { iova };
        // SAFETY: the verbs contract: `addr .. addr + length` is the program's memory,
        // mapped read/write until ibv_dereg_mr, and the NIC may read and write it while
        // work that names the region is outstanding. The block never frees it.
        let block = Arc::new(unsafe { MemBlock::from_raw(addr.cast(), length) });
        match p.core.reg_mr(p.id, block, 0, length, iova, flags) {
            Ok(keys) => {
                let ibv = ibv_mr {
                    context: p.ibv.context,
                    pd,
                    addr,
                    length,
                    handle: keys.lkey,
                    lkey: keys.lkey,
                    rkey: keys.rkey,
                };
                p.users.hold();
                let m = Box::into_raw(Box::new(Mr { ibv, core: p.core.clone(), ctx: p.ctx.clone() }));
                p.ctx.mrs.lock().insert(keys.lkey, m as usize);
                m.cast()
            }
            Err(e) => {
                diag(format!("ibv_reg_mr of {length} bytes at {addr:p}: {e}"));
                set_errno(libc::ENOMEM);
                null_mut()
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: size_t, access: c_int) -> *mut ibv_mr {
    reg(pd, addr, length, addr as u64, access as c_uint)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    reg(pd, addr, length, iova, access as c_uint)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    reg(pd, addr, length, iova, access)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    if mr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: allocated by Box in ibv_reg_mr; the program does not use it again.
    let m = unsafe { Box::from_raw(mr.cast::<Mr>()) };
    // SAFETY: the MR's PD, alive while it has users.
    if let Some(p) = unsafe { pd_of(m.ibv.pd) } {
        p.users.release();
    }
    m.ctx.mrs.lock().remove(&m.ibv.lkey);
    match m.core.mtpt().deregister(m.ibv.lkey) {
        Ok(()) => 0,
        Err(e) => {
            diag(format!("ibv_dereg_mr(lkey {:#x}): {e}", m.ibv.lkey));
            libc::EINVAL
        }
    }
}

/// Frees an MR of a context being closed: deregistered at once, so no peer reaches
/// memory the program may now free (the kernel's teardown of a closed context).
pub(crate) fn free_mr_with_context(ptr: usize) {
    // SAFETY: a live MR of the closing context, out of its table: nothing else frees it.
    let m = unsafe { Box::from_raw(ptr as *mut Mr) };
    let _ = m.core.mtpt().deregister(m.ibv.lkey);
}

/// An `ibv_ah`: where UD sends go.
#[repr(C)]
pub struct Ah {
    pub ibv: ibv_ah,
    pub ip: IpAddr,
    ctx: Arc<CtxShared>,
}

pub(crate) unsafe fn ah_of<'a>(ah: *mut ibv_ah) -> Option<&'a Ah> {
    // SAFETY: every ibv_ah we hand out is the first field of a live Ah.
    (!ah.is_null()).then(|| unsafe { &*ah.cast::<Ah>() })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    guard(null_mut(), || {
        // SAFETY: a PD we handed out.
        let Some(p) = (unsafe { pd_of(pd) }) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        // SAFETY: the caller's attributes.
        let a = unsafe { &*attr };
        if a.is_global == 0 {
            diag("ibv_create_ah: no GRH (is_global 0): RoCE addresses by GID; give one (e.g. -g 1)");
            set_errno(libc::EINVAL);
            return null_mut();
        }
        let link_local = crate::device::carries_link_local(&p.ctx.dev.info);
        // SAFETY: reading the raw bytes of the GID union.
        let ip = match ip_of_gid(unsafe { a.grh.dgid.raw }, "ibv_create_ah", link_local) {
            Ok(ip) => ip,
            Err(e) => {
                set_errno(e);
                return null_mut();
            }
        };
        p.users.hold();
        let a = Box::into_raw(Box::new(Ah {
            ibv: ibv_ah { context: p.ibv.context, pd, handle: 0 },
            ip,
            ctx: p.ctx.clone(),
        }));
        p.ctx.ahs.lock().insert(a as usize);
        a.cast()
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    if ah.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: allocated by Box in ibv_create_ah.
    let a = unsafe { Box::from_raw(ah.cast::<Ah>()) };
    a.ctx.ahs.lock().remove(&(ah as usize));
    // SAFETY: the AH's PD, alive while it has users.
    if let Some(p) = unsafe { pd_of(a.ibv.pd) } {
        p.users.release();
    }
    0
}

/// Frees an AH of a context being closed.
pub(crate) fn free_ah_with_context(ptr: usize) {
    // SAFETY: a live AH of the closing context, out of its table: nothing else frees it.
    drop(unsafe { Box::from_raw(ptr as *mut Ah) });
}

/// The sender of a UD receive, from the 40-byte GRH area before its data: for RoCEv2 over
/// IPv4 the IPv4 header sits in the area's last 20 bytes (as rxe and mlx5 write it),
/// otherwise the area is an IPv6 header.
fn sender_of_grh(g: &[u8; 40]) -> Option<IpAddr> {
    if g[20] >> 4 == 4 {
        Some(IpAddr::V4(Ipv4Addr::new(g[32], g[33], g[34], g[35])))
    } else if g[0] >> 4 == 6 {
        let mut a = [0u8; 16];
        a.copy_from_slice(&g[8..24]);
        Some(IpAddr::V6(Ipv6Addr::from(a)))
    } else {
        None
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut c_void,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    if unsafe { ctx_of(context) }.is_none() || wc.is_null() || grh.is_null() || ah_attr.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the caller's completion and the 40-byte GRH area it names.
    let (w, g) = unsafe { (&*wc, &*grh.cast::<[u8; 40]>()) };
    if w.wc_flags & IBV_WC_GRH == 0 {
        diag("ibv_init_ah_from_wc: the completion has no GRH");
        set_errno(libc::EINVAL);
        return -1;
    }
    let Some(ip) = sender_of_grh(g) else {
        diag("ibv_init_ah_from_wc: the GRH area holds neither an IPv4 nor an IPv6 header");
        set_errno(libc::EINVAL);
        return -1;
    };
    let mut a = ibv_ah_attr { is_global: 1, ..Default::default() };
    a.grh.dgid.raw = rnic_verbs::Gid::from_ip(ip).0;
    a.grh.sgid_index = 1;
    a.grh.hop_limit = 64;
    a.port_num = port_num;
    // SAFETY: the caller's struct.
    unsafe { ah_attr.write(a) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut c_void,
    port_num: u8,
) -> *mut ibv_ah {
    // SAFETY: a PD we handed out.
    let Some(p) = (unsafe { pd_of(pd) }) else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    let mut a = ibv_ah_attr::default();
    // SAFETY: the caller's pointers, checked inside.
    if unsafe { ibv_init_ah_from_wc(p.ibv.context, port_num, wc, grh, &mut a) } != 0 {
        return null_mut();
    }
    // SAFETY: our PD and a filled attribute struct.
    unsafe { ibv_create_ah(pd, &mut a) }
}
