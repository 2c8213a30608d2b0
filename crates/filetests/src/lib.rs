//! The conformance suite: one format, one harness, every engine.
//!
//! A test file is a NetIL listing (`tests/programs/*.nil`, directives in
//! `;` comments) or an application manifest (`tests/apps/*.toml`, its
//! programs beside it, directives in `#` comments). The harness
//! (`tests/suite.rs`, one test per file: `cargo test -p netvm-filetests
//! NAME`) runs the file on the interpreter, the oracle, and on every other
//! engine the file names ([`EngineKind`]), and checks that each gives what
//! the file states and exactly what the interpreter gives: verdict, output
//! ports and the bytes that left, in order, packet bytes, info memory
//! (per-NetPE engines: it never leaves an application), every NetPE's data
//! memory, coprocessor results (through the memories they are read into),
//! fault kind, and budget consumed.
//!
//! ```text
//! ; engines: all | NAME... | all -NAME...   (default all: interp, baseline, jit, jit-no-bswap-const,
//!                                           jit-no-bounds, jit-no-fold-offsets, jit-no-inline-walks,
//!                                           jit-scalar-tags,
//!                                           linked-direct, linked-table,
//!                                           linked-direct-no-dead-info-stores, aot-x86_64, aot-aarch64)
//! ; run: INPUTS -> RESULT CHECKS
//!     INPUTS  packet=HEX [wire=N] [inport=N] [ts=SEC.NSEC] [budget=N] [info=HEX]
//!     RESULT  NetIL files: port N | drop | fault KIND
//!             applications: sink N [packet=HEX], sink M ... | drop | fault KIND | none
//!     CHECKS  [packet=HEX] [info=HEX] [data@[NETPE@]OFF=HEX] [used=N]
//! ; verify: error RULE [at [.init+]OFFSET]  (the listing must be rejected so)
//! ; init: -> fault KIND [in NETPE]         (an .init handler must fail so)
//! ; copro: NAME KEY=VALUE ...              (a coprocessor's configuration, NetIL files)
//! ; clif: ENGINE .push|.init|FUNCTION      (the generated code, as the `|` lines below it:
//!                                           a segment on a per-NetPE JIT engine, or a function
//!                                           such as netvm_run on a linked engine)
//! ;| function u0:0(i64) -> i32 system_v {
//! ```
//!
//! KIND is a fault kind (bounds, div-by-zero, budget, bad-port, copro);
//! `used=N` is the budget the run consumed (all NetPEs together: the sum of
//! the back-edge costs charged); `none` means the packet was duplicated
//! and no copy left. Hex may be grouped with `_`. Run lines execute in
//! order on one instance, so data memory and coprocessor state persist from
//! one line to the next, as they do for consecutive packets.
//!
//! Engines that cannot run a file are skipped with the reason, which the
//! harness prints: AOT objects when a NetPE declares a coprocessor (the C
//! host has none) or where the target's toolchain is missing (an error
//! instead with `NETVM_REQUIRE_CROSS=1`).

pub mod check;
pub mod clif;
pub mod differential;
pub mod engines;
pub mod format;
pub mod host;
pub mod run;

use std::path::Path;

use netvm_runtime::{Application, Manifest};

pub use engines::{AotTarget, EngineKind};
pub use format::{hex, parse_hex, TestFile};
pub use run::{EngineRun, Observed, Subject};

/// What checking one file did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Engines the file ran on (the oracle first).
    pub ran: Vec<&'static str>,
    /// Engines skipped, and why.
    pub skipped: Vec<(&'static str, String)>,
    /// Run lines checked (per engine).
    pub runs: usize,
}

/// Checks one test file (`.nil` or `.toml`) on every engine it names;
/// returns what ran, or every failure.
pub fn check_file(path: &Path) -> Result<Report, Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| vec![format!("{}: {e}", path.display())])?;
    if path.extension().is_some_and(|x| x == "toml") {
        check_app(path, &text)
    } else {
        check_netil(path, &text)
    }
}

