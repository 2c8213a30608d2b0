//! `table`: an exact-match table with aging (MAC learning, flow tables,
//! host routes). Keys and values are fixed-size byte strings; the store is
//! [`ExactTable`], a bucketized cuckoo hash (see its module documentation for
//! the layout and the load it guarantees).
//!
//! Configuration:
//!
//! | setting      | default | meaning |
//! |--------------|---------|---------|
//! | `key_size`   | 4       | key bytes, 1..=16 |
//! | `value_size` | 4       | value bytes, 0..=16 |
//! | `capacity`   | 65536   | most entries, 1..=2^25; memory grows with the entries stored (the table doubles when it would be more than half full), up to about `capacity × 1.11 × (key_size + value_size + 10)` bytes |
//! | `initial`    | 0       | entries to make room for at creation (up to `capacity`), so that the table does not double until it holds more: a table whose inserts must never pause to rehash sets it to `capacity` (everything allocated at once); 0 = start small (1,024 slots) |
//! | `aging`      | 0       | seconds; an entry whose last insert is more than `aging` seconds before now is absent for every operation, and `tick` purges it; 0 = entries never age |
//! | `workers`    | `shared`| with several workers: `shared` (one table for all, under a lock) or `sharded` (one table per worker); see below |
//! | `seed`       | random  | the hash seed, a 64-bit number (decimal or `0x` hex): runs then repeat exactly where the outcome depends on where keys sit (which aged entry a full table reuses, which entries a sweep purges first). By default each table draws its own, so that senders cannot aim keys at one bucket: set it only for tests and reproducible benchmarks |
//!
//! Other settings are errors.
//!
//! Byte `i` of a key or value is in register word `i / 4`, bits
//! `31 - 8*(i%4)` .. `24 - 8*(i%4)`: big-endian, as `pkt.ld32` loads four
//! bytes. Bytes beyond the size are ignored on input and zero on output.
//!
//! | register | direction | meaning |
//! |----------|-----------|---------|
//! | in 0..3  | input     | key words |
//! | in 4..7  | input     | value words |
//! | in 8     | input     | packet offset of the key (the `*_pkt` ops) |
//! | out 0    | output    | status: 1 found / done, 0 not found / full |
//! | out 1..4 | output    | value words after a lookup; zero after a miss and after the other ops |
//!
//! | op | name       | effect |
//! |----|------------|--------|
//! | 0  | lookup     | out0 = 1 and out1..4 = value if key (in0..3) is present, else all 0 |
//! | 1  | insert     | inserts or replaces key in0..3 with value in4..7, timestamp now; out0 = 0 if the table is full |
//! | 2  | delete     | removes key in0..3; out0 = 1 if it was present |
//! | 3  | lookup_pkt | as lookup, the key being `key_size` bytes of packet memory at offset in8 |
//! | 4  | insert_pkt | as insert, key from packet memory at in8, value from in4..7 |
//! | 5  | delete_pkt | as delete, key from packet memory at in8 |
//!
//! A key reaching past the end of packet memory is a bad argument: the
//! handler faults with `copro`. Lookups do not refresh an entry's timestamp;
//! inserts do (a learning bridge re-inserts the source address of every
//! frame). Entries added by `load` are static and never age, until the data
//! plane inserts the same key, which makes it an ordinary, ageing entry.
//! Inserting a new key into a full table reuses the slot of an aged entry of
//! the key's buckets if there is one. `tick` sweeps the table incrementally,
//! at least once per `min(aging, 1 s)` of elapsed time; the first `tick`
//! and any tick after a longer pause sweep it whole.
//!
//! File format (`load`, `dump`, `netvm run APP.toml --load NAME=FILE`): one
//! entry per line, `KEY VALUE` (`KEY` alone when `value_size` is 0); `#`
//! starts a comment; blank lines are skipped.
//!
//! * `KEY`: exactly `key_size` bytes of hex, two digits per byte, optionally
//!   in groups separated by `:`, `-` or `.` (`aa:bb:cc:dd:ee:ff`,
//!   `aabb.ccdd.eeff`, `aabbccddeeff`), optionally `0x`-prefixed; or, when
//!   `key_size` is 4, a dotted-quad IPv4 address (`10.0.0.1`; four decimal
//!   numbers 0..=255 are always read as an address).
//! * `VALUE`: exactly `value_size` bytes of hex, `0x`-prefixed or with
//!   separators as for keys (`0x0000002a`, `00:00:00:2a`), or a decimal
//!   integer that fits in `value_size` bytes, stored big-endian (`42`).
//!
//! Loaded entries are added or replace existing ones; an error names the
//! 1-based line (entries before it stay loaded), as does a full table.
//! `dump` writes every live entry in this format, sorted by key, keys as
//! plain hex and values as `0x` hex, so a dump loads back. `clear` removes
//! every entry.
//!
//! Statistics: `entries` (stored, aged ones not yet purged included),
//! `capacity`, `lookups`, `hits`, `inserts` (successful, replacements
//! included), `insert_failures` (table full), `deletes` (of present
//! entries), `aged_out` (entries removed because they had aged).
//!
//! Compiled code: with keys of 4 to 16 bytes and values of at most 4,
//! `lookup_pkt` and `insert_pkt` are offered as walks
//! (`netvm_vm::BucketWalk`): JIT-compiled code hashes the key, compares
//! the two buckets' tags and the candidates' keys, checks the entry's age
//! and counts `lookups`, `hits` and `inserts` itself, without a call; an
//! insert of a key not stored (or stored but aged) calls, as does every
//! operation whose key lies within 8 bytes of the packet's end, and every
//! operation while a `shared` table serves several workers (the lock). In
//! a linked application the walk is compiled for the table's key and value
//! sizes (`Coprocessor::walk_shape`), as a C compiler would for a
//! `sizeof`, and calls where an instance of other sizes is bound instead.
//!
//! Several workers: the `workers` setting chooses between two semantics.
//! With one worker both behave as described above, at the same speed.
//!
//! * `shared` (the default; `Shared`): one table that every worker reads
//!   and writes, under a readers-writer lock: lookups take it shared,
//!   inserts, deletes, aging sweeps (`tick` from any worker), `load` and
//!   `clear` take it exclusively. An entry one worker inserts is visible to
//!   every other worker as soon as that insert returns, so to the packets
//!   the others run from then on (within the batches in flight, not in
//!   packet order: whether a packet on another worker that arrived just
//!   before or after the insert sees it depends on timing, and can vary
//!   from run to run). Under flow distribution the packets of a flow stay
//!   on one worker, so a flow always sees its own earlier inserts, in
//!   order. An entry's age counts from its latest insert by any worker.
//!   `lookups`, `hits`, `inserts`, `insert_failures` and `deletes` count
//!   every worker's operations, whichever handle reports them. While forks
//!   exist every operation writes a lock word, and which lock depends on
//!   `aging` (the results do not). Without aging (a table the packets look
//!   up and the control plane changes: forwarding, ACLs) the lock is
//!   crossbeam's `ShardedLock`: eight lock words, each on a cache line of its
//!   own, a reader taking its thread's, so up to eight workers looking up at
//!   once write no line in common and lookups scale with them (beyond eight,
//!   two workers share a word); a write takes all eight. With aging (a table
//!   whose entries the packets learn and refresh: a learning bridge writes
//!   on every frame) it is one lock word, so a write takes one lock, but
//!   every operation of every worker writes the same line, which moves
//!   between their cores and costs several times the lookup itself
//!   (`tests/table_workers.rs` measures both). A single worker's table takes
//!   no lock. Prefer `sharded` for per-flow state.
//! * `sharded` (`PerWorker`): one table per worker, each of the full
//!   `capacity`. A fork starts with a copy of the entries stored when it is
//!   made (what the control plane loaded and `.init` inserted), then learns
//!   only what its own worker's packets insert and sees only that: under
//!   flow distribution per-flow state (a table keyed by a flow's addresses
//!   and ports) behaves exactly as with one worker, but an entry learned
//!   from one flow is invisible to flows on other workers. No lock, no
//!   shared cache line. A `load` or `clear` during the run reaches only the
//!   handle it is given (the first worker's). At the end of a run `absorb`
//!   merges every worker's table into the first worker's: for a key that
//!   several hold, the entry with the latest insert wins (a learned entry
//!   wins over a static one; on a tie the first worker's stays); entries
//!   aged by then are dropped (counted in `aged_out`); a key deleted by one
//!   worker but still held by another comes back; entries that no longer
//!   fit count as `insert_failures`. The runtime sums the statistics over
//!   the workers (`entries` and `capacity` then add up over the tables).

