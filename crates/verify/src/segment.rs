//! Verification of one code segment, in three passes:
//!
//! 1. **decode** the whole segment (every byte, reachable or not);
//! 2. **flow**: walk the reachable instructions lowest offset first, each
//!    once, fixing the stack depth before it, checking its operands, its
//!    stack needs and its successors; the first error met is returned;
//! 3. **values**: abstract interpretation to a fixpoint (constants on the
//!    stack, locals written on every path), then one pass over the reachable
//!    instructions in offset order checking `locload` and constant memory
//!    offsets.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use netil::{DecodeError, Insn, Mem, Module, Opcode, Operands, SegmentKind, SourceMap};

use crate::absint::{Arena, Stack, Val, EMPTY, NONE};
use crate::{Rule, SegmentInfo, VerifyError};

/// After this many changes of the stack state before a join, its
/// constants are dropped (widened to Unknown), which bounds the iteration.
const WIDEN_AFTER: u8 = 8;

/// Formats an instruction for messages: `` `push 12` ``, `` `jz 40` ``
/// (absolute target), `` `copro.in ctr, 0` `` (declared coprocessors by name).
pub(crate) fn describe(insn: &Insn, m: &Module) -> String {
    let mn = insn.op.mnemonic();
    let copro = |c: u8| m.copros.get(usize::from(c)).map_or_else(|| c.to_string(), |d| d.name.clone());
    let body = match &insn.operands {
        Operands::None => mn.to_string(),
        Operands::Imm(v) if *v < 10_000 => format!("{mn} {v}"),
        Operands::Imm(v) => format!("{mn} {v:#x}"),
        Operands::Target(t) => format!("{mn} {t}"),
        Operands::Port(p) => format!("{mn} {p}"),
        Operands::Local(l) => format!("{mn} {l}"),
        Operands::Depth(d) => format!("{mn} {d}"),
        Operands::Mem(x) => format!("{mn} {}", x.name()),
        Operands::MemPair(a, b) => format!("{mn} {}, {}", a.name(), b.name()),
        Operands::CoproReg { copro: c, reg } => format!("{mn} {}, {reg}", copro(*c)),
        Operands::CoproOp { copro: c, op } => format!("{mn} {}, {op}", copro(*c)),
        Operands::Switch(s) => {
            format!("{mn} ({} case{})", s.cases.len(), if s.cases.len() == 1 { "" } else { "s" })
        }
    };
    format!("`{body}`")
}

fn values(n: u64) -> String {
    if n == 1 {
        "1 value".into()
    } else {
        format!("{n} values")
    }
}

fn terminators(kind: SegmentKind) -> &'static str {
    match kind {
        SegmentKind::Init => "exit",
        SegmentKind::Push => "ret, ret.pop or drop",
    }
}

/// Per-segment verification context.
pub(crate) struct SegmentVerifier<'a> {
    module: &'a Module,
    kind: SegmentKind,
    source: Option<&'a SourceMap>,
    code: &'a [u8],
    insns: Vec<Insn>,
    arena: Arena,
}

/// Results of the flow pass.
struct Flow {
    depth: Vec<Option<u16>>,
    /// Successor instruction indices of instruction i: `succ[succ_at[i].0 .. succ_at[i].1]`.
    succ: Vec<u32>,
    succ_at: Vec<(u32, u32)>,
}

impl<'a> SegmentVerifier<'a> {
    pub(crate) fn new(module: &'a Module, kind: SegmentKind, source: Option<&'a SourceMap>, code: &'a [u8]) -> Self {
        SegmentVerifier { module, kind, source, code, insns: Vec::new(), arena: Arena::new() }
    }

    fn error(&self, offset: Option<u32>, rule: Rule, message: String, stack: Option<String>) -> VerifyError {
        let line = offset.and_then(|o| self.source?.lookup(self.kind, o)).map(|(l, _)| l);
        VerifyError { segment: Some(self.kind), offset, line, rule, message, stack }
    }

