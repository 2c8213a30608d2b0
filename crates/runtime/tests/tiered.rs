//! The tiered engine: an application that starts on the baseline
//! compiler's code and moves to the JIT's in the middle of a run gives the
//! same verdicts, outputs and counters as the interpreter gives over the
//! whole run, whenever the move happens; its state (data memory,
//! coprocessors) goes on as it was.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use netvm_runtime::{AppStats, Application, Engine, InterpEngine, JitEngine, Manifest, TieredEngine, Verdict};
use netvm_vm::Packet;

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Runs `packets` through `app` in batches of 32, moving on to the second
/// tier after `switch_after` batches (waiting for it there): the verdicts
/// and every exchange buffer that left (port, bytes), in order.
fn run(app: &mut Application, packets: &[Packet], switch_after: Option<usize>) -> (Vec<Verdict>, Vec<(u16, Vec<u8>)>) {
    let (mut verdicts, mut exits) = (Vec::new(), Vec::new());
    let mut v = Vec::new();
    for (i, chunk) in packets.chunks(32).enumerate() {
        if switch_after == Some(i) {
            let t = Instant::now();
            // An empty batch is a batch boundary: the move happens there once the code is ready.
            while app.tiered().is_none() {
                assert!(t.elapsed() < Duration::from_secs(60), "the second tier never came");
                std::thread::sleep(Duration::from_millis(2));
                app.process_batch(&mut [], &mut v, &mut |_, _| {});
            }
        }
        let mut batch = chunk.to_vec();
        app.process_batch(&mut batch, &mut v, &mut |port, p| exits.push((port, p.data.clone())));
        verdicts.extend_from_slice(&v);
    }
    (verdicts, exits)
}

fn counts(s: &AppStats) -> String {
    format!("{:?} {:?} {} {} {:?} {:?}", s.packets, s.ports, s.dropped, s.no_source, s.faults, s.netpes)
}

#[test]
fn moving_to_the_jit_mid_run_changes_nothing() {
    let packets: Vec<Packet> = netvm_io::read_capture(&root().join("examples/traces/mixed.pcap"), 0).0;
    let registry = netvm_copro::registry();
    for app in ["examples/classifier/app.toml", "examples/l2-bridge/app.toml"] {
        let manifest = Manifest::load(&root().join(app)).unwrap();
        let mut reference = Application::build(&manifest, &InterpEngine, &registry, None).unwrap();
        let want = run(&mut reference, &packets, None);
        for switch_after in [0, 3] {
            // The second tier compiles from the first packet on.
            let engine = TieredEngine { full: Arc::new(JitEngine::default()), after: 0, pay_back: 0.0 };
            let mut tiered = Application::build(&manifest, &engine as &dyn Engine, &registry, None).unwrap();
            assert_eq!((tiered.engine(), tiered.link()), ("tiered", "dispatch"));
            let got = run(&mut tiered, &packets, Some(switch_after));
            // The move happens at a batch boundary, at the latest where the
            // run waits for it; the JIT may be ready sooner.
            let (link, first) = tiered.tiered().expect("moved to the second tier");
            assert_eq!(link, "direct", "{app}");
            let batches = first / 32;
            assert_eq!(first % 32, 0, "{app}: {first} packets on the first tier");
            assert!(batches <= switch_after as u64 && (switch_after == 0 || batches >= 1), "{app}: {first} packets on the first tier");
            assert_eq!(tiered.link(), "direct");
            assert_eq!(got.0, want.0, "{app}, after {switch_after} batches: verdicts");
            assert_eq!(got.1, want.1, "{app}, after {switch_after} batches: outputs");
            assert_eq!(counts(&tiered.stats()), counts(&reference.stats()), "{app}, after {switch_after} batches: counters");
        }
    }
}

/// By default the second tier waits for `TIER_UP_AFTER` packets and for the
/// first tier to have spent running them what the JIT is expected to take
/// to compile: a short run stays on the first tier, a long one moves.
#[test]
fn a_short_run_stays_on_the_first_tier() {
    let packets: Vec<Packet> = netvm_io::read_capture(&root().join("examples/traces/mixed.pcap"), 0).0;
    assert!((packets.len() as u64) < netvm_runtime::TIER_UP_AFTER);
    let manifest = Manifest::load(&root().join("examples/classifier/app.toml")).unwrap();
    let engine = TieredEngine::new(Arc::new(JitEngine::default()));
    let mut app = Application::build(&manifest, &engine as &dyn Engine, &netvm_copro::registry(), None).unwrap();
    let mut v = Vec::new();
    for chunk in packets.chunks(32) {
        app.process_batch(&mut chunk.to_vec(), &mut v, &mut |_, _| {});
    }
    std::thread::sleep(Duration::from_millis(50));
    app.process_batch(&mut [], &mut v, &mut |_, _| {});
    assert_eq!(app.tiered(), None, "no compilation was started");
    // Past the threshold it moves.
    let t = Instant::now();
    while app.tiered().is_none() {
        assert!(t.elapsed() < Duration::from_secs(60), "the second tier never came");
        let mut batch = packets[..32].to_vec();
        app.process_batch(&mut batch, &mut v, &mut |_, _| {});
    }
    assert!(app.tiered().is_some_and(|(_, first)| first >= netvm_runtime::TIER_UP_AFTER));
}

/// A run whose first tier never spends what the second tier would cost to
/// compile never starts the compilation, however many packets it runs.
#[test]
fn a_run_that_cannot_pay_for_the_second_tier_never_compiles_it() {
    let packets: Vec<Packet> = netvm_io::read_capture(&root().join("examples/traces/mixed.pcap"), 0).0;
    let manifest = Manifest::load(&root().join("examples/classifier/app.toml")).unwrap();
    // A second tier estimated at 10^12 times the first tier's compile time.
    let engine = TieredEngine { full: Arc::new(JitEngine::default()), after: 0, pay_back: 1e12 };
    let mut app = Application::build(&manifest, &engine as &dyn Engine, &netvm_copro::registry(), None).unwrap();
    let mut v = Vec::new();
    for _ in 0..20 {
        for chunk in packets.chunks(32) {
            app.process_batch(&mut chunk.to_vec(), &mut v, &mut |_, _| {});
        }
    }
    std::thread::sleep(Duration::from_millis(50));
    app.process_batch(&mut [], &mut v, &mut |_, _| {});
    assert_eq!(app.stats().packets, 20 * packets.len() as u64);
    assert_eq!(app.tiered(), None, "no compilation was started");
}
