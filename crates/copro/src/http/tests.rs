//! Tests of the `http` coprocessor: requests, responses, what is not
//! HTTP, the header block and body bounds, the registers, and a property
//! test: no input panics and every field lies inside the region.

use proptest::prelude::*;

use super::*;
use netvm_vm::Timestamp;

fn text<'a>(m: &Message, msg: &'a [u8], f: usize) -> Option<&'a str> {
    m.field(msg, f).map(|b| std::str::from_utf8(b).unwrap())
}

#[test]
fn request_fields() {
    let msg = b"GET /a/b.php?x=1 HTTP/1.1\r\nHost: h\r\nCOOKIE:  id=5; k=v\r\nCookie: second\r\n\r\nbody";
    let m = parse(msg).unwrap();
    assert_eq!(m.kind, REQUEST);
    assert_eq!(text(&m, msg, METHOD), Some("GET"));
    assert_eq!(text(&m, msg, URI), Some("/a/b.php?x=1"));
    assert_eq!(text(&m, msg, VERSION), Some("HTTP/1.1"));
    assert_eq!(text(&m, msg, START_LINE), Some("GET /a/b.php?x=1 HTTP/1.1"));
    assert_eq!(text(&m, msg, HEADER), Some("Host: h\r\nCOOKIE:  id=5; k=v\r\nCookie: second\r\n"));
    assert_eq!(text(&m, msg, COOKIE), Some("id=5; k=v"), "the first Cookie, name in any case, value without leading spaces");
    assert_eq!(text(&m, msg, BODY), Some("body"));
    assert_eq!(text(&m, msg, STAT_CODE), None);
    assert_eq!(text(&m, msg, STAT_MSG), None);
}

#[test]
fn response_fields() {
    let msg = b"HTTP/1.0 404 Not Found\nSet-Cookie:\ts=1\nCookie: not-this\nContent-Length: 3\n\nabcdef";
    let m = parse(msg).unwrap();
    assert_eq!(m.kind, RESPONSE);
    assert_eq!(text(&m, msg, VERSION), Some("HTTP/1.0"));
    assert_eq!(text(&m, msg, STAT_CODE), Some("404"));
    assert_eq!(text(&m, msg, STAT_MSG), Some("Not Found"));
    assert_eq!(text(&m, msg, START_LINE), Some("HTTP/1.0 404 Not Found"));
    assert_eq!(text(&m, msg, HEADER), Some("Set-Cookie:\ts=1\nCookie: not-this\nContent-Length: 3\n"), "bare LF line ends");
    assert_eq!(text(&m, msg, COOKIE), Some("s=1"));
    assert_eq!(text(&m, msg, BODY), Some("abc"), "Content-Length bounds the body");
    assert_eq!(text(&m, msg, METHOD), None);
    assert_eq!(text(&m, msg, URI), None);
    // No reason phrase: present and empty.
    let m = parse(b"HTTP/1.1 204\r\n\r\n").unwrap();
    assert_eq!(m.field(b"HTTP/1.1 204\r\n\r\n", STAT_MSG), Some(&b""[..]));
    assert_eq!(m.field(b"HTTP/1.1 204\r\n\r\n", BODY), Some(&b""[..]));
    assert_eq!(m.field(b"HTTP/1.1 204\r\n\r\n", HEADER), Some(&b""[..]));
}

#[test]
fn header_block_cut_by_the_region() {
    let msg = b"POST /x HTTP/1.1\r\nHost: a\r\nUser-Ag";
    let m = parse(msg).unwrap();
    assert_eq!(text(&m, msg, HEADER), Some("Host: a\r\nUser-Ag"));
    assert_eq!(m.field(msg, BODY), None, "no body before the empty line");
    let msg = b"GET / HTTP/1.1\r\n";
    let m = parse(msg).unwrap();
    assert_eq!(text(&m, msg, HEADER), Some(""));
    assert_eq!(m.field(msg, BODY), None);
}

#[test]
fn not_http() {
    for msg in [
        &b""[..],
        b"GET / HTTP/1.1",         // first line not ended
        b"GET /  HTTP/1.1\r\n",    // two spaces
        b"GET / HTTP/1.1 \r\n",    // trailing space
        b"GET / HTTP/1\r\n",       // bad version
        b" GET / HTTP/1.1\r\n",    // leading space
        b"G(T / HTTP/1.1\r\n",     // not a token
        b"GET HTTP/1.1\r\n",       // no target
        b"GET /a\tb HTTP/1.1\r\n", // control byte in the target
        b"HTTP/1.1 20 OK\r\n",     // two-digit code
        b"HTTP/1.1 200OK\r\n",     // no space after the code
        b"HTTP/1.1  200 OK\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n", // TLS
        b"SSH-2.0-OpenSSH_8.4\r\n",
    ] {
        assert_eq!(parse(msg), None, "{:?}", String::from_utf8_lossy(msg));
    }
    let long = format!("{} / HTTP/1.1\r\n", "A".repeat(MAX_METHOD + 1));
    assert_eq!(parse(long.as_bytes()), None);
    let ok = format!("{} / HTTP/1.1\r\n", "A".repeat(MAX_METHOD));
    assert!(parse(ok.as_bytes()).is_some());
}

