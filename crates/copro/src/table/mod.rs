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
//! | `capacity`   | 65536   | most entries, 1..=2^25; memory is about `capacity × 1.11 × (key_size + value_size + 10)` bytes, allocated at creation |
//! | `aging`      | 0       | seconds; an entry whose last insert is more than `aging` seconds before now is absent for every operation, and `tick` purges it; 0 = entries never age |
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

mod exact;
mod file;

pub use exact::{Entry, ExactTable, TableFull, MAX_CAPACITY, MAX_KEY, MAX_VALUE, SLOTS, STATIC};

use netvm_vm::{CoproConfig, CoproError, Coprocessor, InvokeContext, Timestamp};

/// Default `key_size`.
pub const DEFAULT_KEY_SIZE: usize = 4;
/// Default `value_size`.
pub const DEFAULT_VALUE_SIZE: usize = 4;
/// Default `capacity`.
pub const DEFAULT_CAPACITY: usize = 65536;
/// Longest interval between two complete aging sweeps by `tick`.
const SWEEP_PERIOD_NS: u64 = 1_000_000_000;

/// The `table` coprocessor.
#[derive(Debug)]
pub struct Table {
    table: ExactTable,
    /// Aging limit in ns; `u64::MAX` when entries never age.
    aging_ns: u64,
    input: [u32; 9],
    output: [u32; 5],
    /// Packet offsets the `*_pkt` operations last read keys at (lookups,
    /// inserts): the batch prefetch looks there.
    pkt_offsets: [Option<usize>; 2],
    /// Latest time seen (packets and ticks): `dump` omits entries aged by then.
    now: u64,
    last_sweep: Option<u64>,
    sweep_cursor: usize,
    lookups: u64,
    hits: u64,
    inserts: u64,
    insert_failures: u64,
    deletes: u64,
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
    if let Some(k) = cfg.keys().find(|k| !matches!(k.as_str(), "key_size" | "value_size" | "capacity" | "aging")) {
        return Err(format!("table: unknown setting `{k}` (known: key_size, value_size, capacity, aging)"));
    }
    let key_size = setting(cfg, "key_size", DEFAULT_KEY_SIZE, 1..=MAX_KEY)?;
    let value_size = setting(cfg, "value_size", DEFAULT_VALUE_SIZE, 0..=MAX_VALUE)?;
    let capacity = setting(cfg, "capacity", DEFAULT_CAPACITY, 1..=MAX_CAPACITY)?;
    let aging = match cfg.get("aging") {
        Some(s) => s.trim().parse::<u64>().map_err(|_| format!("table: aging `{s}` is not a whole number of seconds"))?,
        None => 0,
    };
    let aging_ns = match aging {
        0 => None,
        s => Some(s.checked_mul(1_000_000_000).ok_or_else(|| format!("table: aging {s} s is too long"))?),
    };
    Ok(Box::new(Table::new(key_size, value_size, capacity, aging_ns).map_err(|e| format!("table: {e}"))?))
}

/// Bytes `0..n` of `words`, big-endian per word.
fn unpack(words: &[u32]) -> [u8; 16] {
    let mut b = [0u8; 16];
    for (chunk, w) in b.chunks_exact_mut(4).zip(words) {
        chunk.copy_from_slice(&w.to_be_bytes());
    }
    b
}

impl Table {
    /// A table of the given sizes; `aging_ns` is the idle limit (`None`:
    /// entries never age). Errors as [`ExactTable::new`].
    pub fn new(key_size: usize, value_size: usize, capacity: usize, aging_ns: Option<u64>) -> Result<Table, String> {
        let mut table = ExactTable::new(key_size, value_size, capacity)?;
        table.set_aging(aging_ns);
        Ok(Table {
            table,
            aging_ns: aging_ns.unwrap_or(u64::MAX),
            input: [0; 9],
            output: [0; 5],
            pkt_offsets: [None; 2],
            now: 0,
            last_sweep: None,
            sweep_cursor: 0,
            lookups: 0,
            hits: 0,
            inserts: 0,
            insert_failures: 0,
            deletes: 0,
        })
    }

    /// The underlying table.
    pub fn table(&self) -> &ExactTable {
        &self.table
    }

    /// The underlying table, for direct updates by the host application.
    pub fn table_mut(&mut self) -> &mut ExactTable {
        &mut self.table
    }

    /// The key: from in0..3, or `key_size` bytes of packet memory at in8.
    fn key(&self, from_packet: bool, packet: &[u8]) -> Result<[u8; 16], CoproError> {
        let ks = self.table.key_size();
        if !from_packet {
            return Ok(unpack(&self.input[..4]));
        }
        let off = self.input[8] as usize;
        let bytes = off.checked_add(ks).and_then(|end| packet.get(off..end)).ok_or_else(|| {
            CoproError::BadArgument(format!("key of {ks} bytes at packet offset {off} past the end ({} bytes)", packet.len()))
        })?;
        let mut k = [0u8; 16];
        k[..ks].copy_from_slice(bytes);
        Ok(k)
    }

