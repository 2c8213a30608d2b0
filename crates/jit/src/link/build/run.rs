//! `netvm_run`: the compiled batch loop. Per packet it loads the
//! descriptor, dispatches on the input port to the source's destinations,
//! runs pending fan-out copies, and stores the verdict; at the end of the
//! batch it flushes the counters kept in registers and computes the derived
//! ones. In direct mode every NetPE reached is translated into this function
//! ([`translate_reached`]); in table mode the sources call through the
//! vector table.

use std::collections::{BTreeMap, BTreeSet};

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Block, InstBuilder, MemFlagsData, StackSlot, StackSlotData, StackSlotKind, Value};
use cranelift_frontend::{FunctionBuilder, Switch};
use cranelift_module::{DataId, Module};
use netvm_vm::graph::Dest;
use netvm_vm::FaultKind;

use super::table::{node_slot, source_slot, table_route_driver};
use super::{count_mem, off, zero_info, Build, Hooks, IndexedPorts, PacketVars};
use crate::link::LinkMode;
use crate::translate::{ctx_flags, ExitMode, MemView, SegmentExits, I32, I64};
use netvm_abi::VERDICT_DROP;

/// Counters at most this many are kept in registers across a batch (direct mode).
const MAX_SSA_COUNTERS: usize = 8;

/// The batch loop of `netvm_run`: its parameters and blocks.
struct BatchLoop {
    /// The descriptors (`XbDesc *`), the verdicts (`uint32_t *`) and the
    /// number of packets (`I64`).
    params: LoopParams,
    /// One packet.
    body: Block,
    /// After the last packet.
    exit: Block,
}

/// Where the batch loop finds its parameters.
enum LoopParams {
    /// In SSA values (a loop that does not call out: they stay in registers).
    Values([Value; 3]),
    /// In a stack slot of their own, at `8 * LOOP_*`, loaded where the loop
    /// uses them: where the loop calls out ([`calls_out`]), the register
    /// allocator puts values live across it on the stack anyway, and then
    /// stored them back on every packet as well as reloading them.
    Slot(StackSlot),
}

/// Which parameter of [`LoopParams`].
const LOOP_DESCS: usize = 0;
const LOOP_VERDICTS: usize = 1;
const LOOP_N: usize = 2;

impl BatchLoop {
    /// Parameter `which` (`ty`: the pointer type `ptr`, or `I64` for the count).
    fn param(&self, b: &mut FunctionBuilder, ptr: types::Type, ty: types::Type, which: usize) -> Value {
        match &self.params {
            LoopParams::Values(v) => v[which],
            LoopParams::Slot(slot) => b.ins().stack_load(ptr, ty, *slot, 8 * which as i32),
        }
    }
}

/// Whether the packet loop calls out of the function: a coprocessor's
/// operation, a fan-out hook. Values live across the loop are then kept
/// on the stack by the register allocator.
fn calls_out<M: Module>(build: &Build<'_, '_, M>) -> bool {
    build.hooks.is_some() || build.modules.iter().any(|v| !v.module.copros.is_empty())
}

/// What the parts of `netvm_run` share besides the builder.
struct Run<'v> {
    /// How the NetPEs are bound.
    mode: LinkMode,
    /// The vector table and its slots (table mode).
    vtable: Option<(DataId, &'v [usize])>,
    /// The entry blocks of the NetPEs reached so far (direct mode).
    entries: BTreeMap<usize, Block>,
    /// The NetPEs translated so far (direct mode).
    translated: BTreeSet<usize>,
}

/// `netvm_run`: the batch loop, the source dispatch, and (direct mode) every NetPE.
pub(super) fn build_run<M: Module>(
    b: &mut FunctionBuilder,
    build: &mut Build<'_, '_, M>,
    mode: LinkMode,
    vtable: Option<(DataId, &[usize])>,
) {
    let (pv, lp) = batch_loop_header(b, build, mode);
    let in_port = packet_prologue(b, build, &pv, &lp);
    // Direct mode: a run of input ports that differ only by a number is
    // reached by a compare, not the jump table (`Build::indexed_sources`).
    let indexed = if mode == LinkMode::Direct { build.indexed_sources() } else { None };
    let (src_blocks, indexed_block) = source_switch(b, build, &pv, in_port, indexed);
    let mut run = Run { mode, vtable, entries: BTreeMap::new(), translated: BTreeSet::new() };
    if let (Some(x), Some(blk)) = (indexed, indexed_block) {
        b.switch_to_block(blk);
        build.indexed_route(b, &pv, &mut run.entries, x, in_port, build.layout.source_base);
    }
    dispatch_sources(b, build, &pv, &mut run, &src_blocks);

    // After the packet's last exchange buffer: pending copies, then the verdict.
    b.switch_to_block(pv.end);
    if let Some(h) = build.hooks {
        pending_copies(b, build, &pv, &mut run, h);
    }
    next_packet(b, &pv, &lp, build.ptr);
    flush_counters(b, build, &pv, lp.exit);
}

