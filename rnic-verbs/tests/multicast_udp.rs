//! UD multicast through the verbs API over real UDP on loopback (devices at 127.0.53.x,
//! group 239.53.0.1): a datagram to the group reaches every attached QP of every device,
//! the sender's own and those of a second member of a shared device (another process's
//! engine on the same address) included; a detached QP and a device that left the group
//! get nothing more; bad attaches are refused.
#![allow(clippy::cast_possible_truncation)]

use rnic_core::device::DeviceConfig;
use rnic_verbs::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);
const QKEY: u32 = 0x0123_4567;

struct End {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
    qp: QueuePair,
}

fn end(name: &str, ip: &str) -> End {
    let config = DeviceConfig { pin_memory: false, capture: None, ..DeviceConfig::new(name, ip.parse().unwrap()) };
    let ctx = Context::open_with(config).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let mr = pd.allocate_mr(1 << 16, AccessFlags::LOCAL_WRITE).unwrap();
    let qp = pd.qp_builder(&cq, &cq).qp_type(QpType::Ud).qkey(QKEY).build().unwrap().activate().unwrap();
    End { ctx, pd, cq, mr, qp }
}

impl End {
    fn post_recv(&self, wr_id: u64) {
        let off = (wr_id % 8) as usize * 4096;
        self.qp.post_recv(&RecvWr { wr_id, sg_list: vec![self.mr.sge(off, 4096)] }).unwrap();
    }
    /// Sends `data` to the group from offset 60000 and waits for its completion.
    fn send(&self, group: Gid, data: &[u8]) {
        self.mr.write(60_000, data).unwrap();
        let ah = self.pd.create_ah(group).unwrap();
        let wr = SendWr::send(99, vec![self.mr.sge(60_000, data.len() as u32)]).to(ah.dest(MULTICAST_QPN, QKEY));
        self.qp.post_send(&wr).unwrap();
        let wc = self.cq.wait(1, T).unwrap()[0];
        assert_eq!((wc.wr_id, wc.status), (99, WcStatus::Success));
    }
    /// Waits for one receive; returns its payload, GRH area and source QPN.
    fn recv(&self) -> (Vec<u8>, Vec<u8>, u32) {
        let wc = self.cq.wait(1, T).unwrap_or_else(|e| {
            let nonzero: Vec<_> = self.ctx.counters().into_iter().filter(|c| c.1 != 0).collect();
            panic!("{}: {e}: {nonzero:?}", self.ctx.name())
        })[0];
        assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Recv), "{wc}");
        let off = (wc.wr_id % 8) as usize * 4096;
        let mut buf = vec![0; wc.byte_len as usize];
        self.mr.read(off, &mut buf).unwrap();
        (buf[GRH_LEN..].to_vec(), buf[..GRH_LEN].to_vec(), wc.src_qp)
    }
    fn counter(&self, name: &str) -> u64 {
        self.ctx.counter(name).unwrap()
    }
}

#[test]
fn a_datagram_to_the_group_reaches_every_attached_qp_over_udp() {
    let group = Gid::from_ip("239.53.0.1".parse().unwrap());
    let a = end("rnic0", "127.0.53.1");
    let b = end("rnic1", "127.0.53.2");
    // Another member of b's device (what a second process opening it is).
    let b2 = end("rnic1", "127.0.53.2");
    // A device that joins nothing.
    let c = end("rnic2", "127.0.53.3");
    for e in [&a, &b, &b2] {
        e.qp.attach_mcast(group).unwrap();
        // A repeat is no error and still one copy.
        e.qp.attach_mcast(group).unwrap();
        e.post_recv(1);
    }
    c.post_recv(1);
    a.send(group, b"to everyone");
    for (e, who) in [(&b, "b"), (&b2, "b's second member"), (&a, "the sender, looped back")] {
        let (data, grh, src) = e.recv();
        assert_eq!((data.as_slice(), src), (&b"to everyone"[..], a.qp.qpn()), "{who}");
        assert_eq!(grh[32..36], [127, 0, 53, 1], "{who}: the source in the GRH area");
        assert_eq!(grh[36..40], [239, 53, 0, 1], "{who}: the group as destination");
    }
    // Nothing else arrived: one copy each.
    assert_eq!(b.counter("rdma_recvs") + b2.counter("rdma_recvs") + a.counter("rdma_recvs"), 3);

    // b2 leaves: b still receives, b2 gets nothing more (its device left the group).
    b2.qp.detach_mcast(group).unwrap();
    for e in [&a, &b, &b2] {
        e.post_recv(2);
    }
    a.send(group, b"second");
    assert_eq!(b.recv().0, b"second");
    assert_eq!(a.recv().0, b"second");
    // A third datagram shows b2 would have had the second by now.
    b.post_recv(3);
    a.send(group, b"third");
    assert_eq!(b.recv().0, b"third");
    assert_eq!(b2.counter("rdma_recvs"), 1, "a detached member receives nothing");
    assert_eq!(c.counter("rdma_recvs"), 0, "a device outside the group receives nothing");
    assert_eq!(c.counter("rcvd_pkts"), 0);
    for e in [&a, &b, &b2, &c] {
        assert_eq!(e.counter("icrc_err"), 0, "{}", e.ctx.name());
    }
}

#[test]
fn bad_attaches_are_refused() {
    let a = end("rnic0", "127.0.53.9");
    let unicast = Gid::from_ip("10.1.2.3".parse().unwrap());
    let e = a.qp.attach_mcast(unicast).unwrap_err();
    assert!(e.report().contains("not a multicast address"), "{}", e.report());
    let v6 = Gid::from_ip("ff0e::53".parse().unwrap());
    let e = a.qp.attach_mcast(v6).unwrap_err();
    assert!(e.report().contains("address family"), "{}", e.report());
    let group = Gid::from_ip("239.53.0.9".parse().unwrap());
    let e = a.qp.detach_mcast(group).unwrap_err();
    assert!(e.report().contains("is not attached"), "{}", e.report());
    let rc = a.pd.qp_builder(&a.cq, &a.cq).build().unwrap();
    let e = rc.qp().attach_mcast(group).unwrap_err();
    assert!(e.report().contains("only UD QPs"), "{}", e.report());
    // The IPv6 group refused above left nothing attached behind it.
    let e = a.qp.detach_mcast(v6).unwrap_err();
    assert!(e.report().contains("is not attached"), "{}", e.report());
}
