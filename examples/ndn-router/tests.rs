//! examples/ndn-router against a plain reference: names written and read
//! with the test's own few lines (NDN TLV, URIs with every byte that is not
//! a letter or digit percent-encoded), the longest prefix found by scanning
//! every prefix, the router's checks applied in order. Generated tables
//! (300 and 20,000 prefixes of 1 to 6 components from a small vocabulary,
//! so that they nest and share components; some typed components; next
//! hops 0 to 19 so that some name a port the router does not have) and
//! traffic (names under prefixes, beside them and unrelated; length fields
//! in every encoding; runts, other ethertypes, Data packets, names cut by
//! the capture or with bad component types) go through `netvm run` on the
//! interpreter and on the JIT in every computation batching mode. Every
//! output port must hold exactly the frames the reference sends there, and
//! the drop reasons must add up.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[path = "../support.rs"]
mod support;

use netvm_traffic::SplitMix64;
use netvm_vm::{Packet, Timestamp};
use support::{check_every_engine, sample_shows, write_pcap};

fn example(rel: &str) -> String {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/ndn-router")).join(rel).display().to_string()
}

/// A component: (TLV-TYPE, value).
type Comp = (u16, Vec<u8>);

/// `name` as a URI, every byte but letters and digits as `%XX`.
fn uri(name: &[Comp]) -> String {
    if name.is_empty() {
        return "/".into();
    }
    let mut s = String::new();
    for (t, v) in name {
        s.push('/');
        if *t != 8 {
            s += &format!("{t}=");
        }
        if v.is_empty() {
            s += "...";
        }
        for &b in v {
            if b.is_ascii_alphanumeric() {
                s.push(b as char);
            } else {
                s += &format!("%{b:02X}");
            }
        }
    }
    s
}

/// A TLV-TYPE or TLV-LENGTH: shortest, or forced to 3 or 5 bytes.
fn num(out: &mut Vec<u8>, v: usize, wide: u8) {
    match (v, wide) {
        (0..=252, 0) => out.push(v as u8),
        (_, 0 | 3) if v <= 0xffff => {
            out.push(253);
            out.extend_from_slice(&(v as u16).to_be_bytes());
        }
        _ => {
            out.push(254);
            out.extend_from_slice(&(v as u32).to_be_bytes());
        }
    }
}

fn tlv(out: &mut Vec<u8>, typ: usize, value: &[u8], wide: u8) {
    num(out, typ, wide);
    num(out, value.len(), wide);
    out.extend_from_slice(value);
}

/// Reads a TLV-TYPE or TLV-LENGTH at `*at`, within `end`.
fn read_num(f: &[u8], at: &mut usize, end: usize) -> Option<u64> {
    let first = *f.get(*at)?;
    let n = match first {
        0..=252 => 0,
        253 => 2,
        254 => 4,
        255 => 8,
    };
    if *at + 1 + n > end.min(f.len()) {
        return None;
    }
    let v = if n == 0 { u64::from(first) } else { f[*at + 1..*at + 1 + n].iter().fold(0, |v, &b| v << 8 | u64::from(b)) };
    *at += 1 + n;
    Some(v)
}

/// The Interest's name, or `None` if it does not parse.
fn read_name(f: &[u8]) -> Option<Vec<Comp>> {
    let mut at = 14;
    let _interest = read_num(f, &mut at, f.len())?;
    let ilen = read_num(f, &mut at, f.len())?;
    let iend = (at as u64).saturating_add(ilen).min(f.len() as u64) as usize;
    if read_num(f, &mut at, iend)? != 7 {
        return None;
    }
    let nlen = read_num(f, &mut at, iend)?;
    let nend = at.checked_add(usize::try_from(nlen).ok()?).filter(|&e| e <= iend)?;
    let mut name = Vec::new();
    while at < nend {
        let t = read_num(f, &mut at, nend)?;
        let l = read_num(f, &mut at, nend)?;
        let e = at.checked_add(usize::try_from(l).ok()?).filter(|&e| e <= nend)?;
        if t == 0 || t > 0xffff {
            return None;
        }
        name.push((t as u16, f[at..e].to_vec()));
        at = e;
    }
    Some(name)
}

/// What the router does with a frame: the output port, or the drop reason.
fn reference(fib: &[(Vec<Comp>, u32)], f: &[u8]) -> Result<u32, &'static str> {
    if f.len() < 16 {
        return Err("runt");
    }
    if f[12..14] != [0x86, 0x24] {
        return Err("not_ndn");
    }
    if f[14] != 5 {
        return Err("not_interest");
    }
    let name = read_name(f).ok_or("malformed")?;
    let best = fib.iter().filter(|(p, _)| p.len() <= name.len() && name[..p.len()] == p[..]).max_by_key(|(p, _)| p.len());
    match best {
        None => Err("no_route"),
        Some((_, p)) if *p >= 16 => Err("bad_port"),
        Some((_, p)) => Ok(*p),
    }
}

const WORDS: [&str; 12] = ["com", "edu", "ucla", "cs", "video", "news", "sport", "a", "b", "seg", "v1", "x-y.z"];

fn component(r: &mut SplitMix64) -> Comp {
    match r.below(20) {
        0 => (1 + r.below(40) as u16, (0..r.below(4)).map(|_| r.below(256) as u8).collect()),
        1 => (8, Vec::new()),
        2 => (8, vec![b'/', 0xff, b' ']),
        _ => (8, WORDS[r.below(WORDS.len() as u64) as usize].as_bytes().to_vec()),
    }
}

