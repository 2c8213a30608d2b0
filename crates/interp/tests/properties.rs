//! Properties of the reference interpreter on generated and random programs.
//!
//! - Programs from `netvm-fuzzgen` × generated packets: the interpreter never
//!   panics, every run ends with a valid outcome (`Forward(p)` with
//!   `p < .ports`, `Drop`, or a fault), and runs are deterministic (same
//!   program, same packets, fresh state: same outcomes and the same packet,
//!   info, data and coprocessor contents).
//! - Random bytes as a `.push` segment, and random instruction sequences
//!   (valid opcodes, random operands): the verifier never panics, and when it
//!   accepts, the interpreter never panics on a few packets.
//! - Infinite loops (`top: jump top` and generated unbounded loops) are
//!   stopped by the budget on every packet.
//!
//! Case counts are bounded so that each property runs in a few seconds.

use netil::insn::encoded_len;
use netil::{encode, CoproDecl, Mem, Module, Opcode, OperandKind, Operands, SwitchTable};
use netvm_fuzzgen::arbitrary::Unstructured;
use netvm_fuzzgen::{generate_from_bytes, generate_infinite_loop, generate_packets, new_state, observe, GenConfig};
use netvm_interp::InterpCode;
use netvm_verify::verify;
use netvm_vm::{ExchangeBuffer, FaultKind, Limits, Outcome, Packet, PeCode};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::ValueTree;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// Checks that an outcome is one `.push` may end with.
fn check_outcome(o: Outcome, m: &Module) -> Result<(), TestCaseError> {
    match o {
        Outcome::Forward(p) => prop_assert!(p < m.out_ports, "forwarded to port {} of {}", p, m.out_ports),
        Outcome::Drop | Outcome::Fault(_) => {}
        Outcome::Exit => prop_assert!(false, ".push ended with exit"),
    }
    Ok(())
}

/// A few fixed packets of the usual shapes (runt, Ethernet/IPv4, truncated, empty).
fn fixed_packets() -> Vec<Packet> {
    let mut ip = vec![0u8; 60];
    ip[12] = 0x08;
    ip[14] = 0x45;
    ip[23] = 6;
    let mut trunc = Packet::from_bytes(ip[..20].to_vec());
    trunc.wire_len = 60;
    vec![Packet::from_bytes(vec![]), Packet::from_bytes(vec![1, 2, 3]), Packet::from_bytes(ip), trunc]
}

/// Runs `m` (if it verifies) on `packets` with a small budget; returns
/// whether it verified.
fn run_if_valid(m: &Module, packets: &[Packet]) -> Result<bool, TestCaseError> {
    let Ok(v) = verify(m) else { return Ok(false) };
    let code = InterpCode::new(&v);
    let limits = Limits { budget: 1_000 };
    let (init, obs) = observe(&code, m, packets, &limits);
    prop_assert!(matches!(init, Outcome::Exit | Outcome::Fault(_)), "init ended with {init:?}");
    for o in obs {
        check_outcome(o.outcome, m)?;
    }
    Ok(true)
}

proptest! {
    #![proptest_config(config(1000))]

    /// Generated programs on generated packets: valid outcomes, deterministic runs.
    #[test]
    fn generated_programs_run_and_are_deterministic(seed in vec(any::<u8>(), 0..8000), pkt_seed in vec(any::<u8>(), 0..4000)) {
        let g = generate_from_bytes(&seed, &GenConfig::default());
        let packets = generate_packets(&mut Unstructured::new(&pkt_seed), 8).expect("packets");
        let v = verify(&g.module).map_err(|e| TestCaseError::fail(format!("{e}\n{}", g.listing)))?;
        let limits = Limits { budget: 10_000 };
        let code = InterpCode::new(&v);
        let (init, first) = observe(&code, &g.module, &packets, &limits);
        prop_assert!(matches!(init, Outcome::Exit | Outcome::Fault(_)), "init ended with {:?}", init);
        for (o, p) in first.iter().zip(&packets) {
            check_outcome(o.outcome, &g.module)?;
            // Programs change bytes, never lengths.
            prop_assert_eq!(o.packet.len(), p.data.len());
            prop_assert_eq!(o.info.len(), g.module.info_size as usize);
            prop_assert_eq!(o.data.len(), g.module.data_size as usize);
        }
        // The same code again, and freshly prepared code: identical observations.
        let (init2, second) = observe(&code, &g.module, &packets, &limits);
        prop_assert_eq!(init, init2);
        prop_assert_eq!(&first, &second);
        let (init3, third) = observe(&InterpCode::new(&v), &g.module, &packets, &limits);
        prop_assert_eq!(init, init3);
        prop_assert_eq!(&first, &third);
    }

    /// Random bytes as a `.push` segment: verify never panics; accepted code runs.
    #[test]
    fn random_segments(code in vec(any::<u8>(), 1..96), init in proptest::option::weighted(0.2, vec(any::<u8>(), 1..32)),
                       max_stack in 0u16..16, locals in 0u16..4, info in 0u32..32, data in 0u32..32, ports in 0u16..4, copros in 0usize..3) {
        let m = Module {
            max_stack,
            locals,
            info_size: info,
            data_size: data,
            out_ports: ports,
            copros: (0..copros).map(|i| CoproDecl { name: format!("c{i}"), kind: "counters".into() }).collect(),
            init,
            push: Some(code),
            interface: Default::default(),
        };
        run_if_valid(&m, &fixed_packets())?;
    }
}

