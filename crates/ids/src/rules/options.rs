//! One rule: its header and its options, in either syntax.

use std::collections::HashMap;

// The content syntax is the string-matching coprocessor's pattern syntax.
use netvm_copro::strmatch::parse_content_body;

use super::header::{expand, parse_addr, parse_port};
use super::{
    Action, AddrExpr, BitsMode, Buffer, ByteExtract, ByteJump, ByteOp, ByteTest, Content, Detection, Endian, FastPattern, Flow, Flowbits,
    FlowbitsOp, HeaderCheck, IntCheck, IsDataAt, Num, NumBase, Pcre, PortExpr, Proto, Rule, Syntax, Threshold, ThresholdKind, Why,
    MAX_CONTENT, MAX_DETECTION,
};

type Opts = Vec<(String, Option<String>)>;

/// Options that only Snort 3 has (their presence makes a rule Snort 3).
const SNORT3_ONLY: [&str; 8] =
    ["service", "bufferlen", "raw_data", "js_data", "http_raw_body", "http_version", "http_raw_request", "http_raw_status"];

/// Parses one rule; on failure, the rule's sid (if it could be read) and why.
pub fn parse_rule(text: &str, vars: &HashMap<String, String>) -> Result<Rule, (Option<u32>, Why)> {
    let open = super::options_start(text).ok_or((None, Why::new("header", "no option list `( … )`")))?;
    let close = text.rfind(')').filter(|c| *c > open).ok_or((None, Why::new("header", "the option list is not closed with `)`")))?;
    let opts = split_options(&text[open + 1..close]).map_err(|w| (None, w))?;
    let sid = opts.iter().find(|(k, _)| k == "sid").and_then(|(_, v)| v.as_deref()).and_then(|v| v.trim().parse::<u32>().ok());
    let fail = |w: Why| (sid, w);
    if !text[close + 1..].trim().is_empty() {
        return Err(fail(Why::new("header", format!("text after the option list: `{}`", text[close + 1..].trim()))));
    }
    let mut rule = parse_header(&text[..open], vars).map_err(fail)?;
    rule.syntax = detect_syntax(&opts);
    let mut st = State { buffer: Buffer::PktData, last_content: None, extracted: Vec::new() };
    let mut sid = None;
    for (key, value) in &opts {
        option(&mut rule, &mut st, key, value.as_deref(), &mut sid).map_err(fail)?;
    }
    if rule.detection.len() > MAX_DETECTION {
        return Err(fail(Why::new("rule", format!("more than {MAX_DETECTION} detection options"))));
    }
    for d in &rule.detection {
        if let Detection::Content(c) = d {
            check_content(c).map_err(fail)?;
        }
    }
    rule.sid = sid.ok_or_else(|| fail(Why::new("sid", "no `sid`")))?;
    Ok(rule)
}

/// Parser state across a rule's options.
struct State {
    /// The sticky buffer.
    buffer: Buffer,
    /// The content Snort 2 modifiers apply to (index in `detection`).
    last_content: Option<usize>,
    /// `byte_extract` variables defined so far.
    extracted: Vec<String>,
}

fn parse_header(h: &str, vars: &HashMap<String, String>) -> Result<Rule, Why> {
    let words: Vec<&str> = h.split_whitespace().collect();
    let action = match words.first().copied() {
        Some("alert") => Action::Alert,
        Some("drop") => Action::Drop,
        Some("pass") => Action::Pass,
        Some(a) => return Err(Why::new("action", format!("unsupported action `{a}` (alert, drop, pass)"))),
        None => return Err(Why::new("header", "no action")),
    };
    let mut rule = Rule {
        line: 0,
        file: 0,
        syntax: Syntax::Snort2,
        action,
        proto: Proto::Ip,
        header_service: None,
        src: AddrExpr::Any,
        sport: PortExpr::Any,
        bidirectional: false,
        dst: AddrExpr::Any,
        dport: PortExpr::Any,
        msg: String::new(),
        sid: 0,
        gid: 1,
        rev: 1,
        classtype: None,
        priority: None,
        references: Vec::new(),
        metadata: Vec::new(),
        tag: None,
        flow: None,
        header: Vec::new(),
        detection: Vec::new(),
        flowbits: Vec::new(),
        threshold: None,
        service: Vec::new(),
    };
    if words.len() == 1 {
        return Ok(rule);
    }
    if words.len() != 2 && words.len() != 7 {
        return Err(Why::new(
            "header",
            format!("the header needs 7 fields (ACTION PROTO SRC SPORT -> DST DPORT), or ACTION [SERVICE]; found {}", words.len()),
        ));
    }
    rule.proto = match words[1] {
        "tcp" => Proto::Tcp,
        "udp" => Proto::Udp,
        "icmp" => Proto::Icmp,
        "ip" => Proto::Ip,
        s if s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-') => {
            // A Snort 3 service rule: the service decides, on any transport.
            rule.header_service = Some(s.to_string());
            rule.service.push(s.to_string());
            Proto::Ip
        }
        p => return Err(Why::new("header", format!("unsupported protocol `{p}` (tcp, udp, icmp, ip, or a service)"))),
    };
    if words.len() == 2 {
        return Ok(rule);
    }
    rule.bidirectional = match words[4] {
        "->" => false,
        "<>" => true,
        d => return Err(Why::new("header", format!("expected `->` or `<>`, found `{d}`"))),
    };
    rule.src = parse_addr(&expand(words[2], vars)?, 0)?;
    rule.sport = parse_port(&expand(words[3], vars)?, 0)?;
    rule.dst = parse_addr(&expand(words[5], vars)?, 0)?;
    rule.dport = parse_port(&expand(words[6], vars)?, 0)?;
    Ok(rule)
}

