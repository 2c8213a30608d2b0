//! NDN names written as URIs (`/edu/ucla/cs/%C1.r`), as ndn-cxx reads and
//! writes them, and the prefix file format.
//!
//! A name is `/` followed by components separated by `/` (`/` alone is the
//! root, with no component; one trailing `/` is allowed; an optional
//! `ndn:` scheme is skipped). A component is a generic name component (type
//! 8) unless it starts with a decimal type number and `=` (`1=...`,
//! `32=...`, type 1 to 65535). Its value is percent-encoded: `%XX` is the
//! byte XX; other characters stand for their UTF-8 bytes. A value made only
//! of periods is written with three more periods (`...` is the empty
//! component, `....` a single period); `.` and `..` alone are errors, as
//! is an empty component (`/a//b`).

use std::fmt::Write;

use super::fib::{Component, MAX_COMPONENTS};

/// The generic name component's TLV-TYPE.
const GENERIC: u16 = 8;

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// One component's text.
fn parse_component(s: &str) -> Result<Component, String> {
    let (typ, text) = match s.split_once('=') {
        Some((t, v)) if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => match t.parse::<u16>() {
            Ok(n) if n >= 1 => (n, v),
            _ => return Err(format!("component `{s}`: type {t} is not from 1 to 65535")),
        },
        _ => (GENERIC, s),
    };
    let mut value = Vec::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            match (b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) {
                (Some(h), Some(l)) => value.push(h << 4 | l),
                _ => return Err(format!("component `{s}`: `%` not followed by two hex digits")),
            }
            i += 3;
        } else {
            value.push(b[i]);
            i += 1;
        }
    }
    if text.is_empty() {
        return Err("an empty component (write `...` for a component with no bytes)".to_string());
    }
    if text.bytes().all(|c| c == b'.') {
        if text.len() < 3 {
            return Err(format!("component `{s}`: `.` and `..` are not components (`...` is the empty one)"));
        }
        value.truncate(text.len() - 3);
    }
    Ok(Component { typ, value })
}

/// A name written as a URI (see the module documentation).
pub fn parse_name(text: &str) -> Result<Vec<Component>, String> {
    let t = text.strip_prefix("ndn:").unwrap_or(text);
    let Some(rest) = t.strip_prefix('/') else {
        return Err(format!("`{text}` does not start with `/`"));
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() {
        return Ok(Vec::new());
    }
    let name = rest.split('/').map(parse_component).collect::<Result<Vec<_>, _>>().map_err(|e| format!("`{text}`: {e}"))?;
    if name.len() > MAX_COMPONENTS {
        return Err(format!("`{text}`: {} components, more than {MAX_COMPONENTS}", name.len()));
    }
    Ok(name)
}

/// `name` as a URI that [`parse_name`] reads back.
pub fn format_name(name: &[Component]) -> String {
    if name.is_empty() {
        return "/".to_string();
    }
    let mut s = String::new();
    for c in name {
        s.push('/');
        if c.typ != GENERIC {
            let _ = write!(s, "{}=", c.typ);
        }
        for &b in &c.value {
            if unreserved(b) {
                s.push(b as char);
            } else {
                let _ = write!(s, "%{b:02X}");
            }
        }
        if c.value.iter().all(|&b| b == b'.') {
            s.push_str("...");
        }
    }
    s
}

/// One prefix of a prefix file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameRoute {
    /// The prefix's components.
    pub prefix: Vec<Component>,
    /// Its next hop.
    pub next_hop: u32,
}

/// A prefix file: one `NAME NEXTHOP` per line (see the module
/// documentation of `names`), with each route's 1-based line.
pub fn parse_prefixes(text: &str) -> Result<Vec<(usize, NameRoute)>, String> {
    prefix_lines(text).collect()
}

/// The routes of a prefix file one line at a time (blank and comment
/// lines skipped): what `load` reads twice, checking the whole file before
/// adding anything without holding every route at once.
pub fn prefix_lines(text: &str) -> impl Iterator<Item = Result<(usize, NameRoute), String>> + '_ {
    text.lines().enumerate().filter_map(|(i, line)| {
        let content = line.split('#').next().unwrap_or("").trim();
        (!content.is_empty()).then(|| parse_line(content).map(|r| (i + 1, r)).map_err(|m| format!("line {}: {m}", i + 1)))
    })
}

fn parse_line(content: &str) -> Result<NameRoute, String> {
    let mut fields = content.split_whitespace();
    let name = parse_name(fields.next().expect("not empty"))?;
    let next_hop = match fields.next() {
        Some(h) => h.parse::<u32>().map_err(|_| format!("next hop `{h}` is not a number from 0 to {}", u32::MAX))?,
        None => return Err(format!("`{content}`: no next hop")),
    };
    if let Some(extra) = fields.next() {
        return Err(format!("unexpected `{extra}` after the next hop"));
    }
    Ok(NameRoute { prefix: name, next_hop })
}
