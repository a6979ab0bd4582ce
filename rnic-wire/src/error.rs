use core::fmt;

/// What was wrong with a packet, a header or a buffer.
///
/// Every variant names the thing that failed, so a dropped packet can be counted and
/// logged precisely. Parsing never panics: it returns one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The buffer ended before `what` did.
    Truncated {
        /// The header or region that did not fit.
        what: &'static str,
        /// Bytes it needs.
        need: usize,
        /// Bytes that were there.
        have: usize,
    },
    /// BTH TVer was not 0 (IBA C9-5: packets with another version are dropped).
    BadTver(u8),
    /// The BTH opcode is not one this implementation knows (IBA C9-6: silently dropped).
    UnknownOpcode(u8),
    /// BTH..ICRC is not a multiple of 4 bytes (IBA C9-5: every header and the padded
    /// payload are whole words).
    Unaligned {
        /// Length from the BTH to the end of the ICRC.
        len: usize,
    },
    /// PadCnt claims more pad bytes than the packet has payload.
    PadExceedsPayload {
        /// The PadCnt field.
        pad: u8,
        /// Bytes between the last header and the ICRC.
        available: usize,
    },
    /// An opcode that carries no payload came with payload bytes.
    UnexpectedPayload {
        /// The opcode.
        opcode: u8,
        /// Bytes found between its last header and the ICRC.
        len: usize,
    },
    /// The invariant CRC did not match (IBA C9-3: the packet is dropped).
    BadIcrc {
        /// ICRC computed over the received bytes.
        computed: u32,
        /// ICRC carried by the packet.
        received: u32,
    },
    /// A header representation did not match what its opcode carries (emit side).
    HeaderMismatch {
        /// The opcode.
        opcode: u8,
        /// The header that was missing or extra.
        header: &'static str,
    },
    /// A field held a value that its type cannot carry (emit side, for example a
    /// payload longer than a UDP datagram).
    FieldRange {
        /// The field.
        field: &'static str,
    },
    /// A received field holds a value this implementation does not accept (a MAD of
    /// another class or version).
    BadValue {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// The Ethernet type is neither IPv4, IPv6 nor 802.1Q.
    NotIp {
        /// The EtherType found.
        ethertype: u16,
    },
    /// The IP version nibble was not what the header type expects.
    BadIpVersion(u8),
    /// An IPv4 IHL below 5, or a total/payload length that disagrees with the buffer.
    BadIpLength {
        /// Which length.
        what: &'static str,
        /// The value found.
        value: usize,
    },
    /// The IPv4 header checksum is wrong.
    BadIpChecksum,
    /// A fragment of an IP datagram (RoCEv2 is never fragmented: DF is set).
    Fragmented,
    /// The IP payload is not UDP (the protocol / next header found).
    NotUdp(u8),
    /// A UDP datagram that is not addressed to port 4791.
    NotRoceV2Port(u16),
    /// The UDP length field disagrees with the IP payload.
    BadUdpLength(u16),
    /// A non-zero UDP checksum that does not verify.
    BadUdpChecksum,
}

impl Error {
    /// True when the bytes are simply not a RoCEv2 packet (another EtherType, another
    /// IP protocol or another UDP port), as opposed to a malformed RoCEv2 packet.
    pub fn is_not_roce(&self) -> bool {
        matches!(self, Error::NotIp { .. } | Error::NotUdp(_) | Error::NotRoceV2Port(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Truncated { what, need, have } => {
                write!(f, "truncated {what}: need {need} bytes, have {have}")
            }
            Error::BadTver(v) => write!(f, "BTH TVer is {v}, not 0"),
            Error::UnknownOpcode(op) => write!(f, "unknown BTH opcode 0x{op:02x}"),
            Error::Unaligned { len } => {
                write!(f, "BTH to ICRC is {len} bytes, not a multiple of 4")
            }
            Error::PadExceedsPayload { pad, available } => {
                write!(f, "PadCnt {pad} exceeds the {available} payload bytes present")
            }
            Error::UnexpectedPayload { opcode, len } => {
                write!(f, "opcode 0x{opcode:02x} carries no payload but {len} bytes follow its headers")
            }
            Error::BadIcrc { computed, received } => {
                write!(f, "bad ICRC: packet carries {received:08x}, computed {computed:08x} (CRC-32 values)")
            }
            Error::HeaderMismatch { opcode, header } => {
                write!(f, "opcode 0x{opcode:02x} and the {header} header disagree")
            }
            Error::FieldRange { field } => write!(f, "{field} is out of range for its field"),
            Error::BadValue { field, value } => write!(f, "{field} {value:#x} is not accepted"),
            Error::NotIp { ethertype } => write!(f, "EtherType 0x{ethertype:04x} is not IP"),
            Error::BadIpVersion(v) => write!(f, "IP version {v} not expected here"),
            Error::BadIpLength { what, value } => write!(f, "bad IP {what}: {value}"),
            Error::BadIpChecksum => write!(f, "bad IPv4 header checksum"),
            Error::Fragmented => write!(f, "IP fragment (RoCEv2 is never fragmented)"),
            Error::NotUdp(p) => write!(f, "IP protocol {p} is not UDP"),
            Error::NotRoceV2Port(p) => write!(f, "UDP destination port {p} is not 4791"),
            Error::BadUdpLength(l) => write!(f, "UDP length {l} disagrees with the IP payload"),
            Error::BadUdpChecksum => write!(f, "bad UDP checksum"),
        }
    }
}

impl std::error::Error for Error {}

/// Result with this crate's [`Error`].
pub type Result<T> = core::result::Result<T, Error>;

/// Returns `Err(Truncated)` unless `buf` holds at least `need` bytes.
pub(crate) fn need(what: &'static str, buf: &[u8], need: usize) -> Result<()> {
    if buf.len() < need {
        Err(Error::Truncated { what, need, have: buf.len() })
    } else {
        Ok(())
    }
}
