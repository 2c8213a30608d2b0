//! NetIL → Cranelift IR.
//!
//! [`translate_segment`] emits one verified segment into a function being
//! built, starting at a given block. The verifier gives the operand-stack
//! depth before every reachable instruction, so stack slot `k` is a
//! Cranelift variable and the stack disappears into SSA values; locals are
//! variables too (so a store to a local that nothing reads costs nothing).
//! Where memories are, what the metadata instructions read, and what the
//! exits do come from a [`SegmentEnv`]:
//!
//! - a single handler ([`crate::JitCode`]) finds everything in its
//!   execution context and returns an encoded outcome ([`ExitMode::Return`]);
//! - a linked application ([`crate::link`]) gives each NetPE its memories
//!   and jumps from every exit to a block that crosses the port, counts the
//!   drop or the fault ([`ExitMode::Jump`]).
//!
//! Every check the interpreter makes is made here, in the same order, with
//! the same fault: bounds checks before loads and stores, division by zero,
//! the budget charged on back edges (`SegmentInfo::edge_cost`), the port of `ret.pop`, and the helpers'
//! results; except the bounds checks that [`crate::analysis`] proves
//! redundant.

use std::collections::{BTreeSet, HashMap};

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, Block, Endianness, FuncRef, InstBuilder, MemFlagsData, Signature, Value};
use cranelift_codegen::isa::TargetFrontendConfig;
use cranelift_frontend::{FunctionBuilder, Variable};
use cranelift_module::{FuncId, Module};
use netil::{Cond, Mem, Opcode, Operands, SegmentKind};
use netvm_verify::SegmentInfo;
use netvm_vm::FaultKind;
use target_lexicon::Architecture;

use crate::analysis::SegmentFacts;
use crate::context::{Helpers, HELPER_FAULT};
use crate::DomainOpts;
use netvm_abi::{RESULT_EXIT, VERDICT_DROP};
use netvm_vm::{BucketWalk, WalkForm, WalkKey, WalkKind};

pub(crate) const I32: types::Type = types::I32;
pub(crate) const I64: types::Type = types::I64;

/// The signature of a compiled single handler: `(ctx: ptr) -> i32`.
pub fn handler_signature<M: Module>(m: &M) -> Signature {
    let mut s = m.make_signature();
    s.params.push(AbiParam::new(m.target_config().pointer_type()));
    s.returns.push(AbiParam::new(I32));
    s
}

/// Memory flags of loads from memory the handler never writes (execution
/// context, packet descriptors): Cranelift may drop unused ones and move the others.
pub(crate) fn ctx_flags() -> MemFlagsData {
    MemFlagsData::trusted().with_readonly().with_can_move()
}

/// `struct netvm_regfile` ([`netvm_vm::RegisterFile`]): its size and the
/// offsets of its fields.
const REGFILE_SIZE: i32 = 48;
const REGFILE_INPUT: i32 = 0;
const REGFILE_OUTPUT: i32 = 8;
const REGFILE_INPUTS: i32 = 16;
const REGFILE_OUTPUTS: i32 = 20;
const REGFILE_DIRECT: i32 = 24;
const REGFILE_OPS: i32 = 32;
const REGFILE_WALK_OPS: i32 = 36;
const REGFILE_WALK: i32 = 40;

/// `struct netvm_dir24walk` ([`netvm_vm::Dir24Walk`]): the offsets of its fields.
const WALK_ROOT: i32 = 0;
const WALK_GROUPS: i32 = 8;
const WALK_COUNTERS: i32 = 16;
const WALK_DEFAULT_HOP: i32 = 24;
const WALK_HAS_DEFAULT: i32 = 28;

/// `struct netvm_bucketwalk` ([`netvm_vm::BucketWalk`]): the offsets of its fields.
const BW_TAGS: i32 = std::mem::offset_of!(BucketWalk, tags) as i32;
const BW_ENTRIES: i32 = std::mem::offset_of!(BucketWalk, entries) as i32;
const BW_COUNTERS: i32 = std::mem::offset_of!(BucketWalk, counters) as i32;
const BW_HANDLE_NOW: i32 = std::mem::offset_of!(BucketWalk, handle_now) as i32;
const BW_STORE_NOW: i32 = std::mem::offset_of!(BucketWalk, store_now) as i32;
const BW_SEED: i32 = std::mem::offset_of!(BucketWalk, seed) as i32;
const BW_NBUCKETS: i32 = std::mem::offset_of!(BucketWalk, nbuckets) as i32;
const BW_IDLE_NS: i32 = std::mem::offset_of!(BucketWalk, idle_ns) as i32;
const BW_A_MASK: i32 = std::mem::offset_of!(BucketWalk, a_mask) as i32;
const BW_STRIDE: i32 = std::mem::offset_of!(BucketWalk, stride) as i32;
const BW_KEY_SIZE: i32 = std::mem::offset_of!(BucketWalk, key_size) as i32;
const BW_TS_OFF: i32 = std::mem::offset_of!(BucketWalk, ts_off) as i32;
const BW_REACH: i32 = std::mem::offset_of!(BucketWalk, reach) as i32;
const BW_B_OFF: i32 = std::mem::offset_of!(BucketWalk, b_off) as i32;
const BW_B_SHIFT: i32 = std::mem::offset_of!(BucketWalk, b_shift) as i32;
const BW_VALUE_MASK: i32 = std::mem::offset_of!(BucketWalk, value_mask) as i32;
const BW_SHAPE: i32 = std::mem::offset_of!(BucketWalk, shape) as i32;

/// Memory flags of accesses whose bounds were checked (or proved).
fn checked() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// One memory as the code sees it: its base address and its length in bytes (`i64`).
#[derive(Clone, Copy, Debug)]
pub struct MemView {
    /// Address of byte 0.
    pub base: Value,
    /// Length in bytes (`i64`).
    pub len: Value,
}

/// Where the metadata instructions (`wirelen`, `tstamp.*`) read: fields at
/// fixed offsets from a pointer (the execution context or a packet descriptor).
#[derive(Clone, Copy, Debug)]
pub struct MetaView {
    /// The structure.
    pub base: Value,
    /// Offset of the wire length (`u32`).
    pub wirelen: i32,
    /// Offset of the timestamp's seconds (`u64`).
    pub ts_sec: i32,
    /// Offset of the timestamp's nanoseconds (`u32`).
    pub ts_nsec: i32,
    /// Offset of the packet's sequence number (`u64`, passed to coprocessor operations).
    pub seq: i32,
}

/// What the exits of a segment do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitMode {
    /// Return the encoded outcome ([`Outcome::from_code`](netvm_vm::Outcome::from_code)), first
    /// storing the budget left at `budget_out` (`i64` at base + offset)
    /// if given and the segment has backward edges (others consume none).
    Return {
        /// Where the budget left is stored.
        budget_out: Option<(Value, i32)>,
    },
    /// Jump to the blocks of [`SegmentExits`], which the caller fills.
    Jump {
        /// The output ports `lo..hi` that `ret.pop` reaches by jumping to
        /// [`SegmentExits::indexed_port`] with the port, not through the
        /// jump table over the port blocks: for a caller to whom those
        /// ports all do the same thing with a different index (count, and
        /// go on to a sink or an input port numbered from the port), which
        /// then costs no indirect branch.
        indexed: Option<(u16, u16)>,
    },
}

/// The ways compiled code performs one coprocessor operation, as blocks
/// that branch off on the instance's register file (`struct netvm_regfile`).
struct InvokePaths {
    /// The operation is a walk the code performs itself ([`netvm_vm::Dir24Walk`]).
    walk: Option<Block>,
    /// The operation has a direct entry ([`netvm_vm::DirectOp`]).
    direct: Option<Block>,
    /// Neither: the call through the helper and `Coprocessor::invoke`.
    call: Block,
}

/// Everything a segment's code needs from outside.
#[derive(Clone, Copy, Debug)]
pub struct SegmentEnv {
    /// Packet, info and data memory, indexed by [`Mem`].
    pub mems: [MemView; 3],
    /// The NetPE's coprocessor instances (opaque pointer) and their number (`i64`).
    pub copros: (Value, Value),
    /// Their inline register files (`*const RegisterFile`) and how many
    /// there are (`i64`: the number of instances, or 0 for none); `None`
    /// where the host gives every instance one (no test is compiled).
    pub regs: (Value, Option<Value>),
    /// Metadata of the exchange buffer (`.push` only).
    pub meta: Option<MetaView>,
    /// The input port (`i32`, `.push` only).
    pub in_port: Option<Value>,
    /// The budget the invocation starts with (`i64`).
    pub budget: Value,
    /// What exits do.
    pub exits: ExitMode,
    /// Per coprocessor slot (the first [`SHAPED_SLOTS`]): the walk shape
    /// its instance is expected to have ([`netvm_vm::BucketWalk::shape`];
    /// 0: unknown). A walk compiled for a shape takes the fields that follow
    /// from it as constants, after comparing the instance's.
    pub walk_shapes: [u32; SHAPED_SLOTS],
}

/// Coprocessor slots whose walk shape [`SegmentEnv::walk_shapes`] holds.
pub const SHAPED_SLOTS: usize = 16;

