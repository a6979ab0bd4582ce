//! The engine's output: packets for the transport ([`TxPacket`], with a payload left in
//! registered memory for a zero-copy send) and the outbox that builds them into pooled
//! buffers.

use crate::counters::Counters;
use rnic_wire::roce::RoceRepr;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A packet for the transport: BTH..ICRC with the ICRC bytes zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxPacket {
    /// Destination IP.
    pub dst: IpAddr,
    /// UDP source port (the flow's).
    pub src_port: u16,
    /// The packet, ICRC to be filled by the transport; with a [`payload`](Self::payload)
    /// only its headers, then pad and ICRC. In a train (`train` > 1), that many packets
    /// of equal length back to back.
    pub data: Vec<u8>,
    /// How many packets `data` holds: 1, or a train of small packets of one length to one
    /// destination, built into one buffer for one UDP GSO send
    /// ([`EngineConfig::trains`](super::EngineConfig::trains)); never with a payload.
    pub train: u16,
    /// A payload still in registered memory: with
    /// [`EngineConfig::zero_copy`](super::EngineConfig::zero_copy) for the transport to
    /// hand to the kernel without copying it, else to be copied into `data` when the ICRC
    /// is filled, in the same pass ([`fill_icrc`](Self::fill_icrc)). `None`: `data` is the
    /// whole packet.
    pub payload: Option<TxPayload>,
}

/// Payload bytes a packet carries straight from registered memory: on the wire the
/// packet is `data[..at]`, these bytes, then `data[at..]` (pad and ICRC).
#[derive(Clone)]
pub struct TxPayload {
    block: Arc<crate::mem::MemBlock>,
    offset: usize,
    len: usize,
    at: usize,
    /// Lent to the kernel (zero copy); else copied into the packet with its ICRC.
    lend: bool,
}

impl std::fmt::Debug for TxPayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxPayload")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("at", &self.at)
            .field("lend", &self.lend)
            .finish()
    }
}

impl PartialEq for TxPayload {
    fn eq(&self, o: &Self) -> bool {
        Arc::ptr_eq(&self.block, &o.block)
            && (self.offset, self.len, self.at, self.lend) == (o.offset, o.len, o.at, o.lend)
    }
}
impl Eq for TxPayload {}

impl TxPacket {
    /// One packet, its bytes all in `data`.
    pub fn new(dst: IpAddr, src_port: u16, data: Vec<u8>) -> TxPacket {
        TxPacket { dst, src_port, data, train: 1, payload: None }
    }

    /// The length of each packet of a train (of the packet, for one alone).
    pub fn seg_len(&self) -> usize {
        self.len() / usize::from(self.train.max(1))
    }

    /// The packets of a train one by one (the packet itself, for one alone).
    pub fn split_train(self) -> Vec<TxPacket> {
        if self.train <= 1 {
            return vec![self];
        }
        let seg = self.seg_len();
        self.data.chunks(seg).map(|c| TxPacket::new(self.dst, self.src_port, c.to_vec())).collect()
    }

    /// Length on the wire (BTH..ICRC; a train's packets together).
    pub fn len(&self) -> usize {
        self.data.len() + self.payload.as_ref().map_or(0, |p| p.len)
    }

    /// Whether the packet is empty (never, for a packet the engine built).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The packet in wire order as up to three pieces: headers, payload, pad and ICRC.
    /// (A packet without a separate payload is one piece.) The payload is a view of
    /// registered memory, read by copying or by the kernel, never lent as a slice.
    pub(crate) fn parts(&self) -> [Part<'_>; 3] {
        match &self.payload {
            None => [Part::Bytes(&self.data[..]), Part::Bytes(&[]), Part::Bytes(&[])],
            Some(p) => {
                // Bounds were checked when the packet was built (`emit_from_memory`) and a
                // block never shrinks: the empty fallback is never taken, only no panic.
                let at = p.at.min(self.data.len());
                let payload = p.block.view(p.offset, p.len).map_or(Part::Bytes(&[]), Part::Shared);
                [Part::Bytes(&self.data[..at]), payload, Part::Bytes(&self.data[at..])]
            }
        }
    }

    /// The whole packet in one buffer (a copy when the payload is separate).
    pub fn to_vec(&self) -> Vec<u8> {
        if self.payload.is_none() {
            return self.data.clone();
        }
        let mut v = Vec::with_capacity(self.len());
        for part in self.parts() {
            part.extend_vec(&mut v);
        }
        v
    }

