//! Round-trip and robustness properties of the module format, the
//! assembler and the disassembler, on programs from `netvm-fuzzgen` and on
//! random input.
//!
//! - binary: `to_bytes` → `from_bytes` is the identity on generated modules,
//!   and on every mutated module the loader accepts;
//! - text: asm → binary → disasm → asm gives the identical binary, the
//!   disassembly is a fixed point, and assembling the same listing twice is
//!   deterministic;
//! - robustness: random bytes into `Module::from_bytes` and `netil::decode`,
//!   and random text into `netil::assemble`, never panic.
//!
//! Case counts are bounded so that each property runs in a few seconds.

use netil::{assemble, decode, disassemble, encode, Module};
use netvm_fuzzgen::{generate_from_bytes, netvm_verify, GenConfig, Generated};
use proptest::collection::vec;
use proptest::prelude::*;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

fn program(bytes: &[u8]) -> Generated {
    generate_from_bytes(bytes, &GenConfig::default())
}

/// Bytes from which fuzzgen makes a program.
fn seed_bytes() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..6000)
}

/// The disassembly of `m`, which must reassemble to the identical bytes.
fn check_text_roundtrip(m: &Module) -> Result<String, TestCaseError> {
    let bytes = m.to_bytes();
    let text = disassemble(m).map_err(|e| TestCaseError::fail(format!("disassemble: {e:?}")))?;
    let again = assemble(&text).map_err(|e| TestCaseError::fail(format!("reassembling the disassembly: {e}\n{text}")))?;
    prop_assert_eq!(again.module.to_bytes(), bytes, "disasm → asm changed the module:\n{}", text);
    // The disassembly of the reassembled module is the same text.
    prop_assert_eq!(disassemble(&again.module).expect("decodes"), text.clone());
    Ok(text)
}

proptest! {
    #![proptest_config(config(500))]

    /// `to_bytes` → `from_bytes` is the identity on generated modules.
    #[test]
    fn binary_roundtrip(seed in seed_bytes()) {
        let g = program(&seed);
        let bytes = g.module.to_bytes();
        let back = Module::from_bytes(&bytes).expect("a module's own bytes load");
        prop_assert_eq!(&back, &g.module);
        prop_assert_eq!(back.to_bytes(), bytes);
    }

    /// asm → binary → disasm → asm gives the identical binary, for the
    /// generated listing (varied spellings) and the generated module.
    #[test]
    fn asm_binary_disasm_asm(seed in seed_bytes()) {
        let g = program(&seed);
        let a = assemble(&g.listing).map_err(|e| TestCaseError::fail(format!("{e}\n{}", g.listing)))?;
        prop_assert_eq!(&a.module, &g.module);
        let loaded = Module::from_bytes(&a.module.to_bytes()).expect("loads");
        check_text_roundtrip(&loaded)?;
    }

    /// Assembling the same listing twice gives the same module and source map.
    #[test]
    fn assembling_is_deterministic(seed in seed_bytes()) {
        let g = program(&seed);
        let a = assemble(&g.listing).expect("generated listings assemble");
        let b = assemble(&g.listing).expect("generated listings assemble");
        prop_assert_eq!(a.module.to_bytes(), b.module.to_bytes());
        prop_assert_eq!(a.source_map, b.source_map);
    }

    /// Mutated modules: the loader never panics, and whatever it accepts it
    /// writes back byte for byte (when the minor version is the one written).
    #[test]
    fn mutated_modules_load_exactly_or_fail(seed in seed_bytes(), edits in vec((any::<u16>(), any::<u8>(), 0u8..4), 1..6)) {
        let mut bytes = program(&seed).module.to_bytes();
        for (pos, val, kind) in edits {
            let at = pos as usize % (bytes.len() + 1);
            match kind {
                0 if at < bytes.len() => bytes[at] = val,
                1 => bytes.insert(at, val),
                2 if at < bytes.len() => { bytes.remove(at); }
                _ => bytes.truncate(at),
            }
        }
        if let Ok(m) = Module::from_bytes(&bytes) {
            if bytes[10..12] == [0, 0] {
                prop_assert_eq!(m.to_bytes(), bytes);
            }
            // Modules the verifier accepts also survive the text round trip.
            if netvm_verify::verify(&m).is_ok() {
                check_text_roundtrip(&m)?;
            }
        }
    }
}

