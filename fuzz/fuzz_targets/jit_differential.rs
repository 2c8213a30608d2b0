//! The JIT and the baseline compiler against the reference interpreter,
//! without end: the fuzzer's bytes drive netvm-fuzzgen (a program and
//! packets); every engine runs the
//! program on the packets from fresh state and must observe exactly the same
//! (`.init` outcome, and per packet: outcome, packet bytes, info and data
//! memory, coprocessor state). crates/jit/tests/differential.rs and
//! crates/baseline/tests/differential.rs run the bounded versions in CI.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netvm_fuzzgen::arbitrary::Unstructured;
use netvm_fuzzgen::{generate_packets, generate_program, observe, GenConfig};
use netvm_interp::InterpCode;
use netvm_jit::JitCode;
use netvm_vm::Limits;

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(g) = generate_program(&mut u, &GenConfig::default()) else { return };
    let Ok(packets) = generate_packets(&mut u, 8) else { return };
    let v = netvm_verify::verify(&g.module).unwrap_or_else(|e| panic!("generated program rejected: {e}\n{}", g.listing));
    let limits = Limits { budget: 10_000 };
    let jit = JitCode::compile(&v).unwrap_or_else(|e| panic!("JIT failed: {e}\n{}", g.listing));
    let expect = observe(&InterpCode::new(&v), &g.module, &packets, &limits);
    let got = observe(&jit, &g.module, &packets, &limits);
    assert_eq!(expect, got, "interpreter and JIT differ:\n{}", g.listing);
    #[cfg(target_arch = "x86_64")]
    {
        let base = netvm_baseline::BaselineCode::compile(&v).unwrap_or_else(|e| panic!("baseline compiler failed: {e}\n{}", g.listing));
        let got = observe(&base, &g.module, &packets, &limits);
        assert_eq!(expect, got, "interpreter and baseline compiler differ:\n{}", g.listing);
    }
});
