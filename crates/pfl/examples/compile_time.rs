//! Compile latency of filter expressions: text to an assembled NetIL module
//! (`netvm_pfl::compile`), and to native code (plus verification and the
//! JIT). The peer is benches/peers/pcap_compile_time.c (libpcap's
//! `pcap_compile`); scripts/bench-pfl.sh runs both.
//!
//! ```text
//! cargo run --release -p netvm-pfl --example compile_time -- N EXPR...
//! ```
//! prints one JSON line per expression and stage: median and minimum in µs
//! over N compilations, each timed alone, and the NetIL instruction count.

use std::time::Instant;

fn median_min(mut t: Vec<f64>) -> (f64, f64) {
    t.sort_by(f64::total_cmp);
    (t[t.len() / 2], t[0])
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((n, exprs)) = args.split_first() else {
        eprintln!("usage: compile_time N EXPR...");
        std::process::exit(2);
    };
    let n: usize = n.parse().unwrap_or(100).max(1);
    for e in exprs {
        let mut front = Vec::with_capacity(n);
        let mut whole = Vec::with_capacity(n);
        let mut insns = 0;
        for _ in 0..n {
            let t0 = Instant::now();
            let f = match netvm_pfl::compile(e) {
                Ok(f) => f,
                Err(err) => {
                    eprintln!("{}", err.render(e));
                    std::process::exit(1);
                }
            };
            let t1 = Instant::now();
            let v = netvm_verify::verify(&f.module).expect("the filter verifies");
            let code = netvm_jit::JitCode::compile(&v).expect("the JIT compiles it");
            let t2 = Instant::now();
            std::hint::black_box(&code);
            front.push((t1 - t0).as_secs_f64() * 1e6);
            whole.push((t2 - t0).as_secs_f64() * 1e6);
            insns = f.text.lines().filter(|l| l.starts_with("    ")).count();
        }
        for (stage, t) in [("netvm-pfl", front), ("netvm-pfl+verify+jit", whole)] {
            let (med, min) = median_min(t);
            println!(
                "{{\"compile\": {{\"engine\": \"{stage}\", \"expr\": \"{e}\", \"us_median\": {med:.2}, \"us_min\": {min:.2}, \"n\": {n}, \"insns\": {insns}}}}}"
            );
        }
    }
}
