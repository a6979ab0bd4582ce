//! A hostile peer: bytes drive a stream of well-formed-but-wrong RoCEv2 packets (any
//! opcode, PSNs around the expected one, R_Keys valid or not, addresses inside, across and
//! outside the one registered region, lengths that lie), raw garbage, timer jumps and the
//! victim's own posts. Whatever comes, the victim engine must not panic, must write no byte
//! outside its registered region, must emit only well-formed packets, and must complete no
//! more work than was posted. Shared by `tests/hostile_peer.rs` (proptest, in CI) and the
//! `engine` cargo-fuzz target (coverage-guided).
#![allow(dead_code, clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)]

use rnic_core::counters::Counters;
use rnic_core::cq::Cq;
use rnic_core::engine::qp::QpInit;
use rnic_core::engine::qp::{validate_recv, validate_send, QpAttr, QpCap};
use rnic_core::engine::{Engine, EngineConfig};
use rnic_core::mem::MemBlock;
use rnic_core::mr::{AccessFlags, Mtpt, PdId};
use rnic_core::qp_state::{QpAttrMask, QpState, QpType};
use rnic_core::wr::{RecvWr, SendFlags, SendOp, SendWr, Sge, UdDest};
use rnic_wire::aeth::{AethRepr, NakCode, Syndrome};
use rnic_wire::atomic::AtomicEthRepr;
use rnic_wire::bth::BthRepr;
use rnic_wire::reth::RethRepr;
use rnic_wire::roce::{ExtHeaders, RocePacket, RoceRepr};
use rnic_wire::{HeaderKind, Psn, Qpn};
use std::net::IpAddr;
use std::sync::Arc;

const PAGE: usize = 4096;
/// The block: guard page, registered page, guard page.
const BLOCK: usize = 3 * PAGE;
const GUARD: u8 = 0xA5;

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.u8()?, self.u8()?]))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes([self.u8()?, self.u8()?, self.u8()?, self.u8()?]))
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}

/// Runs one hostile session described by `data` against an RC QP.
pub fn run(data: &[u8]) {
    run_as(data, QpType::Rc);
}

/// The Q_Key of the victim when it is a UD QP (hostile DETHs carry it or 0).
const UD_QKEY: u32 = 0x1111_1111;

