//! The compiled code at work: [`LinkedApp`], one worker's context (its
//! counters, info memory, node table and fan-out state) over a shared
//! [`LinkedProgram`], and its [`LinkedCode`] implementation, through which
//! the runtime runs batches, `.init` handlers and reads the counters;
//! [`decode_verdict`] reads what the code returns per packet.

use std::sync::Arc;

use std::time::Instant;

use netvm_vm::buffer::{Batch, PacketPool, Packets};
use netvm_vm::graph::{BatchOutput, FlowCounts, LinkedCode, Verdict};
use netvm_vm::{AheadKeys, Dir24Walk, FaultKind, Outcome, PeState, RegisterFile};

use super::ahead::{Site, MAX_PACKETS};
use super::loader::LinkedProgram;
use super::{AppCtx, AppLayout, BatchMode, Batching, FanoutState, LinkedText, NodeMem, XbDesc};

/// Padding around per-worker memory written per packet, in bytes (a cache line).
const PAD_BYTES: usize = 64;
/// The same in counters.
const PAD_WORDS: usize = PAD_BYTES / 8;

/// An application compiled by the JIT: [`LinkedCode`] for the runtime. One
/// per worker, each with its own counters, info memory and fan-out state
/// over the same code ([`LinkedCode::fork`]).
pub struct LinkedApp {
    /// The compiled code, shared with the other workers.
    prog: Arc<LinkedProgram>,
    /// The raw counters ([`AppLayout`]), padded by [`PAD_WORDS`] on each side.
    counters: Vec<u64>,
    /// Info memory, padded by [`PAD_BYTES`] on each side.
    info: Vec<u8>,
    /// The node table, rebuilt from the states of each call ([`LinkedApp::bind`]).
    node_mem: Vec<NodeMem>,
    /// The coprocessors' register files, every NetPE's in turn, rebuilt
    /// with the node table (whose entries point into it).
    reg_files: Vec<RegisterFile>,
    /// The pending copies and exits of duplicated packets.
    fanout: Box<FanoutState>,
    /// The budget every handler invocation starts with ([`LinkedCode::set_limits`]).
    budget: u64,
    /// Computation batching.
    batching: Batching,
    /// The pre-lookup stage's output: every site's words.
    ahead_words: Vec<u32>,
    /// The sites walked in the current batch ([`LinkedApp::find_walks`]).
    walked: Vec<(usize, usize, *const Dir24Walk)>,
    /// The sub-batch size, when chosen at run time.
    tuner: SubBatchTuner,
}

// SAFETY: the raw pointers in `node_mem` and `walked` are scratch, rebuilt
// from the borrows passed to every call before compiled code or the stage
// sees them; nothing in a `LinkedApp` refers to another thread's data
// between calls.
unsafe impl Send for LinkedApp {}

impl std::fmt::Debug for LinkedApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkedApp").field("layout", &self.prog.layout).field("code_size", &self.prog.text.code_size).finish()
    }
}

impl LinkedApp {
    /// A fresh context (zeroed counters) over compiled code.
    pub(super) fn context(prog: Arc<LinkedProgram>) -> LinkedApp {
        LinkedApp {
            // Padded by a cache line on each side: each worker's context
            // writes these per packet, and must not share a line with
            // another's (the contexts are made one after another).
            counters: vec![0; prog.layout.counters + 2 * PAD_WORDS],
            info: vec![0; prog.layout.info_size.max(1) + 2 * PAD_BYTES],
            node_mem: Vec::new(),
            reg_files: Vec::new(),
            fanout: Box::default(),
            budget: prog.budget,
            batching: Batching::default(),
            ahead_words: prog.ahead.as_ref().map_or(Vec::new(), |(_, sites)| vec![0; super::ahead::output_words(sites)]),
            walked: Vec::new(),
            tuner: SubBatchTuner::default(),
            prog,
        }
    }

    /// Sets computation batching (the default: [`BatchMode::Prefetch`],
    /// sub-batch size chosen at run time).
    pub fn set_batching(&mut self, batching: Batching) {
        self.batching = batching;
    }

    /// The lookup sites whose keys the pre-lookup stage computes (empty:
    /// batching changes nothing for this application).
    pub fn lookup_sites(&self) -> &[Site] {
        self.prog.ahead.as_ref().map_or(&[], |(_, s)| s.as_slice())
    }

    /// The sub-batch size in use: the fixed one, or the tuner's current
    /// choice (0: the batch in one loop, without stages).
    pub fn sub_batch(&self) -> usize {
        self.batching.sub_batch.unwrap_or(self.tuner.current())
    }

