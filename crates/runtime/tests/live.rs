//! Changing a running application (`Control`, crates/runtime/src/live.rs):
//! a storm of replacements under a continuous stream loses, duplicates and
//! reorders nothing, packets run on versions in install order, and state
//! (a coprocessor instance) carries over through every version; bad
//! requests change nothing.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use netvm_io::CaptureSource;

mod common;
use common::{Stream, COUNT};
use netvm_runtime::{Application, Change, Control, Driver, DriverConfig, JitEngine, Manifest, ProgramRef, Rebuild};
use netvm_vm::port::{OutPacket, PortError, Sink};

/// Every packet that left, in order: (port, number, tag).
type Exits = Arc<Mutex<Vec<(u16, u64, u32)>>>;

struct Record {
    port: u16,
    exits: Exits,
}

impl Sink for Record {
    fn name(&self) -> &str {
        "record"
    }

    fn write(&mut self, p: &OutPacket<'_>) -> Result<(), PortError> {
        let n = u64::from_be_bytes(p.data[..8].try_into().expect("8 bytes"));
        let tag = u32::from_be_bytes(p.data[8..12].try_into().expect("4 bytes"));
        self.exits.lock().unwrap().push((self.port, n, tag));
        Ok(())
    }

    fn flush(&mut self) -> Result<(), PortError> {
        Ok(())
    }
}

/// The program of version `tag`: writes `tag` into bytes 8..12.
fn tag_program(dir: &Path, tag: u64) -> PathBuf {
    let path = dir.join(format!("tag{tag}.nil"));
    std::fs::write(&path, format!(".ports 1\nsegment .push\n    pop\n    push 8\n    push {tag}\n    ustore.32\n    ret 0\nends\n"))
        .unwrap();
    path
}

/// `count` (a counter per packet, never replaced) -> `tag` -> output port 1.
fn manifest(dir: &Path) -> Manifest {
    std::fs::write(dir.join("count.nil"), COUNT).unwrap();
    tag_program(dir, 0);
    let text = r#"
name = "storm"
distribution = "round-robin"
[[netpe]]
name = "count"
program = "count.nil"
[[netpe]]
name = "tag"
program = "tag0.nil"
[[source]]
to = "count"
[[connect]]
from = "count.0"
to = "tag"
[[sink]]
from = "tag.0"
port = 1
"#;
    let path = dir.join("app.toml");
    std::fs::write(&path, text).unwrap();
    Manifest::load(&path).unwrap()
}

fn driver(dir: &Path, workers: usize) -> Driver {
    let m = manifest(dir);
    let engine: Arc<dyn netvm_runtime::Engine> = Arc::new(JitEngine::default());
    let registry = netvm_copro::registry();
    let app = Application::build(&m, engine.as_ref(), &registry, None).unwrap();
    let cfg = DriverConfig { workers, batch: 64, ..DriverConfig::default() };
    let d = Driver::new(app, cfg);
    d.allow_changes(Rebuild { manifest: m, engine, registry, budget: None, calibration: None });
    d
}

/// Replaces `tag` `swaps` times while a stream runs through `workers`
/// workers, and checks what left.
fn storm(workers: usize, swaps: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut d = driver(dir.path(), workers);
    let stop = Arc::new(AtomicBool::new(false));
    let src = CaptureSource::from_reader(Stream::new(Arc::clone(&stop), 5000), "stream", 0, d.block_pool()).unwrap();
    d.add_source(Box::new(src));
    let exits: Exits = Arc::default();
    d.add_sink(1, Box::new(Record { port: 1, exits: Arc::clone(&exits) }));
    let control = d.control();
    let programs: Vec<PathBuf> = (1..=swaps).map(|k| tag_program(dir.path(), k)).collect();
    let changer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut latencies = Vec::new();
            let mut last = 0;
            for p in programs {
                let installed = control.apply(Change::Replace { name: "tag".into(), program: ProgramRef::File(p) }).unwrap();
                // A quick version, then the data path compiled whole.
                assert!(installed.first == last + 1 && installed.epoch == last + 2, "{installed:?}");
                assert!(matches!(installed.compiled, Some(Ok(_))), "{installed:?}");
                last = installed.epoch;
                // The counter NetPE is the same program: its instance and data go over.
                assert!(installed.copros_carried.contains(&"count.n".to_string()), "{installed:?}");
                if let Some(l) = control.wait_running(installed.first, Duration::from_secs(5)) {
                    latencies.push(l);
                }
            }
            stop.store(true, Ordering::Release);
            latencies
        })
    };
    let report = d.run().unwrap();
    let latencies = changer.join().unwrap();
    assert!(report.input_errors.is_empty(), "{:?}", report.input_errors);
    let exits = exits.lock().unwrap();
    let total = report.input_packets;
    // Nothing lost, duplicated or reordered.
    assert_eq!(exits.len() as u64, total);
    for (i, &(port, n, _)) in exits.iter().enumerate() {
        assert_eq!((port, n), (1, i as u64), "packet {i}");
    }
    // Versions in install order, each its own program; the last one ran.
    let mut last = 0;
    for &(_, n, tag) in exits.iter() {
        assert!(u64::from(tag) >= last, "packet {n} ran on version {tag} after version {last}");
        last = u64::from(tag);
    }
    assert_eq!(last, swaps, "the tail ran on the last version");
    // The counter instance went through every version and worker.
    let app = d.app();
    let dump = app.dump_table("count.n").unwrap();
    let counted: u64 =
        dump.split_whitespace().find_map(|kv| kv.strip_prefix("0=")).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{dump}"));
    assert_eq!(counted, total, "{dump}");
    let stats = app.stats();
    assert_eq!(stats.packets, total);
    assert_eq!(stats.ports.get(&1).copied(), Some(total));
    let count = stats.netpes.iter().find(|c| c.name == "count").unwrap();
    assert_eq!(count.flow.packets_in.iter().sum::<u64>(), total);
    let mut l: Vec<Duration> = latencies;
    l.sort();
    assert!(!l.is_empty());
    eprintln!(
        "{workers} worker(s): {total} packets, {swaps} versions, {} seen running; request to first batch: median {:?}, p99 {:?}",
        l.len(),
        l[l.len() / 2],
        l[l.len() * 99 / 100]
    );
}

