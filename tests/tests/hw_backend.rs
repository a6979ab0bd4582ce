//! rnic-verbs' `hw` backend on a machine that may have no RDMA hardware (CI, this host):
//! every path ends in a clear error or a device list, never a crash. The runs on a real
//! device are `scripts/rxe-hw.sh` (Linux rxe in the rxe-lab guest).
use rnic_verbs::hw::{self, HwContext, HwError};

#[test]
fn listing_devices_is_a_list_or_names_the_missing_library() {
    match hw::devices() {
        Ok(list) => {
            for d in &list {
                assert!(!d.name.is_empty(), "a device without a name: {d:?}");
            }
        }
        Err(HwError::Load(e)) => assert!(e.to_string().contains("libibverbs.so.1"), "{e}"),
        Err(e) => panic!("unexpected error listing devices: {e}"),
    }
}

#[test]
fn opening_an_unknown_device_names_it_and_the_known_ones() {
    match HwContext::open("no-such-rdma-device") {
        Err(HwError::NoSuchDevice { name, known }) => {
            assert_eq!(name, "no-such-rdma-device");
            let listed: Vec<String> = hw::devices().expect("listed once").into_iter().map(|d| d.name).collect();
            if listed.is_empty() {
                assert_eq!(known, "no devices");
            } else {
                assert_eq!(known, listed.join(", "));
            }
        }
        Err(HwError::Load(e)) => assert!(e.to_string().contains("rdma-core"), "{e}"),
        other => panic!("expected NoSuchDevice or Load, got {other:?}"),
    }
}
