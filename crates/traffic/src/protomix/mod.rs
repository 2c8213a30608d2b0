//! An application-protocol mix: a deterministic, seeded trace of complete
//! conversations over Ethernet and IPv4, for measuring an IDS (or any
//! flow-aware application) on traffic shaped like a network's.
//!
//! - HTTP/1.1 on TCP 80 (and 8080): a three-way handshake, one to three
//!   requests (GET, POST, HEAD, PUT; URIs with query strings, some
//!   percent-encoded; Host, User-Agent, Accept, Cookie, Content-Type,
//!   Content-Length; form and JSON bodies; one URI in fifty and a few user
//!   agents those of scanners and attacks) each with its response (varied
//!   status codes, headers, HTML, JSON or binary bodies split into segments
//!   of at most the MSS), then a FIN teardown or, sometimes, a RST;
//! - DNS on UDP 53: A, AAAA, MX and TXT queries for names of several labels,
//!   and their responses (answers, CNAME chains with compression pointers,
//!   NXDOMAIN, EDNS OPT records), every header count matching the records;
//! - TLS on TCP 443: a ClientHello (SNI, cipher suites, supported groups,
//!   ALPN, supported versions, key share), the server's flight (TLS 1.2:
//!   ServerHello, Certificate of one to three certificate-sized entries,
//!   ServerKeyExchange, ServerHelloDone; TLS 1.3: ServerHello, then
//!   encrypted records of the same size), the key exchange, records of
//!   application data (random bytes), a close_notify alert;
//! - the rest: ICMP echo requests and replies, UDP datagrams of random bytes
//!   between random ports, SSH on TCP 22 (banners, KEXINIT, then encrypted
//!   packets), SMTP on TCP 25 (EHLO, MAIL FROM, RCPT TO, DATA, QUIT).
//!
//! Proportions are per conversation ([`Mix`]). Many conversations are open
//! at once ([`ProtoMixConfig::concurrent`]) and their packets interleave, so
//! a flow tracker sees the interleaving of a busy link. Every checksum (IPv4,
//! TCP, UDP, ICMP) is correct and sequence and acknowledgement numbers are
//! consistent in both directions; sizes are those of real traffic (many
//! 54- to 66-byte ACKs, MSS-sized data). Clients are in 10.0.0.0/8, servers
//! in the documentation ranges 192.0.2.0/24, 198.51.100.0/24 and
//! 203.0.113.0/24. Timestamps increase strictly, by at least 1 µs.
//!
//! The trace ends after [`ProtoMixConfig::packets`] packets or once
//! [`ProtoMixConfig::bytes`] bytes have been sent, whichever comes first,
//! cutting the conversations then in progress, as a capture stopped at that
//! moment would. [`ProtoMix`] is an iterator: traces of any size stream in
//! memory bounded by the open conversations.

mod payloads;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use netvm_vm::{Packet, Timestamp};

use crate::apps::{ipv4_frame, tcp_frame};
use crate::{internet_checksum, SplitMix64, EPOCH};

/// Seed of the benchmark's protocol mix (`filterbench gen-protomix`).
pub const PROTOMIX_SEED: u64 = 0x7072_6f74_6f6d_6978; // "protomix"

/// Weights of the kinds of conversation: each new conversation is of a kind
/// drawn with probability weight / sum of weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mix {
    /// HTTP/1.1 on TCP 80 (15 % of them on 8080).
    pub http: u32,
    /// DNS on UDP 53.
    pub dns: u32,
    /// TLS on TCP 443.
    pub tls: u32,
    /// ICMP echo.
    pub icmp: u32,
    /// UDP between random ports.
    pub udp: u32,
    /// SSH on TCP 22.
    pub ssh: u32,
    /// SMTP on TCP 25.
    pub smtp: u32,
}

impl Default for Mix {
    /// 35 % HTTP, 30 % DNS, 20 % TLS, 4 % ICMP, 5 % UDP, 3 % SSH, 3 % SMTP.
    fn default() -> Self {
        Mix { http: 35, dns: 30, tls: 20, icmp: 4, udp: 5, ssh: 3, smtp: 3 }
    }
}

