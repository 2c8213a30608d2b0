//! The segment builder: instructions with symbolic labels, stack-depth
//! bookkeeping, and the two outputs (binary code and assembly text).
//!
//! The generator ([`crate::gen`]) appends [`Item`]s to a [`SegBuilder`].
//! Every emitted instruction updates the tracked operand-stack depth; every
//! edge into a label records the depth it arrives with and checks that all
//! edges agree, so a generator bug shows up here, as a panic with the label's
//! name, rather than as a verifier rejection far away. Unreachable "junk"
//! instructions (dead code) are emitted without bookkeeping and may use raw
//! displacements as targets.

use std::fmt::Write;

use netil::{encode, Mem, Opcode, OperandKind, Operands, SegmentKind, SwitchTable};
use netvm_traffic::SplitMix64;

/// A label of one segment (an index into [`SegBuilder::labels`]).
pub(crate) type Label = usize;

/// A jump target before layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// A label of the same segment.
    Label(Label),
    /// A raw displacement from the end of the instruction (`@±N`); junk only.
    Raw(i32),
}

/// Operands before layout (targets are symbolic).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Arg {
    None,
    Imm(u32),
    Target(Target),
    Port(u16),
    Local(u16),
    Depth(u8),
    Mem(Mem),
    MemPair(Mem, Mem),
    CoproReg(u8, u8),
    CoproOp(u8, u8),
    /// Cases in ascending value order, and the default.
    Switch(Vec<(u32, Target)>, Target),
}

/// One element of a segment.
#[derive(Clone, Debug)]
pub(crate) enum Item {
    /// A label definition.
    Label(Label),
    /// An instruction; `junk` marks unreachable filler.
    Insn { op: Opcode, arg: Arg, junk: bool },
    /// A comment line in the listing (no code).
    Comment(String),
}

/// What the builder knows about a label.
#[derive(Clone, Debug)]
pub(crate) struct LabelInfo {
    /// Name in the listing (unique within the segment).
    pub name: String,
    /// Stack depth every edge into the label arrives with; `None` while no edge reached it.
    pub depth: Option<u32>,
}

/// A code segment under construction.
#[derive(Clone, Debug)]
pub(crate) struct SegBuilder {
    pub kind: SegmentKind,
    pub items: Vec<Item>,
    pub labels: Vec<LabelInfo>,
    /// Current stack depth (meaningless while `!live`).
    pub depth: u32,
    /// Largest depth reached on a live path.
    pub max_depth: u32,
    /// False after an instruction that does not fall through, until a label
    /// that some edge reaches is placed.
    pub live: bool,
    /// Number of live instructions emitted.
    pub count: usize,
}

impl SegBuilder {
    pub fn new(kind: SegmentKind) -> SegBuilder {
        let depth = if kind == SegmentKind::Push { 1 } else { 0 };
        SegBuilder { kind, items: Vec::new(), labels: Vec::new(), depth, max_depth: depth, live: true, count: 0 }
    }

    /// A fresh label named `{prefix}{index}`.
    pub fn label(&mut self, prefix: &str) -> Label {
        let id = self.labels.len();
        self.labels.push(LabelInfo { name: format!("{prefix}{id}"), depth: None });
        id
    }

    /// Records an edge arriving at `l` with stack depth `d`.
    fn reach(&mut self, l: Label, d: u32) {
        let info = &mut self.labels[l];
        match info.depth {
            None => info.depth = Some(d),
            Some(x) => assert_eq!(x, d, "fuzzgen bug: edges into `{}` disagree on the stack depth", info.name),
        }
    }

    /// Emits a live instruction. Does nothing while the code is dead, so
    /// structured sequences stay correct when one of their parts ended early.
    pub fn emit(&mut self, op: Opcode, arg: Arg) {
        if !self.live {
            return;
        }
        let pick = if let Arg::Depth(n) = arg { n } else { 0 };
        assert!(
            self.depth >= op.stack_needs(pick),
            "fuzzgen bug: `{}` needs {} values, depth {}",
            op.mnemonic(),
            op.stack_needs(pick),
            self.depth
        );
        let after = self.depth - op.pops() + op.pushes();
        let edge_depth = self.depth - op.pops();
        match &arg {
            Arg::Target(Target::Label(l)) => self.reach(*l, edge_depth),
            Arg::Switch(cases, default) => {
                assert!(cases.windows(2).all(|w| w[0].0 < w[1].0), "fuzzgen bug: unsorted switch");
                for t in cases.iter().map(|c| c.1).chain(std::iter::once(*default)) {
                    if let Target::Label(l) = t {
                        self.reach(l, edge_depth);
                    }
                }
            }
            _ => {}
        }
        self.items.push(Item::Insn { op, arg, junk: false });
        self.count += 1;
        self.depth = after;
        self.max_depth = self.max_depth.max(after);
        if op.ends_block() {
            self.live = false;
        }
    }

