//! What one process sharing a device hears from another (`rnic_core::share`): a message
//! on its Unix name, and the datagrams the group's steering program reads. Decoding
//! arbitrary bytes never panics, what decodes re-encodes to the same bytes, and the
//! program built from any table steers any datagram as the sharing design says.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rnic_fuzz::check_share(data));
