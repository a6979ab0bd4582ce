//! The one opcode table (after rxe's `rxe_opcode.c`, IBA Table 35 and Annex A17).
//!
//! Every question of the form "does this opcode carry a RETH?", "where does its payload
//! start?", "does it consume a receive WQE?" is a look-up here. The header offsets are
//! computed from the header order by a `const fn`; no offset is typed by hand.

use core::fmt;

/// An extension header that can follow the BTH.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum HeaderKind {
    /// Datagram extended transport header (UD): Q_Key and source QP. 8 bytes.
    Deth,
    /// RDMA extended transport header: VA, R_Key, DMA length. 16 bytes.
    Reth,
    /// Flush extended transport header (IBA 1.5 FLUSH): placement type, selectivity. 4 bytes.
    Feth,
    /// Atomic extended transport header: VA, R_Key, swap/add, compare. 28 bytes.
    AtomicEth,
    /// ACK extended transport header: syndrome and MSN. 4 bytes.
    Aeth,
    /// Atomic ACK extended transport header: original remote data. 8 bytes.
    AtomicAckEth,
    /// Immediate data. 4 bytes.
    ImmDt,
    /// Invalidate extended transport header: the R_Key to invalidate. 4 bytes.
    Ieth,
    /// The 16 reserved bytes of a RoCEv2 congestion notification packet.
    CnpBody,
    /// XRC extended transport header (IBA Annex A14): 8 reserved bits and the 24-bit
    /// number of the XRC SRQ the request is for. 4 bytes, first after the BTH.
    Xrceth,
}

impl HeaderKind {
    /// Number of header kinds, for tables indexed by kind.
    pub const COUNT: usize = 10;

    /// Every kind, in index order.
    pub const ALL: [HeaderKind; Self::COUNT] = [
        HeaderKind::Deth,
        HeaderKind::Reth,
        HeaderKind::Feth,
        HeaderKind::AtomicEth,
        HeaderKind::Aeth,
        HeaderKind::AtomicAckEth,
        HeaderKind::ImmDt,
        HeaderKind::Ieth,
        HeaderKind::CnpBody,
        HeaderKind::Xrceth,
    ];

    /// Length on the wire.
    pub const fn wire_len(self) -> usize {
        match self {
            HeaderKind::Deth => crate::deth::HEADER_LEN,
            HeaderKind::Reth => crate::reth::HEADER_LEN,
            HeaderKind::Feth => crate::small::FETH_LEN,
            HeaderKind::AtomicEth => crate::atomic::ATOMIC_ETH_LEN,
            HeaderKind::Aeth => crate::aeth::HEADER_LEN,
            HeaderKind::AtomicAckEth => crate::atomic::ATOMIC_ACK_ETH_LEN,
            HeaderKind::ImmDt => crate::small::IMMDT_LEN,
            HeaderKind::Ieth => crate::small::IETH_LEN,
            HeaderKind::CnpBody => crate::small::CNP_BODY_LEN,
            HeaderKind::Xrceth => crate::small::XRCETH_LEN,
        }
    }

    /// Index of this kind in [`HeaderKind::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The header's name as the shared test vectors and Wireshark spell it.
    pub const fn name(self) -> &'static str {
        match self {
            HeaderKind::Deth => "DETH",
            HeaderKind::Reth => "RETH",
            HeaderKind::Feth => "FETH",
            HeaderKind::AtomicEth => "AtomicETH",
            HeaderKind::Aeth => "AETH",
            HeaderKind::AtomicAckEth => "AtomicAckETH",
            HeaderKind::ImmDt => "ImmDt",
            HeaderKind::Ieth => "IETH",
            HeaderKind::CnpBody => "CNP",
            HeaderKind::Xrceth => "XRCETH",
        }
    }
}

/// The transport service an opcode belongs to (its top three bits, IBA 9.2.1).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Transport {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
    /// Extended reliable connected (IBA Annex A14): RC's operations, opcodes `0b101xxxxx`,
    /// every request carrying an XRCETH.
    Xrc,
    /// RoCEv2 congestion notification (0x81, Annex A17.9.3).
    Cnp,
}