mod exact;
mod file;

pub(crate) use exact::{key_words, prefetch};
pub use exact::{Entry, ExactTable, TableFull, INITIAL_BUCKETS, MAX_CAPACITY, MAX_KEY, MAX_VALUE, SLOTS, STATIC};

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crossbeam_utils::sync::{ShardedLock, ShardedLockReadGuard, ShardedLockWriteGuard};

use netvm_vm::{
    AheadKeys, BucketWalk, CoproConfig, CoproError, Coprocessor, DirectOp, InvokeContext, RegisterFile, Timestamp, WorkerShare,
};

use crate::ahead::Answers;
use crate::share::Tally;

/// Default `key_size`.
pub const DEFAULT_KEY_SIZE: usize = 4;
/// Default `value_size`.
pub const DEFAULT_VALUE_SIZE: usize = 4;
/// Default `capacity`.
pub const DEFAULT_CAPACITY: usize = 65536;
/// Longest interval between two complete aging sweeps by `tick`.
const SWEEP_PERIOD_NS: u64 = 1_000_000_000;

/// Statistics counters.
const LOOKUPS: usize = 0;
const HITS: usize = 1;
const INSERTS: usize = 2;
const INSERT_FAILURES: usize = 3;
const DELETES: usize = 4;

/// How a table serves several workers (the `workers` setting).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Workers {
    /// One table for every worker, under a lock (`workers = "shared"`).
    #[default]
    Shared,
    /// One table per worker, merged at the end (`workers = "sharded"`).
    Sharded,
}

