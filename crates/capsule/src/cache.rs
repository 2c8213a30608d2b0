//! The code cache: capsule code verified (and decoded) once, found again by
//! its bytes (docs/capsules.md §3). A flow of capsules carries the same code
//! packet after packet; the node then skips the verifier and runs what it
//! decoded the first time. Entries are keyed by the code's bytes, its entry
//! point and dialect (compared in full, so a hash collision costs a miss,
//! never a wrong program), bounded in number, and evicted least recently
//! used first.
//!
//! Senders choose the code, so the cache is built to hold against them:
//! the hash is keyed (a random key per cache), so that nobody can send
//! programs that all land on one hash and make every lookup compare them
//! all; and a hit, a miss and an eviction each cost the same whatever the
//! cache holds (the recency order is a linked list through the entries,
//! not a scan for the oldest).

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use netvm_vm::hash::fold;

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
    /// Its hash (where `by_hash` lists it).
    hash: u64,
    /// The next more recently used entry (`NIL`: none, the newest).
    newer: u32,
    /// The next less recently used entry (`NIL`: none, the oldest).
    older: u32,
}

/// No entry.
const NIL: u32 = u32::MAX;

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
    /// The hash key.
    key: [u64; 2],
    /// The most and the least recently used entries (`NIL` while empty).
    newest: u32,
    oldest: u32,
    stats: CacheStats,
    /// The program found last: compared first, before any hashing (WASP's
    /// one-entry cache; a flow's capsules come one after another).
    last: Option<usize>,
}

/// A fast 64-bit hash of the code's bytes, entry point and dialect under
/// `key` (a key into the cache only: entries are compared in full).
/// Without the key, nobody can tell which programs share a hash.
pub fn code_hash(key: [u64; 2], bytes: &[u8], entry: u16, dialect: Dialect) -> u64 {
    let word = |c: &[u8]| u64::from_le_bytes(c.try_into().unwrap_or_default());
    let mut h = key[0] ^ (bytes.len() as u64) ^ (u64::from(entry) << 32) ^ if dialect == Dialect::Snap { 1 << 63 } else { 0 };
    // Sixteen bytes to each multiply.
    let mut chunks = bytes.chunks_exact(16);
    for c in &mut chunks {
        h = fold(h ^ word(&c[..8]) ^ key[0], word(&c[8..]) ^ key[1]);
    }
    let mut last = [0u8; 16];
    last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    h = fold(h ^ word(&last[..8]) ^ key[0], word(&last[8..]) ^ key[1]);
    fold(h, key[1])
}

/// A random hash key (the standard library's random source, which keys its
/// `HashMap`s); the multiplier odd.
fn random_key() -> [u64; 2] {
    let r = RandomState::new();
    [r.hash_one(0x6a09_e667_u64), r.hash_one(0xbb67_ae85_u64) | 1]
}

