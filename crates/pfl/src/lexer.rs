//! Tokens of pcap-filter(7) expressions, as libpcap's scanner forms them:
//! words (keywords, names, numbers, dotted and colon-separated addresses)
//! and operators, each with its byte span for error carets.

use crate::FilterError;
use std::net::Ipv6Addr;
use std::ops::Range;

/// One token and where it is in the expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// What it is.
    pub kind: Tok,
    /// Byte range in the expression.
    pub span: Range<usize>,
}

/// Token kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tok {
    /// A number: decimal, `0x` hexadecimal or leading-zero octal.
    Num(u32),
    /// A dotted IPv4 address with 1 to 4 parts (`10`, `10.1`, `10.1.2.3`): value and number of bits given.
    HostId(u32, u32),
    /// An IPv6 address.
    Host6(Ipv6Addr),
    /// A MAC address.
    Mac([u8; 6]),
    /// A word: a keyword or a name (`tcp`, `host`, `tcp-syn`, `http`, `20-25`).
    Word(String),
    /// A `\`-escaped word: always a name, never a keyword (`\tcp`).
    Escaped(String),
    /// An operator or punctuation: `( ) [ ] : + - * / % & | ^ << >> = == != < <= > >= ! && ||`.
    Op(&'static str),
}

const OPS: [&str; 23] =
    ["&&", "||", "<<", ">>", "==", "!=", "<=", ">=", "(", ")", "[", "]", ":", "+", "-", "*", "/", "%", "&", "|", "^", "=", "!"];
const OPS_TAIL: [&str; 2] = ["<", ">"];

fn is_word_start(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}
fn is_word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'-'
}

/// Parses a number as libpcap does: `0x` hex, leading `0` octal, else decimal; at most 32 bits.
pub fn parse_number(s: &str) -> Option<u32> {
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() {
        return None;
    }
    u32::from_str_radix(digits, radix).ok()
}

fn parse_dotted(s: &str) -> Option<(u32, u32)> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() > 4 || parts.iter().any(|p| p.is_empty() || !p.bytes().all(|c| c.is_ascii_digit())) {
        return None;
    }
    let mut v = 0u32;
    for p in &parts {
        let n: u32 = p.parse().ok()?;
        if n > 255 {
            return None;
        }
        v = (v << 8) | n;
    }
    Some((v, 8 * parts.len() as u32))
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let sep = s.bytes().find(|c| matches!(c, b':' | b'-' | b'.'))?;
    let parts: Vec<&str> = s.split(sep as char).collect();
    let mut mac = [0u8; 6];
    if parts.len() == 6 {
        for (m, p) in mac.iter_mut().zip(&parts) {
            if p.is_empty() || p.len() > 2 || !p.bytes().all(|c| c.is_ascii_hexdigit()) {
                return None;
            }
            *m = u8::from_str_radix(p, 16).ok()?;
        }
        Some(mac)
    } else if parts.len() == 3 && sep == b'.' {
        // Cisco style: xxxx.xxxx.xxxx
        for (i, p) in parts.iter().enumerate() {
            if p.len() != 4 || !p.bytes().all(|c| c.is_ascii_hexdigit()) {
                return None;
            }
            let w = u16::from_str_radix(p, 16).ok()?;
            mac[2 * i] = (w >> 8) as u8;
            mac[2 * i + 1] = w as u8;
        }
        Some(mac)
    } else {
        None
    }
}

