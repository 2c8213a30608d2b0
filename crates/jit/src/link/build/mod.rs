//! The Cranelift IR builders of a linked application. This module owns
//! what every function under construction shares: the offsets of the C
//! ABI's structures, the fan-out hooks, the builder state ([`Build`]), the
//! per-packet variables ([`PacketVars`]), and the code that counts an
//! outcome and sends a packet on (routing, sinks, fan-out, a NetPE's
//! `.push` environment). Its submodules define the functions themselves:
//! `define` (the module-level driver, [`define_app`]), `run` (`netvm_run`,
//! the batch loop and the direct mode's NetPEs), `table` (the vector table
//! mode) and `init` (`netvm_init`).

mod define;
mod init;
mod run;
mod table;

use std::collections::BTreeMap;

use cranelift_codegen::ir::{types, AbiParam, Block, FuncRef, InstBuilder, MemFlagsData, Signature, Value};
use cranelift_frontend::{FunctionBuilder, Variable};
use cranelift_module::{FuncId, Linkage, Module};
use netvm_verify::Verified;
use netvm_vm::graph::{AppGraph, Dest};

pub use define::{define_app, AppSymbols, LinkedText};

use super::AppLayout;
use crate::translate::{self, ctx_flags, ExitMode, FuncCx, MemView, MetaView, SegmentEnv, SegmentExits, I32, I64};
use netvm_abi::VERDICT_DROP;

/// Offsets of the C ABI's structures (include/netvm.h) that compiled code reads and writes.
pub(super) mod off {
    use std::mem::offset_of;

    use netvm_rt::{AppCtx, NodeMem, XbDesc};

    pub const XB_DATA: i32 = offset_of!(XbDesc, data) as i32;
    pub const XB_CAPLEN: i32 = offset_of!(XbDesc, caplen) as i32;
    pub const XB_WIRELEN: i32 = offset_of!(XbDesc, wirelen) as i32;
    pub const XB_TS_SEC: i32 = offset_of!(XbDesc, ts_sec) as i32;
    pub const XB_TS_NSEC: i32 = offset_of!(XbDesc, ts_nsec) as i32;
    pub const XB_IN_PORT: i32 = offset_of!(XbDesc, in_port) as i32;
    pub const XB_SEQ: i32 = offset_of!(XbDesc, seq) as i32;
    pub const XB_SIZE: i64 = std::mem::size_of::<XbDesc>() as i64;
    pub const NODE_DATA: i32 = offset_of!(NodeMem, data) as i32;
    pub const NODE_DATA_LEN: i32 = offset_of!(NodeMem, data_len) as i32;
    pub const NODE_COPROS: i32 = offset_of!(NodeMem, copros) as i32;
    pub const NODE_NCOPROS: i32 = offset_of!(NodeMem, ncopros) as i32;
    pub const NODE_REGS: i32 = offset_of!(NodeMem, regs) as i32;
    pub const NODE_SIZE: i32 = std::mem::size_of::<NodeMem>() as i32;
    pub const APP_BUDGET: i32 = offset_of!(AppCtx, budget) as i32;
    pub const APP_INFO: i32 = offset_of!(AppCtx, info) as i32;
    pub const APP_NODES: i32 = offset_of!(AppCtx, nodes) as i32;
    pub const APP_COUNTERS: i32 = offset_of!(AppCtx, counters) as i32;
    pub const APP_RT: i32 = offset_of!(AppCtx, rt) as i32;
    pub const APP_FANNED: i32 = offset_of!(AppCtx, fanned) as i32;
}

/// Info memory up to this size is zeroed with inline stores, above with `memset`.
const INLINE_MEMSET: usize = 128;

/// The fan-out hooks declared in a module.
#[derive(Clone, Copy, Debug)]
struct Hooks {
    /// `netvm_rt_fanout_save`: keeps a pending copy.
    save: FuncId,
    /// `netvm_rt_fanout_copy`: a fresh copy of the buffer.
    copy: FuncId,
    /// `netvm_rt_fanout_pop`: the next pending copy, with its route.
    pop: FuncId,
    /// `netvm_rt_emit`: a duplicated packet's copy leaving at a sink.
    emit: FuncId,
}

