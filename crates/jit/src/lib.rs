//! The netvm JIT: verified NetIL modules compiled to native code with
//! Cranelift, with exactly the semantics of docs/netil.md (the reference
//! interpreter in `netvm-interp` is the oracle it is tested against).
//!
//! - [`analysis`]: the NetIL-level analysis behind the domain
//!   optimisations (value ranges, exact header-offset arithmetic,
//!   packet-length facts);
//! - [`translate`]: NetIL → Cranelift IR. The operand stack and the locals
//!   become SSA variables (the verifier proves the stack depth at every
//!   instruction), memories are reached through views the caller provides,
//!   and every bounds check, division check and budget charge of the
//!   interpreter is kept, except the bounds checks the analysis proves
//!   redundant;
//! - [`context`]: the execution context of a single handler, the outcome
//!   encoding, and the C-ABI helpers compiled code calls;
//! - [`JitCode`]: one compiled module (its `.init` and `.push` handlers),
//!   implementing [`netvm_vm::PeCode`];
//! - [`link`]: a whole application compiled into one function that runs a
//!   batch of packets through its NetPEs (`--link direct`), or into one
//!   function per NetPE joined through a vector table (`--link table`);
//! - [`aot`]: the same application code written to a relocatable object
//!   for any supported target, with the C ABI of include/netvm.h;
//! - [`parallel`]: independent functions (NetPEs) compiled on several
//!   threads (`NETVM_JIT_THREADS`), with the same code as on one.
//!
//! The same translation targets every ISA Cranelift supports (x86-64,
//! aarch64, riscv64): only instruction selection differs.

pub mod analysis;
pub mod aot;
pub mod context;
pub mod link;
pub mod parallel;
pub mod translate;

use std::sync::{Arc, OnceLock};

use cranelift_codegen::ir::{types, InstBuilder};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::FunctionBuilder;
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module as _};
use netil::SegmentKind;
use netvm_verify::Verified;
use netvm_vm::{Limits, Outcome, PeCode, PeState, XbView};

pub use context::HandlerCtx;

/// Why a module could not be compiled. These are bugs or host limits, never
/// properties of a verified program.
#[derive(Debug, thiserror::Error)]
pub enum JitError {
    /// Cranelift could not create an ISA for this host or the target asked for.
    #[error("no Cranelift backend for {0}")]
    Isa(String),
    /// Cranelift rejected the generated IR or failed to emit it.
    #[error("code generation failed: {0}")]
    Codegen(String),
}

/// The NetIL-level domain optimisations, each of which can be switched off
/// to measure it or to test that it changes nothing but the code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DomainOpts {
    /// Constant byte-order swap: an equality test of a big-endian load with
    /// a constant compares the raw load with the swapped constant (NetVM
    /// paper §5.1, Fig. 8).
    pub bswap_const: bool,
    /// Bounds-check merging: packet accesses covered by a dominating check
    /// or an explicit length test are not checked again (see [`analysis`]).
    pub bounds: bool,
    /// Offset folding: header-offset arithmetic proved not to wrap is
    /// reassociated into the 64-bit address, so its constant part becomes an
    /// addressing-mode displacement (NetVM paper Figs. 5 and 7).
    pub fold_offsets: bool,
    /// Dead info stores: in a linked application, a store to info memory at a
    /// constant offset that neither its NetPE nor any NetPE downstream reads
    /// is removed (info memory never leaves the application).
    pub dead_info_stores: bool,
    /// Inline walks: a coprocessor operation the instance offers as a walk
    /// ([`netvm_vm::WalkKind`]: the `lpm` kind's IPv4 lookups as a DIR-24-8
    /// walk, the `table` kind's packet-key lookups and replaces as a cuckoo
    /// hash probe) is performed by the generated code, without a call.
    pub inline_walks: bool,
    /// Vector tag compares: an inline cuckoo probe compares a bucket's eight
    /// tags with one vector instruction on targets that have one (x86-64,
    /// AArch64); off, with the scalar test every other target uses.
    pub vector_tags: bool,
}

impl DomainOpts {
    /// Every optimisation on (the default).
    pub const ALL: DomainOpts =
        DomainOpts { bswap_const: true, bounds: true, fold_offsets: true, dead_info_stores: true, inline_walks: true, vector_tags: true };
    /// Every optimisation off.
    pub const NONE: DomainOpts = DomainOpts {
        bswap_const: false,
        bounds: false,
        fold_offsets: false,
        dead_info_stores: false,
        inline_walks: false,
        vector_tags: false,
    };

