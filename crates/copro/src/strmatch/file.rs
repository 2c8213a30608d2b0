//! The pattern file format and Snort-style content strings (see the module
//! documentation of [`crate::strmatch`]).

use std::collections::HashSet;
use std::fmt::Write as _;

use super::{Pattern, MAX_PATTERNS, MAX_PATTERN_LEN};

/// Parses a Snort-style content string, quotes included: `"GET |20 2f|"`.
///
/// Between the quotes, bytes stand for themselves except: `|hex bytes|`
/// sections (pairs of hex digits, spaces allowed between pairs), and the
/// escapes `\"`, `\\`, `\|`, `\;` and `\:`. The result may be empty (callers that
/// need a pattern reject that).
pub fn parse_content(text: &str) -> Result<Vec<u8>, String> {
    let inner = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .filter(|_| text.len() >= 2)
        .ok_or_else(|| format!("content `{}` must be a double-quoted string", shorten(text)))?;
    parse_content_body(inner)
}

/// Parses the text between the quotes of a content string (see [`parse_content`]).
pub fn parse_content_body(body: &str) -> Result<Vec<u8>, String> {
    let b = body.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                let Some(&c) = b.get(i + 1) else { return Err("content ends with a lone `\\`".to_string()) };
                if !matches!(c, b'"' | b'\\' | b'|' | b';' | b':') {
                    return Err(format!("unknown escape `\\{}` in content (known: \\\" \\\\ \\| \\; \\:)", char_at(body, i + 1)));
                }
                out.push(c);
                i += 2;
            }
            b'"' => return Err(format!("unescaped `\"` at column {} of content (write `\\\"`)", i + 1)),
            b'|' => {
                let end = b[i + 1..].iter().position(|&c| c == b'|').map(|p| i + 1 + p).ok_or("unterminated `|hex|` section in content")?;
                let hex = &body[i + 1..end];
                let before = out.len();
                let mut digits = hex.bytes().peekable();
                while let Some(c) = digits.next() {
                    if c == b' ' || c == b'\t' {
                        continue;
                    }
                    let lo = digits.next().filter(|d| d.is_ascii_hexdigit());
                    match (hex_val(c), lo.and_then(hex_val)) {
                        (Some(h), Some(l)) => out.push(h << 4 | l),
                        _ => return Err(format!("bad hex section `|{hex}|` in content (pairs of hex digits, separated by spaces)")),
                    }
                }
                if out.len() == before {
                    return Err("empty `||` hex section in content".to_string());
                }
                i = end + 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

fn hex_val(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

fn char_at(s: &str, i: usize) -> char {
    s.get(i..).and_then(|t| t.chars().next()).unwrap_or('?')
}

fn shorten(s: &str) -> String {
    if s.chars().count() <= 40 {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(40).collect::<String>())
    }
}

/// Formats bytes as a content string [`parse_content`] reads back: printable
/// ASCII as itself (with `"`, `\`, `|`, `;` escaped), other bytes in `|hex|` sections.
pub fn format_content(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() + 2);
    s.push('"');
    let mut in_hex = false;
    for &c in bytes {
        let printable = (0x20..0x7f).contains(&c);
        if printable && in_hex {
            s.push('|');
            in_hex = false;
        }
        if printable {
            if matches!(c, b'"' | b'\\' | b'|' | b';') {
                s.push('\\');
            }
            s.push(c as char);
        } else {
            s.push(if in_hex { ' ' } else { '|' });
            in_hex = true;
            let _ = write!(s, "{c:02X}");
        }
    }
    if in_hex {
        s.push('|');
    }
    s.push('"');
    s
}

/// Parses a pattern file: one `ID GROUP CONTENT [nocase]` per line; blank
/// lines and lines starting with `#` are skipped. Errors name the 1-based line.
pub fn parse_pattern_file(text: &str) -> Result<Vec<Pattern>, String> {
    let mut out = Vec::new();
    let mut ids = HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let p = parse_line(line).map_err(|e| format!("line {}: {e}", n + 1))?;
        if !ids.insert(p.id) {
            return Err(format!("line {}: duplicate pattern id {}", n + 1, p.id));
        }
        if out.len() >= MAX_PATTERNS {
            return Err(format!("line {}: more than {MAX_PATTERNS} patterns", n + 1));
        }
        out.push(p);
    }
    Ok(out)
}

