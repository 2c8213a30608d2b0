//! The reference NetIL interpreter: the semantic oracle every other engine
//! is tested against, and the cold tier.
//!
//! A verified module is pre-decoded once ([`InterpCode::new`]) into a flat
//! array of [`Op`]s whose jump targets are instruction indices and whose
//! back edges carry their budget cost, so execution never re-parses bytes;
//! the sequences packet filters are made of become superinstructions, one
//! dispatch each ([`Prepared::new`]; [`Prepared::decode`] is the unfused
//! form they are tested against). Execution keeps the top of the operand
//! stack in a local variable and the rest in the NetPE's scratch space; the
//! instructions that reach more of the machine than the packet (other
//! memories, regions, coprocessors, metadata) run out of the dispatch loop,
//! so that a call sets up only what filters use; `.push` code with none of
//! them (a filter) runs on a copy of the loop that sets up nothing but the
//! packet ([`InterpCode::packet_only`]). Every access the verifier did not
//! prove safe is checked at run time: memory accesses fault with `bounds`,
//! division by zero with `div-by-zero`, an exhausted budget with `budget`.
//! The semantics implemented here are those of docs/netil.md.

use netil::{Cond, Insn, Mem, Opcode, Operands, SegmentKind};
use netvm_verify::{SegmentInfo, Verified};
use netvm_vm::{mem, region, FaultKind, InvokeContext, Limits, Outcome, PeCode, PeState, XbView};

/// A jump edge: target instruction index and budget cost (0 for forward edges).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    /// Index of the target instruction.
    pub to: u32,
    /// Budget charged when the edge is taken.
    pub cost: u32,
}

const _: () = assert!(std::mem::size_of::<Op>() <= 16, "an Op stays 16 bytes");

/// The width of a packet field a superinstruction reads (1, 2 or 4
/// bytes), held as the right shift that takes a big-endian 4-byte load to
/// it: every width is then read by the same code (the loop's `field!`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldWidth(u8);

impl FieldWidth {
    /// The field of `bytes` (1, 2 or 4) bytes.
    pub const fn new(bytes: u8) -> FieldWidth {
        FieldWidth(32 - 8 * bytes)
    }

    /// The field's width in bytes.
    pub const fn bytes(self) -> u32 {
        (32 - self.0 as u32) / 8
    }
}

/// The big-endian field of `width` at `off` in `packet` within three bytes
/// of its end (or past it): the superinstructions read a field with one
/// 4-byte load and a shift where four bytes are there to read, and with
/// this elsewhere.
#[cold]
#[inline(never)]
fn load_field_near_end(packet: &[u8], off: u32, width: FieldWidth) -> Option<u32> {
    mem::load_be(packet, off, width.bytes())
}

/// A pre-decoded instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Op {
    Nop,
    Push(u32),
    Pop,
    Dup,
    Swap,
    Over,
    Pick(u8),
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Sdiv,
    Smod,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    Sar,
    Rotl,
    Rotr,
    Not,
    Neg,
    Bswap,
    Bswap16,
    Popcnt,
    Clz,
    Ctz,
    Btest,
    Bset,
    Bclr,
    Cmp(Cond),
    Jump(Edge),
    Jz(Edge),
    Jnz(Edge),
    Jcmp(Cond, Edge),
    /// Index into the code's switch tables.
    Switch(u32),
    Ret(u16),
    RetPop,
    Drop,
    Exit,
    Load(Mem, u8),
    Store(Mem, u8),
    Pktlen,
    Wirelen,
    Locload(u16),
    Locstore(u16),
    Mcopy(Mem, Mem),
    Crc32(Mem),
    Hash(Mem),
    Hash32,
    Csum(Mem),
    CsumUpd,
    Inport,
    TstampS,
    TstampNs,
    CoproIn(u8, u8),
    CoproOut(u8, u8),
    CoproInvoke(u8, u8),
    // Fused forms of `push imm` followed by one instruction (see [`fuse`]).
    AddImm(u32),
    SubImm(u32),
    MulImm(u32),
    AndImm(u32),
    OrImm(u32),
    XorImm(u32),
    ShlImm(u32),
    ShrImm(u32),
    CmpImm(Cond, u32),
    JcmpImm(Cond, u32, Edge),
    /// `push off; upload.N`: push the packet value at a constant offset.
    UploadConst(FieldWidth, u32),
    /// `pktlen; push v; jcmp.C L`: compare the packet's length with a
    /// constant and branch (a filter's first test).
    PktlenJcmpImm(Cond, u32, Edge),
    /// `push off; upload.N; push v; jcmp.C L` with a forward `L` (no
    /// budget): compare the packet value at a constant offset with a
    /// constant and branch, in one dispatch (filters test header fields
    /// this way, one after another).
    UploadJcmpImm {
        /// Access width.
        width: FieldWidth,
        /// The condition.
        cond: Cond,
        /// The packet offset.
        off: u32,
        /// The constant.
        value: u32,
        /// The target instruction (a forward edge: it costs nothing).
        to: u32,
    },
    /// [`Op::UploadJcmpImm`] with `jcmp.eq`: branch when the packet value
    /// at `off` equals `value` (a filter's test of a field, taken on a match).
    UploadJeqImm {
        /// Access width.
        width: FieldWidth,
        /// The packet offset.
        off: u32,
        /// The constant.
        value: u32,
        /// The target instruction (a forward edge).
        to: u32,
    },
    /// [`Op::UploadJcmpImm`] with `jcmp.neq`: branch when the packet value
    /// at `off` differs from `value` (a filter's test of a field, taken on
    /// a mismatch).
    UploadJneImm {
        /// Access width.
        width: FieldWidth,
        /// The packet offset.
        off: u32,
        /// The constant.
        value: u32,
        /// The target instruction (a forward edge).
        to: u32,
    },
    /// [`Op::UploadJeqImm`] or [`Op::UploadJneImm`] where both ways lead
    /// to a `ret`: return on one port when the packet value at `off`
    /// equals `value`, on the other when not (a filter's last test and its
    /// verdict, in one dispatch).
    UploadRetImm {
        /// Access width.
        width: FieldWidth,
        /// The packet offset.
        off: u32,
        /// The constant.
        value: u32,
        /// The port when the value equals `value`.
        eq_port: u16,
        /// The port when it does not.
        ne_port: u16,
    },
    /// [`Op::UploadTopJeqImm`] where both ways lead to a `ret`: the field
    /// at the offset on top (popped) decides the port.
    UploadTopRetImm {
        /// Access width.
        width: FieldWidth,
        /// The constant.
        value: u32,
        /// The port when the value equals `value`.
        eq_port: u16,
        /// The port when it does not.
        ne_port: u16,
    },
    /// `upload.N; push v; jcmp.C L`: compare the packet value at the
    /// offset on the stack (popped) with a constant and branch.
    UploadTopJcmpImm {
        /// Access width.
        width: FieldWidth,
        /// The condition.
        cond: Cond,
        /// The constant.
        value: u32,
        /// Where to go when the condition holds.
        edge: Edge,
    },
    /// `push off; upload.N; switch T`: the switch on a header field.
    UploadSwitch {
        /// Access width.
        width: FieldWidth,
        /// The packet offset.
        off: u32,
        /// Index into the code's switch tables.
        table: u32,
    },
    /// `push off; upload.8; push 0xf; and; push 4; mul` (or `push 2; shl`):
    /// four times the low nibble of a packet byte, an IPv4 header's length
    /// (BPF's `ldx msh`).
    UploadMsh(u32),
    /// `push m; and; jnz L` (`set`), `push m; and; jz L` (not `set`):
    /// branch on whether the top (popped) has any bit of `m` set (BPF's `jset`).
    Jset {
        /// The mask.
        mask: u32,
        /// Branch when a bit is set (`jnz`), or when none is (`jz`).
        set: bool,
        /// Where to go.
        edge: Edge,
    },
    /// `dup; push k; add; pktlen; jcmp.C L` (`keep`) or `push k; add;
    /// pktlen; jcmp.C L`: compare the top plus `k` with the packet's length
    /// and branch (a filter's check that a field at a computed offset is
    /// there to read); the top stays when `keep`.
    JcmpEnd {
        /// The constant added to the top.
        add: u32,
        /// The condition (the sum is the left operand).
        cond: Cond,
        /// Whether the top stays on the stack.
        keep: bool,
        /// Where to go when the condition holds.
        edge: Edge,
    },
    /// [`Op::PktlenJcmpImm`] with `jcmp.lt` to a forward target: a
    /// filter's first test, that the packet holds every byte its accepting
    /// path reads.
    PktlenJltImm {
        /// The length.
        value: u32,
        /// The target instruction (a forward edge).
        to: u32,
    },
    /// [`Op::PktlenJltImm`] and [`Op::UploadJneImm`] to the same target:
    /// `pktlen; push len; jcmp.lt L; push off; upload.N; push v; jcmp.neq
    /// L`, a filter's first two tests (the packet holds what the accepting
    /// path reads, and its link-layer type is the one wanted) in one
    /// dispatch.
    GuardUploadJneImm {
        /// Access width.
        width: FieldWidth,
        /// The length the packet must have.
        len: u16,
        /// The packet offset.
        off: u32,
        /// The constant.
        value: u32,
        /// Where both tests lead on failure (a forward edge).
        to: u32,
    },
    /// [`Op::GuardUploadJneImm`] where both ways lead to a `ret`: a filter
    /// of one test (`ip`, `arp`) whole, in one dispatch.
    GuardUploadRetImm {
        /// Access width.
        width: FieldWidth,
        /// The length the packet must have.
        len: u16,
        /// The packet offset.
        off: u32,
        /// The constant.
        value: u32,
        /// The port when the packet is long enough and the value equals `value`.
        eq_port: u16,
        /// The port otherwise.
        ne_port: u16,
    },
    /// [`Op::PktlenJltImm`] followed by [`Op::UploadSwitch`]: `pktlen; push
    /// len; jcmp.lt L; push off; upload.N; switch T`, the first tests of a
    /// filter that accepts both IPv4 and IPv6.
    GuardUploadSwitch {
        /// Access width.
        width: FieldWidth,
        /// The length the packet must have.
        len: u16,
        /// The packet offset.
        off: u32,
        /// Where a shorter packet goes (a forward edge).
        to: u32,
        /// Index into the code's switch tables.
        table: u32,
    },
    /// [`Op::UploadTopJcmpImm`] with `jcmp.eq` (`ne: false`) or `jcmp.neq`
    /// (`ne: true`) to a forward target: a filter's test of a field at a
    /// computed offset (a transport port).
    UploadTopJeqImm {
        /// Access width.
        width: FieldWidth,
        /// Branch on a mismatch (`jcmp.neq`) rather than a match.
        ne: bool,
        /// The constant.
        value: u32,
        /// The target instruction (a forward edge).
        to: u32,
    },
    /// [`Op::JcmpEnd`] with `jcmp.gt` to a forward target: branch when the
    /// field that ends at the top plus `add` ends past the packet.
    JgtEnd {
        /// The constant added to the top.
        add: u32,
        /// Whether the top stays on the stack.
        keep: bool,
        /// The target instruction (a forward edge).
        to: u32,
    },
    /// `push off; upload.N; push m; and; jnz L` (`set`) or `... jz L` (not
    /// `set`) to a forward target: branch on whether the packet value at
    /// `off` has any bit of `m` set (BPF's `jset` on a header field, such
    /// as a filter's test that a packet is not a fragment).
    UploadJset {
        /// Access width.
        width: FieldWidth,
        /// Branch when a bit is set (`jnz`), or when none is (`jz`).
        set: bool,
        /// The packet offset.
        off: u32,
        /// The mask.
        mask: u32,
        /// The target instruction (a forward edge).
        to: u32,
    },
    /// [`Op::UploadMsh`] followed by `dup; locstore n; push k; add`: four
    /// times the low nibble of the byte at `off` (an IPv4 header's
    /// length) is kept in local `n`, and it plus `k` is pushed (the first
    /// half of a filter's test of a transport header field).
    UploadMshTee {
        /// The packet offset of the byte.
        off: u32,
        /// The local.
        local: u16,
        /// The constant added to what is pushed.
        add: u32,
    },
    /// `dup; push W; add; pktlen; jcmp.gt E; upload.W; push v; jcmp.eq L`
    /// (or `jcmp.neq L` when `ne`), all forward: the field of `W` bytes at
    /// the offset on top is tested against the packet's end (to `E`, the
    /// offset staying on the stack) and then, popped, against a constant
    /// (to `L`): the second half of a filter's test of a transport header
    /// field (a port).
    CheckedFieldJeqImm {
        /// Access width.
        width: FieldWidth,
        /// Branch on a mismatch (`jcmp.neq`) rather than a match.
        ne: bool,
        /// The constant.
        value: u32,
        /// Where to go when the field ends past the packet (`E`).
        past_end: u32,
        /// Where to go when the test holds (`L`).
        to: u32,
    },
    /// `dup; locstore n` or `locstore n; locload n`: the top is written to
    /// a local and stays.
    Tee(u16),
    /// `locload n; push v; add`.
    LocloadAddImm(u16, u32),
}

