//! What compiled code sees of the machine: the execution context of a
//! single compiled handler (`netvm_rt::handler`, shared with the baseline
//! compiler), the encoding of its result, and the run-time helpers compiled code calls for the instructions not worth inlining
//! (region functions and coprocessors).
//!
//! The helpers have a plain C ABI and take explicit pointers and lengths
//! (never a context), so that the same compiled code calls them from a
//! single handler, from a linked application and from an AOT object linked
//! into a C program (include/netvm.h declares them under the same names).
//! Their callers check every range before the call: a helper only ever
//! reads bytes it was given. `mcopy` needs no helper (it is `memmove` after
//! the checks), nor do `hash32` and `csum.upd` (inlined).

use cranelift_codegen::ir::{types, AbiParam, Signature};
use cranelift_module::{FuncId, Linkage, Module, ModuleResult};
pub use netvm_rt::handler::{offsets, HandlerCtx};
pub use netvm_rt::helpers::{
    netvm_rt_copro_in, netvm_rt_copro_invoke, netvm_rt_copro_out, netvm_rt_crc32, netvm_rt_csum, netvm_rt_murmur3, HELPER_FAULT,
};

/// Symbols of the helpers, for the JIT's symbol table.
pub fn helper_symbols() -> Vec<(&'static str, *const u8)> {
    vec![
        ("netvm_rt_crc32", netvm_rt_crc32 as *const u8),
        ("netvm_rt_murmur3", netvm_rt_murmur3 as *const u8),
        ("netvm_rt_csum", netvm_rt_csum as *const u8),
        ("netvm_rt_copro_in", netvm_rt_copro_in as *const u8),
        ("netvm_rt_copro_out", netvm_rt_copro_out as *const u8),
        ("netvm_rt_copro_invoke", netvm_rt_copro_invoke as *const u8),
    ]
}

/// The helpers declared in a module.
#[derive(Clone, Copy, Debug)]
pub struct Helpers {
    /// `netvm_rt_crc32`
    pub crc32: FuncId,
    /// `netvm_rt_murmur3`
    pub murmur3: FuncId,
    /// `netvm_rt_csum`
    pub csum: FuncId,
    /// `netvm_rt_copro_in`
    pub copro_in: FuncId,
    /// `netvm_rt_copro_out`
    pub copro_out: FuncId,
    /// `netvm_rt_copro_invoke`
    pub copro_invoke: FuncId,
}

/// Declares the helpers as imports of `module`.
#[allow(clippy::result_large_err)] // Cranelift's own `ModuleError`
pub fn declare_helpers<M: Module>(module: &mut M) -> ModuleResult<Helpers> {
    let ptr = module.target_config().pointer_type();
    let sig = |params: &[types::Type], ret: types::Type| {
        let mut s: Signature = module.make_signature();
        s.params.extend(params.iter().map(|t| AbiParam::new(*t)));
        s.returns.push(AbiParam::new(ret));
        s
    };
    let (i32t, i64t) = (types::I32, types::I64);
    let sigs = [
        ("netvm_rt_crc32", sig(&[ptr, i64t], i32t)),
        ("netvm_rt_murmur3", sig(&[ptr, i64t], i32t)),
        ("netvm_rt_csum", sig(&[ptr, i64t], i32t)),
        ("netvm_rt_copro_in", sig(&[ptr, i64t, i32t, i32t, i32t], i32t)),
        ("netvm_rt_copro_out", sig(&[ptr, i64t, i32t, i32t], i64t)),
        ("netvm_rt_copro_invoke", sig(&[ptr, i64t, i32t, i32t, ptr, i64t, ptr, i64t, i64t, i32t, i64t], i32t)),
    ];
    let mut ids = Vec::with_capacity(sigs.len());
    for (name, s) in &sigs {
        ids.push(module.declare_function(name, Linkage::Import, s)?);
    }
    Ok(Helpers { crc32: ids[0], murmur3: ids[1], csum: ids[2], copro_in: ids[3], copro_out: ids[4], copro_invoke: ids[5] })
}
