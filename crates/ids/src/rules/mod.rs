//! Snort rules (the subset NetVMSnort compiles) → [`Rule`]s.
//!
//! ```text
//! ACTION PROTO SRC SPORT -> DST DPORT (OPTION; OPTION; ...)
//! ```
//!
//! - ACTION: `alert`, `drop`, `pass`; PROTO: `tcp`, `udp`, `icmp`, `ip`.
//! - Addresses: `any`, `a.b.c.d`, `a.b.c.d/len`, `[list, ...]` (nested),
//!   `!` before any of them, `$VAR`. Ports: `any`, `N`, `N:M`, `:M`, `N:`,
//!   lists, `!`, `$VAR`. A list matches a value that matches one of its
//!   plain elements (any value when it has none) and none of its negated ones.
//! - Options: `msg:"…"`, `sid:N`, `rev:N`, `content:"…"` / `content:!"…"`
//!   (with `|hex|` bytes) and its modifiers `nocase`, `offset:N`, `depth:N`,
//!   `distance:N`, `within:N`, `fast_pattern`, `rawbytes`; `pcre:"/…/flags"`;
//!   and, accepted and ignored, `classtype`, `reference`, `metadata`,
//!   `priority`, `gid`.
//! - `var`, `ipvar` and `portvar` lines define variables; `#` comments; a
//!   line ending in `\` continues on the next.
//!
//! A rule outside the subset (another option, `<>`, an undefined variable,
//! a modifier without a content, …) is reported with its line and a reason
//! ([`RuleError`]) and skipped; the other rules still compile.

use std::collections::HashMap;
use std::fmt;

// The content syntax is the string-matching coprocessor's pattern syntax.
use netvm_copro::strmatch::parse_content_body;

/// What a rule does when it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Log an alert.
    Alert,
    /// Log an alert and drop the packet.
    Drop,
    /// Let the packet through: no other rule alerts or drops it.
    Pass,
}

impl Action {
    /// The keyword.
    pub fn name(self) -> &'static str {
        match self {
            Action::Alert => "alert",
            Action::Drop => "drop",
            Action::Pass => "pass",
        }
    }
}

/// The protocol a rule applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proto {
    /// TCP segments; contents match in the TCP payload.
    Tcp,
    /// UDP datagrams; contents match in the UDP payload.
    Udp,
    /// ICMP messages; contents match after the 8-byte ICMP header.
    Icmp,
    /// Every IPv4 packet; contents match after the IP header.
    Ip,
}

/// An address expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddrExpr {
    /// Any address.
    Any,
    /// `net/len` (host bits of `net` clear).
    Net(u32, u8),
    /// Negation.
    Not(Box<AddrExpr>),
    /// A list (see the module documentation for its meaning).
    List(Vec<AddrExpr>),
}

impl AddrExpr {
    /// Whether `a` matches.
    pub fn matches(&self, a: u32) -> bool {
        match self {
            AddrExpr::Any => true,
            AddrExpr::Net(net, len) => mask(*len) & a == *net,
            AddrExpr::Not(x) => !x.matches(a),
            AddrExpr::List(items) => list_matches(items, |x| x.matches(a), |x| matches!(x, AddrExpr::Not(_))),
        }
    }
}

/// A port expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortExpr {
    /// Any port.
    Any,
    /// `lo..=hi`.
    Range(u16, u16),
    /// Negation.
    Not(Box<PortExpr>),
    /// A list.
    List(Vec<PortExpr>),
}

impl PortExpr {
    /// Whether `p` matches.
    pub fn matches(&self, p: u16) -> bool {
        match self {
            PortExpr::Any => true,
            PortExpr::Range(lo, hi) => (*lo..=*hi).contains(&p),
            PortExpr::Not(x) => !x.matches(p),
            PortExpr::List(items) => list_matches(items, |x| x.matches(p), |x| matches!(x, PortExpr::Not(_))),
        }
    }
}

fn list_matches<T>(items: &[T], m: impl Fn(&T) -> bool, negated: impl Fn(&T) -> bool) -> bool {
    let mut any_plain = false;
    let mut plain_hit = false;
    for x in items {
        if negated(x) {
            if !m(x) {
                return false;
            }
        } else {
            any_plain = true;
            plain_hit |= m(x);
        }
    }
    !any_plain || plain_hit
}

/// The netmask of a prefix length.
pub fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

