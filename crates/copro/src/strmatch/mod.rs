//! `strmatch`: multi-pattern literal string matching, on Hyperscan where the
//! platform has it and on the `aho-corasick` crate everywhere.
//!
//! # Patterns and groups
//! A pattern is a non-empty byte string of at most [`MAX_PATTERN_LEN`] bytes
//! with a `u32` id (unique in the instance), a `u32` group and a `nocase` flag
//! (ASCII case-insensitive: `a`-`z` match `A`-`Z`, other bytes exactly). The
//! patterns of a group are compiled together and searched in one pass,
//! except group 4294967295 ([`FIND_ONLY`]): its patterns are only reached
//! by `find`, so no search structure is built for them (an application
//! that checks most of its patterns one at a time saves the compile). An
//! instance holds at most [`MAX_PATTERNS`] patterns of at most
//! [`MAX_TOTAL_BYTES`] bytes in all.
//!
//! # Match semantics (identical in both backends)
//! A search of group G over a region reports every occurrence of every
//! pattern of G inside the region, overlapping ones included (`aa` in `aaa`
//! twice, `abc` and `bc` both in `abc`), as `(id, start, end)`: `end` is
//! exclusive and `start = end - pattern length`. Matches are ordered by
//! `(end, id)` ascending and at most [`MAX_MATCHES`] are kept: the first
//! `MAX_MATCHES` in that order (the `truncated` statistic counts searches that
//! dropped some). The *first* match is the one with the smallest end, then
//! the smallest id; the search stops as soon as it is known. A group without
//! patterns, and the find-only group, match nothing. `find` of one pattern reports its leftmost
//! occurrence (smallest start).
//!
//! # Backends
//! Config `backend`: `auto` (default: Hyperscan if `libhs` can be loaded at
//! run time, else aho-corasick), `hyperscan` (creation fails without it) or
//! `aho-corasick`. Hyperscan / Vectorscan is opened with `dlopen`
//! (`libhs.so.5`, then `libhs.so`), never linked (the environment variable
//! `NETVM_HYPERSCAN=off` keeps it unloaded, for tests and comparisons): one block-mode literal
//! database per group and one scratch per handle. The aho-corasick backend
//! builds one automaton per group (ASCII case-insensitive when the group has
//! a `nocase` pattern; case-sensitive patterns are then verified byte for
//! byte). `find` uses `memchr::memmem` in both.
//!
//! # Registers and operations
//! | register | meaning |
//! |----------|---------|
//! | in 0  | group (search ops) or pattern id (`find`) |
//! | in 1  | region start (packet offset) |
//! | in 2  | region length |
//! | out 0 | `search_first`/`find`: 1 found, 0 not; `search_all`, `search_distinct`: number of matches kept; `next`: 1 if a match was popped, 0 when exhausted |
//! | out 1 | pattern id |
//! | out 2 | match start (absolute packet offset) |
//! | out 3 | match end (absolute packet offset, exclusive) |
//!
//! | op | name           | effect |
//! |----|----------------|--------|
//! | 0  | `search_first` | the first match of group in0 in the region into out1..3 |
//! | 1  | `search_all`   | collects every match of group in0 in the region (replacing earlier ones); out0 = count; none popped yet |
//! | 2  | `next`         | pops the next collected match into out1..3 |
//! | 3  | `find`         | leftmost occurrence of pattern in0 in the region; an unknown id is a bad argument |
//! | 4  | `search_distinct` | as `search_all`, but only each pattern's first occurrence (smallest end), so never truncated: what a prefilter needs (which patterns occur), at most one match per pattern |
//!
//! The region is `[in1, in1 + in2) ∩ [0, packet length)`: a region past the
//! packet is empty, never a fault. When nothing is found out1..3 are 0.
//! Collected matches stay until the next `search_all` or `clear`.
//!
//! # Configuration
//! `patterns = PATH` loads a pattern file at creation (a relative path is
//! used as given); `backend` as above; `searches` = `all` (the default) or
//! `distinct`: an instance that only needs to know which patterns occur
//! (a prefilter) has Hyperscan report each pattern once per search
//! (`HS_FLAG_SINGLEMATCH`) instead of at every occurrence, so a payload
//! full of one pattern costs one report. It serves `search_first`,
//! `search_distinct`, `next` and `find` with the same results; `search_all`
//! is a bad argument (the handler faults `copro`). Other settings are
//! rejected.
//!
//! # Pattern file
//! One pattern per line, `ID GROUP CONTENT [nocase]`; blank lines and lines
//! starting with `#` are skipped. CONTENT is a Snort-style quoted string:
//! `"GET |20 2f|"`, with `|hex|` sections (hex digit pairs, spaces allowed
//! between pairs) and the escapes `\"`, `\\`, `\|`, `\;`, `\:` (Snort's). Empty patterns,
//! patterns over the length limit and duplicate ids are errors naming the
//! 1-based line. The control plane's `load` adds a file's patterns (all or
//! none) and recompiles; `dump` writes every pattern in this format; `clear`
//! removes them all. Statistics: `patterns`, `groups`, `searches` (every
//! search and find), `matches` (matches reported), `truncated`,
//! `backend_hyperscan` (1 when the instance runs on Hyperscan) and
//! `scan_errors` (Hyperscan scan failures, which fault the handler).
//!
//! # Several workers
//! One compiled pattern set that every worker searches (`Shared`): the
//! Hyperscan databases or aho-corasick automata are read-only and shared
//! without a lock. A fork has its own Hyperscan scratch (cloned from the
//! instance's with `hs_clone_scratch`: Hyperscan needs one per thread), its
//! own collected matches (`search_all`/`next`) and registers, so every
//! worker gets exactly the results one worker would. `searches`, `matches`,
//! `truncated` and `scan_errors` count every worker's operations,
//! whichever handle reports them. While several handles exist the patterns
//! cannot change: `load` returns an error and `clear` does nothing (load
//! them before the run starts).

