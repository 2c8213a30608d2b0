//! `lpm`: longest-prefix match over IPv4 or IPv6 routes.
//!
//! This module owns the route table ([`Lpm`], [`Lpm4`], [`Lpm6`]: a
//! multibit trie with prefix expansion and depth-tagged entries, the DPDK
//! `rte_lpm` algorithm; DIR-24-8 for IPv4, and for IPv6 a 24-bit first
//! level then 8-bit strides, as `rte_lpm6`), the route file format ([`parse_routes`]) and the
//! coprocessor ([`LpmCoprocessor`]). Benchmarks and host code can use the
//! table directly, including [`Lpm::lookup_bulk`] for batches.
//!
//! Configuration: `family` = `ipv4` (default) or `ipv6`; `tbl8_groups`, the
//! most 256-entry groups the table may use (default 65536 for IPv4, 131072
//! for IPv6, at most 2^24; each group is 1 KiB). A prefix longer than the
//! first level (/24) needs a group per further 8 bits
//! that no other rule already made; an insert that would exceed the budget
//! fails and changes nothing. The first level takes 64 MiB of address
//! space, backed only where routes are written (on Linux by transparent
//! huge pages).
//!
//! | register | meaning |
//! |----------|---------|
//! | in 0..3  | address: IPv4 in in0; IPv6 as four big-endian words, in0 most significant .. in3 (what `pkt.ld32` at offsets +0, +4, +8, +12 loads) |
//! | in 4     | prefix length (insert, delete) |
//! | in 5     | next hop (insert) |
//! | in 8     | packet offset (lookup_pkt) |
//! | out 0    | 1 found / done, 0 not found |
//! | out 1    | next hop (lookup, lookup_pkt), 0 on a miss and after insert/delete |
//!
//! | op | name       | effect |
//! |----|------------|--------|
//! | 0  | lookup     | longest match of the address in in0..3: out0 = 1, out1 = its next hop; or out0 = out1 = 0 |
//! | 1  | insert     | add the prefix in0..3/in4 with next hop in5, or replace the next hop of an existing one: out0 = 1, or 0 if the group budget is exhausted (nothing changed) |
//! | 2  | delete     | remove the prefix in0..3/in4: out0 = 1 if it existed; the next longest covering route takes over |
//! | 3  | lookup_pkt | like lookup, the address read big-endian from packet memory at offset in8 (4 bytes for IPv4, 16 for IPv6) |
//!
//! Insert and delete with a length above 32 (128), address bits set beyond
//! the length, or (insert) a next hop of 2^24 or more, and a lookup_pkt
//! reading past the end of the packet, are bad arguments: the handler
//! faults with `copro`. Registers in 6, in 7 and out 2 and above do not
//! exist; other operations neither.
//!
//! Control plane: `load` reads a route file (below) and inserts its routes,
//! returning how many; `clear` removes every route; `dump` writes the routes
//! in the route file format, sorted by address then length, so that a dump
//! loads back. Statistics: `routes`, `tbl8_groups_used`, `tbl8_groups` (the
//! budget), `lookups` and `hits` (lookup and lookup_pkt operations, and
//! those that found a route).
//!
//! Route file: one route per line, `PREFIX[/LEN] NEXTHOP`, e.g.
//! `10.0.0.0/8 1` or `2001:db8::/32 3`. `#` starts a comment; blank lines
//! are ignored; fields are separated by spaces or tabs. A missing `/LEN`
//! means a host route. The next hop is a decimal integer below 2^24. A bad
//! address, a length out of range, bits set beyond the length (`10.0.0.1/8`
//! is an error, as with `ip route`), an address of the other family, a bad
//! next hop or trailing text is an error naming the 1-based line and the
//! text. A later line for the same prefix replaces the earlier one. The file
//! is checked whole before any route is inserted; an exhausted group budget
//! stops the load at the line that needed a group.
//!
//! Compiled code: IPv4 `lookup` and `lookup_pkt` are offered as walks
//! (`netvm_vm::Dir24Walk`): JIT-compiled code reads the first level and
//! the group itself and counts `lookups` and `hits` in this handle's
//! counters, without a call; an insert or delete points the walk at the
//! changed table. IPv6 lookups are direct entries (calls).
//!
//! Several workers: one route table that every worker reads (`Shared`),
//! without a lock; a fork has its own registers.
//! `lookups` and `hits` count every worker's operations, whichever handle
//! reports them. While several handles exist the routes cannot change: an
//! insert or delete from the data plane faults (`copro`: routes cannot
//! change from the data plane while several workers share the table; change
//! them through the control plane), a control-plane `load` returns an error
//! and `clear` does nothing; load routes before the run starts. With one
//! handle (one worker) inserts, deletes, loads and clears work as described
//! above.

mod routes;
mod table;

pub use routes::{parse_routes, Family, Route};
pub use table::{Lpm, Lpm4, Lpm6, LpmAddress, LpmError, MAX_NEXT_HOP, MAX_TBL8_GROUPS};

