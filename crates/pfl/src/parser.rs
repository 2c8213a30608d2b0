//! The grammar of pcap-filter(7), as libpcap's yacc grammar defines it,
//! parsed by recursive descent into an [`Expr`] tree.
//!
//! What libpcap users rely on and this parser keeps:
//! - `and` and `or` have the same precedence and associate left to right
//!   (`a or b and c` is `(a or b) and c`); `not` binds tighter;
//! - an identifier without qualifiers takes those of the primitive before
//!   it (`host 10.1.1.1 and port 80 or 443` is
//!   `(host 10.1.1.1 and port 80) or port 443`), also inside parentheses
//!   (`host a and (b or c)`) and after `not`;
//! - after a parenthesised expression the qualifiers in force are those
//!   before the parenthesis; after a protocol name, a relation or a
//!   keyword primitive there are none (a bare identifier is an error);
//! - arithmetic precedence: `|` < `^` < `&` < `<<` `>>` < `+` `-` < `*` `/` `%` < unary `-`.

use crate::lexer::{Tok, Token};
use crate::FilterError;
use std::net::Ipv6Addr;
use std::ops::Range;

/// Byte range of a construct in the expression.
pub type Span = Range<usize>;

/// Direction qualifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// None given: `src or dst`.
    Default,
    /// `src`.
    Src,
    /// `dst`.
    Dst,
    /// `src or dst`.
    SrcOrDst,
    /// `src and dst`.
    SrcAndDst,
}

/// Type qualifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// None given: `host` for addresses.
    Default,
    /// `host`.
    Host,
    /// `net`.
    Net,
    /// `port`.
    Port,
    /// `portrange`.
    PortRange,
    /// `proto`.
    Proto,
    /// `protochain`.
    Protochain,
    /// `gateway`.
    Gateway,
}

/// The qualifiers of a primitive: protocol, direction, type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qual {
    /// Protocol qualifier (`ether`, `ip`, `tcp`, …) and its span.
    pub proto: Option<(String, Span)>,
    /// Direction.
    pub dir: Dir,
    /// Type.
    pub kind: Kind,
}

/// The value of a qualified primitive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Id {
    /// A number (`port 80`, `proto 6`).
    Num(u32),
    /// A dotted IPv4 address or prefix of one: value and number of bits written.
    V4(u32, u32),
    /// `A/len`.
    V4Len(u32, u32, u32),
    /// `A mask M`.
    V4Mask(u32, u32, u32),
    /// An IPv6 address.
    V6(Ipv6Addr),
    /// `A/len` for IPv6.
    V6Len(Ipv6Addr, u32),
    /// A MAC address.
    Mac([u8; 6]),
    /// A name (`http`, `\tcp`, `20-25`).
    Name(String),
}

/// Relational operators (all unsigned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RelOp {
    /// `=` or `==`.
    Eq,
    /// `!=`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

/// Arithmetic operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (unsigned; division by zero rejects the packet)
    Div,
    /// `%`
    Mod,
    /// `&`
    And,
    /// `|`
    Or,
    /// `^`
    Xor,
    /// `<<` (a count of 32 or more gives 0)
    Shl,
    /// `>>`
    Shr,
}

/// An arithmetic expression over packet bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arith {
    /// A number or named constant.
    Num(u32, Span),
    /// A word in value position: a named constant of the protocol database,
    /// or `proto.field`.
    Name(String, Span),
    /// `len`: the packet's length on the wire.
    Len(Span),
    /// `proto[off:size]`.
    Load {
        /// Protocol name and span.
        proto: (String, Span),
        /// Offset within that protocol's header.
        off: Box<Arith>,
        /// 1, 2 or 4.
        size: u8,
        /// The whole construct.
        span: Span,
    },
    /// A binary operation.
    Bin(BinOp, Box<Arith>, Box<Arith>, Span),
    /// Unary minus.
    Neg(Box<Arith>, Span),
}

impl Arith {
    /// The byte range it covers.
    pub fn span(&self) -> Span {
        match self {
            Arith::Num(_, s) | Arith::Name(_, s) | Arith::Len(s) | Arith::Neg(_, s) | Arith::Bin(_, _, _, s) => s.clone(),
            Arith::Load { span, .. } => span.clone(),
        }
    }
}