/// The kinds of conversation of a [`Mix`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// HTTP/1.1 over TCP.
    Http,
    /// DNS over UDP.
    Dns,
    /// TLS over TCP.
    Tls,
    /// ICMP echo.
    Icmp,
    /// UDP of random bytes.
    Udp,
    /// SSH over TCP.
    Ssh,
    /// SMTP over TCP.
    Smtp,
}

impl Mix {
    fn weights(&self) -> [(Kind, u32); 7] {
        [
            (Kind::Http, self.http),
            (Kind::Dns, self.dns),
            (Kind::Tls, self.tls),
            (Kind::Icmp, self.icmp),
            (Kind::Udp, self.udp),
            (Kind::Ssh, self.ssh),
            (Kind::Smtp, self.smtp),
        ]
    }

    fn draw(&self, r: &mut SplitMix64) -> Kind {
        let w = self.weights();
        let total: u64 = w.iter().map(|(_, x)| u64::from(*x)).sum();
        let mut x = r.below(total.max(1));
        for (k, n) in w {
            if x < u64::from(n) {
                return k;
            }
            x -= u64::from(n);
        }
        Kind::Http
    }
}

/// Options of a [`ProtoMix`] trace.
#[derive(Clone, Debug)]
pub struct ProtoMixConfig {
    /// The seed: the same seed and options give the same bytes.
    pub seed: u64,
    /// Packets to generate at most.
    pub packets: u64,
    /// Bytes (frames as on the wire, Ethernet header included) to generate
    /// at most: the packet that reaches this volume is the last.
    pub bytes: u64,
    /// Proportions of the kinds of conversation.
    pub mix: Mix,
    /// Conversations open at once, whose packets interleave.
    pub concurrent: usize,
    /// Mean gap between packets in nanoseconds (gaps are drawn from 1 µs to
    /// twice the mean, whole microseconds).
    pub mean_gap_ns: u64,
}

impl Default for ProtoMixConfig {
    /// [`PROTOMIX_SEED`], 1,000,000 packets, no byte limit, the default
    /// [`Mix`], 256 concurrent conversations, 5 µs between packets.
    fn default() -> Self {
        ProtoMixConfig {
            seed: PROTOMIX_SEED,
            packets: 1_000_000,
            bytes: u64::MAX,
            mix: Mix::default(),
            concurrent: 256,
            mean_gap_ns: 5_000,
        }
    }
}

/// One conversation: the frames it has still to send, in order.
struct Conversation {
    frames: VecDeque<Vec<u8>>,
}

/// The protocol-mix trace, one packet at a time (see the module's
/// documentation). Frames are whole (captured length = wire length).
pub struct ProtoMix {
    cfg: ProtoMixConfig,
    rng: SplitMix64,
    open: Vec<Conversation>,
    ns: u64,
    packets: u64,
    bytes: u64,
}

impl ProtoMix {
    /// The trace of `cfg`, from its first packet.
    pub fn new(cfg: ProtoMixConfig) -> ProtoMix {
        let rng = SplitMix64::new(cfg.seed);
        ProtoMix { cfg, rng, open: Vec::new(), ns: EPOCH * 1_000_000_000, packets: 0, bytes: 0 }
    }

    fn start(&mut self) -> Conversation {
        let r = &mut self.rng;
        let kind = self.cfg.mix.draw(r);
        let client = client_addr(r);
        type Talk = fn(&mut SplitMix64, &mut Tcp);
        let tcp = |r: &mut SplitMix64, port: u16, talk: Talk| {
            let mut t = Tcp::open(r, client, port);
            talk(r, &mut t);
            t.close(r);
            t.frames
        };
        let frames = match kind {
            Kind::Http => {
                let port = if r.chance(15) { 8080 } else { 80 };
                tcp(r, port, payloads::http)
            }
            Kind::Tls => tcp(r, 443, payloads::tls),
            Kind::Ssh => tcp(r, 22, payloads::ssh),
            Kind::Smtp => tcp(r, 25, payloads::smtp),
            Kind::Dns => payloads::dns(r, client),
            Kind::Icmp => icmp_echo(r, client),
            Kind::Udp => random_udp(r, client),
        };
        Conversation { frames }
    }
}