    /// Copies a separate payload into `data`, so that `data` is the whole packet.
    pub fn make_contiguous(&mut self) {
        if self.payload.is_some() {
            self.data = self.to_vec();
            self.payload = None;
        }
    }

    /// Writes the ICRC (computed for `ctx`, through `cache`) into the packet's last four
    /// bytes. A payload that is not lent to the kernel is copied into `data` here, each
    /// byte read once for the copy and the CRC (`crc_copy`): afterwards `data` is the
    /// whole packet.
    pub fn fill_icrc(
        &mut self,
        cache: &mut rnic_wire::icrc::IcrcCache,
        ctx: &rnic_wire::icrc::IcrcContext,
    ) -> Result<(), rnic_wire::Error> {
        let Some(p) = &self.payload else {
            return cache.fill(ctx, &mut self.data);
        };
        // Headers, the payload in registered memory, then the pad (the ICRC excluded).
        let (at, body) = self.payload_at(p)?;
        let mut s = cache.begin(ctx, self.len(), &self.data[..at])?;
        if !p.lend {
            return self.splice_payload(s, at);
        }
        // The payload is copied out of shared memory a chunk at a time, never lent as a
        // slice (criterion `icrc` group: the copy adds about what the CRC costs). Bounds
        // were checked when the packet was built and a block never shrinks.
        if let Ok(v) = p.block.view(p.offset, p.len) {
            v.chunks(|c| s.update(c));
        }
        s.update(&self.data[at..body]);
        let icrc = s.finish();
        self.data[body..].copy_from_slice(&icrc.to_le_bytes());
        Ok(())
    }

    /// Where a separate payload `p` goes in `data` and where the ICRC starts there.
    fn payload_at(&self, p: &TxPayload) -> Result<(usize, usize), rnic_wire::Error> {
        let n = self.data.len();
        let body = n.checked_sub(rnic_wire::ICRC_LEN).ok_or(rnic_wire::Error::Truncated {
            what: "RoCEv2 packet",
            need: rnic_wire::ICRC_LEN,
            have: n,
        })?;
        Ok((p.at.min(body), body))
    }

    /// [`fill_icrc`](Self::fill_icrc) of a payload copied in: `s` has taken `data[..at]`;
    /// the payload goes in at `at`, before the pad and ICRC.
    fn splice_payload(&mut self, s: rnic_wire::icrc::IcrcStream, at: usize) -> Result<(), rnic_wire::Error> {
        let Some(p) = self.payload.take() else { return Ok(()) };
        // What follows the payload: pad and ICRC, at most 7 bytes.
        let tail: smallvec::SmallVec<[u8; 8]> = smallvec::SmallVec::from_slice(&self.data[at..]);
        self.data.truncate(at);
        p.finish_into(&mut self.data, s, &tail[..tail.len() - rnic_wire::ICRC_LEN])
    }

    /// Appends the whole packet to `buf` with its ICRC (for `ctx`, through `cache`)
    /// filled in, leaving the packet as it is: a payload in registered memory is read
    /// once, copied and folded into the CRC in the same pass. (`buf` may hold a part of
    /// the packet after an error.)
    pub(crate) fn append_with_icrc(
        &self,
        buf: &mut Vec<u8>,
        cache: &mut rnic_wire::icrc::IcrcCache,
        ctx: &rnic_wire::icrc::IcrcContext,
    ) -> Result<(), rnic_wire::Error> {
        let start = buf.len();
        let Some(p) = &self.payload else {
            buf.extend_from_slice(&self.data);
            return cache.fill(ctx, &mut buf[start..]);
        };
        let (at, body) = self.payload_at(p)?;
        buf.extend_from_slice(&self.data[..at]);
        let s = cache.begin(ctx, self.len(), &self.data[..at])?;
        p.finish_into(buf, s, &self.data[at..body])
    }
}

