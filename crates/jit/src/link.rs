//! Whole applications compiled into native code: direct linking (NetVM
//! paper §5.1, NetBind §II-B).
//!
//! An application (a DAG of NetPEs, [`AppGraph`]) becomes one function,
//! `netvm_run(ctx, descs, n, verdicts)`, that runs a batch of packets: the
//! per-batch loop itself is compiled, so a packet costs no call. Its sources
//! are entry blocks chosen by each packet's input port. Two bindings:
//!
//! - [`LinkMode::Direct`]: every NetPE's `.push` handler is translated once,
//!   into blocks of that one function; crossing a port is a jump to the next
//!   NetPE's entry block, with the input port as a block argument. Counters
//!   of the outcomes on the fast path are SSA values kept in registers
//!   across the whole batch and added to memory once at its end.
//! - [`LinkMode::Table`]: every NetPE is a function of its own; crossing a
//!   port loads the next NetPE's address from a vector table (a writable
//!   data object, one slot per edge: NetBind's "vector table") and tail-calls
//!   it. The batch loop calls the source's entry the same way.
//!
//! `netvm_init(ctx)` runs the `.init` handlers in topological order.
//!
//! Fan-out (a port or source with several destinations) follows the paper:
//! the buffer is duplicated and each copy runs to completion, in manifest
//! order, before the next; the last destination gets the original. The
//! compiled code keeps the pending copies with the host's help (four C-ABI
//! hooks, [`netvm_rt_fanout_save`] and friends), and only applications that
//! fan out call them. Everything crosses the C ABI described in
//! include/netvm.h ([`AppCtx`], [`XbDesc`], [`NodeMem`]), so the same code
//! serves the JIT ([`LinkedApp`]) and AOT objects.

use std::collections::BTreeMap;
use std::mem::offset_of;
use std::sync::Arc;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, Block, FuncRef, InstBuilder, MemFlagsData, Signature, StackSlotData, StackSlotKind, Value};
use cranelift_codegen::isa::CallConv;
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Switch, Variable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, DataDescription, DataId, FuncId, Linkage, Module};
use netvm_verify::Verified;
use netvm_vm::buffer::{Batch, PacketPool};
use netvm_vm::graph::{AppGraph, BatchOutput, Dest, FlowCounts, LinkedCode, NodeFlow, Verdict};
use netvm_vm::{FaultKind, Limits, Outcome, PeState};

pub use netvm_rt::fanout::{netvm_rt_emit, netvm_rt_fanout_copy, netvm_rt_fanout_pop, netvm_rt_fanout_save};
pub use netvm_rt::{AppCtx, Emitted, FanoutState, NodeMem, XbDesc};

use crate::analysis::{InfoReads, KnownSizes};
use crate::context::{self, OUT_DROP};
use crate::translate::{self, ctx_flags, ExitMode, FuncCx, MemView, MetaView, SegmentEnv, SegmentExits, I32, I64};
use crate::{host_isa, segment_facts, CodeMemory, JitError, JitOptions};

/// How the NetPEs of an application are bound together in native code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkMode {
    /// One function; a port crossing is a jump.
    Direct,
    /// One function per NetPE; a port crossing is a tail call through a vector table.
    Table,
}

impl LinkMode {
    /// `direct` or `table`.
    pub const fn name(self) -> &'static str {
        match self {
            LinkMode::Direct => "direct",
            LinkMode::Table => "table",
        }
    }

    /// Parses [`LinkMode::name`].
    pub fn from_name(s: &str) -> Option<LinkMode> {
        [LinkMode::Direct, LinkMode::Table].into_iter().find(|m| m.name() == s)
    }
}

mod off {
    use super::*;
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
    pub const NODE_SIZE: i32 = std::mem::size_of::<NodeMem>() as i32;
    pub const APP_BUDGET: i32 = offset_of!(AppCtx, budget) as i32;
    pub const APP_INFO: i32 = offset_of!(AppCtx, info) as i32;
    pub const APP_NODES: i32 = offset_of!(AppCtx, nodes) as i32;
    pub const APP_COUNTERS: i32 = offset_of!(AppCtx, counters) as i32;
    pub const APP_RT: i32 = offset_of!(AppCtx, rt) as i32;
    pub const APP_FANNED: i32 = offset_of!(AppCtx, fanned) as i32;
}

/// Where each counter of [`AppCtx::counters`] is. Per NetPE `n`, from
/// `node_base[n]`: one per output port, then `drop`, then one per fault
/// kind (in `FaultKind::ALL` order); then one per application input port
/// (packets that arrived there) from `source_base`; then `no_source`.
/// Everything else (packets in per input port, unconnected ports, sinks)
/// follows from these and the graph.
///
/// Some counters are not counted per packet but derived at the end of each
/// batch (flow conservation, [`AppLayout::derived`]): an output port (or a
/// source) whose only destination is a NetPE that nothing else feeds has
/// sent exactly what that NetPE did (its ports, drops and faults). In a chain
/// only the exits are then counted, as in a single NetPE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppLayout {
    /// First counter of each NetPE.
    pub node_base: Vec<usize>,
    /// Output ports of each NetPE.
    pub out_ports: Vec<usize>,
    /// First per-source counter.
    pub source_base: usize,
    /// Packets on an input port without a source.
    pub no_source: usize,
    /// Number of counters.
    pub counters: usize,
    /// Bytes of info memory ([`AppCtx::info`]).
    pub info_size: usize,
    /// `.datasize` of each NetPE.
    pub data_sizes: Vec<usize>,
    /// Derived counters: `(counter, NetPE)`, the counter being the sum of the
    /// NetPE's own counters, in the order to compute them (downstream first).
    pub derived: Vec<(usize, usize)>,
    /// Whether each counter is derived.
    is_derived: Vec<bool>,
}

