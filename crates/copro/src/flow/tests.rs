//! Tests of the `flow` coprocessor: the state machine packet by packet,
//! flowbits, eviction, aging, configuration, the packet parser, the
//! control plane, workers, and a property test against a naive model.

use std::collections::{BTreeSet, HashMap};

use proptest::prelude::*;

use super::*;

const CLIENT: u32 = 0x0a00_0001;
const SERVER: u32 = 0x0a00_0002;
const SYN: u8 = TH_SYN;
const SYNACK: u8 = TH_SYN | TH_ACK;
const ACK: u8 = TH_ACK;
const FIN: u8 = TH_FIN | TH_ACK;
const RST: u8 = TH_RST;

fn at(s: u64) -> Timestamp {
    Timestamp::from_nanos(s * 1_000_000_000)
}

fn cfg(pairs: &[(&str, &str)]) -> CoproConfig {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn tcp(src: u32, sport: u16, dst: u32, dport: u16, flags: u8) -> FlowPacket {
    FlowPacket { src, dst, sport, dport, proto: PROTO_TCP, tcp_flags: flags }
}

fn udp(src: u32, sport: u16, dst: u32, dport: u16) -> FlowPacket {
    FlowPacket { src, dst, sport, dport, proto: PROTO_UDP, tcp_flags: 0 }
}

/// A client and a server of one connection, tracked on `flows`.
struct Conn {
    client: (u32, u16),
    server: (u32, u16),
}

impl Conn {
    fn c2s(&self, f: &mut Flows, flags: u8, t: u64) -> u32 {
        f.track(&tcp(self.client.0, self.client.1, self.server.0, self.server.1, flags), at(t))
    }
    fn s2c(&self, f: &mut Flows, flags: u8, t: u64) -> u32 {
        f.track(&tcp(self.server.0, self.server.1, self.client.0, self.client.1, flags), at(t))
    }
}

fn flows() -> Flows {
    Flows::new(FlowConfig::default()).unwrap()
}

fn stat(f: &Flows, name: &str) -> u64 {
    f.stats().into_iter().find(|(k, _)| k == name).unwrap_or_else(|| panic!("no stat {name}")).1
}

const T: u32 = TRACKED;

#[test]
fn three_way_handshake_in_both_key_orders() {
    // The client as the lower endpoint of the key, then as the higher.
    for conn in [Conn { client: (CLIENT, 40000), server: (SERVER, 80) }, Conn { client: (SERVER, 40000), server: (CLIENT, 80) }] {
        let mut f = flows();
        assert_eq!(conn.c2s(&mut f, SYN, 1), T | TO_SERVER | NEW);
        let h = f.current_handle();
        assert_ne!(h, 0);
        assert_eq!(conn.c2s(&mut f, SYN, 1), T | TO_SERVER, "a retransmitted SYN");
        assert_eq!(conn.s2c(&mut f, SYNACK, 1), T | TO_CLIENT);
        assert_eq!(f.current_handle(), h, "one flow for both directions");
        assert_eq!(conn.c2s(&mut f, ACK, 2), T | TO_SERVER | ESTABLISHED);
        assert_eq!(conn.c2s(&mut f, ACK | 0x08, 2), T | TO_SERVER | ESTABLISHED);
        assert_eq!(conn.s2c(&mut f, ACK, 3), T | TO_CLIENT | ESTABLISHED);
        assert_eq!((stat(&f, "created"), stat(&f, "established"), stat(&f, "packets"), stat(&f, "flows")), (1, 1, 6, 1));
        assert_eq!(stat(&f, "midstream"), 0);
    }
}

#[test]
fn a_handshake_in_the_wrong_directions_does_not_establish() {
    let conn = Conn { client: (CLIENT, 40000), server: (SERVER, 80) };
    let mut f = flows();
    conn.c2s(&mut f, SYN, 1);
    assert_eq!(conn.c2s(&mut f, SYNACK, 1), T | TO_SERVER, "a SYN-ACK from the client");
    assert_eq!(conn.c2s(&mut f, ACK, 1), T | TO_SERVER);
    assert_eq!(conn.s2c(&mut f, ACK, 1), T | TO_CLIENT, "no SYN-ACK yet: the server's ACK does nothing");
    conn.s2c(&mut f, SYNACK, 1);
    assert_eq!(conn.s2c(&mut f, ACK, 1), T | TO_CLIENT, "the third packet must come from the client");
    assert_eq!(conn.c2s(&mut f, 0, 1), T | TO_SERVER, "and carry an ACK");
    assert_eq!(conn.c2s(&mut f, ACK, 1), T | TO_SERVER | ESTABLISHED);
}

#[test]
fn midstream_pickup_needs_the_other_side() {
    let conn = Conn { client: (SERVER, 5555), server: (CLIENT, 22) };
    let mut f = flows();
    assert_eq!(conn.c2s(&mut f, ACK, 1), T | TO_SERVER | NEW | MIDSTREAM, "the first sender is the client");
    assert_eq!(conn.c2s(&mut f, ACK, 2), T | TO_SERVER | MIDSTREAM, "one side alone does not establish");
    assert_eq!(conn.s2c(&mut f, SYN, 2), T | TO_CLIENT | MIDSTREAM, "a SYN does not either");
    assert_eq!(conn.s2c(&mut f, ACK, 3), T | TO_CLIENT | MIDSTREAM | ESTABLISHED);
    assert_eq!(conn.c2s(&mut f, ACK, 3), T | TO_SERVER | MIDSTREAM | ESTABLISHED);
    assert_eq!((stat(&f, "midstream"), stat(&f, "established")), (1, 1));
}

#[test]
fn a_syn_ack_pickup_makes_its_receiver_the_client() {
    let conn = Conn { client: (CLIENT, 40000), server: (SERVER, 80) };
    let mut f = flows();
    assert_eq!(conn.s2c(&mut f, SYNACK, 1), T | TO_CLIENT | NEW);
    assert_eq!(conn.c2s(&mut f, ACK, 1), T | TO_SERVER | ESTABLISHED);
}

#[test]
fn fin_from_both_sides_or_a_rst_closes_and_a_syn_reuses_the_tuple() {
    let conn = Conn { client: (CLIENT, 40000), server: (SERVER, 80) };
    let mut f = flows();
    conn.c2s(&mut f, SYN, 1);
    conn.s2c(&mut f, SYNACK, 1);
    conn.c2s(&mut f, ACK, 1);
    let h = f.current_handle();
    f.flowbits(3, 0, 0b101).unwrap();
    assert_eq!(conn.c2s(&mut f, FIN, 2), T | TO_SERVER | ESTABLISHED);
    assert_eq!(conn.c2s(&mut f, FIN, 2), T | TO_SERVER | ESTABLISHED, "a FIN from one side twice");
    assert_eq!(conn.s2c(&mut f, FIN, 2), T | TO_CLIENT | ESTABLISHED | CLOSED);
    assert_eq!(conn.c2s(&mut f, ACK, 2), T | TO_SERVER | ESTABLISHED | CLOSED, "the last ACK still belongs to the flow");
    assert_eq!(conn.s2c(&mut f, SYNACK, 2), T | TO_CLIENT | ESTABLISHED | CLOSED, "only a bare SYN restarts");
    assert_eq!(stat(&f, "closed"), 1);
    // The same 5-tuple again, the other side opening this time.
    assert_eq!(conn.s2c(&mut f, SYN, 3), T | TO_SERVER | NEW);
    assert_ne!(f.current_handle(), h);
    assert_eq!(f.flowbits(7, 0, u32::MAX).unwrap(), (0, 0), "the new flow's bits are clear");
    assert!(!f.select(h), "the old handle is stale");
    assert_eq!(conn.c2s(&mut f, SYNACK, 3), T | TO_CLIENT);
    assert_eq!(conn.s2c(&mut f, ACK, 3), T | TO_SERVER | ESTABLISHED);
    assert_eq!(conn.c2s(&mut f, RST, 4), T | TO_CLIENT | ESTABLISHED | CLOSED);
    assert_eq!((stat(&f, "created"), stat(&f, "closed"), stat(&f, "established"), stat(&f, "flows")), (2, 2, 2, 1));
    // A RST first: a closed flow that never establishes.
    let other = Conn { client: (CLIENT, 1), server: (SERVER, 2) };
    assert_eq!(other.c2s(&mut f, RST, 5), T | TO_SERVER | NEW | CLOSED);
    assert_eq!(other.s2c(&mut f, ACK, 5), T | TO_CLIENT | CLOSED);
}

#[test]
fn other_protocols_are_established_by_a_reply() {
    let mut f = flows();
    assert_eq!(f.track(&udp(CLIENT, 53000, SERVER, 53), at(1)), T | TO_SERVER | NEW);
    assert_eq!(f.track(&udp(CLIENT, 53000, SERVER, 53), at(1)), T | TO_SERVER);
    assert_eq!(f.track(&udp(SERVER, 53, CLIENT, 53000), at(1)), T | TO_CLIENT | ESTABLISHED);
    assert_eq!(f.track(&udp(SERVER, 53, CLIENT, 53001), at(1)), T | TO_SERVER | NEW, "another port, another flow");
    // ICMP: no ports; TCP flags are ignored for other protocols.
    let icmp = |src, dst| FlowPacket { src, dst, proto: 1, tcp_flags: RST, ..FlowPacket::default() };
    assert_eq!(f.track(&icmp(SERVER, CLIENT), at(1)), T | TO_SERVER | NEW);
    assert_eq!(f.track(&icmp(CLIENT, SERVER), at(1)), T | TO_CLIENT | ESTABLISHED);
    assert_eq!(f.len(), 3);
}

#[test]
fn flowbits_through_the_registers() {
    let mut f = create(&cfg(&[("bits", "64")])).unwrap();
    let ctx = InvokeContext { packet: &[], info: &[], now: at(1), seq: 0 };
    let op = |f: &mut Box<dyn Coprocessor>, op: u8, word: u32, mask: u32| {
        f.write(7, word).unwrap();
        f.write(8, mask).unwrap();
        f.invoke(op, &ctx).map(|()| (f.read(0).unwrap(), f.read(2).unwrap()))
    };
    // No flow yet: nothing to set, every test fails.
    for o in 3..=9 {
        assert_eq!(op(&mut f, o, 0, 1).unwrap(), (0, 0), "op {o}");
    }
    assert_eq!(f.read(1).unwrap(), 0);
    for (r, v) in [CLIENT, SERVER, 1234 << 16 | 80, 6, u32::from(SYN)].into_iter().enumerate() {
        f.write(r as u8, v).unwrap();
    }
    f.invoke(0, &ctx).unwrap();
    assert_eq!(f.read(0).unwrap(), T | TO_SERVER | NEW);
    let h = f.read(1).unwrap();
    assert_eq!(op(&mut f, 3, 1, 0b0110).unwrap(), (1, 0b0110));
    assert_eq!(op(&mut f, 6, 1, 0b0110).unwrap(), (1, 0b0110), "all");
    assert_eq!(op(&mut f, 6, 1, 0b0111).unwrap(), (0, 0b0110));
    assert_eq!(op(&mut f, 7, 1, 0b0011).unwrap(), (1, 0b0110), "any");
    assert_eq!(op(&mut f, 7, 1, 0b1001).unwrap(), (0, 0b0110));
    assert_eq!(op(&mut f, 8, 1, 0b1001).unwrap(), (1, 0b0110), "none");
    assert_eq!(op(&mut f, 8, 1, 0b0010).unwrap(), (0, 0b0110));
    assert_eq!(op(&mut f, 9, 1, 0b0111).unwrap(), (1, 0b0110), "not_all");
    assert_eq!(op(&mut f, 9, 1, 0b0110).unwrap(), (0, 0b0110));
    assert_eq!(op(&mut f, 5, 1, 0b0011).unwrap(), (1, 0b0101), "toggle");
    assert_eq!(op(&mut f, 4, 1, 0b0001).unwrap(), (1, 0b0100), "unset");
    assert_eq!(op(&mut f, 7, 0, u32::MAX).unwrap(), (0, 0), "word 0 untouched");
    assert_eq!(op(&mut f, 6, 0, 0).unwrap(), (1, 0), "an empty mask is all set");
    assert!(matches!(op(&mut f, 3, 2, 1), Err(CoproError::BadArgument(_))), "64 bits are 2 words");
    assert!(matches!(op(&mut f, 6, u32::MAX, 1), Err(CoproError::BadArgument(_))));
    assert_eq!(f.dump(), "tcp 10.0.0.1:1234 > 10.0.0.2:80 packets=1/0 last=1.000000000 handle=0x800001 bits=34\n");
    // select: a stale or absurd handle clears the current flow; a good one restores it.
    for bad in [0, h + 1, h ^ (1 << 31), u32::MAX] {
        f.write(6, bad).unwrap();
        f.invoke(2, &ctx).unwrap();
        assert_eq!((f.read(0).unwrap(), f.read(1).unwrap()), (0, 0), "handle {bad:#x}");
        assert_eq!(op(&mut f, 7, 1, u32::MAX).unwrap(), (0, 0));
    }
    f.write(6, h).unwrap();
    f.invoke(2, &ctx).unwrap();
    assert_eq!((f.read(0).unwrap(), f.read(1).unwrap()), (1, h));
    assert_eq!(op(&mut f, 7, 1, u32::MAX).unwrap(), (1, 0b0100));
    assert!(matches!(f.invoke(10, &ctx), Err(CoproError::NoOperation(10))));
    assert!(f.write(9, 0).is_err());
    assert!(f.read(3).is_err());
}

#[test]
fn a_full_table_evicts_the_least_recently_seen_flow() {
    let mut f = Flows::new(FlowConfig { capacity: 4, ..FlowConfig::default() }).unwrap();
    let p = |i: u16| udp(CLIENT, i, SERVER, 53);
    for i in 0..4 {
        f.track(&p(i), at(u64::from(i)));
    }
    f.track(&p(0), at(10)); // flow 0 is now the most recent: flow 1 goes first
    for i in 4..40 {
        assert_ne!(f.track(&p(i), at(10 + u64::from(i))) & NEW, 0);
        assert_eq!(f.len(), 4);
    }
    assert!(f.flows.len() <= 4 && f.bits.len() <= 4 * f.words, "storage stays within capacity");
    assert_eq!((stat(&f, "evicted"), stat(&f, "created"), stat(&f, "aged_out")), (36, 40, 0));
    for i in 36..40 {
        assert_eq!(f.track(&p(i), at(50)) & NEW, 0, "flow {i} is still there");
    }
    assert_ne!(f.track(&p(1), at(50)) & NEW, 0, "flow 1 was evicted");
}

#[test]
fn a_full_table_purges_an_aged_flow_before_evicting() {
    let mut f = Flows::new(FlowConfig { capacity: 2, ..FlowConfig::default() }).unwrap();
    let conn = Conn { client: (CLIENT, 40000), server: (SERVER, 80) };
    conn.c2s(&mut f, SYN, 0);
    conn.s2c(&mut f, SYNACK, 0);
    conn.c2s(&mut f, ACK, 0); // established: 3600 s
    f.track(&udp(CLIENT, 1, SERVER, 2), at(1)); // udp: 30 s
    f.track(&udp(CLIENT, 3, SERVER, 4), at(100));
    assert_eq!((stat(&f, "aged_out"), stat(&f, "evicted")), (1, 0), "the idle UDP flow, not the older TCP one");
    assert_eq!(conn.c2s(&mut f, ACK, 100), T | TO_SERVER | ESTABLISHED);
    f.track(&udp(CLIENT, 5, SERVER, 6), at(101));
    assert_eq!(stat(&f, "evicted"), 1);
    assert_ne!(f.track(&udp(CLIENT, 3, SERVER, 4), at(101)) & NEW, 0, "the least recently seen went");
}

#[test]
fn idle_flows_age_out_by_state() {
    let mut f =
        create(&cfg(&[("timeout_udp", "5"), ("timeout_embryonic", "7"), ("timeout_established", "100"), ("timeout_closed", "2")])).unwrap();
    let ctx = |t: u64| InvokeContext { packet: &[], info: &[], now: at(t), seq: 0 };
    let track = |f: &mut Box<dyn Coprocessor>, p: FlowPacket, t: u64| {
        for (r, v) in [p.src, p.dst, u32::from(p.sport) << 16 | u32::from(p.dport), u32::from(p.proto), u32::from(p.tcp_flags)]
            .into_iter()
            .enumerate()
        {
            f.write(r as u8, v).unwrap();
        }
        f.invoke(0, &ctx(t)).unwrap();
        f.read(0).unwrap()
    };
    let conn = |flags, from_client| if from_client { tcp(CLIENT, 1000, SERVER, 80, flags) } else { tcp(SERVER, 80, CLIENT, 1000, flags) };
    track(&mut f, conn(SYN, true), 0);
    track(&mut f, conn(SYNACK, false), 0);
    track(&mut f, conn(ACK, true), 0);
    track(&mut f, udp(CLIENT, 1, SERVER, 2), 0);
    track(&mut f, tcp(CLIENT, 3, SERVER, 4, SYN), 0);
    track(&mut f, tcp(CLIENT, 5, SERVER, 6, RST), 0);
    f.tick(at(2));
    assert_eq!(stat_of(&*f, "flows"), 4, "closed: 2 s is not more than 2 s");
    f.tick(at(3));
    assert_eq!((stat_of(&*f, "flows"), stat_of(&*f, "aged_out")), (3, 1));
    f.tick(at(6));
    assert_eq!(stat_of(&*f, "flows"), 2, "udp after 5 s");
    f.tick(at(8));
    assert_eq!(stat_of(&*f, "flows"), 1, "embryonic after 7 s");
    f.tick(at(50));
    assert_eq!(track(&mut f, conn(ACK, false), 50), T | TO_CLIENT | ESTABLISHED, "established lasts 100 s");
    // A flow aged but not yet purged is dead for packets: they start a new flow.
    assert_eq!(track(&mut f, conn(ACK, true), 151), T | TO_SERVER | NEW | MIDSTREAM);
    assert_eq!((stat_of(&*f, "aged_out"), stat_of(&*f, "created")), (4, 5));
    // Time never runs backwards: an older packet counts at the latest time.
    track(&mut f, udp(CLIENT, 9, SERVER, 9), 10);
    assert!(f.dump().contains("udp 10.0.0.1:9 > 10.0.0.2:9 packets=1/0 last=151.000000000"), "{}", f.dump());
}

fn stat_of(f: &dyn Coprocessor, name: &str) -> u64 {
    f.stats().into_iter().find(|(k, _)| k == name).unwrap().1
}

#[test]
fn tick_work_is_bounded() {
    let mut f = Flows::new(FlowConfig { capacity: 5000, ..FlowConfig::default() }).unwrap();
    for i in 0..3000 {
        f.track(&udp(CLIENT, i, SERVER, 53), at(0));
    }
    f.tick(at(1000));
    assert_eq!(f.len(), 3000 - PURGE_PER_TICK);
    f.tick(at(1000));
    f.tick(at(1000));
    assert!(f.is_empty());
    assert_eq!(stat(&f, "aged_out"), 3000);
}

#[test]
fn configuration_errors() {
    let f = create(&cfg(&[])).unwrap();
    assert_eq!(f.kind(), "flow");
    let ok = [("capacity", "1"), ("bits", "4096"), ("timeout_other", "2147483647")];
    assert!(create(&cfg(&ok)).is_ok());
    for (bad, why) in [
        (&[("bogus", "1")][..], "unknown setting `bogus`"),
        (&[("capacity", "0")], "capacity must be between 1"),
        (&[("capacity", "4194305")], "capacity must be between 1"),
        (&[("capacity", "lots")], "not a whole number"),
        (&[("bits", "33")], "multiple of 32"),
        (&[("bits", "0")], "bits must be between"),
        (&[("bits", "8192")], "bits must be between"),
        (&[("capacity", "4194304"), ("bits", "4096")], "over"),
        (&[("timeout_udp", "0")], "timeout_udp must be between 1"),
        (&[("timeout_established", "-5")], "not a whole number"),
        (&[("timeout_closed", "2147483648")], "timeout_closed must be between"),
    ] {
        let e = create(&cfg(bad)).err().unwrap_or_else(|| panic!("{bad:?} accepted"));
        assert!(e.starts_with("flow: ") && e.contains(why), "{bad:?}: {e}");
    }
    assert!(Flows::new(FlowConfig { bits: 48, ..FlowConfig::default() }).is_err());
}

/// An Ethernet frame with an IPv4 header (`ihl` words) and `l4` after it.
fn frame(ihl: u8, proto: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 14];
    p[12..14].copy_from_slice(&[0x08, 0x00]);
    let mut ip = vec![0u8; usize::from(ihl) * 4];
    ip[0] = 0x40 | ihl;
    ip[6..8].copy_from_slice(&frag.to_be_bytes());
    ip[9] = proto;
    ip[12..16].copy_from_slice(&CLIENT.to_be_bytes());
    ip[16..20].copy_from_slice(&SERVER.to_be_bytes());
    p.extend(ip);
    p.extend_from_slice(l4);
    p
}

