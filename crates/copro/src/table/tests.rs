//! Tests of the `table` coprocessor: configuration, register packing, the
//! packet-key operations, aging through `tick`, and the file format.

use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

fn cfg(pairs: &[(&str, &str)]) -> CoproConfig {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn make(pairs: &[(&str, &str)]) -> Box<dyn Coprocessor> {
    create(&cfg(pairs)).unwrap()
}

fn ctx(packet: &[u8], ns: u64) -> InvokeContext<'_> {
    InvokeContext { packet, info: &[], now: Timestamp::from_nanos(ns) }
}

fn stat(c: &dyn Coprocessor, name: &str) -> u64 {
    c.stats().into_iter().find(|(k, _)| k == name).unwrap().1
}

/// Writes `words` to in0.. and invokes `op` at `ns`; returns out0..4.
fn call(c: &mut dyn Coprocessor, op: u8, words: &[(u8, u32)], packet: &[u8], ns: u64) -> Result<[u32; 5], CoproError> {
    for &(r, w) in words {
        c.write(r, w)?;
    }
    c.invoke(op, &ctx(packet, ns))?;
    let mut out = [0; 5];
    for (i, o) in out.iter_mut().enumerate() {
        *o = c.read(i as u8)?;
    }
    Ok(out)
}

#[test]
fn config() {
    let c = make(&[]);
    assert_eq!(c.kind(), "table");
    assert_eq!(stat(&*c, "capacity"), 65536);
    make(&[("key_size", "16"), ("value_size", "0"), ("capacity", "1"), ("aging", "300")]);
    for bad in [
        ("key_size", "0"),
        ("key_size", "17"),
        ("value_size", "17"),
        ("capacity", "0"),
        ("capacity", "33554433"),
        ("capacity", "-1"),
        ("aging", "1.5"),
        ("aging", "18446744073709551615"),
        ("size", "4"),
    ] {
        assert!(create(&cfg(&[bad])).is_err(), "{bad:?}");
    }
    assert!(create(&cfg(&[("bogus", "1")])).err().unwrap().contains("unknown setting `bogus`"));
}

#[test]
fn registers_are_big_endian_and_sizes_mask_bytes() {
    let mut c = make(&[("key_size", "6"), ("value_size", "5")]);
    let c = &mut *c;
    // Key aa:bb:cc:dd:ee:ff; bytes beyond the key size are ignored.
    let out = call(c, 1, &[(0, 0xaabb_ccdd), (1, 0xeeff_1234), (4, 0x0102_0304), (5, 0x05ff_ffff), (6, 7), (7, 8)], &[], 0).unwrap();
    assert_eq!(out, [1, 0, 0, 0, 0], "insert: done, no value outputs");
    let out = call(c, 0, &[(1, 0xeeff_0000), (4, 0), (5, 0)], &[], 0).unwrap();
    assert_eq!(out, [1, 0x0102_0304, 0x0500_0000, 0, 0], "value bytes beyond the size are zero");
    assert_eq!(c.dump(), "aabbccddeeff 0x0102030405\n");
    // The same key from packet memory.
    let pkt = [0, 0, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff];
    assert_eq!(call(c, 3, &[(8, 2)], &pkt, 0).unwrap()[..2], [1, 0x0102_0304]);
    assert_eq!(call(c, 3, &[(8, 1)], &pkt, 0).unwrap(), [0; 5], "miss zeroes the outputs");
    for off in [3, 8, u32::MAX] {
        assert!(matches!(call(c, 3, &[(8, off)], &pkt, 0), Err(CoproError::BadArgument(_))), "offset {off}");
        assert!(call(c, 4, &[(8, off)], &pkt, 0).is_err());
        assert!(call(c, 5, &[(8, off)], &pkt, 0).is_err());
    }
    assert_eq!(call(c, 5, &[(8, 2)], &pkt, 0).unwrap()[0], 1, "delete_pkt of a present key");
    assert_eq!(call(c, 2, &[], &pkt, 0).unwrap()[0], 0, "delete of an absent key");
    assert_eq!(call(c, 4, &[(8, 2), (4, 9)], &pkt, 0).unwrap()[0], 1);
    assert_eq!(call(c, 0, &[], &[], 0).unwrap()[..2], [1, 9]);
    assert_eq!(c.write(9, 0), Err(CoproError::NoRegister(9)));
    assert_eq!(c.read(5), Err(CoproError::NoRegister(5)));
    assert_eq!(c.invoke(6, &ctx(&[], 0)), Err(CoproError::NoOperation(6)));
    let s: Vec<u64> = c.stats().into_iter().map(|(_, v)| v).collect();
    // entries capacity lookups hits inserts insert_failures deletes aged_out
    assert_eq!(s, vec![1, 65536, 4, 3, 2, 0, 1, 0]);
}

