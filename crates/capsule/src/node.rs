//! The capsule node: what a router does with a capsule it receives
//! (docs/capsules.md §3). It finds the capsule in the frame, charges a hop,
//! verifies the code for its hook in one pass, checks the code's cost
//! against the packet's local bound, runs it on the interpreter with the
//! ephemeral state store and the environment as coprocessors 0 and 1, and
//! applies the outcome: forward, return to the source (once), or drop with
//! a counted reason. Ordinary packets pass untouched.

use std::collections::BTreeMap;
use std::net::IpAddr;

use netvm_copro::ess::Ess;
use netvm_vm::{FaultKind, Limits, Outcome, PeState, Timestamp, UntrustedRun, XbView};

use std::sync::Arc;
use std::time::Instant;

use crate::cache::CodeCache;
use crate::env::{Env, EnvConfig};
use crate::profile::{CapsuleCode, CostModel, Rejected, Verifier, PORT_FORWARD, PORT_RETURN};
use crate::tier::{self, Compiler, Native, TierModel, TierPolicy};
use crate::wire::{self, Carrier, Link, Located, Malformed, CAPSULE_PORT, FLAG_ADMIN, FLAG_RETURNED, MAX_SCRATCH};

/// Which entry point of the code a node runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    /// The ingress entry (packets arriving on the node's interface).
    Ingress,
    /// The egress entry (packets leaving through it).
    Egress,
}

/// How a node treats capsules: set by the operator.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// UDP port capsules are sent to.
    pub port: u16,
    /// The link layer of the frames.
    pub link: Link,
    /// Which entry point this node runs.
    pub hook: Hook,
    /// Cost units (ns) a capsule may spend per byte of its IP datagram:
    /// the `n` of the local bound `n·|p|`.
    pub cost_per_byte: u32,
    /// The environment the code may read.
    pub env: EnvConfig,
    /// Sources whose admin capsules get operator rights on the store.
    pub admin_sources: Vec<IpAddr>,
    /// The instructions' weights.
    pub costs: CostModel,
    /// Programs the code cache holds (0: every capsule is verified afresh).
    pub code_cache: usize,
    /// When cached programs are compiled to native code.
    pub tier: TierPolicy,
}

impl Default for NodeConfig {
    fn default() -> NodeConfig {
        NodeConfig {
            port: CAPSULE_PORT,
            link: Link::Ethernet,
            hook: Hook::Ingress,
            cost_per_byte: 32,
            env: EnvConfig::default(),
            admin_sources: Vec::new(),
            costs: CostModel::default(),
            code_cache: 1024,
            tier: TierPolicy::Auto,
        }
    }
}

/// Why a capsule was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    /// Not a well-formed capsule.
    Malformed(Malformed),
    /// Code outside the capsule profile.
    Rejected(Rejected),
    /// Code whose weights exceed the packet's local bound.
    Cost,
    /// Arrived with no hop left.
    Hops,
    /// An admin capsule from a source not configured for it.
    Admin,
    /// The code dropped it (`drop`).
    Code,
    /// The code returned it a second time.
    ReturnedTwice,
    /// The code faulted (budget, bounds, coprocessor, division, port).
    Fault(FaultKind),
}

impl DropReason {
    /// The reason's name in statistics (`malformed.magic`, `rejected.depth`, `fault.budget`, ...).
    pub fn name(&self) -> String {
        match self {
            DropReason::Malformed(m) => format!("malformed.{}", m.name()),
            DropReason::Rejected(r) => format!("rejected.{}", r.name()),
            DropReason::Cost => "cost".into(),
            DropReason::Hops => "hops".into(),
            DropReason::Admin => "admin".into(),
            DropReason::Code => "dropped".into(),
            DropReason::ReturnedTwice => "returned_twice".into(),
            DropReason::Fault(k) => format!("fault.{}", k.name()),
        }
    }
}

/// What became of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not a capsule: untouched.
    Ordinary,
    /// A capsule that goes on towards its destination.
    Forward,
    /// A capsule now addressed back to its source.
    Return,
    /// A capsule dropped, and why.
    Drop(DropReason),
}

