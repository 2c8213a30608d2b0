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
            (c.push(&mut st, &mut xb, 0, &limits), xb)
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
