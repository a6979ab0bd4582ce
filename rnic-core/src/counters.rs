//! Per-device counters, named as Linux rxe names its `hw_counters`, plus rnic's own.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($(#[$m:meta])* $name:ident,)*) => {
        /// One engine's counters (a device shard's, or a fabric node's). Each is monotonic;
        /// read them with [`Counters::snapshot`]. Aligned to a cache line of its own: each
        /// shard's progress thread writes its set on every packet, and a line two cores
        /// write would move between them at each write.
        #[derive(Debug, Default)]
        #[repr(align(64))]
        pub struct Counters {
            $($(#[$m])* pub $name: AtomicU64,)*
        }

        impl Counters {
            /// Every counter's name and value, in a fixed order.
            pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.load(Ordering::Relaxed)),)*]
            }

            /// One counter by name.
            pub fn get(&self, name: &str) -> Option<u64> {
                match name {
                    $(stringify!($name) => Some(self.$name.load(Ordering::Relaxed)),)*
                    _ => None,
                }
            }
        }
    };
}

counters! {
    /// Packets sent.
    sent_pkts,
    /// Packets received (after ICRC and structure checks).
    rcvd_pkts,
    /// Duplicate requests received by the responder.
    duplicate_request,
    /// Requests received ahead of the expected PSN.
    out_of_seq_request,
    /// RNR NAKs received by the requester.
    rcvd_rnr_err,
    /// RNR NAKs sent by the responder.
    send_rnr_err,
    /// PSN sequence error NAKs received by the requester.
    rcvd_seq_err,
    /// ACKs the responder held back (coalesced).
    ack_deferred,
    /// Transport retries exhausted.
    retry_exceeded_err,
    /// RNR retries exhausted.
    retry_rnr_exceeded_err,
    /// Retransmissions started by the requester (timeouts and sequence NAKs).
    completer_retry_err,
    /// Packets that could not be sent.
    send_err,
    /// Receives the socket failed with an error other than "nothing there" (rnic; rxe
    /// has no socket, the nearest is its `rcvd_pkts` drop accounting).
    rx_socket_err,
    /// SEND messages sent.
    rdma_sends,
    /// SEND messages received.
    rdma_recvs,
    /// Packets dropped for a bad ICRC (rnic).
    icrc_err,
    /// IPv4 packets accepted only by solving for their unknown IP ID, as Linux rxe's
    /// are: 16 of the ICRC's 32 bits checked (rnic; see `rx_icrc`).
    icrc_ipv4_id_solved,
    /// Packets dropped as malformed (rnic).
    malformed_pkts,
    /// Packets for a QP that does not exist or is not receiving (rnic).
    unknown_qp_pkts,
    /// Packets received for a QP of another process sharing the device, passed on to it
    /// (rnic; see `transport::share`).
    share_forwarded,
    /// Probes of the device's socket group this process ran (rnic).
    share_probes,
    /// Steering programs this process gave the socket group (rnic).
    share_steered,
    /// Messages from a sharing process refused (another user's; a program the kernel
    /// refused) (rnic).
    share_refused,
    /// Packets dropped for a P_Key that is not the default partition's (the name of
    /// `ibv_port_attr.bad_pkey_cntr`, which rxe's `check_keys` increments for the same
    /// reason; IBA C9-42/43).
    bad_pkey_cntr,
    /// ACKs for PSNs never sent, ignored (rnic).
    ghost_acks,
    /// Other NAKs received (invalid request, remote access, remote operational) (rnic).
    rcvd_nak_err,
    /// Other NAKs sent (rnic).
    send_nak_err,
    /// Completion queue overflows (rnic).
    cq_overflow,
    /// UDP GSO sends (each several packets in one system call) (rnic).
    tx_gso_batches,
    /// Receives that returned several GRO-coalesced datagrams (rnic).
    rx_gro_batches,
    /// Packets whose ICRC matched IPv4 ID = their index in a GRO batch, not 0 (rnic).
    icrc_gso_index,
    /// Packets whose ICRC matched another IPv4 ID below 64, not 0 (rnic).
    icrc_gso_window,
    /// UD packets dropped because their DETH Q_Key is not the QP's (the name of
    /// `ibv_port_attr.qkey_viol_cntr`, which rxe increments for the same reason).
    qkey_viol_cntr,
    /// UC request packets the responder dropped silently: a packet lost before them, out of
    /// sequence, a MIDDLE/LAST without its FIRST, a bad length, an R_Key or access
    /// violation, no receive WQE, a receive buffer too small (rnic; IBA 9.9.3 class D).
    uc_dropped_pkts,
    /// UC messages abandoned part-way: their receive WQE is reused, WRITE data already
    /// placed stays (rnic).
    uc_abandoned_msgs,
    /// UD packets the responder dropped silently: no receive WQE, or a receive buffer
    /// smaller than the 40-byte GRH area plus the payload (rnic; IBA 9.9.3 class D, rxe).
    ud_dropped_pkts,
    /// Packets received marked congestion-experienced: ECN CE in their IP header, or
    /// arriving while the receive queue was above its threshold (mlx5's name).
    np_ecn_marked_roce_packets,
    /// CNPs sent by the notification point (mlx5's name).
    np_cnp_sent,
    /// CNPs that cut a QP's rate at the reaction point (mlx5's name).
    rp_cnp_handled,
    /// CNPs received and ignored: congestion control off, or for a QP that has no
    /// reaction point (UC, UD, not connected to the sender) (mlx5's name).
    rp_cnp_ignored,
    /// Receives that found the socket's receive queue above its congestion threshold (an
    /// eighth of the buffer): their packets counted as congestion-experienced (rnic).
    np_rx_queue_congested,
    /// Datagrams that waited in the socket's receive queue longer than 1 ms (the kernel's
    /// receive timestamp against the clock when the device took them): counted as
    /// congestion-experienced (rnic).
    np_rx_queue_delayed,
    /// Loss signals (sequence NAKs, retransmission timeouts) that cut a QP's rate (rnic).
    rp_loss_handled,
    /// Packets the pacer held back to keep a QP at its rate (rnic).
    rp_paced,
    /// Times an RC QP waited for room towards its destination: the flow-control bound on
    /// bytes in flight to one peer was reached (rnic).
    tx_dest_blocked,
    /// Raw Ethernet: frames for another MAC or another IP address, ignored (rnic).
    rx_not_for_us,
    /// Raw Ethernet: frames that are not RoCEv2 (other EtherTypes, IP protocols, UDP
    /// ports) or not ARP for this device, ignored (rnic).
    rx_not_roce,
    /// Raw Ethernet: ARP requests sent to resolve a next hop (rnic).
    arp_requests_sent,
    /// Raw Ethernet: ARP replies sent for this device's address (rnic).
    arp_replies_sent,
    /// Raw Ethernet: IPv6 neighbour solicitations sent (asking for a next hop's MAC).
    nd_solicits_sent,
    /// Raw Ethernet: IPv6 neighbour advertisements sent (answering for the device's
    /// addresses: its IPv6 address and its link-local GID 0).
    nd_adverts_sent,
    /// Raw Ethernet: packets dropped because their next hop did not answer ARP within a
    /// second, or too many waited for it (rnic).
    tx_neigh_unresolved,
}

