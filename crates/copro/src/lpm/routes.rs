//! The route file format: one route per line, `PREFIX[/LEN] NEXTHOP`.
//!
//! `#` starts a comment (to the end of the line); blank lines are ignored;
//! fields are separated by spaces or tabs. A missing `/LEN` means a host
//! route (/32, /128). The next hop is a decimal integer below 2^24. The
//! address must have no bits set beyond the length (`10.0.0.1/8` is an
//! error, as with `ip route`) and be of the table's family. A later line for
//! the same prefix replaces the earlier one. Errors name the 1-based line
//! and the offending text.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use super::table::MAX_NEXT_HOP;

/// An address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4: 32-bit addresses.
    Ipv4,
    /// IPv6: 128-bit addresses.
    Ipv6,
}

impl Family {
    /// Address width in bits.
    pub fn bits(self) -> u8 {
        match self {
            Family::Ipv4 => 32,
            Family::Ipv6 => 128,
        }
    }

    /// The family of an address.
    pub fn of(addr: IpAddr) -> Family {
        match addr {
            IpAddr::V4(_) => Family::Ipv4,
            IpAddr::V6(_) => Family::Ipv6,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::Ipv4 => "ipv4",
            Family::Ipv6 => "ipv6",
        })
    }
}

impl FromStr for Family {
    type Err = String;

    /// `ipv4` or `ipv6`.
    fn from_str(s: &str) -> Result<Family, String> {
        match s {
            "ipv4" => Ok(Family::Ipv4),
            "ipv6" => Ok(Family::Ipv6),
            _ => Err(format!("family `{s}` is neither `ipv4` nor `ipv6`")),
        }
    }
}

/// One route: a prefix and its next hop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Route {
    /// The prefix's address (no bits set beyond `len`).
    pub addr: IpAddr,
    /// The prefix length.
    pub len: u8,
    /// The next hop (below 2^24).
    pub next_hop: u32,
}

impl Route {
    /// Whether `addr` lies in the prefix (never for another family).
    pub fn matches(&self, addr: IpAddr) -> bool {
        match (self.addr, addr) {
            (IpAddr::V4(p), IpAddr::V4(a)) => prefix_mask(32, self.len) as u32 & u32::from(a) == u32::from(p),
            (IpAddr::V6(p), IpAddr::V6(a)) => prefix_mask(128, self.len) & u128::from(a) == u128::from(p),
            _ => false,
        }
    }
}

impl fmt::Display for Route {
    /// The route file line, without the newline: `10.0.0.0/8 1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} {}", self.addr, self.len, self.next_hop)
    }
}

/// The mask of a `len`-bit prefix of a `bits`-bit address, in the low bits.
fn prefix_mask(bits: u8, len: u8) -> u128 {
    let all = u128::MAX >> (128 - u32::from(bits));
    all & !all.checked_shr(u32::from(len)).unwrap_or(0)
}

/// Parses a route file for a table of `family`. Each prefix appears once, at
/// the position of its first line, with the next hop of its last line.
pub fn parse_routes(text: &str, family: Family) -> Result<Vec<Route>, String> {
    Ok(parse_numbered(text, family)?.into_iter().map(|(_, r)| r).collect())
}

/// [`parse_routes`], each route with the number of the line that set its next hop.
pub(crate) fn parse_numbered(text: &str, family: Family) -> Result<Vec<(usize, Route)>, String> {
    let mut routes: Vec<(usize, Route)> = Vec::new();
    let mut index: HashMap<(IpAddr, u8), usize> = HashMap::new();
    for (n, r) in parse_lines(text, family)? {
        match index.get(&(r.addr, r.len)) {
            Some(&at) => routes[at] = (n, r),
            None => {
                index.insert((r.addr, r.len), routes.len());
                routes.push((n, r));
            }
        }
    }
    Ok(routes)
}

