//! examples/capsules/router.toml: capsules and ordinary packets through one
//! engine. The reference is the capsule node of `netvm-capsule` run alone
//! on the frames, then examples/ipv4-router run alone on what it let
//! through: the engine must send the same frames out of the same ports, on
//! every engine and with two workers, and count the capsules alike.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

#[path = "../support.rs"]
mod support;

use netvm_capsule::build::build;
use netvm_capsule::wire::{ethernet_frame, ethernet_ipv4_frame, Carrier, FrameSpec, CAPSULE_PORT};
use netvm_capsule::{CapsuleNode, EnvConfig, NodeConfig, Verdict};
use netvm_copro::ess::Ess;
use netvm_vm::{Packet, Timestamp};
use support::{run_app, write_pcap, ENGINES};

fn example(rel: &str) -> String {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples")).join(rel).display().to_string()
}

fn capsule(name: &str, scratch: &[u8], src: [u8; 4], dst: [u8; 4], sport: u16) -> Vec<u8> {
    let b = build(&std::fs::read_to_string(example(&format!("capsules/{name}.nil"))).unwrap(), None, false).unwrap();
    let mut h = b.header;
    h.hops = 8;
    ethernet_ipv4_frame(src, dst, sport, CAPSULE_PORT, 64, &b.encode(&h, scratch, b"payload"))
}

/// The sample's ordinary packets with capsules between them: congested-hop
/// counters and path recorders to routed destinations, count capsules of
/// one flow (threshold 2: the third on are absorbed), node counters in an
/// IPv4 option, and malformed ones.
fn trace() -> Vec<Packet> {
    let (sample, err) = netvm_io::read_capture(Path::new(&example("ipv4-router/sample.pcap")), 0);
    assert!(err.is_none());
    let count = [&0x77u64.to_be_bytes()[..], &2u32.to_be_bytes()].concat();
    let mut out = Vec::new();
    for (i, p) in sample.into_iter().enumerate() {
        out.push(p.clone());
        let extra = match i % 5 {
            0 => capsule("hopcount", &[], [192, 0, 2, 1], [221, 126, 7, 7], 4000),
            1 => capsule("count", &count, [192, 0, 2, 2], [10, 176, 230, 9], 4001),
            2 => capsule("path", &[], [192, 0, 2, 3], [174, 74, 101, 5], 4000 + i as u16),
            3 => {
                let b = build(&std::fs::read_to_string(example("capsules/nodes.nil")).unwrap(), None, false).unwrap();
                let mut h = b.header;
                h.hops = 8;
                let spec = FrameSpec {
                    src: [192, 0, 2, 5].into(),
                    dst: [174, 74, 101, 6].into(),
                    sport: 4003,
                    port: 9,
                    ttl: 64,
                    carrier: Carrier::Ipv4Option,
                };
                ethernet_frame(&spec, &b.encode(&h, &[0], b""), b"payload").unwrap()
            }
            _ => {
                let mut f = capsule("count", &count, [192, 0, 2, 4], [221, 126, 0, 1], 4002);
                f[42] = b'X'; // no magic: a counted drop
                f
            }
        };
        out.push(Packet { data: extra, wire_len: 0, ts: p.ts, in_port: 0 }.with_wire_len());
    }
    out
}

trait WireLen {
    fn with_wire_len(self) -> Packet;
}

impl WireLen for Packet {
    fn with_wire_len(mut self) -> Packet {
        self.wire_len = self.data.len() as u32;
        self
    }
}

/// What the capsule node alone does to the trace (the stage's reference).
fn staged(trace: &[Packet]) -> (Vec<Packet>, u64, u64) {
    let env =
        EnvConfig { ipv4: Ipv4Addr::new(10, 0, 0, 1), queues: [0, 2, 3, 1, 0, 0, 0, 0], nqueues: 4, congestion: 3, ..EnvConfig::default() };
    let cfg = NodeConfig { env, admin_sources: vec!["10.9.9.9".parse().unwrap()], ..NodeConfig::default() };
    let mut node = CapsuleNode::new(cfg, Ess::new(65536, 10_000_000_000, 8, None).unwrap());
    let mut out = Vec::new();
    for p in trace {
        let mut q = p.clone();
        let ts = Timestamp { sec: q.ts.sec, nsec: q.ts.nsec };
        if !matches!(node.process(&mut q.data, ts, 0), Verdict::Drop(_)) {
            out.push(q);
        }
    }
    let s = node.stats();
    (out, s.capsules, s.dropped.values().sum())
}

#[test]
fn capsules_and_ordinary_packets_share_the_router() {
    let dir = tempfile::tempdir().unwrap();
    let trace = trace();
    let (through, capsules, dropped) = staged(&trace);
    assert!(capsules > 20 && dropped > 10, "{capsules} capsules, {dropped} dropped");
    // The reference: the router alone on what the node let through.
    let want_in = dir.path().join("staged.pcap");
    write_pcap(&want_in, &through);
    let routes = example("ipv4-router/routes.txt");
    let args = [example("ipv4-router/app.toml"), "--load".into(), format!("routes={routes}"), "-r".into(), want_in.display().to_string()];
    let (want, _) = run_app(dir.path(), &args, ENGINES[0], 0..16);
    let input = dir.path().join("in.pcap");
    write_pcap(&input, &trace);
    let args = [example("capsules/router.toml"), "--load".into(), format!("routes={routes}"), "-r".into(), input.display().to_string()];
    let mut runs: Vec<(String, Vec<&str>)> = ENGINES.iter().map(|(l, f)| (l.to_string(), f.to_vec())).collect();
    runs.push(("two-workers".into(), vec!["--workers", "2"]));
    for (label, flags) in &runs {
        let (got, stats) = run_app(dir.path(), &args, (label, flags), 0..16);
        assert_eq!(got, want, "{label}: the frames out of each port");
        let c = &stats["capsules"];
        assert_eq!(c["capsules"].as_u64(), Some(capsules), "{label}: {c}");
        assert_eq!(c["dropped"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum::<u64>(), dropped, "{label}: {c}");
        assert_eq!(c["dropped"]["malformed.magic"].as_u64().map(|n| n > 0), Some(true), "{label}: {c}");
        assert!(c["code_cache"]["hits"].as_u64().unwrap() > 0, "{label}: {c}");
        assert_eq!(stats["packets"].as_u64(), Some(through.len() as u64), "{label}: the router sees what the stage lets through");
    }
}

#[test]
fn a_bad_capsules_section_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("bad.toml");
    let text = std::fs::read_to_string(example("capsules/router.toml"))
        .unwrap()
        .replace("../ipv4-router/", &format!("{}/", example("ipv4-router")))
        .replace("ports = [0]", "ports = [0]\nhook = \"sideways\"");
    std::fs::write(&m, text).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_netvm"))
        .args(["run", m.to_str().unwrap(), "-r", &example("ipv4-router/sample.pcap")])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("hook `sideways`"), "{}", String::from_utf8_lossy(&o.stderr));
}
