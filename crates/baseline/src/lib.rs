//! The baseline compiler: verified NetIL to x86-64 or AArch64 machine code
//! in one pass, in microseconds, as the SNAP JIT paper's §IV compiles SNAP.
//!
//! The verifier gives every reachable instruction one fixed operand-stack
//! depth (docs/netil.md §3), so stack slot `d` is a fixed place and each
//! instruction becomes a short fixed template over its slots: no
//! intermediate form, no register allocation, no optimisation. What
//! Cranelift takes 100-600 µs to compile takes this compiler 10-30 µs, and
//! the code it makes runs 2-4x faster than the interpreter (BENCHMARKS.md,
//! "Baseline compiler"). It is the fast tier twice over: for capsule code
//! (`netvm-capsule`), whose programs arrive at line rate and run a few
//! times, and as an [`Engine`] (`netvm run --engine baseline`) for filters
//! and applications that should start at once.
//!
//! The generated function reads the machine through the same context as
//! the JIT's per-NetPE code ([`HandlerCtx`], in `rdi`, kept in `rbx`, on
//! x86-64; in `x0`, kept in `x19`, on AArch64). The lowest stack slots are
//! callee-saved registers (r13d, r14d, r15d and ebp on x86-64; w21-w28 on
//! AArch64: the seed's mapping of fixed stack depths to registers); the
//! slots above them and the locals live in the function's own stack frame,
//! reached through `r12` (`x20`) (the verifier proves every slot and local
//! written before it is read); a few caller-saved registers are the
//! templates' scratch (`x64.rs`, `aarch64.rs`). Every memory access is checked
//! against its memory's length; division by zero, a refused edge, a bad
//! `ret.pop` port and a coprocessor error leave with the fault's code, as
//! every engine does (docs/netil.md §2.6), and a taken backward edge pays
//! [`netvm_verify::SegmentInfo::edge_cost`] from the budget first.
//! A coprocessor register in the instance's inline register file is a load
//! or a store, and an operation with a direct entry a call to it
//! (`netvm_vm::RegisterFile`, asked before every call as the JIT's
//! per-NetPE code does); other coprocessor accesses and the region
//! instructions call the run-time helpers the JIT calls
//! (`netvm_rt::helpers`), after the same checks;
//! `mcopy`, `popcnt`, `clz`, `ctz`, `hash32` and `csum.upd` call small
//! helpers of this crate. Other architectures have no baseline
//! compiler: [`compile_segment`] and the engine say so.
//!
//! The AArch64 templates are tested on x86-64 hosts under `qemu-aarch64`
//! (`scripts/test.sh` runs this crate's tests cross-compiled when the
//! cross toolchain is there).

use std::sync::Arc;

use netvm_rt::handler::{HandlerCtx, MAX_FILES};
use netvm_verify::Verified;
use netvm_vm::{Engine, EngineError, Limits, Outcome, PeCode, PeState, XbView};

/// What a handler may assume about the NetPE it runs in.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Output ports (`ret.pop` faults at or above it).
    pub out_ports: u16,
}

/// A handler's machine code as a function: the context in the first
/// argument register, the outcome's code returned (System V on x86-64).
#[cfg(target_arch = "x86_64")]
type EntryFn = unsafe extern "sysv64" fn(*mut HandlerCtx) -> u32;
/// A handler's machine code as a function: the context in x0, the
/// outcome's code in w0 (AAPCS64).
#[cfg(target_arch = "aarch64")]
type EntryFn = unsafe extern "C" fn(*mut HandlerCtx) -> u32;

/// One compiled handler: an executable buffer and its entry.
pub struct Handler {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    buf: dynasmrt::ExecutableBuffer,
    /// The function at the start of the code, taken once (`Handler::new`).
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    entry: EntryFn,
    /// Bytes of the handler's stack frame (its slots, then its locals).
    frame: usize,
    /// The coprocessor instances the handler uses, one bit each.
    copros: u64,
    /// Bytes of machine code.
    pub size: usize,
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handler").field("size", &self.size).field("frame", &self.frame).finish()
    }
}

/// A module's handlers, baseline-compiled: a [`PeCode`].
#[derive(Debug)]
pub struct BaselineCode {
    init: Option<Handler>,
    push: Handler,
    info_size: usize,
    /// The coprocessor instances the handlers use, one bit each: every
    /// call passes their inline register files.
    registers: u64,
}

impl BaselineCode {
    /// Compiles a verified module's handlers.
    pub fn compile(v: &Verified) -> Result<BaselineCode, String> {
        let shape = Shape { out_ports: v.module.out_ports };
        let init = v.init.as_ref().map(|s| compile_segment(s, shape)).transpose()?;
        let push = compile_segment(&v.push, shape)?;
        let registers = push.copros | init.as_ref().map_or(0, |h| h.copros);
        Ok(BaselineCode { init, push, info_size: v.module.info_size as usize, registers })
    }

