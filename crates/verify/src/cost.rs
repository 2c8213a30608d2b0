//! What one run of a verified handler can cost at most: the bound
//! admission control (NetBind §III-B, issue 17) weighs against a data
//! path's per-packet headroom.
//!
//! The bound is counted in NetIL terms, per instruction [`Class`], plus the
//! bytes region instructions (`mcopy`, `crc32`, `hash`, `csum`) may cover
//! and the coprocessor operations (`copro.invoke`); an engine's calibration
//! turns it into time. Where the handler has no backward edge, it is the
//! costliest path through the control-flow graph (forward edges only, so
//! the graph is acyclic and one pass in reverse order finds it) for the
//! given weights; a region instruction there covers at most what an
//! interval analysis of its length operand allows (the checksum of an IPv4
//! header, `IHL × 4`, covers at most 60 bytes), and at most its memory. Where it has one, the budget bounds it instead: a handler
//! of `n` instructions runs at most `n × (B + 1)` of them (docs/netil.md
//! §2.7), each counted as the costliest instruction it has.

use netil::{Class, Insn, Mem, Opcode, Operands};

use crate::SegmentInfo;

/// Instruction classes, in the order [`WorstCase::insns`] counts them.
pub const CLASSES: [Class; 11] = [
    Class::Stack,
    Class::Alu,
    Class::Compare,
    Class::Control,
    Class::Packet,
    Class::Info,
    Class::Data,
    Class::Local,
    Class::Region,
    Class::Meta,
    Class::Copro,
];

/// The index of `c` in [`CLASSES`].
pub fn class_index(c: Class) -> usize {
    CLASSES.iter().position(|&x| x == c).unwrap_or(0)
}

/// What a handler's costliest run executes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorstCase {
    /// Instructions per class ([`CLASSES`] order).
    pub insns: [u64; CLASSES.len()],
    /// Bytes region instructions cover, at most.
    pub region_bytes: u64,
    /// Coprocessor operations (`copro.invoke`).
    pub copro_ops: u64,
    /// The handler has a backward edge: the bound is the budget's.
    pub loops: bool,
    /// The bound's weight under the weights it was found with.
    pub weight: f64,
}

impl WorstCase {
    /// Instructions in all.
    pub fn total_insns(&self) -> u64 {
        self.insns.iter().sum()
    }

    /// `self` and `other` run one after the other.
    pub fn add(&mut self, other: &WorstCase) {
        for (a, b) in self.insns.iter_mut().zip(&other.insns) {
            *a = a.saturating_add(*b);
        }
        self.region_bytes = self.region_bytes.saturating_add(other.region_bytes);
        self.copro_ops = self.copro_ops.saturating_add(other.copro_ops);
        self.loops |= other.loops;
        self.weight += other.weight;
    }
}

/// What an instruction weighs: per class, per region byte, per coprocessor
/// operation (nanoseconds on an engine, after calibration; 1 each counts
/// instructions).
#[derive(Clone, Debug, PartialEq)]
pub struct Weights {
    /// Per instruction of each class ([`CLASSES`] order).
    pub class: [f64; CLASSES.len()],
    /// Per byte a region instruction covers.
    pub region_byte: f64,
    /// Per `copro.invoke`, on top of its class.
    pub copro_op: f64,
}

impl Default for Weights {
    /// Every instruction 1, bytes and operations 0: counts instructions.
    fn default() -> Weights {
        Weights { class: [1.0; CLASSES.len()], region_byte: 0.0, copro_op: 0.0 }
    }
}

/// The sizes region instructions may cover: the packet's (the largest
/// frame the data path admits), the info and the data memory's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// The largest packet, in bytes.
    pub packet: u64,
    /// The info memory, in bytes.
    pub info: u64,
    /// The data memory, in bytes.
    pub data: u64,
}

/// An interval of 32-bit values, `lo..=hi`.
type Range = (u64, u64);

const ANY: Range = (0, u32::MAX as u64);

fn hull(a: Range, b: Range) -> Range {
    (a.0.min(b.0), a.1.max(b.1))
}

