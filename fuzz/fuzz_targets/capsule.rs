//! Fuzzes the capsule node: any bytes, as an Ethernet frame or as the
//! capsule part of a well-formed UDP datagram, must be an ordinary packet, a
//! counted drop, or a capsule run within its bound: never a panic or a
//! hang. Capsules run on a fresh interpreting node and on a fresh node that
//! compiles every program with the baseline compiler: both must end the
//! same way and leave the same bytes; a forwarded or returned capsule must
//! still parse.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netvm_capsule::wire::{self, ethernet_ipv4_frame, Link, CAPSULE_PORT};
use netvm_capsule::{CapsuleNode, NodeConfig, Verdict};
use netvm_copro::ess::Ess;
use netvm_vm::Timestamp;

fn node(egress: bool, tier: netvm_capsule::tier::TierPolicy) -> CapsuleNode {
    let hook = if egress { netvm_capsule::Hook::Egress } else { netvm_capsule::Hook::Ingress };
    let cfg = NodeConfig { hook, tier, ..NodeConfig::default() };
    CapsuleNode::new(cfg, Ess::new(64, 1_000_000_000, 4, Some(3)).expect("a small store"))
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut frame = if mode & 1 == 0 {
        rest.to_vec()
    } else {
        ethernet_ipv4_frame([192, 0, 2, 1], [198, 51, 100, 1], 1, CAPSULE_PORT, 64, rest)
    };
    let copy = frame.clone();
    let ts = Timestamp { sec: 1, nsec: 0 };
    use netvm_capsule::tier::TierPolicy;
    let v = node(mode & 2 != 0, TierPolicy::Interpret).process(&mut frame, ts, 1);
    let mut again = copy.clone();
    assert_eq!(node(mode & 2 != 0, TierPolicy::Baseline).process(&mut again, ts, 1), v, "the same verdict compiled");
    assert_eq!(again, frame);
    match v {
        Verdict::Ordinary => assert_eq!(frame, copy),
        Verdict::Forward | Verdict::Return => {
            assert!(wire::locate(&frame, Link::Ethernet, CAPSULE_PORT).expect("still well formed").is_some());
        }
        Verdict::Drop(_) => {}
    }
});
