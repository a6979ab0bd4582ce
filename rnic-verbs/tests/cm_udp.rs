//! Connection management between two devices over UDP on loopback, through the verbs
//! API: listen, connect, accept with private data both ways, data on the connected QPs,
//! disconnect; nobody listening and a rejection are errors that say so. UD QPs resolved by
//! SIDR, as rdma_cm's UDP port space does.
#![allow(clippy::cast_possible_truncation)]

use rnic_verbs::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn ip(s: &str) -> std::net::IpAddr {
    s.parse().unwrap()
}

#[test]
fn connect_accept_move_data_and_disconnect() {
    let server = Context::open_at("rnic0", ip("127.0.44.1")).unwrap();
    let client = Context::open_at("rnic1", ip("127.0.44.2")).unwrap();
    server.cm_listen(7471).unwrap();
    let s = std::thread::spawn(move || {
        let (pd, cq) = (server.alloc_pd().unwrap(), server.create_cq(64).unwrap());
        let mr = pd.allocate_mr(8192, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).unwrap();
        // The event fd: not readable before the request, readable once it waits, not
        // after it was taken.
        let readable = |fd: std::os::fd::BorrowedFd<'_>, ms: i32| {
            use std::os::fd::AsRawFd;
            let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one pollfd on a live descriptor.
            unsafe { libc::poll(&mut p, 1, ms) == 1 }
        };
        assert!(readable(server.cm_event_fd().unwrap(), 10_000), "the fd wakes a poll when the REQ arrives");
        let Some(CmEvent::ConnectRequest(req)) = server.cm_poll_event().unwrap() else { panic!("not a request") };
        assert!(!readable(server.cm_event_fd().unwrap(), 0), "nothing waits any more");
        assert_eq!((req.src, req.port, &req.private_data[..5]), (ip("127.0.44.2"), 7471, &b"hello"[..]));
        let qp = pd.qp_builder(&cq, &cq).access(AccessFlags::REMOTE_WRITE).build().unwrap();
        let conn = server.cm_accept(&req, qp, b"welcome").unwrap();
        conn.qp.post_recv(&RecvWr { wr_id: 1, sg_list: vec![mr.sge(0, 4096)] }).unwrap();
        assert!(matches!(server.cm_get_event(T).unwrap(), CmEvent::Established { id } if id == conn.id));
        let wc = cq.wait(1, T).unwrap();
        assert_eq!((wc[0].status, wc[0].byte_len), (WcStatus::Success, 11));
        let mut got = [0u8; 11];
        mr.read(0, &mut got).unwrap();
        assert_eq!(&got, b"over the CM");
        let ev = server.cm_get_event(T).unwrap();
        assert!(matches!(ev, CmEvent::Disconnected { id, .. } if id == conn.id), "{ev:?}");
    });
    let (pd, cq) = (client.alloc_pd().unwrap(), client.create_cq(64).unwrap());
    let mr = pd.allocate_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    mr.write(0, b"over the CM").unwrap();
    let qp = pd.qp_builder(&cq, &cq).build().unwrap();
    let conn = client.cm_connect(qp, ip("127.0.44.1"), 7471, b"hello", T).unwrap();
    assert_eq!(&conn.private_data[..7], b"welcome");
    assert_eq!(conn.qp.state(), QpState::Rts);
    conn.qp.post_send(&SendWr::send(2, vec![mr.sge(0, 11)])).unwrap();
    assert_eq!(cq.wait(1, T).unwrap()[0].status, WcStatus::Success);
    // This side's Established came when the RTU left.
    assert!(matches!(client.cm_get_event(T).unwrap(), CmEvent::Established { id } if id == conn.id));
    conn.disconnect(b"").unwrap();
    let ev = client.cm_get_event(T).unwrap();
    assert!(matches!(ev, CmEvent::Disconnected { .. }), "{ev:?}");
    s.join().unwrap();
}

