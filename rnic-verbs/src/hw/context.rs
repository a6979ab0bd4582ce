//! An open libibverbs device (`ibv_context`): queries, the GID table, counters, async
//! events, and the factories for PDs, CQs and completion channels.

use super::convert::AccessFlags;
use super::event::{HwAsyncEvent, HwEventElement};
use super::{verbs, HwDeviceInfoKind, HwError, HwResult};
use rnic_verbs_sys::{self as sys, ibv_context, Verbs};
use std::fmt;
use std::net::IpAddr;
use std::os::raw::c_char;
use std::sync::Arc;
use std::time::Duration;

/// A device libibverbs lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HwDeviceInfo {
    /// Kernel device name (`rxe0`, `mlx5_0`).
    pub name: String,
    /// Node GUID (host order of the bytes as `ibv_devinfo` prints them).
    pub guid: u64,
    /// Node and transport type.
    pub kind: HwDeviceInfoKind,
    /// sysfs directory of the device (`/sys/class/infiniband/rxe0`).
    pub ibdev_path: String,
}

fn c_string(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `ibv_get_device_list`, calling `f` with the list before freeing it.
fn with_device_list<T>(v: &'static Verbs, f: impl FnOnce(&[*mut sys::ibv_device]) -> T) -> HwResult<T> {
    let mut n: libc::c_int = 0;
    // SAFETY: `n` is writable; the call returns a NULL-terminated array or null.
    let list = unsafe { (v.ibv_get_device_list)(&mut n) };
    if list.is_null() {
        // No uverbs devices at all is ENOSYS in some versions: an empty list, not an error.
        let err = std::io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::ENOSYS) | Some(libc::ENOENT) | None => Ok(f(&[])),
            _ => Err(HwError::Call { op: "ibv_get_device_list".into(), source: err }),
        };
    }
    let len = usize::try_from(n).unwrap_or(0);
    // SAFETY: the library returned `n` device pointers followed by null.
    let devs = unsafe { std::slice::from_raw_parts(list, len) };
    let r = f(devs);
    // SAFETY: `list` came from ibv_get_device_list and is freed once; opened contexts stay valid.
    unsafe { (v.ibv_free_device_list)(list) };
    Ok(r)
}

fn device_info(v: &'static Verbs, d: *mut sys::ibv_device) -> HwDeviceInfo {
    // SAFETY: `d` is an element of a live device list.
    let dev = unsafe { &*d };
    // SAFETY: as above; the GUID call only reads the device.
    let guid = u64::from_be(unsafe { (v.ibv_get_device_guid)(d) });
    HwDeviceInfo {
        name: c_string(&dev.name),
        guid,
        kind: HwDeviceInfoKind { node_type: dev.node_type, transport_type: dev.transport_type },
        ibdev_path: c_string(&dev.ibdev_path),
    }
}

pub(super) fn list_devices() -> HwResult<Vec<HwDeviceInfo>> {
    let v = verbs()?;
    with_device_list(v, |devs| devs.iter().map(|&d| device_info(v, d)).collect())
}

pub(super) struct CtxInner {
    pub(super) v: &'static Verbs,
    pub(super) ctx: *mut ibv_context,
    pub(super) info: HwDeviceInfo,
}

// SAFETY: an ibv_context may be used from any thread (libibverbs and its providers lock
// internally); the pointer is only freed in Drop, when no handle remains.
unsafe impl Send for CtxInner {}
// SAFETY: as above.
unsafe impl Sync for CtxInner {}

impl Drop for CtxInner {
    fn drop(&mut self) {
        // SAFETY: every child object holds an Arc to this context, so none is left; the
        // context is closed once.
        unsafe { (self.v.ibv_close_device)(self.ctx) };
    }
}

/// An open hardware device. Clones share it; it is closed with the last handle (PDs, CQs,
/// QPs, ... hold one).
#[derive(Clone)]
pub struct HwContext {
    pub(super) inner: Arc<CtxInner>,
}

impl fmt::Debug for HwContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HwContext").field("name", &self.inner.info.name).finish_non_exhaustive()
    }
}

/// One GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwGid {
    /// Index in the port's table.
    pub index: u32,
    /// The 16 bytes, network order.
    pub gid: [u8; 16],
    /// `IBV_GID_TYPE_*` (2: RoCE v2) when rdma-core reports it (`ibv_query_gid_ex`).
    pub gid_type: Option<u32>,
}

impl HwGid {
    /// The address a RoCE GID stands for (`::ffff:a.b.c.d` is IPv4).
    pub fn ip(&self) -> IpAddr {
        let a = std::net::Ipv6Addr::from(self.gid);
        match a.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(a),
        }
    }
}

