//! The netvm runtime: turns an application manifest into a running graph of
//! NetPEs, and runs it over packets as a streaming packet engine.
//!
//! - [`manifest`]: the TOML application description;
//! - [`program`]: loading `.nil`/`.nvm` files and verifying them;
//! - [`datapath`]: several isolated data paths (virtual routers) composed
//!   into one application;
//! - [`Application`]: the DAG of NetPE instances, compiled by an [`Engine`]
//!   (the whole application linked into one function, or walked by the
//!   runtime), with its counters and control plane;
//! - [`Control`]: the control plane of a running application (counters,
//!   tables, globals, new versions of the data path installed while
//!   packets flow), and [`socket`], the control socket `netvm ctl` talks to;
//! - [`Driver`]: the packet engine: sources and sinks (ports), the packet
//!   memory, batching, workers, the reorder stage, ticks and statistics.
//!   `netvm run`, `netvm filter` and `netvm ids` are argument parsing over
//!   it, and so is any program that embeds netvm
//!   (`crates/runtime/examples/embed.rs`).
//!
//! Engines plug in: the JIT (feature `jit`) and the interpreter (feature
//! `interp`), both on by default; the runtime itself needs neither.
//!
//! Semantics follow the NetVM paper §3.1.4: one exchange buffer is in flight
//! at a time; when an output port feeds several inputs the buffer is
//! duplicated and each copy runs to completion, in manifest order, before
//! the next one starts. With several workers, packets are processed in
//! parallel and leave every sink in arrival order.

pub mod admission;
mod alias;
mod app;
pub mod capsules;
pub mod datapath;
mod distribute;
mod driver;
mod live;
pub mod manifest;
pub mod parallel;
pub mod program;
pub mod socket;
mod stats;

pub use app::{AppPlan, Application, CoproStats, TICK_INTERVAL_NS};
pub use app::{TieredEngine, TIER_UP_AFTER, TIER_UP_PAY_BACK};
pub use distribute::{flow_hash, Distribution};
pub use driver::{Driver, DriverConfig, RunReport, WorkerReport, MAX_BATCH};
pub use live::{Change, Control, ControlError, Installed, Listing, NetPeInfo, ProgramRef, Rebuild};
pub use manifest::Manifest;
pub use netvm_baseline::BaselineEngine;
#[cfg(feature = "interp")]
pub use netvm_interp::InterpEngine;
#[cfg(feature = "jit")]
pub use netvm_jit::{link::LinkMode, JitEngine};
pub use netvm_vm::graph::{AppGraph, Dest, Verdict};
pub use netvm_vm::{Engine, EngineError};
pub use program::{load_program, LoadedProgram};
pub use stats::{AppStats, PeCounters};

use std::path::PathBuf;

/// Errors building or starting an application. Each variant says whose
/// problem it is: the input files, the manifest, a program, or an engine.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A file could not be read.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        error: String,
    },
    /// The manifest is malformed or inconsistent.
    #[error("manifest: {0}")]
    Manifest(String),
    /// An assembly listing has a syntax error.
    #[error("{}", .error.display_with(&.path.display().to_string()))]
    Asm {
        /// The listing's file.
        path: PathBuf,
        /// The syntax error.
        error: netil::AsmError,
    },
    /// A binary module does not load.
    #[error("{}: {error}", path.display())]
    Load {
        /// The module's file.
        path: PathBuf,
        /// Why it does not load.
        error: netil::LoadError,
    },
    /// A program fails verification.
    #[error("{}: verification failed: {error}", path.display())]
    Verify {
        /// The program's file.
        path: PathBuf,
        /// The verifier's error.
        error: netvm_verify::VerifyError,
    },
    /// The NetPE graph has a cycle.
    #[error("the NetPE graph has a cycle: {0}")]
    Cycle(String),
    /// A coprocessor could not be created (or forked for another worker).
    #[error("NetPE `{netpe}`: coprocessor `{copro}`: {error}")]
    Copro {
        /// Name of the NetPE.
        netpe: String,
        /// Name of the coprocessor, as the NetPE's program declares it.
        copro: String,
        /// What went wrong.
        error: String,
    },
    /// An `.init` handler faulted.
    #[error("NetPE `{netpe}`: .init failed: {outcome}")]
    Init {
        /// Name of the NetPE.
        netpe: String,
        /// How its `.init` handler ended.
        outcome: netvm_vm::Outcome,
    },
    /// The engine could not compile a NetPE (named) or the whole application.
    #[error("{}{error}", .netpe.as_ref().map(|n| format!("NetPE `{n}`: ")).unwrap_or_default())]
    Engine {
        /// Name of the NetPE, or `None` when the whole application was compiled at once.
        netpe: Option<String>,
        /// The engine's error.
        error: EngineError,
    },
    /// The driver was configured inconsistently (workers, inputs, sinks).
    #[error("{0}")]
    Config(String),
}

impl RuntimeError {
    /// True for verification failures (the CLI exits with 3 for these).
    pub fn is_verification(&self) -> bool {
        matches!(self, RuntimeError::Verify { .. })
    }
}