/// A `content` and its modifiers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Content {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// `content:!"…"`: the rule needs the bytes absent.
    pub negated: bool,
    /// `nocase`.
    pub nocase: bool,
    /// `offset`: the search starts this many bytes into the payload.
    pub offset: Option<i32>,
    /// `depth`: the match must end within this many bytes of the search start.
    pub depth: Option<u32>,
    /// `distance`: the search starts this many bytes after the previous match.
    pub distance: Option<i32>,
    /// `within`: the match must end within this many bytes of the search start.
    pub within: Option<u32>,
    /// `fast_pattern`: prefer this content for the prefilter.
    pub fast_pattern: bool,
}

impl Content {
    /// Whether the content is placed relative to the previous match.
    pub fn relative(&self) -> bool {
        self.distance.is_some() || self.within.is_some()
    }
}

/// A `pcre` option.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pcre {
    /// The pattern between the slashes.
    pub pattern: String,
    /// The flags among `i`, `s`, `m`, `x` (in the order given).
    pub flags: String,
    /// `R`: matched from the end of the previous match.
    pub relative: bool,
}

/// One detection step, in rule order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Matcher {
    /// A content.
    Content(Content),
    /// A regular expression.
    Pcre(Pcre),
}

/// A compiled-subset Snort rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// 1-based line where the rule starts.
    pub line: usize,
    /// Action.
    pub action: Action,
    /// Protocol.
    pub proto: Proto,
    /// Source addresses.
    pub src: AddrExpr,
    /// Source ports.
    pub sport: PortExpr,
    /// Destination addresses.
    pub dst: AddrExpr,
    /// Destination ports.
    pub dport: PortExpr,
    /// `msg`.
    pub msg: String,
    /// `sid`.
    pub sid: u32,
    /// `rev` (default 1).
    pub rev: u32,
    /// Contents and pcres, in order.
    pub matchers: Vec<Matcher>,
}

/// A rule that was not compiled: where and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleError {
    /// 1-based line.
    pub line: usize,
    /// Why.
    pub message: String,
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Largest rule text accepted (bytes, after joining continuation lines).
pub const MAX_RULE_LEN: usize = 64 * 1024;
/// Largest content (bytes).
pub const MAX_CONTENT: usize = 4096;
/// Most contents and pcres in one rule.
pub const MAX_MATCHERS: usize = 32;
/// Most rules in one file.
pub const MAX_RULES: usize = 100_000;
/// Deepest nesting of address and port lists.
const MAX_NESTING: usize = 16;

/// The rules of a file, and the lines that were skipped.
#[derive(Clone, Debug, Default)]
pub struct RuleSet {
    /// Rules in file order.
    pub rules: Vec<Rule>,
    /// Lines not compiled, with the reason.
    pub errors: Vec<RuleError>,
}

/// Parses a rules file. `vars` predefines variables (`--var NAME=VALUE`);
/// `var`/`ipvar`/`portvar` lines in the file add to them.
pub fn parse_rules(text: &str, vars: &HashMap<String, String>) -> RuleSet {
    let mut vars = vars.clone();
    let mut set = RuleSet::default();
    let mut sids: HashMap<u32, usize> = HashMap::new();
    let mut pending = String::new();
    let mut start = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if pending.is_empty() {
            start = i + 1;
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
        }
        if let Some(body) = line.strip_suffix('\\') {
            pending.push_str(body);
            pending.push(' ');
            if pending.len() > MAX_RULE_LEN {
                set.errors.push(RuleError { line: start, message: format!("rule longer than {MAX_RULE_LEN} bytes") });
                pending.clear();
            }
            continue;
        }
        pending.push_str(line);
        let whole = std::mem::take(&mut pending);
        if whole.len() > MAX_RULE_LEN {
            set.errors.push(RuleError { line: start, message: format!("rule longer than {MAX_RULE_LEN} bytes") });
            continue;
        }
        let err = |message: String| RuleError { line: start, message };
        let mut words = whole.split_whitespace();
        match words.next() {
            Some(kw @ ("var" | "ipvar" | "portvar")) => match (words.next(), words.next(), words.next()) {
                (Some(name), Some(value), None) => {
                    vars.insert(name.to_string(), value.to_string());
                }
                _ => set.errors.push(err(format!("`{kw}` needs a name and a value"))),
            },
            _ => {
                if set.rules.len() >= MAX_RULES {
                    set.errors.push(err(format!("more than {MAX_RULES} rules")));
                    continue;
                }
                match parse_rule(&whole, &vars) {
                    Ok(mut rule) => {
                        rule.line = start;
                        if let Some(first) = sids.get(&rule.sid) {
                            set.errors.push(err(format!("duplicate sid {} (first on line {first})", rule.sid)));
                        } else {
                            sids.insert(rule.sid, start);
                            set.rules.push(rule);
                        }
                    }
                    Err(m) => set.errors.push(err(m)),
                }
            }
        }
    }
    if !pending.is_empty() {
        set.errors.push(RuleError { line: start, message: "the file ends inside a continued line".into() });
    }
    set
}

