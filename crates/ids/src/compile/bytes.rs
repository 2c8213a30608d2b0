//! `byte_test`, `byte_jump` and `byte_extract` → NetIL, with Snort 3's
//! semantics (docs/ids.md, "Byte options"): where the bytes are read,
//! binary and text (`string`) numbers, `bitmask`, `multiplier`, `align`,
//! the cursor a jump or an extraction leaves, and the `byte_extract`
//! variables other options read.

use std::fmt::Write;

use super::{Gen, L_CURSOR};
use crate::rules::{ByteExtract, ByteJump, ByteOp, ByteTest, Endian, Num, NumBase, Rule};

/// The two `byte_extract` variables of a rule (Snort keeps two per rule).
pub(super) const L_VARS: [u32; MAX_VARS] = [11, 12];
/// Where the bytes are read (an absolute packet offset).
const L_PTR: u32 = 13;
/// The number read.
const L_VAL: u32 = 14;
/// How many bytes the number took (digits and what precedes them, for a text number).
const L_TOOK: u32 = 15;
/// A text number's next byte, its end, the current byte, where its digits start, a digit's value.
const L_AT: u32 = 16;
const L_STOP: u32 = 17;
const L_BYTE: u32 = 18;
const L_DIGITS: u32 = 19;
const L_DIGIT: u32 = 20;
/// The first local after the byte options'.
pub(super) const L_AFTER: u32 = 21;

/// Most `byte_extract` variables in one rule, as in Snort.
pub const MAX_VARS: usize = 2;

/// A position beyond any payload: a variable position is clamped to it,
/// so that a huge value makes an empty region, never a wrapped one.
const FAR: u32 = 0x1_0000;

/// The local of variable `name` in `r` (its `byte_extract` order).
pub(super) fn var_local(r: &Rule, name: &str) -> u32 {
    let i = extracted(r).iter().position(|n| *n == name).expect("the parser accepts only variables defined before");
    L_VARS[i]
}

/// The names `r`'s `byte_extract`s define, in order, each once.
pub(super) fn extracted(r: &Rule) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for d in &r.detection {
        if let crate::rules::Detection::ByteExtract(b) = d {
            if !names.contains(&b.name.as_str()) {
                names.push(&b.name);
            }
        }
    }
    names
}

/// Whether option `d` reads a `byte_extract` variable.
pub(super) fn reads_variable(d: &crate::rules::Detection) -> bool {
    use crate::rules::Detection;
    let var = |n: &Num| matches!(n, Num::Var(_));
    match d {
        Detection::Content(c) => [&c.offset, &c.depth, &c.distance, &c.within].into_iter().flatten().any(var),
        Detection::IsDataAt(x) => var(&x.offset),
        Detection::ByteTest(b) => var(&b.value) || var(&b.offset),
        Detection::ByteJump(b) => var(&b.offset) || b.post_offset.as_ref().is_some_and(var),
        _ => false,
    }
}

/// Why the compiler cannot compile a byte option, if it cannot.
pub(super) fn unsupported(endian: Endian) -> Option<String> {
    (endian == Endian::Dce)
        .then(|| "`dce` takes the byte order of a DCE/RPC session, which netvm does not decode (Snort fails the option without one)".into())
}

/// Pushes the value of `n` as a signed 32-bit number (a variable as Snort reads it, `(int32)`).
fn push_num(g: &mut Gen, r: &Rule, n: &Num) {
    match n {
        Num::Lit(v) => op!(g, "push {v}"),
        Num::Var(name) => op!(g, "locload {}", var_local(r, name)),
    }
}

/// Pushes `n` for a position (content offset/depth/distance/within,
/// isdataat): a variable is clamped to [`FAR`].
pub(super) fn push_position(g: &mut Gen, r: &Rule, n: &Num) {
    match n {
        Num::Lit(v) => op!(g, "push {v}"),
        Num::Var(name) => {
            let ok = g.label("var_near");
            op!(g, "locload {}", var_local(r, name));
            g.op("dup");
            op!(g, "push {FAR}");
            op!(g, "jcmp.le {ok}");
            g.op("pop");
            op!(g, "push {FAR}");
            g.at(&ok);
        }
    }
}

/// What a byte option reads, in one shape for the three.
struct Read<'a> {
    bytes: u8,
    offset: &'a Num,
    relative: bool,
    endian: Endian,
    string: Option<NumBase>,
    bitmask: Option<u32>,
}