/// Waits until `fd` is readable or `timeout` passes; false on timeout.
pub(super) fn wait_readable(fd: libc::c_int, timeout: Duration, op: &'static str) -> HwResult<bool> {
    let deadline = std::time::Instant::now() + timeout;
    // SAFETY: `fd` is a descriptor of a live libibverbs object (the context's async fd, a
    // channel's fd), open for as long as this call, which is all the borrow lasts.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rnic_io::wait_readable(&[fd], Some(left)) {
            Ok(true) => return Ok(true),
            Ok(false) if left.is_zero() || std::time::Instant::now() >= deadline => return Ok(false),
            // Interrupted by a signal: wait out the rest.
            Ok(false) => {}
            Err(source) => return Err(HwError::Call { op: op.into(), source }),
        }
    }
}

impl HwContext {
    /// Opens the libibverbs device named `name` (`rxe0`, `mlx5_0`).
    pub fn open(name: &str) -> HwResult<HwContext> {
        let v = verbs()?;
        let found = with_device_list(v, |devs| {
            let infos: Vec<HwDeviceInfo> = devs.iter().map(|&d| device_info(v, d)).collect();
            match devs.iter().zip(&infos).find(|(_, i)| i.name == name) {
                Some((&d, info)) => {
                    // SAFETY: `d` is a live list element; the context outlives the list.
                    let ctx = unsafe { (v.ibv_open_device)(d) };
                    if ctx.is_null() {
                        Err(HwError::last_os(format!("ibv_open_device({name})")))
                    } else {
                        Ok((ctx, info.clone()))
                    }
                }
                None => Err(HwError::NoSuchDevice {
                    name: name.into(),
                    known: if infos.is_empty() {
                        "no devices".into()
                    } else {
                        infos.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(", ")
                    },
                }),
            }
        })??;
        Ok(HwContext { inner: Arc::new(CtxInner { v, ctx: found.0, info: found.1 }) })
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.inner.info.name
    }

    /// What libibverbs listed about the device.
    pub fn info(&self) -> &HwDeviceInfo {
        &self.inner.info
    }

    /// The raw context, for calls this module does not wrap. It stays valid while `self`
    /// (or any handle made from it) lives.
    pub fn as_ptr(&self) -> *mut ibv_context {
        self.inner.ctx
    }

    pub(super) fn verbs(&self) -> &'static Verbs {
        self.inner.v
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> HwResult<sys::ibv_device_attr> {
        let mut a = sys::ibv_device_attr::default();
        // SAFETY: a live context and a writable attribute struct.
        let r = unsafe { (self.inner.v.ibv_query_device)(self.inner.ctx, &mut a) };
        if r != 0 {
            return Err(HwError::ret("ibv_query_device", r));
        }
        Ok(a)
    }

    /// `ibv_query_port` (the header's inline: the full attributes through the provider).
    pub fn query_port(&self, port: u8) -> HwResult<sys::ibv_port_attr> {
        let mut a = sys::ibv_port_attr::default();
        // SAFETY: a live context and a writable attribute struct.
        let r = unsafe { sys::ops::query_port(self.inner.v, self.inner.ctx, port, &mut a) };
        if r != 0 {
            return Err(HwError::ret(format!("ibv_query_port(port {port})"), r));
        }
        Ok(a)
    }

    /// GID `index` of `port` (`ibv_query_gid`, and its type through `ibv_query_gid_ex`
    /// where rdma-core has it).
    pub fn gid(&self, port: u8, index: u32) -> HwResult<HwGid> {
        let mut g = sys::ibv_gid::from_bytes([0; 16]);
        let idx = libc::c_int::try_from(index)
            .map_err(|_| HwError::InvalidArgument { op: "query GID", why: format!("index {index} too large") })?;
        // SAFETY: a live context and a writable GID.
        let r = unsafe { (self.inner.v.ibv_query_gid)(self.inner.ctx, port, idx, &mut g) };
        if r != 0 {
            return Err(HwError::ret(format!("ibv_query_gid(port {port}, index {index})"), r));
        }
        let gid_type = self.inner.v._ibv_query_gid_ex.and_then(|f| {
            let mut e = sys::ibv_gid_entry::default();
            // SAFETY: a live context and a writable entry of the size passed.
            let r = unsafe {
                f(self.inner.ctx, u32::from(port), index, &mut e, 0, std::mem::size_of::<sys::ibv_gid_entry>())
            };
            (r == 0).then_some(e.gid_type)
        });
        Ok(HwGid { index, gid: g.bytes(), gid_type })
    }

