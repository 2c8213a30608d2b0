//! Fuzzes the IDS's rule parser and compiler: any text parses without a
//! panic (bad lines become reported skips with a line inside the text and
//! an option key), and the rules the compiler selects compile into modules
//! that pass the verifier.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let set = netvm_ids::parse_rules(text, &HashMap::new());
    let lines = text.lines().count().max(1);
    for e in &set.skipped {
        assert!(e.line >= 1 && e.line <= lines, "skip line {} outside 1..={lines}", e.line);
        assert!(!e.option.is_empty() && !e.reason.is_empty());
    }
    for r in &set.rules {
        assert!(r.line >= 1 && r.line <= lines, "rule line {} outside 1..={lines}", r.line);
    }
    if set.rules.len() > 200 {
        return; // keep each input fast
    }
    let (rules, _) = netvm_ids::compile::select(&set);
    let app = netvm_ids::compile(&rules).expect("selected rules compile");
    for spec in &app.manifest.netpes {
        let m = spec.module.as_ref().expect("in-memory module");
        netvm_verify::verify(m).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
    }
});
