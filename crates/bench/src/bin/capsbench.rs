//! `capsbench`: what capsules cost on a netvm node (issue 18's benchmarks).
//!
//! ```text
//! capsbench [--reps R] [--iters N] [--capsule NAME] [--stage STAGE]
//! ```
//!
//! Prints one JSON object per line:
//!
//! - `bench: "capsule"`: ns per capsule through `CapsuleNode::process` (find
//!   the capsule, spend a hop, verify the code in one pass, check the bound,
//!   run it on the interpreter, write back, fix the UDP checksum) for the
//!   examples of examples/capsules (count, collect, path, hopcount), two
//!   16-instruction capsules (ALU only; and with a store lookup) and a
//!   64-instruction one (ALU only); and, apart,
//!   the verifier alone and the interpreter alone on the verified code;
//! - `bench: "ess"`: ns per store lookup against the length of the chain the
//!   key is found at (WASP's Table 2), and per insert;
//! - `bench: "flood"`: ns per capsule through the node when every capsule
//!   carries a program it has not seen (4,096 programs, a cache of 1,024);
//! - `bench: "carrier"`: ns per capsule through the node (baseline tier)
//!   for the node counter (`nodes`) and `count` in each carrier they fit
//!   (UDP, IPv4 option, IPv6 destination option), the frame restored
//!   before each run.
//!
//! `capsbench gen-mixed DIR` writes the mixed stream of capsules and
//! ordinary packets the whole-command benchmark runs (see [`gen_mixed`]).
//!
//! `--stage` keeps the figures of one stage (`node`, `interpret`, `baseline`,
//! ...; `ess`, `carrier`) and skips the rest, so a profiler sees one loop.
//!
//! Each figure: the median (and minimum) over `--reps` repetitions of
//! `--iters` operations, after one untimed repetition.

use std::time::Instant;

use netvm_capsule::build::{build, Built};
use netvm_capsule::profile::{CapsuleCode, CostModel, Verifier};
use netvm_capsule::tier::{compile_with, Compiler, TierPolicy};
use netvm_capsule::wire::{self, ethernet_frame, ethernet_ipv4_frame, Carrier, FrameSpec, Link, CAPSULE_PORT};
use netvm_capsule::{CapsuleNode, Dialect, NodeConfig, Verdict};
use netvm_copro::ess::{Ess, Visibility};
use netvm_vm::{Limits, PeState, Timestamp, XbView};

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    netvm_bench::args::flag("capsbench", args, name, default)
}

fn die(msg: String) -> ! {
    netvm_bench::args::die("capsbench", &msg)
}

/// ns per operation of each repetition (after a warm-up one).
fn time(reps: usize, iters: u64, mut op: impl FnMut(u64)) -> Vec<f64> {
    for i in 0..iters {
        op(i);
    }
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            for i in 0..iters {
                op(i);
            }
            t.elapsed().as_nanos() as f64 / iters as f64
        })
        .collect()
}

fn report(fields: serde_json::Value, ns: &[f64]) {
    let mut o = fields;
    let min = ns.iter().copied().fold(f64::INFINITY, f64::min);
    o["ns_median"] = serde_json::json!(netvm_bench::measure::round3(netvm_bench::measure::median(ns)));
    o["ns_min"] = serde_json::json!(netvm_bench::measure::round3(min));
    o["reps"] = serde_json::json!(ns.len());
    println!("{o}");
}

