//! Each domain optimisation changes the generated code (shown on the CLIF)
//! and not the results (the same outcomes as the interpreter, with the
//! optimisation on and off). The broad check that results never change is
//! tests/differential.rs, which runs with every optimisation on.

use netvm_interp::InterpCode;
use netvm_jit::{DomainOpts, JitCode, JitOptions};
use netvm_vm::{ExchangeBuffer, Limits, Packet, PeCode, PeState};

fn compile(src: &str, domain_opts: bool) -> (JitCode, netvm_verify::Verified) {
    let m = netil::assemble(src).unwrap().module;
    let v = netvm_verify::verify(&m).unwrap();
    let code = JitCode::compile_with(
        &v,
        JitOptions { keep_text: true, domain: if domain_opts { DomainOpts::ALL } else { DomainOpts::NONE }, ..JitOptions::default() },
    )
    .unwrap();
    (code, v)
}

fn push_clif(code: &JitCode) -> String {
    code.clif().iter().map(|(_, t)| t.as_str()).collect()
}

/// Runs `code` and the interpreter on every packet; panics on a difference.
fn agree(code: &JitCode, v: &netvm_verify::Verified, packets: &[Vec<u8>]) {
    let interp = InterpCode::new(v);
    let limits = Limits::default();
    for p in packets {
        let run = |c: &dyn PeCode| {
            let mut st = PeState::new(&v.module);
            let mut xb = ExchangeBuffer::new(Packet::from_bytes(p.clone()), v.module.info_size as usize);
            (c.push(&mut st, &mut xb.view(), 0, &limits), xb)
        };
        assert_eq!(run(code), run(&interp), "packet {p:02x?}");
    }
}

/// Equality tests of 16- and 32-bit loads against constants, including a
/// constant no 16-bit value can equal, `jcmp` and `cmp` forms, and an
/// ordered comparison that must keep its byte swap.
const CMP: &str = "
.infosize 4
segment .push
    pop
    push 0
    push 12
    upload.16
    push 0x800
    cmp.eq
    istore.8
    push 1
    push 12
    upload.16
    push 0x10800
    cmp.neq
    istore.8
    push 2
    push 12
    upload.16
    push 0x900
    cmp.lt
    istore.8
    push 26
    upload.32
    push 0x0a010101
    jcmp.neq other
    ret 1
other:
    ret 0
ends";

#[test]
fn constant_byte_order_swap() {
    let (on, v) = compile(CMP, true);
    let (off, _) = compile(CMP, false);
    let (on_clif, off_clif) = (push_clif(&on), push_clif(&off));
    // Three equality tests lose their swap; the ordered one keeps it.
    assert_eq!(off_clif.matches("bswap").count(), 4, "{off_clif}");
    assert_eq!(on_clif.matches("bswap").count(), 1, "{on_clif}");
    let mut packets = vec![vec![0u8; 30], vec![0u8; 10], vec![0u8; 14]];
    let mut ip = vec![0u8; 34];
    ip[12] = 8;
    ip[26..30].copy_from_slice(&[10, 1, 1, 1]);
    packets.push(ip.clone());
    ip[13] = 1;
    packets.push(ip.clone());
    ip[12] = 9;
    ip[29] = 2;
    packets.push(ip);
    agree(&on, &v, &packets);
    agree(&off, &v, &packets);
}

