//! The protocol mix parsed back: checksums, TCP sequence numbers, every
//! application message, DNS counts, determinism and the limits.

use std::collections::HashMap;

use super::*;

fn u16at(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

fn u32at(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn in_doc_range(ip: u32) -> bool {
    matches!(ip >> 8, 0xc0_0002 | 0xc6_3364 | 0xcb_0071)
}

fn trace(packets: u64, seed: u64) -> Vec<Packet> {
    ProtoMix::new(ProtoMixConfig { seed, packets, concurrent: 64, ..ProtoMixConfig::default() }).collect()
}

/// A TCP segment of the trace, oriented: `to_server` when the client (the
/// 10/8 end) sends it.
struct Seg {
    to_server: bool,
    seq: u32,
    ack: u32,
    flags: u8,
    options: Vec<u8>,
    payload: Vec<u8>,
}

/// A connection: client address and port, server address and port.
type Conn = (u32, u16, u32, u16);

/// Every TCP segment by connection, in order.
fn tcp_flows(pkts: &[Packet]) -> Vec<(Conn, Vec<Seg>)> {
    let mut order = Vec::new();
    let mut flows: HashMap<Conn, Vec<Seg>> = HashMap::new();
    for p in pkts {
        let f = &p.data;
        if f[23] != 6 {
            continue;
        }
        let (src, dst, sport, dport) = (u32at(f, 26), u32at(f, 30), u16at(f, 34), u16at(f, 36));
        let to_server = src >> 24 == 10;
        let key = if to_server { (src, sport, dst, dport) } else { (dst, dport, src, sport) };
        let doff = usize::from(f[46] >> 4) * 4;
        let seg = Seg {
            to_server,
            seq: u32at(f, 38),
            ack: u32at(f, 42),
            flags: f[47],
            options: f[54..34 + doff].to_vec(),
            payload: f[34 + doff..].to_vec(),
        };
        flows
            .entry(key)
            .or_insert_with(|| {
                order.push(key);
                Vec::new()
            })
            .push(seg);
    }
    order.into_iter().map(|k| (k, flows.remove(&k).unwrap())).collect()
}

#[test]
fn every_checksum_is_valid_and_addresses_and_sizes_are_realistic() {
    let pkts = trace(20_000, 1);
    assert_eq!(pkts.len(), 20_000);
    let mut small = 0;
    let mut full = 0;
    for (i, p) in pkts.iter().enumerate() {
        let f = &p.data;
        assert!((42..=1514).contains(&f.len()), "packet {i}: {} bytes", f.len());
        assert_eq!(p.wire_len as usize, f.len());
        assert_eq!(u16at(f, 12), 0x0800);
        assert_eq!(f[14], 0x45);
        assert_eq!(usize::from(u16at(f, 16)), f.len() - 14, "packet {i}: IPv4 total length");
        assert_eq!(internet_checksum(&f[14..34]), 0, "packet {i}: IPv4 header checksum");
        let (src, dst, proto) = (u32at(f, 26), u32at(f, 30), f[23]);
        assert!((src >> 24 == 10 && in_doc_range(dst)) || (dst >> 24 == 10 && in_doc_range(src)), "packet {i}: {src:x} -> {dst:x}");
        let l4 = &f[34..];
        let sum = match proto {
            1 => internet_checksum(l4),
            6 | 17 => {
                let mut b = [src.to_be_bytes(), dst.to_be_bytes(), [0, proto, 0, 0]].concat();
                b[10..12].copy_from_slice(&(l4.len() as u16).to_be_bytes());
                b.extend_from_slice(l4);
                internet_checksum(&b)
            }
            other => panic!("packet {i}: protocol {other}"),
        };
        assert_eq!(sum, 0, "packet {i}: transport checksum (protocol {proto})");
        if proto == 17 {
            assert_eq!(usize::from(u16at(l4, 4)), l4.len(), "packet {i}: UDP length");
            assert_ne!(u16at(l4, 6), 0, "packet {i}: UDP checksum present");
        }
        small += usize::from(f.len() <= 66);
        full += usize::from(f.len() >= 1400);
    }
    // Many bare ACKs and handshake segments, many MSS-sized segments.
    assert!(small > pkts.len() / 4, "{small} small frames");
    assert!(full > pkts.len() / 10, "{full} full-sized frames");
    assert!(pkts.windows(2).all(|w| w[0].ts.as_nanos() + 1000 <= w[1].ts.as_nanos()), "timestamps increase by at least 1 µs");
}

/// An HTTP message at the start of `s`: (start line, headers, body
/// length), the body's length taken from Content-Length unless `no_body`.
fn http_message(s: &[u8], no_body: impl Fn(&str) -> bool) -> (String, Vec<(String, String)>, usize) {
    let end = s.windows(4).position(|w| w == b"\r\n\r\n").expect("end of the header");
    let head = std::str::from_utf8(&s[..end]).expect("ASCII header");
    let mut lines = head.split("\r\n");
    let start = lines.next().unwrap().to_string();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (k, v) = l.split_once(": ").unwrap_or_else(|| panic!("header line {l:?}"));
            (k.to_string(), v.to_string())
        })
        .collect();
    let len = headers.iter().find(|(k, _)| k == "Content-Length").map_or(0, |(_, v)| v.parse().unwrap());
    (start.clone(), headers, end + 4 + if no_body(&start) { 0 } else { len })
}

