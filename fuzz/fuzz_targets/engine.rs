//! A hostile peer against the protocol engine: the bytes drive lying packets, garbage,
//! timer jumps and local posts (the harness is `rnic-core/tests/common/hostile.rs`, which
//! `cargo test` also runs as a property test). No panic, no byte written outside the
//! registered region, only well-formed packets out, no WR completed twice.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../rnic-core/tests/common/hostile.rs"]
mod hostile;

fuzz_target!(|data: &[u8]| {
    hostile::run(data);
});
