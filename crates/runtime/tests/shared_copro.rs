//! A NetPE reaching another NetPE's coprocessor instance (manifest
//! `copro = { NAME = { instance = "NETPE.NAME" } }`): one instance, seen
//! from both, on every engine; forks share their own owner's instance;
//! statistics, dumps and absorption count it once; manifest mistakes are
//! clear errors.

use std::path::Path;
use std::sync::{Arc, Mutex};

use netvm_io::CaptureSource;
use netvm_runtime::{Application, Distribution, Driver, DriverConfig, Engine, InterpEngine, JitEngine, LinkMode, Manifest, Verdict};
use netvm_vm::port::{OutPacket, PortError, Sink};
use netvm_vm::{Packet, Timestamp};

/// Writes `files` and `manifest` into `dir`; returns the manifest loaded.
fn setup(dir: &Path, manifest: &str, files: &[(&str, &str)]) -> Manifest {
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let path = dir.join("app.toml");
    std::fs::write(&path, manifest).unwrap();
    Manifest::load(&path).unwrap()
}

/// Every engine the runtime offers: the interpreter, the JIT per NetPE
/// (dispatch), and the JIT linking the application (direct, table).
fn engines() -> Vec<(&'static str, Box<dyn Engine>)> {
    vec![
        ("interp", Box::new(InterpEngine)),
        ("jit-dispatch", Box::new(JitEngine::with_link(None))),
        ("jit-direct", Box::new(JitEngine::with_link(Some(LinkMode::Direct)))),
        ("jit-table", Box::new(JitEngine::with_link(Some(LinkMode::Table)))),
    ]
}

/// `a` adds 1 to counter 0 of its `counters` instance `c`; `b` adds 1 to
/// counter 1 of `mine`, which names `a.c`, then reads counter 0 through it
/// and stores it at packet offset 0.
const A: &str =
    ".copro c counters\nsegment .push\n pop\n push 0\n copro.in c, 0\n push 1\n copro.in c, 1\n copro.invoke c, 0\n ret 0\nends\n";
const B: &str = ".copro mine counters\nsegment .push\n pop\n push 1\n copro.in mine, 0\n push 1\n copro.in mine, 1\n copro.invoke mine, 0\n push 0\n copro.in mine, 0\n copro.invoke mine, 1\n push 0\n copro.out mine, 0\n ustore.32\n ret 0\nends\n";
const COUNTERS: &str = r#"
[[netpe]]
name = "a"
program = "a.nil"
copro = { c = { size = 4 } }
[[netpe]]
name = "b"
program = "b.nil"
copro = { mine = { instance = "a.c" } }
[[source]]
to = "a"
[[connect]]
from = "a.0"
to = "b"
[[sink]]
from = "b.0"
port = 0
"#;

fn counters_app(dir: &Path, engine: &dyn Engine) -> Application {
    let m = setup(dir, COUNTERS, &[("a.nil", A), ("b.nil", B)]);
    Application::build(&m, engine, &netvm_copro::registry(), None).unwrap()
}

/// Runs `n` packets of four zero bytes; returns the first word of each packet that left.
fn run(app: &mut Application, n: usize) -> Vec<u32> {
    let mut batch = vec![Packet::from_bytes(vec![0; 4]); n];
    let mut verdicts = Vec::new();
    let mut out = Vec::new();
    app.process_batch(&mut batch, &mut verdicts, &mut |_, p| out.push(u32::from_be_bytes(p.data[..4].try_into().unwrap())));
    assert!(verdicts.iter().all(|v| *v == Verdict::Output(0)), "{verdicts:?}");
    out
}

#[test]
fn an_alias_reaches_the_owners_instance_on_every_engine() {
    for (name, engine) in engines() {
        let dir = tempfile::tempdir().unwrap();
        let mut app = counters_app(dir.path(), engine.as_ref());
        assert_eq!(run(&mut app, 3), [1, 2, 3], "{name}: b reads what a counted");
        // One instance, reported and dumped once, under its owner.
        assert_eq!(app.dump_table("a.c").unwrap(), "0=3 1=3", "{name}");
        assert_eq!(app.dump_table("b.mine").unwrap(), "0=3 1=3", "{name}");
        let stats = app.copro_stats();
        assert_eq!(stats, vec![("a".to_string(), "c".to_string(), vec![("0".to_string(), 3), ("1".to_string(), 3)])], "{name}");
        assert_eq!(app.copro_dumps().keys().collect::<Vec<_>>(), ["a.c"], "{name}");
        // The control plane reaches the owner's instance through either name.
        app.clear_table("b.mine").unwrap();
        assert_eq!(app.dump_table("a.c").unwrap(), "", "{name}");
        assert_eq!(run(&mut app, 1), [1], "{name}");
        // The two names of one instance are not ambiguous.
        assert!(app.copro_mut("mine").is_ok() && app.copro_mut("c").is_ok(), "{name}");
        // The owner's handle reaches the concrete type; so does the alias's name.
        assert!(app.copro_mut("b.mine").unwrap().as_any_mut().is_some(), "{name}");
        // Whether the application keeps per-worker state is the owner's business.
        assert!(app.keeps_state(), "{name}");
    }
}

