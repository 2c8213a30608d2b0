//! Traffic for the example applications (examples/l2-bridge,
//! examples/ipv4-router, examples/ids): deterministic, seeded, with the malformed frames a
//! data path must drop and count. Tests run the applications on these and
//! compare with straightforward models; benchmarks use the 64-byte variants.

use netvm_vm::{Packet, Timestamp};

use crate::{internet_checksum, SplitMix64, EPOCH};

/// A bridge host: its MAC address and the port it sits behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Host {
    /// Unicast, locally administered MAC.
    pub mac: [u8; 6],
    /// Bridge port (1-based).
    pub port: u16,
}

/// Options of [`bridge_trace`].
#[derive(Clone, Debug)]
pub struct BridgeTraffic {
    /// Bridge ports in use (1..=ports).
    pub ports: u16,
    /// Number of hosts.
    pub hosts: usize,
    /// Frames to generate.
    pub frames: usize,
    /// Percent of frames after which time jumps forward by more than the
    /// aging time (so that learnt entries expire).
    pub long_gaps: u64,
    /// Percent of frames where a host moves to another port.
    pub moves: u64,
    /// Seconds of an aging-crossing gap.
    pub gap_seconds: u64,
}

impl Default for BridgeTraffic {
    fn default() -> Self {
        BridgeTraffic { ports: 3, hosts: 12, frames: 600, long_gaps: 2, moves: 2, gap_seconds: 301 }
    }
}

/// Frames for a learning bridge, on ports 1..=ports, in time order. Most go
/// between hosts, sent on the host's port; some are broadcast or multicast,
/// some come from a multicast source, some go to MACs nobody has (unknown
/// unicast), some are runts shorter than an Ethernet header, some are sent
/// on the wrong port (the host appears to move). Time advances by a few ms
/// per frame, and sometimes by just under or just over the aging time
/// (`gap_seconds`), so that entries expire, or nearly do.
pub fn bridge_trace(r: &mut SplitMix64, t: &BridgeTraffic) -> Vec<Packet> {
    let mut hosts: Vec<Host> = (0..t.hosts.max(1))
        .map(|i| {
            let mut mac = [0x02, 0, 0, 0, 0, 0];
            mac[2..6].copy_from_slice(&(i as u32).wrapping_mul(0x9e37_79b9).to_be_bytes());
            Host { mac, port: 1 + (i as u16 % t.ports.max(1)) }
        })
        .collect();
    let mut ns: u64 = EPOCH * 1_000_000_000;
    let mut out = Vec::with_capacity(t.frames);
    for _ in 0..t.frames {
        ns += 1_000 * (1 + r.below(5_000)); // 1 µs to 5 ms
        if r.chance(t.long_gaps) {
            let g = t.gap_seconds * 1_000_000_000;
            // Just over, exactly at, or just under the gap.
            ns += match r.below(3) {
                0 => g + 1_000,
                1 => g,
                _ => g - 1_000_000,
            };
        }
        if r.chance(t.moves) {
            let h = r.below(hosts.len() as u64) as usize;
            hosts[h].port = 1 + r.below(u64::from(t.ports)) as u16;
        }
        let src = r.pick(&hosts);
        let mut port = src.port;
        let kind = r.below(100);
        let mut f = vec![0u8; 60 + r.below(40) as usize];
        let dst: [u8; 6] = match kind {
            0..=7 => [0xff; 6],
            8..=11 => [0x01, 0x00, 0x5e, 0x00, 0x00, r.below(4) as u8],
            12..=16 => [0x02, 0xee, 0, 0, 0, r.below(8) as u8], // nobody
            _ => r.pick(&hosts).mac,
        };
        f[0..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src.mac);
        if r.chance(2) {
            f[6] |= 1; // a group address as source: never learnt
        }
        if r.chance(2) {
            port = 1 + r.below(u64::from(t.ports)) as u16; // a stray frame on another port
        }
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        for (i, b) in f.iter_mut().enumerate().skip(14) {
            *b = i as u8;
        }
        if r.chance(2) {
            f.truncate(r.below(14) as usize); // runt
        }
        let mut p = Packet::from_bytes(f);
        p.ts = Timestamp::from_nanos(ns - ns % 1_000);
        p.in_port = port;
        out.push(p);
    }
    out
}

/// One route of a generated table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route4 {
    /// Network address (host bits clear).
    pub addr: u32,
    /// Prefix length, 0 to 32.
    pub len: u8,
    /// Next hop: the output port.
    pub port: u32,
}