/// Runs one hostile session described by `data` against a QP of `qp_type`.
pub fn run_as(data: &[u8], qp_type: QpType) {
    let me: IpAddr = "10.9.0.2".parse().unwrap();
    let peer: IpAddr = "10.9.0.1".parse().unwrap();
    let mtpt = Arc::new(Mtpt::new(16));
    let counters = Arc::new(Counters::default());
    // Half the sessions leave payloads in registered memory, as the UDP driver does.
    let zero_copy = data.first().is_some_and(|b| b & 1 == 1);
    let mut e = Engine::new(EngineConfig { zero_copy, ..EngineConfig::new(me) }, mtpt.clone(), counters);
    let mem = Arc::new(MemBlock::new(BLOCK).unwrap());
    mem.fill(0, BLOCK, GUARD).unwrap();
    let base = mem.addr();
    let region = base + PAGE as u64;
    let keys = mtpt.register(PdId(1), mem.clone(), PAGE, PAGE, region, AccessFlags::REGISTRABLE).unwrap();
    let cq = Arc::new(Cq::new(1, 64));
    let cap = QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 64 };
    let qp = e.create_qp(QpInit::new(qp_type, PdId(1), cq.clone(), cq.clone()).cap(cap)).unwrap();
    let qpn = qp.qpn;
    let mtu_code = 1; // 256 bytes: many packets per message from few input bytes
                      // The victim's bring-up for its QP type: each step takes what its column of the
                      // modify-QP table requires (UC: no READ or atomic access, nothing RC-only).
    let access = match qp_type {
        QpType::Uc => AccessFlags::REMOTE_WRITE,
        _ => AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
    };
    let steps = QpAttr {
        access,
        qkey: UD_QKEY,
        remote_ip: Some(peer),
        path_mtu: mtu_code,
        dest_qpn: 0x11,
        rq_psn: 0xFF_FFF0,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        sq_psn: 0x10,
        timeout: 4,
        retry_cnt: 3,
        rnr_retry: 3,
        max_rd_atomic: 4,
        ..QpAttr::default()
    }
    .bring_up(qp_type);
    for a in &steps {
        e.modify_qp(0, qpn, a).unwrap();
    }
    let sge = |off: u64, len: u32| Sge { addr: region + off, length: len, lkey: keys.lkey };
    let (mut posted, mut now) = (0usize, 0u64);
    let opcodes: Vec<_> = rnic_wire::opcode::all().collect();
    let mut b = Bytes(data);
    let mut out = Vec::new();
    while let Some(ctl) = b.u8() {
        match ctl % 10 {
            // A structured packet.
            0..=3 | 9 => {
                let Some(op_i) = b.u8() else { break };
                let info = opcodes[op_i as usize % opcodes.len()];
                let psn_delta = b.u8().unwrap_or(0) as i8;
                let va_off = i64::from(b.u16().unwrap_or(0) as i16) * 8;
                let rkey = match b.u8().unwrap_or(0) % 4 {
                    0 | 1 => keys.rkey,
                    2 => keys.rkey ^ 1,
                    _ => b.u32().unwrap_or(0),
                };
                let dma_len = u32::from(b.u16().unwrap_or(0)) % (3 * PAGE as u32);
                let payload_len = usize::from(b.u16().unwrap_or(0)) % 600;
                let flags = b.u8().unwrap_or(0);
                // PSNs around the expected one, and around what the victim sent.
                let anchor = if info.request { 0xFF_FFF0 } else { 0x10 };
                let psn = Psn::new(anchor);
                let psn =
                    if psn_delta >= 0 { psn.add(psn_delta as u32) } else { psn.sub(psn_delta.unsigned_abs().into()) };
                let mut ext = ExtHeaders::default();
                for h in info.headers {
                    match h {
                        HeaderKind::Reth => {
                            ext.reth = Some(RethRepr { va: region.wrapping_add(va_off as u64), rkey, dma_len });
                        }
                        HeaderKind::Aeth => {
                            let syndrome = match flags % 5 {
                                0 | 1 => Syndrome::Ack { credits: 31 },
                                2 => Syndrome::RnrNak { timer: flags % 32 },
                                3 => Syndrome::Nak(NakCode::PsnSequenceError),
                                _ => Syndrome::Nak(NakCode::RemoteAccessError),
                            };
                            ext.aeth = Some(AethRepr { syndrome, msn: u32::from(flags) });
                        }
                        HeaderKind::AtomicEth => {
                            ext.atomic_eth = Some(AtomicEthRepr {
                                va: region.wrapping_add(va_off as u64),
                                rkey,
                                swap_add: u64::from(flags),
                                compare: 0,
                            });
                        }
                        HeaderKind::AtomicAckEth => {
                            ext.atomic_ack_eth =
                                Some(rnic_wire::atomic::AtomicAckEthRepr { orig_remote_data: u64::from(flags) });
                        }
                        HeaderKind::ImmDt => ext.imm_data = Some(u32::from(flags)),
                        HeaderKind::Ieth => ext.ieth = Some(rkey),
                        HeaderKind::Xrceth => ext.xrc_srqn = Some(u32::from(flags)),
                        HeaderKind::Feth => {
                            ext.feth = Some(rnic_wire::small::FethRepr {
                                placement_type: 1 + flags % 2,
                                selectivity: (flags >> 1) % 2,
                            });
                        }
                        HeaderKind::Deth => {
                            let qkey = if flags & 0x10 != 0 { UD_QKEY } else { 0 };
                            ext.deth = Some(rnic_wire::deth::DethRepr { qkey, src_qp: Qpn::new(0x11) })
                        }
                        _ => {}
                    }
                }
                let repr = RoceRepr {
                    bth: BthRepr {
                        opcode: info.opcode,
                        se: flags & 0x40 != 0,
                        migreq: false,
                        pkey: 0xffff,
                        fecn: false,
                        becn: false,
                        dest_qp: if flags & 0x80 != 0 { Qpn::new(0x11 + u32::from(flags & 3)) } else { qpn },
                        ack_req: flags & 0x20 != 0,
                        psn,
                    },
                    ext,
                    payload_len: if info.payload { payload_len } else { 0 },
                };
                let mut pkt = vec![0u8; repr.buffer_len()];
                if repr.emit_with(&mut pkt, |p| p.fill(flags)).is_ok() {
                    e.handle_packet(now, peer, &pkt);
                }
            }
            // Raw bytes as a packet (mostly malformed).
            4 => {
                let n = usize::from(b.u8().unwrap_or(0));
                let raw = b.take(n).to_vec();
                e.handle_packet(now, peer, &raw);
            }
            // Time passes; timers fire.
            5 => {
                now += u64::from(b.u16().unwrap_or(0)) * 1_000;
                if e.poll_timeout().is_some_and(|t| t <= now) {
                    e.handle_timeout(now);
                }
            }
            // The victim posts a receive into its region.
            6 => {
                let off = u64::from(b.u8().unwrap_or(0)) * 16;
                let wr = RecvWr { wr_id: posted as u64, sg_list: vec![sge(off, 512)] };
                if let Ok(w) = validate_recv(&qp, &mtpt, &wr) {
                    e.post_recv(qpn, w);
                    posted += 1;
                }
            }
            // The victim's QP is reset and connected again (so that a session goes on after
            // the hostile peer has driven it into the error state).
            8 => {
                let reset = QpAttr { mask: QpAttrMask::STATE, state: QpState::Reset, ..QpAttr::default() };
                e.modify_qp(now, qpn, &reset).unwrap();
                for a in &steps {
                    e.modify_qp(now, qpn, a).unwrap();
                }
            }
            // The victim posts a send of some kind.
            _ => {
                let k = b.u8().unwrap_or(0);
                let len = u32::from(k) * 4;
                let remote = 0x7000_0000_0000u64 + u64::from(k);
                let op = match k % 4 {
                    0 => SendOp::Send,
                    1 => SendOp::RdmaWrite { remote_addr: remote, rkey: 7 },
                    2 => SendOp::RdmaRead { remote_addr: remote, rkey: 7 },
                    _ => SendOp::SendWithImm { imm: 9 },
                };
                let wr = SendWr {
                    wr_id: posted as u64,
                    op,
                    sg_list: vec![sge(2048, len)],
                    flags: SendFlags::SIGNALED,
                    ud: (qp_type == QpType::Ud).then_some(UdDest { dst: peer, remote_qpn: 0x11, remote_qkey: UD_QKEY }),
                };
                if let Ok(w) = validate_send(&qp, &mtpt, &wr) {
                    e.post_send(now, qpn, w);
                    posted += 1;
                }
            }
        }
        // Everything the victim says is well formed.
        out.clear();
        while e.has_pending_transmit() {
            e.drain_transmits(&mut out);
        }
        for p in &out {
            let wire = p.to_vec();
            let pkt = RocePacket::new_checked(&wire[..]).expect("the engine emitted a malformed packet");
            RoceRepr::parse(&pkt).expect("the engine emitted an unparsable packet");
        }
        for p in out.drain(..) {
            e.recycle(p.data);
        }
    }
    if std::env::var_os("HOSTILE_DEBUG").is_some() {
        eprintln!("{:?} posted={posted}", e.counters().snapshot().into_iter().filter(|c| c.1 > 0).collect::<Vec<_>>());
    }
    // Not a byte outside the registered page changed.
    let mut all = vec![0u8; BLOCK];
    mem.read(0, &mut all).unwrap();
    assert!(all[..PAGE].iter().all(|&x| x == GUARD), "the guard page below the region was written");
    assert!(all[2 * PAGE..].iter().all(|&x| x == GUARD), "the guard page above the region was written");
    // No more completions than work posted (each WR completes at most once).
    let mut n = 0;
    while cq.poll_one().is_some() {
        n += 1;
    }
    assert!(n <= posted, "{n} completions for {posted} work requests");
}