fn capsules() -> Vec<(String, Built, Vec<u8>)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/capsules");
    let mut out = Vec::new();
    let key = 0x00c0_ffee_u64.to_be_bytes();
    for (name, scratch) in [
        ("count", [&key[..], &u32::MAX.to_be_bytes()].concat()),
        ("collect", [&0x00c0_11ec_u64.to_be_bytes()[..], &1_000_000u32.to_be_bytes(), &7u32.to_be_bytes()].concat()),
        ("path", vec![]),
        ("hopcount", vec![]),
    ] {
        let src = std::fs::read_to_string(format!("{dir}/{name}.nil")).unwrap_or_else(|e| die(format!("{dir}/{name}.nil: {e}")));
        out.push((name.to_string(), build(&src, None, false).unwrap_or_else(|e| die(format!("{name}: {e}"))), scratch));
    }
    // 16 instructions of arithmetic on the scratchpad, and 16 with one store lookup.
    let alu =
        "push 0\n iload.32\n push 3\n mul\n push 7\n add\n dup\n push 5\n shr\n xor\n push 0\n swap\n istore.32\n push 1\n pop\n ret 0\n";
    let ess = "push 0\n iload.32\n copro.in ess, 0\n push 4\n iload.32\n copro.in ess, 1\n copro.invoke ess, 0\n copro.out ess, 0\n jz no\n push 1\n pop\n nop\n nop\n nop\n ret 0\nno:\n ret 0\n";
    // 64 instructions of arithmetic (the issue's size for the baseline
    // compiler's goal): the 16 four times over, one store at the end.
    let alu64 = format!(
        "push 0\n iload.32\n{}push 0\n swap\n istore.32\n push 1\n pop\n ret 0\n",
        " push 3\n mul\n push 7\n add\n dup\n push 5\n shr\n xor\n push 0x9e37\n xor\n push 1\n shl\n push 11\n sub\n".repeat(4)
    );
    for (name, body) in [("alu16", alu), ("ess16", ess), ("alu64", alu64.as_str())] {
        let src = format!(".copro ess ess\n.copro env env\n.infosize 8\n.ports 2\nsegment .push\n{body}ends\n");
        out.push((name.to_string(), build(&src, None, false).unwrap_or_else(|e| die(format!("{name}: {e}"))), key.to_vec()));
    }
    out
}

