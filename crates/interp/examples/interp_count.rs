//! Runs the `alu_loop` benchmark program on one packet, a given number of
//! times, for instruction counting under callgrind:
//!
//! ```sh
//! cargo build --release -p netvm-interp --example interp_count
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out target/release/examples/interp_count 0
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out target/release/examples/interp_count 100
//! ```
//!
//! (difference of the two totals) / (100 × 14,004) = machine instructions per
//! executed NetIL instruction, independent of machine load. With a second
//! argument `fig2`, runs the Fig. 2 filter on an IPv4 frame instead
//! (difference / 100 = machine instructions per packet).

use netvm_vm::{ExchangeBuffer, Limits, Packet, PeCode, PeState};

fn main() {
    let runs: u32 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1);
    let fig2 = std::env::args().nth(2).is_some_and(|a| a == "fig2");
    let alu = "segment .push\n pop\n push 1000\ntop:\n dup\n push 3\n mul\n push 7\n add\n push 0x55\n xor\n push 2\n shr\n pop\n push 1\n sub\n dup\n jnz top\n pop\n ret 1\nends\n";
    let fig2_src = "segment .push\n pop\n push 12\n upload.16\n push 0x800\n jcmp.neq d\n ret 1\nd: ret 0\nends\n";
    let src = if fig2 { fig2_src } else { alu };
    let m = netil::assemble(src).expect("assembles").module;
    let v = netvm_verify::verify(&m).expect("verifies");
    let code = netvm_interp::InterpCode::new(&v);
    let mut state = PeState::new(&m);
    let mut pkt = vec![0u8; 64];
    pkt[12] = 8;
    let mut xb = ExchangeBuffer::new(Packet::from_bytes(pkt), 0);
    let limits = Limits { budget: u64::MAX };
    let mut ports = 0u64;
    for _ in 0..runs {
        if let netvm_vm::Outcome::Forward(p) = code.push(&mut state, &mut std::hint::black_box(&mut xb).view(), 0, &limits) {
            ports += u64::from(p);
        }
    }
    println!("{runs} runs, {ports}");
}
