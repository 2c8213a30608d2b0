//! Deterministic workloads for the filter benchmark (`filterbench`) and the
//! filters' correctness tests.
//!
//! - [`full_path_packet`]: the 64-byte frame 10.1.1.1:20 → 10.2.2.2:30 TCP,
//!   which every one of the five filters accepts after running its longest
//!   path (for the `or` filter, its last alternative);
//! - [`mixed_trace`]: frames of every kind the filters distinguish (IPv4
//!   TCP/UDP/ICMP/other with the interesting addresses and ports, IP options,
//!   first and non-first fragments, IPv6, ARP, 802.1Q, other ethertypes,
//!   truncated captures and runts) in proportions that exercise every branch
//!   of every filter, at most [`SNAPLEN`] bytes stored per frame;
//! - [`edge_cases`]: frames at every boundary the filters check (each prefix of
//!   the full-path frame, every IHL, fragment flags), for the correctness tests.
//!
//! Everything is generated from a seed with SplitMix64, so a seed names a
//! trace: the same seed gives the same bytes on every machine. The
//! benchmark writes the trace to pcap (`netvm_bench::trace`) so that netvm
//! and the C peers read the very same bytes.

use netvm_vm::{Packet, Timestamp};

use crate::{internet_checksum, SplitMix64};

/// Bytes stored per frame at most (the capture's snap length).
pub const SNAPLEN: usize = 128;

/// Number of frames in the benchmark's mixed trace.
pub const MIXED_PACKETS: usize = 1_000_000;

/// Seed of the benchmark's mixed trace.
pub const MIXED_SEED: u64 = 0x6e65_7476_6d20_3633; // "netvm 63"

/// Source address of the full path: 10.1.1.1.
pub const SRC: u32 = 0x0a01_0101;
/// Destination address of the full path: 10.2.2.2.
pub const DST: u32 = 0x0a02_0202;
/// Source port of the full path.
pub const SPORT: u16 = 20;
/// Destination port of the full path.
pub const DPORT: u16 = 30;

/// The fields of an IPv4 frame that the filters look at, and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Frame {
    /// Source address.
    pub src: u32,
    /// Destination address.
    pub dst: u32,
    /// IP protocol (6 TCP, 17 UDP, 1 ICMP, …).
    pub proto: u8,
    /// Header length in 32-bit words (the IHL field, 0 to 15; 5 without options).
    pub ihl: u8,
    /// The flags and fragment-offset word (bytes 6-7 of the IP header).
    pub frag: u16,
    /// Transport source port (TCP/UDP; otherwise the first two transport bytes).
    pub sport: u16,
    /// Transport destination port.
    pub dport: u16,
    /// Frame length on the wire, Ethernet header included (at least 14).
    pub wire_len: usize,
}

impl Ipv4Frame {
    /// The full path: 10.1.1.1:20 → 10.2.2.2:30 TCP, no options, not a fragment, 64 bytes.
    pub fn full_path() -> Ipv4Frame {
        Ipv4Frame { src: SRC, dst: DST, proto: 6, ihl: 5, frag: 0x4000, sport: SPORT, dport: DPORT, wire_len: 64 }
    }

    /// The whole frame (`wire_len` bytes; bytes past the headers are zero).
    pub fn bytes(&self) -> Vec<u8> {
        let len = self.wire_len.max(14);
        let mut f = vec![0u8; len];
        let mut w = |off: usize, b: &[u8]| {
            let end = (off + b.len()).min(len);
            if off < end {
                f[off..end].copy_from_slice(&b[..end - off]);
            }
        };
        w(0, &[0x02, 0, 0, 0, 0, 2]); // destination MAC
        w(6, &[0x02, 0, 0, 0, 0, 1]); // source MAC
        w(12, &0x0800u16.to_be_bytes());
        let ihl = usize::from(self.ihl & 0x0f);
        let hlen = (ihl * 4).max(20);
        let total = (len - 14).min(0xffff) as u16;
        let mut ip = vec![0u8; hlen];
        ip[0] = 0x40 | (self.ihl & 0x0f);
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
        ip[6..8].copy_from_slice(&self.frag.to_be_bytes());
        ip[8] = 64;
        ip[9] = self.proto;
        ip[12..16].copy_from_slice(&self.src.to_be_bytes());
        ip[16..20].copy_from_slice(&self.dst.to_be_bytes());
        for b in &mut ip[20..] {
            *b = 1; // NOP options
        }
        let csum = internet_checksum(&ip[..ihl.max(5) * 4]);
        ip[10..12].copy_from_slice(&csum.to_be_bytes());
        w(14, &ip);
        // Transport: where libpcap looks for it, 14 + 4 * IHL (even when IHL < 5).
        let t = 14 + ihl * 4;
        let mut l4 = [0u8; 20];
        l4[0..2].copy_from_slice(&self.sport.to_be_bytes());
        l4[2..4].copy_from_slice(&self.dport.to_be_bytes());
        match self.proto {
            6 => {
                l4[4..8].copy_from_slice(&0x0102_0304u32.to_be_bytes()); // seq
                l4[12] = 0x50; // data offset 5
                l4[13] = 0x10; // ACK
                l4[14..16].copy_from_slice(&8192u16.to_be_bytes());
                w(t, &l4);
            }
            17 => {
                let ulen = (len.saturating_sub(t)).min(0xffff) as u16;
                l4[4..6].copy_from_slice(&ulen.to_be_bytes());
                w(t, &l4[..8]);
            }
            _ => w(t, &l4[..4]),
        }
        if t < 14 + hlen {
            // IHL < 5: the "ports" overlap the IP header; keep the address fields
            // where they belong and let the ports land where libpcap reads them.
            w(14 + 12, &self.src.to_be_bytes());
            w(14 + 16, &self.dst.to_be_bytes());
        }
        f
    }

