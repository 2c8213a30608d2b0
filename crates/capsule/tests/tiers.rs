//! The tiers agree: generated capsules, interpreted and compiled, give the
//! same verdicts, the same packets and the same state-store effects, budget
//! faults included.

use netvm_capsule::build::build;
use netvm_capsule::tier::TierPolicy;
use netvm_capsule::wire::{ethernet_ipv4_frame, CAPSULE_PORT};
use netvm_capsule::{CapsuleNode, Dialect, NodeConfig, Verdict};
use netvm_copro::ess::Ess;
use netvm_vm::{Coprocessor, Timestamp};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random program of the capsule profile: straight-line blocks of stack,
/// arithmetic, scratchpad, packet, local, store and environment
/// instructions, forward branches, and (SNAP) a counted loop or one that
/// only the budget ends.
fn program(r: &mut Rng, snap: bool) -> String {
    let mut src = String::from(".copro ess ess\n.copro env env\n.infosize 32\n.locals 4\n.ports 2\nsegment .push\n");
    // Locals 0-3 written first, so that any later read is allowed.
    for l in 0..4 {
        src += &format!("    push {}\n    locstore {l}\n", r.below(1000));
    }
    let blocks = 1 + r.below(4);
    for b in 0..blocks {
        src += &format!("b{b}:\n");
        if snap && r.below(2) == 0 {
            // A loop on local 0: counted down (ends) or, rarely, not.
            let step = if r.below(5) == 0 { 0 } else { 1 };
            src += &format!("    push {}\n    locstore 0\nl{b}:\n    locload 0\n    push {step}\n    sub\n    dup\n    locstore 0\n    push 0\n    iload.8\n    add\n    push 1\n    istore.8\n    locload 0\n    jnz l{b}\n", 1 + r.below(20));
        }
        let mut depth = 0u32;
        for _ in 0..r.below(12) {
            let choice = r.below(14);
            match choice {
                0 | 1 => {
                    src += &format!("    push {}\n", r.below(5000));
                    depth += 1;
                }
                2 if depth >= 2 => {
                    let op = ["add", "sub", "mul", "and", "or", "xor", "shl", "shr", "div", "mod", "cmp.lt", "cmp.eq", "rotl", "sar"]
                        [r.below(14) as usize];
                    src += &format!("    {op}\n");
                    depth -= 1;
                }
                3 => {
                    src += &format!("    push {}\n    iload.{}\n", r.below(36), [8, 16, 32][r.below(3) as usize]);
                    depth += 1;
                }
                4 if depth >= 1 => {
                    src += &format!("    push {}\n    swap\n    istore.{}\n", r.below(34), [8, 16, 32][r.below(3) as usize]);
                    depth -= 1;
                }
                5 => {
                    src += &format!("    push {}\n    upload.{}\n", r.below(120), [8, 16, 32][r.below(3) as usize]);
                    depth += 1;
                }
                6 => {
                    src += &format!("    locload {}\n", r.below(4));
                    depth += 1;
                }
                7 if depth >= 1 => {
                    src += &format!("    locstore {}\n", r.below(4));
                    depth -= 1;
                }
                8 => {
                    // A store operation on one of a few keys.
                    let op = r.below(4);
                    src += &format!("    push 0\n    copro.in ess, 0\n    push {}\n    copro.in ess, 1\n", r.below(4));
                    if op % 2 == 1 {
                        src += &format!("    push {}\n    copro.in ess, 3\n", r.below(100));
                    }
                    src += &format!("    copro.invoke ess, {op}\n    copro.out ess, {}\n", r.below(3));
                    depth += 1;
                }
                9 => {
                    src += &format!("    copro.out env, {}\n", r.below(13));
                    depth += 1;
                }
                10 if depth >= 1 => {
                    src += "    pop\n";
                    depth -= 1;
                }
                11 if depth >= 1 => {
                    src += "    dup\n";
                    depth += 1;
                }
                _ => {}
            }
            if depth > 10 {
                src += "    pop\n";
                depth -= 1;
            }
        }
        for _ in 0..depth {
            src += "    pop\n";
        }
        // Leave the block: on to the next, or branch forward past it.
        if b + 1 < blocks && r.below(3) == 0 {
            src += &format!("    push 0\n    iload.8\n    jnz b{}\n", b + 1);
        }
    }
    src += ["    ret 0\n", "    ret 1\n", "    drop\n", "    push 0\n    iload.8\n    ret.pop\n"][r.below(4) as usize];
    src + "ends\n"
}

