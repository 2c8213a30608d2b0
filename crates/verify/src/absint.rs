//! The abstract domain: operand stacks of [`Val`]s stored as persistent
//! linked lists in an [`Arena`], and constant folding.
//!
//! A stack is the index of its top node; node 0 is the empty stack. Popping
//! follows a link, pushing appends one node, and stacks that share a bottom
//! share its nodes, so a state per instruction costs one index however deep
//! the stack is, and comparing or merging two stacks stops at their first
//! shared node.

use netil::{Insn, Opcode, Operands};

/// An abstract 32-bit value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Val {
    /// Any value.
    Unknown,
    /// Exactly this value on every path.
    Const(u32),
}

impl Val {
    pub(crate) fn konst(self) -> Option<u32> {
        match self {
            Val::Const(v) => Some(v),
            Val::Unknown => None,
        }
    }

    /// Least upper bound: equal values stay, different ones become Unknown.
    fn join(self, other: Val) -> Val {
        if self == other {
            self
        } else {
            Val::Unknown
        }
    }
}

/// A stack: the index of its top node in the [`Arena`].
pub(crate) type Stack = usize;

/// The empty stack.
pub(crate) const EMPTY: Stack = 0;
/// "No state yet" (instruction not reached).
pub(crate) const NONE: Stack = usize::MAX;
/// A merge rebuilds at most this many top values; deeper values that would
/// need rebuilding become Unknown (bounds the memory a merge costs).
pub(crate) const MAX_REBUILD: usize = 64;

#[derive(Clone, Copy)]
struct Node {
    val: Val,
    next: Stack,
}

/// Storage for all stacks of one segment's analysis.
pub(crate) struct Arena {
    nodes: Vec<Node>,
    /// `unknown[d]`: a stack of `d` Unknown values (built on demand).
    unknown: Vec<Stack>,
    /// Scratch buffer for [`Arena::merge`].
    scratch: Vec<(Stack, Val, Val)>,
}

impl Arena {
    pub(crate) fn new() -> Arena {
        Arena { nodes: vec![Node { val: Val::Unknown, next: EMPTY }], unknown: vec![EMPTY], scratch: Vec::new() }
    }

    pub(crate) fn push(&mut self, s: Stack, val: Val) -> Stack {
        self.nodes.push(Node { val, next: s });
        self.nodes.len() - 1
    }

    /// The stack without its top value (the empty stack stays empty).
    pub(crate) fn pop(&self, s: Stack) -> Stack {
        self.nodes[s].next
    }

    /// The top value (Unknown on the empty stack).
    pub(crate) fn top(&self, s: Stack) -> Val {
        self.nodes[s].val
    }

    /// The value `n` below the top (0 = top); Unknown past the bottom.
    pub(crate) fn nth(&self, mut s: Stack, n: usize) -> Val {
        for _ in 0..n {
            if s == EMPTY {
                return Val::Unknown;
            }
            s = self.nodes[s].next;
        }
        self.nodes[s].val
    }

    fn popn(&self, mut s: Stack, n: u32) -> Stack {
        for _ in 0..n {
            s = self.nodes[s].next;
        }
        s
    }

    /// A stack of `depth` Unknown values, shared by everyone who asks.
    pub(crate) fn all_unknown(&mut self, depth: usize) -> Stack {
        while self.unknown.len() <= depth {
            let below = *self.unknown.last().expect("unknown[0] exists");
            let s = self.push(below, Val::Unknown);
            self.unknown.push(s);
        }
        self.unknown[depth]
    }

