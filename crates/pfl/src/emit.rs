//! NetIL assembly text from a decision graph. A filter is one NetPE: its
//! push handler ends with `ret 1` (match) or `ret 0` (no match).
//!
//! - Tests are laid out so that the false successor falls through where it can.
//! - A chain of equality tests of one value against constants (`ethertype
//!   == 0x800`, else `== 0x86dd`, else …) becomes one `switch`.
//! - Packets shorter than every accepting path needs are rejected by one
//!   length check at the start (the JIT then drops the bounds checks that
//!   check covers).
//! - Computed offsets keep libpcap's semantics: `var + k` must not wrap.

use crate::cfg::{load_end, Graph, Node, Test, ACCEPT, REJECT};
use crate::ir::{max_value, Val};
use crate::parser::{BinOp, RelOp};
use std::collections::{HashMap, HashSet};
use std::fmt::Write;

struct Emitter {
    out: String,
    depth: u32,
    max_depth: u32,
    locals: u32,
    labels: u32,
    /// Stack depths at which a reject stub is needed (other than 0).
    reject_depths: Vec<u32>,
    /// Local slots of computed header offsets (IPv4 header length…).
    slots: HashMap<Val, u32>,
    /// The computed offsets already in their slots on every path to here.
    avail: HashSet<Val>,
    /// A captured length every path to here has checked or loaded up to.
    guaranteed: u32,
}

impl Emitter {
    fn line(&mut self, s: &str, effect: i32) {
        let _ = writeln!(self.out, "    {s}");
        self.depth = (self.depth as i32 + effect) as u32;
        self.max_depth = self.max_depth.max(self.depth);
    }

    fn label(&mut self) -> String {
        self.labels += 1;
        format!("v{}", self.labels)
    }

    fn reject_label(&mut self) -> String {
        if self.depth == 0 {
            return "reject".into();
        }
        if !self.reject_depths.contains(&self.depth) {
            self.reject_depths.push(self.depth);
        }
        format!("reject_{}", self.depth)
    }

    fn val(&mut self, v: &Val) {
        match v {
            Val::Const(c) => self.line(&format!("push {c:#x}"), 1),
            Val::WireLen => self.line("wirelen", 1),
            Val::Load { var, k, size } => {
                let op = format!("upload.{}", 8 * *size as u32);
                match var {
                    None => {
                        // A packet too short for the load is rejected, not faulted.
                        let end = k.saturating_add(*size as u32);
                        if end > self.guaranteed {
                            self.line("pktlen", 1);
                            self.line(&format!("push {end}"), 1);
                            self.depth -= 2;
                            let rej = self.reject_label();
                            self.depth += 2;
                            self.line(&format!("jcmp.lt {rej}"), -2);
                            self.guaranteed = end;
                        }
                        self.line(&format!("push {k}"), 1);
                    }
                    Some(x) => {
                        match self.slots.get(&**x).copied() {
                            Some(slot) if self.avail.contains(&**x) => self.line(&format!("locload {slot}"), 1),
                            Some(slot) => {
                                self.val(x);
                                self.line("dup", 1);
                                self.line(&format!("locstore {slot}"), -1);
                                self.avail.insert((**x).clone());
                            }
                            None => self.val(x),
                        }
                        if *k != 0 {
                            let safe = max_value(x).is_some_and(|m| m.checked_add(*k).is_some());
                            if !safe {
                                // libpcap rejects when var + k overflows.
                                self.line("dup", 1);
                                self.line(&format!("push {:#x}", u32::MAX - *k), 1);
                                self.depth -= 2;
                                let rej = self.reject_label();
                                self.depth += 2;
                                self.line(&format!("jcmp.gt {rej}"), -2);
                            }
                            self.line(&format!("push {k}"), 1);
                            self.line("add", -1);
                        }
                        // Reject, not fault, when the packet is too short
                        // (where the end cannot overflow; else the load's own check faults).
                        let bounded = max_value(x).and_then(|m| m.checked_add(*k)).and_then(|m| m.checked_add(*size as u32)).is_some();
                        if bounded {
                            let rej = self.reject_label();
                            self.line("dup", 1);
                            self.line(&format!("push {size}"), 1);
                            self.line("add", -1);
                            self.line("pktlen", 1);
                            self.line(&format!("jcmp.gt {rej}"), -2);
                        }
                    }
                }
                self.line(&op, 0);
            }
            Val::Neg(x) => {
                self.val(x);
                self.line("neg", 0);
            }
            Val::Bits(x, m) => {
                self.val(x);
                self.line(&format!("push {m:#x}"), 1);
                self.line("and", -1);
            }
            Val::Bin(op, a, b) => {
                self.val(a);
                self.val(b);
                let name = match op {
                    BinOp::Add => "add",
                    BinOp::Sub => "sub",
                    BinOp::Mul => "mul",
                    BinOp::Div => "div",
                    BinOp::Mod => "mod",
                    BinOp::And => "and",
                    BinOp::Or => "or",
                    BinOp::Xor => "xor",
                    BinOp::Shl => "shl",
                    BinOp::Shr => "shr",
                };
                let counted = matches!(op, BinOp::Shl | BinOp::Shr) && !matches!(**b, Val::Const(c) if c < 32);
                if counted {
                    // libpcap: a shift by 32 or more gives 0 (NetIL shifts by the count mod 32).
                    let big = self.label();
                    let done = self.label();
                    self.line("dup", 1);
                    self.line("push 32", 1);
                    self.line(&format!("jcmp.ge {big}"), -2);
                    self.line(name, -1);
                    self.line(&format!("jump {done}"), 0);
                    let _ = writeln!(self.out, "{big}:");
                    self.depth += 1;
                    self.line("pop", -1);
                    self.line("pop", -1);
                    self.line("push 0", 1);
                    let _ = writeln!(self.out, "{done}:");
                } else {
                    self.line(name, -1);
                }
            }
        }
    }
}

