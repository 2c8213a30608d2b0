//! [`ExactTable`]: a fixed-capacity exact-match hash table with fixed-size
//! byte-string keys (1..=16 bytes) and values (0..=16 bytes) and a per-entry
//! timestamp for aging.
//!
//! # Layout
//!
//! A bucketized cuckoo hash in the manner of DPDK's `rte_hash`, chosen over a
//! Swiss table because the capacity is fixed and the table must keep working
//! near full: every key has exactly two candidate buckets, so a lookup probes
//! at most two 16-byte tag groups (no probe sequences that lengthen as the
//! table fills, no tombstones after deletes, deletes are O(1)), and the bulk
//! lookup knows both addresses right after hashing and can prefetch them.
//!
//! * `tags`: one 16-byte-aligned group of eight 16-bit signatures per bucket
//!   (four buckets per cache line); tag 0 marks an empty slot.
//! * `entries`: per slot `key | value | timestamp (u64 LE)`, contiguous, so a
//!   hit costs one tag line plus (usually) one entry line.
//!
//! A key's 64-bit hash gives its primary bucket (low 32 bits, reduced by
//! multiply-shift, so the bucket count need not be a power of two) and its
//! tag (top 16 bits). The alternative bucket is `(g(tag) - b) mod n`, an
//! involution: an entry's other bucket follows from where it is and its tag,
//! without the key. An insert that finds both buckets full makes room by a
//! breadth-first search over displacement paths (at most [`BFS_NODES`]
//! buckets, no bucket twice on one path), then moves the entries along the
//! shortest path found.
//!
//! # Load guarantee
//!
//! At `capacity` the table has `ceil((capacity * 10/9 + 32) / 8)` buckets
//! (its full layout), i.e. at most 90% of the slots are ever used, and it
//! refuses a new key once it holds `capacity` entries. Two-choice eight-way
//! cuckoo hashing with BFS fills about 99.7% of its slots before its first
//! failure (tested: ≥ 97%), so inserting up to `capacity` distinct keys
//! succeeds: the tests fill tables of many sizes to exactly `capacity` and
//! check that no insert fails.
//!
//! # Growth
//!
//! A table starts smaller than its full layout ([`INITIAL_BUCKETS`] buckets,
//! or what [`ExactTable::reserve`] asks for) and doubles its buckets, up to
//! the full layout, when a new key would fill more than half of its slots
//! (or, practically never, finds no room): memory follows the entries
//! stored, and the entries in use share cache lines. A learning bridge
//! with 4,096 hosts in a table of capacity 1M keeps their tags and entries
//! in 160 KB (about 2,600 lines) instead of on 8,192 lines of their own
//! (512 KB, more than an L2 cache), and misses on them less (BENCHMARKS.md). A
//! doubling rehashes every entry (amortized O(1) an insert; the insert
//! that doubles a table of `n` entries takes O(n)): a table that must not
//! pause reserves its capacity at creation (`reserve`, the `table` kind's
//! `initial` setting). Where memory for the larger layout cannot be had,
//! the table stays as it is and fills it further.
//!
//! # Hash
//!
//! A hand-written two-round folded-multiply hash over the key read as two
//! (overlapping) 64-bit words, seeded per table from the standard library's
//! random source, so that an attacker choosing keys (MAC addresses, say)
//! cannot aim them at a few buckets.
//!
//! # Aging
//!
//! Every entry carries the time (ns) of its last insert; entries loaded with
//! [`ExactTable::insert_static`] carry [`STATIC`] and never age. With an idle
//! limit set ([`ExactTable::set_aging`]), an entry idle more than the limit
//! is absent for the `*_live` operations and its slot is reused by inserts;
//! [`ExactTable::age`] purges such entries.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;

use netvm_vm::hash::fold;
use netvm_vm::BucketWalk;

/// Slots per bucket.
pub const SLOTS: usize = 8;
/// Largest capacity [`ExactTable::new`] accepts (2^25 entries).
pub const MAX_CAPACITY: usize = 1 << 25;
/// Largest key size in bytes.
pub const MAX_KEY: usize = 16;
/// Largest value size in bytes.
pub const MAX_VALUE: usize = 16;
/// Timestamp of a static entry (one that never ages).
pub const STATIC: u64 = u64::MAX;
/// Most buckets one insert's displacement search visits.
pub const BFS_NODES: usize = 1024;
/// Buckets of a new table (or its full layout, if that is smaller): 1,024
/// slots, 512 entries before the first doubling.
pub const INITIAL_BUCKETS: usize = 128;
/// Keys hashed and prefetched together by the bulk lookups.
const BATCH: usize = 32;
/// "No parent" in the BFS queue.
const ROOT: u16 = u16::MAX;

/// An insert of a new key found no room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableFull;

impl fmt::Display for TableFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("table full")
    }
}

impl std::error::Error for TableFull {}

/// One stored entry, as [`ExactTable::iter`] and [`ExactTable::get`] give it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The key (`key_size` bytes).
    pub key: &'a [u8],
    /// The value (`value_size` bytes).
    pub value: &'a [u8],
    /// Time of the last insert in ns, or [`STATIC`] for a static entry.
    pub timestamp: u64,
}

/// Eight tags, one bucket; 0 = empty slot.
#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
struct Tags([u16; SLOTS]);

/// A bucket reached by the displacement search.
#[derive(Clone, Copy)]
struct Node {
    bucket: u32,
    /// Index of the node whose entry `slot` moves into this bucket.
    parent: u16,
    slot: u8,
}

/// Where a key may live.
#[derive(Clone, Copy, Default)]
struct Probe {
    b1: usize,
    b2: usize,
    tag: u16,
}

/// Zeroed bytes starting on a cache-line boundary, so that an entry (whose
/// stride divides 64 or is a multiple of 16) lies on as few lines as it can,
/// and one prefetch of its first byte brings its key and value; large ones
/// on transparent huge pages.
struct Lines {
    buf: Vec<u8>,
    off: usize,
    len: usize,
}

impl Lines {
    fn zeroed(len: usize) -> Result<Lines, std::collections::TryReserveError> {
        let mut buf: Vec<u8> = Vec::new();
        buf.try_reserve_exact(len + 63)?;
        let off = buf.as_ptr().align_offset(64).min(63);
        crate::huge::advise_huge(buf.as_ptr().wrapping_add(off), len);
        buf.resize(len + 63, 0);
        Ok(Lines { buf, off, len })
    }
}

/// `n` buckets' empty tag groups, on transparent huge pages where large.
fn zeroed_tags(n: usize) -> Result<Vec<Tags>, std::collections::TryReserveError> {
    let mut tags: Vec<Tags> = Vec::new();
    tags.try_reserve_exact(n)?;
    crate::huge::advise_huge(tags.as_ptr().cast(), n * std::mem::size_of::<Tags>());
    tags.resize(n, Tags::default());
    Ok(tags)
}

impl Clone for Lines {
    fn clone(&self) -> Lines {
        let mut l = Lines::zeroed(self.len).unwrap_or_else(|e| panic!("cloning a table of {} bytes: {e}", self.len));
        l.copy_from_slice(self);
        l
    }
}

impl std::ops::Deref for Lines {
    type Target = [u8];
    #[inline(always)]
    fn deref(&self) -> &[u8] {
        &self.buf[self.off..self.off + self.len]
    }
}

impl std::ops::DerefMut for Lines {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.off..self.off + self.len]
    }
}

/// A fixed-capacity exact-match table (see the module documentation).
#[derive(Clone)]
pub struct ExactTable {
    key_size: usize,
    value_size: usize,
    stride: usize,
    capacity: usize,
    len: usize,
    nbuckets: usize,
    /// Buckets at `capacity` (the full layout): `nbuckets` grows up to it.
    full_buckets: usize,
    seed: [u64; 2],
    tags: Vec<Tags>,
    entries: Lines,
    idle_ns: u64,
    aged_out: u64,
    queue: Vec<Node>,
}

impl fmt::Debug for ExactTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExactTable")
            .field("key_size", &self.key_size)
            .field("value_size", &self.value_size)
            .field("capacity", &self.capacity)
            .field("len", &self.len)
            .field("buckets", &self.nbuckets)
            .finish()
    }
}

/// `a == b` for keys of the same length, at most 16 bytes, without a
/// `memcmp` call: two overlapping word compares cover every byte.
#[inline(always)]
fn keys_equal(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if (8..=16).contains(&n) {
        let w = |k: &[u8], i: usize| u64::from_le_bytes(k[i..i + 8].try_into().unwrap_or_default());
        w(a, 0) == w(b, 0) && w(a, n - 8) == w(b, n - 8)
    } else if (4..8).contains(&n) {
        let w = |k: &[u8], i: usize| u32::from_le_bytes(k[i..i + 4].try_into().unwrap_or_default());
        w(a, 0) == w(b, 0) && w(a, n - 4) == w(b, n - 4)
    } else {
        a == b
    }
}

