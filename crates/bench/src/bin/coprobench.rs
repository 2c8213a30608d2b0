//! `coprobench`: the coprocessors' data-plane kernels, measured the way
//! their C peers (`benches/peers/copropeers.c`: DPDK rte_lpm and rte_hash,
//! Hyperscan) measure theirs, on the same inputs.
//!
//! ```text
//! coprobench gen DIR [--prefixes N] [--lookups N] [--payload-mb N]   write the shared inputs
//! coprobench lpm DIR [--reps R]           Lpm4: build, one at a time, bulk (batches of 32)
//! coprobench hash DIR N [--reps R]        ExactTable, 8-byte keys: one at a time, bulk (32)
//! coprobench strmatch DIR [--reps R]      PatternSet (Hyperscan, aho-corasick), and the
//!                                         `strmatch` coprocessor called from a NetIL program on the JIT
//! coprobench gen-ids DIR                  write only the IDS inputs (also part of `gen`)
//! coprobench gen-l2fwd DIR N             the L2 forwarding inputs for an N-entry table
//! coprobench gen-bridge DIR N            the learning bridge's inputs for an N-entry table (preloaded)
//! coprobench gen-router DIR N            the router's inputs for N routes
//! coprobench gen-ipv6 DIR                 200,000 IPv6 routes (/32 to /64) and frames to them
//! coprobench lpm6 DIR [--reps R]          Lpm6: build, memory, one at a time, bulk (32)
//! coprobench gen-names DIR                1,000,000 name prefixes and Interests named under them
//! coprobench names DIR [--reps R]         NameFib: build, memory, one at a time, bulk (32)
//! coprobench app DIR APP [--reps R] [--only SETTING,...] [--rotate K]
//!                                         examples/ipv4-router (`router`; `router-N` after
//!                                         `gen-router DIR N`) or examples/l2-bridge (`bridge`;
//!                                         `bridge-N` after `gen-bridge DIR N`; `bridge-c`: its
//!                                         decision alone, benches/apps/bridge-c.toml), examples/ipv6-router (`router6`, after
//!                                         `gen-ipv6`), examples/ndn-router (`ndn`, after `gen-names`)
//!                                         or examples/l2-fwd (`l2fwd-N`, after
//!                                         `gen-l2fwd DIR N`) on the 64-byte frames, through the runtime's
//!                                         batch function, with computation batching off, on and
//!                                         prefetch (sub-batch chosen at run time), and prefetch
//!                                         and on at each fixed sub-batch size (the sweep); the
//!                                         compiled batch function alone on descriptors
//!                                         prepared once (`linked-off`, `linked-on-auto`,
//!                                         `linked-prefetch-auto`, and any `linked-SETTING`
//!                                         named in --only) and on descriptors written per
//!                                         burst of 256 from flat arrays, as a port writes
//!                                         them: from what the C loops read, the time once a
//!                                         burst (`burst-SETTING`, the same settings), or
//!                                         with every packet's lengths and time, as a
//!                                         capture's records carry them (`records-SETTING`,
//!                                         only where named in --only)
//! ```
//!
//! Every measurement prints one JSON line: engine, bench, mode, ns_median,
//! ns_min (per operation), reps, ops, and `check`, a sum over the answers
//! that the peer computes the same way, so that equal checks prove equal work.
//! Inputs (all little-endian): `routes.txt`; `lpm_addrs.bin` (u32
//! addresses); `hash_N_keys.bin`, `hash_N_lookups.bin` (8-byte keys);
//! `patterns.bin` (`u8 flags, u16 len, bytes`); `payloads.bin` (`u16 len,
//! bytes`); `router64.bin` / `router64.pcap` and `bridge64.bin` /
//! `bridge64-P.pcap`, 64-byte frames for the application benchmarks;
//! `ids.rules` and `ids.pcap`, 1,500 Snort rules and 100,000 TCP segments
//! for `netvm ids`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use netvm_bench::measure::{median, round3};
use netvm_copro::strmatch::{Backend, Pattern, PatternSet};
use netvm_copro::{ExactTable, Lpm4};
use netvm_traffic::apps::{ipv4_frame, tcp_frame};
use netvm_traffic::SplitMix64;
use netvm_vm::{Packet, Timestamp};

/// `len` printable ASCII bytes.
fn printable(r: &mut SplitMix64, len: usize) -> Vec<u8> {
    (0..len).map(|_| b' ' + r.below(95) as u8).collect()
}

/// A printable payload of 64 to 63 + `span` bytes; one in eight carries
/// one of `pats` at a random place.
fn payload(r: &mut SplitMix64, span: u64, pats: &[Vec<u8>]) -> Vec<u8> {
    let len = 64 + r.below(span) as usize;
    let mut p = printable(r, len);
    if r.below(8) == 0 {
        let pat = &pats[r.below(pats.len() as u64) as usize];
        let at = r.below((len - pat.len()) as u64) as usize;
        p[at..at + pat.len()].copy_from_slice(pat);
    }
    p
}

fn arg<T: std::str::FromStr>(args: &[String], flag: &str, default: T) -> T {
    args.windows(2).find(|w| w[0] == flag).and_then(|w| w[1].parse().ok()).unwrap_or(default)
}

fn die(msg: String) -> ! {
    eprintln!("coprobench: {msg}");
    std::process::exit(1)
}

fn read(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name))
        .unwrap_or_else(|e| die(format!("{}: {e} (run `coprobench gen {}` first)", dir.join(name).display(), dir.display())))
}

fn emit(engine: &str, bench: &str, mode: &str, ns: &[f64], ops: u64, check: u64) {
    let j = serde_json::json!({
        "engine": engine, "bench": bench, "mode": mode,
        "ns_median": round3(median(ns)), "ns_min": round3(ns.iter().copied().fold(f64::INFINITY, f64::min)),
        "reps": ns.len(), "ops": ops, "check": check,
    });
    println!("{j}");
}

/// Runs `pass` once to warm up, then `reps` times; returns ns per op of each and the check of the last.
fn timed(reps: usize, ops: u64, mut pass: impl FnMut() -> u64) -> (Vec<f64>, u64) {
    let check = pass();
    let mut ns = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        let c = std::hint::black_box(pass());
        ns.push(t.elapsed().as_nanos() as f64 / ops as f64);
        assert_eq!(c, check, "two passes gave different answers");
    }
    (ns, check)
}

// ---------------------------------------------------------------- inputs