/// Parses one rule (no continuation lines); `line` is left 0.
pub fn parse_rule(text: &str, vars: &HashMap<String, String>) -> Result<Rule, String> {
    let open = text.find('(').ok_or("no option list `( … )`")?;
    let close = text.rfind(')').filter(|c| *c > open).ok_or("the option list is not closed with `)`")?;
    if !text[close + 1..].trim().is_empty() {
        return Err(format!("text after the option list: `{}`", text[close + 1..].trim()));
    }
    let header: Vec<&str> = text[..open].split_whitespace().collect();
    let [action, proto, src, sport, dir, dst, dport] = header.as_slice() else {
        return Err(format!("the header needs 7 fields (ACTION PROTO SRC SPORT -> DST DPORT), found {}", header.len()));
    };
    let action = match *action {
        "alert" => Action::Alert,
        "drop" => Action::Drop,
        "pass" => Action::Pass,
        a => return Err(format!("unsupported action `{a}` (alert, drop, pass)")),
    };
    let proto = match *proto {
        "tcp" => Proto::Tcp,
        "udp" => Proto::Udp,
        "icmp" => Proto::Icmp,
        "ip" => Proto::Ip,
        p => return Err(format!("unsupported protocol `{p}` (tcp, udp, icmp, ip)")),
    };
    match *dir {
        "->" => {}
        "<>" => return Err("bidirectional rules (`<>`) are not supported".into()),
        d => return Err(format!("expected `->`, found `{d}`")),
    }
    let mut rule = Rule {
        line: 0,
        action,
        proto,
        src: parse_addr(&expand(src, vars)?, 0)?,
        sport: parse_port(&expand(sport, vars)?, 0)?,
        dst: parse_addr(&expand(dst, vars)?, 0)?,
        dport: parse_port(&expand(dport, vars)?, 0)?,
        msg: String::new(),
        sid: 0,
        rev: 1,
        matchers: Vec::new(),
    };
    let mut sid = None;
    for (key, value) in split_options(&text[open + 1..close])? {
        let num = |v: &Option<String>| -> Result<i64, String> {
            let v = v.as_deref().ok_or(format!("`{key}` needs a value"))?.trim();
            v.parse::<i64>().map_err(|_| format!("`{key}:{v}`: not a number"))
        };
        match key.as_str() {
            "msg" => rule.msg = unquote(value.as_deref().unwrap_or(""))?,
            "sid" => sid = Some(u32::try_from(num(&value)?).map_err(|_| "sid out of range".to_string())?),
            "rev" => rule.rev = u32::try_from(num(&value)?).map_err(|_| "rev out of range".to_string())?,
            "content" => {
                let v = value.as_deref().ok_or("`content` needs a value")?.trim();
                let (negated, v) = match v.strip_prefix('!') {
                    Some(rest) => (true, rest.trim_start()),
                    None => (false, v),
                };
                let bytes = parse_content_body(&unquote_raw(v)?)?;
                if bytes.is_empty() {
                    return Err("empty content".into());
                }
                if bytes.len() > MAX_CONTENT {
                    return Err(format!("content longer than {MAX_CONTENT} bytes"));
                }
                rule.matchers.push(Matcher::Content(Content {
                    bytes,
                    negated,
                    nocase: false,
                    offset: None,
                    depth: None,
                    distance: None,
                    within: None,
                    fast_pattern: false,
                }));
            }
            "nocase" => last_content(&mut rule, &key)?.nocase = true,
            "rawbytes" => {
                last_content(&mut rule, &key)?;
            }
            "fast_pattern" => {
                if value.as_deref().is_some_and(|v| v.trim() != "only") {
                    return Err(format!("`fast_pattern:{}` is not supported", value.unwrap_or_default()));
                }
                last_content(&mut rule, &key)?.fast_pattern = true;
            }
            "offset" | "distance" => {
                let n = num(&value)?;
                let n = i32::try_from(n).ok().filter(|n| (-65535..=65535).contains(n)).ok_or(format!("`{key}` out of range"))?;
                let c = last_content(&mut rule, &key)?;
                if key == "offset" {
                    c.offset = Some(n)
                } else {
                    c.distance = Some(n)
                }
            }
            "depth" | "within" => {
                let n = num(&value)?;
                let n = u32::try_from(n).ok().filter(|n| (1..=65535).contains(n)).ok_or(format!("`{key}` out of range (1 to 65535)"))?;
                let c = last_content(&mut rule, &key)?;
                if (n as usize) < c.bytes.len() {
                    return Err(format!("`{key}:{n}` is shorter than its content ({} bytes)", c.bytes.len()));
                }
                if key == "depth" {
                    c.depth = Some(n)
                } else {
                    c.within = Some(n)
                }
            }
            "pcre" => {
                let v = unquote(value.as_deref().ok_or("`pcre` needs a value")?)?;
                rule.matchers.push(Matcher::Pcre(parse_pcre(&v)?));
            }
            "classtype" | "reference" | "metadata" | "priority" | "gid" => {}
            other => return Err(format!("unsupported option `{other}`")),
        }
        if let Some(Matcher::Content(c)) = rule.matchers.last() {
            if (c.offset.is_some() || c.depth.is_some()) && c.relative() {
                return Err("a content cannot have both offset/depth and distance/within".into());
            }
        }
    }
    if rule.matchers.len() > MAX_MATCHERS {
        return Err(format!("more than {MAX_MATCHERS} contents and pcres"));
    }
    rule.sid = sid.ok_or("no `sid`")?;
    Ok(rule)
}

