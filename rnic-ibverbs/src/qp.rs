//! Queue pairs and shared receive queues: create, modify, query, destroy; posting through
//! `context->ops` (`ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`) and through the
//! `ibv_wr_*` function pointers of `ibv_qp_ex` (perftest's default).

use crate::ah::ah_of;
use crate::cq::cq_of;
use crate::ctx::{carries_link_local, ctx_of, ip_of_gid, CtxShared, MAX_INLINE, MAX_QP_WR, MAX_SGE};
use crate::pd::pd_of;
use crate::xrcd::{xrcd_of, Target};
use crate::{diag, guard, set_errno, Users};
use libc::{c_int, c_void, size_t};
use parking_lot::Mutex;
use rnic_core::device::{Device, DeviceError};
use rnic_core::engine::qp::{validate_send_inline, QpAttr, QpCap, QpInit, QpShared};
use rnic_core::mr::{AccessFlags, Bind};
use rnic_core::post::PostError;
use rnic_core::qp_state::{QpAttrMask, QpState, QpType};
use rnic_core::wr::{RecvWrRef, SendFlags, SendOp, SendWrRef, Sge, UdDest};
use rnic_verbs::Gid;
use rnic_verbs_sys::*;
use std::ptr::null_mut;
use std::sync::Arc;

/// A work request being built with the `ibv_wr_*` calls, between `wr_start` and
/// `wr_complete`.
struct Building {
    wr: SendWrRef<'static>,
    /// The WR's SGEs (its `sg_list` is set from them when it is posted).
    sg: Sges,
    inline: Option<Vec<u8>>,
}

/// An `ibv_qp` (inside the `ibv_qp_ex` every QP here is).
#[repr(C)]
pub struct Qp {
    pub ex: ibv_qp_ex,
    pub shared: Arc<QpShared>,
    core: Device,
    ctx: Arc<CtxShared>,
    cap: ibv_qp_cap,
    sq_sig_all: c_int,
    /// The Q_Key set by modify (for a UD send whose Q_Key has its high bit set).
    qkey: Mutex<u32>,
    batch: Mutex<(Vec<Building>, Option<c_int>)>,
    /// An XRC target's domain (NULL for every other QP).
    xrcd: *mut ibv_xrcd,
    /// An XRC target: the QP every handle of it shares (the one `ibv_create_qp_ex` made,
    /// those `ibv_open_qp` opened), destroyed in the engine with the last handle.
    target: Option<Arc<Target>>,
    /// A handle `ibv_open_qp` made (kept in the context's `opened_qps`).
    opened: bool,
    /// The multicast groups (GIDs) the QP is attached to: a QP still attached is not
    /// destroyed (EBUSY, the kernel's `uverbs_free_qp`).
    mcast: Mutex<Vec<[u8; 16]>>,
}

unsafe fn qp_of<'a>(qp: *mut ibv_qp) -> Option<&'a Qp> {
    // SAFETY: every ibv_qp we hand out is the first field of the ibv_qp_ex at the start
    // of a live Qp.
    (!qp.is_null()).then(|| unsafe { &*qp.cast::<Qp>() })
}

/// An `ibv_srq`.
#[repr(C)]
pub struct Srq {
    pub ibv: ibv_srq,
    pub srq: Arc<rnic_core::srq::Srq>,
    core: Device,
    ctx: Arc<CtxShared>,
    /// The QPs that take their receive WQEs from it.
    users: Users,
    /// An XRC SRQ's domain and CQ, held while it lives.
    xrc: Option<(*mut ibv_xrcd, *mut ibv_cq)>,
}

unsafe fn srq_of<'a>(srq: *mut ibv_srq) -> Option<&'a Srq> {
    // SAFETY: every ibv_srq we hand out is the first field of a live Srq.
    (!srq.is_null()).then(|| unsafe { &*srq.cast::<Srq>() })
}

fn post_errno(e: &PostError) -> c_int {
    match e {
        PostError::QueueFull { .. } => libc::ENOMEM,
        _ => libc::EINVAL,
    }
}

/// The SGE list of a C work request.
/// A WR's SGEs, on the stack for up to 8 (no allocation per work request posted).
type Sges = smallvec::SmallVec<[Sge; 8]>;

unsafe fn sges(list: *const ibv_sge, n: c_int) -> Sges {
    let n = usize::try_from(n).unwrap_or(0);
    if list.is_null() || n == 0 {
        return Sges::new();
    }
    // SAFETY: the caller's array of `n` SGEs.
    let s = unsafe { std::slice::from_raw_parts(list, n) };
    s.iter().map(|g| Sge { addr: g.addr, length: g.length, lkey: g.lkey }).collect()
}

/// Inline data is copied when posted and needs no lkey (verbs): gathered here from the
/// program's buffers.
unsafe fn gather(sg: &[Sge]) -> Vec<u8> {
    let total: usize = sg.iter().map(|s| s.length as usize).sum();
    let mut v = Vec::with_capacity(total);
    for s in sg {
        if s.length > 0 {
            // SAFETY: the program's inline buffer, readable for `length` bytes.
            v.extend_from_slice(unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.length as usize) });
        }
    }
    v
}

fn send_op(opcode: ibv_wr_opcode, w: &ibv_send_wr) -> Result<SendOp, &'static str> {
    // SAFETY (all union reads below): the opcode says which member the program filled;
    // every member is plain integers and pointers, so any bytes are a valid value.
    let (rdma, atomic) = unsafe { (w.wr.rdma, w.wr.atomic) };
    // Immediate data travels in network order in ibv_send_wr (`__be32`); the engine
    // takes it in host order.
    let imm = u32::from_be(w.imm_data);
    Ok(match opcode {
        IBV_WR_SEND => SendOp::Send,
        IBV_WR_SEND_WITH_IMM => SendOp::SendWithImm { imm },
        IBV_WR_SEND_WITH_INV => SendOp::SendWithInv { invalidate_rkey: w.imm_data },
        IBV_WR_RDMA_WRITE => SendOp::RdmaWrite { remote_addr: rdma.remote_addr, rkey: rdma.rkey },
        IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::RdmaWriteWithImm { remote_addr: rdma.remote_addr, rkey: rdma.rkey, imm },
        IBV_WR_RDMA_READ => SendOp::RdmaRead { remote_addr: rdma.remote_addr, rkey: rdma.rkey },
        IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::AtomicCmpSwap {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => {
            SendOp::AtomicFetchAdd { remote_addr: atomic.remote_addr, rkey: atomic.rkey, add: atomic.compare_add }
        }
        IBV_WR_LOCAL_INV => SendOp::LocalInv { rkey: w.imm_data },
        IBV_WR_BIND_MW => {
            // SAFETY: the opcode says the program filled `bind_mw`.
            let b = unsafe { w.bind_mw_tso.bind_mw };
            bind_op(b.mw, b.rkey, &b.bind_info)?
        }
        IBV_WR_TSO => return Err("TSO (IBV_WR_TSO) is only for raw packet QPs"),
        _ => return Err("unknown opcode"),
    })
}

/// rnic's flags of `ibv_send_flags` (the same bit values; others, such as
/// `IBV_SEND_IP_CSUM`, are not rnic's and are ignored as before).
fn flags_of(send_flags: u32) -> SendFlags {
    SendFlags::from_bits_truncate(send_flags)
}

