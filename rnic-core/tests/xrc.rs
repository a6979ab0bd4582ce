//! XRC over the deterministic fabric (IBA Annex A14): node A's XRC initiator sends to
//! node B's XRC target QP, whose requests name an XRC SRQ by the number in their XRCETH.
//! An SRQ of the target's own domain takes the message (its PD checks the memory, its CQ
//! takes the completion); a number naming an SRQ of another domain, or no SRQ at all, is
//! an invalid request: NAKed, the target QP in the error state, nothing consumed, and the
//! initiator's work request completes with REM_INV_REQ_ERR.
#![allow(clippy::cast_possible_truncation)]
mod common;

use common::*;
use rnic_core::cq::Cq;
use rnic_core::engine::qp::{self, QpAttr, QpCap, QpInit, QpShared};
use rnic_core::fabric::Fabric;
use rnic_core::qp_state::{QpState, QpType};
use rnic_core::srq::{Srq, Xrcd};
use rnic_core::wr::{RecvWr, SendFlags, SendOp, SendWrRef, WcOpcode, WcStatus};
use rnic_wire::aeth::{NakCode, Syndrome};
use std::sync::Arc;

/// Node A (an XRC initiator) connected to an XRC target on node B in domain 1; B also
/// has an XRC SRQ in domain 1 and one in domain 2, each with its own CQ and one receive
/// posted.
struct Xrc {
    fab: Fabric,
    a: Node,
    b: Node,
    target: Arc<QpShared>,
    /// The SRQ of the target's domain and one of another domain, with their CQs.
    mine: (Arc<Srq>, Arc<Cq>),
    other: (Arc<Srq>, Arc<Cq>),
    /// Keeps the domains alive (an SRQ's domain holds it only weakly).
    _domains: [Arc<Xrcd>; 2],
}

impl Xrc {
    fn new() -> Xrc {
        let mut fab = Fabric::new(2_000);
        let a = typed_node(&mut fab, "10.0.0.1", QpCap::default(), QpType::XrcSend);
        let b = typed_node(&mut fab, "10.0.0.2", QpCap::default(), QpType::Rc);
        let domains = [Arc::new(Xrcd::new(1)), Arc::new(Xrcd::new(2))];
        let target = fab.engine(1).create_qp(QpInit::xrc_target(domains[0].clone())).unwrap();
        let srq = |id, d: &Xrcd, cq_id| {
            let cq = Arc::new(Cq::new(cq_id, 64));
            (Srq::new_xrc(id, b.pd, 16, 1, d, cq.clone()), cq)
        };
        let (mine, other) = (srq(7, &domains[0], 10), srq(8, &domains[1], 11));
        let rc = |remote_ip, dest_qpn| QpAttr {
            remote_ip: Some(remote_ip),
            path_mtu: 3,
            dest_qpn,
            rq_psn: 0x100,
            sq_psn: 0x100,
            timeout: 10,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            ..QpAttr::default()
        };
        for at in rc(b.ip, target.qpn.value()).bring_up(QpType::XrcSend) {
            fab.engine(0).modify_qp(0, a.qp.qpn, &at).unwrap();
        }
        for at in rc(a.ip, a.qp.qpn.value()).bring_up(QpType::XrcRecv) {
            fab.engine(1).modify_qp(0, target.qpn, &at).unwrap();
        }
        let x = Xrc { fab, a, b, target, mine, other, _domains: domains };
        for (s, at) in [(&x.mine.0, 0u64), (&x.other.0, 8192)] {
            let sge = rnic_core::wr::Sge { addr: x.b.iova + at, length: 4096, lkey: x.b.keys.lkey };
            s.post_recv(&x.b.mtpt, &RecvWr { wr_id: 100 + at, sg_list: vec![sge] }).unwrap();
        }
        x
    }

    /// A SENDs `data` to the XRC SRQ numbered `srqn` and the fabric runs.
    fn send(&mut self, wr_id: u64, srqn: u32, data: &[u8]) {
        self.a.mem.write(0, data).unwrap();
        let sg = [rnic_core::wr::Sge { addr: self.a.iova, length: data.len() as u32, lkey: self.a.keys.lkey }];
        let wr = SendWrRef {
            wr_id,
            op: SendOp::Send,
            sg_list: &sg,
            flags: SendFlags::SIGNALED,
            ud: None,
            xrc_srqn: Some(srqn),
        };
        let wqe = qp::validate_send(&self.a.qp, &self.a.mtpt, wr).unwrap();
        let now = self.fab.now();
        self.fab.engine(0).post_send(now, self.a.qp.qpn, wqe);
        let deadline = self.fab.now() + 1_000_000_000;
        self.fab.run_until(deadline);
    }