/// A device's counters: the sum of its shards' [`Counters`]. Each shard counts its own
/// packets in its own set, so no counter is written by two cores (shared, every packet's
/// `fetch_add` on the same cache lines would have moved them between the shards' cores);
/// a read adds them up. Cheap to clone: it shares the sets, and reads them as they are
/// at each call.
#[derive(Debug, Clone)]
pub struct DeviceCounters(std::sync::Arc<[std::sync::Arc<Counters>]>);

impl DeviceCounters {
    /// The counters of a device whose shards count in `parts`.
    pub fn new(parts: Vec<std::sync::Arc<Counters>>) -> DeviceCounters {
        DeviceCounters(parts.into())
    }

    /// Every counter's name and value (summed over the shards), in [`Counters::snapshot`]'s
    /// order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let mut parts = self.0.iter();
        let mut sum = parts.next().map(|c| c.snapshot()).unwrap_or_default();
        for c in parts {
            for (total, (_, v)) in sum.iter_mut().zip(c.snapshot()) {
                total.1 = total.1.wrapping_add(v);
            }
        }
        sum
    }

    /// One counter by name, summed over the shards.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.0.iter().map(|c| c.get(name)).try_fold(0u64, |sum, v| v.map(|v| sum.wrapping_add(v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_reads_the_sum_of_its_shards() {
        let parts: Vec<_> = (0..3).map(|_| std::sync::Arc::new(Counters::default())).collect();
        parts[0].sent_pkts.fetch_add(5, Ordering::Relaxed);
        parts[2].sent_pkts.fetch_add(7, Ordering::Relaxed);
        parts[1].icrc_err.fetch_add(1, Ordering::Relaxed);
        let d = DeviceCounters::new(parts.clone());
        assert_eq!((d.get("sent_pkts"), d.get("icrc_err"), d.get("rcvd_pkts")), (Some(12), Some(1), Some(0)));
        assert_eq!(d.get("no_such_counter"), None);
        let snap = d.snapshot();
        assert_eq!(snap.len(), parts[0].snapshot().len());
        assert!(snap.contains(&("sent_pkts", 12)) && snap.contains(&("icrc_err", 1)));
        parts[1].sent_pkts.fetch_add(1, Ordering::Relaxed);
        assert_eq!(d.clone().get("sent_pkts"), Some(13), "a clone reads the live sets");
        assert_eq!(std::mem::align_of::<Counters>(), 64);
    }
}
