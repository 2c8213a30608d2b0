//! Fuzzes the assembler, the verifier and the interpreter: any UTF-8 text is
//! assembled; a listing that assembles and verifies must survive the text
//! round trip (disassemble, reassemble: identical bytes) and run on a few
//! packets under a small budget with a valid outcome.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netvm_fuzzgen::observe;
use netvm_interp::InterpCode;
use netvm_vm::{Limits, Outcome, Packet};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(a) = netil::assemble(text) else { return };
    let m = a.module;
    let Ok(v) = netvm_verify::verify_with_source(&m, Some(&a.source_map)) else { return };
    let listing = netil::disassemble(&m).expect("an assembled module decodes");
    let again = netil::assemble(&listing).unwrap_or_else(|e| panic!("the disassembly does not assemble: {e}\n{listing}"));
    assert_eq!(again.module.to_bytes(), m.to_bytes(), "disasm → asm changed the module:\n{listing}");
    let code = InterpCode::new(&v);
    let mut eth = vec![0u8; 64];
    eth[12] = 0x86;
    eth[13] = 0xdd;
    let packets = [Packet::from_bytes(eth), Packet::from_bytes(vec![1, 2, 3])];
    let (init, obs) = observe(&code, &m, &packets, &Limits { budget: 2_000 });
    assert!(matches!(init, Outcome::Exit | Outcome::Fault(_)), "init ended with {init:?}");
    for o in obs {
        if let Outcome::Forward(p) = o.outcome {
            assert!(p < m.out_ports, "forwarded to port {p} of {}", m.out_ports);
        }
        assert_ne!(o.outcome, Outcome::Exit);
    }
});