#[test]
fn registers_give_packet_offsets() {
    let mut pkt = vec![0u8; 54];
    pkt.extend_from_slice(b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n");
    pkt.extend_from_slice(b"trailing bytes past in1");
    let mut h = create(&CoproConfig::new()).unwrap();
    let ctx = InvokeContext { packet: &pkt, info: &[], now: Timestamp::default(), seq: 0 };
    h.write(0, 54).unwrap();
    h.write(1, 37).unwrap();
    h.invoke(0, &ctx).unwrap();
    assert_eq!(h.read(0).unwrap(), REQUEST);
    assert_eq!(h.read(1).unwrap(), (1 << METHOD) | (1 << URI) | (1 << VERSION) | (1 << START_LINE) | (1 << HEADER) | (1 << BODY));
    let region = |h: &mut Box<dyn Coprocessor>, f: usize| (h.read(2 + 2 * f as u8).unwrap(), h.read(3 + 2 * f as u8).unwrap());
    assert_eq!(region(&mut h, URI), (58, 69));
    assert_eq!(&pkt[58..69], b"/index.html");
    assert_eq!(region(&mut h, BODY), (91, 91), "the body stops at in0 + in1");
    assert_eq!(region(&mut h, COOKIE), (0, 0));
    assert_eq!(h.read(2 + 2 * FIELDS as u8), Err(CoproError::NoRegister(2 + 2 * FIELDS as u8)));
    // A region past the packet is clipped; a second parse clears the outputs.
    h.write(0, 60).unwrap();
    h.write(1, u32::MAX).unwrap();
    h.invoke(0, &ctx).unwrap();
    assert_eq!((h.read(0).unwrap(), h.read(1).unwrap(), h.read(4).unwrap()), (0, 0, 0));
    assert_eq!(h.invoke(1, &ctx), Err(CoproError::NoOperation(1)));
    assert_eq!(h.stats(), vec![("requests".into(), 1), ("responses".into(), 0), ("other".into(), 1)]);
    let mut f = h.fork().unwrap();
    f.write(0, 54).unwrap();
    f.write(1, 37).unwrap();
    f.invoke(0, &ctx).unwrap();
    h.absorb(f.as_mut());
    assert_eq!(h.stats()[0], ("requests".into(), 2));
    assert_eq!(f.stats()[0], ("requests".into(), 0));
    assert!(create(&CoproConfig::from([("x".to_string(), "1".to_string())])).is_err());
}

proptest! {
    #[test]
    fn any_bytes_parse_inside_the_region(
        head in prop::sample::select(vec![&b"GET / HTTP/1.1\r\n"[..], b"HTTP/1.1 200 OK\r\n", b"POST /a HTTP/1.0\n", b""]),
        rest in prop::collection::vec(prop::sample::select(vec![b'\r', b'\n', b':', b' ', b'a', b'C', b'0', 0u8, 0xff]), 0..64),
        tail in prop::sample::select(vec![&b""[..], b"Cookie: c\r\n", b"Content-Length: 2\r\n\r\nxyz", b"\r\n\r\n"]),
    ) {
        let mut msg = head.to_vec();
        msg.extend_from_slice(&rest);
        msg.extend_from_slice(tail);
        let parsed = parse(&msg);
        // A well-formed first line makes a message whatever follows it.
        if !head.is_empty() {
            prop_assert!(parsed.is_some());
            prop_assert_eq!(parsed.unwrap().kind, if head.starts_with(b"HTTP/") { RESPONSE } else { REQUEST });
        }
        if let Some(m) = parsed {
            for f in 0..FIELDS {
                let (s, e) = m.fields[f];
                prop_assert!(s <= e && e <= msg.len(), "field {} at {}..{}", f, s, e);
                if m.present & (1 << f) == 0 {
                    prop_assert_eq!((s, e), (0, 0));
                }
            }
            prop_assert!(m.present & (1 << START_LINE) != 0 && m.present & (1 << HEADER) != 0 && m.present & (1 << VERSION) != 0);
            if m.present & (1 << BODY) != 0 {
                // The empty line lies between the header block and the body.
                let gap = &msg[m.fields[HEADER].1..m.fields[BODY].0];
                prop_assert!(gap == b"\n" || gap == b"\r\n", "{:?}", gap);
            }
            if let Some(c) = m.field(&msg, COOKIE) {
                prop_assert!(!c.contains(&b'\n'));
            }
        }
    }
}