impl Op {
    /// Calls `f` on every jump target of this op (switch tables aside).
    fn for_each_target(&mut self, mut f: impl FnMut(&mut u32)) {
        match self {
            Op::Jump(e)
            | Op::Jz(e)
            | Op::Jnz(e)
            | Op::Jcmp(_, e)
            | Op::JcmpImm(_, _, e)
            | Op::PktlenJcmpImm(_, _, e)
            | Op::UploadTopJcmpImm { edge: e, .. }
            | Op::Jset { edge: e, .. }
            | Op::JcmpEnd { edge: e, .. } => f(&mut e.to),
            Op::UploadJcmpImm { to, .. }
            | Op::UploadJeqImm { to, .. }
            | Op::UploadJneImm { to, .. }
            | Op::PktlenJltImm { to, .. }
            | Op::UploadTopJeqImm { to, .. }
            | Op::JgtEnd { to, .. }
            | Op::UploadJset { to, .. }
            | Op::GuardUploadJneImm { to, .. }
            | Op::GuardUploadSwitch { to, .. } => f(to),
            Op::CheckedFieldJeqImm { past_end, to, .. } => {
                f(past_end);
                f(to)
            }
            _ => {}
        }
    }
}

/// Fuses `push v` with the instruction after it when that instruction is
/// not a jump target: the most frequent NetIL idiom (constant operands,
/// constant header offsets) then costs one dispatch instead of two.
fn fuse(v: u32, next: Op) -> Option<Op> {
    Some(match next {
        Op::Add => Op::AddImm(v),
        Op::Sub => Op::SubImm(v),
        Op::Mul => Op::MulImm(v),
        Op::And => Op::AndImm(v),
        Op::Or => Op::OrImm(v),
        Op::Xor => Op::XorImm(v),
        Op::Shl => Op::ShlImm(v),
        Op::Shr => Op::ShrImm(v),
        Op::Cmp(c) => Op::CmpImm(c, v),
        Op::Jcmp(c, e) => Op::JcmpImm(c, v, e),
        Op::Load(Mem::Packet, w) => Op::UploadConst(FieldWidth::new(w), v),
        _ => return None,
    })
}