    /// Emits an unreachable instruction (no bookkeeping). Only valid while dead.
    pub fn junk(&mut self, op: Opcode, arg: Arg) {
        debug_assert!(!self.live);
        self.items.push(Item::Insn { op, arg, junk: true });
    }

    /// Places a label: falls into it if live; afterwards the code is live iff
    /// some edge reaches the label.
    pub fn place(&mut self, l: Label) {
        if self.live {
            let d = self.depth;
            self.reach(l, d);
        }
        self.items.push(Item::Label(l));
        match self.labels[l].depth {
            Some(d) => {
                self.live = true;
                self.depth = d;
            }
            None => self.live = false,
        }
    }

    /// Adds a comment line to the listing.
    pub fn comment(&mut self, text: String) {
        if self.live {
            self.items.push(Item::Comment(text));
        }
    }

    /// Byte offset of every label, and the encoded code.
    pub fn encode(&self) -> Vec<u8> {
        let mut offsets: Vec<Option<u32>> = vec![None; self.labels.len()];
        let mut at = 0u32;
        for item in &self.items {
            match item {
                Item::Label(l) => offsets[*l] = Some(at),
                Item::Insn { op, arg, .. } => at += insn_len(*op, arg),
                Item::Comment(_) => {}
            }
        }
        let mut code = Vec::with_capacity(at as usize);
        for item in &self.items {
            let Item::Insn { op, arg, .. } = item else { continue };
            let at = code.len() as u32;
            let end = i64::from(at) + i64::from(insn_len(*op, arg));
            let resolve = |t: &Target| -> i64 {
                match t {
                    Target::Label(l) => {
                        i64::from(offsets[*l].unwrap_or_else(|| panic!("fuzzgen bug: label `{}` never placed", self.labels[*l].name)))
                    }
                    Target::Raw(d) => end + i64::from(*d),
                }
            };
            let operands = match arg {
                Arg::None => Operands::None,
                Arg::Imm(v) => Operands::Imm(*v),
                Arg::Target(t) => Operands::Target(resolve(t)),
                Arg::Port(p) => Operands::Port(*p),
                Arg::Local(l) => Operands::Local(*l),
                Arg::Depth(d) => Operands::Depth(*d),
                Arg::Mem(m) => Operands::Mem(*m),
                Arg::MemPair(s, d) => Operands::MemPair(*s, *d),
                Arg::CoproReg(c, r) => Operands::CoproReg { copro: *c, reg: *r },
                Arg::CoproOp(c, o) => Operands::CoproOp { copro: *c, op: *o },
                Arg::Switch(cases, default) => Operands::Switch(SwitchTable {
                    default: resolve(default),
                    cases: cases.iter().map(|(v, t)| (*v, resolve(t))).collect(),
                }),
            };
            encode(*op, &operands, at, &mut code).expect("fuzzgen bug: instruction does not encode");
        }
        code
    }
}

/// Encoded length of an instruction.
pub(crate) fn insn_len(op: Opcode, arg: &Arg) -> u32 {
    match (op.operands().fixed_size(), arg) {
        (Some(n), _) => 1 + n as u32,
        (None, Arg::Switch(cases, _)) => 1 + 8 + 8 * cases.len() as u32,
        (None, _) => unreachable!("switch without a table"),
    }
}

/// A tiny deterministic generator (SplitMix64) for listing cosmetics, so that
/// the text's spelling varies without consuming fuzzer input.
#[derive(Clone, Debug)]
pub(crate) struct Cosmetic(SplitMix64);

impl Cosmetic {
    pub fn new(seed: u64) -> Cosmetic {
        Cosmetic(SplitMix64::new(seed))
    }

    /// True with probability `pct` percent.
    pub fn chance(&mut self, pct: u64) -> bool {
        self.0.chance(pct)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }

    /// A 32-bit value in one of the spellings the assembler accepts.
    pub fn number(&mut self, v: u32) -> String {
        match self.below(10) {
            0 | 1 => format!("{v:#x}"),
            2 => format!("0X{v:X}"),
            3 if v >= 0x8000_0000 => format!("-{}", (1u64 << 32) - u64::from(v)),
            4 if v < 256 => format!("0b{v:b}"),
            5 if v < 4096 => format!("0o{v:o}"),
            6 => format!("+{v}"),
            7 if v >= 10_000 => {
                // Decimal with `_` every three digits.
                let s = v.to_string();
                let mut out = String::new();
                for (i, c) in s.chars().enumerate() {
                    if i > 0 && (s.len() - i).is_multiple_of(3) {
                        out.push('_');
                    }
                    out.push(c);
                }
                out
            }
            8 if v > 0xffff => {
                let h = format!("{v:08x}");
                format!("0x{}_{}", &h[..4], &h[4..])
            }
            _ => v.to_string(),
        }
    }

