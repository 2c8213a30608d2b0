//! `filterbench`: ns per packet of every netvm engine on the five filters of
//! the NetVM paper (§6.3.1), on the 64-byte full-path frame and on a mixed trace.
//!
//! ```text
//! filterbench gen --out DIR [--packets N] [--seed S]
//!     writes DIR/fullpath.pcap (the 64-byte frame 10.1.1.1:20 -> 10.2.2.2:30 TCP)
//!     and DIR/mixed.pcap (N frames, default 1,000,000, at most 128 bytes stored each)
//! filterbench run --traces DIR [--filters DIR] [--reps N] [--target-ms MS] [--engines a,b] [--filter NAME]
//!     measures; prints one JSON line per (engine, filter, workload) on stdout
//!     and a table of medians on stderr
//! filterbench report --dir DIR [--meta FILE] [--json OUT]
//!     merges DIR/round-R-*.jsonl (this binary's and the C peers' output, R the
//!     round) into Markdown tables on stdout and, with --json, one JSON file;
//!     FILE holds KEY=VALUE lines describing the machine and the command
//! ```
//!
//! For each engine two figures are taken:
//! - `ENGINE`: the engine's per-packet entry, `PeCode::push`, called through a
//!   `dyn PeCode` in a tight loop on exchange buffers prepared beforehand (the
//!   counterpart of the C peers' per-packet call through a function pointer);
//! - `ENGINE/app`: the end-to-end path, `Application::process_batch` on a
//!   one-NetPE application (ports 0 and 1 to sinks), in batches of
//!   [`BATCH`] packets: verdict bookkeeping, counters, info memory and the
//!   exchange-buffer moves of the generic runtime included.
//!
//! Workloads: `fullpath` repeats the one frame (the branch predictor learns
//! it: this is the cost of the filter's longest path); `mixed` runs once
//! over the whole trace held in memory per repetition. Each figure is the
//! median and minimum over `--reps` repetitions after one warm-up pass.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use netvm_bench::filters::{self, Filter, ACCEPT_PORT, FILTERS};
use netvm_bench::measure::{self, median, time_passes, Record};
use netvm_bench::report::Report;
use netvm_bench::trace;
use netvm_runtime::{Application, Manifest, Verdict};
use netvm_vm::{CoproRegistry, ExchangeBuffer, Limits, Outcome, Packet, PeCode, PeState};

/// Packets per `process_batch` call on the end-to-end path.
const BATCH: usize = 256;

/// The engines measured, by report name. Everything else (the per-packet
/// and end-to-end figures, the reports) follows from this list.
fn engines() -> Vec<(&'static str, Box<dyn netvm_runtime::Engine>)> {
    vec![("netvm-jit", Box::new(netvm_runtime::JitEngine::default())), ("netvm-interp", Box::new(netvm_runtime::InterpEngine))]
}