#[test]
fn nobody_listening_and_a_rejection_are_errors_that_say_so() {
    let server = Context::open_at("rnic0", ip("127.0.44.5")).unwrap();
    let client = Context::open_at("rnic1", ip("127.0.44.6")).unwrap();
    let (pd, cq) = (client.alloc_pd().unwrap(), client.create_cq(64).unwrap());
    let qp = pd.qp_builder(&cq, &cq).build().unwrap();
    let err = client.cm_connect(qp, ip("127.0.44.5"), 9999, b"", T).unwrap_err().to_string();
    assert!(err.contains("nobody listens on 127.0.44.5 port 9999"), "{err}");
    server.cm_listen(9998).unwrap();
    let s = std::thread::spawn(move || {
        let CmEvent::ConnectRequest(req) = server.cm_get_event(T).unwrap() else { panic!() };
        server.cm_reject(&req, b"no room").unwrap();
    });
    let qp = pd.qp_builder(&cq, &cq).build().unwrap();
    let err = client.cm_connect(qp, ip("127.0.44.5"), 9998, b"", T).unwrap_err().to_string();
    assert!(err.contains("rejected the connection (reason 28)"), "{err}");
    s.join().unwrap();
    let qp = pd.qp_builder(&cq, &cq).qp_type(QpType::Ud).build().unwrap();
    assert!(client.cm_connect(qp, ip("127.0.44.5"), 9998, b"", T).is_err(), "UD is not connected");
}

/// UD through the CM, rdma_cm's UDP port space: the client resolves the server's UD QP by
/// SIDR (SIDR_REQ carrying rdma_cm's header and private data, SIDR_REP naming the QPN and
/// Q_Key), sends datagrams there, and the server answers each to the address and QP the
/// datagram came from, as udaddy does.
#[test]
fn resolve_a_ud_qp_by_sidr_and_exchange_datagrams() {
    let server = Context::open_at("rnic0", ip("127.0.44.9")).unwrap();
    let client = Context::open_at("rnic1", ip("127.0.44.10")).unwrap();
    server.cm_listen_ud(7174).unwrap();
    assert!(server.cm_listen_ud(7174).is_err(), "one listener per port");
    const N: u64 = 4;
    const SIZE: usize = 100;
    let s = std::thread::spawn(move || {
        let (pd, cq) = (server.alloc_pd().unwrap(), server.create_cq(64).unwrap());
        let mr = pd.allocate_mr(16384, AccessFlags::LOCAL_WRITE).unwrap();
        let qp = pd.qp_builder(&cq, &cq).qp_type(QpType::Ud).qkey(RDMA_UDP_QKEY).build().unwrap();
        let qp = qp.activate().unwrap();
        for i in 0..N {
            let at = i as usize * 1024;
            qp.post_recv(&RecvWr { wr_id: i, sg_list: vec![mr.sge(at, (GRH_LEN + SIZE) as u32)] }).unwrap();
        }
        let CmEvent::UdRequest(req) = server.cm_get_event(T).unwrap() else { panic!("not a UD request") };
        assert_eq!((req.src, req.port, &req.private_data[..5]), (ip("127.0.44.10"), 7174, &b"hello"[..]));
        assert_eq!(req.private_data.len(), SIDR_PRIVATE_DATA, "216 bytes less rdma_cm's header");
        assert!(req.src_port >= 0xC000);
        // A UD request is answered with a UD QP that is ready.
        let rc = pd.qp_builder(&cq, &cq).build().unwrap();
        let err = server.cm_accept_ud(&req, rc.qp(), b"").unwrap_err().to_string();
        assert!(err.contains("UD QP in RTS"), "{err}");
        server.cm_accept_ud(&req, &qp, b"ud here").unwrap();
        assert!(server.cm_accept_ud(&req, &qp, b"").unwrap_err().to_string().contains("answered already"));
        let wcs = cq.wait(N as usize, T).unwrap();
        for wc in &wcs {
            assert_eq!((wc.status, wc.byte_len as usize), (WcStatus::Success, GRH_LEN + SIZE));
            let mut got = vec![0u8; SIZE];
            mr.read(wc.wr_id as usize * 1024 + GRH_LEN, &mut got).unwrap();
            assert_eq!(got, vec![wc.wr_id as u8 + 1; SIZE], "datagram {}", wc.wr_id);
            // The reply goes where the datagram came from, with rdma_cm's Q_Key.
            let back = pd.create_ah_from_grh(&{
                let mut g = vec![0u8; GRH_LEN];
                mr.read(wc.wr_id as usize * 1024, &mut g).unwrap();
                g
            });
            let back = back.unwrap().dest(wc.src_qp, RDMA_UDP_QKEY);
            qp.post_send(
                &SendWr::send(100 + wc.wr_id, vec![mr.sge(wc.wr_id as usize * 1024 + GRH_LEN, SIZE as u32)]).to(back),
            )
            .unwrap();
        }
        let sent = cq.wait(N as usize, T).unwrap();
        assert!(sent.iter().all(|wc| wc.status == WcStatus::Success));
    });
    let (pd, cq) = (client.alloc_pd().unwrap(), client.create_cq(64).unwrap());
    let mr = pd.allocate_mr(16384, AccessFlags::LOCAL_WRITE).unwrap();
    let qp = pd.qp_builder(&cq, &cq).qp_type(QpType::Ud).qkey(RDMA_UDP_QKEY).build().unwrap().activate().unwrap();
    for i in 0..N {
        qp.post_recv(&RecvWr {
            wr_id: 10 + i,
            sg_list: vec![mr.sge(8192 + i as usize * 1024, (GRH_LEN + SIZE) as u32)],
        })
        .unwrap();
    }
    let remote = client.cm_resolve_ud(ip("127.0.44.9"), 7174, b"hello", T).unwrap();
    assert_eq!(
        (remote.dst, remote.qkey, &remote.private_data[..7]),
        (ip("127.0.44.9"), RDMA_UDP_QKEY, &b"ud here"[..])
    );
    for i in 0..N {
        mr.write(i as usize * 1024, &[i as u8 + 1; SIZE]).unwrap();
        qp.post_send(&SendWr::send(i, vec![mr.sge(i as usize * 1024, SIZE as u32)]).to(remote.dest())).unwrap();
    }
    let wcs = cq.wait(2 * N as usize, T).unwrap();
    let recvs: Vec<_> = wcs.iter().filter(|wc| wc.opcode == WcOpcode::Recv).collect();
    assert_eq!(recvs.len(), N as usize, "{wcs:?}");
    for wc in recvs {
        assert_eq!((wc.status, wc.src_qp), (WcStatus::Success, remote.qpn));
        let mut got = vec![0u8; SIZE];
        mr.read(8192 + (wc.wr_id as usize - 10) * 1024 + GRH_LEN, &mut got).unwrap();
        assert!(got.iter().all(|&b| b == got[0] && (1..=N as u8).contains(&b)), "an echo of one datagram");
    }
    s.join().unwrap();
}

