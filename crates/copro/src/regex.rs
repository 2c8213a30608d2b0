//! `regex`: Snort's `pcre` expressions over packet regions, with PCRE's
//! semantics on bytes; each runs on `regex-automata`'s meta regex when it
//! can (no backtracking), on PCRE2 with bounded matching otherwise.
//!
//! # Expressions
//! Written `/PATTERN/FLAGS` as in Snort's `pcre` option (double quotes around
//! the whole are allowed); the pattern is PCRE's, escapes as written. The
//! subject is bytes, not UTF-8: `\xNN` is the byte NN, `.` any byte but
//! `\n`, `\d \s \w \h \v` and POSIX classes are ASCII, case folding (`i`) is
//! ASCII. PCRE's `$` without `m` also matches before a final `\n` (`E`
//! makes it the very end only); `\Z` likewise, `\z` the very end.
//! Flags: `i` caseless, `s` dot matches newline, `m` multi-line `^`/`$`,
//! `x` extended, `A` anchored at the region start, `E` dollar at the end
//! only, `G` ungreedy (quantifiers lazy, `?` after one makes it greedy),
//! `O` the larger PCRE2 limits; Snort's `R` (relative) and `B` (raw bytes)
//! and the HTTP buffer flags `U I P H D M C K S Y` ([`HttpBuffer`], at
//! most one) are parsed into [`PcreSpec`] for the IDS, which chooses the
//! region; they change nothing here. Any other flag is an error naming it.
//!
//! # Engines
//! Decided per expression when it is loaded ([`compile_check`], which the
//! IDS calls too):
//! - regex-automata (leftmost-first, linear time) runs the pattern
//!   translated by [`translate`]: every construct whose meaning PCRE and
//!   regex-syntax share, written with explicit bytes (`\Q…\E`, octal and
//!   one-digit `\x` escapes, `\h \v \N \C`, POSIX classes, `{,n}`, the
//!   inline flags of groups such as (?i) or (?x:…) are translated); a `$`/`\Z` last in the pattern
//!   keeps PCRE's meaning through a marker group; a multi-line `^` is kept
//!   where it is leading in a pattern that cannot match empty.
//! - PCRE2 (10.46, 8-bit, UTF and UCP forbidden, JIT where available) runs
//!   the rest: look-around, backreferences, atomic groups, possessive
//!   quantifiers, `\G`, `\K`, `\R`, `\X`, `\p`, conditionals, recursion,
//!   callouts, verbs, `$` before more pattern, and translations
//!   regex-automata will not build (size limit). A search stops at
//!   [`MATCH_LIMIT`] backtracking steps, [`DEPTH_LIMIT`] nested frames or
//!   [`HEAP_LIMIT_KIB`] KiB of heap ([`MATCH_LIMIT_O`], [`DEPTH_LIMIT_O`]
//!   with `O`; the JIT has its 32 KiB stack instead of the depth limit):
//!   then out 0 is 2, "not inspected", never a silent "no match".
//!
//! An expression neither engine builds is an error naming it.
//! Limits: a pattern of at most [`MAX_PATTERN_LEN`] bytes, a compiled NFA of
//! at most [`NFA_SIZE_LIMIT`] bytes, [`MAX_REGEXES`] expressions and
//! [`MEMORY_LIMIT`] bytes of compiled expressions per instance.
//!
//! # Registers and operations
//! | register | meaning |
//! |----------|---------|
//! | in 0  | regex id |
//! | in 1  | region start (packet offset) |
//! | in 2  | region length |
//! | out 0 | 1 matched, 0 not, 2 not inspected (PCRE2 hit a limit) |
//! | out 1 | match start (absolute packet offset; 0 when none) |
//! | out 2 | match end (absolute packet offset, exclusive; 0 when none) |
//!
//! | op | name             | effect |
//! |----|------------------|--------|
//! | 0  | `search`         | leftmost-first match anywhere in the region (at its start with `A`) |
//! | 1  | `match_anchored` | a match that starts at the region start |
//!
//! The region is `[in1, in1 + in2) ∩ [0, packet length)` and is the whole
//! subject: `^` and `\b` see its edges, not the rest of the packet. An
//! unknown id is a bad argument (the handler faults with `copro`).
//!
//! # Configuration and file
//! `patterns = PATH` loads a file at creation; other settings are rejected.
//! File: one `ID /PATTERN/FLAGS` per line (blank and `#` lines skipped); the
//! last `/` on the line ends the pattern. Duplicate ids and bad expressions
//! are errors naming the 1-based line; `load` adds all of a file or nothing.
//! `dump` writes the file back; `clear` removes every expression; statistics
//! `regexes`, `searches`, `matches`, `limits` (searches stopped by a PCRE2
//! limit), `pcre2` (expressions on PCRE2).
//!
//! # Several workers
//! One set of compiled expressions that every worker searches (`Shared`);
//! a fork has its own search caches (a lazy DFA's cache per expression, one
//! PCRE2 match data) and registers, so workers never wait on one another.
//! `searches`, `matches` and `limits` count the operations of every worker,
//! whichever handle reports them.
//! While several handles exist the expressions cannot change: `load`
//! returns an error and `clear` does nothing (load them before the run).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use netvm_vm::{CoproConfig, CoproError, Coprocessor, InvokeContext, RegisterFile, WorkerShare};
use regex_automata::meta::{self, Regex};
use regex_automata::util::syntax;
use regex_automata::{Anchored, Input};

mod backtrack;
pub mod translate;

pub use backtrack::{Pcre2Scratch, DEPTH_LIMIT, DEPTH_LIMIT_O, HEAP_LIMIT_KIB, MATCH_LIMIT, MATCH_LIMIT_O};

