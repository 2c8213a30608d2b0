//! `ess`: the ephemeral state store of WASP (and of ESP before it): 64-bit
//! keys to 32-byte tuples, every entry living a fixed `tau` from its
//! creation, so that a store sized for a declared rate of new entries never
//! fills (WASP §2.1, §3.4, §5.1).
//!
//! # Layout
//!
//! * `entries`: a ring of `capacity` entries in **creation order**. The
//!   oldest live entry is at `head`; entries expire in that order, so expiry
//!   is a pointer advance, never a scan of the table.
//! * `buckets`: per bucket, the index of the oldest entry hashed there; the
//!   entries of a bucket are chained in creation order. The oldest entry of
//!   the whole store is therefore the first of its chain, and expiring it
//!   unlinks it in O(1) (WASP Fig. 4).
//! * The bucket is chosen by a **keyed** hash (two folded 64×64-bit
//!   multiplications keyed with 128 random bits per store, as `table`'s),
//!   so that senders, who pick the keys, cannot aim them at one chain
//!   without knowing the key; and a chain holds at most `max_chain`
//!   entries: a new key whose chain is full is refused (`refused_chain`), so
//!   that no lookup walks more than `max_chain` entries whatever the keys
//!   (WASP §5.1). Bounded chains are what guarantees the time; the keyed
//!   hash keeps honest keys from meeting full chains.
//!
//! # Entries and who may touch them
//!
//! Each entry holds a 32-byte tuple (WASP's `map` bank); `get` and `put`
//! read and write its first 8 bytes as one 64-bit value, `map_get` and
//! `map_put` the whole tuple. An entry is one of:
//!
//! * **public**: read and written by anyone who knows the key;
//! * **protected**: created by the operator (control-plane `load`, an
//!   ordinary NetPE, or an admin capsule from a configured source): read by
//!   everyone, written only by those (`refused_protected` otherwise);
//! * **private** to a protocol: created by a capsule and visible only to
//!   capsules whose code has the same tag (a hash of the code): to others a
//!   `get` finds nothing and a `put` is refused (`refused_private`).
//!
//! Who is asking is the instance's **principal** ([`Ess::set_principal`]),
//! which the capsule runtime sets before each capsule (through
//! [`Coprocessor::begin_untrusted`], which also zeroes the registers);
//! ordinary NetPEs run as the operator.
//!
//! # Time and fullness
//!
//! Time is the packet's timestamp (the latest seen: a trace that steps back
//! in time does not revive entries). An entry created at `t` is gone at
//! `t + tau`; an update (`put` on an existing key) changes its value, never
//! its lifetime. When all `capacity` entries are live, a new key is refused
//! (`refused_full`): nothing live is ever evicted, so that a flood of new
//! keys cannot destroy others' state before its time. Size the store with
//! `rate` (new entries per second at peak) and `tau`: `capacity = rate ×
//! tau` never fills at that rate.
//!
//! Writes are made only when they change something: a `map_put` of the tuple
//! already stored writes nothing (`clean`), as WASP writes back only dirty
//! banks.
//!
//! # Registers and operations
//!
//! | input | meaning |
//! |---|---|
//! | 0, 1 | the key, high and low word |
//! | 2, 3 | `put`: the value, high and low word |
//! | 2 … 9 | `map_put`: the tuple, 8 big-endian words |
//! | 10 | `put`, `map_put`: the kind of a new entry (0 public, 1 protected, 2 private) |
//!
//! | op | name | outputs |
//! |---|---|---|
//! | 0 | get | out0 = 1 if found, out1, out2 = value (high, low) |
//! | 1 | put | out0 = 1 if stored |
//! | 2 | map_get | out0 = 1 if found, out1 … out8 = the tuple |
//! | 3 | map_put | out0 = 1 if stored |
//!
//! Configuration: `tau` (seconds, default 10), `capacity` (entries) or
//! `rate` (new entries per second; `capacity = ceil(rate × tau ×
//! per_packet)`, `per_packet` entries a packet may create, default 1;
//! neither: 65,536 entries),
//! `max_chain` (default 8), `seed` (a fixed hash key, for reproducible
//! tests and benchmarks only).
//!
//! Table files (`load`, `dump`): `KEY TUPLE [public|protected|private:TAG]`
//! per line, the key as 16 hex digits, the tuple as up to 64 hex digits
//! (left-aligned, zero-padded). Loaded entries are protected unless the line
//! says otherwise, and live `tau` from the latest time the store has seen.
//!
//! Several workers: one store shared under a lock (`Shared`).

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, PoisonError};

use netvm_vm::hash::fold;
use netvm_vm::{CoproConfig, CoproError, Coprocessor, DirectOp, InvokeContext, RegisterFile, UntrustedRun, WorkerShare};

/// Default lifetime of an entry (ns): WASP's τ = 10 s.
pub const DEFAULT_TAU_NS: u64 = 10_000_000_000;
/// Entries of a store configured with neither `capacity` nor `rate`.
pub const DEFAULT_CAPACITY: usize = 1 << 16;
/// Default longest chain.
pub const DEFAULT_MAX_CHAIN: u32 = 8;
/// Largest capacity (entries) a store may be configured with.
pub const MAX_CAPACITY: usize = 1 << 26;
/// Bytes of one entry's tuple.
pub const TUPLE: usize = 32;
/// Input registers.
const INPUTS: usize = 11;
/// Output registers.
const OUTPUTS: usize = 9;
/// "No entry" in a chain link or bucket.
const NONE: u32 = u32::MAX;

