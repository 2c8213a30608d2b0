//! Tiers (docs/capsules.md §4): capsule code is interpreted first and
//! compiled to native code once it has run often enough to pay for the
//! compilation, as the SNAP JIT paper weighs it (Eq. 6-7: compile when
//! `a·T_I > T_C + a·T_E`, `a` the runs still to come).
//!
//! The node measures, per program in its code cache, the interpreter's
//! time per run (`T_I`, sampled), and estimates the compilation time from
//! the compilations it has done (`T_C`, per instruction) and the native
//! time as a fraction of `T_I` (`T_E`, measured once a program is
//! compiled). Taking the runs so far as the forecast of the runs to come
//! (`a` = runs), a program is compiled when `runs · (T_I − T_E) > T_C`.
//!
//! The first compiler is the one-pass baseline compiler ([`crate::baseline`],
//! x86-64 and AArch64: microseconds per program); Cranelift ([`compile`]) is the other
//! (hundreds of microseconds; `tier = "cranelift"`, and where there is no
//! baseline compiler).
//!
//! Cranelift compilation builds a NetIL module around the code (coprocessors 0 `ess`
//! and 1 `env`, a 256-byte info memory, two ports), verifies it again with
//! the full NetIL verifier, gives its segment the capsule weights (so that
//! a backward edge charges exactly what the interpreter charges) and
//! compiles it with Cranelift. Results are the same in every tier: the
//! differential tests run generated capsules in both.

use std::sync::Arc;
use std::time::{Duration, Instant};

use netil::{CoproDecl, Module, Operands};
use netvm_vm::{Engine, PeCode};

use crate::profile::{CostModel, LOCALS, MAX_STACK};
use crate::wire::MAX_SCRATCH;

/// When capsule code is compiled, and by which compiler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TierPolicy {
    /// Never: every capsule is interpreted.
    Interpret,
    /// At once, with the one-pass baseline compiler ([`crate::baseline`]).
    Baseline,
    /// At once, with Cranelift.
    Cranelift,
    /// With the baseline compiler, when it pays (the module documentation);
    /// Cranelift where the baseline compiler does not exist.
    Auto,
}

/// Which compiler compiled a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compiler {
    /// The one-pass baseline compiler.
    Baseline,
    /// Cranelift.
    Cranelift,
}

/// Compiles capsule code with `compiler`.
pub fn compile_with(compiler: Compiler, code: &[u8], entry: u16, costs: &CostModel) -> Result<Arc<dyn PeCode>, String> {
    match compiler {
        Compiler::Baseline => crate::baseline::compile(code, entry, costs).map(|c| c as Arc<dyn PeCode>),
        Compiler::Cranelift => compile(code, entry, costs),
    }
}

/// Compiles capsule code (from its entry point) for the native tier.
pub fn compile(code: &[u8], entry: u16, costs: &CostModel) -> Result<Arc<dyn PeCode>, String> {
    let body = code.get(usize::from(entry)..).ok_or("entry point past the code")?;
    let module = Module {
        // The `.push` convention puts the input port below the capsule's own values.
        max_stack: MAX_STACK + 1,
        locals: LOCALS,
        info_size: MAX_SCRATCH as u32,
        data_size: 0,
        out_ports: 2,
        copros: vec![CoproDecl { name: "ess".into(), kind: "ess".into() }, CoproDecl { name: "env".into(), kind: "env".into() }],
        init: None,
        push: Some(body.to_vec()),
        interface: Default::default(),
    };
    let mut verified = netvm_verify::verify(&module).map_err(|e| format!("the NetIL verifier refuses capsule code: {e}"))?;
    // The capsule weights; instructions that never run weigh nothing, as
    // in the capsule verifier.
    let seg = &verified.push;
    let weights = seg
        .insns
        .iter()
        .enumerate()
        .map(|(i, insn)| {
            if !seg.is_reachable(i) {
                return 0;
            }
            match insn.operands {
                Operands::CoproOp { copro, .. } => costs.invoke.get(usize::from(copro)).copied().unwrap_or(u32::MAX),
                _ => costs.weights[insn.op as usize],
            }
        })
        .collect();
    verified.push.weights = Some(weights);
    let engine = netvm_jit::JitEngine::with_link(None);
    engine.prepare(&verified).map_err(|e| e.to_string())
}

/// Native code of one program, with what compiling it cost.
pub struct Native {
    /// The compiled handler.
    pub code: Arc<dyn PeCode>,
    /// Time to compile it.
    pub compile: Duration,
}

impl std::fmt::Debug for Native {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Native").field("compile", &self.compile).finish()
    }
}

/// What a node learns about the tiers' costs, to decide when to compile.
#[derive(Clone, Copy, Debug)]
pub struct TierModel {
    /// Compilation time per instruction (ns), from the compilations so far.
    pub compile_ns_per_insn: f64,
    /// Fixed compilation time per program (ns).
    pub compile_ns_base: f64,
    /// Native time as a fraction of interpreted time, from compiled programs.
    pub native_fraction: f64,
    compiles: u64,
}

impl Default for TierModel {
    /// The baseline compiler on this project's machine: ~10 µs a program
    /// (most of it mapping executable memory), well under a µs an
    /// instruction; native code ~1/2 of the interpreter's time (the first
    /// figures, replaced by what the node measures).
    fn default() -> TierModel {
        TierModel { compile_ns_per_insn: 200.0, compile_ns_base: 10_000.0, native_fraction: 0.5, compiles: 0 }
    }
}

impl TierModel {
    /// The estimated time to compile a program of `insns` instructions (ns).
    pub fn compile_ns(&self, insns: usize) -> f64 {
        self.compile_ns_base + self.compile_ns_per_insn * insns as f64
    }

    /// Whether a program that ran `runs` times, `interp_ns` each, pays for
    /// its compilation: `runs · (T_I − T_E) > T_C`.
    pub fn pays(&self, runs: u64, interp_ns: f64, insns: usize) -> bool {
        runs as f64 * interp_ns * (1.0 - self.native_fraction) > self.compile_ns(insns)
    }

    /// Learns from a compilation of `insns` instructions that took `took`.
    pub fn compiled(&mut self, insns: usize, took: Duration) {
        // Spread what was measured over the base and the instructions as
        // the current estimate does, and average (the first one replaces
        // the defaults).
        let est = self.compile_ns(insns);
        let scale = took.as_nanos() as f64 / est.max(1.0);
        let w = if self.compiles == 0 { 1.0 } else { 0.25 };
        self.compile_ns_base *= 1.0 + w * (scale - 1.0);
        self.compile_ns_per_insn *= 1.0 + w * (scale - 1.0);
        self.compiles += 1;
    }

    /// Learns the native time of a program whose interpreted time was `interp_ns`.
    pub fn measured(&mut self, interp_ns: f64, native_ns: f64) {
        if interp_ns > 0.0 {
            let f = (native_ns / interp_ns).clamp(0.01, 1.0);
            self.native_fraction = 0.75 * self.native_fraction + 0.25 * f;
        }
    }
}

/// Times `f` (one run).
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed().as_nanos() as f64)
}
