//! NetIL → Cranelift IR.
//!
//! One verified segment becomes one function `fn(ctx) -> u32`. The verifier
//! gives the operand-stack depth before every reachable instruction, so
//! stack slot `k` is a Cranelift variable and the stack disappears into SSA
//! values; locals are variables too. Memory bases and lengths are loaded
//! from the context once, at entry. Every check the interpreter makes is
//! made here, in the same order, with the same fault: bounds checks before
//! loads and stores, division by zero, the budget charged on back edges
//! (cost `s - t + 1` for an edge from instruction `s` to `t <= s`), the port
//! of `ret.pop`, and the helpers' results.

use std::collections::{BTreeSet, HashMap};

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, Block, FuncRef, Function, InstBuilder, MemFlagsData, Signature, Value};
use cranelift_codegen::isa::TargetFrontendConfig;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_module::{FuncId, Module};
use netil::{Mem, Opcode, Operands};
use netvm_verify::SegmentInfo;
use netvm_vm::FaultKind;

use crate::context::{self, offsets, region_op, Helpers, HELPER_FAULT, OUT_DROP, OUT_EXIT};

const I32: types::Type = types::I32;
const I64: types::Type = types::I64;

/// The signature of every compiled handler: `(ctx: ptr) -> i32`.
pub fn handler_signature<M: Module>(m: &M) -> Signature {
    let mut s = m.make_signature();
    s.params.push(AbiParam::new(m.target_config().pointer_type()));
    s.returns.push(AbiParam::new(I32));
    s
}

/// Memory flags of loads from the execution context.
fn ctx_flags() -> MemFlagsData {
    MemFlagsData::trusted().with_readonly().with_can_move()
}

/// Memory flags of accesses whose bounds were checked just before.
fn checked() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

struct Tx<'a, 'b, M: Module> {
    b: FunctionBuilder<'a>,
    /// Byte offset → instruction index (from the verifier).
    index_of: &'b HashMap<u32, usize>,
    module: &'b mut M,
    helpers: Helpers,
    frefs: HashMap<FuncId, FuncRef>,
    ctx: Value,
    mem: [(Value, Value); 3],
    stack: Vec<Variable>,
    locals: Vec<Variable>,
    budget: Variable,
    blocks: HashMap<usize, Block>,
    faults: [Option<Block>; FaultKind::ALL.len()],
    /// Back-edge blocks to fill: (block, budget cost, target).
    pay: Vec<(Block, u32, Block)>,
    /// Values known to be constants (from `push`).
    consts: HashMap<Value, u32>,
    /// Big-endian loads: result value → (raw little-endian load, width).
    swapped: HashMap<Value, (Value, u32)>,
    /// Domain optimisations on (see [`crate::JitOptions::domain_opts`]).
    opts: bool,
    out_ports: u16,
}

impl<M: Module> Tx<'_, '_, M> {
    /// The instruction index of a verified jump target.
    fn idx(&self, t: i64) -> usize {
        self.index_of[&(u32::try_from(t).expect("verified target"))]
    }

    fn fault_block(&mut self, k: FaultKind) -> Block {
        let i = FaultKind::ALL.iter().position(|x| *x == k).expect("listed");
        *self.faults[i].get_or_insert_with(|| self.b.create_block())
    }

    fn fref(&mut self, id: FuncId) -> FuncRef {
        if let Some(f) = self.frefs.get(&id) {
            return *f;
        }
        let f = self.module.declare_func_in_func(id, self.b.func);
        self.frefs.insert(id, f);
        f
    }

    fn call(&mut self, id: FuncId, args: &[Value]) -> Value {
        let f = self.fref(id);
        let inst = self.b.ins().call(f, args);
        self.b.inst_results(inst)[0]
    }

    fn get(&mut self, slot: usize) -> Value {
        self.b.use_var(self.stack[slot])
    }

    fn set(&mut self, slot: usize, v: Value) {
        self.b.def_var(self.stack[slot], v);
    }

    fn iconst(&mut self, v: u32) -> Value {
        self.b.ins().iconst(I32, i64::from(v))
    }

