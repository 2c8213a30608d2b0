//! Fuzzes the control plane of every built-in coprocessor kind: any text
//! given to `load` (the files of `netvm run --load NAME=FILE`) is accepted
//! or refused with an error, never a panic or a hang; and for every kind
//! that accepted it, `dump` loads back into a fresh instance and dumps to
//! the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;
#[path = "../../crates/copro/tests/support/small_config.rs"]
mod support;

use support::small_config as config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let registry = netvm_copro::registry();
    for kind in registry.kinds().map(str::to_string).collect::<Vec<_>>() {
        let mut c = registry.create(&kind, &config(&kind)).expect("default config");
        if c.load(text).is_err() {
            continue;
        }
        let dump = c.dump();
        let mut fresh = registry.create(&kind, &config(&kind)).expect("default config");
        if kind == "counters" || kind == "eventlog" {
            continue; // nothing to load: their dumps are state, not tables
        }
        fresh.load(&dump).unwrap_or_else(|e| panic!("{kind}: the dump does not load back: {e}\n{dump}"));
        assert_eq!(fresh.dump(), dump, "{kind}: dump, load, dump changed the text");
    }
});
