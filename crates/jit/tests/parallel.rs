//! Compiling on several threads (`netvm_jit::parallel`) gives exactly the
//! code of a compilation on one: on generated applications of several
//! NetPEs, every link mode, the same machine code per function (Cranelift's
//! text of the final instructions and sizes) and the same relocatable
//! objects byte for byte. Every function
//! goes to the workers here, however small (`set_inline_insts(0)`).

use netvm_fuzzgen::arbitrary::Unstructured;
use netvm_fuzzgen::{generate_program, GenConfig};
use netvm_jit::link::{LinkMode, LinkedApp};
use netvm_jit::{aot, parallel, JitEngine, JitOptions};
use netvm_traffic::SplitMix64;
use netvm_verify::Verified;
use netvm_vm::graph::{AppGraph, Dest};
use netvm_vm::{Engine, Limits};

/// A chain of `n` generated NetPEs: port 0 feeds the next (and, from the
/// first, also the last: a fan-out), port 1 leaves at sink 0, other ports
/// are unconnected.
fn generated_app(rng: &mut SplitMix64, n: usize) -> Option<(AppGraph, Vec<Verified>)> {
    let cfg = GenConfig { max_insns: 400, max_ports: 3, init: true, ..GenConfig::default() };
    let mut modules = Vec::new();
    for _ in 0..n {
        let bytes = rng.bytes(8192);
        let g = generate_program(&mut Unstructured::new(&bytes), &cfg).ok()?;
        modules.push(netvm_verify::verify(&g.module).expect("generated programs verify"));
    }
    let pe = |node: usize| Dest::Pe { node: node as u32, in_port: 0 };
    let out = modules
        .iter()
        .enumerate()
        .map(|(i, v)| {
            (0..v.module.out_ports as usize)
                .map(|p| match p {
                    0 if i == 0 && n > 2 => vec![pe(1), pe(n - 1)],
                    0 if i + 1 < n => vec![pe(i + 1)],
                    1 => vec![Dest::Sink(0)],
                    _ => Vec::new(),
                })
                .collect()
        })
        .collect();
    let graph = AppGraph { out, sources: vec![vec![pe(0)]], sink_ports: 1, order: (0..n).collect(), walk_shapes: Vec::new() };
    Some((graph, modules))
}

#[test]
fn several_threads_compile_the_same_code_as_one() {
    parallel::set_inline_insts(0);
    let limits = Limits::default();
    let opts = |threads| JitOptions { keep_text: true, threads, ..JitOptions::default() };
    let mut rng = SplitMix64::new(0x7468_7265_6164);
    let mut apps = 0;
    for n in [2usize, 3, 5, 8, 8] {
        let Some((graph, modules)) = generated_app(&mut rng, n) else { continue };
        apps += 1;
        for mode in [LinkMode::Table, LinkMode::Direct] {
            let one = LinkedApp::compile(&graph, &modules, &limits, mode, opts(1)).unwrap();
            let text = one.text();
            let functions = n * usize::from(mode == LinkMode::Table) + 1;
            assert!(text.code_size.len() >= functions, "{} functions", text.code_size.len());
            for threads in [2, 4] {
                let many = LinkedApp::compile(&graph, &modules, &limits, mode, opts(threads)).unwrap();
                assert_eq!(many.text().code_size, text.code_size, "{n} NetPEs, {mode:?}, {threads} threads");
                assert_eq!(many.text().asm, text.asm, "{n} NetPEs, {mode:?}, {threads} threads");
                assert_eq!(many.text().clif, text.clif, "{n} NetPEs, {mode:?}, {threads} threads");
            }
            for triple in aot::TESTED_TARGETS {
                let one = aot::compile_object(&graph, &modules, &limits, mode, opts(1), triple).unwrap();
                let many = aot::compile_object(&graph, &modules, &limits, mode, opts(3), triple).unwrap();
                assert!(one.bytes == many.bytes, "{n} NetPEs, {mode:?}, {triple}: the objects differ");
            }
        }
        // dispatch: each NetPE's module on its own (its outputs are checked
        // against the interpreter by netvm-filetests' generated_apps).
        for threads in [1, 4] {
            let engine = JitEngine { link: None, opts: opts(threads), batching: Default::default() };
            assert_eq!(engine.prepare_all(&modules).map(|c| c.len()).ok(), Some(n), "{n} NetPEs, dispatch, {threads} threads");
        }
    }
    assert!(apps >= 3, "only {apps} applications generated");
}
