//! NetIL-level analysis behind the JIT's domain optimisations: what
//! Cranelift cannot know because it does not know NetIL's machine model.
//!
//! One forward abstract interpretation of a verified segment (to a fixpoint
//! over its basic blocks) gives every stack slot and local an abstract value:
//!
//! - a **range** `[lo, hi]` of the 32-bit value;
//! - a **symbolic form** `base + off`, exact (computed without wrapping
//!   around 2^32), where the base is zero (a constant), `pktlen`, the result
//!   of one instruction (`Def`), or a join of several (`Phi`). Header-offset
//!   arithmetic such as `14 + 4 * (pkt[14] & 0x0f)` stays in this form
//!   (`Def(shl) + 14`, range `[14, 74]`);
//! - for `cmp.*` results, the comparison, so that a later `jz`/`jnz` refines
//!   its edges like a `jcmp`.
//!
//! and every program point a set of **packet-length facts** `base + end <=
//! pktlen` (mathematically, not modulo 2^32). Facts come from packet accesses
//! that passed their bounds check (an access of `w` bytes at `base + off`
//! proves `base + off + w <= pktlen`) and from comparisons with `pktlen` on
//! the edge where they hold (`pktlen; push 34; jcmp.lt reject` proves `34 <=
//! pktlen` on the fall-through edge). They meet at joins by keeping, per
//! base, the weaker (smaller) end.
//!
//! What the translator does with the result ([`SegmentFacts`]):
//!
//! - **bounds-check merging**: a packet access whose range is covered by a
//!   fact needs no check. One explicit or implicit length check covers every
//!   access it dominates at constant offsets below its end, and every access
//!   at `t + k` below `t + end` for the same offset computation `t`;
//!   accesses to info and data memory need none when their whole offset
//!   range fits a memory size known at compile time;
//! - **offset folding** (the NetVM paper's reassociation, Fig. 5, and its
//!   x86 `lea`, Fig. 7): an access at `Def(b) + k` is emitted as
//!   `base + zext(value of b) + k` in 64 bits, which is only correct because
//!   the analysis proved that the 32-bit addition does not wrap; Cranelift
//!   then folds `k` into the addressing mode;
//! - **info memory reads** of the segment ([`SegmentFacts::info_reads`]), for
//!   dead-store elimination across a linked application;
//! - **packet bytes proved at each output port** ([`SegmentFacts::exit_len`]):
//!   a linked application starts the analysis of each NetPE with the
//!   weakest of what the ports feeding it proved ([`KnownSizes::packet`]),
//!   so a chain checks a header once (a router's `verify` stage), not in
//!   every stage.
//!
//! Everything here is conservative: an unknown value has the full range and
//! no identity, and a segment too large to analyse cheaply (see
//! [`MAX_BLOCKS`], [`MAX_SLOTS`]) gets no facts at all, which only costs
//! speed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

use netil::{Cond, Insn, Mem, Opcode, Operands};
use netvm_verify::SegmentInfo;

/// Segments with more basic blocks than this are not analysed.
pub const MAX_BLOCKS: usize = 4096;
/// Segments whose `.maxstacksize + .locals` exceeds this are not analysed.
pub const MAX_SLOTS: usize = 512;
/// At most this many packet-length facts are kept at a program point.
const MAX_FACTS: usize = 16;
/// After this many changes of a block's entry state, changing ranges widen to the full range.
const WIDEN_AFTER: u32 = 4;

/// Memory sizes the analysis may rely on: `Some(len)` when the memory has
/// exactly this length whenever the code runs (linked applications), `None`
/// when it is only known at run time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KnownSizes {
    /// Info memory as this NetPE sees it.
    pub info: Option<u64>,
    /// Data memory.
    pub data: Option<u64>,
    /// Bytes of packet every packet the code sees has (a linked NetPE
    /// downstream of checks: [`SegmentFacts::exit_len`] of the ports that
    /// feed it); 0 when nothing is known.
    pub packet: u64,
}

/// An offset rewritten as the value of instruction `base` plus `off`, without wrap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fold {
    /// Index of the instruction whose result is the base.
    pub base: u32,
    /// Constant added to it (the sum stays within `0..2^32`).
    pub off: i64,
}

/// Byte ranges of info memory that a segment may read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InfoReads {
    /// Reads at offsets the analysis could not pin down (or coprocessor
    /// operations, which see all of info memory): every byte may be read.
    pub all: bool,
    /// Otherwise: the half-open ranges `[start, end)` read.
    pub ranges: Vec<(u64, u64)>,
}

impl InfoReads {
    /// True if any byte of `[start, end)` may be read.
    pub fn overlaps(&self, start: u64, end: u64) -> bool {
        self.all || self.ranges.iter().any(|&(s, e)| s < end && start < e)
    }

    /// Adds the reads of `other`.
    pub fn extend(&mut self, other: &InfoReads) {
        self.all |= other.all;
        self.ranges.extend_from_slice(&other.ranges);
    }

    fn add(&mut self, start: u64, end: u64) {
        self.ranges.push((start, end));
    }
}

/// The analysis' result for one segment, indexed by instruction.
#[derive(Clone, Debug, Default)]
pub struct SegmentFacts {
    /// The memory access at this instruction is proved in bounds: no check.
    pub unchecked: Vec<bool>,
    /// The offset of the memory access at this instruction, folded.
    pub fold: Vec<Option<Fold>>,
    /// The result of this instruction is the base of some [`Fold`]: the
    /// translator keeps its value.
    pub fold_base: Vec<bool>,
    /// The info store at this instruction has a constant offset and lies
    /// inside the known info memory: its range `[start, end)` (for
    /// dead-store elimination).
    pub info_store: Vec<Option<(u64, u64)>>,
    /// Info memory the segment may read.
    pub info_reads: InfoReads,
    /// False if the segment was too large to analyse (nothing proved).
    pub analysed: bool,
    /// Per output port, the bytes of packet proved present whenever the
    /// segment leaves through it (`u64::MAX`: it never does); empty when
    /// nothing is proved ([`SegmentFacts::exit_len`]).
    pub exit_lens: Vec<u64>,
}