    /// The sites whose instance takes keys ahead for their operation (one
    /// bit each): those whose `lookahead` registers the stage computes.
    fn enabled_sites(&self, states: &[PeState]) -> u64 {
        let Some((_, sites)) = &self.prog.ahead else { return 0 };
        let mut mask = 0;
        for (k, s) in sites.iter().enumerate() {
            let wants = states.get(s.node).and_then(|st| st.copros.get(usize::from(s.copro))).and_then(|c| c.lookahead(s.op));
            if wants.is_some_and(|m| m & !s.regs == 0) {
                mask |= 1 << k;
            }
        }
        mask
    }

    /// The DIR-24-8 walk site `s`'s instance offers for its operation, if
    /// the site has a [`Dir24Stage`](super::ahead::Dir24Stage) (from the
    /// register files `bind` took).
    fn dir24_walk(&self, s: &Site) -> Option<*const Dir24Walk> {
        s.dir24?;
        let node = self.node_mem.get(s.node)?;
        if node.regs.is_null() || s.copro as u64 >= node.ncopros {
            return None;
        }
        // SAFETY: `bind` pointed `regs` at `ncopros` register files in
        // `reg_files`, which `self` holds.
        let file = unsafe { &*node.regs.add(usize::from(s.copro)) };
        let offered = file.walk_ops & (1 << s.op) != 0 && !file.walk.is_null();
        // A site has a `Dir24Stage` only where its kind's walk is DIR-24-8.
        offered.then_some(file.walk.cast::<Dir24Walk>())
    }

    /// Finds the enabled sites (of `enabled`) whose instance offers the
    /// walk, in `self.walked` (site, where its list is, the walk), once per
    /// batch; returns them one bit each.
    fn find_walks(&mut self, enabled: u64) -> u64 {
        let mut walked = std::mem::take(&mut self.walked);
        walked.clear();
        if let Some((_, sites)) = &self.prog.ahead {
            for (k, s) in sites.iter().enumerate().filter(|(k, _)| enabled & (1 << k) != 0) {
                if let (Some(d24), Some(walk)) = (s.dir24, self.dir24_walk(s)) {
                    walked.push((k, d24.walk_at, walk));
                }
            }
        }
        self.walked = walked;
        self.walked.iter().fold(0, |m, &(k, _, _)| m | 1 << k)
    }

    /// Runs the sub-batch of `descs` (the whole batch) from `base` on, of
    /// `size` packets or to the end, stage by stage:
    /// - the walked sites (`walks`, as `find_walks` left them): the walks
    ///   were listed and their first-level entries prefetched a sub-batch
    ///   ago (the caller's prologue for the first), so the entries have
    ///   arrived while the previous sub-batch ran; each is read now and the
    ///   second level prefetched. Then the next sub-batch's walks are
    ///   listed and their first-level entries prefetched, to arrive while
    ///   this one runs: the paper's prefetch, software-pipelined one
    ///   sub-batch ahead, so that `netvm_run`'s work hides the misses;
    /// - the other enabled sites: the pre-lookup stage and the instances'
    ///   `ahead`, on this sub-batch (an instance may keep answers for the
    ///   operations that follow, so this stays next to `netvm_run`);
    /// - with prefetch, the headers of the sub-batch whose packets the next
    ///   stage reads first (the one after next where there are walks, else
    ///   the next), so that `netvm_run`'s work hides those misses too;
    /// - `netvm_run`.
    ///
    /// # Safety
    /// As [`LinkedApp::run_descs`]; `ctx` is this worker's context over
    /// `states`; `verdicts` has room for the sub-batch.
    #[allow(clippy::too_many_arguments)]
    unsafe fn run_staged(
        &mut self,
        states: &[PeState],
        ctx: &mut AppCtx,
        descs: &mut [XbDesc],
        base: usize,
        size: usize,
        enabled: u64,
        walks: u64,
        verdicts: *mut u32,
    ) {
        let prefetch = self.batching.mode == BatchMode::Prefetch;
        let total = descs.len();
        let end = (base + size).min(total);
        let n = end - base;
        debug_assert!(n <= MAX_PACKETS);
        let sub_batch = |k: usize| (base + k * size).min(total)..(base + (k + 1) * size).min(total);
        if walks != 0 {
            for &(_, at, walk) in &self.walked {
                let listed = (self.ahead_words[at] as usize).min(MAX_PACKETS);
                // SAFETY: the register file of a bound instance that offers
                // the walk points to its live tables (the walk's contract),
                // which nothing changes until the batch has run, but its
                // own operations, which keep the walk valid.
                unsafe { (*walk).prefetch_second(&self.ahead_words[at + 1..at + 1 + listed]) };
            }
            // SAFETY: the descriptors are live (the caller's contract).
            unsafe { self.list_walks(&descs[sub_batch(1)], walks) };
        }
        let rest = enabled & !walks;
        if rest != 0 {
            let (ahead, sites) = self.prog.ahead.as_ref().expect("staged only with a pre-lookup stage");
            // SAFETY: the descriptors are live (the caller's contract);
            // `ahead_words` has room for MAX_PACKETS packets of every site
            // (`output_words`).
            unsafe { ahead(descs[base..].as_ptr(), n as u32, self.ahead_words.as_mut_ptr(), rest, walks) };
            // SAFETY: the caller's contract: the packets are readable, and
            // nothing writes them until `netvm_run` below.
            let packets = unsafe { Packets::new(&descs[base..end]) };
            for s in sites.iter().enumerate().filter(|(k, _)| rest & (1 << k) != 0).map(|(_, s)| s) {
                let keys = AheadKeys { words: &self.ahead_words[s.words_at..s.words_at + n * s.stride()], regs: s.regs, packets };
                states[s.node].copros[usize::from(s.copro)].ahead(s.op, &keys, prefetch);
            }
        }
        if prefetch {
            prefetch_headers(&descs[sub_batch(if walks != 0 { 2 } else { 1 })]);
        }
        self.fanout.set_base(base);
        // SAFETY: as `run_descs`; `verdicts` has room for `n`.
        unsafe { (self.prog.run)(ctx, descs[base..].as_mut_ptr(), n as u32, verdicts) };
    }