/// The key as two words covering every byte (overlapping when shorter than 16).
#[inline(always)]
pub(crate) fn key_words(k: &[u8]) -> (u64, u64) {
    let n = k.len();
    if n >= 8 {
        let a: [u8; 8] = k[..8].try_into().unwrap_or_default();
        let b: [u8; 8] = k[n - 8..].try_into().unwrap_or_default();
        (u64::from_le_bytes(a), u64::from_le_bytes(b))
    } else if n >= 4 {
        let a: [u8; 4] = k[..4].try_into().unwrap_or_default();
        let b: [u8; 4] = k[n - 4..].try_into().unwrap_or_default();
        (u64::from(u32::from_le_bytes(a)), u64::from(u32::from_le_bytes(b)))
    } else if n > 0 {
        (u64::from(k[0]) | u64::from(k[n / 2]) << 8 | u64::from(k[n - 1]) << 16, 0)
    } else {
        (0, 0)
    }
}

/// Bit i set when `tags[i] == tag`: one vector compare on x86-64 (SSE2,
/// part of the baseline), eight scalar compares elsewhere.
#[inline(always)]
fn match_tags(tags: &Tags, tag: u16) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_cmpeq_epi16, _mm_load_si128, _mm_movemask_epi8, _mm_packs_epi16, _mm_set1_epi16, _mm_setzero_si128};
        // SAFETY: SSE2 is part of the x86-64 baseline; `Tags` is 16 bytes
        // aligned to 16 (`repr(C, align(16))`), so the aligned load reads
        // exactly this bucket's tags. The compare gives 0xffff per equal tag,
        // which the signed pack narrows to 0xff, one byte per slot.
        unsafe {
            let v = _mm_load_si128(tags.0.as_ptr().cast());
            let eq = _mm_cmpeq_epi16(v, _mm_set1_epi16(tag as i16));
            (_mm_movemask_epi8(_mm_packs_epi16(eq, _mm_setzero_si128())) as u32) & 0xff
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut m = 0;
        for (i, &t) in tags.0.iter().enumerate() {
            m |= u32::from(t == tag) << i;
        }
        m
    }
}

/// `dst.copy_from_slice(src)` for the short keys and values of a table
/// (at most 16 bytes) without a `memcpy` call: two overlapping word copies.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    assert_eq!(dst.len(), n, "copy_short: {} bytes into {}", n, dst.len());
    if (8..=16).contains(&n) {
        let (a, b) =
            (u64::from_ne_bytes(src[..8].try_into().unwrap_or_default()), u64::from_ne_bytes(src[n - 8..].try_into().unwrap_or_default()));
        dst[..8].copy_from_slice(&a.to_ne_bytes());
        dst[n - 8..].copy_from_slice(&b.to_ne_bytes());
    } else if (4..8).contains(&n) {
        let (a, b) =
            (u32::from_ne_bytes(src[..4].try_into().unwrap_or_default()), u32::from_ne_bytes(src[n - 4..].try_into().unwrap_or_default()));
        dst[..4].copy_from_slice(&a.to_ne_bytes());
        dst[n - 4..].copy_from_slice(&b.to_ne_bytes());
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    }
}

pub(crate) use netvm_vm::prefetch;

impl ExactTable {
    /// An empty table for up to `capacity` entries of `key_size`-byte keys
    /// and `value_size`-byte values, with a random hash seed; it starts with
    /// [`INITIAL_BUCKETS`] buckets and grows (see the module documentation).
    /// Errors name the setting out of range or the allocation that failed.
    pub fn new(key_size: usize, value_size: usize, capacity: usize) -> Result<ExactTable, String> {
        let s = RandomState::new();
        ExactTable::with_seed(key_size, value_size, capacity, s.hash_one(0x5eed_u64) ^ s.hash_one(1u64).rotate_left(32))
    }

    /// As [`ExactTable::new`], with a fixed hash seed (reproducible benchmarks).
    pub fn with_seed(key_size: usize, value_size: usize, capacity: usize, seed: u64) -> Result<ExactTable, String> {
        if !(1..=MAX_CAPACITY).contains(&capacity) {
            return Err(format!("capacity must be between 1 and {MAX_CAPACITY}, not {capacity}"));
        }
        let full = (capacity + capacity / 9 + 32).div_ceil(SLOTS);
        let mut t = ExactTable::with_layout(key_size, value_size, capacity, full.min(INITIAL_BUCKETS), seed)?;
        t.full_buckets = full;
        Ok(t)
    }

    /// A table of exactly `nbuckets` buckets (it does not grow) refusing new
    /// keys beyond `capacity`.
    pub(crate) fn with_layout(
        key_size: usize,
        value_size: usize,
        capacity: usize,
        nbuckets: usize,
        seed: u64,
    ) -> Result<ExactTable, String> {
        if !(1..=MAX_KEY).contains(&key_size) {
            return Err(format!("key size must be between 1 and {MAX_KEY} bytes, not {key_size}"));
        }
        if value_size > MAX_VALUE {
            return Err(format!("value size must be at most {MAX_VALUE} bytes, not {value_size}"));
        }
        let stride = key_size + value_size + 8;
        let slots = nbuckets * SLOTS;
        let tags = zeroed_tags(nbuckets).map_err(|e| format!("cannot allocate {nbuckets} buckets: {e}"))?;
        let entries = Lines::zeroed(slots * stride).map_err(|e| format!("cannot allocate {slots} slots of {stride} bytes: {e}"))?;
        let seed = [fold(seed ^ 0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344), fold(seed ^ 0xa409_3822_299f_31d0, 0x082e_fa98_ec4e_6c89)];
        Ok(ExactTable {
            key_size,
            value_size,
            stride,
            capacity,
            len: 0,
            nbuckets,
            full_buckets: nbuckets,
            seed,
            tags,
            entries,
            idle_ns: u64::MAX,
            aged_out: 0,
            queue: Vec::with_capacity(BFS_NODES),
        })
    }

    /// Key size in bytes.
    pub fn key_size(&self) -> usize {
        self.key_size
    }

    /// Value size in bytes.
    pub fn value_size(&self) -> usize {
        self.value_size
    }

    /// Most entries the table holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Stored entries, counting idle ones not yet purged.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no entry is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of buckets (of [`SLOTS`] slots each).
    pub fn buckets(&self) -> usize {
        self.nbuckets
    }

    /// Grows the table now, as far as its full layout allows, so that it
    /// holds `entries` entries (half of its slots at most) without growing
    /// again: an application that knows how many it will store (a table
    /// loaded from a file, one that must not pause to grow) asks once.
    /// Where the memory cannot be had, the table stays as it is.
    pub fn reserve(&mut self, entries: usize) {
        let want = entries.saturating_mul(2).div_ceil(SLOTS).min(self.full_buckets);
        if want > self.nbuckets {
            self.grow_to(want);
        }
    }

    /// Bytes of table memory (tags and entries) now.
    pub fn memory_bytes(&self) -> usize {
        self.nbuckets * std::mem::size_of::<Tags>() + self.entries.len()
    }

    /// Bytes of table memory once grown to its full layout (what holding
    /// `capacity` entries takes): what admission control counts.
    pub fn memory_at_capacity(&self) -> usize {
        self.full_buckets * (std::mem::size_of::<Tags>() + SLOTS * self.stride)
    }

    /// Sets the idle limit the `*_live` operations and inserts honour: an
    /// entry whose last insert is more than `idle_ns` before now is absent.
    /// `None` (the default): entries never age.
    pub fn set_aging(&mut self, idle_ns: Option<u64>) {
        self.idle_ns = idle_ns.unwrap_or(u64::MAX);
    }

    /// The idle limit set by [`ExactTable::set_aging`].
    pub fn aging(&self) -> Option<u64> {
        (self.idle_ns != u64::MAX).then_some(self.idle_ns)
    }

    /// Entries removed because they had aged: purged by [`ExactTable::age`],
    /// or found idle by an insert, replace or live delete.
    pub fn aged_out(&self) -> u64 {
        self.aged_out
    }

    /// Prefetches both candidate buckets of `key` (a hint; no effect on results).
    #[inline]
    pub fn prefetch(&self, key: &[u8]) {
        if key.len() == self.key_size {
            let p = self.probe(key);
            prefetch(&self.tags[p.b1]);
            prefetch(&self.tags[p.b2]);
        }
    }