impl SegmentFacts {
    /// Facts that prove nothing (every check kept, no fold).
    pub fn none(n: usize) -> SegmentFacts {
        SegmentFacts {
            unchecked: vec![false; n],
            fold: vec![None; n],
            fold_base: vec![false; n],
            info_store: vec![None; n],
            info_reads: InfoReads { all: true, ranges: Vec::new() },
            analysed: false,
            exit_lens: Vec::new(),
        }
    }

    /// The bytes of packet proved present whenever the segment leaves
    /// through output port `p` (`u64::MAX`: it never does). A packet's
    /// length does not change in a data path (no instruction resizes it,
    /// coprocessors read it only, a fan-out's copies have its length), so
    /// this holds at the NetPEs the port feeds.
    pub fn exit_len(&self, p: usize) -> u64 {
        self.exit_lens.get(p).copied().unwrap_or(0)
    }

    /// Number of memory accesses proved in bounds.
    pub fn unchecked_count(&self) -> usize {
        self.unchecked.iter().filter(|u| **u).count()
    }
}

/// What a value is known to be relative to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Base {
    /// Zero: the value is the constant `off`.
    Zero,
    /// The packet's captured length.
    Len,
    /// The result of the instruction with this index (its latest execution).
    Def(u32),
    /// The join of different values at the block starting at this
    /// instruction, in stack slot (or `MAX_SLOTS + local`) `.1`.
    Phi(u32, u32),
    /// Nothing: the value has only a range.
    Unknown,
}

impl Base {
    /// Whether facts and folds may name this base.
    fn has_identity(self) -> bool {
        matches!(self, Base::Zero | Base::Def(_) | Base::Phi(..))
    }
}

/// The condition of an unsigned comparison, or equality (signed ones give
/// `None`: the ranges below are unsigned).
fn unsigned_cond(op: Opcode) -> Option<Cond> {
    op.condition().filter(|c| !c.is_signed())
}

/// A comparison `a rel b`, remembered by the value `cmp.*` pushes.
#[derive(Clone, Debug, PartialEq)]
struct Cmp {
    rel: Cond,
    a: AVal,
    b: AVal,
}

/// An abstract 32-bit value: `base + off` exactly (no wrap), within `[lo, hi]`.
#[derive(Clone, Debug, PartialEq)]
struct AVal {
    base: Base,
    off: i64,
    lo: u32,
    hi: u32,
    cmp: Option<Rc<Cmp>>,
}

impl AVal {
    fn konst(v: u32) -> AVal {
        AVal { base: Base::Zero, off: i64::from(v), lo: v, hi: v, cmp: None }
    }

    fn range(base: Base, lo: u32, hi: u32) -> AVal {
        AVal { base, off: 0, lo, hi, cmp: None }
    }

    fn def(i: usize, lo: u32, hi: u32) -> AVal {
        AVal::range(Base::Def(i as u32), lo, hi)
    }

    fn full(i: usize) -> AVal {
        AVal::def(i, 0, u32::MAX)
    }

    fn as_const(&self) -> Option<u32> {
        (self.base == Base::Zero).then_some(self.off as u32)
    }

    /// `self + k` (mod 2^32).
    fn add_const(&self, k: u32, i: usize) -> AVal {
        if let Some(c) = self.as_const() {
            return AVal::konst(c.wrapping_add(k));
        }
        match self.hi.checked_add(k) {
            Some(hi) if self.base != Base::Unknown => {
                AVal { base: self.base, off: self.off + i64::from(k), lo: self.lo + k, hi, cmp: None }
            }
            Some(hi) => AVal::def(i, self.lo + k, hi),
            None => AVal::full(i),
        }
    }

    /// `self - k` (mod 2^32).
    fn sub_const(&self, k: u32, i: usize) -> AVal {
        if let Some(c) = self.as_const() {
            return AVal::konst(c.wrapping_sub(k));
        }
        if self.lo >= k {
            if self.base != Base::Unknown {
                return AVal { base: self.base, off: self.off - i64::from(k), lo: self.lo - k, hi: self.hi - k, cmp: None };
            }
            return AVal::def(i, self.lo - k, self.hi - k);
        }
        AVal::full(i)
    }

    /// The same value and identity with a narrower range (never empty).
    fn narrowed(&self, lo: u32, hi: u32) -> AVal {
        let (lo, hi) = (lo.max(self.lo), hi.min(self.hi));
        if lo > hi {
            // Contradictory: the edge is infeasible. Keep the old range.
            return self.clone();
        }
        if self.base == Base::Zero {
            return self.clone();
        }
        AVal { lo, hi, ..self.clone() }
    }

    /// Whether two values are the same value (same identity), not just equal ranges.
    fn same(&self, other: &AVal) -> bool {
        self.base.has_identity() && self.base == other.base && self.off == other.off
    }
}

/// Abstract state at a program point.
#[derive(Clone, Debug, PartialEq)]
struct State {
    stack: Vec<AVal>,
    locals: Vec<Option<AVal>>,
    /// `base + end <= pktlen`, per base.
    facts: BTreeMap<Base, i64>,
    /// Highest instruction index whose `Def` may occur in this state (kills
    /// below it are needed; straight-line code never needs one).
    max_def: u32,
}