/// `capsbench gen-mixed DIR [--packets N] [--percent P]`: a routing table
/// (`routes.txt`, 1,000 routes) and two captures of N 64-to-239-byte
/// frames to routed destinations: `ordinary.pcap`, and `mixed.pcap`, the
/// same with P % of the frames replaced by capsules (count, collect, path,
/// hopcount in turn; one flow each, so that a flow's capsules carry the
/// same code).
fn gen_mixed(dir: &std::path::Path, args: &[String]) {
    use netvm_traffic::apps::{route_file, router_trace, routes4};
    use netvm_traffic::SplitMix64;
    let n: usize = arg(args, "--packets", 100_000);
    let percent: u64 = arg(args, "--percent", 20);
    std::fs::create_dir_all(dir).unwrap_or_else(|e| die(format!("{}: {e}", dir.display())));
    let mut r = SplitMix64::new(18);
    let routes = routes4(&mut r, 1000, 16);
    std::fs::write(dir.join("routes.txt"), route_file(&routes)).unwrap_or_else(|e| die(e.to_string()));
    let ordinary = router_trace(&mut r, &routes, n);
    let caps = capsules();
    let write = |name: &str, pkts: &[netvm_vm::Packet]| {
        let mut w = netvm_io::PcapWriter::create(&dir.join(name)).unwrap_or_else(|e| die(e.to_string()));
        for p in pkts {
            w.write(p).unwrap_or_else(|e| die(e.to_string()));
        }
        w.finish().unwrap_or_else(|e| die(e.to_string()));
    };
    write("ordinary.pcap", &ordinary);
    let mut mixed = ordinary.clone();
    let mut k = 0usize;
    for (i, p) in mixed.iter_mut().enumerate() {
        if (i as u64 * 7919) % 100 >= percent {
            continue;
        }
        let (_, built, scratch) = &caps[k % 4];
        k += 1;
        let mut h = built.header;
        h.hops = 16;
        // To the ordinary frame's destination, so that it is routed alike.
        let dst: [u8; 4] = p.data.get(30..34).and_then(|d| d.try_into().ok()).unwrap_or([10, 0, 0, 1]);
        let frame = ethernet_ipv4_frame(
            [192, 0, 2, 1 + (k % 4) as u8],
            dst,
            4000 + (k % 4) as u16,
            CAPSULE_PORT,
            64,
            &built.encode(&h, scratch, b""),
        );
        p.wire_len = frame.len() as u32;
        p.data = frame;
    }
    write("mixed.pcap", &mixed);
    eprintln!("capsbench: {} frames, {k} of them capsules, in {}", mixed.len(), dir.display());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("gen-mixed") {
        let dir = args.get(1).unwrap_or_else(|| die("gen-mixed DIR".into()));
        gen_mixed(std::path::Path::new(dir), &args[2..]);
        return;
    }
    let reps: usize = arg(&args, "--reps", 7);
    let iters: u64 = arg(&args, "--iters", 200_000);
    let costs = CostModel::default();
    let only: String = arg(&args, "--capsule", String::new());
    let stage: String = arg(&args, "--stage", String::new());
    let wants = |s: &str| stage.is_empty() || stage == s;
    for (name, built, scratch) in capsules().into_iter().filter(|c| only.is_empty() || c.0 == only) {
        let mut h = built.header;
        h.hops = 255;
        let frame = ethernet_ipv4_frame([192, 0, 2, 1], [198, 51, 100, 1], 4000, CAPSULE_PORT, 64, &built.encode(&h, &scratch, b""));
        let l = wire::locate(&frame, Link::Ethernet, CAPSULE_PORT).unwrap_or_else(|e| die(format!("{name}: {e:?}"))).unwrap();
        let (sr, hops_at) = (l.scratch(), l.capsule + 12);
        let insns = {
            let mut out = CapsuleCode::default();
            Verifier::default().verify(&frame[l.code()], h.ingress, h.dialect(), &costs, &mut out).unwrap();
            out.insns
        };
        // The whole node, each tier: the code verified once and cached,
        // then interpreted or run natively.
        for (stage, tier) in
            [("node", TierPolicy::Interpret), ("node-baseline", TierPolicy::Baseline), ("node-cranelift", TierPolicy::Cranelift)]
        {
            if !wants(stage) {
                continue;
            }
            let cfg = NodeConfig { tier, ..NodeConfig::default() };
            let mut node = CapsuleNode::new(cfg, Ess::new(1 << 16, 10_000_000_000, 8, Some(1)).unwrap());
            let mut f = frame.clone();
            let mut verdict = Verdict::Ordinary;
            let ns = time(reps, iters, |i| {
                f[hops_at] = 255;
                f[sr.clone()].copy_from_slice(&frame[sr.clone()]);
                verdict = node.process(&mut f, Timestamp { sec: i / 1_000_000, nsec: 0 }, 1);
            });
            let fields = serde_json::json!({"bench": "capsule", "capsule": name, "stage": stage, "instructions": insns, "code_bytes": built.code.len(), "verdict": format!("{verdict:?}")});
            report(fields, &ns);
        }
        // Compiling it with each compiler (the native tiers' cost).
        for (stage, compiler, n) in
            [("compile-cranelift", Compiler::Cranelift, reps.max(5)), ("compile-baseline", Compiler::Baseline, reps.max(5) * 20)]
        {
            if !wants(stage) {
                continue;
            }
            let ns: Vec<f64> = (0..n)
                .map(|_| {
                    let t = Instant::now();
                    std::hint::black_box(
                        compile_with(compiler, &frame[l.code()], h.ingress, &costs).unwrap_or_else(|e| die(format!("{name}: {e}"))),
                    );
                    t.elapsed().as_nanos() as f64
                })
                .collect();
            report(serde_json::json!({"bench": "capsule", "capsule": name, "stage": stage, "instructions": insns}), &ns);
        }
        // The verifier alone.
        let mut v = Verifier::default();
        let mut code = CapsuleCode::default();
        v.verify(&frame[l.code()], h.ingress, h.dialect(), &costs, &mut code).unwrap();
        if wants("verify") {
            let ns = time(reps, iters, |_| {
                v.verify(&frame[l.code()], h.ingress, h.dialect(), &costs, &mut code).unwrap();
            });
            report(serde_json::json!({"bench": "capsule", "capsule": name, "stage": "verify", "instructions": insns}), &ns);
        }
        // The interpreter alone on the verified code.
        let mut state = PeState {
            data: Vec::new(),
            copros: vec![Box::new(Ess::new(1 << 16, 10_000_000_000, 8, Some(1)).unwrap()), Box::new(netvm_capsule::Env::default())],
            scratch: Vec::new(),
            budget_used: 0,
        };
        let mut packet = frame[l.net..l.end].to_vec();
        let mut sp = frame[sr.clone()].to_vec();
        let limits = Limits { budget: 1 << 20 };
        let n = sp.len();
        if wants("interpret") {
            let ns = time(reps, iters, |i| {
                sp.copy_from_slice(&frame[sr.clone()]);
                let mut xb =
                    XbView { packet: &mut packet, wire_len: 0, ts: Timestamp { sec: i / 1_000_000, nsec: 0 }, seq: 0, info: &mut sp };
                std::hint::black_box(netvm_interp::run_prepared(&code.prepared, &mut state, &mut xb, 1, None, &limits, n, 2));
            });
            report(
                serde_json::json!({"bench": "capsule", "capsule": name, "stage": "interpret", "instructions": insns, "dialect": if h.dialect() == Dialect::Snap { "snap" } else { "wasp" }}),
                &ns,
            );
        }
        // The native code alone on the same state.
        if wants("cranelift") {
            let native = netvm_capsule::tier::compile(&frame[l.code()], h.ingress, &costs).unwrap_or_else(|e| die(format!("{name}: {e}")));
            let ns = time(reps, iters, |i| {
                sp.copy_from_slice(&frame[sr.clone()]);
                let mut xb =
                    XbView { packet: &mut packet, wire_len: 0, ts: Timestamp { sec: i / 1_000_000, nsec: 0 }, seq: 0, info: &mut sp };
                std::hint::black_box(native.push(&mut state, &mut xb, 1, &limits));
            });
            report(serde_json::json!({"bench": "capsule", "capsule": name, "stage": "cranelift", "instructions": insns}), &ns);
        }
        // The baseline compiler's code alone.
        if wants("baseline") {
            let base =
                netvm_capsule::baseline::compile(&frame[l.code()], h.ingress, &costs).unwrap_or_else(|e| die(format!("{name}: {e}")));
            let ns = time(reps, iters, |i| {
                sp.copy_from_slice(&frame[sr.clone()]);
                let mut xb =
                    XbView { packet: &mut packet, wire_len: 0, ts: Timestamp { sec: i / 1_000_000, nsec: 0 }, seq: 0, info: &mut sp };
                std::hint::black_box(netvm_vm::PeCode::push(&*base, &mut state, &mut xb, 1, &limits));
            });
            report(serde_json::json!({"bench": "capsule", "capsule": name, "stage": "baseline", "instructions": insns}), &ns);
        }
    }
    if wants("flood") {
        flood(reps, iters);
    }
    if wants("ess") {
        store(reps, iters);
    }
    if wants("carrier") {
        carriers(reps, iters);
    }
}