/// Declares the fan-out hooks (`netvm_rt_fanout_save` and friends) as imports of `module`.
#[allow(clippy::result_large_err)] // Cranelift's own `ModuleError`
fn declare_hooks<M: Module>(module: &mut M) -> cranelift_module::ModuleResult<Hooks> {
    let ptr = module.target_config().pointer_type();
    let sig = |params: &[types::Type], ret: Option<types::Type>| {
        let mut s: Signature = module.make_signature();
        s.params.extend(params.iter().map(|t| AbiParam::new(*t)));
        s.returns.extend(ret.map(AbiParam::new));
        s
    };
    let save = sig(&[ptr, I64, I32, ptr, I64, ptr, I64, I32], None);
    let copy = sig(&[ptr, I64, ptr, I64], Some(ptr));
    let pop = sig(&[ptr, I64, ptr, I64, ptr], Some(I32));
    let emit = sig(&[ptr, I64, I32, ptr, I64], None);
    Ok(Hooks {
        save: module.declare_function("netvm_rt_fanout_save", Linkage::Import, &save)?,
        copy: module.declare_function("netvm_rt_fanout_copy", Linkage::Import, &copy)?,
        pop: module.declare_function("netvm_rt_fanout_pop", Linkage::Import, &pop)?,
        emit: module.declare_function("netvm_rt_emit", Linkage::Import, &emit)?,
    })
}

/// Everything one function being built needs.
struct Build<'a, 'm, M: Module> {
    /// The translator's per-function context (module, helpers, options).
    cx: FuncCx<'m, M>,
    /// The application.
    graph: &'a AppGraph,
    /// Its NetPEs' verified modules.
    modules: &'a [Verified],
    /// Its counter layout.
    layout: &'a AppLayout,
    /// The fan-out hooks (only for an application that fans out).
    hooks: Option<Hooks>,
    /// The hooks referenced in this function so far, by `FuncId`.
    hook_refs: BTreeMap<u32, FuncRef>,
    /// The distinct destinations: index = route id.
    routes: &'a [Dest],
    /// Per NetPE, the info stores its `.push` may omit.
    dead: &'a [Vec<bool>],
    /// Per NetPE, the facts of its `.push` handler's analysis.
    facts: &'a [crate::analysis::SegmentFacts],
    /// The target's pointer type.
    ptr: types::Type,
    /// No NetPE of the application writes packet memory: the destinations
    /// of a duplicated packet can all run on its one buffer.
    read_only: bool,
    /// The host gives every coprocessor instance a register file (the
    /// JIT's own host, not an object's).
    every_file: bool,
}

/// A run of output ports reached indexed by the port ([`Build::indexed_ports`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct IndexedPorts {
    /// The first port.
    lo: u16,
    /// One past the last.
    hi: u16,
    /// Where port `lo` leads; port `lo + i` leads to the `i`-th after it.
    to: IndexedTo,
}

/// The longest run `lo..hi` of at least two `ports` (each a list of
/// destinations) that lead one to one to consecutive sinks, or to
/// consecutive input ports of one NetPE, and are `counted`: ports whose
/// code differs only by a number, which is the port's plus a constant.
fn indexed_run(ports: &[Vec<Dest>], counted: impl Fn(usize) -> bool) -> Option<IndexedPorts> {
    // What port p leads to, as (NetPE or sink, number - p): equal along a run.
    let key = |p: usize| match ports[p].as_slice() {
        [Dest::Sink(s)] if counted(p) => Some((None, i64::from(*s) - p as i64)),
        [Dest::Pe { node, in_port }] if counted(p) => Some((Some(*node), i64::from(*in_port) - p as i64)),
        _ => None,
    };
    // Ports and input ports are 16-bit, so `hi` (one past the run) must be
    // too: the last of 65,536 input ports is left out of runs.
    let n = ports.len().min(usize::from(u16::MAX));
    let mut best: Option<IndexedPorts> = None;
    let mut lo = 0;
    while lo < n {
        let Some(k) = key(lo) else {
            lo += 1;
            continue;
        };
        let mut hi = lo + 1;
        while hi < n && key(hi) == Some(k) {
            hi += 1;
        }
        if hi - lo >= 2 && best.is_none_or(|b| usize::from(b.hi - b.lo) < hi - lo) {
            let to = match ports[lo][0] {
                Dest::Sink(s) => IndexedTo::Sink(s),
                Dest::Pe { node, in_port } => IndexedTo::Pe { node, in_port },
            };
            best = Some(IndexedPorts { lo: lo as u16, hi: hi as u16, to });
        }
        lo = hi;
    }
    best
}

