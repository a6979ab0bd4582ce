//! `Device::open_shared`: every caller in a process naming a device gets its one running
//! device (one socket, one engine), a caller naming it with another address is refused
//! with both named, and a plain `Device::open` of the same address joins the device as
//! another member, as another process does (`rnic_core::share`).

use rnic_core::device::{Device, DeviceConfig, DeviceError};
use rnic_core::engine::qp::QpInit;
use std::net::IpAddr;

fn config(name: &str, ip: &str) -> DeviceConfig {
    let ip: IpAddr = ip.parse().unwrap();
    DeviceConfig { pin_memory: false, ..DeviceConfig::new(name, ip) }
}

#[test]
fn one_device_per_name_and_the_port_freed_after_the_last_handle() {
    let a = Device::open_shared(config("shared0", "127.0.82.1")).expect("first open");
    // A second caller joins the same device: no second bind (which would fail with
    // EADDRINUSE), the same memory table and the same counters.
    let b = Device::open_shared(config("shared0", "127.0.82.1")).expect("second open joins");
    assert!(std::sync::Arc::ptr_eq(a.mtpt(), b.mtpt()), "one device, one memory table");
    let pd_a = a.alloc_pd();
    let pd_b = b.alloc_pd();
    assert_ne!(pd_a, pd_b, "PD numbers are the device's, not the caller's");

    // The same name at another address is refused, naming both.
    match Device::open_shared(config("shared0", "127.0.82.2")) {
        Err(DeviceError::Config { why, .. }) => {
            assert!(why.contains("127.0.82.1") && why.contains("127.0.82.2"), "{why}")
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }

    // A plain open of the same address joins the device as another member (as another
    // process would): its own engine, its own part of the QPN space.
    let c = Device::open(config("other", "127.0.82.1")).expect("a second member");
    assert!(!std::sync::Arc::ptr_eq(a.mtpt(), c.mtpt()), "a member has its own memory table");
    let cq = c.create_cq(4);
    let q = c.create_qp(QpInit::new(rnic_core::qp_state::QpType::Rc, c.alloc_pd(), cq.clone(), cq)).expect("qp");
    // The first device's shards hold members 0 .. a.shards(); the second's first QP is on
    // its first shard, the next member.
    let first = u8::try_from(a.shards()).unwrap();
    assert_eq!(rnic_core::share::member_of(q.qpn.value()), first, "member {first}'s QPNs: {:#x}", q.qpn.value());
    drop((a, b, c));

    // Opened again, in a loop from several threads at once: never EADDRINUSE.
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(|| {
                for _ in 0..25 {
                    let d = Device::open_shared(config("shared0", "127.0.82.1")).expect("reopen");
                    d.alloc_pd();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