/// The function's entry and the loop's header: loads the context, declares
/// the per-packet variables (and, in direct mode, the counters kept in
/// registers), and tests for an empty batch. Leaves no block current.
fn batch_loop_header<M: Module>(b: &mut FunctionBuilder, build: &mut Build<'_, '_, M>, mode: LinkMode) -> (PacketVars, BatchLoop) {
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let params = b.block_params(entry).to_vec();
    let (ctx, descs, n, verdicts) = (params[0], params[1], params[2], params[3]);
    let n64 = b.ins().uextend(I64, n);
    let params = if calls_out(build) {
        let slot = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 24, 3));
        for (which, v) in [(LOOP_DESCS, descs), (LOOP_VERDICTS, verdicts), (LOOP_N, n64)] {
            b.ins().stack_store(build.ptr, v, slot, 8 * which as i32);
        }
        LoopParams::Slot(slot)
    } else {
        LoopParams::Values([descs, verdicts, n64])
    };
    let mut pv = PacketVars::load(b, ctx, build.ptr, build.hooks.is_some());
    if mode == LinkMode::Direct {
        ssa_counters(b, build, &mut pv);
    }
    let zero = b.ins().iconst(I64, 0);
    b.def_var(pv.idx, zero);
    let zero32 = b.ins().iconst(I32, 0);
    b.def_var(pv.verdict, zero32);
    b.def_var(pv.pkt, descs);
    b.def_var(pv.desc, descs);
    b.def_var(pv.len, zero);
    let head = b.create_block();
    let body = b.create_block();
    let exit = b.create_block();
    b.ins().jump(head, &[]);

    b.switch_to_block(head);
    let i = b.use_var(pv.idx);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, i, n64);
    b.ins().brif(more, body, &[], exit, &[]);
    (pv, BatchLoop { params, body, exit })
}

/// Declares the counters kept in registers (direct mode), each starting at
/// zero: sources, then ports and drops, at most [`MAX_SSA_COUNTERS`]. Not
/// indexed ports and sources (`Build::indexed_ports`, `indexed_sources`):
/// those are counted in memory at an address computed from the port.
///
/// None where the loop calls out (a coprocessor's operation, a fan-out
/// hook): every value live across a call is then kept on the stack, the
/// counters with it, so that they cost a load and a store on the way
/// round the loop, and an update a load, an add and a store, where a
/// counter in memory costs one add when it changes and nothing otherwise
/// (the router: 3 instructions a frame fewer).
fn ssa_counters<M: Module>(b: &mut FunctionBuilder, build: &Build<'_, '_, M>, pv: &mut PacketVars) {
    if calls_out(build) {
        return;
    }
    let l = build.layout;
    let indexed: &Vec<std::ops::Range<usize>> = &(0..l.node_base.len())
        .map(|nn| build.indexed_ports(nn).map_or(0..0, |x| l.out(nn, x.lo.into())..l.out(nn, x.hi.into())))
        .collect();
    let sources = build.indexed_sources().map_or(0..0, |x| usize::from(x.lo)..usize::from(x.hi));
    let candidates = (0..build.graph.sources.len()).filter(|p| !sources.contains(p)).map(|p| l.source_base + p).chain(
        (0..l.node_base.len())
            .flat_map(|nn| (0..l.out_ports[nn]).map(move |p| l.out(nn, p)).filter(move |k| !indexed[nn].contains(k)).chain([l.drop(nn)])),
    );
    let zero64 = b.ins().iconst(I64, 0);
    for k in candidates.filter(|k| l.counted(*k)).take(MAX_SSA_COUNTERS) {
        let v = b.declare_var(I64);
        b.def_var(v, zero64);
        pv.ssa.insert(k, v);
    }
}

