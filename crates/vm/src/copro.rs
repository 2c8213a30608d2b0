//! The virtual coprocessor interface (NetVM paper §3.1.3).
//!
//! A coprocessor exposes input registers, output registers and numbered
//! operations. A NetPE declares instances with `.copro NAME KIND`; the
//! runtime creates each instance through the [`CoproRegistry`] from the kind
//! and the configuration the application manifest gives it; NetIL accesses
//! it with `copro.in`, `copro.invoke` and `copro.out`. Every engine reaches
//! coprocessors through this trait, so they behave identically everywhere.

use std::collections::BTreeMap;
use std::fmt;

use crate::Timestamp;

/// Why a coprocessor access failed. The handler faults with `copro`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CoproError {
    /// No such input or output register.
    #[error("no register {0}")]
    NoRegister(u8),
    /// No such operation.
    #[error("no operation {0}")]
    NoOperation(u8),
    /// An argument outside what the coprocessor accepts.
    #[error("bad argument: {0}")]
    BadArgument(String),
}

/// What an operation may look at besides its registers.
#[derive(Clone, Copy, Debug)]
pub struct InvokeContext<'a> {
    /// Packet memory of the current exchange buffer (empty in `.init`).
    pub packet: &'a [u8],
    /// Info memory of the current exchange buffer (empty in `.init`).
    pub info: &'a [u8],
    /// Timestamp of the current packet (zero in `.init`).
    pub now: Timestamp,
    /// Sequence number of the current packet in the run (its position in
    /// arrival order over every input; zero in `.init`). Unlike anything a
    /// NetPE's data memory can count, it is the same whichever worker runs
    /// the packet: an `eventlog` records it to say which packet an event
    /// belongs to.
    pub seq: u64,
}

/// An event a coprocessor recorded for the host application (an IDS
/// alert): see [`Coprocessor::drain_events`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoproEvent {
    /// Four words the program wrote.
    pub words: [u32; 4],
    /// The time of the packet being processed.
    pub ts: Timestamp,
    /// The sequence number of the packet being processed.
    pub seq: u64,
}

/// How the state of an instance is divided among the workers of a run
/// with several workers (`--workers N`); see [`Coprocessor::fork`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerShare {
    /// One state that every worker reaches (read-mostly tables such as
    /// `lpm`, `strmatch`, `regex`; a `table` shared under a lock): statistics
    /// and dumps are read from one handle.
    Shared,
    /// One state per worker (`counters`, `meter`, `eventlog`, a sharded
    /// `table`): statistics are summed by name over the workers, and at the
    /// end of a run every worker's state is folded into the first one's
    /// ([`Coprocessor::absorb`]) before it is dumped.
    PerWorker,
}

/// Where an instance keeps its registers, for compiled code to reach
/// without a call (`struct netvm_regfile` of include/netvm.h): the inline
/// register file of [`Coprocessor::registers`].
///
/// Bit `r` of `inputs` says input register `r` is the `u32` at
/// `input + r`; bit `r` of `outputs`, that output register `r` is the one
/// at `output + r`. Registers whose bit is clear (and every register from
/// 32 on) are reached through [`Coprocessor::write`] and
/// [`Coprocessor::read`].
///
/// Bit `op` of `ops` says operation `op` has a direct entry, `direct[op]`:
/// compiled code calls it instead of going through [`Coprocessor::invoke`]
/// (see [`DirectOp`]). Operations from 32 on have none.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegisterFile {
    /// The input registers (null when `inputs` is 0).
    pub input: *mut u32,
    /// The output registers (null when `outputs` is 0).
    pub output: *const u32,
    /// The input registers at `input`, one bit each.
    pub inputs: u32,
    /// The output registers at `output`, one bit each.
    pub outputs: u32,
    /// The direct entries of operations, indexed by operation (null when
    /// `ops` is 0; at least as long as the highest bit of `ops` says).
    pub direct: *const DirectOp,
    /// The operations with a direct entry, one bit each.
    pub ops: u32,
    /// The operations compiled code may perform itself as the walk of
    /// `walk`, one bit each (operations 0 to 7; 0 when `walk` is null).
    pub walk_ops: u32,
    /// What the operations of `walk_ops` walk (null when none): a
    /// [`Dir24Walk`] or a [`BucketWalk`], as the kind's [`WalkKind::form`]
    /// says.
    pub walk: *const std::ffi::c_void,
}

/// The walks compiled code may perform itself instead of calling an
/// instance, as Linux lets a BPF map type emit its lookup inline
/// (`map_gen_lookup`): an instance whose operation `op` is exactly such a
/// walk sets bit `op` of [`RegisterFile::walk_ops`] and points
/// [`RegisterFile::walk`] at the structure the engine reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkForm {
    /// The DIR-24-8 longest-prefix match of DPDK's `rte_lpm` ([`Dir24Walk`]).
    Dir24,
    /// The probe of a bucketized cuckoo hash table with 16-bit tags
    /// ([`BucketWalk`]).
    Bucket,
}

