//! `names`: longest-prefix match of hierarchical names, the forwarding
//! table (FIB) of Named Data Networking, by hashed components.
//!
//! Packets carry names in the NDN packet format v0.3: a Name TLV (type 7)
//! holding name components, each a TLV of type 1 to 65535 (8: a generic
//! component); TLV-TYPE and TLV-LENGTH are variable-size numbers (one
//! byte below 253; 253, 254, 255 announce 2, 4, 8 more bytes, big-endian).
//! A prefix matches a name when its components are the name's first ones
//! (type and value); the lookup finds the longest. The table
//! ([`NameFib`]) stores each prefix under a hash of its components, the
//! hash chained component by component, as the seed paper's NDN
//! application does with DPDK's hash table: a lookup reads the name once,
//! hashes its prefixes up to the deepest stored one and probes them
//! longest first, skipping lengths no prefix has; a hit is checked against
//! the prefix's bytes, so hash collisions cannot misroute. The root prefix
//! `/` matches every well-formed name.
//!
//! Configuration: `capacity`, the most prefixes (default 65536, at most
//! 2^25; the root prefix does not count). Memory is up to about `capacity ×
//! 1.11 × 34` bytes (the index grows with the prefixes stored), plus the
//! prefixes' bytes.
//!
//! | register | meaning |
//! |----------|---------|
//! | in 8     | packet offset of a Name TLV, or of an Interest (type 5) or Data (type 6) TLV, whose first element is the Name |
//! | out 0    | 1 found, 0 no prefix matches, 2 malformed: no Name TLV at in8, a TLV that reaches past the one holding it or past the packet, a component type 0 or above 65535 |
//! | out 1    | the longest matching prefix's next hop; 0 otherwise |
//! | out 2    | its number of components (0 for `/`); 0 otherwise |
//!
//! | op | name   | effect |
//! |----|--------|--------|
//! | 0  | lookup | the longest stored prefix of the name at in8 (out 0..2) |
//!
//! An Interest or Data TLV whose length reaches past the captured bytes is
//! read as far as it goes: its Name must fit. Malformed names are an
//! answer, not a fault: they come from the traffic, which the program
//! cannot check beforehand without parsing the name itself. Registers other
//! than these, and other operations, do not exist.
//!
//! Control plane: `load` reads a prefix file and adds its prefixes (a later
//! line for the same prefix replaces its next hop), returning how many;
//! `clear` removes every prefix; `dump` writes them sorted by name, so that
//! a dump loads back. Statistics: `prefixes` (the root prefix included),
//! `capacity`, `depth` (the most components of a prefix), `lookups`, `hits`,
//! `malformed`, `probes` (hash-table probes of the lookups: their mean per
//! lookup is the cost of the longest-first search).
//!
//! Prefix file: one prefix per line, `NAME NEXTHOP`, e.g.
//! `/com/example/video 3` or `/ 0`. `NAME` is an NDN URI: `/`-separated
//! components, percent-encoded (`%2F`), a component of another type than 8
//! written `TYPE=VALUE` (`1=%AB%CD`), `...` the empty component (periods
//! only: three more than the value has), at most 64 components. `NEXTHOP`
//! is a decimal number below 2^32. `#` starts a comment; blank lines are
//! skipped; an error names the 1-based line, and the file is checked whole
//! before any prefix is added; a full table stops the load at its line.
//!
//! Several workers: one table that every worker reads (`Shared`), without a
//! lock, read-only while several handles exist (a `load` returns an error,
//! `clear` does nothing); `lookups`, `hits`, `malformed` and `probes` count
//! every worker's operations.
//!
//! Computation batching (`--batching prefetch`): the pre-lookup stage
//! looks the names of a sub-batch up in bulk ([`NameFib::lookup_bulk`]:
//! the probes of 32 names advance together in rounds, their cache misses
//! overlapping, as DPDK's bulk hash lookups do) and keeps each answer with
//! a copy of the bytes it depends on (from in8 to the end of the name). A
//! lookup of the data path takes that answer only for the same packet,
//! offset and bytes; otherwise (a packet changed on the way, another
//! offset) it looks up afresh. The table cannot change between the stage
//! and the lookups, so the answers are the same either way.

