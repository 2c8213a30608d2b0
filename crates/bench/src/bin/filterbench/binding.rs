//! `filterbench binding`: what binding NetPEs together costs.
//!
//! Filter f4 (`ip src 10.1.1.1 and ip dst 10.2.2.2 and tcp src port 20 and
//! tcp dst port 30`) as a chain of six NetPEs, one field each
//! (`benches/binding/chain6.toml`), against the same logic in one NetPE:
//! `one6` (`benches/binding/one6.toml`), the six stages pasted into one
//! program instruction for instruction, and `f4`, the hand-written filter
//! (`benches/filters/f4_ip_tcp_4field.nil`: one length check, one load for
//! both ports). All are compiled by the JIT:
//!
//! - `chain6-direct`, `chain6-table`, `one6-direct`, `f4-direct`: the
//!   application compiled whole (`--link direct` or `table`) and its
//!   per-batch function called on batches of 256 descriptors prepared
//!   beforehand (as `netvm-jit/linked`);
//! - `…/app`: the same through `Application::process_batch` (batches of
//!   256), and `chain6-dispatch/app`: the runtime walking the graph and
//!   calling each NetPE's compiled handler (`JitEngine::with_link(None)`).
//!
//! Each round takes one timed repetition of every variant on each workload,
//! the variants in an order rotated from round to round; the figures are
//! medians over rounds, and each variant's ratio to `one6` measured the same
//! way (`one6-direct` or `one6-direct/app`) is the median of the per-round
//! ratios. Prints one JSON line per (variant, workload) on
//! stdout and a table on stderr. Every variant must accept exactly the same
//! packets (checked: the count per pass).

use std::collections::HashMap;
use std::path::PathBuf;

use netvm_bench::filters::{Filter, FILTERS};
use netvm_bench::linked::Linked;
use netvm_bench::measure::{median, round3};
use netvm_runtime::{JitEngine, LinkMode, Manifest};
use serde_json::json;

use crate::{single, Runner, Workload};

/// Arguments of `filterbench binding`.
pub(crate) struct Args {
    /// Directory of `fullpath.pcap` and `mixed.pcap`.
    pub traces: PathBuf,
    /// Directory of `chain6.toml` and `one6.toml`.
    pub dir: PathBuf,
    /// Directory of the filters.
    pub filters: PathBuf,
    /// Rounds.
    pub rounds: usize,
    /// Length of a timed repetition on the repeated full-path frame.
    pub target_ms: f64,
}

/// `benches/binding` of the source tree this binary was built from.
pub(crate) fn default_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../benches/binding"))
}

/// The filter the chain computes.
const F4: &Filter = &FILTERS[3];

struct Variant {
    name: &'static str,
    /// The variant it is compared with: `one6` measured the same way.
    baseline: &'static str,
    runner: Runner,
    /// Passes per repetition, per workload.
    passes: Vec<u64>,
    /// Packets accepted per pass, per workload.
    accepted: Vec<u64>,
    /// ns per packet, per workload, per round.
    ns: Vec<Vec<f64>>,
}

fn variants(a: &Args) -> Result<Vec<Variant>, String> {
    let load = |name: &str| Manifest::load(&a.dir.join(name)).map_err(|e| e.to_string());
    let (chain, one) = (load("chain6.toml")?, load("one6.toml")?);
    let f4 = single(F4, &a.filters);
    let linked = |m: &Manifest, mode| Linked::build(m, mode).map(|l| Runner::Linked(Box::new(l)));
    let app = |m: &Manifest, link| Runner::app(m, &JitEngine::with_link(link));
    let (d, t) = (LinkMode::Direct, LinkMode::Table);
    let list: Vec<(&'static str, &'static str, Runner)> = vec![
        ("chain6-direct", "one6-direct", linked(&chain, d)?),
        ("chain6-table", "one6-direct", linked(&chain, t)?),
        ("one6-direct", "one6-direct", linked(&one, d)?),
        ("f4-direct", "one6-direct", linked(&f4, d)?),
        ("chain6-direct/app", "one6-direct/app", app(&chain, Some(d))?),
        ("chain6-table/app", "one6-direct/app", app(&chain, Some(t))?),
        ("chain6-dispatch/app", "one6-direct/app", app(&chain, None)?),
        ("one6-direct/app", "one6-direct/app", app(&one, Some(d))?),
        ("f4-direct/app", "one6-direct/app", app(&f4, Some(d))?),
    ];
    Ok(list
        .into_iter()
        .map(|(name, baseline, runner)| Variant { name, baseline, runner, passes: Vec::new(), accepted: Vec::new(), ns: Vec::new() })
        .collect())
}