    /// Whether the analysis is needed at all.
    fn analyse(self) -> bool {
        self.bounds || self.fold_offsets || self.dead_info_stores
    }
}

impl Default for DomainOpts {
    fn default() -> Self {
        DomainOpts::ALL
    }
}

/// Options of the code generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JitOptions {
    /// Cranelift optimisation level `speed` (otherwise `none`).
    pub optimize: bool,
    /// Run Cranelift's IR verifier on every function (on in debug builds).
    pub verify_ir: bool,
    /// Keep the text of the generated code ([`JitCode::clif`], [`JitCode::asm`]).
    pub keep_text: bool,
    /// NetIL-level domain optimisations.
    pub domain: DomainOpts,
    /// Threads compiling independent functions (NetPEs) at once; `0`: the
    /// environment variable `NETVM_JIT_THREADS`, else the host's available
    /// parallelism (see [`parallel`]). The code is the same for every value.
    pub threads: usize,
    /// Functions of at least this many Cranelift instructions (before
    /// optimisation) use Cranelift's single-pass register allocator instead
    /// of the backtracking one, without optimisation: much faster to
    /// compile (see [`FAST_REGALLOC_INSTS`], the default unless
    /// `NETVM_JIT_FAST_REGALLOC` says otherwise); `usize::MAX`: never.
    pub fast_regalloc_insts: usize,
}

impl Default for JitOptions {
    fn default() -> Self {
        JitOptions {
            optimize: true,
            verify_ir: cfg!(debug_assertions),
            keep_text: false,
            domain: DomainOpts::ALL,
            threads: 0,
            fast_regalloc_insts: default_fast_regalloc_insts(),
        }
    }
}

/// Analyses a segment for the domain optimisations `opts` (nothing when all are off).
pub(crate) fn segment_facts(
    seg: &netvm_verify::SegmentInfo,
    m: &netil::Module,
    opts: DomainOpts,
    sizes: analysis::KnownSizes,
) -> analysis::SegmentFacts {
    if opts.analyse() {
        analysis::analyse(seg, m, sizes)
    } else {
        analysis::SegmentFacts::none(seg.insns.len())
    }
}

/// The default of [`JitOptions::fast_regalloc_insts`]. Functions this large
/// are the detect NetPEs of `netvm ids` on large rule sets (ET open 2017:
/// 13 functions of 400,000-456,000 Cranelift instructions, 80,000 blocks
/// each; ordinary programs and the other NetPEs have at most a few
/// thousand). On them regalloc2's backtracking allocator takes most of the
/// compile time (superlinear there: live ranges are split and requeued
/// again and again), the single-pass one is linear. Measured on ET open
/// 2017, 2 threads: Cranelift 17.9 s -> 5.4 s, peak memory 1.55 -> 0.94
/// GiB, packet processing about 5% slower (medians of 6 runs of 1M packets:
/// 0.73 -> 0.70 Gbit/s, within the run-to-run spread of about 10%).
/// `opt_level=none` instead of the single-pass allocator compiles slower
/// (the unoptimised IR is larger for the backtracking allocator) and runs
/// slower. With it, on top of the single-pass allocator, it is faster on
/// both counts, so large functions get both: Cranelift's e-graph pass
/// costs a third of the compile time there, and what it finds in code made
/// of short rule checks between coprocessor calls does not pay for the
/// extra live values the single-pass allocator then spills. Measured at
/// git f915061 (2 threads, 100,000 packets of the protocol mix, 2 runs
/// each): ET open 2017 (16,056 rules) Cranelift 6.1 -> 4.3 s, processing
/// 3.07 -> 2.98 us per packet; Snort 3 community (3,956 rules) 1.51 ->
/// 1.03 s, 2.9 -> 2.3 us per packet.
pub const FAST_REGALLOC_INSTS: usize = 100_000;

/// The environment variable that overrides [`FAST_REGALLOC_INSTS`] in
/// [`JitOptions::default`]: a number of instructions, or `off` (never).
pub const FAST_REGALLOC_VAR: &str = "NETVM_JIT_FAST_REGALLOC";

/// [`JitOptions::fast_regalloc_insts`] by default: [`FAST_REGALLOC_VAR`] if
/// set and valid, else [`FAST_REGALLOC_INSTS`].
fn default_fast_regalloc_insts() -> usize {
    static DEFAULT: OnceLock<usize> = OnceLock::new();
    *DEFAULT.get_or_init(|| match std::env::var(FAST_REGALLOC_VAR) {
        Ok(v) if v.trim() == "off" => usize::MAX,
        Ok(v) => v.trim().parse().unwrap_or(FAST_REGALLOC_INSTS),
        Err(_) => FAST_REGALLOC_INSTS,
    })
}