/// Snort 3 when a content has a modifier list, a Snort-3-only option
/// appears, or an HTTP buffer keyword comes before any detection option.
fn detect_syntax(opts: &Opts) -> Syntax {
    let mut seen_detection = false;
    for (k, v) in opts {
        let k = k.as_str();
        if SNORT3_ONLY.contains(&k) {
            return Syntax::Snort3;
        }
        match k {
            "content" | "uricontent" => {
                if v.as_deref().is_some_and(|v| split_quoted(v).is_ok_and(|(_, _, rest)| !rest.trim().is_empty())) {
                    return Syntax::Snort3;
                }
                seen_detection = true;
            }
            "pcre" | "byte_test" | "byte_jump" | "byte_extract" | "isdataat" => seen_detection = true,
            _ if k.starts_with("http_") && !seen_detection => return Syntax::Snort3,
            _ => {}
        }
    }
    Syntax::Snort2
}

/// Applies one option to the rule.
fn option(rule: &mut Rule, st: &mut State, key: &str, value: Option<&str>, sid: &mut Option<u32>) -> Result<(), Why> {
    let need = || value.map(str::trim).ok_or_else(|| Why::new(key, format!("`{key}` needs a value")));
    let no_value = || match value {
        Some(v) => Err(Why::new(key, format!("`{key}` takes no value (found `{v}`)"))),
        None => Ok(()),
    };
    match key {
        "msg" => rule.msg = unquote(need()?).map_err(|e| Why::new(key, e))?,
        "sid" => *sid = Some(uint(key, need()?)?),
        "gid" => rule.gid = uint(key, need()?)?,
        "rev" => rule.rev = uint(key, need()?)?,
        "priority" => rule.priority = Some(uint(key, need()?)?),
        "classtype" => rule.classtype = Some(need()?.to_string()),
        "reference" => rule.references.push(need()?.to_string()),
        "metadata" => {
            let v = need()?;
            for item in v.split(',') {
                let mut w = item.split_whitespace();
                if let (Some("service"), Some(s)) = (w.next(), w.next()) {
                    rule.service.push(s.to_string());
                }
            }
            rule.metadata.push(v.to_string());
        }
        "service" => rule.service.extend(need()?.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty())),
        "tag" => rule.tag = Some(need()?.to_string()),
        "rem" => {}
        "flow" => {
            if rule.flow.is_some() {
                return Err(Why::new(key, "more than one `flow`"));
            }
            rule.flow = Some(parse_flow(need()?)?);
        }
        "flags" => rule.header.push(parse_flags(need()?)?),
        "fragbits" => rule.header.push(parse_fragbits(need()?)?),
        "sameip" => {
            no_value()?;
            rule.header.push(HeaderCheck::SameIp)
        }
        "dsize" | "itype" | "icode" | "icmp_id" | "icmp_seq" | "ttl" | "tos" | "id" | "ip_proto" | "fragoffset" | "seq" | "ack"
        | "window" => {
            let v = need()?;
            let check = if key == "ip_proto" { parse_ip_proto(v)? } else { int_check(key, v, rule.syntax)? };
            rule.header.push(match key {
                "dsize" => HeaderCheck::Dsize(check),
                "itype" => HeaderCheck::Itype(check),
                "icode" => HeaderCheck::Icode(check),
                "icmp_id" => HeaderCheck::IcmpId(check),
                "icmp_seq" => HeaderCheck::IcmpSeq(check),
                "ttl" => HeaderCheck::Ttl(check),
                "tos" => HeaderCheck::Tos(check),
                "id" => HeaderCheck::Id(check),
                "ip_proto" => HeaderCheck::IpProto(check),
                "fragoffset" => HeaderCheck::Fragoffset(check),
                "seq" => HeaderCheck::Seq(check),
                "ack" => HeaderCheck::Ack(check),
                _ => HeaderCheck::Window(check),
            });
        }
        "content" | "uricontent" => {
            let mut c = parse_content(key, need()?, st)?;
            if key == "uricontent" {
                c.buffer = Buffer::HttpUri;
            }
            rule.detection.push(Detection::Content(c));
            st.last_content = Some(rule.detection.len() - 1);
        }
        "nocase" | "rawbytes" | "depth" | "offset" | "distance" | "within" | "fast_pattern" => {
            let c = last_content(rule, st, key)?;
            match key {
                "nocase" => {
                    no_value()?;
                    c.nocase = true
                }
                "rawbytes" => {
                    no_value()?;
                    c.buffer = Buffer::Raw
                }
                "fast_pattern" => c.fast_pattern = Some(parse_fast_pattern(value)?),
                _ => content_modifier(c, key, need()?, &st.extracted)?,
            }
        }
        "pcre" => {
            let v = need()?;
            let (negated, v) = match v.strip_prefix('!') {
                Some(rest) => (true, rest.trim_start()),
                None => (false, v),
            };
            let (text, _, rest) = split_quoted(v).map_err(|e| Why::new(key, e))?;
            if !rest.trim().is_empty() {
                return Err(Why::new(key, format!("text after the pattern: `{}`", rest.trim())));
            }
            let mut p = parse_pcre(text).map_err(|e| Why::new(key, e))?;
            p.negated = negated;
            if p.buffer == Buffer::PktData {
                p.buffer = st.buffer;
            }
            rule.detection.push(Detection::Pcre(p));
        }
        "byte_test" => rule.detection.push(Detection::ByteTest(parse_byte_test(need()?, st)?)),
        "byte_jump" => rule.detection.push(Detection::ByteJump(parse_byte_jump(need()?, st)?)),
        "byte_extract" => {
            let b = parse_byte_extract(need()?, st)?;
            st.extracted.push(b.name.clone());
            rule.detection.push(Detection::ByteExtract(b));
        }
        "isdataat" => rule.detection.push(Detection::IsDataAt(parse_isdataat(need()?, st)?)),
        "bufferlen" | "urilen" => {
            let v = need()?;
            let mut parts = v.split(',').map(str::trim);
            let check = int_check(key, parts.next().unwrap_or(""), rule.syntax)?;
            let (mut relative, mut buffer) = (false, if key == "urilen" { Buffer::HttpUri } else { st.buffer });
            for p in parts {
                match (key, p) {
                    ("bufferlen", "relative") => relative = true,
                    ("urilen", "norm") => buffer = Buffer::HttpUri,
                    ("urilen", "raw") => buffer = Buffer::HttpRawUri,
                    _ => return Err(Why::new(key, format!("unknown `{key}` argument `{p}`"))),
                }
            }
            rule.detection.push(Detection::BufferLen { check, relative, buffer });
        }
        "flowbits" => rule.flowbits.push(parse_flowbits(need()?)?),
        "threshold" | "detection_filter" => {
            if rule.threshold.is_some() {
                return Err(Why::new(key, "more than one `threshold`/`detection_filter`"));
            }
            rule.threshold = Some(parse_threshold(key, need()?)?);
        }
        _ => match Buffer::from_name(key) {
            Some(b) => buffer_keyword(rule, st, key, b, value)?,
            None => {
                let hint = if key == "base64_data" { " (needs base64_decode)" } else { "" };
                return Err(Why::new(key, format!("option `{key}` is not part of the rule language netvm parses{hint}")));
            }
        },
    }
    Ok(())
}

