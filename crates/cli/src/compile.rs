//! `netvm compile`: print the code the JIT generates (`--emit clif|asm`) and
//! write relocatable objects for a target (`-o OUT.o --target TRIPLE`).
//!
//! A program alone (`--program` without `--link`) shows its handlers as the
//! JIT compiles them for the per-NetPE runtime; an application (or a program
//! with `--link`) is compiled whole, as `netvm run` links it: `netvm_run`,
//! `netvm_init` and, with `--link table`, one function per NetPE.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use netvm_jit::link::{LinkMode, LinkedText};
use netvm_jit::JitOptions;
use netvm_runtime::{load_program, Application, Manifest};

use crate::{report, EXIT_ERROR, EXIT_USAGE};

/// Arguments of `netvm compile`.
#[derive(Args, Debug)]
pub struct CompileArgs {
    /// Application manifest (TOML). Give either this or --program.
    #[arg(value_name = "APP.toml", required_unless_present = "program", conflicts_with = "program")]
    app: Option<PathBuf>,
    /// A single program (.nil or .nvm): input port 0 feeds its input port 0,
    /// its output port N is application output port N.
    #[arg(long, value_name = "P.nil|P.nvm")]
    program: Option<PathBuf>,
    /// Print the generated code: Cranelift IR after optimisation (`clif`) or
    /// machine code (`asm`). The default when no -o is given: asm.
    #[arg(long, value_enum)]
    emit: Option<Emit>,
    /// How NetPEs are bound (applications; for a program, compile it as a
    /// one-NetPE application).
    #[arg(long, value_enum)]
    link: Option<ObjectLink>,
    /// Write a relocatable object with the C ABI of include/netvm.h.
    #[arg(short, long, value_name = "OUT.o")]
    output: Option<PathBuf>,
    /// Target triple of the object (and of --emit): e.g.
    /// x86_64-unknown-linux-gnu, aarch64-unknown-linux-gnu,
    /// riscv64gc-unknown-linux-gnu. Default: this host.
    #[arg(long, value_name = "TRIPLE")]
    target: Option<String>,
    /// Execution budget per handler invocation recorded in the object's
    /// `netvm_layout` (overrides the manifest).
    #[arg(long)]
    budget: Option<u64>,
}

/// Output of `netvm compile --emit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Emit {
    /// Cranelift IR after Cranelift's optimisations.
    Clif,
    /// Machine code, as disassembled by Cranelift.
    Asm,
}

/// `--link` of `netvm compile`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ObjectLink {
    /// The whole application is one function; a port crossing is a jump.
    Direct,
    /// One function per NetPE; a port crossing is a tail call through a vector table.
    Table,
}

/// Runs `netvm compile`.
pub fn cmd_compile(a: CompileArgs) -> u8 {
    let emit = a.emit.or(if a.output.is_none() { Some(Emit::Asm) } else { None });
    let opts = JitOptions { keep_text: emit.is_some(), ..JitOptions::default() };
    match (&a.app, &a.program, a.link, &a.output, &a.target) {
        (None, Some(p), None, None, None) => compile_program(p, emit.unwrap_or(Emit::Asm), opts),
        (None, None, ..) => {
            eprintln!("netvm: give either an application manifest or --program");
            EXIT_USAGE
        }
        _ => compile_app(&a, emit, opts),
    }
}

/// A program's handlers, each compiled alone.
fn compile_program(path: &Path, emit: Emit, opts: JitOptions) -> u8 {
    let verified = match load_program(path).and_then(|p| p.verify()) {
        Ok(v) => v,
        Err(e) => return report(&e),
    };
    let code = match netvm_jit::JitCode::compile_with(&verified, opts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("netvm: {}: {e}", path.display());
            return EXIT_ERROR;
        }
    };
    let texts = match emit {
        Emit::Clif => code.clif(),
        Emit::Asm => code.asm(),
    };
    let mut out = String::new();
    for ((seg, text), (_, size)) in texts.iter().zip(code.code_size()) {
        out += &format!("; {} {seg} ({size} bytes of machine code)\n{text}\n", path.display());
    }
    crate::common::stdout_write(&out).map_or_else(|code| code, |_| 0)
}

/// A whole application (or a program as one), for this host or `--target`.
fn compile_app(a: &CompileArgs, emit: Option<Emit>, opts: JitOptions) -> u8 {
    let manifest = match (&a.app, &a.program) {
        (Some(m), _) => match Manifest::load(m) {
            Ok(m) => m,
            Err(e) => return report(&e),
        },
        (None, Some(p)) => match load_program(p) {
            Ok(prog) => Manifest::single(p, &[0], prog.module.out_ports, None),
            Err(e) => return report(&e),
        },
        (None, None) => unreachable!("checked by the caller"),
    };
    let registry = netvm_copro::registry();
    let plan = match Application::plan(&manifest, &registry, a.budget) {
        Ok(p) => p,
        Err(e) => return report(&e),
    };
    let mode = match a.link {
        Some(ObjectLink::Table) => LinkMode::Table,
        _ => LinkMode::Direct,
    };
    let text = if a.output.is_some() || a.target.is_some() {
        let triple = a.target.clone().unwrap_or_else(netvm_jit::aot::host_triple);
        let obj = match netvm_jit::aot::compile_object(&plan.graph, &plan.verified, &plan.limits, mode, opts, &triple) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("netvm: {e}");
                return EXIT_ERROR;
            }
        };
        if let Some(out) = &a.output {
            if let Err(e) = std::fs::write(out, &obj.bytes) {
                eprintln!("netvm: {}: {e}", out.display());
                return EXIT_ERROR;
            }
            let code: usize = obj.text.code_size.iter().map(|(_, n)| n).sum();
            eprintln!(
                "netvm: wrote {} ({triple}, --link {}, {} NetPEs, {code} bytes of code, {} counters)",
                out.display(),
                mode.name(),
                plan.verified.len(),
                obj.layout.counters
            );
        }
        obj.text
    } else {
        match netvm_jit::link::LinkedApp::compile(&plan.graph, &plan.verified, &plan.limits, mode, opts) {
            Ok(app) => app.text().clone(),
            Err(e) => {
                eprintln!("netvm: {e}");
                return EXIT_ERROR;
            }
        }
    };
    if let Some(emit) = emit {
        print_text(&text, emit);
    }
    0
}

fn print_text(text: &LinkedText, emit: Emit) {
    let list = match emit {
        Emit::Clif => &text.clif,
        Emit::Asm => &text.asm,
    };
    let mut out = String::new();
    for ((name, body), (_, size)) in list.iter().zip(&text.code_size) {
        out += &format!("; {name} ({size} bytes of machine code)\n{body}\n");
    }
    // A closed standard output ends the command quietly.
    let _ = crate::common::stdout_write(&out);
}
