//! Every way a verbs call fails, on either backend.

use crate::{DeviceError, EngineError, PostError, SrqError};
use std::time::Duration;

/// Every way a verbs call can fail. Each variant names the operation; a failed work
/// completion is not an error but data in [`WorkCompletion::status`](crate::WorkCompletion::status).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No device of that name is configured.
    #[error("no device named {name:?} (configured: {known}); set RNIC_DEVICES=name=ip,... to add one")]
    NoSuchDevice {
        /// The name asked for.
        name: String,
        /// The names known.
        known: String,
    },
    /// An environment variable's value does not parse.
    #[error("{var}: {why}")]
    BadConfig {
        /// The variable.
        var: &'static str,
        /// What is wrong, naming the bad entry.
        why: String,
    },
    /// Opening the device failed.
    #[error("open device")]
    OpenDevice(#[source] DeviceError),

    /// The host refused what a call needs of it (a descriptor).
    #[error("{op}")]
    Host {
        /// The call.
        op: &'static str,
        /// The host's reason.
        #[source]
        source: std::io::Error,
    },
    /// Registering memory failed.
    #[error("register memory region")]
    RegMr(#[source] DeviceError),
    /// Creating a QP failed.
    #[error("create QP")]
    CreateQp(#[source] EngineError),
    /// Modifying a QP failed.
    #[error("modify QP {qpn:#x}")]
    ModifyQp {
        /// The QP.
        qpn: u32,
        /// Why.
        #[source]
        source: EngineError,
    },
    /// Querying a QP failed.
    #[error("query QP {qpn:#x}")]
    QueryQp {
        /// The QP.
        qpn: u32,
        /// Why.
        #[source]
        source: EngineError,
    },
    /// Posting a send work request failed.
    #[error("post send on QP {qpn:#x}")]
    PostSend {
        /// The QP.
        qpn: u32,
        /// Why.
        #[source]
        source: PostError,
    },
    /// Posting a receive work request failed.
    #[error("post receive on QP {qpn:#x}")]
    PostRecv {
        /// The QP.
        qpn: u32,
        /// Why.
        #[source]
        source: PostError,
    },
    /// A work request of a list was refused; those before it were posted.
    #[error("post {queue} list on QP {qpn:#x}: work request {index} refused ({index} before it posted)")]
    PostList {
        /// The QP.
        qpn: u32,
        /// "send" or "receive".
        queue: &'static str,
        /// Its place in the list (0-based) = how many were posted.
        index: usize,
        /// Why.
        #[source]
        source: PostError,
    },
    /// A memory region access by the application was out of range.
    #[error("memory region access")]
    MrAccess(#[source] rnic_core::mem::MemError),
    /// A connection-management call failed (a rejection, nobody listening, no answer, a
    /// call that does not fit the connection's state).
    #[error("CM {op}: {why}")]
    Cm {
        /// The call.
        op: &'static str,
        /// Why.
        why: String,
    },
    /// A connect step failed.
    #[error("connect QP {qpn:#x} ({step})")]
    Connect {
        /// The QP.
        qpn: u32,
        /// "INIT->RTR" or "RTR->RTS".
        step: &'static str,
        /// Why.
        #[source]
        source: EngineError,
    },
    /// An argument was invalid.
    #[error("{op}: {why}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What was wrong.
        why: String,
    },
    /// Attaching a UD QP to a multicast group, or detaching it, was refused (a QP that is
    /// not UD, a GID that is not multicast or not of the device's IP version, a QP not
    /// attached, past the device's limits, a group the host would not join).
    #[error("{op} QP {qpn:#x} {gid}")]
    Mcast {
        /// "attach to multicast group" or "detach from multicast group".
        op: &'static str,
        /// The QP.
        qpn: u32,
        /// The group's GID.
        gid: crate::Gid,
        /// Why.
        #[source]
        source: DeviceError,
    },
    /// The device's threads have stopped.
    #[error("device stopped")]
    DeviceStopped(#[source] DeviceError),
    /// Waiting for completions timed out.
    #[error("timed out after {0:?} waiting for completions")]
    Timeout(Duration),
    /// No event arrived in time (`get_cq_event`, `get_async_event`).
    #[error("timed out after {0:?} waiting for an event")]
    EventTimeout(Duration),
    /// Posting to a shared receive queue failed.
    #[error("post receive on SRQ {srq}")]
    PostSrqRecv {
        /// The SRQ.
        srq: u32,
        /// Why.
        #[source]
        source: PostError,
    },
    /// Modifying a shared receive queue failed.
    #[error("modify SRQ {srq}")]
    ModifySrq {
        /// The SRQ.
        srq: u32,
        /// Why.
        #[source]
        source: SrqError,
    },
    /// More CQ events acknowledged than were delivered (`ibv_ack_cq_events`).
    #[error("CQ {cq}: acknowledging {n} events but only {outstanding} are unacknowledged")]
    AckCqEvents {
        /// The CQ.
        cq: u32,
        /// Events acknowledged.
        n: u32,
        /// Events delivered and not yet acknowledged.
        outstanding: u32,
    },
    /// A CQ was destroyed with events delivered but not acknowledged (`ibv_destroy_cq`
    /// would wait forever).
    #[error("destroy CQ {cq}: {outstanding} events delivered by get_cq_event are not acknowledged")]
    UnackedCqEvents {
        /// The CQ.
        cq: u32,
        /// Events not acknowledged.
        outstanding: u32,
    },
    /// The device's backend cannot do this (the hardware backend has no rnic-only
    /// feature such as the CM or fault injection; a device may lack a verb).
    #[error("{op}: not supported on {device} ({why})")]
    Unsupported {
        /// The call.
        op: &'static str,
        /// The device.
        device: String,
        /// What is missing.
        why: String,
    },
    /// A call to a hardware device through libibverbs failed (cargo feature `hw`).
    #[cfg(feature = "hw")]
    #[error("{op}")]
    Hw {
        /// The call.
        op: &'static str,
        /// The libibverbs error.
        #[source]
        source: crate::hw::HwError,
    },
}

impl Error {
    /// The error and every cause under it on one line (`post send on QP 0x11: ...: ...`).
    /// `Display` shows this error alone and [`source`](std::error::Error::source) returns
    /// its cause, so a program printing errors should print this (or walk the chain).
    pub fn report(&self) -> String {
        report(self)
    }

    /// A driver call's error: the engine's refusal wrapped by `verb`, anything else (the
    /// device stopped) as [`Error::DeviceStopped`].
    pub(crate) fn from_device(e: DeviceError, verb: impl FnOnce(EngineError) -> Error) -> Error {
        match e {
            DeviceError::Engine(x) => verb(x),
            other => Error::DeviceStopped(other),
        }
    }
}

/// Any error with every cause under it on one line, joined by `: ` (each cause's text
/// once: an error whose `Display` already ends with its cause's text is not repeated).
pub fn report(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.ends_with(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// Result with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