mod file;
mod hyperscan;

use std::collections::{HashMap, HashSet};
use std::ffi::{c_int, c_uint, c_ulonglong, c_void};
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};
use memchr::memmem;
use netvm_vm::{CoproConfig, CoproError, Coprocessor, InvokeContext, RegisterFile, WorkerShare};

use crate::share::Tally;

pub use file::{format_content, format_pattern_file, parse_content, parse_content_body, parse_pattern_file};

/// Most patterns an instance holds.
pub const MAX_PATTERNS: usize = 100_000;
/// Longest pattern, in bytes.
pub const MAX_PATTERN_LEN: usize = 4096;
/// Most pattern bytes an instance holds in all.
pub const MAX_TOTAL_BYTES: usize = 16 << 20;
/// Most matches one search keeps.
pub const MAX_MATCHES: usize = 4096;
/// The group of patterns that are only ever `find`-ed: no search database
/// is built for it, and a search of it finds nothing.
pub const FIND_ONLY: u32 = u32::MAX;

/// One literal pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    /// Identifier reported with its matches, unique in a set.
    pub id: u32,
    /// Group it is searched with.
    pub group: u32,
    /// The bytes to find (non-empty).
    pub bytes: Vec<u8>,
    /// ASCII case-insensitive.
    pub nocase: bool,
}

/// One occurrence of a pattern: `haystack[start..end]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Match {
    /// The pattern's id.
    pub id: u32,
    /// Offset of the first byte.
    pub start: usize,
    /// Offset just past the last byte.
    pub end: usize,
}

/// Which searches an instance serves (config `searches`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Searches {
    /// Every operation (the default).
    #[default]
    All,
    /// `search_first`, `search_distinct` and `find` only: Hyperscan reports
    /// each pattern once per search (`HS_FLAG_SINGLEMATCH`), so a payload
    /// full of one pattern costs one report instead of one per occurrence;
    /// `search_all` is refused.
    Distinct,
}

impl std::str::FromStr for Searches {
    type Err = String;
    fn from_str(s: &str) -> Result<Searches, String> {
        match s {
            "all" => Ok(Searches::All),
            "distinct" => Ok(Searches::Distinct),
            _ => Err(format!("searches `{s}` is not `all` or `distinct`")),
        }
    }
}

/// Which backend to use (config `backend`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// Hyperscan if it can be loaded, else aho-corasick.
    #[default]
    Auto,
    /// Hyperscan, or an error when it cannot be loaded.
    Hyperscan,
    /// The `aho-corasick` crate.
    AhoCorasick,
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Backend, String> {
        match s {
            "auto" => Ok(Backend::Auto),
            "hyperscan" => Ok(Backend::Hyperscan),
            "aho-corasick" => Ok(Backend::AhoCorasick),
            _ => Err(format!("unknown backend `{s}` (known: auto, hyperscan, aho-corasick)")),
        }
    }
}

