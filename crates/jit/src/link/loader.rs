//! The loader: compiles an application with the JIT for this host
//! ([`LinkedApp::compile`]), resolving the helpers and fan-out hooks its code
//! imports to this process's functions, and keeps the mapped code and its
//! description ([`LinkedProgram`]) for every worker to share.

use std::sync::Arc;

use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module};
use netvm_verify::Verified;
use netvm_vm::graph::AppGraph;
use netvm_vm::Limits;

use super::ahead::{self, Site};
use super::{define_app, netvm_rt_emit, netvm_rt_fanout_copy, netvm_rt_fanout_pop, netvm_rt_fanout_save};
use super::{AppCtx, AppLayout, LinkMode, LinkedApp, LinkedText, XbDesc};
use crate::{context, host_isas, CodeMemory, JitError, JitOptions};

/// `netvm_run` as a Rust function pointer.
type RunFn = unsafe extern "C" fn(*mut AppCtx, *mut XbDesc, u32, *mut u32) -> u32;
/// `netvm_init` as a Rust function pointer.
type InitFn = unsafe extern "C" fn(*mut AppCtx) -> u32;
/// `netvm_ahead` (see [`ahead`](super::ahead)) as a Rust function pointer.
pub(super) type AheadFn = unsafe extern "C" fn(*const XbDesc, u32, *mut u32, u64, u64);

/// The fan-out hooks' symbols and their addresses in this process.
fn hook_symbols() -> Vec<(&'static str, *const u8)> {
    vec![
        ("netvm_rt_fanout_save", netvm_rt_fanout_save as *const u8),
        ("netvm_rt_fanout_copy", netvm_rt_fanout_copy as *const u8),
        ("netvm_rt_fanout_pop", netvm_rt_fanout_pop as *const u8),
        ("netvm_rt_emit", netvm_rt_emit as *const u8),
    ]
}

/// The compiled code of an application, shared by every worker's [`LinkedApp`].
pub(super) struct LinkedProgram {
    /// `netvm_run`.
    pub(super) run: RunFn,
    /// Whether the application fans out (uses the fan-out hooks).
    pub(super) fanout: bool,
    /// `netvm_init`, if some NetPE has `.init`.
    pub(super) init: Option<InitFn>,
    /// `netvm_ahead` and its lookup sites, if the data path has lookups
    /// whose keys it can compute ahead.
    pub(super) ahead: Option<(AheadFn, Vec<Site>)>,
    /// The application.
    pub(super) graph: AppGraph,
    /// Its counter and memory layout.
    pub(super) layout: AppLayout,
    /// The per-packet execution budget.
    pub(super) budget: u64,
    /// The generated code (`keep_text`) and its sizes.
    pub(super) text: LinkedText,
    /// Keeps the code mapped.
    _memory: Arc<CodeMemory>,
}

// SAFETY: the program is immutable machine code and its description; the
// function pointers stay valid as long as `_memory` keeps the code mapped,
// and the code is reentrant for distinct contexts (include/netvm.h).
unsafe impl Send for LinkedProgram {}
// SAFETY: as above: nothing in it is mutated after compilation.
unsafe impl Sync for LinkedProgram {}

impl LinkedApp {
    /// Compiles an application for this host.
    pub fn compile(
        graph: &AppGraph,
        modules: &[Verified],
        limits: &Limits,
        mode: LinkMode,
        opts: JitOptions,
    ) -> Result<LinkedApp, JitError> {
        if modules.len() != graph.out.len() {
            return Err(JitError::Codegen(format!("{} modules for a graph of {} NetPEs", modules.len(), graph.out.len())));
        }
        let isas = host_isas(opts, mode == LinkMode::Table)?;
        let mut builder = JITBuilder::with_isa(isas.isa.clone(), default_libcall_names());
        for (name, ptr) in context::helper_symbols().into_iter().chain(hook_symbols()) {
            builder.symbol(name, ptr);
        }
        let mut module = JITModule::new(builder);
        let mut text = LinkedText::default();
        let syms = define_app(&mut module, &isas, graph, modules, limits.budget, false, mode, opts, &mut text)?;
        let sites = ahead::find_sites(modules);
        let ahead_id = if sites.is_empty() {
            None
        } else {
            let cg = |e: cranelift_module::ModuleError| JitError::Codegen(e.to_string());
            let ptr = module.target_config().pointer_type();
            let sig = ahead::ahead_signature(ptr, module.isa().default_call_conv());
            let id = module.declare_function("netvm_ahead", Linkage::Local, &sig).map_err(cg)?;
            let mut ctx = module.make_context();
            ctx.func.signature = sig;
            let mut fctx = FunctionBuilderContext::new();
            let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
            ahead::define_ahead(&mut b, ptr, &sites);
            b.finalize(module.isa().frontend_config());
            module.define_function(id, &mut ctx).map_err(cg)?;
            Some(id)
        };
        module.finalize_definitions().map_err(|e| JitError::Codegen(e.to_string()))?;
        // SAFETY: `netvm_ahead` was just compiled with `ahead_signature`,
        // `(ptr, i32, ptr, i64, i64)` with no result in the host's default
        // calling convention: `AheadFn`.
        let ahead = ahead_id.map(|id| (unsafe { std::mem::transmute::<*const u8, AheadFn>(module.get_finalized_function(id)) }, sites));
        // SAFETY: `netvm_run` and `netvm_init` were just compiled with the
        // signatures `(ptr, ptr, i32, ptr) -> i32` and `(ptr) -> i32` in the
        // host's default calling convention: `RunFn` and `InitFn`.
        let (run, init) = unsafe {
            (
                std::mem::transmute::<*const u8, RunFn>(module.get_finalized_function(syms.run)),
                syms.init.map(|f| std::mem::transmute::<*const u8, InitFn>(module.get_finalized_function(f))),
            )
        };
        let prog = LinkedProgram {
            run,
            fanout: graph.has_fanout(),
            init,
            ahead,
            graph: graph.clone(),
            budget: limits.budget,
            layout: syms.layout,
            text,
            _memory: Arc::new(CodeMemory { module: Some(module) }),
        };
        Ok(LinkedApp::context(Arc::new(prog)))
    }
}
