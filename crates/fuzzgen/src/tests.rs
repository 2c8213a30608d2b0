//! The generator's own guarantees: everything it produces verifies, its
//! listings assemble to the same module, and it covers the instruction set.

use std::collections::BTreeMap;

use arbitrary::Unstructured;
use netil::Opcode;
use netvm_traffic::SplitMix64;

use super::*;

/// Deterministic pseudo-random input buffers.
pub(crate) fn buffer(seed: u64, len: usize) -> Vec<u8> {
    SplitMix64::new(seed).bytes(len)
}

/// Opcodes of the reachable instructions of a verified module.
fn reachable_ops(v: &netvm_verify::Verified, counts: &mut BTreeMap<Opcode, usize>) {
    for seg in [v.init.as_ref(), Some(&v.push)].into_iter().flatten() {
        for (i, insn) in seg.insns.iter().enumerate() {
            if seg.is_reachable(i) {
                *counts.entry(insn.op).or_default() += 1;
            }
        }
    }
}

/// Opcodes the generator is allowed not to produce in reachable code over
/// 2,000 default programs. Empty: it produces all of them.
const NOT_COVERED: &[Opcode] = &[];

#[test]
fn two_thousand_programs_verify_and_cover_every_opcode() {
    let cfg = GenConfig::default();
    let mut counts = BTreeMap::new();
    let (mut with_init, mut with_copro, mut total_insns) = (0, 0, 0usize);
    for seed in 0..2000u64 {
        let len = 64 + (seed as usize * 37) % 8000;
        let buf = buffer(seed, len);
        let g = generate_program(&mut Unstructured::new(&buf), &cfg).unwrap();
        let v = netvm_verify::verify(&g.module).unwrap_or_else(|e| panic!("seed {seed}: generated program rejected: {e}\n{}", g.listing));
        reachable_ops(&v, &mut counts);
        with_init += usize::from(g.module.init.is_some());
        with_copro += usize::from(!g.module.copros.is_empty());
        total_insns += v.push.insns.len();
    }
    let mut table: Vec<(usize, &str)> = counts.iter().map(|(op, n)| (*n, op.mnemonic())).collect();
    table.sort_unstable();
    println!("reachable instructions per opcode over 2,000 programs (rarest first): {table:?}");
    let missing: Vec<&str> =
        Opcode::ALL.iter().filter(|op| !counts.contains_key(op) && !NOT_COVERED.contains(op)).map(|op| op.mnemonic()).collect();
    assert!(missing.is_empty(), "opcodes never generated in reachable code: {missing:?}\ncounts: {counts:?}");
    assert!(with_init > 200 && with_copro > 200, "init {with_init}, copro {with_copro}");
    assert!(total_insns / 2000 > 20, "programs are too short: {} instructions on average", total_insns / 2000);
}

#[test]
fn listings_assemble_to_the_generated_module() {
    let cfg = GenConfig::default();
    for seed in 0..300u64 {
        let buf = buffer(seed ^ 0xabcdef, 4096);
        let g = generate_program(&mut Unstructured::new(&buf), &cfg).unwrap();
        let a = netil::assemble(&g.listing).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{}", g.listing));
        assert_eq!(a.module, g.module, "seed {seed}:\n{}", g.listing);
        // generate_listing gives the same text for the same bytes.
        assert_eq!(generate_listing(&mut Unstructured::new(&buf), &cfg).unwrap(), g.listing);
    }
}

#[test]
fn exhausted_and_tiny_inputs_still_give_valid_programs() {
    for len in 0..64 {
        let buf = buffer(len as u64, len);
        for cfg in [GenConfig::default(), GenConfig { max_insns: 1, max_stack: 0, ..GenConfig::default() }] {
            let m = generate(&mut Unstructured::new(&buf), &cfg).unwrap();
            netvm_verify::verify(&m).unwrap();
        }
    }
    let zeros = vec![0u8; 4096];
    let ones = vec![0xffu8; 4096];
    for buf in [&zeros, &ones] {
        let m = generate(&mut Unstructured::new(buf), &GenConfig::default()).unwrap();
        netvm_verify::verify(&m).unwrap();
    }
}