/// `n` distinct IPv4 routes with nested prefixes (a default route, /8s,
/// /16s, /24s, longer prefixes down to /32), next hops below `ports`.
pub fn routes4(r: &mut SplitMix64, n: usize, ports: u32) -> Vec<Route4> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(n);
    let mut attempts = 0;
    while out.len() < n && attempts < n * 20 + 100 {
        attempts += 1;
        let len = match r.below(100) {
            0 => 0,
            1..=5 => 8,
            6..=20 => 16,
            21..=70 => 24,
            71..=85 => 17 + r.below(7) as u8,
            _ => 25 + r.below(8) as u8,
        };
        // Keep most routes under 10/8 and 192.168/16 so that they nest.
        let base: u32 = match r.below(4) {
            0 => 0x0a00_0000 | (r.next_u32() & 0x00ff_ffff),
            1 => 0xc0a8_0000 | (r.next_u32() & 0xffff),
            _ => r.next_u32(),
        };
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
        let addr = base & mask;
        if seen.insert((addr, len)) {
            out.push(Route4 { addr, len, port: r.below(u64::from(ports)) as u32 });
        }
    }
    out
}

/// The route file text of `routes` (`a.b.c.d/len port` lines).
pub fn route_file(routes: &[Route4]) -> String {
    routes.iter().map(|r| format!("{}/{} {}\n", std::net::Ipv4Addr::from(r.addr), r.len, r.port)).collect()
}

/// An Ethernet + IPv4 + UDP frame of `size` bytes (at least 42) to `dst`,
/// with a correct header checksum and TTL `ttl`.
pub fn ipv4_frame(src: u32, dst: u32, ttl: u8, size: usize) -> Vec<u8> {
    let size = size.max(42);
    let mut f = vec![0u8; size];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let total = (size - 14) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    ip[8] = ttl;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.to_be_bytes());
    ip[16..20].copy_from_slice(&dst.to_be_bytes());
    let c = internet_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f[34..36].copy_from_slice(&1234u16.to_be_bytes());
    f[36..38].copy_from_slice(&53u16.to_be_bytes());
    f[38..40].copy_from_slice(&(total - 20).to_be_bytes());
    f
}

/// An Ethernet + IPv4 + TCP frame (20-byte TCP header, ACK|PSH) carrying
/// `payload`, with a correct IPv4 header checksum.
pub fn tcp_frame(src: u32, dst: u32, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = ipv4_frame(src, dst, 64, 14 + 20 + 20 + payload.len());
    f[23] = 6;
    f[24..26].fill(0);
    let c = internet_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    let tcp = &mut f[34..54];
    tcp.fill(0);
    tcp[0..2].copy_from_slice(&sport.to_be_bytes());
    tcp[2..4].copy_from_slice(&dport.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x18;
    tcp[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
    f[54..].copy_from_slice(payload);
    f
}

/// Frames for an IPv4 router: most are well-formed IPv4 to addresses in,
/// next to, or outside the routes; the rest are broken in every way the
/// router checks (ethertype, runt, truncated header, version, IHL, total
/// length both ways, checksum, TTL 0 and 1), with IP options on some.
pub fn router_trace(r: &mut SplitMix64, routes: &[Route4], n: usize) -> Vec<Packet> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let dst = if !routes.is_empty() && r.chance(80) {
            let rt = r.pick(routes);
            let host = if rt.len == 32 { 0 } else { r.next_u32() & (u32::MAX >> rt.len) };
            match r.below(10) {
                0 => rt.addr.wrapping_sub(1),                                          // just below the prefix
                1 => rt.addr | (u32::MAX.checked_shr(u32::from(rt.len)).unwrap_or(0)), // its last address
                _ => rt.addr | host,
            }
        } else {
            r.next_u32()
        };
        let ttl = match r.below(20) {
            0 => 0,
            1 => 1,
            2 => 2,
            _ => 64,
        };
        let size = 60 + r.below(100) as usize;
        let mut f = ipv4_frame(0x0a00_0001, dst, ttl, size);
        if r.chance(10) {
            // IP options (NOPs): IHL 6 or 7.
            let words = 1 + r.below(2) as usize;
            f.splice(34..34, std::iter::repeat_n(1u8, words * 4));
            f[14] = 0x40 | (5 + words as u8);
            let total = (f.len() - 14) as u16;
            f[16..18].copy_from_slice(&total.to_be_bytes());
            f[24..26].fill(0);
            let c = internet_checksum(&f[14..14 + 20 + words * 4]);
            f[24..26].copy_from_slice(&c.to_be_bytes());
        }
        match r.below(100) {
            0..=2 => f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes()),
            3 => f.truncate(r.below(14) as usize),
            4 => f.truncate(14 + r.below(20) as usize),
            5 => f[14] = (f[14] & 0x0f) | 0x60,
            6 => f[14] = (f[14] & 0xf0) | r.below(5) as u8,
            7 => {
                let t = f.len() as u16 - 14 + 1 + r.below(100) as u16;
                f[16..18].copy_from_slice(&t.to_be_bytes());
            }
            8 => f[16..18].copy_from_slice(&(r.below(20) as u16).to_be_bytes()),
            9..=10 => f[24] ^= 1 + r.below(255) as u8,
            11 => f[14] = 0x4f, // IHL 15: 60 bytes of header
            _ => {}
        }
        let mut p = Packet::from_bytes(f);
        p.ts = Timestamp::from_nanos((EPOCH + i as u64) * 1_000_000_000);
        out.push(p);
    }
    out
}