impl Qp {
    fn ud_dest(&self, ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32) -> Result<Option<UdDest>, &'static str> {
        if self.shared.qp_type != QpType::Ud {
            return Ok(None);
        }
        // SAFETY: an AH we handed out (or NULL).
        let Some(ah) = (unsafe { ah_of(ah) }) else { return Err("a UD send needs an address handle") };
        // IBA 10.2.5: a Q_Key with its high bit set means "use the QP's own Q_Key".
        let remote_qkey = if remote_qkey & 0x8000_0000 != 0 { *self.qkey.lock() } else { remote_qkey };
        Ok(Some(UdDest { dst: ah.ip, remote_qpn, remote_qkey }))
    }

    /// Posts one built work request; `inline` bytes replace its SGEs.
    fn post(&self, wr: SendWrRef<'_>, inline: Option<&[u8]>) -> Result<(), c_int> {
        let res = if let Some(bytes) = inline {
            validate_send_inline(
                &self.shared,
                wr.wr_id,
                wr.op,
                bytes,
                wr.flags.contains(SendFlags::SIGNALED),
                wr.flags.contains(SendFlags::SOLICITED),
                wr.ud,
            )
            .map(|wqe| self.core.post_send_wqe(&self.shared, wqe))
        } else {
            self.core.post_send(&self.shared, wr)
        };
        res.map_err(|e| {
            if !matches!(e, PostError::QueueFull { .. }) {
                diag(format!("ibv_post_send on QP {}: {e}", self.shared.qpn));
            }
            post_errno(&e)
        })
    }
}

/// `ibv_post_send` (through `context->ops.post_send`).
pub(crate) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: a QP we handed out.
    let Some(q) = (unsafe { qp_of(qp) }) else { return libc::EINVAL };
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: the program's list of work requests.
        let w = unsafe { &*cur };
        let r = (|| {
            let op = send_op(w.opcode, w).map_err(|why| {
                diag(format!("ibv_post_send on QP {}: {why}", q.shared.qpn));
                libc::EINVAL
            })?;
            // SAFETY: the UD member, read as plain data.
            let ud = unsafe { w.wr.ud };
            let ud = q.ud_dest(ud.ah, ud.remote_qpn, ud.remote_qkey).map_err(|why| {
                diag(format!("ibv_post_send on QP {}: {why}", q.shared.qpn));
                libc::EINVAL
            })?;
            // SAFETY: the program's SGE array of num_sge entries.
            let sg_list = unsafe { sges(w.sg_list, w.num_sge) };
            let flags = flags_of(w.send_flags);
            let inline = if flags.contains(SendFlags::INLINE) && !matches!(op, SendOp::RdmaRead { .. }) {
                if sg_list.len() > MAX_SGE as usize {
                    return Err(libc::EINVAL);
                }
                // SAFETY: the program's inline buffers.
                Some(unsafe { gather(&sg_list) })
            } else {
                None
            };
            // SAFETY: the XRC member, read as plain data; it means something on an XRC
            // initiator only.
            let xrc_srqn = (q.shared.qp_type == QpType::XrcSend).then_some(unsafe { w.qp_type.xrc.remote_srqn });
            let wr = SendWrRef { wr_id: w.wr_id, op, sg_list: &sg_list, flags, ud, xrc_srqn };
            q.post(wr, inline.as_deref())
        })();
        if let Err(e) = r {
            if !bad_wr.is_null() {
                // SAFETY: the caller's out-parameter.
                unsafe { *bad_wr = cur };
            }
            return e;
        }
        cur = w.next;
    }
    0
}

/// `ibv_post_recv` (through `context->ops.post_recv`).
pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: a QP we handed out.
    let Some(q) = (unsafe { qp_of(qp) }) else { return libc::EINVAL };
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: the program's list of work requests.
        let w = unsafe { &*cur };
        // SAFETY: its SGE array.
        let sg = unsafe { sges(w.sg_list, w.num_sge) };
        if let Err(e) = q.core.post_recv(&q.shared, RecvWrRef { wr_id: w.wr_id, sg_list: &sg }) {
            if !matches!(e, PostError::QueueFull { .. }) {
                diag(format!("ibv_post_recv on QP {}: {e}", q.shared.qpn));
            }
            if !bad_wr.is_null() {
                // SAFETY: the caller's out-parameter.
                unsafe { *bad_wr = cur };
            }
            return post_errno(&e);
        }
        cur = w.next;
    }
    0
}

/// `ibv_post_srq_recv` (through `context->ops.post_srq_recv`).
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: an SRQ we handed out.
    let Some(s) = (unsafe { srq_of(srq) }) else { return libc::EINVAL };
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: the program's list of work requests.
        let w = unsafe { &*cur };
        // SAFETY: its SGE array.
        let sg = unsafe { sges(w.sg_list, w.num_sge) };
        if let Err(e) = s.core.post_srq_recv(&s.srq, RecvWrRef { wr_id: w.wr_id, sg_list: &sg }) {
            if !matches!(e, PostError::QueueFull { .. }) {
                diag(format!("ibv_post_srq_recv on SRQ {}: {e}", s.srq.id()));
            }
            if !bad_wr.is_null() {
                // SAFETY: the caller's out-parameter.
                unsafe { *bad_wr = cur };
            }
            return post_errno(&e);
        }
        cur = w.next;
    }
    0
}

fn check_cap(cap: &ibv_qp_cap, has_srq: bool) -> Result<QpCap, String> {
    let within = |v: u32, max: u32, what: &str| {
        if v > max {
            Err(format!("{what} {v} is more than the device's {max}"))
        } else {
            Ok(())
        }
    };
    within(cap.max_send_wr, MAX_QP_WR, "max_send_wr")?;
    within(cap.max_send_sge, MAX_SGE, "max_send_sge")?;
    within(cap.max_inline_data, MAX_INLINE, "max_inline_data")?;
    if !has_srq {
        within(cap.max_recv_wr, MAX_QP_WR, "max_recv_wr")?;
        within(cap.max_recv_sge, MAX_SGE, "max_recv_sge")?;
    }
    Ok(QpCap {
        max_send_wr: cap.max_send_wr.max(1),
        max_recv_wr: cap.max_recv_wr.max(1),
        max_send_sge: cap.max_send_sge.max(1),
        max_recv_sge: cap.max_recv_sge.max(1),
        max_inline_data: cap.max_inline_data,
    })
}

