//! Application-level behaviour: graph checks, fan-out semantics, counters.

use std::path::Path;

use netvm_runtime::{Application, InterpEngine, Manifest, RuntimeError, Verdict};
use netvm_vm::Packet;

/// Writes `files` into a fresh directory and returns it with the manifest loaded.
fn setup(manifest: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, Result<Manifest, RuntimeError>) {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let path = dir.path().join("app.toml");
    std::fs::write(&path, manifest).unwrap();
    let m = Manifest::load(&path);
    (dir, m)
}

fn build(manifest: &str, files: &[(&str, &str)]) -> Result<Application, RuntimeError> {
    let (_dir, m) = setup(manifest, files);
    Application::build(&m?, &InterpEngine, &netvm_copro::registry(), None)
}

/// Forwards to port 0 after storing `byte` at packet offset 0.
fn marker(byte: u8) -> String {
    format!("segment .push\n pop\n push 0\n push {byte}\n ustore.8\n ret 0\nends\n")
}

const PASS: &str = "segment .push\n pop\n ret 0\nends\n";

#[test]
fn cycle_is_rejected_with_its_path() {
    let m = r#"
[[netpe]]
name = "a"
program = "p.nil"
[[netpe]]
name = "b"
program = "p.nil"
[[netpe]]
name = "c"
program = "p.nil"
[[source]]
to = "a"
[[connect]]
from = "a.0"
to = "b"
[[connect]]
from = "b.0"
to = "c"
[[connect]]
from = "c.0"
to = "a"
"#;
    let e = build(m, &[("p.nil", PASS)]).unwrap_err();
    match &e {
        RuntimeError::Cycle(path) => assert_eq!(path, "a -> b -> c -> a"),
        other => panic!("expected a cycle error, got {other}"),
    }
    // A self-loop too.
    let m2 = "[[netpe]]\nname = \"a\"\nprogram = \"p.nil\"\n[[source]]\nto = \"a\"\n[[connect]]\nfrom = \"a.0\"\nto = \"a\"\n";
    assert!(matches!(build(m2, &[("p.nil", PASS)]), Err(RuntimeError::Cycle(_))));
}

#[test]
fn fan_out_duplicates_and_runs_copies_in_order() {
    // a.0 feeds b, c and sink 9; b and c modify their own copy.
    let m = r#"
[[netpe]]
name = "a"
program = "pass.nil"
[[netpe]]
name = "b"
program = "b.nil"
[[netpe]]
name = "c"
program = "c.nil"
[[source]]
to = "a"
[[connect]]
from = "a.0"
to = "b"
[[connect]]
from = "a.0"
to = "c"
[[sink]]
from = "a.0"
port = 9
[[sink]]
from = "b.0"
port = 1
[[sink]]
from = "c.0"
port = 2
"#;
    let mut app = build(m, &[("pass.nil", PASS), ("b.nil", &marker(0xbb)), ("c.nil", &marker(0xcc))]).unwrap();
    let mut batch = vec![Packet::from_bytes(vec![0, 1, 2]), Packet::from_bytes(vec![7])];
    let mut verdicts = Vec::new();
    let mut seen = Vec::new();
    app.process_batch(&mut batch, &mut verdicts, &mut |port, p| seen.push((port, p.data.clone())));
    assert_eq!(
        seen,
        vec![(1, vec![0xbb, 1, 2]), (2, vec![0xcc, 1, 2]), (9, vec![0, 1, 2]), (1, vec![0xbb]), (2, vec![0xcc]), (9, vec![7]),]
    );
    assert_eq!(verdicts, vec![Verdict::Fanout { outputs: 3 }; 2]);
    let s = app.stats();
    assert_eq!(s.packets, 2);
    assert_eq!(s.ports.get(&1), Some(&2));
    assert_eq!(s.netpes[0].flow.packets_out, vec![2]);
}