/// `n` distinct prefixes (the root `/` among them if `root`) and `frames` frames.
fn traffic(r: &mut SplitMix64, n: usize, frames: usize, root: bool) -> (String, Vec<Packet>) {
    let mut seen = BTreeSet::new();
    let mut fib = Vec::new();
    if root {
        seen.insert(Vec::new());
        fib.push((Vec::new(), r.below(16) as u32));
    }
    while fib.len() < n {
        let depth = 1 + r.below(6) as usize;
        let p: Vec<Comp> = (0..depth).map(|_| component(r)).collect();
        if seen.insert(p.clone()) {
            fib.push((p, r.below(20) as u32));
        }
    }
    let mut text = String::from("# generated\n");
    for (p, hop) in &fib {
        text += &format!("{} {hop}\n", uri(p));
    }
    let pkts = (0..frames)
        .map(|i| {
            let mut name: Vec<Comp> = match r.below(4) {
                0 => Vec::new(),
                _ => fib[r.below(n as u64) as usize].0.clone(),
            };
            for _ in 0..r.below(5) {
                name.push(component(r));
            }
            let wide = [0, 0, 0, 3, 5][r.below(5) as usize];
            let mut comps = Vec::new();
            for (t, v) in &name {
                tlv(&mut comps, usize::from(*t), v, wide);
            }
            let mut body = Vec::new();
            tlv(&mut body, 7, &comps, wide);
            tlv(&mut body, 0x0a, &r.next_u64().to_be_bytes()[..4], 0); // Nonce
            let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0x24];
            tlv(&mut f, 5, &body, 0);
            match r.below(40) {
                0 => {
                    let upto = if r.below(2) == 0 { 16 } else { f.len() as u64 };
                    f.truncate(r.below(upto) as usize)
                }
                1 => f[12] = 0x08,
                2 => f[14] = 6,
                3 if !comps.is_empty() => {
                    // A component type 0, or a name longer than its Interest.
                    let at = f.len() - body.len() + (body.len() - comps.len() - 6);
                    f[at] = 0;
                }
                4 => f[15] = 3,
                _ => {}
            }
            let mut p = Packet::from_bytes(f);
            p.ts = Timestamp { sec: 1_704_067_200, nsec: i as u32 * 1000 };
            p
        })
        .collect();
    (text, pkts)
}

fn check(seed: u64, nprefixes: usize, nframes: usize) {
    let dir = tempfile::tempdir().unwrap();
    // With the root prefix every well-formed name has a route.
    let root = seed % 2 == 1;
    let (text, pkts) = traffic(&mut SplitMix64::new(seed), nprefixes, nframes, root);
    let fib = seen_names(&text);
    let mut want: BTreeMap<u32, Vec<Vec<u8>>> = (0..16).map(|p| (p, Vec::new())).collect();
    let mut drops: BTreeMap<&str, u64> = BTreeMap::new();
    for p in &pkts {
        match reference(&fib, &p.data) {
            Ok(port) => want.get_mut(&port).unwrap().push(p.data.clone()),
            Err(why) => *drops.entry(why).or_default() += 1,
        }
    }
    assert!(drops.len() >= 6 - usize::from(root), "seed {seed}: the traffic exercises the drop reasons: {drops:?}");
    check_every_engine(dir.path(), &example("app.toml"), "fib", &text, &pkts, &want, &drops, &format!("seed {seed}"), |engine, stats| {
        let fib = &stats["netpes"][0]["copro"]["fib"];
        assert_eq!(fib["prefixes"].as_u64().unwrap(), nprefixes as u64, "seed {seed}, {engine}");
        assert_eq!(fib["malformed"].as_u64().unwrap(), drops.get("malformed").copied().unwrap_or(0), "seed {seed}, {engine}");
    });
}

/// The prefix file's names, read back from the URIs by the test's own decoder.
fn seen_names(text: &str) -> Vec<(Vec<Comp>, u32)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (u, hop) = l.split_once(' ').unwrap();
            let name = u
                .split('/')
                .skip(1)
                .filter(|c| !c.is_empty())
                .map(|c| {
                    let (t, v) = match c.split_once('=') {
                        Some((t, v)) => (t.parse().unwrap(), v),
                        None => (8, c),
                    };
                    let v = v.strip_prefix("...").unwrap_or(v);
                    let mut bytes = Vec::new();
                    let b = v.as_bytes();
                    let mut i = 0;
                    while i < b.len() {
                        if b[i] == b'%' {
                            bytes.push(u8::from_str_radix(&v[i + 1..i + 3], 16).unwrap());
                            i += 3;
                        } else {
                            bytes.push(b[i]);
                            i += 1;
                        }
                    }
                    (t, bytes)
                })
                .collect();
            (name, hop.parse().unwrap())
        })
        .collect()
}

#[test]
fn router_matches_the_reference() {
    for seed in 0..4 {
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
        &format!("fib={}", example("fib.txt")),
        &example("sample.pcap"),
        &["runt", "not_ndn", "not_interest", "malformed", "no_route", "bad_port"],
    );
}

/// Writes fib.txt and sample.pcap (`cargo test -p netvm-cli --test ndn_router -- --ignored`).
#[test]
#[ignore]
fn write_the_sample() {
    let (text, pkts) = traffic(&mut SplitMix64::new(2024), 40, 200, false);
    std::fs::write(
        example("fib.txt"),
        format!("# examples/ndn-router: NAME PORT (written by tests.rs, write_the_sample)\n{}", &text[text.find('\n').unwrap() + 1..]),
    )
    .unwrap();
    write_pcap(Path::new(&example("sample.pcap")), &pkts);
}
