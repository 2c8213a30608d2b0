//! The packet engine: [`Driver`] runs an [`Application`] over its ports.
//!
//! ```text
//! sources ─► merge by time ─► batches ─► worker(s): Application::run_batch ─► reorder ─► sinks
//!    ▲          (seq numbers)     │                                            │
//!    └──── blocks / buffers ◄─────┴──────────── released when written ◄───────┘
//! ```
//!
//! Sources append descriptors of packets that lie in blocks of the driver's
//! [`BlockPool`]; batches move to the application without a copy; sinks
//! write from where the packets lie; a batch's memory returns to the pool
//! when its packets have left. Memory is bounded by the configuration
//! (blocks, packet buffers, batches in flight), never by the input, and
//! nothing is allocated per packet once the run is warm.
//!
//! With one worker, everything runs on the calling thread. With N workers,
//! the calling thread reads and writes (the I/O stage) and N threads run
//! the application, each on its own instance ([`Application::fork`]) over
//! the same code: whole batches to whichever worker is free
//! ([`Distribution::RoundRobin`]), or each batch split by a symmetric flow
//! hash ([`Distribution::Flow`]). Bounded queues give back-pressure (a
//! source is not read while the workers are busy; nothing is dropped), and
//! the I/O stage restores arrival order by sequence number before any sink,
//! so packets leave in the order one worker would emit them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use netvm_vm::buffer::{Batch, BlockPool, PacketPool, PacketPoolConfig};
use netvm_vm::graph::{BatchOutput, VERDICT_FANOUT};
use netvm_vm::port::{Fill, OutPacket, PortError, Sink, Source};
use netvm_vm::{CoproEvent, Timestamp, XbDesc};

use crate::distribute::{flow_hash, Distribution};
use crate::live::{lock, Control, Live, Rebuild, RunShape};
use crate::{Application, RuntimeError};
use netvm_vm::queue::Queue;

/// The most packets per batch a driver takes (larger are cut to it).
pub const MAX_BATCH: usize = 8192;

/// How a [`Driver`] runs.
#[derive(Clone, Debug)]
pub struct DriverConfig {
    /// Threads running the application (at least 1; 1 runs everything on
    /// the calling thread).
    pub workers: usize,
    /// Packets per batch.
    pub batch: usize,
    /// How packets are spread over workers; `None`: the application's
    /// choice ([`Application::distribution`]).
    pub distribution: Option<Distribution>,
    /// Times the inputs are run (for measurement): outputs and events are
    /// produced by the first repetition only. Later repetitions replay the
    /// packets from memory when they fit in [`DriverConfig::replay_memory`]
    /// and the application never writes packet memory; otherwise the
    /// sources are read again.
    pub repeat: u64,
    /// Bytes of input kept in memory for replaying repetitions.
    pub replay_memory: usize,
    /// Bytes per block of packet memory (at least 1 MiB: a block must hold
    /// the largest record of any source).
    pub block_size: usize,
    /// Blocks of packet memory beyond those kept for replay.
    pub blocks: usize,
    /// Packet buffers (fan-out copies, private copies).
    pub packet_pool: PacketPoolConfig,
    /// Batches queued per worker.
    pub queue_depth: usize,
    /// Flush every sink after each batch (`-U`), so packets reach a pipe as
    /// they are processed.
    pub packet_buffered: bool,
    /// Stop once this many packets have left on this output port (`-c N`).
    pub stop_after: Option<(u16, u64)>,
}

impl DriverConfig {
    /// Packets per job: a batch for one worker; four batches for several,
    /// long enough (tens of microseconds and up) that waking a worker and
    /// handing back its result cost little beside it.
    pub fn job(&self) -> usize {
        if self.workers <= 1 {
            self.batch
        } else {
            4 * self.batch
        }
    }
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            workers: 1,
            batch: 256,
            distribution: None,
            repeat: 1,
            replay_memory: 64 << 20,
            block_size: 1 << 20,
            blocks: 8,
            packet_pool: PacketPoolConfig::default(),
            queue_depth: 4,
            packet_buffered: false,
            stop_after: None,
        }
    }
}

/// What one worker did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Packets it processed.
    pub packets: u64,
    /// Batches it processed.
    pub batches: u64,
    /// Time spent running the application.
    pub busy: Duration,
    /// Time spent waiting for a batch.
    pub wait: Duration,
}

impl WorkerReport {
    /// Counts `r` (a phase of the same worker) in this report.
    fn add(&mut self, r: &WorkerReport) {
        self.packets += r.packets;
        self.batches += r.batches;
        self.busy += r.busy;
        self.wait += r.wait;
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// Packets processed (every repetition).
    pub packets: u64,
    /// Packets read from the sources in the first repetition.
    pub input_packets: u64,
    /// Bytes (captured) read in the first repetition.
    pub input_bytes: u64,
    /// Time the workers spent running the application, in all.
    pub busy: Duration,
    /// Wall time of the run.
    pub wall: Duration,
    /// Per worker.
    pub workers: Vec<WorkerReport>,
    /// Time the I/O stage waited for workers (several workers only).
    pub io_wait: Duration,
    /// How packets were spread over the workers.
    pub distribution: Option<Distribution>,
    /// Sources that failed, with the error; each delivered the packets
    /// before its error.
    pub input_errors: Vec<String>,
    /// A sink failed: the run stopped there.
    pub output_error: Option<String>,
    /// A sink's reader went away (`| head`): the run stopped quietly.
    pub output_closed: bool,
    /// The run stopped at [`DriverConfig::stop_after`].
    pub stopped: bool,
    /// Packets that left, by application output port (first repetition).
    pub exits: Vec<u64>,
    /// Blocks of packet memory in use at most at once.
    pub blocks_high_water: usize,
    /// Fan-out copies that found the packet pool exhausted.
    pub pool_overflow: u64,
    /// Repetitions replayed from memory (not read again).
    pub replayed: bool,
}

impl RunReport {
    /// Processing time per packet in nanoseconds (worker time over packets).
    pub fn ns_per_packet(&self) -> f64 {
        if self.packets == 0 {
            0.0
        } else {
            self.busy.as_nanos() as f64 / self.packets as f64
        }
    }
}

/// The consumer of coprocessor events ([`Driver::on_events`]).
pub type EventSink = Box<dyn FnMut(&[CoproEvent]) -> Result<(), String>>;

/// The packet engine (see the module docs): an application, its ports, and
/// the memory packets lie in.
pub struct Driver {
    /// The application, as the driver and the control plane share it.
    live: Arc<Live>,
    cfg: DriverConfig,
    blocks: BlockPool,
    /// One packet pool per worker (DPDK's per-lcore mempools): a worker's
    /// copies come from its own pool, so that no two workers write the same
    /// buffers' memory.
    pools: Vec<PacketPool>,
    ports: Ports,
}

/// The driver's ports: what the I/O stage reads and writes.
struct Ports {
    sources: Vec<Box<dyn Source>>,
    /// Sinks by application output port.
    sinks: Vec<Vec<Box<dyn Sink>>>,
    events: Option<EventSink>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").field("app", &*self.app()).field("cfg", &self.cfg).field("sources", &self.ports.sources.len()).finish()
    }
}

