//! `netvm filter`: tcpdump-style filter expressions compiled to NetIL
//! (crates/pfl) and run over a capture: write the matching packets, count
//! them, or print the generated NetIL.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use netvm_io::{CaptureReader, PcapWriter};
use netvm_pfl::{Filter, ProtocolDb};
use netvm_runtime::{Application, Engine, InterpEngine, JitEngine, Manifest, Verdict};
use netvm_vm::Packet;

use crate::{report, EXIT_ERROR, EXIT_USAGE};

/// Packets per batch.
const BATCH: usize = 256;

#[derive(Args, Debug)]
pub struct FilterArgs {
    /// Input capture (pcap or pcapng, Ethernet).
    #[arg(short = 'r', value_name = "IN.pcap")]
    read: Option<PathBuf>,
    /// Write the matching packets to this pcap file (timestamps and lengths as in the input).
    #[arg(short = 'w', value_name = "OUT.pcap")]
    write: Option<PathBuf>,
    /// Print only the number of matching packets.
    #[arg(short = 'c')]
    count: bool,
    /// Print the generated NetIL and exit.
    #[arg(short = 'd')]
    dump: bool,
    /// Execution engine.
    #[arg(long, value_enum, default_value_t = FilterEngine::Jit)]
    engine: FilterEngine,
    /// More protocol database stanzas (TOML, see docs/filter-language.md); may be repeated.
    #[arg(long = "protocols", value_name = "FILE.toml")]
    protocols: Vec<PathBuf>,
    /// The filter expression (pcap-filter(7) syntax); several words are joined with spaces.
    #[arg(value_name = "EXPRESSION", trailing_var_arg = true, allow_hyphen_values = true)]
    expression: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FilterEngine {
    /// Native code compiled with Cranelift (the default).
    Jit,
    /// The reference interpreter.
    Interp,
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
        print!("{}", filter.text);
        return 0;
    }
    let Some(input) = &args.read else {
        eprintln!("netvm: give a capture to filter with -r IN.pcap (or -d to print the NetIL)");
        return EXIT_USAGE;
    };
    let reader = match CaptureReader::open(input) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("netvm: {e}");
            return EXIT_ERROR;
        }
    };
    if let Some(lt) = reader.link_type() {
        if lt != 1 {
            eprintln!("netvm: {}: link type {lt}: filter expressions are compiled for Ethernet (1) captures", input.display());
            return EXIT_ERROR;
        }
    }
    let (packets, read_err) = reader.collect_packets();
    let mut exit = 0;
    if let Some(e) = read_err {
        eprintln!("netvm: {e} ({} packets before it are filtered)", packets.len());
        exit = EXIT_ERROR;
    }

    let manifest = filter_manifest(&filter, &[0]);
    let jit = JitEngine::default();
    let engine: &dyn Engine = match args.engine {
        FilterEngine::Interp => &InterpEngine,
        FilterEngine::Jit => &jit,
    };
    let registry = netvm_copro::registry();
    let mut app = match Application::build(&manifest, engine, &registry, None) {
        Ok(a) => a,
        Err(e) => return report(&e),
    };
    let mut writer = match &args.write {
        Some(p) => match PcapWriter::create(p) {
            Ok(w) => Some(w),
            Err(e) => {
                eprintln!("netvm: {e}");
                return EXIT_ERROR;
            }
        },
        None => None,
    };
    let mut matched: u64 = 0;
    let mut verdicts: Vec<Verdict> = Vec::with_capacity(BATCH);
    let mut out: Vec<Packet> = Vec::new();
    let mut index = 0u64;
    for chunk in packets.chunks(BATCH) {
        let mut batch = chunk.to_vec();
        let listing = !args.count && writer.is_none();
        app.process_batch(&mut batch, &mut verdicts, &mut |port, p| {
            if port == 1 {
                out.push(p.clone());
            }
        });
        matched += out.len() as u64;
        for p in out.drain(..) {
            if let Some(w) = &mut writer {
                if let Err(e) = w.write(&p) {
                    eprintln!("netvm: {e}");
                    return EXIT_ERROR;
                }
            } else if listing {
                println!("{}.{:09} caplen {} len {}", p.ts.sec, p.ts.nsec, p.data.len(), p.wire_len);
            }
        }
        index += chunk.len() as u64;
    }
    if let Some(mut w) = writer {
        if let Err(e) = w.flush() {
            eprintln!("netvm: {e}");
            return EXIT_ERROR;
        }
    }
    if args.count {
        println!("{matched}");
    } else {
        eprintln!("netvm: {matched} of {index} packets match");
    }
    exit
}
