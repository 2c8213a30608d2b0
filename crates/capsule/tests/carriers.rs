//! Capsules carried in an IPv4 option and in an IPv6 option (destination
//! or hop-by-hop options header), through capsule nodes: found, run as the
//! same capsule in a UDP datagram runs, their hops, flags and scratchpad
//! written back, and every checksum that covers them still right.

use std::net::{IpAddr, Ipv4Addr};

use netvm_capsule::build::{build, Built};
use netvm_capsule::wire::{self, ethernet_frame, ipv4_header_checksum_ok, Carrier, FrameSpec, Link, CAPSULE_PORT, FLAG_RETURNED};
use netvm_capsule::{CapsuleNode, DropReason, EnvConfig, NodeConfig, Verdict};
use netvm_copro::ess::Ess;
use netvm_vm::Timestamp;

fn example(name: &str) -> Built {
    let path = format!("{}/../../examples/capsules/{name}.nil", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    build(&src, None, false).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn spec(carrier: Carrier) -> FrameSpec {
    let (src, dst): (IpAddr, IpAddr) = match carrier {
        Carrier::Ipv6Option => ("2001:db8::1".parse().unwrap(), "2001:db8:2::9".parse().unwrap()),
        _ => ("192.0.2.1".parse().unwrap(), "198.51.100.1".parse().unwrap()),
    };
    // Over an option the datagram goes to the discard port; in UDP, to the capsule port.
    let port = if carrier == Carrier::Udp { CAPSULE_PORT } else { 9 };
    FrameSpec { src, dst, sport: 4000, port, ttl: 64, carrier }
}

fn frame(b: &Built, scratch: &[u8], carrier: Carrier) -> Vec<u8> {
    let mut h = b.header;
    h.hops = 16;
    let payload: &[u8] = if carrier == Carrier::Udp { b"" } else { b"the payload" };
    ethernet_frame(&spec(carrier), &b.encode(&h, scratch, b""), payload).unwrap()
}

fn node(last: u8) -> CapsuleNode {
    let cfg = NodeConfig { env: EnvConfig { ipv4: Ipv4Addr::new(10, 0, 0, last), ..EnvConfig::default() }, ..NodeConfig::default() };
    CapsuleNode::new(cfg, Ess::new(1024, 10_000_000_000, 8, Some(1)).unwrap())
}

fn t(sec: u64) -> Timestamp {
    Timestamp { sec, nsec: 0 }
}

/// The UDP datagram's checksum is right (it does not cover an option).
fn udp_checksum_ok(f: &[u8]) -> bool {
    let ipv6 = f[12] == 0x86;
    // The datagram is the frame's tail: find it from its length field.
    let udp = (14..f.len() - 8)
        .rev()
        .find(|&u| usize::from(u16::from_be_bytes([f[u + 4], f[u + 5]])) == f.len() - u && f[u] == 0x0f && f[u + 1] == 0xa0);
    let udp = udp.expect("the UDP header (source port 4000)");
    wire::udp_checksum(f, 14, udp, ipv6) == u16::from_be_bytes([f[udp + 6], f[udp + 7]])
}

#[test]
fn the_node_counter_crosses_three_nodes_in_an_ipv4_option() {
    let b = example("nodes");
    let mut f = frame(&b, &[0], Carrier::Ipv4Option);
    let before = f.clone();
    for (i, mut n) in (1..=3).map(node).enumerate() {
        assert_eq!(n.process(&mut f, t(0), 1), Verdict::Forward);
        let l = wire::locate(&f, Link::Ethernet, CAPSULE_PORT).unwrap().unwrap();
        assert_eq!(l.carrier, Carrier::Ipv4Option);
        assert_eq!(f[l.scratch()], [i as u8 + 1]);
        assert_eq!(f[l.capsule + 12], 16 - i as u8 - 1, "a hop spent");
        assert!(ipv4_header_checksum_ok(&f, 14), "the header checksum follows the option's changes");
        assert!(udp_checksum_ok(&f));
    }
    // Only the hops, the scratchpad and the header checksum changed.
    let changed: Vec<usize> = (0..f.len()).filter(|&i| f[i] != before[i]).collect();
    assert_eq!(changed, vec![14 + 10, 14 + 11, 14 + 22 + 12, 14 + 22 + 16 + 17]);
}

#[test]
fn an_ipv6_option_in_either_options_header_runs_the_same() {
    let b = example("nodes");
    for hop_by_hop in [false, true] {
        let mut f = frame(&b, &[250], Carrier::Ipv6Option);
        if hop_by_hop {
            f[14 + 6] = 0;
        }
        let before = f.clone();
        for mut n in (1..=8).map(node) {
            assert_eq!(n.process(&mut f, t(0), 1), Verdict::Forward);
            assert!(udp_checksum_ok(&f));
        }
        let l = wire::locate(&f, Link::Ethernet, CAPSULE_PORT).unwrap().unwrap();
        assert_eq!((l.carrier, f[l.scratch()][0], f[l.capsule + 12]), (Carrier::Ipv6Option, 2, 8), "250 + 8 wraps to 2");
        let changed = (0..f.len()).filter(|&i| f[i] != before[i]).count();
        assert_eq!(changed, 2, "the hops and the scratchpad only");
    }
}

/// A capsule whose code and scratchpad state do not depend on where it sits
/// in the packet computes the same in every carrier.
#[test]
fn every_carrier_computes_the_same() {
    let mut count_sp = vec![0u8; 12];
    count_sp[..8].copy_from_slice(&0x1234_5678_9abc_def0u64.to_be_bytes());
    count_sp[8..].copy_from_slice(&3u32.to_be_bytes());
    let mut collect_sp = vec![0u8; 16];
    collect_sp[..8].copy_from_slice(&77u64.to_be_bytes());
    collect_sp[8..12].copy_from_slice(&4u32.to_be_bytes());
    let cases = [("count", count_sp.clone(), false), ("collect", collect_sp, false), ("nodes", vec![7], true)];
    for (name, sp, fits_ipv4) in cases {
        let b = example(name);
        let mut carriers = vec![Carrier::Udp, Carrier::Ipv6Option];
        if fits_ipv4 {
            carriers.push(Carrier::Ipv4Option);
        }
        let runs: Vec<Vec<(Verdict, Vec<u8>)>> = carriers
            .iter()
            .map(|&c| {
                let mut n = node(1);
                (0..6)
                    .map(|i| {
                        let mut sp = sp.clone();
                        if name == "collect" {
                            sp[12..].copy_from_slice(&(10 * i as u32 + 1).to_be_bytes());
                        }
                        let mut f = frame(&b, &sp, c);
                        let v = n.process(&mut f, t(i), 1);
                        let l = wire::locate(&f, Link::Ethernet, CAPSULE_PORT).unwrap().unwrap();
                        if c == Carrier::Ipv4Option {
                            assert!(ipv4_header_checksum_ok(&f, 14));
                        }
                        (v, f[l.scratch()].to_vec())
                    })
                    .collect()
            })
            .collect();
        for (c, r) in carriers.iter().zip(&runs).skip(1) {
            assert_eq!(r, &runs[0], "{name} in {c:?} against UDP");
        }
        assert!(runs[0].iter().any(|(v, _)| *v != Verdict::Forward) || name == "nodes", "{name}: the run exercises the store");
    }
}

#[test]
fn a_capsule_in_an_option_returns_to_its_source_once() {
    let src = ".infosize 1\n.ports 2\nsegment .push\n    push 0\n    push 0x5a\n    istore.8\n    ret 1\nends\n";
    let b = build(src, None, false).unwrap();
    for carrier in [Carrier::Ipv4Option, Carrier::Ipv6Option] {
        let mut f = frame(&b, &[0], carrier);
        let original = f.clone();
        let mut n = node(1);
        assert_eq!(n.process(&mut f, t(0), 1), Verdict::Return);
        let l = wire::locate(&f, Link::Ethernet, CAPSULE_PORT).unwrap().unwrap();
        assert_eq!((f[l.capsule + 3] & FLAG_RETURNED, f[l.scratch()][0]), (FLAG_RETURNED, 0x5a));
        let (a, len) = if carrier == Carrier::Ipv4Option { (14 + 12, 4) } else { (14 + 8, 16) };
        assert_eq!(f[a..a + len], original[a + len..a + 2 * len], "the addresses are swapped");
        if carrier == Carrier::Ipv4Option {
            assert!(ipv4_header_checksum_ok(&f, 14), "after the flags and the swap");
        }
        assert!(udp_checksum_ok(&f));
        assert_eq!(n.process(&mut f, t(0), 1), Verdict::Drop(DropReason::ReturnedTwice));
    }
}

/// A capsule option after a NOP sits at an odd offset from the IPv4
/// header: the hops byte and the scratchpad then share checksum words
/// with their neighbours, and the header checksum must still follow.
#[test]
fn an_ipv4_option_at_an_odd_offset_keeps_the_checksum_right() {
    let src = ".infosize 1\n.ports 2\nsegment .push\n    push 0\n    push 7\n    istore.8\n    ret 0\nends\n";
    let b = build(src, None, false).unwrap();
    let mut f = frame(&b, &[0], Carrier::Ipv4Option);
    let opt = 14 + 20;
    let ihl = usize::from(f[14] & 0xf) * 4;
    assert_eq!(f[14 + ihl - 1], 0, "the options end with padding");
    // One NOP before the option, one padding byte less after it.
    f.remove(14 + ihl - 1);
    f.insert(opt, 1);
    // The header's words changed: its checksum is computed again.
    f[24..26].copy_from_slice(&[0, 0]);
    let mut sum: u32 = f[14..14 + ihl].chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    assert!(ipv4_header_checksum_ok(&f, 14));
    let l = wire::locate(&f, Link::Ethernet, CAPSULE_PORT).unwrap().unwrap();
    assert_eq!((l.capsule - 14) % 2, 1, "an odd offset");
    let mut n = node(1);
    for _ in 0..3 {
        assert_eq!(n.process(&mut f, t(0), 1), Verdict::Forward);
        assert!(ipv4_header_checksum_ok(&f, 14));
    }
    let l = wire::locate(&f, Link::Ethernet, CAPSULE_PORT).unwrap().unwrap();
    assert_eq!((f[l.capsule + 12], f[l.scratch()][0]), (13, 7));
}
