//! Property tests: the verifier never panics on any input, what it accepts
//! is self-consistent, and programs valid by construction are accepted.

use netil::insn::encoded_len;
use netil::{encode, CoproDecl, Mem, Module, Opcode, OperandKind, Operands, SegmentKind, SwitchTable};
use netvm_traffic::SplitMix64;
use netvm_verify::{verify, SegmentInfo, Verified};
use proptest::prelude::*;

fn module_with(push: Vec<u8>, init: Option<Vec<u8>>, params: (u16, u16, u32, u32, u16, usize)) -> Module {
    let (max_stack, locals, info_size, data_size, out_ports, ncopros) = params;
    Module {
        max_stack,
        locals,
        info_size,
        data_size,
        out_ports,
        copros: (0..ncopros).map(|i| CoproDecl { name: format!("c{i}"), kind: "counters".into() }).collect(),
        init,
        push: Some(push),
        interface: Default::default(),
    }
}

fn params() -> impl Strategy<Value = (u16, u16, u32, u32, u16, usize)> {
    (0u16..=24, 0u16..=8, 0u32..=64, 0u32..=64, 0u16..=4, 0usize..=2)
}

/// Checks what a successful verification promises the engines.
fn check_invariants(v: &Verified) {
    for seg in [v.init.as_ref(), Some(&v.push)].into_iter().flatten() {
        check_segment(seg, &v.module);
    }
}

fn check_segment(seg: &SegmentInfo, m: &Module) {
    let n = seg.insns.len();
    assert_eq!(seg.depth.len(), n);
    let entry = if seg.kind == SegmentKind::Push { 1 } else { 0 };
    assert_eq!(seg.depth[0], Some(entry));
    for (i, insn) in seg.insns.iter().enumerate() {
        assert_eq!(seg.index_of(insn.offset), Some(i));
        assert_eq!(seg.index_of[&insn.offset], i);
        let Some(d) = seg.depth[i] else { continue };
        let pick = if let Operands::Depth(p) = insn.operands { p } else { 0 };
        assert!(u32::from(d) >= insn.op.stack_needs(pick), "underflow accepted at {}", insn.offset);
        let out = u32::from(d) - insn.op.pops() + insn.op.pushes();
        assert!(out <= u32::from(m.max_stack), "overflow accepted at {}", insn.offset);
        let mut succ: Vec<usize> = insn
            .targets()
            .into_iter()
            .map(|t| seg.index_of(u32::try_from(t).expect("target in range")).expect("target on an instruction"))
            .collect();
        if !insn.op.ends_block() {
            assert!(i + 1 < n, "fall-through accepted at {}", insn.offset);
            succ.push(i + 1);
        }
        for j in succ {
            assert_eq!(seg.depth[j], Some(out as u16), "depth mismatch accepted into {}", seg.insns[j].offset);
        }
        match (seg.kind, insn.op) {
            (SegmentKind::Init, _) => assert!(!insn.op.needs_exchange_buffer(&insn.operands)),
            (SegmentKind::Push, op) => assert_ne!(op, Opcode::Exit),
        }
        match &insn.operands {
            Operands::Port(p) => assert!(*p < m.out_ports),
            Operands::Local(l) => assert!(*l < m.locals),
            Operands::CoproReg { copro, .. } | Operands::CoproOp { copro, .. } => assert!(usize::from(*copro) < m.copros.len()),
            Operands::Switch(s) => assert!(s.cases.windows(2).all(|w| w[0].0 < w[1].0)),
            _ => {}
        }
    }
}

/// A random instruction: opcode, two operand seeds and a case count for switches.
fn raw_insn() -> impl Strategy<Value = (usize, u32, u32, u8)> {
    (0..Opcode::ALL.len(), any::<u32>(), any::<u32>(), 0u8..6)
}

