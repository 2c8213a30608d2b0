//! The counter layout of a linked application: where each counter of
//! `AppCtx::counters` lives ([`AppLayout`]), which counters are derived by
//! flow conservation instead of counted per packet, and how the raw
//! counters become the runtime's [`FlowCounts`].

use netvm_verify::Verified;
use netvm_vm::graph::{AppGraph, Dest, FlowCounts, NodeFlow};
use netvm_vm::{FaultCounts, FaultKind};

/// Where each counter of [`AppCtx::counters`](super::AppCtx::counters) is. Per NetPE `n`, from
/// `node_base[n]`: one per output port, then `drop`, then one per fault
/// kind (in `FaultKind::ALL` order), then the budget its `.push` handler
/// consumed (added to by NetPEs with backward edges only); then one per application input port
/// (packets that arrived there) from `source_base`; then `no_source`.
/// Everything else (packets in per input port, unconnected ports, sinks)
/// follows from these and the graph.
///
/// Some counters are not counted per packet but derived at the end of each
/// batch (flow conservation, [`AppLayout::derived`]): an output port (or a
/// source) whose only destination is a NetPE that nothing else feeds has
/// sent exactly what that NetPE did (its ports, drops and faults). In a chain
/// only the exits are then counted, as in a single NetPE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppLayout {
    /// First counter of each NetPE.
    pub node_base: Vec<usize>,
    /// Output ports of each NetPE.
    pub out_ports: Vec<usize>,
    /// First per-source counter.
    pub source_base: usize,
    /// Packets on an input port without a source.
    pub no_source: usize,
    /// Number of counters.
    pub counters: usize,
    /// Bytes of info memory ([`AppCtx::info`](super::AppCtx::info)).
    pub info_size: usize,
    /// `.datasize` of each NetPE.
    pub data_sizes: Vec<usize>,
    /// Derived counters: `(counter, NetPE)`, the counter being the sum of the
    /// NetPE's own counters, in the order to compute them (downstream first).
    pub derived: Vec<(usize, usize)>,
    /// Whether each counter is derived.
    is_derived: Vec<bool>,
}

impl AppLayout {
    /// The layout of `graph`'s NetPEs, `modules` (one per NetPE).
    pub(super) fn new(graph: &AppGraph, modules: &[Verified]) -> AppLayout {
        let mut node_base = Vec::with_capacity(modules.len());
        let mut next = 0;
        for v in modules {
            node_base.push(next);
            next += v.module.out_ports as usize + 1 + FaultKind::ALL.len() + 1;
        }
        let source_base = next;
        next += graph.sources.len();
        let mut l = AppLayout {
            node_base,
            out_ports: modules.iter().map(|v| v.module.out_ports as usize).collect(),
            source_base,
            no_source: next,
            counters: next + 1,
            info_size: modules.iter().map(|v| v.module.info_size as usize).max().unwrap_or(0),
            data_sizes: modules.iter().map(|v| v.module.data_size as usize).collect(),
            derived: Vec::new(),
            is_derived: vec![false; next + 1],
        };
        l.derive(graph);
        l
    }

    /// Finds the derived counters (see the type's documentation).
    fn derive(&mut self, graph: &AppGraph) {
        // Edges into each NetPE, from sources and output ports alike.
        let mut fed = vec![0usize; self.node_base.len()];
        for d in graph.sources.iter().chain(graph.out.iter().flatten()).flatten() {
            if let Dest::Pe { node, .. } = d {
                fed[*node as usize] += 1;
            }
        }
        let sole = |dests: &[Dest]| match dests {
            [Dest::Pe { node, .. }] if fed[*node as usize] == 1 => Some(*node as usize),
            _ => None,
        };
        // Downstream first: a NetPE's own counters may be derived too.
        for &n in graph.order.iter().rev() {
            for (p, dests) in graph.out[n].iter().enumerate() {
                if let Some(m) = sole(dests) {
                    self.derived.push((self.out(n, p), m));
                }
            }
        }
        for (p, dests) in graph.sources.iter().enumerate() {
            if let Some(m) = sole(dests) {
                self.derived.push((self.source_base + p, m));
            }
        }
        for &(k, _) in &self.derived {
            self.is_derived[k] = true;
        }
    }

    /// Whether counter `k` is counted per packet (not derived).
    pub(super) fn counted(&self, k: usize) -> bool {
        !self.is_derived[k]
    }

    /// The counters NetPE `m`'s outcomes are counted in: its ports, `drop`, its faults.
    pub(super) fn outcomes(&self, m: usize) -> std::ops::Range<usize> {
        self.node_base[m]..self.fault(m, FaultKind::ALL.len() - 1) + 1
    }

    /// Counter of NetPE `n`'s output port `p`.
    pub(super) fn out(&self, n: usize, p: usize) -> usize {
        self.node_base[n] + p
    }

    /// Counter of NetPE `n`'s drops.
    pub(super) fn drop(&self, n: usize) -> usize {
        self.node_base[n] + self.out_ports[n]
    }

    /// Counter of NetPE `n`'s faults of kind `FaultKind::ALL[k]`.
    pub(super) fn fault(&self, n: usize, k: usize) -> usize {
        self.node_base[n] + self.out_ports[n] + 1 + k
    }

    /// Counter of the budget NetPE `n`'s `.push` handler consumed.
    pub fn budget_counter(&self, n: usize) -> usize {
        self.fault(n, FaultKind::ALL.len() - 1) + 1
    }

    /// The counters of the runtime, derived from the raw `counters` by flow conservation.
    pub fn flow(&self, graph: &AppGraph, counters: &[u64]) -> FlowCounts {
        let wired = graph.wired_inputs();
        let mut nodes: Vec<NodeFlow> = (0..self.node_base.len())
            .map(|n| NodeFlow {
                packets_in: vec![0; wired[n]],
                packets_out: (0..self.out_ports[n]).map(|p| counters[self.out(n, p)]).collect(),
                dropped: counters[self.drop(n)],
                unconnected: 0,
                faults: FaultCounts(std::array::from_fn(|k| counters[self.fault(n, k)])),
                budget_used: counters[self.budget_counter(n)],
            })
            .collect();
        let mut sinks = vec![0u64; graph.sink_ports];
        let mut deliver = |dests: &[Dest], count: u64, nodes: &mut Vec<NodeFlow>| {
            for d in dests {
                match *d {
                    Dest::Pe { node, in_port } => nodes[node as usize].packets_in[usize::from(in_port)] += count,
                    Dest::Sink(s) => sinks[usize::from(s)] += count,
                }
            }
        };
        for (p, dests) in graph.sources.iter().enumerate() {
            deliver(dests, counters[self.source_base + p], &mut nodes);
        }
        for (n, ports) in graph.out.iter().enumerate() {
            for (p, dests) in ports.iter().enumerate() {
                let count = counters[self.out(n, p)];
                if dests.is_empty() {
                    nodes[n].unconnected += count;
                }
                deliver(dests, count, &mut nodes);
            }
        }
        FlowCounts { nodes, sinks, no_source: counters[self.no_source] }
    }
}
