//! `netvm ids`: NetVMSnort. Compiles a Snort rule file (the subset of
//! `netvm_ids::rules`) into a NetIL application, runs a capture through it
//! and writes one JSON line per (packet, sid) alert.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use netvm_copro::eventlog::{Event, EventLog};
use netvm_io::{CaptureReader, PcapWriter};
use netvm_runtime::{Application, Engine, InterpEngine, JitEngine};
use netvm_vm::Packet;

use crate::run::BATCH;
use crate::{report, EXIT_ERROR, EXIT_USAGE};

#[derive(Args, Debug)]
pub struct IdsArgs {
    /// Snort rules (see docs/ids.md for the subset); rules outside it are reported with their line and skipped.
    #[arg(long, value_name = "RULES")]
    rules: PathBuf,
    /// Input capture (Ethernet).
    #[arg(short = 'r', value_name = "IN.pcap")]
    read: PathBuf,
    /// Alerts, one JSON object per line: packet (1-based), sid, rev, msg, action, ts.
    #[arg(long, value_name = "OUT.jsonl")]
    alerts: PathBuf,
    /// Also write the packets that are not dropped (by `drop` rules) here.
    #[arg(short = 'w', value_name = "OUT.pcap")]
    write: Option<PathBuf>,
    /// Define a rule variable: `--var HOME_NET=10.0.0.0/8` (`$HOME_NET` in rules).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    vars: Vec<String>,
    /// Exit 1 if any rule was skipped.
    #[arg(long)]
    strict: bool,
    /// Execution engine.
    #[arg(long, value_enum, default_value_t = IdsEngine::Jit)]
    engine: IdsEngine,
    /// Write the compiled application's NetIL listings and tables into DIR.
    #[arg(long, value_name = "DIR")]
    emit: Option<PathBuf>,
    /// Print statistics on stdout as one JSON object.
    #[arg(long)]
    stats: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum IdsEngine {
    /// Native code compiled with Cranelift.
    Jit,
    /// The reference interpreter.
    Interp,
}

/// Escapes a string for JSON.
fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

pub fn cmd_ids(args: IdsArgs) -> u8 {
    let mut vars = HashMap::new();
    for v in &args.vars {
        match v.split_once('=') {
            Some((k, val)) if !k.is_empty() => {
                vars.insert(k.to_string(), val.to_string());
            }
            _ => {
                eprintln!("netvm: --var {v}: expected NAME=VALUE");
                return EXIT_USAGE;
            }
        }
    }
    let text = match std::fs::read(&args.rules) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => {
            eprintln!("netvm: {}: {e}", args.rules.display());
            return EXIT_ERROR;
        }
    };
    let set = netvm_ids::parse_rules(&text, &vars);
    for e in &set.errors {
        eprintln!("netvm: {}:{}: {} (skipped)", args.rules.display(), e.line, e.message);
    }
    eprintln!("netvm: {} rules compiled, {} skipped", set.rules.len(), set.errors.len());
    let app = match netvm_ids::compile(&set.rules) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("netvm: compiling the rules: {e}");
            return EXIT_ERROR;
        }
    };
    if let Some(dir) = &args.emit {
        if let Err(e) = emit(dir, &app) {
            eprintln!("netvm: --emit {}: {e}", dir.display());
            return EXIT_ERROR;
        }
    }
    let jit = JitEngine::default();
    let engine: &dyn Engine = match args.engine {
        IdsEngine::Interp => &InterpEngine,
        IdsEngine::Jit => &jit,
    };
    let mut running = match Application::build(&app.manifest, engine, &netvm_copro::registry(), None) {
        Ok(a) => a,
        Err(e) => return report(&e),
    };
    for (name, table) in &app.tables {
        if let Err(e) = running.load_table(name, table) {
            eprintln!("netvm: loading {name}: {e}");
            return EXIT_ERROR;
        }
    }
    let reader = match CaptureReader::open(&args.read) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("netvm: {e}");
            return EXIT_ERROR;
        }
    };
    if reader.link_type().is_some_and(|l| l != 1) {
        eprintln!("netvm: {}: link type {} is not Ethernet", args.read.display(), reader.link_type().unwrap_or(0));
        return EXIT_ERROR;
    }
    let mut alerts = match std::fs::File::create(&args.alerts) {
        Ok(f) => BufWriter::new(f),
        Err(e) => {
            eprintln!("netvm: {}: {e}", args.alerts.display());
            return EXIT_ERROR;
        }
    };
    let mut passed = match &args.write {
        Some(p) => match PcapWriter::create(p) {
            Ok(w) => Some(w),
            Err(e) => {
                eprintln!("netvm: {}: {e}", p.display());
                return EXIT_ERROR;
            }
        },
        None => None,
    };

    let mut exit = 0u8;
    let mut batch: Vec<Packet> = Vec::with_capacity(BATCH);
    let mut verdicts = Vec::with_capacity(BATCH);
    let mut emitted: Vec<Packet> = Vec::new();
    let (mut packets, mut bytes, mut alert_lines, mut elapsed) = (0u64, 0u64, 0u64, Duration::ZERO);
    let mut reader = reader;
    loop {
        batch.clear();
        while batch.len() < BATCH {
            match reader.next() {
                Some(Ok(p)) => batch.push(p),
                Some(Err(e)) => {
                    eprintln!("netvm: {e} ({} packets before it are processed)", packets + batch.len() as u64);
                    exit = EXIT_ERROR;
                    break;
                }
                None => break,
            }
        }
        if batch.is_empty() {
            break;
        }
        packets += batch.len() as u64;
        bytes += batch.iter().map(|p| p.data.len() as u64).sum::<u64>();
        let start = Instant::now();
        running.process_batch(&mut batch, &mut verdicts, &mut |_, p| emitted.push(p.clone()));
        elapsed += start.elapsed();
        let mut events: Vec<Event> = Vec::new();
        for log in &app.event_logs {
            if let Some(l) = running.copro_mut(log).ok().and_then(|c| c.as_any_mut()).and_then(|a| a.downcast_mut::<EventLog>()) {
                events.extend(l.drain());
            }
        }
        match write_alerts(&mut alerts, events, &set.rules) {
            Ok(n) => alert_lines += n,
            Err(e) => {
                eprintln!("netvm: {}: {e}", args.alerts.display());
                return EXIT_ERROR;
            }
        }
        if let Some(w) = &mut passed {
            for p in emitted.drain(..) {
                if let Err(e) = w.write(&p) {
                    eprintln!("netvm: writing passed packets: {e}");
                    return EXIT_ERROR;
                }
            }
        }
        emitted.clear();
    }
    if let Err(e) = alerts.flush() {
        eprintln!("netvm: {}: {e}", args.alerts.display());
        return EXIT_ERROR;
    }
    if let Some(w) = passed {
        if let Err(e) = w.finish() {
            eprintln!("netvm: writing passed packets: {e}");
            return EXIT_ERROR;
        }
    }
    let stats = running.stats();
    let overflow: u64 = running.copro_stats().iter().flat_map(|(_, _, s)| s.iter().filter(|(k, _)| k == "overflow").map(|(_, v)| *v)).sum();
    if overflow > 0 {
        eprintln!("netvm: {overflow} alerts were lost (event log full)");
        exit = EXIT_ERROR;
    }
    if args.stats {
        let faults: u64 = stats.faults.values().sum();
        let j = serde_json::json!({
            "packets": packets,
            "rules": set.rules.len(),
            "skipped": set.errors.len(),
            "detect_netpes": app.event_logs.len(),
            "alerts": alert_lines,
            "dropped": stats.dropped,
            "faults": faults,
            "engine": running.engine(),
            "ns_per_packet": if packets == 0 { 0.0 } else { (elapsed.as_nanos() as f64 / packets as f64 * 100.0).round() / 100.0 },
            "bytes": bytes,
            "gbit_per_s": if elapsed.is_zero() { 0.0 } else { (bytes as f64 * 8.0 / elapsed.as_nanos() as f64 * 1000.0).round() / 1000.0 },
        });
        println!("{j}");
    }
    if args.strict && !set.errors.is_empty() {
        exit = EXIT_ERROR;
    }
    exit
}