/// Sets [`L_PTR`] to where `rd` reads: (the cursor, or the buffer start) + offset.
fn read_position(g: &mut Gen, r: &Rule, rd: &Read, base: u32) {
    op!(g, "locload {}", if rd.relative { L_CURSOR } else { base });
    push_num(g, r, rd.offset);
    g.op("add");
    op!(g, "locstore {L_PTR}");
}

/// Reads the number `rd` describes into [`L_VAL`] (after the bitmask) and
/// the bytes it took into [`L_TOOK`]; jumps to `fail` when it cannot: the
/// position outside the buffer `[base, end)`, too few bytes for a binary
/// number, no digits for a text one.
fn read(g: &mut Gen, r: &Rule, rd: &Read, (base, end): (u32, u32), fail: &str) {
    read_position(g, r, rd, base);
    op!(g, "locload {L_PTR}");
    op!(g, "locload {base}");
    op!(g, "jcmp.slt {fail}");
    op!(g, "locload {L_PTR}");
    op!(g, "locload {end}");
    op!(g, "jcmp.sge {fail}");
    match rd.string {
        None => binary(g, rd.bytes, rd.endian, end, fail),
        Some(b) => text(g, rd.bytes, b, end, fail),
    }
    if let Some(m) = rd.bitmask {
        op!(g, "locload {L_VAL}");
        op!(g, "push {m}");
        g.op("and");
        op!(g, "push {}", m.trailing_zeros());
        g.op("shr");
        op!(g, "locstore {L_VAL}");
    }
}

/// A binary number of `n` bytes (1 to 4) at [`L_PTR`], which must end by `end`.
fn binary(g: &mut Gen, n: u8, endian: Endian, end: u32, fail: &str) {
    op!(g, "locload {L_PTR}");
    op!(g, "push {n}");
    g.op("add");
    op!(g, "locload {end}");
    op!(g, "jcmp.sgt {fail}");
    let little = endian == Endian::Little;
    match n {
        1 => {
            op!(g, "locload {L_PTR}");
            g.op("upload.8");
        }
        2 => {
            op!(g, "locload {L_PTR}");
            g.op("upload.16");
            if little {
                g.op("bswap16");
            }
        }
        4 => {
            op!(g, "locload {L_PTR}");
            g.op("upload.32");
            if little {
                g.op("bswap");
            }
        }
        _ => {
            // Three bytes: b0 b1 b2, most significant first unless little.
            g.op("push 0");
            for k in 0..u32::from(n) {
                op!(g, "locload {L_PTR}");
                op!(g, "push {k}");
                g.op("add");
                g.op("upload.8");
                op!(g, "push {}", if little { 8 * k } else { 8 * (u32::from(n) - 1 - k) });
                g.op("shl");
                g.op("or");
            }
        }
    }
    op!(g, "locstore {L_VAL}");
    op!(g, "push {n}");
    op!(g, "locstore {L_TOOK}");
}

