//! Capture files: reading pcap and pcapng, and peeling each link type down to the
//! Ethernet frame or IP packet that `rnic_wire::frame` parses.
//!
//! Reading streams the file through `pcap-file`'s readers, so a capture of any size
//! (or a pipe) decodes in constant memory. Only the raw record APIs are used: the
//! validated `PcapPacket` refuses `orig_len > snaplen`, which real captures taken with
//! a short snap length contain, and timestamps are not needed here.
//!
//! The link-layer half ([`LinkType`], [`network_layer`]) does no I/O, so a capture
//! writer can share it.

use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, PcapError};
use std::borrow::Cow;
use std::fmt;
use std::io::{self, Chain, Cursor, Read};

/// EtherType of IPv4.
const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
const ETHERTYPE_IPV6: u16 = 0x86DD;
/// EtherType (TPID) of an 802.1Q VLAN tag.
const ETHERTYPE_VLAN: u16 = 0x8100;

/// Length of a Linux cooked capture (v1) header; the protocol is its last two bytes.
pub const SLL_HEADER_LEN: usize = 16;
/// Length of a Linux cooked capture v2 header; the protocol is its first two bytes.
pub const SLL2_HEADER_LEN: usize = 20;

/// A link-layer header type (<https://www.tcpdump.org/linktypes.html>).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkType {
    /// `LINKTYPE_ETHERNET` (1): Ethernet II, optionally 802.1Q-tagged, no FCS.
    Ethernet,
    /// `LINKTYPE_RAW` (101): a bare IPv4 or IPv6 packet.
    RawIp,
    /// `LINKTYPE_LINUX_SLL` (113): Linux cooked capture, as `tcpdump -i any` writes.
    LinuxSll,
    /// `LINKTYPE_IPV4` (228): a bare IPv4 packet.
    Ipv4,
    /// `LINKTYPE_IPV6` (229): a bare IPv6 packet.
    Ipv6,
    /// `LINKTYPE_LINUX_SLL2` (276): Linux cooked capture v2.
    LinuxSll2,
    /// Any other link type, by number. Frames of this type cannot be decoded.
    Other(u32),
}

impl LinkType {
    /// The link type with this `LINKTYPE_` number.
    pub const fn from_number(n: u32) -> LinkType {
        match n {
            1 => LinkType::Ethernet,
            101 => LinkType::RawIp,
            113 => LinkType::LinuxSll,
            228 => LinkType::Ipv4,
            229 => LinkType::Ipv6,
            276 => LinkType::LinuxSll2,
            other => LinkType::Other(other),
        }
    }

    /// The `LINKTYPE_` number.
    pub const fn number(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::RawIp => 101,
            LinkType::LinuxSll => 113,
            LinkType::Ipv4 => 228,
            LinkType::Ipv6 => 229,
            LinkType::LinuxSll2 => 276,
            LinkType::Other(n) => n,
        }
    }

    /// True if [`network_layer`] can peel this link type.
    pub const fn is_supported(self) -> bool {
        !matches!(self, LinkType::Other(_))
    }
}

impl From<DataLink> for LinkType {
    fn from(d: DataLink) -> LinkType {
        LinkType::from_number(u32::from(d))
    }
}

/// What a frame carries once its link-layer header is peeled off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network<'a> {
    /// An Ethernet frame (for `rnic_wire::frame::parse_ethernet`).
    Ethernet(&'a [u8]),
    /// An IPv4 or IPv6 packet (for `rnic_wire::frame::parse_ip`).
    Ip(&'a [u8]),
    /// A protocol other than IP (the EtherType found).
    NotIp(u16),
    /// The frame is shorter than its link-layer header.
    Truncated,
    /// The link type is not one this module knows.
    Unsupported(LinkType),
}

/// The big-endian `u16` at `at`, if the buffer holds it.
pub fn be16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at + 2)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

/// What follows a header whose payload type is `ethertype` and whose payload starts at
/// `start`, after any 802.1Q tags.
fn by_ethertype(data: &[u8], ethertype: u16, start: usize) -> Network<'_> {
    let (mut ethertype, mut start) = (ethertype, start);
    // Linux normally moves a cooked capture's tag into metadata, but AF_PACKET can hand
    // it over inline.
    while ethertype == ETHERTYPE_VLAN {
        match be16(data, start + 2) {
            Some(t) => (ethertype, start) = (t, start + 4),
            None => return Network::Truncated,
        }
    }
    match (ethertype, data.get(start..)) {
        (ETHERTYPE_IPV4 | ETHERTYPE_IPV6, Some(ip)) => Network::Ip(ip),
        (ETHERTYPE_IPV4 | ETHERTYPE_IPV6, None) => Network::Truncated,
        (other, _) => Network::NotIp(other),
    }
}

