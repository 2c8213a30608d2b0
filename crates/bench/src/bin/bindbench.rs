//! `bindbench`: what binding the modules of a data path costs, NetBind's
//! Figures 10-12 and Table 1 on netvm.
//!
//! ```text
//! bindbench [--rounds N] [--packets N] [--routes N] [--destinations N] [--target-ms T]
//! ```
//!
//! NetBind's IPv4 data path of six modules (benches/binding/router6:
//! receiver, verify, checksum, ttl, lookup, queue) bound three ways, against
//! the same logic in one NetPE (router1.toml, NetBind's monolithic data
//! path):
//!
//! - `router6-direct`: direct linking, NetBind's code morphing: the whole
//!   data path one function, a port crossing a jump;
//! - `router6-table`: a vector table: each module a function, a crossing
//!   a load of the next one's address and a tail call;
//! - `router6-dispatch`: the runtime's graph walk calling each module's
//!   compiled code (MicroACE's dispatch loop);
//! - `router1-direct`: the monolithic baseline.
//!
//! Each runs on the compiled batch function alone (descriptors prepared
//! beforehand, as the C peers run; not for dispatch, which has none) and
//! through the runtime (`/app`: `Application::process_batch`, batches of
//! 256). Two workloads: `forward`, 64-byte frames that all take the whole
//! path to an output port, and `mixed`, the example router's test traffic
//! (a fifth of it broken in every way the modules check). Destinations are
//! drawn from `--destinations` of the `--routes` routes so that the
//! route table's lines stay in cache and the figures are the data path's
//! instructions, not the table's misses. Before each timed pass the frames
//! are restored (the ttl module rewrites them), untimed.
//!
//! Each round takes one timed repetition of every variant on each
//! workload, in an order rotated from round to round; figures are medians
//! over rounds, each variant's ratio to `router1-direct` measured the same
//! way is the median of the per-round ratios. Every variant must send the
//! same packets to the same ports (checked: the sum of port + 1). Prints a
//! JSON line per (variant, workload), and a table on stderr: ns per packet
//! (Fig. 11), Mpps (Fig. 12), the binding's extra time per packet and per
//! port crossing, in ns and in cycles at the CPU's nominal clock (Fig. 10).

use std::path::PathBuf;
use std::time::Instant;

use netvm_bench::linked::{Descs, Linked};
use netvm_bench::measure::{median, round3};
use netvm_jit::link::{Batching, LinkMode};
use netvm_runtime::{Application, JitEngine, Manifest, Verdict};
use netvm_traffic::apps::{ipv4_frame, route_file, router_trace, routes4, Route4};
use netvm_traffic::SplitMix64;
use netvm_vm::Packet;
use serde_json::json;

fn die(msg: String) -> ! {
    netvm_bench::args::die("bindbench", &msg)
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    netvm_bench::args::flag("bindbench", args, name, default)
}

/// Port crossings of the six-module chain.
const CROSSINGS: f64 = 5.0;

/// Packets per call of the runtime's batch function.
const BATCH: usize = 256;

/// How a variant runs its packets.
enum Runner {
    /// The compiled batch function alone.
    Linked(Box<Linked>, Descs),
    /// `Application::process_batch`.
    App(Box<Application>, Vec<Packet>),
}

impl Runner {
    /// Restores the frames (untimed), then runs one pass: (ns, check).
    fn pass(&mut self, frames: &[Packet]) -> (f64, u64) {
        match self {
            Runner::Linked(l, descs) => {
                descs.restore(frames);
                let t = Instant::now();
                let c = std::hint::black_box(l.pass_ports(descs));
                (t.elapsed().as_nanos() as f64, c)
            }
            Runner::App(a, packets) => {
                for (p, f) in packets.iter_mut().zip(frames) {
                    p.data.copy_from_slice(&f.data);
                }
                let mut verdicts = Vec::with_capacity(BATCH);
                let t = Instant::now();
                let mut check = 0u64;
                for chunk in packets.chunks_mut(BATCH) {
                    a.process_batch(chunk, &mut verdicts, &mut |_, _| {});
                    check += verdicts.iter().map(|v| if let Verdict::Output(p) = v { u64::from(*p) + 1 } else { 0 }).sum::<u64>();
                }
                (t.elapsed().as_nanos() as f64, std::hint::black_box(check))
            }
        }
    }
}

