//! examples/ipv6-router against a plain reference: the route file read
//! with the test's own few lines, the longest match found by scanning every
//! route, the router's checks applied in order. Generated tables (300 and
//! 20,000 routes, mostly /32 to /64 as in the global IPv6 table, some
//! shorter and longer ones, next hops 0 to 19 so that some name a port the
//! router does not have) and traffic (destinations inside routes, at their
//! edges and outside them; every kind of broken frame) go through `netvm
//! run` on the interpreter and on the JIT in every computation batching
//! mode. Every output port must hold exactly the frames the reference
//! sends there, hop limit one less, and the drop reasons must add up.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv6Addr;
use std::path::PathBuf;

#[path = "../support.rs"]
mod support;

use netvm_traffic::SplitMix64;
use netvm_vm::{Packet, Timestamp};
use support::{check_every_engine, sample_shows};

fn example(rel: &str) -> String {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/ipv6-router")).join(rel).display().to_string()
}

fn mask(len: u32) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    }
}

/// `PREFIX/LEN PORT` lines, parsed plainly.
fn parse_routes(text: &str) -> Vec<(u128, u32, u32)> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut w = l.split_whitespace();
            let (net, len) = w.next().unwrap().split_once('/').unwrap();
            (u128::from(net.parse::<Ipv6Addr>().unwrap()), len.parse().unwrap(), w.next().unwrap().parse().unwrap())
        })
        .collect()
}

/// Longest matching route by a scan over every route.
fn naive_lookup(routes: &[(u128, u32, u32)], dst: u128) -> Option<u32> {
    routes.iter().filter(|(net, len, _)| dst & mask(*len) == *net).max_by_key(|(_, len, _)| *len).map(|r| r.2)
}

/// What the router does with a frame: the output port, or the drop reason.
fn reference(routes: &[(u128, u32, u32)], f: &[u8]) -> Result<u32, &'static str> {
    if f.len() < 54 {
        return Err("runt");
    }
    if f[12..14] != [0x86, 0xdd] {
        return Err("not_ipv6");
    }
    if f[14] >> 4 != 6 {
        return Err("bad_version");
    }
    if 54 + usize::from(u16::from_be_bytes([f[18], f[19]])) > f.len() {
        return Err("bad_length");
    }
    if f[21] <= 1 {
        return Err("hop_limit");
    }
    match naive_lookup(routes, u128::from_be_bytes(f[38..54].try_into().unwrap())) {
        None => Err("no_route"),
        Some(p) if p >= 16 => Err("bad_port"),
        Some(p) => Ok(p),
    }
}

/// `n` distinct routes and `frames` frames.
fn traffic(r: &mut SplitMix64, n: usize, frames: usize) -> (String, Vec<Packet>) {
    let mut seen = BTreeSet::new();
    let mut routes = Vec::new();
    while routes.len() < n {
        let len = match r.below(100) {
            0..=4 => r.below(32) as u32,
            5..=9 => 65 + r.below(64) as u32,
            _ => 32 + r.below(33) as u32,
        };
        // Mostly under 2000::/3, as the global table; nested prefixes come by chance.
        let base = (0x2000u128 << 112) | (u128::from(r.next_u64()) << 64 | u128::from(r.next_u64())) >> 3;
        let net = base & mask(len);
        if seen.insert((net, len)) {
            routes.push((net, len, r.below(20) as u32));
        }
    }
    let mut text = String::from("# generated\n");
    for (net, len, hop) in &routes {
        text += &format!("{}/{len} {hop}\n", Ipv6Addr::from(*net));
    }
    let pkts = (0..frames)
        .map(|i| {
            let (net, len, _) = routes[r.below(n as u64) as usize];
            let host = u128::from(r.next_u64()) << 64 | u128::from(r.next_u64());
            let dst = match r.below(10) {
                0 => host,                                           // anywhere
                1 => net | (!mask(len) & u128::MAX.wrapping_shr(1)), // near the top of the route
                _ => net | (host & !mask(len)),
            };
            let plen = r.below(40) as u16;
            let mut f = vec![0u8; 54 + usize::from(plen)];
            f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2]);
            f[12..14].copy_from_slice(&[0x86, 0xdd]);
            f[14] = 0x60;
            f[18..20].copy_from_slice(&plen.to_be_bytes());
            f[20] = 17;
            f[21] = [2, 64, 255][r.below(3) as usize];
            f[22..38].copy_from_slice(&0x2001_0db8_u128.rotate_right(32).to_be_bytes());
            f[38..54].copy_from_slice(&dst.to_be_bytes());
            match r.below(40) {
                0 => f.truncate(r.below(54) as usize),
                1 => f[12] = 0x08,
                2 => f[14] = 0x40,
                3 => f[18] = 0xff,
                4 => f[21] = r.below(2) as u8,
                _ => {}
            }
            let mut p = Packet::from_bytes(f);
            p.ts = Timestamp { sec: 1_704_067_200, nsec: i as u32 * 1000 };
            p
        })
        .collect();
    (text, pkts)
}

fn check(seed: u64, nroutes: usize, nframes: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (text, pkts) = traffic(&mut SplitMix64::new(seed), nroutes, nframes);
    let routes = parse_routes(&text);
    let mut want: BTreeMap<u32, Vec<Vec<u8>>> = (0..16).map(|p| (p, Vec::new())).collect();
    let mut drops: BTreeMap<&str, u64> = BTreeMap::new();
    for p in &pkts {
        match reference(&routes, &p.data) {
            Ok(port) => {
                let mut out = p.data.clone();
                out[21] -= 1;
                want.get_mut(&port).unwrap().push(out);
            }
            Err(why) => *drops.entry(why).or_default() += 1,
        }
    }
    assert!(drops.len() >= 6, "seed {seed}: the traffic exercises the drop reasons: {drops:?}");
    check_every_engine(dir.path(), &example("app.toml"), "routes", &text, &pkts, &want, &drops, &format!("seed {seed}"), |_, _| {});
}

#[test]
fn router_matches_the_reference() {
    for seed in 0..3 {
        check(seed, 300, 2000);
    }
}

#[test]
fn router_with_a_larger_table() {
    check(11, 20_000, 3000);
}

#[test]
fn the_sample_runs() {
    sample_shows(
        &example("app.toml"),
        &format!("routes={}", example("routes.txt")),
        &example("sample.pcap"),
        &["runt", "not_ipv6", "bad_version", "bad_length", "hop_limit", "no_route", "bad_port"],
    );
}
