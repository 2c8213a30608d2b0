//! Execution engines: how a verified module becomes executable code.
//!
//! The interpreter (`netvm-interp`) and the JIT (`netvm-jit`) implement
//! [`Engine`] in their own crates, so that the runtime builds applications
//! with whichever engines it was compiled with and needs no code generator
//! to compile. Errors stay typed: a code-generation failure is an
//! [`EngineError`], never mistaken for a bad manifest.

use std::sync::Arc;

use netvm_verify::Verified;

use crate::graph::{AppGraph, LinkedCode};
use crate::{Limits, PeCode};

/// Why an engine could not produce code for a verified module or application.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The code generator failed (a bug, or a resource limit such as code size).
    #[error("code generation failed: {0}")]
    Codegen(String),
    /// The engine cannot run this module or application (a feature it lacks).
    #[error("not supported by this engine: {0}")]
    Unsupported(String),
}

/// An execution engine: turns verified modules into [`PeCode`], and
/// possibly whole applications into [`LinkedCode`].
pub trait Engine: Send + Sync {
    /// Short name (`interp`, `jit`).
    fn name(&self) -> &'static str;
    /// Prepares a verified module for execution. The code is shared by every
    /// worker that runs the NetPE.
    fn prepare(&self, verified: &Verified) -> Result<Arc<dyn PeCode>, EngineError>;
    /// Prepares every module of an application (`modules` in application
    /// order), each as [`Engine::prepare`] does: the code of each, in order,
    /// or the first failure in order with the module's index. An engine may
    /// prepare them in parallel (the default: one after the other).
    fn prepare_all(&self, modules: &[Verified]) -> Result<Vec<Arc<dyn PeCode>>, (usize, EngineError)> {
        modules.iter().enumerate().map(|(i, v)| self.prepare(v).map_err(|e| (i, e))).collect()
    }
    /// Compiles a whole application (`modules` in application order), or
    /// `None` if this engine leaves the graph to the runtime.
    fn link(&self, graph: &AppGraph, modules: &[Verified], limits: &Limits) -> Option<Result<Box<dyn LinkedCode>, EngineError>> {
        let _ = (graph, modules, limits);
        None
    }
    /// How [`Engine::link`] binds NetPEs (`direct`, `table`), for statistics;
    /// `dispatch` when the runtime walks the graph.
    fn link_name(&self) -> &'static str {
        "dispatch"
    }
    /// The second tier of a tiered engine, and when to start it: an engine
    /// that compiles the whole application again ([`Engine::link`]), in the
    /// background, while the application already runs on this engine's
    /// code; the runtime moves to the second tier's code at a batch
    /// boundary once it is ready. `None` (the default): one tier.
    fn tier_up(&self) -> Option<TierUp> {
        None
    }
}

/// A tiered engine's second tier ([`Engine::tier_up`]) and when a worker
/// starts compiling it: once it has run `after` packets on the first tier
/// and spent running them `pay_back` times as long as the first tier took
/// to compile (the second tier's compile time, estimated as that multiple
/// of the first's: a worker pays for the compilation only once it has
/// spent about as much on the slower code, so that no run takes much more
/// than twice the better of staying and moving, whatever its length).
#[derive(Clone)]
pub struct TierUp {
    /// The second tier.
    pub engine: Arc<dyn Engine>,
    /// Packets run on the first tier before the compilation may start.
    pub after: u64,
    /// The second tier's compile time as a multiple of the first tier's
    /// (0: start after `after` packets, whatever the time spent).
    pub pay_back: f64,
}
