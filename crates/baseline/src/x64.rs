//! The x86-64 templates and the helpers generated code calls.

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

/// Where bit `bit` of the mask at `mask` of instance `copro`'s register
/// file is set, the pointer at `field` of that file into `rax`; jumps to
/// `call` where it is not (or the context has no file for the instance).
fn regfile_pointer(ops: &mut dynasmrt::x64::Assembler, copro: u8, mask: u32, bit: u8, field: u32, call: DynamicLabel) {
    let (file, mask, field) = ((FILE_SIZE * u32::from(copro)) as i32, mask as i32, field as i32);
    dynasm!(ops ; .arch x64
        ; cmp QWORD [rbx + NREGS], i32::from(copro) ; jbe =>call
        ; mov rax, [rbx + REGS]
        ; test DWORD [rax + file + mask], 1i32 << bit ; jz =>call
        ; mov rax, [rax + file + field]
    );
}

/// The stack's page size, for probing large frames.
const PAGE: usize = 4096;

/// The registers that hold the lowest stack slots: slot `d` is
/// `SLOT_REGS[d]` (r13d, r14d, r15d, ebp: callee-saved, so helper calls
/// keep them), the slots above live in the frame. The SNAP JIT paper's §IV
/// maps the stack onto registers the same way, by fixed depth.
const SLOT_REGS: [u8; 4] = [13, 14, 15, 5];

/// Scratch registers of the templates, by number.
const EAX: u8 = 0;
const ECX: u8 = 1;
const EDX: u8 = 2;
const ESI: u8 = 6;
const EDI: u8 = 7;
const R8D: u8 = 8;

/// Slot `d` in the frame, relative to `r12` (for `d` past the registers).
fn slot(d: u32) -> i32 {
    4 * d as i32
}

/// Loads slot `d` into register `dst`.
// dynasm's dynamic registers convert their `u8` number with `.into()`.
#[allow(clippy::useless_conversion)]
fn get(ops: &mut dynasmrt::x64::Assembler, dst: u8, d: u32) {
    match SLOT_REGS.get(d as usize) {
        Some(&r) => dynasm!(ops ; .arch x64 ; mov Rd(dst), Rd(r)),
        None => dynasm!(ops ; .arch x64 ; mov Rd(dst), [r12 + slot(d)]),
    }
}

/// Stores register `src` into slot `d`.
// dynasm's dynamic registers convert their `u8` number with `.into()`.
#[allow(clippy::useless_conversion)]
fn put(ops: &mut dynasmrt::x64::Assembler, d: u32, src: u8) {
    match SLOT_REGS.get(d as usize) {
        Some(&r) => dynasm!(ops ; .arch x64 ; mov Rd(r), Rd(src)),
        None => dynasm!(ops ; .arch x64 ; mov [r12 + slot(d)], Rd(src)),
    }
}

/// Stores `v` into slot `d`.
// dynasm's dynamic registers convert their `u8` number with `.into()`.
#[allow(clippy::useless_conversion)]
fn put_imm(ops: &mut dynasmrt::x64::Assembler, d: u32, v: i32) {
    match SLOT_REGS.get(d as usize) {
        Some(&r) => dynasm!(ops ; .arch x64 ; mov Rd(r), v),
        None => dynasm!(ops ; .arch x64 ; mov DWORD [r12 + slot(d)], v),
    }
}

/// The context's fields for a memory's base and length.
fn mem_fields(m: Mem) -> (i32, i32) {
    match m {
        Mem::Packet => (PKT, PKT_LEN),
        Mem::Info => (INFO, INFO_LEN),
        Mem::Data => (DATA, DATA_LEN),
    }
}

runtime_helpers!("sysv64");

/// A switch over `eax`: a binary search over the ascending `cases`.
fn switch_tree(ops: &mut dynasmrt::x64::Assembler, cases: &[(u32, DynamicLabel)], default: DynamicLabel) {
    if cases.len() <= 4 {
        for &(v, l) in cases {
            dynasm!(ops ; .arch x64 ; cmp eax, v as i32 ; je =>l);
        }
        dynasm!(ops ; .arch x64 ; jmp =>default);
        return;
    }
    let mid = cases.len() / 2;
    let (v, l) = cases[mid];
    let above = ops.new_dynamic_label();
    dynasm!(ops ; .arch x64 ; cmp eax, v as i32 ; je =>l ; ja =>above);
    switch_tree(ops, &cases[..mid], default);
    dynasm!(ops ; .arch x64 ; =>above);
    switch_tree(ops, &cases[mid + 1..], default);
}