impl Driver {
    /// A driver for `app` (built, with its tables loaded). Its packet
    /// memory is reserved now; sources are created over
    /// [`Driver::block_pool`].
    pub fn new(app: Application, cfg: DriverConfig) -> Driver {
        let cfg = DriverConfig {
            workers: cfg.workers.max(1),
            batch: cfg.batch.clamp(1, MAX_BATCH),
            repeat: cfg.repeat.max(1),
            queue_depth: cfg.queue_depth.max(1),
            block_size: cfg.block_size.max(1 << 20),
            ..cfg
        };
        let replay_blocks = if cfg.repeat > 1 { cfg.replay_memory / cfg.block_size } else { 0 };
        let working = cfg.blocks.max(2) + 2 * cfg.workers * cfg.queue_depth;
        let blocks = BlockPool::new(cfg.block_size, working + replay_blocks);
        let mut pool_cfg = cfg.packet_pool;
        if cfg.repeat > 1 && app.writes_packets() {
            // Every packet a worker has in flight is a private copy (see
            // `RunState::private`): at most its queue, the one it runs, and
            // those waiting to be reordered.
            let n = cfg.workers;
            let in_flight = if n == 1 { 2 * cfg.batch } else { (3 * cfg.queue_depth + 2) * n * cfg.job() };
            pool_cfg.buffers = pool_cfg.buffers.max(in_flight + 1024);
        }
        // Fan-out copies a worker may hold at once: every copy of the packets
        // of the jobs it has in flight (up to a bound: beyond it, copies
        // come from the heap and are counted).
        let copies = app.graph().max_exits(64).saturating_sub(1) as usize;
        if copies > 0 {
            let job = cfg.job();
            pool_cfg.buffers = pool_cfg.buffers.max((copies * job * (cfg.queue_depth + 2)).min(1 << 16));
        }
        let pools = (0..cfg.workers).map(|_| PacketPool::new(pool_cfg)).collect();
        let live = Arc::new(Live::new(app));
        Driver { live, cfg, blocks, pools, ports: Ports { sources: Vec::new(), sinks: Vec::new(), events: None } }
    }

    /// The memory sources fill.
    pub fn block_pool(&self) -> &BlockPool {
        &self.blocks
    }

    /// The configuration.
    pub fn config(&self) -> &DriverConfig {
        &self.cfg
    }

    /// Adds an input. Several inputs are merged by packet time (ties: the
    /// lower input port first).
    pub fn add_source(&mut self, source: Box<dyn Source>) {
        self.ports.sources.push(source);
    }

    /// Sends the packets that leave on application output port `port` to `sink`.
    pub fn add_sink(&mut self, port: u16, sink: Box<dyn Sink>) {
        let p = usize::from(port);
        if self.ports.sinks.len() <= p {
            self.ports.sinks.resize_with(p + 1, Vec::new);
        }
        self.ports.sinks[p].push(sink);
    }

    /// Collects the events coprocessors record (an IDS's alerts): after
    /// every batch, in packet order whichever worker ran the packet.
    pub fn on_events(&mut self, f: EventSink) {
        self.ports.events = Some(f);
    }