/// `n` distinct IPv4 routes shaped like a BGP table: mostly /24, then
/// /16 to /23, some /8 to /15 and longer than /24, next hops 0..16.
fn routes(r: &mut SplitMix64, n: usize) -> Vec<(u32, u8, u32)> {
    let mut seen = std::collections::HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let len: u8 = match r.below(1000) {
            0..=579 => 24,
            580..=939 => 16 + r.below(8) as u8,
            940..=969 => 8 + r.below(8) as u8,
            _ => 25 + r.below(8) as u8,
        };
        // Unicast space, away from 0/8, 127/8 and multicast.
        let a = ((1 + r.below(222)) as u32) << 24 | (r.next_u32() & 0x00ff_ffff);
        let net = a & (u32::MAX << (32 - u32::from(len)));
        if seen.insert((net, len)) {
            out.push((net, len, r.below(16) as u32));
        }
    }
    out
}

fn gen(dir: &Path, args: &[String]) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| die(format!("{}: {e}", dir.display())));
    let prefixes = arg(args, "--prefixes", 500_000usize);
    let lookups = arg(args, "--lookups", 10_000_000usize);
    let payload_mb = arg(args, "--payload-mb", 100usize);
    let hash_sizes: Vec<usize> = arg(args, "--hash", "1000000,16000000".to_string()).split(',').filter_map(|s| s.parse().ok()).collect();
    let mut r = SplitMix64::new(0x5eed);

    let rt = routes(&mut r, prefixes);
    let mut text = String::with_capacity(prefixes * 20);
    for (net, len, nh) in &rt {
        text += &format!("{}/{len} {nh}\n", std::net::Ipv4Addr::from(*net));
    }
    std::fs::write(dir.join("routes.txt"), text).unwrap();
    let mut addrs = Vec::with_capacity(lookups * 4);
    let mut hits = Vec::with_capacity(lookups);
    for _ in 0..lookups {
        let (net, len, _) = r.pick(&rt);
        let host = if len == 32 { 0 } else { r.next_u32() & (u32::MAX >> len) };
        hits.push(net | host);
        addrs.extend_from_slice(&(net | host).to_le_bytes());
    }
    std::fs::write(dir.join("lpm_addrs.bin"), &addrs).unwrap();

    for n in hash_sizes {
        let seed = r.next_u64();
        let key = |i: u64| SplitMix64::mix(i ^ seed).to_le_bytes();
        let mut keys = Vec::with_capacity(n * 8);
        for i in 0..n as u64 {
            keys.extend_from_slice(&key(i));
        }
        std::fs::write(dir.join(format!("hash_{n}_keys.bin")), &keys).unwrap();
        let mut look = Vec::with_capacity(lookups * 8);
        for _ in 0..lookups {
            look.extend_from_slice(&key(r.below(n as u64)));
        }
        std::fs::write(dir.join(format!("hash_{n}_lookups.bin")), &look).unwrap();
    }

    // 1,500 literal patterns of 4 to 32 printable bytes, 10 % case-insensitive.
    let mut pats = Vec::new();
    let mut plist: Vec<Vec<u8>> = Vec::new();
    for _ in 0..1500 {
        let len = 4 + r.below(29) as usize;
        let p = printable(&mut r, len);
        pats.push(u8::from(r.below(10) == 0));
        pats.extend_from_slice(&(len as u16).to_le_bytes());
        pats.extend_from_slice(&p);
        plist.push(p);
    }
    std::fs::write(dir.join("patterns.bin"), &pats).unwrap();
    // Payloads of 64 to 1500 printable bytes; one in eight carries a pattern.
    let mut pay = Vec::with_capacity(payload_mb << 20);
    while pay.len() < payload_mb << 20 {
        let p = payload(&mut r, 1437, &plist);
        pay.extend_from_slice(&(p.len() as u16).to_le_bytes());
        pay.extend_from_slice(&p);
    }
    std::fs::write(dir.join("payloads.bin"), &pay).unwrap();

    // 64-byte frames for the router: destinations hit the routes; TTL 64, checksums right.
    let frames: Vec<Vec<u8>> = hits.iter().take(100_000).map(|&dst| ipv4_frame(0x0a00_0001, dst, 64, 64)).collect();
    write_frames(dir, "router64", frames.iter().map(|f| (0u16, f.as_slice())));
    // The bridge: 64-byte frames between 4,096 hosts on 4 ports; each host sends from its own port.
    let hosts = 4096u64;
    let mac = |h: u64| -> [u8; 6] {
        let b = (h as u32).wrapping_mul(0x9e37_79b9).to_be_bytes();
        [0x02, 0x00, b[0], b[1], b[2], b[3]]
    };
    let bridge: Vec<(u16, Vec<u8>)> = (0..100_000)
        .map(|_| {
            let (s, d) = (r.below(hosts), r.below(hosts));
            let mut f = vec![0u8; 64];
            f[0..6].copy_from_slice(&mac(d));
            f[6..12].copy_from_slice(&mac(s));
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            (1 + (s % 4) as u16, f)
        })
        .collect();
    write_frames(dir, "bridge64", bridge.iter().map(|(p, f)| (*p, f.as_slice())));
    gen_ids(dir);
    eprintln!("coprobench: inputs written to {}", dir.display());
}

/// The IDS inputs, from their own seed so that they can be made apart from
/// the others (`gen-ids`): a ruleset shaped like a real one, 1,500 TCP
/// rules each with its own content (4 to 32 printable bytes, 10 % nocase;
/// half of them for any port, the others for port 80 or for 80, 443 and
/// 8080; 5 % drop), and 100,000 TCP segments with 64 to 1,460 printable
/// payload bytes to ports 80, 443, 8080, 25 and 53, one in eight carrying
/// a rule's content.
fn gen_ids(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| die(format!("{}: {e}", dir.display())));
    let mut r = SplitMix64::new(0x1d5);
    let mut rules = String::from("# coprobench gen-ids: 1,500 TCP rules, one content each\n");
    let mut contents = Vec::new();
    for k in 0..1500u32 {
        let len = 4 + r.below(29) as usize;
        let p = printable(&mut r, len);
        let nocase = if r.below(10) == 0 { " nocase;" } else { "" };
        let ports = r.pick(&["any", "any", "80", "[80,443,8080]"]);
        let action = if r.below(20) == 0 { "drop" } else { "alert" };
        let content = netvm_copro::strmatch::format_content(&p);
        rules += &format!("{action} tcp any any -> any {ports} (msg:\"content {k}\"; content:{content};{nocase} sid:{};)\n", 2_000_000 + k);
        contents.push(p);
    }
    std::fs::write(dir.join("ids.rules"), rules).unwrap();
    let mut w = netvm_io::PcapWriter::create(&dir.join("ids.pcap")).unwrap();
    for i in 0..100_000u64 {
        let p = payload(&mut r, 1397, &contents);
        let dport = r.pick(&[80u16, 443, 8080, 25, 53]);
        let src = 0x0a00_0000 | r.below(1 << 16) as u32;
        let mut pkt = Packet::from_bytes(tcp_frame(src, 0xc0a8_0001, 1024 + r.below(60000) as u16, dport, &p));
        pkt.ts = Timestamp::from_nanos(1_704_067_200_000_000_000 + i * 10_000);
        w.write(&pkt).unwrap();
    }
    w.finish().unwrap();
}

