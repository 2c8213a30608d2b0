//! The filter-expression compiler (crates/pfl) on hostile input: the bytes
//! up to the first NUL are the expression, the rest drive netvm-fuzzgen's
//! packets. Compiling never panics; an error's span lies inside the
//! expression and renders; a compiled filter verifies, and the interpreter
//! and the JIT agree on every packet (match, no match, or the same fault).
//! crates/pfl/tests/properties.rs runs the bounded version in CI.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netvm_fuzzgen::arbitrary::Unstructured;
use netvm_fuzzgen::{generate_packets, observe};
use netvm_interp::InterpCode;
use netvm_jit::JitCode;
use netvm_vm::Limits;

fuzz_target!(|data: &[u8]| {
    let cut = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let Ok(expr) = std::str::from_utf8(&data[..cut]) else { return };
    match netvm_pfl::compile(expr) {
        Err(e) => {
            assert!(e.span.start <= e.span.end && e.span.end <= expr.len(), "span {:?} outside `{expr}`", e.span);
            assert!(!e.message.contains("internal error"), "`{expr}`: {}", e.message);
            let _ = e.render(expr);
        }
        Ok(f) => {
            let v = netvm_verify::verify(&f.module).unwrap_or_else(|e| panic!("`{expr}`: filter rejected: {e}\n{}", f.text));
            let mut u = Unstructured::new(&data[cut.min(data.len())..]);
            let Ok(packets) = generate_packets(&mut u, 8) else { return };
            let limits = Limits { budget: 100_000 };
            let jit = JitCode::compile(&v).unwrap_or_else(|e| panic!("`{expr}`: JIT failed: {e}"));
            let a = observe(&InterpCode::new(&v), &f.module, &packets, &limits);
            let b = observe(&jit, &f.module, &packets, &limits);
            assert_eq!(a, b, "`{expr}`: interpreter and JIT differ\n{}", f.text);
        }
    }
});