/// `switch` is lowered by case density (`cranelift_frontend::Switch`): a
/// dense case range becomes a jump table (`br_table`), sparse values a tree
/// of compares; both agree with the interpreter on every case and on misses.
#[test]
fn switch_lowering_by_density() {
    let program = |cases: &[u32]| {
        let mut s = String::from(".ports 16\nsegment .push\n    pop\n    push 0\n    upload.8\n    switch ");
        for (k, v) in cases.iter().enumerate() {
            s.push_str(&format!("{v}: c{k}, "));
        }
        s.push_str("default: other\n");
        for k in 0..cases.len() {
            s.push_str(&format!("c{k}: ret {}\n", k + 1));
        }
        s.push_str("other: ret 0\nends\n");
        s
    };
    let dense = program(&[0, 1, 2, 3, 4, 5, 6, 7]);
    let sparse = program(&[1, 6, 17, 47, 58, 132]);
    let (d, dv) = compile(&dense, true);
    let (s, sv) = compile(&sparse, true);
    let (d_clif, s_clif) = (push_clif(&d), push_clif(&s));
    assert!(d_clif.contains("br_table"), "{d_clif}");
    assert!(!s_clif.contains("br_table"), "{s_clif}");
    assert!(s_clif.matches("icmp").count() >= 6, "{s_clif}");
    let packets: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).chain([vec![]]).collect();
    agree(&d, &dv, &packets);
    agree(&s, &sv, &packets);
}

/// Compiles `src` with `domain`; returns the code, its CLIF and the verified module.
fn compile_opts(src: &str, domain: DomainOpts) -> (JitCode, String, netvm_verify::Verified) {
    let v = netvm_verify::verify(&netil::assemble(src).unwrap().module).unwrap();
    let code = JitCode::compile_with(&v, JitOptions { keep_text: true, domain, ..JitOptions::default() }).unwrap();
    let clif = push_clif(&code);
    (code, clif, v)
}

/// Ports at a variable offset (14 + 4 * IHL), the second load inside the
/// range the first one checked.
const VARIABLE: &str = "
.maxstacksize 4
.locals 1
segment .push
    pop
    push 14
    upload.8
    push 0x0f
    and
    push 2
    shl
    push 14
    add
    locstore 0
    locload 0
    push 2
    add
    upload.16
    push 80
    jcmp.eq yes
    locload 0
    upload.16
    push 80
    jcmp.eq yes
    ret 0
yes:
    ret 1
ends";

/// Packets around every boundary of `VARIABLE` and f4: short, IHL 0-15, ports at the edge.
fn boundary_packets() -> Vec<Vec<u8>> {
    let mut packets = Vec::new();
    for ihl in [0u8, 1, 5, 6, 15] {
        for len in [0usize, 14, 15, 17, 18, 19, 20, 33, 34, 35, 37, 38, 40, 54, 74, 80] {
            let mut p = vec![0u8; len];
            let set = |p: &mut Vec<u8>, i: usize, b: &[u8]| {
                if i + b.len() <= p.len() {
                    p[i..i + b.len()].copy_from_slice(b);
                }
            };
            set(&mut p, 12, &[8, 0]);
            set(&mut p, 14, &[0x40 | ihl]);
            set(&mut p, 23, &[6]);
            set(&mut p, 26, &[10, 1, 1, 1, 10, 2, 2, 2]);
            let t = 14 + 4 * usize::from(ihl);
            set(&mut p, t, &[0, 20, 0, 30]);
            set(&mut p, t + 2, &[0, 80]);
            packets.push(p);
        }
    }
    packets
}

/// Bounds-check merging: an explicit length test covers the constant-offset
/// loads it dominates (f4: no check is left for its fixed fields), and one
/// check per variable-offset computation covers the loads inside its range.
#[test]
fn bounds_check_merging() {
    let f4 = include_str!("../../../benches/filters/f4_ip_tcp_4field.nil");
    let no_merge = DomainOpts { bounds: false, ..DomainOpts::ALL };
    // Unsigned compares are the bounds checks: the filters' own tests are equalities.
    let checks = |clif: &str| {
        clif.lines().filter(|l| l.contains("icmp") && [" uge ", " ugt ", " ule ", " ult "].iter().any(|c| l.contains(c))).count()
    };
    for (name, src, fewer) in [("f4", f4, 6), ("variable offset", VARIABLE, 1)] {
        let (on, on_clif, v) = compile_opts(src, DomainOpts::ALL);
        let (off, off_clif, _) = compile_opts(src, no_merge);
        assert!(checks(&off_clif) >= checks(&on_clif) + fewer, "{name}: merged:\n{on_clif}\nunmerged:\n{off_clif}");
        let packets = boundary_packets();
        agree(&on, &v, &packets);
        agree(&off, &v, &packets);
    }
}