/// The content a modifier applies to: the rule's last matcher.
fn last_content<'r>(rule: &'r mut Rule, key: &str) -> Result<&'r mut Content, String> {
    match rule.matchers.last_mut() {
        Some(Matcher::Content(c)) => Ok(c),
        _ => Err(format!("`{key}` does not follow a content")),
    }
}

/// Splits `key:value; key; …` respecting quotes and `\` escapes.
fn split_options(s: &str) -> Result<Vec<(String, Option<String>)>, String> {
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
        return Err("unterminated string in the options".into());
    }
    if escaped {
        cur.push('\\');
    }
    if !cur.trim().is_empty() {
        return Err(format!("option `{}` is not ended with `;`", cur.trim()));
    }
    Ok(out)
}

fn push_option(out: &mut Vec<(String, Option<String>)>, s: &str) -> Result<(), String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(());
    }
    let (k, v) = match s.split_once(':') {
        Some((k, v)) => (k.trim(), Some(v.trim().to_string())),
        None => (s, None),
    };
    if k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(format!("bad option `{s}`"));
    }
    out.push((k.to_string(), v));
    Ok(())
}

/// `"text"` with `\x` escapes resolved.
fn unquote(v: &str) -> Result<String, String> {
    let raw = unquote_raw(v)?;
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

/// The text between the quotes, escapes kept.
fn unquote_raw(v: &str) -> Result<String, String> {
    let v = v.trim();
    v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).map(str::to_string).ok_or(format!("expected a quoted string, found `{v}`"))
}

/// `/pattern/flags`.
pub fn parse_pcre(v: &str) -> Result<Pcre, String> {
    let body = v.strip_prefix('/').ok_or(format!("pcre `{v}` does not start with `/`"))?;
    let end = body.rfind('/').ok_or(format!("pcre `{v}` has no closing `/`"))?;
    let (pattern, flags) = (&body[..end], &body[end + 1..]);
    let mut p = Pcre { pattern: pattern.to_string(), flags: String::new(), relative: false };
    for f in flags.chars() {
        match f {
            'i' | 's' | 'm' | 'x' => p.flags.push(f),
            'R' => p.relative = true,
            'B' => {}
            other => return Err(format!("pcre flag `{other}` is not supported (i, s, m, x, R, B)")),
        }
    }
    Ok(p)
}

/// Replaces every `$VAR` (possibly after `!`, or inside a list) by its
/// value, which may itself name variables (at most 8 levels deep).
fn expand(s: &str, vars: &HashMap<String, String>) -> Result<String, String> {
    expand_at(s, vars, 0)
}