/// The values `op` computes from `a` and `b` (`b` on top), as an interval.
fn range2(op: Opcode, a: Range, b: Range) -> Range {
    let fits = |r: Range| if r.1 <= u32::MAX as u64 { r } else { ANY };
    let konst = |r: Range| (r.0 == r.1).then_some(r.0);
    match op {
        Opcode::Add => fits((a.0 + b.0, a.1 + b.1)),
        Opcode::Sub if a.0 >= b.1 => (a.0 - b.1, a.1 - b.0),
        Opcode::Mul => fits((a.0 * b.0, a.1.saturating_mul(b.1))),
        Opcode::And => (0, a.1.min(b.1)),
        Opcode::Or | Opcode::Xor => {
            let m = a.1.max(b.1);
            (0, if m == 0 { 0 } else { u64::MAX >> m.leading_zeros() }.min(u32::MAX as u64))
        }
        Opcode::Shr => match konst(b) {
            Some(k) if k < 32 => (a.0 >> k, a.1 >> k),
            _ => (0, a.1),
        },
        Opcode::Shl => match konst(b) {
            Some(k) if k < 32 => fits((a.0 << k, a.1 << k)),
            _ => ANY,
        },
        _ if op.class() == Class::Compare => (0, 1),
        _ => ANY,
    }
}

/// For each instruction of a loop-free handler, the largest length its
/// region operand may have (`None` for the others), by an interval
/// analysis of the stack and locals along every path.
fn region_lengths(seg: &SegmentInfo, sizes: &Sizes) -> Vec<Option<u64>> {
    #[derive(Clone)]
    struct State {
        stack: Vec<Range>,
        locals: Vec<Range>,
    }
    let join = |a: &mut Option<State>, b: &State| match a {
        None => *a = Some(b.clone()),
        Some(a) => {
            for (x, y) in a.stack.iter_mut().rev().zip(b.stack.iter().rev()) {
                *x = hull(*x, *y);
            }
            for (x, y) in a.locals.iter_mut().zip(&b.locals) {
                *x = hull(*x, *y);
            }
        }
    };
    let insns = &seg.insns;
    let mut states: Vec<Option<State>> = vec![None; insns.len()];
    // `.push` starts with the input port on the stack.
    if !insns.is_empty() {
        states[0] = Some(State { stack: vec![(0, u16::MAX as u64)], locals: Vec::new() });
    }
    let mut out = vec![None; insns.len()];
    for i in 0..insns.len() {
        let Some(mut st) = states[i].take() else { continue };
        let insn = &insns[i];
        let top = |st: &State, n: usize| st.stack.len().checked_sub(n + 1).map_or(ANY, |k| st.stack[k]);
        if insn.op.class() == Class::Region {
            out[i] = Some(top(&st, 0).1);
        }
        let pop = |st: &mut State, n: usize| {
            let k = st.stack.len().saturating_sub(n);
            st.stack.truncate(k);
        };
        match (insn.op, &insn.operands) {
            (Opcode::Push, Operands::Imm(v)) => st.stack.push((u64::from(*v), u64::from(*v))),
            (Opcode::Dup, _) => st.stack.push(top(&st, 0)),
            (Opcode::Over, _) => st.stack.push(top(&st, 1)),
            (Opcode::Pick, Operands::Depth(n)) => st.stack.push(top(&st, usize::from(*n))),
            (Opcode::Swap, _) => {
                let n = st.stack.len();
                if n >= 2 {
                    st.stack.swap(n - 1, n - 2);
                }
            }
            (Opcode::Locload, Operands::Local(n)) => st.stack.push(st.locals.get(usize::from(*n)).copied().unwrap_or(ANY)),
            (Opcode::Locstore, Operands::Local(n)) => {
                let v = top(&st, 0);
                pop(&mut st, 1);
                let n = usize::from(*n);
                if st.locals.len() <= n {
                    st.locals.resize(n + 1, ANY);
                }
                st.locals[n] = v;
            }
            (Opcode::Upload8 | Opcode::Iload8 | Opcode::Dload8, _) => {
                pop(&mut st, 1);
                st.stack.push((0, 0xff));
            }
            (Opcode::Upload16 | Opcode::Iload16 | Opcode::Dload16, _) => {
                pop(&mut st, 1);
                st.stack.push((0, 0xffff));
            }
            (Opcode::Pktlen, _) => st.stack.push((0, sizes.packet)),
            (op, _) if op.pops() == 2 && op.pushes() == 1 && matches!(op.class(), Class::Alu | Class::Compare) => {
                let (a, b) = (top(&st, 1), top(&st, 0));
                pop(&mut st, 2);
                st.stack.push(range2(op, a, b));
            }
            (op, _) => {
                pop(&mut st, op.pops() as usize);
                for _ in 0..op.pushes() {
                    st.stack.push(ANY);
                }
            }
        }
        for t in insn.targets() {
            if let Some(j) = u32::try_from(t).ok().and_then(|t| seg.index_of(t)) {
                join(&mut states[j], &st);
            }
        }
        if !insn.op.ends_block() && i + 1 < insns.len() {
            join(&mut states[i + 1], &st);
        }
    }
    out
}

