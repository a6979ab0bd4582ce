//! # The hardware backend (cargo feature `hw`): real RDMA devices through libibverbs
//!
//! Safe RAII handles over rdma-core's libibverbs, loaded at run time by
//! [`rnic_verbs_sys::Verbs`] (`dlopen("libibverbs.so.1")`, versioned `dlvsym`): the same
//! program builds everywhere and, where rdma-core is absent, [`devices`] and
//! [`HwContext::open`] return [`HwError::Load`] saying so. Any device libibverbs lists works:
//! Linux soft-RoCE (`rxe0`), mlx5, ... (rnic's own emulated devices are not libibverbs
//! devices; they stay behind [`crate::Context`]).
//!
//! ```text
//! devices() -> Vec<HwDeviceInfo>                  ibv_get_device_list (name, GUID, node/transport type)
//! HwContext::open("rxe0") -> HwContext            ibv_open_device by name
//!   .query_device() / .query_port(1)              ibv_query_device / ibv_query_port (raw ibv_* structs;
//!                                                 convert::device_attr / port_attr give rnic's types)
//!   .gid(1, i) / .gids(1, n) / .gid_index_for(ip) ibv_query_gid (+ the GID type where rdma-core has it)
//!   .counters()                                   the port's hw_counters from sysfs (rxe, mlx5)
//!   .alloc_pd() -> HwPd                           ibv_alloc_pd
//!   .open_xrcd() -> HwXrcd                        ibv_open_xrcd (no file)
//!   .alloc_dm(len) -> HwDm                        ibv_alloc_dm; .copy_to / .copy_from: the ibv_dm's memcpy
//!   .create_comp_channel() -> HwCompChannel       ibv_create_comp_channel
//!   .create_cq(n, Option<&chan>) -> HwCq          ibv_create_cq
//!   .get_async_event(t) / .poll_async_event()     poll(async_fd) + ibv_get_async_event + ack
//! HwPd .allocate_mr(len, access) -> HwMr          page-aligned memory the region owns + ibv_reg_mr
//!      unsafe .register_mr(ptr, len, access)      the caller's memory
//!      .allocate_mr_on_demand / register_mr_on_demand   the same with IBV_ACCESS_ON_DEMAND
//!      .advise_mr(advice, &[Sge])                 ibv_advise_mr (verbs_context, IBV_ADVISE_MR_FLAG_FLUSH)
//!      .register_dm_mr(&dm, offset, len, access)  ibv_reg_dm_mr (zero-based; read/write copy through the DM)
//! HwMr .rereg_pd(&pd) / .rereg_allocate(len) / unsafe .rereg_translation(ptr, len)
//!                                                 ibv_rereg_mr (the only handle: &mut self)
//!      .create_qp(&HwQpInit) -> HwQp              ibv_create_qp (RC, UC, UD; optional SRQ);
//!                                                 ibv_create_qp_ex for XRC initiators and targets
//!      .create_srq(max_wr, max_sge) -> HwSrq      ibv_create_srq
//!      .create_xrc_srq(&xrcd, &cq, ..) -> HwSrq   ibv_create_srq_ex (IBV_SRQT_XRC) + ibv_get_srq_num
//!      .create_ah(&ibv_ah_attr) / .ah_to(ip)      ibv_create_ah (ah_to: RoCE GRH to a GID, cached)
//! HwCq .poll(&mut [ibv_wc]) / .poll_wc(&mut [WorkCompletion]) / .wait(n, t)   ops.poll_cq
//!      .req_notify(solicited) / .ack_events(n)    ops.req_notify_cq / ibv_ack_cq_events
//! HwCompChannel .get_cq_event(t) -> HwCq          poll(fd) + ibv_get_cq_event
//! HwQp .modify(&QpAttr) / .modify_raw(attr, mask) / .query()                 ibv_modify_qp / ibv_query_qp
//!      .post_send(&[SendWr]) / .post_recv(&[RecvWr])                          ops.post_send / ops.post_recv
//! HwSrq .post_recv(&[RecvWr]) / .modify_limit(n) / .limit()                   ops.post_srq_recv / ibv_modify_srq
//! ```
//!
//! Every conversion between rnic-verbs' public types (`SendWr`, `RecvWr`,
//! `WorkCompletion`, `QpAttr`, `AccessFlags`, `AsyncEvent`, `DeviceAttr`, `PortAttr`, ...)
//! and the `ibv_*` structs is in [`convert`], and the other files of this module name
//! rnic-verbs' types only through it: reshaping the public types touches that file alone.
//!
//! Handles own their parents through `Arc` (a QP keeps its PD, CQs, SRQ and device alive)
//! and destroy their object when the last clone goes. They are `Send + Sync`: libibverbs
//! objects may be used from any thread (providers lock internally). Posting goes straight
//! to the provider's function in `context->ops`, as the static-inline verbs in verbs.h do.
//!
//! What rdma-core 44 cannot express through these verbs is refused with
//! [`HwError::Unsupported`] naming it: FLUSH and ATOMIC WRITE work requests (they exist only
//! as `ibv_wr_*` builders there, and Linux 6.1's rxe lacks them), FLUSH access flags.
//! Atomic results: rxe writes the original value in host order, as rnic's emulator does;
//! mlx5 writes it big-endian (the verbs leave the byte order to the device).