fn jcmp(op: RelOp, negate: bool) -> &'static str {
    let op = if negate {
        match op {
            RelOp::Eq => RelOp::Ne,
            RelOp::Ne => RelOp::Eq,
            RelOp::Lt => RelOp::Ge,
            RelOp::Le => RelOp::Gt,
            RelOp::Gt => RelOp::Le,
            RelOp::Ge => RelOp::Lt,
        }
    } else {
        op
    };
    match op {
        RelOp::Eq => "jcmp.eq",
        RelOp::Ne => "jcmp.neq",
        RelOp::Lt => "jcmp.lt",
        RelOp::Le => "jcmp.le",
        RelOp::Gt => "jcmp.gt",
        RelOp::Ge => "jcmp.ge",
    }
}

fn target(n: usize) -> String {
    match n {
        ACCEPT => "accept".into(),
        REJECT => "reject".into(),
        n => format!("n{n}"),
    }
}

/// A chain of equality tests of one value against constants, emitted as one `switch`.
struct SwitchChain {
    /// The value tested.
    value: Val,
    /// (constant, successor when equal), in chain order.
    cases: Vec<(u32, usize)>,
    /// The successor when no constant is equal.
    default: usize,
    /// The chain's nodes, its head first.
    members: Vec<usize>,
}

/// The equality chain starting at `n`, if it has two cases or more.
fn switch_chain(g: &Graph, preds: &[usize], n: usize) -> Option<SwitchChain> {
    let Node::Test { test: Test { op: RelOp::Eq, a, b: Val::Const(c) }, t, f } = &g.nodes[n] else { return None };
    let mut cases = vec![(*c, *t)];
    let mut members = vec![n];
    let mut cur = *f;
    while let Node::Test { test: Test { op: RelOp::Eq, a: a2, b: Val::Const(c2) }, t: t2, f: f2 } = &g.nodes[cur] {
        if a2 != a || preds[cur] != 1 {
            break;
        }
        if !cases.iter().any(|(x, _)| x == c2) {
            cases.push((*c2, *t2));
        }
        members.push(cur);
        cur = *f2;
    }
    if cases.len() < 2 {
        return None;
    }
    Some(SwitchChain { value: a.clone(), cases, default: cur, members })
}