/// Keyword primitives that take no qualified value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Special {
    /// `[proto] broadcast`.
    Broadcast(Option<(String, Span)>),
    /// `[proto] multicast`.
    Multicast(Option<(String, Span)>),
    /// `less N`: wire length <= N.
    Less(u32),
    /// `greater N`: wire length >= N.
    Greater(u32),
    /// `vlan [id]`.
    Vlan(Option<u32>),
    /// `mpls [label]`.
    Mpls(Option<u32>),
}

/// A filter expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// `a and b`.
    And(Box<Expr>, Box<Expr>),
    /// `a or b`.
    Or(Box<Expr>, Box<Expr>),
    /// `not a`.
    Not(Box<Expr>),
    /// A qualified primitive: `[proto] [dir] [type] id`.
    Prim {
        /// Its qualifiers (written or inherited).
        q: Qual,
        /// Its value.
        id: Id,
        /// Where the value is written.
        span: Span,
    },
    /// A protocol name alone: `tcp`, `ip6`.
    Proto(String, Span),
    /// `lhs OP rhs`.
    Rel(RelOp, Arith, Arith, Span),
    /// A keyword primitive.
    Special(Special, Span),
}

const PROTO_WORDS: &[&str] = &[
    "ether", "ip", "ip6", "arp", "rarp", "tcp", "udp", "icmp", "icmp6", "sctp", "igmp", "igrp", "pim", "vrrp", "carp", "ah", "esp", "link",
    "fddi", "tr", "wlan", "ppp", "slip", "decnet", "lat", "sca", "moprc", "mopdl", "iso", "esis", "isis", "clnp", "stp", "ipx", "netbeui",
    "atalk", "aarp", "radio",
];

/// Keywords: words that are never names.
const KEYWORDS: &[&str] = &[
    "src",
    "dst",
    "host",
    "net",
    "mask",
    "port",
    "portrange",
    "proto",
    "protochain",
    "gateway",
    "and",
    "or",
    "not",
    "len",
    "less",
    "greater",
    "broadcast",
    "multicast",
    "vlan",
    "mpls",
    "inbound",
    "outbound",
    "byte",
    "ifindex",
    "pppoed",
    "pppoes",
    "geneve",
    "llc",
    "ra",
    "ta",
    "addr1",
    "addr2",
    "addr3",
    "addr4",
    "type",
    "subtype",
    "dir",
];

/// Whether `w` is a protocol name usable as a qualifier or in `proto[…]`.
pub fn is_proto_word(w: &str, extra: &dyn Fn(&str) -> bool) -> bool {
    PROTO_WORDS.contains(&w) || extra(w)
}

/// Whether `w` is reserved.
pub fn is_keyword(w: &str) -> bool {
    KEYWORDS.contains(&w) || PROTO_WORDS.contains(&w)
}

/// The parser state.
pub struct Parser<'a> {
    toks: Vec<Token>,
    pos: usize,
    src_len: usize,
    /// Extra protocol names from the database (new protocols).
    is_db_proto: &'a dyn Fn(&str) -> bool,
    /// Named constants usable as numbers (`tcp-syn`).
    constant: &'a dyn Fn(&str) -> Option<u32>,
    /// Current nesting of parentheses, `not`, brackets and unary minus.
    depth: u32,
}

/// The most tokens an expression may have.
pub const MAX_TOKENS: usize = 4096;
/// The deepest nesting of parentheses, `not`, brackets and unary minus.
pub const MAX_DEPTH: u32 = 100;

type PResult<T> = Result<T, FilterError>;

