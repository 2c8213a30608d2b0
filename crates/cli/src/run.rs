//! `netvm run`: load captures, build the application, process the packets
//! (optionally several times from memory), write outputs and statistics.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use netvm_io::{read_capture, PcapWriter};
use netvm_runtime::{load_program, AppStats, Application, Engine, InterpEngine, JitEngine, LinkMode, Manifest, Verdict};
use netvm_vm::{FaultKind, Packet};

use crate::{report, EXIT_ERROR, EXIT_USAGE};

/// Packets handed to the application per `process_batch` call.
pub const BATCH: usize = 64;

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
    /// Input capture, optionally on an application input port: `-r IN.pcap` (port 0) or `-r 2=IN.pcap`.
    /// Several inputs are merged in timestamp order (ties: lower port first).
    #[arg(short = 'r', value_name = "[PORT=]IN.pcap", required = true)]
    read: Vec<String>,
    /// Output capture for output port 1; with `{port}` in the name, one file per output port.
    #[arg(short = 'w', value_name = "OUT")]
    write: Option<String>,
    /// Execution engine: the Cranelift JIT, or the reference interpreter.
    #[arg(long, value_enum, default_value_t = EngineArg::Jit)]
    engine: EngineArg,
    /// Run the trace N times from memory (for measurement); outputs are written once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    repeat: u64,
    /// How the JIT binds NetPEs: one function per application whose port
    /// crossings are jumps (`direct`), one function per NetPE called through
    /// a vector table (`table`), or the runtime walking the graph and calling
    /// each NetPE (`dispatch`, what the interpreter always does).
    #[arg(long, value_enum, default_value_t = LinkArg::Direct)]
    link: LinkArg,
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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum EngineArg {
    /// Native code compiled with Cranelift (the default).
    Jit,
    /// The reference interpreter.
    Interp,
}

/// `--link`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LinkArg {
    /// The whole application is one native function; a port crossing is a jump.
    Direct,
    /// One native function per NetPE; a port crossing is a tail call through a vector table.
    Table,
    /// The runtime walks the graph and calls each NetPE's code per exchange buffer.
    Dispatch,
}

