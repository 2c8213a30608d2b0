//! Generated applications (random DAGs of generated NetPEs, with fan-out)
//! compiled whole, `--link direct` and `--link table`, and the JIT without
//! linking, against the runtime's graph walk with the reference
//! interpreter, without end: the fuzzer's bytes seed the application
//! generator and make the packets; every observable must be identical
//! (netvm_filetests::differential). crates/filetests/tests/generated_apps.rs
//! runs the bounded version in CI.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netvm_filetests::differential::{check_generated, describe};
use netvm_fuzzgen::app::generate_app;
use netvm_fuzzgen::arbitrary::Unstructured;
use netvm_fuzzgen::{generate_packets, GenConfig};
use netvm_jit::link::{BatchMode, Batching, LinkMode};
use netvm_jit::JitEngine;
use netvm_traffic::SplitMix64;
use netvm_vm::Engine;

fuzz_target!(|data: &[u8]| {
    let Some((seed, rest)) = data.split_first_chunk::<8>() else { return };
    let mut rng = SplitMix64::new(u64::from_le_bytes(*seed));
    let cfg = GenConfig { max_insns: 80, max_ports: 4, max_info_size: 64, max_data_size: 64, ..GenConfig::default() };
    let Some(g) = generate_app(&mut rng, &cfg) else { return };
    let mut u = Unstructured::new(rest);
    let Ok(packets) = generate_packets(&mut u, 16) else { return };
    let batch = 1 + usize::from(rest.first().copied().unwrap_or(0) % 16);
    let staged = Batching { mode: BatchMode::On, sub_batch: Some(3) };
    let engines: [(&str, Box<dyn Engine>); 4] = [
        ("jit/direct", Box::new(JitEngine { link: Some(LinkMode::Direct), ..JitEngine::default() })),
        ("jit/direct, sub-batches of 3", Box::new(JitEngine { link: Some(LinkMode::Direct), batching: staged, ..JitEngine::default() })),
        ("jit/table", Box::new(JitEngine { link: Some(LinkMode::Table), ..JitEngine::default() })),
        ("jit/dispatch", Box::new(JitEngine { link: None, ..JitEngine::default() })),
    ];
    if let Err(e) = check_generated(&g, &packets, batch, &engines) {
        panic!("{e}\n{}", describe(&g));
    }
});
