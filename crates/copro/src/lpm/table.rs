//! The longest-prefix-match table: a multibit trie with controlled prefix
//! expansion and depth-tagged entries (the DPDK `rte_lpm` algorithm), generic
//! over the address width.
//!
//! The first level is indexed by the top [`LpmAddress::ROOT_BITS`] bits of
//! the address (24 for both: DIR-24-8 for IPv4, and for IPv6 as DPDK's
//! `rte_lpm6`, so that a /48 is four dependent loads); every further level is a
//! 256-entry "tbl8" group indexed by the next 8 bits. A prefix of length `d`
//! is expanded into every entry of the level it ends in that it covers; an
//! entry of an earlier level on its path points to a group instead.
//!
//! Each entry is a `u32`: the top 8 bits are a tag, the low 24 bits a value.
//! Tag 0: no rule of length >= 1 covers the entry (the `/0` rule, kept
//! aside, answers). Tag 1..=128: the depth of the rule the entry expands,
//! the value being its next hop. Tag 255: "extended", the value being the
//! index of the group of the next level. The depth lets insert overwrite only
//! shorter rules and delete restore the next longest covering rule.
//!
//! The rules themselves are the control plane's truth: inserting an existing
//! prefix replaces its next hop; deleting restores, in the prefix's range,
//! the next longest covering rule, and frees (onto a free list for reuse)
//! every group that becomes uniform. A group therefore exists exactly when a
//! rule longer than its parent level lies inside it, which keeps the number
//! of groups in use a function of the rule set alone. The number of groups
//! is bounded by a budget: an insert that would need more fails and changes
//! nothing. Group memory grows as groups are first used; the IPv4 first level
//! (2^24 entries, 64 MiB) is allocated zeroed, so untouched pages cost
//! nothing, and on Linux marked for transparent huge pages.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::{BitAnd, BitOr, Not};

use super::routes::Family;
use crate::huge::{advise_huge, HUGE};

/// Largest next hop (next hops are 24-bit values).
pub const MAX_NEXT_HOP: u32 = (1 << 24) - 1;

/// Largest tbl8 group budget (group indices are 24-bit values).
pub const MAX_TBL8_GROUPS: u32 = 1 << 24;

/// Entries per tbl8 group.
const GROUP: usize = 256;
/// Tag of an extended entry (`entry >= EXT` means extended).
const EXT: u32 = 0xFF00_0000;
/// The value bits of an entry.
const VALUE: u32 = 0x00FF_FFFF;

#[inline(always)]
fn is_ext(e: u32) -> bool {
    e >= EXT
}

/// Depth of a non-extended entry (0: no rule of length >= 1).
#[inline(always)]
fn depth(e: u32) -> u32 {
    e >> 24
}

#[inline(always)]
fn entry(depth: u8, next_hop: u32) -> u32 {
    u32::from(depth) << 24 | next_hop
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for u128 {}
}

/// An address type the table works on: `u32` (IPv4) or `u128` (IPv6), most
/// significant bit first (the first bit of the address on the wire).
pub trait LpmAddress:
    sealed::Sealed
    + Copy
    + Ord
    + Eq
    + Hash
    + fmt::Debug
    + Send
    + Sync
    + BitAnd<Output = Self>
    + BitOr<Output = Self>
    + Not<Output = Self>
    + 'static
{
    /// Address width in bits.
    const BITS: u8;
    /// Bits indexing the first-level table.
    const ROOT_BITS: u8;
    /// Number of levels: the first plus one per further 8 bits.
    const LEVELS: u32 = 1 + (Self::BITS as u32 - Self::ROOT_BITS as u32) / 8;
    /// The default tbl8 group budget.
    const DEFAULT_TBL8_GROUPS: u32;
    /// The address family.
    const FAMILY: Family;
    /// The all-zero address.
    const ZERO: Self;
    /// The first-level index: the top `ROOT_BITS` bits.
    fn root_index(self) -> usize;
    /// The 8 bits that index a group of `level` (1 = the first group level).
    fn level_index(self, level: u32) -> usize;
    /// The network mask of a prefix length (`len <= BITS`).
    fn mask(len: u8) -> Self;
    /// As a standard library address.
    fn to_ip(self) -> IpAddr;
    /// From a standard library address of the same family.
    fn from_ip(ip: IpAddr) -> Option<Self>;
    /// Address size in bytes.
    const BYTES: usize;
    /// From 32-bit words, most significant first, as the `lpm`
    /// coprocessor's input registers 0..3 hold it (IPv4 uses only the first).
    fn from_words(w: [u32; 4]) -> Self;
    /// From the first [`LpmAddress::BYTES`] bytes of `b`, big-endian (`None`
    /// if `b` is shorter).
    fn from_be_slice(b: &[u8]) -> Option<Self>;
}

impl LpmAddress for u32 {
    const BITS: u8 = 32;
    const ROOT_BITS: u8 = 24;
    const DEFAULT_TBL8_GROUPS: u32 = 1 << 16;
    const FAMILY: Family = Family::Ipv4;
    const ZERO: u32 = 0;

    #[inline(always)]
    fn root_index(self) -> usize {
        (self >> 8) as usize
    }

    #[inline(always)]
    fn level_index(self, level: u32) -> usize {
        debug_assert_eq!(level, 1);
        (self & 0xFF) as usize
    }

    fn mask(len: u8) -> u32 {
        u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
    }

    fn to_ip(self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(self))
    }

    fn from_ip(ip: IpAddr) -> Option<u32> {
        match ip {
            IpAddr::V4(a) => Some(a.into()),
            IpAddr::V6(_) => None,
        }
    }

    const BYTES: usize = 4;

    fn from_words(w: [u32; 4]) -> u32 {
        w[0]
    }

    fn from_be_slice(b: &[u8]) -> Option<u32> {
        Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
    }
}

impl LpmAddress for u128 {
    const BITS: u8 = 128;
    const ROOT_BITS: u8 = 24;
    const DEFAULT_TBL8_GROUPS: u32 = 1 << 17;
    const FAMILY: Family = Family::Ipv6;
    const ZERO: u128 = 0;

    #[inline(always)]
    fn root_index(self) -> usize {
        (self >> 104) as usize
    }

    #[inline(always)]
    fn level_index(self, level: u32) -> usize {
        debug_assert!((1..=13).contains(&level));
        (self >> (104 - 8 * level)) as usize & 0xFF
    }

    fn mask(len: u8) -> u128 {
        u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
    }

    fn to_ip(self) -> IpAddr {
        IpAddr::V6(Ipv6Addr::from(self))
    }

    fn from_ip(ip: IpAddr) -> Option<u128> {
        match ip {
            IpAddr::V6(a) => Some(a.into()),
            IpAddr::V4(_) => None,
        }
    }

    const BYTES: usize = 16;

    fn from_words(w: [u32; 4]) -> u128 {
        w.iter().fold(0, |a, &x| a << 32 | u128::from(x))
    }