struct RunArgs {
    traces: PathBuf,
    filters: PathBuf,
    reps: usize,
    target_ms: f64,
    engines: Option<Vec<String>>,
    filter: Option<String>,
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: filterbench gen --out DIR [--packets N] [--seed S]\n       \
         filterbench run --traces DIR [--filters DIR] [--reps N] [--target-ms MS] [--engines a,b] [--filter NAME]\n       \
         filterbench report --dir DIR [--meta FILE] [--json OUT]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else { return usage() };
    let mut opts = std::collections::HashMap::new();
    let mut it = args[1..].iter();
    while let Some(k) = it.next() {
        let Some(name) = k.strip_prefix("--") else { return usage() };
        let Some(v) = it.next() else { return usage() };
        opts.insert(name.to_string(), v.clone());
    }
    let num = |k: &str, d: u64| -> Result<u64, String> {
        opts.get(k).map_or(Ok(d), |v| {
            let v = v.replace('_', "");
            match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => v.parse(),
            }
            .map_err(|e| format!("--{k}: {e}"))
        })
    };
    let res = match cmd.as_str() {
        "gen" => (|| {
            let out = PathBuf::from(opts.get("out").ok_or("gen needs --out DIR")?);
            gen(&out, num("packets", trace::MIXED_PACKETS as u64)? as usize, num("seed", trace::MIXED_SEED)?)
        })(),
        "run" => (|| {
            let a = RunArgs {
                traces: PathBuf::from(opts.get("traces").ok_or("run needs --traces DIR")?),
                filters: opts.get("filters").map_or_else(filters::default_dir, PathBuf::from),
                reps: num("reps", 7)? as usize,
                target_ms: num("target-ms", 100)? as f64,
                engines: opts.get("engines").map(|s| s.split(',').map(str::to_string).collect()),
                filter: opts.get("filter").cloned(),
            };
            run(&a)
        })(),
        "report" => (|| {
            let dir = PathBuf::from(opts.get("dir").ok_or("report needs --dir DIR")?);
            report(&dir, opts.get("meta").map(Path::new), opts.get("json").map(Path::new))
        })(),
        _ => return usage(),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("filterbench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn gen(out: &Path, packets: usize, seed: u64) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    trace::write_pcap(&out.join("fullpath.pcap"), &[trace::full_path_packet()])?;
    let mixed = trace::mixed_trace(packets, seed);
    trace::write_pcap(&out.join("mixed.pcap"), &mixed)?;
    eprintln!("filterbench: wrote {}/fullpath.pcap (1 frame) and mixed.pcap ({} frames, seed {seed:#x})", out.display(), mixed.len());
    Ok(())
}

fn report(dir: &Path, meta: Option<&Path>, json_out: Option<&Path>) -> Result<(), String> {
    let rep = Report::load_dir(dir)?;
    if rep.series.is_empty() {
        return Err(format!("no round-R-*.jsonl records in {}", dir.display()));
    }
    let mut m = serde_json::Map::new();
    if let Some(p) = meta {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        for line in text.lines() {
            if let Some((k, v)) = line.split_once('=') {
                m.insert(k.trim().to_string(), serde_json::Value::String(v.trim().to_string()));
            }
        }
    }
    for w in rep.inconsistencies() {
        eprintln!("filterbench: WARNING: {w}");
    }
    print!("{}", rep.markdown());
    if let Some(out) = json_out {
        let text = serde_json::to_string_pretty(&rep.to_json(serde_json::Value::Object(m))).map_err(|e| e.to_string())?;
        std::fs::write(out, text + "\n").map_err(|e| format!("{}: {e}", out.display()))?;
    }
    Ok(())
}

/// Calls `push` once per exchange buffer; returns how many were accepted.
#[inline(never)]
fn push_all(code: &dyn PeCode, state: &mut PeState, xbs: &mut [ExchangeBuffer], limits: &Limits) -> (u64, u64) {
    let (mut acc, mut faults) = (0, 0);
    for xb in xbs.iter_mut() {
        match code.push(state, xb, 0, limits) {
            Outcome::Forward(ACCEPT_PORT) => acc += 1,
            Outcome::Fault(_) => faults += 1,
            _ => {}
        }
    }
    (acc, faults)
}

/// Calls `push` `n` times on the same exchange buffer; returns how many were accepted.
#[inline(never)]
fn push_repeat(code: &dyn PeCode, state: &mut PeState, xb: &mut ExchangeBuffer, n: u64, limits: &Limits) -> u64 {
    let mut acc = 0;
    for _ in 0..n {
        let xb = std::hint::black_box(&mut *xb);
        acc += u64::from(code.push(state, xb, 0, limits) == Outcome::Forward(ACCEPT_PORT));
    }
    acc
}

/// Runs the application over `packets` in batches; returns how many left on the accept port.
#[inline(never)]
fn app_pass(app: &mut Application, packets: &mut [Packet], verdicts: &mut Vec<Verdict>) -> u64 {
    let mut acc = 0u64;
    for chunk in packets.chunks_mut(BATCH) {
        app.process_batch(chunk, verdicts, &mut |port, _| acc += u64::from(port == ACCEPT_PORT));
    }
    acc
}

fn record(engine: &str, f: &Filter, workload: &str, ns: &[f64], packets: u64, accepted: u64) -> Record {
    Record {
        engine: engine.to_string(),
        filter: f.name.to_string(),
        workload: workload.to_string(),
        ns_median: median(ns),
        ns_min: ns.iter().copied().fold(f64::INFINITY, f64::min),
        reps: ns.len(),
        packets,
        accepted,
    }
}

fn run(a: &RunArgs) -> Result<(), String> {
    if a.reps == 0 || a.target_ms <= 0.0 {
        return Err("--reps and --target-ms must be positive".into());
    }
    let full = trace::read_pcap(&a.traces.join("fullpath.pcap"))?;
    let [full] = <[Packet; 1]>::try_from(full).map_err(|_| "fullpath.pcap must hold exactly one frame".to_string())?;
    let mixed = trace::read_pcap(&a.traces.join("mixed.pcap"))?;
    eprintln!("filterbench: full-path frame of {} bytes, mixed trace of {} frames", full.data.len(), mixed.len());
    let limits = Limits::default();
    let registry = CoproRegistry::new();
    let mut records = Vec::new();
    let filters: Vec<&Filter> = FILTERS.iter().filter(|f| a.filter.as_ref().is_none_or(|n| n == f.name)).collect();
    if filters.is_empty() {
        return Err(format!("no filter named {:?}", a.filter));
    }
    for (ename, engine) in engines() {
        if a.engines.as_ref().is_some_and(|l| !l.iter().any(|e| e == ename || *e == format!("{ename}/app"))) {
            continue;
        }
        let want = |name: &str| a.engines.as_ref().is_none_or(|l| l.iter().any(|e| e == name));
        for f in &filters {
            let verified = filters::load(f, &a.filters)?;
            // Per-packet entry.
            if want(ename) {
                let code = engine.prepare(&verified).map_err(|e| format!("{ename}: {}: {e}", f.name))?;
                let mut state = PeState::new(&verified.module);
                let info = verified.module.info_size as usize;
                let mut xb = ExchangeBuffer::new(full.clone(), info);
                let iters = measure::calibrate(a.target_ms, |n| push_repeat(&*code, &mut state, &mut xb, n, &limits));
                let (ns, acc) = time_passes(a.reps, iters, || push_repeat(&*code, &mut state, &mut xb, iters, &limits));
                if acc != iters {
                    eprintln!("filterbench: WARNING: {ename} {} rejects the full-path frame", f.name);
                }
                let r = record(ename, f, "fullpath", &ns, iters, acc);
                println!("{}", r.to_json());
                records.push(r);

                let mut xbs: Vec<ExchangeBuffer> = mixed.iter().map(|p| ExchangeBuffer::new(p.clone(), info)).collect();
                let mut faults = 0;
                let (ns, acc) = time_passes(a.reps, xbs.len() as u64, || {
                    let (acc, fl) = push_all(&*code, &mut state, &mut xbs, &limits);
                    faults = fl;
                    acc
                });
                if faults != 0 {
                    eprintln!("filterbench: WARNING: {ename} {}: {faults} faults on the mixed trace", f.name);
                }
                let r = record(ename, f, "mixed", &ns, xbs.len() as u64, acc);
                println!("{}", r.to_json());
                records.push(r);
            }
            // End to end: the runtime's batch API.
            let app_name = format!("{ename}/app");
            if want(&app_name) {
                let manifest = Manifest::single(&f.path(&a.filters), &[0], 2, None);
                let mut app = Application::build(&manifest, engine.as_ref(), &registry, None).map_err(|e| e.to_string())?;
                let mut verdicts = Vec::with_capacity(BATCH);
                let mut batch = vec![full.clone(); BATCH * 16];
                let n = batch.len() as u64;
                let t = std::time::Instant::now();
                app_pass(&mut app, &mut batch, &mut verdicts);
                let pass_ms = t.elapsed().as_secs_f64() * 1e3;
                let passes = ((a.target_ms / pass_ms.max(1e-3)).ceil() as u64).max(1);
                let (ns, acc) =
                    time_passes(a.reps, passes * n, || (0..passes).map(|_| app_pass(&mut app, &mut batch, &mut verdicts)).sum());
                let r = record(&app_name, f, "fullpath", &ns, passes * n, acc);
                println!("{}", r.to_json());
                records.push(r);

                let mut pkts = mixed.clone();
                let (ns, acc) = time_passes(a.reps, pkts.len() as u64, || app_pass(&mut app, &mut pkts, &mut verdicts));
                let r = record(&app_name, f, "mixed", &ns, pkts.len() as u64, acc);
                println!("{}", r.to_json());
                records.push(r);
            }
        }
    }
    let names: Vec<&str> = filters.iter().map(|f| f.name).collect();
    eprint!("{}", measure::table(&records, &names));
    Ok(())
}
