//! The interpreter's superinstructions (`Prepared::new`) against the
//! instructions they replace (`Prepared::decode`, one op per instruction):
//! programs built from the idioms packet filters are made of (the paper's
//! filters, `netvm filter`'s code), with random widths, offsets,
//! conditions and constants, jump targets inside the idioms and backward
//! edges that cost budget, run on packets of every length from empty to
//! past the largest offset. Outcome, data memory and budget used must be
//! the same, on the general copy of the loop and on the packet path
//! (`PeCode::push`: its lean copy, or the packet-only copy for code that
//! needs nothing but the packet), and fusion must have happened.

use netvm_interp::{run_prepared, InterpCode, Prepared};
use netvm_verify::verify;
use netvm_vm::{ExchangeBuffer, Limits, Packet, PeCode, PeState};

/// xorshift64*: a small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
}

const CONDS: [&str; 10] = ["eq", "neq", "lt", "le", "gt", "ge", "slt", "sle", "sgt", "sge"];
const WIDTHS: [&str; 3] = ["8", "16", "32"];

/// A constant for a comparison: small, near a packet length, or any.
fn constant(r: &mut Rng) -> u32 {
    match r.below(4) {
        0 => r.below(80) as u32,
        1 => 0,
        2 => 0x8000_0000 | r.below(4) as u32,
        _ => r.next() as u32,
    }
}