    fn from_be_slice(b: &[u8]) -> Option<u128> {
        Some(u128::from_be_bytes(b.get(..16)?.try_into().ok()?))
    }
}

/// Why an insert failed. Nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LpmError {
    /// Prefix length above the address width.
    BadLength {
        /// The length given.
        len: u8,
        /// The address width.
        max: u8,
    },
    /// Address bits set beyond the prefix length.
    HostBits,
    /// Next hop above [`MAX_NEXT_HOP`].
    BadNextHop(u32),
    /// The tbl8 group budget is exhausted.
    Full {
        /// The budget.
        groups: u32,
    },
}

impl fmt::Display for LpmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LpmError::BadLength { len, max } => write!(f, "prefix length {len} out of range (0..={max})"),
            LpmError::HostBits => f.write_str("address has bits set beyond the prefix length"),
            LpmError::BadNextHop(nh) => write!(f, "next hop {nh} out of range (0..={MAX_NEXT_HOP})"),
            LpmError::Full { groups } => write!(f, "tbl8 group budget exhausted ({groups} groups)"),
        }
    }
}

impl std::error::Error for LpmError {}

/// Most groups whose storage is reserved (and marked for huge pages) at the
/// first group: 2^18 groups, 256 MiB of address space.
const MAX_RESERVED_GROUPS: u32 = 1 << 18;

/// The tbl8 groups: storage grown on first use, a free list, a budget.
#[derive(Clone)]
struct Groups {
    tbl8: Vec<u32>,
    free: Vec<u32>,
    used: u32,
    budget: u32,
}

enum Mode {
    /// Overwrite entries of depth <= d.
    Insert,
    /// Overwrite entries of depth == d, collapse uniform groups.
    Delete,
}

impl Groups {
    fn available(&self) -> u32 {
        self.budget - self.used
    }

    /// A group (reused or new) with every entry set to `fill`; the caller
    /// has checked the budget.
    fn alloc(&mut self, fill: u32) -> u32 {
        debug_assert!(self.used < self.budget);
        let g = match self.free.pop() {
            Some(g) => g,
            None => {
                if self.tbl8.capacity() == 0 {
                    // Room for the budget (up to 256 MiB of address space,
                    // touched only as groups are used), in huge pages.
                    self.tbl8.reserve_exact(self.budget.min(MAX_RESERVED_GROUPS) as usize * GROUP);
                    advise_huge(self.tbl8.as_ptr().cast(), self.tbl8.capacity() * std::mem::size_of::<u32>());
                }
                let g = (self.tbl8.len() / GROUP) as u32;
                self.tbl8.resize(self.tbl8.len() + GROUP, 0);
                g
            }
        };
        self.used += 1;
        self.group_mut(g).fill(fill);
        g
    }

    fn release(&mut self, g: u32) {
        self.used -= 1;
        self.free.push(g);
    }

    fn group(&self, g: u32) -> &[u32] {
        &self.tbl8[g as usize * GROUP..][..GROUP]
    }

    fn group_mut(&mut self, g: u32) -> &mut [u32] {
        &mut self.tbl8[g as usize * GROUP..][..GROUP]
    }

    /// The value a group can be replaced by: all entries equal, not
    /// extended, and from a rule no longer than `start` (the bits before the
    /// group's level), so that it belongs in the parent level.
    fn uniform(&self, g: u32, start: u32) -> Option<u32> {
        let s = self.group(g);
        let e0 = s[0];
        (!is_ext(e0) && depth(e0) <= start && s.iter().all(|&e| e == e0)).then_some(e0)
    }

    /// The new value of an entry of a level ending at `end` bits, after
    /// applying a rule of depth `d` expanding to `val`.
    fn apply(&mut self, e: u32, end: u32, d: u32, val: u32, mode: &Mode) -> u32 {
        if is_ext(e) {
            let g = e & VALUE;
            self.apply_range(g, end, 0, GROUP, d, val, mode);
            if let Mode::Delete = mode {
                if let Some(u) = self.uniform(g, end) {
                    self.release(g);
                    return u;
                }
            }
            return e;
        }
        match mode {
            Mode::Insert if depth(e) <= d => val,
            Mode::Delete if depth(e) == d => val,
            _ => e,
        }
    }

    /// [`Groups::apply`] on entries `first..first + count` of group `g`,
    /// whose level starts after `start` bits.
    #[allow(clippy::too_many_arguments)]
    fn apply_range(&mut self, g: u32, start: u32, first: usize, count: usize, d: u32, val: u32, mode: &Mode) {
        let base = g as usize * GROUP;
        for i in base + first..base + first + count {
            let e = self.tbl8[i];
            self.tbl8[i] = self.apply(e, start + 8, d, val, mode);
        }
    }
}

/// A longest-prefix-match table over addresses `A`; see the module
/// documentation. [`Lpm4`] and [`Lpm6`] are the two instances.
#[derive(Clone)]
pub struct Lpm<A: LpmAddress> {
    root: HugeTable,
    groups: Groups,
    rules: BTreeMap<(A, u8), u32>,
    per_len: Vec<u32>,
    default: Option<u32>,
}

/// The IPv4 table (DIR-24-8).
pub type Lpm4 = Lpm<u32>;
/// The IPv6 table (24 bits, then 8-bit strides).
pub type Lpm6 = Lpm<u128>;

/// The first-level table at its exact size.
type Root<'a> = &'a [u32; 1 << 24];

/// Where a level's entry sits: the first-level table or a group.
#[derive(Clone, Copy)]
enum Slot {
    Root(usize),
    Group(u32, usize),
}

impl<A: LpmAddress> Lpm<A> {
    /// An empty table that may use at most `tbl8_groups` groups (clamped to
    /// [`MAX_TBL8_GROUPS`]).
    pub fn new(tbl8_groups: u32) -> Lpm<A> {
        Lpm {
            root: HugeTable::zeroed(1 << A::ROOT_BITS),
            groups: Groups { tbl8: Vec::new(), free: Vec::new(), used: 0, budget: tbl8_groups.min(MAX_TBL8_GROUPS) },
            rules: BTreeMap::new(),
            per_len: vec![0; usize::from(A::BITS) + 1],
            default: None,
        }
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The tbl8 group budget.
    pub fn tbl8_groups(&self) -> u32 {
        self.groups.budget
    }

    /// Bytes of memory the table holds with every group of its budget in
    /// use: the first level, and the tbl8 groups.
    pub fn memory_bytes(&self) -> usize {
        ((1usize << A::ROOT_BITS) + self.groups.budget as usize * GROUP) * std::mem::size_of::<u32>()
    }

    /// The tbl8 groups in use.
    pub fn tbl8_groups_used(&self) -> u32 {
        self.groups.used
    }

    /// The rules as `(address, length, next hop)`, sorted by address then length.
    pub fn iter(&self) -> impl Iterator<Item = (A, u8, u32)> + '_ {
        self.rules.iter().map(|(&(a, l), &nh)| (a, l, nh))
    }

