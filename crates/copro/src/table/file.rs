//! The `table` file format: parsing of `KEY VALUE` lines and writing them
//! back (see the `table` module documentation for the format).

use std::fmt::Write as _;

/// At most this many characters of a bad token are quoted in an error.
const QUOTE: usize = 40;

/// A token for an error message, shortened if long.
fn quoted(tok: &str) -> String {
    match tok.char_indices().nth(QUOTE) {
        Some((i, _)) => format!("`{}...`", &tok[..i]),
        None => format!("`{tok}`"),
    }
}

/// Hex digits, optionally in groups separated by `:`, `-` or `.`, each group
/// an even number of digits, into `out`; returns the number of bytes.
fn parse_hex(s: &str, out: &mut [u8; 16]) -> Result<usize, String> {
    let mut n = 0;
    for group in s.split([':', '-', '.']) {
        if group.is_empty() {
            return Err("empty byte group".into());
        }
        if group.len() % 2 != 0 {
            return Err(format!("byte group `{group}` has an odd number of hex digits"));
        }
        for pair in group.as_bytes().chunks(2) {
            let hi = (pair[0] as char).to_digit(16);
            let lo = (pair[1] as char).to_digit(16);
            let (Some(hi), Some(lo)) = (hi, lo) else {
                return Err("not hex digits".into());
            };
            if n == out.len() {
                return Err(format!("more than {} bytes", out.len()));
            }
            out[n] = (hi << 4 | lo) as u8;
            n += 1;
        }
    }
    Ok(n)
}

