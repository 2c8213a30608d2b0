//! Compile latency: the median time from a verified module to callable
//! native code (Cranelift IR construction, optimisation, code emission and
//! finalisation into executable memory), for each program given.
//!
//! ```sh
//! cargo run --release -p netvm-jit --example compile_latency -- [-n 1000] [--breakdown] PROGRAM.nil ...
//! ```
//!
//! Verification is not included (it is shared by every engine); the first
//! compilation (which builds the host ISA once per process) is excluded, and
//! so is freeing the code. Whole applications (`LinkedApp::compile` of an
//! APP.toml) are measured by `filterbench compile` (crates/bench), which can
//! read manifests.
//!
//! `--breakdown` adds, per program, the same module compiled with
//! Cranelift's `opt_level=none` (`no-opt`) and without the NetIL-level
//! domain optimisations and their analysis (`no-domain`), and the floor of
//! any compilation in stages: a fresh `JITModule`; an empty handler
//! (`return 0`) defined in it; finalised into executable memory; the same
//! with the runtime helpers registered and declared as `JitCode::compile`
//! does.

use std::time::Instant;

use cranelift_codegen::ir::InstBuilder;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module};
use netvm_jit::{DomainOpts, JitCode, JitOptions};

/// `n` timed compilations, µs each, sorted.
fn time_n(n: usize, mut compile: impl FnMut() -> Box<dyn std::any::Any>) -> Vec<f64> {
    let mut times: Vec<f64> = (0..n)
        .map(|_| {
            let t = Instant::now();
            let code = compile();
            let dt = t.elapsed().as_secs_f64() * 1e6;
            drop(code);
            dt
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times
}

fn row(name: &str, insns: usize, times: &[f64], bytes: usize) {
    let n = times.len();
    println!("{:<52} {:>6} {:>10.1} {:>8.1} {:>8.1} {:>7}", name, insns, times[n / 2], times[n / 10], times[n * 9 / 10], bytes);
}

/// How far [`floor`] goes.
#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Stage {
    /// A fresh `JITModule` and nothing in it.
    Module,
    /// An empty handler (`return 0`) compiled into it (`define_function`).
    Define,
    /// Finalised into executable memory.
    Finalize,
}

/// An empty handler (`return 0`) compiled into a fresh `JITModule` up to
/// `stage`, with the runtime helpers registered and declared if `helpers`.
/// With `reuse`, the Cranelift `Context` and `FunctionBuilderContext` are
/// kept from one call to the next (cleared, not reallocated).
fn floor(helpers: bool, stage: Stage, reuse: bool) -> JITModule {
    thread_local!(static CTX: std::cell::RefCell<Option<(cranelift_codegen::Context, FunctionBuilderContext)>> = const { std::cell::RefCell::new(None) });
    // Built once, as `JitCode::compile` takes a cached ISA: cloned here.
    thread_local!(static ISA: cranelift_codegen::isa::OwnedTargetIsa = {
        let mut flags = settings::builder();
        flags.set("opt_level", "speed").unwrap();
        flags.set("enable_verifier", "false").unwrap();
        flags.set("is_pic", "false").unwrap();
        flags.set("use_colocated_libcalls", "false").unwrap();
        cranelift_native::builder().unwrap().finish(settings::Flags::new(flags)).unwrap()
    });
    let isa = ISA.with(|i| i.clone());
    let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
    if helpers {
        for (name, ptr) in netvm_jit::context::helper_symbols() {
            builder.symbol(name, ptr);
        }
    }
    let mut module = JITModule::new(builder);
    if helpers {
        netvm_jit::context::declare_helpers(&mut module).unwrap();
    }
    if stage == Stage::Module {
        return module;
    }
    let (mut ctx, mut fctx) = match CTX.with(|c| c.borrow_mut().take()).filter(|_| reuse) {
        Some((mut ctx, f)) => {
            module.clear_context(&mut ctx);
            (ctx, f)
        }
        None => (module.make_context(), FunctionBuilderContext::new()),
    };
    ctx.func.signature = netvm_jit::translate::handler_signature(&module);
    let frontend = module.isa().frontend_config();
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let zero = b.ins().iconst(cranelift_codegen::ir::types::I32, 0);
        b.ins().return_(&[zero]);
        b.seal_all_blocks();
        b.finalize(frontend);
    }
    let id = module.declare_function("netvm_push", Linkage::Local, &ctx.func.signature).unwrap();
    module.define_function(id, &mut ctx).unwrap();
    if reuse {
        CTX.with(|c| *c.borrow_mut() = Some((ctx, fctx)));
    }
    if stage == Stage::Define {
        return module;
    }
    module.finalize_definitions().unwrap();
    std::hint::black_box(module.get_finalized_function(id));
    module
}

