//! Differential test of `netvm_pfl::compile` against libpcap.
//!
//! Every expression of `tests/filters/expressions.txt` is compiled by
//! libpcap (through the C program `tests/libpcap/oracle.c`, built here with
//! `cc ... -lpcap`, which compiles it exactly as `tcpdump -r` does and runs
//! `pcap_offline_filter` over every packet) and by `netvm_pfl::compile`, then
//! run with both the interpreter and the JIT on every packet of:
//!
//! - generated traces (`netvm_traffic::frames`, several seeds), written as
//!   pcap files;
//! - every Ethernet capture of `../shared/corpus/tcpdump-tests` (when
//!   present) that `netvm-io` reads without error;
//! - `examples/traces/*.pcap`.
//!
//! A packet matches a netvm filter iff its `.push` handler ends on output
//! port 1. The accepted packet sets must be identical, and an expression
//! that libpcap rejects must be rejected by `compile` (and vice versa).
//! All disagreements are collected and reported at the end (the complete
//! report is also written to `libpcap-report.txt` under Cargo's target tmp
//! directory).
//!
//! `tests/filters/differences.txt` lists intended differences, one per line
//! as `EXPRESSION ## REASON`: such expressions are still compared, but their
//! disagreements are printed as notes, not failures.
//!
//! Environment:
//! - `NETVM_REQUIRE_LIBPCAP=1`: fail (instead of skipping) when the oracle
//!   cannot be built (no C compiler or no libpcap-dev);
//! - `NETVM_LIBPCAP_PACKETS=N`: generated packets in all (default 4000,
//!   in 4 traces);
//! - `NETVM_LIBPCAP_SEED=S`: seed of the first generated trace;
//! - `NETVM_LIBPCAP_ONLY=TEXT`: only the expressions containing TEXT;
//! - `NETVM_LIBPCAP_NO_CORPUS=1`: leave out the tcpdump corpus;
//! - `NETVM_LIBPCAP_KEEP=DIR`: keep the oracle, its input and output and the
//!   generated traces in DIR.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use netvm_interp::InterpCode;
use netvm_jit::JitCode;
use netvm_traffic::frames::generate_trace;
use netvm_traffic::{write_pcap, SplitMix64};
use netvm_vm::{ExchangeBuffer, Limits, Outcome, Packet, PeCode};

/// Most expressions shown in the failure message (the file has them all).
const MAX_EXPRS_SHOWN: usize = 40;
/// Most packets shown per expression.
const MAX_PACKETS_SHOWN: usize = 4;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The expressions of a file: one per line, blank lines and `#` comments
/// skipped, surrounding blanks trimmed (as oracle.c reads them).
fn expressions(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.trim_matches(|c| c == ' ' || c == '\t' || c == '\r'))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// `EXPRESSION ## REASON` lines.
fn differences(text: &str) -> HashMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| match l.split_once(" ## ") {
            Some((e, r)) => (e.trim().to_string(), r.trim().to_string()),
            None => panic!("differences.txt: `{l}`: expected `EXPRESSION ## REASON`"),
        })
        .collect()
}