/// Where the first of a run of indexed ports leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IndexedTo {
    /// A sink.
    Sink(u16),
    /// An input port of a NetPE.
    Pe {
        /// The NetPE.
        node: u32,
        /// Its input port.
        in_port: u16,
    },
}

/// Per-packet values of the function being built (direct mode and the batch loop).
struct PacketVars {
    /// The application context (`AppCtx *`).
    ctx: Value,
    /// The packet's descriptor (`XbDesc *`).
    desc: Variable,
    /// The packet's data (a copy's, after a fan-out).
    pkt: Variable,
    /// The packet's captured length.
    len: Variable,
    /// The packet's index in the batch.
    idx: Variable,
    /// The packet's verdict.
    verdict: Variable,
    /// Info memory.
    info: Value,
    /// The counters.
    counters: Value,
    /// The fan-out state (null without fan-out).
    rt: Value,
    /// The per-packet budget.
    budget: Value,
    /// The node table (`NodeMem *`).
    nodes: Value,
    /// SSA counters: counter index → variable.
    ssa: BTreeMap<usize, Variable>,
    /// Where a packet goes when its last exchange buffer is done (its verdict set).
    end: Block,
}

impl PacketVars {
    /// Loads the application context's fields at the current position and
    /// declares the per-packet variables (`rt` is null without fan-out).
    fn load(b: &mut FunctionBuilder, ctx: Value, ptr: types::Type, fanout: bool) -> PacketVars {
        let ld = |b: &mut FunctionBuilder, ty, o| b.ins().load(ty, ctx_flags(), ctx, o);
        let budget = ld(b, I64, off::APP_BUDGET);
        let info = ld(b, ptr, off::APP_INFO);
        let counters = ld(b, ptr, off::APP_COUNTERS);
        let nodes = ld(b, ptr, off::APP_NODES);
        let rt = if fanout { ld(b, ptr, off::APP_RT) } else { b.ins().iconst(ptr, 0) };
        PacketVars {
            ctx,
            desc: b.declare_var(ptr),
            pkt: b.declare_var(ptr),
            len: b.declare_var(I64),
            idx: b.declare_var(I64),
            verdict: b.declare_var(I32),
            info,
            counters,
            rt,
            budget,
            nodes,
            ssa: BTreeMap::new(),
            end: b.create_block(),
        }
    }
}

impl<M: Module> Build<'_, '_, M> {
    /// The reference to hook `id` in the function being built (declared once).
    fn hook(&mut self, b: &mut FunctionBuilder, id: FuncId) -> FuncRef {
        let key = id.as_u32();
        if let Some(f) = self.hook_refs.get(&key) {
            return *f;
        }
        let f = self.cx.module.declare_func_in_func(id, b.func);
        self.hook_refs.insert(key, f);
        f
    }

    /// Adds one to counter `k` (a register if it has one, else memory).
    fn count(&mut self, b: &mut FunctionBuilder, pv: &PacketVars, k: usize) {
        if !self.layout.counted(k) {
            return;
        }
        if let Some(&v) = pv.ssa.get(&k) {
            let x = b.use_var(v);
            let x = b.ins().iadd_imm_s(x, 1);
            b.def_var(v, x);
        } else {
            count_mem(b, pv.counters, k);
        }
    }

    /// The entry block of NetPE `n` (created on demand), with its input port as parameter.
    fn node_entry(&self, b: &mut FunctionBuilder, entries: &mut BTreeMap<usize, Block>, n: usize) -> Block {
        *entries.entry(n).or_insert_with(|| {
            let blk = b.create_block();
            b.append_block_param(blk, I32);
            blk
        })
    }

    /// Sends the current buffer to `dests` (direct mode): the code at an
    /// output port (after its counter) or a source.
    fn route(&mut self, b: &mut FunctionBuilder, pv: &PacketVars, entries: &mut BTreeMap<usize, Block>, dests: &[Dest]) {
        match dests {
            [] => {
                leave(b, pv, VERDICT_DROP);
            }
            [Dest::Sink(s)] => {
                self.sink(b, pv, *s);
                leave(b, pv, u32::from(*s));
            }
            [Dest::Pe { node, in_port }] => {
                let blk = self.node_entry(b, entries, *node as usize);
                let ip = b.ins().iconst(I32, i64::from(*in_port));
                b.ins().jump(blk, &[ip.into()]);
            }
            [first, rest @ ..] => {
                self.fanout(b, pv, rest);
                self.route(b, pv, entries, std::slice::from_ref(first));
            }
        }
    }