/// IPv6 routes shaped like the global table, /32 to /64: `routes6.txt`
/// (the route file), `routes6.bin` (16 address bytes, the length and the
/// `u32` next hop per route, for the C peer), `lpm6_addrs.bin` (10M
/// addresses that hit, 16 bytes each... 1M here, IPv6 lookups are slower)
/// and `router6-64.bin` and `.pcap` (100,000 64-byte IPv6 frames to them, hop limit 64).
fn gen_ipv6(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| die(format!("{}: {e}", dir.display())));
    let mut r = SplitMix64::new(0x1b6);
    let n = 200_000;
    let mut seen = std::collections::HashSet::with_capacity(n);
    let mut routes: Vec<(u128, u8, u32)> = Vec::with_capacity(n);
    // Allocations (/32 and shorter) first, then more specific routes, half
    // of them inside an allocation already listed (nested prefixes).
    while routes.len() < n {
        let len: u8 = match r.below(100) {
            0..=9 => 32,
            10..=19 => 29 + r.below(3) as u8,
            20..=34 => 33 + r.below(15) as u8,
            35..=84 => 48,
            85..=94 => 49 + r.below(15) as u8,
            _ => 64,
        };
        let random = (0x2000u128 << 112) | ((u128::from(r.next_u64()) << 64 | u128::from(r.next_u64())) >> 3);
        let base = if len > 32 && !routes.is_empty() && r.below(2) == 0 {
            let (p, l, _) = routes[r.below(routes.len() as u64) as usize];
            let keep = u128::MAX << (128 - u32::from(l.min(32)));
            (p & keep) | (random & !keep)
        } else {
            random
        };
        let net = base & (u128::MAX << (128 - u32::from(len)));
        if seen.insert((net, len)) {
            routes.push((net, len, r.below(16) as u32));
        }
    }
    let mut text = String::from("# coprobench gen-ipv6: 200,000 routes, /29 to /64\n");
    let mut bin = Vec::with_capacity(n * 21);
    for (net, len, hop) in &routes {
        text += &format!("{}/{len} {hop}\n", std::net::Ipv6Addr::from(*net));
        bin.extend_from_slice(&net.to_be_bytes());
        bin.push(*len);
        bin.extend_from_slice(&hop.to_le_bytes());
    }
    std::fs::write(dir.join("routes6.txt"), text).unwrap();
    std::fs::write(dir.join("routes6.bin"), bin).unwrap();
    let hit = |r: &mut SplitMix64| -> u128 {
        let (net, len, _) = routes[r.below(n as u64) as usize];
        let host = u128::from(r.next_u64()) << 64 | u128::from(r.next_u64());
        net | (host & !(u128::MAX << (128 - u32::from(len))))
    };
    let mut addrs = Vec::with_capacity(16 << 20);
    for _ in 0..1_000_000 {
        addrs.extend_from_slice(&hit(&mut r).to_be_bytes());
    }
    std::fs::write(dir.join("lpm6_addrs.bin"), addrs).unwrap();
    let mut frames = Vec::with_capacity(100_000);
    for _ in 0..100_000 {
        let mut f = vec![0u8; 64];
        f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2]);
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14] = 0x60;
        f[18..20].copy_from_slice(&10u16.to_be_bytes());
        f[20] = 17;
        f[21] = 64;
        f[22..38].copy_from_slice(&(0x2001_0db8u128 << 96 | 1).to_be_bytes());
        f[38..54].copy_from_slice(&hit(&mut r).to_be_bytes());
        frames.push(f);
    }
    write_frames(dir, "router6-64", frames.iter().map(|f| (0u16, f.as_slice())));
    eprintln!("coprobench: IPv6 inputs written to {}", dir.display());
}

/// Lpm6 on `routes6.txt`: build time, memory (the first level and the
/// groups used), one lookup at a time and bulk (32) over `lpm6_addrs.bin`.
fn lpm6(dir: &Path, reps: usize) {
    let text = String::from_utf8(read(dir, "routes6.txt")).unwrap_or_else(|_| die("routes6.txt is not UTF-8".into()));
    let routes = netvm_copro::lpm::parse_routes(&text, netvm_copro::lpm::Family::Ipv6).unwrap_or_else(|e| die(e));
    let raw = read(dir, "lpm6_addrs.bin");
    let addrs: Vec<u128> = raw.chunks_exact(16).map(|c| u128::from_be_bytes(c.try_into().unwrap())).collect();
    let t = Instant::now();
    let mut lpm = netvm_copro::Lpm6::new(1 << 22);
    for r in &routes {
        let std::net::IpAddr::V6(a) = r.addr else { continue };
        lpm.insert(u128::from(a), r.len, r.next_hop).unwrap_or_else(|e| die(format!("{r}: {e:?}")));
    }
    let build = t.elapsed().as_secs_f64();
    let groups = lpm.tbl8_groups_used();
    // A 2^16-entry first level and 256-entry groups of 4-byte entries.
    let bytes = (1u64 << 16) * 4 + u64::from(groups) * 256 * 4;
    println!(
        "{}",
        serde_json::json!({"engine": "netvm-lpm6", "bench": "lpm6", "mode": "build_s", "seconds": round3(build), "routes": routes.len(), "tbl8_groups_used": groups, "table_mib": round3(bytes as f64 / (1u64 << 20) as f64)})
    );
    lookups(&lpm, &addrs, "netvm-lpm6", "lpm6", reps);
}

