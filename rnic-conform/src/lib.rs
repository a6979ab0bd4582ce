//! `rnic conform`: a conformance tester for other RoCE implementations (issue 35).
//!
//! It takes the requester's side of an RC connection to a peer running an ordinary
//! program (rnic's lab responder, `tools/conform/responder.c`, on Linux rxe, on rnic, on
//! anything with librdmacm), speaking the CM itself ([`cm`]) and every packet after it
//! ([`link`]), and runs [`scenario`]s: each one IBA rule, the peer's answers judged
//! ([`judge`]) against an independent model of a conforming responder ([`model`]).
//!
//! Dependencies: rnic-wire for every byte in and out (what the peer sends passes its
//! checks before anything reads it), rnic-io for the socket option the ICRC needs. Not
//! rnic-core: the oracle must not be rnic's own responder replayed.
#![forbid(unsafe_code)]

pub mod cm;
pub mod cm_scenario;
pub mod fuzz;
pub mod fuzz_ucud;
pub mod judge;
pub mod link;
pub mod model;
pub mod scenario;
pub mod session;
pub mod uc;
pub mod ud;
pub mod wrap;
