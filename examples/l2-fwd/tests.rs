//! examples/l2-fwd against a plain reference: a `HashMap` from destination
//! MAC to port, read from the table file with the test's own few lines.
//! Generated tables (a few entries to 20,000, ports 0 to 19, so that some
//! name a port the forwarder does not have) and traffic (known and unknown
//! destinations, group addresses, runts) go through `netvm run` on the
//! interpreter and on the JIT in every computation batching mode; every
//! output port must hold exactly the frames the reference sends there, in
//! order, and the drop reasons must add up.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Command;

#[path = "../support.rs"]
mod support;

use netvm_traffic::SplitMix64;
use netvm_vm::{Packet, Timestamp};
use support::check_every_engine;

fn example(rel: &str) -> String {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/l2-fwd")).join(rel).display().to_string()
}

/// `KEY PORT` lines, parsed plainly.
fn parse_fib(text: &str) -> HashMap<[u8; 6], u32> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut w = l.split_whitespace();
            let k = w.next().unwrap();
            let key: [u8; 6] = std::array::from_fn(|i| u8::from_str_radix(&k[2 * i..2 * i + 2], 16).unwrap());
            (key, w.next().unwrap().parse().unwrap())
        })
        .collect()
}

/// A table of `n` hosts (unicast MACs) with ports 0 to 19, and `frames`
/// frames: runts, destinations in the table, unknown ones, group addresses.
fn traffic(r: &mut SplitMix64, n: usize, frames: usize) -> (String, Vec<Packet>) {
    let mac = |h: u64| -> [u8; 6] {
        let b = (h as u32).wrapping_mul(0x9e37_79b9).to_be_bytes();
        [0x02, (h >> 32) as u8, b[0], b[1], b[2], b[3]]
    };
    let mut fib = String::from("# generated\n");
    for h in 0..n as u64 {
        fib += &format!("{} {}\n", mac(h).iter().map(|b| format!("{b:02x}")).collect::<String>(), r.below(20));
    }
    let pkts = (0..frames)
        .map(|i| {
            let data = match r.below(100) {
                0..=2 => vec![0u8; r.below(14) as usize],
                k => {
                    let dst = match k {
                        3..=9 => mac(n as u64 + r.below(1000)),                  // unknown
                        10..=12 => [0x01, 0x00, 0x5e, 0, 0, r.below(256) as u8], // group
                        _ => mac(r.below(n as u64)),
                    };
                    let mut f = vec![0u8; 14 + r.below(50) as usize];
                    f[..6].copy_from_slice(&dst);
                    f[6..12].copy_from_slice(&mac(r.below(n as u64)));
                    f[12..14].copy_from_slice(&[0x08, 0x00]);
                    f
                }
            };
            let mut p = Packet::from_bytes(data);
            p.ts = Timestamp { sec: 1_704_067_200, nsec: i as u32 * 1000 };
            p
        })
        .collect();
    (fib, pkts)
}

fn check(seed: u64, entries: usize, frames: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (fib, pkts) = traffic(&mut SplitMix64::new(seed), entries, frames);
    let table = parse_fib(&fib);
    let mut want: BTreeMap<u32, Vec<Vec<u8>>> = (0..16).map(|p| (p, Vec::new())).collect();
    let mut drops: BTreeMap<&str, u64> = [("runt", 0), ("unknown", 0), ("bad_port", 0)].into_iter().collect();
    for p in &pkts {
        let why = if p.data.len() < 14 {
            "runt"
        } else {
            match table.get(&<[u8; 6]>::try_from(&p.data[..6]).unwrap()) {
                None => "unknown",
                Some(&port) if port >= 16 => "bad_port",
                Some(&port) => {
                    want.get_mut(&port).unwrap().push(p.data.clone());
                    continue;
                }
            }
        };
        *drops.get_mut(why).unwrap() += 1;
    }
    check_every_engine(dir.path(), &example("app.toml"), "fib", &fib, &pkts, &want, &drops, &format!("seed {seed}"), |engine, stats| {
        assert_eq!(stats["netpes"][0]["dropped"], drops.values().sum::<u64>(), "seed {seed}, {engine}");
    });
}

#[test]
fn forwarding_matches_the_reference() {
    for seed in 0..3 {
        check(seed, 300, 2000);
    }
}

#[test]
fn forwarding_with_a_larger_table() {
    check(9, 20_000, 3000);
}

#[test]
fn the_sample_runs() {
    let o = Command::new(env!("CARGO_BIN_EXE_netvm"))
        .args([
            "run",
            &example("app.toml"),
            "--load",
            &format!("fib={}", example("fib.txt")),
            "-r",
            &example("sample.pcap"),
            "--stats",
            "json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let d = &stats["netpes"][0]["copro"]["drops"];
    assert!(d["unknown"].as_u64().unwrap() > 0 && d["bad_port"].as_u64().unwrap() > 0 && d["runt"].as_u64().unwrap() > 0);
    assert_eq!(stats["packets"], 400);
}
