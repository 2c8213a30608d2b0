//! The fallback engine: PCRE2 (the C library, 8-bit, not UTF), JIT-compiled
//! where the platform allows, every match bounded by PCRE2's match, depth
//! and heap limits.

use std::ffi::c_int;
use std::ptr::{self, NonNull};

use pcre2_sys::*;

use super::{PcreSpec, Search};

/// PCRE2 match limit (backtracking steps of one search).
pub const MATCH_LIMIT: u32 = 100_000;
/// PCRE2 depth limit (nested backtracking frames of one search).
pub const DEPTH_LIMIT: u32 = 2_000;
/// PCRE2 match limit under Snort's `O` flag ("override the configured limits").
pub const MATCH_LIMIT_O: u32 = 10_000_000;
/// PCRE2 depth limit under `O`.
pub const DEPTH_LIMIT_O: u32 = 100_000;
/// PCRE2 heap limit of one search, in KiB (both settings).
pub const HEAP_LIMIT_KIB: u32 = 8 << 10;

/// A compiled PCRE2 pattern.
#[derive(Debug)]
pub struct Pcre2Regex {
    code: NonNull<pcre2_code_8>,
    override_limits: bool,
}

// SAFETY: PCRE2 documents that a compiled pattern (and its JIT code) may be
// used by several threads at once as long as nobody modifies it; this type
// never modifies it after `compile`, and each search brings its own match
// data and match context (`Pcre2Scratch`).
unsafe impl Send for Pcre2Regex {}
// SAFETY: as for `Send`: matching only reads the compiled pattern.
unsafe impl Sync for Pcre2Regex {}

impl Drop for Pcre2Regex {
    fn drop(&mut self) {
        // SAFETY: `code` came from `pcre2_compile_8`, is freed only here, once.
        unsafe { pcre2_code_free_8(self.code.as_ptr()) }
    }
}

fn error_message(code: c_int) -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length, which is passed.
    let n = unsafe { pcre2_get_error_message_8(code, buf.as_mut_ptr(), buf.len()) };
    if n < 0 {
        format!("PCRE2 error {code}")
    } else {
        String::from_utf8_lossy(&buf[..n as usize]).into_owned()
    }
}

impl Pcre2Regex {
    /// Compiles `pattern` with the PCRE flags of `spec` (UTF and UCP forbidden).
    pub fn compile(pattern: &str, spec: &PcreSpec) -> Result<Pcre2Regex, String> {
        Pcre2Regex::build(pattern, spec, true)
    }

    /// Whether PCRE2 compiles `pattern` with the flags of `spec`, without
    /// JIT-compiling it: the check is all that is wanted.
    pub fn check(pattern: &str, spec: &PcreSpec) -> Result<(), String> {
        Pcre2Regex::build(pattern, spec, false).map(drop)
    }

    fn build(pattern: &str, spec: &PcreSpec, jit: bool) -> Result<Pcre2Regex, String> {
        let mut opts = PCRE2_NEVER_UTF | PCRE2_NEVER_UCP;
        for (on, o) in [
            (spec.caseless, PCRE2_CASELESS),
            (spec.dotall, PCRE2_DOTALL),
            (spec.multiline, PCRE2_MULTILINE),
            (spec.extended, PCRE2_EXTENDED),
            (spec.anchored, PCRE2_ANCHORED),
            (spec.dollar_endonly, PCRE2_DOLLAR_ENDONLY),
            (spec.ungreedy, PCRE2_UNGREEDY),
        ] {
            if on {
                opts |= o;
            }
        }
        let (mut err, mut at) = (0 as c_int, 0usize);
        // SAFETY: the pattern pointer and length describe a live byte
        // slice; the error outputs point at live locals; no compile context.
        let code = unsafe { pcre2_compile_8(pattern.as_ptr(), pattern.len(), opts, &mut err, &mut at, ptr::null_mut()) };
        let code = NonNull::new(code).ok_or_else(|| format!("{} at offset {at}", error_message(err)))?;
        if jit {
            // JIT when the platform has it; the interpreter otherwise (same results).
            // SAFETY: `code` is a valid compiled pattern that nothing else uses yet.
            let _ = unsafe { pcre2_jit_compile_8(code.as_ptr(), PCRE2_JIT_COMPLETE) };
        }
        Ok(Pcre2Regex { code, override_limits: spec.override_limits })
    }