/// Words that IDS rules look for and generated payloads contain.
pub const IDS_WORDS: &[&[u8]] = &[
    b"GET ",
    b"POST ",
    b"HTTP/1.1",
    b"Host:",
    b"admin",
    b"passwd",
    b"/etc/shadow",
    b"cmd.exe",
    b"SELECT",
    b"UNION",
    b"\x90\x90\x90\x90",
    b"\x00\x01\x02",
    b"root",
    b"login",
    b"USER ",
    b"PASS ",
    b"evil",
    b"abc",
    b"xyz",
    b"AAAA",
    b"%00",
    b"../",
    b"<script>",
    b"\xff\xfe",
];

/// Words of generated HTTP messages, and of the contents of generated
/// rules that inspect HTTP buffers (none has a space or a control byte,
/// so each can stand in a request target).
pub const IDS_HTTP_WORDS: &[&[u8]] = &[
    b"GET",
    b"POST",
    b"HEAD",
    b"admin",
    b"login.php",
    b"id=",
    b"passwd",
    b"cmd.exe",
    b"../",
    b"%00",
    b"sess",
    b"evil",
    b"200",
    b"404",
    b"OK",
    b"Found",
    b"Mozilla",
    b"curl",
    b"SELECT",
    b"<script>",
    b"\x90\x90",
];

/// An HTTP/1.x request or response over [`IDS_HTTP_WORDS`]: a request
/// line or status line, header lines (Host, User-Agent, Cookie or
/// Set-Cookie, Content-Length that may cut the body short, others), the
/// empty line and a body; sometimes with bare LF line ends, the header
/// block cut before its end, or a malformed first line.
pub fn http_message(r: &mut SplitMix64) -> Vec<u8> {
    let word = |r: &mut SplitMix64| -> Vec<u8> {
        let mut w = r.pick(IDS_HTTP_WORDS).to_vec();
        if r.chance(15) {
            w.iter_mut().for_each(|b| *b = b.to_ascii_lowercase());
        }
        w
    };
    let words = |r: &mut SplitMix64, n: u64, sep: &[u8]| -> Vec<u8> {
        let k = 1 + r.below(n);
        let mut out = Vec::new();
        for i in 0..k {
            if i > 0 {
                out.extend_from_slice(sep);
            }
            out.extend(word(r));
        }
        out
    };
    let eol: &[u8] = if r.chance(85) { b"\r\n" } else { b"\n" };
    let response = r.chance(40);
    let mut m = Vec::new();
    if response {
        m.extend_from_slice(r.pick(&[&b"HTTP/1.1 "[..], b"HTTP/1.0 "]));
        m.extend_from_slice(r.pick(&[&b"200"[..], b"404", b"302", b"500"]));
        if r.chance(85) {
            m.push(b' ');
            m.extend_from_slice(r.pick(&[&b"OK"[..], b"Not Found", b"Found", b"admin evil"]));
        }
    } else {
        m.extend_from_slice(r.pick(&[&b"GET"[..], b"GET", b"POST", b"HEAD", b"PUT"]));
        m.push(b' ');
        m.push(b'/');
        m.extend(words(r, 4, b"/"));
        if r.chance(40) {
            m.push(b'?');
            m.extend(words(r, 3, b"&"));
        }
        m.extend_from_slice(r.pick(&[&b" HTTP/1.1"[..], b" HTTP/1.1", b" HTTP/1.0"]));
    }
    if r.chance(4) {
        // Not HTTP after all: a doubled space.
        let at = m.iter().position(|&b| b == b' ').unwrap_or(0);
        m.insert(at, b' ');
    }
    m.extend_from_slice(eol);
    let body = words(r, 4, b" ");
    for _ in 0..r.below(5) {
        let (name, value): (&[u8], Vec<u8>) = match r.below(6) {
            0 => (b"Host", words(r, 1, b"")),
            1 => (b"User-Agent", words(r, 3, b" ")),
            2 => (if response { b"Set-Cookie" } else { b"Cookie" }, words(r, 3, b";")),
            3 if r.chance(50) => (b"cookie", words(r, 2, b";")),
            3 => (b"Content-Length", format!("{}", r.below(body.len() as u64 + 4)).into_bytes()),
            _ => (r.pick(&[&b"Accept"[..], b"X-Evil", b"Referer"]), words(r, 2, b",")),
        };
        m.extend_from_slice(name);
        m.extend_from_slice(r.pick(&[&b": "[..], b":", b":\t"]));
        m.extend(value);
        m.extend_from_slice(eol);
    }
    if r.chance(85) {
        m.extend_from_slice(eol);
        m.extend(body);
    }
    m
}