fn create(context: *mut ibv_context, attr: &mut ibv_qp_init_attr_ex) -> Result<*mut ibv_qp, c_int> {
    // SAFETY: a context we handed out.
    let ctx = unsafe { ctx_of(context) }.ok_or(libc::EINVAL)?;
    let unsupported = |what: &str| {
        diag(format!("ibv_create_qp: {what} is not supported"));
        libc::EOPNOTSUPP
    };
    let known =
        IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    if attr.comp_mask & !known != 0 {
        return Err(unsupported("TSO, RSS and indirection tables"));
    }
    if attr.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && attr.create_flags != 0 {
        return Err(unsupported(&format!("create_flags {:#x}", attr.create_flags)));
    }
    if attr.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
        let ok = IBV_QP_EX_WITH_RDMA_WRITE
            | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
            | IBV_QP_EX_WITH_SEND
            | IBV_QP_EX_WITH_SEND_WITH_IMM
            | IBV_QP_EX_WITH_RDMA_READ
            | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
            | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
            | IBV_QP_EX_WITH_LOCAL_INV
            | IBV_QP_EX_WITH_BIND_MW
            | IBV_QP_EX_WITH_SEND_WITH_INV;
        if attr.send_ops_flags & !ok != 0 {
            return Err(unsupported(&format!("send_ops_flags {:#x}", attr.send_ops_flags & !ok)));
        }
    }
    let qp_type = match attr.qp_type {
        IBV_QPT_RC => QpType::Rc,
        IBV_QPT_UC => QpType::Uc,
        IBV_QPT_UD => QpType::Ud,
        IBV_QPT_XRC_SEND => QpType::XrcSend,
        IBV_QPT_XRC_RECV => QpType::XrcRecv,
        t => return Err(unsupported(&format!("QP type {t} (rnic has RC, UC, UD, XRC_SEND and XRC_RECV)"))),
    };
    if qp_type == QpType::XrcRecv {
        return create_xrc_target(context, ctx, attr);
    }
    if attr.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: a PD we handed out.
    let pd = unsafe { pd_of(attr.pd) }.ok_or(libc::EINVAL)?;
    if qp_type == QpType::XrcSend {
        // An XRC initiator has no receive side (IBA Annex A14): the receive CQ and SRQ
        // are ignored, as the kernel ignores them for IB_QPT_XRC_INI.
        attr.recv_cq = attr.send_cq;
        attr.srq = null_mut();
        attr.cap.max_recv_wr = 0;
        attr.cap.max_recv_sge = 0;
    }
    // SAFETY: CQs we handed out.
    let (scq, rcq) = unsafe { (cq_of(attr.send_cq), cq_of(attr.recv_cq)) };
    let (Some(scq), Some(rcq)) = (scq, rcq) else {
        diag("ibv_create_qp: a send and a receive CQ are required");
        return Err(libc::EINVAL);
    };
    // SAFETY: an SRQ we handed out (or NULL).
    let srq = unsafe { srq_of(attr.srq) };
    // Every object a QP names is its context's: uverbs looks each handle up in the
    // context the QP is created in, and refuses another context's (EINVAL).
    let foreign = [
        (!Arc::ptr_eq(&pd.ctx, &ctx.sh)).then_some("PD"),
        (!Arc::ptr_eq(&scq.ctx, &ctx.sh)).then_some("send CQ"),
        (!Arc::ptr_eq(&rcq.ctx, &ctx.sh)).then_some("receive CQ"),
        srq.filter(|s| !Arc::ptr_eq(&s.ctx, &ctx.sh)).map(|_| "SRQ"),
    ];
    if let Some(what) = foreign.into_iter().flatten().next() {
        diag(format!("ibv_create_qp: the {what} belongs to another context"));
        return Err(libc::EINVAL);
    }
    let cap = check_cap(&attr.cap, srq.is_some()).map_err(|why| {
        diag(format!("ibv_create_qp: {why}"));
        libc::EINVAL
    })?;
    let init = QpInit::new(qp_type, pd.id, scq.cq.clone(), rcq.cq.clone())
        .cap(cap)
        .sq_sig_all(attr.sq_sig_all != 0)
        .srq(srq.map(|s| s.srq.clone()))
        // As rxe and mlx5: a post never looks at lkeys; the work fails when it runs.
        .keys_at_execution(true)
        // As libmlx5: a QP reset takes its completions out of its CQs.
        .purge_cqs_on_reset(true);
    let shared = pd.core.create_qp(init).map_err(|e| {
        diag(format!("ibv_create_qp: {e}"));
        driver_errno(&e)
    })?;
    // Report what the QP got, as the kernel writes back the actual capabilities.
    attr.cap.max_inline_data = cap.max_inline_data;
    if qp_type == QpType::XrcSend {
        attr.recv_cq = null_mut();
    }
    let p = qp_object(context, attr, shared, pd.core.clone(), &ctx.sh, (null_mut(), None, false));
    pd.users.hold();
    scq.users.hold();
    if qp_type != QpType::XrcSend {
        rcq.users.hold();
    }
    if let Some(s) = srq {
        s.users.hold();
    }
    Ok(p)
}

/// An XRC target QP (`IBV_QPT_XRC_RECV`): in the XRC domain `attr.xrcd`, with no PD, CQ
/// or SRQ of its own (IBA Annex A14: its requests' XRCETHs name the XRC SRQs it uses).
fn create_xrc_target(
    context: *mut ibv_context,
    ctx: &crate::ctx::Ctx,
    attr: &mut ibv_qp_init_attr_ex,
) -> Result<*mut ibv_qp, c_int> {
    // SAFETY: an XRCD we handed out (or NULL).
    let xrcd = (attr.comp_mask & IBV_QP_INIT_ATTR_XRCD != 0).then(|| unsafe { xrcd_of(attr.xrcd) }).flatten();
    let Some(xrcd) = xrcd else {
        diag("ibv_create_qp_ex: an XRC_RECV QP needs an XRC domain (IBV_QP_INIT_ATTR_XRCD)");
        return Err(libc::EINVAL);
    };
    if !Arc::ptr_eq(&xrcd.ctx, &ctx.sh) {
        diag("ibv_create_qp_ex: the XRC domain belongs to another context");
        return Err(libc::EINVAL);
    }
    let core = ctx.sh.core()?;
    let init = QpInit::xrc_target(xrcd.domain.core.clone()).keys_at_execution(true).purge_cqs_on_reset(true);
    let shared = core.create_qp(init).map_err(|e| {
        diag(format!("ibv_create_qp_ex: {e}"));
        driver_errno(&e)
    })?;
    attr.pd = null_mut();
    attr.send_cq = null_mut();
    attr.recv_cq = null_mut();
    attr.srq = null_mut();
    attr.cap = ibv_qp_cap::default();
    let target = Arc::new(Target::new(shared.clone(), core.clone()));
    xrcd.domain.add_target(&target);
    let p = qp_object(context, attr, shared, core, &ctx.sh, (attr.xrcd, Some(target), false));
    xrcd.users.hold();
    Ok(p)
}

/// `ibv_open_qp` (through `verbs_context.open_qp`): another handle of an XRC target QP
/// of the XRC domain `attr.xrcd`, found by number, as the kernel's `ib_uverbs_open_qp`:
/// only `IBV_QPT_XRC_RECV`, only a QP of that domain (else `EINVAL`). The handle
/// modifies, queries and is destroyed like the QP's own; the QP lives until its last
/// handle is destroyed. Domains, and so their QPs, are this process's: a QP another
/// process made is not in any domain here, and opening it is `EINVAL` as for any number
/// the domain does not hold.
pub(crate) unsafe extern "C" fn open_qp(context: *mut ibv_context, attr: *mut ibv_qp_open_attr) -> *mut ibv_qp {
    guard(null_mut(), || {
        // SAFETY: a context we handed out, the caller's attributes.
        let (Some(ctx), false) = (unsafe { ctx_of(context) }, attr.is_null()) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        // SAFETY: the caller's attributes.
        match open_qp_checked(context, ctx, unsafe { &*attr }) {
            Ok(q) => q,
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        }
    })
}

