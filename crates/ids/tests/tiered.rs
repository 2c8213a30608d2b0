//! `netvm ids`'s default engine, `tiered`: a rule set whose state (flows,
//! flowbits, thresholds) lives in coprocessors raises the same alerts, in
//! the same order, when the run moves from the baseline compiler's code to
//! the JIT's in the middle of a capture, as the interpreter raises over the
//! whole capture.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use netvm_runtime::{Application, InterpEngine, JitEngine, LinkMode, TieredEngine, Verdict};
use netvm_vm::{CoproEvent, Packet};

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Runs `packets` in batches of 32, waiting after `switch_after` batches
/// until the second tier has taken over: the verdicts and the events.
fn run(app: &mut Application, packets: &[Packet], switch_after: Option<usize>) -> (Vec<Verdict>, Vec<CoproEvent>) {
    let (mut verdicts, mut events, mut v) = (Vec::new(), Vec::new(), Vec::new());
    for (i, chunk) in packets.chunks(32).enumerate() {
        if switch_after == Some(i) {
            let t = Instant::now();
            while app.tiered().is_none() {
                assert!(t.elapsed() < Duration::from_secs(120), "the second tier never came");
                std::thread::sleep(Duration::from_millis(2));
                app.process_batch(&mut [], &mut v, &mut |_, _| {});
            }
        }
        let mut batch = chunk.to_vec();
        app.process_batch(&mut batch, &mut v, &mut |_, _| {});
        verdicts.extend_from_slice(&v);
        app.drain_events(&mut events);
    }
    (verdicts, events)
}

#[test]
fn moving_to_the_jit_mid_capture_raises_the_same_alerts() {
    let set = netvm_ids::parse_rules_file(&root().join("examples/ids/sample.rules"), &HashMap::new()).unwrap();
    let (rules, _) = netvm_ids::compile::select(&set);
    let ids = netvm_ids::compile(&rules).unwrap();
    let packets = netvm_io::read_capture(&root().join("examples/ids/sample.pcap"), 0).0;
    assert!(packets.len() > 5 * 32, "the capture spans the move");
    let mut reference = ids.instantiate(&InterpEngine).unwrap();
    let want = run(&mut reference, &packets, None);
    assert!(want.1.len() > 10, "the sample raises alerts: {}", want.1.len());
    for switch_after in [0, 3] {
        // As `netvm ids --engine tiered`, the second tier compiling from the first packet on.
        let full = JitEngine::with_link(Some(LinkMode::Table));
        let engine = TieredEngine { full: Arc::new(full), after: 0, pay_back: 0.0 };
        let mut tiered = ids.instantiate(&engine).unwrap();
        assert_eq!(tiered.engine(), "tiered");
        let got = run(&mut tiered, &packets, Some(switch_after));
        let (_, first) = tiered.tiered().expect("moved to the second tier");
        assert!(first <= 32 * switch_after as u64, "{first} packets on the first tier");
        assert_eq!(got.0, want.0, "after {switch_after} batches: verdicts");
        assert_eq!(got.1, want.1, "after {switch_after} batches: alerts");
    }
}