/// The entries and the aging sweep: what the handles of a shared table share.
#[derive(Debug)]
struct Store {
    table: ExactTable,
    /// Latest time seen by an operation that changed the table or by `tick`.
    now: u64,
    last_sweep: Option<u64>,
    sweep_cursor: usize,
}

/// Where a handle's store is.
#[derive(Debug)]
enum Place {
    /// This handle's alone: no lock (one worker, or a sharded table).
    Own(Store),
    /// Shared with other handles (forks of a `shared` table).
    Shared(Arc<SharedLock>),
}

/// The lock of a shared store. Both give the same results; they differ in
/// what an operation costs with several workers.
#[derive(Debug)]
enum SharedLock {
    /// Eight lock words on lines of their own: lookups from up to eight
    /// workers write no line in common, a write takes all eight. For a
    /// table without aging, which the packets look up and the control
    /// plane changes.
    Readers(ShardedLock<Store>),
    /// One lock word: every operation writes it, a write takes one lock.
    /// For a table with aging, whose entries the packets insert and refresh
    /// (a learning bridge's on every frame).
    Writers(RwLock<Store>),
}

impl SharedLock {
    /// The lock for a table that ages entries after `aging_ns` (`u64::MAX`: never).
    fn new(s: Store, aging_ns: u64) -> SharedLock {
        if aging_ns == u64::MAX {
            SharedLock::Readers(ShardedLock::new(s))
        } else {
            SharedLock::Writers(RwLock::new(s))
        }
    }

    #[inline(always)]
    fn read(&self) -> ReadGuard<'_> {
        match self {
            SharedLock::Readers(l) => ReadGuard::Readers(l.read().unwrap_or_else(PoisonError::into_inner)),
            SharedLock::Writers(l) => ReadGuard::Writers(l.read().unwrap_or_else(PoisonError::into_inner)),
        }
    }

    #[inline(always)]
    fn write(&self) -> WriteGuard<'_> {
        match self {
            SharedLock::Readers(l) => WriteGuard::Readers(l.write().unwrap_or_else(PoisonError::into_inner)),
            SharedLock::Writers(l) => WriteGuard::Writers(l.write().unwrap_or_else(PoisonError::into_inner)),
        }
    }

    fn into_inner(self) -> Store {
        match self {
            SharedLock::Readers(l) => l.into_inner().unwrap_or_else(PoisonError::into_inner),
            SharedLock::Writers(l) => l.into_inner().unwrap_or_else(PoisonError::into_inner),
        }
    }
}

impl Place {
    /// A stand-in while the store moves between the two places.
    fn placeholder() -> Place {
        let table = ExactTable::with_layout(1, 0, 1, 1, 0).expect("a one-slot table");
        Place::Own(Store { table, now: 0, last_sweep: None, sweep_cursor: 0 })
    }
}

/// The store, read.
enum ReadGuard<'a> {
    Own(&'a Store),
    Readers(ShardedLockReadGuard<'a, Store>),
    Writers(RwLockReadGuard<'a, Store>),
}

impl Deref for ReadGuard<'_> {
    type Target = Store;
    #[inline(always)]
    fn deref(&self) -> &Store {
        match self {
            ReadGuard::Own(s) => s,
            ReadGuard::Readers(g) => g,
            ReadGuard::Writers(g) => g,
        }
    }
}

/// The store, to change.
enum WriteGuard<'a> {
    Own(&'a mut Store),
    Readers(ShardedLockWriteGuard<'a, Store>),
    Writers(RwLockWriteGuard<'a, Store>),
}

impl Deref for WriteGuard<'_> {
    type Target = Store;
    #[inline(always)]
    fn deref(&self) -> &Store {
        match self {
            WriteGuard::Own(s) => s,
            WriteGuard::Readers(g) => g,
            WriteGuard::Writers(g) => g,
        }
    }
}

impl DerefMut for WriteGuard<'_> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Store {
        match self {
            WriteGuard::Own(s) => s,
            WriteGuard::Readers(g) => g,
            WriteGuard::Writers(g) => g,
        }
    }
}

/// The [`ExactTable`] of a [`Table`], read (under the lock while shared).
pub struct TableRef<'a>(ReadGuard<'a>);

impl Deref for TableRef<'_> {
    type Target = ExactTable;
    fn deref(&self) -> &ExactTable {
        &self.0.table
    }
}

/// The [`ExactTable`] of a [`Table`], to change (under the lock while shared).
pub struct TableMut<'a>(WriteGuard<'a>);

impl Deref for TableMut<'_> {
    type Target = ExactTable;
    fn deref(&self) -> &ExactTable {
        &self.0.table
    }
}

