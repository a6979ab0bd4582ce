//! Ethernet II framing with an optional 802.1Q tag (no FCS: captures and sockets
//! never show it).

use crate::error::need;
use crate::field::{set_u16, u16_at};
use crate::{Error, Result};

/// Length of the untagged Ethernet II header.
pub const HEADER_LEN: usize = 14;
/// Length of an 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;
/// Minimum frame length without FCS; shorter frames are padded with zeros (IEEE 802.3).
pub const MIN_FRAME_LEN: usize = 60;
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// TPID of an 802.1Q tag.
pub const TPID_8021Q: u16 = 0x8100;

/// A 48-bit MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl core::fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(self, f)
    }
}

impl core::fmt::Display for MacAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let b = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4], b[5])
    }
}

/// An 802.1Q tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanTag {
    /// Priority code point (RoCE traffic classes map here).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

/// An Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Destination MAC.
    pub dst: MacAddr,
    /// Source MAC.
    pub src: MacAddr,
    /// 802.1Q tag, if present.
    pub vlan: Option<VlanTag>,
    /// EtherType of the payload (after any tag).
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Parses the header at the start of `frame`; returns it and its length.
    pub fn parse(frame: &[u8]) -> Result<(EthernetRepr, usize)> {
        need("Ethernet header", frame, HEADER_LEN)?;
        let mut dst = [0; 6];
        let mut src = [0; 6];
        dst.copy_from_slice(&frame[0..6]);
        src.copy_from_slice(&frame[6..12]);
        let t = u16_at(frame, 12);
        if t == TPID_8021Q {
            need("802.1Q-tagged Ethernet header", frame, HEADER_LEN + VLAN_TAG_LEN)?;
            let tci = u16_at(frame, 14);
            let vlan = VlanTag { pcp: u8::try_from(tci >> 13).unwrap_or(0), dei: tci & 0x1000 != 0, vid: tci & 0x0fff };
            let ethertype = u16_at(frame, 16);
            Ok((
                EthernetRepr { dst: MacAddr(dst), src: MacAddr(src), vlan: Some(vlan), ethertype },
                HEADER_LEN + VLAN_TAG_LEN,
            ))
        } else {
            Ok((EthernetRepr { dst: MacAddr(dst), src: MacAddr(src), vlan: None, ethertype: t }, HEADER_LEN))
        }
    }

    /// Header length, tag included.
    pub const fn buffer_len(&self) -> usize {
        if self.vlan.is_some() {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header into the start of `buf`, which must hold `buffer_len()` bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        need("Ethernet header buffer", buf, self.buffer_len())?;
        buf[0..6].copy_from_slice(&self.dst.0);
        buf[6..12].copy_from_slice(&self.src.0);
        match self.vlan {
            Some(v) => {
                set_u16(buf, 12, TPID_8021Q);
                let tci = (u16::from(v.pcp & 7) << 13) | (u16::from(v.dei) << 12) | (v.vid & 0x0fff);
                set_u16(buf, 14, tci);
                set_u16(buf, 16, self.ethertype);
            }
            None => set_u16(buf, 12, self.ethertype),
        }
        Ok(())
    }

    /// Checks that the EtherType is IPv4 or IPv6.
    pub fn check_ip(&self) -> Result<()> {
        match self.ethertype {
            ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Ok(()),
            t => Err(Error::NotIp { ethertype: t }),
        }
    }
}