/// The superinstruction that starts `ops` (decoded, unfused), with the
/// number of instructions it replaces, if one does: the sequences packet
/// filters are made of (the paper's filters, `netvm filter`'s code) in one
/// dispatch each. None of the replaced instructions after the first may be
/// a jump target (`is_target`, aligned with `ops`).
fn fuse_at(ops: &[Op], is_target: &[bool]) -> Option<(Op, usize)> {
    use Op::*;
    let fused = |op: Op, n: usize| (n <= ops.len() && !is_target[1..n].contains(&true)).then_some((op, n));
    let found = match *ops {
        [Pktlen, Push(len), Jcmp(Cond::Lt, short), Push(off), Load(Mem::Packet, width), Push(value), Jcmp(Cond::Ne, e), ..]
            if short.cost == 0 && e == short && len <= u32::from(u16::MAX) =>
        {
            fused(GuardUploadJneImm { width: FieldWidth::new(width), len: len as u16, off, value, to: e.to }, 7)
        }
        [Pktlen, Push(len), Jcmp(Cond::Lt, short), Push(off), Load(Mem::Packet, width), Switch(table), ..]
            if short.cost == 0 && len <= u32::from(u16::MAX) =>
        {
            fused(GuardUploadSwitch { width: FieldWidth::new(width), len: len as u16, off, to: short.to, table }, 6)
        }
        [Pktlen, Push(value), Jcmp(Cond::Lt, e), ..] if e.cost == 0 => fused(PktlenJltImm { value, to: e.to }, 3),
        [Pktlen, Push(value), Jcmp(cond, e), ..] => fused(PktlenJcmpImm(cond, value, e), 3),
        [Push(off), Load(Mem::Packet, width), Push(value), Jcmp(cond, e), ..] if e.cost == 0 => {
            let (width, to) = (FieldWidth::new(width), e.to);
            fused(
                match cond {
                    Cond::Eq => UploadJeqImm { width, off, value, to },
                    Cond::Ne => UploadJneImm { width, off, value, to },
                    _ => UploadJcmpImm { width, cond, off, value, to },
                },
                4,
            )
        }
        [Push(off), Load(Mem::Packet, width), Push(mask), And, Jnz(e) | Jz(e), ..] if e.cost == 0 => {
            let set = matches!(ops[4], Jnz(_));
            fused(UploadJset { width: FieldWidth::new(width), set, off, mask, to: e.to }, 5)
        }
        [Push(off), Load(Mem::Packet, 1), Push(0xf), And, Push(4), Mul, Dup, Locstore(local), Push(add), Add, ..]
        | [Push(off), Load(Mem::Packet, 1), Push(0xf), And, Push(2), Shl, Dup, Locstore(local), Push(add), Add, ..] => {
            fused(UploadMshTee { off, local, add }, 10)
        }
        [Push(off), Load(Mem::Packet, 1), Push(0xf), And, Push(4), Mul, ..]
        | [Push(off), Load(Mem::Packet, 1), Push(0xf), And, Push(2), Shl, ..] => fused(UploadMsh(off), 6),
        [Push(off), Load(Mem::Packet, width), Switch(table), ..] => fused(UploadSwitch { width: FieldWidth::new(width), off, table }, 3),
        [Load(Mem::Packet, width), Push(value), Jcmp(cond @ (Cond::Eq | Cond::Ne), e), ..] if e.cost == 0 => {
            fused(UploadTopJeqImm { width: FieldWidth::new(width), ne: cond == Cond::Ne, value, to: e.to }, 3)
        }
        [Load(Mem::Packet, width), Push(value), Jcmp(cond, edge), ..] => {
            fused(UploadTopJcmpImm { width: FieldWidth::new(width), cond, value, edge }, 3)
        }
        [Push(mask), And, Jnz(edge), ..] => fused(Jset { mask, set: true, edge }, 3),
        [Push(mask), And, Jz(edge), ..] => fused(Jset { mask, set: false, edge }, 3),
        [Dup, Push(add), Add, Pktlen, Jcmp(Cond::Gt, end), Load(Mem::Packet, width), Push(value), Jcmp(cond @ (Cond::Eq | Cond::Ne), e), ..]
            if add == u32::from(width) && end.cost == 0 && e.cost == 0 =>
        {
            let width = FieldWidth::new(width);
            fused(CheckedFieldJeqImm { width, ne: cond == Cond::Ne, value, past_end: end.to, to: e.to }, 8)
        }
        [Dup, Push(add), Add, Pktlen, Jcmp(Cond::Gt, e), ..] if e.cost == 0 => fused(JgtEnd { add, keep: true, to: e.to }, 5),
        [Dup, Push(add), Add, Pktlen, Jcmp(cond, edge), ..] => fused(JcmpEnd { add, cond, keep: true, edge }, 5),
        [Push(add), Add, Pktlen, Jcmp(Cond::Gt, e), ..] if e.cost == 0 => fused(JgtEnd { add, keep: false, to: e.to }, 4),
        [Push(add), Add, Pktlen, Jcmp(cond, edge), ..] => fused(JcmpEnd { add, cond, keep: false, edge }, 4),
        [Dup, Locstore(n), ..] => fused(Tee(n), 2),
        [Locstore(n), Locload(m), ..] if n == m => fused(Tee(n), 2),
        [Locload(n), Push(v), Add, ..] => fused(LocloadAddImm(n, v), 3),
        _ => None,
    };
    found.or_else(|| match *ops {
        [Push(v), next, ..] if !is_target[1] => fuse(v, next).map(|op| (op, 2)),
        _ => None,
    })
}

/// `op` with the `ret` it falls through to and the `ret` it jumps to
/// folded in, where it is a field test and both are (`ops`: the decoded
/// code its edges index; `next`: the instruction after it). The two `ret`s
/// stay in the code for the other edges that may reach them.
fn fuse_verdict(op: Op, next: Option<&Op>, ops: &[Op]) -> Op {
    let (Op::UploadJeqImm { to, .. } | Op::UploadJneImm { to, .. } | Op::UploadTopJeqImm { to, .. } | Op::GuardUploadJneImm { to, .. }) =
        op
    else {
        return op;
    };
    let (Some(&Op::Ret(fall)), Some(&Op::Ret(jump))) = (next, ops.get(to as usize)) else { return op };
    // Which way a match goes.
    let on_match = |jumps_on_match: bool| if jumps_on_match { (jump, fall) } else { (fall, jump) };
    match op {
        Op::UploadJeqImm { width, off, value, .. } | Op::UploadJneImm { width, off, value, .. } => {
            let (eq_port, ne_port) = on_match(matches!(op, Op::UploadJeqImm { .. }));
            Op::UploadRetImm { width, off, value, eq_port, ne_port }
        }
        Op::UploadTopJeqImm { width, ne, value, .. } => {
            let (eq_port, ne_port) = on_match(!ne);
            Op::UploadTopRetImm { width, value, eq_port, ne_port }
        }
        Op::GuardUploadJneImm { width, len, off, value, .. } => {
            // A short packet goes where a mismatch does.
            let (eq_port, ne_port) = on_match(false);
            Op::GuardUploadRetImm { width, len, off, value, eq_port, ne_port }
        }
        _ => op,
    }
}

/// A decoded switch: sorted case values with their edges, and the default edge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchOp {
    /// Case values, strictly ascending (verified).
    pub values: Vec<u32>,
    /// Edge of each case.
    pub edges: Vec<Edge>,
    /// Edge when no case matches.
    pub default: Edge,
}

impl SwitchOp {
    /// The edge taken on `v`.
    #[inline(always)]
    fn edge(&self, v: u32) -> Edge {
        match self.values.binary_search(&v) {
            Ok(k) => self.edges[k],
            Err(_) => self.default,
        }
    }
}

/// One segment, pre-decoded.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The instructions.
    pub ops: Vec<Op>,
    /// Switch tables referenced by [`Op::Switch`].
    pub switches: Vec<SwitchOp>,
}

impl Prepared {
    /// Pre-decodes a verified segment, with the superinstructions of
    /// `fuse_at` in place of the sequences they replace.
    pub fn new(seg: &SegmentInfo) -> Prepared {
        let (decoded, is_target) = Prepared::decode_with_targets(seg);
        let mut prepared = Prepared { ops: Vec::new(), switches: decoded.switches };
        prepared.fuse_from(&decoded.ops, &is_target);
        prepared
    }

    /// Pre-decodes a verified segment one op per instruction, nothing
    /// fused: what [`Prepared::new`]'s superinstructions are tested against.
    pub fn decode(seg: &SegmentInfo) -> Prepared {
        Prepared::decode_with_targets(seg).0
    }

    /// [`Prepared::decode`], and which instruction indices some edge leads
    /// to (one longer than the code).
    fn decode_with_targets(seg: &SegmentInfo) -> (Prepared, Vec<bool>) {
        let index = |t: i64| -> u32 {
            let t = u32::try_from(t).expect("verified target");
            *seg.index_of.get(&t).expect("verified target on an instruction") as u32
        };
        let mut is_target = vec![false; seg.insns.len() + 1];
        let mut edge = |from: usize, t: i64| {
            let to = index(t);
            is_target[to as usize] = true;
            // Budget costs are defined on the original instruction indices.
            Edge { to, cost: seg.edge_cost(from, to as usize) }
        };
        let mut switches = Vec::new();
        let ops: Vec<Op> = seg
            .insns
            .iter()
            .enumerate()
            .map(|(i, insn)| {
                // Unreachable instructions are decoded but not verified (their
                // targets may be anything); they can never execute.
                if seg.depth.get(i).copied().flatten().is_none() {
                    return Op::Drop;
                }
                decode_op(insn, &mut |t| edge(i, t), &mut switches)
            })
            .collect::<Vec<Op>>();
        (Prepared { ops, switches }, is_target)
    }

    /// Sets `self.ops` to `ops` with each sequence that `fuse_at` knows
    /// replaced by its superinstruction where no instruction inside it but
    /// the first is a jump target (`is_target`, by index into `ops`, one
    /// longer than `ops`); edges (here and in `self.switches`) are
    /// renumbered. Reuses the allocation of `self.ops`.
    pub fn fuse_from(&mut self, ops: &[Op], is_target: &[bool]) {
        self.fuse_from_with(ops, is_target, &mut Vec::new());
    }