/// The exit blocks a segment translated with [`ExitMode::Jump`] jumps to,
/// created on first use; the caller switches to each and fills it.
#[derive(Clone, Debug, Default)]
pub struct SegmentExits {
    /// Forward on output port `p` (`ret p`, `ret.pop`).
    pub ports: Vec<Option<Block>>,
    /// Forward on the output port in the block's `i32` parameter, one of
    /// the indexed ports (`ret.pop` under `ExitMode::Jump { indexed: Some(..) }`).
    pub indexed_port: Option<Block>,
    /// `drop`.
    pub drop: Option<Block>,
    /// `exit` (`.init`).
    pub exit: Option<Block>,
    /// A fault of each kind, indexed like [`FaultKind::ALL`].
    pub faults: [Option<Block>; FaultKind::ALL.len()],
    /// The budget left (`i64`), for the exit blocks to report what the
    /// invocation consumed; `None` when the segment has no backward edge
    /// (it consumes none).
    pub budget_left: Option<Variable>,
}

/// State shared by the segments translated into one function: the helper
/// functions and their references in it.
pub struct FuncCx<'m, M: Module> {
    /// The module functions are declared in.
    pub module: &'m mut M,
    /// The helpers, declared in `module`.
    pub helpers: Helpers,
    frefs: HashMap<FuncId, FuncRef>,
    /// Domain optimisations on.
    pub opts: DomainOpts,
    /// The target's front-end configuration (for `memmove`).
    pub frontend: TargetFrontendConfig,
    /// Bucket tags are compared as one vector (`DomainOpts::vector_tags`,
    /// on a target where Cranelift lowers that to one instruction: x86-64,
    /// AArch64).
    pub simd: bool,
}

impl<'m, M: Module> FuncCx<'m, M> {
    /// A context for one function.
    pub fn new(module: &'m mut M, helpers: Helpers, opts: DomainOpts) -> Self {
        let frontend = module.isa().frontend_config();
        let simd = opts.vector_tags && matches!(module.isa().triple().architecture, Architecture::X86_64 | Architecture::Aarch64(_));
        FuncCx { module, helpers, frefs: HashMap::new(), opts, frontend, simd }
    }

    fn fref(&mut self, b: &mut FunctionBuilder, id: FuncId) -> FuncRef {
        if let Some(f) = self.frefs.get(&id) {
            return *f;
        }
        let f = self.module.declare_func_in_func(id, b.func);
        self.frefs.insert(id, f);
        f
    }

    /// Calls helper `id`; returns its result.
    pub fn call(&mut self, b: &mut FunctionBuilder, id: FuncId, args: &[Value]) -> Value {
        let f = self.fref(b, id);
        let inst = b.ins().call(f, args);
        b.inst_results(inst)[0]
    }
}

struct Tx<'a, 'b, 'm, M: Module> {
    b: &'a mut FunctionBuilder<'b>,
    cx: &'a mut FuncCx<'m, M>,
    seg: &'a SegmentInfo,
    facts: &'a SegmentFacts,
    /// Instructions whose info store is dead (linked applications).
    dead: &'a [bool],
    env: SegmentEnv,
    stack: Vec<Variable>,
    locals: Vec<Variable>,
    budget: Variable,
    /// Whether the segment has a reachable backward edge (consumes budget).
    back_edges: bool,
    blocks: HashMap<usize, Block>,
    exits: SegmentExits,
    /// Back-edge blocks to fill: (block, budget cost, target).
    pay: Vec<(Block, u32, Block)>,
    /// Values known to be constants (from `push`).
    consts: HashMap<Value, u32>,
    /// Big-endian loads: result value → (raw little-endian load, width).
    swapped: HashMap<Value, (Value, u32)>,
    /// Results of instructions that are fold bases (see [`SegmentFacts::fold`]).
    fold_vals: HashMap<u32, Value>,
    out_ports: u16,
    /// Per coprocessor instance whose kind may offer walks
    /// ([`WalkKind::ALL`]), its walks: only the operations with a key there
    /// get the walk's code (and its test).
    walk_kinds: Vec<Option<&'static WalkKind>>,
    /// Per instruction: the instances (one bit each) whose outputs 0 and 1
    /// are held in `walk_outputs` there ([`fresh_outputs`]).
    fresh: Vec<u32>,
    /// Per instance with walkable operations: the variables holding its
    /// outputs 0 and 1 after such an operation.
    walk_outputs: HashMap<u8, [Variable; 2]>,
    /// Input registers written by `copro.in` earlier in the current NetIL
    /// basic block, with the value written: a walk reads its key offset
    /// and value from here, not back from the register file. Emptied at
    /// each block start and by every `copro.invoke` (an operation, or
    /// another instance sharing the same registers, may change them).
    written_inputs: HashMap<(u8, u8), Value>,
    /// A stack slot whose value is known to be below a bound in the
    /// current block: set at the start of the fall-through block of a
    /// `jcmp.ge`/`jcmp.gt` against a constant that no jump enters (the
    /// branch is its only predecessor), cleared by any write of the slot
    /// and at every other block start. `ret.pop` then omits its port check
    /// where the bound is within the ports (`dup; push 16; jcmp.ge bad;
    /// ret.pop`).
    below: Option<(usize, u64)>,
    /// The fact a conditional jump leaves for its fall-through block (see `below`).
    fall_below: Option<(usize, u64)>,
}