fn open_qp_checked(
    context: *mut ibv_context,
    ctx: &crate::ctx::Ctx,
    attr: &ibv_qp_open_attr,
) -> Result<*mut ibv_qp, c_int> {
    let needed = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    // libibverbs' ibv_cmd_open_qp: unknown bits, or a number, domain or type missing.
    if attr.comp_mask >= IBV_QP_OPEN_ATTR_RESERVED || attr.comp_mask & needed != needed {
        diag(format!(
            "ibv_open_qp: comp_mask {:#x} must name the QP number, XRC domain and type (and nothing unknown)",
            attr.comp_mask
        ));
        return Err(libc::EINVAL);
    }
    if attr.qp_type != IBV_QPT_XRC_RECV {
        diag(format!("ibv_open_qp: QP type {}: only XRC_RECV QPs are opened", attr.qp_type));
        return Err(libc::EINVAL);
    }
    // SAFETY: an XRCD we handed out (or NULL).
    let Some(xrcd) = (unsafe { xrcd_of(attr.xrcd) }) else {
        diag("ibv_open_qp: no XRC domain");
        return Err(libc::EINVAL);
    };
    if !Arc::ptr_eq(&xrcd.ctx, &ctx.sh) {
        diag("ibv_open_qp: the XRC domain belongs to another context");
        return Err(libc::EINVAL);
    }
    let Some(target) = xrcd.domain.target(attr.qp_num) else {
        diag(format!(
            "ibv_open_qp: the XRC domain has no XRC_RECV QP {:#x} (XRC domains are this process's: a QP another process made cannot be opened here)",
            attr.qp_num
        ));
        return Err(libc::EINVAL);
    };
    let core = ctx.sh.core()?;
    let ex = ibv_qp_init_attr_ex {
        qp_context: if attr.comp_mask & IBV_QP_OPEN_ATTR_CONTEXT != 0 { attr.qp_context } else { null_mut() },
        qp_type: IBV_QPT_XRC_RECV,
        comp_mask: IBV_QP_INIT_ATTR_XRCD,
        xrcd: attr.xrcd,
        ..Default::default()
    };
    let shared = target.shared.clone();
    let state = shared.state().to_ibv();
    let p = qp_object(context, &ex, shared, core, &ctx.sh, (attr.xrcd, Some(target), true));
    // SAFETY: just made; the program has not seen it yet.
    unsafe { (*p).state = state };
    xrcd.users.hold();
    Ok(p)
}