/// A buffer keyword: a Snort 3 sticky buffer, a Snort 2 sticky buffer
/// (`file_data`, `pkt_data`), or a Snort 2 HTTP content modifier.
fn buffer_keyword(rule: &mut Rule, st: &mut State, key: &str, b: Buffer, value: Option<&str>) -> Result<(), Why> {
    if let Some(v) = value {
        // Snort 2 `file_data:mime`; Snort 3 `http_header:field x` and similar are not supported.
        if !(key == "file_data" && v.trim() == "mime") {
            return Err(Why::new(key, format!("`{key}:{}`: arguments to a buffer are not supported", v.trim())));
        }
    }
    if rule.syntax == Syntax::Snort2 && b.is_http() {
        let c = last_content(rule, st, key)?;
        c.buffer = b;
    } else {
        st.buffer = b;
        st.last_content = None;
    }
    Ok(())
}

fn last_content<'r>(rule: &'r mut Rule, st: &State, key: &str) -> Result<&'r mut Content, Why> {
    match st.last_content.and_then(|i| rule.detection.get_mut(i)) {
        Some(Detection::Content(c)) => Ok(c),
        _ => Err(Why::new(key, format!("`{key}` does not follow a content"))),
    }
}

fn parse_content(key: &str, v: &str, st: &State) -> Result<Content, Why> {
    let (negated, v) = match v.strip_prefix('!') {
        Some(rest) => (true, rest.trim_start()),
        None => (false, v),
    };
    let (body, _, rest) = split_quoted(v).map_err(|e| Why::new(key, e))?;
    let bytes = parse_content_body(body).map_err(|e| Why::new(key, e))?;
    if bytes.is_empty() {
        return Err(Why::new(key, "empty content"));
    }
    if bytes.len() > MAX_CONTENT {
        return Err(Why::new(key, format!("content longer than {MAX_CONTENT} bytes")));
    }
    let mut c = Content::new(bytes);
    c.negated = negated;
    c.buffer = st.buffer;
    let rest = rest.trim();
    if rest.is_empty() {
        return Ok(c);
    }
    // Snort 3: `,nocase,depth 4,fast_pattern,...`
    let rest = rest.strip_prefix(',').ok_or_else(|| Why::new(key, format!("text after the content: `{rest}`")))?;
    let mut fp_offset = None;
    let mut fp_length = None;
    for item in rest.split(',').map(str::trim) {
        let (k, arg) = match item.split_once(char::is_whitespace) {
            Some((k, a)) => (k, Some(a.trim())),
            None => (item, None),
        };
        match (k, arg) {
            ("nocase", None) => c.nocase = true,
            ("fast_pattern", None) => c.fast_pattern = Some(c.fast_pattern.take().unwrap_or_default()),
            ("fast_pattern_offset", Some(a)) => fp_offset = Some(bounded(k, a, 0, 65535)? as u16),
            ("fast_pattern_length", Some(a)) => fp_length = Some(bounded(k, a, 1, 65535)? as u16),
            ("offset" | "depth" | "distance" | "within", Some(a)) => content_modifier(&mut c, k, a, &st.extracted)?,
            _ => return Err(Why::new(k, format!("unknown content modifier `{item}`"))),
        }
    }
    if fp_offset.is_some() || fp_length.is_some() {
        let len = c.bytes.len() as u16;
        let off = fp_offset.unwrap_or(0);
        let fp = c.fast_pattern.get_or_insert_with(FastPattern::default);
        fp.slice = Some((off, fp_length.unwrap_or(len.saturating_sub(off))));
    }
    Ok(c)
}

