//! PCRE (as Snort uses it: 8-bit, not UTF, ASCII classes and case folding)
//! → regex-syntax, for the constructs whose meaning is the same on both
//! engines; anything else is routed to PCRE2 ([`Translated`] or a reason).
//!
//! The pattern is parsed into a small tree of byte sets, assertions, groups
//! and repetitions, with PCRE's rules (flags in scope, `x` whitespace,
//! `\Q…\E`, octal and `\x` escapes, POSIX classes, `{,n}`, `(?flags)` that
//! carry over later alternatives), and written back in a form where every
//! byte is explicit: literals and classes are byte sets with case folding
//! and `.` already applied, so no regex-syntax flag changes its meaning.
//!
//! Two assertions differ between the engines and are translated where that
//! is exact:
//! - PCRE's `$` without `m` (and `\Z`) also matches before a final `\n`;
//!   when nothing can follow it (last in the pattern), it becomes
//!   `(?:\z|(\n)\z)` and a match that took the marker group ends one byte
//!   earlier ([`Translated::markers`]); elsewhere: PCRE2.
//! - PCRE's multi-line `^` does not match after a `\n` that ends the
//!   subject; regex-syntax's does. Exact when every `^` is leading (nothing
//!   consumed before it) and no match is empty; otherwise PCRE2.
//!
//! One construct differs in the match it picks: a repetition (more than
//! once) of a group that can match empty. PCRE ends the loop at an empty
//! iteration and goes on; a Thompson NFA drops that path and may prefer a
//! longer one (`/(.?[^a]??)+?/G` on `\na`). Such patterns go to PCRE2.

use regex_automata::util::syntax;

/// A translated pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Translated {
    /// regex-syntax text (no flags needed: compile it with Unicode off).
    pub pattern: String,
    /// Capture groups 1..=markers are `$` markers: when one took part, the
    /// match ends one byte earlier (before the final `\n`).
    pub markers: usize,
}

/// A set of bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Set([u64; 4]);

impl Set {
    const EMPTY: Set = Set([0; 4]);
    fn one(b: u8) -> Set {
        let mut s = Set::EMPTY;
        s.add(b);
        s
    }
    fn range(lo: u8, hi: u8) -> Set {
        let mut s = Set::EMPTY;
        for b in lo..=hi {
            s.add(b);
        }
        s
    }
    fn add(&mut self, b: u8) {
        self.0[usize::from(b >> 6)] |= 1 << (b & 63);
    }
    fn has(&self, b: u8) -> bool {
        self.0[usize::from(b >> 6)] >> (b & 63) & 1 == 1
    }
    fn union(mut self, o: Set) -> Set {
        (0..4).for_each(|i| self.0[i] |= o.0[i]);
        self
    }
    fn not(mut self) -> Set {
        (0..4).for_each(|i| self.0[i] = !self.0[i]);
        self
    }
    fn fold(self) -> Set {
        let mut s = self;
        for b in 0..=255u8 {
            if self.has(b) && b.is_ascii_alphabetic() {
                s.add(b ^ 0x20);
            }
        }
        s
    }
    fn count(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }
}

