//! ACK extended transport header (IBA 9.3.5, 4 bytes): syndrome and MSN.
//!
//! ```text
//! syndrome bit 7: reserved (0)
//!          bits 6..5: 00 ACK, 01 RNR NAK, 10 reserved, 11 NAK
//!          bits 4..0: credit count (ACK), RNR timer code (RNR NAK), NAK code (NAK)
//! then a 24-bit MSN
//! ```

use crate::field::{fixed_view, set_u24, u24_at};
use core::fmt;

/// Length of the AETH.
pub const HEADER_LEN: usize = 4;

/// The credit count value that means "no credit information" (IBA 9.7.7.2: invalid
/// credit count, which rxe sends on every ACK: syndrome 0x1f).
pub const CREDITS_INVALID: u8 = 31;

fixed_view!(
    /// A view of an AETH.
    Packet,
    HEADER_LEN,
    "AETH"
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The raw syndrome byte.
    pub fn syndrome(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    /// Message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        u24_at(self.buffer.as_ref(), 1)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the raw syndrome byte.
    pub fn set_syndrome(&mut self, v: u8) {
        self.buffer.as_mut()[0] = v;
    }
    /// Sets the MSN (low 24 bits).
    pub fn set_msn(&mut self, v: u32) {
        set_u24(self.buffer.as_mut(), 1, v & 0x00FF_FFFF);
    }
}

/// NAK codes (IBA Table 44).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum NakCode {
    /// PSN sequence error: the responder expected an earlier PSN.
    PsnSequenceError,
    /// Invalid request: bad opcode sequence, unsupported operation, length error.
    InvalidRequest,
    /// Remote access error: R_Key, PD, access rights or bounds violation.
    RemoteAccessError,
    /// Remote operational error: the responder could not complete the request.
    RemoteOperationalError,
    /// Invalid RD request (reliable datagram only).
    InvalidRdRequest,
    /// A code IBA reserves (5..31).
    Reserved(u8),
}

impl NakCode {
    /// From the low five bits of the syndrome.
    pub const fn from_code(c: u8) -> NakCode {
        match c & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            other => NakCode::Reserved(other),
        }
    }
    /// The five-bit code.
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1f,
        }
    }
    /// The name, as the shared vectors spell it.
    pub const fn name(self) -> &'static str {
        match self {
            NakCode::PsnSequenceError => "PSN_SEQUENCE_ERROR",
            NakCode::InvalidRequest => "INVALID_REQUEST",
            NakCode::RemoteAccessError => "REMOTE_ACCESS_ERROR",
            NakCode::RemoteOperationalError => "REMOTE_OPERATIONAL_ERROR",
            NakCode::InvalidRdRequest => "INVALID_RD_REQUEST",
            NakCode::Reserved(_) => "RESERVED",
        }
    }
}

/// The meaning of an AETH syndrome.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Syndrome {
    /// Positive acknowledgement with a credit count (31 = invalid / not limited).
    Ack {
        /// End-to-end credit count code (IBA Table 43), 0..=31.
        credits: u8,
    },
    /// Receiver not ready: retry after the time the timer code stands for (IBA Table 45).
    RnrNak {
        /// RNR timer code, 0..=31.
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// A syndrome with bit 7 set or the reserved type 10: kept raw.
    Reserved(u8),
}

impl Syndrome {
    /// Decodes a syndrome byte. Every byte decodes to something.
    pub const fn from_byte(b: u8) -> Syndrome {
        if b & 0x80 != 0 {
            return Syndrome::Reserved(b);
        }
        let v = b & 0x1f;
        match (b >> 5) & 3 {
            0 => Syndrome::Ack { credits: v },
            1 => Syndrome::RnrNak { timer: v },
            3 => Syndrome::Nak(NakCode::from_code(v)),
            _ => Syndrome::Reserved(b),
        }
    }
    /// Encodes to a syndrome byte.
    pub const fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(c) => 0x60 | c.code(),
            Syndrome::Reserved(b) => b,
        }
    }
    /// `"ACK"`, `"RNR_NAK"`, `"NAK"` or `"RESERVED"`.
    pub const fn type_name(self) -> &'static str {
        match self {
            Syndrome::Ack { .. } => "ACK",
            Syndrome::RnrNak { .. } => "RNR_NAK",
            Syndrome::Nak(_) => "NAK",
            Syndrome::Reserved(_) => "RESERVED",
        }
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Syndrome::Ack { credits } => write!(f, "ACK credits={credits}"),
            Syndrome::RnrNak { timer } => write!(f, "RNR_NAK timer={timer}"),
            Syndrome::Nak(c) => write!(f, "NAK {}", c.name()),
            Syndrome::Reserved(b) => write!(f, "RESERVED(0x{b:02x})"),
        }
    }
}

/// An AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AethRepr {
    /// What the acknowledgement says.
    pub syndrome: Syndrome,
    /// Message sequence number: messages completed by the responder (24 bits).
    pub msn: u32,
}

impl AethRepr {
    /// Parses an AETH. Every byte pattern decodes.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> crate::Result<AethRepr> {
        p.check_len()?;
        Ok(AethRepr { syndrome: Syndrome::from_byte(p.syndrome()), msn: p.msn() })
    }
    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_syndrome(self.syndrome.to_byte());
        p.set_msn(self.msn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_syndrome_byte_roundtrips() {
        for b in 0..=255u8 {
            assert_eq!(Syndrome::from_byte(b).to_byte(), b);
        }
    }

    #[test]
    fn golden_from_vectors() {
        for (hex, syn, msn) in [
            ([0x0f, 0xde, 0x78, 0xdb], Syndrome::Ack { credits: 15 }, 14579931),
            ([0x20, 0xff, 0xff, 0xff], Syndrome::RnrNak { timer: 0 }, 0xFFFFFF),
            ([0x62, 0, 0, 0], Syndrome::Nak(NakCode::RemoteAccessError), 0),
            ([0x1f, 0, 0, 4], Syndrome::Ack { credits: CREDITS_INVALID }, 4),
        ] {
            let r = AethRepr::parse(&Packet::new_checked(&hex[..]).unwrap()).unwrap();
            assert_eq!(r, AethRepr { syndrome: syn, msn });
            let mut buf = [0xa5; 4];
            r.emit(&mut Packet::new_unchecked(&mut buf[..]));
            assert_eq!(buf, hex);
        }
    }
}