/// The start of the loop's body: one packet's descriptor, data and length,
/// zeroed info memory, a cleared fan-out flag. Returns the input port.
fn packet_prologue<M: Module>(b: &mut FunctionBuilder, build: &Build<'_, '_, M>, pv: &PacketVars, lp: &BatchLoop) -> Value {
    b.switch_to_block(lp.body);
    let i = b.use_var(pv.idx);
    let o = b.ins().imul_imm_s(i, off::XB_SIZE);
    let descs = lp.param(b, build.ptr, build.ptr, LOOP_DESCS);
    let d = b.ins().iadd(descs, o);
    b.def_var(pv.desc, d);
    let data = b.ins().load(build.ptr, ctx_flags(), d, off::XB_DATA);
    let caplen = b.ins().load(I32, ctx_flags(), d, off::XB_CAPLEN);
    let caplen = b.ins().uextend(I64, caplen);
    b.def_var(pv.pkt, data);
    b.def_var(pv.len, caplen);
    zero_info(b, &build.cx, pv.info, build.layout.info_size);
    if build.hooks.is_some() {
        let z = b.ins().iconst(I32, 0);
        b.ins().store(MemFlagsData::trusted(), z, pv.ctx, off::APP_FANNED);
    }
    let in_port = b.ins().load(types::I16, ctx_flags(), d, off::XB_IN_PORT);
    b.ins().uextend(I32, in_port)
}

/// The switch on the input port: one block per source with destinations
/// (returned with its port, still empty), and the code for a port without
/// one (counted, dropped). The ports of `indexed` instead share one block
/// (returned, still empty), reached by a compare before the switch.
fn source_switch<M: Module>(
    b: &mut FunctionBuilder,
    build: &Build<'_, '_, M>,
    pv: &PacketVars,
    in_port: Value,
    indexed: Option<IndexedPorts>,
) -> (Vec<(usize, Block)>, Option<Block>) {
    let no_source = b.create_block();
    let mut indexed_block = None;
    let mut run = 0..0;
    if let Some(x) = indexed {
        let (blk, rest) = (b.create_block(), b.create_block());
        let at = b.ins().iadd_imm_s(in_port, -i64::from(x.lo));
        let inside = b.ins().icmp_imm_u(IntCC::UnsignedLessThan, at, i64::from(x.hi - x.lo));
        b.ins().brif(inside, blk, &[], rest, &[]);
        b.switch_to_block(rest);
        indexed_block = Some(blk);
        run = usize::from(x.lo)..usize::from(x.hi);
    }
    let mut sw = Switch::new();
    let mut src_blocks = Vec::new();
    for (p, dests) in build.graph.sources.iter().enumerate() {
        if !dests.is_empty() && !run.contains(&p) {
            let blk = b.create_block();
            sw.set_entry(p as u128, blk);
            src_blocks.push((p, blk));
        }
    }
    sw.emit(b, in_port, no_source);

    b.switch_to_block(no_source);
    count_mem(b, pv.counters, build.layout.no_source);
    let v = b.ins().iconst(I32, i64::from(VERDICT_DROP));
    b.def_var(pv.verdict, v);
    b.ins().jump(pv.end, &[]);
    (src_blocks, indexed_block)
}

/// Fills each source's block: counts the packet and sends it to the
/// source's destinations, by jumps (direct mode, which then translates every
/// NetPE reached) or calls through the vector table (table mode).
fn dispatch_sources<M: Module>(
    b: &mut FunctionBuilder,
    build: &mut Build<'_, '_, M>,
    pv: &PacketVars,
    run: &mut Run,
    src_blocks: &[(usize, Block)],
) {
    match run.mode {
        LinkMode::Direct => {
            for (p, blk) in src_blocks {
                b.switch_to_block(*blk);
                build.count(b, pv, build.layout.source_base + p);
                let dests = build.graph.sources[*p].clone();
                build.route(b, pv, &mut run.entries, &dests);
            }
            // Every NetPE reached, each once (its exits may reach more).
            translate_reached(b, build, pv, &mut run.entries, &mut run.translated);
        }
        LinkMode::Table => {
            let (data, _) = run.vtable.expect("table mode has a vector table");
            let table = build.cx.module.declare_data_in_func(data, b.func);
            for (p, blk) in src_blocks {
                b.switch_to_block(*blk);
                if build.layout.counted(build.layout.source_base + p) {
                    count_mem(b, pv.counters, build.layout.source_base + p);
                }
                let dests = build.graph.sources[*p].clone();
                let g = build.graph;
                table_route_driver(b, build, pv, table, &dests, &|j| Some(source_slot(g, *p, j)));
            }
        }
    }
}