    /// Continues in a new block when `ok` is true, else goes to the fault block of `k`.
    fn check(&mut self, ok: Value, k: FaultKind) {
        let fault = self.fault_block(k);
        let cont = self.b.create_block();
        self.b.ins().brif(ok, cont, &[], fault, &[]);
        self.b.switch_to_block(cont);
    }

    /// Checks `[off, off + width)` against memory `m`; returns the address.
    fn address(&mut self, m: Mem, off: Value, width: u32) -> Value {
        let (base, len) = self.mem[m as usize];
        let off64 = self.b.ins().uextend(I64, off);
        let end = self.b.ins().iadd_imm_s(off64, i64::from(width));
        let ok = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, end, len);
        self.check(ok, FaultKind::Bounds);
        self.b.ins().iadd(base, off64)
    }

    /// Big-endian load of `width` bytes, zero-extended to i32.
    fn load_be(&mut self, m: Mem, off: Value, width: u32) -> Value {
        let addr = self.address(m, off, width);
        match width {
            1 => self.b.ins().uload8(I32, checked(), addr, 0),
            2 => {
                let raw = self.b.ins().load(types::I16, checked(), addr, 0);
                let v = self.b.ins().bswap(raw);
                let v = self.b.ins().uextend(I32, v);
                self.swapped.insert(v, (raw, 2));
                v
            }
            _ => {
                let raw = self.b.ins().load(I32, checked(), addr, 0);
                let v = self.b.ins().bswap(raw);
                self.swapped.insert(v, (raw, 4));
                v
            }
        }
    }

    /// `icmp cc a, b`, with the constant byte-order swap of the NetVM paper
    /// (§4.1, Fig. 8): an equality test of a big-endian load against a
    /// constant compares the raw load with the byte-swapped constant, so the
    /// swap of the loaded value disappears (and the byte swap moves to
    /// compile time). Only `eq`/`ne`: swapping does not preserve order.
    fn compare(&mut self, cc: IntCC, a: Value, b: Value) -> Value {
        if self.opts && matches!(cc, IntCC::Equal | IntCC::NotEqual) {
            let pair = match (self.swapped.get(&a), self.consts.get(&b), self.swapped.get(&b), self.consts.get(&a)) {
                (Some(&l), Some(&c), _, _) | (_, _, Some(&l), Some(&c)) => Some((l, c)),
                _ => None,
            };
            if let Some(((raw, width), c)) = pair {
                if width == 4 {
                    let k = self.b.ins().iconst(I32, i64::from(c.swap_bytes()));
                    return self.b.ins().icmp(cc, raw, k);
                }
                if c <= 0xffff {
                    let k = self.b.ins().iconst(types::I16, i64::from((c as u16).swap_bytes()));
                    return self.b.ins().icmp(cc, raw, k);
                }
                // A 16-bit load never equals a constant above 0xffff.
                return self.b.ins().iconst(types::I8, i64::from(cc == IntCC::NotEqual));
            }
        }
        self.b.ins().icmp(cc, a, b)
    }

    /// Big-endian store of the low `width` bytes of `v`.
    fn store_be(&mut self, m: Mem, off: Value, width: u32, v: Value) {
        let addr = self.address(m, off, width);
        match width {
            1 => {
                self.b.ins().istore8(checked(), v, addr, 0);
            }
            2 => {
                let h = self.b.ins().ireduce(types::I16, v);
                let h = self.b.ins().bswap(h);
                self.b.ins().store(checked(), h, addr, 0);
            }
            _ => {
                let s = self.b.ins().bswap(v);
                self.b.ins().store(checked(), s, addr, 0);
            }
        }
    }

    /// Charges `cost` to the budget (faulting if it does not cover it).
    fn charge(&mut self, cost: u32) {
        if cost == 0 {
            return;
        }
        let left = self.b.use_var(self.budget);
        let ok = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, left, i64::from(cost));
        self.check(ok, FaultKind::Budget);
        let left = self.b.ins().iadd_imm_s(left, -i64::from(cost));
        self.b.def_var(self.budget, left);
    }

    /// The block a taken edge from `from` to `to` enters: the target block
    /// itself for forward edges, else a block that charges the budget first.
    /// (The charging block is filled after the translation, so that the
    /// current block stays open.)
    fn edge_block(&mut self, from: usize, to: usize) -> Block {
        let target = self.blocks[&to];
        if to > from {
            return target;
        }
        let pay = self.b.create_block();
        self.pay.push((pay, (from - to + 1) as u32, target));
        pay
    }

    fn ret(&mut self, code: u32) {
        let v = self.iconst(code);
        self.b.ins().return_(&[v]);
    }
}

