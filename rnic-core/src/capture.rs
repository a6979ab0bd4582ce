//! Packet capture: every packet a device sends or receives, as a full Ethernet frame in a
//! classic pcap file that Wireshark decodes and `shared/vectors/check_pcap.sh` accepts.
//!
//! A UDP socket never shows the real Ethernet and IP headers, so they are rebuilt:
//! locally administered MACs derived from the IP addresses, IPv4 with ID 0 and DF (what
//! the rnic UDP transport sends, so the ICRC in the file checks out), TTL 64, UDP
//! checksum 0 as rxe sends it.

use parking_lot::{Mutex, MutexGuard};
use rnic_wire::ethernet::{EthernetRepr, MacAddr};
use rnic_wire::frame::IpRepr;
use rnic_wire::ipv4::{self, Ipv4Repr};
use rnic_wire::ipv6::Ipv6Repr;
use rnic_wire::udp;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A pcap file being written; shareable between threads.
pub struct Capture {
    w: Mutex<BufWriter<File>>,
    /// Devices of this process writing here: a packet between two of them is recorded
    /// once, when sent.
    locals: Mutex<Vec<IpAddr>>,
}

static SHARED: Mutex<Vec<(PathBuf, Weak<Capture>)>> = Mutex::new(Vec::new());

/// Classic pcap global header: magic (microsecond timestamps), version 2.4, zone 0,
/// sigfigs 0, snaplen 65535, linktype 1 (Ethernet). Little-endian, as written here.
fn pcap_header() -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    h[16..20].copy_from_slice(&65535u32.to_le_bytes());
    h[20..24].copy_from_slice(&1u32.to_le_bytes());
    h
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Capture")
    }
}

/// The MAC rnic shows for an address: locally administered, unicast, from the IP.
pub fn mac_for(ip: IpAddr) -> MacAddr {
    let o = match ip {
        IpAddr::V4(a) => {
            let b = a.octets();
            [0x02, 0x52, b[0], b[1], b[2], b[3]]
        }
        IpAddr::V6(a) => {
            let b = a.octets();
            [0x02, 0x52, b[12], b[13], b[14], b[15]]
        }
    };
    MacAddr(o)
}

impl Capture {
    /// Creates (truncates) `path` and writes the pcap header (linktype Ethernet).
    pub fn create(path: &Path) -> io::Result<Capture> {
        let mut w = BufWriter::new(File::create(path)?);
        w.write_all(&pcap_header())?;
        Ok(Capture { w: Mutex::new(w), locals: Mutex::new(Vec::new()) })
    }

    /// The process-wide capture writing `path`, created on first use; `local` is the
    /// address of the device that will write to it.
    pub fn shared(path: &Path, local: IpAddr) -> io::Result<Arc<Capture>> {
        let mut all = SHARED.lock();
        all.retain(|(_, w)| w.strong_count() > 0);
        let c = match all.iter().find(|(p, _)| p == path).and_then(|(_, w)| w.upgrade()) {
            Some(c) => c,
            None => {
                let c = Arc::new(Capture::create(path)?);
                all.push((path.to_path_buf(), Arc::downgrade(&c)));
                c
            }
        };
        c.locals.lock().push(local);
        Ok(c)
    }

    /// Records a received packet, unless a device of this capture sent it (and so
    /// recorded it already).
    pub fn record_rx(&self, src: IpAddr, dst: IpAddr, src_port: u16, dst_port: u16, roce: &[u8]) {
        if self.locals.lock().contains(&src) {
            return;
        }
        self.record(src, dst, src_port, dst_port, roce);
    }

    /// Records a received IPv4 packet with the IP ID it was accepted with (see
    /// [`crate::rx_icrc`]), so the ICRC in the file checks out for peers such as rxe.
    pub fn record_rx_ipv4_id(&self, src: IpAddr, dst: IpAddr, ports: (u16, u16), ident: u16, roce: &[u8]) {
        if self.locals.lock().contains(&src) {
            return;
        }
        self.write_frame(&frame_with_ipv4_id(src, dst, ports.0, ports.1, ident, roce));
    }

    /// Records a sent IPv4 packet whose header carries ID `ident` (segment `ident` of a
    /// UDP GSO send: the ICRC covers the ID, so the capture shows the one used).
    pub fn record_ipv4_id(&self, src: IpAddr, dst: IpAddr, ports: (u16, u16), ident: u16, roce: &[u8]) {
        self.write_frame(&frame_with_ipv4_id(src, dst, ports.0, ports.1, ident, roce));
    }

    /// Records one packet: `roce` is BTH..ICRC exactly as sent or received.
    pub fn record(&self, src: IpAddr, dst: IpAddr, src_port: u16, dst_port: u16, roce: &[u8]) {
        self.write_frame(&frame_for(src, dst, src_port, dst_port, roce));
    }

