//! Snort rules (Snort 2.9 and Snort 3 syntax) → a typed AST ([`Rule`]).
//!
//! ```text
//! ACTION PROTO SRC SPORT (-> | <>) DST DPORT (OPTION; OPTION; ...)
//! ACTION SERVICE (OPTION; ...)          Snort 3 service rule, e.g. `alert http (...)`
//! ACTION (OPTION; ...)                  Snort 3 header-less rule
//! ```
//!
//! The syntax is detected per rule ([`Syntax`]): Snort 3 when the rule has
//! a `content:"…",modifier` list, a `service:` option, a Snort-3-only
//! option, or an HTTP buffer keyword before any detection option (a sticky
//! buffer); Snort 2.9 otherwise. The two differ in where content modifiers
//! go (separate options after the content vs. a comma list inside it) and in
//! HTTP buffers (Snort 2 modifiers that *follow* their content vs. Snort 3
//! sticky buffers that *precede* the options they apply to).
//!
//! Every option the AST knows is parsed into it, in rule order where Snort
//! evaluates in order ([`Rule::detection`]); options outside it (e.g.
//! `byte_math`, `dce_iface`, `ssl_state`) and malformed options make the
//! rule *skipped* with its line, its sid and one reason naming the option
//! ([`Skip`]). Which parsed options the compiler handles is decided
//! separately ([`crate::compile::unsupported`]).
//!
//! Files ([`parse_rules`], [`parse_rules_file`]): `var`, `ipvar`, `portvar`
//! lines define variables, over Snort's defaults ([`vars::defaults`]);
//! `--var` overrides ([`parse_rules`]'s `overrides`) win over both;
//! `include FILE` reads FILE relative to the including file (at most
//! [`MAX_INCLUDE_DEPTH`] deep); `#` starts a comment line; a line ending in
//! `\` continues on the next, and so does a rule whose option list is not
//! closed on its line (Snort 3 writes rules over several lines);
//! `config`, `preprocessor`, `output` and similar configuration lines are
//! ignored.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use netvm_copro::regex::{HttpBuffer, PcreSpec};

mod header;
mod options;
pub mod vars;

pub use header::{mask, AddrExpr, PortExpr};
pub use options::{parse_pcre, split_options};

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

/// Which rule language a rule was written in (detected per rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Syntax {
    /// Snort 2.9: modifiers are options of their own, after their content.
    Snort2,
    /// Snort 3: `content:"x",nocase,depth 4`, sticky buffers, `service`.
    Snort3,
}

/// A number in a content modifier or byte option: a literal, or the name of
/// a `byte_extract` variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Num {
    /// A literal.
    Lit(i64),
    /// A `byte_extract` variable.
    Var(String),
}

impl Num {
    /// The literal, if it is one.
    pub fn lit(&self) -> Option<i64> {
        match self {
            Num::Lit(n) => Some(*n),
            Num::Var(_) => None,
        }
    }
}

/// The buffer a detection option inspects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Buffer {
    /// The packet's payload (the default; `pkt_data`).
    PktData,
    /// The payload before any normalisation (`rawbytes`, `raw_data`).
    Raw,
    /// `file_data`: a file's data (HTTP response body, SMTP attachment, …).
    FileData,
    /// `http_uri` (`uricontent`, pcre `U`).
    HttpUri,
    /// `http_raw_uri` (pcre `I`).
    HttpRawUri,
    /// `http_header` (pcre `H`).
    HttpHeader,
    /// `http_raw_header` (pcre `D`).
    HttpRawHeader,
    /// `http_method` (pcre `M`).
    HttpMethod,
    /// `http_client_body` (pcre `P`).
    HttpClientBody,
    /// `http_raw_body` (Snort 3).
    HttpRawBody,
    /// `http_cookie` (pcre `C`).
    HttpCookie,
    /// `http_raw_cookie` (pcre `K`).
    HttpRawCookie,
    /// `http_stat_code` (pcre `S`).
    HttpStatCode,
    /// `http_stat_msg` (pcre `Y`).
    HttpStatMsg,
    /// `http_version` (Snort 3).
    HttpVersion,
    /// `http_raw_request` (Snort 3: the request line).
    HttpRawRequest,
    /// `http_raw_status` (Snort 3: the status line).
    HttpRawStatus,
    /// `js_data` (Snort 3: normalised JavaScript).
    JsData,
}