/// Builds a segment from random instructions with targets on random
/// instruction boundaries (and, when `seed % 16 == 0`, anywhere at all).
fn build(raw: &[(usize, u32, u32, u8)]) -> Vec<u8> {
    let mem = |x: u32| [Mem::Packet, Mem::Info, Mem::Data][(x % 3) as usize];
    // First pass: operands with placeholder targets, to lay out offsets.
    let mut items: Vec<(Opcode, Operands, u32)> = Vec::new();
    for &(k, a, b, cases) in raw {
        let op = Opcode::ALL[k];
        let operands = match op.operands() {
            OperandKind::None => Operands::None,
            OperandKind::Imm32 => Operands::Imm(if a % 2 == 0 { a % 80 } else { a }),
            OperandKind::Target => Operands::Target(0),
            OperandKind::Port => Operands::Port((a % 6) as u16),
            OperandKind::Local => Operands::Local((a % 10) as u16),
            OperandKind::Depth => Operands::Depth((a % 5) as u8),
            OperandKind::Mem => Operands::Mem(mem(a)),
            OperandKind::MemPair => Operands::MemPair(mem(a), mem(b)),
            OperandKind::CoproReg => Operands::CoproReg { copro: (a % 3) as u8, reg: b as u8 },
            OperandKind::CoproOp => Operands::CoproOp { copro: (a % 3) as u8, op: b as u8 },
            OperandKind::Switch => {
                let mut values: Vec<u32> = (0..u32::from(cases)).map(|c| a.wrapping_mul(c + 1) % 7 + c * (b % 2)).collect();
                if b % 3 != 0 {
                    values.sort_unstable();
                    values.dedup();
                }
                Operands::Switch(SwitchTable { default: 0, cases: values.into_iter().map(|v| (v, 0)).collect() })
            }
        };
        items.push((op, operands, b));
    }
    let mut offsets = Vec::with_capacity(items.len() + 1);
    let mut off = 0u32;
    for (op, operands, _) in &items {
        offsets.push(off);
        off += encoded_len(*op, operands);
    }
    let len = off;
    let pick_target = |seed: u32| -> i64 {
        if seed.is_multiple_of(16) {
            i64::from(seed >> 4) % (i64::from(len) + 8) - 4
        } else {
            i64::from(offsets[(seed as usize / 16) % offsets.len()])
        }
    };
    let mut code = Vec::with_capacity(len as usize);
    for (k, (op, operands, seed)) in items.into_iter().enumerate() {
        let operands = match operands {
            Operands::Target(_) => Operands::Target(pick_target(seed)),
            Operands::Switch(mut s) => {
                s.default = pick_target(seed);
                for (c, case) in s.cases.iter_mut().enumerate() {
                    case.1 = pick_target(seed.rotate_left(c as u32 * 5 + 3));
                }
                Operands::Switch(s)
            }
            o => o,
        };
        encode(op, &operands, offsets[k], &mut code).expect("encodable");
    }
    code
}

/// Instructions that a valid-program generator may emit anywhere.
#[derive(Clone, Copy, Debug)]
enum Step {
    Push(u32),
    Pop,
    Dup,
    Swap,
    Over,
    Pick(u8),
    Binary(u8),
    Unary(u8),
    LocStore(u16),
    LocLoad(u16),
    MemLoad(u8, u32),
    MemStore(u8, u32, u32),
    Region(u8, u32, u32),
    Copy(u8, u32, u32, u32),
    PacketLoad(u8),
    Meta(u8),
    Copro(u8, u8),
    SkipBlock,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        any::<u32>().prop_map(Step::Push),
        Just(Step::Pop),
        Just(Step::Dup),
        Just(Step::Swap),
        Just(Step::Over),
        (0u8..8).prop_map(Step::Pick),
        any::<u8>().prop_map(Step::Binary),
        any::<u8>().prop_map(Step::Unary),
        (0u16..8).prop_map(Step::LocStore),
        (0u16..8).prop_map(Step::LocLoad),
        (any::<u8>(), any::<u32>()).prop_map(|(a, b)| Step::MemLoad(a, b)),
        (any::<u8>(), any::<u32>(), any::<u32>()).prop_map(|(a, b, c)| Step::MemStore(a, b, c)),
        (any::<u8>(), any::<u32>(), any::<u32>()).prop_map(|(a, b, c)| Step::Region(a, b, c)),
        (any::<u8>(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(a, b, c, d)| Step::Copy(a, b, c, d)),
        any::<u8>().prop_map(Step::PacketLoad),
        any::<u8>().prop_map(Step::Meta),
        (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Step::Copro(a, b)),
        Just(Step::SkipBlock),
    ]
}