proptest! {
    #![proptest_config(config(1000))]

    /// Generated programs with a few bytes of `.push` (or `.init`) changed,
    /// inserted or removed: verify never panics; the many that still verify
    /// (with other immediates, ports, offsets or targets) run.
    #[test]
    fn mutated_generated_segments(seed in vec(any::<u8>(), 0..4000), edits in vec((any::<u16>(), any::<u8>(), 0u8..4), 1..4), in_init in any::<bool>()) {
        let mut m = generate_from_bytes(&seed, &GenConfig::default()).module;
        let seg = if in_init && m.init.is_some() { m.init.as_mut() } else { m.push.as_mut() }.expect("segment");
        for (pos, val, kind) in edits {
            let at = pos as usize % (seg.len() + 1);
            match kind {
                0 if at < seg.len() => seg[at] = val,
                1 => seg.insert(at, val),
                2 if at < seg.len() && seg.len() > 1 => { seg.remove(at); }
                _ if at < seg.len() => seg[at] ^= 1 << (val % 8),
                _ => {}
            }
        }
        run_if_valid(&m, &fixed_packets())?;
    }
}

/// One random instruction: an opcode index and seeds for its operands.
type RawInsn = (usize, u32, u32, u8);

/// Builds a segment from random instructions. Operands are random but
/// mostly plausible: small locals, ports and pick depths; targets on
/// instruction boundaries (forward or backward), sometimes anywhere.
/// Pushes are inserted where the stack would underflow, so that more
/// sequences verify and reach the interpreter.
fn build(raw: &[RawInsn], push: bool) -> Vec<u8> {
    let mem = |x: u32| [Mem::Packet, Mem::Info, Mem::Data][(x % 3) as usize];
    let mut items: Vec<(Opcode, Operands)> = Vec::new();
    let mut targets: Vec<Option<u32>> = Vec::new(); // instruction index to jump to, per item
    let mut depth: u32 = u32::from(push);
    for &(opi, a, b, n) in raw {
        let op = Opcode::ALL[opi % Opcode::ALL.len()];
        let op = if !push && matches!(op, Opcode::Ret | Opcode::RetPop | Opcode::Drop) { Opcode::Exit } else { op };
        let operands = match op.operands() {
            OperandKind::None => Operands::None,
            OperandKind::Imm32 => Operands::Imm(if b % 2 == 0 { a % 64 } else { a }),
            OperandKind::Target => Operands::Target(0),
            OperandKind::Port => Operands::Port((a % 4) as u16),
            OperandKind::Local => Operands::Local((a % 4) as u16),
            OperandKind::Depth => Operands::Depth((a % 4) as u8),
            OperandKind::Mem => Operands::Mem(mem(a)),
            OperandKind::MemPair => Operands::MemPair(mem(a), mem(b)),
            OperandKind::CoproReg => Operands::CoproReg { copro: (a % 2) as u8, reg: (b % 3) as u8 },
            OperandKind::CoproOp => Operands::CoproOp { copro: (a % 2) as u8, op: (b % 4) as u8 },
            OperandKind::Switch => {
                let mut vals: Vec<u32> = (0..n % 4).map(|k| a.wrapping_add(u32::from(k) * (b % 5 + 1))).collect();
                vals.sort_unstable();
                vals.dedup();
                Operands::Switch(SwitchTable { default: 0, cases: vals.into_iter().map(|v| (v, 0)).collect() })
            }
        };
        let pick = if let Operands::Depth(d) = operands { d } else { 0 };
        while depth < op.stack_needs(pick) {
            items.push((Opcode::Push, Operands::Imm(a >> 8)));
            targets.push(None);
            depth += 1;
        }
        depth = depth - op.pops() + op.pushes();
        let is_jump = op.operands() == OperandKind::Target || op == Opcode::Switch;
        targets.push(is_jump.then_some(b));
        items.push((op, operands));
    }
    items.push((if push { Opcode::Drop } else { Opcode::Exit }, Operands::None));
    targets.push(None);
    // Lay out, then resolve targets to instruction offsets.
    let mut offsets = Vec::with_capacity(items.len() + 1);
    let mut at = 0u32;
    for (op, operands) in &items {
        offsets.push(at);
        at += encoded_len(*op, operands);
    }
    offsets.push(at);
    let pick_target = |seed: u32, k: u32| -> i64 {
        if seed % 16 == 15 {
            i64::from(seed.wrapping_add(k) % (at + 8)) - 4
        } else {
            i64::from(offsets[(seed.wrapping_add(k.wrapping_mul(7)) as usize) % items.len()])
        }
    };
    let mut code = Vec::with_capacity(at as usize);
    for (i, (op, operands)) in items.iter().enumerate() {
        let operands = match (targets[i], operands) {
            (Some(seed), Operands::Target(_)) => Operands::Target(pick_target(seed, 0)),
            (Some(seed), Operands::Switch(s)) => Operands::Switch(SwitchTable {
                default: pick_target(seed, 1),
                cases: s.cases.iter().enumerate().map(|(k, (v, _))| (*v, pick_target(seed, k as u32 + 2))).collect(),
            }),
            _ => operands.clone(),
        };
        encode(*op, &operands, offsets[i], &mut code).expect("encodes");
    }
    code
}