/// A walk's structure ([`Dir24Walk`], [`BucketWalk`]): what
/// [`RegisterFile::with_walk`] takes.
pub trait Walk {}

impl Walk for Dir24Walk {}

impl Walk for BucketWalk {}

/// A lookup compiled code may perform itself instead of calling the
/// instance (`struct netvm_dir24walk`, [`WalkForm::Dir24`]): the DIR-24-8
/// walk of DPDK's `rte_lpm` (IPv4 longest-prefix match; the `lpm` kind's
/// `lookup` and `lookup_pkt`).
///
/// Which operations may be walks, and where each finds its key, belongs to
/// the kind's interface and is known when the code is compiled
/// ([`WalkKind::ALL`]); engines compile the walk for those alone. The
/// operation, as the engine performs it:
/// - the key: [`WalkKey::Register`] `r`: the `u32` in input register `r`;
///   [`WalkKey::Packet`] `r`: the four bytes of the packet at the offset in
///   input register `r`, big-endian. Where those bytes lie past the
///   packet's end, the engine calls the operation instead (its direct
///   entry or `invoke`), which faults as the operation does;
/// - `e = root[key >> 8]`; where `e >= 0xff00_0000` (a group),
///   `e = groups[(e & 0xff_ffff) * 256 + (key & 0xff)]`;
/// - where `e >> 24` is not 0, found with next hop `e & 0xff_ffff`; else
///   found with `default_hop` where `has_default` is 1, else not found
///   (`default_hop` is then 0);
/// - output register 0 is 1 where found, else 0; output register 1 the
///   next hop (both must be inline in the file); `counters[0]` (lookups)
///   is incremented, and `counters[1]` (hits) where found, with a plain
///   load and store (the instance is their only writer).
///
/// The implementation keeps this valid wherever the register file is
/// (see [`Coprocessor::registers`]), and updates it in every operation
/// that changes its tables.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dir24Walk {
    /// The first level: 2^24 entries.
    pub root: *const u32,
    /// The groups of the second level, 256 entries each.
    pub groups: *const u32,
    /// Two counters: lookups, hits.
    pub counters: *mut u64,
    /// The next hop of the `/0` route (0 when there is none).
    pub default_hop: u32,
    /// 1 where there is a `/0` route, else 0.
    pub has_default: u32,
}

impl Dir24Walk {
    /// Prefetches what the walks of `addrs` will read (a hint; no effect
    /// on results): every first-level entry, then, those misses in flight
    /// together, each entry read in a tight loop and the group entry
    /// prefetched where it points to a group. The pre-lookup stage of a
    /// batch of walks (the paper's prefetch of the `tbl24` entry):
    /// [`Dir24Walk::prefetch_first`] then [`Dir24Walk::prefetch_second`].
    ///
    /// # Safety
    /// `root` and `groups` must be live tables as the type's contract says
    /// (`root` of 2^24 entries, every group an entry points to inside
    /// `groups`), unchanged during the call.
    pub unsafe fn prefetch(&self, addrs: &[u32]) {
        self.prefetch_first(addrs);
        // SAFETY: the caller's contract.
        unsafe { self.prefetch_second(addrs) };
    }

    /// Prefetches the first-level entries the walks of `addrs` will read
    /// (a hint). It reads no entry, so it may run well before the walks,
    /// to have the entries arrive while other work runs.
    pub fn prefetch_first(&self, addrs: &[u32]) {
        for &a in addrs {
            crate::prefetch(self.root.wrapping_add((a >> 8) as usize));
        }
    }

    /// Reads the first-level entry of each walk of `addrs` (best already
    /// prefetched, [`Dir24Walk::prefetch_first`]) and prefetches the group
    /// entry where it points to a group (a hint).
    ///
    /// # Safety
    /// As [`Dir24Walk::prefetch`].
    pub unsafe fn prefetch_second(&self, addrs: &[u32]) {
        for &a in addrs {
            // SAFETY: `a >> 8 < 2^24`, inside the first level (the caller's contract).
            let e = unsafe { self.root.add((a >> 8) as usize).read() };
            if e >= 0xff00_0000 {
                crate::prefetch(self.groups.wrapping_add((e & 0xff_ffff) as usize * 256 + (a & 0xff) as usize));
            }
        }
    }
}