    /// Code with only a `.push` handler (capsule code): info memory is the
    /// whole info view it is given.
    pub fn from_push(push: Handler) -> BaselineCode {
        let registers = push.copros;
        BaselineCode { init: None, push, info_size: usize::MAX, registers }
    }

    /// The `.push` handler.
    pub fn push_handler(&self) -> &Handler {
        &self.push
    }

    /// Bytes of machine code.
    pub fn size(&self) -> usize {
        self.push.size + self.init.as_ref().map_or(0, |h| h.size)
    }

    #[inline]
    fn run(&self, h: &Handler, state: &mut PeState, xb: &mut XbView<'_>, in_port: u16, limits: &Limits) -> Outcome {
        let mut files = [std::mem::MaybeUninit::uninit(); MAX_FILES];
        let mut ctx = if self.registers != 0 {
            HandlerCtx::with_registers(state, xb, in_port, self.info_size, limits.budget, &mut files, self.registers)
        } else {
            HandlerCtx::new(state, xb, in_port, self.info_size, limits.budget)
        };
        let code = h.call(&mut ctx);
        state.budget_used += limits.budget - ctx.budget_left;
        Outcome::from_code(code)
    }
}

impl PeCode for BaselineCode {
    fn init(&self, state: &mut PeState, limits: &Limits) -> Outcome {
        match &self.init {
            Some(h) => self.run(h, state, &mut XbView::empty(), 0, limits),
            None => Outcome::Exit,
        }
    }

    fn push(&self, state: &mut PeState, xb: &mut XbView<'_>, in_port: u16, limits: &Limits) -> Outcome {
        self.run(&self.push, state, xb, in_port, limits)
    }
}

impl Handler {
    /// The machine code (for disassembly).
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    pub fn machine_code(&self) -> &[u8] {
        &self.buf
    }

    /// The handler whose code `compile_segment` assembled into `buf`,
    /// starting at `start`.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn new(buf: dynasmrt::ExecutableBuffer, start: dynasmrt::AssemblyOffset, frame: usize, copros: u64) -> Handler {
        // SAFETY: `start` is the start of the function `compile_segment`
        // assembled into `buf` (finalized: executable, and on AArch64 its
        // instruction cache made coherent), whose signature is `EntryFn`.
        // The pointer stays valid while `buf` lives, which is as long as the
        // handler that holds both: the mapping does not move.
        let entry = unsafe { std::mem::transmute::<*const u8, EntryFn>(buf.ptr(start)) };
        let size = buf.len();
        Handler { buf, entry, frame, copros, size }
    }

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[inline]
    fn call(&self, ctx: &mut HandlerCtx) -> u32 {
        // SAFETY: `entry` is this handler's code (`Handler::new`), and `buf`
        // holding it lives as long as `self`. The context describes live
        // memories and coprocessors (`HandlerCtx::new`); the function touches
        // no other memory than them and its own stack frame (probed page by
        // page when it is large).
        unsafe { (self.entry)(ctx) }
    }

    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fn call(&self, _ctx: &mut HandlerCtx) -> u32 {
        unreachable!("no baseline code is compiled on this architecture")
    }
}

/// The baseline compiler as an [`Engine`]: every NetPE compiled on its own,
/// the graph walked by the runtime (`dispatch`), as the interpreter's.
#[derive(Clone, Copy, Debug, Default)]
pub struct BaselineEngine;

impl Engine for BaselineEngine {
    fn name(&self) -> &'static str {
        "baseline"
    }

    fn prepare(&self, verified: &Verified) -> Result<Arc<dyn PeCode>, EngineError> {
        if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
            return Err(EngineError::Unsupported("the baseline compiler exists for x86-64 and AArch64 only".into()));
        }
        BaselineCode::compile(verified).map(|c| Arc::new(c) as Arc<dyn PeCode>).map_err(EngineError::Codegen)
    }
}

/// Compiles one verified segment.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub fn compile_segment(_seg: &netvm_verify::SegmentInfo, _shape: Shape) -> Result<Handler, String> {
    Err("no baseline compiler for this architecture".into())
}

