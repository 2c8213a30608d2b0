//! The `netvm` binary's fixed interfaces: subcommands, flags, JSON keys,
//! output files and exit codes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use netvm_io::{read_capture, PcapWriter};
use netvm_vm::{Packet, Timestamp};

fn netvm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_netvm")).args(args).output().expect("run netvm")
}

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn path(rel: &str) -> String {
    root().join(rel).display().to_string()
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success() || o.status.code() == Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
}

fn write_pcap(p: &Path, pkts: &[Packet]) {
    let mut w = PcapWriter::create(p).unwrap();
    for x in pkts {
        w.write(x).unwrap();
    }
    w.finish().unwrap();
}

fn frame(ethertype: u16, len: usize, sec: u64) -> Packet {
    let mut d = vec![0u8; len.max(14)];
    d[12..14].copy_from_slice(&ethertype.to_be_bytes());
    d.truncate(len);
    Packet { ts: Timestamp { sec, nsec: 0 }, ..Packet::from_bytes(d) }
}

/// Counts Ethernet frames whose ethertype is 0x0800, directly.
fn count_ipv4(pkts: &[Packet]) -> u64 {
    pkts.iter().filter(|p| p.data.len() >= 14 && p.data[12..14] == [0x08, 0x00]).count() as u64
}

#[test]
fn fig2_counts_ipv4_frames_of_the_example_trace() {
    let trace = path("examples/traces/mixed.pcap");
    let (pkts, err) = read_capture(Path::new(&trace), 0);
    assert!(err.is_none());
    let o = netvm(&["run", "--program", &path("examples/fig2-filter/filter.nil"), "-r", &trace, "--stats", "json"]);
    let s = json(&o);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(s["packets"], pkts.len() as u64);
    assert_eq!(s["ports"]["1"], count_ipv4(&pkts));
    for key in ["packets", "ports", "dropped", "faults", "ns_per_packet"] {
        assert!(s.get(key).is_some(), "missing key {key}");
    }
    assert!(s["ns_per_packet"].as_f64().unwrap() > 0.0);
    assert_eq!(s["faults"]["bounds"], pkts.iter().filter(|p| p.data.len() < 14).count() as u64);
}