/// At the packet's end block: pops the pending copies one by one (hook
/// `pop`) and dispatches each to its route, until none is left. Leaves the
/// block where the verdict is stored current. A packet that was not
/// duplicated (`AppCtx::fanned` clear: only a fan-out leaves copies) goes
/// there at once, without the call.
fn pending_copies<M: Module>(b: &mut FunctionBuilder, build: &mut Build<'_, '_, M>, pv: &PacketVars, run: &mut Run, h: Hooks) {
    let ptr = build.ptr;
    let store = b.create_block();
    let popping = b.create_block();
    let fanned = b.ins().load(I32, MemFlagsData::trusted(), pv.ctx, off::APP_FANNED);
    b.ins().brif(fanned, popping, &[], store, &[]);
    b.switch_to_block(popping);
    let slot = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 16, 3));
    let out = b.ins().stack_addr(ptr, slot, 0);
    let pop = build.hook(b, h.pop);
    let idx = b.use_var(pv.idx);
    let info_len = b.ins().iconst(I64, build.layout.info_size as i64);
    let inst = b.ins().call(pop, &[pv.rt, idx, pv.info, info_len, out]);
    let r = b.inst_results(inst)[0];
    let next = b.create_block();
    let none = b.ins().icmp_imm_s(IntCC::SignedLessThan, r, 0);
    b.ins().brif(none, store, &[], next, &[]);
    b.switch_to_block(next);
    let data = b.ins().stack_load(ptr, ptr, slot, 0);
    let len = b.ins().stack_load(ptr, I64, slot, 8);
    b.def_var(pv.pkt, data);
    b.def_var(pv.len, len);
    let mut sw = Switch::new();
    let table = run.vtable.map(|(data, _)| build.cx.module.declare_data_in_func(data, b.func));
    let route_blocks: Vec<Block> = (0..build.routes.len()).map(|_| b.create_block()).collect();
    for (k, blk) in route_blocks.iter().enumerate() {
        sw.set_entry(k as u128, *blk);
    }
    sw.emit(b, r, store);
    for (k, blk) in route_blocks.into_iter().enumerate() {
        b.switch_to_block(blk);
        let d = build.routes[k];
        match (run.mode, table) {
            (LinkMode::Table, Some(t)) => {
                let g = build.graph;
                table_route_driver(b, build, pv, t, &[d], &|_| match d {
                    Dest::Pe { node, .. } => Some(node_slot(g, node as usize)),
                    Dest::Sink(_) => None,
                })
            }
            _ => build.route(b, pv, &mut run.entries, &[d]),
        }
    }
    if run.mode == LinkMode::Direct {
        // Pending copies may reach NetPEs no path reached before.
        translate_reached(b, build, pv, &mut run.entries, &mut run.translated);
    }
    b.switch_to_block(store);
}

/// The loop's latch, at the current block: stores the packet's verdict and
/// goes on to the next packet or leaves the loop.
fn next_packet(b: &mut FunctionBuilder, pv: &PacketVars, lp: &BatchLoop, ptr: types::Type) {
    let i = b.use_var(pv.idx);
    let v = b.use_var(pv.verdict);
    let o = b.ins().ishl_imm_u(i, 2);
    let verdicts = lp.param(b, ptr, ptr, LOOP_VERDICTS);
    let a = b.ins().iadd(verdicts, o);
    b.ins().store(MemFlagsData::trusted(), v, a, 0);
    let i1 = b.ins().iadd_imm_s(i, 1);
    b.def_var(pv.idx, i1);
    // The loop is rotated: the test at its bottom saves a jump per packet.
    let n = lp.param(b, ptr, I64, LOOP_N);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, i1, n);
    b.ins().brif(more, lp.body, &[], lp.exit, &[]);
}