/// One idiom, as NetIL text; it falls through or jumps to `reject`.
/// `k` numbers its labels.
fn idiom(r: &mut Rng, k: usize) -> String {
    let c = r.pick(&CONDS);
    let w = r.pick(&WIDTHS);
    let off = r.below(72);
    let v = constant(r);
    match r.below(14) {
        0 => format!("pktlen\npush {v}\njcmp.{c} reject\n"),
        1 => format!("push {off}\nupload.{w}\npush {v}\njcmp.{c} reject\n"),
        // ldx msh, then a field at that offset, checked against the length.
        2 => {
            let scale = if r.below(2) == 0 { "push 4\nmul" } else { "push 2\nshl" };
            let c2 = r.pick(&CONDS);
            format!(
                "push {off}\nupload.8\npush 0xf\nand\n{scale}\ndup\npush {}\nadd\npktlen\njcmp.{c} reject_1\nupload.{w}\npush {v}\njcmp.{c2} reject\n",
                r.below(6)
            )
        }
        3 => format!("push {off}\nupload.{w}\npush {}\nand\n{} reject\n", constant(r), r.pick(&["jnz", "jz"])),
        4 => {
            let mut cases: Vec<u32> = (0..1 + r.below(5)).map(|_| if r.below(2) == 0 { r.below(4) as u32 } else { constant(r) }).collect();
            cases.sort_unstable();
            cases.dedup();
            let arms: Vec<String> = cases.iter().map(|c| format!("{c}: sw{k}_{}", c % 2)).collect();
            format!(
                "push {off}\nupload.{w}\nswitch {}, default: sw{k}_0\nsw{k}_1:\npush 1\nlocstore 1\nsw{k}_0:\n",
                arms.join(", ")
            )
        }
        // A local holding a computed offset: tee, reload plus a constant.
        5 => format!(
            "push {off}\ndup\nlocstore 0\npush {}\nadd\npktlen\njcmp.{c} reject\nlocload 0\npush {}\nadd\nupload.{w}\npush {v}\njcmp.{} reject\n",
            r.below(8),
            r.below(8),
            r.pick(&CONDS)
        ),
        6 => format!("push {off}\nlocstore 1\nlocload 1\npush {}\nadd\npktlen\njcmp.{c} reject\n", r.below(8)),
        // A loop whose back edge is a jset: it costs budget on every turn.
        7 => format!(
            "push {}\nlocstore 1\nloop{k}:\nlocload 1\npush 1\nsub\ndup\nlocstore 1\npush {}\nand\n{} loop{k}\n",
            r.below(12),
            constant(r),
            r.pick(&["jnz", "jz"])
        ),
        // A back edge that compares with the packet's length.
        8 => format!("push {}\nlocstore 1\nloop{k}:\nlocload 1\npush 1\nadd\ndup\nlocstore 1\npush 3\nadd\npktlen\njcmp.{c} loop{k}\n", r.below(4)),
        // A jump target inside an idiom: the path that skips the `push` has
        // the same depth, so the rest still fuses as it can.
        9 => format!(
            "push {off}\npktlen\npush {}\njcmp.lt mid{k}\npop\npush {}\nmid{k}:\nupload.{w}\npush {v}\njcmp.{c} reject\n",
            r.below(80),
            r.below(72)
        ),
        // `netvm filter`'s test of a transport header field (a port): the
        // header's offset kept in a local, then a field at that offset plus
        // a constant, checked against the packet's end first.
        10 => {
            let scale = if r.below(2) == 0 { "push 4\nmul" } else { "push 2\nshl" };
            let end = if r.below(4) == 0 { r.below(6) } else { w.parse::<u64>().unwrap() / 8 };
            let c2 = r.pick(&["eq", "neq", "neq", "lt"]);
            format!(
                "push {off}\nupload.8\npush 0xf\nand\n{scale}\ndup\nlocstore 0\npush {}\nadd\ndup\npush {end}\nadd\npktlen\njcmp.{} reject_1\nupload.{w}\npush {v}\njcmp.{c2} reject\n\
                 locload 0\npush {}\nadd\ndup\npush {end}\nadd\npktlen\njcmp.gt reject_1\nupload.{w}\npush {}\njcmp.{} reject\n",
                r.below(24),
                r.pick(&["gt", "gt", "ge"]),
                r.below(24),
                constant(r),
                r.pick(&["eq", "neq"])
            )
        }
        // A filter's first tests: the length it needs, then the link-layer
        // type (a mismatch to the same place, or a switch; or to another
        // place, which does not fuse).
        11 => {
            let len = r.below(80);
            match r.below(3) {
                0 => format!("pktlen\npush {len}\njcmp.lt reject\npush {off}\nupload.{w}\npush {v}\njcmp.neq reject\n"),
                1 => format!(
                    "pktlen\npush {len}\njcmp.lt reject\npush {off}\nupload.{w}\nswitch {}: g{k}, {}: reject, default: g{k}\ng{k}:\n",
                    r.below(4),
                    4 + r.below(4)
                ),
                _ => format!("pktlen\npush {len}\njcmp.lt reject\npush {off}\nupload.{w}\npush {v}\njcmp.neq g{k}\ng{k}:\n"),
            }
        }
        // A data-memory store so that state is compared too.
        12 => format!("push {}\npush {off}\nupload.{w}\ndstore.32\n", 4 * r.below(4)),
        // A field loaded at an offset computed on the stack.
        _ => format!("push {}\npush {}\nadd\nupload.{w}\npush {v}\njcmp.{c} reject\n", off / 2, off - off / 2),
    }
}

fn program(r: &mut Rng) -> String {
    let mut text = String::from(".maxstacksize 8\n.locals 2\n.datasize 16\n.ports 2\nsegment .push\npop\npush 0\nlocstore 1\n");
    for k in 0..1 + r.below(6) as usize {
        text += &idiom(r, k);
    }
    if r.below(3) == 0 {
        // A last test and the verdict: both ways end in a `ret`.
        let w = r.pick(&WIDTHS);
        let (off, v, c) = (r.below(72), constant(r), r.pick(&["eq", "neq"]));
        text += &if r.below(3) == 0 {
            // A filter of one test, its length guard first.
            format!("pktlen\npush {}\njcmp.lt reject\npush {off}\nupload.{w}\npush {v}\njcmp.neq reject\nret 1\n", r.below(80))
        } else if r.below(2) == 0 {
            format!("push {off}\nupload.{w}\npush {v}\njcmp.{c} reject\nret 1\n")
        } else {
            // The field at an offset computed on the stack.
            format!("push {}\npush {}\nadd\nupload.{w}\npush {v}\njcmp.{c} reject\nret 1\n", off / 2, off - off / 2)
        };
    }
    // The port from a local (`ret.pop`, which needs the machine's port
    // count), or a constant (code that may need nothing but the packet).
    text += if r.below(2) == 0 { "locload 1\npush 1\nand\nret.pop\n" } else { "locload 1\njnz accept\nret 0\naccept:\nret 1\n" };
    text += "reject_1:\npop\nreject:\nret 0\nends\n";
    text
}

