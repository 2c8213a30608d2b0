//! examples/ipv4-router against a plain reference.
//!
//! The reference reads the route file with its own few lines of parsing,
//! finds routes by scanning all of them (longest prefix wins), and applies
//! the router's checks in order. Every forwarded packet is checked from
//! scratch: the TTL is one less, the header checksum verifies (computed
//! over the whole header, not incrementally), and every other byte is as
//! it came in. Drop reasons are compared per NetPE, and the interpreter and
//! the JIT must agree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../support.rs"]
mod support;

use netvm_traffic::apps::{route_file, router_trace, routes4};
use netvm_traffic::{internet_checksum, SplitMix64};
use netvm_vm::Packet;
use support::{run_with_table, write_pcap, ENGINES};

fn example(rel: &str) -> String {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/ipv4-router")).join(rel).display().to_string()
}

/// `a.b.c.d/len port` lines, parsed plainly.
fn parse_routes(text: &str) -> Vec<(u32, u32, u32)> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut w = l.split_whitespace();
            let (net, len) = w.next().unwrap().split_once('/').unwrap();
            let addr: std::net::Ipv4Addr = net.parse().unwrap();
            (u32::from(addr), len.parse().unwrap(), w.next().unwrap().parse().unwrap())
        })
        .collect()
}

/// Longest matching route by a scan over every route.
fn naive_lookup(routes: &[(u32, u32, u32)], dst: u32) -> Option<u32> {
    let mut best: Option<(u32, u32)> = None;
    for &(net, len, port) in routes {
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        if dst & mask == net && best.is_none_or(|(l, _)| len >= l) {
            best = Some((len, port));
        }
    }
    best.map(|(_, p)| p)
}

/// Where a frame goes: an output port, or the (NetPE, reason) that drops it.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Fate {
    Out(u32),
    Drop(&'static str, &'static str),
}

fn reference(routes: &[(u32, u32, u32)], f: &[u8]) -> Fate {
    use Fate::Drop;
    let be16 = |o: usize| u32::from(u16::from_be_bytes([f[o], f[o + 1]]));
    if f.len() < 14 {
        return Drop("classify", "runt");
    }
    if be16(12) != 0x0800 {
        return Drop("classify", "not_ipv4");
    }
    if f.len() < 34 {
        return Drop("verify", "truncated");
    }
    if f[14] >> 4 != 4 {
        return Drop("verify", "bad_version");
    }
    let hl = usize::from(f[14] & 0x0f) * 4;
    if hl < 20 {
        return Drop("verify", "bad_ihl");
    }
    if 14 + hl > f.len() {
        return Drop("verify", "truncated");
    }
    let total = be16(16) as usize;
    if total < hl || 14 + total > f.len() {
        return Drop("verify", "bad_length");
    }
    if f[22] <= 1 {
        return Drop("verify", "ttl_expired");
    }
    if internet_checksum(&f[14..14 + hl]) != 0 {
        return Drop("checksum", "bad_checksum");
    }
    let dst = u32::from_be_bytes(f[30..34].try_into().unwrap());
    match naive_lookup(routes, dst) {
        None => Drop("lookup", "no_route"),
        Some(p) if p >= 16 => Drop("lookup", "bad_port"),
        Some(p) => Fate::Out(p),
    }
}

/// Runs the router on `pkts` with the route file `table`; returns each port's output and the stats.
fn run_router(dir: &Path, table: &str, pkts: &[Packet], engine: (&str, &[&str])) -> (BTreeMap<u32, Vec<Vec<u8>>>, serde_json::Value) {
    run_with_table(dir, &example("app.toml"), "routes", table, pkts, engine)
}