    /// The walks of the sub-batch `descs` (sites `walks`): the pre-lookup
    /// stage lists their addresses, and their first-level entries are
    /// prefetched, to be read when the sub-batch's turn comes.
    ///
    /// # Safety
    /// The descriptors are live; `walked` is as `find_walks` left it.
    unsafe fn list_walks(&mut self, descs: &[XbDesc], walks: u64) {
        if walks == 0 || descs.is_empty() {
            return;
        }
        let (ahead, _) = self.prog.ahead.as_ref().expect("walks only with a pre-lookup stage");
        // SAFETY: the caller's contract; `ahead_words` has room for
        // MAX_PACKETS packets of every site (`output_words`).
        unsafe { ahead(descs.as_ptr(), descs.len() as u32, self.ahead_words.as_mut_ptr(), walks, walks) };
        for &(_, at, walk) in &self.walked {
            let listed = (self.ahead_words[at] as usize).min(MAX_PACKETS);
            // SAFETY: as in `run_staged`: the walk of a bound instance.
            unsafe { (*walk).prefetch_first(&self.ahead_words[at + 1..at + 1 + listed]) };
        }
    }

    /// Runs a batch: in one call of `netvm_run`, or in sub-batches stage by
    /// stage (computation batching) when the data path has lookups.
    ///
    /// # Safety
    /// As [`LinkedApp::run_descs`]; `states` are bound (`bind`).
    unsafe fn run_batch(&mut self, states: &mut [PeState], descs: &mut [XbDesc], verdicts: &mut [u32]) {
        let mut ctx = self.ctx();
        let enabled = if self.batching.mode == BatchMode::Off { 0 } else { self.enabled_sites(states) };
        // Sub-batches of `size` (0: the whole batch in one call, without stages).
        let size = if enabled == 0 { 0 } else { self.sub_batch().min(MAX_PACKETS) };
        // The sites whose instance offers their operation as a DIR-24-8 walk.
        let walks = if size != 0 && self.batching.mode == BatchMode::Prefetch {
            self.find_walks(enabled)
        } else {
            self.walked.clear();
            0
        };
        let timed = (enabled != 0 && self.batching.sub_batch.is_none()).then(Instant::now);
        if size == 0 {
            // SAFETY: the caller's contract; `verdicts` has room for every packet.
            unsafe { (self.prog.run)(&mut ctx, descs.as_mut_ptr(), descs.len() as u32, verdicts.as_mut_ptr()) };
        } else {
            let total = descs.len();
            if self.batching.mode == BatchMode::Prefetch {
                // The headers the first stages read: the first sub-batch's,
                // and where there are walks, whose next sub-batch's walks
                // are listed before the first runs, the second's.
                let ahead = if walks != 0 { 2 * size } else { size };
                prefetch_headers(&descs[..ahead.min(total)]);
            }
            // SAFETY: the caller's contract.
            unsafe { self.list_walks(&descs[..size.min(total)], walks) };
            let mut base = 0;
            while base < total {
                // SAFETY: the caller's contract; `verdicts[base..]` has room for the sub-batch.
                unsafe { self.run_staged(states, &mut ctx, descs, base, size, enabled, walks, verdicts[base..].as_mut_ptr()) };
                base += size;
            }
        }
        if let Some(t) = timed {
            self.tuner.record(descs.len(), t.elapsed().as_nanos() as u64);
        }
    }

    /// The generated code (`keep_text`) and its sizes.
    pub fn text(&self) -> &LinkedText {
        &self.prog.text
    }

