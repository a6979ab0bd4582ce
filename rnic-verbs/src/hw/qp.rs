//! Queue pairs: create, modify (RESET -> INIT -> RTR -> RTS with rnic's `QpAttr`), query,
//! post through `context->ops`.

use super::convert::{
    cap_from_ibv, cap_to_ibv, qp_attr_from_ibv, qp_attr_to_ibv, qp_type_from_ibv, qp_type_to_ibv, ud_dest_ip,
    IbvRecvList, IbvSendList, QpAttr, QpAttrMask, QpCap, QpType, RecvWrRef, SendWrRef, QUERY_MASK,
};
use super::cq::HwCq;
use super::pd::HwPd;
use super::srq::HwSrq;
use super::xrcd::HwXrcd;
use super::{HwError, HwResult};
use rnic_verbs_sys::{self as sys, ibv_qp};
use std::fmt;
use std::sync::Arc;

/// What `ibv_create_qp` needs.
#[derive(Debug, Clone)]
pub struct HwQpInit {
    /// RC, UC, UD, or an XRC initiator or target.
    pub qp_type: QpType,
    /// Queue sizes asked for (the device may grant more; see [`HwQp::cap`]).
    pub cap: QpCap,
    /// Complete every send WR.
    pub sq_sig_all: bool,
    /// Send completions go here.
    pub send_cq: HwCq,
    /// Receive completions go here.
    pub recv_cq: HwCq,
    /// Take receive WQEs from this SRQ.
    pub srq: Option<HwSrq>,
    /// An XRC target's domain (`QpType::XrcRecv`; `ibv_create_qp_ex` with
    /// `IBV_QP_INIT_ATTR_XRCD`). A target uses neither the PD nor the CQs.
    pub xrcd: Option<HwXrcd>,
}

struct QpInner {
    pd: HwPd,
    qp: *mut ibv_qp,
    init: HwQpInit,
    granted: QpCap,
}

// SAFETY: QPs may be posted to and modified from any thread (the provider and kernel
// lock); the pointer is freed only in Drop.
unsafe impl Send for QpInner {}
// SAFETY: as above.
unsafe impl Sync for QpInner {}

impl Drop for QpInner {
    fn drop(&mut self) {
        // SAFETY: the last handle; destroyed once, before its CQs, SRQ and PD (held in
        // `init` and `pd`, dropped after this body).
        unsafe { (self.pd.context().verbs().ibv_destroy_qp)(self.qp) };
    }
}

/// A queue pair (`ibv_qp`). Clones share it; destroyed with the last one.
#[derive(Clone)]
pub struct HwQp {
    inner: Arc<QpInner>,
}

impl fmt::Debug for HwQp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HwQp").field("qpn", &format_args!("{:#x}", self.qpn())).field("type", &self.qp_type()).finish()
    }
}

