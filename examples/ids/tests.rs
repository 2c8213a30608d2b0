//! `netvm ids` (NetVMSnort) against a naive per-rule matcher.
//!
//! The reference decodes each frame itself, then tries every rule in turn:
//! header, then its contents and pcres by plain recursion over every
//! occurrence of every content (Snort's semantics: a rule matches if some
//! choice of occurrences satisfies all of its constraints). Alerts from
//! `netvm ids` (every engine) must be exactly the reference's, and the
//! packets written with -w exactly those no drop rule matched.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::Command;

use netvm_copro::regex::{compile_pcre2, Engine as Regex, Search};
use netvm_ids::rules::{
    BitsMode, Buffer, ByteOp, Content, Detection, Endian, FlowbitsOp, HeaderCheck, Num, NumBase, Pcre, Proto, ThresholdKind,
};
use netvm_ids::{parse_rules, Action, Rule};
use netvm_io::{read_capture, PcapWriter};
use netvm_traffic::apps::{ids_rules, ids_trace};
use netvm_traffic::SplitMix64;
use netvm_vm::Packet;

/// What the rules see of a frame.
struct Decoded {
    proto: Option<Proto>,
    l3: usize,
    src: u32,
    dst: u32,
    sport: u16,
    dport: u16,
    ip_payload: (usize, usize),
    l4_payload: (usize, usize),
}

fn decode(f: &[u8]) -> Option<Decoded> {
    let be16 = |o: usize| u16::from_be_bytes([f[o], f[o + 1]]);
    if f.len() < 14 {
        return None;
    }
    let (mut l3, mut et) = (14, be16(12));
    if et == 0x8100 {
        if f.len() < 18 {
            return None;
        }
        (l3, et) = (18, be16(16));
    }
    if et != 0x0800 || f.len() < l3 + 20 || f[l3] >> 4 != 4 || f[l3] & 15 < 5 {
        return None;
    }
    let start = l3 + usize::from(f[l3] & 15) * 4;
    let total_end = l3 + usize::from(be16(l3 + 2));
    if start > f.len() || total_end < start {
        return None;
    }
    let end = total_end.min(f.len());
    let mut d = Decoded {
        proto: Some(Proto::Ip),
        l3,
        src: u32::from_be_bytes(f[l3 + 12..l3 + 16].try_into().unwrap()),
        dst: u32::from_be_bytes(f[l3 + 16..l3 + 20].try_into().unwrap()),
        sport: 0,
        dport: 0,
        ip_payload: (start, end),
        l4_payload: (0, 0),
    };
    if be16(l3 + 6) & 0x1fff != 0 {
        return Some(d);
    }
    let len = end - start;
    let (proto, hdr) = match f[l3 + 9] {
        6 if len >= 20 && usize::from(f[start + 12] >> 4) * 4 >= 20 && usize::from(f[start + 12] >> 4) * 4 <= len => {
            (Proto::Tcp, usize::from(f[start + 12] >> 4) * 4)
        }
        17 if len >= 8 => (Proto::Udp, 8),
        1 if len >= 8 => (Proto::Icmp, 8),
        _ => return Some(d),
    };
    d.proto = Some(proto);
    if proto != Proto::Icmp {
        (d.sport, d.dport) = (be16(start), be16(start + 2));
    }
    d.l4_payload = (start + hdr, end);
    Some(d)
}

fn find(hay: &[u8], needle: &[u8], nocase: bool) -> Vec<usize> {
    if needle.len() > hay.len() {
        return Vec::new();
    }
    (0..=hay.len() - needle.len())
        .filter(|i| {
            let w = &hay[*i..*i + needle.len()];
            if nocase {
                w.eq_ignore_ascii_case(needle)
            } else {
                w == needle
            }
        })
        .collect()
}

/// The pcre on PCRE2 itself (not the coprocessor's translation to regex-automata).
fn regex(p: &Pcre) -> Regex {
    compile_pcre2(&netvm_ids::pcre::regex_spec(p).unwrap()).unwrap()
}

/// The regions of one packet an HTTP rule may inspect, by the reference's
/// own reading of docs/ids.md (frame offsets).
#[derive(Default)]
struct Http {
    regions: HashMap<&'static str, (usize, usize)>,
}

/// A naive HTTP/1.x reader of the TCP payload `pay` of `f`.
fn http(f: &[u8], pay: (usize, usize)) -> Http {
    let mut h = Http::default();
    let msg = &f[pay.0..pay.1];
    let Some(nl) = msg.iter().position(|&b| b == b'\n') else { return h };
    let first = if nl > 0 && msg[nl - 1] == b'\r' { &msg[..nl - 1] } else { &msg[..nl] };
    let version_ok = |v: &[u8]| v.len() == 8 && v.starts_with(b"HTTP/") && v[5].is_ascii_digit() && v[6] == b'.' && v[7].is_ascii_digit();
    let at = |part: &[u8]| part.as_ptr() as usize - msg.as_ptr() as usize;
    let mut put = |name: &'static str, part: &[u8]| {
        h.regions.insert(name, (pay.0 + at(part), pay.0 + at(part) + part.len()));
    };
    let request = if first.starts_with(b"HTTP/") {
        let parts: Vec<&[u8]> = first.splitn(3, |&b| b == b' ').collect();
        if parts.len() < 2 || !version_ok(parts[0]) || parts[1].len() != 3 || !parts[1].iter().all(u8::is_ascii_digit) {
            return Http::default();
        }
        put("version", parts[0]);
        put("stat_code", parts[1]);
        put("stat_msg", parts.get(2).copied().unwrap_or(&first[first.len()..]));
        put("raw_status", first);
        false
    } else {
        let parts: Vec<&[u8]> = first.split(|&b| b == b' ').collect();
        let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
        if parts.len() != 3
            || parts[0].is_empty()
            || parts[0].len() > 32
            || !parts[0].iter().all(token)
            || parts[1].is_empty()
            || parts[1].iter().any(|&b| b < 0x20 || b == 0x7f)
            || !version_ok(parts[2])
        {
            return Http::default();
        }
        put("method", parts[0]);
        put("uri", parts[1]);
        put("version", parts[2]);
        put("raw_request", first);
        true
    };
    // Complete header lines until an empty one.
    let headers_start = nl + 1;
    let mut line_start = headers_start;
    let mut cookie = None;
    let mut length: Option<usize> = None;
    let mut empty_line = None;
    while let Some(k) = msg[line_start..].iter().position(|&b| b == b'\n') {
        let line = &msg[line_start..line_start + k];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            empty_line = Some((line_start, line_start + k + 1));
            break;
        }
        if let Some(c) = line.iter().position(|&b| b == b':') {
            let name = String::from_utf8_lossy(&line[..c]).to_ascii_lowercase();
            let value = &line[c + 1..];
            let skip = value.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
            let value = &value[skip..];
            if cookie.is_none() && name == if request { "cookie" } else { "set-cookie" } {
                cookie = Some((line_start + c + 1 + skip, value.len()));
            }
            if length.is_none() && name == "content-length" {
                length = std::str::from_utf8(value).ok().and_then(|v| v.trim().parse().ok());
            }
        }
        line_start += k + 1;
    }
    let region = |a: usize, b: usize| (pay.0 + a, pay.0 + b);
    if let Some((c, n)) = cookie {
        h.regions.insert("cookie", region(c, c + n));
    }
    match empty_line {
        Some((blank, body)) => {
            h.regions.insert("header", region(headers_start, blank));
            let end = length.map_or(msg.len(), |n| msg.len().min(body + n));
            h.regions.insert("body", region(body, end));
            if request {
                h.regions.insert("client_body", region(body, end));
            }
        }
        None => {
            h.regions.insert("header", region(headers_start, msg.len()));
        }
    }
    h
}

