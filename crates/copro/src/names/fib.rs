//! [`NameFib`]: longest-prefix match of hierarchical names by hashed
//! components, and the NDN TLV reading it needs.
//!
//! Every stored prefix of `k` components is one entry of an
//! [`ExactTable`], keyed by `(h_k, k, its encoded length)` where `h_k`
//! chains a seeded hash over the first `k` components (type, length and
//! value, whatever TLV-LENGTH encoding the packet used). A lookup reads the
//! name once, computing `h_1 .. h_d` for `d` = the most components of any
//! stored prefix, then probes from the longest candidate down, skipping
//! lengths no prefix has, and verifies a hit against the prefix's bytes
//! kept in an arena: hash collisions cannot produce a wrong match.

use std::fmt;

use netvm_vm::hash::fold;

use crate::table::{key_words, ExactTable};

/// The most components of a stored prefix.
pub const MAX_COMPONENTS: usize = 64;
/// The most prefixes of one table (as `table`'s capacity).
pub const MAX_CAPACITY: usize = 1 << 25;

/// NDN TLV types this module reads.
const TLV_INTEREST: u64 = 0x05;
const TLV_DATA: u64 = 0x06;
const TLV_NAME: u64 = 0x07;
/// Name component types are 1 ..= 65535 (NDN packet format v0.3 §2.1).
const MAX_COMPONENT_TYPE: u64 = 0xffff;

/// Key and value sizes of the entries.
const KEY: usize = 16;
const VALUE: usize = 8;

/// A name component: its TLV-TYPE and its value.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Component {
    /// TLV-TYPE, 1 ..= 65535 (8: a generic name component).
    pub typ: u16,
    /// TLV-VALUE.
    pub value: Vec<u8>,
}

/// What a lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameMatch {
    /// The longest stored prefix of the name: its next hop and its number of components.
    Found {
        /// The prefix's next hop.
        next_hop: u32,
        /// Its number of components (0: the root prefix `/`).
        components: u32,
    },
    /// No stored prefix covers the name.
    Missing,
    /// No well-formed name at the offset.
    Malformed,
}

/// One answer of [`NameFib::lookup_bulk`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkAnswer {
    /// What [`NameFib::lookup`] answers.
    pub answer: NameMatch,
    /// The end of the packet bytes the answer depends on, from the offset
    /// looked up (the name's last byte + 1); 0 for a malformed name.
    pub end: usize,
    /// The hash-table probes it took.
    pub probes: u32,
}

impl Default for BulkAnswer {
    fn default() -> BulkAnswer {
        BulkAnswer { answer: NameMatch::Missing, end: 0, probes: 0 }
    }
}

/// Why an insert failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FibError {
    /// The table holds `capacity` prefixes.
    Full,
    /// More than [`MAX_COMPONENTS`] components.
    TooDeep(usize),
    /// The prefix bytes would pass 4 GiB.
    ArenaFull,
    /// Another prefix has the same hash key (practically never: 2^-64 per pair).
    Collision,
}

impl fmt::Display for FibError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FibError::Full => write!(f, "the table is full; raise `capacity`"),
            FibError::TooDeep(n) => write!(f, "{n} components, more than {MAX_COMPONENTS}"),
            FibError::ArenaFull => write!(f, "the prefixes' bytes pass 4 GiB"),
            FibError::Collision => write!(f, "another prefix has the same hash; it cannot be stored with this seed"),
        }
    }
}

impl std::error::Error for FibError {}

/// The name forwarding table (see the module documentation).
#[derive(Clone)]
pub struct NameFib {
    table: ExactTable,
    /// Each prefix's components, NDN TLV encoded with minimal lengths, back to back.
    arena: Vec<u8>,
    /// The next hop of the root prefix `/`.
    root: Option<u32>,
    /// Prefixes per number of components.
    per_depth: [u32; MAX_COMPONENTS + 1],
    /// The most components of a stored prefix (0 when none).
    depth: usize,
    seed: u64,
}

impl fmt::Debug for NameFib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NameFib").field("prefixes", &self.len()).field("depth", &self.depth).finish()
    }
}

/// `h` chained with one component.
#[inline]
fn chain(h: u64, typ: u64, value: &[u8]) -> u64 {
    let n = value.len();
    let mut h = fold(h ^ typ ^ 0x243f_6a88_85a3_08d3, (n as u64) ^ 0x1319_8a2e_0370_7344);
    let mut words = value.chunks_exact(8);
    for w in &mut words {
        h = fold(h ^ u64::from_le_bytes(w.try_into().expect("8 bytes")), 0xa409_3822_299f_31d0);
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        h = fold(h ^ tail_word(value, tail.len()), 0x082e_fa98_ec4e_6c89);
    }
    h
}