impl LinkArg {
    /// The JIT's link mode (`None`: the runtime dispatches).
    pub fn mode(self) -> Option<LinkMode> {
        match self {
            LinkArg::Direct => Some(LinkMode::Direct),
            LinkArg::Table => Some(LinkMode::Table),
            LinkArg::Dispatch => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum StatsFormat {
    Json,
    Text,
}

fn parse_input(s: &str) -> Result<(u16, PathBuf), String> {
    if let Some((port, path)) = s.split_once('=') {
        if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
            let p = port.parse::<u16>().map_err(|_| format!("input port `{port}` is out of range"))?;
            return Ok((p, PathBuf::from(path)));
        }
    }
    Ok((0, PathBuf::from(s)))
}

/// Output files by application output port.
struct Outputs {
    pattern: Option<String>,
    writers: BTreeMap<u16, Vec<PcapWriter>>,
}

impl Outputs {
    fn open(pattern: Option<&str>, sink_files: &[(u16, PathBuf)], ports: &[u16]) -> Result<Outputs, String> {
        let mut writers: BTreeMap<u16, Vec<PcapWriter>> = BTreeMap::new();
        let mut create = |port: u16, path: &Path| -> Result<(), String> {
            let w = PcapWriter::create(path).map_err(|e| e.to_string())?;
            writers.entry(port).or_default().push(w);
            Ok(())
        };
        if let Some(p) = pattern {
            if p.contains("{port}") {
                for port in ports {
                    create(*port, Path::new(&p.replace("{port}", &port.to_string())))?;
                }
            } else {
                create(1, Path::new(p))?;
            }
        }
        for (port, path) in sink_files {
            create(*port, path)?;
        }
        Ok(Outputs { pattern: pattern.map(str::to_string), writers })
    }

    fn wants(&self) -> bool {
        !self.writers.is_empty()
    }

    fn write(&mut self, port: u16, pkt: &Packet) -> Result<(), String> {
        if let Some(ws) = self.writers.get_mut(&port) {
            for w in ws {
                w.write(pkt).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<(), String> {
        let _ = self.pattern;
        for (_, ws) in self.writers {
            for w in ws {
                w.finish().map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }
}

pub fn cmd_run(args: RunArgs) -> u8 {
    // Inputs.
    let mut inputs = Vec::new();
    for r in &args.read {
        match parse_input(r) {
            Ok(x) => inputs.push(x),
            Err(e) => {
                eprintln!("netvm: -r {r}: {e}");
                return EXIT_USAGE;
            }
        }
    }
    let mut in_ports: Vec<u16> = inputs.iter().map(|i| i.0).collect();
    in_ports.sort_unstable();
    in_ports.dedup();

    // Application.
    let manifest = match (&args.app, &args.program) {
        (None, None) if args.filter.is_some() => {
            let expr = args.filter.as_deref().unwrap_or_default();
            match crate::filter::compile_expression(expr, &[]) {
                Ok(f) => crate::filter::filter_manifest(&f, &in_ports),
                Err(code) => return code,
            }
        }
        (Some(app), None) => match Manifest::load(app) {
            Ok(m) => m,
            Err(e) => return report(&e),
        },
        (None, Some(prog)) => {
            let out_ports = match load_program(prog) {
                Ok(p) => p.module.out_ports,
                Err(e) => return report(&e),
            };
            Manifest::single(prog, &in_ports, out_ports, None)
        }
        _ => {
            eprintln!("netvm: give either an application manifest or --program");
            return EXIT_USAGE;
        }
    };
    let jit = JitEngine::with_link(args.link.mode());
    let engine: &dyn Engine = match args.engine {
        EngineArg::Interp => &InterpEngine,
        EngineArg::Jit => &jit,
    };
    let registry = netvm_copro::registry();
    let mut app = match Application::build(&manifest, engine, &registry, args.budget) {
        Ok(a) => a,
        Err(e) => return report(&e),
    };
    app.set_link_state(&in_ports);
    for spec in &args.load {
        let Some((name, file)) = spec.split_once('=') else {
            eprintln!("netvm: --load {spec}: expected NAME=FILE");
            return EXIT_USAGE;
        };
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("netvm: --load {name}: {file}: {e}");
                return EXIT_ERROR;
            }
        };
        if let Err(e) = app.load_table(name, &text) {
            eprintln!("netvm: --load {name}: {file}: {e}");
            return EXIT_ERROR;
        }
    }
    let mut dumps = Vec::new();
    for spec in &args.dump {
        match spec.split_once('=') {
            Some((name, file)) if app.copro(name).is_ok() => dumps.push((name.to_string(), file.to_string())),
            Some((name, _)) => {
                eprintln!("netvm: --dump {spec}: {}", app.copro(name).err().unwrap_or_default());
                return EXIT_USAGE;
            }
            None => {
                eprintln!("netvm: --dump {spec}: expected NAME=FILE");
                return EXIT_USAGE;
            }
        }
    }
    let sources = app.input_ports();
    if let Some(p) = in_ports.iter().find(|p| !sources.contains(p)) {
        eprintln!("netvm: input port {p} has no source in the application (sources listen on {sources:?})");
        return EXIT_USAGE;
    }

    // Read every input, keep what precedes a corrupt record, merge by time.
    let mut exit = 0u8;
    let mut packets: Vec<Packet> = Vec::new();
    for (port, path) in &inputs {
        let (pkts, err) = read_capture(path, *port);
        if let Some(e) = err {
            eprintln!("netvm: {e} ({} packets before it are processed)", pkts.len());
            exit = EXIT_ERROR;
        }
        packets.extend(pkts);
    }
    if inputs.len() > 1 {
        packets.sort_by_key(|p| (p.ts, p.in_port));
    }

    // Outputs.
    let mut sink_ports: Vec<u16> = manifest.sinks.iter().map(|s| s.port).collect();
    sink_ports.sort_unstable();
    sink_ports.dedup();
    let sink_files: Vec<(u16, PathBuf)> = manifest.sinks.iter().filter_map(|s| s.file.clone().map(|f| (s.port, f))).collect();
    let mut outputs = match Outputs::open(args.write.as_deref(), &sink_files, &sink_ports) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("netvm: {e}");
            return EXIT_ERROR;
        }
    };

    // Process.
    let total = packets.len() as u64 * args.repeat;
    let bar = progress_bar(total);
    let mut elapsed = Duration::ZERO;
    let mut verdicts: Vec<Verdict> = Vec::with_capacity(BATCH);
    let mut emitted: Vec<(u16, Packet)> = Vec::new();
    let capture = outputs.wants();
    for rep in 0..args.repeat {
        let keep = capture && rep == 0;
        for chunk in packets.chunks(BATCH) {
            let mut batch = chunk.to_vec();
            let start = Instant::now();
            if keep {
                app.process_batch(&mut batch, &mut verdicts, &mut |port, p| emitted.push((port, p.clone())));
            } else {
                app.process_batch(&mut batch, &mut verdicts, &mut |_, _| {});
            }
            elapsed += start.elapsed();
            if keep {
                for (port, p) in emitted.drain(..) {
                    if let Err(e) = outputs.write(port, &p) {
                        eprintln!("netvm: writing output: {e}");
                        return EXIT_ERROR;
                    }
                }
            }
            if let Some(b) = &bar {
                b.inc(chunk.len() as u64);
            }
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Err(e) = outputs.finish() {
        eprintln!("netvm: writing output: {e}");
        return EXIT_ERROR;
    }

    for (name, file) in &dumps {
        let text = app.dump_table(name).unwrap_or_default();
        let written = if file == "-" {
            use std::io::Write;
            std::io::stdout().write_all(text.as_bytes())
        } else {
            std::fs::write(file, text)
        };
        if let Err(e) = written {
            eprintln!("netvm: --dump {name}: {file}: {e}");
            return EXIT_ERROR;
        }
    }

    let stats = app.stats();
    let ns_per_packet = if stats.packets == 0 { 0.0 } else { elapsed.as_nanos() as f64 / stats.packets as f64 };
    match args.stats {
        Some(StatsFormat::Json) => {
            let mut j = stats_json(&stats, ns_per_packet, app.engine(), args.repeat);
            j["link"] = app.link().into();
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
            println!("{j}");
        }
        Some(StatsFormat::Text) => {
            print!("{}", stats_text(&stats, ns_per_packet, &format!("{} ({})", app.engine(), app.link())));
            for (netpe, name, values) in app.copro_stats() {
                let v: Vec<String> = values.iter().map(|(k, v)| format!("{k}={v}")).collect();
                println!("copro {netpe}.{name}: {}", v.join(" "));
            }
        }
        None => {}
    }
    exit
}

fn progress_bar(total: u64) -> Option<indicatif::ProgressBar> {
    if total < 1_000_000 || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {bar:40} {pos}/{len} packets ({per_sec}, eta {eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Some(bar)
}

fn fault_map(faults: &BTreeMap<&'static str, u64>) -> serde_json::Map<String, serde_json::Value> {
    FaultKind::ALL.iter().map(|k| (k.name().to_string(), serde_json::json!(faults.get(k.name()).copied().unwrap_or(0)))).collect()
}

/// The `--stats json` object.
pub fn stats_json(s: &AppStats, ns_per_packet: f64, engine: &str, repeat: u64) -> serde_json::Value {
    let ports: serde_json::Map<String, serde_json::Value> = s.ports.iter().map(|(p, n)| (p.to_string(), serde_json::json!(n))).collect();
    let netpes: Vec<serde_json::Value> = s
        .netpes
        .iter()
        .map(|c| {
            let faults: serde_json::Map<String, serde_json::Value> =
                FaultKind::ALL.iter().map(|k| (k.name().to_string(), serde_json::json!(c.fault_count(*k)))).collect();
            serde_json::json!({
                "name": c.name,
                "in": c.packets_in,
                "out": c.packets_out,
                "dropped": c.dropped,
                "unconnected": c.unconnected,
                "faults": faults,
            })
        })
        .collect();
    serde_json::json!({
        "packets": s.packets,
        "ports": ports,
        "dropped": s.dropped,
        "no_source": s.no_source,
        "faults": fault_map(&s.faults),
        "ns_per_packet": (ns_per_packet * 100.0).round() / 100.0,
        "engine": engine,
        "repeat": repeat,
        "netpes": netpes,
    })
}

fn stats_text(s: &AppStats, ns_per_packet: f64, engine: &str) -> String {
    use std::fmt::Write;
    let mut t = String::new();
    let _ = writeln!(t, "packets     {}", s.packets);
    for (p, n) in &s.ports {
        let _ = writeln!(t, "port {p:<6} {n}");
    }
    let _ = writeln!(t, "dropped     {}", s.dropped);
    for (k, n) in &s.faults {
        let _ = writeln!(t, "fault {k:<6} {n}");
    }
    let _ = writeln!(t, "engine      {engine}, {ns_per_packet:.1} ns/packet");
    for c in &s.netpes {
        let _ = writeln!(
            t,
            "netpe {}: in {:?} out {:?} dropped {} unconnected {} faults {:?}",
            c.name, c.packets_in, c.packets_out, c.dropped, c.unconnected, c.faults
        );
    }
    t
}
