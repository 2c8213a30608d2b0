//! The netvm machine model: what every engine (interpreter, JIT, AOT, eBPF)
//! executes against, so that all of them share one definition of the state
//! a NetIL program can observe.
//!
//! - [`Packet`]: a frame owned as a value (captured bytes, wire length,
//!   timestamp, input port), for tests, generators and small programs;
//! - [`XbDesc`]: one packet of a batch as compiled code and the runtime see
//!   it, a descriptor of bytes that lie in a runtime buffer ([`buffer`]);
//! - [`XbView`]: packet + info memory as one handler runs on them (the
//!   exchange buffer, borrowed); [`ExchangeBuffer`] owns both;
//! - [`PeState`]: one NetPE instance's persistent data memory, coprocessor
//!   instances and the engine's scratch (operand stack and locals);
//! - [`Outcome`] and [`FaultKind`]: how a handler ends;
//! - [`Limits`]: the execution budget;
//! - [`Coprocessor`]: the interface of virtual coprocessors;
//! - [`graph`]: an application's wiring, verdicts and counters, and the
//!   interface of whole compiled applications;
//! - [`Engine`]: how verified modules become executable code (the
//!   interpreter and the JIT implement it in their own crates);
//! - [`buffer`]: the memory packets lie in (blocks, a pool of packet
//!   buffers) and batches of descriptors over it;
//! - [`port`]: sources and sinks, the interface of capture files and
//!   interfaces.

pub mod buffer;
mod copro;
mod engine;
pub mod graph;
pub mod hash;
pub mod port;
pub mod queue;
pub mod region;

pub use copro::{
    AheadKeys, BucketWalk, CoproConfig, CoproError, CoproEvent, CoproFactory, CoproRegistry, Coprocessor, Dir24Walk, DirectFn, DirectOp,
    InvokeContext, RegisterFile, UntrustedRun, Walk, WalkForm, WalkKey, WalkKind, WorkerShare,
};
pub use engine::{Engine, EngineError, TierUp};

use std::fmt;

/// A packet timestamp: seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    /// Seconds.
    pub sec: u64,
    /// Nanoseconds within the second (0..1_000_000_000).
    pub nsec: u32,
}

impl Timestamp {
    /// The time in nanoseconds since the epoch (saturating).
    pub fn as_nanos(self) -> u64 {
        self.sec.saturating_mul(1_000_000_000).saturating_add(u64::from(self.nsec))
    }

    /// The timestamp `ns` nanoseconds after the epoch.
    pub fn from_nanos(ns: u64) -> Timestamp {
        Timestamp { sec: ns / 1_000_000_000, nsec: (ns % 1_000_000_000) as u32 }
    }
}

/// A frame as received from a port.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Packet {
    /// The captured bytes (packet memory). May be shorter than the frame on the wire.
    pub data: Vec<u8>,
    /// Length of the frame on the wire, as the capture records it; at least
    /// `data.len()` for well-formed captures.
    pub wire_len: u32,
    /// Arrival time.
    pub ts: Timestamp,
    /// The application input port the packet arrived on (`-r PORT=FILE`).
    /// Sources map it to a NetPE input port, which is what `inport` pushes.
    pub in_port: u16,
}

impl Packet {
    /// A packet whose wire length equals its captured length, at time zero, on port 0.
    pub fn from_bytes(data: Vec<u8>) -> Packet {
        let wire_len = data.len() as u32;
        Packet { data, wire_len, ts: Timestamp::default(), in_port: 0 }
    }
}

/// One packet of a batch (`struct netvm_xb` of include/netvm.h): where its
/// bytes lie and its metadata. Compiled code reads descriptors at fixed
/// offsets and writes packet bytes in place; it never changes a descriptor.
/// The runtime builds them over its buffers ([`buffer`]), so a packet is
/// never copied to be processed.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct XbDesc {
    /// Packet bytes (`caplen` of them; written in place by `ustore`).
    pub data: *mut u8,
    /// Captured length.
    pub caplen: u32,
    /// Length on the wire, as the capture records it (normally at least
    /// `caplen`; a damaged capture may claim less, passed through as libpcap does).
    pub wirelen: u32,
    /// Timestamp, seconds.
    pub ts_sec: u64,
    /// Timestamp, nanoseconds.
    pub ts_nsec: u32,
    /// Application input port.
    pub in_port: u16,
    /// Zero.
    pub reserved: u16,
    /// The packet's sequence number in the run: its position in arrival
    /// order over every input (0 for the first). Coprocessors see it
    /// ([`InvokeContext::seq`]); the reorder stage of several workers and
    /// the IDS's alerts number packets by it.
    pub seq: u64,
}

// SAFETY: a descriptor is plain data; the memory it points to is owned by
// the batch that holds it, and the runtime hands each packet to one thread
// at a time (see `buffer::Batch`).
unsafe impl Send for XbDesc {}