impl State {
    fn pop(&mut self) -> AVal {
        self.stack.pop().expect("verified stack depth")
    }

    fn top(&self, n: usize) -> &AVal {
        &self.stack[self.stack.len() - 1 - n]
    }

    fn learn(&mut self, base: Base, end: i64) {
        if !base.has_identity() || base == Base::Len {
            return;
        }
        let e = self.facts.entry(base).or_insert(end);
        *e = (*e).max(end);
        if self.facts.len() > MAX_FACTS {
            // Forget the fact about the oldest definition (any choice is sound).
            let k = *self.facts.keys().find(|k| **k != Base::Zero).expect("more than one fact");
            self.facts.remove(&k);
        }
    }

    fn proves(&self, v: &AVal, width: u32) -> bool {
        v.base.has_identity() && self.facts.get(&v.base).is_some_and(|end| v.off + i64::from(width) <= *end)
    }

    /// Forgets everything about the value named `base` (its instruction runs again).
    fn kill(&mut self, base: Base) {
        if matches!(base, Base::Def(i) if i > self.max_def) {
            return;
        }
        self.facts.remove(&base);
        let forget = |v: &mut AVal| {
            if v.base == base || v.cmp.as_ref().is_some_and(|c| c.a.base == base || c.b.base == base) {
                *v = AVal::range(Base::Unknown, v.lo, v.hi);
            }
        };
        self.stack.iter_mut().for_each(forget);
        self.locals.iter_mut().flatten().for_each(forget);
    }

    /// Replaces every copy of the value `v` by its narrowed form.
    fn narrow(&mut self, v: &AVal, lo: u32, hi: u32) {
        if !v.base.has_identity() || v.base == Base::Zero {
            return;
        }
        let apply = |x: &mut AVal| {
            if x.same(v) {
                *x = x.narrowed(lo, hi);
            }
        };
        self.stack.iter_mut().for_each(apply);
        self.locals.iter_mut().flatten().for_each(apply);
    }

    /// Refines the state for an edge on which `a rel b` holds.
    fn assume(&mut self, rel: Cond, a: &AVal, b: &AVal) {
        // Packet-length facts: `x <= pktlen` or `x < pktlen`.
        let is_len = |v: &AVal| v.base == Base::Len && v.off == 0;
        let (x, rel_x_len) = if is_len(b) && !is_len(a) {
            (a, rel)
        } else if is_len(a) && !is_len(b) {
            (b, rel.swap())
        } else {
            (a, Cond::Ne)
        };
        match rel_x_len {
            Cond::Le | Cond::Eq => self.learn(x.base, x.off),
            Cond::Lt => self.learn(x.base, x.off + 1),
            _ => {}
        }
        // Ranges: compare with a constant.
        let (v, rel_v_k, k) = match (a.as_const(), b.as_const()) {
            (None, Some(k)) => (a, rel, k),
            (Some(k), None) => (b, rel.swap(), k),
            _ => return,
        };
        let (lo, hi) = match rel_v_k {
            Cond::Eq => (k, k),
            Cond::Lt if k > 0 => (0, k - 1),
            Cond::Le => (0, k),
            Cond::Gt if k < u32::MAX => (k + 1, u32::MAX),
            Cond::Ge => (k, u32::MAX),
            _ => return,
        };
        self.narrow(v, lo, hi);
    }
}

fn merge_val(a: &AVal, b: &AVal, phi: Base) -> AVal {
    if a == b {
        return a.clone();
    }
    let (lo, hi) = (a.lo.min(b.lo), a.hi.max(b.hi));
    if a.base == b.base && a.off == b.off && a.base != Base::Zero {
        let cmp = if a.cmp == b.cmp { a.cmp.clone() } else { None };
        return AVal { base: a.base, off: a.off, lo, hi, cmp };
    }
    AVal::range(phi, lo, hi)
}

/// Merges `incoming` into `into` at the block starting at `block`; returns whether `into` changed.
fn merge(into: &mut State, incoming: &State, block: u32, widen: bool) -> bool {
    let before = into.clone();
    for (k, (a, b)) in into.stack.iter_mut().zip(&incoming.stack).enumerate() {
        let m = merge_val(a, b, Base::Phi(block, k as u32));
        *a = widen_val(a, m, widen);
    }
    for (k, (a, b)) in into.locals.iter_mut().zip(&incoming.locals).enumerate() {
        *a = match (a.take(), b) {
            (Some(x), Some(y)) => {
                let m = merge_val(&x, y, Base::Phi(block, (MAX_SLOTS + k) as u32));
                Some(widen_val(&x, m, widen))
            }
            _ => None,
        };
    }
    into.facts = into.facts.iter().filter_map(|(k, e)| incoming.facts.get(k).map(|f| (*k, (*e).min(*f)))).collect();
    into.max_def = into.max_def.max(incoming.max_def);
    *into != before
}

/// After [`WIDEN_AFTER`] changes, a range that still changes becomes the
/// full range, so that loops reach a fixpoint quickly. Identity and offset
/// are kept: `base + off` stays exact whatever range is claimed for it.
/// (`merge_val` never yields a changing constant: differing constants
/// become a Phi.)
fn widen_val(old: &AVal, new: AVal, widen: bool) -> AVal {
    if widen && (new.lo != old.lo || new.hi != old.hi) {
        AVal { lo: 0, hi: u32::MAX, ..new }
    } else {
        new
    }
}

/// Upper bound of the smallest all-ones mask covering `v`.
fn ones_above(v: u32) -> u32 {
    if v == 0 {
        0
    } else {
        u32::MAX >> v.leading_zeros()
    }
}