pub(crate) fn run(a: &Args) -> Result<(), String> {
    if a.rounds == 0 || a.target_ms <= 0.0 {
        return Err("--rounds and --target-ms must be positive".into());
    }
    let mut workloads = Workload::load(&a.traces)?;
    let mut vs = variants(a)?;
    // Calibration (and warm-up), and the accept counts every variant must
    // agree on (per workload and number of packets in a pass: the full-path
    // workload holds 256 descriptors but 4,096 packets for the runtime).
    let mut expected: HashMap<(usize, u64), u64> = HashMap::new();
    for v in vs.iter_mut() {
        for (wi, w) in workloads.iter_mut().enumerate() {
            let passes = v.runner.passes(w, a.target_ms);
            let acc = v.runner.pass(w);
            let packets = v.runner.packets(w);
            let expect = *expected.entry((wi, packets)).or_insert(acc);
            if acc != expect || (w.repeat && acc != packets) {
                return Err(format!("{}: {acc} of {packets} packets of {} accepted, {expect} expected", v.name, w.name));
            }
            v.passes.push(passes);
            v.accepted.push(acc);
            v.ns.push(Vec::with_capacity(a.rounds));
        }
    }
    for round in 0..a.rounds {
        for (wi, w) in workloads.iter_mut().enumerate() {
            let n = vs.len();
            for k in 0..n {
                let v = &mut vs[(k + round) % n];
                let (ns, acc) = v.runner.time(w, v.passes[wi]);
                if acc != v.accepted[wi] {
                    return Err(format!("{}: accepted {acc} of {} in round {}, {} before", v.name, w.name, round + 1, v.accepted[wi]));
                }
                v.ns[wi].push(ns);
            }
        }
        eprintln!("filterbench binding: round {} of {} done", round + 1, a.rounds);
    }
    report(&vs, &workloads, a.rounds);
    Ok(())
}

/// Median over rounds of `v`'s time over its baseline's in the same round.
fn ratio(vs: &[Variant], v: &Variant, wi: usize) -> f64 {
    let b = vs.iter().find(|b| b.name == v.baseline).expect("baseline measured");
    let r: Vec<f64> = v.ns[wi].iter().zip(&b.ns[wi]).map(|(x, y)| x / y).collect();
    median(&r)
}

fn report(vs: &[Variant], workloads: &[Workload], rounds: usize) {
    let mut table = format!("{:<22} {:>16} {:>10} {:>16} {:>10}\n", "variant", "fullpath ns", "× one6", "mixed ns", "× one6");
    for v in vs {
        table += &format!("{:<22}", v.name);
        for (wi, w) in workloads.iter().enumerate() {
            let ns = median(&v.ns[wi]);
            let x = ratio(vs, v, wi);
            println!(
                "{}",
                json!({
                    "variant": v.name,
                    "filter": F4.name,
                    "workload": w.name,
                    "ns_median": round3(ns),
                    "ns_min": round3(v.ns[wi].iter().copied().fold(f64::INFINITY, f64::min)),
                    "ratio_to_one6": round3(x),
                    "one6": v.baseline,
                    "rounds": rounds,
                    "packets": v.passes[wi] * v.runner.packets(w),
                    "accepted_per_pass": v.accepted[wi],
                    "packets_per_pass": v.runner.packets(w),
                    "ns_per_round": v.ns[wi].iter().map(|x| round3(*x)).collect::<Vec<_>>(),
                })
            );
            table += &format!(" {ns:>16.2} {x:>10.3}");
        }
        table.push('\n');
    }
    eprint!("{table}");
}
