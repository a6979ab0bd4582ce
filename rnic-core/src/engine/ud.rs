//! The UD responder: one packet is one message (IBA 9.8.1). Checks, in rxe's order
//! (`rxe_recv.c` `check_keys`, then `rxe_resp.c`): Q_Key, receive WQE, receive buffer
//! length; then the 40-byte GRH area and the payload are placed and the receive completes.
//! Every failure is a silent drop with a counter (IBA 9.9.3 class D: nobody is told, the
//! receive WQE stays for the next datagram); no UD packet is ever answered.

use super::ctx::{CqSide, Ctx};
use super::qp::Qp;
use super::qp::RecvWqe;
use crate::wr::{NetworkHdr, WcFlags, WcOpcode, WcStatus, WorkCompletion};
use rnic_wire::ipv4::Ipv4Repr;
use rnic_wire::ipv6::Ipv6Repr;
use rnic_wire::roce::RoceRepr;
use std::net::IpAddr;
use std::sync::atomic::Ordering;

/// Bytes at the head of every UD receive buffer reserved for the GRH (`struct ibv_grh`),
/// whatever the network header really was (verbs: "the first 40 bytes of the buffer").
pub const GRH_LEN: usize = 40;

/// UDP header length.
const UDP_LEN: usize = 8;
/// IP protocol / next header of UDP.
const IPPROTO_UDP: u8 = 17;
/// The TTL / hop limit the sending kernel writes by default (`net.ipv4.ip_default_ttl`,
/// and what rxe sends, see ../shared/rxe-lab/README.md).
const DEFAULT_TTL: u8 = 64;

/// The 40-byte GRH area of a UD receive, as rxe fills it (`rxe_resp.c` `execute`, `union
/// rdma_network_hdr`): for RoCEv2 over IPv4 the first 20 bytes are zero and the IPv4 header
/// is in the last 20; over IPv6 the area is the IPv6 header.
///
/// A UDP socket never shows the receiver the IP header, so it is rebuilt from what is known:
/// the addresses, the lengths (UDP header plus `roce_len` bytes of BTH..ICRC), protocol UDP,
/// TOS / traffic class 0 and flow label 0 (what rnic sends), TTL / hop limit 64 (the
/// kernel's default), and for IPv4 ID 0 with DF, which is exactly the header whose ICRC the
/// transport verified (see ../shared/notes/icrc-over-udp-sockets.md). A raw-Ethernet
/// transport will be able to copy the real header instead.
pub fn grh_area(src: IpAddr, dst: IpAddr, roce_len: usize) -> [u8; GRH_LEN] {
    let mut grh = [0u8; GRH_LEN];
    let ip_payload = UDP_LEN + roce_len;
    match (src, dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let ip = Ipv4Repr { src, dst, tos: 0, ident: 0, df: true, ttl: DEFAULT_TTL, protocol: IPPROTO_UDP };
            // Cannot fail: the buffer is 20 bytes and a UDP datagram's length fits 16 bits.
            let _ = ip.emit(&mut grh[GRH_LEN - 20..], ip_payload);
        }
        (src, dst) => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            let ip = Ipv6Repr {
                src: v6(src),
                dst: v6(dst),
                traffic_class: 0,
                flow_label: 0,
                hop_limit: DEFAULT_TTL,
                next_header: IPPROTO_UDP,
            };
            let _ = ip.emit(&mut grh, ip_payload);
        }
    }
    grh
}

/// The header [`grh_area`] writes for a datagram from `src` to `dst`: IPv4 when both are
/// IPv4 addresses, else IPv6.
pub fn network_hdr(src: IpAddr, dst: IpAddr) -> NetworkHdr {
    if src.is_ipv4() && dst.is_ipv4() {
        NetworkHdr::Ipv4
    } else {
        NetworkHdr::Ipv6
    }
}

