//! Fuzzes the binary module loader, the disassembler, the verifier and the
//! interpreter: any bytes go to `Module::from_bytes`; a module that loads is
//! written back byte for byte and disassembled; a module that verifies runs
//! on a few packets under a small budget and must end with a valid outcome.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netil::Module;
use netvm_fuzzgen::observe;
use netvm_interp::InterpCode;
use netvm_vm::{Limits, Outcome, Packet};

fuzz_target!(|data: &[u8]| {
    let Ok(m) = Module::from_bytes(data) else { return };
    // The loader is exact: what it accepts (at the minor version this netvm
    // writes) it writes back unchanged.
    if data[10..12] == [0, 0] {
        assert_eq!(m.to_bytes(), data, "to_bytes(from_bytes(b)) != b");
    }
    // Any version it accepts (a 1.1 interface section in any record order)
    // it writes in a form that reads back to the same module.
    let again = Module::from_bytes(&m.to_bytes()).expect("what to_bytes writes loads");
    assert_eq!(again, m, "from_bytes(to_bytes(m)) != m");
    let _ = netil::disassemble(&m);
    let Ok(v) = netvm_verify::verify(&m) else { return };
    let code = InterpCode::new(&v);
    let mut eth = vec![0u8; 64];
    eth[12] = 0x08;
    eth[14] = 0x45;
    let packets = [Packet::from_bytes(eth), Packet::from_bytes(vec![0xff; 5]), Packet::from_bytes(Vec::new())];
    let (init, obs) = observe(&code, &m, &packets, &Limits { budget: 2_000 });
    assert!(matches!(init, Outcome::Exit | Outcome::Fault(_)), "init ended with {init:?}");
    for o in obs {
        match o.outcome {
            Outcome::Forward(p) => assert!(p < m.out_ports, "forwarded to port {p} of {}", m.out_ports),
            Outcome::Drop | Outcome::Fault(_) => {}
            Outcome::Exit => panic!(".push ended with exit"),
        }
    }
});