/// Who may see and change an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visibility {
    /// Anyone who knows the key.
    Public,
    /// Read by anyone, written only by the operator (and admin capsules).
    Protected,
    /// Only capsules whose code has this tag.
    Private(u64),
}

/// Who is asking: see [`Ess::set_principal`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Principal {
    /// May create and write protected entries.
    pub admin: bool,
    /// The tag of the capsule code running (its private entries); `None`
    /// for the operator and ordinary NetPEs, which create no private entries.
    pub code: Option<u64>,
}

impl Principal {
    /// The operator (control plane, ordinary NetPEs).
    pub const OPERATOR: Principal = Principal { admin: true, code: None };
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    ctime: u64,
    /// The next (newer) entry of the same bucket.
    next: u32,
    bucket: u32,
    vis: Visibility,
    tuple: [u8; TUPLE],
}

const EMPTY: Entry = Entry { key: 0, ctime: 0, next: NONE, bucket: 0, vis: Visibility::Public, tuple: [0; TUPLE] };

/// Counts reported by `stats`.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    lookups: u64,
    hits: u64,
    created: u64,
    updated: u64,
    clean: u64,
    expired: u64,
    refused_full: u64,
    refused_chain: u64,
    refused_protected: u64,
    refused_private: u64,
}

/// Why a write was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Every entry is live.
    Full,
    /// The key's chain holds `max_chain` entries.
    Chain,
    /// A protected entry, and the principal is not the operator.
    Protected,
    /// Another protocol's private entry, or a private entry asked for by the operator.
    Private,
}

/// The store itself (what the handles of several workers share).
#[derive(Debug)]
struct Store {
    tau_ns: u64,
    max_chain: u32,
    /// The hash key: random per store (or from `seed`).
    key: [u64; 2],
    mask: u32,
    buckets: Vec<u32>,
    /// The newest entry of each bucket (where a new one is linked).
    tails: Vec<u32>,
    chain_len: Vec<u8>,
    entries: Vec<Entry>,
    head: usize,
    len: usize,
    now: u64,
    /// When the oldest entry expires (`u64::MAX` while none is live): time
    /// that has not reached it expires nothing, found with one compare.
    expires: u64,
    longest: u32,
    counts: Counts,
    /// The key found last and its entry (WASP's read-modify-write pattern,
    /// a `get` then a `put` of the same key, finds it without hashing);
    /// checked against the live range and the entry's key before use.
    last: Cell<Option<(u64, u32)>>,
}

impl Store {
    fn new(capacity: usize, tau_ns: u64, max_chain: u32, seed: Option<u64>) -> Result<Store, String> {
        if !(1..=MAX_CAPACITY).contains(&capacity) {
            return Err(format!("capacity must be between 1 and {MAX_CAPACITY} entries, not {capacity}"));
        }
        if !(1..=255).contains(&max_chain) {
            return Err(format!("max_chain must be between 1 and 255, not {max_chain}"));
        }
        if tau_ns == 0 {
            return Err("tau must be positive".into());
        }
        // Two buckets per entry: at full load a chain averages half an entry,
        // and a legitimate key rarely meets a full chain.
        let nbuckets = (capacity * 2).next_power_of_two();
        let mut entries = Vec::new();
        entries.try_reserve_exact(capacity).map_err(|e| format!("cannot allocate {capacity} entries: {e}"))?;
        entries.resize(capacity, EMPTY);
        Ok(Store {
            tau_ns,
            max_chain,
            key: hash_key(seed),
            mask: (nbuckets - 1) as u32,
            buckets: vec![NONE; nbuckets],
            tails: vec![NONE; nbuckets],
            chain_len: vec![0; nbuckets],
            entries,
            head: 0,
            len: 0,
            now: 0,
            expires: u64::MAX,
            longest: 0,
            counts: Counts::default(),
            last: Cell::new(None),
        })
    }

    fn capacity(&self) -> usize {
        self.entries.len()
    }

    fn bucket(&self, key: u64) -> u32 {
        let h = fold(fold(key ^ self.key[0], self.key[1] ^ 0x243f_6a88_85a3_08d3) ^ key.rotate_left(32), self.key[1]);
        (h as u32 ^ (h >> 32) as u32) & self.mask
    }

    /// Ring index `i` plus `k` (both within the ring): no division, the
    /// capacity being any number.
    fn ring(&self, i: usize, k: usize) -> usize {
        let j = i + k;
        if j >= self.capacity() {
            j - self.capacity()
        } else {
            j
        }
    }

    /// Moves time forward to `now` and expires what has lived `tau`.
    #[inline]
    fn advance(&mut self, now: u64) {
        self.now = self.now.max(now);
        if self.now >= self.expires {
            self.expire();
        }
    }

    /// Expires the entries that have lived `tau` at `self.now`, oldest first.
    fn expire(&mut self) {
        while self.len > 0 {
            let e = &self.entries[self.head];
            let expires = e.ctime.saturating_add(self.tau_ns);
            if self.now < expires {
                self.expires = expires;
                return;
            }
            // The oldest entry of the store is the first of its chain.
            let b = e.bucket as usize;
            debug_assert_eq!(self.buckets[b], self.head as u32);
            self.buckets[b] = e.next;
            if e.next == NONE {
                self.tails[b] = NONE;
            }
            self.chain_len[b] -= 1;
            self.head = self.ring(self.head, 1);
            self.len -= 1;
            self.counts.expired += 1;
        }
        self.expires = u64::MAX;
    }

