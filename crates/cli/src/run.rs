//! `netvm run`: argument parsing over the runtime's driver. Builds the
//! application, loads its tables, attaches the inputs and outputs, runs,
//! and prints statistics.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use netvm_io::PcapHeaderSpec;
use netvm_runtime::admission::{self, Admission, Admitted, Calibration};
use netvm_runtime::datapath::DataPathStats;
use netvm_runtime::socket::ControlServer;
use netvm_runtime::{load_program, AppStats, Application, Driver, Manifest, Rebuild, RunReport};
use netvm_vm::FaultCounts;

use crate::common::{self, BatchingArg, EngineArg, EngineOpts, LinkArg};
use crate::{report, EXIT_ERROR, EXIT_USAGE};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Application manifest (TOML). Give either this or --program.
    #[arg(value_name = "APP.toml", required_unless_present_any = ["program", "filter"], conflicts_with_all = ["program", "filter"])]
    app: Option<PathBuf>,
    /// Run a single program (.nil or .nvm): `ret N` leaves on output port N.
    #[arg(long, value_name = "P.nil|P.nvm", conflicts_with = "filter")]
    program: Option<PathBuf>,
    /// Run a filter expression (pcap-filter(7) syntax, see `netvm filter`) in
    /// place of a program: matching packets leave on output port 1, the others on port 0.
    #[arg(long, value_name = "EXPR")]
    filter: Option<String>,
    /// Input capture, optionally on an application input port: `-r IN.pcap` (port 0) or `-r 2=IN.pcap`;
    /// `-` reads standard input. Several inputs are merged in timestamp order (ties: lower port first, then the input given first).
    #[arg(short = 'r', value_name = "[PORT=]IN.pcap", required = true)]
    read: Vec<String>,
    /// Output capture for output port 1 (`-`: standard output); with `{port}` in the name, one file per output port.
    /// Files keep the inputs' timestamp precision, link type and snapshot length.
    #[arg(short = 'w', value_name = "OUT")]
    write: Option<String>,
    /// Execution engine: the Cranelift JIT, the reference interpreter, the
    /// baseline compiler (native code at once, for short runs), or tiered
    /// (the baseline compiler's code first, the JIT's once it is compiled).
    #[arg(long, value_enum, default_value_t = EngineArg::Jit)]
    engine: EngineArg,
    /// Run the inputs N times (for measurement): outputs are written once,
    /// the repetitions replay the packets from memory where they fit.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    repeat: u64,
    /// How the JIT binds NetPEs: one function per application whose port
    /// crossings are jumps (`direct`), one function per NetPE called through
    /// a vector table (`table`), or the runtime walking the graph and calling
    /// each NetPE (`dispatch`, what the interpreter always does).
    #[arg(long, value_enum, default_value_t = LinkArg::Direct)]
    link: LinkArg,
    /// Computation batching of a data path with lookups (JIT, `direct` and
    /// `table`): `off` runs each packet through the whole data path in turn;
    /// `on` runs sub-batches stage by stage (every packet's lookup keys
    /// first, then the data path); `prefetch` (the default) also prefetches
    /// the packets' headers and the entries the lookups will read between
    /// the stages. Results are the same in every mode.
    #[arg(long, value_enum, default_value_t = BatchingArg::Prefetch)]
    batching: BatchingArg,
    /// Packets per sub-batch of computation batching (1 to 256), or `auto`
    /// (the default): chosen while the application runs, by measuring.
    #[arg(long, value_name = "N|auto", default_value = "auto", value_parser = common::parse_sub_batch)]
    sub_batch: common::SubBatchArg,
    /// Execution budget per handler invocation (overrides the manifest).
    #[arg(long)]
    budget: Option<u64>,
    /// Load a table file into a coprocessor before the first packet:
    /// `INSTANCE=FILE` or `NETPE.INSTANCE=FILE` (routes, table entries,
    /// patterns; the format is the coprocessor kind's, see docs/coprocessors.md).
    #[arg(long = "load", value_name = "NAME=FILE")]
    load: Vec<String>,
    /// After the run, write a coprocessor's state (in its table file format)
    /// to FILE: `INSTANCE=FILE` or `NETPE.INSTANCE=FILE`; `-` is stdout.
    #[arg(long = "dump", value_name = "NAME=FILE")]
    dump: Vec<String>,
    /// Print statistics on stdout: `json` (one object) or `text`.
    #[arg(long, value_enum)]
    stats: Option<StatsFormat>,
    /// Open a control socket (Unix domain, mode 0600, this user only) at
    /// PATH while the run lasts: `netvm ctl PATH ...` lists the data path
    /// and its counters, changes tables and globals, and replaces NetPEs or
    /// the whole data path without stopping the packets.
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    /// Also (or instead) serve the control protocol on TCP port PORT of the
    /// loopback interface (127.0.0.1 only; 0: a port the system picks,
    /// printed on stderr): `netvm ctl 127.0.0.1:PORT ...`. A connection is
    /// served only if its process belongs to this user (or root).
    #[arg(long, value_name = "PORT")]
    control_tcp: Option<u16>,
    /// The machine's costs for admission control (`netvm calibrate -o FILE`),
    /// where the manifest declares `[admission]`; default: the figures built in.
    #[arg(long, value_name = "FILE")]
    calibration: Option<PathBuf>,
    #[command(flatten)]
    engine_opts: EngineOpts,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum StatsFormat {
    Json,
    Text,
}

