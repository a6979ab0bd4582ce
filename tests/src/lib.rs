//! Helpers shared by the workspace-level integration tests.
#![forbid(unsafe_code)]

use std::path::PathBuf;

/// The `shared/` folder beside the project root (override with `RNIC_SHARED_DIR`).
pub fn shared_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("RNIC_SHARED_DIR") {
        return PathBuf::from(d);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

/// Decodes a hex string.
pub fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex length");
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit")).collect()
}

/// Encodes bytes as lowercase hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
