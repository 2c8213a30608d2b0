//! Running a test subject on an engine and recording everything it can
//! observe, run line by run line ([`Observed`]).
//!
//! A NetIL file runs on the per-NetPE engines (interpreter, JIT) directly,
//! through [`PeCode`], which also shows its info memory; on the application
//! engines (linked code, AOT objects) it is the one NetPE of an application
//! whose input port `p` feeds its input port `p` and whose output port `p`
//! is application output port `p`. An application file runs on every
//! engine as an application. Run lines execute in order on one instance,
//! one packet per batch, so state persists as it would between packets.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use netvm_runtime::{AppPlan, Application, Manifest, RuntimeError, Verdict};
use netvm_verify::Verified;
use netvm_vm::{CoproConfig, ExchangeBuffer, FaultKind, Limits, Outcome, Packet};

use crate::engines::EngineKind;
use crate::format::{RunCase, TestFile};
use crate::host;

/// Everything one run line produced on one engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// How the packet ended (a NetPE's `port N` is the application's output port N).
    pub verdict: Verdict,
    /// What left the application, in order: (output port, bytes).
    pub exits: Vec<(u16, Vec<u8>)>,
    /// The packet's bytes afterwards (its original buffer).
    pub packet: Vec<u8>,
    /// Info memory afterwards (per-NetPE engines only: it never leaves an application).
    pub info: Option<Vec<u8>>,
    /// Every NetPE's data memory afterwards.
    pub data: Vec<Vec<u8>>,
    /// Budget each NetPE consumed during this run.
    pub used: Vec<u64>,
}

/// A whole file's results on one engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineRun {
    /// `Err((NetPE, kind))` when an `.init` handler faulted (nothing ran then).
    pub init: Result<(), (usize, FaultKind)>,
    /// One entry per run line.
    pub runs: Vec<Observed>,
}

/// What a test file tests: verified modules and the application around them.
pub struct Subject {
    /// The application (for a NetIL file, the one-NetPE application).
    pub manifest: Manifest,
    /// Whether it is a single NetPE (a NetIL file).
    pub single: bool,
    /// The verified modules, in manifest order.
    pub verified: Vec<Verified>,
    /// NetPE names, in manifest order.
    pub names: Vec<String>,
    /// Coprocessor configurations of the single NetPE.
    pub copro: BTreeMap<String, CoproConfig>,
}

impl Subject {
    /// The one-NetPE application of a verified NetIL file.
    pub fn single(file: &TestFile, verified: Verified) -> Subject {
        let module = verified.module.clone();
        let mut inports: BTreeSet<u16> = file.runs.iter().map(|r| r.inport).collect();
        inports.insert(0);
        let inports: Vec<u16> = inports.into_iter().collect();
        let mut manifest = Manifest::single(&PathBuf::from("test.nil"), &inports, module.out_ports, None);
        let spec = &mut manifest.netpes[0];
        spec.module = Some(module);
        for (name, cfg) in &file.copro {
            let table = cfg.iter().map(|(k, v)| (k.clone(), toml::Value::String(v.clone()))).collect();
            spec.copro.insert(name.clone(), table);
        }
        Subject { manifest, single: true, verified: vec![verified], names: vec!["main".into()], copro: file.copro.clone() }
    }

    /// An application file's subject.
    pub fn app(manifest: Manifest) -> Result<Subject, String> {
        let plan = Application::plan(&manifest, &netvm_copro::registry(), None).map_err(|e| e.to_string())?;
        Ok(Subject { manifest, single: false, verified: plan.verified, names: plan.names, copro: BTreeMap::new() })
    }

    /// Whether any NetPE declares a coprocessor (the C host has none).
    pub fn has_copros(&self) -> bool {
        self.verified.iter().any(|v| !v.module.copros.is_empty())
    }

    /// The application resolved afresh (fresh states).
    pub fn plan(&self) -> Result<AppPlan, String> {
        Application::plan(&self.manifest, &netvm_copro::registry(), None).map_err(|e| e.to_string())
    }
}

/// The packet of a run line.
pub fn packet_of(case: &RunCase) -> Packet {
    let mut p = Packet::from_bytes(case.packet.clone());
    if let Some(w) = case.wire {
        p.wire_len = w;
    }
    p.ts = case.ts;
    p.in_port = case.inport;
    p
}