    fn at(&self, i: usize, rule: Rule, message: String, stack: Stack, depth: u16) -> VerifyError {
        let shown = if stack == NONE { None } else { Some(self.arena.show(stack, usize::from(depth))) };
        self.error(Some(self.insns[i].offset), rule, message, shown)
    }

    pub(crate) fn run(mut self) -> Result<SegmentInfo, VerifyError> {
        self.decode()?;
        let flow = self.flow()?;
        self.values(&flow)?;
        let index_of = self.insns.iter().enumerate().map(|(i, insn)| (insn.offset, i)).collect();
        Ok(SegmentInfo { kind: self.kind, insns: self.insns, depth: flow.depth, index_of, weights: None })
    }

    // ---------------------------------------------------------------- pass 1

    fn decode(&mut self) -> Result<(), VerifyError> {
        if self.code.is_empty() {
            return Err(self.error(
                None,
                Rule::EmptySegment,
                format!("segment {} has no instructions; every path must end with {}", self.kind, terminators(self.kind)),
                None,
            ));
        }
        self.insns = netil::decode(self.code).map_err(|e| {
            let (rule, message) = match &e {
                DecodeError::InvalidOpcode { byte, .. } => (Rule::InvalidOpcode, format!("byte {byte:#04x} is not an opcode")),
                DecodeError::Truncated { offset, mnemonic } => (
                    Rule::TruncatedInsn,
                    format!(
                        "the segment ends inside the operands of `{mnemonic}` ({} byte{} left after the opcode)",
                        self.code.len() as u32 - offset - 1,
                        if self.code.len() as u32 - offset - 1 == 1 { "" } else { "s" }
                    ),
                ),
                DecodeError::InvalidMemory { mnemonic, byte, .. } => {
                    (Rule::InvalidOperand, format!("memory selector {byte} of `{mnemonic}` is not pkt (0), info (1) or data (2)"))
                }
                DecodeError::SwitchTooLarge { count, .. } => {
                    (Rule::InvalidOperand, format!("`switch` has {count} cases, more than the {} allowed", netil::insn::MAX_SWITCH_CASES))
                }
            };
            self.error(Some(e.offset()), rule, message, None)
        })?;
        // Case order is a property of the encoding, checked on every switch,
        // reachable or not, so that every verified module survives the text
        // round trip (the assembler writes cases sorted).
        for insn in &self.insns {
            if let Operands::Switch(table) = &insn.operands {
                if let Some(k) = table.cases.windows(2).position(|w| w[1].0 <= w[0].0) {
                    let (a, b) = (table.cases[k].0, table.cases[k + 1].0);
                    let what = if a == b {
                        format!("case value {b} appears twice (cases {k} and {})", k + 1)
                    } else {
                        format!("case value {b} (case {}) follows {a} (case {k})", k + 1)
                    };
                    return Err(self.error(
                        Some(insn.offset),
                        Rule::SwitchUnsorted,
                        format!("{}: {what}; case values must be strictly ascending", describe(insn, self.module)),
                        None,
                    ));
                }
            }
        }
        Ok(())
    }

    // ---------------------------------------------------------------- pass 2

    /// Index of the instruction starting at byte `t`, or the error for a bad target.
    fn resolve(&self, i: usize, case: Option<u32>, t: i64, s: Stack, d: u16) -> Result<usize, VerifyError> {
        let insn = &self.insns[i];
        let len = self.code.len() as i64;
        let jumper = || match (&insn.operands, case) {
            (Operands::Switch(_), None) => format!("the default of {}", describe(insn, self.module)),
            (Operands::Switch(_), Some(v)) => format!("case {v} of {}", describe(insn, self.module)),
            _ => format!("`{}`", insn.op.mnemonic()),
        };
        if t < 0 || t >= len {
            return Err(self.at(
                i,
                Rule::JumpOutOfSegment,
                format!("{} jumps to offset {t}, outside the segment (0..{len})", jumper()),
                s,
                d,
            ));
        }
        let t = t as u32;
        match self.insns.binary_search_by_key(&t, |x| x.offset) {
            Ok(j) => Ok(j),
            Err(k) => {
                // k >= 1 because insns[0].offset == 0 <= t.
                let inside = &self.insns[k - 1];
                let where_ = if inside.offset == insn.offset {
                    "its own operands".to_string()
                } else {
                    format!("{} at offset {}", describe(inside, self.module), inside.offset)
                };
                Err(self.at(
                    i,
                    Rule::JumpMisaligned,
                    format!("{} jumps to offset {t}, which is inside {where_}, not the start of an instruction", jumper()),
                    s,
                    d,
                ))
            }
        }
    }