#[test]
fn verdicts_drops_faults_and_unconnected_ports() {
    let prog = "segment .push\n pop\n push 0\n upload.8\n switch 0: a, 1: b, default: c\na: ret 0\nb: ret 1\nc: drop\nends\n";
    let m = "[[netpe]]\nname = \"x\"\nprogram = \"x.nil\"\n[[source]]\nto = \"x\"\n[[sink]]\nfrom = \"x.0\"\nport = 4\n";
    let mut app = build(m, &[("x.nil", prog)]).unwrap();
    let mut batch: Vec<Packet> = [vec![0u8], vec![1], vec![2], vec![]].into_iter().map(Packet::from_bytes).collect();
    batch.push(Packet { in_port: 3, ..Packet::from_bytes(vec![0]) });
    let mut verdicts = Vec::new();
    app.process_batch(&mut batch, &mut verdicts, &mut |_, _| {});
    assert_eq!(
        verdicts,
        vec![Verdict::Output(4), Verdict::Drop, Verdict::Drop, Verdict::Fault(netvm_vm::FaultKind::Bounds), Verdict::Drop]
    );
    let s = app.stats();
    assert_eq!((s.packets, s.dropped, s.no_source, s.total_faults()), (5, 3, 1, 1));
    assert_eq!(s.netpes[0].flow.unconnected, 1);
    assert_eq!(s.netpes[0].flow.dropped, 1);
}

