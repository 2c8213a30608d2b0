//! Precise expectations for generated code: the Cranelift IR a JIT
//! configuration produces (after Cranelift's own optimisations, as it
//! ships) for a segment of a NetPE or a function of an application
//! compiled whole, kept in the test file below a `clif:` line and compared
//! as text. `NETVM_TEST_BLESS=1` rewrites the blocks with the
//! code generated now, so a change in generated code is a diff in review.
//!
//! The text names the calling convention and is lowered for the host, so
//! it is checked on x86-64 hosts only.

use std::path::Path;

use netvm_jit::link::LinkedApp;
use netvm_jit::{JitCode, JitOptions};

use crate::engines::EngineKind;
use crate::format::{bless_clif, ClifExpect, ClifOf, TestFile};
use crate::run::Subject;

/// Whether `NETVM_TEST_BLESS` asks to rewrite expectations.
pub fn blessing() -> bool {
    std::env::var_os("NETVM_TEST_BLESS").is_some_and(|v| v != "0" && !v.is_empty())
}

/// Whether this host checks CLIF expectations.
pub const CHECKED_HERE: bool = cfg!(target_arch = "x86_64");

fn normalize(s: &str) -> String {
    s.lines().map(str::trim_end).collect::<Vec<_>>().join("\n").trim().to_string()
}

/// The code `c` shows, as text.
fn generate(c: &ClifExpect, subject: &Subject) -> Result<String, String> {
    let opts = JitOptions { keep_text: true, ..c.engine.jit_options() };
    let text = match (&c.of, c.engine) {
        (ClifOf::Segment(kind), _) => {
            let code = JitCode::compile_with(&subject.verified[0], opts).map_err(|e| e.to_string())?;
            code.clif().iter().find(|(k, _)| k == kind).map(|(_, t)| t.clone())
        }
        (ClifOf::Function(name), EngineKind::Linked(mode, _)) => {
            let plan = subject.plan()?;
            let app = LinkedApp::compile(&plan.graph, &plan.verified, &plan.limits, mode, opts).map_err(|e| e.to_string())?;
            app.text().clif.iter().find(|(n, _)| n == name).map(|(_, t)| t.clone())
        }
        (ClifOf::Function(_), e) => return Err(format!("{} compiles no application", e.name())),
    };
    Ok(text.map(|t| normalize(&t)).unwrap_or_default())
}

/// Compares (or, when blessing, rewrites) the `clif:` blocks of `file`,
/// read from `path`, `comment` being its comment character.
pub fn check(path: &Path, file: &TestFile, subject: &Subject, comment: char) -> Vec<String> {
    if file.clif.is_empty() || !CHECKED_HERE {
        return Vec::new();
    }
    let mut actual = Vec::with_capacity(file.clif.len());
    let mut fails = Vec::new();
    for c in &file.clif {
        let text = match generate(c, subject) {
            Ok(t) => t,
            Err(e) => return vec![format!("line {}: compile for `clif:`: {e}", c.line)],
        };
        if normalize(&c.text) != text {
            fails.push(format!(
                "line {}: the {} code of {:?} changed (NETVM_TEST_BLESS=1 rewrites the expectation):\n--- expected\n{}\n--- generated\n{text}",
                c.line,
                c.engine.name(),
                c.of,
                normalize(&c.text)
            ));
        }
        actual.push(text);
    }
    if !fails.is_empty() && blessing() {
        let blessed = bless_clif(&file.source, comment, &actual);
        return match std::fs::write(path, blessed) {
            Ok(()) => Vec::new(),
            Err(e) => vec![format!("bless {}: {e}", path.display())],
        };
    }
    fails
}
