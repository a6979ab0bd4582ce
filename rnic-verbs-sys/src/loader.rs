//! Loading libibverbs at run time: `dlopen("libibverbs.so.1")` and every function the
//! backend calls resolved with `dlvsym` at the symbol version rdma-core 44 exports it
//! under (`objdump -T libibverbs.so.1`). Nothing links against libibverbs, so a program
//! built with this crate starts on any machine; where rdma-core is absent,
//! [`Verbs::get`] returns a [`LoadError`] that says so.

use crate::types::*;
use libc::{c_char, c_int, c_void, size_t};
use std::ffi::{CStr, CString};
use std::sync::OnceLock;

/// The library's file name (the SONAME of rdma-core's libibverbs since 2016).
pub const LIBIBVERBS: &str = "libibverbs.so.1";

/// Why libibverbs could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadError {
    /// `dlopen` failed: the library is not installed (or not loadable).
    Library {
        /// The name passed to `dlopen`.
        name: String,
        /// `dlerror()`'s text.
        detail: String,
    },
    /// The library lacks a function at the version this crate needs (an rdma-core older
    /// than the one the function appeared in, or not rdma-core at all).
    Symbol {
        /// The library.
        library: String,
        /// The function.
        symbol: &'static str,
        /// The version asked for.
        version: &'static str,
        /// `dlerror()`'s text.
        detail: String,
    },
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Library { name, detail } => write!(
                f,
                "cannot load {name} ({detail}): hardware RDMA devices need rdma-core's libibverbs \
                 (Debian/Ubuntu: apt-get install libibverbs1 ibverbs-providers)"
            ),
            LoadError::Symbol { library, symbol, version, detail } => {
                write!(f, "{library} has no {symbol}@{version} ({detail}): rdma-core 44 or newer is needed")
            }
        }
    }
}

impl std::error::Error for LoadError {}

