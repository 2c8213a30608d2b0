//! Several data paths in one engine (crates/runtime/src/datapath.rs):
//! composition keeps them apart (names, wiring, state), each is admitted
//! on its own budget and all of them together, and one can be replaced,
//! removed or added while packets flow through the others, losing nothing.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use netvm_io::CaptureSource;

mod common;
use common::{Stream, COUNT};
use netvm_runtime::admission::{self, Admitted, Calibration};
use netvm_runtime::datapath::DataPathSpec;
use netvm_runtime::{Application, Change, Driver, DriverConfig, JitEngine, Manifest, Rebuild};
use netvm_vm::port::{OutPacket, PortError, Sink};

/// Writes `tag` into bytes 8..12 and sends the packet on.
fn tag(t: u32) -> String {
    format!(".ports 1\nsegment .push\n    pop\n    push 8\n    push {t}\n    ustore.32\n    ret 0\nends\n")
}

/// A data path manifest `NAME.toml`: count -> tag(t) -> its output port 0.
fn datapath(dir: &Path, name: &str, t: u32, extra: &str) -> PathBuf {
    std::fs::write(dir.join("count.nil"), COUNT).unwrap();
    std::fs::write(dir.join(format!("tag{t}.nil")), tag(t)).unwrap();
    let text = format!(
        "name = \"{name}\"\n[[netpe]]\nname = \"count\"\nprogram = \"count.nil\"\n[[netpe]]\nname = \"tag\"\nprogram = \"tag{t}.nil\"\n\
         [[source]]\nto = \"count\"\n[[connect]]\nfrom = \"count.0\"\nto = \"tag\"\n[[sink]]\nfrom = \"tag.0\"\nport = 0\n{extra}"
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// Writes `text` as `engine.toml` in `dir` and reads it.
fn engine(dir: &Path, text: &str) -> Result<Manifest, String> {
    let path = dir.join("engine.toml");
    std::fs::write(&path, text).unwrap();
    Manifest::load(&path).map_err(|e| e.to_string())
}

const TWO: &str = "\
[[datapath]]
name = \"red\"
manifest = \"red.toml\"
inport = 0
outport = 1
[[datapath]]
name = \"blue\"
manifest = \"blue.toml\"
inport = 1
outport = 2
";

#[test]
fn composition_names_and_wires_each_data_path_apart() {
    let dir = tempfile::tempdir().unwrap();
    datapath(dir.path(), "red", 1, "");
    datapath(dir.path(), "blue", 2, "");
    let m = engine(dir.path(), TWO).unwrap();
    let names: Vec<&str> = m.netpes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["red/count", "red/tag", "blue/count", "blue/tag"]);
    let sources: Vec<(u16, &str)> = m.sources.iter().map(|s| (s.port, s.to.as_str())).collect();
    assert_eq!(sources, [(0, "red/count"), (1, "blue/count")]);
    let sinks: Vec<(&str, u16)> = m.sinks.iter().map(|s| (s.from.as_str(), s.port)).collect();
    assert_eq!(sinks, [("red/tag.0", 1), ("blue/tag.0", 2)]);
    assert_eq!(m.datapaths[1].placed.in_ports, [1]);
    assert_eq!(m.datapaths[1].placed.out_ports, [2]);
}

#[test]
fn composition_refuses_what_would_mix_data_paths() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    datapath(d, "red", 1, "");
    datapath(d, "blue", 2, "");
    // A data path whose NetPE names another NetPE's instance: its own.
    datapath(d, "shared", 3, "[[netpe]]\nname = \"also\"\nprogram = \"count.nil\"\ncopro.n = { instance = \"count.n\" }\n");
    datapath(d, "twoports", 4, "[[source]]\nport = 1\nto = \"count\"\n");
    datapath(d, "twosinks", 5, "[[sink]]\nfrom = \"count.0\"\nport = 1\n");
    std::fs::write(d.join("self.toml"), "[[datapath]]\nname = \"again\"\nmanifest = \"self.toml\"\ninport = 0\n").unwrap();
    std::fs::write(d.join("classify.nil"), ".ports 2\nsegment .push\n    pop\n    ret 1\nends\n").unwrap();
    let dp = |name: &str, file: &str, how: &str| format!("[[datapath]]\nname = \"{name}\"\nmanifest = \"{file}\"\n{how}\n");
    let cases: Vec<(String, &str)> = vec![
        (format!("{}{}", dp("red", "red.toml", "inport = 0"), dp("blue", "blue.toml", "inport = 0")), "would feed both"),
        (dp("red", "red.toml", ""), "give `inport`"),
        (dp("red", "red.toml", "inport = 0\nselect = 1"), "give one of"),
        (dp("red", "red.toml", "select = 1"), "needs a [classifier]"),
        (format!("[classifier]\nprogram = \"classify.nil\"\n{}", dp("red", "red.toml", "inport = 0")), "would feed both"),
        (format!("{}{}", dp("red", "red.toml", "inport = 0"), dp("red", "blue.toml", "inport = 1")), "defined twice"),
        (dp("a/b", "red.toml", "inport = 0"), "not a data path name"),
        (dp("again", "self.toml", "inport = 0"), "do not nest"),
        (format!("[[netpe]]\nname = \"x\"\nprogram = \"count.nil\"\n{}", dp("red", "red.toml", "inport = 0")), "no [[netpe]]"),
        (format!("[admission]\nline_rate = \"1G\"\n{}", dp("red", "red.toml", "inport = 0")), "no [admission]"),
        ("[classifier]\nprogram = \"classify.nil\"\n".to_string(), "has no [[datapath]]"),
        (dp("red", "twoports.toml", "inport = 65535"), "past 65535"),
        (dp("red", "twosinks.toml", "inport = 0\noutport = 65535"), "past 65535"),
    ];
    for (text, want) in cases {
        let e = engine(d, &text).expect_err(&text);
        assert!(e.contains(want), "{text}\n-> {e}");
    }
    // Within a data path, a shared instance is its own data path's.
    let m = engine(d, &dp("shared", "shared.toml", "inport = 0")).unwrap();
    let also = m.netpes.iter().find(|n| n.name == "shared/also").unwrap();
    assert_eq!(also.copro["n"]["instance"].as_str(), Some("shared/count.n"));
    // A classifier-selected data path listens on one input port.
    let e = engine(d, &format!("[classifier]\nprogram = \"classify.nil\"\n{}", dp("x", "twoports.toml", "select = 1"))).unwrap_err();
    assert!(e.contains("one input"), "{e}");
}