/// Longest pattern text, in bytes.
pub const MAX_PATTERN_LEN: usize = 8192;
/// Largest compiled NFA of one expression, in bytes.
pub const NFA_SIZE_LIMIT: usize = 2 << 20;
/// Most expressions an instance holds.
pub const MAX_REGEXES: usize = 20_000;
/// Most memory (compiled expressions plus their search caches at creation) per instance.
pub const MEMORY_LIMIT: usize = 512 << 20;
/// Capacity of each expression's lazy-DFA cache.
const CACHE_CAPACITY: usize = 256 << 10;

/// A Snort HTTP buffer a `pcre` searches instead of the payload (its flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HttpBuffer {
    /// `U`: the normalized request URI (`http_uri`).
    Uri,
    /// `I`: the raw request URI (`http_raw_uri`).
    RawUri,
    /// `P`: the request body (`http_client_body`).
    ClientBody,
    /// `H`: the normalized headers (`http_header`).
    Header,
    /// `D`: the raw headers (`http_raw_header`).
    RawHeader,
    /// `M`: the request method (`http_method`).
    Method,
    /// `C`: the normalized cookie (`http_cookie`).
    Cookie,
    /// `K`: the raw cookie (`http_raw_cookie`).
    RawCookie,
    /// `S`: the response status code (`http_stat_code`).
    StatCode,
    /// `Y`: the response status message (`http_stat_msg`).
    StatMsg,
}

impl HttpBuffer {
    /// Every buffer, with its flag letter.
    pub const ALL: [(char, HttpBuffer); 10] = [
        ('U', HttpBuffer::Uri),
        ('I', HttpBuffer::RawUri),
        ('P', HttpBuffer::ClientBody),
        ('H', HttpBuffer::Header),
        ('D', HttpBuffer::RawHeader),
        ('M', HttpBuffer::Method),
        ('C', HttpBuffer::Cookie),
        ('K', HttpBuffer::RawCookie),
        ('S', HttpBuffer::StatCode),
        ('Y', HttpBuffer::StatMsg),
    ];

    /// The flag letter.
    pub fn flag(self) -> char {
        HttpBuffer::ALL.iter().find(|(_, b)| *b == self).map_or('?', |(c, _)| *c)
    }

    /// Snort's name of the buffer (`http_uri`, ...).
    pub fn name(self) -> &'static str {
        match self {
            HttpBuffer::Uri => "http_uri",
            HttpBuffer::RawUri => "http_raw_uri",
            HttpBuffer::ClientBody => "http_client_body",
            HttpBuffer::Header => "http_header",
            HttpBuffer::RawHeader => "http_raw_header",
            HttpBuffer::Method => "http_method",
            HttpBuffer::Cookie => "http_cookie",
            HttpBuffer::RawCookie => "http_raw_cookie",
            HttpBuffer::StatCode => "http_stat_code",
            HttpBuffer::StatMsg => "http_stat_msg",
        }
    }
}

/// Every flag [`parse_pcre`] accepts: PCRE's `ismx`, PCRE2's `AEG`, Snort's
/// `RBO` and the HTTP buffer flags.
pub const FLAGS: &str = "ismxAEGRBOUIPHDMCKSY";

/// A parsed `/PATTERN/FLAGS` expression (Snort's `pcre` option less its `!`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PcreSpec {
    /// The text between the slashes, escapes as written.
    pub pattern: String,
    /// `i`: case-insensitive (ASCII).
    pub caseless: bool,
    /// `s`: `.` matches `\n`.
    pub dotall: bool,
    /// `m`: `^` and `$` match at line boundaries.
    pub multiline: bool,
    /// `x`: whitespace and `#` comments in the pattern are ignored.
    pub extended: bool,
    /// `A`: the match must start at the region start.
    pub anchored: bool,
    /// `E`: `$` matches only at the very end (not before a final `\n`).
    pub dollar_endonly: bool,
    /// `G`: quantifiers are lazy, and `?` after one makes it greedy.
    pub ungreedy: bool,
    /// `R`: searched from the end of the previous match (the IDS's cursor).
    pub relative: bool,
    /// `B`: the raw bytes, not a normalized buffer (the IDS has only raw bytes).
    pub rawbytes: bool,
    /// `O`: the larger PCRE2 limits ([`MATCH_LIMIT_O`], [`DEPTH_LIMIT_O`]).
    pub override_limits: bool,
    /// `U I P H D M C K S Y`: the HTTP buffer searched (chosen by the IDS).
    pub buffer: Option<HttpBuffer>,
}

impl PcreSpec {
    /// The flags in canonical ([`FLAGS`]) order.
    pub fn flags(&self) -> String {
        let mut f = String::new();
        let on = [
            self.caseless,
            self.dotall,
            self.multiline,
            self.extended,
            self.anchored,
            self.dollar_endonly,
            self.ungreedy,
            self.relative,
            self.rawbytes,
            self.override_limits,
        ];
        for (c, on) in FLAGS.chars().zip(on) {
            if on {
                f.push(c);
            }
        }
        f.extend(self.buffer.map(HttpBuffer::flag));
        f
    }
}

impl std::fmt::Display for PcreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "/{}/{}", self.pattern, self.flags())
    }
}

