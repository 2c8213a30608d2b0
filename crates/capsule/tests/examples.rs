//! The capsules of examples/capsules, built from their listings and run
//! through chains of capsule nodes, as they would cross a network.

use std::net::Ipv4Addr;

use netvm_capsule::build::{build, Built};
use netvm_capsule::tier::TierPolicy;
use netvm_capsule::wire::{self, ethernet_ipv4_frame, Header, Link, CAPSULE_PORT, FLAG_RETURNED};
use netvm_capsule::{CapsuleNode, DropReason, EnvConfig, NodeConfig, Verdict};
use netvm_copro::ess::Ess;
use netvm_vm::{FaultKind, Timestamp};

fn example(name: &str) -> Built {
    let path = format!("{}/../../examples/capsules/{name}.nil", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    build(&src, None, false).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn frame(b: &Built, scratch: &[u8], src: [u8; 4], dst: [u8; 4], admin: bool) -> Vec<u8> {
    let mut h: Header = b.header;
    h.hops = 16;
    if admin {
        h.flags |= wire::FLAG_ADMIN;
    }
    ethernet_ipv4_frame(src, dst, 4000, CAPSULE_PORT, 64, &b.encode(&h, scratch, b""))
}

fn node(addr: [u8; 4]) -> CapsuleNode {
    node_with(addr, |_| {})
}

fn node_with(addr: [u8; 4], f: impl FnOnce(&mut NodeConfig)) -> CapsuleNode {
    let mut cfg = NodeConfig { env: EnvConfig { ipv4: Ipv4Addr::from(addr), ..EnvConfig::default() }, ..NodeConfig::default() };
    f(&mut cfg);
    CapsuleNode::new(cfg, Ess::new(1024, 10_000_000_000, 8, Some(1)).unwrap())
}

fn scratch(f: &[u8]) -> &[u8] {
    let l = wire::locate(f, Link::Ethernet, CAPSULE_PORT).unwrap().unwrap();
    &f[l.scratch()]
}

fn word(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

fn t(sec: u64) -> Timestamp {
    Timestamp { sec, nsec: 0 }
}

const S: [u8; 4] = [192, 0, 2, 1];
const D: [u8; 4] = [198, 51, 100, 1];

#[test]
fn count_lets_the_first_packets_through() {
    let b = example("count");
    let mut n = node([10, 0, 0, 1]);
    let mut sp = vec![0u8; 12];
    sp[..8].copy_from_slice(&0x1234_5678_9abc_def0u64.to_be_bytes());
    sp[8..].copy_from_slice(&3u32.to_be_bytes());
    let verdicts: Vec<Verdict> = (0..5)
        .map(|i| {
            let mut f = frame(&b, &sp, S, D, false);
            let v = n.process(&mut f, t(i), 1);
            let l = wire::locate(&f, Link::Ethernet, CAPSULE_PORT).unwrap().unwrap();
            if v == Verdict::Forward {
                assert_eq!(
                    wire::udp_checksum(&f, l.net, l.udp.unwrap(), false),
                    u16::from_be_bytes([f[l.udp.unwrap() + 6], f[l.udp.unwrap() + 7]]),
                    "updated for the hop"
                );
            }
            v
        })
        .collect();
    let dropped = Verdict::Drop(DropReason::Code);
    assert_eq!(verdicts, vec![Verdict::Forward, Verdict::Forward, Verdict::Forward, dropped, dropped]);
    // Another key counts apart; after tau the count starts again.
    sp[0] = 9;
    assert_eq!(n.process(&mut frame(&b, &sp, S, D, false), t(5), 1), Verdict::Forward);
    sp[0] = 0x12;
    assert_eq!(n.process(&mut frame(&b, &sp, S, D, false), t(11), 1), Verdict::Forward);
    assert_eq!(n.stats().dropped.get("dropped"), Some(&2));
}

#[test]
fn collect_sends_on_the_sum_of_n_samples() {
    let b = example("collect");
    let mut n = node([10, 0, 0, 1]);
    let mut round = |samples: &[u32], at: u64| -> Vec<Option<u32>> {
        samples
            .iter()
            .map(|&s| {
                let mut sp = vec![0u8; 16];
                sp[7] = 42;
                sp[8..12].copy_from_slice(&(samples.len() as u32).to_be_bytes());
                sp[12..].copy_from_slice(&s.to_be_bytes());
                let mut f = frame(&b, &sp, S, D, false);
                match n.process(&mut f, t(at), 1) {
                    Verdict::Forward => Some(word(scratch(&f), 12)),
                    Verdict::Drop(DropReason::Code) => None,
                    v => panic!("{v:?}"),
                }
            })
            .collect()
    };
    assert_eq!(round(&[5, 7, 11], 0), vec![None, None, Some(23)]);
    assert_eq!(round(&[1, 2], 1), vec![None, Some(3)], "the next collection starts afresh");
}

#[test]
fn path_records_every_node_and_comes_back_once() {
    let b = example("path");
    let nodes = [[10, 0, 0, 1], [10, 0, 0, 2], [10, 0, 0, 3]];
    let mut chain: Vec<CapsuleNode> = nodes.iter().map(|&a| node(a)).collect();
    let mut f = frame(&b, &[], S, nodes[2], false);
    let verdicts: Vec<Verdict> = chain.iter_mut().map(|n| n.process(&mut f, t(0), 1)).collect();
    assert_eq!(verdicts, vec![Verdict::Forward, Verdict::Forward, Verdict::Return]);
    let sp = scratch(&f).to_vec();
    assert_eq!(word(&sp, 0), 3);
    for (i, a) in nodes.iter().enumerate() {
        assert_eq!(word(&sp, 4 + 4 * i), u32::from_be_bytes(*a));
    }
    // Addressed back to the source, marked returned, checksums right.
    assert_eq!((&f[26..30], &f[30..34]), (&nodes[2][..], &S[..]));
    let l = wire::locate(&f, Link::Ethernet, CAPSULE_PORT).unwrap().unwrap();
    assert_eq!(f[l.capsule + 3] & FLAG_RETURNED, FLAG_RETURNED);
    assert_eq!(f[l.capsule + 12], 13, "three hops spent");
    assert_eq!(wire::udp_checksum(&f, l.net, l.udp.unwrap(), false), u16::from_be_bytes([f[l.udp.unwrap() + 6], f[l.udp.unwrap() + 7]]));
    // A node that is its destination again may not return it a second time.
    let mut at_source = node(S);
    assert_eq!(at_source.process(&mut f, t(0), 1), Verdict::Drop(DropReason::ReturnedTwice));
}

#[test]
fn trunk_finds_where_two_paths_meet() {
    let (tag, probe) = (example("trunk-tag"), example("trunk-probe"));
    let [n1, n2, n3, n4] = [[10, 0, 0, 1], [10, 0, 0, 2], [10, 0, 0, 3], [10, 0, 0, 4]];
    let mut nodes: std::collections::BTreeMap<[u8; 4], CapsuleNode> = [n1, n2, n3, n4].iter().map(|&a| (a, node(a))).collect();
    let key = 0x5eed_u64.to_be_bytes();
    // S -> A crosses n1, n2, n3.
    let mut f = frame(&tag, &key, S, D, false);
    for a in [n1, n2, n3] {
        assert_eq!(nodes.get_mut(&a).unwrap().process(&mut f, t(0), 1), Verdict::Forward);
    }
    // B -> S crosses n4, n2, n1.
    let mut sp = vec![0u8; 60];
    sp[..8].copy_from_slice(&key);
    let mut f = frame(&probe, &sp, D, S, false);
    for a in [n4, n2, n1] {
        assert_eq!(nodes.get_mut(&a).unwrap().process(&mut f, t(1), 1), Verdict::Forward);
    }
    let sp = scratch(&f);
    assert_eq!((word(sp, 8), word(sp, 12), word(sp, 16)), (2, u32::from_be_bytes(n2), u32::from_be_bytes(n1)));
}

#[test]
fn hopcount_loops_over_the_queues_within_the_bound() {
    let b = example("hopcount");
    assert_eq!(b.header.flags & wire::FLAG_SNAP, wire::FLAG_SNAP, "backward jumps: the SNAP dialect");
    let queues = |q: [u8; 8], n: u8| move |c: &mut NodeConfig| c.env = EnvConfig { queues: q, nqueues: n, ..c.env };
    let mut chain = [
        node_with([10, 0, 0, 1], queues([0, 2, 3, 1, 0, 0, 0, 0], 4)),
        node_with([10, 0, 0, 2], queues([3; 8], 8)),
        node_with([10, 0, 0, 3], queues([0; 8], 2)),
        node_with([10, 0, 0, 4], queues([3; 8], 8)),
    ];
    let mut f = frame(&b, &[], S, D, false);
    for n in &mut chain {
        assert_eq!(n.process(&mut f, t(0), 1), Verdict::Forward);
    }
    let sp = scratch(&f);
    assert_eq!(word(sp, 0), 3, "three hops recorded, the fourth has no room");
    let recorded: Vec<(u32, u32)> = (0..3).map(|h| (word(sp, 4 + 8 * h), word(sp, 8 + 8 * h))).collect();
    assert_eq!(recorded, vec![(0x0a00_0001, 2), (0x0a00_0002, 8), (0x0a00_0003, 0)]);
    // No bound for its code: refused before it runs.
    let mut poor = node_with([10, 0, 0, 1], |c| c.cost_per_byte = 0);
    assert_eq!(poor.process(&mut frame(&b, &[], S, D, false), t(0), 1), Verdict::Drop(DropReason::Cost));
    // A sender's limit that covers the code once but not its loop: the
    // first backward jump exceeds what is left.
    let mut h = b.header;
    h.hops = 4;
    h.cost_limit = b.cost.0.div_ceil(16) as u16;
    let mut f = ethernet_ipv4_frame(S, D, 4000, CAPSULE_PORT, 64, &b.encode(&h, &[], b""));
    let mut busy = node_with([10, 0, 0, 2], queues([3; 8], 8));
    assert_eq!(busy.process(&mut f, t(0), 1), Verdict::Drop(DropReason::Fault(FaultKind::Budget)));
}

#[test]
fn a_loop_that_never_ends_runs_out_of_budget() {
    let src = ".copro ess ess\n.copro env env\n.ports 2\nsegment .push\ntop:\n    push 1\n    jnz top\n    ret 0\nends\n";
    let b = build(src, None, false).unwrap();
    let mut n = node([10, 0, 0, 1]);
    let before = std::time::Instant::now();
    assert_eq!(n.process(&mut frame(&b, &[], S, D, false), t(0), 1), Verdict::Drop(DropReason::Fault(FaultKind::Budget)));
    assert!(before.elapsed() < std::time::Duration::from_millis(50));
}

#[test]
fn advertisements_are_protected_and_discovery_finds_the_closest() {
    let (adv, disc) = (example("advertise"), example("discover"));
    let station = [10, 9, 9, 9];
    let mut n = node_with([10, 0, 0, 1], |c| c.admin_sources = vec![std::net::IpAddr::from(station)]);
    let key = 0xabcd_u64.to_be_bytes();
    let provider = |p: [u8; 4]| [&key[..], &p[..]].concat();
    // Not from the station: refused outright.
    let mut f = frame(&adv, &provider([1, 1, 1, 1]), S, D, true);
    assert_eq!(n.process(&mut f, t(0), 1), Verdict::Drop(DropReason::Admin));
    // An ordinary capsule cannot create a protected entry.
    let mut f = frame(&adv, &provider([1, 1, 1, 1]), S, D, false);
    assert_eq!(n.process(&mut f, t(0), 1), Verdict::Forward);
    assert_eq!(n.ess().len(), 0);
    // The station's advertisement is stored; a farther one (lower TTL) does not replace it.
    let mut f = frame(&adv, &provider([2, 2, 2, 2]), station, D, true);
    assert_eq!(n.process(&mut f, t(0), 1), Verdict::Forward);
    let mut far = frame(&adv, &provider([3, 3, 3, 3]), station, D, true);
    far[22] = 10; // TTL 10
    assert_eq!(n.process(&mut far, t(0), 1), Verdict::Forward);
    // A host discovers it.
    let mut sp = vec![0u8; 16];
    sp[..8].copy_from_slice(&key);
    let mut f = frame(&disc, &sp, S, D, false);
    assert_eq!(n.process(&mut f, t(1), 1), Verdict::Return);
    assert_eq!((word(scratch(&f), 8), word(scratch(&f), 12)), (0x0202_0202, 0x0a00_0001));
}

#[test]
fn ordinary_and_malformed_packets() {
    let b = example("count");
    let mut n = node([10, 0, 0, 1]);
    let mut ordinary = ethernet_ipv4_frame(S, D, 4000, 53, 64, b"dns");
    let copy = ordinary.clone();
    assert_eq!(n.process(&mut ordinary, t(0), 1), Verdict::Ordinary);
    assert_eq!(ordinary, copy, "untouched");
    let mut f = frame(&b, &[0; 12], S, D, false);
    f[42] = b'X';
    assert_eq!(n.process(&mut f, t(0), 1), Verdict::Drop(DropReason::Malformed(wire::Malformed::Magic)));
    let mut h = b.header;
    h.hops = 0;
    let mut f = ethernet_ipv4_frame(S, D, 4000, CAPSULE_PORT, 64, &b.encode(&h, &[0; 12], b""));
    assert_eq!(n.process(&mut f, t(0), 1), Verdict::Drop(DropReason::Hops));
    let st = n.stats();
    assert_eq!((st.ordinary, st.capsules), (1, 2));
    assert_eq!(st.dropped.keys().cloned().collect::<Vec<_>>(), vec!["hops".to_string(), "malformed.magic".to_string()]);
}

/// Before each capsule the node tells the environment the packet's facts
/// (the interface it came in on, its time, the hops left after this node),
/// in every tier: a capsule that copies them into its scratchpad reads
/// each packet's own, never the previous one's.
#[test]
fn the_environment_holds_each_packets_facts_in_every_tier() {
    let src = "
.copro ess ess
.copro env env
.infosize 12
.ports 2
segment .push
    push 0
    copro.out env, 5           ; interface
    istore.32
    push 4
    copro.out env, 9           ; time, ms
    istore.32
    push 8
    copro.out env, 10          ; hops left
    istore.32
    ret 0
ends
";
    let b = build(src, None, false).unwrap();
    for tier in [TierPolicy::Interpret, TierPolicy::Baseline, TierPolicy::Cranelift] {
        let mut n = node_with([10, 0, 0, 1], |c| c.tier = tier);
        for (i, (interface, hops)) in [(1u16, 16u8), (7, 3), (65535, 1), (2, 200)].into_iter().enumerate() {
            let mut h: Header = b.header;
            h.hops = hops;
            let mut f = ethernet_ipv4_frame(S, D, 4000, CAPSULE_PORT, 64, &b.encode(&h, &[0; 12], b""));
            let ts = Timestamp { sec: 1_700_000_000 + i as u64, nsec: 250_000_000 * i as u32 };
            assert_eq!(n.process(&mut f, ts, interface), Verdict::Forward, "{tier:?}");
            let sp = scratch(&f);
            let ms = (ts.sec * 1000 + u64::from(ts.nsec) / 1_000_000) as u32;
            assert_eq!((word(sp, 0), word(sp, 4), word(sp, 8)), (u32::from(interface), ms, u32::from(hops - 1)), "{tier:?} packet {i}");
        }
    }
}