/// A number written in text at [`L_PTR`], as Snort reads it with `strtoul`
/// over at most `n` bytes (fewer where the buffer ends; a NUL ends the
/// text): leading white space, an optional `+` (a `-` fails), `0x` before
/// hex digits, then digits up to the first other byte; no digit fails; a
/// value past 2^32 - 1 is 2^32 - 1. [`L_TOOK`] counts everything read.
fn text(g: &mut Gen, n: u8, base: NumBase, end: u32, fail: &str) {
    let radix = match base {
        NumBase::Hex => 16,
        NumBase::Dec => 10,
        NumBase::Oct => 8,
    };
    let l = |g: &mut Gen, what: &str| g.label(what);
    let (ws, ws_next, not_ws, signed, digits, done, sat, next) = (
        l(g, "ws"),
        l(g, "ws_next"),
        l(g, "not_ws"),
        l(g, "signed"),
        l(g, "digits"),
        l(g, "digits_done"),
        l(g, "saturate"),
        l(g, "digit_next"),
    );
    let t = &mut g.text;
    // stop = min(ptr + n, end)
    let _ = write!(
        t,
        "    locload {L_PTR}\n    locstore {L_AT}\n    locload {L_PTR}\n    push {n}\n    add\n    locstore {L_STOP}\n\
         \x20   locload {L_STOP}\n    locload {end}\n    jcmp.sle {ws}\n    locload {end}\n    locstore {L_STOP}\n"
    );
    // White space: space, \t \n \v \f \r; the end or a NUL first: no number.
    let _ = write!(
        t,
        "{ws}:\n    locload {L_AT}\n    locload {L_STOP}\n    jcmp.sge {fail}\n    locload {L_AT}\n    upload.8\n    locstore {L_BYTE}\n\
         \x20   locload {L_BYTE}\n    jz {fail}\n    locload {L_BYTE}\n    push 32\n    jcmp.eq {ws_next}\n\
         \x20   locload {L_BYTE}\n    push 9\n    sub\n    push 4\n    jcmp.gt {not_ws}\n\
         {ws_next}:\n    locload {L_AT}\n    push 1\n    add\n    locstore {L_AT}\n    jump {ws}\n\
         {not_ws}:\n    locload {L_BYTE}\n    push 45\n    jcmp.eq {fail}\n    locload {L_BYTE}\n    push 43\n    jcmp.neq {signed}\n\
         \x20   locload {L_AT}\n    push 1\n    add\n    locstore {L_AT}\n{signed}:\n"
    );
    if radix == 16 {
        // `0x` / `0X` is skipped only before a hex digit (else the `0` is the number).
        let keep = g.label("no_0x");
        let t = &mut g.text;
        let _ = write!(
            t,
            "    locload {L_AT}\n    push 2\n    add\n    locload {L_STOP}\n    jcmp.sge {keep}\n\
             \x20   locload {L_AT}\n    upload.8\n    push 48\n    jcmp.neq {keep}\n\
             \x20   locload {L_AT}\n    push 1\n    add\n    upload.8\n    push 32\n    or\n    push 120\n    jcmp.neq {keep}\n\
             \x20   locload {L_AT}\n    push 2\n    add\n    upload.8\n    locstore {L_BYTE}\n"
        );
        hex_digit(t, &keep);
        let _ = write!(t, "    pop\n    locload {L_AT}\n    push 2\n    add\n    locstore {L_AT}\n{keep}:\n");
    }
    let t = &mut g.text;
    let _ = write!(
        t,
        "    push 0\n    locstore {L_VAL}\n    locload {L_AT}\n    locstore {L_DIGITS}\n\
         {digits}:\n    locload {L_AT}\n    locload {L_STOP}\n    jcmp.sge {done}\n    locload {L_AT}\n    upload.8\n    locstore {L_BYTE}\n"
    );
    match radix {
        16 => hex_digit(t, &done),
        r => {
            let _ = write!(t, "    locload {L_BYTE}\n    push 48\n    sub\n    dup\n    push {r}\n    jcmp.ge {done}_pop\n");
        }
    }
    // value = value * radix + digit, saturating at 2^32 - 1.
    let _ = write!(
        t,
        "    locstore {L_DIGIT}\n    locload {L_VAL}\n    push 4294967295\n    locload {L_DIGIT}\n    sub\n    push {radix}\n    div\n    jcmp.gt {sat}\n\
         \x20   locload {L_VAL}\n    push {radix}\n    mul\n    locload {L_DIGIT}\n    add\n    locstore {L_VAL}\n    jump {next}\n\
         {sat}:\n    push 4294967295\n    locstore {L_VAL}\n{next}:\n    locload {L_AT}\n    push 1\n    add\n    locstore {L_AT}\n    jump {digits}\n"
    );
    if radix != 16 {
        let _ = write!(t, "{done}_pop:\n    pop\n");
    }
    let _ = write!(
        t,
        "{done}:\n    locload {L_AT}\n    locload {L_DIGITS}\n    jcmp.eq {fail}\n    locload {L_AT}\n    locload {L_PTR}\n    sub\n    locstore {L_TOOK}\n"
    );
}

/// The value of the hex digit in [`L_BYTE`] on the stack; to `not` (with
/// the stack as it was) when the byte is not one.
fn hex_digit(t: &mut String, not: &str) {
    let _ = write!(
        t,
        "    locload {L_BYTE}\n    push 48\n    sub\n    dup\n    push 10\n    jcmp.lt {not}_hex_ok\n    pop\n\
         \x20   locload {L_BYTE}\n    push 32\n    or\n    push 97\n    sub\n    dup\n    push 6\n    jcmp.ge {not}_hex_pop\n\
         \x20   push 10\n    add\n{not}_hex_ok:\n"
    );
    // The shared exit for a non-digit drops the partial value first.
    let _ = write!(t, "    jump {not}_hex_end\n{not}_hex_pop:\n    pop\n    jump {not}\n{not}_hex_end:\n");
}