/// What a node counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Frames that were not capsules.
    pub ordinary: u64,
    /// Capsules seen.
    pub capsules: u64,
    /// Capsules forwarded.
    pub forwarded: u64,
    /// Capsules returned to their source.
    pub returned: u64,
    /// Capsules dropped, by reason name.
    pub dropped: BTreeMap<String, u64>,
    /// Programs verified (the others came from the code cache).
    pub verified: u64,
    /// Capsules whose code came from the code cache.
    pub cached: u64,
    /// Programs compiled to native code.
    pub compiled: u64,
    /// Time spent compiling them, ns.
    pub compile_ns: u64,
    /// Programs the compiler refused (they stay interpreted).
    pub compile_failures: u64,
    /// Capsules run as native code.
    pub native: u64,
    /// Instructions of the programs verified.
    pub instructions: u64,
}

impl NodeStats {
    /// Adds `other`'s counts (another worker's node).
    pub fn add(&mut self, other: &NodeStats) {
        self.ordinary += other.ordinary;
        self.capsules += other.capsules;
        self.forwarded += other.forwarded;
        self.returned += other.returned;
        for (k, v) in &other.dropped {
            *self.dropped.entry(k.clone()).or_insert(0) += v;
        }
        self.verified += other.verified;
        self.cached += other.cached;
        self.compiled += other.compiled;
        self.compile_ns += other.compile_ns;
        self.compile_failures += other.compile_failures;
        self.native += other.native;
        self.instructions += other.instructions;
    }
}

/// A capsule node (see the module documentation).
pub struct CapsuleNode {
    cfg: NodeConfig,
    state: PeState,
    verifier: Verifier,
    cache: CodeCache,
    /// Code verified for the current capsule when the cache holds nothing.
    fresh: CapsuleCode,
    fresh_tag: u64,
    /// The scratchpad while the code runs.
    scratch: [u8; MAX_SCRATCH],
    model: TierModel,
    stats: NodeStats,
    /// Capsules dropped, by reason.
    drops: BTreeMap<DropReason, u64>,
}

impl std::fmt::Debug for CapsuleNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapsuleNode").field("cfg", &self.cfg).field("stats", &self.stats).finish()
    }
}

/// A 64-bit tag of capsule code: the owner of its private store entries.
pub fn code_tag(code: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    code.hash(&mut h);
    h.finish()
}

impl CapsuleNode {
    /// A node with its configuration and its ephemeral state store.
    pub fn new(cfg: NodeConfig, ess: Ess) -> CapsuleNode {
        let env = Env::new(&cfg.env);
        let state = PeState { data: Vec::new(), copros: vec![Box::new(ess), Box::new(env)], scratch: Vec::new(), budget_used: 0 };
        let cache = CodeCache::new(cfg.code_cache);
        CapsuleNode {
            cfg,
            state,
            verifier: Verifier::default(),
            cache,
            fresh: CapsuleCode::default(),
            fresh_tag: 0,
            scratch: [0; MAX_SCRATCH],
            model: TierModel::default(),
            stats: NodeStats::default(),
            drops: BTreeMap::new(),
        }
    }

    /// Another worker's node: the same configuration and the same state
    /// store (shared under a lock), a code cache and counters of its own.
    pub fn fork(&mut self) -> Result<CapsuleNode, String> {
        let ess = self.ess().handle()?;
        Ok(CapsuleNode::new(self.cfg.clone(), ess))
    }

    /// The configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }

    /// What the node counted so far.
    pub fn stats(&self) -> NodeStats {
        let mut s = self.stats.clone();
        for (r, n) in &self.drops {
            *s.dropped.entry(r.name()).or_insert(0) += n;
        }
        s
    }

    /// The ephemeral state store.
    pub fn ess(&mut self) -> &mut Ess {
        self.state.copros[0].as_any_mut().and_then(|a| a.downcast_mut::<Ess>()).expect("coprocessor 0 is the store")
    }

