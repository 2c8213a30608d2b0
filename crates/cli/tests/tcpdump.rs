//! The Fig. 2 listing counts IPv4 frames exactly as
//! `tcpdump -r FILE 'ether[12:2] = 0x0800'` does, on every Ethernet capture
//! of ../shared/corpus/tcpdump-tests and on the example trace.
//!
//! Needs tcpdump (Debian package `tcpdump`, installed by scripts/test.sh).
//! Without it the test is skipped with a message, unless
//! NETVM_REQUIRE_TCPDUMP=1 (set by scripts/test.sh), where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

fn tcpdump_count(file: &Path, filter: &str, tmp: &Path) -> Option<u64> {
    let out = tmp.join("tcpdump.pcap");
    let st = Command::new("tcpdump").args(["-nn", "-r"]).arg(file).arg("-w").arg(&out).arg(filter).output().ok()?;
    if !st.status.success() {
        return None;
    }
    let (pkts, err) = netvm_io::read_capture(&out, 0);
    assert!(err.is_none(), "{}: reading tcpdump's output: {err:?}", file.display());
    Some(pkts.len() as u64)
}

#[test]
fn fig2_agrees_with_tcpdump() {
    if Command::new("tcpdump").arg("--version").output().is_err() {
        assert!(std::env::var_os("NETVM_REQUIRE_TCPDUMP").is_none(), "tcpdump is required but not installed");
        eprintln!("SKIPPED: tcpdump is not installed (apt-get install tcpdump)");
        return;
    }
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let filter_prog = root.join("examples/fig2-filter/filter.nil");
    let mut files = vec![root.join("examples/traces/mixed.pcap")];
    let corpus = root.join("../shared/corpus/tcpdump-tests");
    match std::fs::read_dir(&corpus) {
        Ok(rd) => files
            .extend(rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "pcap" || x == "pcapng"))),
        Err(_) => eprintln!("corpus {} not found: checking the example trace only", corpus.display()),
    }
    files.sort();
    let tmp = tempfile::tempdir().unwrap();
    let (mut compared, mut frames, mut ipv4) = (0, 0u64, 0u64);
    let mut mismatches = Vec::new();
    for f in &files {
        // Only Ethernet captures that read cleanly: others are rejected by netvm by design.
        let (pkts, err) = netvm_io::read_capture(f, 0);
        if err.is_some() {
            continue;
        }
        let Some(expect) = tcpdump_count(f, "ether[12:2] = 0x0800", tmp.path()) else { continue };
        let out = Command::new(env!("CARGO_BIN_EXE_netvm"))
            .args(["run", "--program"])
            .arg(&filter_prog)
            .arg("-r")
            .arg(f)
            .args(["--stats", "json"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}: {}", f.display(), String::from_utf8_lossy(&out.stderr));
        let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let got = s["ports"]["1"].as_u64().unwrap_or(0);
        assert_eq!(s["packets"].as_u64().unwrap(), pkts.len() as u64);
        if got != expect {
            mismatches.push(format!("{}: netvm {got}, tcpdump {expect}", f.display()));
        }
        compared += 1;
        frames += pkts.len() as u64;
        ipv4 += expect;
    }
    println!("compared {compared} captures, {frames} frames, {ipv4} IPv4 frames");
    assert!(compared >= 1);
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