/// The end of the batch at block `exit`: adds the counters kept in
/// registers to memory, computes the derived counters, and returns 0.
fn flush_counters<M: Module>(b: &mut FunctionBuilder, build: &Build<'_, '_, M>, pv: &PacketVars, exit: Block) {
    // End of the batch: registers to memory.
    b.switch_to_block(exit);
    let counters = pv.counters;
    for (&k, &v) in &pv.ssa {
        let x = b.use_var(v);
        let flags = MemFlagsData::trusted();
        let o = (k * 8) as i32;
        let m = b.ins().load(I64, flags, counters, o);
        let m = b.ins().iadd(m, x);
        b.ins().store(flags, m, counters, o);
    }
    // Derived counters, from the (cumulative) counters they follow from.
    for &(k, m) in &build.layout.derived {
        let flags = MemFlagsData::trusted();
        let mut sum = b.ins().iconst(I64, 0);
        for c in build.layout.outcomes(m) {
            let x = b.ins().load(I64, flags, counters, (c * 8) as i32);
            sum = b.ins().iadd(sum, x);
        }
        b.ins().store(flags, sum, counters, (k * 8) as i32);
    }
    let z = b.ins().iconst(I32, 0);
    b.ins().return_(&[z]);
}

/// Translates every NetPE that has an entry block and is not translated yet,
/// until none is left (translating one may create entries for others).
fn translate_reached<M: Module>(
    b: &mut FunctionBuilder,
    build: &mut Build<'_, '_, M>,
    pv: &PacketVars,
    entries: &mut BTreeMap<usize, Block>,
    translated: &mut BTreeSet<usize>,
) {
    while let Some((&n, &blk)) = entries.iter().find(|(k, _)| !translated.contains(*k)) {
        translated.insert(n);
        translate_node(b, build, pv, entries, n, blk);
    }
}

/// Translates NetPE `n`'s `.push` handler at its entry block `blk` (direct mode) and wires its exits.
fn translate_node<M: Module>(
    b: &mut FunctionBuilder,
    build: &mut Build<'_, '_, M>,
    pv: &PacketVars,
    entries: &mut BTreeMap<usize, Block>,
    n: usize,
    blk: Block,
) {
    b.switch_to_block(blk);
    let in_port = b.block_params(blk)[0];
    let pkt = MemView { base: b.use_var(pv.pkt), len: b.use_var(pv.len) };
    let meta = b.use_var(pv.desc);
    let mut env = build.push_env(b, pv.nodes, pkt, meta, in_port, pv.budget, pv.info, n);
    env.exits = ExitMode::Jump { indexed: build.indexed_ports(n).map(|x| (x.lo, x.hi)) };
    let exits = build.translate_push(b, n, env, pv.counters);
    wire_exits(b, build, pv, entries, n, exits);
}

/// Direct mode: the code at each exit of NetPE `n` (`exits`): a port counts
/// and routes the packet on; a drop, a fault or `exit` ends it with its verdict.
fn wire_exits<M: Module>(
    b: &mut FunctionBuilder,
    build: &mut Build<'_, '_, M>,
    pv: &PacketVars,
    entries: &mut BTreeMap<usize, Block>,
    n: usize,
    exits: SegmentExits,
) {
    let layout = build.layout;
    for (p, blk) in exits.ports.iter().enumerate() {
        if let Some(blk) = blk {
            b.switch_to_block(*blk);
            build.count(b, pv, layout.out(n, p));
            let dests = build.graph.out[n][p].clone();
            build.route(b, pv, entries, &dests);
        }
    }
    if let (Some(blk), Some(x)) = (exits.indexed_port, build.indexed_ports(n)) {
        b.switch_to_block(blk);
        let p = b.block_params(blk)[0];
        build.indexed_route(b, pv, entries, x, p, layout.out(n, 0));
    }
    if let Some(blk) = exits.drop {
        b.switch_to_block(blk);
        build.count(b, pv, layout.drop(n));
        let v = b.ins().iconst(I32, i64::from(VERDICT_DROP));
        b.def_var(pv.verdict, v);
        b.ins().jump(pv.end, &[]);
    }
    for (k, blk) in exits.faults.iter().enumerate() {
        if let Some(blk) = blk {
            b.switch_to_block(*blk);
            count_mem(b, pv.counters, layout.fault(n, k));
            let v = b.ins().iconst(I32, i64::from(FaultKind::ALL[k].code()));
            b.def_var(pv.verdict, v);
            b.ins().jump(pv.end, &[]);
        }
    }
    if let Some(blk) = exits.exit {
        // `exit` is verified to occur in `.init` only.
        b.switch_to_block(blk);
        b.ins().jump(pv.end, &[]);
    }
}