/// A flood of programs never seen before: 4,096 distinct 16-instruction
/// capsules in turn through a node whose code cache holds 1,024, so that
/// every capsule is a miss (verified, cached, the least recently used
/// program evicted) and then interpreted: what a sender who varies the code
/// makes a node spend per capsule.
fn flood(reps: usize, iters: u64) {
    let frames: Vec<Vec<u8>> = (0..4096u32)
        .map(|k| {
            let src = format!(
                ".copro ess ess\n.copro env env\n.infosize 8\n.ports 2\nsegment .push\n push 0\n iload.32\n push {k}\n mul\n push 7\n add\n dup\n push 5\n shr\n xor\n push 0\n swap\n istore.32\n push 1\n pop\n ret 0\nends\n"
            );
            let built = build(&src, None, false).unwrap_or_else(|e| die(format!("flood: {e}")));
            let mut h = built.header;
            h.hops = 255;
            ethernet_ipv4_frame([192, 0, 2, 1], [198, 51, 100, 1], 4000, CAPSULE_PORT, 64, &built.encode(&h, &[0; 8], b""))
        })
        .collect();
    let cfg = NodeConfig { tier: TierPolicy::Interpret, code_cache: 1024, ..NodeConfig::default() };
    let mut node = CapsuleNode::new(cfg, Ess::new(1 << 16, 10_000_000_000, 8, Some(1)).unwrap());
    let mut f = frames[0].clone();
    let mut verdict = Verdict::Ordinary;
    let ns = time(reps, iters, |i| {
        let src = &frames[i as usize % frames.len()];
        f.copy_from_slice(src);
        verdict = node.process(&mut f, Timestamp { sec: i / 1_000_000, nsec: 0 }, 1);
    });
    let hits = node.code_cache().stats().hits;
    report(
        serde_json::json!({"bench": "flood", "programs": frames.len(), "code_cache": 1024, "cache_hits": hits, "verdict": format!("{verdict:?}")}),
        &ns,
    );
}