    /// The frame as a packet with at most `snaplen` bytes stored.
    pub fn packet(&self, snaplen: usize) -> Packet {
        captured(self.bytes(), snaplen)
    }
}

/// A packet holding the first `snaplen` bytes of `frame`, with the frame's wire length.
pub fn captured(mut frame: Vec<u8>, snaplen: usize) -> Packet {
    let wire_len = frame.len() as u32;
    frame.truncate(snaplen);
    Packet { data: frame, wire_len, ts: Timestamp::default(), in_port: 0 }
}

/// The 64-byte full-path frame: 10.1.1.1:20 → 10.2.2.2:30 TCP.
pub fn full_path_packet() -> Packet {
    Ipv4Frame::full_path().packet(SNAPLEN)
}

/// A frame of `len` bytes with ethertype `ethertype` and pseudo-random bytes after it.
fn other_frame(rng: &mut SplitMix64, ethertype: u16, len: usize) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len).map(|_| rng.next_u8()).collect();
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&ethertype.to_be_bytes());
    f
}

/// A wire length: 40 % minimum-size frames, 30 % full-size, 30 % in between.
fn wire_len(rng: &mut SplitMix64) -> usize {
    match rng.below(10) {
        0..=3 => 64,
        4..=6 => 1514,
        _ => rng.range(64, 1514) as usize,
    }
}

/// A random IPv4 frame with the filters' interesting values over-represented.
fn ipv4_frame(rng: &mut SplitMix64) -> Ipv4Frame {
    let mut f = Ipv4Frame::full_path();
    f.wire_len = wire_len(rng);
    if rng.per_mille(250) {
        // The full-path flow itself (with its sizes and, rarely, a fragment or options).
    } else {
        f.src = match rng.below(100) {
            0..=29 => SRC,
            30..=39 => 0x0a02_0202,
            40..=49 => 0x0a03_0303,
            50..=59 => 0x0a04_0404,
            _ => rng.next_u32(),
        };
        f.dst = if rng.per_mille(600) { DST } else { rng.next_u32() };
        f.proto = match rng.below(100) {
            0..=74 => 6,
            75..=89 => 17,
            90..=94 => 1,
            _ => 47,
        };
        f.sport = if rng.per_mille(600) { SPORT } else { rng.next_u16() };
        f.dport = if rng.per_mille(600) { DPORT } else { rng.next_u16() };
    }
    f.ihl = match rng.below(100) {
        0..=91 => 5,
        92..=98 => rng.range(6, 15) as u8,
        _ => rng.range(0, 4) as u8,
    };
    f.frag = match rng.below(100) {
        0..=91 => 0x4000,                                                 // DF, not a fragment
        92..=95 => 0x2000,                                                // first fragment (MF, offset 0)
        _ => (rng.range(1, 0x1fff) as u16) | (rng.below(2) as u16) << 13, // non-first
    };
    f
}

/// The mixed trace: `n` frames generated from `seed`, at most [`SNAPLEN`] bytes stored each.
///
/// Composition (per mille, in expectation): 700 IPv4 (of which a quarter is
/// the full-path flow, the rest spread over the four interesting sources, the
/// interesting destination and ports, TCP/UDP/ICMP/GRE, 8 % with IP options or
/// a bogus IHL, 8 % fragments; 4 % of IPv4 captures truncated to 14-60 bytes),
/// 100 IPv6, 80 ARP, 40 802.1Q-tagged IPv4, 40 other ethertypes, 40 runts
/// (prefixes of 0-33 bytes of the full-path frame). Timestamps advance 1 µs a frame.
pub fn mixed_trace(n: usize, seed: u64) -> Vec<Packet> {
    MixedTrace::new(seed).take(n).collect()
}

/// The frames of [`mixed_trace`], generated one at a time: the same
/// sequence for the same seed, for traces too large to hold in memory.
#[derive(Clone, Debug)]
pub struct MixedTrace {
    rng: SplitMix64,
    i: usize,
}

