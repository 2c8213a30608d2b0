//! What compiled code sees of the machine: the execution context passed to
//! every handler, the encoding of its result, and the run-time helpers it
//! calls for the instructions that are not worth inlining (region
//! functions, `mcopy`, coprocessors).
//!
//! Every pointer in [`JitCtx`] comes from one exclusive borrow of the NetPE
//! state and the exchange buffer, taken for the duration of one call; the
//! helpers build their slices from the same pointers and lengths, so
//! compiled code and helpers never touch memory outside the bounds recorded
//! here.

use std::mem::offset_of;

use cranelift_codegen::ir::{types, AbiParam, Signature};
use cranelift_module::{FuncId, Linkage, Module, ModuleResult};
use netil::Mem;
use netvm_vm::{region, Coprocessor, ExchangeBuffer, FaultKind, InvokeContext, Outcome, PeState, Timestamp};

/// The execution context of one handler invocation (`#[repr(C)]`: compiled
/// code reads its fields at fixed offsets).
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
    /// Budget left.
    pub budget: u64,
    /// Coprocessor instances.
    pub copros: *mut Box<dyn Coprocessor>,
    /// Number of coprocessor instances.
    pub ncopros: u64,
    /// Wire length of the packet.
    pub wire_len: u32,
    /// NetPE input port.
    pub in_port: u32,
    /// Timestamp seconds (low 32 bits).
    pub ts_sec: u32,
    /// Timestamp nanoseconds.
    pub ts_nsec: u32,
    /// Full timestamp, for coprocessors.
    pub ts: Timestamp,
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
    /// `wire_len`
    pub const WIRE_LEN: i32 = offset_of!(JitCtx, wire_len) as i32;
    /// `in_port`
    pub const IN_PORT: i32 = offset_of!(JitCtx, in_port) as i32;
    /// `ts_sec`
    pub const TS_SEC: i32 = offset_of!(JitCtx, ts_sec) as i32;
    /// `ts_nsec`
    pub const TS_NSEC: i32 = offset_of!(JitCtx, ts_nsec) as i32;
}

impl JitCtx {
    /// The context of one call on `state` and `xb`.
    pub fn new(state: &mut PeState, xb: &mut ExchangeBuffer, in_port: u16, info_size: usize, _out_ports: u16, budget: u64) -> JitCtx {
        let info_len = info_size.min(xb.info.len());
        JitCtx {
            pkt: xb.packet.data.as_mut_ptr(),
            pkt_len: xb.packet.data.len() as u64,
            info: xb.info.as_mut_ptr(),
            info_len: info_len as u64,
            data: state.data.as_mut_ptr(),
            data_len: state.data.len() as u64,
            budget,
            copros: state.copros.as_mut_ptr(),
            ncopros: state.copros.len() as u64,
            wire_len: xb.packet.wire_len,
            in_port: u32::from(in_port),
            ts_sec: xb.packet.ts.sec as u32,
            ts_nsec: xb.packet.ts.nsec,
            ts: xb.packet.ts,
        }
    }

    /// The memory `m` as a slice.
    ///
    /// # Safety
    /// The context must have been built by [`JitCtx::new`] from borrows that
    /// are still live and not otherwise accessed during the returned borrow.
    unsafe fn memory(&mut self, m: Mem) -> &mut [u8] {
        let (p, n) = match m {
            Mem::Packet => (self.pkt, self.pkt_len),
            Mem::Info => (self.info, self.info_len),
            Mem::Data => (self.data, self.data_len),
        };
        if n == 0 {
            return &mut [];
        }
        // SAFETY: (p, n) describe a live allocation of at least n bytes (see
        // `JitCtx::new`), exclusively borrowed for the call.
        unsafe { std::slice::from_raw_parts_mut(p, n as usize) }
    }
}

/// Result encoding of a compiled handler: `0..=0xffff` = forward on that
/// port; [`OUT_DROP`]; [`OUT_EXIT`]; [`OUT_FAULT`] `|` index in `FaultKind::ALL`.
pub const OUT_DROP: u32 = 0x1_0000;
/// `exit` (end of `.init`).
pub const OUT_EXIT: u32 = 0x2_0000;
/// Base of fault results.
pub const OUT_FAULT: u32 = 0x3_0000;

/// The encoded result of a fault.
pub fn fault_code(k: FaultKind) -> u32 {
    OUT_FAULT | FaultKind::ALL.iter().position(|x| *x == k).expect("listed") as u32
}

/// Decodes a handler's result.
pub fn decode_outcome(raw: u32) -> Outcome {
    match raw {
        0..=0xffff => Outcome::Forward(raw as u16),
        OUT_DROP => Outcome::Drop,
        OUT_EXIT => Outcome::Exit,
        _ => match FaultKind::ALL.get((raw - OUT_FAULT) as usize) {
            Some(k) if raw >= OUT_FAULT => Outcome::Fault(*k),
            // Not produced by the translator; treat as a drop rather than trust it.
            _ => Outcome::Drop,
        },
    }
}