proptest! {
    #![proptest_config(config(2000))]

    /// Random bytes never make the loader panic.
    #[test]
    fn from_bytes_never_panics(mut bytes in vec(any::<u8>(), 0..300), magic in any::<bool>()) {
        if magic && bytes.len() >= 12 {
            // Get past the magic and version checks most of the time.
            bytes[..8].copy_from_slice(&netil::module::MAGIC);
            bytes[8..12].copy_from_slice(&[1, 0, 0, 0]);
        }
        if let Ok(m) = Module::from_bytes(&bytes) {
            let _ = disassemble(&m);
        }
    }

    /// Random code never makes the decoder panic; whatever decodes encodes
    /// back to the same bytes.
    #[test]
    fn decode_never_panics(code in vec(any::<u8>(), 0..200)) {
        if let Ok(insns) = decode(&code) {
            let mut out = Vec::new();
            for i in &insns {
                encode(i.op, &i.operands, i.offset, &mut out).expect("decoded instructions encode");
            }
            prop_assert_eq!(out, code);
        }
    }

    /// Random text never makes the assembler panic.
    #[test]
    fn assemble_never_panics_on_random_text(text in "\\PC{0,200}") {
        let _ = assemble(&text);
    }
}

/// Tokens of the assembly language, to build random but assembler-shaped text.
const TOKENS: &[&str] = &[
    "segment",
    ".push",
    ".init",
    "ends",
    ".maxstacksize",
    ".locals",
    ".infosize",
    ".datasize",
    ".ports",
    ".copro",
    "c",
    "counters",
    "push",
    "pop",
    "dup",
    "pick",
    "add",
    "div",
    "jump",
    "jz",
    "jcmp.lt",
    "switch",
    "default",
    "ret",
    "ret.pop",
    "drop",
    "exit",
    "upload.8",
    "ustore.32",
    "locload",
    "locstore",
    "mcopy",
    "crc32",
    "csum",
    "copro.in",
    "copro.out",
    "copro.invoke",
    "pkt",
    "packet",
    "info",
    "data",
    "l",
    "m",
    "0",
    "1",
    "7",
    "255",
    "256",
    "1023",
    "1024",
    "65535",
    "65536",
    "-1",
    "-2147483648",
    "4294967295",
    "4294967296",
    "0x",
    "0xffff_ffff",
    "0b101",
    "0o17",
    "+3",
    "-",
    "_",
    "@",
    "@+0",
    "@-5",
    "@2147483647",
    "@-2147483649",
    ":",
    ":",
    ",",
    ",",
    "\\",
    ";",
    "\n",
    "\n",
    "\n",
    "\r\n",
    "\t",
    "é",
    "\u{0}",
];

proptest! {
    #![proptest_config(config(3000))]

    /// Random token soup never makes the assembler panic; whatever it
    /// accepts disassembles and reassembles to the identical binary.
    #[test]
    fn assemble_never_panics_on_token_soup(toks in vec((0..TOKENS.len(), any::<bool>()), 0..60)) {
        let mut text = String::new();
        for (t, space) in toks {
            text.push_str(TOKENS[t]);
            if space {
                text.push(' ');
            }
        }
        if let Ok(a) = assemble(&text) {
            if netvm_verify::verify(&a.module).is_ok() {
                check_text_roundtrip(&a.module)?;
            }
        }
    }
}