#[test]
fn track_pkt_reads_the_headers_or_tracks_nothing() {
    let mut tcp_hdr = [0u8; 20];
    tcp_hdr[..4].copy_from_slice(&[0x9c, 0x40, 0, 80]);
    tcp_hdr[13] = SYN;
    let syn = frame(6, PROTO_TCP, 0x4000, &tcp_hdr); // with an option word, DF set
    assert_eq!(FlowPacket::parse_ipv4(&syn, 14), Some(tcp(CLIENT, 40000, SERVER, 80, SYN)));
    let udp_frame = frame(5, PROTO_UDP, 0x2000, &[0, 53, 0x12, 0x34]); // a first fragment (MF)
    assert_eq!(FlowPacket::parse_ipv4(&udp_frame, 14), Some(udp(CLIENT, 53, SERVER, 0x1234)));
    let icmp = frame(5, 1, 0, &[]);
    assert_eq!(FlowPacket::parse_ipv4(&icmp, 14), Some(FlowPacket { src: CLIENT, dst: SERVER, proto: 1, ..FlowPacket::default() }));
    let mut not_v4 = syn.clone();
    not_v4[14] = 0x65;
    let mut short_ihl = syn.clone();
    short_ihl[14] = 0x44;
    for (what, p, off) in [
        ("no IPv4 header there", &syn[..30], 14),
        ("an offset past the end", &syn[..], usize::MAX),
        ("version 6", &not_v4[..], 14),
        ("IHL 4", &short_ihl[..], 14),
        ("a non-first fragment", &frame(5, PROTO_UDP, 0x0001, &[0, 53, 0, 53]), 14),
        ("TCP cut before its flags", &syn[..14 + 24 + 13], 14),
        ("UDP ports cut", &frame(5, PROTO_UDP, 0, &[0, 53, 0]), 14),
    ] {
        assert_eq!(FlowPacket::parse_ipv4(p, off), None, "{what}");
    }
    let mut f = create(&cfg(&[])).unwrap();
    let run = |f: &mut Box<dyn Coprocessor>, packet: &[u8], off: u32| {
        f.write(5, off).unwrap();
        f.invoke(1, &InvokeContext { packet, info: &[], now: at(1), seq: 0 }).unwrap();
        (f.read(0).unwrap(), f.read(1).unwrap())
    };
    let (state, handle) = run(&mut f, &syn, 14);
    assert_eq!(state, T | TO_SERVER | NEW);
    assert_ne!(handle, 0);
    assert_eq!(run(&mut f, &syn[..20], 14), (0, 0));
    assert_eq!(run(&mut f, &syn, u32::MAX), (0, 0));
    assert_eq!((stat_of(&*f, "packets"), stat_of(&*f, "untracked")), (1, 2));
}

