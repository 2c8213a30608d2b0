//! Active packets: capsules that carry their own NetIL code, processed
//! safely by every netvm node they cross (WASP, SNAP; docs/capsules.md).
//!
//! - [`wire`]: the capsule format on the wire, finding one in a frame, building one;
//! - [`profile`]: the capsule profile of NetIL, its one-pass verifier and the cost model;
//! - [`env`](mod@env): the environment variables capsule code reads;
//! - [`calibrate`]: measuring the cost model's weights on this machine;
//! - [`cache`]: the code cache: capsule code verified once, found again by its bytes;
//! - [`baseline`]: the one-pass baseline compiler (x86-64);
//! - [`tier`]: compiling capsule code once it pays (Cranelift);
//! - [`node`]: the capsule node: verify, bound, run, and forward, return or drop.
//!
//! The ephemeral state store the code keeps state in is the `ess`
//! coprocessor ([`netvm_copro::ess`]), which ordinary NetPEs can use too.

pub mod baseline;
pub mod build;
pub mod cache;
pub mod calibrate;
pub mod env;
pub mod node;
pub mod profile;
pub mod tier;
pub mod wire;

pub use env::{Env, EnvConfig};
pub use node::{CapsuleNode, Carried, Chain, DropReason, Hook, NodeConfig, NodeStats, Verdict};
pub use profile::{CapsuleCode, CostModel, Rejected, Verifier};
pub use wire::{Dialect, Header, Link, Malformed, CAPSULE_PORT};

/// A fixed pseudo-random sequence for the unit tests (xorshift64).
#[cfg(test)]
pub(crate) fn test_sequence(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}