    /// The non-zero entries among the first `n` of `port`'s GID table (rxe's table has 1024
    /// entries; the ones in use come first).
    pub fn gids(&self, port: u8, n: u32) -> HwResult<Vec<HwGid>> {
        let len = u32::try_from(self.query_port(port)?.gid_tbl_len).unwrap_or(0);
        let mut out = Vec::new();
        for i in 0..n.min(len) {
            match self.gid(port, i) {
                Ok(g) if g.gid != [0; 16] => out.push(g),
                Ok(_) => {}
                // An unused entry may read as an error (EINVAL/ENODATA): skip it.
                Err(HwError::Call { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// The GID index to use as source for traffic to `remote` on `port`: the first RoCE v2
    /// entry of the same IP family (IPv4-mapped for an IPv4 peer), as `-g 1` picks on rxe.
    pub fn gid_index_for(&self, port: u8, remote: IpAddr) -> HwResult<u8> {
        let gids = self.gids(port, 16)?;
        let v2 = |g: &&HwGid| g.gid_type.is_none_or(|t| t == sys::IBV_GID_TYPE_ROCE_V2);
        gids.iter()
            .filter(v2)
            .find(|g| g.ip().is_ipv4() == remote.is_ipv4())
            .and_then(|g| u8::try_from(g.index).ok())
            .ok_or_else(|| HwError::InvalidArgument {
                op: "choose source GID",
                why: format!(
                    "{} port {port} has no RoCE v2 GID of {remote}'s IP family among {:?}",
                    self.name(),
                    gids.iter().map(|g| (g.index, g.ip())).collect::<Vec<_>>()
                ),
            })
    }

    /// The port's hardware counters as the kernel driver exposes them in sysfs
    /// (`ports/N/hw_counters/*` for rxe, `ports/N/counters/*` too for mlx5); empty when the
    /// device has none.
    pub fn counters(&self, port: u8) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        for dir in ["hw_counters", "counters"] {
            let path = format!("{}/ports/{port}/{dir}", self.inner.info.ibdev_path);
            let Ok(rd) = std::fs::read_dir(&path) else { continue };
            let mut names: Vec<_> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
            names.sort();
            for p in names {
                let Some(name) = p.file_name().and_then(|n| n.to_str()).map(str::to_string) else { continue };
                if let Some(v) = std::fs::read_to_string(&p).ok().and_then(|s| s.trim().parse().ok()) {
                    out.push((name, v));
                }
            }
        }
        out
    }

    /// The next asynchronous event, waiting up to `timeout` (`ibv_get_async_event` on a
    /// readable `async_fd`); acknowledged before it is returned.
    pub fn get_async_event(&self, timeout: Duration) -> HwResult<HwAsyncEvent> {
        // SAFETY: a live context.
        let fd = unsafe { (*self.inner.ctx).async_fd };
        if !wait_readable(fd, timeout, "poll(async_fd)")? {
            return Err(HwError::Timeout(timeout));
        }
        let mut ev = sys::ibv_async_event::default();
        // SAFETY: a live context and a writable event; the fd is readable, so this does not block.
        let r = unsafe { (self.inner.v.ibv_get_async_event)(self.inner.ctx, &mut ev) };
        if r != 0 {
            return Err(HwError::last_os("ibv_get_async_event"));
        }
        let t = ev.event_type;
        // SAFETY: the union member read is the one `event_type` says is valid; a non-null
        // object pointer stays valid until the event is acknowledged below.
        let element = unsafe {
            match t {
                sys::IBV_EVENT_CQ_ERR if !ev.element.cq.is_null() => HwEventElement::Cq((*ev.element.cq).handle),
                sys::IBV_EVENT_QP_FATAL
                | sys::IBV_EVENT_QP_REQ_ERR
                | sys::IBV_EVENT_QP_ACCESS_ERR
                | sys::IBV_EVENT_COMM_EST
                | sys::IBV_EVENT_SQ_DRAINED
                | sys::IBV_EVENT_PATH_MIG
                | sys::IBV_EVENT_PATH_MIG_ERR
                | sys::IBV_EVENT_QP_LAST_WQE_REACHED
                    if !ev.element.qp.is_null() =>
                {
                    HwEventElement::Qp((*ev.element.qp).qp_num)
                }
                sys::IBV_EVENT_SRQ_ERR | sys::IBV_EVENT_SRQ_LIMIT_REACHED if !ev.element.srq.is_null() => {
                    HwEventElement::Srq((*ev.element.srq).handle)
                }
                sys::IBV_EVENT_PORT_ACTIVE
                | sys::IBV_EVENT_PORT_ERR
                | sys::IBV_EVENT_LID_CHANGE
                | sys::IBV_EVENT_PKEY_CHANGE
                | sys::IBV_EVENT_SM_CHANGE
                | sys::IBV_EVENT_CLIENT_REREGISTER
                | sys::IBV_EVENT_GID_CHANGE => HwEventElement::Port(u8::try_from(ev.element.port_num).unwrap_or(0)),
                _ => HwEventElement::Device,
            }
        };
        // SAFETY: the event came from ibv_get_async_event and is acknowledged once.
        unsafe { (self.inner.v.ibv_ack_async_event)(&mut ev) };
        Ok(HwAsyncEvent { event_type: t, name: self.inner.v.event_type_str(t), element })
    }

    /// The next asynchronous event if one is pending, without waiting.
    pub fn poll_async_event(&self) -> HwResult<Option<HwAsyncEvent>> {
        match self.get_async_event(Duration::ZERO) {
            Ok(e) => Ok(Some(e)),
            Err(HwError::Timeout(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether the device can register memory with these rights (the FLUSH rights need
    /// an rdma-core newer than 44).
    pub fn check_access(&self, access: AccessFlags) -> HwResult<u32> {
        super::convert::access_to_ibv(access)
    }
}