impl MixedTrace {
    /// The trace of `seed`, from its first frame.
    pub fn new(seed: u64) -> MixedTrace {
        MixedTrace { rng: SplitMix64::new(seed), i: 0 }
    }
}

impl Iterator for MixedTrace {
    type Item = Packet;

    fn next(&mut self) -> Option<Packet> {
        let mut rng = self.rng.clone();
        let i = self.i;
        self.i += 1;
        let r = rng.below(1000);
        let mut p = if r < 700 {
            let f = ipv4_frame(&mut rng);
            let mut p = f.packet(SNAPLEN);
            if rng.per_mille(40) {
                p.data.truncate(rng.range(14, 60) as usize);
            }
            p
        } else if r < 800 {
            // IPv6 carrying TCP or UDP.
            let len = wire_len(&mut rng);
            let mut f = other_frame(&mut rng, 0x86dd, len);
            f[14] = 0x60;
            f[20] = if rng.per_mille(700) { 6 } else { 17 };
            captured(f, SNAPLEN)
        } else if r < 880 {
            // ARP request, padded to the minimum frame size.
            let mut f = other_frame(&mut rng, 0x0806, 60);
            f[14..22].copy_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
            f[28..32].copy_from_slice(&SRC.to_be_bytes());
            f[38..42].copy_from_slice(&DST.to_be_bytes());
            captured(f, SNAPLEN)
        } else if r < 920 {
            // 802.1Q-tagged copy of an IPv4 frame: `ip` does not match it.
            let inner = ipv4_frame(&mut rng).bytes();
            let mut f = Vec::with_capacity(inner.len() + 4);
            f.extend_from_slice(&inner[..12]);
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
            f.extend_from_slice(&inner[12..]);
            captured(f, SNAPLEN)
        } else if r < 960 {
            let et = rng.pick(&[0x88cc, 0x8137, 0x8863, 0x0842, 0x0801]);
            let len = wire_len(&mut rng);
            captured(other_frame(&mut rng, et, len), SNAPLEN)
        } else {
            // Runts: prefixes of the full-path frame.
            let mut f = Ipv4Frame::full_path().bytes();
            f.truncate(rng.range(0, 33) as usize);
            captured(f, SNAPLEN)
        };
        p.ts = Timestamp { sec: 1_700_000_000 + (i / 1_000_000) as u64, nsec: ((i % 1_000_000) * 1000) as u32 };
        self.rng = rng;
        Some(p)
    }
}

/// Frames at every boundary the five filters check: each prefix (0 to 64
/// bytes) of the full-path frame, both as a runt and as a truncated capture
/// of the 64-byte frame; the full path with every IHL 0-15, each with and
/// without room for the ports; fragment flags; each interesting address as
/// source and destination; other protocols and ethertypes.
pub fn edge_cases() -> Vec<Packet> {
    let mut out = Vec::new();
    let full = Ipv4Frame::full_path().bytes();
    for n in 0..=full.len() {
        out.push(captured(full[..n].to_vec(), SNAPLEN)); // runt of n bytes
        let mut p = captured(full.clone(), SNAPLEN); // 64-byte frame, n bytes captured
        p.data.truncate(n);
        out.push(p);
    }
    for ihl in 0..=15u8 {
        for extra in [0usize, 1, 3, 4, 20] {
            let f = Ipv4Frame { ihl, wire_len: (14 + usize::from(ihl) * 4 + extra).max(34), ..Ipv4Frame::full_path() };
            out.push(f.packet(SNAPLEN));
        }
    }
    for frag in [0x0000, 0x4000, 0x2000, 0x0001, 0x1fff, 0x2001, 0x8000, 0xe000, 0xffff] {
        out.push(Ipv4Frame { frag, ..Ipv4Frame::full_path() }.packet(SNAPLEN));
    }
    let addrs = [SRC, DST, 0x0a03_0303, 0x0a04_0404, 0x0a01_0102, 0x0b01_0101, 0];
    for &src in &addrs {
        for &dst in &addrs {
            for proto in [6, 17, 1, 0] {
                out.push(Ipv4Frame { src, dst, proto, ..Ipv4Frame::full_path() }.packet(SNAPLEN));
            }
        }
    }
    for (sport, dport) in [(20, 30), (30, 20), (20, 31), (21, 30), (0, 0), (20, 0x1e00), (0x1400, 30)] {
        out.push(Ipv4Frame { sport, dport, ..Ipv4Frame::full_path() }.packet(SNAPLEN));
    }
    for et in [0x0800u16, 0x0801, 0x0008, 0x86dd, 0x0806, 0x8100, 0xffff, 0x0000] {
        let mut f = full.clone();
        f[12..14].copy_from_slice(&et.to_be_bytes());
        out.push(captured(f, SNAPLEN));
    }
    for (i, p) in out.iter_mut().enumerate() {
        p.ts = Timestamp { sec: 1_600_000_000, nsec: (i * 1000) as u32 };
    }
    out
}