/// The IP packet inside an Ethernet frame (802.1Q tags skipped), without validating it.
pub fn ethernet_payload(frame: &[u8]) -> Network<'_> {
    match be16(frame, 12) {
        Some(ethertype) => by_ethertype(frame, ethertype, 14),
        None => Network::Truncated,
    }
}

/// Peels the link-layer header of a frame of type `link`.
pub fn network_layer(link: LinkType, data: &[u8]) -> Network<'_> {
    match link {
        LinkType::Ethernet => Network::Ethernet(data),
        LinkType::RawIp | LinkType::Ipv4 | LinkType::Ipv6 => Network::Ip(data),
        LinkType::LinuxSll => match be16(data, SLL_HEADER_LEN - 2) {
            Some(protocol) => by_ethertype(data, protocol, SLL_HEADER_LEN),
            None => Network::Truncated,
        },
        LinkType::LinuxSll2 => match (be16(data, 0), data.len() >= SLL2_HEADER_LEN) {
            (Some(protocol), true) => by_ethertype(data, protocol, SLL2_HEADER_LEN),
            _ => Network::Truncated,
        },
        LinkType::Other(_) => Network::Unsupported(link),
    }
}

/// The two capture file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Classic libpcap format (any byte order, micro- or nanosecond timestamps).
    Pcap,
    /// pcapng.
    PcapNg,
}

/// Why a capture could not be read.
#[derive(Debug)]
pub enum CaptureError {
    /// The file could not be opened or read.
    Io(io::Error),
    /// The file holds no data at all.
    Empty,
    /// The file does not start with a pcap or pcapng magic number.
    NotACapture {
        /// The first bytes of the file (up to four).
        magic: Vec<u8>,
    },
    /// The file header is damaged.
    BadHeader(String),
    /// A record after the header is damaged or cut short.
    BadRecord {
        /// Packets read successfully before the damaged record.
        after_frame: u64,
        /// What was wrong.
        reason: String,
    },
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureError::Io(e) => write!(f, "{e}"),
            CaptureError::Empty => f.write_str("empty file, not a pcap or pcapng capture"),
            CaptureError::NotACapture { magic } => {
                f.write_str("not a pcap or pcapng file (starts with")?;
                for b in magic {
                    write!(f, " {b:02x}")?;
                }
                f.write_str(")")
            }
            CaptureError::BadHeader(r) => write!(f, "damaged capture file header: {r}"),
            CaptureError::BadRecord { after_frame, reason } => {
                write!(f, "damaged or cut short after frame {after_frame}: {reason}")
            }
        }
    }
}

impl std::error::Error for CaptureError {}

/// Words for a `pcap-file` error, which on its own says only "Need more bytes" or
/// "Error reading bytes".
fn describe(e: &PcapError) -> String {
    match e {
        PcapError::IncompleteBuffer => "the file ends inside a record".to_string(),
        PcapError::IoError(io) if io.kind() == io::ErrorKind::UnexpectedEof => {
            "the file ends inside a record (or a record claims more than 8 MB)".to_string()
        }
        PcapError::IoError(io) => io.to_string(),
        PcapError::InvalidField(what) => (*what).to_string(),
        PcapError::Utf8Error(_) | PcapError::FromUtf8Error(_) => "text option is not UTF-8".to_string(),
        PcapError::InvalidInterfaceId(id) => format!("no interface {id}"),
    }
}

/// One packet record of a capture.
#[derive(Debug, Clone, Copy)]
pub struct CapturedFrame<'a> {
    /// Frame number, from 1, counting packet records only (as Wireshark numbers them).
    pub number: u64,
    /// The link type of the interface it was captured on.
    pub link: LinkType,
    /// The bytes captured (possibly fewer than `orig_len` if the snap length cut it).
    pub data: &'a [u8],
    /// The frame's length on the wire.
    pub orig_len: u32,
    /// When it was captured, nanoseconds since the Unix epoch (as the record says).
    pub time_ns: u64,
}

impl<'a> CapturedFrame<'a> {
    /// The frame with its link-layer header peeled off.
    pub fn network(&self) -> Network<'a> {
        network_layer(self.link, self.data)
    }

    /// True if the snap length cut the frame short.
    pub fn is_snapped(&self) -> bool {
        u64::try_from(self.data.len()).map_or(true, |n| n < u64::from(self.orig_len))
    }
}

/// The bytes already read to identify the format, put back in front of the stream.
type Rewound<R> = Chain<Cursor<Vec<u8>>, R>;

enum Inner<R: Read> {
    Pcap { reader: PcapReader<Rewound<R>>, link: LinkType, nanos: bool },
    PcapNg { reader: PcapNgReader<Rewound<R>>, interfaces: Vec<Interface> },
}