impl Iterator for ProtoMix {
    type Item = Packet;

    fn next(&mut self) -> Option<Packet> {
        if self.packets >= self.cfg.packets || self.bytes >= self.cfg.bytes {
            return None;
        }
        while self.open.len() < self.cfg.concurrent.max(1) {
            let c = self.start();
            self.open.push(c);
        }
        let i = self.rng.below(self.open.len() as u64) as usize;
        let f = self.open[i].frames.pop_front().unwrap_or_default();
        if self.open[i].frames.is_empty() {
            self.open.swap_remove(i);
        }
        let mean_us = (self.cfg.mean_gap_ns / 1000).max(1);
        self.ns += 1000 * self.rng.range(1, 2 * mean_us - 1).max(1);
        self.packets += 1;
        self.bytes += f.len() as u64;
        let mut p = Packet::from_bytes(f);
        p.ts = Timestamp::from_nanos(self.ns);
        Some(p)
    }
}

/// The first `n` packets of the default protocol mix of `seed`.
pub fn protomix_trace(n: u64, seed: u64) -> Vec<Packet> {
    ProtoMix::new(ProtoMixConfig { seed, packets: n, ..ProtoMixConfig::default() }).collect()
}

/// A client address in 10.0.0.0/8 (host part never 0 or 255).
fn client_addr(r: &mut SplitMix64) -> u32 {
    0x0a00_0000 | (r.below(1 << 16) as u32) << 8 | r.range(1, 254) as u32
}

/// A server address in 192.0.2.0/24, 198.51.100.0/24 or 203.0.113.0/24.
fn server_addr(r: &mut SplitMix64) -> u32 {
    r.pick(&[0xc000_0200u32, 0xc633_6400, 0xcb00_7100]) | r.range(1, 254) as u32
}

/// An ephemeral client port (Linux's range).
fn ephemeral(r: &mut SplitMix64) -> u16 {
    r.range(32_768, 60_999) as u16
}

/// MAC address of a client: locally administered, from its IPv4 address.
fn client_mac(ip: u32) -> [u8; 6] {
    let b = ip.to_be_bytes();
    [0x02, 0x00, b[0], b[1], b[2], b[3]]
}

/// MAC address of the router the servers are behind.
const ROUTER_MAC: [u8; 6] = [0x00, 0x00, 0x5e, 0x00, 0x01, 0x01];

/// TCP, UDP and ICMP checksum of the transport `segment` of an IPv4 packet
/// from `src` to `dst` (the pseudo-header for TCP and UDP; none for ICMP),
/// computed with the checksum field zero. UDP's zero is sent as `0xffff`.
pub fn transport_checksum(src: u32, dst: u32, proto: u8, segment: &[u8]) -> u16 {
    if proto == 1 {
        return internet_checksum(segment);
    }
    let mut b = Vec::with_capacity(12 + segment.len());
    b.extend_from_slice(&src.to_be_bytes());
    b.extend_from_slice(&dst.to_be_bytes());
    b.extend_from_slice(&[0, proto]);
    b.extend_from_slice(&(segment.len() as u16).to_be_bytes());
    b.extend_from_slice(segment);
    match internet_checksum(&b) {
        0 if proto == 17 => 0xffff,
        c => c,
    }
}

