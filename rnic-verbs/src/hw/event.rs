//! The hardware backend's asynchronous events (`ibv_async_event`), as plain values: a
//! leaf that both the context (which reads them) and `convert` (which maps them to
//! rnic-verbs' [`AsyncEvent`](crate::AsyncEvent)) use.

use std::fmt;

/// The object an async event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HwEventElement {
    /// A QP, by number.
    Qp(u32),
    /// A CQ, by its kernel handle ([`super::HwCq::id`]).
    Cq(u32),
    /// An SRQ, by its kernel handle ([`super::HwSrq::id`]).
    Srq(u32),
    /// A port.
    Port(u8),
    /// The device (or a work queue).
    Device,
}

/// An asynchronous event (`ibv_async_event`), already acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HwAsyncEvent {
    /// `IBV_EVENT_*`.
    pub event_type: u32,
    /// `ibv_event_type_str`'s name.
    pub name: String,
    /// What it is about.
    pub element: HwEventElement,
}

impl fmt::Display for HwAsyncEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:?})", self.name, self.element)
    }
}
