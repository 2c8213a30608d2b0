//! `netvm capsule`: build capsules from NetIL text, and carry a capture
//! across a path of capsule nodes. Argument parsing over `netvm-capsule`.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use netvm_capsule::build::build;
use netvm_capsule::tier::TierPolicy;
use netvm_capsule::wire::{ethernet_frame, Carrier, FrameSpec, CAPSULE_PORT, MAX_SCRATCH};
use netvm_capsule::{CapsuleNode, Carried, Chain, Dialect, EnvConfig, Hook, Link, NodeConfig};
use netvm_copro::ess::Ess;
use netvm_io::{CaptureReader, PcapHeaderSpec, PcapWriter, LINKTYPE_ETHERNET};
use netvm_vm::{Coprocessor, Timestamp};
use serde_json::{json, Value};

use crate::{EXIT_ERROR, EXIT_USAGE, EXIT_VERIFY};

#[derive(Args, Debug)]
pub struct CapsuleArgs {
    #[command(subcommand)]
    command: CapsuleCommand,
}

#[derive(Subcommand, Debug)]
enum CapsuleCommand {
    /// Build capsules from a NetIL listing (docs/capsules.md): the `.push`
    /// segment is the code, labels `ingress` and `egress` its entry points,
    /// `.infosize` the scratchpad. Both entry points are verified first
    /// (exit 3 with the reason if the code is outside the capsule profile).
    /// Writes Ethernet frames to a pcap file: the capsule in a UDP datagram
    /// to the capsule port (IPv4 or IPv6, as the addresses are), in an IPv4
    /// option or in an IPv6 destination option (--carrier).
    Build(BuildArgs),
    /// Measure the cost model's weights on this machine (ns per
    /// instruction on the interpreter, times a safety factor; a store
    /// operation at its worst) and print them as JSON (or write them to -o),
    /// for `capsule run --costs` and a manifest's `[capsules] costs`.
    Calibrate {
        /// Rounds per figure (the largest is kept).
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Write the JSON here instead of standard output.
        #[arg(short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Carry a capture across a path of capsule nodes (one per --path
    /// address, or one --node): each runs the capsules it receives and
    /// forwards, returns or drops them. Writes what leaves the path (-w) and
    /// prints statistics.
    Run(RunArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum DialectArg {
    /// Forward jumps only.
    Wasp,
    /// Backward jumps, paid from the local bound.
    Snap,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CarrierArg {
    /// The payload of a UDP datagram to --port.
    Udp,
    /// An IPv4 option (the capsule at most 38 bytes); the datagram under it goes to --port.
    Ipv4Option,
    /// An option of an IPv6 destination options header (at most 255 bytes).
    Ipv6Option,
}

#[derive(Args, Debug)]
struct BuildArgs {
    /// The capsule's code, a NetIL listing.
    program: PathBuf,
    /// Output capture (pcap, Ethernet).
    #[arg(short = 'o', value_name = "OUT.pcap")]
    output: PathBuf,
    /// The dialect (default: WASP unless the code jumps backward).
    #[arg(long, value_enum)]
    dialect: Option<DialectArg>,
    /// Ask for operator rights on the state store (granted only from a node's admin sources).
    #[arg(long)]
    admin: bool,
    /// Capsule nodes the capsule may run on.
    #[arg(long, default_value_t = 16)]
    hops: u8,
    /// The sender's cap on the cost per node, in units of 16 (0: none).
    #[arg(long, default_value_t = 0)]
    cost_limit: u16,
    /// Initial scratchpad bytes, in hex (zero-padded to `.infosize`).
    #[arg(long, default_value = "")]
    scratch: String,
    /// How the capsule travels.
    #[arg(long, value_enum, default_value = "udp")]
    carrier: CarrierArg,
    /// IP source, IPv4 or IPv6 (default: 192.0.2.1, or 2001:db8::1 for an
    /// IPv6 option).
    #[arg(long)]
    src: Option<IpAddr>,
    /// IP destination, of the source's family (default: 198.51.100.1, or
    /// 2001:db8::2 for an IPv6 option).
    #[arg(long)]
    dst: Option<IpAddr>,
    /// UDP source port.
    #[arg(long, default_value_t = 4000)]
    sport: u16,
    /// UDP destination port (default: the capsule port for --carrier udp,
    /// 9, discard, under an option).
    #[arg(long)]
    port: Option<u16>,
    /// IPv4 TTL or IPv6 hop limit.
    #[arg(long, default_value_t = 64)]
    ttl: u8,
    /// Payload after the capsule (text): in the same datagram for --carrier
    /// udp, the datagram's payload under an option.
    #[arg(long, default_value = "")]
    payload: String,
    /// Copies to write.
    #[arg(long, default_value_t = 1)]
    count: u32,
    /// Time between copies, microseconds.
    #[arg(long, default_value_t = 1000)]
    interval_us: u64,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum HookArg {
    Ingress,
    Egress,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Input capture (Ethernet).
    #[arg(short = 'r', value_name = "IN.pcap")]
    read: PathBuf,
    /// Write what leaves the path: delivered and returned capsules and
    /// ordinary packets, in order.
    #[arg(short = 'w', value_name = "OUT.pcap")]
    write: Option<PathBuf>,
    /// The nodes' IPv4 addresses, near end first (comma-separated).
    #[arg(long, value_delimiter = ',', conflicts_with = "node")]
    path: Vec<Ipv4Addr>,
    /// One node with this IPv4 address.
    #[arg(long)]
    node: Option<Ipv4Addr>,
    /// The nodes' IPv6 addresses (what capsule code reads from the
    /// environment's registers 1-4), near end first, one per node of
    /// --path (or alone: a path of IPv6-only nodes).
    #[arg(long, value_delimiter = ',', conflicts_with = "node6")]
    path6: Vec<std::net::Ipv6Addr>,
    /// The IPv6 address of the one node (--node).
    #[arg(long)]
    node6: Option<std::net::Ipv6Addr>,
    /// Which entry point the nodes run.
    #[arg(long, value_enum, default_value_t = HookArg::Ingress)]
    hook: HookArg,
    /// Cost units (ns) a capsule may spend per byte: the n of the bound n·|p|.
    #[arg(long, default_value_t = NodeConfig::default().cost_per_byte)]
    cost_per_byte: u32,
    /// A source whose admin capsules get operator rights (repeatable).
    #[arg(long = "admin-source")]
    admin_sources: Vec<IpAddr>,
    /// Congestion status (0-3) of each output queue, comma-separated (at most 8).
    #[arg(long, value_delimiter = ',')]
    queues: Vec<u8>,
    /// Output queue depth (packets).
    #[arg(long, default_value_t = 0)]
    queue_depth: u32,
    /// Interface speed, Mb/s.
    #[arg(long, default_value_t = 1000)]
    speed: u32,
    /// UDP port of capsules.
    #[arg(long, default_value_t = CAPSULE_PORT)]
    port: u16,
    /// Configuration of every node's state store: `capacity=N`, `rate=N`,
    /// `tau=SECONDS`, `max_chain=N` (repeatable).
    #[arg(long = "ess", value_name = "KEY=VALUE")]
    ess: Vec<String>,
    /// Load entries into every node's store before the first packet.
    #[arg(long, value_name = "FILE")]
    load_ess: Option<PathBuf>,
    /// When cached programs are compiled to native code.
    #[arg(long, value_enum, default_value_t = TierArg::Auto)]
    tier: TierArg,
    /// The instructions' weights, from `netvm capsule calibrate` (default: the built-in ones).
    #[arg(long, value_name = "FILE")]
    costs: Option<PathBuf>,
    /// Print statistics as JSON on standard output.
    #[arg(long)]
    stats: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TierArg {
    /// With the baseline compiler, when it pays: runs x (interpreted - native time) > compile time.
    Auto,
    /// Never: interpret every capsule.
    Interpret,
    /// At once, with the one-pass baseline compiler.
    Baseline,
    /// At once, with Cranelift.
    Cranelift,
}

pub fn cmd_capsule(args: CapsuleArgs) -> u8 {
    match args.command {
        CapsuleCommand::Build(a) => cmd_build(a),
        CapsuleCommand::Run(a) => cmd_run(a),
        CapsuleCommand::Calibrate { rounds, output } => {
            let text = netvm_capsule::calibrate::calibrate(rounds).to_json();
            match output {
                Some(p) => match std::fs::write(&p, text) {
                    Ok(()) => 0,
                    Err(e) => {
                        eprintln!("netvm capsule: {}: {e}", p.display());
                        EXIT_ERROR
                    }
                },
                None => crate::common::stdout_write(&text).map_or_else(|c| c, |_| 0),
            }
        }
    }
}

fn hex(s: &str) -> Result<Vec<u8>, String> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    if !s.len().is_multiple_of(2) {
        return Err(format!("`{s}`: an odd number of hex digits"));
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| format!("`{}` is not hex", &s[i..i + 2]))).collect()
}

fn cmd_build(a: BuildArgs) -> u8 {
    let src = match std::fs::read_to_string(&a.program) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("netvm capsule: {}: {e}", a.program.display());
            return EXIT_ERROR;
        }
    };
    let dialect = a.dialect.map(|d| match d {
        DialectArg::Wasp => Dialect::Wasp,
        DialectArg::Snap => Dialect::Snap,
    });
    let built = match build(&src, dialect, a.admin) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("netvm capsule: {}: {e}", a.program.display());
            return EXIT_VERIFY;
        }
    };
    let scratch = match hex(&a.scratch) {
        Ok(s) if s.len() <= MAX_SCRATCH => s,
        Ok(s) => {
            eprintln!("netvm capsule: --scratch: {} bytes, at most {MAX_SCRATCH}", s.len());
            return EXIT_USAGE;
        }
        Err(e) => {
            eprintln!("netvm capsule: --scratch: {e}");
            return EXIT_USAGE;
        }
    };
    let mut h = built.header;
    h.hops = a.hops;
    h.cost_limit = a.cost_limit;
    let carrier = match a.carrier {
        CarrierArg::Udp => Carrier::Udp,
        CarrierArg::Ipv4Option => Carrier::Ipv4Option,
        CarrierArg::Ipv6Option => Carrier::Ipv6Option,
    };
    let v6 = carrier == Carrier::Ipv6Option || a.src.or(a.dst).is_some_and(|ip| ip.is_ipv6());
    let fallback = |v4: [u8; 4], v6_addr: &str| if v6 { v6_addr.parse().expect("an IPv6 address") } else { IpAddr::from(v4) };
    let fs = FrameSpec {
        src: a.src.unwrap_or_else(|| fallback([192, 0, 2, 1], "2001:db8::1")),
        dst: a.dst.unwrap_or_else(|| fallback([198, 51, 100, 1], "2001:db8::2")),
        sport: a.sport,
        port: a.port.unwrap_or(if carrier == Carrier::Udp { CAPSULE_PORT } else { 9 }),
        ttl: a.ttl,
        carrier,
    };
    let (capsule, payload) = match carrier {
        Carrier::Udp => (built.encode(&h, &scratch, a.payload.as_bytes()), Vec::new()),
        _ => (built.encode(&h, &scratch, b""), a.payload.clone().into_bytes()),
    };
    let frame = match ethernet_frame(&fs, &capsule, &payload) {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "netvm capsule: --carrier {}: {e}",
                a.carrier.to_possible_value().map_or_else(String::new, |v| v.get_name().to_string())
            );
            return EXIT_USAGE;
        }
    };
    let spec = PcapHeaderSpec { link_type: LINKTYPE_ETHERNET, ..PcapHeaderSpec::default() };
    let result = PcapWriter::create_with(&a.output, spec).and_then(|mut w| {
        for i in 0..u64::from(a.count) {
            let ts = Timestamp::from_nanos(1_700_000_000_000_000_000 + i * a.interval_us * 1000);
            w.write_record(&frame, frame.len() as u32, ts)?;
        }
        w.finish().map(|_| ())
    });
    if let Err(e) = result {
        eprintln!("netvm capsule: {e}");
        return EXIT_ERROR;
    }
    let dialect = if h.dialect() == Dialect::Snap { "snap" } else { "wasp" };
    eprintln!(
        "netvm capsule: {} bytes of code ({dialect}), scratchpad {} bytes, frame {} bytes; cost {} (ingress), {} (egress)",
        built.code.len(),
        h.scratch_len,
        frame.len(),
        built.cost.0,
        built.cost.1
    );
    0
}