/// `n` Snort rules over [`IDS_WORDS`]: random actions (mostly alert),
/// protocols, address and port sets (lists, negations, ranges), and one to
/// four contents with nocase, offset/depth, distance/within, negation and
/// pcres, thresholds and detection filters, with sids from 1,000,000. Every rule is within the subset
/// `netvm ids` compiles.
pub fn ids_rules(r: &mut SplitMix64, n: usize) -> String {
    let mut out = String::from("# generated rules\nvar WEB [10.0.0.0/8,!10.9.0.0/16]\n");
    for k in 0..n {
        let action = match r.below(20) {
            0 => "pass",
            1..=2 => "drop",
            _ => "alert",
        };
        let proto = r.pick(&["tcp", "tcp", "tcp", "udp", "udp", "icmp", "ip"]);
        let addr = |r: &mut SplitMix64| -> String {
            match r.below(8) {
                0 => "10.0.0.0/8".into(),
                1 => "!192.168.0.0/16".into(),
                2 => "[10.1.0.0/16,192.168.1.1]".into(),
                3 => "$WEB".into(),
                4 => format!("10.{}.0.0/16", r.below(4)),
                _ => "any".into(),
            }
        };
        let port = |r: &mut SplitMix64| -> String {
            match r.below(10) {
                0 => "80".into(),
                1 => "1024:".into(),
                2 => ":1023".into(),
                3 => "!53".into(),
                4 => "[80,443,8000:8100]".into(),
                5 => format!("{}", r.pick(&[22, 53, 80, 443, 8080])),
                _ => "any".into(),
            }
        };
        // TCP rules often inspect HTTP buffers: Snort 2 modifiers after a content, or `file_data` sticky.
        let http = proto == "tcp" && r.chance(40);
        let (src, sport, dst, dport) = (addr(r), port(r), addr(r), port(r));
        let (sport, dport) = if http && r.chance(60) { ("any".to_string(), "any".to_string()) } else { (sport, dport) };
        let dir = if r.below(8) == 0 { "<>" } else { "->" };
        let mut opts = format!("msg:\"rule {k} \\\"q\\\"\"; ");
        if r.below(3) == 0 {
            let mut flow: Vec<&str> = Vec::new();
            if r.chance(60) {
                flow.push(r.pick(&["established", "not_established", "stateless"]));
            }
            if r.chance(60) {
                flow.push(r.pick(&["to_server", "to_client", "from_server", "from_client"]));
            }
            if r.chance(15) {
                flow.push(r.pick(&["no_stream", "only_frag", "no_frag"]));
            }
            if flow.is_empty() {
                flow.push("established");
            }
            opts += &format!("flow:{}; ", flow.join(","));
        }
        for _ in 0..r.below(3) {
            if r.chance(if http { 85 } else { 50 }) {
                continue;
            }
            let int = |r: &mut SplitMix64, max: u64| -> String {
                let (a, b) = (r.below(max + 2), r.below(max + 2));
                match r.below(8) {
                    0 => format!("{a}"),
                    1 => format!("!{a}"),
                    2 => format!("<{a}"),
                    3 => format!(">{a}"),
                    4 => format!("<={a}"),
                    5 => format!(">={a}"),
                    6 => format!("{}<>{}", a.min(b), a.max(b)),
                    _ => format!("{}<=>{}", a.min(b), a.max(b)),
                }
            };
            // Mostly the checks of the rule's protocol (those of another never match).
            let which = match (proto, r.chance(70)) {
                ("icmp", true) => r.pick(&[3, 3, 4, 4, 5, 6]),
                ("tcp", true) => r.pick(&[0, 0, 2, 13]),
                _ => r.below(15),
            };
            opts += &match which {
                0 | 1 => {
                    let bits: String = ["F", "S", "R", "P", "A", "U", "C", "E"].iter().filter(|_| r.chance(30)).copied().collect();
                    let bits = if bits.is_empty() { "0".to_string() } else { bits };
                    let modifier = r.pick(&["", "+", "*", "!"]);
                    let mask = if r.chance(20) { ",12" } else { "" };
                    format!("flags:{modifier}{bits}{mask}; ")
                }
                2 => format!("dsize:{}; ", int(r, 40)),
                3 => format!("itype:{}; ", int(r, 10)),
                4 => format!("icode:{}; ", int(r, 4)),
                5 => format!("icmp_id:{}; ", int(r, 4)),
                6 => format!("icmp_seq:{}; ", int(r, 4)),
                7 => format!("ttl:{}; ", r.pick(&["64", "<64", ">=128", "1-64", "!255", "32<>200"])),
                8 => format!("tos:{}; ", int(r, 8)),
                9 => format!("id:{}; ", int(r, 6)),
                10 => format!("ip_proto:{}; ", r.pick(&["6", "17", "!1", "tcp", "<17", "47"])),
                11 => {
                    let bits: String = ["M", "D", "R"].iter().filter(|_| r.chance(40)).copied().collect();
                    let bits = if bits.is_empty() { "M".to_string() } else { bits };
                    format!("fragbits:{}{bits}; ", r.pick(&["", "+", "*", "!"]))
                }
                12 => "sameip; ".to_string(),
                13 => format!("{}:{}; ", r.pick(&["seq", "ack", "window"]), int(r, 6)),
                _ => format!("fragoffset:{}; ", int(r, 20)),
            };
        }
        // Flowbits over a few names, one group.
        for _ in 0..r.below(3) {
            if r.chance(if http { 90 } else { 60 }) {
                continue;
            }
            let name = |r: &mut SplitMix64| r.pick(&["login", "seen", "a", "b"]);
            opts += &match r.below(12) {
                0 | 1 => format!("flowbits:set,{}; ", name(r)),
                2 => format!("flowbits:set,{},g1; ", name(r)),
                3 => format!("flowbits:setx,{},g1; ", name(r)),
                4 => format!("flowbits:unset,{}; ", name(r)),
                5 => format!("flowbits:toggle,{}; ", name(r)),
                6 | 7 => format!("flowbits:isset,{}; ", name(r)),
                8 => format!("flowbits:isset,{}{}{}; ", name(r), r.pick(&["&", "|"]), name(r)),
                9 => format!("flowbits:isnotset,{}; ", name(r)),
                10 => format!("flowbits:isnotset,{}{}{}; ", name(r), r.pick(&["&", "|"]), name(r)),
                _ => r.pick(&["flowbits:noalert; ", "flowbits:reset; ", "flowbits:reset,g1; "]).to_string(),
            };
        }
        let contents = if r.below(10) == 0 { 0 } else { 1 + r.below(3) };
        for i in 0..contents {
            let buffer = if http && r.chance(70) {
                Some(r.pick(&[
                    "http_uri",
                    "http_uri",
                    "http_raw_uri",
                    "http_header",
                    "http_header",
                    "http_raw_header",
                    "http_method",
                    "http_client_body",
                    "http_cookie",
                    "http_raw_cookie",
                    "http_stat_code",
                    "http_stat_msg",
                ]))
            } else {
                None
            };
            if http && i == 1 && buffer.is_none() && r.chance(50) {
                opts += "file_data; ";
            }
            let w: &[u8] = match buffer {
                // Words that fields this short can hold.
                Some("http_method") => r.pick(&[&b"GET"[..], b"POST", b"HEAD", b"PUT", b"GE"]),
                Some("http_stat_code") => r.pick(&[&b"200"[..], b"404", b"30", b"500"]),
                Some("http_stat_msg") => r.pick(&[&b"OK"[..], b"Found", b"Not", b"evil"]),
                Some(_) => r.pick(IDS_HTTP_WORDS),
                None if http && r.chance(50) => r.pick(IDS_HTTP_WORDS),
                None => r.pick(IDS_WORDS),
            };
            let text: String = w
                .iter()
                .map(
                    |b| if b.is_ascii_alphanumeric() || *b == b' ' || *b == b'/' { (*b as char).to_string() } else { format!("|{b:02x}|") },
                )
                .collect();
            let neg = if i > 0 && r.below(8) == 0 { "!" } else { "" };
            opts += &format!("content:{neg}\"{text}\"; ");
            if let Some(b) = buffer {
                opts += &format!("{b}; ");
            }
            if r.below(3) == 0 {
                opts += "nocase; ";
            }
            if i == 0 {
                if r.below(4) == 0 {
                    opts += &format!("offset:{}; depth:{}; ", r.below(4), w.len() as u64 + r.below(40));
                }
            } else {
                match r.below(4) {
                    0 => opts += &format!("distance:{}; ", r.below(6) as i64 - 2),
                    1 => opts += &format!("distance:{}; within:{}; ", r.below(4), w.len() as u64 + r.below(20)),
                    2 => opts += &format!("within:{}; ", w.len() as u64 + r.below(30)),
                    _ => {}
                }
            }
        }
        if http && r.below(4) == 0 {
            // The length of the URI (Snort 3's `bufferlen` is not in the Snort 2 syntax written here).
            let (a, b) = (r.below(120), r.below(120));
            let check = match r.below(6) {
                0 => format!("{a}"),
                1 => format!("<{a}"),
                2 => format!(">{a}"),
                3 => format!(">={a}"),
                4 => format!("!{a}"),
                _ => format!("{}<>{}", a.min(b), a.max(b)),
            };
            opts += &format!("urilen:{check}{}; ", r.pick(&["", ",norm", ",raw"]));
        }
        if r.below(5) == 0 {
            let relative = if contents > 0 && r.chance(60) { ",relative" } else { "" };
            opts += &format!("isdataat:{}{}{relative}; ", if r.chance(30) { "!" } else { "" }, r.below(30));
        }
        if r.below(4) == 0 {
            opts += &byte_options(r, contents > 0, http);
        }
        if r.below(if http { 3 } else { 6 }) == 0 {
            let re = if http {
                r.pick(&[
                    "a[bc]+",
                    "(?:GET|POST)",
                    "^/[a-z]+",
                    "login\\.php",
                    "^[0-9]{3}$",
                    "id=[^&]*",
                    "pass(wd)?",
                    "^[A-Z]{3}",
                    "Mozilla.*\\r?$",
                ])
            } else {
                r.pick(&["a[bc]+", "(?:GET|POST) /[a-z]+", "\\x90{2,}", "pass(wd)?", "^[A-Z]{3}"])
            };
            let flags = if http && r.chance(60) {
                r.pick(&["U", "UR", "I", "H", "D", "P", "C", "K", "M", "S", "Y", "Ui", "HR"])
            } else {
                r.pick(&["", "i", "s", "R", "iR"])
            };
            opts += &format!("pcre:\"/{re}/{flags}\"; ");
        }
        // Thresholds and detection filters (on alert rules only: what they
        // filter out depends on how workers interleave, see the `threshold` coprocessor).
        if action == "alert" && r.below(6) == 0 {
            let track = r.pick(&["by_src", "by_dst"]);
            let (count, seconds) = (r.below(4), 1 + r.below(40));
            opts += &match r.below(4) {
                0 => format!("threshold:type limit, track {track}, count {count}, seconds {seconds}; "),
                1 => format!("threshold:type threshold, track {track}, count {count}, seconds {seconds}; "),
                2 => format!("threshold: type both, track {track}, count {count}, seconds {seconds}; "),
                _ => format!("detection_filter:track {track}, count {count}, seconds {seconds}; "),
            };
        }
        opts += &format!("sid:{}; rev:{};", 1_000_000 + k, 1 + r.below(3));
        out += &format!("{action} {proto} {src} {sport} {dir} {dst} {dport} ({opts})\n");
    }
    out
}

