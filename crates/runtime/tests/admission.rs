//! Admission control (`netvm_runtime::admission`): the headroom of the
//! paper's Eq. 1-3, the bound through the graph, refusals that name the
//! resource and the numbers, and changes of a running application refused
//! the same way.

use std::path::Path;
use std::sync::Arc;

use netvm_runtime::admission::{admit, Calibration, Headroom};
use netvm_runtime::{Application, Change, Driver, DriverConfig, JitEngine, Manifest, ProgramRef, Rebuild};

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

/// `a` -> (`b` and `c`, a fan-out) -> out; every handler a few instructions.
fn manifest(dir: &Path, admission: &str) -> Manifest {
    write(dir, "fwd.nil", ".ports 1\nsegment .push\n    pop\n    ret 0\nends\n");
    write(
        dir,
        "work.nil",
        ".ports 1\n.datasize 1000\nsegment .push\n    pop\n    push 0\n    push 64\n    crc32 pkt\n    pop\n    ret 0\nends\n",
    );
    let text = format!(
        "[[netpe]]\nname = \"a\"\nprogram = \"fwd.nil\"\n[[netpe]]\nname = \"b\"\nprogram = \"work.nil\"\n[[netpe]]\nname = \"c\"\nprogram = \"work.nil\"\n\
         [[source]]\nto = \"a\"\n[[connect]]\nfrom = \"a.0\"\nto = \"b\"\n[[connect]]\nfrom = \"a.0\"\nto = \"c\"\n[[sink]]\nfrom = \"b.0\"\nport = 1\n{admission}"
    );
    write(dir, "app.toml", &text);
    Manifest::load(&dir.join("app.toml")).unwrap()
}

fn unit() -> Calibration {
    // One nanosecond per instruction, a byte of region a tenth; nothing else.
    let mut c = Calibration::builtin("jit");
    c.class_ns.values_mut().for_each(|v| *v = 1.0);
    c.region_byte_ns = 0.1;
    c.copro_op_ns = 0.0;
    c.packet_ns = 10.0;
    c.netpe_ns = 2.0;
    c
}

#[test]
fn the_headroom_is_eq_1_to_3() {
    let h: Headroom = toml::from_str("line_rate = \"10G\"").unwrap();
    // 84 bytes on the wire every 67.2 ns; 0.96 of it per worker, W times.
    assert!((h.arrival_ns() - 67.2).abs() < 1e-9);
    assert!((h.per_packet_ns(1) - 64.512).abs() < 1e-9);
    assert!((h.per_packet_ns(4) - 4.0 * 64.512).abs() < 1e-9);
    let h: Headroom = toml::from_str("line_rate = 1000000000\nmin_frame = 1500\nutilization = 0.5\nmemory = \"64M\"").unwrap();
    assert!((h.per_packet_ns(1) - 0.5 * 1520.0 * 8.0).abs() < 1e-9);
    assert_eq!(h.memory, Some(64_000_000));
    assert!(toml::from_str::<Headroom>("line_rate = \"fast\"").is_err());
    assert!(toml::from_str::<Headroom>("line_rate = \"10G\"\nburst = 3").is_err());
}

#[test]
fn the_bound_follows_the_costliest_way_and_counts_every_copy() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), "");
    let plan = Application::plan(&m, &netvm_copro::registry(), None).unwrap();
    let h: Headroom = toml::from_str("line_rate = \"1G\"").unwrap();
    let a = admit(&plan, &h, &unit(), 1).unwrap();
    // a: 2 insns; b and c (both run: the port fans out): 6 insns + 64 bytes each; 2 ns per NetPE;
    // the engine's 10 ns per packet already counts one NetPE.
    let own = 2.0 + 2.0 * (6.0 + 6.4);
    assert!((a.packet_ns - (10.0 - 2.0 + own + 3.0 * 2.0)).abs() < 1e-9, "{a:?}");
    assert_eq!(a.path, vec!["a", "b", "c"]);
    assert!(a.load() < 1.0);
}

#[test]
fn refusals_name_the_resource_and_the_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), "");
    let plan = Application::plan(&m, &netvm_copro::registry(), None).unwrap();
    let fast: Headroom = toml::from_str("line_rate = \"100G\"").unwrap();
    let e = admit(&plan, &fast, &unit(), 1).unwrap_err();
    assert!(e.contains("processing time per packet") && e.contains("100 Gbit/s") && e.contains("a -> b -> c"), "{e}");
    // More workers, more time per packet: admitted.
    assert!(admit(&plan, &fast, &unit(), 16).is_ok());
    let small: Headroom = toml::from_str("line_rate = \"1G\"\nmemory = 3000").unwrap();
    let e = admit(&plan, &small, &unit(), 2).unwrap_err();
    assert!(e.contains("memory") && e.contains("4000 bytes") && e.contains("3000"), "{e}");
}

