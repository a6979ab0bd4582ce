//! # rnic-verbs: a verbs-like API over the rnic emulated RoCEv2 HCA
//!
//! The shapes follow libibverbs (and rust-ibverbs): a device [`Context`], protection
//! domains, memory regions, completion queues and queue pairs. Handles own their
//! parents through `Arc`, so a QP keeps its PD, CQs and device alive, and any of them can
//! be stored together in one struct.
//!
//! Bringing up an RC connection takes three steps:
//! 1. [`ProtectionDomain::qp_builder`] ... [`QpBuilder::build`] gives a [`PreparedQp`]
//!    (in INIT) whose [`Endpoint`] (QPN, GID, PSN; serde) you send to the peer out of
//!    band;
//! 2. [`PreparedQp::connect`] with the peer's endpoint moves it INIT -> RTR -> RTS;
//! 3. post work requests and poll completions on the [`QueuePair`].
//!
//! [`QueuePair::modify`] is the checked escape hatch for everything else.
//!
//! UC uses the same steps with `.qp_type(QpType::Uc)` (SEND and RDMA WRITE, no READ, no
//! acknowledgements: a lost packet loses its message silently). UD is not connected:
//! `.qp_type(QpType::Ud).qkey(..)`, then [`PreparedQp::activate`]; each send names its
//! destination with an [`AddressHandle`] ([`ProtectionDomain::create_ah`]) and the remote
//! QPN and Q_Key, and every receive buffer starts with [`GRH_LEN`] bytes of GRH:
//!
//! ```no_run
//! use rnic_verbs::*;
//! # let ctx = Context::open("rnic0")?;
//! # let pd = ctx.alloc_pd()?;
//! # let cq = ctx.create_cq(64)?;
//! # let mr = pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE)?;
//! # let peer: Endpoint = unimplemented!();
//! let qp = pd.qp_builder(&cq, &cq).qp_type(QpType::Ud).qkey(0x1111_1111).build()?.activate()?;
//! qp.post_recv(&RecvWr { wr_id: 1, sg_list: vec![mr.sge(0, (GRH_LEN + 1024) as u32)] })?;
//! let ah = pd.create_ah(peer.gid)?;       // the peer's GID (from its Endpoint)
//! qp.post_send(&SendWr::send(2, vec![mr.sge(2048, 64)]).to(ah.dest(peer.qpn, 0x1111_1111)))?;
//! # Ok::<(), rnic_verbs::Error>(())
//! ```
//!
//! ```no_run
//! use rnic_verbs::*;
//! let ctx = Context::open("rnic0")?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(64)?;
//! let mr = pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
//! let prepared = pd.qp_builder(&cq, &cq).build()?;
//! let mine = prepared.endpoint();          // send this to the peer...
//! # let theirs = mine.clone();
//! let qp = prepared.connect(&theirs)?;     // ...and connect with theirs
//! qp.post_send(&SendWr::send(1, vec![mr.sge(0, 64)]))?;
//! # Ok::<(), rnic_verbs::Error>(())
//! ```
#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
// Without the hardware backend every handle's backend enum has one variant.
#![cfg_attr(not(feature = "hw"), allow(irrefutable_let_patterns))]

#[cfg(feature = "hw")]
pub mod hw;

mod ah;
mod channel;
mod cm;
mod context;
mod cq;
mod discovery;
mod dm;
mod error;
mod mr;
mod mw;
mod pd;
mod qp;
mod srq;
mod types;
mod xrcd;

pub use ah::AddressHandle;
pub use channel::CompChannel;
pub use cm::{
    CmEvent, ConnectRequest, Connection, UdRemote, UdRequest, RDMA_UDP_QKEY, REQ_PRIVATE_DATA, SIDR_PRIVATE_DATA,
};
pub use context::Context;
pub use cq::CompletionQueue;
pub use discovery::{devices, emulated_devices, parse_devices};
pub use dm::{DeviceMemory, DmBusy};
pub use error::{report, Error, Result};
pub use mr::MemoryRegion;
pub use mw::{MemoryWindow, MwType};
pub use pd::ProtectionDomain;
pub use qp::{PreparedQp, QpBuilder, QueuePair};
pub use srq::SharedReceiveQueue;
pub use types::{
    DeviceAttr, DeviceInfo, DeviceKind, Endpoint, Gid, PortAttr, RemoteMr, DEFAULT_QKEY, GRH_LEN, MULTICAST_QPN,
};
pub use xrcd::XrcDomain;

// The data both backends take and give: work requests and completions, QP attributes,
// access rights, states, events. They are defined once, in rnic-core, because the
// emulator consumes them as they are (no conversion on its posting path); the hardware
// backend converts them to and from the ibv_* structs in `hw::convert`.
pub use rnic_core::capture::Capture;
pub use rnic_core::engine::qp::{QpAttr, QpCap, PORT_MTU};
pub use rnic_core::engine::AsyncEvent;
pub use rnic_core::mr::{AccessFlags, Advice};
pub use rnic_core::qp_state::{PathMtu, QpAttrMask, QpState, QpType};
pub use rnic_core::srq::SrqError;
// What a program configures and what its errors carry, reachable from this crate alone:
// device configuration, fault-injection rules, the error causes, opcodes.
pub use rnic_core::device::{CongestionControl, DeviceConfig, DeviceError, Interface, TransportInfo, CC_LINE_RATE};
pub use rnic_core::engine::qp::PostError;
pub use rnic_core::engine::EngineError;
pub use rnic_core::engine::QpRate;
pub use rnic_core::faults::{Fault, FaultHandle, Faults};
/// Where a ping-pong hop's time goes (cycle counters at fixed steps; the cargo feature
/// `hop-trace` turns them on, otherwise every function is empty).
pub use rnic_core::hop_trace;
pub use rnic_core::wr::{
    NetworkHdr, RecvWr, RecvWrRef, SendFlags, SendOp, SendWr, SendWrRef, Sge, UdDest, WcFlags, WcOpcode, WcStatus,
    WorkCompletion, FLUSH_GLOBAL, FLUSH_PERSISTENT,
};
pub use rnic_wire::Opcode;
