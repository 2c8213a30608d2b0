//! Fuzzes the `lpm` route file reader: any text must parse or give an error
//! naming a line, never panic; what parses obeys the format's limits, loads,
//! and dumps to a file that loads back to the same table.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netvm_copro::lpm::{parse_routes, Family, MAX_NEXT_HOP};
use netvm_vm::{CoproConfig, Coprocessor};

fn instance(family: &str) -> Box<dyn Coprocessor> {
    // A small group budget bounds memory whatever the input.
    let cfg = CoproConfig::from([("family".to_string(), family.to_string()), ("tbl8_groups".to_string(), "256".to_string())]);
    netvm_copro::registry().create("lpm", &cfg).expect("valid configuration")
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for (family, name) in [(Family::Ipv4, "ipv4"), (Family::Ipv6, "ipv6")] {
        match parse_routes(text, family) {
            Err(e) => assert!(e.starts_with("line "), "{e}"),
            Ok(routes) => {
                for r in &routes {
                    assert_eq!(Family::of(r.addr), family);
                    assert!(r.len <= family.bits() && r.next_hop <= MAX_NEXT_HOP);
                }
                // Short IPv4 prefixes rewrite millions of entries: keep runs fast.
                if family == Family::Ipv4 && routes.iter().filter(|r| r.len < 16).count() > 4 {
                    continue;
                }
                let mut c = instance(name);
                match c.load(text) {
                    Ok(n) => assert_eq!(n, routes.len()),
                    Err(e) => {
                        assert!(e.contains("tbl8 group budget exhausted"), "{e}");
                        continue;
                    }
                }
                let dump = c.dump();
                assert_eq!(parse_routes(&dump, family).expect("a dump parses").len(), routes.len());
                let mut d = instance(name);
                assert_eq!(d.load(&dump), Ok(routes.len()));
                assert_eq!(d.dump(), dump);
            }
        }
    }
});