fn cmd_run(a: RunArgs) -> u8 {
    // Each node's (IPv4, IPv6) addresses.
    let v6: Vec<std::net::Ipv6Addr> = if a.path6.is_empty() { a.node6.into_iter().collect() } else { a.path6.clone() };
    let v4: Vec<Ipv4Addr> = match (a.path.is_empty(), a.node) {
        (false, _) => a.path.clone(),
        (true, Some(n)) => vec![n],
        (true, None) if v6.len() > 1 => vec![Ipv4Addr::UNSPECIFIED; v6.len()],
        (true, None) => vec![Ipv4Addr::new(10, 0, 0, 1)],
    };
    if !v6.is_empty() && v6.len() != v4.len() {
        eprintln!("netvm capsule: {} IPv6 addresses for {} nodes: give one per node of --path", v6.len(), v4.len());
        return EXIT_USAGE;
    }
    let addresses: Vec<(Ipv4Addr, std::net::Ipv6Addr)> =
        v4.iter().enumerate().map(|(i, &a4)| (a4, v6.get(i).copied().unwrap_or(std::net::Ipv6Addr::UNSPECIFIED))).collect();
    if a.queues.len() > netvm_capsule::env::MAX_QUEUES || a.queues.iter().any(|&q| q > 3) {
        eprintln!("netvm capsule: --queues: at most {} statuses, each 0 to 3", netvm_capsule::env::MAX_QUEUES);
        return EXIT_USAGE;
    }
    let mut queues = [0u8; netvm_capsule::env::MAX_QUEUES];
    queues[..a.queues.len()].copy_from_slice(&a.queues);
    let mut ess_cfg = netvm_vm::CoproConfig::new();
    for kv in &a.ess {
        let Some((k, v)) = kv.split_once('=') else {
            eprintln!("netvm capsule: --ess `{kv}` is not KEY=VALUE");
            return EXIT_USAGE;
        };
        ess_cfg.insert(k.trim().to_string(), v.trim().to_string());
    }
    let table = match &a.load_ess {
        Some(p) => match std::fs::read_to_string(p) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("netvm capsule: {}: {e}", p.display());
                return EXIT_ERROR;
            }
        },
        None => None,
    };
    let costs = match &a.costs {
        None => netvm_capsule::CostModel::default(),
        Some(p) => match std::fs::read_to_string(p).map_err(|e| e.to_string()).and_then(|t| netvm_capsule::CostModel::from_json(&t)) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("netvm capsule: --costs {}: {e}", p.display());
                return EXIT_USAGE;
            }
        },
    };
    let mut chain = Chain::default();
    for &(ipv4, ipv6) in &addresses {
        let env = EnvConfig {
            ipv4,
            ipv6,
            congestion: queues.iter().copied().max().unwrap_or(0),
            queue_depth: a.queue_depth,
            speed_mbps: a.speed,
            queues,
            nqueues: a.queues.len().max(1) as u8,
        };
        let cfg = NodeConfig {
            port: a.port,
            link: Link::Ethernet,
            hook: match a.hook {
                HookArg::Ingress => Hook::Ingress,
                HookArg::Egress => Hook::Egress,
            },
            cost_per_byte: a.cost_per_byte,
            env,
            admin_sources: a.admin_sources.clone(),
            costs: costs.clone(),
            tier: match a.tier {
                TierArg::Auto => TierPolicy::Auto,
                TierArg::Interpret => TierPolicy::Interpret,
                TierArg::Baseline => TierPolicy::Baseline,
                TierArg::Cranelift => TierPolicy::Cranelift,
            },
            ..NodeConfig::default()
        };
        let mut ess = match Ess::from_config(&ess_cfg) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("netvm capsule: --ess: {e}");
                return EXIT_USAGE;
            }
        };
        if let Some(t) = &table {
            if let Err(e) = ess.load(t) {
                eprintln!("netvm capsule: --load-ess: {e}");
                return EXIT_ERROR;
            }
        }
        chain.nodes.push(CapsuleNode::new(cfg, ess));
    }
    let reader = match CaptureReader::open(&a.read) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("netvm capsule: {e}");
            return EXIT_ERROR;
        }
    };
    if reader.link_type() != Some(LINKTYPE_ETHERNET) {
        eprintln!("netvm capsule: {}: capsule nodes read Ethernet captures", a.read.display());
        return EXIT_ERROR;
    }
    let mut writer = match a.write.as_deref().map(|p| PcapWriter::create_with(p, reader.header())).transpose() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("netvm capsule: {e}");
            return EXIT_ERROR;
        }
    };
    let (mut packets, mut ordinary, mut delivered, mut returned, mut dropped) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut code = 0;
    for p in reader {
        let mut p = match p {
            Ok(p) => p,
            Err(e) => {
                eprintln!("netvm capsule: {e} (the packets before it were processed)");
                code = EXIT_ERROR;
                break;
            }
        };
        packets += 1;
        let keep = match chain.carry(&mut p.data, p.ts) {
            Carried::Ordinary => {
                ordinary += 1;
                true
            }
            Carried::Delivered => {
                delivered += 1;
                true
            }
            Carried::Returned { .. } => {
                returned += 1;
                true
            }
            Carried::Dropped { .. } => {
                dropped += 1;
                false
            }
        };
        if let (true, Some(w)) = (keep, writer.as_mut()) {
            if let Err(e) = w.write(&p) {
                eprintln!("netvm capsule: {e}");
                return EXIT_ERROR;
            }
        }
    }
    if let Some(w) = writer {
        if let Err(e) = w.finish() {
            eprintln!("netvm capsule: {e}");
            return EXIT_ERROR;
        }
    }
    if a.stats {
        let nodes: Vec<Value> = chain
            .nodes
            .iter_mut()
            .zip(&addresses)
            .map(|(n, &(ipv4, ipv6))| {
                let s = n.stats();
                let cache = n.code_cache();
                let code_cache = json!({
                    "programs": cache.len(),
                    "hits": cache.stats().hits,
                    "misses": cache.stats().misses,
                    "evictions": cache.stats().evictions,
                });
                let ess: serde_json::Map<String, Value> = n.ess().stats().into_iter().map(|(k, v)| (k, json!(v))).collect();
                json!({
                    "address": if ipv4.is_unspecified() { ipv6.to_string() } else { ipv4.to_string() },
                    "ipv6": (!ipv6.is_unspecified()).then(|| ipv6.to_string()),
                    "capsules": s.capsules,
                    "ordinary": s.ordinary,
                    "forwarded": s.forwarded,
                    "returned": s.returned,
                    "dropped": s.dropped,
                    "instructions": s.instructions,
                    "verified": s.verified,
                    "cached": s.cached,
                    "compiled": s.compiled,
                    "compile_ns": s.compile_ns,
                    "native": s.native,
                    "code_cache": code_cache,
                    "ess": ess,
                })
            })
            .collect();
        let out = json!({
            "packets": packets,
            "ordinary": ordinary,
            "delivered": delivered,
            "returned": returned,
            "dropped": dropped,
            "nodes": nodes,
        });
        if let Err(c) = crate::common::stdout_write(&(out.to_string() + "\n")) {
            return c;
        }
    }
    code
}