/// An exact-match lookup, or the replace of a stored key's value, that
/// compiled code may perform itself (`struct netvm_bucketwalk`,
/// [`WalkForm::Bucket`]): the probe of a bucketized cuckoo hash table (the
/// `table` kind's `lookup_pkt` and `insert_pkt`), with keys of 4 to 16
/// bytes in packet memory and values of at most 4 bytes.
///
/// The table: `nbuckets` buckets of 8 slots; bucket `b`'s 16-bit tags at
/// `tags + 16 b` (0: free), slot `s`'s entry at `entries + s * stride`:
/// its key (`key_size` bytes), its value (`ts_off - key_size` bytes) and
/// its timestamp (little-endian `u64`, ns) at `ts_off`. The operation, as
/// the engine performs it, `now` being the packet's time in ns:
/// - where `tags` is null, or `shape` is not the one the code was compiled
///   for (code compiled for a shape takes the fields [`BucketWalk::layout`]
///   derives from it as constants), or the packet's timestamp is 2^64 ns or later,
///   or the key's `reach` bytes at the offset in the key's register
///   ([`WalkKey::Packet`]) lie past the packet's end, it calls the
///   operation instead (which faults where the key is past the end);
/// - `x0`, `x1`: the little-endian `u64`s at the key and at `b_off` into
///   it; the key's words `a = x0 & a_mask`, `b = (x1 >> b_shift) & a_mask`
///   (for an entry's key, the same from the entry);
/// - `h = fold(fold(a ^ seed[0], b ^ seed[1]) ^ MIX[0], MIX[1])`
///   (`crate::hash::fold`); the first bucket `((h & 0xffff_ffff) * nbuckets) >> 32`,
///   the tag `h >> 48`, or 1 where that is 0; the second bucket
///   `t - b1` where `t = (u64(u32(tag) * ALT) * nbuckets) >> 32` is at
///   least `b1`, else `t + nbuckets - b1`;
/// - the entry: a slot of either bucket with the tag whose key's words
///   are `a` and `b`. It is idle where `idle_ns` is not `u64::MAX` and
///   `now - timestamp` (0 where negative) exceeds `idle_ns`;
/// - a lookup ([`WalkKind::inserts`] clear): found where the entry exists
///   and is not idle; output registers 0 to 4 become found (1 or 0), the
///   value's first big-endian word `& value_mask` (0 when not found), 0,
///   0, 0; `counters[0]` (lookups) is incremented, and `counters[1]`
///   (hits) where found;
/// - an insert (bit set): where the entry exists and is not idle, the
///   value (input register 4, big-endian, its first `ts_off - key_size`
///   bytes) and the timestamp `now` are stored in it, output registers 0
///   to 4 become 1, 0, 0, 0, 0, `counters[2]` (inserts) is incremented
///   and `*store_now` raised to `now`; anything else calls the operation;
/// - every operation performed raises `*handle_now` to `now`.
///
/// Counters and times take a plain load and store (the instance is their
/// only writer). The implementation keeps this valid wherever the register
/// file is (see [`Coprocessor::registers`]), or sets `tags` null.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketWalk {
    /// The buckets' tags, 8 per bucket, each bucket 16-byte aligned (null:
    /// the operations are calls for now).
    pub tags: *const u16,
    /// The entries, `stride` bytes each, slot by slot.
    pub entries: *mut u8,
    /// Three counters: lookups, hits, inserts.
    pub counters: *mut u64,
    /// The latest time the instance's handle saw.
    pub handle_now: *mut u64,
    /// The latest time an operation that changed the table saw.
    pub store_now: *mut u64,
    /// The hash's secret seed.
    pub seed: [u64; 2],
    /// The number of buckets (below 2^32).
    pub nbuckets: u64,
    /// Entries idle for longer are absent (`u64::MAX`: entries never age).
    pub idle_ns: u64,
    /// The key's words (see above): `u64::MAX` for keys of 8 bytes or more, else `0xffff_ffff`.
    pub a_mask: u64,
    /// Bytes from one entry to the next.
    pub stride: u32,
    /// The key's bytes, 4 to 16.
    pub key_size: u32,
    /// Where the value's timestamp is in an entry: `key_size + value_size`.
    pub ts_off: u32,
    /// The bytes the key's words read: at least 8, and `key_size`.
    pub reach: u32,
    /// Where the key's second word is read: `key_size - 8`, or 0.
    pub b_off: u32,
    /// How far that word is shifted down: 0, or `8 * (key_size - 4)` for keys under 8 bytes.
    pub b_shift: u32,
    /// The value's bytes in its first big-endian word.
    pub value_mask: u32,
    /// `key_size | value_size << 8` ([`BucketWalk::shape_of`]): code
    /// compiled for one shape ([`BucketWalk::layout`] gives its constants)
    /// compares it and calls the operation where it differs.
    pub shape: u32,
}