/// An ASCII class by its PCRE name (`\d` letter or POSIX name).
fn named_class(name: &str) -> Option<Set> {
    let pred: fn(u8) -> bool = match name {
        "d" | "digit" => |b| b.is_ascii_digit(),
        "s" | "space" => |b| matches!(b, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' '),
        "w" | "word" => |b| b.is_ascii_alphanumeric() || b == b'_',
        "h" => |b| matches!(b, b'\t' | b' ' | 0xa0),
        "v" => |b| matches!(b, 0x0a..=0x0d | 0x85),
        "alpha" => |b| b.is_ascii_alphabetic(),
        "alnum" => |b| b.is_ascii_alphanumeric(),
        "ascii" => |b| b < 0x80,
        "blank" => |b| b == b' ' || b == b'\t',
        "cntrl" => |b| b < 0x20 || b == 0x7f,
        "graph" => |b| b.is_ascii_graphic(),
        "lower" => |b| b.is_ascii_lowercase(),
        "print" => |b| (0x20..0x7f).contains(&b),
        "punct" => |b| b.is_ascii_punctuation(),
        "upper" => |b| b.is_ascii_uppercase(),
        "xdigit" => |b| b.is_ascii_hexdigit(),
        _ => return None,
    };
    let mut s = Set::EMPTY;
    for b in 0..=255u8 {
        if pred(b) {
            s.add(b);
        }
    }
    Some(s)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Look {
    /// `\A`, `^` without `m`.
    Start,
    /// `\z`, `$` with `E`.
    End,
    /// `\Z`, `$` without `m` or `E`: at the end or before a final `\n`.
    EndNl,
    /// `^` with `m`.
    LineStart,
    /// `$` with `m`.
    LineEnd,
    /// `\b`.
    Word,
    /// `\B`.
    NotWord,
}

enum Node {
    Bytes(Set),
    Concat(Vec<Node>),
    Alt(Vec<Node>),
    Group(Box<Node>),
    Repeat { node: Box<Node>, min: u32, max: Option<u32>, lazy: bool },
    Look(Look),
}

impl Node {
    /// Whether the node can match without consuming a byte.
    fn nullable(&self) -> bool {
        match self {
            Node::Bytes(_) => false,
            Node::Concat(items) => items.iter().all(Node::nullable),
            Node::Alt(bs) => bs.iter().any(Node::nullable),
            Node::Group(inner) => inner.nullable(),
            Node::Repeat { node, min, .. } => *min == 0 || node.nullable(),
            Node::Look(_) => true,
        }
    }
}

#[derive(Clone, Copy)]
struct Flags {
    i: bool,
    m: bool,
    s: bool,
    x: bool,
    ungreedy: bool,
    dollar_endonly: bool,
}

type R<T> = Result<T, String>;

/// Deepest group nesting translated (deeper: PCRE2, which has its own limit).
const MAX_DEPTH: usize = 64;
/// PCRE's largest repetition count.
const MAX_REPEAT: u32 = 65535;

struct Parser<'a> {
    p: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.p.get(self.i).copied()
    }
    fn peek_at(&self, k: usize) -> Option<u8> {
        self.p.get(self.i + k).copied()
    }
    fn eat(&mut self, s: &[u8]) -> bool {
        if self.p[self.i..].starts_with(s) {
            self.i += s.len();
            true
        } else {
            false
        }
    }
    fn next(&mut self) -> R<u8> {
        let b = self.peek().ok_or("pattern ends after `\\`")?;
        self.i += 1;
        Ok(b)
    }

    /// Skips `x`-mode whitespace and comments, and `(?#…)` comments.
    fn skip(&mut self, f: &Flags) {
        loop {
            if f.x && matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')) {
                self.i += 1;
            } else if f.x && self.peek() == Some(b'#') {
                while self.peek().is_some_and(|b| b != b'\n') {
                    self.i += 1;
                }
            } else if self.p[self.i..].starts_with(b"(?#") {
                while self.peek().is_some_and(|b| b != b')') {
                    self.i += 1;
                }
                self.i += 1;
            } else {
                return;
            }
        }
    }

    fn alternation(&mut self, f: &mut Flags, depth: usize) -> R<Node> {
        if depth > MAX_DEPTH {
            return Err("groups nest too deeply".into());
        }
        let mut branches = vec![self.concat(f, depth)?];
        while self.eat(b"|") {
            branches.push(self.concat(f, depth)?);
        }
        Ok(if branches.len() == 1 { branches.pop().unwrap_or(Node::Concat(Vec::new())) } else { Node::Alt(branches) })
    }

    fn concat(&mut self, f: &mut Flags, depth: usize) -> R<Node> {
        let mut items: Vec<Node> = Vec::new();
        loop {
            self.skip(f);
            let Some(b) = self.peek() else { break };
            match b {
                b'|' | b')' => break,
                b'*' | b'+' | b'?' => {
                    self.i += 1;
                    let (min, max) = match b {
                        b'*' => (0, None),
                        b'+' => (1, None),
                        _ => (0, Some(1)),
                    };
                    self.repeat(&mut items, f, min, max)?;
                }
                b'{' => match self.quantifier()? {
                    Some((min, max)) => self.repeat(&mut items, f, min, max)?,
                    None => {
                        self.i += 1;
                        items.push(Node::Bytes(Set::one(b'{')));
                    }
                },
                _ => match self.atom(f, depth)? {
                    // `\Q…\E`: separate literals (a quantifier after it repeats the last).
                    Some(Node::Concat(lits)) => items.extend(lits),
                    Some(n) => items.push(n),
                    None => {}
                },
            }
        }
        Ok(Node::Concat(items))
    }

    /// `{n}`, `{n,}`, `{n,m}`, `{,m}` (spaces allowed inside, as PCRE2 10.43+); `None`: a literal `{`.
    fn quantifier(&mut self) -> R<Option<(u32, Option<u32>)>> {
        let rest = &self.p[self.i + 1..];
        let Some(close) = rest.iter().position(|&b| b == b'}') else { return Ok(None) };
        let body = std::str::from_utf8(&rest[..close]).map_err(|_| "bad quantifier")?;
        let num = |s: &str| -> Option<Option<u32>> {
            let s = s.trim_matches([' ', '\t']);
            if s.is_empty() {
                Some(None)
            } else if s.bytes().all(|b| b.is_ascii_digit()) {
                Some(Some(s.parse::<u32>().unwrap_or(u32::MAX)))
            } else {
                None
            }
        };
        let (min, max) = match body.split_once(',') {
            None => match num(body) {
                Some(Some(n)) => (Some(n), Some(n)),
                _ => return Ok(None),
            },
            Some((a, b)) => match (num(a), num(b)) {
                (Some(None), Some(None)) | (None, _) | (_, None) => return Ok(None),
                (Some(a), Some(b)) => (a, b),
            },
        };
        let min = min.unwrap_or(0);
        if min > MAX_REPEAT || max.is_some_and(|m| m > MAX_REPEAT || m < min) {
            return Err(format!("quantifier `{{{body}}}` out of range or out of order"));
        }
        self.i += close + 2;
        Ok(Some((min, max)))
    }

    fn repeat(&mut self, items: &mut Vec<Node>, f: &Flags, min: u32, max: Option<u32>) -> R<()> {
        let lazy = if self.eat(b"?") {
            !f.ungreedy
        } else if self.peek() == Some(b'+') {
            return Err("possessive quantifier".into());
        } else {
            f.ungreedy
        };
        let node = match items.pop() {
            None | Some(Node::Look(_)) | Some(Node::Repeat { .. }) => return Err("quantifier without a repeatable item".into()),
            Some(n) => n,
        };
        items.push(Node::Repeat { node: Box::new(node), min, max, lazy });
        Ok(())
    }

    fn lit(&self, b: u8, f: &Flags) -> Node {
        Node::Bytes(if f.i { Set::one(b).fold() } else { Set::one(b) })
    }

    fn atom(&mut self, f: &mut Flags, depth: usize) -> R<Option<Node>> {
        let b = self.next()?;
        Ok(Some(match b {
            b'(' => return self.group(f, depth),
            b'[' => Node::Bytes(self.class(f)?),
            b'.' => Node::Bytes(if f.s { Set::EMPTY.not() } else { Set::one(b'\n').not() }),
            b'^' => Node::Look(if f.m { Look::LineStart } else { Look::Start }),
            b'$' => Node::Look(if f.m {
                Look::LineEnd
            } else if f.dollar_endonly {
                Look::End
            } else {
                Look::EndNl
            }),
            b'\\' => return self.escape(f),
            b => self.lit(b, f),
        }))
    }

    fn group(&mut self, f: &mut Flags, depth: usize) -> R<Option<Node>> {
        let mut inner = *f;
        if self.eat(b"*") {
            return Err("a `(*VERB)`".into());
        }
        if self.eat(b"?") {
            if self.eat(b"<") || self.eat(b"P<") {
                if matches!(self.peek(), Some(b'=' | b'!')) {
                    return Err("look-behind".into());
                }
                self.name(b'>')?;
            } else if self.eat(b"'") {
                self.name(b'\'')?;
            } else if self.eat(b":") {
            } else {
                // Flags: `(?imsxU-imsxU)` alone or before `:`.
                let mut on = true;
                loop {
                    match self.next().map_err(|_| "unterminated group")? {
                        b'-' if on => on = false,
                        b'i' => inner.i = on,
                        b'm' => inner.m = on,
                        b's' => inner.s = on,
                        b'x' if self.peek() != Some(b'x') => inner.x = on,
                        b'U' => inner.ungreedy = on,
                        b'J' | b'n' => {}
                        b')' => {
                            *f = inner;
                            return Ok(None);
                        }
                        b':' => break,
                        c => {
                            let what = match c {
                                b'=' | b'!' => "look-ahead",
                                b'>' => "an atomic group",
                                b'|' => "a branch-reset group",
                                b'(' => "a conditional group",
                                b'R' | b'0'..=b'9' | b'+' | b'&' | b'P' => "recursion or a backreference",
                                b'C' => "a callout",
                                _ => "a group kind regex-syntax lacks",
                            };
                            return Err(what.into());
                        }
                    }
                }
            }
        }
        let node = self.alternation(&mut inner, depth + 1)?;
        if !self.eat(b")") {
            return Err("unclosed group".into());
        }
        Ok(Some(Node::Group(Box::new(node))))
    }

    fn name(&mut self, close: u8) -> R<()> {
        let start = self.i;
        while self.peek().is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_') {
            self.i += 1;
        }
        if self.i == start || !self.eat(&[close]) {
            return Err("bad group name".into());
        }
        Ok(())
    }

    /// An escape outside a class.
    fn escape(&mut self, f: &Flags) -> R<Option<Node>> {
        let b = self.next()?;
        let look = |l| Ok(Some(Node::Look(l)));
        match b {
            b'b' => return look(Look::Word),
            b'B' => return look(Look::NotWord),
            b'A' => return look(Look::Start),
            b'z' => return look(Look::End),
            b'Z' => return look(Look::EndNl),
            b'N' if self.peek() != Some(b'{') => return Ok(Some(Node::Bytes(Set::one(b'\n').not()))),
            b'C' => return Ok(Some(Node::Bytes(Set::EMPTY.not()))),
            b'E' => return Ok(None),
            b'Q' => {
                let mut items = Vec::new();
                while self.peek().is_some() && !self.eat(b"\\E") {
                    let c = self.next()?;
                    items.push(self.lit(c, f));
                }
                return Ok(Some(Node::Concat(items)));
            }
            b'1'..=b'9' => return Err("a backreference".into()),
            b'g' | b'k' => return Err("a backreference or subroutine call".into()),
            b'G' => return Err("`\\G`".into()),
            b'K' => return Err("`\\K`".into()),
            b'R' | b'X' => return Err(format!("`\\{}`", b as char)),
            b'p' | b'P' => return Err("a Unicode property".into()),
            _ => {}
        }
        self.i -= 1;
        let s = self.escape_set(false)?;
        Ok(Some(Node::Bytes(if f.i { s.fold() } else { s })))
    }

    /// An escape that stands for bytes (the backslash eaten): a class
    /// escape or one byte. `in_class`: the rules inside `[...]`.
    fn escape_set(&mut self, in_class: bool) -> R<Set> {
        let b = self.next()?;
        for (c, name) in [(b'd', "d"), (b's', "s"), (b'w', "w"), (b'h', "h"), (b'v', "v")] {
            if b == c {
                return Ok(named_class(name).unwrap_or(Set::EMPTY));
            }
            if b == c.to_ascii_uppercase() {
                return Ok(named_class(name).unwrap_or(Set::EMPTY).not());
            }
        }
        Ok(Set::one(self.escape_byte(b, in_class)?))
    }

    /// The byte an escape letter `b` stands for.
    fn escape_byte(&mut self, b: u8, in_class: bool) -> R<u8> {
        Ok(match b {
            b'a' => 0x07,
            b'e' => 0x1b,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'b' if in_class => 0x08,
            b'c' => {
                let c = self.next()?;
                if !(0x20..0x7f).contains(&c) {
                    return Err("bad `\\c`".into());
                }
                c.to_ascii_uppercase() ^ 0x40
            }
            b'x' => {
                if self.eat(b"{") {
                    let v = self.digits(16, b'}')?;
                    u8::try_from(v).map_err(|_| "`\\x{…}` above 0xff")?
                } else {
                    if !self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                        return Err("`\\x` without digits".into());
                    }
                    let mut v = 0u32;
                    for _ in 0..2 {
                        match self.peek().and_then(|c| (c as char).to_digit(16)) {
                            Some(d) => {
                                v = v * 16 + d;
                                self.i += 1;
                            }
                            None => break,
                        }
                    }
                    v as u8
                }
            }
            b'o' if self.eat(b"{") => u8::try_from(self.digits(8, b'}')?).map_err(|_| "`\\o{…}` above 0xff")?,
            b'0' => self.octal(0, 2)?,
            b'1'..=b'7' if in_class => self.octal(u32::from(b - b'0'), 2)?,
            b'8' | b'9' if in_class => b,
            b if b.is_ascii_alphanumeric() => return Err(format!("escape `\\{}`", b as char)),
            b => b,
        })
    }

    fn octal(&mut self, mut v: u32, more: usize) -> R<u8> {
        for _ in 0..more {
            match self.peek() {
                Some(c @ b'0'..=b'7') => {
                    v = v * 8 + u32::from(c - b'0');
                    self.i += 1;
                }
                _ => break,
            }
        }
        u8::try_from(v).map_err(|_| "octal escape above 0xff".into())
    }

    fn digits(&mut self, radix: u32, close: u8) -> R<u32> {
        let mut v = 0u32;
        let start = self.i;
        while let Some(d) = self.peek().and_then(|c| (c as char).to_digit(radix)) {
            v = v.saturating_mul(radix).saturating_add(d);
            self.i += 1;
        }
        if self.i == start || !self.eat(&[close]) {
            return Err("bad braced escape".into());
        }
        Ok(v)
    }

    /// A class (the `[` eaten), case folding applied.
    fn class(&mut self, f: &Flags) -> R<Set> {
        if self.p[self.i..].starts_with(b"[:<:]]") || self.p[self.i..].starts_with(b"[:>:]]") {
            return Err("a `[[:<:]]` word boundary".into());
        }
        let negated = self.eat(b"^");
        let mut set = Set::EMPTY;
        let mut first = true;
        loop {
            let Some(b) = self.peek() else { return Err("unclosed class".into()) };
            if b == b']' && !first {
                self.i += 1;
                break;
            }
            first = false;
            // One item: a POSIX class, a class escape, or a byte (maybe starting a range).
            let lo = match self.class_item()? {
                Item::Set(s) => {
                    if self.peek() == Some(b'-') && self.peek_at(1) != Some(b']') {
                        return Err("a range from a class".into());
                    }
                    set = set.union(s);
                    continue;
                }
                Item::None => continue,
                Item::Byte(lo) => lo,
            };
            if self.peek() == Some(b'-') && self.peek_at(1).is_some_and(|c| c != b']') {
                self.i += 1;
                match self.class_item()? {
                    Item::Byte(hi) if hi >= lo => set = set.union(Set::range(lo, hi)),
                    _ => return Err("bad range in a class".into()),
                }
            } else {
                set.add(lo);
            }
        }
        let set = if f.i { set.fold() } else { set };
        Ok(if negated { set.not() } else { set })
    }

    fn class_item(&mut self) -> R<Item> {
        if self.eat(b"[:") {
            let neg = self.eat(b"^");
            let start = self.i;
            while self.peek().is_some_and(|b| b.is_ascii_lowercase()) {
                self.i += 1;
            }
            let name = std::str::from_utf8(&self.p[start..self.i]).unwrap_or("");
            let s = named_class(name).filter(|_| name.len() > 1).ok_or(format!("POSIX class `{name}`"))?;
            if !self.eat(b":]") {
                return Err("bad POSIX class".into());
            }
            return Ok(Item::Set(if neg { s.not() } else { s }));
        }
        if self.p[self.i..].starts_with(b"[.") || self.p[self.i..].starts_with(b"[=") {
            return Err("a POSIX collating element".into());
        }
        let b = self.next()?;
        if b != b'\\' {
            return Ok(Item::Byte(b));
        }
        match self.peek() {
            Some(b'Q') => {
                self.i += 1;
                let mut s = Set::EMPTY;
                while self.peek().is_some() && !self.eat(b"\\E") {
                    s.add(self.next()?);
                }
                Ok(Item::Set(s))
            }
            Some(b'E') => {
                self.i += 1;
                Ok(Item::None)
            }
            Some(c) if b"dDsSwWhHvV".contains(&c) => Ok(Item::Set(self.escape_set(true)?)),
            Some(b'p' | b'P') => Err("a Unicode property".into()),
            _ => {
                let c = self.next()?;
                Ok(Item::Byte(self.escape_byte(c, true)?))
            }
        }
    }
}

