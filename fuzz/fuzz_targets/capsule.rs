//! Fuzzes the capsule node: any bytes, as an Ethernet frame or as the
//! capsule part of a well-formed UDP datagram, IPv4 option or IPv6
//! destination option, must be an ordinary packet, a
//! counted drop, or a capsule run within its bound: never a panic or a
//! hang. Capsules run on a fresh interpreting node and on a fresh node that
//! compiles every program with the baseline compiler: both must end the
//! same way and leave the same bytes; a forwarded or returned capsule must
//! still parse, and the IPv4 header or UDP checksum of a frame built right
//! stay right.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netvm_capsule::wire::{self, ethernet_frame, Carrier, FrameSpec, Link, CAPSULE_PORT};
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
    let carrier = [Carrier::Udp, Carrier::Ipv4Option, Carrier::Ipv6Option][usize::from(mode >> 2) % 3];
    let (src, dst): (std::net::IpAddr, std::net::IpAddr) = match carrier {
        Carrier::Ipv6Option => ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap()),
        _ => ("192.0.2.1".parse().unwrap(), "198.51.100.1".parse().unwrap()),
    };
    let spec = FrameSpec { src, dst, sport: 1, port: CAPSULE_PORT, ttl: 64, carrier };
    let built = if mode & 1 == 0 { None } else { ethernet_frame(&spec, rest, b"").ok() };
    let checked = built.is_some() && carrier == Carrier::Ipv4Option;
    let udp_checked = built.is_some() && carrier == Carrier::Udp;
    let mut frame = built.unwrap_or_else(|| rest.to_vec());
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
            assert!(!checked || wire::ipv4_header_checksum_ok(&frame, 14), "the header checksum follows the option");
            if udp_checked {
                // Built right, the datagram's checksum follows what the node wrote.
                let udp = 14 + 20;
                let field = u16::from_be_bytes([frame[udp + 6], frame[udp + 7]]);
                assert!(field == 0 || wire::udp_checksum(&frame, 14, udp, false) == field, "the UDP checksum follows the capsule");
            }
        }
        Verdict::Drop(_) => {}
    }
});