impl XbDesc {
    /// A descriptor of `p`, pointing at its bytes, with sequence number `seq`.
    pub fn of(p: &mut Packet, seq: u64) -> XbDesc {
        XbDesc {
            data: p.data.as_mut_ptr(),
            caplen: p.data.len() as u32,
            wirelen: p.wire_len,
            ts_sec: p.ts.sec,
            ts_nsec: p.ts.nsec,
            in_port: p.in_port,
            reserved: 0,
            seq,
        }
    }

    /// The timestamp.
    pub fn ts(&self) -> Timestamp {
        Timestamp { sec: self.ts_sec, nsec: self.ts_nsec }
    }

    /// The packet bytes.
    ///
    /// # Safety
    /// `data` must point to `caplen` readable bytes (or `caplen` be 0) that
    /// nothing writes during the borrow.
    pub unsafe fn bytes<'a>(&self) -> &'a [u8] {
        if self.caplen == 0 {
            return &[];
        }
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(self.data, self.caplen as usize) }
    }

    /// The packet bytes, writable.
    ///
    /// # Safety
    /// `data` must point to `caplen` writable bytes (or `caplen` be 0) that
    /// nothing else accesses during the borrow.
    pub unsafe fn bytes_mut<'a>(&self) -> &'a mut [u8] {
        if self.caplen == 0 {
            return &mut [];
        }
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.data, self.caplen as usize) }
    }
}

/// The exchange buffer as one handler runs on it: packet memory and info
/// memory (borrowed from wherever the runtime keeps them) and the packet's
/// metadata. What travels from NetPE to NetPE.
#[derive(Debug)]
pub struct XbView<'a> {
    /// Packet memory: the captured bytes, writable in place.
    pub packet: &'a mut [u8],
    /// Length on the wire ([`XbDesc::wirelen`]).
    pub wire_len: u32,
    /// Arrival time.
    pub ts: Timestamp,
    /// Sequence number in the run ([`XbDesc::seq`]).
    pub seq: u64,
    /// Info memory: per-packet metadata, zeroed when the packet enters the application.
    pub info: &'a mut [u8],
}

impl XbView<'_> {
    /// A view with no packet and no info memory (what `.init` runs on).
    pub fn empty() -> XbView<'static> {
        XbView { packet: &mut [], wire_len: 0, ts: Timestamp::default(), seq: 0, info: &mut [] }
    }
}

/// Packet plus info memory, owned: an exchange buffer as a value (tests,
/// generators). Handlers run on its [`XbView`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExchangeBuffer {
    /// The packet (packet memory is `packet.data`).
    pub packet: Packet,
    /// Info memory: per-packet metadata, zeroed when the packet enters the application.
    pub info: Vec<u8>,
}

impl ExchangeBuffer {
    /// Wraps a packet with `info_size` bytes of zeroed info memory.
    pub fn new(packet: Packet, info_size: usize) -> ExchangeBuffer {
        ExchangeBuffer { packet, info: vec![0; info_size] }
    }

    /// The view handlers run on (sequence number 0).
    pub fn view(&mut self) -> XbView<'_> {
        XbView { wire_len: self.packet.wire_len, ts: self.packet.ts, seq: 0, packet: &mut self.packet.data, info: &mut self.info }
    }
}

pub use netvm_abi::{FaultCounts, FaultKind};

/// How one execution of a handler ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The exchange buffer leaves on this output port.
    Forward(u16),
    /// The program dropped the exchange buffer.
    Drop,
    /// The `.init` handler finished (`exit`).
    Exit,
    /// Execution faulted; the exchange buffer is dropped and the fault counted.
    Fault(FaultKind),
}

impl Outcome {
    /// The outcome's code (`netvm_abi`): the output port, or
    /// [`VERDICT_DROP`](netvm_abi::VERDICT_DROP), [`RESULT_EXIT`](netvm_abi::RESULT_EXIT), [`FaultKind::code`].
    pub const fn code(self) -> u32 {
        match self {
            Outcome::Forward(p) => p as u32,
            Outcome::Drop => netvm_abi::VERDICT_DROP,
            Outcome::Exit => netvm_abi::RESULT_EXIT,
            Outcome::Fault(k) => k.code(),
        }
    }

    /// Decodes [`Outcome::code`]; a code no engine produces is a drop.
    #[inline]
    pub fn from_code(code: u32) -> Outcome {
        match code {
            0..=0xffff => Outcome::Forward(code as u16),
            netvm_abi::RESULT_EXIT => Outcome::Exit,
            _ => FaultKind::from_code(code).map_or(Outcome::Drop, Outcome::Fault),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Forward(p) => write!(f, "port {p}"),
            Outcome::Drop => f.write_str("drop"),
            Outcome::Exit => f.write_str("exit"),
            Outcome::Fault(k) => write!(f, "fault {k}"),
        }
    }
}

/// Default execution budget per handler invocation (see [`Limits::budget`]).
pub const DEFAULT_BUDGET: u64 = 100_000;

/// The budget a taken edge from the instruction at index `from` to the one
/// at index `to` (indices within a segment) costs: `from - to + 1`, the
/// instruction count of the span a backward edge repeats, and nothing for a
/// forward edge (docs/netil.md §2.7). Every engine charges this.
#[inline]
pub const fn edge_cost(from: usize, to: usize) -> u32 {
    if to <= from {
        (from - to + 1) as u32
    } else {
        0
    }
}