struct Variant {
    name: String,
    baseline: &'static str,
    /// Per workload: the runner, passes per repetition, the check, ns per packet per round.
    runs: Vec<(Runner, u64, u64, Vec<f64>)>,
}

/// A workload: its name and frames.
struct Workload {
    name: &'static str,
    frames: Vec<Packet>,
}

fn workloads(routes: &[Route4], destinations: usize, packets: usize, r: &mut SplitMix64) -> Vec<Workload> {
    // Hosts in a few routes (their first-level lines stay cached), each
    // routed somewhere (a next hop below 16: the queue's ports).
    let picked: Vec<&Route4> = (0..destinations.max(1)).map(|_| &routes[r.below(routes.len() as u64) as usize]).collect();
    let forward = (0..packets)
        .map(|_| {
            let rt = picked[r.below(picked.len() as u64) as usize];
            let host = if rt.len == 32 { 0 } else { r.next_u32() & (u32::MAX >> rt.len) };
            Packet::from_bytes(ipv4_frame(0x0a00_0001, rt.addr | host, 64, 64))
        })
        .collect();
    let dests: Vec<Route4> = picked.iter().map(|rt| **rt).collect();
    // Frames of the descriptors' slot size at most (the trace's are 60 to 160 bytes).
    let mut mixed = Vec::with_capacity(packets);
    while mixed.len() < packets {
        mixed.extend(router_trace(r, &dests, packets).into_iter().filter(|p| p.data.len() <= netvm_bench::linked::SLOT));
    }
    mixed.truncate(packets);
    vec![Workload { name: "forward", frames: forward }, Workload { name: "mixed", frames: mixed }]
}

/// The CPU's nominal clock in GHz (`cpu MHz` of /proc/cpuinfo), if known.
fn ghz() -> Option<f64> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let mhz: f64 =
        info.lines().find_map(|l| l.strip_prefix("cpu MHz").and_then(|v| v.trim_start_matches([' ', '\t', ':']).parse().ok()))?;
    Some(mhz / 1000.0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("bindbench [--rounds N] [--packets N] [--routes N] [--destinations N] [--target-ms T]  (see the source's header)");
        return;
    }
    let rounds: usize = arg(&args, "--rounds", 11);
    let packets: usize = arg(&args, "--packets", 4096);
    let nroutes: usize = arg(&args, "--routes", 1000);
    let destinations: usize = arg(&args, "--destinations", 64);
    let target_ms: f64 = arg(&args, "--target-ms", 50.0);
    if rounds == 0 || packets == 0 || nroutes == 0 || target_ms <= 0.0 {
        die("--rounds, --packets, --routes and --target-ms must be positive".into());
    }
    let mut r = SplitMix64::new(17);
    let routes = routes4(&mut r, nroutes, 16);
    let table = route_file(&routes);
    let loads: &[(&str, &str)] = &[("routes", table.as_str())];
    let ws = workloads(&routes, destinations, packets, &mut r);
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../benches/binding/router6"));
    let load = |f: &str| Manifest::load(&dir.join(f)).unwrap_or_else(|e| die(e.to_string()));
    let (six, one) = (load("router6.toml"), load("router1.toml"));
    let linked = |m: &Manifest, mode: LinkMode, frames: &[Packet]| {
        let l = Linked::build_with(m, mode, Batching::default(), loads).unwrap_or_else(|e| die(e));
        Runner::Linked(Box::new(l), Descs::new(frames))
    };
    let app = |m: &Manifest, link: Option<LinkMode>, frames: &[Packet]| {
        let mut a =
            Application::build(m, &JitEngine::with_link(link), &netvm_copro::registry(), None).unwrap_or_else(|e| die(e.to_string()));
        a.load_table("routes", &table).unwrap_or_else(|e| die(e));
        Runner::App(Box::new(a), frames.to_vec())
    };
    let (d, t) = (LinkMode::Direct, LinkMode::Table);
    type Make<'a> = Box<dyn Fn(&[Packet]) -> Runner + 'a>;
    let specs: Vec<(&str, &'static str, Make<'_>)> = vec![
        ("router1-direct", "router1-direct", Box::new(|f: &[Packet]| linked(&one, d, f))),
        ("router6-direct", "router1-direct", Box::new(|f: &[Packet]| linked(&six, d, f))),
        ("router6-table", "router1-direct", Box::new(|f: &[Packet]| linked(&six, t, f))),
        ("router1-direct/app", "router1-direct/app", Box::new(|f: &[Packet]| app(&one, Some(d), f))),
        ("router6-direct/app", "router1-direct/app", Box::new(|f: &[Packet]| app(&six, Some(d), f))),
        ("router6-table/app", "router1-direct/app", Box::new(|f: &[Packet]| app(&six, Some(t), f))),
        ("router6-dispatch/app", "router1-direct/app", Box::new(|f: &[Packet]| app(&six, None, f))),
    ];
    // Build, warm up, calibrate the passes per repetition, and take the check every variant must agree on.
    let mut vs: Vec<Variant> = Vec::new();
    let mut checks = vec![None; ws.len()];
    for (name, baseline, make) in &specs {
        let mut runs = Vec::new();
        for (wi, w) in ws.iter().enumerate() {
            let mut runner = make(&w.frames);
            let (ns, check) = runner.pass(&w.frames);
            let want = *checks[wi].get_or_insert(check);
            if check != want {
                die(format!("{name} on {}: check {check}, {want} expected (the variants disagree)", w.name));
            }
            let passes = ((target_ms * 1e6 / ns.max(1.0)).ceil() as u64).max(1);
            runs.push((runner, passes, check, Vec::with_capacity(rounds)));
        }
        vs.push(Variant { name: name.to_string(), baseline, runs });
    }
    for round in 0..rounds {
        for (wi, w) in ws.iter().enumerate() {
            let n = vs.len();
            for k in 0..n {
                let v = &mut vs[(k + round) % n];
                let (runner, passes, check, ns) = &mut v.runs[wi];
                let mut total = 0.0;
                for _ in 0..*passes {
                    let (t, c) = runner.pass(&w.frames);
                    if c != *check {
                        die(format!("{} on {}: check {c} in round {}, {check} before", v.name, w.name, round + 1));
                    }
                    total += t;
                }
                ns.push(total / (*passes as f64 * w.frames.len() as f64));
            }
        }
        eprintln!("bindbench: round {} of {rounds} done", round + 1);
    }
    report(&vs, &ws, ghz(), nroutes, destinations);
}

