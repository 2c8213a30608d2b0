//! The applications of the binding benchmark compute filter f4: the 6-NetPE
//! chain (benches/binding/chain6.toml) and its stages pasted into one NetPE
//! (one6.toml) let exactly the packets that f4 accepts through to port 1,
//! packet by packet, on the interpreter and on every JIT binding, and
//! never fault. So does the f4 branch of the 10-NetPE benches/apps/tree10.toml
//! (sink 6), which also runs without faults the JIT and the interpreter
//! agree on. Packets: `mixed::edge_cases` and 20,000 mixed-trace frames.
//! benches/apps/bridge-c.toml, the bridge's decision alone that
//! `coprobench app DIR bridge-c` sets against the C loop, decides as
//! examples/l2-bridge does. Descriptors written burst by burst
//! (`Linked::pass_ports_burst`) run as those prepared once.

use std::path::PathBuf;

use netvm_bench::filters::{self, ACCEPT_PORT, FILTERS};
use netvm_bench::linked::{Descs, Linked, Metadata};
use netvm_runtime::{Application, Engine, InterpEngine, JitEngine, LinkMode, Manifest, Verdict};
use netvm_traffic::mixed;
use netvm_vm::Packet;

fn packets() -> Vec<Packet> {
    let mut p = mixed::edge_cases();
    p.extend(mixed::mixed_trace(20_000, 7));
    p
}

fn benches(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../benches")).join(rel)
}

/// Per packet, the application output ports it left on, and the verdicts.
fn run(manifest: &Manifest, engine: &dyn Engine, packets: &[Packet]) -> (Vec<Vec<u16>>, Vec<Verdict>) {
    let mut app = Application::build(manifest, engine, &netvm_copro::registry(), None).expect("builds");
    let mut outs = Vec::new();
    let mut all = Vec::new();
    let mut verdicts = Vec::new();
    for p in packets {
        let mut ports = Vec::new();
        app.process_batch(&mut [p.clone()], &mut verdicts, &mut |port, _| ports.push(port));
        outs.push(ports);
        all.extend(verdicts.iter().cloned());
    }
    (outs, all)
}

/// The one-NetPE application of filter f4.
fn f4() -> Manifest {
    Manifest::single(&FILTERS[3].path(&filters::default_dir()), &[0], 2, None)
}

/// Per packet, whether f4 accepts it (on the interpreter).
fn f4_accepts(packets: &[Packet]) -> Vec<bool> {
    run(&f4(), &InterpEngine, packets).0.iter().map(|o| o == &[ACCEPT_PORT]).collect()
}

fn engines() -> Vec<(&'static str, Box<dyn Engine>)> {
    vec![
        ("interp", Box::new(InterpEngine)),
        ("jit direct", Box::new(JitEngine::with_link(Some(LinkMode::Direct)))),
        ("jit table", Box::new(JitEngine::with_link(Some(LinkMode::Table)))),
        ("jit dispatch", Box::new(JitEngine::with_link(None))),
    ]
}

#[test]
fn chain_and_one6_compute_f4() {
    let packets = packets();
    let want = f4_accepts(&packets);
    assert!(want.iter().filter(|a| **a).count() > 1000, "the trace exercises the accepting path");
    for app in ["binding/chain6.toml", "binding/one6.toml"] {
        let m = Manifest::load(&benches(app)).expect("manifest");
        for (name, e) in engines() {
            let (outs, verdicts) = run(&m, e.as_ref(), &packets);
            assert!(!verdicts.iter().any(|v| matches!(v, Verdict::Fault(_))), "{app} on {name} faults");
            for (i, (o, w)) in outs.iter().zip(&want).enumerate() {
                let got = o == &[ACCEPT_PORT];
                assert!(o.is_empty() || got, "{app} on {name}: packet {i} left on {o:?}");
                assert_eq!(got, *w, "{app} on {name}: packet {i} ({:02x?})", &packets[i].data);
            }
        }
    }
}

#[test]
fn linked_descriptors_agree_with_the_runtime() {
    let packets = packets();
    let want = f4_accepts(&packets).iter().filter(|a| **a).count() as u64;
    let mut descs = Descs::new(&packets);
    for (app, m) in [
        ("f4", f4()),
        ("chain6", Manifest::load(&benches("binding/chain6.toml")).unwrap()),
        ("one6", Manifest::load(&benches("binding/one6.toml")).unwrap()),
    ] {
        for mode in [LinkMode::Direct, LinkMode::Table] {
            let mut l = Linked::build(&m, mode).expect("links");
            assert_eq!(l.pass(&mut descs, ACCEPT_PORT), (want, 0), "{app} {mode:?}");
        }
    }
}

#[test]
fn tree10_runs_alike_on_every_engine() {
    let packets = packets();
    let m = Manifest::load(&benches("apps/tree10.toml")).expect("manifest");
    let (want, _) = run(&m, &InterpEngine, &packets);
    for (name, e) in engines() {
        let (outs, _) = run(&m, e.as_ref(), &packets);
        for (i, (o, w)) in outs.iter().zip(&want).enumerate() {
            assert_eq!(o, w, "tree10 on {name}: packet {i}");
        }
    }
    // Its f4 branch (sink 6) lets through what f4 accepts.
    for (i, (o, f)) in want.iter().zip(f4_accepts(&packets)).enumerate() {
        assert_eq!(o.contains(&6), f, "tree10 sink 6, packet {i}");
    }
}