impl Buffer {
    /// Every buffer with its rule keyword.
    pub const ALL: [(Buffer, &'static str); 18] = [
        (Buffer::PktData, "pkt_data"),
        (Buffer::Raw, "raw_data"),
        (Buffer::FileData, "file_data"),
        (Buffer::HttpUri, "http_uri"),
        (Buffer::HttpRawUri, "http_raw_uri"),
        (Buffer::HttpHeader, "http_header"),
        (Buffer::HttpRawHeader, "http_raw_header"),
        (Buffer::HttpMethod, "http_method"),
        (Buffer::HttpClientBody, "http_client_body"),
        (Buffer::HttpRawBody, "http_raw_body"),
        (Buffer::HttpCookie, "http_cookie"),
        (Buffer::HttpRawCookie, "http_raw_cookie"),
        (Buffer::HttpStatCode, "http_stat_code"),
        (Buffer::HttpStatMsg, "http_stat_msg"),
        (Buffer::HttpVersion, "http_version"),
        (Buffer::HttpRawRequest, "http_raw_request"),
        (Buffer::HttpRawStatus, "http_raw_status"),
        (Buffer::JsData, "js_data"),
    ];

    /// The buffer a pcre HTTP buffer flag (`U I P H D M C K S Y`) names.
    pub fn of_http(b: HttpBuffer) -> Buffer {
        match b {
            HttpBuffer::Uri => Buffer::HttpUri,
            HttpBuffer::RawUri => Buffer::HttpRawUri,
            HttpBuffer::ClientBody => Buffer::HttpClientBody,
            HttpBuffer::Header => Buffer::HttpHeader,
            HttpBuffer::RawHeader => Buffer::HttpRawHeader,
            HttpBuffer::Method => Buffer::HttpMethod,
            HttpBuffer::Cookie => Buffer::HttpCookie,
            HttpBuffer::RawCookie => Buffer::HttpRawCookie,
            HttpBuffer::StatCode => Buffer::HttpStatCode,
            HttpBuffer::StatMsg => Buffer::HttpStatMsg,
        }
    }

    /// The rule keyword that selects this buffer.
    pub fn name(self) -> &'static str {
        Buffer::ALL.iter().find(|(b, _)| *b == self).map_or("pkt_data", |(_, n)| n)
    }

    /// The buffer a keyword selects.
    pub fn from_name(s: &str) -> Option<Buffer> {
        Buffer::ALL.iter().find(|(_, n)| *n == s).map(|(b, _)| *b)
    }

    /// Whether this is one of the HTTP buffers.
    pub fn is_http(self) -> bool {
        self.name().starts_with("http_")
    }
}

/// `fast_pattern` of a content.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FastPattern {
    /// `fast_pattern:only` (Snort 2): the content is only the prefilter.
    pub only: bool,
    /// `fast_pattern:OFFSET,LENGTH` (Snort 2) or `fast_pattern_offset` and
    /// `fast_pattern_length` (Snort 3): the slice used as the prefilter.
    pub slice: Option<(u16, u16)>,
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
    /// `offset`: the search starts this many bytes into the buffer.
    pub offset: Option<Num>,
    /// `depth`: the match must end within this many bytes of the search start.
    pub depth: Option<Num>,
    /// `distance`: the search starts this many bytes after the previous match.
    pub distance: Option<Num>,
    /// `within`: the match must end within this many bytes of the search start.
    pub within: Option<Num>,
    /// `fast_pattern`: prefer this content for the prefilter.
    pub fast_pattern: Option<FastPattern>,
    /// The buffer searched (`rawbytes` makes it [`Buffer::Raw`]).
    pub buffer: Buffer,
}

