use super::*;
use netvm_traffic::SplitMix64;
use netvm_vm::Timestamp;
use proptest::prelude::*;

fn cfg(pairs: &[(&str, &str)]) -> CoproConfig {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn ctx(packet: &[u8]) -> InvokeContext<'_> {
    InvokeContext { packet, info: &[], now: Timestamp::default(), seq: 0 }
}

fn call(c: &mut dyn Coprocessor, off: u32, packet: &[u8]) -> [u32; 3] {
    c.write(8, off).unwrap();
    c.invoke(0, &ctx(packet)).unwrap();
    [c.read(0).unwrap(), c.read(1).unwrap(), c.read(2).unwrap()]
}

fn generic(parts: &[&str]) -> Vec<Component> {
    parts.iter().map(|p| Component { typ: 8, value: p.as_bytes().to_vec() }).collect()
}

/// The longest prefix of `name` in `routes`, by a scan (a later route for the same prefix wins).
fn naive(routes: &[(Vec<Component>, u32)], name: &[Component]) -> Option<(u32, u32)> {
    let mut best: Option<(usize, u32)> = None;
    for (p, nh) in routes {
        if p.len() <= name.len() && name[..p.len()] == p[..] && best.is_none_or(|(l, _)| p.len() >= l) {
            best = Some((p.len(), *nh));
        }
    }
    best.map(|(l, nh)| (nh, l as u32))
}

