//! AOT objects in C programs: `netvm compile ... -o OUT.o --target TRIPLE`
//! linked with libnetvm_rt.a into the conformance suite's C host
//! (crates/filetests/c/host.c, driven by `netvm_filetests::host`),
//! which runs a trace and prints everything observable; it must agree with
//! the reference interpreter (verdicts, buffers that leave and their order,
//! packet bytes, data memory) and with the JIT's linked code (raw counters).
//!
//! - x86-64: the Fig. 2 filter over the example trace, the five §6.3.1
//!   filters, and generated applications (random DAGs with fan-out),
//!   `--link direct` and `--link table`, run natively;
//! - aarch64: the same built with aarch64-linux-gnu-gcc and run under
//!   qemu-aarch64 (Debian gcc-aarch64-linux-gnu, qemu-user; Rust target
//!   aarch64-unknown-linux-gnu; all installed by scripts/setup.sh, which
//!   says so when it cannot). Skipped with a message where they are
//!   missing, unless NETVM_REQUIRE_CROSS=1, where that fails;
//! - riscv64: the object is built and checked to be a RISC-V ELF.
//!
//! `NETVM_AOT_APPS=N` changes the number of generated applications.

use std::path::{Path, PathBuf};
use std::process::Command;

use netvm_filetests::host::{HostRun, Toolchain};
use netvm_filetests::AotTarget;
use netvm_fuzzgen::app::generate_app;
use netvm_fuzzgen::arbitrary::Unstructured;
use netvm_fuzzgen::{generate_packets, GenConfig};
use netvm_jit::link::{LinkMode, LinkedApp};
use netvm_jit::JitOptions;
use netvm_runtime::{Application, InterpEngine, Manifest, Verdict};
use netvm_traffic::SplitMix64;
use netvm_vm::graph::LinkedCode;
use netvm_vm::Packet;

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Compiles `app_args` (a manifest, or `--program` and a file) with
/// `netvm compile -o` for `tc`'s target and links it with the C host.
fn build(tc: &Toolchain, dir: &Path, app_args: &[&str], link: LinkMode) -> PathBuf {
    let obj = dir.join(format!("app-{}.o", link.name()));
    let out = Command::new(env!("CARGO_BIN_EXE_netvm"))
        .arg("compile")
        .args(app_args)
        .args(["--link", link.name(), "--target", tc.target.triple(), "-o"])
        .arg(&obj)
        .output()
        .expect("netvm compile");
    assert!(out.status.success(), "netvm compile -o: {}", String::from_utf8_lossy(&out.stderr));
    let exe_dir = dir.join(link.name());
    std::fs::create_dir_all(&exe_dir).unwrap();
    tc.build(&exe_dir, &std::fs::read(&obj).unwrap()).unwrap()
}

/// Runs the host on `packets` in batches of `batch` (the application's budget).
fn run_host(tc: &Toolchain, exe: &Path, packets: &[Packet], batch: u32) -> HostRun {
    let with_budget: Vec<(Packet, u64)> = packets.iter().map(|p| (p.clone(), u64::MAX)).collect();
    tc.run(exe, &with_budget, batch).unwrap()
}

/// Every buffer that left the application, in order, as the runtime reports them.
fn left(host: &HostRun) -> Vec<(u16, Vec<u8>)> {
    (0..host.packets.len()).flat_map(|i| host.outcome(i).1).collect()
}

/// The raw verdict of an interpreter verdict (`None` for a duplicated packet).
fn raw(v: &Verdict) -> Option<u32> {
    match v {
        Verdict::Output(p) => Some(u32::from(*p)),
        Verdict::Drop => Some(netvm_vm::graph::VERDICT_DROP),
        Verdict::Fault(k) => Some(k.code()),
        Verdict::Fanout { .. } => None,
    }
}