#[test]
fn a_change_that_does_not_fit_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), "[admission]\nline_rate = \"1G\"\n");
    let engine: Arc<dyn netvm_runtime::Engine> = Arc::new(JitEngine::default());
    let registry = netvm_copro::registry();
    let app = Application::build(&m, engine.as_ref(), &registry, None).unwrap();
    let d = Driver::new(app, DriverConfig::default());
    d.allow_changes(Rebuild { manifest: m, engine, registry, budget: None, calibration: Some(unit()) });
    let c = d.control();
    // A loop: bounded only by the budget (100,000), far beyond a packet's 645 ns.
    write(dir.path(), "loop.nil", ".ports 1\nsegment .push\n    pop\ntop:\n    push 1\n    jnz top\n    ret 0\nends\n");
    let e = c.apply(Change::Replace { name: "b".into(), program: ProgramRef::File(dir.path().join("loop.nil")) }).unwrap_err();
    assert!(e.to_string().contains("admission refused") && e.to_string().contains("loop"), "{e}");
    assert_eq!(c.list().unwrap().epoch, 0);
    // One that fits goes in.
    c.apply(Change::Replace { name: "b".into(), program: ProgramRef::File(dir.path().join("fwd.nil")) }).unwrap();
}

#[test]
fn calibration_measures_every_figure() {
    let c = Calibration::measure(&netvm_runtime::InterpEngine, "interp", 1).unwrap();
    assert_eq!(c.class_ns.len(), 11);
    assert!(c.class_ns.values().all(|v| *v >= 0.05), "{c:?}");
    assert!(c.packet_ns > 0.0 && c.region_byte_ns >= 0.0 && c.copro_op_ns >= 0.0, "{c:?}");
    // It reads back as written.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("cal.json");
    std::fs::write(&p, serde_json::to_string(&c).unwrap()).unwrap();
    assert_eq!(Calibration::load(&p).unwrap(), c);
    std::fs::write(&p, "{}").unwrap();
    assert!(Calibration::load(&p).is_err());
}

#[test]
fn tables_count_at_their_capacity_once_or_per_worker() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "fib.nil", ".copro fib table\n.copro routes lpm\n.ports 1\nsegment .push\n    pop\n    ret 0\nends\n");
    let with = |capacity: u32, workers: &str| {
        let text = format!(
            "[[netpe]]\nname = \"f\"\nprogram = \"fib.nil\"\ncopro.fib = {{ key_size = 6, value_size = 4, capacity = {capacity}{workers} }}\n\
             [[source]]\nto = \"f\"\n[[sink]]\nfrom = \"f.0\"\nport = 1\n"
        );
        write(d, "app.toml", &text);
        let m = Manifest::load(&d.join("app.toml")).unwrap();
        Application::plan(&m, &netvm_copro::registry(), None).unwrap()
    };
    let h: Headroom = toml::from_str("line_rate = \"1G\"").unwrap();
    let small = admit(&with(1024, ""), &h, &unit(), 1).unwrap();
    let large = admit(&with(1 << 20, ""), &h, &unit(), 1).unwrap();
    // The IPv4 lpm's first level alone is 2^24 entries of 4 bytes; the table grows with its capacity.
    assert!(small.tables >= 64 << 20, "{small:?}");
    assert!(large.tables - small.tables >= 10 * ((1 << 20) - 1024), "{small:?} {large:?}");
    // A table sharded per worker counts once per worker; lpm is shared by the workers.
    let one = admit(&with(1 << 20, ", workers = \"sharded\""), &h, &unit(), 1).unwrap();
    let two = admit(&with(1 << 20, ", workers = \"sharded\""), &h, &unit(), 2).unwrap();
    assert!(two.tables - one.tables >= 10 << 20 && two.tables - one.tables < one.tables, "{one:?} {two:?}");
    let limited: Headroom = toml::from_str("line_rate = \"1G\"\nmemory = \"100M\"").unwrap();
    let e = admit(&with(1 << 20, ""), &limited, &unit(), 1).unwrap_err();
    assert!(e.contains("of coprocessor tables") && e.contains("100000000 bytes allowed"), "{e}");
}
