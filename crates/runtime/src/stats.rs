//! Counters: per NetPE (packets in per input port, out per output port,
//! drops, faults by kind) and per application (what `--stats json` prints).

use std::collections::BTreeMap;

use netvm_vm::graph::NodeFlow;
use netvm_vm::FaultCounts;

/// Counters of one NetPE instance: its name and its [`NodeFlow`], the
/// counters every engine keeps (packets in per input port, out per output
/// port, drops, unconnected, faults by kind, budget used).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeCounters {
    /// NetPE name.
    pub name: String,
    /// The counts.
    pub flow: NodeFlow,
}

impl PeCounters {
    /// Counters for a NetPE with `out_ports` output ports, `in_ports` of its input ports wired.
    pub(crate) fn new(name: &str, out_ports: u16, in_ports: usize) -> PeCounters {
        let flow = NodeFlow { packets_in: vec![0; in_ports], packets_out: vec![0; out_ports as usize], ..NodeFlow::default() };
        PeCounters { name: name.to_string(), flow }
    }

    #[inline]
    pub(crate) fn count_in(&mut self, port: u16) {
        let p = port as usize;
        let counts = &mut self.flow.packets_in;
        if p >= counts.len() {
            counts.resize(p + 1, 0);
        }
        counts[p] += 1;
    }

    /// The same NetPE with every counter at zero.
    pub(crate) fn zeroed(&self) -> PeCounters {
        PeCounters::new(&self.name, self.flow.packets_out.len() as u16, self.flow.packets_in.len())
    }
}

/// Application-wide counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppStats {
    /// Packets that entered the application.
    pub packets: u64,
    /// Exchange buffers that left, by application output port.
    pub ports: BTreeMap<u16, u64>,
    /// Packets that entered, by application input port: counted where
    /// sources listen on several input ports (else empty), for the ports
    /// up to the highest one a source listens on.
    pub inputs: BTreeMap<u16, u64>,
    /// Exchange buffers discarded without a fault: `drop`, an unconnected
    /// output port, or an input port no source listens on.
    pub dropped: u64,
    /// Of `dropped`: packets that arrived on an input port with no source.
    pub no_source: u64,
    /// Faults by kind (each fault also drops its exchange buffer; not included in `dropped`).
    pub faults: FaultCounts,
    /// Per-NetPE counters, in manifest order.
    pub netpes: Vec<PeCounters>,
}

impl AppStats {
    /// Total faults of all kinds.
    pub fn total_faults(&self) -> u64 {
        self.faults.total()
    }

    /// Adds `other`'s counts (another worker's instance of the same application).
    pub fn add(&mut self, other: &AppStats) {
        self.packets += other.packets;
        for (p, n) in &other.ports {
            *self.ports.entry(*p).or_default() += n;
        }
        for (p, n) in &other.inputs {
            *self.inputs.entry(*p).or_default() += n;
        }
        self.dropped += other.dropped;
        self.no_source += other.no_source;
        self.faults.add(&other.faults);
        if self.netpes.is_empty() {
            self.netpes = other.netpes.clone();
        } else {
            for (a, b) in self.netpes.iter_mut().zip(&other.netpes) {
                a.flow.add(&b.flow);
            }
        }
    }

    /// Adds `other`'s counts, matching NetPEs by name (an earlier version
    /// of the application, whose NetPEs may differ): a NetPE only `other`
    /// has is appended.
    pub fn add_by_name(&mut self, other: &AppStats) {
        let mut mine = std::mem::take(&mut self.netpes);
        let mut totals = other.clone();
        totals.netpes.clear();
        self.add(&totals);
        if mine.len() == other.netpes.len() && mine.iter().zip(&other.netpes).all(|(a, b)| a.name == b.name) {
            for (a, b) in mine.iter_mut().zip(&other.netpes) {
                a.flow.add(&b.flow);
            }
        } else {
            let at: std::collections::HashMap<String, usize> = mine.iter().enumerate().map(|(i, c)| (c.name.clone(), i)).collect();
            for b in &other.netpes {
                match at.get(&b.name) {
                    Some(&i) => mine[i].flow.add(&b.flow),
                    None => mine.push(b.clone()),
                }
            }
        }
        self.netpes = mine;
    }
}