#[test]
fn dump_and_control_plane() {
    let mut f = Flows::new(FlowConfig::default()).unwrap();
    let conn = Conn { client: (SERVER, 40000), server: (CLIENT, 80) };
    conn.s2c(&mut f, ACK, 3);
    conn.c2s(&mut f, ACK, 4);
    f.flowbits(3, 7, 1 << 31).unwrap();
    f.track(&udp(CLIENT, 7, SERVER, 7), Timestamp::from_nanos(5_000_000_001));
    f.track(&FlowPacket { src: SERVER, dst: CLIENT, proto: 47, ..FlowPacket::default() }, at(5));
    assert_eq!(
        f.dump(),
        "proto 47 10.0.0.2:0 > 10.0.0.1:0 packets=1/0 last=5.000000001 handle=0x800003 bits=\n\
         udp 10.0.0.1:7 > 10.0.0.2:7 packets=1/0 last=5.000000001 handle=0x800002 bits=\n\
         tcp 10.0.0.1:80 > 10.0.0.2:40000 established midstream packets=1/1 last=4.000000000 handle=0x800001 bits=255\n"
    );
    assert!(f.load("anything").is_err(), "flows are learnt from packets");
    f.clear();
    assert_eq!((f.dump(), f.len()), (String::new(), 0));
    assert_eq!(stat(&f, "created"), 3, "statistics survive clear");
    assert_eq!(conn.s2c(&mut f, SYN, 6), T | TO_SERVER | NEW);
    assert_eq!(f.current_handle(), 0x0100_0001, "a reused slot has a new generation");
}