#[test]
fn asm_disasm_verify_roundtrip_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let nvm = dir.path().join("f.nvm");
    let nvm_s = nvm.display().to_string();
    let src = path("examples/classifier/ipv4.nil");
    assert_eq!(netvm(&["asm", &src, "-o", &nvm_s]).status.code(), Some(0));
    let o = netvm(&["disasm", &nvm_s]);
    assert_eq!(o.status.code(), Some(0));
    let listing = dir.path().join("again.nil");
    std::fs::write(&listing, &o.stdout).unwrap();
    let nvm2 = dir.path().join("g.nvm");
    assert_eq!(netvm(&["asm", &listing.display().to_string(), "-o", &nvm2.display().to_string()]).status.code(), Some(0));
    assert_eq!(std::fs::read(&nvm).unwrap(), std::fs::read(&nvm2).unwrap());
    let v = netvm(&["verify", &nvm_s]);
    assert_eq!(v.status.code(), Some(0), "{}", String::from_utf8_lossy(&v.stderr));

    // Verification failure: exit 3 with the rule, offset and line.
    let bad = dir.path().join("bad.nil");
    std::fs::write(&bad, "segment .push\n  pop\n  pop\n  ret 0\nends\n").unwrap();
    let o = netvm(&["verify", &bad.display().to_string()]);
    assert_eq!(o.status.code(), Some(3));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("stack-underflow") && err.contains("line 3"), "{err}");
    let o = netvm(&["run", "--program", &bad.display().to_string(), "-r", &path("examples/traces/mixed.pcap")]);
    assert_eq!(o.status.code(), Some(3));

    // Syntax error: file:line:col, exit 1.
    std::fs::write(&bad, "segment .push\n  pusj 1\nends\n").unwrap();
    let o = netvm(&["verify", &bad.display().to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("bad.nil:2:3: error: unknown instruction `pusj`"));

    // Usage errors: exit 2.
    assert_eq!(netvm(&["run", "-r", "x.pcap"]).status.code(), Some(2));
    assert_eq!(netvm(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(netvm(&["run", "--program", &src, "-r", "x.pcap", "--repeat", "0"]).status.code(), Some(2));
    // Missing input: exit 1.
    assert_eq!(netvm(&["verify", "/nonexistent.nil"]).status.code(), Some(1));
    // Every subcommand has --help.
    for sub in ["asm", "disasm", "verify", "run"] {
        let o = netvm(&[sub, "--help"]);
        assert_eq!(o.status.code(), Some(0));
        assert!(!o.stdout.is_empty());
    }
}

#[test]
fn outputs_per_port_repeat_and_budget() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pcap");
    let pkts = vec![frame(0x0800, 60, 1), frame(0x0806, 42, 2), frame(0x0800, 64, 3), frame(0x86dd, 70, 4), frame(0x0800, 10, 5)];
    write_pcap(&trace, &pkts);
    let t = trace.display().to_string();
    let pattern = dir.path().join("out-{port}.pcap").display().to_string();
    let o = netvm(&[
        "run",
        "--program",
        &path("examples/fig2-filter/filter.nil"),
        "-r",
        &t,
        "-w",
        &pattern,
        "--stats",
        "json",
        "--repeat",
        "3",
    ]);
    let s = json(&o);
    assert_eq!(s["packets"], 15);
    assert_eq!(s["ports"]["1"], 6);
    assert_eq!(s["faults"]["bounds"], 3);
    let (one, e1) = read_capture(&dir.path().join("out-1.pcap"), 0);
    let (zero, e0) = read_capture(&dir.path().join("out-0.pcap"), 0);
    assert!(e1.is_none() && e0.is_none());
    // Written once, with the input's timestamps and lengths.
    assert_eq!(one.iter().map(|p| (p.ts.sec, p.data.len())).collect::<Vec<_>>(), vec![(1, 60), (3, 64)]);
    assert_eq!(zero.len(), 2);

    // Without {port}, -w writes output port 1.
    let single = dir.path().join("one.pcap");
    let o = netvm(&["run", "--program", &path("examples/fig2-filter/filter.nil"), "-r", &t, "-w", &single.display().to_string()]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(read_capture(&single, 0).0.len(), 2);

    // An infinite loop is stopped by the budget on every packet.
    let spin = dir.path().join("spin.nil");
    std::fs::write(&spin, "segment .push\ntop:\n  jump top\nends\n").unwrap();
    let o = netvm(&["run", "--program", &spin.display().to_string(), "-r", &t, "--budget", "1000", "--stats", "json"]);
    let s = json(&o);
    assert_eq!(s["faults"]["budget"], 5);
    assert_eq!(s["packets"], 5);
}

/// `--repeat` of a program that writes packet memory: every repetition
/// runs on the capture's bytes, not on what the previous one wrote (the
/// engine gives each repeated packet a private copy), whether the packets
/// fit a standard buffer or need a jumbo one, and over many batches.
#[test]
fn repeat_runs_a_writing_program_on_the_original_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pcap");
    let pkts: Vec<Packet> = (0..700).map(|i| frame(0x0800, if i % 97 == 5 { 3000 } else { 60 + i % 200 }, i as u64)).collect();
    write_pcap(&trace, &pkts);
    // Byte 0 is 0 in every frame; the program sets it to 1 and forwards on
    // port 1, and forwards on port 0 a frame that already has it set.
    let prog = dir.path().join("mark.nil");
    std::fs::write(
        &prog,
        ".ports 2\nsegment .push\n  pop\n  push 0\n  upload.8\n  jnz seen\n  push 0\n  push 1\n  ustore.8\n  ret 1\nseen:\n  ret 0\nends\n",
    )
    .unwrap();
    for engine in ["jit", "interp"] {
        let o = netvm(&[
            "run",
            "--program",
            &prog.display().to_string(),
            "-r",
            &trace.display().to_string(),
            "--repeat",
            "4",
            "--engine",
            engine,
            "--stats",
            "json",
        ]);
        let s = json(&o);
        assert_eq!(s["packets"], 2800, "{engine}");
        assert_eq!(s["ports"]["1"], 2800, "{engine}: every repetition saw the original bytes");
        assert_eq!(s["ports"]["0"].as_u64().unwrap_or(0), 0, "{engine}");
    }
}

#[test]
fn several_inputs_merge_by_time_and_port() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.pcap");
    let b = dir.path().join("b.pcap");
    write_pcap(&a, &[frame(0x0800, 20, 1), frame(0x0800, 21, 3), frame(0x0800, 22, 5)]);
    write_pcap(&b, &[frame(0x0800, 30, 2), frame(0x0800, 31, 3), frame(0x0800, 32, 6)]);
    // The program forwards each packet on the port it came in on.
    let prog = dir.path().join("echo.nil");
    std::fs::write(&prog, ".ports 3\nsegment .push\n  ret.pop\nends\n").unwrap();
    let out = dir.path().join("out-{port}.pcap").display().to_string();
    let all = dir.path().join("all.pcap");
    let o = netvm(&[
        "run",
        "--program",
        &prog.display().to_string(),
        "-r",
        &format!("1={}", a.display()),
        "-r",
        &format!("2={}", b.display()),
        "-w",
        &out,
        "--stats",
        "json",
    ]);
    let s = json(&o);
    assert_eq!(s["ports"]["1"], 3);
    assert_eq!(s["ports"]["2"], 3);
    let _ = all;
    let lens = |p: &Path| read_capture(p, 0).0.iter().map(|x| x.data.len()).collect::<Vec<_>>();
    assert_eq!(lens(&dir.path().join("out-1.pcap")), vec![20, 21, 22]);
    assert_eq!(lens(&dir.path().join("out-2.pcap")), vec![30, 31, 32]);
    // A port with no source in an application is a usage error.
    let o = netvm(&["run", &path("examples/classifier/app.toml"), "-r", &format!("7={}", a.display())]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn corrupt_capture_processes_the_packets_before_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pcap");
    write_pcap(&trace, &[frame(0x0800, 60, 1), frame(0x0800, 60, 2), frame(0x0800, 60, 3)]);
    let mut bytes = std::fs::read(&trace).unwrap();
    let cut = bytes.len() - 10;
    bytes.truncate(cut);
    std::fs::write(&trace, &bytes).unwrap();
    let o = netvm(&["run", "--program", &path("examples/fig2-filter/filter.nil"), "-r", &trace.display().to_string(), "--stats", "json"]);
    assert_eq!(o.status.code(), Some(1));
    let s = json(&o);
    assert_eq!(s["packets"], 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("at byte"), "{err}");
    // Unsupported link type: a clear error, exit 1.
    let sll = root().join("../shared/corpus/tcpdump-tests/LINKTYPE_IPV4.pcap");
    if sll.exists() {
        let o = netvm(&["run", "--program", &path("examples/fig2-filter/filter.nil"), "-r", &sll.display().to_string()]);
        assert_eq!(o.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&o.stderr).contains("unsupported link type 228"));
    }
}