/// `offset`, `depth`, `distance`, `within` of a content (a number or a `byte_extract` variable).
fn content_modifier(c: &mut Content, key: &str, v: &str, extracted: &[String]) -> Result<(), Why> {
    let (lo, hi) = if matches!(key, "offset" | "distance") { (-65535, 65535) } else { (0, 65535) };
    let n = num_or_var(key, v, lo, hi, extracted)?;
    let slot = match key {
        "offset" => &mut c.offset,
        "depth" => &mut c.depth,
        "distance" => &mut c.distance,
        _ => &mut c.within,
    };
    if slot.is_some() {
        return Err(Why::new(key, format!("`{key}` given twice for one content")));
    }
    *slot = Some(n);
    Ok(())
}

/// The checks Snort makes once a content has all its modifiers.
fn check_content(c: &Content) -> Result<(), Why> {
    if (c.offset.is_some() || c.depth.is_some()) && c.relative() {
        let k = if c.offset.is_some() { "offset" } else { "depth" };
        return Err(Why::new(k, "a content cannot have both offset/depth and distance/within"));
    }
    for (k, v) in [("depth", &c.depth), ("within", &c.within)] {
        if let Some(Num::Lit(n)) = v {
            if (*n as usize) < c.bytes.len() {
                return Err(Why::new(k, format!("`{k}:{n}` is shorter than its content ({} bytes)", c.bytes.len())));
            }
        }
    }
    if c.fast_pattern.as_ref().is_some_and(|f| f.only) && (c.negated || c.relative() || c.offset.is_some() || c.depth.is_some()) {
        return Err(Why::new("fast_pattern", "`fast_pattern:only` on a negated or positioned content"));
    }
    Ok(())
}

fn parse_fast_pattern(v: Option<&str>) -> Result<FastPattern, Why> {
    let Some(v) = v.map(str::trim) else { return Ok(FastPattern::default()) };
    if v == "only" {
        return Ok(FastPattern { only: true, slice: None });
    }
    let bad = || Why::new("fast_pattern", format!("`fast_pattern:{v}`: expected `only` or OFFSET,LENGTH"));
    let (o, l) = v.split_once(',').ok_or_else(bad)?;
    let o = o.trim().parse::<u16>().map_err(|_| bad())?;
    let l = l.trim().parse::<u16>().ok().filter(|l| *l > 0).ok_or_else(bad)?;
    Ok(FastPattern { only: false, slice: Some((o, l)) })
}

/// `/pattern/flags` (the text between the option's quotes, kept exactly),
/// parsed by the `regex` coprocessor's own parser; the buffer flags choose
/// the rule's buffer.
pub fn parse_pcre(v: &str) -> Result<Pcre, String> {
    let spec = netvm_copro::regex::parse_pcre(v)?;
    let buffer = match (spec.rawbytes, spec.buffer) {
        (true, Some(_)) => return Err(format!("pcre `{v}`: flag `B` and an HTTP buffer flag name two buffers")),
        (true, None) => Buffer::Raw,
        (false, Some(http)) => Buffer::of_http(http),
        (false, None) => Buffer::PktData,
    };
    Ok(Pcre { text: v.to_string(), spec, negated: false, buffer })
}

fn parse_flow(v: &str) -> Result<Flow, Why> {
    let mut f = Flow::default();
    for w in v.split(',').map(str::trim) {
        match w {
            "established" => f.established = Some(true),
            "not_established" => f.established = Some(false),
            "stateless" => f.stateless = true,
            "to_server" | "from_client" => f.to_server = Some(true),
            "to_client" | "from_server" => f.to_server = Some(false),
            "only_stream" => f.stream = Some(true),
            "no_stream" => f.stream = Some(false),
            "only_frag" => f.frag = Some(true),
            "no_frag" => f.frag = Some(false),
            _ => return Err(Why::new("flow", format!("unknown `flow` keyword `{w}`"))),
        }
    }
    Ok(f)
}