#[test]
fn a_fork_shares_its_own_owners_instance_and_absorbs_once() {
    for (name, engine) in engines() {
        let dir = tempfile::tempdir().unwrap();
        let mut app = counters_app(dir.path(), engine.as_ref());
        assert_eq!(run(&mut app, 2), [1, 2], "{name}");
        let mut fork = app.fork().unwrap();
        // The fork's counters start at zero, and its alias reads the fork's owner.
        assert_eq!(run(&mut fork, 3), [1, 2, 3], "{name}: the fork's b reads the fork's a");
        assert_eq!(run(&mut app, 1), [3], "{name}: the original counts on alone");
        assert_eq!(fork.dump_table("a.c").unwrap(), "0=3 1=3", "{name}");
        let mut fork2 = fork.fork().unwrap();
        assert_eq!(run(&mut fork2, 1), [1], "{name}");
        fork.absorb(fork2);
        app.absorb(fork);
        // 3 + 3 + 1 packets, each counted once in counter 0 and once in counter 1.
        assert_eq!(app.dump_table("a.c").unwrap(), "0=7 1=7", "{name}");
        assert_eq!(app.copro_stats().len(), 1, "{name}");
    }
}

/// `decode` tracks every packet's flow in its `flow` instance `fl` and
/// leaves the flow's handle in info memory; `detect` selects that flow in
/// `f` (`decode.fl`) and sends the first packet of each flow to port 0
/// (setting bit 0 of the flow), the others to port 1.
const DECODE: &str = ".copro fl flow\n.infosize 4\nsegment .push\n pop\n push 14\n copro.in fl, 5\n copro.invoke fl, 1\n push 0\n copro.out fl, 1\n istore.32\n ret 0\nends\n";
const DETECT: &str = ".copro f flow\n.infosize 4\n.ports 2\nsegment .push\n pop\n push 0\n iload.32\n copro.in f, 6\n copro.invoke f, 2\n push 0\n copro.in f, 7\n push 1\n copro.in f, 8\n copro.invoke f, 7\n copro.out f, 0\n jnz seen\n copro.invoke f, 3\n ret 0\nseen:\n ret 1\nends\n";
const FLOWS: &str = r#"
[[netpe]]
name = "detect"
program = "detect.nil"
copro = { f = { instance = "decode.fl" } }
[[netpe]]
name = "decode"
program = "decode.nil"
copro = { fl = { capacity = 1024, bits = 32 } }
[[source]]
to = "decode"
[[connect]]
from = "decode.0"
to = "detect"
[[sink]]
from = "detect.0"
port = 0
[[sink]]
from = "detect.1"
port = 1
"#;

/// Every packet that left: (port, sequence number).
type Exits = Arc<Mutex<Vec<(u16, u64)>>>;

struct Record {
    port: u16,
    exits: Exits,
}

impl Sink for Record {
    fn name(&self) -> &str {
        "record"
    }

    fn write(&mut self, p: &OutPacket<'_>) -> Result<(), PortError> {
        self.exits.lock().unwrap().push((self.port, p.seq));
        Ok(())
    }

    fn flush(&mut self) -> Result<(), PortError> {
        Ok(())
    }
}