/// Whether Hyperscan can be loaded here; the error says why not.
pub fn hyperscan_available() -> Result<(), String> {
    hyperscan::library().map(|_| ()).map_err(str::to_string)
}

/// The loaded Hyperscan's version string, if it can be loaded.
pub fn hyperscan_version() -> Option<&'static str> {
    hyperscan::library().ok().map(|h| h.version.as_str())
}

/// Per-pattern data the scan loops need: id and length.
#[derive(Clone, Copy)]
struct Meta {
    id: u32,
    len: u32,
    nocase: bool,
}

struct AcGroup {
    ac: AhoCorasick,
    /// Automaton pattern index → index in `PatternSet::patterns`.
    index: Vec<u32>,
    /// The automaton ignores case but some patterns do not: verify those.
    verify: bool,
}

impl AcGroup {
    /// Hands every match in `hay` (pattern index, end), in ascending end
    /// order, to `push` until it returns false. Matches of case-sensitive
    /// patterns found by a case-insensitive automaton are checked first.
    #[inline]
    fn each(&self, meta: &[Meta], patterns: &[Pattern], hay: &[u8], mut push: impl FnMut(usize, usize) -> bool) {
        for m in self.ac.find_overlapping_iter(hay) {
            let idx = self.index[m.pattern().as_usize()] as usize;
            let end = m.end();
            let meta = meta[idx];
            if self.verify && !meta.nocase && hay[end - meta.len as usize..end] != patterns[idx].bytes[..] {
                continue;
            }
            if !push(idx, end) {
                break;
            }
        }
    }
}

enum Engine {
    Aho(Vec<AcGroup>),
    Hyper(Vec<hyperscan::Database>),
}

/// The read-only part of a [`PatternSet`], shared by its forks.
struct Compiled {
    patterns: Vec<Pattern>,
    meta: Vec<Meta>,
    by_id: HashMap<u32, usize>,
    finders: Vec<memmem::Finder<'static>>,
    /// Sorted group ids; `engine`'s per-group vectors are in this order.
    groups: Vec<u32>,
    engine: Engine,
    /// What the databases were compiled for.
    searches: Searches,
}

/// A compiled set of patterns, searchable by group. [`PatternSet::fork`]
/// makes another handle on the same compiled patterns for another thread.
pub struct PatternSet {
    c: Arc<Compiled>,
    /// This handle's Hyperscan scratch (none for aho-corasick or no groups).
    scratch: Option<hyperscan::Scratch>,
    scan_errors: u64,
    /// `scan_distinct`'s scratch: the words of `seen` a scan set.
    touched: Vec<usize>,
    /// `scan_distinct`'s bitset of patterns seen (all zero between scans).
    seen: Vec<u64>,
}

impl std::fmt::Debug for PatternSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PatternSet")
            .field("patterns", &self.c.patterns.len())
            .field("groups", &self.c.groups)
            .field("hyperscan", &self.uses_hyperscan())
            .finish()
    }
}

/// Gathers matches delivered in ascending end order, keeping the first
/// `MAX_MATCHES` by `(end, id)`.
struct Collector<'a> {
    out: &'a mut Vec<Match>,
    meta: &'a [Meta],
    truncated: bool,
}

impl Collector<'_> {
    /// Adds pattern `idx` ending at `end`; false once nothing later can be kept.
    #[inline]
    fn push(&mut self, idx: usize, end: usize) -> bool {
        let m = self.meta[idx];
        if self.out.len() >= MAX_MATCHES {
            // Matches at the same end as the last kept one may still sort
            // before it (smaller id); anything ending later cannot.
            self.truncated = true;
            if end > self.out[MAX_MATCHES - 1].end {
                return false;
            }
        }
        self.out.push(Match { id: m.id, start: end - m.len as usize, end });
        true
    }

    fn finish(self) -> bool {
        self.out.sort_unstable_by_key(|m| (m.end, m.id));
        if self.out.len() > MAX_MATCHES {
            self.out.truncate(MAX_MATCHES);
            return true;
        }
        self.truncated
    }
}

/// Collects the first occurrence (smallest end) of each pattern: at most
/// one match per pattern, so nothing is ever dropped.
struct Distinct<'a> {
    out: &'a mut Vec<Match>,
    meta: &'a [Meta],
    /// Bit `idx`: pattern `idx` was collected in this scan.
    seen: &'a mut Vec<u64>,
    /// The words of `seen` this scan set bits in, to clear after it.
    touched: &'a mut Vec<usize>,
}