/// docs/netil.md section 4.8 promises that every verified module
/// disassembles to text that reassembles to the identical bytes, including
/// unreachable code, which only has to decode: an unreachable `ret 5000`
/// round-trips (any 16-bit port assembles; the verifier checks reachable
/// ones against `.ports`), and a `switch` whose cases are not strictly
/// ascending is rejected wherever it is (`switch-unsorted`), since the
/// assembler always writes cases sorted.
#[test]
fn verified_modules_with_odd_unreachable_code_roundtrip() {
    let base = Module { max_stack: 1, out_ports: 1, ..Module::default() };
    // drop; ret 5000
    let m = Module { push: Some(vec![0x51, 0x4f, 0x88, 0x13]), ..base.clone() };
    netvm_verify::verify(&m).expect("unreachable ret 5000 verifies");
    let text = disassemble(&m).expect("decodes");
    let again = assemble(&text).unwrap_or_else(|e| panic!("the disassembly does not assemble: {e}\n{text}"));
    assert_eq!(again.module.to_bytes(), m.to_bytes(), "disasm → asm changed the bytes\n{text}");
    let unsorted: [(&str, Vec<u8>); 2] = [
        // drop; switch 5: @+0, 3: @+0, default: @+0
        ("unreachable unsorted switch", vec![0x51, 0x4e, 2, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0]),
        // drop; switch 5: @+0, 5: @+0, default: @+0
        ("unreachable duplicate switch", vec![0x51, 0x4e, 2, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]),
    ];
    for (what, code) in unsorted {
        let m = Module { push: Some(code), ..base.clone() };
        let e = netvm_verify::verify(&m).expect_err(what);
        assert_eq!(e.rule.name(), "switch-unsorted", "{what}: {e}");
        assert_eq!(e.offset, Some(1), "{what}: {e}");
    }
}

/// The binding interface: assembly -> binary (format 1.1) -> disassembly ->
/// the same module; a module without one is still written as 1.0.
#[test]
fn interface_declarations_round_trip() {
    let text = "\
.datasize 16
.ports 2
.inport net 0
.outport pass 0
.outport blocked 1
.arg limit 0 4
.global seen 8 8
.layout ratelimit 2 accepts 1 0
segment .push
    pop
    ret 0
ends
";
    let m = netil::assemble(text).unwrap().module;
    let i = &m.interface;
    assert_eq!(i.inputs, vec![("net".to_string(), 0)]);
    assert_eq!(i.outputs.len(), 2);
    assert_eq!(i.args, vec![netil::Var { name: "limit".into(), offset: 0, size: 4 }]);
    assert_eq!(i.layout, Some(netil::Layout { name: "ratelimit".into(), version: 2, accepts: vec![1, 0] }));
    let bytes = m.to_bytes();
    assert_eq!(&bytes[8..12], &[1, 0, 1, 0], "format 1.1");
    assert_eq!(Module::from_bytes(&bytes).unwrap(), m);
    let again = netil::assemble(&netil::disassemble(&m).unwrap()).unwrap().module;
    assert_eq!(again, m);
    // A cut inside the section is an error; a cut before it is a module without it.
    let code_end = bytes.iter().rposition(|&b| b == netil::module::INTERFACE_TAG).unwrap();
    for n in 0..bytes.len() {
        match Module::from_bytes(&bytes[..n]) {
            Ok(cut) => assert!(n == code_end && cut.interface.is_empty(), "prefix {n} accepted"),
            Err(_) => assert_ne!(n, code_end),
        }
    }
    // Without an interface: 1.0, and no section.
    let plain = netil::assemble("segment .push\n    pop\n    ret 0\nends\n").unwrap().module;
    assert_eq!(&plain.to_bytes()[8..12], &[1, 0, 0, 0]);
    // A 1.0 header cannot carry the section.
    let mut old = bytes.clone();
    old[10] = 0;
    assert!(Module::from_bytes(&old).is_err());
}

#[test]
fn interface_declarations_are_checked() {
    let bad = [
        (".ports 1\n.outport a 1\n", "output port"),
        (".datasize 4\n.arg a 2 4\n", "past the data memory"),
        (".datasize 16\n.arg a 0 9\n", "out of range"),
        (".datasize 16\n.arg a 0 4\n.global a 4 4\n", "twice"),
        (".layout l 1 accepts 1\n", "accepts itself"),
        (".layout l 1\n.layout l 2\n", "twice"),
        (".layout l 1 except 2\n", "accepts"),
        (".inport 9x 0\n", "identifier"),
        (".arg a 0\n", ".arg NAME OFFSET SIZE"),
    ];
    for (decl, want) in bad {
        let text = format!("{decl}segment .push\n    pop\n    ret 0\nends\n");
        let e = netil::assemble(&text).expect_err(decl);
        assert!(e.message.contains(want), "{decl}: {}", e.message);
    }
}