impl<M: Module> Tx<'_, '_, '_, M> {
    /// The instruction index of a verified jump target.
    fn idx(&self, t: i64) -> usize {
        self.seg.index_of[&(u32::try_from(t).expect("verified target"))]
    }

    fn fault_block(&mut self, k: FaultKind) -> Block {
        let i = k.number();
        *self.exits.faults[i].get_or_insert_with(|| self.b.create_block())
    }

    fn port_block(&mut self, p: u16) -> Block {
        *self.exits.ports[p as usize].get_or_insert_with(|| self.b.create_block())
    }

    fn get(&mut self, slot: usize) -> Value {
        self.b.use_var(self.stack[slot])
    }

    fn set(&mut self, slot: usize, v: Value) {
        if self.below.is_some_and(|(s, _)| s == slot) {
            self.below = None;
        }
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

    /// Continues in a new block where instance `copro` has a register file
    /// (`struct netvm_regfile`), else goes to `none`; in the current one
    /// where every instance has one.
    fn has_regfile(&mut self, copro: u8, none: Block) {
        let (_, Some(n)) = self.env.regs else { return };
        let test = self.b.create_block();
        let has = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThan, n, i64::from(copro));
        self.b.ins().brif(has, test, &[], none, &[]);
        self.b.switch_to_block(test);
    }

    /// Where instance `copro` has a register file: branches to `set` where
    /// bit `bit` of the `u32` mask at `mask` in it is set, else to `unset`.
    fn regfile_bit(&mut self, copro: u8, mask: i32, bit: u8, set: Block, unset: Block) {
        let (files, _) = self.env.regs;
        let m = self.b.ins().load(I32, ctx_flags(), files, REGFILE_SIZE * i32::from(copro) + mask);
        let b = self.b.ins().band_imm_u(m, 1i64 << bit);
        self.b.ins().brif(b, set, &[], unset, &[]);
    }

    /// Where bit `bit` of the `u32` mask at `mask` in instance `copro`'s
    /// register file is set (`struct netvm_regfile`), the pointer at `field`
    /// of that file: branches to a new block, current on return, where the
    /// bit is set and the returned pointer is loaded, and to the returned
    /// block, where the caller calls the instance instead, where it is not
    /// (or the instance has no file).
    fn regfile_pointer(&mut self, copro: u8, mask: i32, bit: u8, field: i32) -> (Value, Block) {
        let (files, _) = self.env.regs;
        let (set, call) = (self.b.create_block(), self.b.create_block());
        self.has_regfile(copro, call);
        self.regfile_bit(copro, mask, bit, set, call);
        self.b.switch_to_block(set);
        let ptr = self.cx.frontend.pointer_type();
        (self.b.ins().load(ptr, ctx_flags(), files, REGFILE_SIZE * i32::from(copro) + field), call)
    }

    /// The inline coprocessor register `reg` of instance `copro` (an output
    /// register if `output`): branches to a new block, current on return,
    /// where the register is at the returned value plus the returned offset if the instance's
    /// register file has it, and to the returned block, where the caller
    /// calls the instance instead, if it has not (see
    /// `Coprocessor::registers`). `None`: registers from 32 on are never inline.
    fn inline_register(&mut self, copro: u8, reg: u8, output: bool) -> Option<(Value, i32, Block)> {
        if reg >= 32 {
            return None;
        }
        let (mask, field) = if output { (REGFILE_OUTPUTS, REGFILE_OUTPUT) } else { (REGFILE_INPUTS, REGFILE_INPUT) };
        let (base, call) = self.regfile_pointer(copro, mask, reg, field);
        Some((base, 4 * i32::from(reg), call))
    }

    /// `copro.out copro, reg`: a load from the register file where the
    /// instance keeps the register there, else the call (which may fault).
    fn copro_out(&mut self, copro: u8, reg: u8) -> Value {
        let done = self.b.create_block();
        let v = self.b.append_block_param(done, I32);
        if let Some((base, off, call)) = self.inline_register(copro, reg, true) {
            let x = self.b.ins().load(I32, MemFlagsData::trusted(), base, off);
            self.b.ins().jump(done, &[x.into()]);
            self.b.switch_to_block(call);
        }
        let c = self.iconst(u32::from(copro));
        let r = self.iconst(u32::from(reg));
        let (cp, n) = self.env.copros;
        let x = self.cx.call(self.b, self.cx.helpers.copro_out, &[cp, n, c, r]);
        let ok = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, x, HELPER_FAULT as i64);
        self.check(ok, FaultKind::Copro);
        let x = self.b.ins().ireduce(I32, x);
        self.b.ins().jump(done, &[x.into()]);
        self.b.switch_to_block(done);
        v
    }

    /// After a walkable operation of instance `copro` performed by a call
    /// (the current block): its outputs 0 and 1 into the variables that
    /// hold them (see `fresh_outputs`). `in_file`: the instance has a
    /// register file, which then holds them (the contract of a kind that
    /// walks, `netvm_vm::WalkKind`).
    fn hold_outputs(&mut self, copro: u8, in_file: bool) {
        let Some(vars) = self.walk_outputs.get(&copro).copied() else { return };
        let output = in_file.then(|| {
            let (files, _) = self.env.regs;
            let ptr = self.cx.frontend.pointer_type();
            self.b.ins().load(ptr, ctx_flags(), files, REGFILE_SIZE * i32::from(copro) + REGFILE_OUTPUT)
        });
        for (r, var) in vars.into_iter().enumerate() {
            let v = match output {
                Some(base) => self.b.ins().load(I32, MemFlagsData::trusted(), base, 4 * r as i32),
                None => self.copro_out(copro, r as u8),
            };
            self.b.def_var(var, v);
        }
    }

    /// The ways to perform operation `op` of instance `copro` (see
    /// [`InvokePaths`]), tested on its register file's `walk_ops` and
    /// `ops`. No block is current on return.
    fn invoke_paths(&mut self, copro: u8, op: u8) -> InvokePaths {
        let call = self.b.create_block();
        if op >= 32 {
            self.b.ins().jump(call, &[]);
            return InvokePaths { walk: None, direct: None, call };
        }
        let direct = self.b.create_block();
        self.has_regfile(copro, call);
        let walk = if self.walk_key(copro, op) != WalkKey::None && self.cx.opts.inline_walks {
            let (walk, no_walk) = (self.b.create_block(), self.b.create_block());
            self.regfile_bit(copro, REGFILE_WALK_OPS, op, walk, no_walk);
            self.b.switch_to_block(no_walk);
            Some(walk)
        } else {
            None
        };
        self.regfile_bit(copro, REGFILE_OPS, op, direct, call);
        InvokePaths { walk, direct: Some(direct), call }
    }

    /// Where operation `op` of instance `copro` finds its key when it is a
    /// walk ([`WalkKey::None`]: it never is).
    fn walk_key(&self, copro: u8, op: u8) -> WalkKey {
        self.walk_kind(copro).map_or(WalkKey::None, |k| k.key(op))
    }

    /// The walks instance `copro`'s kind may offer.
    fn walk_kind(&self, copro: u8) -> Option<&'static WalkKind> {
        self.walk_kinds.get(usize::from(copro)).copied().flatten()
    }

    /// In a direct path of [`InvokePaths`]: loads the entry's function and
    /// instance ([`netvm_vm::DirectOp`] in the register file).
    fn direct_entry(&mut self, copro: u8, op: u8) -> (Value, Value) {
        let (files, _) = self.env.regs;
        let ptr = self.cx.frontend.pointer_type();
        let table = self.b.ins().load(ptr, ctx_flags(), files, REGFILE_SIZE * i32::from(copro) + REGFILE_DIRECT);
        // `struct netvm_directop`: { call, this }, two pointers.
        let at = 2 * ptr.bytes() as i32 * i32::from(op);
        // Not `can_move`: the table exists only where the bit is set, so
        // these loads must stay behind the test.
        let func = self.b.ins().load(ptr, MemFlagsData::trusted().with_readonly(), table, at);
        let this = self.b.ins().load(ptr, MemFlagsData::trusted().with_readonly(), table, at + ptr.bytes() as i32);
        (func, this)
    }

    /// Input register `reg` of instance `copro` (its file's inputs at
    /// `input`): the value `copro.in` wrote earlier in this basic block
    /// (`written_inputs`), else a load.
    fn input_value(&mut self, copro: u8, reg: u8, input: Value) -> Value {
        match self.written_inputs.get(&(copro, reg)) {
            Some(v) => *v,
            None => self.b.ins().load(I32, MemFlagsData::trusted(), input, 4 * i32::from(reg)),
        }
    }

    /// In the walk path of [`InvokePaths`] (instance `copro` offers
    /// operation `op` as a walk): the walk of the kind's form, inline, then
    /// a jump to `done`; or a jump to `call`, which performs the operation
    /// by a call, where the walk does not apply.
    fn emit_walk(&mut self, copro: u8, op: u8, call: Block, done: Block) {
        let (files, _) = self.env.regs;
        let ptr = self.cx.frontend.pointer_type();
        let walk = self.b.ins().load(ptr, ctx_flags(), files, REGFILE_SIZE * i32::from(copro) + REGFILE_WALK);
        match self.walk_kind(copro).map(|k| (k.form, k.inserts & (1 << op) != 0)) {
            Some((WalkForm::Dir24, _)) => self.emit_dir24_walk(copro, op, walk, call, done),
            Some((WalkForm::Bucket, insert)) => self.emit_bucket_walk(copro, op, insert, walk, call, done),
            None => unreachable!("a walk only where the kind offers one"),
        }
    }

    /// The DIR-24-8 walk of [`netvm_vm::Dir24Walk`] at `walk`: its outputs
    /// stored in the register file and its counters incremented, then a
    /// jump to `done`. Where the key's packet bytes lie past the packet's
    /// end it jumps to `call` instead, which performs the operation (and
    /// faults as it does).
    fn emit_dir24_walk(&mut self, copro: u8, op: u8, walk: Value, call: Block, done: Block) {
        let (files, _) = self.env.regs;
        let entry = REGFILE_SIZE * i32::from(copro);
        let ptr = self.cx.frontend.pointer_type();
        // The walk and its tables change when an operation changes the
        // routes: plain loads, ordered after any call.
        let mem = MemFlagsData::trusted();
        let input = self.b.ins().load(ptr, ctx_flags(), files, entry + REGFILE_INPUT);
        let output = self.b.ins().load(ptr, ctx_flags(), files, entry + REGFILE_OUTPUT);
        // The key: an input register, or the packet word at the offset in one.
        let lookup = self.b.create_block();
        let key = self.b.append_block_param(lookup, I32);
        match self.walk_key(copro, op) {
            WalkKey::Register(r) => {
                let v = self.input_value(copro, r, input);
                self.b.ins().jump(lookup, &[v.into()]);
            }
            WalkKey::Packet(r) => {
                let read = self.b.create_block();
                let v = self.input_value(copro, r, input);
                let pkt = self.env.mems[Mem::Packet as usize];
                let off = self.b.ins().uextend(I64, v);
                let end = self.b.ins().iadd_imm_s(off, 4);
                let fits = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, end, pkt.len);
                self.b.ins().brif(fits, read, &[], call, &[]);
                self.b.switch_to_block(read);
                let addr = self.b.ins().iadd(pkt.base, off);
                let raw = self.b.ins().load(I32, checked(), addr, 0);
                let k = self.b.ins().bswap(raw);
                self.b.ins().jump(lookup, &[k.into()]);
            }
            WalkKey::None => unreachable!("a walk only where the kind gives the operation a key"),
        }
        // e = root[key >> 8]; a group's entry where e is extended.
        self.b.switch_to_block(lookup);
        let root = self.b.ins().load(ptr, mem, walk, WALK_ROOT);
        let i = self.b.ins().ushr_imm_u(key, 8);
        let i = self.b.ins().uextend(I64, i);
        let i = self.b.ins().ishl_imm_u(i, 2);
        let a = self.b.ins().iadd(root, i);
        let e = self.b.ins().load(I32, mem, a, 0);
        let (group, resolve) = (self.b.create_block(), self.b.create_block());
        let entry_v = self.b.append_block_param(resolve, I32);
        let ext = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, e, 0xff00_0000);
        self.b.ins().brif(ext, group, &[], resolve, &[e.into()]);
        self.b.switch_to_block(group);
        let groups = self.b.ins().load(ptr, mem, walk, WALK_GROUPS);
        let g = self.b.ins().band_imm_u(e, 0xff_ffff);
        let g = self.b.ins().uextend(I64, g);
        let g = self.b.ins().ishl_imm_u(g, 10);
        let low = self.b.ins().band_imm_u(key, 0xff);
        let low = self.b.ins().uextend(I64, low);
        let low = self.b.ins().ishl_imm_u(low, 2);
        let a = self.b.ins().iadd(groups, g);
        let a = self.b.ins().iadd(a, low);
        let e2 = self.b.ins().load(I32, mem, a, 0);
        self.b.ins().jump(resolve, &[e2.into()]);
        // Found where the entry has a depth, else the /0 route if any: a
        // branch, the miss path apart, so that a hit reads nothing more.
        self.b.switch_to_block(resolve);
        let (hit, miss, found_at) = (self.b.create_block(), self.b.create_block(), self.b.create_block());
        let found = self.b.append_block_param(found_at, I32);
        let hop = self.b.append_block_param(found_at, I32);
        let depth = self.b.ins().ushr_imm_u(entry_v, 24);
        self.b.ins().brif(depth, hit, &[], miss, &[]);
        self.b.switch_to_block(hit);
        let one = self.iconst(1);
        let table_hop = self.b.ins().band_imm_u(entry_v, 0xff_ffff);
        self.b.ins().jump(found_at, &[one.into(), table_hop.into()]);
        self.b.switch_to_block(miss);
        self.b.set_cold_block(miss);
        let default_hop = self.b.ins().load(I32, mem, walk, WALK_DEFAULT_HOP);
        let has_default = self.b.ins().load(I32, mem, walk, WALK_HAS_DEFAULT);
        self.b.ins().jump(found_at, &[has_default.into(), default_hop.into()]);
        self.b.switch_to_block(found_at);
        self.b.ins().store(mem, found, output, 0);
        self.b.ins().store(mem, hop, output, 4);
        let counters = self.b.ins().load(ptr, mem, walk, WALK_COUNTERS);
        let lookups = self.b.ins().load(I64, mem, counters, 0);
        let lookups = self.b.ins().iadd_imm_s(lookups, 1);
        self.b.ins().store(mem, lookups, counters, 0);
        let hits = self.b.ins().load(I64, mem, counters, 8);
        let f = self.b.ins().uextend(I64, found);
        let hits = self.b.ins().iadd(hits, f);
        self.b.ins().store(mem, hits, counters, 8);
        if let Some([v0, v1]) = self.walk_outputs.get(&copro).copied() {
            self.b.def_var(v0, found);
            self.b.def_var(v1, hop);
        }
        self.b.ins().jump(done, &[]);
    }

    /// The probe of [`BucketWalk`] at `walk` for operation `op` (a lookup,
    /// or the replace of a stored key's value where `insert`), then a jump
    /// to `done`; or a jump to `call` where the walk does not apply (walk
    /// off, key past the packet's end, a time beyond 2^64 ns; for an
    /// insert, a key not stored or idle).
    fn emit_bucket_walk(&mut self, copro: u8, op: u8, insert: bool, walk: Value, call: Block, done: Block) {
        let (files, _) = self.env.regs;
        let entry = REGFILE_SIZE * i32::from(copro);
        let ptr = self.cx.frontend.pointer_type();
        // The table changes in operations: plain loads, ordered after any call.
        let mem = MemFlagsData::trusted();
        let field = |tx: &mut Self, ty, off: i32| tx.b.ins().load(ty, mem, walk, off);
        let (key, time, hash) = (self.b.create_block(), self.b.create_block(), self.b.create_block());
        let tags = field(self, ptr, BW_TAGS);
        // The fields that follow from the sizes: constants where the
        // instance is expected to have a shape (checked here), else loads.
        let expected = self.env.walk_shapes.get(usize::from(copro)).copied().unwrap_or(0);
        let shape = (expected != 0).then(|| BucketWalk::layout(expected & 0xff, expected >> 8)).flatten().filter(|w| w.shape == expected);
        if shape.is_some() {
            let shaped = self.b.create_block();
            self.b.ins().brif(tags, shaped, &[], call, &[]);
            self.b.switch_to_block(shaped);
            let have = field(self, I32, BW_SHAPE);
            let same = self.b.ins().icmp_imm_u(IntCC::Equal, have, i64::from(expected));
            self.b.ins().brif(same, key, &[], call, &[]);
        } else {
            self.b.ins().brif(tags, key, &[], call, &[]);
        }
        let u32_field = |tx: &mut Self, off: i32, k: fn(&BucketWalk) -> u32| match &shape {
            Some(w) => tx.b.ins().iconst(I32, i64::from(k(w))),
            None => field(tx, I32, off),
        };
        // The key: `reach` bytes at the packet offset in the key's register.
        self.b.switch_to_block(key);
        let WalkKey::Packet(r) = self.walk_key(copro, op) else { unreachable!("a bucket walk's key is in the packet") };
        let input = self.b.ins().load(ptr, ctx_flags(), files, entry + REGFILE_INPUT);
        let off = self.input_value(copro, r, input);
        let off = self.b.ins().uextend(I64, off);
        let reach = u32_field(self, BW_REACH, |w| w.reach);
        let reach = self.b.ins().uextend(I64, reach);
        let end = self.b.ins().iadd(off, reach);
        let pkt = self.env.mems[Mem::Packet as usize];
        let fits = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, end, pkt.len);
        self.b.ins().brif(fits, time, &[], call, &[]);
        // now = sec * 10^9 + nsec, where that fits in 64 bits.
        self.b.switch_to_block(time);
        let (sec, nsec) = match self.env.meta {
            Some(mv) => (self.b.ins().load(I64, ctx_flags(), mv.base, mv.ts_sec), self.b.ins().load(I32, ctx_flags(), mv.base, mv.ts_nsec)),
            None => (self.b.ins().iconst(I64, 0), self.iconst(0)),
        };
        let early = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThanOrEqual, sec, (u64::MAX / 1_000_000_000 - 1) as i64);
        self.b.ins().brif(early, hash, &[], call, &[]);
        self.b.switch_to_block(hash);
        let ns = self.b.ins().imul_imm_s(sec, 1_000_000_000);
        let nsec = self.b.ins().uextend(I64, nsec);
        // `uadd_overflow` (which cannot overflow here) rather than `iadd`:
        // an instruction of two results stays where it is written, so the
        // time is computed once, not again in each branch that uses it
        // (the idle check, the insert's stamp, the `now` watermarks), as
        // Cranelift places a pure value at each of its uses that no
        // earlier one dominates.
        let (now, _) = self.b.ins().uadd_overflow(ns, nsec);
        // The key's words, and the hash.
        // Entries lie at any byte offset: unaligned little-endian accesses.
        let le = MemFlagsData::new().with_notrap().with_endianness(Endianness::Little);
        let key_at = self.b.ins().iadd(pkt.base, off);
        let a_mask = match &shape {
            Some(w) => self.b.ins().iconst(I64, w.a_mask as i64),
            None => field(self, I64, BW_A_MASK),
        };
        let (b_off, b_shift) = (u32_field(self, BW_B_OFF, |w| w.b_off), u32_field(self, BW_B_SHIFT, |w| w.b_shift));
        let b_off = self.b.ins().uextend(I64, b_off);
        let words = |tx: &mut Self, at: Value, flags: MemFlagsData| {
            let x0 = tx.b.ins().load(I64, flags, at, 0);
            let second = tx.b.ins().iadd(at, b_off);
            let x1 = tx.b.ins().load(I64, flags, second, 0);
            let a = tx.b.ins().band(x0, a_mask);
            let x1 = tx.b.ins().ushr(x1, b_shift);
            let b = tx.b.ins().band(x1, a_mask);
            (a, b)
        };
        let (ka, kb) = words(self, key_at, checked().with_endianness(Endianness::Little));
        let fold = |tx: &mut Self, x: Value, y: Value| {
            let lo = tx.b.ins().imul(x, y);
            let hi = tx.b.ins().umulhi(x, y);
            tx.b.ins().bxor(lo, hi)
        };
        let (s0, s1) = (field(self, I64, BW_SEED), field(self, I64, BW_SEED + 8));
        let x = self.b.ins().bxor(ka, s0);
        let y = self.b.ins().bxor(kb, s1);
        let h = fold(self, x, y);
        let h = self.b.ins().bxor_imm_s(h, BucketWalk::MIX[0] as i64);
        let mix1 = self.b.ins().iconst(I64, BucketWalk::MIX[1] as i64);
        let h = fold(self, h, mix1);
        let nb = field(self, I64, BW_NBUCKETS);
        let low = self.b.ins().band_imm_u(h, 0xffff_ffff);
        let b1 = self.b.ins().imul(low, nb);
        let b1 = self.b.ins().ushr_imm_u(b1, 32);
        let tag = self.b.ins().ushr_imm_u(h, 48);
        let one = self.b.ins().iconst(I64, 1);
        let tag = self.b.ins().umax(tag, one);
        // The tag in every lane: eight for a vector compare, four per word otherwise.
        let lanes = if self.cx.simd {
            let tag16 = self.b.ins().ireduce(types::I16, tag);
            self.b.ins().splat(types::I16X8, tag16)
        } else {
            self.b.ins().imul_imm_s(tag, 0x0001_0001_0001_0001)
        };
        let entries = field(self, ptr, BW_ENTRIES);
        let (output, counters) = (self.b.ins().load(ptr, ctx_flags(), files, entry + REGFILE_OUTPUT), field(self, ptr, BW_COUNTERS));
        let stride = u32_field(self, BW_STRIDE, |w| w.stride);
        let stride = self.b.ins().uextend(I64, stride);
        // Bucket b1's slots whose tag matches, then their keys; where none
        // is the key, bucket b2's (computed only then: a key is usually in
        // its first bucket). No loop over the buckets, so that nothing of
        // the second is hoisted into the path of the first.
        let (found, missed) = (self.b.create_block(), self.b.create_block());
        let e_found = self.b.append_block_param(found, ptr);
        let scan = |tx: &mut Self, bk: Value, none: Block| {
            let at = tx.b.ins().ishl_imm_u(bk, 4);
            let at = tx.b.ins().iadd(tags, at);
            let m = tx.tag_matches(at, lanes);
            let base = tx.b.ins().ishl_imm_u(bk, 3);
            let (slots, probe) = (tx.b.create_block(), tx.b.create_block());
            let m_at = tx.b.append_block_param(slots, I32);
            tx.b.ins().jump(slots, &[m.into()]);
            tx.b.switch_to_block(slots);
            tx.b.ins().brif(m_at, probe, &[], none, &[]);
            tx.b.switch_to_block(probe);
            let i = tx.b.ins().ctz(m_at);
            let i = tx.b.ins().uextend(I64, i);
            let slot = tx.b.ins().iadd(base, i);
            let e = tx.b.ins().imul(slot, stride);
            let e = tx.b.ins().iadd(entries, e);
            let (ea, eb) = words(tx, e, le);
            let same_a = tx.b.ins().icmp(IntCC::Equal, ea, ka);
            let same_b = tx.b.ins().icmp(IntCC::Equal, eb, kb);
            let same = tx.b.ins().band(same_a, same_b);
            let m1 = tx.b.ins().iadd_imm_s(m_at, -1);
            let rest = tx.b.ins().band(m_at, m1);
            tx.b.ins().brif(same, found, &[e.into()], slots, &[rest.into()]);
        };
        let (zero, one32) = (self.iconst(0), self.iconst(1));
        let other = self.b.create_block();
        scan(self, b1, other);
        // The second bucket, from the first and the tag.
        self.b.switch_to_block(other);
        let t = self.b.ins().imul_imm_s(tag, i64::from(BucketWalk::ALT));
        let t = self.b.ins().band_imm_u(t, 0xffff_ffff);
        let t = self.b.ins().imul(t, nb);
        let t = self.b.ins().ushr_imm_u(t, 32);
        let below = self.b.ins().isub(t, b1);
        let wrapped = self.b.ins().iadd(below, nb);
        let ge = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, t, b1);
        let b2 = self.b.ins().select(ge, below, wrapped);
        scan(self, b2, missed);
        if insert {
            // An insert of a key not stored: the call finds it a slot.
            self.b.switch_to_block(missed);
            self.b.ins().jump(call, &[]);
        }
        // An entry: live unless idle.
        self.b.switch_to_block(found);
        let e = e_found;
        let (aging, live) = (self.b.create_block(), self.b.create_block());
        let ts_at = |tx: &mut Self| {
            let off = u32_field(tx, BW_TS_OFF, |w| w.ts_off);
            let off = tx.b.ins().uextend(I64, off);
            tx.b.ins().iadd(e, off)
        };
        let idle_ns = field(self, I64, BW_IDLE_NS);
        let never = self.b.ins().icmp_imm_u(IntCC::Equal, idle_ns, -1);
        self.b.ins().brif(never, live, &[], aging, &[]);
        self.b.switch_to_block(aging);
        let at = ts_at(self);
        let ts = self.b.ins().load(I64, le, at, 0);
        let since = self.b.ins().isub(now, ts);
        let ahead = self.b.ins().icmp(IntCC::UnsignedLessThan, now, ts);
        let zero64 = self.b.ins().iconst(I64, 0);
        let since = self.b.ins().select(ahead, zero64, since);
        let idle = self.b.ins().icmp(IntCC::UnsignedGreaterThan, since, idle_ns);
        // An insert over an idle entry counts it aged out: the call does that.
        self.b.ins().brif(idle, if insert { call } else { missed }, &[], live, &[]);
        self.b.switch_to_block(live);
        let count = |tx: &mut Self, i: i32, by: Value| {
            let n = tx.b.ins().load(I64, mem, counters, 8 * i);
            let n = tx.b.ins().iadd(n, by);
            tx.b.ins().store(mem, n, counters, 8 * i);
        };
        let raise = |tx: &mut Self, at: i32| {
            let p = field(tx, ptr, at);
            let t = tx.b.ins().load(I64, mem, p, 0);
            let t = tx.b.ins().umax(t, now);
            tx.b.ins().store(mem, t, p, 0);
        };
        let key_size = u32_field(self, BW_KEY_SIZE, |w| w.key_size);
        let key_size = self.b.ins().uextend(I64, key_size);
        let value_at = self.b.ins().iadd(e, key_size);
        let (out0, out1) = if insert {
            // The value (in4's first bytes), then the time over whatever of
            // in4 lies past the value.
            let v = self.input_value(copro, 4, input);
            let v = self.b.ins().bswap(v);
            self.b.ins().store(le, v, value_at, 0);
            let at = ts_at(self);
            self.b.ins().store(le, now, at, 0);
            count(self, 2, one);
            raise(self, BW_STORE_NOW);
            (one32, zero)
        } else {
            let v = self.b.ins().load(I32, le, value_at, 0);
            let v = self.b.ins().bswap(v);
            let vmask = u32_field(self, BW_VALUE_MASK, |w| w.value_mask);
            let v = self.b.ins().band(v, vmask);
            let out = self.b.create_block();
            self.b.ins().jump(out, &[one32.into(), v.into()]);
            // Not found: the same outputs and counts, as a miss.
            self.b.switch_to_block(missed);
            self.b.ins().jump(out, &[zero.into(), zero.into()]);
            self.b.switch_to_block(out);
            let f = self.b.append_block_param(out, I32);
            let v = self.b.append_block_param(out, I32);
            count(self, 0, one);
            let hit = self.b.ins().uextend(I64, f);
            count(self, 1, hit);
            (f, v)
        };
        raise(self, BW_HANDLE_NOW);
        for (r, v) in [out0, out1, zero, zero, zero].into_iter().enumerate() {
            self.b.ins().store(mem, v, output, 4 * r as i32);
        }
        if let Some([v0, v1]) = self.walk_outputs.get(&copro).copied() {
            self.b.def_var(v0, out0);
            self.b.def_var(v1, out1);
        }
        self.b.ins().jump(done, &[]);
    }

    /// The slots of the bucket whose eight 16-bit tags are at `at` (16
    /// bytes, aligned) that hold the tag in every lane of `lanes`, one bit
    /// each (`i32`): one vector compare where the target has one (x86-64,
    /// AArch64), else the exact zero-lane test on two words.
    fn tag_matches(&mut self, at: Value, lanes: Value) -> Value {
        let flags = MemFlagsData::trusted().with_endianness(Endianness::Little);
        if self.cx.simd {
            let group = self.b.ins().load(types::I16X8, flags, at, 0);
            let eq = self.b.ins().icmp(IntCC::Equal, group, lanes);
            return self.b.ins().vhigh_bits(I32, eq);
        }
        let mut m = None;
        for half in 0..2 {
            let w = self.b.ins().load(I64, flags, at, 8 * half);
            // A lane is 0 where its tag matches; its top bit is then set in
            // `!(((x & 0x7fff..) + 0x7fff..) | x)` and only then (no carry
            // crosses lanes).
            let x = self.b.ins().bxor(w, lanes);
            let low = self.b.ins().band_imm_u(x, 0x7fff_7fff_7fff_7fff);
            let sum = self.b.ins().iadd_imm_s(low, 0x7fff_7fff_7fff_7fff);
            let any = self.b.ins().bor(sum, x);
            let zero = self.b.ins().bnot(any);
            let top = self.b.ins().ushr_imm_u(zero, 15);
            let bits = self.b.ins().band_imm_u(top, 0x0001_0001_0001_0001);
            // Lane bits 0, 16, 32, 48 to bits 0..3.
            let (b1, b2, b3) = (self.b.ins().ushr_imm_u(bits, 15), self.b.ins().ushr_imm_u(bits, 30), self.b.ins().ushr_imm_u(bits, 45));
            let f = self.b.ins().bor(bits, b1);
            let f = self.b.ins().bor(f, b2);
            let f = self.b.ins().bor(f, b3);
            let f = self.b.ins().band_imm_u(f, 0xf);
            let f = self.b.ins().ireduce(I32, f);
            let f = if half == 1 { self.b.ins().ishl_imm_u(f, 4) } else { f };
            m = Some(match m {
                Some(lo) => self.b.ins().bor(lo, f),
                None => f,
            });
        }
        m.expect("two halves")
    }

    /// The address of the `width`-byte access at instruction `i` to memory
    /// `m` at offset `off`, checked unless proved in bounds; returns the
    /// address and a constant displacement to add to it.
    fn address(&mut self, i: usize, m: Mem, off: Value, width: u32) -> (Value, i32) {
        let view = self.env.mems[m as usize];
        let opts = self.cx.opts;
        // Offset folding: `zext(base value) + k`, correct because the
        // analysis proved `base value + k` does not wrap.
        let folded =
            if opts.fold_offsets { self.facts.fold[i].and_then(|f| self.fold_vals.get(&f.base).map(|v| (*v, f.off))) } else { None };
        let (index, disp) = match folded {
            Some((v, k)) => (self.b.ins().uextend(I64, v), k),
            None => (self.b.ins().uextend(I64, off), 0),
        };
        if !(opts.bounds && self.facts.unchecked[i]) {
            let end = self.b.ins().iadd_imm_s(index, disp + i64::from(width));
            let ok = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, end, view.len);
            self.check(ok, FaultKind::Bounds);
        }
        let addr = self.b.ins().iadd(view.base, index);
        match i32::try_from(disp) {
            Ok(d) => (addr, d),
            Err(_) => (self.b.ins().iadd_imm_s(addr, disp), 0),
        }
    }

    /// Big-endian load of `width` bytes at instruction `i`, zero-extended to i32.
    fn load_be(&mut self, i: usize, m: Mem, off: Value, width: u32) -> Value {
        let (addr, d) = self.address(i, m, off, width);
        match width {
            1 => self.b.ins().uload8(I32, checked(), addr, d),
            2 => {
                let raw = self.b.ins().load(types::I16, checked(), addr, d);
                let v = self.b.ins().bswap(raw);
                let v = self.b.ins().uextend(I32, v);
                self.swapped.insert(v, (raw, 2));
                v
            }
            _ => {
                let raw = self.b.ins().load(I32, checked(), addr, d);
                let v = self.b.ins().bswap(raw);
                self.swapped.insert(v, (raw, 4));
                v
            }
        }
    }

    /// `icmp cc a, b`, with the constant byte-order swap of the NetVM paper
    /// (§5.1, Fig. 8): an equality test of a big-endian load against a
    /// constant compares the raw load with the byte-swapped constant, so the
    /// swap of the loaded value disappears (and the byte swap moves to
    /// compile time). Only `eq`/`ne`: swapping does not preserve order.
    fn compare(&mut self, cc: IntCC, a: Value, b: Value) -> Value {
        if self.cx.opts.bswap_const && matches!(cc, IntCC::Equal | IntCC::NotEqual) {
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

    /// Big-endian store of the low `width` bytes of `v` at instruction `i`.
    fn store_be(&mut self, i: usize, m: Mem, off: Value, width: u32, v: Value) {
        let (addr, d) = self.address(i, m, off, width);
        match width {
            1 => {
                self.b.ins().istore8(checked(), v, addr, d);
            }
            2 => {
                let h = self.b.ins().ireduce(types::I16, v);
                let h = self.b.ins().bswap(h);
                self.b.ins().store(checked(), h, addr, d);
            }
            _ => {
                let s = self.b.ins().bswap(v);
                self.b.ins().store(checked(), s, addr, d);
            }
        }
    }

    /// Checks that `[off, off + len)` lies in memory `m`; returns its address (`off` and `len` are `i32`).
    fn region(&mut self, m: Mem, off: Value, len: Value) -> Value {
        let view = self.env.mems[m as usize];
        let off64 = self.b.ins().uextend(I64, off);
        let len64 = self.b.ins().uextend(I64, len);
        let end = self.b.ins().iadd(off64, len64);
        let ok = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, end, view.len);
        self.check(ok, FaultKind::Bounds);
        self.b.ins().iadd(view.base, off64)
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
        let cost = self.seg.edge_cost(from, to);
        if cost == 0 {
            return target;
        }
        let pay = self.b.create_block();
        self.pay.push((pay, cost, target));
        pay
    }

    /// Returns `v` (return mode), storing the budget left first where the
    /// environment asks for it and the segment consumes any.
    fn ret(&mut self, v: Value) {
        if let (ExitMode::Return { budget_out: Some((base, off)) }, true) = (self.env.exits, self.back_edges) {
            let left = self.b.use_var(self.budget);
            // A field compiled code never reads: no `readonly` here.
            self.b.ins().store(MemFlagsData::trusted(), left, base, off);
        }
        self.b.ins().return_(&[v]);
    }

    /// Leaves with outcome `code` (return mode) or through `block` (jump mode).
    fn leave(&mut self, code: u32, block: impl FnOnce(&mut Self) -> Block) {
        match self.env.exits {
            ExitMode::Return { .. } => {
                let v = self.iconst(code);
                self.ret(v);
            }
            ExitMode::Jump { .. } => {
                let blk = block(self);
                self.b.ins().jump(blk, &[]);
            }
        }
    }

    /// The metadata view (verified: metadata instructions occur in `.push` only).
    fn meta(&self) -> MetaView {
        self.env.meta.expect("metadata in .push")
    }
}

