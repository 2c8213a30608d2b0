//! `netvm_init`: the `.init` handlers of every NetPE, in topological order.

use cranelift_codegen::ir::{types, InstBuilder};
use cranelift_frontend::FunctionBuilder;
use cranelift_module::Module;
use netvm_verify::Verified;
use netvm_vm::graph::AppGraph;
use netvm_vm::FaultKind;

use super::off;
use crate::analysis::KnownSizes;
use crate::translate::{self, ctx_flags, ExitMode, FuncCx, MemView, SegmentEnv, I32, I64};
use crate::{segment_facts, JitOptions};

/// `netvm_init`: every `.init` handler in topological order. Returns 0, or
/// `1 + 8 * netpe + fault index` for the first that faults.
pub(super) fn build_init<M: Module>(
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
        let regs = (ld(b, ptr, off::NODE_REGS), Some(copros.1));
        let empty = MemView { base: null, len: zero64 };
        let env = SegmentEnv {
            mems: [empty, empty, data],
            copros,
            regs,
            meta: None,
            in_port: None,
            budget,
            exits: ExitMode::Jump { indexed: None },
            walk_shapes: super::walk_shapes(graph, n),
        };
        let m = &v.module;
        let facts = segment_facts(seg, m, opts.domain, KnownSizes { info: Some(0), data: Some(u64::from(m.data_size)), packet: 0 });
        let exits = translate::translate_segment(b, cx, seg, m, &facts, &[], env);
        let next = b.create_block();
        if let Some(blk) = exits.exit {
            b.switch_to_block(blk);
            b.ins().jump(next, &[]);
        }
        for (k, blk) in exits.faults.iter().enumerate() {
            if let Some(blk) = blk {
                b.switch_to_block(*blk);
                let v = b.ins().iconst(I32, i64::from(FaultKind::ALL[k].init_failure(n)));
                b.ins().return_(&[v]);
            }
        }
        b.switch_to_block(next);
    }
    let z = b.ins().iconst(I32, 0);
    b.ins().return_(&[z]);
}