    /// The next hop of exactly the rule `addr/len`, if there is one.
    pub fn get(&self, addr: A, len: u8) -> Option<u32> {
        self.rules.get(&(addr, len)).copied()
    }

    /// Removes every rule.
    pub fn clear(&mut self) {
        // A fresh zeroed allocation rather than a fill: untouched pages stay free.
        self.root = HugeTable::zeroed(1 << A::ROOT_BITS);
        self.groups = Groups { tbl8: Vec::new(), free: Vec::new(), used: 0, budget: self.groups.budget };
        self.rules.clear();
        self.per_len.fill(0);
        self.default = None;
    }

    /// Checks a rule's arguments.
    pub fn validate(addr: A, len: u8, next_hop: u32) -> Result<(), LpmError> {
        if len > A::BITS {
            return Err(LpmError::BadLength { len, max: A::BITS });
        }
        if addr & !A::mask(len) != A::ZERO {
            return Err(LpmError::HostBits);
        }
        if next_hop > MAX_NEXT_HOP {
            return Err(LpmError::BadNextHop(next_hop));
        }
        Ok(())
    }

    /// The level a prefix of length `d >= 1` ends in.
    fn level_of(d: u8) -> u32 {
        (u32::from(d.max(A::ROOT_BITS)) - u32::from(A::ROOT_BITS)).div_ceil(8)
    }

    /// The bits before level `level` (its level ends 8 bits later, the first
    /// level at `ROOT_BITS`).
    fn start_of(level: u32) -> u32 {
        if level == 0 {
            0
        } else {
            u32::from(A::ROOT_BITS) + 8 * (level - 1)
        }
    }

    fn end_of(level: u32) -> u32 {
        u32::from(A::ROOT_BITS) + 8 * level
    }

    fn get_slot(&self, s: Slot) -> u32 {
        match s {
            Slot::Root(i) => self.root[i],
            Slot::Group(g, i) => self.groups.group(g)[i],
        }
    }

    fn set_slot(&mut self, s: Slot, v: u32) {
        match s {
            Slot::Root(i) => self.root[i] = v,
            Slot::Group(g, i) => self.groups.group_mut(g)[i] = v,
        }
    }

    /// Adds the rule `addr/len → next_hop`, or replaces the next hop of an
    /// existing one. On error nothing changes.
    pub fn insert(&mut self, addr: A, len: u8, next_hop: u32) -> Result<(), LpmError> {
        Self::validate(addr, len, next_hop)?;
        if len == 0 {
            self.set_rule(addr, len, next_hop);
            self.default = Some(next_hop);
            return Ok(());
        }
        let level = Self::level_of(len);
        // Groups needed: one per level on the path not yet extended.
        let mut e = self.root[addr.root_index()];
        let mut needed = 0;
        for l in 1..=level {
            if !is_ext(e) {
                needed = level - l + 1;
                break;
            }
            e = self.groups.group(e & VALUE)[addr.level_index(l)];
        }
        if needed > self.groups.available() {
            return Err(LpmError::Full { groups: self.groups.budget });
        }
        self.set_rule(addr, len, next_hop);
        let mut slot = Slot::Root(addr.root_index());
        for l in 1..=level {
            let e = self.get_slot(slot);
            let g = if is_ext(e) {
                e & VALUE
            } else {
                let g = self.groups.alloc(e);
                self.set_slot(slot, EXT | g);
                g
            };
            slot = Slot::Group(g, addr.level_index(l));
        }
        self.fill(slot, level, len, entry(len, next_hop), &Mode::Insert);
        Ok(())
    }

    /// Adds `routes` (in ascending order of address, then length, each
    /// prefix once) as [`Lpm::insert`] of each in turn would, into the same
    /// table. Into an empty table the first level is written in one pass
    /// over the routes of at most `ROOT_BITS` bits: each entry once, with
    /// the longest of them that covers it, rather than once for every
    /// route covering it (500,000 routes: 16.8M writes rather than 79M),
    /// and their rules are built from the sorted list; the longer routes
    /// are then inserted one by one. The order makes the two the same: a
    /// route that covers another sorts before it (routes not in that order
    /// are inserted one by one). On error, the route's index and why;
    /// routes may have been added, as by `insert` before it.
    pub fn insert_sorted<I>(&mut self, routes: I) -> Result<(), (usize, LpmError)>
    where
        I: Iterator<Item = (A, u8, u32)> + Clone,
    {
        let empty = self.rules.is_empty() && self.groups.used == 0;
        // Routes out of order (or repeated) would make the one pass wrong:
        // they go one by one, as into a table that holds routes.
        let sorted = routes.clone().zip(routes.clone().skip(1)).all(|(x, y)| (x.0, x.1) < (y.0, y.1));
        if !empty || !sorted {
            return routes.enumerate().try_for_each(|(i, (a, l, nh))| self.insert(a, l, nh).map_err(|e| (i, e)));
        }
        routes.clone().enumerate().try_for_each(|(i, (a, l, nh))| Self::validate(a, l, nh).map_err(|e| (i, e)))?;
        let short = |r: &(A, u8, u32)| (1..=A::ROOT_BITS).contains(&r.1);
        // The routes covering the current entry, innermost last: where
        // each ends and its entry. An empty table's first level is all
        // zero, so the entries no route covers are not written (untouched
        // pages stay unallocated).
        let mut open: Vec<(usize, u32)> = Vec::with_capacity(usize::from(A::ROOT_BITS) + 1);
        let mut at = 0;
        let root = &mut self.root[..];
        let mut fill = |from: usize, to: usize, e: u32| {
            if e != 0 && from < to {
                root[from..to].fill(e);
            }
        };
        for (a, l, nh) in routes.clone().filter(short) {
            let start = a.root_index();
            while let Some(&(end, e)) = open.last().filter(|(end, _)| *end <= start) {
                fill(at, end, e);
                at = end;
                open.pop();
            }
            fill(at, start, open.last().map_or(0, |o| o.1));
            at = start;
            open.push((start + (1usize << (A::ROOT_BITS - l)), entry(l, nh)));
        }
        while let Some((end, e)) = open.pop() {
            fill(at, end, e);
            at = end;
        }
        self.rules = routes.clone().filter(short).map(|(a, l, nh)| ((a, l), nh)).collect();
        for (_, l, _) in routes.clone().filter(short) {
            self.per_len[usize::from(l)] += 1;
        }
        for (i, (a, l, nh)) in routes.enumerate().filter(|(_, r)| !short(r)) {
            self.insert(a, l, nh).map_err(|e| (i, e))?;
        }
        Ok(())
    }

    fn set_rule(&mut self, addr: A, len: u8, next_hop: u32) {
        if self.rules.insert((addr, len), next_hop).is_none() {
            self.per_len[usize::from(len)] += 1;
        }
    }

