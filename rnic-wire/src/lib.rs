//! # rnic-wire: RoCEv2 on the wire
//!
//! Zero-copy views and validated representations of every RoCEv2 header (IBA Vol 1
//! chapter 9 and Annex A17), the invariant CRC, and the Ethernet / IPv4 / IPv6 / UDP
//! encapsulation that carries them. No I/O, no clock, no `unsafe`, no allocation on
//! the parse path.
//!
//! ## The contract (after smoltcp's `wire` module)
//!
//! Each header has the same shape:
//!
//! * a view `Xxx<T: AsRef<[u8]>>` over a buffer: `new_unchecked`, `new_checked`
//!   (which calls `check_len`), `into_inner`, getters for `AsRef`, setters for `AsMut`.
//!   After `check_len` succeeds no getter can panic, whatever the bytes are.
//! * a validated representation `XxxRepr` with `parse(&view)`, `emit(&mut view)` and
//!   `buffer_len()`. `emit` never panics on a buffer of at least `buffer_len()` bytes.
//!
//! Closed sets of wire values (opcodes, NAK codes) keep their raw number, so a value
//! this crate does not know is reported, never a panic. Malformed input from a peer is
//! an [`Error`] naming what was wrong.
//!
//! ## Layers
//!
//! * [`bth`] and the extension headers ([`reth`], [`aeth`], [`atomic`], [`deth`],
//!   [`small`] for ImmDt / IETH / FETH, and the CNP body).
//! * [`opcode`]: the one table that says which headers each opcode carries, in order.
//! * [`roce`]: a whole RoCEv2 packet, BTH to ICRC, as a UDP socket sees it.
//! * [`icrc`]: the invariant CRC over the masked IP/UDP/BTH pseudo-header.
//! * [`ethernet`], [`ipv4`], [`ipv6`], [`udp`] and [`frame`]: full frames, as a raw
//!   Ethernet transport or a capture file sees them.
//! * [`mad`] and [`cm`]: the management datagrams a UD SEND to QP1 carries, and the
//!   Communication Manager's messages (connection set-up as rdma_cm speaks it).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod field;
mod seq;

pub mod aeth;
pub mod atomic;
pub mod bth;
pub mod cm;
pub mod deth;
pub mod ethernet;
pub mod frame;
pub mod icrc;
pub mod ipv4;
pub mod ipv6;
pub mod mad;
pub mod opcode;
pub mod reth;
pub mod roce;
pub mod small;
pub mod udp;

pub use error::{Error, Result};
pub use opcode::{HeaderKind, Opcode, OpcodeInfo};
pub use seq::{Psn, Qpn};

/// The UDP destination port IANA assigned to RoCEv2 (IBA Annex A17.2.1).
pub const ROCEV2_UDP_PORT: u16 = 4791;

/// Lowest UDP source port a RoCEv2 sender should use (rxe's
/// `IB_ROCE_UDP_ENCAP_VALID_PORT_MIN`, Annex A17.2.2 recommends the ephemeral range).
pub const ROCEV2_SPORT_MIN: u16 = 0xC000;

/// Length of the invariant CRC that ends every RoCEv2 packet.
pub const ICRC_LEN: usize = 4;
