//! The NetIL disassembler: binary module → assembly text that reassembles to
//! the identical bytes.
//!
//! Every declaration is printed explicitly. Jump targets that land on an
//! instruction get a label `L<offset>`; targets that do not (only in
//! malformed modules) are printed as raw displacements `@±N`, which the
//! assembler accepts too, so even unverifiable code round-trips.

use std::collections::BTreeSet;
use std::fmt::Write;

use crate::insn::{decode, DecodeError, Insn, Operands};
use crate::module::{Module, SegmentKind};

/// Disassembles a module. Fails only if a segment's bytes do not decode.
pub fn disassemble(m: &Module) -> Result<String, (SegmentKind, DecodeError)> {
    let mut out = String::new();
    let _ = writeln!(out, ".maxstacksize {}", m.max_stack);
    let _ = writeln!(out, ".locals {}", m.locals);
    let _ = writeln!(out, ".infosize {}", m.info_size);
    let _ = writeln!(out, ".datasize {}", m.data_size);
    let _ = writeln!(out, ".ports {}", m.out_ports);
    for c in &m.copros {
        let _ = writeln!(out, ".copro {} {}", c.name, c.kind);
    }
    let i = &m.interface;
    for (n, p) in &i.inputs {
        let _ = writeln!(out, ".inport {n} {p}");
    }
    for (n, p) in &i.outputs {
        let _ = writeln!(out, ".outport {n} {p}");
    }
    for v in &i.args {
        let _ = writeln!(out, ".arg {} {} {}", v.name, v.offset, v.size);
    }
    for v in &i.globals {
        let _ = writeln!(out, ".global {} {} {}", v.name, v.offset, v.size);
    }
    if let Some(l) = &i.layout {
        let accepts: String = l.accepts.iter().map(|v| format!(" {v}")).collect();
        let _ = writeln!(
            out,
            ".layout {} {}{}",
            l.name,
            l.version,
            if accepts.is_empty() { String::new() } else { format!(" accepts{accepts}") }
        );
    }
    for (kind, code) in m.segments() {
        let insns = decode(code).map_err(|e| (kind, e))?;
        out.push('\n');
        let _ = writeln!(out, "segment {kind}");
        out.push_str(&disassemble_insns(&insns, m));
        out.push_str("ends\n");
    }
    Ok(out)
}

/// Disassembles one segment's instructions (with labels), one per line.
pub fn disassemble_insns(insns: &[Insn], m: &Module) -> String {
    let starts: BTreeSet<i64> = insns.iter().map(|i| i64::from(i.offset)).collect();
    let labelled: BTreeSet<i64> = insns.iter().flat_map(Insn::targets).filter(|t| starts.contains(t)).collect();
    let mut out = String::new();
    for insn in insns {
        if labelled.contains(&i64::from(insn.offset)) {
            let _ = writeln!(out, "L{}:", insn.offset);
        }
        let _ = writeln!(out, "    {}", format_insn(insn, m, &starts));
    }
    out
}

/// Formats one instruction in assembler syntax. `starts` are the instruction
/// offsets of its segment (targets not among them print as `@±N`).
pub fn format_insn(insn: &Insn, m: &Module, starts: &BTreeSet<i64>) -> String {
    let next = i64::from(insn.next());
    let target = |t: i64| if starts.contains(&t) { format!("L{t}") } else { format!("@{:+}", t - next) };
    let copro = |c: u8| m.copros.get(c as usize).map_or_else(|| c.to_string(), |d| d.name.clone());
    let mn = insn.op.mnemonic();
    match &insn.operands {
        Operands::None => mn.to_string(),
        Operands::Imm(v) => {
            if *v >= 0x1_0000 || (*v >= 256 && v.count_ones() <= 2) {
                format!("{mn} {v:#x}")
            } else {
                format!("{mn} {v}")
            }
        }
        Operands::Target(t) => format!("{mn} {}", target(*t)),
        Operands::Port(p) => format!("{mn} {p}"),
        Operands::Local(l) => format!("{mn} {l}"),
        Operands::Depth(d) => format!("{mn} {d}"),
        Operands::Mem(x) => format!("{mn} {}", x.name()),
        Operands::MemPair(s, d) => format!("{mn} {}, {}", s.name(), d.name()),
        Operands::CoproReg { copro: c, reg } => format!("{mn} {}, {reg}", copro(*c)),
        Operands::CoproOp { copro: c, op } => format!("{mn} {}, {op}", copro(*c)),
        Operands::Switch(s) => {
            let mut txt = mn.to_string();
            for (v, t) in &s.cases {
                let _ = write!(txt, " {v}: {},", target(*t));
            }
            let _ = write!(txt, " default: {}", target(s.default));
            txt
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asm::assemble;

    #[test]
    fn roundtrip_listing() {
        let src = "
.copro ctr counters
segment .init
    push 0
    push 7
    dstore.32
    exit
ends
segment .push
    pop
    push 12
    upload.16
    switch 0x800: ip, 0x86dd: ip6, default: other
ip: copro.in ctr, 0
    copro.invoke ctr, 1
    ret 1
ip6: mcopy pkt, info
    jump @-6
other:
    drop
ends";
        let m = assemble(src).unwrap().module;
        let text = disassemble(&m).unwrap();
        let m2 = assemble(&text).unwrap().module;
        assert_eq!(m.to_bytes(), m2.to_bytes(), "{text}");
    }
}