fn node(tier: TierPolicy) -> CapsuleNode {
    let cfg = NodeConfig { tier, ..NodeConfig::default() };
    CapsuleNode::new(cfg, Ess::new(64, 5_000_000_000, 4, Some(11)).unwrap())
}

#[test]
fn interpreted_and_compiled_capsules_agree() {
    let mut r = Rng(0x853c_49e6_748f_ea9b);
    let (mut programs, mut compared) = (0, 0);
    let mut verdicts = std::collections::BTreeSet::new();
    while programs < 60 {
        let snap = r.below(2) == 0;
        let src = program(&mut r, snap);
        let Ok(b) = build(&src, Some(if snap { Dialect::Snap } else { Dialect::Wasp }), false) else { continue };
        programs += 1;
        let (mut interp, mut native, mut baseline) = (node(TierPolicy::Interpret), node(TierPolicy::Cranelift), node(TierPolicy::Baseline));
        for k in 0..6 {
            let mut h = b.header;
            h.hops = 9;
            h.cost_limit = if k % 3 == 2 { 40 } else { 0 };
            let scratch: Vec<u8> = (0..32).map(|_| r.below(256) as u8).collect();
            let payload: Vec<u8> = (0..r.below(40)).map(|_| r.below(256) as u8).collect();
            let frame = ethernet_ipv4_frame([192, 0, 2, 1], [198, 51, 100, 1], 9, CAPSULE_PORT, 64, &b.encode(&h, &scratch, &payload));
            let (mut f, mut g, mut e) = (frame.clone(), frame.clone(), frame);
            let ts = Timestamp { sec: k, nsec: 0 };
            let (vi, vn, vb) = (interp.process(&mut f, ts, 1), native.process(&mut g, ts, 1), baseline.process(&mut e, ts, 1));
            assert_eq!(vi, vn, "cranelift: packet {k} of\n{src}");
            assert_eq!(f, g, "cranelift: packet {k} of\n{src}");
            assert_eq!(vi, vb, "baseline: packet {k} of\n{src}");
            assert_eq!(f, e, "baseline: packet {k} of\n{src}");
            verdicts.insert(match vi {
                Verdict::Drop(d) => d.name(),
                v => format!("{v:?}"),
            });
            compared += 1;
        }
        assert_eq!(interp.ess().dump(), native.ess().dump(), "cranelift: the store after\n{src}");
        assert_eq!(interp.ess().dump(), baseline.ess().dump(), "baseline: the store after\n{src}");
        for n in [&native, &baseline] {
            assert_eq!(n.stats().compile_failures, 0, "{src}");
            assert!(n.stats().native > 0, "ran natively: {src}");
        }
    }
    assert!(compared >= 300);
    // The generator reaches every kind of ending.
    for v in ["Forward", "Return", "dropped", "fault.budget"] {
        assert!(verdicts.contains(v), "{v} never seen: {verdicts:?}");
    }
}

#[test]
fn auto_compiles_a_program_that_keeps_coming() {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/capsules/hopcount.nil")).unwrap();
    let b = build(&src, None, false).unwrap();
    let mut h = b.header;
    h.hops = 255;
    let frame = ethernet_ipv4_frame([192, 0, 2, 1], [198, 51, 100, 1], 9, CAPSULE_PORT, 64, &b.encode(&h, &[], b""));
    let mut n = node(TierPolicy::Auto);
    let mut runs = 0;
    while n.stats().compiled == 0 && runs < 2_000_000 {
        let mut f = frame.clone();
        assert_eq!(n.process(&mut f, Timestamp::default(), 1), Verdict::Forward);
        runs += 1;
    }
    assert_eq!(n.stats().compiled, 1, "compiled after {runs} runs");
    assert!(runs > 1, "interpreted first: {runs}");
    let m = n.tier_model();
    assert!(m.compile_ns(51) > 0.0);
    let mut f = frame.clone();
    n.process(&mut f, Timestamp::default(), 1);
    assert!(n.stats().native > 0);
}