/// Finishes a frame built by [`ipv4_frame`] or [`tcp_frame`] (IHL 5): the
/// MAC addresses for its direction, the IP identification and TTL, then the
/// IPv4 header checksum and the transport checksum.
fn seal(f: &mut [u8], to_server: bool, client: u32, id: u16, ttl: u8) {
    let (dst, src) = if to_server { (ROUTER_MAC, client_mac(client)) } else { (client_mac(client), ROUTER_MAC) };
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[18..20].copy_from_slice(&id.to_be_bytes());
    f[20..22].copy_from_slice(&0x4000u16.to_be_bytes()); // DF
    f[22] = ttl;
    f[24..26].fill(0);
    let c = internet_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    let proto = f[23];
    let at = 34
        + match proto {
            6 => 16,
            17 => 6,
            _ => 2,
        };
    f[at..at + 2].fill(0);
    let src = u32::from_be_bytes([f[26], f[27], f[28], f[29]]);
    let dst = u32::from_be_bytes([f[30], f[31], f[32], f[33]]);
    let c = transport_checksum(src, dst, proto, &f[34..]);
    f[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// TCP flags.
const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;

/// One side of a TCP connection.
struct Side {
    ip: u32,
    port: u16,
    /// The next sequence number it sends.
    next: u32,
    /// IP identification of its next packet.
    id: u16,
    ttl: u8,
    window: u16,
}

/// A TCP connection under construction: its frames, in the order sent.
struct Tcp {
    c: Side,
    s: Side,
    /// The smaller of the MSS both sides announced.
    mss: usize,
    frames: VecDeque<Vec<u8>>,
}

impl Tcp {
    /// A connection from `client` (ephemeral port) to a server's `port`,
    /// after its three-way handshake (SYN and SYN-ACK with MSS and
    /// SACK-permitted options, then ACK).
    fn open(r: &mut SplitMix64, client: u32, port: u16) -> Tcp {
        let server = server_addr(r);
        let c_port = ephemeral(r);
        let c_window = r.pick(&[64_240, 65_535, 29_200, 502]);
        let c = Side { ip: client, port: c_port, next: r.next_u32(), id: r.next_u16(), ttl: 64, window: c_window };
        let s_ttl = r.pick(&[64u8, 128, 255]) - r.below(12) as u8;
        let s_window = r.pick(&[65_160, 28_960, 8_192, 501]);
        let s = Side { ip: server, port, next: r.next_u32(), id: r.next_u16(), ttl: s_ttl, window: s_window };
        let c_mss = r.pick(&[1460u16, 1460, 1460, 1400, 1380, 1360]);
        let s_mss = r.pick(&[1460u16, 1460, 1440, 1380, 536]);
        let mut t = Tcp { c, s, mss: usize::from(c_mss.min(s_mss)), frames: VecDeque::new() };
        let opts = |mss: u16| [2, 4, (mss >> 8) as u8, mss as u8, 1, 1, 4, 2];
        t.segment(true, SYN, &opts(c_mss), &[]);
        t.segment(false, SYN | ACK, &opts(s_mss), &[]);
        t.segment(true, ACK, &[], &[]);
        t
    }

    /// One segment from the client (`to_server`) or the server, with
    /// `options` (a multiple of 4 bytes) and `payload`; the sender's
    /// sequence number advances by the payload and by SYN and FIN.
    fn segment(&mut self, to_server: bool, flags: u8, options: &[u8], payload: &[u8]) {
        let (from, to) = if to_server { (&mut self.c, &self.s) } else { (&mut self.s, &self.c) };
        let body = [options, payload].concat();
        let mut f = tcp_frame(from.ip, to.ip, from.port, to.port, &body);
        f[38..42].copy_from_slice(&from.next.to_be_bytes());
        let ack = if flags & ACK != 0 { to.next } else { 0 };
        f[42..46].copy_from_slice(&ack.to_be_bytes());
        f[46] = ((5 + options.len() / 4) as u8) << 4;
        f[47] = flags;
        f[48..50].copy_from_slice(&from.window.to_be_bytes());
        let client = self.c.ip;
        let from = if to_server { &mut self.c } else { &mut self.s };
        seal(&mut f, to_server, client, from.id, from.ttl);
        from.id = from.id.wrapping_add(1);
        let len = payload.len() as u32 + u32::from(flags & (SYN | FIN) != 0);
        from.next = from.next.wrapping_add(len);
        self.frames.push_back(f);
    }

    /// `data` from one side, in segments of at most the MSS (PSH on the
    /// last), the other side acknowledging every second segment and the last.
    fn send(&mut self, to_server: bool, data: &[u8]) {
        let n = data.len().div_ceil(self.mss);
        for (k, chunk) in data.chunks(self.mss).enumerate() {
            let last = k + 1 == n;
            self.segment(to_server, if last { PSH | ACK } else { ACK }, &[], chunk);
            if last || k % 2 == 1 {
                self.segment(!to_server, ACK, &[], &[]);
            }
        }
    }

    /// The teardown: FIN from either side, answered by FIN (sometimes after
    /// a separate ACK), then the last ACK; one in twelve connections ends
    /// with a RST instead.
    fn close(&mut self, r: &mut SplitMix64) {
        let first = r.chance(60);
        if r.below(12) == 0 {
            self.segment(first, RST | ACK, &[], &[]);
            return;
        }
        self.segment(first, FIN | ACK, &[], &[]);
        if r.chance(30) {
            self.segment(!first, ACK, &[], &[]);
        }
        self.segment(!first, FIN | ACK, &[], &[]);
        self.segment(first, ACK, &[], &[]);
    }
}

/// A UDP frame from `src`:`sport` to `dst`:`dport` carrying `payload`,
/// sealed for its direction.
fn udp_frame(client: u32, to_server: bool, ends: (u32, u16, u32, u16), id: u16, ttl: u8, payload: &[u8]) -> Vec<u8> {
    let (src, sport, dst, dport) = ends;
    let mut f = ipv4_frame(src, dst, ttl, 42 + payload.len());
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    f[42..].copy_from_slice(payload);
    seal(&mut f, to_server, client, id, ttl);
    f
}

/// One to four ICMP echo requests (Linux ping's 56 bytes of data) and their replies.
fn icmp_echo(r: &mut SplitMix64, client: u32) -> VecDeque<Vec<u8>> {
    let server = server_addr(r);
    let (ident, mut id_c, mut id_s) = (r.next_u16(), r.next_u16(), r.next_u16());
    let ttl_s = r.pick(&[64u8, 128, 255]) - r.below(12) as u8;
    let mut out = VecDeque::new();
    for seq in 1..=r.range(1, 4) as u16 {
        // A struct timeval, then ping's pattern.
        let mut data = [r.next_u64().to_le_bytes(), r.next_u64().to_le_bytes()].concat();
        data.extend(0x10u8..0x38);
        for (to_server, ty) in [(true, 8u8), (false, 0)] {
            let (src, dst, id, ttl) = if to_server { (client, server, &mut id_c, 64) } else { (server, client, &mut id_s, ttl_s) };
            let mut f = ipv4_frame(src, dst, ttl, 42 + data.len());
            f[23] = 1;
            f[34..42].copy_from_slice(&[ty, 0, 0, 0, (ident >> 8) as u8, ident as u8, (seq >> 8) as u8, seq as u8]);
            f[42..].copy_from_slice(&data);
            seal(&mut f, to_server, client, *id, ttl);
            *id = id.wrapping_add(1);
            out.push_back(f);
        }
    }
    out
}

/// One to six datagrams of random bytes each way between random ports.
fn random_udp(r: &mut SplitMix64, client: u32) -> VecDeque<Vec<u8>> {
    let server = server_addr(r);
    let (sport, dport) = (ephemeral(r), r.range(1024, 65_535) as u16);
    let mut id = r.next_u16();
    let mut out = VecDeque::new();
    for _ in 0..r.range(1, 6) {
        for to_server in [true, false] {
            let n = if r.chance(70) { r.range(8, 200) } else { r.range(200, 1472) } as usize;
            let payload = r.bytes(n);
            let ends = if to_server { (client, sport, server, dport) } else { (server, dport, client, sport) };
            out.push_back(udp_frame(client, to_server, ends, id, 64, &payload));
            id = id.wrapping_add(1);
        }
    }
    out
}