#[test]
fn workers_each_share_their_own_flow_table() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = setup(dir.path(), FLOWS, &[("decode.nil", DECODE), ("detect.nil", DETECT)]);
    // 40 TCP flows, 6 packets each (both directions), interleaved.
    let (flows, per_flow) = (40u32, 6u32);
    let mut packets = Vec::new();
    for round in 0..per_flow {
        for f in 0..flows {
            let (a, b) = (0x0a00_0000 + f, 0x0a01_0000 + f);
            let (sport, dport) = (1000 + f as u16, 80);
            let frame = if round % 2 == 0 {
                netvm_traffic::apps::tcp_frame(a, b, sport, dport, b"x")
            } else {
                netvm_traffic::apps::tcp_frame(b, a, dport, sport, b"y")
            };
            let mut p = Packet::from_bytes(frame);
            p.ts = Timestamp { sec: 1_700_000_000, nsec: (round * flows + f) * 1000 };
            packets.push(p);
        }
    }
    let input = dir.path().join("in.pcap");
    netvm_traffic::write_pcap(std::fs::File::create(&input).unwrap(), &packets).unwrap();
    for (name, engine) in engines() {
        let mut want: Option<Vec<(u16, u64)>> = None;
        for workers in [1, 2, 3] {
            let app = Application::build(&manifest, engine.as_ref(), &netvm_copro::registry(), None).unwrap();
            assert_eq!(app.distribution(), Distribution::Flow, "{name}");
            let cfg = DriverConfig { workers, batch: 8, queue_depth: 2, ..DriverConfig::default() };
            let mut driver = Driver::new(app, cfg);
            let s = CaptureSource::open(&input, 0, driver.block_pool()).unwrap();
            driver.add_source(Box::new(s));
            let exits: Exits = Arc::default();
            for port in 0..2 {
                driver.add_sink(port, Box::new(Record { port, exits: Arc::clone(&exits) }));
            }
            let report = driver.run().unwrap();
            assert!(report.input_errors.is_empty(), "{:?}", report.input_errors);
            let exits = std::mem::take(&mut *exits.lock().unwrap());
            let firsts = exits.iter().filter(|(p, _)| *p == 0).count() as u32;
            assert_eq!(firsts, flows, "{name}, {workers} workers: first packets of flows");
            assert_eq!(exits.len() as u32, flows * per_flow, "{name}, {workers} workers");
            match &want {
                None => want = Some(exits),
                Some(w) => assert_eq!(&exits, w, "{name}, {workers} workers: as one worker"),
            }
            // The flow table, absorbed once: every flow once, every packet once.
            let app = driver.app();
            let stats = app.copro_stats();
            assert_eq!(stats.len(), 1, "{name}, {workers} workers: {stats:?}");
            let (netpe, inst, values) = &stats[0];
            assert_eq!((netpe.as_str(), inst.as_str()), ("decode", "fl"));
            let get = |k: &str| values.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
            assert_eq!(get("created"), Some(u64::from(flows)), "{name}, {workers} workers: {values:?}");
            assert_eq!(get("packets"), Some(u64::from(flows * per_flow)), "{name}, {workers} workers: {values:?}");
            assert_eq!(app.dump_table("decode.fl").unwrap().lines().count() as u32, flows, "{name}, {workers} workers");
        }
    }
}

#[test]
fn manifest_mistakes_are_clear() {
    let cases: [(&str, &str); 8] = [
        (r#"{ mine = { instance = "z.c" } }"#, "no NetPE `z`"),
        (r#"{ mine = { instance = "a.q" } }"#, "NetPE `a` declares no coprocessor `q` (it declares c, m)"),
        (r#"{ mine = { instance = "a.m" } }"#, "`a.m` is a `meter` coprocessor, and this NetPE declares `mine` as `counters`"),
        (r#"{ mine = { instance = "a.c", size = 4 } }"#, "`size` cannot be set here"),
        (r#"{ mine = { instance = 3 } }"#, "`instance` must be a string"),
        (r#"{ mine = { instance = "ac" } }"#, "expected NETPE.NAME"),
        (r#"{ mine = { instance = "b.mine" } }"#, "an instance cannot be its own"),
        (
            r#"{ mine = { instance = "b.other" }, other = { instance = "a.c" } }"#,
            "`b.other` itself shares the instance `a.c`: name that one",
        ),
    ];
    let a = ".copro c counters\n.copro m meter\nsegment .push\n pop\n ret 0\nends\n";
    let b = ".copro mine counters\n.copro other counters\nsegment .push\n pop\n ret 0\nends\n";
    for (copro, want) in cases {
        let manifest = format!(
            "[[netpe]]\nname = \"a\"\nprogram = \"a.nil\"\n[[netpe]]\nname = \"b\"\nprogram = \"b.nil\"\ncopro = {}\n[[source]]\nto = \"a\"\n",
            copro
        );
        let dir = tempfile::tempdir().unwrap();
        let m = setup(dir.path(), &manifest, &[("a.nil", a), ("b.nil", b)]);
        let e = Application::build(&m, &InterpEngine, &netvm_copro::registry(), None).unwrap_err();
        assert!(matches!(e, netvm_runtime::RuntimeError::Manifest(_)), "{copro}: {e:?}");
        assert!(e.to_string().contains(want), "{copro}: {e}");
        assert!(e.to_string().contains("NetPE `b`, coprocessor `mine`"), "{copro}: {e}");
    }
    // An alias of a NetPE declared later, and two aliases of one instance, are fine.
    let manifest = "[[netpe]]\nname = \"b\"\nprogram = \"b.nil\"\ncopro = { mine = { instance = \"a.c\" }, other = { instance = \"a.c\" } }\n[[netpe]]\nname = \"a\"\nprogram = \"a.nil\"\n[[source]]\nto = \"a\"\n";
    let dir = tempfile::tempdir().unwrap();
    let m = setup(dir.path(), manifest, &[("a.nil", a), ("b.nil", b)]);
    let app = Application::build(&m, &InterpEngine, &netvm_copro::registry(), None).unwrap();
    assert_eq!(app.copro_stats().iter().map(|(p, n, _)| format!("{p}.{n}")).collect::<Vec<_>>(), ["a.c", "a.m"]);
}