impl DerefMut for TableMut<'_> {
    fn deref_mut(&mut self) -> &mut ExactTable {
        &mut self.0.table
    }
}

/// The `table` coprocessor.
#[derive(Debug)]
pub struct Table {
    place: Place,
    workers: Workers,
    key_size: usize,
    value_size: usize,
    /// Aging limit in ns; `u64::MAX` when entries never age.
    aging_ns: u64,
    input: [u32; 9],
    output: [u32; 5],
    /// Latest time this handle saw (packets and ticks): `dump` omits
    /// entries aged by then (or by the store's `now`, if later).
    now: u64,
    tally: Tally<5>,
    /// The answers of the last pre-lookup stage (`lookup_pkt` on a table
    /// of this handle alone whose entries never age): they depend on the
    /// key bytes and the entries, and every change of the entries forgets
    /// them.
    ahead: RefCell<Answers<5>>,
    /// The direct entries of every operation for compiled code (filled by
    /// `registers`, pointing at this handle): they read the packet and its
    /// time only.
    direct: [DirectOp; 6],
    /// The probe compiled code performs itself for `lookup_pkt` and
    /// `insert_pkt` (refreshed by `registers`; off while the store is
    /// shared or the sizes have none).
    walk: BucketWalk,
}

fn setting(cfg: &CoproConfig, name: &str, default: usize, range: std::ops::RangeInclusive<usize>) -> Result<usize, String> {
    let Some(s) = cfg.get(name) else {
        return Ok(default);
    };
    let v = s.trim().parse::<usize>().map_err(|_| format!("table: {name} `{s}` is not a number"))?;
    if !range.contains(&v) {
        return Err(format!("table: {name} must be between {} and {}, not {v}", range.start(), range.end()));
    }
    Ok(v)
}

pub(crate) fn create(cfg: &CoproConfig) -> Result<Box<dyn Coprocessor>, String> {
    if let Some(k) =
        cfg.keys().find(|k| !matches!(k.as_str(), "key_size" | "value_size" | "capacity" | "initial" | "aging" | "workers" | "seed"))
    {
        return Err(format!("table: unknown setting `{k}` (known: key_size, value_size, capacity, initial, aging, workers, seed)"));
    }
    let key_size = setting(cfg, "key_size", DEFAULT_KEY_SIZE, 1..=MAX_KEY)?;
    let value_size = setting(cfg, "value_size", DEFAULT_VALUE_SIZE, 0..=MAX_VALUE)?;
    let capacity = setting(cfg, "capacity", DEFAULT_CAPACITY, 1..=MAX_CAPACITY)?;
    let initial = setting(cfg, "initial", 0, 0..=capacity)?;
    let aging = match cfg.get("aging") {
        Some(s) => s.trim().parse::<u64>().map_err(|_| format!("table: aging `{s}` is not a whole number of seconds"))?,
        None => 0,
    };
    let aging_ns = match aging {
        0 => None,
        s => Some(s.checked_mul(1_000_000_000).ok_or_else(|| format!("table: aging {s} s is too long"))?),
    };
    let workers = match cfg.get("workers").map(|s| s.trim()) {
        None | Some("shared") => Workers::Shared,
        Some("sharded") => Workers::Sharded,
        Some(w) => return Err(format!("table: workers `{w}` is neither `shared` nor `sharded`")),
    };
    let seed = match cfg.get("seed").map(|s| s.trim()) {
        None => None,
        Some(s) => Some(
            s.strip_prefix("0x")
                .map_or_else(|| s.parse::<u64>(), |h| u64::from_str_radix(h, 16))
                .map_err(|_| format!("table: seed `{s}` is not a 64-bit number"))?,
        ),
    };
    let t = match seed {
        Some(seed) => Table::with_seed(key_size, value_size, capacity, aging_ns, seed),
        None => Table::new(key_size, value_size, capacity, aging_ns),
    };
    let mut t = t.map_err(|e| format!("table: {e}"))?.with_workers(workers);
    if initial > 0 {
        let mut s = t.store_mut();
        s.table.reserve(initial);
        if s.table.buckets() * SLOTS < initial {
            return Err(format!("table: cannot allocate the memory for {initial} entries"));
        }
    }
    Ok(Box::new(t))
}

/// Bytes `0..n` of `words`, big-endian per word.
fn unpack(words: &[u32]) -> [u8; 16] {
    let mut b = [0u8; 16];
    for (chunk, w) in b.chunks_exact_mut(4).zip(words) {
        chunk.copy_from_slice(&w.to_be_bytes());
    }
    b
}

