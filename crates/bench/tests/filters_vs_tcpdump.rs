//! The five NetIL filters of benches/filters accept exactly the packets that
//! libpcap accepts for their tcpdump expressions, and never fault.
//!
//! Packets: the boundary cases of `mixed::edge_cases`, 40,000 frames of the
//! mixed-trace generator, and every Ethernet capture of
//! ../shared/corpus/tcpdump-tests that netvm reads cleanly (skipped with a
//! message when the corpus is absent). Each filter runs on the reference
//! interpreter (`InterpEngine`) after `netvm_verify::verify`.
//!
//! Two oracles:
//! - `filters_match_libpcap_programs` (always runs): the BPF programs libpcap
//!   compiles for the expressions (`tcpdump -ddd -y EN10MB EXPR`, embedded
//!   below), run by a small classic-BPF interpreter with `bpf_filter`'s
//!   semantics (an out-of-bounds load returns 0);
//! - `filters_agree_with_tcpdump`: tcpdump itself, `tcpdump -nn -r ALL.pcap
//!   -w OUT EXPR` on all the packets written to one capture; needs tcpdump
//!   (Debian package `tcpdump`). Without it the test is skipped with a
//!   message, unless NETVM_REQUIRE_TCPDUMP is set, where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use netvm_bench::filters::{self, Filter, ACCEPT_PORT, FILTERS};
use netvm_bench::trace;
use netvm_runtime::{Engine, InterpEngine};
use netvm_traffic::mixed;
use netvm_vm::{ExchangeBuffer, Limits, Outcome, Packet, PeState};

/// `tcpdump -ddd -y EN10MB EXPR` for each filter, in FILTERS order: (code, jt, jf, k).
const LIBPCAP: [&str; 5] = [
    "40 0 0 12;21 0 1 2048;6 0 0 262144;6 0 0 0",
    "40 0 0 12;21 0 3 2048;32 0 0 26;21 0 1 167837953;6 0 0 262144;6 0 0 0",
    "40 0 0 12;21 0 3 2048;48 0 0 23;21 0 1 6;6 0 0 262144;6 0 0 0",
    "40 0 0 12;21 0 14 2048;32 0 0 26;21 0 12 167837953;32 0 0 30;21 0 10 167903746;48 0 0 23;21 0 8 6;\
     40 0 0 20;69 6 0 8191;177 0 0 14;72 0 0 14;21 0 3 20;72 0 0 16;21 0 1 30;6 0 0 262144;6 0 0 0",
    "40 0 0 12;21 0 6 2048;32 0 0 26;21 3 0 168035332;21 2 0 167969539;21 1 0 167903746;21 0 1 167837953;\
     6 0 0 262144;6 0 0 0",
];

/// A classic BPF program: (code, jt, jf, k).
type Bpf = Vec<(u16, u8, u8, u32)>;

fn parse_bpf(s: &str) -> Bpf {
    s.split(';')
        .map(|i| {
            let v: Vec<u32> = i.split_whitespace().map(|x| x.parse().unwrap()).collect();
            (v[0] as u16, v[1] as u8, v[2] as u8, v[3])
        })
        .collect()
}

/// libpcap's `bpf_filter` for the instructions libpcap emits for these
/// expressions: a load beyond the captured bytes makes the program return 0.
fn bpf_filter(prog: &Bpf, p: &[u8]) -> u32 {
    let load = |off: u64, w: usize| -> Option<u32> {
        let o = usize::try_from(off).ok()?;
        let b = p.get(o..o.checked_add(w)?)?;
        Some(b.iter().fold(0u32, |a, &x| a << 8 | u32::from(x)))
    };
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    loop {
        let (code, jt, jf, k) = prog[pc];
        pc += 1;
        let v = match code {
            0x28 | 0x20 | 0x30 => load(u64::from(k), [4, 2, 1][usize::from((code >> 3) & 3)]), // ld{,h,b} [k]
            0x48 | 0x40 | 0x50 => load(u64::from(x) + u64::from(k), [4, 2, 1][usize::from((code >> 3) & 3)]), // ld{,h,b} [x+k]
            0xb1 => {
                // ldxb 4*([k]&0xf)
                match load(u64::from(k), 1) {
                    Some(b) => x = (b & 0xf) << 2,
                    None => return 0,
                }
                continue;
            }
            0x15 | 0x25 | 0x35 | 0x45 => {
                let t = match code {
                    0x15 => a == k,
                    0x25 => a > k,
                    0x35 => a >= k,
                    _ => a & k != 0,
                };
                pc += usize::from(if t { jt } else { jf });
                continue;
            }
            0x06 => return k,
            other => panic!("classic BPF opcode {other:#x} not handled by this test"),
        };
        match v {
            Some(v) => a = v,
            None => return 0,
        }
    }
}

/// The packets every check runs on: edge cases, generated frames, the corpus.
fn packets() -> Vec<Packet> {
    let mut pkts = mixed::edge_cases();
    pkts.push(mixed::full_path_packet());
    pkts.extend(mixed::mixed_trace(40_000, 0x5eed));
    let corpus = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/corpus/tcpdump-tests"));
    match std::fs::read_dir(&corpus) {
        Ok(rd) => {
            let mut files: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "pcap" || x == "pcapng"))
                .collect();
            files.sort();
            let (mut used, mut frames) = (0, 0);
            for f in &files {
                // Only Ethernet captures that read cleanly: netvm rejects the others by design.
                let (p, err) = netvm_io::read_capture(f, 0);
                if err.is_none() {
                    used += 1;
                    frames += p.len();
                    pkts.extend(p);
                }
            }
            eprintln!("corpus: {used} of {} captures are Ethernet and read cleanly: {frames} frames", files.len());
        }
        Err(_) => eprintln!("corpus {} not found: generated packets only", corpus.display()),
    }
    pkts
}