    /// Processes `op` at time `now` (ns).
    fn op(&mut self, op: u8, ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        if op > 5 {
            return Err(CoproError::NoOperation(op));
        }
        let now = ctx.now.as_nanos();
        self.now = self.now.max(now);
        let key = self.key(op >= 3, ctx.packet)?;
        let key = &key[..self.table.key_size()];
        if op >= 3 && op != 5 {
            self.pkt_offsets[usize::from(op == 4)] = Some(self.input[8] as usize);
        }
        self.output = [0; 5];
        match op % 3 {
            0 => {
                self.lookups += 1;
                if let Some(v) = self.table.lookup_live(key, now) {
                    let mut b = [0u8; 16];
                    b[..v.len()].copy_from_slice(v);
                    self.hits += 1;
                    self.output[0] = 1;
                    for (o, c) in self.output[1..].iter_mut().zip(b.chunks_exact(4)) {
                        *o = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                    }
                }
            }
            1 => {
                let value = unpack(&self.input[4..8]);
                match self.table.insert(key, &value[..self.table.value_size()], now) {
                    Ok(()) => {
                        self.inserts += 1;
                        self.output[0] = 1;
                    }
                    Err(_) => self.insert_failures += 1,
                }
            }
            _ => {
                if self.table.delete_live(key, now) {
                    self.deletes += 1;
                    self.output[0] = 1;
                }
            }
        }
        Ok(())
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

    fn invoke(&mut self, op: u8, ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        self.op(op, ctx)
    }

    fn dump(&self) -> String {
        let t = &self.table;
        let mut live: Vec<Entry<'_>> = t.iter().filter(|e| self.now.saturating_sub(e.timestamp) <= self.aging_ns).collect();
        live.sort_unstable_by(|a, b| a.key.cmp(b.key));
        let mut out = String::with_capacity(live.len() * (2 * (t.key_size() + t.value_size()) + 4));
        for e in live {
            file::write_line(&mut out, e.key, e.value);
        }
        out
    }

    fn load(&mut self, text: &str) -> Result<usize, String> {
        let (ks, vs) = (self.table.key_size(), self.table.value_size());
        let mut added = 0;
        for (i, line) in text.lines().enumerate() {
            let Some((k, v)) = file::parse_line(line, ks, vs).map_err(|e| format!("line {}: {e}", i + 1))? else {
                continue;
            };
            self.table
                .put(&k[..ks], &v[..vs], STATIC, self.now)
                .map_err(|_| format!("line {}: table full ({} entries)", i + 1, self.table.len()))?;
            added += 1;
        }
        Ok(added)
    }

    fn clear(&mut self) {
        self.table.clear();
    }

    /// Prefetches the buckets of each packet's key at the offsets the
    /// `lookup_pkt` and `insert_pkt` operations last used.
    fn prefetch(&self, packets: &[netvm_vm::Packet]) {
        let ks = self.table.key_size();
        let mut keys: [&[u8]; 64] = [&[]; 64];
        for off in self.pkt_offsets.iter().flatten() {
            for chunk in packets.chunks(keys.len()) {
                let mut n = 0;
                for p in chunk {
                    if let Some(k) = off.checked_add(ks).and_then(|end| p.data.get(*off..end)) {
                        keys[n] = k;
                        n += 1;
                    }
                }
                self.table.prefetch_keys(&keys[..n]);
            }
        }
    }

    fn tick(&mut self, now: Timestamp) {
        let now = now.as_nanos();
        self.now = self.now.max(now);
        if self.aging_ns == u64::MAX {
            return;
        }
        let n = self.table.buckets();
        let period = self.aging_ns.clamp(1, SWEEP_PERIOD_NS);
        let count = match self.last_sweep {
            Some(last) if now.saturating_sub(last) < period => {
                let elapsed = now.saturating_sub(last);
                (u128::from(elapsed) * n as u128).div_ceil(u128::from(period)) as usize
            }
            _ => n,
        };
        if count == 0 {
            return;
        }
        self.last_sweep = Some(now);
        self.table.age_buckets(now, self.aging_ns, self.sweep_cursor, count);
        self.sweep_cursor = (self.sweep_cursor + count) % n;
    }

    fn stats(&self) -> Vec<(String, u64)> {
        [
            ("entries", self.table.len() as u64),
            ("capacity", self.table.capacity() as u64),
            ("lookups", self.lookups),
            ("hits", self.hits),
            ("inserts", self.inserts),
            ("insert_failures", self.insert_failures),
            ("deletes", self.deletes),
            ("aged_out", self.table.aged_out()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

#[cfg(test)]
mod tests;