#[test]
fn changes_that_would_mix_data_paths_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    datapath(dir.path(), "red", 1, "");
    datapath(dir.path(), "blue", 2, "");
    let m = engine(dir.path(), TWO).unwrap();
    let engine: Arc<dyn netvm_runtime::Engine> = Arc::new(JitEngine::default());
    let registry = netvm_copro::registry();
    let app = Application::build(&m, engine.as_ref(), &registry, None).unwrap();
    let d = Driver::new(app, DriverConfig::default());
    d.allow_changes(Rebuild { manifest: m, engine, registry, budget: None, calibration: None });
    let c = d.control();
    for change in [
        Change::Connect { from: "red/count.0".into(), to: "blue/tag".into() },
        Change::Connect { from: "in:1".into(), to: "red/count".into() },
        Change::RemoveDataPath { name: "green".into() },
        Change::ReplaceDataPath { name: "green".into(), manifest: dir.path().join("red.toml") },
        Change::AddDataPath {
            spec: DataPathSpec {
                name: "red".into(),
                manifest: dir.path().join("red.toml"),
                inport: Some(5),
                select: None,
                outport: 0,
                admission: None,
                placed: Default::default(),
            },
        },
    ] {
        let e = c.apply(change.clone()).expect_err(&format!("{change:?}"));
        assert!(!e.to_string().is_empty());
    }
    assert_eq!(c.list().unwrap().epoch, 0, "nothing changed");
    assert_eq!(c.list().unwrap().datapaths.len(), 2);
}