    fn naks(&self) -> Vec<Syndrome> {
        let p = self.fab.trace.iter().flatten();
        p.filter_map(|t| {
            let pkt = rnic_wire::roce::RocePacket::new_checked(&t.pkt.data[..]).ok()?;
            let r = rnic_wire::roce::RoceRepr::parse(&pkt).ok()?;
            r.ext.aeth.map(|a| a.syndrome).filter(|s| matches!(s, Syndrome::Nak(_)))
        })
        .collect()
    }
}

#[test]
fn a_request_for_an_srq_of_the_targets_domain_lands_in_it() {
    let mut x = Xrc::new();
    x.send(1, x.mine.0.id(), b"to my domain's SRQ");
    let wcs = Pair::wcs(&x.a.scq);
    assert_eq!(wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(1, WcStatus::Success)]);
    let got = Pair::wcs(&x.mine.1);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].wr_id, got[0].opcode, got[0].byte_len), (100, WcOpcode::Recv, 18));
    assert_eq!(got[0].qp_num, x.target.qpn.value(), "the completion names the target QP");
    let mut buf = vec![0; 18];
    x.b.mem.read(0, &mut buf).unwrap();
    assert_eq!(buf, b"to my domain's SRQ");
    assert!(x.other.1.poll_one().is_none() && x.other.0.len() == 1, "the other domain's SRQ untouched");
    assert_eq!(x.target.state(), QpState::Rts);
}

/// An XRC SRQ's CQ is named by no QP when the QP is created, so a device with several
/// shards could not know which shard's rounds a poll of it must run: the engine that
/// completes a receive there marks it as fed by its shard (shard 0 here), and only the
/// CQ that took the completion.
#[test]
fn the_cq_of_an_xrc_srq_learns_which_shard_feeds_it() {
    let mut x = Xrc::new();
    assert_eq!((x.mine.1.feeding_shards(), x.other.1.feeding_shards()), (0, 0), "no QP names them");
    x.send(1, x.mine.0.id(), b"marks its CQ");
    assert_eq!(Pair::wcs(&x.mine.1).len(), 1);
    assert_eq!(x.mine.1.feeding_shards(), 1, "fed by shard 0, whose engine completed the receive");
    assert_eq!(x.other.1.feeding_shards(), 0, "the other domain's CQ took nothing");
}

/// IBA Annex A14 (the XRC target's SRQ check, with 9.7.5.2.2's invalid request NAK):
/// an XRCETH naming an SRQ outside the target QP's XRC domain, or no SRQ, is NAKed
/// invalid request; the initiator's WR completes REM_INV_REQ_ERR and later ones flush.
#[test]
fn a_request_for_an_srq_outside_the_targets_domain_is_naked_invalid_request() {
    for case in ["another domain's SRQ", "no SRQ of that number"] {
        let mut x = Xrc::new();
        let srqn = if case.starts_with("another") { x.other.0.id() } else { 0x1234 };
        x.fab.trace = Some(Vec::new());
        x.send(1, srqn, b"to a foreign SRQ");
        assert_eq!(x.naks(), [Syndrome::Nak(NakCode::InvalidRequest)], "{case}: one NAK, invalid request");
        let wcs = Pair::wcs(&x.a.scq);
        assert_eq!(
            wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            [(1, WcStatus::RemInvReqErr)],
            "{case}"
        );
        assert_eq!(x.target.state(), QpState::Err, "{case}: the target QP goes to the error state");
        assert_eq!(x.a.qp.state(), QpState::Err, "{case}: so does the initiator");
        // Nothing was consumed, in either domain.
        assert!(x.other.1.poll_one().is_none() && x.mine.1.poll_one().is_none(), "{case}");
        assert_eq!((x.mine.0.len(), x.other.0.len()), (1, 1), "{case}: every receive WQE still posted");
        let mut buf = vec![0; 16];
        x.b.mem.read(8192, &mut buf).unwrap();
        assert_eq!(buf, [0; 16], "{case}: nothing written into the other domain's buffer");
        // A later WR on the initiator is flushed.
        x.send(2, x.mine.0.id(), b"after");
        let wcs = Pair::wcs(&x.a.scq);
        assert_eq!(wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(2, WcStatus::WrFlushErr)], "{case}");
    }
}
