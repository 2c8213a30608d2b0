//! The module-level driver of the IR builders: [`define_app`] declares and
//! defines every function and data object of a linked application in a
//! Cranelift module (the JIT's or an object's), and collects what it made
//! ([`AppSymbols`]) and, on request, its text ([`LinkedText`]).

use std::collections::BTreeMap;

use cranelift_codegen::ir::{types, AbiParam, Signature};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{DataDescription, DataId, FuncId, Linkage, Module};
use netvm_verify::Verified;
use netvm_vm::graph::{AppGraph, Dest};
use netvm_vm::FaultKind;

use super::init::build_init;
use super::run::build_run;
use super::table::{build_node_fn, node_signature, table_slots};
use super::{declare_hooks, Build, Hooks};
use crate::analysis::{InfoReads, KnownSizes};
use crate::context;
use crate::link::{AppLayout, LinkMode};
use crate::translate::{FuncCx, I32};
use crate::{parallel, segment_facts, Isas, JitError, JitOptions};

/// Text of the generated code, for `netvm compile --emit`.
#[derive(Clone, Debug, Default)]
pub struct LinkedText {
    /// `(function name, Cranelift IR)`.
    pub clif: Vec<(String, String)>,
    /// `(function name, machine code as text)`.
    pub asm: Vec<(String, String)>,
    /// `(function name, machine-code bytes)`.
    pub code_size: Vec<(String, usize)>,
}

/// The functions an application compiled into a module.
#[derive(Clone, Debug)]
pub struct AppSymbols {
    /// `netvm_run`.
    pub run: FuncId,
    /// `netvm_init` (always in objects; in the JIT only if some NetPE has `.init`).
    pub init: Option<FuncId>,
    /// The vector table (table mode): slot → NetPE function, to fill after definition.
    pub vtable: Option<(DataId, Vec<FuncId>)>,
    /// Counter and memory layout.
    pub layout: AppLayout,
}

/// The distinct destinations of the graph: route ids for the dispatch after a pending copy is popped.
fn routes(graph: &AppGraph) -> Vec<Dest> {
    let mut r: Vec<Dest> = graph.out.iter().flatten().chain(&graph.sources).flatten().copied().collect();
    r.sort();
    r.dedup();
    r
}

/// The analysis of every NetPE's `.push` handler ([`segment_facts`]), with
/// the sizes of its info and data memory, and, upstream first, the bytes of
/// packet that every port feeding it proves present (a router's later
/// stages need not check again what its `verify` stage did).
fn app_facts(graph: &AppGraph, modules: &[Verified], opts: JitOptions) -> Vec<crate::analysis::SegmentFacts> {
    let n = modules.len();
    let mut packet = vec![u64::MAX; n];
    for d in graph.sources.iter().flatten() {
        if let Dest::Pe { node, .. } = d {
            packet[*node as usize] = 0;
        }
    }
    let mut facts: Vec<Option<crate::analysis::SegmentFacts>> = vec![None; n];
    for &i in &graph.order {
        let m = &modules[i].module;
        // u64::MAX: nothing reaches this NetPE (no packet to know about).
        let known = if packet[i] == u64::MAX { 0 } else { packet[i] };
        let sizes = KnownSizes { info: Some(u64::from(m.info_size)), data: Some(u64::from(m.data_size)), packet: known };
        let f = segment_facts(&modules[i].push, m, opts.domain, sizes);
        for (p, dests) in graph.out[i].iter().enumerate() {
            for d in dests {
                if let Dest::Pe { node, .. } = d {
                    let x = &mut packet[*node as usize];
                    *x = (*x).min(f.exit_len(p));
                }
            }
        }
        facts[i] = Some(f);
    }
    facts
        .into_iter()
        .enumerate()
        .map(|(i, f)| f.unwrap_or_else(|| crate::analysis::SegmentFacts::none(modules[i].push.insns.len())))
        .collect()
}

