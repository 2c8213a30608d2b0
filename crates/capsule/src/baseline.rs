//! The baseline compiler (docs/capsules.md §4): verified capsule code to
//! x86-64 machine code in one pass, in microseconds, as the SNAP JIT paper's
//! §IV compiles SNAP: every instruction has one fixed stack depth (the
//! capsule verifier guarantees it), so stack slot `d` is a fixed place and
//! an instruction becomes a short fixed template over its slots: no
//! register allocation, no optimisation, no intermediate form.
//!
//! The slots, the locals and what the code reads of the packet live in a
//! [`Frame`] the generated function gets in `rdi` and keeps in `rbx`; every
//! other register is scratch. Packet and scratchpad accesses are checked
//! against their lengths; division by zero, a refused backward edge, a bad
//! `ret.pop` port and a coprocessor error leave with the fault's code, as
//! every engine does (docs/netil.md §2.6); a taken backward edge charges
//! the capsule weights of what it repeats (docs/capsules.md §2.3).
//! Coprocessor accesses, `popcnt`, `clz`, `ctz`, `hash32` and `csum.upd`
//! call small helpers. Other architectures have no baseline tier: `compile`
//! says so, and the node keeps interpreting or uses Cranelift.

use std::sync::Arc;

use netvm_vm::{Limits, Outcome, PeCode, PeState, XbView};

use crate::profile::CostModel;

/// What generated code reads and writes, at fixed offsets.
#[repr(C)]
pub struct Frame {
    /// The operand stack's slots (one more than the profile allows: the
    /// `ret.pop` and store templates never use it, but keep offsets simple).
    pub stack: [u32; 18],
    /// The locals.
    pub locals: [u32; 16],
    /// Packet memory.
    pub pkt: *mut u8,
    /// Its length.
    pub pkt_len: u64,
    /// Info memory (the scratchpad).
    pub info: *mut u8,
    /// Its length.
    pub info_len: u64,
    /// Budget left.
    pub budget: u64,
    /// The packet's time, seconds.
    pub ts_sec: u64,
    /// The packet's time, nanoseconds.
    pub ts_nsec: u32,
    /// The input port (`inport`).
    pub in_port: u32,
    /// Length on the wire (`wirelen`).
    pub wire_len: u32,
    /// Padding.
    pub _pad: u32,
    /// The NetPE state (coprocessors) the helpers reach.
    pub state: *mut PeState,
    /// The packet's sequence number (the coprocessors' context).
    pub seq: u64,
}

/// Baseline-compiled code: an executable buffer and its entry.
pub struct BaselineCode {
    #[cfg(target_arch = "x86_64")]
    buf: dynasmrt::ExecutableBuffer,
    #[cfg(target_arch = "x86_64")]
    entry: dynasmrt::AssemblyOffset,
    /// Bytes of machine code.
    pub size: usize,
}

impl std::fmt::Debug for BaselineCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BaselineCode").field("size", &self.size).finish()
    }
}

impl PeCode for BaselineCode {
    fn init(&self, _state: &mut PeState, _limits: &Limits) -> Outcome {
        Outcome::Exit
    }

    #[cfg(target_arch = "x86_64")]
    fn push(&self, state: &mut PeState, xb: &mut XbView<'_>, in_port: u16, limits: &Limits) -> Outcome {
        let mut frame = Frame {
            stack: [0; 18],
            locals: [0; 16],
            pkt: xb.packet.as_mut_ptr(),
            pkt_len: xb.packet.len() as u64,
            info: xb.info.as_mut_ptr(),
            info_len: xb.info.len() as u64,
            budget: limits.budget,
            ts_sec: xb.ts.sec,
            ts_nsec: xb.ts.nsec,
            in_port: u32::from(in_port),
            wire_len: xb.wire_len,
            _pad: 0,
            state,
            seq: xb.seq,
        };
        let f: extern "sysv64" fn(*mut Frame) -> u32 =
            // SAFETY: `entry` is the start of the function `compile`
            // assembled into `buf`, which lives as long as `self`; its
            // signature is this one (a frame pointer in rdi, the outcome's
            // code in eax, the System V convention).
            unsafe { std::mem::transmute(self.buf.ptr(self.entry)) };
        let code = f(&mut frame);
        // SAFETY: `frame.state` is the `state` borrowed for this call.
        let state = unsafe { &mut *frame.state };
        state.budget_used += limits.budget - frame.budget;
        Outcome::from_code(code)
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn push(&self, _state: &mut PeState, _xb: &mut XbView<'_>, _in_port: u16, _limits: &Limits) -> Outcome {
        unreachable!("no baseline code is compiled on this architecture")
    }
}

/// Compiles verified capsule code from `entry` with the weights of `costs`.
#[cfg(not(target_arch = "x86_64"))]
pub fn compile(_code: &[u8], _entry: u16, _costs: &CostModel) -> Result<Arc<BaselineCode>, String> {
    Err("no baseline compiler for this architecture".into())
}

#[cfg(target_arch = "x86_64")]
pub use x64::compile;

#[cfg(target_arch = "x86_64")]
mod x64 {
    use std::collections::HashMap;

