//! A hostile peer against the engine (see `common/hostile.rs`): random byte strings drive
//! streams of lying packets, garbage, timer jumps and local posts. No panic, no byte
//! written outside the registered region, only well-formed packets out, no WR completed
//! twice. The same harness is the `engine` cargo-fuzz target for longer runs.

mod common;

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
    ))]

    #[test]
    fn a_hostile_peer_cannot_break_the_engine(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        common::hostile::run(&data);
    }

    #[test]
    fn a_hostile_peer_cannot_break_a_uc_qp(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        common::hostile::run_as(&data, rnic_core::qp_state::QpType::Uc);
    }

    #[test]
    fn a_hostile_peer_cannot_break_a_ud_qp(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        common::hostile::run_as(&data, rnic_core::qp_state::QpType::Ud);
    }
}
