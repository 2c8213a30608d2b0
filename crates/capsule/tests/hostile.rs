//! Hostile capsules: mutations of the example capsules and random bytes
//! through a node must end as a counted drop, an ordinary packet or a run
//! within the bound, the same way on every node, never a panic; and the
//! node's own work per capsule stays linear in the packet.

use netvm_capsule::build::build;
use netvm_capsule::wire::{ethernet_ipv4_frame, CAPSULE_PORT};
use netvm_capsule::{CapsuleNode, DropReason, NodeConfig, Verdict};
use netvm_copro::ess::Ess;
use netvm_vm::Timestamp;

fn node() -> CapsuleNode {
    CapsuleNode::new(NodeConfig::default(), Ess::new(256, 1_000_000_000, 4, Some(9)).unwrap())
}

fn examples() -> Vec<Vec<u8>> {
    let dir = format!("{}/../../examples/capsules", env!("CARGO_MANIFEST_DIR"));
    let mut frames = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "nil") {
            let b = build(&std::fs::read_to_string(&p).unwrap(), None, false).unwrap();
            let mut h = b.header;
            h.hops = 8;
            frames.push(ethernet_ipv4_frame([192, 0, 2, 1], [198, 51, 100, 1], 9, CAPSULE_PORT, 64, &b.encode(&h, &[7; 64], b"data")));
        }
    }
    assert!(frames.len() >= 8);
    frames
}

#[test]
fn mutated_capsules_are_counted_drops_or_bounded_runs() {
    let frames = examples();
    let mut r = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move || {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        r
    };
    let (mut a, mut b) = (node(), node());
    let mut outcomes = std::collections::BTreeMap::new();
    for i in 0..30_000 {
        let mut f = frames[i % frames.len()].clone();
        for _ in 0..1 + rnd() % 4 {
            let at = 42 + (rnd() as usize) % (f.len() - 42);
            f[at] = rnd() as u8;
        }
        if rnd() % 8 == 0 {
            let cut = 14 + (rnd() as usize) % (f.len() - 14);
            f.truncate(cut);
        }
        // A correct UDP checksum for the mutated datagram, when it is whole.
        if let Ok(Some(l)) = netvm_capsule::wire::locate(&f, netvm_capsule::Link::Ethernet, CAPSULE_PORT) {
            let c = netvm_capsule::wire::udp_checksum(&f, l.net, l.udp.unwrap(), l.ipv6);
            f[l.udp.unwrap() + 6..l.udp.unwrap() + 8].copy_from_slice(&c.to_be_bytes());
        }
        let mut g = f.clone();
        let ts = Timestamp { sec: i as u64 / 1000, nsec: 0 };
        let (va, vb) = (a.process(&mut f, ts, 1), b.process(&mut g, ts, 1));
        assert_eq!(va, vb, "two nodes in the same state decide alike");
        assert_eq!(f, g);
        if matches!(va, Verdict::Forward | Verdict::Return) {
            // The UDP checksum, updated or recomputed, is right.
            let l = netvm_capsule::wire::locate(&f, netvm_capsule::Link::Ethernet, CAPSULE_PORT).unwrap().unwrap();
            let field = u16::from_be_bytes([f[l.udp.unwrap() + 6], f[l.udp.unwrap() + 7]]);
            assert_eq!(netvm_capsule::wire::udp_checksum(&f, l.net, l.udp.unwrap(), l.ipv6), field);
        }
        let name = match va {
            Verdict::Drop(r) => r.name(),
            v => format!("{v:?}"),
        };
        *outcomes.entry(name).or_insert(0u32) += 1;
    }
    // Mutations reach the verifier, the bound and the running code.
    assert!(outcomes.keys().any(|k| k.starts_with("rejected.")), "{outcomes:?}");
    assert!(outcomes.keys().any(|k| k.starts_with("malformed.")), "{outcomes:?}");
    assert!(outcomes.contains_key("Forward"), "{outcomes:?}");
    // The same outcomes (the tiers each node chose may differ: they follow
    // measured times).
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sa.capsules, sa.forwarded, sa.returned, &sa.dropped), (sb.capsules, sb.forwarded, sb.returned, &sb.dropped));
}

#[test]
fn the_longest_costliest_capsule_stays_within_its_bound() {
    // 1,000 bytes of division-heavy code with a loop around it: the local
    // bound of the packet, not the code, decides how long it runs.
    let body = "    push 7\n    push 3\n    div\n    pop\n".repeat(83);
    let src = format!(".copro ess ess\n.copro env env\n.ports 2\nsegment .push\ntop:\n{body}    push 1\n    jnz top\n    ret 0\nends\n");
    let b = build(&src, None, false).unwrap();
    assert!(b.code.len() > 900);
    let mut h = b.header;
    h.hops = 1;
    let mut f = ethernet_ipv4_frame([192, 0, 2, 1], [198, 51, 100, 1], 9, CAPSULE_PORT, 64, &b.encode(&h, &[], &[0; 400]));
    let mut n = node();
    let t = std::time::Instant::now();
    let v = n.process(&mut f, Timestamp::default(), 1);
    let spent = t.elapsed();
    assert_eq!(v, Verdict::Drop(DropReason::Fault(netvm_vm::FaultKind::Budget)));
    // The bound is 32 ns per byte of a ~1.4 kB datagram: ~45 us of weights,
    // which overstate the interpreter's real time.
    assert!(spent < std::time::Duration::from_millis(20), "{spent:?}");
}

/// A flood of programs never seen before: the code cache keeps at most its
/// capacity, evicts the least recently used, and every capsule still runs
/// right; the programs sent last are the ones found again.
#[test]
fn a_flood_of_new_programs_keeps_the_cache_bounded() {
    let frame = |k: u32| {
        let src = format!(
            ".copro ess ess\n.copro env env\n.infosize 4\n.ports 2\nsegment .push\n    push 0\n    push {k}\n    istore.32\n    ret 0\nends\n"
        );
        let b = build(&src, None, false).unwrap();
        let mut h = b.header;
        h.hops = 8;
        ethernet_ipv4_frame([192, 0, 2, 1], [198, 51, 100, 1], 9, CAPSULE_PORT, 64, &b.encode(&h, &[0; 4], b""))
    };
    let mut n = CapsuleNode::new(NodeConfig { code_cache: 8, ..NodeConfig::default() }, Ess::new(256, 1_000_000_000, 4, Some(9)).unwrap());
    let run = |n: &mut CapsuleNode, k: u32| {
        let mut f = frame(k);
        assert_eq!(n.process(&mut f, Timestamp::default(), 1), Verdict::Forward);
        let l = netvm_capsule::wire::locate(&f, netvm_capsule::Link::Ethernet, CAPSULE_PORT).unwrap().unwrap();
        assert_eq!(f[l.scratch()], k.to_be_bytes(), "program {k} ran");
    };
    for k in 0..100 {
        run(&mut n, k);
    }
    let c = n.code_cache();
    assert_eq!((c.len(), c.stats().misses, c.stats().evictions, c.stats().hits), (8, 100, 92, 0));
    // The last eight are found again, newest first or not; the first is gone.
    for k in (92..100).rev() {
        run(&mut n, k);
    }
    assert_eq!(n.code_cache().stats().hits, 8);
    run(&mut n, 0);
    assert_eq!(n.code_cache().stats().misses, 101);
    // Program 0 took the place of the least recently used: 99, run first above.
    run(&mut n, 99);
    assert_eq!(n.code_cache().stats().misses, 102);
    run(&mut n, 93);
    assert_eq!(n.code_cache().stats().hits, 9);
}
