//! Transports: how a device's packets reach the wire. The driver (`device.rs`) runs an
//! engine over one [`Transport`]: it hands it the engine's packets to send and takes what
//! it received, and sleeps on its descriptor between rounds.
//!
//! - [`udp`]: RoCEv2 in UDP datagrams through a socket (the kernel builds the IP and UDP
//!   headers); any Linux host, no privileges.
//! - [`raw`]: whole Ethernet frames through an `AF_PACKET` socket on a named interface:
//!   the device has its own MAC-level presence and IP address (it answers ARP), every
//!   header is its own, and the ICRC is checked in full. Its system calls are apart in
//!   `raw::sys`, every `unsafe` of the transport there.
//! - [`faulty`]: fault injection, wrapping either (every transport gets it). Capture stays
//!   inside each transport: only the transport knows the headers it produced (a UDP GSO
//!   segment's IPv4 ID, a raw frame's every byte).

// Raw Ethernet: its AF_PACKET calls (every unsafe of it) are in its `sys` child.
pub(crate) mod raw;
pub(crate) mod udp;
// The UDP transport's multicast group sockets.
pub(crate) mod groups;
// Processes sharing a UDP device.
pub mod share;
// Fault injection wraps either transport.
pub(crate) mod faulty;

use crate::counters::Counters;
use crate::engine::{Engine, TxPacket};
use crate::Time;
use std::io;
use std::os::fd::OwnedFd;

/// Units (datagrams, frames) taken per receive.
pub(crate) const RX_BATCH: usize = 32;

/// What the driver needs of a transport. Owned by the progress thread (inside the
/// device's core lock); one call per batch, so a trait object costs nothing per packet.
pub(crate) trait Transport: Send {
    /// Sends the engine's packets (their ICRC not yet filled: the transport knows the
    /// headers it covers).
    fn send(&mut self, now: Time, batch: &mut [TxPacket], counters: &Counters);
    /// Sends what is due at `now` of what was delayed (fault rules, neighbour resolution).
    fn release(&mut self, now: Time, counters: &Counters);
    /// When something delayed is next due.
    fn next_due(&self) -> Option<Time>;
    /// Takes up to `max` received units (datagrams or frames) without blocking; returns
    /// how many, to be handed on with [`Transport::deliver`].
    fn recv(&mut self, max: usize) -> usize;
    /// Checks received unit `i` and hands its RoCE packets to the engine; returns the
    /// number of packets it held.
    fn deliver(&mut self, i: usize, engine: &mut Engine, now: u64) -> usize;
    /// Descriptors readable when something arrives, for the progress thread to sleep on
    /// (outside the core lock).
    fn wake_fds(&self) -> io::Result<Vec<OwnedFd>>;
    /// Writes out what a capture buffered (at shutdown).
    fn flush(&self);
    /// Sends one packet whose ICRC is already filled for IPv4 ID 0 with DF (what a fault
    /// chain let through), its IP header ECN-CE-marked when `w.ce`; may be batched until
    /// the next [`Transport::send`] or [`Transport::release`].
    fn put(&mut self, now: Time, w: crate::faults::Wire, counters: &Counters);
    /// The address packets to `dst` leave from.
    fn local_ip(&self, dst: std::net::IpAddr) -> std::net::IpAddr;
    /// The UDP source port packet `p` leaves with.
    fn src_port(&self, p: &TxPacket) -> u16;
    /// Joins IP multicast group `group` on the wire (the first QP of this device attached
    /// to it), so that its datagrams arrive for [`Engine::handle_multicast`].
    fn join(&mut self, group: std::net::IpAddr) -> io::Result<()>;
    /// Leaves `group` (its last QP detached).
    fn leave(&mut self, group: std::net::IpAddr);
    /// Housekeeping when [`Transport::next_due`] came: a shared device tells the CM
    /// which processes of the device have gone ([`crate::cm::CmAgent::member_gone`]).
    fn maintain(&mut self, _now: Time, _engine: &mut Engine) {}
}
