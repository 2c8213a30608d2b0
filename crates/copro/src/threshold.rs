//! `threshold`: event thresholds and detection filters, as Snort counts
//! them (`threshold: type limit|threshold|both`, `detection_filter`; Snort
//! 3's `sfthd`): per (id, address), the events of a window of packet time.
//!
//! An application (the IDS) asks, each time an event happens (a rule
//! matched), whether to report it. The instance keeps one node per (id,
//! address) with the window's start, the events counted in it, the last
//! event's time and, for detection filters, the previous window's count.
//! Times are whole seconds of packet time (Snort's `tv_sec`); the clock
//! never goes back (a packet older than the latest seen counts at the
//! latest time). With `N` the count and `S` the seconds, an event on a node
//! first counts (a new node starts at 1 with its window at now), then:
//!
//! | kind | rule | reported when |
//! |------|------|---------------|
//! | 0 `limit`     | `threshold: type limit` | window expired (now − start ≥ S): restart it at 1; report while the count ≤ N (the first N of each window) |
//! | 1 `threshold` | `threshold: type threshold` | window expired: restart at 1; when the count reaches N: report, and restart the window at 0 (every Nth event) |
//! | 2 `both`      | `threshold: type both` | window expired: restart at 1, not reported; else report when the count is exactly N (once per window, after N events) |
//! | 3 `detect`    | `detection_filter` | window expired: restart at 1, keeping the previous window's count − 1 if the last event was at most S ago; report when the count or that previous count exceeds N (every event past the rate) |
//!
//! | register | meaning |
//! |----------|---------|
//! | in 0     | id (the rule) |
//! | in 1     | address (the tracked IPv4 source or destination) |
//! | in 2     | kind, 0..=3 above |
//! | in 3     | count N |
//! | in 4     | seconds S |
//! | out 0    | 1: report the event; 0: filter it out |
//!
//! | op | name | effect |
//! |----|------|--------|
//! | 0  | test | counts an event of (`in0`, `in1`) at the packet's time; `out0` = whether to report it |
//!
//! A kind above 3 faults `copro`. Configuration: `capacity`, the most
//! nodes (1..=2^24, default 65,536). A new node in a full table evicts the
//! least recently used one (counted in `evictions`): its key starts over,
//! as in Snort when its table is full. `dump` writes one node per line,
//! `ID ADDRESS COUNT START LAST PREV` (decimal, address as a number), least
//! recently used first; there is no table to load. Statistics: `tested`,
//! `reported`, `filtered`, `entries`, `evictions`.
//!
//! Several workers: one table for all of them (`Shared`, under a lock, as
//! Snort 3 shares its threshold table between packet threads): counts
//! cover every worker's packets, but which of several concurrent events
//! is the Nth depends on how the workers interleave. With one worker the
//! result follows packet order exactly.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use netvm_vm::{CoproConfig, CoproError, Coprocessor, InvokeContext, RegisterFile, Timestamp, WorkerShare};

/// Most nodes in one instance.
pub const MAX_CAPACITY: usize = 1 << 24;
/// Nodes by default.
pub const DEFAULT_CAPACITY: usize = 65_536;

/// How events of one (id, address) are filtered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Report the first N events of each window.
    Limit = 0,
    /// Report every Nth event of a window.
    Threshold = 1,
    /// Report once per window, at the Nth event.
    Both = 2,
    /// Report every event past N in a window (`detection_filter`).
    Detect = 3,
}

impl Kind {
    /// The kind numbered `n` (register `in2`).
    pub fn from_code(n: u32) -> Option<Kind> {
        Some(match n {
            0 => Kind::Limit,
            1 => Kind::Threshold,
            2 => Kind::Both,
            3 => Kind::Detect,
            _ => return None,
        })
    }
}

/// The counting state of one (id, address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Node {
    start: u64,
    last: u64,
    count: u64,
    prev: u64,
    /// Position in the recency order.
    stamp: u64,
}

/// The table every handle of an instance shares.
#[derive(Debug)]
struct State {
    capacity: usize,
    nodes: HashMap<(u32, u32), Node>,
    /// Stamp → key, least recently used first.
    recency: BTreeMap<u64, (u32, u32)>,
    next_stamp: u64,
    /// Latest packet second seen.
    clock: u64,
    tested: u64,
    reported: u64,
    evictions: u64,
}

impl State {
    fn new(capacity: usize) -> State {
        State { capacity, nodes: HashMap::new(), recency: BTreeMap::new(), next_stamp: 0, clock: 0, tested: 0, reported: 0, evictions: 0 }
    }