    fn find(&self, key: u64) -> (u32, Option<usize>) {
        if let Some((k, i)) = self.last.get() {
            let i = i as usize;
            // Live: within `len` entries of the oldest, in ring order.
            let age = if i >= self.head { i - self.head } else { i + self.capacity() - self.head };
            let live = age < self.len;
            if k == key && live && self.entries[i].key == key {
                return (self.entries[i].bucket, Some(i));
            }
        }
        let b = self.bucket(key);
        let mut i = self.buckets[b as usize];
        while i != NONE {
            let e = &self.entries[i as usize];
            if e.key == key {
                self.last.set(Some((key, i)));
                return (b, Some(i as usize));
            }
            i = e.next;
        }
        (b, None)
    }

    fn visible(vis: Visibility, who: Principal) -> bool {
        match vis {
            Visibility::Public | Visibility::Protected => true,
            Visibility::Private(t) => who.code == Some(t),
        }
    }

    fn get(&mut self, key: u64, who: Principal) -> Option<[u8; TUPLE]> {
        self.counts.lookups += 1;
        let (_, i) = self.find(key);
        let e = &self.entries[i?];
        if !Self::visible(e.vis, who) {
            return None;
        }
        self.counts.hits += 1;
        Some(e.tuple)
    }

    /// Writes bytes `at..at + bytes.len()` of `key`'s tuple, creating the
    /// entry (zeroed, `vis`) if there is none.
    fn put(&mut self, key: u64, at: usize, bytes: &[u8], vis: Visibility, who: Principal) -> Result<(), Refused> {
        let (b, found) = self.find(key);
        if let Some(i) = found {
            let e = &mut self.entries[i];
            match e.vis {
                Visibility::Protected if !who.admin => {
                    self.counts.refused_protected += 1;
                    return Err(Refused::Protected);
                }
                Visibility::Private(t) if who.code != Some(t) => {
                    self.counts.refused_private += 1;
                    return Err(Refused::Private);
                }
                _ => {}
            }
            let dst = &mut e.tuple[at..at + bytes.len()];
            if same(dst, bytes) {
                self.counts.clean += 1;
            } else {
                dst.copy_from_slice(bytes);
                self.counts.updated += 1;
            }
            return Ok(());
        }
        match vis {
            Visibility::Protected if !who.admin => {
                self.counts.refused_protected += 1;
                return Err(Refused::Protected);
            }
            Visibility::Private(_) if who.code.is_none() => {
                self.counts.refused_private += 1;
                return Err(Refused::Private);
            }
            _ => {}
        }
        if self.len == self.capacity() {
            self.counts.refused_full += 1;
            return Err(Refused::Full);
        }
        let bu = b as usize;
        if u32::from(self.chain_len[bu]) >= self.max_chain {
            self.counts.refused_chain += 1;
            return Err(Refused::Chain);
        }
        let slot = self.ring(self.head, self.len);
        if self.len == 0 {
            self.expires = self.now.saturating_add(self.tau_ns);
        }
        let mut tuple = [0u8; TUPLE];
        tuple[at..at + bytes.len()].copy_from_slice(bytes);
        self.entries[slot] = Entry { key, ctime: self.now, next: NONE, bucket: b, vis, tuple };
        match self.tails[bu] {
            NONE => self.buckets[bu] = slot as u32,
            t => self.entries[t as usize].next = slot as u32,
        }
        self.tails[bu] = slot as u32;
        self.chain_len[bu] += 1;
        self.longest = self.longest.max(u32::from(self.chain_len[bu]));
        self.len += 1;
        self.counts.created += 1;
        Ok(())
    }

    fn live(&self) -> impl Iterator<Item = &Entry> {
        (0..self.len).map(move |k| &self.entries[self.ring(self.head, k)])
    }

    fn clear(&mut self) {
        self.buckets.fill(NONE);
        self.tails.fill(NONE);
        self.chain_len.fill(0);
        self.head = 0;
        self.len = 0;
        self.expires = u64::MAX;
    }
}

/// Whether two short byte strings are equal, without a call to `memcmp`
/// (a tuple is at most 32 bytes).
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    // Eight bytes at a time (the usual 8-byte value: one compare), then
    // what is left.
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail = a8.remainder() == b8.remainder();
    tail && a8
        .zip(b8)
        .all(|(x, y)| u64::from_ne_bytes(x.try_into().unwrap_or_default()) == u64::from_ne_bytes(y.try_into().unwrap_or_default()))
}

/// A store's hash key: 128 random bits from the standard library's random
/// source (the one its `HashMap`s are keyed from), or derived from `seed`.
fn hash_key(seed: Option<u64>) -> [u64; 2] {
    let s = match seed {
        Some(s) => s,
        None => {
            let r = RandomState::new();
            r.hash_one(0x9e37_79b9_u64) ^ r.hash_one(1u64).rotate_left(29)
        }
    };
    [fold(s ^ 0x1319_8a2e_0370_7344, 0xa409_3822_299f_31d0) | 1, fold(s ^ 0x082e_fa98_ec4e_6c89, 0x4528_21e6_38d0_1377) | 1]
}

