//! The worst-case cost bound (`netvm_verify::cost`): the costliest path of
//! loop-free handlers, the budget's bound for the others.

use netil::Class;
use netvm_verify::cost::{class_index, worst_case, Sizes, Weights, WorstCase};

fn bound(text: &str, budget: u64, w: &Weights) -> WorstCase {
    let m = netil::assemble(text).unwrap().module;
    let v = netvm_verify::verify(&m).unwrap();
    worst_case(&v.push, budget, w, &Sizes { packet: 1518, info: 16, data: 64 })
}

#[test]
fn straight_line_counts_every_instruction() {
    let c = bound("segment .push\n    pop\n    push 1\n    push 2\n    add\n    pop\n    ret 0\nends\n", 100, &Weights::default());
    assert_eq!(c.total_insns(), 6);
    assert_eq!(c.insns[class_index(Class::Stack)], 4);
    assert_eq!(c.insns[class_index(Class::Alu)], 1);
    assert_eq!(c.insns[class_index(Class::Control)], 1);
    assert!(!c.loops);
    assert_eq!(c.weight, 6.0);
}

#[test]
fn the_longer_branch_counts() {
    // Port 0 after 2 instructions, or port 1 after 6 more.
    let text = "\
.ports 2
segment .push
    pop
    push 0
    upload.8
    jz short
    push 1
    push 2
    add
    push 3
    add
    pop
    ret 1
short:
    ret 0
ends
";
    let c = bound(text, 100, &Weights::default());
    assert_eq!(c.total_insns(), 11);
    // Weighted: Alu made costly, the same path; Control costly, still the long one.
    let mut w = Weights::default();
    w.class[class_index(Class::Alu)] = 10.0;
    assert_eq!(bound(text, 100, &w).weight, 9.0 + 20.0);
}

#[test]
fn switch_takes_its_costliest_case() {
    let text = "\
.ports 3
segment .push
    pop
    push 12
    upload.16
    switch 0x800: v4, 0x86dd: v6, default: other
v4:
    ret 0
v6:
    push 1
    pop
    ret 1
other:
    ret 2
ends
";
    assert_eq!(bound(text, 100, &Weights::default()).total_insns(), 7);
}

#[test]
fn regions_and_coprocessor_operations_are_counted() {
    let text = "\
.copro c counters
segment .push
    pop
    push 0
    push 20
    csum pkt
    pop
    push 0
    copro.in c, 0
    push 1
    copro.in c, 1
    copro.invoke c, 0
    ret 0
ends
";
    let w = Weights { region_byte: 0.5, copro_op: 100.0, ..Weights::default() };
    let c = bound(text, 100, &w);
    assert_eq!(c.region_bytes, 20, "a constant length");
    assert_eq!(c.copro_ops, 1);
    assert_eq!(c.insns[class_index(Class::Copro)], 3);
    assert_eq!(c.weight, c.total_insns() as f64 + 10.0 + 100.0);
}

#[test]
fn region_lengths_are_bounded_by_what_the_program_computes() {
    // The IPv4 header checksum of examples/ipv4-router: IHL x 4, at most 60 bytes.
    let ihl = "segment .push\n    pop\n    push 14\n    push 14\n    upload.8\n    push 0x0f\n    and\n    push 4\n    mul\n    csum pkt\n    ret 0\nends\n";
    assert_eq!(bound(ihl, 100, &Weights::default()).region_bytes, 60);
    // Through a local, and joined over two paths: the larger.
    let two = "\
.locals 1
segment .push
    pop
    push 0
    upload.8
    jz small
    push 100
    locstore 0
    jump sum
small:
    push 8
    locstore 0
sum:
    push 0
    locload 0
    crc32 pkt
    ret 0
ends
";
    assert_eq!(bound(two, 100, &Weights::default()).region_bytes, 100);
    // A length read from the packet: at most the largest packet.
    let any = "segment .push\n    pop\n    push 0\n    push 16\n    upload.16\n    hash pkt\n    ret 0\nends\n";
    assert_eq!(bound(any, 100, &Weights::default()).region_bytes, 1518);
}

#[test]
fn a_loop_is_bounded_by_the_budget() {
    let text = "segment .push\n    pop\ntop:\n    push 1\n    pop\n    jump top\nends\n";
    let c = bound(text, 10, &Weights::default());
    assert!(c.loops);
    assert_eq!(c.total_insns(), 4 * 11, "n x (B + 1)");
}
