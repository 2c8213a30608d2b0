//! Deterministic, seeded packet traces and workloads for tests and
//! benchmarks. A seed names a trace: the same seed gives the same bytes on
//! every machine, so tests, benchmarks and the committed sample captures
//! (`cargo run -p netvm-traffic --example app_samples`) are reproducible.
//!
//! - [`SplitMix64`]: the one pseudo-random generator of the tests and
//!   benchmarks, with the helpers they draw with (`below`, `range`,
//!   `chance`, `per_mille`, `pick`, `bytes`);
//! - [`frames`]: varied Ethernet frames whose addresses, ports, tags and
//!   labels come from small pools that filter expressions name, for testing
//!   filters against libpcap and the engines on every kind of frame;
//! - [`apps`]: traffic, routes and rules for the example applications (the
//!   learning bridge, the IPv4 router, the IDS), with the malformed frames a
//!   data path must drop;
//! - [`mixed`]: the filter benchmark's workloads (the full-path packet, the
//!   mixed trace) and the filters' edge cases;
//! - [`protomix`]: an application-protocol mix (HTTP, DNS, TLS, ICMP, UDP,
//!   SSH, SMTP) of complete, interleaved conversations, for the IDS;
//! - [`write_pcap`]: a trace as a classic pcap file.
//!
//! Program generation (NetIL programs, applications, fuzzing) is
//! `netvm-fuzzgen`'s; its packets come from the fuzzer's bytes, not from a
//! seed.

pub mod apps;
pub mod frames;
pub mod mixed;
mod pcap;
pub mod protomix;
mod rng;

pub use pcap::write_pcap;
pub use rng::SplitMix64;

/// Start of generated traces: 2024-01-01 00:00:00 UTC.
pub const EPOCH: u64 = 1_704_067_200;

/// The Internet checksum (RFC 1071) of `b` as a header stores it: the NetIL
/// region function [`netvm_vm::region::internet_checksum`], as a `u16`.
pub fn internet_checksum(b: &[u8]) -> u16 {
    netvm_vm::region::internet_checksum(b) as u16
}