/// What an opcode does.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Operation {
    /// SEND, consuming a receive WQE at the responder.
    Send,
    /// RDMA WRITE.
    RdmaWrite,
    /// RDMA READ request.
    RdmaReadRequest,
    /// RDMA READ response.
    RdmaReadResponse,
    /// ACKNOWLEDGE (ACK or NAK).
    Acknowledge,
    /// ATOMIC ACKNOWLEDGE.
    AtomicAcknowledge,
    /// COMPARE & SWAP.
    CompareSwap,
    /// FETCH & ADD.
    FetchAdd,
    /// FLUSH (IBA 1.5, persistent memory).
    Flush,
    /// ATOMIC WRITE (IBA 1.5): an 8-byte write performed atomically.
    AtomicWrite,
    /// Congestion notification.
    Cnp,
}

/// Where a packet sits in its message.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// Neither first nor last.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The whole message in one packet.
    Only,
}

impl Position {
    /// True for FIRST and ONLY: the packet starts a message.
    pub const fn starts(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }

    /// True for LAST and ONLY: the packet ends a message.
    pub const fn ends(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// Everything the table knows about one opcode.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct OpcodeInfo {
    /// The opcode byte.
    pub opcode: Opcode,
    /// The name, as the shared test vectors spell it (`RC_SEND_FIRST`).
    pub name: &'static str,
    /// Transport service.
    pub transport: Transport,
    /// What the packet does.
    pub operation: Operation,
    /// First, middle, last or only.
    pub position: Position,
    /// Extension headers after the BTH, in wire order.
    pub headers: &'static [HeaderKind],
    /// Requester-to-responder (true) or responder-to-requester (false).
    pub request: bool,
    /// The packet carries a payload (which may still be zero bytes long).
    pub payload: bool,
    /// The responder takes a receive WQE when this packet arrives: the first packet of a
    /// SEND, and the immediate-carrying packet of an RDMA WRITE with immediate
    /// (rxe `RXE_RWR_MASK`).
    pub consumes_rwqe: bool,
    /// The solicited event bit may be set (last/only of SEND and of WRITE with
    /// immediate, IBA 9.2.3).
    pub se_allowed: bool,
    /// Total length of the extension headers (derived).
    pub ext_len: usize,
    offsets: [u8; HeaderKind::COUNT],
}

const ABSENT: u8 = u8::MAX;

impl OpcodeInfo {
    /// Byte offset of `kind` from the start of the BTH, if this opcode carries it.
    pub fn offset_of(&self, kind: HeaderKind) -> Option<usize> {
        match self.offsets[kind.index()] {
            ABSENT => None,
            off => Some(usize::from(off)),
        }
    }

    /// True if this opcode carries `kind`.
    pub fn has(&self, kind: HeaderKind) -> bool {
        self.offsets[kind.index()] != ABSENT
    }

    /// Offset of the payload from the start of the BTH: BTH plus every extension header.
    pub const fn payload_offset(&self) -> usize {
        crate::bth::HEADER_LEN + self.ext_len
    }

    /// The packet carries immediate data.
    pub fn immediate(&self) -> bool {
        self.has(HeaderKind::ImmDt)
    }