    /// [`Prepared::fuse_from`] with a scratch vector for the renumbering, so
    /// that a caller fusing often (a capsule per packet) allocates nothing.
    pub fn fuse_from_with(&mut self, ops: &[Op], is_target: &[bool], new_index: &mut Vec<u32>) {
        let fused = &mut self.ops;
        fused.clear();
        fused.reserve(ops.len());
        new_index.clear();
        new_index.resize(ops.len() + 1, 0);
        let mut i = 0;
        while i < ops.len() {
            new_index[i] = fused.len() as u32;
            let (op, n) = fuse_at(&ops[i..], &is_target[i..]).unwrap_or((ops[i], 1));
            let op = fuse_verdict(op, ops.get(i + n), ops);
            fused.push(op);
            for k in 1..n {
                new_index[i + k] = new_index[i];
            }
            i += n;
        }
        new_index[ops.len()] = fused.len() as u32;
        let remap = |e: &mut Edge| e.to = new_index[e.to as usize];
        for op in fused.iter_mut() {
            op.for_each_target(|to| *to = new_index[*to as usize]);
        }
        for sw in &mut self.switches {
            sw.edges.iter_mut().for_each(remap);
            remap(&mut sw.default);
        }
    }
}

/// The pre-decoded form of one instruction; `edge` turns a jump target (a
/// byte offset) into an [`Edge`], and a `switch` adds its table to `switches`.
pub fn decode_op(insn: &Insn, edge: &mut impl FnMut(i64) -> Edge, switches: &mut Vec<SwitchOp>) -> Op {
    use Opcode::*;
    let op = insn.op;
    let width = |w: u32| w as u8;
    match (&insn.operands, op) {
        (Operands::Imm(v), _) => Op::Push(*v),
        (Operands::Target(t), Jump) => Op::Jump(edge(*t)),
        (Operands::Target(t), Jz) => Op::Jz(edge(*t)),
        (Operands::Target(t), Jnz) => Op::Jnz(edge(*t)),
        (Operands::Target(t), _) => Op::Jcmp(op.condition().expect("jcmp"), edge(*t)),
        (Operands::Switch(s), _) => {
            switches.push(SwitchOp {
                values: s.cases.iter().map(|c| c.0).collect(),
                edges: s.cases.iter().map(|c| edge(c.1)).collect(),
                default: edge(s.default),
            });
            Op::Switch(switches.len() as u32 - 1)
        }
        (Operands::Port(p), _) => Op::Ret(*p),
        (Operands::Local(l), Locload) => Op::Locload(*l),
        (Operands::Local(l), _) => Op::Locstore(*l),
        (Operands::Depth(d), _) => Op::Pick(*d),
        (Operands::Mem(m), Crc32) => Op::Crc32(*m),
        (Operands::Mem(m), Hash) => Op::Hash(*m),
        (Operands::Mem(m), _) => Op::Csum(*m),
        (Operands::MemPair(s, d), _) => Op::Mcopy(*s, *d),
        (Operands::CoproReg { copro, reg }, CoproIn) => Op::CoproIn(*copro, *reg),
        (Operands::CoproReg { copro, reg }, _) => Op::CoproOut(*copro, *reg),
        (Operands::CoproOp { copro, op }, _) => Op::CoproInvoke(*copro, *op),
        (Operands::None, _) => {
            if let Some(c) = op.condition() {
                return Op::Cmp(c);
            }
            if let (Some(m), Some(w)) = (op.access_memory(), op.access_width()) {
                return if op.is_store() { Op::Store(m, width(w)) } else { Op::Load(m, width(w)) };
            }
            match op {
                Nop => Op::Nop,
                Pop => Op::Pop,
                Dup => Op::Dup,
                Swap => Op::Swap,
                Over => Op::Over,
                Add => Op::Add,
                Sub => Op::Sub,
                Mul => Op::Mul,
                Div => Op::Div,
                Mod => Op::Mod,
                Sdiv => Op::Sdiv,
                Smod => Op::Smod,
                And => Op::And,
                Or => Op::Or,
                Xor => Op::Xor,
                Shl => Op::Shl,
                Shr => Op::Shr,
                Sar => Op::Sar,
                Rotl => Op::Rotl,
                Rotr => Op::Rotr,
                Not => Op::Not,
                Neg => Op::Neg,
                Bswap => Op::Bswap,
                Bswap16 => Op::Bswap16,
                Popcnt => Op::Popcnt,
                Clz => Op::Clz,
                Ctz => Op::Ctz,
                Btest => Op::Btest,
                Bset => Op::Bset,
                Bclr => Op::Bclr,
                RetPop => Op::RetPop,
                Drop => Op::Drop,
                Exit => Op::Exit,
                Pktlen => Op::Pktlen,
                Wirelen => Op::Wirelen,
                Hash32 => Op::Hash32,
                CsumUpd => Op::CsumUpd,
                Inport => Op::Inport,
                TstampS => Op::TstampS,
                TstampNs => Op::TstampNs,
                other => unreachable!("opcode {other:?} has operands"),
            }
        }
    }
}

/// Operand stack slots in scratch (a power of two > 1 + the largest `.maxstacksize`).
const STACK_SLOTS: usize = 2048;
/// Local slots in scratch (a power of two >= the largest `.locals`).
const LOCAL_SLOTS: usize = 1024;
const _: () = assert!(STACK_SLOTS > 1 + netil::module::limits::MAX_STACK as usize);
const _: () = assert!(LOCAL_SLOTS >= netil::module::limits::MAX_LOCALS as usize);

/// A NetPE's code prepared for interpretation.
#[derive(Clone, Debug)]
pub struct InterpCode {
    init: Option<Prepared>,
    push: Prepared,
    info_size: usize,
    out_ports: u16,
    /// `.push` began with a `pop` no edge returns to: `push` holds the code
    /// after it, which starts on an empty stack.
    entry_pop: bool,
    /// No instruction of `.push` needs more of the machine than the packet
    /// ([`needs_machine`]): `push` runs it on the packet-only copy of the
    /// loop.
    packet_only: bool,
}

impl Prepared {
    /// Removes the first instruction, which no edge may lead to.
    fn drop_first(&mut self) {
        self.ops.remove(0);
        for op in &mut self.ops {
            op.for_each_target(|to| *to -= 1);
        }
        for sw in &mut self.switches {
            sw.edges.iter_mut().for_each(|e| e.to -= 1);
            sw.default.to -= 1;
        }
    }
}

/// Whether some edge of `code` leads to instruction 0.
fn targets_start(code: &Prepared) -> bool {
    let edge_to_0 = |op: &Op| {
        let mut to_0 = false;
        let mut op = *op;
        op.for_each_target(|to| to_0 |= *to == 0);
        to_0
    };
    code.ops.iter().any(edge_to_0) || code.switches.iter().any(|s| s.default.to == 0 || s.edges.iter().any(|e| e.to == 0))
}

impl InterpCode {
    /// Pre-decodes a verified module.
    pub fn new(v: &Verified) -> InterpCode {
        let mut push = Prepared::new(&v.push);
        let entry_pop = push.ops.first() == Some(&Op::Pop) && !targets_start(&push);
        if entry_pop {
            // The handler starts by discarding its entry value: it runs
            // from the next instruction on an empty stack instead (one
            // dispatch less per packet).
            push.drop_first();
        }
        // The lean path's instruction fetch needs a power of two
        // instructions (`execute`); what pads them is never reached.
        push.ops.resize(push.ops.len().next_power_of_two(), Op::Drop);
        let packet_only = !push.ops.iter().any(needs_machine);
        InterpCode {
            init: v.init.as_ref().map(Prepared::new),
            push,
            info_size: v.module.info_size as usize,
            out_ports: v.module.out_ports,
            entry_pop,
            packet_only,
        }
    }

    /// Whether `.push` runs on the packet-only copy of the loop: none of
    /// its instructions needs more of the machine than the packet (other
    /// memories, coprocessors, metadata, region instructions, `ret.pop`).
    pub fn packet_only(&self) -> bool {
        self.packet_only
    }

    /// The pre-decoded segment (`.push` without its first instruction
    /// where that is a `pop` no edge leads back to, and padded with `drop`
    /// to a power of two instructions).
    pub fn segment(&self, kind: SegmentKind) -> Option<&Prepared> {
        match kind {
            SegmentKind::Init => self.init.as_ref(),
            SegmentKind::Push => Some(&self.push),
        }
    }

