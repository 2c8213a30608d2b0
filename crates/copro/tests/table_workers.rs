//! What sharing a `table` between workers costs a lookup through the
//! coprocessor interface (`write` the key, `invoke` lookup, `read` the
//! result, as compiled code does): one handle (no lock), a handle of a
//! `shared` table while another handle exists (uncontended lock), two
//! threads looking up in a `shared` table at once, without aging (each
//! reads under its own lock word, so none moves between their cores) and
//! with aging (one lock word for all, written by every lookup), and two
//! threads on a `sharded` table (no lock, no shared line). Run:
//! `cargo test --release -p netvm-copro --test table_workers -- --ignored --nocapture`

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use netvm_traffic::SplitMix64;
use netvm_vm::{CoproConfig, Coprocessor, InvokeContext, Timestamp};

fn table(entries: u32, workers: &str, aging: &str) -> Box<dyn Coprocessor> {
    let cfg: CoproConfig =
        [("key_size", "4"), ("value_size", "4"), ("capacity", &entries.to_string()), ("workers", workers), ("aging", aging)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    let mut t = netvm_copro::registry().create("table", &cfg).unwrap();
    let ctx = InvokeContext { packet: &[], info: &[], now: Timestamp::default(), seq: 0 };
    for k in 0..entries {
        t.write(0, k.wrapping_mul(0x9e37_79b9)).unwrap();
        t.write(4, k).unwrap();
        t.invoke(1, &ctx).unwrap();
    }
    t
}

/// ns per lookup of `n` pseudo-random present keys (best of 5 rounds).
fn lookups(t: &mut dyn Coprocessor, entries: u32, n: u32) -> f64 {
    let ctx = InvokeContext { packet: &[], info: &[], now: Timestamp::default(), seq: 0 };
    let mut best = f64::MAX;
    let mut sum = 0u64;
    for round in 0..5u32 {
        let mut rng = SplitMix64::new(u64::from(round));
        let start = Instant::now();
        for _ in 0..n {
            let k = rng.next_u32() % entries;
            t.write(0, k.wrapping_mul(0x9e37_79b9)).unwrap();
            t.invoke(0, &ctx).unwrap();
            sum += u64::from(t.read(1).unwrap() == k);
        }
        best = best.min(start.elapsed().as_nanos() as f64 / f64::from(n));
    }
    assert_eq!(sum, 5 * u64::from(n), "every lookup hits");
    best
}

/// ns per lookup on each of two threads looking up at once for about a
/// second, with handles `a` and `b`.
fn two_threads(a: Box<dyn Coprocessor>, b: Box<dyn Coprocessor>, entries: u32) -> (f64, f64) {
    let barrier = Arc::new(Barrier::new(3));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = [a, b]
        .into_iter()
        .enumerate()
        .map(|(i, mut h)| {
            let (barrier, stop) = (Arc::clone(&barrier), Arc::clone(&stop));
            std::thread::spawn(move || {
                let ctx = InvokeContext { packet: &[], info: &[], now: Timestamp::default(), seq: 0 };
                let mut rng = SplitMix64::new(i as u64);
                let (mut n, mut hits) = (0u64, 0u64);
                barrier.wait();
                let start = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..1024 {
                        let k = rng.next_u32() % entries;
                        h.write(0, k.wrapping_mul(0x9e37_79b9)).unwrap();
                        h.invoke(0, &ctx).unwrap();
                        hits += u64::from(h.read(1).unwrap() == k);
                    }
                    n += 1024;
                }
                assert_eq!(hits, n, "every lookup hits");
                start.elapsed().as_nanos() as f64 / n as f64
            })
        })
        .collect();
    barrier.wait();
    std::thread::sleep(std::time::Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let r: Vec<f64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    (r[0], r[1])
}

#[test]
#[ignore]
fn lookup_cost_by_sharing() {
    for entries in [4096u32, 1 << 20] {
        let n = 2_000_000;
        let mut own = table(entries, "shared", "0");
        let alone = lookups(own.as_mut(), entries, n);
        let fork = own.fork().unwrap();
        let locked = lookups(own.as_mut(), entries, n);
        let (s1, s2) = two_threads(own, fork, entries);
        let mut aging = table(entries, "shared", "3600");
        let afork = aging.fork().unwrap();
        let (a1, a2) = two_threads(aging, afork, entries);
        let mut sharded = table(entries, "sharded", "0");
        let sfork = sharded.fork().unwrap();
        let (p1, p2) = two_threads(sharded, sfork, entries);
        println!(
            "table of {entries} entries, ns/lookup: one handle {alone:.1}; shared, uncontended lock {locked:.1}; \
             shared, 2 threads {s1:.1} / {s2:.1}; shared with aging (one lock word), 2 threads {a1:.1} / {a2:.1}; \
             sharded, 2 threads {p1:.1} / {p2:.1}"
        );
    }
}
