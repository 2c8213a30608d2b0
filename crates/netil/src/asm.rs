//! The NetIL text assembler.
//!
//! Syntax (docs/netil.md, section "Assembly syntax"): one statement per line,
//! `;` starts a comment, a line ending in `\` continues on the next one.
//! `segment .init` / `segment .push` open a segment and `ends` closes it
//! (segments do not nest and must be closed);
//! declarations (`.maxstacksize`, `.locals`, `.infosize`, `.datasize`,
//! `.ports`, `.copro NAME KIND`) may appear anywhere, once each. Labels
//! (`name:`) are local to their segment. The listing of Fig. 2 of the NetVM
//! paper assembles as printed.

use std::collections::HashMap;
use std::fmt;

use crate::insn::{encode, encoded_len, Operands, SwitchTable, MAX_SWITCH_CASES};
use crate::module::{is_ident, limits, CoproDecl, Layout, Module, SegmentKind, Var};
use crate::opcode::{Mem, Opcode, OperandKind};

/// `.maxstacksize` when a listing does not declare one.
pub const DEFAULT_MAX_STACK: u16 = 64;

/// An assembly error with its 1-based line and column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsmError {
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub col: u32,
    /// What is wrong.
    pub message: String,
}

impl AsmError {
    /// Formats as `file:line:col: error: message`.
    pub fn display_with<'a>(&'a self, file: &'a str) -> impl fmt::Display + 'a {
        struct D<'a>(&'a AsmError, &'a str);
        impl fmt::Display for D<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}:{}:{}: error: {}", self.1, self.0.line, self.0.col, self.0.message)
            }
        }
        D(self, file)
    }
}

impl fmt::Display for AsmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.message)
    }
}

impl std::error::Error for AsmError {}

/// Maps instruction offsets back to the source position they were
/// assembled from, and labels to their offsets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceMap {
    entries: HashMap<(SegmentKind, u32), (u32, u32)>,
    labels: HashMap<(SegmentKind, String), u32>,
}

impl SourceMap {
    /// The `(line, column)` of the instruction at `offset` in `seg`.
    pub fn lookup(&self, seg: SegmentKind, offset: u32) -> Option<(u32, u32)> {
        self.entries.get(&(seg, offset)).copied()
    }

    /// The byte offset label `name` of segment `seg` stands for.
    pub fn label(&self, seg: SegmentKind, name: &str) -> Option<u32> {
        self.labels.get(&(seg, name.to_string())).copied()
    }

    fn insert(&mut self, seg: SegmentKind, offset: u32, line: u32, col: u32) {
        self.entries.insert((seg, offset), (line, col));
    }
}

/// The result of assembling a listing.
#[derive(Clone, Debug)]
pub struct Assembled {
    /// The module.
    pub module: Module,
    /// Instruction offset → source position.
    pub source_map: SourceMap,
}

/// Assembles a NetIL listing.
pub fn assemble(src: &str) -> Result<Assembled, AsmError> {
    Assembler::default().run(src)
}

#[derive(Clone, Debug)]
struct Tok {
    text: String,
    col: u32,
}

/// One parsed instruction awaiting label resolution.
struct Pending {
    op: Opcode,
    args: Vec<Tok>,
    line: u32,
    col: u32,
    offset: u32,
    len: u32,
}

struct SegmentBuild {
    kind: SegmentKind,
    labels: HashMap<String, u32>,
    insns: Vec<Pending>,
    size: u32,
}

#[derive(Default)]
struct Assembler {
    module: Module,
    declared: HashMap<&'static str, u32>,
    segments: Vec<SegmentBuild>,
    open: Option<usize>,
    /// The line of the first interface declaration (where their errors point).
    interface_line: Option<u32>,
}

fn err<T>(line: u32, col: u32, message: impl Into<String>) -> Result<T, AsmError> {
    Err(AsmError { line, col, message: message.into() })
}

/// Splits a statement into tokens: identifiers/numbers/names, with `,` and
/// whitespace as separators and `:` as its own token.
fn tokenize(line: &str, base_col: u32) -> Vec<Tok> {
    let mut toks = Vec::new();
    let mut cur = String::new();
    let mut start = 0u32;
    for (i, ch) in line.char_indices() {
        let col = base_col + i as u32;
        if ch.is_whitespace() || ch == ',' || ch == ':' {
            if !cur.is_empty() {
                toks.push(Tok { text: std::mem::take(&mut cur), col: start });
            }
            if ch == ':' {
                toks.push(Tok { text: ":".into(), col });
            }
        } else {
            if cur.is_empty() {
                start = col;
            }
            cur.push(ch);
        }
    }
    if !cur.is_empty() {
        toks.push(Tok { text: cur, col: start });
    }
    toks
}