impl Content {
    /// A plain content of `bytes` in the packet data.
    pub fn new(bytes: Vec<u8>) -> Content {
        Content {
            bytes,
            negated: false,
            nocase: false,
            offset: None,
            depth: None,
            distance: None,
            within: None,
            fast_pattern: None,
            buffer: Buffer::PktData,
        }
    }

    /// Whether the content is placed relative to the previous match.
    pub fn relative(&self) -> bool {
        self.distance.is_some() || self.within.is_some()
    }
}

/// A `pcre` option.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pcre {
    /// The option's text between the quotes, exactly as written
    /// (`/…/flags`, backslashes included).
    pub text: String,
    /// The expression and every flag, as the `regex` coprocessor parses
    /// them ([`netvm_copro::regex::parse_pcre`]: one parser for both).
    pub spec: PcreSpec,
    /// `pcre:!"…"`: the rule needs no match.
    pub negated: bool,
    /// The buffer: the sticky buffer, or the one a buffer flag (`B`, `U I P
    /// H D M C K S Y`) names.
    pub buffer: Buffer,
}

impl Pcre {
    /// `R`: matched from the end of the previous match.
    pub fn relative(&self) -> bool {
        self.spec.relative
    }
}

/// The comparison of a `byte_test`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ByteOp {
    /// `<`
    Lt,
    /// `>`
    Gt,
    /// `<=`
    Le,
    /// `>=`
    Ge,
    /// `=`
    Eq,
    /// `&`: any of the value's bits set.
    And,
    /// `^`: exclusive or is non-zero.
    Xor,
}

/// Byte order of a byte option.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Endian {
    /// Network order (the default).
    #[default]
    Big,
    /// `little`.
    Little,
    /// `dce`: the order of the DCE/RPC request.
    Dce,
}

/// `string, hex|dec|oct`: the bytes are a number written in text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NumBase {
    /// `hex`
    Hex,
    /// `dec`
    Dec,
    /// `oct`
    Oct,
}

/// `byte_test`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ByteTest {
    /// Bytes to read (1 to 10).
    pub bytes: u8,
    /// `!` before the operator.
    pub negated: bool,
    /// The comparison.
    pub op: ByteOp,
    /// The value compared with.
    pub value: Num,
    /// Where to read.
    pub offset: Num,
    /// `relative`: from the end of the previous match.
    pub relative: bool,
    /// Byte order.
    pub endian: Endian,
    /// `string, BASE`.
    pub string: Option<NumBase>,
    /// `bitmask N`.
    pub bitmask: Option<u32>,
    /// The buffer read.
    pub buffer: Buffer,
}

/// `byte_jump`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ByteJump {
    /// Bytes to read (0 to 10).
    pub bytes: u8,
    /// Where to read.
    pub offset: Num,
    /// `relative`.
    pub relative: bool,
    /// `multiplier N`.
    pub multiplier: Option<u32>,
    /// Byte order.
    pub endian: Endian,
    /// `string, BASE`.
    pub string: Option<NumBase>,
    /// `align` (4) or Snort 3 `align N`.
    pub align: u8,
    /// `from_beginning`.
    pub from_beginning: bool,
    /// `from_end`.
    pub from_end: bool,
    /// `post_offset N`.
    pub post_offset: Option<Num>,
    /// `bitmask N`.
    pub bitmask: Option<u32>,
    /// The buffer read.
    pub buffer: Buffer,
}

/// `byte_extract`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ByteExtract {
    /// Bytes to read (1 to 10).
    pub bytes: u8,
    /// Where to read.
    pub offset: i32,
    /// The variable it defines.
    pub name: String,
    /// `relative`.
    pub relative: bool,
    /// `multiplier N`.
    pub multiplier: Option<u32>,
    /// Byte order.
    pub endian: Endian,
    /// `string, BASE`.
    pub string: Option<NumBase>,
    /// `align N`.
    pub align: u8,
    /// `bitmask N`.
    pub bitmask: Option<u32>,
    /// The buffer read.
    pub buffer: Buffer,
}