    /// [`InterpCode::run_inline`] as a function of its own: the entry
    /// points other than `.push` (the packet path, which has its own copy).
    #[allow(clippy::too_many_arguments)] // the machine state, as `execute` takes it
    #[inline(never)]
    fn run(
        &self,
        code: &Prepared,
        state: &mut PeState,
        xb: &mut XbView<'_>,
        in_port: u16,
        initial: Option<u32>,
        limits: &Limits,
    ) -> Outcome {
        self.run_inline::<false, false>(code, state, xb, in_port, initial, limits)
    }

    /// `.push` on the packet-only copy of the loop ([`execute`] with
    /// `PACKET_ONLY`): code that needs no more of the machine than the
    /// packet (a filter), which then is not set up.
    #[inline(never)]
    fn push_packet_only(&self, state: &mut PeState, xb: &mut XbView<'_>, in_port: u16, limits: &Limits) -> Outcome {
        let initial = if self.entry_pop { None } else { Some(u32::from(in_port)) };
        self.run_inline::<true, true>(&self.push, state, xb, in_port, initial, limits)
    }

    /// `.push` on the lean copy of the loop ([`execute`] with `LEAN`).
    #[inline(never)]
    fn push_lean(&self, state: &mut PeState, xb: &mut XbView<'_>, in_port: u16, limits: &Limits) -> Outcome {
        let initial = if self.entry_pop { None } else { Some(u32::from(in_port)) };
        self.run_inline::<true, false>(&self.push, state, xb, in_port, initial, limits)
    }

    /// Runs `code` on `state`'s scratch (its operand stack and locals),
    /// with `initial` on the stack; `LEAN` picks the `.push` path's copy
    /// of the loop and `PACKET_ONLY` its copy for code that needs no more
    /// of the machine than the packet ([`execute`]).
    #[allow(clippy::too_many_arguments)] // the machine state, as `execute` takes it
    #[inline(always)]
    fn run_inline<const LEAN: bool, const PACKET_ONLY: bool>(
        &self,
        code: &Prepared,
        state: &mut PeState,
        xb: &mut XbView<'_>,
        in_port: u16,
        initial: Option<u32>,
        limits: &Limits,
    ) -> Outcome {
        // Scratch layout: STACK_SLOTS stack slots ([0] is a dummy slot under
        // the bottom of the stack), then LOCAL_SLOTS locals. Both are powers of
        // two at least as large as the format allows, so masked indices need
        // no bounds checks and a verified program never wraps.
        let PeState { data, copros, scratch, budget_used } = state;
        if scratch.len() < SCRATCH_SLOTS {
            size_scratch(scratch);
        }
        let scratch: &mut [u32; SCRATCH_SLOTS] = (&mut scratch[..SCRATCH_SLOTS]).try_into().expect("sized above");
        let (stack, locals) = scratch.split_at_mut(STACK_SLOTS);
        let stack: &mut [u32; STACK_SLOTS] = stack.try_into().expect("split above");
        let locals: &mut [u32; LOCAL_SLOTS] = locals.try_into().expect("split above");
        let mut machine = Machine { data, copros, budget_used, xb, in_port, info_size: self.info_size, out_ports: self.out_ports };
        execute::<LEAN, PACKET_ONLY>(code, stack, locals, &mut machine, initial, limits)
    }
}

/// Scratch slots an interpreted NetPE needs: its operand stack and locals.
const SCRATCH_SLOTS: usize = STACK_SLOTS + LOCAL_SLOTS;

/// Gives a NetPE's scratch the interpreter's size: once per state, out of
/// the per-packet path.
#[cold]
#[inline(never)]
fn size_scratch(scratch: &mut Vec<u32>) {
    scratch.resize(SCRATCH_SLOTS, 0);
}

/// What the less frequent instructions reach: the NetPE's state and the
/// exchange buffer. The dispatch loop holds it by one reference and hands
/// it to the out-of-line handlers ([`machine_op`], `out_of_line`), so that
/// the loop keeps only the operand stack, the program counter, the budget
/// and the packet in registers and the call costs no setup for fields a
/// filter never reads.
struct Machine<'a, 'x> {
    data: &'a mut Vec<u8>,
    copros: &'a mut Vec<Box<dyn netvm_vm::Coprocessor>>,
    budget_used: &'a mut u64,
    xb: &'a mut XbView<'x>,
    in_port: u16,
    info_size: usize,
    out_ports: u16,
}

/// Runs one pre-decoded handler that did not come from a [`Verified`]
/// module: code checked by another verifier that upholds the same
/// guarantees (every reachable instruction's operands valid, the stack
/// never below empty or above `max_stack`, every local written before it is
/// read, every edge a valid index), such as the one-pass capsule verifier.
/// `info_size` bounds info memory and `out_ports` the ports of `ret.pop`;
/// `initial` is the value on the stack at entry (`None`: empty).
#[allow(clippy::too_many_arguments)] // the machine state, as `execute` takes it
pub fn run_prepared(
    code: &Prepared,
    state: &mut PeState,
    xb: &mut XbView<'_>,
    in_port: u16,
    initial: Option<u32>,
    limits: &Limits,
    info_size: usize,
    out_ports: u16,
) -> Outcome {
    InterpCode {
        init: None,
        push: Prepared { ops: Vec::new(), switches: Vec::new() },
        info_size,
        out_ports,
        entry_pop: false,
        packet_only: false,
    }
    .run(code, state, xb, in_port, initial, limits)
}

impl PeCode for InterpCode {
    fn init(&self, state: &mut PeState, limits: &Limits) -> Outcome {
        match &self.init {
            Some(code) => self.run(code, state, &mut XbView::empty(), 0, None, limits),
            None => Outcome::Exit,
        }
    }

    #[inline]
    fn push(&self, state: &mut PeState, xb: &mut XbView<'_>, in_port: u16, limits: &Limits) -> Outcome {
        // Two functions, each with the registers and stack frame of its
        // own copy of the loop; this one only picks (a jump, no frame).
        if self.packet_only {
            self.push_packet_only(state, xb, in_port, limits)
        } else {
            self.push_lean(state, xb, in_port, limits)
        }
    }
}

/// Pops the top of the stack: `tos` takes the value below it.
macro_rules! pop {
    ($tos:ident, $stack:ident, $sp:ident) => {{
        let v = $tos;
        $sp = $sp.wrapping_sub(1);
        $tos = $stack[$sp & (STACK_SLOTS - 1)];
        v
    }};
}

/// Pushes `v`: the old top moves into the stack array.
macro_rules! push {
    ($tos:ident, $stack:ident, $sp:ident, $v:expr) => {{
        let v = $v;
        $stack[$sp & (STACK_SLOTS - 1)] = $tos;
        $sp = $sp.wrapping_add(1);
        $tos = v;
    }};
}

/// Binary operator: `a OP b` with b the top.
macro_rules! binop {
    ($tos:ident, $stack:ident, $sp:ident, |$a:ident, $b:ident| $e:expr) => {{
        $sp = $sp.wrapping_sub(1);
        let $a = $stack[$sp & (STACK_SLOTS - 1)];
        let $b = $tos;
        $tos = $e;
    }};
}

fn memory<'a>(m: Mem, xb: &'a XbView<'_>, data: &'a [u8], info_size: usize) -> &'a [u8] {
    match m {
        Mem::Packet => xb.packet,
        Mem::Info => &xb.info[..info_size.min(xb.info.len())],
        Mem::Data => data,
    }
}

fn memory_mut<'a>(m: Mem, xb: &'a mut XbView<'_>, data: &'a mut [u8], info_size: usize) -> &'a mut [u8] {
    match m {
        Mem::Packet => xb.packet,
        Mem::Info => {
            let n = info_size.min(xb.info.len());
            &mut xb.info[..n]
        }
        Mem::Data => data,
    }
}

/// `mcopy`: memmove of `len` bytes, both ranges checked first.
#[allow(clippy::too_many_arguments)]
fn mcopy(src: Mem, dst: Mem, dst_off: u32, src_off: u32, len: u32, xb: &mut XbView<'_>, data: &mut [u8], info_size: usize) -> bool {
    let (Some(sr), Some(dr)) = (
        mem::range(src_off, len, memory(src, xb, data, info_size).len()),
        mem::range(dst_off, len, memory(dst, xb, data, info_size).len()),
    ) else {
        return false;
    };
    if src == dst {
        memory_mut(dst, xb, data, info_size).copy_within(sr, dr.start);
    } else {
        // Distinct memories: copy through a small buffer to satisfy the borrow rules.
        let tmp = memory(src, xb, data, info_size)[sr].to_vec();
        memory_mut(dst, xb, data, info_size)[dr].copy_from_slice(&tmp);
    }
    true
}

