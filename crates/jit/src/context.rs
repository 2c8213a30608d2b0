//! What compiled code sees of the machine: the execution context of a
//! single compiled handler, the encoding of its result, and the run-time
//! helpers compiled code calls for the instructions not worth inlining
//! (region functions and coprocessors).
//!
//! The helpers have a plain C ABI and take explicit pointers and lengths
//! (never a context), so that the same compiled code calls them from a
//! single handler, from a linked application and from an AOT object linked
//! into a C program (include/netvm.h declares them under the same names).
//! Their callers check every range before the call: a helper only ever
//! reads bytes it was given. `mcopy` needs no helper (it is `memmove` after
//! the checks), nor do `hash32` and `csum.upd` (inlined).

use std::mem::offset_of;

use cranelift_codegen::ir::{types, AbiParam, Signature};
use cranelift_module::{FuncId, Linkage, Module, ModuleResult};
pub use netvm_rt::helpers::{
    netvm_rt_copro_in, netvm_rt_copro_invoke, netvm_rt_copro_out, netvm_rt_crc32, netvm_rt_csum, netvm_rt_murmur3, HELPER_FAULT,
};
use netvm_vm::{Coprocessor, PeState, RegisterFile, XbView};

/// The execution context of one invocation of a single compiled handler
/// (`#[repr(C)]`: compiled code reads its fields at fixed offsets).
#[repr(C)]
#[derive(Debug)]
pub struct JitCtx {
    /// Packet memory.
    pub pkt: *mut u8,
    /// Captured length of the packet.
    pub pkt_len: u64,
    /// Info memory.
    pub info: *mut u8,
    /// Accessible info memory: min(.infosize, buffer length).
    pub info_len: u64,
    /// Data memory.
    pub data: *mut u8,
    /// Data memory length.
    pub data_len: u64,
    /// Budget the invocation starts with.
    pub budget: u64,
    /// Coprocessor instances (`*mut Box<dyn Coprocessor>`).
    pub copros: *mut Box<dyn Coprocessor>,
    /// Number of coprocessor instances.
    pub ncopros: u64,
    /// The instances' inline register files (see
    /// [`Coprocessor::registers`](netvm_vm::Coprocessor::registers)), or null.
    pub regs: *const RegisterFile,
    /// Number of register files at `regs`: `ncopros`, or 0, and then every
    /// register access calls the instance.
    pub nregs: u64,
    /// Timestamp seconds.
    pub ts_sec: u64,
    /// Wire length of the packet.
    pub wire_len: u32,
    /// NetPE input port.
    pub in_port: u32,
    /// Timestamp nanoseconds.
    pub ts_nsec: u32,
    /// The packet's sequence number in the run.
    pub seq: u64,
    /// Written by the code on return: the budget left (`budget` unless the
    /// handler has backward edges). Never read by compiled code.
    pub budget_left: u64,
}

/// Byte offsets of the fields compiled code reads.
pub mod offsets {
    use super::*;
    /// `pkt`
    pub const PKT: i32 = offset_of!(JitCtx, pkt) as i32;
    /// `pkt_len`
    pub const PKT_LEN: i32 = offset_of!(JitCtx, pkt_len) as i32;
    /// `info`
    pub const INFO: i32 = offset_of!(JitCtx, info) as i32;
    /// `info_len`
    pub const INFO_LEN: i32 = offset_of!(JitCtx, info_len) as i32;
    /// `data`
    pub const DATA: i32 = offset_of!(JitCtx, data) as i32;
    /// `data_len`
    pub const DATA_LEN: i32 = offset_of!(JitCtx, data_len) as i32;
    /// `budget`
    pub const BUDGET: i32 = offset_of!(JitCtx, budget) as i32;
    /// `copros`
    pub const COPROS: i32 = offset_of!(JitCtx, copros) as i32;
    /// `ncopros`
    pub const NCOPROS: i32 = offset_of!(JitCtx, ncopros) as i32;
    /// `regs`
    pub const REGS: i32 = offset_of!(JitCtx, regs) as i32;
    /// `nregs`
    pub const NREGS: i32 = offset_of!(JitCtx, nregs) as i32;
    /// `ts_sec`
    pub const TS_SEC: i32 = offset_of!(JitCtx, ts_sec) as i32;
    /// `wire_len`
    pub const WIRE_LEN: i32 = offset_of!(JitCtx, wire_len) as i32;
    /// `in_port`
    pub const IN_PORT: i32 = offset_of!(JitCtx, in_port) as i32;
    /// `ts_nsec`
    pub const TS_NSEC: i32 = offset_of!(JitCtx, ts_nsec) as i32;
    /// `seq`
    pub const SEQ: i32 = offset_of!(JitCtx, seq) as i32;
    /// `budget_left`
    pub const BUDGET_LEFT: i32 = offset_of!(JitCtx, budget_left) as i32;
}

impl JitCtx {
    /// The context of one call on `state` and `xb`.
    pub fn new(state: &mut PeState, xb: &mut XbView<'_>, in_port: u16, info_size: usize, budget: u64) -> JitCtx {
        let info_len = info_size.min(xb.info.len());
        JitCtx {
            pkt: xb.packet.as_mut_ptr(),
            pkt_len: xb.packet.len() as u64,
            info: xb.info.as_mut_ptr(),
            info_len: info_len as u64,
            data: state.data.as_mut_ptr(),
            data_len: state.data.len() as u64,
            budget,
            copros: state.copros.as_mut_ptr(),
            ncopros: state.copros.len() as u64,
            regs: std::ptr::null(),
            nregs: 0,
            ts_sec: xb.ts.sec,
            wire_len: xb.wire_len,
            in_port: u32::from(in_port),
            ts_nsec: xb.ts.nsec,
            seq: xb.seq,
            budget_left: budget,
        }
    }
}

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
