//! The capsule profile of NetIL and its one-pass verifier (docs/capsules.md §2).
//!
//! Capsule code is untrusted and arrives with every packet, so it is checked
//! per packet in one forward pass over its bytes, in time linear in its
//! length, and decoded on the way into the interpreter's form
//! ([`netvm_interp::Prepared`]). What the profile allows:
//!
//! * stack, arithmetic and logic (division included), comparisons;
//! * `jump`, `jz`, `jnz`, `jcmp.*`: forward only in the WASP dialect; in
//!   the SNAP dialect also backward, to an instruction the forward pass
//!   has already reached with the same stack depth (a loop is entered from
//!   its top, so every instruction has one depth, as the SNAP JIT's
//!   register mapping needs);
//! * `ret 0` (forward), `ret 1` (return to the source), `ret.pop`, `drop`;
//! * packet loads (`upload.*`, `pktlen`, `wirelen`): the packet from its
//!   IP header on, read-only (no `ustore`);
//! * info memory = the scratchpad (`iload.*`, `istore.*`), the only
//!   memory capsule code writes;
//! * locals (at most [`LOCALS`], each written before it is read on every path);
//! * metadata (`inport`, `tstamp.*`);
//! * coprocessor 0, the ephemeral state store (`ess`), and 1, the
//!   environment (`env`).
//!
//! Not allowed: `switch`, `exit`, stores to the packet, data memory, region
//! instructions (`mcopy`, `crc32`, `hash`, `csum`: their time grows with a
//! length the code computes), other coprocessors. The stack holds at most
//! [`MAX_STACK`] values and starts empty.
//!
//! # Cost
//!
//! Every instruction `i` has a weight `w_i` ([`CostModel`]), an upper bound
//! of its time on this node. The node gives a capsule a local bound `n·|p|`
//! (its length times the node's cost per byte, SNAP's Eq. 2). The sum of
//! the weights of every reachable instruction must fit the bound, else the
//! capsule is refused before it runs; what is left is the budget of its
//! backward jumps, each of which costs the weights of the instructions it
//! repeats. The code then never spends more than the bound: between two
//! backward jumps execution only moves forward, and each jump pays for what
//! it makes run again (docs/capsules.md §2.3 has the argument).

use netil::{Class, Insn, Opcode, OperandKind, Operands};
use netvm_interp::{decode_op, Edge, Op, Prepared};

use crate::wire::{Dialect, MAX_CODE};

/// Most values on the operand stack.
pub const MAX_STACK: u16 = 16;
/// Local slots.
pub const LOCALS: u16 = 16;
/// Coprocessor index of the ephemeral state store.
pub const ESS: u8 = 0;
/// Coprocessor index of the environment.
pub const ENV: u8 = 1;
/// Output port of `ret` that forwards the packet.
pub const PORT_FORWARD: u16 = 0;
/// Output port of `ret` that returns the packet to its source.
pub const PORT_RETURN: u16 = 1;

/// Why capsule code was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rejected {
    /// Bytes that are not an instruction.
    Decode,
    /// An instruction outside the capsule profile.
    Instruction,
    /// A backward jump in the WASP dialect.
    BackwardJump,
    /// A jump outside the code or into an instruction.
    Target,
    /// A backward jump to an instruction the forward pass did not reach.
    LoopEntry,
    /// Two paths reach an instruction with different stack depths.
    Depth,
    /// Fewer values on the stack than the instruction takes.
    Underflow,
    /// More than [`MAX_STACK`] values.
    Overflow,
    /// A local beyond [`LOCALS`], or read before some path writes it.
    Local,
    /// `ret` to a port other than 0 and 1.
    Port,
    /// A coprocessor other than 0 and 1.
    Copro,
    /// The code runs past its end.
    FallThrough,
}

