//! The AArch64 templates and the helpers generated code calls: the same
//! one-pass compiler as `x64.rs`, instruction for instruction, in the
//! AAPCS64 convention.
//!
//! Registers: `x19` holds the [`netvm_rt::handler::HandlerCtx`], `x20`
//! the frame (slots, then locals); the eight lowest stack slots are the
//! callee-saved `w21`-`w28`, so helper calls keep them; `w9`-`w15` are
//! the templates' scratch, `x0`-`x7` carry arguments and `x16`-`x17`
//! addresses of calls. Every immediate that might not fit its encoding
//! (a large offset, a case value, a cost, an address) is materialised with
//! `movz`/`movk` first.

// dynasm's dynamic registers (`W(n)`, `X(n)`) convert their `u8` number with `.into()`.
#![allow(clippy::useless_conversion)]

use dynasmrt::{dynasm, DynamicLabel, DynasmApi, DynasmLabelApi};
use netil::{Cond, Mem, Opcode, Operands};
use netvm_rt::handler::offsets::{
    BUDGET_LEFT, COPROS, DATA, DATA_LEN, INFO, INFO_LEN, IN_PORT, NCOPROS, NREGS, PKT, PKT_LEN, REGS, SEQ, TS_NSEC, TS_SEC, WIRE_LEN,
};
use netvm_rt::helpers::{netvm_rt_copro_in, netvm_rt_copro_invoke, netvm_rt_copro_out, netvm_rt_crc32, netvm_rt_csum, netvm_rt_murmur3};
use netvm_verify::SegmentInfo;
use netvm_vm::{FaultKind, Outcome};

use super::layout::{
    slots_and_locals, target, Edges, DIRECT_CALL, DIRECT_SIZE, DIRECT_THIS, FILE_DIRECT, FILE_INPUT, FILE_INPUTS, FILE_OPS, FILE_OUTPUT,
    FILE_OUTPUTS, FILE_SIZE,
};
use super::{Handler, Shape};

type Asm = dynasmrt::aarch64::Assembler;

/// The stack's page size, for probing large frames.
const PAGE: usize = 4096;

/// The registers that hold the lowest stack slots: slot `d` is
/// `SLOT_REGS[d]` (callee-saved, so helper calls keep them), the slots
/// above live in the frame (the SNAP JIT paper's §IV mapping).
const SLOT_REGS: [u8; 8] = [21, 22, 23, 24, 25, 26, 27, 28];

/// The context register and the frame register.
const CTX: u8 = 19;
const FRAME: u8 = 20;

/// `w`/`x` `reg` = `v`, in one to four `movz`/`movk`.
fn mov_imm(ops: &mut Asm, reg: u8, v: u64) {
    dynasm!(ops ; .arch aarch64 ; movz X(reg), (v & 0xffff) as u32);
    for shift in [16u32, 32, 48] {
        let part = ((v >> shift) & 0xffff) as u32;
        if part != 0 {
            match shift {
                16 => dynasm!(ops ; .arch aarch64 ; movk X(reg), part, lsl 16),
                32 => dynasm!(ops ; .arch aarch64 ; movk X(reg), part, lsl 32),
                _ => dynasm!(ops ; .arch aarch64 ; movk X(reg), part, lsl 48),
            }
        }
    }
}

/// Loads the 32-bit word at `[base + off]` into `w(dst)`.
fn ldr_w(ops: &mut Asm, dst: u8, base: u8, off: u32) {
    if off.is_multiple_of(4) && off < 16384 {
        dynasm!(ops ; .arch aarch64 ; ldr W(dst), [X(base), off]);
    } else {
        mov_imm(ops, 17, u64::from(off));
        dynasm!(ops ; .arch aarch64 ; ldr W(dst), [X(base), x17]);
    }
}

/// Loads the 64-bit word at `[base + off]` into `x(dst)`.
fn ldr_x(ops: &mut Asm, dst: u8, base: u8, off: u32) {
    if off.is_multiple_of(8) && off < 32768 {
        dynasm!(ops ; .arch aarch64 ; ldr X(dst), [X(base), off]);
    } else {
        mov_imm(ops, 17, u64::from(off));
        dynasm!(ops ; .arch aarch64 ; ldr X(dst), [X(base), x17]);
    }
}

