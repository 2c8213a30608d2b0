//! `addrset`: named sets of IPv4 prefixes, and which sets contain an
//! address: every one, not only the longest match (IP reputation and
//! block lists, address-keyed rule groups: the IDS finds the rules whose
//! address lists hold a packet's source or destination with one search,
//! as Suricata's IP-only engine does with its radix tree).
//!
//! A set is identified by a `u32` id within a `u32` group, and holds any
//! number of prefixes; a prefix may belong to several sets. A search of
//! group G for address A reports the id of every set of G with a prefix
//! containing A, each once, ascending.
//!
//! The store: per group, the prefixes form a tree (two prefixes are
//! either nested or disjoint), and the address space is cut into
//! intervals, each tagged with the deepest prefix covering it. A search
//! is a binary search over the interval starts, then a walk up the
//! prefix's ancestors gathering their set ids: `O(log n + depth)` with at
//! most 33 levels, and memory linear in the prefixes, however the sets
//! overlap.
//!
//! | register | meaning |
//! |----------|---------|
//! | in 0     | group |
//! | in 1     | address (IPv4, as `pkt.ld32` loads it) |
//! | in 2     | set id (`contains`) |
//! | out 0    | `search`: number of sets found; `next`: 1 if an id was popped, 0 when exhausted; `contains`: 1 or 0 |
//! | out 1    | set id (`next`) |
//!
//! | op | name       | effect |
//! |----|------------|--------|
//! | 0  | `search`   | collects the ids of every set of group in0 containing address in1 (replacing earlier ones); out0 = how many; none popped yet |
//! | 1  | `next`     | pops the next collected id (ascending) into out1 |
//! | 2  | `contains` | out0 = 1 if set in2 of group in0 contains address in1 |
//!
//! An unknown group has no sets: nothing is found, never a fault.
//!
//! Table file (`load`): one prefix per line, `ID GROUP PREFIX[/LEN]`
//! (decimal id and group, an IPv4 address, a length 0..=32; no length
//! means /32), e.g. `7 1 192.0.2.0/24`. `#` starts a comment; blank lines
//! are skipped; fields are separated by spaces or tabs. Bits set beyond
//! the length (`10.0.0.1/8`), a bad number or address and trailing text
//! are errors naming the 1-based line; a file loads whole or not at all.
//! The same line twice is one entry. At most [`MAX_ENTRIES`] entries.
//! `dump` writes the entries sorted by group, address, length and id, so
//! that a dump loads back; `clear` removes them all. There is no
//! configuration. Statistics: `entries`, `groups`, `searches` (search and
//! contains operations), `hits` (those that found a set).
//!
//! Several workers: one store that every worker reads (`Shared`), without
//! a lock; each handle has its own registers and collected ids. While
//! several handles exist the sets cannot change: `load` returns an error
//! and `clear` does nothing (load them before the run starts).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::sync::Arc;

use netvm_vm::{CoproConfig, CoproError, Coprocessor, InvokeContext, RegisterFile, WorkerShare};

use crate::share::Tally;

/// Most entries (prefix, set) in one instance.
pub const MAX_ENTRIES: usize = 1 << 24;

/// No prefix covers the interval.
const NONE: u32 = u32::MAX;

/// A prefix of a group's tree.
#[derive(Clone, Debug)]
struct Node {
    /// The enclosing prefix, or [`NONE`].
    parent: u32,
    /// Its set ids: `ids[first..first + count]`, ascending.
    first: u32,
    count: u32,
}

/// One group's prefixes, as a tree and intervals.
#[derive(Clone, Debug, Default)]
struct Group {
    /// Interval starts, ascending; the first is 0.
    starts: Vec<u32>,
    /// The deepest prefix covering each interval, or [`NONE`].
    deepest: Vec<u32>,
    nodes: Vec<Node>,
    ids: Vec<u32>,
}

fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    }
}

impl Group {
    /// Builds the tree and intervals of `prefixes`: (net, len) → set ids.
    fn build(prefixes: &BTreeMap<(u32, u8), Vec<u32>>) -> Group {
        let mut g = Group::default();
        // Sorted by (net, len): an enclosing prefix comes before what it encloses.
        let mut stack: Vec<(u32, u64)> = Vec::new(); // (node, end exclusive)
        let mut pos: u64 = 0;
        let emit = |g: &mut Group, pos: &mut u64, to: u64, node: u32| {
            if *pos < to {
                if g.deepest.last() != Some(&node) {
                    g.starts.push(*pos as u32);
                    g.deepest.push(node);
                }
                *pos = to;
            }
        };
        for (&(net, len), ids) in prefixes {
            let start = u64::from(net);
            let end = start + (1u64 << (32 - u32::from(len)));
            while let Some(&(node, top_end)) = stack.last() {
                if top_end > start {
                    break;
                }
                // The top ends before this prefix: the rest of it is its own.
                emit(&mut g, &mut pos, top_end, node);
                stack.pop();
            }
            let parent = stack.last().map_or(NONE, |&(n, _)| n);
            emit(&mut g, &mut pos, start, parent);
            let node = g.nodes.len() as u32;
            g.nodes.push(Node { parent, first: g.ids.len() as u32, count: ids.len() as u32 });
            g.ids.extend_from_slice(ids);
            stack.push((node, end));
        }
        while let Some((node, end)) = stack.pop() {
            emit(&mut g, &mut pos, end, node);
        }
        emit(&mut g, &mut pos, 1 << 32, NONE);
        g
    }