/// Cranelift's shared settings for netvm code. `frame_pointers`: keep frame
/// pointers, which Cranelift's tail calls need (`--link table`); `pic`:
/// position-independent code (objects linked into PIE programs);
/// `single_pass`: Cranelift's single-pass register allocator (otherwise the
/// backtracking one).
fn isa_flags(optimize: bool, verify: bool, frame_pointers: bool, pic: bool, single_pass: bool) -> Result<settings::Flags, String> {
    let mut flags = settings::builder();
    let mut set = |k: &str, v: bool| flags.set(k, if v { "true" } else { "false" }).map_err(|e| format!("{k}: {e}"));
    set("preserve_frame_pointers", frame_pointers)?;
    set("enable_verifier", verify)?;
    set("is_pic", pic)?;
    set("use_colocated_libcalls", false)?;
    flags.set("opt_level", if optimize { "speed" } else { "none" }).map_err(|e| e.to_string())?;
    flags.set("regalloc_algorithm", if single_pass { "single_pass" } else { "backtracking" }).map_err(|e| e.to_string())?;
    Ok(settings::Flags::new(flags))
}

/// The host ISA, built once per process and option set. `frame_pointers`:
/// keep frame pointers, which Cranelift's tail calls need (`--link table`);
/// `single_pass`: the single-pass register allocator.
fn host_isa(opts: JitOptions, frame_pointers: bool, single_pass: bool) -> Result<OwnedTargetIsa, JitError> {
    static CACHE: OnceLock<Result<[OwnedTargetIsa; 16], String>> = OnceLock::new();
    let isas = CACHE.get_or_init(|| {
        let mut out = Vec::with_capacity(16);
        for k in 0..16u8 {
            let (sp, fp, optimize, verify) = (k & 8 != 0, k & 4 != 0, k & 2 != 0, k & 1 != 0);
            let flags = isa_flags(optimize, verify, fp, false, sp)?;
            out.push(cranelift_native::builder().map_err(|e| e.to_string())?.finish(flags).map_err(|e| e.to_string())?);
        }
        out.try_into().map_err(|_| "ISA list".to_string())
    });
    let k = usize::from(single_pass) * 8 + usize::from(frame_pointers) * 4 + usize::from(opts.optimize) * 2 + usize::from(opts.verify_ir);
    match isas {
        Ok(list) => Ok(list[k].clone()),
        Err(e) => Err(JitError::Isa(format!("this host: {e}"))),
    }
}

/// The host ISAs for `opts` (see [`host_isa`]).
pub(crate) fn host_isas(opts: JitOptions, frame_pointers: bool) -> Result<Isas, JitError> {
    Ok(Isas {
        isa: host_isa(opts, frame_pointers, false)?,
        // Large functions: single-pass allocation, no e-graph optimisation (see FAST_REGALLOC_INSTS).
        large: host_isa(JitOptions { optimize: false, ..opts }, frame_pointers, true)?,
        large_insts: opts.fast_regalloc_insts,
    })
}

/// The ISAs of a target triple (for AOT objects): position-independent code.
pub(crate) fn target_isas(triple: &str, opts: JitOptions, frame_pointers: bool) -> Result<Isas, JitError> {
    let t: target_lexicon::Triple = triple.parse().map_err(|e| JitError::Isa(format!("target {triple}: {e}")))?;
    let builder = cranelift_codegen::isa::lookup(t).map_err(|e| JitError::Isa(format!("target {triple}: {e}")))?;
    let isa = |single_pass: bool| {
        let flags = isa_flags(opts.optimize && !single_pass, opts.verify_ir, frame_pointers, true, single_pass).map_err(JitError::Isa)?;
        builder.finish(flags).map_err(|e| JitError::Isa(format!("target {triple}: {e}")))
    };
    Ok(Isas { isa: isa(false)?, large: isa(true)?, large_insts: opts.fast_regalloc_insts })
}

/// The ISAs the functions of one Cranelift module are compiled with: the
/// module's own, and the same but with the single-pass register allocator
/// and no optimisation for functions of at least
/// [`JitOptions::fast_regalloc_insts`] instructions.
#[derive(Clone)]
pub struct Isas {
    /// The module's ISA.
    pub(crate) isa: OwnedTargetIsa,
    /// For large functions.
    pub(crate) large: OwnedTargetIsa,
    /// From how many Cranelift instructions a function is large.
    pub(crate) large_insts: usize,
}