/// Runs `file` on `engine`.
pub fn run(subject: &Subject, file: &TestFile, engine: EngineKind) -> Result<EngineRun, String> {
    match engine {
        EngineKind::Interp | EngineKind::Baseline | EngineKind::Jit(_) if subject.single => run_netpe(subject, file, engine),
        EngineKind::Aot(target) => host::run(subject, file, target, &subject.plan()?),
        _ => run_app(subject, file, engine),
    }
}

fn run_netpe(subject: &Subject, file: &TestFile, engine: EngineKind) -> Result<EngineRun, String> {
    let verified = &subject.verified[0];
    let code = engine.runtime_engine().expect("an in-process engine").prepare(verified).map_err(|e| format!("engine: {e}"))?;
    let mut state = netvm_copro::registry()
        .instantiate(&verified.module, |d| subject.copro.get(&d.name).cloned().unwrap_or_default())
        .map_err(|(name, e)| format!("coprocessor {name}: {e}"))?;
    let limits = Limits::default();
    match code.init(&mut state, &limits) {
        Outcome::Exit => {}
        Outcome::Fault(k) => return Ok(EngineRun { init: Err((0, k)), runs: Vec::new() }),
        other => return Err(format!(".init ended with {other}")),
    }
    let info_size = verified.module.info_size as usize;
    let mut runs = Vec::with_capacity(file.runs.len());
    for case in &file.runs {
        let mut xb = ExchangeBuffer::new(packet_of(case), info_size);
        let n = case.info_in.len().min(info_size);
        xb.info[..n].copy_from_slice(&case.info_in[..n]);
        let lim = Limits { budget: case.budget.unwrap_or(limits.budget) };
        let before = state.budget_used;
        let outcome = code.push(&mut state, &mut xb.view(), case.inport, &lim);
        let verdict = match outcome {
            Outcome::Forward(p) => Verdict::Output(p),
            Outcome::Drop => Verdict::Drop,
            Outcome::Fault(k) => Verdict::Fault(k),
            Outcome::Exit => return Err(format!("line {}: .push ended with exit", case.line)),
        };
        let exits = match verdict {
            Verdict::Output(p) => vec![(p, xb.packet.data.clone())],
            _ => Vec::new(),
        };
        runs.push(Observed {
            verdict,
            exits,
            packet: xb.packet.data,
            info: Some(xb.info),
            data: vec![state.data.clone()],
            used: vec![state.budget_used - before],
        });
    }
    Ok(EngineRun { init: Ok(()), runs })
}

fn run_app(subject: &Subject, file: &TestFile, engine: EngineKind) -> Result<EngineRun, String> {
    let plan = subject.plan()?;
    let default_limits = plan.limits;
    let engine = engine.runtime_engine().expect("an in-process engine");
    let mut app = match Application::from_plan(plan, engine.as_ref()) {
        Ok(a) => a,
        Err(RuntimeError::Init { netpe, outcome: Outcome::Fault(k) }) => {
            let n = subject.names.iter().position(|x| *x == netpe).unwrap_or(0);
            return Ok(EngineRun { init: Err((n, k)), runs: Vec::new() });
        }
        Err(e) => return Err(e.to_string()),
    };
    let names: Vec<String> = app.netpe_names().iter().map(|s| s.to_string()).collect();
    let mut runs = Vec::with_capacity(file.runs.len());
    let mut verdicts = Vec::new();
    for case in &file.runs {
        app.set_limits(Limits { budget: case.budget.unwrap_or(default_limits.budget) });
        let before: Vec<u64> = app.stats().netpes.iter().map(|c| c.flow.budget_used).collect();
        let mut batch = [packet_of(case)];
        let mut exits = Vec::new();
        app.process_batch(&mut batch, &mut verdicts, &mut |port, p| exits.push((port, p.data.clone())));
        let after: Vec<u64> = app.stats().netpes.iter().map(|c| c.flow.budget_used).collect();
        let data = names.iter().map(|n| app.netpe_state(n).expect("a NetPE").data.clone()).collect();
        let [p] = batch;
        runs.push(Observed {
            verdict: verdicts[0],
            exits,
            packet: p.data,
            info: None,
            data,
            used: after.iter().zip(&before).map(|(a, b)| a - b).collect(),
        });
    }
    Ok(EngineRun { init: Ok(()), runs })
}