#[test]
fn forks_start_empty_and_absorb_moves_flows() {
    let mut a = create(&cfg(&[("capacity", "3")])).unwrap();
    assert_eq!(a.share(), WorkerShare::PerWorker);
    let ctx = |t| InvokeContext { packet: &[], info: &[], now: at(t), seq: 0 };
    let track = |f: &mut Box<dyn Coprocessor>, sport: u32, t: u64| {
        for (r, v) in [CLIENT, SERVER, sport << 16 | 53, 17, 0].into_iter().enumerate() {
            f.write(r as u8, v).unwrap();
        }
        f.invoke(0, &ctx(t)).unwrap();
        f.write(7, 0).unwrap();
        f.write(8, sport).unwrap();
        f.invoke(3, &ctx(t)).unwrap();
    };
    track(&mut a, 1, 1);
    track(&mut a, 2, 2);
    let mut b = a.fork().unwrap();
    assert_eq!(b.dump(), "");
    assert_eq!(stat_of(&*b, "created"), 0);
    track(&mut b, 3, 3);
    track(&mut b, 4, 4);
    track(&mut b, 2, 5); // the same 5-tuple as on a, more recent
    a.absorb(b.as_mut());
    assert_eq!(b.dump(), "");
    assert_eq!(stat_of(&*b, "created"), 0);
    assert_eq!((stat_of(&*a, "created"), stat_of(&*a, "flows"), stat_of(&*a, "evicted")), (5, 3, 1));
    let dump = a.dump();
    let lines: Vec<&str> = dump.lines().collect();
    assert_eq!(lines.len(), 3, "{dump}");
    assert!(lines[0].starts_with("udp 10.0.0.1:2 > 10.0.0.2:53 packets=1/0 last=5.") && lines[0].ends_with("bits=1"), "{dump}");
    assert!(lines[1].starts_with("udp 10.0.0.1:3 ") && lines[2].starts_with("udp 10.0.0.1:4 "), "flow 1, the oldest, made room: {dump}");
    // The adopted flows keep their order of last packet: 3 (t=3) goes first.
    track(&mut a, 9, 6);
    assert!(!a.dump().contains("10.0.0.1:3 "), "{}", a.dump());
    // A fork's flows aged by the end of the run are purged, not moved.
    let mut c = a.fork().unwrap();
    track(&mut c, 20, 6);
    track(&mut c, 21, 40); // flow 20 is idle for 34 s: aged (udp, 30 s), not purged
    a.absorb(c.as_mut());
    assert!(!a.dump().contains("10.0.0.1:20 ") && a.dump().contains("10.0.0.1:21 "), "{}", a.dump());
    // Flow 20, and one of a's own (all idle since t=6 at the new clock, 40)
    // purged to make room for flow 21.
    assert_eq!((stat_of(&*a, "aged_out"), stat_of(&*a, "evicted")), (2, 2), "evicted: flows 1 and 3 above");
}