    /// The application (after a run: with every worker's counters and
    /// per-worker coprocessor state folded in; the newest version the
    /// control plane installed).
    pub fn app(&self) -> MutexGuard<'_, Application> {
        lock(&self.live.base)
    }

    /// The application, to change between runs (during a run, use [`Driver::control`]).
    pub fn app_mut(&mut self) -> MutexGuard<'_, Application> {
        lock(&self.live.base)
    }

    /// Ends the driver, returning the application.
    pub fn into_app(self) -> Application {
        match Arc::try_unwrap(self.live) {
            Ok(live) => live.base.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner),
            // A control call holds the application for a moment: wait for it.
            Err(live) => loop {
                std::thread::yield_now();
                if Arc::strong_count(&live) == 1 {
                    break Arc::try_unwrap(live)
                        .ok()
                        .expect("the last reference")
                        .base
                        .into_inner()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            },
        }
    }

    /// A handle for the control plane (any thread, during and between
    /// runs): counters, tables, and, once [`Driver::allow_changes`] gave it
    /// what to build them from, new versions of the data path.
    pub fn control(&self) -> Control {
        Control::new(&self.live)
    }

    /// Lets the control plane build and install new versions of the
    /// application ([`Control::apply`]) from `rebuild`: the manifest the
    /// application was built from, the engine, the coprocessor registry.
    pub fn allow_changes(&self, rebuild: Rebuild) {
        self.live.allow_changes(rebuild);
    }

    /// How packets would be spread over workers.
    pub fn distribution(&self) -> Distribution {
        self.cfg.distribution.unwrap_or_else(|| self.app().distribution())
    }

    /// Runs every source to its end (or until a sink stops the run), then
    /// finishes the sinks. Input errors end their source and are reported;
    /// the run goes on with the others.
    pub fn run(&mut self) -> Result<RunReport, RuntimeError> {
        if self.ports.sources.is_empty() {
            return Err(RuntimeError::Config("no input".into()));
        }
        let start = Instant::now();
        let sink_ports = self.app().graph().sink_ports;
        let mut st = RunState::new(&self.cfg, self.ports.sinks.len().max(sink_ports));
        st.distribution = (self.cfg.workers > 1).then(|| self.distribution());
        // An application that writes packet memory runs every repetition
        // on private copies (from the packet pool), so that the kept bytes
        // stay as they were read.
        st.private = self.cfg.repeat > 1 && self.app().writes_packets();
        *lock(&self.live.run) =
            Some(RunShape { workers: self.cfg.workers, distribution: st.distribution, shared_packets: self.cfg.repeat > 1 && !st.private });
        let instances = if self.cfg.workers > 1 { fork_apart(&mut self.app(), self.cfg.workers) } else { Ok(Vec::new()) };
        let instances: Vec<Arc<Mutex<Application>>> = match instances {
            Ok(i) => i.into_iter().map(|a| Arc::new(Mutex::new(a))).collect(),
            Err(e) => {
                *lock(&self.live.run) = None;
                return Err(e);
            }
        };
        *lock(&self.live.workers) = instances.clone();
        let mut instances = instances;
        let mut failed = None;
        // The first repetition streams from the sources to the sinks, and
        // keeps its batches for replay where they fit.
        st.retain = self.cfg.repeat > 1;
        st.ended = vec![false; self.ports.sources.len()];
        st.peeked = vec![None; self.ports.sources.len()];
        self.run_phase(&mut st, &mut instances);
        st.retain = false;
        if !st.retained_complete {
            st.retained.clear();
        }
        st.trace = st.retained.iter().flat_map(|b| b.descs.iter().copied()).collect();
        if st.trace.is_empty() {
            st.retained.clear();
        } else {
            // Extended cyclically by a batch (see `next_batch`).
            let (total, chunk) = (st.trace.len(), self.cfg.job() * self.cfg.workers);
            for k in 0..chunk {
                st.trace.push(st.trace[k % total]);
            }
        }
        // The other repetitions produce no output: from memory in one pass
        // (batches run across the repetitions' boundaries), or from the
        // sources again, one pass each.
        let more = self.cfg.repeat - 1;
        if more > 0 && !st.halted() {
            st.rep = 1;
            if !st.trace.is_empty() {
                st.replaying = true;
                st.trace_len = st.retained.iter().map(Batch::len).sum::<usize>() as u64;
                st.replay_end = st.trace_len * more;
                self.run_phase(&mut st, &mut instances);
            } else {
                'rep: for _ in 0..more {
                    for s in &mut self.ports.sources {
                        match s.rewind() {
                            Ok(true) => {}
                            Ok(false) => {
                                failed = Some(RuntimeError::Config(format!(
                                    "--repeat: input {} cannot be read again, and its packets do not fit in memory",
                                    s.name()
                                )));
                                break 'rep;
                            }
                            Err(e) => st.input_errors.push(e.to_string()),
                        }
                    }
                    st.ended = vec![false; self.ports.sources.len()];
                    st.peeked = vec![None; self.ports.sources.len()];
                    self.run_phase(&mut st, &mut instances);
                }
            }
        }
        self.end_run(instances);
        if let Some(e) = failed {
            return Err(e);
        }
        for sinks in &mut self.ports.sinks {
            for s in sinks {
                if let Err(e) = s.finish() {
                    st.sink_error(e);
                }
            }
        }
        st.retained.clear();
        let mut report = st.report;
        report.wall = start.elapsed();
        report.busy = report.workers.iter().map(|w| w.busy).sum();
        report.packets = report.workers.iter().map(|w| w.packets).sum();
        report.distribution = st.distribution;
        report.input_errors = st.input_errors;
        report.output_error = st.output_error;
        report.output_closed = st.output_closed;
        report.stopped = st.stopped;
        report.exits = st.exits;
        report.blocks_high_water = self.blocks.high_water();
        report.pool_overflow = self.pools.iter().map(PacketPool::overflow).sum();
        report.replayed = st.replaying;
        Ok(report)
    }

    /// The end of a run: every instance takes the newest version, the
    /// workers' fold into the driver's (so that statistics and dumps cover
    /// them all), and the control plane sees the driver's instance alone.
    fn end_run(&mut self, instances: Vec<Arc<Mutex<Application>>>) {
        let live = &self.live;
        // Under the workers' lock: a control call sees either the workers,
        // or the driver's instance with them folded in.
        let mut workers = lock(&live.workers);
        let mut base = lock(&live.base);
        let newest = live.newest();
        for w in &instances {
            live.adopt(&mut lock(w), Some(newest), false, false);
        }
        // The driver's instance takes every version the workers passed, in turn.
        live.adopt(&mut base, Some(newest), true, false);
        workers.clear();
        for w in instances {
            let w = Arc::try_unwrap(w).expect("the workers are done").into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
            base.absorb(w);
        }
        *lock(&live.run) = None;
    }

    /// One pass over the inputs (or the replayed trace).
    fn run_phase(&mut self, st: &mut RunState, instances: &mut [Arc<Mutex<Application>>]) {
        if self.cfg.workers == 1 {
            self.run_inline(st);
        } else {
            self.run_workers(st, instances);
        }
    }

    /// One worker, on this thread.
    fn run_inline(&mut self, st: &mut RunState) {
        let live = Arc::clone(&self.live);
        lock(&live.base).reserve(self.cfg.batch);
        self.pools[0].prepare_thread();
        let mut batch = Batch::with_capacity(self.cfg.batch);
        let mut out = BatchOutput::default();
        let mut events = Vec::new();
        if st.report.workers.is_empty() {
            st.report.workers.push(WorkerReport::default());
        }
        while !st.halted() {
            batch.clear();
            match self.ports.next_batch(st, &self.cfg, &self.blocks, self.cfg.batch, &mut batch) {
                Next::Batch => {}
                Next::End => break,
                Next::Starved => {
                    // Every block is free between batches here: a source
                    // that starves now needs more memory than configured.
                    st.input_errors.push(format!("the packet memory ({} blocks) is too small for the inputs", self.blocks.count()));
                    break;
                }
            }
            let t0 = Instant::now();
            if st.private {
                batch.make_all_private(&self.pools[0]);
            }
            let want_events = st.rep == 0 && self.ports.events.is_some();
            {
                // The control plane reaches the instance between batches.
                let mut app = lock(&live.base);
                if live.newest() != app.epoch {
                    live.adopt(&mut app, None, true, true);
                    app.reserve(self.cfg.batch);
                }
                app.run_batch(&mut batch, &self.pools[0], &mut out);
                if want_events {
                    events.clear();
                    app.drain_events(&mut events);
                }
            }
            let w = &mut st.report.workers[0];
            w.busy += t0.elapsed();
            w.packets += batch.len() as u64;
            w.batches += 1;
            if st.rep == 0 {
                if want_events {
                    st.deliver_events(&mut self.ports.events, &mut events);
                }
                st.emit(&mut self.ports.sinks, &batch, &out, &self.cfg);
            }
            out.clear();
            if st.retain && !st.private {
                st.keep(std::mem::replace(&mut batch, Batch::with_capacity(self.cfg.batch)), &self.cfg, &self.blocks);
            }
        }
    }

    /// N workers on their own threads; this thread reads, reorders and writes.
    fn run_workers(&mut self, st: &mut RunState, instances: &mut [Arc<Mutex<Application>>]) {
        let flight = Flight::new(&self.cfg, st.distribution == Some(Distribution::Flow));
        let Flight { n, flow, job, chunk_size, max_inflight, jobs } = flight;
        let want_events = self.ports.events.is_some() && st.rep == 0;
        let private = st.private;
        let discard = st.rep > 0;
        if st.report.workers.is_empty() {
            st.report.workers = vec![WorkerReport::default(); n];
        }
        // Room for every job in flight: handing one out never waits (the
        // in-flight limit is the back-pressure), so the I/O stage is free to
        // run jobs itself.
        let queues: Vec<Queue<Job>> = (0..if flow { n } else { 1 }).map(|_| Queue::new(max_inflight)).collect();
        // Room for every job in flight, so that a worker never waits to hand one back.
        let done: Queue<Job> = Queue::new(jobs + n);
        let Spares { batches: mut spare_batches, part_batches: mut spare_parts_b, outs: mut spare_outs, parts: mut spare_parts } =
            Spares::new(&flight);
        let mut parts: Vec<Batch> = Vec::with_capacity(n);
        let mut inflight: VecDeque<Chunk> = VecDeque::with_capacity(max_inflight + 1);
        let (pools, cfg, blocks, ports) = (&self.pools, &self.cfg, &self.blocks, &mut self.ports);
        // The calling thread is the last worker too: between reading and
        // writing, it runs the jobs it would otherwise wait for (as DPDK's
        // main lcore works), so N workers are N threads.
        for app in instances.iter() {
            lock(app).reserve(chunk_size);
        }
        let live = &*self.live;
        live.start_workers(n, instances.iter().map(|a| lock(a).epoch));
        self.pools[n - 1].prepare_thread();
        let (others, mine) = instances.split_at(n - 1);
        let me = n - 1;
        let my_app = &*mine[0];
        let mut my_report = WorkerReport::default();
        std::thread::scope(|scope| {
            let mut handles = Vec::new();
            for (w, app) in others.iter().enumerate() {
                let (rx, done) = (&queues[if flow { w } else { 0 }], &done);
                let pool = &pools[w];
                let worker = Worker { app, live, index: w, reserve: chunk_size, want_events, private, discard };
                handles.push(scope.spawn(move || worker_loop(&worker, rx, done, pool)));
            }
            let me_worker = Worker { app: my_app, live, index: me, reserve: chunk_size, want_events, private, discard };
            let mut first_chunk = 0u64;
            let mut input_done = false;
            loop {
                // Retire what is done, in order.
                while let Some(job) = done.try_recv() {
                    st.complete(&mut inflight, first_chunk, job);
                }
                first_chunk +=
                    ports.retire(st, cfg, blocks, &mut inflight, &mut spare_batches, &mut spare_parts_b, &mut spare_outs, &mut spare_parts);
                if !input_done && !st.halted() && inflight.len() < max_inflight {
                    let mut chunk_batch = spare_batches.pop().unwrap_or_else(|| Batch::with_capacity(chunk_size));
                    chunk_batch.clear();
                    match ports.next_batch(st, cfg, blocks, chunk_size, &mut chunk_batch) {
                        Next::Batch => {
                            let id = first_chunk + inflight.len() as u64;
                            let base = chunk_batch.descs[0].seq;
                            let len = chunk_batch.len();
                            if flow {
                                // With three workers or more, this thread's part
                                // goes to the others: splitting every chunk is
                                // serial work that the rest wait for, and a part
                                // of its own would delay the next chunk.
                                let targets = if n >= 3 { n - 1 } else { n } as u64;
                                parts.clear();
                                for _ in 0..n {
                                    let mut b = spare_parts_b.pop().unwrap_or_else(|| Batch::with_capacity(2 * job));
                                    b.clear();
                                    parts.push(b);
                                }
                                for d in &chunk_batch.descs {
                                    // SAFETY: the chunk's batch holds the memory
                                    // of every descriptor, and this thread keeps
                                    // it (untouched) until every part is done.
                                    let h = flow_hash(unsafe { d.bytes() });
                                    // The worker: `h` scaled to 0..targets (a multiply, not a division).
                                    let w = ((u128::from(h) * u128::from(targets)) >> 64) as usize;
                                    // SAFETY: as above; each descriptor goes to exactly one part.
                                    unsafe { parts[w].push_external(*d) };
                                }
                                let pending = parts.iter().filter(|p| !p.is_empty()).count() as u32;
                                inflight.push_back(Chunk::new(base, len, Some(chunk_batch), spare_parts.pop(), n, pending));
                                for (w, part) in parts.drain(..).enumerate() {
                                    if part.is_empty() {
                                        spare_parts_b.push(part);
                                        continue;
                                    }
                                    let out = spare_outs.pop().unwrap_or_default();
                                    let t = Instant::now();
                                    // A worker never waits for this thread, so this send ends.
                                    let _ = queues[w].send(Job { chunk: id, part: w, batch: part, out, events: Vec::new() });
                                    st.report.io_wait += t.elapsed();
                                }
                            } else {
                                inflight.push_back(Chunk::new(base, len, None, spare_parts.pop(), 1, 1));
                                let out = spare_outs.pop().unwrap_or_default();
                                let t = Instant::now();
                                let _ = queues[0].send(Job { chunk: id, part: 0, batch: chunk_batch, out, events: Vec::new() });
                                st.report.io_wait += t.elapsed();
                            }
                            continue;
                        }
                        Next::End => {
                            spare_batches.push(chunk_batch);
                            input_done = true;
                        }
                        Next::Starved => {
                            spare_batches.push(chunk_batch);
                            if inflight.is_empty() {
                                st.input_errors.push(format!("the packet memory ({} blocks) is too small for the inputs", blocks.count()));
                                input_done = true;
                            }
                        }
                    }
                }
                if inflight.is_empty() && (input_done || st.halted()) {
                    break;
                }
                // Nothing to read now: run a job here if one is queued, else
                // wait for a worker.
                if let Some(job) = queues[if flow { me } else { 0 }].try_recv() {
                    let job = run_job(&me_worker, job, &pools[me], &mut my_report);
                    st.complete(&mut inflight, first_chunk, job);
                    continue;
                }
                let t = Instant::now();
                match done.recv() {
                    Some(job) => st.complete(&mut inflight, first_chunk, job),
                    None => break,
                }
                st.report.io_wait += t.elapsed();
            }
            for q in &queues {
                q.close();
            }
            let reports = handles.into_iter().map(|h| h.join().unwrap_or_default()).chain(std::iter::once(my_report));
            for (total, r) in st.report.workers.iter_mut().zip(reports) {
                total.add(&r);
            }
        });
        live.end_workers();
    }
}