/// Info stores each NetPE's `.push` may omit: constant-offset stores to bytes
/// that neither the NetPE itself nor any NetPE downstream of it reads.
fn dead_info_stores(graph: &AppGraph, facts: &[crate::analysis::SegmentFacts]) -> Vec<Vec<bool>> {
    let n = facts.len();
    // Reads downstream of each NetPE (reverse topological order).
    let mut below: Vec<InfoReads> = vec![InfoReads::default(); n];
    for &node in graph.order.iter().rev() {
        let mut r = InfoReads::default();
        for d in graph.out[node].iter().flatten() {
            if let Dest::Pe { node: m, .. } = d {
                r.extend(&facts[*m as usize].info_reads);
                r.extend(&below[*m as usize].clone());
            }
        }
        below[node] = r;
    }
    facts
        .iter()
        .zip(&below)
        .map(|(f, b)| {
            f.info_store
                .iter()
                .map(|s| s.is_some_and(|(lo, hi)| f.analysed && !f.info_reads.overlaps(lo, hi) && !b.overlaps(lo, hi)))
                .collect()
        })
        .collect()
}

/// Compiles `graph` into `module`: defines `netvm_run`, `netvm_init` and,
/// in table mode, the NetPE functions and the vector table. For an
/// `object` (the C ABI: include/netvm.h), also `netvm_layout` (whose
/// `budget` is `budget`), and `netvm_init` even if no NetPE has `.init`.
/// `text` receives the generated code when `opts.keep_text`. `isas` holds
/// `module`'s own ISA (a clone of the `Arc` it was built with): the functions
/// are compiled with it on other threads while `module` is being added to
/// (see [`crate::parallel`]).
#[allow(clippy::too_many_arguments)]
pub fn define_app<M: Module>(
    module: &mut M,
    isas: &Isas,
    graph: &AppGraph,
    modules: &[Verified],
    budget: u64,
    object: bool,
    mode: LinkMode,
    opts: JitOptions,
    text: &mut LinkedText,
) -> Result<AppSymbols, JitError> {
    let cg = |e: cranelift_module::ModuleError| JitError::Codegen(format!("{e:?}"));
    let layout = AppLayout::new(graph, modules);
    let helpers = context::declare_helpers(module).map_err(cg)?;
    let hooks = if graph.has_fanout() { Some(declare_hooks(module).map_err(cg)?) } else { None };
    let facts = app_facts(graph, modules, opts);
    let dead = if opts.domain.dead_info_stores { dead_info_stores(graph, &facts) } else { vec![Vec::new(); modules.len()] };
    let ptr = module.target_config().pointer_type();
    let run_sig = {
        let mut s = module.make_signature();
        s.params.extend([AbiParam::new(ptr), AbiParam::new(ptr), AbiParam::new(I32), AbiParam::new(ptr)]);
        s.returns.push(AbiParam::new(I32));
        s
    };
    let init_sig = {
        let mut s = module.make_signature();
        s.params.push(AbiParam::new(ptr));
        s.returns.push(AbiParam::new(I32));
        s
    };
    let run = module.declare_function("netvm_run", Linkage::Export, &run_sig).map_err(cg)?;
    let has_init = object || modules.iter().any(|v| v.init.is_some());
    let init = if has_init { Some(module.declare_function("netvm_init", Linkage::Export, &init_sig).map_err(cg)?) } else { None };
    let mut fctx = FunctionBuilderContext::new();
    let routes = routes(graph);

    let mut vtable = None;
    let mut pe_funcs = Vec::new();
    if mode == LinkMode::Table {
        let sig = node_signature(module);
        for n in 0..modules.len() {
            pe_funcs.push(module.declare_function(&format!("netvm_pe{n}"), Linkage::Local, &sig).map_err(cg)?);
        }
        let slots = table_slots(graph);
        let data = module.declare_data("netvm_vtable", Linkage::Local, true, false).map_err(cg)?;
        vtable = Some((data, slots));
    }

    let read_only = !modules.iter().any(|m| m.push.writes(netil::Mem::Packet));
    let shared = Shared { graph, modules, layout: &layout, helpers, hooks, routes, dead, facts, ptr, opts, read_only, every_file: !object };
    // Each function is built here, in order, and compiled by `parallel`
    // (the NetPE functions of table mode on several threads at once).
    let ((), defined) = parallel::with_codegen(module, isas, &opts, |module, codegen| {
        // netvm_run
        let vt = vtable.as_ref().map(|(d, s)| (*d, s.as_slice()));
        let ctx = build_linked_fn(module, &mut fctx, &shared, run_sig, |b, build| build_run(b, build, mode, vt));
        codegen.submit(module, run, "netvm_run", ctx)?;
        // NetPE functions (table mode)
        if let Some((data, slots)) = &vtable {
            for (n, f) in pe_funcs.iter().enumerate() {
                let sig = node_signature(module);
                let ctx = build_linked_fn(module, &mut fctx, &shared, sig, |b, build| build_node_fn(b, build, n, *data, slots));
                codegen.submit(module, *f, &format!("netvm_pe{n}"), ctx)?;
            }
        }
        // netvm_init
        if let Some(init) = init {
            let mut ctx = module.make_context();
            ctx.func.signature = init_sig;
            let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
            let mut cx = FuncCx::new(module, helpers, opts.domain);
            build_init(&mut b, &mut cx, graph, modules, opts, ptr);
            b.seal_all_blocks();
            let fe = cx.frontend;
            drop(cx);
            b.finalize(fe);
            codegen.submit(module, init, "netvm_init", ctx)?;
        }
        Ok(())
    })?;
    if let Some((data, slots)) = &vtable {
        let mut desc = DataDescription::new();
        // Initialised (not zero-init) data: an object file keeps relocations in .data, not in .bss.
        desc.define(vec![0u8; slots.len() * ptr.bytes() as usize].into_boxed_slice());
        desc.set_align(u64::from(ptr.bytes()));
        for (k, s) in slots.iter().enumerate() {
            let fref = module.declare_func_in_data(pe_funcs[*s], &mut desc);
            desc.write_function_addr(k as u32 * ptr.bytes(), fref);
        }
        module.define_data(*data, &desc).map_err(cg)?;
    }
    for d in defined {
        text.code_size.push((d.name.clone(), d.size));
        if opts.keep_text {
            text.clif.push((d.name.clone(), d.clif.unwrap_or_default()));
            text.asm.push((d.name, d.asm.unwrap_or_default()));
        }
    }
    if object {
        define_layout(module, &layout, graph, modules, budget).map_err(cg)?;
    }
    let vt = vtable.map(|(d, s)| (d, s.iter().map(|n| pe_funcs[*n]).collect()));
    Ok(AppSymbols { run, init, vtable: vt, layout })
}