    /// Records a whole Ethernet frame as it went on or came off the wire (the
    /// raw-Ethernet transport's, every header its own).
    pub fn record_frame(&self, frame: &[u8]) {
        self.write_frame(frame);
    }

    fn write_frame(&self, frame: &[u8]) {
        let mut w = self.w.lock();
        write_record(&mut w, now(), frame);
    }

    /// Holds the file for a send: the timestamp is taken now, before the packets go out,
    /// and nothing else enters the file until the holder has recorded what it sent and
    /// let go. A peer's answer, whether this process records it (another device here)
    /// or another process does, is therefore stamped later and, in this file, written
    /// later than the request it answers, while only the packets the kernel took are
    /// recorded, each with the IPv4 ID it went out with.
    pub fn hold(&self) -> Held<'_> {
        let w = self.w.lock();
        Held { ts: now(), w }
    }

    /// Flushes buffered packets to the file.
    pub fn flush(&self) {
        let _ = self.w.lock().flush();
    }
}

/// The capture held for one send (see [`Capture::hold`]).
pub struct Held<'a> {
    w: MutexGuard<'a, BufWriter<File>>,
    ts: Duration,
}

impl std::fmt::Debug for Held<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held").field("ts", &self.ts).finish()
    }
}

impl Held<'_> {
    /// [`Capture::record_ipv4_id`], stamped with the time the capture was held.
    pub fn record_ipv4_id(&mut self, src: IpAddr, dst: IpAddr, ports: (u16, u16), ident: u16, roce: &[u8]) {
        write_record(&mut self.w, self.ts, &frame_with_ipv4_id(src, dst, ports.0, ports.1, ident, roce));
    }
}

fn now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO)
}

/// One pcap record: timestamp, captured and original length, the frame.
fn write_record(w: &mut BufWriter<File>, ts: Duration, frame: &[u8]) {
    let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
    let mut rec = [0u8; 16];
    rec[0..4].copy_from_slice(&u32::try_from(ts.as_secs()).unwrap_or(u32::MAX).to_le_bytes());
    rec[4..8].copy_from_slice(&ts.subsec_micros().to_le_bytes());
    rec[8..12].copy_from_slice(&len.to_le_bytes());
    rec[12..16].copy_from_slice(&len.to_le_bytes());
    let _ = w.write_all(&rec).and_then(|()| w.write_all(frame));
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Wraps BTH..ICRC in Ethernet / IP / UDP headers.
pub fn frame_for(src: IpAddr, dst: IpAddr, src_port: u16, dst_port: u16, roce: &[u8]) -> Vec<u8> {
    frame_with_ipv4_id(src, dst, src_port, dst_port, 0, roce)
}

/// [`frame_for`] with this IPv4 ID (ignored for IPv6).
pub fn frame_with_ipv4_id(src: IpAddr, dst: IpAddr, src_port: u16, dst_port: u16, ident: u16, roce: &[u8]) -> Vec<u8> {
    let ip = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            IpRepr::V4(Ipv4Repr { src: s, dst: d, tos: 0, ident, df: true, ttl: 64, protocol: ipv4::PROTO_UDP })
        }
        (s, d) => {
            let to6 = |a: IpAddr| match a {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            IpRepr::V6(Ipv6Repr {
                src: to6(s),
                dst: to6(d),
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 64,
                next_header: ipv4::PROTO_UDP,
            })
        }
    };
    let eth = EthernetRepr {
        dst: mac_for(dst),
        src: mac_for(src),
        vlan: None,
        ethertype: match ip {
            IpRepr::V4(_) => rnic_wire::ethernet::ETHERTYPE_IPV4,
            IpRepr::V6(_) => rnic_wire::ethernet::ETHERTYPE_IPV6,
        },
    };
    let eh = eth.buffer_len();
    let ih = ip.buffer_len();
    let udp_len = udp::HEADER_LEN + roce.len();
    let mut buf = vec![0u8; eh + ih + udp_len];
    let _ = eth.emit(&mut buf[..eh]);
    let _ = match ip {
        IpRepr::V4(r) => r.emit(&mut buf[eh..eh + ih], udp_len),
        IpRepr::V6(r) => r.emit(&mut buf[eh..eh + ih], udp_len),
    };
    let u = udp::UdpRepr { src_port, dst_port, checksum: udp::UdpChecksum::Zero };
    let _ = u.emit(&mut buf[eh + ih..eh + ih + udp::HEADER_LEN], roce.len());
    buf[eh + ih + udp::HEADER_LEN..].copy_from_slice(roce);
    buf
}
