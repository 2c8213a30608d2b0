//! Counters: per NetPE (packets in per input port, out per output port,
//! drops, faults by kind) and per application (what `--stats json` prints).

use std::collections::BTreeMap;

use netvm_vm::graph::add_counts;
use netvm_vm::FaultKind;

/// Counters of one NetPE instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeCounters {
    /// NetPE name.
    pub name: String,
    /// Exchange buffers received, by input port (one entry per input port
    /// up to the highest one something is connected to).
    pub packets_in: Vec<u64>,
    /// Exchange buffers sent, by output port.
    pub packets_out: Vec<u64>,
    /// Exchange buffers the program dropped (`drop`).
    pub dropped: u64,
    /// Exchange buffers sent on an output port connected to nothing (discarded).
    pub unconnected: u64,
    /// Faults, indexed like [`FaultKind::ALL`].
    pub faults: [u64; FaultKind::ALL.len()],
    /// Budget its handlers consumed (the sum of the back-edge costs charged).
    pub budget_used: u64,
}

impl PeCounters {
    /// Counters for a NetPE with `out_ports` output ports, `in_ports` of its input ports wired.
    pub(crate) fn new(name: &str, out_ports: u16, in_ports: usize) -> PeCounters {
        PeCounters {
            name: name.to_string(),
            packets_in: vec![0; in_ports],
            packets_out: vec![0; out_ports as usize],
            ..PeCounters::default()
        }
    }

    #[inline]
    pub(crate) fn count_in(&mut self, port: u16) {
        let p = port as usize;
        if p >= self.packets_in.len() {
            self.packets_in.resize(p + 1, 0);
        }
        self.packets_in[p] += 1;
    }

    /// Faults of one kind.
    pub fn fault_count(&self, kind: FaultKind) -> u64 {
        self.faults[kind.number()]
    }

    /// The same NetPE with every counter at zero.
    pub(crate) fn zeroed(&self) -> PeCounters {
        PeCounters {
            name: self.name.clone(),
            packets_in: vec![0; self.packets_in.len()],
            packets_out: vec![0; self.packets_out.len()],
            ..PeCounters::default()
        }
    }

    /// Adds `other`'s counts (the same NetPE on another worker).
    pub(crate) fn add(&mut self, other: &PeCounters) {
        add_counts(&mut self.packets_in, &other.packets_in);
        add_counts(&mut self.packets_out, &other.packets_out);
        self.dropped += other.dropped;
        self.unconnected += other.unconnected;
        for (a, b) in self.faults.iter_mut().zip(other.faults) {
            *a += b;
        }
        self.budget_used += other.budget_used;
    }
}

/// Application-wide counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppStats {
    /// Packets that entered the application.
    pub packets: u64,
    /// Exchange buffers that left, by application output port.
    pub ports: BTreeMap<u16, u64>,
    /// Exchange buffers discarded without a fault: `drop`, an unconnected
    /// output port, or an input port no source listens on.
    pub dropped: u64,
    /// Of `dropped`: packets that arrived on an input port with no source.
    pub no_source: u64,
    /// Faults by kind (each fault also drops its exchange buffer; not included in `dropped`).
    pub faults: BTreeMap<&'static str, u64>,
    /// Per-NetPE counters, in manifest order.
    pub netpes: Vec<PeCounters>,
}

impl AppStats {
    /// Total faults of all kinds.
    pub fn total_faults(&self) -> u64 {
        self.faults.values().sum()
    }

    /// Adds `other`'s counts (another worker's instance of the same application).
    pub fn add(&mut self, other: &AppStats) {
        self.packets += other.packets;
        for (p, n) in &other.ports {
            *self.ports.entry(*p).or_default() += n;
        }
        self.dropped += other.dropped;
        self.no_source += other.no_source;
        for (k, n) in &other.faults {
            *self.faults.entry(k).or_default() += n;
        }
        if self.netpes.is_empty() {
            self.netpes = other.netpes.clone();
        } else {
            for (a, b) in self.netpes.iter_mut().zip(&other.netpes) {
                a.add(b);
            }
        }
    }
}