/// Flag bit in helper results meaning "fault".
pub const HELPER_FAULT: u64 = 1 << 32;

/// Region operations of [`netvm_jit_region`].
pub mod region_op {
    /// `crc32`
    pub const CRC32: u32 = 0;
    /// `hash`
    pub const HASH: u32 = 1;
    /// `csum`
    pub const CSUM: u32 = 2;
}

/// `mcopy`: `mems` is `src << 4 | dst`. Returns 0, or 1 for a bounds fault.
///
/// # Safety
/// `ctx` must point to a live context built by [`JitCtx::new`].
pub unsafe extern "C" fn netvm_jit_mcopy(ctx: *mut JitCtx, mems: u32, dst_off: u32, src_off: u32, len: u32) -> u32 {
    // SAFETY: the caller passes its own live context.
    let ctx = unsafe { &mut *ctx };
    let (Some(src), Some(dst)) = (Mem::from_u8((mems >> 4) as u8), Mem::from_u8((mems & 0xf) as u8)) else { return 1 };
    // SAFETY: the slices are built from the context's pointers; the two
    // memories are distinct allocations unless src == dst, handled apart.
    let (src_len, dst_len) = unsafe { (ctx.memory(src).len(), ctx.memory(dst).len()) };
    let (Some(sr), Some(dr)) = (netvm_vm::mem::range(src_off, len, src_len), netvm_vm::mem::range(dst_off, len, dst_len)) else {
        return 1;
    };
    if src == dst {
        // SAFETY: one slice of one memory.
        let m = unsafe { ctx.memory(dst) };
        m.copy_within(sr, dr.start);
    } else {
        // SAFETY: distinct memories are distinct allocations; the temporary
        // copy keeps only one borrow live at a time.
        let tmp = unsafe { ctx.memory(src) }[sr].to_vec();
        let d = unsafe { ctx.memory(dst) };
        d[dr].copy_from_slice(&tmp);
    }
    0
}

/// `crc32` / `hash` / `csum` over `[off, off + len)` of `mem`. Returns the
/// value, or [`HELPER_FAULT`] for a bounds fault.
///
/// # Safety
/// `ctx` must point to a live context built by [`JitCtx::new`].
pub unsafe extern "C" fn netvm_jit_region(ctx: *mut JitCtx, op: u32, mem: u32, off: u32, len: u32) -> u64 {
    // SAFETY: the caller passes its own live context.
    let ctx = unsafe { &mut *ctx };
    let Some(m) = Mem::from_u8(mem as u8) else { return HELPER_FAULT };
    // SAFETY: built from the context's pointers.
    let bytes = unsafe { ctx.memory(m) };
    let Some(r) = netvm_vm::mem::range(off, len, bytes.len()) else { return HELPER_FAULT };
    let b = &bytes[r];
    u64::from(match op {
        region_op::CRC32 => region::crc32(b),
        region_op::HASH => region::murmur3_32(b),
        _ => region::internet_checksum(b),
    })
}

/// `hash32`.
pub extern "C" fn netvm_jit_hash32(v: u32) -> u32 {
    region::hash32(v)
}

/// `csum.upd`.
pub extern "C" fn netvm_jit_csum_upd(hc: u32, old: u32, new: u32) -> u32 {
    region::csum_update(hc, old, new)
}

/// `copro.in`: returns 0, or 1 for a coprocessor fault.
///
/// # Safety
/// `ctx` must point to a live context built by [`JitCtx::new`].
pub unsafe extern "C" fn netvm_jit_copro_in(ctx: *mut JitCtx, copro: u32, reg: u32, value: u32) -> u32 {
    // SAFETY: the caller passes its own live context.
    let ctx = unsafe { &mut *ctx };
    match unsafe { copro_at(ctx, copro) } {
        Some(c) => u32::from(c.write(reg as u8, value).is_err()),
        None => 1,
    }
}

/// `copro.out`: returns the register, or [`HELPER_FAULT`].
///
/// # Safety
/// `ctx` must point to a live context built by [`JitCtx::new`].
pub unsafe extern "C" fn netvm_jit_copro_out(ctx: *mut JitCtx, copro: u32, reg: u32) -> u64 {
    // SAFETY: the caller passes its own live context.
    let ctx = unsafe { &mut *ctx };
    match unsafe { copro_at(ctx, copro) }.map(|c| c.read(reg as u8)) {
        Some(Ok(v)) => u64::from(v),
        _ => HELPER_FAULT,
    }
}

