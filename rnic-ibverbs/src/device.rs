//! Devices and contexts: `ibv_get_device_list` (the devices of `RNIC_DEVICES`, as
//! `rnic_verbs::emulated_devices` reads it: never hardware devices, since this library is
//! the libibverbs a hardware backend would load), `ibv_open_device` with the one table of
//! the context's operations (`OPS`, as rxe's `rxe_ctx_ops`), `ibv_close_device`, the
//! device, port and GID queries, and asynchronous events on the context's `async_fd`.
//!
//! Opening a context binds nothing: a device's UDP socket and threads start at the first
//! PD or CQ, so `ibv_devinfo` can list a device another process is using (only one process
//! can own a device's address and port 4791).

use crate::ctx::{by_cmd_fd, ctx_of, dev_of, new_cmd_fd, Ctx, CtxShared, Dev};
use crate::{ah, cq, dm, mr, mw, pd, qp, xrcd};
use crate::{copy_cstr, diag, guard, set_errno};
use libc::{c_char, c_int, c_void, size_t, ssize_t};
use parking_lot::Mutex;
use rnic_core::caps::DeviceCaps;
use rnic_io::EventFd;
use rnic_verbs::DeviceInfo;
use rnic_verbs_sys::*;
use std::collections::HashMap;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsRawFd as _, FromRawFd as _};
use std::ptr::null_mut;
use std::sync::{Arc, OnceLock};

static DEVICES: OnceLock<Result<Vec<&'static Dev>, String>> = OnceLock::new();