/// `isdataat`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IsDataAt {
    /// The position that must (or, negated, must not) hold data.
    pub offset: Num,
    /// `relative`.
    pub relative: bool,
    /// `isdataat:!N`.
    pub negated: bool,
    /// The buffer (`rawbytes` makes it [`Buffer::Raw`]).
    pub buffer: Buffer,
}

/// A comparison of an integer field: `N`, `=N`, `!N`, `<N`, `>N`, `<=N`,
/// `>=N`, `A<>B`, `A<=>B` (and Snort 2 `ttl:A-B`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IntCheck {
    /// `= N`
    Eq(i64),
    /// `!= N`
    Ne(i64),
    /// `< N`
    Lt(i64),
    /// `<= N`
    Le(i64),
    /// `> N`
    Gt(i64),
    /// `>= N`
    Ge(i64),
    /// `lo < x < hi`
    Between(i64, i64),
    /// `lo <= x <= hi`
    BetweenIncl(i64, i64),
}

impl IntCheck {
    /// Whether `x` passes.
    pub fn matches(self, x: i64) -> bool {
        match self {
            IntCheck::Eq(n) => x == n,
            IntCheck::Ne(n) => x != n,
            IntCheck::Lt(n) => x < n,
            IntCheck::Le(n) => x <= n,
            IntCheck::Gt(n) => x > n,
            IntCheck::Ge(n) => x >= n,
            IntCheck::Between(a, b) => a < x && x < b,
            IntCheck::BetweenIncl(a, b) => a <= x && x <= b,
        }
    }
}

/// How `flags` and `fragbits` combine their bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BitsMode {
    /// Exactly these bits (after the mask).
    Exact,
    /// `+`: these bits, and maybe others.
    All,
    /// `*`: any of these bits.
    Any,
    /// `!`: none of these bits.
    Not,
}

/// A check on the IP, TCP or ICMP header, or on the payload size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderCheck {
    /// `flags`: TCP flag bits (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK
    /// 0x10, URG 0x20, ECE 0x40 (`E`, `2`), CWR 0x80 (`C`, `1`)); `mask`:
    /// bits ignored.
    Flags {
        /// The bits (`0`: none).
        bits: u8,
        /// How they combine.
        mode: BitsMode,
        /// Bits left out of the comparison.
        mask: u8,
    },
    /// `fragbits`: IP flags (R 0x8000 reserved, D 0x4000, M 0x2000).
    Fragbits {
        /// The bits.
        bits: u16,
        /// How they combine.
        mode: BitsMode,
    },
    /// `dsize`: payload size.
    Dsize(IntCheck),
    /// `itype`.
    Itype(IntCheck),
    /// `icode`.
    Icode(IntCheck),
    /// `icmp_id`.
    IcmpId(IntCheck),
    /// `icmp_seq`.
    IcmpSeq(IntCheck),
    /// `ttl`.
    Ttl(IntCheck),
    /// `tos`.
    Tos(IntCheck),
    /// `id`: IP identification.
    Id(IntCheck),
    /// `ip_proto`.
    IpProto(IntCheck),
    /// `fragoffset`.
    Fragoffset(IntCheck),
    /// `seq`: TCP sequence number.
    Seq(IntCheck),
    /// `ack`: TCP acknowledgement number.
    Ack(IntCheck),
    /// `window`: TCP window.
    Window(IntCheck),
    /// `sameip`: source and destination addresses equal.
    SameIp,
}

impl HeaderCheck {
    /// The option keyword.
    pub fn name(&self) -> &'static str {
        match self {
            HeaderCheck::Flags { .. } => "flags",
            HeaderCheck::Fragbits { .. } => "fragbits",
            HeaderCheck::Dsize(_) => "dsize",
            HeaderCheck::Itype(_) => "itype",
            HeaderCheck::Icode(_) => "icode",
            HeaderCheck::IcmpId(_) => "icmp_id",
            HeaderCheck::IcmpSeq(_) => "icmp_seq",
            HeaderCheck::Ttl(_) => "ttl",
            HeaderCheck::Tos(_) => "tos",
            HeaderCheck::Id(_) => "id",
            HeaderCheck::IpProto(_) => "ip_proto",
            HeaderCheck::Fragoffset(_) => "fragoffset",
            HeaderCheck::Seq(_) => "seq",
            HeaderCheck::Ack(_) => "ack",
            HeaderCheck::Window(_) => "window",
            HeaderCheck::SameIp => "sameip",
        }
    }
}

