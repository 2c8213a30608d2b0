//! `regex`: PCRE-style regular expressions over packet regions, compiled with
//! `regex-automata`'s meta regex (leftmost-first, byte-oriented).
//!
//! # Expressions
//! Written `/PATTERN/FLAGS` as in Snort's `pcre` option (double quotes around
//! the whole are allowed). Flags: `i` case-insensitive, `s` dot matches
//! newline, `m` multi-line `^`/`$`, `x` extended (whitespace and `#` comments
//! ignored), `u` Unicode (off by default: `.`, classes and `\w` work on single
//! bytes, `\xFF` matches the byte 0xFF, case folding is ASCII). Snort's
//! buffer/relative flags `R B U P H D M C K S Y I` are accepted and reported
//! by [`parse_pcre`] ([`PcreSpec::snort_flags`]) but change nothing here (the
//! IDS passes the right region itself); any other flag is an error naming it.
//! The syntax is regex-syntax's: backreferences, look-around, atomic groups
//! and possessive quantifiers are errors. Unlike PCRE, `$` without `m`
//! matches only at the very end of the region (not before a final `\n`).
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
//! | out 0 | 1 matched, 0 not |
//! | out 1 | match start (absolute packet offset; 0 when none) |
//! | out 2 | match end (absolute packet offset, exclusive; 0 when none) |
//!
//! | op | name             | effect |
//! |----|------------------|--------|
//! | 0  | `search`         | leftmost-first match anywhere in the region |
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
//! `regexes`, `searches`, `matches`.
//!
//! # Several workers
//! One set of compiled expressions that every worker searches (`Shared`);
//! a fork has its own search caches (a lazy DFA's cache per expression) and
//! registers, so workers never wait on one another. `searches` and `matches`
//! count the operations of every worker, whichever handle reports them.
//! While several handles exist the expressions cannot change: `load`
//! returns an error and `clear` does nothing (load them before the run).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use netvm_vm::{CoproConfig, CoproError, Coprocessor, InvokeContext, WorkerShare};
use regex_automata::meta::{self, Regex};
use regex_automata::util::syntax;
use regex_automata::{Anchored, Input};

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

/// Snort `pcre` flags accepted and reported but not interpreted here.
pub const SNORT_FLAGS: &str = "RBUPHDMCKSYI";

/// A parsed `/PATTERN/FLAGS` expression.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PcreSpec {
    /// The text between the slashes.
    pub pattern: String,
    /// `i`: case-insensitive.
    pub caseless: bool,
    /// `s`: `.` matches `\n`.
    pub dotall: bool,
    /// `m`: `^` and `$` match at line boundaries.
    pub multiline: bool,
    /// `x`: whitespace and comments in the pattern are ignored.
    pub extended: bool,
    /// `u`: Unicode classes and case folding (UTF-8) instead of bytes.
    pub unicode: bool,
    /// Snort's buffer/relative flags present, in [`SNORT_FLAGS`] order (`R`: relative).
    pub snort_flags: String,
}

impl PcreSpec {
    /// Whether Snort's `R` (relative to the last content match) was given.
    pub fn relative(&self) -> bool {
        self.snort_flags.contains('R')
    }

    /// The flags in canonical order (`ismxu` then Snort's).
    pub fn flags(&self) -> String {
        let mut f = String::new();
        for (on, c) in [(self.caseless, 'i'), (self.dotall, 's'), (self.multiline, 'm'), (self.extended, 'x'), (self.unicode, 'u')] {
            if on {
                f.push(c);
            }
        }
        f + &self.snort_flags
    }
}

impl std::fmt::Display for PcreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "/{}/{}", self.pattern, self.flags())
    }
}