impl AppLayout {
    fn new(graph: &AppGraph, modules: &[Verified]) -> AppLayout {
        let mut node_base = Vec::with_capacity(modules.len());
        let mut next = 0;
        for v in modules {
            node_base.push(next);
            next += v.module.out_ports as usize + 1 + FaultKind::ALL.len();
        }
        let source_base = next;
        next += graph.sources.len();
        let mut l = AppLayout {
            node_base,
            out_ports: modules.iter().map(|v| v.module.out_ports as usize).collect(),
            source_base,
            no_source: next,
            counters: next + 1,
            info_size: modules.iter().map(|v| v.module.info_size as usize).max().unwrap_or(0),
            data_sizes: modules.iter().map(|v| v.module.data_size as usize).collect(),
            derived: Vec::new(),
            is_derived: vec![false; next + 1],
        };
        l.derive(graph);
        l
    }

    /// Finds the derived counters (see the type's documentation).
    fn derive(&mut self, graph: &AppGraph) {
        // Edges into each NetPE, from sources and output ports alike.
        let mut fed = vec![0usize; self.node_base.len()];
        for d in graph.sources.iter().chain(graph.out.iter().flatten()).flatten() {
            if let Dest::Pe { node, .. } = d {
                fed[*node as usize] += 1;
            }
        }
        let sole = |dests: &[Dest]| match dests {
            [Dest::Pe { node, .. }] if fed[*node as usize] == 1 => Some(*node as usize),
            _ => None,
        };
        // Downstream first: a NetPE's own counters may be derived too.
        for &n in graph.order.iter().rev() {
            for (p, dests) in graph.out[n].iter().enumerate() {
                if let Some(m) = sole(dests) {
                    self.derived.push((self.out(n, p), m));
                }
            }
        }
        for (p, dests) in graph.sources.iter().enumerate() {
            if let Some(m) = sole(dests) {
                self.derived.push((self.source_base + p, m));
            }
        }
        for &(k, _) in &self.derived {
            self.is_derived[k] = true;
        }
    }

    /// Whether counter `k` is counted per packet (not derived).
    fn counted(&self, k: usize) -> bool {
        !self.is_derived[k]
    }

    /// The counters NetPE `m`'s outcomes are counted in: its ports, `drop`, its faults.
    fn outcomes(&self, m: usize) -> std::ops::Range<usize> {
        self.node_base[m]..self.fault(m, FaultKind::ALL.len() - 1) + 1
    }

    fn out(&self, n: usize, p: usize) -> usize {
        self.node_base[n] + p
    }

    fn drop(&self, n: usize) -> usize {
        self.node_base[n] + self.out_ports[n]
    }

    fn fault(&self, n: usize, k: usize) -> usize {
        self.node_base[n] + self.out_ports[n] + 1 + k
    }

    /// The counters of the runtime, derived from the raw `counters` by flow conservation.
    pub fn flow(&self, graph: &AppGraph, counters: &[u64]) -> FlowCounts {
        let wired = graph.wired_inputs();
        let mut nodes: Vec<NodeFlow> = (0..self.node_base.len())
            .map(|n| NodeFlow {
                packets_in: vec![0; wired[n]],
                packets_out: (0..self.out_ports[n]).map(|p| counters[self.out(n, p)]).collect(),
                dropped: counters[self.drop(n)],
                unconnected: 0,
                faults: std::array::from_fn(|k| counters[self.fault(n, k)]),
            })
            .collect();
        let mut sinks = vec![0u64; graph.sink_ports];
        let mut deliver = |dests: &[Dest], count: u64, nodes: &mut Vec<NodeFlow>| {
            for d in dests {
                match *d {
                    Dest::Pe { node, in_port } => nodes[node as usize].packets_in[usize::from(in_port)] += count,
                    Dest::Sink(s) => sinks[usize::from(s)] += count,
                }
            }
        };
        for (p, dests) in graph.sources.iter().enumerate() {
            deliver(dests, counters[self.source_base + p], &mut nodes);
        }
        for (n, ports) in graph.out.iter().enumerate() {
            for (p, dests) in ports.iter().enumerate() {
                let count = counters[self.out(n, p)];
                if dests.is_empty() {
                    nodes[n].unconnected += count;
                }
                deliver(dests, count, &mut nodes);
            }
        }
        FlowCounts { nodes, sinks, no_source: counters[self.no_source] }
    }
}

/// Counters at most this many are kept in registers across a batch (direct mode).
const MAX_SSA_COUNTERS: usize = 8;
/// Info memory up to this size is zeroed with inline stores, above with `memset`.
const INLINE_MEMSET: usize = 128;

/// The fan-out hooks declared in a module.
#[derive(Clone, Copy, Debug)]
struct Hooks {
    save: FuncId,
    copy: FuncId,
    pop: FuncId,
    emit: FuncId,
}

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