fn expand_at(s: &str, vars: &HashMap<String, String>, depth: usize) -> Result<String, String> {
    if depth > 8 {
        return Err("variables nest too deeply".into());
    }
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 1..];
        let n = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        let name = &tail[..n];
        let value = vars.get(name).ok_or(format!("undefined variable `${name}`"))?;
        out.push_str(&expand_at(value, vars, depth + 1)?);
        if out.len() > MAX_RULE_LEN {
            return Err("variables expand too far".into());
        }
        rest = &tail[n..];
    }
    out.push_str(rest);
    Ok(out)
}

fn split_list(s: &str) -> Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.checked_sub(1).ok_or("unbalanced `]`")?,
            ',' if depth == 0 => {
                items.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced `[`".into());
    }
    items.push(s[start..].trim());
    if items.iter().any(|x| x.is_empty()) {
        return Err(format!("empty element in the list `[{s}]`"));
    }
    Ok(items)
}

fn parse_addr(s: &str, depth: usize) -> Result<AddrExpr, String> {
    if depth > MAX_NESTING {
        return Err("address lists nest too deeply".into());
    }
    let s = s.trim();
    if let Some(rest) = s.strip_prefix('!') {
        return Ok(AddrExpr::Not(Box::new(parse_addr(rest, depth + 1)?)));
    }
    if s == "any" {
        return Ok(AddrExpr::Any);
    }
    if let Some(inner) = s.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
        return Ok(AddrExpr::List(split_list(inner)?.into_iter().map(|x| parse_addr(x, depth + 1)).collect::<Result<_, _>>()?));
    }
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (a, l.parse::<u8>().ok().filter(|l| *l <= 32).ok_or(format!("bad prefix length in `{s}`"))?),
        None => (s, 32),
    };
    let addr: std::net::Ipv4Addr = a.parse().map_err(|_| format!("`{s}` is not an IPv4 address (IPv6 rules are not supported)"))?;
    // Snort masks the host bits of a CIDR block.
    Ok(AddrExpr::Net(u32::from(addr) & mask(len), len))
}