/// Inline `hash32`: MurmurHash3 (x86, 32-bit, seed 0) of the four
/// big-endian bytes of `v` (the blocks are read little-endian, so the one
/// block is `bswap(v)`), as `netvm_vm::region::hash32`.
fn hash32(b: &mut FunctionBuilder, v: Value) -> Value {
    let mut k = b.ins().bswap(v);
    k = b.ins().imul_imm_u(k, 0xcc9e_2d51);
    k = b.ins().rotl_imm_s(k, 15);
    k = b.ins().imul_imm_u(k, 0x1b87_3593);
    let mut h = b.ins().rotl_imm_s(k, 13);
    h = b.ins().imul_imm_u(h, 5);
    h = b.ins().iadd_imm_u(h, 0xe654_6b64);
    h = b.ins().bxor_imm_u(h, 4);
    // fmix32
    for (shift, mul) in [(16, Some(0x85eb_ca6bu32)), (13, Some(0xc2b2_ae35)), (16, None)] {
        let s = b.ins().ushr_imm_u(h, shift);
        h = b.ins().bxor(h, s);
        if let Some(m) = mul {
            h = b.ins().imul_imm_u(h, i64::from(m));
        }
    }
    h
}

/// Inline `csum.upd` (RFC 1624 eqn. 3), as `netvm_vm::region::csum_update`:
/// the sum of three 16-bit values folds to 16 bits in two steps.
fn csum_update(b: &mut FunctionBuilder, hc: Value, old: Value, new: Value) -> Value {
    let nhc = b.ins().bnot(hc);
    let nhc = b.ins().band_imm_u(nhc, 0xffff);
    let nold = b.ins().bnot(old);
    let nold = b.ins().band_imm_u(nold, 0xffff);
    let nw = b.ins().band_imm_u(new, 0xffff);
    let mut s = b.ins().iadd(nhc, nold);
    s = b.ins().iadd(s, nw);
    for _ in 0..2 {
        let lo = b.ins().band_imm_u(s, 0xffff);
        let hi = b.ins().ushr_imm_u(s, 16);
        s = b.ins().iadd(lo, hi);
    }
    let r = b.ins().bnot(s);
    b.ins().band_imm_u(r, 0xffff)
}

