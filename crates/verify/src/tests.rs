use super::*;
use netil::{assemble, CoproDecl, Opcode, Operands};

const FIG2: &str = "
; Code Segment
segment .push
.maxstacksize 10      ; define the maximum stack depth
    pop                ; discard the \"calling\" port
    push 12            ; push the ethertype offset on the stack
    upload.16         ; load 2 bytes at previous offset from packet memory
    push 0x800        ; push 0x800 (i.e., ip) on the stack
    jcmp.neq discard  ; if not equals jump to discard, otherwise...
    ret 1              ; return 1
discard:
    ret 0              ; return 0
ends
";

fn ok(src: &str) -> Verified {
    let a = assemble(src).unwrap_or_else(|e| panic!("assembly failed: {e}"));
    verify_with_source(&a.module, Some(&a.source_map)).unwrap_or_else(|e| panic!("verification failed: {e}"))
}

fn fails(src: &str) -> VerifyError {
    let a = assemble(src).unwrap_or_else(|e| panic!("assembly failed: {e}"));
    match verify_with_source(&a.module, Some(&a.source_map)) {
        Ok(_) => panic!("verification passed:\n{src}"),
        Err(e) => e,
    }
}

fn push_module(code: Vec<u8>) -> Module {
    Module { max_stack: 16, out_ports: 2, push: Some(code), ..Module::default() }
}

fn enc(items: &[(Opcode, Operands)]) -> Vec<u8> {
    let mut code = Vec::new();
    for (op, operands) in items {
        let at = code.len() as u32;
        netil::encode(*op, operands, at, &mut code).unwrap();
    }
    code
}

#[test]
fn fig2_verifies() {
    let v = ok(FIG2);
    let depths: Vec<_> = v.push.depth.iter().map(|d| d.unwrap()).collect();
    assert_eq!(depths, [1, 0, 1, 1, 2, 0, 0]);
    assert!(v.init.is_none());
    assert_eq!(v.push.index_of(6), Some(2));
    assert_eq!(v.push.index_of[&6], 2);
    assert_eq!(v.push.index_of(5), None);
    assert_eq!(v.push.insn_at(6).unwrap().op, Opcode::Upload16);
}

