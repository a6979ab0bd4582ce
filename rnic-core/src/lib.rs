//! The simulated RoCEv2 HCA.
//!
//! - [`mem`]: registered memory blocks the NIC reads and writes ("DMA"), pinning, and the
//!   8-byte RDMA atomics. `unsafe` code lives there (with its child `mem::dm`, views of
//!   device memory) and in three other modules only, each
//!   with its own `allow(unsafe_code)`: `crc_copy` (copying a payload and taking its CRC
//!   in one pass), `icrc_fold` (the CRC of a short packet by carry-less multiplication)
//!   and [`hop_trace`] (`RDTSC`, with the `hop-trace` feature). The system
//!   calls std and socket2 lack (UDP GSO/GRO, `sendmmsg`/`recvmmsg`, `ppoll`, eventfd,
//!   CPU affinity, reuseport BPF, the raw-Ethernet transport's `AF_PACKET` socket) are the
//!   `rnic-io` crate's, behind safe functions.
//! - [`mr`]: the memory translation and protection table (lkey / rkey checks).
//! - [`qp_state`]: the QP state machine, the modify-QP attribute table and value checks.
//! - [`wr`], [`cq`], [`counters`]: work requests and completions, completion queues,
//!   rxe-named counters.
//! - [`post`]: validated work requests and the checks a post makes (used by the engine
//!   and the SRQ).
//! - [`srq`]: shared receive queues.
//! - [`engine`]: the sans-IO protocol engine (requester/completer and responder).
//! - [`fabric`]: engines on virtual time with fault-injection rules, for tests.
//! - [`faults`]: the fault-injection rules themselves (also applied by the UDP transport).
//! - [`device`]: the driver running an engine on a progress thread over UDP.
//! - [`gso`]: UDP GSO/GRO batching and the ICRC check for GSO segments' IPv4 IDs.
//! - [`rx_icrc`]: the receive-side ICRC check when the IPv4 ID is unknown (Linux rxe's
//!   packets): solving for the ID, per `RNIC_IPV4_ID`.
//! - [`capture`]: pcap capture of every packet.
//! - [`cc`]: congestion control, DCQCN's notification and reaction points, sans-IO.
//! - [`cm`]: the Communication Manager (connection set-up over QP1 MADs), sans-IO.
#![deny(unsafe_code)]
#![warn(missing_docs)]

/// Nanoseconds on a device's clock: virtual in tests ([`fabric`]), monotonic in the driver
/// ([`device`]). The engine, congestion control and the CM all run on it.
pub type Time = u64;

#[allow(unsafe_code)]
mod crc_copy;
#[allow(unsafe_code)]
mod icrc_fold;

#[allow(unsafe_code)]
pub mod mem;
pub mod mr;
pub mod post;
pub mod qp_state;

pub mod caps;
pub mod capture;
pub mod cc;
pub mod cm;
mod config;
pub mod counters;
pub mod cq;
pub mod device;
pub mod engine;
pub mod fabric;
pub mod faults;
pub mod gso;
pub mod hop_trace;
pub mod rx_icrc;
pub mod srq;
mod transport;
pub use transport::share;
pub mod wr;
