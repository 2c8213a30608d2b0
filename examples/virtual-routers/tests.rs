//! examples/virtual-routers: two virtual routers in one engine behave,
//! each on its own packets, exactly as its router run alone.
//!
//! The reference is examples/ipv4-router run by itself (its own tests hold
//! it to a plain reference) once per virtual router, on the frames that
//! router's MAC address (or input port) selects, with that router's
//! routes. The engine must send the same frames out of each router's
//! ports (0-15 for red, 16-31 for blue), count each router's packets and
//! drops apart, and agree on every engine and with two workers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[path = "../support.rs"]
mod support;

use netvm_traffic::apps::{route_file, router_trace, routes4};
use netvm_traffic::SplitMix64;
use netvm_vm::Packet;
use support::{run_app, write_pcap, ENGINES};

fn example(rel: &str) -> String {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples")).join(rel).display().to_string()
}

const RED: [u8; 6] = [2, 0, 0, 0, 0, 1];
const BLUE: [u8; 6] = [2, 0, 0, 0, 0, 2];
const NOBODY: [u8; 6] = [2, 0, 0, 0, 0, 3];

/// A generated case: each router's routes and frames, and the mixed trace.
struct Case {
    routes: [String; 2],
    /// Each router's frames (those its MAC selects), in trace order.
    own: [Vec<Packet>; 2],
    /// Every frame, the routers' and others' (unknown MACs, runts), interleaved.
    trace: Vec<Packet>,
}

fn case(seed: u64, n: usize) -> Case {
    let mut r = SplitMix64::new(seed);
    let red = routes4(&mut r, 300, 16);
    let blue = routes4(&mut r, 300, 16);
    let mut queues = [router_trace(&mut r, &red, n), router_trace(&mut r, &blue, n), router_trace(&mut r, &blue, n / 10)];
    for (q, mac) in queues.iter_mut().zip([RED, BLUE, NOBODY]) {
        for p in q.iter_mut() {
            let k = p.data.len().min(6);
            p.data[..k].copy_from_slice(&mac[..k]);
        }
    }
    let (mut own, mut trace) = ([Vec::new(), Vec::new()], Vec::new());
    let mut at = [0usize; 3];
    while at.iter().zip(&queues).any(|(i, q)| *i < q.len()) {
        let w = r.below(3) as usize;
        let Some(p) = queues[w].get(at[w]) else { continue };
        at[w] += 1;
        // Shorter than an Ethernet header: the classifier's runt, no router's.
        if w < 2 && p.data.len() >= 14 {
            own[w].push(p.clone());
        }
        trace.push(p.clone());
    }
    Case { routes: [route_file(&red), route_file(&blue)], own, trace }
}

/// Runs examples/ipv4-router alone on `pkts` with `routes`: the frames out
/// of ports 0-15, and its statistics.
fn alone(dir: &Path, label: &str, routes: &str, pkts: &[Packet]) -> (BTreeMap<u32, Vec<Vec<u8>>>, serde_json::Value) {
    let input = dir.join(format!("{label}.pcap"));
    write_pcap(&input, pkts);
    let table = dir.join(format!("{label}-routes.txt"));
    std::fs::write(&table, routes).unwrap();
    let args =
        [example("ipv4-router/app.toml"), "--load".into(), format!("routes={}", table.display()), "-r".into(), input.display().to_string()];
    run_app(dir, &args, (label, &[]), 0..16)
}

/// The frames out of the engine's ports 0-31 that running each router
/// alone gives (red's port P is the engine's P, blue's is 16 + P), and each
/// router's `dropped` total.
fn expected(dir: &Path, c: &Case) -> (BTreeMap<u32, Vec<Vec<u8>>>, [u64; 2]) {
    let mut want = BTreeMap::new();
    let mut dropped = [0; 2];
    for (i, name) in ["red", "blue"].into_iter().enumerate() {
        let (out, stats) = alone(dir, &format!("alone-{name}"), &c.routes[i], &c.own[i]);
        for (p, frames) in out {
            want.insert(p + 16 * i as u32, frames);
        }
        dropped[i] = stats["dropped"].as_u64().unwrap();
    }
    (want, dropped)
}

fn datapath<'a>(stats: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    stats["datapaths"].as_array().unwrap().iter().find(|d| d["name"] == name).unwrap()
}