/// Where a handle's store is.
#[derive(Debug)]
enum Place {
    Own(Box<Store>),
    Shared(Arc<Mutex<Store>>),
}

/// The `ess` coprocessor.
#[derive(Debug)]
pub struct Ess {
    place: Place,
    principal: Principal,
    input: [u32; INPUTS],
    output: [u32; OUTPUTS],
    /// The direct entries of the four operations for compiled code (filled
    /// by `registers`, pointing at this handle): they read the registers
    /// and the packet's time only.
    direct: [DirectOp; 4],
    /// The register file `registers` made last: every address in it is
    /// inside this handle, so it is still right while the handle has not
    /// moved (its first entry's instance is still `self`).
    file: RegisterFile,
}

fn parse_u64(cfg: &CoproConfig, name: &str) -> Result<Option<u64>, String> {
    cfg.get(name).map(|v| v.trim().parse::<u64>().map_err(|_| format!("ess: {name} `{v}` is not a non-negative integer"))).transpose()
}

pub(crate) fn create(cfg: &CoproConfig) -> Result<Box<dyn Coprocessor>, String> {
    Ess::from_config(cfg).map(|e| Box::new(e) as Box<dyn Coprocessor>)
}

impl Ess {
    /// A store configured as the manifest's `copro.NAME = { ... }` does
    /// (the module documentation lists the settings).
    pub fn from_config(cfg: &CoproConfig) -> Result<Ess, String> {
        const KNOWN: [&str; 6] = ["tau", "capacity", "rate", "max_chain", "seed", "per_packet"];
        if let Some(k) = cfg.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(format!("ess: unknown setting `{k}` (known: {})", KNOWN.join(", ")));
        }
        let tau_ns = match cfg.get("tau") {
            None => DEFAULT_TAU_NS,
            Some(v) => {
                let s: f64 = v.trim().parse().map_err(|_| format!("ess: tau `{v}` is not a number of seconds"))?;
                if !(s > 0.0 && s <= 86_400.0) {
                    return Err(format!("ess: tau must be between 0 and 86400 seconds, not {v}"));
                }
                (s * 1e9).round() as u64
            }
        };
        let per_packet = parse_u64(cfg, "per_packet")?.unwrap_or(1);
        let capacity = match (parse_u64(cfg, "capacity")?, parse_u64(cfg, "rate")?) {
            (Some(_), Some(_)) => return Err("ess: give capacity or rate, not both".into()),
            (Some(c), None) => c,
            (None, Some(r)) => {
                // ceil(rate × tau × per_packet), in integers.
                let e = u128::from(r) * u128::from(tau_ns) * u128::from(per_packet);
                u64::try_from(e.div_ceil(1_000_000_000)).unwrap_or(u64::MAX)
            }
            (None, None) => DEFAULT_CAPACITY as u64,
        };
        let capacity = usize::try_from(capacity).unwrap_or(usize::MAX);
        let max_chain = parse_u64(cfg, "max_chain")?.unwrap_or(u64::from(DEFAULT_MAX_CHAIN));
        let max_chain = u32::try_from(max_chain).unwrap_or(u32::MAX);
        let seed = parse_u64(cfg, "seed")?;
        Ess::new(capacity, tau_ns, max_chain, seed).map_err(|e| format!("ess: {e}"))
    }
}

fn key_of(words: &[u32]) -> u64 {
    u64::from(words[0]) << 32 | u64::from(words[1])
}

fn vis_of(word: u32, who: Principal) -> Result<Visibility, CoproError> {
    match word {
        0 => Ok(Visibility::Public),
        1 => Ok(Visibility::Protected),
        // A private entry belongs to the code asking; the operator has none.
        2 => Ok(Visibility::Private(who.code.unwrap_or(0))),
        w => Err(CoproError::BadArgument(format!("entry kind {w} (0 public, 1 protected, 2 private)"))),
    }
}

impl Ess {
    /// A store of `capacity` entries living `tau_ns` each, chains of at most
    /// `max_chain`; `seed` fixes the hash key (tests), else it is random.
    pub fn new(capacity: usize, tau_ns: u64, max_chain: u32, seed: Option<u64>) -> Result<Ess, String> {
        Ok(Ess {
            place: Place::Own(Box::new(Store::new(capacity, tau_ns, max_chain, seed)?)),
            principal: Principal::OPERATOR,
            input: [0; INPUTS],
            output: [0; OUTPUTS],
            direct: [DirectOp::NONE; 4],
            file: RegisterFile::NONE,
        })
    }

    /// Sets who the following operations act for (the capsule runtime calls
    /// it before each capsule; the operator by default), and zeroes the
    /// registers, so that nothing one principal read or wrote is left for
    /// the next.
    pub fn set_principal(&mut self, who: Principal) {
        self.principal = who;
        self.input = [0; INPUTS];
        self.output = [0; OUTPUTS];
    }

    fn with<R>(&mut self, f: impl FnOnce(&mut Store) -> R) -> R {
        match &mut self.place {
            Place::Own(s) => f(s),
            Place::Shared(l) => f(&mut l.lock().unwrap_or_else(PoisonError::into_inner)),
        }
    }

    fn with_ref<R>(&self, f: impl FnOnce(&Store) -> R) -> R {
        match &self.place {
            Place::Own(s) => f(s),
            Place::Shared(l) => f(&l.lock().unwrap_or_else(PoisonError::into_inner)),
        }
    }