/// Writes the alerts of one batch: per packet, nothing if a pass rule
/// matched, else one line per alert or drop rule (by sid order of the file).
fn write_alerts(out: &mut impl Write, mut events: Vec<Event>, rules: &[netvm_ids::Rule]) -> std::io::Result<u64> {
    events.sort_by_key(|e| (e.words[0], e.words[1]));
    let mut n = 0;
    let mut i = 0;
    while i < events.len() {
        let packet = events[i].words[0];
        let j = events[i..].iter().position(|e| e.words[0] != packet).map_or(events.len(), |k| i + k);
        let group = &events[i..j];
        i = j;
        let pass = group.iter().any(|e| rules.get(e.words[1] as usize).is_some_and(|r| r.action == netvm_ids::Action::Pass));
        if pass {
            continue;
        }
        let ids: BTreeSet<u32> = group.iter().map(|e| e.words[1]).collect();
        for id in ids {
            let Some(r) = rules.get(id as usize) else { continue };
            let ts = group[0].ts;
            writeln!(
                out,
                "{{\"packet\":{packet},\"sid\":{},\"gid\":1,\"rev\":{},\"msg\":{},\"action\":\"{}\",\"ts\":\"{}.{:09}\"}}",
                r.sid,
                r.rev,
                json_str(&r.msg),
                r.action.name(),
                ts.sec,
                ts.nsec
            )?;
            n += 1;
        }
    }
    Ok(n)
}

/// Writes the application: app.toml, one .nil per NetPE, the tables.
fn emit(dir: &std::path::Path, app: &netvm_ids::IdsApp) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, text) in &app.listings {
        std::fs::write(dir.join(format!("{name}.nil")), text)?;
    }
    let mut loads = String::new();
    for (name, text) in &app.tables {
        let file = format!("{name}.txt");
        std::fs::write(dir.join(&file), text)?;
        loads += &format!(" --load {name}={}", dir.join(&file).display());
    }
    let mut toml = format!(
        "# NetVMSnort application compiled by `netvm ids --emit`.\n# Run it: netvm run {}/app.toml{loads} -r IN.pcap --stats json\nname = \"ids\"\nbudget = {}\n",
        dir.display(),
        netvm_ids::compile::BUDGET
    );
    for (name, _) in &app.listings {
        toml += &format!("\n[[netpe]]\nname = \"{name}\"\nprogram = \"{name}.nil\"\n");
    }
    toml += "\n[[source]]\nport = 0\nto = \"decode\"\n";
    for c in &app.manifest.connections {
        toml += &format!("\n[[connect]]\nfrom = \"{}\"\nto = \"{}\"\n", c.from, c.to);
    }
    toml += "\n[[sink]]\nfrom = \"verdict.0\"\nport = 1\n";
    std::fs::write(dir.join("app.toml"), toml)
}