/// Executes one handler. `initial` is the value on the stack at entry (the
/// input port for `.push`), `None` for an empty stack.
///
/// Long by design: the dispatch loop with one match arm per opcode (the
/// reference semantics of docs/netil.md, in one place, with no call per
/// instruction on the hot path).
#[inline(always)]
fn execute<const LEAN: bool, const PACKET_ONLY: bool>(
    code: &Prepared,
    stack: &mut [u32; STACK_SLOTS],
    locals: &mut [u32; LOCAL_SLOTS],
    m: &mut Machine<'_, '_>,
    initial: Option<u32>,
    limits: &Limits,
) -> Outcome {
    // On the lean (`.push`) path the loop reaches the packet and nothing
    // else of `m`: every instruction that needs more of the machine (other
    // memories, coprocessors, the exchange buffer's metadata) calls a small
    // handler out of line (`lean!`), and the region instructions always do
    // ([`machine_op`]), so that the compiler keeps none of that state at
    // hand and a call costs no setup for what a filter never reads. The
    // general copy inlines the small handlers. The packet-only copy
    // (`PACKET_ONLY`, for code with none of those instructions) has no
    // call at all, so the machine is never built: only the budget's
    // counter of it is kept.
    let ops = &code.ops[..];
    let mut budget = limits.budget;
    let (mut tos, mut sp) = match initial {
        Some(v) => (v, 1usize),
        None => (0, 0usize),
    };
    let mut pc = 0;
    // Packet memory, as the loop reads it. On the lean path a slice of its
    // own, taken again from the exchange buffer after each handler that may
    // write it (one load a field instead of three); elsewhere read through
    // the machine, which measured faster there (capsules: 64 instructions
    // of arithmetic, 75 ns against 47).
    let mut packet: &[u8] = m.xb.packet;
    macro_rules! packet {
        () => {
            if LEAN {
                packet
            } else {
                &*m.xb.packet
            }
        };
    }
    macro_rules! packet_may_have_changed {
        () => {
            packet = m.xb.packet
        };
    }
    macro_rules! take_edge {
        ($e:expr) => {{
            let e: Edge = $e;
            if e.cost != 0 {
                if u64::from(e.cost) > budget {
                    return Outcome::Fault(FaultKind::Budget);
                }
                budget -= u64::from(e.cost);
                *m.budget_used += u64::from(e.cost);
            }
            pc = e.to as usize;
        }};
    }
    // A superinstruction's forward jump, as a branch: the predictor
    // learns it and fetches ahead. The compiler would otherwise make it a
    // conditional move of the program counter, which chains each
    // instruction's fetch to the test before it (a filter's test of four
    // fields, the whole path predictable: 35 ns a packet against 22 with
    // the branch). The hint keeps the compiler from the move; a filter's
    // forward jumps lead away from its longest path.
    macro_rules! jump_if {
        ($c:expr, $to:expr) => {
            if $c {
                std::hint::cold_path();
                pc = $to as usize;
            }
        };
    }
    macro_rules! fault {
        ($k:ident) => {
            return Outcome::Fault(FaultKind::$k)
        };
    }
    // The packet field of `$width` at `$off`, or a `bounds` fault.
    macro_rules! field {
        ($off:expr, $width:expr) => {{
            let (off, width): (u32, FieldWidth) = ($off, $width);
            match packet!().get(off as usize..(off as usize).wrapping_add(4)) {
                Some(&[a, b, c, d]) => u32::from_be_bytes([a, b, c, d]) >> width.0,
                _ => match load_field_near_end(packet!(), off, width) {
                    Some(v) => v,
                    None => fault!(Bounds),
                },
            }
        }};
    }
    // An instruction that needs more of the machine than the packet, in
    // the packet-only copy of the loop: `InterpCode::new` chose that copy
    // for code without one (`needs_machine`), so it never runs.
    macro_rules! needs_machine {
        () => {{
            debug_assert!(false, "an instruction that needs the machine in packet-only code");
            fault!(Bounds)
        }};
    }
    // A handler of the machine's state: called out of line on the lean
    // path, inlined elsewhere.
    macro_rules! lean {
        ($f:ident($($arg:expr),*)) => {
            if PACKET_ONLY {
                needs_machine!()
            } else if LEAN {
                out_of_line::$f($($arg),*)
            } else {
                $f($($arg),*)
            }
        };
    }
    // The instructions run out of line (`machine_op`).
    macro_rules! out_of_line {
        ($op:expr) => {{
            if PACKET_ONLY {
                needs_machine!()
            }
            match machine_op($op, m, stack, tos, sp) {
                Ok((t, s)) => (tos, sp) = (t, s),
                Err(k) => return Outcome::Fault(k),
            }
            packet_may_have_changed!();
        }};
    }
    // On the lean path the code is padded to a power of two instructions
    // (`InterpCode::new`), and the program counter is masked: a verified
    // program never leaves its code, so the mask changes nothing, but it
    // shows the compiler that each instruction fetch is in bounds (no
    // check per dispatch).
    let mask = ops.len().wrapping_sub(1);
    let ops = if LEAN { &ops[..=mask] } else { ops };
    debug_assert!(!LEAN || ops.len().is_power_of_two());
    loop {
        let op = if LEAN { &ops[pc & mask] } else { &ops[pc] };
        pc += 1;
        match *op {
            Op::Nop => {}
            Op::Push(v) => push!(tos, stack, sp, v),
            Op::Pop => {
                pop!(tos, stack, sp);
            }
            Op::Dup => push!(tos, stack, sp, tos),
            Op::Swap => std::mem::swap(&mut tos, &mut stack[sp.wrapping_sub(1) & (STACK_SLOTS - 1)]),
            Op::Over => {
                let a = stack[sp.wrapping_sub(1) & (STACK_SLOTS - 1)];
                push!(tos, stack, sp, a)
            }
            Op::Pick(n) => {
                let v = if n == 0 { tos } else { stack[sp.wrapping_sub(n as usize) & (STACK_SLOTS - 1)] };
                push!(tos, stack, sp, v)
            }
            Op::Add => binop!(tos, stack, sp, |a, b| a.wrapping_add(b)),
            Op::Sub => binop!(tos, stack, sp, |a, b| a.wrapping_sub(b)),
            Op::Mul => binop!(tos, stack, sp, |a, b| a.wrapping_mul(b)),
            Op::Div => {
                if tos == 0 {
                    fault!(DivByZero);
                }
                binop!(tos, stack, sp, |a, b| a / b)
            }
            Op::Mod => {
                if tos == 0 {
                    fault!(DivByZero);
                }
                binop!(tos, stack, sp, |a, b| a % b)
            }
            Op::Sdiv => {
                if tos == 0 {
                    fault!(DivByZero);
                }
                binop!(tos, stack, sp, |a, b| (a as i32).wrapping_div(b as i32) as u32)
            }
            Op::Smod => {
                if tos == 0 {
                    fault!(DivByZero);
                }
                binop!(tos, stack, sp, |a, b| (a as i32).wrapping_rem(b as i32) as u32)
            }
            Op::And => binop!(tos, stack, sp, |a, b| a & b),
            Op::Or => binop!(tos, stack, sp, |a, b| a | b),
            Op::Xor => binop!(tos, stack, sp, |a, b| a ^ b),
            Op::Shl => binop!(tos, stack, sp, |a, b| a.wrapping_shl(b)),
            Op::Shr => binop!(tos, stack, sp, |a, b| a.wrapping_shr(b)),
            Op::Sar => binop!(tos, stack, sp, |a, b| (a as i32).wrapping_shr(b) as u32),
            Op::Rotl => binop!(tos, stack, sp, |a, b| a.rotate_left(b & 31)),
            Op::Rotr => binop!(tos, stack, sp, |a, b| a.rotate_right(b & 31)),
            Op::Not => tos = !tos,
            Op::Neg => tos = tos.wrapping_neg(),
            Op::Bswap => tos = tos.swap_bytes(),
            Op::Bswap16 => tos = u32::from((tos as u16).swap_bytes()),
            Op::Popcnt => tos = tos.count_ones(),
            Op::Clz => tos = tos.leading_zeros(),
            Op::Ctz => tos = tos.trailing_zeros(),
            Op::Btest => binop!(tos, stack, sp, |a, b| (a >> (b & 31)) & 1),
            Op::Bset => binop!(tos, stack, sp, |a, b| a | (1 << (b & 31))),
            Op::Bclr => binop!(tos, stack, sp, |a, b| a & !(1 << (b & 31))),
            Op::Cmp(c) => binop!(tos, stack, sp, |a, b| u32::from(c.eval(a, b))),
            Op::Jump(e) => take_edge!(e),
            Op::Jz(e) => {
                if pop!(tos, stack, sp) == 0 {
                    take_edge!(e)
                }
            }
            Op::Jnz(e) => {
                if pop!(tos, stack, sp) != 0 {
                    take_edge!(e)
                }
            }
            Op::Jcmp(c, e) => {
                let b = pop!(tos, stack, sp);
                let a = pop!(tos, stack, sp);
                if c.eval(a, b) {
                    take_edge!(e)
                }
            }
            Op::Switch(i) => {
                let v = pop!(tos, stack, sp);
                take_edge!(code.switches[i as usize].edge(v))
            }
            Op::Ret(p) => return Outcome::Forward(p),
            Op::RetPop => {
                if PACKET_ONLY {
                    needs_machine!()
                }
                return ret_pop(tos, m);
            }
            Op::Drop => return Outcome::Drop,
            Op::Exit => return Outcome::Exit,
            Op::Load(Mem::Packet, w) => match mem::load_be(packet!(), tos, u32::from(w)) {
                Some(v) => tos = v,
                None => fault!(Bounds),
            },
            // Frequent in capsules and applications: on the lean path each
            // in a small function of its own, called with what it needs.
            Op::Load(mem_kind, w) => match lean!(load_mem(m, mem_kind, tos, w)) {
                Some(v) => tos = v,
                None => fault!(Bounds),
            },
            Op::Store(mem_kind, w) => {
                let v = pop!(tos, stack, sp);
                let off = pop!(tos, stack, sp);
                if !lean!(store_mem(m, mem_kind, off, w, v)) {
                    fault!(Bounds);
                }
                packet_may_have_changed!();
            }
            Op::CoproIn(c, r) => {
                let v = pop!(tos, stack, sp);
                if !lean!(copro_write(m, c, r, v)) {
                    fault!(Copro);
                }
                packet_may_have_changed!();
            }
            Op::CoproOut(c, r) => {
                let v = lean!(copro_read(m, c, r));
                packet_may_have_changed!();
                match v {
                    Some(v) => push!(tos, stack, sp, v),
                    None => fault!(Copro),
                }
            }
            Op::CoproInvoke(c, o) => {
                if !lean!(copro_invoke(m, c, o)) {
                    fault!(Copro);
                }
                packet_may_have_changed!();
            }
            Op::Wirelen | Op::Inport | Op::TstampS | Op::TstampNs => {
                let v = lean!(metadata(m, *op));
                push!(tos, stack, sp, v)
            }
            Op::Mcopy(..) | Op::Crc32(_) | Op::Hash(_) | Op::Csum(_) => out_of_line!(op),
            Op::Pktlen => push!(tos, stack, sp, packet!().len() as u32),
            Op::Locload(l) => push!(tos, stack, sp, locals[l as usize & (LOCAL_SLOTS - 1)]),
            Op::Locstore(l) => locals[l as usize & (LOCAL_SLOTS - 1)] = pop!(tos, stack, sp),
            Op::Hash32 => tos = region::hash32(tos),
            Op::CsumUpd => {
                let new = pop!(tos, stack, sp);
                let old = pop!(tos, stack, sp);
                tos = region::csum_update(tos, old, new);
            }
            Op::UploadTopJcmpImm { width, cond, value, edge } => {
                let v = field!(tos, width);
                pop!(tos, stack, sp);
                if cond.eval(v, value) {
                    take_edge!(edge)
                }
            }
            Op::UploadSwitch { width, off, table } => {
                let v = field!(off, width);
                take_edge!(code.switches[table as usize].edge(v))
            }
            Op::UploadMsh(off) => match packet!().get(off as usize) {
                Some(&b) => push!(tos, stack, sp, u32::from(b & 0xf) << 2),
                None => fault!(Bounds),
            },
            Op::Jset { mask, set, edge } => {
                if (pop!(tos, stack, sp) & mask != 0) == set {
                    take_edge!(edge)
                }
            }
            Op::JcmpEnd { add, cond, keep, edge } => {
                let end = tos.wrapping_add(add);
                if !keep {
                    pop!(tos, stack, sp);
                }
                if cond.eval(end, packet!().len() as u32) {
                    take_edge!(edge)
                }
            }
            Op::JgtEnd { add, keep, to } => {
                let end = tos.wrapping_add(add);
                if !keep {
                    pop!(tos, stack, sp);
                }
                jump_if!(end > packet!().len() as u32, to);
            }
            Op::PktlenJltImm { value, to } => {
                jump_if!((packet!().len() as u32) < value, to);
            }
            Op::UploadTopJeqImm { width, ne, value, to } => {
                let v = field!(tos, width);
                pop!(tos, stack, sp);
                jump_if!((v != value) == ne, to);
            }
            Op::UploadJset { width, set, off, mask, to } => {
                let v = field!(off, width);
                jump_if!((v & mask != 0) == set, to);
            }
            Op::UploadMshTee { off, local, add } => match packet!().get(off as usize) {
                Some(&b) => {
                    let len = u32::from(b & 0xf) << 2;
                    locals[local as usize & (LOCAL_SLOTS - 1)] = len;
                    push!(tos, stack, sp, len.wrapping_add(add))
                }
                None => fault!(Bounds),
            },
            Op::CheckedFieldJeqImm { width, ne, value, past_end, to } => {
                if tos.wrapping_add(width.bytes()) > packet!().len() as u32 {
                    pc = past_end as usize;
                } else {
                    let v = field!(tos, width);
                    pop!(tos, stack, sp);
                    jump_if!((v != value) == ne, to);
                }
            }
            Op::Tee(l) => locals[l as usize & (LOCAL_SLOTS - 1)] = tos,
            Op::LocloadAddImm(l, v) => push!(tos, stack, sp, locals[l as usize & (LOCAL_SLOTS - 1)].wrapping_add(v)),
            Op::AddImm(v) => tos = tos.wrapping_add(v),
            Op::SubImm(v) => tos = tos.wrapping_sub(v),
            Op::MulImm(v) => tos = tos.wrapping_mul(v),
            Op::AndImm(v) => tos &= v,
            Op::OrImm(v) => tos |= v,
            Op::XorImm(v) => tos ^= v,
            Op::ShlImm(v) => tos = tos.wrapping_shl(v),
            Op::ShrImm(v) => tos = tos.wrapping_shr(v),
            Op::CmpImm(c, v) => tos = u32::from(c.eval(tos, v)),
            Op::JcmpImm(c, v, e) => {
                let a = pop!(tos, stack, sp);
                if c.eval(a, v) {
                    take_edge!(e)
                }
            }
            Op::UploadConst(w, off) => {
                let v = field!(off, w);
                push!(tos, stack, sp, v)
            }
            Op::PktlenJcmpImm(c, v, e) => {
                if c.eval(packet!().len() as u32, v) {
                    take_edge!(e)
                }
            }
            Op::UploadJcmpImm { width, cond, off, value, to } => {
                let v = field!(off, width);
                jump_if!(cond.eval(v, value), to);
            }
            Op::UploadJeqImm { width, off, value, to } => {
                let v = field!(off, width);
                jump_if!(v == value, to);
            }
            Op::UploadRetImm { width, off, value, eq_port, ne_port } => {
                let v = field!(off, width);
                return Outcome::Forward(if v == value { eq_port } else { ne_port });
            }
            Op::UploadTopRetImm { width, value, eq_port, ne_port } => {
                let v = field!(tos, width);
                return Outcome::Forward(if v == value { eq_port } else { ne_port });
            }
            Op::UploadJneImm { width, off, value, to } => {
                let v = field!(off, width);
                jump_if!(v != value, to);
            }
            Op::GuardUploadJneImm { width, len, off, value, to } => {
                jump_if!(packet!().len() < usize::from(len) || field!(off, width) != value, to);
            }
            Op::GuardUploadRetImm { width, len, off, value, eq_port, ne_port } => {
                if packet!().len() < usize::from(len) {
                    std::hint::cold_path();
                    return Outcome::Forward(ne_port);
                }
                let v = field!(off, width);
                return Outcome::Forward(if v == value { eq_port } else { ne_port });
            }
            Op::GuardUploadSwitch { width, len, off, to, table } => {
                if packet!().len() < usize::from(len) {
                    std::hint::cold_path();
                    pc = to as usize;
                } else {
                    let v = field!(off, width);
                    take_edge!(code.switches[table as usize].edge(v))
                }
            }
        }
    }
}

