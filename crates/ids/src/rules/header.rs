//! Rule headers: addresses, ports and `$VARIABLES`.

use std::collections::HashMap;

use super::{Why, MAX_RULE_LEN};

/// Deepest nesting of address and port lists.
const MAX_NESTING: usize = 16;

/// An address expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddrExpr {
    /// Any address.
    Any,
    /// IPv4 `net/len` (host bits of `net` clear).
    Net(u32, u8),
    /// IPv6 `net/len` (host bits clear). The packet decoder is IPv4-only:
    /// an IPv6 block never matches a packet (its negation matches every one).
    Net6(u128, u8),
    /// Negation.
    Not(Box<AddrExpr>),
    /// A list (see [`AddrExpr::matches`]).
    List(Vec<AddrExpr>),
}

impl AddrExpr {
    /// Whether IPv4 address `a` matches. A list matches a value that matches
    /// one of its plain elements (any value when it has none) and none of its
    /// negated ones.
    pub fn matches(&self, a: u32) -> bool {
        match self {
            AddrExpr::Any => true,
            AddrExpr::Net(net, len) => mask(*len) & a == *net,
            AddrExpr::Net6(..) => false,
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
    /// The ports that match, as sorted, disjoint, non-adjacent inclusive
    /// ranges (the same set as [`PortExpr::matches`] accepts).
    pub fn ranges(&self) -> Vec<(u16, u16)> {
        match self {
            PortExpr::Any => vec![(0, u16::MAX)],
            PortExpr::Range(lo, hi) if lo <= hi => vec![(*lo, *hi)],
            PortExpr::Range(..) => Vec::new(),
            PortExpr::Not(x) => complement(&x.ranges()),
            PortExpr::List(items) => {
                let (negated, plain): (Vec<&PortExpr>, Vec<&PortExpr>) = items.iter().partition(|x| matches!(x, PortExpr::Not(_)));
                let mut set = if plain.is_empty() { vec![(0, u16::MAX)] } else { union(plain.iter().flat_map(|x| x.ranges()).collect()) };
                for n in negated {
                    let PortExpr::Not(inner) = n else { unreachable!("partitioned on Not") };
                    // Matching a negated element is failing the list: remove what it matches.
                    set = intersect(&set, &complement(&inner.ranges()));
                }
                set
            }
        }
    }

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

/// Sorted, merged ranges of `r`.
fn union(mut r: Vec<(u16, u16)>) -> Vec<(u16, u16)> {
    r.sort_unstable();
    let mut out: Vec<(u16, u16)> = Vec::with_capacity(r.len());
    for (lo, hi) in r {
        match out.last_mut() {
            Some((_, h)) if u32::from(lo) <= u32::from(*h) + 1 => *h = (*h).max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// The ports not in `r` (sorted, disjoint).
fn complement(r: &[(u16, u16)]) -> Vec<(u16, u16)> {
    let mut out = Vec::new();
    let mut next: u32 = 0;
    for &(lo, hi) in r {
        if u32::from(lo) > next {
            out.push((next as u16, lo - 1));
        }
        next = u32::from(hi) + 1;
    }
    if next <= u32::from(u16::MAX) {
        out.push((next as u16, u16::MAX));
    }
    out
}

/// The ports in both (each sorted, disjoint).
fn intersect(a: &[(u16, u16)], b: &[(u16, u16)]) -> Vec<(u16, u16)> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (lo, hi) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if lo <= hi {
            out.push((lo, hi));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
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

/// The IPv4 netmask of a prefix length.
pub fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

fn mask6(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len.min(128)))
    }
}

/// Replaces every `$VAR` or `$(VAR)` (possibly after `!`, or inside a
/// list) by its value, which may itself name variables (at most 8 levels).
pub fn expand(s: &str, vars: &HashMap<String, String>) -> Result<String, Why> {
    expand_at(s, vars, 0)
}

fn expand_at(s: &str, vars: &HashMap<String, String>, depth: usize) -> Result<String, Why> {
    if depth > 8 {
        return Err(Why::new("variable", "variables nest too deeply"));
    }
    if !s.contains('$') {
        return Ok(s.to_string());
    }
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let mut tail = &rest[i + 1..];
        let paren = tail.starts_with('(');
        if paren {
            tail = &tail[1..];
        }
        let n = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        let name = &tail[..n];
        let value = vars.get(name).ok_or_else(|| Why::new("variable", format!("undefined variable `${name}`")))?;
        out.push_str(&expand_at(value, vars, depth + 1)?);
        if out.len() > MAX_RULE_LEN {
            return Err(Why::new("variable", "variables expand too far"));
        }
        rest = &tail[n..];
        if paren {
            rest = rest.strip_prefix(')').ok_or_else(|| Why::new("variable", format!("`$({name}` is not closed")))?;
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn split_list(s: &str) -> Result<Vec<&str>, Why> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.checked_sub(1).ok_or_else(|| Why::new("header", "unbalanced `]`"))?,
            ',' if depth == 0 => {
                items.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(Why::new("header", "unbalanced `[`"));
    }
    items.push(s[start..].trim());
    if items.iter().any(|x| x.is_empty()) {
        return Err(Why::new("header", format!("empty element in the list `[{s}]`")));
    }
    Ok(items)
}

/// An address expression (variables expanded).
pub fn parse_addr(s: &str, depth: usize) -> Result<AddrExpr, Why> {
    if depth > MAX_NESTING {
        return Err(Why::new("header", "address lists nest too deeply"));
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
    let bad = || Why::new("header", format!("`{s}` is not an address, a CIDR block or a list"));
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l.parse::<u8>().map_err(|_| bad())?)),
        None => (s, None),
    };
    if let Ok(v4) = a.parse::<std::net::Ipv4Addr>() {
        let len = len.unwrap_or(32);
        if len > 32 {
            return Err(Why::new("header", format!("bad prefix length in `{s}`")));
        }
        // Snort masks the host bits of a CIDR block.
        return Ok(AddrExpr::Net(u32::from(v4) & mask(len), len));
    }
    if let Ok(v6) = a.parse::<std::net::Ipv6Addr>() {
        let len = len.unwrap_or(128);
        if len > 128 {
            return Err(Why::new("header", format!("bad prefix length in `{s}`")));
        }
        return Ok(AddrExpr::Net6(u128::from(v6) & mask6(len), len));
    }
    Err(bad())
}

/// A port expression (variables expanded).
pub fn parse_port(s: &str, depth: usize) -> Result<PortExpr, Why> {
    if depth > MAX_NESTING {
        return Err(Why::new("header", "port lists nest too deeply"));
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
    let bad = || Why::new("header", format!("`{s}` is not a port, range or list"));
    let num = |x: &str| x.trim().parse::<u16>().map_err(|_| bad());
    let (lo, hi) = match s.split_once(':') {
        Some(("", "")) => return Err(bad()),
        Some(("", h)) => (0, num(h)?),
        Some((l, "")) => (num(l)?, u16::MAX),
        Some((l, h)) => (num(l)?, num(h)?),
        None => (num(s)?, num(s)?),
    };
    if lo > hi {
        return Err(Why::new("header", format!("empty port range `{s}`")));
    }
    Ok(PortExpr::Range(lo, hi))
}