    /// At sink `s`: a duplicated packet's copies leave through the host (`netvm_rt_emit`).
    fn sink(&mut self, b: &mut FunctionBuilder, pv: &PacketVars, s: u16) {
        if self.hooks.is_some() {
            let port = b.ins().iconst(I32, i64::from(s));
            self.sink_at(b, pv, port);
        }
    }

    /// [`Build::sink`] at the sink in `port` (`i32`).
    fn sink_at(&mut self, b: &mut FunctionBuilder, pv: &PacketVars, port: Value) {
        let Some(h) = self.hooks else { return };
        let fanned = b.ins().load(I32, MemFlagsData::trusted(), pv.ctx, off::APP_FANNED);
        let call = b.create_block();
        let cont = b.create_block();
        b.ins().brif(fanned, call, &[], cont, &[]);
        b.switch_to_block(call);
        let f = self.hook(b, h.emit);
        let (idx, pkt, len) = (b.use_var(pv.idx), b.use_var(pv.pkt), b.use_var(pv.len));
        b.ins().call(f, &[pv.rt, idx, port, pkt, len]);
        b.ins().jump(cont, &[]);
        b.switch_to_block(cont);
    }

    /// Duplicates the current buffer for `rest` (all destinations but the
    /// first): the last keeps the buffer, the others get copies (pending
    /// with the host), and the first continues here on a fresh copy. In an
    /// application whose NetPEs never write packet memory, nobody can tell
    /// a copy from the buffer: every destination runs on the buffer itself
    /// (pending with its own info memory) and nothing is copied.
    fn fanout(&mut self, b: &mut FunctionBuilder, pv: &PacketVars, rest: &[Dest]) {
        let h = self.hooks.expect("fan-out hooks declared for an application with fan-out");
        let one = b.ins().iconst(I32, 1);
        b.ins().store(MemFlagsData::trusted(), one, pv.ctx, off::APP_FANNED);
        let save = self.hook(b, h.save);
        let copy = self.hook(b, h.copy);
        let (idx, pkt, len) = (b.use_var(pv.idx), b.use_var(pv.pkt), b.use_var(pv.len));
        let info_len = b.ins().iconst(I64, self.layout.info_size as i64);
        for (k, d) in rest.iter().enumerate().rev() {
            let route = b.ins().iconst(I32, self.route_id(d) as i64);
            let keep = b.ins().iconst(I32, i64::from(self.read_only || k + 1 == rest.len()));
            b.ins().call(save, &[pv.rt, idx, route, pkt, len, pv.info, info_len, keep]);
        }
        if self.read_only {
            return;
        }
        let inst = b.ins().call(copy, &[pv.rt, idx, pkt, len]);
        let fresh = b.inst_results(inst)[0];
        b.def_var(pv.pkt, fresh);
    }

    /// NetPE `n`'s output ports reached indexed by the port ([`indexed_run`])
    /// when its `.push` handler has a `ret.pop`: the linker then jumps to
    /// them with the port (`ExitMode::Jump { indexed }`), counted in memory,
    /// and a packet costs no indirect branch there (a router's lookup, a
    /// bridge's forwarding decision: stages whose port is data).
    fn indexed_ports(&self, n: usize) -> Option<IndexedPorts> {
        if !self.modules[n].push.insns.iter().any(|i| i.op == netil::Opcode::RetPop) {
            return None;
        }
        indexed_run(&self.graph.out[n], |p| self.layout.counted(self.layout.out(n, p)))
    }

    /// The application's input ports reached indexed by the port
    /// ([`indexed_run`]), as a bridge's: one compare instead of a jump table
    /// on the input port.
    fn indexed_sources(&self) -> Option<IndexedPorts> {
        indexed_run(&self.graph.sources, |p| self.layout.counted(self.layout.source_base + p))
    }