/// A value as output words: byte `i` in word `i / 4`, big-endian, the
/// last word zero-padded. Read as two (overlapping) big-endian words, without
/// a loop or a copy: the value is at most 16 bytes.
#[inline(always)]
fn value_words(v: &[u8]) -> [u32; 4] {
    let n = v.len();
    let be64 = |i: usize| u64::from_be_bytes(v[i..i + 8].try_into().unwrap_or_default());
    let be32 = |i: usize| u64::from(u32::from_be_bytes(v[i..i + 4].try_into().unwrap_or_default()));
    // `hi`: bytes 0..8, `lo`: bytes 8..16 (zero-padded), left-aligned.
    let (hi, lo) = if (8..=16).contains(&n) {
        // The last eight bytes, shifted so that byte 8 is the top one.
        (be64(0), if n == 8 { 0 } else { be64(n - 8) << (8 * (16 - n)) })
    } else if (4..8).contains(&n) {
        (be32(0) << 32 | (be32(n - 4) << (8 * (8 - n))) & 0xffff_ffff, 0)
    } else {
        (v.iter().take(8).enumerate().fold(0, |acc, (j, b)| acc | u64::from(*b) << (56 - 8 * j)), 0)
    };
    [(hi >> 32) as u32, hi as u32, (lo >> 32) as u32, lo as u32]
}

/// How recent an entry is, for the merge: a static entry is older than any learned one.
fn recency(ts: u64) -> u64 {
    if ts == STATIC {
        0
    } else {
        ts + 1
    }
}

impl Table {
    /// A table of the given sizes; `aging_ns` is the idle limit (`None`:
    /// entries never age). Errors as [`ExactTable::new`]. It serves several
    /// workers as [`Workers::Shared`] unless [`Table::with_workers`] says otherwise.
    pub fn new(key_size: usize, value_size: usize, capacity: usize, aging_ns: Option<u64>) -> Result<Table, String> {
        Ok(Table::over(ExactTable::new(key_size, value_size, capacity)?, aging_ns))
    }

    /// As [`Table::new`], with a fixed hash seed instead of a random one
    /// ([`ExactTable::with_seed`]): where keys sit, and so what depends on
    /// it (which aged entry a full table reuses, which entries a sweep
    /// purges first), repeats from run to run.
    pub fn with_seed(key_size: usize, value_size: usize, capacity: usize, aging_ns: Option<u64>, seed: u64) -> Result<Table, String> {
        Ok(Table::over(ExactTable::with_seed(key_size, value_size, capacity, seed)?, aging_ns))
    }

    /// A table over the empty store `table`.
    fn over(mut table: ExactTable, aging_ns: Option<u64>) -> Table {
        table.set_aging(aging_ns);
        let (key_size, value_size) = (table.key_size(), table.value_size());
        Table {
            place: Place::Own(Store { table, now: 0, last_sweep: None, sweep_cursor: 0 }),
            workers: Workers::Shared,
            key_size,
            value_size,
            aging_ns: aging_ns.unwrap_or(u64::MAX),
            input: [0; 9],
            output: [0; 5],
            now: 0,
            tally: Tally::new(),
            ahead: RefCell::default(),
            direct: [DirectOp::NONE; 6],
            walk: BucketWalk::OFF,
        }
    }

    /// The same table, serving several workers as `workers` says.
    pub fn with_workers(mut self, workers: Workers) -> Table {
        self.workers = workers;
        self
    }

    /// How the table serves several workers.
    pub fn workers(&self) -> Workers {
        self.workers
    }

