//! Fuzzes with generated programs: the fuzzer's bytes drive netvm-fuzzgen
//! (a program and packets). The program must verify and its listing must
//! assemble to it; the interpreter must end every packet with a valid
//! outcome, and two runs from fresh state must observe exactly the same
//! (outcomes, packet, info, data and coprocessor contents).
#![no_main]

use libfuzzer_sys::fuzz_target;
use netvm_fuzzgen::arbitrary::Unstructured;
use netvm_fuzzgen::{generate_packets, generate_program, observe, GenConfig};
use netvm_interp::InterpCode;
use netvm_vm::{Limits, Outcome};

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(g) = generate_program(&mut u, &GenConfig::default()) else { return };
    let Ok(packets) = generate_packets(&mut u, 4) else { return };
    let v = netvm_verify::verify(&g.module).unwrap_or_else(|e| panic!("generated program rejected: {e}\n{}", g.listing));
    let a = netil::assemble(&g.listing).unwrap_or_else(|e| panic!("generated listing does not assemble: {e}\n{}", g.listing));
    assert_eq!(a.module, g.module, "the listing assembles to another module:\n{}", g.listing);
    let limits = Limits { budget: 10_000 };
    let code = InterpCode::new(&v);
    let first = observe(&code, &g.module, &packets, &limits);
    assert!(matches!(first.0, Outcome::Exit | Outcome::Fault(_)));
    for o in &first.1 {
        if let Outcome::Forward(p) = o.outcome {
            assert!(p < g.module.out_ports);
        }
        assert_ne!(o.outcome, Outcome::Exit);
    }
    let second = observe(&InterpCode::new(&v), &g.module, &packets, &limits);
    assert_eq!(first, second, "two runs differ:\n{}", g.listing);
});