impl TxPayload {
    /// The rest of a packet after its headers (already in `buf`, taken by `s`): appends
    /// the payload, copied and folded into the CRC in one pass, then `pad` and the ICRC.
    /// Bounds were checked when the packet was built and a block never shrinks; were it
    /// otherwise, the packet keeps its length (zeros, failing its ICRC) and this says so.
    fn finish_into(
        &self,
        buf: &mut Vec<u8>,
        mut s: rnic_wire::icrc::IcrcStream,
        pad: &[u8],
    ) -> Result<(), rnic_wire::Error> {
        let copied = match self.block.view(self.offset, self.len) {
            Ok(v) => {
                v.append_with_crc(buf, &mut s);
                Ok(())
            }
            Err(_) => {
                buf.resize(buf.len() + self.len, 0);
                Err(rnic_wire::Error::Truncated {
                    what: "registered memory",
                    need: self.offset + self.len,
                    have: self.block.len(),
                })
            }
        };
        s.update(pad);
        buf.extend_from_slice(pad);
        buf.extend_from_slice(&s.finish().to_le_bytes());
        copied
    }
}

/// One piece of a [`TxPacket`] in wire order: the packet's own bytes, or its payload in
/// registered memory (a [`Shared`](crate::mem::Shared) view).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Part<'a> {
    /// Bytes the packet owns.
    Bytes(&'a [u8]),
    /// Payload left in registered memory.
    Shared(crate::mem::Shared<'a>),
}

impl Part<'_> {
    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        match self {
            Part::Bytes(b) => b.len(),
            Part::Shared(s) => s.len(),
        }
    }

    /// Whether the piece is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the piece to `v`.
    pub(crate) fn extend_vec(&self, v: &mut Vec<u8>) {
        match self {
            Part::Bytes(b) => v.extend_from_slice(b),
            Part::Shared(s) => s.extend_vec(v),
        }
    }
}

impl<'a> Part<'a> {
    /// An iovec over the piece, for a send that the kernel copies from.
    pub(crate) fn io_vec(self) -> rnic_io::IoVec<'a> {
        match self {
            Part::Bytes(b) => rnic_io::IoVec::new(b),
            Part::Shared(s) => s.io_vec(),
        }
    }
}

/// Payloads shorter than this are copied into the packet when it is built, even with zero
/// copy: copying a few hundred bytes costs about what the block's reference count, the
/// bounds check and a third piece per packet do, small packets then glue into one iovec,
/// and the one-pass copy and CRC of [`TxPacket::fill_icrc`] starts paying at this size.
pub(crate) const ZERO_COPY_MIN: usize = crate::crc_copy::FUSED_MIN;

/// Packets and buffers on their way out; separate from the QPs so both can be borrowed.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    pub(crate) tx: VecDeque<TxPacket>,
    pool: Vec<Vec<u8>>,
    small: Vec<Vec<u8>>,
    /// Buffers with room for a whole train.
    trains: Vec<Vec<u8>>,
    /// Small packets are built into trains ([`EngineConfig::trains`](super::EngineConfig::trains)).
    train: bool,
    /// Packets built and SEND messages ended since the counters last took them
    /// ([`flush_counts`](Self::flush_counts)): one atomic add per drain, not per packet.
    sent: u64,
    sends: u64,
}

/// Packets up to this size (ACKs, READ requests, small messages) use the small pool.
const SMALL_BUF: usize = 512;
/// Buffers kept per pool.
const POOL_MAX: usize = 1024;
/// Packets of at most this many bytes (BTH..ICRC) join trains: a 64-byte SEND, ACKs,
/// READ requests, atomics.
pub(crate) const TRAIN_SEG_MAX: usize = 256;
/// Most packets in one train: what one UDP GSO send carries (64 x 256 bytes is well
/// inside a datagram's 65507).
pub(crate) const TRAIN_MAX: u16 = 64;
const _: () = assert!(TRAIN_MAX as usize == rnic_io::MAX_GSO_SEGMENTS);
const _: () = assert!(TRAIN_MAX as usize * TRAIN_SEG_MAX <= rnic_io::MAX_UDP_PAYLOAD);
/// A train's buffer.
const TRAIN_ROOM: usize = TRAIN_MAX as usize * TRAIN_SEG_MAX;
/// Train buffers kept (trains in one round's batch: a few, unless many destinations).
const TRAINS_KEPT: usize = 64;

/// The member of a sharing process a packet's destination QP belongs to (the top six
/// bits of its QPN, BTH byte 5's upper bits: what the peer's steering program reads).
fn member_of_qpn(qpn: u32) -> u32 {
    (qpn >> 18) & 0x3f
}