fn check_netil(path: &Path, text: &str) -> Result<Report, Vec<String>> {
    let file = TestFile::parse(text).map_err(|e| vec![e])?;
    if file.is_empty() {
        return Err(vec!["no `run:`, `verify:`, `init:` or `clif:` line".into()]);
    }
    let asm = netil::assemble(text).map_err(|e| vec![format!("assembly failed: {e}")])?;
    let verified = netvm_verify::verify_with_source(&asm.module, Some(&asm.source_map));
    if let Some(want) = &file.verify_error {
        return match verified {
            Ok(_) => Err(vec![format!("expected verification error {}, but the module verified", want.rule)]),
            Err(e) if e.rule.name() == want.rule && want.at.is_none_or(|(seg, off)| e.segment == Some(seg) && e.offset == Some(off)) => {
                Ok(Report::default())
            }
            Err(e) => {
                Err(vec![format!("expected {} at {:?}, got {} at {:?}+{:?}: {e}", want.rule, want.at, e.rule.name(), e.segment, e.offset)])
            }
        };
    }
    let verified = verified.map_err(|e| vec![format!("verification failed: {e}")])?;
    let subject = Subject::single(&file, verified);
    check_subject(path, &file, &subject, ';')
}

fn check_app(path: &Path, text: &str) -> Result<Report, Vec<String>> {
    let manifest = Manifest::load(path).map_err(|e| vec![e.to_string()])?;
    let plan = Application::plan(&manifest, &netvm_copro::registry(), None).map_err(|e| vec![e.to_string()])?;
    let file = TestFile::parse_app(text, &plan.names).map_err(|e| vec![e])?;
    if file.runs.is_empty() && file.init_fault.is_none() {
        return Err(vec!["no `# run:` or `# init:` line".into()]);
    }
    let subject = Subject::app(manifest).map_err(|e| vec![e])?;
    check_subject(path, &file, &subject, '#')
}

/// The file's `clif:` expectations and its runs on every engine; all failures together.
fn check_subject(path: &Path, file: &TestFile, subject: &Subject, comment: char) -> Result<Report, Vec<String>> {
    let mut fails = clif::check(path, file, subject, comment);
    match check_engines(subject, file) {
        Ok(report) if fails.is_empty() => Ok(report),
        Ok(_) => Err(fails),
        Err(more) => {
            fails.extend(more);
            Err(fails)
        }
    }
}

/// Why an engine cannot run `subject` here, if it cannot.
fn unavailable(subject: &Subject, engine: EngineKind) -> Option<String> {
    if engine == EngineKind::Baseline && !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        return Some("the baseline compiler exists for x86-64 and AArch64 only".into());
    }
    let EngineKind::Aot(target) = engine else { return None };
    if subject.has_copros() {
        return Some("a NetPE declares a coprocessor (the C host has none)".into());
    }
    match host::Toolchain::for_target(target) {
        Ok(_) => None,
        Err(why) if std::env::var_os("NETVM_REQUIRE_CROSS").is_none() => Some(why),
        Err(_) => None, // required: running it reports the error
    }
}

fn check_engines(subject: &Subject, file: &TestFile) -> Result<Report, Vec<String>> {
    let mut report = Report::default();
    let oracle = run::run(subject, file, EngineKind::Interp).map_err(|e| vec![format!("[interp] {e}")])?;
    let mut fails = Vec::new();
    let check_one = |name: &str, got: &EngineRun, fails: &mut Vec<String>| {
        if let Some(f) = check::init(file, &subject.names, got) {
            fails.push(format!("[{name}] {f}"));
            return;
        }
        for (case, obs) in file.runs.iter().zip(&got.runs) {
            fails.extend(check::expectations(case, obs).into_iter().map(|f| format!("[{name}] {f}")));
        }
    };
    check_one("interp", &oracle, &mut fails);
    report.ran.push("interp");
    report.runs += oracle.runs.len();
    for engine in file.engines().into_iter().filter(|e| *e != EngineKind::Interp) {
        if let Some(why) = unavailable(subject, engine) {
            report.skipped.push((engine.name(), why));
            continue;
        }
        match run::run(subject, file, engine) {
            Ok(got) => {
                check_one(engine.name(), &got, &mut fails);
                fails.extend(check::against_oracle(file, &oracle, &got).into_iter().map(|f| format!("[{}] {f}", engine.name())));
                report.ran.push(engine.name());
                report.runs += got.runs.len();
            }
            Err(e) => fails.push(format!("[{}] {e}", engine.name())),
        }
    }
    if fails.is_empty() {
        Ok(report)
    } else {
        Err(fails)
    }
}