fn cond_cc(op: Opcode) -> Option<IntCC> {
    Some(match op.condition()? {
        Cond::Eq => IntCC::Equal,
        Cond::Ne => IntCC::NotEqual,
        Cond::Lt => IntCC::UnsignedLessThan,
        Cond::Le => IntCC::UnsignedLessThanOrEqual,
        Cond::Gt => IntCC::UnsignedGreaterThan,
        Cond::Ge => IntCC::UnsignedGreaterThanOrEqual,
        Cond::Slt => IntCC::SignedLessThan,
        Cond::Sle => IntCC::SignedLessThanOrEqual,
        Cond::Sgt => IntCC::SignedGreaterThan,
        Cond::Sge => IntCC::SignedGreaterThanOrEqual,
    })
}

/// `csum` inline (RFC 1071, as `netvm_vm::region::internet_checksum`) on
/// the `n` bytes at `addr` (checked). RFC 1071 §2(B): the one's complement
/// sum is independent of byte order, so the bytes are read as
/// little-endian words (plain loads on x86-64 and aarch64) and the folded
/// sum is byte-swapped at the end. Eight bytes a step, each added as two
/// 32-bit halves into 64 bits (2^32 = 1 modulo 0xffff), then 4, 2 and 1
/// bytes of tail (a last odd byte is padded with zero); 20 bytes (an IPv4
/// header) in straight-line code, without the loop. The 64-bit sum is
/// folded to 32 and then 16 bits with end-around carries and complemented.
/// Returns the `i32` result.
fn inline_csum(b: &mut FunctionBuilder, addr: Value, n: Value) -> Value {
    let flags = MemFlagsData::new().with_notrap().with_endianness(Endianness::Little);
    let words = b.ins().band_imm_u(n, !7i64);
    let (head, body, tail) = (b.create_block(), b.create_block(), b.create_block());
    let (header, general, fold) = (b.create_block(), b.create_block(), b.create_block());
    b.append_block_param(head, I64); // offset
    b.append_block_param(head, I64); // sum
    b.append_block_param(tail, I64);
    b.append_block_param(fold, I64);
    // An IPv4 header without options (20 bytes, by far the most common
    // length) in straight-line code: two 8-byte words and a 4-byte one.
    let is_header = b.ins().icmp_imm_u(IntCC::Equal, n, 20);
    b.ins().brif(is_header, header, &[], general, &[]);

    b.switch_to_block(header);
    let mut sum = b.ins().load(I32, flags, addr, 16);
    sum = b.ins().uextend(I64, sum);
    for at in [0, 8] {
        let w = b.ins().load(I64, flags, addr, at);
        let lo = b.ins().band_imm_u(w, 0xffff_ffff);
        let hi = b.ins().ushr_imm_u(w, 32);
        sum = b.ins().iadd(sum, lo);
        sum = b.ins().iadd(sum, hi);
    }
    b.ins().jump(fold, &[sum.into()]);

    b.switch_to_block(general);
    let zero = b.ins().iconst(I64, 0);
    b.ins().jump(head, &[zero.into(), zero.into()]);

    b.switch_to_block(head);
    let (i, sum) = (b.block_params(head)[0], b.block_params(head)[1]);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, i, words);
    b.ins().brif(more, body, &[], tail, &[sum.into()]);

    b.switch_to_block(body);
    let p = b.ins().iadd(addr, i);
    let w = b.ins().load(I64, flags, p, 0);
    let lo = b.ins().band_imm_u(w, 0xffff_ffff);
    let hi = b.ins().ushr_imm_u(w, 32);
    let sum2 = b.ins().iadd(sum, lo);
    let sum2 = b.ins().iadd(sum2, hi);
    let i2 = b.ins().iadd_imm_s(i, 8);
    b.ins().jump(head, &[i2.into(), sum2.into()]);

    // The last 0 to 7 bytes: 4 if that many are left, then 2, then 1, each
    // at the offset the larger ones leave (`n` with their bits cleared).
    b.switch_to_block(tail);
    let mut sum = b.block_params(tail)[0];
    for (size, ty) in [(4i64, Some(types::I32)), (2, Some(types::I16)), (1, None)] {
        let (take, next) = (b.create_block(), b.create_block());
        b.append_block_param(next, I64);
        let has = b.ins().band_imm_u(n, size);
        b.ins().brif(has, take, &[], next, &[sum.into()]);
        b.switch_to_block(take);
        let at = b.ins().band_imm_u(n, !(2 * size - 1));
        let p = b.ins().iadd(addr, at);
        let x = match ty {
            Some(ty) => {
                let x = b.ins().load(ty, flags, p, 0);
                b.ins().uextend(I64, x)
            }
            None => b.ins().uload8(I64, flags, p, 0),
        };
        let s2 = b.ins().iadd(sum, x);
        b.ins().jump(next, &[s2.into()]);
        b.switch_to_block(next);
        sum = b.block_params(next)[0];
    }
    b.ins().jump(fold, &[sum.into()]);

    b.switch_to_block(fold);
    let sum = b.block_params(fold)[0];
    // End-around carry folds: the high half of `s + rotl(s, half)` is the
    // sum of the halves with its carry added back (exact: it never wraps,
    // and it is 0 only for 0). 64 -> 32 bits, then 32 -> 16.
    let r = b.ins().rotl_imm_u(sum, 32);
    let s = b.ins().iadd(sum, r);
    let s = b.ins().ushr_imm_u(s, 32);
    let s = b.ins().ireduce(I32, s);
    let r = b.ins().rotl_imm_u(s, 16);
    let s = b.ins().iadd(s, r);
    let s = b.ins().ushr_imm_u(s, 16);
    // Back to network byte order, then the complement.
    let s = b.ins().ireduce(types::I16, s);
    let s = b.ins().bswap(s);
    let s = b.ins().bnot(s);
    b.ins().uextend(I32, s)
}

