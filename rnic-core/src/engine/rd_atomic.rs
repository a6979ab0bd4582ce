//! The responder's atomics, ATOMIC WRITE and FLUSH (after rxe's `atomic_reply`,
//! `atomic_write_reply` and `process_flush`): each is one request packet, executed once,
//! kept as a responder resource so that a duplicate gets the same answer without being
//! executed again, and answered by an ATOMIC ACKNOWLEDGE (atomics) or a zero-length RDMA
//! READ RESPONSE ONLY (ATOMIC WRITE, FLUSH).

use super::qp::{Qp, ReadResource, ResourceKind};
use super::refusal::Refusal;
use crate::mem::MemError;
use crate::mr::{AccessError, AccessFlags, MrSlice, Mtpt};
use crate::wr::{FLUSH_GLOBAL, FLUSH_PERSISTENT};
use rnic_wire::opcode::Operation;
use rnic_wire::roce::RoceRepr;

/// The QP access flags a FLUSH of placement type `placement` needs (rxe
/// `check_qp_attr_access`; the region needs the same ones).
pub(super) fn flush_access(placement: u8) -> AccessFlags {
    let mut need = AccessFlags::empty();
    if placement & FLUSH_GLOBAL != 0 {
        need |= AccessFlags::FLUSH_GLOBAL;
    }
    if placement & FLUSH_PERSISTENT != 0 {
        need |= AccessFlags::FLUSH_PERSISTENT;
    }
    need
}

fn remote(qp: &Qp, mtpt: &Mtpt, rkey: u32, va: u64, len: usize, need: AccessFlags) -> Result<MrSlice, Refusal> {
    mtpt.check_remote_by(rkey, qp.resp_pd(), qp.qpn().value(), va, len, need)
        .map_err(|a: AccessError| Refusal::RemoteAccess(Some(a)))
}

/// A misaligned target is an invalid request (IBA 9.4.5; rxe `atomic_reply`: atomics need an 8-byte
/// aligned VA; rxe `RESPST_ERR_MISALIGNED_ATOMIC`, a class C NAK invalid request).
fn mem_refusal(e: MemError) -> Refusal {
    match e {
        MemError::Misaligned { .. } => Refusal::InvalidRequest,
        _ => Refusal::RemoteOperational,
    }
}

/// COMPARE & SWAP / FETCH & ADD. Checked as rxe does: R_Key, PD, REMOTE_ATOMIC and the 8
/// bytes in bounds (NAK remote access error), then the alignment (NAK invalid request).
/// The operation is a CPU atomic on the target, so atomics of every QP of the device are
/// atomic with respect to each other (and to the host's own atomics).
pub(super) fn execute_atomic(qp: &Qp, mtpt: &Mtpt, repr: &RoceRepr, op: Operation) -> Result<ReadResource, Refusal> {
    let a = repr.ext.atomic_eth.ok_or(Refusal::InvalidRequest)?;
    let slice = remote(qp, mtpt, a.rkey, a.va, 8, AccessFlags::REMOTE_ATOMIC)?;
    if a.va % 8 != 0 {
        return Err(Refusal::InvalidRequest);
    }
    let orig = match op {
        Operation::CompareSwap => slice.atomic_compare_swap(0, a.compare, a.swap_add),
        _ => slice.atomic_fetch_add(0, a.swap_add),
    }
    .map_err(mem_refusal)?;
    Ok(ReadResource {
        psn: repr.bth.psn,
        npkts: 1,
        va: a.va,
        rkey: a.rkey,
        len: 8,
        pd: qp.resp_pd(),
        next: 0,
        kind: ResourceKind::Atomic { orig },
        msn: 0,
        before: [None, None],
        replay: false,
    })
}

/// ATOMIC WRITE: REMOTE_WRITE on the region (rxe checks the QP and the region for remote
/// write), DMA length and payload exactly 8 bytes (IBA oA19-28, else NAK invalid request),
/// an 8-byte aligned VA; the 8 bytes are stored with one atomic store.
pub(super) fn execute_atomic_write(
    qp: &Qp,
    mtpt: &Mtpt,
    repr: &RoceRepr,
    payload: &[u8],
) -> Result<ReadResource, Refusal> {
    let reth = repr.ext.reth.ok_or(Refusal::InvalidRequest)?;
    let len = reth.dma_len as usize;
    let slice = remote(qp, mtpt, reth.rkey, reth.va, len, AccessFlags::REMOTE_WRITE)?;
    let value: [u8; 8] = match (len, <[u8; 8]>::try_from(payload)) {
        (8, Ok(v)) => v,
        _ => return Err(Refusal::InvalidRequest),
    };
    if reth.va % 8 != 0 {
        return Err(Refusal::InvalidRequest);
    }
    slice.atomic_write(0, u64::from_ne_bytes(value)).map_err(mem_refusal)?;
    Ok(ReadResource {
        psn: repr.bth.psn,
        npkts: 1,
        va: reth.va,
        rkey: reth.rkey,
        len: 8,
        pd: qp.resp_pd(),
        kind: ResourceKind::Acked,
        msn: 0,
        before: [None, None],
        replay: false,
        next: 0,
    })
}

/// FLUSH: the region must grant the FLUSH rights of the placement type; selectivity 1
/// flushes the whole region (no range check, as rxe), 0 the RETH's range. Our memory is
/// ordinary RAM, so global visibility is a full memory fence (rxe: `wmb()`); persistence
/// cannot be granted at registration, so a persistent FLUSH fails its R_Key check.
pub(super) fn execute_flush(qp: &Qp, mtpt: &Mtpt, repr: &RoceRepr) -> Result<ReadResource, Refusal> {
    let (Some(feth), Some(reth)) = (repr.ext.feth, repr.ext.reth) else { return Err(Refusal::InvalidRequest) };
    let need = flush_access(feth.placement_type);
    if feth.selectivity == 1 {
        mtpt.check_remote_whole(reth.rkey, qp.resp_pd(), need).map_err(|a| Refusal::RemoteAccess(Some(a)))?;
    } else {
        remote(qp, mtpt, reth.rkey, reth.va, reth.dma_len as usize, need)?;
    }
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    Ok(ReadResource {
        psn: repr.bth.psn,
        npkts: 1,
        va: reth.va,
        rkey: reth.rkey,
        len: reth.dma_len as usize,
        pd: qp.resp_pd(),
        kind: ResourceKind::Acked,
        msn: 0,
        before: [None, None],
        replay: false,
        next: 0,
    })
}