    /// At the current block, for port `port` (`i32`) of the run `x`, whose
    /// port `p` is counted in counter `first + p`: counts it (in memory)
    /// and sends the packet where it leads.
    fn indexed_route(
        &mut self,
        b: &mut FunctionBuilder,
        pv: &PacketVars,
        entries: &mut BTreeMap<usize, Block>,
        x: IndexedPorts,
        port: Value,
        first: usize,
    ) {
        let p64 = b.ins().uextend(I64, port);
        let at = b.ins().imul_imm_s(p64, 8);
        let at = b.ins().iadd(pv.counters, at);
        let o = (first * 8) as i32;
        let flags = MemFlagsData::trusted();
        let c = b.ins().load(I64, flags, at, o);
        let c = b.ins().iadd_imm_s(c, 1);
        b.ins().store(flags, c, at, o);
        match x.to {
            IndexedTo::Sink(s) => {
                let sink = b.ins().iadd_imm_s(port, i64::from(s) - i64::from(x.lo));
                self.sink_at(b, pv, sink);
                b.def_var(pv.verdict, sink);
                b.ins().jump(pv.end, &[]);
            }
            IndexedTo::Pe { node, in_port } => {
                let entry = self.node_entry(b, entries, node as usize);
                let ip = b.ins().iadd_imm_s(port, i64::from(in_port) - i64::from(x.lo));
                b.ins().jump(entry, &[ip.into()]);
            }
        }
    }

    /// The route id of destination `d` (its index in [`Build::routes`]).
    fn route_id(&self, d: &Dest) -> usize {
        self.routes.binary_search(d).expect("listed route")
    }

    /// The environment of NetPE `n`'s `.push` handler.
    #[allow(clippy::too_many_arguments)]
    fn push_env(
        &self,
        b: &mut FunctionBuilder,
        nodes: Value,
        pkt: MemView,
        meta: Value,
        in_port: Value,
        budget: Value,
        info: Value,
        n: usize,
    ) -> SegmentEnv {
        let node_off = off::NODE_SIZE * n as i32;
        let ld = |b: &mut FunctionBuilder, ty, o| b.ins().load(ty, ctx_flags(), nodes, node_off + o);
        let data = MemView { base: ld(b, self.ptr, off::NODE_DATA), len: ld(b, I64, off::NODE_DATA_LEN) };
        let copros = (ld(b, self.ptr, off::NODE_COPROS), ld(b, I64, off::NODE_NCOPROS));
        // `LinkedApp::bind` gives every instance a register file; a C host
        // may give none (include/netvm.h).
        let regs = (ld(b, self.ptr, off::NODE_REGS), (!self.every_file).then_some(copros.1));
        let info_len = b.ins().iconst(I64, i64::from(self.modules[n].module.info_size));
        SegmentEnv {
            mems: [pkt, MemView { base: info, len: info_len }, data],
            copros,
            regs,
            meta: Some(MetaView {
                base: meta,
                wirelen: off::XB_WIRELEN,
                ts_sec: off::XB_TS_SEC,
                ts_nsec: off::XB_TS_NSEC,
                seq: off::XB_SEQ,
            }),
            in_port: Some(in_port),
            budget,
            exits: ExitMode::Jump { indexed: None },
            walk_shapes: walk_shapes(self.graph, n),
        }
    }

    /// Translates NetPE `n`'s `.push` handler in `env` at the current block.
    /// If it has backward edges, each exit first adds the budget it
    /// consumed to its counter in `counters` ([`AppLayout::budget_counter`]):
    /// the returned exits are the blocks after that.
    fn translate_push(&mut self, b: &mut FunctionBuilder, n: usize, env: SegmentEnv, counters: Value) -> SegmentExits {
        let v = &self.modules[n];
        let mut exits = translate::translate_segment(b, &mut self.cx, &v.push, &v.module, &self.facts[n], &self.dead[n], env);
        let Some(left) = exits.budget_left else { return exits };
        let k = self.layout.budget_counter(n);
        let mut account = |blk: &mut Block| {
            b.switch_to_block(*blk);
            let left = b.use_var(left);
            let used = b.ins().isub(env.budget, left);
            add_mem(b, counters, k, used);
            *blk = b.create_block();
            b.ins().jump(*blk, &[]);
        };
        exits.ports.iter_mut().flatten().for_each(&mut account);
        exits.drop.iter_mut().for_each(&mut account);
        exits.faults.iter_mut().flatten().for_each(&mut account);
        if let Some(blk) = &mut exits.indexed_port {
            b.switch_to_block(*blk);
            let port = b.block_params(*blk)[0];
            let left = b.use_var(left);
            let used = b.ins().isub(env.budget, left);
            add_mem(b, counters, k, used);
            *blk = b.create_block();
            b.append_block_param(*blk, I32);
            b.ins().jump(*blk, &[port.into()]);
        }
        exits
    }
}