fn report(vs: &[Variant], ws: &[Workload], ghz: Option<f64>, routes: usize, destinations: usize) {
    let find = |name: &str| vs.iter().find(|v| v.name == name).expect("baseline measured");
    let mut table = String::from("| variant | workload | ns/packet | Mpps | × router1 | extra ns/packet | extra ns/crossing | extra cycles/packet |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
    for v in vs {
        let base = find(v.baseline);
        for (wi, w) in ws.iter().enumerate() {
            let ns = median(&v.runs[wi].3);
            let ratios: Vec<f64> = v.runs[wi].3.iter().zip(&base.runs[wi].3).map(|(a, b)| a / b).collect();
            let ratio = median(&ratios);
            let extra = ns - median(&base.runs[wi].3);
            let per_crossing = if v.name.starts_with("router6") { extra / CROSSINGS } else { 0.0 };
            let cycles = ghz.map(|g| extra * g);
            println!(
                "{}",
                json!({
                    "bench": "binding", "variant": v.name, "workload": w.name, "baseline": v.baseline,
                    "ns_median": round3(ns), "mpps": round3(1e3 / ns), "ratio": round3(ratio),
                    "extra_ns": round3(extra), "extra_ns_per_crossing": round3(per_crossing),
                    "extra_cycles": cycles.map(round3), "ghz": ghz.map(round3),
                    "rounds": v.runs[wi].3.len(), "packets": w.frames.len(), "routes": routes, "destinations": destinations,
                    "check": v.runs[wi].2,
                })
            );
            table += &format!(
                "| {} | {} | {:.2} | {:.1} | {:.3} | {:+.2} | {:+.2} | {} |\n",
                v.name,
                w.name,
                ns,
                1e3 / ns,
                ratio,
                extra,
                per_crossing,
                cycles.map_or("-".into(), |c| format!("{c:+.1}"))
            );
        }
    }
    eprint!("{table}");
}
