//! The `http` coprocessor's HTTP/1.x parser (crates/copro) on hostile
//! bytes: it never panics, every present field lies inside the message,
//! an absent one is (0, 0), and parsing a message with bytes appended
//! after its body's end never changes its first line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netvm_copro::http::{parse, FIELDS, HEADER, START_LINE};

fuzz_target!(|data: &[u8]| {
    let Some(m) = parse(data) else { return };
    for f in 0..FIELDS {
        let (s, e) = m.fields[f];
        assert!(s <= e && e <= data.len(), "field {f} at {s}..{e} of {}", data.len());
        if m.present & (1 << f) == 0 {
            assert_eq!((s, e), (0, 0));
        }
    }
    assert!(m.present & (1 << START_LINE) != 0 && m.present & (1 << HEADER) != 0);
    let mut longer = data.to_vec();
    longer.extend_from_slice(b"\r\n\r\nmore");
    let again = parse(&longer).expect("more bytes keep a message a message");
    assert_eq!(again.fields[START_LINE], m.fields[START_LINE]);
    assert_eq!(again.kind, m.kind);
});
