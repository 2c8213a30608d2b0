//! AOT objects in C programs: `netvm compile ... -o OUT.o --target TRIPLE`
//! linked with libnetvm_rt.a into the small C host of tests/aot/host.c,
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

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use netvm_fuzzgen::app::generate_app;
use netvm_fuzzgen::arbitrary::Unstructured;
use netvm_fuzzgen::{generate_packets, GenConfig, SplitMix};
use netvm_jit::link::{LinkMode, LinkedApp};
use netvm_jit::JitOptions;
use netvm_runtime::{Application, InterpEngine, Manifest, Verdict};
use netvm_vm::graph::LinkedCode;
use netvm_vm::{FaultKind, Packet};

const X86: &str = "x86_64-unknown-linux-gnu";
const ARM: &str = "aarch64-unknown-linux-gnu";

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn run_ok(cmd: &mut Command, what: &str) -> Vec<u8> {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(out.status.success(), "{what} failed:\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// Builds libnetvm_rt.a for `target` (in a target directory of its own, so
/// as not to wait for the one `cargo test` holds) and returns its path.
fn rt_lib(target: &str) -> PathBuf {
    let dir = root().join("target/aot-rt");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run_ok(
        Command::new(cargo).args(["build", "-q", "-p", "netvm-rt", "--target", target]).env("CARGO_TARGET_DIR", &dir).current_dir(root()),
        &format!("cargo build -p netvm-rt --target {target}"),
    );
    dir.join(target).join("debug/libnetvm_rt.a")
}

/// How to build and run C programs for a target.
struct Toolchain {
    target: &'static str,
    cc: &'static str,
    /// Runs a program of the target (empty: natively).
    runner: Vec<String>,
    rt: PathBuf,
}

impl Toolchain {
    /// Compiles `app` (a manifest, or `--program` and a file) into an object
    /// and links it with the C host; returns the executable.
    fn build(&self, dir: &Path, app_args: &[&str], link: LinkMode) -> PathBuf {
        let obj = dir.join(format!("app-{}-{}.o", self.target, link.name()));
        run_ok(
            Command::new(env!("CARGO_BIN_EXE_netvm"))
                .arg("compile")
                .args(app_args)
                .args(["--link", link.name(), "--target", self.target, "-o"])
                .arg(&obj),
            "netvm compile -o",
        );
        let exe = dir.join(format!("host-{}-{}", self.target, link.name()));
        run_ok(
            Command::new(self.cc)
                .args(["-O1", "-std=c11", "-Wall", "-Werror", "-static", "-I"])
                .arg(root().join("include"))
                .arg(root().join("crates/cli/tests/aot/host.c"))
                .arg(&obj)
                .arg(&self.rt)
                .args(["-lpthread", "-ldl", "-lm", "-o"])
                .arg(&exe),
            &format!("{} host.c", self.cc),
        );
        exe
    }

    /// Runs the host on `packets` in batches of `batch`.
    fn run(&self, exe: &Path, packets: &[Packet], batch: u32) -> HostRun {
        let mut input = Vec::new();
        input.extend_from_slice(&(packets.len() as u32).to_le_bytes());
        input.extend_from_slice(&batch.to_le_bytes());
        for p in packets {
            input.extend_from_slice(&p.in_port.to_le_bytes());
            input.extend_from_slice(&(p.data.len() as u32).to_le_bytes());
            input.extend_from_slice(&p.wire_len.to_le_bytes());
            input.extend_from_slice(&p.ts.sec.to_le_bytes());
            input.extend_from_slice(&p.ts.nsec.to_le_bytes());
            input.extend_from_slice(&p.data);
        }
        let mut cmd = match self.runner.split_first() {
            Some((r, args)) => {
                let mut c = Command::new(r);
                c.args(args).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the host");
        let mut stdin = child.stdin.take().expect("stdin");
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let out = child.wait_with_output().expect("host output");
        writer.join().expect("writer").expect("write the trace");
        assert!(out.status.success(), "host failed: {}", String::from_utf8_lossy(&out.stderr));
        HostRun::parse(&String::from_utf8(out.stdout).expect("text"))
    }
}

/// What the C host printed.
#[derive(Debug, Default)]
struct HostRun {
    init: u32,
    /// Per packet: raw verdict, duplicated, bytes after.
    packets: Vec<(u32, bool, Vec<u8>)>,
    /// Buffers that left duplicated packets: (packet, port, bytes).
    emitted: Vec<(usize, u16, Vec<u8>)>,
    counters: Vec<u64>,
    data: Vec<Vec<u8>>,
}

fn unhex(s: &str) -> Vec<u8> {
    if s == "-" {
        return Vec::new();
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

impl HostRun {
    fn parse(text: &str) -> HostRun {
        let mut r = HostRun::default();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            match f[0] {
                "init" => r.init = f[1].parse().unwrap(),
                "pkt" => r.packets.push((f[2].parse().unwrap(), f[3] == "1", unhex(f[4]))),
                "emit" => r.emitted.push((f[1].parse().unwrap(), f[2].parse().unwrap(), unhex(f[3]))),
                "counters" => r.counters = f[1..].iter().map(|c| c.parse().unwrap()).collect(),
                "data" => r.data.push(unhex(f[2])),
                _ => {}
            }
        }
        r
    }

    /// Every buffer that left the application, in order, as the runtime reports them.
    fn left(&self) -> Vec<(u16, Vec<u8>)> {
        let mut out = Vec::new();
        for (i, (v, fanned, bytes)) in self.packets.iter().enumerate() {
            if *fanned {
                out.extend(self.emitted.iter().filter(|e| e.0 == i).map(|e| (e.1, e.2.clone())));
            } else if *v <= 0xffff {
                out.push((*v as u16, bytes.clone()));
            }
        }
        out
    }
}

/// The raw verdict of an interpreter verdict (`None` for a duplicated packet).
fn raw(v: &Verdict) -> Option<u32> {
    match v {
        Verdict::Output(p) => Some(u32::from(*p)),
        Verdict::Drop => Some(0x1_0000),
        Verdict::Fault(k) => Some(0x3_0000 | FaultKind::ALL.iter().position(|x| x == k).unwrap() as u32),
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
        Err((n, netvm_vm::Outcome::Fault(k))) => 1 + 8 * n as u32 + FaultKind::ALL.iter().position(|x| *x == k).unwrap() as u32,
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
    assert_eq!(host.left(), left, "{what}: buffers that left");
    assert_eq!(host.counters, jit.raw_counters(), "{what}: counters");
    for (n, name) in interp.netpe_names().iter().map(|s| s.to_string()).collect::<Vec<_>>().iter().enumerate() {
        assert_eq!(host.data[n], interp.netpe_state(name).unwrap().data, "{what}: data memory of {name}");
    }
}

fn generated_cases(n: u64, seed: u64) -> Vec<(netvm_fuzzgen::app::GenApp, Vec<Packet>, usize)> {
    let mut rng = SplitMix(seed);
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
        let exe = tc.build(tmp.path(), &["--program", prog.to_str().unwrap()], link);
        let host = tc.run(&exe, &trace, 256);
        let out_ports = netvm_runtime::load_program(prog).unwrap().module.out_ports;
        let manifest = Manifest::single(prog, &[0], out_ports, None);
        check(&manifest, &trace, 256, link, &host, &format!("{} on {}", prog.display(), tc.target));
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
        let exe = tc.build(&dir, &[path.to_str().unwrap()], link);
        let host = tc.run(&exe, packets, *batch as u32);
        let mut what = format!("generated application {a} (--link {}) on {}:\n{}", link.name(), tc.target, g.manifest);
        for (file, _, listing) in &g.programs {
            what.push_str(&format!("\n--- {file}\n{listing}"));
        }
        check(&manifest, packets, *batch, link, &host, &what);
    }
}

fn apps(default: u64) -> u64 {
    std::env::var("NETVM_AOT_APPS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn have(cmd: &str) -> bool {
    Command::new(cmd).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

#[test]
fn x86_64_objects_in_a_c_program_agree_with_the_interpreter() {
    if std::env::consts::ARCH != "x86_64" {
        eprintln!("SKIPPED: not an x86-64 host");
        return;
    }
    assert!(have("cc"), "a C compiler (cc) is needed");
    let tc = Toolchain { target: X86, cc: "cc", runner: Vec::new(), rt: rt_lib(X86) };
    run_suite(&tc, apps(24));
}

#[test]
fn aarch64_objects_run_under_qemu_and_agree_with_the_interpreter() {
    let missing: Vec<&str> = [("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu"), ("qemu-aarch64", "qemu-user")]
        .into_iter()
        .filter(|(cmd, _)| !have(cmd))
        .map(|(_, pkg)| pkg)
        .collect();
    let rust_target = Command::new("rustc")
        .args(["--print", "target-libdir", "--target", ARM])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .is_some_and(|d| std::fs::read_dir(d.trim()).is_ok_and(|mut rd| rd.next().is_some()));
    if !missing.is_empty() || !rust_target {
        let why = format!(
            "missing: {}{}",
            missing.join(", "),
            if rust_target { "" } else { " rust target aarch64-unknown-linux-gnu (rustup target add aarch64-unknown-linux-gnu)" }
        );
        assert!(std::env::var_os("NETVM_REQUIRE_CROSS").is_none(), "the aarch64 cross test is required, but {why}");
        eprintln!("SKIPPED: aarch64 under qemu ({why}; scripts/setup.sh installs them)");
        return;
    }
    let tc = Toolchain { target: ARM, cc: "aarch64-linux-gnu-gcc", runner: vec!["qemu-aarch64".into()], rt: rt_lib(ARM) };
    run_suite(&tc, apps(8));
}

#[test]
fn riscv64_objects_are_risc_v_elf() {
    let tmp = tempfile::tempdir().unwrap();
    let obj = tmp.path().join("app.o");
    run_ok(
        Command::new(env!("CARGO_BIN_EXE_netvm"))
            .args(["compile", root().join("examples/classifier/app.toml").to_str().unwrap()])
            .args(["--target", "riscv64gc-unknown-linux-gnu", "-o"])
            .arg(&obj),
        "netvm compile --target riscv64gc-unknown-linux-gnu",
    );
    let bytes = std::fs::read(&obj).unwrap();
    assert_eq!(&bytes[..4], b"\x7fELF");
    assert_eq!(u16::from_le_bytes([bytes[18], bytes[19]]), 243, "e_machine EM_RISCV");
}