    /// The underlying table (read under the lock while forks share it:
    /// drop the guard before the next operation).
    pub fn table(&self) -> TableRef<'_> {
        TableRef(self.store())
    }

    /// The underlying table, for direct updates by the host application
    /// (under the lock while forks share it).
    pub fn table_mut(&mut self) -> TableMut<'_> {
        self.ahead.get_mut().clear();
        // The table may be replaced: compiled code calls until `registers`.
        self.walk = BucketWalk::OFF;
        TableMut(self.store_mut())
    }

    #[inline(always)]
    fn store(&self) -> ReadGuard<'_> {
        match &self.place {
            Place::Own(s) => ReadGuard::Own(s),
            Place::Shared(l) => l.read(),
        }
    }

    #[inline(always)]
    fn store_mut(&mut self) -> WriteGuard<'_> {
        match &mut self.place {
            Place::Own(s) => WriteGuard::Own(s),
            Place::Shared(l) => l.write(),
        }
    }

    /// Takes the store back from a lock no other handle holds any more
    /// (the forks of a run are gone), so that a single worker's operations
    /// take no lock again.
    fn unshare_if_sole(&mut self) {
        let Place::Shared(l) = &self.place else { return };
        if Arc::strong_count(l) != 1 || Arc::weak_count(l) != 0 {
            return;
        }
        let Place::Shared(l) = std::mem::replace(&mut self.place, Place::placeholder()) else { unreachable!() };
        self.place = match Arc::try_unwrap(l) {
            Ok(lock) => Place::Own(lock.into_inner()),
            Err(l) => Place::Shared(l),
        };
    }

    /// Points the probe compiled code performs at the store as it is now
    /// ([`BucketWalk`]): off while the store is shared (under a lock) or
    /// where the sizes have no probe.
    fn refresh_walk(&mut self) {
        let counters = self.tally.own_counters();
        let handle_now: *mut u64 = &mut self.now;
        self.walk = match &mut self.place {
            Place::Own(s) => match s.table.bucket_walk() {
                Some(w) => BucketWalk { counters, handle_now, store_now: &mut s.now, ..w },
                None => BucketWalk::OFF,
            },
            Place::Shared(_) => BucketWalk::OFF,
        };
    }

    /// The store behind a lock that forks can share.
    fn shared_store(&mut self) -> Arc<SharedLock> {
        self.walk = BucketWalk::OFF;
        if let Place::Own(_) = self.place {
            let Place::Own(s) = std::mem::replace(&mut self.place, Place::placeholder()) else { unreachable!() };
            self.place = Place::Shared(Arc::new(SharedLock::new(s, self.aging_ns)));
        }
        match &self.place {
            Place::Shared(l) => Arc::clone(l),
            Place::Own(_) => unreachable!("made shared above"),
        }
    }

    /// The key: `key_size` bytes of `regs` (in0..3 unpacked), or of packet
    /// memory at in8 (read in place: a copy followed by wider loads would
    /// stall on store forwarding).
    #[inline(always)]
    fn key<'a>(&self, from_packet: bool, packet: &'a [u8], regs: &'a [u8; 16]) -> Result<&'a [u8], CoproError> {
        let ks = self.key_size;
        if !from_packet {
            return Ok(&regs[..ks]);
        }
        let off = self.input[8] as usize;
        off.checked_add(ks).and_then(|end| packet.get(off..end)).ok_or_else(|| {
            CoproError::BadArgument(format!("key of {ks} bytes at packet offset {off} past the end ({} bytes)", packet.len()))
        })
    }

    /// Processes `op` at the packet's time. Inlined into each direct entry,
    /// where `op` is a constant and the dispatch folds away.
    #[inline(always)]
    fn op(&mut self, op: u8, ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        if op > 5 {
            return Err(CoproError::NoOperation(op));
        }
        let now = ctx.now.as_nanos();
        self.now = self.now.max(now);
        if op == 3 {
            if let Some((out, _)) = self.ahead.get_mut().take(ctx.packet, self.input[8] as usize) {
                self.tally.add(LOOKUPS, 1);
                self.tally.add(HITS, u64::from(out[0]));
                self.output = out;
                return Ok(());
            }
        } else if matches!(op, 1 | 2 | 4 | 5) {
            self.ahead.get_mut().clear();
        }
        let regs = unpack(&self.input[..4]);
        let key = self.key(op >= 3, ctx.packet, &regs)?;
        self.output = [0; 5];
        match op % 3 {
            0 => {
                self.tally.add(LOOKUPS, 1);
                let found = self.store().table.lookup_live(key, now).map(value_words);
                if let Some(words) = found {
                    self.tally.add(HITS, 1);
                    self.output[0] = 1;
                    self.output[1..].copy_from_slice(&words);
                }
            }
            1 => {
                let value = unpack(&self.input[4..8]);
                let vs = self.value_size;
                let (done, grew) = {
                    let mut s = self.store_mut();
                    s.now = s.now.max(now);
                    let before = s.table.buckets();
                    (s.table.insert(key, &value[..vs], now).is_ok(), s.table.buckets() != before)
                };
                if grew && !self.walk.tags.is_null() {
                    // The store moved: compiled code's next probe must see where to.
                    self.refresh_walk();
                }
                if done {
                    self.tally.add(INSERTS, 1);
                    self.output[0] = 1;
                } else {
                    self.tally.add(INSERT_FAILURES, 1);
                }
            }
            _ => {
                let done = {
                    let mut s = self.store_mut();
                    s.now = s.now.max(now);
                    s.table.delete_live(key, now)
                };
                if done {
                    self.tally.add(DELETES, 1);
                    self.output[0] = 1;
                }
            }
        }
        Ok(())
    }

    /// Merges the entries of `other`, another worker's table, into this one
    /// (the module documentation says which entry wins), leaving `other` empty.
    fn merge(&mut self, other: &mut Table) {
        self.ahead.get_mut().clear();
        let aging = self.aging_ns;
        let mut failures = 0;
        {
            let their_now = other.now;
            let mut theirs = other.store_mut();
            let now = self.now.max(their_now).max(theirs.now);
            let mut mine = self.store_mut();
            let now = now.max(mine.now);
            mine.now = now;
            let mut aged = 0;
            // A fork is a clone: while the two copies hold the same entries
            // (what the control plane loaded), each is at the same slot of
            // both, read in order instead of hashed and missed in cache.
            let near = mine.table.same_layout(&theirs.table);
            for (slot, e) in theirs.table.iter_slots() {
                if now.saturating_sub(e.timestamp) > aging {
                    aged += 1;
                    continue;
                }
                let held = if near { mine.table.get_near(e.key, slot) } else { mine.table.get(e.key) };
                if held.is_some_and(|m| recency(m.timestamp) >= recency(e.timestamp)) {
                    continue;
                }
                if mine.table.put(e.key, e.value, e.timestamp, now).is_err() {
                    failures += 1;
                }
            }
            let moved = theirs.table.take_aged_out() + aged;
            mine.table.add_aged_out(moved);
            theirs.table.clear();
        }
        self.now = self.now.max(other.now);
        self.tally.absorb(&other.tally);
        self.tally.add(INSERT_FAILURES, failures);
        if !self.walk.tags.is_null() {
            self.refresh_walk();
        }
    }
}