impl Rejected {
    /// The reason's name in statistics.
    pub fn name(self) -> &'static str {
        match self {
            Rejected::Decode => "decode",
            Rejected::Instruction => "instruction",
            Rejected::BackwardJump => "backward_jump",
            Rejected::Target => "target",
            Rejected::LoopEntry => "loop_entry",
            Rejected::Depth => "depth",
            Rejected::Underflow => "underflow",
            Rejected::Overflow => "overflow",
            Rejected::Local => "local",
            Rejected::Port => "port",
            Rejected::Copro => "copro",
            Rejected::FallThrough => "fall_through",
        }
    }
}

/// The weight of every instruction: an upper bound of its time on this
/// node, in cost units (nanoseconds of the slowest engine, the
/// interpreter, measured by `netvm capsule calibrate`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CostModel {
    /// By opcode byte (the ones outside the profile are never charged).
    pub weights: [u32; 256],
    /// `copro.invoke` by coprocessor: the store, the environment.
    pub invoke: [u32; 2],
}

impl Default for CostModel {
    /// The weights `netvm capsule calibrate` measured on this project's
    /// reference machine (2 vCPU AMD EPYC VM; `src/weights.json`, also
    /// `benches/results/capsule-weights-2026-11-28.json`). A node on other
    /// hardware should measure its own.
    fn default() -> CostModel {
        // Read once: nodes, builds and tests ask for it often.
        static BUILT_IN: std::sync::OnceLock<CostModel> = std::sync::OnceLock::new();
        BUILT_IN
            .get_or_init(|| {
                CostModel::from_json(include_str!("weights.json"))
                    .unwrap_or_else(|e| unreachable!("the built-in weights file is valid: {e}"))
            })
            .clone()
    }
}

impl CostModel {
    /// Weights by instruction class (what a calibration file that does not
    /// name an opcode leaves it at): 2 for stack, comparison, local and
    /// metadata instructions and most arithmetic, 3 for jumps, exits,
    /// memory and coprocessor register accesses, 4 for division and
    /// `hash32`, 1,000 for a store operation and 3 for the environment's.
    pub fn by_class() -> CostModel {
        let mut weights = [0u32; 256];
        for op in Opcode::ALL {
            weights[*op as usize] = match op.class() {
                Class::Stack | Class::Compare | Class::Local | Class::Meta => 2,
                Class::Alu => match op {
                    Opcode::Div | Opcode::Mod | Opcode::Sdiv | Opcode::Smod | Opcode::Hash32 => 4,
                    _ => 2,
                },
                Class::Control | Class::Packet | Class::Info | Class::Copro => 3,
                Class::Data | Class::Region => 0,
            };
        }
        CostModel { weights, invoke: [1000, 3] }
    }

    /// The weight of one decoded instruction.
    pub fn weight(&self, insn: &Insn) -> u32 {
        match insn.operands {
            Operands::CoproOp { copro, .. } => self.invoke.get(usize::from(copro)).copied().unwrap_or(u32::MAX),
            _ => self.weights[insn.op as usize],
        }
    }
}

/// Verified capsule code, ready for the interpreter.
#[derive(Clone, Debug)]
pub struct CapsuleCode {
    /// The code in the interpreter's form, backward edges carrying their weighted cost.
    pub prepared: Prepared,
    /// The sum of the weights of every reachable instruction.
    pub static_cost: u64,
    /// Whether some reachable instruction writes the scratchpad.
    pub writes_scratch: bool,
    /// Instructions decoded.
    pub insns: usize,
}

/// What the forward pass knows on arriving at an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reach {
    depth: u16,
    /// Locals written on every path so far, one bit each.
    init: u16,
}

const UNREACHED: u32 = u32::MAX;

/// What the verifier needs of an opcode byte, looked up once per instruction.
#[derive(Clone, Copy, Debug)]
struct OpInfo {
    op: Option<Opcode>,
    /// Inside the capsule profile.
    allowed: bool,
    /// Bytes of the whole instruction.
    len: u8,
    pops: u8,
    pushes: u8,
    ends_block: bool,
    writes_scratch: bool,
}