mod fib;
mod uri;

pub use fib::{encode_name, BulkAnswer, Component, FibError, NameFib, NameMatch, MAX_CAPACITY, MAX_COMPONENTS};
pub use uri::{format_name, parse_name, parse_prefixes, prefix_lines, NameRoute};

use std::cell::RefCell;
use std::fmt::Write;
use std::sync::Arc;

use netvm_vm::{AheadKeys, CoproConfig, CoproError, Coprocessor, DirectOp, InvokeContext, RegisterFile, WorkerShare};

use crate::ahead::Answers;
use crate::share::Tally;

/// Statistics counters.
const LOOKUPS: usize = 0;
const HITS: usize = 1;
const MALFORMED: usize = 2;
const PROBES: usize = 3;

/// Default `capacity`.
const DEFAULT_CAPACITY: usize = 65536;

/// What a control-plane load says while the table is shared.
const SHARED_LOAD: &str = "prefixes cannot change while several workers share the table; load them before the run starts";

/// The `names` coprocessor (see the module documentation).
#[derive(Debug)]
pub struct NamesCoprocessor {
    fib: Arc<NameFib>,
    input: [u32; 9],
    output: [u32; 3],
    tally: Tally<4>,
    /// The answers of the last pre-lookup stage: they depend on the
    /// packet bytes from in8 to the name's end, and on the table, which
    /// only the control plane changes (never between a batch's stage and
    /// its lookups).
    ahead: RefCell<Answers<3>>,
    /// The direct entry of `lookup` for compiled code (filled by `registers`).
    direct: [DirectOp; 1],
}

fn output(m: NameMatch) -> [u32; 3] {
    match m {
        NameMatch::Found { next_hop, components } => [1, next_hop, components],
        NameMatch::Missing => [0, 0, 0],
        NameMatch::Malformed => [2, 0, 0],
    }
}

impl NamesCoprocessor {
    /// An instance over `fib`.
    pub fn new(fib: NameFib) -> NamesCoprocessor {
        NamesCoprocessor {
            fib: Arc::new(fib),
            input: [0; 9],
            output: [0; 3],
            tally: Tally::new(),
            ahead: RefCell::default(),
            direct: [DirectOp::NONE],
        }
    }

    /// The table.
    pub fn fib(&self) -> &NameFib {
        &self.fib
    }

    /// The table, to change; `None` while other workers' handles share it.
    pub fn fib_mut(&mut self) -> Option<&mut NameFib> {
        self.ahead.get_mut().clear();
        Arc::get_mut(&mut self.fib)
    }
}

/// Creates an instance from its configuration (see the module documentation).
pub(crate) fn create(cfg: &CoproConfig) -> Result<Box<dyn Coprocessor>, String> {
    if let Some(k) = cfg.keys().find(|k| k.as_str() != "capacity") {
        return Err(format!("names: unknown setting `{k}` (known: capacity)"));
    }
    let capacity = match cfg.get("capacity") {
        Some(s) => match s.parse::<usize>() {
            Ok(n) if (1..=MAX_CAPACITY).contains(&n) => n,
            _ => return Err(format!("names: capacity `{s}` is not a number from 1 to {MAX_CAPACITY}")),
        },
        None => DEFAULT_CAPACITY,
    };
    Ok(Box::new(NamesCoprocessor::new(NameFib::new(capacity).map_err(|e| format!("names: {e}"))?)))
}

impl Coprocessor for NamesCoprocessor {
    fn kind(&self) -> &str {
        "names"
    }

    fn write(&mut self, reg: u8, value: u32) -> Result<(), CoproError> {
        match reg {
            8 => {
                self.input[8] = value;
                Ok(())
            }
            _ => Err(CoproError::NoRegister(reg)),
        }
    }

    fn read(&mut self, reg: u8) -> Result<u32, CoproError> {
        self.output.get(usize::from(reg)).copied().ok_or(CoproError::NoRegister(reg))
    }

    fn registers(&mut self) -> RegisterFile {
        // `lookup` reads the registers and the packet only.
        self.direct = [DirectOp::of::<Self, 0>(self)];
        RegisterFile::new(&mut self.input, 1 << 8, &mut self.output, u32::MAX).with_direct(&self.direct)
    }

