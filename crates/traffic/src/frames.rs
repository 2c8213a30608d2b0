//! Deterministic traces of Ethernet frames for testing packet filters
//! (tcpdump / pcap-filter expressions compiled by `netvm-pfl`) against
//! libpcap.
//!
//! Unlike `netvm_fuzzgen::generate_packet`, which draws addresses and ports
//! uniformly, these frames take their addresses, ports, VLAN IDs,
//! MPLS labels, ICMP types and TCP flags from **small pools** of values that
//! filter expressions name (`10.1.1.1`, `2001:db8::1`, `port 80`, `vlan 10`,
//! `mpls 5`, `tcp-syn`, ...), so that expressions actually match something,
//! with an occasional random value so that they also fail to.
//!
//! Kinds of frames ([`generate_frame`]):
//!
//! - IPv4 with IHL 5 to 15 (options) and bogus IHL 0 to 4; unfragmented, DF,
//!   and first, middle and last fragments; over TCP, UDP, ICMP, SCTP, IGMP,
//!   GRE and other protocols; right or wrong total length and checksum;
//! - IPv6 with chains of extension headers (hop-by-hop, routing, fragment,
//!   destination options, AH) over TCP, UDP, ICMPv6 and others;
//! - ARP and RARP requests and replies (and odd hardware/protocol types);
//! - VLAN tags: single 0x8100, and double with an outer 0x88a8, 0x9100 or
//!   0x8100, sometimes triple;
//! - MPLS stacks of 1 to 3 labels over IPv4, IPv6 or garbage;
//! - tunnels: GRE (over IPv4 or IPv6, carrying IPv4, IPv6 or Ethernet), IPv4
//!   in IPv4, IPv6 in IPv4, IPv4 in IPv6, IPv6 in IPv6, VXLAN on UDP 4789;
//! - 802.3 frames (length field at most 1500) with LLC headers of various
//!   DSAP/SSAP (STP, SNAP, IPX, NetBEUI, ISO, raw 802.3 0xffff, ...);
//! - other EtherTypes (LLDP, PPPoE, IPX, AppleTalk, DECnet, ...);
//! - broadcast, IPv4 and IPv6 multicast and unicast destination MACs;
//! - captures shorter than the frame (cut at or next to every header
//!   boundary), frames claiming a wire length beyond what was captured,
//!   Ethernet padding, runts of 0 to 13 bytes, and random bytes.
//!
//! [`write_pcap`](crate::write_pcap) writes a trace as a classic pcap file
//! (link type Ethernet, microsecond timestamps, which libpcap, tcpdump and
//! `netvm-io` read).

use netvm_vm::{Packet, Timestamp};

use crate::{internet_checksum, SplitMix64, EPOCH};

/// IPv4 addresses the frames use (and filter expressions name).
/// The first four are drawn more often.
pub const IPV4_POOL: &[[u8; 4]] = &[
    [10, 0, 0, 1],
    [10, 1, 1, 1],
    [10, 1, 2, 3],
    [192, 168, 1, 1],
    [10, 0, 0, 2],
    [10, 1, 0, 0],
    [10, 255, 255, 255],
    [192, 168, 1, 255],
    [192, 168, 0, 0],
    [172, 16, 0, 1],
    [127, 0, 0, 1],
    [8, 8, 8, 8],
    [224, 0, 0, 1],
    [224, 0, 0, 251],
    [239, 1, 2, 3],
    [255, 255, 255, 255],
    [0, 0, 0, 0],
    [0, 0, 0, 10],
];