    /// The packet carries an R_Key to invalidate.
    pub fn invalidate(&self) -> bool {
        self.has(HeaderKind::Ieth)
    }
}

/// A BTH opcode byte. Any value can be held; [`Opcode::info`] says whether it is known.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Opcode(pub u8);

macro_rules! opcodes {
    ($($name:ident = $val:expr,)*) => {
        impl Opcode {
            $(
                #[doc = concat!("`", stringify!($name), "` (", stringify!($val), ")")]
                pub const $name: Opcode = Opcode($val);
            )*
        }
    };
}

opcodes! {
    RC_SEND_FIRST = 0x00,
    RC_SEND_MIDDLE = 0x01,
    RC_SEND_LAST = 0x02,
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03,
    RC_SEND_ONLY = 0x04,
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05,
    RC_RDMA_WRITE_FIRST = 0x06,
    RC_RDMA_WRITE_MIDDLE = 0x07,
    RC_RDMA_WRITE_LAST = 0x08,
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09,
    RC_RDMA_WRITE_ONLY = 0x0a,
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0b,
    RC_RDMA_READ_REQUEST = 0x0c,
    RC_RDMA_READ_RESPONSE_FIRST = 0x0d,
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0e,
    RC_RDMA_READ_RESPONSE_LAST = 0x0f,
    RC_RDMA_READ_RESPONSE_ONLY = 0x10,
    RC_ACKNOWLEDGE = 0x11,
    RC_ATOMIC_ACKNOWLEDGE = 0x12,
    RC_COMPARE_SWAP = 0x13,
    RC_FETCH_ADD = 0x14,
    RC_SEND_LAST_WITH_INVALIDATE = 0x16,
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17,
    RC_FLUSH = 0x1c,
    RC_ATOMIC_WRITE = 0x1d,
    UC_SEND_FIRST = 0x20,
    UC_SEND_MIDDLE = 0x21,
    UC_SEND_LAST = 0x22,
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23,
    UC_SEND_ONLY = 0x24,
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25,
    UC_RDMA_WRITE_FIRST = 0x26,
    UC_RDMA_WRITE_MIDDLE = 0x27,
    UC_RDMA_WRITE_LAST = 0x28,
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29,
    UC_RDMA_WRITE_ONLY = 0x2a,
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2b,
    XRC_SEND_FIRST = 0xa0,
    XRC_SEND_MIDDLE = 0xa1,
    XRC_SEND_LAST = 0xa2,
    XRC_SEND_LAST_WITH_IMMEDIATE = 0xa3,
    XRC_SEND_ONLY = 0xa4,
    XRC_SEND_ONLY_WITH_IMMEDIATE = 0xa5,
    XRC_RDMA_WRITE_FIRST = 0xa6,
    XRC_RDMA_WRITE_MIDDLE = 0xa7,
    XRC_RDMA_WRITE_LAST = 0xa8,
    XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0xa9,
    XRC_RDMA_WRITE_ONLY = 0xaa,
    XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0xab,
    XRC_RDMA_READ_REQUEST = 0xac,
    XRC_RDMA_READ_RESPONSE_FIRST = 0xad,
    XRC_RDMA_READ_RESPONSE_MIDDLE = 0xae,
    XRC_RDMA_READ_RESPONSE_LAST = 0xaf,
    XRC_RDMA_READ_RESPONSE_ONLY = 0xb0,
    XRC_ACKNOWLEDGE = 0xb1,
    XRC_ATOMIC_ACKNOWLEDGE = 0xb2,
    XRC_COMPARE_SWAP = 0xb3,
    XRC_FETCH_ADD = 0xb4,
    XRC_SEND_LAST_WITH_INVALIDATE = 0xb6,
    XRC_SEND_ONLY_WITH_INVALIDATE = 0xb7,
    UD_SEND_ONLY = 0x64,
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65,
    CNP = 0x81,
}

impl Opcode {
    /// The table entry, or `None` for an opcode this implementation does not know
    /// (IBA C9-6: such packets are dropped).
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        TABLE[usize::from(self.0)].as_ref()
    }

    /// The name (`RC_SEND_ONLY`), or `"UNKNOWN"`.
    pub fn name(self) -> &'static str {
        self.info().map_or("UNKNOWN", |i| i.name)
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(0x{:02x})", self.name(), self.0)
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Some(i) => f.write_str(i.name),
            None => write!(f, "UNKNOWN(0x{:02x})", self.0),
        }
    }
}

use HeaderKind as H;
use Operation as O;
use Position as P;
use Transport as T;

/// Builds one entry, deriving every offset from the order of `headers`.
const fn entry(
    op: u8,
    name: &'static str,
    transport: Transport,
    operation: Operation,
    position: Position,
    headers: &'static [HeaderKind],
) -> OpcodeInfo {
    let mut offsets = [ABSENT; HeaderKind::COUNT];
    let mut off = crate::bth::HEADER_LEN;
    let mut i = 0;
    while i < headers.len() {
        // Offsets are below 64 (the longest header list is 12 + 28 bytes); the check
        // makes a future table entry that breaks this fail to compile.
        assert!(off < ABSENT as usize);
        #[allow(clippy::cast_possible_truncation)]
        {
            offsets[headers[i].index()] = off as u8;
        }
        off += headers[i].wire_len();
        i += 1;
    }
    let request = !matches!(operation, O::RdmaReadResponse | O::Acknowledge | O::AtomicAcknowledge);
    let payload = matches!(operation, O::Send | O::RdmaWrite | O::RdmaReadResponse | O::AtomicWrite);
    let has_imm = contains(headers, H::ImmDt);
    let consumes_rwqe = match operation {
        O::Send => position.starts(),
        O::RdmaWrite => has_imm,
        _ => false,
    };
    let se_allowed = match operation {
        O::Send => position.ends(),
        O::RdmaWrite => has_imm,
        _ => false,
    };
    OpcodeInfo {
        opcode: Opcode(op),
        name,
        transport,
        operation,
        position,
        headers,
        request,
        payload,
        consumes_rwqe,
        se_allowed,
        ext_len: off - crate::bth::HEADER_LEN,
        offsets,
    }
}