/// The runtime helpers generated code calls (`popcnt`, `clz`, `ctz` and
/// `hash32` as `unary`, `csum.upd`, `mcopy`'s move), in the calling
/// convention of the architecture's templates (`"sysv64"` on x86-64, `"C"`
/// on AArch64).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
macro_rules! runtime_helpers {
    ($abi:literal) => {
        /// `popcnt` (0), `clz` (1), `ctz` (2) and `hash32` (3) of `a`.
        extern $abi fn unary(which: u32, a: u32) -> u32 {
            match which {
                0 => a.count_ones(),
                1 => a.leading_zeros(),
                2 => a.trailing_zeros(),
                _ => netvm_vm::region::hash32(a),
            }
        }

        /// `csum.upd`.
        extern $abi fn csum_upd(hc: u32, old: u32, new: u32) -> u32 {
            netvm_vm::region::csum_update(hc, old, new)
        }

        /// `mcopy`'s move, after the generated code checked both ranges.
        ///
        /// # Safety
        /// `[src, src + n)` is readable and `[dst, dst + n)` writable; they may overlap.
        unsafe extern $abi fn move_bytes(dst: *mut u8, src: *const u8, n: u64) {
            // SAFETY: the caller's contract; `copy` is a memmove.
            unsafe { std::ptr::copy(src, dst, n as usize) }
        }
    };
}

/// What both architectures' compilers need to know of a segment before
/// emitting it: its deepest stack slot and its locals, and where its jumps
/// lead.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod layout {
    use dynasmrt::DynamicLabel;
    use netil::Operands;
    use netvm_verify::SegmentInfo;
    use netvm_vm::{DirectOp, RegisterFile};

    /// `struct netvm_regfile`: its size and fields (the inline register
    /// files generated code reads and writes).
    pub(crate) const FILE_SIZE: u32 = std::mem::size_of::<RegisterFile>() as u32;
    pub(crate) const FILE_INPUT: u32 = std::mem::offset_of!(RegisterFile, input) as u32;
    pub(crate) const FILE_OUTPUT: u32 = std::mem::offset_of!(RegisterFile, output) as u32;
    pub(crate) const FILE_INPUTS: u32 = std::mem::offset_of!(RegisterFile, inputs) as u32;
    pub(crate) const FILE_OUTPUTS: u32 = std::mem::offset_of!(RegisterFile, outputs) as u32;
    pub(crate) const FILE_DIRECT: u32 = std::mem::offset_of!(RegisterFile, direct) as u32;
    pub(crate) const FILE_OPS: u32 = std::mem::offset_of!(RegisterFile, ops) as u32;
    /// `struct netvm_directop`: its size and fields.
    pub(crate) const DIRECT_SIZE: u32 = std::mem::size_of::<DirectOp>() as u32;
    pub(crate) const DIRECT_CALL: u32 = std::mem::offset_of!(DirectOp, call) as u32;
    pub(crate) const DIRECT_THIS: u32 = std::mem::offset_of!(DirectOp, this) as u32;

    /// The deepest slot any reachable instruction uses (before or after
    /// it), and how many locals the code names.
    pub(crate) fn slots_and_locals(seg: &SegmentInfo) -> (u32, u32) {
        let (mut max_depth, mut locals) = (0u32, 0u32);
        for (insn, d) in seg.insns.iter().zip(&seg.depth) {
            let Some(d) = d.map(u32::from) else { continue };
            let after = d.saturating_sub(insn.op.pops()) + insn.op.pushes();
            max_depth = max_depth.max(d).max(after);
            if let Operands::Local(l) = insn.operands {
                locals = locals.max(u32::from(l) + 1);
            }
        }
        (max_depth, locals)
    }

    /// The instruction index a jump target (a byte offset) names.
    pub(crate) fn target(seg: &SegmentInfo, t: i64) -> Result<usize, String> {
        u32::try_from(t).ok().and_then(|t| seg.index_of.get(&t).copied()).ok_or_else(|| "a jump to no instruction".to_string())
    }

    /// Where a taken edge goes: straight to its target, or through a stub
    /// that pays its cost first.
    pub(crate) struct Edges {
        /// Stubs to emit after the code: (stub, cost, target).
        pub(crate) pays: Vec<(DynamicLabel, u64, DynamicLabel)>,
    }

    impl Edges {
        /// The label a taken edge of `cost` to `to` jumps to (`new_label`
        /// makes the stub's).
        pub(crate) fn dest(&mut self, cost: u32, to: DynamicLabel, new_label: impl FnOnce() -> DynamicLabel) -> DynamicLabel {
            if cost == 0 {
                return to;
            }
            let pay = new_label();
            self.pays.push((pay, u64::from(cost), to));
            pay
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub use x64::compile_segment;

#[cfg(target_arch = "x86_64")]
mod x64;

#[cfg(target_arch = "aarch64")]
pub use aarch64::compile_segment;

#[cfg(target_arch = "aarch64")]
mod aarch64;