/// The distinct destinations of the graph: route ids for the dispatch after a pending copy is popped.
fn routes(graph: &AppGraph) -> Vec<Dest> {
    let mut r: Vec<Dest> = graph.out.iter().flatten().chain(&graph.sources).flatten().copied().collect();
    r.sort();
    r.dedup();
    r
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

/// Everything one function being built needs.
struct Build<'a, 'm, M: Module> {
    cx: FuncCx<'m, M>,
    graph: &'a AppGraph,
    modules: &'a [Verified],
    layout: &'a AppLayout,
    hooks: Option<Hooks>,
    hook_refs: BTreeMap<u32, FuncRef>,
    routes: &'a [Dest],
    dead: &'a [Vec<bool>],
    facts: &'a [crate::analysis::SegmentFacts],
    ptr: types::Type,
}

/// Per-packet values of the function being built (direct mode and the batch loop).
struct PacketVars {
    ctx: Value,
    desc: Variable,
    pkt: Variable,
    len: Variable,
    idx: Variable,
    verdict: Variable,
    info: Value,
    counters: Value,
    rt: Value,
    budget: Value,
    nodes: Value,
    /// SSA counters: counter index → variable.
    ssa: BTreeMap<usize, Variable>,
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
                let v = b.ins().iconst(I32, i64::from(OUT_DROP));
                b.def_var(pv.verdict, v);
                b.ins().jump(pv.end, &[]);
            }
            [Dest::Sink(s)] => {
                self.sink(b, pv, *s);
                let v = b.ins().iconst(I32, i64::from(*s));
                b.def_var(pv.verdict, v);
                b.ins().jump(pv.end, &[]);
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

    /// At a sink: a duplicated packet's copies leave through the host (`netvm_rt_emit`).
    fn sink(&mut self, b: &mut FunctionBuilder, pv: &PacketVars, s: u16) {
        let Some(h) = self.hooks else { return };
        let fanned = b.ins().load(I32, MemFlagsData::trusted(), pv.ctx, off::APP_FANNED);
        let call = b.create_block();
        let cont = b.create_block();
        b.ins().brif(fanned, call, &[], cont, &[]);
        b.switch_to_block(call);
        let f = self.hook(b, h.emit);
        let (idx, pkt, len) = (b.use_var(pv.idx), b.use_var(pv.pkt), b.use_var(pv.len));
        let port = b.ins().iconst(I32, i64::from(s));
        b.ins().call(f, &[pv.rt, idx, port, pkt, len]);
        b.ins().jump(cont, &[]);
        b.switch_to_block(cont);
    }

    /// Duplicates the current buffer for `rest` (all destinations but the
    /// first): the last keeps the buffer, the others get copies (pending
    /// with the host), and the first continues here on a fresh copy.
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
            let keep = b.ins().iconst(I32, i64::from(k + 1 == rest.len()));
            b.ins().call(save, &[pv.rt, idx, route, pkt, len, pv.info, info_len, keep]);
        }
        let inst = b.ins().call(copy, &[pv.rt, idx, pkt, len]);
        let fresh = b.inst_results(inst)[0];
        b.def_var(pv.pkt, fresh);
    }

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
        let info_len = b.ins().iconst(I64, i64::from(self.modules[n].module.info_size));
        SegmentEnv {
            mems: [pkt, MemView { base: info, len: info_len }, data],
            copros,
            meta: Some(MetaView {
                base: meta,
                wirelen: off::XB_WIRELEN,
                ts_sec: off::XB_TS_SEC,
                ts_nsec: off::XB_TS_NSEC,
                seq: off::XB_SEQ,
            }),
            in_port: Some(in_port),
            budget,
            exits: ExitMode::Jump,
        }
    }

    /// Translates NetPE `n`'s `.push` handler in `env` at the current block.
    fn translate_push(&mut self, b: &mut FunctionBuilder, n: usize, env: SegmentEnv) -> SegmentExits {
        let v = &self.modules[n];
        translate::translate_segment(b, &mut self.cx, &v.push, &v.module, &self.facts[n], &self.dead[n], env)
    }
}

fn count_mem(b: &mut FunctionBuilder, counters: Value, k: usize) {
    let flags = MemFlagsData::trusted();
    let o = (k * 8) as i32;
    let x = b.ins().load(I64, flags, counters, o);
    let x = b.ins().iadd_imm_s(x, 1);
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
        let zero = b.ins().iconst(types::I8, 0);
        let zero = b.ins().uextend(I32, zero);
        let n = b.ins().iconst(I64, size as i64);
        b.call_memset(cx.frontend, info, zero, n);
    }
}