pub(crate) fn devices() -> &'static Result<Vec<&'static Dev>, String> {
    DEVICES.get_or_init(|| {
        let list = rnic_verbs::emulated_devices().map_err(|e| e.to_string())?;
        Ok(list
            .into_iter()
            .enumerate()
            .map(|(i, info)| {
                // SAFETY: all-zero is a valid ibv_device (integers and char arrays).
                let mut ibv: ibv_device = unsafe { std::mem::zeroed() };
                ibv.node_type = IBV_NODE_CA;
                ibv.transport_type = IBV_TRANSPORT_IB;
                copy_cstr(&mut ibv.name, &info.name);
                copy_cstr(&mut ibv.dev_name, &format!("uverbs{i}"));
                copy_cstr(&mut ibv.dev_path, &format!("/sys/class/infiniband_verbs/uverbs{i}"));
                copy_cstr(&mut ibv.ibdev_path, &format!("/sys/class/infiniband/{}", info.name));
                let index = c_int::try_from(i).unwrap_or(c_int::MAX);
                &*Box::leak(Box::new(Dev::new(ibv, info, index)))
            })
            .collect())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    guard(null_mut(), || match devices() {
        Ok(list) => {
            // calloc'd, as rdma-core's: ibv_free_device_list frees it.
            // SAFETY: calloc of n+1 pointers; checked for NULL below.
            let arr = unsafe { libc::calloc(list.len() + 1, size_of::<*mut ibv_device>()) }.cast::<*mut ibv_device>();
            if arr.is_null() {
                set_errno(libc::ENOMEM);
                return null_mut();
            }
            for (i, d) in list.iter().enumerate() {
                // SAFETY: i < n+1 slots; the device lives forever.
                unsafe { *arr.add(i) = std::ptr::from_ref(&d.ibv).cast_mut() };
            }
            if !num_devices.is_null() {
                // SAFETY: the caller's out-parameter.
                unsafe { *num_devices = c_int::try_from(list.len()).unwrap_or(c_int::MAX) };
            }
            arr
        }
        Err(e) => {
            diag(format!("no devices: {e}"));
            if !num_devices.is_null() {
                // SAFETY: the caller's out-parameter.
                unsafe { *num_devices = 0 };
            }
            set_errno(libc::EINVAL);
            null_mut()
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: the array ibv_get_device_list calloc'd (or NULL).
    unsafe { libc::free(list.cast()) };
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    // SAFETY: a device from our list.
    match unsafe { dev_of(device) } {
        Some(d) => d.ibv.name.as_ptr(),
        None => std::ptr::null(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    // SAFETY: a device from our list.
    unsafe { dev_of(device) }.map_or(0, |d| d.info.node_guid().to_be())
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    // SAFETY: a device from our list.
    unsafe { dev_of(device) }.map_or(-1, |d| d.index)
}

/// The context's operations, one table as rxe's `rxe_ctx_ops`: a `verbs_context` with
/// nothing but its function pointers filled, which `ibv_open_device` copies and gives its
/// identity (device, fds, size). The extended verbs the header reaches through the
/// `verbs_context` come first, then the `ibv_context_ops` its static-inline verbs call;
/// everything else stays NULL, which rdma-core reads as "not supported" (`EOPNOTSUPP`).
/// This is the one place that names the other modules' entry points for the context.
const OPS: verbs_context = {
    // SAFETY: all-zero is a valid verbs_context (pointers, Options, integers and a
    // pthread mutex whose zero is PTHREAD_MUTEX_INITIALIZER on glibc).
    let mut v: verbs_context = unsafe { std::mem::zeroed() };
    v.query_port = Some(query_port_ex);
    v.query_device_ex = Some(query_device_ex);
    v.create_qp_ex = Some(qp::create_qp_ex);
    v.create_cq_ex = Some(cq::create_cq_ex);
    v.query_rt_values = Some(query_rt_values);
    v.alloc_parent_domain = Some(pd::alloc_parent_domain);
    v.advise_mr = Some(mr::advise_mr);
    v.alloc_dm = Some(dm::alloc_dm);
    v.free_dm = Some(dm::free_dm);
    v.reg_dm_mr = Some(dm::reg_dm_mr);
    v.alloc_td = Some(pd::alloc_td);
    v.dealloc_td = Some(pd::dealloc_td);
    v.open_xrcd = Some(xrcd::open_xrcd);
    v.close_xrcd = Some(xrcd::close_xrcd);
    v.open_qp = Some(qp::open_qp);
    v.create_srq_ex = Some(qp::create_srq_ex);
    v.get_srq_num = Some(qp::get_srq_num);
    v.context.ops._compat_query_device = Some(ibv_query_device);
    v.context.ops.poll_cq = Some(cq::poll_cq);
    v.context.ops.req_notify_cq = Some(cq::req_notify_cq);
    v.context.ops.post_send = Some(qp::post_send);
    v.context.ops.post_recv = Some(qp::post_recv);
    v.context.ops.post_srq_recv = Some(qp::post_srq_recv);
    v.context.ops.alloc_mw = Some(mw::alloc_mw);
    v.context.ops.dealloc_mw = Some(mw::dealloc_mw);
    v.context.ops.bind_mw = Some(qp::bind_mw);
    v
};

#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    guard(null_mut(), || {
        // SAFETY: a device from our list.
        let Some(dev) = (unsafe { dev_of(device) }) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        // The list owns the device; take the 'static one.
        let Some(dev) = devices().as_ref().ok().and_then(|l| l.iter().copied().find(|d| d.index == dev.index)) else {
            set_errno(libc::ENODEV);
            return null_mut();
        };
        let async_fd = match EventFd::blocking() {
            Ok(f) => f,
            Err(e) => {
                set_errno(e.raw_os_error().unwrap_or(libc::EMFILE));
                return null_mut();
            }
        };
        let sh = Arc::new(CtxShared::new(dev, async_fd));
        let cmd_fd = match new_cmd_fd(&sh) {
            Ok(f) => f,
            Err(e) => {
                set_errno(e.raw_os_error().unwrap_or(libc::EMFILE));
                return null_mut();
            }
        };
        context_on(sh, device, cmd_fd)
    })
}

/// A context (its `ibv_context`, the program's) on `sh` with `cmd_fd`.
fn context_on(sh: Arc<CtxShared>, device: *mut ibv_device, cmd_fd: std::os::fd::OwnedFd) -> *mut ibv_context {
    let mut v = OPS;
    v.sz = size_of::<verbs_context>();
    v.context.device = device;
    v.context.cmd_fd = cmd_fd.as_raw_fd();
    v.context.async_fd = sh.async_fd.as_raw_fd();
    v.context.num_comp_vectors = 1;
    v.context.abi_compat = VERBS_ABI_IS_EXTENDED;
    let ctx = Box::into_raw(Box::new(Ctx { v, sh, cmd_fd }));
    // SAFETY: just allocated; the program gets the ibv_context inside.
    unsafe { std::ptr::addr_of_mut!((*ctx).v.context) }
}

/// A second context on the objects of the one whose `cmd_fd` this is (or a `dup` of it),
/// as the kernel shares a uverbs file: PDs and MRs made in either are imported into the
/// other by handle (`ibv_import_pd`, `ibv_import_mr`), and they go with the last of the
/// contexts. The new context owns `cmd_fd` and closes it with itself, as rdma-core's
/// does. A descriptor that is no rnic context's (another process's, or not a context's at
/// all) is refused with EINVAL: contexts are shared within one process.
#[no_mangle]
pub unsafe extern "C" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
    guard(null_mut(), || {
        if cmd_fd < 0 {
            set_errno(libc::EBADF);
            return null_mut();
        }
        // SAFETY: the caller hands us an open descriptor (rdma-core's contract), which we
        // only borrow to find what it is.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(cmd_fd) };
        let Some(sh) = by_cmd_fd(borrowed) else {
            diag(format!(
                "ibv_import_device({cmd_fd}): not the cmd_fd of an open rnic context of this process (rnic shares a context within one process)"
            ));
            set_errno(libc::EINVAL);
            return null_mut();
        };
        sh.contexts.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let device = std::ptr::addr_of!(sh.dev.ibv).cast_mut();
        // SAFETY: the program gives the descriptor to the context (rdma-core's contract:
        // ibv_close_device closes it).
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(cmd_fd) };
        context_on(sh, device, fd)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    if context.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a context from ibv_open_device, not used again by the program.
    let ctx = unsafe { context.cast::<u8>().sub(offset_of!(verbs_context, context)).cast::<Ctx>() };
    // SAFETY: allocated by Box in ibv_open_device or ibv_import_device.
    let ctx = unsafe { Box::from_raw(ctx) };
    // The objects go with the last context that shares them (an imported one included).
    if ctx.sh.contexts.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
        guard((), || close_objects(&ctx.sh));
    }
    // rdma-core's ibv_close_device always succeeds.
    0
}

/// What the kernel does to a context closed with objects alive (uverbs destroys every
/// object of the file, whatever the program still holds): its QPs are destroyed in the
/// engine and its MRs deregistered, so none of them moves data or touches the program's
/// memory again, and every object is freed, so nothing keeps the device running for
/// it; the device and the other contexts on it go on. As with rdma-core (which frees
/// the context they point to), the program may not use them afterwards.
fn close_objects(sh: &CtxShared) {
    if !sh.has_objects() {
        return;
    }
    let take = |m: &Mutex<HashMap<u32, usize>>| std::mem::take(&mut *m.lock());
    let (qps, srqs, mrs, cqs, pds) = (take(&sh.qps), take(&sh.srqs), take(&sh.mrs), take(&sh.cqs), take(&sh.pds));
    let ahs = std::mem::take(&mut *sh.ahs.lock());
    let (xrcds, opened) = (std::mem::take(&mut *sh.xrcds.lock()), std::mem::take(&mut *sh.opened_qps.lock()));
    diag(format!(
        "ibv_close_device: {}: the context still held {} QP(s), {} SRQ(s), {} MR(s), {} CQ(s), {} AH(s), {} PD(s) and {} XRC domain(s); destroyed with it",
        sh.dev.info.name,
        qps.len() + opened.len(),
        srqs.len(),
        mrs.len(),
        cqs.len(),
        ahs.len(),
        pds.len(),
        xrcds.len()
    ));
    // Children before parents, as uverbs orders its teardown: QPs (an XRC target's
    // handles among them), SRQs (XRC SRQs among them), then the XRC domains they named.
    qps.into_values().chain(opened.into_keys()).for_each(qp::free_with_context);
    srqs.into_values().for_each(qp::free_srq_with_context);
    xrcds.into_iter().for_each(xrcd::free_with_context);
    mrs.into_values().for_each(mr::free_with_context);
    ahs.into_iter().for_each(ah::free_with_context);
    cqs.into_values().for_each(cq::free_with_context);
    pds.into_values().for_each(pd::free_with_context);
}

fn device_attr(dev: &Dev) -> ibv_device_attr {
    // The caps of a device as this library opens it (the default configuration's MTPT).
    let c = DeviceCaps::default();
    let int = |v: u32| c_int::try_from(v).unwrap_or(c_int::MAX);
    let mut a = ibv_device_attr::default();
    copy_cstr(&mut a.fw_ver, c.fw_ver);
    a.node_guid = dev.info.node_guid().to_be();
    a.sys_image_guid = a.node_guid;
    a.max_mr_size = c.max_mr_size;
    a.page_size_cap = c.page_size_cap;
    a.vendor_id = c.vendor_id;
    a.vendor_part_id = c.vendor_part_id;
    a.hw_ver = c.hw_ver;
    a.max_qp = int(c.max_qp);
    a.max_qp_wr = int(c.max_qp_wr);
    // BAD_PKEY_CNTR | BAD_QKEY_CNTR | SYS_IMAGE_GUID | RC_RNR_NAK_GEN | N_NOTIFY_CQ |
    // MEM_WINDOW | MEM_MGT_EXTENSIONS (LOCAL_INV, SEND with Invalidate) |
    // MEM_WINDOW_TYPE_2B (rxe's set of the same) | XRC
    a.device_cap_flags =
        (1 << 1) | (1 << 2) | (1 << 11) | (1 << 12) | (1 << 14) | (1 << 17) | (1 << 20) | (1 << 21) | (1 << 24);
    a.max_sge = int(c.max_sge);
    a.max_sge_rd = int(c.max_sge_rd);
    a.max_cq = int(c.max_cq);
    a.max_cqe = int(c.max_cqe);
    a.max_mr = int(c.max_mr);
    a.max_pd = int(c.max_pd);
    a.max_mw = int(c.max_mw);
    a.max_qp_rd_atom = int(c.max_qp_rd_atom);
    a.max_res_rd_atom = int(c.max_res_rd_atom);
    a.max_qp_init_rd_atom = int(c.max_qp_init_rd_atom);
    a.atomic_cap = IBV_ATOMIC_HCA;
    a.max_ah = int(c.max_ah);
    a.max_srq = int(c.max_srq);
    a.max_srq_wr = int(c.max_srq_wr);
    a.max_srq_sge = int(c.max_srq_sge);
    a.max_mcast_grp = int(c.max_mcast_grp);
    a.max_mcast_qp_attach = int(c.max_mcast_qp_attach);
    a.max_total_mcast_qp_attach = int(c.max_total_mcast_qp_attach);
    a.max_pkeys = c.max_pkeys;
    a.local_ca_ack_delay = c.local_ca_ack_delay;
    a.phys_port_cnt = c.phys_port_cnt;
    a
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int {
    // SAFETY: a context we handed out.
    let Some(ctx) = (unsafe { ctx_of(context) }) else { return libc::EINVAL };
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's struct.
    unsafe { attr.write(device_attr(ctx.sh.dev)) };
    0
}

/// `ibv_query_rt_values_ex`: the device clock (`CLOCK_MONOTONIC`, what completions are
/// stamped with) as `raw_clock`; other values are not offered (their bits are cleared).
unsafe extern "C" fn query_rt_values(context: *mut ibv_context, values: *mut ibv_values_ex) -> c_int {
    // SAFETY: a context we handed out.
    if unsafe { ctx_of(context) }.is_none() || values.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's struct.
    let v = unsafe { &mut *values };
    if v.comp_mask & !IBV_VALUES_MASK_RAW_CLOCK != 0 {
        v.comp_mask &= IBV_VALUES_MASK_RAW_CLOCK;
    }
    if v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK != 0 {
        let ns = rnic_io::time::monotonic_ns();
        v.raw_clock.tv_sec = (ns / 1_000_000_000) as libc::time_t;
        v.raw_clock.tv_nsec = (ns % 1_000_000_000) as libc::c_long;
    }
    0
}

unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    _input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: size_t,
) -> c_int {
    // SAFETY: a context we handed out.
    let Some(ctx) = (unsafe { ctx_of(context) }) else { return libc::EINVAL };
    if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
        return libc::EINVAL;
    }
    let orig = device_attr(ctx.sh.dev);
    let ex = ibv_device_attr_ex {
        device_cap_flags_ex: u64::from(orig.device_cap_flags),
        orig_attr: orig,
        phys_port_cnt_ex: 1,
        // Completions are stamped with CLOCK_MONOTONIC nanoseconds: a 1 GHz clock of
        // 64 bits.
        completion_timestamp_mask: u64::MAX,
        hca_core_clock: 1_000_000,
        max_dm_size: DeviceCaps::MAX_DM_SIZE,
        // Every region is on demand: nothing is pinned, the device touches the program's
        // pages as the program does; an implicit region (the whole address space) is
        // reached through the kernel's checked copies.
        odp_caps: {
            let all = IBV_ODP_SUPPORT_SEND
                | IBV_ODP_SUPPORT_RECV
                | IBV_ODP_SUPPORT_WRITE
                | IBV_ODP_SUPPORT_READ
                | IBV_ODP_SUPPORT_ATOMIC
                | IBV_ODP_SUPPORT_SRQ_RECV;
            ibv_odp_caps {
                general_caps: IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT,
                per_transport_caps: ibv_odp_caps_per_transport {
                    rc_odp_caps: all,
                    uc_odp_caps: all & !(IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC),
                    ud_odp_caps: IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV,
                },
            }
        },
        // XRC's operations are RC's, over the same on-demand regions.
        xrc_odp_caps: IBV_ODP_SUPPORT_SEND
            | IBV_ODP_SUPPORT_WRITE
            | IBV_ODP_SUPPORT_READ
            | IBV_ODP_SUPPORT_ATOMIC
            | IBV_ODP_SUPPORT_SRQ_RECV,
        ..Default::default()
    };
    let n = attr_size.min(size_of::<ibv_device_attr_ex>());
    // SAFETY: the caller's struct holds `attr_size` bytes; we copy at most that many, and
    // zero anything past our struct (a newer header's fields: none supported).
    unsafe {
        std::ptr::copy_nonoverlapping(std::ptr::from_ref(&ex).cast::<u8>(), attr.cast::<u8>(), n);
        if attr_size > n {
            std::ptr::write_bytes(attr.cast::<u8>().add(n), 0, attr_size - n);
        }
    }
    0
}

/// The active MTU of a raw Ethernet device's port (`ibv_mtu`): the largest path MTU its
/// interface's MTU carries, as the device itself computes it; 4096 over UDP.
fn active_mtu(info: &DeviceInfo) -> u32 {
    let Some(n) = info.netdev.as_deref() else { return IBV_MTU_4096 };
    let mtu = std::fs::read_to_string(format!("/sys/class/net/{n}/mtu")).ok().and_then(|t| t.trim().parse().ok());
    rnic_core::device::Interface::port_mtu(mtu.unwrap_or(0), info.ip.is_ipv6()).map_or(IBV_MTU_4096, |m| m.to_ibv())
}

fn port_attr(dev: &Dev) -> ibv_port_attr {
    // SAFETY: all-zero is a valid ibv_port_attr (integers).
    let mut p: ibv_port_attr = unsafe { std::mem::zeroed() };
    p.state = IBV_PORT_ACTIVE;
    p.max_mtu = IBV_MTU_4096;
    p.active_mtu = active_mtu(&dev.info);
    p.gid_tbl_len = 2;
    p.port_cap_flags = 1 << 16; // IB_PORT_CM_SUP
    p.max_msg_sz = 1 << 31;
    p.pkey_tbl_len = 1;
    p.max_vl_num = 1;
    p.active_width = 2; // 4X
    p.active_speed = 32; // EDR
    p.phys_state = 5; // LinkUp
    p.link_layer = IBV_LINK_LAYER_ETHERNET;
    p
}

unsafe extern "C" fn query_port_ex(
    context: *mut ibv_context,
    port_num: u8,
    attr: *mut ibv_port_attr,
    attr_size: size_t,
) -> c_int {
    // SAFETY: a context we handed out.
    let Some(ctx) = (unsafe { ctx_of(context) }) else { return libc::EINVAL };
    if port_num != 1 || attr.is_null() {
        return libc::EINVAL;
    }
    let p = port_attr(ctx.sh.dev);
    let n = attr_size.min(size_of::<ibv_port_attr>());
    // SAFETY: the caller's struct holds `attr_size` bytes.
    unsafe { std::ptr::copy_nonoverlapping(std::ptr::from_ref(&p).cast::<u8>(), attr.cast::<u8>(), n) };
    0
}

/// The exported `ibv_query_port@IBVERBS_1.1` fills the older, shorter struct (everything
/// before `port_cap_flags2`); the header's inline `ibv_query_port` calls the context's
/// `query_port` with the full one.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(context: *mut ibv_context, port_num: u8, attr: *mut c_void) -> c_int {
    // SAFETY: forwards the caller's pointers with the compat struct's size.
    unsafe { query_port_ex(context, port_num, attr.cast(), offset_of!(ibv_port_attr, port_cap_flags2)) }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    // SAFETY: a context we handed out.
    let Some(ctx) = (unsafe { ctx_of(context) }) else { return -1 };
    let g = u32::try_from(index).ok().and_then(|i| ctx.sh.dev.info.gid(i)).map(|g| g.0);
    match g {
        Some(g) if port_num == 1 && !gid.is_null() => {
            // SAFETY: the caller's 16-byte GID.
            unsafe { (*gid).raw = g };
            0
        }
        _ => {
            set_errno(libc::EINVAL);
            -1
        }
    }
}

fn gid_entry(dev: &Dev, index: u32) -> Option<ibv_gid_entry> {
    let g = dev.info.gid(index)?.0;
    let mut e = ibv_gid_entry::default();
    e.gid.raw = g;
    e.gid_index = index;
    e.port_num = 1;
    e.gid_type = IBV_GID_TYPE_ROCE_V2;
    // The interface the address is on: loopback for the default devices.
    e.ndev_ifindex = if dev.info.ip.is_loopback() { 1 } else { 0 };
    Some(e)
}

#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    _flags: u32,
    entry_size: size_t,
) -> c_int {
    // SAFETY: a context we handed out.
    let Some(ctx) = (unsafe { ctx_of(context) }) else { return libc::EINVAL };
    if port_num != 1 || entry.is_null() || entry_size < size_of::<ibv_gid_entry>() {
        return libc::EINVAL;
    }
    match gid_entry(ctx.sh.dev, gid_index) {
        Some(e) => {
            // SAFETY: the caller's entry, at least our size.
            unsafe { entry.write(e) };
            0
        }
        None => libc::ENODATA,
    }
}