#[test]
fn restricted_configurations_verify() {
    let cfgs = [
        GenConfig { allow_loops: false, copro: false, init: false, dead_code: false, ..GenConfig::default() },
        GenConfig { max_insns: 1000, max_stack: 64, max_nesting: 6, ..GenConfig::default() },
        GenConfig { max_info_size: 0, max_data_size: 0, max_ports: 0, ..GenConfig::default() },
        GenConfig { max_info_size: 3, max_data_size: 1, max_ports: 1, max_stack: 4, ..GenConfig::default() },
    ];
    for (k, cfg) in cfgs.iter().enumerate() {
        for seed in 0..200u64 {
            let buf = buffer(seed * 7 + k as u64, 6000);
            let g = generate_program(&mut Unstructured::new(&buf), cfg).unwrap();
            if let Err(e) = netvm_verify::verify(&g.module) {
                panic!("config {k} seed {seed}: {e}\n{}", g.listing);
            }
            if !cfg.allow_loops {
                let v = netvm_verify::verify(&g.module).unwrap();
                // Without loops no jump goes backwards.
                for insn in v.push.insns.iter().enumerate().filter(|(i, _)| v.push.is_reachable(*i)).map(|(_, x)| x) {
                    assert!(insn.targets().iter().all(|t| *t > i64::from(insn.offset)), "config {k} seed {seed}: backward jump");
                }
            }
        }
    }
}

#[test]
fn infinite_loop_programs_verify() {
    for seed in 0..300u64 {
        let buf = buffer(seed + 99, 3000);
        let m = generate_infinite_loop(&mut Unstructured::new(&buf), &GenConfig::default()).unwrap();
        let v = netvm_verify::verify(&m).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        for seg in [Some(&v.push)].into_iter().flatten() {
            for (i, insn) in seg.insns.iter().enumerate() {
                if seg.is_reachable(i) {
                    assert!(!matches!(insn.op, Opcode::Ret | Opcode::RetPop | Opcode::Drop), "{insn:?}");
                    assert_ne!(insn.op.access_memory(), Some(netil::Mem::Packet), "{insn:?}");
                    assert!(
                        !matches!(
                            insn.operands,
                            netil::Operands::Mem(netil::Mem::Packet)
                                | netil::Operands::MemPair(netil::Mem::Packet, _)
                                | netil::Operands::MemPair(_, netil::Mem::Packet)
                        ),
                        "{insn:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn new_state_creates_declared_instances_as_configured() {
    let buf = buffer(5, 4096);
    let mut tables = 0;
    for seed in 0..200 {
        let buf = buffer(seed, 2048 + buf.len() % 7);
        let m = generate(&mut Unstructured::new(&buf), &GenConfig::default()).unwrap();
        let st = new_state(&m);
        assert_eq!(st.copros.len(), m.copros.len());
        assert_eq!(st.data.len(), m.data_size as usize);
        for (d, c) in m.copros.iter().zip(&st.copros) {
            let t = crate::copro_template(d).expect("declared from a template");
            assert_eq!(c.kind(), t.kind);
            if t.kind == "table" {
                tables += 1;
                let capacity = t.config.iter().find(|(k, _)| *k == "capacity").unwrap().1;
                assert!(c.stats().contains(&("capacity".to_string(), capacity.parse().unwrap())), "{}", d.name);
            }
        }
    }
    assert!(tables > 10, "only {tables} tables declared");
    // Without tables: counters only.
    let cfg = GenConfig { tables: false, ..GenConfig::default() };
    for seed in 0..50 {
        let m = generate(&mut Unstructured::new(&buffer(seed, 2048)), &cfg).unwrap();
        assert!(m.copros.iter().all(|d| d.kind == crate::COPRO_KIND));
    }
}

/// Every template creates, and an application manifest configures its
/// instances as `new_state` does.
#[test]
fn copro_templates_create_and_reach_manifests() {
    let registry = netvm_copro::registry();
    for t in crate::COPRO_TEMPLATES {
        registry.create(t.kind, &t.coproc_config()).unwrap_or_else(|e| panic!("{}: {e}", t.name));
    }
    let m = netil::assemble(".copro fib table\n.copro ctr counters\n.copro rt6 lpm\n.copro wide table\nsegment .push\n pop\n drop\nends")
        .unwrap()
        .module;
    assert_eq!(
        crate::copro_manifest_lines(&m),
        "copro.fib = { key_size = 6, value_size = 2, capacity = 40, seed = 1 }\n\
         copro.rt6 = { family = \"ipv6\", tbl8_groups = 48 }\n\
         copro.wide = { key_size = 16, value_size = 8, capacity = 16, aging = 2, seed = \"0x5eed\" }\n"
    );
    // And they read as a manifest's settings do.
    let toml = format!("[[netpe]]\nname = \"a\"\nprogram = \"a.nil\"\n{}", crate::copro_manifest_lines(&m));
    let parsed: toml::Value = toml::from_str(&toml).unwrap();
    assert_eq!(parsed["netpe"][0]["copro"]["wide"]["seed"].as_str(), Some("0x5eed"));
}