/// Compiles `graph` into `module`: defines `netvm_run`, `netvm_init` and,
/// in table mode, the NetPE functions and the vector table. For an
/// `object` (the C ABI: include/netvm.h), also `netvm_layout` (whose
/// `budget` is `budget`), and `netvm_init` even if no NetPE has `.init`.
/// `text` receives the generated code when `opts.keep_text`.
#[allow(clippy::too_many_arguments)]
pub fn define_app<M: Module>(
    module: &mut M,
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
    let facts: Vec<_> = modules
        .iter()
        .map(|v| {
            let m = &v.module;
            segment_facts(&v.push, m, opts.domain, KnownSizes { info: Some(u64::from(m.info_size)), data: Some(u64::from(m.data_size)) })
        })
        .collect();
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
    let mut ctx = module.make_context();
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

    let shared = Shared { graph, modules, layout: &layout, helpers, hooks, routes, dead, facts, ptr, opts };
    // netvm_run
    let vt = vtable.as_ref().map(|(d, s)| (*d, s.as_slice()));
    define_linked_fn(module, &mut ctx, &mut fctx, &shared, run, "netvm_run", run_sig, text, |b, build| build_run(b, build, mode, vt))?;
    // NetPE functions (table mode)
    if let Some((data, slots)) = &vtable {
        for (n, f) in pe_funcs.iter().enumerate() {
            let sig = node_signature(module);
            define_linked_fn(module, &mut ctx, &mut fctx, &shared, *f, &format!("netvm_pe{n}"), sig, text, |b, build| {
                build_node_fn(b, build, n, *data, slots)
            })?;
        }
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
    // netvm_init
    if let Some(init) = init {
        module.clear_context(&mut ctx);
        ctx.func.signature = init_sig;
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let mut cx = FuncCx::new(module, helpers, opts.domain);
        build_init(&mut b, &mut cx, graph, modules, opts, ptr);
        b.seal_all_blocks();
        let fe = cx.frontend;
        drop(cx);
        b.finalize(fe);
        define(module, &mut ctx, init, "netvm_init", opts, text)?;
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

/// What every function of a linked application is built from.
struct Shared<'a> {
    graph: &'a AppGraph,
    modules: &'a [Verified],
    layout: &'a AppLayout,
    helpers: context::Helpers,
    hooks: Option<Hooks>,
    routes: Vec<Dest>,
    dead: Vec<Vec<bool>>,
    facts: Vec<crate::analysis::SegmentFacts>,
    ptr: types::Type,
    opts: JitOptions,
}

/// Builds one function of a linked application with `body` and defines it
/// in `module` as `id`.
#[allow(clippy::too_many_arguments)]
fn define_linked_fn<M: Module>(
    module: &mut M,
    ctx: &mut Context,
    fctx: &mut FunctionBuilderContext,
    sh: &Shared,
    id: FuncId,
    name: &str,
    sig: Signature,
    text: &mut LinkedText,
    body: impl FnOnce(&mut FunctionBuilder, &mut Build<'_, '_, M>),
) -> Result<(), JitError> {
    module.clear_context(ctx);
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
    };
    body(&mut b, &mut build);
    b.seal_all_blocks();
    let fe = build.cx.frontend;
    drop(build);
    b.finalize(fe);
    define(module, ctx, id, name, sh.opts, text)
}

fn define<M: Module>(
    module: &mut M,
    ctx: &mut Context,
    id: FuncId,
    name: &str,
    opts: JitOptions,
    text: &mut LinkedText,
) -> Result<(), JitError> {
    ctx.set_disasm(opts.keep_text);
    module.define_function(id, ctx).map_err(|e| JitError::Codegen(format!("{name}: {e:?}")))?;
    let size = ctx.compiled_code().map_or(0, |c| c.code_buffer().len());
    text.code_size.push((name.to_string(), size));
    if opts.keep_text {
        text.clif.push((name.to_string(), ctx.func.display().to_string()));
        text.asm.push((name.to_string(), ctx.compiled_code().and_then(|c| c.vcode.clone()).unwrap_or_default()));
    }
    Ok(())
}

/// The signature of a NetPE function in table mode:
/// `(ctx, desc, pkt, len, in_port, idx) -> verdict`, tail calling convention.
fn node_signature<M: Module>(module: &M) -> Signature {
    let ptr = module.target_config().pointer_type();
    let mut s = Signature::new(CallConv::Tail);
    s.params.extend([
        AbiParam::new(ptr),
        AbiParam::new(ptr),
        AbiParam::new(ptr),
        AbiParam::new(I64),
        AbiParam::new(I32),
        AbiParam::new(I64),
    ]);
    s.returns.push(AbiParam::new(I32));
    s
}

/// Vector table slots (table mode): one per edge into a NetPE (sources
/// first, then each NetPE's ports in order), then one per NetPE for the
/// dispatch of pending copies. Each slot names the NetPE it points to.
fn table_slots(graph: &AppGraph) -> Vec<usize> {
    let mut slots = Vec::new();
    for d in graph.sources.iter().chain(graph.out.iter().flatten()).flatten() {
        if let Dest::Pe { node, .. } = d {
            slots.push(*node as usize);
        }
    }
    slots.extend(0..graph.out.len());
    slots
}

/// The vector table slot of the `j`-th destination of a source (`None`) or
/// of NetPE `n`'s port `p` (`Some((n, p))`).
fn edge_slot(graph: &AppGraph, at: Option<(usize, usize)>, j: usize) -> usize {
    let mut k = 0;
    let lists = graph
        .sources
        .iter()
        .enumerate()
        .map(|(p, d)| (None, p, d))
        .chain(graph.out.iter().enumerate().flat_map(|(n, ports)| ports.iter().enumerate().map(move |(p, d)| (Some(n), p, d))));
    for (owner, p, dests) in lists {
        for (jj, d) in dests.iter().enumerate() {
            if matches!(d, Dest::Pe { .. }) {
                let here = match (owner, at) {
                    (None, None) => false,
                    (Some(n), Some((an, ap))) => n == an && p == ap,
                    _ => false,
                };
                if here && jj == j {
                    return k;
                }
                k += 1;
            }
        }
    }
    unreachable!("edge has a slot")
}

fn source_slot(graph: &AppGraph, port: usize, j: usize) -> usize {
    let mut k = 0;
    for (p, dests) in graph.sources.iter().enumerate() {
        for (jj, d) in dests.iter().enumerate() {
            if matches!(d, Dest::Pe { .. }) {
                if p == port && jj == j {
                    return k;
                }
                k += 1;
            }
        }
    }
    unreachable!("source has a slot")
}

fn node_slot(graph: &AppGraph, n: usize) -> usize {
    table_slots(graph).len() - graph.out.len() + n
}

/// `netvm_run`: the batch loop, the source dispatch, and (direct mode) every NetPE.
fn build_run<M: Module>(b: &mut FunctionBuilder, build: &mut Build<'_, '_, M>, mode: LinkMode, vtable: Option<(DataId, &[usize])>) {
    let ptr = build.ptr;
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let params = b.block_params(entry).to_vec();
    let (ctx, descs, n, verdicts) = (params[0], params[1], params[2], params[3]);
    let n64 = b.ins().uextend(I64, n);
    let mut pv = PacketVars::load(b, ctx, ptr, build.hooks.is_some());
    let (info, counters, rt) = (pv.info, pv.counters, pv.rt);
    let end = pv.end;
    // Counters kept in registers (direct mode): sources, then ports and drops.
    if mode == LinkMode::Direct {
        let l = build.layout;
        let candidates = (0..build.graph.sources.len())
            .map(|p| l.source_base + p)
            .chain((0..l.node_base.len()).flat_map(|nn| (0..l.out_ports[nn]).map(move |p| l.out(nn, p)).chain([l.drop(nn)])));
        let zero64 = b.ins().iconst(I64, 0);
        for k in candidates.filter(|k| l.counted(*k)).take(MAX_SSA_COUNTERS) {
            let v = b.declare_var(I64);
            b.def_var(v, zero64);
            pv.ssa.insert(k, v);
        }
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

    // One packet.
    b.switch_to_block(body);
    let i = b.use_var(pv.idx);
    let o = b.ins().imul_imm_s(i, off::XB_SIZE);
    let d = b.ins().iadd(descs, o);
    b.def_var(pv.desc, d);
    let data = b.ins().load(ptr, ctx_flags(), d, off::XB_DATA);
    let caplen = b.ins().load(I32, ctx_flags(), d, off::XB_CAPLEN);
    let caplen = b.ins().uextend(I64, caplen);
    b.def_var(pv.pkt, data);
    b.def_var(pv.len, caplen);
    zero_info(b, &build.cx, info, build.layout.info_size);
    if build.hooks.is_some() {
        let z = b.ins().iconst(I32, 0);
        b.ins().store(MemFlagsData::trusted(), z, ctx, off::APP_FANNED);
    }
    let in_port = b.ins().load(types::I16, ctx_flags(), d, off::XB_IN_PORT);
    let in_port = b.ins().uextend(I32, in_port);
    let no_source = b.create_block();
    let mut sw = Switch::new();
    let mut src_blocks = Vec::new();
    for (p, dests) in build.graph.sources.iter().enumerate() {
        if !dests.is_empty() {
            let blk = b.create_block();
            sw.set_entry(p as u128, blk);
            src_blocks.push((p, blk));
        }
    }
    sw.emit(b, in_port, no_source);

    b.switch_to_block(no_source);
    count_mem(b, counters, build.layout.no_source);
    let v = b.ins().iconst(I32, i64::from(OUT_DROP));
    b.def_var(pv.verdict, v);
    b.ins().jump(end, &[]);

    let mut entries: BTreeMap<usize, Block> = BTreeMap::new();
    let mut translated = std::collections::BTreeSet::new();
    match mode {
        LinkMode::Direct => {
            for (p, blk) in &src_blocks {
                b.switch_to_block(*blk);
                build.count(b, &pv, build.layout.source_base + p);
                let dests = build.graph.sources[*p].clone();
                build.route(b, &pv, &mut entries, &dests);
            }
            // Every NetPE reached, each once (its exits may reach more).
            translate_reached(b, build, &pv, &mut entries, &mut translated);
        }
        LinkMode::Table => {
            let (data, _) = vtable.expect("table mode has a vector table");
            let table = build.cx.module.declare_data_in_func(data, b.func);
            for (p, blk) in &src_blocks {
                b.switch_to_block(*blk);
                if build.layout.counted(build.layout.source_base + p) {
                    count_mem(b, counters, build.layout.source_base + p);
                }
                let dests = build.graph.sources[*p].clone();
                let g = build.graph;
                table_route_driver(b, build, &pv, table, &dests, &|j| Some(source_slot(g, *p, j)));
            }
        }
    }

    // After the packet's last exchange buffer: pending copies, then the verdict.
    b.switch_to_block(end);
    if let Some(h) = build.hooks {
        let slot = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 16, 3));
        let out = b.ins().stack_addr(ptr, slot, 0);
        let pop = build.hook(b, h.pop);
        let idx = b.use_var(pv.idx);
        let info_len = b.ins().iconst(I64, build.layout.info_size as i64);
        let inst = b.ins().call(pop, &[rt, idx, info, info_len, out]);
        let r = b.inst_results(inst)[0];
        let store = b.create_block();
        let next = b.create_block();
        let none = b.ins().icmp_imm_s(IntCC::SignedLessThan, r, 0);
        b.ins().brif(none, store, &[], next, &[]);
        b.switch_to_block(next);
        let data = b.ins().stack_load(ptr, ptr, slot, 0);
        let len = b.ins().stack_load(ptr, I64, slot, 8);
        b.def_var(pv.pkt, data);
        b.def_var(pv.len, len);
        let mut sw = Switch::new();
        let table = vtable.map(|(data, _)| build.cx.module.declare_data_in_func(data, b.func));
        let route_blocks: Vec<Block> = (0..build.routes.len()).map(|_| b.create_block()).collect();
        for (k, blk) in route_blocks.iter().enumerate() {
            sw.set_entry(k as u128, *blk);
        }
        sw.emit(b, r, store);
        for (k, blk) in route_blocks.into_iter().enumerate() {
            b.switch_to_block(blk);
            let d = build.routes[k];
            match (mode, table) {
                (LinkMode::Table, Some(t)) => {
                    let g = build.graph;
                    table_route_driver(b, build, &pv, t, &[d], &|_| match d {
                        Dest::Pe { node, .. } => Some(node_slot(g, node as usize)),
                        Dest::Sink(_) => None,
                    })
                }
                _ => build.route(b, &pv, &mut entries, &[d]),
            }
        }
        if mode == LinkMode::Direct {
            // Pending copies may reach NetPEs no path reached before.
            translate_reached(b, build, &pv, &mut entries, &mut translated);
        }
        b.switch_to_block(store);
    }
    let i = b.use_var(pv.idx);
    let v = b.use_var(pv.verdict);
    let o = b.ins().ishl_imm_u(i, 2);
    let a = b.ins().iadd(verdicts, o);
    b.ins().store(MemFlagsData::trusted(), v, a, 0);
    let i1 = b.ins().iadd_imm_s(i, 1);
    b.def_var(pv.idx, i1);
    // The loop is rotated: the test at its bottom saves a jump per packet.
    let more = b.ins().icmp(IntCC::UnsignedLessThan, i1, n64);
    b.ins().brif(more, body, &[], exit, &[]);

    // End of the batch: registers to memory.
    b.switch_to_block(exit);
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
    translated: &mut std::collections::BTreeSet<usize>,
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
    let env = build.push_env(b, pv.nodes, pkt, meta, in_port, pv.budget, pv.info, n);
    let exits = build.translate_push(b, n, env);
    wire_exits(b, build, pv, entries, n, exits);
}

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
    if let Some(blk) = exits.drop {
        b.switch_to_block(blk);
        build.count(b, pv, layout.drop(n));
        let v = b.ins().iconst(I32, i64::from(OUT_DROP));
        b.def_var(pv.verdict, v);
        b.ins().jump(pv.end, &[]);
    }
    for (k, blk) in exits.faults.iter().enumerate() {
        if let Some(blk) = blk {
            b.switch_to_block(*blk);
            count_mem(b, pv.counters, layout.fault(n, k));
            let v = b.ins().iconst(I32, i64::from(context::fault_code(FaultKind::ALL[k])));
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

/// Table mode, in the batch loop: sends the buffer to `dests` by calling
/// the NetPE whose address is in vector table slot `slot(j)`; the verdict
/// is what the chain of tail calls returns.
fn table_route_driver<M: Module>(
    b: &mut FunctionBuilder,
    build: &mut Build<'_, '_, M>,
    pv: &PacketVars,
    table: cranelift_codegen::ir::GlobalValue,
    dests: &[Dest],
    slot: &dyn Fn(usize) -> Option<usize>,
) {
    match dests {
        [] => {
            let v = b.ins().iconst(I32, i64::from(OUT_DROP));
            b.def_var(pv.verdict, v);
            b.ins().jump(pv.end, &[]);
        }
        [Dest::Sink(s)] => {
            build.sink(b, pv, *s);
            let v = b.ins().iconst(I32, i64::from(*s));
            b.def_var(pv.verdict, v);
            b.ins().jump(pv.end, &[]);
        }
        [Dest::Pe { in_port, .. }] => {
            let k = slot(0).expect("a NetPE destination has a slot");
            let sig = node_signature(&*build.cx.module);
            let sigref = b.import_signature(sig);
            let base = b.ins().symbol_value(build.ptr, table);
            let f = b.ins().load(build.ptr, MemFlagsData::trusted(), base, (k * build.ptr.bytes() as usize) as i32);
            let (desc, pkt, len, idx) = (b.use_var(pv.desc), b.use_var(pv.pkt), b.use_var(pv.len), b.use_var(pv.idx));
            let ip = b.ins().iconst(I32, i64::from(*in_port));
            let inst = b.ins().call_indirect(sigref, f, &[pv.ctx, desc, pkt, len, ip, idx]);
            let v = b.inst_results(inst)[0];
            b.def_var(pv.verdict, v);
            b.ins().jump(pv.end, &[]);
        }
        [first, rest @ ..] => {
            build.fanout(b, pv, rest);
            table_route_driver(b, build, pv, table, std::slice::from_ref(first), &|_| slot(0));
        }
    }
}

/// Table mode: the function of NetPE `n`.
fn build_node_fn<M: Module>(b: &mut FunctionBuilder, build: &mut Build<'_, '_, M>, n: usize, vtable: DataId, _slots: &[usize]) {
    let ptr = build.ptr;
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let p = b.block_params(entry).to_vec();
    let (ctx, desc, pkt, len, in_port, idx) = (p[0], p[1], p[2], p[3], p[4], p[5]);
    // Variables only so that the fan-out code can replace the packet.
    let pv = PacketVars::load(b, ctx, ptr, build.hooks.is_some());
    let (budget, info, counters, nodes) = (pv.budget, pv.info, pv.counters, pv.nodes);
    let env = build.push_env(b, nodes, MemView { base: pkt, len }, desc, in_port, budget, info, n);
    let exits = build.translate_push(b, n, env);
    let table = build.cx.module.declare_data_in_func(vtable, b.func);
    let layout = build.layout;
    let ret = |b: &mut FunctionBuilder, code: u32| {
        let v = b.ins().iconst(I32, i64::from(code));
        b.ins().return_(&[v]);
    };
    for (port, blk) in exits.ports.iter().enumerate() {
        let Some(blk) = blk else { continue };
        b.switch_to_block(*blk);
        b.def_var(pv.desc, desc);
        b.def_var(pv.pkt, pkt);
        b.def_var(pv.len, len);
        b.def_var(pv.idx, idx);
        if layout.counted(layout.out(n, port)) {
            count_mem(b, counters, layout.out(n, port));
        }
        let dests = build.graph.out[n][port].clone();
        let mut dests = dests.as_slice();
        if let [_, rest @ ..] = dests {
            if !rest.is_empty() {
                build.fanout(b, &pv, rest);
                dests = &dests[..1];
            }
        }
        match dests {
            [] => ret(b, OUT_DROP),
            [Dest::Sink(s)] => {
                build.sink(b, &pv, *s);
                ret(b, u32::from(*s));
            }
            [Dest::Pe { in_port, .. }] => {
                let k = edge_slot(build.graph, Some((n, port)), 0);
                let sig = node_signature(&*build.cx.module);
                let sigref = b.import_signature(sig);
                let base = b.ins().symbol_value(ptr, table);
                let f = b.ins().load(ptr, MemFlagsData::trusted(), base, (k * ptr.bytes() as usize) as i32);
                let ip = b.ins().iconst(I32, i64::from(*in_port));
                let pk = b.use_var(pv.pkt);
                b.ins().return_call_indirect(sigref, f, &[ctx, desc, pk, len, ip, idx]);
            }
            _ => unreachable!("fan-out handled above"),
        }
    }
    if let Some(blk) = exits.drop {
        b.switch_to_block(blk);
        count_mem(b, counters, layout.drop(n));
        ret(b, OUT_DROP);
    }
    for (k, blk) in exits.faults.iter().enumerate() {
        if let Some(blk) = blk {
            b.switch_to_block(*blk);
            count_mem(b, counters, layout.fault(n, k));
            ret(b, context::fault_code(FaultKind::ALL[k]));
        }
    }
    if let Some(blk) = exits.exit {
        b.switch_to_block(blk);
        ret(b, OUT_DROP);
    }
    // The unused `end` block of the variables above.
    b.switch_to_block(pv.end);
    ret(b, OUT_DROP);
}

/// `netvm_init`: every `.init` handler in topological order. Returns 0, or
/// `1 + 8 * netpe + fault index` for the first that faults.
fn build_init<M: Module>(
    b: &mut FunctionBuilder,
    cx: &mut FuncCx<'_, M>,
    graph: &AppGraph,
    modules: &[Verified],
    opts: JitOptions,
    ptr: types::Type,
) {
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let ctx = b.block_params(entry)[0];
    let budget = b.ins().load(I64, ctx_flags(), ctx, off::APP_BUDGET);
    let nodes = b.ins().load(ptr, ctx_flags(), ctx, off::APP_NODES);
    let null = b.ins().iconst(ptr, 0);
    let zero64 = b.ins().iconst(I64, 0);
    for &n in &graph.order {
        let v = &modules[n];
        let Some(seg) = &v.init else { continue };
        let node_off = off::NODE_SIZE * n as i32;
        let ld = |b: &mut FunctionBuilder, ty, o| b.ins().load(ty, ctx_flags(), nodes, node_off + o);
        let data = MemView { base: ld(b, ptr, off::NODE_DATA), len: ld(b, I64, off::NODE_DATA_LEN) };
        let copros = (ld(b, ptr, off::NODE_COPROS), ld(b, I64, off::NODE_NCOPROS));
        let empty = MemView { base: null, len: zero64 };
        let env = SegmentEnv { mems: [empty, empty, data], copros, meta: None, in_port: None, budget, exits: ExitMode::Jump };
        let m = &v.module;
        let facts = segment_facts(seg, m, opts.domain, KnownSizes { info: Some(0), data: Some(u64::from(m.data_size)) });
        let exits = translate::translate_segment(b, cx, seg, m, &facts, &[], env);
        let next = b.create_block();
        if let Some(blk) = exits.exit {
            b.switch_to_block(blk);
            b.ins().jump(next, &[]);
        }
        for (k, blk) in exits.faults.iter().enumerate() {
            if let Some(blk) = blk {
                b.switch_to_block(*blk);
                let v = b.ins().iconst(I32, (1 + 8 * n + k) as i64);
                b.ins().return_(&[v]);
            }
        }
        b.switch_to_block(next);
    }
    let z = b.ins().iconst(I32, 0);
    b.ins().return_(&[z]);
}

/// `netvm_run` as a Rust function pointer.
type RunFn = unsafe extern "C" fn(*mut AppCtx, *mut XbDesc, u32, *mut u32) -> u32;
/// `netvm_init` as a Rust function pointer.
type InitFn = unsafe extern "C" fn(*mut AppCtx) -> u32;

fn hook_symbols() -> Vec<(&'static str, *const u8)> {
    vec![
        ("netvm_rt_fanout_save", netvm_rt_fanout_save as *const u8),
        ("netvm_rt_fanout_copy", netvm_rt_fanout_copy as *const u8),
        ("netvm_rt_fanout_pop", netvm_rt_fanout_pop as *const u8),
        ("netvm_rt_emit", netvm_rt_emit as *const u8),
    ]
}

/// Padding around per-worker memory written per packet, in bytes (a cache line).
const PAD_BYTES: usize = 64;
/// The same in counters.
const PAD_WORDS: usize = PAD_BYTES / 8;

/// The compiled code of an application, shared by every worker's [`LinkedApp`].
struct LinkedProgram {
    run: RunFn,
    fanout: bool,
    init: Option<InitFn>,
    graph: AppGraph,
    layout: AppLayout,
    budget: u64,
    text: LinkedText,
    _memory: Arc<CodeMemory>,
}

// SAFETY: the program is immutable machine code and its description; the
// function pointers stay valid as long as `_memory` keeps the code mapped,
// and the code is reentrant for distinct contexts (include/netvm.h).
unsafe impl Send for LinkedProgram {}
// SAFETY: as above: nothing in it is mutated after compilation.
unsafe impl Sync for LinkedProgram {}

/// An application compiled by the JIT: [`LinkedCode`] for the runtime. One
/// per worker, each with its own counters, info memory and fan-out state
/// over the same code ([`LinkedCode::fork`]).
pub struct LinkedApp {
    prog: Arc<LinkedProgram>,
    counters: Vec<u64>,
    info: Vec<u8>,
    node_mem: Vec<NodeMem>,
    fanout: Box<FanoutState>,
}

// SAFETY: the raw pointers in `node_mem` are scratch, rebuilt from the
// borrows passed to every call before compiled code sees them; nothing in
// a `LinkedApp` refers to another thread's data between calls.
unsafe impl Send for LinkedApp {}

impl std::fmt::Debug for LinkedApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkedApp").field("layout", &self.prog.layout).field("code_size", &self.prog.text.code_size).finish()
    }
}