/// `load`: the value of `width` bytes at `off` in memory `mem`.
#[inline(always)]
fn load_mem(m: &Machine<'_, '_>, mem_kind: Mem, off: u32, width: u8) -> Option<u32> {
    mem::load_be(memory(mem_kind, m.xb, m.data, m.info_size), off, u32::from(width))
}

/// `store`: `v` into `width` bytes at `off` in memory `mem`; false when
/// that is out of bounds.
#[inline(always)]
fn store_mem(m: &mut Machine<'_, '_>, mem_kind: Mem, off: u32, width: u8, v: u32) -> bool {
    mem::store_be(memory_mut(mem_kind, m.xb, m.data, m.info_size), off, u32::from(width), v).is_some()
}

/// `copro.in`: writes register `r` of coprocessor `c`; false on a fault.
#[inline(always)]
fn copro_write(m: &mut Machine<'_, '_>, c: u8, r: u8, v: u32) -> bool {
    m.copros.get_mut(c as usize).is_some_and(|cp| cp.write(r, v).is_ok())
}

/// `copro.out`: reads register `r` of coprocessor `c`.
#[inline(always)]
fn copro_read(m: &mut Machine<'_, '_>, c: u8, r: u8) -> Option<u32> {
    m.copros.get_mut(c as usize)?.read(r).ok()
}