/// FNV-1a 64 over caplen, wire length (little-endian u32s) and bytes of
/// every packet: what oracle.c prints for the packets libpcap read.
fn capture_hash(packets: &[Packet]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut eat = |b: &[u8]| {
        for &x in b {
            h ^= u64::from(x);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    };
    for p in packets {
        eat(&(p.data.len() as u32).to_le_bytes());
        eat(&p.wire_len.to_le_bytes());
        eat(&p.data);
    }
    h
}

/// Whether libpcap takes part of `expr`'s meaning from /etc/protocols
/// (`proto \tcp`, `ip proto \udp`: getprotobyname) or /etc/services
/// (`port http`: getservbyname).
fn needs_netdb(expr: &str) -> bool {
    expr.contains('\\') || expr.split(|c: char| !c.is_ascii_alphanumeric() && c != '-').any(|w| ["http", "ssh", "domain"].contains(&w))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

struct Capture {
    /// Short name for reports.
    name: String,
    path: PathBuf,
    packets: Vec<Packet>,
}

/// What libpcap made of one expression: its error, or the matching packet
/// indices of every file.
enum OracleResult {
    Rejected(String),
    Matches(Vec<Vec<u32>>),
}

struct OracleFile {
    packets: usize,
    hash: u64,
    linktype: i64,
    ok: bool,
}

struct Oracle {
    version: String,
    files: Vec<OracleFile>,
    exprs: Vec<(String, OracleResult)>,
}

fn parse_oracle(out: &str, nfiles: usize) -> Result<Oracle, String> {
    let mut o = Oracle { version: String::new(), files: Vec::new(), exprs: Vec::new() };
    let mut end = None;
    for (n, line) in out.lines().enumerate() {
        let bad = || format!("oracle output line {}: `{line}`", n + 1);
        let (tag, rest) = line.split_once(' ').ok_or_else(bad)?;
        match tag {
            "ORACLE" => o.version = rest.to_string(),
            "FILE" => {
                let f: Vec<&str> = rest.splitn(6, ' ').collect();
                if f.len() != 6 || f[0].parse::<usize>().ok() != Some(o.files.len()) {
                    return Err(bad());
                }
                o.files.push(OracleFile {
                    packets: f[1].parse().map_err(|_| bad())?,
                    hash: u64::from_str_radix(f[2], 16).map_err(|_| bad())?,
                    linktype: f[3].parse().map_err(|_| bad())?,
                    ok: f[4] == "ok",
                });
            }
            "EXPR" => {
                let (i, e) = rest.split_once(' ').ok_or_else(bad)?;
                if i.parse::<usize>().ok() != Some(o.exprs.len()) {
                    return Err(bad());
                }
                o.exprs.push((e.to_string(), OracleResult::Matches(Vec::new())));
            }
            "ERROR" => match o.exprs.last_mut() {
                Some((_, r @ OracleResult::Matches(_))) => *r = OracleResult::Rejected(rest.to_string()),
                _ => return Err(bad()),
            },
            "MATCH" => {
                let Some((_, OracleResult::Matches(m))) = o.exprs.last_mut() else { return Err(bad()) };
                let v: Vec<u32> = rest.split(' ').map(|x| x.parse().map_err(|_| bad())).collect::<Result<_, _>>()?;
                if v.len() < 2 || v[0] as usize != m.len() || v[1] as usize != v.len() - 2 {
                    return Err(bad());
                }
                m.push(v[2..].to_vec());
            }
            "END" => end = Some(rest.parse::<usize>().map_err(|_| bad())?),
            _ => return Err(bad()),
        }
    }
    if end != Some(o.exprs.len()) || o.files.len() != nfiles {
        return Err(format!("oracle output incomplete: {} files, {} expressions, END {end:?}", o.files.len(), o.exprs.len()));
    }
    for (e, r) in &o.exprs {
        if let OracleResult::Matches(m) = r {
            if m.len() != nfiles {
                return Err(format!("oracle: `{e}`: {} MATCH lines for {nfiles} files", m.len()));
            }
        }
    }
    Ok(o)
}

/// Builds oracle.c; `Err` says why it could not be.
fn build_oracle(dir: &Path) -> Result<PathBuf, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/libpcap/oracle.c");
    let exe = dir.join("oracle");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let out =
        Command::new(&cc).args(["-O2", "-o"]).arg(&exe).arg(&src).arg("-lpcap").output().map_err(|e| format!("cannot run `{cc}`: {e}"))?;
    if !out.status.success() {
        return Err(format!("`{cc} -O2 -o oracle oracle.c -lpcap` failed:\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(exe)
}

/// The captures: generated traces first, then the example traces and the
/// Ethernet captures of the tcpdump corpus.
fn captures(root: &Path, dir: &Path) -> (Vec<Capture>, usize) {
    let total = env_num("NETVM_LIBPCAP_PACKETS", 4000) as usize;
    let seed = env_num("NETVM_LIBPCAP_SEED", 0x7066_6c00);
    let traces = total.div_ceil(1000).clamp(1, 64).max(4.min(total));
    let mut caps = Vec::new();
    for t in 0..traces {
        let n = total / traces + usize::from(t < total % traces);
        let s = seed.wrapping_add(t as u64);
        let packets = generate_trace(&mut SplitMix64::new(s), n);
        let path = dir.join(format!("gen-{s:x}.pcap"));
        write_pcap(std::io::BufWriter::new(std::fs::File::create(&path).unwrap()), &packets).unwrap();
        // Read back with netvm-io, as every other capture is.
        let (back, err) = netvm_io::read_capture(&path, 0);
        assert!(err.is_none(), "{}: {err:?}", path.display());
        assert_eq!(back.len(), packets.len());
        caps.push(Capture { name: format!("gen-{s:x}.pcap"), path, packets: back });
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("examples/traces"))
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "pcap")).collect())
        .unwrap_or_default();
    files.sort();
    let mut corpus: Vec<PathBuf> = Vec::new();
    if std::env::var_os("NETVM_LIBPCAP_NO_CORPUS").is_none() {
        match std::fs::read_dir(root.join("../shared/corpus/tcpdump-tests")) {
            Ok(rd) => corpus = rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect(),
            Err(_) => eprintln!("note: ../shared/corpus/tcpdump-tests not found: generated and example traces only"),
        }
    }
    corpus.sort();
    let mut skipped = 0;
    for f in files.into_iter().chain(corpus) {
        // Only Ethernet captures that read cleanly (netvm-io rejects other link types).
        let (packets, err) = netvm_io::read_capture(&f, 0);
        if err.is_some() || packets.is_empty() {
            skipped += 1;
            continue;
        }
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        caps.push(Capture { name, path: f, packets });
    }
    (caps, skipped)
}

/// How one engine ended on one packet.
fn run_engine(code: &dyn PeCode, module: &netil::Module, packets: &[Packet], limits: &Limits) -> Vec<Outcome> {
    let mut state = netvm_fuzzgen::new_state(module);
    let init = code.init(&mut state, limits);
    if init != Outcome::Exit {
        return vec![init; packets.len()];
    }
    packets
        .iter()
        .map(|p| {
            let mut xb = ExchangeBuffer::new(p.clone(), module.info_size as usize);
            code.push(&mut state, &mut xb.view(), p.in_port, limits)
        })
        .collect()
}

fn matches(o: &Outcome) -> bool {
    *o == Outcome::Forward(1)
}

/// A packet on which some engine disagrees with libpcap.
struct PacketDiff {
    file: usize,
    index: usize,
    libpcap: bool,
    interp: Outcome,
    jit: Outcome,
}

/// Everything wrong with one expression.
enum ExprDiff {
    /// libpcap rejects it, netvm accepts it.
    NetvmAccepts(String),
    /// libpcap accepts it (matching this many packets), netvm rejects it.
    NetvmRejects { message: String, span: std::ops::Range<usize>, libpcap_matches: usize },
    /// The compiled module does not verify or does not JIT-compile.
    Broken(String),
    /// Packets on which an engine's verdict differs from libpcap's.
    Packets { diffs: Vec<PacketDiff>, libpcap_matches: usize },
}

/// Compares one expression; `None` when netvm agrees with libpcap.
fn compare(expr: &str, oracle: &OracleResult, caps: &[Capture], used: &[bool], limits: &Limits) -> Option<ExprDiff> {
    let compiled = netvm_pfl::compile(expr);
    let expected = match (oracle, compiled) {
        (OracleResult::Rejected(_), Err(_)) => return None,
        (OracleResult::Rejected(msg), Ok(_)) => return Some(ExprDiff::NetvmAccepts(msg.clone())),
        (OracleResult::Matches(m), Err(e)) => {
            let libpcap_matches = m.iter().zip(used).filter(|(_, u)| **u).map(|(v, _)| v.len()).sum();
            return Some(ExprDiff::NetvmRejects { message: e.message, span: e.span, libpcap_matches });
        }
        (OracleResult::Matches(m), Ok(filter)) => (m, filter),
    };
    let (m, filter) = expected;
    let v = match netvm_verify::verify(&filter.module) {
        Ok(v) => v,
        Err(e) => return Some(ExprDiff::Broken(format!("the module does not verify: {e}\n{}", filter.text))),
    };
    let interp = InterpCode::new(&v);
    let jit = match JitCode::compile(&v) {
        Ok(j) => j,
        Err(e) => return Some(ExprDiff::Broken(format!("JIT compilation failed: {e}\n{}", filter.text))),
    };
    let mut diffs = Vec::new();
    let mut libpcap_matches = 0;
    for (f, cap) in caps.iter().enumerate() {
        if !used[f] {
            continue;
        }
        let mut want = vec![false; cap.packets.len()];
        for &i in &m[f] {
            want[i as usize] = true;
        }
        libpcap_matches += m[f].len();
        let io = run_engine(&interp, &filter.module, &cap.packets, limits);
        let jo = run_engine(&jit, &filter.module, &cap.packets, limits);
        for (index, ((w, i), j)) in want.iter().zip(io).zip(jo).enumerate() {
            if matches(&i) != *w || matches(&j) != *w {
                diffs.push(PacketDiff { file: f, index, libpcap: *w, interp: i, jit: j });
            }
        }
    }
    (!diffs.is_empty()).then_some(ExprDiff::Packets { diffs, libpcap_matches })
}

fn describe(out: &mut String, expr: &str, d: &ExprDiff, caps: &[Capture], max_packets: usize) {
    let _ = match d {
        ExprDiff::NetvmAccepts(msg) => writeln!(out, "`{expr}`: libpcap rejects it ({msg}), netvm accepts it"),
        ExprDiff::NetvmRejects { message, span, libpcap_matches } => {
            writeln!(out, "`{expr}`: netvm rejects it ({message} at {span:?}), libpcap accepts it (matching {libpcap_matches} packets)")
        }
        ExprDiff::Broken(msg) => writeln!(out, "`{expr}`: {msg}"),
        ExprDiff::Packets { diffs, libpcap_matches } => {
            let ni = diffs.iter().filter(|d| matches(&d.interp) != d.libpcap).count();
            let nj = diffs.iter().filter(|d| matches(&d.jit) != d.libpcap).count();
            let _ =
                writeln!(out, "`{expr}`: {} packets differ (interpreter {ni}, JIT {nj}; libpcap matches {libpcap_matches})", diffs.len());
            for d in diffs.iter().take(max_packets) {
                let p = &caps[d.file].packets[d.index];
                let engine = match (matches(&d.interp) != d.libpcap, matches(&d.jit) != d.libpcap) {
                    (true, true) => "interpreter and JIT",
                    (true, false) => "interpreter only",
                    _ => "JIT only",
                };
                let _ = writeln!(
                    out,
                    "    {} #{} (caplen {}, wirelen {}): libpcap {}, interpreter {}, JIT {} [{engine}]\n        {}{}",
                    caps[d.file].name,
                    d.index,
                    p.data.len(),
                    p.wire_len,
                    if d.libpcap { "matches" } else { "does not match" },
                    d.interp,
                    d.jit,
                    hex(&p.data[..p.data.len().min(64)]),
                    if p.data.len() > 64 { "..." } else { "" }
                );
            }
            if diffs.len() > max_packets {
                writeln!(out, "    ... and {} more packets", diffs.len() - max_packets)
            } else {
                Ok(())
            }
        }
    };
}

#[test]
fn filters_agree_with_libpcap() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.join("../..");
    let tmp = tempfile::tempdir().unwrap();
    let dir = match std::env::var_os("NETVM_LIBPCAP_KEEP") {
        Some(d) => {
            std::fs::create_dir_all(&d).unwrap();
            PathBuf::from(d)
        }
        None => tmp.path().to_path_buf(),
    };
    let oracle = match build_oracle(&dir) {
        Ok(o) => o,
        Err(e) => {
            assert!(
                std::env::var("NETVM_REQUIRE_LIBPCAP").as_deref() != Ok("1"),
                "libpcap is required (NETVM_REQUIRE_LIBPCAP=1) but the oracle cannot be built: {e}"
            );
            eprintln!("SKIPPED: cannot build the libpcap oracle (install a C compiler and libpcap-dev): {e}");
            return;
        }
    };

    let mut exprs = expressions(&std::fs::read_to_string(manifest.join("tests/filters/expressions.txt")).unwrap());
    let all_exprs = exprs.len();
    if let Ok(only) = std::env::var("NETVM_LIBPCAP_ONLY") {
        exprs.retain(|e| e.contains(&only));
    }
    if !Path::new("/etc/protocols").exists() || !Path::new("/etc/services").exists() {
        let n = exprs.len();
        exprs.retain(|e| !needs_netdb(e));
        eprintln!(
            "note: /etc/protocols or /etc/services is missing (Debian package netbase): {} expressions that name protocols \
             or services left out",
            n - exprs.len()
        );
    }
    let intended = differences(&std::fs::read_to_string(manifest.join("tests/filters/differences.txt")).unwrap());
    let exprs_file = dir.join("expressions.txt");
    std::fs::write(&exprs_file, exprs.iter().map(|e| format!("{e}\n")).collect::<String>()).unwrap();

    let (caps, unreadable) = captures(&root, &dir);
    let out = Command::new(&oracle).arg(&exprs_file).args(caps.iter().map(|c| &c.path)).output().unwrap();
    assert!(out.status.success(), "the oracle failed: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).expect("oracle output is not UTF-8");
    if std::env::var_os("NETVM_LIBPCAP_KEEP").is_some() {
        std::fs::write(dir.join("oracle.out"), &stdout).unwrap();
    }
    let oracle = parse_oracle(&stdout, caps.len()).unwrap_or_else(|e| panic!("{e}"));
    for (e, (oe, _)) in exprs.iter().zip(&oracle.exprs) {
        assert_eq!(e, oe, "the oracle read another expression");
    }
    assert_eq!(exprs.len(), oracle.exprs.len());

    // Compare only the captures of which libpcap read exactly the packets netvm-io read.
    let mut used = vec![true; caps.len()];
    let mut mismatched = Vec::new();
    for (f, (cap, of)) in caps.iter().zip(&oracle.files).enumerate() {
        if !of.ok || of.linktype != 1 || of.packets != cap.packets.len() || of.hash != capture_hash(&cap.packets) {
            used[f] = false;
            let why = if !of.ok || of.linktype != 1 || of.packets != cap.packets.len() {
                format!(
                    " (libpcap: {} packets, link type {}{}; netvm-io: {} packets)",
                    of.packets,
                    of.linktype,
                    if of.ok { "" } else { ", read error" },
                    cap.packets.len()
                )
            } else {
                String::new()
            };
            mismatched.push(format!("{}{why}", cap.name));
        }
    }
    let generated = caps.iter().filter(|c| c.name.starts_with("gen-")).count();
    assert!(used[..generated].iter().all(|u| *u), "libpcap reads the generated traces differently: {mismatched:?}");
    if !mismatched.is_empty() {
        eprintln!(
            "note: {} captures left out, as libpcap and netvm-io read different lengths or bytes from them (libpcap cuts a \
             record longer than the file's snaplen to the snaplen; netvm-io raises an original length below the captured \
             length to the captured length): {}",
            mismatched.len(),
            mismatched.join(", ")
        );
    }
    let packets: usize = caps.iter().zip(&used).filter(|(_, u)| **u).map(|(c, _)| c.packets.len()).sum();

    // Compare every expression, on all cores.
    let limits = Limits::default();
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(8);
    let mut results: Vec<(usize, Option<ExprDiff>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut r = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some((e, o)) = oracle.exprs.get(i) else { break };
                        // A panic (in the compiler, verifier or an engine) is one more disagreement.
                        let d = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| compare(e, o, &caps, &used, &limits)))
                            .unwrap_or_else(|p| {
                                let msg = p
                                    .downcast_ref::<&str>()
                                    .map(|s| s.to_string())
                                    .or_else(|| p.downcast_ref::<String>().cloned())
                                    .unwrap_or_default();
                                Some(ExprDiff::Broken(format!("panicked: {msg}")))
                            });
                        r.push((i, d));
                    }
                    r
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    results.sort_by_key(|r| r.0);

    let rejected = oracle.exprs.iter().filter(|(_, r)| matches!(r, OracleResult::Rejected(_))).count();
    let summary = format!(
        "{}: {} expressions of {all_exprs} ({rejected} rejected by libpcap), {} captures ({generated} generated, \
         {} left out, {unreadable} not Ethernet or unreadable by netvm-io), {packets} packets",
        oracle.version,
        exprs.len(),
        caps.len(),
        mismatched.len(),
    );
    println!("{summary}");

    let (mut failures, mut notes) = (Vec::new(), Vec::new());
    for (i, d) in results {
        if let Some(d) = d {
            let e = &oracle.exprs[i].0;
            match intended.get(e) {
                Some(reason) => notes.push((e, d, reason)),
                None => failures.push((e, d)),
            }
        }
    }
    println!(
        "{} expressions agree with libpcap, {} disagree, {} of them intended differences",
        exprs.len() - failures.len() - notes.len(),
        failures.len() + notes.len(),
        notes.len()
    );
    for (e, d, reason) in &notes {
        let mut s = format!("note: intended difference ({reason}): ");
        describe(&mut s, e, d, &caps, 1);
        print!("{s}");
    }
    let unused: Vec<_> = intended.keys().filter(|e| !exprs.contains(e)).collect();
    if std::env::var("NETVM_LIBPCAP_ONLY").is_err() {
        assert!(unused.is_empty(), "differences.txt names expressions that expressions.txt does not have: {unused:?}");
    }
    if failures.is_empty() {
        return;
    }
    let mut full = format!("{summary}\n{} expressions disagree with libpcap:\n\n", failures.len());
    for (e, d) in &failures {
        describe(&mut full, e, d, &caps, 50);
    }
    let report_path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("libpcap-report.txt");
    let _ = std::fs::write(&report_path, &full);
    let mut short = format!(
        "{} of {} expressions disagree with libpcap (complete report: {}):\n\n",
        failures.len(),
        exprs.len(),
        report_path.display()
    );
    for (e, d) in failures.iter().take(MAX_EXPRS_SHOWN) {
        describe(&mut short, e, d, &caps, MAX_PACKETS_SHOWN);
    }
    if failures.len() > MAX_EXPRS_SHOWN {
        let _ = writeln!(short, "... and {} more expressions", failures.len() - MAX_EXPRS_SHOWN);
    }
    panic!("{short}");
}