/// Frees a floor's code when dropped, as `JitCode` does.
struct Freed(Option<JITModule>);

impl Drop for Freed {
    fn drop(&mut self) {
        if let Some(m) = self.0.take() {
            // SAFETY: nothing holds a pointer into the module's code.
            unsafe { m.free_memory() };
        }
    }
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut n = 1000usize;
    let mut breakdown = false;
    loop {
        match args.first().map(String::as_str) {
            Some("-n") => {
                n = args.get(1).and_then(|v| v.parse().ok()).expect("-n COUNT");
                args.drain(..2);
            }
            Some("--breakdown") => {
                breakdown = true;
                args.remove(0);
            }
            _ => break,
        }
    }
    assert!(!args.is_empty() && n > 0, "usage: compile_latency [-n COUNT] [--breakdown] PROGRAM.nil ...");
    let load = |p: &str| {
        let src = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p}: {e}"));
        let m = netil::assemble(&src).unwrap_or_else(|e| panic!("{p}: {e}")).module;
        netvm_verify::verify(&m).unwrap_or_else(|e| panic!("{p}: {e}"))
    };
    let first = load(&args[0]);
    netvm_jit::JitCode::compile(&first).expect("compiles"); // builds the host ISA
    println!("{:<52} {:>6} {:>10} {:>8} {:>8} {:>7}", "program", "insns", "median µs", "p10 µs", "p90 µs", "code B");
    if breakdown {
        drop(Freed(Some(floor(true, Stage::Finalize, false))));
        for (name, helpers, stage, reuse) in [
            ("floor: JITModule::new", false, Stage::Module, false),
            ("floor: + empty handler defined", false, Stage::Define, false),
            ("floor: + finalized (empty)", false, Stage::Finalize, false),
            ("floor: + helpers registered, declared (+helpers)", true, Stage::Finalize, false),
            ("floor: +helpers, Cranelift contexts reused", true, Stage::Finalize, true),
        ] {
            let t = time_n(n, || Box::new(Freed(Some(floor(helpers, stage, reuse)))));
            row(name, 0, &t, 0);
        }
    }
    for p in &args {
        let v = load(p);
        let insns = v.push.insns.len() + v.init.as_ref().map_or(0, |s| s.insns.len());
        let variants: Vec<(String, JitOptions)> = if breakdown {
            vec![
                (p.clone(), JitOptions::default()),
                (format!("{p} no-opt"), JitOptions { optimize: false, ..JitOptions::default() }),
                (format!("{p} no-domain"), JitOptions { domain: DomainOpts::NONE, ..JitOptions::default() }),
            ]
        } else {
            vec![(p.clone(), JitOptions::default())]
        };
        for (name, opts) in variants {
            let t = time_n(n, || Box::new(JitCode::compile_with(&v, opts).expect("compiles")));
            let code = JitCode::compile_with(&v, opts).expect("compiles");
            let bytes: usize = code.code_size().iter().map(|c| c.1).sum();
            row(&name, insns, &t, bytes);
        }
    }
}
