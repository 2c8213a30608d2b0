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
//! given weights. Where it has one, the budget bounds it instead: a handler
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

/// One instruction's own cost (weight and counts).
fn own(insn: &Insn, w: &Weights, sizes: &Sizes) -> WorstCase {
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
            let c = own(insn, w, sizes);
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
        let mut c = own(insn, w, sizes);
        if let Some(best) = next.iter().map(|&j| &from[j]).max_by(|a, b| a.weight.total_cmp(&b.weight)) {
            let best = best.clone();
            c.add(&best);
        }
        from[i] = c;
    }
    from.into_iter().next().unwrap_or_default()
}