/// The `ibv_qp_ex` of a QP the engine made, with the `ibv_wr_*` table, in the context's
/// table of QPs.
fn qp_object(
    context: *mut ibv_context,
    attr: &ibv_qp_init_attr_ex,
    shared: Arc<QpShared>,
    core: Device,
    sh: &Arc<CtxShared>,
    (xrcd, target, opened): (*mut ibv_xrcd, Option<Arc<Target>>, bool),
) -> *mut ibv_qp {
    let qpn = shared.qpn.value();
    let mut ex: ibv_qp_ex = unsafe {
        // SAFETY: all-zero is a valid ibv_qp_ex (pointers, integers, Options, glibc's zero
        // mutex and cond).
        std::mem::zeroed()
    };
    ex.qp_base.context = context;
    ex.qp_base.qp_context = attr.qp_context;
    ex.qp_base.pd = attr.pd;
    ex.qp_base.send_cq = attr.send_cq;
    ex.qp_base.recv_cq = attr.recv_cq;
    ex.qp_base.srq = attr.srq;
    ex.qp_base.handle = qpn;
    ex.qp_base.qp_num = qpn;
    ex.qp_base.state = IBV_QPS_RESET;
    ex.qp_base.qp_type = attr.qp_type;
    ex.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    ex.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    ex.wr_bind_mw = Some(wr_bind_mw);
    ex.wr_local_inv = Some(wr_local_inv);
    ex.wr_rdma_read = Some(wr_rdma_read);
    ex.wr_rdma_write = Some(wr_rdma_write);
    ex.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    ex.wr_send = Some(wr_send);
    ex.wr_send_imm = Some(wr_send_imm);
    ex.wr_send_inv = Some(wr_send_inv);
    ex.wr_send_tso = Some(wr_send_tso);
    ex.wr_set_ud_addr = Some(wr_set_ud_addr);
    ex.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    ex.wr_set_inline_data = Some(wr_set_inline_data);
    ex.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    ex.wr_set_sge = Some(wr_set_sge);
    ex.wr_set_sge_list = Some(wr_set_sge_list);
    ex.wr_start = Some(wr_start);
    ex.wr_complete = Some(wr_complete);
    ex.wr_abort = Some(wr_abort);
    let q = Qp {
        ex,
        shared,
        core,
        ctx: sh.clone(),
        cap: attr.cap,
        sq_sig_all: attr.sq_sig_all,
        qkey: Mutex::new(0),
        batch: Mutex::new((Vec::new(), None)),
        xrcd,
        target,
        opened,
        mcast: Mutex::new(Vec::new()),
    };
    let p = Box::into_raw(Box::new(q));
    if opened {
        sh.opened_qps.lock().insert(p as usize, qpn);
    } else {
        sh.qps.lock().insert(qpn, p as usize);
    }
    p.cast()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(pd: *mut ibv_pd, init: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    guard(null_mut(), || {
        // SAFETY: a PD we handed out.
        let (Some(p), false) = (unsafe { pd_of(pd) }, init.is_null()) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        // SAFETY: the caller's attributes.
        let i = unsafe { &mut *init };
        let mut ex = ibv_qp_init_attr_ex {
            qp_context: i.qp_context,
            send_cq: i.send_cq,
            recv_cq: i.recv_cq,
            srq: i.srq,
            cap: i.cap,
            qp_type: i.qp_type,
            sq_sig_all: i.sq_sig_all,
            comp_mask: IBV_QP_INIT_ATTR_PD,
            pd,
            ..Default::default()
        };
        match create(p.ibv.context, &mut ex) {
            Ok(q) => {
                i.cap = ex.cap;
                q
            }
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        }
    })
}

/// `ibv_create_qp_ex` (through the `verbs_context`).
pub(crate) unsafe extern "C" fn create_qp_ex(context: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    guard(null_mut(), || {
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        // SAFETY: the caller's attributes.
        match create(context, unsafe { &mut *attr }) {
            Ok(q) => q,
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    // Every QP here is an ibv_qp_ex (its first field is the ibv_qp).
    qp.cast()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a QP we handed out.
        let (Some(q), false) = (unsafe { qp_of(qp) }, attr.is_null()) else { return libc::EINVAL };
        // SAFETY: the caller's attributes.
        let a = unsafe { &*attr };
        let mask = attr_mask as u32;
        let what = format!("ibv_modify_qp(QP {})", q.shared.qpn);
        let Some(m) = QpAttrMask::from_bits(mask) else {
            diag(format!("{what}: attribute mask {mask:#x} has bits rnic does not know"));
            return libc::EINVAL;
        };
        let mut c = QpAttr { mask: m, ..QpAttr::default() };
        if mask & IBV_QP_STATE != 0 {
            let Some(s) = QpState::from_ibv(a.qp_state) else { return libc::EINVAL };
            c.state = s;
        }
        c.access = AccessFlags::from_bits_truncate(a.qp_access_flags & 0xf);
        c.path_mtu = a.path_mtu;
        c.dest_qpn = a.dest_qp_num;
        if mask & IBV_QP_AV != 0 {
            let ah = &a.ah_attr;
            if ah.is_global == 0 {
                diag(format!(
                    "{what}: the address vector has no GRH (is_global 0): RoCE addresses by GID (give the program a GID index, e.g. -g 1 / -x 1)"
                ));
                return libc::EINVAL;
            }
            let link_local = carries_link_local(&q.ctx.dev.info);
            // Index 0 or 1: a UDP device sends from its address with either (GID 0
            // names the device too, by the MAC its address gives it; a peer rnic device
            // maps it back, see ip_of_gid); a raw Ethernet device sends from each.
            if ah.grh.sgid_index > 1 {
                diag(format!(
                    "{what}: source GID index {}: the port's GID table has indexes 0 (link-local) and 1 (the RoCEv2 GID ::ffff:a.b.c.d)",
                    ah.grh.sgid_index
                ));
                return libc::EINVAL;
            }
            // SAFETY: the raw bytes of the GID union.
            match ip_of_gid(unsafe { ah.grh.dgid.raw }, &what, link_local) {
                Ok(ip) => c.remote_ip = Some(ip),
                Err(e) => return e,
            }
        }
        c.rq_psn = a.rq_psn;
        c.sq_psn = a.sq_psn;
        c.timeout = a.timeout;
        c.retry_cnt = a.retry_cnt;
        c.rnr_retry = a.rnr_retry;
        c.min_rnr_timer = a.min_rnr_timer;
        c.max_rd_atomic = a.max_rd_atomic;
        c.max_dest_rd_atomic = a.max_dest_rd_atomic;
        c.qkey = a.qkey;
        c.pkey_index = a.pkey_index;
        c.port = a.port_num;
        match q.core.modify_qp(q.shared.qpn, c) {
            Ok(()) => {
                if mask & IBV_QP_QKEY != 0 {
                    *q.qkey.lock() = a.qkey;
                }
                if mask & IBV_QP_STATE != 0 {
                    // SAFETY: the program reads qp->state; we own the struct.
                    unsafe { (*qp).state = a.qp_state };
                }
                0
            }
            Err(e) => {
                diag(format!("{what}: {e}"));
                driver_errno(&e)
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a QP we handed out.
        let (Some(q), false) = (unsafe { qp_of(qp) }, attr.is_null()) else { return libc::EINVAL };
        let c = match q.core.query_qp(q.shared.qpn) {
            Ok(c) => c,
            Err(e) => {
                diag(format!("ibv_query_qp(QP {}): {e}", q.shared.qpn));
                return driver_errno(&e);
            }
        };
        let mut a = ibv_qp_attr::default();
        a.qp_state = c.state.to_ibv();
        a.cur_qp_state = a.qp_state;
        a.path_mtu = c.path_mtu;
        a.qkey = c.qkey;
        a.rq_psn = c.rq_psn;
        a.sq_psn = c.sq_psn;
        a.dest_qp_num = c.dest_qpn;
        a.qp_access_flags = c.access.bits();
        a.cap = q.cap;
        if let Some(ip) = c.remote_ip {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid.raw = rnic_verbs::Gid::from_ip(ip).0;
            a.ah_attr.grh.sgid_index = 1;
            a.ah_attr.grh.hop_limit = 64;
            a.ah_attr.port_num = 1;
        }
        a.pkey_index = c.pkey_index;
        a.max_rd_atomic = c.max_rd_atomic;
        a.max_dest_rd_atomic = c.max_dest_rd_atomic;
        a.min_rnr_timer = c.min_rnr_timer;
        a.port_num = c.port;
        a.timeout = c.timeout;
        a.retry_cnt = c.retry_cnt;
        a.rnr_retry = c.rnr_retry;
        // SAFETY: the caller's structs.
        unsafe {
            attr.write(a);
            if !init_attr.is_null() {
                let b = &q.ex.qp_base;
                init_attr.write(ibv_qp_init_attr {
                    qp_context: b.qp_context,
                    send_cq: b.send_cq,
                    recv_cq: b.recv_cq,
                    srq: b.srq,
                    cap: q.cap,
                    qp_type: b.qp_type,
                    sq_sig_all: q.sq_sig_all,
                });
            }
        }
        0
    })
}

/// `ibv_attach_mcast`: attaches UD QP `qp` to the multicast group `gid` (IBA 10.5; on
/// RoCE the LID is not used). Refused as the kernel's `ib_attach_mcast` refuses: a GID
/// that is not multicast (`rdma_is_multicast_addr`: `ff..` or IPv4-mapped 224/4) or a QP
/// that is not UD, EINVAL; past the device's groups or attachments, ENOMEM (rxe). A
/// repeat is no error (`ib_uverbs_attach_mcast`).
#[no_mangle]
pub unsafe extern "C" fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, _lid: u16) -> c_int {
    // SAFETY: the program's QP and GID.
    unsafe { mcast(qp, gid, true) }
}

/// `ibv_detach_mcast`: detaches `qp` from group `gid`; a QP not attached to it is EINVAL
/// (`ib_uverbs_detach_mcast`).
#[no_mangle]
pub unsafe extern "C" fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, _lid: u16) -> c_int {
    // SAFETY: the program's QP and GID.
    unsafe { mcast(qp, gid, false) }
}

/// # Safety
/// `qp` is NULL or a QP of this library; `gid` NULL or a readable GID.
unsafe fn mcast(qp: *mut ibv_qp, gid: *const ibv_gid, attach: bool) -> c_int {
    let verb = if attach { "ibv_attach_mcast" } else { "ibv_detach_mcast" };
    // SAFETY: the caller's promise.
    let Some(q) = (unsafe { qp_of(qp) }) else { return libc::EINVAL };
    if gid.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a readable GID (the caller's promise); any 16 bytes are a GID.
    let raw = unsafe { (*gid).raw };
    let group = Gid(raw).to_ip();
    if !group.is_multicast() {
        diag(format!("{verb}: GID {} is not a multicast GID (ff.. or ::ffff:224.0.0.0/4)", Gid(raw)));
        return libc::EINVAL;
    }
    let mut attached = q.mcast.lock();
    let r = if attach { q.core.attach_mcast(q.shared.qpn, group) } else { q.core.detach_mcast(q.shared.qpn, group) };
    match r {
        Ok(()) => {
            if attach {
                if !attached.contains(&raw) {
                    attached.push(raw);
                }
            } else {
                attached.retain(|g| *g != raw);
            }
            0
        }
        Err(e) => {
            diag(format!("{verb}(QP {}, {}): {e}", q.shared.qpn, Gid(raw)));
            match e {
                DeviceError::Engine(rnic_core::engine::EngineError::Limit(_)) => libc::ENOMEM,
                DeviceError::Engine(_) | DeviceError::Io { .. } => libc::EINVAL,
                _ => libc::EIO,
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    if qp.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a QP we handed out.
    if let Some(attached) = unsafe { qp_of(qp) }.map(|q| q.mcast.lock().len()).filter(|&n| n > 0) {
        // The kernel's uverbs_free_qp: a program detaches its QP before destroying it.
        diag(format!("ibv_destroy_qp: the QP is still attached to {attached} multicast group(s): detach it first"));
        return libc::EBUSY;
    }
    // SAFETY: allocated by Box in create or open_qp; the program does not use it again.
    let mut q = unsafe { Box::from_raw(qp.cast::<Qp>()) };
    if q.opened {
        q.ctx.opened_qps.lock().remove(&(qp as usize));
    } else {
        q.ctx.qps.lock().remove(&q.shared.qpn.value());
    }
    let b = &q.ex.qp_base;
    // SAFETY: the objects the QP names, kept alive by its hold on them.
    unsafe {
        if let Some(p) = pd_of(b.pd) {
            p.users.release();
        }
        if let Some(c) = cq_of(b.send_cq) {
            c.users.release();
        }
        if let Some(c) = cq_of(b.recv_cq) {
            c.users.release();
        }
        if let Some(s) = srq_of(b.srq) {
            s.users.release();
        }
        if let Some(x) = xrcd_of(q.xrcd) {
            x.users.release();
        }
    }
    // An XRC target's handle: the QP goes with its last handle (the kernel's
    // __ib_destroy_shared_qp); another handle keeps it.
    let last = match q.target.take() {
        Some(t) => Arc::into_inner(t).map(|t| t.destroy()),
        None => Some(q.core.destroy_qp(q.shared.qpn)),
    };
    match last.unwrap_or(Ok(())) {
        Ok(()) => 0,
        Err(e) => {
            diag(format!("ibv_destroy_qp(QP {}): {e}", q.shared.qpn));
            driver_errno(&e)
        }
    }
}

/// Frees a QP of a context being closed (taken out of its table): destroyed in the
/// engine at once, so its peer sees what it sees when the kernel tears down a closed
/// context's QP (nothing more from it).
pub(crate) fn free_with_context(ptr: usize) {
    // SAFETY: a live QP of the closing context, out of its table: nothing else frees it
    // (the program may not use a closed context's objects, as with rdma-core, which
    // frees the context they point to).
    let q = unsafe { Box::from_raw(ptr as *mut Qp) };
    // An XRC target's handle: the QP goes with its last handle (Target's drop), which
    // may be another context's.
    if q.target.is_none() {
        let _ = q.core.destroy_qp(q.shared.qpn);
    }
}

/// Frees an SRQ of a context being closed (its QPs are gone).
pub(crate) fn free_srq_with_context(ptr: usize) {
    // SAFETY: as for a QP.
    drop(unsafe { Box::from_raw(ptr as *mut Srq) });
}

// --- ibv_qp_ex: the work-request API (ibv_wr_start ... ibv_wr_complete) ----------------

unsafe fn qx<'a>(qp: *mut ibv_qp_ex) -> &'a Qp {
    // SAFETY: the ibv_qp_ex is the first field of a live Qp (the header's inline
    // functions pass back the pointer ibv_qp_to_qp_ex returned).
    unsafe { &*qp.cast::<Qp>() }
}

fn begin(qp: *mut ibv_qp_ex, op: SendOp) {
    // SAFETY: see qx.
    let q = unsafe { qx(qp) };
    let (wr_id, flags) = (q.ex.wr_id, q.ex.wr_flags);
    let mut b = q.batch.lock();
    b.0.push(Building {
        wr: SendWrRef { wr_id, op, sg_list: &[], flags: flags_of(flags), ud: None, xrc_srqn: None },
        sg: Sges::new(),
        inline: None,
    });
}

fn unsupported_wr(qp: *mut ibv_qp_ex, what: &str) {
    // SAFETY: see qx.
    let q = unsafe { qx(qp) };
    diag(format!("QP {}: {what} is not supported", q.shared.qpn));
    q.batch.lock().1.get_or_insert(libc::EOPNOTSUPP);
}

fn with_last(qp: *mut ibv_qp_ex, f: impl FnOnce(&mut Building)) {
    // SAFETY: see qx.
    let q = unsafe { qx(qp) };
    let mut b = q.batch.lock();
    match b.0.last_mut() {
        Some(w) => f(w),
        None => {
            b.1.get_or_insert(libc::EINVAL);
        }
    }
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    // SAFETY: see qx.
    let q = unsafe { qx(qp) };
    let mut b = q.batch.lock();
    b.0.clear();
    b.1 = None;
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    // SAFETY: the caller's QP.
    unsafe { wr_start(qp) };
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    // SAFETY: see qx.
    let q = unsafe { qx(qp) };
    let (list, err) = {
        let mut b = q.batch.lock();
        (std::mem::take(&mut b.0), b.1.take())
    };
    if let Some(e) = err {
        return e;
    }
    for w in &list {
        if let Err(e) = q.post(SendWrRef { sg_list: &w.sg, ..w.wr }, w.inline.as_deref()) {
            return e;
        }
    }
    0
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    begin(qp, SendOp::Send);
}
unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm_data: u32) {
    begin(qp, SendOp::SendWithImm { imm: u32::from_be(imm_data) });
}
unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) {
    begin(qp, SendOp::SendWithInv { invalidate_rkey });
}
unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    begin(qp, SendOp::RdmaWrite { remote_addr, rkey });
}
unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm_data: u32) {
    begin(qp, SendOp::RdmaWriteWithImm { remote_addr, rkey, imm: u32::from_be(imm_data) });
}
unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    begin(qp, SendOp::RdmaRead { remote_addr, rkey });
}
unsafe extern "C" fn wr_atomic_cmp_swp(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, compare: u64, swap: u64) {
    begin(qp, SendOp::AtomicCmpSwap { remote_addr, rkey, compare, swap });
}
unsafe extern "C" fn wr_atomic_fetch_add(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, add: u64) {
    begin(qp, SendOp::AtomicFetchAdd { remote_addr, rkey, add });
}
unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) {
    begin(qp, SendOp::LocalInv { rkey: invalidate_rkey });
}
unsafe extern "C" fn wr_bind_mw(qp: *mut ibv_qp_ex, mw: *mut ibv_mw, rkey: u32, info: *const ibv_mw_bind_info) {
    // SAFETY: the program's bind info, or null.
    let Some(info) = (unsafe { info.as_ref() }) else {
        unsupported_wr(qp, "ibv_wr_bind_mw without bind info");
        return;
    };
    match bind_op(mw, rkey, info) {
        Ok(op) => begin(qp, op),
        Err(why) => unsupported_wr(qp, why),
    }
}