fn parse_port(s: &str, depth: usize) -> Result<PortExpr, String> {
    if depth > MAX_NESTING {
        return Err("port lists nest too deeply".into());
    }
    let s = s.trim();
    if let Some(rest) = s.strip_prefix('!') {
        return Ok(PortExpr::Not(Box::new(parse_port(rest, depth + 1)?)));
    }
    if s == "any" {
        return Ok(PortExpr::Any);
    }
    if let Some(inner) = s.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
        return Ok(PortExpr::List(split_list(inner)?.into_iter().map(|x| parse_port(x, depth + 1)).collect::<Result<_, _>>()?));
    }
    let num = |x: &str| x.trim().parse::<u16>().map_err(|_| format!("`{s}` is not a port, range or list"));
    let (lo, hi) = match s.split_once(':') {
        Some(("", "")) => return Err(format!("`{s}` is not a port range")),
        Some(("", h)) => (0, num(h)?),
        Some((l, "")) => (num(l)?, u16::MAX),
        Some((l, h)) => (num(l)?, num(h)?),
        None => (num(s)?, num(s)?),
    };
    if lo > hi {
        return Err(format!("empty port range `{s}`"));
    }
    Ok(PortExpr::Range(lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Result<Rule, String> {
        parse_rule(text, &HashMap::new())
    }

    #[test]
    fn a_full_rule() {
        let r = one(r#"alert tcp 10.0.0.0/8 any -> [192.168.1.1,!192.168.1.0/24] !80 (msg:"GET \"x\"; y"; content:"GET|20|/"; nocase; offset:0; depth:10; content:!"evil"; distance:2; within:20; pcre:"/a+b/iR"; sid:1000; rev:3; classtype:bad;)"#).unwrap();
        assert_eq!(r.action, Action::Alert);
        assert_eq!(r.proto, Proto::Tcp);
        assert_eq!(r.msg, "GET \"x\"; y");
        assert_eq!((r.sid, r.rev), (1000, 3));
        assert!(r.src.matches(0x0a01_0203) && !r.src.matches(0x0b00_0000));
        assert!(r.sport.matches(5));
        assert!(!r.dport.matches(80) && r.dport.matches(81));
        assert!(!r.dst.matches(0xc0a8_0101), "negation wins in a list");
        assert!(!r.dst.matches(0xc0a8_0102), "no plain element matches");
        assert_eq!(r.matchers.len(), 3);
        let Matcher::Content(c) = &r.matchers[0] else { panic!() };
        assert_eq!(c.bytes, b"GET /");
        assert!(c.nocase && c.offset == Some(0) && c.depth == Some(10) && !c.negated);
        let Matcher::Content(c) = &r.matchers[1] else { panic!() };
        assert!(c.negated && c.distance == Some(2) && c.within == Some(20));
        let Matcher::Pcre(p) = &r.matchers[2] else { panic!() };
        assert_eq!((p.pattern.as_str(), p.flags.as_str(), p.relative), ("a+b", "i", true));
    }

    #[test]
    fn lists_ports_and_vars() {
        let vars: HashMap<String, String> = [("HOME".to_string(), "[10.0.0.0/8,172.16.0.0/12]".to_string())].into();
        let r = parse_rule("alert udp !$HOME :1023 -> any [53,5353,6000:] (sid:1;)", &vars).unwrap();
        assert!(!r.src.matches(0x0a00_0001) && r.src.matches(0x0800_0808));
        assert!(r.sport.matches(0) && r.sport.matches(1023) && !r.sport.matches(1024));
        assert!(r.dport.matches(53) && r.dport.matches(6001) && !r.dport.matches(54));
        let only_negated = parse_rule("alert ip [!1.2.3.4] any -> any any (sid:2;)", &vars).unwrap();
        assert!(only_negated.src.matches(5) && !only_negated.src.matches(0x0102_0304));
    }

    #[test]
    fn file_with_errors_reports_lines() {
        let text = "# comment\n\nvar NET 10.0.0.0/8\nalert tcp $NET any -> any 80 (content:\"a\"; \\\n  sid:1;)\nalert tcp any any <> any any (sid:2;)\nalert tcp any any -> any any (flow:established; sid:3;)\nalert tcp $NOPE any -> any any (sid:4;)\nalert tcp any any -> any any (nocase; sid:5;)\nalert tcp any any -> any any (content:\"a\"; sid:1;)\nlog tcp any any -> any any (sid:6;)\nalert tcp any any -> any any (content:\"ab\"; depth:1; sid:7;)\nalert tcp any any -> any any (content:\"|4|\"; sid:8;)\nalert tcp any any -> any any (msg:\"x\")\n";
        let set = parse_rules(text, &HashMap::new());
        assert_eq!(set.rules.len(), 1);
        assert_eq!(set.rules[0].line, 4);
        let lines: Vec<usize> = set.errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![6, 7, 8, 9, 10, 11, 12, 13, 14], "{:#?}", set.errors);
        assert!(set.errors[1].message.contains("flow"));
        assert!(set.errors[4].message.contains("duplicate sid 1 (first on line 4)"));
    }

    #[test]
    fn content_strings() {
        // The parser is strmatch's (tested there); here: that rules use it.
        let parse_content = parse_content_body;
        assert_eq!(parse_content("a|00 ff|b\\;\\\"").unwrap(), b"a\x00\xffb;\"");
        assert_eq!(parse_content("|4142|").unwrap(), b"AB");
        for bad in ["|4", "|4|", "|zz|", "a\\q", "a\"b", "|4 1|"] {
            assert!(parse_content(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hostile_text_never_panics() {
        for t in [
            "",
            "(",
            ")",
            "alert",
            "alert tcp any any -> any any (",
            "alert tcp any any -> any any ();",
            "a b c d e f g (sid:1;)",
            "alert tcp [[[[ any -> any any (sid:1;)",
            "alert tcp any 70000 -> any any (sid:1;)",
            "alert tcp any 5:1 -> any any (sid:1;)",
            "alert tcp 1.2.3.4/40 any -> any any (sid:1;)",
            "alert tcp any any -> any any (sid:99999999999;)",
            "alert tcp any any -> any any (pcre:\"abc\"; sid:1;)",
            "alert tcp any any -> any any (content:\"\"; sid:1;)",
            "alert tcp any any -> any any (sid:1;) trailing",
            "alert tcp any any -> any any (content:\"x\"; offset:1; distance:1; sid:1;)",
        ] {
            let _ = parse_rules(t, &HashMap::new());
        }
        let deep = format!("alert tcp {}1.2.3.4{} any -> any any (sid:1;)", "[".repeat(100), "]".repeat(100));
        assert!(parse_rule(&deep, &HashMap::new()).unwrap_err().contains("deeply"));
        let vars: HashMap<String, String> = [("A".to_string(), "$A".to_string())].into();
        assert!(parse_rule("alert tcp $A any -> any any (sid:1;)", &vars).is_err());
    }
}
