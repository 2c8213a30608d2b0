//! Compile latency: the median time from a verified module to callable
//! native code (Cranelift IR construction, optimisation, code emission and
//! finalisation into executable memory), for each program given.
//!
//! ```sh
//! cargo run --release -p netvm-jit --example compile_latency -- [-n 1000] PROGRAM.nil ...
//! ```
//!
//! Verification is not included (it is shared by every engine); the first
//! compilation (which builds the host ISA once per process) is excluded.

use std::time::Instant;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut n = 1000usize;
    if args.first().is_some_and(|a| a == "-n") {
        n = args.get(1).and_then(|v| v.parse().ok()).expect("-n COUNT");
        args.drain(..2);
    }
    assert!(!args.is_empty(), "usage: compile_latency [-n COUNT] PROGRAM.nil ...");
    let load = |p: &str| {
        let src = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p}: {e}"));
        let m = netil::assemble(&src).unwrap_or_else(|e| panic!("{p}: {e}")).module;
        netvm_verify::verify(&m).unwrap_or_else(|e| panic!("{p}: {e}"))
    };
    let first = load(&args[0]);
    netvm_jit::JitCode::compile(&first).expect("compiles"); // builds the host ISA
    println!("{:<48} {:>8} {:>10} {:>10} {:>10} {:>8}", "program", "insns", "median µs", "p10 µs", "p90 µs", "code B");
    for p in &args {
        let v = load(p);
        let mut times: Vec<f64> = (0..n)
            .map(|_| {
                let t = Instant::now();
                let code = netvm_jit::JitCode::compile(&v).expect("compiles");
                let dt = t.elapsed().as_secs_f64() * 1e6;
                drop(code);
                dt
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let code = netvm_jit::JitCode::compile(&v).expect("compiles");
        let bytes: usize = code.code_size().iter().map(|c| c.1).sum();
        let insns = v.push.insns.len() + v.init.as_ref().map_or(0, |s| s.insns.len());
        println!("{:<48} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>8}", p, insns, times[n / 2], times[n / 10], times[n * 9 / 10], bytes);
    }
}