struct Gen<'a> {
    m: &'a Module,
    init: bool,
    code: Vec<u8>,
    depth: u32,
    written: Vec<bool>,
}

impl Gen<'_> {
    fn emit(&mut self, op: Opcode, operands: Operands) {
        let at = self.code.len() as u32;
        encode(op, &operands, at, &mut self.code).expect("encodable");
        self.depth = self.depth - op.pops() + op.pushes();
    }
    fn room(&self, n: u32) -> bool {
        self.depth + n <= u32::from(self.m.max_stack)
    }
    /// An offset and a length inside a memory of `size` bytes.
    fn span(size: u32, a: u32, b: u32) -> (u32, u32) {
        let off = if size == 0 { 0 } else { a % (size + 1) };
        let len = if size == off { 0 } else { b % (size - off + 1) };
        (off, len)
    }
    fn mem(&self, sel: u8) -> Mem {
        match (self.init, sel % 3) {
            (true, _) => Mem::Data,
            (false, 0) => Mem::Packet,
            (false, 1) => Mem::Info,
            _ => Mem::Data,
        }
    }
    fn size(&self, mem: Mem) -> u32 {
        match mem {
            Mem::Packet => 1500,
            Mem::Info => self.m.info_size,
            Mem::Data => self.m.data_size,
        }
    }
    fn step(&mut self, s: Step) {
        use Opcode::*;
        let d = self.depth;
        match s {
            Step::Push(v) if self.room(1) => self.emit(Push, Operands::Imm(v)),
            Step::Pop if d >= 1 => self.emit(Pop, Operands::None),
            Step::Dup if d >= 1 && self.room(1) => self.emit(Dup, Operands::None),
            Step::Swap if d >= 2 => self.emit(Swap, Operands::None),
            Step::Over if d >= 2 && self.room(1) => self.emit(Over, Operands::None),
            Step::Pick(n) if u32::from(n) < d && self.room(1) => self.emit(Pick, Operands::Depth(n)),
            Step::Binary(k) if d >= 2 => {
                let ops: Vec<Opcode> = Opcode::ALL
                    .iter()
                    .copied()
                    .filter(|o| o.pops() == 2 && o.pushes() == 1 && matches!(o.class(), netil::Class::Alu | netil::Class::Compare))
                    .collect();
                self.emit(ops[usize::from(k) % ops.len()], Operands::None)
            }
            Step::Unary(k) if d >= 1 => {
                let ops = [Not, Neg, Bswap, Bswap16, Popcnt, Clz, Ctz, Hash32];
                self.emit(ops[usize::from(k) % ops.len()], Operands::None)
            }
            Step::LocStore(l) if d >= 1 && l < self.m.locals => {
                self.emit(Locstore, Operands::Local(l));
                self.written[usize::from(l)] = true;
            }
            Step::LocLoad(l) if l < self.m.locals && self.written[usize::from(l)] && self.room(1) => self.emit(Locload, Operands::Local(l)),
            Step::MemLoad(k, a) if self.room(1) => {
                let (mem, w) = ([Mem::Info, Mem::Data][usize::from(k % 2)], [1u32, 2, 4][usize::from(k / 2 % 3)]);
                let mem = if self.init { Mem::Data } else { mem };
                let size = self.size(mem);
                if size < w {
                    return;
                }
                let op = match (mem, w) {
                    (Mem::Info, 1) => Iload8,
                    (Mem::Info, 2) => Iload16,
                    (Mem::Info, _) => Iload32,
                    (_, 1) => Dload8,
                    (_, 2) => Dload16,
                    _ => Dload32,
                };
                self.emit(Push, Operands::Imm(a % (size - w + 1)));
                self.emit(op, Operands::None);
            }
            Step::MemStore(k, a, v) if self.room(2) => {
                let mem = if self.init || k % 2 == 1 { Mem::Data } else { Mem::Info };
                let w = [1u32, 2, 4][usize::from(k / 2 % 3)];
                let size = self.size(mem);
                if size < w {
                    return;
                }
                let op = match (mem, w) {
                    (Mem::Info, 1) => Istore8,
                    (Mem::Info, 2) => Istore16,
                    (Mem::Info, _) => Istore32,
                    (_, 1) => Dstore8,
                    (_, 2) => Dstore16,
                    _ => Dstore32,
                };
                self.emit(Push, Operands::Imm(a % (size - w + 1)));
                self.emit(Push, Operands::Imm(v));
                self.emit(op, Operands::None);
            }
            Step::Region(k, a, b) if self.room(2) => {
                let mem = self.mem(k);
                let (off, len) = Self::span(self.size(mem), a, b);
                self.emit(Push, Operands::Imm(off));
                self.emit(Push, Operands::Imm(len));
                self.emit([Crc32, Hash, Csum][usize::from(k / 3 % 3)], Operands::Mem(mem));
            }
            Step::Copy(k, a, b, c) if self.room(3) => {
                let (src, dst) = (self.mem(k), self.mem(k / 3));
                let max = self.size(src).min(self.size(dst));
                let len = c % (max + 1);
                let src_off = a % (self.size(src) - len + 1);
                let dst_off = b % (self.size(dst) - len + 1);
                self.emit(Push, Operands::Imm(dst_off));
                self.emit(Push, Operands::Imm(src_off));
                self.emit(Push, Operands::Imm(len));
                self.emit(Mcopy, Operands::MemPair(src, dst));
            }
            Step::PacketLoad(k) if !self.init && d >= 1 => self.emit([Upload8, Upload16, Upload32][usize::from(k % 3)], Operands::None),
            Step::Meta(k) if !self.init && self.room(1) => {
                self.emit([Inport, TstampS, TstampNs, Pktlen, Wirelen][usize::from(k % 5)], Operands::None)
            }
            Step::Copro(c, r) if !self.m.copros.is_empty() => {
                let copro = c % self.m.copros.len() as u8;
                match r % 3 {
                    0 if d >= 1 => self.emit(CoproIn, Operands::CoproReg { copro, reg: r }),
                    1 if self.room(1) => self.emit(CoproOut, Operands::CoproReg { copro, reg: r }),
                    2 => self.emit(CoproInvoke, Operands::CoproOp { copro, op: r }),
                    _ => {}
                }
            }
            Step::SkipBlock if d >= 1 && self.room(1) => {
                // jz over a stack-neutral block: a forward branch and a join.
                let at = self.code.len() as u32;
                let target = i64::from(at) + 5 + 6;
                self.emit(Jz, Operands::Target(target));
                self.emit(Push, Operands::Imm(1));
                self.emit(Pop, Operands::None);
            }
            _ => {}
        }
    }
}