/// One detection step, in rule order (each may move or read the cursor).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Detection {
    /// `content` (and Snort 2 `uricontent`).
    Content(Content),
    /// `pcre`.
    Pcre(Pcre),
    /// `byte_test`.
    ByteTest(ByteTest),
    /// `byte_jump`.
    ByteJump(ByteJump),
    /// `byte_extract`.
    ByteExtract(ByteExtract),
    /// `isdataat`.
    IsDataAt(IsDataAt),
    /// `bufferlen` (Snort 3) or `urilen` (Snort 2, on `http_uri`).
    BufferLen {
        /// The length test.
        check: IntCheck,
        /// `relative`: the length left after the cursor.
        relative: bool,
        /// The buffer measured.
        buffer: Buffer,
    },
}

impl Detection {
    /// The option keyword.
    pub fn name(&self) -> &'static str {
        match self {
            Detection::Content(_) => "content",
            Detection::Pcre(_) => "pcre",
            Detection::ByteTest(_) => "byte_test",
            Detection::ByteJump(_) => "byte_jump",
            Detection::ByteExtract(_) => "byte_extract",
            Detection::IsDataAt(_) => "isdataat",
            Detection::BufferLen { .. } => "bufferlen",
        }
    }

    /// The buffer it inspects.
    pub fn buffer(&self) -> Buffer {
        match self {
            Detection::Content(c) => c.buffer,
            Detection::Pcre(p) => p.buffer,
            Detection::ByteTest(b) => b.buffer,
            Detection::ByteJump(b) => b.buffer,
            Detection::ByteExtract(b) => b.buffer,
            Detection::IsDataAt(b) => b.buffer,
            Detection::BufferLen { buffer, .. } => *buffer,
        }
    }
}

/// `flow`: the connection state and direction a packet must have.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Flow {
    /// `established` (Some(true)), `not_established` (Some(false)).
    pub established: Option<bool>,
    /// `stateless`.
    pub stateless: bool,
    /// `to_server`/`from_client` (Some(true)), `to_client`/`from_server` (Some(false)).
    pub to_server: Option<bool>,
    /// `only_stream` (Some(true)), `no_stream` (Some(false)).
    pub stream: Option<bool>,
    /// `only_frag` (Some(true)), `no_frag` (Some(false)).
    pub frag: Option<bool>,
}

/// The operation of a `flowbits` option.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlowbitsOp {
    /// `set`
    Set,
    /// `setx`: set, clearing the group's other bits.
    SetX,
    /// `unset`
    Unset,
    /// `toggle`
    Toggle,
    /// `isset`
    IsSet,
    /// `isnotset`
    IsNotSet,
    /// `noalert`: the rule never alerts (it only sets bits).
    NoAlert,
    /// `reset`: clear all bits (of the group).
    Reset,
}

/// `flowbits`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flowbits {
    /// The operation.
    pub op: FlowbitsOp,
    /// The bit names.
    pub bits: Vec<String>,
    /// `a|b` (true): any of the bits; `a&b` or one name (false): all of them.
    pub any: bool,
    /// The group (Snort 2 `flowbits:set,name,group`).
    pub group: Option<String>,
}

/// The kind of an event threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ThresholdKind {
    /// `threshold: type limit`: at most `count` alerts per period.
    Limit,
    /// `type threshold`: an alert every `count`th match.
    Threshold,
    /// `type both`: one alert per period once `count` matches are reached.
    Both,
    /// `detection_filter`: matches only after `count` in the period.
    DetectionFilter,
}

/// `threshold` / `detection_filter`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Threshold {
    /// The kind.
    pub kind: ThresholdKind,
    /// `track by_dst` (true) or `by_src` (false).
    pub by_dst: bool,
    /// `count`.
    pub count: u32,
    /// `seconds`.
    pub seconds: u32,
}

