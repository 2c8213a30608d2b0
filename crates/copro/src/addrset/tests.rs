use super::*;
use netvm_vm::Timestamp;

fn ctx() -> InvokeContext<'static> {
    InvokeContext { packet: &[], info: &[], now: Timestamp::default(), seq: 0 }
}

fn ip(s: &str) -> u32 {
    u32::from(s.parse::<Ipv4Addr>().unwrap())
}

/// The sets of `entries` containing `addr` in `group`, by brute force.
fn naive(entries: &[Entry], group: u32, addr: u32) -> Vec<u32> {
    let mut ids: Vec<u32> = entries.iter().filter(|e| e.group == group && addr & mask(e.len) == e.net).map(|e| e.id).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

#[test]
fn nested_and_overlapping_sets() {
    let text = "\
# id group prefix
1 0 10.0.0.0/8
2 0 10.1.0.0/16
3 0 10.1.2.3
1 0 10.1.2.0/24
4 0 0.0.0.0/0
5 1 10.1.2.3
2 0 192.168.0.0/16
";
    let mut c = AddrSetCopro::new();
    assert_eq!(c.load(text), Ok(7));
    let mut out = Vec::new();
    c.sets().search(0, ip("10.1.2.3"), &mut out);
    assert_eq!(out, [1, 2, 3, 4]);
    c.sets().search(0, ip("10.1.2.4"), &mut out);
    assert_eq!(out, [1, 2, 4]);
    c.sets().search(0, ip("10.2.0.0"), &mut out);
    assert_eq!(out, [1, 4]);
    c.sets().search(0, ip("11.0.0.0"), &mut out);
    assert_eq!(out, [4]);
    c.sets().search(0, ip("192.168.255.255"), &mut out);
    assert_eq!(out, [2, 4]);
    c.sets().search(1, ip("10.1.2.3"), &mut out);
    assert_eq!(out, [5]);
    c.sets().search(1, ip("10.1.2.2"), &mut out);
    assert!(out.is_empty());
    c.sets().search(9, ip("10.1.2.3"), &mut out);
    assert!(out.is_empty());
    assert!(c.sets().contains(0, 3, ip("10.1.2.3")));
    assert!(!c.sets().contains(0, 3, ip("10.1.2.4")));
    assert!(c.sets().contains(0, 4, ip("255.255.255.255")));

    // Through the registers.
    for (r, v) in [(0, 0), (1, ip("10.1.2.3"))] {
        c.write(r, v).unwrap();
    }
    c.invoke(0, &ctx()).unwrap();
    assert_eq!(c.read(0), Ok(4));
    let mut popped = Vec::new();
    loop {
        c.invoke(1, &ctx()).unwrap();
        if c.read(0) == Ok(0) {
            break;
        }
        popped.push(c.read(1).unwrap());
    }
    assert_eq!(popped, [1, 2, 3, 4]);
    c.write(2, 5).unwrap();
    c.write(0, 1).unwrap();
    c.invoke(2, &ctx()).unwrap();
    assert_eq!(c.read(0), Ok(1));
    assert_eq!(c.invoke(3, &ctx()), Err(CoproError::NoOperation(3)));
    assert_eq!(c.write(3, 0), Err(CoproError::NoRegister(3)));
    assert_eq!(c.read(2), Err(CoproError::NoRegister(2)));
    let stats: BTreeMap<String, u64> = c.stats().into_iter().collect();
    assert_eq!((stats["entries"], stats["groups"], stats["searches"], stats["hits"]), (7, 2, 2, 2));
}

#[test]
fn matches_brute_force_on_random_sets() {
    // A small xorshift: deterministic, no dependency.
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for round in 0..40 {
        let n = 1 + (rnd() % 200) as usize;
        let entries: Vec<Entry> = (0..n)
            .map(|_| {
                // Addresses near a few bases, so that prefixes nest and overlap.
                let base = [0x0A00_0000u32, 0xC0A8_0000, 0xFFFF_FF00, 0][(rnd() % 4) as usize];
                let len = (rnd() % 33) as u8;
                let net = (base ^ (rnd() as u32 & 0x0003_FFFF)) & mask(len);
                Entry { id: (rnd() % 16) as u32, group: (rnd() % 2) as u32, net, len }
            })
            .collect();
        let mut sets = AddrSets::new();
        sets.add(&entries).unwrap();
        let mut probes: Vec<u32> = entries
            .iter()
            .flat_map(|e| [e.net, e.net | !mask(e.len), e.net.wrapping_sub(1), (e.net | !mask(e.len)).wrapping_add(1)])
            .collect();
        probes.extend((0..200).map(|_| rnd() as u32));
        probes.extend([0, u32::MAX]);
        let mut out = Vec::new();
        for &a in &probes {
            for group in 0..2 {
                sets.search(group, a, &mut out);
                assert_eq!(out, naive(&entries, group, a), "round {round}: {a:#x} in group {group}");
                for id in 0..16 {
                    assert_eq!(sets.contains(group, id, a), out.contains(&id));
                }
            }
        }
        // The dump loads back to the same sets.
        let dump = sets.dump();
        let mut again = AddrSets::new();
        again.add(&parse(&dump).unwrap()).unwrap();
        assert_eq!(again.dump(), dump);
        assert_eq!(again.len(), sets.len());
    }
}

#[test]
fn bad_lines_name_the_line() {
    for (text, what) in [
        ("1 0 10.0.0.1/8", "bits set beyond"),
        ("1 0", "missing fields"),
        ("1 0 10.0.0.0/8 x", "trailing text"),
        ("x 0 10.0.0.0/8", "bad id"),
        ("1 -1 10.0.0.0/8", "bad group"),
        ("1 0 10.0.0.0/33", "bad prefix length"),
        ("1 0 10.0.0/8", "bad IPv4 address"),
        ("1 0 ::1", "bad IPv4 address"),
    ] {
        let e = parse(&format!("# ok\n0 0 1.2.3.4\n{text}\n")).unwrap_err();
        assert!(e.starts_with("line 3:") && e.contains(what), "{text}: {e}");
        // Nothing of a bad file is loaded.
        let mut c = AddrSetCopro::new();
        assert!(c.load(&format!("0 0 1.2.3.4\n{text}\n")).is_err());
        assert!(c.sets().is_empty());
    }
}

#[test]
fn shared_sets_refuse_changes() {
    let mut c = AddrSetCopro::new();
    c.load("1 0 10.0.0.0/8\n").unwrap();
    let mut fork = c.fork().unwrap();
    assert!(c.load("2 0 11.0.0.0/8\n").unwrap_err().contains("several workers"));
    c.clear();
    assert_eq!(c.sets().len(), 1);
    fork.write(1, ip("10.9.9.9")).unwrap();
    fork.invoke(0, &ctx()).unwrap();
    assert_eq!(fork.read(0), Ok(1));
    // Searches of every handle count.
    let stats: BTreeMap<String, u64> = c.stats().into_iter().collect();
    assert_eq!(stats["searches"], 1);
    drop(fork);
    c.load("2 0 11.0.0.0/8\n").unwrap();
    assert_eq!(c.sets().len(), 2);
    assert!(create(&[("x".to_string(), "1".to_string())].into_iter().collect()).is_err());
}