impl Coprocessor for Table {
    fn kind(&self) -> &str {
        "table"
    }

    fn write(&mut self, reg: u8, value: u32) -> Result<(), CoproError> {
        *self.input.get_mut(usize::from(reg)).ok_or(CoproError::NoRegister(reg))? = value;
        Ok(())
    }

    fn read(&mut self, reg: u8) -> Result<u32, CoproError> {
        self.output.get(usize::from(reg)).copied().ok_or(CoproError::NoRegister(reg))
    }

    fn registers(&mut self) -> RegisterFile {
        self.direct = [
            DirectOp::of::<Self, 0>(self),
            DirectOp::of::<Self, 1>(self),
            DirectOp::of::<Self, 2>(self),
            DirectOp::of::<Self, 3>(self),
            DirectOp::of::<Self, 4>(self),
            DirectOp::of::<Self, 5>(self),
        ];
        let file = RegisterFile::over(&mut self.input, &mut self.output).with_direct(&self.direct);
        // `lookup_pkt` and `insert_pkt` (the key at the packet offset in
        // in8) are the probe, as `WalkKind::ALL` says.
        self.refresh_walk();
        if self.walk.tags.is_null() {
            file
        } else {
            file.with_walk(&self.walk, 1 << 3 | 1 << 4)
        }
    }

    fn walk_shape(&self) -> u32 {
        BucketWalk::layout(self.key_size as u32, self.value_size as u32).map_or(0, |w| w.shape)
    }

    #[inline(always)]
    fn invoke(&mut self, op: u8, ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        self.op(op, ctx)
    }

    fn dump(&self) -> String {
        let s = self.store();
        let t = &s.table;
        let now = self.now.max(s.now);
        let mut live: Vec<Entry<'_>> = t.iter().filter(|e| now.saturating_sub(e.timestamp) <= self.aging_ns).collect();
        live.sort_unstable_by(|a, b| a.key.cmp(b.key));
        let mut out = String::with_capacity(live.len() * (2 * (t.key_size() + t.value_size()) + 4));
        for e in live {
            file::write_line(&mut out, e.key, e.value);
        }
        out
    }

    fn load(&mut self, text: &str) -> Result<usize, String> {
        self.ahead.get_mut().clear();
        self.unshare_if_sole();
        let (ks, vs) = (self.key_size, self.value_size);
        let handle_now = self.now;
        let loaded = {
            let mut s = self.store_mut();
            let now = handle_now.max(s.now);
            // Grown once for what the file may add (a line an entry at
            // most), not doubling on the way.
            let len = s.table.len();
            s.table.reserve(len.saturating_add(text.lines().count()));
            let mut added = 0;
            text.lines()
                .enumerate()
                .try_for_each(|(i, line)| {
                    let Some((k, v)) = file::parse_line(line, ks, vs).map_err(|e| format!("line {}: {e}", i + 1))? else {
                        return Ok(());
                    };
                    s.table
                        .put(&k[..ks], &v[..vs], STATIC, now)
                        .map_err(|_| format!("line {}: table full ({} entries)", i + 1, s.table.len()))?;
                    added += 1;
                    Ok(())
                })
                .map(|()| added)
        };
        if !self.walk.tags.is_null() {
            // The store may have grown (also where a later line failed).
            self.refresh_walk();
        }
        loaded
    }

    fn clear(&mut self) {
        self.ahead.get_mut().clear();
        self.unshare_if_sole();
        self.store_mut().table.clear();
    }

    fn lookahead(&self, op: u8) -> Option<u32> {
        // lookup_pkt, insert_pkt: the key at the packet offset in in8.
        matches!(op, 3 | 4).then_some(1 << 8)
    }