#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: size_t,
    _flags: u32,
    entry_size: size_t,
) -> ssize_t {
    // SAFETY: a context we handed out.
    let Some(ctx) = (unsafe { ctx_of(context) }) else { return -(libc::EINVAL as ssize_t) };
    if entries.is_null() || entry_size < size_of::<ibv_gid_entry>() {
        return -(libc::EINVAL as ssize_t);
    }
    let mut n = 0usize;
    for i in 0..2u32 {
        if n >= max_entries {
            return -(libc::EINVAL as ssize_t);
        }
        if let Some(e) = gid_entry(ctx.sh.dev, i) {
            // SAFETY: entry n of the caller's array of `max_entries` entries of `entry_size`.
            unsafe { entries.cast::<u8>().add(n * entry_size).cast::<ibv_gid_entry>().write(e) };
            n += 1;
        }
    }
    n as ssize_t
}

/// `ibv_query_gid_type` (IBVERBS_PRIVATE_34, used by ibv_devinfo): every GID is RoCE v2
/// (`IBV_GID_TYPE_SYSFS_ROCE_V2` = 1).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port_num: u8,
    index: u32,
    ty: *mut c_int,
) -> c_int {
    // SAFETY: a context we handed out.
    let Some(ctx) = (unsafe { ctx_of(context) }) else { return -1 };
    if port_num != 1 || ty.is_null() || ctx.sh.dev.info.gid(index).is_none() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the caller's out-parameter.
    unsafe { *ty = 1 };
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    // SAFETY: a context we handed out.
    if unsafe { ctx_of(context) }.is_none() || port_num != 1 || index != 0 || pkey.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // The default P_Key, network order (the same bytes either way).
    // SAFETY: the caller's out-parameter.
    unsafe { *pkey = 0xffff };
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(context: *mut ibv_context, port_num: u8, pkey: u16) -> c_int {
    // SAFETY: a context we handed out.
    if unsafe { ctx_of(context) }.is_none() || port_num != 1 {
        set_errno(libc::EINVAL);
        return -1;
    }
    if pkey | 0x0080 == 0xffff {
        0
    } else {
        set_errno(libc::ENOENT);
        -1
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int {
    // SAFETY: a context we handed out.
    let Some(ctx) = (unsafe { ctx_of(context) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if event.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    let sh = &ctx.sh;
    loop {
        let next = sh.pop_event();
        if let Some((ty, element)) = next {
            let mut ev = ibv_async_event { event_type: ty, ..Default::default() };
            ev.element = match ty {
                IBV_EVENT_CQ_ERR => ibv_async_event_element { cq: element as *mut ibv_cq },
                IBV_EVENT_SRQ_LIMIT_REACHED | IBV_EVENT_SRQ_ERR => {
                    ibv_async_event_element { srq: element as *mut ibv_srq }
                }
                _ => ibv_async_event_element { qp: element as *mut ibv_qp },
            };
            // SAFETY: the caller's struct.
            unsafe { event.write(ev) };
            return 0;
        }
        if sh.async_fd.nonblocking() {
            set_errno(libc::EAGAIN);
            return -1;
        }
        sh.async_fd.wait(None);
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {
    // Nothing to count: destroying an object never waits for its events here.
}
