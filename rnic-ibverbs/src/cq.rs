//! Completion queues and completion channels.
//!
//! A channel's `fd` is an eventfd that is readable exactly while a CQ event waits: the
//! engine's progress thread runs the CQ's notifier when an armed notification fires
//! (IBA 11.4.2.2: once per request), which queues the CQ and wakes the fd; programs
//! `poll`/`epoll` it or block in `ibv_get_cq_event`, which honours `O_NONBLOCK` as
//! rdma-core does.

use crate::ctx::{ctx_of, CtxShared, MAX_CQE};
use crate::{diag, guard, set_errno, Users};
use libc::{c_int, c_uint, c_void};
use parking_lot::Mutex;
use rnic_core::cq::CqNotifier;
use rnic_core::device::Device;
use rnic_core::wr::WcFlags;
use rnic_core::wr::{NetworkHdr, WcOpcode, WcStatus, WorkCompletion};
use rnic_io::EventFd;
use rnic_verbs_sys::*;
use std::collections::{HashMap, VecDeque};
use std::os::fd::AsRawFd as _;
use std::ptr::null_mut;
use std::sync::Arc;

/// What a channel shares with the notifiers of its CQs.
pub struct ChanShared {
    fd: EventFd,
    queue: Mutex<VecDeque<u32>>,
    /// The channel's CQs by engine id (usize pointers to our `Cq`).
    cqs: Mutex<HashMap<u32, usize>>,
}

/// An `ibv_comp_channel`.
#[repr(C)]
pub struct Channel {
    pub ibv: ibv_comp_channel,
    pub sh: Arc<ChanShared>,
    /// The context it was made in: a CQ of another context may not use it (uverbs looks
    /// the channel up in the CQ's own context). Weak: a channel outliving its context
    /// (rdma-core's is a file of its own) keeps nothing running.
    ctx: std::sync::Weak<CtxShared>,
}

/// An `ibv_cq`, or an `ibv_cq_ex` (`ibv_create_cq_ex`), whose first fields are an
/// `ibv_cq`'s: a pointer to either is a pointer to this (`ibv_cq_ex_to_cq` is a cast).
#[repr(C)]
pub struct Cq {
    pub ibv: ibv_cq_ex,
    pub cq: Arc<rnic_core::cq::Cq>,
    /// The completion `ibv_start_poll` / `ibv_next_poll` made current, which the
    /// `ibv_wc_read_*` functions read (extended CQs).
    current: Mutex<WorkCompletion>,
    pub core: Device,
    pub(crate) ctx: Arc<CtxShared>,
    chan: Option<Arc<ChanShared>>,
    /// The QPs that complete into it.
    pub(crate) users: Users,
}