pub fn cmd_run(args: RunArgs) -> u8 {
    run(&args).unwrap_or_else(|code| code)
}

/// `netvm run`; `Err` carries the exit code of a failure already reported.
fn run(args: &RunArgs) -> Result<u8, u8> {
    let inputs = parse_inputs(&args.read)?;
    let mut in_ports: Vec<u16> = inputs.iter().map(|i| i.0).collect();
    in_ports.sort_unstable();
    in_ports.dedup();
    let manifest = load_manifest(args, &in_ports)?;
    let engine = common::engine_batching(args.engine, args.link, args.batching.batching(args.sub_batch));
    let app = build_app(args, &manifest, engine.as_ref(), &in_ports)?;
    let dumps = dump_targets(&app, &args.dump)?;

    // The packet engine, its inputs and outputs.
    let mut cfg = args.engine_opts.config(app.keeps_state(), true);
    cfg.repeat = args.repeat;
    let calibration = match &args.calibration {
        Some(p) => Some(Calibration::load(p).map_err(|e| {
            eprintln!("netvm: --calibration {e}");
            EXIT_ERROR
        })?),
        None => None,
    };
    let declares = manifest.admission.is_some() || manifest.datapaths.iter().any(|d| d.placed.admission.is_some());
    let admission = if declares {
        let cal = calibration.clone().unwrap_or_else(|| Calibration::builtin(engine.name()));
        let plan = Application::plan(&manifest, &netvm_copro::registry(), args.budget).map_err(|e| report(&e))?;
        admission::check(&plan, &manifest, &cal, cfg.workers).map_err(|e| {
            eprintln!("netvm: {e}");
            EXIT_ERROR
        })?
    } else {
        None
    };
    let mut driver = Driver::new(app, cfg);
    let mut specs = Vec::new();
    for (port, path) in &inputs {
        specs.push(common::open_source(&mut driver, path, *port)?);
    }
    add_sinks(&mut driver, args.write.as_deref(), &manifest, common::merge_specs(&specs))?;
    let mut servers = Vec::new();
    if args.control.is_some() || args.control_tcp.is_some() {
        let engine = common::control_engine(args.engine, args.link, args.batching.batching(args.sub_batch));
        driver.allow_changes(Rebuild {
            manifest: manifest.clone(),
            engine,
            registry: netvm_copro::registry(),
            budget: args.budget,
            calibration,
        });
        let failed = |e: String| {
            eprintln!("netvm: {e}");
            EXIT_ERROR
        };
        if let Some(path) = &args.control {
            servers.push(ControlServer::start(path, driver.control()).map_err(failed)?);
        }
        if let Some(port) = args.control_tcp {
            let server = ControlServer::start_tcp(port, driver.control()).map_err(failed)?;
            if port == 0 {
                eprintln!("netvm: control port {}", server.endpoint());
            }
            servers.push(server);
        }
    }

    let bar = progress_bar(args.repeat);
    let result = driver.run();
    // The data paths as the run ended (the control plane may have changed them).
    let datapaths = match servers.first() {
        Some(_) => driver.control().datapath_stats().unwrap_or_default(),
        None => {
            let app = driver.app();
            netvm_runtime::datapath::stats(&manifest, &app.stats(), &|n| app.module(n))
        }
    };
    drop(servers);
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let r = result.map_err(|e| report(&e))?;
    let exit = common::finish_report(&r);
    if r.output_closed || !write_dumps(&driver.app(), &dumps)? {
        return Ok(exit);
    }
    let text = stats_output(args.stats, &driver.app(), &r, args.repeat, admission.as_ref(), &datapaths);
    if !text.is_empty() {
        common::stdout_write(&text)?;
    }
    Ok(exit)
}