use std::cell::RefCell;
use std::fmt::Write;
use std::sync::Arc;

use netvm_vm::{AheadKeys, CoproConfig, CoproError, Coprocessor, Dir24Walk, DirectOp, InvokeContext, RegisterFile, WorkerShare};

use crate::ahead::Answers;
use crate::share::Tally;

/// Statistics counters.
const LOOKUPS: usize = 0;
const HITS: usize = 1;

/// What a data-plane insert or delete says while the table is shared.
const SHARED_WRITE: &str =
    "lpm: routes cannot change from the data plane while several workers share the table; change them through the control plane";
/// What a control-plane load says while the table is shared.
const SHARED_LOAD: &str = "routes cannot change while several workers share the table; load them before the run starts";

/// The `lpm` coprocessor over addresses `A` (`u32`: IPv4, `u128`: IPv6).
#[derive(Debug)]
pub struct LpmCoprocessor<A: LpmAddress> {
    /// The routes, shared with the handles of the other workers.
    table: Arc<Lpm<A>>,
    input: [u32; 9],
    output: [u32; 2],
    tally: Tally<2>,
    /// The answers of the last pre-lookup stage (IPv6 `lookup_pkt`): they
    /// depend on the 16 address bytes and the routes, and every change of
    /// the routes forgets them.
    ahead: RefCell<Answers<2>>,
    /// The direct entries of `lookup` and `lookup_pkt` for compiled code
    /// (filled by `registers`, pointing at this instance).
    direct: [DirectOp; 4],
    /// IPv4: `lookup` and `lookup_pkt` as compiled code performs them
    /// itself (filled by `registers`, updated by every insert and delete
    /// from the data plane; after the control plane's, engines ask
    /// `registers` again).
    walk: Dir24Walk,
}

/// The walk of a handle that has not offered one yet.
const NO_WALK: Dir24Walk =
    Dir24Walk { root: std::ptr::null(), groups: std::ptr::null(), counters: std::ptr::null_mut(), default_hop: 0, has_default: 0 };

impl<A: LpmAddress> LpmCoprocessor<A> {
    /// An empty instance that may use at most `tbl8_groups` groups.
    pub fn new(tbl8_groups: u32) -> LpmCoprocessor<A> {
        LpmCoprocessor {
            table: Arc::new(Lpm::new(tbl8_groups)),
            input: [0; 9],
            output: [0; 2],
            tally: Tally::new(),
            ahead: RefCell::default(),
            direct: [DirectOp::NONE; 4],
            walk: NO_WALK,
        }
    }

    /// The route table.
    pub fn table(&self) -> &Lpm<A> {
        &self.table
    }

    /// The route table, to change; `None` while other workers' handles
    /// share it (see the module documentation).
    pub fn table_mut(&mut self) -> Option<&mut Lpm<A>> {
        self.ahead.get_mut().clear();
        Arc::get_mut(&mut self.table)
    }

    /// Points the walk at the table as it is now.
    fn refresh_walk(&mut self) {
        let (root, groups, default) = self.table.walk_tables();
        self.walk = Dir24Walk {
            root,
            groups,
            counters: self.tally.own_counters(),
            default_hop: default.unwrap_or(0),
            has_default: u32::from(default.is_some()),
        };
    }

    /// The table, to change from the data plane.
    fn table_to_change(&mut self) -> Result<&mut Lpm<A>, CoproError> {
        self.ahead.get_mut().clear();
        Arc::get_mut(&mut self.table).ok_or_else(|| CoproError::BadArgument(SHARED_WRITE.to_string()))
    }

    fn addr(&self) -> A {
        A::from_words([self.input[0], self.input[1], self.input[2], self.input[3]])
    }

    /// The prefix in in0..3/in4, checked.
    fn prefix(&self) -> Result<(A, u8), CoproError> {
        let len = self.input[4];
        if len > u32::from(A::BITS) {
            return Err(CoproError::BadArgument(format!("lpm: prefix length {len} out of range (0..={})", A::BITS)));
        }
        let (addr, len) = (self.addr(), len as u8);
        Lpm::validate(addr, len, 0).map_err(|e| CoproError::BadArgument(format!("lpm: {}/{len}: {e}", addr.to_ip())))?;
        Ok((addr, len))
    }

    #[inline(always)]
    fn lookup(&mut self, addr: A) {
        self.answer(self.table.lookup(addr));
    }

    /// `insert` (op 1): the prefix in in0..3/in4 with the next hop in in5;
    /// out0 is 1, or 0 when the table has no room.
    #[inline(never)]
    fn insert_op(&mut self) -> Result<(), CoproError> {
        let (addr, len) = self.prefix()?;
        let next_hop = self.input[5];
        let done = self.table_to_change()?.insert(addr, len, next_hop);
        self.refresh_walk();
        self.output = match done {
            Ok(()) => [1, 0],
            Err(LpmError::Full { .. }) => [0, 0],
            Err(e) => return Err(CoproError::BadArgument(format!("lpm: {}/{len}: {e}", addr.to_ip()))),
        };
        Ok(())
    }

