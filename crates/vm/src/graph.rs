//! An application's wiring as engines see it, and what a whole compiled
//! application reports.
//!
//! The runtime builds an [`AppGraph`] from a manifest (names resolved,
//! ports checked, cycles rejected); an engine that compiles whole
//! applications ([`LinkedCode`]) takes it together with the verified
//! modules. [`Verdict`] and [`FlowCounts`] are the results both the
//! runtime's own graph walk and compiled applications produce, so that the
//! two can be compared exactly.

use crate::buffer::{Batch, PacketBuf, PacketPool};
use crate::{FaultCounts, FaultKind, Limits, Outcome, PeState};

/// Where an exchange buffer goes when it leaves a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dest {
    /// Input port `in_port` of NetPE `node` (index in the application).
    Pe {
        /// The NetPE.
        node: u32,
        /// Its input port.
        in_port: u16,
    },
    /// Application output port.
    Sink(u16),
}

/// The wiring of an application: a DAG of NetPEs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppGraph {
    /// Per NetPE, per output port: the destinations, in manifest order (a
    /// port with several destinations duplicates the buffer; an empty list
    /// means the port is not connected).
    pub out: Vec<Vec<Vec<Dest>>>,
    /// Per application input port: the destinations of packets arriving
    /// there (empty: no source, the packet is dropped).
    pub sources: Vec<Vec<Dest>>,
    /// Number of application output ports (largest sink port + 1).
    pub sink_ports: usize,
    /// The NetPEs in a topological order (every NetPE after those feeding it).
    pub order: Vec<usize>,
    /// Per NetPE, per coprocessor slot: the shape of the walk its instance
    /// offers ([`Coprocessor::walk_shape`](crate::Coprocessor::walk_shape);
    /// 0, or a NetPE or slot past the end: unknown), which a linking engine
    /// may compile for (guarded: a hint, not a promise).
    pub walk_shapes: Vec<Vec<u32>>,
}

impl AppGraph {
    /// The walk shape of NetPE `node`'s coprocessor slot `copro` (0: unknown).
    pub fn walk_shape(&self, node: usize, copro: usize) -> u32 {
        self.walk_shapes.get(node).and_then(|s| s.get(copro)).copied().unwrap_or(0)
    }

    /// Whether some port or source has more than one destination (so
    /// exchange buffers are duplicated).
    pub fn has_fanout(&self) -> bool {
        self.out.iter().flatten().chain(&self.sources).any(|d| d.len() > 1)
    }

    /// The most exchange buffers one packet can become (copies at fan-outs,
    /// counted to the ports they leave on), capped at `cap`: what sizes the
    /// packet pool of a run.
    pub fn max_exits(&self, cap: u64) -> u64 {
        // NetPEs in reverse topological order: each after those it feeds.
        let mut exits = vec![0u64; self.out.len()];
        let value = |d: &Dest, exits: &[u64]| match d {
            Dest::Sink(_) => 1,
            Dest::Pe { node, .. } => exits.get(*node as usize).copied().unwrap_or(0),
        };
        for &n in self.order.iter().rev() {
            let best = self.out[n].iter().map(|ds| ds.iter().map(|d| value(d, &exits)).fold(0u64, |a, b| a.saturating_add(b))).max();
            exits[n] = best.unwrap_or(0).clamp(1, cap);
        }
        self.sources
            .iter()
            .map(|ds| ds.iter().map(|d| value(d, &exits)).fold(0u64, |a, b| a.saturating_add(b)))
            .max()
            .unwrap_or(1)
            .clamp(1, cap)
    }

    /// Number of input ports of each NetPE that something feeds (largest wired input port + 1).
    pub fn wired_inputs(&self) -> Vec<usize> {
        let mut n = vec![0usize; self.out.len()];
        for d in self.out.iter().flatten().chain(&self.sources).flatten() {
            if let Dest::Pe { node, in_port } = d {
                let e = &mut n[*node as usize];
                *e = (*e).max(usize::from(*in_port) + 1);
            }
        }
        n
    }
}

/// What happened to one input packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It left the application on this output port (exactly one copy left, no other copies existed).
    Output(u16),
    /// It was dropped (`drop`, an unconnected port, or no source for its input port).
    Drop,
    /// Execution faulted; the packet was dropped.
    Fault(FaultKind),
    /// It was duplicated at a fan-out; `outputs` copies left the application.
    Fanout {
        /// Copies that reached an output port.
        outputs: u32,
    },
}

impl Verdict {
    /// The verdict's code in a [`BatchOutput`]: `0..=0xffff` the output
    /// port, [`VERDICT_DROP`], [`VERDICT_FAULT`] `|` the index of the fault
    /// kind in [`FaultKind::ALL`], or [`VERDICT_FANOUT`] `|` the copies that
    /// left (at most `2^31 - 1` counted). The first three are the codes
    /// `netvm_run` writes (include/netvm.h).
    #[inline]
    pub fn encode(self) -> u32 {
        match self {
            Verdict::Output(p) => u32::from(p),
            Verdict::Drop => VERDICT_DROP,
            Verdict::Fault(k) => k.code(),
            Verdict::Fanout { outputs } => VERDICT_FANOUT | outputs.min(VERDICT_FANOUT - 1),
        }
    }