    /// Compiles cached program `i` (whose code is `code`, entered at
    /// `entry`) when the tier policy says it is time.
    fn maybe_compile(&mut self, i: usize, code: &[u8], entry: u16) {
        let c = self.cache.get_mut(i);
        if c.native.is_some() || c.native_failed {
            return;
        }
        let compiler = match self.cfg.tier {
            TierPolicy::Interpret => return,
            TierPolicy::Baseline => Compiler::Baseline,
            TierPolicy::Cranelift => Compiler::Cranelift,
            TierPolicy::Auto if c.interp_ns > 0.0 && self.model.pays(c.runs, c.interp_ns, c.code.insns) => {
                if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
                    Compiler::Baseline
                } else {
                    Compiler::Cranelift
                }
            }
            TierPolicy::Auto => return,
        };
        let insns = c.code.insns;
        let t = Instant::now();
        let result = tier::compile_with(compiler, code, entry, &self.cfg.costs);
        let took = t.elapsed();
        let c = self.cache.get_mut(i);
        match result {
            Ok(code) => {
                c.native = Some(Native { code, compile: took });
                self.model.compiled(insns, took);
                self.stats.compiled += 1;
                self.stats.compile_ns += took.as_nanos() as u64;
            }
            Err(_) => {
                // The interpreter keeps running it.
                c.native_failed = true;
                self.stats.compile_failures += 1;
            }
        }
    }

    /// What the node learnt of the tiers' costs.
    pub fn tier_model(&self) -> &TierModel {
        &self.model
    }

    /// The state store's statistics.
    pub fn ess_stats(&self) -> Vec<(String, u64)> {
        self.state.copros[0].stats()
    }

    /// The code cache.
    pub fn code_cache(&self) -> &CodeCache {
        &self.cache
    }

    /// Processes one frame that arrived at `ts` on `interface`, changing it
    /// in place (hops, flags, scratchpad, addresses when returned).
    pub fn process(&mut self, frame: &mut [u8], ts: Timestamp, interface: u16) -> Verdict {
        let v = self.run(frame, ts, interface);
        match v {
            Verdict::Ordinary => self.stats.ordinary += 1,
            Verdict::Forward => self.stats.forwarded += 1,
            Verdict::Return => self.stats.returned += 1,
            // By reason, without a string per packet (a flood of bad
            // capsules costs no allocation); named in `stats`.
            Verdict::Drop(r) => *self.drops.entry(r).or_insert(0) += 1,
        }
        if v != Verdict::Ordinary {
            self.stats.capsules += 1;
        }
        v
    }

    fn run(&mut self, frame: &mut [u8], ts: Timestamp, interface: u16) -> Verdict {
        let l = match wire::locate(frame, self.cfg.link, self.cfg.port) {
            Ok(None) => return Verdict::Ordinary,
            Ok(Some(l)) => l,
            Err(m) => return Verdict::Drop(DropReason::Malformed(m)),
        };
        let h = l.header;
        if h.hops == 0 {
            return Verdict::Drop(DropReason::Hops);
        }
        let admin = h.flags & FLAG_ADMIN != 0;
        if admin && !source(frame, &l).is_some_and(|s| self.cfg.admin_sources.contains(&s)) {
            return Verdict::Drop(DropReason::Admin);
        }
        let entry = match self.cfg.hook {
            Hook::Ingress => h.ingress,
            Hook::Egress => h.egress,
        };
        // The code: from the cache, or verified now (and cached).
        let code = &frame[l.code()];
        let dialect = h.dialect();
        let slot = match self.cache.find(code, entry, dialect) {
            Some(i) => {
                self.stats.cached += 1;
                Some(i)
            }
            None => {
                if let Err(r) = self.verifier.verify(code, entry, dialect, &self.cfg.costs, &mut self.fresh) {
                    return Verdict::Drop(DropReason::Rejected(r));
                }
                self.stats.verified += 1;
                self.stats.instructions += self.fresh.insns as u64;
                let tag = code_tag(code);
                self.fresh_tag = tag;
                if self.cache.capacity() == 0 {
                    None
                } else {
                    self.cache.insert(code, entry, dialect, std::mem::take(&mut self.fresh), tag)
                }
            }
        };
        // Compile the program now if the policy says so (docs/capsules.md §4).
        if let Some(i) = slot {
            self.maybe_compile(i, code, entry);
        }
        let (prog, tag, native, runs) = match slot {
            Some(i) => {
                let c = self.cache.get_mut(i);
                c.runs += 1;
                (&c.code, c.tag, c.native.as_ref().map(|n| Arc::clone(&n.code)), c.runs)
            }
            None => (&self.fresh, self.fresh_tag, None, 0),
        };
        // The local bound: n·|p|, or less if the sender asks.
        let len = (l.end - l.net) as u64;
        let mut bound = u64::from(self.cfg.cost_per_byte) * len;
        if h.cost_limit != 0 {
            bound = bound.min(u64::from(h.cost_limit) * 16);
        }
        if prog.static_cost > bound {
            return Verdict::Drop(DropReason::Cost);
        }
        // A hop is spent whatever the code does.
        frame[l.capsule + 12] = h.hops - 1;
        let limits = Limits { budget: bound - prog.static_cost };
        let writes_scratch = prog.writes_scratch;
        let run = UntrustedRun { code: tag, admin, interface, ts, hops_left: h.hops - 1 };
        for c in &mut self.state.copros {
            c.begin_untrusted(&run);
        }
        let sr = l.scratch();
        let n = sr.len();
        let scratch = &mut self.scratch;
        scratch[..n].copy_from_slice(&frame[sr.clone()]);
        // Sample the time of every 16th run of a cached program for the
        // tier model (timing costs more than some runs).
        let sample = self.cfg.tier == TierPolicy::Auto && slot.is_some() && runs % 16 == 1;
        let started = sample.then(Instant::now);
        let outcome = {
            let mut xb = XbView { packet: &mut frame[l.net..l.end], wire_len: len as u32, ts, seq: 0, info: &mut scratch[..n] };
            match &native {
                Some(code) => {
                    self.stats.native += 1;
                    code.push(&mut self.state, &mut xb, interface, &limits)
                }
                None => netvm_interp::run_prepared(&prog.prepared, &mut self.state, &mut xb, interface, None, &limits, n, 2),
            }
        };
        if let (Some(t), Some(i)) = (started, slot) {
            let ns = t.elapsed().as_nanos() as f64;
            let c = self.cache.get_mut(i);
            if native.is_some() {
                c.native_ns = if c.native_ns == 0.0 { ns } else { 0.8 * c.native_ns + 0.2 * ns };
                if c.runs % 256 == 1 {
                    self.model.measured(c.interp_ns, c.native_ns);
                }
            } else {
                c.interp_ns = if c.interp_ns == 0.0 { ns } else { 0.8 * c.interp_ns + 0.2 * ns };
            }
        }
        let verdict = match outcome {
            Outcome::Forward(PORT_FORWARD) => Verdict::Forward,
            Outcome::Forward(PORT_RETURN) if h.flags & FLAG_RETURNED != 0 => Verdict::Drop(DropReason::ReturnedTwice),
            Outcome::Forward(PORT_RETURN) => Verdict::Return,
            Outcome::Forward(_) => Verdict::Drop(DropReason::Fault(FaultKind::BadPort)),
            Outcome::Drop | Outcome::Exit => Verdict::Drop(DropReason::Code),
            Outcome::Fault(k) => Verdict::Drop(DropReason::Fault(k)),
        };
        if matches!(verdict, Verdict::Drop(_)) {
            return verdict;
        }
        // The checksum that covers the capsule (the UDP checksum, in use,
        // or the IPv4 header checksum for an IPv4 option) is updated for
        // every 16-bit word that changes (RFC 1624), never recomputed: a
        // packet that arrived with a wrong one keeps it wrong, as routers do.
        let covering = l.checksum().filter(|&(at, _)| l.ipv6 || l.carrier != Carrier::Udp || frame[at..at + 2] != [0, 0]);
        let mut sum =
            covering.map(|(at, words_from)| Sum { value: u16::from_be_bytes([frame[at], frame[at + 1]]), words_from, end: l.end });
        // Write back only what changed.
        if writes_scratch && frame[sr.clone()] != scratch[..n] {
            if let Some(c) = sum.as_mut() {
                c.update(frame, sr.start, &frame[sr.clone()], &scratch[..n]);
            }
            frame[sr].copy_from_slice(&scratch[..n]);
        }
        let hops_at = l.capsule + 12;
        if let Some(c) = sum.as_mut() {
            c.update(frame, hops_at, &[h.hops], &[frame[hops_at]]);
        }
        if verdict == Verdict::Return {
            return_to_source(frame, &l);
            let flags_at = l.capsule + 3;
            if let Some(c) = sum.as_mut() {
                c.update(frame, flags_at, &[h.flags], &[frame[flags_at]]);
            }
        }
        if let (Some(c), Some((at, _))) = (sum, covering) {
            frame[at..at + 2].copy_from_slice(&c.value.to_be_bytes());
        }
        verdict
    }
}