impl<'a> Parser<'a> {
    /// A parser over `toks` of an expression `src_len` bytes long.
    pub fn new(toks: Vec<Token>, src_len: usize, is_db_proto: &'a dyn Fn(&str) -> bool, constant: &'a dyn Fn(&str) -> Option<u32>) -> Self {
        Parser { toks, pos: 0, src_len, is_db_proto, constant, depth: 0 }
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.kind)
    }
    fn peek_at(&self, k: usize) -> Option<&Tok> {
        self.toks.get(self.pos + k).map(|t| &t.kind)
    }
    fn span_here(&self) -> Span {
        match self.toks.get(self.pos) {
            Some(t) => t.span.clone(),
            None => self.src_len..self.src_len,
        }
    }
    fn prev_end(&self) -> usize {
        if self.pos == 0 {
            0
        } else {
            self.toks[self.pos - 1].span.end
        }
    }
    fn bump(&mut self) -> Token {
        let t = self.toks[self.pos].clone();
        self.pos += 1;
        t
    }
    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Some(Tok::Word(x)) if x == w)
    }
    fn is_word_at(&self, k: usize, w: &str) -> bool {
        matches!(self.peek_at(k), Some(Tok::Word(x)) if x == w)
    }
    fn is_op(&self, o: &str) -> bool {
        matches!(self.peek(), Some(Tok::Op(x)) if *x == o)
    }
    fn is_op_at(&self, k: usize, o: &str) -> bool {
        matches!(self.peek_at(k), Some(Tok::Op(x)) if *x == o)
    }
    fn err<T>(&self, msg: impl Into<String>) -> PResult<T> {
        Err(FilterError::new(msg, self.span_here()))
    }
    fn expect_op(&mut self, o: &str) -> PResult<Span> {
        if self.is_op(o) {
            Ok(self.bump().span)
        } else {
            self.err(format!("syntax error: expected `{o}`"))
        }
    }
    fn is_and(&self) -> bool {
        self.is_word("and") || self.is_op("&&")
    }
    fn is_or(&self) -> bool {
        self.is_word("or") || self.is_op("||")
    }
    fn is_not_at(&self, k: usize) -> bool {
        self.is_word_at(k, "not") || self.is_op_at(k, "!")
    }
    fn proto_word_at(&self, k: usize) -> Option<String> {
        match self.peek_at(k) {
            Some(Tok::Word(w)) if is_proto_word(w, self.is_db_proto) => Some(w.clone()),
            _ => None,
        }
    }

    /// Parses a whole expression; an empty one matches everything (as in libpcap), returned as `None`.
    pub fn parse(mut self) -> PResult<Option<Expr>> {
        if self.toks.is_empty() {
            return Ok(None);
        }
        if self.toks.len() > MAX_TOKENS {
            let sp = self.toks[MAX_TOKENS].span.clone();
            return Err(FilterError::new(format!("expression too long (more than {MAX_TOKENS} tokens)"), sp));
        }
        let (e, _) = self.expr(None)?;
        if self.pos < self.toks.len() {
            return self.err("syntax error");
        }
        Ok(Some(e))
    }

    /// expr := term ((and|or) (term | id))*; returns the qualifiers in force after it.
    fn expr(&mut self, q0: Option<Qual>) -> PResult<(Expr, Option<Qual>)> {
        let (mut e, mut q) = self.term(q0)?;
        loop {
            let is_and = self.is_and();
            if !is_and && !self.is_or() {
                break;
            }
            self.bump();
            if self.pos >= self.toks.len() {
                return self.err("syntax error: expression ends after `and`/`or`");
            }
            let (rhs, q2) = if self.starts_id(0) { self.id(q.clone())? } else { self.term(q.clone())? };
            e = if is_and { Expr::And(Box::new(e), Box::new(rhs)) } else { Expr::Or(Box::new(e), Box::new(rhs)) };
            q = q2;
        }
        Ok((e, q))
    }

    /// Whether the tokens at `k` start an unqualified identifier (not a term).
    fn starts_id(&self, k: usize) -> bool {
        match self.peek_at(k) {
            Some(Tok::HostId(..)) | Some(Tok::Host6(_)) | Some(Tok::Mac(_)) | Some(Tok::Escaped(_)) => true,
            Some(Tok::Num(_)) => !self.arith_follows(k + 1),
            Some(Tok::Word(w)) => {
                if is_keyword(w) || (self.is_db_proto)(w) {
                    w == "not" && self.starts_id(k + 1)
                } else if (self.constant)(w).is_some() || w.contains('.') && !w.as_bytes()[0].is_ascii_digit() {
                    !self.arith_follows(k + 1)
                } else {
                    true
                }
            }
            Some(Tok::Op("!")) => self.starts_id(k + 1),
            Some(Tok::Op("(")) => self.starts_id(k + 1),
            _ => false,
        }
    }

    fn arith_follows(&self, k: usize) -> bool {
        matches!(
            self.peek_at(k),
            Some(Tok::Op("+" | "-" | "*" | "/" | "%" | "&" | "|" | "^" | "<<" | ">>" | "=" | "==" | "!=" | "<" | "<=" | ">" | ">="))
        )
    }

    /// id := nid | pnum | '(' pid ')' | not id, with the inherited qualifiers `q`.
    fn nest(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.err(format!("expression nested too deeply (more than {MAX_DEPTH} levels)"));
        }
        Ok(())
    }

    fn id(&mut self, q: Option<Qual>) -> PResult<(Expr, Option<Qual>)> {
        self.nest()?;
        let r = self.id_inner(q);
        self.depth -= 1;
        r
    }

    fn id_inner(&mut self, q: Option<Qual>) -> PResult<(Expr, Option<Qual>)> {
        if self.is_not_at(0) {
            self.bump();
            let (e, q2) = self.id(q)?;
            return Ok((Expr::Not(Box::new(e)), q2));
        }
        if self.is_op("(") {
            self.bump();
            // pid := id ((and|or) id)*
            let (mut e, _) = self.id(q.clone())?;
            loop {
                let is_and = self.is_and();
                if !is_and && !self.is_or() {
                    break;
                }
                self.bump();
                let (r, _) = self.id(q.clone())?;
                e = if is_and { Expr::And(Box::new(e), Box::new(r)) } else { Expr::Or(Box::new(e), Box::new(r)) };
            }
            self.expect_op(")")?;
            return Ok((e, q));
        }
        let start = self.span_here();
        let Some(q) = q else {
            return Err(FilterError::new("syntax error: a value needs a qualifier here (e.g. `host`, `net`, `port`)", start));
        };
        let id = self.value()?;
        let span = start.start..self.prev_end();
        Ok((Expr::Prim { q: q.clone(), id, span }, Some(q)))
    }

    /// One value token, with `/len` or `mask M` after an address.
    fn value(&mut self) -> PResult<Id> {
        let t = match self.peek() {
            Some(_) => self.bump(),
            None => return self.err("syntax error: expected a value"),
        };
        Ok(match t.kind {
            Tok::Num(n) => {
                if self.is_op("/") {
                    // libpcap's grammar has no `NUM / NUM`: `net 10/8` is a syntax error there.
                    return self.err("syntax error: write the network in dotted form (`net 10.0.0.0/8`)");
                }
                Id::Num(n)
            }
            Tok::HostId(v, bits) => {
                if self.is_op("/") {
                    self.bump();
                    let len = self.num("prefix length")?;
                    Id::V4Len(v, bits, len)
                } else if self.is_word("mask") {
                    self.bump();
                    match self.peek().cloned() {
                        Some(Tok::HostId(m, mbits)) => {
                            self.bump();
                            Id::V4Mask(v, bits, m << (32 - mbits))
                        }
                        _ => return self.err("syntax error: expected a mask like 255.255.0.0"),
                    }
                } else {
                    Id::V4(v, bits)
                }
            }
            Tok::Host6(a) => {
                if self.is_op("/") {
                    self.bump();
                    let len = self.num("prefix length")?;
                    Id::V6Len(a, len)
                } else {
                    Id::V6(a)
                }
            }
            Tok::Mac(m) => Id::Mac(m),
            Tok::Escaped(w) => Id::Name(w),
            Tok::Word(w) if !is_keyword(&w) => match (self.constant)(&w) {
                Some(n) => Id::Num(n),
                None => Id::Name(w),
            },
            _ => return Err(FilterError::new("syntax error: expected a value", t.span)),
        })
    }

    fn num(&mut self, what: &str) -> PResult<u32> {
        match self.peek().cloned() {
            Some(Tok::Num(n)) => {
                self.bump();
                Ok(n)
            }
            Some(Tok::Word(w)) if (self.constant)(&w).is_some() => {
                self.bump();
                Ok((self.constant)(&w).unwrap())
            }
            _ => self.err(format!("syntax error: expected a number ({what})")),
        }
    }

    /// term := not term | rterm.
    fn term(&mut self, q0: Option<Qual>) -> PResult<(Expr, Option<Qual>)> {
        self.nest()?;
        let r = self.term_inner(q0);
        self.depth -= 1;
        r
    }

    fn term_inner(&mut self, q0: Option<Qual>) -> PResult<(Expr, Option<Qual>)> {
        if self.is_not_at(0) {
            self.bump();
            let (e, q) = self.term(q0)?;
            return Ok((Expr::Not(Box::new(e)), q));
        }
        self.rterm(q0)
    }

    fn rterm(&mut self, q0: Option<Qual>) -> PResult<(Expr, Option<Qual>)> {
        let start = self.span_here();
        // '(' expr ')' unless it is an arithmetic relation.
        if self.is_op("(") {
            let save = self.pos;
            if let Ok(r) = self.relation() {
                return Ok((r, None));
            }
            self.pos = save;
            self.bump();
            let (e, _) = self.expr(q0.clone())?;
            self.expect_op(")")?;
            return Ok((e, q0));
        }
        // Keyword primitives.
        if let Some(Tok::Word(w)) = self.peek().cloned().filter(|_| !self.is_op_at(1, "[")) {
            match w.as_str() {
                "less" | "greater" => {
                    self.bump();
                    let n = self.num("length")?;
                    let sp = start.start..self.prev_end();
                    let s = if w == "less" { Special::Less(n) } else { Special::Greater(n) };
                    return Ok((Expr::Special(s, sp), None));
                }
                "vlan" | "mpls" => {
                    self.bump();
                    let n = if matches!(self.peek(), Some(Tok::Num(_))) && !self.arith_follows(1) { Some(self.num("id")?) } else { None };
                    let sp = start.start..self.prev_end();
                    let s = if w == "vlan" { Special::Vlan(n) } else { Special::Mpls(n) };
                    return Ok((Expr::Special(s, sp), None));
                }
                "broadcast" | "multicast" => {
                    self.bump();
                    let s = if w == "broadcast" { Special::Broadcast(None) } else { Special::Multicast(None) };
                    return Ok((Expr::Special(s, start), None));
                }
                "inbound" | "outbound" | "ifindex" | "byte" | "pppoed" | "pppoes" | "llc" | "type" | "subtype" | "dir" | "ra" | "ta"
                | "addr1" | "addr2" | "addr3" | "addr4" => {
                    return Err(FilterError::new(format!("`{w}` is not supported by netvm's filter compiler (Ethernet captures)"), start));
                }
                _ => {}
            }
        }
        // A relation: arith relop arith.
        if self.starts_arith() {
            let r = self.relation()?;
            return Ok((r, None));
        }
        // head id | pname | pname broadcast/multicast
        let proto = if let Some(p) = self.proto_word_at(0) {
            let t = self.bump();
            Some((p, t.span))
        } else {
            None
        };
        if let Some((p, psp)) = &proto {
            if self.is_word("broadcast") || self.is_word("multicast") {
                let t = self.bump();
                let sp = psp.start..t.span.end;
                let s = if self.toks[self.pos - 1].kind == Tok::Word("broadcast".into()) {
                    Special::Broadcast(Some((p.clone(), psp.clone())))
                } else {
                    Special::Multicast(Some((p.clone(), psp.clone())))
                };
                return Ok((Expr::Special(s, sp), None));
            }
        }
        let mut dir = Dir::Default;
        if self.is_word("src") || self.is_word("dst") {
            let first = if self.is_word("src") { Dir::Src } else { Dir::Dst };
            self.bump();
            let other = if first == Dir::Src { "dst" } else { "src" };
            if (self.is_or() || self.is_and()) && self.is_word_at(1, other) {
                dir = if self.is_or() { Dir::SrcOrDst } else { Dir::SrcAndDst };
                self.bump();
                self.bump();
            } else {
                dir = first;
            }
        }
        let kind = match self.peek() {
            Some(Tok::Word(w)) => match w.as_str() {
                "host" => Kind::Host,
                "net" => Kind::Net,
                "port" => Kind::Port,
                "portrange" => Kind::PortRange,
                "proto" if dir == Dir::Default => Kind::Proto,
                "protochain" if dir == Dir::Default => Kind::Protochain,
                "gateway" => Kind::Gateway,
                _ => Kind::Default,
            },
            _ => Kind::Default,
        };
        if kind != Kind::Default {
            self.bump();
        }
        if dir == Dir::Default && kind == Kind::Default {
            return match proto {
                Some((p, sp)) => Ok((Expr::Proto(p, sp), None)),
                None => {
                    if self.pos >= self.toks.len() {
                        self.err("syntax error: expression ends too early")
                    } else {
                        self.err("syntax error")
                    }
                }
            };
        }
        let q = Qual { proto, dir, kind };
        if self.pos >= self.toks.len() {
            return self.err("syntax error: expected a value after the qualifiers");
        }
        self.id(Some(q))
    }

    fn starts_arith(&self) -> bool {
        match self.peek() {
            Some(Tok::Num(_)) => true,
            Some(Tok::Op("-")) | Some(Tok::Op("(")) => true,
            Some(Tok::Word(w)) => {
                w == "len"
                    || (is_proto_word(w, self.is_db_proto) && self.is_op_at(1, "["))
                    || (!is_keyword(w) && !(self.is_db_proto)(w) && self.arith_follows(1))
            }
            _ => false,
        }
    }

    fn relation(&mut self) -> PResult<Expr> {
        let start = self.span_here().start;
        let lhs = self.arith()?;
        let op = match self.peek() {
            Some(Tok::Op("=")) | Some(Tok::Op("==")) => RelOp::Eq,
            Some(Tok::Op("!=")) => RelOp::Ne,
            Some(Tok::Op("<")) => RelOp::Lt,
            Some(Tok::Op("<=")) => RelOp::Le,
            Some(Tok::Op(">")) => RelOp::Gt,
            Some(Tok::Op(">=")) => RelOp::Ge,
            _ => return self.err("syntax error: expected a relational operator (=, !=, <, <=, >, >=)"),
        };
        self.bump();
        let rhs = self.arith()?;
        Ok(Expr::Rel(op, lhs, rhs, start..self.prev_end()))
    }

    /// Arithmetic with libpcap's precedence levels.
    fn arith(&mut self) -> PResult<Arith> {
        self.arith_level(0)
    }

    fn arith_level(&mut self, level: usize) -> PResult<Arith> {
        const LEVELS: &[&[(&str, BinOp)]] = &[
            &[("|", BinOp::Or)],
            &[("^", BinOp::Xor)],
            &[("&", BinOp::And)],
            &[("<<", BinOp::Shl), (">>", BinOp::Shr)],
            &[("+", BinOp::Add), ("-", BinOp::Sub)],
            &[("*", BinOp::Mul), ("/", BinOp::Div), ("%", BinOp::Mod)],
        ];
        if level == LEVELS.len() {
            return self.unary();
        }
        let mut lhs = self.arith_level(level + 1)?;
        'outer: loop {
            for (sym, op) in LEVELS[level] {
                if self.is_op(sym) {
                    self.bump();
                    let rhs = self.arith_level(level + 1)?;
                    let sp = lhs.span().start..rhs.span().end;
                    lhs = Arith::Bin(*op, Box::new(lhs), Box::new(rhs), sp);
                    continue 'outer;
                }
            }
            break;
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> PResult<Arith> {
        self.nest()?;
        let r = self.unary_inner();
        self.depth -= 1;
        r
    }

    fn unary_inner(&mut self) -> PResult<Arith> {
        let start = self.span_here();
        if self.is_op("-") {
            self.bump();
            let e = self.unary()?;
            let sp = start.start..e.span().end;
            return Ok(Arith::Neg(Box::new(e), sp));
        }
        if self.is_op("(") {
            self.bump();
            let e = self.arith()?;
            self.expect_op(")")?;
            return Ok(e);
        }
        match self.peek().cloned() {
            Some(Tok::Num(n)) => {
                self.bump();
                Ok(Arith::Num(n, start))
            }
            Some(Tok::Word(w)) if w == "len" => {
                self.bump();
                Ok(Arith::Len(start))
            }
            Some(Tok::Word(w)) if is_proto_word(&w, self.is_db_proto) && self.is_op_at(1, "[") => {
                self.bump();
                self.bump();
                let off = self.arith()?;
                let size = if self.is_op(":") {
                    self.bump();
                    let sp = self.span_here();
                    let n = self.num("size")?;
                    if !matches!(n, 1 | 2 | 4) {
                        return Err(FilterError::new("data size must be 1, 2, or 4", sp));
                    }
                    n as u8
                } else {
                    1
                };
                self.expect_op("]")?;
                Ok(Arith::Load { proto: (w, start.clone()), off: Box::new(off), size, span: start.start..self.prev_end() })
            }
            Some(Tok::Word(w)) if !is_keyword(&w) => {
                self.bump();
                match (self.constant)(&w) {
                    Some(n) => Ok(Arith::Num(n, start)),
                    None => Ok(Arith::Name(w, start)),
                }
            }
            _ => self.err("syntax error: expected a number, `len` or `proto[offset]`"),
        }
    }
}

impl Parser<'_> {
    /// Parses the whole input as one arithmetic expression (database header lengths).
    pub fn arith_only(&mut self) -> PResult<Arith> {
        let a = self.arith()?;
        if self.pos < self.toks.len() {
            return self.err("syntax error");
        }
        Ok(a)
    }
}