impl BucketWalk {
    /// The constants of the hash's last two folds.
    pub const MIX: [u64; 2] = [0x4528_21e6_38d0_1377, 0xbe54_66cf_34e9_0c6d];
    /// The multiplier that scatters a tag to its second bucket.
    pub const ALT: u32 = 0x9e37_79b1;
    /// No walk: every operation calls.
    pub const OFF: BucketWalk = BucketWalk {
        tags: std::ptr::null(),
        entries: std::ptr::null_mut(),
        counters: std::ptr::null_mut(),
        handle_now: std::ptr::null_mut(),
        store_now: std::ptr::null_mut(),
        seed: [0; 2],
        nbuckets: 0,
        idle_ns: u64::MAX,
        a_mask: 0,
        stride: 0,
        key_size: 0,
        ts_off: 0,
        reach: 0,
        b_off: 0,
        b_shift: 0,
        value_mask: 0,
        shape: 0,
    };

    /// The shape of a table of `key_size`-byte keys and `value_size`-byte
    /// values, as [`BucketWalk::shape`] holds it (never 0: keys have at
    /// least 4 bytes where there is a walk).
    pub const fn shape_of(key_size: u32, value_size: u32) -> u32 {
        key_size | value_size << 8
    }

    /// A walk's fields that follow from the sizes of keys (4 to 16 bytes)
    /// and values (at most 4), the pointers and the table's own fields
    /// left as in [`BucketWalk::OFF`]: `None` for sizes that have no walk.
    pub const fn layout(key_size: u32, value_size: u32) -> Option<BucketWalk> {
        if key_size < 4 || key_size > 16 || value_size > 4 {
            return None;
        }
        let wide = key_size >= 8;
        Some(BucketWalk {
            a_mask: if wide { u64::MAX } else { 0xffff_ffff },
            stride: key_size + value_size + 8,
            key_size,
            ts_off: key_size + value_size,
            reach: if wide { key_size } else { 8 },
            b_off: key_size.saturating_sub(8),
            b_shift: if wide { 0 } else { 8 * (key_size - 4) },
            value_mask: if value_size == 0 { 0 } else { u32::MAX << (8 * (4 - value_size)) },
            shape: BucketWalk::shape_of(key_size, value_size),
            ..BucketWalk::OFF
        })
    }
}

/// Where a walk's key is (see [`Dir24Walk`], [`BucketWalk`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkKey {
    /// The operation is never a walk.
    None,
    /// The `u32` in this input register.
    Register(u8),
    /// The key in the packet at the offset in this input register (the
    /// big-endian `u32` there for [`Dir24Walk`]).
    Packet(u8),
}

/// A kind whose instances may offer walks, and the key of each operation.
/// Such a kind has output registers 0 and 1, which only its operations
/// change, and keeps them in every register file it gives (their bits
/// set): compiled code reads them once after an operation that may be a
/// walk (whichever way it ran) and keeps them until the next operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkKind {
    /// The kind's name, as modules declare it.
    pub kind: &'static str,
    /// The walk its instances offer.
    pub form: WalkForm,
    /// Operations 0 to 7: where a walk finds its key.
    pub keys: [WalkKey; 8],
    /// Operations 0 to 7 (one bit each) that store a value under the key
    /// instead of looking it up ([`BucketWalk`]'s insert).
    pub inserts: u8,
}

impl WalkKind {
    /// The kinds whose instances may offer walks: `lpm`'s `lookup` (the
    /// address in in0) and `lookup_pkt` (at the packet offset in in8);
    /// `table`'s `lookup_pkt` and `insert_pkt` (the key at the packet
    /// offset in in8).
    pub const ALL: &'static [WalkKind] = &[
        WalkKind {
            kind: "lpm",
            form: WalkForm::Dir24,
            keys: [
                WalkKey::Register(0),
                WalkKey::None,
                WalkKey::None,
                WalkKey::Packet(8),
                WalkKey::None,
                WalkKey::None,
                WalkKey::None,
                WalkKey::None,
            ],
            inserts: 0,
        },
        WalkKind {
            kind: "table",
            form: WalkForm::Bucket,
            keys: [
                WalkKey::None,
                WalkKey::None,
                WalkKey::None,
                WalkKey::Packet(8),
                WalkKey::Packet(8),
                WalkKey::None,
                WalkKey::None,
                WalkKey::None,
            ],
            inserts: 1 << 4,
        },
    ];

    /// Kind `kind`'s walks, if it may offer any.
    pub fn of(kind: &str) -> Option<&'static WalkKind> {
        WalkKind::ALL.iter().find(|k| k.kind == kind)
    }

    /// Where operation `op` finds its key as a walk ([`WalkKey::None`]: it never is one).
    pub fn key(&self, op: u8) -> WalkKey {
        self.keys.get(usize::from(op)).copied().unwrap_or(WalkKey::None)
    }
}

// SAFETY: as for `RegisterFile`: the tables and counters belong to an
// instance that is itself `Send`, and only code that holds the instance
// exclusively reads them or writes the counters.
unsafe impl Send for Dir24Walk {}

// SAFETY: as for `Dir24Walk`.
unsafe impl Send for BucketWalk {}