    /// The deepest prefix containing `addr`, or [`NONE`].
    fn deepest(&self, addr: u32) -> u32 {
        let i = self.starts.partition_point(|&s| s <= addr);
        if i == 0 {
            NONE
        } else {
            self.deepest[i - 1]
        }
    }

    /// The ids of the sets containing `addr` into `out` (cleared first), ascending, each once.
    fn search(&self, addr: u32, out: &mut Vec<u32>) {
        out.clear();
        let mut n = self.deepest(addr);
        let mut levels = 0;
        while n != NONE {
            let node = &self.nodes[n as usize];
            out.extend_from_slice(&self.ids[node.first as usize..(node.first + node.count) as usize]);
            n = node.parent;
            levels += 1;
        }
        if levels > 1 {
            out.sort_unstable();
            out.dedup();
        }
    }

    fn contains(&self, addr: u32, id: u32) -> bool {
        let mut n = self.deepest(addr);
        while n != NONE {
            let node = &self.nodes[n as usize];
            if self.ids[node.first as usize..(node.first + node.count) as usize].binary_search(&id).is_ok() {
                return true;
            }
            n = node.parent;
        }
        false
    }
}

/// Every group's sets, as loaded.
#[derive(Clone, Debug, Default)]
pub struct AddrSets {
    /// group → (net, len) → set ids, ascending.
    entries: BTreeMap<u32, BTreeMap<(u32, u8), Vec<u32>>>,
    /// The compiled groups, by group id.
    groups: BTreeMap<u32, Group>,
    len: usize,
}

/// One line of a table file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The set's id.
    pub id: u32,
    /// The set's group.
    pub group: u32,
    /// The prefix's address (host bits clear).
    pub net: u32,
    /// The prefix length, 0..=32.
    pub len: u8,
}

/// Parses a table file (see the module documentation): the entries, or an
/// error naming the 1-based line.
pub fn parse(text: &str) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let err = |what: &str| format!("line {}: {what} in `{line}` (expected `ID GROUP PREFIX[/LEN]`)", i + 1);
        let mut f = line.split_ascii_whitespace();
        let (Some(id), Some(group), Some(prefix)) = (f.next(), f.next(), f.next()) else {
            return Err(err("missing fields"));
        };
        if f.next().is_some() {
            return Err(err("trailing text"));
        }
        let id: u32 = id.parse().map_err(|_| err("bad id"))?;
        let group: u32 = group.parse().map_err(|_| err("bad group"))?;
        let (addr, len) = match prefix.split_once('/') {
            Some((a, l)) => (a, l.parse::<u8>().ok().filter(|l| *l <= 32).ok_or_else(|| err("bad prefix length"))?),
            None => (prefix, 32),
        };
        let net = u32::from(addr.parse::<Ipv4Addr>().map_err(|_| err("bad IPv4 address"))?);
        if net & !mask(len) != 0 {
            return Err(err("bits set beyond the prefix length"));
        }
        out.push(Entry { id, group, net, len });
        if out.len() > MAX_ENTRIES {
            return Err(format!("line {}: more than {MAX_ENTRIES} entries", i + 1));
        }
    }
    Ok(out)
}

impl AddrSets {
    /// No sets.
    pub fn new() -> AddrSets {
        AddrSets::default()
    }

    /// Adds `entries` (all or none) and rebuilds the groups they touch.
    pub fn add(&mut self, entries: &[Entry]) -> Result<usize, String> {
        if self.len + entries.len() > MAX_ENTRIES {
            return Err(format!("addrset: more than {MAX_ENTRIES} entries"));
        }
        let mut touched = std::collections::BTreeSet::new();
        for e in entries {
            let ids = self.entries.entry(e.group).or_default().entry((e.net, e.len)).or_default();
            if let Err(at) = ids.binary_search(&e.id) {
                ids.insert(at, e.id);
                self.len += 1;
            }
            touched.insert(e.group);
        }
        for g in touched {
            self.groups.insert(g, Group::build(&self.entries[&g]));
        }
        Ok(entries.len())
    }

    /// The ids of the sets of `group` containing `addr` into `out` (cleared
    /// first), ascending, each once.
    pub fn search(&self, group: u32, addr: u32, out: &mut Vec<u32>) {
        match self.groups.get(&group) {
            Some(g) => g.search(addr, out),
            None => out.clear(),
        }
    }