/// Runs `filter` on the interpreter over `pkts`: the accept verdict of each packet.
fn netvm_verdicts(filter: &Filter, pkts: &[Packet]) -> Vec<bool> {
    let verified = filters::load(filter, &filters::default_dir()).unwrap_or_else(|e| panic!("{}: {e}", filter.name));
    // Also through netvm_verify::verify directly, as an engine other than the runtime's loader would.
    netvm_verify::verify(&verified.module).unwrap();
    let code = InterpEngine.prepare(&verified).unwrap();
    let mut state = PeState::new(&verified.module);
    let limits = Limits::default();
    pkts.iter()
        .enumerate()
        .map(|(i, p)| {
            let mut xb = ExchangeBuffer::new(p.clone(), verified.module.info_size as usize);
            match code.push(&mut state, &mut xb.view(), 0, &limits) {
                Outcome::Forward(ACCEPT_PORT) => true,
                Outcome::Forward(0) => false,
                other => panic!("{}: packet {i} ({} bytes): {other} (the filters never fault)", filter.name, p.data.len()),
            }
        })
        .collect()
}

fn describe(p: &Packet) -> String {
    let n = p.data.len().min(48);
    let hex: String = p.data[..n].iter().map(|b| format!("{b:02x}")).collect();
    format!("{} bytes captured of {}: {hex}", p.data.len(), p.wire_len)
}

#[test]
fn full_path_frame_is_accepted_by_every_filter() {
    let p = mixed::full_path_packet();
    assert_eq!(p.data.len(), 64);
    for f in &FILTERS {
        assert_eq!(netvm_verdicts(f, std::slice::from_ref(&p)), [true], "{}", f.name);
    }
}

#[test]
fn filters_match_libpcap_programs() {
    let pkts = packets();
    for (f, prog) in FILTERS.iter().zip(LIBPCAP) {
        let prog = parse_bpf(prog);
        let got = netvm_verdicts(f, &pkts);
        let mut bad = Vec::new();
        let mut accepted = 0;
        for (i, (p, g)) in pkts.iter().zip(&got).enumerate() {
            let want = bpf_filter(&prog, &p.data) != 0;
            accepted += usize::from(want);
            if *g != want && bad.len() < 10 {
                bad.push(format!("packet {i}: netvm {g}, libpcap {want}: {}", describe(p)));
            }
        }
        assert!(bad.is_empty(), "{} ({}):\n{}", f.name, f.expr, bad.join("\n"));
        assert!(accepted > 100 && accepted < pkts.len() - 100, "{}: {accepted} of {} accepted: too few cases", f.name, pkts.len());
        eprintln!("{}: {accepted} of {} packets accepted, as libpcap's program", f.name, pkts.len());
    }
}

fn tcpdump_accepts(input: &Path, expr: &str, out: &Path) -> Vec<Packet> {
    let st = Command::new("tcpdump").args(["-nn", "-r"]).arg(input).arg("-w").arg(out).arg(expr).output().expect("run tcpdump");
    assert!(st.status.success(), "tcpdump {expr}: {}", String::from_utf8_lossy(&st.stderr));
    trace::read_pcap(out).expect("read tcpdump's output")
}

#[test]
fn filters_agree_with_tcpdump() {
    if Command::new("tcpdump").arg("--version").output().is_err() {
        assert!(std::env::var_os("NETVM_REQUIRE_TCPDUMP").is_none(), "tcpdump is required but not installed");
        eprintln!("SKIPPED: tcpdump is not installed (apt-get install tcpdump, or scripts/install-peers.sh)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let all = tmp.path().join("all.pcap");
    let mut pkts = packets();
    for (i, p) in pkts.iter_mut().enumerate() {
        // Some corpus timestamps do not fit pcap's 32-bit seconds; the filters ignore them.
        p.ts = netvm_vm::Timestamp { sec: 1_600_000_000 + i as u64, nsec: 0 };
    }
    trace::write_pcap(&all, &pkts).unwrap();
    // Both sides read the same bytes: the file tcpdump reads.
    let pkts = trace::read_pcap(&all).unwrap();
    for f in &FILTERS {
        let got = netvm_verdicts(f, &pkts);
        let mine: Vec<&Packet> = pkts.iter().zip(&got).filter(|(_, a)| **a).map(|(p, _)| p).collect();
        let theirs = tcpdump_accepts(&all, f.expr, &tmp.path().join(format!("{}.pcap", f.name)));
        let same = |a: &Packet, b: &Packet| a.data == b.data && a.wire_len == b.wire_len;
        if let Some(i) = (0..mine.len().max(theirs.len())).find(|&i| match (mine.get(i), theirs.get(i)) {
            (Some(a), Some(b)) => !same(a, b),
            _ => true,
        }) {
            panic!(
                "{} ({}): netvm accepts {} packets, tcpdump {}; first difference at accepted packet {i}:\n  netvm:   {}\n  tcpdump: {}",
                f.name,
                f.expr,
                mine.len(),
                theirs.len(),
                mine.get(i).map_or("-".into(), |p| describe(p)),
                theirs.get(i).map_or("-".into(), describe),
            );
        }
        eprintln!("{}: netvm and tcpdump accept the same {} of {} packets", f.name, mine.len(), pkts.len());
    }
}