#[test]
fn each_data_path_is_admitted_on_its_own_budget_and_all_together() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    datapath(d, "red", 1, "");
    datapath(d, "blue", 2, "");
    let cal = Calibration::builtin("jit");
    let registry = netvm_copro::registry();
    let plan_of = |text: &str| {
        let m = engine(d, text).unwrap();
        let plan = Application::plan(&m, &registry, None).unwrap();
        (m, plan)
    };
    let with = |red: &str, blue: &str| {
        format!(
            "[[datapath]]\nname = \"red\"\nmanifest = \"red.toml\"\ninport = 0\nadmission = {{ line_rate = \"{red}\" }}\n\
             [[datapath]]\nname = \"blue\"\nmanifest = \"blue.toml\"\ninport = 1\nadmission = {{ line_rate = \"{blue}\" }}\n"
        )
    };
    // Each alone fits easily: admitted, each with its own figures.
    let (m, plan) = plan_of(&with("1G", "1G"));
    let Some(Admitted::DataPaths { each, load, .. }) = admission::check(&plan, &m, &cal, 1).unwrap() else { panic!("data paths") };
    assert_eq!(each.len(), 2);
    assert_eq!(each[0].1.path, ["red/count", "red/tag"]);
    assert!(load > 0.0 && load < 0.5, "{load}");
    // How much one packet of red costs, to aim the rates.
    let cost = each[0].1.packet_ns;
    // A line rate red alone cannot take: refused naming red.
    let per_packet = |ns: f64| format!("{}", (84.0 * 8.0 / ns * 1e9) as u64);
    let (m, plan) = plan_of(&with(&per_packet(cost * 0.5), "1G"));
    let e = admission::check(&plan, &m, &cal, 1).unwrap_err();
    assert!(e.contains("data path `red`") && e.contains("red/count -> red/tag"), "{e}");
    // Each fits alone (60% of the engine each), not both together.
    let (m, plan) = plan_of(&with(&per_packet(cost / 0.6), &per_packet(cost / 0.6)));
    let e = admission::check(&plan, &m, &cal, 1).unwrap_err();
    assert!(e.contains("shared processing time") && e.contains("red 60%") && e.contains("blue 60%"), "{e}");
    // Two workers take both.
    assert!(admission::check(&plan, &m, &cal, 2).is_ok());
    // A data path without [admission] is not weighed.
    let (m, plan) = plan_of(TWO);
    assert_eq!(admission::check(&plan, &m, &cal, 1).unwrap(), None);
}

/// Every packet that left a port, in order: (number, tag).
type Exits = Arc<Mutex<Vec<(u64, u32)>>>;

struct Record(Exits);

impl Sink for Record {
    fn name(&self) -> &str {
        "record"
    }
    fn write(&mut self, p: &OutPacket<'_>) -> Result<(), PortError> {
        let n = u64::from_be_bytes(p.data[..8].try_into().expect("8 bytes"));
        let tag = u32::from_be_bytes(p.data[8..12].try_into().expect("4 bytes"));
        self.0.lock().unwrap().push((n, tag));
        Ok(())
    }
    fn flush(&mut self) -> Result<(), PortError> {
        Ok(())
    }
}

