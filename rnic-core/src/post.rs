//! Posting: the validated work requests (`SendWqe`, `RecvWqe`) and the checks a post
//! makes on the posting thread (SGEs against the memory table, transport, UD length, queue
//! depth), with the one error type, `PostError`.
//!
//! A leaf module: both the engine (`engine::qp::validate_send` / `validate_recv`, which
//! read the QP's shared state) and the shared receive queue (`srq::Srq::post_recv`) use
//! it, so neither imports the other for posting. The types are re-exported from
//! `engine::qp`, their old path.

use crate::mr::{AccessError, AccessFlags, MrSlice, Mtpt, PdId};
use crate::qp_state::{QpState, QpType};
use crate::wr::{SendOp, UdDest};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Why a work request could not be posted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PostError {
    /// The queue already holds its maximum number of work requests.
    #[error("the {queue} queue is full ({depth} work requests outstanding)")]
    QueueFull {
        /// "send" or "receive".
        queue: &'static str,
        /// The queue depth.
        depth: u32,
    },
    /// More SGEs than the QP was created for.
    #[error("{given} SGEs given, the QP allows {max}")]
    TooManySges {
        /// SGEs in the request.
        given: usize,
        /// The QP's limit.
        max: u32,
    },
    /// Inline data longer than `max_inline_data`.
    #[error("{len} bytes of inline data, the QP allows {max}")]
    InlineTooLong {
        /// Bytes requested inline.
        len: usize,
        /// The QP's limit.
        max: u32,
    },
    /// Inline was asked for an operation that cannot carry it (RDMA READ).
    #[error("{op} cannot be posted inline")]
    InlineNotAllowed {
        /// The operation.
        op: &'static str,
    },
    /// An SGE failed its lkey, PD, access or bounds check.
    #[error("SGE {index}: {source}")]
    Sge {
        /// Position of the SGE in the list.
        index: usize,
        /// What failed.
        source: AccessError,
    },
    /// The message is longer than RDMA allows (2^31 bytes, IBA 9.4.1 DMA length).
    #[error("message of {len} bytes exceeds the 2 GiB limit")]
    MessageTooLong {
        /// Total length.
        len: u64,
    },
    /// The QP state does not accept this queue's work requests.
    #[error("cannot post to the {queue} queue of a QP in state {state:?}")]
    BadState {
        /// "send" or "receive".
        queue: &'static str,
        /// The state.
        state: QpState,
    },
    /// The work request's shape does not fit its operation (for example an atomic whose
    /// result SGE is not 8 bytes).
    #[error("{op}: {why}")]
    BadWr {
        /// The operation.
        op: &'static str,
        /// What is wrong.
        why: &'static str,
    },
    /// Receives go to the QP's shared receive queue, not to the QP (`ibv_post_recv` on a
    /// QP created with an SRQ fails).
    #[error("the QP takes its receive WQEs from SRQ {srq}: post receives to the SRQ")]
    HasSrq {
        /// The SRQ's id.
        srq: u32,
    },
    /// The QP's transport does not support the operation.
    #[error("{op} is not supported on a {qp_type} QP")]
    NotSupported {
        /// The operation.
        op: &'static str,
        /// The QP type.
        qp_type: QpType,
    },
    /// A send on a UD QP without a destination (address handle, remote QPN and Q_Key).
    #[error("a send on a UD QP needs a destination (address handle, remote QPN, remote Q_Key)")]
    NoDestination,
    /// A UD destination on a connected (RC or UC) QP, whose destination was fixed at connect.
    #[error("a {qp_type} QP is connected: its work requests take no UD destination")]
    DestinationNotAllowed {
        /// The QP type.
        qp_type: QpType,
    },
    /// An XRC initiator's work request names no remote XRC SRQ, or one no XRCETH can
    /// carry (24 bits).
    #[error("an XRC_SEND work request needs the remote XRC SRQ number (24 bits), got {srqn:?}")]
    NoXrcSrq {
        /// What the work request named.
        srqn: Option<u32>,
    },
    /// A UD message must fit one packet (IBA 9.8.1: UD messages are single-packet).
    #[error("UD message of {len} bytes exceeds the port MTU of {mtu} bytes (UD messages are one packet)")]
    UdMessageTooLong {
        /// Message length.
        len: usize,
        /// The port MTU.
        mtu: usize,
    },
}

