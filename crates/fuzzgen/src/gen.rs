//! Structured generation of verified NetIL code.
//!
//! Code is generated as nested statements (straight-line code, `if`/`else`,
//! `switch`, counted and unbounded loops with `break`/`continue`, early exits)
//! over expressions that each push exactly one value. The builder
//! (`SegBuilder`, in the private `emit` module) tracks the operand-stack depth, so:
//!
//! - an instruction is only emitted when the stack holds what it needs, and
//!   the declared `.maxstacksize` is the largest depth reached;
//! - every join (the end of an `if`, `switch` or loop, a `break` target)
//!   is reached with one agreed depth: each arm ends with `Gen::adjust`,
//!   which pops or pushes values until the join depth is reached;
//! - every local is stored at the entry of each handler, before any read;
//! - info and data accesses use either a constant offset inside the declared
//!   size (the verifier rejects constant out-of-bounds offsets) or an offset
//!   computed from a value the verifier cannot know (a packet byte, `pktlen`,
//!   a local, `hash32` of something, ...), masked and offset so that it is
//!   usually, but not always, in bounds: run-time `bounds` faults happen;
//! - `.init` uses no instruction that needs an exchange buffer and ends in
//!   `exit`; `.push` paths end in `ret N` (N < `.ports`), `ret.pop` or `drop`.
//!
//! Choices are drawn from an [`arbitrary::Unstructured`]; when its bytes run
//! out every choice takes its first, cheapest option, so generation always
//! finishes quickly with a small, valid program.

use arbitrary::{Result, Unstructured};
use netil::{Mem, Opcode, SegmentKind};

use crate::emit::{Arg, Label, SegBuilder, Target};
use crate::GenConfig;

/// Module-level facts fixed before code is generated.
#[derive(Clone, Debug)]
pub(crate) struct Env {
    pub info_size: u32,
    pub data_size: u32,
    pub ports: u16,
    pub ncopros: u8,
    /// Per declared instance, its index in [`crate::COPRO_TEMPLATES`].
    pub copros: Vec<usize>,
    /// General-purpose locals are slots `0..general`.
    pub general: u16,
    /// Loop counters are slots `general..general + counters`, one per nesting level.
    pub counters: u16,
    /// Declared `.locals` (may exceed `general + counters`: unused slots).
    pub locals: u16,
    /// The stack depth generation stays under.
    pub cap: u32,
    /// Percent chance that a choice point takes its fault-prone variant
    /// (an offset out of range, a zero divisor, a register that does not exist).
    pub risk: u8,
}

/// Restrictions for special-purpose programs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Mode {
    /// Never emit an instruction that can fault (except by exhausting the budget).
    pub no_faults: bool,
    /// Never end the handler (no `ret`, `ret.pop`, `drop`, no escaping the outermost loop).
    pub no_exits: bool,
}

/// What is known about a pushed memory offset.
#[derive(Clone, Copy, Debug)]
struct Off {
    /// The offset, when the verifier sees a constant.
    konst: Option<u32>,
    /// The largest value it can take, when the generator bounded it.
    bound: Option<u32>,
}

impl Off {
    fn konst(o: u32) -> Off {
        Off { konst: Some(o), bound: Some(o) }
    }
    const UNKNOWN: Off = Off { konst: None, bound: None };
}

#[derive(Clone, Copy, Debug)]
struct LoopCtx {
    /// Target of `continue` (None for loops whose back edge is at the bottom).
    top: Option<Label>,
    /// Target of `break`.
    end: Label,
    /// Stack depth at `top` and `end`.
    depth: u32,
    /// False for the outermost loop of a program that must never exit.
    breakable: bool,
}

/// Typical packet offsets (Ethernet/IPv4/IPv6/TCP/UDP field positions).
const PKT_OFFSETS: &[u32] = &[0, 6, 12, 13, 14, 15, 16, 18, 20, 22, 23, 24, 26, 30, 34, 36, 38, 40, 42, 46, 47, 54, 58];
/// Interesting immediates.
const INTERESTING: &[u32] = &[
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    12,
    14,
    15,
    16,
    17,
    20,
    23,
    31,
    32,
    33,
    40,
    60,
    63,
    64,
    127,
    128,
    255,
    256,
    0x800,
    0x806,
    0x86dd,
    0x8100,
    0x88a8,
    0x7fff,
    0x8000,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0x8000_0001,
    0xffff_fffe,
    0xffff_ffff,
];
/// Shift and bit counts, including counts of 32 and more.
const SHIFTS: &[u32] = &[0, 1, 2, 3, 4, 7, 8, 15, 16, 24, 31, 32, 33, 35, 63, 64, 255, 0xffff_ffff];
/// Case values for switches on packet fields.
const CASE_VALUES: &[u32] = &[0, 1, 2, 4, 6, 17, 41, 58, 0x45, 0x60, 0x800, 0x806, 0x86dd, 0x8100, 0x88a8, 0xffff];

const UNARY: &[Opcode] =
    &[Opcode::Not, Opcode::Neg, Opcode::Bswap, Opcode::Bswap16, Opcode::Popcnt, Opcode::Clz, Opcode::Ctz, Opcode::Hash32];
const ARITH: &[Opcode] = &[Opcode::Add, Opcode::Sub, Opcode::Mul, Opcode::And, Opcode::Or, Opcode::Xor];
const DIVS: &[Opcode] = &[Opcode::Div, Opcode::Mod, Opcode::Sdiv, Opcode::Smod];
const SHIFT_OPS: &[Opcode] =
    &[Opcode::Shl, Opcode::Shr, Opcode::Sar, Opcode::Rotl, Opcode::Rotr, Opcode::Btest, Opcode::Bset, Opcode::Bclr];
const CMPS: &[Opcode] = &[
    Opcode::CmpEq,
    Opcode::CmpNeq,
    Opcode::CmpLt,
    Opcode::CmpLe,
    Opcode::CmpGt,
    Opcode::CmpGe,
    Opcode::CmpSlt,
    Opcode::CmpSle,
    Opcode::CmpSgt,
    Opcode::CmpSge,
];
const JCMPS: &[Opcode] = &[
    Opcode::JcmpEq,
    Opcode::JcmpNeq,
    Opcode::JcmpLt,
    Opcode::JcmpLe,
    Opcode::JcmpGt,
    Opcode::JcmpGe,
    Opcode::JcmpSlt,
    Opcode::JcmpSle,
    Opcode::JcmpSgt,
    Opcode::JcmpSge,
];
const MEMS: [Mem; 3] = [Mem::Packet, Mem::Info, Mem::Data];

/// Generates one segment.
pub(crate) struct Gen<'g, 'a> {
    u: &'g mut Unstructured<'a>,
    cfg: &'g GenConfig,
    env: &'g Env,
    mode: Mode,
    pub seg: SegBuilder,
    /// Soft limit on live instructions.
    budget: usize,
    /// Nesting depth of structured statements.
    nest: u32,
    loops: Vec<LoopCtx>,
    /// Locals `0..ready` have been stored in this handler.
    ready: u16,
}

#[derive(Clone, Copy, Debug)]
enum Stmt {
    Discard,
    LocStore,
    Store,
    Mcopy,
    Copro,
    Keep,
    Consume,
    Shuffle,
    If,
    Switch,
    Loop,
    Break,
    Exit,
    Nop,
    DeadJump,
}

impl<'g, 'a> Gen<'g, 'a> {
    pub fn new(u: &'g mut Unstructured<'a>, cfg: &'g GenConfig, env: &'g Env, kind: SegmentKind, mode: Mode, budget: usize) -> Self {
        Gen { u, cfg, env, mode, seg: SegBuilder::new(kind), budget, nest: 0, loops: Vec::new(), ready: 0 }
    }

    // ---- choice helpers ----

