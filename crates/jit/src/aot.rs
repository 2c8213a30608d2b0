//! Ahead-of-time compilation: an application (or a single program, as an
//! application of one NetPE) written to a relocatable object for a target
//! triple, exporting `netvm_run`, `netvm_init` and `netvm_layout` with the
//! C ABI of include/netvm.h. It is the code [`crate::link`] generates for
//! the JIT, emitted by cranelift-object instead of mapped into memory; the
//! object imports the helpers and hooks of `libnetvm_rt.a` (crate netvm-rt).

use cranelift_module::default_libcall_names;
use cranelift_object::{ObjectBuilder, ObjectModule};
use netvm_verify::Verified;
use netvm_vm::graph::AppGraph;
use netvm_vm::Limits;

use crate::link::{define_app, AppLayout, LinkMode, LinkedText};
use crate::{target_isas, JitError, JitOptions};

/// The targets `netvm compile -o` is tested on (Cranelift supports more
/// triples of these three architectures).
pub const TESTED_TARGETS: [&str; 3] = ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu", "riscv64gc-unknown-linux-gnu"];

/// A compiled relocatable object.
#[derive(Debug)]
pub struct ObjectCode {
    /// The object file (ELF for Linux targets).
    pub bytes: Vec<u8>,
    /// The generated code as text (when `opts.keep_text`) and its sizes.
    pub text: LinkedText,
    /// Counter and memory layout (also exported as `netvm_layout`).
    pub layout: AppLayout,
}

/// Compiles `graph` (with one verified module per NetPE) for `triple` into
/// a relocatable object.
pub fn compile_object(
    graph: &AppGraph,
    modules: &[Verified],
    limits: &Limits,
    mode: LinkMode,
    opts: JitOptions,
    triple: &str,
) -> Result<ObjectCode, JitError> {
    if modules.len() != graph.out.len() {
        return Err(JitError::Codegen(format!("{} modules for a graph of {} NetPEs", modules.len(), graph.out.len())));
    }
    let isas = target_isas(triple, opts, mode == LinkMode::Table)?;
    let builder = ObjectBuilder::new(isas.isa.clone(), "netvm", default_libcall_names()).map_err(|e| JitError::Codegen(e.to_string()))?;
    let mut module = ObjectModule::new(builder);
    let mut text = LinkedText::default();
    let syms = define_app(&mut module, &isas, graph, modules, limits.budget, true, mode, opts, &mut text)?;
    let bytes = module.finish().emit().map_err(|e| JitError::Codegen(e.to_string()))?;
    Ok(ObjectCode { bytes, text, layout: syms.layout })
}

/// This host's target triple (the default of `netvm compile --target`).
pub fn host_triple() -> String {
    target_lexicon::Triple::host().to_string()
}