/// A checksum being updated for the bytes of a capsule that change.
#[derive(Clone, Copy)]
struct Sum {
    /// The checksum so far.
    value: u16,
    /// Where the 16-bit words it sums are counted from.
    words_from: usize,
    /// Bytes at or past this offset count as the zero padding of the sum.
    end: usize,
}

impl Sum {
    /// Updates the sum (RFC 1624, eqn. 3) for bytes `at..at + old.len()`
    /// changing from `old` to `new` (the frame's other bytes, which share
    /// the words at either end, are as they are now). The changed words'
    /// terms `~m + m'` are summed first and folded into the checksum once:
    /// the same one's complement sum as a word-by-word update, and the same
    /// checksum (0 sent as 0xffff).
    fn update(&mut self, frame: &[u8], at: usize, old: &[u8], new: &[u8]) {
        debug_assert_eq!(old.len(), new.len());
        let (end, range_end) = (self.end, at + old.len());
        let byte = |bytes: &[u8], k: usize| match k.checked_sub(at) {
            Some(j) if k < range_end => bytes[j],
            _ if k < end => frame[k],
            _ => 0,
        };
        let word = |bytes: &[u8], i: usize| u16::from(byte(bytes, i)) << 8 | u16::from(byte(bytes, i + 1));
        let mut terms = 0u64;
        let mut add = |o: u16, n: u16| {
            if o != n {
                terms += u64::from(!o) + u64::from(n);
            }
        };
        let mut i = at - (at - self.words_from) % 2;
        // A first word half before the range.
        if i < at {
            add(word(old, i), word(new, i));
            i += 2;
        }
        // Whole words inside it, straight from the slices.
        let whole = range_end.saturating_sub(i) / 2 * 2;
        if whole > 0 {
            let (o, n) = (&old[i - at..i - at + whole], &new[i - at..i - at + whole]);
            for (o, n) in o.chunks_exact(2).zip(n.chunks_exact(2)) {
                add(u16::from_be_bytes([o[0], o[1]]), u16::from_be_bytes([n[0], n[1]]));
            }
            i += whole;
        }
        // A last word half past it.
        if i < range_end {
            add(word(old, i), word(new, i));
        }
        if terms != 0 {
            let mut sum = u64::from(!self.value) + terms;
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            self.value = match !(sum as u16) {
                0 => 0xffff,
                c => c,
            };
        }
    }
}

