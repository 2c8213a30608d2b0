//! examples/l2-bridge against a model of a learning bridge.
//!
//! The model is the rule list of the README, written out plainly: a
//! `HashMap` from MAC to (port, time last seen), entries older than the
//! aging time ignored. Generated traces on several ports (hosts that talk,
//! broadcast, multicast, unknown unicast, group source addresses, runts,
//! hosts that move, gaps just under, at and over the aging time) go
//! through `netvm run` with both engines; every output file must be what
//! the model says, packet for packet, and the two engines must agree.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[path = "../support.rs"]
mod support;

use netvm_traffic::apps::{bridge_trace, BridgeTraffic};
use netvm_traffic::SplitMix64;
use netvm_vm::Packet;
use support::{run_app, write_pcap, ENGINES};

const AGING_NS: u64 = 300 * 1_000_000_000;

fn example(rel: &str) -> String {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/l2-bridge")).join(rel).display().to_string()
}

/// What the bridge must send out of each port, in order; and the drops.
struct Expected {
    out: HashMap<u16, Vec<Vec<u8>>>,
    runts: u64,
    same_port: u64,
}

/// The bridge of the README, on `frames` already in arrival order, with `ports` up.
fn model(frames: &[Packet], ports: &[u16]) -> Expected {
    let mut fib: HashMap<[u8; 6], (u16, u64)> = HashMap::new();
    let mut e = Expected { out: ports.iter().map(|p| (*p, Vec::new())).collect(), runts: 0, same_port: 0 };
    for f in frames {
        let d = &f.data;
        if d.len() < 14 {
            e.runts += 1;
            continue;
        }
        let now = f.ts.as_nanos();
        let src: [u8; 6] = d[6..12].try_into().unwrap();
        let dst: [u8; 6] = d[0..6].try_into().unwrap();
        if src[0] & 1 == 0 {
            fib.insert(src, (f.in_port, now));
        }
        let known = if dst[0] & 1 == 0 { fib.get(&dst).filter(|(_, seen)| now - seen <= AGING_NS).map(|(p, _)| *p) } else { None };
        match known {
            Some(p) if p == f.in_port => e.same_port += 1,
            Some(p) => {
                if let Some(o) = e.out.get_mut(&p) {
                    o.push(d.clone());
                }
            }
            None => {
                for p in ports.iter().filter(|p| **p != f.in_port) {
                    e.out.get_mut(p).unwrap().push(d.clone());
                }
            }
        }
    }
    e
}

/// Runs the bridge on `frames` (their `in_port`s are the ports) with `engine`;
/// returns the output of each port and the `--stats json` object.
fn run_bridge(dir: &Path, frames: &[Packet], ports: &[u16], engine: (&str, &[&str])) -> (HashMap<u16, Vec<Vec<u8>>>, serde_json::Value) {
    let mut args: Vec<String> = vec![example("app.toml")];
    for p in ports {
        let file = dir.join(format!("in-{p}.pcap"));
        write_pcap(&file, frames.iter().filter(|f| f.in_port == *p));
        args.push("-r".into());
        args.push(format!("{p}={}", file.display()));
    }
    let (out, stats) = run_app(dir, &args, engine, 1..=8);
    let mut up = HashMap::new();
    for (p, pkts) in out {
        let p = p as u16;
        if ports.contains(&p) {
            up.insert(p, pkts);
        } else {
            assert!(pkts.is_empty(), "port {p} is down but got {} frames", pkts.len());
        }
    }
    (up, stats)
}