/// Per instruction of `seg`, the coprocessor instances (one bit each, the
/// first 32) whose output registers 0 and 1 hold what the last walkable
/// operation of the instance ([`WalkKey`]: a walk, or the call standing in
/// for one) left there, on every path to the instruction: the translation
/// keeps them in variables, and `copro.out` of them is no access. Any other
/// operation of the instance ends that; input registers do not change the
/// outputs of a kind that walks (`WalkKind::ALL`). Unreachable
/// instructions get every bit.
fn fresh_outputs(seg: &SegmentInfo, kinds: &[Option<&'static WalkKind>], index: impl Fn(i64) -> usize) -> Vec<u32> {
    let n = seg.insns.len();
    let mut at = vec![u32::MAX; n];
    if n == 0 || kinds.iter().all(Option::is_none) {
        return vec![0; n];
    }
    let mut seen = vec![false; n];
    (at[0], seen[0]) = (0, true);
    let mut work = vec![0usize];
    while let Some(i) = work.pop() {
        let insn = &seg.insns[i];
        let mut out = at[i];
        if let (Operands::CoproOp { copro, op }, Opcode::CoproInvoke) = (&insn.operands, insn.op) {
            if *copro < 32 {
                let walks = kinds.get(usize::from(*copro)).copied().flatten().is_some_and(|k| k.key(*op) != WalkKey::None);
                out = if walks { out | 1 << copro } else { out & !(1 << copro) };
            }
        }
        let fall = (!insn.op.ends_block()).then_some(i + 1);
        for s in insn.targets().into_iter().map(&index).chain(fall) {
            if s >= n {
                continue;
            }
            let new = if seen[s] { at[s] & out } else { out };
            if !seen[s] || new != at[s] {
                (at[s], seen[s]) = (new, true);
                work.push(s);
            }
        }
    }
    at
}

/// Translates one verified segment; its code starts in the builder's current
/// block (which may already hold instructions). `facts` comes from [`crate::analysis::analyse`]; `dead`
/// marks info stores to omit (empty: none). With [`ExitMode::Jump`], the
/// returned exits must be filled by the caller; the caller also seals the
/// blocks and finalizes the function.
#[allow(clippy::too_many_arguments)]
pub fn translate_segment<M: Module>(
    b: &mut FunctionBuilder,
    cx: &mut FuncCx<'_, M>,
    seg: &SegmentInfo,
    m: &netil::Module,
    facts: &SegmentFacts,
    dead: &[bool],
    env: SegmentEnv,
) -> SegmentExits {
    let insns = &seg.insns;
    let reachable = |i: usize| seg.depth.get(i).copied().flatten().is_some();
    let index = |t: i64| -> usize { seg.index_of[&u32::try_from(t).expect("verified target")] };

    // Block starts: instruction 0, jump targets of reachable instructions,
    // and the fall-through successors of conditional branches.
    let mut starts: BTreeSet<usize> = BTreeSet::from([0]);
    // The instructions some jump enters (not only a fall-through).
    let mut targets: BTreeSet<usize> = BTreeSet::from([0]);
    let mut back_edges = false;
    for (i, insn) in insns.iter().enumerate() {
        if !reachable(i) {
            continue;
        }
        for t in insn.targets() {
            let to = index(t);
            back_edges |= seg.edge_cost(i, to) != 0;
            starts.insert(to);
            targets.insert(to);
        }
        if insn.op.is_jump() && insn.op != Opcode::Jump {
            starts.insert(i + 1);
        }
    }

    let budget = b.declare_var(I64);
    b.def_var(budget, env.budget);
    let zero = b.ins().iconst(I32, 0);
    let stack: Vec<Variable> = (0..m.max_stack.max(1)).map(|_| b.declare_var(I32)).collect();
    let locals: Vec<Variable> = (0..m.locals).map(|_| b.declare_var(I32)).collect();
    for v in stack.iter().chain(&locals) {
        b.def_var(*v, zero);
    }
    if seg.kind == SegmentKind::Push {
        b.def_var(stack[0], env.in_port.expect(".push has an input port"));
    }
    let blocks: HashMap<usize, Block> = starts.iter().filter(|i| **i < insns.len()).map(|i| (*i, b.create_block())).collect();
    let walk_kinds: Vec<Option<&'static WalkKind>> = m.copros.iter().map(|c| WalkKind::of(&c.kind)).collect();
    b.ins().jump(blocks[&0], &[]);

    let mut tx = Tx {
        b,
        cx,
        seg,
        facts,
        dead,
        env,
        stack,
        locals,
        budget,
        back_edges,
        blocks,
        exits: SegmentExits {
            ports: vec![None; m.out_ports as usize],
            budget_left: back_edges.then_some(budget),
            ..SegmentExits::default()
        },
        pay: Vec::new(),
        consts: HashMap::new(),
        swapped: HashMap::new(),
        fold_vals: HashMap::new(),
        out_ports: m.out_ports,
        fresh: fresh_outputs(seg, &walk_kinds, index),
        walk_kinds,
        walk_outputs: HashMap::new(),
        written_inputs: HashMap::new(),
        below: None,
        fall_below: None,
    };

    let mut open = false; // whether the current block is still unterminated
    for (i, insn) in insns.iter().enumerate() {
        if let Some(&blk) = tx.blocks.get(&i) {
            if open {
                tx.b.ins().jump(blk, &[]);
            }
            tx.b.switch_to_block(blk);
            tx.written_inputs.clear();
            // A fact of the previous instruction's fall-through edge holds
            // where that edge is the block's only way in.
            tx.below = tx.fall_below.take().filter(|_| !targets.contains(&i));
            open = true;
        }
        tx.fall_below = None;
        let Some(d) = seg.depth[i] else { continue };
        if !open {
            continue;
        }
        let d = d as usize;
        translate_insn(&mut tx, i, insn, d);
        if facts.fold_base.get(i).copied().unwrap_or(false) {
            let depth_after = d - insn.op.pops() as usize + insn.op.pushes() as usize;
            let v = tx.get(depth_after - 1);
            tx.fold_vals.insert(i as u32, v);
        }
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

    let mut exits = std::mem::take(&mut tx.exits);
    if matches!(tx.env.exits, ExitMode::Return { .. }) {
        for (k, blk) in FaultKind::ALL.iter().zip(&mut exits.faults) {
            if let Some(blk) = blk.take() {
                tx.b.switch_to_block(blk);
                let v = tx.iconst(k.code());
                tx.ret(v);
            }
        }
    }
    exits
}

/// Translates instruction `i` (`insn`, at stack depth `d`) into the current block.
///
/// Long by design: one match arm per opcode, so the whole ISA's translation
/// reads side by side (operations shared by several arms are helpers of
/// this module).
fn translate_insn<M: Module>(tx: &mut Tx<'_, '_, '_, M>, i: usize, insn: &netil::Insn, d: usize) {
    use Opcode::*;
    let op = insn.op;
    let h = tx.cx.helpers;
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
                _ => hash32(tx.b, a),
            };
            tx.set(d - 1, r);
        }
        (_, CsumUpd) => {
            let hc = tx.get(d - 3);
            let old = tx.get(d - 2);
            let new = tx.get(d - 1);
            let r = csum_update(tx.b, hc, old, new);
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
            // An unconditional jump charges in place (no block of its own needed).
            tx.charge(tx.seg.edge_cost(i, to));
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
                    // Falling through `a >= k` (`a > k`) leaves `a < k`
                    // (`a < k + 1`), and so every slot below holding `a`.
                    let bound = match (op, tx.consts.get(&b).map(|&k| u64::from(k))) {
                        (JcmpGe, Some(k)) => Some(k),
                        (JcmpGt, Some(k)) => Some(k + 1),
                        _ => None,
                    };
                    if let (Some(k), true) = (bound, d >= 3) {
                        if tx.get(d - 3) == a {
                            tx.fall_below = Some((d - 3, k));
                        }
                    }
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
            sw.emit(tx.b, v, default);
        }
        (Operands::Port(p), Ret) => tx.leave(u32::from(*p), |tx| tx.port_block(*p)),
        (_, RetPop) => {
            let p = tx.get(d - 1);
            // The port is known to be in range here (see `Tx::below`).
            let in_range = tx.below.is_some_and(|(s, k)| s == d - 1 && k <= u64::from(tx.out_ports));
            match tx.env.exits {
                ExitMode::Return { .. } => {
                    if !in_range {
                        let ok = tx.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, p, i64::from(tx.out_ports));
                        tx.check(ok, FaultKind::BadPort);
                    }
                    tx.ret(p);
                }
                ExitMode::Jump { indexed } => {
                    // Ports lo..hi: a compare and a jump with the port.
                    let (lo, hi) = indexed.unwrap_or((0, 0));
                    if lo < hi {
                        let rest = tx.b.create_block();
                        let blk = *tx.exits.indexed_port.get_or_insert_with(|| {
                            let blk = tx.b.create_block();
                            tx.b.append_block_param(blk, I32);
                            blk
                        });
                        if in_range && lo == 0 && hi == tx.out_ports {
                            // Every port in range is indexed: no compare.
                            tx.b.ins().jump(blk, &[p.into()]);
                            return;
                        }
                        let at = tx.b.ins().iadd_imm_s(p, -i64::from(lo));
                        let inside = tx.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, at, i64::from(hi - lo));
                        tx.b.ins().brif(inside, blk, &[p.into()], rest, &[]);
                        tx.b.switch_to_block(rest);
                    }
                    // The other ports: a jump table; any other value is a bad port.
                    let bad = tx.fault_block(FaultKind::BadPort);
                    let mut sw = cranelift_frontend::Switch::new();
                    for q in (0..tx.out_ports).filter(|q| !(lo..hi).contains(q)) {
                        let blk = tx.port_block(q);
                        sw.set_entry(u128::from(q), blk);
                    }
                    sw.emit(tx.b, p, bad);
                }
            }
        }
        (_, Drop) => tx.leave(VERDICT_DROP, |tx| *tx.exits.drop.get_or_insert_with(|| tx.b.create_block())),
        (_, Exit) => tx.leave(RESULT_EXIT, |tx| *tx.exits.exit.get_or_insert_with(|| tx.b.create_block())),
        (_, Pktlen) => {
            let len = tx.env.mems[Mem::Packet as usize].len;
            let v = tx.b.ins().ireduce(I32, len);
            tx.set(d, v);
        }
        (_, Wirelen | TstampS | TstampNs) => {
            let mv = tx.meta();
            let v = match op {
                Wirelen => tx.b.ins().load(I32, ctx_flags(), mv.base, mv.wirelen),
                TstampNs => tx.b.ins().load(I32, ctx_flags(), mv.base, mv.ts_nsec),
                _ => {
                    let s = tx.b.ins().load(I64, ctx_flags(), mv.base, mv.ts_sec);
                    tx.b.ins().ireduce(I32, s)
                }
            };
            tx.set(d, v);
        }
        (_, Inport) => {
            let v = tx.env.in_port.expect(".push has an input port");
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
            // Both ranges are checked before anything is copied (source first).
            let from = tx.region(*s, src, len);
            let to = tx.region(*t, dst, len);
            let n = tx.b.ins().uextend(I64, len);
            let fe = tx.cx.frontend;
            tx.b.call_memmove(fe, to, from, n);
        }
        (Operands::Mem(mm), Csum) => {
            let off = tx.get(d - 2);
            let len = tx.get(d - 1);
            let addr = tx.region(*mm, off, len);
            let n = tx.b.ins().uextend(I64, len);
            let v = inline_csum(tx.b, addr, n);
            tx.set(d - 2, v);
        }
        (Operands::Mem(mm), Crc32 | Hash) => {
            let off = tx.get(d - 2);
            let len = tx.get(d - 1);
            let addr = tx.region(*mm, off, len);
            let n = tx.b.ins().uextend(I64, len);
            let f = if op == Crc32 { h.crc32 } else { h.murmur3 };
            let v = tx.cx.call(tx.b, f, &[addr, n]);
            tx.set(d - 2, v);
        }
        (Operands::CoproReg { copro, reg }, CoproIn) => {
            let v = tx.get(d - 1);
            // A store into the register file where the instance has one
            // (the contract of `Coprocessor::registers`), else a call.
            let done = tx.b.create_block();
            if let Some((base, off, call)) = tx.inline_register(*copro, *reg, false) {
                tx.b.ins().store(MemFlagsData::trusted(), v, base, off);
                tx.b.ins().jump(done, &[]);
                tx.b.switch_to_block(call);
            }
            let c = tx.iconst(u32::from(*copro));
            let r = tx.iconst(u32::from(*reg));
            let (cp, n) = tx.env.copros;
            let st = tx.cx.call(tx.b, h.copro_in, &[cp, n, c, r, v]);
            let ok = tx.b.ins().icmp_imm_u(IntCC::Equal, st, 0);
            tx.check(ok, FaultKind::Copro);
            tx.b.ins().jump(done, &[]);
            tx.b.switch_to_block(done);
            // Another slot bound to the same instance shares its registers.
            tx.written_inputs.retain(|(_, r), _| r != reg);
            tx.written_inputs.insert((*copro, *reg), v);
        }
        (Operands::CoproReg { copro, reg }, CoproOut) => {
            // The outputs of a walkable operation are held in variables
            // until another operation of the instance (`fresh_outputs`).
            let v = match tx.walk_outputs.get(copro) {
                Some(vars) if *reg < 2 && u32::from(*copro) < 32 && tx.fresh[i] & (1 << copro) != 0 => {
                    tx.b.use_var(vars[usize::from(*reg)])
                }
                _ => tx.copro_out(*copro, *reg),
            };
            tx.set(d, v);
        }
        (Operands::CoproOp { copro, op: o }, CoproInvoke) => {
            // The walk where the instance offers the operation as one, its
            // direct entry where it has one (the contract of
            // `Coprocessor::registers`), else the call through the helper
            // and `invoke`.
            let done = tx.b.create_block();
            let walkable = tx.walk_key(*copro, *o) != WalkKey::None;
            if walkable && !tx.walk_outputs.contains_key(copro) {
                let vars = [tx.b.declare_var(I32), tx.b.declare_var(I32)];
                tx.walk_outputs.insert(*copro, vars);
            }
            let paths = tx.invoke_paths(*copro, *o);
            if let Some(walk) = paths.walk {
                tx.b.switch_to_block(walk);
                tx.emit_walk(*copro, *o, paths.direct.unwrap_or(paths.call), done);
            }
            if let Some(direct) = paths.direct {
                tx.b.switch_to_block(direct);
                let (func, this) = tx.direct_entry(*copro, *o);
                let pkt = tx.env.mems[Mem::Packet as usize];
                let (sec, nsec) = match tx.env.meta {
                    Some(mv) => {
                        (tx.b.ins().load(I64, ctx_flags(), mv.base, mv.ts_sec), tx.b.ins().load(I32, ctx_flags(), mv.base, mv.ts_nsec))
                    }
                    None => (tx.b.ins().iconst(I64, 0), tx.iconst(0)),
                };
                let ptr = tx.cx.frontend.pointer_type();
                let mut sig = Signature::new(tx.cx.frontend.default_call_conv);
                sig.params.extend([AbiParam::new(ptr), AbiParam::new(ptr), AbiParam::new(I64), AbiParam::new(I64), AbiParam::new(I32)]);
                sig.returns.push(AbiParam::new(I32));
                let sigref = tx.b.import_signature(sig);
                let inst = tx.b.ins().call_indirect(sigref, func, &[this, pkt.base, pkt.len, sec, nsec]);
                let st = tx.b.inst_results(inst)[0];
                let ok = tx.b.ins().icmp_imm_u(IntCC::Equal, st, 0);
                tx.check(ok, FaultKind::Copro);
                if walkable {
                    tx.hold_outputs(*copro, true);
                }
                tx.b.ins().jump(done, &[]);
            }
            tx.b.switch_to_block(paths.call);
            let c = tx.iconst(u32::from(*copro));
            let o = tx.iconst(u32::from(*o));
            let (cp, n) = tx.env.copros;
            let pkt = tx.env.mems[Mem::Packet as usize];
            let info = tx.env.mems[Mem::Info as usize];
            let (sec, nsec, seq) = match tx.env.meta {
                Some(mv) => {
                    let s = tx.b.ins().load(I64, ctx_flags(), mv.base, mv.ts_sec);
                    let ns = tx.b.ins().load(I32, ctx_flags(), mv.base, mv.ts_nsec);
                    let q = tx.b.ins().load(I64, ctx_flags(), mv.base, mv.seq);
                    (s, ns, q)
                }
                None => (tx.b.ins().iconst(I64, 0), tx.iconst(0), tx.b.ins().iconst(I64, 0)),
            };
            let st = tx.cx.call(tx.b, h.copro_invoke, &[cp, n, c, o, pkt.base, pkt.len, info.base, info.len, sec, nsec, seq]);
            let ok = tx.b.ins().icmp_imm_u(IntCC::Equal, st, 0);
            tx.check(ok, FaultKind::Copro);
            if walkable {
                tx.hold_outputs(*copro, false);
            }
            tx.b.ins().jump(done, &[]);
            tx.b.switch_to_block(done);
            tx.written_inputs.clear();
        }
        (_, _) if op.access_width().is_some() => {
            let m = op.access_memory().expect("memory access");
            let w = op.access_width().expect("width");
            if op.is_store() {
                if tx.dead.get(i).copied().unwrap_or(false) {
                    // A dead info store at a constant offset inside info
                    // memory (`SegmentFacts::info_store`): nothing to do.
                    return;
                }
                let v = tx.get(d - 1);
                let off = tx.get(d - 2);
                tx.store_be(i, m, off, w, v);
            } else {
                let off = tx.get(d - 1);
                let v = tx.load_be(i, m, off, w);
                tx.set(d - 1, v);
            }
        }
        (ops, _) => unreachable!("verified instruction {op:?} with operands {ops:?}"),
    }
}