/// The IP source of the datagram.
fn source(frame: &[u8], l: &Located) -> Option<IpAddr> {
    if l.ipv6 {
        let b: [u8; 16] = frame.get(l.net + 8..l.net + 24)?.try_into().ok()?;
        Some(IpAddr::from(b))
    } else {
        let b: [u8; 4] = frame.get(l.net + 12..l.net + 16)?.try_into().ok()?;
        Some(IpAddr::from(b))
    }
}

/// Swaps the IP addresses and marks the capsule returned; the UDP ports
/// stay, so that it is still a capsule on its way back. The IPv4 header
/// checksum is a sum, so swapping leaves it right.
fn return_to_source(frame: &mut [u8], l: &Located) {
    let (a, n) = if l.ipv6 { (l.net + 8, 16) } else { (l.net + 12, 4) };
    for i in 0..n {
        frame.swap(a + i, a + n + i);
    }
    frame[l.capsule + 3] |= FLAG_RETURNED;
}

/// What became of a frame that crossed a [`Chain`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carried {
    /// Not a capsule: every node let it pass.
    Ordinary,
    /// Forwarded by every node: it leaves the far end.
    Delivered,
    /// Returned by node `at` and carried back: it leaves the near end.
    Returned {
        /// Index of the node that returned it.
        at: usize,
    },
    /// Dropped by node `at`.
    Dropped {
        /// Index of the node that dropped it.
        at: usize,
        /// Why.
        reason: DropReason,
    },
}