/// The port MTU: the packet payload limit of a UD QP, which has no path MTU attribute (rxe
/// uses the port's `mtu_cap`). rnic's port reports 4096 (`query_port`'s `active_mtu`).
pub const PORT_MTU: usize = 4096;

/// Checks that the QP's transport carries `op` (IBA 9.8 / 9.9 and rxe `rxe_opcode` masks):
/// RC everything, UC SEND and RDMA WRITE (no READ, no atomics), UD SEND only, an XRC
/// initiator RC's operations that have XRC opcodes (IBA Annex A14: no ATOMIC WRITE nor
/// FLUSH), an XRC target nothing (it has no send queue, IBA Annex A14). Also checks the
/// presence of a UD destination and of an XRC initiator's remote SRQ number.
pub(crate) fn check_transport(
    qp_type: QpType,
    op: &SendOp,
    ud: Option<&UdDest>,
    xrc_srqn: Option<u32>,
) -> Result<(), PostError> {
    let carried = match qp_type {
        QpType::Rc => true,
        QpType::XrcSend => !matches!(op, SendOp::AtomicWrite { .. } | SendOp::Flush { .. }),
        QpType::XrcRecv => false,
        QpType::Uc => matches!(
            op,
            SendOp::Send | SendOp::SendWithImm { .. } | SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. }
        ),
        QpType::Ud => matches!(op, SendOp::Send | SendOp::SendWithImm { .. }),
    };
    if !carried {
        return Err(PostError::NotSupported { op: op.name(), qp_type });
    }
    let remote = !matches!(op, SendOp::LocalInv { .. } | SendOp::BindMw { .. });
    match (qp_type, ud) {
        (QpType::Ud, None) => Err(PostError::NoDestination),
        (QpType::Rc | QpType::Uc | QpType::XrcSend | QpType::XrcRecv, Some(_)) => {
            Err(PostError::DestinationNotAllowed { qp_type })
        }
        // IBA Annex A14: every XRC request names its XRC SRQ in 24 bits.
        (QpType::XrcSend, None) if remote && xrc_srqn.is_none_or(|n| n > rnic_wire::small::XRC_SRQN_MAX) => {
            Err(PostError::NoXrcSrq { srqn: xrc_srqn })
        }
        _ => Ok(()),
    }
}

pub(crate) fn check_ud_len(qp_type: QpType, len: usize) -> Result<(), PostError> {
    // The issue asks for a local failure: the caller learns at once. (IBA C10-93.1.1 and rxe
    // instead complete such a WR successfully without sending anything.)
    if qp_type == QpType::Ud && len > PORT_MTU {
        return Err(PostError::UdMessageTooLong { len, mtu: PORT_MTU });
    }
    Ok(())
}

/// The bytes of a work request: copied at post time (inline), or checked SGEs.
///
/// 32 bytes, so that a send queue entry (the WQE and its PSN range and progress) stays
/// within 128: a larger value is moved by a `memcpy` call rather than inline, twice per
/// send work request (into the send queue, out of it when it retires), 4% of
/// `send_bw -s 64`'s sending thread when the entry was 144 bytes.
#[derive(Debug, Clone)]
pub(crate) enum WqeData {
    /// Bytes copied at post time (inline data, an ATOMIC WRITE's value), or none.
    Inline(Box<[u8]>),
    /// One checked SGE, the common case: kept in place, no allocation.
    One(MrSlice),
    /// Any other number of checked SGEs (none: a zero-length message).
    Many(Vec<MrSlice>),
}

