//! Several workers give what one worker gives: for generated applications
//! that keep no state (random DAGs of generated NetPEs whose `.push`
//! handlers never write data memory, with fan-out, unconnected ports and
//! several inputs), every packet that leaves every sink, in order and byte
//! for byte, and every counter, with 2 and 4 workers under both
//! distributions, on the JIT (linked) and the interpreter.
//!
//! `NETVM_WORKER_APPS=N` runs N applications, `NETVM_WORKER_SEED=S` changes the seed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use netvm_fuzzgen::app::generate_app;
use netvm_fuzzgen::arbitrary::Unstructured;
use netvm_fuzzgen::{generate_packets, GenConfig};
use netvm_io::CaptureSource;
use netvm_runtime::{AppStats, Application, Distribution, Driver, DriverConfig, Engine, InterpEngine, JitEngine, Manifest};
use netvm_traffic::SplitMix64;
use netvm_vm::port::{OutPacket, PortError, Sink};
use netvm_vm::Packet;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Every packet that left, in order: (port, seq, bytes, wire length).
type Exits = Arc<Mutex<Vec<(u16, u64, Vec<u8>, u32)>>>;

/// A sink recording what leaves one port.
struct Record {
    port: u16,
    exits: Exits,
}

impl Sink for Record {
    fn name(&self) -> &str {
        "record"
    }

    fn write(&mut self, p: &OutPacket<'_>) -> Result<(), PortError> {
        self.exits.lock().unwrap().push((self.port, p.seq, p.data.to_vec(), p.wire_len));
        Ok(())
    }

    fn flush(&mut self) -> Result<(), PortError> {
        Ok(())
    }
}

/// What a run observably did.
#[derive(Debug, PartialEq)]
struct Observed {
    exits: Vec<(u16, u64, Vec<u8>, u32)>,
    stats: AppStats,
}

fn run(manifest: &Manifest, engine: &dyn Engine, inputs: &[(u16, std::path::PathBuf)], cfg: DriverConfig) -> Result<Observed, String> {
    let registry = netvm_copro::registry();
    let app = Application::build(manifest, engine, &registry, None).map_err(|e| e.to_string())?;
    let sink_ports = app.graph().sink_ports as u16;
    let mut driver = Driver::new(app, cfg);
    for (port, path) in inputs {
        let s = CaptureSource::open(path, *port, driver.block_pool()).map_err(|e| e.to_string())?;
        driver.add_source(Box::new(s));
    }
    let exits: Exits = Arc::default();
    for port in 0..sink_ports {
        driver.add_sink(port, Box::new(Record { port, exits: Arc::clone(&exits) }));
    }
    let report = driver.run().map_err(|e| e.to_string())?;
    assert!(report.input_errors.is_empty(), "{:?}", report.input_errors);
    let exits = std::mem::take(&mut *exits.lock().unwrap());
    let stats = driver.app().stats();
    Ok(Observed { exits, stats })
}

/// Writes `packets` to one pcap file per input port; returns `(port, path)`.
fn write_inputs(dir: &Path, packets: &[Packet]) -> Vec<(u16, std::path::PathBuf)> {
    let mut by_port: BTreeMap<u16, Vec<Packet>> = BTreeMap::new();
    for p in packets {
        by_port.entry(p.in_port).or_default().push(p.clone());
    }
    by_port
        .into_iter()
        .map(|(port, pkts)| {
            let path = dir.join(format!("in-{port}.pcap"));
            netvm_traffic::write_pcap(std::fs::File::create(&path).unwrap(), &pkts).unwrap();
            (port, path)
        })
        .collect()
}