/// `byte_test`, `byte_jump`, `byte_extract` (and uses of its variable)
/// for [`ids_rules`], in the payload: binary numbers of 1 to 4 bytes, big
/// or little endian, with bitmasks, multipliers, alignment and every
/// start of a jump; numbers in text (`string`) after the HTTP words that
/// precede them (`Content-Length:`, the status line). `relative` only
/// after a content (`after_content`).
fn byte_options(r: &mut SplitMix64, after_content: bool, http: bool) -> String {
    let rel = |r: &mut SplitMix64| if after_content && r.chance(60) { ",relative" } else { "" };
    // A binary number: its size, and the arguments after the offset.
    let binary = |r: &mut SplitMix64| -> (u64, String) {
        let bytes = r.pick(&[1, 1, 2, 2, 3, 4]);
        let endian = r.pick(&["", "", ",big", ",little"]);
        let mask = if r.chance(15) { format!(",bitmask {}", r.pick(&["0xf0", "0x0f", "0x3c", "0x8001"])) } else { String::new() };
        (bytes, format!("{endian}{mask}"))
    };
    let op = |r: &mut SplitMix64| r.pick(&["<", ">", "=", "!=", "<=", ">=", "&", "^", "!&", "!>"]);
    if http && r.chance(50) {
        // A number in text: where the messages have one.
        let (word, base, bytes) =
            r.pick(&[("Content-Length|3a|", "dec", 6), ("HTTP/1.", "dec", 6), ("HTTP/1.", "oct", 5), ("Content-Length|3a|", "hex", 4)]);
        let test = match r.below(3) {
            0 => format!("byte_test:{bytes},{},{},0,relative,string,{base}; ", op(r), r.below(300)),
            1 => format!("byte_jump:{bytes},0,relative,string,{base}{}; ", r.pick(&["", ",post_offset -1", ",multiplier 2"])),
            _ => format!("byte_extract:{bytes},0,n,relative,string,{base}; byte_test:1,>,0,0,relative; isdataat:n,relative; "),
        };
        return format!("content:\"{word}\"; {test}");
    }
    match r.below(4) {
        0 => {
            let (bytes, tail) = binary(r);
            let offset = r.below(12) as i64 - 2 * i64::from(after_content);
            format!("byte_test:{bytes},{},{},{offset}{}{tail}; ", op(r), r.below(256), rel(r))
        }
        1 => {
            let from = r.pick(&["", "", ",from_beginning", ",from_end,post_offset -4", ",align", ",multiplier 2", ",post_offset 2"]);
            let (bytes, tail) = if r.chance(15) { (0, String::new()) } else { binary(r) };
            let then = if r.chance(50) { format!("byte_test:1,{},{},0,relative; ", op(r), r.below(256)) } else { String::new() };
            format!("byte_jump:{bytes},{}{}{tail}{from}; {then}", r.below(8), rel(r))
        }
        2 => {
            let mult = r.pick(&["", "", ",multiplier 2", ",align 4", ",align 2", ",bitmask 0x1f"]);
            let use_var = match r.below(4) {
                0 => format!("byte_test:1,{},v,0,relative; ", op(r)),
                1 => "byte_jump:1,v,relative; ".to_string(),
                2 => "isdataat:v,relative; ".to_string(),
                _ => format!("content:\"{}\"; distance:0; within:v; ", r.pick(&["a", "e", "|00|", "GET", "/"])),
            };
            format!("byte_extract:1,{},v{}{mult}; {use_var}", r.below(6), rel(r))
        }
        _ => {
            let (bytes, tail) = binary(r);
            format!("byte_test:{bytes},{},{},{}{}{tail}; ", op(r), r.below(65536), r.below(6), rel(r))
        }
    }
}

