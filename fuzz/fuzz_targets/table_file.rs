//! Fuzzes the `table` coprocessor's file reader: any text, for a few key and
//! value sizes and a small capacity, must load or fail with an error naming
//! a line, never panic or hang; whatever loaded must dump, load back into a
//! fresh table and dump to the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netvm_vm::{CoproConfig, Coprocessor};

fn table(key_size: usize, value_size: usize) -> Box<dyn Coprocessor> {
    let cfg: CoproConfig = [("key_size", key_size.to_string()), ("value_size", value_size.to_string()), ("capacity", "64".to_string())]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    netvm_copro::registry().create("table", &cfg).expect("valid table configuration")
}

fuzz_target!(|data: &[u8]| {
    let Some((&sizes, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    // Key size 1..=16 (4 and 6 often: IPv4 and MAC), value size 0..=16.
    let key_size = match sizes & 0x0f {
        0..=4 => 4,
        5..=8 => 6,
        k => usize::from(k),
    };
    let value_size = usize::from(sizes >> 4) + usize::from(sizes >> 7);
    let mut a = table(key_size, value_size);
    match a.load(text) {
        Ok(n) => assert!(n <= text.lines().count()),
        Err(e) => assert!(e.starts_with("line "), "error without a line: {e}"),
    }
    let dump = a.dump();
    let mut b = table(key_size, value_size);
    b.load(&dump).expect("a dump loads back");
    assert_eq!(b.dump(), dump);
});