/// Parses `/PATTERN/FLAGS` (optionally inside double quotes); the last `/`
/// ends the pattern, whose escapes are kept as written. Does not compile
/// it: see [`compile_check`].
pub fn parse_pcre(text: &str) -> Result<PcreSpec, String> {
    let t = text.trim();
    let t = match t.strip_prefix('"') {
        Some(rest) => rest.strip_suffix('"').ok_or("unterminated `\"` around the expression")?,
        None => t,
    };
    let body = t.strip_prefix('/').ok_or("expected `/PATTERN/FLAGS`")?;
    let close = body.rfind('/').ok_or("missing the closing `/` of `/PATTERN/FLAGS`")?;
    let (pattern, flags) = (&body[..close], &body[close + 1..]);
    if pattern.len() > MAX_PATTERN_LEN {
        return Err(format!("pattern of {} bytes is longer than {MAX_PATTERN_LEN}", pattern.len()));
    }
    if pattern.contains(['\n', '\r']) {
        return Err("pattern contains a line break".to_string());
    }
    let mut s = PcreSpec { pattern: pattern.to_string(), ..PcreSpec::default() };
    let mut bad = String::new();
    for c in flags.chars() {
        let flag = match c {
            'i' => &mut s.caseless,
            's' => &mut s.dotall,
            'm' => &mut s.multiline,
            'x' => &mut s.extended,
            'A' => &mut s.anchored,
            'E' => &mut s.dollar_endonly,
            'G' => &mut s.ungreedy,
            'R' => &mut s.relative,
            'B' => &mut s.rawbytes,
            'O' => &mut s.override_limits,
            c => {
                match HttpBuffer::ALL.iter().find(|(f, _)| *f == c) {
                    Some((_, b)) if s.buffer.is_none_or(|old| old == *b) => s.buffer = Some(*b),
                    Some(_) => return Err(format!("more than one HTTP buffer flag in `{flags}`")),
                    None => bad.push(c),
                }
                continue;
            }
        };
        *flag = true;
    }
    if !bad.is_empty() {
        return Err(format!("unsupported flag(s) `{bad}` (supported: {FLAGS})"));
    }
    Ok(s)
}

/// What one search found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Search {
    /// A match `[start, end)` in the searched bytes.
    Match(usize, usize),
    /// No match.
    NoMatch,
    /// PCRE2 stopped at its match, depth or heap limit: not inspected.
    Limit,
}

/// An expression compiled for one of the two engines.
#[derive(Debug)]
pub enum Engine {
    /// regex-automata's meta regex, on the pattern translated from PCRE.
    Automata(AutomataRegex),
    /// PCRE2 (a construct regex-automata cannot run), with the reason.
    Pcre2(backtrack::Pcre2Regex, String),
}

/// A translated expression on regex-automata.
#[derive(Debug)]
pub struct AutomataRegex {
    regex: Regex,
    markers: bool,
    anchored: bool,
    /// The regex-syntax text it was built from.
    pub translated: String,
}

/// Per-expression search state of one handle.
#[derive(Debug)]
pub enum EngineCache {
    /// regex-automata's caches.
    Automata(Box<meta::Cache>),
    /// PCRE2 keeps its state in the handle's [`Pcre2Scratch`].
    Pcre2,
}

impl Engine {
    /// Whether it runs on PCRE2.
    pub fn is_pcre2(&self) -> bool {
        matches!(self, Engine::Pcre2(..))
    }

    /// Fresh search state for this expression.
    pub fn create_cache(&self) -> EngineCache {
        match self {
            Engine::Automata(a) => EngineCache::Automata(Box::new(a.regex.create_cache())),
            Engine::Pcre2(..) => EngineCache::Pcre2,
        }
    }

    fn memory_usage(&self) -> usize {
        match self {
            Engine::Automata(a) => a.regex.memory_usage(),
            // Not reported by PCRE2; an estimate of a small compiled pattern.
            Engine::Pcre2(..) => 4096,
        }
    }

    /// Searches `hay` (a match starting at 0 only when `anchored` or the
    /// expression has `A`).
    pub fn search(&self, cache: &mut EngineCache, scratch: &mut Pcre2Scratch, hay: &[u8], anchored: bool) -> Search {
        match (self, cache) {
            (Engine::Automata(a), EngineCache::Automata(c)) => a.search(c, hay, anchored),
            (Engine::Pcre2(p, _), _) => p.search(scratch, hay, anchored),
            (Engine::Automata(a), c) => {
                *c = EngineCache::Automata(Box::new(a.regex.create_cache()));
                self.search(c, scratch, hay, anchored)
            }
        }
    }

    /// [`Engine::search`] with state made for this one search (tests, references).
    pub fn find(&self, hay: &[u8]) -> Search {
        self.search(&mut self.create_cache(), &mut Pcre2Scratch::new(), hay, false)
    }
}

impl AutomataRegex {
    fn search(&self, cache: &mut meta::Cache, hay: &[u8], anchored: bool) -> Search {
        let input = Input::new(hay).anchored(if anchored || self.anchored { Anchored::Yes } else { Anchored::No });
        let Some(m) = self.regex.search_with(cache, &input) else { return Search::NoMatch };
        let mut end = m.end();
        // PCRE's `$` before a final `\n`: did a marker group take the `\n`?
        if self.markers && end == hay.len() && hay.last() == Some(&b'\n') {
            let mut caps = self.regex.create_captures();
            self.regex.search_captures_with(cache, &input.clone().span(m.start()..hay.len()).anchored(Anchored::Yes), &mut caps);
            if (1..caps.group_len()).any(|g| caps.get_group(g).is_some()) {
                end -= 1;
            }
        }
        Search::Match(m.start(), end)
    }
}

/// Whether the `regex` coprocessor can build the expression, without
/// building it: exactly when [`compile_check`] succeeds (PCRE2 decides what
/// is valid; an expression regex-automata cannot build runs on PCRE2), at a
/// fraction of the cost (no automaton, no JIT). The IDS checks every
/// rule's pcre with it.
pub fn validate(spec: &PcreSpec) -> Result<(), String> {
    backtrack::Pcre2Regex::check(&spec.pattern, spec).map_err(|e| format!("bad expression `{}`: {e}", shorten(&spec.pattern)))
}