/// Defines `netvm_layout` (`struct netvm_layout` of include/netvm.h): what
/// a host must allocate for the application, in the target's byte order.
#[allow(clippy::result_large_err)] // Cranelift's own `ModuleError`
fn define_layout<M: Module>(
    module: &mut M,
    layout: &AppLayout,
    graph: &AppGraph,
    modules: &[Verified],
    budget: u64,
) -> cranelift_module::ModuleResult<()> {
    let big = module.isa().endianness() == cranelift_codegen::ir::Endianness::Big;
    let mut bytes = Vec::new();
    let mut put = |x: usize| {
        let x = x as u32;
        bytes.extend_from_slice(&if big { x.to_be_bytes() } else { x.to_le_bytes() });
    };
    put(netvm_rt::ABI_VERSION as usize);
    put(modules.len());
    put(layout.counters);
    put(layout.info_size);
    put(graph.sources.len());
    put(layout.source_base);
    put(layout.no_source);
    put(FaultKind::ALL.len());
    put(budget.min(u64::from(u32::MAX)) as usize);
    for (n, v) in modules.iter().enumerate() {
        put(layout.data_sizes[n]);
        put(layout.out_ports[n]);
        put(layout.node_base[n]);
        put(v.module.copros.len());
    }
    let id = module.declare_data("netvm_layout", Linkage::Export, false, false)?;
    let mut desc = DataDescription::new();
    desc.define(bytes.into_boxed_slice());
    desc.set_align(4);
    module.define_data(id, &desc)
}