// ---------------------------------------------------------------------------
// The naive model: a HashMap of flows, the TCP state as an enum.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tcp {
    /// Created by a RST: nothing establishes it.
    Reset,
    SynSent,
    SynAckSeen,
    Midstream,
    Established,
}

#[derive(Clone, Debug)]
struct ModelFlow {
    id: u64,
    client: (u32, u16),
    tcp: Tcp,
    midstream: bool,
    seen: [bool; 2],
    fins: [bool; 2],
    closed: bool,
    last: u64,
    /// The numbers of the bits set.
    bits: BTreeSet<usize>,
}

/// (protocol, lower endpoint, higher endpoint), an endpoint being (address, port).
type ModelKey = (u8, (u32, u16), (u32, u16));

#[derive(Default)]
struct Model {
    flows: HashMap<ModelKey, ModelFlow>,
    timeouts: [u64; 5],
    clock: u64,
    current: Option<ModelKey>,
    next_id: u64,
}

impl ModelFlow {
    fn established(&self, proto: u8) -> bool {
        if proto == PROTO_TCP {
            self.tcp == Tcp::Established
        } else {
            self.seen == [true, true]
        }
    }

    fn timeout(&self, proto: u8, t: &[u64; 5]) -> u64 {
        let (closed, other, udp, embryonic, established) = (t[0], t[1], t[2], t[3], t[4]);
        match proto {
            _ if self.closed => closed,
            PROTO_TCP if self.tcp == Tcp::Established => established,
            PROTO_TCP => embryonic,
            PROTO_UDP => udp,
            _ => other,
        }
    }
}