impl Outbox {
    /// An empty outbox; `train`: small packets are built into trains.
    pub(crate) fn new(train: bool) -> Outbox {
        Outbox { train, ..Outbox::default() }
    }

    /// Moves the queued packets to the end of `out`. Into an empty `out` (the driver's
    /// batch, every round) the two buffers trade places instead: no element-by-element
    /// move of ~100-byte packets, and no allocation, since each side keeps the other's.
    pub(crate) fn move_into(&mut self, out: &mut Vec<TxPacket>, counters: &Counters) {
        self.flush_counts(counters);
        if out.is_empty() {
            let spare = std::mem::take(out);
            // O(1) unless the queue wrapped around its buffer (then one rotation).
            *out = Vec::from(std::mem::replace(&mut self.tx, VecDeque::from(spare)));
        } else {
            out.extend(self.tx.drain(..));
        }
    }

    /// A SEND message's last packet was built (`rdma_sends`, at the next flush).
    #[inline]
    pub(crate) fn count_send(&mut self) {
        self.sends += 1;
    }

    /// Adds the packets built and SENDs ended since the last flush to `counters`.
    pub(crate) fn flush_counts(&mut self, counters: &Counters) {
        if self.sent > 0 {
            counters.sent_pkts.fetch_add(std::mem::take(&mut self.sent), Ordering::Relaxed);
        }
        if self.sends > 0 {
            counters.rdma_sends.fetch_add(std::mem::take(&mut self.sends), Ordering::Relaxed);
        }
    }

    /// Keeps a sent packet's buffer for reuse.
    pub(crate) fn put(&mut self, buf: Vec<u8>) {
        let (pool, max) = if buf.capacity() >= TRAIN_ROOM {
            (&mut self.trains, TRAINS_KEPT)
        } else if buf.capacity() <= SMALL_BUF {
            (&mut self.small, POOL_MAX)
        } else {
            (&mut self.pool, POOL_MAX)
        };
        if pool.len() < max {
            pool.push(buf);
        }
    }