#[test]
fn loops_verify() {
    // Sum the first 10 packet bytes: a counted loop with locals.
    let v = ok("
.locals 2
.ports 1
segment .push
    pop
    push 0
    locstore 0        ; i = 0
    push 0
    locstore 1        ; sum = 0
loop:
    locload 0
    push 10
    jcmp.ge done
    locload 1
    locload 0
    upload.8
    add
    locstore 1
    locload 0
    push 1
    add
    locstore 0
    jump loop
done:
    locload 1
    pop
    ret 0
ends");
    assert!(v.push.depth.iter().all(Option::is_some));
    // A loop carrying a value on the stack, with a nested loop.
    ok("
segment .push
    push 3
outer:
    push 2
inner:
    push 1
    sub
    dup
    jnz inner
    pop
    push 1
    sub
    dup
    jnz outer
    pop
    ret.pop
ends");
}

#[test]
fn switch_verifies() {
    let v = ok("
.ports 3
segment .push
    pop
    push 12
    upload.16
    switch 0x800: ip, 0x806: arp, 0x86dd: ip6, default: other
ip: ret 0
arp: ret 1
ip6: ret 2
other: drop
ends");
    assert_eq!(v.push.depth[4], Some(0));
}

#[test]
fn constant_offsets_in_range_verify() {
    ok("
.infosize 16
.datasize 64
segment .init
    push 14
    push 20
    add
    push 0xdead
    dstore.32         ; data[34..38]
    push 60
    dload.32          ; data[60..64]
    pop
    push 0
    push 32
    push 32
    mcopy data, data  ; data[32..64] <- data[0..32]
    push 0
    push 64
    crc32 data
    pop
    exit
ends
segment .push
    pop
    push 12
    push 1
    iload.32          ; info[1..5]
    istore.8          ; info[12] = that value
    push 2
    push 3
    shl               ; 16
    push 4
    sub               ; 12
    iload.32          ; info[12..16]
    pop
    push 15
    iload.8
    push 8
    swap
    pop               ; 8 remains
    dup
    over
    pick 2            ; [?, 8, 8, 8, 8]: ? is iload.8's value
    add               ; 16
    push 48
    add               ; 64
    push 0
    push 0
    mcopy info, data  ; len 0: data[64..64] <- info[0..0]
    pop
    pop
    drop
ends");
}

#[test]
fn unreachable_code_is_not_checked() {
    let v = ok("
segment .push
    drop
    add               ; would underflow
    locload 7         ; out of range
    jump @-1000       ; out of the segment
ends");
    assert_eq!(v.push.depth, [Some(1), None, None, None]);
    assert!(!v.push.is_reachable(1));
}

#[test]
fn init_then_push() {
    let v = ok("
.datasize 4
segment .init
    push 0
    push 1
    dstore.32
    exit
ends
segment .push
    push 0
    dload.32
    add
    ret.pop
ends");
    assert_eq!(v.init.as_ref().unwrap().depth, [Some(0), Some(1), Some(2), Some(0)]);
    // .init is checked before .push.
    let e = fails(
        "
segment .init
    pop
    exit
ends
segment .push
    add
ends",
    );
    assert_eq!((e.segment, e.offset, e.rule), (Some(SegmentKind::Init), Some(0), Rule::StackUnderflow));
}

#[test]
fn constants_merge_to_unknown() {
    // The offset is 0 on one path and 100 on the other: not a constant at the join.
    ok("
.datasize 4
segment .push
    jz a
    push 0
    jump b
a:  push 100
b:  dload.8
    ret.pop
ends");
    // Both paths agree on 100: out of bounds.
    let e = fails(
        "
.datasize 4
segment .push
    jz a
    push 100
    jump b
a:  push 100
b:  dload.8
    ret.pop
ends",
    );
    assert_eq!((e.rule, e.offset, e.line), (Rule::DataOutOfBounds, Some(20), Some(8)));
    assert_eq!(e.stack.as_deref(), Some("[100]"));
}

#[test]
fn loop_counter_is_not_constant() {
    // i starts at 0 but changes in the loop: the access at i is not checked statically.
    ok("
.datasize 4
segment .push
    pop
    push 0
loop:
    dup
    dload.8
    pop
    push 1
    add
    dup
    push 100
    jcmp.lt loop
    pop
    drop
ends");
}

#[test]
fn errors_carry_stack_and_line() {
    let e = fails(
        "
segment .push
    push 5
    add
    add
    ret 0
ends",
    );
    assert_eq!(e.rule, Rule::StackUnderflow);
    assert_eq!((e.offset, e.line), (Some(6), Some(5)));
    assert_eq!(e.stack.as_deref(), Some("[?]"));
    assert_eq!(e.to_string(), ".push+6 (line 5): stack-underflow: `add` needs 2 values, the stack has 1\n  stack: [?]");
}

#[test]
fn limits_are_checked() {
    let mut m = push_module(vec![Opcode::Drop as u8]);
    m.max_stack = 5000;
    assert_eq!(verify(&m).unwrap_err().rule, Rule::LimitExceeded);
    let mut m = push_module(vec![Opcode::Drop as u8]);
    m.copros = vec![CoproDecl { name: "c".into(), kind: "counters".into() }; 65];
    assert_eq!(verify(&m).unwrap_err().rule, Rule::LimitExceeded);
    let mut m = push_module(vec![Opcode::Nop as u8; (limits::MAX_CODE + 1) as usize]);
    m.push.as_mut().unwrap().push(Opcode::Drop as u8);
    let e = verify(&m).unwrap_err();
    assert_eq!((e.rule, e.segment), (Rule::LimitExceeded, Some(SegmentKind::Push)));
    let m = Module { init: Some(vec![Opcode::Exit as u8]), ..Module::default() };
    assert_eq!(verify(&m).unwrap_err().rule, Rule::MissingPush);
}

#[test]
fn decode_errors_map_to_rules() {
    let e = verify(&push_module(vec![0x02, 0xff])).unwrap_err();
    assert_eq!((e.rule, e.offset), (Rule::InvalidOpcode, Some(1)));
    let e = verify(&push_module(vec![0x02, 0x01, 0, 0])).unwrap_err();
    assert_eq!((e.rule, e.offset), (Rule::TruncatedInsn, Some(1)));
    let e = verify(&push_module(vec![0x80, 9])).unwrap_err();
    assert_eq!((e.rule, e.offset), (Rule::InvalidOperand, Some(0)));
    let e = verify(&push_module(vec![0x4e, 0xff, 0xff, 0xff, 0xff])).unwrap_err();
    assert_eq!((e.rule, e.offset), (Rule::InvalidOperand, Some(0)));
    let e = verify(&push_module(vec![])).unwrap_err();
    assert_eq!((e.rule, e.segment, e.offset), (Rule::EmptySegment, Some(SegmentKind::Push), None));
}

#[test]
fn wild_targets_do_not_panic() {
    for t in [i64::from(i32::MIN), -1, 5, 6, 7, 1 << 40, i64::from(i32::MAX)] {
        let code = enc(&[(Opcode::Jump, Operands::Target(0)), (Opcode::Drop, Operands::None)]);
        let mut code = code;
        // Patch the displacement by hand: the encoder refuses out-of-range targets.
        let rel = (t - 5).clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        code[1..5].copy_from_slice(&rel.to_le_bytes());
        let r = verify(&push_module(code));
        if t == 5 {
            assert!(r.is_ok());
        } else {
            let rule = r.unwrap_err().rule;
            assert!(matches!(rule, Rule::JumpOutOfSegment | Rule::JumpMisaligned), "{t}: {rule}");
        }
    }
}

#[test]
fn mismatch_reported_at_join() {
    let e = fails(
        "
segment .push
loop:
    push 1
    jump loop
ends",
    );
    assert_eq!((e.rule, e.offset, e.line), (Rule::StackMismatch, Some(0), Some(4)));
    assert!(e.message.contains("from the entry"), "{}", e.message);
}

#[test]
fn big_switch_and_long_code() {
    // A switch with 65,536 cases, all distinct targets on a chain of nops.
    let cases = 65_536u32;
    let header = 1 + 8 + 8 * cases as usize;
    let mut items = vec![];
    let first_nop = header as i64;
    let table = netil::SwitchTable { default: first_nop, cases: (0..cases).map(|v| (v, first_nop + i64::from(v))).collect() };
    items.push((Opcode::Switch, Operands::Switch(table)));
    for _ in 0..cases {
        items.push((Opcode::Nop, Operands::None));
    }
    items.push((Opcode::Drop, Operands::None));
    let mut m = push_module(enc(&items));
    m.max_stack = 1024;
    let t = std::time::Instant::now();
    let v = verify(&m).unwrap();
    assert_eq!(v.push.insns.len(), cases as usize + 2);
    assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());

    // Deep stacks of constants flowing through a long chain of branches.
    let mut items = vec![];
    for k in 0..1000 {
        items.push((Opcode::Push, Operands::Imm(k)));
    }
    let mut code_len = items.len() as i64 * 5;
    for _ in 0..100_000 {
        items.push((Opcode::Dup, Operands::None));
        code_len += 1;
        items.push((Opcode::Jz, Operands::Target(code_len + 5)));
        code_len += 5;
    }
    items.push((Opcode::Drop, Operands::None));
    let mut m = push_module(enc(&items));
    m.max_stack = 1024;
    let t = std::time::Instant::now();
    verify(&m).unwrap();
    assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
}

#[test]
fn nested_loops_with_many_constants_terminate() {
    // Many nested loops over a deep stack of constants, each loop changing one slot.
    let mut src = String::from(".maxstacksize 1024\n.locals 64\nsegment .push\n");
    for k in 0..200 {
        src.push_str(&format!("    push {k}\n"));
    }
    for k in 0..60 {
        src.push_str(&format!("l{k}:\n    locload {k}\n    pop\n"));
    }
    for k in (0..60).rev() {
        src.push_str(&format!("    pick {}\n    push 1\n    add\n    locstore {k}\n    dup\n    jnz l{k}\n", k % 200));
    }
    src.push_str("    drop\nends\n");
    // locload k before any locstore: uninit (the first one, at the outer loop head).
    let e = fails(&src);
    assert_eq!(e.rule, Rule::UninitLocal);
    assert_eq!(e.offset, Some(200 * 5));
}

#[test]
fn flow_errors_come_before_value_errors() {
    // An out-of-bounds load at offset 6 and an underflow at offset 8: the flow
    // pass runs first, so the underflow is reported.
    let e = fails(
        "
segment .push
    pop
    push 0
    dload.8
    pop
    pop
    drop
ends",
    );
    assert_eq!((e.rule, e.offset), (Rule::StackUnderflow, Some(8)));
    // Among value errors, the lowest offset wins.
    let e = fails(
        "
.locals 1
segment .push
    pop
    locload 0
    push 0
    dload.8
    drop
ends",
    );
    assert_eq!((e.rule, e.offset), (Rule::UninitLocal, Some(1)));
}

#[test]
fn left_to_run_time() {
    // Constant division by zero, a constant ret.pop port that does not exist,
    // packet offsets far beyond any packet, an endless loop in .init.
    ok("
.ports 1
.datasize 4
segment .init
    push 0
loop:
    jump loop
ends
segment .push
    pop
    push 1
    push 0
    div
    pop
    push 100000
    upload.32
    pop
    push 7
    ret.pop
ends");
}

#[test]
fn module_level_display() {
    let e = verify(&Module::default()).unwrap_err();
    assert_eq!(e.to_string(), "module: missing-push: the module has no .push segment; every NetPE needs a push handler");
    let e = verify(&push_module(vec![])).unwrap_err();
    assert!(e.to_string().starts_with(".push: empty-segment: "), "{e}");
}