/// `copro.invoke`: returns 0, or 1 for a coprocessor fault.
///
/// # Safety
/// `ctx` must point to a live context built by [`JitCtx::new`].
pub unsafe extern "C" fn netvm_jit_copro_invoke(ctx: *mut JitCtx, copro: u32, op: u32) -> u32 {
    // SAFETY: the caller passes its own live context.
    let ctx = unsafe { &mut *ctx };
    if u64::from(copro) >= ctx.ncopros {
        return 1;
    }
    // SAFETY: packet and info memory are distinct allocations from the
    // coprocessor instances; all three are live for the call.
    let packet: &[u8] = unsafe { ctx.memory(Mem::Packet) };
    let packet = packet as *const [u8];
    let info: &[u8] = unsafe { ctx.memory(Mem::Info) };
    let info = info as *const [u8];
    let now = ctx.ts;
    let Some(c) = (unsafe { copro_at(ctx, copro) }) else { return 1 };
    // SAFETY: see above; the shared views do not overlap the coprocessor.
    let ictx = InvokeContext { packet: unsafe { &*packet }, info: unsafe { &*info }, now };
    u32::from(c.invoke(op as u8, &ictx).is_err())
}

/// The coprocessor instance `i`, if it exists.
///
/// # Safety
/// `ctx.copros` / `ctx.ncopros` must describe the live instance vector.
unsafe fn copro_at(ctx: &mut JitCtx, i: u32) -> Option<&mut Box<dyn Coprocessor>> {
    if u64::from(i) >= ctx.ncopros {
        return None;
    }
    // SAFETY: `i` is in bounds of the live vector described by the context.
    Some(unsafe { &mut *ctx.copros.add(i as usize) })
}

/// Symbols of the helpers, for the JIT's symbol table.
pub fn helper_symbols() -> Vec<(&'static str, *const u8)> {
    vec![
        ("netvm_jit_mcopy", netvm_jit_mcopy as *const u8),
        ("netvm_jit_region", netvm_jit_region as *const u8),
        ("netvm_jit_hash32", netvm_jit_hash32 as *const u8),
        ("netvm_jit_csum_upd", netvm_jit_csum_upd as *const u8),
        ("netvm_jit_copro_in", netvm_jit_copro_in as *const u8),
        ("netvm_jit_copro_out", netvm_jit_copro_out as *const u8),
        ("netvm_jit_copro_invoke", netvm_jit_copro_invoke as *const u8),
    ]
}

/// The helpers declared in a module.
#[derive(Clone, Copy, Debug)]
pub struct Helpers {
    /// `netvm_jit_mcopy`
    pub mcopy: FuncId,
    /// `netvm_jit_region`
    pub region: FuncId,
    /// `netvm_jit_hash32`
    pub hash32: FuncId,
    /// `netvm_jit_csum_upd`
    pub csum_upd: FuncId,
    /// `netvm_jit_copro_in`
    pub copro_in: FuncId,
    /// `netvm_jit_copro_out`
    pub copro_out: FuncId,
    /// `netvm_jit_copro_invoke`
    pub copro_invoke: FuncId,
}

/// Declares the helpers as imports of `module`.
pub fn declare_helpers<M: Module>(module: &mut M) -> ModuleResult<Helpers> {
    let ptr = module.target_config().pointer_type();
    let sig = |params: &[types::Type], ret: types::Type| {
        let mut s: Signature = module.make_signature();
        s.params.extend(params.iter().map(|t| AbiParam::new(*t)));
        s.returns.push(AbiParam::new(ret));
        s
    };
    let i32t = types::I32;
    let sigs = [
        ("netvm_jit_mcopy", sig(&[ptr, i32t, i32t, i32t, i32t], i32t)),
        ("netvm_jit_region", sig(&[ptr, i32t, i32t, i32t, i32t], types::I64)),
        ("netvm_jit_hash32", sig(&[i32t], i32t)),
        ("netvm_jit_csum_upd", sig(&[i32t, i32t, i32t], i32t)),
        ("netvm_jit_copro_in", sig(&[ptr, i32t, i32t, i32t], i32t)),
        ("netvm_jit_copro_out", sig(&[ptr, i32t, i32t], types::I64)),
        ("netvm_jit_copro_invoke", sig(&[ptr, i32t, i32t], i32t)),
    ];
    let mut ids = Vec::with_capacity(sigs.len());
    for (name, s) in &sigs {
        ids.push(module.declare_function(name, Linkage::Import, s)?);
    }
    Ok(Helpers {
        mcopy: ids[0],
        region: ids[1],
        hash32: ids[2],
        csum_upd: ids[3],
        copro_in: ids[4],
        copro_out: ids[5],
        copro_invoke: ids[6],
    })
}