/// A BIND_MW of window `mw` with key `rkey` to what `info` says (the region's lkey is
/// read from its `ibv_mw`/`ibv_mr`: rnic's handles are those structs). Whether the bind
/// is allowed is the engine's to say, when it executes it (`MW_BIND_ERR`).
fn bind_op(mw: *mut ibv_mw, rkey: u32, info: &ibv_mw_bind_info) -> Result<SendOp, &'static str> {
    // SAFETY: a window we handed out (its first field is the ibv_mw), or null.
    let Some(m) = (unsafe { mw.as_ref() }) else { return Err("IBV_WR_BIND_MW without a memory window") };
    if rkey >> 8 != m.handle {
        return Err("IBV_WR_BIND_MW: the new rkey must keep the window's index (change its low byte only)");
    }
    // SAFETY: an MR we handed out, or null (an unbind).
    let mr_lkey = unsafe { info.mr.as_ref() }.map_or(0, |r| r.lkey);
    let len = usize::try_from(info.length).map_err(|_| "IBV_WR_BIND_MW: length too large")?;
    let access = AccessFlags::from_bits_truncate(info.mw_access_flags & 0x1f);
    Ok(SendOp::BindMw { rkey, bind: Bind { mr_lkey, addr: info.addr, len, access } })
}

/// `ibv_bind_mw` (through `context->ops.bind_mw`; rdma-core checked the window is of
/// type 1 and in the region's PD): a BIND_MW work request with the window's next key
/// (`ibv_inc_rkey`), which is the window's `rkey` from now on, as rxe's provider does.
pub(crate) unsafe extern "C" fn bind_mw(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int {
    guard(libc::EINVAL, || {
        // SAFETY: a QP we handed out.
        let (Some(q), false, false) = (unsafe { qp_of(qp) }, mw.is_null(), mw_bind.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: the program's window and bind request.
        let (m, b) = unsafe { (&mut *mw, &*mw_bind) };
        let rkey = (m.rkey & 0xffff_ff00) | (m.rkey.wrapping_add(1) & 0xff);
        let op = match bind_op(mw, rkey, &b.bind_info) {
            Ok(op) => op,
            Err(why) => {
                diag(format!("ibv_bind_mw: {why}"));
                return libc::EINVAL;
            }
        };
        let wr =
            SendWrRef { wr_id: b.wr_id, op, sg_list: &[], flags: flags_of(b.send_flags), ud: None, xrc_srqn: None };
        match q.post(wr, None) {
            Ok(()) => {
                m.rkey = rkey;
                0
            }
            Err(e) => e,
        }
    })
}
unsafe extern "C" fn wr_send_tso(qp: *mut ibv_qp_ex, _hdr: *mut c_void, _hdr_sz: u16, _mss: u16) {
    unsupported_wr(qp, "ibv_wr_send_tso");
}
unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ibv_qp_ex, srqn: u32) {
    with_last(qp, |w| w.wr.xrc_srqn = Some(srqn));
}
unsafe extern "C" fn wr_set_ud_addr(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32) {
    // SAFETY: see qx.
    let q = unsafe { qx(qp) };
    match q.ud_dest(ah, remote_qpn, remote_qkey) {
        Ok(ud) => with_last(qp, |w| w.wr.ud = ud),
        Err(why) => {
            diag(format!("ibv_wr_set_ud_addr on QP {}: {why}", q.shared.qpn));
            q.batch.lock().1.get_or_insert(libc::EINVAL);
        }
    }
}
unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    with_last(qp, |w| {
        // The WR's list keeps its allocation from one post to the next.
        w.sg.clear();
        w.sg.push(Sge { addr, length, lkey });
        w.inline = None;
    });
}
unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: size_t, sg_list: *const ibv_sge) {
    // SAFETY: the program's SGE array.
    let list = unsafe { sges(sg_list, c_int::try_from(num_sge).unwrap_or(0)) };
    with_last(qp, |w| {
        w.sg = list;
        w.inline = None;
    });
}
unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: size_t) {
    let bytes = if addr.is_null() || length == 0 {
        Vec::new()
    } else {
        // SAFETY: the program's buffer; copied now (the verbs contract: reusable at once).
        unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), length) }.to_vec()
    };
    with_last(qp, |w| {
        w.wr.flags.set(SendFlags::INLINE, true);
        w.inline = Some(bytes);
    });
}
unsafe extern "C" fn wr_set_inline_data_list(qp: *mut ibv_qp_ex, num_buf: size_t, buf_list: *const ibv_data_buf) {
    let mut bytes = Vec::new();
    if !buf_list.is_null() {
        // SAFETY: the program's array of buffers.
        for b in unsafe { std::slice::from_raw_parts(buf_list, num_buf) } {
            if !b.addr.is_null() && b.length > 0 {
                // SAFETY: each buffer, readable for its length; copied now.
                bytes.extend_from_slice(unsafe { std::slice::from_raw_parts(b.addr.cast::<u8>(), b.length) });
            }
        }
    }
    with_last(qp, |w| {
        w.wr.flags.set(SendFlags::INLINE, true);
        w.inline = Some(bytes);
    });
}

