//! `netvm filter` and `netvm run --filter` against tcpdump: the same packets
//! written (bytes, timestamps, lengths), the same counts, with both engines;
//! `-d`; and an invalid expression printed with a caret, exit 2.
//!
//! Needs tcpdump (installed by scripts/setup.sh); without it the comparisons
//! are skipped with a message unless NETVM_REQUIRE_TCPDUMP=1.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn netvm(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_netvm")).args(args).output().unwrap()
}

fn have_tcpdump() -> bool {
    if Command::new("tcpdump").arg("--version").output().is_ok() {
        return true;
    }
    assert!(std::env::var_os("NETVM_REQUIRE_TCPDUMP").is_none(), "tcpdump is required but not installed");
    eprintln!("SKIPPED: tcpdump is not installed (apt-get install tcpdump)");
    false
}

fn packets(p: &Path) -> Vec<(Vec<u8>, u32, u64, u32)> {
    let (pk, err) = netvm_io::read_capture(p, 0);
    assert!(err.is_none(), "{}: {err:?}", p.display());
    pk.into_iter().map(|p| (p.data, p.wire_len, p.ts.sec, p.ts.nsec / 1000)).collect()
}

/// tcpdump's option to keep a nanosecond capture's precision (it writes
/// microseconds unless asked; netvm keeps the input's precision).
pub fn precision_of(trace: &Path) -> Vec<&'static str> {
    let magic = std::fs::read(trace).ok().and_then(|b| b.get(..4).map(|m| [m[0], m[1], m[2], m[3]]));
    match magic {
        Some([0x4d, 0x3c, 0xb2, 0xa1] | [0xa1, 0xb2, 0x3c, 0x4d]) => vec!["--time-stamp-precision", "nano"],
        _ => vec![],
    }
}

const EXPRS: &[&str] = &[
    "ip",
    "tcp port 80",
    "host 10.1.1.1 and port 80 or 443",
    "udp and not port 53",
    "tcp[tcpflags] & (tcp-syn|tcp-ack) = tcp-syn",
    "vlan and ip",
    "ip6 or arp",
    "ip[2:2] > 100 and greater 120",
    "mpls and ip",
    "",
];

#[test]
fn writes_what_tcpdump_writes() {
    if !have_tcpdump() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut traces = vec![root().join("examples/traces/mixed.pcap")];
    for f in ["802.1ad_QinQ.pcap", "tok2str-oobr-2.pcap", "ipv6-routing-header.pcap", "dhcp-rfc3004.pcap"] {
        let p = root().join("../shared/corpus/tcpdump-tests").join(f);
        if p.exists() {
            traces.push(p);
        }
    }
    for trace in &traces {
        for expr in EXPRS {
            let want = tmp.path().join("tcpdump.pcap");
            let st =
                Command::new("tcpdump").args(precision_of(trace)).arg("-r").arg(trace).arg("-w").arg(&want).arg(expr).output().unwrap();
            assert!(st.status.success(), "tcpdump {expr}: {}", String::from_utf8_lossy(&st.stderr));
            for engine in ["jit", "interp", "baseline", "tiered"] {
                let got = tmp.path().join(format!("netvm-{engine}.pcap"));
                let mut args = vec!["filter", "--engine", engine, "-r", trace.to_str().unwrap(), "-w", got.to_str().unwrap()];
                args.extend(expr.split(' ').filter(|w| !w.is_empty()));
                let out = netvm(&args);
                assert_eq!(out.status.code(), Some(0), "{expr}: {}", String::from_utf8_lossy(&out.stderr));
                assert_eq!(packets(&got), packets(&want), "`{expr}` on {} ({engine})", trace.display());
                assert!(
                    std::fs::read(&got).unwrap() == std::fs::read(&want).unwrap(),
                    "`{expr}` on {} ({engine}): files differ",
                    trace.display()
                );
                let mut args = vec!["filter", "--count", "--engine", engine, "-r", trace.to_str().unwrap()];
                args.push(expr);
                let out = netvm(&args);
                let n: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
                assert_eq!(n, packets(&want).len(), "`{expr}` -c on {}", trace.display());
            }
        }
    }
}

#[test]
fn run_filter_sends_matches_to_port_1() {
    let trace = root().join("examples/traces/mixed.pcap");
    let out = netvm(&["run", "--filter", "tcp port 80", "-r", trace.to_str().unwrap(), "--stats", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = netvm(&["filter", "--count", "-r", trace.to_str().unwrap(), "tcp", "port", "80"]);
    let n: u64 = String::from_utf8_lossy(&c.stdout).trim().parse().unwrap();
    assert_eq!(s["ports"]["1"].as_u64().unwrap(), n);
    assert!(n > 0);
}

#[test]
fn dump_prints_netil_that_assembles() {
    let out = netvm(&["filter", "-d", "ip", "and", "tcp"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("segment .push") && text.contains("ret 1"), "{text}");
    netil::assemble(&text).expect("the listing assembles");
}

#[test]
fn errors_show_a_caret_and_exit_2() {
    for (expr, token, msg) in [
        ("tcp port 80 and and", "and", "syntax error"),
        ("host 10.1.1.1 and port 99999", "99999", "port"),
        ("ip[0] / 0 = 1", "ip[0]", "division by zero"),
        ("tcp port http2", "http2", "unknown port"),
    ] {
        let out = netvm(&["filter", "-d", expr]);
        assert_eq!(out.status.code(), Some(2), "`{expr}`");
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().collect();
        let at = lines.iter().position(|l| *l == expr).unwrap_or_else(|| panic!("`{expr}`: {err}"));
        let caret = lines[at + 1];
        let col = caret.find('^').unwrap();
        assert!(expr[col..].starts_with(token.split(' ').next().unwrap()), "`{expr}`: caret at {col}: {err}");
        assert!(err.contains(msg), "`{expr}`: {err}");
    }
}

#[test]
fn protocols_file_adds_protocols() {
    let db = root().join("examples/protocols/tunnels.toml");
    let out = netvm(&["filter", "-d", "vxlan.vni = 42"]);
    assert_eq!(out.status.code(), Some(2), "vxlan is not built in");
    let out = netvm(&["filter", "--protocols", db.to_str().unwrap(), "-d", "vxlan.vni", "=", "42"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let trace = root().join("examples/traces/mixed.pcap");
    let out = netvm(&["filter", "--protocols", db.to_str().unwrap(), "--count", "-r", trace.to_str().unwrap(), "gre or vxlan"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn the_default_engine_is_tiered_and_counts_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("long.pcap");
    // 20,000 frames, every third TCP: past the threshold at which the JIT's
    // code is compiled and taken up.
    let mut w = netvm_io::PcapWriter::create(&trace).unwrap();
    for i in 0..20_000u32 {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[23] = if i % 3 == 0 { 6 } else { 17 };
        w.write_record(&f, 60, netvm_vm::Timestamp { sec: u64::from(i), nsec: 0 }).unwrap();
    }
    w.finish().unwrap();
    let out = netvm(&["filter", "-r", trace.to_str().unwrap(), "--count", "--stats", "tcp"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "6667");
    let stats: serde_json::Value = serde_json::from_slice(out.stderr.split(|&b| b == b'\n').next().unwrap()).unwrap();
    assert_eq!(stats["engine"], "tiered");
    // Whether the JIT finished before the capture did depends on the machine;
    // when it did, the first tier ran at least the threshold's packets.
    if let Some(first) = stats["first_tier_packets"].as_u64() {
        assert!((4096..20_000).contains(&first), "{stats}");
    }
}