/// NameFib on `names.txt`: build time, memory, probes per lookup, and the
/// names of `names64.bin` (their Interest at offset 14) looked up one at a
/// time and in bulk, 32 at a time (`NameFib::lookup_bulk`, what the
/// pre-lookup stage does). The check is the sum of next hop + 1 over the
/// names found.
fn names(dir: &Path, reps: usize) {
    use netvm_copro::names::{parse_prefixes, NameFib, NameMatch};
    let text = String::from_utf8(read(dir, "names.txt")).unwrap_or_else(|_| die("names.txt is not UTF-8".into()));
    let routes = parse_prefixes(&text).unwrap_or_else(|e| die(e));
    let t = Instant::now();
    let mut fib = NameFib::with_seed(routes.len().max(1), 0x5eed).unwrap_or_else(|e| die(e));
    for (line, r) in &routes {
        fib.insert(&r.prefix, r.next_hop).unwrap_or_else(|e| die(format!("line {line}: {e}")));
    }
    let build = t.elapsed().as_secs_f64();
    let frames = frames(dir, "names64", false);
    let mut probes = 0u64;
    let answer = |m: NameMatch| match m {
        NameMatch::Found { next_hop, .. } => u64::from(next_hop) + 1,
        _ => 0,
    };
    for f in &frames {
        fib.lookup(&f.data, 14, &mut probes);
    }
    println!(
        "{}",
        serde_json::json!({"engine": "netvm-names", "bench": "names64", "mode": "build_s", "seconds": round3(build), "prefixes": fib.len(),
            "depth": fib.depth(), "table_mib": round3(fib.memory_bytes() as f64 / (1u64 << 20) as f64),
            "probes_per_lookup": round3(probes as f64 / frames.len() as f64)})
    );
    let n = frames.len() as u64;
    let (ns, check) = timed(reps, n, || frames.iter().map(|f| answer(fib.lookup(&f.data, 14, &mut probes))).sum());
    emit("netvm-names", "names64", "single", &ns, n, check);
    let names: Vec<(usize, &[u8])> = frames.iter().map(|f| (14, f.data.as_slice())).collect();
    let mut answers = vec![netvm_copro::names::BulkAnswer::default(); 32];
    let (ns, check) = timed(reps, n, || {
        let mut s = 0;
        for group in names.chunks(32) {
            fib.lookup_bulk(group, &mut answers);
            s += answers[..group.len()].iter().map(|a| answer(a.answer)).sum::<u64>();
        }
        s
    });
    emit("netvm-names", "names64", "bulk", &ns, n, check);
}

/// The inputs of examples/l2-fwd with an `n`-entry table: `l2fwd-N.txt`
/// (the table file: distinct unicast MACs, ports 0..16), `l2fwd-N.keys`
/// (the same for the C peer: 6 key bytes and a `u16` port per entry),
/// `l2fwd64-N.bin` and `.pcap` (100,000 64-byte frames to destinations
/// drawn uniformly from the table) and `l2fwd-N.toml` (the example's manifest with a
/// table of that capacity).
fn gen_l2fwd(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| die(format!("{}: {e}", dir.display())));
    let mut r = SplitMix64::new(0x12f0 ^ n as u64);
    let mut text = String::with_capacity(n * 16);
    let mut keys = Vec::with_capacity(n * 8);
    for h in 0..n as u64 {
        let (m, port) = (host_mac(h), r.below(16) as u16);
        mac_line(&mut text, m, port);
        keys.extend_from_slice(&m);
        keys.extend_from_slice(&port.to_le_bytes());
    }
    std::fs::write(dir.join(format!("l2fwd-{n}.txt")), text).unwrap();
    std::fs::write(dir.join(format!("l2fwd-{n}.keys")), keys).unwrap();
    let mut frames = Vec::with_capacity(100_000);
    for _ in 0..100_000 {
        let mut f = vec![0u8; 64];
        f[0..6].copy_from_slice(&host_mac(r.below(n as u64)));
        f[6..12].copy_from_slice(&host_mac(r.below(n as u64)));
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        frames.push(f);
    }
    write_frames(dir, &format!("l2fwd64-{n}"), frames.iter().map(|f| (0u16, f.as_slice())));
    std::fs::write(dir.join(format!("l2fwd-{n}.toml")), example_manifest("l2-fwd", &["fwd.nil"], n.max(1024))).unwrap();
    eprintln!("coprobench: l2fwd inputs for {n} entries written to {}", dir.display());
}

/// The MAC address of generated host `h`: distinct for every `h` below
/// 2^40 (multiplying by an odd constant is a bijection on u32).
fn host_mac(h: u64) -> [u8; 6] {
    let b = (h as u32).wrapping_mul(0x9e37_79b9).to_be_bytes();
    [0x02, (h >> 32) as u8, b[0], b[1], b[2], b[3]]
}

/// Appends a `table` file line: the MAC as hex, then `value`.
fn mac_line(text: &mut String, mac: [u8; 6], value: u16) {
    for b in mac {
        text.push_str(&format!("{b:02x}"));
    }
    text.push_str(&format!(" {value}\n"));
}

/// The manifest of the example `examples/NAME/app.toml` with its programs
/// `programs` named by absolute paths (so that it runs from another
/// directory) and, where it says `capacity = 1048576`, `capacity` instead.
fn example_manifest(name: &str, programs: &[&str], capacity: usize) -> String {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../examples/{name}/app.toml"));
    let mut manifest = std::fs::read_to_string(&example).unwrap_or_else(|e| die(format!("{}: {e}", example.display())));
    for prog in programs {
        let path = example.with_file_name(prog).canonicalize().unwrap_or_else(|e| die(format!("{prog}: {e}")));
        manifest = manifest.replace(&format!("program = \"{prog}\""), &format!("program = {:?}", path.display().to_string()));
    }
    manifest.replace("capacity = 1048576", &format!("capacity = {capacity}"))
}

/// The learning bridge (examples/l2-bridge) with an `n`-entry table, for
/// the sub-batch sweep at every table size: `bridge-N.txt`, the table of
/// `n` hosts (MAC -> port 1 to 4, loaded before the frames, so that the
/// table is full from the first frame); `bridge64-N.bin` / `.pcap`,
/// 100,000 64-byte IPv4 frames between hosts drawn from all `n` (host h
/// at 10.0.0.0 + h), each sent from its source's port; `bridge-N.toml`, the example's manifest with a
/// table of `n` entries at least.
fn gen_bridge(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| die(format!("{}: {e}", dir.display())));
    let mut r = SplitMix64::new(0xb71d ^ n as u64);
    let port = |h: u64| 1 + (SplitMix64::mix(h) % 4) as u16;
    let mut text = String::with_capacity(n * 24);
    for h in 0..n as u64 {
        mac_line(&mut text, host_mac(h), port(h));
    }
    std::fs::write(dir.join(format!("bridge-{n}.txt")), text).unwrap();
    let frames: Vec<(u16, Vec<u8>)> = (0..100_000)
        .map(|_| {
            let (s, d) = (r.below(n as u64), r.below(n as u64));
            // Each host has an address in 10/8, so that a flow hash (workers
            // with flow distribution) spreads the conversations as it would
            // real traffic; the bridge itself reads only the MACs.
            let ip = |h: u64| 0x0a00_0000 | (h as u32 & 0x00ff_ffff);
            let mut f = ipv4_frame(ip(s), ip(d), 64, 64);
            f[0..6].copy_from_slice(&host_mac(d));
            f[6..12].copy_from_slice(&host_mac(s));
            (port(s), f)
        })
        .collect();
    write_frames(dir, &format!("bridge64-{n}"), frames.iter().map(|(p, f)| (*p, f.as_slice())));
    std::fs::write(dir.join(format!("bridge-{n}.toml")), example_manifest("l2-bridge", &["bridge.nil", "egress.nil"], n.max(1024)))
        .unwrap();
    eprintln!("coprobench: bridge inputs for {n} entries written to {}", dir.display());
}