impl Threshold {
    /// The option keyword.
    pub fn name(&self) -> &'static str {
        if self.kind == ThresholdKind::DetectionFilter {
            "detection_filter"
        } else {
            "threshold"
        }
    }
}

/// A parsed rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// 1-based line where the rule starts.
    pub line: usize,
    /// The file it came from: an index in [`RuleSet::files`] (0 for the
    /// main file or text).
    pub file: usize,
    /// The syntax detected.
    pub syntax: Syntax,
    /// Action.
    pub action: Action,
    /// Protocol.
    pub proto: Proto,
    /// Snort 3 service rule (`alert http (…)`): the service the header names.
    pub header_service: Option<String>,
    /// Source addresses.
    pub src: AddrExpr,
    /// Source ports.
    pub sport: PortExpr,
    /// `<>`: the rule also applies with source and destination swapped.
    pub bidirectional: bool,
    /// Destination addresses.
    pub dst: AddrExpr,
    /// Destination ports.
    pub dport: PortExpr,
    /// `msg`.
    pub msg: String,
    /// `sid`.
    pub sid: u32,
    /// `gid` (default 1).
    pub gid: u32,
    /// `rev` (default 1).
    pub rev: u32,
    /// `classtype`.
    pub classtype: Option<String>,
    /// `priority`.
    pub priority: Option<u32>,
    /// `reference` values, as written.
    pub references: Vec<String>,
    /// `metadata` values, as written.
    pub metadata: Vec<String>,
    /// `tag`, as written (accepted; netvm does not tag).
    pub tag: Option<String>,
    /// `flow`.
    pub flow: Option<Flow>,
    /// Header and size checks, in rule order.
    pub header: Vec<HeaderCheck>,
    /// Detection options, in rule order.
    pub detection: Vec<Detection>,
    /// `flowbits`, in rule order.
    pub flowbits: Vec<Flowbits>,
    /// `threshold` or `detection_filter`.
    pub threshold: Option<Threshold>,
    /// Snort 3 `service:a,b`, Snort 2 `metadata: service a`, or the header's service.
    pub service: Vec<String>,
}

/// A rule (or line) that was not parsed or not compiled: where and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    /// 1-based line.
    pub line: usize,
    /// The file: an index in [`RuleSet::files`].
    pub file: usize,
    /// The rule's `sid`, when it was read.
    pub sid: Option<u32>,
    /// The option (or construct: `header`, `variable`, `include`, …) the
    /// reason is about: the key of the skip summary.
    pub option: String,
    /// Why.
    pub reason: String,
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

/// A reason for skipping, before its line is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Why {
    /// The option (summary key).
    pub option: String,
    /// The reason.
    pub reason: String,
}

impl Why {
    /// A reason about `option`.
    pub fn new(option: &str, reason: impl Into<String>) -> Why {
        Why { option: option.to_string(), reason: reason.into() }
    }
}

/// Largest rule text accepted (bytes, after joining continuation lines).
pub const MAX_RULE_LEN: usize = 64 * 1024;
/// Largest content (bytes).
pub const MAX_CONTENT: usize = 4096;
/// Most detection options in one rule.
pub const MAX_DETECTION: usize = 256;
/// Most rules in one rule set.
pub const MAX_RULES: usize = 100_000;
/// Deepest `include` chain.
pub const MAX_INCLUDE_DEPTH: usize = 8;
/// Most lines a rule without `\` may continue over (Snort 3 multi-line rules).
const MAX_RULE_LINES: usize = 200;

/// The rules of a file, and the lines that were skipped.
#[derive(Clone, Debug, Default)]
pub struct RuleSet {
    /// Rules in file order.
    pub rules: Vec<Rule>,
    /// Rules and lines not parsed, with the reason.
    pub skipped: Vec<Skip>,
    /// The files read (index 0: the main file); empty for [`parse_rules`].
    pub files: Vec<PathBuf>,
}