    /// `delete` (op 2): the prefix in in0..3/in4; out0 is 1 if it was there.
    #[inline(never)]
    fn delete_op(&mut self) -> Result<(), CoproError> {
        let (addr, len) = self.prefix()?;
        let found = self.table_to_change()?.delete(addr, len);
        self.refresh_walk();
        self.output = [u32::from(found), 0];
        Ok(())
    }

    /// `lookup_pkt` (op 3): the address at the offset in in8 of `packet`,
    /// or the answer the pre-lookup stage kept for it.
    #[inline(always)]
    fn lookup_pkt(&mut self, packet: &[u8]) -> Result<(), CoproError> {
        let off = self.input[8] as usize;
        if let Some((out, _)) = self.ahead.get_mut().take(packet, off) {
            self.answer((out[0] == 1).then_some(out[1]));
            return Ok(());
        }
        let Some(addr) = packet.get(off..).and_then(A::from_be_slice) else {
            return Err(Self::past_end(off, packet.len()));
        };
        self.lookup(addr);
        Ok(())
    }

    /// `lookup_pkt`'s error for an address past the packet's end.
    #[cold]
    #[inline(never)]
    fn past_end(off: usize, len: usize) -> CoproError {
        CoproError::BadArgument(format!("lpm: lookup_pkt reads {} bytes at offset {off}, past the packet end ({len} bytes)", A::BYTES))
    }

    #[inline(always)]
    fn answer(&mut self, found: Option<u32>) {
        self.tally.add(LOOKUPS, 1);
        self.output = match found {
            Some(nh) => {
                self.tally.add(HITS, 1);
                [1, nh]
            }
            None => [0, 0],
        };
    }
}

/// Creates an instance from its configuration (see the module documentation).
pub(crate) fn create(cfg: &CoproConfig) -> Result<Box<dyn Coprocessor>, String> {
    if let Some(k) = cfg.keys().find(|k| !matches!(k.as_str(), "family" | "tbl8_groups")) {
        return Err(format!("lpm: unknown setting `{k}` (known: family, tbl8_groups)"));
    }
    let family = match cfg.get("family") {
        Some(f) => f.parse::<Family>().map_err(|e| format!("lpm: {e}"))?,
        None => Family::Ipv4,
    };
    let groups = match cfg.get("tbl8_groups") {
        Some(s) => match s.parse::<u32>() {
            Ok(n) if n <= MAX_TBL8_GROUPS => Some(n),
            _ => return Err(format!("lpm: tbl8_groups `{s}` is not a number from 0 to {MAX_TBL8_GROUPS}")),
        },
        None => None,
    };
    Ok(match family {
        Family::Ipv4 => Box::new(LpmCoprocessor::<u32>::new(groups.unwrap_or(u32::DEFAULT_TBL8_GROUPS))),
        Family::Ipv6 => Box::new(LpmCoprocessor::<u128>::new(groups.unwrap_or(u128::DEFAULT_TBL8_GROUPS))),
    })
}

/// Addresses the IPv4 pre-lookup stage takes through its loops at a time.
const AHEAD_BLOCK: usize = 64;

impl<A: LpmAddress> Coprocessor for LpmCoprocessor<A> {
    fn kind(&self) -> &str {
        "lpm"
    }

    fn write(&mut self, reg: u8, value: u32) -> Result<(), CoproError> {
        match reg {
            0..=5 | 8 => {
                self.input[usize::from(reg)] = value;
                Ok(())
            }
            _ => Err(CoproError::NoRegister(reg)),
        }
    }

    fn read(&mut self, reg: u8) -> Result<u32, CoproError> {
        self.output.get(usize::from(reg)).copied().ok_or(CoproError::NoRegister(reg))
    }

    fn registers(&mut self) -> RegisterFile {
        // lookup and lookup_pkt read nothing but the registers and the packet.
        self.direct[0] = DirectOp::of::<Self, 0>(self);
        self.direct[3] = DirectOp::of::<Self, 3>(self);
        // Input registers 6 and 7 do not exist (`write` refuses them).
        let file = RegisterFile::new(&mut self.input, 0b1_0011_1111, &mut self.output, u32::MAX).with_direct(&self.direct);
        if A::BYTES != 4 {
            return file;
        }
        // IPv4 (DIR-24-8): lookup (the key in in0) and lookup_pkt (at the
        // offset in in8) are the walk, as `WalkKind::ALL` says; the
        // pre-lookup stage keeps no answers for them (`ahead` only prefetches).
        self.refresh_walk();
        file.with_walk(&self.walk, 0b1001)
    }

    // Inline, so that the direct entries (`DirectOp::of`, the operation a
    // constant) fold the dispatch away and take only the lookup's code.
    #[inline(always)]
    fn invoke(&mut self, op: u8, ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        match op {
            0 => self.lookup(self.addr()),
            1 => self.insert_op()?,
            2 => self.delete_op()?,
            3 => self.lookup_pkt(ctx.packet)?,
            _ => return Err(CoproError::NoOperation(op)),
        }
        Ok(())
    }

