//! Fuzzes the IDS's rule parser and compiler: any text parses without a
//! panic (bad lines become reported errors with a line inside the text),
//! and the rules that parse compile into modules that pass the verifier.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let set = netvm_ids::parse_rules(text, &HashMap::new());
    let lines = text.lines().count().max(1);
    for e in &set.errors {
        assert!(e.line >= 1 && e.line <= lines, "error line {} outside 1..={lines}", e.line);
    }
    if set.rules.len() > 200 {
        return; // keep each input fast
    }
    let app = netvm_ids::compile(&set.rules).expect("parsed rules compile");
    for spec in &app.manifest.netpes {
        let m = spec.module.as_ref().expect("in-memory module");
        netvm_verify::verify(m).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
    }
});