fn raw_insns(max: usize) -> impl Strategy<Value = Vec<RawInsn>> {
    vec((0..Opcode::ALL.len(), any::<u32>(), any::<u32>(), any::<u8>()), 0..max)
}

proptest! {
    #![proptest_config(config(2000))]

    /// Random instruction sequences: verify never panics; accepted code runs.
    #[test]
    fn random_instruction_sequences(push in raw_insns(40), init in proptest::option::weighted(0.3, raw_insns(12)),
                                    max_stack in 4u16..24, info in 0u32..24, data in 0u32..24, ports in 1u16..5, copros in 0usize..3) {
        let m = Module {
            max_stack,
            locals: 4,
            info_size: info,
            data_size: data,
            out_ports: ports,
            copros: (0..copros).map(|i| CoproDecl { name: format!("c{i}"), kind: "counters".into() }).collect(),
            init: init.map(|raw| build(&raw, false)),
            push: Some(build(&push, true)),
            interface: Default::default(),
        };
        run_if_valid(&m, &fixed_packets())?;
    }
}

/// Sanity check of the random-sequence builder: enough sequences verify
/// that the property above exercises the interpreter, not just the verifier.
#[test]
fn random_instruction_sequences_often_verify() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = raw_insns(40);
    let (mut ok, n) = (0, 500);
    for _ in 0..n {
        let raw = strategy.new_tree(&mut runner).unwrap().current();
        let m = Module {
            max_stack: 16,
            locals: 4,
            info_size: 16,
            data_size: 16,
            out_ports: 4,
            push: Some(build(&raw, true)),
            ..Module::default()
        };
        ok += usize::from(verify(&m).is_ok());
    }
    println!("{ok} of {n} random instruction sequences verify");
    assert!(ok * 20 >= n, "only {ok} of {n} random sequences verify");
}

const PACKETS: usize = 1_000;

/// `top: jump top` faults with `budget` on every one of 1,000 packets.
#[test]
fn jump_to_self_is_stopped_by_the_budget() {
    let m = netil::assemble("segment .push\ntop: jump top\nends").unwrap().module;
    let code = InterpCode::new(&verify(&m).unwrap());
    let mut state = new_state(&m);
    for (i, budget) in (0..PACKETS).zip([0u64, 1, 2, 1_000, 100_000].into_iter().cycle()) {
        let mut xb = ExchangeBuffer::new(Packet::from_bytes(vec![i as u8; i % 100]), 0);
        assert_eq!(code.push(&mut state, &mut xb.view(), 0, &Limits { budget }), Outcome::Fault(FaultKind::Budget), "packet {i}");
    }
}

proptest! {
    #![proptest_config(config(10))]

    /// Generated unbounded loops (no exits, nothing else that can fault)
    /// fault with `budget` on every one of 1,000 generated packets.
    #[test]
    fn generated_infinite_loops_are_stopped_by_the_budget(seed in vec(any::<u8>(), 0..4000), pkt_seed in vec(any::<u8>(), 0..2000)) {
        let mut u = Unstructured::new(&seed);
        let cfg = GenConfig { max_insns: 60, ..GenConfig::default() };
        let m = generate_infinite_loop(&mut u, &cfg).expect("generates");
        let v = verify(&m).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let code = InterpCode::new(&v);
        let mut pu = Unstructured::new(&pkt_seed);
        let limits = Limits { budget: 2_000 };
        let mut state = new_state(&m);
        for i in 0..PACKETS {
            let p = netvm_fuzzgen::generate_packet(&mut pu).expect("packet");
            let mut xb = ExchangeBuffer::new(p.clone(), m.info_size as usize);
            let out = code.push(&mut state, &mut xb.view(), p.in_port, &limits);
            prop_assert_eq!(out, Outcome::Fault(FaultKind::Budget), "packet {}", i);
        }
    }
}
