//! Generated programs, run by the reference interpreter on generated
//! packets, reach every kind of outcome: forwards, drops and each fault
//! (bounds, division by zero, budget, bad port, coprocessor). Prints the
//! distribution with `--nocapture`.

use std::collections::BTreeMap;

use arbitrary::Unstructured;
use netvm_fuzzgen::{generate_packets, generate_program, observe, GenConfig};
use netvm_interp::InterpCode;
use netvm_vm::{FaultKind, Limits, Outcome};

fn buffer(seed: u64, len: usize) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect()
}

#[test]
fn every_outcome_kind_occurs() {
    let cfg = GenConfig::default();
    let limits = Limits { budget: 5_000 };
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    let mut init_outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for seed in 0..400u64 {
        let buf = buffer(seed, 8192);
        let mut u = Unstructured::new(&buf);
        let g = generate_program(&mut u, &cfg).unwrap();
        let packets = generate_packets(&mut u, 8).unwrap();
        let v = netvm_verify::verify(&g.module).unwrap();
        let code = InterpCode::new(&v);
        let (init, obs) = observe(&code, &g.module, &packets, &limits);
        if g.module.init.is_some() {
            *init_outcomes.entry(init.to_string()).or_default() += 1;
        }
        for o in obs {
            *outcomes.entry(o.outcome.to_string()).or_default() += 1;
            if let Outcome::Forward(p) = o.outcome {
                assert!(p < g.module.out_ports);
            }
        }
    }
    println!("push outcomes: {outcomes:#?}\ninit outcomes: {init_outcomes:#?}");
    assert!(outcomes.keys().any(|k| k.starts_with("port")), "{outcomes:?}");
    assert!(outcomes.contains_key("drop"), "{outcomes:?}");
    for k in FaultKind::ALL {
        assert!(outcomes.contains_key(&Outcome::Fault(k).to_string()), "no {k} fault: {outcomes:?}");
    }
    assert!(init_outcomes.contains_key("exit"), "{init_outcomes:?}");
}