/// The reference's name of the bytes a buffer keyword inspects (keywords
/// of the same bytes share a name); `pkt` for the payload.
fn region_name(b: Buffer) -> &'static str {
    match b {
        Buffer::PktData | Buffer::Raw => "pkt",
        Buffer::HttpUri | Buffer::HttpRawUri => "uri",
        Buffer::HttpHeader | Buffer::HttpRawHeader => "header",
        Buffer::HttpCookie | Buffer::HttpRawCookie => "cookie",
        Buffer::HttpMethod => "method",
        Buffer::HttpStatCode => "stat_code",
        Buffer::HttpStatMsg => "stat_msg",
        Buffer::HttpVersion => "version",
        Buffer::FileData | Buffer::HttpRawBody => "body",
        Buffer::HttpClientBody => "client_body",
        Buffer::HttpRawRequest => "raw_request",
        Buffer::HttpRawStatus => "raw_status",
        Buffer::JsData => panic!("generated rules have no js_data"),
    }
}

/// The `byte_extract` variables set so far on a path: (name, value).
type Vars = Vec<(String, u32)>;

/// What a byte option reads (docs/ids.md, "Byte options": Snort 3's
/// `extract.cc`): the number after the bitmask and how many bytes it took,
/// or `None` when the read fails.
#[allow(clippy::too_many_arguments)]
fn byte_read(
    f: &[u8],
    buf: (usize, usize),
    from: usize,
    offset: i64,
    bytes: u8,
    endian: Endian,
    string: Option<NumBase>,
    bitmask: Option<u32>,
) -> Option<(u32, usize)> {
    let at = from as i64 + offset;
    if at < buf.0 as i64 || at >= buf.1 as i64 {
        return None;
    }
    let at = at as usize;
    let (v, took) = match string {
        None => {
            let n = usize::from(bytes);
            if !(1..=4).contains(&n) || at + n > buf.1 {
                return None;
            }
            let b = &f[at..at + n];
            let v = match endian {
                Endian::Little => b.iter().rev().fold(0u32, |a, &x| a << 8 | u32::from(x)),
                _ => b.iter().fold(0u32, |a, &x| a << 8 | u32::from(x)),
            };
            (v, n)
        }
        Some(base) => strtoul(&f[at..at + (buf.1 - at).min(usize::from(bytes))], base)?,
    };
    Some(bitmask.map_or((v, took), |m| ((v & m) >> m.trailing_zeros(), took)))
}

/// C's `strtoul` on the text (up to a NUL), clamped to 32 bits: the value
/// and the bytes it took; `None` without a digit or with a `-`.
fn strtoul(text: &[u8], base: NumBase) -> Option<(u32, usize)> {
    let radix = match base {
        NumBase::Hex => 16,
        NumBase::Dec => 10,
        NumBase::Oct => 8,
    };
    let text = &text[..text.iter().position(|&b| b == 0).unwrap_or(text.len())];
    let mut i = text.iter().take_while(|b| matches!(b, b' ' | b'\t'..=b'\r')).count();
    match text.get(i) {
        None | Some(b'-') => return None,
        Some(b'+') => i += 1,
        _ => {}
    }
    if radix == 16
        && text.get(i) == Some(&b'0')
        && matches!(text.get(i + 1), Some(b'x' | b'X'))
        && text.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
    {
        i += 2;
    }
    let start = i;
    let mut v: u64 = 0;
    while let Some(d) = text.get(i).and_then(|&c| char::from(c).to_digit(radix)) {
        v = (v * u64::from(radix) + u64::from(d)).min(u64::from(u32::MAX));
        i += 1;
    }
    (i > start).then_some((v as u32, i))
}