/// The last `t` (1 to 7) bytes of `v` as one word, read without a copy:
/// overlapping the word before when there is one (the length is hashed
/// separately, so the overlap loses nothing), else the table's two-word
/// reading of a short key folded into one.
#[inline(always)]
fn tail_word(v: &[u8], t: usize) -> u64 {
    debug_assert!((1..8).contains(&t));
    let (first, last) = key_words(v);
    if v.len() >= 8 {
        last
    } else {
        first | last << 32
    }
}

/// Bytes of `v` as a TLV-TYPE or TLV-LENGTH with the shortest encoding.
fn varnum_size(v: u64) -> u32 {
    match v {
        0..=252 => 1,
        253..=0xffff => 3,
        0x1_0000..=0xffff_ffff => 5,
        _ => 9,
    }
}

fn put_varnum(out: &mut Vec<u8>, v: u64) {
    match v {
        0..=252 => out.push(v as u8),
        253..=0xffff => {
            out.push(253);
            out.extend_from_slice(&(v as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(254);
            out.extend_from_slice(&(v as u32).to_be_bytes());
        }
        _ => {
            out.push(255);
            out.extend_from_slice(&v.to_be_bytes());
        }
    }
}

/// A TLV-TYPE or TLV-LENGTH at `*at`, not reading at or past `end`.
fn varnum(b: &[u8], at: &mut usize, end: usize) -> Option<u64> {
    let first = *b.get(*at).filter(|_| *at < end)?;
    let size = match first {
        0..=252 => {
            *at += 1;
            return Some(u64::from(first));
        }
        253 => 2,
        254 => 4,
        255 => 8,
    };
    let start = *at + 1;
    let bytes = b.get(start..start.checked_add(size)?).filter(|_| start + size <= end)?;
    *at = start + size;
    Some(bytes.iter().fold(0u64, |v, &x| v << 8 | u64::from(x)))
}

/// A TLV at `*at` within `end`: its type and the range of its value, which
/// must end by `end`.
fn tlv(b: &[u8], at: &mut usize, end: usize) -> Option<(u64, usize, usize)> {
    let typ = varnum(b, at, end)?;
    let len = varnum(b, at, end)?;
    let start = *at;
    let stop = start.checked_add(usize::try_from(len).ok()?).filter(|&s| s <= end)?;
    *at = stop;
    Some((typ, start, stop))
}

/// The value range of the Name TLV at `off` in `packet`, or of the Name
/// that begins the Interest or Data TLV there.
fn name_at(packet: &[u8], off: usize) -> Option<(usize, usize)> {
    let mut at = off;
    let typ = varnum(packet, &mut at, packet.len())?;
    let len = varnum(packet, &mut at, packet.len())?;
    let end = at.saturating_add(usize::try_from(len).unwrap_or(usize::MAX)).min(packet.len());
    match typ {
        TLV_NAME if usize::try_from(len).ok().and_then(|l| at.checked_add(l)).is_some_and(|e| e <= packet.len()) => Some((at, end)),
        TLV_INTEREST | TLV_DATA => {
            // A packet cut short by the capture still has its name, if the name fits.
            let (typ, start, stop) = tlv(packet, &mut at, end)?;
            (typ == TLV_NAME).then_some((start, stop))
        }
        _ => None,
    }
}

/// The components of the name value `b[start..end]`: `f(type, value)` for
/// each; `None` if one is malformed.
fn components<'a>(b: &'a [u8], start: usize, end: usize, mut f: impl FnMut(u64, &'a [u8])) -> Option<()> {
    let mut at = start;
    while at < end {
        let (typ, s, e) = tlv(b, &mut at, end)?;
        if typ == 0 || typ > MAX_COMPONENT_TYPE {
            return None;
        }
        f(typ, &b[s..e]);
    }
    Some(())
}

impl NameFib {
    /// An empty table for at most `capacity` prefixes (the root prefix aside), with a random hash seed.
    pub fn new(capacity: usize) -> Result<NameFib, String> {
        use std::hash::{BuildHasher, RandomState};
        let s = RandomState::new();
        NameFib::with_seed(capacity, s.hash_one(0x6e61_6d65_u64))
    }

    /// As [`NameFib::new`], with a fixed hash seed (reproducible benchmarks).
    pub fn with_seed(capacity: usize, seed: u64) -> Result<NameFib, String> {
        if !(1..=MAX_CAPACITY).contains(&capacity) {
            return Err(format!("capacity {capacity} out of range (1..={MAX_CAPACITY})"));
        }
        Ok(NameFib {
            table: ExactTable::with_seed(KEY, VALUE, capacity, seed ^ 0x5bd1_e995)?,
            arena: Vec::new(),
            root: None,
            per_depth: [0; MAX_COMPONENTS + 1],
            depth: 0,
            seed,
        })
    }

    /// Stored prefixes, the root prefix included.
    pub fn len(&self) -> usize {
        self.table.len() + usize::from(self.root.is_some())
    }

    /// Whether no prefix is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most prefixes (the root prefix aside).
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// The most components of a stored prefix.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Bytes of memory the table holds.
    pub fn memory_bytes(&self) -> usize {
        self.table.memory_bytes() + self.arena.capacity()
    }

    /// Bytes of memory the table holds once its index has grown to its
    /// capacity (the prefixes' names as now).
    pub fn memory_at_capacity(&self) -> usize {
        self.table.memory_at_capacity() + self.arena.capacity()
    }

    /// The entry key of a prefix: its hash, then its number of components
    /// (a byte) and its encoded length (four bytes), little-endian; written
    /// as two words, which the table's hash reads back as two words.
    #[inline(always)]
    fn key(hash: u64, components: usize, len: u32) -> [u8; KEY] {
        let mut k = [0u8; KEY];
        k[..8].copy_from_slice(&hash.to_le_bytes());
        k[8..].copy_from_slice(&((components as u64) | u64::from(len) << 8).to_le_bytes());
        k
    }

    /// Adds `prefix` with `next_hop`, or replaces the next hop of the same prefix.
    pub fn insert(&mut self, prefix: &[Component], next_hop: u32) -> Result<(), FibError> {
        if prefix.is_empty() {
            self.root = Some(next_hop);
            return Ok(());
        }
        if prefix.len() > MAX_COMPONENTS {
            return Err(FibError::TooDeep(prefix.len()));
        }
        let mut enc = Vec::new();
        let mut h = self.seed;
        for c in prefix {
            put_varnum(&mut enc, u64::from(c.typ));
            put_varnum(&mut enc, c.value.len() as u64);
            enc.extend_from_slice(&c.value);
            h = chain(h, u64::from(c.typ), &c.value);
        }
        let len = u32::try_from(enc.len()).map_err(|_| FibError::ArenaFull)?;
        let key = NameFib::key(h, prefix.len(), len);
        let mut value = [0u8; VALUE];
        value[..4].copy_from_slice(&next_hop.to_le_bytes());
        if let Some(e) = self.table.get(&key) {
            let at = u32::from_le_bytes(e.value[4..8].try_into().expect("4 bytes")) as usize;
            if self.arena[at..at + enc.len()] != enc[..] {
                return Err(FibError::Collision);
            }
            value[4..].copy_from_slice(&e.value[4..8]);
            self.table.insert_static(&key, &value).map_err(|_| FibError::Full)?;
            return Ok(());
        }
        let at = u32::try_from(self.arena.len()).ok().filter(|a| a.checked_add(len).is_some()).ok_or(FibError::ArenaFull)?;
        value[4..].copy_from_slice(&at.to_le_bytes());
        self.table.insert_static(&key, &value).map_err(|_| FibError::Full)?;
        if self.arena.capacity() - self.arena.len() < enc.len() {
            // Grown by hand to back it with huge pages: a hit compares the
            // prefix's bytes here, a random place in a large arena.
            let mut grown = Vec::with_capacity((self.arena.capacity() * 2).max(self.arena.len() + enc.len()).max(4096));
            crate::huge::advise_huge(grown.as_ptr(), grown.capacity());
            grown.extend_from_slice(&self.arena);
            self.arena = grown;
        }
        self.arena.extend_from_slice(&enc);
        self.per_depth[prefix.len()] += 1;
        self.depth = self.depth.max(prefix.len());
        Ok(())
    }

    /// Removes every prefix.
    pub fn clear(&mut self) {
        self.table.clear();
        self.arena = Vec::new();
        self.root = None;
        self.per_depth = [0; MAX_COMPONENTS + 1];
        self.depth = 0;
    }

    /// Every stored prefix and its next hop, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (Vec<Component>, u32)> + '_ {
        let root = self.root.map(|nh| (Vec::new(), nh));
        root.into_iter().chain(self.table.iter().map(|e| {
            let len = u32::from_le_bytes(e.key[9..13].try_into().expect("4 bytes")) as usize;
            let at = u32::from_le_bytes(e.value[4..8].try_into().expect("4 bytes")) as usize;
            let mut prefix = Vec::new();
            components(&self.arena, at, at + len, |typ, v| prefix.push(Component { typ: typ as u16, value: v.to_vec() }))
                .expect("the arena holds well-formed components");
            (prefix, u32::from_le_bytes(e.value[..4].try_into().expect("4 bytes")))
        }))
    }

    /// Reads the name at `off` (see [`NameFib::lookup`]): the value range of
    /// its Name TLV and its number of components; `hash[k]` and `len[k]`
    /// get the hash chain and encoded length of its first `k` components,
    /// for `k` up to `min(n, depth)` (the slices have `depth + 1` entries).
    #[inline]
    fn read(&self, packet: &[u8], off: usize, hash: &mut [u64], len: &mut [u32]) -> Option<(usize, usize, usize)> {
        let (start, end) = name_at(packet, off)?;
        let (mut n, mut h, mut total) = (0usize, self.seed, 0u32);
        let depth = self.depth;
        components(packet, start, end, |typ, v| {
            n += 1;
            if n <= depth {
                h = chain(h, typ, v);
                total += varnum_size(typ) + varnum_size(v.len() as u64) + v.len() as u32;
                hash[n] = h;
                len[n] = total;
            }
        })?;
        Some((start, end, n))
    }

    /// Whether the first `k` components of the name value `packet[start..end]`
    /// are those of the prefix stored at `at`.
    fn same(&self, packet: &[u8], start: usize, end: usize, k: usize, at: usize, len: usize) -> bool {
        let arena = &self.arena[at..at + len];
        // The stored bytes are the shortest encoding, which packets
        // normally use too: then one comparison of the bytes decides.
        if packet.get(start..start + len).is_some_and(|b| b == arena) {
            return true;
        }
        let (mut pa, mut aa, mut seen) = (start, 0, 0);
        while seen < k {
            let (Some((pt, ps, pe)), Some((at_, as_, ae))) = (tlv(packet, &mut pa, end), tlv(arena, &mut aa, len)) else {
                return false;
            };
            if pt != at_ || packet[ps..pe] != arena[as_..ae] {
                return false;
            }
            seen += 1;
        }
        aa == len
    }

    /// The next hop and arena offset of an entry's value.
    fn entry(v: &[u8]) -> (u32, usize) {
        (u32::from_le_bytes(v[..4].try_into().expect("4 bytes")), u32::from_le_bytes(v[4..8].try_into().expect("4 bytes")) as usize)
    }

    /// The answer when no stored prefix of at least one component matched.
    fn at_root(&self) -> NameMatch {
        match self.root {
            Some(next_hop) => NameMatch::Found { next_hop, components: 0 },
            None => NameMatch::Missing,
        }
    }

    /// The longest length at most `k` that some prefix has (0: none).
    fn candidate(&self, k: usize) -> usize {
        (1..=k).rev().find(|&k| self.per_depth[k] != 0).unwrap_or(0)
    }

    /// The longest stored prefix of the name in `packet` at `off`: a Name
    /// TLV (type 7), or an Interest (5) or Data (6) TLV whose first element
    /// is its Name. `probes` counts the hash-table probes.
    pub fn lookup(&self, packet: &[u8], off: usize, probes: &mut u64) -> NameMatch {
        let mut hash = [0u64; MAX_COMPONENTS + 1];
        let mut len = [0u32; MAX_COMPONENTS + 1];
        let d = self.depth + 1;
        let Some((start, end, n)) = self.read(packet, off, &mut hash[..d], &mut len[..d]) else {
            return NameMatch::Malformed;
        };
        let mut k = self.candidate(n.min(self.depth));
        while k > 0 {
            *probes += 1;
            if let Some(v) = self.table.lookup(&NameFib::key(hash[k], k, len[k])) {
                let (next_hop, at) = NameFib::entry(v);
                if self.same(packet, start, end, k, at, len[k] as usize) {
                    return NameMatch::Found { next_hop, components: k as u32 };
                }
            }
            k = self.candidate(k - 1);
        }
        self.at_root()
    }

    /// Looks up the names at `(offset, packet)` of `names` together, with
    /// the answers [`NameFib::lookup`] gives, into `out` ([`BulkAnswer`]:
    /// the answer, and the end of the bytes it depends on). The lookups
    /// advance in rounds, the way
    /// each probes: a round hashes every unresolved name's next candidate
    /// length and looks them up in bulk ([`ExactTable::lookup_bulk`]:
    /// buckets, then entries, prefetched together), prefetching the stored
    /// bytes of the prefixes found, which are compared after the last round. The
    /// memory latencies of a group of names overlap, as DPDK's bulk
    /// lookups do; on one name it costs more than [`NameFib::lookup`].
    ///
    /// Panics if `out` is shorter than `names`.
    pub fn lookup_bulk(&self, names: &[(usize, &[u8])], out: &mut [BulkAnswer]) {
        let d = self.depth + 1;
        let mut hash = vec![0u64; GROUP * d];
        let mut len = vec![0u32; GROUP * d];
        for (group, out) in names.chunks(GROUP).zip(out.chunks_mut(GROUP)) {
            self.lookup_group(group, out, &mut hash, &mut len);
        }
    }

    fn lookup_group(&self, group: &[(usize, &[u8])], out: &mut [BulkAnswer], hash: &mut [u64], len: &mut [u32]) {
        let d = self.depth + 1;
        // Per name: its name value range, the candidate length to probe
        // next (0: none left), and a hit to compare (length, arena offset,
        // next hop; length 0: none).
        let mut range = [(0usize, 0usize); GROUP];
        let mut next = [0usize; GROUP];
        let mut hit = [(0usize, 0usize, 0u32); GROUP];
        for (i, (off, packet)) in group.iter().enumerate() {
            match self.read(packet, *off, &mut hash[i * d..(i + 1) * d], &mut len[i * d..(i + 1) * d]) {
                Some((start, end, n)) => {
                    range[i] = (start, end);
                    next[i] = self.candidate(n.min(self.depth));
                    out[i] = BulkAnswer { answer: self.at_root(), end, probes: 0 };
                }
                None => out[i] = BulkAnswer { answer: NameMatch::Malformed, end: 0, probes: 0 },
            }
        }
        let mut keys = [[0u8; KEY]; GROUP];
        let mut who = [0usize; GROUP];
        let mut found: [Option<&[u8]>; GROUP] = [None; GROUP];
        loop {
            let mut m = 0;
            for (i, &k) in next.iter().enumerate().take(group.len()).filter(|(_, k)| **k != 0) {
                keys[m] = NameFib::key(hash[i * d + k], k, len[i * d + k]);
                who[m] = i;
                m += 1;
            }
            if m == 0 {
                break;
            }
            let mut refs: [&[u8]; GROUP] = [&[]; GROUP];
            for (r, k) in refs.iter_mut().zip(&keys[..m]) {
                *r = k;
            }
            self.table.lookup_bulk(&refs[..m], &mut found[..m]);
            for (&i, f) in who[..m].iter().zip(&found[..m]) {
                let k = next[i];
                out[i].probes += 1;
                match f {
                    Some(v) => {
                        let (next_hop, at) = NameFib::entry(v);
                        let bytes = len[i * d + k] as usize;
                        crate::table::prefetch(self.arena[at..].as_ptr());
                        crate::table::prefetch(self.arena[at + bytes - 1..].as_ptr());
                        hit[i] = (k, at, next_hop);
                        next[i] = 0;
                    }
                    None => next[i] = self.candidate(k - 1),
                }
            }
        }
        // The hits, their bytes fetched meanwhile: compared last, so that
        // every round's loads were in flight first. A hit whose bytes
        // differ (a hash collision, practically never) is looked up again
        // one at a time, which goes on to shorter lengths.
        for (i, &(k, at, next_hop)) in hit.iter().enumerate().take(group.len()).filter(|(_, h)| h.0 != 0) {
            let (start, end) = range[i];
            let (off, packet) = group[i];
            if self.same(packet, start, end, k, at, len[i * d + k] as usize) {
                out[i].answer = NameMatch::Found { next_hop, components: k as u32 };
            } else {
                let mut probes = 0;
                out[i].answer = self.lookup(packet, off, &mut probes);
                out[i].probes = probes as u32;
            }
        }
    }
}

/// Names whose bulk lookups advance together.
const GROUP: usize = 32;

/// `prefix` as NDN TLV: a Name TLV holding its components (for packets and tests).
pub fn encode_name(prefix: &[Component]) -> Vec<u8> {
    let mut value = Vec::new();
    for c in prefix {
        put_varnum(&mut value, u64::from(c.typ));
        put_varnum(&mut value, c.value.len() as u64);
        value.extend_from_slice(&c.value);
    }
    let mut out = Vec::with_capacity(value.len() + 9);
    put_varnum(&mut out, TLV_NAME);
    put_varnum(&mut out, value.len() as u64);
    out.extend_from_slice(&value);
    out
}
