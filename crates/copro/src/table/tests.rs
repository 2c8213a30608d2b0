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
    InvokeContext { packet, info: &[], now: Timestamp::from_nanos(ns), seq: 0 }
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

/// `initial` makes room at creation (at most `capacity`); a table starts
/// small without it; admission counts the memory at capacity either way.
#[test]
fn initial_reserves_and_memory_counts_the_capacity() {
    let buckets = |c: &mut Box<dyn Coprocessor>| c.as_any_mut().unwrap().downcast_mut::<Table>().unwrap().table().buckets();
    let mut small = make(&[("capacity", "100000")]);
    let mut big = make(&[("capacity", "100000"), ("initial", "10000")]);
    let mut all = make(&[("capacity", "100000"), ("initial", "100000")]);
    assert_eq!(buckets(&mut small), INITIAL_BUCKETS);
    assert_eq!(buckets(&mut big), 2 * 10_000 / SLOTS);
    assert_eq!(buckets(&mut all), (100_000usize + 100_000 / 9 + 32).div_ceil(SLOTS));
    assert_eq!(small.memory(), all.memory());
    assert_eq!(big.memory(), all.memory());
    for bad in ["100001", "-1", "lots"] {
        assert!(create(&cfg(&[("capacity", "100000"), ("initial", bad)])).err().unwrap().contains("initial"), "{bad}");
    }
}

