use arbitrary::Unstructured;
use netvm_fuzzgen::*;
use netvm_vm::{Limits, Outcome, FaultKind, PeCode};
fn buffer(seed: u64, len: usize) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
    (0..len).map(|_| { s ^= s << 13; s ^= s >> 7; s ^= s << 17; s as u8 }).collect()
}
fn main() {
    let mut shown = 0;
    for seed in 0..400u64 {
        let buf = buffer(seed, 8192);
        let mut u = Unstructured::new(&buf);
        let g = generate_program(&mut u, &GenConfig::default()).unwrap();
        if g.module.init.is_none() { continue; }
        let v = netvm_verify::verify(&g.module).unwrap();
        let code = netvm_interp::InterpCode::new(&v);
        let mut st = new_state(&g.module);
        if code.init(&mut st, &Limits { budget: 5000 }) == Outcome::Fault(FaultKind::Bounds) && shown < 2 {
            shown += 1;
            let init_part: String = g.listing.split("segment .push").next().unwrap().to_string();
            println!("=== seed {seed}\n{}", init_part);
        }
    }
}
