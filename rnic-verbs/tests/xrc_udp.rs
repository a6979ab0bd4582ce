//! XRC over real UDP on loopback (IBA Annex A14): one initiator QP on rnic0 reaches two
//! XRC SRQs of one domain on rnic1 through one target QP, each SEND landing in the SRQ its
//! work request names and completing in that SRQ's CQ; a SEND naming an SRQ of another
//! domain is NAKed (invalid request) and the initiator sees the error completion. And the
//! misuses the API refuses, each naming what was wrong.
#![allow(clippy::cast_possible_truncation)]

use rnic_verbs::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

#[test]
fn an_xrc_send_reaches_the_srq_it_names_and_one_naming_another_domains_srq_is_nacked() {
    let a = Context::open_at("rnic0", "127.0.150.1".parse().unwrap()).unwrap();
    let b = Context::open_at("rnic1", "127.0.150.2".parse().unwrap()).unwrap();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let cq_a = a.create_cq(16).unwrap();
    let src = pd_a.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let dst = pd_b.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();

    // rnic1: domain d1 with two SRQs (each completing in its own CQ), domain d2 with one.
    let (d1, d2) = (b.open_xrcd().unwrap(), b.open_xrcd().unwrap());
    let cqs: Vec<CompletionQueue> = (0..3).map(|_| b.create_cq(16).unwrap()).collect();
    let s1 = pd_b.create_xrc_srq(&d1, &cqs[0], 16, 1).unwrap();
    let s2 = pd_b.create_xrc_srq(&d1, &cqs[1], 16, 1).unwrap();
    let s3 = pd_b.create_xrc_srq(&d2, &cqs[2], 16, 1).unwrap();
    assert!(d1.holds(&s1) && d1.holds(&s2) && !d1.holds(&s3) && d2.holds(&s3));
    assert!(d1.same(&d1.clone()) && !d1.same(&d2));
    assert!(s1.xrcd().is_some() && s1.cq().is_some());
    for (i, s) in [&s1, &s2, &s3].into_iter().enumerate() {
        s.post_recv(&RecvWr { wr_id: 10 + i as u64, sg_list: vec![dst.sge(1024 * i, 1024)] }).unwrap();
    }

    let ini = pd_a.qp_builder(&cq_a, &cq_a).qp_type(QpType::XrcSend).build().unwrap();
    let unused = b.create_cq(1).unwrap();
    let tgt = pd_b.qp_builder(&unused, &unused).qp_type(QpType::XrcRecv).xrcd(&d1).build().unwrap();
    let (ei, et) = (ini.endpoint(), tgt.endpoint());
    let (ini, tgt) = (ini.connect(&et).unwrap(), tgt.connect(&ei).unwrap());
    assert_eq!((ini.qp_type(), tgt.qp_type()), (QpType::XrcSend, QpType::XrcRecv));

    // One SEND to each SRQ of d1: each lands in its SRQ's buffer and completes in its CQ.
    for (i, (srq, cq)) in [(&s1, &cqs[0]), (&s2, &cqs[1])].into_iter().enumerate() {
        let msg = format!("to XRC SRQ {}", srq.id());
        src.write(0, msg.as_bytes()).unwrap();
        let wr = SendWr::send(i as u64, vec![src.sge(0, msg.len() as u32)]);
        ini.post_send(SendWrRef::from(&wr).to_srq(srq.id())).unwrap();
        let sent = cq_a.wait(1, T).unwrap()[0];
        assert_eq!((sent.wr_id, sent.status), (i as u64, WcStatus::Success), "{sent}");
        let got = cq.wait(1, T).unwrap()[0];
        assert_eq!((got.wr_id, got.status, got.opcode), (10 + i as u64, WcStatus::Success, WcOpcode::Recv));
        assert_eq!(got.byte_len as usize, msg.len());
        let mut back = vec![0; msg.len()];
        dst.read(1024 * i, &mut back).unwrap();
        assert_eq!(back, msg.as_bytes());
        assert_eq!(srq.len().unwrap(), 0);
    }
    assert!(unused.is_empty(), "nothing completes in the target QP's own CQ");

    // s3 is d2's: the target (in d1) refuses it, NAK invalid request, the initiator's
    // completion says so, and nothing reaches s3.
    let wr = SendWr::send(7, vec![src.sge(0, 8)]);
    ini.post_send(SendWrRef::from(&wr).to_srq(s3.id())).unwrap();
    let nak = cq_a.wait(1, T).unwrap()[0];
    assert_eq!((nak.wr_id, nak.status), (7, WcStatus::RemInvReqErr), "{nak}");
    assert!(cqs[2].poll_one().unwrap().is_none());
    assert_eq!(s3.len().unwrap(), 1, "the other domain's receive is still posted");
}