/// A TLV with the given (possibly not minimal) length encoding: 0 = shortest, else 3, 5 or 9 bytes.
fn tlv_with(typ: u8, value: &[u8], wide: usize) -> Vec<u8> {
    let mut out = vec![typ];
    let n = value.len() as u64;
    match wide {
        3 => {
            out.push(253);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        5 => {
            out.push(254);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        9 => {
            out.push(255);
            out.extend_from_slice(&n.to_be_bytes());
        }
        _ if n < 253 => out.push(n as u8),
        _ => {
            out.push(253);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    out.extend_from_slice(value);
    out
}

fn pkt_cut(p: &[u8], cut: usize) -> Vec<u8> {
    p[..cut].to_vec()
}

fn interest(name: &[Component], wide: usize) -> Vec<u8> {
    let comps: Vec<u8> = name.iter().flat_map(|c| tlv_with(c.typ as u8, &c.value, wide)).collect();
    let mut body = tlv_with(7, &comps, wide);
    body.extend_from_slice(&[0x0a, 4, 1, 2, 3, 4]); // Nonce
    tlv_with(5, &body, 0)
}

#[test]
fn uris_read_and_write_back() {
    assert_eq!(parse_name("/").unwrap(), vec![]);
    assert_eq!(parse_name("ndn:/a/b/").unwrap(), generic(&["a", "b"]));
    let n = parse_name("/edu/ucla%2Fcs/.../..../1=%AB%cd/65535=x").unwrap();
    assert_eq!(n[1].value, b"ucla/cs");
    assert_eq!(n[2].value, b"");
    assert_eq!(n[3].value, b".");
    assert_eq!((n[4].typ, &n[4].value[..]), (1, &[0xab, 0xcd][..]));
    assert_eq!(n[5].typ, 65535);
    assert_eq!(format_name(&n), "/edu/ucla%2Fcs/.../..../1=%AB%CD/65535=x");
    assert_eq!(parse_name(&format_name(&n)).unwrap(), n);
    for bad in ["a/b", "/a//b", "/a/./b", "/..", "/a%2", "/a%zz", "/0=x", "/65536=x", ""] {
        assert!(parse_name(bad).is_err(), "{bad}");
    }
    let deep = "/x".repeat(MAX_COMPONENTS + 1);
    assert!(parse_name(&deep).unwrap_err().contains("more than 64"));
    // `=` after something that is not a number is part of a generic value.
    assert_eq!(parse_name("/a=b").unwrap(), vec![Component { typ: 8, value: b"a=b".to_vec() }]);
}

proptest! {
    #[test]
    fn any_name_formats_and_parses_back(name in prop::collection::vec((1u16..=300, prop::collection::vec(any::<u8>(), 0..6)), 0..6)) {
        let name: Vec<Component> = name.into_iter().map(|(typ, value)| Component { typ, value }).collect();
        prop_assert_eq!(parse_name(&format_name(&name)).unwrap(), name);
    }

    /// Whatever the bytes, a lookup answers (no panic), and only a
    /// well-formed name finds anything.
    #[test]
    fn any_bytes_are_an_answer(bytes in prop::collection::vec(any::<u8>(), 0..80), off in 0usize..90) {
        let mut fib = NameFib::with_seed(64, 1).unwrap();
        fib.insert(&[], 9).unwrap();
        fib.insert(&generic(&["a"]), 1).unwrap();
        let mut probes = 0;
        let _ = fib.lookup(&bytes, off, &mut probes);
        let mut p = vec![5u8, 200, 7, 3, 8, 1, b'a'];
        p.extend_from_slice(&bytes);
        prop_assert_eq!(fib.lookup(&p, 0, &mut probes), NameMatch::Found { next_hop: 1, components: 1 });
    }
}

/// Random tables and names from a small alphabet (so that prefixes nest
/// and names share them), looked up in packets with every length
/// encoding, against the scan.
#[test]
fn lookups_match_a_scan() {
    let mut r = SplitMix64::new(7);
    let words = ["a", "b", "com", "video", "", "seg=1", "\u{e9}t\u{e9}"];
    let rand_name = |r: &mut SplitMix64, max: u64| -> Vec<Component> {
        (0..r.below(max + 1))
            .map(|_| Component {
                typ: if r.below(8) == 0 { 1 + r.below(3) as u16 } else { 8 },
                value: words[r.below(7) as usize].as_bytes().to_vec(),
            })
            .collect()
    };
    for round in 0..20 {
        let mut fib = NameFib::with_seed(4096, round).unwrap();
        let mut routes = Vec::new();
        for _ in 0..r.below(300) {
            let p = rand_name(&mut r, 5);
            let nh = r.below(1 << 32) as u32;
            fib.insert(&p, nh).unwrap();
            routes.push((p, nh));
        }
        let mut probes = 0;
        let mut bulk_pkts = Vec::new();
        for i in 0..500 {
            let name = rand_name(&mut r, 8);
            let want = naive(&routes, &name).map_or(NameMatch::Missing, |(next_hop, components)| NameMatch::Found { next_hop, components });
            let wide = [0, 0, 3, 5, 9][i % 5];
            let pkt = interest(&name, wide);
            assert_eq!(fib.lookup(&pkt, 0, &mut probes), want, "round {round}: {} ({wide})", format_name(&name));
            // The Name TLV itself, further in a frame.
            let mut frame = vec![0xee; 14];
            frame.extend_from_slice(&encode_name(&name));
            assert_eq!(fib.lookup(&frame, 14, &mut probes), want);
            // Cut anywhere inside the name: malformed (or still whole, when the cut is in the Nonce).
            let name_end = pkt.len() - 6;
            let cut = r.below(name_end as u64) as usize;
            assert_eq!(fib.lookup(&pkt[..cut], 0, &mut probes), NameMatch::Malformed, "cut at {cut}");
            assert_eq!(fib.lookup(&pkt[..name_end], 0, &mut probes), want, "an Interest cut after its name");
            bulk_pkts.push(pkt);
            bulk_pkts.push(pkt_cut(&bulk_pkts[bulk_pkts.len() - 1], cut));
        }
        // The bulk lookup (groups of 32 and a shorter one) gives the same answers.
        let names: Vec<(usize, &[u8])> = bulk_pkts.iter().map(|p| (0, p.as_slice())).collect();
        let mut bulk = vec![BulkAnswer::default(); names.len()];
        fib.lookup_bulk(&names, &mut bulk);
        for ((off, p), b) in names.iter().zip(&bulk) {
            let mut single = 0;
            assert_eq!(b.answer, fib.lookup(p, *off, &mut single));
            assert_eq!(u64::from(b.probes), single, "the same probes");
            assert_eq!(b.end == 0, b.answer == NameMatch::Malformed);
            if b.end != 0 {
                assert_eq!(fib.lookup(&p[..b.end], *off, &mut single), b.answer, "the answer depends on the bytes up to `end` only");
            }
        }
        let mut dumped: Vec<_> = fib.iter().collect();
        dumped.sort();
        let mut want: std::collections::BTreeMap<Vec<Component>, u32> = Default::default();
        for (p, nh) in &routes {
            want.insert(p.clone(), *nh);
        }
        assert_eq!(dumped, want.into_iter().collect::<Vec<_>>());
        assert_eq!(fib.len(), dumped.len());
    }
}

#[test]
fn malformed_names() {
    let mut fib = NameFib::with_seed(16, 3).unwrap();
    fib.insert(&[], 1).unwrap();
    let mut p = 0;
    for bad in [
        &[][..],
        &[6, 0],                        // Data without a Name
        &[5, 2, 8, 0],                  // Interest whose first element is not a Name
        &[9, 0],                        // neither a Name nor a packet
        &[7, 3, 8, 2, b'a'],            // component past the Name
        &[7, 2, 0, 0],                  // component type 0
        &[7, 6, 254, 0, 1, 0, 0, 0],    // component type 65536
        &[7, 3, 253, 0, 8],             // type 0x0008 in three bytes (fine), then no length
        &[7, 255, 0, 0, 0, 0, 0, 0, 0], // length cut short
        &[5, 4, 7, 9, 8, 0],            // Name longer than its Interest
    ] {
        assert_eq!(fib.lookup(bad, 0, &mut p), NameMatch::Malformed, "{bad:?}");
    }
    assert_eq!(fib.lookup(&[7, 5, 253, 0, 8, 1, b'a'], 0, &mut p), NameMatch::Found { next_hop: 1, components: 0 });
    assert_eq!(fib.lookup(&[7, 4, 253, 0, 8, 0], 0, &mut p), NameMatch::Found { next_hop: 1, components: 0 });
    assert_eq!(fib.lookup(&[7, 0], 0, &mut p), NameMatch::Found { next_hop: 1, components: 0 });
    assert_eq!(fib.lookup(&[7, 0], 2, &mut p), NameMatch::Malformed);
    assert_eq!(fib.lookup(&[7, 0], usize::MAX, &mut p), NameMatch::Malformed);
    // A huge length in a 9-byte encoding does not overflow.
    assert_eq!(
        fib.lookup(&[5, 255, 255, 255, 255, 255, 255, 255, 255, 255, 7, 0], 0, &mut p),
        NameMatch::Found { next_hop: 1, components: 0 }
    );
    assert_eq!(fib.lookup(&[7, 255, 255, 255, 255, 255, 255, 255, 255, 255], 0, &mut p), NameMatch::Malformed);
}

#[test]
fn probes_skip_lengths_no_prefix_has() {
    let mut fib = NameFib::with_seed(16, 3).unwrap();
    fib.insert(&generic(&["a"]), 1).unwrap();
    fib.insert(&generic(&["a", "b", "c", "d"]), 4).unwrap();
    let mut probes = 0;
    let pkt = encode_name(&generic(&["a", "b", "x", "y", "z", "w"]));
    assert_eq!(fib.lookup(&pkt, 0, &mut probes), NameMatch::Found { next_hop: 1, components: 1 });
    assert_eq!(probes, 2, "lengths 4 and 1 only");
}

#[test]
fn registers_ops_and_stats() {
    let mut c = create(&cfg(&[("capacity", "8")])).unwrap();
    let c = c.as_mut();
    assert_eq!(c.load("/a 1\n/a/b 2\n# comment\n\n/a/b 3 # replaced\n"), Ok(3));
    let pkt = interest(&generic(&["a", "b", "c"]), 0);
    assert_eq!(call(c, 0, &pkt), [1, 3, 2]);
    assert_eq!(call(c, 0, &interest(&generic(&["b"]), 0)), [0, 0, 0]);
    assert_eq!(call(c, 1, &pkt), [2, 0, 0]);
    assert_eq!(call(c, u32::MAX, &pkt), [2, 0, 0]);
    assert_eq!(c.write(0, 0), Err(CoproError::NoRegister(0)));
    assert_eq!(c.read(3), Err(CoproError::NoRegister(3)));
    assert_eq!(c.invoke(1, &ctx(&pkt)), Err(CoproError::NoOperation(1)));
    let stats: std::collections::BTreeMap<String, u64> = c.stats().into_iter().collect();
    assert_eq!(stats["prefixes"], 2);
    assert_eq!(stats["capacity"], 8);
    assert_eq!(stats["depth"], 2);
    assert_eq!((stats["lookups"], stats["hits"], stats["malformed"]), (4, 1, 2));
    assert_eq!(stats["probes"], 2, "/a/b found at once; /b probes length 1");
    assert_eq!(c.kind(), "names");
    assert!(crate::registry().kinds().any(|k| k == "names"));
}

#[test]
fn config_and_files() {
    let err = |pairs| create(&cfg(pairs)).err().unwrap_or_default();
    assert!(err(&[("size", "1")]).contains("unknown setting `size`"));
    assert!(err(&[("capacity", "0")]).contains("capacity"));
    assert!(err(&[("capacity", "33554433")]).contains("capacity"));
    let mut c = create(&cfg(&[("capacity", "2")])).unwrap();
    assert!(c.load("/a 1\n/b\n").unwrap_err().starts_with("line 2: `/b`: no next hop"));
    assert!(c.load("/a 1\n\n/b -1\n").unwrap_err().starts_with("line 3: next hop `-1`"));
    assert!(c.load("/a 1 2\n").unwrap_err().contains("unexpected `2`"));
    assert!(c.load("a 1\n").unwrap_err().starts_with("line 1: `a` does not start with `/`"));
    assert_eq!(c.dump(), "", "a bad file adds nothing");
    // The root prefix does not count against the capacity.
    let text = "/ 7\n/z/1=%00 1\n/a 2\n";
    assert_eq!(c.load(text), Ok(3));
    let dump = c.dump();
    assert_eq!(dump, "/ 7\n/a 2\n/z/1=%00 1\n");
    let mut d = create(&cfg(&[])).unwrap();
    assert_eq!(d.load(&dump), Ok(3));
    assert_eq!(d.dump(), dump);
    assert!(c.load("/b 3\n").unwrap_err().starts_with("line 1: /b: the table is full"));
    c.clear();
    assert_eq!(c.dump(), "");
    assert_eq!(c.stats()[2], ("depth".to_string(), 0));
}

#[test]
fn forks_share_the_table_which_only_a_sole_handle_changes() {
    let mut a = create(&cfg(&[])).unwrap();
    a.load("/a 1\n/a/b 2\n").unwrap();
    let b = a.fork().unwrap();
    assert_eq!(b.share(), WorkerShare::Shared);
    let pkt = interest(&generic(&["a", "b"]), 0);
    let threads: Vec<_> = [b, a.fork().unwrap()]
        .into_iter()
        .map(|mut f| {
            let pkt = pkt.clone();
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    assert_eq!(call(f.as_mut(), 0, &pkt), [1, 2, 2]);
                }
                f
            })
        })
        .collect();
    let mut forks: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let stats: std::collections::BTreeMap<String, u64> = a.stats().into_iter().collect();
    assert_eq!((stats["lookups"], stats["hits"]), (2000, 2000));
    assert!(a.load("/c 3").unwrap_err().contains("several workers"));
    a.clear();
    assert_eq!(a.dump(), "/a 1\n/a/b 2\n");
    forks.clear();
    assert_eq!(a.load("/c 3"), Ok(1));
    assert_eq!(a.dump(), "/a 1\n/a/b 2\n/c 3\n");
}

/// Runs the pre-lookup stage of `lookup` on `pkts` (name at offset 0).
fn ahead(c: &dyn Coprocessor, pkts: &mut [netvm_vm::Packet]) {
    let descs: Vec<netvm_vm::XbDesc> = pkts.iter_mut().enumerate().map(|(i, p)| netvm_vm::XbDesc::of(p, i as u64)).collect();
    let words: Vec<u32> = descs.iter().flat_map(|_| [1, 0]).collect();
    assert_eq!(c.lookahead(0), Some(1 << 8));
    // SAFETY: the descriptors point at the packets' bytes, which nothing
    // writes while `descs` lives.
    let packets = unsafe { netvm_vm::buffer::Packets::new(&descs) };
    c.ahead(0, &netvm_vm::AheadKeys { words: &words, regs: 1 << 8, packets }, true);
}

/// The answers the pre-lookup stage keeps are used only for the same
/// bytes: a packet changed after the stage, a lookup at another offset, a
/// packet the stage never saw and one that skipped its lookup all get
/// fresh answers, and the statistics count each lookup once.
#[test]
fn answers_found_ahead_hold_only_for_the_same_bytes() {
    let mut c = create(&cfg(&[])).unwrap();
    c.load("/a 1\n/a/b 2\n/c 3\n").unwrap();
    let mut pkts: Vec<netvm_vm::Packet> = [&["a", "b", "x"][..], &["a", "z"], &["c"], &["a", "b"], &["q"]]
        .iter()
        .map(|n| netvm_vm::Packet::from_bytes(interest(&generic(n), 0)))
        .collect();
    ahead(c.as_ref(), &mut pkts);
    let c = c.as_mut();
    assert_eq!(call(c, 0, &pkts[0].data), [1, 2, 2]);
    // Packet 1 leaves the data path before its lookup; packet 2 is changed first.
    pkts[2].data[6] = b'a'; // /c -> /a
    pkts[0].data[15] ^= 1; // the Nonce of a packet looked up already
    assert_eq!(call(c, 0, &pkts[2].data), [1, 1, 1]);
    // A lookup at another offset is not the one looked up ahead.
    assert_eq!(call(c, 1, &pkts[3].data), [2, 0, 0]);
    assert_eq!(call(c, 0, &pkts[3].data), [1, 2, 2]);
    // A copy of packet 4 elsewhere, then packet 4 itself.
    let copy = pkts[4].data.clone();
    assert_eq!(call(c, 0, &copy), [0, 0, 0]);
    assert_eq!(call(c, 0, &pkts[4].data), [0, 0, 0]);
    let stats: std::collections::BTreeMap<String, u64> = c.stats().into_iter().collect();
    assert_eq!((stats["lookups"], stats["hits"], stats["malformed"]), (6, 3, 1));
    assert_eq!(stats["probes"], 5, "one each (the longest candidate is stored), none for the malformed offset");
}