/// IPv6 addresses the frames use.
pub const IPV6_POOL: &[[u16; 8]] = &[
    [0x2001, 0xdb8, 0, 0, 0, 0, 0, 1],
    [0x2001, 0xdb8, 0, 0, 0, 0, 0, 2],
    [0x2001, 0xdb8, 1, 0, 0, 0, 0, 1],
    [0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 0x10],
    [0xfe80, 0, 0, 0, 0, 0, 0, 1],
    [0xfe80, 0, 0, 0, 0x0211, 0x22ff, 0xfe33, 0x4455],
    [0xff02, 0, 0, 0, 0, 0, 0, 1],
    [0xff02, 0, 0, 0, 0, 0, 0, 2],
    [0xff05, 0, 0, 0, 0, 0, 1, 3],
    [0, 0, 0, 0, 0, 0, 0, 1],
    [0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0xffff, 0x0a01, 0x0101],
];

/// MAC addresses the frames use: broadcast, IPv4 and IPv6 multicast, STP,
/// and a few unicast ones.
pub const MAC_POOL: &[[u8; 6]] = &[
    [0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
    [0x01, 0x00, 0x5e, 0x00, 0x00, 0x01],
    [0x01, 0x00, 0x5e, 0x7f, 0xff, 0xfa],
    [0x33, 0x33, 0x00, 0x00, 0x00, 0x01],
    [0x01, 0x80, 0xc2, 0x00, 0x00, 0x00],
    [0x00, 0x11, 0x22, 0x33, 0x44, 0x55],
    [0x00, 0x00, 0x5e, 0x00, 0x53, 0x01],
    [0x02, 0x00, 0x00, 0x00, 0x00, 0x01],
    [0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
    [0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff],
];

/// TCP/UDP/SCTP ports the frames use.
pub const PORT_POOL: &[u16] =
    &[20, 21, 22, 23, 24, 25, 53, 80, 443, 8080, 1024, 1025, 1026, 1027, 1028, 1029, 1030, 4789, 0, 19, 26, 1023, 1031, 65535];

/// VLAN IDs the frames use.
pub const VLAN_POOL: &[u16] = &[0, 1, 2, 10, 20, 100, 200, 4094, 4095];

/// MPLS labels the frames use.
pub const MPLS_POOL: &[u32] = &[0, 1, 2, 3, 5, 16, 100, 1000, 0xfffff];

const ETH_IPV4: u16 = 0x0800;
const ETH_ARP: u16 = 0x0806;
const ETH_RARP: u16 = 0x8035;
const ETH_IPV6: u16 = 0x86dd;
const ETH_MPLS: u16 = 0x8847;
const ETH_MPLS_MC: u16 = 0x8848;

/// Other EtherTypes: DECnet, LAT, AppleTalk, AARP, IPX, PPPoE discovery and
/// session, LLDP, MACsec, Wake-on-LAN, a loopback, and 1501-1535 (neither a
/// length nor a type).
const OTHER_ETHERTYPES: &[u16] = &[0x6003, 0x6004, 0x809b, 0x80f3, 0x8137, 0x8863, 0x8864, 0x88cc, 0x88e5, 0x0842, 0x9000, 0x05dd, 0x0600];

/// IPv4 protocols other than TCP/UDP/ICMP/SCTP/IGMP/GRE/tunnels: ESP, AH,
/// OSPF, PIM, VRRP, CARP's 112, 0 (IPv6 hop-by-hop number), 255.
const OTHER_PROTOS: &[u8] = &[50, 51, 89, 103, 112, 0, 255, 58, 3];

/// An IPv4 address: mostly from [`IPV4_POOL`] (its first four more often),
/// sometimes random.
fn pool_ipv4(r: &mut SplitMix64) -> [u8; 4] {
    match r.below(100) {
        0..=7 => r.next_u32().to_be_bytes(),
        8..=47 => r.pick(&IPV4_POOL[..4]),
        _ => r.pick(IPV4_POOL),
    }
}

/// An IPv6 address: mostly from [`IPV6_POOL`], sometimes random.
fn pool_ipv6(r: &mut SplitMix64) -> [u8; 16] {
    let mut a = [0u8; 16];
    if r.chance(8) {
        a.copy_from_slice(&r.bytes(16));
    } else {
        for (i, w) in r.pick(IPV6_POOL).iter().enumerate() {
            a[2 * i..2 * i + 2].copy_from_slice(&w.to_be_bytes());
        }
    }
    a
}

/// A MAC address: mostly from [`MAC_POOL`], sometimes random.
fn pool_mac(r: &mut SplitMix64) -> [u8; 6] {
    if r.chance(15) {
        let mut m = [0u8; 6];
        m.copy_from_slice(&r.bytes(6));
        m
    } else {
        r.pick(MAC_POOL)
    }
}

/// A port: mostly from [`PORT_POOL`] (its first eight more often), sometimes random.
fn pool_port(r: &mut SplitMix64) -> u16 {
    match r.below(100) {
        0..=9 => r.next_u16(),
        10..=49 => r.pick(&PORT_POOL[..8]),
        _ => r.pick(PORT_POOL),
    }
}

/// A frame under construction, with the offsets of its header boundaries
/// (where a truncated capture is most interesting).
struct Frame {
    b: Vec<u8>,
    marks: Vec<usize>,
}

impl Frame {
    fn mark(&mut self) {
        self.marks.push(self.b.len());
    }
    fn put(&mut self, x: &[u8]) {
        self.b.extend_from_slice(x);
    }
    fn u8(&mut self, v: u8) {
        self.b.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.put(&v.to_be_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.put(&v.to_be_bytes());
    }
    fn set16(&mut self, at: usize, v: u16) {
        self.b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
}

/// What an IP header carries.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Payload {
    Tcp,
    Udp,
    Icmp,
    Icmp6,
    Sctp,
    Igmp,
    Gre,
    Ipv4,
    Ipv6,
    Other(u8),
}

impl Payload {
    fn proto(self) -> u8 {
        match self {
            Payload::Tcp => 6,
            Payload::Udp => 17,
            Payload::Icmp => 1,
            Payload::Icmp6 => 58,
            Payload::Sctp => 132,
            Payload::Igmp => 2,
            Payload::Gre => 47,
            Payload::Ipv4 => 4,
            Payload::Ipv6 => 41,
            Payload::Other(p) => p,
        }
    }
}

fn choose_payload(r: &mut SplitMix64, v6: bool, depth: u32) -> Payload {
    let tunnels = depth < 2;
    match r.below(100) {
        0..=29 => Payload::Tcp,
        30..=51 => Payload::Udp,
        52..=63 => {
            if v6 {
                Payload::Icmp6
            } else {
                Payload::Icmp
            }
        }
        64..=67 => {
            if v6 {
                Payload::Icmp
            } else {
                Payload::Icmp6
            }
        }
        68..=73 => Payload::Sctp,
        74..=77 => Payload::Igmp,
        78..=83 if tunnels => Payload::Gre,
        84..=87 if tunnels => Payload::Ipv4,
        88..=91 if tunnels => Payload::Ipv6,
        92..=95 => Payload::Other(r.next_u8()),
        _ => Payload::Other(r.pick(OTHER_PROTOS)),
    }
}

fn tcp(r: &mut SplitMix64, f: &mut Frame) {
    f.mark();
    f.u16(pool_port(r));
    f.u16(pool_port(r));
    f.u32(r.next_u32());
    f.u32(if r.chance(30) { 0 } else { r.next_u32() });
    let doff: u8 = match r.below(20) {
        0 => r.range(0, 4) as u8,
        1..=4 => r.range(6, 15) as u8,
        _ => 5,
    };
    f.u8(doff << 4 | if r.chance(5) { r.next_u8() & 0x0f } else { 0 });
    let flags = match r.below(14) {
        0 => 0x02,         // SYN
        1 => 0x12,         // SYN|ACK
        2 | 3 => 0x10,     // ACK
        4 => 0x11,         // FIN|ACK
        5 => 0x01,         // FIN
        6 => 0x04,         // RST
        7 => 0x14,         // RST|ACK
        8 | 9 => 0x18,     // PSH|ACK
        10 => 0x20 | 0x10, // URG|ACK
        11 => 0xc2,        // SYN|ECE|CWR
        12 => 0,
        _ => r.next_u8(),
    };
    f.u8(flags);
    f.u16(r.next_u16());
    f.u16(0);
    f.u16(if flags & 0x20 != 0 { r.next_u16() } else { 0 });
    f.mark();
    if doff > 5 {
        // Options: MSS, NOPs, window scale, timestamps or garbage.
        let n = usize::from(doff - 5) * 4;
        let mut o = if r.chance(50) { vec![1u8; n] } else { r.bytes(n) };
        if n >= 4 && r.chance(60) {
            o[..4].copy_from_slice(&[2, 4, 0x05, 0xb4]);
        }
        f.put(&o);
        f.mark();
    }
    payload_bytes(r, f);
}

fn payload_bytes(r: &mut SplitMix64, f: &mut Frame) {
    let n = match r.below(10) {
        0..=3 => 0,
        4..=8 => r.range(1, 64) as usize,
        _ => r.range(65, 1400) as usize,
    };
    let b = r.bytes(n);
    f.put(&b);
}

fn udp(r: &mut SplitMix64, f: &mut Frame, depth: u32) {
    f.mark();
    let start = f.b.len();
    let vxlan = depth < 2 && r.chance(8);
    let sport = pool_port(r);
    f.u16(sport);
    f.u16(if vxlan { 4789 } else { pool_port(r) });
    f.u16(0);
    f.u16(0);
    f.mark();
    if vxlan {
        f.put(&[0x08, 0, 0, 0]);
        f.u32(r.range(0, 20) as u32 * 256);
        f.mark();
        ethernet(r, f, depth + 1);
    } else {
        payload_bytes(r, f);
    }
    let len = (f.b.len() - start) as u16;
    if r.chance(90) {
        f.set16(start + 4, len);
    }
}

fn icmp(r: &mut SplitMix64, f: &mut Frame, depth: u32) {
    f.mark();
    let t = if r.chance(85) { r.pick(&[0u8, 0, 3, 3, 4, 5, 8, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]) } else { r.next_u8() };
    f.u8(t);
    f.u8(if r.chance(80) { r.range(0, 15) as u8 } else { r.next_u8() });
    f.u16(r.next_u16());
    f.u32(r.next_u32());
    f.mark();
    if matches!(t, 3 | 11 | 12) && depth < 2 && r.chance(60) {
        // The offending datagram's header.
        ipv4(r, f, depth + 1);
    } else {
        payload_bytes(r, f);
    }
}

fn icmp6(r: &mut SplitMix64, f: &mut Frame) {
    f.mark();
    let t =
        if r.chance(85) { r.pick(&[1u8, 2, 3, 4, 128, 128, 129, 129, 130, 131, 133, 134, 135, 135, 136, 137, 143]) } else { r.next_u8() };
    f.u8(t);
    f.u8(if r.chance(80) { r.range(0, 6) as u8 } else { r.next_u8() });
    f.u16(r.next_u16());
    f.u32(r.next_u32());
    f.mark();
    if matches!(t, 135 | 136) {
        let a = pool_ipv6(r);
        f.put(&a);
        f.mark();
    }
    payload_bytes(r, f);
}

fn sctp(r: &mut SplitMix64, f: &mut Frame) {
    f.mark();
    f.u16(pool_port(r));
    f.u16(pool_port(r));
    f.u32(r.next_u32());
    f.u32(r.next_u32());
    f.mark();
    // One chunk: DATA, INIT, SACK, HEARTBEAT, ABORT...
    let t = r.pick(&[0u8, 1, 2, 3, 4, 6, 7]);
    let n = r.range(0, 32) as u16;
    f.u8(t);
    f.u8(r.next_u8());
    f.u16(4 + n);
    let b = r.bytes(usize::from(n));
    f.put(&b);
}

fn igmp(r: &mut SplitMix64, f: &mut Frame) {
    f.mark();
    f.u8(r.pick(&[0x11u8, 0x12, 0x16, 0x17, 0x22]));
    f.u8(r.next_u8());
    f.u16(r.next_u16());
    let g = pool_ipv4(r);
    f.put(&g);
    f.mark();
}

fn gre(r: &mut SplitMix64, f: &mut Frame, depth: u32) {
    f.mark();
    // Flags: none, checksum, key, sequence; version 0 (or 1: PPTP).
    let flags: u16 = match r.below(8) {
        0 => 0x8000,
        1 => 0x2000,
        2 => 0x1000,
        3 => 0x3001,
        _ => 0,
    };
    let (ptype, inner) = match r.below(10) {
        0..=4 => (ETH_IPV4, 4),
        5..=7 => (ETH_IPV6, 6),
        8 => (0x6558, 2), // transparent Ethernet bridging
        _ => (r.next_u16(), 0),
    };
    f.u16(flags);
    f.u16(ptype);
    for bit in [0x8000u16, 0x2000, 0x1000] {
        if flags & bit != 0 {
            f.u32(r.next_u32());
        }
    }
    f.mark();
    match inner {
        4 => ipv4(r, f, depth + 1),
        6 => ipv6(r, f, depth + 1),
        2 => ethernet(r, f, depth + 1),
        _ => payload_bytes(r, f),
    }
}

fn transport(r: &mut SplitMix64, f: &mut Frame, p: Payload, depth: u32) {
    match p {
        Payload::Tcp => tcp(r, f),
        Payload::Udp => udp(r, f, depth),
        Payload::Icmp => icmp(r, f, depth),
        Payload::Icmp6 => icmp6(r, f),
        Payload::Sctp => sctp(r, f),
        Payload::Igmp => igmp(r, f),
        Payload::Gre => gre(r, f, depth),
        Payload::Ipv4 => ipv4(r, f, depth + 1),
        Payload::Ipv6 => ipv6(r, f, depth + 1),
        Payload::Other(_) => payload_bytes(r, f),
    }
}

/// An IPv4 datagram.
fn ipv4(r: &mut SplitMix64, f: &mut Frame, depth: u32) {
    f.mark();
    let start = f.b.len();
    let ihl: u8 = match r.below(20) {
        0 => r.range(0, 4) as u8,
        1..=4 => r.range(6, 15) as u8,
        _ => 5,
    };
    let version = if r.chance(3) { r.range(0, 15) as u8 } else { 4 };
    let p = choose_payload(r, false, depth);
    f.u8(version << 4 | ihl);
    f.u8(if r.chance(20) { r.next_u8() } else { 0 });
    f.u16(0); // total length, below
    f.u16(r.next_u16());
    // Fragmentation: none, DF, first (MF), middle (MF, offset), last (offset), odd.
    let frag: u16 = match r.below(20) {
        0..=9 => 0,
        10..=13 => 0x4000,
        14 => 0x2000,
        15 => 0x2000 | r.range(1, 200) as u16,
        16 => r.range(1, 200) as u16,
        17 => 0x4000 | r.range(1, 8) as u16,
        18 => 0x8000 | if r.chance(50) { 0 } else { 0x2000 },
        _ => 0x1fff,
    };
    f.u16(frag);
    f.u8(r.pick(&[64u8, 128, 255, 1, 0]));
    f.u8(p.proto());
    f.u16(0); // checksum, below
    let (src, dst) = (pool_ipv4(r), pool_ipv4(r));
    f.put(&src);
    f.put(&dst);
    f.mark();
    if ihl > 5 {
        let n = usize::from(ihl - 5) * 4;
        let o = match r.below(4) {
            0 => vec![1u8; n], // NOPs
            1 => {
                let mut o = vec![0u8; n];
                o[0] = 0x94; // router alert
                o[1] = 4;
                o
            }
            _ => r.bytes(n),
        };
        f.put(&o);
        f.mark();
    }
    let hlen = f.b.len() - start;
    transport(r, f, p, depth);
    let total = (f.b.len() - start) as u16;
    if r.chance(90) {
        f.set16(start + 2, total);
    } else {
        f.set16(start + 2, r.next_u16());
    }
    if r.chance(90) {
        let c = internet_checksum(&f.b[start..start + hlen]);
        f.set16(start + 10, c);
    }
}

/// An IPv6 datagram with 0 to 4 extension headers.
fn ipv6(r: &mut SplitMix64, f: &mut Frame, depth: u32) {
    f.mark();
    let start = f.b.len();
    let version = if r.chance(3) { r.range(0, 15) as u8 } else { 6 };
    f.u32(u32::from(version) << 28 | if r.chance(30) { r.next_u32() & 0x0fff_ffff } else { 0 });
    f.u16(0); // payload length, below
    let nh_at = f.b.len();
    f.u8(0); // next header, below
    f.u8(r.pick(&[64u8, 255, 1]));
    let (src, dst) = (pool_ipv6(r), pool_ipv6(r));
    f.put(&src);
    f.put(&dst);
    f.mark();
    let n_ext = match r.below(10) {
        0..=5 => 0,
        6 | 7 => 1,
        8 => 2,
        _ => r.range(3, 4),
    };
    let mut prev = nh_at;
    for _ in 0..n_ext {
        let kind = r.pick(&[0u8, 43, 44, 60, 51]);
        f.b[prev] = kind;
        prev = f.b.len();
        f.u8(0);
        match kind {
            44 => {
                // Fragment: offset 0 (first, or atomic) or not; M flag.
                f.u8(0);
                let off = if r.chance(50) { 0 } else { r.range(1, 100) as u16 };
                f.u16(off << 3 | u16::from(r.chance(50)));
                f.u32(r.next_u32());
            }
            51 => {
                // AH: length in 4-octet units minus 2.
                let len = r.range(1, 4) as u8;
                f.u8(len);
                let b = r.bytes(usize::from(len) * 4 + 6);
                f.put(&b);
            }
            _ => {
                let len = r.range(0, 2) as u8;
                f.u8(len);
                let mut b = r.bytes(usize::from(len) * 8 + 6);
                if kind == 43 {
                    b[0] = r.pick(&[0u8, 2, 3, 4]); // routing type
                } else if r.chance(50) {
                    b.fill(0); // Pad1 options
                }
                f.put(&b);
            }
        }
        f.mark();
    }
    let p = match r.below(20) {
        0 => Payload::Other(59), // no next header
        1 => Payload::Other(r.next_u8()),
        _ => choose_payload(r, true, depth),
    };
    f.b[prev] = p.proto();
    transport(r, f, p, depth);
    let plen = (f.b.len() - start - 40) as u16;
    f.set16(start + 4, if r.chance(92) { plen } else { r.next_u16() });
}

fn arp(r: &mut SplitMix64, f: &mut Frame, rarp: bool) {
    f.mark();
    let odd = r.chance(10);
    f.u16(if odd { r.pick(&[6u16, 0x0800, 0]) } else { 1 });
    f.u16(if odd && r.chance(50) { ETH_IPV6 } else { ETH_IPV4 });
    f.u8(6);
    f.u8(4);
    let op = if rarp { r.pick(&[3u16, 4, 1]) } else { r.pick(&[1u16, 2, 1, 2, 8, 9]) };
    f.u16(op);
    f.mark();
    let (sha, spa, tha, tpa) = (pool_mac(r), pool_ipv4(r), pool_mac(r), pool_ipv4(r));
    f.put(&sha);
    f.put(&spa);
    f.put(&tha);
    f.put(&tpa);
    f.mark();
}

/// An 802.3 frame body: LLC header (and SNAP) after the length field.
fn llc(r: &mut SplitMix64, f: &mut Frame, len_at: usize) {
    let start = f.b.len();
    match r.below(10) {
        0 | 1 => {
            // SNAP: OUI 0 + EtherType (IPv4, ARP, AppleTalk) or Cisco.
            f.put(&[0xaa, 0xaa, 0x03]);
            let oui = if r.chance(80) { [0u8, 0, 0] } else { [0x00, 0x00, 0x0c] };
            f.put(&oui);
            let et = r.pick(&[ETH_IPV4, ETH_ARP, 0x809b, 0x2000, ETH_IPV6]);
            f.u16(et);
            f.mark();
            if et == ETH_IPV4 {
                ipv4(r, f, 1);
            } else {
                payload_bytes(r, f);
            }
        }
        2 => {
            // Raw 802.3 IPX: 0xffff checksum.
            f.u16(0xffff);
            payload_bytes(r, f);
        }
        _ => {
            let sap = if r.chance(85) { r.pick(&[0x42u8, 0x42, 0xe0, 0xf0, 0xfe, 0x06, 0x04, 0xaa, 0x00, 0x80]) } else { r.next_u8() };
            f.u8(sap);
            f.u8(if r.chance(80) { sap } else { r.next_u8() });
            f.u8(r.pick(&[0x03u8, 0x03, 0xf3, 0xaf]));
            f.mark();
            payload_bytes(r, f);
        }
    }
    let n = (f.b.len() - start) as u16;
    let len = match r.below(10) {
        0 => r.range(0, 1500) as u16,
        1 => 1500,
        _ => n.min(1500),
    };
    f.set16(len_at, len);
}

/// An Ethernet frame (destination, source, tags, EtherType or length, body).
fn ethernet(r: &mut SplitMix64, f: &mut Frame, depth: u32) {
    let (dst, src) = (pool_mac(r), pool_mac(r));
    f.put(&dst);
    f.mark();
    f.put(&src);
    f.mark();
    if r.chance(8) {
        let at = f.b.len();
        f.u16(0);
        f.mark();
        llc(r, f, at);
        return;
    }
    let tags = match r.below(100) {
        0..=67 => 0,
        68..=87 => 1,
        88..=97 => 2,
        _ => 3,
    };
    for i in 0..tags {
        let tpid = if i == 0 && tags > 1 { r.pick(&[0x88a8u16, 0x9100, 0x8100]) } else { 0x8100 };
        f.u16(tpid);
        let vid = if r.chance(90) { r.pick(VLAN_POOL) } else { r.next_u16() & 0x0fff };
        let pcp = if r.chance(50) { 0 } else { r.next_u16() & 0xf000 };
        f.u16(pcp | vid);
        f.mark();
    }
    let kind = r.below(100);
    let mpls = (78..=87).contains(&kind);
    let et = match kind {
        0..=39 => ETH_IPV4,
        40..=62 => ETH_IPV6,
        63..=68 => ETH_ARP,
        69..=71 => ETH_RARP,
        72..=77 => r.pick(OTHER_ETHERTYPES),
        78..=86 => ETH_MPLS,
        87 => ETH_MPLS_MC,
        88..=91 => r.next_u16(),
        92..=95 => {
            // An EtherType with a random body: tags too, sometimes.
            r.pick(&[ETH_IPV4, ETH_IPV6, ETH_ARP, 0x8100, 0x88a8, ETH_MPLS])
        }
        _ => ETH_IPV4,
    };
    f.u16(et);
    f.mark();
    if (92..=95).contains(&kind) {
        let n = r.range(0, 80) as usize;
        let b = r.bytes(n);
        f.put(&b);
        return;
    }
    if mpls {
        let n = r.range(1, 3);
        for i in 0..n {
            let label = if r.chance(90) { r.pick(MPLS_POOL) } else { r.next_u32() & 0xfffff };
            let bos = u32::from(i + 1 == n && r.chance(95));
            f.u32(label << 12 | (r.next_u32() & 0x7) << 9 | bos << 8 | u32::from(r.next_u8()));
            f.mark();
        }
        match r.below(10) {
            0..=4 => ipv4(r, f, depth),
            5..=8 => ipv6(r, f, depth),
            _ => payload_bytes(r, f),
        }
        return;
    }
    match et {
        ETH_IPV4 => ipv4(r, f, depth),
        ETH_IPV6 => ipv6(r, f, depth),
        ETH_ARP => arp(r, f, false),
        ETH_RARP => arp(r, f, true),
        _ => payload_bytes(r, f),
    }
}

/// Generates one frame (see the module documentation), at time zero on
/// input port 0; the caller sets the timestamp.
pub fn generate_frame(r: &mut SplitMix64) -> Packet {
    let kind = r.below(100);
    if kind < 3 {
        // Runt.
        let n = r.range(0, 13) as usize;
        return Packet::from_bytes(r.bytes(n));
    }
    if kind < 6 {
        // Random bytes, sometimes with an IP EtherType.
        let n = r.range(14, 300) as usize;
        let mut b = r.bytes(n);
        if r.chance(60) {
            let et = r.pick(&[ETH_IPV4, ETH_IPV6, ETH_ARP, 0x8100, ETH_MPLS]);
            b[12..14].copy_from_slice(&et.to_be_bytes());
            if et == ETH_IPV4 && n > 14 {
                b[14] = 0x40 | (b[14] & 0x0f);
            }
        }
        return Packet::from_bytes(b);
    }
    let mut f = Frame { b: Vec::with_capacity(128), marks: Vec::new() };
    ethernet(r, &mut f, 0);
    if r.chance(30) && f.b.len() < 60 {
        f.b.resize(60, 0); // Ethernet padding
    }
    let wire = f.b.len();
    let mut data = f.b;
    match r.below(100) {
        0..=17 if !f.marks.is_empty() => {
            // Truncated capture, cut at (or next to) a header boundary.
            let m = r.pick(&f.marks) as i64 + r.pick(&[0i64, 0, 0, -1, 1, -2, 2, 3]);
            data.truncate(m.clamp(0, data.len() as i64) as usize);
        }
        18..=20 => {
            // A snap length of tcpdump's old defaults.
            data.truncate(r.pick(&[54usize, 64, 68, 96]));
        }
        _ => {}
    }
    let mut wire_len = wire as u32;
    if r.chance(3) {
        wire_len += r.range(1, 2000) as u32; // claims more than the frame
    }
    Packet { data, wire_len, ts: Timestamp::default(), in_port: 0 }
}

/// Generates `n` frames with [`generate_frame`], with timestamps 1 ms apart
/// from [`EPOCH`] (whole microseconds, so that [`write_pcap`](crate::write_pcap)
/// keeps them).
pub fn generate_trace(rng: &mut SplitMix64, n: usize) -> Vec<Packet> {
    (0..n)
        .map(|i| {
            let mut p = generate_frame(rng);
            let us = i as u64 * 1000;
            p.ts = Timestamp { sec: EPOCH + us / 1_000_000, nsec: (us % 1_000_000) as u32 * 1000 };
            p
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_are_deterministic_and_well_formed() {
        let a = generate_trace(&mut SplitMix64::new(7), 2000);
        let b = generate_trace(&mut SplitMix64::new(7), 2000);
        assert_eq!(a, b);
        assert_ne!(a, generate_trace(&mut SplitMix64::new(8), 2000));
        for p in &a {
            assert!(p.wire_len as usize >= p.data.len());
            assert!(p.data.len() <= 262_144);
        }
        let et = |p: &Packet| (p.data.len() >= 14).then(|| u16::from_be_bytes([p.data[12], p.data[13]]));
        let count = |t: u16| a.iter().filter(|p| et(p) == Some(t)).count();
        for t in [ETH_IPV4, ETH_IPV6, ETH_ARP, ETH_RARP, 0x8100, 0x88a8, ETH_MPLS] {
            assert!(count(t) > 5, "EtherType {t:#06x}: {} frames", count(t));
        }
        assert!(a.iter().any(|p| p.data.len() < 14));
        assert!(a.iter().any(|p| (p.data.len() as u32) < p.wire_len));
        assert!(a.iter().filter_map(et).any(|t| t <= 1500));
    }
}