fn parse_line(line: &str) -> Result<Pattern, String> {
    let (id, rest) = number(line, "pattern id")?;
    let (group, rest) = number(rest, "group")?;
    let rest = rest.trim_start();
    if !rest.starts_with('"') {
        return Err("expected `ID GROUP \"CONTENT\" [nocase]`".to_string());
    }
    // The closing quote is the first `"` not escaped by a backslash.
    let b = rest.as_bytes();
    let mut i = 1;
    let close = loop {
        match b.get(i) {
            None => return Err("unterminated content string".to_string()),
            Some(b'\\') => i += 2,
            Some(b'"') => break i,
            Some(_) => i += 1,
        }
    };
    let bytes = parse_content(&rest[..=close])?;
    let nocase = match rest[close + 1..].trim() {
        "" => false,
        "nocase" => true,
        other => return Err(format!("unexpected `{}` after the content (only `nocase` may follow)", shorten(other))),
    };
    if bytes.is_empty() {
        return Err("empty pattern".to_string());
    }
    if bytes.len() > MAX_PATTERN_LEN {
        return Err(format!("pattern of {} bytes is longer than {MAX_PATTERN_LEN}", bytes.len()));
    }
    Ok(Pattern { id, group, bytes, nocase })
}

fn number<'a>(s: &'a str, what: &str) -> Result<(u32, &'a str), String> {
    let s = s.trim_start();
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    let tok = &s[..end];
    if tok.is_empty() {
        return Err(format!("missing {what}"));
    }
    let v = tok.parse::<u32>().map_err(|_| format!("{what} `{}` is not a number from 0 to {}", shorten(tok), u32::MAX))?;
    Ok((v, &s[end..]))
}

/// Writes patterns in the file format [`parse_pattern_file`] reads.
pub fn format_pattern_file(patterns: &[Pattern]) -> String {
    let mut s = String::new();
    for p in patterns {
        let _ = writeln!(s, "{} {} {}{}", p.id, p.group, format_content(&p.bytes), if p.nocase { " nocase" } else { "" });
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn content_strings() {
        assert_eq!(parse_content(r#""GET |20 2f|""#).unwrap(), b"GET  /");
        assert_eq!(parse_content(r#""|0d0a|x|00|""#).unwrap(), b"\r\nx\0");
        assert_eq!(parse_content(r#""a\"b\\c\|d\;""#).unwrap(), b"a\"b\\c|d;");
        assert_eq!(parse_content(r#""|  41  42 |""#).unwrap(), b"AB");
        assert_eq!(parse_content(r#""""#).unwrap(), b"");
        for bad in [r#""|4|""#, r#""|41"#, r#""|zz|""#, r#""||""#, r#""\n""#, r#""a\""#, "abc", "\"", r#""a"b""#, r#""|4 1|""#] {
            assert!(parse_content(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn file_lines_and_errors() {
        let text = "# comment\n\n1 7 \"GET |20|\" nocase\n  2 7 \"x y\\\"z\"  \n3 0 \"|ff|\"\n";
        let p = parse_pattern_file(text).unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!((p[0].id, p[0].group, p[0].bytes.as_slice(), p[0].nocase), (1, 7, &b"GET  "[..], true));
        assert_eq!(p[1].bytes, b"x y\"z");
        assert_eq!(p[2].bytes, [0xff]);
        let err = |t: &str| parse_pattern_file(t).unwrap_err();
        assert!(err("1 1 \"a\"\n2 1 \"\"\n").starts_with("line 2: empty pattern"));
        assert!(err("1 1 \"a\"\n\n1 2 \"b\"\n").starts_with("line 3: duplicate pattern id 1"));
        assert!(err("x 1 \"a\"").starts_with("line 1: pattern id"));
        assert!(err("1 4294967296 \"a\"").starts_with("line 1: group"));
        assert!(err("1 1 \"a\" nocasex").starts_with("line 1: unexpected"));
        assert!(err("1 1 \"a").starts_with("line 1: unterminated"));
        assert!(err("1 1 a").starts_with("line 1: expected"));
        assert!(err("1 1").starts_with("line 1: expected"));
        assert!(err("1").starts_with("line 1: missing group"));
        let long = format!("1 1 \"{}\"", "a".repeat(MAX_PATTERN_LEN + 1));
        assert!(err(&long).contains("longer than"));
        let ok = format!("1 1 \"{}\"", "a".repeat(MAX_PATTERN_LEN));
        assert!(parse_pattern_file(&ok).is_ok());
    }

    proptest! {
        #[test]
        fn dump_round_trips(pats in proptest::collection::vec((any::<u32>(), any::<u32>(), proptest::collection::vec(any::<u8>(), 1..20), any::<bool>()), 0..20)) {
            let mut seen = HashSet::new();
            let pats: Vec<Pattern> = pats.into_iter().filter(|p| seen.insert(p.0)).map(|(id, group, bytes, nocase)| Pattern { id, group, bytes, nocase }).collect();
            let text = format_pattern_file(&pats);
            prop_assert_eq!(parse_pattern_file(&text).unwrap(), pats);
        }

        #[test]
        fn content_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            prop_assert_eq!(parse_content(&format_content(&bytes)).unwrap(), bytes);
        }

        #[test]
        fn hostile_lines_never_panic(s in "\\PC{0,60}") {
            let _ = parse_pattern_file(&s);
            let _ = parse_content(&s);
        }
    }
}
