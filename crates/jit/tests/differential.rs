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

use netvm_fuzzgen::{compare_generated, compare_real, first_difference, observe};
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
    match first_difference(&io, &jo, packets, "JIT") {
        Some(e) => Err(e),
        None => Ok(io.len()),
    }
}

/// Generated programs and packets, each compared on both engines; the JIT
/// compiles with `opts`.
fn generated(programs: u64, seed: u64, opts: JitOptions) -> usize {
    let limits = Limits { budget: 4000 };
    let cases = compare_generated(programs, seed, |m, packets| compare(m, packets, &limits, opts)).unwrap_or_else(|e| panic!("{e}"));
    println!("{programs} programs, {cases} cases compared");
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
    let cases = compare_real(&root, |m, packets| compare(m, packets, &Limits::default(), JitOptions::default()));
    assert!(cases > 10_000);
}

/// `csum` is compiled inline (8-byte little-endian steps, then 4, 2 and 1
/// bytes of tail, the sum byte-swapped at the end; 20 bytes without the
/// loop): every length from 0 to 70 at every start offset from 0 to 3, on
/// random bytes and on bytes that make the sum carry the most (all 0xff),
/// the length a constant (the code folds it) and computed from the packet's.
#[test]
fn inline_checksum_of_every_length_and_alignment() {
    let mut r = SplitMix64::new(0xc5);
    for fill in [None, Some(0xffu8), Some(0u8)] {
        let bytes: Vec<u8> = (0..80).map(|_| fill.unwrap_or(r.below(256) as u8)).collect();
        for off in 0..4u32 {
            for len in 0..=70u32 {
                let constant = format!("push {len}");
                let computed = format!("pktlen\n    push {off}\n    sub");
                for (how, length, packet) in [("constant", constant, &bytes[..]), ("computed", computed, &bytes[..(off + len) as usize])] {
                    let src = format!(".infosize 4\nsegment .push\n    pop\n    push 0\n    push {off}\n    {length}\n    csum pkt\n    istore.32\n    ret 0\nends\n");
                    let module = netil::assemble(&src).expect("assembles").module;
                    let packets = [Packet::from_bytes(packet.to_vec())];
                    compare(&module, &packets, &Limits::default(), JitOptions::default())
                        .unwrap_or_else(|e| panic!("csum of {len} bytes ({how}) at {off} ({fill:?}): {e}"));
                }
            }
        }
    }
}