#[test]
fn a_thousand_replacements_under_a_stream_lose_nothing_with_two_workers() {
    storm(2, 1000);
}

#[test]
fn replacements_under_a_stream_lose_nothing_with_one_worker() {
    storm(1, 200);
}

fn ready(dir: &Path) -> (Driver, Control) {
    let d = driver(dir, 1);
    let c = d.control();
    (d, c)
}

#[test]
fn bad_requests_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (_d, c) = ready(dir.path());
    let before = format!("{:?}", c.list().unwrap());
    let bad = dir.path().join("bad.nil");
    std::fs::write(&bad, "segment .push\n    pop\n    pop\n    ret 0\nends\n").unwrap();
    let requests = [
        Change::Replace { name: "tag".into(), program: ProgramRef::File(bad.clone()) },
        Change::Replace { name: "nope".into(), program: ProgramRef::File(bad) },
        Change::Replace { name: "tag".into(), program: ProgramRef::Module("unloaded".into()) },
        Change::AddNetPe {
            name: "count".into(),
            program: ProgramRef::File(dir.path().join("count.nil")),
            copro: Default::default(),
            args: Default::default(),
        },
        Change::AddNetPe {
            name: "a.b".into(),
            program: ProgramRef::File(dir.path().join("count.nil")),
            copro: Default::default(),
            args: Default::default(),
        },
        Change::Connect { from: "count.0".into(), to: "tag".into() },
        Change::Connect { from: "count.7".into(), to: "tag".into() },
        Change::Connect { from: "in:0".into(), to: "out:1".into() },
        Change::Disconnect { from: "tag.0".into(), to: "count".into() },
        Change::RemoveNetPe { name: "nope".into() },
    ];
    for r in requests {
        let e = c.apply(r.clone()).expect_err(&format!("{r:?}"));
        assert!(!e.to_string().is_empty());
        assert_eq!(format!("{:?}", c.list().unwrap()), before, "{r:?} changed the application");
    }
    assert_eq!(c.list().unwrap().epoch, 0);
}

#[test]
fn edits_make_the_data_path_they_say() {
    let dir = tempfile::tempdir().unwrap();
    let (mut d, c) = ready(dir.path());
    let extra = tag_program(dir.path(), 7);
    c.apply(Change::AddNetPe {
        name: "seven".into(),
        program: ProgramRef::File(extra),
        copro: Default::default(),
        args: Default::default(),
    })
    .unwrap();
    c.apply(Change::Disconnect { from: "tag.0".into(), to: "out:1".into() }).unwrap();
    c.apply(Change::Connect { from: "tag.0".into(), to: "seven".into() }).unwrap();
    c.apply(Change::Connect { from: "seven.0".into(), to: "out:2".into() }).unwrap();
    let l = c.list().unwrap();
    assert_eq!(l.epoch, 8, "a quick and a compiled version per change");
    assert_eq!(l.connections, vec![("count.0".to_string(), "tag".to_string()), ("tag.0".to_string(), "seven".to_string())]);
    assert_eq!(l.sinks, vec![("seven.0".to_string(), "out:2".to_string())]);
    // The versions apply to the packets that follow.
    let stop = Arc::new(AtomicBool::new(true));
    d.add_source(Box::new(CaptureSource::from_reader(Stream::new(stop, 100), "s", 0, d.block_pool()).unwrap()));
    let exits: Exits = Arc::default();
    d.add_sink(2, Box::new(Record { port: 2, exits: Arc::clone(&exits) }));
    d.run().unwrap();
    let exits = exits.lock().unwrap();
    assert_eq!(exits.len(), 128);
    assert!(exits.iter().all(|&(p, _, tag)| p == 2 && tag == 7));
    // Removing a NetPE removes its connections.
    c.apply(Change::RemoveNetPe { name: "seven".into() }).unwrap();
    let l = c.list().unwrap();
    assert_eq!(l.connections, vec![("count.0".to_string(), "tag".to_string())]);
    assert!(l.sinks.is_empty());
    assert_eq!(l.netpes.len(), 2);
    // Tables are reached while nothing runs, too.
    assert_eq!(c.table_dump("count.n").unwrap(), "0=128");
    c.table_clear("count.n").unwrap();
    assert_eq!(c.table_dump("count.n").unwrap(), "");
}