enum Item {
    Byte(u8),
    Set(Set),
    None,
}

struct Emitter {
    out: String,
    markers: usize,
    line_start: bool,
    misplaced: Option<&'static str>,
}

impl Emitter {
    fn set(&mut self, s: &Set) {
        if s.count() == 1 {
            let b = (0..=255u8).find(|b| s.has(*b)).unwrap_or(0);
            self.byte(b);
            return;
        }
        if s.count() == 0 {
            self.out.push_str("[a&&b]");
            return;
        }
        self.out.push('[');
        let mut b = 0u16;
        while b < 256 {
            if !s.has(b as u8) {
                b += 1;
                continue;
            }
            let lo = b;
            while b + 1 < 256 && s.has((b + 1) as u8) {
                b += 1;
            }
            self.byte(lo as u8);
            if b > lo {
                self.out.push('-');
                self.byte(b as u8);
            }
            b += 1;
        }
        self.out.push(']');
    }
    fn byte(&mut self, b: u8) {
        if b.is_ascii_alphanumeric() {
            self.out.push(b as char);
        } else {
            self.out.push_str(&format!("\\x{b:02X}"));
        }
    }

    /// `leading`: nothing consumed before it on any path; `last`: nothing after it.
    fn node(&mut self, n: &Node, leading: bool, last: bool) {
        match n {
            Node::Bytes(s) => self.set(s),
            Node::Concat(items) => {
                let mut lead = leading;
                for (k, it) in items.iter().enumerate() {
                    self.node(it, lead, last && k + 1 == items.len());
                    lead &= matches!(it, Node::Look(_));
                }
            }
            Node::Alt(bs) => {
                for (k, b) in bs.iter().enumerate() {
                    if k > 0 {
                        self.out.push('|');
                    }
                    self.node(b, leading, last);
                }
            }
            Node::Group(inner) => {
                self.out.push_str("(?:");
                self.node(inner, leading, last);
                self.out.push(')');
            }
            Node::Repeat { node, min, max, lazy } => {
                let once = *max == Some(1);
                if !once && node.nullable() {
                    // PCRE ends a loop at an iteration that matched empty and
                    // goes on with the rest of the pattern; a Thompson NFA
                    // drops that path instead and may prefer a longer one.
                    self.misplaced = Some("a repetition of a group that can match empty");
                }
                self.out.push_str("(?:");
                self.node(node, leading && once, last && once);
                self.out.push(')');
                match (min, max) {
                    (0, None) => self.out.push('*'),
                    (1, None) => self.out.push('+'),
                    (0, Some(1)) => self.out.push('?'),
                    (a, None) => self.out.push_str(&format!("{{{a},}}")),
                    (a, Some(b)) if a == b => self.out.push_str(&format!("{{{a}}}")),
                    (a, Some(b)) => self.out.push_str(&format!("{{{a},{b}}}")),
                }
                if *lazy {
                    self.out.push('?');
                }
            }
            Node::Look(l) => self.out.push_str(match l {
                Look::Start => "\\A",
                Look::End => "\\z",
                Look::EndNl => {
                    if !last {
                        self.misplaced = Some("`$` (or `\\Z`) before more pattern");
                        ""
                    } else {
                        self.markers += 1;
                        "(?:\\z|(\\n)\\z)"
                    }
                }
                Look::LineStart => {
                    self.line_start = true;
                    if !leading {
                        self.misplaced = Some("a multi-line `^` after other pattern");
                    }
                    "(?m:^)"
                }
                Look::LineEnd => "(?m:$)",
                Look::Word => "\\b",
                Look::NotWord => "\\B",
            }),
        }
    }
}

