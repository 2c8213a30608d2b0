//! Interpreter speed: nanoseconds per executed NetIL instruction.
//!
//! `alu_loop` runs a loop of straight ALU/branch code: 14 instructions per
//! iteration (dup push mul push add push xor push shr pop push sub dup jnz),
//! ITERS iterations per packet, plus 4 instructions around the loop (pop,
//! push, pop, ret), so a packet executes exactly 14 * ITERS + 4 NetIL
//! instructions; criterion's
//! time per packet divided by that count is the figure BENCHMARKS.md records.
//! `fig2_filter` is the 7-instruction filter of the NetVM paper's Fig. 2 on
//! an IPv4 frame (6 instructions executed), to show the per-packet overhead.
//!
//! `native_alu_loop` is the same loop compiled by rustc (each iteration's
//! value passed through `black_box` so it is not optimised away): the peer
//! measured in the same run, giving the interpreter's cost relative to
//! native code for identical work.
//!
//! Run: `cargo bench -p netvm-interp --bench interp`

// criterion's macros define undocumented public functions.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use netvm_interp::InterpCode;
use netvm_vm::{ExchangeBuffer, Limits, Packet, PeCode, PeState};

/// Loop iterations per packet in `alu_loop`.
pub const ITERS: u32 = 1000;

fn alu_loop_source() -> String {
    format!(
        "segment .push
    pop
    push {ITERS}
top:
    dup
    push 3
    mul
    push 7
    add
    push 0x55
    xor
    push 2
    shr
    pop
    push 1
    sub
    dup
    jnz top
    pop
    ret 1
ends"
    )
}

const FIG2: &str = "segment .push
.maxstacksize 10
    pop
    push 12
    upload.16
    push 0x800
    jcmp.neq discard
    ret 1
discard:
    ret 0
ends";

fn prepare(src: &str) -> (InterpCode, PeState) {
    let m = netil::assemble(src).expect("assembles").module;
    let v = netvm_verify::verify(&m).expect("verifies");
    (InterpCode::new(&v), PeState::new(&m))
}

fn bench(c: &mut Criterion) {
    let limits = Limits { budget: u64::MAX };
    let mut g = c.benchmark_group("interp");
    // executed instructions: pop, push, 14 * ITERS loop body, pop, ret
    let executed = 14 * u64::from(ITERS) + 4;
    g.throughput(Throughput::Elements(executed));
    let (code, mut state) = prepare(&alu_loop_source());
    let mut xb = ExchangeBuffer::new(Packet::from_bytes(vec![0; 64]), 0);
    assert_eq!(code.push(&mut state, &mut xb.view(), 0, &limits), netvm_vm::Outcome::Forward(1));
    g.bench_function("alu_loop", |b| b.iter(|| code.push(&mut state, &mut std::hint::black_box(&mut xb).view(), 0, &limits)));

    g.bench_function("native_alu_loop", |b| {
        b.iter(|| {
            let mut i = std::hint::black_box(ITERS);
            while i != 0 {
                std::hint::black_box(((i.wrapping_mul(3).wrapping_add(7)) ^ 0x55) >> 2);
                i -= 1;
            }
            i
        })
    });

    g.throughput(Throughput::Elements(6));
    let (code, mut state) = prepare(FIG2);
    let mut pkt = vec![0u8; 64];
    pkt[12] = 0x08;
    let mut xb = ExchangeBuffer::new(Packet::from_bytes(pkt), 0);
    assert_eq!(code.push(&mut state, &mut xb.view(), 0, &limits), netvm_vm::Outcome::Forward(1));
    g.bench_function("fig2_filter", |b| b.iter(|| code.push(&mut state, &mut std::hint::black_box(&mut xb).view(), 0, &limits)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