impl LinkedApp {
    /// Compiles an application for this host.
    pub fn compile(
        graph: &AppGraph,
        modules: &[Verified],
        limits: &Limits,
        mode: LinkMode,
        opts: JitOptions,
    ) -> Result<LinkedApp, JitError> {
        if modules.len() != graph.out.len() {
            return Err(JitError::Codegen(format!("{} modules for a graph of {} NetPEs", modules.len(), graph.out.len())));
        }
        let isa = host_isa(opts, mode == LinkMode::Table)?;
        let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
        for (name, ptr) in context::helper_symbols().into_iter().chain(hook_symbols()) {
            builder.symbol(name, ptr);
        }
        let mut module = JITModule::new(builder);
        let mut text = LinkedText::default();
        let syms = define_app(&mut module, graph, modules, limits.budget, false, mode, opts, &mut text)?;
        module.finalize_definitions().map_err(|e| JitError::Codegen(e.to_string()))?;
        // SAFETY: `netvm_run` and `netvm_init` were just compiled with the
        // signatures `(ptr, ptr, i32, ptr) -> i32` and `(ptr) -> i32` in the
        // host's default calling convention: `RunFn` and `InitFn`.
        let (run, init) = unsafe {
            (
                std::mem::transmute::<*const u8, RunFn>(module.get_finalized_function(syms.run)),
                syms.init.map(|f| std::mem::transmute::<*const u8, InitFn>(module.get_finalized_function(f))),
            )
        };
        let prog = LinkedProgram {
            run,
            fanout: graph.has_fanout(),
            init,
            graph: graph.clone(),
            budget: limits.budget,
            layout: syms.layout,
            text,
            _memory: Arc::new(CodeMemory { module: Some(module) }),
        };
        Ok(LinkedApp::context(Arc::new(prog)))
    }