// --- Shared receive queues ---------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(pd: *mut ibv_pd, init: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    guard(null_mut(), || {
        // SAFETY: a PD we handed out.
        let (Some(p), false) = (unsafe { pd_of(pd) }, init.is_null()) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        // SAFETY: the caller's attributes.
        let i = unsafe { &mut *init };
        match new_srq(pd, p, i.srq_context, i.attr, None, |max_wr, max_sge| p.core.create_srq(p.id, max_wr, max_sge)) {
            Ok(s) => s,
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        }
    })
}

/// An SRQ object in `pd` of the size `a` asks for (checked as `ibv_create_srq` checks
/// it), made by `make`; an XRC SRQ's domain and CQ are held while it lives.
fn new_srq(
    pd: *mut ibv_pd,
    p: &crate::pd::Pd,
    srq_context: *mut c_void,
    a: ibv_srq_attr,
    xrc: Option<(&crate::xrcd::Xrcd, *mut ibv_xrcd, &crate::cq::Cq, *mut ibv_cq)>,
    make: impl FnOnce(u32, u32) -> Arc<rnic_core::srq::Srq>,
) -> Result<*mut ibv_srq, c_int> {
    if a.max_wr == 0 || a.max_wr > MAX_QP_WR || a.max_sge > MAX_SGE {
        diag(format!(
            "ibv_create_srq: max_wr {} / max_sge {} not within 1..={MAX_QP_WR} / ..={MAX_SGE}",
            a.max_wr, a.max_sge
        ));
        return Err(libc::EINVAL);
    }
    let srq = make(a.max_wr, a.max_sge.max(1));
    srq.check_keys_at_execution();
    if a.srq_limit > 0 {
        if let Err(e) = srq.set_limit(a.srq_limit) {
            diag(format!("ibv_create_srq: srq_limit {}: {e}", a.srq_limit));
            return Err(libc::EINVAL);
        }
    }
    // SAFETY: all-zero is a valid ibv_srq.
    let mut ibv: ibv_srq = unsafe { std::mem::zeroed() };
    ibv.context = p.ibv.context;
    ibv.srq_context = srq_context;
    ibv.pd = pd;
    ibv.handle = srq.id();
    let id = srq.id();
    p.users.hold();
    if let Some((x, _, c, _)) = xrc {
        x.users.hold();
        c.users.hold();
    }
    let ptr = Box::into_raw(Box::new(Srq {
        ibv,
        srq,
        core: p.core.clone(),
        ctx: p.ctx.clone(),
        users: Users::default(),
        xrc: xrc.map(|(_, xp, _, cp)| (xp, cp)),
    }));
    p.ctx.srqs.lock().insert(id, ptr as usize);
    Ok(ptr.cast())
}