/// Parses `/PATTERN/FLAGS` (optionally inside double quotes); the last `/`
/// ends the pattern. Does not compile it: see [`compile_pcre`].
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
    let mut spec = PcreSpec { pattern: pattern.to_string(), ..PcreSpec::default() };
    let mut snort = HashSet::new();
    let mut bad = String::new();
    for c in flags.chars() {
        match c {
            'i' => spec.caseless = true,
            's' => spec.dotall = true,
            'm' => spec.multiline = true,
            'x' => spec.extended = true,
            'u' => spec.unicode = true,
            c if SNORT_FLAGS.contains(c) => {
                snort.insert(c);
            }
            c => bad.push(c),
        }
    }
    if !bad.is_empty() {
        return Err(format!("unsupported flag(s) `{bad}` (supported: i s m x u, and Snort's {SNORT_FLAGS})"));
    }
    spec.snort_flags = SNORT_FLAGS.chars().filter(|c| snort.contains(c)).collect();
    Ok(spec)
}

/// Compiles a parsed expression with this module's settings and limits.
pub fn compile_pcre(spec: &PcreSpec) -> Result<Regex, String> {
    let syn = syntax::Config::new()
        .unicode(spec.unicode)
        .utf8(false)
        .case_insensitive(spec.caseless)
        .dot_matches_new_line(spec.dotall)
        .multi_line(spec.multiline)
        .ignore_whitespace(spec.extended)
        .nest_limit(64);
    let cfg = meta::Config::new()
        .utf8_empty(false)
        .nfa_size_limit(Some(NFA_SIZE_LIMIT))
        .onepass_size_limit(Some(1 << 20))
        .dfa_size_limit(Some(1 << 20))
        .hybrid_cache_capacity(CACHE_CAPACITY)
        .which_captures(regex_automata::nfa::thompson::WhichCaptures::Implicit);
    meta::Builder::new().configure(cfg).syntax(syn).build(&spec.pattern).map_err(|e| {
        if let Some(s) = e.syntax_error() {
            // regex-syntax renders a multi-line diagram; keep its `error:` line.
            let text = s.to_string();
            let msg = text.lines().rev().find_map(|l| l.strip_prefix("error: ")).unwrap_or(&text).to_string();
            format!("bad expression `{}`: {msg}", shorten(&spec.pattern))
        } else if let Some(limit) = e.size_limit() {
            format!("expression `{}` compiles to more than the {limit}-byte limit", shorten(&spec.pattern))
        } else {
            format!("expression `{}`: {e}", shorten(&spec.pattern))
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
    regex: Regex,
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

/// The `regex` coprocessor: numbered expressions searched in packet regions.
#[derive(Default)]
pub struct RegexCopro {
    set: Arc<Compiled>,
    /// This handle's search cache of each expression, in `set.entries` order.
    caches: Vec<meta::Cache>,
    input: [u32; 3],
    output: [u32; 3],
    tally: crate::share::Tally<2>,
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
            let regex = compile_pcre(&spec).map_err(|e| at(line, e))?;
            let cache = regex.create_cache();
            let size = regex.memory_usage() + cache.memory_usage() + spec.pattern.len();
            memory += size;
            if memory > MEMORY_LIMIT {
                return Err(at(line, format!("expressions need more than {MEMORY_LIMIT} bytes")));
            }
            new.push((Entry { id, spec, regex }, cache));
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
    pub fn search(&mut self, id: u32, haystack: &[u8], anchored: bool) -> Option<Option<(usize, usize)>> {
        let i = *self.set.by_id.get(&id)?;
        let e = &self.set.entries[i];
        let input = Input::new(haystack).anchored(if anchored { Anchored::Yes } else { Anchored::No });
        Some(e.regex.search_with(&mut self.caches[i], &input).map(|m| (m.start(), m.end())))
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
            Some((s, e)) => {
                self.tally.add(MATCHES, 1);
                [1, (lo + s) as u32, (lo + e) as u32]
            }
            None => [0; 3],
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

    fn stats(&self) -> Vec<(String, u64)> {
        let t = self.tally.totals();
        vec![
            ("regexes".to_string(), self.set.entries.len() as u64),
            ("searches".to_string(), t[SEARCHES]),
            ("matches".to_string(), t[MATCHES]),
        ]
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    /// Another handle on the same expressions, with caches of its own.
    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        Ok(Box::new(RegexCopro {
            set: Arc::clone(&self.set),
            caches: self.set.entries.iter().map(|e| e.regex.create_cache()).collect(),
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
        let s = parse_pcre("/a\\/b/ismxRBU").unwrap();
        assert_eq!(s.pattern, "a\\/b");
        assert!(s.caseless && s.dotall && s.multiline && s.extended && !s.unicode);
        assert_eq!(s.snort_flags, "RBU");
        assert!(s.relative());
        assert_eq!(s.to_string(), "/a\\/b/ismxRBU");
        let q = parse_pcre("\"/^GET/R\"").unwrap();
        assert_eq!((q.pattern.as_str(), q.flags().as_str()), ("^GET", "R"));
        assert_eq!(parse_pcre("/x/").unwrap().flags(), "");
        let e = parse_pcre("/x/iAGq").unwrap_err();
        assert!(e.contains("`AGq`"), "{e}");
        for bad in ["x/i", "/x", "\"/x/i", ""] {
            assert!(parse_pcre(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn compile_errors_and_semantics() {
        let c = |p: &str| compile_pcre(&parse_pcre(p).unwrap());
        for (bad, why) in [("/(a)\\1/", "backreference"), ("/a(?=b)/", "look-around"), ("/a(?<!b)/", "look-around"), ("/(/", "unclosed")] {
            let e = c(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(c("/((a{100}){100}){100}/").unwrap_err().contains("limit"));
        let mut r = RegexCopro::new();
        let specs = ["/ab+c/", "/AB+C/i", "/a.c/", "/a.c/s", "/^b$/m", "/a b # c/x", "/\\xff./", "/\\w+/", "/\\w+/u", "/^abc/"];
        r.add(specs.iter().enumerate().map(|(i, s)| (i as u32, parse_pcre(s).unwrap(), 0)).collect()).unwrap();
        let mut s = |id, h: &[u8]| r.search(id, h, false).unwrap();
        assert_eq!(s(0, b"xxabbcx"), Some((2, 6)));
        assert_eq!(s(1, b"xxaBbCx"), Some((2, 6)));
        assert_eq!(s(2, b"a\nc"), None);
        assert_eq!(s(3, b"a\nc"), Some((0, 3)));
        assert_eq!(s(4, b"a\nb\nc"), Some((2, 3)));
        assert_eq!(s(5, b"xab"), Some((1, 3)));
        assert_eq!(s(6, b"\x00\xff\xfe"), Some((1, 3)), "bytes, not UTF-8");
        assert_eq!(s(7, "é1".as_bytes()), Some((2, 3)), "ASCII \\w without u");
        assert_eq!(s(8, "é1".as_bytes()), Some((0, 3)), "Unicode \\w with u");
        assert_eq!(s(9, b"xabc"), None);
        assert_eq!(r.search(0, b"xabc", true).unwrap(), None);
        assert_eq!(r.search(0, b"abcabc", true).unwrap(), Some((0, 3)));
        assert_eq!(r.search(77, b"abc", false), None);
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
        assert_eq!(c.stats(), vec![("regexes".into(), 2), ("searches".into(), 9), ("matches".into(), 5)]);
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
        assert!(e(&mut c, "6 /b/\n\n7 /(a)\\1/\n").starts_with("line 3: bad expression"));
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
            let want = c.search(1, &pkt.as_bytes()[lo..hi], op == 1).unwrap();
            prop_assert_eq!(o, want.map_or([0; 3], |(s, e)| [1, (lo + s) as u32, (lo + e) as u32]));
        }

        #[test]
        fn hostile_files_never_panic(s in "\\PC{0,40}") {
            let _ = RegexCopro::new().load(&s);
            let _ = parse_pcre(&s);
        }
    }
}