/// Whether matchers `ms` hold from `cursor` in the buffer named `current`
/// (an earlier matcher's; a matcher in another buffer starts at that
/// buffer's start) of `f`, the payload being `pay` and the HTTP regions
/// `h`, with the variables `vars`.
#[allow(clippy::too_many_arguments)]
fn chain(
    f: &[u8],
    pay: (usize, usize),
    h: &Http,
    current: &str,
    ms: &[Detection],
    cursor: usize,
    vars: &Vars,
    res: &HashMap<String, Regex>,
) -> bool {
    let Some((m, rest)) = ms.split_first() else { return true };
    let name = region_name(m.buffer());
    let region = if name == "pkt" { Some(pay) } else { h.regions.get(name).copied() };
    // A buffer the packet does not have: the rule does not match.
    let Some(buf) = region else { return false };
    let cursor = if name == current { cursor } else { buf.0 };
    let next = |at: usize| chain(f, pay, h, name, rest, at, vars, res);
    let (base, end) = (buf.0 as i64, buf.1 as i64);
    let var = |v: &str| vars.iter().rev().find(|(n, _)| n == v).map(|(_, x)| *x).expect("variables are defined before they are read");
    // A position: a literal, or a variable (unsigned, as Snort 3 reads it there).
    let num = |n: &Num| match n {
        Num::Lit(x) => *x,
        Num::Var(v) => i64::from(var(v)),
    };
    // An offset: a variable read as a signed 32-bit number.
    let signed = |n: &Num| match n {
        Num::Lit(x) => *x,
        Num::Var(v) => i64::from(var(v) as i32),
    };
    let lit = |n: &Option<Num>| n.as_ref().map(num);
    match m {
        Detection::Content(c) => {
            let Content { bytes, negated, nocase, .. } = c;
            let (raw, stop) = if c.relative() {
                let s = cursor as i64 + lit(&c.distance).unwrap_or(0);
                (s, lit(&c.within).map_or(end, |w| (s + w).min(end)))
            } else {
                let s = base + lit(&c.offset).unwrap_or(0);
                (s, lit(&c.depth).map_or(end, |d| (s + d).min(end)))
            };
            let start = raw.max(base);
            let hits = if stop > start { find(&f[start as usize..stop as usize], bytes, *nocase) } else { Vec::new() };
            if *negated {
                hits.is_empty() && next(cursor)
            } else {
                hits.iter().any(|h| next(start as usize + h + bytes.len()))
            }
        }
        Detection::Pcre(p) => {
            let from = if p.relative() { cursor } else { buf.0 };
            let re = &res[&p.text];
            // The subject is the region: `^` anchors at its start (the buffer's, or the cursor with R).
            match (re.find(&f[from.min(buf.1)..buf.1]), p.negated) {
                (Search::Match(_, end), false) => next(from + end),
                (Search::NoMatch, true) => next(cursor),
                _ => false,
            }
        }
        Detection::IsDataAt(d) => {
            let at = if d.relative { cursor as i64 } else { base } + num(&d.offset);
            (at < end) != d.negated && next(cursor)
        }
        Detection::BufferLen { check, relative, .. } => {
            let from = if *relative { cursor as i64 } else { base };
            check.matches(end - from) && next(cursor)
        }
        Detection::ByteTest(b) => {
            let from = if b.relative { cursor } else { buf.0 };
            let Some((v, _)) = byte_read(f, buf, from, signed(&b.offset), b.bytes, b.endian, b.string, b.bitmask) else { return false };
            let c = match &b.value {
                Num::Lit(x) => *x as u32,
                Num::Var(name) => var(name),
            };
            let holds = match b.op {
                ByteOp::Lt => v < c,
                ByteOp::Gt => v > c,
                ByteOp::Le => v <= c,
                ByteOp::Ge => v >= c,
                ByteOp::Eq => v == c,
                ByteOp::And => v & c != 0,
                ByteOp::Xor => v ^ c != 0,
            };
            holds != b.negated && next(cursor)
        }
        Detection::ByteJump(b) => {
            let from = if b.relative { cursor } else { buf.0 };
            let at = from as i64 + signed(&b.offset);
            let (v, took) = if b.bytes == 0 {
                (0, 0)
            } else {
                match byte_read(f, buf, from, signed(&b.offset), b.bytes, b.endian, b.string, b.bitmask) {
                    Some(x) => x,
                    None => return false,
                }
            };
            let mut jump = v.wrapping_mul(b.multiplier.unwrap_or(1));
            if b.align != 0 && jump % 4 != 0 {
                jump = jump.wrapping_add(4 - jump % 4);
            }
            let size = (buf.1 - buf.0) as u32;
            let start = if b.from_beginning {
                0
            } else if b.from_end {
                size
            } else {
                (at - buf.0 as i64 + took as i64) as u32
            };
            let to = start.wrapping_add(jump).wrapping_add(b.post_offset.as_ref().map_or(0, |p| signed(p) as u32));
            to <= size && next(buf.0 + to as usize)
        }
        Detection::ByteExtract(b) => {
            let from = if b.relative { cursor } else { buf.0 };
            let Some((v, took)) = byte_read(f, buf, from, i64::from(b.offset), b.bytes, b.endian, b.string, b.bitmask) else {
                return false;
            };
            let mut v = v.wrapping_mul(b.multiplier.unwrap_or(1));
            let align = u32::from(b.align);
            if align > 1 && v % align != 0 {
                v = v.wrapping_add(align - v % align);
            }
            let mut vars = vars.clone();
            vars.push((b.name.clone(), v));
            let at = (from as i64 + i64::from(b.offset)) as usize + took;
            chain(f, pay, h, name, rest, at, &vars, res)
        }
    }
}

/// A flow's state in the reference's own model of docs/coprocessors.md
/// (`flow`): client and server, the TCP handshake, FINs, RST, idle timeouts.
#[derive(Clone, Debug, Default)]
struct FlowModel {
    /// The client's (address, port).
    client: (u32, u16),
    picked_up_by_syn_ack: bool,
    syn: bool,
    syn_ack: bool,
    midstream: bool,
    established: bool,
    fin_client: bool,
    fin_server: bool,
    closed: bool,
    seen_client: bool,
    seen_server: bool,
    /// The last packet's time, in seconds (the trace's times are whole seconds and microseconds).
    last: f64,
    /// The flowbits set.
    bits: BTreeSet<String>,
}

/// What a rule's `flow` sees of a packet: `None` when it is not tracked,
/// else (established, from the client).
type FlowView = Option<(bool, bool)>;

/// A flow's key: (protocol, lower endpoint, higher endpoint).
type FlowKey = (u8, (u32, u16), (u32, u16));

/// The reference's flows.
type Flows = HashMap<FlowKey, FlowModel>;

/// Tracks one packet of the trace, in order: what `flow` sees, and the packet's flow.
fn track(flows: &mut Flows, f: &[u8], d: &Decoded, now: f64) -> (FlowView, Option<FlowKey>) {
    let l3 = d.l3;
    // Fragments are not tracked (docs/ids.md).
    if u16::from_be_bytes([f[l3 + 6], f[l3 + 7]]) & 0x3fff != 0 {
        return (None, None);
    }
    let proto = f[l3 + 9];
    let l4 = l3 + usize::from(f[l3] & 15) * 4;
    let need = match proto {
        6 => 14,
        17 | 132 => 4,
        _ => 0,
    };
    if f.len() < l4 + need {
        return (None, None);
    }
    let (sport, dport) =
        if need > 0 { (u16::from_be_bytes([f[l4], f[l4 + 1]]), u16::from_be_bytes([f[l4 + 2], f[l4 + 3]])) } else { (0, 0) };
    let flags = if proto == 6 { f[l4 + 13] } else { 0 };
    let (syn, ack, rst, fin) = (flags & 2 != 0, flags & 0x10 != 0, flags & 4 != 0, flags & 1 != 0);
    let (a, b) = ((d.src, sport), (d.dst, dport));
    let key = (proto, a.min(b), a.max(b));
    let timeout = |m: &FlowModel| match proto {
        _ if m.closed => 10.0,
        6 if m.established => 3600.0,
        6 => 30.0,
        17 => 30.0,
        _ => 60.0,
    };
    let restart = |m: &FlowModel| now - m.last > timeout(m) || (proto == 6 && m.closed && syn && !ack && !rst);
    if flows.get(&key).is_some_and(restart) {
        flows.remove(&key);
    }
    let new = !flows.contains_key(&key);
    let m = flows.entry(key).or_insert_with(|| FlowModel {
        // The receiver of a SYN-ACK is the client; otherwise the sender.
        client: if proto == 6 && syn && ack && !rst { b } else { a },
        picked_up_by_syn_ack: proto == 6 && syn && ack && !rst,
        ..FlowModel::default()
    });
    // A flow from an endpoint to itself: both directions are one, the client's
    // unless a SYN-ACK started the flow.
    let from_client = if a == b { m.client == a && !m.picked_up_by_syn_ack } else { a == m.client };
    if from_client {
        m.seen_client = true;
    } else {
        m.seen_server = true;
    }
    if proto != 6 {
        m.established |= m.seen_client && m.seen_server;
    } else if rst {
        m.closed = true;
    } else {
        if new {
            match (syn, ack) {
                (true, false) => m.syn = true,
                (true, true) => m.syn_ack = true,
                _ => m.midstream = true,
            }
        } else if syn {
            if ack && !from_client && m.syn && !m.syn_ack && !m.established && !m.midstream {
                m.syn_ack = true;
            }
        } else if !m.established && ((from_client && ack && m.syn_ack) || (!from_client && m.midstream)) {
            m.established = true;
        }
        if fin {
            if from_client {
                m.fin_client = true;
            } else {
                m.fin_server = true;
            }
            m.closed |= m.fin_client && m.fin_server;
        }
    }
    m.last = now;
    (Some((m.established, from_client)), Some(key))
}