    /// True with probability `pct` percent; false when the input is exhausted.
    fn chance(&mut self, pct: u8) -> Result<bool> {
        Ok(self.u.int_in_range(0u8..=99)? >= 100 - pct.min(100))
    }

    /// True when a choice point should take its fault-prone variant
    /// (never in fault-free code).
    fn risky(&mut self) -> Result<bool> {
        if self.mode.no_faults {
            return Ok(false);
        }
        self.chance(self.env.risk)
    }

    fn range<T: arbitrary::unstructured::Int>(&mut self, lo: T, hi: T) -> Result<T> {
        self.u.int_in_range(lo..=hi)
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> Result<T> {
        Ok(*self.u.choose(xs)?)
    }

    /// Picks among `(weight, value)` pairs, skipping zero weights. The first
    /// nonzero entry is taken when the input is exhausted.
    fn weighted<T: Copy>(&mut self, xs: &[(u32, T)]) -> Result<T> {
        let total: u32 = xs.iter().map(|x| x.0).sum();
        assert!(total > 0, "fuzzgen bug: no choice available");
        let mut r = self.u.int_in_range(0..=total - 1)?;
        for &(w, v) in xs {
            if r < w {
                return Ok(v);
            }
            r -= w;
        }
        unreachable!()
    }

    fn in_init(&self) -> bool {
        self.seg.kind == SegmentKind::Init
    }

    fn room(&self) -> u32 {
        self.env.cap.saturating_sub(self.seg.depth)
    }

    fn depth(&self) -> u32 {
        self.seg.depth
    }

    fn emit(&mut self, op: Opcode) {
        self.seg.emit(op, Arg::None);
    }

    fn push(&mut self, v: u32) {
        self.seg.emit(Opcode::Push, Arg::Imm(v));
    }

    fn out_of_budget(&self) -> bool {
        self.seg.count >= self.budget
    }

    /// A value of one of the interesting kinds.
    fn imm(&mut self) -> Result<u32> {
        Ok(match self.range(0u8, 9)? {
            0..=4 => self.pick(INTERESTING)?,
            5..=7 => self.range(0u32, 100)?,
            _ => self.u.arbitrary()?,
        })
    }

    // ---- segments ----

    /// Generates the whole handler: entry code, the body, and a terminator.
    pub fn segment(&mut self) -> Result<()> {
        if self.seg.kind == SegmentKind::Push && self.chance(60)? {
            // The entry value (input port) is usually not needed.
            self.emit(Opcode::Pop);
        }
        self.init_locals()?;
        self.block()?;
        if self.seg.live {
            self.terminate()?;
        }
        self.maybe_junk()?;
        Ok(())
    }

    /// A program whose `.push` handler never ends except by exhausting its
    /// budget: a fault-free, exit-free body inside `top: ...; jump top`.
    pub fn infinite_segment(&mut self) -> Result<()> {
        if self.chance(50)? {
            self.emit(Opcode::Pop);
        }
        self.init_locals()?;
        let top = self.seg.label("forever");
        let end = self.seg.label("never");
        let d = self.depth();
        self.seg.comment("an infinite loop: only the budget stops it".into());
        self.seg.place(top);
        self.loops.push(LoopCtx { top: Some(top), end, depth: d, breakable: false });
        self.nest += 1;
        self.block()?;
        self.nest -= 1;
        self.loops.pop();
        self.adjust(d)?;
        self.seg.emit(Opcode::Jump, Arg::Target(Target::Label(top)));
        Ok(())
    }

    /// Stores every local used (general ones and loop counters) at entry.
    fn init_locals(&mut self) -> Result<()> {
        let n = self.env.general + self.env.counters;
        for slot in 0..n {
            self.expr(2)?;
            self.seg.emit(Opcode::Locstore, Arg::Local(slot));
            self.ready = slot + 1;
        }
        Ok(())
    }

    // ---- statements ----

    fn block(&mut self) -> Result<()> {
        while self.seg.live && !self.out_of_budget() && self.chance(88)? {
            self.stmt()?;
        }
        Ok(())
    }

    fn stmt(&mut self) -> Result<()> {
        let room = self.room();
        let depth = self.depth();
        let structured = self.nest < self.cfg.max_nesting && room >= 3;
        let init = self.in_init();
        let can_exit = !self.mode.no_exits;
        let in_loop = self.loops.iter().any(|l| l.breakable || l.top.is_some());
        let w = |ok: bool, w: u32| if ok { w } else { 0 };
        let choices = [
            (w(room >= 1, 8), Stmt::Discard),
            (w(room >= 1 && self.env.general > 0, 8), Stmt::LocStore),
            (w(room >= 2, 10), Stmt::Store),
            (w(room >= 3, 3), Stmt::Mcopy),
            (w(room >= 2 && self.env.ncopros > 0, 4), Stmt::Copro),
            (w(room >= 4, 3), Stmt::Keep),
            (w(depth >= 1 && (depth > 1 || init || room == 0), 3), Stmt::Consume),
            (w(depth >= 2 && room >= 2, 2), Stmt::Shuffle),
            (w(structured, 10), Stmt::If),
            (w(structured, 5), Stmt::Switch),
            (w(structured && self.cfg.allow_loops && (self.loops.len() as u16) < self.env.counters, 5), Stmt::Loop),
            (w(in_loop && room >= 2, 3), Stmt::Break),
            (w(can_exit && self.nest > 0, 2), Stmt::Exit),
            (1, Stmt::Nop),
            (w(self.cfg.dead_code, 1), Stmt::DeadJump),
        ];
        let total: u32 = choices.iter().map(|c| c.0).sum();
        let s = if total == 0 { Stmt::Nop } else { self.weighted(&choices)? };
        match s {
            Stmt::Discard => {
                self.expr(0)?;
                self.emit(Opcode::Pop);
            }
            Stmt::LocStore => {
                self.expr(0)?;
                let g = self.range(0, self.env.general - 1)?;
                self.seg.emit(Opcode::Locstore, Arg::Local(g));
            }
            Stmt::Store => self.store()?,
            Stmt::Mcopy => self.mcopy()?,
            Stmt::Copro => self.copro()?,
            Stmt::Keep => self.expr(0)?,
            Stmt::Consume => self.consume()?,
            Stmt::Shuffle => self.shuffle()?,
            Stmt::If => self.if_stmt()?,
            Stmt::Switch => self.switch_stmt()?,
            Stmt::Loop => self.loop_stmt()?,
            Stmt::Break => self.break_stmt()?,
            Stmt::Exit => self.terminate()?,
            Stmt::Nop => self.emit(Opcode::Nop),
            Stmt::DeadJump => {
                let skip = self.seg.label("skip");
                self.seg.emit(Opcode::Jump, Arg::Target(Target::Label(skip)));
                self.junk_run()?;
                self.seg.place(skip);
            }
        }
        Ok(())
    }

    /// Consumes the top value (pop or store to a local).
    fn consume(&mut self) -> Result<()> {
        if self.env.general > 0 && self.chance(40)? {
            let g = self.range(0, self.env.general - 1)?;
            self.seg.emit(Opcode::Locstore, Arg::Local(g));
        } else {
            self.emit(Opcode::Pop);
        }
        Ok(())
    }

    /// Stack juggling on values already there; stack-neutral.
    fn shuffle(&mut self) -> Result<()> {
        match self.range(0u8, 3)? {
            0 => self.emit(Opcode::Swap),
            1 => {
                // a b -> a b a -> a (b OP a)
                self.emit(Opcode::Over);
                let op = self.pick(ARITH)?;
                self.emit(op);
            }
            2 => {
                // a -> a a -> a f(a) -> a OP f(a)
                self.emit(Opcode::Dup);
                let f = self.pick(UNARY)?;
                self.emit(f);
                let op = self.pick(CMPS)?;
                self.emit(op);
            }
            _ => {
                let n = self.range(0, (self.depth() - 1).min(255))? as u8;
                self.seg.emit(Opcode::Pick, Arg::Depth(n));
                self.emit(Opcode::Xor);
            }
        }
        Ok(())
    }

    /// Pops or pushes values until the stack depth is `target`.
    fn adjust(&mut self, target: u32) -> Result<()> {
        while self.seg.live && self.depth() > target {
            self.consume()?;
        }
        while self.seg.live && self.depth() < target {
            self.expr(1)?;
        }
        Ok(())
    }

    /// A join depth near the current one, reachable by [`Gen::adjust`] from every arm.
    fn join_depth(&mut self) -> Result<u32> {
        let d = self.depth();
        Ok(match self.range(0u8, 9)? {
            8 if d >= 1 => d - 1,
            9 if self.room() >= 4 => d + 1,
            _ => d,
        })
    }

    /// Ends the handler: `ret`, `ret.pop` or `drop` in `.push`, `exit` in `.init`.
    fn terminate(&mut self) -> Result<()> {
        if self.mode.no_exits {
            return Ok(());
        }
        if self.in_init() {
            self.emit(Opcode::Exit);
            return Ok(());
        }
        let ports = self.env.ports;
        let kind = self.weighted(&[(if ports > 0 { 45 } else { 0 }, 0u8), (25, 1), (if self.room() >= 2 { 30 } else { 0 }, 2)])?;
        match kind {
            0 => {
                let p = self.range(0, ports - 1)?;
                self.seg.emit(Opcode::Ret, Arg::Port(p));
            }
            1 => self.emit(Opcode::Drop),
            _ => {
                let risky = self.risky()? || ports == 0;
                match self.range(0u8, 3)? {
                    0 | 1 if !risky => {
                        let p = self.range(0, u32::from(ports) - 1)?;
                        self.push(p);
                    }
                    _ if !risky => {
                        // A computed port, reduced to the ports there are.
                        self.dyn_leaf()?;
                        self.push(u32::from(ports));
                        self.emit(Opcode::Mod);
                    }
                    0 => self.emit(Opcode::Inport),
                    1 => {
                        // Out of range: bad-port.
                        let p = u32::from(ports) + self.range(0u32, 3)?;
                        let p = if self.chance(30)? { self.u.arbitrary::<u32>()?.max(p) } else { p };
                        self.push(p);
                    }
                    2 => {
                        self.dyn_leaf()?;
                        self.push(3);
                        self.emit(Opcode::And);
                    }
                    _ => self.expr(2)?,
                }
                self.emit(Opcode::RetPop);
            }
        }
        Ok(())
    }

    // ---- control flow ----

    /// Evaluates a condition and jumps to `target` on one of its outcomes;
    /// stack-neutral on both edges.
    fn cond_jump(&mut self, target: Label) -> Result<()> {
        let t = Arg::Target(Target::Label(target));
        let room = self.room();
        let kind = self.weighted(&[
            (30, 0u8),
            (if room >= 2 { 35 } else { 0 }, 1),
            (if room >= 2 { 15 } else { 0 }, 2),
            (if room >= 2 { 20 } else { 0 }, 3),
        ])?;
        match kind {
            0 => {
                self.expr(1)?;
                let op = if self.chance(50)? { Opcode::Jnz } else { Opcode::Jz };
                self.seg.emit(op, t);
            }
            1 => {
                self.expr(1)?;
                self.expr(1)?;
                let op = self.pick(JCMPS)?;
                self.seg.emit(op, t);
            }
            2 => {
                self.expr(1)?;
                self.expr(1)?;
                let c = self.pick(CMPS)?;
                self.emit(c);
                let op = if self.chance(50)? { Opcode::Jnz } else { Opcode::Jz };
                self.seg.emit(op, t);
            }
            _ => {
                // A packet (or data) field against a typical constant.
                self.field()?;
                let v = if self.chance(60)? { self.pick(CASE_VALUES)? } else { self.imm()? };
                self.push(v);
                let op = self.pick(JCMPS)?;
                self.seg.emit(op, t);
            }
        }
        Ok(())
    }

    /// Pushes a protocol field: a 8/16-bit load at a typical packet offset
    /// (data memory in `.init` or when faults are excluded).
    fn field(&mut self) -> Result<()> {
        if self.in_init() || self.mode.no_faults {
            return self.expr(1);
        }
        let off = self.pick(PKT_OFFSETS)?;
        self.push(off);
        let op = self.pick(&[Opcode::Upload8, Opcode::Upload16, Opcode::Upload16, Opcode::Upload32])?;
        self.emit(op);
        Ok(())
    }

    fn if_stmt(&mut self) -> Result<()> {
        let else_l = self.seg.label("else");
        self.cond_jump(else_l)?;
        let has_else = self.chance(50)?;
        let jd = if has_else { self.join_depth()? } else { self.depth() };
        self.nest += 1;
        self.block()?;
        self.adjust(jd)?;
        if has_else {
            let end = self.seg.label("endif");
            self.seg.emit(Opcode::Jump, Arg::Target(Target::Label(end)));
            self.place(else_l)?;
            self.block()?;
            self.adjust(jd)?;
            self.place(end)?;
        } else {
            self.place(else_l)?;
        }
        self.nest -= 1;
        Ok(())
    }

    fn switch_stmt(&mut self) -> Result<()> {
        // Selector.
        let typical = self.chance(50)?;
        if typical {
            self.field()?;
        } else {
            self.expr(1)?;
            if self.chance(50)? {
                let m = self.range(1u32, 15)?;
                self.push(m);
                self.emit(Opcode::And);
            }
        }
        let ncases: usize = match self.range(0u8, 19)? {
            0 => 0,
            1..=14 => self.range(1, 4)?,
            15..=18 => self.range(5, 12)?,
            _ => self.range(13, 40)?,
        };
        let mut values = Vec::with_capacity(ncases);
        for _ in 0..ncases {
            let v = match self.range(0u8, 3)? {
                0 if typical => self.pick(CASE_VALUES)?,
                0 | 1 => self.range(0u32, 16)?,
                2 => self.imm()?,
                _ => self.u.arbitrary()?,
            };
            values.push(v);
        }
        values.sort_unstable();
        values.dedup();
        let narms = self.range(1, (values.len() + 1).min(5))?;
        let arms: Vec<Label> = (0..narms).map(|_| self.seg.label("case")).collect();
        let rot = self.range(0, narms - 1)?;
        // Slot k (cases, then the default) goes to arm (k + rot) % narms for
        // the first narms slots, so that every arm is reachable.
        let mut slot_arm = Vec::with_capacity(values.len() + 1);
        for k in 0..=values.len() {
            slot_arm.push(if k < narms { (k + rot) % narms } else { self.range(0, narms - 1)? });
        }
        let cases: Vec<(u32, Target)> = values.iter().zip(&slot_arm).map(|(v, a)| (*v, Target::Label(arms[*a]))).collect();
        let default = Target::Label(arms[slot_arm[values.len()]]);
        let jd = self.join_depth_after_pop()?;
        self.seg.emit(Opcode::Switch, Arg::Switch(cases, default));
        let end = self.seg.label("endsw");
        self.nest += 1;
        for (i, arm) in arms.iter().enumerate() {
            self.place(*arm)?;
            self.block()?;
            self.adjust(jd)?;
            if i + 1 < arms.len() {
                self.seg.emit(Opcode::Jump, Arg::Target(Target::Label(end)));
            }
        }
        self.place(end)?;
        self.nest -= 1;
        Ok(())
    }

    /// Join depth for a statement whose first instruction pops one value.
    fn join_depth_after_pop(&mut self) -> Result<u32> {
        let d = self.depth() - 1;
        Ok(match self.range(0u8, 9)? {
            8 if d >= 1 => d - 1,
            9 if self.room() >= 5 => d + 1,
            _ => d,
        })
    }

    /// Pushes a loop count: mostly small, sometimes from the packet, sometimes huge.
    fn count(&mut self) -> Result<()> {
        let long = self.cfg.allow_long_loops;
        let k = self.weighted(&[
            (60, 0u8),
            (15, 1),
            (if self.room() >= 2 { 10 } else { 0 }, 2),
            (if long { 5 } else { 0 }, 3),
            (if self.in_init() { 0 } else { 5 }, 4),
        ])?;
        match k {
            0 => {
                let n = self.range(1u32, 6)?;
                self.push(n);
            }
            1 => {
                let n = self.range(7u32, 40)?;
                self.push(n);
            }
            2 => {
                self.dyn_leaf()?;
                let m = if self.chance(50)? { 0xf } else { 0xff };
                self.push(m);
                self.emit(Opcode::And);
            }
            3 => {
                let n = self.pick(&[1_000_000u32, 0x7fff_ffff, 0xffff_ffff])?;
                self.push(n);
            }
            _ => self.emit(Opcode::Pktlen),
        }
        Ok(())
    }

    fn loop_stmt(&mut self) -> Result<()> {
        let slot = self.env.general + self.loops.len() as u16;
        let variant = self.weighted(&[(30, 0u8), (25, 1), (20, 2), (15, 3), (if self.cfg.allow_long_loops { 10 } else { 0 }, 4)])?;
        let d = self.depth();
        let end = self.seg.label("endloop");
        let top = self.seg.label("loop");
        let lc = Arg::Local(slot);
        self.nest += 1;
        match variant {
            0 => {
                // while (c != 0) { c -= 1; body }
                self.seg.comment(format!("loop: counted down in local {slot}, test at the top"));
                self.count()?;
                self.seg.emit(Opcode::Locstore, lc.clone());
                self.place(top)?;
                self.seg.emit(Opcode::Locload, lc.clone());
                self.seg.emit(Opcode::Jz, Arg::Target(Target::Label(end)));
                self.decrement(slot);
                self.body(LoopCtx { top: Some(top), end, depth: d, breakable: true })?;
                self.seg.emit(Opcode::Jump, Arg::Target(Target::Label(top)));
            }
            1 => {
                // do { body } while (--c != 0), with jnz or jcmp
                self.seg.comment(format!("loop: do-while on local {slot}"));
                self.count()?;
                self.seg.emit(Opcode::Locstore, lc.clone());
                self.place(top)?;
                self.body(LoopCtx { top: None, end, depth: d, breakable: true })?;
                self.decrement(slot);
                self.seg.emit(Opcode::Locload, lc.clone());
                if self.chance(50)? || self.room() < 2 {
                    self.seg.emit(Opcode::Jnz, Arg::Target(Target::Label(top)));
                } else {
                    self.push(0);
                    self.seg.emit(Opcode::JcmpNeq, Arg::Target(Target::Label(top)));
                }
            }
            2 => {
                // for (i = 0; i < limit; i++) { body }
                self.seg.comment(format!("loop: counted up in local {slot}"));
                self.push(0);
                self.seg.emit(Opcode::Locstore, lc.clone());
                self.place(top)?;
                self.seg.emit(Opcode::Locload, lc.clone());
                self.count()?;
                let op = self.pick(&[Opcode::JcmpGe, Opcode::JcmpGe, Opcode::JcmpSge, Opcode::JcmpEq])?;
                self.seg.emit(op, Arg::Target(Target::Label(end)));
                self.seg.emit(Opcode::Locload, lc.clone());
                self.push(1);
                self.emit(Opcode::Add);
                self.seg.emit(Opcode::Locstore, lc.clone());
                self.body(LoopCtx { top: Some(top), end, depth: d, breakable: true })?;
                self.seg.emit(Opcode::Jump, Arg::Target(Target::Label(top)));
            }
            3 => {
                // do { body } while (--c != 0), the back edge being a switch default.
                self.seg.comment(format!("loop: back edge through a switch on local {slot}"));
                self.count()?;
                self.seg.emit(Opcode::Locstore, lc.clone());
                self.place(top)?;
                self.body(LoopCtx { top: None, end, depth: d, breakable: true })?;
                self.decrement(slot);
                self.seg.emit(Opcode::Locload, lc.clone());
                let cases = vec![(0, Target::Label(end))];
                self.seg.emit(Opcode::Switch, Arg::Switch(cases, Target::Label(top)));
            }
            _ => {
                // for (;;) { body }: only break, continue-free exits or the budget end it.
                self.seg.comment("loop: unbounded".into());
                self.place(top)?;
                self.body(LoopCtx { top: Some(top), end, depth: d, breakable: true })?;
                self.seg.emit(Opcode::Jump, Arg::Target(Target::Label(top)));
            }
        }
        self.place(end)?;
        self.nest -= 1;
        Ok(())
    }

    /// `c -= 1` on a loop counter.
    fn decrement(&mut self, slot: u16) {
        self.seg.emit(Opcode::Locload, Arg::Local(slot));
        self.push(1);
        self.emit(Opcode::Sub);
        self.seg.emit(Opcode::Locstore, Arg::Local(slot));
    }

    /// A loop body: a block that returns to the loop's depth.
    fn body(&mut self, ctx: LoopCtx) -> Result<()> {
        self.loops.push(ctx);
        self.block()?;
        self.adjust(ctx.depth)?;
        self.loops.pop();
        Ok(())
    }

    /// `break` or `continue`, unconditional or conditional, to the innermost
    /// loop or (sometimes) an outer one.
    fn break_stmt(&mut self) -> Result<()> {
        let candidates: Vec<(usize, bool)> = self
            .loops
            .iter()
            .enumerate()
            .rev()
            .flat_map(|(i, l)| {
                let mut v = Vec::new();
                if l.breakable {
                    v.push((i, true));
                }
                if l.top.is_some() {
                    v.push((i, false));
                }
                v
            })
            .collect();
        if candidates.is_empty() {
            return Ok(());
        }
        let (i, is_break) = if self.chance(70)? { candidates[0] } else { self.pick(&candidates)? };
        let ctx = self.loops[i];
        let target = if is_break { ctx.end } else { ctx.top.expect("continue target") };
        self.adjust(ctx.depth)?;
        if self.room() >= 2 && self.chance(75)? {
            self.cond_jump(target)?;
        } else {
            self.seg.emit(Opcode::Jump, Arg::Target(Target::Label(target)));
        }
        Ok(())
    }

    /// Places a label, sometimes after unreachable junk when the code before is dead.
    fn place(&mut self, l: Label) -> Result<()> {
        self.maybe_junk()?;
        self.seg.place(l);
        Ok(())
    }

    fn maybe_junk(&mut self) -> Result<()> {
        if !self.seg.live && self.cfg.dead_code && self.chance(6)? {
            self.junk_run()?;
        }
        Ok(())
    }

    /// One to four unreachable instructions: any opcode, random operands,
    /// targets anywhere (the verifier only decodes unreachable code).
    fn junk_run(&mut self) -> Result<()> {
        let n = self.range(1u8, 4)?;
        for _ in 0..n {
            let op = self.pick(Opcode::ALL)?;
            let raw =
                |g: &mut Self| -> Result<Target> { Ok(Target::Raw(if g.chance(80)? { g.range(-64i32, 64)? } else { g.u.arbitrary()? })) };
            let arg = match op.operands() {
                netil::OperandKind::None => Arg::None,
                netil::OperandKind::Imm32 => Arg::Imm(self.u.arbitrary()?),
                netil::OperandKind::Target => Arg::Target(raw(self)?),
                netil::OperandKind::Port => Arg::Port(self.range(0u16, 1023)?),
                netil::OperandKind::Local => Arg::Local(self.u.arbitrary()?),
                netil::OperandKind::Depth => Arg::Depth(self.u.arbitrary()?),
                netil::OperandKind::Mem => Arg::Mem(self.pick(&MEMS)?),
                netil::OperandKind::MemPair => Arg::MemPair(self.pick(&MEMS)?, self.pick(&MEMS)?),
                netil::OperandKind::CoproReg => Arg::CoproReg(self.u.arbitrary()?, self.u.arbitrary()?),
                netil::OperandKind::CoproOp => Arg::CoproOp(self.u.arbitrary()?, self.u.arbitrary()?),
                netil::OperandKind::Switch => {
                    let mut vals: Vec<u32> = (0..self.range(0u8, 3)?).map(|_| self.u.arbitrary()).collect::<Result<_>>()?;
                    vals.sort_unstable();
                    vals.dedup();
                    let cases = vals.into_iter().map(|v| Ok((v, raw(self)?))).collect::<Result<Vec<_>>>()?;
                    Arg::Switch(cases, raw(self)?)
                }
            };
            self.seg.junk(op, arg);
        }
        Ok(())
    }

    // ---- memory statements ----

    /// Memories an access of `width` bytes can be generated for right now.
    /// With `oob`, also memories too small for the access (a computed offset
    /// is then used, and the access faults at run time).
    fn mem_ok(&self, mem: Mem, width: u32, oob: bool) -> bool {
        let size = match mem {
            Mem::Packet => return !self.in_init() && !self.mode.no_faults,
            Mem::Info if self.in_init() => return false,
            Mem::Info => self.env.info_size,
            Mem::Data => self.env.data_size,
        };
        size >= width || (oob && !self.mode.no_faults && self.room() >= 2)
    }

    fn store(&mut self) -> Result<()> {
        let width = self.pick(&[1u32, 2, 4])?;
        let oob = self.risky()?;
        let mems: Vec<Mem> = MEMS.iter().copied().filter(|m| self.mem_ok(*m, width, oob)).collect();
        if mems.is_empty() {
            return Ok(());
        }
        let mem = self.pick(&mems)?;
        self.offset(mem, width)?;
        self.expr(1)?;
        let op = match (mem, width) {
            (Mem::Packet, 1) => Opcode::Ustore8,
            (Mem::Packet, 2) => Opcode::Ustore16,
            (Mem::Packet, _) => Opcode::Ustore32,
            (Mem::Info, 1) => Opcode::Istore8,
            (Mem::Info, 2) => Opcode::Istore16,
            (Mem::Info, _) => Opcode::Istore32,
            (Mem::Data, 1) => Opcode::Dstore8,
            (Mem::Data, 2) => Opcode::Dstore16,
            (Mem::Data, _) => Opcode::Dstore32,
        };
        self.emit(op);
        Ok(())
    }

    /// Memories a region instruction may use here.
    fn region_mems(&self) -> Vec<Mem> {
        if self.in_init() {
            vec![Mem::Data]
        } else if self.mode.no_faults {
            vec![Mem::Info, Mem::Data]
        } else {
            MEMS.to_vec()
        }
    }

    fn mcopy(&mut self) -> Result<()> {
        let mems = self.region_mems();
        let src = self.pick(&mems)?;
        let dst = self.pick(&mems)?;
        let d = self.region_offset(dst)?;
        let s = self.region_offset(src)?;
        self.region_len(&[(dst, d), (src, s)])?;
        self.seg.emit(Opcode::Mcopy, Arg::MemPair(src, dst));
        Ok(())
    }

    fn copro(&mut self) -> Result<()> {
        let c = self.range(0, self.env.ncopros - 1)?;
        let t = &crate::COPRO_TEMPLATES[self.env.copros[usize::from(c)]];
        if let (Some(key), Some(value)) = (t.key_size(), t.value_size()) {
            return self.table_op(c, key, value);
        }
        if let Some(v6) = t.lpm_family_v6() {
            return self.route_op(c, v6);
        }
        let reg = |g: &mut Self, valid: u8| g.input_reg(valid, 2, 30);
        match self.range(0u8, 3)? {
            0 => {
                // counter[index] += amount
                self.copro_index()?;
                let r = reg(self, 0)?;
                self.seg.emit(Opcode::CoproIn, Arg::CoproReg(c, r));
                self.expr(1)?;
                let r = reg(self, 1)?;
                self.seg.emit(Opcode::CoproIn, Arg::CoproReg(c, r));
                self.invoke(c, 0)?;
            }
            1 => {
                // read counter[index]
                self.copro_index()?;
                self.seg.emit(Opcode::CoproIn, Arg::CoproReg(c, 0));
                self.invoke(c, 1)?;
                let r = self.range(0u8, 1)?;
                let r = reg(self, r)?;
                self.seg.emit(Opcode::CoproOut, Arg::CoproReg(c, r));
                self.consume()?;
            }
            2 => {
                // reset counter[index]
                self.copro_index()?;
                self.seg.emit(Opcode::CoproIn, Arg::CoproReg(c, 0));
                self.invoke(c, 2)?;
            }
            _ => {
                // Just an operation on whatever the registers hold.
                let op = self.range(0u8, 2)?;
                self.invoke(c, op)?;
            }
        }
        Ok(())
    }

    /// Operations of the `table` instance `c` (`key` and `value` bytes) on
    /// one key: in registers (words from a few small constants, so that
    /// keys recur across packets) or at a packet offset (the headers'
    /// fields; near the end, where the compiled walks call instead; past
    /// it, a fault). Then one to three of lookup, insert and delete on it
    /// (an insert repeated is a learning bridge's replace of a live entry;
    /// an insert then a lookup hits), each perhaps followed by reading an
    /// output.
    fn table_op(&mut self, c: u8, key: u32, value: u32) -> Result<()> {
        let reg = |g: &mut Self, valid: u8| g.input_reg(valid, 9, 20);
        // Packet keys need a packet, and may fault.
        let pkt = !self.in_init() && !self.mode.no_faults && self.room() >= 2 && self.chance(60)?;
        if self.chance(60)? {
            // The value: in4 and up, as far as it goes.
            for w in 0..value.div_ceil(4).min(2) {
                self.expr(1)?;
                let r = reg(self, 4 + w as u8)?;
                self.seg.emit(Opcode::CoproIn, Arg::CoproReg(c, r));
            }
        }
        if pkt {
            self.key_offset(key)?;
            let r = reg(self, 8)?;
            self.seg.emit(Opcode::CoproIn, Arg::CoproReg(c, r));
        } else if self.chance(85)? {
            for w in 0..key.div_ceil(4) {
                let v = if self.chance(80)? { self.range(0u32, 3)? } else { self.imm()? };
                self.push(v);
                let r = reg(self, w as u8)?;
                self.seg.emit(Opcode::CoproIn, Arg::CoproReg(c, r));
            }
        }
        let base = if pkt { 3 } else { 0 };
        for _ in 0..self.range(1u8, 3)? {
            let op = self.weighted(&[(4, 0u8), (5, 1), (1, 2)])?;
            self.invoke(c, base + op)?;
            if self.room() >= 1 && self.chance(40)? {
                let r = if self.chance(50)? { 0 } else { self.range(1u8, 4)? };
                let r = if self.risky()? && self.chance(20)? { self.range(5u8, 255)? } else { r };
                self.seg.emit(Opcode::CoproOut, Arg::CoproReg(c, r));
                self.consume()?;
            }
        }
        Ok(())
    }

    /// Operations of the `lpm` instance `c` (`v6`: IPv6) on one prefix: its
    /// address (a few constants, or a packet's address field, so that
    /// lookups of packets hit) masked to a length of 0 (the default route)
    /// or one of a few others (longer than 24 takes a group: the budget
    /// runs out), a next hop, then one to three of insert, delete, lookup
    /// of the register address and lookup at a packet offset, each perhaps
    /// followed by reading an output. Risky variants: a length past the
    /// address, a next hop of 2^24, an address with bits set past the
    /// length (bad arguments).
    fn route_op(&mut self, c: u8, v6: bool) -> Result<()> {
        let reg = |g: &mut Self, valid: u8| g.input_reg(valid, 9, 20);
        let pkt = !self.in_init() && !self.mode.no_faults && self.room() >= 2;
        let bits = if v6 { 128 } else { 32 };
        let len = if self.risky()? && self.chance(20)? {
            self.range(bits + 1, bits + 8)?
        } else if v6 {
            self.pick(&[0u32, 16, 24, 32, 48, 48, 56, 64, 64, 100, 128])?
        } else {
            self.pick(&[0u32, 8, 16, 20, 24, 24, 25, 28, 32, 32])?
        };
        // IPv4 source and destination, or IPv6's (behind no VLAN tag), or others.
        let fields: &[u32] = if v6 { &[22, 38, 38, 14, 26] } else { &[26, 30, 30, 14, 2] };
        let field = if pkt && self.chance(50)? { Some(self.pick(fields)?) } else { None };
        let constant = self.pick(&[0x2001_0db8u32, 0x0a00_0000, 0xfe80_0000, 0xc0a8_01ff, 0])?;
        let mask_bits = !(self.risky()? && self.chance(20)?);
        for w in 0..bits / 32 {
            match field {
                Some(o) => {
                    self.push(o + 4 * w);
                    self.emit(Opcode::Upload32);
                }
                None => {
                    let v = if w == 0 { constant } else { self.pick(&[0u32, 0, 1, 0xffff_ffff])? };
                    self.push(v);
                }
            }
            if mask_bits && self.room() >= 1 {
                let keep = len.saturating_sub(32 * w).min(32);
                self.push(u32::MAX.checked_shl(32 - keep).unwrap_or(0));
                self.emit(Opcode::And);
            }
            let r = reg(self, w as u8)?;
            self.seg.emit(Opcode::CoproIn, Arg::CoproReg(c, r));
        }
        self.push(len);
        let r = reg(self, 4)?;
        self.seg.emit(Opcode::CoproIn, Arg::CoproReg(c, r));
        let hop = if self.risky()? && self.chance(20)? { 1 << 24 } else { self.range(0u32, 15)? };
        self.push(hop);
        let r = reg(self, 5)?;
        self.seg.emit(Opcode::CoproIn, Arg::CoproReg(c, r));
        for k in 0..self.range(1u8, 3)? {
            // Mostly an insert first, so that the lookups after it hit.
            let op = if k == 0 && self.chance(60)? { 1 } else { self.weighted(&[(4, 1u8), (1, 2), (3, 0), (if pkt { 4 } else { 0 }, 3)])? };
            if op == 3 {
                // The address field the prefix came from, mostly.
                match field {
                    Some(o) if self.chance(70)? => self.push(o),
                    _ => self.key_offset(bits / 8)?,
                }
                let r = reg(self, 8)?;
                self.seg.emit(Opcode::CoproIn, Arg::CoproReg(c, r));
            }
            self.invoke(c, op)?;
            if self.room() >= 1 && self.chance(40)? {
                let r = if self.risky()? && self.chance(20)? { self.range(2u8, 255)? } else { self.range(0u8, 1)? };
                self.seg.emit(Opcode::CoproOut, Arg::CoproReg(c, r));
                self.consume()?;
            }
        }
        Ok(())
    }

    /// Pushes the packet offset of a `key`-byte key: mostly a header field's
    /// (addresses, ports), sometimes one that ends within 8 bytes of the
    /// packet's end or past it, or a computed one.
    fn key_offset(&mut self, key: u32) -> Result<()> {
        match self.weighted(&[(12, 0u8), (3, 1), (if self.room() >= 2 { 2 } else { 0 }, 2)])? {
            0 => {
                let o = self.pick(&[0u32, 0, 6, 6, 12, 14, 23, 26, 26, 30, 34, 36, 40])?;
                self.push(o);
            }
            1 => {
                self.emit(Opcode::Pktlen);
                let back = self.range(0u32, key + 9)?;
                self.push(back);
                self.emit(Opcode::Sub);
            }
            _ => {
                self.expr(1)?;
                self.push(0x3f);
                self.emit(Opcode::And);
            }
        }
        Ok(())
    }

    /// An input register to write: `valid`, or (a risky choice, `pct`
    /// percent of those) one from `first_bad` up, which the kind lacks.
    fn input_reg(&mut self, valid: u8, first_bad: u8, pct: u8) -> Result<u8> {
        Ok(if self.risky()? && self.chance(pct)? { self.range(first_bad, 255)? } else { valid })
    }

    fn invoke(&mut self, c: u8, op: u8) -> Result<()> {
        let op = if self.risky()? && self.chance(30)? { self.range(3u8, 255)? } else { op };
        self.seg.emit(Opcode::CoproInvoke, Arg::CoproOp(c, op));
        Ok(())
    }

    /// Pushes a counter index: mostly valid (the harness creates 256 counters).
    fn copro_index(&mut self) -> Result<()> {
        if self.mode.no_faults {
            let i = self.range(0u32, 15)?;
            self.push(i);
            return Ok(());
        }
        if self.risky()? {
            if self.chance(50)? {
                let i = self.range(256u32, 0xffff_ffff)?;
                self.push(i);
            } else {
                self.expr(2)?;
            }
        } else if self.room() >= 2 && self.chance(30)? {
            self.dyn_leaf()?;
            self.push(0xff);
            self.emit(Opcode::And);
        } else {
            let i = self.range(0u32, 15)?;
            self.push(i);
        }
        Ok(())
    }

    // ---- offsets ----

    /// Pushes an offset for an access of `width` bytes to `mem`. Info and
    /// data: a constant inside the declared size, or a computed offset the
    /// verifier cannot know (checked at run time).
    fn offset(&mut self, mem: Mem, width: u32) -> Result<()> {
        match mem {
            Mem::Packet => self.pkt_offset(width).map(drop),
            _ => {
                let size = if mem == Mem::Info { self.env.info_size } else { self.env.data_size };
                let can_const = size >= width;
                let can_dyn = !self.mode.no_faults && self.room() >= 2;
                assert!(can_const || can_dyn, "fuzzgen bug: no offset for {mem:?}");
                if can_const && (!can_dyn || self.chance(70)?) {
                    let o = self.range(0, size - width)?;
                    self.push(o);
                } else {
                    self.dyn_offset(size, width)?;
                }
                Ok(())
            }
        }
    }

    /// A computed offset for `width` bytes in a memory of `size`: an unknown
    /// value, masked so that the access stays inside (or, when risky, masked
    /// to about the size, or not at all), plus a small base. The result is
    /// the constant 0 for the verifier (`x * 0`) when nothing but offset 0 fits.
    fn dyn_offset(&mut self, size: u32, width: u32) -> Result<Off> {
        self.dyn_leaf()?;
        let fits = size >= width;
        if fits && !self.risky()? {
            // x & mask <= mask <= size - width: always inside.
            // The largest 2^k - 1 not above size - width.
            let n = size - width;
            let mask = ((1u64 << (31 - (n + 1).leading_zeros())) - 1) as u32;
            if mask == 0 {
                // Nothing to choose from: `x & 0` folds to the constant 0, which is fine (0 + width <= size).
                self.push(0);
                self.emit(Opcode::Mul);
                return Ok(Off::konst(0));
            }
            self.push(mask);
            self.emit(Opcode::And);
            let spare = size - width - mask;
            let mut bound = mask;
            if spare > 0 && self.chance(30)? {
                let base = self.range(1, spare.min(16))?;
                self.push(base);
                self.emit(Opcode::Add);
                bound += base;
            }
            return Ok(Off { konst: None, bound: Some(bound) });
        }
        let mask = match self.range(0u8, 9)? {
            0..=6 => size.max(2).next_power_of_two() - 1,
            7 => 0xff,
            8 => 0xffff,
            _ => 0xffff_ffff,
        };
        self.push(mask);
        self.emit(Opcode::And);
        if self.chance(30)? {
            let base = self.range(1u32, 8)?;
            self.push(base);
            self.emit(Opcode::Add);
        }
        Ok(Off::UNKNOWN)
    }

    /// Pushes a packet offset for `width` bytes; returns it when it is a
    /// constant. Usually a header field offset or one computed from header
    /// bytes (IHL) or the packet length; when risky, offsets beyond a typical
    /// frame, near 2^32, or taken from locals.
    fn pkt_offset(&mut self, width: u32) -> Result<Option<u32>> {
        let room = self.room();
        if self.risky()? {
            let k = self.weighted(&[
                (4, 0u8),
                (2, 1),
                (if room >= 2 { 2 } else { 0 }, 2),
                (if self.ready > 0 { 3 } else { 0 }, 3),
                (if room >= 2 { 2 } else { 0 }, 4),
            ])?;
            match k {
                0 => {
                    let o = self.range(64u32, 1600)?;
                    self.push(o);
                    return Ok(Some(o));
                }
                1 => {
                    let o = self.pick(&[0xffff_ffffu32, 0xffff_fffe, 0xffff_fffd, 0xffff_fffc, 0x7fff_ffff, 0x8000_0000, 0x1_0000])?;
                    self.push(o);
                    return Ok(Some(o));
                }
                2 => {
                    // The last bytes, but too close to the end.
                    self.emit(Opcode::Pktlen);
                    let back = self.range(0, width - 1)?;
                    self.push(back);
                    self.emit(Opcode::Sub);
                }
                3 => {
                    let g = self.range(0, self.ready - 1)?;
                    self.seg.emit(Opcode::Locload, Arg::Local(g));
                    if self.room() >= 2 && self.chance(50)? {
                        let k = self.range(0u32, 40)?;
                        self.push(k);
                        self.emit(Opcode::Add);
                    }
                }
                _ => {
                    self.dyn_leaf()?;
                    self.push(0xffff);
                    self.emit(Opcode::And);
                }
            }
            return Ok(None);
        }
        let k = self.weighted(&[
            (55, 0u8),
            (if room >= 2 { 20 } else { 0 }, 1),
            (if room >= 2 { 8 } else { 0 }, 2),
            (if room >= 2 { 6 } else { 0 }, 3),
        ])?;
        match k {
            0 => {
                let o = if self.chance(70)? { self.pick(PKT_OFFSETS)? } else { self.range(0u32, 40)? };
                self.push(o);
                return Ok(Some(o));
            }
            1 => {
                // IPv4 transport header: 14 + 4 * (pkt[14] & 0xf) (+ a field offset).
                self.push(14);
                self.emit(Opcode::Upload8);
                self.push(0xf);
                self.emit(Opcode::And);
                self.push(4);
                self.emit(Opcode::Mul);
                self.push(14);
                self.emit(Opcode::Add);
                if self.chance(60)? {
                    let f = self.pick(&[0u32, 2, 4, 8, 12, 13])?;
                    self.push(f);
                    self.emit(Opcode::Add);
                }
            }
            2 => {
                // Relative to the end of the packet (wraps below zero on short packets).
                self.emit(Opcode::Pktlen);
                let back = self.range(width, width + 8)?;
                self.push(back);
                self.emit(Opcode::Sub);
            }
            _ => {
                self.dyn_leaf()?;
                self.push(0x1f);
                self.emit(Opcode::And);
            }
        }
        Ok(None)
    }

    /// Pushes a region offset; returns it when it is a constant. Info and
    /// data constants lie in `0..=size` (a region may be empty at the end).
    fn region_offset(&mut self, mem: Mem) -> Result<Off> {
        if mem == Mem::Packet {
            let k = self.pkt_offset(1)?;
            return Ok(Off { konst: k, bound: k });
        }
        let size = if mem == Mem::Info { self.env.info_size } else { self.env.data_size };
        if self.mode.no_faults || self.room() < 3 || size == 0 || self.chance(70)? {
            let o = self.range(0, size)?;
            self.push(o);
            Ok(Off::konst(o))
        } else {
            self.dyn_offset(size, 1)
        }
    }

    /// Pushes a region length. A constant length keeps every info or data
    /// side whose offset is a constant inside the memory (the verifier checks
    /// it), and, unless risky, every side whose offset is bounded. Otherwise
    /// a computed length: the rest of the packet after a constant offset, or,
    /// when risky, anything.
    fn region_len(&mut self, sides: &[(Mem, Off)]) -> Result<()> {
        let risky = self.risky()?;
        let mut max: Option<u32> = None;
        for (mem, off) in sides {
            let size = match mem {
                Mem::Packet => continue,
                Mem::Info => self.env.info_size,
                Mem::Data => self.env.data_size,
            };
            let limit = match (off.konst, off.bound) {
                (Some(o), _) => Some(size - o),
                (None, Some(b)) if !risky => Some(size.saturating_sub(b)),
                _ => None,
            };
            if let Some(left) = limit {
                max = Some(max.map_or(left, |m: u32| m.min(left)));
            }
        }
        let room = self.room();
        let rest_of_packet = match sides {
            [(Mem::Packet, Off { konst: Some(o), .. })] => Some(*o),
            _ => None,
        };
        if let Some(o) = rest_of_packet.filter(|_| room >= 2) {
            if self.chance(30)? {
                self.emit(Opcode::Pktlen);
                self.push(o);
                self.emit(Opcode::Sub);
                return Ok(());
            }
        }
        if risky && room >= 2 && self.chance(50)? {
            if sides.iter().any(|s| s.0 == Mem::Packet) && self.chance(50)? {
                self.emit(Opcode::Pktlen);
                let k = self.range(0u32, 40)?;
                self.push(k);
                self.emit(Opcode::Sub);
            } else {
                self.dyn_leaf()?;
                self.push(0x3f);
                self.emit(Opcode::And);
            }
            return Ok(());
        }
        let len = match max {
            Some(m) => {
                if self.chance(30)? {
                    m
                } else {
                    self.range(0, m.min(64))?
                }
            }
            None if self.mode.no_faults => 0,
            None if risky => {
                if self.chance(70)? {
                    self.range(64u32, 1600)?
                } else {
                    self.pick(&[0xffff_ffffu32, 0x8000_0000])?
                }
            }
            None => self.range(0u32, 20)?,
        };
        self.push(len);
        Ok(())
    }

    // ---- expressions ----

    /// Pushes one value whose computation the verifier cannot fold to a
    /// constant (so that masking it gives an offset checked at run time).
    fn dyn_leaf(&mut self) -> Result<()> {
        let init = self.in_init();
        let safe = self.mode.no_faults;
        let k = self.weighted(&[
            (3, 0u8),
            (if init { 0 } else { 3 }, 1),
            (if init { 0 } else { 2 }, 2),
            (if init { 0 } else { 1 }, 3),
            (if self.ready > 0 { 4 } else { 0 }, 4),
            (if init || safe { 0 } else { 5 }, 5),
            (if self.env.ncopros > 0 { 1 } else { 0 }, 6),
        ])?;
        match k {
            0 => {
                let v = self.imm()?;
                self.push(v);
                self.emit(Opcode::Hash32);
            }
            1 => self.emit(Opcode::Pktlen),
            2 => self.emit(Opcode::Inport),
            3 => {
                let op = self.pick(&[Opcode::TstampNs, Opcode::TstampS, Opcode::Wirelen])?;
                self.emit(op);
            }
            4 => {
                let g = self.range(0, self.ready - 1)?;
                self.seg.emit(Opcode::Locload, Arg::Local(g));
            }
            5 => {
                let o = self.pick(PKT_OFFSETS)?;
                self.push(o);
                self.emit(Opcode::Upload8);
            }
            _ => {
                let c = self.range(0, self.env.ncopros - 1)?;
                let r = self.range(0u8, 1)?;
                self.seg.emit(Opcode::CoproOut, Arg::CoproReg(c, r));
            }
        }
        Ok(())
    }

    /// Pushes exactly one value. Needs `room() >= 1`. `lvl` limits nesting.
    pub(crate) fn expr(&mut self, lvl: u32) -> Result<()> {
        let room = self.room();
        assert!(room >= 1 || !self.seg.live, "fuzzgen bug: no room for an expression");
        let deep = lvl >= 4;
        let k = self.weighted(&[
            (45, 0u8),
            (if deep { 0 } else { 10 }, 1),
            (if deep || room < 2 { 0 } else { 35 }, 2),
            (if lvl >= 3 || room < 3 { 0 } else { 3 }, 3),
            (if lvl >= 3 || room < 3 { 0 } else { 3 }, 4),
        ])?;
        match k {
            0 => self.leaf()?,
            1 => {
                self.expr(lvl + 1)?;
                let op = self.pick(UNARY)?;
                self.emit(op);
            }
            2 => self.binary(lvl)?,
            3 => {
                // csum.upd: checksum, old field, new field.
                self.expr(lvl + 1)?;
                self.expr(lvl + 1)?;
                self.expr(lvl + 1)?;
                self.emit(Opcode::CsumUpd);
            }
            _ => {
                // a b -> a b a -> a (b OP1 a) -> a OP2 (b OP1 a)
                self.expr(lvl + 1)?;
                self.expr(lvl + 1)?;
                self.emit(Opcode::Over);
                let op1 = self.pick(ARITH)?;
                self.emit(op1);
                let op2 = self.pick(ARITH)?;
                self.emit(op2);
            }
        }
        Ok(())
    }

    fn binary(&mut self, lvl: u32) -> Result<()> {
        let class = self.range(0u8, 9)?;
        let swap = self.chance(10)?;
        self.expr(lvl + 1)?;
        let op = match class {
            0..=3 => {
                self.expr(lvl + 1)?;
                self.pick(ARITH)?
            }
            4 | 5 => {
                let op = self.pick(DIVS)?;
                self.divisor(lvl)?;
                op
            }
            6 | 7 => {
                let op = self.pick(SHIFT_OPS)?;
                if self.chance(70)? {
                    let s = self.pick(SHIFTS)?;
                    self.push(s);
                } else {
                    self.expr(lvl + 1)?;
                }
                op
            }
            _ => {
                self.expr(lvl + 1)?;
                self.pick(CMPS)?
            }
        };
        // Swapping the operands of a division would put an unknown value in
        // the divisor: only the divisor generator decides about zeros.
        if swap && !DIVS.contains(&op) {
            self.emit(Opcode::Swap);
        }
        self.emit(op);
        Ok(())
    }

    /// Pushes a divisor: sometimes zero, sometimes -1 (for `MIN / -1`).
    fn divisor(&mut self, lvl: u32) -> Result<()> {
        if self.mode.no_faults {
            let d = self.pick(&[1u32, 2, 3, 7, 10, 0xffff_ffff, 0x8000_0000])?;
            self.push(d);
            return Ok(());
        }
        if self.risky()? {
            if self.chance(60)? {
                self.push(0);
            } else {
                self.expr(lvl + 1)?;
            }
            return Ok(());
        }
        match self.range(0u8, 9)? {
            0 => self.push(0xffff_ffff),
            1..=7 => {
                let d = self.pick(&[1u32, 2, 3, 4, 7, 8, 10, 16, 100, 0x8000_0000, 0xffff_fffe])?;
                self.push(d);
            }
            _ => {
                // A computed divisor that cannot be zero: x | 1.
                self.expr(lvl + 1)?;
                self.push(1);
                self.emit(Opcode::Or);
            }
        }
        Ok(())
    }

    fn leaf(&mut self) -> Result<()> {
        let init = self.in_init();
        let depth = self.depth();
        let room = self.room();
        let oob = self.risky()?;
        let load_mems: Vec<Mem> = MEMS.iter().copied().filter(|m| self.mem_ok(*m, if oob { 4 } else { 1 }, oob)).collect();
        let k = self.weighted(&[
            (14, 0u8),
            (if init { 0 } else { 6 }, 1),
            (if self.ready > 0 { 6 } else { 0 }, 2),
            (if load_mems.is_empty() { 0 } else { 18 }, 3),
            (if depth >= 1 { 4 } else { 0 }, 4),
            (if self.env.ncopros > 0 { 2 } else { 0 }, 5),
            (if room >= 2 { 4 } else { 0 }, 6),
        ])?;
        match k {
            0 => {
                let v = self.imm()?;
                self.push(v);
            }
            1 => {
                let op =
                    self.pick(&[Opcode::Pktlen, Opcode::Pktlen, Opcode::Wirelen, Opcode::Inport, Opcode::TstampS, Opcode::TstampNs])?;
                self.emit(op);
            }
            2 => {
                let g = self.range(0, self.ready - 1)?;
                self.seg.emit(Opcode::Locload, Arg::Local(g));
            }
            3 => {
                let mem = self.pick(&load_mems)?;
                let size = match mem {
                    Mem::Packet => u32::MAX,
                    Mem::Info => self.env.info_size,
                    Mem::Data => self.env.data_size,
                };
                let widths: Vec<u32> = [1u32, 2, 4].into_iter().filter(|w| *w <= size).collect();
                let width = if oob { self.pick(&[1u32, 2, 4])? } else { self.pick(&widths)? };
                self.offset(mem, width)?;
                let op = match (mem, width) {
                    (Mem::Packet, 1) => Opcode::Upload8,
                    (Mem::Packet, 2) => Opcode::Upload16,
                    (Mem::Packet, _) => Opcode::Upload32,
                    (Mem::Info, 1) => Opcode::Iload8,
                    (Mem::Info, 2) => Opcode::Iload16,
                    (Mem::Info, _) => Opcode::Iload32,
                    (Mem::Data, 1) => Opcode::Dload8,
                    (Mem::Data, 2) => Opcode::Dload16,
                    (Mem::Data, _) => Opcode::Dload32,
                };
                self.emit(op);
            }
            4 => match self.range(0u8, 2)? {
                0 => self.emit(Opcode::Dup),
                1 if depth >= 2 => self.emit(Opcode::Over),
                _ => {
                    let n = self.range(0, (depth - 1).min(255))? as u8;
                    self.seg.emit(Opcode::Pick, Arg::Depth(n));
                }
            },
            5 => {
                let c = self.range(0, self.env.ncopros - 1)?;
                let r = if self.risky()? && self.chance(30)? { self.range(2u8, 255)? } else { self.range(0u8, 1)? };
                self.seg.emit(Opcode::CoproOut, Arg::CoproReg(c, r));
            }
            _ => {
                let mems = self.region_mems();
                let mem = self.pick(&mems)?;
                let off = self.region_offset(mem)?;
                self.region_len(&[(mem, off)])?;
                let op = self.pick(&[Opcode::Crc32, Opcode::Hash, Opcode::Csum])?;
                self.seg.emit(op, Arg::Mem(mem));
            }
        }
        Ok(())
    }
}