/// NetIL assembly for `g`; `expr` goes into the header comment.
pub fn emit(g: &Graph, expr: &str) -> String {
    let mut e = Emitter {
        out: String::new(),
        depth: 0,
        max_depth: 1,
        locals: 0,
        labels: 0,
        reject_depths: Vec::new(),
        slots: HashMap::new(),
        avail: HashSet::new(),
        guaranteed: 0,
    };
    // Computed offsets: each gets a local, written by the first test that
    // needs it on a path and read back by the tests after it on every path.
    let avail_in = offsets_available(g, &mut e.slots);
    e.locals = e.slots.len() as u32;
    let preds = g.preds();
    let need = g.need();
    let guaranteed_in = length_guaranteed(g, need[g.entry]);
    // Layout: each node followed by its false successor where possible.
    let mut placed = vec![false; g.nodes.len()];
    let mut absorbed = vec![false; g.nodes.len()];
    let mut layout = Vec::new();
    let mut stack = vec![g.entry];
    while let Some(n) = stack.pop() {
        if n == ACCEPT || n == REJECT || placed[n] {
            continue;
        }
        placed[n] = true;
        layout.push(n);
        match switch_chain(g, &preds, n) {
            Some(SwitchChain { cases, default, members, .. }) => {
                for m in &members[1..] {
                    absorbed[*m] = true;
                    placed[*m] = true;
                }
                for (_, t) in cases.iter().rev() {
                    stack.push(*t);
                }
                stack.push(default);
            }
            None => {
                if let Node::Test { t, f, .. } = &g.nodes[n] {
                    stack.push(*t);
                    stack.push(*f);
                }
            }
        }
    }

    let comment: String = expr.replace('\n', " ");
    let _ = writeln!(e.out, "; netvm filter: {comment}");
    let _ = writeln!(e.out, "; port 1: match, port 0: no match");
    let header_at = e.out.len();
    let _ = writeln!(e.out, "segment .push");
    e.depth = 1;
    e.line("pop", -1);
    let entry_need = need[g.entry];
    if g.entry == ACCEPT {
        e.line("ret 1", 0);
    } else if entry_need == u32::MAX {
        e.line("ret 0", 0);
    } else {
        if entry_need > 0 {
            e.line("pktlen", 1);
            e.line(&format!("push {entry_need}"), 1);
            e.line("jcmp.lt reject", -2);
        }
        for (i, &n) in layout.iter().enumerate() {
            let next = layout.get(i + 1).copied();
            let _ = writeln!(e.out, "{}:", target(n));
            let goto = |e: &mut Emitter, to: usize| match to {
                ACCEPT => e.line("ret 1", 0),
                REJECT => e.line("ret 0", 0),
                _ if Some(to) == next => {}
                _ => e.line(&format!("jump {}", target(to)), 0),
            };
            e.avail = avail_in.get(&n).cloned().unwrap_or_default();
            e.guaranteed = guaranteed_in.get(&n).copied().unwrap_or(0);
            if let Some(SwitchChain { value: v, mut cases, default, .. }) = switch_chain(g, &preds, n) {
                e.val(&v);
                cases.sort_by_key(|(c, _)| *c);
                let arms: Vec<String> = cases.iter().map(|(c, t)| format!("{c:#x}: {}", target(*t))).collect();
                e.line(&format!("switch {}, default: {}", arms.join(", "), target(default)), -1);
                continue;
            }
            let Node::Test { test, t, f } = &g.nodes[n] else { continue };
            let (t, f) = (*t, *f);
            let zero_test = matches!(test.b, Val::Const(0)) && matches!(test.op, RelOp::Eq | RelOp::Ne);
            e.val(&test.a);
            if !zero_test {
                e.val(&test.b);
            }
            let pops = if zero_test { -1 } else { -2 };
            // Jump on the condition to t, or on its negation to f; fall through or jump to the other.
            let (on_true, j) = if Some(f) == next || (Some(t) != next && f == REJECT && t != ACCEPT) { (true, t) } else { (false, f) };
            let mnemonic = if zero_test {
                // `a != 0` is jnz; `a == 0` is jz.
                let jump_if_nonzero = (test.op == RelOp::Ne) == on_true;
                if jump_if_nonzero {
                    "jnz"
                } else {
                    "jz"
                }
            } else {
                jcmp(test.op, !on_true)
            };
            e.line(&format!("{mnemonic} {}", target(j)), pops);
            goto(&mut e, if on_true { f } else { t });
        }
    }
    // The shared exits, where something jumps to them.
    let jumps_to = |out: &str, label: &str| out.lines().any(|l| l.trim_start().split([' ', ',']).any(|w| w == label));
    if jumps_to(&e.out, "accept") {
        let _ = writeln!(e.out, "accept:");
        e.line("ret 1", 0);
    }
    if jumps_to(&e.out, "reject") {
        let _ = writeln!(e.out, "reject:");
        e.line("ret 0", 0);
    }
    for d in e.reject_depths.clone() {
        let _ = writeln!(e.out, "reject_{d}:");
        e.line("ret 0", 0);
    }
    let _ = writeln!(e.out, "ends");
    let mut header = format!(".maxstacksize {}\n", e.max_depth.max(2));
    if e.locals > 0 {
        let _ = writeln!(header, ".locals {}", e.locals);
    }
    e.out.insert_str(header_at, &header);
    e.out
}

