//! XRC (IBA Annex A14): one initiator QP on rnic0 sends to two XRC SRQs of one XRC domain
//! on rnic1 through a single target QP, naming the SRQ in each work request; each message
//! lands in the SRQ it names and completes in that SRQ's CQ. Then a SEND naming an SRQ of
//! another domain: the target NAKs it (invalid request) and the initiator's completion
//! says so.
//!
//! Run: `cargo run -p rnic-verbs --example xrc` (two emulated devices on 127.0.0.1 and
//! 127.0.0.2).
use rnic_verbs::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(5);

fn main() -> Result<()> {
    let (a, b) = (Context::open("rnic0")?, Context::open("rnic1")?);
    let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
    let cq_a = a.create_cq(16)?;
    let src = pd_a.allocate_mr(4096, AccessFlags::LOCAL_WRITE)?;
    let dst = pd_b.allocate_mr(4096, AccessFlags::LOCAL_WRITE)?;

    // The target side: a domain with two SRQs, each completing in its own CQ.
    let domain = b.open_xrcd()?;
    let (cq_red, cq_blue) = (b.create_cq(16)?, b.create_cq(16)?);
    let red = pd_b.create_xrc_srq(&domain, &cq_red, 16, 1)?;
    let blue = pd_b.create_xrc_srq(&domain, &cq_blue, 16, 1)?;
    red.post_recv(&RecvWr { wr_id: 1, sg_list: vec![dst.sge(0, 1024)] })?;
    blue.post_recv(&RecvWr { wr_id: 2, sg_list: vec![dst.sge(1024, 1024)] })?;

    // One initiator, one target: connected as RC QPs are.
    let ini = pd_a.qp_builder(&cq_a, &cq_a).qp_type(QpType::XrcSend).build()?;
    let tgt = pd_b.qp_builder(&cq_red, &cq_red).qp_type(QpType::XrcRecv).xrcd(&domain).build()?;
    let (ei, et) = (ini.endpoint(), tgt.endpoint());
    let (ini, _tgt) = (ini.connect(&et)?, tgt.connect(&ei)?);

    for (srq, cq, what) in [(&red, &cq_red, "red"), (&blue, &cq_blue, "blue")] {
        let msg = format!("for the {what} SRQ ({})", srq.id());
        src.write(0, msg.as_bytes())?;
        let len = u32::try_from(msg.len()).expect("a short message");
        let wr = SendWr::send(0, vec![src.sge(0, len)]);
        ini.post_send(SendWrRef::from(&wr).to_srq(srq.id()))?;
        let sent = cq_a.wait(1, T)?[0];
        let got = cq.wait(1, T)?[0];
        let mut text = vec![0u8; got.byte_len as usize];
        dst.read(if what == "red" { 0 } else { 1024 }, &mut text)?;
        println!("A sent {}; {what} SRQ's CQ: {got} {:?}", sent.status.name(), String::from_utf8_lossy(&text));
        assert_eq!((sent.status, got.status), (WcStatus::Success, WcStatus::Success));
    }

    // An SRQ of another domain: not the target's to reach.
    let elsewhere = b.open_xrcd()?;
    let cq_other = b.create_cq(4)?;
    let stranger = pd_b.create_xrc_srq(&elsewhere, &cq_other, 4, 1)?;
    stranger.post_recv(&RecvWr { wr_id: 3, sg_list: vec![dst.sge(2048, 1024)] })?;
    let wr = SendWr::send(9, vec![src.sge(0, 8)]);
    ini.post_send(SendWrRef::from(&wr).to_srq(stranger.id()))?;
    let nak = cq_a.wait(1, T)?[0];
    println!("A sent to SRQ {} of another domain: {}", stranger.id(), nak.status.name());
    assert_eq!(nak.status, WcStatus::RemInvReqErr);
    Ok(())
}