/// Runs `manifest` on the interpreter and the JIT (linked, `link`) and
/// checks `host` against them.
fn check(manifest: &Manifest, packets: &[Packet], batch: usize, link: LinkMode, host: &HostRun, what: &str) {
    let registry = netvm_copro::registry();
    let plan = Application::plan(manifest, &registry, None).unwrap();
    let mut states = plan.states;
    let mut jit = LinkedApp::compile(&plan.graph, &plan.verified, &plan.limits, link, JitOptions::default()).unwrap();
    let init = match jit.init(&mut states) {
        Ok(()) => 0,
        Err((n, netvm_vm::Outcome::Fault(k))) => k.init_failure(n),
        Err(e) => panic!("{what}: unexpected init outcome {e:?}"),
    };
    assert_eq!(host.init, init, "{what}: netvm_init");
    let mut interp = match Application::build(manifest, &InterpEngine, &registry, None) {
        Ok(a) => a,
        Err(e) => {
            assert_ne!(init, 0, "{what}: the interpreter's .init failed ({e}) but the object's did not");
            return;
        }
    };
    let (mut verdicts, mut left, mut after) = (Vec::new(), Vec::new(), Vec::new());
    let mut out = Vec::new();
    let mut jout = netvm_vm::graph::BatchOutput::default();
    let pool = netvm_vm::buffer::PacketPool::default();
    for chunk in packets.chunks(batch) {
        let mut b = chunk.to_vec();
        interp.process_batch(&mut b, &mut out, &mut |port, p| left.push((port, p.data.clone())));
        verdicts.extend_from_slice(&out);
        after.extend(b.into_iter().map(|p| p.data));
        let mut b = chunk.to_vec();
        let mut descs = netvm_vm::buffer::Batch::default();
        for p in b.iter_mut() {
            // SAFETY: `b` outlives `descs`, which is dropped at the end of the iteration.
            unsafe { descs.push_external(netvm_vm::XbDesc::of(p, 0)) };
        }
        jit.run(&mut states, &mut descs, &pool, &mut jout);
    }
    assert_eq!(host.packets.len(), packets.len(), "{what}: packets");
    for (i, ((v, fanned, bytes), want)) in host.packets.iter().zip(&verdicts).enumerate() {
        match raw(want) {
            Some(w) => {
                assert!(!fanned, "{what}: packet {i} duplicated, the interpreter says {want:?}");
                assert_eq!(*v, w, "{what}: packet {i}: verdict {v:#x}, the interpreter says {want:?}");
                assert_eq!(bytes, &after[i], "{what}: packet {i}: bytes after processing");
            }
            None => assert!(fanned, "{what}: packet {i}: the interpreter duplicated it, the object did not"),
        }
    }
    assert_eq!(self::left(host), left, "{what}: buffers that left");
    let (counters, data) = host.batches.last().expect("a batch");
    assert_eq!(counters, jit.raw_counters(), "{what}: counters");
    for (n, name) in interp.netpe_names().iter().map(|s| s.to_string()).collect::<Vec<_>>().iter().enumerate() {
        assert_eq!(data[n], interp.netpe_state(name).unwrap().data, "{what}: data memory of {name}");
    }
}

fn generated_cases(n: u64, seed: u64) -> Vec<(netvm_fuzzgen::app::GenApp, Vec<Packet>, usize)> {
    let mut rng = SplitMix64::new(seed);
    // No coprocessors: a C host has none (their instructions would fault alike, but prove little).
    let cfg = GenConfig { max_insns: 80, max_ports: 4, max_info_size: 64, max_data_size: 64, copro: false, ..GenConfig::default() };
    let mut cases = Vec::new();
    while (cases.len() as u64) < n {
        let Some(g) = generate_app(&mut rng, &cfg) else { continue };
        let bytes = rng.bytes(60 * 160);
        let Ok(packets) = generate_packets(&mut Unstructured::new(&bytes), 60) else { continue };
        let batch = 1 + (rng.next_u64() % 16) as usize;
        cases.push((g, packets, batch));
    }
    cases
}