impl Model {
    fn live(&self, key: &ModelKey) -> Option<&ModelFlow> {
        self.flows.get(key).filter(|f| self.clock - f.last <= f.timeout(key.0, &self.timeouts) * 1_000_000_000)
    }

    /// The state word and the flow's id.
    fn track(&mut self, p: &FlowPacket, now: u64) -> (u32, u64) {
        self.clock = self.clock.max(now);
        let (s, d) = ((p.src, p.sport), (p.dst, p.dport));
        let key = (p.proto, s.min(d), s.max(d));
        let tcp = p.proto == PROTO_TCP;
        let th = if tcp { p.tcp_flags } else { 0 };
        let (syn, ack, rst, fin) = (th & TH_SYN != 0, th & TH_ACK != 0, th & TH_RST != 0, th & TH_FIN != 0);
        let reuse = self.live(&key).is_some_and(|f| tcp && f.closed && syn && !ack && !rst);
        let new = self.live(&key).is_none() || reuse;
        if new {
            let client = if tcp && syn && ack && !rst { d } else { s };
            let state = match (rst, syn, ack) {
                (true, _, _) => Tcp::Reset,
                (_, true, false) => Tcp::SynSent,
                (_, true, true) => Tcp::SynAckSeen,
                _ => Tcp::Midstream,
            };
            self.next_id += 1;
            let f = ModelFlow {
                id: self.next_id,
                client,
                tcp: state,
                midstream: tcp && state == Tcp::Midstream,
                seen: [false; 2],
                fins: [false; 2],
                closed: false,
                last: 0,
                bits: BTreeSet::new(),
            };
            self.flows.insert(key, f);
        }
        let clock = self.clock;
        let f = self.flows.get_mut(&key).unwrap();
        let from_client = s == f.client;
        let dir = usize::from(!from_client);
        f.seen[dir] = true;
        f.last = clock;
        if tcp && rst {
            f.closed = true;
        } else if tcp {
            if !new {
                f.tcp = match (f.tcp, syn, ack, from_client) {
                    (Tcp::SynSent, true, true, false) => Tcp::SynAckSeen,
                    (Tcp::SynAckSeen, false, true, true) => Tcp::Established,
                    (Tcp::Midstream, false, _, false) => Tcp::Established,
                    (state, ..) => state,
                };
            }
            if fin {
                f.fins[dir] = true;
                f.closed |= f.fins == [true, true];
            }
        }
        self.current = Some(key);
        let mut w = TRACKED | if from_client { TO_SERVER } else { TO_CLIENT };
        for (on, bit) in [(f.established(p.proto), ESTABLISHED), (new, NEW), (f.midstream, MIDSTREAM), (f.closed, CLOSED)] {
            if on {
                w |= bit;
            }
        }
        (w, f.id)
    }