/// Whether the rule's flowbits tests hold on `bits`, the packet's flow's
/// bits when it arrived (`None`: no flow, where every test fails).
fn flowbits_hold(r: &Rule, bits: Option<&BTreeSet<String>>) -> bool {
    r.flowbits.iter().all(|f| {
        let set = |b: &String| bits.is_some_and(|s| s.contains(b));
        match f.op {
            FlowbitsOp::IsSet if f.any => bits.is_some() && f.bits.iter().any(set),
            FlowbitsOp::IsSet => bits.is_some() && f.bits.iter().all(set),
            FlowbitsOp::IsNotSet if f.any || f.bits.len() == 1 => bits.is_some() && !f.bits.iter().any(set),
            FlowbitsOp::IsNotSet => bits.is_some() && !f.bits.iter().all(set),
            _ => true,
        }
    })
}

/// The flowbit changes of the rules in `hit`, applied to `bits`: every
/// toggle, then every unset, then every set (so that a set wins).
fn change_flowbits(hit: &[&Rule], all: &[Rule], bits: &mut BTreeSet<String>) {
    let group = |g: &str| -> BTreeSet<String> {
        all.iter().flat_map(|r| &r.flowbits).filter(|f| f.group.as_deref() == Some(g)).flat_map(|f| f.bits.iter().cloned()).collect()
    };
    let (mut set, mut unset, mut toggle) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::<String>::new());
    for f in hit.iter().flat_map(|r| &r.flowbits) {
        let names = f.bits.iter().cloned();
        match f.op {
            FlowbitsOp::Set => set.extend(names),
            FlowbitsOp::Unset => unset.extend(names),
            FlowbitsOp::Toggle => {
                for n in names {
                    if !toggle.remove(&n) {
                        toggle.insert(n);
                    }
                }
            }
            FlowbitsOp::SetX => {
                unset.extend(group(f.group.as_deref().unwrap()));
                set.extend(names);
            }
            FlowbitsOp::Reset => match &f.group {
                Some(g) => unset.extend(group(g)),
                // Every bit, the ones this packet's toggles set included.
                None => unset.extend(all.iter().flat_map(|r| &r.flowbits).flat_map(|f| f.bits.iter().cloned())),
            },
            _ => {}
        }
    }
    for n in toggle {
        if !bits.remove(&n) {
            bits.insert(n);
        }
    }
    bits.retain(|b| !unset.contains(b));
    bits.extend(set);
}

fn flow_matches(fl: &netvm_ids::rules::Flow, view: FlowView, f: &[u8], d: &Decoded) -> bool {
    if let Some(est) = fl.established {
        match view {
            Some((e, _)) if e == est => {}
            _ => return false,
        }
    }
    if let (Some(to_server), Some((_, from_client))) = (fl.to_server, view) {
        if to_server != from_client {
            return false;
        }
    }
    if let Some(frag) = fl.frag {
        if (u16::from_be_bytes([f[d.l3 + 6], f[d.l3 + 7]]) & 0x3fff != 0) != frag {
            return false;
        }
    }
    fl.stream != Some(true)
}

fn bits_match(v: u32, bits: u32, mode: BitsMode) -> bool {
    match mode {
        BitsMode::Exact => v == bits,
        BitsMode::All => v & bits == bits,
        BitsMode::Any => v & bits != 0,
        BitsMode::Not => v & bits == 0,
    }
}

fn header_matches(h: &HeaderCheck, d: &Decoded, f: &[u8]) -> bool {
    let (l3, l4) = (d.l3, d.ip_payload.0);
    let be16 = |o: usize| i64::from(u16::from_be_bytes([f[o], f[o + 1]]));
    let be32 = |o: usize| i64::from(u32::from_be_bytes(f[o..o + 4].try_into().unwrap()));
    let (tcp, icmp) = (d.proto == Some(Proto::Tcp), d.proto == Some(Proto::Icmp));
    match h {
        HeaderCheck::Flags { bits, mode, mask } => tcp && bits_match(u32::from(f[l4 + 13] & !mask), u32::from(bits & !mask), *mode),
        HeaderCheck::Fragbits { bits, mode } => bits_match(be16(l3 + 6) as u32 & 0xe000, u32::from(*bits), *mode),
        HeaderCheck::Dsize(c) => {
            let (s, e) = if d.proto == Some(Proto::Ip) { d.ip_payload } else { d.l4_payload };
            c.matches((e - s) as i64)
        }
        HeaderCheck::Itype(c) => icmp && c.matches(i64::from(f[l4])),
        HeaderCheck::Icode(c) => icmp && c.matches(i64::from(f[l4 + 1])),
        HeaderCheck::IcmpId(c) => icmp && matches!(f[l4], 0 | 8) && c.matches(be16(l4 + 4)),
        HeaderCheck::IcmpSeq(c) => icmp && matches!(f[l4], 0 | 8) && c.matches(be16(l4 + 6)),
        HeaderCheck::Ttl(c) => c.matches(i64::from(f[l3 + 8])),
        HeaderCheck::Tos(c) => c.matches(i64::from(f[l3 + 1])),
        HeaderCheck::Id(c) => c.matches(be16(l3 + 4)),
        HeaderCheck::IpProto(c) => c.matches(i64::from(f[l3 + 9])),
        HeaderCheck::Fragoffset(c) => c.matches(be16(l3 + 6) & 0x1fff),
        HeaderCheck::Seq(c) => tcp && c.matches(be32(l4 + 4)),
        HeaderCheck::Ack(c) => tcp && c.matches(be32(l4 + 8)),
        HeaderCheck::Window(c) => tcp && c.matches(be16(l4 + 14)),
        HeaderCheck::SameIp => d.src == d.dst,
    }
}

fn rule_matches(r: &Rule, d: &Decoded, view: FlowView, bits: Option<&BTreeSet<String>>, f: &[u8], res: &HashMap<String, Regex>) -> bool {
    let proto_ok = match r.proto {
        Proto::Ip => d.proto.is_some(),
        p => d.proto == Some(p),
    };
    let ports = matches!(r.proto, Proto::Tcp | Proto::Udp);
    let one_way = |src: u32, sport: u16, dst: u32, dport: u16| {
        r.src.matches(src) && r.dst.matches(dst) && (!ports || (r.sport.matches(sport) && r.dport.matches(dport)))
    };
    let endpoints = one_way(d.src, d.sport, d.dst, d.dport) || (r.bidirectional && one_way(d.dst, d.dport, d.src, d.sport));
    if !proto_ok || !endpoints {
        return false;
    }
    if r.flow.as_ref().is_some_and(|fl| !flow_matches(fl, view, f, d))
        || !flowbits_hold(r, bits)
        || !r.header.iter().all(|h| header_matches(h, d, f))
    {
        return false;
    }
    let pay = if r.proto == Proto::Ip { d.ip_payload } else { d.l4_payload };
    let h = if d.proto == Some(Proto::Tcp) { http(f, d.l4_payload) } else { Http::default() };
    chain(f, pay, &h, "", &r.detection, pay.0, &Vars::new(), res)
}