impl Distinct<'_> {
    #[inline]
    fn push(&mut self, idx: usize, end: usize) -> bool {
        let (w, b) = (idx / 64, 1u64 << (idx % 64));
        if self.seen[w] & b == 0 {
            self.seen[w] |= b;
            self.touched.push(w);
            let m = self.meta[idx];
            self.out.push(Match { id: m.id, start: end - m.len as usize, end });
        }
        true
    }
}

/// The best first match so far: smallest end, then smallest id.
struct First<'a> {
    meta: &'a [Meta],
    best: Option<Match>,
}

impl First<'_> {
    /// Offers pattern `idx` ending at `end`; false once the first match is known.
    #[inline]
    fn push(&mut self, idx: usize, end: usize) -> bool {
        let m = self.meta[idx];
        match self.best {
            Some(b) if end > b.end => return false,
            Some(b) if b.id <= m.id => {}
            _ => self.best = Some(Match { id: m.id, start: end - m.len as usize, end }),
        }
        true
    }
}

unsafe extern "C" fn hs_collect(idx: c_uint, _from: c_ulonglong, to: c_ulonglong, _flags: c_uint, ctx: *mut c_void) -> c_int {
    // SAFETY: `scan` passes a live, exclusively borrowed `Collector` as ctx.
    let c = unsafe { &mut *ctx.cast::<Collector<'_>>() };
    c_int::from(!c.push(idx as usize, to as usize))
}

unsafe extern "C" fn hs_distinct(idx: c_uint, _from: c_ulonglong, to: c_ulonglong, _flags: c_uint, ctx: *mut c_void) -> c_int {
    // SAFETY: `scan_distinct` passes a live, exclusively borrowed `Distinct` as ctx.
    let d = unsafe { &mut *ctx.cast::<Distinct<'_>>() };
    c_int::from(!d.push(idx as usize, to as usize))
}

unsafe extern "C" fn hs_first(idx: c_uint, _from: c_ulonglong, to: c_ulonglong, _flags: c_uint, ctx: *mut c_void) -> c_int {
    // SAFETY: `first` passes a live, exclusively borrowed `First` as ctx.
    let f = unsafe { &mut *ctx.cast::<First<'_>>() };
    c_int::from(!f.push(idx as usize, to as usize))
}

impl PatternSet {
    /// Compiles `patterns` with `backend`. Errors: limits exceeded, an empty
    /// pattern, a duplicate id, Hyperscan requested but absent, a compile failure.
    pub fn new(patterns: Vec<Pattern>, backend: Backend) -> Result<PatternSet, String> {
        PatternSet::with_searches(patterns, backend, Searches::All)
    }

    /// As [`PatternSet::new`], for the searches `searches` says (with
    /// [`Searches::Distinct`], [`PatternSet::scan`] finds nothing).
    pub fn with_searches(patterns: Vec<Pattern>, backend: Backend, searches: Searches) -> Result<PatternSet, String> {
        if patterns.len() > MAX_PATTERNS {
            return Err(format!("{} patterns, at most {MAX_PATTERNS} allowed", patterns.len()));
        }
        let mut by_id = HashMap::with_capacity(patterns.len());
        let mut total = 0usize;
        for (i, p) in patterns.iter().enumerate() {
            if p.bytes.is_empty() {
                return Err(format!("pattern {} is empty", p.id));
            }
            if p.bytes.len() > MAX_PATTERN_LEN {
                return Err(format!("pattern {} has {} bytes, at most {MAX_PATTERN_LEN} allowed", p.id, p.bytes.len()));
            }
            if by_id.insert(p.id, i).is_some() {
                return Err(format!("duplicate pattern id {}", p.id));
            }
            total += p.bytes.len();
        }
        if total > MAX_TOTAL_BYTES {
            return Err(format!("patterns total {total} bytes, at most {MAX_TOTAL_BYTES} allowed"));
        }
        let meta: Vec<Meta> = patterns.iter().map(|p| Meta { id: p.id, len: p.bytes.len() as u32, nocase: p.nocase }).collect();
        let finders = patterns.iter().map(|p| memmem::Finder::new(&p.bytes).into_owned()).collect();
        let mut members: Vec<(u32, Vec<u32>)> = {
            let mut m: HashMap<u32, Vec<u32>> = HashMap::new();
            for (i, p) in patterns.iter().enumerate().filter(|(_, p)| p.group != FIND_ONLY) {
                m.entry(p.group).or_default().push(i as u32);
            }
            m.into_iter().collect()
        };
        members.sort_unstable_by_key(|(g, _)| *g);
        let groups: Vec<u32> = members.iter().map(|(g, _)| *g).collect();
        let hs = match backend {
            Backend::AhoCorasick => None,
            Backend::Auto => hyperscan::library().ok(),
            Backend::Hyperscan => Some(hyperscan::library().map_err(|e| format!("backend hyperscan: {e}"))?),
        };
        let single = if searches == Searches::Distinct { hyperscan::HS_FLAG_SINGLEMATCH } else { 0 };
        let (engine, scratch) = match hs {
            Some(hs) => {
                let mut dbs = Vec::with_capacity(members.len());
                for (g, idx) in &members {
                    let lits: Vec<&[u8]> = idx.iter().map(|&i| patterns[i as usize].bytes.as_slice()).collect();
                    let flags: Vec<c_uint> =
                        idx.iter().map(|&i| if patterns[i as usize].nocase { hyperscan::HS_FLAG_CASELESS } else { 0 } | single).collect();
                    dbs.push(hyperscan::Database::compile_literals(hs, &lits, &flags, idx).map_err(|e| format!("group {g}: {e}"))?);
                }
                let scratch = hyperscan::Scratch::for_databases(hs, &dbs)?;
                (Engine::Hyper(dbs), scratch)
            }
            None => {
                let mut acs = Vec::with_capacity(members.len());
                for (g, idx) in members {
                    let any_nocase = idx.iter().any(|&i| patterns[i as usize].nocase);
                    let all_nocase = idx.iter().all(|&i| patterns[i as usize].nocase);
                    let ac = AhoCorasick::builder()
                        .match_kind(MatchKind::Standard)
                        .ascii_case_insensitive(any_nocase)
                        .build(idx.iter().map(|&i| &patterns[i as usize].bytes))
                        .map_err(|e| format!("group {g}: {e}"))?;
                    acs.push(AcGroup { ac, index: idx, verify: any_nocase && !all_nocase });
                }
                (Engine::Aho(acs), None)
            }
        };
        Ok(PatternSet {
            c: Arc::new(Compiled { patterns, meta, by_id, finders, groups, engine, searches }),
            scratch,
            scan_errors: 0,
            touched: Vec::new(),
            seen: Vec::new(),
        })
    }

    /// An empty set (which matches nothing).
    pub fn empty() -> PatternSet {
        PatternSet {
            c: Arc::new(Compiled {
                patterns: Vec::new(),
                meta: Vec::new(),
                by_id: HashMap::new(),
                finders: Vec::new(),
                groups: Vec::new(),
                engine: Engine::Aho(Vec::new()),
                searches: Searches::All,
            }),
            scratch: None,
            scan_errors: 0,
            touched: Vec::new(),
            seen: Vec::new(),
        }
    }

    /// Another handle on the same compiled patterns, for another thread:
    /// the databases or automata are shared (read-only), the Hyperscan
    /// scratch is the handle's own (a clone of this one's), and its
    /// `scan_errors` start at zero. Fails only when Hyperscan cannot
    /// allocate the scratch.
    pub fn fork(&self) -> Result<PatternSet, String> {
        let scratch = match &self.scratch {
            Some(s) => Some(s.try_clone()?),
            None => None,
        };
        Ok(PatternSet { c: Arc::clone(&self.c), scratch, scan_errors: 0, touched: Vec::new(), seen: Vec::new() })
    }

    /// How many handles (this one and its forks) share the compiled patterns.
    fn handles(&self) -> usize {
        Arc::strong_count(&self.c)
    }

    /// Whether searches run on Hyperscan.
    pub fn uses_hyperscan(&self) -> bool {
        matches!(self.c.engine, Engine::Hyper(_))
    }

    /// The patterns, in the order given.
    pub fn patterns(&self) -> &[Pattern] {
        &self.c.patterns
    }

    /// The group ids that have patterns, ascending.
    pub fn groups(&self) -> &[u32] {
        &self.c.groups
    }

    /// Whether a pattern has this id.
    pub fn has_pattern(&self, id: u32) -> bool {
        self.c.by_id.contains_key(&id)
    }

    /// The searches the set was built for.
    pub fn searches(&self) -> Searches {
        self.c.searches
    }

    /// Hyperscan scans that failed so far (they report no matches).
    pub fn scan_errors(&self) -> u64 {
        self.scan_errors
    }

    /// Every match of `group` in `haystack` into `out` (cleared first), in the
    /// order and up to the limit of the module doc. Returns true when matches
    /// past [`MAX_MATCHES`] were dropped. A set built for
    /// [`Searches::Distinct`] finds nothing here.
    pub fn scan(&mut self, group: u32, haystack: &[u8], out: &mut Vec<Match>) -> bool {
        out.clear();
        let cs = &*self.c;
        if cs.searches == Searches::Distinct {
            return false;
        }
        let Ok(g) = cs.groups.binary_search(&group) else { return false };
        let mut c = Collector { out, meta: &cs.meta, truncated: false };
        match &cs.engine {
            Engine::Aho(acs) => acs[g].each(&cs.meta, &cs.patterns, haystack, |idx, end| c.push(idx, end)),
            Engine::Hyper(dbs) => {
                let Some(scratch) = &mut self.scratch else { return false };
                // SAFETY: `hs_collect` reads ctx as the `Collector` passed here,
                // which outlives the scan; the scratch is borrowed exclusively.
                let r = unsafe { dbs[g].scan(scratch, haystack, hs_collect, (&mut c as *mut Collector<'_>).cast()) };
                if r.is_err() {
                    self.scan_errors += 1;
                    c.out.clear();
                }
            }
        }
        c.finish()
    }

    /// The first occurrence of every pattern of `group` that occurs in
    /// `haystack`, into `out` (cleared first), ordered by `(end, id)`: at
    /// most one match per pattern, never truncated.
    pub fn scan_distinct(&mut self, group: u32, haystack: &[u8], out: &mut Vec<Match>) {
        out.clear();
        let cs = &*self.c;
        let Ok(g) = cs.groups.binary_search(&group) else { return };
        self.seen.resize(cs.meta.len().div_ceil(64), 0);
        let mut touched = std::mem::take(&mut self.touched);
        let mut d = Distinct { out, meta: &cs.meta, seen: &mut self.seen, touched: &mut touched };
        let mut failed = false;
        match &cs.engine {
            Engine::Aho(acs) => acs[g].each(&cs.meta, &cs.patterns, haystack, |idx, end| d.push(idx, end)),
            Engine::Hyper(dbs) => {
                if let Some(scratch) = &mut self.scratch {
                    // SAFETY: `hs_distinct` reads ctx as the `Distinct` passed
                    // here, which outlives the scan; the scratch is borrowed exclusively.
                    let r = unsafe { dbs[g].scan(scratch, haystack, hs_distinct, (&mut d as *mut Distinct<'_>).cast()) };
                    failed = r.is_err();
                }
            }
        }
        // Forget what this scan saw, touching only its words.
        for w in touched.drain(..) {
            self.seen[w] = 0;
        }
        self.touched = touched;
        if failed {
            self.scan_errors += 1;
            out.clear();
            return;
        }
        out.sort_unstable_by_key(|m| (m.end, m.id));
    }

    /// The first match of `group` in `haystack`: smallest end, then smallest
    /// id. Stops scanning as soon as it is known.
    pub fn first(&mut self, group: u32, haystack: &[u8]) -> Option<Match> {
        let cs = &*self.c;
        let g = cs.groups.binary_search(&group).ok()?;
        let mut f = First { meta: &cs.meta, best: None };
        match &cs.engine {
            Engine::Aho(acs) => acs[g].each(&cs.meta, &cs.patterns, haystack, |idx, end| f.push(idx, end)),
            Engine::Hyper(dbs) => {
                let scratch = self.scratch.as_mut()?;
                // SAFETY: `hs_first` reads ctx as the `First` passed here, which
                // outlives the scan; the scratch is borrowed exclusively.
                let r = unsafe { dbs[g].scan(scratch, haystack, hs_first, (&mut f as *mut First<'_>).cast()) };
                if r.is_err() {
                    self.scan_errors += 1;
                    return None;
                }
            }
        }
        f.best
    }

    /// The leftmost occurrence of pattern `id` in `haystack` (None also for an
    /// unknown id: see [`has_pattern`](Self::has_pattern)).
    pub fn find(&self, id: u32, haystack: &[u8]) -> Option<Match> {
        let i = *self.c.by_id.get(&id)?;
        let p = &self.c.patterns[i];
        let start = if p.nocase { find_nocase(&p.bytes, haystack)? } else { self.c.finders[i].find(haystack)? };
        Some(Match { id, start, end: start + p.bytes.len() })
    }
}

/// Leftmost ASCII case-insensitive occurrence of `needle` in `hay`.
fn find_nocase(needle: &[u8], hay: &[u8]) -> Option<usize> {
    let n = needle.len();
    if n > hay.len() {
        return None;
    }
    let first = needle[0];
    let (lo, up) = (first.to_ascii_lowercase(), first.to_ascii_uppercase());
    let last_start = hay.len() - n;
    let mut from = 0;
    while from <= last_start {
        let p = from + memchr::memchr2(lo, up, &hay[from..=last_start])?;
        if hay[p + 1..p + n].eq_ignore_ascii_case(&needle[1..]) {
            return Some(p);
        }
        from = p + 1;
    }
    None
}

/// Statistics counters.
const SEARCHES: usize = 0;
const MATCHES: usize = 1;
const TRUNCATED: usize = 2;
const SCAN_ERRORS: usize = 3;

/// The `strmatch` coprocessor: a [`PatternSet`] behind registers.
pub struct StrMatch {
    set: PatternSet,
    backend: Backend,
    searches: Searches,
    input: [u32; 3],
    output: [u32; 4],
    collected: Vec<Match>,
    cursor: usize,
    tally: Tally<4>,
}

impl std::fmt::Debug for StrMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StrMatch").field("set", &self.set).field("backend", &self.backend).finish()
    }
}

impl StrMatch {
    /// An instance without patterns. Fails only for `Backend::Hyperscan` without libhs.
    pub fn new(backend: Backend) -> Result<StrMatch, String> {
        StrMatch::with_searches(backend, Searches::All)
    }

    /// An instance without patterns that serves `searches`.
    pub fn with_searches(backend: Backend, searches: Searches) -> Result<StrMatch, String> {
        let set = PatternSet::with_searches(Vec::new(), backend, searches)?;
        Ok(StrMatch { set, backend, searches, input: [0; 3], output: [0; 4], collected: Vec::new(), cursor: 0, tally: Tally::new() })
    }

    /// The compiled patterns.
    pub fn set(&mut self) -> &mut PatternSet {
        &mut self.set
    }

    /// Adds `patterns` and recompiles; on error nothing changes. Fails
    /// while other workers' handles share the patterns.
    pub fn add(&mut self, patterns: Vec<Pattern>) -> Result<usize, String> {
        if self.set.handles() > 1 {
            return Err("patterns cannot change while several workers share them; load them before the run starts".to_string());
        }
        let n = patterns.len();
        let mut ids: HashSet<u32> = self.set.c.patterns.iter().map(|p| p.id).collect();
        if let Some(p) = patterns.iter().find(|p| !ids.insert(p.id)) {
            return Err(format!("duplicate pattern id {}", p.id));
        }
        let mut all = self.set.c.patterns.clone();
        all.extend(patterns);
        self.set = PatternSet::with_searches(all, self.backend, self.searches)?;
        self.collected.clear();
        self.cursor = 0;
        Ok(n)
    }

    fn region<'p>(&self, packet: &'p [u8]) -> (usize, &'p [u8]) {
        let start = (self.input[1] as usize).min(packet.len());
        let end = (u64::from(self.input[1]) + u64::from(self.input[2])).min(packet.len() as u64) as usize;
        (start, &packet[start..end.max(start)])
    }

    fn set_match(&mut self, m: Option<Match>, base: usize) {
        self.output = match m {
            Some(m) => [1, m.id, (base + m.start) as u32, (base + m.end) as u32],
            None => [0; 4],
        };
    }
}

pub(crate) fn create(cfg: &CoproConfig) -> Result<Box<dyn Coprocessor>, String> {
    if let Some(k) = cfg.keys().find(|k| !matches!(k.as_str(), "patterns" | "backend" | "searches")) {
        return Err(format!("strmatch: unknown setting `{k}` (known: patterns, backend, searches)"));
    }
    let backend = match cfg.get("backend") {
        Some(b) => b.parse().map_err(|e| format!("strmatch: {e}"))?,
        None => Backend::Auto,
    };
    let searches = match cfg.get("searches") {
        Some(b) => b.parse().map_err(|e| format!("strmatch: {e}"))?,
        None => Searches::All,
    };
    let mut s = StrMatch::with_searches(backend, searches).map_err(|e| format!("strmatch: {e}"))?;
    if let Some(path) = cfg.get("patterns") {
        let text = std::fs::read_to_string(path).map_err(|e| format!("strmatch: cannot read patterns `{path}`: {e}"))?;
        s.load(&text).map_err(|e| format!("strmatch: {path}: {e}"))?;
    }
    Ok(Box::new(s))
}

impl Coprocessor for StrMatch {
    fn kind(&self) -> &str {
        "strmatch"
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
        let errors = self.set.scan_errors;
        match op {
            0 => {
                let (base, hay) = self.region(ctx.packet);
                self.tally.add(SEARCHES, 1);
                let m = self.set.first(self.input[0], hay);
                self.tally.add(MATCHES, u64::from(m.is_some()));
                self.set_match(m, base);
            }
            1 => {
                if self.searches == Searches::Distinct {
                    return Err(CoproError::BadArgument(
                        "strmatch: search_all on an instance compiled for distinct searches (`searches = distinct`)".into(),
                    ));
                }
                let (base, hay) = self.region(ctx.packet);
                self.tally.add(SEARCHES, 1);
                let mut out = std::mem::take(&mut self.collected);
                self.tally.add(TRUNCATED, u64::from(self.set.scan(self.input[0], hay, &mut out)));
                for m in &mut out {
                    m.start += base;
                    m.end += base;
                }
                self.tally.add(MATCHES, out.len() as u64);
                self.output = [out.len() as u32, 0, 0, 0];
                self.collected = out;
                self.cursor = 0;
            }
            4 => {
                let (base, hay) = self.region(ctx.packet);
                self.tally.add(SEARCHES, 1);
                let mut out = std::mem::take(&mut self.collected);
                self.set.scan_distinct(self.input[0], hay, &mut out);
                for m in &mut out {
                    m.start += base;
                    m.end += base;
                }
                self.tally.add(MATCHES, out.len() as u64);
                self.output = [out.len() as u32, 0, 0, 0];
                self.collected = out;
                self.cursor = 0;
            }
            2 => {
                let m = self.collected.get(self.cursor).copied();
                self.cursor += usize::from(m.is_some());
                self.set_match(m, 0);
            }
            3 => {
                let id = self.input[0];
                if !self.set.has_pattern(id) {
                    return Err(CoproError::BadArgument(format!("no pattern with id {id}")));
                }
                let (base, hay) = self.region(ctx.packet);
                self.tally.add(SEARCHES, 1);
                let m = self.set.find(id, hay);
                self.tally.add(MATCHES, u64::from(m.is_some()));
                self.set_match(m, base);
            }
            _ => return Err(CoproError::NoOperation(op)),
        }
        if self.set.scan_errors != errors {
            self.tally.add(SCAN_ERRORS, self.set.scan_errors - errors);
            return Err(CoproError::BadArgument("Hyperscan scan failed".to_string()));
        }
        Ok(())
    }

    fn dump(&self) -> String {
        format_pattern_file(&self.set.c.patterns)
    }

    fn load(&mut self, text: &str) -> Result<usize, String> {
        let patterns = parse_pattern_file(text)?;
        self.add(patterns)
    }

    /// Removes every pattern (nothing while several workers share them).
    fn clear(&mut self) {
        if self.set.handles() > 1 {
            return;
        }
        // An empty set with the instance's backend never fails: it compiled at creation.
        self.set = PatternSet::with_searches(Vec::new(), self.backend, self.searches).unwrap_or_else(|_| PatternSet::empty());
        self.collected.clear();
        self.cursor = 0;
    }

    fn stats(&self) -> Vec<(String, u64)> {
        let t = self.tally.totals();
        vec![
            ("patterns".to_string(), self.set.c.patterns.len() as u64),
            ("groups".to_string(), self.set.c.groups.len() as u64),
            ("searches".to_string(), t[SEARCHES]),
            ("matches".to_string(), t[MATCHES]),
            ("truncated".to_string(), t[TRUNCATED]),
            ("backend_hyperscan".to_string(), u64::from(self.set.uses_hyperscan())),
            ("scan_errors".to_string(), t[SCAN_ERRORS]),
        ]
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    /// Another handle on the same compiled patterns, with its own scratch.
    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        Ok(Box::new(StrMatch {
            set: self.set.fork().map_err(|e| format!("strmatch: {e}"))?,
            backend: self.backend,
            searches: self.searches,
            input: [0; 3],
            output: [0; 4],
            collected: Vec::new(),
            cursor: 0,
            tally: self.tally.share(),
        }))
    }

    fn share(&self) -> WorkerShare {
        WorkerShare::Shared
    }
}

#[cfg(test)]
mod tests;
