use super::*;

fn at(s: u64) -> Timestamp {
    Timestamp::from_nanos(s * 1_000_000_000 + 123)
}

/// Which of the events at `times` (seconds) are reported, for one key.
fn reported(kind: Kind, n: u32, seconds: u32, times: &[u64]) -> Vec<u64> {
    let mut t = Thresholds::new(16).unwrap();
    times.iter().copied().filter(|&s| t.test(7, 0x0a00_0001, kind, n, seconds, at(s))).collect()
}

#[test]
fn limit_reports_the_first_n_of_each_window() {
    assert_eq!(reported(Kind::Limit, 2, 10, &[0, 1, 2, 3, 9, 10, 11, 12, 30]), vec![0, 1, 10, 11, 30]);
    assert_eq!(reported(Kind::Limit, 0, 10, &[0, 1, 20]), Vec::<u64>::new());
}

#[test]
fn threshold_reports_every_nth() {
    assert_eq!(reported(Kind::Threshold, 3, 60, &[0, 1, 2, 3, 4, 5, 6]), vec![2, 5]);
    // The window expires between the 2nd and 3rd events: counting starts over.
    assert_eq!(reported(Kind::Threshold, 3, 10, &[0, 1, 20, 21, 22]), vec![22]);
    assert_eq!(reported(Kind::Threshold, 1, 10, &[0, 0, 5]), vec![0, 0, 5]);
}

#[test]
fn both_reports_once_per_window_after_n() {
    assert_eq!(reported(Kind::Both, 3, 60, &[0, 1, 2, 3, 4]), vec![2]);
    // A new window (at 60) starts at 1 and reports at its 3rd event.
    assert_eq!(reported(Kind::Both, 3, 60, &[0, 1, 2, 60, 61, 62, 63]), vec![2, 62]);
    assert_eq!(reported(Kind::Both, 1, 60, &[0, 5, 70, 71]), vec![0]);
}

#[test]
fn detection_filter_reports_past_the_rate() {
    assert_eq!(reported(Kind::Detect, 2, 10, &[0, 1, 2, 3]), vec![2, 3]);
    // A new window right after a busy one keeps its count (the rate goes on).
    assert_eq!(reported(Kind::Detect, 2, 10, &[0, 1, 2, 10, 11]), vec![2, 10, 11]);
    // After a quiet gap the count starts over.
    assert_eq!(reported(Kind::Detect, 2, 10, &[0, 1, 2, 30, 31, 32]), vec![2, 32]);
}

#[test]
fn keys_count_apart_and_time_never_goes_back() {
    let mut t = Thresholds::new(16).unwrap();
    assert!(t.test(1, 10, Kind::Limit, 1, 10, at(100)));
    assert!(t.test(2, 10, Kind::Limit, 1, 10, at(100)), "another id");
    assert!(t.test(1, 11, Kind::Limit, 1, 10, at(100)), "another address");
    assert!(!t.test(1, 10, Kind::Limit, 1, 10, at(105)));
    // An older packet counts at the latest time: still in the window.
    assert!(!t.test(1, 10, Kind::Limit, 1, 10, at(50)));
    assert!(t.test(1, 10, Kind::Limit, 1, 10, at(110)));
}

#[test]
fn a_full_table_evicts_the_least_recently_used() {
    let mut t = Thresholds::new(2).unwrap();
    assert!(t.test(1, 1, Kind::Limit, 1, 60, at(0)));
    assert!(t.test(1, 2, Kind::Limit, 1, 60, at(0)));
    assert!(!t.test(1, 1, Kind::Limit, 1, 60, at(1)), "key 1 is now the most recent");
    assert!(t.test(1, 3, Kind::Limit, 1, 60, at(2)), "evicts key 2");
    assert!(t.test(1, 2, Kind::Limit, 1, 60, at(3)), "key 2 starts over (and evicts key 1)");
    assert!(t.test(1, 1, Kind::Limit, 1, 60, at(3)));
    let stats: HashMap<String, u64> = t.stats().into_iter().collect();
    assert_eq!((stats["entries"], stats["evictions"], stats["tested"], stats["reported"], stats["filtered"]), (2, 3, 6, 5, 1));
    assert_eq!(t.dump().lines().count(), 2);
}

#[test]
fn registers_settings_and_shared_handles() {
    let ctx = InvokeContext { packet: &[], info: &[], now: at(5), seq: 0 };
    let mut a = create(&[("capacity".to_string(), "8".to_string())].into_iter().collect()).unwrap();
    let event = |c: &mut Box<dyn Coprocessor>| {
        for (reg, v) in [(0, 9), (1, 0xc0a8_0001), (2, Kind::Limit as u32), (3, 1), (4, 60)] {
            c.write(reg, v).unwrap();
        }
        c.invoke(0, &ctx).unwrap();
        c.read(0).unwrap()
    };
    assert_eq!(event(&mut a), 1);
    let mut b = a.fork().unwrap();
    assert_eq!(b.share(), WorkerShare::Shared);
    assert_eq!(event(&mut b), 0, "the fork counts in the same table");
    assert_eq!(a.dump(), "9 3232235521 2 5 5 0\n");
    a.write(2, 4).unwrap();
    assert!(matches!(a.invoke(0, &ctx), Err(CoproError::BadArgument(_))));
    assert!(a.invoke(1, &ctx).is_err());
    assert!(a.write(5, 0).is_err());
    assert!(a.read(1).is_err());
    assert!(a.load("1 2 3").is_err());
    a.clear();
    assert_eq!(b.dump(), "");
    for bad in [&[("capacity", "0")][..], &[("capacity", "x")], &[("bogus", "1")], &[("capacity", "16777217")]] {
        let cfg: CoproConfig = bad.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert!(create(&cfg).is_err(), "{bad:?}");
    }
}