    /// A small operand (port, local, register): decimal or hex.
    pub fn small(&mut self, v: u32) -> String {
        if self.chance(15) {
            format!("{v:#x}")
        } else {
            v.to_string()
        }
    }

    /// A mnemonic or keyword, occasionally in upper case.
    pub fn word(&mut self, w: &str) -> String {
        if self.chance(5) {
            w.to_ascii_uppercase()
        } else {
            w.to_string()
        }
    }
}

/// Module-level facts the listing needs.
pub(crate) struct ListingEnv<'a> {
    pub copro_names: &'a [String],
}

/// Writes a segment as assembly text, `segment .X` to `ends`.
pub(crate) fn listing(seg: &SegBuilder, env: &ListingEnv<'_>, cos: &mut Cosmetic, out: &mut String) {
    let _ = writeln!(out, "{} {}", cos.word("segment"), seg.kind);
    let mut pending_label: Option<&str> = None;
    for item in &seg.items {
        match item {
            Item::Comment(c) => {
                if let Some(l) = pending_label.take() {
                    let _ = writeln!(out, "{l}:");
                }
                let _ = writeln!(out, "    ; {c}");
            }
            Item::Label(l) => {
                if let Some(prev) = pending_label.take() {
                    let _ = writeln!(out, "{prev}:");
                }
                let name = seg.labels[*l].name.as_str();
                if cos.chance(30) {
                    pending_label = Some(name);
                } else {
                    let _ = writeln!(out, "{name}:");
                }
            }
            Item::Insn { op, arg, junk } => {
                let text = format_insn(*op, arg, seg, env, cos);
                let prefix = match pending_label.take() {
                    Some(l) => format!("{l}: "),
                    None => "    ".to_string(),
                };
                let note = if *junk {
                    "    ; unreachable"
                } else if cos.chance(3) {
                    "    ; (comment)"
                } else {
                    ""
                };
                let _ = writeln!(out, "{prefix}{text}{note}");
            }
        }
    }
    if let Some(l) = pending_label.take() {
        let _ = writeln!(out, "{l}:");
    }
    let _ = writeln!(out, "{}", cos.word("ends"));
}

fn format_insn(op: Opcode, arg: &Arg, seg: &SegBuilder, env: &ListingEnv<'_>, cos: &mut Cosmetic) -> String {
    let mn = cos.word(op.mnemonic());
    let target = |t: &Target| match t {
        Target::Label(l) => seg.labels[*l].name.clone(),
        Target::Raw(d) => format!("@{d:+}"),
    };
    let mem = |m: Mem, cos: &mut Cosmetic| if m == Mem::Packet && cos.chance(20) { "packet".to_string() } else { m.name().to_string() };
    let sep = if cos.chance(20) { " " } else { ", " };
    let copro = |c: u8, cos: &mut Cosmetic| match env.copro_names.get(c as usize) {
        Some(name) if !cos.chance(10) => name.clone(),
        _ => c.to_string(),
    };
    match (op.operands(), arg) {
        (OperandKind::None, Arg::None) => mn,
        (_, Arg::Imm(v)) => format!("{mn} {}", cos.number(*v)),
        (_, Arg::Target(t)) => format!("{mn} {}", target(t)),
        (_, Arg::Port(p)) => format!("{mn} {}", cos.small(u32::from(*p))),
        (_, Arg::Local(l)) => format!("{mn} {}", cos.small(u32::from(*l))),
        (_, Arg::Depth(d)) => format!("{mn} {}", cos.small(u32::from(*d))),
        (_, Arg::Mem(m)) => format!("{mn} {}", mem(*m, cos)),
        (_, Arg::MemPair(s, d)) => {
            let s = mem(*s, cos);
            let d = mem(*d, cos);
            format!("{mn} {s}{sep}{d}")
        }
        (_, Arg::CoproReg(c, r)) => format!("{mn} {}{sep}{}", copro(*c, cos), cos.small(u32::from(*r))),
        (_, Arg::CoproOp(c, o)) => format!("{mn} {}{sep}{}", copro(*c, cos), cos.small(u32::from(*o))),
        (_, Arg::Switch(cases, default)) => {
            // The assembler sorts cases by value, so the listing may give
            // them in any order; the default may stand anywhere too.
            let mut items: Vec<String> = cases.iter().map(|(v, t)| format!("{}: {}", cos.number(*v), target(t))).collect();
            let shuffle = cos.chance(30);
            if shuffle {
                items.reverse();
            }
            let at = if cos.chance(20) { 0 } else { items.len() };
            items.insert(at, format!("default: {}", target(default)));
            let mut s = mn;
            for (i, it) in items.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                    if i % 4 == 0 && cos.chance(50) {
                        // Line continuation.
                        s.push_str(" \\\n       ");
                    }
                }
                s.push(' ');
                s.push_str(it);
            }
            s
        }
        (k, a) => unreachable!("fuzzgen bug: {k:?} with {a:?}"),
    }
}