impl Ports {
    /// Writes the chunks at the head of `inflight` that are complete, in
    /// order, and recycles them; returns how many were retired.
    #[allow(clippy::too_many_arguments)]
    fn retire(
        &mut self,
        st: &mut RunState,
        cfg: &DriverConfig,
        blocks: &BlockPool,
        inflight: &mut VecDeque<Chunk>,
        spare_batches: &mut Vec<Batch>,
        spare_part_batches: &mut Vec<Batch>,
        spare_outs: &mut Vec<BatchOutput>,
        spare_parts: &mut Vec<Vec<Part>>,
    ) -> u64 {
        let mut retired = 0;
        while inflight.front().is_some_and(|c| c.pending == 0) {
            let mut c = inflight.pop_front().expect("front exists");
            retired += 1;
            if st.rep == 0 {
                st.emit_chunk(&mut self.sinks, &mut self.events, &mut c, cfg);
            }
            let mut parts = std::mem::take(&mut c.parts);
            let mut kept = None;
            for (b, mut o, _) in parts.iter_mut().filter_map(Option::take) {
                o.clear();
                spare_outs.push(o);
                if c.batch.is_none() && st.retain && !st.private {
                    kept = Some(b);
                } else {
                    let mut b = b;
                    b.clear();
                    if c.batch.is_some() {
                        spare_part_batches.push(b);
                    } else {
                        spare_batches.push(b);
                    }
                }
            }
            if let Some(mut b) = c.batch.take() {
                if st.retain && !st.private {
                    kept = Some(b);
                } else {
                    b.clear();
                    spare_batches.push(b);
                }
            }
            if let Some(b) = kept {
                st.keep(b, cfg, blocks);
            }
            parts.clear();
            spare_parts.push(parts);
        }
        retired
    }

