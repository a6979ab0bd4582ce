//! DREP: disconnect reply (IBA 12.6.11, Table 113).
//!
//! ```text
//!  0..4     Local Communication ID (the sender's)
//!  4..8     Remote Communication ID (the receiver's)
//!  8..232   private data (224)
//! ```
//!
//! The RTU's layout (Table 111), so the RTU's view: [`Packet`] is [`super::rtu::Packet`],
//! read and written through [`CmIds::parse`](super::CmIds::parse) and
//! [`CmIds::emit`](super::CmIds::emit).

pub use super::rtu::Packet;

const _: () = assert!(super::private_len::DREP == super::private_len::RTU, "Tables 111 and 113 agree");
