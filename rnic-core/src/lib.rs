//! The simulated RoCEv2 HCA.
//!
//! - [`mem`]: registered memory blocks the NIC reads and writes ("DMA"), pinning, and the 8-byte
//!   RDMA atomics. This is the only module of the crate with `unsafe` code.
//! - [`mr`]: the memory translation and protection table (lkey / rkey checks).
//! - [`qp_state`]: the QP state machine, the modify-QP attribute table and attribute value checks.
#![deny(unsafe_code)]

#[allow(unsafe_code)]
pub mod mem;
pub mod mr;
pub mod qp_state;

pub mod counters;
pub mod cq;
pub mod engine;
pub mod fabric;
pub mod wr;