    /// Fills `batch` with the next packets: from the retained trace when
    /// replaying, else from the sources merged by time; numbers them.
    fn next_batch(&mut self, st: &mut RunState, cfg: &DriverConfig, blocks: &BlockPool, max: usize, batch: &mut Batch) -> Next {
        let r = self.next_shared(st, cfg, max, batch);
        if st.private && st.retain && !batch.is_empty() {
            // Keep the bytes as read, before the application writes them
            // (each worker runs on private copies: `Batch::make_all_private`).
            if let Some(b) = batch.clone_shared() {
                st.keep(b, cfg, blocks);
            }
        }
        r
    }

    /// [`Ports::next_batch`] before private copies: descriptors over the
    /// sources' blocks, or over the kept trace.
    fn next_shared(&mut self, st: &mut RunState, cfg: &DriverConfig, max: usize, batch: &mut Batch) -> Next {
        if st.replaying {
            let total = st.trace_len;
            let end = st.replay_end;
            if st.replay_pos >= end {
                return Next::End;
            }
            // `trace` is the kept packets followed by their first `max - 1`
            // again (cyclically), so that any window of a batch is one slice.
            let start = batch.len();
            while batch.len() < max && st.replay_pos < end {
                let i = (st.replay_pos % total) as usize;
                let run = (max - batch.len()).min((end - st.replay_pos) as usize).min(st.trace.len() - i);
                // SAFETY: the retained batches hold this memory until the
                // run ends; an application that writes packet memory gets
                // private copies (`next_batch`), so descriptors may share bytes.
                unsafe { batch.extend_external(&st.trace[i..i + run]) };
                st.replay_pos += run as u64;
            }
            st.next_seq = number(&mut batch.descs[start..], st.next_seq);
            return Next::Batch;
        }
        let start = batch.len();
        let _ = cfg;
        let r = self.fill_merged(st, max, batch);
        let new = &mut batch.descs[start..];
        st.next_seq = number(new, st.next_seq);
        if st.rep == 0 {
            st.report.input_packets += new.len() as u64;
            st.report.input_bytes += new.iter().map(|d| u64::from(d.caplen)).sum::<u64>();
        }
        if batch.len() > start {
            Next::Batch
        } else {
            r
        }
    }