/// Builds a parsed expression the way the `regex` coprocessor does: on
/// regex-automata when [`translate`](translate::translate) says the
/// translation means the same, else on PCRE2; `Err` when neither engine
/// can build it (the message says why). The IDS calls this for every
/// rule's pcre, so that a rule is skipped rather than failing the table.
pub fn compile_check(spec: &PcreSpec) -> Result<Engine, String> {
    // PCRE2 decides what is a valid expression, whichever engine runs it.
    let pcre2 =
        backtrack::Pcre2Regex::compile(&spec.pattern, spec).map_err(|e| format!("bad expression `{}`: {e}", shorten(&spec.pattern)))?;
    let why = match translate::translate(&spec.pattern, spec) {
        Ok(t) => match build_automata(&t.pattern) {
            Ok(regex) => {
                return Ok(Engine::Automata(AutomataRegex {
                    regex,
                    markers: t.markers > 0,
                    anchored: spec.anchored,
                    translated: t.pattern,
                }))
            }
            Err(e) => e,
        },
        Err(why) => why,
    };
    Ok(Engine::Pcre2(pcre2, why))
}

/// Builds the expression on PCRE2 whatever it contains: the reference the
/// translation is tested against.
pub fn compile_pcre2(spec: &PcreSpec) -> Result<Engine, String> {
    backtrack::Pcre2Regex::compile(&spec.pattern, spec).map(|p| Engine::Pcre2(p, "asked for".into()))
}

fn build_automata(pattern: &str) -> Result<Regex, String> {
    let syn = syntax::Config::new().unicode(false).utf8(false).nest_limit(200);
    let cfg = meta::Config::new()
        .utf8_empty(false)
        .nfa_size_limit(Some(NFA_SIZE_LIMIT))
        .onepass_size_limit(Some(1 << 20))
        .dfa_size_limit(Some(1 << 20))
        .hybrid_cache_capacity(CACHE_CAPACITY);
    meta::Builder::new().configure(cfg).syntax(syn).build(pattern).map_err(|e| {
        if let Some(limit) = e.size_limit() {
            format!("larger than regex-automata's {limit}-byte limit")
        } else {
            format!("regex-automata: {e}")
        }
    })
}

fn shorten(s: &str) -> String {
    if s.chars().count() <= 60 {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(60).collect::<String>())
    }
}

/// Parses a regex file into `(id, expression)` pairs (without compiling).
/// Errors name the 1-based line.
pub fn parse_regex_file(text: &str) -> Result<Vec<(u32, PcreSpec, usize)>, String> {
    let mut out = Vec::new();
    let mut ids = HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |e: String| format!("line {}: {e}", n + 1);
        let end = line.find(char::is_whitespace).unwrap_or(line.len());
        let id = line[..end]
            .parse::<u32>()
            .map_err(|_| err(format!("regex id `{}` is not a number from 0 to {}", shorten(&line[..end]), u32::MAX)))?;
        let spec = parse_pcre(&line[end..]).map_err(err)?;
        if !ids.insert(id) {
            return Err(err(format!("duplicate regex id {id}")));
        }
        if out.len() >= MAX_REGEXES {
            return Err(err(format!("more than {MAX_REGEXES} expressions")));
        }
        out.push((id, spec, n + 1));
    }
    Ok(out)
}

struct Entry {
    id: u32,
    spec: PcreSpec,
    engine: Engine,
}

/// The compiled expressions, shared by the handles of every worker.
#[derive(Default)]
struct Compiled {
    entries: Vec<Entry>,
    by_id: HashMap<u32, usize>,
    memory: usize,
}

/// Statistics counters (see [`Tally`](crate::share::Tally)).
const SEARCHES: usize = 0;
const MATCHES: usize = 1;
const LIMITS: usize = 2;

/// The `regex` coprocessor: numbered expressions searched in packet regions.
#[derive(Default)]
pub struct RegexCopro {
    set: Arc<Compiled>,
    /// This handle's search cache of each expression, in `set.entries` order.
    caches: Vec<EngineCache>,
    /// This handle's PCRE2 match data (one for every PCRE2 expression).
    scratch: Pcre2Scratch,
    input: [u32; 3],
    output: [u32; 3],
    tally: crate::share::Tally<3>,
}

impl std::fmt::Debug for RegexCopro {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegexCopro").field("regexes", &self.set.entries.len()).field("memory", &self.set.memory).finish()
    }
}

impl RegexCopro {
    /// An instance without expressions.
    pub fn new() -> RegexCopro {
        RegexCopro::default()
    }

    /// Compiles and adds expressions (all or none); an error names the
    /// expression's `line` when it is not 0. Fails while other workers'
    /// handles share the expressions.
    pub fn add(&mut self, specs: Vec<(u32, PcreSpec, usize)>) -> Result<usize, String> {
        let at = |line: usize, e: String| if line == 0 { e } else { format!("line {line}: {e}") };
        let Some(set) = Arc::get_mut(&mut self.set) else {
            return Err("expressions cannot change while several workers share them; load them before the run starts".to_string());
        };
        if set.entries.len() + specs.len() > MAX_REGEXES {
            return Err(format!("more than {MAX_REGEXES} expressions"));
        }
        let mut ids: HashSet<u32> = set.by_id.keys().copied().collect();
        let mut memory = set.memory;
        let mut new = Vec::with_capacity(specs.len());
        for (id, spec, line) in specs {
            if !ids.insert(id) {
                return Err(at(line, format!("duplicate regex id {id}")));
            }
            let engine = compile_check(&spec).map_err(|e| at(line, e))?;
            let cache = engine.create_cache();
            let cache_size = match &cache {
                EngineCache::Automata(c) => c.memory_usage(),
                EngineCache::Pcre2 => 0,
            };
            let size = engine.memory_usage() + cache_size + spec.pattern.len();
            memory += size;
            if memory > MEMORY_LIMIT {
                return Err(at(line, format!("expressions need more than {MEMORY_LIMIT} bytes")));
            }
            new.push((Entry { id, spec, engine }, cache));
        }
        let n = new.len();
        for (e, cache) in new {
            set.by_id.insert(e.id, set.entries.len());
            set.entries.push(e);
            self.caches.push(cache);
        }
        set.memory = memory;
        Ok(n)
    }

