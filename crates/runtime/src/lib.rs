//! The netvm runtime: turns an application manifest into a running graph of
//! NetPEs and moves exchange buffers through it.
//!
//! - [`manifest`]: the TOML application description;
//! - [`program`]: loading `.nil`/`.nvm` files and verifying them;
//! - [`Engine`]: how a verified module becomes executable code ([`InterpEngine`], [`JitEngine`]);
//! - [`Application`]: the DAG of NetPE instances, [`Application::process_batch`], counters;
//!   the whole application compiled by the engine (direct linking) or walked by the runtime.
//!
//! Semantics follow the NetVM paper §3.1.4: one exchange buffer is in flight
//! at a time; when an output port feeds several inputs the buffer is
//! duplicated and each copy runs to completion, in manifest order, before
//! the next one starts.

mod app;
pub mod manifest;
pub mod program;
mod stats;

pub use app::{AppPlan, Application, CoproStats, TICK_INTERVAL_NS};
pub use manifest::Manifest;
pub use netvm_jit::link::LinkMode;
pub use netvm_vm::graph::{AppGraph, Dest, Verdict};
pub use program::{load_program, LoadedProgram};
pub use stats::{AppStats, PeCounters};

use std::path::PathBuf;

use netvm_verify::Verified;
use netvm_vm::graph::LinkedCode;
use netvm_vm::{Limits, PeCode};

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

/// An execution engine: turns verified modules into [`PeCode`], and
/// possibly whole applications into [`LinkedCode`].
pub trait Engine {
    /// Short name (`interp`, `jit`).
    fn name(&self) -> &'static str;
    /// Prepares a verified module for execution.
    fn prepare(&self, verified: &Verified) -> Result<Box<dyn PeCode>, String>;
    /// Compiles a whole application (`modules` in application order), or
    /// `None` if this engine leaves the graph to the runtime.
    fn link(&self, graph: &AppGraph, modules: &[Verified], limits: &Limits) -> Option<Result<Box<dyn LinkedCode>, String>> {
        let _ = (graph, modules, limits);
        None
    }
    /// How [`Engine::link`] binds NetPEs (`direct`, `table`), for statistics.
    fn link_name(&self) -> &'static str {
        "dispatch"
    }
}

/// The Cranelift JIT as an [`Engine`]. With a [`LinkMode`], it compiles
/// whole applications (the default: [`LinkMode::Direct`]); without one, each
/// NetPE alone, and the runtime walks the graph (`dispatch`).
#[derive(Clone, Copy, Debug)]
pub struct JitEngine {
    /// How NetPEs are bound; `None` for the runtime's graph walk.
    pub link: Option<LinkMode>,
}

impl Default for JitEngine {
    fn default() -> Self {
        JitEngine { link: Some(LinkMode::Direct) }
    }
}

impl JitEngine {
    /// The JIT binding NetPEs as `link` says (`None`: the runtime dispatches).
    pub fn with_link(link: Option<LinkMode>) -> JitEngine {
        JitEngine { link }
    }
}

impl Engine for JitEngine {
    fn name(&self) -> &'static str {
        "jit"
    }

    fn prepare(&self, verified: &Verified) -> Result<Box<dyn PeCode>, String> {
        netvm_jit::JitCode::compile(verified).map(|c| Box::new(c) as Box<dyn PeCode>).map_err(|e| e.to_string())
    }

    fn link(&self, graph: &AppGraph, modules: &[Verified], limits: &Limits) -> Option<Result<Box<dyn LinkedCode>, String>> {
        let mode = self.link?;
        let opts = netvm_jit::JitOptions::default();
        Some(
            netvm_jit::link::LinkedApp::compile(graph, modules, limits, mode, opts)
                .map(|a| Box::new(a) as Box<dyn LinkedCode>)
                .map_err(|e| e.to_string()),
        )
    }

    fn link_name(&self) -> &'static str {
        self.link.map_or("dispatch", LinkMode::name)
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