/// One (rule, address)'s count, as docs/ids.md describes Snort's thresholds.
#[derive(Clone, Copy)]
struct Window {
    start: u64,
    last: u64,
    count: u64,
    prev: u64,
}

/// Whether the threshold or detection filter of `r` lets its match at
/// `now` (whole seconds, never going back) through.
fn threshold_passes(r: &Rule, d: &Decoded, now: u64, windows: &mut HashMap<(u32, u32), Window>) -> bool {
    let Some(t) = &r.threshold else { return true };
    let (n, s) = (u64::from(t.count), u64::from(t.seconds));
    let w = windows.entry((r.sid, if t.by_dst { d.dst } else { d.src })).and_modify(|w| w.count += 1).or_insert(Window {
        start: now,
        last: now,
        count: 1,
        prev: 0,
    });
    let expired = now - w.start >= s;
    match t.kind {
        ThresholdKind::Limit => {
            if expired {
                (w.start, w.count) = (now, 1);
            }
            w.count <= n
        }
        ThresholdKind::Threshold => {
            if expired {
                (w.start, w.count) = (now, 1);
            }
            let every = w.count >= n;
            if every {
                (w.start, w.count) = (now, 0);
            }
            every
        }
        ThresholdKind::Both => {
            if expired {
                (w.start, w.count) = (now, 1);
                return false;
            }
            w.count == n
        }
        ThresholdKind::DetectionFilter => {
            if expired {
                w.prev = if now - w.last > s { 0 } else { w.count - 1 };
                (w.start, w.count) = (now, 1);
            }
            w.last = now;
            w.count > n || w.prev > n
        }
    }
}

/// Matches the reference's thresholds filtered out, over every check.
static FILTERED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// (packet, sid) alerts and the indices of dropped packets, by the reference.
fn reference(rules: &[Rule], pkts: &[Packet]) -> (BTreeSet<(u64, u32)>, BTreeSet<usize>) {
    let res: HashMap<String, Regex> = rules
        .iter()
        .flat_map(|r| r.detection.iter())
        .filter_map(|m| match m {
            Detection::Pcre(p) => Some((p.text.clone(), regex(p))),
            _ => None,
        })
        .collect();
    let (mut alerts, mut dropped) = (BTreeSet::new(), BTreeSet::new());
    let mut flows = HashMap::new();
    let (mut windows, mut clock) = (HashMap::new(), 0);
    for (i, p) in pkts.iter().enumerate() {
        let Some(d) = decode(&p.data) else { continue };
        let (view, key) = track(&mut flows, &p.data, &d, p.ts.as_nanos() as f64 / 1e9);
        let bits = key.map(|k| flows[&k].bits.clone());
        let hit: Vec<&Rule> = rules.iter().filter(|r| rule_matches(r, &d, view, bits.as_ref(), &p.data, &res)).collect();
        if let Some(k) = key {
            change_flowbits(&hit, rules, &mut flows.get_mut(&k).unwrap().bits);
        }
        // `noalert` rules only change flowbits.
        let hit: Vec<&Rule> = hit.into_iter().filter(|r| !r.flowbits.iter().any(|f| f.op == FlowbitsOp::NoAlert)).collect();
        // Thresholds count every match they see, whatever the others'.
        clock = clock.max(p.ts.as_nanos() / 1_000_000_000);
        let before = hit.len();
        let hit: Vec<&Rule> = hit.into_iter().filter(|r| threshold_passes(r, &d, clock, &mut windows)).collect();
        FILTERED.fetch_add((before - hit.len()) as u64, std::sync::atomic::Ordering::Relaxed);
        if hit.iter().any(|r| r.action == Action::Pass) {
            continue;
        }
        for r in &hit {
            alerts.insert((i as u64 + 1, r.sid));
        }
        if hit.iter().any(|r| r.action == Action::Drop) {
            dropped.insert(i);
        }
    }
    (alerts, dropped)
}

/// Checks one generated rule set and trace; returns the rules that alerted (by the reference).
fn check(seed: u64, nrules: usize, npkts: usize) -> Vec<Rule> {
    let mut r = SplitMix64::new(seed);
    let text = ids_rules(&mut r, nrules);
    let pkts = ids_trace(&mut r, npkts);
    compare(seed, &text, &pkts)
}

/// Checks netvm against the reference on rules `text` over `pkts`;
/// returns the rules that alerted (by the reference).
fn compare(seed: u64, text: &str, pkts: &[Packet]) -> Vec<Rule> {
    let set = parse_rules(text, &HashMap::new());
    assert!(set.skipped.is_empty(), "generated rules that do not parse: {:?}", set.skipped);
    let (compiled, not_compiled) = netvm_ids::compile::select(&set);
    assert!(not_compiled.is_empty() && compiled.len() == set.rules.len(), "generated rules the compiler skips: {not_compiled:?}");
    let alerted = compare_compiled(&format!("seed {seed}"), text, &compiled, pkts);
    assert!(!alerted.is_empty(), "seed {seed}: the trace raised no alert at all: a weak test");
    alerted
}

