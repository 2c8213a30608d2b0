//! The netvm runtime: turns an application manifest into a running graph of
//! NetPEs and moves exchange buffers through it.
//!
//! - [`manifest`]: the TOML application description;
//! - [`program`]: loading `.nil`/`.nvm` files and verifying them;
//! - [`Engine`]: how a verified module becomes executable code ([`InterpEngine`], [`JitEngine`]);
//! - [`Application`]: the DAG of NetPE instances, [`Application::process_batch`], counters.
//!
//! Semantics follow the NetVM paper §3.1.4: one exchange buffer is in flight
//! at a time; when an output port feeds several inputs the buffer is
//! duplicated and each copy runs to completion, in manifest order, before
//! the next one starts.

mod app;
pub mod manifest;
pub mod program;
mod stats;

pub use app::{Application, Verdict};
pub use manifest::Manifest;
pub use program::{load_program, LoadedProgram};
pub use stats::{AppStats, PeCounters};

use std::path::PathBuf;

use netvm_verify::Verified;
use netvm_vm::PeCode;

/// Errors building or starting an application. Each variant says whose
/// problem it is: the input files, the manifest, or a program.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A file could not be read.
    #[error("{}: {error}", path.display())]
    Io { path: PathBuf, error: String },
    /// The manifest is malformed or inconsistent.
    #[error("manifest: {0}")]
    Manifest(String),
    /// An assembly listing has a syntax error.
    #[error("{}", .error.display_with(&.path.display().to_string()))]
    Asm { path: PathBuf, error: netil::AsmError },
    /// A binary module does not load.
    #[error("{}: {error}", path.display())]
    Load { path: PathBuf, error: netil::LoadError },
    /// A program fails verification.
    #[error("{}: verification failed: {error}", path.display())]
    Verify { path: PathBuf, error: netvm_verify::VerifyError },
    /// The NetPE graph has a cycle.
    #[error("the NetPE graph has a cycle: {0}")]
    Cycle(String),
    /// A coprocessor could not be created.
    #[error("NetPE `{netpe}`: coprocessor `{copro}`: {error}")]
    Copro { netpe: String, copro: String, error: String },
    /// An `.init` handler faulted.
    #[error("NetPE `{netpe}`: .init failed: {outcome}")]
    Init { netpe: String, outcome: netvm_vm::Outcome },
}

impl RuntimeError {
    /// True for verification failures (the CLI exits with 3 for these).
    pub fn is_verification(&self) -> bool {
        matches!(self, RuntimeError::Verify { .. })
    }
}

/// An execution engine: turns verified modules into [`PeCode`].
pub trait Engine {
    /// Short name (`interp`, `jit`).
    fn name(&self) -> &'static str;
    /// Prepares a verified module for execution.
    fn prepare(&self, verified: &Verified) -> Result<Box<dyn PeCode>, String>;
}

/// The Cranelift JIT as an [`Engine`].
#[derive(Clone, Copy, Debug, Default)]
pub struct JitEngine;

impl Engine for JitEngine {
    fn name(&self) -> &'static str {
        "jit"
    }

    fn prepare(&self, verified: &Verified) -> Result<Box<dyn PeCode>, String> {
        netvm_jit::JitCode::compile(verified).map(|c| Box::new(c) as Box<dyn PeCode>).map_err(|e| e.to_string())
    }
}

/// The reference interpreter as an [`Engine`].
#[derive(Clone, Copy, Debug, Default)]
pub struct InterpEngine;

impl Engine for InterpEngine {
    fn name(&self) -> &'static str {
        "interp"
    }

    fn prepare(&self, verified: &Verified) -> Result<Box<dyn PeCode>, String> {
        Ok(Box::new(netvm_interp::InterpCode::new(verified)))
    }
}
