//! Raw Ethernet frames through AF_PACKET (see the module docs of `transport`).
