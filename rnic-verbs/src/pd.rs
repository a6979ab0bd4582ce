//! Protection domains (`ibv_pd`): what memory regions, QPs, SRQs and AHs are created in.

use crate::context::{Backend, Context};
use crate::types::{Gid, DEFAULT_QKEY, GRH_LEN, MAX_QP_WR, MAX_SGE};
use crate::{
    AccessFlags, AddressHandle, CompletionQueue, Error, PathMtu, QpBuilder, QpCap, QpType, Result, SharedReceiveQueue,
};
use rnic_core::mr::PdId;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

#[derive(Debug)]
pub(crate) struct PdInner {
    pub(crate) ctx: Context,
    pub(crate) b: PdBackend,
}

#[derive(Debug)]
pub(crate) enum PdBackend {
    Emu(PdId),
    #[cfg(feature = "hw")]
    Hw(crate::hw::HwPd),
}

/// A protection domain (`ibv_pd`): memory regions and QPs of one PD can reach each
/// other, never those of another.
#[derive(Clone, Debug)]
pub struct ProtectionDomain {
    pub(crate) inner: Arc<PdInner>,
}

impl ProtectionDomain {
    pub(crate) fn alloc(ctx: &Context) -> Result<ProtectionDomain> {
        let b = match &ctx.b {
            Backend::Emu(e) => PdBackend::Emu(e.dev.alloc_pd()),
            #[cfg(feature = "hw")]
            Backend::Hw(h) => PdBackend::Hw(h.ctx.alloc_pd().map_err(crate::context::hw_err("alloc PD", ctx.name()))?),
        };
        Ok(ProtectionDomain { inner: Arc::new(PdInner { ctx: ctx.clone(), b }) })
    }

    /// The device.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The emulated device and PD id (only called on emulated PDs).
    pub(crate) fn emu_pd(&self) -> (&crate::context::Emu, PdId) {
        match (&self.inner.ctx.b, &self.inner.b) {
            (Backend::Emu(e), PdBackend::Emu(id)) => (e, *id),
            #[cfg(feature = "hw")]
            _ => unreachable!("an emulated PD belongs to an emulated context"),
        }
    }

    /// Creates a shared receive queue (`ibv_create_srq`) of `max_wr` receive WQEs with up
    /// to `max_sge` SGEs each; QPs built with [`QpBuilder::srq`] take their receive WQEs
    /// from it.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<SharedReceiveQueue> {
        SharedReceiveQueue::create(self, max_wr, max_sge)
    }

    pub(crate) fn check_srq_size(max_wr: u32, max_sge: u32) -> Result<()> {
        if max_wr == 0 || max_wr > MAX_QP_WR {
            return Err(Error::InvalidArgument {
                op: "create SRQ",
                why: format!("max_wr {max_wr} not in 1..={MAX_QP_WR}"),
            });
        }
        if max_sge > MAX_SGE {
            return Err(Error::InvalidArgument { op: "create SRQ", why: format!("more than {MAX_SGE} SGEs") });
        }
        Ok(())
    }

    /// Starts building a queue pair on this PD.
    pub fn qp_builder(&self, send_cq: &CompletionQueue, recv_cq: &CompletionQueue) -> QpBuilder {
        QpBuilder {
            pd: self.clone(),
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            qp_type: QpType::Rc,
            cap: QpCap::default(),
            sq_sig_all: false,
            access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            mtu: PathMtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            psn: None,
            srq: None,
            xrcd: None,
            qkey: DEFAULT_QKEY,
        }
    }

    /// Creates an address handle (`ibv_create_ah`): where UD sends go. `gid` is the
    /// destination's GID, as its [`Endpoint`](crate::Endpoint) carries it. On hardware the
    /// device's AH is made here (and kept by the PD for every send to that address).
    pub fn create_ah(&self, gid: Gid) -> Result<AddressHandle> {
        let ip = gid.to_ip();
        let why = if ip.is_unspecified() {
            Some(format!("GID {gid} is all zeros (a peer that sent no GID: ibv_*_pingpong need -g 0 on RoCE)"))
        } else if ip.is_ipv4() != self.inner.ctx.ip().is_ipv4()
            && !(rnic_core::engine::is_link_local(ip) && self.inner.ctx.carries_link_local())
        {
            Some(format!("GID {gid} is not of the same IP version as the device's address {}", self.inner.ctx.ip()))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(Error::InvalidArgument { op: "create AH", why });
        }
        #[cfg(feature = "hw")]
        if let PdBackend::Hw(pd) = &self.inner.b {
            pd.ud_ah(ip).map_err(crate::context::hw_err("create AH", self.inner.ctx.name()))?;
        }
        Ok(AddressHandle { pd: self.clone(), gid })
    }

    /// Creates an address handle back to the sender of a UD receive, from the 40-byte GRH
    /// area at the head of its receive buffer (`ibv_create_ah_from_wc`): for RoCEv2 over
    /// IPv4 the source address is in the IPv4 header held in the area's last 20 bytes,
    /// over IPv6 in the IPv6 header that fills it.
    pub fn create_ah_from_grh(&self, grh: &[u8]) -> Result<AddressHandle> {
        let bad = |why: String| Error::InvalidArgument { op: "create AH from GRH", why };
        if grh.len() < GRH_LEN {
            return Err(bad(format!("{} bytes given, a GRH area has {GRH_LEN}", grh.len())));
        }
        let ip = if grh[20] >> 4 == 4 && grh[..20].iter().all(|&b| b == 0) {
            IpAddr::V4(Ipv4Addr::new(grh[32], grh[33], grh[34], grh[35]))
        } else if grh[0] >> 4 == 6 {
            let mut a = [0u8; 16];
            a.copy_from_slice(&grh[8..24]);
            IpAddr::V6(Ipv6Addr::from(a))
        } else {
            return Err(bad("neither an IPv4 header in bytes 20..40 nor an IPv6 header".into()));
        };
        self.create_ah(Gid::from_ip(ip))
    }
}