/// What a pcapng interface description says that decoding needs.
#[derive(Debug, Clone, Copy)]
struct Interface {
    link: LinkType,
    snaplen: u32,
}

/// Reads packet records from a pcap or pcapng stream, one at a time.
pub struct CaptureReader<R: Read> {
    inner: Inner<R>,
    frames: u64,
    /// The current pcapng packet, or a pcap record `pcap-file` handed over owned.
    scratch: Vec<u8>,
}

impl<R: Read> fmt::Debug for CaptureReader<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureReader")
            .field("format", &self.format())
            .field("frames", &self.frames)
            .finish_non_exhaustive()
    }
}

/// Reads up to `n` bytes, fewer only at the end of the stream.
fn read_prefix<R: Read>(r: &mut R, n: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(n);
    r.by_ref().take(u64::try_from(n).unwrap_or(u64::MAX)).read_to_end(&mut buf)?;
    Ok(buf)
}

const PCAP_MAGICS: [[u8; 4]; 4] = [
    [0xa1, 0xb2, 0xc3, 0xd4], // microseconds, big-endian
    [0xd4, 0xc3, 0xb2, 0xa1], // microseconds, little-endian
    [0xa1, 0xb2, 0x3c, 0x4d], // nanoseconds, big-endian
    [0x4d, 0x3c, 0xb2, 0xa1], // nanoseconds, little-endian
];
const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

impl<R: Read> CaptureReader<R> {
    /// Reads the file header from `reader` and prepares to read records.
    pub fn new(mut reader: R) -> Result<Self, CaptureError> {
        let magic = read_prefix(&mut reader, 4).map_err(CaptureError::Io)?;
        let format = if magic.is_empty() {
            return Err(CaptureError::Empty);
        } else if magic[..] == PCAPNG_MAGIC {
            Format::PcapNg
        } else if PCAP_MAGICS.iter().any(|m| m[..] == magic[..]) {
            Format::Pcap
        } else {
            return Err(CaptureError::NotACapture { magic });
        };
        let stream = Cursor::new(magic).chain(reader);
        let header_error = |e: PcapError| match e {
            PcapError::IncompleteBuffer => CaptureError::BadHeader("the file ends inside its header".into()),
            PcapError::IoError(io) if io.kind() == io::ErrorKind::UnexpectedEof => {
                CaptureError::BadHeader("the file ends inside its header".into())
            }
            PcapError::IoError(io) => CaptureError::Io(io),
            e => CaptureError::BadHeader(describe(&e)),
        };
        let inner = match format {
            Format::Pcap => {
                let reader = PcapReader::new(stream).map_err(header_error)?;
                let link = LinkType::from(reader.header().datalink);
                let nanos = reader.header().ts_resolution == pcap_file::TsResolution::NanoSecond;
                Inner::Pcap { reader, link, nanos }
            }
            Format::PcapNg => {
                let reader = PcapNgReader::new(stream).map_err(header_error)?;
                Inner::PcapNg { reader, interfaces: Vec::new() }
            }
        };
        Ok(CaptureReader { inner, frames: 0, scratch: Vec::new() })
    }

    /// The file's format.
    pub fn format(&self) -> Format {
        match self.inner {
            Inner::Pcap { .. } => Format::Pcap,
            Inner::PcapNg { .. } => Format::PcapNg,
        }
    }

    /// The link type of a classic pcap file (pcapng declares one per interface).
    pub fn pcap_link_type(&self) -> Option<LinkType> {
        match self.inner {
            Inner::Pcap { link, .. } => Some(link),
            Inner::PcapNg { .. } => None,
        }
    }

