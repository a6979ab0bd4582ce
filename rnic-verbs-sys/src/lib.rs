//! # rnic-verbs-sys: the libibverbs ABI, loaded at run time
//!
//! - [`types`]: `#[repr(C)]` copies of the structs, enums (as integer constants), flags and
//!   function-pointer types of rdma-core's `<infiniband/verbs.h>` (rdma-core 44, Debian
//!   bookworm) that rnic uses: `ibv_device`, `ibv_context` with the `verbs_context` laid out
//!   before it and its `ibv_context_ops`, `ibv_device_attr(_ex)`, `ibv_port_attr`,
//!   `ibv_gid`, `ibv_pd`, `ibv_mr`, `ibv_cq(_ex)`, `ibv_comp_channel`, `ibv_srq`,
//!   `ibv_qp(_ex)`, their init and attribute structs, `ibv_ah(_attr)`, `ibv_sge`,
//!   `ibv_send_wr` with its unions, `ibv_recv_wr`, `ibv_wc`, `ibv_async_event`. One copy of
//!   the ABI for both users: rnic-verbs' `hw` backend (which calls a real libibverbs) and a
//!   libibverbs-compatible library (which must export exactly these layouts).
//!   `tests/abi.rs` checks every size, alignment and field offset against the installed
//!   header with a C `offsetof` probe.
//! - [`Verbs`]: `dlopen("libibverbs.so.1")` and each exported function resolved with
//!   `dlvsym` at its rdma-core symbol version (`ibv_open_device@IBVERBS_1.1`, ...). No
//!   link-time dependency: a program using this crate starts on a machine without
//!   rdma-core and gets a [`LoadError`] naming what is missing.
//! - [`ops`]: the verbs the header defines `static inline` (`ibv_post_send`,
//!   `ibv_post_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_query_port`, ...), calling
//!   through `context->ops` and the `verbs_context` exactly as the header does.
//!
//! - [`rdmacm`]: the same for what programs read in `<rdma/rdma_cma.h>` (rdma_cm ids,
//!   events, routes, `rdma_addrinfo`), for rnic's `librdmacm.so.1`.
//!
//! Linux only (x86_64 and aarch64 share these layouts; the offset test runs wherever the
//! header is installed). Written from the header, not generated: no libclang at build time.
// Raw FFI records holding unions and pthread objects have no useful `Debug`; the rest derive it.
#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    clippy::upper_case_acronyms,
    missing_debug_implementations
)]
#![warn(missing_docs)]

pub mod loader;
pub mod ops;
pub mod rdmacm;
pub mod types;

pub use loader::{LoadError, Verbs, LIBIBVERBS};
pub use rdmacm::*;
pub use types::*;
