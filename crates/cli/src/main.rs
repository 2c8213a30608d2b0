//! `netvm`: assemble, disassemble, verify and run NetIL programs and
//! applications over capture files.
//!
//! Exit codes: 0 success, 1 runtime or input error, 2 usage error,
//! 3 verification failure.

mod capsule;
mod common;
mod compile;
mod ctl;
mod filter;
mod ids;
mod run;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use netvm_runtime::{load_program, RuntimeError};

/// Exit code for runtime and input errors.
pub const EXIT_ERROR: u8 = 1;
/// Exit code for usage errors.
pub const EXIT_USAGE: u8 = 2;
/// Exit code for verification failures.
pub const EXIT_VERIFY: u8 = 3;

#[derive(Parser, Debug)]
#[command(
    name = "netvm",
    version,
    propagate_version = true,
    about = "netvm: a Network Virtual Machine for portable, verified packet processing"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Assemble a NetIL listing into a binary module (.nvm).
    Asm {
        /// Input listing (.nil).
        input: PathBuf,
        /// Output module.
        #[arg(short, long)]
        output: PathBuf,
        /// Also verify the module (exit 3 if it fails).
        #[arg(long)]
        verify: bool,
    },
    /// Print a module (.nvm, or a listing) as NetIL assembly.
    Disasm {
        /// Input module.
        input: PathBuf,
    },
    /// Verify a program (.nil or .nvm); exit 3 with the broken rule if it is rejected.
    Verify {
        /// Input program.
        input: PathBuf,
    },
    /// Run a program or an application over capture files.
    Run(run::RunArgs),
    /// Compile a program or an application with Cranelift: print the
    /// generated code (--emit) or write a relocatable object (-o, --target).
    Compile(compile::CompileArgs),
    /// Filter a capture with a tcpdump-style expression (pcap-filter(7)):
    /// write the matching packets (-w), count them (--count), stop after N
    /// (-c N), or print the generated NetIL (-d). An invalid expression exits 2.
    Filter(filter::FilterArgs),
    /// NetVMSnort: compile Snort rules (a subset, see docs/ids.md) to a
    /// NetIL application, run a capture through it, write alerts as JSON lines.
    Ids(ids::IdsArgs),
    /// Talk to a running `netvm run --control PATH`: list the data path and
    /// its counters (JSON), change tables and globals, add, remove, connect
    /// and replace NetPEs or the whole application while packets flow.
    Ctl(ctl::CtlArgs),
    /// Active packets (docs/capsules.md): build capsules that carry NetIL
    /// code from a listing, and carry a capture across a path of capsule
    /// nodes that run them.
    Capsule(capsule::CapsuleArgs),
    /// Measure what an engine's work costs on this machine (nanoseconds per
    /// NetIL instruction class, per region byte, per coprocessor operation,
    /// per packet and per NetPE): the weights of admission control, as JSON.
    Calibrate {
        /// The engine.
        #[arg(long, value_enum, default_value_t = common::EngineArg::Jit)]
        engine: common::EngineArg,
        /// Rounds per figure (the median is kept).
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Write it to FILE (for `netvm run --calibration FILE`) instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let code = match cli.command {
        Command::Asm { input, output, verify } => cmd_asm(&input, &output, verify),
        Command::Disasm { input } => cmd_disasm(&input),
        Command::Verify { input } => cmd_verify(&input),
        Command::Run(args) => run::cmd_run(args),
        Command::Compile(args) => compile::cmd_compile(args),
        Command::Filter(args) => filter::cmd_filter(args),
        Command::Ids(args) => ids::cmd_ids(args),
        Command::Ctl(args) => ctl::cmd_ctl(args),
        Command::Capsule(args) => capsule::cmd_capsule(args),
        Command::Calibrate { engine, rounds, output } => cmd_calibrate(engine, rounds, output.as_deref()),
    };
    ExitCode::from(code)
}

fn cmd_calibrate(engine: common::EngineArg, rounds: usize, output: Option<&Path>) -> u8 {
    let e = common::engine(engine, common::LinkArg::Direct);
    let cal = match netvm_runtime::admission::Calibration::measure(e.as_ref(), e.name(), rounds) {
        Ok(c) => c,
        Err(err) => {
            eprintln!("netvm calibrate: {err}");
            return EXIT_ERROR;
        }
    };
    let text = serde_json::to_string_pretty(&cal).unwrap_or_default() + "\n";
    match output {
        Some(path) => match std::fs::write(path, text) {
            Ok(()) => 0,
            Err(err) => {
                eprintln!("netvm calibrate: {}: {err}", path.display());
                EXIT_ERROR
            }
        },
        None => common::stdout_write(&text).map_or_else(|code| code, |_| 0),
    }
}

/// Prints an error and returns the exit code that fits it.
pub fn report(e: &RuntimeError) -> u8 {
    eprintln!("netvm: {e}");
    match e {
        RuntimeError::Verify { .. } => EXIT_VERIFY,
        _ => EXIT_ERROR,
    }
}

fn cmd_asm(input: &Path, output: &Path, verify: bool) -> u8 {
    let prog = match load_program(input) {
        Ok(p) => p,
        Err(e) => return report(&e),
    };
    if verify {
        if let Err(e) = prog.verify() {
            return report(&e);
        }
    }
    if let Err(e) = std::fs::write(output, prog.module.to_bytes()) {
        eprintln!("netvm: {}: {e}", output.display());
        return EXIT_ERROR;
    }
    0
}

fn cmd_disasm(input: &Path) -> u8 {
    let prog = match load_program(input) {
        Ok(p) => p,
        Err(e) => return report(&e),
    };
    match netil::disassemble(&prog.module) {
        Ok(text) => common::stdout_write(&text).map_or_else(|code| code, |_| 0),
        Err((seg, e)) => {
            eprintln!("netvm: {}: segment {seg}: {e}", input.display());
            EXIT_ERROR
        }
    }
}

fn cmd_verify(input: &Path) -> u8 {
    let prog = match load_program(input) {
        Ok(p) => p,
        Err(e) => return report(&e),
    };
    match prog.verify() {
        Ok(v) => {
            let count = |s: &netvm_verify::SegmentInfo| s.insns.len();
            let init = v.init.as_ref().map_or(0, count);
            // The costliest packet, with packets of up to 64 KiB and the default budget.
            let sizes = netvm_verify::cost::Sizes { packet: 65_535, info: v.module.info_size.into(), data: v.module.data_size.into() };
            let worst = netvm_verify::cost::worst_case(&v.push, netvm_vm::DEFAULT_BUDGET, &Default::default(), &sizes);
            let bound = if worst.loops {
                format!("a loop: at most {} instructions under the default budget", worst.total_insns())
            } else {
                format!(
                    "at most {} instructions, {} coprocessor operations, {} region bytes",
                    worst.total_insns(),
                    worst.copro_ops,
                    worst.region_bytes
                )
            };
            let line = format!(
                "{}: ok ({} instructions in .push, {} in .init; max stack {}, {} locals, info {} B, data {} B, {} output ports; per packet {bound})\n",
                input.display(),
                count(&v.push),
                init,
                v.module.max_stack,
                v.module.locals,
                v.module.info_size,
                v.module.data_size,
                v.module.out_ports
            );
            common::stdout_write(&line).map_or_else(|code| code, |_| 0)
        }
        Err(e) => report(&e),
    }
}