fn check(seed: u64, nroutes: usize, npkts: usize) {
    let dir = tempfile::tempdir().unwrap();
    let mut r = SplitMix64::new(seed);
    // Next hops up to 17: routes to ports 16 and 17 exercise `bad_port`.
    let routes = routes4(&mut r, nroutes, 18);
    let text = format!("# generated, seed {seed}\n\n{}", route_file(&routes));
    let pkts = router_trace(&mut r, &routes, npkts);
    let table = parse_routes(&text);

    let mut want_out: BTreeMap<u32, Vec<Vec<u8>>> = (0..16).map(|p| (p, Vec::new())).collect();
    let mut want_drops: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    // The `lpm`'s own counts: every frame that reaches `lookup` is a
    // lookup, and a hit unless no route covers it.
    let (mut lookups, mut hits) = (0u64, 0u64);
    for p in &pkts {
        let fate = reference(&table, &p.data);
        match fate {
            Fate::Out(_) | Fate::Drop("lookup", "bad_port") => (lookups, hits) = (lookups + 1, hits + 1),
            Fate::Drop("lookup", _) => lookups += 1,
            Fate::Drop(..) => {}
        }
        match fate {
            Fate::Out(port) => want_out.get_mut(&port).unwrap().push(p.data.clone()),
            Fate::Drop(pe, why) => *want_drops.entry((pe, why)).or_default() += 1,
        }
    }
    let mut runs = Vec::new();
    for (engine, flags) in ENGINES {
        let (got, stats) = run_router(dir.path(), &text, &pkts, (engine, flags));
        for (port, frames) in &got {
            let want = &want_out[port];
            assert_eq!(frames.len(), want.len(), "seed {seed}, {engine}: frames out of port {port}");
            for (g, w) in frames.iter().zip(want) {
                // From scratch: TTL one less, header checksum right, the rest untouched.
                assert_eq!(g.len(), w.len());
                assert_eq!(g[22], w[22] - 1, "seed {seed}, {engine}: TTL");
                let hl = usize::from(g[14] & 0x0f) * 4;
                assert_eq!(internet_checksum(&g[14..14 + hl]), 0, "seed {seed}, {engine}: header checksum of {g:02x?}");
                let same = |x: &[u8]| [&x[..22], &x[23..24], &x[26..]].concat();
                assert_eq!(same(g), same(w), "seed {seed}, {engine}: bytes other than TTL and checksum changed");
            }
        }
        let mut got_drops: BTreeMap<(String, String), u64> = BTreeMap::new();
        for pe in stats["netpes"].as_array().unwrap() {
            let name = pe["name"].as_str().unwrap();
            let sum: u64 = pe["copro"]["drops"].as_object().map_or(0, |d| d.values().map(|v| v.as_u64().unwrap()).sum());
            assert_eq!(pe["dropped"], sum, "seed {seed}, {engine}: NetPE {name} drops without a reason");
            if let Some(d) = pe["copro"]["drops"].as_object() {
                for (why, n) in d {
                    if n != 0 {
                        got_drops.insert((name.to_string(), why.clone()), n.as_u64().unwrap());
                    }
                }
            }
        }
        let want: BTreeMap<(String, String), u64> = want_drops.iter().map(|((a, b), n)| ((a.to_string(), b.to_string()), *n)).collect();
        assert_eq!(got_drops, want, "seed {seed}, {engine}: drop reasons");
        let lookup = stats["netpes"].as_array().unwrap().iter().find(|pe| pe["name"] == "lookup").unwrap();
        let counted = &lookup["copro"]["routes"];
        assert_eq!((&counted["lookups"], &counted["hits"]), (&lookups.into(), &hits.into()), "seed {seed}, {engine}: lpm counts");
        assert!(stats["faults"].as_object().unwrap().values().all(|v| v == 0), "seed {seed}, {engine}: {}", stats["faults"]);
        runs.push(got);
    }
    for (r, (engine, _)) in runs.iter().zip(ENGINES).skip(1) {
        assert_eq!(&runs[0], r, "seed {seed}: the interpreter and {engine} disagree");
    }
}

#[test]
fn router_matches_the_reference() {
    for seed in 0..3 {
        check(seed, 300, 1500);
    }
}

#[test]
fn router_with_a_large_table() {
    check(7, 20_000, 3000);
}

#[test]
fn bad_route_files_are_refused_with_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    write_pcap(&input, []);
    for (text, line) in [("10.0.0.0/8 1\n10.0.0.1/8 2\n", "line 2"), ("10.0.0.0/33 1\n", "line 1"), ("\n\nbogus 1\n", "line 3")] {
        let routes = dir.path().join("bad.txt");
        std::fs::write(&routes, text).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_netvm"))
            .args(["run", &example("app.toml"), "--load", &format!("routes={}", routes.display()), "-r", &input.display().to_string()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{text:?}: {err}");
        assert!(err.contains(line), "{text:?}: {err}");
    }
}