    /// The counter and memory layout.
    pub fn layout(&self) -> &AppLayout {
        &self.prog.layout
    }

    /// The raw counters ([`AppLayout`]).
    pub fn raw_counters(&self) -> &[u64] {
        &self.counters[PAD_WORDS..self.counters.len() - PAD_WORDS]
    }

    /// Points the node table at `states`' memories.
    fn bind(&mut self, states: &mut [PeState]) {
        let layout = &self.prog.layout;
        assert_eq!(states.len(), layout.node_base.len(), "one state per NetPE");
        self.node_mem.clear();
        self.reg_files.clear();
        for st in states.iter_mut() {
            self.reg_files.extend(st.copros.iter_mut().map(|c| c.registers()));
        }
        let mut files = self.reg_files.as_ptr();
        for (st, size) in states.iter_mut().zip(&layout.data_sizes) {
            // Compiled code relies on data memory being exactly `.datasize` bytes.
            assert_eq!(st.data.len(), *size, "data memory of the size its module declares");
            let n = st.copros.len();
            self.node_mem.push(NodeMem {
                data: st.data.as_mut_ptr(),
                data_len: st.data.len() as u64,
                copros: st.copros.as_mut_ptr().cast(),
                ncopros: n as u64,
                regs: if n == 0 { std::ptr::null() } else { files },
            });
            // SAFETY: `reg_files` holds every state's files in turn, so this
            // stays within it (or one past its end).
            files = unsafe { files.add(n) };
        }
    }

    /// The application context for compiled code, over this worker's memories.
    fn ctx(&mut self) -> AppCtx {
        AppCtx {
            budget: self.budget,
            info: self.info[PAD_BYTES..].as_mut_ptr(),
            nodes: self.node_mem.as_ptr(),
            counters: self.counters[PAD_WORDS..].as_mut_ptr(),
            rt: (&mut *self.fanout as *mut FanoutState).cast(),
            fanned: 0,
            reserved: 0,
        }
    }

    /// Runs `descs` (prepared by the caller, whose packets `states` belong to
    /// no one else for the call) and writes one raw verdict per packet;
    /// duplicated packets are not reported. For benchmarks of the compiled
    /// batch function alone.
    ///
    /// # Safety
    /// Every descriptor must describe a live, writable buffer of `caplen`
    /// bytes not accessed elsewhere during the call.
    pub unsafe fn run_descs(&mut self, states: &mut [PeState], descs: &mut [XbDesc], verdicts: &mut [u32]) {
        assert!(verdicts.len() >= descs.len());
        self.bind(states);
        // SAFETY: the context points to live memories: info (`info_size`
        // bytes), the node table built by `bind` from exclusively borrowed
        // states, the counters, and the fan-out state; the caller
        // guarantees the descriptors; `verdicts` has room for every packet.
        // Compiled code checks every other access.
        unsafe { self.run_batch(states, descs, &mut verdicts[..descs.len()]) };
        self.fanout.clear();
    }
}

impl LinkedCode for LinkedApp {
    fn set_limits(&mut self, limits: &netvm_vm::Limits) {
        self.budget = limits.budget;
    }

    fn init(&mut self, states: &mut [PeState]) -> Result<(), (usize, Outcome)> {
        let Some(init) = self.prog.init else { return Ok(()) };
        self.bind(states);
        let mut ctx = self.ctx();
        // SAFETY: as in `run_descs`; `.init` touches data memory and coprocessors only.
        let r = unsafe { init(&mut ctx) };
        // Compiled code returns only the codes `FaultKind::init_failure` makes.
        FaultKind::decode_init(r).map_err(|e| e.map_or((0, Outcome::Drop), |(n, k)| (n, Outcome::Fault(k))))
    }

    fn run(&mut self, states: &mut [PeState], batch: &mut Batch, pool: &PacketPool, out: &mut BatchOutput) {
        let n = batch.len();
        out.clear();
        out.verdicts.resize(n, 0);
        if n == 0 {
            return;
        }
        self.bind(states);
        if self.prog.fanout {
            self.fanout.set_pool(pool);
            self.fanout.reserve(n, self.prog.layout.info_size);
            out.fanout.reserve(2 * n);
        }
        // SAFETY: as in `run_descs`; the batch's descriptors point into
        // memory it holds, which its exclusive borrow keeps from anyone else
        // for the call (the runtime gives programs that write packet memory
        // descriptors that never overlap); `out.verdicts` has room for `n`.
        // Compiled code writes verdicts for the packets in the real
        // encoding, which `Verdict::decode` reads.
        unsafe { self.run_batch(states, &mut batch.descs, &mut out.verdicts) };
        let fo = &mut self.fanout;
        if !fo.fanned().is_empty() {
            // Exits are in packet order: count each fanned packet's in one pass.
            let mut e = 0;
            let emitted = fo.emitted();
            for &i in fo.fanned() {
                while emitted.get(e).is_some_and(|x| x.0 < i) {
                    e += 1;
                }
                let start = e;
                while emitted.get(e).is_some_and(|x| x.0 == i) {
                    e += 1;
                }
                out.verdicts[i as usize] = Verdict::Fanout { outputs: (e - start) as u32 }.encode();
            }
            fo.take_exits(&mut out.fanout);
        }
        fo.clear();
    }

