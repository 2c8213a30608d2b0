//! Fuzzes the `regex` coprocessor's PCRE handling: any `/PATTERN/FLAGS`
//! text parses and builds without a panic, and where a pattern runs on
//! regex-automata (translated), PCRE2 itself finds the same match on the
//! subject (differential; a PCRE2 limit is not a disagreement).
#![no_main]

use libfuzzer_sys::fuzz_target;
use netvm_copro::regex::{compile_check, compile_pcre2, parse_pcre, Engine, Search};

fuzz_target!(|data: &[u8]| {
    // First line: the expression; the rest: the subject.
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let Ok(text) = std::str::from_utf8(&data[..split]) else { return };
    let hay = data.get(split + 1..).unwrap_or(&[]);
    let Ok(spec) = parse_pcre(text) else { return };
    let Ok(engine) = compile_check(&spec) else { return };
    let got = engine.find(hay);
    if let Engine::Automata(a) = &engine {
        let want = compile_pcre2(&spec).expect("PCRE2 builds what compile_check accepts").find(hay);
        assert!(want == Search::Limit || got == want, "{spec} as `{}`: {got:?}, PCRE2 {want:?}", a.translated);
    }
});