    /// Builds one packet: the payload is written in place by `fill`. With trains, a
    /// small packet joins the packet queued last when that one is a train it fits
    /// ([`joins`](Self::joins)), else starts one in a buffer with room for a whole train.
    #[inline]
    pub(crate) fn emit(
        &mut self,
        counters: &Counters,
        dst: IpAddr,
        src_port: u16,
        repr: &RoceRepr,
        fill: impl FnOnce(&mut [u8]),
    ) {
        let len = repr.buffer_len();
        if self.train && len <= TRAIN_SEG_MAX {
            let member = member_of_qpn(repr.bth.dest_qp.value());
            if let Some(t) = self.tx.back_mut().filter(|t| Self::joins(t, dst, src_port, len, member)) {
                let start = t.data.len();
                t.data.resize(start + len, 0);
                if repr.emit_with(&mut t.data[start..], fill).is_ok() {
                    t.train += 1;
                    self.sent += 1;
                } else {
                    t.data.truncate(start);
                    counters.send_err.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
            let mut buf = self.buffer_with_room(len, TRAIN_ROOM);
            let ok = repr.emit_with(&mut buf, fill).is_ok();
            self.queue(counters, TxPacket::new(dst, src_port, buf), ok);
            return;
        }
        let mut buf = self.buffer(len);
        let ok = repr.emit_with(&mut buf, fill).is_ok();
        self.queue(counters, TxPacket::new(dst, src_port, buf), ok);
    }

    /// Whether a packet of `len` bytes to `dst` from `src_port`, for a QP of the peer's
    /// `member`, can join `t`: one destination, flow and length, one sharing process of
    /// the peer (a GSO send reaches one socket of its group), room left in the train.
    #[inline]
    fn joins(t: &TxPacket, dst: IpAddr, src_port: u16, len: usize, member: u32) -> bool {
        t.payload.is_none()
            && t.train < TRAIN_MAX
            && t.data.len() == usize::from(t.train) * len
            && t.dst == dst
            && t.src_port == src_port
            && t.data.get(5).map(|&b| u32::from(b >> 2)) == Some(member)
    }

    /// Builds one packet whose payload stays in registered memory until it is sent:
    /// `block[offset..]`, `repr.payload_len` bytes (bounds checked here, once: a block
    /// never shrinks). `lend`: the transport hands it to the kernel (zero copy); else it is
    /// copied into the packet with its ICRC ([`TxPacket::fill_icrc`]), into room this
    /// buffer already has.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn emit_from_memory(
        &mut self,
        counters: &Counters,
        dst: IpAddr,
        src_port: u16,
        repr: &RoceRepr,
        block: &Arc<crate::mem::MemBlock>,
        offset: usize,
        lend: bool,
    ) {
        if block.view(offset, repr.payload_len).is_err() {
            counters.send_err.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let headers = repr.buffer_len() - repr.payload_len;
        let mut buf = if lend { self.buffer(headers) } else { self.buffer_with_room(headers, repr.buffer_len()) };
        let at = repr.emit_without_payload(&mut buf);
        let payload =
            at.as_ref().ok().map(|&at| TxPayload { block: block.clone(), offset, len: repr.payload_len, at, lend });
        self.queue(counters, TxPacket { dst, src_port, data: buf, train: 1, payload }, at.is_ok());
    }

    /// A buffer of `len` bytes from the pool. Small (ACK-sized) and large buffers are
    /// pooled apart, so that a data packet reuses one already long enough; it is not
    /// zeroed, since the emitters write every byte.
    fn buffer(&mut self, len: usize) -> Vec<u8> {
        self.buffer_with_room(len, len)
    }

    /// [`buffer`](Self::buffer) from the pool for packets of `room` bytes, so that it can
    /// grow to that without reallocating (once the pool holds such buffers).
    fn buffer_with_room(&mut self, len: usize, room: usize) -> Vec<u8> {
        let pool = if room >= TRAIN_ROOM {
            &mut self.trains
        } else if room <= SMALL_BUF {
            &mut self.small
        } else {
            &mut self.pool
        };
        let mut buf = pool.pop().unwrap_or_default();
        buf.truncate(len);
        if room >= TRAIN_ROOM {
            // A new buffer gets a train's room once, so that the train never reallocates.
            buf.reserve(room - buf.len());
        }
        buf.resize(len, 0);
        buf
    }

    /// Queues an emitted packet, or (`ok` false: a repr inconsistent with its opcode, an
    /// engine bug) counts it and keeps its buffer.
    #[inline]
    fn queue(&mut self, counters: &Counters, p: TxPacket, ok: bool) {
        if ok {
            self.sent += 1;
            self.tx.push_back(p);
        } else {
            counters.send_err.fetch_add(1, Ordering::Relaxed);
            self.put(p.data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_wire::icrc::{IcrcCache, IcrcContext};
    use rnic_wire::{Psn, Qpn};

    /// An RC SEND ONLY of `len` bytes to QP `qpn`, PSN `psn`, asking for an ACK.
    fn send_only(qpn: u32, psn: u32, len: usize) -> RoceRepr {
        RoceRepr {
            bth: rnic_wire::bth::BthRepr {
                opcode: rnic_wire::opcode::Opcode::RC_SEND_ONLY,
                se: false,
                migreq: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: Qpn::new(qpn),
                ack_req: true,
                psn: Psn::new(psn),
            },
            ext: rnic_wire::roce::ExtHeaders::default(),
            payload_len: len,
        }
    }

    /// A packet whose payload stays in registered memory until it is sent (lent to the
    /// kernel, copied in with its ICRC, or appended to a frame with it) goes on the wire
    /// byte for byte as the one copied when it was built, ICRC included, whatever the
    /// pad; and a failed bounds check sends nothing.
    #[test]
    fn packets_from_memory_equal_copied_ones() {
        let block = Arc::new(crate::mem::MemBlock::new(8192).unwrap());
        let bytes: Vec<u8> = (0..8192u32).map(|i| (i * 13 + 5).to_le_bytes()[0]).collect();
        block.write(0, &bytes).unwrap();
        let counters = Counters::default();
        let ctx = IcrcContext::new("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap(), 49152, 4791);
        let mut cache = IcrcCache::new();
        let send_only = |len: usize| send_only(0x11, 42, len);
        for (len, offset) in [(512usize, 0usize), (513, 7), (1023, 100), (2500, 3), (4096, 4096)] {
            let repr = send_only(len);
            for lend in [true, false] {
                let mut out = Outbox::default();
                out.emit(&counters, ctx.dst, 49152, &repr, |p| p.copy_from_slice(&bytes[offset..offset + len]));
                out.emit_from_memory(&counters, ctx.dst, 49152, &repr, &block, offset, lend);
                let mut copied = out.tx.pop_front().unwrap();
                let mut split = out.tx.pop_front().unwrap();
                assert!(copied.payload.is_none() && split.payload.is_some());
                assert_eq!(split.len(), copied.len());
                copied.fill_icrc(&mut cache, &ctx).unwrap();
                // Appended to a frame (the raw-Ethernet transport) in one pass, the
                // packet left as it is.
                let mut frame = vec![0xee; 14];
                split.append_with_icrc(&mut frame, &mut cache, &ctx).unwrap();
                assert_eq!((&frame[..14], &frame[14..]), (&[0xee; 14][..], &copied.data[..]), "len {len} lent {lend}");
                assert!(split.payload.is_some());
                split.fill_icrc(&mut cache, &ctx).unwrap();
                // Copied in with the ICRC: one piece from then on.
                assert_eq!(split.payload.is_none(), !lend);
                assert_eq!(split.len(), copied.len());
                assert_eq!(split.to_vec(), copied.data, "len {len} at {offset}, lent {lend}");
                ctx.verify(&split.to_vec()).unwrap();
            }
        }
        let mut out = Outbox::default();
        out.emit_from_memory(&counters, ctx.dst, 1, &send_only(600), &block, 8000, false);
        assert!(out.tx.is_empty(), "a payload past the block's end is not sent");
        assert_eq!(counters.send_err.load(Ordering::Relaxed), 1);
    }

    /// Small packets join the train queued last while it has room and they share its
    /// destination, flow, length and the peer's sharing process; anything else starts a
    /// new entry. A train's packets are byte for byte the packets built alone, and a
    /// train's buffer comes back to the train pool.
    #[test]
    fn small_packets_build_trains() {
        let counters = Counters::default();
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        let repr = send_only;
        let fill = |psn: u32| move |p: &mut [u8]| p.fill(psn.to_le_bytes()[0]);
        let mut trains = Outbox::new(true);
        let mut alone = Outbox::new(false);
        // (destination, source port, QPN, payload): 70 to one place, then a change of
        // each kind, then one too large for a train.
        let mut plan: Vec<(IpAddr, u16, u32, usize)> = vec![(a, 1, 0x11, 64); 70];
        plan.extend([(b, 1, 0x11, 64), (b, 2, 0x11, 64), (b, 2, 0x11, 32), (b, 2, 0x11 | 1 << 18, 32)]);
        plan.extend([(b, 2, 0x11 | 1 << 18, 32), (b, 2, 0x11 | 1 << 18, 300), (b, 2, 0x11 | 1 << 18, 32)]);
        for (psn, &(dst, port, qpn, len)) in plan.iter().enumerate() {
            let psn = u32::try_from(psn).unwrap();
            trains.emit(&counters, dst, port, &repr(qpn, psn, len), fill(psn));
            alone.emit(&counters, dst, port, &repr(qpn, psn, len), fill(psn));
        }
        let got: Vec<(u16, usize)> = trains.tx.iter().map(|p| (p.train, p.seg_len())).collect();
        assert_eq!(got, [(64, 80), (6, 80), (1, 80), (1, 80), (1, 48), (2, 48), (1, 316), (1, 48)]);
        let split: Vec<TxPacket> = trains.tx.drain(..).flat_map(TxPacket::split_train).collect();
        assert_eq!(split, Vec::from(std::mem::take(&mut alone.tx)), "a train holds the packets built alone");
        trains.flush_counts(&counters);
        alone.flush_counts(&counters);
        assert_eq!(counters.sent_pkts.load(Ordering::Relaxed), 2 * plan.len() as u64);
        // A train's buffer goes back to the train pool and is taken for the next one.
        let mut out = Outbox::new(true);
        out.emit(&counters, a, 1, &repr(0x11, 0, 64), fill(0));
        let buf = out.tx.pop_front().unwrap().data;
        let (ptr, cap) = (buf.as_ptr(), buf.capacity());
        assert!(cap >= TRAIN_ROOM);
        out.put(buf);
        out.emit(&counters, a, 1, &repr(0x11, 1, 64), fill(1));
        assert_eq!(out.tx[0].data.as_ptr(), ptr);
    }
}