pub(crate) unsafe fn cq_of<'a>(cq: *mut ibv_cq) -> Option<&'a Cq> {
    // SAFETY: every ibv_cq we hand out is the first field of a live Cq.
    (!cq.is_null()).then(|| unsafe { &*cq.cast::<Cq>() })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel {
    guard(null_mut(), || {
        let Some(ctx) = (unsafe { ctx_of(context) }) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        let fd = match EventFd::blocking() {
            Ok(f) => f,
            Err(e) => {
                set_errno(e.raw_os_error().unwrap_or(libc::EMFILE));
                return null_mut();
            }
        };
        let ibv = ibv_comp_channel { context, fd: fd.as_raw_fd(), refcnt: 0 };
        let sh = Arc::new(ChanShared { fd, queue: Mutex::default(), cqs: Mutex::default() });
        Box::into_raw(Box::new(Channel { ibv, sh, ctx: Arc::downgrade(&ctx.sh) })).cast()
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    if channel.is_null() {
        return libc::EINVAL;
    }
    let ch = channel.cast::<Channel>();
    // SAFETY: a channel we handed out.
    if !unsafe { &*ch }.sh.cqs.lock().is_empty() {
        // rdma-core: a channel with CQs still attached cannot go.
        return libc::EBUSY;
    }
    // SAFETY: allocated by Box in ibv_create_comp_channel.
    drop(unsafe { Box::from_raw(ch) });
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    guard(null_mut(), || {
        let vector = u32::try_from(comp_vector).unwrap_or(u32::MAX);
        let cqe = u32::try_from(cqe).unwrap_or(0);
        create(context, cqe, cq_context, channel, vector, "ibv_create_cq").map_or(null_mut(), |c| c.cast())
    })
}

/// The create flags an extended CQ takes: single-threaded polling is a promise the
/// program makes, which costs nothing to accept (the CQ is lock-free either way).
/// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN` is refused: an overrun CQ here is in error (IBA
/// 11.4.2.1), as everything that completes into it expects.
const CQ_EX_FLAGS: u32 = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;

/// `ibv_create_cq_ex` (through `verbs_context.create_cq_ex`): a CQ polled through
/// `ibv_start_poll`, `ibv_next_poll`, `ibv_end_poll` and the `ibv_wc_read_*` functions,
/// as well as through `ibv_poll_cq`. The standard fields are readable (byte length,
/// immediate data, QP number, source QP, SLID, SL, DLID path bits: rxe's set);
/// timestamps, CVLAN, flow tags and tag matching are `EOPNOTSUPP`, as is a parent domain.
pub(crate) unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    guard(null_mut(), || {
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        // SAFETY: the caller's attributes.
        let a = unsafe { &*attr };
        let stamps = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
        let unsupported = a.wc_flags & !(IBV_WC_STANDARD_FLAGS | stamps);
        if unsupported != 0 {
            diag(format!(
                "ibv_create_cq_ex: wc_flags {unsupported:#x} are not supported (IBV_WC_STANDARD_FLAGS and the \
                 completion timestamps are)"
            ));
            set_errno(libc::EOPNOTSUPP);
            return null_mut();
        }
        if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
            diag(format!("ibv_create_cq_ex: unknown comp_mask bits {:#x}", a.comp_mask));
            set_errno(libc::EINVAL);
            return null_mut();
        }
        // A CQ of a parent domain (its allocators, which rnic never calls: its CQs are
        // its own memory); the domain must be one, of this context (EINVAL, as mlx5).
        // SAFETY: a PD we handed out, or null.
        if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0
            && !unsafe { crate::pd::pd_of(a.parent_domain) }
                .is_some_and(|p| p.is_parent_domain() && p.ibv.context == context)
        {
            diag("ibv_create_cq_ex: IBV_CQ_INIT_ATTR_MASK_PD needs a parent domain of this context");
            set_errno(libc::EINVAL);
            return null_mut();
        }
        let flags = if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 { a.flags } else { 0 };
        if flags & !CQ_EX_FLAGS != 0 {
            diag(format!(
                "ibv_create_cq_ex: create flags {:#x} are not supported (IGNORE_OVERRUN: an overrun CQ is in error)",
                flags & !CQ_EX_FLAGS
            ));
            set_errno(libc::EOPNOTSUPP);
            return null_mut();
        }
        let Some(c) = create(context, a.cqe, a.cq_context, a.channel, a.comp_vector, "ibv_create_cq_ex") else {
            return null_mut();
        };
        // SAFETY: just made, not yet handed out.
        let ex = unsafe { &mut (*c).ibv };
        ex.start_poll = Some(start_poll);
        ex.next_poll = Some(next_poll);
        ex.end_poll = Some(end_poll);
        ex.read_opcode = Some(read_opcode);
        ex.read_vendor_err = Some(read_vendor_err);
        ex.read_byte_len = Some(read_byte_len);
        ex.read_imm_data = Some(read_imm_data);
        ex.read_qp_num = Some(read_qp_num);
        ex.read_src_qp = Some(read_src_qp);
        ex.read_wc_flags = Some(read_wc_flags);
        ex.read_slid = Some(read_slid);
        ex.read_sl = Some(read_sl);
        ex.read_dlid_path_bits = Some(read_dlid_path_bits);
        if a.wc_flags & stamps != 0 {
            // SAFETY: just made, not yet handed out.
            unsafe { &*c }.cq.stamp_completions();
            ex.read_completion_ts = Some(read_completion_ts);
            ex.read_completion_wallclock_ns = Some(read_completion_wallclock_ns);
        }
        c.cast()
    })
}

/// A CQ of `cqe` entries (checked as uverbs checks them), `None` with errno set.
fn create(
    context: *mut ibv_context,
    cqe: u32,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: u32,
    verb: &str,
) -> Option<*mut Cq> {
    {
        // SAFETY: a context we handed out.
        let Some(ctx) = (unsafe { ctx_of(context) }) else {
            set_errno(libc::EINVAL);
            return None;
        };
        // The context has one completion vector (num_comp_vectors 1); uverbs refuses
        // a vector at or past the context's count.
        if comp_vector != 0 {
            crate::diag(format!("{verb}: completion vector {comp_vector}: the context has 1 (vector 0)"));
            set_errno(libc::EINVAL);
            return None;
        }
        let Some(depth) = Some(cqe).filter(|d| (1..=MAX_CQE).contains(d)) else {
            crate::diag(format!("{verb}: {cqe} entries asked, the device allows 1..={MAX_CQE}"));
            set_errno(libc::EINVAL);
            return None;
        };
        let chan = if channel.is_null() {
            None
        } else {
            // SAFETY: a channel we handed out.
            let ch = unsafe { &*channel.cast::<Channel>() };
            if !std::ptr::eq(ch.ctx.as_ptr(), Arc::as_ptr(&ctx.sh)) {
                diag(format!("{verb}: the completion channel belongs to another context"));
                set_errno(libc::EINVAL);
                return None;
            }
            Some(ch.sh.clone())
        };
        let core = match ctx.sh.core() {
            Ok(c) => c,
            Err(e) => {
                set_errno(e);
                return None;
            }
        };
        let cq = core.create_cq(depth as usize);
        // SAFETY: all-zero is a valid ibv_cq_ex (pointers, integers, glibc's zero
        // mutex/cond, `None` function pointers).
        let mut ibv: ibv_cq_ex = unsafe { std::mem::zeroed() };
        ibv.context = context;
        ibv.channel = channel;
        ibv.cq_context = cq_context;
        ibv.handle = cq.id();
        ibv.cqe = c_int::try_from(depth).unwrap_or(c_int::MAX);
        let id = cq.id();
        let ptr = Box::into_raw(Box::new(Cq {
            ibv,
            current: Mutex::new(WorkCompletion::default()),
            cq: cq.clone(),
            core,
            ctx: ctx.sh.clone(),
            chan: chan.clone(),
            users: Users::default(),
        }));
        if let Some(ch) = chan {
            ch.cqs.lock().insert(id, ptr as usize);
            let weak = Arc::downgrade(&ch);
            cq.set_notifier(Some(CqNotifier(Arc::new(move |id| {
                if let Some(ch) = weak.upgrade() {
                    ch.queue.lock().push_back(id);
                    ch.fd.notify();
                }
            }))));
        }
        ctx.sh.cqs.lock().insert(id, ptr as usize);
        Some(ptr)
    }
}

// The extended CQ's polling functions (`ibv_cq_ex`'s pointers). Between a start that
// found a completion and the end, the program reads the current one; `status` and
// `wr_id` it reads from the struct itself.

/// The CQ behind an `ibv_cq_ex` we handed out.
unsafe fn ex_of<'a>(cq: *mut ibv_cq_ex) -> Option<&'a Cq> {
    // SAFETY: every ibv_cq_ex we hand out is the first field of a live Cq.
    unsafe { cq_of(cq.cast()) }
}

/// Takes the next completion into `current` and the struct's `status` and `wr_id`:
/// 0, or ENOENT when none waits.
unsafe fn advance(cq: *mut ibv_cq_ex, c: &Cq, progress: bool) -> c_int {
    let mut wc = c.cq.poll_one();
    if wc.is_none() && progress {
        // As `ibv_poll_cq`: a busy poller runs a round itself rather than wait for the
        // progress thread.
        c.core.progress_shared(&c.cq);
        wc = c.cq.poll_one();
        if wc.is_none() {
            c.core.idle_poll();
        }
    }
    let Some(wc) = wc else { return libc::ENOENT };
    *c.current.lock() = wc;
    // SAFETY: the program's ibv_cq_ex (our Cq's first field); it reads these two after
    // the call returns, from the thread that polls.
    unsafe {
        (*cq).status = wc_status(wc.status);
        (*cq).wr_id = wc.wr_id;
    }
    0
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, _attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: an extended CQ we handed out.
    let Some(c) = (unsafe { ex_of(cq) }) else { return libc::EINVAL };
    // SAFETY: as above.
    unsafe { advance(cq, c, true) }
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: an extended CQ we handed out.
    let Some(c) = (unsafe { ex_of(cq) }) else { return libc::EINVAL };
    // SAFETY: as above.
    unsafe { advance(cq, c, false) }
}

unsafe extern "C" fn end_poll(_cq: *mut ibv_cq_ex) {}

/// The current completion of an extended CQ (a default one for a pointer not ours).
unsafe fn current(cq: *mut ibv_cq_ex) -> WorkCompletion {
    // SAFETY: an extended CQ we handed out.
    unsafe { ex_of(cq) }.map(|c| *c.current.lock()).unwrap_or_default()
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> ibv_wc_opcode {
    // SAFETY: the caller's CQ.
    wc_opcode(unsafe { current(cq) }.opcode)
}

unsafe extern "C" fn read_vendor_err(_cq: *mut ibv_cq_ex) -> u32 {
    0
}

unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the caller's CQ.
    unsafe { current(cq) }.byte_len
}

unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the caller's CQ.
    to_ibv_wc(&unsafe { current(cq) }).imm_data
}

unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the caller's CQ.
    unsafe { current(cq) }.qp_num
}

unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the caller's CQ.
    unsafe { current(cq) }.src_qp
}

unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> c_uint {
    // SAFETY: the caller's CQ.
    to_ibv_wc(&unsafe { current(cq) }).wc_flags
}

unsafe extern "C" fn read_slid(_cq: *mut ibv_cq_ex) -> u32 {
    0
}

unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    // SAFETY: the caller's CQ.
    to_ibv_wc(&unsafe { current(cq) }).sl
}

unsafe extern "C" fn read_dlid_path_bits(_cq: *mut ibv_cq_ex) -> u8 {
    0
}

/// The completion's time on the device clock (`CLOCK_MONOTONIC` nanoseconds;
/// `hca_core_clock` is 1 GHz in `ibv_query_device_ex`).
unsafe extern "C" fn read_completion_ts(cq: *mut ibv_cq_ex) -> u64 {
    // SAFETY: the caller's CQ.
    unsafe { current(cq) }.timestamp_ns
}

/// The completion's time as nanoseconds since the epoch: the device clock's stamp moved
/// by the present offset between the two clocks.
unsafe extern "C" fn read_completion_wallclock_ns(cq: *mut ibv_cq_ex) -> u64 {
    // SAFETY: the caller's CQ.
    let ts = unsafe { current(cq) }.timestamp_ns;
    let offset = rnic_io::time::realtime_ns().saturating_sub(rnic_io::time::monotonic_ns());
    ts.saturating_add(offset)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    if cq.is_null() {
        return libc::EINVAL;
    }
    let p = cq.cast::<Cq>();
    // SAFETY: a CQ we handed out.
    if unsafe { &*p }.users.in_use() {
        diag("ibv_destroy_cq: QPs still complete into this CQ");
        return libc::EBUSY;
    }
    // SAFETY: allocated by Box in ibv_create_cq; no QP names it and the program does not
    // use it again.
    let c = unsafe { Box::from_raw(p) };
    c.detach();
    c.ctx.cqs.lock().remove(&c.cq.id());
    0
}

