//! Arbitrary bytes as an Ethernet frame, as a bare IP packet and as a UDP payload:
//! every parser either refuses them or accepts a canonical packet (see `rnic_fuzz`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rnic_fuzz::check_frame(data);
    rnic_fuzz::check_ip(data);
    rnic_fuzz::check_roce(data);
});