/// Stores `w(src)` at `[base + off]`.
fn str_w(ops: &mut Asm, src: u8, base: u8, off: u32) {
    if off.is_multiple_of(4) && off < 16384 {
        dynasm!(ops ; .arch aarch64 ; str W(src), [X(base), off]);
    } else {
        mov_imm(ops, 17, u64::from(off));
        dynasm!(ops ; .arch aarch64 ; str W(src), [X(base), x17]);
    }
}

/// A context field's offset (the context's layout is `#[repr(C)]`, its
/// offsets small and non-negative).
fn field(off: i32) -> u32 {
    off as u32
}

/// Where bit `bit` of the mask at `mask` of instance `copro`'s register
/// file is set, the pointer at `field` of that file into `x9`; branches to
/// `call` where it is not (or the context has no file for the instance).
fn regfile_pointer(ops: &mut Asm, copro: u8, mask: u32, bit: u8, field_off: u32, call: DynamicLabel) {
    let file = FILE_SIZE * u32::from(copro);
    ldr_x(ops, 9, CTX, field(NREGS));
    dynasm!(ops ; .arch aarch64 ; cmp x9, u32::from(copro) ; b.ls =>call);
    ldr_x(ops, 9, CTX, field(REGS));
    ldr_w(ops, 10, 9, file + mask);
    dynasm!(ops ; .arch aarch64 ; tbz w10, u32::from(bit), =>call);
    ldr_x(ops, 9, 9, file + field_off);
}

/// Slot `d` in the frame (for `d` past the registers).
fn slot(d: u32) -> u32 {
    4 * d
}

/// Loads slot `d` into `w(dst)`.
fn get(ops: &mut Asm, dst: u8, d: u32) {
    match SLOT_REGS.get(d as usize) {
        Some(&r) => dynasm!(ops ; .arch aarch64 ; mov W(dst), W(r)),
        None => ldr_w(ops, dst, FRAME, slot(d)),
    }
}

/// Stores `w(src)` into slot `d`.
fn put(ops: &mut Asm, d: u32, src: u8) {
    match SLOT_REGS.get(d as usize) {
        Some(&r) => dynasm!(ops ; .arch aarch64 ; mov W(r), W(src)),
        None => str_w(ops, src, FRAME, slot(d)),
    }
}

/// Stores `v` into slot `d`.
fn put_imm(ops: &mut Asm, d: u32, v: u32) {
    match SLOT_REGS.get(d as usize) {
        Some(&r) => mov_imm(ops, r, u64::from(v)),
        None => {
            mov_imm(ops, 9, u64::from(v));
            str_w(ops, 9, FRAME, slot(d));
        }
    }
}

/// Calls the function at `f` (its arguments already in place).
fn call(ops: &mut Asm, f: *const ()) {
    mov_imm(ops, 16, f as u64);
    dynasm!(ops ; .arch aarch64 ; blr x16);
}

/// The context's fields for a memory's base and length.
fn mem_fields(m: Mem) -> (u32, u32) {
    match m {
        Mem::Packet => (field(PKT), field(PKT_LEN)),
        Mem::Info => (field(INFO), field(INFO_LEN)),
        Mem::Data => (field(DATA), field(DATA_LEN)),
    }
}

/// Faults with `bounds` unless `[x(off), x(off) + x(len))` lies within the
/// memory whose length is the context field `len_field` (both values
/// zero-extended 32-bit numbers: their 64-bit sum cannot wrap).
fn check_range(ops: &mut Asm, off: u8, len: u8, len_field: u32, bounds: DynamicLabel) {
    dynasm!(ops ; .arch aarch64 ; add x13, X(off), X(len));
    ldr_x(ops, 14, CTX, len_field);
    dynasm!(ops ; .arch aarch64 ; cmp x13, x14 ; b.hi =>bounds);
}

runtime_helpers!("C");

/// A switch over `w9`: a binary search over the ascending `cases`.
fn switch_tree(ops: &mut Asm, cases: &[(u32, DynamicLabel)], default: DynamicLabel) {
    if cases.len() <= 4 {
        for &(v, l) in cases {
            mov_imm(ops, 10, u64::from(v));
            dynasm!(ops ; .arch aarch64 ; cmp w9, w10 ; b.eq =>l);
        }
        dynasm!(ops ; .arch aarch64 ; b =>default);
        return;
    }
    let mid = cases.len() / 2;
    let (v, l) = cases[mid];
    let above = ops.new_dynamic_label();
    mov_imm(ops, 10, u64::from(v));
    dynasm!(ops ; .arch aarch64 ; cmp w9, w10 ; b.eq =>l ; b.hi =>above);
    switch_tree(ops, &cases[..mid], default);
    dynasm!(ops ; .arch aarch64 ; =>above);
    switch_tree(ops, &cases[mid + 1..], default);
}