    /// Checks that depend only on the instruction and the module's declarations.
    fn check_operands(&self, i: usize, s: Stack, d: u16) -> Result<(), VerifyError> {
        let insn = &self.insns[i];
        let m = self.module;
        let fail = |rule, msg: String| Err(self.at(i, rule, msg, s, d));
        match self.kind {
            SegmentKind::Init if insn.op.needs_exchange_buffer(&insn.operands) => {
                let why = match insn.op {
                    Opcode::Ret | Opcode::RetPop => "forwards the exchange buffer",
                    Opcode::Drop => "drops the exchange buffer",
                    _ => "needs the exchange buffer (packet, info memory or packet metadata)",
                };
                return fail(
                    Rule::InitForbidden,
                    format!("{} {why}, and .init runs without one; end .init with exit", describe(insn, self.module)),
                );
            }
            SegmentKind::Push if insn.op == Opcode::Exit => {
                return fail(
                    Rule::ExitOutsideInit,
                    format!("`exit` ends only the .init handler; .push paths end with {}", terminators(SegmentKind::Push)),
                );
            }
            _ => {}
        }
        match &insn.operands {
            Operands::Local(l) if *l >= m.locals => fail(
                Rule::LocalOutOfRange,
                format!(
                    "{} uses local {l}, but the module declares .locals {}{}",
                    describe(insn, self.module),
                    m.locals,
                    if m.locals == 0 { String::new() } else { format!(" (slots 0..={})", m.locals - 1) }
                ),
            ),
            Operands::Port(p) if *p >= m.out_ports => fail(
                Rule::BadPort,
                format!("{} sends to output port {p}, but the module declares .ports {}", describe(insn, self.module), m.out_ports),
            ),
            Operands::CoproReg { copro, .. } | Operands::CoproOp { copro, .. } if usize::from(*copro) >= m.copros.len() => fail(
                Rule::CoproUndeclared,
                format!(
                    "{} uses coprocessor {copro}, but the module declares {} coprocessor{}",
                    describe(insn, self.module),
                    m.copros.len(),
                    if m.copros.len() == 1 { "" } else { "s" }
                ),
            ),
            Operands::Switch(table) => {
                for (k, w) in table.cases.windows(2).enumerate() {
                    if w[1].0 <= w[0].0 {
                        let what = if w[1].0 == w[0].0 {
                            format!("case value {} appears twice (cases {} and {})", w[1].0, k, k + 1)
                        } else {
                            format!("case value {} (case {}) follows {} (case {})", w[1].0, k + 1, w[0].0, k)
                        };
                        return fail(
                            Rule::SwitchUnsorted,
                            format!("{}: {what}; case values must be strictly ascending", describe(insn, self.module)),
                        );
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn flow(&mut self) -> Result<Flow, VerifyError> {
        let n = self.insns.len();
        let max = u32::from(self.module.max_stack);
        let mut depth: Vec<Option<u16>> = vec![None; n];
        let mut stack: Vec<Stack> = vec![NONE; n];
        // Offset of the instruction that first reached each one (u32::MAX: the entry).
        let mut from: Vec<u32> = vec![u32::MAX; n];
        let mut done = vec![false; n];
        let mut succ: Vec<u32> = Vec::new();
        let mut succ_at: Vec<(u32, u32)> = vec![(0, 0); n];
        // Joins reached with a second, different depth: (depth, from offset, stack).
        let mut mismatch: HashMap<usize, (u16, u32, Stack)> = HashMap::new();
        let mut heap: BinaryHeap<Reverse<usize>> = BinaryHeap::new();
        let mut targets: Vec<usize> = Vec::new();

        let (d0, s0) = match self.kind {
            SegmentKind::Init => (0u16, EMPTY),
            SegmentKind::Push => (1u16, self.arena.push(EMPTY, Val::Unknown)),
        };
        if u32::from(d0) > max {
            return Err(self.at(
                0,
                Rule::StackOverflow,
                format!("the .push handler starts with 1 value on the stack (the input port), above .maxstacksize {max}"),
                s0,
                d0,
            ));
        }
        depth[0] = Some(d0);
        stack[0] = s0;
        heap.push(Reverse(0));

        while let Some(Reverse(i)) = heap.pop() {
            if let Some(&(d2, from2, s2)) = mismatch.get(&i) {
                let d1 = depth[i].expect("reached");
                let src = |f: u32| if f == u32::MAX { "the entry".to_string() } else { format!("{}+{f}", self.kind) };
                let message = format!(
                    "{} is reached with {} on the stack from {} but with {} from {}; all paths into an instruction must agree on the depth",
                    describe(&self.insns[i], self.module),
                    values(u64::from(d1)),
                    src(from[i]),
                    values(u64::from(d2)),
                    src(from2),
                );
                let shown = format!(
                    "{} (and {} on the other path)",
                    self.arena.show(s2, usize::from(d2)),
                    self.arena.show(stack[i], usize::from(d1))
                );
                return Err(self.error(Some(self.insns[i].offset), Rule::StackMismatch, message, Some(shown)));
            }
            if done[i] {
                continue;
            }
            done[i] = true;
            let d = depth[i].expect("queued instructions have a depth");
            let s = stack[i];
            self.check_operands(i, s, d)?;

            let insn = &self.insns[i];
            let op = insn.op;
            let pick = match insn.operands {
                Operands::Depth(n) => n,
                _ => 0,
            };
            let needs = op.stack_needs(pick);
            if needs > u32::from(d) {
                let msg = if op == Opcode::Pick {
                    format!("{} needs {} on the stack, the stack has {}", describe(insn, self.module), values(u64::from(needs)), d)
                } else {
                    format!("{} needs {}, the stack has {}", describe(insn, self.module), values(u64::from(needs)), d)
                };
                return Err(self.at(i, Rule::StackUnderflow, msg, s, d));
            }
            let nd = u32::from(d) - op.pops() + op.pushes();
            if nd > max {
                return Err(self.at(
                    i,
                    Rule::StackOverflow,
                    format!("{} makes the stack {nd} deep, above .maxstacksize {max}", describe(insn, self.module)),
                    s,
                    d,
                ));
            }
            let nd = nd as u16;

            targets.clear();
            match &insn.operands {
                Operands::Target(t) => targets.push(self.resolve(i, None, *t, s, d)?),
                Operands::Switch(table) => {
                    targets.push(self.resolve(i, None, table.default, s, d)?);
                    for (value, t) in &table.cases {
                        targets.push(self.resolve(i, Some(*value), *t, s, d)?);
                    }
                }
                _ => {}
            }
            if !op.ends_block() {
                if i + 1 < n {
                    targets.push(i + 1);
                } else {
                    let why = if op.is_jump() { "when its condition is false" } else { "after it" };
                    return Err(self.at(
                        i,
                        Rule::FallThrough,
                        format!(
                            "{} is the last instruction and execution runs past the end of {} {why}; every path must end with {}",
                            describe(insn, self.module),
                            self.kind,
                            terminators(self.kind)
                        ),
                        s,
                        d,
                    ));
                }
            }
            targets.sort_unstable();
            targets.dedup();

            let out = self.arena.step(&self.insns[i], s);
            let offset = self.insns[i].offset;
            let start = succ.len() as u32;
            for &j in &targets {
                succ.push(j as u32);
                match depth[j] {
                    None => {
                        depth[j] = Some(nd);
                        stack[j] = out;
                        from[j] = offset;
                        heap.push(Reverse(j));
                    }
                    Some(dj) if dj != nd => {
                        if let std::collections::hash_map::Entry::Vacant(e) = mismatch.entry(j) {
                            e.insert((nd, offset, out));
                            heap.push(Reverse(j));
                        }
                    }
                    Some(_) => {}
                }
            }
            succ_at[i] = (start, succ.len() as u32);
        }
        Ok(Flow { depth, succ, succ_at })
    }

    // ---------------------------------------------------------------- pass 3

    fn values(&mut self, flow: &Flow) -> Result<(), VerifyError> {
        let n = self.insns.len();
        let succ_of = |i: usize| &flow.succ[flow.succ_at[i].0 as usize..flow.succ_at[i].1 as usize];

        // Reverse postorder of the reachable instructions (iterative DFS).
        let mut rpo_of = vec![u32::MAX; n];
        let mut order: Vec<u32> = Vec::new();
        {
            let mut visited = vec![false; n];
            let mut dfs: Vec<(usize, usize)> = vec![(0, 0)];
            visited[0] = true;
            while let Some(top) = dfs.last_mut() {
                let (node, k) = *top;
                let succs = succ_of(node);
                if k < succs.len() {
                    top.1 += 1;
                    let j = succs[k] as usize;
                    if !visited[j] {
                        visited[j] = true;
                        dfs.push((j, 0));
                    }
                } else {
                    order.push(node as u32);
                    dfs.pop();
                }
            }
            order.reverse();
            for (r, &i) in order.iter().enumerate() {
                rpo_of[i as usize] = r as u32;
            }
        }

        // Locals written on every path: bitsets interned in `sets`, referenced by index.
        let words = usize::from(self.module.locals).div_ceil(64);
        let mut sets: Vec<Box<[u64]>> = vec![vec![0u64; words].into_boxed_slice()];
        let mut st: Vec<Stack> = vec![NONE; n];
        let mut lc: Vec<u32> = vec![u32::MAX; n];
        let mut changes: Vec<u8> = vec![0; n];
        // Number of incoming edges (the entry counts as one): an instruction
        // with a single predecessor takes its state over instead of merging.
        let mut preds: Vec<u32> = vec![0; n];
        preds[0] = 1;
        for &j in &flow.succ {
            preds[j as usize] = preds[j as usize].saturating_add(1);
        }
        let mut queued = vec![false; n];
        let mut heap: BinaryHeap<Reverse<u32>> = BinaryHeap::new();

        st[0] = match self.kind {
            SegmentKind::Init => EMPTY,
            SegmentKind::Push => self.arena.push(EMPTY, Val::Unknown),
        };
        lc[0] = 0;
        heap.push(Reverse(0));
        queued[0] = true;
        let mut scratch: Vec<u64> = vec![0; words];

        while let Some(Reverse(r)) = heap.pop() {
            let i = order[r as usize] as usize;
            queued[i] = false;
            let insn = &self.insns[i];
            let out_s = self.arena.step(insn, st[i]);
            let mut out_l = lc[i];
            if let (Opcode::Locstore, Operands::Local(l)) = (insn.op, &insn.operands) {
                let (w, bit) = (usize::from(*l) / 64, 1u64 << (l % 64));
                if sets[out_l as usize][w] & bit == 0 {
                    let mut v = sets[out_l as usize].clone();
                    v[w] |= bit;
                    sets.push(v);
                    out_l = (sets.len() - 1) as u32;
                }
            }
            for &j in succ_of(i) {
                let j = j as usize;
                let mut changed = false;
                if st[j] == NONE || preds[j] == 1 {
                    // First arrival, or the only way in: the new state replaces
                    // the old one (it is never above it, as states only go down).
                    changed = st[j] != out_s || lc[j] != out_l;
                    st[j] = out_s;
                    lc[j] = out_l;
                } else {
                    let depth = usize::from(flow.depth[j].unwrap_or(0));
                    if let Some(m) = self.arena.merge(st[j], out_s, depth) {
                        changes[j] = changes[j].saturating_add(1);
                        st[j] = if changes[j] > WIDEN_AFTER { self.arena.all_unknown(depth) } else { m };
                        changed = true;
                    }
                    let (old, new) = (lc[j] as usize, out_l as usize);
                    if old != new {
                        let mut shrunk = false;
                        for ((dst, &a), &b) in scratch.iter_mut().zip(sets[old].iter()).zip(sets[new].iter()) {
                            *dst = a & b;
                            shrunk |= *dst != a;
                        }
                        if shrunk {
                            sets.push(scratch.clone().into_boxed_slice());
                            lc[j] = (sets.len() - 1) as u32;
                            changed = true;
                        }
                    }
                }
                if changed && !queued[j] {
                    queued[j] = true;
                    heap.push(Reverse(rpo_of[j]));
                }
            }
        }

        // Final pass, lowest offset first, on the fixpoint states.
        for i in 0..n {
            let Some(d) = flow.depth[i] else { continue };
            debug_assert!(st[i] != NONE, "reachable instruction without a value state");
            if st[i] == NONE {
                continue;
            }
            let s = st[i];
            let insn = &self.insns[i];
            if let (Opcode::Locload, Operands::Local(l)) = (insn.op, &insn.operands) {
                let (w, bit) = (usize::from(*l) / 64, 1u64 << (l % 64));
                if sets[lc[i] as usize][w] & bit == 0 {
                    return Err(self.at(
                        i,
                        Rule::UninitLocal,
                        format!(
                            "{} reads local {l}, which is not written on every path that reaches it; store to it first (locstore {l})",
                            describe(insn, self.module)
                        ),
                        s,
                        d,
                    ));
                }
            }
            self.check_bounds(i, s, d)?;
        }
        Ok(())
    }

    /// Out-of-bounds checks of info and data accesses whose offset (and
    /// length, for regions) are constants.
    fn check_bounds(&self, i: usize, s: Stack, d: u16) -> Result<(), VerifyError> {
        let insn = &self.insns[i];
        let op = insn.op;
        let a = &self.arena;
        // (memory, offset, length, what) of each access to check.
        let mut accesses: Vec<(Mem, Val, Val, &str)> = Vec::new();
        if let (Some(mem), Some(width)) = (op.access_memory(), op.access_width()) {
            let off = if op.is_store() { a.nth(s, 1) } else { a.top(s) };
            accesses.push((mem, off, Val::Const(width), if op.is_store() { "writes" } else { "reads" }));
        }
        match (op, &insn.operands) {
            (Opcode::Crc32 | Opcode::Hash | Opcode::Csum, Operands::Mem(mem)) => {
                accesses.push((*mem, a.nth(s, 1), a.top(s), "reads"));
            }
            (Opcode::Mcopy, Operands::MemPair(src, dst)) => {
                accesses.push((*src, a.nth(s, 1), a.top(s), "copies from"));
                accesses.push((*dst, a.nth(s, 2), a.top(s), "copies to"));
            }
            _ => {}
        }
        for (mem, off, len, what) in accesses {
            let (size, rule, decl) = match mem {
                Mem::Packet => continue,
                Mem::Info => (self.module.info_size, Rule::InfoOutOfBounds, ".infosize"),
                Mem::Data => (self.module.data_size, Rule::DataOutOfBounds, ".datasize"),
            };
            let (Some(off), Some(len)) = (off.konst(), len.konst()) else { continue };
            let end = u64::from(off) + u64::from(len);
            if end > u64::from(size) {
                return Err(self.at(
                    i,
                    rule,
                    format!("{} {what} {} bytes {off}..{end}, but {decl} is {size}", describe(insn, self.module), mem.name()),
                    s,
                    d,
                ));
            }
        }
        Ok(())
    }
}