    /// Applies a rule of depth `d` to the entries it covers, from `first` (a
    /// slot of `level`, the level `d` ends in).
    fn fill(&mut self, first: Slot, level: u32, d: u8, val: u32, mode: &Mode) {
        let count = 1usize << (Self::end_of(level) - u32::from(d));
        let d = u32::from(d);
        match first {
            Slot::Root(i) => {
                let end = Self::end_of(0);
                for j in i..i + count {
                    let e = self.root[j];
                    // Fast path for the common (non-extended, one-level) case.
                    self.root[j] = if is_ext(e) { self.groups.apply(e, end, d, val, mode) } else { Self::apply_plain(e, d, val, mode) };
                }
            }
            Slot::Group(g, i) => self.groups.apply_range(g, Self::start_of(level), i, count, d, val, mode),
        }
    }

    #[inline(always)]
    fn apply_plain(e: u32, d: u32, val: u32, mode: &Mode) -> u32 {
        match mode {
            Mode::Insert if depth(e) <= d => val,
            Mode::Delete if depth(e) == d => val,
            _ => e,
        }
    }

    /// Removes the rule `addr/len`; returns whether it existed. The next
    /// longest covering rule takes over its range; groups that become
    /// uniform are freed.
    pub fn delete(&mut self, addr: A, len: u8) -> bool {
        if self.rules.remove(&(addr, len)).is_none() {
            return false;
        }
        self.per_len[usize::from(len)] -= 1;
        if len == 0 {
            self.default = None;
            return true;
        }
        // The replacement: the longest rule covering the prefix, /0 aside
        // (a tag-0 entry falls back to it).
        let repl = (1..len)
            .rev()
            .filter(|&l| self.per_len[usize::from(l)] != 0)
            .find_map(|l| self.rules.get(&(addr & A::mask(l), l)).map(|&nh| entry(l, nh)))
            .unwrap_or(0);
        let level = Self::level_of(len);
        let mut path = [Slot::Root(0); 16];
        let mut slot = Slot::Root(addr.root_index());
        for l in 1..=level {
            path[l as usize - 1] = slot;
            let e = self.get_slot(slot);
            debug_assert!(is_ext(e), "the path of an existing rule is extended");
            slot = Slot::Group(e & VALUE, addr.level_index(l));
        }
        self.fill(slot, level, len, repl, &Mode::Delete);
        // Collapse the groups on the path that became uniform, bottom up.
        for l in (1..=level).rev() {
            let parent = path[l as usize - 1];
            let g = self.get_slot(parent) & VALUE;
            match self.groups.uniform(g, Self::start_of(l)) {
                Some(u) => {
                    self.set_slot(parent, u);
                    self.groups.release(g);
                }
                None => break,
            }
        }
        true
    }

    #[inline(always)]
    fn resolve(&self, e: u32) -> Option<u32> {
        if depth(e) != 0 {
            Some(e & VALUE)
        } else {
            self.default
        }
    }

    /// The first level, the groups and the `/0` route's next hop, as a
    /// [`netvm_vm::Dir24Walk`] reads them (IPv4): valid until the table
    /// next changes.
    pub(crate) fn walk_tables(&self) -> (*const u32, *const u32, Option<u32>) {
        (self.root.as_ptr(), self.groups.tbl8.as_ptr(), self.default)
    }

    /// The next hop of the longest rule matching `addr`.
    #[inline]
    pub fn lookup(&self, addr: A) -> Option<u32> {
        self.resolve(self.walk(self.root_array(), addr))
    }

    /// [`Lpm::lookup`] of each address of `addrs` into the same position of
    /// `out` (as far as the shorter of the two goes). Works in batches of
    /// 32: first every walk of the batch, with nothing but its loads, into
    /// a scratch array, then their next hops. The walks of a batch are
    /// independent, so their cache misses overlap; the tighter that loop,
    /// the more of them the CPU keeps in flight (measured: 15-20 % faster
    /// than resolving each lookup as it completes).
    pub fn lookup_bulk(&self, addrs: &[A], out: &mut [Option<u32>]) {
        self.lookup_bulk_in(self.root_array(), addrs, out)
    }

    #[inline(always)]
    fn lookup_bulk_in<const N: usize>(&self, root: &[u32; N], addrs: &[A], out: &mut [Option<u32>]) {
        const BATCH: usize = 32;
        let mut raw = [0u32; BATCH];
        for (a, o) in addrs.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            for (r, &x) in raw.iter_mut().zip(a) {
                *r = root[x.root_index()];
            }
            // Level by level: the loads of one level are independent.
            let mut level = 1;
            loop {
                let mut deeper = false;
                for (r, &x) in raw.iter_mut().zip(a) {
                    if is_ext(*r) {
                        *r = self.groups.tbl8[((*r & VALUE) as usize) * GROUP + x.level_index(level)];
                        deeper = true;
                    }
                }
                if !deeper {
                    break;
                }
                level += 1;
            }
            for (o, &e) in o.iter_mut().zip(&raw) {
                *o = self.resolve(e);
            }
        }
    }

    /// The first level as an array of its exact size, so that indexing it
    /// by a root index (`A::ROOT_BITS` wide) needs no bounds check.
    #[inline(always)]
    fn root_array(&self) -> Root<'_> {
        let root: &[u32] = &self.root;
        root.try_into().expect("a first level has 2^24 entries")
    }

    /// The entry that decides `addr`: its first-level entry, followed down
    /// the groups while it is extended.
    #[inline(always)]
    fn walk<const N: usize>(&self, root: &[u32; N], addr: A) -> u32 {
        let mut e = root[addr.root_index()];
        let mut level = 1;
        while is_ext(e) {
            e = self.groups.tbl8[((e & VALUE) as usize) * GROUP + addr.level_index(level)];
            level += 1;
        }
        e
    }

    /// Checks the structure (tests): every reachable group is referenced
    /// once and not free, none is collapsible, entry depths fit their
    /// level, the used count, the default route and the per-length counts
    /// are right.
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let mut seen = std::collections::HashSet::new();
        let mut stack: Vec<(u32, u32)> = Vec::new();
        for &e in self.root.iter() {
            if is_ext(e) {
                stack.push((e & VALUE, 1));
            } else {
                assert!(depth(e) <= u32::from(A::ROOT_BITS));
            }
        }
        while let Some((g, level)) = stack.pop() {
            assert!(seen.insert(g), "group {g} referenced twice");
            assert!(!self.groups.free.contains(&g), "group {g} in use and free");
            assert!(self.groups.uniform(g, Self::start_of(level)).is_none(), "group {g} should have been collapsed");
            for &e in self.groups.group(g) {
                if is_ext(e) {
                    stack.push((e & VALUE, level + 1));
                } else {
                    assert!(depth(e) <= Self::end_of(level));
                }
            }
        }
        assert_eq!(seen.len() as u32, self.groups.used);
        assert_eq!(self.default, self.rules.get(&(A::ZERO, 0)).copied());
        for (l, &n) in self.per_len.iter().enumerate() {
            assert_eq!(n as usize, self.rules.keys().filter(|k| usize::from(k.1) == l).count());
        }
    }
}