    fn fill_merged(&mut self, st: &mut RunState, max: usize, batch: &mut Batch) -> Next {
        if self.sources.len() == 1 {
            if st.ended[0] {
                return Next::End;
            }
            return match self.sources[0].fill(batch, max, None) {
                Ok(Fill::Packets(_)) => Next::Batch,
                Ok(Fill::Starved) => Next::Starved,
                Ok(Fill::End) => {
                    st.ended[0] = true;
                    Next::End
                }
                Err(e) => {
                    st.ended[0] = true;
                    st.input_errors.push(e.to_string());
                    if batch.is_empty() {
                        Next::End
                    } else {
                        Next::Batch
                    }
                }
            };
        }
        while batch.len() < max {
            // The next packet of every source that has one: (time, port, index).
            let mut best: Option<(Timestamp, u16, usize)> = None;
            let mut second: Option<(Timestamp, u16)> = None;
            for i in 0..self.sources.len() {
                if st.ended[i] {
                    continue;
                }
                let t = match st.peeked[i] {
                    Some(t) => t,
                    None => match self.sources[i].peek_time() {
                        Ok(Some(t)) => {
                            st.peeked[i] = Some(t);
                            t
                        }
                        Ok(None) => {
                            st.ended[i] = true;
                            continue;
                        }
                        Err(e) => {
                            st.ended[i] = true;
                            st.input_errors.push(e.to_string());
                            continue;
                        }
                    },
                };
                let key = (t, self.sources[i].in_port());
                match best {
                    Some((bt, bp, _)) if (bt, bp) <= key => {
                        if second.is_none_or(|s| key < s) {
                            second = Some(key);
                        }
                    }
                    _ => {
                        if let Some((bt, bp, _)) = best {
                            second = Some(second.map_or((bt, bp), |s| s.min((bt, bp))));
                        }
                        best = Some((key.0, key.1, i));
                    }
                }
            }
            let Some((_, _, i)) = best else {
                return if batch.is_empty() { Next::End } else { Next::Batch };
            };
            st.peeked[i] = None;
            // A source whose next packet ties with another input's (same
            // time, same port) appends nothing up to `second`: it goes first
            // (the input given first wins), one packet at a time.
            let r = match self.sources[i].fill(batch, max - batch.len(), second) {
                Ok(Fill::Packets(0)) => self.sources[i].fill(batch, 1, None),
                r => r,
            };
            match r {
                Ok(Fill::Packets(_)) => {}
                Ok(Fill::Starved) => return if batch.is_empty() { Next::Starved } else { Next::Batch },
                Ok(Fill::End) => st.ended[i] = true,
                Err(e) => {
                    st.ended[i] = true;
                    st.input_errors.push(e.to_string());
                }
            }
        }
        Next::Batch
    }
}

/// Numbers packets from `next` on; returns the next number.
#[inline]
fn number(descs: &mut [XbDesc], mut next: u64) -> u64 {
    for d in descs {
        d.seq = next;
        next += 1;
    }
    next
}

/// What [`Driver::next_batch`] could do.
enum Next {
    Batch,
    End,
    Starved,
}

/// How much a multi-worker phase has in flight. Round robin: whole jobs,
/// from one queue every worker takes from. Flow: chunks of `n` jobs' worth,
/// split by flow hash into one part per worker (a part averages a job), one
/// queue each.
#[derive(Clone, Copy)]
struct Flight {
    /// Workers.
    n: usize,
    /// Flow distribution (else round robin).
    flow: bool,
    /// Packets per job ([`DriverConfig::job`]).
    job: usize,
    /// Packets per chunk read from the sources.
    chunk_size: usize,
    /// Chunks in flight at most.
    max_inflight: usize,
    /// Jobs in flight at most.
    jobs: usize,
}

impl Flight {
    fn new(cfg: &DriverConfig, flow: bool) -> Flight {
        let (n, depth, job) = (cfg.workers, cfg.queue_depth, cfg.job());
        let max_inflight = if flow { 2 * depth } else { n * depth + n };
        Flight {
            n,
            flow,
            job,
            chunk_size: if flow { job * n } else { job },
            max_inflight,
            jobs: if flow { max_inflight * n } else { max_inflight },
        }
    }
}

/// Every batch, output and parts vector a multi-worker phase can have in
/// flight, made before it starts: recycling them never allocates.
struct Spares {
    /// Chunks' batches.
    batches: Vec<Batch>,
    /// Flow distribution: the parts' batches.
    part_batches: Vec<Batch>,
    outs: Vec<BatchOutput>,
    /// [`Chunk::parts`] vectors.
    parts: Vec<Vec<Part>>,
}

impl Spares {
    fn new(f: &Flight) -> Spares {
        let Flight { n, flow, job, chunk_size, max_inflight, jobs } = *f;
        let mut batches: Vec<Batch> = Vec::with_capacity(max_inflight + jobs + 1);
        let mut part_batches: Vec<Batch> = Vec::with_capacity(jobs + n);
        for _ in 0..max_inflight + 1 {
            batches.push(Batch::with_capacity(chunk_size));
        }
        // A part averages a job; one that gets more (flows hashing unevenly)
        // grows once and keeps its room.
        if flow {
            for _ in 0..jobs + n {
                part_batches.push(Batch::with_capacity(2 * job));
            }
        }
        Spares {
            batches,
            part_batches,
            outs: (0..jobs + n).map(|_| BatchOutput::with_capacity(chunk_size)).collect(),
            parts: (0..max_inflight + 1).map(|_| Vec::with_capacity(n)).collect(),
        }
    }
}

/// A batch (or a part of one) on its way to a worker and back.
struct Job {
    chunk: u64,
    part: usize,
    batch: Batch,
    out: BatchOutput,
    events: Vec<CoproEvent>,
}