/// The IPv4 router with `n` routes, for the sub-batch sweep at both table
/// sizes: `routes-N.txt` (shaped as `gen`'s) and `router64-N.bin` /
/// `.pcap`, 100,000 64-byte frames to addresses the routes cover.
fn gen_router(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| die(format!("{}: {e}", dir.display())));
    let mut r = SplitMix64::new(0x7007 ^ n as u64);
    let rt = routes(&mut r, n);
    let mut text = String::with_capacity(n * 20);
    for (net, len, nh) in &rt {
        text += &format!("{}/{len} {nh}\n", std::net::Ipv4Addr::from(*net));
    }
    std::fs::write(dir.join(format!("routes-{n}.txt")), text).unwrap();
    let frames: Vec<Vec<u8>> = (0..100_000)
        .map(|_| {
            let (net, len, _) = r.pick(&rt);
            let host = if len == 32 { 0 } else { r.next_u32() & (u32::MAX >> len) };
            ipv4_frame(0x0a00_0001, net | host, 64, 64)
        })
        .collect();
    write_frames(dir, &format!("router64-{n}"), frames.iter().map(|f| (0u16, f.as_slice())));
    eprintln!("coprobench: router inputs for {n} routes written to {}", dir.display());
}

/// Name forwarding inputs (examples/ndn-router, the paper's NDN
/// application): `names.txt`, 1,000,000 prefixes of 1 to 5 generic
/// components (words of 3 to 9 letters; 20 % of depth 2, 40 % of depth 3,
/// 30 % of depth 4, 10 % of depth 5, each under a stored prefix one
/// shorter, next hops 0 to 15) as a prefix file; `names.bin`, the same for
/// the C peer (`u8` components, `u32` next hop, `u16` length, the
/// components as NDN TLV); `names64.bin`, 100,000 Interests named by a
/// stored prefix and 0 to 2 more components (5 % under no prefix), in
/// frames of at least 64 bytes (and `names64.pcap`); `ndn.toml`, the example's manifest sized
/// for the table.
fn gen_names(dir: &Path) {
    use netvm_copro::names::{encode_name, format_name, Component};
    std::fs::create_dir_all(dir).unwrap_or_else(|e| die(format!("{}: {e}", dir.display())));
    let mut r = SplitMix64::new(0x4e444e);
    let n = 1_000_000;
    let vocab: Vec<Vec<u8>> = (0..50_000).map(|_| (0..3 + r.below(7)).map(|_| b'a' + r.below(26) as u8).collect()).collect();
    let word = |r: &mut SplitMix64| Component { typ: 8, value: vocab[r.below(vocab.len() as u64) as usize].clone() };
    let mut by_depth: Vec<Vec<usize>> = vec![Vec::new(); 6];
    let mut seen = std::collections::HashSet::with_capacity(n);
    let mut prefixes: Vec<(Vec<Component>, u32)> = Vec::with_capacity(n);
    while prefixes.len() < n {
        let depth = if prefixes.len() < 200 {
            1
        } else {
            match r.below(10) {
                0 | 1 => 2,
                2..=5 => 3,
                6..=8 => 4,
                _ => 5,
            }
        };
        let mut p = match by_depth[depth - 1].len() {
            0 if depth > 1 => continue,
            0 => Vec::new(),
            k => prefixes[by_depth[depth - 1][r.below(k as u64) as usize]].0.clone(),
        };
        p.push(word(&mut r));
        if seen.insert(p.clone()) {
            by_depth[depth].push(prefixes.len());
            prefixes.push((p, r.below(16) as u32));
        }
    }
    let mut text = String::from("# coprobench gen-names: 1,000,000 prefixes of 1 to 5 components\n");
    let mut bin = Vec::with_capacity(n * 40);
    for (p, hop) in &prefixes {
        text += &format!("{} {hop}\n", format_name(p));
        let enc = encode_name(p);
        let body = &enc[2..]; // Name TLV type and a one-byte length (names here are short)
        assert!(enc[1] as usize == body.len());
        bin.push(p.len() as u8);
        bin.extend_from_slice(&hop.to_le_bytes());
        bin.extend_from_slice(&(body.len() as u16).to_le_bytes());
        bin.extend_from_slice(body);
    }
    std::fs::write(dir.join("names.txt"), text).unwrap();
    std::fs::write(dir.join("names.bin"), bin).unwrap();
    let mut frames = Vec::with_capacity(100_000);
    let mut total = 0usize;
    for _ in 0..100_000 {
        let mut name = if r.below(20) == 0 { vec![word(&mut r), word(&mut r)] } else { prefixes[r.below(n as u64) as usize].0.clone() };
        for _ in 0..r.below(3) {
            name.push(word(&mut r));
        }
        let mut body = encode_name(&name);
        body.extend_from_slice(&[0x0a, 4]); // Nonce
        body.extend_from_slice(&(r.next_u64() as u32).to_be_bytes());
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0x24, 5, body.len() as u8];
        f.extend_from_slice(&body);
        total += f.len();
        f.resize(f.len().max(64), 0);
        frames.push(f);
    }
    write_frames(dir, "names64", frames.iter().map(|f| (0u16, f.as_slice())));
    std::fs::write(dir.join("ndn.toml"), example_manifest("ndn-router", &["ndn.nil"], 1 << 20)).unwrap();
    eprintln!("coprobench: name inputs written to {} (mean frame before padding {:.1} bytes)", dir.display(), total as f64 / 100_000.0);
}

/// `NAME.bin` (records `u16 port` (bridge only), `u16 len`, bytes) and pcaps (one per port for the bridge).
fn write_frames<'a>(dir: &Path, name: &str, frames: impl Iterator<Item = (u16, &'a [u8])>) {
    let mut bin = Vec::new();
    let mut by_port: std::collections::BTreeMap<u16, Vec<Packet>> = Default::default();
    // The bridge's frames come in on ports 1 to 4: one capture each, and the port in the binary file.
    let bridge = name.starts_with("bridge64");
    for (i, (port, f)) in frames.enumerate() {
        if bridge {
            bin.extend_from_slice(&port.to_le_bytes());
        }
        bin.extend_from_slice(&(f.len() as u16).to_le_bytes());
        bin.extend_from_slice(f);
        let mut p = Packet::from_bytes(f.to_vec());
        p.ts = Timestamp { sec: 1_704_067_200, nsec: (i as u32 % 1_000_000) * 1000 };
        by_port.entry(port).or_default().push(p);
    }
    std::fs::write(dir.join(format!("{name}.bin")), bin).unwrap();
    for (port, pkts) in by_port {
        let file = if bridge { format!("{name}-{port}.pcap") } else { format!("{name}.pcap") };
        let mut w = netvm_io::PcapWriter::create(&dir.join(file)).unwrap();
        for p in &pkts {
            w.write(p).unwrap();
        }
        w.finish().unwrap();
    }
}