/// Which new keys a full table takes depends on where its keys sit: the
/// slot of an aged entry is reused only in the new key's own buckets. The
/// `seed` setting fixes the hash, so that the same operations give the
/// same outcomes on two instances (what differential tests compare), and
/// another seed gives other outcomes.
#[test]
fn seed_setting_repeats_a_full_tables_outcomes() {
    let outcomes = |seed: &str| {
        let mut c = make(&[("key_size", "4"), ("value_size", "4"), ("capacity", "256"), ("aging", "1"), ("seed", seed)]);
        let sec = 1_000_000_000;
        for k in 0..256u32 {
            assert_eq!(call(&mut *c, 1, &[(0, k), (4, k)], &[], 0).unwrap()[0], 1);
        }
        // All but every sixteenth key refreshed: 16 entries age.
        for k in (0..256u32).filter(|k| k % 16 != 0) {
            call(&mut *c, 1, &[(0, k), (4, k)], &[], sec / 2).unwrap();
        }
        let taken: Vec<u32> = (1000..1100u32).map(|k| call(&mut *c, 1, &[(0, k), (4, k)], &[], sec * 6 / 5).unwrap()[0]).collect();
        (taken, c.dump(), stat(&*c, "aged_out"), stat(&*c, "insert_failures"))
    };
    let a = outcomes("0x5eed");
    assert_eq!(a, outcomes("24301"), "0x5eed and 24301 are the same seed");
    assert!(a.2 > 0 && a.3 > 0, "some new keys reuse aged slots and some find none: {} and {}", a.2, a.3);
    assert!((1..8).map(|s| outcomes(&s.to_string())).any(|b| b != a), "the seed decides where keys sit");
    for bad in ["-1", "x", "0x", "18446744073709551616", "1.5"] {
        assert!(create(&cfg(&[("seed", bad)])).err().unwrap().contains("is not a 64-bit number"), "{bad}");
    }
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

/// Runs the pre-lookup stage of `lookup_pkt` (prefetching) on `pkts`, keys at offset 0.
fn prefetch(c: &dyn Coprocessor, pkts: &mut [netvm_vm::Packet]) {
    let descs: Vec<netvm_vm::XbDesc> = pkts.iter_mut().enumerate().map(|(i, p)| netvm_vm::XbDesc::of(p, i as u64)).collect();
    let words: Vec<u32> = descs.iter().flat_map(|_| [1, 0]).collect();
    assert_eq!(c.lookahead(3), Some(1 << 8));
    // SAFETY: the descriptors point at the packets' bytes, which nothing
    // writes while `descs` lives.
    let packets = unsafe { netvm_vm::buffer::Packets::new(&descs) };
    c.ahead(3, &netvm_vm::AheadKeys { words: &words, regs: 1 << 8, packets }, true);
}

fn stats_map(c: &dyn Coprocessor) -> HashMap<String, u64> {
    c.stats().into_iter().collect()
}

fn is_locked(c: &mut dyn Coprocessor) -> bool {
    matches!(crate::downcast::<Table>(c).unwrap().place, Place::Shared(_))
}

/// The lock words of a shared table's lock (`None`: not shared).
fn lock_words(c: &mut dyn Coprocessor) -> Option<usize> {
    match &crate::downcast::<Table>(c).unwrap().place {
        Place::Own(_) => None,
        Place::Shared(l) => Some(match **l {
            SharedLock::Readers(_) => 8,
            SharedLock::Writers(_) => 1,
        }),
    }
}

/// A table that ages entries (the packets learn them) shares one lock
/// word, whose writes take one lock; a table that does not, eight, so
/// that lookups from several workers write no line in common.
#[test]
fn shared_lock_follows_aging() {
    for (aging, words) in [(None, 8), (Some("0"), 8), (Some("300"), 1)] {
        let mut a = make(&aging.map(|a| vec![("aging", a)]).unwrap_or_default());
        assert_eq!(lock_words(a.as_mut()), None);
        let mut b = a.fork().unwrap();
        assert_eq!((lock_words(a.as_mut()), lock_words(b.as_mut())), (Some(words), Some(words)), "aging {aging:?}");
        drop(b);
        a.tick(Timestamp::from_nanos(1));
        assert_eq!(lock_words(a.as_mut()), None, "the last handle takes the store back");
    }
}

#[test]
fn workers_setting() {
    assert_eq!(make(&[]).share(), WorkerShare::Shared);
    assert_eq!(make(&[("workers", "shared")]).share(), WorkerShare::Shared);
    assert_eq!(make(&[("workers", "sharded")]).share(), WorkerShare::PerWorker);
    assert!(create(&cfg(&[("workers", "both")])).err().unwrap().contains("neither `shared` nor `sharded`"));
}

#[test]
fn shared_forks_see_each_others_inserts() {
    let mut a = make(&[("aging", "10")]);
    a.load("1.2.3.4 5\n").unwrap();
    assert!(!is_locked(a.as_mut()), "one handle takes no lock");
    let mut b = a.fork().unwrap();
    let mut c = b.fork().unwrap();
    assert!(is_locked(a.as_mut()) && is_locked(b.as_mut()));
    assert_eq!(b.share(), WorkerShare::Shared);
    assert_eq!(call(&mut *b, 0, &[(0, 0x0102_0304)], &[], 0).unwrap()[..2], [1, 5], "a fork sees the loaded entries");
    assert_eq!(call(&mut *b, 1, &[(0, 7), (4, 70)], &[], 1).unwrap()[0], 1);
    assert_eq!(call(&mut *a, 0, &[(0, 7)], &[], 2).unwrap()[..2], [1, 70], "an insert through one fork is visible through the others");
    assert_eq!(call(&mut *c, 2, &[(0, 7)], &[], 3).unwrap()[0], 1);
    assert_eq!(call(&mut *a, 0, &[(0, 7)], &[], 4).unwrap()[0], 0, "and so is a delete");
    // The control plane works while shared: under the lock.
    assert_eq!(c.load("00000009 9\n").unwrap(), 1);
    assert_eq!(a.dump(), "00000009 0x00000009\n01020304 0x00000005\n");
    let s = stats_map(&*a);
    assert_eq!((s["entries"], s["lookups"], s["hits"], s["inserts"], s["deletes"]), (2, 3, 2, 1, 1), "every handle's operations");
    assert_eq!(b.stats(), a.stats());
    // Aging: an entry learned by one worker ages by any worker's tick.
    call(&mut *b, 1, &[(0, 8), (4, 80)], &[], 1_000_000_000).unwrap();
    c.tick(Timestamp::from_nanos(20_000_000_000));
    assert_eq!(stats_map(&*a)["aged_out"], 1);
    // absorb of a shared fork changes nothing.
    a.absorb(c.as_mut());
    assert_eq!(b.stats(), a.stats());
    // Once the forks are gone, the next tick or control-plane call drops the lock.
    drop((b, c));
    assert!(is_locked(a.as_mut()));
    a.tick(Timestamp::from_nanos(20_000_000_000));
    assert!(!is_locked(a.as_mut()));
    assert_eq!(a.dump(), "00000009 0x00000009\n01020304 0x00000005\n");
    assert_eq!(stats_map(&*a)["inserts"], 2, "finished handles stay counted");
}

#[test]
fn sharded_forks_learn_apart_and_merge() {
    const S: u64 = 1_000_000_000;
    let mut a = make(&[("workers", "sharded"), ("aging", "100"), ("capacity", "16")]);
    a.load("00000001 1\n00000002 2\n00000003 3\n").unwrap();
    let mut b = a.fork().unwrap();
    assert_eq!(b.share(), WorkerShare::PerWorker);
    assert!(!is_locked(a.as_mut()) && !is_locked(b.as_mut()), "no lock");
    assert_eq!(b.dump(), a.dump(), "a fork starts with a copy of the loaded entries");
    // Worker a learns 10 at 5 s and re-learns 2 at 7 s; worker b learns 11,
    // 10 (later) and 3, learns 2 earlier than a did, and deletes 1.
    call(&mut *a, 1, &[(0, 10), (4, 100)], &[], 5 * S).unwrap();
    call(&mut *a, 1, &[(0, 2), (4, 200)], &[], 7 * S).unwrap();
    call(&mut *b, 1, &[(0, 11), (4, 110)], &[], 4 * S).unwrap();
    call(&mut *b, 1, &[(0, 10), (4, 101)], &[], 6 * S).unwrap();
    call(&mut *b, 1, &[(0, 3), (4, 300)], &[], 6 * S).unwrap();
    call(&mut *b, 1, &[(0, 2), (4, 201)], &[], 6 * S).unwrap();
    call(&mut *b, 2, &[(0, 1)], &[], 6 * S).unwrap();
    assert_eq!(call(&mut *a, 0, &[(0, 11)], &[], 8 * S).unwrap()[0], 0, "not visible to the other worker");
    assert_eq!(call(&mut *b, 0, &[(0, 11)], &[], 8 * S).unwrap()[..2], [1, 110]);
    // An entry b learned long ago, aged by the time of the merge.
    call(&mut *b, 1, &[(0, 12), (4, 120)], &[], 0).unwrap();
    call(&mut *b, 0, &[(0, 11)], &[], 101 * S).unwrap();
    a.absorb(b.as_mut());
    assert_eq!(
        a.dump(),
        "00000001 0x00000001\n00000002 0x000000c8\n00000003 0x0000012c\n0000000a 0x00000065\n0000000b 0x0000006e\n",
        "latest insert wins (10 from b, 2 from a), learned over static (3 from b), \
         a delete in one shard is undone by the other (1), the aged entry (12) is dropped"
    );
    let s = stats_map(&*a);
    assert_eq!((s["inserts"], s["deletes"], s["lookups"], s["aged_out"]), (7, 1, 3, 1), "statistics added up");
    let sb = stats_map(&*b);
    assert_eq!((sb["entries"], sb["inserts"], sb["lookups"]), (0, 0, 0), "the fork is left empty");
    // Entries that no longer fit count as insert failures.
    let mut c = a.fork().unwrap();
    for k in 100..140 {
        call(&mut *c, 1, &[(0, k)], &[], 102 * S).unwrap();
    }
    assert_eq!(stats_map(&*c)["insert_failures"], 40 - 11, "5 entries + 11 fill the 16");
    for k in 200..205 {
        call(&mut *a, 1, &[(0, k)], &[], 102 * S).unwrap();
    }
    a.absorb(c.as_mut());
    let s = stats_map(&*a);
    assert_eq!((s["entries"], s["insert_failures"]), (16, 29 + 5), "of c's 11, 6 fit beside a's 10");
}

/// One thread inserts and deletes while another looks up, on two handles
/// of one shared table: no panic, no torn or foreign value, and at the end
/// exactly the keys left inserted are present.
#[test]
fn concurrent_inserts_and_lookups_on_a_shared_table() {
    // With aging (one lock word) and without (a lock word per group of threads).
    for aging in ["1000", "0"] {
        concurrent_inserts_and_lookups(aging);
    }
}

fn concurrent_inserts_and_lookups(aging: &str) {
    let mut a = make(&[("key_size", "4"), ("value_size", "8"), ("capacity", "4096"), ("aging", aging)]);
    let mut b = a.fork().unwrap();
    assert_eq!(lock_words(a.as_mut()), Some(if aging == "0" { 8 } else { 1 }));
    let value = |k: u32| (k ^ 0xdead_beef, k.wrapping_mul(2_654_435_761));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = std::sync::Arc::clone(&stop);
    let reader = std::thread::spawn(move || {
        let mut batch: Vec<netvm_vm::Packet> = (0..100u32).map(|k| netvm_vm::Packet::from_bytes(k.to_be_bytes().to_vec())).collect();
        let (mut hits, mut lookups) = (0u64, 0u64);
        let mut k = 0u32;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) || lookups < 10_000 {
            k = (k + 7) % 5000;
            let pkt = k.to_be_bytes();
            let out = call(&mut *b, if k.is_multiple_of(2) { 0 } else { 3 }, &[(0, k), (8, 0)], &pkt, 1).unwrap();
            lookups += 1;
            if out[0] == 1 {
                hits += 1;
                let (v0, v1) = value(k);
                assert_eq!(out, [1, v0, v1, 0, 0], "key {k}");
            } else {
                assert_eq!(out, [0; 5]);
            }
            if lookups % 1024 == 0 {
                prefetch(&*b, &mut batch);
            }
        }
        (b, hits, lookups)
    });
    let t = std::time::Instant::now();
    let mut rounds = 0;
    while t.elapsed() < std::time::Duration::from_millis(300) || rounds < 3 {
        for k in 0..5000u32 {
            let (v0, v1) = value(k);
            if k % 3 == rounds % 3 {
                call(&mut *a, 2, &[(0, k)], &[], 1).unwrap();
            } else {
                // At most about 3,334 keys are present at once: they fit.
                assert_eq!(call(&mut *a, 1, &[(0, k), (4, v0), (5, v1)], &[], 1).unwrap()[0], 1, "key {k}");
            }
        }
        a.tick(Timestamp::from_nanos(1));
        rounds += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (b, hits, lookups) = reader.join().unwrap();
    assert!(hits > 0 && hits < lookups, "{hits} hits in {lookups} lookups");
    let s = stats_map(&*a);
    assert_eq!(s["lookups"], lookups);
    assert_eq!(s["hits"], hits);
    drop(b);
    // What is left: the keys the last round did not delete.
    let last = (rounds - 1) % 3;
    for k in 0..5000u32 {
        let out = call(&mut *a, 0, &[(0, k)], &[], 2).unwrap();
        let (v0, v1) = value(k);
        let want = if k % 3 == last { [0; 5] } else { [1, v0, v1, 0, 0] };
        assert_eq!(out, want, "key {k}");
    }
    assert_eq!(s["entries"], (0..5000).filter(|k| k % 3 != last).count() as u64);
}

/// `lookup_pkt` takes the answers the pre-lookup stage found (a table of
/// one handle, no aging) only while nothing changed: an insert or delete
/// in between, or a key changed in the packet, means a fresh lookup.
#[test]
fn answers_found_ahead_are_forgotten_on_every_change() {
    let mut c = make(&[("key_size", "2"), ("value_size", "2")]);
    c.load("0001 0x0101\n0002 0x0202\n").unwrap();
    let mut pkts: Vec<netvm_vm::Packet> =
        [[0u8, 1], [0, 2], [0, 3], [0, 1]].iter().map(|k| netvm_vm::Packet::from_bytes(k.to_vec())).collect();
    prefetch(c.as_ref(), &mut pkts);
    let c = c.as_mut();
    assert_eq!(call(c, 3, &[(8, 0)], &pkts[0].data, 0), Ok([1, 0x0101_0000, 0, 0, 0]));
    // A key changed in the packet after the stage.
    pkts[1].data[1] = 3;
    assert_eq!(call(c, 3, &[(8, 0)], &pkts[1].data, 0), Ok([0; 5]));
    // An insert of the key packet 2 looks up: its answer (a miss) is forgotten.
    assert_eq!(call(c, 1, &[(0, 0x0003_0000), (4, 0x0303_0000)], &[], 0), Ok([1, 0, 0, 0, 0]));
    assert_eq!(call(c, 3, &[(8, 0)], &pkts[2].data, 0), Ok([1, 0x0303_0000, 0, 0, 0]));
    assert_eq!(call(c, 2, &[(0, 0x0001_0000)], &[], 0), Ok([1, 0, 0, 0, 0]));
    assert_eq!(call(c, 3, &[(8, 0)], &pkts[3].data, 0), Ok([0; 5]));
    let s = stats_map(c);
    assert_eq!((s["lookups"], s["hits"]), (4, 2));
    // With aging the stage only prefetches: answers depend on time.
    let mut c = make(&[("key_size", "2"), ("value_size", "2"), ("aging", "1")]);
    c.load("0001 0x0101\n").unwrap();
    let mut pkts = vec![netvm_vm::Packet::from_bytes(vec![0, 1])];
    prefetch(c.as_ref(), &mut pkts);
    assert_eq!(call(c.as_mut(), 3, &[(8, 0)], &pkts[0].data, 0), Ok([1, 0x0101_0000, 0, 0, 0]));
}

#[test]
fn value_words_packs_every_value_size_as_the_byte_by_byte_rule() {
    // Byte i of the value in word i / 4, big-endian, zero-padded.
    let bytes: Vec<u8> = (1..=16u8).map(|i| i * 15).collect();
    for n in 0..=16 {
        let v = &bytes[..n];
        let mut want = [0u32; 4];
        for (i, &b) in v.iter().enumerate() {
            want[i / 4] |= u32::from(b) << (24 - 8 * (i % 4));
        }
        assert_eq!(value_words(v), want, "{n}-byte value");
    }
}