/// `ibv_create_srq_ex` (through `verbs_context.create_srq_ex`; the header calls
/// `ibv_create_srq` itself for a basic SRQ with a PD and nothing more): a basic SRQ, or
/// an XRC SRQ (`IBV_SRQT_XRC`) in an XRC domain with its PD and CQ (IBA Annex A14: an XRC
/// target takes receive WQEs from it and its receives complete in its CQ). Tag matching
/// is `EOPNOTSUPP`.
pub(crate) unsafe extern "C" fn create_srq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    guard(null_mut(), || {
        // SAFETY: a context we handed out, the caller's attributes.
        let (Some(ctx), false) = (unsafe { ctx_of(context) }, attr.is_null()) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        // SAFETY: the caller's attributes.
        let a = unsafe { &*attr };
        match create_srq_ex_checked(ctx, a) {
            Ok(s) => s,
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        }
    })
}

fn create_srq_ex_checked(ctx: &crate::ctx::Ctx, a: &ibv_srq_init_attr_ex) -> Result<*mut ibv_srq, c_int> {
    let known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    if a.comp_mask & IBV_SRQ_INIT_ATTR_TM != 0 {
        diag("ibv_create_srq_ex: tag matching SRQs are not supported");
        return Err(libc::EOPNOTSUPP);
    }
    if a.comp_mask & !known != 0 {
        diag(format!("ibv_create_srq_ex: comp_mask {:#x} has unknown bits", a.comp_mask & !known));
        return Err(libc::EINVAL);
    }
    let srq_type = if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 { a.srq_type } else { IBV_SRQT_BASIC };
    // SAFETY: objects we handed out (or NULL).
    let pd = (a.comp_mask & IBV_SRQ_INIT_ATTR_PD != 0).then(|| unsafe { pd_of(a.pd) }).flatten();
    let Some(p) = pd else {
        diag("ibv_create_srq_ex: an SRQ needs a PD (IBV_SRQ_INIT_ATTR_PD)");
        return Err(libc::EINVAL);
    };
    if !Arc::ptr_eq(&p.ctx, &ctx.sh) {
        diag("ibv_create_srq_ex: the PD belongs to another context");
        return Err(libc::EINVAL);
    }
    match srq_type {
        IBV_SRQT_BASIC => new_srq(a.pd, p, a.srq_context, a.attr, None, |w, s| p.core.create_srq(p.id, w, s)),
        IBV_SRQT_XRC => {
            // SAFETY: objects we handed out (or NULL).
            let xrcd = (a.comp_mask & IBV_SRQ_INIT_ATTR_XRCD != 0).then(|| unsafe { xrcd_of(a.xrcd) }).flatten();
            // SAFETY: as above.
            let cq = (a.comp_mask & IBV_SRQ_INIT_ATTR_CQ != 0).then(|| unsafe { cq_of(a.cq) }).flatten();
            let (Some(x), Some(c)) = (xrcd, cq) else {
                diag("ibv_create_srq_ex: an XRC SRQ needs an XRC domain and a CQ (IBV_SRQ_INIT_ATTR_XRCD, _CQ)");
                return Err(libc::EINVAL);
            };
            if !Arc::ptr_eq(&x.ctx, &ctx.sh) || !Arc::ptr_eq(&c.ctx, &ctx.sh) {
                diag("ibv_create_srq_ex: the XRC domain or the CQ belongs to another context");
                return Err(libc::EINVAL);
            }
            new_srq(a.pd, p, a.srq_context, a.attr, Some((x, a.xrcd, c, a.cq)), |w, s| {
                p.core.create_xrc_srq(p.id, w, s, &x.domain.core, c.cq.clone())
            })
        }
        IBV_SRQT_TM => {
            diag("ibv_create_srq_ex: tag matching SRQs are not supported");
            Err(libc::EOPNOTSUPP)
        }
        t => {
            diag(format!("ibv_create_srq_ex: SRQ type {t} is unknown"));
            Err(libc::EINVAL)
        }
    }
}

/// `ibv_get_srq_num` (through `verbs_context.get_srq_num`): the number an XRC request's
/// XRCETH names the SRQ by (the device's SRQ number, as mlx5 gives its `srqn`).
pub(crate) unsafe extern "C" fn get_srq_num(srq: *mut ibv_srq, num: *mut u32) -> c_int {
    // SAFETY: an SRQ we handed out.
    let (Some(s), false) = (unsafe { srq_of(srq) }, num.is_null()) else { return libc::EINVAL };
    // SAFETY: the caller's out-parameter.
    unsafe { num.write(s.srq.id()) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int {
    // SAFETY: an SRQ we handed out.
    let (Some(s), false) = (unsafe { srq_of(srq) }, attr.is_null()) else { return libc::EINVAL };
    let mask = mask as u32;
    if mask & IBV_SRQ_MAX_WR != 0 {
        // The device does not report IBV_DEVICE_SRQ_RESIZE.
        diag("ibv_modify_srq: resizing an SRQ (IBV_SRQ_MAX_WR) is not supported");
        return libc::EINVAL;
    }
    if mask & IBV_SRQ_LIMIT != 0 {
        // SAFETY: the caller's attributes.
        if let Err(e) = s.srq.set_limit(unsafe { (*attr).srq_limit }) {
            diag(format!("ibv_modify_srq: {e}"));
            return libc::EINVAL;
        }
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    // SAFETY: an SRQ we handed out.
    let (Some(s), false) = (unsafe { srq_of(srq) }, attr.is_null()) else { return libc::EINVAL };
    // SAFETY: the caller's struct.
    unsafe { attr.write(ibv_srq_attr { max_wr: s.srq.max_wr(), max_sge: s.srq.max_sge(), srq_limit: s.srq.limit() }) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    if srq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: an SRQ we handed out.
    if unsafe { &*srq.cast::<Srq>() }.users.in_use() {
        diag("ibv_destroy_srq: QPs still take their receive WQEs from this SRQ");
        return libc::EBUSY;
    }
    // SAFETY: allocated by Box in ibv_create_srq; no QP names it.
    let s = unsafe { Box::from_raw(srq.cast::<Srq>()) };
    s.ctx.srqs.lock().remove(&s.srq.id());
    // SAFETY: the SRQ's PD, alive while it has users.
    if let Some(p) = unsafe { pd_of(s.ibv.pd) } {
        p.users.release();
    }
    if let Some((x, c)) = s.xrc {
        // SAFETY: the XRC SRQ's domain and CQ, alive while it holds them.
        unsafe {
            if let Some(x) = xrcd_of(x) {
                x.users.release();
            }
            if let Some(c) = cq_of(c) {
                c.users.release();
            }
        }
    }
    0
}

/// The errno a QP verb returns for a driver error: EINVAL when the engine refused the
/// call (a bad attribute, transition or QP number, as the kernel's `EINVAL`), EIO when the
/// device itself failed (its progress thread stopped).
fn driver_errno(e: &DeviceError) -> c_int {
    match e {
        DeviceError::Engine(_) => libc::EINVAL,
        _ => libc::EIO,
    }
}