impl HwQp {
    pub(super) fn create(pd: &HwPd, init: &HwQpInit) -> HwResult<HwQp> {
        let ctx = pd.context().as_ptr();
        for (what, cq) in [("send CQ", &init.send_cq), ("receive CQ", &init.recv_cq)] {
            if cq.context().as_ptr() != ctx {
                return Err(HwError::InvalidArgument {
                    op: "create QP",
                    why: format!("the {what} belongs to {}, the PD to {}", cq.context().name(), pd.context().name()),
                });
            }
        }
        if let Some(s) = &init.srq {
            if s.pd().as_ptr() != pd.as_ptr() {
                return Err(HwError::InvalidArgument { op: "create QP", why: "the SRQ belongs to another PD".into() });
            }
        }
        if matches!(init.qp_type, QpType::XrcSend | QpType::XrcRecv) {
            return HwQp::create_xrc(pd, init);
        }
        let mut a = sys::ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: init.send_cq.as_ptr(),
            recv_cq: init.recv_cq.as_ptr(),
            srq: init.srq.as_ref().map_or(std::ptr::null_mut(), HwSrq::as_ptr),
            cap: cap_to_ibv(&init.cap),
            qp_type: qp_type_to_ibv(init.qp_type),
            sq_sig_all: libc::c_int::from(init.sq_sig_all),
        };
        // SAFETY: a live PD, CQs and SRQ (held by `init`, which the QP keeps).
        let qp = unsafe { (pd.context().verbs().ibv_create_qp)(pd.as_ptr(), &mut a) };
        if qp.is_null() {
            return Err(HwError::last_os(format!("ibv_create_qp({}, {:?})", init.qp_type, init.cap)));
        }
        Ok(HwQp { inner: Arc::new(QpInner { pd: pd.clone(), qp, init: init.clone(), granted: cap_from_ibv(&a.cap) }) })
    }

    /// An XRC initiator (in the PD, completing in the send CQ, no receive side) or target
    /// (in `init.xrcd`, nothing else), through `ibv_create_qp_ex` (IBA Annex A14).
    fn create_xrc(pd: &HwPd, init: &HwQpInit) -> HwResult<HwQp> {
        let target = init.qp_type == QpType::XrcRecv;
        let xrcd = match (&init.xrcd, target) {
            (Some(d), true) => d.as_ptr(),
            (None, false) => std::ptr::null_mut(),
            _ => {
                return Err(HwError::InvalidArgument {
                    op: "create QP",
                    why: "an XRC target takes an XRC domain, nothing else does".into(),
                })
            }
        };
        // SAFETY: plain C data (integers and pointers): all zeros is valid, C's `= {}`.
        let mut a: sys::ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        a.qp_type = qp_type_to_ibv(init.qp_type);
        a.sq_sig_all = libc::c_int::from(init.sq_sig_all);
        if target {
            a.comp_mask = sys::IBV_QP_INIT_ATTR_XRCD;
            a.xrcd = xrcd;
        } else {
            a.comp_mask = sys::IBV_QP_INIT_ATTR_PD;
            a.pd = pd.as_ptr();
            a.send_cq = init.send_cq.as_ptr();
            // The kernel ignores an initiator's receive side; rdma-core's tests pass the send CQ.
            a.recv_cq = init.send_cq.as_ptr();
            a.cap = sys::ibv_qp_cap { max_recv_wr: 0, max_recv_sge: 0, ..cap_to_ibv(&init.cap) };
        }
        // SAFETY: a live context, PD, CQ and domain (held by `init`, which the QP keeps).
        let qp = unsafe { sys::ops::create_qp_ex(pd.context().as_ptr(), &mut a) };
        if qp.is_null() {
            return Err(HwError::last_os(format!("ibv_create_qp_ex({}, {:?})", init.qp_type, init.cap)));
        }
        Ok(HwQp { inner: Arc::new(QpInner { pd: pd.clone(), qp, init: init.clone(), granted: cap_from_ibv(&a.cap) }) })
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: a live QP.
        unsafe { (*self.inner.qp).qp_num }
    }

    /// RC, UC, UD, XRC_SEND or XRC_RECV.
    pub fn qp_type(&self) -> QpType {
        self.inner.init.qp_type
    }

    /// The queue sizes the device granted.
    pub fn cap(&self) -> QpCap {
        self.inner.granted
    }

    /// The protection domain.
    pub fn pd(&self) -> &HwPd {
        &self.inner.pd
    }

    /// The send CQ.
    pub fn send_cq(&self) -> &HwCq {
        &self.inner.init.send_cq
    }

    /// The receive CQ.
    pub fn recv_cq(&self) -> &HwCq {
        &self.inner.init.recv_cq
    }

    /// The raw QP, valid while `self` lives.
    pub fn as_ptr(&self) -> *mut ibv_qp {
        self.inner.qp
    }

    /// `ibv_attach_mcast` (`attach`) or `ibv_detach_mcast` of group `gid` (MLID 0, as on
    /// RoCE).
    pub fn mcast(&self, gid: [u8; 16], attach: bool) -> HwResult<()> {
        let g = sys::ibv_gid { raw: gid };
        let v = self.pd().context().verbs();
        let f = if attach { v.ibv_attach_mcast } else { v.ibv_detach_mcast };
        // SAFETY: a live QP and a GID on the stack the call only reads.
        let r = unsafe { f(self.inner.qp, &g, 0) };
        if r != 0 {
            let what = if attach { "ibv_attach_mcast" } else { "ibv_detach_mcast" };
            return Err(HwError::ret(format!("{what}(QP {:#x})", self.qpn()), r));
        }
        Ok(())
    }

    /// `ibv_modify_qp` with raw attributes.
    pub fn modify_raw(&self, attr: &mut sys::ibv_qp_attr, mask: libc::c_int) -> HwResult<()> {
        // SAFETY: a live QP and a valid attribute struct.
        let r = unsafe { (self.pd().context().verbs().ibv_modify_qp)(self.inner.qp, attr, mask) };
        if r != 0 {
            return Err(HwError::ret(
                format!(
                    "ibv_modify_qp(QP {:#x} to {}, {:?})",
                    self.qpn(),
                    attr.qp_state,
                    QpAttrMask::from_bits_retain(u32::try_from(mask).unwrap_or(0))
                ),
                r,
            ));
        }
        Ok(())
    }

    /// `ibv_modify_qp` with rnic's attributes (the mask's bits are verbs'). With `AV` in the
    /// mask the address vector goes to the RoCE GID of `remote_ip`, from this port's RoCE v2
    /// source GID of the same IP family (`-g 1` on rxe for IPv4).
    pub fn modify(&self, attr: &QpAttr) -> HwResult<()> {
        let sgid = match attr.remote_ip {
            Some(ip) if attr.mask.contains(QpAttrMask::AV) => {
                self.pd().context().gid_index_for(attr.port.max(1), ip)?
            }
            _ => 0,
        };
        let (mut a, mask) = qp_attr_to_ibv(attr, sgid)?;
        self.modify_raw(&mut a, mask)
    }

    /// `ibv_query_qp`: the QP's attributes.
    pub fn query(&self) -> HwResult<QpAttr> {
        let mut a = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        let mask = libc::c_int::try_from(QUERY_MASK).unwrap_or(0);
        // SAFETY: a live QP and writable structs.
        let r = unsafe { (self.pd().context().verbs().ibv_query_qp)(self.inner.qp, &mut a, mask, &mut init) };
        if r != 0 {
            return Err(HwError::ret(format!("ibv_query_qp(QP {:#x})", self.qpn()), r));
        }
        qp_type_from_ibv(init.qp_type)?;
        qp_attr_from_ibv(&a)
    }

    /// `ibv_post_send` through `context->ops`: the whole list in one call. UD destinations
    /// get their address handle from the PD (made once per destination).
    pub fn post_send<'a, W: Into<SendWrRef<'a>>>(&self, wrs: impl IntoIterator<Item = W>) -> HwResult<()> {
        let pd = self.pd().clone();
        let mut l = IbvSendList::new(wrs, &mut |d| pd.ud_ah(ud_dest_ip(d)))?;
        if l.is_empty() {
            return Ok(());
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP; the list, its SGEs and its AHs (kept by the PD) live across
        // the call.
        let r = unsafe { sys::ops::post_send(self.inner.qp, l.head(), &mut bad) };
        if r != 0 {
            let (index, wr_id) = l.index_of(bad).unwrap_or((0, l.first_id()));
            return Err(HwError::Post {
                op: "ibv_post_send",
                index,
                wr_id,
                source: std::io::Error::from_raw_os_error(r.abs()),
            });
        }
        Ok(())
    }

    /// `ibv_post_recv` through `context->ops`: the whole list in one call.
    pub fn post_recv<'a, W: Into<RecvWrRef<'a>>>(&self, wrs: impl IntoIterator<Item = W>) -> HwResult<()> {
        if self.inner.init.srq.is_some() {
            return Err(HwError::InvalidArgument {
                op: "post receive",
                why: format!("QP {:#x} takes its receive WQEs from an SRQ: post to the SRQ", self.qpn()),
            });
        }
        let mut l = IbvRecvList::new(wrs)?;
        if l.is_empty() {
            return Ok(());
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP; the list and its SGEs live across the call.
        let r = unsafe { sys::ops::post_recv(self.inner.qp, l.head(), &mut bad) };
        if r != 0 {
            let (index, wr_id) = l.index_of(bad).unwrap_or((0, l.first_id()));
            return Err(HwError::Post {
                op: "ibv_post_recv",
                index,
                wr_id,
                source: std::io::Error::from_raw_os_error(r.abs()),
            });
        }
        Ok(())
    }
}

// Made here, beside the type, so that the PD (which it holds) does not name it.
impl HwPd {
    /// Creates a QP (`ibv_create_qp`) in RESET.
    pub fn create_qp(&self, init: &HwQpInit) -> HwResult<HwQp> {
        HwQp::create(self, init)
    }
}