    fn lookahead(&self, op: u8) -> Option<u32> {
        match op {
            // An IPv6 address in registers takes four: only lookup_pkt then.
            0 if A::BYTES == 4 => Some(0b1),
            3 => Some(1 << 8),
            _ => None,
        }
    }

    /// IPv4: prefetches every address's first-level entry, then the
    /// second-level entry of those that point to a group
    /// ([`Dir24Walk::prefetch`] over the table); the data path's own walk
    /// (compiled inline) then hits the cache. The compiled pre-lookup
    /// stage does this itself for instances that offer the walk, without
    /// calling this. A bulk walk keeping its answers cost more than it
    /// saved there (measured: the router 60 -> 80 ns/frame). IPv6 (a /48
    /// is three dependent loads past the first level, which no single
    /// prefetch covers): walks the lookups in bulk ([`Lpm::lookup_bulk`],
    /// level by level over 32 addresses, their misses in flight together)
    /// and, for `lookup_pkt`, keeps the answers for the lookups of the data
    /// path (`crate::ahead`), which then take them instead of walking again.
    fn ahead(&self, op: u8, keys: &AheadKeys<'_>, prefetch: bool) {
        let mut kept = self.ahead.borrow_mut();
        kept.clear();
        if !prefetch {
            return;
        }
        if A::BYTES == 4 {
            let reg = match op {
                0 => 0,
                3 => 8,
                _ => return,
            };
            let (root, groups, _) = self.table.walk_tables();
            let walk = Dir24Walk { root, groups, ..NO_WALK };
            // SAFETY: the table's own levels, which nothing changes while
            // `self` is borrowed.
            let prefetch = |addrs: &[u32]| unsafe { walk.prefetch(addrs) };
            let mut addrs = [0u32; AHEAD_BLOCK];
            let mut n = 0;
            for (w, p) in keys.keys(reg) {
                // lookup (0): the address itself; lookup_pkt (3): at its offset in the packet.
                let a = if op == 0 { Some(w) } else { p.get(w as usize..).and_then(|b| b.first_chunk()).map(|b| u32::from_be_bytes(*b)) };
                let Some(a) = a else { continue };
                addrs[n] = a;
                n += 1;
                if n == AHEAD_BLOCK {
                    prefetch(&addrs);
                    n = 0;
                }
            }
            prefetch(&addrs[..n]);
            return;
        }
        if op != 3 {
            return;
        }
        let mut addrs = [A::from_words([0; 4]); 32];
        let mut at: [(usize, &[u8]); 32] = [(0, &[]); 32];
        let mut out = [None; 32];
        let mut n = 0;
        let mut flush = |n: usize, addrs: &[A], at: &[(usize, &[u8])], kept: &mut Answers<2>| {
            self.table.lookup_bulk(&addrs[..n], &mut out[..n]);
            for (&(off, p), o) in at[..n].iter().zip(&out[..n]) {
                kept.keep(p, off, off + A::BYTES, o.map_or([0, 0], |nh| [1, nh]), 0);
            }
        };
        for (off, p) in keys.keys(8) {
            let off = off as usize;
            if let Some(a) = p.get(off..).and_then(A::from_be_slice) {
                addrs[n] = a;
                at[n] = (off, p);
                n += 1;
                if n == addrs.len() {
                    flush(n, &addrs, &at, &mut kept);
                    n = 0;
                }
            }
        }
        if n > 0 {
            flush(n, &addrs, &at, &mut kept);
        }
    }

    fn dump(&self) -> String {
        let mut s = String::new();
        for (a, l, nh) in self.table.iter() {
            let _ = writeln!(s, "{}/{l} {nh}", a.to_ip());
        }
        s
    }

    fn load(&mut self, text: &str) -> Result<usize, String> {
        self.ahead.get_mut().clear();
        // (address, length, next hop, line), 16 bytes a route for IPv4.
        let mut routes: Vec<(A, u8, u32, usize)> = routes::parse_lines(text, A::FAMILY)?
            .into_iter()
            .map(|(line, r)| (A::from_ip(r.addr).expect("parsed for this family"), r.len, r.next_hop, line))
            .collect();
        // In address order (`Lpm::insert_sorted` writes the first level in
        // one pass, and the rules are built from the sorted list); each
        // prefix once, with the next hop of its last line.
        routes.sort_unstable_by_key(|&(addr, len, _, line)| (addr, len, std::cmp::Reverse(line)));
        routes.dedup_by_key(|&mut (addr, len, _, _)| (addr, len));
        let table = Arc::get_mut(&mut self.table).ok_or(SHARED_LOAD)?;
        table.insert_sorted(routes.iter().map(|&(addr, len, next_hop, _)| (addr, len, next_hop))).map_err(|(i, e)| {
            let (addr, len, next_hop, line) = routes[i];
            format!("line {line}: {}/{len} {next_hop}: {e}; raise `tbl8_groups`", addr.to_ip())
        })?;
        Ok(routes.len())
    }