#[test]
fn full_table_reports_failure() {
    let mut c = make(&[("capacity", "3"), ("value_size", "0")]);
    for k in 0..3 {
        assert_eq!(call(&mut *c, 1, &[(0, k)], &[], 0).unwrap()[0], 1);
    }
    assert_eq!(call(&mut *c, 1, &[(0, 7)], &[], 0).unwrap()[0], 0);
    assert_eq!(call(&mut *c, 1, &[(0, 1)], &[], 0).unwrap()[0], 1, "replacing works when full");
    assert_eq!((stat(&*c, "inserts"), stat(&*c, "insert_failures")), (4, 1));
    assert!(c.load("00000009\n").unwrap_err().starts_with("line 1: table full"));
    c.clear();
    assert_eq!(stat(&*c, "entries"), 0);
    assert_eq!(call(&mut *c, 1, &[(0, 7)], &[], 0).unwrap()[0], 1);
}

#[test]
fn aging_lookups_do_not_refresh_inserts_do_static_never_ages() {
    const S: u64 = 1_000_000_000;
    let mut c = make(&[("aging", "10")]);
    let c = &mut *c;
    c.load("1.2.3.4 5\n").unwrap();
    call(c, 1, &[(0, 1), (4, 11)], &[], 100 * S).unwrap();
    call(c, 1, &[(0, 2), (4, 22)], &[], 100 * S).unwrap();
    assert_eq!(call(c, 0, &[(0, 1)], &[], 110 * S).unwrap()[..2], [1, 11], "exactly `aging` idle is still present");
    call(c, 1, &[(0, 2), (4, 23)], &[], 105 * S).unwrap();
    assert_eq!(call(c, 0, &[(0, 1)], &[], 110 * S + 1).unwrap()[0], 0, "lookups did not refresh it");
    assert_eq!(call(c, 0, &[(0, 2)], &[], 115 * S).unwrap()[..2], [1, 23], "the re-insert refreshed it");
    assert_eq!(call(c, 2, &[(0, 1)], &[], 111 * S).unwrap()[0], 0, "an aged entry is absent for delete");
    assert_eq!(stat(c, "aged_out"), 1);
    assert_eq!(c.dump(), "00000002 0x00000017\n01020304 0x00000005\n");
    c.tick(Timestamp::from_nanos(1000 * S));
    assert_eq!(stat(c, "entries"), 1, "tick purged the aged entry, kept the static one");
    assert_eq!(stat(c, "aged_out"), 2);
    assert_eq!(call(c, 0, &[(0, 0x0102_0304)], &[], 2000 * S).unwrap()[..2], [1, 5]);
}

#[test]
fn tick_sweeps_incrementally_at_least_once_a_period() {
    const MS: u64 = 1_000_000;
    let mut c = make(&[("aging", "1"), ("capacity", "100000"), ("value_size", "0")]);
    let c = &mut *c;
    c.tick(Timestamp::from_nanos(0));
    for k in 0..50_000 {
        call(c, 1, &[(0, k)], &[], 0).unwrap();
    }
    // Everything ages at 1 s + 1 ns; ticks every 10 ms purge it within the next second.
    let mut t = 0;
    let mut seen_partial = false;
    while stat(c, "entries") > 0 {
        t += 10 * MS;
        c.tick(Timestamp::from_nanos(t));
        let e = stat(c, "entries");
        seen_partial |= e > 0 && e < 50_000;
        assert!(t <= 2000 * MS + 10 * MS, "not purged by {t} ns");
    }
    assert!(seen_partial, "the sweep is spread over several ticks");
    assert_eq!(stat(c, "aged_out"), 50_000);
}