const fn op_info(b: u8) -> OpInfo {
    let none = OpInfo { op: None, allowed: false, len: 1, pops: 0, pushes: 0, ends_block: false, writes_scratch: false };
    let Some(op) = Opcode::from_byte(b) else { return none };
    let allowed = match op.class() {
        Class::Stack | Class::Alu | Class::Compare | Class::Meta | Class::Info | Class::Local | Class::Copro => true,
        Class::Control => !matches!(op, Opcode::Switch | Opcode::Exit),
        Class::Packet => !op.is_store(),
        Class::Data | Class::Region => false,
    };
    let len = match op.operands().fixed_size() {
        Some(n) => 1 + n as u8,
        None => 1,
    };
    OpInfo {
        op: Some(op),
        allowed,
        len,
        pops: op.pops() as u8,
        pushes: op.pushes() as u8,
        ends_block: op.ends_block(),
        writes_scratch: matches!(op.class(), Class::Info) && op.is_store(),
    }
}

const OPS: [OpInfo; 256] = {
    let mut t = [op_info(0); 256];
    let mut b = 0;
    while b < 256 {
        t[b] = op_info(b as u8);
        b += 1;
    }
    t
};

/// The one-pass verifier, with buffers reused from capsule to capsule (no
/// allocation per packet once warm).
#[derive(Debug)]
pub struct Verifier {
    /// Per byte offset: the merged state of forward jumps to it, packed.
    pending: Vec<u32>,
    /// Per byte offset: the state the pass reached the instruction with, packed.
    reached: Vec<u32>,
    /// Per byte offset: the index of the instruction starting there, or `u32::MAX`.
    index: Vec<u32>,
    /// Offsets written in the three tables above (to reset them).
    touched: Vec<u32>,
    /// Forward edges to resolve: (op index, target offset).
    fixups: Vec<(u32, u32)>,
    /// Weights of the instructions before each instruction (and after the last).
    prefix: Vec<u64>,
    ops: Vec<Op>,
    is_target: Vec<bool>,
    new_index: Vec<u32>,
}

impl Default for Verifier {
    fn default() -> Verifier {
        Verifier {
            pending: vec![UNREACHED; MAX_CODE + 1],
            reached: vec![UNREACHED; MAX_CODE + 1],
            index: vec![u32::MAX; MAX_CODE + 1],
            touched: Vec::new(),
            fixups: Vec::new(),
            prefix: Vec::new(),
            ops: Vec::new(),
            is_target: Vec::new(),
            new_index: Vec::new(),
        }
    }
}

fn pack(r: Reach) -> u32 {
    u32::from(r.depth) << 16 | u32::from(r.init)
}

fn unpack(v: u32) -> Option<Reach> {
    (v != UNREACHED).then_some(Reach { depth: (v >> 16) as u16, init: v as u16 })
}

fn u16_at(code: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([code[at], code[at + 1]])
}

fn u32_at(code: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([code[at], code[at + 1], code[at + 2], code[at + 3]])
}

impl Verifier {
    /// Checks `code` from byte `entry` under `dialect` and the weights of
    /// `costs`, and decodes it into `out` (whose buffers are reused).
    pub fn verify(&mut self, code: &[u8], entry: u16, dialect: Dialect, costs: &CostModel, out: &mut CapsuleCode) -> Result<(), Rejected> {
        if code.len() > MAX_CODE || usize::from(entry) >= code.len() {
            return Err(Rejected::Target);
        }
        let result = self.pass(code, entry, dialect, costs);
        // Leave the per-offset tables clean for the next capsule.
        for &t in &self.touched {
            self.pending[t as usize] = UNREACHED;
            self.reached[t as usize] = UNREACHED;
            self.index[t as usize] = u32::MAX;
        }
        self.touched.clear();
        let (static_cost, writes_scratch) = result?;
        out.prepared.switches.clear();
        out.prepared.fuse_from_with(&self.ops, &self.is_target, &mut self.new_index);
        out.static_cost = static_cost;
        out.writes_scratch = writes_scratch;
        out.insns = self.ops.len();
        Ok(())
    }