#[test]
fn xrc_misuse_is_refused_naming_what_was_wrong() {
    let a = Context::open_at("rnic0", "127.0.151.1".parse().unwrap()).unwrap();
    let other = Context::open_at("rnic1", "127.0.151.2".parse().unwrap()).unwrap();
    let pd = a.alloc_pd().unwrap();
    let cq = a.create_cq(8).unwrap();
    let d = a.open_xrcd().unwrap();
    let foreign_d = other.open_xrcd().unwrap();
    let mr = pd.allocate_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let report = |e: Error| e.report();

    // A target without a domain, a domain on an RC QP, a domain of another device.
    let e = report(pd.qp_builder(&cq, &cq).qp_type(QpType::XrcRecv).build().unwrap_err());
    assert!(e.contains("needs") || e.contains(".xrcd(&domain)"), "{e}");
    let e = report(pd.qp_builder(&cq, &cq).xrcd(&d).build().unwrap_err());
    assert!(e.contains("RC QP has no XRC domain"), "{e}");
    let e = report(pd.qp_builder(&cq, &cq).qp_type(QpType::XrcRecv).xrcd(&foreign_d).build().unwrap_err());
    assert!(e.contains("belongs to device rnic1"), "{e}");
    // An XRC SRQ of another device's domain, or completing in another device's CQ.
    let e = report(pd.create_xrc_srq(&foreign_d, &cq, 4, 1).unwrap_err());
    assert!(e.contains("XRC domain belongs to device rnic1"), "{e}");
    // An XRC SRQ is reached only through a target: an RC QP may not take it, nor may an
    // initiator take any SRQ.
    let xs = pd.create_xrc_srq(&d, &cq, 4, 1).unwrap();
    let e = report(pd.qp_builder(&cq, &cq).srq(&xs).build().unwrap_err());
    assert!(e.contains("XRC SRQ"), "{e}");
    let e = report(pd.qp_builder(&cq, &cq).qp_type(QpType::XrcSend).srq(&xs).build().unwrap_err());
    assert!(e.contains("takes no SRQ"), "{e}");
    // A target has no receive queue of its own; an initiator's SEND must name an SRQ.
    let tgt = pd.qp_builder(&cq, &cq).qp_type(QpType::XrcRecv).xrcd(&d).build().unwrap();
    let e = report(tgt.qp().post_recv(&RecvWr { wr_id: 1, sg_list: vec![mr.sge(0, 8)] }).unwrap_err());
    assert!(e.starts_with("post receive on QP"), "{e}");
    let ghost = Endpoint { qpn: 0x11, gid: Gid::from_ip("127.0.151.99".parse().unwrap()), psn: 0 };
    let ini = pd.qp_builder(&cq, &cq).qp_type(QpType::XrcSend).build().unwrap().connect(&ghost).unwrap();
    let e = report(ini.post_send(&SendWr::send(1, vec![mr.sge(0, 8)])).unwrap_err());
    assert!(e.contains("SRQ"), "{e}");
}