fn generate(m: &Module, init: bool, steps: &[Step], end: u8) -> Vec<u8> {
    let mut g = Gen { m, init, code: Vec::new(), depth: if init { 0 } else { 1 }, written: vec![false; usize::from(m.locals)] };
    for &s in steps {
        g.step(s);
    }
    if init {
        g.emit(Opcode::Exit, Operands::None);
    } else {
        match end % 3 {
            0 if m.out_ports > 0 => g.emit(Opcode::Ret, Operands::Port(u16::from(end) % m.out_ports)),
            1 if g.depth >= 1 => g.emit(Opcode::RetPop, Operands::None),
            _ => g.emit(Opcode::Drop, Operands::None),
        }
    }
    g.code
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(
        push in proptest::collection::vec(any::<u8>(), 0..400),
        init in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..100)),
        p in params(),
    ) {
        if let Ok(v) = verify(&module_with(push, init, p)) {
            check_invariants(&v);
        }
    }

    #[test]
    fn random_instructions_never_panic(
        push in proptest::collection::vec(raw_insn(), 1..120),
        init in proptest::option::of(proptest::collection::vec(raw_insn(), 1..30)),
        p in params(),
    ) {
        let m = module_with(build(&push), init.map(|i| build(&i)), p);
        if let Ok(v) = verify(&m) {
            check_invariants(&v);
        }
    }

    #[test]
    fn valid_programs_verify(
        push in proptest::collection::vec(step(), 0..150),
        init in proptest::option::of(proptest::collection::vec(step(), 0..40)),
        end in any::<u8>(),
        (max_stack, locals, info, data, ports, copros) in (1u16..=24, 0u16..=8, 0u32..=64, 0u32..=64, 1u16..=4, 0usize..=2),
    ) {
        let mut m = module_with(Vec::new(), None, (max_stack, locals, info, data, ports, copros));
        m.init = init.map(|steps| generate(&m, true, &steps, 0));
        m.push = Some(generate(&m, false, &push, end));
        match verify(&m) {
            Ok(v) => check_invariants(&v),
            Err(e) => {
                let text = netil::disassemble(&m).unwrap_or_default();
                prop_assert!(false, "valid program rejected: {e}\n{text}");
            }
        }
    }

    #[test]
    fn mutated_valid_programs_never_panic(
        push in proptest::collection::vec(step(), 1..80),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
    ) {
        let mut m = module_with(Vec::new(), None, (16, 4, 32, 32, 2, 1));
        let mut code = generate(&m, false, &push, 0);
        for (at, byte) in flips {
            let n = code.len();
            code[at % n] = byte;
        }
        m.push = Some(code);
        if let Ok(v) = verify(&m) {
            check_invariants(&v);
        }
    }
}