impl std::fmt::Debug for Isas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Isas").field("isa", &self.isa.triple()).field("large_insts", &self.large_insts).finish()
    }
}

impl Isas {
    /// The ISA a function of `insts` Cranelift instructions is compiled with.
    pub(crate) fn for_size(&self, insts: usize) -> &dyn cranelift_codegen::isa::TargetIsa {
        if insts >= self.large_insts {
            &*self.large
        } else {
            &*self.isa
        }
    }
}

/// A compiled handler: `extern "C" fn(*mut HandlerCtx) -> u32` (see [`Outcome::from_code`]).
pub type HandlerFn = unsafe extern "C" fn(*mut HandlerCtx) -> u32;

/// Owns the executable memory of one compiled module.
pub(crate) struct CodeMemory {
    pub(crate) module: Option<JITModule>,
}

impl Drop for CodeMemory {
    fn drop(&mut self) {
        if let Some(m) = self.module.take() {
            // SAFETY: the function pointers into this memory live in the same
            // `JitCode` as this `CodeMemory` and are dropped with it; nothing
            // can call them afterwards.
            unsafe { m.free_memory() };
        }
    }
}

// SAFETY: after `finalize_definitions` the module is never mutated again; the
// code it holds is immutable and position-independent of any thread, so it
// may be shared and called from several threads at once.
unsafe impl Send for CodeMemory {}
// SAFETY: see `Send`: no method taking `&self` mutates anything.
unsafe impl Sync for CodeMemory {}

/// A verified module compiled to native code.
pub struct JitCode {
    init: Option<HandlerFn>,
    push: HandlerFn,
    info_size: usize,
    /// The instances the module's coprocessor instructions use (one bit
    /// each): calls pass their register files.
    registers: u64,
    /// Cranelift IR of each compiled segment after optimisation, for `--emit clif`.
    clif: Vec<(SegmentKind, String)>,
    /// Machine code of each compiled segment as text, for `--emit asm`.
    asm: Vec<(SegmentKind, String)>,
    /// Size of the machine code of each compiled segment, in bytes.
    code_size: Vec<(SegmentKind, usize)>,
    _memory: Arc<CodeMemory>,
}

impl std::fmt::Debug for JitCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitCode").field("code_size", &self.code_size).finish()
    }
}

impl JitCode {
    /// Compiles a verified module with default options.
    pub fn compile(v: &Verified) -> Result<JitCode, JitError> {
        Self::compile_with(v, JitOptions::default())
    }

    /// Compiles a verified module.
    pub fn compile_with(v: &Verified, opts: JitOptions) -> Result<JitCode, JitError> {
        let isas = host_isas(opts, false)?;
        let mut builder = JITBuilder::with_isa(isas.isa.clone(), default_libcall_names());
        for (name, ptr) in context::helper_symbols() {
            builder.symbol(name, ptr);
        }
        let mut module = JITModule::new(builder);
        let mut fctx = cranelift_frontend::FunctionBuilderContext::new();
        let helpers = context::declare_helpers(&mut module).map_err(|e| JitError::Codegen(e.to_string()))?;
        let segs: Vec<_> = [v.init.as_ref(), Some(&v.push)].into_iter().flatten().collect();
        // `.init` and `.push` are compiled in parallel if both are large (see `parallel`).
        let (ids, defined) = parallel::with_codegen(&mut module, &isas, &opts, |module, codegen| {
            let mut ids = Vec::new();
            for seg in &segs {
                let mut ctx = module.make_context();
                ctx.func.signature = translate::handler_signature(module);
                let facts = segment_facts(seg, &v.module, opts.domain, analysis::KnownSizes::default());
                let ptr = module.target_config().pointer_type();
                let frontend = module.isa().frontend_config();
                {
                    let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
                    let entry = b.create_block();
                    b.append_block_params_for_function_params(entry);
                    b.switch_to_block(entry);
                    let env = handler_env(&mut b, entry, ptr, seg.kind);
                    let mut cx = translate::FuncCx::new(module, helpers, opts.domain);
                    translate::translate_segment(&mut b, &mut cx, seg, &v.module, &facts, &[], env);
                    b.seal_all_blocks();
                    b.finalize(frontend);
                }
                let name = match seg.kind {
                    SegmentKind::Init => "netvm_init",
                    SegmentKind::Push => "netvm_push",
                };
                let id =
                    module.declare_function(name, Linkage::Local, &ctx.func.signature).map_err(|e| JitError::Codegen(e.to_string()))?;
                codegen.submit(module, id, name, ctx)?;
                ids.push((seg.kind, id));
            }
            Ok(ids)
        })?;
        let code_size = segs.iter().zip(&defined).map(|(s, d)| (s.kind, d.size)).collect();
        let (mut clif, mut asm) = (Vec::new(), Vec::new());
        if opts.keep_text {
            for (s, d) in segs.iter().zip(defined) {
                clif.push((s.kind, d.clif.unwrap_or_default()));
                asm.push((s.kind, d.asm.unwrap_or_default()));
            }
        }
        module.finalize_definitions().map_err(|e| JitError::Codegen(e.to_string()))?;
        let mut init = None;
        let mut push = None;
        for (kind, id) in ids {
            let ptr = module.get_finalized_function(id);
            // SAFETY: `ptr` is the entry of a function just compiled with the
            // signature `handler_signature` (one pointer argument, one i32
            // result, the host's default calling convention), which is
            // `extern "C" fn(*mut HandlerCtx) -> u32` on every supported host.
            let f: HandlerFn = unsafe { std::mem::transmute::<*const u8, HandlerFn>(ptr) };
            match kind {
                SegmentKind::Init => init = Some(f),
                SegmentKind::Push => push = Some(f),
            }
        }
        Ok(JitCode {
            init,
            push: push.expect("a verified module has a .push segment"),
            info_size: v.module.info_size as usize,
            registers: segs.iter().fold(0, |m, s| m | s.copros_used()),
            clif,
            asm,
            code_size,
            _memory: Arc::new(CodeMemory { module: Some(module) }),
        })
    }