impl WqeData {
    /// An empty SGE list, for [`check_sges`](Self::check_sges) to fill where the WQE is
    /// kept.
    #[inline]
    pub(crate) fn no_sges() -> WqeData {
        WqeData::Many(Vec::new())
    }

    /// The checked SGEs (none for inline data).
    #[inline]
    fn slices(&self) -> &[MrSlice] {
        match self {
            WqeData::Inline(_) => &[],
            WqeData::One(s) => std::slice::from_ref(s),
            WqeData::Many(v) => v,
        }
    }

    /// Whether every buffer can still be reached (none of their regions was deregistered
    /// or given other memory since the WQE was posted: [`MrSlice::is_live`]).
    pub(crate) fn is_live(&self) -> bool {
        self.slices().iter().all(MrSlice::is_live)
    }

    /// Checks `sges` against the memory table into this data (which it replaces);
    /// returns the total length.
    #[inline]
    pub(crate) fn check_sges(
        &mut self,
        mtpt: &Mtpt,
        pd: PdId,
        sges: &[crate::wr::Sge],
        need: AccessFlags,
        late: bool,
    ) -> Result<usize, PostError> {
        let check = |index: usize, s: &crate::wr::Sge| {
            let len = usize::try_from(s.length).unwrap_or(usize::MAX);
            match mtpt.check_local(s.lkey, pd, s.addr, len, need) {
                Ok(slice) => Ok(slice),
                // Checked when the work executes: memory it cannot reach, which fails it
                // then (`is_live`), as rxe's lookup of the lkey does.
                Err(_) if late => Ok(MrSlice::unreachable(len)),
                Err(source) => Err(PostError::Sge { index, source }),
            }
        };
        if let [one] = sges {
            let len = usize::try_from(one.length).unwrap_or(usize::MAX);
            if u64::from(one.length) <= MAX_MSG_LEN
                && mtpt.with_local_slice(one.lkey, pd, one.addr, len, need, |slice| *self = WqeData::One(slice))
            {
                return Ok(len);
            }
            let slice = check(0, one)?;
            if u64::from(one.length) > MAX_MSG_LEN {
                return Err(PostError::MessageTooLong { len: u64::from(one.length) });
            }
            // Replaced only on success, as the list below is.
            *self = WqeData::One(slice);
            return Ok(one.length as usize);
        }
        let mut total: u64 = 0;
        let mut v = Vec::with_capacity(sges.len());
        for (index, s) in sges.iter().enumerate() {
            v.push(check(index, s)?);
            total += u64::from(s.length);
        }
        if total > MAX_MSG_LEN {
            return Err(PostError::MessageTooLong { len: total });
        }
        *self = WqeData::Many(v);
        Ok(usize::try_from(total).unwrap_or(usize::MAX))
    }

    /// Copies `dst.len()` bytes starting at message offset `off` out of the buffers.
    pub(crate) fn gather(&self, mut off: usize, dst: &mut [u8]) {
        if let WqeData::Inline(v) = self {
            dst.copy_from_slice(&v[off..off + dst.len()]);
            return;
        }
        let mut done = 0;
        for s in self.slices() {
            if done == dst.len() {
                break;
            }
            if off >= s.len() {
                off -= s.len();
                continue;
            }
            let n = (s.len() - off).min(dst.len() - done);
            // Bounds were checked when the WR was posted; the slice re-checks. On
            // failure send zeros, never a recycled buffer's old bytes.
            if s.read(off, &mut dst[done..done + n]).is_err() {
                dst[done..done + n].fill(0);
            }
            done += n;
            off = 0;
        }
    }

    /// Where message bytes `off .. off + len` lie when one SGE holds them all: its
    /// memory block and the offset in it (for a zero-copy send). `None` for inline data
    /// or bytes that span SGEs.
    pub(crate) fn contiguous(&self, mut off: usize, len: usize) -> Option<(&Arc<crate::mem::MemBlock>, usize)> {
        for s in self.slices() {
            if off < s.len() {
                // An implicit region is read through checked copies only (no view).
                return (off + len <= s.len() && !s.block().is_implicit()).then(|| (s.block(), s.block_offset() + off));
            }
            off -= s.len();
        }
        None
    }

