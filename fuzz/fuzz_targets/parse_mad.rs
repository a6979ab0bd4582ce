//! CM MADs from a peer: parsing arbitrary bytes never panics, and what parses re-emits to
//! bytes that parse to the same message.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rnic_wire::cm::{CmMessage, CmaHeader};

fuzz_target!(|data: &[u8]| {
    let _ = CmaHeader::parse(data);
    if let Ok((h, Some(msg))) = CmMessage::from_mad(data) {
        let again = msg.to_mad(h.tid);
        assert_eq!(CmMessage::from_mad(&again).ok().and_then(|(_, m)| m), Some(msg));
    }
});
