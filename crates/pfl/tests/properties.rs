//! Properties of the filter compiler on generated input (the bounded
//! version of `fuzz/fuzz_targets/filter_compiler.rs`):
//! - token soup and arbitrary text never make it panic, and an error's span
//!   lies inside the expression;
//! - expressions generated from the grammar compile to modules that verify,
//!   and the interpreter and the JIT agree on every generated packet.
//!
//! `PROPTEST_CASES` scales the runs.

use netvm_fuzzgen::arbitrary::Unstructured;
use netvm_fuzzgen::{generate_packets, observe};
use netvm_interp::InterpCode;
use netvm_jit::JitCode;
use netvm_vm::Limits;
use proptest::prelude::*;

const WORDS: &[&str] = &[
    "host",
    "net",
    "port",
    "portrange",
    "proto",
    "src",
    "dst",
    "and",
    "or",
    "not",
    "ether",
    "ip",
    "ip6",
    "arp",
    "rarp",
    "tcp",
    "udp",
    "icmp",
    "icmp6",
    "sctp",
    "vlan",
    "mpls",
    "len",
    "less",
    "greater",
    "broadcast",
    "multicast",
    "mask",
    "(",
    ")",
    "[",
    "]",
    ":",
    "+",
    "-",
    "*",
    "/",
    "%",
    "&",
    "|",
    "^",
    "<<",
    ">>",
    "=",
    "!=",
    "<",
    ">",
    "<=",
    ">=",
    "!",
    "&&",
    "||",
    "0",
    "1",
    "2",
    "4",
    "13",
    "80",
    "443",
    "0x800",
    "10.1.1.1",
    "10.0.0.0/8",
    "10.1",
    "255.255.0.0",
    "2001:db8::1",
    "::/0",
    "ff:ff:ff:ff:ff:ff",
    "tcp-syn",
    "tcpflags",
    "icmptype",
    "http",
    "20-25",
    "\\tcp",
    "ip.ttl",
    "tcp.dport",
    "4294967295",
    "65536",
];

const PRIMS: &[&str] = &[
    "ip",
    "ip6",
    "arp",
    "rarp",
    "tcp",
    "udp",
    "icmp",
    "icmp6",
    "sctp",
    "vlan",
    "vlan 10",
    "mpls",
    "mpls 5",
    "host 10.1.1.1",
    "src host 10.0.0.1",
    "dst net 10.0.0.0/8",
    "net 192.168.0.0 mask 255.255.0.0",
    "host 10.1",
    "ip6 host 2001:db8::1",
    "ip6 net fe80::/10",
    "ether host ff:ff:ff:ff:ff:ff",
    "ether src 0:1:2:3:4:5",
    "ether broadcast",
    "ether multicast",
    "ip broadcast",
    "ip multicast",
    "ip6 multicast",
    "broadcast",
    "multicast",
    "port 80",
    "tcp port 443",
    "udp dst port 53",
    "src or dst port 22",
    "src and dst port 80",
    "portrange 20-25",
    "sctp portrange 1024-1030",
    "ip proto 17",
    "ip6 proto 6",
    "proto \\tcp",
    "ether proto 0x0806",
    "ether proto 6",
    "less 64",
    "greater 100",
    "tcp[tcpflags] & tcp-syn != 0",
    "icmp[icmptype] = icmp-echo",
    "ip[ip[0] & 0xf] > 3",
    "tcp[(tcp[12] >> 4) * 4] = 0x47",
    "ether[12:2] = 0x8100",
    "ip[6:2] & 0x1fff != 0",
    "udp[2:2] / ip[1] = 7",
    "ip[0] << ip[1] = 0",
    "len - 14 > ip[2:2]",
    "-ip[8] = 0xffffff01",
    "arp[7] = 2",
    "ip.ttl < 5",
    "tcp.dport = 80",
];

fn expr() -> impl Strategy<Value = String> {
    let leaf = proptest::sample::select(PRIMS).prop_map(str::to_string);
    leaf.prop_recursive(4, 24, 3, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone(), any::<bool>()).prop_map(|(a, b, and)| format!("{a} {} {b}", if and { "and" } else { "or" })),
            inner.clone().prop_map(|a| format!("not {a}")),
            inner.clone().prop_map(|a| format!("({a})")),
            (inner.clone(), proptest::sample::select(&["80", "443", "10.1.1.2", "53"][..])).prop_map(|(a, id)| format!("{a} or {id}")),
        ]
    })
}

fn check(expr: &str, packet_seed: &[u8]) -> Result<(), TestCaseError> {
    match netvm_pfl::compile(expr) {
        Err(e) => {
            prop_assert!(e.span.start <= e.span.end && e.span.end <= expr.len(), "span {:?} outside `{}`", e.span, expr);
            prop_assert!(!e.message.contains("internal error"), "`{}`: {}", expr, e.message);
            let r = e.render(expr);
            prop_assert!(r.contains('^'));
        }
        Ok(f) => {
            let v = match netvm_verify::verify(&f.module) {
                Ok(v) => v,
                Err(e) => return Err(TestCaseError::fail(format!("`{expr}`: the filter does not verify: {e}\n{}", f.text))),
            };
            let jit = JitCode::compile(&v).map_err(|e| TestCaseError::fail(format!("`{expr}`: JIT: {e}")))?;
            let mut u = Unstructured::new(packet_seed);
            let packets = generate_packets(&mut u, 16).unwrap_or_default();
            let limits = Limits { budget: 100_000 };
            let a = observe(&InterpCode::new(&v), &f.module, &packets, &limits);
            let b = observe(&jit, &f.module, &packets, &limits);
            prop_assert_eq!(a, b, "`{}`: interpreter and JIT differ\n{}", expr, f.text);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn token_soup_never_panics(words in proptest::collection::vec(proptest::sample::select(WORDS), 0..14), seed in proptest::collection::vec(any::<u8>(), 0..64)) {
        check(&words.join(" "), &seed)?;
    }

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,40}") {
        check(&s, &[])?;
    }

    #[test]
    fn generated_expressions_verify_and_engines_agree(e in expr(), seed in proptest::collection::vec(any::<u8>(), 64..600)) {
        check(&e, &seed)?;
    }
}

#[test]
fn every_primitive_compiles() {
    for p in PRIMS {
        if let Err(e) = netvm_pfl::compile(p) {
            panic!("{}", e.render(p));
        }
    }
}

#[test]
fn deep_and_long_expressions_are_errors_not_crashes() {
    for e in [
        "(".repeat(10_000) + "ip" + &")".repeat(10_000),
        "not ".repeat(10_000) + "ip",
        "ip[".repeat(5_000) + "0" + &"]".repeat(5_000) + " = 1",
        "-".repeat(10_000) + "1 = 1",
        vec!["port 80"; 5_000].join(" or "),
    ] {
        let err = netvm_pfl::compile(&e).expect_err("refused");
        assert!(err.message.contains("too"), "{}", err.message);
    }
    // Long but within the limits: compiles.
    let e = (1..=600).map(|p| format!("port {p}")).collect::<Vec<_>>().join(" or ");
    let f = netvm_pfl::compile(&e).expect("600 ports compile");
    netvm_verify::verify(&f.module).expect("and verify");
    let e = "(".repeat(90) + "ip" + &")".repeat(90);
    netvm_pfl::compile(&e).expect("90 parentheses compile");
}
