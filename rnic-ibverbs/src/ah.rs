//! Address handles: where a UD send goes, the IP address of the destination GID; and
//! the address of a UD receive's sender, from its GRH.

use crate::ctx::{carries_link_local, ctx_of, ip_of_gid, CtxShared};
use crate::pd::pd_of;
use crate::{diag, guard, set_errno};
use libc::{c_int, c_void};
use rnic_verbs_sys::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ptr::null_mut;
use std::sync::Arc;

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
        let link_local = carries_link_local(&p.ctx.dev.info);
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
pub(crate) fn free_with_context(ptr: usize) {
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