    /// Copies `src` into the buffers at message offset `off` (RDMA READ responses,
    /// receive buffers). Returns false if it does not fit (inline data has no buffers).
    pub(crate) fn scatter(&self, mut off: usize, src: &[u8]) -> bool {
        if let WqeData::Inline(_) = self {
            return false;
        }
        let mut done = 0;
        for s in self.slices() {
            if done == src.len() {
                break;
            }
            if off >= s.len() {
                off -= s.len();
                continue;
            }
            let n = (s.len() - off).min(src.len() - done);
            if s.write(off, &src[done..done + n]).is_err() {
                return false;
            }
            done += n;
            off = 0;
        }
        done == src.len()
    }
}

/// A validated send work request.
#[derive(Debug, Clone)]
pub struct SendWqe {
    pub(crate) wr_id: u64,
    pub(crate) op: SendOp,
    pub(crate) signaled: bool,
    pub(crate) solicited: bool,
    pub(crate) fence: bool,
    pub(crate) data: WqeData,
    pub(crate) len: usize,
    /// Where the message goes beyond the QP's connection: a UD destination, or an XRC
    /// initiator's remote XRC SRQ.
    pub(crate) dest: WqeDest,
    /// A local operation (LOCAL_INV, no packets) that failed with this status when the
    /// engine executed it; it completes with it when it reaches the front of the queue.
    pub(crate) local_err: Option<crate::wr::WcStatus>,
}

/// Where a send WQE goes beyond its QP's connection. One field for the two, which no QP
/// has both of, keeps [`SendWqe`] (and the send queue's entries) small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WqeDest {
    /// RC, UC: the connection says it all.
    Connected,
    /// UD: the address, QP and Q_Key.
    Ud(UdDest),
    /// XRC initiator: the remote XRC SRQ (every packet's XRCETH).
    Xrc(u32),
}

impl WqeDest {
    /// From a work request's UD destination and XRC SRQ number (at most one of which
    /// `check_transport` let through for the QP).
    pub(crate) fn of(ud: Option<UdDest>, xrc_srqn: Option<u32>) -> WqeDest {
        match (ud, xrc_srqn) {
            (Some(d), _) => WqeDest::Ud(d),
            (None, Some(n)) => WqeDest::Xrc(n),
            (None, None) => WqeDest::Connected,
        }
    }

    /// The UD destination.
    pub(crate) fn ud(&self) -> Option<UdDest> {
        match self {
            WqeDest::Ud(d) => Some(*d),
            _ => None,
        }
    }

    /// The XRC SRQ number.
    pub(crate) fn xrc_srqn(&self) -> Option<u32> {
        match self {
            WqeDest::Xrc(n) => Some(*n),
            _ => None,
        }
    }
}

/// A validated receive work request.
#[derive(Debug, Clone)]
pub struct RecvWqe {
    pub(crate) wr_id: u64,
    pub(crate) data: WqeData,
    pub(crate) len: usize,
}

impl RecvWqe {
    /// The receive WQE for `wr_id` before its SGEs are checked into it
    /// ([`WqeData::check_sges`]).
    #[inline]
    pub(crate) fn unchecked(wr_id: u64) -> RecvWqe {
        RecvWqe { wr_id, data: WqeData::no_sges(), len: 0 }
    }
}

/// Largest RDMA message (IBA: DMA length is 32 bits, verbs cap messages at 2^31).
pub const MAX_MSG_LEN: u64 = 1 << 31;

pub(crate) fn reserve(counter: &AtomicU32, depth: u32, queue: &'static str) -> Result<(), PostError> {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| if n >= depth { None } else { Some(n + 1) })
        .map(|_| ())
        .map_err(|_| PostError::QueueFull { queue, depth })
}