    /// Merges `incoming` into `old`, both of `depth` values. Returns the
    /// merged stack if it differs from `old`, `None` if `old` already covers
    /// `incoming`. Costs the length of the prefix the two do not share; builds
    /// at most [`MAX_REBUILD`] new nodes (values deeper than that which would
    /// need rebuilding become Unknown).
    pub(crate) fn merge(&mut self, old: Stack, incoming: Stack, depth: usize) -> Option<Stack> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let (mut a, mut b) = (old, incoming);
        // Both stacks have the same depth, so they meet at the latest at EMPTY.
        while a != b && a != EMPTY && b != EMPTY {
            let (na, nb) = (self.nodes[a], self.nodes[b]);
            scratch.push((a, na.val, nb.val));
            a = na.next;
            b = nb.next;
        }
        // Deepest position where the join differs from `old`.
        let result = match scratch.iter().rposition(|&(_, va, vb)| va.join(vb) != va) {
            None => None,
            // `incoming` is above `old` everywhere: it is the join.
            Some(_) if scratch.iter().all(|&(_, va, vb)| va.join(vb) == vb) => Some(incoming),
            Some(k) if k < MAX_REBUILD => {
                let mut s = self.nodes[scratch[k].0].next;
                for &(_, va, vb) in scratch[..=k].iter().rev() {
                    s = self.push(s, va.join(vb));
                }
                Some(s)
            }
            Some(_) => {
                let mut s = self.all_unknown(depth.saturating_sub(MAX_REBUILD));
                for &(_, va, vb) in scratch[..MAX_REBUILD].iter().rev() {
                    s = self.push(s, va.join(vb));
                }
                Some(s)
            }
        };
        self.scratch = scratch;
        result
    }

    /// Formats a stack of `depth` values bottom first, top last: `[?, 12]`.
    /// Only the top 16 values are shown.
    pub(crate) fn show(&self, s: Stack, depth: usize) -> String {
        const SHOWN: usize = 16;
        let mut vals = Vec::new();
        let mut p = s;
        while vals.len() < depth.min(SHOWN) && p != EMPTY {
            vals.push(self.nodes[p].val);
            p = self.nodes[p].next;
        }
        let mut out = String::from("[");
        if depth > vals.len() {
            out.push_str(&format!("... {} more", depth - vals.len()));
            if !vals.is_empty() {
                out.push_str(", ");
            }
        }
        for (i, v) in vals.iter().rev().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            match v {
                Val::Unknown => out.push('?'),
                Val::Const(c) if *c < 10_000 => out.push_str(&c.to_string()),
                Val::Const(c) => out.push_str(&format!("{c:#x}")),
            }
        }
        out.push(']');
        out
    }

    /// The stack after `insn`, given the stack before it. The caller has
    /// checked that the stack is deep enough.
    pub(crate) fn step(&mut self, insn: &Insn, s: Stack) -> Stack {
        use Opcode::*;
        let op = insn.op;
        match (op, &insn.operands) {
            (Push, Operands::Imm(v)) => self.push(s, Val::Const(*v)),
            (Dup, _) => {
                let v = self.top(s);
                self.push(s, v)
            }
            (Swap, _) => {
                let b = self.top(s);
                let a = self.nth(s, 1);
                if a == b {
                    return s;
                }
                let below = self.popn(s, 2);
                let t = self.push(below, b);
                self.push(t, a)
            }
            (Over, _) => {
                let v = self.nth(s, 1);
                self.push(s, v)
            }
            (Pick, Operands::Depth(n)) => {
                let v = self.nth(s, usize::from(*n));
                self.push(s, v)
            }
            _ if op.pops() == 2 && op.pushes() == 1 && matches!(op.class(), netil::Class::Alu | netil::Class::Compare) => {
                let b = self.top(s);
                let a = self.nth(s, 1);
                let r = fold2(op, a, b);
                let below = self.popn(s, 2);
                self.push(below, r)
            }
            _ if op.pops() == 1 && op.pushes() == 1 && op.class() == netil::Class::Alu => {
                let r = self.top(s).konst().and_then(|a| fold1(op, a)).map_or(Val::Unknown, Val::Const);
                let below = self.pop(s);
                self.push(below, r)
            }
            _ => {
                let mut t = self.popn(s, op.pops());
                for _ in 0..op.pushes() {
                    t = self.push(t, Val::Unknown);
                }
                t
            }
        }
    }
}

/// Folds a binary ALU or comparison instruction (`a OP b`, b on top).
/// Mirrors the NetIL semantics exactly; division by zero is not folded
/// (it faults at run time).
pub(crate) fn fold2(op: Opcode, a: Val, b: Val) -> Val {
    use Opcode::*;
    // Absorbing zeros: known even when the other side is not.
    if matches!(op, And | Mul) && (a == Val::Const(0) || b == Val::Const(0)) {
        return Val::Const(0);
    }
    let (Val::Const(a), Val::Const(b)) = (a, b) else {
        return Val::Unknown;
    };
    let sh = b & 31;
    let (sa, sb) = (a as i32, b as i32);
    let r = match op {
        Add => a.wrapping_add(b),
        Sub => a.wrapping_sub(b),
        Mul => a.wrapping_mul(b),
        Div if b != 0 => a / b,
        Mod if b != 0 => a % b,
        Sdiv if b != 0 => sa.wrapping_div(sb) as u32,
        Smod if b != 0 => sa.wrapping_rem(sb) as u32,
        And => a & b,
        Or => a | b,
        Xor => a ^ b,
        Shl => a << sh,
        Shr => a >> sh,
        Sar => (sa >> sh) as u32,
        Rotl => a.rotate_left(sh),
        Rotr => a.rotate_right(sh),
        Btest => (a >> sh) & 1,
        Bset => a | (1 << sh),
        Bclr => a & !(1 << sh),
        CmpEq => u32::from(a == b),
        CmpNeq => u32::from(a != b),
        CmpLt => u32::from(a < b),
        CmpLe => u32::from(a <= b),
        CmpGt => u32::from(a > b),
        CmpGe => u32::from(a >= b),
        CmpSlt => u32::from(sa < sb),
        CmpSle => u32::from(sa <= sb),
        CmpSgt => u32::from(sa > sb),
        CmpSge => u32::from(sa >= sb),
        _ => return Val::Unknown,
    };
    Val::Const(r)
}

