//! Arbitrary bytes as a RoCEv2 UDP payload (BTH..ICRC), alone and inside a frame: the
//! packet parser refuses them or accepts a canonical packet, and the frame parser
//! reports exactly what the packet parser does (see `rnic_fuzz`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rnic_fuzz::check_roce(data);
    rnic_fuzz::check_roce_in_frame(data);
});
