//! The compiler's intermediate form: 32-bit values computed from packet
//! bytes, and predicates over them. Loads have libpcap's semantics: a load
//! outside the captured bytes rejects the packet, and a computed offset
//! `var + k` does not wrap around (it rejects instead).

use crate::parser::{BinOp, RelOp};

/// A 32-bit unsigned value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Val {
    /// A constant.
    Const(u32),
    /// The packet's length on the wire.
    WireLen,
    /// A big-endian load of `size` bytes at `var + k`.
    Load {
        /// The computed part of the offset (wrapping arithmetic), if any.
        var: Option<Box<Val>>,
        /// The constant part (added without wrapping).
        k: u32,
        /// 1, 2 or 4.
        size: u8,
    },
    /// A binary operation.
    Bin(BinOp, Box<Val>, Box<Val>),
    /// Two's complement negation.
    Neg(Box<Val>),
    /// `a & mask` as a bit test (libpcap's `jset`): the same value as
    /// `Bin(And, a, mask)`, but facts about one say nothing about the other,
    /// as in libpcap's optimizer, so that netvm proves no more than it.
    Bits(Box<Val>, u32),
}

/// Where a protocol header starts: `var + k`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Offset {
    /// The computed part (e.g. the IPv4 header length), if any.
    pub var: Option<Val>,
    /// The constant part.
    pub k: u32,
}

impl Offset {
    /// A constant offset.
    pub fn at(k: u32) -> Offset {
        Offset { var: None, k }
    }

    /// This offset plus a value. A constant added to a constant offset
    /// wraps around 2^32, as libpcap's optimizer folds it (`ip[-1]` reads
    /// the byte before the IPv4 header); added to a computed offset it
    /// joins the computed part unless that cannot overflow.
    pub fn plus(&self, v: Val) -> Offset {
        if let (None, Val::Const(c)) = (&self.var, &v) {
            return Offset { var: None, k: self.k.wrapping_add(*c) };
        }
        match v {
            Val::Const(c) => match self.k.checked_add(c) {
                Some(k) if self.var.as_ref().and_then(max_value).is_none_or(|m| (m as u64 + k as u64) <= u32::MAX as u64) => {
                    Offset { var: self.var.clone(), k }
                }
                _ => Offset { var: Some(self.var_plus(Val::Const(c))), k: self.k },
            },
            v => Offset { var: Some(self.var_plus(v)), k: self.k },
        }
    }

    fn var_plus(&self, v: Val) -> Val {
        match &self.var {
            None => v,
            Some(x) => Val::bin(BinOp::Add, v, x.clone()),
        }
    }

    /// A load of `size` bytes at this offset.
    pub fn load(&self, size: u8) -> Val {
        Val::Load { var: self.var.clone().map(Box::new), k: self.k, size }
    }
}

/// An upper bound of a value, when one is easy to see.
pub fn max_value(v: &Val) -> Option<u32> {
    match v {
        Val::Const(c) => Some(*c),
        Val::Load { size, .. } => Some(if *size == 4 { u32::MAX } else { (1u32 << (8 * *size as u32)) - 1 }),
        Val::Bin(BinOp::And, a, b) => match (max_value(a), max_value(b)) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (Some(x), None) | (None, Some(x)) => Some(x),
            _ => None,
        },
        Val::Bin(BinOp::Add, a, b) => max_value(a)?.checked_add(max_value(b)?),
        Val::Bin(BinOp::Mul, a, b) => max_value(a)?.checked_mul(max_value(b)?),
        Val::Bin(BinOp::Shl, a, b) => match **b {
            Val::Const(s) if s < 32 => {
                let m = max_value(a)?;
                if m.leading_zeros() >= s {
                    Some(m << s)
                } else {
                    None
                }
            }
            _ => None,
        },
        Val::Bin(BinOp::Shr, a, _) | Val::Bin(BinOp::Div, a, _) => max_value(a),
        Val::Bits(_, m) => Some(*m),
        Val::Bin(BinOp::Mod, _, b) => max_value(b).map(|m| m.saturating_sub(1)),
        _ => None,
    }
}