    /// A fresh context (zeroed counters) over compiled code.
    fn context(prog: Arc<LinkedProgram>) -> LinkedApp {
        LinkedApp {
            // Padded by a cache line on each side: each worker's context
            // writes these per packet, and must not share a line with
            // another's (the contexts are made one after another).
            counters: vec![0; prog.layout.counters + 2 * PAD_WORDS],
            info: vec![0; prog.layout.info_size.max(1) + 2 * PAD_BYTES],
            node_mem: Vec::new(),
            fanout: Box::default(),
            prog,
        }
    }

    /// The generated code (`keep_text`) and its sizes.
    pub fn text(&self) -> &LinkedText {
        &self.prog.text
    }

    /// The counter and memory layout.
    pub fn layout(&self) -> &AppLayout {
        &self.prog.layout
    }

    /// The raw counters ([`AppLayout`]).
    pub fn raw_counters(&self) -> &[u64] {
        &self.counters[PAD_WORDS..self.counters.len() - PAD_WORDS]
    }

    /// Points the node table at `states`' memories.
    fn bind(&mut self, states: &mut [PeState]) {
        let layout = &self.prog.layout;
        assert_eq!(states.len(), layout.node_base.len(), "one state per NetPE");
        self.node_mem.clear();
        for (st, size) in states.iter_mut().zip(&layout.data_sizes) {
            // Compiled code relies on data memory being exactly `.datasize` bytes.
            assert_eq!(st.data.len(), *size, "data memory of the size its module declares");
            self.node_mem.push(NodeMem {
                data: st.data.as_mut_ptr(),
                data_len: st.data.len() as u64,
                copros: st.copros.as_mut_ptr().cast(),
                ncopros: st.copros.len() as u64,
            });
        }
    }

