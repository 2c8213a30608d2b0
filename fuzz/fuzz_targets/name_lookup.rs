//! Fuzzes the `names` lookup on hostile packets: the first line of the
//! input is a prefix file (loaded when it parses), the rest a packet looked
//! up at every offset of its first 32 bytes. Every lookup must answer (no
//! panic, no hang, no read out of bounds), the same answer twice, a match
//! must name a stored depth, and the bulk lookup must agree.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netvm_copro::names::{parse_prefixes, NameFib, NameMatch};

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let (text, packet) = (&data[..split], data.get(split + 1..).unwrap_or(&[]));
    let mut fib = NameFib::with_seed(1024, 7).expect("valid capacity");
    if let Ok(routes) = std::str::from_utf8(text).map_err(|_| ()).and_then(|t| parse_prefixes(&t.replace(';', "\n")).map_err(|_| ())) {
        for (_, r) in routes {
            if fib.insert(&r.prefix, r.next_hop).is_err() {
                break;
            }
        }
    }
    let mut probes = 0;
    for off in 0..packet.len().min(32) + 1 {
        let a = fib.lookup(packet, off, &mut probes);
        assert_eq!(a, fib.lookup(packet, off, &mut probes));
        if let NameMatch::Found { components, .. } = a {
            assert!(components as usize <= fib.depth());
        }
    }
    // The bulk lookup gives the same answers, and the end of the bytes they depend on.
    let names: Vec<(usize, &[u8])> = (0..packet.len().min(32) + 1).map(|off| (off, packet)).collect();
    let mut bulk = vec![netvm_copro::names::BulkAnswer::default(); names.len()];
    fib.lookup_bulk(&names, &mut bulk);
    for ((off, p), b) in names.iter().zip(&bulk) {
        assert_eq!(b.answer, fib.lookup(p, *off, &mut probes));
        assert!(b.end == 0 || (b.end > *off && b.end <= p.len()));
        if b.end != 0 {
            assert_eq!(fib.lookup(&p[..b.end], *off, &mut probes), b.answer, "the answer depends only on the bytes up to `end`");
        }
    }
});