/// Runs every case on `tc`.
fn run_suite(tc: &Toolchain, apps: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let r = root();
    // Single programs over the example trace.
    let (trace, err) = netvm_io::read_capture(&r.join("examples/traces/mixed.pcap"), 0);
    assert!(err.is_none(), "{err:?}");
    let mut programs = vec![r.join("examples/fig2-filter/filter.nil")];
    let mut filters: Vec<PathBuf> = std::fs::read_dir(r.join("benches/filters"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "nil"))
        .collect();
    filters.sort();
    programs.extend(filters);
    for (k, prog) in programs.iter().enumerate() {
        let link = if k % 2 == 0 { LinkMode::Direct } else { LinkMode::Table };
        let dir = tmp.path().join(format!("prog{k}"));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = build(tc, &dir, &["--program", prog.to_str().unwrap()], link);
        let host = run_host(tc, &exe, &trace, 256);
        let out_ports = netvm_runtime::load_program(prog).unwrap().module.out_ports;
        let manifest = Manifest::single(prog, &[0], out_ports, None);
        check(&manifest, &trace, 256, link, &host, &format!("{} on {}", prog.display(), tc.target.triple()));
    }
    // Generated applications.
    for (a, (g, packets, batch)) in generated_cases(apps, 0x616f74).iter().enumerate() {
        let dir = tmp.path().join(format!("app{a}"));
        std::fs::create_dir_all(&dir).unwrap();
        for (file, bytes, _) in &g.programs {
            std::fs::write(dir.join(file), bytes).unwrap();
        }
        let path = dir.join("app.toml");
        std::fs::write(&path, &g.manifest).unwrap();
        let manifest = Manifest::load(&path).unwrap();
        let link = if a % 2 == 0 { LinkMode::Direct } else { LinkMode::Table };
        let exe = build(tc, &dir, &[path.to_str().unwrap()], link);
        let host = run_host(tc, &exe, packets, *batch as u32);
        let mut what = format!("generated application {a} (--link {}) on {}:\n{}", link.name(), tc.target.triple(), g.manifest);
        for (file, _, listing) in &g.programs {
            what.push_str(&format!("\n--- {file}\n{listing}"));
        }
        check(&manifest, packets, *batch, link, &host, &what);
    }
}

fn apps(default: u64) -> u64 {
    std::env::var("NETVM_AOT_APPS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The toolchain of `target`, or `None` (with the reason printed) where
/// this machine has none, unless `NETVM_REQUIRE_CROSS=1` makes that a failure.
fn toolchain(target: AotTarget) -> Option<Toolchain> {
    match Toolchain::for_target(target) {
        Ok(tc) => Some(tc),
        Err(why) => {
            assert!(std::env::var_os("NETVM_REQUIRE_CROSS").is_none(), "the {target:?} AOT test is required, but {why}");
            eprintln!("SKIPPED: {target:?} ({why})");
            None
        }
    }
}

#[test]
fn x86_64_objects_in_a_c_program_agree_with_the_interpreter() {
    if let Some(tc) = toolchain(AotTarget::X86_64) {
        run_suite(&tc, apps(24));
    }
}

#[test]
fn aarch64_objects_run_under_qemu_and_agree_with_the_interpreter() {
    if let Some(tc) = toolchain(AotTarget::Aarch64) {
        run_suite(&tc, apps(8));
    }
}

#[test]
fn riscv64_objects_are_risc_v_elf() {
    let tmp = tempfile::tempdir().unwrap();
    let obj = tmp.path().join("app.o");
    let out = Command::new(env!("CARGO_BIN_EXE_netvm"))
        .args(["compile", root().join("examples/classifier/app.toml").to_str().unwrap()])
        .args(["--target", "riscv64gc-unknown-linux-gnu", "-o"])
        .arg(&obj)
        .output()
        .unwrap();
    assert!(out.status.success(), "netvm compile --target riscv64gc-unknown-linux-gnu: {}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::read(&obj).unwrap();
    assert_eq!(&bytes[..4], b"\x7fELF");
    assert_eq!(u16::from_le_bytes([bytes[18], bytes[19]]), 243, "e_machine EM_RISCV");
}