#[test]
fn huge_random_segment_is_fast() {
    // 1 MiB of pseudo-random instructions: rejected early, but every byte is decoded.
    let mut rng = SplitMix64::new(0x9e37_79b9_7f4a_7c15);
    let mut raw = Vec::new();
    let mut size = 0;
    while size < (1 << 20) - 64 {
        let r = rng.next_u64();
        let k = (r % Opcode::ALL.len() as u64) as usize;
        let cases = if Opcode::ALL[k] == Opcode::Switch { 2 } else { 0 };
        size += if cases > 0 { 25 } else { encoded_len(Opcode::ALL[k], &Operands::None) as usize };
        raw.push((k, (r >> 16) as u32, (r >> 32) as u32, cases));
    }
    let code = build(&raw);
    assert!(code.len() <= 1 << 20);
    let t = std::time::Instant::now();
    let _ = verify(&module_with(code, None, (1024, 8, 64, 64, 4, 2)));
    println!("1 MiB random segment checked in {:?}", t.elapsed());
    assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
}

#[test]
fn huge_valid_program_is_fast() {
    // About 1 MiB of valid code from the valid-program generator, deep stack allowed.
    let mut rng = SplitMix64::new(0x2545_f491_4f6c_dd1d);
    let mut m = module_with(Vec::new(), None, (1024, 8, 64, 64, 4, 2));
    let mut g = Gen { m: &m, init: false, code: Vec::new(), depth: 1, written: vec![false; 8] };
    while g.code.len() < (1 << 20) - 64 {
        let r = rng.next_u64();
        let (a, b, c) = (r as u32, (r >> 32) as u32, (r >> 8) as u8);
        let s = match r % 19 {
            0..=2 => Step::Push(a % 100),
            3 => Step::Pop,
            4 => Step::Dup,
            5 => Step::Swap,
            6 => Step::Over,
            7 => Step::Pick(c % 8),
            8 => Step::Binary(c),
            9 => Step::Unary(c),
            10 => Step::LocStore(u16::from(c % 8)),
            11 => Step::LocLoad(u16::from(c % 8)),
            12 => Step::MemLoad(c, a),
            13 => Step::MemStore(c, a, b),
            14 => Step::Region(c, a, b),
            15 => Step::Copy(c, a, b, a ^ b),
            16 => Step::PacketLoad(c),
            17 => Step::Copro(c, (r >> 40) as u8),
            _ => Step::SkipBlock,
        };
        g.step(s);
    }
    g.emit(Opcode::Drop, Operands::None);
    m.push = Some(g.code);
    let t = std::time::Instant::now();
    let v = verify(&m).unwrap_or_else(|e| panic!("{e}"));
    println!("1 MiB valid program ({} instructions) verified in {:?}", v.push.insns.len(), t.elapsed());
    assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
}