    fn flow(&self) -> FlowCounts {
        self.prog.layout.flow(&self.prog.graph, self.raw_counters())
    }

    fn fork(&self) -> Box<dyn LinkedCode> {
        let mut worker = LinkedApp::context(Arc::clone(&self.prog));
        worker.budget = self.budget;
        worker.batching = self.batching;
        Box::new(worker)
    }

    fn reserve(&mut self, packets: usize) {
        self.node_mem.reserve(self.prog.layout.node_base.len());
        if self.prog.fanout {
            self.fanout.reserve(packets, self.prog.layout.info_size);
        }
    }
}

/// Prefetches the first cache line of every packet of `descs`.
fn prefetch_headers(descs: &[XbDesc]) {
    for d in descs {
        netvm_vm::prefetch(d.data);
    }
}

/// Chooses the sub-batch size of computation batching by measurement, per
/// application and worker: it runs the candidate sizes in turn, a batch
/// each, for `SubBatchTuner::ROUNDS` rounds (interleaved, so that a
/// change in the traffic or the tables during the exploration, such as a
/// bridge learning its first hosts, weighs on every candidate alike),
/// keeps the one with the least time per packet over its batches, and
/// explores again after 64 batches, then after twice as many each time up
/// to `SubBatchTuner::EXPLOIT` batches, since the best
/// size follows what the tables and the traffic do to the caches (the
/// paper's §3: the best batch fills the cache without evicting what the
/// next stage needs). One candidate, 0, is no stages at all: where the
/// tables fit the cache, the pre-lookup stage costs more than the misses
/// it hides, and the batch then runs in one loop.
///
/// The first exploration, and every `SubBatchTuner::FULL_EVERY`th, tries
/// every candidate; the others only the chosen size and its neighbouring
/// sizes (no stages only where it is the choice), so that exploring costs
/// little where some candidates are far slower than the best (no stages on
/// a table far larger than the cache: 2.7 times the best size's time on a
/// 16M-entry bridge) while the choice still follows a drift step by step,
/// and a full one catches a change of regime.
#[derive(Clone, Debug)]
pub struct SubBatchTuner {
    /// The candidate being tried (exploring), or the chosen one.
    at: usize,
    /// Batches left in the current phase.
    left: u32,
    /// Whether it is trying the candidates.
    exploring: bool,
    /// The candidates of this exploration ([`SubBatchTuner::SIZES`] indices, one bit each).
    trying: u32,
    /// Explorations made.
    explorations: u32,
    /// Per candidate, the time (ns) and packets measured this exploration.
    spent: [(u64, u64); SubBatchTuner::SIZES.len()],
    /// Batches of the next exploitation phase: short at first (the first
    /// batches of a run, cold caches and tables still filling, may say
    /// little about the rest), doubling up to [`SubBatchTuner::EXPLOIT`].
    exploit: u32,
}

impl Default for SubBatchTuner {
    fn default() -> Self {
        let all = (1 << Self::SIZES.len()) - 1;
        SubBatchTuner {
            at: 0,
            left: Self::WARMUP + Self::exploration(all),
            exploring: true,
            trying: all,
            explorations: 0,
            spent: [(0, 0); Self::SIZES.len()],
            exploit: 64,
        }
    }
}

impl SubBatchTuner {
    /// The candidate sizes (0: no stages).
    pub const SIZES: [usize; 7] = [0, 8, 16, 32, 64, 128, 256];
    /// Rounds of the exploration: batches measured per candidate.
    const ROUNDS: u32 = 8;
    /// Batches run, unmeasured, before the first exploration (caches, page faults).
    const WARMUP: u32 = 4;
    /// The most batches run at the chosen size before exploring again.
    const EXPLOIT: u32 = 4096;
    /// Every how many explorations all candidates are tried again.
    const FULL_EVERY: u32 = 4;

    const fn exploration(trying: u32) -> u32 {
        Self::ROUNDS * trying.count_ones()
    }

    /// The `k`th candidate of `trying` (round robin).
    fn nth(trying: u32, k: u32) -> usize {
        let k = k % trying.count_ones().max(1);
        (0..Self::SIZES.len()).filter(|i| trying & (1 << i) != 0).nth(k as usize).unwrap_or(0)
    }