/// The direct entry of one operation of an instance (`struct
/// netvm_directop`): `call(this, packet, packet_len, ts_sec, ts_nsec)`
/// does exactly what [`Coprocessor::invoke`] does for that operation with
/// a context of that packet and time (the operation reads nothing else of
/// the context: no info memory, no sequence number), and returns 0 where
/// `invoke` succeeds, 1 where it fails (the handler faults with `copro`).
/// Compiled code calls it with no run-time dispatch: no `dyn` call, no
/// context passed through, no operation decoded. [`DirectOp::of`] makes
/// one for any kind.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DirectOp {
    /// The entry; `None` for an operation without one (its bit clear).
    pub call: Option<DirectFn>,
    /// Its first argument: the instance.
    pub this: *mut std::ffi::c_void,
}

/// The function of a [`DirectOp`]: (instance, packet bytes, their number,
/// timestamp seconds, nanoseconds) -> 0, or 1 to fault.
pub type DirectFn = unsafe extern "C" fn(this: *mut std::ffi::c_void, packet: *const u8, packet_len: u64, ts_sec: u64, ts_nsec: u32) -> u32;

impl DirectOp {
    /// No entry.
    pub const NONE: DirectOp = DirectOp { call: None, this: std::ptr::null_mut() };

    /// The direct entry of operation `OP` of `instance`: `T::invoke(OP, ..)`
    /// called statically (so the operation's dispatch folds away), on a
    /// context of the packet and time with empty info memory and sequence
    /// number 0. Offer it only for an operation that reads neither.
    pub fn of<T: Coprocessor, const OP: u8>(instance: &mut T) -> DirectOp {
        DirectOp { call: Some(direct_invoke::<T, OP>), this: (instance as *mut T).cast() }
    }
}

/// No entry ([`DirectOp::NONE`]).
impl Default for DirectOp {
    fn default() -> DirectOp {
        DirectOp::NONE
    }
}

/// The entry [`DirectOp::of`] makes.
///
/// # Safety
/// `this` is a `T` nothing else reaches during the call, and `packet` is
/// readable for `packet_len` bytes (or null, in `.init`).
unsafe extern "C" fn direct_invoke<T: Coprocessor, const OP: u8>(
    this: *mut std::ffi::c_void,
    packet: *const u8,
    packet_len: u64,
    ts_sec: u64,
    ts_nsec: u32,
) -> u32 {
    // SAFETY: the caller's contract (the entry an instance's `registers`
    // made for itself, called while the engine holds the instance).
    let me = unsafe { &mut *this.cast::<T>() };
    // `.init` has no packet: compiled code passes a null pointer then.
    let packet: &[u8] = if packet.is_null() || packet_len == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract: `packet_len` readable bytes.
        unsafe { std::slice::from_raw_parts(packet, packet_len as usize) }
    };
    let ctx = InvokeContext { packet, info: &[], now: crate::Timestamp { sec: ts_sec, nsec: ts_nsec }, seq: 0 };
    u32::from(me.invoke(OP, &ctx).is_err())
}

// SAFETY: as for `RegisterFile`: the instance it points to is `Send`, and
// the entry is only called by code that holds the instance exclusively.
unsafe impl Send for DirectOp {}

impl RegisterFile {
    /// No register inline: every access calls the instance.
    pub const NONE: RegisterFile = RegisterFile {
        input: std::ptr::null_mut(),
        output: std::ptr::null(),
        inputs: 0,
        outputs: 0,
        direct: std::ptr::null(),
        ops: 0,
        walk_ops: 0,
        walk: std::ptr::null(),
    };

    /// This file with the direct entries of `direct` (those with a `call`;
    /// operations up to 31).
    pub fn with_direct(self, direct: &[DirectOp]) -> RegisterFile {
        let mut ops = 0u32;
        for (op, d) in direct.iter().enumerate().take(32) {
            if d.call.is_some() {
                ops |= 1 << op;
            }
        }
        RegisterFile { direct: if ops == 0 { std::ptr::null() } else { direct.as_ptr() }, ops, ..self }
    }

    /// This file with operations `ops` (bits 0 to 7) performed as `walk`
    /// by engines that can (the instance's kind, the form of `W` and these
    /// operations must be in [`WalkKind::ALL`]; `walk` is not read here).
    pub fn with_walk<W: Walk>(self, walk: &W, ops: u32) -> RegisterFile {
        let ops = ops & 0xff;
        let walk: *const W = walk;
        RegisterFile { walk: if ops == 0 { std::ptr::null() } else { walk.cast() }, walk_ops: ops, ..self }
    }

    /// The registers `input[r]` (where bit `r` of `inputs` is set) and
    /// `output[r]` (where bit `r` of `outputs` is set); bits beyond either
    /// slice are cleared.
    pub fn new(input: &mut [u32], inputs: u32, output: &mut [u32], outputs: u32) -> RegisterFile {
        let below = |n: usize| if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
        let (inputs, outputs) = (inputs & below(input.len()), outputs & below(output.len()));
        RegisterFile {
            input: if inputs == 0 { std::ptr::null_mut() } else { input.as_mut_ptr() },
            output: if outputs == 0 { std::ptr::null() } else { output.as_ptr() },
            inputs,
            outputs,
            ..RegisterFile::NONE
        }
    }