    /// Searches `haystack` with expression `id`: leftmost-first, or only a
    /// match starting at 0 when `anchored`. `None` for an unknown id.
    pub fn search(&mut self, id: u32, haystack: &[u8], anchored: bool) -> Option<Search> {
        let i = *self.set.by_id.get(&id)?;
        let e = &self.set.entries[i];
        Some(e.engine.search(&mut self.caches[i], &mut self.scratch, haystack, anchored))
    }

    /// The engine that runs expression `id`.
    pub fn engine(&self, id: u32) -> Option<&Engine> {
        self.set.by_id.get(&id).map(|&i| &self.set.entries[i].engine)
    }

    /// The expression with this id.
    pub fn spec(&self, id: u32) -> Option<&PcreSpec> {
        self.set.by_id.get(&id).map(|&i| &self.set.entries[i].spec)
    }
}

pub(crate) fn create(cfg: &CoproConfig) -> Result<Box<dyn Coprocessor>, String> {
    if let Some(k) = cfg.keys().find(|k| k.as_str() != "patterns") {
        return Err(format!("regex: unknown setting `{k}` (known: patterns)"));
    }
    let mut r = RegexCopro::new();
    if let Some(path) = cfg.get("patterns") {
        let text = std::fs::read_to_string(path).map_err(|e| format!("regex: cannot read patterns `{path}`: {e}"))?;
        r.load(&text).map_err(|e| format!("regex: {path}: {e}"))?;
    }
    Ok(Box::new(r))
}

impl Coprocessor for RegexCopro {
    fn kind(&self) -> &str {
        "regex"
    }

    fn write(&mut self, reg: u8, value: u32) -> Result<(), CoproError> {
        *self.input.get_mut(reg as usize).ok_or(CoproError::NoRegister(reg))? = value;
        Ok(())
    }

    fn read(&mut self, reg: u8) -> Result<u32, CoproError> {
        self.output.get(reg as usize).copied().ok_or(CoproError::NoRegister(reg))
    }

    fn registers(&mut self) -> RegisterFile {
        RegisterFile::over(&mut self.input, &mut self.output)
    }

    fn invoke(&mut self, op: u8, ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        let anchored = match op {
            0 => false,
            1 => true,
            _ => return Err(CoproError::NoOperation(op)),
        };
        let [id, start, len] = self.input;
        let pkt = ctx.packet;
        let lo = (start as usize).min(pkt.len());
        let hi = ((u64::from(start) + u64::from(len)).min(pkt.len() as u64) as usize).max(lo);
        let found = self.search(id, &pkt[lo..hi], anchored).ok_or_else(|| CoproError::BadArgument(format!("no regex with id {id}")))?;
        self.tally.add(SEARCHES, 1);
        self.output = match found {
            Search::Match(s, e) => {
                self.tally.add(MATCHES, 1);
                [1, (lo + s) as u32, (lo + e) as u32]
            }
            Search::NoMatch => [0; 3],
            Search::Limit => {
                self.tally.add(LIMITS, 1);
                [2, 0, 0]
            }
        };
        Ok(())
    }

    fn dump(&self) -> String {
        let mut s = String::new();
        for e in &self.set.entries {
            let _ = writeln!(s, "{} {}", e.id, e.spec);
        }
        s
    }

    fn load(&mut self, text: &str) -> Result<usize, String> {
        let specs = parse_regex_file(text)?;
        self.add(specs)
    }

    /// Removes every expression (nothing while several workers share them).
    fn clear(&mut self) {
        if let Some(set) = Arc::get_mut(&mut self.set) {
            *set = Compiled::default();
            self.caches.clear();
        }
    }

    fn memory(&self) -> u64 {
        self.set.memory as u64
    }

    fn stats(&self) -> Vec<(String, u64)> {
        let t = self.tally.totals();
        vec![
            ("regexes".to_string(), self.set.entries.len() as u64),
            ("searches".to_string(), t[SEARCHES]),
            ("matches".to_string(), t[MATCHES]),
            ("limits".to_string(), t[LIMITS]),
            ("pcre2".to_string(), self.set.entries.iter().filter(|e| e.engine.is_pcre2()).count() as u64),
        ]
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    /// Another handle on the same expressions, with caches of its own.
    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        Ok(Box::new(RegexCopro {
            set: Arc::clone(&self.set),
            caches: self.set.entries.iter().map(|e| e.engine.create_cache()).collect(),
            scratch: Pcre2Scratch::new(),
            input: [0; 3],
            output: [0; 3],
            tally: self.tally.share(),
        }))
    }