#[test]
fn resolving_a_port_nobody_listens_on_fails_at_once_and_silence_times_out() {
    let server = Context::open_at("rnic0", ip("127.0.44.11")).unwrap();
    let client = Context::open_at("rnic1", ip("127.0.44.12")).unwrap();
    server.cm_listen(7175).unwrap();
    // Nobody listens on UDP port 7175 (a TCP-port-space listener is another service ID):
    // the peer's CM answers status 1 at once, as Linux's does.
    let t0 = std::time::Instant::now();
    let err = client.cm_resolve_ud(ip("127.0.44.11"), 7175, b"", T).unwrap_err().to_string();
    assert!(err.contains("nobody listens on 127.0.44.11 UDP port 7175"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(2), "promptly, not after a retry: {:?}", t0.elapsed());
    // A refusal says so.
    server.cm_listen_ud(7176).unwrap();
    let s = std::thread::spawn(move || {
        let CmEvent::UdRequest(req) = server.cm_get_event(T).unwrap() else { panic!() };
        server.cm_reject_ud(&req, b"full").unwrap();
        server
    });
    let err = client.cm_resolve_ud(ip("127.0.44.11"), 7176, b"", T).unwrap_err().to_string();
    assert!(err.contains("refused UDP port 7176 (SIDR status 2: rejected)"), "{err}");
    let server = s.join().unwrap();
    // Silence: a listener that never answers. The wait ends at the caller's timeout, and
    // the request is given up (no stray event follows).
    server.cm_listen_ud(7177).unwrap();
    let t0 = std::time::Instant::now();
    let e = client.cm_resolve_ud(ip("127.0.44.11"), 7177, b"", Duration::from_millis(700)).unwrap_err();
    assert!(matches!(e, Error::EventTimeout(_)), "{e}");
    assert!(t0.elapsed() >= Duration::from_millis(700));
    assert!(matches!(server.cm_get_event(T).unwrap(), CmEvent::UdRequest(r) if r.port == 7177));
    assert!(client.cm_poll_event().unwrap().is_none(), "nothing stray");
    // Too much private data is refused before anything is sent.
    let err = client.cm_resolve_ud(ip("127.0.44.11"), 7177, &[0; 181], T).unwrap_err().to_string();
    assert!(err.contains("181 bytes of private data, at most 180"), "{err}");
}