    /// Every register of `input` and of `output` inline (the first 32 of each).
    pub fn over(input: &mut [u32], output: &mut [u32]) -> RegisterFile {
        RegisterFile::new(input, u32::MAX, output, u32::MAX)
    }
}

// SAFETY: a register file is addresses inside an instance that is itself
// `Send`; it is only dereferenced by code that holds the instance exclusively.
unsafe impl Send for RegisterFile {}

/// The keys of one lookup for a batch of packets, as the compiled
/// pre-lookup stage computed them: see [`Coprocessor::ahead`].
#[derive(Clone, Copy, Debug)]
pub struct AheadKeys<'a> {
    /// Per packet, a valid flag (0: the key could not be computed, for
    /// instance a read beyond the captured bytes) and then the registers
    /// of `regs` in ascending order: `1 + regs.count_ones()` words each.
    pub words: &'a [u32],
    /// The input registers computed (a superset of what
    /// [`Coprocessor::lookahead`] asked for), one bit each.
    pub regs: u32,
    /// The packets, in the same order.
    pub packets: crate::buffer::Packets<'a>,
}

impl<'a> AheadKeys<'a> {
    /// Per packet with a valid key: input register `reg` (0 if it was not
    /// computed) and the packet's bytes.
    pub fn keys(&self, reg: u8) -> impl Iterator<Item = (u32, &'a [u8])> + 'a {
        let stride = 1 + self.regs.count_ones() as usize;
        let below = 1u32.checked_shl(u32::from(reg)).map_or(u32::MAX, |b| b - 1);
        let at = (self.regs & below).count_ones() as usize;
        let has = reg < 32 && (self.regs >> reg) & 1 != 0;
        // The word's index in a record (none: a register not computed reads as 0).
        let word = if has { 1 + at } else { usize::MAX };
        self.words
            .chunks_exact(stride)
            .zip(self.packets.iter())
            .filter(|(w, _)| w[0] != 0)
            .map(move |(w, p)| (w.get(word).copied().unwrap_or(0), p))
    }
}

/// What a host that runs untrusted code tells every instance before each
/// run ([`Coprocessor::begin_untrusted`]): whose code runs, with what
/// rights, on which packet. The capsule node (docs/capsules.md §3) is such
/// a host: instances learn who calls without being downcast per capsule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UntrustedRun {
    /// The code's tag (a 64-bit hash of its bytes): whose private state it reaches.
    pub code: u64,
    /// Whether the code has the operator's rights (an admin capsule from a
    /// configured source).
    pub admin: bool,
    /// The interface the packet came in on.
    pub interface: u16,
    /// The packet's time.
    pub ts: Timestamp,
    /// Hops the packet may still take after this node.
    pub hops_left: u8,
}