/// The computed offsets (`var` of loads) a test computes.
fn offsets_of(v: &Val, out: &mut Vec<Val>) {
    match v {
        Val::Load { var: Some(x), .. } => {
            offsets_of(x, out);
            if !out.contains(x) {
                out.push((**x).clone());
            }
        }
        Val::Bin(_, a, b) => {
            offsets_of(a, out);
            offsets_of(b, out);
        }
        Val::Neg(a) | Val::Bits(a, _) => offsets_of(a, out),
        _ => {}
    }
}

/// For each node, the computed offsets that every path to it has stored
/// (forward availability over the DAG); assigns slots to those used twice or more.
fn offsets_available(g: &Graph, slots: &mut HashMap<Val, u32>) -> HashMap<usize, HashSet<Val>> {
    let order = g.order();
    let mut uses: HashMap<Val, u32> = HashMap::new();
    let mut computed: HashMap<usize, Vec<Val>> = HashMap::new();
    for &n in &order {
        if let Node::Test { test, .. } = &g.nodes[n] {
            let mut v = Vec::new();
            offsets_of(&test.a, &mut v);
            offsets_of(&test.b, &mut v);
            for x in &v {
                *uses.entry(x.clone()).or_default() += 1;
            }
            computed.insert(n, v);
        }
    }
    let mut reused: Vec<&Val> = uses.iter().filter(|(_, n)| **n > 1).map(|(v, _)| v).collect();
    reused.sort_by_key(|v| format!("{v:?}"));
    for v in reused {
        let k = slots.len() as u32;
        slots.insert(v.clone(), k);
    }
    let mut avail_in: HashMap<usize, HashSet<Val>> = HashMap::new();
    avail_in.insert(g.entry, HashSet::new());
    for &n in &order {
        let Node::Test { t, f, .. } = &g.nodes[n] else { continue };
        let mut out = avail_in.get(&n).cloned().unwrap_or_default();
        out.extend(computed[&n].iter().filter(|v| slots.contains_key(*v)).cloned());
        for s in [*t, *f] {
            match avail_in.get_mut(&s) {
                None => {
                    avail_in.insert(s, out.clone());
                }
                Some(old) => old.retain(|v| out.contains(v)),
            }
        }
    }
    avail_in
}

/// For each node, a captured length every path to it has checked (the
/// entry check) or loaded up to (a test that read bytes up to `end` and
/// went on proves `pktlen >= end`).
fn length_guaranteed(g: &Graph, entry: u32) -> HashMap<usize, u32> {
    let mut gin: HashMap<usize, u32> = HashMap::new();
    gin.insert(g.entry, if entry == u32::MAX { 0 } else { entry });
    for n in g.order() {
        let Node::Test { test, t, f } = &g.nodes[n] else { continue };
        let out = gin[&n].max(load_end(&test.a)).max(load_end(&test.b));
        for s in [*t, *f] {
            let e = gin.entry(s).or_insert(out);
            *e = (*e).min(out);
        }
    }
    gin
}