    /// The size to run the next batch with.
    pub fn current(&self) -> usize {
        Self::SIZES[self.at]
    }

    /// Notes that a batch of `packets` took `ns` at the current size.
    pub fn record(&mut self, packets: usize, ns: u64) {
        if packets == 0 {
            return;
        }
        self.left = self.left.saturating_sub(1);
        let length = Self::exploration(self.trying);
        if self.exploring {
            if self.left < length {
                let s = &mut self.spent[self.at];
                *s = (s.0 + ns, s.1 + packets as u64);
            }
            if self.left == 0 {
                // The least time per packet: a / b < c / d as a * d < c * b.
                let best = (0..Self::SIZES.len())
                    .filter(|&i| self.spent[i].1 > 0)
                    .min_by(|&i, &j| {
                        let ((a, b), (c, d)) = (self.spent[i], self.spent[j]);
                        (u128::from(a) * u128::from(d)).cmp(&(u128::from(c) * u128::from(b)))
                    })
                    .unwrap_or(0);
                let exploit = self.exploit;
                *self = SubBatchTuner {
                    at: best,
                    left: exploit,
                    exploring: false,
                    exploit: (exploit * 2).min(Self::EXPLOIT),
                    explorations: self.explorations + 1,
                    ..self.clone()
                };
            } else if self.left <= length {
                // Round robin over the candidates.
                self.at = Self::nth(self.trying, length - self.left);
            }
        } else if self.left == 0 {
            // Explore again: everything every FULL_EVERY times, else the
            // chosen size and its neighbours.
            let n = Self::SIZES.len();
            let trying = if self.explorations.is_multiple_of(Self::FULL_EVERY) {
                (1 << n) - 1
            } else {
                // No stages is a change of regime, not a neighbour of 8
                // packets: a size's neighbours are sizes (and no stages's, 8).
                let lo = if self.at == 0 { 0 } else { self.at.saturating_sub(1).max(1) };
                let hi = (self.at + 1).min(n - 1);
                (lo..=hi).fold(0, |m, i| m | 1 << i)
            };
            *self = SubBatchTuner {
                at: Self::nth(trying, 0),
                left: Self::exploration(trying),
                exploring: true,
                trying,
                spent: [(0, 0); Self::SIZES.len()],
                ..self.clone()
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{SubBatchTuner, MAX_PACKETS};

    /// `netvm_ahead` writes, per enabled site and packet, 1 and the key
    /// registers (a packet load past the capture: 0), and leaves the
    /// words of the sites not enabled alone.
    #[test]
    fn the_pre_lookup_stage_computes_the_keys_of_the_enabled_sites_only() {
        use netvm_vm::graph::{AppGraph, Dest};
        let src = ".copro t table\n.copro c counters\n.ports 1\nsegment .push\n    pop\n    push 12\n    upload.16\n    copro.in t, 0\n    push 26\n    copro.in t, 8\n    copro.invoke t, 3\n    push 5\n    copro.in c, 0\n    copro.invoke c, 0\n    ret 0\nends\n";
        let v = netvm_verify::verify(&netil::assemble(src).expect("assembles").module).expect("verifies");
        let pe = Dest::Pe { node: 0, in_port: 0 };
        let graph = AppGraph {
            out: vec![vec![vec![Dest::Sink(0)]]],
            sources: vec![vec![pe]],
            sink_ports: 1,
            order: vec![0],
            walk_shapes: Vec::new(),
        };
        let app = super::LinkedApp::compile(
            &graph,
            &[v],
            &netvm_vm::Limits::default(),
            super::super::LinkMode::Direct,
            crate::JitOptions::default(),
        )
        .expect("compiles");
        let (ahead, sites) = app.prog.ahead.as_ref().expect("a stage");
        assert_eq!(sites.iter().map(|s| (s.copro, s.op, s.regs)).collect::<Vec<_>>(), vec![(0, 3, 1 | 1 << 8), (1, 0, 1)]);
        let mut frame = vec![0u8; 64];
        frame[12..14].copy_from_slice(&[0x86, 0xdd]);
        let mut pkts: Vec<netvm_vm::Packet> =
            [frame.clone(), frame[..13].to_vec(), frame[..14].to_vec()].into_iter().map(netvm_vm::Packet::from_bytes).collect();
        let descs: Vec<netvm_vm::XbDesc> = pkts.iter_mut().enumerate().map(|(i, p)| netvm_vm::XbDesc::of(p, i as u64)).collect();
        let words_end = sites[1].words_at + sites[1].stride() * MAX_PACKETS;
        for enabled in [0b01u64, 0b10, 0b11, 0] {
            let mut words = vec![7u32; words_end];
            // SAFETY: the descriptors point at the packets' bytes; `words`
            // has room for MAX_PACKETS packets of every site.
            unsafe { ahead(descs.as_ptr(), descs.len() as u32, words.as_mut_ptr(), enabled, enabled) };
            let rec = |s: usize, i: usize| {
                let at = sites[s].words_at + i * sites[s].stride();
                words[at..at + sites[s].stride()].to_vec()
            };
            if enabled & 1 != 0 {
                assert_eq!((rec(0, 0), rec(0, 1)[0], rec(0, 2)), (vec![1, 0x86dd, 26], 0, vec![1, 0x86dd, 26]));
            } else {
                assert_eq!(rec(0, 0), vec![7, 7, 7]);
            }
            let want = if enabled & 2 != 0 { vec![1, 5] } else { vec![7, 7] };
            assert_eq!((rec(1, 0), rec(1, 1), rec(1, 2)), (want.clone(), want.clone(), want), "enabled {enabled:#b}");
            // Nothing past the batch's packets.
            assert_eq!(rec(0, 3), vec![7, 7, 7]);
        }
    }

    #[test]
    fn the_pre_lookup_stage_lists_the_addresses_of_the_dir24_walks() {
        use netvm_vm::graph::{AppGraph, Dest};
        // lookup_pkt of the address at offset 30, and lookup of the address at 26 in in0.
        let src = ".copro r lpm\n.ports 1\nsegment .push\n    pop\n    push 30\n    copro.in r, 8\n    copro.invoke r, 3\n    push 26\n    upload.32\n    copro.in r, 0\n    copro.invoke r, 0\n    ret 0\nends\n";
        let v = netvm_verify::verify(&netil::assemble(src).expect("assembles").module).expect("verifies");
        let graph = AppGraph {
            out: vec![vec![vec![Dest::Sink(0)]]],
            sources: vec![vec![Dest::Pe { node: 0, in_port: 0 }]],
            sink_ports: 1,
            order: vec![0],
            walk_shapes: Vec::new(),
        };
        let app = super::LinkedApp::compile(
            &graph,
            std::slice::from_ref(&v),
            &netvm_vm::Limits::default(),
            super::super::LinkMode::Direct,
            crate::JitOptions::default(),
        )
        .expect("compiles");
        // The runtime walks where the instance offers the walk: IPv4, not IPv6.
        let mut app = app;
        for (family, walks) in [("ipv4", 0b11), ("ipv6", 0)] {
            let cfg = netvm_vm::CoproConfig::from([("family".to_string(), family.to_string())]);
            let mut st = netvm_vm::PeState::new(&v.module);
            st.copros.push(netvm_copro::registry().create("lpm", &cfg).expect("an lpm"));
            let mut states = vec![st];
            app.bind(&mut states);
            assert_eq!(app.find_walks(0b11), walks, "{family}");
            assert_eq!(app.find_walks(0b10), walks & 0b10, "{family}");
        }
        let (ahead, sites) = app.prog.ahead.as_ref().expect("a stage");
        let d24: Vec<_> = sites.iter().map(|s| s.dir24.map(|d| (d.expr, d.in_packet))).collect();
        assert_eq!(d24, vec![Some((0, true)), Some((0, false))]);
        let frame = |src: [u8; 4], dst: [u8; 4]| {
            let mut f = vec![0u8; 34];
            f[26..30].copy_from_slice(&src);
            f[30..34].copy_from_slice(&dst);
            f
        };
        let (a, b) = (frame([10, 0, 0, 1], [192, 0, 2, 7]), frame([10, 0, 0, 2], [198, 51, 100, 9]));
        let descs_src = [[10, 0, 0, 1], [10, 0, 0, 2], [0; 4], [10, 0, 0, 2]];
        // The second packet ends inside the destination; the third before the source.
        let mut pkts: Vec<netvm_vm::Packet> =
            [a, b[..32].to_vec(), b[..27].to_vec(), b].into_iter().map(netvm_vm::Packet::from_bytes).collect();
        let descs: Vec<netvm_vm::XbDesc> = pkts.iter_mut().enumerate().map(|(i, p)| netvm_vm::XbDesc::of(p, i as u64)).collect();
        let listed = |words: &[u32], s: usize| {
            let at = sites[s].dir24.expect("a walk").walk_at;
            words[at + 1..at + 1 + words[at] as usize].to_vec()
        };
        for (enabled, walk) in [(0b11u64, 0b11u64), (0b11, 0b01), (0b11, 0), (0b10, 0b11)] {
            let mut words = vec![7u32; super::super::ahead::output_words(sites)];
            // SAFETY: the descriptors point at the packets' bytes; `words`
            // has room for every site's records and walks.
            unsafe { ahead(descs.as_ptr(), descs.len() as u32, words.as_mut_ptr(), enabled, walk) };
            let ip = |a: [u8; 4]| u32::from_be_bytes(a);
            if enabled & walk & 1 != 0 {
                assert_eq!(listed(&words, 0), vec![ip([192, 0, 2, 7]), ip([198, 51, 100, 9])], "walk {walk:#b}");
            } else if enabled & 1 != 0 {
                assert_eq!(listed(&words, 0), Vec::<u32>::new(), "walk {walk:#b}");
            }
            if enabled & walk & 2 != 0 {
                let src = [ip([10, 0, 0, 1]), ip([10, 0, 0, 2]), ip([10, 0, 0, 2])];
                assert_eq!(listed(&words, 1), src, "walk {walk:#b}");
            } else {
                assert_eq!(listed(&words, 1), Vec::<u32>::new(), "walk {walk:#b}");
            }
            // An enabled site's records (valid flag, key) are written
            // unless it is walked; a walked site's are left as they were.
            let rec = |s: usize, p: usize| {
                let at = sites[s].words_at + p * sites[s].stride();
                words[at..at + 2].to_vec()
            };
            if enabled & 1 != 0 && walk & 1 == 0 {
                assert_eq!((0..4).map(|p| rec(0, p)).collect::<Vec<_>>(), vec![vec![1, 30]; 4], "walk {walk:#b}");
            } else {
                assert_eq!(rec(0, 0), vec![7, 7], "walk {walk:#b}");
            }
            let src_rec = |p: usize| if p == 2 { vec![0, 7] } else { vec![1, u32::from_be_bytes(descs_src[p])] };
            if enabled & 2 != 0 && walk & 2 == 0 {
                assert_eq!((0..4).map(|p| rec(1, p)).collect::<Vec<_>>(), (0..4).map(src_rec).collect::<Vec<_>>(), "walk {walk:#b}");
            } else if enabled & 2 != 0 {
                assert_eq!(rec(1, 0), vec![7, 7], "walk {walk:#b}");
            }
        }
    }

    /// Runs `batches` batches of 256 packets costing `ns_per_packet(size, batch)`.
    fn run(t: &mut SubBatchTuner, batches: usize, ns_per_packet: impl Fn(usize, usize) -> u64) {
        for b in 0..batches {
            let size = t.current();
            t.record(256, 256 * ns_per_packet(size, b));
        }
    }

    #[test]
    fn the_tuner_keeps_the_fastest_size_and_explores_again() {
        let mut t = SubBatchTuner::default();
        // Fastest at 32; no stages is slow.
        run(&mut t, 200, |s, _| if s == 32 { 50 } else { 80 });
        assert_eq!(t.current(), 32);
        // The traffic changes: no stages is now the fastest; found at the next exploration.
        run(&mut t, 5000, |s, _| if s == 0 { 40 } else { 90 });
        assert_eq!(t.current(), 0);
    }

    #[test]
    fn explorations_after_the_first_try_the_neighbours_and_now_and_then_all() {
        let mut t = SubBatchTuner::default();
        // Fastest at 64; no stages three times slower.
        run(&mut t, 60, |s, _| match s {
            64 => 50,
            0 => 150,
            _ => 60,
        });
        assert_eq!(t.current(), 64);
        // The next explorations run no stages only when they try everything.
        // (Chosen 8, the neighbours are 16 alone: no stages is no neighbour.)
        let mut tried = std::collections::BTreeMap::<usize, usize>::new();
        for _ in 0..6000 {
            *tried.entry(t.current()).or_default() += 1;
            let size = t.current();
            t.record(256, 256 * if size == 64 { 50 } else { 60 });
        }
        assert_eq!(t.current(), 64);
        assert!(tried[&32] > 0 && tried[&128] > 0, "the neighbours are tried: {tried:?}");
        assert!(tried.get(&0).copied().unwrap_or(0) <= 8, "no stages at most in one full exploration: {tried:?}");
        // A slow drift moves the choice step by step: 128, then 256 become the fastest.
        run(&mut t, 6000, |s, _| if s == 128 { 40 } else { 60 });
        assert_eq!(t.current(), 128);
        run(&mut t, 6000, |s, _| if s == 256 { 30 } else { 60 });
        assert_eq!(t.current(), 256);
    }

    #[test]
    fn a_drift_during_the_exploration_weighs_on_every_candidate_alike() {
        // Every batch gets cheaper as a table fills (a learning bridge):
        // tried in turn, the sizes see the same drift, so the one that is
        // faster at every moment (no stages, 10 % less) wins.
        let mut t = SubBatchTuner::default();
        run(&mut t, 100, |s, b| {
            let base = 200u64.saturating_sub(2 * b as u64).max(100);
            if s == 0 {
                base * 9 / 10
            } else {
                base
            }
        });
        assert_eq!(t.current(), 0);
    }
}
