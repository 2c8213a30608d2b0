//! The vector table mode ([`LinkMode::Table`](crate::link::LinkMode::Table)):
//! the NetPE functions' signature, the layout of the vector table's slots,
//! the function of each NetPE, and the batch loop's calls through the table.

use cranelift_codegen::ir::{AbiParam, GlobalValue, InstBuilder, MemFlagsData, Signature};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::FunctionBuilder;
use cranelift_module::{DataId, Module};
use netvm_vm::graph::{AppGraph, Dest};
use netvm_vm::FaultKind;

use super::{count_mem, leave, Build, PacketVars};
use crate::translate::{MemView, I32, I64};
use netvm_abi::VERDICT_DROP;

/// The signature of a NetPE function in table mode:
/// `(ctx, desc, pkt, len, in_port, idx) -> verdict`, tail calling convention.
pub(super) fn node_signature<M: Module>(module: &M) -> Signature {
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
pub(super) fn table_slots(graph: &AppGraph) -> Vec<usize> {
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

/// The vector table slot of the `j`-th destination of source `port`.
pub(super) fn source_slot(graph: &AppGraph, port: usize, j: usize) -> usize {
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

/// The vector table slot of NetPE `n` for the dispatch of pending copies.
pub(super) fn node_slot(graph: &AppGraph, n: usize) -> usize {
    table_slots(graph).len() - graph.out.len() + n
}

/// Table mode, in the batch loop: sends the buffer to `dests` by calling
/// the NetPE whose address is in vector table slot `slot(j)`; the verdict
/// is what the chain of tail calls returns.
pub(super) fn table_route_driver<M: Module>(
    b: &mut FunctionBuilder,
    build: &mut Build<'_, '_, M>,
    pv: &PacketVars,
    table: GlobalValue,
    dests: &[Dest],
    slot: &dyn Fn(usize) -> Option<usize>,
) {
    match dests {
        [] => {
            leave(b, pv, VERDICT_DROP);
        }
        [Dest::Sink(s)] => {
            build.sink(b, pv, *s);
            leave(b, pv, u32::from(*s));
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
pub(super) fn build_node_fn<M: Module>(b: &mut FunctionBuilder, build: &mut Build<'_, '_, M>, n: usize, vtable: DataId, _slots: &[usize]) {
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
    let exits = build.translate_push(b, n, env, counters);
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
            [] => ret(b, VERDICT_DROP),
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
        ret(b, VERDICT_DROP);
    }
    for (k, blk) in exits.faults.iter().enumerate() {
        if let Some(blk) = blk {
            b.switch_to_block(*blk);
            count_mem(b, counters, layout.fault(n, k));
            ret(b, FaultKind::ALL[k].code());
        }
    }
    if let Some(blk) = exits.exit {
        b.switch_to_block(blk);
        ret(b, VERDICT_DROP);
    }
    // The unused `end` block of the variables above.
    b.switch_to_block(pv.end);
    ret(b, VERDICT_DROP);
}