    /// The Cranelift IR of each compiled segment, after Cranelift's
    /// optimisations (empty unless compiled with [`JitOptions::keep_text`]).
    pub fn clif(&self) -> &[(SegmentKind, String)] {
        &self.clif
    }

    /// The machine code of each compiled segment, as Cranelift's
    /// disassembly of its final instructions (empty unless compiled with
    /// [`JitOptions::keep_text`]).
    pub fn asm(&self) -> &[(SegmentKind, String)] {
        &self.asm
    }

    /// Machine-code size of each compiled segment.
    pub fn code_size(&self) -> &[(SegmentKind, usize)] {
        &self.code_size
    }

    #[inline]
    fn call(&self, f: HandlerFn, state: &mut PeState, xb: &mut XbView<'_>, in_port: u16, limits: &Limits) -> Outcome {
        let mut files = [std::mem::MaybeUninit::uninit(); netvm_rt::handler::MAX_FILES];
        let mut ctx = if self.registers != 0 {
            HandlerCtx::with_registers(state, xb, in_port, self.info_size, limits.budget, &mut files, self.registers)
        } else {
            HandlerCtx::new(state, xb, in_port, self.info_size, limits.budget)
        };
        // SAFETY: `ctx` points into `state` and `xb`, which are exclusively
        // borrowed for the whole call, so the raw pointers in it stay valid
        // and unaliased; the compiled code only accesses memory inside the
        // bounds recorded in `ctx` (every access is checked) and calls the
        // helpers of `context`, which uphold the same contract.
        let raw = unsafe { f(&mut ctx) };
        state.budget_used += limits.budget - ctx.budget_left;
        Outcome::from_code(raw)
    }
}

/// The environment of a single handler: everything is read from its
/// [`HandlerCtx`] (the function's one parameter) in the entry block.
fn handler_env(b: &mut FunctionBuilder, entry: cranelift_codegen::ir::Block, ptr: types::Type, kind: SegmentKind) -> translate::SegmentEnv {
    use context::offsets as o;
    let c = b.block_params(entry)[0];
    let flags = translate::ctx_flags();
    let mut ld = |ty, off| b.ins().load(ty, flags, c, off);
    let mem = |base, len| translate::MemView { base, len };
    let mems = [
        mem(ld(ptr, o::PKT), ld(types::I64, o::PKT_LEN)),
        mem(ld(ptr, o::INFO), ld(types::I64, o::INFO_LEN)),
        mem(ld(ptr, o::DATA), ld(types::I64, o::DATA_LEN)),
    ];
    let copros = (ld(ptr, o::COPROS), ld(types::I64, o::NCOPROS));
    let regs = (ld(ptr, o::REGS), Some(ld(types::I64, o::NREGS)));
    let budget = ld(types::I64, o::BUDGET);
    let push = kind == SegmentKind::Push;
    let in_port = push.then(|| ld(types::I32, o::IN_PORT));
    let meta = push.then_some(translate::MetaView { base: c, wirelen: o::WIRE_LEN, ts_sec: o::TS_SEC, ts_nsec: o::TS_NSEC, seq: o::SEQ });
    let exits = translate::ExitMode::Return { budget_out: Some((c, o::BUDGET_LEFT)) };
    // A NetPE compiled alone knows nothing of its instances.
    translate::SegmentEnv { mems, copros, regs, meta, in_port, budget, exits, walk_shapes: [0; translate::SHAPED_SLOTS] }
}