/// Checks one run of the engine against each router run alone.
fn check_run(
    what: &str,
    c: &Case,
    got: &BTreeMap<u32, Vec<Vec<u8>>>,
    stats: &serde_json::Value,
    want: &BTreeMap<u32, Vec<Vec<u8>>>,
    dropped: [u64; 2],
) {
    assert_eq!(got, want, "{what}: the frames out of each port");
    for (i, name) in ["red", "blue"].into_iter().enumerate() {
        let d = datapath(stats, name);
        assert_eq!(d["packets"].as_u64().unwrap(), c.own[i].len() as u64, "{what}: {name}'s packets");
        assert_eq!(d["dropped"].as_u64().unwrap(), dropped[i], "{what}: {name}'s drops");
        assert_eq!(d["faults"], 0, "{what}: {name}'s faults");
        let out: u64 = d["ports"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(out + dropped[i], c.own[i].len() as u64, "{what}: {name} accounts for every packet");
        for p in d["ports"].as_object().unwrap().keys() {
            let p: u32 = p.parse().unwrap();
            assert!((16 * i as u32..16 * (i as u32 + 1)).contains(&p), "{what}: {name} sent on port {p}, not its own");
        }
    }
}

#[test]
fn routers_selected_by_mac_behave_as_each_alone() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    for seed in 0..2 {
        let c = case(seed, 1200);
        let (want, dropped) = expected(dir, &c);
        let input = dir.join("mixed.pcap");
        write_pcap(&input, &c.trace);
        let mut tables = Vec::new();
        for (name, routes) in ["red", "blue"].iter().zip(&c.routes) {
            let f = dir.join(format!("{name}.txt"));
            std::fs::write(&f, routes).unwrap();
            tables.extend(["--load".to_string(), format!("{name}/lookup.routes={}", f.display())]);
        }
        let mut args = vec![
            example("virtual-routers/engine.toml"),
            "--load".into(),
            format!("classifier.vnets={}", example("virtual-routers/vnets.txt")),
        ];
        args.extend(tables);
        args.extend(["-r".into(), input.display().to_string()]);
        let unknown = c.trace.iter().filter(|p| p.data.len() >= 14 && p.data[..6] == NOBODY).count() as u64;
        let runts = c.trace.iter().filter(|p| p.data.len() < 14).count() as u64;
        for (engine, flags) in ENGINES {
            let (got, stats) = run_app(dir, &args, (engine, flags), 0..32);
            check_run(&format!("seed {seed}, {engine}"), &c, &got, &stats, &want, dropped);
            let classifier = &stats["netpes"].as_array().unwrap().iter().find(|n| n["name"] == "classifier").unwrap()["copro"]["drops"];
            assert_eq!(classifier["unknown"], unknown, "seed {seed}, {engine}: {classifier}");
            assert_eq!(classifier["runt"], runts, "seed {seed}, {engine}: {classifier}");
        }
        let mut two = args.clone();
        two.extend(["--workers".into(), "2".into()]);
        let (got, stats) = run_app(dir, &two, ("workers2", &[]), 0..32);
        check_run(&format!("seed {seed}, two workers"), &c, &got, &stats, &want, dropped);
    }
}

#[test]
fn routers_selected_by_input_port_behave_as_each_alone() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let c = case(5, 1500);
    let (want, dropped) = expected(dir, &c);
    let mut args = vec![example("virtual-routers/ports.toml")];
    for (i, name) in ["red", "blue"].into_iter().enumerate() {
        let f = dir.join(format!("{name}.txt"));
        std::fs::write(&f, &c.routes[i]).unwrap();
        let input = dir.join(format!("{name}-in.pcap"));
        write_pcap(&input, &c.own[i]);
        args.extend(["--load".into(), format!("{name}/lookup.routes={}", f.display()), "-r".into(), format!("{i}={}", input.display())]);
    }
    for (engine, flags) in [ENGINES[0], ENGINES[3]] {
        let (got, stats) = run_app(dir, &args, (engine, flags), 0..32);
        check_run(&format!("by port, {engine}"), &c, &got, &stats, &want, dropped);
        assert_eq!(stats["inputs"]["0"].as_u64().unwrap(), c.own[0].len() as u64);
    }
}

#[test]
fn the_sample_runs_and_counts_each_router_apart() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        example("virtual-routers/engine.toml"),
        "--load".into(),
        format!("classifier.vnets={}", example("virtual-routers/vnets.txt")),
        "--load".into(),
        format!("red/lookup.routes={}", example("virtual-routers/red-routes.txt")),
        "--load".into(),
        format!("blue/lookup.routes={}", example("virtual-routers/blue-routes.txt")),
        "-r".into(),
        example("virtual-routers/sample.pcap"),
    ];
    let (_, stats) = run_app(dir.path(), &args, ENGINES[4], 0..32);
    let (red, blue) = (datapath(&stats, "red"), datapath(&stats, "blue"));
    assert!(red["packets"].as_u64().unwrap() > 0 && blue["packets"].as_u64().unwrap() > 0, "{stats}");
    // Blue has no default route: what red forwards by its default, blue drops.
    assert!(blue["dropped"].as_u64().unwrap() > red["dropped"].as_u64().unwrap(), "{stats}");
    let a = &stats["admission"];
    assert!(a["load"].as_f64().unwrap() < 0.96 && a["datapaths"]["red"]["packet_ns"].as_f64().unwrap() > 0.0, "{a}");
}