/// Parses an integer literal: decimal, `0x`, `0o`, `0b`, optional leading `-`, `_` separators.
pub fn parse_int(s: &str) -> Option<i64> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let body = body.replace('_', "");
    let lower = body.to_ascii_lowercase();
    let radix = |digits: &str, r: u32| -> Option<i64> {
        if digits.is_empty() || !digits.chars().all(|c| c.is_digit(r)) {
            return None;
        }
        i64::from_str_radix(digits, r).ok()
    };
    let v = if let Some(h) = lower.strip_prefix("0x") {
        radix(h, 16)?
    } else if let Some(b) = lower.strip_prefix("0b") {
        radix(b, 2)?
    } else if let Some(o) = lower.strip_prefix("0o") {
        radix(o, 8)?
    } else {
        if body.is_empty() || !body.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        body.parse::<i64>().ok()?
    };
    Some(if neg { -v } else { v })
}

impl Assembler {
    fn run(mut self, src: &str) -> Result<Assembled, AsmError> {
        // Join continuation lines, remembering each logical line's first physical line.
        let mut logical: Vec<(u32, String)> = Vec::new();
        let mut pending: Option<(u32, String)> = None;
        for (i, raw) in src.lines().enumerate() {
            let lineno = i as u32 + 1;
            let code = raw.split(';').next().unwrap_or("");
            let (text, cont) = match code.trim_end().strip_suffix('\\') {
                Some(t) => (t.to_string(), true),
                None => (code.to_string(), false),
            };
            let entry = match pending.take() {
                Some((l, mut acc)) => {
                    acc.push(' ');
                    acc.push_str(&text);
                    (l, acc)
                }
                None => (lineno, text),
            };
            if cont {
                pending = Some(entry);
            } else {
                logical.push(entry);
            }
        }
        if let Some(p) = pending {
            logical.push(p);
        }
        for (line, text) in &logical {
            self.statement(*line, text)?;
        }
        if let Some(open) = self.open {
            let last = logical.last().map_or(1, |l| l.0);
            return err(last, 1, format!("segment {} is not closed with `ends`", self.segments[open].kind));
        }
        self.finish()
    }

    fn statement(&mut self, line: u32, text: &str) -> Result<(), AsmError> {
        let mut toks = tokenize(text, 1);
        if toks.is_empty() {
            return Ok(());
        }
        // Label definition: IDENT ':' at the start of the statement.
        if toks.len() >= 2 && toks[1].text == ":" && toks[0].text != "default" {
            let label = toks[0].clone();
            if !is_ident(label.text.as_bytes()) {
                return err(line, label.col, format!("`{}` is not a valid label name", label.text));
            }
            let Some(si) = self.open else {
                return err(line, label.col, format!("label `{}` outside a segment", label.text));
            };
            let seg = &mut self.segments[si];
            if seg.labels.insert(label.text.clone(), seg.size).is_some() {
                return err(line, label.col, format!("label `{}` defined twice in segment {}", label.text, seg.kind));
            }
            toks.drain(..2);
            if toks.is_empty() {
                return Ok(());
            }
        }
        let head = toks.remove(0);
        let word = head.text.to_ascii_lowercase();
        match word.as_str() {
            "segment" => return self.open_segment(line, &head, &toks),
            "ends" => {
                if let Some(t) = toks.first() {
                    return err(line, t.col, "unexpected operand after `ends`");
                }
                if self.open.take().is_none() {
                    return err(line, head.col, "`ends` without an open segment");
                }
                return Ok(());
            }
            _ => {}
        }
        if word.starts_with('.') {
            return self.directive(line, &head, &word, &toks);
        }
        let Some(op) = Opcode::from_mnemonic(&word) else {
            return err(line, head.col, format!("unknown instruction `{}`", head.text));
        };
        let Some(si) = self.open else {
            return err(line, head.col, format!("instruction `{word}` outside a segment (open one with `segment .push`)"));
        };
        let len = self.operand_len(op, &toks, line, &head)?;
        let seg = &mut self.segments[si];
        let offset = seg.size;
        seg.size = match seg.size.checked_add(len).filter(|s| *s <= limits::MAX_CODE) {
            Some(s) => s,
            None => return err(line, head.col, format!("segment {} exceeds {} bytes", seg.kind, limits::MAX_CODE)),
        };
        seg.insns.push(Pending { op, args: toks, line, col: head.col, offset, len });
        Ok(())
    }