impl PeCode for JitCode {
    fn init(&self, state: &mut PeState, limits: &Limits) -> Outcome {
        match self.init {
            Some(f) => self.call(f, state, &mut XbView::empty(), 0, limits),
            None => Outcome::Exit,
        }
    }

    fn push(&self, state: &mut PeState, xb: &mut XbView<'_>, in_port: u16, limits: &Limits) -> Outcome {
        self.call(self.push, state, xb, in_port, limits)
    }
}

/// The Cranelift JIT as an [`Engine`](netvm_vm::Engine). With a
/// [`LinkMode`](link::LinkMode), it compiles whole applications (the
/// default: [`LinkMode::Direct`](link::LinkMode::Direct)); without one,
/// each NetPE alone, and the runtime walks the graph (`dispatch`).
#[derive(Clone, Copy, Debug)]
pub struct JitEngine {
    /// How NetPEs are bound; `None` for the runtime's graph walk.
    pub link: Option<link::LinkMode>,
    /// Code-generation options.
    pub opts: JitOptions,
    /// Computation batching of linked applications.
    pub batching: link::Batching,
}

impl Default for JitEngine {
    fn default() -> Self {
        JitEngine { link: Some(link::LinkMode::Direct), opts: JitOptions::default(), batching: link::Batching::default() }
    }
}

impl JitEngine {
    /// The JIT binding NetPEs as `link` says (`None`: the runtime dispatches).
    pub fn with_link(link: Option<link::LinkMode>) -> JitEngine {
        JitEngine { link, ..JitEngine::default() }
    }
}

impl From<JitError> for netvm_vm::EngineError {
    fn from(e: JitError) -> Self {
        match e {
            JitError::Isa(isa) => netvm_vm::EngineError::Unsupported(format!("no Cranelift backend for {isa}")),
            JitError::Codegen(m) => netvm_vm::EngineError::Codegen(m),
        }
    }
}

impl netvm_vm::Engine for JitEngine {
    fn name(&self) -> &'static str {
        "jit"
    }

    fn prepare(&self, verified: &Verified) -> Result<Arc<dyn PeCode>, netvm_vm::EngineError> {
        Ok(Arc::new(JitCode::compile_with(verified, self.opts)?))
    }

    /// The modules compiled on up to [`parallel::threads`] threads at once
    /// (on this one if they are small: fewer NetIL instructions in all than
    /// a function [`parallel`] would compile here).
    fn prepare_all(&self, modules: &[Verified]) -> Result<Vec<Arc<dyn PeCode>>, (usize, netvm_vm::EngineError)> {
        let insns: usize = modules.iter().flat_map(|v| v.init.iter().chain([&v.push])).map(|s| s.insns.len()).sum();
        let threads = if insns < parallel::inline_insts() { 1 } else { parallel::threads(&self.opts) };
        parallel::map_ordered(modules, threads, |v| JitCode::compile_with(v, self.opts).map(|c| Arc::new(c) as Arc<dyn PeCode>))
            .map_err(|(i, e)| (i, e.into()))
    }

    fn link(
        &self,
        graph: &netvm_vm::graph::AppGraph,
        modules: &[Verified],
        limits: &Limits,
    ) -> Option<Result<Box<dyn netvm_vm::graph::LinkedCode>, netvm_vm::EngineError>> {
        let mode = self.link?;
        Some(
            link::LinkedApp::compile(graph, modules, limits, mode, self.opts)
                .map(|mut a| {
                    a.set_batching(self.batching);
                    Box::new(a) as Box<dyn netvm_vm::graph::LinkedCode>
                })
                .map_err(Into::into),
        )
    }

    fn link_name(&self) -> &'static str {
        self.link.map_or("dispatch", link::LinkMode::name)
    }
}