/// Per packet, the output ports it left on and its bytes as they left,
/// with the routes of `routes` loaded into every instance named `routes`.
fn run_router(manifest: &Manifest, engine: &dyn Engine, routes: &str, packets: &[Packet]) -> Vec<Vec<(u16, Vec<u8>)>> {
    let mut app = Application::build(manifest, engine, &netvm_copro::registry(), None).expect("builds");
    app.load_table("routes", routes).expect("routes load");
    let mut verdicts = Vec::new();
    packets
        .iter()
        .map(|p| {
            let mut out = Vec::new();
            app.process_batch(&mut [p.clone()], &mut verdicts, &mut |port, q| out.push((port, q.data.clone())));
            assert!(!verdicts.iter().any(|v| matches!(v, Verdict::Fault(_))), "{verdicts:?}");
            out
        })
        .collect()
}

/// NetBind's six-module IPv4 data path (benches/binding/router6) forwards
/// exactly as the example router (examples/ipv4-router, five NetPEs, held
/// to a reference by its own tests), and so do its modules pasted into one
/// NetPE (router1.toml), on every engine and binding.
#[test]
fn router6_and_router1_route_as_the_example_router() {
    use netvm_traffic::apps::{route_file, router_trace, routes4};
    let mut r = netvm_traffic::SplitMix64::new(11);
    let routes = routes4(&mut r, 400, 18);
    let text = route_file(&routes);
    let packets = router_trace(&mut r, &routes, 4000);
    let example = Manifest::load(&benches("../examples/ipv4-router/app.toml")).unwrap();
    let want = run_router(&example, &InterpEngine, &text, &packets);
    assert!(want.iter().filter(|o| !o.is_empty()).count() > 1000, "the trace exercises the forwarding path");
    for app in ["binding/router6/router6.toml", "binding/router6/router1.toml"] {
        let m = Manifest::load(&benches(app)).expect("manifest");
        for (name, e) in engines() {
            assert_eq!(run_router(&m, e.as_ref(), &text, &packets), want, "{app} on {name}");
        }
    }
}

/// benches/apps/bridge-c.toml (examples/l2-bridge's decision without aging,
/// `egress` or the flood's fan-out) forwards and drops each frame as the
/// example does, and sends to its flood sink (9) each frame the example
/// floods to every other port (every link up), on every engine.
#[test]
fn bridge_c_decides_as_the_example_bridge() {
    use netvm_traffic::apps::{bridge_trace, BridgeTraffic};
    let traffic = BridgeTraffic { ports: 4, hosts: 40, frames: 3_000, long_gaps: 0, moves: 3, gap_seconds: 0 };
    let frames = bridge_trace(&mut netvm_traffic::SplitMix64::new(5), &traffic);
    let example = Manifest::load(&benches("../examples/l2-bridge/app.toml")).expect("manifest");
    let (want, _) = run(&example, &InterpEngine, &frames);
    let m = Manifest::load(&benches("apps/bridge-c.toml")).expect("manifest");
    let (mut forwarded, mut flooded) = (0, 0);
    for (name, e) in engines() {
        let (outs, _) = run(&m, e.as_ref(), &frames);
        for (i, (o, w)) in outs.iter().zip(&want).enumerate() {
            if o == &[9] {
                let others: Vec<u16> = (1..=8).filter(|&q| q != frames[i].in_port).collect();
                assert_eq!(w, &others, "bridge-c on {name}: frame {i} flooded");
                flooded += 1;
            } else {
                assert_eq!(o, w, "bridge-c on {name}: frame {i}");
                forwarded += usize::from(!o.is_empty());
            }
        }
    }
    assert!(forwarded > 1_000 && flooded > 10, "{forwarded} forwarded, {flooded} flooded");
}

/// `Linked::pass_ports_burst`, which writes each burst's descriptors from
/// flat arrays, gives the answers of descriptors prepared once with the
/// same metadata: every packet's lengths, time and input port
/// (`Metadata::PerPacket`), or the time of the burst's first packet
/// (`Metadata::PerBurst`, against descriptors stamped the same way). On
/// f4, on bridge-c, which learns and forwards by input port, and on
/// examples/l2-bridge, whose entries age (time jumps past the aging limit
/// in the trace), over several passes (the tables carry over).
#[test]
fn burst_descriptors_run_as_prepared_ones() {
    use netvm_traffic::apps::{bridge_trace, BridgeTraffic};
    let traffic = BridgeTraffic { ports: 4, hosts: 40, frames: 3_000, long_gaps: 0, moves: 3, gap_seconds: 0 };
    let frames = bridge_trace(&mut netvm_traffic::SplitMix64::new(9), &traffic);
    let aging = BridgeTraffic { long_gaps: 2, gap_seconds: 400, ..traffic };
    let aged = bridge_trace(&mut netvm_traffic::SplitMix64::new(10), &aging);
    let mixed = packets();
    let bridge_c = Manifest::load(&benches("apps/bridge-c.toml")).expect("manifest");
    let bridge = Manifest::load(&benches("../examples/l2-bridge/app.toml")).expect("manifest");
    for (app, m, packets) in [("f4", f4(), &mixed), ("bridge-c", bridge_c, &frames), ("l2-bridge", bridge, &aged)] {
        for metadata in [Metadata::PerPacket, Metadata::PerBurst] {
            let (mut once, mut burst) = (Descs::packed(packets), Descs::packed(packets));
            if metadata == Metadata::PerBurst {
                once.stamp_per_burst();
            }
            let mut a = Linked::build(&m, LinkMode::Direct).expect("links");
            let mut b = Linked::build(&m, LinkMode::Direct).expect("links");
            for pass in 0..3 {
                let want = a.pass_ports(&mut once);
                assert!(want > packets.len() as u64 / 10, "{app}: the packets leave on ports ({want})");
                assert_eq!(b.pass_ports_burst(&mut burst, metadata), want, "{app}, {metadata:?}, pass {pass}");
            }
        }
    }
}