/// Handles a UD request packet (`data_len` bytes of BTH..ICRC) from `src` for `qpn`,
/// sent to multicast `group` when it is one (the GRH area's destination is then the group).
pub(crate) fn handle_request(
    qp: &mut Qp,
    cx: &mut Ctx,
    src: IpAddr,
    group: Option<IpAddr>,
    repr: &RoceRepr,
    payload: &[u8],
    data_len: usize,
) {
    let local = cx.config.local_ip;
    let Some(deth) = repr.ext.deth else {
        // The opcode table gives every UD opcode a DETH; a parsed packet has it.
        cx.counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
        return;
    };
    // IBA C10-15 / rxe check_keys: the DETH Q_Key must be the QP's, else a silent drop that
    // the port counts. A multicast datagram is checked by each QP it reaches.
    if deth.qkey != qp.attr.qkey {
        cx.counters.qkey_viol_cntr.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if let Some(info) = repr.bth.opcode.info() {
        // A QP on an SRQ takes its receive WQE from it (rxe get_srq_wqe).
        super::responder::take_srq_wqe(qp, info);
    }
    // Resource (rxe check_resource): no receive WQE -> class D, dropped (UD has no RNR).
    // Length (rxe check_length, commit f67ac0061c76 quoting IBA): a datagram that does not
    // fit the receive buffer after the GRH area is an invalid request, silently dropped;
    // the receive WQE waits for the next one.
    let fits = match qp.resp.rq.front() {
        Some(r) => r.len >= GRH_LEN + payload.len(),
        None => false,
    };
    if !fits {
        cx.counters.ud_dropped_pkts.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let rwqe: RecvWqe = qp.resp.rq.pop_front().expect("checked above");
    qp.shared.rq_outstanding.fetch_sub(1, Ordering::AcqRel);
    // A datagram to the link-local GID 0 (raw Ethernet) was addressed to the link-local
    // address of the device's MAC, whose EUI-64 is the CA GUID.
    let local = match group {
        // The datagram's destination was the group (rxe copies the real header).
        Some(g) => g,
        None if super::is_link_local(src) && local.is_ipv4() => IpAddr::V6(super::link_local(cx.config.ca_guid)),
        None => local,
    };
    let grh = grh_area(src, local, data_len);
    let network_hdr = network_hdr(src, local);
    let qp_num = qp.qpn().value();
    if !rwqe.data.scatter(0, &grh) || !rwqe.data.scatter(GRH_LEN, payload) {
        // The receive buffer went away under the WQE (deregistered after posting): rxe
        // RESPST_ERR_MALFORMED_WQE, class A: LOC_QP_OP_ERR and the QP goes to error.
        let wc = WorkCompletion::new(rwqe.wr_id, WcStatus::LocQpOpErr, WcOpcode::Recv, qp_num);
        cx.push_wc(qp, CqSide::Recv, wc, false);
        cx.enter_error(qp, None);
        return;
    }
    let wc = WorkCompletion {
        // Verbs (and rxe's do_complete): byte_len counts the 40 GRH bytes.
        byte_len: u32::try_from(GRH_LEN + payload.len()).unwrap_or(u32::MAX),
        imm_data: repr.ext.imm_data.unwrap_or(0),
        src_qp: deth.src_qp.value(),
        wc_flags: if repr.ext.imm_data.is_some() { WcFlags::GRH | WcFlags::WITH_IMM } else { WcFlags::GRH },
        pkey_index: qp.attr.pkey_index,
        network_hdr,
        ..WorkCompletion::new(rwqe.wr_id, WcStatus::Success, WcOpcode::Recv, qp_num)
    };
    cx.counters.rdma_recvs.fetch_add(1, Ordering::Relaxed);
    cx.push_wc(qp, CqSide::Recv, wc, repr.bth.se);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_header_in_the_last_20_bytes() {
        let g = grh_area("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), 12 + 8 + 100 + 4);
        assert_eq!(g[..20], [0u8; 20]);
        let total = (20u16 + 8 + 124).to_be_bytes();
        #[rustfmt::skip]
        let mut want = vec![
            0x45, 0x00, total[0], total[1], 0x00, 0x00, 0x40, 0x00,
            0x40, 0x11, 0x00, 0x00, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let c = rnic_wire::ipv4::internet_checksum(&want);
        want[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(g[20..], want[..]);
        assert_eq!(rnic_wire::ipv4::internet_checksum(&g[20..]), 0);
    }

    #[test]
    fn ipv6_header_fills_the_area() {
        let g = grh_area("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap(), 100);
        assert_eq!(g[0] >> 4, 6);
        assert_eq!(u16::from_be_bytes([g[4], g[5]]), 108);
        assert_eq!((g[6], g[7]), (17, 64));
        assert_eq!(g[8..24], "fd00::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        assert_eq!(g[24..40], "fd00::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
    }
}