/// The store: lookups of the k-th key of one chain (keys aimed at one
/// bucket of a store with a known hash key), and inserts.
fn store(reps: usize, iters: u64) {
    let mut ess = Ess::new(1 << 20, 3_600_000_000_000, 8, Some(42)).unwrap();
    let probe = Ess::new(1 << 20, 3_600_000_000_000, 8, Some(42)).unwrap();
    let target = probe.bucket_of(0);
    let chain: Vec<u64> = (0u64..).filter(|&k| probe.bucket_of(k) == target).take(8).collect();
    for &k in &chain {
        ess.put(k, &[1; 32], Visibility::Public, 0).unwrap();
    }
    // Fill the rest of the store with 500k other keys, so that chains are
    // spread over memory as in a busy store.
    for k in 1_000_000_000u64..1_000_500_000 {
        let _ = ess.put(k, &[2; 32], Visibility::Public, 0);
    }
    for (depth, &k) in chain.iter().enumerate() {
        let ns = time(reps, iters, |_| {
            std::hint::black_box(ess.get(k, 1));
        });
        report(serde_json::json!({"bench": "ess", "op": "get", "chain_position": depth + 1}), &ns);
    }
    let mut next = 2_000_000_000u64;
    let mut fresh = Ess::new(1 << 22, 3_600_000_000_000, 8, None).unwrap();
    let ns = time(reps, iters.min(400_000) / 2, |_| {
        next += 1;
        let _ = std::hint::black_box(fresh.put(next, &[3; 32], Visibility::Public, 0));
    });
    report(serde_json::json!({"bench": "ess", "op": "put_new"}), &ns);
}

/// The node (baseline tier) on the same capsule in each carrier it fits.
fn carriers(reps: usize, iters: u64) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/capsules");
    let count_scratch = [&0x00c0_ffee_u64.to_be_bytes()[..], &u32::MAX.to_be_bytes()].concat();
    for (name, scratch) in [("nodes", vec![0u8]), ("count", count_scratch)] {
        let src = std::fs::read_to_string(format!("{dir}/{name}.nil")).unwrap_or_else(|e| die(format!("{dir}/{name}.nil: {e}")));
        let built = build(&src, None, false).unwrap_or_else(|e| die(format!("{name}: {e}")));
        let mut h = built.header;
        h.hops = 255;
        let capsule = built.encode(&h, &scratch, b"");
        for (label, carrier) in [("udp", Carrier::Udp), ("ipv4-option", Carrier::Ipv4Option), ("ipv6-option", Carrier::Ipv6Option)] {
            let (src, dst): (std::net::IpAddr, std::net::IpAddr) = match carrier {
                Carrier::Ipv6Option => ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap()),
                _ => ("192.0.2.1".parse().unwrap(), "198.51.100.1".parse().unwrap()),
            };
            let port = if carrier == Carrier::Udp { CAPSULE_PORT } else { 9 };
            let spec = FrameSpec { src, dst, sport: 4000, port, ttl: 64, carrier };
            // A capsule too large for an IPv4 option is not measured there.
            let Ok(frame) = ethernet_frame(&spec, &capsule, b"") else { continue };
            let cfg = NodeConfig { tier: TierPolicy::Baseline, ..NodeConfig::default() };
            let mut node = CapsuleNode::new(cfg, Ess::new(1 << 16, 10_000_000_000, 8, Some(1)).unwrap());
            let mut f = frame.clone();
            let mut verdict = Verdict::Ordinary;
            let ns = time(reps, iters, |i| {
                f.copy_from_slice(&frame);
                verdict = node.process(&mut f, Timestamp { sec: i / 1_000_000, nsec: 0 }, 1);
            });
            let fields = serde_json::json!({"bench": "carrier", "capsule": name, "carrier": label, "frame_bytes": frame.len(), "verdict": format!("{verdict:?}")});
            report(fields, &ns);
        }
    }
}