/// Splits `[+*!]BITS[+*!][,MASK]` into its bits (through `bit`) and mode.
fn bit_mode(key: &str, v: &str, bit: impl Fn(char) -> Option<u16>) -> Result<(u16, BitsMode, u16), Why> {
    let (main, mask) = match v.split_once(',') {
        Some((m, k)) => (m.trim(), Some(k.trim())),
        None => (v.trim(), None),
    };
    let (mut bits, mut mode) = (0u16, BitsMode::Exact);
    for c in main.chars() {
        match c {
            '+' => mode = BitsMode::All,
            '*' => mode = BitsMode::Any,
            '!' => mode = BitsMode::Not,
            _ => bits |= bit(c).ok_or_else(|| Why::new(key, format!("unknown `{key}` bit `{c}` in `{v}`")))?,
        }
    }
    let mut m = 0;
    for c in mask.unwrap_or("").chars() {
        m |= bit(c).ok_or_else(|| Why::new(key, format!("unknown `{key}` mask bit `{c}` in `{v}`")))?;
    }
    Ok((bits, mode, m))
}

fn parse_flags(v: &str) -> Result<HeaderCheck, Why> {
    let bit = |c: char| match c {
        'F' => Some(0x01),
        'S' => Some(0x02),
        'R' => Some(0x04),
        'P' => Some(0x08),
        'A' => Some(0x10),
        'U' => Some(0x20),
        'E' | '2' => Some(0x40),
        'C' | '1' => Some(0x80),
        '0' => Some(0),
        _ => None,
    };
    let (bits, mode, mask) = bit_mode("flags", v, bit)?;
    Ok(HeaderCheck::Flags { bits: bits as u8, mode, mask: mask as u8 })
}

fn parse_fragbits(v: &str) -> Result<HeaderCheck, Why> {
    let bit = |c: char| match c {
        'M' => Some(0x2000),
        'D' => Some(0x4000),
        'R' => Some(0x8000),
        _ => None,
    };
    let (bits, mode, mask) = bit_mode("fragbits", v, bit)?;
    if mask != 0 {
        return Err(Why::new("fragbits", "`fragbits` has no mask"));
    }
    Ok(HeaderCheck::Fragbits { bits, mode })
}

/// `ip_proto:[!<>]N` or a protocol name.
fn parse_ip_proto(v: &str) -> Result<IntCheck, Why> {
    let (prefix, name) = match v.find(|c: char| c.is_ascii_alphanumeric()) {
        Some(i) => (&v[..i], &v[i..]),
        None => ("", v),
    };
    let number = match name.to_ascii_lowercase().as_str() {
        "icmp" => "1",
        "igmp" => "2",
        "ipip" => "4",
        "tcp" => "6",
        "udp" => "17",
        "ipv6" => "41",
        "gre" => "47",
        "esp" => "50",
        "ah" => "51",
        "icmpv6" | "ipv6-icmp" => "58",
        "pim" => "103",
        "sctp" => "132",
        _ => name,
    };
    let check = int_check("ip_proto", &format!("{prefix}{number}"), super::Syntax::Snort2)?;
    Ok(check)
}

/// An integer comparison. `<>` is exclusive, except Snort 2's `dsize` and
/// `urilen`, where it is inclusive; `<=>` (Snort 3) is inclusive; Snort 2
/// `ttl` also has `A-B`, `-B` and `A-`.
fn int_check(key: &str, v: &str, syntax: Syntax) -> Result<IntCheck, Why> {
    let v = v.trim();
    let n = |s: &str| parse_int(s.trim()).ok_or_else(|| Why::new(key, format!("`{key}:{v}`: not a number")));
    let incl = syntax == Syntax::Snort2 && matches!(key, "dsize" | "urilen");
    if let Some((a, b)) = v.split_once("<=>") {
        return Ok(IntCheck::BetweenIncl(n(a)?, n(b)?));
    }
    if let Some((a, b)) = v.split_once("<>") {
        let (a, b) = (n(a)?, n(b)?);
        return Ok(if incl { IntCheck::BetweenIncl(a, b) } else { IntCheck::Between(a, b) });
    }
    if key == "ttl" && syntax == Syntax::Snort2 {
        if let Some((a, b)) = v.split_once('-') {
            return Ok(match (a.trim(), b.trim()) {
                ("", b) => IntCheck::Le(n(b)?),
                (a, "") => IntCheck::Ge(n(a)?),
                (a, b) => IntCheck::BetweenIncl(n(a)?, n(b)?),
            });
        }
    }
    for (p, f) in [
        ("<=", IntCheck::Le as fn(i64) -> IntCheck),
        (">=", IntCheck::Ge),
        ("!=", IntCheck::Ne),
        ("<", IntCheck::Lt),
        (">", IntCheck::Gt),
        ("=", IntCheck::Eq),
        ("!", IntCheck::Ne),
    ] {
        if let Some(rest) = v.strip_prefix(p) {
            return Ok(f(n(rest)?));
        }
    }
    Ok(IntCheck::Eq(n(v)?))
}