/// Every route line of a route file for a table of `family`, in file
/// order, with its line number: a prefix that appears twice is there twice.
pub(crate) fn parse_lines(text: &str, family: Family) -> Result<Vec<(usize, Route)>, String> {
    let mut routes = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if family == Family::Ipv4 {
            if let Some(r) = plain_ipv4_line(line.as_bytes()) {
                routes.push((n, r));
                continue;
            }
        }
        if let Some(r) = parse_line(line, family).map_err(|e| format!("line {n}: {e}"))? {
            routes.push((n, r));
        }
    }
    Ok(routes)
}

fn parse_line(line: &str, family: Family) -> Result<Option<Route>, String> {
    let content = line.split('#').next().unwrap_or("");
    let mut fields = content.split([' ', '\t', '\r']).filter(|f| !f.is_empty());
    let Some(prefix) = fields.next() else { return Ok(None) };
    let (addr_text, len_text) = match prefix.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (prefix, None),
    };
    let addr =
        if addr_text.contains(':') { addr_text.parse::<Ipv6Addr>().map(IpAddr::V6) } else { addr_text.parse::<Ipv4Addr>().map(IpAddr::V4) }
            .map_err(|_| format!("bad address `{addr_text}`"))?;
    if Family::of(addr) != family {
        return Err(format!("`{prefix}` is an {} route but the table is {family}", Family::of(addr)));
    }
    let bits = family.bits();
    let len = match len_text {
        None => bits,
        Some(l) => match decimal(l, 3) {
            Some(v) if v <= u32::from(bits) => v as u8,
            _ => return Err(format!("prefix length `{l}` out of range (0..={bits})")),
        },
    };
    let value = match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    };
    if value & !prefix_mask(bits, len) != 0 {
        let net = match addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & prefix_mask(32, len) as u32)),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & prefix_mask(128, len))),
        };
        return Err(format!("`{prefix}` has host bits set beyond /{len} (the network is {net}/{len})"));
    }
    let Some(nh_text) = fields.next() else { return Err(format!("missing next hop after `{prefix}`")) };
    let next_hop = match decimal(nh_text, 8) {
        Some(v) if v <= MAX_NEXT_HOP => v,
        _ => return Err(format!("bad next hop `{nh_text}` (a decimal integer below 2^24)")),
    };
    if let Some(extra) = fields.next() {
        return Err(format!("trailing garbage `{extra}`"));
    }
    Ok(Some(Route { addr, len, next_hop }))
}

/// The common IPv4 route line, `a.b.c.d/len hop` (the octets without
/// leading zeros; blanks after the prefix and at the end; no comment), in
/// one pass over its bytes: a route file of half a million lines spent
/// most of its load here through [`parse_line`]'s general path (about
/// 90 ns a line). `None` for any other line, which [`parse_line`] then
/// takes: it accepts every line this does, with the same route.
fn plain_ipv4_line(line: &[u8]) -> Option<Route> {
    // 1 to `max` digits from `*at` (no leading zero where `strict`), as a number.
    fn number(line: &[u8], at: &mut usize, max: usize, strict: bool) -> Option<u32> {
        let start = *at;
        let mut v = 0u32;
        while *at < line.len() && line[*at].is_ascii_digit() && *at - start < max {
            v = v * 10 + u32::from(line[*at] - b'0');
            *at += 1;
        }
        let digits = *at - start;
        let more = line.get(*at).is_some_and(u8::is_ascii_digit);
        (digits > 0 && !more && !(strict && digits > 1 && line[start] == b'0')).then_some(v)
    }
    let mut at = 0;
    let mut addr = 0u32;
    for k in 0..4 {
        let o = number(line, &mut at, 3, true).filter(|&o| o <= 255)?;
        addr = addr << 8 | o;
        if k < 3 {
            (line.get(at) == Some(&b'.')).then_some(())?;
            at += 1;
        }
    }
    let len = match line.get(at) {
        Some(b'/') => {
            at += 1;
            number(line, &mut at, 3, false).filter(|&l| l <= 32)? as u8
        }
        _ => 32,
    };
    if addr & !(prefix_mask(32, len) as u32) != 0 {
        return None;
    }
    let blank = |b: &u8| matches!(b, b' ' | b'\t' | b'\r');
    let gap = line[at..].iter().take_while(|b| blank(b)).count();
    if gap == 0 {
        return None;
    }
    at += gap;
    let next_hop = number(line, &mut at, 8, false).filter(|&h| h <= MAX_NEXT_HOP)?;
    line[at..].iter().all(blank).then_some(Route { addr: IpAddr::V4(Ipv4Addr::from(addr)), len, next_hop })
}