/// `byte_test`: jumps to `fail` unless the number read compares as asked
/// (unsigned, 32 bits; a read that fails fails, negated or not).
pub(super) fn byte_test(g: &mut Gen, r: &Rule, b: &ByteTest, bounds: (u32, u32), fail: &str) {
    let rd = Read { bytes: b.bytes, offset: &b.offset, relative: b.relative, endian: b.endian, string: b.string, bitmask: b.bitmask };
    read(g, r, &rd, bounds, fail);
    op!(g, "locload {L_VAL}");
    match &b.value {
        Num::Lit(v) => op!(g, "push {}", *v as u32),
        Num::Var(name) => op!(g, "locload {}", var_local(r, name)),
    }
    let holds = g.label("byte_test_holds");
    let (jump, to) = match b.op {
        ByteOp::Lt => ("jcmp.lt", &holds),
        ByteOp::Gt => ("jcmp.gt", &holds),
        ByteOp::Le => ("jcmp.le", &holds),
        ByteOp::Ge => ("jcmp.ge", &holds),
        ByteOp::Eq => ("jcmp.eq", &holds),
        ByteOp::And | ByteOp::Xor => {
            g.op(if b.op == ByteOp::And { "and" } else { "xor" });
            ("jnz", &holds)
        }
    };
    op!(g, "{jump} {to}");
    // Not holding: fail, unless negated.
    if b.negated {
        let after = g.label("byte_test_ok");
        op!(g, "jump {after}");
        g.at(&holds);
        op!(g, "jump {fail}");
        g.at(&after);
    } else {
        op!(g, "jump {fail}");
        g.at(&holds);
    }
}

/// `byte_jump`: moves the cursor to (the buffer start with
/// `from_beginning`, its end with `from_end`, else just after the bytes
/// read) + the number read × multiplier, aligned, + `post_offset`, all
/// modulo 2^32; jumps to `fail` when the read fails or the new position is
/// past the buffer end (the end itself is allowed). `bytes 0` reads
/// nothing: only the position is checked.
pub(super) fn byte_jump(g: &mut Gen, r: &Rule, b: &ByteJump, (base, end): (u32, u32), fail: &str) {
    let rd = Read { bytes: b.bytes, offset: &b.offset, relative: b.relative, endian: b.endian, string: b.string, bitmask: b.bitmask };
    if b.bytes == 0 {
        read_position(g, r, &rd, base);
        g.op("push 0");
        op!(g, "locstore {L_VAL}");
        g.op("push 0");
        op!(g, "locstore {L_TOOK}");
    } else {
        read(g, r, &rd, (base, end), fail);
    }
    // The jump: value × multiplier, aligned up to 4.
    op!(g, "locload {L_VAL}");
    if let Some(m) = b.multiplier {
        op!(g, "push {m}");
        g.op("mul");
    }
    if b.align != 0 {
        g.op("push 3");
        g.op("add");
        op!(g, "push {}", !3u32);
        g.op("and");
    }
    // + where it starts, relative to the buffer start.
    if b.from_end {
        op!(g, "locload {end}");
        op!(g, "locload {base}");
        g.op("sub");
        g.op("add");
    } else if !b.from_beginning {
        op!(g, "locload {L_PTR}");
        op!(g, "locload {base}");
        g.op("sub");
        op!(g, "locload {L_TOOK}");
        g.op("add");
        g.op("add");
    }
    if let Some(p) = &b.post_offset {
        push_num(g, r, p);
        g.op("add");
    }
    // At most the buffer's size (unsigned: a position before the start wrapped past it).
    op!(g, "locstore {L_VAL}");
    op!(g, "locload {L_VAL}");
    op!(g, "locload {end}");
    op!(g, "locload {base}");
    g.op("sub");
    op!(g, "jcmp.gt {fail}");
    op!(g, "locload {base}");
    op!(g, "locload {L_VAL}");
    g.op("add");
    op!(g, "locstore {L_CURSOR}");
}

/// `byte_extract`: stores the number read × multiplier, aligned (2 or 4),
/// in the rule's variable, and moves the cursor just after the bytes read.
pub(super) fn byte_extract(g: &mut Gen, r: &Rule, b: &ByteExtract, bounds: (u32, u32), fail: &str) {
    let offset = Num::Lit(i64::from(b.offset));
    let rd = Read { bytes: b.bytes, offset: &offset, relative: b.relative, endian: b.endian, string: b.string, bitmask: b.bitmask };
    read(g, r, &rd, bounds, fail);
    op!(g, "locload {L_VAL}");
    if let Some(m) = b.multiplier {
        op!(g, "push {m}");
        g.op("mul");
    }
    if b.align > 1 {
        // 2 or 4 (the parser accepts no other).
        let a = u32::from(b.align);
        op!(g, "push {}", a - 1);
        g.op("add");
        op!(g, "push {}", !(a - 1));
        g.op("and");
    }
    op!(g, "locstore {}", var_local(r, &b.name));
    op!(g, "locload {L_PTR}");
    op!(g, "locload {L_TOOK}");
    g.op("add");
    op!(g, "locstore {L_CURSOR}");
}