    fn open_segment(&mut self, line: u32, head: &Tok, toks: &[Tok]) -> Result<(), AsmError> {
        let Some(name) = toks.first() else {
            return err(line, head.col, "`segment` needs a name: `.init` or `.push`");
        };
        if let Some(extra) = toks.get(1) {
            return err(line, extra.col, format!("unexpected `{}` after the segment name", extra.text));
        }
        let kind = match name.text.as_str() {
            ".init" => SegmentKind::Init,
            ".push" => SegmentKind::Push,
            other => return err(line, name.col, format!("unknown segment `{other}` (expected `.init` or `.push`)")),
        };
        if let Some(open) = self.open {
            let k = self.segments[open].kind;
            return err(line, head.col, format!("segment {k} is still open: close it with `ends` before opening {kind}"));
        }
        if self.segments.iter().any(|s| s.kind == kind) {
            return err(line, name.col, format!("segment {kind} defined twice"));
        }
        self.segments.push(SegmentBuild { kind, labels: HashMap::new(), insns: Vec::new(), size: 0 });
        self.open = Some(self.segments.len() - 1);
        Ok(())
    }

    fn directive(&mut self, line: u32, head: &Tok, word: &str, toks: &[Tok]) -> Result<(), AsmError> {
        let key: &'static str = match word {
            ".maxstacksize" => ".maxstacksize",
            ".locals" => ".locals",
            ".infosize" => ".infosize",
            ".datasize" => ".datasize",
            ".ports" => ".ports",
            ".copro" => ".copro",
            ".inport" | ".outport" | ".arg" | ".global" | ".layout" => return self.interface(line, head, word, toks),
            _ => return err(line, head.col, format!("unknown directive `{}`", head.text)),
        };
        if key == ".copro" {
            if toks.len() != 2 {
                return err(line, head.col, "`.copro` takes a name and a kind: `.copro NAME KIND`");
            }
            for t in toks {
                if !is_ident(t.text.as_bytes()) || t.text.len() > limits::MAX_NAME {
                    return err(line, t.col, format!("`{}` is not an identifier of at most {} characters", t.text, limits::MAX_NAME));
                }
            }
            if self.module.copros.iter().any(|c| c.name == toks[0].text) {
                return err(line, toks[0].col, format!("coprocessor `{}` declared twice", toks[0].text));
            }
            if self.module.copros.len() >= limits::MAX_COPROS as usize {
                return err(line, head.col, format!("more than {} coprocessors", limits::MAX_COPROS));
            }
            self.module.copros.push(CoproDecl { name: toks[0].text.clone(), kind: toks[1].text.clone() });
            return Ok(());
        }
        let [arg] = toks else {
            return err(line, head.col, format!("`{key}` takes exactly one number"));
        };
        if let Some(prev) = self.declared.insert(key, line) {
            return err(line, head.col, format!("`{key}` declared twice (first on line {prev})"));
        }
        let max: u64 = match key {
            ".maxstacksize" => limits::MAX_STACK.into(),
            ".locals" => limits::MAX_LOCALS.into(),
            ".infosize" => limits::MAX_INFO_SIZE.into(),
            ".datasize" => limits::MAX_DATA_SIZE.into(),
            _ => limits::MAX_PORTS.into(),
        };
        let v = match parse_int(&arg.text) {
            Some(v) if v >= 0 && v as u64 <= max => v as u32,
            Some(_) => return err(line, arg.col, format!("`{key}` must be between 0 and {max}")),
            None => return err(line, arg.col, format!("expected a number, found `{}`", arg.text)),
        };
        match key {
            ".maxstacksize" => self.module.max_stack = v as u16,
            ".locals" => self.module.locals = v as u16,
            ".infosize" => self.module.info_size = v,
            ".datasize" => self.module.data_size = v,
            _ => self.module.out_ports = v as u16,
        }
        Ok(())
    }

    /// A binding-interface declaration (`.inport`, `.outport`, `.arg`,
    /// `.global`, `.layout`); checked against ports and data memory once the
    /// listing is read ([`Interface::check`]).
    fn interface(&mut self, line: u32, head: &Tok, word: &str, toks: &[Tok]) -> Result<(), AsmError> {
        let name = |t: &Tok| -> Result<String, AsmError> {
            if is_ident(t.text.as_bytes()) && t.text.len() <= limits::MAX_NAME {
                Ok(t.text.clone())
            } else {
                err(line, t.col, format!("`{}` is not an identifier of at most {} characters", t.text, limits::MAX_NAME))
            }
        };
        let num = |t: &Tok, max: u64| -> Result<u32, AsmError> {
            match parse_int(&t.text) {
                Some(v) if v >= 0 && v as u64 <= max => Ok(v as u32),
                Some(_) => err(line, t.col, format!("`{}` out of range 0..={max}", t.text)),
                None => err(line, t.col, format!("expected a number, found `{}`", t.text)),
            }
        };
        let i = &mut self.module.interface;
        if i.len() >= limits::MAX_INTERFACE {
            return err(line, head.col, format!("more than {} interface declarations", limits::MAX_INTERFACE));
        }
        match (word, toks) {
            (".inport" | ".outport", [n, p]) => {
                let entry = (name(n)?, num(p, u16::MAX.into())? as u16);
                if word == ".inport" { &mut i.inputs } else { &mut i.outputs }.push(entry);
            }
            (".arg" | ".global", [n, off, size]) => {
                let v = Var { name: name(n)?, offset: num(off, u32::MAX.into())?, size: num(size, 8)? };
                if word == ".arg" { &mut i.args } else { &mut i.globals }.push(v);
            }
            (".layout", [n, version, rest @ ..]) => {
                if i.layout.is_some() {
                    return err(line, head.col, "`.layout` declared twice");
                }
                let accepts = match rest {
                    [] => Vec::new(),
                    [kw, vs @ ..] if kw.text == "accepts" && !vs.is_empty() => {
                        vs.iter().map(|v| num(v, u32::MAX.into())).collect::<Result<_, _>>()?
                    }
                    [t, ..] => return err(line, t.col, "expected `accepts V...` after the layout's version"),
                };
                i.layout = Some(Layout { name: name(n)?, version: num(version, u32::MAX.into())?, accepts });
            }
            _ => {
                let form = match word {
                    ".inport" => ".inport NAME PORT",
                    ".outport" => ".outport NAME PORT",
                    ".arg" => ".arg NAME OFFSET SIZE",
                    ".global" => ".global NAME OFFSET SIZE",
                    _ => ".layout NAME VERSION [accepts V...]",
                };
                return err(line, head.col, format!("expected `{form}`"));
            }
        }
        self.interface_line.get_or_insert(line);
        Ok(())
    }

    /// Checks the operand count and returns the encoded length (pass 1).
    fn operand_len(&self, op: Opcode, toks: &[Tok], line: u32, head: &Tok) -> Result<u32, AsmError> {
        let want = match op.operands() {
            OperandKind::None => 0,
            OperandKind::MemPair | OperandKind::CoproReg | OperandKind::CoproOp => 2,
            OperandKind::Switch => {
                let cases = parse_switch_items(toks, line, head)?.0.len();
                if cases as u32 > MAX_SWITCH_CASES {
                    return err(line, head.col, format!("switch has {cases} cases (at most {MAX_SWITCH_CASES})"));
                }
                return Ok(1 + 8 + 8 * cases as u32);
            }
            _ => 1,
        };
        if toks.len() != want {
            let col = toks.get(want).map_or(head.col, |t| t.col);
            return err(
                line,
                col,
                format!("`{}` takes {want} operand{}, found {}", op.mnemonic(), if want == 1 { "" } else { "s" }, toks.len()),
            );
        }
        Ok(1 + op.operands().fixed_size().unwrap_or(0) as u32)
    }

    fn finish(mut self) -> Result<Assembled, AsmError> {
        let mut source_map = SourceMap::default();
        let mut max_port: Option<u16> = None;
        let segments = std::mem::take(&mut self.segments);
        for seg in &segments {
            for (name, &offset) in &seg.labels {
                source_map.labels.insert((seg.kind, name.clone()), offset);
            }
            let mut code = Vec::with_capacity(seg.size as usize);
            for p in &seg.insns {
                let operands = self.resolve(seg, p)?;
                if let Operands::Port(port) = operands {
                    max_port = Some(max_port.map_or(port, |m| m.max(port)));
                }
                debug_assert_eq!(encoded_len(p.op, &operands), p.len);
                encode(p.op, &operands, p.offset, &mut code).map_err(|e| AsmError { line: p.line, col: p.col, message: e.to_string() })?;
                source_map.insert(seg.kind, p.offset, p.line, p.col);
            }
            match seg.kind {
                SegmentKind::Init => self.module.init = Some(code),
                SegmentKind::Push => self.module.push = Some(code),
            }
        }
        if !self.declared.contains_key(".maxstacksize") {
            self.module.max_stack = DEFAULT_MAX_STACK;
        }
        if !self.declared.contains_key(".ports") {
            self.module.out_ports = max_port.map_or(0, |p| p.saturating_add(1));
        }
        if let Err(message) = self.module.interface.check(self.module.out_ports, self.module.data_size) {
            return Err(AsmError { line: self.interface_line.unwrap_or(1), col: 1, message });
        }
        Ok(Assembled { module: self.module, source_map })
    }

    fn resolve(&self, seg: &SegmentBuild, p: &Pending) -> Result<Operands, AsmError> {
        let line = p.line;
        let num = |t: &Tok, lo: i64, hi: i64, what: &str| -> Result<i64, AsmError> {
            match parse_int(&t.text) {
                Some(v) if v >= lo && v <= hi => Ok(v),
                Some(_) => err(line, t.col, format!("{what} `{}` out of range {lo}..={hi}", t.text)),
                None => err(line, t.col, format!("expected {what}, found `{}`", t.text)),
            }
        };
        let target = |t: &Tok| -> Result<i64, AsmError> {
            if let Some(rel) = t.text.strip_prefix('@') {
                return match parse_int(rel) {
                    Some(r) if i32::try_from(r).is_ok() => Ok(i64::from(p.offset) + i64::from(p.len) + r),
                    _ => err(line, t.col, format!("bad relative target `{}`", t.text)),
                };
            }
            match seg.labels.get(&t.text) {
                Some(off) => Ok(i64::from(*off)),
                None => err(line, t.col, format!("undefined label `{}` in segment {}", t.text, seg.kind)),
            }
        };
        let mem = |t: &Tok| {
            Mem::from_name(&t.text).map_or_else(|| err(line, t.col, format!("expected a memory (pkt, info, data), found `{}`", t.text)), Ok)
        };
        let copro = |t: &Tok| -> Result<u8, AsmError> {
            if let Some(i) = self.module.copros.iter().position(|c| c.name == t.text) {
                return Ok(i as u8);
            }
            match parse_int(&t.text) {
                Some(v) if (0..=255).contains(&v) => Ok(v as u8),
                _ => err(line, t.col, format!("unknown coprocessor `{}` (declare it with `.copro {} KIND`)", t.text, t.text)),
            }
        };
        let a = &p.args;
        Ok(match p.op.operands() {
            OperandKind::None => Operands::None,
            OperandKind::Imm32 => Operands::Imm(num(&a[0], i64::from(i32::MIN), i64::from(u32::MAX), "a 32-bit value")? as u32),
            OperandKind::Target => Operands::Target(target(&a[0])?),
            // Any 16-bit port encodes; the verifier checks it against `.ports`.
            OperandKind::Port => Operands::Port(num(&a[0], 0, 65535, "a port number")? as u16),
            OperandKind::Local => Operands::Local(num(&a[0], 0, 65535, "a local index")? as u16),
            OperandKind::Depth => Operands::Depth(num(&a[0], 0, 255, "a stack depth")? as u8),
            OperandKind::Mem => Operands::Mem(mem(&a[0])?),
            OperandKind::MemPair => Operands::MemPair(mem(&a[0])?, mem(&a[1])?),
            OperandKind::CoproReg => Operands::CoproReg { copro: copro(&a[0])?, reg: num(&a[1], 0, 255, "a register number")? as u8 },
            OperandKind::CoproOp => Operands::CoproOp { copro: copro(&a[0])?, op: num(&a[1], 0, 255, "an operation number")? as u8 },
            OperandKind::Switch => {
                let (items, default) = parse_switch_items(a, line, &Tok { text: "switch".into(), col: p.col })?;
                // Cases may be written in any order; the encoding keeps them
                // sorted by value (the verifier requires strictly ascending).
                let mut cases: Vec<(u32, i64, u32)> = Vec::with_capacity(items.len());
                for (v, l) in items {
                    let value = num(&v, i64::from(i32::MIN), i64::from(u32::MAX), "a case value")? as u32;
                    cases.push((value, target(&l)?, v.col));
                }
                cases.sort_by_key(|c| c.0);
                if let Some(w) = cases.windows(2).find(|w| w[0].0 == w[1].0) {
                    let col = w[0].2.max(w[1].2);
                    return err(line, col, format!("switch has two cases for value {}", w[0].0));
                }
                Operands::Switch(SwitchTable { default: target(&default)?, cases: cases.into_iter().map(|c| (c.0, c.1)).collect() })
            }
        })
    }
}