/// Declares the function table: each entry's name, symbol version and C signature.
macro_rules! verbs_table {
    (required { $($(#[$m:meta])* $name:ident @ $ver:literal : fn($($arg:ty),*) $(-> $ret:ty)?;)* }
     optional { $($(#[$om:meta])* $oname:ident @ $over:literal : fn($($oarg:ty),*) $(-> $oret:ty)?;)* }) => {
        /// libibverbs' exported functions, resolved once. The data-path verbs are not
        /// here: they are the provider's, reached through `ibv_context::ops` (see
        /// [`crate::ops`]).
        #[allow(missing_docs)]
        #[derive(Debug)]
        pub struct Verbs {
            /// The `dlopen` handle (never closed: providers stay registered).
            handle: usize,
            $($(#[$m])* pub $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
            $($(#[$om])* pub $oname: Option<unsafe extern "C" fn($($oarg),*) $(-> $oret)?>,)*
        }

        impl Verbs {
            fn resolve(handle: *mut c_void, library: &str) -> Result<Verbs, LoadError> {
                Ok(Verbs {
                    handle: handle as usize,
                    $($name: {
                        let p = sym(handle, library, stringify!($name), $ver)?;
                        // SAFETY: `p` is the address of this exact libibverbs function at
                        // this symbol version, whose C prototype (verbs.h, rdma-core 44)
                        // is the signature declared in this table.
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(p) }
                    },)*
                    $($oname: match sym(handle, library, stringify!($oname), $over) {
                        // SAFETY: as above, for an entry that older libraries may lack.
                        Ok(p) => Some(unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($oarg),*) $(-> $oret)?>(p) }),
                        Err(_) => None,
                    },)*
                })
            }
        }
    };
}

verbs_table! {
    required {
    ibv_get_device_list @ "IBVERBS_1.1": fn(*mut c_int) -> *mut *mut ibv_device;
    ibv_free_device_list @ "IBVERBS_1.1": fn(*mut *mut ibv_device);
    ibv_get_device_name @ "IBVERBS_1.1": fn(*mut ibv_device) -> *const c_char;
    ibv_get_device_guid @ "IBVERBS_1.1": fn(*mut ibv_device) -> u64;
    ibv_open_device @ "IBVERBS_1.1": fn(*mut ibv_device) -> *mut ibv_context;
    ibv_close_device @ "IBVERBS_1.1": fn(*mut ibv_context) -> c_int;
    ibv_query_device @ "IBVERBS_1.1": fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
    /// Fills only the compat part of `ibv_port_attr`; prefer [`crate::ops::query_port`],
    /// which does what the header's inline does.
    ibv_query_port @ "IBVERBS_1.1": fn(*mut ibv_context, u8, *mut _compat_ibv_port_attr) -> c_int;
    ibv_query_gid @ "IBVERBS_1.1": fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
    ibv_query_pkey @ "IBVERBS_1.1": fn(*mut ibv_context, u8, c_int, *mut u16) -> c_int;
    ibv_alloc_pd @ "IBVERBS_1.1": fn(*mut ibv_context) -> *mut ibv_pd;
    ibv_dealloc_pd @ "IBVERBS_1.1": fn(*mut ibv_pd) -> c_int;
    ibv_reg_mr @ "IBVERBS_1.1": fn(*mut ibv_pd, *mut c_void, size_t, c_int) -> *mut ibv_mr;
    ibv_dereg_mr @ "IBVERBS_1.1": fn(*mut ibv_mr) -> c_int;
    ibv_create_comp_channel @ "IBVERBS_1.0": fn(*mut ibv_context) -> *mut ibv_comp_channel;
    ibv_destroy_comp_channel @ "IBVERBS_1.0": fn(*mut ibv_comp_channel) -> c_int;
    ibv_create_cq @ "IBVERBS_1.1": fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq;
    ibv_destroy_cq @ "IBVERBS_1.1": fn(*mut ibv_cq) -> c_int;
    ibv_get_cq_event @ "IBVERBS_1.1": fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int;
    ibv_ack_cq_events @ "IBVERBS_1.1": fn(*mut ibv_cq, u32);
    ibv_create_qp @ "IBVERBS_1.1": fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
    ibv_modify_qp @ "IBVERBS_1.1": fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
    ibv_query_qp @ "IBVERBS_1.1": fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int;
    ibv_destroy_qp @ "IBVERBS_1.1": fn(*mut ibv_qp) -> c_int;
    ibv_attach_mcast @ "IBVERBS_1.1": fn(*mut ibv_qp, *const ibv_gid, u16) -> c_int;
    ibv_detach_mcast @ "IBVERBS_1.1": fn(*mut ibv_qp, *const ibv_gid, u16) -> c_int;
    ibv_create_srq @ "IBVERBS_1.1": fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq;
    ibv_modify_srq @ "IBVERBS_1.1": fn(*mut ibv_srq, *mut ibv_srq_attr, c_int) -> c_int;
    ibv_query_srq @ "IBVERBS_1.1": fn(*mut ibv_srq, *mut ibv_srq_attr) -> c_int;
    ibv_destroy_srq @ "IBVERBS_1.1": fn(*mut ibv_srq) -> c_int;
    ibv_create_ah @ "IBVERBS_1.1": fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah;
    ibv_destroy_ah @ "IBVERBS_1.1": fn(*mut ibv_ah) -> c_int;
    ibv_init_ah_from_wc @ "IBVERBS_1.1": fn(*mut ibv_context, u8, *mut ibv_wc, *mut ibv_grh, *mut ibv_ah_attr) -> c_int;
    ibv_get_async_event @ "IBVERBS_1.1": fn(*mut ibv_context, *mut ibv_async_event) -> c_int;
    ibv_ack_async_event @ "IBVERBS_1.1": fn(*mut ibv_async_event);
    ibv_wc_status_str @ "IBVERBS_1.1": fn(ibv_wc_status) -> *const c_char;
    ibv_event_type_str @ "IBVERBS_1.1": fn(ibv_event_type) -> *const c_char;
    }
    optional {
    /// `struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *)` (rdma-core 22+).
    ibv_qp_to_qp_ex @ "IBVERBS_1.6": fn(*mut ibv_qp) -> *mut ibv_qp_ex;
    /// `ibv_rereg_mr` (0, or an `enum ibv_rereg_mr_err_code` with errno set).
    ibv_rereg_mr @ "IBVERBS_1.1": fn(*mut ibv_mr, c_int, *mut ibv_pd, *mut c_void, size_t, c_int) -> c_int;
    /// `ibv_query_gid_ex`'s exported body (`_ibv_query_gid_ex`, rdma-core 32+).
    _ibv_query_gid_ex @ "IBVERBS_1.11": fn(*mut ibv_context, u32, u32, *mut ibv_gid_entry, u32, size_t) -> c_int;
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string valid until the next dl* call
    // on this thread; it is copied at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null, NUL-terminated (see above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

fn sym(
    handle: *mut c_void,
    library: &str,
    name: &'static str,
    version: &'static str,
) -> Result<*mut c_void, LoadError> {
    let missing = |detail| LoadError::Symbol { library: library.into(), symbol: name, version, detail };
    let cname = CString::new(name).map_err(|_| missing("NUL in name".into()))?;
    let cver = CString::new(version).map_err(|_| missing("NUL in version".into()))?;
    // SAFETY: `handle` came from a successful dlopen and is never closed; both strings are
    // NUL-terminated and live across the call.
    let p = unsafe { dlvsym_compat(handle, cname.as_ptr(), cver.as_ptr()) };
    if p.is_null() {
        Err(missing(dl_error()))
    } else {
        Ok(p)
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
unsafe fn dlvsym_compat(h: *mut c_void, name: *const c_char, ver: *const c_char) -> *mut c_void {
    // SAFETY: forwarded contract (see `sym`).
    unsafe { libc::dlvsym(h, name, ver) }
}

/// Without glibc's `dlvsym` the default version of each symbol is taken, which in
/// rdma-core is the newest (the one these signatures describe).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
unsafe fn dlvsym_compat(h: *mut c_void, name: *const c_char, _ver: *const c_char) -> *mut c_void {
    // SAFETY: forwarded contract (see `sym`).
    unsafe { libc::dlsym(h, name) }
}

impl Verbs {
    /// libibverbs, loaded on first use by this process (`LIBIBVERBS`, found the way the
    /// dynamic linker finds libraries: `LD_LIBRARY_PATH`, the cache, ...). The error is
    /// remembered: a machine without rdma-core gets the same clear error every time.
    pub fn get() -> Result<&'static Verbs, LoadError> {
        static VERBS: OnceLock<Result<Verbs, LoadError>> = OnceLock::new();
        VERBS.get_or_init(|| Verbs::load(LIBIBVERBS)).as_ref().map_err(Clone::clone)
    }

    /// Loads the library named `name` (a file name or path) and resolves the table.
    /// The library stays loaded for the life of the process.
    pub fn load(name: &str) -> Result<Verbs, LoadError> {
        let cname =
            CString::new(name).map_err(|_| LoadError::Library { name: name.into(), detail: "NUL in name".into() })?;
        // SAFETY: a NUL-terminated name; dlopen runs the library's constructors, which for
        // libibverbs only initialise its own state.
        let handle = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(LoadError::Library { name: name.into(), detail: dl_error() });
        }
        let r = Verbs::resolve(handle, name);
        if r.is_err() {
            // SAFETY: the handle is ours and nothing from the library escaped.
            unsafe { libc::dlclose(handle) };
        }
        r
    }

    /// The `dlopen` handle, for resolving further symbols.
    pub fn handle(&self) -> *mut c_void {
        self.handle as *mut c_void
    }

    /// `ibv_wc_status_str`.
    pub fn wc_status_str(&self, status: ibv_wc_status) -> String {
        // SAFETY: returns a pointer to a static string (or "unknown") for any value.
        let p = unsafe { (self.ibv_wc_status_str)(status) };
        if p.is_null() {
            return format!("status {status}");
        }
        // SAFETY: non-null static NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// `ibv_event_type_str`.
    pub fn event_type_str(&self, event: ibv_event_type) -> String {
        // SAFETY: as `wc_status_str`.
        let p = unsafe { (self.ibv_event_type_str)(event) };
        if p.is_null() {
            return format!("event {event}");
        }
        // SAFETY: non-null static NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}