/// Checks netvm on rules `text` (whose compiled rules are `compiled`:
/// netvm skips the same others) against the reference over `pkts`;
/// returns the rules that alerted (by the reference).
fn compare_compiled(what: &str, text: &str, compiled: &[Rule], pkts: &[Packet]) -> Vec<Rule> {
    let dir = tempfile::tempdir().unwrap();
    let (want, dropped) = reference(compiled, pkts);
    let rules = dir.path().join("rules");
    std::fs::write(&rules, text).unwrap();
    let input = dir.path().join("in.pcap");
    let mut w = PcapWriter::create(&input).unwrap();
    for p in pkts {
        w.write(p).unwrap();
    }
    w.finish().unwrap();
    // Thresholded rules' sids: with several workers, which of their
    // matches a threshold lets through depends on how the workers
    // interleave (the generator puts thresholds on alert rules only, so
    // the rest of the comparison holds).
    let thresholded: BTreeSet<u32> = compiled.iter().filter(|r| r.threshold.is_some()).map(|r| r.sid).collect();
    for (engine, workers) in [("interp", "1"), ("baseline", "1"), ("tiered", "1"), ("jit", "1"), ("jit", "2")] {
        let alerts = dir.path().join(format!("{engine}{workers}.jsonl"));
        let passed = dir.path().join(format!("{engine}{workers}.pcap"));
        let o = Command::new(env!("CARGO_BIN_EXE_netvm"))
            .args(["ids", "--rules", &rules.display().to_string(), "-r", &input.display().to_string()])
            .args(["--alerts", &alerts.display().to_string(), "-w", &passed.display().to_string(), "--engine", engine, "--stats"])
            .args(["--workers", workers])
            .output()
            .unwrap();
        let engine = format!("{engine} with {workers} worker(s)");
        assert!(o.status.success(), "{what} {engine}: {}", String::from_utf8_lossy(&o.stderr));
        let stats: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(stats["faults"], 0, "{what} {engine}: {stats}");
        let mut got = BTreeSet::new();
        for line in std::fs::read_to_string(&alerts).unwrap().lines() {
            let j: serde_json::Value = serde_json::from_str(line).unwrap();
            let (packet, sid) = (j["packet"].as_u64().unwrap(), j["sid"].as_u64().unwrap() as u32);
            let rule = compiled.iter().find(|r| r.sid == sid).unwrap();
            assert_eq!(j["msg"], rule.msg.as_str());
            assert!(got.insert((packet, sid)), "{what} {engine}: ({packet}, {sid}) twice");
        }
        let want: BTreeSet<(u64, u32)> = want.iter().copied().filter(|(_, sid)| workers == "1" || !thresholded.contains(sid)).collect();
        got.retain(|(_, sid)| workers == "1" || !thresholded.contains(sid));
        let missing: Vec<_> = want.difference(&got).take(5).collect();
        let extra: Vec<_> = got.difference(&want).take(5).collect();
        let rule_text = |sid: u32| text.lines().find(|l| l.contains(&format!("sid:{sid};"))).unwrap_or("?").to_string();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{what} {engine}: missing {missing:?}, extra {extra:?} ({} alerts expected); rules:\n{}",
            want.len(),
            missing
                .iter()
                .chain(&extra)
                .map(|(_, sid)| rule_text(*sid))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
                .join("\n")
        );
        let (out, err) = read_capture(&passed, 0);
        assert!(err.is_none());
        let kept: Vec<&Vec<u8>> = pkts.iter().enumerate().filter(|(i, _)| !dropped.contains(i)).map(|(_, p)| &p.data).collect();
        assert_eq!(out.iter().map(|p| &p.data).collect::<Vec<_>>(), kept, "{what} {engine}: passed packets");
    }
    let sids: BTreeSet<u32> = want.iter().map(|(_, sid)| *sid).collect();
    compiled.iter().filter(|r| sids.contains(&r.sid)).cloned().collect()
}

/// The options whose alerts make the comparison meaningful did raise some.
fn assert_coverage(alerted: &[Rule]) {
    let missing = std::cell::RefCell::new(Vec::new());
    let some = |what: &str, f: &dyn Fn(&Rule) -> bool| {
        if !alerted.iter().any(f) {
            missing.borrow_mut().push(what.to_string());
        }
    };
    some("flow:established", &|r| r.flow.as_ref().is_some_and(|f| f.established == Some(true)));
    some("flow:not_established", &|r| r.flow.as_ref().is_some_and(|f| f.established == Some(false)));
    some("flow:to_server", &|r| r.flow.as_ref().is_some_and(|f| f.to_server == Some(true)));
    some("flow:to_client", &|r| r.flow.as_ref().is_some_and(|f| f.to_server == Some(false)));
    some("<>", &|r| r.bidirectional);
    // Rules the prefilter reaches by port (no content, no address key).
    for (what, dst) in [("source", false), ("destination", true)] {
        some(
            &format!("a port key on the {what}"),
            &|r| matches!(netvm_ids::compile::key(r), netvm_ids::compile::Key::Port { dst: d, .. } if d == dst),
        );
    }
    // Rules the prefilter reaches by address (no content): by source, by destination, both ways.
    for (what, dst, both) in [("source", false, false), ("destination", true, false), ("either", false, true)] {
        some(&format!("an address key on the {what}"), &|r| {
            matches!(netvm_ids::compile::key(r), netvm_ids::compile::Key::Addr { dst: d, .. } if d == dst) && r.bidirectional == both
        });
    }
    for (what, op) in
        [("flowbits:isset", FlowbitsOp::IsSet), ("flowbits:isnotset", FlowbitsOp::IsNotSet), ("flowbits:set", FlowbitsOp::Set)]
    {
        some(what, &|r| r.flowbits.iter().any(|f| f.op == op));
    }
    some("isdataat", &|r| r.detection.iter().any(|d| matches!(d, Detection::IsDataAt(_))));
    some("urilen", &|r| r.detection.iter().any(|d| matches!(d, Detection::BufferLen { buffer: Buffer::HttpUri | Buffer::HttpRawUri, .. })));
    for kind in [ThresholdKind::Limit, ThresholdKind::Threshold, ThresholdKind::Both, ThresholdKind::DetectionFilter] {
        some(&format!("{kind:?}"), &|r| r.threshold.as_ref().is_some_and(|t| t.kind == kind));
    }
    for b in ["uri", "header", "method", "client_body", "cookie", "stat_code", "stat_msg", "body"] {
        some(b, &|r| r.detection.iter().any(|d| region_name(d.buffer()) == b));
    }
    some("a pcre in an HTTP buffer", &|r| r.detection.iter().any(|d| matches!(d, Detection::Pcre(p) if p.buffer != Buffer::PktData)));
    fn byte(f: impl Fn(&Detection) -> bool) -> impl Fn(&Rule) -> bool {
        move |r: &Rule| r.detection.iter().any(&f)
    }
    some("byte_test", &byte(|d| matches!(d, Detection::ByteTest(b) if b.string.is_none())));
    some("byte_test on a number in text", &byte(|d| matches!(d, Detection::ByteTest(b) if b.string.is_some())));
    some("a negated byte_test", &byte(|d| matches!(d, Detection::ByteTest(b) if b.negated)));
    some("byte_jump", &byte(|d| matches!(d, Detection::ByteJump(b) if !b.from_beginning && !b.from_end && b.bytes > 0)));
    some("byte_jump from_beginning", &byte(|d| matches!(d, Detection::ByteJump(b) if b.from_beginning)));
    some("byte_jump from_end", &byte(|d| matches!(d, Detection::ByteJump(b) if b.from_end)));
    some("byte_extract", &byte(|d| matches!(d, Detection::ByteExtract(_))));
    some("a content within a variable", &byte(|d| matches!(d, Detection::Content(c) if matches!(c.within, Some(Num::Var(_))))));
    some("a byte_test against a variable", &byte(|d| matches!(d, Detection::ByteTest(b) if matches!(b.value, Num::Var(_)))));
    for name in ["flags", "dsize", "itype", "icode", "ttl", "tos", "id", "ip_proto", "fragbits"] {
        some(name, &|r| r.header.iter().any(|h| h.name() == name));
    }
    let missing = missing.into_inner();
    assert!(missing.is_empty(), "no rule with these alerted (a weak test): {missing:?}");
}

#[test]
fn ids_matches_the_naive_matcher() {
    let mut alerted = Vec::new();
    for seed in 0..3 {
        alerted.extend(check(seed, 60, 400));
    }
    alerted.extend(check(42, 1200, 1500));
    alerted.extend(check(7, 600, 1500));
    alerted.extend(check(12, 2000, 2000));
    assert_coverage(&alerted);
    assert!(FILTERED.load(std::sync::atomic::Ordering::Relaxed) > 0, "no threshold filtered a match out: a weak test");
}