impl RuleSet {
    /// The name of file `i` (`-` when the rules came as text).
    pub fn file_name(&self, i: usize) -> String {
        self.files.get(i).map_or("-".to_string(), |p| p.display().to_string())
    }
}

/// Parses rules text: variables start as Snort's defaults
/// ([`vars::defaults`]); `var`/`ipvar`/`portvar` lines redefine them;
/// `overrides` (`--var NAME=VALUE`) win over both. `include` lines are
/// skipped (there is no file to be relative to: see [`parse_rules_file`]).
pub fn parse_rules(text: &str, overrides: &HashMap<String, String>) -> RuleSet {
    let mut p = Parser::new(overrides);
    p.text(text, 0, None, 0);
    p.set
}

/// Parses a rules file and the files it includes.
pub fn parse_rules_file(path: &Path, overrides: &HashMap<String, String>) -> std::io::Result<RuleSet> {
    let text = read_text(path)?;
    let mut p = Parser::new(overrides);
    p.set.files.push(path.to_path_buf());
    p.text(&text, 0, Some(path), 0);
    Ok(p.set)
}

fn read_text(path: &Path) -> std::io::Result<String> {
    Ok(String::from_utf8_lossy(&std::fs::read(path)?).into_owned())
}

struct Parser<'o> {
    vars: HashMap<String, String>,
    overrides: &'o HashMap<String, String>,
    set: RuleSet,
    sids: HashMap<(u32, u32), (usize, usize)>,
}

/// Configuration lines of a snort.conf that are not rules: ignored.
const CONFIG_WORDS: [&str; 12] = [
    "config",
    "preprocessor",
    "output",
    "dynamicpreprocessor",
    "dynamicengine",
    "dynamicdetection",
    "event_filter",
    "rate_filter",
    "suppress",
    "threshold",
    "ruletype",
    "attribute_table",
];

impl<'o> Parser<'o> {
    fn new(overrides: &'o HashMap<String, String>) -> Parser<'o> {
        let mut vars = vars::defaults();
        vars.extend(overrides.iter().map(|(k, v)| (k.clone(), v.clone())));
        Parser { vars, overrides, set: RuleSet::default(), sids: HashMap::new() }
    }

    fn skip(&mut self, file: usize, line: usize, sid: Option<u32>, why: Why) {
        self.set.skipped.push(Skip { line, file, sid, option: why.option, reason: why.reason });
    }

    /// The statements of `text` (file index `file`, at `path`), `depth` includes deep.
    fn text(&mut self, text: &str, file: usize, path: Option<&Path>, depth: usize) {
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let start = i + 1;
            let first = lines[i].trim();
            i += 1;
            if first.is_empty() || first.starts_with('#') {
                continue;
            }
            let mut whole = String::new();
            let mut line = first;
            let mut too_long = false;
            // `\` continuations, then (for a rule) an option list not yet closed.
            loop {
                match line.strip_suffix('\\') {
                    Some(body) if i < lines.len() => {
                        whole.push_str(body);
                        whole.push(' ');
                        line = lines[i].trim();
                        i += 1;
                    }
                    Some(body) => {
                        whole.push_str(body);
                        break;
                    }
                    None => {
                        whole.push_str(line);
                        if !open_options(&whole) || i >= lines.len() || i + 1 - start > MAX_RULE_LINES {
                            break;
                        }
                        let next = lines[i].trim();
                        if starts_statement(next) {
                            break;
                        }
                        i += 1;
                        if !next.starts_with('#') {
                            whole.push(' ');
                        }
                        line = if next.starts_with('#') { "" } else { next };
                    }
                }
                if whole.len() > MAX_RULE_LEN {
                    too_long = true;
                }
            }
            if too_long || whole.len() > MAX_RULE_LEN {
                self.skip(file, start, None, Why::new("rule", format!("rule longer than {MAX_RULE_LEN} bytes")));
                continue;
            }
            self.statement(&whole, file, start, path, depth);
        }
    }