const fn contains(headers: &[HeaderKind], kind: HeaderKind) -> bool {
    let mut i = 0;
    while i < headers.len() {
        if headers[i] as usize == kind as usize {
            return true;
        }
        i += 1;
    }
    false
}

/// The RC and UC SEND/WRITE families share their shape; `base` is 0x00 (RC) or 0x20 (UC).
const fn send_write_family(t: Transport) -> [OpcodeInfo; 12] {
    let (base, n) = match t {
        T::Rc => (0x00u8, RC_NAMES),
        _ => (0x20u8, UC_NAMES),
    };
    [
        entry(base, n[0], t, O::Send, P::First, &[]),
        entry(base + 1, n[1], t, O::Send, P::Middle, &[]),
        entry(base + 2, n[2], t, O::Send, P::Last, &[]),
        entry(base + 3, n[3], t, O::Send, P::Last, &[H::ImmDt]),
        entry(base + 4, n[4], t, O::Send, P::Only, &[]),
        entry(base + 5, n[5], t, O::Send, P::Only, &[H::ImmDt]),
        entry(base + 6, n[6], t, O::RdmaWrite, P::First, &[H::Reth]),
        entry(base + 7, n[7], t, O::RdmaWrite, P::Middle, &[]),
        entry(base + 8, n[8], t, O::RdmaWrite, P::Last, &[]),
        entry(base + 9, n[9], t, O::RdmaWrite, P::Last, &[H::ImmDt]),
        entry(base + 10, n[10], t, O::RdmaWrite, P::Only, &[H::Reth]),
        entry(base + 11, n[11], t, O::RdmaWrite, P::Only, &[H::Reth, H::ImmDt]),
    ]
}

const RC_NAMES: [&str; 12] = [
    "RC_SEND_FIRST",
    "RC_SEND_MIDDLE",
    "RC_SEND_LAST",
    "RC_SEND_LAST_WITH_IMMEDIATE",
    "RC_SEND_ONLY",
    "RC_SEND_ONLY_WITH_IMMEDIATE",
    "RC_RDMA_WRITE_FIRST",
    "RC_RDMA_WRITE_MIDDLE",
    "RC_RDMA_WRITE_LAST",
    "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
    "RC_RDMA_WRITE_ONLY",
    "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
];

const UC_NAMES: [&str; 12] = [
    "UC_SEND_FIRST",
    "UC_SEND_MIDDLE",
    "UC_SEND_LAST",
    "UC_SEND_LAST_WITH_IMMEDIATE",
    "UC_SEND_ONLY",
    "UC_SEND_ONLY_WITH_IMMEDIATE",
    "UC_RDMA_WRITE_FIRST",
    "UC_RDMA_WRITE_MIDDLE",
    "UC_RDMA_WRITE_LAST",
    "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
    "UC_RDMA_WRITE_ONLY",
    "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
];