    fn invoke(&mut self, op: u8, ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        if op != 0 {
            return Err(CoproError::NoOperation(op));
        }
        let off = self.input[8] as usize;
        let (out, probes) = match self.ahead.get_mut().take(ctx.packet, off) {
            Some((out, probes)) => (out, u64::from(probes)),
            None => {
                let mut probes = 0;
                (output(self.fib.lookup(ctx.packet, off, &mut probes)), probes)
            }
        };
        self.output = out;
        self.tally.add(LOOKUPS, 1);
        self.tally.add(PROBES, probes);
        match out[0] {
            1 => self.tally.add(HITS, 1),
            2 => self.tally.add(MALFORMED, 1),
            _ => {}
        }
        Ok(())
    }

    fn lookahead(&self, op: u8) -> Option<u32> {
        (op == 0).then_some(1 << 8)
    }

    /// Looks the names up in bulk ([`NameFib::lookup_bulk`]), keeping the
    /// answers for the lookups of the data path (`crate::ahead`).
    fn ahead(&self, op: u8, keys: &AheadKeys<'_>, prefetch: bool) {
        let mut a = self.ahead.borrow_mut();
        a.clear();
        if !prefetch || op != 0 {
            return;
        }
        let names: Vec<(usize, &[u8])> = keys.keys(8).map(|(off, p)| (off as usize, p)).collect();
        let mut answers = vec![BulkAnswer::default(); names.len()];
        self.fib.lookup_bulk(&names, &mut answers);
        for ((off, packet), b) in names.iter().zip(&answers) {
            if b.end != 0 {
                a.keep(packet, *off, b.end, output(b.answer), b.probes);
            }
        }
    }

    fn dump(&self) -> String {
        let mut all: Vec<(String, u32)> = self.fib.iter().map(|(p, nh)| (format_name(&p), nh)).collect();
        all.sort_unstable();
        let mut s = String::new();
        for (name, nh) in all {
            let _ = writeln!(s, "{name} {nh}");
        }
        s
    }

    fn load(&mut self, text: &str) -> Result<usize, String> {
        self.ahead.get_mut().clear();
        // Checked whole first (nothing is added from a bad file), then
        // read again to add: a million prefixes parsed at once would take
        // several times the table's memory.
        prefix_lines(text).try_for_each(|r| r.map(drop))?;
        let fib = Arc::get_mut(&mut self.fib).ok_or(SHARED_LOAD)?;
        let mut n = 0;
        for r in prefix_lines(text) {
            let (line, r) = r?;
            fib.insert(&r.prefix, r.next_hop).map_err(|e| format!("line {line}: {}: {e}", format_name(&r.prefix)))?;
            n += 1;
        }
        Ok(n)
    }

    /// Removes every prefix (nothing while several workers share the table).
    fn clear(&mut self) {
        self.ahead.get_mut().clear();
        if let Some(f) = Arc::get_mut(&mut self.fib) {
            f.clear();
        }
    }

    fn memory(&self) -> u64 {
        self.fib.memory_at_capacity() as u64
    }

    fn stats(&self) -> Vec<(String, u64)> {
        let t = self.tally.totals();
        vec![
            ("prefixes".to_string(), self.fib.len() as u64),
            ("capacity".to_string(), self.fib.capacity() as u64),
            ("depth".to_string(), self.fib.depth() as u64),
            ("lookups".to_string(), t[LOOKUPS]),
            ("hits".to_string(), t[HITS]),
            ("malformed".to_string(), t[MALFORMED]),
            ("probes".to_string(), t[PROBES]),
        ]
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    /// Another handle on the same table.
    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        Ok(Box::new(NamesCoprocessor {
            fib: Arc::clone(&self.fib),
            input: [0; 9],
            output: [0; 3],
            tally: self.tally.share(),
            ahead: RefCell::default(),
            direct: [DirectOp::NONE],
        }))
    }

    fn share(&self) -> WorkerShare {
        WorkerShare::Shared
    }
}

#[cfg(test)]
mod tests;