/// Four decimal numbers 0..=255 separated by dots.
fn parse_ipv4(s: &str) -> Option<[u8; 4]> {
    let mut out = [0u8; 4];
    let mut parts = s.split('.');
    for b in &mut out {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        *b = p.parse().ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// Parses a key of exactly `size` bytes into `out`.
pub(crate) fn parse_key(tok: &str, size: usize, out: &mut [u8; 16]) -> Result<(), String> {
    if size == 4 {
        if let Some(ip) = parse_ipv4(tok) {
            out[..4].copy_from_slice(&ip);
            return Ok(());
        }
    }
    let hex = tok.strip_prefix("0x").or_else(|| tok.strip_prefix("0X")).unwrap_or(tok);
    let n = parse_hex(hex, out).map_err(|e| format!("key {}: {e}", quoted(tok)))?;
    if n != size {
        return Err(format!("key {} has {n} bytes, the table's keys have {size}", quoted(tok)));
    }
    Ok(())
}

/// Parses a value of exactly `size` bytes into `out`: `0x`-prefixed or
/// separated hex bytes, or a decimal integer stored big-endian.
pub(crate) fn parse_value(tok: &str, size: usize, out: &mut [u8; 16]) -> Result<(), String> {
    let hex = tok.strip_prefix("0x").or_else(|| tok.strip_prefix("0X"));
    if hex.is_some() || tok.contains([':', '-', '.']) {
        let n = parse_hex(hex.unwrap_or(tok), out).map_err(|e| format!("value {}: {e}", quoted(tok)))?;
        if n != size {
            return Err(format!("value {} has {n} bytes, the table's values have {size} (or write a decimal number)", quoted(tok)));
        }
        return Ok(());
    }
    if tok.is_empty() || !tok.bytes().all(|c| c.is_ascii_digit()) {
        return Err(format!("value {} is neither a decimal number nor 0x-prefixed hex", quoted(tok)));
    }
    let v: u128 = tok.parse().map_err(|_| format!("value {} does not fit in {size} bytes", quoted(tok)))?;
    if size < 16 && v >> (8 * size) != 0 {
        return Err(format!("value {} does not fit in {size} bytes", quoted(tok)));
    }
    out[..size].copy_from_slice(&v.to_be_bytes()[16 - size..]);
    Ok(())
}

/// A parsed line: key and value bytes, in the first `key_size` / `value_size` bytes.
pub(crate) type Line = ([u8; 16], [u8; 16]);

/// Parses one line; `Ok(None)` for blank and comment lines.
pub(crate) fn parse_line(line: &str, key_size: usize, value_size: usize) -> Result<Option<Line>, String> {
    let line = line.split('#').next().unwrap_or("");
    let mut toks = line.split_whitespace();
    let Some(ktok) = toks.next() else {
        return Ok(None);
    };
    let vtok = toks.next();
    if toks.next().is_some() {
        return Err(format!("expected `KEY{}`, found more fields", if value_size == 0 { "" } else { " VALUE" }));
    }
    let (mut k, mut v) = ([0u8; 16], [0u8; 16]);
    parse_key(ktok, key_size, &mut k)?;
    match (vtok, value_size) {
        (None, 0) => {}
        (Some(t), 0) => return Err(format!("unexpected value {}: the table's values have 0 bytes", quoted(t))),
        (None, _) => return Err(format!("key without a value (the table's values have {value_size} bytes)")),
        (Some(t), n) => parse_value(t, n, &mut v)?,
    }
    Ok(Some((k, v)))
}

/// Appends one entry as a line: the key as plain hex, the value as `0x` hex.
pub(crate) fn write_line(out: &mut String, key: &[u8], value: &[u8]) {
    for b in key {
        let _ = write!(out, "{b:02x}");
    }
    if !value.is_empty() {
        out.push_str(" 0x");
        for b in value {
            let _ = write!(out, "{b:02x}");
        }
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tok: &str, size: usize) -> Result<Vec<u8>, String> {
        let mut k = [0; 16];
        parse_key(tok, size, &mut k).map(|()| k[..size].to_vec())
    }

    fn value(tok: &str, size: usize) -> Result<Vec<u8>, String> {
        let mut v = [0; 16];
        parse_value(tok, size, &mut v).map(|()| v[..size].to_vec())
    }

    #[test]
    fn keys() {
        let mac = vec![0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff];
        for t in ["aa:bb:cc:dd:ee:ff", "aabbccddeeff", "AA-BB-CC-DD-EE-FF", "aabb.ccdd.eeff", "0xaabbccddeeff"] {
            assert_eq!(key(t, 6).unwrap(), mac, "{t}");
        }
        assert_eq!(key("10.0.0.1", 4).unwrap(), vec![10, 0, 0, 1]);
        assert_eq!(key("10.20.30.40", 4).unwrap(), vec![10, 20, 30, 40], "dotted quad wins over hex groups");
        assert_eq!(key("0a000001", 4).unwrap(), vec![10, 0, 0, 1]);
        assert_eq!(key("0a.00.00.01", 4).unwrap(), vec![10, 0, 0, 1]);
        for bad in
            ["10.0.0.1", "256.0.0.1", "aa:bb", "a:bb:cc:dd:ee:ff", "aa::bb:cc:dd:ee", "aa:bb:cc:dd:ee:", "gg:bb:cc:dd:ee:ff", "", "é"]
        {
            assert!(key(bad, 6).is_err(), "{bad}");
        }
        assert!(key("256.0.0.1", 4).is_err());
        assert!(key("1.2.3", 4).is_err());
        assert!(key(&"ab".repeat(17), 16).unwrap_err().contains("more than 16"));
        assert!(key(&"ab".repeat(1000), 16).unwrap_err().len() < 200, "long tokens are shortened");
    }

    #[test]
    fn values() {
        assert_eq!(value("0x00000001", 4).unwrap(), vec![0, 0, 0, 1]);
        assert_eq!(value("00:00:00:01", 4).unwrap(), vec![0, 0, 0, 1]);
        assert_eq!(value("258", 2).unwrap(), vec![1, 2]);
        assert_eq!(value("255", 1).unwrap(), vec![255]);
        assert_eq!(value(&u128::MAX.to_string(), 16).unwrap(), vec![0xff; 16]);
        assert_eq!(value("4294967295", 4).unwrap(), vec![0xff; 4]);
        for bad in ["4294967296", "0x1", "0x0000000001", "ff", "-1", "+1", "1e3", "0x", "340282366920938463463374607431768211456"] {
            assert!(value(bad, 4).is_err(), "{bad}");
        }
        assert!(value("256", 1).is_err());
    }

    #[test]
    fn lines() {
        assert_eq!(parse_line("  # only a comment", 4, 4).unwrap(), None);
        assert_eq!(parse_line("", 4, 4).unwrap(), None);
        let (k, v) = parse_line("1.2.3.4 7 # trailing", 4, 4).unwrap().unwrap();
        assert_eq!((&k[..4], &v[..4]), (&[1, 2, 3, 4][..], &[0, 0, 0, 7][..]));
        assert!(parse_line("1.2.3.4", 4, 4).is_err());
        assert!(parse_line("1.2.3.4 1 2", 4, 4).is_err());
        assert!(parse_line("1.2.3.4 1", 4, 0).is_err());
        assert!(parse_line("1.2.3.4", 4, 0).unwrap().is_some());
        let mut s = String::new();
        write_line(&mut s, &[1, 0xab], &[0, 0xff]);
        write_line(&mut s, &[2], &[]);
        assert_eq!(s, "01ab 0x00ff\n02\n");
    }
}