    /// Prefetches each key's first bucket, then the entry its tag points to
    /// or else the second bucket ([`ExactTable::prefetch_keys`]). `lookup_pkt` on a table this
    /// handle alone reaches, whose entries never age: looks the keys up in
    /// bulk instead ([`ExactTable::lookup_bulk`], the same prefetches) and
    /// keeps the answers for the lookups of the data path
    /// (`crate::ahead`), which take them unless an insert or delete came
    /// first.
    fn ahead(&self, op: u8, keys: &AheadKeys<'_>, prefetch: bool) {
        let mut kept = self.ahead.borrow_mut();
        kept.clear();
        if !prefetch || !matches!(op, 3 | 4) {
            return;
        }
        let ks = self.key_size;
        let s = self.store();
        // Where compiled code probes the table itself, a bulk lookup would
        // be done twice: prefetch only.
        let answer = op == 3 && self.aging_ns == u64::MAX && matches!(self.place, Place::Own(_)) && self.walk.tags.is_null();
        if !answer {
            s.table
                .prefetch_keys(keys.keys(8).filter_map(|(off, p)| (off as usize).checked_add(ks).and_then(|end| p.get(off as usize..end))));
            return;
        }
        let mut batch: [&[u8]; 64] = [&[]; 64];
        let mut at: [(usize, &[u8]); 64] = [(0, &[]); 64];
        let mut found: [Option<&[u8]>; 64] = [None; 64];
        let mut flush = |batch: &[&[u8]], at: &[(usize, &[u8])], kept: &mut Answers<5>| {
            let n = batch.len();
            s.table.lookup_bulk(batch, &mut found[..n]);
            for (&(off, p), f) in at[..n].iter().zip(&found[..n]) {
                let out = f.map_or([0; 5], |v| {
                    let w = value_words(v);
                    [1, w[0], w[1], w[2], w[3]]
                });
                kept.keep(p, off, off + ks, out, 0);
            }
        };
        let mut n = 0;
        for (off, p) in keys.keys(8) {
            if let Some(k) = (off as usize).checked_add(ks).and_then(|end| p.get(off as usize..end)) {
                batch[n] = k;
                at[n] = (off as usize, p);
                n += 1;
                if n == batch.len() {
                    flush(&batch, &at, &mut kept);
                    n = 0;
                }
            }
        }
        flush(&batch[..n], &at[..n], &mut kept);
    }

    fn tick(&mut self, now: Timestamp) {
        let now = now.as_nanos();
        self.now = self.now.max(now);
        self.unshare_if_sole();
        if self.aging_ns == u64::MAX {
            return;
        }
        let aging = self.aging_ns;
        let mut s = self.store_mut();
        s.now = s.now.max(now);
        let n = s.table.buckets();
        let period = aging.clamp(1, SWEEP_PERIOD_NS);
        let count = match s.last_sweep {
            Some(last) if now.saturating_sub(last) < period => {
                let elapsed = now.saturating_sub(last);
                (u128::from(elapsed) * n as u128).div_ceil(u128::from(period)) as usize
            }
            _ => n,
        };
        if count == 0 {
            return;
        }
        s.last_sweep = Some(now);
        let cursor = s.sweep_cursor;
        s.table.age_buckets(now, aging, cursor, count);
        s.sweep_cursor = (cursor + count) % n;
    }

    fn memory(&self) -> u64 {
        // At capacity: the table grows to it as it fills.
        self.store().table.memory_at_capacity() as u64
    }

    fn stats(&self) -> Vec<(String, u64)> {
        let (entries, capacity, aged_out) = {
            let s = self.store();
            (s.table.len() as u64, s.table.capacity() as u64, s.table.aged_out())
        };
        let t = self.tally.totals();
        [
            ("entries", entries),
            ("capacity", capacity),
            ("lookups", t[LOOKUPS]),
            ("hits", t[HITS]),
            ("inserts", t[INSERTS]),
            ("insert_failures", t[INSERT_FAILURES]),
            ("deletes", t[DELETES]),
            ("aged_out", aged_out),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    /// `shared`: another handle on the same table (from now on under a
    /// lock); `sharded`: a table of its own holding a copy of the entries.
    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        let (place, tally) = match self.workers {
            Workers::Shared => (Place::Shared(self.shared_store()), self.tally.share()),
            Workers::Sharded => {
                self.unshare_if_sole();
                let s = self.store();
                let mut table = s.table.clone();
                table.take_aged_out();
                let store = Store { table, now: s.now, last_sweep: s.last_sweep, sweep_cursor: s.sweep_cursor };
                (Place::Own(store), Tally::new())
            }
        };
        Ok(Box::new(Table {
            place,
            workers: self.workers,
            key_size: self.key_size,
            value_size: self.value_size,
            aging_ns: self.aging_ns,
            input: [0; 9],
            output: [0; 5],
            now: self.now,
            tally,
            ahead: RefCell::default(),
            direct: [DirectOp::NONE; 6],
            walk: BucketWalk::OFF,
        }))
    }

    fn share(&self) -> WorkerShare {
        match self.workers {
            Workers::Shared => WorkerShare::Shared,
            Workers::Sharded => WorkerShare::PerWorker,
        }
    }

    /// `sharded`: merges the other worker's table into this one (see the
    /// module documentation) and adds its statistics, leaving it empty.
    /// `shared`: nothing to do (one table), beyond keeping the latest time.
    fn absorb(&mut self, other: &mut dyn Coprocessor) {
        let Some(o) = crate::downcast::<Table>(other) else { return };
        if let (Place::Shared(a), Place::Shared(b)) = (&self.place, &o.place) {
            if Arc::ptr_eq(a, b) {
                self.now = self.now.max(o.now);
                return;
            }
        }
        self.merge(o);
    }
}

#[cfg(test)]
mod tests;
