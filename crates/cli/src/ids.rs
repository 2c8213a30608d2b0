//! `netvm ids`: NetVMSnort. Argument parsing over `netvm-ids` (rules, the
//! compiled application, the alert writer) and the runtime's driver.

use std::collections::HashMap;
use std::io::BufWriter;
use std::path::PathBuf;

use clap::Args;
use netvm_ids::AlertWriter;
use netvm_runtime::Driver;

use crate::common::{self, EngineArg, EngineOpts, LinkArg};
use crate::{EXIT_ERROR, EXIT_USAGE};

#[derive(Args, Debug)]
pub struct IdsArgs {
    /// Snort 2.9 or Snort 3 rules (see docs/ids.md); rules that do not parse, or that use options the
    /// compiler does not implement yet, are reported with their line and reason and skipped.
    #[arg(long, value_name = "RULES")]
    rules: PathBuf,
    /// Input capture (Ethernet); `-` reads standard input.
    #[arg(short = 'r', value_name = "IN.pcap", required_unless_present = "check")]
    read: Option<PathBuf>,
    /// Alerts, one JSON object per line: packet (1-based), sid, gid, rev, msg, action, ts.
    #[arg(long, value_name = "OUT.jsonl", required_unless_present = "check")]
    alerts: Option<PathBuf>,
    /// Only check the rules: list every rule as compiled or skipped (with the reason) on standard
    /// output, then the skips by option; no capture is read.
    #[arg(long)]
    check: bool,
    /// Also write the packets that are not dropped (by `drop` rules) here (`-`: standard output).
    #[arg(short = 'w', value_name = "OUT.pcap")]
    write: Option<PathBuf>,
    /// Define a rule variable: `--var HOME_NET=10.0.0.0/8` (`$HOME_NET` in rules).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    vars: Vec<String>,
    /// Exit 1 if any rule was skipped or any packet not fully inspected.
    #[arg(long)]
    strict: bool,
    /// Execution engine. The default, tiered, inspects on the baseline
    /// compiler's code (rule sets of thousands of rules compile in seconds,
    /// not the JIT's tens of seconds) and moves to the JIT's code only on a
    /// run long enough to pay for compiling it.
    #[arg(long, value_enum, default_value_t = EngineArg::Tiered)]
    engine: EngineArg,
    /// How the JIT binds the NetPEs (`table`, the default: one function per
    /// NetPE, so that the large detect NetPEs compile apart from the batch loop).
    #[arg(long, value_enum, default_value_t = LinkArg::Table)]
    link: LinkArg,
    /// Write the compiled application's NetIL listings and tables into DIR.
    #[arg(long, value_name = "DIR")]
    emit: Option<PathBuf>,
    /// Print statistics on stdout as one JSON object.
    #[arg(long)]
    stats: bool,
    #[command(flatten)]
    engine_opts: EngineOpts,
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
    let started = std::time::Instant::now();
    let set = match netvm_ids::parse_rules_file(&args.rules, &vars) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("netvm: {}: {e}", args.rules.display());
            return EXIT_ERROR;
        }
    };
    let (rules, not_compiled) = netvm_ids::compile::select(&set);
    if args.check {
        check_report(&set, &rules, &not_compiled);
    }
    let mut skipped = not_compiled;
    skipped.extend(set.skipped.iter().cloned());
    skipped.sort_by_key(|s| (s.file, s.line));
    if args.check {
        eprintln!("netvm: {} rules compiled, {} skipped", rules.len(), skipped.len());
        return if args.strict && !skipped.is_empty() { EXIT_ERROR } else { 0 };
    }
    for e in &skipped {
        eprintln!("netvm: {}:{}: {} (skipped)", set.file_name(e.file), e.line, e.reason);
    }
    eprintln!("netvm: {} rules compiled, {} skipped", rules.len(), skipped.len());
    let (Some(read), Some(alerts_path)) = (&args.read, &args.alerts) else {
        eprintln!("netvm: ids needs -r IN.pcap and --alerts OUT.jsonl (or --check)");
        return EXIT_USAGE;
    };
    let parse_time = started.elapsed();
    let t = std::time::Instant::now();
    let ids = match netvm_ids::compile(&rules) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("netvm: compiling the rules: {e}");
            return EXIT_ERROR;
        }
    };
    if let Some(dir) = &args.emit {
        if let Err(e) = emit(dir, &ids) {
            eprintln!("netvm: --emit {}: {e}", dir.display());
            return EXIT_ERROR;
        }
    }
    if ids.manifest.distribution.as_deref() == Some("flow") && args.engine_opts.distribution == Some(common::DistributionArg::RoundRobin) {
        eprintln!(
            "netvm: --distribution round-robin: the rules use flow state (`flow`), which needs both directions of a flow on one worker"
        );
        return EXIT_USAGE;
    }
    let engine = common::engine(args.engine, args.link);
    let generate_time = t.elapsed();
    let (app, build) = match ids.instantiate_timed(engine.as_ref()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("netvm: {e}");
            return EXIT_ERROR;
        }
    };
    let engine_name = app.engine();
    // Alerts are ordered by packet whatever the workers, and the rules keep
    // no state between packets but their flows' (spread by flow): `auto` may use every CPU.
    let cfg = args.engine_opts.config(false, true);
    let mut driver = Driver::new(app, cfg);
    let spec = match common::open_source(&mut driver, read, 0) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let alerts_file = match std::fs::File::create(alerts_path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("netvm: {}: {e}", alerts_path.display());
            return EXIT_ERROR;
        }
    };
    let writer = std::rc::Rc::new(std::cell::RefCell::new(Some(AlertWriter::new(BufWriter::new(alerts_file), rules.clone()))));
    let w = std::rc::Rc::clone(&writer);
    let alerts_name = alerts_path.display().to_string();
    driver.on_events(Box::new(move |events| {
        let mut g = w.borrow_mut();
        let aw = g.as_mut().expect("the writer lives until the run ends");
        aw.write_events(events).map(|_| ()).map_err(|e| format!("{alerts_name}: {e}"))
    }));
    if let Some(p) = &args.write {
        match common::create_sink(p, spec) {
            Ok(s) => driver.add_sink(1, Box::new(s)),
            Err(code) => return code,
        }
    }
    let r = match driver.run() {
        Ok(r) => r,
        Err(e) => return crate::report(&e),
    };
    let mut exit = common::finish_report(&r);
    let aw = writer.borrow_mut().take().expect("the writer is there");
    let alert_lines = aw.alerts();
    if let Err(e) = aw.finish() {
        eprintln!("netvm: {}: {e}", alerts_path.display());
        return EXIT_ERROR;
    }
    let app = driver.app();
    let stats = app.stats();
    let overflow: u64 = app.copro_stats().iter().flat_map(|(_, _, s)| s.iter().filter(|(k, _)| k == "overflow").map(|(_, v)| *v)).sum();
    if overflow > 0 {
        eprintln!("netvm: {overflow} alerts were lost (event log full)");
        exit = EXIT_ERROR;
    }
    // What was not fully inspected, by reason: packets whose inspection
    // stopped at a fault (the budget, …), pcre searches PCRE2's limits stopped.
    let mut uninspected = serde_json::Map::new();
    for (kind, n) in stats.faults.iter().filter(|(_, n)| *n > 0) {
        uninspected.insert(kind.name().to_string(), n.into());
    }
    // A statistic summed over the instances of one name (one per detect NetPE).
    let sum = |instance: &str, key: &str| -> u64 {
        app.copro_stats()
            .iter()
            .filter(|(_, name, _)| name == instance)
            .flat_map(|(_, _, s)| s.iter().filter(|(k, _)| k == key).map(|(_, v)| *v))
            .sum()
    };
    let pcre_limits = sum("re", "limits");
    if pcre_limits > 0 {
        uninspected.insert("pcre_limit".into(), pcre_limits.into());
    }
    let retry_limits = sum("unins", "retry_limit");
    if retry_limits > 0 {
        uninspected.insert("retry_limit".into(), retry_limits.into());
    }
    if !uninspected.is_empty() {
        let what: Vec<String> = uninspected
            .iter()
            .map(|(k, v)| {
                if k == "pcre_limit" {
                    format!("{v} pcre searches stopped by PCRE2's limits")
                } else if k == "retry_limit" {
                    format!("{v} rule evaluations stopped by the retry limit of their backtracking")
                } else {
                    format!("{v} packet(s) stopped by a `{k}` fault (and dropped)")
                }
            })
            .collect();
        eprintln!("netvm: not every packet was fully inspected: {}", what.join(", "));
        if args.strict {
            exit = EXIT_ERROR;
        }
    }
    if args.stats {
        let faults: u64 = stats.total_faults();
        let busy = r.busy.as_nanos() as f64;
        let j = serde_json::json!({
            "packets": r.input_packets,
            "rules": rules.len(),
            "skipped": skipped.len(),
            "detect_netpes": ids.event_logs.len(),
            "alerts": alert_lines,
            "dropped": stats.dropped,
            "faults": faults,
            "uninspected": uninspected,
            "engine": engine_name,
            "ns_per_packet": (r.ns_per_packet() * 100.0).round() / 100.0,
            "bytes": r.input_bytes,
            "gbit_per_s": if busy == 0.0 { 0.0 } else { (r.input_bytes as f64 * 8.0 / busy * 1000.0).round() / 1000.0 },
            "workers": crate::run::workers_json(&r),
            "wall_ns": r.wall.as_nanos() as u64,
            "compile_ms": {
                "parse": ms(parse_time),
                "generate": ms(generate_time),
                "verify": ms(build.verify),
                "code": ms(build.code),
                "tables": ms(build.tables),
                "total": ms(parse_time + generate_time + build.verify + build.code + build.tables),
            },
        });
        if let Err(code) = common::stdout_write(&format!("{j}\n")) {
            return code;
        }
    }
    if args.strict && !skipped.is_empty() {
        exit = EXIT_ERROR;
    }
    exit
}