/// libpcap's arithmetic on constants; `None` when it would reject the packet.
pub fn eval_bin(op: BinOp, a: u32, b: u32) -> Option<u32> {
    Some(match op {
        BinOp::Add => a.wrapping_add(b),
        BinOp::Sub => a.wrapping_sub(b),
        BinOp::Mul => a.wrapping_mul(b),
        BinOp::Div => a.checked_div(b)?,
        BinOp::Mod => a.checked_rem(b)?,
        BinOp::And => a & b,
        BinOp::Or => a | b,
        BinOp::Xor => a ^ b,
        BinOp::Shl => a.checked_shl(b).unwrap_or(0),
        BinOp::Shr => a.checked_shr(b).unwrap_or(0),
    })
}

impl Val {
    /// `a op b`, folded when both are constants (but never a division by zero).
    pub fn bin(op: BinOp, a: Val, b: Val) -> Val {
        if let (Val::Const(x), Val::Const(y)) = (&a, &b) {
            if let Some(r) = eval_bin(op, *x, *y) {
                return Val::Const(r);
            }
        }
        Val::Bin(op, Box::new(a), Box::new(b))
    }

    /// `-a`.
    pub fn negate(a: Val) -> Val {
        match a {
            Val::Const(c) => Val::Const(c.wrapping_neg()),
            a => Val::Neg(Box::new(a)),
        }
    }

    /// Every load in the value, outermost first.
    pub fn loads<'a>(&'a self, out: &mut Vec<&'a Val>) {
        match self {
            Val::Const(_) | Val::WireLen => {}
            Val::Load { var, .. } => {
                out.push(self);
                if let Some(v) = var {
                    v.loads(out);
                }
            }
            Val::Bin(_, a, b) => {
                a.loads(out);
                b.loads(out);
            }
            Val::Neg(a) | Val::Bits(a, _) => a.loads(out),
        }
    }
}

/// Evaluates a comparison of constants.
pub fn eval_rel(op: RelOp, a: u32, b: u32) -> bool {
    match op {
        RelOp::Eq => a == b,
        RelOp::Ne => a != b,
        RelOp::Lt => a < b,
        RelOp::Le => a <= b,
        RelOp::Gt => a > b,
        RelOp::Ge => a >= b,
    }
}

/// A predicate over a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pred {
    /// Always.
    True,
    /// Never.
    False,
    /// `a op b`.
    Cmp(RelOp, Val, Val),
    /// Both, the left one first.
    And(Box<Pred>, Box<Pred>),
    /// Either, the left one first.
    Or(Box<Pred>, Box<Pred>),
    /// Not.
    Not(Box<Pred>),
}

impl Pred {
    /// `a and b`.
    pub fn and(a: Pred, b: Pred) -> Pred {
        match (a, b) {
            (Pred::True, b) => b,
            (a, Pred::True) => a,
            (Pred::False, _) => Pred::False,
            (a, b) => Pred::And(Box::new(a), Box::new(b)),
        }
    }

    /// `a or b`.
    pub fn or(a: Pred, b: Pred) -> Pred {
        match (a, b) {
            (Pred::False, b) => b,
            (a, Pred::False) => a,
            (Pred::True, _) => Pred::True,
            (a, b) => Pred::Or(Box::new(a), Box::new(b)),
        }
    }

    /// `not a`.
    pub fn negate(a: Pred) -> Pred {
        match a {
            Pred::True => Pred::False,
            Pred::False => Pred::True,
            Pred::Not(x) => *x,
            a => Pred::Not(Box::new(a)),
        }
    }

    /// A comparison, folded when both sides are constants.
    pub fn cmp(op: RelOp, a: Val, b: Val) -> Pred {
        if let (Val::Const(x), Val::Const(y)) = (&a, &b) {
            return if eval_rel(op, *x, *y) { Pred::True } else { Pred::False };
        }
        Pred::Cmp(op, a, b)
    }

    /// The disjunction of `items`, in order (false if empty).
    pub fn any(items: impl IntoIterator<Item = Pred>) -> Pred {
        items.into_iter().fold(Pred::False, Pred::or)
    }
}