    fn ctx(&mut self) -> AppCtx {
        AppCtx {
            budget: self.prog.budget,
            info: self.info[PAD_BYTES..].as_mut_ptr(),
            nodes: self.node_mem.as_ptr(),
            counters: self.counters[PAD_WORDS..].as_mut_ptr(),
            rt: (&mut *self.fanout as *mut FanoutState).cast(),
            fanned: 0,
            reserved: 0,
        }
    }

    /// Runs `descs` (prepared by the caller, whose packets `states` belong to
    /// no one else for the call) and writes one raw verdict per packet;
    /// duplicated packets are not reported. For benchmarks of the compiled
    /// batch function alone.
    ///
    /// # Safety
    /// Every descriptor must describe a live, writable buffer of `caplen`
    /// bytes not accessed elsewhere during the call.
    pub unsafe fn run_descs(&mut self, states: &mut [PeState], descs: &mut [XbDesc], verdicts: &mut [u32]) {
        assert!(verdicts.len() >= descs.len());
        self.bind(states);
        let mut ctx = self.ctx();
        // SAFETY: `ctx` points to live memories: info (`info_size` bytes),
        // the node table built by `bind` from exclusively borrowed states,
        // the counters, and the fan-out state; the caller guarantees the
        // descriptors; `verdicts` has room for every packet. Compiled code
        // checks every other access.
        unsafe { (self.prog.run)(&mut ctx, descs.as_mut_ptr(), descs.len() as u32, verdicts.as_mut_ptr()) };
        self.fanout.clear();
    }
}