/// Compiles one verified segment (or code another verifier checked to the
/// same guarantees: every reachable instruction has its depth, every
/// target is an instruction, the stack stays within its slots, every local
/// is written before it is read, coprocessor indices name coprocessors).
pub fn compile_segment(seg: &SegmentInfo, shape: Shape) -> Result<Handler, String> {
    let n = seg.insns.len();
    // Slots in use (one spare above the deepest), then the locals.
    let (max_depth, locals) = slots_and_locals(seg);
    let locals_base = 4 * (max_depth as i32 + 1);
    let local = |l: u16| locals_base + 4 * i32::from(l);
    // The frame: slots and locals; six pushes leave rsp 8 bytes off a
    // multiple of 16, and the frame restores the alignment calls need.
    let frame = (4 * (max_depth + 1 + locals) as usize).next_multiple_of(16) + 8;

    let mut ops = dynasmrt::x64::Assembler::new().map_err(|e| e.to_string())?;
    let labels: Vec<DynamicLabel> = (0..n).map(|_| ops.new_dynamic_label()).collect();
    let epilogue = ops.new_dynamic_label();
    let faults: Vec<DynamicLabel> = FaultKind::ALL.iter().map(|_| ops.new_dynamic_label()).collect();
    let fault = |k: FaultKind| faults[k as usize];
    let mut edges = Edges { pays: Vec::new() };
    let copros = seg.copros_used();
    let target = |t: i64| target(seg, t);

    let start = ops.offset();
    dynasm!(ops ; .arch x64
        ; push rbx ; push r12 ; push r13 ; push r14 ; push r15 ; push rbp
        ; mov rbx, rdi
    );
    // Allocate the frame, touching each page of a large one in order so
    // that no access skips the stack's guard page.
    let mut left = frame;
    while left > PAGE {
        dynasm!(ops ; .arch x64 ; sub rsp, PAGE as i32 ; or DWORD [rsp], 0);
        left -= PAGE;
    }
    dynasm!(ops ; .arch x64 ; sub rsp, left as i32 ; mov r12, rsp);
    // `.push` starts with the input port on the stack.
    if seg.depth.first() == Some(&Some(1)) {
        dynasm!(ops ; .arch x64 ; mov eax, [rbx + IN_PORT]);
        put(&mut ops, 0, EAX);
    }
    for (i, insn) in seg.insns.iter().enumerate() {
        dynasm!(ops ; .arch x64 ; =>labels[i]);
        let Some(d) = seg.depth[i].map(u32::from) else { continue };
        // The two top slots before the instruction (`a` below `b`, `t` the top).
        let (a, b, t) = (d.wrapping_sub(2), d.wrapping_sub(1), d.wrapping_sub(1));
        let o = &mut ops;
        use Opcode::*;
        match (insn.op, &insn.operands) {
            (Nop, _) | (Pop, _) => {}
            (Push, Operands::Imm(v)) => put_imm(o, d, *v as i32),
            (Dup, _) | (Over, _) | (Pick, _) => {
                let from = match insn.operands {
                    Operands::Depth(k) => d - 1 - u32::from(k),
                    _ if insn.op == Dup => t,
                    _ => a,
                };
                get(o, EAX, from);
                put(o, d, EAX);
            }
            (Swap, _) => {
                get(o, EAX, a);
                get(o, ECX, b);
                put(o, a, ECX);
                put(o, b, EAX);
            }
            (Add | Sub | Mul | And | Or | Xor | Shl | Shr | Sar | Rotl | Rotr | Btest, _) => {
                get(o, EAX, a);
                get(o, ECX, b);
                // x86 masks a 32-bit shift count to 5 bits, as NetIL does.
                match insn.op {
                    Add => dynasm!(o ; .arch x64 ; add eax, ecx),
                    Sub => dynasm!(o ; .arch x64 ; sub eax, ecx),
                    Mul => dynasm!(o ; .arch x64 ; imul eax, ecx),
                    And => dynasm!(o ; .arch x64 ; and eax, ecx),
                    Or => dynasm!(o ; .arch x64 ; or eax, ecx),
                    Xor => dynasm!(o ; .arch x64 ; xor eax, ecx),
                    Shl => dynasm!(o ; .arch x64 ; shl eax, cl),
                    Shr => dynasm!(o ; .arch x64 ; shr eax, cl),
                    Sar => dynasm!(o ; .arch x64 ; sar eax, cl),
                    Rotl => dynasm!(o ; .arch x64 ; rol eax, cl),
                    Rotr => dynasm!(o ; .arch x64 ; ror eax, cl),
                    _ => dynasm!(o ; .arch x64 ; shr eax, cl ; and eax, 1),
                }
                put(o, a, EAX);
            }
            (Bset | Bclr, _) => {
                get(o, ECX, b);
                dynasm!(o ; .arch x64 ; mov edx, 1 ; shl edx, cl);
                get(o, EAX, a);
                if insn.op == Bset {
                    dynasm!(o ; .arch x64 ; or eax, edx);
                } else {
                    dynasm!(o ; .arch x64 ; not edx ; and eax, edx);
                }
                put(o, a, EAX);
            }
            (Div | Mod, _) => {
                get(o, ECX, b);
                dynasm!(o ; .arch x64 ; test ecx, ecx ; jz =>fault(FaultKind::DivByZero));
                get(o, EAX, a);
                dynasm!(o ; .arch x64 ; xor edx, edx ; div ecx);
                put(o, a, if insn.op == Div { EAX } else { EDX });
            }
            (Sdiv | Smod, _) => {
                let (normal, done) = (o.new_dynamic_label(), o.new_dynamic_label());
                get(o, ECX, b);
                dynasm!(o ; .arch x64 ; test ecx, ecx ; jz =>fault(FaultKind::DivByZero) ; cmp ecx, -1 ; jne =>normal);
                // x / -1 = -x (wrapping: MIN stays MIN), x % -1 = 0, without idiv's trap.
                if insn.op == Sdiv {
                    get(o, EAX, a);
                    dynasm!(o ; .arch x64 ; neg eax);
                    put(o, a, EAX);
                } else {
                    put_imm(o, a, 0);
                }
                dynasm!(o ; .arch x64 ; jmp =>done ; =>normal);
                get(o, EAX, a);
                dynasm!(o ; .arch x64 ; cdq ; idiv ecx);
                put(o, a, if insn.op == Sdiv { EAX } else { EDX });
                dynasm!(o ; .arch x64 ; =>done);
            }
            (Not | Neg | Bswap | Bswap16, _) => {
                get(o, EAX, t);
                match insn.op {
                    Not => dynasm!(o ; .arch x64 ; not eax),
                    Neg => dynasm!(o ; .arch x64 ; neg eax),
                    Bswap => dynasm!(o ; .arch x64 ; bswap eax),
                    _ => dynasm!(o ; .arch x64 ; rol ax, 8 ; movzx eax, ax),
                }
                put(o, t, EAX);
            }
            (Popcnt | Clz | Ctz | Hash32, _) => {
                let which = match insn.op {
                    Popcnt => 0,
                    Clz => 1,
                    Ctz => 2,
                    _ => 3,
                };
                get(o, ESI, t);
                dynasm!(o ; .arch x64 ; mov edi, which ; mov rax, QWORD unary as *const () as i64 ; call rax);
                put(o, t, EAX);
            }
            (CsumUpd, _) => {
                let c = d - 3;
                get(o, EDI, c);
                get(o, ESI, a);
                get(o, EDX, b);
                dynasm!(o ; .arch x64 ; mov rax, QWORD csum_upd as *const () as i64 ; call rax);
                put(o, c, EAX);
            }
            (op, Operands::None) if op.class() == netil::Class::Compare => {
                let c = op.condition().ok_or("a comparison without a condition")?;
                get(o, EAX, a);
                get(o, ECX, b);
                dynasm!(o ; .arch x64 ; cmp eax, ecx);
                match c {
                    Cond::Eq => dynasm!(o ; .arch x64 ; sete al),
                    Cond::Ne => dynasm!(o ; .arch x64 ; setne al),
                    Cond::Lt => dynasm!(o ; .arch x64 ; setb al),
                    Cond::Le => dynasm!(o ; .arch x64 ; setbe al),
                    Cond::Gt => dynasm!(o ; .arch x64 ; seta al),
                    Cond::Ge => dynasm!(o ; .arch x64 ; setae al),
                    Cond::Slt => dynasm!(o ; .arch x64 ; setl al),
                    Cond::Sle => dynasm!(o ; .arch x64 ; setle al),
                    Cond::Sgt => dynasm!(o ; .arch x64 ; setg al),
                    Cond::Sge => dynasm!(o ; .arch x64 ; setge al),
                }
                dynasm!(o ; .arch x64 ; movzx eax, al);
                put(o, a, EAX);
            }
            (op, Operands::Target(tgt)) => {
                let to = target(*tgt)?;
                let dest = edges.dest(seg.edge_cost(i, to), labels[to], || o.new_dynamic_label());
                match op {
                    Jump => dynasm!(o ; .arch x64 ; jmp =>dest),
                    Jz | Jnz => {
                        get(o, EAX, t);
                        if op == Jz {
                            dynasm!(o ; .arch x64 ; test eax, eax ; je =>dest);
                        } else {
                            dynasm!(o ; .arch x64 ; test eax, eax ; jne =>dest);
                        }
                    }
                    _ => {
                        get(o, EAX, a);
                        get(o, ECX, b);
                        dynasm!(o ; .arch x64 ; cmp eax, ecx);
                        match op.condition().ok_or("a jump without a condition")? {
                            Cond::Eq => dynasm!(o ; .arch x64 ; je =>dest),
                            Cond::Ne => dynasm!(o ; .arch x64 ; jne =>dest),
                            Cond::Lt => dynasm!(o ; .arch x64 ; jb =>dest),
                            Cond::Le => dynasm!(o ; .arch x64 ; jbe =>dest),
                            Cond::Gt => dynasm!(o ; .arch x64 ; ja =>dest),
                            Cond::Ge => dynasm!(o ; .arch x64 ; jae =>dest),
                            Cond::Slt => dynasm!(o ; .arch x64 ; jl =>dest),
                            Cond::Sle => dynasm!(o ; .arch x64 ; jle =>dest),
                            Cond::Sgt => dynasm!(o ; .arch x64 ; jg =>dest),
                            Cond::Sge => dynasm!(o ; .arch x64 ; jge =>dest),
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
                get(o, EAX, t);
                switch_tree(o, &cases, default);
            }
            (Ret, Operands::Port(p)) => dynasm!(o ; .arch x64 ; mov eax, i32::from(*p) ; jmp =>epilogue),
            (RetPop, _) => {
                get(o, EAX, t);
                dynasm!(o ; .arch x64 ; cmp eax, i32::from(shape.out_ports) ; jae =>fault(FaultKind::BadPort) ; jmp =>epilogue);
            }
            (Drop, _) => dynasm!(o ; .arch x64 ; mov eax, Outcome::Drop.code() as i32 ; jmp =>epilogue),
            (Exit, _) => dynasm!(o ; .arch x64 ; mov eax, Outcome::Exit.code() as i32 ; jmp =>epilogue),
            (Upload8 | Upload16 | Upload32 | Iload8 | Iload16 | Iload32 | Dload8 | Dload16 | Dload32, _) => {
                let (base, len) = mem_fields(insn.op.access_memory().ok_or("a load without a memory")?);
                let w = insn.op.access_width().unwrap_or(4) as i32;
                get(o, EAX, t);
                dynasm!(o ; .arch x64
                    ; lea rcx, [rax + w] ; cmp rcx, [rbx + len] ; ja =>fault(FaultKind::Bounds)
                    ; mov rdx, [rbx + base]
                );
                match w {
                    1 => dynasm!(o ; .arch x64 ; movzx eax, BYTE [rdx + rax]),
                    2 => dynasm!(o ; .arch x64 ; movzx eax, WORD [rdx + rax] ; rol ax, 8 ; movzx eax, ax),
                    _ => dynasm!(o ; .arch x64 ; mov eax, [rdx + rax] ; bswap eax),
                }
                put(o, t, EAX);
            }
            (Ustore8 | Ustore16 | Ustore32 | Istore8 | Istore16 | Istore32 | Dstore8 | Dstore16 | Dstore32, _) => {
                let (base, len) = mem_fields(insn.op.access_memory().ok_or("a store without a memory")?);
                let w = insn.op.access_width().unwrap_or(4) as i32;
                get(o, EAX, a);
                dynasm!(o ; .arch x64
                    ; lea rcx, [rax + w] ; cmp rcx, [rbx + len] ; ja =>fault(FaultKind::Bounds)
                    ; mov rdx, [rbx + base]
                );
                get(o, ECX, b);
                match w {
                    1 => dynasm!(o ; .arch x64 ; mov [rdx + rax], cl),
                    2 => dynasm!(o ; .arch x64 ; rol cx, 8 ; mov [rdx + rax], cx),
                    _ => dynasm!(o ; .arch x64 ; bswap ecx ; mov [rdx + rax], ecx),
                }
            }
            (Pktlen | Wirelen | Inport | TstampS | TstampNs, _) => {
                let field = match insn.op {
                    Pktlen => PKT_LEN,
                    Wirelen => WIRE_LEN,
                    Inport => IN_PORT,
                    TstampS => TS_SEC,
                    _ => TS_NSEC,
                };
                dynasm!(o ; .arch x64 ; mov eax, [rbx + field]);
                put(o, d, EAX);
            }
            (Locload, Operands::Local(l)) => {
                dynasm!(o ; .arch x64 ; mov eax, [r12 + local(*l)]);
                put(o, d, EAX);
            }
            (Locstore, Operands::Local(l)) => {
                get(o, EAX, t);
                dynasm!(o ; .arch x64 ; mov [r12 + local(*l)], eax);
            }
            (Mcopy, Operands::MemPair(s, dm)) => {
                let ((sbase, slen), (dbase, dlen)) = (mem_fields(*s), mem_fields(*dm));
                get(o, R8D, d - 1);
                get(o, EAX, d - 2);
                dynasm!(o ; .arch x64 ; lea rdx, [rax + r8] ; cmp rdx, [rbx + slen] ; ja =>fault(FaultKind::Bounds));
                get(o, ECX, d - 3);
                dynasm!(o ; .arch x64
                    ; lea rdx, [rcx + r8] ; cmp rdx, [rbx + dlen] ; ja =>fault(FaultKind::Bounds)
                    ; mov rsi, [rbx + sbase] ; add rsi, rax ; mov rdi, [rbx + dbase] ; add rdi, rcx ; mov rdx, r8
                    ; mov rax, QWORD move_bytes as *const () as i64 ; call rax
                );
            }
            (Crc32 | Hash | Csum, Operands::Mem(m)) => {
                let helper = match insn.op {
                    Crc32 => netvm_rt_crc32 as *const (),
                    Hash => netvm_rt_murmur3 as *const (),
                    _ => netvm_rt_csum as *const (),
                };
                let (base, len) = mem_fields(*m);
                get(o, EAX, a);
                get(o, ECX, b);
                dynasm!(o ; .arch x64
                    ; lea rdx, [rax + rcx] ; cmp rdx, [rbx + len] ; ja =>fault(FaultKind::Bounds)
                    ; mov rdi, [rbx + base] ; add rdi, rax ; mov rsi, rcx
                    ; mov rax, QWORD helper as i64 ; call rax
                );
                put(o, a, EAX);
            }
            (CoproIn, Operands::CoproReg { copro, reg }) => {
                let (call, done) = (o.new_dynamic_label(), o.new_dynamic_label());
                if *reg < 32 {
                    regfile_pointer(o, *copro, FILE_INPUTS, *reg, FILE_INPUT, call);
                    get(o, ECX, t);
                    dynasm!(o ; .arch x64 ; mov [rax + 4 * i32::from(*reg)], ecx ; jmp =>done);
                }
                dynasm!(o ; .arch x64
                    ; =>call
                    ; mov rdi, [rbx + COPROS] ; mov rsi, [rbx + NCOPROS] ; mov edx, i32::from(*copro) ; mov ecx, i32::from(*reg)
                );
                get(o, R8D, t);
                dynasm!(o ; .arch x64
                    ; mov rax, QWORD netvm_rt_copro_in as *const () as i64 ; call rax ; test eax, eax ; jnz =>fault(FaultKind::Copro)
                    ; =>done
                );
            }
            (CoproOut, Operands::CoproReg { copro, reg }) => {
                let (call, done) = (o.new_dynamic_label(), o.new_dynamic_label());
                if *reg < 32 {
                    regfile_pointer(o, *copro, FILE_OUTPUTS, *reg, FILE_OUTPUT, call);
                    dynasm!(o ; .arch x64 ; mov eax, [rax + 4 * i32::from(*reg)] ; jmp =>done);
                }
                dynasm!(o ; .arch x64
                    ; =>call
                    ; mov rdi, [rbx + COPROS] ; mov rsi, [rbx + NCOPROS] ; mov edx, i32::from(*copro) ; mov ecx, i32::from(*reg)
                    ; mov rax, QWORD netvm_rt_copro_out as *const () as i64 ; call rax
                    ; mov rcx, rax ; shr rcx, 32 ; jnz =>fault(FaultKind::Copro)
                    ; =>done
                );
                put(o, d, EAX);
            }
            (CoproInvoke, Operands::CoproOp { copro, op }) => {
                let (call, done) = (o.new_dynamic_label(), o.new_dynamic_label());
                if *op < 32 {
                    // The direct entry: (instance, packet, its length, seconds, nanoseconds).
                    let (at, this, entry) = ((DIRECT_SIZE * u32::from(*op)) as i32, DIRECT_THIS as i32, DIRECT_CALL as i32);
                    regfile_pointer(o, *copro, FILE_OPS, *op, FILE_DIRECT, call);
                    dynasm!(o ; .arch x64
                        ; mov rdi, [rax + at + this] ; mov rsi, [rbx + PKT] ; mov rdx, [rbx + PKT_LEN]
                        ; mov rcx, [rbx + TS_SEC] ; mov r8d, [rbx + TS_NSEC]
                        ; call QWORD [rax + at + entry]
                        ; test eax, eax ; jnz =>fault(FaultKind::Copro) ; jmp =>done
                    );
                }
                dynasm!(o ; .arch x64
                    ; =>call
                    // Six arguments in registers, five on the stack (48 bytes keep rsp aligned).
                    ; sub rsp, 48
                    ; mov rax, [rbx + INFO] ; mov [rsp], rax
                    ; mov rax, [rbx + INFO_LEN] ; mov [rsp + 8], rax
                    ; mov rax, [rbx + TS_SEC] ; mov [rsp + 16], rax
                    ; mov eax, [rbx + TS_NSEC] ; mov [rsp + 24], rax
                    ; mov rax, [rbx + SEQ] ; mov [rsp + 32], rax
                    ; mov rdi, [rbx + COPROS] ; mov rsi, [rbx + NCOPROS] ; mov edx, i32::from(*copro) ; mov ecx, i32::from(*op)
                    ; mov r8, [rbx + PKT] ; mov r9, [rbx + PKT_LEN]
                    ; mov rax, QWORD netvm_rt_copro_invoke as *const () as i64 ; call rax
                    ; add rsp, 48
                    ; test eax, eax ; jnz =>fault(FaultKind::Copro)
                    ; =>done
                );
            }
            (op, _) => return Err(format!("`{}` with operands {:?}: not a verified instruction", op.mnemonic(), insn.operands)),
        }
    }
    // Verified code never runs past its end; the epilogue, the stubs that
    // pay for edges, and the exits.
    dynasm!(ops ; .arch x64
        ; =>epilogue ; lea rsp, [r12 + frame as i32] ; pop rbp ; pop r15 ; pop r14 ; pop r13 ; pop r12 ; pop rbx ; ret
    );
    for (pay, cost, to) in std::mem::take(&mut edges.pays) {
        if let Ok(c) = i32::try_from(cost) {
            dynasm!(ops ; .arch x64 ; =>pay ; cmp QWORD [rbx + BUDGET_LEFT], c ; jb =>fault(FaultKind::Budget) ; sub QWORD [rbx + BUDGET_LEFT], c ; jmp =>to);
        } else {
            dynasm!(ops ; .arch x64
                ; =>pay ; mov rax, QWORD cost as i64 ; cmp [rbx + BUDGET_LEFT], rax ; jb =>fault(FaultKind::Budget) ; sub [rbx + BUDGET_LEFT], rax ; jmp =>to
            );
        }
    }
    for k in FaultKind::ALL {
        dynasm!(ops ; .arch x64 ; =>fault(k) ; mov eax, k.code() as i32 ; jmp =>epilogue);
    }
    let buf = ops.finalize().map_err(|_| "the assembler could not finish".to_string())?;
    Ok(Handler::new(buf, start, frame, copros))
}