    /// The forward pass: checks every instruction from `entry` on and
    /// decodes it into `ops` (forward edges resolved at the end).
    fn pass(&mut self, code: &[u8], entry: u16, dialect: Dialect, costs: &CostModel) -> Result<(u64, bool), Rejected> {
        self.ops.clear();
        self.fixups.clear();
        self.prefix.clear();
        self.prefix.push(0);
        let mut cur = Some(Reach { depth: 0, init: 0 });
        let mut pc = usize::from(entry);
        let mut total = 0u64;
        let mut writes_scratch = false;
        while pc < code.len() {
            let info = OPS[code[pc] as usize];
            let Some(op) = info.op else { return Err(Rejected::Decode) };
            let len = usize::from(info.len);
            if pc + len > code.len() {
                return Err(Rejected::Decode);
            }
            self.touched.push(pc as u32);
            self.index[pc] = self.ops.len() as u32;
            if let Some(p) = unpack(self.pending[pc]) {
                cur = match cur {
                    None => Some(p),
                    Some(c) if c.depth != p.depth => return Err(Rejected::Depth),
                    Some(c) => Some(Reach { depth: c.depth, init: c.init & p.init }),
                };
            }
            let Some(here) = cur else {
                // Dead code: never runs (its bytes still decode).
                self.ops.push(Op::Drop);
                self.prefix.push(total);
                pc += len;
                continue;
            };
            self.reached[pc] = pack(here);
            if !info.allowed {
                return Err(Rejected::Instruction);
            }
            writes_scratch |= info.writes_scratch;
            let a = pc + 1;
            let operands = match op.operands() {
                OperandKind::None => Operands::None,
                OperandKind::Imm32 => Operands::Imm(u32_at(code, a)),
                OperandKind::Target => Operands::Target((pc + len) as i64 + i64::from(u32_at(code, a) as i32)),
                OperandKind::Port => Operands::Port(u16_at(code, a)),
                OperandKind::Local => Operands::Local(u16_at(code, a)),
                OperandKind::Depth => Operands::Depth(code[a]),
                OperandKind::CoproReg => Operands::CoproReg { copro: code[a], reg: code[a + 1] },
                OperandKind::CoproOp => Operands::CoproOp { copro: code[a], op: code[a + 1] },
                // Region instructions and `switch` are outside the profile.
                OperandKind::Mem | OperandKind::MemPair | OperandKind::Switch => return Err(Rejected::Instruction),
            };
            let needs = if let Operands::Depth(d) = operands { u32::from(d) + 1 } else { u32::from(info.pops) };
            if u32::from(here.depth) < needs {
                return Err(Rejected::Underflow);
            }
            let depth = u32::from(here.depth) - u32::from(info.pops) + u32::from(info.pushes);
            if depth > u32::from(MAX_STACK) {
                return Err(Rejected::Overflow);
            }
            let mut after = Reach { depth: depth as u16, init: here.init };
            let weight = match operands {
                Operands::CoproOp { copro, .. } => costs.invoke.get(usize::from(copro)).copied().unwrap_or(u32::MAX),
                _ => costs.weights[code[pc] as usize],
            };
            total += u64::from(weight);
            let i = self.ops.len();
            let mut edge = Edge { to: 0, cost: 0 };
            match operands {
                Operands::Local(n) => {
                    if n >= LOCALS || (op == Opcode::Locload && here.init & (1 << n) == 0) {
                        return Err(Rejected::Local);
                    }
                    if op == Opcode::Locstore {
                        after.init |= 1 << n;
                    }
                }
                Operands::Port(p) if p != PORT_FORWARD && p != PORT_RETURN => return Err(Rejected::Port),
                Operands::CoproReg { copro, .. } | Operands::CoproOp { copro, .. } if copro != ESS && copro != ENV => {
                    return Err(Rejected::Copro)
                }
                Operands::Target(t) => {
                    if t < 0 || t >= code.len() as i64 {
                        return Err(Rejected::Target);
                    }
                    let t = t as usize;
                    if t > pc {
                        let merged = match unpack(self.pending[t]) {
                            None => {
                                self.touched.push(t as u32);
                                after
                            }
                            Some(p) if p.depth != after.depth => return Err(Rejected::Depth),
                            Some(p) => Reach { depth: p.depth, init: p.init & after.init },
                        };
                        self.pending[t] = pack(merged);
                        self.fixups.push((i as u32, t as u32));
                    } else {
                        if dialect == Dialect::Wasp {
                            return Err(Rejected::BackwardJump);
                        }
                        let Some(at) = unpack(self.reached[t]) else { return Err(Rejected::LoopEntry) };
                        if at.depth != after.depth {
                            return Err(Rejected::Depth);
                        }
                        if at.init & !after.init != 0 {
                            return Err(Rejected::Local);
                        }
                        // The weights of the instructions it repeats, this one included.
                        let to = self.index[t] as usize;
                        edge = Edge { to: to as u32, cost: (total - self.prefix[to]).min(u64::from(u32::MAX)) as u32 };
                    }
                }
                _ => {}
            }
            let insn = Insn { offset: pc as u32, len: len as u32, op, operands };
            let mut no_switch = Vec::new();
            self.ops.push(decode_op(&insn, &mut |_| edge, &mut no_switch));
            self.prefix.push(total);
            cur = (!info.ends_block).then_some(after);
            pc += len;
        }
        if cur.is_some() {
            return Err(Rejected::FallThrough);
        }
        // Resolve the forward edges: each must land on an instruction.
        self.is_target.clear();
        self.is_target.resize(self.ops.len() + 1, false);
        for &(i, t) in &self.fixups {
            let to = self.index[t as usize];
            if to == u32::MAX {
                return Err(Rejected::Target);
            }
            self.is_target[to as usize] = true;
            match &mut self.ops[i as usize] {
                Op::Jump(e) | Op::Jz(e) | Op::Jnz(e) | Op::Jcmp(_, e) => e.to = to,
                other => unreachable!("a forward edge on {other:?}"),
            }
        }
        for op in &self.ops {
            if let Op::Jump(e) | Op::Jz(e) | Op::Jnz(e) | Op::Jcmp(_, e) = op {
                self.is_target[e.to as usize] = true;
            }
        }
        Ok((total, writes_scratch))
    }
}