/// A virtual coprocessor instance.
pub trait Coprocessor: Send {
    /// The kind name it was created as.
    fn kind(&self) -> &str;
    /// Writes input register `reg`.
    fn write(&mut self, reg: u8, value: u32) -> Result<(), CoproError>;
    /// Reads output register `reg`.
    fn read(&mut self, reg: u8) -> Result<u32, CoproError>;
    /// Performs operation `op` on the input registers, setting output registers.
    fn invoke(&mut self, op: u8, ctx: &InvokeContext<'_>) -> Result<(), CoproError>;
    /// The inline register file: where the instance keeps the registers
    /// that are plain memory, so that compiled code stores `copro.in` and
    /// loads `copro.out` there instead of calling [`write`] and [`read`]
    /// (a call remains for `copro.invoke`). The default,
    /// [`RegisterFile::NONE`], keeps every access a call.
    ///
    /// The contract an implementation keeps:
    /// - where bit `r` of `inputs` is set, `write(r, v)` does nothing but
    ///   store `v` at `input + r` and succeeds; where bit `r` of `outputs`
    ///   is set, `read(r)` does nothing but load `output + r` and succeeds;
    /// - registers that are computed on read, checked on write, or have a
    ///   side effect keep their bit clear;
    /// - the addresses stay valid, and `invoke` reads and writes the
    ///   registers there, until the next call of any other method than
    ///   `write`, `read` and `invoke` (engines ask again before every batch);
    /// - a direct entry (bit `op` of `ops`, [`DirectOp`]) does what
    ///   `invoke(op, ..)` does on a context with the packet and its time,
    ///   and stays valid as long as the addresses do. Offer one only for
    ///   operations that read nothing else of the context;
    /// - an operation performed as a walk (bit `op` of `walk_ops`,
    ///   [`Dir24Walk`], [`BucketWalk`]) has exactly the walk's effects, and the
    ///   walk's tables stay valid as long as the addresses do, also across
    ///   `invoke`s that change them (such an `invoke` updates the walk).
    ///
    /// Engines may use the file, or call `write` and `read`: the results are
    /// the same by this contract. Inside a batch nothing else touches the
    /// instance while compiled code runs.
    ///
    /// [`write`]: Coprocessor::write
    /// [`read`]: Coprocessor::read
    fn registers(&mut self) -> RegisterFile {
        RegisterFile::NONE
    }
    /// The shape of the [`BucketWalk`] this instance's register files
    /// offer ([`BucketWalk::shape`]) whenever they offer one, fixed for
    /// the instance's life; 0 (the default) where it has none or the shape
    /// may change. An engine may compile the walk's fields that follow from
    /// the shape as constants ([`BucketWalk::layout`]); the compiled code
    /// compares the shape and calls the operation where it differs, so a
    /// wrong answer costs speed, never a result.
    fn walk_shape(&self) -> u32 {
        0
    }
    /// Control plane: the instance's state as text. Kinds that [`load`]
    /// write it in the format `load` reads, so a dump can be loaded back.
    ///
    /// [`load`]: Coprocessor::load
    fn dump(&self) -> String {
        String::new()
    }
    /// Control plane: adds the entries of a table file (routes, table
    /// entries, patterns; the format is the kind's) to the instance, and
    /// returns how many it added. An error names the offending line; entries
    /// before it may have been added.
    fn load(&mut self, text: &str) -> Result<usize, String> {
        let _ = text;
        Err(format!("coprocessor kind `{}` has no table to load", self.kind()))
    }
    /// Control plane: removes every entry (tables) or zeroes every value (counters).
    fn clear(&mut self) {}
    /// Whether operation `op` is a lookup whose memory accesses can be
    /// started before the packets reach it (computation batching, see
    /// [`Coprocessor::ahead`]): the input registers it reads, one bit each,
    /// or `None`.
    fn lookahead(&self, op: u8) -> Option<u32> {
        let _ = op;
        None
    }
    /// The pre-lookup stage of a batch for operation `op`, which
    /// [`lookahead`](Coprocessor::lookahead) accepted: `keys` holds, per
    /// packet, the input registers the operation will read, as compiled
    /// code computed them from the packet before running the data path.
    /// The instance works out what each lookup will touch (hash bucket,
    /// first-level entry) and, with `prefetch`, prefetches it, so that the
    /// lookups of a batch overlap their memory latency (the paper's
    /// Algorithm 1). A hint: results never depend on it, and a key may be
    /// wrong (the data path may change the packet first, or never reach
    /// the operation). An instance may also look the keys up in bulk and
    /// keep the answers for the operations that follow (`names` does), as
    /// long as an operation uses one only when the answer provably still
    /// holds (the same bytes looked up, nothing changed in between). An
    /// engine may instead prefetch from the tables of the walk the instance
    /// offers for `op` ([`RegisterFile::walk`]; [`Dir24Walk::prefetch`])
    /// without calling this, so an instance keeps no answers for an
    /// operation it offers as a walk.
    fn ahead(&self, op: u8, keys: &AheadKeys<'_>, prefetch: bool) {
        let _ = (op, keys, prefetch);
    }
    /// Periodic maintenance, called by the runtime between batches with the
    /// current time (trace time for captures): aging purges idle entries here.
    fn tick(&mut self, now: Timestamp) {
        let _ = now;
    }
    /// Bytes of memory the instance holds at its configured capacity
    /// (tables, automata): what admission control counts against a data
    /// path's `memory`. Kinds whose state is small (a few counters) keep
    /// the default, 0.
    fn memory(&self) -> u64 {
        0
    }
    /// Control plane: named statistics (entries, hits, aged-out entries,
    /// counter values), in a stable order. `--stats json` reports them per
    /// NetPE and instance.
    fn stats(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
    /// A run of untrusted code follows (see [`UntrustedRun`]): an instance
    /// whose answers depend on who asks (rights, private entries) or on the
    /// packet's facts takes them from `run`, and forgets what the previous
    /// run left in its registers. The default does nothing. Like any method
    /// but `write`, `read` and `invoke`, it ends the validity of the inline
    /// register file.
    fn begin_untrusted(&mut self, run: &UntrustedRun) {
        let _ = run;
    }
    /// The instance as [`Any`](std::any::Any), so that the host application
    /// that created it can reach its concrete type (the IDS collects its
    /// alerts this way). `None` for kinds that do not offer it.
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }
    /// Moves the events recorded since the last call to `out` (oldest
    /// first). The runtime's driver drains every instance after each batch
    /// when the host asked for events, and delivers them in packet order
    /// whichever worker recorded them. Kinds that record none keep the default.
    fn drain_events(&mut self, out: &mut Vec<CoproEvent>) {
        let _ = out;
    }
    /// A handle on this instance for another worker of the same run, made
    /// after `.init` and the control plane's loads: it shares the state
    /// ([`WorkerShare::Shared`]) or starts its own from this one's
    /// configuration ([`WorkerShare::PerWorker`]; counters at zero, tables as
    /// the kind documents). Kinds that cannot serve several workers keep the
    /// default, an error the runtime reports before any packet runs.
    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        Err(format!("coprocessor kind `{}` does not support several workers", self.kind()))
    }
    /// How [`Coprocessor::fork`] divides the state.
    fn share(&self) -> WorkerShare {
        WorkerShare::PerWorker
    }
    /// At the end of a run with several workers: folds `other`, a
    /// [`WorkerShare::PerWorker`] fork of this instance, into this one
    /// (counters add up, events append, sharded tables merge), so that a
    /// dump after the run covers every worker.
    fn absorb(&mut self, other: &mut dyn Coprocessor) {
        let _ = other;
    }
}