    /// Looks `key` up at time `now_ns` as the current principal.
    pub fn get(&mut self, key: u64, now_ns: u64) -> Option<[u8; TUPLE]> {
        let who = self.principal;
        self.with(|s| {
            s.advance(now_ns);
            s.get(key, who)
        })
    }

    /// Stores `tuple` under `key` at time `now_ns` as the current principal
    /// (a new entry is `vis`).
    pub fn put(&mut self, key: u64, tuple: &[u8; TUPLE], vis: Visibility, now_ns: u64) -> Result<(), Refused> {
        let who = self.principal;
        self.with(|s| {
            s.advance(now_ns);
            s.put(key, 0, tuple, vis, who)
        })
    }

    /// The bucket `key` hashes to (benchmarks and tests aim keys at one chain).
    pub fn bucket_of(&self, key: u64) -> u32 {
        self.with_ref(|s| s.bucket(key))
    }

    /// Live entries now.
    pub fn len(&self) -> usize {
        self.with_ref(|s| s.len)
    }

    /// Whether no entry is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Coprocessor for Ess {
    fn kind(&self) -> &str {
        "ess"
    }

    fn write(&mut self, reg: u8, value: u32) -> Result<(), CoproError> {
        *self.input.get_mut(usize::from(reg)).ok_or(CoproError::NoRegister(reg))? = value;
        Ok(())
    }

    fn read(&mut self, reg: u8) -> Result<u32, CoproError> {
        self.output.get(usize::from(reg)).copied().ok_or(CoproError::NoRegister(reg))
    }

    #[inline]
    fn registers(&mut self) -> RegisterFile {
        // A capsule node asks before every capsule: after the first time,
        // one compare (the handle has not moved) instead of rebuilding.
        if self.direct[0].this == (self as *mut Self).cast() {
            return self.file;
        }
        self.make_registers()
    }

    #[inline(always)]
    fn invoke(&mut self, op: u8, ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        // The registers were just written a word at a time (by `write` or
        // by compiled code): they are read a word at a time too, and the
        // outputs written so, since a wider access to words stored an
        // instant before waits for the stores to drain (a store-forwarding
        // stall, which cost as much as the lookup).
        let key = key_of(&self.input[..2]);
        let now = ctx.now.as_nanos();
        let who = self.principal;
        match op {
            0 | 2 => {
                let found = self.with(|s| {
                    s.advance(now);
                    s.get(key, who)
                });
                let words = if op == 0 { 2 } else { 8 };
                self.output[0] = u32::from(found.is_some());
                let t = found.unwrap_or([0; TUPLE]);
                for (w, c) in self.output[1..=words].iter_mut().zip(t.chunks_exact(4)) {
                    *w = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                }
                for w in &mut self.output[words + 1..] {
                    *w = 0;
                }
            }
            1 | 3 => {
                let vis = vis_of(self.input[10], who)?;
                let words = if op == 1 { 2 } else { 8 };
                // Two registers to each 8-byte store.
                let mut bytes = [0u8; TUPLE];
                for (c, w) in bytes.chunks_exact_mut(8).zip(self.input[2..2 + words].chunks_exact(2)) {
                    c.copy_from_slice(&(u64::from(w[0]) << 32 | u64::from(w[1])).to_be_bytes());
                }
                let stored = self.with(|s| {
                    s.advance(now);
                    s.put(key, 0, &bytes[..words * 4], vis, who)
                });
                self.output[0] = u32::from(stored.is_ok());
                for w in &mut self.output[1..] {
                    *w = 0;
                }
            }
            _ => return Err(CoproError::NoOperation(op)),
        }
        Ok(())
    }

    fn dump(&self) -> String {
        self.with_ref(|s| {
            let mut out = String::new();
            for e in s.live() {
                let tuple: String = e.tuple.iter().map(|b| format!("{b:02x}")).collect();
                let vis = match e.vis {
                    Visibility::Public => "public".to_string(),
                    Visibility::Protected => "protected".to_string(),
                    Visibility::Private(t) => format!("private:{t:016x}"),
                };
                out += &format!("{:016x} {tuple} {vis}\n", e.key);
            }
            out
        })
    }