impl<A: LpmAddress> Default for Lpm<A> {
    fn default() -> Self {
        Lpm::new(A::DEFAULT_TBL8_GROUPS)
    }
}

impl<A: LpmAddress> fmt::Debug for Lpm<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lpm")
            .field("family", &A::FAMILY)
            .field("rules", &self.rules.len())
            .field("tbl8_groups_used", &self.groups.used)
            .field("tbl8_groups", &self.groups.budget)
            .finish()
    }
}

/// A zeroed table of `u32` entries. A large one comes straight from the
/// kernel (calloc), so that pages never written cost nothing, and starts on
/// a 2 MiB boundary (2 MiB of address space are allocated beyond it and
/// never touched), so that on Linux transparent huge pages can back all of
/// it: a lookup in the 64 MiB IPv4 table then takes no TLB miss (DPDK puts
/// its tables on hugepages for the same reason).
struct HugeTable {
    buf: Box<[u32]>,
    off: usize,
    len: usize,
}

impl HugeTable {
    fn zeroed(len: usize) -> HugeTable {
        let bytes = len * std::mem::size_of::<u32>();
        if bytes < HUGE {
            return HugeTable { buf: vec![0u32; len].into_boxed_slice(), off: 0, len };
        }
        let slack = HUGE / std::mem::size_of::<u32>();
        let buf = vec![0u32; len + slack].into_boxed_slice();
        let addr = buf.as_ptr() as usize;
        let off = (addr.next_multiple_of(HUGE) - addr) / std::mem::size_of::<u32>();
        let t = HugeTable { buf, off, len };
        advise_huge(t.as_ptr().cast(), bytes);
        t
    }
}

impl std::ops::Deref for HugeTable {
    type Target = [u32];
    #[inline(always)]
    fn deref(&self) -> &[u32] {
        &self.buf[self.off..self.off + self.len]
    }
}

impl std::ops::DerefMut for HugeTable {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [u32] {
        &mut self.buf[self.off..self.off + self.len]
    }
}