impl Cq {
    /// Its channel hears no more of it (no notifier, no queued event, out of the
    /// channel's table).
    fn detach(&self) {
        self.cq.set_notifier(None);
        if let Some(ch) = &self.chan {
            ch.cqs.lock().remove(&self.cq.id());
            ch.queue.lock().retain(|&id| id != self.cq.id());
        }
    }
}

/// Frees a CQ of a context being closed (its QPs are gone); its channel hears no more
/// of it.
pub(crate) fn free_with_context(ptr: usize) {
    // SAFETY: a live CQ of the closing context, out of its table: nothing else frees it.
    unsafe { Box::from_raw(ptr as *mut Cq) }.detach();
}

/// `ibv_resize_cq`: room for `cqe` completions (the CQ's `cqe` then says so), keeping
/// those waiting; EINVAL for a size outside 1..=max_cqe or below the completions waiting.
#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    guard(libc::EINVAL, || {
        // SAFETY: a CQ we handed out.
        let Some(c) = (unsafe { cq_of(cq) }) else { return libc::EINVAL };
        let Some(depth) = u32::try_from(cqe).ok().filter(|d| (1..=MAX_CQE).contains(d)) else {
            diag(format!("ibv_resize_cq: {cqe} entries asked, the device allows 1..={MAX_CQE}"));
            return libc::EINVAL;
        };
        // Under the device's lock, after a round: what was posted so far is counted.
        match c.core.resize_cq(&c.cq, depth as usize) {
            Ok(()) => {
                // SAFETY: the program's CQ (our Cq's first field); verbs lets the
                // provider report the new size there.
                unsafe { (*cq).cqe = cqe };
                0
            }
            Err(e) => {
                diag(format!("ibv_resize_cq: {e}"));
                libc::EINVAL
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    if channel.is_null() || cq.is_null() || cq_context.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: a channel we handed out.
    let sh = &unsafe { &*channel.cast::<Channel>() }.sh;
    loop {
        sh.fd.clear();
        let next = {
            let mut q = sh.queue.lock();
            let next = q.pop_front();
            if !q.is_empty() {
                sh.fd.notify();
            }
            next
        };
        if let Some(id) = next {
            let Some(p) = sh.cqs.lock().get(&id).copied() else { continue };
            let p = p as *mut Cq;
            // SAFETY: a live CQ of this channel (destroy removes it from the map first).
            unsafe {
                *cq = p.cast();
                *cq_context = (*p).ibv.cq_context;
                (*p).cq.note_event_delivered();
            }
            return 0;
        }
        if sh.fd.nonblocking() {
            set_errno(libc::EAGAIN);
            return -1;
        }
        // Sleep on the channel while doing the device's work on this thread (a round now
        // sends what the program just posted; a datagram to the shards of the channel's first CQ wakes
        // this thread, which handles it): one wake-up per message, this thread's, instead
        // of the progress thread's and then this one's.
        let first = sh.cqs.lock().values().next().map(|&p| {
            // SAFETY: a live CQ of this channel (destroy removes it from the map first,
            // under this lock); its device and queue are cloned out while it is held.
            let c = unsafe { &*(p as *const Cq) };
            (c.core.clone(), c.cq.clone())
        });
        match first {
            Some((dev, cq)) => {
                dev.wait_driving(&cq, std::os::fd::AsFd::as_fd(&sh.fd), None);
            }
            None => {
                sh.fd.wait(None);
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: u32) {
    // SAFETY: a CQ we handed out.
    if let Some(c) = unsafe { cq_of(cq) } {
        let _ = c.cq.ack_events(nevents.min(c.cq.unacked_events()));
        let p = cq;
        // SAFETY: the CQ's own mutex guards the counter, as rdma-core's does.
        unsafe {
            libc::pthread_mutex_lock(std::ptr::addr_of_mut!((*p).mutex));
            (*p).comp_events_completed = (*p).comp_events_completed.wrapping_add(nevents);
            libc::pthread_cond_signal(std::ptr::addr_of_mut!((*p).cond));
            libc::pthread_mutex_unlock(std::ptr::addr_of_mut!((*p).mutex));
        }
    }
}

pub(crate) fn wc_status(s: WcStatus) -> ibv_wc_status {
    match s {
        WcStatus::Success => IBV_WC_SUCCESS,
        WcStatus::LocLenErr => IBV_WC_LOC_LEN_ERR,
        WcStatus::LocQpOpErr => IBV_WC_LOC_QP_OP_ERR,
        WcStatus::LocProtErr => IBV_WC_LOC_PROT_ERR,
        WcStatus::WrFlushErr => IBV_WC_WR_FLUSH_ERR,
        WcStatus::BadRespErr => IBV_WC_BAD_RESP_ERR,
        WcStatus::LocAccessErr => IBV_WC_LOC_ACCESS_ERR,
        WcStatus::RemInvReqErr => IBV_WC_REM_INV_REQ_ERR,
        WcStatus::RemAccessErr => IBV_WC_REM_ACCESS_ERR,
        WcStatus::RemOpErr => IBV_WC_REM_OP_ERR,
        WcStatus::RetryExcErr => IBV_WC_RETRY_EXC_ERR,
        WcStatus::RnrRetryExcErr => IBV_WC_RNR_RETRY_EXC_ERR,
        WcStatus::MwBindErr => IBV_WC_MW_BIND_ERR,
        _ => IBV_WC_GENERAL_ERR,
    }
}

fn wc_opcode(o: WcOpcode) -> ibv_wc_opcode {
    match o {
        WcOpcode::Send => IBV_WC_SEND,
        WcOpcode::RdmaWrite => IBV_WC_RDMA_WRITE,
        WcOpcode::RdmaRead => IBV_WC_RDMA_READ,
        WcOpcode::Recv => IBV_WC_RECV,
        WcOpcode::RecvRdmaWithImm => IBV_WC_RECV_RDMA_WITH_IMM,
        WcOpcode::CompSwap => IBV_WC_COMP_SWAP,
        WcOpcode::FetchAdd => IBV_WC_FETCH_ADD,
        WcOpcode::LocalInv => IBV_WC_LOCAL_INV,
        WcOpcode::BindMw => IBV_WC_BIND_MW,
        WcOpcode::AtomicWrite => IBV_WC_ATOMIC_WRITE,
        _ => IBV_WC_SEND,
    }
}

fn to_ibv_wc(w: &WorkCompletion) -> ibv_wc {
    // WcFlags has ibv_wc_flags' bit values.
    let flags = w.wc_flags.bits();
    ibv_wc {
        wr_id: w.wr_id,
        status: wc_status(w.status),
        opcode: wc_opcode(w.opcode),
        vendor_err: 0,
        byte_len: w.byte_len,
        // verbs carries immediate data in network order (`__be32`); the engine in host
        // order. With IBV_WC_WITH_INV the field is the invalidated rkey, host order.
        imm_data: if w.wc_flags.contains(WcFlags::WITH_INV) { w.invalidated_rkey } else { w.imm_data.to_be() },
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: flags,
        pkey_index: w.pkey_index,
        slid: 0,
        // A UD receive's L3 header type where mlx5 reports it for RoCE (its CQE's sl
        // field: bit 3 a UDP header, i.e. RoCEv2; bits 2:0 the L3 header, 1 IPv6, 2
        // IPv4): UCX's UD transport reads it to find the destination in the GRH area and
        // drops the datagram if that is not one of its GIDs. SL means nothing on RoCE.
        sl: match w.network_hdr {
            NetworkHdr::None => 0,
            NetworkHdr::Ipv6 => 0x8 | 0x1,
            NetworkHdr::Ipv4 => 0x8 | 0x2,
        },
        dlid_path_bits: 0,
    }
}

/// `ibv_poll_cq` (through `context->ops.poll_cq`). When the CQ is empty it runs one round
/// of the device on the calling thread (`Device::progress_shared`, a no-op while the
/// progress thread is in one), so a busy-polling program takes no thread hand-off per
/// completion; the progress thread keeps running beside it, because the program may next
/// wait on memory instead (perftest's write latency test spins on the buffer).
pub(crate) unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: a CQ we handed out.
    let Some(c) = (unsafe { cq_of(cq) }) else { return -libc::EINVAL };
    let want = usize::try_from(num_entries).unwrap_or(0);
    if want == 0 {
        return 0;
    }
    if wc.is_null() {
        return -libc::EINVAL;
    }
    let mut got = 0usize;
    let mut buf = [WorkCompletion::default(); 16];
    let mut progressed = false;
    while got < want {
        let n = c.cq.poll(&mut buf[..(want - got).min(16)]);
        if n == 0 {
            if got == 0 && !progressed {
                progressed = true;
                c.core.progress_shared(&c.cq);
                continue;
            }
            if got == 0 {
                c.core.idle_poll();
            }
            break;
        }
        for (i, w) in buf[..n].iter().enumerate() {
            // SAFETY: the caller's array of `num_entries` WCs; got + i < want.
            unsafe { wc.add(got + i).write(to_ibv_wc(w)) };
        }
        got += n;
    }
    c_int::try_from(got).unwrap_or(c_int::MAX)
}

/// `ibv_req_notify_cq` (through `context->ops.req_notify_cq`).
pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: a CQ we handed out.
    let Some(c) = (unsafe { cq_of(cq) }) else { return libc::EINVAL };
    c.cq.req_notify(solicited_only != 0);
    0
}