/// Decodes a raw verdict of compiled code.
pub fn decode_verdict(raw: u32) -> Verdict {
    match context::decode_outcome(raw) {
        Outcome::Forward(p) => Verdict::Output(p),
        Outcome::Fault(k) => Verdict::Fault(k),
        Outcome::Drop | Outcome::Exit => Verdict::Drop,
    }
}

impl LinkedCode for LinkedApp {
    fn init(&mut self, states: &mut [PeState]) -> Result<(), (usize, Outcome)> {
        let Some(init) = self.prog.init else { return Ok(()) };
        self.bind(states);
        let mut ctx = self.ctx();
        // SAFETY: as in `run_descs`; `.init` touches data memory and coprocessors only.
        let r = unsafe { init(&mut ctx) };
        if r == 0 {
            return Ok(());
        }
        let (n, k) = ((r as usize - 1) / 8, (r as usize - 1) % 8);
        Err((n, Outcome::Fault(FaultKind::ALL[k.min(FaultKind::ALL.len() - 1)])))
    }

    fn run(&mut self, states: &mut [PeState], batch: &mut Batch, pool: &PacketPool, out: &mut BatchOutput) {
        let n = batch.len();
        out.clear();
        out.verdicts.resize(n, 0);
        if n == 0 {
            return;
        }
        self.bind(states);
        if self.prog.fanout {
            self.fanout.set_pool(pool);
            self.fanout.reserve(n, self.prog.layout.info_size);
            out.fanout.reserve(2 * n);
        }
        let mut ctx = self.ctx();
        // SAFETY: `ctx` as in `run_descs`; the batch's descriptors point into
        // memory it holds, which its exclusive borrow keeps from anyone else
        // for the call (the runtime gives programs that write packet memory
        // descriptors that never overlap); `out.verdicts` has room for `n`.
        // Compiled code writes verdicts for the packets in the real
        // encoding, which `Verdict::decode` reads.
        unsafe { (self.prog.run)(&mut ctx, batch.descs.as_mut_ptr(), n as u32, out.verdicts.as_mut_ptr()) };
        let fo = &mut self.fanout;
        if !fo.fanned().is_empty() {
            // Exits are in packet order: count each fanned packet's in one pass.
            let mut e = 0;
            let emitted = fo.emitted();
            for &i in fo.fanned() {
                while emitted.get(e).is_some_and(|x| x.0 < i) {
                    e += 1;
                }
                let start = e;
                while emitted.get(e).is_some_and(|x| x.0 == i) {
                    e += 1;
                }
                out.verdicts[i as usize] = Verdict::Fanout { outputs: (e - start) as u32 }.encode();
            }
            fo.take_exits(&mut out.fanout);
        }
        fo.clear();
    }

    fn flow(&self) -> FlowCounts {
        self.prog.layout.flow(&self.prog.graph, self.raw_counters())
    }

    fn fork(&self) -> Box<dyn LinkedCode> {
        Box::new(LinkedApp::context(Arc::clone(&self.prog)))
    }

    fn reserve(&mut self, packets: usize) {
        self.node_mem.reserve(self.prog.layout.node_base.len());
        if self.prog.fanout {
            self.fanout.reserve(packets, self.prog.layout.info_size);
        }
    }
}