    /// Whether set `id` of `group` contains `addr`.
    pub fn contains(&self, group: u32, id: u32, addr: u32) -> bool {
        self.groups.get(&group).is_some_and(|g| g.contains(addr, id))
    }

    /// How many (prefix, set) entries there are.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entries in table-file format, sorted by group, address, length, id.
    pub fn dump(&self) -> String {
        let mut s = String::new();
        for (group, prefixes) in &self.entries {
            for (&(net, len), ids) in prefixes {
                for id in ids {
                    let _ = writeln!(s, "{id} {group} {}/{len}", Ipv4Addr::from(net));
                }
            }
        }
        s
    }
}

const SEARCHES: usize = 0;
const HITS: usize = 1;
const SHARED_LOAD: &str = "addrset: the sets cannot change while several workers share them; load them before the run";

/// The `addrset` coprocessor: a handle on shared sets.
#[derive(Debug)]
pub struct AddrSetCopro {
    sets: Arc<AddrSets>,
    input: [u32; 3],
    output: [u32; 2],
    found: Vec<u32>,
    popped: usize,
    tally: Tally<2>,
}

impl AddrSetCopro {
    /// An instance without sets.
    pub fn new() -> AddrSetCopro {
        AddrSetCopro { sets: Arc::new(AddrSets::new()), input: [0; 3], output: [0; 2], found: Vec::new(), popped: 0, tally: Tally::new() }
    }

    /// The sets.
    pub fn sets(&self) -> &AddrSets {
        &self.sets
    }
}

impl Default for AddrSetCopro {
    fn default() -> AddrSetCopro {
        AddrSetCopro::new()
    }
}

/// Creates an instance (there is no configuration).
pub(crate) fn create(cfg: &CoproConfig) -> Result<Box<dyn Coprocessor>, String> {
    if let Some(k) = cfg.keys().next() {
        return Err(format!("addrset: unknown setting `{k}` (it has none)"));
    }
    Ok(Box::new(AddrSetCopro::new()))
}

impl Coprocessor for AddrSetCopro {
    fn kind(&self) -> &str {
        "addrset"
    }

    fn write(&mut self, reg: u8, value: u32) -> Result<(), CoproError> {
        let r = self.input.get_mut(usize::from(reg)).ok_or(CoproError::NoRegister(reg))?;
        *r = value;
        Ok(())
    }

    fn read(&mut self, reg: u8) -> Result<u32, CoproError> {
        self.output.get(usize::from(reg)).copied().ok_or(CoproError::NoRegister(reg))
    }

    fn registers(&mut self) -> RegisterFile {
        RegisterFile::over(&mut self.input, &mut self.output)
    }

    fn invoke(&mut self, op: u8, _ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        let [group, addr, id] = self.input;
        match op {
            0 => {
                self.sets.search(group, addr, &mut self.found);
                self.popped = 0;
                self.tally.add(SEARCHES, 1);
                self.tally.add(HITS, u64::from(!self.found.is_empty()));
                self.output = [self.found.len() as u32, 0];
            }
            1 => {
                self.output = match self.found.get(self.popped) {
                    Some(&id) => {
                        self.popped += 1;
                        [1, id]
                    }
                    None => [0, 0],
                };
            }
            2 => {
                let yes = self.sets.contains(group, id, addr);
                self.tally.add(SEARCHES, 1);
                self.tally.add(HITS, u64::from(yes));
                self.output = [u32::from(yes), 0];
            }
            _ => return Err(CoproError::NoOperation(op)),
        }
        Ok(())
    }

    fn dump(&self) -> String {
        self.sets.dump()
    }

    fn load(&mut self, text: &str) -> Result<usize, String> {
        let entries = parse(text)?;
        Arc::get_mut(&mut self.sets).ok_or(SHARED_LOAD)?.add(&entries)
    }

    /// Removes every set (nothing while several workers share them).
    fn clear(&mut self) {
        if let Some(s) = Arc::get_mut(&mut self.sets) {
            *s = AddrSets::new();
        }
        self.found.clear();
    }

    fn stats(&self) -> Vec<(String, u64)> {
        let t = self.tally.totals();
        vec![
            ("entries".to_string(), self.sets.len() as u64),
            ("groups".to_string(), self.sets.groups.len() as u64),
            ("searches".to_string(), t[SEARCHES]),
            ("hits".to_string(), t[HITS]),
        ]
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    /// Another handle on the same sets.
    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        Ok(Box::new(AddrSetCopro {
            sets: Arc::clone(&self.sets),
            input: [0; 3],
            output: [0; 2],
            found: Vec::new(),
            popped: 0,
            tally: self.tally.share(),
        }))
    }

    fn share(&self) -> WorkerShare {
        WorkerShare::Shared
    }
}

#[cfg(test)]
mod tests;