/// The `-r [PORT=]FILE` inputs: standard input at most once.
fn parse_inputs(read: &[String]) -> Result<Vec<(u16, PathBuf)>, u8> {
    let mut inputs = Vec::new();
    for r in read {
        match common::parse_input(r) {
            Ok(x) => inputs.push(x),
            Err(e) => {
                eprintln!("netvm: -r {r}: {e}");
                return Err(EXIT_USAGE);
            }
        }
    }
    if inputs.iter().filter(|(_, p)| p.as_os_str() == "-").count() > 1 {
        eprintln!("netvm: standard input can be read only once (-r -)");
        return Err(EXIT_USAGE);
    }
    Ok(inputs)
}

/// The application to run: the manifest given, or one made for `--program`
/// or `--filter` with a source on each of `in_ports`.
fn load_manifest(args: &RunArgs, in_ports: &[u16]) -> Result<Manifest, u8> {
    match (&args.app, &args.program) {
        (None, None) if args.filter.is_some() => {
            let expr = args.filter.as_deref().unwrap_or_default();
            let f = crate::filter::compile_expression(expr, &[])?;
            Ok(crate::filter::filter_manifest(&f, in_ports))
        }
        (Some(app), None) => Manifest::load(app).map_err(|e| report(&e)),
        (None, Some(prog)) => {
            let out_ports = load_program(prog).map_err(|e| report(&e))?.module.out_ports;
            Ok(Manifest::single(prog, in_ports, out_ports, None))
        }
        _ => {
            eprintln!("netvm: give either an application manifest or --program");
            Err(EXIT_USAGE)
        }
    }
}

/// Builds the application on the chosen engine, with its links up on
/// `in_ports` and the `--load` tables loaded; every input port must have a source.
fn build_app(args: &RunArgs, manifest: &Manifest, engine: &dyn netvm_runtime::Engine, in_ports: &[u16]) -> Result<Application, u8> {
    let registry = netvm_copro::registry();
    let mut app = Application::build(manifest, engine, &registry, args.budget).map_err(|e| report(&e))?;
    app.set_link_state(in_ports);
    for spec in &args.load {
        let Some((name, file)) = spec.split_once('=') else {
            eprintln!("netvm: --load {spec}: expected NAME=FILE");
            return Err(EXIT_USAGE);
        };
        let loaded = std::fs::read_to_string(file).map_err(|e| e.to_string()).and_then(|text| app.load_table(name, &text));
        if let Err(e) = loaded {
            eprintln!("netvm: --load {name}: {file}: {e}");
            return Err(EXIT_ERROR);
        }
    }
    let sources = app.input_ports();
    if let Some(p) = in_ports.iter().find(|p| !sources.contains(p)) {
        eprintln!("netvm: input port {p} has no source in the application (sources listen on {sources:?})");
        return Err(EXIT_USAGE);
    }
    Ok(app)
}

/// The `--dump NAME=FILE` targets, each naming a coprocessor of `app`.
fn dump_targets(app: &Application, dump: &[String]) -> Result<Vec<(String, String)>, u8> {
    let mut dumps = Vec::new();
    for spec in dump {
        match spec.split_once('=') {
            Some((name, file)) if app.copro(name).is_ok() => dumps.push((name.to_string(), file.to_string())),
            Some((name, _)) => {
                eprintln!("netvm: --dump {spec}: {}", app.copro(name).err().unwrap_or_default());
                return Err(EXIT_USAGE);
            }
            None => {
                eprintln!("netvm: --dump {spec}: expected NAME=FILE");
                return Err(EXIT_USAGE);
            }
        }
    }
    Ok(dumps)
}

/// The outputs: `-w` (one file, or one per sink port with `{port}`), then
/// the files the manifest's sinks name, in the inputs' format `spec`.
fn add_sinks(driver: &mut Driver, write: Option<&str>, manifest: &Manifest, spec: PcapHeaderSpec) -> Result<(), u8> {
    if let Some(p) = write {
        if p.contains("{port}") {
            let mut sink_ports: Vec<u16> = manifest.sinks.iter().map(|s| s.port).collect();
            sink_ports.sort_unstable();
            sink_ports.dedup();
            for port in sink_ports {
                let s = common::create_sink(Path::new(&p.replace("{port}", &port.to_string())), spec)?;
                driver.add_sink(port, Box::new(s));
            }
        } else {
            driver.add_sink(1, Box::new(common::create_sink(Path::new(p), spec)?));
        }
    }
    for s in &manifest.sinks {
        if let Some(f) = &s.file {
            driver.add_sink(s.port, Box::new(common::create_sink(f, spec)?));
        }
    }
    Ok(())
}