/// What every function of a linked application is built from (the fields
/// of the same names in [`Build`] borrow from these).
struct Shared<'a> {
    graph: &'a AppGraph,
    modules: &'a [Verified],
    layout: &'a AppLayout,
    /// The translator's helper functions, declared in the module.
    helpers: context::Helpers,
    hooks: Option<Hooks>,
    routes: Vec<Dest>,
    dead: Vec<Vec<bool>>,
    facts: Vec<crate::analysis::SegmentFacts>,
    ptr: types::Type,
    /// The compiler's options.
    opts: JitOptions,
    /// No NetPE writes packet memory (see `Build::fanout`).
    read_only: bool,
    /// See `Build::every_file`.
    every_file: bool,
}

/// Builds one function of a linked application with `body`; returns it,
/// to compile.
fn build_linked_fn<M: Module>(
    module: &mut M,
    fctx: &mut FunctionBuilderContext,
    sh: &Shared,
    sig: Signature,
    body: impl FnOnce(&mut FunctionBuilder, &mut Build<'_, '_, M>),
) -> Context {
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    let mut b = FunctionBuilder::new(&mut ctx.func, fctx);
    let mut build = Build {
        cx: FuncCx::new(module, sh.helpers, sh.opts.domain),
        graph: sh.graph,
        modules: sh.modules,
        layout: sh.layout,
        hooks: sh.hooks,
        hook_refs: BTreeMap::new(),
        routes: &sh.routes,
        dead: &sh.dead,
        facts: &sh.facts,
        ptr: sh.ptr,
        read_only: sh.read_only,
        every_file: sh.every_file,
    };
    body(&mut b, &mut build);
    b.seal_all_blocks();
    let fe = build.cx.frontend;
    drop(build);
    b.finalize(fe);
    ctx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verified(src: &str) -> Verified {
        netvm_verify::verify(&netil::assemble(src).expect("assembles").module).expect("verifies")
    }

    /// A length check upstream covers the accesses of the NetPEs it feeds
    /// and of theirs; a NetPE that another path reaches unchecked keeps its
    /// checks.
    #[test]
    fn packet_length_facts_flow_downstream() {
        // 0: checks 34 bytes, port 0 on; 1: reads [30, 34), passes on;
        // 2: reads [30, 34) too, fed by 1 and (unchecked) by source 1.
        let check = verified(".ports 1\nsegment .push\n pop\n pktlen\n push 34\n jcmp.lt r\n ret 0\nr: drop\nends");
        let read = verified(".ports 1\nsegment .push\n pop\n push 30\n upload.32\n pop\n ret 0\nends");
        let pe = |node: u32| vec![Dest::Pe { node, in_port: 0 }];
        let graph = |sources: Vec<Vec<Dest>>| AppGraph {
            out: vec![vec![pe(1)], vec![pe(2)], vec![vec![Dest::Sink(0)]]],
            sources,
            sink_ports: 1,
            order: vec![0, 1, 2],
            walk_shapes: Vec::new(),
        };
        let modules = [check, read.clone(), read];
        let access = |f: &crate::analysis::SegmentFacts| f.unchecked[2];
        let facts = app_facts(&graph(vec![pe(0)]), &modules, JitOptions::default());
        assert_eq!(facts.iter().map(|f| f.exit_len(0)).collect::<Vec<_>>(), [34, 34, 34]);
        assert!(access(&facts[1]) && access(&facts[2]));
        let facts = app_facts(&graph(vec![pe(0), pe(2)]), &modules, JitOptions::default());
        assert!(access(&facts[1]) && !access(&facts[2]), "source 1 reaches NetPE 2 with nothing known");
    }
}