    /// Decodes [`Verdict::encode`]; an unknown code is a drop.
    pub fn decode(raw: u32) -> Verdict {
        if raw & VERDICT_FANOUT != 0 {
            return Verdict::Fanout { outputs: raw & !VERDICT_FANOUT };
        }
        match raw {
            0..=0xffff => Verdict::Output(raw as u16),
            _ => FaultKind::from_code(raw).map_or(Verdict::Drop, Verdict::Fault),
        }
    }
}

pub use netvm_abi::{VERDICT_DROP, VERDICT_FANOUT, VERDICT_FAULT};

/// What one batch produced: a verdict per packet and what left from
/// duplicated packets. In exit order, packet by packet: a packet whose
/// verdict is an output port left once on it in its own buffer; a
/// duplicated packet's exits are its entries in `fanout`, in order.
#[derive(Debug, Default)]
pub struct BatchOutput {
    /// One code per packet ([`Verdict::encode`]).
    pub verdicts: Vec<u32>,
    /// Exits of duplicated packets, in the order they left.
    pub fanout: Vec<FanoutExit>,
}

impl BatchOutput {
    /// An output with room for `n` packets' verdicts and the exits of
    /// their duplicates (two per packet; more grow the output once).
    pub fn with_capacity(n: usize) -> BatchOutput {
        BatchOutput { verdicts: Vec::with_capacity(n), fanout: Vec::with_capacity(2 * n) }
    }

    /// Forgets the last batch (releasing its copies), keeping the capacity.
    pub fn clear(&mut self) {
        self.verdicts.clear();
        self.fanout.clear();
    }

    /// The verdict of packet `i`.
    pub fn verdict(&self, i: usize) -> Verdict {
        Verdict::decode(self.verdicts[i])
    }
}

/// One exit of a duplicated packet.
#[derive(Debug)]
pub struct FanoutExit {
    /// The packet's index in its batch.
    pub idx: u32,
    /// The application output port it left on.
    pub port: u16,
    /// The copy that left, or `None` for the packet's own buffer.
    pub copy: Option<PacketBuf>,
}

/// Counters of one NetPE.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFlow {
    /// Exchange buffers received, by input port.
    pub packets_in: Vec<u64>,
    /// Exchange buffers sent, by output port (connected or not).
    pub packets_out: Vec<u64>,
    /// Exchange buffers the program dropped (`drop`).
    pub dropped: u64,
    /// Exchange buffers sent on an output port connected to nothing.
    pub unconnected: u64,
    /// Faults by kind.
    pub faults: FaultCounts,
    /// Budget the NetPE's handlers consumed ([`crate::PeState::budget_used`]).
    pub budget_used: u64,
}

impl NodeFlow {
    /// Adds `other`'s counts to these (another worker's).
    pub fn add(&mut self, other: &NodeFlow) {
        add_counts(&mut self.packets_in, &other.packets_in);
        add_counts(&mut self.packets_out, &other.packets_out);
        self.dropped += other.dropped;
        self.unconnected += other.unconnected;
        self.faults.add(&other.faults);
        self.budget_used += other.budget_used;
    }
}

/// Adds `b` to `a` element by element, growing `a` to `b`'s length (the
/// counters of two workers of one application).
pub fn add_counts(a: &mut Vec<u64>, b: &[u64]) {
    if a.len() < b.len() {
        a.resize(b.len(), 0);
    }
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// Counters of a whole application.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowCounts {
    /// Per NetPE.
    pub nodes: Vec<NodeFlow>,
    /// Exchange buffers that left, per application output port.
    pub sinks: Vec<u64>,
    /// Packets that arrived on an input port without a source.
    pub no_source: u64,
}

impl FlowCounts {
    /// Adds `other`'s counts to these (another worker's).
    pub fn add(&mut self, other: &FlowCounts) {
        if self.nodes.len() < other.nodes.len() {
            self.nodes.resize(other.nodes.len(), NodeFlow::default());
        }
        for (a, b) in self.nodes.iter_mut().zip(&other.nodes) {
            a.add(b);
        }
        add_counts(&mut self.sinks, &other.sinks);
        self.no_source += other.no_source;
    }
}

/// A whole application compiled into native code: the engine side of
/// direct linking. `states` are the NetPEs' states in application order,
/// each created by [`PeState::new`] from its module with its coprocessors.
pub trait LinkedCode: Send {
    /// Changes the limits handlers run under from the next batch on (the
    /// budget every handler invocation starts with).
    fn set_limits(&mut self, limits: &Limits);
    /// Runs every `.init` handler, in topological order; on a failure,
    /// returns the NetPE and its outcome.
    fn init(&mut self, states: &mut [PeState]) -> Result<(), (usize, Outcome)>;
    /// Processes a batch in order, writing packets in place: `out` receives
    /// a verdict per packet and the exits of duplicated packets, whose
    /// copies come from `pool`.
    fn run(&mut self, states: &mut [PeState], batch: &mut Batch, pool: &PacketPool, out: &mut BatchOutput);
    /// The counters accumulated since the code was built (or forked).
    fn flow(&self) -> FlowCounts;
    /// A context for another worker over the same compiled code, with its
    /// own counters (at zero) and scratch memory.
    fn fork(&self) -> Box<dyn LinkedCode>;
    /// Makes room for batches of up to `packets` packets now, so that
    /// running them allocates nothing.
    fn reserve(&mut self, packets: usize) {
        let _ = packets;
    }
}