/// Translates a PCRE pattern with its flags (`caseless`, `dotall`,
/// `multiline`, `extended`, `ungreedy`, `dollar_endonly`); `Err` says why
/// the pattern must run on PCRE2 (not necessarily that it is invalid).
pub fn translate(pattern: &str, spec: &super::PcreSpec) -> Result<Translated, String> {
    let mut f = Flags {
        i: spec.caseless,
        m: spec.multiline,
        s: spec.dotall,
        x: spec.extended,
        ungreedy: spec.ungreedy,
        dollar_endonly: spec.dollar_endonly,
    };
    let mut p = Parser { p: pattern.as_bytes(), i: 0 };
    let tree = p.alternation(&mut f, 0)?;
    if p.i < p.p.len() {
        return Err("unbalanced `)`".into());
    }
    let mut e = Emitter { out: String::new(), markers: 0, line_start: false, misplaced: None };
    e.node(&tree, true, true);
    if let Some(why) = e.misplaced {
        return Err(why.into());
    }
    if e.line_start {
        let cfg = syntax::Config::new().unicode(false).utf8(false);
        let hir = syntax::parse_with(&e.out, &cfg).map_err(|err| format!("translation does not parse: {err}"))?;
        if hir.properties().minimum_len() == Some(0) {
            return Err("a multi-line `^` in a pattern that can match empty".into());
        }
    }
    Ok(Translated { pattern: e.out, markers: e.markers })
}
