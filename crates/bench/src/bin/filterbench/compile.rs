//! `filterbench compile`: compile latency of whole applications.
//!
//! ```text
//! filterbench compile [--n N] [--modes direct,table,dispatch,baseline] APP.toml|PROGRAM.nil ...
//! ```
//!
//! For each application (a manifest, or a program run as a one-NetPE
//! application with its ports to sinks), the time from verified modules to
//! callable native code, per binding:
//! - `direct`, `table`: `LinkedApp::compile` of the whole application
//!   (Cranelift IR construction, optimisation, code emission, finalisation
//!   into executable memory of a fresh `JITModule`);
//! - `dispatch`: `JitCode::compile` of every NetPE, one after the other
//!   (what `JitEngine::with_link(None)` does);
//! - `baseline`: `BaselineCode::compile` of every NetPE with the one-pass
//!   baseline compiler (what `netvm run --engine baseline` does), mapping
//!   into executable memory included.
//!
//! Loading, verification and the coprocessors (`Application::plan`) are
//! done once, before timing; so is one compilation per binding, which
//! builds the host ISA. Freeing the code is not timed either. The bindings
//! are interleaved, N compilations each. Prints a table (median, p10 and
//! p90 per application and binding) on stdout, then the same as one JSON
//! line each (`grep '^{'`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use netvm_jit::link::{LinkMode, LinkedApp};
use netvm_jit::{JitCode, JitOptions};
use netvm_runtime::{AppPlan, Application, Manifest};
use serde_json::json;

use netvm_bench::measure::round3;

/// The code of one application in one binding.
enum Compiled {
    Linked(Box<LinkedApp>),
    PerNetPe(Vec<JitCode>),
    Baseline(Vec<netvm_baseline::BaselineCode>),
}

impl Compiled {
    /// Compiles the whole plan with `binding` (`direct`, `table`, `dispatch`, `baseline`).
    fn new(plan: &AppPlan, binding: &str) -> Result<Compiled, String> {
        if binding == "baseline" {
            return plan.verified.iter().map(netvm_baseline::BaselineCode::compile).collect::<Result<_, _>>().map(Compiled::Baseline);
        }
        Ok(match LinkMode::from_name(binding) {
            Some(m) => Compiled::Linked(Box::new(
                LinkedApp::compile(&plan.graph, &plan.verified, &plan.limits, m, JitOptions::default()).map_err(|e| e.to_string())?,
            )),
            None => Compiled::PerNetPe(plan.verified.iter().map(JitCode::compile).collect::<Result<_, _>>().map_err(|e| e.to_string())?),
        })
    }

    /// Machine-code bytes.
    fn bytes(&self) -> usize {
        match self {
            Compiled::Linked(a) => a.text().code_size.iter().map(|c| c.1).sum(),
            Compiled::PerNetPe(codes) => codes.iter().flat_map(|c| c.code_size()).map(|c| c.1).sum(),
            Compiled::Baseline(codes) => codes.iter().map(|c| c.size()).sum(),
        }
    }
}

fn plan(path: &Path) -> Result<AppPlan, String> {
    let manifest = if path.extension().is_some_and(|e| e == "toml") {
        Manifest::load(path).map_err(|e| e.to_string())?
    } else {
        let ports = netvm_runtime::load_program(path).map_err(|e| e.to_string())?.verify().map_err(|e| e.to_string())?.module.out_ports;
        Manifest::single(path, &[0], ports, None)
    };
    Application::plan(&manifest, &netvm_copro::registry(), None).map_err(|e| format!("{}: {e}", path.display()))
}

pub(crate) fn run(paths: &[PathBuf], n: usize, modes: &str) -> Result<(), String> {
    if paths.is_empty() || n == 0 {
        return Err("compile needs --n > 0 and at least one APP.toml or PROGRAM.nil".into());
    }
    let modes: Vec<&str> = modes.split(',').collect();
    if let Some(m) = modes.iter().find(|m| LinkMode::from_name(m).is_none() && !["dispatch", "baseline"].contains(m)) {
        return Err(format!("unknown binding {m:?} (direct, table, dispatch, baseline)"));
    }
    println!(
        "{:<44} {:>6} {:>6} {:<9} {:>10} {:>9} {:>9} {:>11} {:>7}",
        "application", "NetPEs", "insns", "binding", "median µs", "p10", "p90", "µs per NetPE", "code B"
    );
    let mut lines = Vec::new();
    for path in paths {
        let plan = plan(path)?;
        let netpes = plan.verified.len();
        let insns: usize = plan.verified.iter().map(|v| v.push.insns.len() + v.init.as_ref().map_or(0, |s| s.insns.len())).sum();
        let mut bytes = Vec::new();
        for m in &modes {
            bytes.push(Compiled::new(&plan, m)?.bytes()); // builds the host ISA
        }
        let mut times = vec![Vec::with_capacity(n); modes.len()];
        for i in 0..n {
            for k in 0..modes.len() {
                // Alternate the order, so that neither binding always follows the other.
                let k = if i % 2 == 0 { k } else { modes.len() - 1 - k };
                let t = Instant::now();
                let code = Compiled::new(&plan, modes[k])?;
                times[k].push(t.elapsed().as_secs_f64() * 1e6);
                drop(code);
            }
        }
        for (k, m) in modes.iter().enumerate() {
            let t = &mut times[k];
            t.sort_by(f64::total_cmp);
            let (med, p10, p90) = (t[n / 2], t[n / 10], t[n * 9 / 10]);
            println!(
                "{:<44} {:>6} {:>6} {:<9} {:>10.1} {:>9.1} {:>9.1} {:>11.1} {:>7}",
                path.display(),
                netpes,
                insns,
                m,
                med,
                p10,
                p90,
                med / netpes as f64,
                bytes[k]
            );
            lines.push(json!({
                "application": path.display().to_string(), "netpes": netpes, "insns": insns, "binding": m,
                "n": n, "us_median": round3(med), "us_p10": round3(p10), "us_p90": round3(p90), "code_bytes": bytes[k],
            }));
        }
    }
    for l in lines {
        println!("{l}");
    }
    Ok(())
}
