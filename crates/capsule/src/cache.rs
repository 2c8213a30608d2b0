//! The code cache: capsule code verified (and decoded) once, found again by
//! its bytes (docs/capsules.md §3). A flow of capsules carries the same code
//! packet after packet; the node then skips the verifier and runs what it
//! decoded the first time. Entries are keyed by the code's bytes, its entry
//! point and dialect (compared in full, so a hash collision costs a miss,
//! never a wrong program), bounded in number, and evicted least recently
//! used first.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::profile::CapsuleCode;
use crate::wire::Dialect;

/// One cached program.
#[derive(Debug)]
pub struct Cached {
    /// The code bytes it was verified from.
    pub bytes: Vec<u8>,
    /// Its entry point.
    pub entry: u16,
    /// Its dialect.
    pub dialect: Dialect,
    /// The verified, decoded code.
    pub code: CapsuleCode,
    /// The code's 64-bit tag (owner of its private store entries).
    pub tag: u64,
    /// Times it ran.
    pub runs: u64,
    /// Its native code, once compiled ([`crate::tier`]).
    pub native: Option<crate::tier::Native>,
    /// The compiler refused it: it stays interpreted.
    pub native_failed: bool,
    /// Interpreted time per run, ns (sampled, smoothed; 0 until measured).
    pub interp_ns: f64,
    /// Native time per run, ns (likewise).
    pub native_ns: f64,
    last_used: u64,
}

/// What a cache counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found the code.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Entries evicted to make room.
    pub evictions: u64,
}

/// The keys of `by_hash` are hashes already: used as they are.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// A bounded cache of verified capsule code.
#[derive(Debug)]
pub struct CodeCache {
    capacity: usize,
    entries: Vec<Cached>,
    by_hash: HashMap<u64, Vec<u32>, BuildHasherDefault<Prehashed>>,
    clock: u64,
    stats: CacheStats,
    /// The program found last: compared first, before any hashing (WASP's
    /// one-entry cache; a flow's capsules come one after another).
    last: Option<usize>,
}

/// A fast, unkeyed 64-bit hash of the code's bytes (a key into the cache
/// only: entries are compared in full).
pub fn code_hash(bytes: &[u8], entry: u16, dialect: Dialect) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = (bytes.len() as u64) ^ (u64::from(entry) << 32) ^ if dialect == Dialect::Snap { 1 << 63 } else { 0 };
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().unwrap_or_default());
        h = (h ^ w).wrapping_mul(K).rotate_left(29);
    }
    let mut last = [0u8; 8];
    last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    h = (h ^ u64::from_le_bytes(last)).wrapping_mul(K);
    h ^ (h >> 31)
}

impl CodeCache {
    /// A cache of at most `capacity` programs (0: nothing is cached).
    pub fn new(capacity: usize) -> CodeCache {
        CodeCache { capacity, entries: Vec::new(), by_hash: HashMap::default(), clock: 0, stats: CacheStats::default(), last: None }
    }

    /// What it counted.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// The most programs it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Programs held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The index of the program for these bytes, entry and dialect, if cached.
    pub fn find(&mut self, bytes: &[u8], entry: u16, dialect: Dialect) -> Option<usize> {
        let same = |e: &Cached| e.entry == entry && e.dialect == dialect && e.bytes == bytes;
        let found = match self.last.filter(|&i| same(&self.entries[i])) {
            Some(i) => Some(i),
            None => {
                let h = code_hash(bytes, entry, dialect);
                self.by_hash.get(&h).and_then(|ix| ix.iter().map(|&i| i as usize).find(|&i| same(&self.entries[i])))
            }
        };
        if found.is_some() {
            self.last = found;
        }
        match found {
            Some(i) => {
                self.clock += 1;
                self.entries[i].last_used = self.clock;
                self.stats.hits += 1;
            }
            None => self.stats.misses += 1,
        }
        found
    }

    /// The program at `i` (from [`CodeCache::find`] or [`CodeCache::insert`]).
    pub fn get_mut(&mut self, i: usize) -> &mut Cached {
        &mut self.entries[i]
    }

    /// Caches `code`, verified from `bytes`; returns its index, or `None`
    /// when the cache holds nothing (capacity 0).
    pub fn insert(&mut self, bytes: &[u8], entry: u16, dialect: Dialect, code: CapsuleCode, tag: u64) -> Option<usize> {
        if self.capacity == 0 {
            return None;
        }
        self.clock += 1;
        let h = code_hash(bytes, entry, dialect);
        let new = Cached {
            bytes: bytes.to_vec(),
            entry,
            dialect,
            code,
            tag,
            runs: 0,
            native: None,
            native_failed: false,
            interp_ns: 0.0,
            native_ns: 0.0,
            last_used: self.clock,
        };
        let i = if self.entries.len() < self.capacity {
            self.entries.push(new);
            self.entries.len() - 1
        } else {
            // Evict the least recently used (a scan: the cache is small and
            // this happens only on a miss that fills it).
            let (i, _) = self.entries.iter().enumerate().min_by_key(|(_, e)| e.last_used).expect("capacity > 0");
            let old = &self.entries[i];
            let oh = code_hash(&old.bytes, old.entry, old.dialect);
            if let Some(v) = self.by_hash.get_mut(&oh) {
                v.retain(|&x| x as usize != i);
                if v.is_empty() {
                    self.by_hash.remove(&oh);
                }
            }
            self.entries[i] = new;
            self.stats.evictions += 1;
            i
        };
        self.by_hash.entry(h).or_default().push(i as u32);
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_misses_and_eviction_of_the_least_recently_used() {
        let mut c = CodeCache::new(2);
        let code = || CapsuleCode::default();
        assert_eq!(c.find(b"a", 0, Dialect::Wasp), None);
        let a = c.insert(b"a", 0, Dialect::Wasp, code(), 1).unwrap();
        let b = c.insert(b"b", 0, Dialect::Wasp, code(), 2).unwrap();
        assert_eq!(c.find(b"a", 0, Dialect::Wasp), Some(a));
        assert_eq!(c.find(b"a", 1, Dialect::Wasp), None, "another entry point");
        assert_eq!(c.find(b"a", 0, Dialect::Snap), None, "another dialect");
        // b is the least recently used: c takes its place.
        let cc = c.insert(b"c", 0, Dialect::Wasp, code(), 3).unwrap();
        assert_eq!(cc, b);
        assert_eq!(c.find(b"b", 0, Dialect::Wasp), None);
        assert_eq!(c.find(b"c", 0, Dialect::Wasp), Some(cc));
        assert_eq!(c.get_mut(cc).tag, 3);
        assert_eq!(c.stats(), CacheStats { hits: 2, misses: 4, evictions: 1 });
        assert!(CodeCache::new(0).insert(b"a", 0, Dialect::Wasp, code(), 0).is_none());
        assert_ne!(code_hash(b"abcdefghi", 0, Dialect::Wasp), code_hash(b"abcdefghj", 0, Dialect::Wasp));
    }
}