#[test]
fn load_errors_name_the_line() {
    let mut c = make(&[("key_size", "6"), ("value_size", "2")]);
    let text = "# MAC table\n\naa:bb:cc:dd:ee:ff 1\n001122334455 0x0002 # port 2\n00-11-22-33-44-66 70000\n";
    let e = c.load(text).unwrap_err();
    assert!(e.starts_with("line 5: value `70000` does not fit in 2 bytes"), "{e}");
    assert_eq!(stat(&*c, "entries"), 2, "lines before the error stay loaded");
    for (bad, line) in [("aa:bb:cc:dd:ee 1", 1), ("\n\naabbccddeeff", 3), ("aabbccddeeff 1 2", 1), ("zz:bb:cc:dd:ee:ff 1", 1)] {
        let e = c.load(bad).unwrap_err();
        assert!(e.starts_with(&format!("line {line}: ")), "{bad:?}: {e}");
    }
    c.clear();
    assert_eq!(c.load("aabb.ccdd.eeff 00:07\r\n").unwrap(), 1);
    assert_eq!(c.dump(), "aabbccddeeff 0x0007\n");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// dump → load into a fresh table → dump gives the same text, sorted by key.
    #[test]
    fn dump_load_round_trip(
        ks in 1usize..=16,
        vs in 0usize..=16,
        entries in proptest::collection::vec((any::<[u8; 16]>(), any::<[u8; 16]>()), 0..100),
    ) {
        let sizes = [("key_size", ks.to_string()), ("value_size", vs.to_string()), ("capacity", "100".to_string())];
        let pairs: Vec<(&str, &str)> = sizes.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut a = make(&pairs);
        let mut model = std::collections::BTreeMap::new();
        for (k, v) in &entries {
            let words: Vec<(u8, u32)> = (0..8).map(|i| (i as u8, u32::from_be_bytes(if i < 4 { k } else { v }[4 * (i % 4)..][..4].try_into().unwrap()))).collect();
            prop_assert_eq!(call(&mut *a, 1, &words, &[], 5).unwrap()[0], 1);
            model.insert(k[..ks].to_vec(), v[..vs].to_vec());
        }
        let text = a.dump();
        let mut want = String::new();
        for (k, v) in &model {
            file::write_line(&mut want, k, v);
        }
        prop_assert_eq!(&text, &want);
        let mut b = make(&pairs);
        prop_assert_eq!(b.load(&text).unwrap(), model.len());
        prop_assert_eq!(b.dump(), text);
    }

    /// Register-level operations at advancing times against a model with aging.
    #[test]
    fn ops_match_model_with_aging(ops in proptest::collection::vec((0u8..6, 0u8..12, any::<u32>(), 0u64..4), 1..200)) {
        let mut c = make(&[("key_size", "2"), ("value_size", "3"), ("aging", "2"), ("capacity", "64")]);
        let c = &mut *c;
        let mut model: HashMap<u16, (u32, u64)> = HashMap::new();
        let mut now = 0u64;
        const S: u64 = 1_000_000_000;
        for (op, k, v, dt) in ops {
            now += dt * S / 2;
            let key = u16::from(k) * 0x0101;
            let pkt = [0xff, (key >> 8) as u8, key as u8];
            let live = |m: &HashMap<u16, (u32, u64)>| m.get(&key).filter(|(_, ts)| now - ts <= 2 * S).map(|(v, _)| *v);
            let out = call(c, op, &[(0, u32::from(key) << 16 | 0xffff), (4, v), (8, 1)], &pkt, now).unwrap();
            match op % 3 {
                0 => match live(&model) {
                    Some(want) => prop_assert_eq!(out, [1, want & 0xffff_ff00, 0, 0, 0]),
                    None => prop_assert_eq!(out, [0; 5]),
                },
                1 => {
                    prop_assert_eq!(out, [1, 0, 0, 0, 0]);
                    model.insert(key, (v & 0xffff_ff00, now));
                }
                _ => {
                    prop_assert_eq!(out[0], u32::from(live(&model).is_some()));
                    model.remove(&key);
                }
            }
            if dt == 3 {
                c.tick(Timestamp::from_nanos(now + 10 * S));
                now += 10 * S;
                model.retain(|_, (_, ts)| now - *ts <= 2 * S);
                prop_assert_eq!(stat(c, "entries"), model.len() as u64);
            }
        }
    }
}
