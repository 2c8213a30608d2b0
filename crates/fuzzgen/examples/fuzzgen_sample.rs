//! Prints a generated program's listing: `cargo run -p netvm-fuzzgen --example fuzzgen_sample [SEED]`.

use arbitrary::Unstructured;

fn main() {
    let seed: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    let buf = netvm_traffic::SplitMix64::new(seed).bytes(8192);
    let g = netvm_fuzzgen::generate_program(&mut Unstructured::new(&buf), &netvm_fuzzgen::GenConfig::default()).expect("generate");
    print!("{}", g.listing);
    match netvm_verify::verify(&g.module) {
        Ok(v) => eprintln!("verified: {} .push instructions", v.push.insns.len()),
        Err(e) => eprintln!("REJECTED: {e}"),
    }
}
