//! Whole applications compiled into native code: direct linking (NetVM
//! paper §5.1, NetBind §II-B).
//!
//! An application (a DAG of NetPEs, [`AppGraph`](netvm_vm::graph::AppGraph)) becomes one function,
//! `netvm_run(ctx, descs, n, verdicts)`, that runs a batch of packets: the
//! per-batch loop itself is compiled, so a packet costs no call. Its sources
//! are entry blocks chosen by each packet's input port. Two bindings:
//!
//! - [`LinkMode::Direct`]: every NetPE's `.push` handler is translated once,
//!   into blocks of that one function; crossing a port is a jump to the next
//!   NetPE's entry block, with the input port as a block argument. Counters
//!   of the outcomes on the fast path are SSA values kept in registers
//!   across the whole batch and added to memory once at its end.
//! - [`LinkMode::Table`]: every NetPE is a function of its own; crossing a
//!   port loads the next NetPE's address from a vector table (a writable
//!   data object, one slot per edge: NetBind's "vector table") and tail-calls
//!   it. The batch loop calls the source's entry the same way.
//!
//! `netvm_init(ctx)` runs the `.init` handlers in topological order.
//!
//! Fan-out (a port or source with several destinations) follows the paper:
//! the buffer is duplicated and each copy runs to completion, in manifest
//! order, before the next; the last destination gets the original. The
//! compiled code keeps the pending copies with the host's help (four C-ABI
//! hooks, [`netvm_rt_fanout_save`] and friends), and only applications that
//! fan out call them. Everything crosses the C ABI described in
//! include/netvm.h ([`AppCtx`], [`XbDesc`], [`NodeMem`]), so the same code
//! serves the JIT ([`LinkedApp`]) and AOT objects.
//!
//! The work is split by concern: [`AppLayout`] (layout.rs) says where each
//! counter is; build/ holds the Cranelift IR builders ([`define_app`] and the
//! functions it defines); loader.rs compiles an application into the JIT's
//! memory ([`LinkedApp::compile`]); code.rs runs it ([`LinkedApp`], the
//! runtime's `LinkedCode`).

pub mod ahead;
mod build;
mod code;
mod layout;
mod loader;

pub use netvm_rt::fanout::{netvm_rt_emit, netvm_rt_fanout_copy, netvm_rt_fanout_pop, netvm_rt_fanout_save};
pub use netvm_rt::{AppCtx, Emitted, FanoutState, NodeMem, XbDesc};

pub use build::{define_app, AppSymbols, LinkedText};
pub use code::{LinkedApp, SubBatchTuner};
pub use layout::AppLayout;

/// How the NetPEs of an application are bound together in native code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkMode {
    /// One function; a port crossing is a jump.
    Direct,
    /// One function per NetPE; a port crossing is a tail call through a vector table.
    Table,
}

impl LinkMode {
    /// `direct` or `table`.
    pub const fn name(self) -> &'static str {
        match self {
            LinkMode::Direct => "direct",
            LinkMode::Table => "table",
        }
    }

    /// Parses [`LinkMode::name`].
    pub fn from_name(s: &str) -> Option<LinkMode> {
        [LinkMode::Direct, LinkMode::Table].into_iter().find(|m| m.name() == s)
    }
}

/// How a linked application runs a batch: computation batching (see [`ahead`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum BatchMode {
    /// One loop over the batch, packet after packet, as the data path is written.
    Off,
    /// Stages over sub-batches: the compiled pre-lookup stage computes the
    /// keys of every lookup of a sub-batch, the lookups' instances take
    /// them (`Coprocessor::ahead`, without prefetching), then the data path
    /// runs the sub-batch.
    On,
    /// As `On`, and the packets' headers, then the entries the lookups will
    /// read, are prefetched between the stages (the default).
    #[default]
    Prefetch,
}

impl BatchMode {
    /// `off`, `on` or `prefetch`.
    pub const fn name(self) -> &'static str {
        match self {
            BatchMode::Off => "off",
            BatchMode::On => "on",
            BatchMode::Prefetch => "prefetch",
        }
    }

    /// Parses [`BatchMode::name`].
    pub fn from_name(s: &str) -> Option<BatchMode> {
        [BatchMode::Off, BatchMode::On, BatchMode::Prefetch].into_iter().find(|m| m.name() == s)
    }
}

/// Computation batching: the mode and the sub-batch size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Batching {
    /// What happens between the stages.
    pub mode: BatchMode,
    /// Packets per sub-batch (1 to [`ahead::MAX_PACKETS`]); `None`: chosen
    /// at run time by measurement ([`SubBatchTuner`]).
    pub sub_batch: Option<usize>,
}