#[test]
fn deeply_nested_loops_are_fast() {
    // 1000 nested loops, each counting in its own stack slot, around ~900 KiB
    // of straight code: every loop head's state changes once, and each change
    // flows through the whole nest inside it.
    let levels = 1000u32;
    let body = 900_000usize;
    let mut code = Vec::new();
    let mut heads = Vec::new();
    let emit = |code: &mut Vec<u8>, op: Opcode, operands: Operands| {
        let at = code.len() as u32;
        encode(op, &operands, at, code).unwrap();
    };
    emit(&mut code, Opcode::Pop, Operands::None);
    for _ in 0..levels {
        emit(&mut code, Opcode::Push, Operands::Imm(0));
        heads.push(code.len() as i64);
    }
    code.extend(std::iter::repeat_n(Opcode::Nop as u8, body));
    for &head in heads.iter().rev() {
        emit(&mut code, Opcode::Push, Operands::Imm(1));
        emit(&mut code, Opcode::Add, Operands::None);
        emit(&mut code, Opcode::Dup, Operands::None);
        emit(&mut code, Opcode::Push, Operands::Imm(10));
        emit(&mut code, Opcode::JcmpLt, Operands::Target(head));
        emit(&mut code, Opcode::Pop, Operands::None);
    }
    emit(&mut code, Opcode::Drop, Operands::None);
    let m = module_with(code, None, (1024, 0, 0, 0, 1, 0));
    let t = std::time::Instant::now();
    verify(&m).unwrap_or_else(|e| panic!("{e}"));
    println!("{levels} nested loops around {body} nops verified in {:?}", t.elapsed());
    assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
}

#[test]
fn many_joins_of_deep_stacks_are_fast() {
    // Two 1000-deep stacks that differ at the bottom, each feeding a
    // 60,000-case switch whose cases all land on the same 60,000 join points.
    let depth = 1000u32;
    let cases = 60_000u32;
    let mut code = Vec::new();
    let emit = |code: &mut Vec<u8>, op: Opcode, operands: Operands| {
        let at = code.len() as u32;
        encode(op, &operands, at, code).unwrap();
    };
    let switch_len = 9 + 8 * cases;
    // Layout: jz B | A: push 1, push 0 x999, push 0, switch | B: push 2, push 0 x999, push 0, switch | joins | drop
    let a_start = 5u32;
    let path_len = 5 * (depth + 1) + switch_len;
    let b_start = a_start + path_len;
    let joins = b_start + path_len;
    let table = || SwitchTable { default: i64::from(joins), cases: (0..cases).map(|v| (v, i64::from(joins + v))).collect() };
    emit(&mut code, Opcode::Jz, Operands::Target(i64::from(b_start)));
    for bottom in [1, 2] {
        emit(&mut code, Opcode::Push, Operands::Imm(bottom));
        for k in 1..depth {
            emit(&mut code, Opcode::Push, Operands::Imm(k));
        }
        emit(&mut code, Opcode::Push, Operands::Imm(0));
        emit(&mut code, Opcode::Switch, Operands::Switch(table()));
    }
    assert_eq!(code.len() as u32, joins);
    code.extend(std::iter::repeat_n(Opcode::Nop as u8, cases as usize));
    emit(&mut code, Opcode::Drop, Operands::None);
    assert!(code.len() <= 1 << 20, "{}", code.len());
    let m = module_with(code, None, (1024, 0, 0, 0, 1, 0));
    let t = std::time::Instant::now();
    verify(&m).unwrap_or_else(|e| panic!("{e}"));
    println!("{cases} joins of {depth}-deep stacks verified in {:?}", t.elapsed());
    assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
}
