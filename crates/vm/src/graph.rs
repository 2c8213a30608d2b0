//! An application's wiring as engines see it, and what a whole compiled
//! application reports.
//!
//! The runtime builds an [`AppGraph`] from a manifest (names resolved,
//! ports checked, cycles rejected); an engine that compiles whole
//! applications ([`LinkedCode`]) takes it together with the verified
//! modules. [`Verdict`] and [`FlowCounts`] are the results both the
//! runtime's own graph walk and compiled applications produce, so that the
//! two can be compared exactly.

use crate::{FaultKind, Outcome, Packet, PeState};

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
}

impl AppGraph {
    /// Whether some port or source has more than one destination (so
    /// exchange buffers are duplicated).
    pub fn has_fanout(&self) -> bool {
        self.out.iter().flatten().chain(&self.sources).any(|d| d.len() > 1)
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
    /// Faults, indexed like [`FaultKind::ALL`].
    pub faults: [u64; FaultKind::ALL.len()],
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

/// A whole application compiled into native code: the engine side of
/// direct linking. `states` are the NetPEs' states in application order,
/// each created by [`PeState::new`] from its module with its coprocessors.
pub trait LinkedCode: Send {
    /// Runs every `.init` handler, in topological order; on a failure,
    /// returns the NetPE and its outcome.
    fn init(&mut self, states: &mut [PeState]) -> Result<(), (usize, Outcome)>;
    /// Processes a batch in order: `verdicts` receives one entry per
    /// packet; `emit` is called for every exchange buffer that leaves the
    /// application, with its output port, in the order they leave. Each
    /// packet slot holds the (possibly modified) packet afterwards.
    fn run(&mut self, states: &mut [PeState], batch: &mut [Packet], verdicts: &mut Vec<Verdict>, emit: &mut dyn FnMut(u16, &Packet));
    /// The counters accumulated since the code was built.
    fn flow(&self) -> FlowCounts;
}