// ---------------------------------------------------------------- benches

fn lpm(dir: &Path, reps: usize) {
    let text = String::from_utf8(read(dir, "routes.txt")).unwrap_or_else(|_| die("routes.txt is not UTF-8".into()));
    let routes = netvm_copro::lpm::parse_routes(&text, netvm_copro::lpm::Family::Ipv4).unwrap_or_else(|e| die(e));
    let raw = read(dir, "lpm_addrs.bin");
    let addrs: Vec<u32> = raw.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    let t = Instant::now();
    let mut lpm = Lpm4::new(1 << 16);
    for r in &routes {
        let std::net::IpAddr::V4(a) = r.addr else { continue };
        lpm.insert(u32::from(a), r.len, r.next_hop).unwrap_or_else(|e| die(format!("{r}: {e:?}")));
    }
    let build = t.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({"engine": "netvm-lpm", "bench": "lpm", "mode": "build_s", "seconds": round3(build), "routes": routes.len(), "tbl8_groups_used": lpm.tbl8_groups_used(), "anon_huge_kb": anon_huge_kb()})
    );
    lookups(&lpm, &addrs, "netvm-lpm", "lpm", reps);
}

/// One lookup at a time, then in batches of 32 ([`Lpm::lookup_bulk`](netvm_copro::lpm::Lpm::lookup_bulk)),
/// over `addrs`; the check is the sum of next hop + 1.
fn lookups<A: netvm_copro::lpm::LpmAddress>(lpm: &netvm_copro::lpm::Lpm<A>, addrs: &[A], engine: &str, bench: &str, reps: usize) {
    let n = addrs.len() as u64;
    let (ns, check) = timed(reps, n, || addrs.iter().map(|a| lpm.lookup(*a).map_or(0, |h| u64::from(h) + 1)).sum());
    emit(engine, bench, "single", &ns, n, check);
    let mut out = [None; 32];
    let (ns, check) = timed(reps, n, || {
        let mut s = 0u64;
        for chunk in addrs.chunks(32) {
            lpm.lookup_bulk(chunk, &mut out[..chunk.len()]);
            s += out[..chunk.len()].iter().map(|h| h.map_or(0, |h| u64::from(h) + 1)).sum::<u64>();
        }
        s
    });
    emit(engine, bench, "bulk", &ns, n, check);
}

/// Transparent huge pages backing this process (Linux), in KiB.
fn anon_huge_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("AnonHugePages:")).and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok()).unwrap_or(0)
}

fn hash(dir: &Path, n: usize, reps: usize) {
    let keys = read(dir, &format!("hash_{n}_keys.bin"));
    let look = read(dir, &format!("hash_{n}_lookups.bin"));
    let t = Instant::now();
    let mut table = ExactTable::new(8, 4, n).unwrap_or_else(|e| die(e));
    // All of it at once, as `rte_hash_create` does (and `--load` of a file).
    table.reserve(n);
    for (i, k) in keys.chunks_exact(8).enumerate() {
        table.insert_static(k, &(i as u32).to_be_bytes()).unwrap_or_else(|_| die(format!("table full at {i}")));
    }
    println!(
        "{}",
        serde_json::json!({"engine": "netvm-table", "bench": format!("hash{n}"), "mode": "build_s", "seconds": round3(t.elapsed().as_secs_f64()), "memory_mb": table.memory_bytes() >> 20})
    );
    let value = |v: &[u8]| u64::from(u32::from_be_bytes(v.try_into().unwrap())) + 1;
    let ops = (look.len() / 8) as u64;
    let (ns, check) = timed(reps, ops, || look.chunks_exact(8).map(|k| table.lookup(k).map_or(0, value)).sum());
    emit("netvm-table", &format!("hash{n}"), "single", &ns, ops, check);
    let mut out: Vec<Option<&[u8]>> = vec![None; 32];
    let (ns, check) = timed(reps, ops, || {
        let mut s = 0u64;
        for chunk in look.chunks(32 * 8) {
            let k = chunk.len() / 8;
            table.lookup_bulk_flat(chunk, &mut out[..k]);
            s += out[..k].iter().map(|v| v.map_or(0, value)).sum::<u64>();
        }
        s
    });
    emit("netvm-table", &format!("hash{n}"), "bulk", &ns, ops, check);
}

fn records(raw: &[u8], flags: bool) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        let f = if flags {
            i += 1;
            raw[i - 1]
        } else {
            0
        };
        let len = u16::from_le_bytes([raw[i], raw[i + 1]]) as usize;
        out.push((f, &raw[i + 2..i + 2 + len]));
        i += 2 + len;
    }
    out
}

fn strmatch(dir: &Path, reps: usize) {
    let praw = read(dir, "patterns.bin");
    let patterns: Vec<Pattern> = records(&praw, true)
        .into_iter()
        .enumerate()
        .map(|(i, (f, b))| Pattern { id: i as u32, group: 1, bytes: b.to_vec(), nocase: f & 1 != 0 })
        .collect();
    let raw = read(dir, "payloads.bin");
    let payloads = records(&raw, false);
    let bytes: u64 = payloads.iter().map(|p| p.1.len() as u64).sum();
    let n = payloads.len() as u64;
    for (engine, backend) in [("netvm-strmatch/hyperscan", Backend::Hyperscan), ("netvm-strmatch/aho-corasick", Backend::AhoCorasick)] {
        let mut set = match PatternSet::new(patterns.clone(), backend) {
            Ok(s) => s,
            Err(e) => {
                println!("{}", serde_json::json!({"engine": engine, "bench": "strmatch", "unavailable": e}));
                continue;
            }
        };
        let mut v = Vec::new();
        let (ns, check) = timed(reps, n, || {
            payloads
                .iter()
                .map(|p| {
                    set.scan(1, p.1, &mut v);
                    v.len() as u64
                })
                .sum()
        });
        emit(engine, "strmatch", "all", &ns, n, check);
        gbit(engine, "all", &ns, bytes, n);
        let (ns, check) = timed(reps, n, || payloads.iter().map(|p| u64::from(set.first(1, p.1).is_some())).sum());
        emit(engine, "strmatch", "first", &ns, n, check);
        gbit(engine, "first", &ns, bytes, n);
    }
    // Through the coprocessor interface, from NetIL on the JIT: per packet,
    // search_all over the packet and count the matches in data memory.
    let program = "
.copro sm strmatch
.datasize 4
.ports 1
segment .push
    pop
    push 1
    copro.in sm, 0
    push 0
    copro.in sm, 1
    pktlen
    copro.in sm, 2
    copro.invoke sm, 1
    push 0
    push 0
    dload.32
    copro.out sm, 0
    add
    dstore.32
    ret 0
ends
";
    let module = netil::assemble(program).unwrap_or_else(|e| die(e.to_string())).module;
    let mut manifest = netvm_runtime::Manifest::single(Path::new("strmatch"), &[0], 1, None);
    manifest.netpes[0].module = Some(module);
    let mut file = String::new();
    for p in &patterns {
        let hex: Vec<String> = p.bytes.iter().map(|b| format!("{b:02x}")).collect();
        file += &format!("{} 1 \"|{}|\"{}\n", p.id, hex.join(" "), if p.nocase { " nocase" } else { "" });
    }
    for (engine, backend) in [("netvm-jit+strmatch/hyperscan", "hyperscan"), ("netvm-jit+strmatch/aho-corasick", "aho-corasick")] {
        let mut m = manifest.clone();
        m.netpes[0].copro.insert("sm".into(), [("backend".to_string(), toml::Value::String(backend.into()))].into_iter().collect());
        let mut app = match netvm_runtime::Application::build(&m, &netvm_runtime::JitEngine::default(), &netvm_copro::registry(), None) {
            Ok(a) => a,
            Err(e) => {
                println!("{}", serde_json::json!({"engine": engine, "bench": "strmatch", "unavailable": e.to_string()}));
                continue;
            }
        };
        app.load_table("sm", &file).unwrap_or_else(|e| die(e));
        let mut packets: Vec<Packet> = payloads.iter().map(|p| Packet::from_bytes(p.1.to_vec())).collect();
        let mut verdicts = Vec::new();
        let mut last = 0u64;
        let (ns, check) = timed(reps, n, || {
            for chunk in packets.chunks_mut(64) {
                app.process_batch(chunk, &mut verdicts, &mut |_, _| {});
            }
            let st = app.netpe_state("main").map(|s| u64::from(u32::from_be_bytes(s.data[0..4].try_into().unwrap()))).unwrap_or(0);
            let d = st.wrapping_sub(last) & 0xffff_ffff;
            last = st;
            d
        });
        emit(engine, "strmatch", "all", &ns, n, check);
        gbit(engine, "all", &ns, bytes, n);
    }
}