    fn load(&mut self, text: &str) -> Result<usize, String> {
        let mut n = 0;
        for (line_no, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = |what: &str| format!("line {}: {what}", line_no + 1);
            let mut f = line.split_whitespace();
            let key = f.next().unwrap_or("");
            let key = (key.len() <= 16)
                .then(|| u64::from_str_radix(key, 16).ok())
                .flatten()
                .ok_or_else(|| bad(&format!("`{key}` is not a key of up to 16 hex digits")))?;
            let hex = f.next().ok_or_else(|| bad("no tuple"))?;
            if hex.len() > 2 * TUPLE || hex.len() % 2 != 0 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad(&format!("`{hex}` is not a tuple of up to {TUPLE} bytes in hex")));
            }
            let mut tuple = [0u8; TUPLE];
            for (i, b) in tuple.iter_mut().enumerate().take(hex.len() / 2) {
                *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad("bad hex"))?;
            }
            let vis = match f.next() {
                None | Some("protected") => Visibility::Protected,
                Some("public") => Visibility::Public,
                Some(p) => match p.strip_prefix("private:").and_then(|t| u64::from_str_radix(t, 16).ok()) {
                    Some(t) => Visibility::Private(t),
                    None => return Err(bad(&format!("`{p}` is not public, protected or private:TAG"))),
                },
            };
            if let Some(extra) = f.next() {
                return Err(bad(&format!("unexpected `{extra}`")));
            }
            let op = Principal {
                admin: true,
                code: match vis {
                    Visibility::Private(t) => Some(t),
                    _ => None,
                },
            };
            self.with(|s| s.put(key, 0, &tuple, vis, op)).map_err(|r| bad(&format!("not stored: {r:?}")))?;
            n += 1;
        }
        Ok(n)
    }

    fn clear(&mut self) {
        self.with(Store::clear);
    }

    fn tick(&mut self, now: netvm_vm::Timestamp) {
        self.with(|s| s.advance(now.as_nanos()));
    }

    fn memory(&self) -> u64 {
        self.with_ref(|s| (s.capacity() * std::mem::size_of::<Entry>() + s.buckets.len() * 9) as u64)
    }

    fn stats(&self) -> Vec<(String, u64)> {
        self.with_ref(|s| {
            let c = s.counts;
            [
                ("entries", s.len as u64),
                ("capacity", s.capacity() as u64),
                ("lookups", c.lookups),
                ("hits", c.hits),
                ("created", c.created),
                ("updated", c.updated),
                ("clean", c.clean),
                ("expired", c.expired),
                ("refused_full", c.refused_full),
                ("refused_chain", c.refused_chain),
                ("refused_protected", c.refused_protected),
                ("refused_private", c.refused_private),
                ("longest_chain", u64::from(s.longest)),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
        })
    }

    /// The capsule's code becomes the principal (its private entries; the
    /// operator's rights for an admin capsule); the registers are zeroed.
    fn begin_untrusted(&mut self, run: &UntrustedRun) {
        self.set_principal(Principal { admin: run.admin, code: Some(run.code) });
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    /// Another handle on the same store (the store moves behind a lock).
    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        Ok(Box::new(self.handle()?))
    }

    fn share(&self) -> WorkerShare {
        WorkerShare::Shared
    }
}

impl Ess {
    /// Builds the register file `registers` keeps (the handle is new, or
    /// has moved).
    #[cold]
    #[inline(never)]
    fn make_registers(&mut self) -> RegisterFile {
        self.direct =
            [DirectOp::of::<Self, 0>(self), DirectOp::of::<Self, 1>(self), DirectOp::of::<Self, 2>(self), DirectOp::of::<Self, 3>(self)];
        self.file = RegisterFile::over(&mut self.input, &mut self.output).with_direct(&self.direct);
        self.file
    }