#[test]
fn classifier_application_runs() {
    let o = netvm(&["run", &path("examples/classifier/app.toml"), "-r", &path("examples/traces/mixed.pcap"), "--stats", "json"]);
    let s = json(&o);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(s["netpes"].as_array().unwrap().len(), 3);
    // Every packet is accounted for exactly once at the first NetPE.
    let c = &s["netpes"][0];
    let out: u64 = c["out"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).sum();
    let faults: u64 = c["faults"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(out + faults + c["dropped"].as_u64().unwrap(), s["packets"].as_u64().unwrap());
    // The fan-out sink 5 sees every packet that ipv4 sends to `ports`.
    assert_eq!(s["ports"]["5"], s["netpes"][2]["in"][0]);
}

#[test]
fn compile_emits_clif_and_asm_and_jit_is_the_default_engine() {
    let prog = path("examples/fig2-filter/filter.nil");
    let o = netvm(&["compile", "--program", &prog, "--emit", "clif"]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let clif = String::from_utf8_lossy(&o.stdout);
    // The ethertype test compares the native-order load with the byte-swapped
    // constant (0x0800 -> 8): no bswap is left (NetVM paper Fig. 8).
    assert!(clif.contains("function") && clif.contains("load.i16") && clif.contains("iconst.i16 8"), "{clif}");
    assert!(!clif.contains("bswap"), "{clif}");
    let o = netvm(&["compile", "--program", &prog, "--emit", "asm"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("bytes of machine code"));
    // An application compiles whole: one function (direct linking; its
    // NetPEs have no `.init`, so there is no `netvm_init`), or one function
    // per NetPE besides (table linking).
    let o = netvm(&["compile", &path("examples/classifier/app.toml")]);
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(text.matches("bytes of machine code").count(), 1, "{text}");
    assert!(text.contains("; netvm_run (") && !text.contains("; netvm_init ("), "{text}");
    let o = netvm(&["compile", &path("examples/classifier/app.toml"), "--link", "table", "--emit", "clif"]);
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(text.matches("bytes of machine code").count(), 4, "{text}");
    assert!(text.contains("; netvm_pe2 (") && text.contains("return_call_indirect"), "{text}");
    // The default engine is the JIT, and every engine counts the same.
    let trace = path("examples/traces/mixed.pcap");
    let app = path("examples/classifier/app.toml");
    let jit = json(&netvm(&["run", &app, "-r", &trace, "--stats", "json"]));
    assert_eq!(jit["engine"], "jit");
    for engine in ["interp", "baseline", "tiered"] {
        let other = json(&netvm(&["run", &app, "-r", &trace, "--stats", "json", "--engine", engine]));
        assert_eq!(other["engine"], engine);
        for key in ["packets", "ports", "dropped", "faults", "netpes", "copro"] {
            assert_eq!(jit[key], other[key], "{engine}: {key}");
        }
    }
}

#[test]
fn a_shared_coprocessor_instance_is_reported_and_dumped_once() {
    // tests/apps/shared_copro.toml: `b` and `c` name `a.c` (`instance = "a.c"`).
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    let pkts: Vec<Packet> = (0..50).map(|i| Packet { ts: Timestamp { sec: i, nsec: 0 }, ..Packet::from_bytes(vec![i as u8; 8]) }).collect();
    write_pcap(&input, &pkts);
    let app = path("tests/apps/shared_copro.toml");
    for workers in ["1", "3"] {
        let dump = dir.path().join(format!("dump-{workers}.txt"));
        let arg = format!("b.mine={}", dump.display());
        let o = netvm(&["run", &app, "-r", input.to_str().unwrap(), "--workers", workers, "--stats", "json", "--dump", &arg]);
        let s = json(&o);
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
        // Every packet counted once by `a` and once by `b`, on every worker, under the owner only.
        assert_eq!(s["copro"], serde_json::json!({ "a.c": { "0": 50, "1": 50 } }), "{workers} workers");
        assert_eq!(s["netpes"][0]["copro"], serde_json::json!({ "c": { "0": 50, "1": 50 } }));
        assert!(s["netpes"][1].get("copro").is_none(), "{}", s["netpes"][1]);
        // A dump through an alias's name is the owner's instance.
        assert_eq!(std::fs::read_to_string(&dump).unwrap().trim(), "0=50 1=50", "{workers} workers");
    }
}
