//! The compiled code at work: [`LinkedApp`], one worker's context (its
//! counters, info memory, node table and fan-out state) over a shared
//! [`LinkedProgram`], and its [`LinkedCode`] implementation, through which
//! the runtime runs batches, `.init` handlers and reads the counters;
//! [`decode_verdict`] reads what the code returns per packet.

use std::sync::Arc;

use netvm_vm::buffer::{Batch, PacketPool};
use netvm_vm::graph::{BatchOutput, FlowCounts, LinkedCode, Verdict};
use netvm_vm::{FaultKind, Outcome, PeState, RegisterFile};

use super::loader::LinkedProgram;
use super::{AppCtx, AppLayout, FanoutState, LinkedText, NodeMem, XbDesc};

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
}

// SAFETY: the raw pointers in `node_mem` are scratch, rebuilt from the
// borrows passed to every call before compiled code sees them; nothing in
// a `LinkedApp` refers to another thread's data between calls.
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
            prog,
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
        let mut ctx = self.ctx();
        // SAFETY: `ctx` points to live memories: info (`info_size` bytes),
        // the node table built by `bind` from exclusively borrowed states,
        // the counters, and the fan-out state; the caller guarantees the
        // descriptors; `verdicts` has room for every packet. Compiled code
        // checks every other access.
        unsafe { (self.prog.run)(&mut ctx, descs.as_mut_ptr(), descs.len() as u32, verdicts.as_mut_ptr()) };
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
        let mut ctx = self.ctx();
        // SAFETY: `ctx` as in `run_descs`; the batch's descriptors point into
        // memory it holds, which its exclusive borrow keeps from anyone else
        // for the call (the runtime gives programs that write packet memory
        // descriptors that never overlap); `out.verdicts` has room for `n`.
        // Compiled code writes verdicts for the packets in the real
        // encoding, which `Verdict::decode` reads.
        unsafe { (self.prog.run)(&mut ctx, batch.descs.as_mut_ptr(), n as u32, out.verdicts.as_mut_ptr()) };
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
        Box::new(worker)
    }

    fn reserve(&mut self, packets: usize) {
        self.node_mem.reserve(self.prog.layout.node_base.len());
        if self.prog.fanout {
            self.fanout.reserve(packets, self.prog.layout.info_size);
        }
    }
}