    /// Bit by bit, on the set of bit numbers.
    fn flowbits(&mut self, op: u8, word: usize, mask: u32) -> (u32, u32) {
        let Some(key) = self.current else { return (0, 0) };
        if self.live(&key).is_none() {
            return (0, 0);
        }
        let bits = &mut self.flows.get_mut(&key).unwrap().bits;
        let chosen: Vec<usize> = (0..32).filter(|b| mask >> b & 1 == 1).map(|b| word * 32 + b).collect();
        let result = match op {
            3..=5 => {
                for b in &chosen {
                    let present = bits.contains(b);
                    if op == 3 || (op == 5 && !present) {
                        bits.insert(*b);
                    } else {
                        bits.remove(b);
                    }
                }
                true
            }
            6 => chosen.iter().all(|b| bits.contains(b)),
            7 => chosen.iter().any(|b| bits.contains(b)),
            8 => !chosen.iter().any(|b| bits.contains(b)),
            _ => !chosen.iter().all(|b| bits.contains(b)),
        };
        let after = (0..32).filter(|b| bits.contains(&(word * 32 + b))).fold(0u32, |w, b| w | 1 << b);
        (u32::from(result), after)
    }
}

#[derive(Clone, Debug)]
enum Action {
    Packet { src: u8, sport: u8, dst: u8, dport: u8, proto: u8, flags: u8, dt: i64 },
    Bits { op: u8, word: u8, mask: u32 },
    Tick { dt: u64 },
}