/// Splits an expression into tokens.
pub fn tokenize(src: &str) -> Result<Vec<Token>, FilterError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        // An address with colons: IPv6 or MAC. Taken only if it parses.
        if c.is_ascii_hexdigit() || c == b':' {
            let mut j = i;
            while j < b.len() && (b[j].is_ascii_hexdigit() || b[j] == b':' || b[j] == b'.') {
                j += 1;
            }
            let cand = &src[i..j];
            if cand.contains(':') && (j >= b.len() || !is_word_char(b[j]) || b[j] == b'.' || b[j] == b'-') {
                let cand = cand.trim_end_matches('.');
                let j = i + cand.len();
                if let Some(mac) = parse_mac(cand) {
                    out.push(Token { kind: Tok::Mac(mac), span: i..j });
                    i = j;
                    continue;
                }
                if let Ok(a) = cand.parse::<Ipv6Addr>() {
                    out.push(Token { kind: Tok::Host6(a), span: i..j });
                    i = j;
                    continue;
                }
            }
        }
        if c == b'\\' {
            let start = i;
            i += 1;
            let ws = i;
            while i < b.len() && is_word_char(b[i]) {
                i += 1;
            }
            if ws == i {
                return Err(FilterError::new("`\\` must be followed by a name", start..start + 1));
            }
            out.push(Token { kind: Tok::Escaped(src[ws..i].to_string()), span: start..i });
            continue;
        }
        if is_word_start(c) {
            let start = i;
            while i < b.len() && is_word_char(b[i]) {
                i += 1;
            }
            // libpcap's names end in a letter, digit or dot.
            while i > start + 1 && matches!(b[i - 1], b'-') {
                i -= 1;
            }
            let w = &src[start..i];
            let kind = if w.len() == 12 && w.bytes().all(|c| c.is_ascii_hexdigit()) {
                // libpcap's scanner takes twelve hex digits as a MAC address.
                let mut mac = [0u8; 6];
                for (k, m) in mac.iter_mut().enumerate() {
                    *m = u8::from_str_radix(&w[2 * k..2 * k + 2], 16).unwrap_or(0);
                }
                Tok::Mac(mac)
            } else if let Some(n) = parse_number(w) {
                Tok::Num(n)
            } else if w.as_bytes()[0].is_ascii_digit() && w.contains('.') && parse_dotted(w).is_some() {
                let (v, bits) = parse_dotted(w).unwrap();
                Tok::HostId(v, bits)
            } else if let Some(mac) = parse_mac(w) {
                Tok::Mac(mac)
            } else if w.bytes().all(|c| c.is_ascii_digit()) || (w.as_bytes()[0].is_ascii_digit() && !w.contains('-')) {
                return Err(FilterError::new(format!("`{w}` is not a valid number or address"), start..i));
            } else {
                Tok::Word(w.to_string())
            };
            out.push(Token { kind, span: start..i });
            continue;
        }
        let rest = &src[i..];
        if let Some(op) = OPS.iter().chain(OPS_TAIL.iter()).find(|op| rest.starts_with(**op)) {
            out.push(Token { kind: Tok::Op(op), span: i..i + op.len() });
            i += op.len();
            continue;
        }
        let ch = rest.chars().next().unwrap();
        return Err(FilterError::new(format!("unexpected character `{ch}`"), i..i + ch.len_utf8()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(s: &str) -> Vec<Tok> {
        tokenize(s).unwrap().into_iter().map(|t| t.kind).collect()
    }

    #[test]
    fn words_numbers_addresses() {
        assert_eq!(
            kinds("tcp[13] & tcp-syn != 0"),
            vec![
                Tok::Word("tcp".into()),
                Tok::Op("["),
                Tok::Num(13),
                Tok::Op("]"),
                Tok::Op("&"),
                Tok::Word("tcp-syn".into()),
                Tok::Op("!="),
                Tok::Num(0)
            ]
        );
        assert_eq!(kinds("ip[0:2]")[2..5], [Tok::Num(0), Tok::Op(":"), Tok::Num(2)]);
        assert_eq!(kinds("10.1")[0], Tok::HostId(0x0a01, 16));
        assert_eq!(kinds("0x10 010")[..], [Tok::Num(16), Tok::Num(8)]);
        assert_eq!(kinds("::1")[0], Tok::Host6("::1".parse().unwrap()));
        assert_eq!(kinds("2001:db8::/32")[0], Tok::Host6("2001:db8::".parse().unwrap()));
        assert_eq!(kinds("1:2:3:4:5:ff")[0], Tok::Mac([1, 2, 3, 4, 5, 0xff]));
        assert_eq!(kinds("\\tcp")[0], Tok::Escaped("tcp".into()));
        assert_eq!(kinds("20-25")[0], Tok::Word("20-25".into()));
        assert_eq!(kinds("ip[0]-1")[4..], [Tok::Op("-"), Tok::Num(1)]);
        assert!(tokenize("ip $").is_err());
    }
}