/// Adds one to counter `k` in memory.
/// NetPE `n`'s walk shapes as the graph knows them ([`AppGraph::walk_shape`]).
pub(super) fn walk_shapes(graph: &AppGraph, n: usize) -> [u32; crate::translate::SHAPED_SLOTS] {
    std::array::from_fn(|c| graph.walk_shape(n, c))
}

fn count_mem(b: &mut FunctionBuilder, counters: Value, k: usize) {
    let one = b.ins().iconst(I64, 1);
    add_mem(b, counters, k, one);
}

/// Adds `v` (`i64`) to counter `k` in memory.
fn add_mem(b: &mut FunctionBuilder, counters: Value, k: usize, v: Value) {
    let flags = MemFlagsData::trusted();
    let o = (k * 8) as i32;
    let x = b.ins().load(I64, flags, counters, o);
    let x = b.ins().iadd(x, v);
    b.ins().store(flags, x, counters, o);
}

/// Zeroes `size` bytes of info memory.
fn zero_info<M: Module>(b: &mut FunctionBuilder, cx: &FuncCx<'_, M>, info: Value, size: usize) {
    if size == 0 {
        return;
    }
    if size <= INLINE_MEMSET {
        b.emit_small_memset(cx.frontend, info, 0, size as u64, 1, MemFlagsData::trusted());
    } else {
        // `call_memset` widens the i8 byte to the C `int` itself.
        let zero = b.ins().iconst(types::I8, 0);
        let n = b.ins().iconst(I64, size as i64);
        b.call_memset(cx.frontend, info, zero, n);
    }
}

/// The packet's walk ends with `verdict` (a sink port or [`VERDICT_DROP`]).
fn leave(b: &mut FunctionBuilder, pv: &PacketVars, verdict: u32) {
    let v = b.ins().iconst(I32, i64::from(verdict));
    b.def_var(pv.verdict, v);
    b.ins().jump(pv.end, &[]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(s: u16) -> Vec<Dest> {
        vec![Dest::Sink(s)]
    }

    fn pe(node: u32, in_port: u16) -> Vec<Dest> {
        vec![Dest::Pe { node, in_port }]
    }

    /// The longest run of ports that lead one to one to consecutive sinks
    /// or input ports of one NetPE; ports with no, several or uncounted
    /// destinations break runs.
    #[test]
    fn indexed_runs() {
        let all = |_| true;
        let run = |lo, hi, to| Some(IndexedPorts { lo, hi, to });
        // A router's lookup: port p to sink p.
        assert_eq!(indexed_run(&(0..16).map(sink).collect::<Vec<_>>(), all), run(0, 16, IndexedTo::Sink(0)));
        // A bridge: port 0 unconnected, 1..=8 to egress.1..=8, 9 floods.
        let mut bridge = vec![Vec::new()];
        bridge.extend((1..=8).map(|q| pe(1, q)));
        bridge.push((1..=8).flat_map(|q| pe(1, q)).collect());
        assert_eq!(indexed_run(&bridge, all), run(1, 9, IndexedTo::Pe { node: 1, in_port: 1 }));
        // Offsets and the longest of two runs; a different NetPE breaks one.
        let ports = [sink(5), sink(6), pe(2, 0), pe(2, 1), pe(2, 2), pe(3, 3)];
        assert_eq!(indexed_run(&ports, all), run(2, 5, IndexedTo::Pe { node: 2, in_port: 0 }));
        // Not consecutive, or one port: no run.
        assert_eq!(indexed_run(&[sink(0), sink(2)], all), None);
        assert_eq!(indexed_run(&[sink(0)], all), None);
        // An uncounted port (a derived counter) breaks the run.
        assert_eq!(indexed_run(&[sink(0), sink(1), sink(2)], |p| p != 1), None);
        // 65,536 input ports: the run stops short of the last, so `hi` fits 16 bits.
        let wide: Vec<Vec<Dest>> = (0..=u16::MAX).map(sink).collect();
        assert_eq!(indexed_run(&wide, all), run(0, u16::MAX, IndexedTo::Sink(0)));
    }
}