    use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi};
    use netil::{insn::decode_one, Cond, Opcode, Operands};
    use netvm_vm::{FaultKind, InvokeContext, Timestamp};

    use super::*;

    const STACK: i32 = std::mem::offset_of!(Frame, stack) as i32;
    const LOCALS: i32 = std::mem::offset_of!(Frame, locals) as i32;
    const PKT: i32 = std::mem::offset_of!(Frame, pkt) as i32;
    const PKT_LEN: i32 = std::mem::offset_of!(Frame, pkt_len) as i32;
    const INFO: i32 = std::mem::offset_of!(Frame, info) as i32;
    const INFO_LEN: i32 = std::mem::offset_of!(Frame, info_len) as i32;
    const BUDGET: i32 = std::mem::offset_of!(Frame, budget) as i32;
    const TS_SEC: i32 = std::mem::offset_of!(Frame, ts_sec) as i32;
    const TS_NSEC: i32 = std::mem::offset_of!(Frame, ts_nsec) as i32;
    const IN_PORT: i32 = std::mem::offset_of!(Frame, in_port) as i32;
    const WIRE_LEN: i32 = std::mem::offset_of!(Frame, wire_len) as i32;

    fn slot(d: u32) -> i32 {
        STACK + 4 * d as i32
    }

    /// Runs `f` on the frame's state and context.
    ///
    /// # Safety
    /// `frame` is the frame of a running baseline function: its pointers
    /// are valid for the call (`BaselineCode::push` made them).
    unsafe fn with<R>(frame: *mut Frame, f: impl FnOnce(&mut PeState, &InvokeContext<'_>) -> R) -> R {
        // SAFETY: the caller's contract.
        let fr = unsafe { &mut *frame };
        // SAFETY: as above: the packet and info memories of the call.
        let (packet, info) =
            unsafe { (std::slice::from_raw_parts(fr.pkt, fr.pkt_len as usize), std::slice::from_raw_parts(fr.info, fr.info_len as usize)) };
        let ctx = InvokeContext { packet, info, now: Timestamp { sec: fr.ts_sec, nsec: fr.ts_nsec }, seq: fr.seq };
        // SAFETY: the state borrowed for the call; nothing else reaches it meanwhile.
        f(unsafe { &mut *fr.state }, &ctx)
    }

    extern "sysv64" fn copro_in(frame: *mut Frame, copro: u32, reg: u32, value: u32) -> u32 {
        // SAFETY: called only by generated code, with its frame.
        unsafe { with(frame, |st, _| st.copros.get_mut(copro as usize).map_or(1, |c| u32::from(c.write(reg as u8, value).is_err()))) }
    }

    /// The register's value, or bit 32 set on an error.
    extern "sysv64" fn copro_out(frame: *mut Frame, copro: u32, reg: u32) -> u64 {
        // SAFETY: called only by generated code, with its frame.
        unsafe { with(frame, |st, _| st.copros.get_mut(copro as usize).and_then(|c| c.read(reg as u8).ok()).map_or(1 << 32, u64::from)) }
    }

    extern "sysv64" fn copro_invoke(frame: *mut Frame, copro: u32, op: u32) -> u32 {
        // SAFETY: called only by generated code, with its frame.
        unsafe { with(frame, |st, ctx| st.copros.get_mut(copro as usize).map_or(1, |c| u32::from(c.invoke(op as u8, ctx).is_err()))) }
    }

    extern "sysv64" fn unary(which: u32, a: u32) -> u32 {
        match which {
            0 => a.count_ones(),
            1 => a.leading_zeros(),
            2 => a.trailing_zeros(),
            _ => netvm_vm::region::hash32(a),
        }
    }

    extern "sysv64" fn csum_upd(hc: u32, old: u32, new: u32) -> u32 {
        netvm_vm::region::csum_update(hc, old, new)
    }

    /// Depth and liveness per instruction of verified code, from `entry`.
    fn depths(code: &[u8], entry: u16) -> Result<Vec<(netil::Insn, Option<u32>)>, String> {
        let mut out = Vec::new();
        let mut at: HashMap<u32, u32> = HashMap::new();
        let mut cur = Some(0u32);
        let mut pc = u32::from(entry);
        while (pc as usize) < code.len() {
            let insn = decode_one(code, pc).map_err(|e| e.to_string())?;
            if let Some(&d) = at.get(&pc) {
                cur = Some(d);
            }
            let here = cur;
            if let Some(d) = here {
                let pops = insn.op.pops();
                let after = d - pops.min(d) + insn.op.pushes();
                if let Operands::Target(t) = insn.operands {
                    at.entry(t as u32).or_insert(after);
                }
                cur = (!insn.op.ends_block()).then_some(after);
            }
            pc = insn.next();
            out.push((insn, here));
        }
        Ok(out)
    }

    /// Compiles verified capsule code from `entry` with the weights of `costs`.
    pub fn compile(code: &[u8], entry: u16, costs: &CostModel) -> Result<Arc<BaselineCode>, String> {
        let insns = depths(code, entry)?;
        // Weights of the live instructions, for the backward edges.
        let mut prefix = Vec::with_capacity(insns.len() + 1);
        prefix.push(0u64);
        for (insn, d) in &insns {
            let w = match (d, &insn.operands) {
                (None, _) => 0,
                (Some(_), Operands::CoproOp { copro, .. }) => costs.invoke.get(usize::from(*copro)).copied().unwrap_or(u32::MAX),
                (Some(_), _) => costs.weights[insn.op as usize],
            };
            prefix.push(prefix.last().copied().unwrap_or(0) + u64::from(w));
        }
        let index: HashMap<u32, usize> = insns.iter().enumerate().map(|(i, (x, _))| (x.offset, i)).collect();
        let mut ops = dynasmrt::x64::Assembler::new().map_err(|e| e.to_string())?;
        let labels: Vec<dynasmrt::DynamicLabel> = insns.iter().map(|_| ops.new_dynamic_label()).collect();
        let epilogue = ops.new_dynamic_label();
        let faults: Vec<dynasmrt::DynamicLabel> = FaultKind::ALL.iter().map(|_| ops.new_dynamic_label()).collect();
        let fault = |k: FaultKind| faults[k as usize];
        let mut pays: Vec<(dynasmrt::DynamicLabel, u64, dynasmrt::DynamicLabel)> = Vec::new();
        let start = ops.offset();
        dynasm!(ops
            ; .arch x64
            ; push rbx
            ; mov rbx, rdi
        );
        for (i, (insn, depth)) in insns.iter().enumerate() {
            dynasm!(ops ; .arch x64 ; =>labels[i]);
            let Some(d) = *depth else { continue };
            let (a, b, t) = (slot(d.wrapping_sub(2)), slot(d.wrapping_sub(1)), slot(d.wrapping_sub(1)));
            let target = |tgt: i64| index.get(&(tgt as u32)).copied();
            use Opcode::*;
            match (insn.op, &insn.operands) {
                (Nop, _) | (Pop, _) => {}
                (Push, Operands::Imm(v)) => dynasm!(ops ; .arch x64 ; mov DWORD [rbx + slot(d)], *v as i32),
                (Dup, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + t] ; mov [rbx + slot(d)], eax),
                (Over, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + a] ; mov [rbx + slot(d)], eax),
                (Swap, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + a] ; mov ecx, [rbx + b] ; mov [rbx + a], ecx ; mov [rbx + b], eax),
                (Pick, Operands::Depth(n)) => {
                    dynasm!(ops ; .arch x64 ; mov eax, [rbx + slot(d - 1 - u32::from(*n))] ; mov [rbx + slot(d)], eax)
                }
                (Add, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + a] ; add eax, [rbx + b] ; mov [rbx + a], eax),
                (Sub, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + a] ; sub eax, [rbx + b] ; mov [rbx + a], eax),
                (Mul, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + a] ; imul eax, [rbx + b] ; mov [rbx + a], eax),
                (And, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + a] ; and eax, [rbx + b] ; mov [rbx + a], eax),
                (Or, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + a] ; or eax, [rbx + b] ; mov [rbx + a], eax),
                (Xor, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + a] ; xor eax, [rbx + b] ; mov [rbx + a], eax),
                (Shl, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + a] ; mov ecx, [rbx + b] ; shl eax, cl ; mov [rbx + a], eax),
                (Shr, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + a] ; mov ecx, [rbx + b] ; shr eax, cl ; mov [rbx + a], eax),
                (Sar, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + a] ; mov ecx, [rbx + b] ; sar eax, cl ; mov [rbx + a], eax),
                (Rotl, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + a] ; mov ecx, [rbx + b] ; rol eax, cl ; mov [rbx + a], eax),
                (Rotr, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + a] ; mov ecx, [rbx + b] ; ror eax, cl ; mov [rbx + a], eax),
                (Div | Mod, _) => {
                    dynasm!(ops ; .arch x64 ; mov ecx, [rbx + b] ; test ecx, ecx ; jz =>fault(FaultKind::DivByZero) ; mov eax, [rbx + a] ; xor edx, edx ; div ecx);
                    if insn.op == Div {
                        dynasm!(ops ; .arch x64 ; mov [rbx + a], eax);
                    } else {
                        dynasm!(ops ; .arch x64 ; mov [rbx + a], edx);
                    }
                }
                (Sdiv | Smod, _) => {
                    let (normal, done) = (ops.new_dynamic_label(), ops.new_dynamic_label());
                    dynasm!(ops ; .arch x64
                        ; mov ecx, [rbx + b] ; test ecx, ecx ; jz =>fault(FaultKind::DivByZero)
                        ; cmp ecx, -1 ; jne =>normal
                    );
                    // x / -1 = -x (wrapping: MIN stays MIN), x % -1 = 0, without idiv's trap.
                    if insn.op == Sdiv {
                        dynasm!(ops ; .arch x64 ; neg DWORD [rbx + a] ; jmp =>done);
                    } else {
                        dynasm!(ops ; .arch x64 ; mov DWORD [rbx + a], 0 ; jmp =>done);
                    }
                    dynasm!(ops ; .arch x64 ; =>normal ; mov eax, [rbx + a] ; cdq ; idiv ecx);
                    if insn.op == Sdiv {
                        dynasm!(ops ; .arch x64 ; mov [rbx + a], eax);
                    } else {
                        dynasm!(ops ; .arch x64 ; mov [rbx + a], edx);
                    }
                    dynasm!(ops ; .arch x64 ; =>done);
                }
                (Not, _) => dynasm!(ops ; .arch x64 ; not DWORD [rbx + t]),
                (Neg, _) => dynasm!(ops ; .arch x64 ; neg DWORD [rbx + t]),
                (Bswap, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + t] ; bswap eax ; mov [rbx + t], eax),
                (Bswap16, _) => dynasm!(ops ; .arch x64 ; movzx eax, WORD [rbx + t] ; rol ax, 8 ; movzx eax, ax ; mov [rbx + t], eax),
                (Popcnt | Clz | Ctz | Hash32, _) => {
                    let which = match insn.op {
                        Popcnt => 0,
                        Clz => 1,
                        Ctz => 2,
                        _ => 3,
                    };
                    dynasm!(ops ; .arch x64 ; mov edi, which ; mov esi, [rbx + t] ; mov rax, QWORD unary as *const () as i64 ; call rax ; mov [rbx + t], eax);
                }
                (CsumUpd, _) => {
                    let c = slot(d - 3);
                    dynasm!(ops ; .arch x64 ; mov edi, [rbx + c] ; mov esi, [rbx + a] ; mov edx, [rbx + b] ; mov rax, QWORD csum_upd as *const () as i64 ; call rax ; mov [rbx + c], eax);
                }
                (Btest, _) => {
                    dynasm!(ops ; .arch x64 ; mov eax, [rbx + a] ; mov ecx, [rbx + b] ; shr eax, cl ; and eax, 1 ; mov [rbx + a], eax)
                }
                (Bset, _) => dynasm!(ops ; .arch x64 ; mov ecx, [rbx + b] ; mov eax, 1 ; shl eax, cl ; or [rbx + a], eax),
                (Bclr, _) => dynasm!(ops ; .arch x64 ; mov ecx, [rbx + b] ; mov eax, 1 ; shl eax, cl ; not eax ; and [rbx + a], eax),
                (op, Operands::None) if op.condition().is_some() && op.class() == netil::Class::Compare => {
                    dynasm!(ops ; .arch x64 ; mov eax, [rbx + a] ; cmp eax, [rbx + b]);
                    match op.condition().unwrap_or(Cond::Eq) {
                        Cond::Eq => dynasm!(ops ; .arch x64 ; sete al),
                        Cond::Ne => dynasm!(ops ; .arch x64 ; setne al),
                        Cond::Lt => dynasm!(ops ; .arch x64 ; setb al),
                        Cond::Le => dynasm!(ops ; .arch x64 ; setbe al),
                        Cond::Gt => dynasm!(ops ; .arch x64 ; seta al),
                        Cond::Ge => dynasm!(ops ; .arch x64 ; setae al),
                        Cond::Slt => dynasm!(ops ; .arch x64 ; setl al),
                        Cond::Sle => dynasm!(ops ; .arch x64 ; setle al),
                        Cond::Sgt => dynasm!(ops ; .arch x64 ; setg al),
                        Cond::Sge => dynasm!(ops ; .arch x64 ; setge al),
                    }
                    dynasm!(ops ; .arch x64 ; movzx eax, al ; mov [rbx + a], eax);
                }
                (op, Operands::Target(tgt)) => {
                    let to = target(*tgt).ok_or("a jump to no instruction")?;
                    // A taken backward edge pays first (refused: a budget fault, nothing paid).
                    let cost = if to <= i { prefix[i + 1] - prefix[to] } else { 0 };
                    let dest = if cost == 0 {
                        labels[to]
                    } else {
                        // Filled after the code: charge, then jump.
                        let pay = ops.new_dynamic_label();
                        pays.push((pay, cost, labels[to]));
                        pay
                    };
                    match op {
                        Jump => dynasm!(ops ; .arch x64 ; jmp =>dest),
                        Jz => dynasm!(ops ; .arch x64 ; cmp DWORD [rbx + t], 0 ; je =>dest),
                        Jnz => dynasm!(ops ; .arch x64 ; cmp DWORD [rbx + t], 0 ; jne =>dest),
                        _ => {
                            dynasm!(ops ; .arch x64 ; mov eax, [rbx + a] ; cmp eax, [rbx + b]);
                            match op.condition().ok_or("a jump without a condition")? {
                                Cond::Eq => dynasm!(ops ; .arch x64 ; je =>dest),
                                Cond::Ne => dynasm!(ops ; .arch x64 ; jne =>dest),
                                Cond::Lt => dynasm!(ops ; .arch x64 ; jb =>dest),
                                Cond::Le => dynasm!(ops ; .arch x64 ; jbe =>dest),
                                Cond::Gt => dynasm!(ops ; .arch x64 ; ja =>dest),
                                Cond::Ge => dynasm!(ops ; .arch x64 ; jae =>dest),
                                Cond::Slt => dynasm!(ops ; .arch x64 ; jl =>dest),
                                Cond::Sle => dynasm!(ops ; .arch x64 ; jle =>dest),
                                Cond::Sgt => dynasm!(ops ; .arch x64 ; jg =>dest),
                                Cond::Sge => dynasm!(ops ; .arch x64 ; jge =>dest),
                            }
                        }
                    }
                }
                (Ret, Operands::Port(p)) => dynasm!(ops ; .arch x64 ; mov eax, i32::from(*p) ; jmp =>epilogue),
                (RetPop, _) => {
                    dynasm!(ops ; .arch x64 ; mov eax, [rbx + t] ; cmp eax, 2 ; jae =>fault(FaultKind::BadPort) ; jmp =>epilogue)
                }
                (Drop, _) => dynasm!(ops ; .arch x64 ; mov eax, netvm_abi_drop() ; jmp =>epilogue),
                (Upload8 | Upload16 | Upload32 | Iload8 | Iload16 | Iload32, _) => {
                    let (base, len) = if matches!(insn.op, Upload8 | Upload16 | Upload32) { (PKT, PKT_LEN) } else { (INFO, INFO_LEN) };
                    let w = insn.op.access_width().unwrap_or(4) as i32;
                    dynasm!(ops ; .arch x64
                        ; mov eax, [rbx + t] ; lea rcx, [rax + w] ; cmp rcx, [rbx + len] ; ja =>fault(FaultKind::Bounds)
                        ; mov rdx, [rbx + base]
                    );
                    match w {
                        1 => dynasm!(ops ; .arch x64 ; movzx eax, BYTE [rdx + rax]),
                        2 => dynasm!(ops ; .arch x64 ; movzx eax, WORD [rdx + rax] ; rol ax, 8 ; movzx eax, ax),
                        _ => dynasm!(ops ; .arch x64 ; mov eax, [rdx + rax] ; bswap eax),
                    }
                    dynasm!(ops ; .arch x64 ; mov [rbx + t], eax);
                }
                (Istore8 | Istore16 | Istore32, _) => {
                    let w = insn.op.access_width().unwrap_or(4) as i32;
                    dynasm!(ops ; .arch x64
                        ; mov eax, [rbx + a] ; lea rcx, [rax + w] ; cmp rcx, [rbx + INFO_LEN] ; ja =>fault(FaultKind::Bounds)
                        ; mov rdx, [rbx + INFO] ; mov ecx, [rbx + b]
                    );
                    match w {
                        1 => dynasm!(ops ; .arch x64 ; mov [rdx + rax], cl),
                        2 => dynasm!(ops ; .arch x64 ; rol cx, 8 ; mov [rdx + rax], cx),
                        _ => dynasm!(ops ; .arch x64 ; bswap ecx ; mov [rdx + rax], ecx),
                    }
                }
                (Pktlen, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + PKT_LEN] ; mov [rbx + slot(d)], eax),
                (Wirelen, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + WIRE_LEN] ; mov [rbx + slot(d)], eax),
                (Inport, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + IN_PORT] ; mov [rbx + slot(d)], eax),
                (TstampS, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + TS_SEC] ; mov [rbx + slot(d)], eax),
                (TstampNs, _) => dynasm!(ops ; .arch x64 ; mov eax, [rbx + TS_NSEC] ; mov [rbx + slot(d)], eax),
                (Locload, Operands::Local(n)) => {
                    dynasm!(ops ; .arch x64 ; mov eax, [rbx + LOCALS + 4 * i32::from(*n)] ; mov [rbx + slot(d)], eax)
                }
                (Locstore, Operands::Local(n)) => {
                    dynasm!(ops ; .arch x64 ; mov eax, [rbx + t] ; mov [rbx + LOCALS + 4 * i32::from(*n)], eax)
                }
                (CoproIn, Operands::CoproReg { copro, reg }) => dynasm!(ops ; .arch x64
                    ; mov rdi, rbx ; mov esi, i32::from(*copro) ; mov edx, i32::from(*reg) ; mov ecx, [rbx + t]
                    ; mov rax, QWORD copro_in as *const () as i64 ; call rax ; test eax, eax ; jnz =>fault(FaultKind::Copro)
                ),
                (CoproOut, Operands::CoproReg { copro, reg }) => dynasm!(ops ; .arch x64
                    ; mov rdi, rbx ; mov esi, i32::from(*copro) ; mov edx, i32::from(*reg)
                    ; mov rax, QWORD copro_out as *const () as i64 ; call rax
                    ; mov rcx, rax ; shr rcx, 32 ; test ecx, ecx ; jnz =>fault(FaultKind::Copro) ; mov [rbx + slot(d)], eax
                ),
                (CoproInvoke, Operands::CoproOp { copro, op }) => dynasm!(ops ; .arch x64
                    ; mov rdi, rbx ; mov esi, i32::from(*copro) ; mov edx, i32::from(*op)
                    ; mov rax, QWORD copro_invoke as *const () as i64 ; call rax ; test eax, eax ; jnz =>fault(FaultKind::Copro)
                ),
                (op, _) => return Err(format!("`{}` is outside the capsule profile", op.mnemonic())),
            }
        }
        // Verified code never runs past its end; the epilogue and the exits.
        dynasm!(ops ; .arch x64 ; =>epilogue ; pop rbx ; ret);
        for (pay, cost, to) in std::mem::take(&mut pays) {
            if cost > i32::MAX as u64 {
                dynasm!(ops ; .arch x64 ; =>pay ; jmp =>fault(FaultKind::Budget));
            } else {
                let c = cost as i32;
                dynasm!(ops ; .arch x64 ; =>pay ; cmp QWORD [rbx + BUDGET], c ; jb =>fault(FaultKind::Budget) ; sub QWORD [rbx + BUDGET], c ; jmp =>to);
            }
        }
        for k in FaultKind::ALL {
            dynasm!(ops ; .arch x64 ; =>fault(k) ; mov eax, k.code() as i32 ; jmp =>epilogue);
        }
        let buf = ops.finalize().map_err(|_| "the assembler could not finish".to_string())?;
        let size = buf.len();
        Ok(Arc::new(BaselineCode { buf, entry: start, size }))
    }

    const fn netvm_abi_drop() -> i32 {
        netvm_vm::Outcome::Drop.code() as i32
    }
}