/// `copro.invoke`: operation `o` of coprocessor `c`; false on a fault.
#[inline(always)]
fn copro_invoke(m: &mut Machine<'_, '_>, c: u8, o: u8) -> bool {
    let xb = &*m.xb;
    let ctx = InvokeContext { packet: xb.packet, info: memory(Mem::Info, xb, &[], m.info_size), now: xb.ts, seq: xb.seq };
    m.copros.get_mut(c as usize).is_some_and(|cp| cp.invoke(o, &ctx).is_ok())
}

/// `wirelen`, `inport`, `tstamp.s`, `tstamp.ns`: what the exchange
/// buffer's metadata says.
#[inline(always)]
fn metadata(m: &Machine<'_, '_>, op: Op) -> u32 {
    match op {
        Op::Wirelen => m.xb.wire_len,
        Op::Inport => u32::from(m.in_port),
        Op::TstampS => m.xb.ts.sec as u32,
        _ => m.xb.ts.nsec,
    }
}

/// Out-of-line forms of the handlers above, for the lean packet path
/// (`execute::<true>`): there a call per such instruction costs less than
/// the compiler keeping the machine's state at hand for every packet.
mod out_of_line {
    use super::*;

    #[inline(never)]
    pub(super) fn load_mem(m: &Machine<'_, '_>, mem_kind: Mem, off: u32, width: u8) -> Option<u32> {
        super::load_mem(m, mem_kind, off, width)
    }

    #[inline(never)]
    pub(super) fn store_mem(m: &mut Machine<'_, '_>, mem_kind: Mem, off: u32, width: u8, v: u32) -> bool {
        super::store_mem(m, mem_kind, off, width, v)
    }

    #[inline(never)]
    pub(super) fn copro_write(m: &mut Machine<'_, '_>, c: u8, r: u8, v: u32) -> bool {
        super::copro_write(m, c, r, v)
    }

    #[inline(never)]
    pub(super) fn copro_read(m: &mut Machine<'_, '_>, c: u8, r: u8) -> Option<u32> {
        super::copro_read(m, c, r)
    }

    #[inline(never)]
    pub(super) fn copro_invoke(m: &mut Machine<'_, '_>, c: u8, o: u8) -> bool {
        super::copro_invoke(m, c, o)
    }

    #[inline(never)]
    pub(super) fn metadata(m: &Machine<'_, '_>, op: Op) -> u32 {
        super::metadata(m, op)
    }
}

/// Whether `op` reaches more of the machine than the packet, its operand
/// stack, locals and budget: other memories, coprocessors, the exchange
/// buffer's metadata, the region instructions and `ret.pop`'s check of the
/// port. Code without such an instruction runs on the packet-only copy of
/// the loop. Every op is named, so that a new one is sorted here.
fn needs_machine(op: &Op) -> bool {
    use Op::*;
    match op {
        Load(mem, _) => *mem != Mem::Packet,
        Store(..) | Wirelen | Inport | TstampS | TstampNs | Mcopy(..) | Crc32(_) | Hash(_) | Csum(_) | CoproIn(..) | CoproOut(..)
        | CoproInvoke(..) | RetPop => true,
        Nop
        | Push(_)
        | Pop
        | Dup
        | Swap
        | Over
        | Pick(_)
        | Add
        | Sub
        | Mul
        | Div
        | Mod
        | Sdiv
        | Smod
        | And
        | Or
        | Xor
        | Shl
        | Shr
        | Sar
        | Rotl
        | Rotr
        | Not
        | Neg
        | Bswap
        | Bswap16
        | Popcnt
        | Clz
        | Ctz
        | Btest
        | Bset
        | Bclr
        | Cmp(_)
        | Jump(_)
        | Jz(_)
        | Jnz(_)
        | Jcmp(..)
        | Switch(_)
        | Ret(_)
        | Drop
        | Exit
        | Pktlen
        | Locload(_)
        | Locstore(_)
        | Hash32
        | CsumUpd
        | AddImm(_)
        | SubImm(_)
        | MulImm(_)
        | AndImm(_)
        | OrImm(_)
        | XorImm(_)
        | ShlImm(_)
        | ShrImm(_)
        | CmpImm(..)
        | JcmpImm(..)
        | UploadConst(..)
        | PktlenJcmpImm(..)
        | UploadJcmpImm { .. }
        | UploadJeqImm { .. }
        | UploadJneImm { .. }
        | UploadRetImm { .. }
        | UploadTopRetImm { .. }
        | UploadTopJcmpImm { .. }
        | UploadSwitch { .. }
        | UploadMsh(_)
        | Jset { .. }
        | JcmpEnd { .. }
        | PktlenJltImm { .. }
        | GuardUploadJneImm { .. }
        | GuardUploadRetImm { .. }
        | GuardUploadSwitch { .. }
        | UploadTopJeqImm { .. }
        | JgtEnd { .. }
        | UploadJset { .. }
        | UploadMshTee { .. }
        | CheckedFieldJeqImm { .. }
        | Tee(_)
        | LocloadAddImm(..) => false,
    }
}

/// `ret.pop`: the handler ends on the port on top of the stack.
#[inline(never)]
fn ret_pop(port: u32, m: &Machine<'_, '_>) -> Outcome {
    if port < u32::from(m.out_ports) {
        Outcome::Forward(port as u16)
    } else {
        Outcome::Fault(FaultKind::BadPort)
    }
}

/// The region instructions (`mcopy`, `crc32`, `hash`, `csum`), out of the
/// dispatch loop: `tos` and `sp` in, their new values out (`sp` as the
/// loop counts it), or the fault.
#[inline(never)]
fn machine_op(
    op: &Op,
    m: &mut Machine<'_, '_>,
    stack: &mut [u32; STACK_SLOTS],
    mut tos: u32,
    mut sp: usize,
) -> Result<(u32, usize), FaultKind> {
    let info_size = m.info_size;
    let op = *op;
    match op {
        Op::Mcopy(s, d) => {
            let len = pop!(tos, stack, sp);
            let src = pop!(tos, stack, sp);
            let dst = pop!(tos, stack, sp);
            if !mcopy(s, d, dst, src, len, m.xb, m.data, info_size) {
                return Err(FaultKind::Bounds);
            }
        }
        Op::Crc32(mem_kind) | Op::Hash(mem_kind) | Op::Csum(mem_kind) => {
            let len = pop!(tos, stack, sp);
            let bytes = memory(mem_kind, m.xb, m.data, info_size);
            let r = mem::range(tos, len, bytes.len()).ok_or(FaultKind::Bounds)?;
            let region = &bytes[r];
            tos = match op {
                Op::Crc32(_) => region::crc32(region),
                Op::Hash(_) => region::murmur3_32(region),
                _ => region::internet_checksum(region),
            };
        }
        other => unreachable!("{other:?} is executed in the dispatch loop"),
    }
    Ok((tos, sp))
}

/// The reference interpreter as an [`Engine`](netvm_vm::Engine): every
/// NetPE interpreted, the graph walked by the runtime (`dispatch`).
#[derive(Clone, Copy, Debug, Default)]
pub struct InterpEngine;

impl netvm_vm::Engine for InterpEngine {
    fn name(&self) -> &'static str {
        "interp"
    }

    fn prepare(&self, verified: &Verified) -> Result<std::sync::Arc<dyn PeCode>, netvm_vm::EngineError> {
        Ok(std::sync::Arc::new(InterpCode::new(verified)))
    }
}