fn packets(r: &mut Rng) -> Vec<Packet> {
    (0..80).map(|len| Packet::from_bytes((0..len).map(|_| if r.below(3) == 0 { 0 } else { r.next() as u8 }).collect())).collect()
}

#[test]
fn superinstructions_agree_with_the_instructions_they_replace() {
    let mut r = Rng(0x5eed_f00d_cafe_1234);
    let (mut programs, mut fused_away) = (0, 0);
    let mut seen = std::collections::BTreeSet::new();
    // Programs run on the lean and on the packet-only copy of the loop.
    let mut paths = [0; 2];
    for _ in 0..3000 {
        let text = program(&mut r);
        let module = netil::assemble(&text).unwrap_or_else(|e| panic!("{e}\n{text}")).module;
        let verified = verify(&module).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let fused = Prepared::new(&verified.push);
        let plain = Prepared::decode(&verified.push);
        let code = InterpCode::new(&verified);
        fused_away += plain.ops.len() - fused.ops.len();
        for op in &fused.ops {
            let name = format!("{op:?}");
            seen.insert(name[..name.find([' ', '(']).unwrap_or(name.len())].to_string());
        }
        programs += 1;
        let limits = Limits { budget: 300 };
        for p in packets(&mut r) {
            let run = |code: &Prepared| {
                let mut state = PeState::new(&module);
                let mut xb = ExchangeBuffer::new(p.clone(), 0);
                let out = run_prepared(code, &mut state, &mut xb.view(), 0, Some(0), &limits, 0, module.out_ports);
                (out, state.data, state.budget_used)
            };
            let (a, b) = (run(&plain), run(&fused));
            assert_eq!(a, b, "fused code differs on a {}-byte packet\n{text}", p.data.len());
            // The packet path (`PeCode::push`: its own copy of the loop,
            // or the packet-only copy), from the same entry.
            let mut state = PeState::new(&module);
            let mut xb = ExchangeBuffer::new(p.clone(), 0);
            let out = code.push(&mut state, &mut xb.view(), 0, &limits);
            assert_eq!(a, (out, state.data, state.budget_used), "the packet path differs on a {}-byte packet\n{text}", p.data.len());
        }
        paths[usize::from(code.packet_only())] += 1;
    }
    assert!(paths.iter().all(|&n| n > programs / 10), "lean and packet-only programs: {paths:?}");
    assert!(fused_away > programs * 3, "{fused_away} instructions fused away in {programs} programs");
    // Every superinstruction was made, and so run against what it replaces.
    for op in [
        "CheckedFieldJeqImm",
        "GuardUploadJneImm",
        "GuardUploadRetImm",
        "GuardUploadSwitch",
        "JcmpEnd",
        "JgtEnd",
        "Jset",
        "LocloadAddImm",
        "PktlenJcmpImm",
        "PktlenJltImm",
        "Tee",
        "UploadConst",
        "UploadJcmpImm",
        "UploadJeqImm",
        "UploadJneImm",
        "UploadJset",
        "UploadMsh",
        "UploadMshTee",
        "UploadRetImm",
        "UploadTopRetImm",
        "UploadSwitch",
        "UploadTopJcmpImm",
        "UploadTopJeqImm",
    ] {
        assert!(seen.contains(op), "no {op} was made: {seen:?}");
    }
}
