//! Benchmarks of netvm against its peers.
//!
//! This crate holds what the filter benchmark of the NetVM paper (§6.3.1)
//! needs on the netvm side; the peers (native C, libpcap, DPDK's BPF JIT, the
//! Linux kernel's BPF JIT) live in `benches/peers/` and are built outside
//! cargo by `scripts/bench-filters.sh`.
//!
//! - [`filters`]: the five filters, hand-written in NetIL (`benches/filters/*.nil`),
//!   with the tcpdump expression each one implements;
//! - [`trace`]: a deterministic generator of the workloads (the 64-byte
//!   full-path packet and a mixed trace) and of edge-case packets;
//! - [`linked`]: applications compiled whole by the JIT, run on prepared descriptors;
//! - [`measure`]: timing statistics and the JSON line format shared with the C peers;
//! - [`report`]: merging the rounds of a run into the tables of BENCHMARKS.md and a JSON file.
//!
//! The `filterbench` binary measures every netvm engine on every filter and
//! workload; `tests/filters_vs_tcpdump.rs` checks the filters against tcpdump.

pub mod filters;
pub mod linked;
pub mod measure;
pub mod report;
pub mod trace;