/// A part of a chunk, back from its worker: the batch, its output, its events.
type Part = Option<(Batch, BatchOutput, Vec<CoproEvent>)>;

/// A batch read from the sources, in flight: its parts (one, or one per
/// worker under flow distribution) come back in any order.
struct Chunk {
    /// Sequence number of its first packet.
    base: u64,
    len: usize,
    /// The batch holding the memory (flow distribution: the parts point into it).
    batch: Option<Batch>,
    parts: Vec<Part>,
    pending: u32,
}

impl Chunk {
    /// A chunk of `n` parts, `pending` of them in flight; `spare` is a recycled parts vector.
    fn new(base: u64, len: usize, batch: Option<Batch>, spare: Option<Vec<Part>>, n: usize, pending: u32) -> Chunk {
        let mut parts = spare.unwrap_or_default();
        parts.clear();
        parts.resize_with(n, || None);
        Chunk { base, len, batch, parts, pending }
    }
}

/// One instance per worker, each forked from `base` on a thread of its
/// own. Everything a worker writes per packet (its coprocessors' registers,
/// its counters, its data memory, its compiled context) is then allocated
/// by a different thread than the other workers' — with the system
/// allocator's per-thread arenas, in different memory — so that no two
/// workers write to the same cache line (which, on every packet, costs
/// more than the packet's processing). `base` stays idle during the run and
/// absorbs the instances at its end.
fn fork_apart(base: &mut Application, n: usize) -> Result<Vec<Application>, RuntimeError> {
    let base = Mutex::new(base);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n).map(|_| s.spawn(|| base.lock().unwrap_or_else(|e| e.into_inner()).fork())).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    })
}

/// One worker: runs the jobs it receives. With `discard` (a repetition
/// whose output nobody writes), it releases a batch's packets and copies
/// itself when done, so that buffers return to the thread that used them.
fn worker_loop(worker: &Worker<'_>, jobs: &Queue<Job>, done: &Queue<Job>, pool: &PacketPool) -> WorkerReport {
    pool.prepare_thread();
    let mut r = WorkerReport::default();
    loop {
        let t = Instant::now();
        let Some(job) = jobs.recv() else { break };
        r.wait += t.elapsed();
        let job = run_job(worker, job, pool, &mut r);
        if done.send(job).is_err() {
            break;
        }
    }
    r
}

/// One worker's instance and how it runs jobs.
struct Worker<'a> {
    app: &'a Mutex<Application>,
    live: &'a Live,
    /// Its index among the workers.
    index: usize,
    /// Packets per job (what a new version's instance makes room for).
    reserve: usize,
    want_events: bool,
    private: bool,
    discard: bool,
}

/// Runs one job on the worker's instance (see [`worker_loop`]), first
/// taking the version the job runs on; counts it in `r`.
fn run_job(worker: &Worker<'_>, mut job: Job, pool: &PacketPool, r: &mut WorkerReport) -> Job {
    let t0 = Instant::now();
    if worker.private {
        job.batch.make_all_private(pool);
    }
    // The control plane reaches the instance between jobs.
    let mut app = lock(worker.app);
    // The version this job runs on: decided as it begins (see `live::Boundary`).
    let epoch = worker.live.job_epoch(job.chunk, worker.index);
    if epoch > app.epoch {
        worker.live.adopt_worker(&mut app, epoch, worker.index);
        app.reserve(worker.reserve);
    }
    app.run_batch(&mut job.batch, pool, &mut job.out);
    r.busy += t0.elapsed();
    r.packets += job.batch.len() as u64;
    r.batches += 1;
    if worker.want_events {
        job.events.clear();
        app.drain_events(&mut job.events);
    }
    drop(app);
    if worker.discard {
        job.out.clear();
        job.batch.clear();
    }
    job
}

/// The state of one run that the loops share.
struct RunState {
    report: RunReport,
    rep: u64,
    next_seq: u64,
    ended: Vec<bool>,
    peeked: Vec<Option<Timestamp>>,
    distribution: Option<Distribution>,
    input_errors: Vec<String>,
    output_error: Option<String>,
    output_closed: bool,
    stopped: bool,
    exits: Vec<u64>,
    stop_port: Option<u16>,
    stop_left: Option<u64>,
    /// Keep batches for replay (first repetition): processed ones, or,
    /// with `private`, copies of their descriptors made before processing.
    retain: bool,
    /// The application writes packet memory and runs several repetitions:
    /// every packet is processed on a private copy.
    private: bool,
    retained: Vec<Batch>,
    retained_bytes: usize,
    retained_complete: bool,
    trace: Vec<XbDesc>,
    replaying: bool,
    replay_pos: u64,
    replay_end: u64,
    /// Packets in the kept trace (before its cyclic extension).
    trace_len: u64,
    /// Reorder scratch: packet position in a chunk → (part, index).
    order: Vec<(u32, u32)>,
    cursors: Vec<usize>,
    event_scratch: Vec<CoproEvent>,
}

impl RunState {
    fn new(cfg: &DriverConfig, sink_ports: usize) -> RunState {
        RunState {
            report: RunReport::default(),
            rep: 0,
            next_seq: 0,
            ended: Vec::new(),
            peeked: Vec::new(),
            distribution: None,
            input_errors: Vec::new(),
            output_error: None,
            output_closed: false,
            stopped: false,
            exits: vec![0; sink_ports.max(cfg.stop_after.map_or(0, |(p, _)| usize::from(p) + 1))],
            stop_port: cfg.stop_after.map(|(p, _)| p),
            stop_left: cfg.stop_after.map(|(_, n)| n),
            retain: false,
            private: false,
            retained: Vec::new(),
            retained_bytes: 0,
            retained_complete: true,
            trace: Vec::new(),
            replaying: false,
            replay_pos: 0,
            replay_end: 0,
            trace_len: 0,
            order: Vec::new(),
            cursors: Vec::new(),
            event_scratch: Vec::new(),
        }
    }

    /// Whether the run must stop reading (a sink stopped it).
    fn halted(&self) -> bool {
        self.stopped || self.output_closed || self.output_error.is_some()
    }