    /// Another handle on the same store, for another worker: the store
    /// moves behind a lock the handles share; the new one acts for the
    /// operator, with registers of its own.
    pub fn handle(&mut self) -> Result<Ess, String> {
        if let Place::Own(_) = self.place {
            let Place::Own(s) = std::mem::replace(&mut self.place, Place::Shared(Arc::new(Mutex::new(Store::new(1, 1, 1, Some(0))?))))
            else {
                unreachable!()
            };
            self.place = Place::Shared(Arc::new(Mutex::new(*s)));
        }
        let Place::Shared(l) = &self.place else { unreachable!("made shared above") };
        Ok(Ess {
            place: Place::Shared(Arc::clone(l)),
            principal: Principal::OPERATOR,
            input: [0; INPUTS],
            output: [0; OUTPUTS],
            direct: [DirectOp::NONE; 4],
            file: RegisterFile::NONE,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn store(cap: usize) -> Ess {
        Ess::new(cap, 10 * S, 4, Some(7)).unwrap()
    }

    fn t(v: u8) -> [u8; TUPLE] {
        [v; TUPLE]
    }

    #[test]
    fn entries_live_tau_from_creation_and_expire_in_order() {
        let mut e = store(8);
        e.put(1, &t(1), Visibility::Public, 0).unwrap();
        e.put(2, &t(2), Visibility::Public, 3 * S).unwrap();
        // An update changes the value, not the lifetime.
        e.put(1, &t(9), Visibility::Public, 9 * S).unwrap();
        assert_eq!(e.get(1, 9 * S), Some(t(9)));
        assert_eq!(e.get(1, 10 * S), None, "created at 0, gone at tau");
        assert_eq!(e.get(2, 12 * S), Some(t(2)));
        assert_eq!(e.get(2, 13 * S), None);
        assert!(e.is_empty());
        // Time does not go back.
        e.put(3, &t(3), Visibility::Public, 20 * S).unwrap();
        assert_eq!(e.get(3, 0), Some(t(3)));
    }

    /// Expiry is checked with one compare against the oldest entry's time:
    /// on a ring of any size (here 5, so that positions wrap without a
    /// power of two) through many rounds of filling, emptying and
    /// refilling, every entry lives exactly `tau` from creation, as a
    /// model that scans every entry says.
    #[test]
    fn expiry_matches_a_scan_on_a_ring_of_any_size() {
        let mut e = Ess::new(5, 10 * S, 8, Some(3)).unwrap();
        let mut model: Vec<(u64, u64)> = Vec::new(); // (key, created)
        let mut now = 0;
        for step in 0..400u64 {
            // Irregular time steps of whole seconds (so that entries are
            // looked at exactly when they expire): bursts, then gaps longer
            // than tau.
            now += match step % 7 {
                0 => 0,
                1 | 2 => S,
                3 => 3 * S,
                4 => S,
                5 => 11 * S * u64::from(step % 3 == 0),
                _ => 2 * S,
            };
            model.retain(|&(_, c)| now < c + 10 * S);
            let key = step % 9;
            let stored = e.put(key, &t(step as u8), Visibility::Public, now);
            let known = model.iter().any(|&(k, _)| k == key);
            assert_eq!(stored.is_ok(), known || model.len() < 5, "step {step}");
            if stored.is_ok() && !known {
                model.push((key, now));
            }
            assert_eq!(e.len(), model.len(), "step {step}");
            for k in 0..9 {
                assert_eq!(e.get(k, now).is_some(), model.iter().any(|&(m, _)| m == k), "step {step} key {k}");
            }
        }
    }

    /// The key found last is remembered (a `get` then a `put` of one key
    /// hashes once): the memory never outlives its entry, whose slot the
    /// ring gives to other keys and then to the same key again.
    #[test]
    fn the_last_key_found_never_outlives_its_entry() {
        let mut e = store(2);
        e.put(1, &t(1), Visibility::Public, 0).unwrap();
        assert_eq!(e.get(1, 0), Some(t(1)));
        // Key 1 expires; its slot goes to key 3 once key 2 took the other.
        e.put(2, &t(2), Visibility::Public, 5 * S).unwrap();
        assert_eq!(e.get(1, 10 * S), None, "expired, its slot not reused yet");
        e.put(3, &t(3), Visibility::Public, 11 * S).unwrap();
        assert_eq!(e.get(1, 11 * S), None);
        assert_eq!(e.get(3, 11 * S), Some(t(3)));
        // Key 1 again, in the slot key 2 leaves; key 3 stays what it was.
        e.put(1, &t(4), Visibility::Public, 16 * S).unwrap();
        assert_eq!(e.get(1, 16 * S), Some(t(4)));
        assert_eq!(e.get(3, 16 * S), Some(t(3)));
        assert_eq!(e.get(2, 16 * S), None);
        // Emptied by the operator: nothing is found.
        e.clear();
        assert_eq!(e.get(1, 16 * S), None);
    }

    #[test]
    fn a_full_store_refuses_new_keys_and_keeps_the_live_ones() {
        let mut e = store(4);
        for k in 0..4 {
            e.put(k, &t(k as u8), Visibility::Public, k * S).unwrap();
        }
        assert_eq!(e.put(100, &t(0), Visibility::Public, 5 * S), Err(Refused::Full));
        assert_eq!(e.put(2, &t(7), Visibility::Public, 5 * S), Ok(()), "updates still work");
        assert_eq!(e.get(0, 5 * S), Some(t(0)));
        // The oldest expires at 10 s, making room for exactly one.
        assert_eq!(e.put(100, &t(1), Visibility::Public, 10 * S), Ok(()));
        assert_eq!(e.put(101, &t(1), Visibility::Public, 10 * S), Err(Refused::Full));
        let stats: std::collections::BTreeMap<_, _> = e.stats().into_iter().collect();
        assert_eq!((stats["refused_full"], stats["expired"], stats["entries"]), (2, 1, 4));
    }

    #[test]
    fn chains_are_bounded_whatever_the_keys() {
        // Keys aimed at one bucket of this (seeded) store: the fifth is refused.
        let mut e = store(1 << 10);
        let target = e.with(|s| s.bucket(0));
        let same: Vec<u64> = (0u64..).filter(|&k| e.with(|s| s.bucket(k)) == target).take(6).collect();
        for (i, &k) in same.iter().enumerate() {
            let r = e.put(k, &t(1), Visibility::Public, 0);
            assert_eq!(r.is_ok(), i < 4, "key {i}");
        }
        for &k in &same[..4] {
            assert!(e.get(k, 0).is_some());
        }
        // Another seed scatters the same keys.
        let mut other = Ess::new(1 << 10, 10 * S, 4, Some(8)).unwrap();
        let b: std::collections::BTreeSet<u32> = same.iter().map(|&k| other.with(|s| s.bucket(k))).collect();
        assert!(b.len() > 1);
        assert!(same.iter().all(|&k| other.put(k, &t(1), Visibility::Public, 0).is_ok()));
    }

    #[test]
    fn protected_and_private_entries() {
        let mut e = store(16);
        e.put(1, &t(1), Visibility::Protected, 0).unwrap();
        let a = Principal { admin: false, code: Some(0xa) };
        let b = Principal { admin: false, code: Some(0xb) };
        e.set_principal(a);
        assert_eq!(e.get(1, 0), Some(t(1)), "protected entries are readable");
        assert_eq!(e.put(1, &t(2), Visibility::Public, 0), Err(Refused::Protected));
        assert_eq!(e.put(2, &t(2), Visibility::Protected, 0), Err(Refused::Protected), "only the operator creates them");
        e.put(3, &t(3), Visibility::Private(0xa), 0).unwrap();
        assert_eq!(e.get(3, 0), Some(t(3)));
        e.set_principal(b);
        assert_eq!(e.get(3, 0), None, "another protocol sees nothing");
        assert_eq!(e.put(3, &t(4), Visibility::Public, 0), Err(Refused::Private));
        e.set_principal(Principal::OPERATOR);
        assert_eq!(e.put(1, &t(5), Visibility::Public, 0), Ok(()));
        assert_eq!(e.get(1, 0), Some(t(5)));
    }

    #[test]
    fn registers_and_operations() {
        let mut e: Box<dyn Coprocessor> = Box::new(store(16));
        let ctx = |s: u64| InvokeContext { packet: &[], info: &[], now: netvm_vm::Timestamp { sec: s, nsec: 0 }, seq: 0 };
        for (r, v) in [(0, 0x0102_0304), (1, 0x0506_0708), (2, 0xdead_beef), (3, 42), (10, 0)] {
            e.write(r, v).unwrap();
        }
        e.invoke(1, &ctx(0)).unwrap();
        assert_eq!(e.read(0).unwrap(), 1);
        e.invoke(0, &ctx(1)).unwrap();
        assert_eq!((e.read(0).unwrap(), e.read(1).unwrap(), e.read(2).unwrap()), (1, 0xdead_beef, 42));
        for r in 2..10 {
            e.write(r, r as u32 * 3).unwrap();
        }
        e.invoke(3, &ctx(1)).unwrap();
        e.invoke(2, &ctx(2)).unwrap();
        assert_eq!((1..9).map(|r| e.read(r).unwrap()).collect::<Vec<_>>(), (2..10).map(|r| r * 3).collect::<Vec<u32>>());
        e.invoke(3, &ctx(2)).unwrap();
        let stats: std::collections::BTreeMap<_, _> = e.stats().into_iter().collect();
        assert_eq!(stats["clean"], 1, "the same tuple is not written again");
        e.invoke(0, &ctx(10)).unwrap();
        assert_eq!(e.read(0).unwrap(), 0, "expired");
        e.write(10, 5).unwrap();
        assert!(e.invoke(1, &ctx(10)).is_err());
        assert!(e.invoke(4, &ctx(10)).is_err() && e.write(11, 0).is_err() && e.read(9).is_err());
    }

    /// The register file is kept from one request to the next, and made
    /// again once the handle has moved: its addresses are always inside
    /// the handle that answers.
    #[test]
    fn the_register_file_follows_the_handle() {
        let inside = |e: &Ess, f: &RegisterFile| {
            let lo = (e as *const Ess) as usize;
            let hi = lo + std::mem::size_of::<Ess>();
            let this = e.direct[0].this as usize;
            [f.input as usize, f.output as usize, f.direct as usize].iter().all(|a| (lo..hi).contains(a)) && this == lo
        };
        let mut a = store(8);
        let f1 = a.registers();
        assert!(inside(&a, &f1));
        assert_eq!(a.registers(), f1, "kept while the handle stays put");
        let mut moved = [a];
        let f2 = moved[0].registers();
        assert_ne!(f2, f1);
        assert!(inside(&moved[0], &f2));
    }

    #[test]
    fn load_dump_and_configuration() {
        let mut e = store(8);
        assert_eq!(e.load("00000000000000ff 0102 # comment\n1 aa public\n2 bb private:000000000000000a\n").unwrap(), 3);
        let d = e.dump();
        assert!(d.starts_with("00000000000000ff 0102000000"), "{d}");
        assert!(d.contains(" protected\n") && d.contains(" public\n") && d.contains(" private:000000000000000a\n"));
        let mut again = store(8);
        assert_eq!(again.load(&d).unwrap(), 3);
        assert_eq!(again.dump(), d);
        assert!(e.load("xyz 00").unwrap_err().starts_with("line 1"));
        assert!(e.load("1 0g").is_err() && e.load("1 00 secret").is_err());
        let cfg = |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<CoproConfig>();
        let c = create(&cfg(&[("rate", "1000"), ("tau", "2")])).unwrap();
        assert_eq!(c.stats().iter().find(|(k, _)| k == "capacity").unwrap().1, 2000);
        assert_eq!(create(&cfg(&[])).unwrap().stats().iter().find(|(k, _)| k == "capacity").unwrap().1, DEFAULT_CAPACITY as u64);
        assert!(create(&cfg(&[("capacity", "10"), ("rate", "1")])).is_err());
        assert!(create(&cfg(&[("capacity", "0")])).is_err());
        assert!(create(&cfg(&[("capacity", "10"), ("tau", "0")])).is_err());
        assert!(create(&cfg(&[("capacity", "10"), ("max_chain", "0")])).is_err());
        assert!(create(&cfg(&[("capacity", "10"), ("colour", "red")])).is_err());
        assert!(create(&cfg(&[("capacity", "100000000000")])).is_err());
    }

    #[test]
    fn forks_share_one_store() {
        let mut a: Box<dyn Coprocessor> = Box::new(store(8));
        let mut b = a.fork().unwrap();
        let ctx = InvokeContext { packet: &[], info: &[], now: netvm_vm::Timestamp::default(), seq: 0 };
        for (r, v) in [(0, 0), (1, 5), (2, 0), (3, 6), (10, 0)] {
            b.write(r, v).unwrap();
        }
        b.invoke(1, &ctx).unwrap();
        for (r, v) in [(0, 0), (1, 5)] {
            a.write(r, v).unwrap();
        }
        a.invoke(0, &ctx).unwrap();
        assert_eq!((a.read(0).unwrap(), a.read(2).unwrap()), (1, 6));
    }
}