/// The frames of `NAME.bin` (records: `u16 port` if `with_port`, `u16 len`, bytes) as packets.
fn frames(dir: &Path, name: &str, with_port: bool) -> Vec<Packet> {
    let raw = read(dir, &format!("{name}.bin"));
    let mut out = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        let port = if with_port {
            i += 2;
            u16::from_le_bytes([raw[i - 2], raw[i - 1]])
        } else {
            0
        };
        let len = u16::from_le_bytes([raw[i], raw[i + 1]]) as usize;
        let mut p = Packet::from_bytes(raw[i + 2..i + 2 + len].to_vec());
        p.in_port = port;
        p.ts = Timestamp { sec: 1_704_067_200, nsec: (out.len() as u32 % 1_000_000) * 1000 };
        out.push(p);
        i += 2 + len;
    }
    out
}

/// An example application on the benchmark frames through
/// `Application::process_batch` (the runtime's batch function, batches of
/// 256, no I/O), one line per batching setting: ns per frame, and the
/// check the C peers compute (the sum of port + 1 over forwarded frames;
/// flooded bridge frames count port 9 + 1 once).
fn app(dir: &Path, which: &str, reps: usize, only: &str, rotate: usize) {
    use netvm_bench::linked::Metadata;
    use netvm_jit::link::{BatchMode, Batching, SubBatchTuner};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let l2fwd = which.strip_prefix("l2fwd-");
    let (bench, manifest, frames, load) = match which {
        "router" => (
            "router64".to_string(),
            root.join("examples/ipv4-router/app.toml"),
            frames(dir, "router64", false),
            Some(("routes", "routes.txt".to_string())),
        ),
        "router6" => (
            "router6-64".to_string(),
            root.join("examples/ipv6-router/app.toml"),
            frames(dir, "router6-64", false),
            Some(("routes", "routes6.txt".to_string())),
        ),
        "bridge" => ("bridge64".to_string(), root.join("examples/l2-bridge/app.toml"), frames(dir, "bridge64", true), None),
        "bridge-c" => ("bridge64".to_string(), root.join("benches/apps/bridge-c.toml"), frames(dir, "bridge64", true), None),
        "ndn" => ("names64".to_string(), dir.join("ndn.toml"), frames(dir, "names64", false), Some(("fib", "names.txt".to_string()))),
        _ if which.strip_prefix("bridge-").is_some_and(|n| n.parse::<usize>().is_ok()) => {
            let n = &which["bridge-".len()..];
            (
                format!("bridge64-{n}"),
                dir.join(format!("bridge-{n}.toml")),
                frames(dir, &format!("bridge64-{n}"), true),
                Some(("fib", format!("bridge-{n}.txt"))),
            )
        }
        _ if which.strip_prefix("router-").is_some_and(|n| n.parse::<usize>().is_ok()) => {
            let n = &which["router-".len()..];
            (
                format!("router64-{n}"),
                root.join("examples/ipv4-router/app.toml"),
                frames(dir, &format!("router64-{n}"), false),
                Some(("routes", format!("routes-{n}.txt"))),
            )
        }
        _ if l2fwd.is_some_and(|n| n.parse::<usize>().is_ok()) => {
            let n = l2fwd.unwrap_or_default();
            (
                format!("l2fwd64-{n}"),
                dir.join(format!("l2fwd-{n}.toml")),
                frames(dir, &format!("l2fwd64-{n}"), false),
                Some(("fib", format!("l2fwd-{n}.txt"))),
            )
        }
        _ => die(format!("app: `{which}` is not `router`, `router-N`, `router6`, `bridge`, `bridge-c`, `bridge-N`, `ndn` or `l2fwd-N`")),
    };
    let bench = bench.as_str();
    // `bridge-c` runs on the bridge's frames, beside the same C loop: its
    // own engine name keeps its records apart from the example's.
    let engine_name = if which == "bridge-c" { "netvm-jit/bridge-c" } else { "netvm-jit" };
    let manifest = netvm_runtime::Manifest::load(&manifest).unwrap_or_else(|e| die(e.to_string()));
    let routes = load.as_ref().map(|(_, file)| String::from_utf8(read(dir, file)).unwrap_or_else(|_| die(format!("{file} is not UTF-8"))));
    let load = load.map(|(inst, _)| inst);
    let mut settings: Vec<(String, Batching)> = vec![
        ("off".into(), Batching { mode: BatchMode::Off, sub_batch: None }),
        ("on-auto".into(), Batching { mode: BatchMode::On, sub_batch: None }),
        ("prefetch-auto".into(), Batching { mode: BatchMode::Prefetch, sub_batch: None }),
    ];
    for mode in [BatchMode::Prefetch, BatchMode::On] {
        for size in SubBatchTuner::SIZES.into_iter().filter(|&s| s > 0) {
            settings.push((format!("{}-{size}", mode.name()), Batching { mode, sub_batch: Some(size) }));
        }
    }
    let n = frames.len() as u64;
    // The compiled batch function alone, no runtime between the packets
    // and the code: `linked-SETTING` on descriptors prepared once for the
    // whole trace; `burst-SETTING` on descriptors written burst by burst
    // from the flat arrays the C loops read, as a port writes them (timed;
    // the time once a burst); `records-SETTING` the same with every
    // packet's lengths and time (`Metadata`).
    let loads: Vec<(&str, &str)> = load.zip(routes.as_deref()).into_iter().collect();
    // Fixed sub-batches (`linked-prefetch-32`) when named: their counts
    // of instructions do not depend on the tuner's timing.
    let named = |how: &str, name: &str| only.split(',').any(|o| o.strip_prefix(how).and_then(|o| o.strip_prefix('-')) == Some(name));
    let defaults = |name: &str| matches!(name, "off" | "on-auto" | "prefetch-auto");
    for how in ["linked", "burst", "records"] {
        let by_default = |name: &str| only.is_empty() && how != "records" && defaults(name);
        for (name, batching) in settings.iter().filter(|(name, _)| by_default(name) || named(how, name)) {
            let name = format!("{how}-{name}");
            let mut l = netvm_bench::linked::Linked::build_with(&manifest, netvm_jit::link::LinkMode::Direct, *batching, &loads)
                .unwrap_or_else(|e| die(e));
            let mut descs = netvm_bench::linked::Descs::packed(&frames);
            let pass = |l: &mut netvm_bench::linked::Linked, descs: &mut netvm_bench::linked::Descs| match how {
                "burst" => l.pass_ports_burst(descs, Metadata::PerBurst),
                "records" => l.pass_ports_burst(descs, Metadata::PerPacket),
                _ => l.pass_ports(descs),
            };
            let check = pass(&mut l, &mut descs);
            let mut ns = Vec::with_capacity(reps);
            for _ in 0..reps {
                descs.restore(&frames);
                let t = Instant::now();
                let c = std::hint::black_box(pass(&mut l, &mut descs));
                ns.push(t.elapsed().as_nanos() as f64 / n as f64);
                if !bench.starts_with("bridge64") {
                    assert_eq!(c, check, "two passes gave different answers");
                }
            }
            emit(engine_name, bench, &format!("app-{name}"), &ns, n, check);
            if batching.sub_batch.is_none() && batching.mode != BatchMode::Off {
                eprintln!("coprobench: {bench} {name}: the tuner's sub-batch at the end: {}", l.sub_batch());
            }
        }
    }
    // The runtime's settings in an order rotated by `rotate` (the round),
    // so that no setting is always the first one measured in its process.
    let mut settings: Vec<(String, Batching)> =
        settings.into_iter().filter(|(name, _)| only.is_empty() || only.split(',').any(|o| o == name)).collect();
    if !settings.is_empty() {
        let k = rotate % settings.len();
        settings.rotate_left(k);
    }
    for (name, batching) in settings {
        let engine = netvm_runtime::JitEngine { batching, ..netvm_runtime::JitEngine::default() };
        let mut a =
            netvm_runtime::Application::build(&manifest, &engine, &netvm_copro::registry(), None).unwrap_or_else(|e| die(e.to_string()));
        if let (Some(inst), Some(text)) = (load, &routes) {
            a.load_table(inst, text).unwrap_or_else(|e| die(e));
        }
        let mut packets = frames.clone();
        let mut verdicts = Vec::new();
        let mut pass = |packets: &mut Vec<Packet>| -> u64 {
            let mut check = 0u64;
            for chunk in packets.chunks_mut(256) {
                a.process_batch(chunk, &mut verdicts, &mut |_, _| {});
                for v in &verdicts {
                    check += match v {
                        netvm_vm::graph::Verdict::Output(p) => u64::from(*p) + 1,
                        netvm_vm::graph::Verdict::Fanout { .. } => 10,
                        _ => 0,
                    };
                }
            }
            check
        };
        // A warm-up pass, then `reps` timed ones, each on fresh copies of
        // the frames (the router rewrites TTL and checksum), copied untimed.
        let check = pass(&mut packets);
        let mut ns = Vec::with_capacity(reps);
        for _ in 0..reps {
            for (p, f) in packets.iter_mut().zip(&frames) {
                p.data.copy_from_slice(&f.data);
            }
            let t = Instant::now();
            let c = std::hint::black_box(pass(&mut packets));
            ns.push(t.elapsed().as_nanos() as f64 / n as f64);
            if !bench.starts_with("bridge64") {
                assert_eq!(c, check, "two passes gave different answers");
            }
        }
        emit(engine_name, bench, &format!("app-{name}"), &ns, n, check);
    }
}