#[test]
fn stateless_applications_give_the_same_output_on_any_number_of_workers() {
    let apps = env_num("NETVM_WORKER_APPS", 40);
    let seed = env_num("NETVM_WORKER_SEED", 0x776f_726b);
    let mut rng = SplitMix64::new(seed);
    let engines: [(&str, Box<dyn Engine>); 2] = [("jit", Box::new(JitEngine::default())), ("interp", Box::new(InterpEngine))];
    let (mut compared, mut tried) = (0usize, 0u64);
    while (compared as u64) < apps && tried < apps * 20 {
        tried += 1;
        let cfg = GenConfig { max_insns: 60, max_ports: 4, max_info_size: 32, max_data_size: 32, ..GenConfig::default() };
        let Some(g) = generate_app(&mut rng, &cfg) else { continue };
        let pkt_bytes = rng.bytes(400 * 160);
        let Ok(mut packets) = generate_packets(&mut Unstructured::new(&pkt_bytes), 400) else { continue };
        // Increasing times, a few input ports.
        for (i, p) in packets.iter_mut().enumerate() {
            p.ts = netvm_vm::Timestamp { sec: 1_700_000_000 + i as u64 / 100, nsec: (i as u32 % 100) * 1000 };
            p.in_port %= 3;
        }
        let dir = tempfile::tempdir().unwrap();
        for (file, bytes, _) in &g.programs {
            std::fs::write(dir.path().join(file), bytes).unwrap();
        }
        let path = dir.path().join("app.toml");
        std::fs::write(&path, &g.manifest).unwrap();
        let manifest = Manifest::load(&path).unwrap();
        let registry = netvm_copro::registry();
        let Ok(app) = Application::build(&manifest, &InterpEngine, &registry, None) else { continue };
        if app.keeps_state() {
            continue;
        }
        let sources = app.input_ports();
        packets.retain(|p| sources.contains(&p.in_port));
        if packets.is_empty() {
            continue;
        }
        let inputs = write_inputs(dir.path(), &packets);
        for (name, engine) in &engines {
            let one = DriverConfig { workers: 1, batch: 7, ..DriverConfig::default() };
            let want = run(&manifest, engine.as_ref(), &inputs, one).unwrap();
            for workers in [2, 4] {
                for d in [Distribution::RoundRobin, Distribution::Flow] {
                    let cfg = DriverConfig { workers, batch: 7, distribution: Some(d), queue_depth: 2, ..DriverConfig::default() };
                    let got = run(&manifest, engine.as_ref(), &inputs, cfg).unwrap();
                    if got.exits != want.exits {
                        let i =
                            got.exits.iter().zip(&want.exits).position(|(a, b)| a != b).unwrap_or(got.exits.len().min(want.exits.len()));
                        panic!(
                            "{name}, {workers} workers, {}: exit #{i} differs ({} vs {} exits)\n{}",
                            d.name(),
                            got.exits.len(),
                            want.exits.len(),
                            g.manifest
                        );
                    }
                    assert_eq!(got.stats, want.stats, "{name}, {workers} workers, {}: counters\n{}", d.name(), g.manifest);
                }
            }
        }
        compared += 1;
    }
    println!("{compared} stateless applications compared ({tried} generated)");
    assert!(compared as u64 >= apps / 2, "only {compared} stateless applications");
}

/// Inputs whose packets tie (the same capture twice on one port) are merged
/// without stalling: the input given first goes first.
#[test]
fn tied_inputs_merge() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = SplitMix64::new(0x7469_6573);
    let packets = netvm_traffic::frames::generate_trace(&mut rng, 500);
    let path = dir.path().join("t.pcap");
    netvm_traffic::write_pcap(std::fs::File::create(&path).unwrap(), &packets).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let manifest = Manifest::load(&root.join("examples/classifier/app.toml")).unwrap();
    let inputs = [(0, path.clone()), (0, path)];
    let got = run(&manifest, &JitEngine::default(), &inputs, DriverConfig::default()).unwrap();
    assert_eq!(got.stats.packets, 1000);
    // Each packet's exits twice: from the first input, then (same time) the second.
    let seqs: Vec<u64> = got.exits.iter().map(|e| e.1).collect();
    assert!(seqs.windows(2).all(|w| w[0] <= w[1]), "exits out of order");
}
