//! The AOT engines: an application compiled into a relocatable object
//! (`netvm_jit::aot`, what `netvm compile -o` writes), linked with
//! `libnetvm_rt.a` into the C host `c/host.c`, and run natively (x86-64) or
//! under qemu-aarch64. The host prints every observable after each batch.
//!
//! The toolchains come from Debian packages (gcc, gcc-aarch64-linux-gnu,
//! qemu-user) and the Rust target aarch64-unknown-linux-gnu, all installed
//! by scripts/setup.sh; where one is missing the engine is unavailable and
//! says why ([`Toolchain::for_target`]).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use netvm_jit::link::{AppLayout, LinkMode};
use netvm_runtime::{AppPlan, Verdict};
use netvm_vm::{FaultKind, Packet};

use crate::engines::{AotTarget, EngineKind};
use crate::format::TestFile;
use crate::run::{packet_of, EngineRun, Observed, Subject};

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn run_ok(cmd: &mut Command, what: &str) -> Result<Vec<u8>, String> {
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{what} failed:\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(out.stdout)
}

fn have(cmd: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {cmd}")]).output().is_ok_and(|o| o.status.success())
}

/// Builds libnetvm_rt.a for `target` (in a target directory of its own, so
/// as not to wait for the one `cargo test` holds), once per process.
fn rt_lib(target: &'static str) -> Result<PathBuf, String> {
    /// The libraries built so far, by target.
    type Built = Mutex<Vec<(&'static str, Result<PathBuf, String>)>>;
    static BUILT: OnceLock<Built> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, r)) = built.iter().find(|(t, _)| *t == target) {
        return r.clone();
    }
    let dir = root().join("target/aot-rt");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let r = run_ok(
        Command::new(cargo).args(["build", "-q", "-p", "netvm-rt", "--target", target]).env("CARGO_TARGET_DIR", &dir).current_dir(root()),
        &format!("cargo build -p netvm-rt --target {target}"),
    )
    .map(|_| dir.join(target).join("debug/libnetvm_rt.a"));
    built.push((target, r.clone()));
    r
}

/// How to build and run C programs for a target.
#[derive(Clone, Debug)]
pub struct Toolchain {
    /// The target.
    pub target: AotTarget,
    /// Its C compiler.
    pub cc: &'static str,
    /// Runs a program of the target (empty: natively).
    pub runner: Vec<String>,
    /// `libnetvm_rt.a` for the target.
    pub rt: PathBuf,
}

impl Toolchain {
    /// The toolchain of `target`, or why this machine has none.
    pub fn for_target(target: AotTarget) -> Result<Toolchain, String> {
        let (cc, runner) = match target {
            AotTarget::X86_64 if cfg!(all(target_arch = "x86_64", target_os = "linux")) => ("cc", vec![]),
            AotTarget::X86_64 => return Err("not an x86-64 Linux host".into()),
            AotTarget::Aarch64 => ("aarch64-linux-gnu-gcc", vec!["qemu-aarch64".to_string()]),
        };
        let missing: Vec<&str> = std::iter::once(cc).chain(runner.iter().map(String::as_str)).filter(|c| !have(c)).collect();
        if !missing.is_empty() {
            return Err(format!("{} not installed (scripts/setup.sh installs them)", missing.join(", ")));
        }
        let rt = rt_lib(target.triple())?;
        Ok(Toolchain { target, cc, runner, rt })
    }

    /// Links `object` with the C host; returns the executable.
    pub fn build(&self, dir: &Path, object: &[u8]) -> Result<PathBuf, String> {
        let obj = dir.join(format!("app-{}.o", self.target.triple()));
        std::fs::write(&obj, object).map_err(|e| format!("{}: {e}", obj.display()))?;
        let exe = dir.join(format!("host-{}", self.target.triple()));
        run_ok(
            Command::new(self.cc)
                .args(["-O1", "-std=c11", "-Wall", "-Werror", "-static", "-I"])
                .arg(root().join("include"))
                .arg(root().join("crates/filetests/c/host.c"))
                .arg(&obj)
                .arg(&self.rt)
                .args(["-lpthread", "-ldl", "-lm", "-o"])
                .arg(&exe),
            &format!("{} host.c", self.cc),
        )?;
        Ok(exe)
    }