    fn statement(&mut self, whole: &str, file: usize, line: usize, path: Option<&Path>, depth: usize) {
        let mut words = whole.split_whitespace();
        let Some(first) = words.next() else { return };
        match first {
            "var" | "ipvar" | "portvar" => match (words.next(), words.next(), words.next()) {
                (Some(name), Some(value), None) => {
                    if !self.overrides.contains_key(name) {
                        self.vars.insert(name.to_string(), value.to_string());
                    }
                }
                _ => self.skip(file, line, None, Why::new(first, format!("`{first}` needs a name and a value"))),
            },
            "include" => {
                let rest = whole["include".len()..].trim();
                match header::expand(rest, &self.vars) {
                    Ok(target) => self.include(&target, file, line, path, depth),
                    Err(why) => self.skip(file, line, None, why),
                }
            }
            w if CONFIG_WORDS.contains(&w) => {}
            _ => {
                if self.set.rules.len() >= MAX_RULES {
                    self.skip(file, line, None, Why::new("rule", format!("more than {MAX_RULES} rules")));
                    return;
                }
                match options::parse_rule(whole, &self.vars) {
                    Ok(mut rule) => {
                        rule.line = line;
                        rule.file = file;
                        if let Some((f, l)) = self.sids.get(&(rule.gid, rule.sid)) {
                            let at = if *f == file { format!("line {l}") } else { format!("{}:{l}", self.set.file_name(*f)) };
                            let why = Why::new("sid", format!("duplicate sid {} (first on {at})", rule.sid));
                            self.skip(file, line, Some(rule.sid), why);
                        } else {
                            self.sids.insert((rule.gid, rule.sid), (file, line));
                            self.set.rules.push(rule);
                        }
                    }
                    Err((sid, why)) => self.skip(file, line, sid, why),
                }
            }
        }
    }

    fn include(&mut self, target: &str, file: usize, line: usize, path: Option<&Path>, depth: usize) {
        let Some(path) = path else {
            return self.skip(file, line, None, Why::new("include", "`include` needs a rules file to be relative to"));
        };
        if depth >= MAX_INCLUDE_DEPTH {
            return self.skip(file, line, None, Why::new("include", format!("includes nest deeper than {MAX_INCLUDE_DEPTH}")));
        }
        let target = path.parent().unwrap_or(Path::new(".")).join(target);
        match read_text(&target) {
            Ok(text) => {
                let index = self.set.files.len();
                self.set.files.push(target.clone());
                self.text(&text, index, Some(&target), depth + 1);
            }
            Err(e) => self.skip(file, line, None, Why::new("include", format!("include {}: {e}", target.display()))),
        }
    }
}

/// Whether `text` is a rule whose option list is missing or not closed yet
/// (outside quotes).
fn open_options(text: &str) -> bool {
    let Some(open) = options_start(text) else { return is_rule_start(text) };
    let (mut quoted, mut escaped) = (false, false);
    let mut last = ' ';
    for c in text[open + 1..].chars() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        }
        if !c.is_whitespace() {
            last = c;
        }
    }
    last != ')' || quoted
}

/// Where a rule's option list opens: the first `(` that is not `$(VAR)`.
pub(crate) fn options_start(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    (0..b.len()).find(|&i| b[i] == b'(' && (i == 0 || b[i - 1] != b'$'))
}

/// Whether a line starts with a rule action.
fn is_rule_start(line: &str) -> bool {
    let w = line.split_whitespace().next().unwrap_or("");
    matches!(w, "alert" | "drop" | "pass" | "log" | "reject" | "sdrop" | "block" | "react" | "rewrite")
}

/// Whether a line starts a new statement (so does not continue a rule).
fn starts_statement(line: &str) -> bool {
    let w = line.split_whitespace().next().unwrap_or("");
    is_rule_start(line) || matches!(w, "var" | "ipvar" | "portvar" | "include") || CONFIG_WORDS.contains(&w)
}

/// Parses one rule (no continuation lines); `line` is left 0. Variables in
/// `vars` only (no defaults added).
pub fn parse_rule(text: &str, vars: &HashMap<String, String>) -> Result<Rule, Why> {
    options::parse_rule(text, vars).map_err(|(_, why)| why)
}

#[cfg(test)]
mod tests;