/// Resource limits applied to every handler execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Budget of one handler invocation. Every taken backward jump (or switch
    /// edge) from the instruction at index `s` to the one at index `t <= s`
    /// costs `s - t + 1`, the instruction count of the span it repeats; when the
    /// cost would exceed what is left, the handler faults with
    /// [`FaultKind::Budget`]. Straight-line code costs nothing, so a handler
    /// executes at most `len × (budget + 1)` instructions.
    pub budget: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { budget: DEFAULT_BUDGET }
    }
}

/// The persistent state of one NetPE instance.
pub struct PeState {
    /// Data memory (`.datasize` bytes, zeroed before `.init` runs).
    pub data: Vec<u8>,
    /// Coprocessor instances, in the module's declaration order.
    pub copros: Vec<Box<dyn Coprocessor>>,
    /// Engine-owned scratch space (operand stack and locals). Its contents are
    /// never observable: the verifier proves every slot is written before it is read.
    pub scratch: Vec<u32>,
    /// Budget the handlers run on this state have consumed so far (the sum
    /// of the [`edge_cost`]s they were charged, a `budget` fault charging
    /// nothing for the edge it refused): what the engines report as budget
    /// used, and what the conformance suite compares.
    pub budget_used: u64,
}

impl PeState {
    /// Fresh state for a module: zeroed data memory, no coprocessors bound yet.
    pub fn new(module: &netil::Module) -> PeState {
        PeState { data: vec![0; module.data_size as usize], copros: Vec::new(), scratch: Vec::new(), budget_used: 0 }
    }

    /// The state another worker starts from: a copy of the data memory as
    /// it is now (after `.init`), and a [`Coprocessor::fork`] of every
    /// coprocessor; an error names the coprocessor that cannot be forked.
    pub fn fork(&mut self) -> Result<PeState, (usize, String)> {
        let mut copros = Vec::with_capacity(self.copros.len());
        for (i, c) in self.copros.iter_mut().enumerate() {
            copros.push(c.fork().map_err(|e| (i, e))?);
        }
        Ok(PeState { data: self.data.clone(), copros, scratch: Vec::new(), budget_used: 0 })
    }
}

impl fmt::Debug for PeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeState").field("data_len", &self.data.len()).field("copros", &self.copros.len()).finish()
    }
}

/// A NetPE's compiled or prepared code, as produced by an engine.
///
/// `init` runs the `.init` handler once; `push` runs the `.push` handler on
/// one exchange buffer. Both must implement docs/netil.md exactly: the
/// interpreter is the reference every other engine is tested against.
pub trait PeCode: Send + Sync {
    /// Runs `.init` (if the module has one). Returns [`Outcome::Exit`] or a fault.
    fn init(&self, state: &mut PeState, limits: &Limits) -> Outcome;
    /// Runs `.push` on `xb`, which arrived on input port `in_port`.
    fn push(&self, state: &mut PeState, xb: &mut XbView<'_>, in_port: u16, limits: &Limits) -> Outcome;
}

/// Hints the CPU to bring the cache line at `p` into L1 (the coprocessors'
/// entries ahead of a lookup stage). Never faults, whatever `p`; a no-op on
/// architectures without a stable prefetch.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: SSE is part of the x86_64 baseline, and a prefetch is a
        // hint that never faults, even on an invalid address, and reads
        // nothing architecturally.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) }
    }
    #[cfg(target_arch = "aarch64")]
    {
        // SAFETY: PRFM is a hint: it never faults, even on an invalid
        // address, writes no register or memory and changes no flags.
        unsafe { std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) p, options(nostack, preserves_flags, readonly)) }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = p;
}

/// Memory helpers with the NetIL bounds semantics: an access is valid when
/// `offset + width <= len`, computed without overflow.
pub mod mem {
    /// Returns the range `[off, off + width)` if it lies inside a memory of `len` bytes.
    #[inline]
    pub fn range(off: u32, width: u32, len: usize) -> Option<std::ops::Range<usize>> {
        let start = off as usize;
        let end = start.checked_add(width as usize)?;
        (end <= len).then_some(start..end)
    }

    /// Big-endian load of 1, 2 or 4 bytes.
    #[inline]
    pub fn load_be(m: &[u8], off: u32, width: u32) -> Option<u32> {
        let r = range(off, width, m.len())?;
        let b = &m[r];
        Some(match width {
            1 => u32::from(b[0]),
            2 => u32::from(u16::from_be_bytes([b[0], b[1]])),
            _ => u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        })
    }

    /// Big-endian store of the low 1, 2 or 4 bytes of `v`.
    #[inline]
    pub fn store_be(m: &mut [u8], off: u32, width: u32, v: u32) -> Option<()> {
        let r = range(off, width, m.len())?;
        let b = &mut m[r];
        match width {
            1 => b[0] = v as u8,
            2 => b.copy_from_slice(&(v as u16).to_be_bytes()),
            _ => b.copy_from_slice(&v.to_be_bytes()),
        }
        Some(())
    }
}