/// Parses `KEY : LABEL` items of a switch; returns the cases and the default label.
fn parse_switch_items(toks: &[Tok], line: u32, head: &Tok) -> Result<(Vec<(Tok, Tok)>, Tok), AsmError> {
    let mut cases = Vec::new();
    let mut default = None;
    let mut i = 0;
    while i < toks.len() {
        let (Some(k), Some(c), Some(l)) = (toks.get(i), toks.get(i + 1), toks.get(i + 2)) else {
            return err(line, toks[i].col, "switch items are `VALUE: LABEL` or `default: LABEL`");
        };
        if c.text != ":" || l.text == ":" {
            return err(line, c.col, "switch items are `VALUE: LABEL` or `default: LABEL`");
        }
        if k.text == "default" {
            if default.is_some() {
                return err(line, k.col, "switch has two defaults");
            }
            default = Some(l.clone());
        } else {
            cases.push((k.clone(), l.clone()));
        }
        i += 3;
    }
    match default {
        Some(d) => Ok((cases, d)),
        None => err(line, head.col, "switch needs a `default: LABEL` item"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub const FIG2: &str = "
; Code Segment
segment .push
.maxstacksize 10      ; define the maximum stack depth
    pop                ; discard the \"calling\" port
    push 12            ; push the ethertype offset on the stack
    upload.16         ; load 2 bytes at previous offset from packet memory
    push 0x800        ; push 0x800 (i.e., ip) on the stack
    jcmp.neq discard  ; if not equals jump to discard, otherwise...
    ret 1              ; return 1
discard:
    ret 0              ; return 0
ends
";

    #[test]
    fn fig2_assembles() {
        let a = assemble(FIG2).unwrap();
        assert_eq!(a.module.max_stack, 10);
        assert_eq!(a.module.out_ports, 2);
        let code = a.module.push.unwrap();
        let insns = crate::insn::decode(&code).unwrap();
        assert_eq!(insns.len(), 7);
        assert_eq!(insns[4].operands, Operands::Target(i64::from(insns[6].offset)));
        assert_eq!(a.source_map.lookup(SegmentKind::Push, 0), Some((5, 5)));
    }

    #[test]
    fn errors_have_positions() {
        let e = assemble("segment .push\n  pusj 1\nends").unwrap_err();
        assert_eq!((e.line, e.col), (2, 3));
        let e = assemble("segment .push\n  jump nowhere\nends").unwrap_err();
        assert_eq!((e.line, e.col), (2, 8));
        assert!(e.message.contains("undefined label"));
        let e = assemble("push 1").unwrap_err();
        assert!(e.message.contains("outside a segment"));
    }

    #[test]
    fn switch_syntax() {
        let a = assemble("segment .push\n switch 6: a, 17: b, \\\n default: c\na: drop\nb: drop\nc: ret 0\nends").unwrap();
        assert!(assemble("segment .push\n drop\n").unwrap_err().message.contains("not closed"));
        assert!(assemble("segment .init\n exit\nsegment .push\n drop\nends").unwrap_err().message.contains("still open"));
        assert!(assemble("segment .push\n push 0x-5\n drop\nends").is_err());
        let insns = crate::insn::decode(a.module.push.as_ref().unwrap()).unwrap();
        match &insns[0].operands {
            Operands::Switch(s) => {
                assert_eq!(s.cases.len(), 2);
                assert_eq!(s.default, i64::from(insns[3].offset));
            }
            o => panic!("{o:?}"),
        }
    }
}