/// A meter over data memory: layout `meter` version `version` (accepting
/// `accepts`), counting packets in `seen`, and from version 2 on also in `since`.
fn meter(dir: &Path, version: u32, accepts: &str) -> PathBuf {
    let path = dir.join(format!("meter{version}.nil"));
    let more = if version >= 2 { "    push 4\n    push 4\n    dload.32\n    push 1\n    add\n    dstore.32\n" } else { "" };
    let text = format!(
        ".datasize {}\n.ports 1\n.outport out 0\n.arg start 0 4\n.global seen 0 4\n{}.layout meter {version}{accepts}\n\
         segment .push\n    pop\n    push 0\n    push 0\n    dload.32\n    push 1\n    add\n    dstore.32\n{more}    ret 0\nends\n",
        if version >= 2 { 8 } else { 4 },
        if version >= 2 { ".global since 4 4\n" } else { "" },
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs 128 packets through the driver.
fn run_128(d: &mut Driver) {
    let stop = Arc::new(AtomicBool::new(true));
    d.add_source(Box::new(CaptureSource::from_reader(Stream::new(stop, 100), "s", 0, d.block_pool()).unwrap()));
    let r = d.run().unwrap();
    assert!(r.input_errors.is_empty(), "{:?}", r.input_errors);
}

#[test]
fn data_memory_goes_over_to_a_compatible_layout_and_arguments_and_globals_work() {
    let dir = tempfile::tempdir().unwrap();
    let (mut d, c) = ready(dir.path());
    let mut args = std::collections::BTreeMap::new();
    args.insert("start".to_string(), toml::Value::Integer(1000));
    let v1 = meter(dir.path(), 1, "");
    c.apply(Change::AddNetPe { name: "meter".into(), program: ProgramRef::File(v1), copro: Default::default(), args }).unwrap();
    // By the names the program gives its ports.
    c.apply(Change::Disconnect { from: "tag.0".into(), to: "out:1".into() }).unwrap();
    c.apply(Change::Connect { from: "tag.0".into(), to: "meter".into() }).unwrap();
    c.apply(Change::Connect { from: "meter.out".into(), to: "out:1".into() }).unwrap();
    run_128(&mut d);
    assert_eq!(c.global_get("meter", "seen").unwrap(), vec![1128], "the argument, then 128 packets");
    // Version 2 accepts version 1: `seen` goes on, `since` starts at zero.
    let v2 = meter(dir.path(), 2, " accepts 1");
    let installed = c.apply(Change::Replace { name: "meter".into(), program: ProgramRef::File(v2) }).unwrap();
    assert!(installed.data_carried.contains(&"meter".to_string()), "{installed:?}");
    run_128(&mut d);
    assert_eq!(c.global_get("meter", "seen").unwrap(), vec![1256]);
    assert_eq!(c.global_get("meter", "since").unwrap(), vec![128]);
    c.global_set("meter", "since", 7).unwrap();
    assert_eq!(c.global_get("meter", "since").unwrap(), vec![7]);
    assert!(c.global_set("meter", "since", 1 << 40).is_err(), "does not fit in 4 bytes");
    assert!(c.global_get("meter", "nope").is_err());
    // Version 3 accepts nothing: its memory starts afresh (with its argument).
    let v3 = meter(dir.path(), 3, "");
    let installed = c.apply(Change::Replace { name: "meter".into(), program: ProgramRef::File(v3) }).unwrap();
    assert!(!installed.data_carried.contains(&"meter".to_string()), "{installed:?}");
    run_128(&mut d);
    assert_eq!(c.global_get("meter", "seen").unwrap(), vec![1128]);
    // Counters went on through every version, by NetPE name.
    let s = c.stats().unwrap();
    assert_eq!(s.packets, 384);
    let m = s.netpes.iter().find(|n| n.name == "meter").unwrap();
    assert_eq!(m.flow.packets_out, vec![384]);
}