    /// Leftmost match in `hay` (at 0 only when `anchored`), within the limits.
    pub fn search(&self, scratch: &mut Pcre2Scratch, hay: &[u8], anchored: bool) -> Search {
        let ctx = if self.override_limits { scratch.ctx_o } else { scratch.ctx };
        let opts = if anchored { PCRE2_ANCHORED } else { 0 };
        // SAFETY: `code` is a valid pattern; the subject pointer and length
        // describe a live slice; match data and context are valid and owned
        // by this thread's scratch for the duration of the call.
        let rc = unsafe { pcre2_match_8(self.code.as_ptr(), hay.as_ptr(), hay.len(), 0, opts, scratch.md.as_ptr(), ctx.as_ptr()) };
        if rc >= 0 {
            // SAFETY: after a successful match the ovector holds at least one pair.
            let ov = unsafe { std::slice::from_raw_parts(pcre2_get_ovector_pointer_8(scratch.md.as_ptr()), 2) };
            let (s, e) = (ov[0].min(hay.len()), ov[1].min(hay.len()));
            Search::Match(s.min(e), e)
        } else if rc == PCRE2_ERROR_NOMATCH {
            Search::NoMatch
        } else {
            // Match, depth, heap or JIT stack limit (or out of memory): not inspected.
            Search::Limit
        }
    }
}

/// One thread's match data and contexts for PCRE2 searches.
#[derive(Debug)]
pub struct Pcre2Scratch {
    md: NonNull<pcre2_match_data_8>,
    ctx: NonNull<pcre2_match_context_8>,
    ctx_o: NonNull<pcre2_match_context_8>,
}

// SAFETY: the scratch is owned by one handle and used by one thread at a
// time (`&mut` in `search`); PCRE2 match data and contexts have no thread affinity.
unsafe impl Send for Pcre2Scratch {}

impl Pcre2Scratch {
    /// Match data for one pair of offsets and the two limit settings.
    pub fn new() -> Pcre2Scratch {
        let ctx = |m, d| {
            // SAFETY: a null general context means malloc/free.
            let c = NonNull::new(unsafe { pcre2_match_context_create_8(ptr::null_mut()) }).expect("PCRE2 match context");
            // SAFETY: `c` is a valid match context owned here.
            unsafe {
                pcre2_set_match_limit_8(c.as_ptr(), m);
                pcre2_set_depth_limit_8(c.as_ptr(), d);
                pcre2_set_heap_limit_8(c.as_ptr(), HEAP_LIMIT_KIB);
            }
            c
        };
        // SAFETY: one pair of offsets, default allocator.
        let md = NonNull::new(unsafe { pcre2_match_data_create_8(1, ptr::null_mut()) }).expect("PCRE2 match data");
        Pcre2Scratch { md, ctx: ctx(MATCH_LIMIT, DEPTH_LIMIT), ctx_o: ctx(MATCH_LIMIT_O, DEPTH_LIMIT_O) }
    }
}

impl Default for Pcre2Scratch {
    fn default() -> Self {
        Pcre2Scratch::new()
    }
}

impl Drop for Pcre2Scratch {
    fn drop(&mut self) {
        // SAFETY: each pointer was created in `new` and is freed only here, once.
        unsafe {
            pcre2_match_data_free_8(self.md.as_ptr());
            pcre2_match_context_free_8(self.ctx.as_ptr());
            pcre2_match_context_free_8(self.ctx_o.as_ptr());
        }
    }
}