/// The HTTP exchanges of a connection: every request and response parses,
/// one response per request, the streams consumed exactly.
fn check_http(c: &[u8], s: &[u8]) -> usize {
    let (mut c, mut s) = (c, s);
    let mut n = 0;
    while !c.is_empty() {
        let (line, headers, len) = http_message(c, |_| false);
        let mut parts = line.split(' ');
        let method = parts.next().unwrap().to_string();
        assert!(["GET", "POST", "HEAD", "PUT"].contains(&method.as_str()), "{line}");
        assert!(parts.next().unwrap().starts_with('/'), "{line}");
        assert_eq!(parts.next(), Some("HTTP/1.1"));
        for h in ["Host", "User-Agent", "Accept"] {
            assert!(headers.iter().any(|(k, _)| k == h), "{h} in {line}");
        }
        c = &c[len..];
        let (status, _, len) = http_message(s, |st| method == "HEAD" || st.contains(" 204 ") || st.contains(" 304 "));
        assert!(status.starts_with("HTTP/1.1 ") && status.as_bytes()[9].is_ascii_digit(), "{status}");
        s = &s[len..];
        n += 1;
    }
    assert!(s.is_empty(), "response bytes left over");
    n
}

/// TLS records of a stream: (content type, body) each, the stream consumed exactly.
fn tls_records(mut s: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    while !s.is_empty() {
        assert!((20..=23).contains(&s[0]), "content type {}", s[0]);
        assert!(matches!(u16at(s, 1), 0x0301 | 0x0303));
        let len = usize::from(u16at(s, 3));
        assert!(len <= 16_384);
        out.push((s[0], &s[5..5 + len]));
        s = &s[5 + len..];
    }
    out
}

/// The SNI host name of a ClientHello handshake message.
fn sni(h: &[u8]) -> String {
    assert_eq!(h[0], 1, "ClientHello");
    assert_eq!(u32at(h, 0) & 0xff_ffff, h.len() as u32 - 4);
    let mut i = 4 + 2 + 32;
    i += 1 + usize::from(h[i]);
    i += 2 + usize::from(u16at(h, i));
    i += 1 + usize::from(h[i]);
    let end = i + 2 + usize::from(u16at(h, i));
    assert_eq!(end, h.len(), "extensions end the message");
    i += 2;
    while i < end {
        let (ty, len) = (u16at(h, i), usize::from(u16at(h, i + 2)));
        if ty == 0 {
            let name_len = usize::from(u16at(h, i + 7));
            return String::from_utf8(h[i + 9..i + 9 + name_len].to_vec()).unwrap();
        }
        i += 4 + len;
    }
    panic!("no server_name extension");
}