    /// The next packet record: `None` at the end of the file. Non-packet pcapng blocks
    /// (statistics, name resolution, ...) are skipped. After an error the stream
    /// cannot continue: stop reading.
    pub fn next_frame(&mut self) -> Option<Result<CapturedFrame<'_>, CaptureError>> {
        let CaptureReader { inner, frames, scratch } = self;
        let after_frame = *frames;
        let bad = |reason: String| Some(Err(CaptureError::BadRecord { after_frame, reason }));
        let (link, data, orig_len, time_ns) = match inner {
            Inner::Pcap { reader, link, nanos } => match reader.next_raw_packet()? {
                Ok(p) => {
                    let frac = u64::from(p.ts_frac) * if *nanos { 1 } else { 1000 };
                    let time_ns = u64::from(p.ts_sec) * 1_000_000_000 + frac;
                    let data: &[u8] = match p.data {
                        Cow::Borrowed(b) => b,
                        Cow::Owned(v) => {
                            *scratch = v;
                            scratch.as_slice()
                        }
                    };
                    (*link, data, p.orig_len, time_ns)
                }
                Err(e) => return bad(describe(&e)),
            },
            // pcapng interleaves packets with other blocks; returning a borrow from a
            // loop that also skips blocks is beyond the borrow checker, so the packet
            // is copied out (a memcpy per frame, nothing next to decoding it).
            Inner::PcapNg { reader, interfaces } => loop {
                let block = match reader.next_block()? {
                    Ok(b) => b,
                    Err(e) => return bad(describe(&e)),
                };
                let (id, data, orig_len, time_ns) = match &block {
                    Block::SectionHeader(_) => {
                        // A new section starts a new interface list.
                        interfaces.clear();
                        continue;
                    }
                    Block::InterfaceDescription(idb) => {
                        interfaces.push(Interface { link: idb.linktype.into(), snaplen: idb.snaplen });
                        continue;
                    }
                    Block::EnhancedPacket(epb) => {
                        let t = u64::try_from(epb.timestamp.as_nanos()).unwrap_or(u64::MAX);
                        (epb.interface_id, &epb.data[..], epb.original_len, t)
                    }
                    Block::Packet(pb) => {
                        // The obsolete packet block: microseconds, the default resolution.
                        let t = pb.timestamp.saturating_mul(1000);
                        (u32::from(pb.interface_id), &pb.data[..], pb.original_len, t)
                    }
                    Block::SimplePacket(spb) => {
                        // An SPB's data includes its padding; the real length is the
                        // original length capped at interface 0's snap length.
                        let Some(ifc) = interfaces.first() else {
                            return bad("simple packet block before any interface description".into());
                        };
                        let mut keep = usize::try_from(spb.original_len).unwrap_or(usize::MAX);
                        if ifc.snaplen != 0 {
                            keep = keep.min(usize::try_from(ifc.snaplen).unwrap_or(usize::MAX));
                        }
                        // A simple packet block has no timestamp.
                        (0, &spb.data[..keep.min(spb.data.len())], spb.original_len, 0)
                    }
                    _ => continue,
                };
                let Some(ifc) = usize::try_from(id).ok().and_then(|i| interfaces.get(i)) else {
                    let declared = interfaces.len();
                    return bad(format!("packet on interface {id}, but {declared} interface(s) declared"));
                };
                scratch.clear();
                scratch.extend_from_slice(data);
                break (ifc.link, scratch.as_slice(), orig_len, time_ns);
            },
        };
        *frames += 1;
        Some(Ok(CapturedFrame { number: *frames, link, data, orig_len, time_ns }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_type_numbers_roundtrip() {
        for n in [0, 1, 101, 113, 228, 229, 276, 12345] {
            assert_eq!(LinkType::from_number(n).number(), n);
            assert_eq!(LinkType::from(DataLink::from(n)), LinkType::from_number(n));
        }
        assert!(!LinkType::from_number(0).is_supported());
        assert!(LinkType::LinuxSll2.is_supported());
    }

    #[test]
    fn cooked_headers_peel_to_ip() {
        let ip = [0x45u8, 0, 0, 20];
        let mut sll = vec![0u8; SLL_HEADER_LEN];
        sll[14..16].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        sll.extend_from_slice(&ip);
        assert_eq!(network_layer(LinkType::LinuxSll, &sll), Network::Ip(&ip[..]));

        let mut sll2 = vec![0u8; SLL2_HEADER_LEN];
        sll2[0..2].copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
        sll2.extend_from_slice(&[0x60, 0x05, 0x86, 0xdd]);
        sll2.extend_from_slice(&ip);
        assert_eq!(network_layer(LinkType::LinuxSll2, &sll2), Network::Ip(&ip[..]));

        sll[14..16].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(network_layer(LinkType::LinuxSll, &sll), Network::NotIp(0x0806));
    }

    #[test]
    fn short_frames_never_panic() {
        let frame = [
            0x81u8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x81, 0x00, 0x00,
            0x00, 0x81, 0x00, 0x00,
        ];
        for link in [LinkType::LinuxSll, LinkType::LinuxSll2, LinkType::Ethernet, LinkType::RawIp] {
            for n in 0..=frame.len() {
                let _ = network_layer(link, &frame[..n]);
            }
        }
        assert_eq!(network_layer(LinkType::LinuxSll, &frame[..10]), Network::Truncated);
        assert_eq!(network_layer(LinkType::Other(0), &frame), Network::Unsupported(LinkType::Other(0)));
    }

    #[test]
    fn format_detection() {
        assert!(matches!(CaptureReader::new(&[][..]), Err(CaptureError::Empty)));
        assert!(matches!(CaptureReader::new(&b"GIF8"[..]), Err(CaptureError::NotACapture { .. })));
        assert!(matches!(CaptureReader::new(&[0xd4, 0xc3][..]), Err(CaptureError::NotACapture { .. })));
        assert!(matches!(CaptureReader::new(&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0][..]), Err(CaptureError::BadHeader(_))));
    }
}