fn cond_cc(op: Opcode) -> Option<IntCC> {
    use Opcode::*;
    Some(match op {
        CmpEq | JcmpEq => IntCC::Equal,
        CmpNeq | JcmpNeq => IntCC::NotEqual,
        CmpLt | JcmpLt => IntCC::UnsignedLessThan,
        CmpLe | JcmpLe => IntCC::UnsignedLessThanOrEqual,
        CmpGt | JcmpGt => IntCC::UnsignedGreaterThan,
        CmpGe | JcmpGe => IntCC::UnsignedGreaterThanOrEqual,
        CmpSlt | JcmpSlt => IntCC::SignedLessThan,
        CmpSle | JcmpSle => IntCC::SignedLessThanOrEqual,
        CmpSgt | JcmpSgt => IntCC::SignedGreaterThan,
        CmpSge | JcmpSge => IntCC::SignedGreaterThanOrEqual,
        _ => return None,
    })
}

/// Translates one verified segment into `func` (whose signature must be [`handler_signature`]).
#[allow(clippy::too_many_arguments)]
pub fn translate_segment<M: Module>(
    func: &mut Function,
    fctx: &mut FunctionBuilderContext,
    module: &mut M,
    helpers: &mut Helpers,
    seg: &SegmentInfo,
    m: &netil::Module,
    frontend: TargetFrontendConfig,
    domain_opts: bool,
) {
    let insns = &seg.insns;
    let reachable = |i: usize| seg.depth.get(i).copied().flatten().is_some();
    let index = |t: i64| -> usize {
        let t = u32::try_from(t).expect("verified target");
        seg.index_of[&t]
    };

    // Block starts: instruction 0, jump targets of reachable instructions,
    // and the fall-through successors of conditional branches.
    let mut starts: BTreeSet<usize> = BTreeSet::from([0]);
    for (i, insn) in insns.iter().enumerate() {
        if !reachable(i) {
            continue;
        }
        for t in insn.targets() {
            starts.insert(index(t));
        }
        if insn.op.is_jump() && insn.op != Opcode::Jump {
            starts.insert(i + 1);
        }
    }

    let ptr = module.target_config().pointer_type();
    let mut b = FunctionBuilder::new(func, fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let ctx = b.block_params(entry)[0];
    // The context is never written while a handler runs (helpers only read
    // it), so its loads are `readonly` and `can_move`: Cranelift may drop
    // unused ones and move the others.
    let ld = |b: &mut FunctionBuilder, ty, off: i32| b.ins().load(ty, ctx_flags(), ctx, off);
    let mem = [
        (ld(&mut b, ptr, offsets::PKT), ld(&mut b, I64, offsets::PKT_LEN)),
        (ld(&mut b, ptr, offsets::INFO), ld(&mut b, I64, offsets::INFO_LEN)),
        (ld(&mut b, ptr, offsets::DATA), ld(&mut b, I64, offsets::DATA_LEN)),
    ];
    let budget = b.declare_var(I64);
    let init_budget = ld(&mut b, I64, offsets::BUDGET);
    b.def_var(budget, init_budget);
    let zero = b.ins().iconst(I32, 0);
    let stack: Vec<Variable> = (0..m.max_stack.max(1)).map(|_| b.declare_var(I32)).collect();
    let locals: Vec<Variable> = (0..m.locals).map(|_| b.declare_var(I32)).collect();
    for v in stack.iter().chain(&locals) {
        b.def_var(*v, zero);
    }
    if seg.kind == netil::SegmentKind::Push {
        let port = ld(&mut b, I32, offsets::IN_PORT);
        b.def_var(stack[0], port);
    }
    let blocks: HashMap<usize, Block> = starts.iter().filter(|i| **i < insns.len()).map(|i| (*i, b.create_block())).collect();
    b.ins().jump(blocks[&0], &[]);

    let mut tx = Tx {
        b,
        index_of: &seg.index_of,
        module,
        helpers: *helpers,
        frefs: HashMap::new(),
        ctx,
        mem,
        stack,
        locals,
        budget,
        blocks,
        faults: [None; FaultKind::ALL.len()],
        pay: Vec::new(),
        consts: HashMap::new(),
        swapped: HashMap::new(),
        opts: domain_opts,
        out_ports: m.out_ports,
    };

    let mut open = false; // whether the current block is still unterminated
    for (i, insn) in insns.iter().enumerate() {
        if let Some(&blk) = tx.blocks.get(&i) {
            if open {
                tx.b.ins().jump(blk, &[]);
            }
            tx.b.switch_to_block(blk);
            open = true;
        }
        let Some(d) = seg.depth[i] else { continue };
        if !open {
            continue;
        }
        let d = d as usize;
        translate_insn(&mut tx, i, insn, d);
        // Conditional jumps end their block too: `brif` already names the
        // fall-through block.
        if insn.op.ends_block() || insn.op.is_jump() {
            open = false;
        }
    }
    debug_assert!(!open, "verified code cannot fall off the end");

    for (blk, cost, target) in std::mem::take(&mut tx.pay) {
        tx.b.switch_to_block(blk);
        tx.charge(cost);
        tx.b.ins().jump(target, &[]);
    }

    for (k, blk) in FaultKind::ALL.iter().zip(tx.faults) {
        if let Some(blk) = blk {
            tx.b.switch_to_block(blk);
            tx.ret(context::fault_code(*k));
        }
    }
    tx.b.seal_all_blocks();
    tx.b.finalize(frontend);
}

fn translate_insn<M: Module>(tx: &mut Tx<'_, '_, M>, i: usize, insn: &netil::Insn, d: usize) {
    use Opcode::*;
    let op = insn.op;
    let h = tx.helpers;
    match (&insn.operands, op) {
        (_, Nop) => {}
        (Operands::Imm(v), Push) => {
            let c = tx.iconst(*v);
            tx.consts.insert(c, *v);
            tx.set(d, c);
        }
        (_, Pop) => {}
        (_, Dup) => {
            let v = tx.get(d - 1);
            tx.set(d, v);
        }
        (_, Swap) => {
            let a = tx.get(d - 2);
            let b = tx.get(d - 1);
            tx.set(d - 2, b);
            tx.set(d - 1, a);
        }
        (_, Over) => {
            let a = tx.get(d - 2);
            tx.set(d, a);
        }
        (Operands::Depth(n), Pick) => {
            let v = tx.get(d - 1 - *n as usize);
            tx.set(d, v);
        }
        (_, Add | Sub | Mul | And | Or | Xor | Shl | Shr | Sar | Rotl | Rotr | Btest | Bset | Bclr) => {
            let a = tx.get(d - 2);
            let b = tx.get(d - 1);
            let ins = tx.b.ins();
            let r = match op {
                Add => ins.iadd(a, b),
                Sub => ins.isub(a, b),
                Mul => ins.imul(a, b),
                And => ins.band(a, b),
                Or => ins.bor(a, b),
                Xor => ins.bxor(a, b),
                // Cranelift takes shift and rotate amounts modulo the type width, as NetIL does.
                Shl => ins.ishl(a, b),
                Shr => ins.ushr(a, b),
                Sar => ins.sshr(a, b),
                Rotl => ins.rotl(a, b),
                Rotr => ins.rotr(a, b),
                Btest => {
                    let s = ins.ushr(a, b);
                    tx.b.ins().band_imm_s(s, 1)
                }
                Bset => {
                    let one = ins.iconst(I32, 1);
                    let bit = tx.b.ins().ishl(one, b);
                    tx.b.ins().bor(a, bit)
                }
                _ => {
                    let one = ins.iconst(I32, 1);
                    let bit = tx.b.ins().ishl(one, b);
                    tx.b.ins().band_not(a, bit)
                }
            };
            tx.set(d - 2, r);
        }
        (_, Div | Mod | Sdiv | Smod) => {
            let a = tx.get(d - 2);
            let b = tx.get(d - 1);
            let nonzero = tx.b.ins().icmp_imm_u(IntCC::NotEqual, b, 0);
            tx.check(nonzero, FaultKind::DivByZero);
            let r = match op {
                Div => tx.b.ins().udiv(a, b),
                Mod => tx.b.ins().urem(a, b),
                _ => {
                    // MIN / -1 wraps to MIN and MIN % -1 is 0 in NetIL; the
                    // machine instruction traps, so divide by 1 instead and fix up.
                    let m1 = tx.iconst(u32::MAX);
                    let is_m1 = tx.b.ins().icmp(IntCC::Equal, b, m1);
                    let one = tx.iconst(1);
                    let safe = tx.b.ins().select(is_m1, one, b);
                    if op == Sdiv {
                        let q = tx.b.ins().sdiv(a, safe);
                        let n = tx.b.ins().ineg(a);
                        tx.b.ins().select(is_m1, n, q)
                    } else {
                        let r = tx.b.ins().srem(a, safe);
                        let z = tx.iconst(0);
                        tx.b.ins().select(is_m1, z, r)
                    }
                }
            };
            tx.set(d - 2, r);
        }
        (_, Not | Neg | Bswap | Bswap16 | Popcnt | Clz | Ctz | Hash32) => {
            let a = tx.get(d - 1);
            let r = match op {
                Not => tx.b.ins().bnot(a),
                Neg => tx.b.ins().ineg(a),
                Bswap => tx.b.ins().bswap(a),
                Bswap16 => {
                    let h16 = tx.b.ins().ireduce(types::I16, a);
                    let s = tx.b.ins().bswap(h16);
                    tx.b.ins().uextend(I32, s)
                }
                Popcnt => tx.b.ins().popcnt(a),
                Clz => tx.b.ins().clz(a),
                Ctz => tx.b.ins().ctz(a),
                _ => tx.call(h.hash32, &[a]),
            };
            tx.set(d - 1, r);
        }
        (_, CsumUpd) => {
            let hc = tx.get(d - 3);
            let old = tx.get(d - 2);
            let new = tx.get(d - 1);
            let r = tx.call(h.csum_upd, &[hc, old, new]);
            tx.set(d - 3, r);
        }
        (Operands::None, _) if cond_cc(op).is_some() => {
            let a = tx.get(d - 2);
            let b = tx.get(d - 1);
            let c = tx.compare(cond_cc(op).expect("comparison"), a, b);
            let r = tx.b.ins().uextend(I32, c);
            tx.set(d - 2, r);
        }
        (Operands::Target(t), Jump) => {
            let to = tx.idx(*t);
            let target = tx.blocks[&to];
            if to <= i {
                tx.charge((i - to + 1) as u32);
            }
            tx.b.ins().jump(target, &[]);
        }
        (Operands::Target(t), _) => {
            let to = tx.idx(*t);
            let taken = tx.edge_block(i, to);
            let fall = tx.blocks[&(i + 1)];
            match op {
                Jz | Jnz => {
                    let v = tx.get(d - 1);
                    if op == Jnz {
                        tx.b.ins().brif(v, taken, &[], fall, &[]);
                    } else {
                        tx.b.ins().brif(v, fall, &[], taken, &[]);
                    }
                }
                _ => {
                    let a = tx.get(d - 2);
                    let b = tx.get(d - 1);
                    let c = tx.compare(cond_cc(op).expect("jcmp"), a, b);
                    tx.b.ins().brif(c, taken, &[], fall, &[]);
                }
            }
        }
        (Operands::Switch(s), _) => {
            let v = tx.get(d - 1);
            let default = tx.edge_block(i, tx.idx(s.default));
            let mut sw = cranelift_frontend::Switch::new();
            for (value, t) in &s.cases {
                let blk = tx.edge_block(i, tx.idx(*t));
                sw.set_entry(u128::from(*value), blk);
            }
            sw.emit(&mut tx.b, v, default);
        }
        (Operands::Port(p), Ret) => tx.ret(u32::from(*p)),
        (_, RetPop) => {
            let p = tx.get(d - 1);
            let ok = tx.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, p, i64::from(tx.out_ports));
            tx.check(ok, FaultKind::BadPort);
            tx.b.ins().return_(&[p]);
        }
        (_, Drop) => tx.ret(OUT_DROP),
        (_, Exit) => tx.ret(OUT_EXIT),
        (_, Pktlen) => {
            let len = tx.mem[Mem::Packet as usize].1;
            let v = tx.b.ins().ireduce(I32, len);
            tx.set(d, v);
        }
        (_, Wirelen | Inport | TstampS | TstampNs) => {
            let off = match op {
                Wirelen => offsets::WIRE_LEN,
                Inport => offsets::IN_PORT,
                TstampS => offsets::TS_SEC,
                _ => offsets::TS_NSEC,
            };
            let v = tx.b.ins().load(I32, ctx_flags(), tx.ctx, off);
            tx.set(d, v);
        }
        (Operands::Local(l), Locload) => {
            let v = tx.b.use_var(tx.locals[*l as usize]);
            tx.set(d, v);
        }
        (Operands::Local(l), Locstore) => {
            let v = tx.get(d - 1);
            tx.b.def_var(tx.locals[*l as usize], v);
        }
        (Operands::MemPair(s, t), Mcopy) => {
            let dst = tx.get(d - 3);
            let src = tx.get(d - 2);
            let len = tx.get(d - 1);
            let mems = tx.iconst((*s as u32) << 4 | *t as u32);
            let r = tx.call(h.mcopy, &[tx.ctx, mems, dst, src, len]);
            let ok = tx.b.ins().icmp_imm_u(IntCC::Equal, r, 0);
            tx.check(ok, FaultKind::Bounds);
        }
        (Operands::Mem(mm), Crc32 | Hash | Csum) => {
            let off = tx.get(d - 2);
            let len = tx.get(d - 1);
            let rop = tx.iconst(match op {
                Crc32 => region_op::CRC32,
                Hash => region_op::HASH,
                _ => region_op::CSUM,
            });
            let memv = tx.iconst(*mm as u32);
            let r = tx.call(h.region, &[tx.ctx, rop, memv, off, len]);
            let ok = tx.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, r, HELPER_FAULT as i64);
            tx.check(ok, FaultKind::Bounds);
            let v = tx.b.ins().ireduce(I32, r);
            tx.set(d - 2, v);
        }
        (Operands::CoproReg { copro, reg }, CoproIn) => {
            let v = tx.get(d - 1);
            let c = tx.iconst(u32::from(*copro));
            let r = tx.iconst(u32::from(*reg));
            let st = tx.call(h.copro_in, &[tx.ctx, c, r, v]);
            let ok = tx.b.ins().icmp_imm_u(IntCC::Equal, st, 0);
            tx.check(ok, FaultKind::Copro);
        }
        (Operands::CoproReg { copro, reg }, CoproOut) => {
            let c = tx.iconst(u32::from(*copro));
            let r = tx.iconst(u32::from(*reg));
            let v = tx.call(h.copro_out, &[tx.ctx, c, r]);
            let ok = tx.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, v, HELPER_FAULT as i64);
            tx.check(ok, FaultKind::Copro);
            let v = tx.b.ins().ireduce(I32, v);
            tx.set(d, v);
        }
        (Operands::CoproOp { copro, op: o }, CoproInvoke) => {
            let c = tx.iconst(u32::from(*copro));
            let o = tx.iconst(u32::from(*o));
            let st = tx.call(h.copro_invoke, &[tx.ctx, c, o]);
            let ok = tx.b.ins().icmp_imm_u(IntCC::Equal, st, 0);
            tx.check(ok, FaultKind::Copro);
        }
        (_, _) if op.access_width().is_some() => {
            let m = op.access_memory().expect("memory access");
            let w = op.access_width().expect("width");
            if op.is_store() {
                let v = tx.get(d - 1);
                let off = tx.get(d - 2);
                tx.store_be(m, off, w, v);
            } else {
                let off = tx.get(d - 1);
                let v = tx.load_be(m, off, w);
                tx.set(d - 1, v);
            }
        }
        (ops, _) => unreachable!("verified instruction {op:?} with operands {ops:?}"),
    }
}