fn gbit(engine: &str, mode: &str, ns: &[f64], bytes: u64, n: u64) {
    let per = bytes as f64 * 8.0 / n as f64; // bits per payload
    println!(
        "{}",
        serde_json::json!({"engine": engine, "bench": "strmatch", "mode": format!("{mode}_gbit_s"), "gbit_s_median": round3(per / median(ns)), "avg_payload": round3(bytes as f64 / n as f64)})
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args.get(1).map(PathBuf::from).unwrap_or_else(|| die("usage: coprobench gen|gen-ids|lpm|hash|strmatch DIR [...]".into()));
    let reps = arg(&args, "--reps", 7usize);
    match args[0].as_str() {
        "gen" => gen(&dir, &args),
        "gen-ids" => gen_ids(&dir),
        "gen-ipv6" => gen_ipv6(&dir),
        "gen-names" => gen_names(&dir),
        "names" => names(&dir, reps),
        "lpm6" => lpm6(&dir, reps),
        "gen-bridge" => gen_bridge(&dir, args.get(2).and_then(|s| s.parse().ok()).unwrap_or_else(|| die("gen-bridge DIR N".into()))),
        "gen-router" => gen_router(&dir, args.get(2).and_then(|s| s.parse().ok()).unwrap_or_else(|| die("gen-router DIR N".into()))),
        "gen-l2fwd" => gen_l2fwd(&dir, args.get(2).and_then(|s| s.parse().ok()).unwrap_or_else(|| die("gen-l2fwd DIR N".into()))),
        "lpm" => lpm(&dir, reps),
        "hash" => hash(&dir, args.get(2).and_then(|s| s.parse().ok()).unwrap_or_else(|| die("hash DIR N".into())), reps),
        "strmatch" => strmatch(&dir, reps),
        "app" => {
            app(&dir, args.get(2).map_or("", String::as_str), reps, &arg(&args, "--only", String::new()), arg(&args, "--rotate", 0usize))
        }
        other => die(format!("unknown subcommand `{other}`")),
    }
}