/// The basic blocks of a segment: leaders, and for each block its last instruction.
struct Blocks {
    /// Block start → (block index); blocks in increasing start order.
    starts: Vec<usize>,
    index: BTreeMap<usize, usize>,
}

impl Blocks {
    fn new(seg: &SegmentInfo) -> Blocks {
        let mut leaders = BTreeSet::from([0usize]);
        for (i, insn) in seg.insns.iter().enumerate() {
            if !seg.is_reachable(i) {
                continue;
            }
            for t in insn.targets() {
                leaders.insert(target(seg, t));
            }
            if insn.op.is_jump() || insn.op.ends_block() {
                leaders.insert(i + 1);
            }
        }
        let starts: Vec<usize> = leaders.into_iter().filter(|s| *s < seg.insns.len()).collect();
        let index = starts.iter().enumerate().map(|(k, s)| (*s, k)).collect();
        Blocks { starts, index }
    }

    fn end(&self, k: usize, n: usize) -> usize {
        self.starts.get(k + 1).copied().unwrap_or(n)
    }
}

fn target(seg: &SegmentInfo, t: i64) -> usize {
    seg.index_of[&u32::try_from(t).expect("verified target")]
}

/// Analyses a verified segment. `module` gives the declared sizes.
pub fn analyse(seg: &SegmentInfo, module: &netil::Module, sizes: KnownSizes) -> SegmentFacts {
    let n = seg.insns.len();
    if usize::from(module.max_stack) + usize::from(module.locals) > MAX_SLOTS {
        return SegmentFacts::none(n);
    }
    let blocks = Blocks::new(seg);
    if blocks.starts.len() > MAX_BLOCKS {
        return SegmentFacts::none(n);
    }
    let mut a = Analysis { seg, sizes, facts: SegmentFacts::none(n) };
    a.facts.info_reads = InfoReads::default();
    a.facts.analysed = true;
    a.facts.exit_lens = vec![u64::MAX; usize::from(module.out_ports)];

    let nb = blocks.starts.len();
    let mut entry: Vec<Option<State>> = vec![None; nb];
    let mut changes = vec![0u32; nb];
    let initial = State {
        stack: match seg.kind {
            netil::SegmentKind::Push => vec![AVal::range(Base::Unknown, 0, 0xffff)],
            netil::SegmentKind::Init => Vec::new(),
        },
        locals: vec![None; usize::from(module.locals)],
        // What the packets that reach the code are known to hold.
        facts: if sizes.packet > 0 {
            BTreeMap::from([(Base::Zero, i64::try_from(sizes.packet).unwrap_or(i64::MAX))])
        } else {
            BTreeMap::new()
        },
        max_def: 0,
    };
    entry[0] = Some(initial);
    let mut work: VecDeque<usize> = VecDeque::from([0]);
    let mut queued = vec![false; nb];
    queued[0] = true;
    while let Some(k) = work.pop_front() {
        queued[k] = false;
        let Some(mut st) = entry[k].clone() else { continue };
        let start = blocks.starts[k];
        enter_block(&mut st, start);
        let end = blocks.end(k, n);
        let mut edges = Vec::new();
        a.run_block(&mut st, start, end, false, &mut edges);
        for (to, out) in edges {
            let Some(&tk) = blocks.index.get(&to) else { continue };
            let changed = match &mut entry[tk] {
                slot @ None => {
                    *slot = Some(out);
                    true
                }
                Some(cur) => {
                    changes[tk] += 1;
                    merge(cur, &out, to as u32, changes[tk] > WIDEN_AFTER)
                }
            };
            if changed && !queued[tk] {
                queued[tk] = true;
                work.push_back(tk);
            }
        }
    }
    // Final pass: annotations from the fixpoint states.
    for (k, state) in entry.iter().enumerate().take(nb) {
        let Some(mut st) = state.clone() else { continue };
        let (start, end) = (blocks.starts[k], blocks.end(k, n));
        enter_block(&mut st, start);
        let mut edges = Vec::new();
        a.run_block(&mut st, start, end, true, &mut edges);
    }
    a.facts
}

/// Normalizes the entry state of the block starting at `start`. `merge`
/// names the value it creates for slot `k` `Phi(start, k)`, so at entry a
/// `Phi(start, j)` in a slot other than `j` is a copy made during an earlier
/// execution of the block: a different value now. Such copies lose their
/// identity, and comparisons remembered from an earlier execution that name
/// this block's Phis are forgotten. (Facts about this block's Phis cannot
/// survive: the first entry state has none, and merging intersects.)
fn enter_block(st: &mut State, start: usize) {
    let stale = |b: Base, slot: usize| matches!(b, Base::Phi(s, j) if s as usize == start && j as usize != slot);
    let this = |b: Base| matches!(b, Base::Phi(s, _) if s as usize == start);
    let fix = |v: &mut AVal, slot: usize| {
        if stale(v.base, slot) {
            *v = AVal::range(Base::Unknown, v.lo, v.hi);
        }
        if v.cmp.as_ref().is_some_and(|c| this(c.a.base) || this(c.b.base)) {
            v.cmp = None;
        }
    };
    for (k, v) in st.stack.iter_mut().enumerate() {
        fix(v, k);
    }
    for (l, v) in st.locals.iter_mut().enumerate() {
        if let Some(v) = v {
            fix(v, MAX_SLOTS + l);
        }
    }
}

struct Analysis<'a> {
    seg: &'a SegmentInfo,
    sizes: KnownSizes,
    facts: SegmentFacts,
}