fn check(seed: u64, traffic: &BridgeTraffic) {
    let dir = tempfile::tempdir().unwrap();
    let mut frames = bridge_trace(&mut SplitMix64::new(seed), traffic);
    // The merge `netvm run` does: timestamp order, ties on the lower port.
    frames.sort_by_key(|f| (f.ts, f.in_port));
    let ports: Vec<u16> = (1..=traffic.ports).collect();
    let want = model(&frames, &ports);
    let mut runs = Vec::new();
    for (engine, flags) in ENGINES {
        let (got, stats) = run_bridge(dir.path(), &frames, &ports, (engine, flags));
        for p in &ports {
            let (g, w) = (&got[p], &want.out[p]);
            assert_eq!(g.len(), w.len(), "seed {seed}, {engine}: number of frames out of port {p}");
            for (i, (a, b)) in g.iter().zip(w).enumerate() {
                assert_eq!(a, b, "seed {seed}, {engine}: frame {i} out of port {p}");
            }
        }
        let bridge = &stats["netpes"][0];
        assert_eq!(bridge["name"], "bridge");
        assert_eq!(bridge["copro"]["drops"]["runt"], want.runts, "seed {seed}, {engine}");
        assert_eq!(bridge["copro"]["drops"]["same_port"], want.same_port, "seed {seed}, {engine}");
        assert_eq!(stats["packets"], frames.len() as u64);
        let faults = stats["faults"].as_object().unwrap();
        assert!(faults.values().all(|v| v == 0), "seed {seed}, {engine}: faults {faults:?}");
        // The table's counts (compiled code probes it itself: lookups,
        // hits, inserts that replace, idle entries) as the interpreter's.
        let fib = &bridge["copro"]["fib"];
        assert!(fib["lookups"].as_u64().unwrap() > 0 && fib["inserts"].as_u64().unwrap() > 0, "seed {seed}, {engine}: {fib}");
        runs.push((got, stats["ports"].clone(), fib.clone()));
    }
    for (r, (engine, _)) in runs.iter().zip(ENGINES).skip(1) {
        assert_eq!(&runs[0], r, "seed {seed}: the interpreter and {engine} disagree");
    }
}

#[test]
fn bridge_matches_the_model_on_two_ports() {
    for seed in 0..4 {
        check(seed, &BridgeTraffic { ports: 2, ..BridgeTraffic::default() });
    }
}

#[test]
fn bridge_matches_the_model_on_four_ports_with_aging() {
    for seed in 10..14 {
        check(seed, &BridgeTraffic { ports: 4, hosts: 30, frames: 1500, long_gaps: 5, moves: 3, ..BridgeTraffic::default() });
    }
}

/// 3,000 hosts: the table (capacity 1M) starts with 1,024 slots and
/// doubles three times during the run, each time in an insert that
/// compiled code calls in the middle of a batch whose other frames it
/// probes itself; every engine must go on finding what was learnt.
#[test]
fn bridge_learns_thousands_of_hosts_while_its_table_grows() {
    check(7, &BridgeTraffic { ports: 4, hosts: 3000, frames: 12000, long_gaps: 0, moves: 1, ..BridgeTraffic::default() });
}

#[test]
fn bridge_with_eight_ports_and_few_hosts() {
    check(99, &BridgeTraffic { ports: 8, hosts: 5, frames: 800, ..BridgeTraffic::default() });
}

/// A frame from port 1 to a host learnt on port 2, then the same after the
/// entry aged out (flooded again), written out by hand.
#[test]
fn forwarding_then_aging_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let mac_a = [0x02, 0, 0, 0, 0, 0xa];
    let mac_b = [0x02, 0, 0, 0, 0, 0xb];
    let frame = |dst: [u8; 6], src: [u8; 6], sec: u64, port: u16| {
        let mut d = vec![0u8; 60];
        d[0..6].copy_from_slice(&dst);
        d[6..12].copy_from_slice(&src);
        d[12..14].copy_from_slice(&[0x08, 0x00]);
        d[59] = sec as u8;
        let mut p = Packet::from_bytes(d);
        p.ts.sec = 1_700_000_000 + sec;
        p.in_port = port;
        p
    };
    let frames = vec![
        frame([0xff; 6], mac_b, 0, 2), // B announces itself: flooded to 1 and 3
        frame(mac_b, mac_a, 1, 1),     // A to B: B is on 2
        frame(mac_b, mac_a, 301, 1),   // B last seen 301 s ago: flooded
        frame(mac_a, mac_b, 302, 2),   // B to A (A seen 1 s ago on 1): to 1
        frame(mac_a, mac_b, 303, 1),   // B appears on 1, A is on 1: dropped
    ];
    let (got, _) = run_bridge(dir.path(), &frames, &[1, 2, 3], ("jit", &[]));
    assert_eq!(got[&1], vec![frames[0].data.clone(), frames[3].data.clone()]);
    assert_eq!(got[&2], vec![frames[1].data.clone(), frames[2].data.clone()]);
    assert_eq!(got[&3], vec![frames[0].data.clone(), frames[2].data.clone()]);
}