/// A decimal or `0x` hexadecimal integer, possibly negative.
fn parse_int(s: &str) -> Option<i64> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let n = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => i64::from_str_radix(h, 16).ok()?,
        None if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s.parse::<i64>().ok()?,
        None => return None,
    };
    Some(if neg { -n } else { n })
}

fn uint(key: &str, v: &str) -> Result<u32, Why> {
    v.trim().parse::<u32>().map_err(|_| Why::new(key, format!("`{key}:{v}`: not a number (0 to 4294967295)")))
}

fn bounded(key: &str, v: &str, lo: i64, hi: i64) -> Result<i64, Why> {
    parse_int(v.trim())
        .filter(|n| (lo..=hi).contains(n))
        .ok_or_else(|| Why::new(key, format!("`{key}` value `{v}` is not a number from {lo} to {hi}")))
}

/// A number in `lo..=hi`, or the name of a `byte_extract` variable defined before.
fn num_or_var(key: &str, v: &str, lo: i64, hi: i64, extracted: &[String]) -> Result<Num, Why> {
    let v = v.trim();
    if v.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') && !v.starts_with("0x") {
        if extracted.iter().any(|e| e == v) {
            return Ok(Num::Var(v.to_string()));
        }
        return Err(Why::new(key, format!("`{key}`: `{v}` is not a number nor a byte_extract variable defined before")));
    }
    bounded(key, v, lo, hi).map(Num::Lit)
}

/// The common trailing arguments of the byte options.
#[derive(Default)]
struct ByteArgs {
    relative: bool,
    endian: Endian,
    string: Option<NumBase>,
    bitmask: Option<u32>,
    multiplier: Option<u32>,
    align: u8,
    from_beginning: bool,
    from_end: bool,
    post_offset: Option<Num>,
    rawbytes: bool,
}

fn byte_args(key: &str, items: &[&str], allowed: &[&str], extracted: &[String]) -> Result<ByteArgs, Why> {
    let mut a = ByteArgs::default();
    for item in items {
        let (k, arg) = match item.split_once(char::is_whitespace) {
            Some((k, v)) => (k, Some(v.trim())),
            None => (*item, None),
        };
        if !allowed.contains(&k) {
            return Err(Why::new(key, format!("unknown `{key}` argument `{item}`")));
        }
        let need = || arg.ok_or_else(|| Why::new(key, format!("`{k}` needs a value in `{key}`")));
        match k {
            "relative" => a.relative = true,
            "big" => a.endian = Endian::Big,
            "little" => a.endian = Endian::Little,
            "dce" => a.endian = Endian::Dce,
            "string" => a.string = Some(a.string.unwrap_or(NumBase::Dec)),
            "hex" => a.string = Some(NumBase::Hex),
            "dec" => a.string = Some(NumBase::Dec),
            "oct" => a.string = Some(NumBase::Oct),
            "bitmask" => a.bitmask = Some(bounded(key, need()?, 1, u32::MAX.into())? as u32),
            "multiplier" => a.multiplier = Some(bounded(key, need()?, 1, 65535)? as u32),
            "align" => a.align = arg.map_or(Ok(4), |v| bounded(key, v, 0, 4))? as u8,
            "from_beginning" => a.from_beginning = true,
            "from_end" => a.from_end = true,
            "post_offset" => a.post_offset = Some(num_or_var(key, need()?, -65535, 65535, extracted)?),
            "rawbytes" => a.rawbytes = true,
            _ => unreachable!("every allowed argument is handled"),
        }
        if arg.is_some() && !matches!(k, "bitmask" | "multiplier" | "align" | "post_offset") {
            return Err(Why::new(key, format!("`{k}` takes no value in `{key}`")));
        }
    }
    Ok(a)
}

const COMMON_BYTE_ARGS: [&str; 9] = ["relative", "big", "little", "dce", "string", "hex", "dec", "oct", "bitmask"];

fn items(v: &str) -> Vec<&str> {
    v.split(',').map(str::trim).collect()
}

fn check_width(key: &str, bytes: i64, string: bool) -> Result<(), Why> {
    if !string && bytes > 4 {
        return Err(Why::new(key, format!("`{key}` reads {bytes} bytes: more than 4 needs `string`")));
    }
    Ok(())
}

