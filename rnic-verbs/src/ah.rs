//! Address handles (`ibv_ah`): where UD sends go.

use crate::pd::ProtectionDomain;
use crate::types::Gid;
use crate::UdDest;

/// An address handle (`ibv_ah`): the destination of UD sends. Combine it with the remote
/// QPN and Q_Key into the [`UdDest`] a [`SendWr`](crate::SendWr) carries
/// ([`SendWr::to`](crate::SendWr::to)).
#[derive(Clone, Debug)]
pub struct AddressHandle {
    pub(crate) pd: ProtectionDomain,
    pub(crate) gid: Gid,
}

impl AddressHandle {
    /// The destination GID.
    pub fn gid(&self) -> Gid {
        self.gid
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The destination of a send to QP `remote_qpn` with Q_Key `remote_qkey` (a Q_Key with
    /// the high bit set, such as [`UdDest::USE_QP_QKEY`], sends the QP's own Q_Key).
    pub fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        UdDest { dst: self.gid.to_ip(), remote_qpn, remote_qkey }
    }
}