impl Analysis<'_> {
    /// Interprets instructions `start..end` of one block on `st`, pushing
    /// the successor states to `edges`. With `annotate`, records the results.
    fn run_block(&mut self, st: &mut State, start: usize, end: usize, annotate: bool, edges: &mut Vec<(usize, State)>) {
        for i in start..end {
            let insn = &self.seg.insns[i];
            if self.seg.depth[i].is_none() {
                return;
            }
            let op = insn.op;
            if op.is_jump() || op == Opcode::Switch {
                self.branch(st, i, insn, edges);
                return;
            }
            if op.is_terminator() {
                if annotate {
                    self.exit(st, insn);
                }
                return;
            }
            self.step(st, i, insn, annotate);
        }
        // Falls into the next block.
        if end < self.seg.insns.len() {
            edges.push((end, st.clone()));
        }
    }

    /// A `ret` or `ret.pop` in state `st`: the packet bytes proved present
    /// there bound what its ports' exits prove (`SegmentFacts::exit_lens`).
    fn exit(&mut self, st: &State, insn: &Insn) {
        let len = st.facts.get(&Base::Zero).map_or(0, |e| u64::try_from(*e).unwrap_or(0));
        let lens = &mut self.facts.exit_lens;
        match (&insn.operands, insn.op) {
            (Operands::Port(p), Opcode::Ret) => {
                if let Some(x) = lens.get_mut(usize::from(*p)) {
                    *x = (*x).min(len);
                }
            }
            (_, Opcode::RetPop) => lens.iter_mut().for_each(|x| *x = (*x).min(len)),
            _ => {}
        }
    }

    fn branch(&mut self, st: &mut State, i: usize, insn: &Insn, edges: &mut Vec<(usize, State)>) {
        let op = insn.op;
        match &insn.operands {
            Operands::Switch(s) => {
                st.pop();
                let mut targets: Vec<usize> = s.cases.iter().map(|c| target(self.seg, c.1)).collect();
                targets.push(target(self.seg, s.default));
                targets.sort_unstable();
                targets.dedup();
                for t in targets {
                    edges.push((t, st.clone()));
                }
            }
            Operands::Target(t) => {
                let to = target(self.seg, *t);
                if op == Opcode::Jump {
                    edges.push((to, st.clone()));
                    return;
                }
                // The relation that holds on the taken edge.
                let rel: Option<(Cond, AVal, AVal)> = if op == Opcode::Jz || op == Opcode::Jnz {
                    let v = st.pop();
                    let zero = AVal::konst(0);
                    let taken_rel = if op == Opcode::Jz { Cond::Eq } else { Cond::Ne };
                    match &v.cmp {
                        Some(c) => {
                            let r = if op == Opcode::Jnz { c.rel } else { c.rel.negate() };
                            let mut taken = st.clone();
                            taken.assume(r, &c.a, &c.b);
                            taken.assume(taken_rel, &v, &zero);
                            let mut fall = st.clone();
                            fall.assume(r.negate(), &c.a, &c.b);
                            fall.assume(taken_rel.negate(), &v, &zero);
                            edges.push((to, taken));
                            edges.push((i + 1, fall));
                            return;
                        }
                        None => Some((taken_rel, v, zero)),
                    }
                } else {
                    let b = st.pop();
                    let a = st.pop();
                    unsigned_cond(op).map(|r| (r, a, b))
                };
                let mut taken = st.clone();
                let mut fall = st.clone();
                if let Some((r, a, b)) = rel {
                    taken.assume(r, &a, &b);
                    fall.assume(r.negate(), &a, &b);
                }
                edges.push((to, taken));
                edges.push((i + 1, fall));
            }
            _ => unreachable!("branch without targets"),
        }
    }

    /// A memory access at offset `o`, `w` bytes: whether it needs its check,
    /// and the facts it establishes when it passes.
    fn access(&mut self, st: &mut State, i: usize, m: Mem, o: &AVal, w: u32, annotate: bool) {
        let proved = match m {
            Mem::Packet => st.proves(o, w),
            Mem::Info => self.sizes.info.is_some_and(|len| u64::from(o.hi) + u64::from(w) <= len),
            Mem::Data => self.sizes.data.is_some_and(|len| u64::from(o.hi) + u64::from(w) <= len),
        };
        if annotate {
            self.facts.unchecked[i] = proved;
            if let Base::Def(b) = o.base {
                if o.off != 0 {
                    self.facts.fold[i] = Some(Fold { base: b, off: o.off });
                    self.facts.fold_base[b as usize] = true;
                }
            }
        }
        if m == Mem::Packet {
            st.learn(o.base, o.off + i64::from(w));
        }
    }

    fn info_read(&mut self, o: &AVal, w: u64, annotate: bool) {
        if !annotate {
            return;
        }
        match o.as_const() {
            Some(c) => self.facts.info_reads.add(u64::from(c), u64::from(c) + w),
            None => self.facts.info_reads.all = true,
        }
    }

    /// One non-branching instruction.
    fn step(&mut self, st: &mut State, i: usize, insn: &Insn, annotate: bool) {
        use Opcode::*;
        let op = insn.op;
        st.kill(Base::Def(i as u32));
        let push = |st: &mut State, v: AVal| st.stack.push(v);
        match (&insn.operands, op) {
            (_, Nop) => {}
            (Operands::Imm(v), Push) => push(st, AVal::konst(*v)),
            (_, Pop) => {
                st.pop();
            }
            (_, Dup) => {
                let v = st.top(0).clone();
                push(st, v);
            }
            (_, Swap) => {
                let n = st.stack.len();
                st.stack.swap(n - 1, n - 2);
            }
            (_, Over) => {
                let v = st.top(1).clone();
                push(st, v);
            }
            (Operands::Depth(k), Pick) => {
                let v = st.top(*k as usize).clone();
                push(st, v);
            }
            (_, Add | Sub | Mul | Div | Mod | Sdiv | Smod | And | Or | Xor | Shl | Shr | Sar | Rotl | Rotr | Btest | Bset | Bclr) => {
                let b = st.pop();
                let a = st.pop();
                push(st, binary(op, &a, &b, i));
            }
            (_, Not | Neg | Bswap | Bswap16 | Popcnt | Clz | Ctz | Hash32) => {
                let a = st.pop();
                let r = match (op, a.as_const()) {
                    (Not, Some(c)) => AVal::konst(!c),
                    (Neg, Some(c)) => AVal::konst(c.wrapping_neg()),
                    (Bswap, Some(c)) => AVal::konst(c.swap_bytes()),
                    (Bswap16, Some(c)) => AVal::konst(u32::from((c as u16).swap_bytes())),
                    (Bswap16, None) => AVal::def(i, 0, 0xffff),
                    (Popcnt | Clz | Ctz, _) => AVal::def(i, 0, 32),
                    _ => AVal::full(i),
                };
                push(st, r);
            }
            (_, CsumUpd) => {
                st.pop();
                st.pop();
                st.pop();
                push(st, AVal::def(i, 0, 0xffff));
            }
            (Operands::None, _) if op.condition().is_some() => {
                let b = st.pop();
                let a = st.pop();
                let mut r = AVal::def(i, 0, 1);
                if let Some(rel) = unsigned_cond(op) {
                    r.cmp = Some(Rc::new(Cmp { rel, a: AVal { cmp: None, ..a }, b: AVal { cmp: None, ..b } }));
                }
                push(st, r);
            }
            (_, Pktlen) => push(st, AVal::range(Base::Len, 0, u32::MAX)),
            (_, Wirelen | TstampS) => push(st, AVal::full(i)),
            (_, Inport) => push(st, AVal::def(i, 0, 0xffff)),
            (_, TstampNs) => push(st, AVal::def(i, 0, 999_999_999)),
            (Operands::Local(l), Locload) => {
                let v = st.locals[*l as usize].clone().unwrap_or_else(|| AVal::full(i));
                push(st, v);
            }
            (Operands::Local(l), Locstore) => {
                let v = st.pop();
                st.locals[*l as usize] = Some(v);
            }
            (Operands::MemPair(src, _), Mcopy) => {
                let len = st.pop();
                let s = st.pop();
                st.pop();
                if *src == Mem::Info && annotate {
                    match (s.as_const(), len.as_const()) {
                        (Some(s), Some(l)) => self.facts.info_reads.add(u64::from(s), u64::from(s) + u64::from(l)),
                        _ => self.facts.info_reads.all = true,
                    }
                }
            }
            (Operands::Mem(m), Crc32 | Hash | Csum) => {
                let len = st.pop();
                let o = st.pop();
                if *m == Mem::Info && annotate {
                    match (o.as_const(), len.as_const()) {
                        (Some(s), Some(l)) => self.facts.info_reads.add(u64::from(s), u64::from(s) + u64::from(l)),
                        _ => self.facts.info_reads.all = true,
                    }
                }
                push(st, if op == Csum { AVal::def(i, 0, 0xffff) } else { AVal::full(i) });
            }
            (_, CoproIn) => {
                st.pop();
            }
            (_, CoproOut) => push(st, AVal::full(i)),
            (_, CoproInvoke) => {
                // An operation sees the packet and all of info memory.
                self.facts.info_reads.all |= annotate;
            }
            (_, _) if op.access_width().is_some() => {
                let m = op.access_memory().expect("memory access");
                let w = op.access_width().expect("width");
                if op.is_store() {
                    st.pop();
                    let o = st.pop();
                    if m == Mem::Info && annotate {
                        // Only a store known to be in bounds may be left out:
                        // one past the end faults (a constant the analysis
                        // folded, not one the verifier saw and rejected).
                        let end = o.as_const().map(|c| (u64::from(c), u64::from(c) + u64::from(w)));
                        if let Some((start, end)) = end.filter(|&(_, end)| self.sizes.info.is_some_and(|len| end <= len)) {
                            self.facts.info_store[i] = Some((start, end));
                        }
                    }
                    self.access(st, i, m, &o, w, annotate);
                } else {
                    let o = st.pop();
                    if m == Mem::Info {
                        self.info_read(&o, u64::from(w), annotate);
                    }
                    self.access(st, i, m, &o, w, annotate);
                    let r = match w {
                        1 => AVal::def(i, 0, 0xff),
                        2 => AVal::def(i, 0, 0xffff),
                        _ => AVal::full(i),
                    };
                    push(st, r);
                }
            }
            (ops, _) => unreachable!("verified instruction {op:?} with operands {ops:?}"),
        }
        if let Some(v) = st.stack.last() {
            if v.base == Base::Def(i as u32) {
                st.max_def = st.max_def.max(i as u32);
            }
        }
    }
}