/// Offset folding: `14 + 4 * IHL + 2` is reassociated so that the constant
/// becomes the load's displacement (NetVM paper Figs. 5 and 7): fewer adds,
/// and the loads address `base + t` with `+16` and `+14`.
#[test]
fn header_offset_folding() {
    let (on, on_clif, v) = compile_opts(VARIABLE, DomainOpts::ALL);
    let (off, off_clif, _) = compile_opts(VARIABLE, DomainOpts { fold_offsets: false, ..DomainOpts::ALL });
    assert!(on_clif.contains("+16") && on_clif.contains("+14"), "{on_clif}");
    assert!(off_clif.matches("iadd").count() > on_clif.matches("iadd").count(), "folded:\n{on_clif}\nunfolded:\n{off_clif}");
    agree(&on, &v, &boundary_packets());
    agree(&off, &v, &boundary_packets());
}

/// Dead stores to locals need no pass of ours: locals are SSA variables, and
/// a value stored and never loaded leaves no code (Cranelift's DCE). Dead
/// info stores are removed by the linker (tests in crates/runtime/tests/linked.rs).
#[test]
fn dead_local_stores_leave_no_code() {
    let dead = VARIABLE.replace(".locals 1", ".locals 2").replace("    locstore 0\n", "    locstore 0\n    push 7\n    locstore 1\n");
    let (live, live_clif, _) = compile_opts(VARIABLE, DomainOpts::ALL);
    let (with_dead, dead_clif, v) = compile_opts(&dead, DomainOpts::ALL);
    assert_eq!(live.code_size(), with_dead.code_size(), "a dead local store changed the code:\n{live_clif}\n{dead_clif}");
    agree(&with_dead, &v, &boundary_packets());
}

/// `ret.pop` after `dup; push K; jcmp.ge bad` (or `jcmp.gt K - 1`) with
/// K no more than the ports: the fall-through block is entered by the
/// branch alone, so the port is in range and the check is left out. Kept
/// where a jump also enters the `ret.pop` (a bad port from there must
/// still fault) or the bound is beyond the ports.
fn port_check_program(cmp: &str, k: u32, rejoin: bool) -> String {
    let back = if rejoin { "back:\n" } else { "" };
    let bad = if rejoin { "    pop\n    push 9\n    jump back\n" } else { "    pop\n    ret 0\n" };
    format!(".ports 4\nsegment .push\n    pop\n    push 14\n    upload.8\n    dup\n    push {k}\n    {cmp} bad\n{back}    ret.pop\nbad:\n{bad}ends")
}

#[test]
fn a_port_known_in_range_is_not_checked_again() {
    let packets: Vec<Vec<u8>> = (0..=255u8).map(|b| (0..20).map(|i| if i == 14 { b } else { i }).collect()).collect();
    for (cmp, k, rejoin, checked) in [
        ("jcmp.ge", 4, false, false),
        ("jcmp.ge", 3, false, false),
        ("jcmp.gt", 3, false, false),
        ("jcmp.ge", 5, false, true),
        ("jcmp.gt", 4, false, true),
        ("jcmp.ge", 4, true, true),
        ("jcmp.lt", 4, false, true),
    ] {
        let src = port_check_program(cmp, k, rejoin);
        let (code, v) = compile(&src, true);
        let clif = push_clif(&code);
        // The port check: an unsigned compare against the 4 ports.
        let has_check = clif.lines().any(|l| l.contains("icmp") && l.contains(" ult ") && l.trim_end().ends_with("= 4"));
        assert_eq!(has_check, checked, "{cmp} {k} rejoin {rejoin}:\n{clif}");
        agree(&code, &v, &packets);
    }
}
