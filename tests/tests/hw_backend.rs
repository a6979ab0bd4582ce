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

/// The one API with the `hw` feature built in: emulated names still open the emulator,
/// and a device name libibverbs does not list is refused naming every device there is.
#[test]
fn the_verbs_api_opens_emulated_devices_beside_the_hardware_ones() {
    use rnic_verbs::{Context, DeviceKind, Error};
    let ctx = Context::open_at("rnic5", "127.0.45.1".parse().unwrap()).expect("the emulator opens with hw built in");
    assert_eq!(ctx.kind(), DeviceKind::Emulated);
    let hw_names: Vec<String> = rnic_verbs::devices()
        .expect("listing never fails for a missing rdma-core")
        .into_iter()
        .filter(|d| d.kind == DeviceKind::Hardware)
        .map(|d| d.name)
        .collect();
    match Context::open("mlx5_99") {
        Err(Error::NoSuchDevice { name, known }) => {
            assert_eq!(name, "mlx5_99");
            assert!(known.contains("rnic0="), "{known}");
            for n in &hw_names {
                assert!(known.contains(&format!("{n} (hardware)")), "{known}");
            }
        }
        other => panic!("expected NoSuchDevice, got {other:?}"),
    }
    // What only the emulator has is refused on hardware with Error::Unsupported; on this
    // machine there may be no hardware device to show it on.
    for n in &hw_names {
        let Ok(c) = Context::open(n) else { continue };
        assert_eq!(c.kind(), DeviceKind::Hardware);
        assert!(matches!(c.cm_listen(7000), Err(Error::Unsupported { .. })));
    }
}