    fn test(&mut self, key: (u32, u32), kind: Kind, n: u64, seconds: u64, now: u64) -> bool {
        self.clock = self.clock.max(now);
        let now = self.clock;
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        let node = match self.nodes.get_mut(&key) {
            Some(node) => {
                self.recency.remove(&node.stamp);
                node.count += 1;
                node
            }
            None => {
                if self.nodes.len() >= self.capacity {
                    if let Some((_, victim)) = self.recency.pop_first() {
                        self.nodes.remove(&victim);
                        self.evictions += 1;
                    }
                }
                self.nodes.entry(key).or_insert(Node { start: now, last: now, count: 1, prev: 0, stamp })
            }
        };
        node.stamp = stamp;
        self.recency.insert(stamp, key);
        let expired = now - node.start >= seconds;
        let report = match kind {
            Kind::Detect => {
                if expired {
                    node.prev = if now - node.last > seconds { 0 } else { node.count - 1 };
                    node.start = now;
                    node.count = 1;
                }
                node.last = now;
                node.count > n || node.prev > n
            }
            Kind::Limit => {
                if expired {
                    node.start = now;
                    node.count = 1;
                }
                node.count <= n
            }
            Kind::Threshold => {
                if expired {
                    node.start = now;
                    node.count = 1;
                }
                if node.count >= n {
                    node.count = 0;
                    node.start = now;
                    true
                } else {
                    false
                }
            }
            Kind::Both => {
                if expired {
                    node.start = now;
                    node.count = 1;
                    false
                } else {
                    node.count == n
                }
            }
        };
        self.tested += 1;
        self.reported += u64::from(report);
        report
    }
}

/// The `threshold` coprocessor: a handle on a shared table.
#[derive(Debug)]
pub struct Thresholds {
    state: Arc<Mutex<State>>,
    input: [u32; 5],
    report: u32,
}

impl Thresholds {
    /// An empty table of at most `capacity` nodes.
    pub fn new(capacity: usize) -> Result<Thresholds, String> {
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(format!("threshold: capacity must be between 1 and {MAX_CAPACITY}"));
        }
        Ok(Thresholds { state: Arc::new(Mutex::new(State::new(capacity))), input: [0; 5], report: 0 })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A handle that panicked mid-update left whole numbers behind: the table stays usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts an event of `id` for `address` at `now`; whether to report it.
    pub fn test(&mut self, id: u32, address: u32, kind: Kind, count: u32, seconds: u32, now: Timestamp) -> bool {
        let secs = now.as_nanos() / 1_000_000_000;
        self.state().test((id, address), kind, u64::from(count), u64::from(seconds), secs)
    }
}

pub(crate) fn create(cfg: &CoproConfig) -> Result<Box<dyn Coprocessor>, String> {
    if let Some(k) = cfg.keys().find(|k| k.as_str() != "capacity") {
        return Err(format!("threshold: unknown setting `{k}` (known: capacity)"));
    }
    let capacity = match cfg.get("capacity") {
        None => DEFAULT_CAPACITY,
        Some(s) => s.parse::<usize>().map_err(|_| format!("threshold: capacity `{s}` is not a number"))?,
    };
    Ok(Box::new(Thresholds::new(capacity)?))
}

impl Coprocessor for Thresholds {
    fn kind(&self) -> &str {
        "threshold"
    }

    fn write(&mut self, reg: u8, value: u32) -> Result<(), CoproError> {
        *self.input.get_mut(reg as usize).ok_or(CoproError::NoRegister(reg))? = value;
        Ok(())
    }

    fn read(&mut self, reg: u8) -> Result<u32, CoproError> {
        match reg {
            0 => Ok(self.report),
            _ => Err(CoproError::NoRegister(reg)),
        }
    }

    fn registers(&mut self) -> RegisterFile {
        RegisterFile::new(&mut self.input, u32::MAX, std::slice::from_mut(&mut self.report), 1)
    }

    fn invoke(&mut self, op: u8, ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        if op != 0 {
            return Err(CoproError::NoOperation(op));
        }
        let [id, address, kind, count, seconds] = self.input;
        let kind = Kind::from_code(kind).ok_or_else(|| CoproError::BadArgument(format!("threshold kind {kind} (0..=3)")))?;
        self.report = u32::from(self.test(id, address, kind, count, seconds, ctx.now));
        Ok(())
    }

    fn dump(&self) -> String {
        let st = self.state();
        let mut s = String::new();
        for key in st.recency.values() {
            let n = &st.nodes[key];
            s += &format!("{} {} {} {} {} {}\n", key.0, key.1, n.count, n.start, n.last, n.prev);
        }
        s
    }

    /// Forgets every node; the statistics stay.
    fn clear(&mut self) {
        let mut st = self.state();
        st.nodes.clear();
        st.recency.clear();
    }

    fn stats(&self) -> Vec<(String, u64)> {
        let st = self.state();
        vec![
            ("tested".into(), st.tested),
            ("reported".into(), st.reported),
            ("filtered".into(), st.tested - st.reported),
            ("entries".into(), st.nodes.len() as u64),
            ("evictions".into(), st.evictions),
        ]
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    /// A handle on the same table.
    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        Ok(Box::new(Thresholds { state: Arc::clone(&self.state), input: [0; 5], report: 0 }))
    }

    fn share(&self) -> WorkerShare {
        WorkerShare::Shared
    }
}

#[cfg(test)]
mod tests;
