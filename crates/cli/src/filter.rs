//! `netvm filter`: tcpdump-style filter expressions compiled to NetIL
//! (crates/pfl) and run over a capture by the runtime's driver: write the
//! matching packets, count them, or print the generated NetIL. File habits
//! are tcpdump's: `-r -` and `-w -` for pipes, `-c N` stops after N
//! matches, outputs keep the input's format.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use netvm_pfl::{Filter, ProtocolDb};
use netvm_runtime::{Application, Driver, Manifest};

use crate::common::{self, EngineArg, EngineOpts, LinkArg, ListingSink};
use crate::{report, EXIT_ERROR, EXIT_USAGE};

#[derive(Args, Debug)]
pub struct FilterArgs {
    /// Input capture (pcap or pcapng, Ethernet); `-` reads standard input.
    #[arg(short = 'r', value_name = "IN.pcap")]
    read: Option<PathBuf>,
    /// Write the matching packets to this pcap file (`-`: standard output), in the input's format.
    #[arg(short = 'w', value_name = "OUT.pcap")]
    write: Option<PathBuf>,
    /// Stop after N matching packets, as tcpdump's -c.
    #[arg(short = 'c', value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    limit: Option<u64>,
    /// Print only the number of matching packets.
    #[arg(long)]
    count: bool,
    /// Print the generated NetIL and exit.
    #[arg(short = 'd')]
    dump: bool,
    /// Execution engine. The default, tiered, starts on the baseline
    /// compiler's code (compiled in microseconds, so that short captures end
    /// before a JIT would have compiled) and moves to the JIT's once that is
    /// compiled, on its own thread, after 4,096 packets.
    #[arg(long, value_enum, default_value_t = EngineArg::Tiered)]
    engine: EngineArg,
    /// Timestamp precision of the output file (default: the input's), as tcpdump's option.
    #[arg(long = "time-stamp-precision", value_enum)]
    precision: Option<PrecisionArg>,
    /// Print statistics as one JSON object on standard error when done
    /// (standard output may be the capture): packets, matches, timing,
    /// workers, memory.
    #[arg(long)]
    stats: bool,
    /// More protocol database stanzas (TOML, see docs/filter-language.md); may be repeated.
    #[arg(long = "protocols", value_name = "FILE.toml")]
    protocols: Vec<PathBuf>,
    #[command(flatten)]
    engine_opts: EngineOpts,
    /// The filter expression (pcap-filter(7) syntax); several words are joined with spaces.
    #[arg(value_name = "EXPRESSION", allow_negative_numbers = true)]
    expression: Vec<String>,
}

/// `--time-stamp-precision`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PrecisionArg {
    /// Microseconds.
    Micro,
    /// Nanoseconds.
    Nano,
}

/// Compiles `expr` with the built-in database plus `extra` files; prints the
/// error with a caret and returns the exit code on failure.
pub fn compile_expression(expr: &str, extra: &[PathBuf]) -> Result<Filter, u8> {
    let mut db = ProtocolDb::builtin();
    for f in extra {
        let text = match std::fs::read_to_string(f) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("netvm: {}: {e}", f.display());
                return Err(EXIT_ERROR);
            }
        };
        if let Err(e) = db.extend(&text) {
            eprintln!("netvm: {}: {e}", f.display());
            return Err(EXIT_USAGE);
        }
    }
    netvm_pfl::compile_with(expr, &db).map_err(|e| {
        eprintln!("netvm: filter expression error:\n{}", e.render(expr));
        EXIT_USAGE
    })
}

/// A one-NetPE application running `filter` (port 1: match) fed on input port 0.
pub fn filter_manifest(filter: &Filter, in_ports: &[u16]) -> Manifest {
    let mut m = Manifest::single(std::path::Path::new("<filter>"), in_ports, filter.module.out_ports, None);
    m.name = Some(format!("filter `{}`", filter.expression));
    m.netpes[0].module = Some(filter.module.clone());
    m
}

pub fn cmd_filter(args: FilterArgs) -> u8 {
    let expr = args.expression.join(" ");
    let filter = match compile_expression(&expr, &args.protocols) {
        Ok(f) => f,
        Err(code) => return code,
    };
    if args.dump {
        return match common::stdout_write(&filter.text) {
            Ok(_) => 0,
            Err(code) => code,
        };
    }
    let Some(input) = &args.read else {
        eprintln!("netvm: give a capture to filter with -r IN.pcap (or -d to print the NetIL)");
        return EXIT_USAGE;
    };
    let manifest = filter_manifest(&filter, &[0]);
    let engine = common::engine(args.engine, LinkArg::Direct);
    let app = match Application::build(&manifest, engine.as_ref(), &netvm_copro::registry(), None) {
        Ok(a) => a,
        Err(e) => return report(&e),
    };
    // A filter's cost is reading and writing: one worker unless asked.
    let mut cfg = args.engine_opts.config(app.keeps_state(), false);
    cfg.stop_after = args.limit.map(|n| (1, n));
    let mut driver = Driver::new(app, cfg);
    let mut spec = match common::open_source(&mut driver, input, 0) {
        Ok(s) => s,
        Err(code) => return code,
    };
    match args.precision {
        Some(PrecisionArg::Micro) => spec.precision = netvm_io::TsPrecision::Micro,
        Some(PrecisionArg::Nano) => spec.precision = netvm_io::TsPrecision::Nano,
        None => {}
    }
    if let Some(p) = &args.write {
        match common::create_sink(p, spec) {
            Ok(s) => driver.add_sink(1, Box::new(s)),
            Err(code) => return code,
        }
    } else if !args.count {
        driver.add_sink(1, Box::new(ListingSink::new()));
    }
    let r = match driver.run() {
        Ok(r) => r,
        Err(e) => return report(&e),
    };
    let exit = common::finish_report(&r);
    if r.output_closed {
        return exit;
    }
    let matched = r.exits.get(1).copied().unwrap_or(0);
    if args.stats {
        let mut j = serde_json::json!({
            "packets": r.input_packets,
            "bytes": r.input_bytes,
            "matched": matched,
            "stopped": r.stopped,
            "engine": driver.app().engine(),
            "ns_per_packet": (r.ns_per_packet() * 100.0).round() / 100.0,
            "wall_ns": r.wall.as_nanos() as u64,
            "workers": crate::run::workers_json(&r),
            "memory": crate::run::memory_json(&r),
        });
        // `--engine tiered`, once the JIT's code took over: the packets run before.
        if let Some((_, first)) = driver.app().tiered() {
            j["first_tier_packets"] = first.into();
        }
        eprintln!("{j}");
    }
    if args.count {
        if let Err(code) = common::stdout_write(&format!("{matched}\n")) {
            return code;
        }
    } else if args.write.as_deref().is_none_or(|p| p.as_os_str() != "-") {
        eprintln!("netvm: {matched} of {} packets match", r.input_packets);
    }
    exit
}