fn action() -> impl Strategy<Value = Action> {
    let flags = prop_oneof![Just(SYN), Just(SYNACK), Just(ACK), Just(FIN), Just(RST), Just(0), any::<u8>()];
    let proto = prop_oneof![4 => Just(PROTO_TCP), 1 => Just(PROTO_UDP), 1 => Just(1u8)];
    prop_oneof![
        6 => (0..3u8, 0..2u8, 0..3u8, 0..2u8, proto, flags, -2_000_000_000i64..3_000_000_000)
            .prop_filter("no land packets", |(s, sp, d, dp, ..)| (s, sp) != (d, dp))
            .prop_map(|(src, sport, dst, dport, proto, flags, dt)| Action::Packet { src, sport, dst, dport, proto, flags, dt }),
        2 => (3..10u8, 0..2u8, any::<u32>()).prop_map(|(op, word, mask)| Action::Bits { op, word, mask }),
        1 => (0..4_000_000_000u64).prop_map(|dt| Action::Tick { dt }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Within capacity the table behaves as the model: the same state words,
    /// the same flow identity (handles), the same flowbits, the same live flows
    /// after a tick.
    #[test]
    fn agrees_with_the_model(actions in prop::collection::vec(action(), 1..150)) {
        let config = FlowConfig { capacity: 64, bits: 64, timeouts: [2, 3, 4, 5, 9] };
        let mut flows = Flows::new(config).unwrap();
        let mut model = Model { timeouts: config.timeouts, ..Model::default() };
        let mut handles: HashMap<u64, u32> = HashMap::new();
        let mut t: u64 = 10_000_000_000;
        for a in actions {
            match a {
                Action::Packet { src, sport, dst, dport, proto, flags, dt } => {
                    t = t.saturating_add_signed(dt);
                    let p = FlowPacket {
                        src: 0x0a00_0000 | u32::from(src),
                        dst: 0x0a00_0000 | u32::from(dst),
                        sport: if proto == 1 { 0 } else { 1000 + u16::from(sport) },
                        dport: if proto == 1 { 0 } else { 1000 + u16::from(dport) },
                        proto,
                        tcp_flags: flags,
                    };
                    if p.src == p.dst && p.sport == p.dport {
                        continue; // a land packet (ICMP: no ports): its direction is moot
                    }
                    let got = flows.track(&p, Timestamp::from_nanos(t));
                    let (want, id) = model.track(&p, t);
                    prop_assert_eq!(got, want, "{:?}", p);
                    let h = flows.current_handle();
                    if got & NEW != 0 {
                        for (other, old) in &handles {
                            let alive = model.flows.iter().any(|(k, f)| f.id == *other && model.live(k).is_some());
                            prop_assert!(!alive || *old != h, "flow {} has handle {:#x} too", other, h);
                        }
                        prop_assert!(handles.insert(id, h).is_none());
                    } else {
                        prop_assert_eq!(handles.get(&id).copied(), Some(h));
                    }
                }
                Action::Bits { op, word, mask } => {
                    let got = flows.flowbits(op, u32::from(word), mask).unwrap();
                    prop_assert_eq!(got, model.flowbits(op, usize::from(word), mask));
                }
                Action::Tick { dt } => {
                    t += dt;
                    model.clock = model.clock.max(t);
                    flows.tick(Timestamp::from_nanos(t));
                    let live = model.flows.keys().filter(|k| model.live(k).is_some()).count();
                    prop_assert_eq!(flows.len(), live);
                    // Every handle handed out names a live flow exactly when the model's flow is live.
                    let current = flows.current;
                    for (id, h) in &handles {
                        let alive = model.flows.iter().any(|(k, f)| f.id == *id && model.live(k).is_some());
                        prop_assert_eq!(flows.select(*h), alive, "flow {}", id);
                    }
                    flows.current = current;
                }
            }
        }
    }

    /// Any register values, operations and packets: no panic, no growth
    /// beyond capacity.
    #[test]
    fn hostile_registers_and_packets(
        steps in prop::collection::vec((any::<u8>(), any::<u8>(), any::<u32>(), prop::collection::vec(any::<u8>(), 0..80), any::<u64>()), 1..200)
    ) {
        let mut f = create(&cfg(&[("capacity", "8"), ("bits", "32")])).unwrap();
        for (reg, op, value, packet, now) in steps {
            let _ = f.write(reg % 12, value);
            let ctx = InvokeContext { packet: &packet, info: &[], now: Timestamp::from_nanos(now), seq: 0 };
            let _ = f.invoke(op % 12, &ctx);
            let _ = f.read(reg % 4);
            if op % 16 == 0 {
                f.tick(Timestamp::from_nanos(value.into()));
            }
            prop_assert!(stat_of(&*f, "flows") <= 8);
        }
        let _ = f.dump();
    }
}