/// Snort 3 forms the generator (Snort 2 syntax) does not write:
/// `bufferlen` (absolute, relative, in sticky HTTP buffers) and
/// modifier lists, on a generated trace.
#[test]
fn snort3_bufferlen_matches_the_naive_matcher() {
    let text = "\
alert tcp any any -> any any (msg:\"short\"; bufferlen:<40; sid:1;)
alert tcp any any -> any any (msg:\"range\"; content:\"GET\"; bufferlen:20<>200; sid:2;)
alert tcp any any -> any any (msg:\"left\"; content:\"HTTP/1\",nocase; bufferlen:>10,relative; sid:3;)
alert tcp any any -> any any (msg:\"uri\"; http_uri; content:\"/\"; bufferlen:<=12; sid:4;)
alert tcp any any -> any any (msg:\"uri left\"; http_uri; content:\"/\"; bufferlen:!5,relative; sid:5;)
alert tcp any any -> any any (msg:\"header\"; http_header; bufferlen:>=30; content:\"Host\"; sid:6;)
alert udp any any -> any any (msg:\"udp\"; bufferlen:0<=>16; sid:7;)
alert tcp any any -> any any (msg:\"urilen\"; urilen:5<>30; sid:8;)
";
    let mut r = SplitMix64::new(5);
    let _ = ids_rules(&mut r, 1);
    let pkts = ids_trace(&mut r, 1500);
    let alerted: BTreeSet<u32> = compare(5, text, &pkts).iter().map(|r| r.sid).collect();
    assert_eq!(alerted, (1..=8).collect(), "every rule must alert somewhere: a weak test");
}

/// The byte options on a payload of known numbers (binary in both byte
/// orders, and in text: decimal with a sign, hex with `0x`, octal, one
/// past 2^32): every form must alert where the numbers are (rules 1 to
/// 17), none where a read fails, negated or not (100 to 102), and all
/// agree with the naive matcher there and on a generated trace.
#[test]
fn byte_options_match_the_naive_matcher() {
    let text = "\
alert tcp any any -> any any (msg:\"le16\"; byte_test:2,=,513,0,little; sid:1;)
alert tcp any any -> any any (msg:\"be16\"; byte_test:2,=,258,0; sid:2;)
alert tcp any any -> any any (msg:\"le24\"; byte_test:3,=,197121,0,little; sid:3;)
alert tcp any any -> any any (msg:\"be32\"; byte_test:4,=,16909060,0,big; sid:4;)
alert tcp any any -> any any (msg:\"dec\"; content:\"len=\"; byte_test:4,=,42,0,relative,string,dec; sid:5;)
alert tcp any any -> any any (msg:\"sign\"; content:\" +\"; byte_test:3,=,17,-1,relative,string,dec; sid:6;)
alert tcp any any -> any any (msg:\"hex\"; content:\" 0x\"; byte_test:4,=,31,-2,relative,string,hex; sid:7;)
alert tcp any any -> any any (msg:\"oct\"; content:\" 0777\"; byte_test:4,=,511,-4,relative,string,oct; sid:8;)
alert tcp any any -> any any (msg:\"clamp\"; content:\" 9999\"; byte_test:10,=,4294967295,-4,relative,string,dec; sid:9;)
alert tcp any any -> any any (msg:\"jump\"; byte_jump:1,0; byte_test:1,=,3,0,relative; sid:10;)
alert tcp any any -> any any (msg:\"from_end\"; byte_jump:0,0,from_end,post_offset -2; content:\"OP\"; distance:0; sid:11;)
alert tcp any any -> any any (msg:\"extract\"; content:\"|05|\"; byte_extract:1,-1,n,relative; isdataat:n,relative; byte_test:1,=,n,-1,relative; sid:12;)
alert tcp any any -> any any (msg:\"bitmask\"; byte_test:1,=,1,1,bitmask 0x0e; sid:13;)
alert tcp any any -> any any (msg:\"multiplier\"; byte_jump:1,0,multiplier 2; byte_test:1,=,4,0,relative; sid:14;)
alert tcp any any -> any any (msg:\"not\"; byte_test:1,!=,9,0; sid:15;)
alert tcp any any -> any any (msg:\"from_beginning\"; byte_jump:1,2,from_beginning; byte_test:1,=,4,0,relative; sid:16;)
alert tcp any any -> any any (msg:\"align\"; byte_jump:1,0,align; byte_test:1,=,0x6c,0,relative; sid:17;)
alert tcp any any -> any any (msg:\"past the end\"; content:\"tail\"; byte_test:2,!=,0,1,relative; sid:100;)
alert tcp any any -> any any (msg:\"before the start\"; byte_test:2,!=,0,-1; sid:101;)
alert tcp any any -> any any (msg:\"no digits\"; content:\" +\"; byte_test:1,!=,0,-2,relative,string,dec; sid:102;)
";
    let payload = b"\x01\x02\x03\x04 len=0042 +17 0x1F 0777 9999999999 \x05ABCDE tailOP";
    let mut pkts: Vec<Packet> = [&payload[..], &[0u8; 52][..]]
        .iter()
        .map(|p| Packet::from_bytes(netvm_traffic::apps::tcp_frame(0x0a00_0001, 0x0a00_0002, 1234, 80, p)))
        .collect();
    let mut r = SplitMix64::new(9);
    let _ = ids_rules(&mut r, 1);
    pkts.extend(ids_trace(&mut r, 800));
    let alerted: BTreeSet<u32> = compare(9, text, &pkts).iter().map(|r| r.sid).collect();
    assert_eq!(
        alerted.iter().copied().filter(|s| *s < 100).collect::<BTreeSet<u32>>(),
        (1..=17).collect(),
        "every rule must alert: a weak test"
    );
    assert!(alerted.iter().all(|s| *s < 100), "a failed read never holds: {alerted:?}");
}

/// The shared test material (../shared/corpus).
const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/corpus");

/// Every Ethernet packet of tcpdump's test captures, in file order.
fn tcpdump_corpus() -> Vec<Packet> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(PathBuf::from(CORPUS).join("tcpdump-tests"))
        .expect("tcpdump's captures in ../shared/corpus/tcpdump-tests")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    files.sort();
    let mut pkts = Vec::new();
    for f in files {
        let Ok(reader) = netvm_io::CaptureReader::open(&f) else { continue };
        if reader.link_type() != Some(1) {
            continue;
        }
        pkts.extend(reader.collect_packets().0);
    }
    pkts
}

/// A public rule set over tcpdump's captures: netvm's alerts and `-w`
/// output are the reference's, for every rule that compiles (netvm skips
/// the others, and so does the comparison).
fn public_rules(what: &str, text: &str, pkts: &[Packet]) -> usize {
    let set = parse_rules(text, &HashMap::new());
    let (compiled, _) = netvm_ids::compile::select(&set);
    assert!(compiled.len() > 1000, "{what}: {} rules compile", compiled.len());
    let alerted = compare_compiled(what, text, &compiled, pkts);
    eprintln!("{what}: {} rules, {} packets, {} rules alerted", compiled.len(), pkts.len(), alerted.len());
    alerted.len()
}

/// Issue 15 §4: the public rule sets that compile, over the tcpdump corpus,
/// against the naive matcher: the Snort 3 community rules whole, and ET
/// open 2017 in four interleaved quarters (one netvm run each).
#[test]
fn public_rules_over_the_tcpdump_corpus_match_the_naive_matcher() {
    let pkts = tcpdump_corpus();
    assert!(pkts.len() > 5000, "{} packets", pkts.len());
    let rules = PathBuf::from(CORPUS).join("rules");
    let snort3 = public_rules("snort3-community", &std::fs::read_to_string(rules.join("snort3-community.rules")).unwrap(), &pkts);
    assert!(snort3 >= 5, "only {snort3} Snort 3 rules alerted: a weak test");
    let mut files: Vec<PathBuf> = std::fs::read_dir(rules.join("et-open-2017"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rules"))
        .collect();
    files.sort();
    let et: String = files.iter().map(|f| std::fs::read_to_string(f).unwrap()).collect::<Vec<_>>().join("\n");
    // Rule lines in four quarters; the other lines (comments, variables) in each.
    let is_rule = |l: &&str| matches!(l.split_whitespace().next(), Some("alert" | "drop" | "pass"));
    let mut alerted = 0;
    for q in 0..4 {
        let text: String =
            et.lines().filter(|l| !is_rule(l)).chain(et.lines().filter(is_rule).skip(q).step_by(4)).map(|l| format!("{l}\n")).collect();
        alerted += public_rules(&format!("et-open-2017 quarter {q}"), &text, &pkts);
    }
    // tcpdump's captures are protocol samples, little of what ET looks for: 3 of its rules alert there.
    assert!(alerted >= 2, "only {alerted} ET rules alerted: a weak test");
}

/// A rule whose chained relative contents would backtrack over every
/// combination of 2,000 occurrences stops at its retry limit: reported on
/// stderr and in `--stats` `uninspected` (`retry_limit`), an error with
/// `--strict`; the packet is still inspected by the other rules (and not
/// dropped), and the same rule still matches where it can.
#[test]
fn uninspected_packets_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("r.rules");
    let chain: String = (0..8).map(|_| "content:\"a\"; distance:0; ").collect();
    std::fs::write(
        &rules,
        format!(
            "alert tcp any any -> any any (msg:\"chain\"; content:\"a\"; {chain}content:\"b\"; distance:0; sid:1;)\n\
             alert tcp any any -> any any (msg:\"plain\"; content:\"zz\"; sid:2;)\n"
        ),
    )
    .unwrap();
    let input = dir.path().join("in.pcap");
    let mut w = PcapWriter::create(&input).unwrap();
    let hostile: Vec<u8> = [vec![b'a'; 2000], b"zz".to_vec()].concat();
    for payload in [hostile, b"zz".to_vec(), b"xaaaaaaaaab".to_vec()] {
        w.write(&Packet::from_bytes(netvm_traffic::apps::tcp_frame(0x0a00_0001, 0x0a00_0002, 1234, 80, &payload))).unwrap();
    }
    w.finish().unwrap();
    let alerts = dir.path().join("a.jsonl");
    let run = |strict: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_netvm"));
        c.args(["ids", "--rules", &rules.display().to_string(), "-r", &input.display().to_string(), "--stats", "--workers", "1"]);
        c.args(["--alerts", &alerts.display().to_string()]);
        if strict {
            c.arg("--strict");
        }
        c.output().unwrap()
    };
    let o = run(false);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("not every packet was fully inspected: 1 rule evaluations stopped by the retry limit"), "{err}");
    let stats: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(stats["uninspected"], serde_json::json!({"retry_limit": 1}), "{stats}");
    assert_eq!(stats["faults"], 0, "{stats}");
    let got: Vec<(u64, u64)> = std::fs::read_to_string(&alerts)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|j| (j["packet"].as_u64().unwrap(), j["sid"].as_u64().unwrap()))
        .collect();
    assert_eq!(got, [(1, 2), (2, 2), (3, 1)], "the hostile packet is inspected by the other rule");
    assert_eq!(run(true).status.code(), Some(1));
}

#[test]
fn sample_rules_and_skipped_lines() {
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/ids"));
    let dir = tempfile::tempdir().unwrap();
    let alerts = dir.path().join("a.jsonl");
    let o = Command::new(env!("CARGO_BIN_EXE_netvm"))
        .args(["ids", "--rules", &root.join("sample.rules").display().to_string()])
        .args(["-r", &root.join("sample.pcap").display().to_string(), "--alerts", &alerts.display().to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("sample.rules:") && err.contains("(skipped)"), "skipped rules are reported with their line: {err}");
    assert!(!std::fs::read_to_string(&alerts).unwrap().is_empty());
}

#[test]
fn check_lists_every_rule_and_the_skips_by_option() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("r.rules");
    std::fs::write(
        &rules,
        "alert tcp any any -> any 80 (msg:\"a\"; content:\"GET\"; sid:1;)\n\
         alert tcp any any -> any any (msg:\"b\"; flow:established,to_server; content:\"x\",nocase; sid:2;)\n\
         alert tcp any any -> any any (msg:\"c\"; dce_iface:uuid 1-2; sid:3;)\n\
         alert tcp any any -> any any (msg:\"d\"; flowbits:isset,x; threshold:type limit,track by_src,count 1,seconds 60; sid:4;)\n\
         alert tcp any any -> any any (msg:\"e\"; flow:only_stream; sid:5;)\n\
         alert tcp any any <> any 80 (msg:\"f\"; flow:to_client; dsize:>10; flags:PA; sid:6;)\n\
         alert tcp any any -> any 80 (msg:\"g\"; file_data; js_data; content:\"eval(\"; sid:7;)\n",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_netvm")).args(["ids", "--rules", &rules.display().to_string(), "--check"]).output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{err}");
    assert!(err.contains("netvm: 4 rules compiled, 3 skipped"), "{err}");
    let name = rules.display().to_string();
    for line in [
        format!("{name}:1: sid 1: compiled"),
        format!("{name}:2: sid 2: compiled"),
        format!("{name}:3: sid 3: skipped: dce_iface: "),
        format!("{name}:4: sid 4: compiled"),
        format!("{name}:5: sid 5: skipped: flow: option flow: only_stream: netvm reassembles no streams"),
        format!("{name}:6: sid 6: compiled"),
        format!("{name}:7: sid 7: skipped: js_data: option js_data (no JavaScript normalisation): not supported by the compiler yet"),
        "skipped by option, not parsed:\n       1 dce_iface\n".to_string(),
        "skipped by option, not compiled yet:\n       1 flow\n       1 js_data\n".to_string(),
    ] {
        assert!(out.contains(&line), "missing `{line}` in\n{out}");
    }
}
