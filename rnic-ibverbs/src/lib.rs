//! # rnic-ibverbs: `libibverbs.so.1` on rnic's emulated devices
//!
//! Unmodified libibverbs programs (rdma-core's `ibv_*` examples, perftest, anything linked
//! against `libibverbs.so.1`) run on rnic when this library is found first on
//! `LD_LIBRARY_PATH`: `scripts/build-ibverbs.sh` links the crate's staticlib into
//! `target/rnic-ibverbs/libibverbs.so.1` with rdma-core's symbol versions
//! (`libibverbs.map`), and `rnic exec -- PROGRAM` runs a program with it.
//!
//! One copy of the ABI: the structs are `rnic-verbs-sys`'s (checked field by field against
//! the installed `<infiniband/verbs.h>`), the same ones the `hw` backend hands to a real
//! libibverbs. Every object the library hands out is a Rust struct whose first field is the
//! rdma-core struct, so a pointer the program passes back is turned into ours by a cast:
//!
//! | rdma-core object | ours | backed by |
//! |---|---|---|
//! | `ibv_device` | [`ctx::Dev`] | an entry of `RNIC_DEVICES` |
//! | `ibv_context` (inside `verbs_context`) | [`ctx::Ctx`] | a [`rnic_core::device::Device`], started at the first PD or CQ |
//! | `ibv_pd` | [`pd`] | a PD id |
//! | `ibv_mr` | [`mr`] | an MTPT entry over the program's memory |
//! | `ibv_ah` | [`ah`] | a destination |
//! | `ibv_cq`, `ibv_comp_channel` | [`cq`] | a [`rnic_core::cq::Cq`]; an eventfd the channel's `fd` is |
//! | `ibv_qp` (inside `ibv_qp_ex`), `ibv_srq` | [`qp`] | a QP and an SRQ of the engine |
//!
//! The static-inline verbs of the header (`ibv_post_send`, `ibv_poll_cq`, ...) call through
//! `context->ops`; the extended ones (`ibv_create_qp_ex`, `ibv_query_port`,
//! `ibv_query_device_ex`) through the `verbs_context`: both filled from one table,
//! [`device`]'s `OPS`, when the context is made (as rxe's `rxe_ctx_ops`); the `ibv_wr_*` work-request API
//! through the function pointers of `ibv_qp_ex`. What rnic does not implement returns what
//! rdma-core returns for an unsupported operation (`EOPNOTSUPP`, errno set), never a crash
//! ([`unsupported`], [`private`]).
//!
//! Errors a program cannot diagnose from an errno alone (a device already in use by another
//! process, a QP moved to RTR without a GID) are also explained in one line on stderr,
//! `rnic: ...` (`RNIC_IBV_QUIET=1` silences them).
//!
//! No two modules use each other: [`ctx`] (what a context and its objects share) uses
//! none; [`pd`], [`mr`], [`ah`], [`cq`] and [`qp`] use it and the objects they name;
//! [`device`] makes the context and is the only one to name their functions (its ops
//! table, the teardown of a closed context); [`cma`] builds on all of them.
#![allow(
    non_camel_case_types,
    non_snake_case,
    clippy::missing_safety_doc,
    missing_debug_implementations,
    clippy::not_unsafe_ptr_arg_deref
)]

pub mod ah;
pub mod cma;
pub mod cq;
pub mod ctx;
pub mod device;
pub mod dm;
pub mod misc;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod private;
pub mod qp;
pub mod unsupported;
pub mod xrcd;

use libc::c_int;

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local; the pointer glibc returns is valid for this thread.
    unsafe { *libc::__errno_location() = e };
}

/// Explains an error on stderr (one line, `rnic: ...`) unless `RNIC_IBV_QUIET` is set.
pub(crate) fn diag(msg: impl std::fmt::Display) {
    if std::env::var_os("RNIC_IBV_QUIET").is_none_or(|v| v.is_empty() || v == "0") {
        eprintln!("rnic: {msg}");
    }
}

/// Runs `f`, turning a Rust panic into `on_panic` instead of unwinding into C (undefined
/// behaviour). The library's functions never panic by design; this is the last guard.
pub(crate) fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            diag("internal error (a panic was caught at the library boundary); please report it");
            set_errno(libc::EIO);
            on_panic
        }
    }
}

/// How many objects name this one (a PD's MRs, QPs, SRQs and AHs; a CQ's or an SRQ's
/// QPs). The kernel refuses to destroy an object still in use with `EBUSY` (uverbs keeps
/// a use count per PD, CQ and SRQ), and so does this library.
#[derive(Debug, Default)]
pub(crate) struct Users(std::sync::atomic::AtomicU32);

impl Users {
    pub(crate) fn hold(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    pub(crate) fn release(&self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }

    pub(crate) fn in_use(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire) > 0
    }
}

/// Copies `s` into a fixed C char array, NUL-terminated and truncated to fit.
pub(crate) fn copy_cstr(dst: &mut [libc::c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as libc::c_char;
    }
    if let Some(z) = dst.get_mut(n) {
        *z = 0;
    }
}