#[test]
fn manifest_errors_are_clear() {
    let cases: &[(&str, &str)] = &[
        ("[[netpe]]\nname = \"x\"\nprogram = \"p.nil\"\n[[source]]\nto = \"y\"\n", "unknown NetPE `y`"),
        (
            "[[netpe]]\nname = \"x\"\nprogram = \"p.nil\"\n[[source]]\nto = \"x\"\n[[sink]]\nfrom = \"x.3\"\nport = 1\n",
            "has 1 output port(s)",
        ),
        ("[[netpe]]\nname = \"x\"\nprogram = \"p.nil\"\n[[netpe]]\nname = \"x\"\nprogram = \"p.nil\"\n", "defined twice"),
        ("[[netpe]]\nname = \"x\"\nprogram = \"p.nil\"\n", "no source"),
        ("[[netpe]]\nname = \"x\"\nprogram = \"missing.nil\"\n[[source]]\nto = \"x\"\n", "missing.nil"),
        ("[[netpe]]\nname = \"x\"\nprogram = \"p.nil\"\nbogus = 1\n", "unknown field"),
        ("[[netpe]]\nname = \"x\"\nprogram = \"p.nil\"\n[[source]]\nto = \"x\"\n[[sink]]\nfrom = \"x\"\nport = 1\n", "NETPE.PORT"),
        ("distribution = \"hash\"\n[[netpe]]\nname = \"x\"\nprogram = \"p.nil\"\n[[source]]\nto = \"x\"\n", "distribution `hash`"),
    ];
    for (manifest, want) in cases {
        let e = match build(manifest, &[("p.nil", PASS)]) {
            Ok(_) => panic!("accepted: {manifest}"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(want), "{e:?} does not mention {want:?}");
    }
}

#[test]
fn verification_failure_names_file_and_line() {
    let bad = "segment .push\n pop\n add\n ret 0\nends\n";
    let m = "[[netpe]]\nname = \"x\"\nprogram = \"bad.nil\"\n[[source]]\nto = \"x\"\n";
    let e = build(m, &[("bad.nil", bad)]).unwrap_err();
    assert!(e.is_verification());
    let text = e.to_string();
    assert!(text.contains("bad.nil") && text.contains("line 3") && text.contains("stack-underflow"), "{text}");
}

#[test]
fn init_runs_once_and_init_faults_stop_the_start() {
    let counting = ".datasize 4\nsegment .init\n push 0\n push 100\n dstore.32\n exit\nends\nsegment .push\n pop\n push 0\n push 0\n dload.32\n push 1\n add\n dstore.32\n push 0\n dload.32\n push 102\n jcmp.eq two\n ret 0\ntwo: ret 1\nends\n";
    let m = "[[netpe]]\nname = \"x\"\nprogram = \"c.nil\"\n[[source]]\nto = \"x\"\n[[sink]]\nfrom = \"x.1\"\nport = 1\n";
    let mut app = build(m, &[("c.nil", counting)]).unwrap();
    let mut batch = vec![Packet::default(), Packet::default(), Packet::default()];
    let mut v = Vec::new();
    app.process_batch(&mut batch, &mut v, &mut |_, _| {});
    assert_eq!(v, vec![Verdict::Drop, Verdict::Output(1), Verdict::Drop]);
    let faulty =
        ".datasize 4\nsegment .init\n push 0\n dload.32\n push 9\n add\n push 1\n dstore.8\n exit\nends\nsegment .push\n drop\nends\n";
    let e = build("[[netpe]]\nname = \"x\"\nprogram = \"f.nil\"\n[[source]]\nto = \"x\"\n", &[("f.nil", faulty)]).unwrap_err();
    assert!(e.to_string().contains(".init failed: fault bounds"), "{e}");
}

#[test]
fn coprocessor_configuration() {
    let prog = ".copro k counters\nsegment .push\n pop\n push 5\n copro.in k, 0\n copro.invoke k, 0\n ret 0\nends\n";
    let ok = "[[netpe]]\nname = \"x\"\nprogram = \"p.nil\"\ncopro = { k = { size = 8 } }\n[[source]]\nto = \"x\"\n";
    let mut app = build(ok, &[("p.nil", prog)]).unwrap();
    let mut batch = vec![Packet::default()];
    let mut v = Vec::new();
    app.process_batch(&mut batch, &mut v, &mut |_, _| {});
    assert_eq!(v, vec![Verdict::Drop]); // port 0 is unconnected
    let small = ok.replace("size = 8", "size = 2");
    let mut app = build(&small, &[("p.nil", prog)]).unwrap();
    app.process_batch(&mut batch, &mut v, &mut |_, _| {});
    assert_eq!(v, vec![Verdict::Fault(netvm_vm::FaultKind::Copro)]);
    let unknown = ok.replace("k = {", "q = {");
    assert!(build(&unknown, &[("p.nil", prog)]).unwrap_err().to_string().contains("does not declare"));
    let _ = Path::new(".");
}

#[test]
fn info_memory_is_zeroed_for_each_packet_and_follows_it_along_its_path() {
    // `a` sees the packet's info memory zeroed, writes 7 into it and
    // forwards on 0 (or on 1 if it was not zeroed); `b` forwards on 0 only
    // if it sees the 7. A graph without fan-out: the walk's one-path loop.
    let a = ".infosize 4\n.ports 2\nsegment .push\n pop\n push 0\n iload.32\n push 0\n push 7\n istore.32\n jnz seen\n ret 0\nseen:\n ret 1\nends\n";
    let b = ".infosize 4\n.ports 2\nsegment .push\n pop\n push 0\n iload.32\n push 7\n jcmp.eq carried\n ret 1\ncarried:\n ret 0\nends\n";
    let m = "[[netpe]]\nname = \"a\"\nprogram = \"a.nil\"\n[[netpe]]\nname = \"b\"\nprogram = \"b.nil\"\n[[source]]\nto = \"a\"\n\
             [[connect]]\nfrom = \"a.0\"\nto = \"b\"\n[[sink]]\nfrom = \"a.1\"\nport = 9\n[[sink]]\nfrom = \"b.0\"\nport = 1\n[[sink]]\nfrom = \"b.1\"\nport = 2\n";
    let mut app = build(m, &[("a.nil", a), ("b.nil", b)]).unwrap();
    assert!(!app.has_fanout());
    let mut v = Vec::new();
    for _ in 0..2 {
        let mut batch = vec![Packet::from_bytes(vec![1]), Packet::default(), Packet::from_bytes(vec![2, 3])];
        app.process_batch(&mut batch, &mut v, &mut |_, _| {});
        assert_eq!(v, vec![Verdict::Output(1); 3]);
    }
    let s = app.stats();
    assert_eq!((s.packets, s.ports.get(&1), s.netpes[1].flow.packets_in.clone()), (6, Some(&6), vec![6]));
}