/// Writes the `--dump` tables after the run; `Ok(false)`: standard output
/// was closed by its reader, stop quietly.
fn write_dumps(app: &Application, dumps: &[(String, String)]) -> Result<bool, u8> {
    for (name, file) in dumps {
        let text = app.dump_table(name).unwrap_or_default();
        if file == "-" {
            if !common::stdout_write(&text)? {
                return Ok(false);
            }
        } else if let Err(e) = std::fs::write(file, text) {
            eprintln!("netvm: --dump {name}: {file}: {e}");
            return Err(EXIT_ERROR);
        }
    }
    Ok(true)
}

/// The `--stats` text (empty without `--stats`): the run's statistics with
/// the coprocessors' own.
fn stats_output(
    format: Option<StatsFormat>,
    app: &Application,
    r: &RunReport,
    repeat: u64,
    admission: Option<&Admitted>,
    datapaths: &[DataPathStats],
) -> String {
    let stats = app.stats();
    match format {
        Some(StatsFormat::Json) => {
            let mut j = stats_json(&stats, r, app.engine(), repeat);
            j["link"] = app.link().into();
            // `--engine tiered`, once the second tier took over: the packets run on the first.
            if let Some((_, first)) = app.tiered() {
                j["first_tier_packets"] = first.into();
            }
            let mut all = serde_json::Map::new();
            for (netpe, name, values) in app.copro_stats() {
                let obj: serde_json::Map<String, serde_json::Value> = values.into_iter().map(|(k, v)| (k, v.into())).collect();
                if let Some(pe) = j["netpes"].as_array_mut().and_then(|a| a.iter_mut().find(|p| p["name"] == netpe.as_str())) {
                    if !pe["copro"].is_object() {
                        pe["copro"] = serde_json::json!({});
                    }
                    pe["copro"][&name] = obj.clone().into();
                }
                all.insert(format!("{netpe}.{name}"), obj.into());
            }
            j["copro"] = all.into();
            let one = |a: &Admission| {
                serde_json::json!({
                    "packet_ns": a.packet_ns,
                    "headroom_ns": a.headroom_ns,
                    "load": a.load(),
                    "path": a.path,
                    "memory": a.memory,
                    "tables": a.tables,
                })
            };
            match admission {
                Some(Admitted::Whole(a)) => j["admission"] = one(a),
                Some(Admitted::DataPaths { each, load, utilization }) => {
                    let each: serde_json::Map<String, serde_json::Value> = each.iter().map(|(n, a)| (n.clone(), one(a))).collect();
                    j["admission"] = serde_json::json!({"load": load, "utilization": utilization, "datapaths": each});
                }
                None => {}
            }
            if !datapaths.is_empty() {
                j["datapaths"] = netvm_runtime::socket::datapaths_json(datapaths);
            }
            if let (Some(c), Some(stage)) = (app.capsule_stats(), app.capsule_stage()) {
                let ess: serde_json::Map<String, serde_json::Value> = stage.ess_stats().into_iter().map(|(k, v)| (k, v.into())).collect();
                // This instance's cache (each worker had its own); hits are every worker's.
                let (programs, _, _, evictions) = stage.cache_stats();
                j["capsules"] = serde_json::json!({
                    "capsules": c.capsules,
                    "ordinary": c.ordinary,
                    "forwarded": c.forwarded,
                    "returned": c.returned,
                    "dropped": c.dropped,
                    "verified": c.verified,
                    "instructions": c.instructions,
                    "compiled": c.compiled,
                    "compile_ns": c.compile_ns,
                    "native": c.native,
                    "code_cache": {"hits": c.cached, "programs": programs, "evictions": evictions},
                    "ess": ess,
                });
            }
            format!("{j}\n")
        }
        Some(StatsFormat::Text) => {
            let mut t = stats_text(&stats, r, &format!("{} ({})", app.engine(), app.link()));
            for d in datapaths {
                let ports: Vec<String> = d.ports.iter().map(|(p, n)| format!("{p}={n}")).collect();
                t += &format!(
                    "datapath {} ({}): packets={} out[{}] dropped={} faults={}\n",
                    d.name,
                    d.selector,
                    d.packets,
                    ports.join(" "),
                    d.dropped,
                    d.faults
                );
            }
            for (netpe, name, values) in app.copro_stats() {
                let v: Vec<String> = values.iter().map(|(k, v)| format!("{k}={v}")).collect();
                t += &format!("copro {netpe}.{name}: {}\n", v.join(" "));
            }
            t
        }
        None => String::new(),
    }
}