fn parse_byte_test(v: &str, st: &State) -> Result<ByteTest, Why> {
    let key = "byte_test";
    let it = items(v);
    if it.len() < 4 {
        return Err(Why::new(key, "`byte_test` needs BYTES, OPERATOR, VALUE, OFFSET"));
    }
    let bytes = bounded(key, it[0], 1, 10)?;
    let (negated, op) = match it[1].strip_prefix('!') {
        Some(o) => (true, o.trim()),
        None => (false, it[1]),
    };
    let op = match op {
        "<" => ByteOp::Lt,
        ">" => ByteOp::Gt,
        "<=" => ByteOp::Le,
        ">=" => ByteOp::Ge,
        "=" => ByteOp::Eq,
        // Older Snort 2: a lone `!` is "not equal".
        "" if negated => ByteOp::Eq,
        "&" => ByteOp::And,
        "^" => ByteOp::Xor,
        o => return Err(Why::new(key, format!("unknown `byte_test` operator `{o}`"))),
    };
    let value = num_or_var(key, it[2], 0, u32::MAX.into(), &st.extracted)?;
    let offset = num_or_var(key, it[3], -65535, 65535, &st.extracted)?;
    let a = byte_args(key, &it[4..], &COMMON_BYTE_ARGS, &st.extracted)?;
    check_width(key, bytes, a.string.is_some())?;
    Ok(ByteTest {
        bytes: bytes as u8,
        negated,
        op,
        value,
        offset,
        relative: a.relative,
        endian: a.endian,
        string: a.string,
        bitmask: a.bitmask,
        buffer: st.buffer,
    })
}

fn parse_byte_jump(v: &str, st: &State) -> Result<ByteJump, Why> {
    let key = "byte_jump";
    let it = items(v);
    if it.len() < 2 {
        return Err(Why::new(key, "`byte_jump` needs BYTES, OFFSET"));
    }
    let bytes = bounded(key, it[0], 0, 10)?;
    let offset = num_or_var(key, it[1], -65535, 65535, &st.extracted)?;
    let mut allowed = COMMON_BYTE_ARGS.to_vec();
    allowed.extend(["multiplier", "align", "from_beginning", "from_end", "post_offset"]);
    let a = byte_args(key, &it[2..], &allowed, &st.extracted)?;
    check_width(key, bytes, a.string.is_some())?;
    Ok(ByteJump {
        bytes: bytes as u8,
        offset,
        relative: a.relative,
        multiplier: a.multiplier,
        endian: a.endian,
        string: a.string,
        align: a.align,
        from_beginning: a.from_beginning,
        from_end: a.from_end,
        post_offset: a.post_offset,
        bitmask: a.bitmask,
        buffer: st.buffer,
    })
}

fn parse_byte_extract(v: &str, st: &State) -> Result<ByteExtract, Why> {
    let key = "byte_extract";
    let it = items(v);
    if it.len() < 3 {
        return Err(Why::new(key, "`byte_extract` needs BYTES, OFFSET, NAME"));
    }
    let bytes = bounded(key, it[0], 1, 10)?;
    let offset = bounded(key, it[1], -65535, 65535)? as i32;
    let name = it[2];
    if !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
    {
        return Err(Why::new(key, format!("`{name}` is not a variable name")));
    }
    let mut allowed = COMMON_BYTE_ARGS.to_vec();
    allowed.extend(["multiplier", "align"]);
    let a = byte_args(key, &it[3..], &allowed, &st.extracted)?;
    check_width(key, bytes, a.string.is_some())?;
    if !matches!(a.align, 0 | 2 | 4) {
        return Err(Why::new(key, format!("`byte_extract` aligns to 2 or 4 bytes, not {}", a.align)));
    }
    Ok(ByteExtract {
        bytes: bytes as u8,
        offset,
        name: name.to_string(),
        relative: a.relative,
        multiplier: a.multiplier,
        endian: a.endian,
        string: a.string,
        align: a.align,
        bitmask: a.bitmask,
        buffer: st.buffer,
    })
}

fn parse_isdataat(v: &str, st: &State) -> Result<IsDataAt, Why> {
    let key = "isdataat";
    let it = items(v);
    let (negated, n) = match it[0].strip_prefix('!') {
        Some(n) => (true, n.trim()),
        None => (false, it[0]),
    };
    let offset = num_or_var(key, n, 0, 65535, &st.extracted)?;
    let a = byte_args(key, &it[1..], &["relative", "rawbytes"], &st.extracted)?;
    Ok(IsDataAt { offset, relative: a.relative, negated, buffer: if a.rawbytes { Buffer::Raw } else { st.buffer } })
}

fn parse_flowbits(v: &str) -> Result<Flowbits, Why> {
    let key = "flowbits";
    let it = items(v);
    let op = match it[0] {
        "set" => FlowbitsOp::Set,
        "setx" => FlowbitsOp::SetX,
        "unset" => FlowbitsOp::Unset,
        "toggle" => FlowbitsOp::Toggle,
        "isset" => FlowbitsOp::IsSet,
        "isnotset" => FlowbitsOp::IsNotSet,
        "noalert" => FlowbitsOp::NoAlert,
        "reset" => FlowbitsOp::Reset,
        o => return Err(Why::new(key, format!("unknown `flowbits` operation `{o}`"))),
    };
    let valid = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    let mut f = Flowbits { op, bits: Vec::new(), any: false, group: None };
    match op {
        FlowbitsOp::NoAlert => {
            if it.len() > 1 {
                return Err(Why::new(key, "`flowbits:noalert` takes no bits"));
            }
        }
        FlowbitsOp::Reset => {
            if it.len() > 2 {
                return Err(Why::new(key, "`flowbits:reset` takes at most a group"));
            }
            f.group = it.get(1).map(|g| g.to_string());
        }
        _ => {
            let names = it.get(1).ok_or_else(|| Why::new(key, format!("`flowbits:{}` needs a bit name", it[0])))?;
            if names.contains('|') && names.contains('&') {
                return Err(Why::new(key, "`flowbits` mixes `&` and `|`"));
            }
            f.any = names.contains('|');
            f.bits = names.split(['|', '&']).map(|n| n.trim().to_string()).collect();
            if let Some(bad) = f.bits.iter().find(|n| !valid(n)) {
                return Err(Why::new(key, format!("`{bad}` is not a flowbit name")));
            }
            if f.bits.len() > 1 && !matches!(op, FlowbitsOp::IsSet | FlowbitsOp::IsNotSet) && f.any {
                return Err(Why::new(key, "`|` is only for isset and isnotset"));
            }
            f.group = it.get(2).map(|g| g.to_string());
            if it.len() > 3 || (op == FlowbitsOp::SetX && f.group.is_none()) {
                return Err(Why::new(key, format!("`flowbits:{v}`: expected OP,BITS[,GROUP] (setx needs a group)")));
            }
        }
    }
    Ok(f)
}