impl Default for CapsuleCode {
    fn default() -> CapsuleCode {
        CapsuleCode { prepared: Prepared { ops: Vec::new(), switches: Vec::new() }, static_cost: 0, writes_scratch: false, insns: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(src: &str) -> Vec<u8> {
        let listing = format!(".copro ess ess\n.copro env env\n.ports 2\n.infosize 16\n.locals 16\nsegment .push\n{src}\nends\n");
        netil::assemble(&listing).unwrap_or_else(|e| panic!("{e}\n{listing}")).module.push.unwrap()
    }

    fn check(src: &str, dialect: Dialect) -> Result<CapsuleCode, Rejected> {
        let mut out = CapsuleCode::default();
        Verifier::default().verify(&code(src), 0, dialect, &CostModel::default(), &mut out).map(|()| out)
    }

    #[test]
    fn the_profile_accepts_what_capsules_do() {
        let c = check(
            "push 0\n iload.32\n push 1\n add\n locstore 3\n push 0\n locload 3\n istore.32\n
             push 12\n upload.32\n copro.in ess, 1\n push 0\n copro.in ess, 0\n copro.invoke ess, 0\n
             copro.out ess, 0\n jz skip\n copro.out env, 0\n pop\nskip:\n ret 0",
            Dialect::Wasp,
        )
        .unwrap();
        assert!(c.writes_scratch);
        assert!(c.static_cost >= u64::from(CostModel::default().invoke[0]), "the store's weight is counted");
        assert_eq!(check("ret 1", Dialect::Wasp).unwrap().insns, 1);
    }

    #[test]
    fn each_rule_has_its_reason() {
        let w = |s: &str| check(s, Dialect::Wasp).err();
        assert_eq!(w("push 0\n push 1\n ustore.8\n drop"), Some(Rejected::Instruction));
        assert_eq!(w("push 0\n dload.8\n drop"), Some(Rejected::Instruction));
        assert_eq!(w("push 0\n push 4\n hash pkt\n drop"), Some(Rejected::Instruction));
        assert_eq!(w("push 1\n switch 1: a, default: a\na:\n drop"), Some(Rejected::Instruction));
        assert_eq!(w("top:\n push 1\n jnz top\n drop"), Some(Rejected::BackwardJump));
        assert_eq!(w("add\n drop"), Some(Rejected::Underflow));
        let deep = "push 1\n".repeat(17) + "drop";
        assert_eq!(w(&deep), Some(Rejected::Overflow));
        assert_eq!(w("locload 0\n drop"), Some(Rejected::Local));
        assert_eq!(w("push 1\n locstore 16\n drop"), Some(Rejected::Local));
        assert_eq!(w("push 1\n jz a\n push 1\n locstore 0\na:\n locload 0\n drop"), Some(Rejected::Local), "one path leaves it unwritten");
        assert_eq!(w("ret 2"), Some(Rejected::Port));
        assert_eq!(w("push 1\n push 2\n jnz a\n push 3\na:\n drop"), Some(Rejected::Depth));
        assert_eq!(w("push 1\n pop"), Some(Rejected::FallThrough));
        assert_eq!(check("jump b\na:\n push 1\n jnz a\nb:\n jump a", Dialect::Snap).err(), Some(Rejected::LoopEntry));
        assert_eq!(check("top:\n push 1\n jnz top\n drop", Dialect::Snap).err(), None);
        // Raw bytes: a jump into an instruction, an invalid opcode, another coprocessor.
        let mut bad = code("jump a\n push 7\na:\n drop");
        bad[1] = 1; // the target now lands inside `push 7`
        let mut out = CapsuleCode::default();
        let mut v = Verifier::default();
        assert_eq!(v.verify(&bad, 0, Dialect::Wasp, &CostModel::default(), &mut out), Err(Rejected::Target));
        assert_eq!(v.verify(&[0xff], 0, Dialect::Wasp, &CostModel::default(), &mut out), Err(Rejected::Decode));
        let other = code("copro.invoke env, 0\n drop");
        let mut other = other.clone();
        other[1] = 2;
        assert_eq!(v.verify(&other, 0, Dialect::Wasp, &CostModel::default(), &mut out), Err(Rejected::Copro));
        // The verifier is reusable after a refusal.
        assert_eq!(v.verify(&code("ret 0"), 0, Dialect::Wasp, &CostModel::default(), &mut out), Ok(()));
    }

    #[test]
    fn backward_edges_cost_the_weights_they_repeat() {
        let c = check("push 3\n locstore 0\ntop:\n locload 0\n push 1\n sub\n dup\n locstore 0\n jnz top\n ret 0", Dialect::Snap).unwrap();
        let m = CostModel::default();
        let w = |op: Opcode| m.weights[op as usize];
        // The loop repeats locload, push, sub, dup, locstore and jnz.
        let body = w(Opcode::Locload) + w(Opcode::Push) + w(Opcode::Sub) + w(Opcode::Dup) + w(Opcode::Locstore) + w(Opcode::Jnz);
        let costs: Vec<u32> = c
            .prepared
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::Jnz(e) | Op::Jump(e) | Op::Jz(e) | Op::Jcmp(_, e) | Op::JcmpImm(_, _, e) => Some(e.cost),
                _ => None,
            })
            .collect();
        assert_eq!(costs, vec![body]);
        assert_eq!(c.static_cost, u64::from(body + w(Opcode::Push) + w(Opcode::Locstore) + w(Opcode::Ret)));
    }

    #[test]
    fn no_bytes_make_it_panic() {
        let mut v = Verifier::default();
        let mut out = CapsuleCode::default();
        let mut r = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            let len = 1 + (r % 40) as usize;
            let bytes: Vec<u8> = (0..len).map(|i| (r.rotate_left(i as u32 * 7) >> 3) as u8).collect();
            for d in [Dialect::Wasp, Dialect::Snap] {
                let _ = v.verify(&bytes, (r % len as u64) as u16, d, &CostModel::default(), &mut out);
            }
        }
    }
}