const OTHERS: [OpcodeInfo; 16] = [
    entry(0x0c, "RC_RDMA_READ_REQUEST", T::Rc, O::RdmaReadRequest, P::Only, &[H::Reth]),
    entry(0x0d, "RC_RDMA_READ_RESPONSE_FIRST", T::Rc, O::RdmaReadResponse, P::First, &[H::Aeth]),
    entry(0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", T::Rc, O::RdmaReadResponse, P::Middle, &[]),
    entry(0x0f, "RC_RDMA_READ_RESPONSE_LAST", T::Rc, O::RdmaReadResponse, P::Last, &[H::Aeth]),
    entry(0x10, "RC_RDMA_READ_RESPONSE_ONLY", T::Rc, O::RdmaReadResponse, P::Only, &[H::Aeth]),
    entry(0x11, "RC_ACKNOWLEDGE", T::Rc, O::Acknowledge, P::Only, &[H::Aeth]),
    entry(0x12, "RC_ATOMIC_ACKNOWLEDGE", T::Rc, O::AtomicAcknowledge, P::Only, &[H::Aeth, H::AtomicAckEth]),
    entry(0x13, "RC_COMPARE_SWAP", T::Rc, O::CompareSwap, P::Only, &[H::AtomicEth]),
    entry(0x14, "RC_FETCH_ADD", T::Rc, O::FetchAdd, P::Only, &[H::AtomicEth]),
    entry(0x16, "RC_SEND_LAST_WITH_INVALIDATE", T::Rc, O::Send, P::Last, &[H::Ieth]),
    entry(0x17, "RC_SEND_ONLY_WITH_INVALIDATE", T::Rc, O::Send, P::Only, &[H::Ieth]),
    // IBA 1.5 / rxe: FLUSH carries FETH then RETH; ATOMIC WRITE a RETH and 8 bytes.
    entry(0x1c, "RC_FLUSH", T::Rc, O::Flush, P::Only, &[H::Feth, H::Reth]),
    entry(0x1d, "RC_ATOMIC_WRITE", T::Rc, O::AtomicWrite, P::Only, &[H::Reth]),
    entry(0x64, "UD_SEND_ONLY", T::Ud, O::Send, P::Only, &[H::Deth]),
    entry(0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", T::Ud, O::Send, P::Only, &[H::Deth, H::ImmDt]),
    entry(0x81, "CNP", T::Cnp, O::Cnp, P::Only, &[H::CnpBody]),
];

/// XRC (IBA Annex A14, Table 35's `101` rows): RC's opcodes with the transport bits
/// `101`. Every request carries an XRCETH right after the BTH, before its RETH,
/// AtomicETH, ImmDt or IETH (IBA Annex A14, and Wireshark's dissector); responses are RC's
/// and carry none.
const XRC: [OpcodeInfo; 23] = {
    use HeaderKind::Xrceth as X;
    [
        entry(0xa0, "XRC_SEND_FIRST", T::Xrc, O::Send, P::First, &[X]),
        entry(0xa1, "XRC_SEND_MIDDLE", T::Xrc, O::Send, P::Middle, &[X]),
        entry(0xa2, "XRC_SEND_LAST", T::Xrc, O::Send, P::Last, &[X]),
        entry(0xa3, "XRC_SEND_LAST_WITH_IMMEDIATE", T::Xrc, O::Send, P::Last, &[X, H::ImmDt]),
        entry(0xa4, "XRC_SEND_ONLY", T::Xrc, O::Send, P::Only, &[X]),
        entry(0xa5, "XRC_SEND_ONLY_WITH_IMMEDIATE", T::Xrc, O::Send, P::Only, &[X, H::ImmDt]),
        entry(0xa6, "XRC_RDMA_WRITE_FIRST", T::Xrc, O::RdmaWrite, P::First, &[X, H::Reth]),
        entry(0xa7, "XRC_RDMA_WRITE_MIDDLE", T::Xrc, O::RdmaWrite, P::Middle, &[X]),
        entry(0xa8, "XRC_RDMA_WRITE_LAST", T::Xrc, O::RdmaWrite, P::Last, &[X]),
        entry(0xa9, "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE", T::Xrc, O::RdmaWrite, P::Last, &[X, H::ImmDt]),
        entry(0xaa, "XRC_RDMA_WRITE_ONLY", T::Xrc, O::RdmaWrite, P::Only, &[X, H::Reth]),
        entry(0xab, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", T::Xrc, O::RdmaWrite, P::Only, &[X, H::Reth, H::ImmDt]),
        entry(0xac, "XRC_RDMA_READ_REQUEST", T::Xrc, O::RdmaReadRequest, P::Only, &[X, H::Reth]),
        entry(0xad, "XRC_RDMA_READ_RESPONSE_FIRST", T::Xrc, O::RdmaReadResponse, P::First, &[H::Aeth]),
        entry(0xae, "XRC_RDMA_READ_RESPONSE_MIDDLE", T::Xrc, O::RdmaReadResponse, P::Middle, &[]),
        entry(0xaf, "XRC_RDMA_READ_RESPONSE_LAST", T::Xrc, O::RdmaReadResponse, P::Last, &[H::Aeth]),
        entry(0xb0, "XRC_RDMA_READ_RESPONSE_ONLY", T::Xrc, O::RdmaReadResponse, P::Only, &[H::Aeth]),
        entry(0xb1, "XRC_ACKNOWLEDGE", T::Xrc, O::Acknowledge, P::Only, &[H::Aeth]),
        entry(0xb2, "XRC_ATOMIC_ACKNOWLEDGE", T::Xrc, O::AtomicAcknowledge, P::Only, &[H::Aeth, H::AtomicAckEth]),
        entry(0xb3, "XRC_COMPARE_SWAP", T::Xrc, O::CompareSwap, P::Only, &[X, H::AtomicEth]),
        entry(0xb4, "XRC_FETCH_ADD", T::Xrc, O::FetchAdd, P::Only, &[X, H::AtomicEth]),
        entry(0xb6, "XRC_SEND_LAST_WITH_INVALIDATE", T::Xrc, O::Send, P::Last, &[X, H::Ieth]),
        entry(0xb7, "XRC_SEND_ONLY_WITH_INVALIDATE", T::Xrc, O::Send, P::Only, &[X, H::Ieth]),
    ]
};

const fn build_table() -> [Option<OpcodeInfo>; 256] {
    let mut t = [None; 256];
    let rc = send_write_family(T::Rc);
    let uc = send_write_family(T::Uc);
    let mut i = 0;
    while i < rc.len() {
        t[rc[i].opcode.0 as usize] = Some(rc[i]);
        t[uc[i].opcode.0 as usize] = Some(uc[i]);
        i += 1;
    }
    i = 0;
    while i < OTHERS.len() {
        t[OTHERS[i].opcode.0 as usize] = Some(OTHERS[i]);
        i += 1;
    }
    i = 0;
    while i < XRC.len() {
        t[XRC[i].opcode.0 as usize] = Some(XRC[i]);
        i += 1;
    }
    t
}

static TABLE: [Option<OpcodeInfo>; 256] = build_table();

/// What the last packet of a SEND or RDMA WRITE message carries besides its data: the
/// part of an opcode's name after `LAST` / `ONLY`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Suffix {
    /// Plain (`SEND_LAST`, `RDMA_WRITE_ONLY`, and every opcode that has no variants).
    None,
    /// `..._WITH_IMMEDIATE` (an ImmDt header).
    Immediate,
    /// `..._WITH_INVALIDATE` (an IETH header).
    Invalidate,
}

impl Suffix {
    const COUNT: usize = 3;

    const fn of(headers: &[HeaderKind]) -> Suffix {
        if contains(headers, H::ImmDt) {
            Suffix::Immediate
        } else if contains(headers, H::Ieth) {
            Suffix::Invalidate
        } else {
            Suffix::None
        }
    }
}

const N_TRANSPORT: usize = 5;
const N_OPERATION: usize = 11;
const N_POSITION: usize = 4;
// A new operation or transport must grow the composition table with it.
const _: () = assert!(Operation::Cnp as usize + 1 == N_OPERATION && Transport::Cnp as usize + 1 == N_TRANSPORT);
const N_COMPOSE: usize = N_TRANSPORT * N_OPERATION * N_POSITION * Suffix::COUNT;

const fn compose_index(t: Transport, o: Operation, p: Position, s: Suffix) -> usize {
    ((t as usize * N_OPERATION + o as usize) * N_POSITION + p as usize) * Suffix::COUNT + s as usize
}

/// The opcode table read the other way: (transport, operation, position, suffix) to the
/// opcode, derived from the same entries (no opcode is composed by hand).
const fn build_compose() -> [Option<Opcode>; N_COMPOSE] {
    let mut c = [None; N_COMPOSE];
    let mut i = 0;
    while i < TABLE_CONST.len() {
        if let Some(e) = &TABLE_CONST[i] {
            c[compose_index(e.transport, e.operation, e.position, Suffix::of(e.headers))] = Some(e.opcode);
        }
        i += 1;
    }
    c
}

const TABLE_CONST: [Option<OpcodeInfo>; 256] = build_table();
static COMPOSE: [Option<Opcode>; N_COMPOSE] = build_compose();

impl Opcode {
    /// The opcode of a packet of `transport` doing `operation` at `position` in its
    /// message, whose last packet carries `suffix` (ignored for FIRST and MIDDLE, which
    /// never carry one): `compose(Uc, Send, Last, Immediate)` is `UC_SEND_LAST_WITH_IMMEDIATE`.
    /// `None` for a combination the table does not have (a UC READ, a UD WRITE, a MIDDLE
    /// READ request). One look-up, for the requester and the responders alike.
    pub fn compose(transport: Transport, operation: Operation, position: Position, suffix: Suffix) -> Option<Opcode> {
        let suffix = if position.ends() { suffix } else { Suffix::None };
        COMPOSE[compose_index(transport, operation, position, suffix)]
    }
}

/// Every known opcode's entry, in opcode order.
pub fn all() -> impl Iterator<Item = &'static OpcodeInfo> {
    TABLE.iter().filter_map(Option::as_ref)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table's invariants, checked over every entry rather than trusted.
    #[test]
    fn compose_reads_the_table_backwards() {
        // Every entry is found from its own description.
        for info in all() {
            let got = Opcode::compose(info.transport, info.operation, info.position, Suffix::of(info.headers));
            assert_eq!(got, Some(info.opcode), "{}", info.name);
        }
        // UC's SEND and WRITE opcodes are RC's with the transport bits 001 (IBA 9.2.2).
        use Position::*;
        for op in [Operation::Send, Operation::RdmaWrite] {
            for pos in [First, Middle, Last, Only] {
                for suf in [Suffix::None, Suffix::Immediate] {
                    let rc = Opcode::compose(Transport::Rc, op, pos, suf).unwrap();
                    assert_eq!(Opcode::compose(Transport::Uc, op, pos, suf), Some(Opcode(rc.0 | 0x20)));
                }
            }
        }
        // FIRST and MIDDLE carry no suffix, whatever the message's last packet carries.
        assert_eq!(
            Opcode::compose(Transport::Rc, Operation::Send, First, Suffix::Invalidate),
            Some(Opcode::RC_SEND_FIRST)
        );
        assert_eq!(
            Opcode::compose(Transport::Rc, Operation::Send, Last, Suffix::Invalidate),
            Some(Opcode::RC_SEND_LAST_WITH_INVALIDATE)
        );
        assert_eq!(
            Opcode::compose(Transport::Ud, Operation::Send, Only, Suffix::Immediate),
            Some(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE)
        );
        assert_eq!(
            Opcode::compose(Transport::Rc, Operation::RdmaReadResponse, Middle, Suffix::None),
            Some(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE)
        );
        // What the table does not have.
        assert_eq!(Opcode::compose(Transport::Uc, Operation::RdmaReadRequest, Only, Suffix::None), None);
        assert_eq!(Opcode::compose(Transport::Uc, Operation::Send, Last, Suffix::Invalidate), None);
        assert_eq!(Opcode::compose(Transport::Ud, Operation::Send, First, Suffix::None), None);
        assert_eq!(Opcode::compose(Transport::Ud, Operation::RdmaWrite, Only, Suffix::None), None);
        assert_eq!(Opcode::compose(Transport::Rc, Operation::CompareSwap, Middle, Suffix::None), None);
    }

    #[test]
    fn table_invariants() {
        let mut n = 0;
        for info in all() {
            n += 1;
            let op = info.opcode.0;
            assert_eq!(Opcode(op).info(), Some(info));
            // The name says the transport and the transport the top three bits.
            let prefix = match info.transport {
                Transport::Rc => "RC_",
                Transport::Uc => "UC_",
                Transport::Ud => "UD_",
                Transport::Xrc => "XRC_",
                Transport::Cnp => "CNP",
            };
            assert!(info.name.starts_with(prefix), "{}", info.name);
            let top = op >> 5;
            let want_top = match info.transport {
                Transport::Rc => 0,
                Transport::Uc => 1,
                Transport::Ud => 3,
                Transport::Xrc => 5,
                Transport::Cnp => 4,
            };
            assert_eq!(top, want_top, "{}", info.name);
            // Offsets are contiguous in header order and sum to ext_len.
            let mut off = crate::bth::HEADER_LEN;
            for &h in info.headers {
                assert_eq!(info.offset_of(h), Some(off), "{} {:?}", info.name, h);
                off += h.wire_len();
            }
            assert_eq!(off, info.payload_offset());
            for k in HeaderKind::ALL {
                assert_eq!(info.has(k), info.headers.contains(&k));
            }
            // Names agree with the flags.
            assert_eq!(info.immediate(), info.name.contains("IMMEDIATE"), "{}", info.name);
            assert_eq!(info.invalidate(), info.name.contains("INVALIDATE"), "{}", info.name);
            let pos = match info.position {
                Position::First => "FIRST",
                Position::Middle => "MIDDLE",
                Position::Last => "LAST",
                Position::Only => "ONLY",
            };
            if !matches!(
                info.operation,
                Operation::RdmaReadRequest
                    | Operation::Acknowledge
                    | Operation::AtomicAcknowledge
                    | Operation::CompareSwap
                    | Operation::FetchAdd
                    | Operation::Flush
                    | Operation::AtomicWrite
                    | Operation::Cnp
            ) {
                assert!(info.name.contains(pos), "{} {:?}", info.name, info.position);
            }
            // IBA: a RETH appears exactly on the packet that starts an RDMA operation.
            let reth_expected = matches!(
                info.operation,
                Operation::RdmaWrite | Operation::RdmaReadRequest | Operation::Flush | Operation::AtomicWrite
            ) && info.position.starts();
            assert_eq!(info.has(HeaderKind::Reth), reth_expected, "{}", info.name);
            // An AETH on every RC response except READ RESPONSE MIDDLE (IBA 9.4.5).
            let aeth_expected = !info.request && info.position != Position::Middle;
            assert_eq!(info.has(HeaderKind::Aeth), aeth_expected, "{}", info.name);
            // Only UD carries a DETH, and every UD opcode does.
            assert_eq!(info.has(HeaderKind::Deth), info.transport == Transport::Ud);
            // An XRCETH on every XRC request, first after the BTH, and nowhere else
            // (IBA Annex A14).
            let xrc_request = info.transport == Transport::Xrc && info.request;
            assert_eq!(info.has(HeaderKind::Xrceth), xrc_request, "{}", info.name);
            if xrc_request {
                assert_eq!(info.offset_of(HeaderKind::Xrceth), Some(12), "{}", info.name);
            }
            // XRC is RC with the transport bits 101: the same operation at the same
            // position, the XRCETH aside (IBA Annex A14).
            if info.transport == Transport::Xrc {
                let rc = Opcode(op & 0x1f).info().unwrap();
                assert_eq!((rc.operation, rc.position, rc.request), (info.operation, info.position, info.request));
                let rest: Vec<_> = info.headers.iter().filter(|&&h| h != HeaderKind::Xrceth).collect();
                assert_eq!(rest, rc.headers.iter().collect::<Vec<_>>(), "{}", info.name);
            }
            // UC has no responses; UD has only ONLY packets.
            if !matches!(info.transport, Transport::Rc | Transport::Xrc) {
                assert!(info.request);
            }
            if info.transport == Transport::Ud {
                assert_eq!(info.position, Position::Only);
            }
            // Receive WQEs are consumed only by requests that start a SEND, or carry
            // an immediate into a WRITE.
            if info.consumes_rwqe {
                assert!(info.request);
                assert!(matches!(info.operation, Operation::Send | Operation::RdmaWrite));
            }
            if info.immediate() {
                assert!(info.consumes_rwqe || info.operation == Operation::Send);
            }
            assert_eq!(info.payload_offset() % 4, 0);
        }
        // 12 RC send/write + 12 UC + 16 others + 23 XRC.
        assert_eq!(n, 63);
    }

    #[test]
    fn known_offsets() {
        let w = Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert_eq!(w.offset_of(HeaderKind::Reth), Some(12));
        assert_eq!(w.offset_of(HeaderKind::ImmDt), Some(28));
        assert_eq!(w.payload_offset(), 32);
        let a = Opcode::RC_ATOMIC_ACKNOWLEDGE.info().unwrap();
        assert_eq!(a.offset_of(HeaderKind::AtomicAckEth), Some(16));
        let f = Opcode::RC_FLUSH.info().unwrap();
        assert_eq!(f.offset_of(HeaderKind::Reth), Some(16));
        assert!(!f.payload);
        let cnp = Opcode::CNP.info().unwrap();
        assert_eq!(cnp.payload_offset(), 28);
        let x = Opcode::XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert_eq!(x.offset_of(HeaderKind::Xrceth), Some(12));
        assert_eq!(x.offset_of(HeaderKind::Reth), Some(16));
        assert_eq!(x.offset_of(HeaderKind::ImmDt), Some(32));
        assert_eq!(x.payload_offset(), 36);
        let x = Opcode::XRC_FETCH_ADD.info().unwrap();
        assert_eq!(x.offset_of(HeaderKind::AtomicEth), Some(16));
        assert_eq!(Opcode::XRC_ACKNOWLEDGE.info().unwrap().payload_offset(), 16);
        assert_eq!(Opcode(0x15).info(), None);
        assert_eq!(Opcode(0xb5).info(), None);
        assert_eq!(Opcode(0xff).name(), "UNKNOWN");
    }
}