    /// Runs the host on `packets` (each with its budget, `u64::MAX` for
    /// the application's) in batches of `batch`.
    pub fn run(&self, exe: &Path, packets: &[(Packet, u64)], batch: u32) -> Result<HostRun, String> {
        let mut input = Vec::new();
        input.extend_from_slice(&(packets.len() as u32).to_le_bytes());
        input.extend_from_slice(&batch.to_le_bytes());
        for (p, budget) in packets {
            input.extend_from_slice(&p.in_port.to_le_bytes());
            input.extend_from_slice(&(p.data.len() as u32).to_le_bytes());
            input.extend_from_slice(&p.wire_len.to_le_bytes());
            input.extend_from_slice(&p.ts.sec.to_le_bytes());
            input.extend_from_slice(&p.ts.nsec.to_le_bytes());
            input.extend_from_slice(&budget.to_le_bytes());
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
        let mut child =
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| format!("start the host: {e}"))?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let out = child.wait_with_output().map_err(|e| format!("host output: {e}"))?;
        writer.join().expect("the writer thread").map_err(|e| format!("write the packets: {e}"))?;
        if !out.status.success() {
            return Err(format!("host failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        HostRun::parse(&String::from_utf8_lossy(&out.stdout))
    }
}

/// What the C host printed.
#[derive(Debug, Default)]
pub struct HostRun {
    /// `netvm_init`'s result: 0, or `1 + 8 * netpe + fault kind`.
    pub init: u32,
    /// Per packet: raw verdict, duplicated, bytes after.
    pub packets: Vec<(u32, bool, Vec<u8>)>,
    /// Buffers that left duplicated packets: (packet, port, bytes).
    pub emitted: Vec<(usize, u16, Vec<u8>)>,
    /// After each batch: the counters and every NetPE's data memory.
    pub batches: Vec<(Vec<u64>, Vec<Vec<u8>>)>,
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if s == "-" {
        return Ok(Vec::new());
    }
    crate::format::parse_hex(s)
}

impl HostRun {
    fn parse(text: &str) -> Result<HostRun, String> {
        let mut r = HostRun::default();
        let bad = |line: &str| format!("host printed `{line}`");
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let n = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).ok_or_else(|| bad(line));
            match f[0] {
                "init" => r.init = n(1)? as u32,
                "pkt" => r.packets.push((n(2)? as u32, f.get(3) == Some(&"1"), unhex(f.get(4).ok_or_else(|| bad(line))?)?)),
                "emit" => r.emitted.push((n(1)? as usize, n(2)? as u16, unhex(f.get(3).ok_or_else(|| bad(line))?)?)),
                "counters" => r.batches.push(((1..f.len()).map(n).collect::<Result<_, _>>()?, Vec::new())),
                "data" => r.batches.last_mut().ok_or_else(|| bad(line))?.1.push(unhex(f.get(2).ok_or_else(|| bad(line))?)?),
                _ => {}
            }
        }
        Ok(r)
    }

    /// Packet `i`'s verdict and exits.
    pub fn outcome(&self, i: usize) -> (Verdict, Vec<(u16, Vec<u8>)>) {
        let (raw, fanned, bytes) = &self.packets[i];
        if *fanned {
            let exits: Vec<(u16, Vec<u8>)> = self.emitted.iter().filter(|e| e.0 == i).map(|e| (e.1, e.2.clone())).collect();
            return (Verdict::Fanout { outputs: exits.len() as u32 }, exits);
        }
        match Verdict::decode(*raw) {
            Verdict::Output(p) => (Verdict::Output(p), vec![(p, bytes.clone())]),
            v => (v, Vec::new()),
        }
    }
}

/// Compiles `plan` for `tc`'s target (direct linking) and links it with the host.
pub fn build_app(tc: &Toolchain, plan: &AppPlan, dir: &Path) -> Result<(PathBuf, AppLayout), String> {
    let opts = EngineKind::Aot(tc.target).jit_options();
    let obj = netvm_jit::aot::compile_object(&plan.graph, &plan.verified, &plan.limits, LinkMode::Direct, opts, tc.target.triple())
        .map_err(|e| format!("compile: {e}"))?;
    Ok((tc.build(dir, &obj.bytes)?, obj.layout))
}

/// Runs a file on the AOT engine of `target`, one packet per batch.
pub fn run(subject: &Subject, file: &TestFile, target: AotTarget, plan: &AppPlan) -> Result<EngineRun, String> {
    let tc = Toolchain::for_target(target)?;
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (exe, layout) = build_app(&tc, plan, tmp.path())?;
    let packets: Vec<(Packet, u64)> = file.runs.iter().map(|c| (packet_of(c), c.budget.unwrap_or(u64::MAX))).collect();
    let host = tc.run(&exe, &packets, 1)?;
    if host.init != 0 {
        let code = host.init - 1;
        let kind = FaultKind::ALL.get((code % 8) as usize).copied().ok_or_else(|| format!("netvm_init returned {}", host.init))?;
        return Ok(EngineRun { init: Err(((code / 8) as usize, kind)), runs: Vec::new() });
    }
    if host.packets.len() != file.runs.len() || host.batches.len() != file.runs.len() {
        return Err(format!(
            "the host reported {} packets in {} batches for {} runs",
            host.packets.len(),
            host.batches.len(),
            file.runs.len()
        ));
    }
    let nodes = subject.verified.len();
    let used_at = |b: usize| -> Vec<u64> {
        (0..nodes).map(|n| b.checked_sub(1).map_or(0, |p| host.batches[p].0[layout.budget_counter(n)])).collect()
    };
    let mut runs = Vec::with_capacity(file.runs.len());
    for i in 0..file.runs.len() {
        let (verdict, exits) = host.outcome(i);
        let (before, after) = (used_at(i), used_at(i + 1));
        runs.push(Observed {
            verdict,
            exits,
            packet: host.packets[i].2.clone(),
            info: None,
            data: host.batches[i].1.clone(),
            used: after.iter().zip(&before).map(|(a, b)| a - b).collect(),
        });
    }
    Ok(EngineRun { init: Ok(()), runs })
}