/// A spinner on a terminal while long measurements (`--repeat`) run.
fn progress_bar(repeat: u64) -> Option<indicatif::ProgressBar> {
    if repeat < 100 || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_message(format!("running {repeat} repetitions"));
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    Some(bar)
}

/// Faults by kind name, every kind present.
fn fault_map(faults: &FaultCounts) -> serde_json::Map<String, serde_json::Value> {
    faults.iter().map(|(k, n)| (k.name().to_string(), serde_json::json!(n))).collect()
}

/// The `--stats json` object.
pub fn stats_json(s: &AppStats, r: &RunReport, engine: &str, repeat: u64) -> serde_json::Value {
    let ns_per_packet = r.ns_per_packet();
    let ports: serde_json::Map<String, serde_json::Value> = s.ports.iter().map(|(p, n)| (p.to_string(), serde_json::json!(n))).collect();
    let netpes: Vec<serde_json::Value> = s
        .netpes
        .iter()
        .map(|c| {
            let f = &c.flow;
            serde_json::json!({
                "name": c.name,
                "in": f.packets_in,
                "out": f.packets_out,
                "dropped": f.dropped,
                "unconnected": f.unconnected,
                "faults": fault_map(&f.faults),
                "budget_used": f.budget_used,
            })
        })
        .collect();
    serde_json::json!({
        "packets": s.packets,
        "ports": ports,
        "inputs": s.inputs.iter().map(|(p, n)| (p.to_string(), serde_json::json!(n))).collect::<serde_json::Map<_, _>>(),
        "dropped": s.dropped,
        "no_source": s.no_source,
        "faults": fault_map(&s.faults),
        "ns_per_packet": (ns_per_packet * 100.0).round() / 100.0,
        "engine": engine,
        "repeat": repeat,
        "netpes": netpes,
        "workers": workers_json(r),
        "distribution": r.distribution.map_or("none", |d| d.name()),
        "io_wait_ns": r.io_wait.as_nanos() as u64,
        "wall_ns": r.wall.as_nanos() as u64,
        "input": { "packets": r.input_packets, "bytes": r.input_bytes },
        "memory": memory_json(r),
    })
}

/// Packet memory used, and the process's peak resident memory (VmHWM).
pub fn memory_json(r: &RunReport) -> serde_json::Value {
    serde_json::json!({
        "blocks_high_water": r.blocks_high_water,
        "pool_overflow": r.pool_overflow,
        "replayed": r.replayed,
        "peak_rss_kb": peak_rss_kb(),
    })
}

/// The process's peak resident set size in KiB (`VmHWM` of /proc/self/status; 0 where there is none).
pub fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("VmHWM:").and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())))
        .unwrap_or(0)
}

/// Per worker: packets, batches, time running the application and time waiting for work.
pub fn workers_json(r: &RunReport) -> serde_json::Value {
    r.workers
        .iter()
        .map(|w| {
            serde_json::json!({
                "packets": w.packets,
                "batches": w.batches,
                "busy_ns": w.busy.as_nanos() as u64,
                "wait_ns": w.wait.as_nanos() as u64,
            })
        })
        .collect()
}

fn stats_text(s: &AppStats, r: &RunReport, engine: &str) -> String {
    use std::fmt::Write;
    let ns_per_packet = r.ns_per_packet();
    let mut t = String::new();
    let _ = writeln!(t, "packets     {}", s.packets);
    for (p, n) in &s.ports {
        let _ = writeln!(t, "port {p:<6} {n}");
    }
    let _ = writeln!(t, "dropped     {}", s.dropped);
    for (k, n) in s.faults.iter().filter(|(_, n)| *n != 0) {
        let _ = writeln!(t, "fault {:<6} {n}", k.name());
    }
    let _ = writeln!(t, "engine      {engine}, {ns_per_packet:.1} ns/packet");
    for (i, w) in r.workers.iter().enumerate() {
        let _ = writeln!(t, "worker {i:<4} {} packets, busy {:?}, waiting {:?}", w.packets, w.busy, w.wait);
    }
    for c in &s.netpes {
        let _ = writeln!(
            t,
            "netpe {}: in {:?} out {:?} dropped {} unconnected {} faults {:?} budget used {}",
            c.name, c.flow.packets_in, c.flow.packets_out, c.flow.dropped, c.flow.unconnected, c.flow.faults.0, c.flow.budget_used
        );
    }
    t
}