/// The abstract result of a binary ALU instruction at index `i`.
fn binary(op: Opcode, a: &AVal, b: &AVal, i: usize) -> AVal {
    use Opcode::*;
    if let (Some(x), Some(y)) = (a.as_const(), b.as_const()) {
        let v = match op {
            Add => Some(x.wrapping_add(y)),
            Sub => Some(x.wrapping_sub(y)),
            Mul => Some(x.wrapping_mul(y)),
            And => Some(x & y),
            Or => Some(x | y),
            Xor => Some(x ^ y),
            Shl => Some(x.wrapping_shl(y)),
            Shr => Some(x.wrapping_shr(y)),
            Div if y != 0 => Some(x / y),
            Mod if y != 0 => Some(x % y),
            _ => None,
        };
        if let Some(v) = v {
            return AVal::konst(v);
        }
    }
    let full = AVal::full(i);
    match op {
        Add => match (a.as_const(), b.as_const()) {
            (_, Some(k)) => a.add_const(k, i),
            (Some(k), _) => b.add_const(k, i),
            _ => match a.hi.checked_add(b.hi) {
                Some(hi) => AVal::def(i, a.lo + b.lo, hi),
                None => full,
            },
        },
        Sub => match b.as_const() {
            Some(k) => a.sub_const(k, i),
            None if a.lo >= b.hi => AVal::def(i, a.lo - b.hi, a.hi - b.lo),
            None => full,
        },
        Mul => match a.hi.checked_mul(b.hi) {
            Some(hi) => AVal::def(i, a.lo.saturating_mul(b.lo), hi),
            None => full,
        },
        Div => AVal::def(i, 0, a.hi),
        Mod => AVal::def(i, 0, a.hi.min(b.hi.saturating_sub(1))),
        And => AVal::def(i, 0, a.hi.min(b.hi)),
        Or | Xor => AVal::def(i, 0, ones_above(a.hi.max(b.hi))),
        Shl => match b.as_const() {
            Some(k) => {
                let k = k % 32;
                if u64::from(a.hi) << k <= u64::from(u32::MAX) {
                    AVal::def(i, a.lo << k, a.hi << k)
                } else {
                    full
                }
            }
            None => full,
        },
        Shr => match b.as_const() {
            Some(k) => AVal::def(i, a.lo >> (k % 32), a.hi >> (k % 32)),
            None => AVal::def(i, 0, a.hi),
        },
        Sar if a.hi <= i32::MAX as u32 => match b.as_const() {
            Some(k) => AVal::def(i, a.lo >> (k % 32), a.hi >> (k % 32)),
            None => AVal::def(i, 0, a.hi),
        },
        Btest => AVal::def(i, 0, 1),
        _ => full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(src: &str, sizes: KnownSizes) -> (SegmentFacts, Vec<Insn>) {
        let m = netil::assemble(src).unwrap().module;
        let v = netvm_verify::verify(&m).unwrap();
        (analyse(&v.push, &v.module, sizes), v.push.insns.clone())
    }

    /// Indices of the accesses left checked.
    fn checked(src: &str) -> Vec<String> {
        let (f, insns) = facts(src, KnownSizes::default());
        insns
            .iter()
            .enumerate()
            .filter(|(i, x)| x.op.access_width().is_some() && !f.unchecked[*i])
            .map(|(i, x)| format!("{i}:{}", x.op.mnemonic()))
            .collect()
    }

    /// What each port's exits prove is the weakest fact at any of them;
    /// `ret.pop` bounds every port; a port never left says so.
    #[test]
    fn exit_lens_are_the_weakest_fact_at_each_port() {
        let src = ".ports 4\nsegment .push\n pop\n pktlen\n push 34\n jcmp.lt r\n push 30\n upload.32\n jnz a\n ret 1\n\
                   a: push 40\n upload.8\n jz b\n ret 1\nb: push 2\n ret.pop\nr: ret 0\nends";
        let (f, _) = facts(src, KnownSizes::default());
        // Port 0: the short packets; 1: at least 34 bytes (34, then 41: the
        // weaker); 2: ret.pop after the access at 40, and 3 too.
        assert_eq!(f.exit_lens, vec![0, 34, 41, 41]);
        let (f, _) = facts(".ports 3\nsegment .push\n pop\n push 20\n upload.8\n pop\n ret 1\nends", KnownSizes::default());
        assert_eq!((f.exit_len(0), f.exit_len(1), f.exit_len(2)), (u64::MAX, 21, u64::MAX));
    }

    /// A packet length known at entry (`KnownSizes::packet`) covers the
    /// accesses below it, and holds at the exits.
    #[test]
    fn known_packet_length_at_entry_covers_accesses() {
        let src = "segment .push\n pop\n push 22\n upload.16\n pop\n push 24\n upload.16\n pop\n ret 0\nends";
        let (f, insns) = facts(src, KnownSizes { packet: 34, ..KnownSizes::default() });
        assert!(insns.iter().enumerate().filter(|(_, x)| x.op.access_width().is_some()).all(|(i, _)| f.unchecked[i]));
        assert_eq!(f.exit_lens, vec![34]);
        let (f, _) = facts(src, KnownSizes { packet: 25, ..KnownSizes::default() });
        assert_eq!(f.unchecked.iter().filter(|u| **u).count(), 1, "[24, 26) is past 25 bytes");
        assert_eq!(f.exit_lens, vec![26]);
    }

    #[test]
    fn explicit_length_check_covers_constant_offsets() {
        let src = "segment .push\n pop\n pktlen\n push 34\n jcmp.lt r\n push 12\n upload.16\n pop\n push 30\n upload.32\n pop\n \
                   push 31\n upload.32\n pop\n ret 1\nr: ret 0\nends";
        // [30, 34) is covered; [31, 35) is not.
        assert_eq!(checked(src), vec!["11:upload.32"]);
    }

    #[test]
    fn implicit_check_covers_what_it_dominates_only() {
        let src = "segment .push\n pop\n push 20\n upload.32\n pop\n push 12\n upload.16\n jz a\n push 22\n upload.8\n pop\n \
                   ret 1\na: push 30\n upload.8\n pop\n ret 0\nends";
        // [20, 24) proves [12, 14) and [22, 23), not [30, 31).
        assert_eq!(checked(src), vec!["2:upload.32", "12:upload.8"]);
    }

    #[test]
    fn joins_keep_the_weaker_fact() {
        let src = "segment .push\n inport\n jz a\n push 40\n upload.8\n pop\n jump j\na: push 20\n upload.8\n pop\n\
                   j: push 15\n upload.8\n pop\n push 30\n upload.8\n pop\n ret 0\nends";
        // After the join only [0, 21) is known on both paths.
        assert_eq!(checked(src), vec!["3:upload.8", "7:upload.8", "13:upload.8"]);
    }

    #[test]
    fn variable_offset_checked_once_per_computation() {
        // t = 14 + 4 * (pkt[14] & 0x0f); check t + 4 <= pktlen; load [t, t+4) and [t+2, t+4).
        let src = ".locals 1\nsegment .push\n pop\n push 14\n upload.8\n push 15\n and\n push 2\n shl\n push 14\n add\n locstore 0\n\
                   locload 0\n push 4\n add\n pktlen\n jcmp.gt r\n locload 0\n upload.32\n pop\n locload 0\n push 2\n add\n upload.16\n pop\n\
                   locload 0\n push 4\n add\n upload.8\n pop\n ret 1\nr: ret 0\nends";
        let (f, insns) = facts(src, KnownSizes::default());
        let chk: Vec<usize> = (0..insns.len()).filter(|i| insns[*i].op.access_width().is_some() && !f.unchecked[*i]).collect();
        // Only the IHL byte (first access) and the byte at t + 4 keep their checks.
        assert_eq!(chk, vec![2, 26]);
        // The port loads fold their offset onto the shift: base = `shl` (index 6), +14 and +16.
        assert_eq!(f.fold[16], Some(Fold { base: 6, off: 14 }));
        assert_eq!(f.fold[21], Some(Fold { base: 6, off: 16 }));
        assert!(f.fold_base[6]);
    }

    #[test]
    fn wrapping_offsets_are_not_trusted() {
        // t = pkt32[0] (full range): t + 4 may wrap, so `t + 4 <= pktlen` proves nothing about [t, t+4).
        let src = ".locals 1\nsegment .push\n pop\n push 0\n upload.32\n locstore 0\n locload 0\n push 4\n add\n pktlen\n jcmp.gt r\n\
                   locload 0\n upload.32\n pop\n ret 1\nr: ret 0\nends";
        assert_eq!(checked(src), vec!["2:upload.32", "10:upload.32"]);
    }

    #[test]
    fn cmp_then_jnz_refines_like_jcmp() {
        let src = "segment .push\n pop\n pktlen\n push 60\n cmp.ge\n jnz ok\n ret 0\nok: push 56\n upload.32\n pop\n ret 1\nends";
        assert_eq!(checked(src), Vec::<String>::new());
    }

    #[test]
    fn loops_reach_a_fixpoint_and_kill_stale_facts() {
        // i counts up from 0; the load at i is checked every iteration (i grows).
        let src = ".locals 1\nsegment .push\n pop\n push 0\n locstore 0\nl: locload 0\n upload.8\n pop\n locload 0\n push 1\n add\n \
                   locstore 0\n locload 0\n push 100\n jcmp.lt l\n ret 0\nends";
        assert_eq!(checked(src), vec!["4:upload.8"]);
    }

    #[test]
    fn info_and_data_ranges_against_known_sizes() {
        let src = ".infosize 8\n.datasize 16\nsegment .push\n pop\n push 0\n upload.8\n push 7\n and\n dload.8\n pop\n \
                   push 0\n upload.8\n push 15\n and\n iload.8\n pop\n push 0\n upload.8\n push 7\n and\n iload.16\n pop\n ret 0\nends";
        let (f, insns) = facts(src, KnownSizes { info: Some(8), data: Some(16), packet: 0 });
        let unchecked: Vec<&str> = (0..insns.len())
            .filter(|i| f.unchecked[*i] && insns[*i].op.access_memory() != Some(Mem::Packet))
            .map(|i| insns[i].op.mnemonic())
            .collect();
        // dload.8 at [0, 8) of 16 bytes is in bounds; iload.8 at [0, 16) and
        // iload.16 at [0, 9) may not be, with 8 bytes of info memory.
        assert_eq!(unchecked, vec!["dload.8"]);
        assert!(f.info_reads.all);
        // Unknown sizes: every info and data access keeps its check.
        let (g, _) = facts(src, KnownSizes::default());
        assert!((0..insns.len()).all(|i| !g.unchecked[i] || insns[i].op.access_memory() == Some(Mem::Packet)));
    }

    #[test]
    fn info_reads_and_constant_stores() {
        let src = ".infosize 16\nsegment .push\n pop\n push 4\n iload.16\n pop\n push 8\n push 1\n istore.32\n ret 0\nends";
        let (f, _) = facts(src, KnownSizes { info: Some(16), ..KnownSizes::default() });
        assert_eq!(f.info_reads, InfoReads { all: false, ranges: vec![(4, 6)] });
        assert_eq!(f.info_store[6], Some((8, 12)));
        // The size unknown: the store may fault, and is kept.
        let (f, _) = facts(src, KnownSizes::default());
        assert_eq!(f.info_store[6], None);
    }

    /// A store whose offset the analysis folds to a constant (the verifier
    /// sees a computed one) past the end of info memory faults: it is not
    /// a dead store, whoever reads the bytes.
    #[test]
    fn info_stores_past_the_end_are_not_recorded() {
        for (size, want) in [(2, Some((1, 2))), (1, None), (0, None)] {
            let src = format!(
                ".infosize {size}\n.locals 1\nsegment .push\n pop\n push 1\n locstore 0\n locload 0\n push 1\n and\n push 7\n istore.8\n ret 0\nends"
            );
            let (f, _) = facts(&src, KnownSizes { info: Some(size), ..KnownSizes::default() });
            assert_eq!(f.info_store[7], want, "info size {size}");
        }
    }
}
