//! `filterbench`: ns per packet of every netvm engine on the five filters of
//! the NetVM paper (§6.3.1), on the 64-byte full-path frame and on a mixed trace.
//!
//! ```text
//! filterbench gen --out DIR [--packets N] [--seed S]
//!     writes DIR/fullpath.pcap (the 64-byte frame 10.1.1.1:20 -> 10.2.2.2:30 TCP)
//!     and DIR/mixed.pcap (N frames, default 1,000,000, at most 128 bytes stored each)
//! filterbench gen-protomix --out FILE.pcap [--packets N] [--bytes B] [--seed S]
//!     streams the application-protocol mix (HTTP, DNS, TLS, ...: netvm_traffic::protomix)
//!     to FILE: N packets (default 1,000,000), or fewer once B bytes of frames are written
//! filterbench run --traces DIR [--filters DIR] [--reps N] [--target-ms MS] [--engines a,b] [--filter NAME]
//!     measures; prints one JSON line per (engine, filter, workload) on stdout
//!     and a table of medians on stderr
//! filterbench report --dir DIR [--meta FILE] [--json OUT]
//!     merges DIR/round-R-*.jsonl (this binary's and the C peers' output, R the
//!     round) into Markdown tables on stdout and, with --json, one JSON file;
//!     FILE holds KEY=VALUE lines describing the machine and the command
//! filterbench binding --traces DIR [--binding DIR] [--rounds N] [--target-ms MS]
//!     the cost of binding NetPEs together (see `binding.rs`)
//! filterbench compile [--n N] [--modes direct,table,dispatch,baseline] APP.toml|PROGRAM.nil ...
//!     compile latency of whole applications (see `compile.rs`)
//! ```
//!
//! For each engine two figures are taken:
//! - `ENGINE`: the engine's per-packet entry, `PeCode::push`, called through a
//!   `dyn PeCode` in a tight loop on the views of exchange buffers prepared
//!   beforehand (the counterpart of the C peers' per-packet call through a
//!   function pointer on their arrays of frame pointers and lengths);
//! - `ENGINE/app`: the end-to-end path, `Application::process_batch` on a
//!   one-NetPE application (ports 0 and 1 to sinks), in batches of
//!   [`BATCH`] packets: verdict bookkeeping, counters, info memory and the
//!   exchange-buffer moves of the generic runtime included.
//!
//! and for the JIT a third, `netvm-jit/linked`: the one-NetPE application
//! compiled whole (direct linking) into its per-batch function, called by
//! [`LinkedApp::run_descs`](netvm_jit::link::LinkedApp::run_descs) on
//! batches of [`BATCH`] descriptors prepared beforehand (the counterpart of
//! the C peers' loop; the accept count is taken from the verdicts).
//!
//! Workloads: `fullpath` repeats the one frame (the branch predictor learns
//! it: this is the cost of the filter's longest path); `mixed` runs once
//! over the whole trace held in memory per repetition. Each figure is the
//! median and minimum over `--reps` repetitions after one warm-up pass.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use netvm_bench::filters::{self, Filter, ACCEPT_PORT, FILTERS};
use netvm_bench::linked::{Descs, Linked, BATCH};
use netvm_bench::measure::{self, median, time_passes, Record};
use netvm_bench::report::Report;
use netvm_bench::trace;
use netvm_runtime::{Application, LinkMode, Manifest, Verdict};
use netvm_traffic::mixed;
use netvm_vm::{ExchangeBuffer, Limits, Outcome, Packet, PeCode, PeState, XbView};

mod binding;
mod compile;

/// The row of the directly linked one-NetPE application.
const LINKED: &str = "netvm-jit/linked";