impl Clone for HugeTable {
    fn clone(&self) -> HugeTable {
        let mut t = HugeTable::zeroed(self.len);
        t.copy_from_slice(self);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v4(s: &str) -> u32 {
        s.parse::<Ipv4Addr>().unwrap().into()
    }

    fn v6(s: &str) -> u128 {
        s.parse::<Ipv6Addr>().unwrap().into()
    }

    /// The naive reference: a linear scan, the longest match wins.
    fn naive<A: LpmAddress>(rules: &BTreeMap<(A, u8), u32>, addr: A) -> Option<u32> {
        rules.iter().filter(|((a, l), _)| addr & A::mask(*l) == *a).max_by_key(|((_, l), _)| *l).map(|(_, &nh)| nh)
    }

    /// The same table, field for field, as `insert` of each route in turn.
    fn assert_same<A: LpmAddress>(bulk: &Lpm<A>, one_by_one: &Lpm<A>) {
        assert!(bulk.root[..] == one_by_one.root[..], "first level");
        assert_eq!(bulk.groups.tbl8, one_by_one.groups.tbl8, "groups");
        assert_eq!((bulk.groups.used, &bulk.groups.free), (one_by_one.groups.used, &one_by_one.groups.free));
        assert_eq!(bulk.rules, one_by_one.rules);
        assert_eq!(bulk.per_len, one_by_one.per_len);
        assert_eq!(bulk.default, one_by_one.default);
    }

    /// Random nested routes of `lens` under a few top bytes, sorted and
    /// each prefix once.
    fn sorted_routes<A: LpmAddress>(seed: u64, n: usize, lens: &[u8], from_u128: impl Fn(u128) -> A) -> Vec<(A, u8, u32)> {
        let mut g = netvm_traffic::SplitMix64::new(seed);
        let mut routes: Vec<(A, u8, u32)> = (0..n)
            .map(|_| {
                let len = lens[(g.next_u64() % lens.len() as u64) as usize];
                let top = u128::from(10 + g.next_u64() % 3) << (A::BITS - 8);
                let low = (u128::from(g.next_u64()) << 64 | u128::from(g.next_u64())) >> (128 - u32::from(A::BITS) + 8);
                let addr = from_u128(top | low) & A::mask(len);
                (addr, len, (g.next_u64() % 1000) as u32)
            })
            .collect();
        routes.sort_by_key(|r| (r.0, r.1));
        routes.dedup_by_key(|r| (r.0, r.1));
        routes
    }

    #[test]
    fn sorted_routes_into_an_empty_table_make_the_table_of_one_by_one_inserts() {
        let lens4 = [0, 1, 8, 12, 16, 20, 23, 24, 25, 28, 32];
        let routes = sorted_routes(0x6c70_6d34, 4000, &lens4, |a| a as u32);
        let mut bulk = Lpm4::new(1 << 12);
        bulk.insert_sorted(routes.iter().copied()).unwrap();
        let mut one = Lpm4::new(1 << 12);
        for &(a, l, nh) in routes.iter().rev() {
            one.insert(a, l, nh).unwrap();
        }
        // Another order numbers the groups otherwise: field for field, the
        // table of the same order.
        let mut sorted_one = Lpm4::new(1 << 12);
        for &(a, l, nh) in &routes {
            sorted_one.insert(a, l, nh).unwrap();
        }
        assert_same(&bulk, &sorted_one);
        assert_eq!(bulk.rules, one.rules);
        for (a, _, _) in routes.iter().take(500) {
            for probe in [*a, *a | 0x55, *a | 0xff_ffff] {
                assert_eq!(bulk.lookup(probe), naive(&one.rules, probe), "{probe:#x}");
            }
        }
        let lens6 = [0, 16, 20, 24, 32, 48, 56, 64, 128];
        let routes6 = sorted_routes(0x6c70_6d36, 2000, &lens6, |a| a);
        let (mut bulk6, mut one6) = (Lpm6::new(1 << 14), Lpm6::new(1 << 14));
        bulk6.insert_sorted(routes6.iter().copied()).unwrap();
        for &(a, l, nh) in &routes6 {
            one6.insert(a, l, nh).unwrap();
        }
        assert_same(&bulk6, &one6);
        // Into a table that holds routes already: one by one.
        let mut more = Lpm4::new(1 << 12);
        more.insert(v4("10.0.0.0"), 8, 7).unwrap();
        more.insert_sorted(routes.iter().copied()).unwrap();
        assert_eq!(more.len(), routes.len() + usize::from(!routes.iter().any(|r| r.0 == v4("10.0.0.0") && r.1 == 8)));
        // Out of order into an empty table: one by one too, the same routes.
        let mut unsorted = Lpm4::new(1 << 12);
        unsorted.insert_sorted(routes.iter().rev().copied()).unwrap();
        assert_eq!((unsorted.rules.clone(), &unsorted.per_len), (one.rules.clone(), &one.per_len));
        assert!(unsorted.root[..] == one.root[..], "first level");
    }

    /// An error names the route; too few groups for the long routes.
    #[test]
    fn sorted_routes_report_the_route_that_fails() {
        let routes = [(v4("10.0.0.0"), 8, 1), (v4("10.1.0.0"), 16, 2), (v4("10.1.2.0"), 25, 3), (v4("10.1.3.0"), 25, 4)];
        let mut t = Lpm4::new(1);
        assert_eq!(t.insert_sorted(routes.into_iter()), Err((3, LpmError::Full { groups: 1 })));
        assert_eq!((t.lookup(v4("10.1.2.1")), t.lookup(v4("10.1.3.1")), t.lookup(v4("10.9.0.0"))), (Some(3), Some(2), Some(1)));
        let mut t = Lpm4::new(1);
        assert_eq!(t.insert_sorted([(v4("10.0.0.0"), 8, 1), (v4("10.0.0.1"), 8, 2)].into_iter()), Err((1, LpmError::HostBits)));
        assert!(t.is_empty(), "checked before anything is added");
    }

    #[test]
    fn basic_ipv4() {
        let mut t = Lpm4::new(16);
        assert_eq!(t.lookup(v4("10.1.2.3")), None);
        t.insert(v4("10.0.0.0"), 8, 1).unwrap();
        t.insert(v4("10.1.0.0"), 16, 2).unwrap();
        t.insert(v4("10.1.2.0"), 24, 3).unwrap();
        t.insert(v4("10.1.2.128"), 25, 4).unwrap();
        t.insert(v4("10.1.2.3"), 32, 5).unwrap();
        assert_eq!(t.lookup(v4("10.1.2.3")), Some(5));
        assert_eq!(t.lookup(v4("10.1.2.4")), Some(3));
        assert_eq!(t.lookup(v4("10.1.2.200")), Some(4));
        assert_eq!(t.lookup(v4("10.1.3.0")), Some(2));
        assert_eq!(t.lookup(v4("10.2.0.0")), Some(1));
        assert_eq!(t.lookup(v4("11.0.0.0")), None);
        t.insert(v4("0.0.0.0"), 0, 9).unwrap();
        assert_eq!(t.lookup(v4("11.0.0.0")), Some(9));
        assert_eq!(t.tbl8_groups_used(), 1);
        // Replace.
        t.insert(v4("10.1.2.0"), 24, 33).unwrap();
        assert_eq!(t.lookup(v4("10.1.2.4")), Some(33));
        assert_eq!(t.len(), 6);
        // Delete restores the next longest covering rule.
        assert!(t.delete(v4("10.1.2.0"), 24));
        assert!(!t.delete(v4("10.1.2.0"), 24));
        assert_eq!(t.lookup(v4("10.1.2.4")), Some(2));
        assert_eq!(t.lookup(v4("10.1.2.3")), Some(5));
        assert!(t.delete(v4("10.1.0.0"), 16));
        assert_eq!(t.lookup(v4("10.1.2.4")), Some(1));
        assert!(t.delete(v4("0.0.0.0"), 0));
        assert!(t.delete(v4("10.0.0.0"), 8));
        assert_eq!(t.lookup(v4("10.1.2.4")), None);
        assert_eq!(t.lookup(v4("10.1.2.200")), Some(4));
        t.check();
        assert_eq!(t.iter().collect::<Vec<_>>(), vec![(v4("10.1.2.3"), 32, 5), (v4("10.1.2.128"), 25, 4)]);
        assert_eq!(Lpm4::validate(v4("10.0.0.1"), 8, 1), Err(LpmError::HostBits));
        assert_eq!(t.insert(0, 33, 1), Err(LpmError::BadLength { len: 33, max: 32 }));
        assert_eq!(t.insert(0, 0, 1 << 24), Err(LpmError::BadNextHop(1 << 24)));
        assert_eq!(t.insert(v4("10.0.0.1"), 8, 1), Err(LpmError::HostBits));
        t.clear();
        assert!(t.is_empty());
        assert_eq!(t.tbl8_groups_used(), 0);
        assert_eq!(t.lookup(v4("10.1.2.200")), None);
    }

    #[test]
    fn basic_ipv6() {
        let mut t = Lpm6::new(100);
        t.insert(v6("2001:db8::"), 32, 1).unwrap();
        t.insert(v6("2001:db8:1::"), 48, 2).unwrap();
        t.insert(v6("2001:db8:1::1"), 128, 3).unwrap();
        t.insert(v6("2001:db8:1::"), 127, 4).unwrap();
        assert_eq!(t.lookup(v6("2001:db8:1::1")), Some(3));
        assert_eq!(t.lookup(v6("2001:db8:1::")), Some(4));
        assert_eq!(t.lookup(v6("2001:db8:1::2")), Some(2));
        assert_eq!(t.lookup(v6("2001:db8:2::")), Some(1));
        assert_eq!(t.lookup(v6("2001:db9::")), None);
        t.check();
        // /128 host route: the full path of 13 groups (shared with /127).
        assert_eq!(t.tbl8_groups_used(), 13);
        assert!(t.delete(v6("2001:db8:1::1"), 128));
        assert!(t.delete(v6("2001:db8:1::"), 127));
        assert_eq!(t.lookup(v6("2001:db8:1::1")), Some(2));
        // The /48 needs levels 1..=3 (bits 24..48); the /32 level 1.
        assert_eq!(t.tbl8_groups_used(), 3);
        assert!(t.delete(v6("2001:db8:1::"), 48));
        assert_eq!(t.tbl8_groups_used(), 1);
        assert!(t.delete(v6("2001:db8::"), 32));
        assert_eq!(t.tbl8_groups_used(), 0);
        t.check();
    }

    #[test]
    fn tbl8_groups_are_recycled() {
        let mut t = Lpm4::new(4);
        t.insert(v4("10.0.0.0"), 24, 1).unwrap();
        assert_eq!(t.tbl8_groups_used(), 0);
        t.insert(v4("10.0.0.0"), 25, 2).unwrap();
        t.insert(v4("10.0.0.128"), 25, 2).unwrap();
        t.insert(v4("10.0.0.64"), 26, 3).unwrap();
        assert_eq!(t.tbl8_groups_used(), 1);
        assert!(t.delete(v4("10.0.0.64"), 26));
        // Two /25s with the same next hop: uniform, but deeper than the first level.
        assert_eq!(t.tbl8_groups_used(), 1);
        assert!(t.delete(v4("10.0.0.0"), 25));
        assert_eq!(t.tbl8_groups_used(), 1);
        assert!(t.delete(v4("10.0.0.128"), 25));
        assert_eq!(t.tbl8_groups_used(), 0);
        assert_eq!(t.lookup(v4("10.0.0.200")), Some(1));
        // A shorter rule's delete leaves a group deeper rules need.
        t.insert(v4("10.0.0.7"), 32, 7).unwrap();
        assert!(t.delete(v4("10.0.0.0"), 24));
        assert_eq!(t.tbl8_groups_used(), 1);
        assert_eq!(t.lookup(v4("10.0.0.7")), Some(7));
        assert_eq!(t.lookup(v4("10.0.0.8")), None);
        assert!(t.delete(v4("10.0.0.7"), 32));
        assert_eq!(t.tbl8_groups_used(), 0);
        // Many insert/delete rounds reuse the same storage.
        for round in 0..100u32 {
            for i in 0..4u32 {
                t.insert(v4("20.0.0.0") + (i << 8) + round % 256, 32, i).unwrap();
            }
            assert!(t.insert(v4("30.0.0.1"), 32, 1).is_err());
            for i in 0..4u32 {
                assert!(t.delete(v4("20.0.0.0") + (i << 8) + round % 256, 32));
            }
        }
        assert_eq!(t.groups.tbl8.len(), 4 * GROUP);
        t.check();
    }

    #[test]
    fn budget_exhaustion_changes_nothing() {
        let mut t = Lpm4::new(2);
        t.insert(v4("10.0.0.0"), 25, 1).unwrap();
        t.insert(v4("10.0.1.0"), 25, 2).unwrap();
        assert_eq!(t.insert(v4("10.0.2.0"), 25, 3), Err(LpmError::Full { groups: 2 }));
        assert_eq!(t.len(), 2);
        assert_eq!(t.lookup(v4("10.0.2.0")), None);
        // Needing no new group still works.
        t.insert(v4("10.0.1.128"), 26, 4).unwrap();
        t.insert(v4("10.0.0.0"), 8, 5).unwrap();
        assert_eq!(t.lookup(v4("10.0.2.0")), Some(5));
        assert!(t.delete(v4("10.0.0.0"), 25));
        t.insert(v4("10.0.2.0"), 25, 3).unwrap();
        assert_eq!(t.lookup(v4("10.0.2.0")), Some(3));
        t.check();

        // IPv6: a host route needs 13 groups at once, or none is taken.
        let mut t = Lpm6::new(12);
        let a = v6("2001:db8::100");
        assert_eq!(t.insert(a, 128, 1), Err(LpmError::Full { groups: 12 }));
        assert_eq!((t.len(), t.tbl8_groups_used()), (0, 0));
        assert_eq!(t.lookup(a), None);
        t.insert(a, 120, 1).unwrap();
        assert_eq!(t.tbl8_groups_used(), 12);
        assert!(t.insert(a, 128, 1).is_err());
        assert_eq!(t.lookup(a), Some(1));
        t.check();
        assert_eq!(Lpm6::new(u32::MAX).tbl8_groups(), MAX_TBL8_GROUPS);
    }

    #[test]
    fn short_prefixes_cover_the_table() {
        let mut t = Lpm4::new(8);
        t.insert(v4("10.0.0.5"), 32, 7).unwrap();
        t.insert(v4("128.0.0.0"), 1, 1).unwrap();
        t.insert(0, 1, 2).unwrap();
        assert_eq!(t.lookup(v4("255.255.255.255")), Some(1));
        assert_eq!(t.lookup(0), Some(2));
        assert_eq!(t.lookup(v4("10.0.0.5")), Some(7));
        assert_eq!(t.lookup(v4("10.0.0.6")), Some(2));
        assert!(t.delete(0, 1));
        assert_eq!(t.lookup(v4("10.0.0.6")), None);
        assert_eq!(t.lookup(v4("10.0.0.5")), Some(7));
        t.check();
    }

    /// Lengths, biased to the level boundaries and the extremes.
    fn len_strategy(bits: u8, root: u8) -> impl Strategy<Value = u8> + Clone {
        let mut special = vec![0, 1, bits, bits - 1, root, root - 1, root + 1];
        let mut b = root;
        while b < bits {
            special.extend([b + 7, b + 8, b + 9].into_iter().filter(|&x| x <= bits));
            b += 8;
        }
        prop_oneof![proptest::sample::select(special), root.saturating_sub(8)..=bits]
    }

    #[derive(Clone, Debug)]
    enum Op<A> {
        Insert(A, u8, u32),
        /// Delete the rule with this index among the existing ones (or a
        /// random one if there are none).
        DeleteExisting(usize),
        Delete(A, u8),
        Lookup(A),
    }

    fn ops<A: LpmAddress>(
        addr: impl Strategy<Value = A> + Clone,
        len: impl Strategy<Value = u8> + Clone,
    ) -> impl Strategy<Value = Vec<Op<A>>> {
        let op = prop_oneof![
            6 => (addr.clone(), len.clone(), 0..4u32).prop_map(|(a, l, nh)| Op::Insert(a & A::mask(l), l, nh)),
            3 => any::<usize>().prop_map(Op::DeleteExisting),
            1 => (addr.clone(), len).prop_map(|(a, l)| Op::Delete(a & A::mask(l), l)),
            1 => addr.prop_map(Op::Lookup),
        ];
        proptest::collection::vec(op, 1..48)
    }

    /// Addresses at and around a rule's range.
    fn probes<A: LpmAddress>(a: A, l: u8, near: impl Fn(A) -> [A; 2]) -> Vec<A> {
        let last = a | !A::mask(l);
        let [a0, a1] = near(a);
        let [b0, b1] = near(last);
        vec![a, last, a0, a1, b0, b1]
    }

    fn run_ops<A: LpmAddress>(ops: Vec<Op<A>>, budget: u32, near: impl Fn(A) -> [A; 2] + Copy) {
        let mut t = Lpm::<A>::new(budget);
        let mut model: BTreeMap<(A, u8), u32> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Insert(a, l, nh) => {
                    let before = t.tbl8_groups_used();
                    match t.insert(a, l, nh) {
                        Ok(()) => {
                            model.insert((a, l), nh);
                        }
                        Err(LpmError::Full { .. }) => {
                            assert_eq!(t.tbl8_groups_used(), before);
                            assert!(before + A::LEVELS > budget, "full with room");
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                Op::DeleteExisting(i) => {
                    if !model.is_empty() {
                        let k = *model.keys().nth(i % model.len()).unwrap();
                        model.remove(&k);
                        assert!(t.delete(k.0, k.1));
                    }
                }
                Op::Delete(a, l) => assert_eq!(t.delete(a, l), model.remove(&(a, l)).is_some()),
                Op::Lookup(a) => assert_eq!(t.lookup(a), naive(&model, a)),
            }
            assert_eq!(t.len(), model.len());
            for &(a, l) in model.keys() {
                for p in probes(a, l, near) {
                    assert_eq!(t.lookup(p), naive(&model, p), "lookup {p:?}, rules {model:?}");
                }
            }
        }
        t.check();
        assert_eq!(t.iter().map(|(a, l, nh)| ((a, l), nh)).collect::<BTreeMap<_, _>>(), model);
        // Groups in use depend on the rules alone: a fresh build uses as many.
        let mut fresh = Lpm::<A>::new(budget);
        for (a, l, nh) in t.iter() {
            fresh.insert(a, l, nh).unwrap();
        }
        assert_eq!(fresh.tbl8_groups_used(), t.tbl8_groups_used());
        let addrs: Vec<A> = model.keys().flat_map(|&(a, l)| probes(a, l, near)).collect();
        let mut out = vec![Some(u32::MAX); addrs.len()];
        t.lookup_bulk(&addrs, &mut out);
        for (a, o) in addrs.iter().zip(&out) {
            assert_eq!(*o, naive(&model, *a));
        }
    }

    /// IPv4 addresses clustered around a few bases so that rules nest and
    /// overlap.
    fn addr4() -> impl Strategy<Value = u32> + Clone {
        let base = proptest::sample::select(vec![0u32, 0x0A00_0000, 0x0A01_0200, 0x0A01_02FF, 0x8000_0000, 0xFFFF_FFFF]);
        prop_oneof![(base, any::<u32>(), 0..32u32).prop_map(|(b, r, s)| b ^ (r >> s)), any::<u32>()]
    }

    fn addr6() -> impl Strategy<Value = u128> + Clone {
        let base = proptest::sample::select(vec![0u128, 0x2001_0db8 << 96, (0x2001_0db8_0001 << 80) | 0xFF, u128::MAX, 1 << 127]);
        prop_oneof![(base, any::<u128>(), 0..128u32).prop_map(|(b, r, s)| b ^ (r >> s)), any::<u128>()]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        #[test]
        fn ipv4_matches_naive(ops in ops(addr4(), len_strategy(32, 24)), budget in prop_oneof![Just(1u32), Just(3), Just(1000)]) {
            run_ops(ops, budget, |a: u32| [a.wrapping_sub(1), a.wrapping_add(1)]);
        }

        #[test]
        fn ipv6_matches_naive(ops in ops(addr6(), len_strategy(128, 16)), budget in prop_oneof![Just(14u32), Just(30), Just(5000)]) {
            run_ops(ops, budget, |a: u128| [a.wrapping_sub(1), a.wrapping_add(1)]);
        }
    }

    /// The thread's CPU time where there is one: other processes' time
    /// slices do not count.
    fn cpu_time() -> std::time::Duration {
        #[cfg(target_os = "linux")]
        {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: `ts` is a valid timespec for the call to write.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
        }
        #[cfg(not(target_os = "linux"))]
        {
            static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            START.get_or_init(std::time::Instant::now).elapsed()
        }
    }

    /// A quick measurement: `cargo test -p netvm-copro --release --lib -- --ignored --nocapture lpm_speed`.
    #[test]
    #[ignore]
    fn lpm_speed() {
        use std::time::Instant;
        let mut g = netvm_traffic::SplitMix64::new(0x9E37_79B9_7F4A_7C15);
        let mut rng = move || g.next_u64();
        let mut t = Lpm4::new(1 << 16);
        let start = Instant::now();
        let mut n = 0;
        while t.len() < 500_000 {
            let r = rng();
            // Roughly a BGP table's mix: mostly /24, then /16../23, a few longer.
            let len = match r % 100 {
                0..=59 => 24,
                60..=94 => 16 + (r >> 8) as u8 % 8,
                95..=97 => 8 + (r >> 8) as u8 % 8,
                _ => 25 + (r >> 8) as u8 % 8,
            };
            let a = (r >> 32) as u32 & u32::mask(len);
            if t.insert(a, len, n % (1 << 24)).is_err() {
                break;
            }
            n += 1;
        }
        let build = start.elapsed();
        let addrs: Vec<u32> = (0..1 << 22).map(|_| rng() as u32).collect();
        let mut out = vec![None; addrs.len()];
        let ns = |d: std::time::Duration| d.as_nanos() as f64 / addrs.len() as f64;
        let (mut single, mut bulk) = (f64::MAX, f64::MAX);
        let mut hits = 0;
        // Best of a few rounds: shared machines are noisy.
        for _ in 0..5 {
            let start = cpu_time();
            hits = 0u64;
            for &a in &addrs {
                hits += u64::from(t.lookup(std::hint::black_box(a)).is_some());
            }
            single = single.min(ns(cpu_time() - start));
            let start = cpu_time();
            t.lookup_bulk(std::hint::black_box(&addrs), &mut out);
            bulk = bulk.min(ns(cpu_time() - start));
        }
        assert_eq!(out.iter().filter(|o| o.is_some()).count() as u64, hits);
        let huge = std::fs::read_to_string("/proc/self/smaps_rollup")
            .ok()
            .and_then(|s| s.lines().find(|l| l.starts_with("AnonHugePages")).map(str::to_string))
            .unwrap_or_default();
        println!(
            "ipv4: {} rules, {} tbl8 groups, build {build:.2?}; {single:.1} ns/lookup one at a time, {bulk:.1} ns/lookup bulk ({huge})",
            t.len(),
            t.tbl8_groups_used(),
        );
        drop(t);

        // IPv6: /32 allocations under 2000::/3 holding /36../64 routes.
        let mut t = Lpm6::new(1 << 17);
        let allocs: Vec<u128> = (0..4096).map(|_| (0x2000_0000 | (rng() as u128 & 0x1FFF_FFFF)) << 96).collect();
        let start = std::time::Instant::now();
        while t.len() < 100_000 {
            let r = rng();
            let len = [32u8, 36, 40, 44, 48, 48, 48, 48, 56, 64][(r % 10) as usize];
            let a = (allocs[(r >> 8) as usize % allocs.len()] | u128::from(rng()) << 32) & u128::mask(len);
            if t.insert(a, len, (r >> 40) as u32 & MAX_NEXT_HOP).is_err() {
                break;
            }
        }
        let build = start.elapsed();
        let addrs: Vec<u128> =
            (0..1 << 21).map(|_| allocs[rng() as usize % allocs.len()] | u128::from(rng()) << 32 | u128::from(rng())).collect();
        let ns = |d: std::time::Duration| d.as_nanos() as f64 / addrs.len() as f64;
        let (mut single, mut bulk) = (f64::MAX, f64::MAX);
        for _ in 0..5 {
            let start = cpu_time();
            for &a in &addrs {
                std::hint::black_box(t.lookup(std::hint::black_box(a)));
            }
            single = single.min(ns(cpu_time() - start));
            let start = cpu_time();
            t.lookup_bulk(std::hint::black_box(&addrs), &mut out[..addrs.len()]);
            bulk = bulk.min(ns(cpu_time() - start));
        }
        println!(
            "ipv6: {} rules, {} tbl8 groups, build {build:.2?}; {single:.1} ns/lookup one at a time, {bulk:.1} ns/lookup bulk",
            t.len(),
            t.tbl8_groups_used(),
        );
    }
}