    fn sink_error(&mut self, e: PortError) {
        match e {
            PortError::Closed(_) => self.output_closed = true,
            PortError::Failed(m) => {
                self.output_error.get_or_insert(m);
            }
        }
    }

    /// Keeps a processed batch for replay while the retained memory fits the budget.
    fn keep(&mut self, batch: Batch, cfg: &DriverConfig, blocks: &BlockPool) {
        if !self.retained_complete {
            return;
        }
        self.retained_bytes += batch.descs.iter().map(|d| d.caplen as usize + 16).sum::<usize>();
        // Leave the working blocks to the sources.
        let working = cfg.blocks.max(2) + 2 * cfg.workers * cfg.queue_depth;
        if self.retained_bytes > cfg.replay_memory || blocks.available() < working / 2 {
            self.retained_complete = false;
            self.retained.clear();
            self.retain = false;
            return;
        }
        self.retained.push(batch);
    }

    fn deliver_events(&mut self, consumer: &mut Option<EventSink>, events: &mut [CoproEvent]) {
        if events.is_empty() || self.halted() {
            return;
        }
        events.sort_by_key(|e| e.seq);
        if let Some(f) = consumer {
            if let Err(e) = f(events) {
                self.output_error.get_or_insert(e);
            }
        }
    }

    /// Records a finished job in its chunk.
    fn complete(&mut self, inflight: &mut VecDeque<Chunk>, first: u64, job: Job) {
        let Some(c) = inflight.get_mut((job.chunk - first) as usize) else { return };
        c.parts[job.part] = Some((job.batch, job.out, job.events));
        c.pending -= 1;
    }

    /// Writes what left a batch, packet by packet, in order.
    fn emit(&mut self, sinks: &mut [Vec<Box<dyn Sink>>], batch: &Batch, out: &BatchOutput, cfg: &DriverConfig) {
        let mut cursor = 0;
        for i in 0..batch.len() {
            if self.halted() {
                return;
            }
            self.emit_packet(sinks, batch, out, i, &mut cursor);
        }
        if cfg.packet_buffered {
            self.flush(sinks);
        }
    }

    fn flush(&mut self, sinks: &mut [Vec<Box<dyn Sink>>]) {
        for s in sinks.iter_mut().flatten() {
            if let Err(e) = s.flush() {
                self.sink_error(e);
            }
        }
    }

    /// Writes the exits of packet `i` of `batch`.
    #[inline]
    fn emit_packet(&mut self, sinks: &mut [Vec<Box<dyn Sink>>], batch: &Batch, out: &BatchOutput, i: usize, cursor: &mut usize) {
        let v = out.verdicts[i];
        if v < 0x1_0000 {
            let port = v as u16;
            let d = &batch.descs[i];
            // SAFETY: the batch holds the memory of its descriptors and is
            // not being processed.
            self.exit(sinks, port, d, unsafe { d.bytes() });
        } else if v & VERDICT_FANOUT != 0 {
            let d = &batch.descs[i];
            while let Some(e) = out.fanout.get(*cursor).filter(|e| e.idx as usize == i) {
                *cursor += 1;
                // SAFETY: as above.
                let bytes = e.copy.as_ref().map_or_else(|| unsafe { d.bytes() }, |c| c.bytes());
                self.exit(sinks, e.port, d, bytes);
                if self.halted() {
                    return;
                }
            }
        }
    }

    #[inline]
    fn exit(&mut self, sinks: &mut [Vec<Box<dyn Sink>>], port: u16, d: &XbDesc, data: &[u8]) {
        let p = usize::from(port);
        if let Some(n) = self.exits.get_mut(p) {
            *n += 1;
        }
        if let Some(ss) = sinks.get_mut(p) {
            if !ss.is_empty() {
                let pkt = OutPacket { data, wire_len: d.wirelen, ts: d.ts(), in_port: d.in_port, seq: d.seq };
                for s in ss.iter_mut() {
                    if let Err(e) = s.write(&pkt) {
                        self.sink_error(e);
                        return;
                    }
                }
            }
        }
        if self.stop_port == Some(port) {
            if let Some(left) = &mut self.stop_left {
                *left = left.saturating_sub(1);
                if *left == 0 {
                    self.stopped = true;
                }
            }
        }
    }

    /// Writes a complete chunk's exits and events in arrival order.
    fn emit_chunk(&mut self, sinks: &mut [Vec<Box<dyn Sink>>], events: &mut Option<EventSink>, c: &mut Chunk, cfg: &DriverConfig) {
        let mut evs = std::mem::take(&mut self.event_scratch);
        evs.clear();
        for (_, _, e) in c.parts.iter_mut().flatten() {
            evs.append(e);
        }
        self.deliver_events(events, &mut evs);
        self.event_scratch = evs;
        if c.batch.is_none() {
            if let Some((b, o, _)) = c.parts[0].as_ref() {
                self.emit(sinks, b, o, cfg);
            }
            return;
        }
        // Flow distribution: put the parts' packets back in arrival order.
        self.order.clear();
        self.order.resize(c.len, (u32::MAX, 0));
        for (p, part) in c.parts.iter().enumerate() {
            if let Some((b, _, _)) = part {
                for (i, d) in b.descs.iter().enumerate() {
                    if let Some(slot) = self.order.get_mut((d.seq - c.base) as usize) {
                        *slot = (p as u32, i as u32);
                    }
                }
            }
        }
        self.cursors.clear();
        self.cursors.resize(c.parts.len(), 0);
        let order = std::mem::take(&mut self.order);
        for &(p, i) in &order {
            if self.halted() {
                break;
            }
            if let Some((b, o, _)) = c.parts.get(p as usize).and_then(Option::as_ref) {
                let mut cur = self.cursors[p as usize];
                self.emit_packet(sinks, b, o, i as usize, &mut cur);
                self.cursors[p as usize] = cur;
            }
        }
        self.order = order;
        if cfg.packet_buffered {
            self.flush(sinks);
        }
    }
}
