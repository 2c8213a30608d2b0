//! The JIT against the reference interpreter: generated programs × generated
//! packets, and real programs × real captures. Everything a program can
//! observably do must be identical: outcome (port, drop, fault kind), packet
//! bytes, info memory, data memory and coprocessor state after every packet.
//!
//! CI runs 2,200 programs × 50 packets (at least 100,000 cases: programs
//! whose `.init` faults run no packet) plus the real
//! programs); `NETVM_DIFF_PROGRAMS=N` runs N programs, `NETVM_DIFF_SEED=S`
//! changes the seed. `fuzz/fuzz_targets/jit_differential.rs` does the same
//! without end.

use netvm_fuzzgen::arbitrary::Unstructured;
use netvm_fuzzgen::{generate_packets, generate_program, observe, GenConfig};
use netvm_interp::InterpCode;
use netvm_jit::{JitCode, JitOptions};
use netvm_traffic::SplitMix64;
use netvm_vm::{Limits, Packet};

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Runs one program on both engines and returns a description of the first difference.
fn compare(module: &netil::Module, packets: &[Packet], limits: &Limits, opts: JitOptions) -> Result<usize, String> {
    let v = netvm_verify::verify(module).map_err(|e| format!("generated program does not verify: {e}"))?;
    let interp = InterpCode::new(&v);
    let jit = JitCode::compile_with(&v, opts).map_err(|e| format!("JIT compilation failed: {e}"))?;
    let (ia, io) = observe(&interp, module, packets, limits);
    let (ja, jo) = observe(&jit, module, packets, limits);
    if ia != ja {
        return Err(format!(".init: interpreter {ia}, JIT {ja}"));
    }
    for (k, (a, b)) in io.iter().zip(&jo).enumerate() {
        if a != b {
            let field = if a.outcome != b.outcome {
                format!("outcome: interpreter {}, JIT {}", a.outcome, b.outcome)
            } else if a.packet != b.packet {
                "packet bytes differ".to_string()
            } else if a.info != b.info {
                "info memory differs".to_string()
            } else if a.data != b.data {
                "data memory differs".to_string()
            } else {
                format!("coprocessor state: {:?} vs {:?}", a.copros, b.copros)
            };
            return Err(format!(
                "packet {k} ({} bytes, wire {}): {field}\npacket: {}",
                packets[k].data.len(),
                packets[k].wire_len,
                hex(&packets[k].data)
            ));
        }
    }
    assert_eq!(io.len(), jo.len());
    Ok(io.len())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Generated programs and packets, each compared on both engines; the JIT
/// compiles with `opts`.
fn generated(programs: u64, seed: u64, opts: JitOptions) -> usize {
    let per_program = 50;
    let mut rng = SplitMix64(seed);
    let cfg = GenConfig::default();
    let limits = Limits { budget: 4000 };
    let mut cases = 0usize;
    let mut failures = Vec::new();
    for p in 0..programs {
        let prog_bytes = rng.bytes(4096);
        let pkt_bytes = rng.bytes(per_program * 160);
        let Ok(g) = generate_program(&mut Unstructured::new(&prog_bytes), &cfg) else { continue };
        let Ok(packets) = generate_packets(&mut Unstructured::new(&pkt_bytes), per_program) else { continue };
        match compare(&g.module, &packets, &limits, opts) {
            Ok(n) => cases += n,
            Err(e) => {
                failures.push(format!("program {p} (seed {seed:#x}):\n{e}\n{}", g.listing));
                if failures.len() >= 3 {
                    break;
                }
            }
        }
    }
    println!("{programs} programs, {cases} cases compared");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    cases
}

#[test]
fn generated_programs_and_packets() {
    let programs = env_num("NETVM_DIFF_PROGRAMS", 2200);
    let seed = env_num("NETVM_DIFF_SEED", 0x6e65_7476_6d00);
    let cases = generated(programs, seed, JitOptions::default());
    if programs >= 2200 {
        assert!(cases >= 100_000, "only {cases} cases");
    }
}

/// The same with Cranelift's single-pass register allocator on every
/// function (by default only on huge ones: `JitOptions::fast_regalloc_insts`).
#[test]
fn generated_programs_and_packets_single_pass_regalloc() {
    let programs = env_num("NETVM_DIFF_PROGRAMS", 2200) / 4;
    let seed = env_num("NETVM_DIFF_SEED", 0x6e65_7476_6d00) ^ 0x7370;
    let cases = generated(programs, seed, JitOptions { fast_regalloc_insts: 0, ..JitOptions::default() });
    if programs >= 550 {
        assert!(cases >= 20_000, "only {cases} cases");
    }
}

#[test]
fn examples_and_test_programs_on_real_captures() {
    let root = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let mut packets: Vec<Packet> = netvm_io::read_capture(&root.join("examples/traces/mixed.pcap"), 0).0;
    if let Ok(rd) = std::fs::read_dir(root.join("../shared/corpus/tcpdump-tests")) {
        let mut files: Vec<_> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for f in files {
            packets.extend(netvm_io::read_capture(&f, 0).0.into_iter().take(20));
        }
    }
    // Truncated copies: captured length shorter than the wire length.
    let truncated: Vec<Packet> =
        packets.iter().take(500).map(|p| Packet { data: p.data[..p.data.len() / 2].to_vec(), ..p.clone() }).collect();
    packets.extend(truncated);
    let mut programs: Vec<std::path::PathBuf> = ["examples/fig2-filter", "examples/classifier", "tests/programs"]
        .iter()
        .flat_map(|d| std::fs::read_dir(root.join(d)).unwrap().filter_map(|e| e.ok().map(|e| e.path())))
        .filter(|p| p.extension().is_some_and(|x| x == "nil"))
        .collect();
    programs.sort();
    let limits = Limits::default();
    let mut cases = 0;
    for p in &programs {
        let src = std::fs::read_to_string(p).unwrap();
        let m = netil::assemble(&src).unwrap().module;
        if netvm_verify::verify(&m).is_err() {
            continue; // tests/programs may hold deliberately rejected listings
        }
        match compare(&m, &packets, &limits, JitOptions::default()) {
            Ok(n) => cases += n,
            Err(e) => panic!("{}: {e}", p.display()),
        }
    }
    println!("{} programs × {} packets = {cases} cases", programs.len(), packets.len());
    assert!(cases > 10_000);
}

/// `csum` is compiled inline (32-bit words, then the odd half-word and
/// byte): every length from 0 to 70 at every start offset from 0 to 3, on
/// random bytes and on bytes that make the sum carry the most (all 0xff).
#[test]
fn inline_checksum_of_every_length_and_alignment() {
    let mut r = SplitMix64::new(0xc5);
    for fill in [None, Some(0xffu8), Some(0u8)] {
        let bytes: Vec<u8> = (0..80).map(|_| fill.unwrap_or(r.below(256) as u8)).collect();
        for off in 0..4u32 {
            for len in 0..=70u32 {
                let src = format!(".infosize 4\nsegment .push\n    pop\n    push 0\n    push {off}\n    push {len}\n    csum pkt\n    istore.32\n    ret 0\nends\n");
                let module = netil::assemble(&src).expect("assembles").module;
                let packets = [Packet::from_bytes(bytes.clone())];
                compare(&module, &packets, &Limits::default(), JitOptions::default())
                    .unwrap_or_else(|e| panic!("csum of {len} bytes at {off} ({fill:?}): {e}"));
            }
        }
    }
}