/// The engines measured, by report name. Everything else (the per-packet
/// and end-to-end figures, the reports) follows from this list.
fn engines() -> Vec<(&'static str, Box<dyn netvm_runtime::Engine>)> {
    vec![
        ("netvm-jit", Box::new(netvm_runtime::JitEngine::default())),
        ("netvm-interp", Box::new(netvm_runtime::InterpEngine)),
        ("netvm-baseline", Box::new(netvm_runtime::BaselineEngine)),
    ]
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
         filterbench gen-stream --out FILE.pcap --packets N [--seed S] [--precision micro|nano]\n       \
         filterbench gen-protomix --out FILE.pcap [--packets N] [--bytes B] [--seed S]\n       \
         filterbench run --traces DIR [--filters DIR] [--reps N] [--target-ms MS] [--engines a,b] [--filter NAME]\n       \
         filterbench report --dir DIR [--meta FILE] [--json OUT]\n       \
         filterbench binding --traces DIR [--binding DIR] [--rounds N] [--target-ms MS]\n       \
         filterbench compile [--n N] [--modes direct,table,dispatch,baseline] APP.toml|PROGRAM.nil ..."
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else { return usage() };
    let mut opts = std::collections::HashMap::new();
    let mut paths = Vec::new();
    let mut it = args[1..].iter();
    while let Some(k) = it.next() {
        let Some(name) = k.strip_prefix("--") else {
            paths.push(PathBuf::from(k));
            continue;
        };
        let Some(v) = it.next() else { return usage() };
        opts.insert(name.to_string(), v.clone());
    }
    if !paths.is_empty() && cmd != "compile" {
        return usage();
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
            gen(&out, num("packets", mixed::MIXED_PACKETS as u64)? as usize, num("seed", mixed::MIXED_SEED)?)
        })(),
        "gen-stream" => (|| {
            let out = PathBuf::from(opts.get("out").ok_or("gen-stream needs --out FILE")?);
            let micro = opts.get("precision").map_or(Ok(true), |p| match p.as_str() {
                "micro" => Ok(true),
                "nano" => Ok(false),
                other => Err(format!("--precision {other}: micro or nano")),
            })?;
            trace::write_mixed_pcap(&out, num("packets", mixed::MIXED_PACKETS as u64)?, num("seed", mixed::MIXED_SEED)?, micro)
        })(),
        "gen-protomix" => (|| {
            let out = PathBuf::from(opts.get("out").ok_or("gen-protomix needs --out FILE")?);
            let bytes = num("bytes", u64::MAX)?;
            let packets = num("packets", if opts.contains_key("bytes") { u64::MAX } else { 1_000_000 })?;
            let (n, b) = trace::write_protomix_pcap(&out, packets, bytes, num("seed", netvm_traffic::protomix::PROTOMIX_SEED)?)?;
            eprintln!("filterbench: {n} packets, {b} bytes of frames written to {}", out.display());
            Ok(())
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
        "binding" => (|| {
            let a = binding::Args {
                traces: PathBuf::from(opts.get("traces").ok_or("binding needs --traces DIR")?),
                dir: opts.get("binding").map_or_else(binding::default_dir, PathBuf::from),
                filters: opts.get("filters").map_or_else(filters::default_dir, PathBuf::from),
                rounds: num("rounds", 11)? as usize,
                target_ms: num("target-ms", 50)? as f64,
            };
            binding::run(&a)
        })(),
        "compile" => (|| {
            let modes = opts.get("modes").map_or("direct,table,dispatch,baseline", String::as_str);
            compile::run(&paths, num("n", 200)? as usize, modes)
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
    trace::write_pcap(&out.join("fullpath.pcap"), &[mixed::full_path_packet()])?;
    let frames = mixed::mixed_trace(packets, seed);
    trace::write_pcap(&out.join("mixed.pcap"), &frames)?;
    eprintln!("filterbench: wrote {}/fullpath.pcap (1 frame) and mixed.pcap ({} frames, seed {seed:#x})", out.display(), frames.len());
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

/// Calls `push` once per exchange buffer (its view, made beforehand as the
/// C peers' arrays of frame pointers and lengths are); returns how many
/// were accepted.
#[inline(never)]
fn push_all(code: &dyn PeCode, state: &mut PeState, views: &mut [XbView<'_>], limits: &Limits) -> (u64, u64) {
    let (mut acc, mut faults) = (0, 0);
    for view in views.iter_mut() {
        match code.push(state, view, 0, limits) {
            Outcome::Forward(ACCEPT_PORT) => acc += 1,
            Outcome::Fault(_) => faults += 1,
            _ => {}
        }
    }
    (acc, faults)
}

/// Calls `push` `n` times on the same exchange buffer's view; returns how
/// many were accepted. The view is opaque to the compiler on each call, as
/// the C peers' frame pointer is.
#[inline(never)]
fn push_repeat(code: &dyn PeCode, state: &mut PeState, view: &mut XbView<'_>, n: u64, limits: &Limits) -> u64 {
    let mut acc = 0;
    for _ in 0..n {
        let view = std::hint::black_box(&mut *view);
        acc += u64::from(code.push(state, view, 0, limits) == Outcome::Forward(ACCEPT_PORT));
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

/// The packets of one workload, held both ways a [`Runner`] takes them.
pub(crate) struct Workload {
    /// `fullpath` or `mixed`.
    pub name: &'static str,
    /// Packets, for `Application::process_batch`.
    pub packets: Vec<Packet>,
    /// Descriptors of a copy of the packets, for the linked batch function.
    pub descs: Descs,
    /// Whether a timed repetition repeats passes until it lasts about
    /// `--target-ms` (the full-path frame) or is one pass (the trace).
    pub repeat: bool,
}

impl Workload {
    /// The two workloads of `dir` (`fullpath.pcap`, `mixed.pcap`).
    pub fn load(dir: &Path) -> Result<[Workload; 2], String> {
        let full = trace::read_pcap(&dir.join("fullpath.pcap"))?;
        let [full] = <[Packet; 1]>::try_from(full).map_err(|_| "fullpath.pcap must hold exactly one frame".to_string())?;
        let mixed = trace::read_pcap(&dir.join("mixed.pcap"))?;
        eprintln!("filterbench: full-path frame of {} bytes, mixed trace of {} frames", full.data.len(), mixed.len());
        Ok([
            Workload { name: "fullpath", packets: vec![full.clone(); BATCH * 16], descs: Descs::new(&vec![full; BATCH]), repeat: true },
            Workload { name: "mixed", descs: Descs::new(&mixed), packets: mixed, repeat: false },
        ])
    }
}

/// Something that runs whole workloads in batches.
pub(crate) enum Runner {
    /// `Application::process_batch`, batches of [`BATCH`].
    App(Box<Application>, Vec<Verdict>),
    /// The linked batch function on the workload's descriptors, batches of [`BATCH`].
    Linked(Box<Linked>),
}

impl Runner {
    /// An application of `engine` built from `manifest`.
    pub fn app(manifest: &Manifest, engine: &dyn netvm_runtime::Engine) -> Result<Runner, String> {
        let app = Application::build(manifest, engine, &netvm_copro::registry(), None).map_err(|e| e.to_string())?;
        Ok(Runner::App(Box::new(app), Vec::with_capacity(BATCH)))
    }

    /// One pass over `w`; returns how many packets left on [`ACCEPT_PORT`].
    #[inline(never)]
    pub fn pass(&mut self, w: &mut Workload) -> u64 {
        match self {
            Runner::App(app, verdicts) => app_pass(app, &mut w.packets, verdicts),
            Runner::Linked(l) => {
                let (acc, faults) = l.pass(&mut w.descs, ACCEPT_PORT);
                assert_eq!(faults, 0, "a benchmark application faulted");
                acc
            }
        }
    }

    /// Packets in one pass over `w`.
    pub fn packets(&self, w: &Workload) -> u64 {
        match self {
            Runner::App(..) => w.packets.len() as u64,
            Runner::Linked(_) => w.descs.len() as u64,
        }
    }

    /// Passes over `w` per timed repetition: enough to last about
    /// `target_ms` if `w` repeats, else one. Runs at least one pass.
    pub fn passes(&mut self, w: &mut Workload, target_ms: f64) -> u64 {
        if !w.repeat {
            self.pass(w);
            return 1;
        }
        let mut n = 1u64;
        loop {
            let t = std::time::Instant::now();
            for _ in 0..n {
                std::hint::black_box(self.pass(w));
            }
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if ms >= 5.0 || n >= 1 << 30 {
                return ((n as f64 * target_ms / ms.max(1e-3)).ceil() as u64).max(1);
            }
            n *= 2;
        }
    }

    /// Times `passes` passes over `w`: (ns per packet, accepted per pass).
    pub fn time(&mut self, w: &mut Workload, passes: u64) -> (f64, u64) {
        let t = std::time::Instant::now();
        let acc: u64 = (0..passes).map(|_| self.pass(w)).sum();
        let ns = t.elapsed().as_nanos() as f64 / (passes * self.packets(w)) as f64;
        (ns, acc / passes)
    }
}

/// `reps` timed repetitions of `runner` on each workload after a warm-up: one record each.
fn measure_runner(name: &str, f: &Filter, runner: &mut Runner, workloads: &mut [Workload], a: &RunArgs) -> Vec<Record> {
    let mut out = Vec::new();
    for w in workloads.iter_mut() {
        let passes = runner.passes(w, a.target_ms);
        let n = passes * runner.packets(w);
        let (ns, acc) = time_passes(a.reps, n, || (0..passes).map(|_| runner.pass(w)).sum());
        if w.repeat && acc != n {
            eprintln!("filterbench: WARNING: {name} {} rejects the full-path frame", f.name);
        }
        out.push(record(name, f, w.name, &ns, n, acc));
    }
    out
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
    let mut workloads = Workload::load(&a.traces)?;
    let full = workloads[0].packets[0].clone();
    let limits = Limits::default();
    let mut records = Vec::new();
    let filters: Vec<&Filter> = FILTERS.iter().filter(|f| a.filter.as_ref().is_none_or(|n| n == f.name)).collect();
    if filters.is_empty() {
        return Err(format!("no filter named {:?}", a.filter));
    }
    let want = |name: &str| a.engines.as_ref().is_none_or(|l| l.iter().any(|e| e == name));
    let emit = |rs: Vec<Record>, records: &mut Vec<Record>| {
        for r in rs {
            println!("{}", r.to_json());
            records.push(r);
        }
    };
    for (ename, engine) in engines() {
        let app_name = format!("{ename}/app");
        if !want(ename) && !want(&app_name) {
            continue;
        }
        for f in &filters {
            let verified = filters::load(f, &a.filters)?;
            // Per-packet entry.
            if want(ename) {
                let code = engine.prepare(&verified).map_err(|e| format!("{ename}: {}: {e}", f.name))?;
                let mut state = PeState::new(&verified.module);
                let info = verified.module.info_size as usize;
                let mut xb = ExchangeBuffer::new(full.clone(), info);
                let mut view = xb.view();
                let iters = measure::calibrate(a.target_ms, |n| push_repeat(&*code, &mut state, &mut view, n, &limits));
                let (ns, acc) = time_passes(a.reps, iters, || push_repeat(&*code, &mut state, &mut view, iters, &limits));
                if acc != iters {
                    eprintln!("filterbench: WARNING: {ename} {} rejects the full-path frame", f.name);
                }
                let full_rec = record(ename, f, "fullpath", &ns, iters, acc);

                let mut xbs: Vec<ExchangeBuffer> = workloads[1].packets.iter().map(|p| ExchangeBuffer::new(p.clone(), info)).collect();
                let mut views: Vec<XbView<'_>> = xbs.iter_mut().map(ExchangeBuffer::view).collect();
                let mut faults = 0;
                let (ns, acc) = time_passes(a.reps, views.len() as u64, || {
                    let (acc, fl) = push_all(&*code, &mut state, &mut views, &limits);
                    faults = fl;
                    acc
                });
                if faults != 0 {
                    eprintln!("filterbench: WARNING: {ename} {}: {faults} faults on the mixed trace", f.name);
                }
                emit(vec![full_rec, record(ename, f, "mixed", &ns, views.len() as u64, acc)], &mut records);
            }
            // End to end: the runtime's batch API.
            if want(&app_name) {
                let mut r = Runner::app(&single(f, &a.filters), engine.as_ref())?;
                emit(measure_runner(&app_name, f, &mut r, &mut workloads, a), &mut records);
            }
        }
    }
    // The compiled per-batch function alone.
    if want(LINKED) {
        for f in &filters {
            let mut r = Runner::Linked(Box::new(Linked::build(&single(f, &a.filters), LinkMode::Direct)?));
            emit(measure_runner(LINKED, f, &mut r, &mut workloads, a), &mut records);
        }
    }
    let names: Vec<&str> = filters.iter().map(|f| f.name).collect();
    eprint!("{}", measure::table(&records, &names));
    Ok(())
}

/// A one-NetPE application of `f`: input port 0, its ports 0 (reject) and 1 (accept) to sinks 0 and 1.
pub(crate) fn single(f: &Filter, dir: &Path) -> Manifest {
    Manifest::single(&f.path(dir), &[0], 2, None)
}
