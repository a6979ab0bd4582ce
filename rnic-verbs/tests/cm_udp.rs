//! Connection management between two devices over UDP on loopback, through the verbs
//! API: listen, connect, accept with private data both ways, data on the connected QPs,
//! disconnect; nobody listening and a rejection are errors that say so.

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