impl CodeCache {
    /// A cache of at most `capacity` programs (0: nothing is cached).
    pub fn new(capacity: usize) -> CodeCache {
        CodeCache {
            capacity,
            entries: Vec::new(),
            by_hash: HashMap::default(),
            key: random_key(),
            newest: NIL,
            oldest: NIL,
            stats: CacheStats::default(),
            last: None,
        }
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
                let h = code_hash(self.key, bytes, entry, dialect);
                self.by_hash.get(&h).and_then(|ix| ix.iter().map(|&i| i as usize).find(|&i| same(&self.entries[i])))
            }
        };
        if found.is_some() {
            self.last = found;
        }
        match found {
            Some(i) => {
                if self.newest != i as u32 {
                    self.unlink(i);
                    self.link_newest(i);
                }
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
    /// when the cache holds nothing (capacity 0). A full cache evicts its
    /// least recently used program.
    pub fn insert(&mut self, bytes: &[u8], entry: u16, dialect: Dialect, code: CapsuleCode, tag: u64) -> Option<usize> {
        if self.capacity == 0 {
            return None;
        }
        let hash = code_hash(self.key, bytes, entry, dialect);
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
            hash,
            newer: NIL,
            older: NIL,
        };
        let i = if self.entries.len() < self.capacity {
            self.entries.push(new);
            self.entries.len() - 1
        } else {
            let i = self.oldest as usize;
            self.unlink(i);
            let old = self.entries[i].hash;
            if let Some(v) = self.by_hash.get_mut(&old) {
                v.retain(|&x| x as usize != i);
                if v.is_empty() {
                    self.by_hash.remove(&old);
                }
            }
            if self.last == Some(i) {
                self.last = None;
            }
            self.entries[i] = new;
            self.stats.evictions += 1;
            i
        };
        self.link_newest(i);
        self.by_hash.entry(hash).or_default().push(i as u32);
        Some(i)
    }

    /// Takes entry `i` out of the recency order.
    fn unlink(&mut self, i: usize) {
        let (newer, older) = (self.entries[i].newer, self.entries[i].older);
        match newer {
            NIL => self.newest = older,
            n => self.entries[n as usize].older = older,
        }
        match older {
            NIL => self.oldest = newer,
            o => self.entries[o as usize].newer = newer,
        }
        self.entries[i].newer = NIL;
        self.entries[i].older = NIL;
    }

    /// Puts entry `i` (out of the order) first: the most recently used.
    fn link_newest(&mut self, i: usize) {
        self.entries[i].older = self.newest;
        match self.newest {
            NIL => self.oldest = i as u32,
            n => self.entries[n as usize].newer = i as u32,
        }
        self.newest = i as u32;
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
        let k = random_key();
        assert_ne!(code_hash(k, b"abcdefghi", 0, Dialect::Wasp), code_hash(k, b"abcdefghj", 0, Dialect::Wasp));
        assert_ne!(code_hash(k, b"abc", 0, Dialect::Wasp), code_hash(random_key(), b"abc", 0, Dialect::Wasp), "keyed");
    }

    /// Against a model that keeps programs in recency order in a list:
    /// after any sequence of lookups and inserts (the node inserts after a
    /// miss), the cache holds exactly the model's programs and counts the
    /// same hits, misses and evictions, for capacities 1 to 6.
    #[test]
    fn recency_order_matches_a_list_model() {
        let mut next = crate::test_sequence(0x9e37_79b9_7f4a_7c15u64);
        for capacity in 1..=6 {
            let mut c = CodeCache::new(capacity);
            let mut model: Vec<Vec<u8>> = Vec::new(); // most recent last
            let mut evictions = 0;
            for step in 0..3000 {
                let code = vec![(next() % (capacity as u64 * 2 + 1)) as u8; 1 + step % 11 % 3];
                let found = c.find(&code, 0, Dialect::Wasp);
                match model.iter().position(|m| *m == code) {
                    Some(p) => {
                        let m = model.remove(p);
                        model.push(m);
                        let i = found.expect("the model holds it");
                        assert_eq!(c.get_mut(i).bytes, code);
                    }
                    None => {
                        assert_eq!(found, None, "step {step}");
                        if model.len() == capacity {
                            model.remove(0);
                            evictions += 1;
                        }
                        model.push(code.clone());
                        let i = c.insert(&code, 0, Dialect::Wasp, CapsuleCode::default(), 0).unwrap();
                        assert_eq!(c.find(&code, 0, Dialect::Wasp), Some(i));
                    }
                }
                assert_eq!(c.len(), model.len());
                assert_eq!(c.stats().evictions, evictions, "capacity {capacity} step {step}");
            }
            // Walk the order from the newest: the model, reversed.
            let mut order = Vec::new();
            let mut i = c.newest;
            while i != NIL {
                order.push(c.entries[i as usize].bytes.clone());
                i = c.entries[i as usize].older;
            }
            model.reverse();
            assert_eq!(order, model, "capacity {capacity}");
        }
    }
}