/// Folds a unary ALU instruction.
pub(crate) fn fold1(op: Opcode, a: u32) -> Option<u32> {
    use Opcode::*;
    Some(match op {
        Not => !a,
        Neg => a.wrapping_neg(),
        Bswap => a.swap_bytes(),
        Bswap16 => u32::from((a as u16).swap_bytes()),
        Popcnt => a.count_ones(),
        Clz => a.leading_zeros(),
        Ctz => a.trailing_zeros(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(v: u32) -> Val {
        Val::Const(v)
    }

    #[test]
    fn folding() {
        use Opcode::*;
        assert_eq!(fold2(Add, c(14), c(20)), c(34));
        assert_eq!(fold2(Sub, c(0), c(1)), c(u32::MAX));
        assert_eq!(fold2(Shl, c(1), c(33)), c(2));
        assert_eq!(fold2(Shr, c(0x8000_0000), c(31)), c(1));
        assert_eq!(fold2(Sar, c(0x8000_0000), c(31)), c(u32::MAX));
        assert_eq!(fold2(Div, c(7), c(0)), Val::Unknown);
        assert_eq!(fold2(Sdiv, c(i32::MIN as u32), c(u32::MAX)), c(i32::MIN as u32));
        assert_eq!(fold2(Smod, c(i32::MIN as u32), c(u32::MAX)), c(0));
        assert_eq!(fold2(Smod, c(-7i32 as u32), c(2)), c(-1i32 as u32));
        assert_eq!(fold2(And, Val::Unknown, c(0)), c(0));
        assert_eq!(fold2(Or, Val::Unknown, c(0)), Val::Unknown);
        assert_eq!(fold2(CmpSlt, c(u32::MAX), c(0)), c(1));
        assert_eq!(fold2(CmpLt, c(u32::MAX), c(0)), c(0));
        assert_eq!(fold2(Btest, c(4), c(34)), c(1));
        assert_eq!(fold2(Rotr, c(1), c(1)), c(0x8000_0000));
        assert_eq!(fold1(Bswap16, 0xaabb_ccdd), Some(0xddcc));
        assert_eq!(fold1(Clz, 0), Some(32));
        assert_eq!(fold1(Hash32, 1), None);
    }

    #[test]
    fn merge_shares_and_joins() {
        let mut a = Arena::new();
        let base = a.all_unknown(3);
        let s1 = a.push(base, c(5));
        let s1 = a.push(s1, c(7));
        // Same content, different nodes: no change.
        let s2 = a.push(base, c(5));
        let s2 = a.push(s2, c(7));
        assert_eq!(a.merge(s1, s2, 5), None);
        // A differing deep value becomes Unknown; the top stays.
        let s3 = a.push(base, c(6));
        let s3 = a.push(s3, c(7));
        let m = a.merge(s1, s3, 5).unwrap();
        assert_eq!(a.show(m, 5), "[?, ?, ?, ?, 7]");
        assert_eq!(a.merge(m, s1, 5), None);
        // Incoming covers old: taken over as it is.
        let u = a.all_unknown(5);
        assert_eq!(a.merge(s1, u, 5), Some(u));
        // A difference deeper than MAX_REBUILD: the top MAX_REBUILD values are kept.
        let mut d1 = a.push(EMPTY, c(1));
        let mut d2 = a.push(EMPTY, c(2));
        for k in 0..100 {
            d1 = a.push(d1, c(k));
            d2 = a.push(d2, c(k));
        }
        let m = a.merge(d1, d2, 101).unwrap();
        assert_eq!(a.top(m), c(99));
        assert_eq!(a.nth(m, MAX_REBUILD - 1), c(100 - MAX_REBUILD as u32));
        assert_eq!(a.nth(m, MAX_REBUILD), Val::Unknown);
        assert_eq!(a.merge(m, d1, 101), None);
        let u = a.all_unknown(20);
        assert_eq!(a.show(u, 20), "[... 4 more, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?]");
    }
}