/// Compiles one verified segment (or code another verifier checked to the
/// same guarantees, as `x64.rs` says).
pub fn compile_segment(seg: &SegmentInfo, shape: Shape) -> Result<Handler, String> {
    let n = seg.insns.len();
    // Slots in use (one spare above the deepest), then the locals.
    let (max_depth, locals) = slots_and_locals(seg);
    let locals_base = 4 * (max_depth + 1);
    let local = |l: u16| locals_base + 4 * u32::from(l);
    // The frame: slots and locals, a multiple of 16 as sp must stay.
    let frame = (4 * (max_depth + 1 + locals) as usize).next_multiple_of(16);

    let mut ops = Asm::new().map_err(|e| e.to_string())?;
    let labels: Vec<DynamicLabel> = (0..n).map(|_| ops.new_dynamic_label()).collect();
    let epilogue = ops.new_dynamic_label();
    let faults: Vec<DynamicLabel> = FaultKind::ALL.iter().map(|_| ops.new_dynamic_label()).collect();
    let fault = |k: FaultKind| faults[k as usize];
    let mut edges = Edges { pays: Vec::new() };
    let copros = seg.copros_used();
    let target = |t: i64| target(seg, t);

    let start = ops.offset();
    dynasm!(ops ; .arch aarch64
        ; stp x29, x30, [sp, -96]!
        ; mov x29, sp
        ; stp x19, x20, [sp, 16]
        ; stp x21, x22, [sp, 32]
        ; stp x23, x24, [sp, 48]
        ; stp x25, x26, [sp, 64]
        ; stp x27, x28, [sp, 80]
        ; mov x19, x0
    );
    // Allocate the frame, touching each page of a large one in order so
    // that no access skips the stack's guard page.
    let mut left = frame;
    while left >= PAGE {
        dynasm!(ops ; .arch aarch64 ; sub sp, sp, 1, lsl 12 ; str xzr, [sp]);
        left -= PAGE;
    }
    dynasm!(ops ; .arch aarch64 ; sub sp, sp, left as u32 ; mov x20, sp);
    // `.push` starts with the input port on the stack.
    if seg.depth.first() == Some(&Some(1)) {
        ldr_w(&mut ops, 9, CTX, field(IN_PORT));
        put(&mut ops, 0, 9);
    }
    for (i, insn) in seg.insns.iter().enumerate() {
        dynasm!(ops ; .arch aarch64 ; =>labels[i]);
        let Some(d) = seg.depth[i].map(u32::from) else { continue };
        // The two top slots before the instruction (`a` below `b`, `t` the top).
        let (a, b, t) = (d.wrapping_sub(2), d.wrapping_sub(1), d.wrapping_sub(1));
        let o = &mut ops;
        use Opcode::*;
        match (insn.op, &insn.operands) {
            (Nop, _) | (Pop, _) => {}
            (Push, Operands::Imm(v)) => put_imm(o, d, *v),
            (Dup, _) | (Over, _) | (Pick, _) => {
                let from = match insn.operands {
                    Operands::Depth(k) => d - 1 - u32::from(k),
                    _ if insn.op == Dup => t,
                    _ => a,
                };
                get(o, 9, from);
                put(o, d, 9);
            }
            (Swap, _) => {
                get(o, 9, a);
                get(o, 10, b);
                put(o, a, 10);
                put(o, b, 9);
            }
            (Add | Sub | Mul | And | Or | Xor | Shl | Shr | Sar | Rotl | Rotr | Btest, _) => {
                get(o, 9, a);
                get(o, 10, b);
                // The variable shifts of AArch64 take the count modulo 32, as NetIL does.
                match insn.op {
                    Add => dynasm!(o ; .arch aarch64 ; add w9, w9, w10),
                    Sub => dynasm!(o ; .arch aarch64 ; sub w9, w9, w10),
                    Mul => dynasm!(o ; .arch aarch64 ; mul w9, w9, w10),
                    And => dynasm!(o ; .arch aarch64 ; and w9, w9, w10),
                    Or => dynasm!(o ; .arch aarch64 ; orr w9, w9, w10),
                    Xor => dynasm!(o ; .arch aarch64 ; eor w9, w9, w10),
                    Shl => dynasm!(o ; .arch aarch64 ; lsl w9, w9, w10),
                    Shr => dynasm!(o ; .arch aarch64 ; lsr w9, w9, w10),
                    Sar => dynasm!(o ; .arch aarch64 ; asr w9, w9, w10),
                    Rotl => dynasm!(o ; .arch aarch64 ; neg w10, w10 ; ror w9, w9, w10),
                    Rotr => dynasm!(o ; .arch aarch64 ; ror w9, w9, w10),
                    _ => dynasm!(o ; .arch aarch64 ; lsr w9, w9, w10 ; and w9, w9, 1),
                }
                put(o, a, 9);
            }
            (Bset | Bclr, _) => {
                get(o, 10, b);
                dynasm!(o ; .arch aarch64 ; movz w11, 1 ; lsl w11, w11, w10);
                get(o, 9, a);
                if insn.op == Bset {
                    dynasm!(o ; .arch aarch64 ; orr w9, w9, w11);
                } else {
                    dynasm!(o ; .arch aarch64 ; bic w9, w9, w11);
                }
                put(o, a, 9);
            }
            (Div | Mod | Sdiv | Smod, _) => {
                get(o, 10, b);
                dynasm!(o ; .arch aarch64 ; cbz w10, =>fault(FaultKind::DivByZero));
                get(o, 9, a);
                // `sdiv` does not trap: MIN / -1 is MIN, as NetIL wraps.
                if matches!(insn.op, Div | Mod) {
                    dynasm!(o ; .arch aarch64 ; udiv w11, w9, w10);
                } else {
                    dynasm!(o ; .arch aarch64 ; sdiv w11, w9, w10);
                }
                if matches!(insn.op, Mod | Smod) {
                    dynasm!(o ; .arch aarch64 ; msub w11, w11, w10, w9);
                }
                put(o, a, 11);
            }
            (Not | Neg | Bswap | Bswap16 | Clz | Ctz, _) => {
                get(o, 9, t);
                match insn.op {
                    Not => dynasm!(o ; .arch aarch64 ; mvn w9, w9),
                    Neg => dynasm!(o ; .arch aarch64 ; neg w9, w9),
                    Bswap => dynasm!(o ; .arch aarch64 ; rev w9, w9),
                    Bswap16 => dynasm!(o ; .arch aarch64 ; rev16 w9, w9 ; and w9, w9, 0xffff),
                    Clz => dynasm!(o ; .arch aarch64 ; clz w9, w9),
                    _ => dynasm!(o ; .arch aarch64 ; rbit w9, w9 ; clz w9, w9),
                }
                put(o, t, 9);
            }
            (Popcnt | Hash32, _) => {
                mov_imm(o, 0, if insn.op == Hash32 { 3 } else { 0 });
                get(o, 1, t);
                call(o, unary as *const ());
                put(o, t, 0);
            }
            (CsumUpd, _) => {
                get(o, 0, d - 3);
                get(o, 1, a);
                get(o, 2, b);
                call(o, csum_upd as *const ());
                put(o, d - 3, 0);
            }
            (op, Operands::None) if op.class() == netil::Class::Compare => {
                let c = op.condition().ok_or("a comparison without a condition")?;
                get(o, 9, a);
                get(o, 10, b);
                dynasm!(o ; .arch aarch64 ; cmp w9, w10);
                match c {
                    Cond::Eq => dynasm!(o ; .arch aarch64 ; cset w9, eq),
                    Cond::Ne => dynasm!(o ; .arch aarch64 ; cset w9, ne),
                    Cond::Lt => dynasm!(o ; .arch aarch64 ; cset w9, lo),
                    Cond::Le => dynasm!(o ; .arch aarch64 ; cset w9, ls),
                    Cond::Gt => dynasm!(o ; .arch aarch64 ; cset w9, hi),
                    Cond::Ge => dynasm!(o ; .arch aarch64 ; cset w9, hs),
                    Cond::Slt => dynasm!(o ; .arch aarch64 ; cset w9, lt),
                    Cond::Sle => dynasm!(o ; .arch aarch64 ; cset w9, le),
                    Cond::Sgt => dynasm!(o ; .arch aarch64 ; cset w9, gt),
                    Cond::Sge => dynasm!(o ; .arch aarch64 ; cset w9, ge),
                }
                put(o, a, 9);
            }
            (op, Operands::Target(tgt)) => {
                let to = target(*tgt)?;
                let dest = edges.dest(seg.edge_cost(i, to), labels[to], || o.new_dynamic_label());
                match op {
                    Jump => dynasm!(o ; .arch aarch64 ; b =>dest),
                    Jz => {
                        get(o, 9, t);
                        dynasm!(o ; .arch aarch64 ; cbz w9, =>dest);
                    }
                    Jnz => {
                        get(o, 9, t);
                        dynasm!(o ; .arch aarch64 ; cbnz w9, =>dest);
                    }
                    _ => {
                        get(o, 9, a);
                        get(o, 10, b);
                        dynasm!(o ; .arch aarch64 ; cmp w9, w10);
                        match op.condition().ok_or("a jump without a condition")? {
                            Cond::Eq => dynasm!(o ; .arch aarch64 ; b.eq =>dest),
                            Cond::Ne => dynasm!(o ; .arch aarch64 ; b.ne =>dest),
                            Cond::Lt => dynasm!(o ; .arch aarch64 ; b.lo =>dest),
                            Cond::Le => dynasm!(o ; .arch aarch64 ; b.ls =>dest),
                            Cond::Gt => dynasm!(o ; .arch aarch64 ; b.hi =>dest),
                            Cond::Ge => dynasm!(o ; .arch aarch64 ; b.hs =>dest),
                            Cond::Slt => dynasm!(o ; .arch aarch64 ; b.lt =>dest),
                            Cond::Sle => dynasm!(o ; .arch aarch64 ; b.le =>dest),
                            Cond::Sgt => dynasm!(o ; .arch aarch64 ; b.gt =>dest),
                            Cond::Sge => dynasm!(o ; .arch aarch64 ; b.ge =>dest),
                        }
                    }
                }
            }
            (Switch, Operands::Switch(table)) => {
                let mut cases = Vec::with_capacity(table.cases.len());
                for &(v, tgt) in &table.cases {
                    let to = target(tgt)?;
                    cases.push((v, edges.dest(seg.edge_cost(i, to), labels[to], || o.new_dynamic_label())));
                }
                let to = target(table.default)?;
                let default = edges.dest(seg.edge_cost(i, to), labels[to], || o.new_dynamic_label());
                get(o, 9, t);
                switch_tree(o, &cases, default);
            }
            (Ret, Operands::Port(p)) => {
                mov_imm(o, 0, u64::from(*p));
                dynasm!(o ; .arch aarch64 ; b =>epilogue);
            }
            (RetPop, _) => {
                get(o, 0, t);
                mov_imm(o, 10, u64::from(shape.out_ports));
                dynasm!(o ; .arch aarch64 ; cmp w0, w10 ; b.hs =>fault(FaultKind::BadPort) ; b =>epilogue);
            }
            (Drop | Exit, _) => {
                let code = if insn.op == Drop { Outcome::Drop.code() } else { Outcome::Exit.code() };
                mov_imm(o, 0, u64::from(code));
                dynasm!(o ; .arch aarch64 ; b =>epilogue);
            }
            (Upload8 | Upload16 | Upload32 | Iload8 | Iload16 | Iload32 | Dload8 | Dload16 | Dload32, _) => {
                let (base, len) = mem_fields(insn.op.access_memory().ok_or("a load without a memory")?);
                let w = insn.op.access_width().unwrap_or(4);
                get(o, 9, t);
                mov_imm(o, 12, u64::from(w));
                check_range(o, 9, 12, len, fault(FaultKind::Bounds));
                ldr_x(o, 11, CTX, base);
                match w {
                    1 => dynasm!(o ; .arch aarch64 ; ldrb w9, [x11, x9]),
                    2 => dynasm!(o ; .arch aarch64 ; ldrh w9, [x11, x9] ; rev16 w9, w9),
                    _ => dynasm!(o ; .arch aarch64 ; ldr w9, [x11, x9] ; rev w9, w9),
                }
                put(o, t, 9);
            }
            (Ustore8 | Ustore16 | Ustore32 | Istore8 | Istore16 | Istore32 | Dstore8 | Dstore16 | Dstore32, _) => {
                let (base, len) = mem_fields(insn.op.access_memory().ok_or("a store without a memory")?);
                let w = insn.op.access_width().unwrap_or(4);
                get(o, 9, a);
                mov_imm(o, 12, u64::from(w));
                check_range(o, 9, 12, len, fault(FaultKind::Bounds));
                ldr_x(o, 11, CTX, base);
                get(o, 10, b);
                match w {
                    1 => dynasm!(o ; .arch aarch64 ; strb w10, [x11, x9]),
                    2 => dynasm!(o ; .arch aarch64 ; rev16 w10, w10 ; strh w10, [x11, x9]),
                    _ => dynasm!(o ; .arch aarch64 ; rev w10, w10 ; str w10, [x11, x9]),
                }
            }
            (Pktlen | Wirelen | Inport | TstampS | TstampNs, _) => {
                let f = match insn.op {
                    Pktlen => PKT_LEN,
                    Wirelen => WIRE_LEN,
                    Inport => IN_PORT,
                    TstampS => TS_SEC,
                    _ => TS_NSEC,
                };
                // The low 32 bits of the field (little-endian).
                ldr_w(o, 9, CTX, field(f));
                put(o, d, 9);
            }
            (Locload, Operands::Local(l)) => {
                ldr_w(o, 9, FRAME, local(*l));
                put(o, d, 9);
            }
            (Locstore, Operands::Local(l)) => {
                get(o, 9, t);
                str_w(o, 9, FRAME, local(*l));
            }
            (Mcopy, Operands::MemPair(s, dm)) => {
                let ((sbase, slen), (dbase, dlen)) = (mem_fields(*s), mem_fields(*dm));
                get(o, 12, d - 1);
                get(o, 9, d - 2);
                check_range(o, 9, 12, slen, fault(FaultKind::Bounds));
                get(o, 10, d - 3);
                check_range(o, 10, 12, dlen, fault(FaultKind::Bounds));
                ldr_x(o, 1, CTX, sbase);
                ldr_x(o, 0, CTX, dbase);
                dynasm!(o ; .arch aarch64 ; add x1, x1, x9 ; add x0, x0, x10 ; mov x2, x12);
                call(o, move_bytes as *const ());
            }
            (Crc32 | Hash | Csum, Operands::Mem(m)) => {
                let helper = match insn.op {
                    Crc32 => netvm_rt_crc32 as *const (),
                    Hash => netvm_rt_murmur3 as *const (),
                    _ => netvm_rt_csum as *const (),
                };
                let (base, len) = mem_fields(*m);
                get(o, 9, a);
                get(o, 10, b);
                check_range(o, 9, 10, len, fault(FaultKind::Bounds));
                ldr_x(o, 0, CTX, base);
                dynasm!(o ; .arch aarch64 ; add x0, x0, x9 ; mov x1, x10);
                call(o, helper);
                put(o, a, 0);
            }
            (CoproIn, Operands::CoproReg { copro, reg }) => {
                let (slow, done) = (o.new_dynamic_label(), o.new_dynamic_label());
                if *reg < 32 {
                    regfile_pointer(o, *copro, FILE_INPUTS, *reg, FILE_INPUT, slow);
                    get(o, 10, t);
                    dynasm!(o ; .arch aarch64 ; str w10, [x9, 4 * u32::from(*reg)] ; b =>done);
                }
                dynasm!(o ; .arch aarch64 ; =>slow);
                ldr_x(o, 0, CTX, field(COPROS));
                ldr_x(o, 1, CTX, field(NCOPROS));
                mov_imm(o, 2, u64::from(*copro));
                mov_imm(o, 3, u64::from(*reg));
                get(o, 4, t);
                call(o, netvm_rt_copro_in as *const ());
                dynasm!(o ; .arch aarch64 ; cbnz w0, =>fault(FaultKind::Copro) ; =>done);
            }
            (CoproOut, Operands::CoproReg { copro, reg }) => {
                let (slow, done) = (o.new_dynamic_label(), o.new_dynamic_label());
                if *reg < 32 {
                    regfile_pointer(o, *copro, FILE_OUTPUTS, *reg, FILE_OUTPUT, slow);
                    dynasm!(o ; .arch aarch64 ; ldr w9, [x9, 4 * u32::from(*reg)] ; b =>done);
                }
                dynasm!(o ; .arch aarch64 ; =>slow);
                ldr_x(o, 0, CTX, field(COPROS));
                ldr_x(o, 1, CTX, field(NCOPROS));
                mov_imm(o, 2, u64::from(*copro));
                mov_imm(o, 3, u64::from(*reg));
                call(o, netvm_rt_copro_out as *const ());
                dynasm!(o ; .arch aarch64 ; lsr x10, x0, 32 ; cbnz x10, =>fault(FaultKind::Copro) ; mov w9, w0 ; =>done);
                put(o, d, 9);
            }
            (CoproInvoke, Operands::CoproOp { copro, op }) => {
                let (slow, done) = (o.new_dynamic_label(), o.new_dynamic_label());
                if *op < 32 {
                    // The direct entry: (instance, packet, its length, seconds, nanoseconds).
                    let at = DIRECT_SIZE * u32::from(*op);
                    regfile_pointer(o, *copro, FILE_OPS, *op, FILE_DIRECT, slow);
                    ldr_x(o, 0, 9, at + DIRECT_THIS);
                    ldr_x(o, 16, 9, at + DIRECT_CALL);
                    ldr_x(o, 1, CTX, field(PKT));
                    ldr_x(o, 2, CTX, field(PKT_LEN));
                    ldr_x(o, 3, CTX, field(TS_SEC));
                    ldr_w(o, 4, CTX, field(TS_NSEC));
                    dynasm!(o ; .arch aarch64 ; blr x16 ; cbnz w0, =>fault(FaultKind::Copro) ; b =>done);
                }
                dynasm!(o ; .arch aarch64 ; =>slow);
                // Eight arguments in registers, three on the stack (32 bytes keep sp aligned).
                dynasm!(o ; .arch aarch64 ; sub sp, sp, 32);
                ldr_x(o, 9, CTX, field(TS_SEC));
                ldr_w(o, 10, CTX, field(TS_NSEC));
                ldr_x(o, 11, CTX, field(SEQ));
                dynasm!(o ; .arch aarch64 ; str x9, [sp] ; str x10, [sp, 8] ; str x11, [sp, 16]);
                ldr_x(o, 0, CTX, field(COPROS));
                ldr_x(o, 1, CTX, field(NCOPROS));
                mov_imm(o, 2, u64::from(*copro));
                mov_imm(o, 3, u64::from(*op));
                ldr_x(o, 4, CTX, field(PKT));
                ldr_x(o, 5, CTX, field(PKT_LEN));
                ldr_x(o, 6, CTX, field(INFO));
                ldr_x(o, 7, CTX, field(INFO_LEN));
                call(o, netvm_rt_copro_invoke as *const ());
                dynasm!(o ; .arch aarch64 ; add sp, sp, 32 ; cbnz w0, =>fault(FaultKind::Copro) ; =>done);
            }
            (op, _) => return Err(format!("`{}` with operands {:?}: not a verified instruction", op.mnemonic(), insn.operands)),
        }
    }
    // Verified code never runs past its end; the epilogue, the stubs that
    // pay for edges, and the exits.
    dynasm!(ops ; .arch aarch64
        ; =>epilogue
        ; mov sp, x29
        ; ldp x19, x20, [sp, 16]
        ; ldp x21, x22, [sp, 32]
        ; ldp x23, x24, [sp, 48]
        ; ldp x25, x26, [sp, 64]
        ; ldp x27, x28, [sp, 80]
        ; ldp x29, x30, [sp], 96
        ; ret
    );
    for (pay, cost, to) in std::mem::take(&mut edges.pays) {
        dynasm!(ops ; .arch aarch64 ; =>pay);
        ldr_x(&mut ops, 9, CTX, field(BUDGET_LEFT));
        mov_imm(&mut ops, 10, cost);
        dynasm!(ops ; .arch aarch64 ; cmp x9, x10 ; b.lo =>fault(FaultKind::Budget) ; sub x9, x9, x10);
        dynasm!(ops ; .arch aarch64 ; str x9, [x19, field(BUDGET_LEFT)] ; b =>to);
    }
    for k in FaultKind::ALL {
        dynasm!(ops ; .arch aarch64 ; =>fault(k));
        mov_imm(&mut ops, 0, u64::from(k.code()));
        dynasm!(ops ; .arch aarch64 ; b =>epilogue);
    }
    let buf = ops.finalize().map_err(|_| "the assembler could not finish".to_string())?;
    Ok(Handler::new(buf, start, frame, copros))
}