/// Milliseconds, to a tenth.
fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// `--check`: every rule, in file order, as compiled or skipped with its
/// reason; then the skips by option, most frequent first: those that did
/// not parse, then those the compiler does not handle yet.
fn check_report(set: &netvm_ids::RuleSet, rules: &[netvm_ids::Rule], not_compiled: &[netvm_ids::Skip]) {
    let mut lines: Vec<(usize, usize, String)> = Vec::with_capacity(rules.len() + set.skipped.len() + not_compiled.len());
    for r in rules {
        lines.push((r.file, r.line, format!("sid {}: compiled", r.sid)));
    }
    for s in set.skipped.iter().chain(not_compiled) {
        let sid = s.sid.map_or("-".to_string(), |n| n.to_string());
        lines.push((s.file, s.line, format!("sid {sid}: skipped: {}: {}", s.option, s.reason)));
    }
    lines.sort_by_key(|(f, l, _)| (*f, *l));
    let mut out = String::new();
    for (f, l, text) in &lines {
        out += &format!("{}:{l}: {text}\n", set.file_name(*f));
    }
    out += &format!(
        "{} rules compiled, {} skipped: {} not parsed, {} parsed but not compiled yet\n",
        rules.len(),
        set.skipped.len() + not_compiled.len(),
        set.skipped.len(),
        not_compiled.len()
    );
    for (title, skips) in [("not parsed", &set.skipped[..]), ("not compiled yet", not_compiled)] {
        let mut by_option: HashMap<&str, usize> = HashMap::new();
        for s in skips {
            *by_option.entry(s.option.as_str()).or_default() += 1;
        }
        let mut counts: Vec<(&str, usize)> = by_option.into_iter().collect();
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        if !counts.is_empty() {
            out += &format!("skipped by option, {title}:\n");
            for (option, n) in counts {
                out += &format!("{n:>8} {option}\n");
            }
        }
    }
    // A closed pipe (`| head`) is not an error worth reporting.
    let _ = common::stdout_write(&out);
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
        app.manifest.budget.unwrap_or(netvm_ids::compile::BUDGET)
    );
    for spec in &app.manifest.netpes {
        let name = &spec.name;
        toml += &format!("\n[[netpe]]\nname = \"{name}\"\nprogram = \"{name}.nil\"\n");
        // Coprocessor settings (shared instances, counter names, search modes).
        for (copro, table) in &spec.copro {
            toml += &format!("copro.{copro} = {}\n", toml::Value::Table(table.clone().into_iter().collect()));
        }
    }
    toml += "\n[[source]]\nport = 0\nto = \"decode\"\n";
    for c in &app.manifest.connections {
        toml += &format!("\n[[connect]]\nfrom = \"{}\"\nto = \"{}\"\n", c.from, c.to);
    }
    toml += "\n[[sink]]\nfrom = \"verdict.0\"\nport = 1\n";
    std::fs::write(dir.join("app.toml"), toml)
}