/// Capsule nodes one after another, as on a network path: a frame enters
/// at node 0 and crosses them in order; one that a node returns crosses
/// the nodes before it again, in reverse order.
#[derive(Debug, Default)]
pub struct Chain {
    /// The nodes, near end first.
    pub nodes: Vec<CapsuleNode>,
}

impl Chain {
    /// Carries one frame that arrived at `ts` across the chain.
    pub fn carry(&mut self, frame: &mut [u8], ts: Timestamp) -> Carried {
        let mut capsule = false;
        let mut returned_at = None;
        for i in 0..self.nodes.len() {
            match self.nodes[i].process(frame, ts, 1) {
                Verdict::Ordinary => {}
                Verdict::Forward => capsule = true,
                Verdict::Return => {
                    returned_at = Some(i);
                    break;
                }
                Verdict::Drop(reason) => return Carried::Dropped { at: i, reason },
            }
        }
        let Some(at) = returned_at else {
            return if capsule { Carried::Delivered } else { Carried::Ordinary };
        };
        for j in (0..at).rev() {
            // A second return is refused (dropped) by the node; anything
            // else goes on back.
            if let Verdict::Drop(reason) = self.nodes[j].process(frame, ts, 2) {
                return Carried::Dropped { at: j, reason };
            }
        }
        Carried::Returned { at }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-by-word update (RFC 1624 applied to each changed word).
    fn word_by_word(value: u16, words_from: usize, end: usize, frame: &[u8], at: usize, old: &[u8], new: &[u8]) -> u16 {
        let pick = |bytes: &[u8], k: usize| {
            if (at..at + bytes.len()).contains(&k) {
                bytes[k - at]
            } else if k < end {
                frame[k]
            } else {
                0
            }
        };
        let mut v = value;
        let mut i = at - (at - words_from) % 2;
        while i < at + old.len() {
            let o = u16::from(pick(old, i)) << 8 | u16::from(pick(old, i + 1));
            let n = u16::from(pick(new, i)) << 8 | u16::from(pick(new, i + 1));
            if o != n {
                v = wire::checksum_update(v, o, n);
            }
            i += 2;
        }
        v
    }

    /// The summed update gives the checksum the word-by-word one does, for
    /// ranges at every parity, of every length up to 40 bytes, against
    /// frames and changes from a fixed pseudo-random sequence with the
    /// extremes (0x0000, 0xffff words) mixed in, and checksums of 0x0001,
    /// 0xfffe and 0xffff among them.
    #[test]
    fn the_summed_update_is_the_word_by_word_one() {
        let mut next = crate::test_sequence(0x2545_f491_4f6c_dd1du64);
        for case in 0..20_000 {
            let end = 20 + (next() % 60) as usize;
            let mut frame: Vec<u8> = (0..end + 2).map(|_| next() as u8).collect();
            if case % 5 == 0 {
                frame.iter_mut().for_each(|b| *b = if next().is_multiple_of(2) { 0 } else { 0xff });
            }
            let words_from = (next() % 4) as usize;
            let at = words_from + (next() % 16) as usize;
            let len = ((next() % 41) as usize).min(end - at);
            let old = frame[at..at + len].to_vec();
            let mut new = old.clone();
            for b in new.iter_mut() {
                match next() % 4 {
                    0 => *b = next() as u8,
                    1 => *b = !*b,
                    _ => {}
                }
            }
            let value = match case % 7 {
                0 => 0xffff,
                1 => 0x0001,
                2 => 0xfffe,
                _ => (next() as u16).max(1),
            };
            let want = word_by_word(value, words_from, end, &frame, at, &old, &new);
            let mut sum = Sum { value, words_from, end };
            sum.update(&frame, at, &old, &new);
            assert_eq!(sum.value, want, "case {case}: at {at} len {len} from {words_from} end {end} value {value:#06x}");
        }
    }
}