/// A conversation of [`ids_trace`]: both directions of one flow, TCP
/// from its handshake (or picked up midstream) to its FIN or RST.
struct Conversation {
    proto: u8,
    client: (u32, u16),
    server: (u32, u16),
    step: u32,
    midstream: bool,
}

/// Frames for the IDS: IPv4 TCP, UDP and ICMP (and other protocols,
/// fragments, VLAN tags, non-IPv4 and broken headers), between addresses
/// and ports that the generated rules name, with payloads stitched from
/// [`IDS_WORDS`] (sometimes in another case) and random bytes. Most
/// packets belong to a few concurrent conversations (TCP handshakes,
/// data both ways, FIN or RST; UDP and ICMP exchanges), the others have
/// random endpoints and TCP flags; header fields (TTL, TOS, id, IP flags,
/// ICMP type, code, id and sequence, TCP sequence, acknowledgement and
/// window) take a few values each.
pub fn ids_trace(r: &mut SplitMix64, n: usize) -> Vec<Packet> {
    let addrs = [0x0a00_0001u32, 0x0a01_0203, 0x0a09_0001, 0xc0a8_0101, 0xc0a8_0202, 0x0808_0808, 0x0a02_0005];
    let ports = [22u16, 53, 80, 443, 1023, 1024, 8080, 8050, 40000];
    let mut convs: Vec<Conversation> = Vec::new();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut payload = Vec::new();
        for _ in 0..r.below(6) {
            if r.chance(60) {
                let mut w = r.pick(IDS_WORDS).to_vec();
                if r.chance(20) {
                    w.iter_mut().for_each(|b| *b = b.to_ascii_lowercase());
                }
                if r.chance(10) {
                    w.iter_mut().for_each(|b| *b = b.to_ascii_uppercase());
                }
                payload.extend(w);
            } else {
                let k = r.below(8) as usize;
                payload.extend(r.bytes(k));
            }
        }
        // (proto, src, dst, sport, dport, TCP flags)
        let (proto, src, dst, sport, dport, tcp_flags) = if r.chance(70) {
            if convs.len() < 6 || r.chance(10) {
                let proto = r.pick(&[6u8, 6, 6, 17, 1]);
                let midstream = proto == 6 && r.chance(20);
                convs.push(Conversation {
                    proto,
                    client: (r.pick(&addrs), r.pick(&ports)),
                    server: (r.pick(&addrs), r.pick(&ports)),
                    step: if midstream { 3 } else { 0 },
                    midstream,
                });
            }
            let k = r.below(convs.len() as u64) as usize;
            let c = &mut convs[k];
            let step = c.step;
            c.step += 1;
            let from_client = match (c.proto, step) {
                (6, 0 | 2) => true,
                (6, 1) => false,
                _ => r.chance(55),
            };
            // SYN, SYN-ACK, ACK, then data (PSH-ACK or ACK), and after a while FIN-ACK or RST.
            let flags = match step {
                _ if c.proto != 6 => 0,
                0 => 0x02,
                1 => 0x12,
                2 => 0x10,
                _ if step > 8 && r.chance(30) => r.pick(&[0x11u8, 0x11, 0x04, 0x14]),
                _ => r.pick(&[0x18u8, 0x10]),
            };
            let (proto, midstream) = (c.proto, c.midstream);
            let ((sa, sp), (da, dp)) = if from_client { (c.client, c.server) } else { (c.server, c.client) };
            if step > 12 || (midstream && step > 10) {
                convs.swap_remove(k);
            }
            (proto, sa, da, sp, dp, flags)
        } else {
            let proto = r.pick(&[6u8, 6, 6, 17, 17, 1, 47]);
            let src = r.pick(&addrs);
            let dst = if r.chance(5) { src } else { r.pick(&addrs) };
            (proto, src, dst, r.pick(&ports), r.pick(&ports), r.pick(&[0u8, 0x02, 0x12, 0x10, 0x18, 0x11, 0x04, 0x01, 0x29, 0xc2, 0xff]))
        };
        if proto == 6 && r.chance(50) {
            payload = http_message(r);
        }
        let l4_len = match proto {
            6 => 20 + 4 * r.below(3) as usize,
            17 | 1 => 8,
            _ => 0,
        };
        let mut f = ipv4_frame(src, dst, r.pick(&[1u8, 32, 64, 64, 128, 255]), 14 + 20 + l4_len + payload.len());
        f.truncate(34);
        f[23] = proto;
        f[15] = r.pick(&[0u8, 0, 0x10, 0x28, 3]);
        f[18..20].copy_from_slice(&(r.below(6) as u16).to_be_bytes());
        f[20] = r.pick(&[0u8, 0, 0x40, 0x20, 0x60, 0x80]);
        let mut l4 = vec![0u8; l4_len];
        if proto == 6 || proto == 17 {
            l4[0..2].copy_from_slice(&sport.to_be_bytes());
            l4[2..4].copy_from_slice(&dport.to_be_bytes());
        }
        if proto == 6 {
            l4[4..8].copy_from_slice(&(r.below(6) as u32).to_be_bytes());
            l4[8..12].copy_from_slice(&(r.below(6) as u32).to_be_bytes());
            l4[12] = ((l4_len / 4) as u8) << 4;
            l4[13] = tcp_flags;
            l4[14..16].copy_from_slice(&(r.below(6) as u16).to_be_bytes());
        }
        if proto == 1 {
            l4[0] = r.pick(&[0u8, 8, 8, 3, 11, 5]);
            l4[1] = r.below(5) as u8;
            l4[4..6].copy_from_slice(&(r.below(5) as u16).to_be_bytes());
            l4[6..8].copy_from_slice(&(r.below(5) as u16).to_be_bytes());
        }
        f.extend(l4);
        f.extend(&payload);
        let total = (f.len() - 14) as u16;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f[24..26].fill(0);
        let c = internet_checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        match r.below(40) {
            0 => f[21] = 0x10,                                         // a non-first fragment (offset 128 bytes)
            1 => f.truncate(34 + r.below(l4_len as u64 + 1) as usize), // L4 header cut
            2 => f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes()),
            3 => f[14] = 0x44, // IHL 4
            4 => {
                // 802.1Q tag
                f.splice(12..12, [0x81, 0x00, 0x00, 0x0a]);
            }
            5 => f.extend([0u8; 12]), // Ethernet padding after the IP packet
            6 => f.truncate(r.below(14) as usize),
            7 if proto == 6 => f[34 + 12] = 0x20, // TCP data offset 2
            _ => {}
        }
        let mut p = Packet::from_bytes(f);
        p.ts = Timestamp::from_nanos((EPOCH + i as u64) * 1_000_000_000 + 1000 * i as u64);
        out.push(p);
    }
    out
}