pub mod ah;
pub mod context;
pub mod convert;
pub mod cq;
pub mod dm;
pub mod event;
pub mod mr;
pub mod pd;
pub mod qp;
pub mod srq;
pub mod xrcd;

pub use ah::HwAh;
pub use context::{HwContext, HwDeviceInfo, HwGid};
pub use cq::{HwCompChannel, HwCq};
pub use dm::HwDm;
pub use event::{HwAsyncEvent, HwEventElement};
pub use mr::HwMr;
pub use pd::HwPd;
pub use qp::{HwQp, HwQpInit};
pub use rnic_verbs_sys as sys;
pub use srq::HwSrq;
pub use xrcd::HwXrcd;

use rnic_verbs_sys::{LoadError, Verbs};
use std::fmt;
use std::time::Duration;

/// Why a hardware verbs call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HwError {
    /// libibverbs is missing or too old.
    #[error("{0}")]
    Load(#[from] LoadError),
    /// No libibverbs device has this name.
    #[error("no RDMA device named {name:?} (libibverbs lists: {known})")]
    NoSuchDevice {
        /// The name asked for.
        name: String,
        /// The names listed.
        known: String,
    },
    /// A libibverbs call failed with an errno value.
    #[error("{op}: {source}")]
    Call {
        /// The verb (`ibv_reg_mr`, ...) and what it was for.
        op: String,
        /// The errno as an I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A posting call failed at work request `index` of the list (those before it were
    /// posted).
    #[error("{op}: work request {index} (wr_id {wr_id}) refused: {source}")]
    Post {
        /// `ibv_post_send`, `ibv_post_recv` or `ibv_post_srq_recv`.
        op: &'static str,
        /// Index of the refused work request in the list.
        index: usize,
        /// Its id.
        wr_id: u64,
        /// The errno.
        #[source]
        source: std::io::Error,
    },
    /// Something the device or libibverbs version cannot do.
    #[error("not supported by the hardware backend: {0}")]
    Unsupported(String),
    /// An argument was invalid.
    #[error("{op}: {why}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What was wrong.
        why: String,
    },
    /// Waiting for completions or events timed out.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

/// Result with [`HwError`].
pub type HwResult<T> = std::result::Result<T, HwError>;

impl HwError {
    /// The current `errno` as a failed call `op`.
    pub(crate) fn last_os(op: impl Into<String>) -> HwError {
        HwError::Call { op: op.into(), source: std::io::Error::last_os_error() }
    }

    /// A returned errno value (`ret` > 0; a negative value is negated, 0 or a value
    /// without a meaning becomes EIO) as a failed call `op`.
    pub(crate) fn ret(op: impl Into<String>, ret: i32) -> HwError {
        let code = match ret.checked_abs() {
            Some(c) if c > 0 => c,
            _ => libc::EIO,
        };
        HwError::Call { op: op.into(), source: std::io::Error::from_raw_os_error(code) }
    }
}

/// libibverbs, loaded once per process.
pub(crate) fn verbs() -> HwResult<&'static Verbs> {
    Ok(Verbs::get()?)
}

/// One device libibverbs lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HwDeviceInfoKind {
    /// `IBV_NODE_*` (1: CA).
    pub node_type: i32,
    /// `IBV_TRANSPORT_*` (0: IB, which includes RoCE).
    pub transport_type: i32,
}

impl fmt::Display for HwDeviceInfoKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let node = match self.node_type {
            rnic_verbs_sys::IBV_NODE_CA => "CA",
            rnic_verbs_sys::IBV_NODE_RNIC => "RNIC",
            rnic_verbs_sys::IBV_NODE_SWITCH => "switch",
            rnic_verbs_sys::IBV_NODE_ROUTER => "router",
            _ => "other",
        };
        let transport = match self.transport_type {
            rnic_verbs_sys::IBV_TRANSPORT_IB => "InfiniBand",
            rnic_verbs_sys::IBV_TRANSPORT_IWARP => "iWARP",
            _ => "other",
        };
        write!(f, "{node} ({transport})")
    }
}

/// The devices libibverbs lists (`ibv_get_device_list`), or the load error where rdma-core
/// is absent. An empty list is not an error (rdma-core without RDMA devices).
pub fn devices() -> HwResult<Vec<HwDeviceInfo>> {
    context::list_devices()
}