/// One instruction's own cost (weight and counts); `len`: what its region
/// operand may be at most, where known.
fn own(insn: &Insn, w: &Weights, sizes: &Sizes, len: Option<u64>) -> WorstCase {
    let mut c = WorstCase::default();
    let class = insn.op.class();
    c.insns[class_index(class)] = 1;
    c.weight = w.class[class_index(class)];
    if class == Class::Region {
        let mem = match insn.operands {
            Operands::Mem(m) | Operands::MemPair(m, _) => m,
            _ => Mem::Packet,
        };
        let bytes = match mem {
            Mem::Packet => sizes.packet,
            Mem::Info => sizes.info,
            Mem::Data => sizes.data,
        };
        let bytes = len.map_or(bytes, |l| l.min(bytes));
        c.region_bytes = bytes;
        c.weight += w.region_byte * bytes as f64;
    }
    if insn.op == Opcode::CoproInvoke {
        c.copro_ops = 1;
        c.weight += w.copro_op;
    }
    c
}

/// The costliest run of a verified handler under `w` (see the module docs):
/// `budget` is the budget it runs under, `sizes` what region instructions
/// may cover.
pub fn worst_case(seg: &SegmentInfo, budget: u64, w: &Weights, sizes: &Sizes) -> WorstCase {
    let insns = &seg.insns;
    let n = insns.len();
    let reachable = |i: usize| seg.depth.get(i).is_some_and(Option::is_some);
    let loops = insns.iter().enumerate().any(|(i, insn)| reachable(i) && insn.targets().iter().any(|&t| t <= i64::from(insn.offset)));
    if loops {
        // Every reachable instruction as costly as the costliest, n × (B + 1) times.
        let mut worst = WorstCase::default();
        for (i, insn) in insns.iter().enumerate().filter(|&(i, _)| reachable(i)) {
            let c = own(insn, w, sizes, None);
            if c.weight > worst.weight || i == 0 {
                worst = c;
            }
        }
        let times = (n as u64).saturating_mul(budget.saturating_add(1));
        let mut bound = WorstCase { loops: true, weight: worst.weight * times as f64, ..WorstCase::default() };
        for (a, b) in bound.insns.iter_mut().zip(&worst.insns) {
            *a = b.saturating_mul(times);
        }
        bound.region_bytes = worst.region_bytes.saturating_mul(times);
        bound.copro_ops = worst.copro_ops.saturating_mul(times);
        return bound;
    }
    // Forward edges only: the costliest path from each instruction, last first.
    let lengths = region_lengths(seg, sizes);
    let mut from: Vec<WorstCase> = vec![WorstCase::default(); n];
    for i in (0..n).rev() {
        if !reachable(i) {
            continue;
        }
        let insn = &insns[i];
        let mut next: Vec<usize> = insn.targets().iter().filter_map(|&t| u32::try_from(t).ok().and_then(|t| seg.index_of(t))).collect();
        if !insn.op.ends_block() && i + 1 < n {
            next.push(i + 1);
        }
        let mut c = own(insn, w, sizes, lengths[i]);
        if let Some(best) = next.iter().map(|&j| &from[j]).max_by(|a, b| a.weight.total_cmp(&b.weight)) {
            let best = best.clone();
            c.add(&best);
        }
        from[i] = c;
    }
    from.into_iter().next().unwrap_or_default()
}
