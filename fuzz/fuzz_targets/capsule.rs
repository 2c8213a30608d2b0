//! Fuzzes the capsule node: any bytes, as an Ethernet frame or as the
//! capsule part of a well-formed UDP datagram, must be an ordinary packet, a
//! counted drop, or a capsule run within its bound: never a panic or a
//! hang. Capsules that run are run twice on fresh nodes and must end the
//! same way (the interpreter is deterministic), and a forwarded or
//! returned capsule must still parse.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netvm_capsule::wire::{self, ethernet_ipv4_frame, Link, CAPSULE_PORT};
use netvm_capsule::{CapsuleNode, NodeConfig, Verdict};
use netvm_copro::ess::Ess;
use netvm_vm::Timestamp;

fn node(snap_hook: bool) -> CapsuleNode {
    let cfg = NodeConfig { hook: if snap_hook { netvm_capsule::Hook::Egress } else { netvm_capsule::Hook::Ingress }, ..NodeConfig::default() };
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
    let v = node(mode & 2 != 0).process(&mut frame, ts, 1);
    let mut again = copy.clone();
    assert_eq!(node(mode & 2 != 0).process(&mut again, ts, 1), v, "the same verdict on a fresh node");
    assert_eq!(again, frame);
    match v {
        Verdict::Ordinary => assert_eq!(frame, copy),
        Verdict::Forward | Verdict::Return => {
            assert!(wire::locate(&frame, Link::Ethernet, CAPSULE_PORT).expect("still well formed").is_some());
        }
        Verdict::Drop(_) => {}
    }
});