/// Replaces red's data path again and again (and removes and adds a third)
/// while both stream: blue never notices, red loses nothing, and each
/// keeps its state.
fn swap_one_data_path(workers: usize) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    datapath(d, "red", 1, "");
    datapath(d, "blue", 2, "");
    let red2 = datapath(d, "red2", 3, "");
    let red1 = d.join("red.toml");
    let green = datapath(d, "green", 4, "");
    let m = engine(d, &format!("distribution = \"round-robin\"\n{TWO}")).unwrap();
    let engine: Arc<dyn netvm_runtime::Engine> = Arc::new(JitEngine::default());
    let registry = netvm_copro::registry();
    let app = Application::build(&m, engine.as_ref(), &registry, None).unwrap();
    let mut drv = Driver::new(app, DriverConfig { workers, batch: 64, ..DriverConfig::default() });
    drv.allow_changes(Rebuild { manifest: m, engine, registry, budget: None, calibration: None });
    let stop = Arc::new(AtomicBool::new(false));
    for port in [0, 1] {
        let s = Stream::new(Arc::clone(&stop), 2000);
        drv.add_source(Box::new(CaptureSource::from_reader(s, "stream", port, drv.block_pool()).unwrap()));
    }
    let (red, blue): (Exits, Exits) = Default::default();
    drv.add_sink(1, Box::new(Record(Arc::clone(&red))));
    drv.add_sink(2, Box::new(Record(Arc::clone(&blue))));
    let c = drv.control();
    let swaps = 60;
    let changer = {
        let stop = Arc::clone(&stop);
        let c = c.clone();
        std::thread::spawn(move || {
            for i in 0..swaps {
                let file = if i % 2 == 0 { &red2 } else { &red1 };
                let done = c.apply(Change::ReplaceDataPath { name: "red".into(), manifest: file.clone() }).unwrap();
                // red's counter is the same program with the same configuration: carried over.
                assert!(done.copros_carried.contains(&"red/count.n".to_string()), "{done:?}");
                assert!(done.copros_carried.contains(&"blue/count.n".to_string()), "{done:?}");
                if i == swaps / 2 {
                    let spec = DataPathSpec {
                        name: "green".into(),
                        manifest: green.clone(),
                        inport: Some(7),
                        select: None,
                        outport: 9,
                        admission: None,
                        placed: Default::default(),
                    };
                    c.apply(Change::AddDataPath { spec }).unwrap();
                    assert_eq!(c.list().unwrap().datapaths.len(), 3);
                    c.apply(Change::RemoveDataPath { name: "green".into() }).unwrap();
                }
                c.wait_running(done.first, Duration::from_secs(5));
            }
            stop.store(true, Ordering::Release);
        })
    };
    let report = drv.run().unwrap();
    changer.join().unwrap();
    assert!(report.input_errors.is_empty(), "{:?}", report.input_errors);
    let (red, blue) = (red.lock().unwrap(), blue.lock().unwrap());
    assert_eq!((red.len() + blue.len()) as u64, report.input_packets);
    for (what, exits) in [("red", &red), ("blue", &blue)] {
        for (i, &(n, _)) in exits.iter().enumerate() {
            assert_eq!(n, i as u64, "{what}: packet {i} lost, duplicated or out of order");
        }
    }
    assert!(blue.iter().all(|&(_, t)| t == 2), "blue ran only its own version");
    let mut tags: Vec<u32> = red.iter().map(|&(_, t)| t).collect();
    tags.dedup();
    assert!(tags.len() > 2 && tags.iter().all(|t| *t == 1 || *t == 3), "red's versions: {tags:?}");
    assert_eq!(*tags.last().unwrap(), 1, "the last replacement ran last");
    // Each data path's counter went through every version, and counted its own packets.
    let dps = c.datapath_stats().unwrap();
    for (name, exits) in [("red", &red), ("blue", &blue)] {
        let count = |s: String| s.split_whitespace().find_map(|kv| kv.strip_prefix("0=").and_then(|v| v.parse::<u64>().ok()));
        assert_eq!(count(drv.app().dump_table(&format!("{name}/count.n")).unwrap()), Some(exits.len() as u64), "{name}");
        let st = dps.iter().find(|s| s.name == name).unwrap();
        assert_eq!(st.packets, exits.len() as u64, "{name}: {st:?}");
        assert_eq!(st.ports.values().sum::<u64>(), exits.len() as u64, "{name}: {st:?}");
    }
}

#[test]
fn replacing_one_data_path_under_a_stream_leaves_the_other_alone() {
    swap_one_data_path(1);
}

#[test]
fn replacing_one_data_path_under_a_stream_with_two_workers() {
    swap_one_data_path(2);
}