#[test]
fn tcp_handshakes_sequence_numbers_and_every_conversation_parse() {
    let pkts = trace(60_000, 2);
    let flows = tcp_flows(&pkts);
    let mut complete: HashMap<u16, usize> = HashMap::new();
    let mut requests = 0;
    for ((_, _, _, port), segs) in &flows {
        if segs.len() < 3 {
            continue; // the trace ends during the handshake
        }
        // The three-way handshake.
        let (syn, synack, ack) = (&segs[0], &segs[1], &segs[2]);
        assert!(syn.to_server && syn.flags == SYN && syn.ack == 0 && syn.options[..2] == [2, 4]);
        assert!(!synack.to_server && synack.flags == SYN | ACK && synack.ack == syn.seq.wrapping_add(1));
        assert!(ack.to_server && ack.flags == ACK && ack.seq == syn.seq.wrapping_add(1) && ack.ack == synack.seq.wrapping_add(1));
        let mss = usize::from(u16at(&syn.options, 2).min(u16at(&synack.options, 2)));
        // Every segment continues its direction and acknowledges the other's.
        let (mut next_c, mut next_s) = (syn.seq, synack.seq);
        let (mut stream_c, mut stream_s) = (Vec::new(), Vec::new());
        let (mut fins, mut done) = (0, false);
        for (k, g) in segs.iter().enumerate() {
            assert!(!done, "segment after the end of the connection");
            assert!(g.payload.len() <= mss, "segment of {} bytes, MSS {mss}", g.payload.len());
            let (next, other, stream) =
                if g.to_server { (&mut next_c, next_s, &mut stream_c) } else { (&mut next_s, next_c, &mut stream_s) };
            assert_eq!(g.seq, *next, "segment {k} of a connection to port {port}: seq");
            if g.flags & ACK != 0 {
                assert_eq!(g.ack, other, "segment {k}: ack");
            }
            *next = next.wrapping_add(g.payload.len() as u32 + u32::from(g.flags & (SYN | FIN) != 0));
            stream.extend_from_slice(&g.payload);
            fins += usize::from(g.flags & FIN != 0);
            done = g.flags & RST != 0 || (fins == 2 && g.flags == ACK);
        }
        if !done {
            continue; // cut by the end of the trace
        }
        *complete.entry(*port).or_default() += 1;
        match port {
            80 | 8080 => requests += check_http(&stream_c, &stream_s),
            443 => {
                let (c, s) = (tls_records(&stream_c), tls_records(&stream_s));
                assert_eq!(c[0].0, 22);
                let host = sni(c[0].1);
                assert!(host.contains('.') && host.is_ascii(), "{host}");
                assert!(s[0].0 == 22 && s[0].1[0] == 2, "ServerHello first");
                assert_eq!(c.last().unwrap().0, 21, "close_notify last");
            }
            22 => assert!(stream_c.starts_with(b"SSH-2.0-") && stream_s.starts_with(b"SSH-2.0-")),
            25 => {
                let c = String::from_utf8_lossy(&stream_c);
                for cmd in ["EHLO ", "MAIL FROM:<", "RCPT TO:<", "\r\nDATA\r\n", "\r\n.\r\n", "QUIT\r\n"] {
                    assert!(c.contains(cmd), "{cmd:?}");
                }
                assert!(stream_s.starts_with(b"220 ") && stream_s.ends_with(b"221 2.0.0 Bye\r\n"));
            }
            other => panic!("TCP to port {other}"),
        }
    }
    for port in [80, 8080, 443, 22, 25] {
        assert!(complete.get(&port).copied().unwrap_or(0) >= 2, "complete connections to port {port}: {complete:?}");
    }
    assert!(requests > 100, "{requests} HTTP requests");
}

/// The end of a DNS name at `i` (labels, or a pointer to an earlier name).
fn skip_name(m: &[u8], mut i: usize) -> usize {
    loop {
        match m[i] {
            0 => return i + 1,
            l if l & 0xc0 == 0xc0 => {
                assert!(usize::from(u16at(m, i) & 0x3fff) < i, "pointer backwards");
                return i + 2;
            }
            l => i += 1 + usize::from(l),
        }
    }
}