fn parse_threshold(key: &str, v: &str) -> Result<Threshold, Why> {
    let mut kind = if key == "detection_filter" { Some(ThresholdKind::DetectionFilter) } else { None };
    let (mut by_dst, mut count, mut seconds) = (None, None, None);
    for item in items(v) {
        let (k, a) = item.split_once(char::is_whitespace).map(|(k, a)| (k, a.trim())).unwrap_or((item, ""));
        match (k, a) {
            ("type", t) if key == "threshold" => {
                kind = Some(match t {
                    "limit" => ThresholdKind::Limit,
                    "threshold" => ThresholdKind::Threshold,
                    "both" => ThresholdKind::Both,
                    _ => return Err(Why::new(key, format!("unknown threshold type `{t}`"))),
                })
            }
            ("track", "by_src") => by_dst = Some(false),
            ("track", "by_dst") => by_dst = Some(true),
            ("count", n) => count = Some(bounded(key, n, 0, u32::MAX.into())? as u32),
            ("seconds", n) => seconds = Some(bounded(key, n, 0, u32::MAX.into())? as u32),
            _ => return Err(Why::new(key, format!("unknown `{key}` argument `{item}`"))),
        }
    }
    match (kind, by_dst, count, seconds) {
        (Some(kind), Some(by_dst), Some(count), Some(seconds)) => Ok(Threshold { kind, by_dst, count, seconds }),
        _ => Err(Why::new(key, format!("`{key}` needs {}track, count and seconds", if key == "threshold" { "type, " } else { "" }))),
    }
}

/// Splits `key:value; key; …` respecting quotes and `\` escapes (values
/// keep their escapes).
pub fn split_options(s: &str) -> Result<Vec<(String, Option<String>)>, Why> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut quoted, mut escaped) = (false, false);
    for ch in s.chars() {
        if escaped {
            cur.push('\\');
            cur.push(ch);
            escaped = false;
            continue;
        }
        match ch {
            '\\' => escaped = true,
            '"' => {
                quoted = !quoted;
                cur.push(ch);
            }
            ';' if !quoted => {
                push_option(&mut out, &cur)?;
                cur.clear();
            }
            _ => cur.push(ch),
        }
    }
    if quoted {
        return Err(Why::new("options", "unterminated string in the options"));
    }
    if escaped {
        cur.push('\\');
    }
    if !cur.trim().is_empty() {
        let k = cur.trim().split(':').next().unwrap_or("options").trim().to_string();
        return Err(Why::new(&k, format!("option `{}` is not ended with `;`", cur.trim())));
    }
    Ok(out)
}

fn push_option(out: &mut Vec<(String, Option<String>)>, s: &str) -> Result<(), Why> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(());
    }
    let (k, v) = match s.split_once(':') {
        Some((k, v)) => (k.trim(), Some(v.trim().to_string())),
        None => (s, None),
    };
    if k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(Why::new("options", format!("bad option `{s}`")));
    }
    out.push((k.to_string(), v));
    Ok(())
}

/// `"text"…`: the text between the quotes (escapes kept), its end, and what follows.
fn split_quoted(v: &str) -> Result<(&str, usize, &str), String> {
    let v = v.trim_start();
    let body = v.strip_prefix('"').ok_or(format!("expected a quoted string, found `{v}`"))?;
    let mut escaped = false;
    for (i, c) in body.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '"' {
            return Ok((&body[..i], i + 2, &body[i + 1..]));
        }
    }
    Err(format!("unterminated string `{v}`"))
}

/// `"text"` with `\x` escapes resolved (a bare word is taken as it is).
fn unquote(v: &str) -> Result<String, String> {
    let raw = if v.trim_start().starts_with('"') {
        let (raw, _, rest) = split_quoted(v)?;
        if !rest.trim().is_empty() {
            return Err(format!("text after the string: `{}`", rest.trim()));
        }
        raw
    } else {
        v.trim()
    };
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.push(chars.next().unwrap_or('\\'));
        } else {
            out.push(c);
        }
    }
    Ok(out)
}
