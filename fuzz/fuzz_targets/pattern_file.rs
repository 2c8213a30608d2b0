//! The pattern-file parsers of the `strmatch` and `regex` coprocessors
//! (crates/copro) on hostile input. The first byte picks the parser, the
//! bytes up to the next NUL are the file, the rest is a packet. Loading never
//! panics and every error names a line; a loaded file dumps to text that
//! loads back to the same dump; a strmatch search (aho-corasick backend)
//! agrees with a naive matcher and a regex search stays inside the region.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netvm_copro::regex::RegexCopro;
use netvm_copro::strmatch::{parse_pattern_file, Backend, PatternSet, MAX_MATCHES};
use netvm_vm::Coprocessor;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let cut = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    let Ok(text) = std::str::from_utf8(&rest[..cut]) else { return };
    let packet = rest.get(cut + 1..).unwrap_or(&[]);
    if which & 1 == 0 {
        let patterns = match parse_pattern_file(text) {
            Ok(p) => p,
            Err(e) => {
                assert!(e.starts_with("line "), "error without a line: {e}");
                return;
            }
        };
        let mut set = PatternSet::new(patterns.clone(), Backend::AhoCorasick).expect("a parsed file compiles");
        let dumped = netvm_copro::strmatch::format_pattern_file(set.patterns());
        assert_eq!(parse_pattern_file(&dumped).expect("a dump parses"), patterns);
        let mut out = Vec::new();
        for g in set.groups().to_vec() {
            let truncated = set.scan(g, packet, &mut out);
            let mut want = Vec::new();
            for p in patterns.iter().filter(|p| p.group == g) {
                let n = p.bytes.len();
                for end in n..=packet.len() {
                    let w = &packet[end - n..end];
                    if if p.nocase { w.eq_ignore_ascii_case(&p.bytes) } else { w == &p.bytes[..] } {
                        want.push((end, p.id, end - n));
                    }
                }
            }
            want.sort_unstable();
            assert_eq!(truncated, want.len() > MAX_MATCHES);
            want.truncate(MAX_MATCHES);
            let got: Vec<(usize, u32, usize)> = out.iter().map(|m| (m.end, m.id, m.start)).collect();
            assert_eq!(got, want, "group {g}");
            assert_eq!(set.first(g, packet).map(|m| (m.end, m.id, m.start)), want.first().copied());
        }
    } else {
        let mut r = RegexCopro::new();
        match r.load(text) {
            Err(e) => assert!(e.starts_with("line "), "error without a line: {e}"),
            Ok(_) => {
                let dumped = r.dump();
                let mut again = RegexCopro::new();
                again.load(&dumped).unwrap_or_else(|e| panic!("dump does not load back: {e}\n{dumped}"));
                assert_eq!(again.dump(), dumped);
                for line in dumped.lines() {
                    let id: u32 = line.split(' ').next().unwrap().parse().unwrap();
                    for anchored in [false, true] {
                        if let netvm_copro::regex::Search::Match(s, e) = r.search(id, packet, anchored).expect("a loaded id") {
                            assert!(s <= e && e <= packet.len());
                            assert!(!anchored || s == 0);
                        }
                    }
                }
            }
        }
    }
});