    fn share(&self) -> WorkerShare {
        WorkerShare::Shared
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netvm_vm::Timestamp;
    use proptest::prelude::*;

    fn run(c: &mut dyn Coprocessor, op: u8, ins: [u32; 3], packet: &[u8]) -> Result<[u32; 3], CoproError> {
        for (r, v) in ins.into_iter().enumerate() {
            c.write(r as u8, v)?;
        }
        c.invoke(op, &InvokeContext { packet, info: &[], now: Timestamp::default(), seq: 0 })?;
        Ok([c.read(0)?, c.read(1)?, c.read(2)?])
    }

    #[test]
    fn parse_flags() {
        let s = parse_pcre("/a\\/b/ismxAEGRBOU").unwrap();
        assert_eq!(s.pattern, "a\\/b");
        assert!(s.caseless && s.dotall && s.multiline && s.extended);
        assert!(s.anchored && s.dollar_endonly && s.ungreedy && s.relative && s.rawbytes && s.override_limits);
        assert_eq!(s.buffer, Some(HttpBuffer::Uri));
        assert_eq!(s.to_string(), "/a\\/b/ismxAEGRBOU");
        for (c, b) in HttpBuffer::ALL {
            let p = parse_pcre(&format!("/x/{c}R")).unwrap();
            assert_eq!((p.buffer, p.relative, p.flags()), (Some(b), true, format!("R{c}")));
            assert!(b.name().starts_with("http_"));
        }
        let q = parse_pcre("\"/^GET/R\"").unwrap();
        assert_eq!((q.pattern.as_str(), q.flags().as_str()), ("^GET", "R"));
        assert_eq!(parse_pcre("/x/").unwrap().flags(), "");
        assert!(parse_pcre("/x/iuq").unwrap_err().contains("`uq`"));
        assert!(parse_pcre("/x/UH").unwrap_err().contains("more than one HTTP buffer"));
        for bad in ["x/i", "/x", "\"/x/i", ""] {
            assert!(parse_pcre(bad).is_err(), "{bad}");
        }
    }

    fn find(p: &str, h: &[u8]) -> Search {
        compile_check(&parse_pcre(p).unwrap()).unwrap_or_else(|e| panic!("{p}: {e}")).find(h)
    }

    fn on_pcre2(p: &str) -> bool {
        compile_check(&parse_pcre(p).unwrap()).unwrap().is_pcre2()
    }

    use Search::{Limit, Match as M, NoMatch as No};

    #[test]
    fn escapes_are_pcre_bytes() {
        assert_eq!(find("/\\x90{6,}\\xeb/", b"A\x90\x90\x90\x90\x90\x90\x90\xebB"), M(1, 9), "NOP sled");
        assert_eq!(find("/\\x90{6,}\\xeb/", b"\x90\x90\x90\x90\x90\xeb"), No);
        assert_eq!(find("/\\d+\\.\\d+/", b"v 10.25!"), M(2, 7));
        assert_eq!(find("/a\\sb/", b"a\x0bb"), M(0, 3), "\\s has VT");
        assert_eq!(find("/\\x4g/", b"\x04g"), M(0, 2), "one hex digit");
        assert_eq!(find("/\\060\\o{102}\\0/", b"0B\x00"), M(0, 3), "octal");
        assert_eq!(find("/[\\101-\\103]+/", b"xABCD"), M(1, 4));
        assert_eq!(find("/\\Qa.b\\E+/", b"a.bb axb"), M(0, 4));
        assert_eq!(find("/\\h\\v\\N/", b"\xa0\x85x"), M(0, 3));
        assert_eq!(find("/[[:alpha:]]+[[:^digit:]]/", b"1ab1cd!"), M(1, 3));
        assert_eq!(find("/a{,2}b/", b"aaab"), M(1, 4), "{{,n}} is {{0,n}} (PCRE2 10.43+)");
        assert_eq!(find("/a{x}/", b"a{x}"), M(0, 4), "a literal brace");
        assert_eq!(find("/\\<\\>\\//", b"<>/"), M(0, 3), "punctuation escapes are literals");
        assert_eq!(find("/\\xff./", b"\x00\xff\xfe"), M(1, 3), "bytes, not UTF-8");
        assert_eq!(find("/\\w+/", "é1".as_bytes()), M(2, 3), "ASCII \\w");
        assert_eq!(find("/\\cA\\e/", b"\x01\x1b"), M(0, 2));
        assert_eq!(find("/(?i)ab(?-i)c|d/", b"ABC ABc D"), M(4, 7), "(?-i) carries over to later branches");
        assert_eq!(find("/(a(?i)b|c)/", b"xC"), M(1, 2));
        assert!(!on_pcre2("/\\x90{6,}\\xeb/") && !on_pcre2("/(?i:a)b\\Z/m"));
        assert!(!on_pcre2("/(a|bc?)*(x?)?/"), "repetitions of groups that cannot match empty");
    }

    #[test]
    fn every_flag() {
        // i s m x
        assert_eq!(find("/AB+C/i", b"xxaBbCx"), M(2, 6));
        assert_eq!(find("/[^a]/i", b"AaB"), M(2, 3), "a negated class folds first");
        assert_eq!(find("/\\xe9/i", b"\xc9\xe9"), M(1, 2), "no folding above ASCII");
        assert_eq!(find("/a.c/", b"a\nc"), No);
        assert_eq!(find("/a.c/s", b"a\nc"), M(0, 3));
        assert_eq!(find("/^b$/m", b"a\nb\nc"), M(2, 3));
        assert_eq!(find("/a b # c/x", b"xab"), M(1, 3));
        assert_eq!(find("/a[ ]b/x", b"a b"), M(0, 3), "x keeps class whitespace");
        // A: anchored at the region start.
        assert_eq!(find("/b/A", b"ab"), No);
        assert_eq!(find("/a/A", b"ab"), M(0, 1));
        // $ and E: PCRE's `$` also matches before a final newline.
        assert_eq!(find("/b$/", b"ab\n"), M(1, 2));
        assert_eq!(find("/b\\s*$/", b"ab\n"), M(1, 3));
        assert_eq!(find("/b$/E", b"ab\n"), No);
        assert_eq!(find("/b\\Z/", b"ab\n"), M(1, 2));
        assert_eq!(find("/b\\z/", b"ab\n"), No);
        assert_eq!(find("/b$/", b"ab\n\n"), No);
        assert_eq!(find("/b$\\n/", b"ab\n"), M(1, 3), "`$` before more pattern: PCRE2");
        assert!(on_pcre2("/b$\\n/"));
        // m: `^` does not match after a final newline.
        assert_eq!(find("/^$/m", b"a\n"), No);
        assert!(on_pcre2("/^$/m") && !on_pcre2("/^Host:/m"));
        // G: ungreedy.
        assert_eq!(find("/a+/G", b"aaa"), M(0, 1));
        assert_eq!(find("/a+?/G", b"aaa"), M(0, 3));
        assert_eq!(find("/a(?U)b+/", b"abbb"), M(0, 2));
        // R B and the buffers change nothing here; O raises the PCRE2 limits.
        assert_eq!(find("/b/RB", b"ab"), M(1, 2));
        assert_eq!(find("/b/U", b"ab"), M(1, 2));
        let slow = "/(?=x)?(a+)+$/";
        let hay = [b"a".repeat(24), b"b".to_vec()].concat();
        assert_eq!(find(slow, &hay), Limit, "catastrophic backtracking stops at the limit");
        assert!(on_pcre2(slow));
        let slow_o = "/(?=x)?(a|aa)+$/O";
        assert_eq!(find(slow_o, &[b"a".repeat(18), b"b".to_vec()].concat()), No, "O: within the larger limit");
        assert_eq!(find(&slow_o[..slow_o.len() - 1], &[b"a".repeat(30), b"b".to_vec()].concat()), Limit);
    }

    #[test]
    fn fallback_constructs_and_errors() {
        for (p, h, want) in [
            ("/(a)\\1/", &b"xaa"[..], M(1, 3)),
            ("/a(?=b)/", b"acab", M(2, 3)),
            ("/(?<!x)b/", b"xbab", M(3, 4)),
            ("/(?>a+)b/", b"aab", M(0, 3)),
            ("/a++b/", b"aab", M(0, 3)),
            ("/\\Ga/", b"ba", No),
            ("/a\\Kb/", b"ab", M(1, 2)),
            ("/a\\Rb/", b"a\r\nb", M(0, 4)),
            ("/(?(?=a)ab|cd)/", b"xcd", M(1, 3)),
            // PCRE ends a loop at an empty iteration; a Thompson NFA does not.
            ("/(.?[^a]??)+?/G", b"\na", M(0, 1)),
            ("/(a?)*b/", b"aab", M(0, 3)),
        ] {
            assert!(on_pcre2(p), "{p}");
            assert_eq!(find(p, h), want, "{p}");
        }
        let c = |p: &str| compile_check(&parse_pcre(p).unwrap());
        for bad in ["/(/", "/a{2,1}/", "/\\i/", "/[b-a]/", "/(*UTF)a/"] {
            let e = c(bad).unwrap_err();
            assert!(e.starts_with("bad expression"), "{bad}: {e}");
        }
        let Engine::Pcre2(_, why) = c("/(\\w{1000}){200}x/").unwrap() else { panic!("too big for regex-automata") };
        assert!(why.contains("limit"), "{why}");
    }

    /// A pattern from a small PCRE grammar that both engines accept.
    fn pattern() -> impl Strategy<Value = String> {
        let atom = prop_oneof![
            Just("a".to_string()),
            Just("b".to_string()),
            Just("\\n".to_string()),
            Just(".".to_string()),
            Just("[ab]".to_string()),
            Just("[^a]".to_string()),
            Just("\\s".to_string()),
            Just("\\w".to_string()),
            Just("\\b".to_string()),
            Just("^".to_string()),
            Just("$".to_string()),
            Just("\\Z".to_string()),
            Just("\\z".to_string()),
            Just("\\A".to_string()),
            Just("A".to_string()),
        ];
        let leaf =
            (atom, prop_oneof![Just(""), Just("*"), Just("+"), Just("?"), Just("*?"), Just("{1,2}"), Just("??")]).prop_map(|(a, q)| {
                if a.starts_with(['^', '$', '\\']) && a.len() < 3 && !a.starts_with("\\n") && !a.starts_with("\\s") && !a.starts_with("\\w")
                {
                    a
                } else {
                    a + q
                }
            });
        leaf.prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 1..4).prop_map(|v| v.concat()),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("(?:{a}|{b})")),
                (inner.clone(), prop_oneof![Just("*"), Just("?"), Just("+?")]).prop_map(|(a, q)| format!("({a}){q}")),
            ]
        })
    }

    proptest! {
        /// Where a pattern runs on regex-automata, PCRE2 finds the same match.
        #[test]
        fn translation_agrees_with_pcre2(p in pattern(), flags in "[imsEG]{0,3}", hay in "[abA\\n ]{0,8}") {
            let spec = parse_pcre(&format!("/{p}/{flags}")).unwrap();
            if let Ok(Engine::Automata(a)) = compile_check(&spec) {
                let reference = backtrack::Pcre2Regex::compile(&spec.pattern, &spec).unwrap();
                let got = Engine::Automata(a).find(hay.as_bytes());
                let want = reference.search(&mut Pcre2Scratch::new(), hay.as_bytes(), false);
                prop_assert_eq!(got, want, "{} on {:?}", spec, hay);
            }
        }
    }

    #[test]
    fn registers_ops_clipping_and_stats() {
        let mut c = create(&CoproConfig::new()).unwrap();
        assert_eq!(c.load("# demo\n1 /GET \\/[a-z]+/\n2 /^\\r\\n/\n").unwrap(), 2);
        let pkt = b"xxGET /index\r\nGET /abc";
        assert_eq!(run(&mut *c, 0, [1, 0, 100], pkt).unwrap(), [1, 2, 12]);
        assert_eq!(run(&mut *c, 0, [1, 3, 100], pkt).unwrap(), [1, 14, 22]);
        assert_eq!(run(&mut *c, 0, [1, 14, 7], pkt).unwrap(), [1, 14, 21], "clipped by the region");
        assert_eq!(run(&mut *c, 0, [1, 14, 5], pkt).unwrap(), [0; 3]);
        assert_eq!(run(&mut *c, 1, [1, 0, 100], pkt).unwrap(), [0; 3], "anchored at region start");
        assert_eq!(run(&mut *c, 1, [1, 2, 100], pkt).unwrap(), [1, 2, 12]);
        assert_eq!(run(&mut *c, 0, [2, 0, 100], pkt).unwrap(), [0; 3], "^ is the region start");
        assert_eq!(run(&mut *c, 0, [2, 12, 100], pkt).unwrap(), [1, 12, 14]);
        assert_eq!(run(&mut *c, 0, [1, u32::MAX, u32::MAX], pkt).unwrap(), [0; 3]);
        assert!(matches!(run(&mut *c, 0, [9, 0, 1], pkt), Err(CoproError::BadArgument(_))));
        assert!(matches!(
            c.invoke(2, &InvokeContext { packet: pkt, info: &[], now: Timestamp::default(), seq: 0 }),
            Err(CoproError::NoOperation(2))
        ));
        assert!(c.write(3, 0).is_err() && c.read(3).is_err());
        assert_eq!(
            c.stats(),
            vec![("regexes".into(), 2), ("searches".into(), 9), ("matches".into(), 5), ("limits".into(), 0), ("pcre2".into(), 0)]
        );
        let dumped = c.dump();
        assert_eq!(dumped, "1 /GET \\/[a-z]+/\n2 /^\\r\\n/\n");
        c.clear();
        assert!(c.dump().is_empty());
        assert_eq!(c.load(&dumped).unwrap(), 2);
        assert_eq!(c.dump(), dumped);
    }

    #[test]
    fn file_errors_name_lines_and_load_is_atomic() {
        let mut c = RegexCopro::new();
        c.load("5 /a/\n").unwrap();
        let e = |c: &mut RegexCopro, t: &str| c.load(t).unwrap_err();
        assert!(e(&mut c, "6 /b/\n\n7 /(/\n").starts_with("line 3: bad expression"));
        assert!(e(&mut c, "6 /b/\n5 /c/\n").starts_with("line 2: duplicate regex id 5"));
        assert!(e(&mut c, "6 /b/\n6 /c/\n").starts_with("line 2: duplicate regex id 6"));
        assert!(e(&mut c, "x /b/\n").starts_with("line 1: regex id"));
        assert!(e(&mut c, "6 /b/q\n").starts_with("line 1: unsupported flag(s) `q`"));
        assert!(e(&mut c, "6 b\n").starts_with("line 1: expected"));
        assert_eq!(c.dump(), "5 /a/\n", "failed loads add nothing");
        assert!(create(&CoproConfig::from([("size".to_string(), "1".to_string())])).is_err());
        assert!(create(&CoproConfig::from([("patterns".to_string(), "/nonexistent".to_string())])).is_err());
        let long = format!("1 /{}/", "a".repeat(MAX_PATTERN_LEN + 1));
        assert!(e(&mut c, &long).contains("longer than"));
    }

    #[test]
    fn forks_search_the_same_expressions_on_other_threads() {
        let mut a = create(&CoproConfig::new()).unwrap();
        a.load("1 /GET \\/[a-z]+/\n2 /b+/\n").unwrap();
        let pkt: &[u8] = b"xxGET /index bbb";
        let want = run(&mut *a, 0, [1, 0, 100], pkt).unwrap();
        let forks: Vec<Box<dyn Coprocessor>> = (0..3).map(|_| a.fork().unwrap()).collect();
        assert_eq!(forks[0].share(), WorkerShare::Shared);
        let threads: Vec<_> = forks
            .into_iter()
            .map(|mut f| {
                std::thread::spawn(move || {
                    let mut r = Vec::new();
                    for _ in 0..100 {
                        r.push(run(&mut *f, 0, [1, 0, 100], pkt).unwrap());
                        r.push(run(&mut *f, 0, [2, 0, 100], pkt).unwrap());
                    }
                    (f, r)
                })
            })
            .collect();
        let mut forks = Vec::new();
        for t in threads {
            let (f, r) = t.join().unwrap();
            assert!(r.chunks(2).all(|p| p[0] == want && p[1] == [1, 13, 16]));
            forks.push(f);
        }
        let stats = a.stats();
        assert_eq!(stats[1], ("searches".to_string(), 601), "every handle's searches");
        assert_eq!(forks[2].stats(), stats);
        assert!(a.load("3 /c/").unwrap_err().contains("several workers"));
        a.clear();
        assert_eq!(a.stats()[0], ("regexes".to_string(), 2), "clear does nothing while shared");
        drop(forks);
        assert_eq!(a.load("3 /c/").unwrap(), 1, "a sole handle changes them again");
        assert_eq!(run(&mut *a, 0, [3, 0, 100], b"abc").unwrap(), [1, 2, 3]);
    }

    proptest! {
        /// Region search equals a search of the clipped slice, shifted.
        #[test]
        fn regions_are_clipped(start in 0u32..40, len in prop_oneof![0u32..40, Just(u32::MAX)], pkt in "[ab\\n]{0,30}", op in 0u8..2) {
            let mut c = RegexCopro::new();
            c.load("1 /ab*|b$/m\n").unwrap();
            let o = run(&mut c, op, [1, start, len], pkt.as_bytes()).unwrap();
            let lo = (start as usize).min(pkt.len());
            let hi = (start as usize).saturating_add(len as usize).min(pkt.len());
            let want = match c.search(1, &pkt.as_bytes()[lo..hi], op == 1).unwrap() {
                Search::Match(s, e) => [1, (lo + s) as u32, (lo + e) as u32],
                _ => [0; 3],
            };
            prop_assert_eq!(o, want);
        }

        #[test]
        fn hostile_files_never_panic(s in "\\PC{0,40}") {
            let _ = RegexCopro::new().load(&s);
            let _ = parse_pcre(&s);
        }
    }
}