/// Configuration of one coprocessor instance: `key = value` pairs from the manifest.
pub type CoproConfig = BTreeMap<String, String>;

/// Creates an instance of one kind from its configuration.
pub type CoproFactory = fn(&CoproConfig) -> Result<Box<dyn Coprocessor>, String>;

/// The coprocessor kinds an application can instantiate.
#[derive(Clone, Default)]
pub struct CoproRegistry {
    kinds: BTreeMap<String, CoproFactory>,
}

impl CoproRegistry {
    /// An empty registry.
    pub fn new() -> CoproRegistry {
        CoproRegistry::default()
    }

    /// Registers (or replaces) a kind.
    pub fn register(&mut self, kind: &str, factory: CoproFactory) {
        self.kinds.insert(kind.to_string(), factory);
    }

    /// Creates an instance of `kind`.
    pub fn create(&self, kind: &str, config: &CoproConfig) -> Result<Box<dyn Coprocessor>, String> {
        match self.kinds.get(kind) {
            Some(f) => f(config),
            None => {
                Err(format!("unknown coprocessor kind `{kind}` (known: {})", self.kinds.keys().cloned().collect::<Vec<_>>().join(", ")))
            }
        }
    }

    /// A fresh state for a NetPE running `module` (see [`PeState::new`](crate::PeState::new))
    /// with its coprocessors bound: one instance per declaration, in
    /// declaration order, configured by `config`. The one place NetPE
    /// states with coprocessors are made (but for the runtime's
    /// applications, whose manifest can bind a declaration to another
    /// NetPE's instance: `Application::plan` creates the others with
    /// [`CoproRegistry::create`] in the same way); an error names the
    /// declaration (instance name) and says why.
    pub fn instantiate(
        &self,
        module: &netil::Module,
        mut config: impl FnMut(&netil::CoproDecl) -> CoproConfig,
    ) -> Result<crate::PeState, (String, String)> {
        let mut state = crate::PeState::new(module);
        for decl in &module.copros {
            state.copros.push(self.create(&decl.kind, &config(decl)).map_err(|e| (decl.name.clone(), e))?);
        }
        Ok(state)
    }

    /// The registered kind names.
    pub fn kinds(&self) -> impl Iterator<Item = &str> {
        self.kinds.keys().map(String::as_str)
    }
}

impl fmt::Debug for CoproRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.kinds.keys()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::AheadKeys;

    /// Per packet with a valid key, the register asked for (0 if the stage
    /// did not compute it) and the packet; records past the packets are
    /// ignored.
    #[test]
    fn ahead_keys_pair_each_valid_record_with_its_packet() {
        let mut pkts: Vec<crate::Packet> = (0..3u8).map(|i| crate::Packet::from_bytes(vec![i; 4])).collect();
        let descs: Vec<crate::XbDesc> = pkts.iter_mut().enumerate().map(|(i, p)| crate::XbDesc::of(p, i as u64)).collect();
        // Registers 2 and 8 computed; the second packet's key is not valid;
        // a fourth record without a packet.
        let words = [1, 20, 80, 0, 21, 81, 1, 22, 82, 1, 23, 83];
        // SAFETY: the descriptors point at the packets' bytes, which nothing writes meanwhile.
        let packets = unsafe { crate::buffer::Packets::new(&descs) };
        let keys = AheadKeys { words: &words, regs: 1 << 2 | 1 << 8, packets };
        let got = |reg| keys.keys(reg).map(|(w, p)| (w, p[0])).collect::<Vec<_>>();
        assert_eq!(got(2), vec![(20, 0), (22, 2)]);
        assert_eq!(got(8), vec![(80, 0), (82, 2)]);
        assert_eq!(got(0), vec![(0, 0), (0, 2)]);
        assert_eq!(got(40), vec![(0, 0), (0, 2)]);
    }
}
