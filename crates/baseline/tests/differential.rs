//! The baseline compiler against the reference interpreter: generated
//! programs × generated packets, and real programs × real captures.
//! Everything a program can observably do must be identical: outcome (port,
//! drop, fault kind), packet bytes, info memory, data memory, coprocessor
//! state after every packet, and the budget used.
//!
//! CI runs 2,200 programs × 50 packets; `NETVM_DIFF_PROGRAMS=N` runs N
//! programs, `NETVM_DIFF_SEED=S` changes the seed.
#![cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]

use netvm_baseline::BaselineCode;
use netvm_fuzzgen::{compare_generated, compare_real, first_difference, new_state, observe};
use netvm_interp::InterpCode;
use netvm_vm::{ExchangeBuffer, Limits, Packet, PeCode};

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Budget used by `code` over all of `packets` (after `.init`).
fn budget_used(code: &dyn PeCode, module: &netil::Module, packets: &[Packet], limits: &Limits) -> u64 {
    let mut state = new_state(module);
    if code.init(&mut state, limits) != netvm_vm::Outcome::Exit {
        return state.budget_used;
    }
    for p in packets {
        let mut xb = ExchangeBuffer::new(p.clone(), module.info_size as usize);
        code.push(&mut state, &mut xb.view(), p.in_port, limits);
    }
    state.budget_used
}

/// Runs one program on both engines and returns a description of the first difference.
fn compare(module: &netil::Module, packets: &[Packet], limits: &Limits) -> Result<usize, String> {
    let v = netvm_verify::verify(module).map_err(|e| format!("generated program does not verify: {e}"))?;
    let interp = InterpCode::new(&v);
    let base = BaselineCode::compile(&v).map_err(|e| format!("baseline compilation failed: {e}"))?;
    let (ia, io) = observe(&interp, module, packets, limits);
    let (ba, bo) = observe(&base, module, packets, limits);
    if ia != ba {
        return Err(format!(".init: interpreter {ia}, baseline {ba}"));
    }
    if let Some(e) = first_difference(&io, &bo, packets, "baseline") {
        return Err(e);
    }
    let (bi, bb) = (budget_used(&interp, module, packets, limits), budget_used(&base, module, packets, limits));
    if bi != bb {
        return Err(format!("budget used: interpreter {bi}, baseline {bb}"));
    }
    Ok(io.len())
}

#[test]
fn generated_programs_and_packets() {
    let programs = env_num("NETVM_DIFF_PROGRAMS", 2200);
    let seed = env_num("NETVM_DIFF_SEED", 0x6261_7365_6c69);
    let limits = Limits { budget: 4000 };
    let cases = compare_generated(programs, seed, |m, packets| compare(m, packets, &limits)).unwrap_or_else(|e| panic!("{e}"));
    println!("{programs} programs, {cases} cases compared");
    if programs >= 2200 {
        assert!(cases >= 100_000, "only {cases} cases");
    }
}

#[test]
fn examples_and_test_programs_on_real_captures() {
    let root = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let cases = compare_real(&root, |m, packets| compare(m, packets, &Limits::default()));
    assert!(cases > 10_000);
}

/// The largest frame the format allows (1,024 stack slots, 1,024 locals:
/// 8 KiB, two pages probed in order), on a thread with a small stack,
/// against the interpreter: every slot written and summed back, the
/// deepest local written and read.
#[test]
fn the_largest_frame_on_a_small_stack() {
    let mut src = String::from(".maxstacksize 1024\n.locals 1024\n.infosize 4\nsegment .push\n    pop\n");
    for i in 0..1023 {
        src.push_str(&format!("    push {i}\n"));
    }
    for _ in 0..1022 {
        src.push_str("    add\n");
    }
    src.push_str("    locstore 1023\n    push 0\n    locload 1023\n    istore.32\n    ret 0\nends\n");
    let module = netil::assemble(&src).unwrap().module;
    let packets = [Packet::from_bytes(vec![0; 64])];
    let got = std::thread::Builder::new()
        .stack_size(64 * 1024)
        .spawn(move || compare(&module, &packets, &Limits::default()))
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(got, Ok(1));
}