/// A string of 1 to `max_digits` ASCII digits as a number.
fn decimal(s: &str, max_digits: usize) -> Option<u32> {
    if s.is_empty() || s.len() > max_digits || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(s: &str, len: u8, nh: u32) -> Route {
        Route { addr: s.parse().unwrap(), len, next_hop: nh }
    }

    #[test]
    fn parses_routes() {
        let text = "# a table\n10.0.0.0/8 1\n\n  10.1.2.3\t5   # host\n0.0.0.0/0 0\n10.0.0.0/8 7\r\n192.168.0.0/16 16777215";
        let routes = parse_routes(text, Family::Ipv4).unwrap();
        assert_eq!(
            routes,
            vec![route("10.0.0.0", 8, 7), route("10.1.2.3", 32, 5), route("0.0.0.0", 0, 0), route("192.168.0.0", 16, 16777215)]
        );
        assert_eq!(parse_numbered(text, Family::Ipv4).unwrap()[0].0, 6);
        let v6 = parse_routes("2001:db8::/32 3\n::/0 1\n::1 2\n", Family::Ipv6).unwrap();
        assert_eq!(v6, vec![route("2001:db8::", 32, 3), route("::", 0, 1), route("::1", 128, 2)]);
        assert_eq!(route("10.0.0.0", 8, 1).to_string(), "10.0.0.0/8 1");
        assert!(route("10.0.0.0", 8, 1).matches("10.255.0.1".parse().unwrap()));
        assert!(!route("10.0.0.0", 8, 1).matches("11.0.0.0".parse().unwrap()));
        assert!(route("0.0.0.0", 0, 1).matches("11.0.0.0".parse().unwrap()));
        assert!(!route("0.0.0.0", 0, 1).matches("::".parse().unwrap()));
        assert!(route("2001:db8::", 32, 1).matches("2001:db8:ffff::1".parse().unwrap()));
        assert!(route("::1", 128, 1).matches("::1".parse().unwrap()));
        assert!(!route("::1", 128, 1).matches("::2".parse().unwrap()));
    }

    /// The one-pass IPv4 line parser takes the usual lines, and agrees with
    /// the general one on every line it takes.
    #[test]
    fn the_plain_ipv4_line_parser_agrees_with_the_general_one() {
        let mut lines: Vec<String> = [
            "10.0.0.0/8 1",
            "0.0.0.0/0 0",
            "10.1.2.3 5",
            "10.1.2.3\t5\r",
            "192.168.0.0/16 16777215",
            "192.168.0.0/16 16777216",
            "10.0.0.1/8 1",
            "010.0.0.0/8 1",
            "10.0.0.0/08 1",
            "10.0.0.0/33 1",
            "10.0.0.0/8 01",
            "10.0.0.0/8",
            "10.0.0.0/8 1 2",
            "10.0.0.0/8 1 # c",
            "  10.0.0.0/8 1",
            "10.0.0.0/8  1  ",
            "10.0.0/8 1",
            "10.0.0.0.0/8 1",
            "256.0.0.0/8 1",
            "10.0.0.0/ 1",
            "10.0.0.0/+8 1",
            "10.0.0.0/8 +1",
            "10.0.0.0/8 123456789",
            "10.0.0.0/0008 1",
            "10.0.0.0/8x 1",
            "10.0.0.0/8 1x",
            "1.2.3.4/32 0",
            "0.0.0.0 0",
            "::/0 1",
            "",
            "# only",
            "10.0.0.0/8\u{a0}1",
            "1111.0.0.0/8 1",
            "10.0.0.0/8 000000001",
        ]
        .map(String::from)
        .to_vec();
        for i in 0..3000u32 {
            let x = i.wrapping_mul(2_654_435_761);
            let len = x % 33;
            let addr = x & (prefix_mask(32, len as u8) as u32);
            lines.push(format!("{}/{len} {}", Ipv4Addr::from(addr), x >> 12));
            lines.push(format!("{}/{} {}", Ipv4Addr::from(x), (x >> 7) % 40, x % 1000));
        }
        let mut taken = 0;
        for l in &lines {
            let general = parse_line(l, Family::Ipv4);
            match plain_ipv4_line(l.as_bytes()) {
                Some(r) => {
                    assert_eq!(general, Ok(Some(r)), "{l:?}");
                    taken += 1;
                }
                // Only the usual form must be taken: a prefix with its length, a blank, a hop.
                None => assert!(
                    general.is_err() || l.trim_start() != l || l.contains('#') || !l.contains('/') && !l.contains(' '),
                    "{l:?}: {general:?}, not taken"
                ),
            }
        }
        assert!(taken > 3000, "{taken} of {} lines taken", lines.len());
    }

    #[test]
    fn rejects_bad_lines() {
        let cases: &[(&str, Family, &str)] = &[
            ("10.0.0.0/8 1\n10.0.0/8 1", Family::Ipv4, "line 2: bad address `10.0.0`"),
            ("010.0.0.0/8 1", Family::Ipv4, "bad address `010.0.0.0`"),
            ("10.0.0.0/33 1", Family::Ipv4, "prefix length `33` out of range"),
            ("10.0.0.0/+8 1", Family::Ipv4, "prefix length `+8`"),
            ("10.0.0.0/ 1", Family::Ipv4, "prefix length ``"),
            ("10.0.0.0/8/8 1", Family::Ipv4, "prefix length `8/8`"),
            ("::/129 1", Family::Ipv6, "prefix length `129` out of range (0..=128)"),
            ("10.0.0.1/8 1", Family::Ipv4, "`10.0.0.1/8` has host bits set beyond /8 (the network is 10.0.0.0/8)"),
            ("2001:db8::1/32 1", Family::Ipv6, "host bits"),
            ("2001:db8::/32 1", Family::Ipv4, "line 1: `2001:db8::/32` is an ipv6 route but the table is ipv4"),
            ("10.0.0.0/8 1", Family::Ipv6, "is an ipv4 route but the table is ipv6"),
            ("10.0.0.0/8", Family::Ipv4, "missing next hop"),
            ("10.0.0.0/8 16777216", Family::Ipv4, "bad next hop `16777216`"),
            ("10.0.0.0/8 -1", Family::Ipv4, "bad next hop `-1`"),
            ("10.0.0.0/8 99999999999999999999", Family::Ipv4, "bad next hop"),
            ("10.0.0.0/8 0x1", Family::Ipv4, "bad next hop"),
            ("10.0.0.0/8 1 2", Family::Ipv4, "trailing garbage `2`"),
            ("10.0.0.0/8 1 # ok\n\n# x\n10.0.0.0/8 1 via", Family::Ipv4, "line 4: trailing garbage `via`"),
        ];
        for (text, family, want) in cases {
            let err = parse_routes(text, *family).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err:?} should contain {want:?}");
            assert!(err.starts_with("line "), "{err}");
        }
        assert_eq!(parse_routes("", Family::Ipv4).unwrap(), vec![]);
        assert_eq!(parse_routes(" # only a comment\n\t\n", Family::Ipv6).unwrap(), vec![]);
        assert_eq!("ipv6".parse::<Family>(), Ok(Family::Ipv6));
        assert!("IPv4".parse::<Family>().is_err());
    }
}