#[test]
fn dns_messages_have_the_records_their_counts_say() {
    let pkts = ProtoMix::new(ProtoMixConfig {
        seed: 3,
        packets: 4_000,
        mix: Mix { http: 0, dns: 1, tls: 0, icmp: 0, udp: 0, ssh: 0, smtp: 0 },
        ..ProtoMixConfig::default()
    })
    .collect::<Vec<_>>();
    let mut pending: HashMap<(u32, u16), Vec<u16>> = HashMap::new();
    let (mut answers, mut nx) = (0, 0);
    for p in &pkts {
        let f = &p.data;
        assert_eq!(f[23], 17);
        let (sport, dport) = (u16at(f, 34), u16at(f, 36));
        assert!(sport == 53 || dport == 53);
        let m = &f[42..];
        let counts: Vec<usize> = (0..4).map(|k| usize::from(u16at(m, 4 + 2 * k))).collect();
        assert_eq!(counts[0], 1);
        let mut i = 12;
        i = skip_name(m, i) + 4;
        for _ in 0..counts[1] + counts[2] + counts[3] {
            i = skip_name(m, i);
            let ty = u16at(m, i);
            let rdlen = usize::from(u16at(m, i + 8));
            i += 10 + rdlen;
            match ty {
                1 => assert_eq!(rdlen, 4),
                28 => assert_eq!(rdlen, 16),
                5 => assert_eq!(skip_name(m, i - rdlen), i),
                15 => assert_eq!(skip_name(m, i - rdlen + 2), i),
                16 => assert_eq!(usize::from(m[i - rdlen]) + 1, rdlen),
                41 => {}
                other => panic!("record type {other}"),
            }
        }
        assert_eq!(i, m.len(), "the records fill the message");
        let flags = u16at(m, 2);
        if dport == 53 {
            assert_eq!(flags, 0x0100);
            pending.entry((u32at(f, 26), sport)).or_default().push(u16at(m, 0));
        } else {
            assert_eq!(flags & 0x8000, 0x8000, "a response");
            let q = pending.get_mut(&(u32at(f, 30), dport)).expect("a query before its response");
            assert_eq!(q.remove(0), u16at(m, 0), "transaction id");
            match flags & 0xf {
                0 => assert!(counts[1] >= 1),
                3 => {
                    assert_eq!(counts[1], 0);
                    nx += 1;
                }
                other => panic!("rcode {other}"),
            }
            answers += counts[1];
        }
    }
    assert!(answers > 1000 && nx > 20, "{answers} answers, {nx} NXDOMAIN");
}

#[test]
fn a_seed_names_a_trace() {
    let a = trace(3_000, 7);
    assert_eq!(a, trace(3_000, 7));
    assert_ne!(a, trace(3_000, 8));
    // A longer trace of the same seed starts with the shorter one.
    assert_eq!(trace(4_000, 7)[..3_000], a[..]);
    assert_eq!(
        protomix_trace(100, PROTOMIX_SEED),
        ProtoMix::new(ProtoMixConfig { packets: 100, ..ProtoMixConfig::default() }).collect::<Vec<_>>()
    );
}

#[test]
fn limits_and_interleaving() {
    let cfg = ProtoMixConfig { seed: 4, packets: u64::MAX, bytes: 1_000_000, ..ProtoMixConfig::default() };
    let pkts: Vec<Packet> = ProtoMix::new(cfg).collect();
    let total: u64 = pkts.iter().map(|p| p.data.len() as u64).sum();
    let last = pkts.last().unwrap().data.len() as u64;
    assert!(total >= 1_000_000 && total - last < 1_000_000, "{total} bytes");
    // Conversations interleave: many flows within a few hundred packets, and
    // a flow's packets separated by others'.
    let key = |p: &Packet| {
        let f = &p.data;
        let (a, b) = ((u32at(f, 26), u16at(f, 34)), (u32at(f, 30), u16at(f, 36)));
        (a.min(b), a.max(b))
    };
    let first: Vec<_> = pkts[..500].iter().map(key).collect();
    let distinct: std::collections::HashSet<_> = first.iter().collect();
    assert!(distinct.len() > 100, "{} flows in 500 packets", distinct.len());
    let runs = first.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(runs > 450, "consecutive packets mostly of different flows");
    // Only ICMP when only ICMP is asked for.
    let icmp = Mix { http: 0, dns: 0, tls: 0, icmp: 1, udp: 0, ssh: 0, smtp: 0 };
    let pkts: Vec<Packet> = ProtoMix::new(ProtoMixConfig { seed: 5, packets: 200, mix: icmp, ..ProtoMixConfig::default() }).collect();
    assert!(pkts.iter().all(|p| p.data[23] == 1 && matches!(p.data[34], 0 | 8) && p.data.len() == 98));
}