    /// Removes every route (nothing while several workers share the table).
    fn clear(&mut self) {
        self.ahead.get_mut().clear();
        if let Some(t) = Arc::get_mut(&mut self.table) {
            t.clear();
        }
    }

    fn memory(&self) -> u64 {
        self.table.memory_bytes() as u64
    }

    fn stats(&self) -> Vec<(String, u64)> {
        let t = self.tally.totals();
        vec![
            ("routes".to_string(), self.table.len() as u64),
            ("tbl8_groups_used".to_string(), u64::from(self.table.tbl8_groups_used())),
            ("tbl8_groups".to_string(), u64::from(self.table.tbl8_groups())),
            ("lookups".to_string(), t[LOOKUPS]),
            ("hits".to_string(), t[HITS]),
        ]
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    /// Another handle on the same routes.
    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        Ok(Box::new(LpmCoprocessor {
            table: Arc::clone(&self.table),
            input: [0; 9],
            output: [0; 2],
            tally: self.tally.share(),
            ahead: RefCell::default(),
            direct: [DirectOp::NONE; 4],
            walk: NO_WALK,
        }))
    }

    fn share(&self) -> WorkerShare {
        WorkerShare::Shared
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netvm_vm::Timestamp;

    fn cfg(pairs: &[(&str, &str)]) -> CoproConfig {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn ctx(packet: &[u8]) -> InvokeContext<'_> {
        InvokeContext { packet, info: &[], now: Timestamp::default(), seq: 0 }
    }

    fn call(c: &mut dyn Coprocessor, regs: &[(u8, u32)], op: u8, packet: &[u8]) -> Result<[u32; 2], CoproError> {
        for &(r, v) in regs {
            c.write(r, v)?;
        }
        c.invoke(op, &ctx(packet))?;
        Ok([c.read(0)?, c.read(1)?])
    }

    #[test]
    fn ipv4_registers_and_ops() {
        let mut c = create(&cfg(&[("tbl8_groups", "1")])).unwrap();
        let c = c.as_mut();
        assert_eq!(call(c, &[(0, 0x0A00_0000), (4, 8), (5, 1)], 1, &[]), Ok([1, 0]));
        assert_eq!(call(c, &[(0, 0x0A01_0200), (4, 24), (5, 2)], 1, &[]), Ok([1, 0]));
        assert_eq!(call(c, &[(0, 0x0A01_0280), (4, 25), (5, 3)], 1, &[]), Ok([1, 0]));
        // The budget of one group is used: a /25 elsewhere does not fit.
        assert_eq!(call(c, &[(0, 0x0B00_0080), (4, 25), (5, 3)], 1, &[]), Ok([0, 0]));
        assert_eq!(call(c, &[(0, 0x0A01_02FF)], 0, &[]), Ok([1, 3]));
        assert_eq!(call(c, &[(0, 0x0A01_0201)], 0, &[]), Ok([1, 2]));
        assert_eq!(call(c, &[(0, 0x0B00_0080)], 0, &[]), Ok([0, 0]));
        let pkt = [0u8, 0, 10, 1, 2, 200, 9];
        assert_eq!(call(c, &[(8, 2)], 3, &pkt), Ok([1, 3]));
        assert_eq!(call(c, &[(8, 3)], 3, &pkt), Ok([0, 0]));
        assert!(matches!(call(c, &[(8, 4)], 3, &pkt), Err(CoproError::BadArgument(_))));
        assert!(matches!(call(c, &[(8, u32::MAX)], 3, &pkt), Err(CoproError::BadArgument(_))));
        assert_eq!(call(c, &[(0, 0x0A01_0200), (4, 24)], 2, &[]), Ok([1, 0]));
        assert_eq!(call(c, &[(0, 0x0A01_0200), (4, 24)], 2, &[]), Ok([0, 0]));
        assert_eq!(call(c, &[(0, 0x0A01_0201)], 0, &[]), Ok([1, 1]));
        // Bad arguments.
        for (regs, op) in [
            (&[(0, 0x0A00_0001), (4, 8), (5, 1)][..], 1),
            (&[(0, 0), (4, 33), (5, 1)][..], 1),
            (&[(0, 0), (4, u32::MAX), (5, 1)][..], 1),
            (&[(0, 0), (4, 0), (5, 1 << 24)][..], 1),
            (&[(0, 0x0A00_0001), (4, 8)][..], 2),
            (&[(0, 0), (4, 256)][..], 2),
        ] {
            assert!(matches!(call(c, regs, op, &[]), Err(CoproError::BadArgument(_))), "{regs:?} op {op}");
        }
        assert_eq!(c.write(6, 0), Err(CoproError::NoRegister(6)));
        assert_eq!(c.write(7, 0), Err(CoproError::NoRegister(7)));
        assert_eq!(c.write(9, 0), Err(CoproError::NoRegister(9)));
        assert_eq!(c.read(2), Err(CoproError::NoRegister(2)));
        assert_eq!(c.invoke(4, &ctx(&[])), Err(CoproError::NoOperation(4)));
        let stats: std::collections::BTreeMap<String, u64> = c.stats().into_iter().collect();
        assert_eq!(stats["routes"], 2);
        assert_eq!(stats["tbl8_groups_used"], 1);
        assert_eq!(stats["tbl8_groups"], 1);
        assert_eq!((stats["lookups"], stats["hits"]), (6, 4));
        c.clear();
        assert_eq!(c.stats()[0], ("routes".to_string(), 0));
        assert_eq!(call(c, &[(0, 0x0A01_0201)], 0, &[]), Ok([0, 0]));
    }

    #[test]
    fn ipv6_registers_and_ops() {
        let mut c = create(&cfg(&[("family", "ipv6")])).unwrap();
        let c = c.as_mut();
        let a = [0x2001_0db8, 0x0001_0000, 0, 0x0000_0001];
        let regs = |w: [u32; 4]| [(0u8, w[0]), (1, w[1]), (2, w[2]), (3, w[3])];
        assert_eq!(call(c, &[&regs([0x2001_0db8, 0, 0, 0])[..], &[(4, 32), (5, 7)]].concat(), 1, &[]), Ok([1, 0]));
        assert_eq!(call(c, &[&regs(a)[..], &[(4, 128), (5, 8)]].concat(), 1, &[]), Ok([1, 0]));
        assert_eq!(call(c, &regs(a), 0, &[]), Ok([1, 8]));
        assert_eq!(call(c, &regs([0x2001_0db8, 0x0001_0000, 0, 2]), 0, &[]), Ok([1, 7]));
        assert_eq!(call(c, &regs([0x2001_0db9, 0, 0, 0]), 0, &[]), Ok([0, 0]));
        let mut pkt = vec![0xEEu8; 3];
        pkt.extend(a.iter().flat_map(|w| w.to_be_bytes()));
        assert_eq!(call(c, &[(8, 3)], 3, &pkt), Ok([1, 8]));
        assert!(matches!(call(c, &[(8, 4)], 3, &pkt), Err(CoproError::BadArgument(_))));
        assert!(matches!(call(c, &[&regs(a)[..], &[(4, 64), (5, 1)]].concat(), 1, &[]), Err(CoproError::BadArgument(_))));
        assert!(matches!(call(c, &[&regs(a)[..], &[(4, 129)]].concat(), 2, &[]), Err(CoproError::BadArgument(_))));
        assert_eq!(c.dump(), "2001:db8::/32 7\n2001:db8:1::1/128 8\n");
    }

    /// The IPv4 pre-lookup stage prefetches (first levels and groups, over
    /// more addresses than one block) and changes no answer.
    #[test]
    fn ipv4_prefetch_ahead_changes_no_answer() {
        let mut c = create(&cfg(&[])).unwrap();
        c.load("10.0.0.0/8 1\n10.1.2.3/32 2\n192.0.2.0/25 3\n").unwrap();
        let addrs: Vec<[u8; 4]> = (0..150u32).map(|i| [[10, 1, 2, 3], [192, 0, 2, 200], [10, 9, 9, 9]][i as usize % 3]).collect();
        let mut pkts: Vec<netvm_vm::Packet> = addrs.iter().map(|a| netvm_vm::Packet::from_bytes(a.to_vec())).collect();
        pkts.push(netvm_vm::Packet::from_bytes(vec![10, 1])); // shorter than an address: skipped
        let descs: Vec<netvm_vm::XbDesc> = pkts.iter_mut().enumerate().map(|(i, p)| netvm_vm::XbDesc::of(p, i as u64)).collect();
        let words: Vec<u32> = descs.iter().flat_map(|_| [1, 0]).collect();
        // SAFETY: the descriptors point at the packets' bytes, which nothing
        // writes while `descs` lives.
        let packets = unsafe { netvm_vm::buffer::Packets::new(&descs) };
        c.ahead(3, &netvm_vm::AheadKeys { words: &words, regs: 1 << 8, packets }, true);
        let words: Vec<u32> = addrs.iter().flat_map(|a| [1, u32::from_be_bytes(*a)]).collect();
        c.ahead(0, &netvm_vm::AheadKeys { words: &words, regs: 1, packets }, true);
        drop(descs);
        let c = c.as_mut();
        assert_eq!(call(c, &[(8, 0)], 3, &[10, 1, 2, 3]), Ok([1, 2]));
        assert_eq!(call(c, &[(8, 0)], 3, &[192, 0, 2, 200]), Ok([0, 0]));
        assert_eq!(call(c, &[(0, 0x0A09_0909)], 0, &[]), Ok([1, 1]));
    }

    /// The IPv6 pre-lookup stage keeps its answers for `lookup_pkt`; a
    /// route added or removed in between, or an address changed in the
    /// packet, means a fresh lookup.
    #[test]
    fn ipv6_answers_found_ahead_are_forgotten_on_every_change() {
        let mut c = create(&cfg(&[("family", "ipv6")])).unwrap();
        c.load("2001:db8::/32 1\n").unwrap();
        let addr = |a: &str| a.parse::<std::net::Ipv6Addr>().unwrap().octets().to_vec();
        let mut pkts: Vec<netvm_vm::Packet> =
            ["2001:db8:1::1", "2001:db8:2::1", "2001:db9::1"].iter().map(|a| netvm_vm::Packet::from_bytes(addr(a))).collect();
        let descs: Vec<netvm_vm::XbDesc> = pkts.iter_mut().enumerate().map(|(i, p)| netvm_vm::XbDesc::of(p, i as u64)).collect();
        let words: Vec<u32> = descs.iter().flat_map(|_| [1, 0]).collect();
        assert_eq!(c.lookahead(3), Some(1 << 8));
        // SAFETY: the descriptors point at the packets' bytes, which nothing
        // writes while `descs` lives.
        let packets = unsafe { netvm_vm::buffer::Packets::new(&descs) };
        c.ahead(3, &netvm_vm::AheadKeys { words: &words, regs: 1 << 8, packets }, true);
        let data: Vec<Vec<u8>> = pkts.iter().map(|p| p.data.clone()).collect();
        drop(descs);
        let c = c.as_mut();
        // The answers hold for the same packets only: these are copies.
        assert_eq!(call(c, &[(8, 0)], 3, &data[0]), Ok([1, 1]));
        assert_eq!(call(c, &[(8, 0)], 3, &pkts[0].data), Ok([1, 1]));
        let w = |a: &str| {
            let b = addr(a);
            [(0u8, u32::from_be_bytes(b[0..4].try_into().unwrap())), (1, u32::from_be_bytes(b[4..8].try_into().unwrap())), (2, 0), (3, 0)]
        };
        assert_eq!(call(c, &[&w("2001:db8:2::")[..], &[(4, 48), (5, 2)]].concat(), 1, &[]), Ok([1, 0]));
        assert_eq!(call(c, &[(8, 0)], 3, &pkts[1].data), Ok([1, 2]), "the route added after the stage");
        pkts[2].data[3] = 0xb8; // 2001:db9:: -> 2001:db8::
        assert_eq!(call(c, &[(8, 0)], 3, &pkts[2].data), Ok([1, 1]));
    }

    #[test]
    fn config() {
        let err = |pairs| create(&cfg(pairs)).err().unwrap_or_default();
        assert!(err(&[("family", "ipv5")]).contains("ipv5"));
        assert!(create(&cfg(&[("tbl8_groups", "16777217")])).is_err());
        assert!(create(&cfg(&[("tbl8_groups", "-1")])).is_err());
        assert!(create(&cfg(&[("tbl8_groups", "lots")])).is_err());
        assert!(err(&[("size", "1")]).contains("unknown setting `size`"));
        let c = create(&cfg(&[("family", "ipv6"), ("tbl8_groups", "16777216")])).unwrap();
        assert_eq!(c.kind(), "lpm");
        assert_eq!(c.stats()[2], ("tbl8_groups".to_string(), 1 << 24));
        let c = create(&cfg(&[])).unwrap();
        assert_eq!(c.stats()[2], ("tbl8_groups".to_string(), 1 << 16));
        assert!(crate::registry().kinds().any(|k| k == "lpm"));
    }

    #[test]
    fn load_dump_round_trip() {
        let text = "# routes\n10.0.0.0/8 1\n10.1.2.3 5\n0.0.0.0/0 9\n10.0.0.0/16 2 # nested\n10.0.0.0/8 4\n192.168.1.128/25 16777215\n";
        let mut c = create(&cfg(&[])).unwrap();
        assert_eq!(c.load(text), Ok(5));
        let dump = c.dump();
        assert_eq!(dump, "0.0.0.0/0 9\n10.0.0.0/8 4\n10.0.0.0/16 2\n10.1.2.3/32 5\n192.168.1.128/25 16777215\n");
        let mut d = create(&cfg(&[])).unwrap();
        assert_eq!(d.load(&dump), Ok(5));
        assert_eq!(d.dump(), dump);
        assert_eq!(parse_routes(&dump, Family::Ipv4).unwrap().len(), 5);

        let text6 = "::/0 1\n2001:db8::/32 3\n2001:db8::1 4\n2001:db8:8000::/33 5\nfe80::/10 6\n";
        let mut c = create(&cfg(&[("family", "ipv6")])).unwrap();
        assert_eq!(c.load(text6), Ok(5));
        let dump6 = c.dump();
        assert_eq!(dump6, "::/0 1\n2001:db8::/32 3\n2001:db8::1/128 4\n2001:db8:8000::/33 5\nfe80::/10 6\n");
        let mut d = create(&cfg(&[("family", "ipv6")])).unwrap();
        assert_eq!(d.load(&dump6), Ok(5));
        assert_eq!(d.dump(), dump6);

        // A syntax error changes nothing; the budget error names its line.
        let mut c = create(&cfg(&[("tbl8_groups", "1")])).unwrap();
        let err = c.load("10.0.0.0/8 1\n10.0.0.1/8 2\n").unwrap_err();
        assert!(err.starts_with("line 2: `10.0.0.1/8` has host bits set"), "{err}");
        assert_eq!(c.dump(), "");
        let err = c.load("10.0.0.0/25 1\n\n11.0.0.0/25 2\n").unwrap_err();
        assert!(err.starts_with("line 3: 11.0.0.0/25 2: tbl8 group budget exhausted"), "{err}");
        assert!(c.load("::/0 1").unwrap_err().contains("line 1"));
    }

    #[test]
    fn a_loaded_file_is_its_routes_whatever_their_order() {
        // Prefixes drawn from a few /8s so that they nest and repeat; a
        // prefix on several lines keeps its last next hop.
        let mut g = netvm_traffic::SplitMix64::new(0x6c70_6d6c);
        let mut next = move || g.next_u64();
        let mut text = String::new();
        for _ in 0..3000 {
            let len = [8, 12, 16, 20, 23, 24, 25, 28, 32][(next() % 9) as usize];
            let addr = ((10 + next() % 3) << 24 | next() & 0x00ff_ffff) as u32 & (u32::MAX << (32 - len));
            text += &format!("{}/{len} {}\n", std::net::Ipv4Addr::from(addr), next() % 1000);
        }
        let routes = parse_routes(&text, Family::Ipv4).unwrap();
        let mut c = create(&cfg(&[])).unwrap();
        assert_eq!(c.load(&text), Ok(routes.len()));
        let mut want: Vec<String> = routes.iter().map(|r| r.to_string()).collect();
        want.sort_by_key(|line| {
            let r = &parse_routes(line, Family::Ipv4).unwrap()[0];
            (r.addr, r.len)
        });
        assert_eq!(c.dump(), want.iter().map(|l| format!("{l}\n")).collect::<String>());
        for _ in 0..20_000 {
            let a = ((10 + next() % 4) << 24 | next() & 0x00ff_ffff) as u32;
            let best = routes.iter().filter(|r| r.matches(std::net::Ipv4Addr::from(a).into())).max_by_key(|r| r.len);
            let want = best.map_or([0, 0], |r| [1, r.next_hop]);
            assert_eq!(call(c.as_mut(), &[(0, a)], 0, &[]), Ok(want), "{}", std::net::Ipv4Addr::from(a));
        }
    }

    #[test]
    fn forks_share_the_routes_which_only_a_sole_handle_changes() {
        let mut a = create(&cfg(&[("tbl8_groups", "4")])).unwrap();
        a.load("10.0.0.0/8 1\n10.1.0.0/16 2\n").unwrap();
        let b = a.fork().unwrap();
        assert_eq!(b.share(), WorkerShare::Shared);
        let threads: Vec<_> = [b, a.fork().unwrap()]
            .into_iter()
            .map(|mut f| {
                std::thread::spawn(move || {
                    for i in 0..1000u32 {
                        assert_eq!(call(f.as_mut(), &[(0, 0x0A01_0000 | i)], 0, &[]), Ok([1, 2]));
                        assert_eq!(call(f.as_mut(), &[(8, 0)], 3, &[10, 2, 0, 1]), Ok([1, 1]));
                    }
                    f
                })
            })
            .collect();
        let mut forks: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let stats: std::collections::BTreeMap<String, u64> = a.stats().into_iter().collect();
        assert_eq!((stats["lookups"], stats["hits"]), (4000, 4000), "every handle's lookups");
        assert_eq!(forks[0].stats(), a.stats());
        // Changes while shared: faults, errors, no-ops; nothing changes.
        let e = call(forks[0].as_mut(), &[(0, 0x0B00_0000), (4, 8), (5, 3)], 1, &[]).unwrap_err();
        assert_eq!(e, CoproError::BadArgument(SHARED_WRITE.to_string()));
        assert!(
            matches!(call(a.as_mut(), &[(0, 0x0A00_0000), (4, 8)], 2, &[]), Err(CoproError::BadArgument(m)) if m.contains("several workers"))
        );
        assert!(a.load("11.0.0.0/8 3").unwrap_err().contains("several workers"));
        a.clear();
        assert!(crate::downcast::<Lpm4Copro>(a.as_mut()).unwrap().table_mut().is_none());
        assert_eq!(a.dump(), "10.0.0.0/8 1\n10.1.0.0/16 2\n");
        // A sole handle changes them again.
        forks.clear();
        assert_eq!(call(a.as_mut(), &[(0, 0x0B00_0000), (4, 8), (5, 3)], 1, &[]), Ok([1, 0]));
        assert_eq!(call(a.as_mut(), &[(0, 0x0A00_0000), (4, 8)], 2, &[]), Ok([1, 0]));
        assert_eq!(a.load("12.0.0.0/8 4").unwrap(), 1);
        assert_eq!(a.dump(), "10.1.0.0/16 2\n11.0.0.0/8 3\n12.0.0.0/8 4\n");
        a.clear();
        assert_eq!(a.dump(), "");
    }

    type Lpm4Copro = LpmCoprocessor<u32>;
}