    /// Prefetches what lookups of `keys` will read, in groups of 32 keys:
    /// each key's first bucket's tags, then, once the group is hashed, the
    /// entry a matching tag points to (a hint; no effect on results). Keys
    /// of the wrong size are skipped. The second bucket: while at most half
    /// the slots are used, a key is almost always in its first bucket, and
    /// the second's tags are fetched only where the first's do not match;
    /// fuller, both buckets' tags are fetched at once and both searched
    /// (a key in its second bucket would otherwise miss on its entry:
    /// BENCHMARKS.md has the figures of both ways at both loads).
    pub fn prefetch_keys<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) {
        let both = self.len * 2 > self.nbuckets * SLOTS;
        let mut probes = [Probe::default(); BATCH];
        let mut keys = keys.into_iter();
        loop {
            // A group: hash each key and prefetch its first bucket's tags
            // (both buckets' where the table is fuller) ...
            let mut n = 0;
            while n < BATCH {
                let Some(k) = keys.next() else { break };
                if k.len() != self.key_size {
                    continue;
                }
                let p = if both { self.probe(k) } else { self.probe_first(k) };
                self.prefetch_tags(p.b1);
                if both {
                    self.prefetch_tags(p.b2);
                }
                probes[n] = p;
                n += 1;
            }
            // ... then, their tags on the way, the entries they point to.
            for p in &probes[..n] {
                let m = self.tags.get(p.b1).map_or(0, |t| match_tags(t, p.tag));
                if m != 0 {
                    self.prefetch_entry(p.b1, m);
                }
                if both {
                    let m = self.tags.get(p.b2).map_or(0, |t| match_tags(t, p.tag));
                    if m != 0 {
                        self.prefetch_entry(p.b2, m);
                    }
                } else if m == 0 {
                    self.prefetch_tags(self.alt(p.b1, p.tag));
                }
            }
            if n < BATCH {
                return;
            }
        }
    }

    /// Prefetches bucket `b`'s tags (a hint: nothing where `b` is out of range).
    #[inline(always)]
    fn prefetch_tags(&self, b: usize) {
        if let Some(t) = self.tags.get(b) {
            prefetch(t);
        }
    }

    /// Prefetches the entry of bucket `b` in the lowest slot of `matched`
    /// (one bit per slot, not 0).
    #[inline(always)]
    fn prefetch_entry(&self, b: usize, matched: u32) {
        if let Some(e) = self.entries.get((b * SLOTS + matched.trailing_zeros() as usize) * self.stride) {
            prefetch(e);
        }
    }

    #[inline(always)]
    fn probe(&self, key: &[u8]) -> Probe {
        let p = self.probe_first(key);
        Probe { b2: self.alt(p.b1, p.tag), ..p }
    }

    /// The first bucket and the tag of `key` (`b2` left 0).
    #[inline(always)]
    fn probe_first(&self, key: &[u8]) -> Probe {
        let (a, b) = key_words(key);
        let h = fold(fold(a ^ self.seed[0], b ^ self.seed[1]) ^ BucketWalk::MIX[0], BucketWalk::MIX[1]);
        let b1 = (((h & 0xffff_ffff) * self.nbuckets as u64) >> 32) as usize;
        let tag = ((h >> 48) as u16).max(1);
        Probe { b1, b2: 0, tag }
    }

    /// The other bucket of an entry with `tag` in bucket `b`.
    #[inline(always)]
    fn alt(&self, b: usize, tag: u16) -> usize {
        let t = ((u64::from(u32::from(tag).wrapping_mul(BucketWalk::ALT)) * self.nbuckets as u64) >> 32) as usize;
        if t >= b {
            t - b
        } else {
            t + self.nbuckets - b
        }
    }

    #[inline(always)]
    fn key_at(&self, slot: usize) -> &[u8] {
        let o = slot * self.stride;
        &self.entries[o..o + self.key_size]
    }

    #[inline(always)]
    fn value_at(&self, slot: usize) -> &[u8] {
        let o = slot * self.stride + self.key_size;
        &self.entries[o..o + self.value_size]
    }

    #[inline(always)]
    fn ts_at(&self, slot: usize) -> u64 {
        let o = slot * self.stride + self.key_size + self.value_size;
        u64::from_le_bytes(self.entries[o..o + 8].try_into().unwrap_or_default())
    }

    #[inline(always)]
    fn tag_at(&self, slot: usize) -> u16 {
        self.tags[slot / SLOTS].0[slot % SLOTS]
    }

    #[inline(always)]
    fn set_tag(&mut self, slot: usize, tag: u16) {
        self.tags[slot / SLOTS].0[slot % SLOTS] = tag;
    }

    #[inline(always)]
    fn idle(&self, slot: usize, now_ns: u64) -> bool {
        // Without aging nothing is idle: the timestamp (often on the entry's
        // second cache line) is not read.
        self.idle_ns != u64::MAX && now_ns.saturating_sub(self.ts_at(slot)) > self.idle_ns
    }

    fn entry(&self, slot: usize) -> Entry<'_> {
        Entry { key: self.key_at(slot), value: self.value_at(slot), timestamp: self.ts_at(slot) }
    }

    /// The slot of `key` among the slots whose tags are in `m` of bucket `b`.
    #[inline(always)]
    fn scan(&self, key: &[u8], b: usize, mut m: u32) -> Option<usize> {
        while m != 0 {
            let s = b * SLOTS + m.trailing_zeros() as usize;
            if keys_equal(self.key_at(s), key) {
                return Some(s);
            }
            m &= m - 1;
        }
        None
    }

    #[inline(always)]
    fn find(&self, key: &[u8], p: Probe) -> Option<usize> {
        if let Some(s) = self.scan(key, p.b1, match_tags(&self.tags[p.b1], p.tag)) {
            return Some(s);
        }
        self.scan(key, p.b2, match_tags(&self.tags[p.b2], p.tag))
    }

    #[inline(always)]
    fn check_key(&self, key: &[u8]) {
        assert_eq!(key.len(), self.key_size, "key of {} bytes in a table of {}-byte keys", key.len(), self.key_size);
    }

    /// The value stored for `key`, ignoring aging.
    ///
    /// Panics if `key` is not `key_size` bytes long.
    #[inline]
    pub fn lookup(&self, key: &[u8]) -> Option<&[u8]> {
        self.check_key(key);
        self.find(key, self.probe(key)).map(|s| self.value_at(s))
    }

    /// The value stored for `key` unless its entry has been idle more than
    /// the aging limit at `now_ns`.
    ///
    /// Panics if `key` is not `key_size` bytes long.
    #[inline]
    pub fn lookup_live(&self, key: &[u8], now_ns: u64) -> Option<&[u8]> {
        self.check_key(key);
        self.find(key, self.probe(key)).filter(|&s| !self.idle(s, now_ns)).map(|s| self.value_at(s))
    }

    /// The entry stored for `key` with its timestamp, ignoring aging.
    ///
    /// Panics if `key` is not `key_size` bytes long.
    pub fn get(&self, key: &[u8]) -> Option<Entry<'_>> {
        self.check_key(key);
        self.find(key, self.probe(key)).map(|s| self.entry(s))
    }

    /// Looks up every key of `keys`, writing each value (or `None`) to the
    /// same index of `out`, and returns the number of hits. Hashes and
    /// prefetches both candidate buckets of a batch of keys, then the entries
    /// their tags point at, before comparing keys, so the cache misses of a
    /// batch overlap. Ignores aging.
    ///
    /// Panics if the slices differ in length or a key is not `key_size` bytes.
    pub fn lookup_bulk<'a>(&'a self, keys: &[&[u8]], out: &mut [Option<&'a [u8]>]) -> usize {
        assert_eq!(keys.len(), out.len(), "lookup_bulk: {} keys but {} results", keys.len(), out.len());
        self.bulk(keys.len(), |i| keys[i], u64::MAX, 0, out)
    }

    /// As [`ExactTable::lookup_bulk`], honouring the aging limit at `now_ns`.
    pub fn lookup_bulk_live<'a>(&'a self, keys: &[&[u8]], now_ns: u64, out: &mut [Option<&'a [u8]>]) -> usize {
        assert_eq!(keys.len(), out.len(), "lookup_bulk_live: {} keys but {} results", keys.len(), out.len());
        self.bulk(keys.len(), |i| keys[i], self.idle_ns, now_ns, out)
    }

    /// As [`ExactTable::lookup_bulk`], with the keys back to back in one
    /// buffer of `out.len() * key_size` bytes.
    pub fn lookup_bulk_flat<'a>(&'a self, keys: &[u8], out: &mut [Option<&'a [u8]>]) -> usize {
        let ks = self.key_size;
        assert_eq!(keys.len(), out.len() * ks, "lookup_bulk_flat: {} key bytes for {} results", keys.len(), out.len());
        self.bulk(out.len(), |i| &keys[i * ks..(i + 1) * ks], u64::MAX, 0, out)
    }

    #[inline(always)]
    fn bulk<'a, 'k>(&'a self, n: usize, key: impl Fn(usize) -> &'k [u8], idle_ns: u64, now_ns: u64, out: &mut [Option<&'a [u8]>]) -> usize {
        let mut hits = 0;
        let mut probes = [Probe::default(); BATCH];
        let mut masks = [(0u32, 0u32); BATCH];
        let mut start = 0;
        while start < n {
            let m = (n - start).min(BATCH);
            for (i, p) in probes[..m].iter_mut().enumerate() {
                let k = key(start + i);
                self.check_key(k);
                *p = self.probe(k);
                prefetch(&self.tags[p.b1]);
                prefetch(&self.tags[p.b2]);
            }
            for (p, mk) in probes[..m].iter().zip(&mut masks[..m]) {
                let m1 = match_tags(&self.tags[p.b1], p.tag);
                let m2 = match_tags(&self.tags[p.b2], p.tag);
                if m1 != 0 {
                    prefetch(&self.entries[(p.b1 * SLOTS + m1.trailing_zeros() as usize) * self.stride]);
                }
                if m2 != 0 {
                    prefetch(&self.entries[(p.b2 * SLOTS + m2.trailing_zeros() as usize) * self.stride]);
                }
                *mk = (m1, m2);
            }
            for i in 0..m {
                let k = key(start + i);
                let (p, (m1, m2)) = (probes[i], masks[i]);
                let slot = self.scan(k, p.b1, m1).or_else(|| self.scan(k, p.b2, m2));
                let v = slot.filter(|&s| now_ns.saturating_sub(self.ts_at(s)) <= idle_ns).map(|s| self.value_at(s));
                hits += usize::from(v.is_some());
                out[start + i] = v;
            }
            start += m;
        }
        hits
    }

    #[inline(always)]
    fn write_entry(&mut self, slot: usize, tag: u16, key: Option<&[u8]>, value: &[u8], ts: u64) {
        self.set_tag(slot, tag);
        let o = slot * self.stride;
        let (ks, vs) = (self.key_size, self.value_size);
        if let Some(key) = key {
            copy_short(&mut self.entries[o..o + ks], key);
        }
        copy_short(&mut self.entries[o + ks..o + ks + vs], value);
        self.entries[o + ks + vs..o + ks + vs + 8].copy_from_slice(&ts.to_le_bytes());
    }

    /// Inserts `key` with `value`, or replaces the value of an existing
    /// entry, stamping it with `now_ns` (a replaced static entry becomes an
    /// ageing one). Entries idle beyond the aging limit give up their slots.
    /// Fails only for a new key when the table holds `capacity` entries or
    /// (practically never below that) no displacement path is found.
    ///
    /// Panics if `key` or `value` has the wrong length.
    #[inline]
    pub fn insert(&mut self, key: &[u8], value: &[u8], now_ns: u64) -> Result<(), TableFull> {
        self.put(key, value, now_ns.min(STATIC - 1), now_ns)
    }

    /// As [`ExactTable::insert`], making a static entry that never ages.
    pub fn insert_static(&mut self, key: &[u8], value: &[u8]) -> Result<(), TableFull> {
        self.put(key, value, STATIC, 0)
    }

    /// Inserts with timestamp `ts`, treating entries idle at `now_ns` as free.
    /// The replace of a stored key (a learning bridge's usual insert) is
    /// inline; a new key's slot is found out of line.
    #[inline]
    pub(crate) fn put(&mut self, key: &[u8], value: &[u8], ts: u64, now_ns: u64) -> Result<(), TableFull> {
        self.check_key(key);
        assert_eq!(value.len(), self.value_size, "value of {} bytes in a table of {}-byte values", value.len(), self.value_size);
        let p = self.probe(key);
        match self.find(key, p) {
            Some(s) => {
                if self.idle(s, now_ns) {
                    self.aged_out += 1;
                }
                self.write_entry(s, p.tag, None, value, ts);
                Ok(())
            }
            None => self.put_new(key, value, ts, now_ns, p),
        }
    }

    /// The insert of a key not stored: a free slot of either bucket, an
    /// idle entry's, or one made by moving entries.
    #[inline(never)]
    fn put_new(&mut self, key: &[u8], value: &[u8], ts: u64, now_ns: u64, mut p: Probe) -> Result<(), TableFull> {
        // More than half of the slots would be used: double first.
        if self.len < self.capacity && 2 * (self.len + 1) > self.nbuckets * SLOTS && self.double() {
            p = self.probe(key);
        }
        let slot = if self.len >= self.capacity {
            None
        } else if let Some(s) = self.free_slot(p) {
            self.len += 1;
            Some(s)
        } else {
            None
        };
        let slot = match slot {
            Some(s) => s,
            None => {
                // Reuse an idle entry of either bucket, if aging is on.
                let idle = if self.idle_ns == u64::MAX {
                    None
                } else {
                    [p.b1, p.b2]
                        .into_iter()
                        .flat_map(|b| (0..SLOTS).map(move |i| b * SLOTS + i))
                        .find(|&s| self.tag_at(s) != 0 && self.idle(s, now_ns))
                };
                match idle {
                    Some(s) => {
                        self.aged_out += 1;
                        s
                    }
                    None if self.len >= self.capacity => return Err(TableFull),
                    None => match self.make_room(p.b1, p.b2) {
                        Some(s) => {
                            self.len += 1;
                            s
                        }
                        // No path in a layout short of the full one: a larger one has room.
                        None if self.double() => {
                            return self.put_new(key, value, ts, now_ns, self.probe(key));
                        }
                        None => return Err(TableFull),
                    },
                }
            }
        };
        self.write_entry(slot, p.tag, Some(key), value, ts);
        Ok(())
    }

    /// Whether bucket `b` lies on the path from a root to queue node `i`.
    fn on_path(&self, mut i: u16, b: u32) -> bool {
        while i != ROOT {
            let n = self.queue[usize::from(i)];
            if n.bucket == b {
                return true;
            }
            i = n.parent;
        }
        false
    }

    /// Breadth-first search for a displacement path from the full buckets
    /// `b1`/`b2` to a bucket with an empty slot; moves the entries along it
    /// and returns the slot freed in `b1` or `b2`.
    fn make_room(&mut self, b1: usize, b2: usize) -> Option<usize> {
        self.queue.clear();
        self.queue.push(Node { bucket: b1 as u32, parent: ROOT, slot: 0 });
        if b2 != b1 {
            self.queue.push(Node { bucket: b2 as u32, parent: ROOT, slot: 0 });
        }
        let mut head = 0;
        while head < self.queue.len() {
            let node = self.queue[head];
            let b = node.bucket as usize;
            for i in 0..SLOTS {
                let alt = self.alt(b, self.tags[b].0[i]);
                if alt == b {
                    continue;
                }
                let free = match_tags(&self.tags[alt], 0);
                if free != 0 {
                    // Shift entries along the path, from its far end back.
                    let mut to = alt * SLOTS + free.trailing_zeros() as usize;
                    let mut from = b * SLOTS + i;
                    let mut cur = head;
                    loop {
                        self.move_entry(from, to);
                        let n = self.queue[cur];
                        if n.parent == ROOT {
                            return Some(from);
                        }
                        to = from;
                        cur = usize::from(n.parent);
                        from = self.queue[cur].bucket as usize * SLOTS + usize::from(n.slot);
                    }
                }
                if self.queue.len() < BFS_NODES && !self.on_path(head as u16, alt as u32) {
                    self.queue.push(Node { bucket: alt as u32, parent: head as u16, slot: i as u8 });
                }
            }
            head += 1;
        }
        None
    }

    fn move_entry(&mut self, from: usize, to: usize) {
        debug_assert_eq!(self.tag_at(to), 0);
        debug_assert_eq!(self.alt(from / SLOTS, self.tag_at(from)), to / SLOTS);
        self.set_tag(to, self.tag_at(from));
        self.set_tag(from, 0);
        self.entries.copy_within(from * self.stride..(from + 1) * self.stride, to * self.stride);
    }

    /// An empty slot of the key's first bucket, else of its second.
    #[inline(always)]
    fn free_slot(&self, p: Probe) -> Option<usize> {
        [p.b1, p.b2].into_iter().find_map(|b| {
            let m = match_tags(&self.tags[b], 0);
            (m != 0).then(|| b * SLOTS + m.trailing_zeros() as usize)
        })
    }

    /// Doubles the buckets, up to the full layout ([`ExactTable::grow_to`]);
    /// returns whether the table grew.
    fn double(&mut self) -> bool {
        self.nbuckets < self.full_buckets && self.grow_to((2 * self.nbuckets).min(self.full_buckets))
    }

    /// Rehashes every entry into a layout of `nbuckets` buckets (more than
    /// now), and returns whether it did: not where its memory cannot be
    /// had or (practically never at half load) an entry finds no room, and
    /// the table is then unchanged. Entries keep their bytes, tags and
    /// timestamps; which slots they take follows from the order of the
    /// current ones, so that growth repeats exactly with a fixed seed.
    #[cold]
    fn grow_to(&mut self, nbuckets: usize) -> bool {
        debug_assert!(nbuckets > self.nbuckets && nbuckets <= self.full_buckets);
        let Ok(tags) = zeroed_tags(nbuckets) else { return false };
        let Ok(entries) = Lines::zeroed(nbuckets * SLOTS * self.stride) else { return false };
        let old_buckets = self.nbuckets;
        let old_tags = std::mem::replace(&mut self.tags, tags);
        let old_entries = std::mem::replace(&mut self.entries, entries);
        self.nbuckets = nbuckets;
        let stride = self.stride;
        for (b, group) in old_tags.iter().enumerate() {
            for (i, &tag) in group.0.iter().enumerate().filter(|(_, t)| **t != 0) {
                let from = (b * SLOTS + i) * stride;
                let bytes = &old_entries[from..from + stride];
                let p = self.probe(&bytes[..self.key_size]);
                debug_assert_eq!(p.tag, tag);
                let Some(slot) = self.free_slot(p).or_else(|| self.make_room(p.b1, p.b2)) else {
                    // Back to the layout as it was.
                    (self.tags, self.entries, self.nbuckets) = (old_tags, old_entries, old_buckets);
                    return false;
                };
                self.set_tag(slot, tag);
                self.entries[slot * stride..(slot + 1) * stride].copy_from_slice(bytes);
            }
        }
        true
    }

    fn remove_slot(&mut self, slot: usize) {
        self.set_tag(slot, 0);
        self.len -= 1;
    }

    /// Removes `key`, aged or not; returns whether it was stored.
    ///
    /// Panics if `key` is not `key_size` bytes long.
    pub fn delete(&mut self, key: &[u8]) -> bool {
        self.check_key(key);
        match self.find(key, self.probe(key)) {
            Some(s) => {
                self.remove_slot(s);
                true
            }
            None => false,
        }
    }

    /// Removes `key`; returns whether it was stored and not idle beyond the
    /// aging limit at `now_ns` (an idle one counts as aged out).
    pub fn delete_live(&mut self, key: &[u8], now_ns: u64) -> bool {
        self.check_key(key);
        match self.find(key, self.probe(key)) {
            Some(s) => {
                let idle = self.idle(s, now_ns);
                self.aged_out += u64::from(idle);
                self.remove_slot(s);
                !idle
            }
            None => false,
        }
    }

    /// Removes every entry whose last insert is more than `idle_ns` before
    /// `now_ns` (static entries stay); returns how many.
    pub fn age(&mut self, now_ns: u64, idle_ns: u64) -> usize {
        self.age_buckets(now_ns, idle_ns, 0, self.nbuckets)
    }

    /// As [`ExactTable::age`], over `count` buckets from bucket `start`
    /// (wrapping around the end).
    pub(crate) fn age_buckets(&mut self, now_ns: u64, idle_ns: u64, start: usize, count: usize) -> usize {
        let mut purged = 0;
        for k in 0..count.min(self.nbuckets) {
            let b = (start + k) % self.nbuckets;
            for i in 0..SLOTS {
                let s = b * SLOTS + i;
                if self.tags[b].0[i] != 0 && now_ns.saturating_sub(self.ts_at(s)) > idle_ns {
                    self.remove_slot(s);
                    purged += 1;
                }
            }
        }
        self.aged_out += purged as u64;
        purged
    }

    /// Takes the count of aged-out entries (leaving zero).
    pub(crate) fn take_aged_out(&mut self) -> u64 {
        std::mem::take(&mut self.aged_out)
    }

    /// Adds to the count of aged-out entries.
    pub(crate) fn add_aged_out(&mut self, n: u64) {
        self.aged_out += n;
    }

    /// The probe compiled code performs on this table itself
    /// ([`netvm_vm::BucketWalk`]), without the counters and times its owner
    /// adds: `None` where keys are shorter than 4 bytes or values longer
    /// than 4. Valid until the table grows (an insert of a new key, a
    /// [`reserve`](ExactTable::reserve)): its owner asks again then.
    pub(crate) fn bucket_walk(&mut self) -> Option<BucketWalk> {
        let w = BucketWalk::layout(self.key_size as u32, self.value_size as u32)?;
        debug_assert_eq!(w.stride as usize, self.stride);
        Some(BucketWalk {
            tags: self.tags.as_ptr().cast(),
            entries: self.entries.as_mut_ptr(),
            seed: self.seed,
            nbuckets: self.nbuckets as u64,
            idle_ns: self.idle_ns,
            ..w
        })
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.tags.fill(Tags::default());
        self.len = 0;
    }

    /// Every stored entry (idle ones not yet purged included), in table order.
    pub fn iter(&self) -> impl Iterator<Item = Entry<'_>> + '_ {
        self.iter_slots().map(|(_, e)| e)
    }

    /// Every stored entry with its slot, in slot order.
    pub(crate) fn iter_slots(&self) -> impl Iterator<Item = (usize, Entry<'_>)> + '_ {
        (0..self.nbuckets * SLOTS).filter(|&s| self.tag_at(s) != 0).map(|s| (s, self.entry(s)))
    }

    /// Whether a key lands in the same buckets of both tables (a clone's
    /// layout: the same hash seed, buckets and sizes), so that an entry
    /// that neither moved sits at the same slot of each.
    pub(crate) fn same_layout(&self, other: &ExactTable) -> bool {
        (self.seed, self.nbuckets, self.key_size, self.value_size) == (other.seed, other.nbuckets, other.key_size, other.value_size)
    }

    /// The entry for `key`, ignoring aging: looked for at `slot` first (where
    /// a table of the [`same_layout`](ExactTable::same_layout) keeps it), then
    /// where it hashes. A key is stored once, so both give the same entry.
    pub(crate) fn get_near(&self, key: &[u8], slot: usize) -> Option<Entry<'_>> {
        if slot < self.nbuckets * SLOTS && self.tag_at(slot) != 0 && keys_equal(self.key_at(slot), key) {
            return Some(self.entry(slot));
        }
        self.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netvm_traffic::SplitMix64;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn key(ks: usize, r: &mut SplitMix64) -> Vec<u8> {
        r.bytes(16)[..ks].to_vec()
    }

    #[test]
    fn match_tags_sets_one_bit_per_equal_tag() {
        for tag in [0u16, 1, 0x7fff, 0x8000, 0xffff] {
            for pattern in 0u32..256 {
                let mut t = Tags::default();
                for i in 0..SLOTS {
                    t.0[i] = if pattern >> i & 1 == 1 { tag } else { tag.wrapping_add(1 + i as u16) };
                }
                assert_eq!(match_tags(&t, tag), pattern, "tag {tag:#x}, pattern {pattern:#b}");
            }
        }
    }

    /// A clone keeps the layout; `get_near` with the other copy's slot
    /// finds what `get` finds, also for keys that moved (more inserts into
    /// one copy displace entries) and for keys the other copy lacks.
    #[test]
    fn get_near_agrees_with_get_across_copies() {
        let mut r = SplitMix64::new(0x6e65_6172);
        let mut a = ExactTable::new(6, 4, 4096).unwrap();
        let keys: Vec<Vec<u8>> = (0..3000).map(|_| key(6, &mut r)).collect();
        for (i, k) in keys.iter().enumerate() {
            a.insert(k, &(i as u32).to_le_bytes(), 1).unwrap();
        }
        let mut b = a.clone();
        assert!(a.same_layout(&b) && !a.same_layout(&ExactTable::new(6, 4, 4096).unwrap()), "another table has its own seed");
        for k in keys.iter().step_by(7) {
            b.delete_live(k, 1);
        }
        for _ in 0..1000 {
            let _ = b.insert(&key(6, &mut r), &[9; 4], 2);
        }
        let mut near = 0;
        for (slot, e) in a.iter_slots() {
            let got = b.get_near(e.key, slot).map(|x| (x.value.to_vec(), x.timestamp));
            assert_eq!(got, b.get(e.key).map(|x| (x.value.to_vec(), x.timestamp)));
            near += usize::from(b.tag_at(slot) != 0 && keys_equal(b.key_at(slot), e.key));
        }
        assert!(near > 1000, "most entries stay where the clone put them ({near})");
    }

    /// What compiled code does with a [`BucketWalk`], step by step as its
    /// documentation says, over the table's memory: a lookup's found and
    /// first value word.
    fn walk_lookup(w: &BucketWalk, key: &[u8], now: u64) -> (u32, u32) {
        // The key's `reach` bytes, as the packet holds them.
        let mut at = key.to_vec();
        at.resize(w.reach as usize, 0xee);
        let le = |b: &[u8], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let words = |b: &[u8]| (le(b, 0) & w.a_mask, (le(b, w.b_off as usize) >> w.b_shift) & w.a_mask);
        let (a, b) = words(&at);
        let h = fold(fold(a ^ w.seed[0], b ^ w.seed[1]) ^ BucketWalk::MIX[0], BucketWalk::MIX[1]);
        let b1 = ((h & 0xffff_ffff) * w.nbuckets) >> 32;
        let tag = (h >> 48).max(1);
        let t = (u64::from((tag as u32).wrapping_mul(BucketWalk::ALT)) * w.nbuckets) >> 32;
        let b2 = if t >= b1 { t - b1 } else { t + w.nbuckets - b1 };
        for bk in [b1, b2] {
            for i in 0..8 {
                // SAFETY: the walk of a live table: `nbuckets` groups of 8 tags,
                // `8 * nbuckets` entries of `stride` bytes.
                let (t, e) = unsafe {
                    let s = (bk * 8 + i) as usize;
                    (*w.tags.add(s), std::slice::from_raw_parts(w.entries.add(s * w.stride as usize), w.stride as usize))
                };
                if u64::from(t) != tag || words(e) != (a, b) {
                    continue;
                }
                let ts = le(e, w.ts_off as usize);
                if w.idle_ns != u64::MAX && now.saturating_sub(ts) > w.idle_ns {
                    return (0, 0);
                }
                let k = w.key_size as usize;
                return (1, u32::from_be_bytes(e[k..k + 4].try_into().unwrap()) & w.value_mask);
            }
        }
        (0, 0)
    }

    /// The walk a table describes finds what `lookup_live` finds, for every
    /// key size it covers (4 to 16 bytes) and value size (0 to 4), with and
    /// without aging; other sizes have none.
    #[test]
    fn bucket_walk_agrees_with_lookup_live() {
        let mut r = SplitMix64::new(0x7761_6c6b);
        for ks in 1..=MAX_KEY {
            for vs in [0, 1, 2, 3, 4, 5, 16] {
                let mut t = ExactTable::new(ks, vs, 2000).unwrap();
                t.set_aging(if ks % 2 == 0 { Some(100) } else { None });
                let keys: Vec<Vec<u8>> = (0..1500).map(|_| key(ks, &mut r)).collect();
                for (i, k) in keys.iter().enumerate() {
                    let v: Vec<u8> = (0..vs).map(|j| (i * 7 + j * 13) as u8 | 1).collect();
                    let _ = t.insert(k, &v, (i % 300) as u64);
                }
                let Some(w) = t.bucket_walk() else {
                    assert!(ks < 4 || vs > 4, "key {ks}, value {vs}: no walk");
                    continue;
                };
                assert!((4..=16).contains(&ks) && vs <= 4, "key {ks}, value {vs}: a walk");
                for k in keys.iter().chain(&(0..300).map(|_| key(ks, &mut r)).collect::<Vec<_>>()) {
                    for now in [0, 150, 250, 450] {
                        let want = t.lookup_live(k, now).map_or((0, 0), |v| {
                            let mut b = [0u8; 4];
                            b[..vs.min(4)].copy_from_slice(&v[..vs.min(4)]);
                            (1, u32::from_be_bytes(b))
                        });
                        assert_eq!(walk_lookup(&w, k, now), want, "key {ks}, value {vs}, now {now}, key {k:02x?}");
                    }
                }
            }
        }
    }

    #[test]
    fn copy_short_copies_every_length() {
        for n in 0..=16 {
            let src: Vec<u8> = (1..=n as u8).collect();
            let mut dst = vec![0u8; n];
            copy_short(&mut dst, &src);
            assert_eq!(dst, src, "{n} bytes");
        }
    }

    /// Filling to exactly `capacity` never fails, for many sizes and seeds;
    /// one more new key does.
    #[test]
    fn fills_to_capacity() {
        let mut r = SplitMix64::new(7);
        let caps: Vec<usize> = (1..=64).chain([100, 255, 256, 257, 1000, 4096, 10_000, 65_536]).collect();
        for &cap in &caps {
            for seed in 0..if cap < 2000 { 20 } else { 3 } {
                for ks in [2, 4, 6, 13] {
                    if ks == 2 && cap > 10_000 {
                        continue; // 2-byte keys cannot fill it with a key to spare
                    }
                    let mut t = ExactTable::with_seed(ks, 2, cap, seed).unwrap();
                    let mut n = 0;
                    while t.len() < cap {
                        let k = key(ks, &mut r);
                        if t.lookup(&k).is_none() {
                            t.insert(&k, &[1, 2], 5).unwrap_or_else(|_| panic!("cap {cap} seed {seed} ks {ks}: full at {n}"));
                            n += 1;
                        }
                    }
                    let k = loop {
                        let k = key(ks, &mut r);
                        if t.lookup(&k).is_none() {
                            break k;
                        }
                    };
                    assert_eq!(t.insert(&k, &[0, 0], 5), Err(TableFull));
                    assert!(t.slot_fill() <= 0.9 + 1e-9 || cap < 300, "cap {cap}: fill {}", t.slot_fill());
                    t.check_invariants();
                }
            }
        }
    }

    /// A table starts with [`INITIAL_BUCKETS`] buckets and doubles when a
    /// new key would fill more than half of its slots, up to its full
    /// layout; every entry keeps its value and timestamp across each
    /// doubling, memory at capacity does not change, and the same seed and
    /// inserts give the same slots.
    #[test]
    fn grows_to_its_full_layout_keeping_every_entry() {
        let cap = 20_000;
        let mut r = SplitMix64::new(11);
        let mut t = ExactTable::with_seed(6, 4, cap, 3).unwrap();
        let mut twin = ExactTable::with_seed(6, 4, cap, 3).unwrap();
        let at_capacity = t.memory_at_capacity();
        assert_eq!(t.buckets(), INITIAL_BUCKETS);
        let mut model: std::collections::HashMap<Vec<u8>, ([u8; 4], u64)> = std::collections::HashMap::new();
        let mut sizes = vec![t.buckets()];
        while model.len() < cap {
            let k = key(6, &mut r);
            let v = (model.len() as u32).to_be_bytes();
            let ts = 1000 + model.len() as u64;
            t.insert(&k, &v, ts).unwrap();
            twin.insert(&k, &v, ts).unwrap();
            model.insert(k, (v, ts));
            if *sizes.last().unwrap() != t.buckets() {
                sizes.push(t.buckets());
                // Half of the slots at most, right after a doubling.
                assert!(2 * t.len() <= t.buckets() * SLOTS + 2 * SLOTS, "{} entries in {} buckets", t.len(), t.buckets());
                t.check_invariants();
            }
            // Every few hundred keys: everything stored is still there.
            if model.len().is_multiple_of(997) {
                for (k, (v, ts)) in &model {
                    let e = t.get(k).unwrap_or_else(|| panic!("lost a key at {} entries", model.len()));
                    assert_eq!((e.value, e.timestamp), (&v[..], *ts));
                }
            }
        }
        let full = (cap + cap / 9 + 32).div_ceil(SLOTS);
        assert_eq!(*sizes.last().unwrap(), full, "doublings {sizes:?}");
        assert!(sizes.windows(2).all(|w| w[1] == (2 * w[0]).min(full)), "doublings {sizes:?}");
        assert_eq!(t.memory_at_capacity(), at_capacity);
        assert_eq!(t.memory_bytes(), at_capacity);
        assert_eq!(t.insert(&key(6, &mut r), &[0; 4], 0), Err(TableFull));
        let slots = |t: &ExactTable| t.iter_slots().map(|(s, e)| (s, e.key.to_vec())).collect::<Vec<_>>();
        assert_eq!(slots(&t), slots(&twin));
        t.check_invariants();
    }

    /// `reserve` grows once, to half load for the entries asked for (no
    /// further than the full layout); a table of a fixed layout never grows.
    #[test]
    fn reserve_grows_at_once_and_fixed_layouts_do_not_grow() {
        let mut t = ExactTable::with_seed(4, 0, 100_000, 1).unwrap();
        t.reserve(10_000);
        assert_eq!(t.buckets(), 2 * 10_000 / SLOTS);
        let mut r = SplitMix64::new(5);
        for _ in 0..10_000 {
            t.insert(&key(4, &mut r), &[], 0).unwrap();
        }
        assert_eq!(t.buckets(), 2 * 10_000 / SLOTS, "no doubling up to the reserved entries");
        t.reserve(usize::MAX);
        assert_eq!(t.buckets(), (100_000usize + 100_000 / 9 + 32).div_ceil(SLOTS));
        assert_eq!(t.len(), 10_000);
        let mut small = ExactTable::with_seed(4, 0, 10, 1).unwrap();
        assert_eq!(small.buckets(), (10usize + 1 + 32).div_ceil(SLOTS), "a small table starts at its full layout");
        small.reserve(1000);
        assert_eq!(small.buckets(), 6);
        let mut fixed = ExactTable::with_layout(8, 0, 100, 4, 0).unwrap();
        for _ in 0..30 {
            fixed.insert(&key(8, &mut r), &[], 0).unwrap();
        }
        fixed.reserve(100);
        assert_eq!(fixed.buckets(), 4);
    }

    /// Without the capacity limit, the cuckoo search fills ≥ 97% of the slots
    /// before its first failure (about 99.7% in practice), the margin behind
    /// the 90% layout.
    #[test]
    fn raw_fill_before_first_failure() {
        for seed in 0..4 {
            let mut t = ExactTable::with_layout(8, 0, usize::MAX, 4096, seed).unwrap();
            let mut r = SplitMix64::new(seed + 100);
            while t.insert(&key(8, &mut r), &[], 0).is_ok() {}
            t.check_invariants();
            assert!(t.slot_fill() >= 0.97, "seed {seed}: first failure at fill {}", t.slot_fill());
        }
    }

    #[test]
    fn one_byte_keys_fill_and_keys_differing_in_one_byte() {
        let mut t = ExactTable::new(1, 1, 256).unwrap();
        for k in 0..=255u8 {
            t.insert(&[k], &[k ^ 0xff], u64::from(k)).unwrap();
        }
        for k in 0..=255u8 {
            assert_eq!(t.lookup(&[k]), Some(&[k ^ 0xff][..]));
        }
        for ks in [3, 4, 6, 8, 9, 16] {
            let mut t = ExactTable::new(ks, 4, 4096).unwrap();
            let base = vec![0x5au8; ks];
            for pos in 0..ks {
                for v in 0..=255u8 {
                    let mut k = base.clone();
                    k[pos] = v;
                    t.insert(&k, &(pos as u32 * 256 + u32::from(v)).to_be_bytes(), 0).unwrap();
                }
            }
            assert_eq!(t.len(), ks * 255 + 1);
            for pos in 0..ks {
                for v in 0..=255u8 {
                    let mut k = base.clone();
                    k[pos] = v;
                    let want = if v == 0x5a { (ks as u32 - 1) * 256 + 0x5a } else { pos as u32 * 256 + u32::from(v) };
                    assert_eq!(t.lookup(&k), Some(&want.to_be_bytes()[..]), "ks {ks} pos {pos} v {v}");
                }
            }
        }
    }

    #[test]
    fn bulk_matches_single() {
        let mut t = ExactTable::new(6, 4, 1000).unwrap();
        let mut r = SplitMix64::new(3);
        let keys: Vec<Vec<u8>> = (0..2000).map(|_| key(6, &mut r)).collect();
        for (i, k) in keys.iter().enumerate().step_by(2) {
            t.insert(k, &(i as u32).to_be_bytes(), i as u64).unwrap();
        }
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let mut out = vec![None; refs.len()];
        assert_eq!(t.lookup_bulk(&refs, &mut out), 1000);
        for (k, o) in refs.iter().zip(&out) {
            assert_eq!(*o, t.lookup(k));
        }
        let flat: Vec<u8> = keys.concat();
        let mut out2 = vec![None; refs.len()];
        assert_eq!(t.lookup_bulk_flat(&flat, &mut out2), 1000);
        assert_eq!(out, out2);
        t.set_aging(Some(999));
        let mut out3 = vec![None; refs.len()];
        assert_eq!(t.lookup_bulk_live(&refs, 1999, &mut out3), 500);
        for (k, o) in refs.iter().zip(&out3) {
            assert_eq!(*o, t.lookup_live(k, 1999));
        }
    }

    #[test]
    fn aging_reuses_idle_slots_and_static_entries_stay() {
        let mut t = ExactTable::with_seed(4, 0, 4, 1).unwrap();
        t.set_aging(Some(10));
        for k in 0..4u32 {
            t.insert(&k.to_be_bytes(), &[], 0).unwrap();
        }
        assert_eq!(t.insert(&9u32.to_be_bytes(), &[], 5), Err(TableFull));
        assert!(t.lookup_live(&0u32.to_be_bytes(), 10).is_some());
        assert!(t.lookup_live(&0u32.to_be_bytes(), 11).is_none());
        assert!(t.lookup(&0u32.to_be_bytes()).is_some());
        // Full of idle entries: a new key takes an idle slot of its buckets, if any.
        let mut fresh = 0;
        for k in 100..200u32 {
            if t.insert(&k.to_be_bytes(), &[], 20).is_ok() {
                fresh += 1;
            }
        }
        assert!(fresh >= 1 && t.len() == 4, "fresh {fresh} len {}", t.len());
        assert_eq!(t.aged_out(), fresh);
        t.clear();
        t.insert_static(&1u32.to_be_bytes(), &[]).unwrap();
        t.insert(&2u32.to_be_bytes(), &[], 100).unwrap();
        assert_eq!(t.age(u64::MAX, 0), 1);
        assert!(t.lookup_live(&1u32.to_be_bytes(), u64::MAX).is_some());
        assert_eq!(t.get(&1u32.to_be_bytes()).unwrap().timestamp, STATIC);
        t.insert(&1u32.to_be_bytes(), &[], u64::MAX).unwrap();
        assert_eq!(t.get(&1u32.to_be_bytes()).unwrap().timestamp, STATIC - 1, "a data-plane insert is never static");
    }

    #[test]
    fn bad_sizes_are_errors() {
        assert!(ExactTable::new(0, 4, 10).is_err());
        assert!(ExactTable::new(17, 4, 10).is_err());
        assert!(ExactTable::new(4, 17, 10).is_err());
        assert!(ExactTable::new(4, 4, 0).is_err());
        assert!(ExactTable::new(4, 4, MAX_CAPACITY + 1).is_err());
    }

    impl ExactTable {
        fn slot_fill(&self) -> f64 {
            self.len as f64 / (self.nbuckets * SLOTS) as f64
        }

        /// Every entry is in one of its key's buckets under its tag, once.
        fn check_invariants(&self) {
            let mut n = 0;
            let mut seen = std::collections::HashSet::new();
            for s in 0..self.nbuckets * SLOTS {
                let tag = self.tag_at(s);
                if tag == 0 {
                    continue;
                }
                n += 1;
                let k = self.key_at(s);
                let p = self.probe(k);
                assert_eq!(p.tag, tag);
                assert!(s / SLOTS == p.b1 || s / SLOTS == p.b2);
                assert!(seen.insert(k.to_vec()), "duplicate key");
            }
            assert_eq!(n, self.len);
            assert!(self.len <= self.capacity);
        }
    }

    /// Filling a table of `TABLE_BENCH_N` (default 1M) 6-byte keys with
    /// 4-byte values one insert at a time, grown as it fills and reserved
    /// at creation: the total time, and the longest insert (the last
    /// doubling's rehash): `cargo test --release -p netvm-copro -- --ignored
    /// --nocapture growth_pause`.
    #[test]
    #[ignore]
    fn growth_pause() {
        use std::time::{Duration, Instant};
        let n: usize = std::env::var("TABLE_BENCH_N").ok().and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
        let mut r = SplitMix64::new(9);
        let keys: Vec<Vec<u8>> = (0..n).map(|_| key(6, &mut r)).collect();
        for round in 0..3 {
            for reserved in [false, true] {
                let t0 = Instant::now();
                let mut t = ExactTable::with_seed(6, 4, n, 42).unwrap();
                if reserved {
                    t.reserve(n);
                }
                let mut longest = Duration::ZERO;
                for (i, k) in keys.iter().enumerate() {
                    let t1 = Instant::now();
                    t.insert(k, &(i as u32).to_le_bytes(), 0).unwrap();
                    longest = longest.max(t1.elapsed());
                }
                let how = if reserved { "reserved" } else { "grown" };
                eprintln!(
                    "round {round}, {how}: {n} entries in {:?}, longest insert {longest:?}, {} MiB",
                    t0.elapsed(),
                    t.memory_bytes() >> 20
                );
            }
        }
    }

    /// ns/lookup one at a time vs in bulk, random hits over `TABLE_BENCH_N`
    /// (default 1M) entries: `cargo test --release -p netvm-copro -- --ignored
    /// --nocapture lookup_speed`.
    #[test]
    #[ignore]
    fn lookup_speed() {
        use std::hint::black_box;
        use std::time::Instant;
        let n: usize = std::env::var("TABLE_BENCH_N").ok().and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
        let t0 = Instant::now();
        let mut t = ExactTable::with_seed(6, 4, n, 42).unwrap();
        let mut r = SplitMix64::new(9);
        let keys: Vec<Vec<u8>> = (0..n).map(|_| key(6, &mut r)).collect();
        for (i, k) in keys.iter().enumerate() {
            t.insert(k, &(i as u32).to_le_bytes(), 0).unwrap();
        }
        eprintln!("{n} entries, {} MiB, filled in {:?}", t.memory_bytes() >> 20, t0.elapsed());
        let m = 4 << 20;
        // The keys to look up lie back to back, as they would in packets.
        let flat: Vec<u8> = (0..m).flat_map(|_| keys[r.below(n as u64) as usize].clone()).collect();
        let order: Vec<&[u8]> = flat.chunks(6).collect();
        for round in 0..2 {
            let t1 = Instant::now();
            let mut sum = 0u64;
            for k in &order {
                sum += u64::from(black_box(&t).lookup(k).map_or(0, |v| v[0]));
            }
            let one = t1.elapsed().as_nanos() as f64 / m as f64;
            let t2 = Instant::now();
            let mut out = [None; 32];
            let mut hits = 0;
            for c in order.chunks(32) {
                hits += black_box(&t).lookup_bulk(c, &mut out[..c.len()]);
                sum += u64::from(out[0].map_or(0, |v| v[0]));
            }
            let bulk = t2.elapsed().as_nanos() as f64 / m as f64;
            assert_eq!(hits, m);
            eprintln!("round {round}: one-at-a-time {one:.1} ns/lookup, bulk(32) {bulk:.1} ns/lookup ({sum})");
        }
        let misses: Vec<u8> = (0..m).flat_map(|_| key(6, &mut r)).collect();
        let t3 = Instant::now();
        let found = misses.chunks(6).filter(|k| black_box(&t).lookup(k).is_some()).count();
        let miss = t3.elapsed().as_nanos() as f64 / m as f64;
        eprintln!("misses: one-at-a-time {miss:.1} ns/lookup ({found} found)");
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u8, u8),
        InsertStatic(u8, u8),
        Delete(u8),
        DeleteLive(u8),
        Lookup(u8),
        Age(u64),
        Advance(u64),
        Bulk(Vec<u8>),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (any::<u8>(), any::<u8>()).prop_map(|(k, v)| Op::Insert(k, v)),
            1 => (any::<u8>(), any::<u8>()).prop_map(|(k, v)| Op::InsertStatic(k, v)),
            2 => any::<u8>().prop_map(Op::Delete),
            1 => any::<u8>().prop_map(Op::DeleteLive),
            4 => any::<u8>().prop_map(Op::Lookup),
            1 => (0u64..40).prop_map(Op::Age),
            2 => (0u64..10).prop_map(Op::Advance),
            1 => proptest::collection::vec(any::<u8>(), 0..70).prop_map(Op::Bulk),
        ]
    }

    /// Key number `i` of a pool whose keys often differ in a single byte.
    fn pool_key(ks: usize, i: u8) -> Vec<u8> {
        let mut k = vec![0xa5u8; ks];
        let pos = usize::from(i) % ks;
        k[pos] = i;
        if i >= 128 {
            k[ks - 1 - pos] ^= 0x11;
        }
        k
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Random operation sequences against a `HashMap` model, with tables
        /// small enough to run full.
        #[test]
        fn matches_hashmap_model(
            ks in 1usize..=16,
            vs in 0usize..=16,
            cap in 1usize..80,
            aging in proptest::option::of(0u64..20),
            seed in any::<u64>(),
            ops in proptest::collection::vec(op(), 1..300),
        ) {
            let mut t = ExactTable::with_seed(ks, vs, cap, seed).unwrap();
            t.set_aging(aging);
            let idle = aging.unwrap_or(u64::MAX);
            let mut model: HashMap<Vec<u8>, (Vec<u8>, u64)> = HashMap::new();
            let mut now = 0u64;
            let val = |v: u8| (0..vs).map(|i| v.wrapping_add(i as u8)).collect::<Vec<u8>>();
            let live = |ts: u64, now: u64| now.saturating_sub(ts) <= idle;
            for op in ops {
                match op {
                    Op::Insert(k, v) | Op::InsertStatic(k, v) => {
                        let stat = matches!(op, Op::InsertStatic(..));
                        let key = pool_key(ks, k);
                        let ts = if stat { STATIC } else { now };
                        let r = if stat { t.insert_static(&key, &val(v)) } else { t.insert(&key, &val(v), now) };
                        let stored = model.len();
                        let any_idle = model.values().any(|&(_, ts)| !live(ts, now));
                        if model.contains_key(&key) || stored < cap {
                            // Static inserts do not reclaim (now 0); the rest may only fail when idle entries fill the table.
                            prop_assert!(r.is_ok(), "insert failed with {stored} of {cap}");
                        } else if !any_idle || stat {
                            prop_assert!(r.is_err());
                        }
                        if r.is_ok() {
                            if !model.contains_key(&key) && t.len() == stored {
                                // An idle entry of the key's buckets made room: exactly one idle entry went.
                                let gone: Vec<Vec<u8>> = model.keys().filter(|mk| t.lookup(mk).is_none()).cloned().collect();
                                prop_assert_eq!(gone.len(), 1);
                                prop_assert!(!live(model[&gone[0]].1, now));
                                model.remove(&gone[0]);
                            }
                            model.insert(key, (val(v), ts));
                        }
                    }
                    Op::Delete(k) => {
                        let key = pool_key(ks, k);
                        prop_assert_eq!(t.delete(&key), model.remove(&key).is_some());
                    }
                    Op::DeleteLive(k) => {
                        let key = pool_key(ks, k);
                        let want = model.remove(&key).is_some_and(|(_, ts)| live(ts, now));
                        prop_assert_eq!(t.delete_live(&key, now), want);
                    }
                    Op::Lookup(k) => {
                        let key = pool_key(ks, k);
                        let m = model.get(&key);
                        prop_assert_eq!(t.lookup(&key), m.map(|(v, _)| v.as_slice()));
                        prop_assert_eq!(t.lookup_live(&key, now), m.filter(|(_, ts)| live(*ts, now)).map(|(v, _)| v.as_slice()));
                    }
                    Op::Age(i) => {
                        let before = model.len();
                        model.retain(|_, (_, ts)| now.saturating_sub(*ts) <= i);
                        prop_assert_eq!(t.age(now, i), before - model.len());
                    }
                    Op::Advance(d) => now += d,
                    Op::Bulk(ids) => {
                        let keys: Vec<Vec<u8>> = ids.iter().map(|&i| pool_key(ks, i)).collect();
                        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                        let mut out = vec![None; refs.len()];
                        t.lookup_bulk_live(&refs, now, &mut out);
                        for (k, o) in keys.iter().zip(out) {
                            prop_assert_eq!(o, model.get(k).filter(|(_, ts)| live(*ts, now)).map(|(v, _)| v.as_slice()));
                        }
                    }
                }
                prop_assert_eq!(t.len(), model.len());
            }
            t.check_invariants();
            let mut got: Vec<(Vec<u8>, Vec<u8>, u64)> = t.iter().map(|e| (e.key.to_vec(), e.value.to_vec(), e.timestamp)).collect();
            let mut want: Vec<(Vec<u8>, Vec<u8>, u64)> = model.into_iter().map(|(k, (v, ts))| (k, v, ts)).collect();
            got.sort();
            want.sort();
            prop_assert_eq!(got, want);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]

        /// Inserts, replaces, deletes and lookups over a pool of 3,000 keys
        /// against a `HashMap`, in a table of capacity 4,000 that starts at
        /// 1,024 slots: it doubles (and, after deletes, refills) on the way,
        /// and nothing stored is lost or duplicated.
        #[test]
        fn matches_hashmap_model_while_growing(
            seed in any::<u64>(),
            ops in proptest::collection::vec((0u8..8, 0u16..3000, any::<u16>()), 1000..5000),
        ) {
            let mut t = ExactTable::with_seed(6, 2, 4000, seed).unwrap();
            let mut model: HashMap<[u8; 6], [u8; 2]> = HashMap::new();
            let key = |k: u16| {
                let b = k.to_le_bytes();
                [b[0], b[1], b[0] ^ 0x5a, 3, 1, b[1] ^ 0xa5]
            };
            let mut most = 0;
            for (i, (kind, k, v)) in ops.into_iter().enumerate() {
                let (key, v) = (key(k), v.to_be_bytes());
                match kind {
                    0..=4 => {
                        prop_assert!(t.insert(&key, &v, i as u64).is_ok());
                        model.insert(key, v);
                    }
                    5 => prop_assert_eq!(t.delete(&key), model.remove(&key).is_some()),
                    _ => prop_assert_eq!(t.lookup(&key), model.get(&key).map(|v| &v[..])),
                }
                most = most.max(model.len());
                prop_assert_eq!(t.len(), model.len());
            }
            for (k, v) in &model {
                prop_assert_eq!(t.lookup(k), Some(&v[..]));
            }
            t.check_invariants();
            if most > 600 {
                prop_assert!(t.buckets() > INITIAL_BUCKETS, "{most} entries at most, {} buckets", t.buckets());
            }
        }
    }
}
