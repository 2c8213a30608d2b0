//! The running application as the control plane reaches it (NetBind, §III):
//! read its counters and tables, change its tables, and replace it, in
//! part or whole, while packets flow.
//!
//! ```text
//!  control thread                          packet thread(s)
//!  ──────────────                          ────────────────
//!  Change ─► new manifest ─► plan, verify,
//!            compile, .init (a template)
//!            ─► Version { epoch E } ─┐
//!                                    ├───► before the next job to begin (one worker: before the
//!                                    │     next batch): the worker's instance is succeeded by the
//!                                    │     version's, carrying the state it keeps (Application::succeed)
//!  reads, table changes ─► lock one instance between two batches
//! ```
//!
//! A new version is built off the packet path, on the caller's thread,
//! and installed by publishing its epoch: no worker stops, each finishes
//! the batch it holds on the version it has and takes the new one before
//! the next. With several workers the version cuts the sequence of jobs
//! (batches, in the order they were read) after the last one begun: the
//! jobs before run on the old version and every job after on the new one,
//! whichever worker runs it ([`Boundary`]), and the reorder stage keeps
//! their order. Nothing is dropped or duplicated: a version change is
//! between two batches.
//!
//! With an engine that links whole applications (the JIT), a change makes
//! two versions: a quick one first (each NetPE's code compiled alone, the
//! unchanged ones' kept from before, bound by the runtime's graph walk),
//! installed within about a millisecond, then the whole data path compiled
//! `direct`, installed in its place a few milliseconds later. A new
//! version is admitted ([`crate::admission`]) where its manifest declares
//! `[admission]`.
//!
//! State moves with the swap by identity (`StateIds`): a NetPE whose name
//! the new version keeps carries over its coprocessor instances when
//! their kind and configuration are the same (tables are kept, not
//! copied), and its data memory when its program is the same or declares
//! a layout compatible with the old one's (`.layout ... accepts`, [`netil::Interface::accepts_layout`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use netil::Opcode;
use netvm_vm::{CoproError, CoproRegistry, Coprocessor, Engine, InvokeContext, PeCode, RegisterFile, WorkerShare};

use crate::app::StateIds;
use crate::manifest::{Manifest, NetPeSpec};
use crate::{AppStats, Application, Distribution, RuntimeError};

/// Locks `m`, whatever a thread that panicked holding it left.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the control plane builds new versions of an application from
/// ([`crate::Driver::allow_changes`]).
#[derive(Clone)]
pub struct Rebuild {
    /// The manifest the running application was built from.
    pub manifest: Manifest,
    /// The engine that compiles new versions.
    pub engine: Arc<dyn Engine>,
    /// The coprocessor kinds new NetPEs may declare.
    pub registry: CoproRegistry,
    /// The execution budget that overrides the manifest's, if any.
    pub budget: Option<u64>,
    /// What admission control weighs a new version with, where its
    /// manifest declares `[admission]` (default: the engine's built-in
    /// figures, [`crate::admission::Calibration::builtin`]).
    pub calibration: Option<crate::admission::Calibration>,
}

impl std::fmt::Debug for Rebuild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rebuild").field("manifest", &self.manifest.name).field("engine", &self.engine.name()).finish()
    }
}

/// A change of the running application's data path (what `netvm ctl`
/// sends); each makes a new version of the whole application.
#[derive(Clone, Debug)]
pub enum Change {
    /// Adds a NetPE, not connected to anything yet.
    AddNetPe {
        /// Its name, new in the application.
        name: String,
        /// Its program: a file, or a module loaded with [`Control::load_module`].
        program: ProgramRef,
        /// Its coprocessors' configuration, as a manifest's `copro` table.
        copro: std::collections::BTreeMap<String, std::collections::BTreeMap<String, toml::Value>>,
        /// Its input arguments, as a manifest's `args` table.
        args: std::collections::BTreeMap<String, toml::Value>,
    },
    /// Removes a NetPE and every connection, source and sink that touches it.
    RemoveNetPe {
        /// The NetPE.
        name: String,
    },
    /// Connects an output to an input: `NETPE.PORT` or `in:PORT` (an
    /// application input port) to `NETPE[.PORT]` or `out:PORT` (an
    /// application output port).
    Connect {
        /// `NETPE.PORT` or `in:PORT`.
        from: String,
        /// `NETPE[.PORT]` or `out:PORT`.
        to: String,
    },
    /// Removes a connection [`Change::Connect`] would make.
    Disconnect {
        /// As for [`Change::Connect`].
        from: String,
        /// As for [`Change::Connect`].
        to: String,
    },
    /// Gives a NetPE another program; its connections stay.
    Replace {
        /// The NetPE.
        name: String,
        /// The new program.
        program: ProgramRef,
    },
    /// Replaces the whole application by another manifest's (NetPEs the two
    /// share by name carry their state over as for any change).
    ReplaceApp {
        /// The new manifest.
        manifest: Manifest,
    },
    /// Adds a data path to an engine of several ([`crate::datapath`]).
    AddDataPath {
        /// How it is named and selected (`manifest` relative to the
        /// caller's working directory).
        spec: crate::datapath::DataPathSpec,
    },
    /// Removes a data path: its NetPEs and their connections.
    RemoveDataPath {
        /// The data path.
        name: String,
    },
    /// Replaces a data path by another manifest's, selected as before (its
    /// NetPEs that keep their names carry their state over).
    ReplaceDataPath {
        /// The data path.
        name: String,
        /// The new manifest's file.
        manifest: std::path::PathBuf,
    },
}

/// Where a NetPE's program comes from.
#[derive(Clone, Debug)]
pub enum ProgramRef {
    /// A `.nil` or `.nvm` file.
    File(std::path::PathBuf),
    /// A module loaded earlier with [`Control::load_module`], by name.
    Module(String),
}

/// What installing a change did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Installed {
    /// The epoch of the version the change ends with (versions count from
    /// 0, the one the run started with).
    pub epoch: u64,
    /// The epoch of the first version that has the change: a quick one
    /// (each NetPE's code alone, bound by the runtime's graph walk) when
    /// the engine links whole applications, which `epoch` then replaces
    /// with the whole data path compiled; else `epoch`.
    pub first: u64,
    /// Time to build the first version (plan, verify, compile what
    /// changed, `.init`), off the packet path.
    pub build: Duration,
    /// Time to compile the whole data path and install it, when there was
    /// a quick version first (or why it failed: the quick version stays).
    pub compiled: Option<Result<Duration, String>>,
    /// Its NetPEs.
    pub netpes: usize,
    /// NetPEs whose data memory was carried over.
    pub data_carried: Vec<String>,
    /// Coprocessor instances carried over (`NETPE.NAME`).
    pub copros_carried: Vec<String>,
}

/// Errors of the control plane: the request changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The request is malformed or names something that does not exist.
    #[error("{0}")]
    Bad(String),
    /// The new version does not build.
    #[error("{0}")]
    Build(#[from] RuntimeError),
    /// The driver is gone, or was not given what building versions needs.
    #[error("{0}")]
    Unavailable(String),
}

/// One installed version of the application.
pub(crate) struct Version {
    pub(crate) epoch: u64,
    /// The version's own instance: taken by the one instance that runs
    /// alone (one worker, or the driver's at the end of a run), forked by
    /// each worker.
    template: Mutex<Option<Application>>,
    /// When the request that made it arrived.
    requested: Instant,
    /// When the first batch ran on it.
    first_batch: OnceLock<Instant>,
}

/// Install latencies kept for [`Control::wait_running`] (the newest ones).
const LATENCIES_KEPT: usize = 4096;

/// How the current run constrains new versions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RunShape {
    /// Worker threads (1: the driver's instance runs alone).
    pub workers: usize,
    /// How packets are spread over them (several workers).
    pub distribution: Option<Distribution>,
    /// Packets are replayed from memory without private copies: a new
    /// version may not write packet memory.
    pub shared_packets: bool,
}

/// The state the driver and the control plane share (see the module docs).
pub(crate) struct Live {
    /// The driver's instance: the one that runs with one worker, and the
    /// one the workers' are forked from and folded back into.
    pub(crate) base: Mutex<Application>,
    /// The workers' instances during a run with several workers.
    pub(crate) workers: Mutex<Vec<Arc<Mutex<Application>>>>,
    /// The newest version's epoch.
    pub(crate) epoch: AtomicU64,
    /// Installed versions that some instance may still adopt.
    versions: Mutex<Vec<Arc<Version>>>,
    /// What builds new versions, and the newest version's manifest.
    setup: Mutex<Option<Setup>>,
    /// The run in progress, if any.
    pub(crate) run: Mutex<Option<RunShape>>,
    /// Modules loaded by name ([`Control::load_module`]).
    modules: Mutex<HashMap<String, netil::Module>>,
    /// Each worker's epoch, during a run with several.
    worker_epochs: Mutex<Vec<u64>>,
    /// The NetPEs of the last version installed, if any.
    published: Mutex<Option<Arc<Vec<PeRecord>>>>,
    /// Which version each job of a run with several workers runs on.
    boundary: Mutex<Boundary>,
    /// Per version, the time from its request to its first batch.
    latencies: Mutex<std::collections::BTreeMap<u64, Duration>>,
}

/// Where each version starts in the sequence of jobs of a run with
/// several workers. A version installed when jobs up to number `started`
/// have begun (on any worker) takes every job after them: the jobs
/// already running and those begun before finish on the version they
/// have, the next one to begin, on whichever worker, runs on the new one.
/// Versions follow the packets' order (a job after another never runs on
/// an older version), and a change waits for one job, not for the queues
/// ahead of it to drain.
#[derive(Debug, Default)]
struct Boundary {
    /// A run with several workers is on.
    active: bool,
    /// The version its jobs run on before any cut.
    base: u64,
    /// The highest job number begun.
    started: Option<u64>,
    /// The highest job number each worker has begun.
    each: Vec<Option<u64>>,
    /// (first job, version), in install order.
    cuts: Vec<(u64, u64)>,
}

impl Boundary {
    /// The version job `job` runs on, begun now by worker `w`.
    fn begin(&mut self, job: u64, w: usize) -> u64 {
        self.started = self.started.max(Some(job));
        if let Some(e) = self.each.get_mut(w) {
            *e = (*e).max(Some(job));
        }
        let epoch = self.cuts.iter().rev().find(|(from, _)| *from <= job).map_or(self.base, |c| c.1);
        // Cuts no job to come can fall before: every worker's next job is
        // after the one it began last.
        if let Some(lowest) = self.each.iter().copied().min().flatten() {
            if let Some(keep) = self.cuts.iter().rposition(|(from, _)| *from <= lowest) {
                self.base = self.cuts[keep].1;
                self.cuts.drain(..=keep);
            }
        }
        epoch
    }

    /// Version `epoch` is installed: it takes the jobs not begun yet.
    fn cut(&mut self, epoch: u64) {
        if !self.active {
            return;
        }
        let from = self.started.map_or(0, |s| s + 1);
        // A version that replaces another before any job ran on it takes its place.
        if self.cuts.last().is_some_and(|c| c.0 == from) {
            self.cuts.pop();
        }
        self.cuts.push((from, epoch));
    }
}

/// Each NetPE of `a`, as a new version is planned against it.
fn records(a: &Application) -> Vec<PeRecord> {
    a.netpe_records().map(|(n, m, i, w)| PeRecord { name: n.to_string(), module: m.clone(), ids: i.clone(), shares: w.to_vec() }).collect()
}

/// One NetPE of a version, as a new version is planned against it.
struct PeRecord {
    name: String,
    module: netil::Module,
    ids: StateIds,
    /// How each coprocessor instance serves several workers.
    shares: Vec<WorkerShare>,
}

/// The stand-in a new version is built with for a coprocessor instance it
/// carries over from the running one (which only the packet threads
/// hold): every worker's instance of the version gets the carried instance
/// in its place ([`Application::succeed`]) before a packet runs. Only the
/// `.init` of a NetPE whose data memory is carried over too (its result
/// is dropped) can reach it: operations do nothing and read zeros.
pub(crate) struct Vacant {
    kind: String,
    share: WorkerShare,
    input: [u32; 16],
    output: [u32; 16],
}

impl Vacant {
    fn new(kind: &str, share: WorkerShare) -> Vacant {
        Vacant { kind: kind.to_string(), share, input: [0; 16], output: [0; 16] }
    }
}

impl Coprocessor for Vacant {
    fn kind(&self) -> &str {
        &self.kind
    }

    fn write(&mut self, _: u8, _: u32) -> Result<(), CoproError> {
        Ok(())
    }

    fn read(&mut self, _: u8) -> Result<u32, CoproError> {
        Ok(0)
    }

    fn invoke(&mut self, _: u8, _: &InvokeContext<'_>) -> Result<(), CoproError> {
        Ok(())
    }

    fn registers(&mut self) -> RegisterFile {
        RegisterFile::over(&mut self.input, &mut self.output)
    }

    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        Ok(Box::new(Vacant::new(&self.kind, self.share)))
    }

    fn share(&self) -> WorkerShare {
        self.share
    }
}

/// [`Rebuild`] with the newest version's manifest.
struct Setup {
    rebuild: Rebuild,
    /// The code of each program of the newest version, compiled alone
    /// (what quick versions are bound from).
    codes: HashMap<netil::Module, Arc<dyn PeCode>>,
    /// Each program of the newest version, verified (a new version
    /// verifies only the programs it changes).
    verified: HashMap<netil::Module, netvm_verify::Verified>,
}

impl Setup {
    /// Whether changes install a quick version first: the engine links
    /// whole applications (which takes a compile of the whole data path).
    fn quick(&self) -> bool {
        self.rebuild.engine.link_name() != "dispatch"
    }
}

impl Live {
    pub(crate) fn new(app: Application) -> Live {
        Live {
            base: Mutex::new(app),
            workers: Mutex::new(Vec::new()),
            epoch: AtomicU64::new(0),
            versions: Mutex::new(Vec::new()),
            setup: Mutex::new(None),
            run: Mutex::new(None),
            modules: Mutex::new(HashMap::new()),
            latencies: Mutex::new(std::collections::BTreeMap::new()),
            worker_epochs: Mutex::new(Vec::new()),
            boundary: Mutex::new(Boundary::default()),
            published: Mutex::new(None),
        }
    }

    /// The newest version's NetPEs: those of the last version installed
    /// (kept when it was), else the driver's instance's. The driver's
    /// instance is locked only before the first change: a packet thread
    /// holds it for a whole batch.
    fn newest_netpes(&self) -> Arc<Vec<PeRecord>> {
        if let Some(r) = lock(&self.published).clone() {
            return r;
        }
        Arc::new(records(&lock(&self.base)))
    }

    /// Lets the control plane build versions from `rebuild`. Compiles the
    /// running programs one by one for quick versions (holding the setup,
    /// so that the first change waits for it).
    pub(crate) fn allow_changes(&self, rebuild: Rebuild) {
        let mut setup = Setup { rebuild, codes: HashMap::new(), verified: HashMap::new() };
        for r in self.newest_netpes().iter() {
            if let Ok(v) = netvm_verify::verify(&r.module) {
                if setup.quick() {
                    if let Ok(code) = setup.rebuild.engine.prepare(&v) {
                        setup.codes.insert(r.module.clone(), code);
                    }
                }
                setup.verified.insert(r.module.clone(), v);
            }
        }
        *lock(&self.setup) = Some(setup);
    }

    /// Installs `template` as the next version (requested at `requested`): its epoch.
    fn publish(&self, mut template: Application, requested: Instant) -> u64 {
        *lock(&self.published) = Some(Arc::new(records(&template)));
        let mut versions = lock(&self.versions);
        let epoch = self.newest() + 1;
        template.epoch = epoch;
        versions.push(Arc::new(Version { epoch, template: Mutex::new(Some(template)), requested, first_batch: OnceLock::new() }));
        let mut b = lock(&self.boundary);
        self.epoch.store(epoch, Ordering::Release);
        b.cut(epoch);
        epoch
    }

    /// The newest epoch.
    pub(crate) fn newest(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Makes `app` the instance of version `epoch` (the newest, when
    /// `epoch` is `None`), carrying its state over, through every version
    /// between (a version carries over state that an earlier one made).
    /// `alone`: the instance runs alone and takes each version's own
    /// instance, rather than one worker of several, which forks it. `first`:
    /// a batch runs on it now (its install latency is taken).
    pub(crate) fn adopt(&self, app: &mut Application, epoch: Option<u64>, alone: bool, first: bool) {
        let target = epoch.unwrap_or_else(|| self.newest());
        let steps: Vec<Arc<Version>> = lock(&self.versions).iter().filter(|v| v.epoch > app.epoch && v.epoch <= target).cloned().collect();
        for version in &steps {
            let next = {
                let mut t = lock(&version.template);
                if alone {
                    t.take()
                } else {
                    // Fork support was checked when the version was installed.
                    t.as_mut().and_then(|t| t.fork().ok())
                }
            };
            let Some(mut next) = next else { continue };
            next.epoch = version.epoch;
            app.succeed(next);
        }
        let Some(last) = steps.last() else { return };
        if first && last.first_batch.set(Instant::now()).is_ok() {
            let mut l = lock(&self.latencies);
            l.insert(last.epoch, last.requested.elapsed());
            while l.len() > LATENCIES_KEPT {
                l.pop_first();
            }
        }
        if alone {
            // With one instance, the versions it passed are done with.
            lock(&self.versions).retain(|v| v.epoch > last.epoch);
        }
    }

    /// A run with workers starts: their instances' epochs, in worker order.
    /// Its jobs, numbered from 0, run on the newest version until the next
    /// is installed ([`Live::job_epoch`]).
    pub(crate) fn start_workers(&self, n: usize, epochs: impl Iterator<Item = u64>) {
        let mut e = lock(&self.worker_epochs);
        e.clear();
        e.extend(epochs.take(n));
        let mut b = lock(&self.boundary);
        *b = Boundary { active: true, base: self.newest(), started: None, each: vec![None; n], cuts: Vec::new() };
    }

    /// The run with workers has ended: versions no longer cut its jobs.
    pub(crate) fn end_workers(&self) {
        *lock(&self.boundary) = Boundary::default();
    }

    /// The version that job `job` (numbered in the order the jobs were
    /// read) of a run with several workers runs on, as worker `w` begins it
    /// (see [`Boundary`]).
    pub(crate) fn job_epoch(&self, job: u64, w: usize) -> u64 {
        lock(&self.boundary).begin(job, w)
    }

    /// [`Live::adopt`] for worker `w` of several: takes version `epoch`
    /// (a fork of it), then retires the versions every worker has passed.
    pub(crate) fn adopt_worker(&self, app: &mut Application, epoch: u64, w: usize) {
        self.adopt(app, Some(epoch), false, true);
        let oldest = {
            let mut e = lock(&self.worker_epochs);
            if let Some(x) = e.get_mut(w) {
                *x = app.epoch;
            }
            e.iter().copied().min().unwrap_or(app.epoch)
        };
        self.retire(oldest);
    }

    /// Retires the versions below `oldest` (no worker runs or will take
    /// them): the driver's instance, which waits while the workers run,
    /// takes each in turn (their own instances, not forks), so that it
    /// keeps every piece of state a version made, and their memory goes.
    pub(crate) fn retire(&self, oldest: u64) {
        let newest_below = lock(&self.versions).iter().map(|v| v.epoch).filter(|&e| e < oldest).max();
        if let Some(e) = newest_below {
            self.adopt(&mut lock(&self.base), Some(e), true, false);
        }
    }
}

/// A handle on a driver's application for the control plane: cheap to
/// clone, usable from any thread while the driver runs (or between runs).
/// Reads and table changes take effect between two batches; data path
/// changes build a new version off the packet path and install it (see
/// the module docs). Every call that fails changes nothing.
#[derive(Clone)]
pub struct Control {
    live: Weak<Live>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control").field("alive", &(self.live.strong_count() > 0)).finish()
    }
}

/// One NetPE as [`Control::list`] shows it.
#[derive(Clone, Debug)]
pub struct NetPeInfo {
    /// Its name.
    pub name: String,
    /// Its program's file (or name, for a loaded module).
    pub program: String,
    /// Output ports.
    pub out_ports: u16,
    /// Coprocessor instances: (name, kind).
    pub copros: Vec<(String, String)>,
}

/// What [`Control::list`] returns: the data path and its counters.
#[derive(Clone, Debug)]
pub struct Listing {
    /// The version running (or about to).
    pub epoch: u64,
    /// The application's name.
    pub name: Option<String>,
    /// NetPEs, in manifest order.
    pub netpes: Vec<NetPeInfo>,
    /// Connections `NETPE.PORT -> NETPE.PORT`.
    pub connections: Vec<(String, String)>,
    /// Sources `in:PORT -> NETPE.PORT`.
    pub sources: Vec<(String, String)>,
    /// Sinks `NETPE.PORT -> out:PORT`.
    pub sinks: Vec<(String, String)>,
    /// Counters of every worker, summed.
    pub stats: AppStats,
    /// Workers running.
    pub workers: usize,
    /// The data paths, where the engine runs several ([`crate::datapath`]):
    /// each one's counters.
    pub datapaths: Vec<crate::datapath::DataPathStats>,
}

impl Control {
    pub(crate) fn new(live: &Arc<Live>) -> Control {
        Control { live: Arc::downgrade(live) }
    }

    fn live(&self) -> Result<Arc<Live>, ControlError> {
        self.live.upgrade().ok_or_else(|| ControlError::Unavailable("the application is gone".into()))
    }

    /// Runs `f` on every instance that runs now (the driver's alone, or
    /// every worker's), each between two batches, in order.
    fn each_instance<R>(live: &Live, mut f: impl FnMut(&mut Application) -> R) -> Vec<R> {
        let workers = lock(&live.workers);
        if workers.is_empty() {
            return vec![f(&mut lock(&live.base))];
        }
        workers.iter().map(|w| f(&mut lock(w))).collect()
    }

    /// Counters of the whole application (every worker's, summed).
    pub fn stats(&self) -> Result<AppStats, ControlError> {
        let live = self.live()?;
        let workers = lock(&live.workers);
        let mut s = lock(&live.base).stats();
        for w in workers.iter() {
            s.add_by_name(&lock(w).stats());
        }
        Ok(s)
    }

    /// The data path (NetPEs, connections, sources, sinks) and its counters.
    pub fn list(&self) -> Result<Listing, ControlError> {
        let live = self.live()?;
        let stats = self.stats()?;
        let workers = lock(&live.workers).len().max(1);
        let newest = live.newest_netpes();
        let setup = lock(&live.setup);
        let manifest = setup.as_ref().map(|s| &s.rebuild.manifest);
        let mut netpes = Vec::new();
        for PeRecord { name, module, .. } in newest.iter() {
            let program = manifest
                .and_then(|m| m.netpes.iter().find(|n| n.name == *name))
                .map_or_else(String::new, |n| n.program.display().to_string());
            netpes.push(NetPeInfo {
                name: name.clone(),
                program,
                out_ports: module.out_ports,
                copros: module.copros.iter().map(|d| (d.name.clone(), d.kind.clone())).collect(),
            });
        }
        let (mut connections, mut sources, mut sinks) = (Vec::new(), Vec::new(), Vec::new());
        if let Some(m) = manifest {
            connections = m.connections.iter().map(|c| (c.from.clone(), c.to.clone())).collect();
            sources = m.sources.iter().map(|s| (format!("in:{}", s.port), s.to.clone())).collect();
            sinks = m.sinks.iter().map(|s| (s.from.clone(), format!("out:{}", s.port))).collect();
        }
        let name = manifest.and_then(|m| m.name.clone());
        let datapaths = manifest.map(|m| datapath_stats(m, &stats, &newest)).unwrap_or_default();
        Ok(Listing { epoch: live.newest(), name, netpes, connections, sources, sinks, stats, workers, datapaths })
    }

    /// Each data path's counters (every worker's, summed), where the engine
    /// runs several ([`crate::datapath`]); empty otherwise, or when the
    /// control plane was not given the manifest.
    pub fn datapath_stats(&self) -> Result<Vec<crate::datapath::DataPathStats>, ControlError> {
        let live = self.live()?;
        let stats = self.stats()?;
        let newest = live.newest_netpes();
        let setup = lock(&live.setup);
        Ok(setup.as_ref().map(|s| datapath_stats(&s.rebuild.manifest, &stats, &newest)).unwrap_or_default())
    }

    /// Loads a table file's text into the instance `name` (`INSTANCE` or
    /// `NETPE.INSTANCE`) of every instance running; returns the entries
    /// loaded.
    pub fn table_load(&self, name: &str, text: &str) -> Result<usize, ControlError> {
        let live = self.live()?;
        let results = Control::each_instance(&live, |app| app.load_table(name, text));
        let mut n = 0;
        for r in results {
            n = r.map_err(ControlError::Bad)?;
        }
        Ok(n)
    }

    /// The instance `name`'s table (its file format). With several
    /// workers, a per-worker instance's is the first worker's part.
    pub fn table_dump(&self, name: &str) -> Result<String, ControlError> {
        let live = self.live()?;
        let workers = lock(&live.workers);
        let r = match workers.first() {
            Some(w) => lock(w).dump_table(name),
            None => lock(&live.base).dump_table(name),
        };
        r.map_err(ControlError::Bad)
    }

    /// Empties (tables) or zeroes (counters) the instance `name` in every instance running.
    pub fn table_clear(&self, name: &str) -> Result<(), ControlError> {
        let live = self.live()?;
        for r in Control::each_instance(&live, |app| app.clear_table(name)) {
            r.map_err(ControlError::Bad)?;
        }
        Ok(())
    }

    /// The global variable `var` (`.global`) of NetPE `netpe`: its value in
    /// every instance running (one per worker: each has its own data memory).
    pub fn global_get(&self, netpe: &str, var: &str) -> Result<Vec<u64>, ControlError> {
        let live = self.live()?;
        Control::each_instance(&live, |app| app.global(netpe, var).map(|(v, data)| crate::app::read_var(data, &v).unwrap_or(0)))
            .into_iter()
            .collect::<Result<_, _>>()
            .map_err(ControlError::Bad)
    }

    /// Sets the global variable `var` of NetPE `netpe` to `value` in every instance running.
    pub fn global_set(&self, netpe: &str, var: &str, value: i64) -> Result<(), ControlError> {
        let live = self.live()?;
        // Checked on one instance first, so that an error changes nothing.
        let check = |app: &mut Application| -> Result<(), ControlError> {
            let (v, data) = app.global(netpe, var).map_err(ControlError::Bad)?;
            crate::app::write_var(&mut data.to_vec(), &v, value).map_err(|e| ControlError::Bad(format!("{netpe}.{var}: {e}")))
        };
        {
            // One lock at a time (a worker taking a version locks the driver's instance).
            let workers = lock(&live.workers);
            match workers.first() {
                Some(w) => check(&mut lock(w))?,
                None => check(&mut lock(&live.base))?,
            }
        }
        for r in Control::each_instance(&live, |app| app.global(netpe, var).and_then(|(v, data)| crate::app::write_var(data, &v, value))) {
            r.map_err(ControlError::Bad)?;
        }
        Ok(())
    }

    /// Reads and verifies a program file and keeps it under `name`, for
    /// [`Change::AddNetPe`] and [`Change::Replace`] ([`ProgramRef::Module`]).
    pub fn load_module(&self, name: &str, path: &std::path::Path) -> Result<(), ControlError> {
        let live = self.live()?;
        let loaded = crate::program::load_program(path)?;
        loaded.verify()?;
        lock(&live.modules).insert(name.to_string(), loaded.module);
        Ok(())
    }

    /// Builds the application `change` makes of the newest version and
    /// installs it (see the module docs); returns once it is installed,
    /// not waiting for a batch to run on it ([`Control::wait_running`]).
    pub fn apply(&self, change: Change) -> Result<Installed, ControlError> {
        let requested = Instant::now();
        let live = self.live()?;
        let mut setup = lock(&live.setup);
        let Some(setup) = setup.as_mut() else {
            return Err(ControlError::Unavailable(
                "this application cannot be changed while it runs (its driver was given no manifest and engine to build versions)".into(),
            ));
        };
        let mut manifest = edit(&setup.rebuild.manifest, change, &lock(&live.modules))?;
        let t0 = Instant::now();
        // A quick version first (each NetPE's code alone, the unchanged
        // ones' as they are, bound by the runtime's graph walk), then the
        // whole data path compiled (`direct`) in its place.
        let quick = setup.quick().then_some(&setup.codes);
        let (template, data_carried, copros_carried) = build(&live, &setup.rebuild, &manifest, quick, &mut setup.verified)?;
        let build_time = t0.elapsed();
        // Later versions take the programs from memory, not from their files again.
        for (spec, (_, module, _, _)) in manifest.netpes.iter_mut().zip(template.netpe_records()) {
            spec.module.get_or_insert_with(|| module.clone());
        }
        let codes: HashMap<netil::Module, Arc<dyn PeCode>> = template.prepared_codes().into_iter().collect();
        let first = live.publish(template, requested);
        setup.rebuild.manifest = manifest;
        let (mut epoch, mut compiled) = (first, None);
        if setup.quick() {
            setup.codes = codes;
            let t1 = Instant::now();
            match build(&live, &setup.rebuild, &setup.rebuild.manifest, None, &mut setup.verified) {
                Ok((linked, _, _)) => {
                    epoch = live.publish(linked, requested);
                    compiled = Some(Ok(t1.elapsed()));
                }
                // The quick version stays: correct, slower.
                Err(e) => compiled = Some(Err(e.to_string())),
            }
        }
        let netpes = setup.rebuild.manifest.netpes.len();
        // Only the newest version's programs stay verified in memory.
        let running: std::collections::HashSet<&netil::Module> =
            setup.rebuild.manifest.netpes.iter().filter_map(|n| n.module.as_ref()).collect();
        setup.verified.retain(|m, _| running.contains(m));
        Ok(Installed { epoch, first, build: build_time, compiled, netpes, data_carried, copros_carried })
    }

    /// Waits until a batch runs on version `epoch` or a later one (a
    /// worker that finds several new versions takes the newest), at most
    /// `timeout`: the time from the request that made that version to the
    /// batch, or `None` if no batch ran on them in time (nothing runs).
    pub fn wait_running(&self, epoch: u64, timeout: Duration) -> Option<Duration> {
        let deadline = Instant::now() + timeout;
        loop {
            let live = self.live.upgrade()?;
            if let Some((_, d)) = lock(&live.latencies).range(epoch..).next() {
                return Some(*d);
            }
            // Not installed, or nothing runs to take it.
            if epoch > live.newest() || lock(&live.run).is_none() {
                return None;
            }
            drop(live);
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

/// [`crate::datapath::stats`] of `m`, whose NetPEs are `netpes`.
fn datapath_stats(m: &Manifest, stats: &AppStats, netpes: &[PeRecord]) -> Vec<crate::datapath::DataPathStats> {
    crate::datapath::stats(m, stats, &|name| netpes.iter().find(|r| r.name == name).map(|r| &r.module))
}

/// The manifest `change` makes of `m`.
fn edit(m: &Manifest, change: Change, modules: &HashMap<String, netil::Module>) -> Result<Manifest, ControlError> {
    let bad = |s: String| Err(ControlError::Bad(s));
    let mut m = m.clone();
    let has = |m: &Manifest, name: &str| m.netpes.iter().any(|n| n.name == name);
    let program = |p: ProgramRef| -> Result<(std::path::PathBuf, Option<netil::Module>), ControlError> {
        match p {
            ProgramRef::File(path) => {
                // Relative to the working directory of the caller, as on the command line.
                let path = std::path::absolute(&path).unwrap_or(path);
                Ok((path, None))
            }
            ProgramRef::Module(name) => match modules.get(&name) {
                Some(module) => Ok((std::path::PathBuf::from(format!("module:{name}")), Some(module.clone()))),
                None => Err(ControlError::Bad(format!("no module `{name}` is loaded"))),
            },
        }
    };
    match change {
        Change::AddNetPe { name, program: p, copro, args } => {
            if has(&m, &name) {
                return bad(format!("NetPE `{name}` exists already"));
            }
            if name.is_empty() || name.contains(['.', ':']) || name.chars().any(char::is_whitespace) {
                return bad(format!("`{name}` is not a NetPE name (no dots, colons or spaces)"));
            }
            let (program, module) = program(p)?;
            m.netpes.push(NetPeSpec { name, program, copro, args, module });
        }
        Change::RemoveNetPe { name } => {
            if !has(&m, &name) {
                return bad(format!("no NetPE `{name}`"));
            }
            let touches = |end: &str| end == name || end.rsplit_once('.').is_some_and(|(n, _)| n == name);
            m.netpes.retain(|n| n.name != name);
            m.connections.retain(|c| !touches(&c.from) && !touches(&c.to));
            m.sources.retain(|s| !touches(&s.to));
            m.sinks.retain(|s| !touches(&s.from));
        }
        Change::Replace { name, program: p } => {
            let (program, module) = program(p)?;
            match m.netpes.iter_mut().find(|n| n.name == name) {
                Some(n) => {
                    n.program = program;
                    n.module = module;
                }
                None => return bad(format!("no NetPE `{name}`")),
            }
        }
        Change::Connect { from, to } => {
            let e = endpoints(&from, &to)?;
            if connected(&m, &e) {
                return bad(format!("{from} is connected to {to} already"));
            }
            match e {
                Ends::Inner(from, to) => m.connections.push(crate::manifest::ConnectSpec { from, to }),
                Ends::Source(port, to) => m.sources.push(crate::manifest::SourceSpec { port, to }),
                Ends::Sink(from, port) => m.sinks.push(crate::manifest::SinkSpec { from, port, file: None }),
            }
        }
        Change::Disconnect { from, to } => {
            let e = endpoints(&from, &to)?;
            if !connected(&m, &e) {
                return bad(format!("{from} is not connected to {to}"));
            }
            match e {
                Ends::Inner(f, t) => m.connections.retain(|c| !(c.from == f && same_input(&c.to, &t))),
                Ends::Source(p, t) => m.sources.retain(|s| !(s.port == p && same_input(&s.to, &t))),
                Ends::Sink(f, p) => m.sinks.retain(|s| !(s.from == f && s.port == p)),
            }
        }
        Change::ReplaceApp { manifest } => m = manifest,
        Change::AddDataPath { spec } => {
            if m.datapaths.is_empty() {
                return bad("the application has no data paths: add one to an engine of [[datapath]]s".into());
            }
            let file = std::path::absolute(&spec.manifest).unwrap_or_else(|_| spec.manifest.clone());
            let sub = Manifest::load_as(&file, false)?;
            crate::datapath::add(&mut m, spec, sub, &file)?;
        }
        Change::RemoveDataPath { name } => {
            crate::datapath::remove(&mut m, &name).map_err(ControlError::Bad)?;
        }
        Change::ReplaceDataPath { name, manifest } => {
            let mut spec = crate::datapath::remove(&mut m, &name).map_err(ControlError::Bad)?;
            let file = std::path::absolute(&manifest).unwrap_or(manifest);
            let sub = Manifest::load_as(&file, false)?;
            spec.manifest = file.clone();
            spec.placed = crate::datapath::Placed::default();
            crate::datapath::add(&mut m, spec, sub, &file)?;
        }
    }
    Ok(m)
}

/// The two ends of a connection.
enum Ends {
    Inner(String, String),
    Source(u16, String),
    Sink(String, u16),
}

fn endpoints(from: &str, to: &str) -> Result<Ends, ControlError> {
    let port = |s: &str, what: &str| -> Result<u16, ControlError> {
        s.parse().map_err(|_| ControlError::Bad(format!("`{what}:{s}`: `{s}` is not a port number")))
    };
    match (from.strip_prefix("in:"), to.strip_prefix("out:")) {
        (Some(_), Some(_)) => Err(ControlError::Bad("an input port cannot be connected to an output port".into())),
        (Some(p), None) => Ok(Ends::Source(port(p, "in")?, to.to_string())),
        (None, Some(p)) => Ok(Ends::Sink(from.to_string(), port(p, "out")?)),
        (None, None) => Ok(Ends::Inner(from.to_string(), to.to_string())),
    }
}

/// `a` and `b` name the same NetPE input (`X` is `X.0`).
fn same_input(a: &str, b: &str) -> bool {
    let full = |s: &str| if s.rsplit_once('.').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) { s.to_string() } else { format!("{s}.0") };
    full(a) == full(b)
}

fn connected(m: &Manifest, e: &Ends) -> bool {
    match e {
        Ends::Inner(f, t) => m.connections.iter().any(|c| &c.from == f && same_input(&c.to, t)),
        Ends::Source(p, t) => m.sources.iter().any(|s| s.port == *p && same_input(&s.to, t)),
        Ends::Sink(f, p) => m.sinks.iter().any(|s| &s.from == f && s.port == *p),
    }
}

/// A coprocessor declaration's configuration in `spec`, as text (equal
/// texts: equal configurations).
fn slot_config(spec: Option<&NetPeSpec>, slot: &str) -> String {
    spec.and_then(|s| s.copro.get(slot)).map_or_else(String::new, |t| format!("{t:?}"))
}

/// Builds `manifest` as the successor of the newest version: plans it,
/// keeps the identities of the state it carries over, compiles it and
/// runs the fresh NetPEs' `.init`; checks it against the run in progress.
/// Programs in `verified` are not verified again, and those verified now
/// are added to it. Returns the version's instance and what it carries over.
fn build(
    live: &Live,
    rebuild: &Rebuild,
    manifest: &Manifest,
    quick: Option<&HashMap<netil::Module, Arc<dyn PeCode>>>,
    verified: &mut HashMap<netil::Module, netvm_verify::Verified>,
) -> Result<(Application, Vec<String>, Vec<String>), ControlError> {
    let newest = live.newest_netpes();
    let old_manifest = &rebuild.manifest;
    // The slot of the running NetPE `name` that declaration `d` of its new program carries over.
    let carried_slot = |name: &str, d: &netil::CoproDecl| -> Option<(&PeRecord, usize)> {
        let old = newest.iter().find(|r| r.name == name)?;
        let oc = old.module.copros.iter().position(|o| o.name == d.name && o.kind == d.kind)?;
        let (old_spec, new_spec) = (old_manifest.netpes.iter().find(|n| n.name == name), manifest.netpes.iter().find(|n| n.name == name));
        (slot_config(old_spec, &d.name) == slot_config(new_spec, &d.name)).then_some((old, oc))
    };
    // A carried instance is not made anew, only stood in for.
    let instead = |name: &str, _: &netil::Module, d: &netil::CoproDecl| -> Option<Box<dyn Coprocessor>> {
        carried_slot(name, d).map(|(old, oc)| Box::new(Vacant::new(&d.kind, old.shares[oc])) as Box<dyn Coprocessor>)
    };
    crate::datapath::check(manifest)?;
    let known = |m: &netil::Module| verified.get(m).cloned();
    let mut plan = Application::plan_with(manifest, &rebuild.registry, rebuild.budget, &instead, &known)?;
    for v in &plan.verified {
        verified.entry(v.module.clone()).or_insert_with(|| v.clone());
    }
    let cal = rebuild.calibration.clone().unwrap_or_else(|| crate::admission::Calibration::builtin(rebuild.engine.name()));
    let workers = lock(&live.run).map_or(1, |r| r.workers);
    crate::admission::check(&plan, manifest, &cal, workers).map_err(ControlError::Bad)?;
    let (mut data_carried, mut copros_carried) = (Vec::new(), Vec::new());
    for (i, name) in plan.names.iter().enumerate() {
        let Some(old) = newest.iter().find(|r| &r.name == name) else { continue };
        let new = &plan.verified[i].module;
        // The same program, or one whose layout takes over the old one's (`.layout ... accepts`).
        let carry_data = old.module == *new || new.interface.accepts_layout(&old.module.interface);
        if carry_data {
            plan.ids[i].data = old.ids.data;
            data_carried.push(name.clone());
        }
        for (c, d) in new.copros.iter().enumerate() {
            if plan.shares.is_alias(i, c) {
                // An alias goes with its owner (checked below): the same declaration, the same target.
                let old_alias = old.module.copros.iter().position(|o| o.name == d.name && o.kind == d.kind);
                let same = old_alias.is_some()
                    && slot_config(old_manifest.netpes.iter().find(|n| &n.name == name), &d.name)
                        == slot_config(manifest.netpes.iter().find(|n| &n.name == name), &d.name);
                if let (true, Some(oc)) = (same, old_alias) {
                    plan.ids[i].copros[c] = old.ids.copros[oc];
                    copros_carried.push(format!("{name}.{}", d.name));
                }
                continue;
            }
            if let Some((_, oc)) = carried_slot(name, d) {
                plan.ids[i].copros[c] = old.ids.copros[oc];
                copros_carried.push(format!("{name}.{}", d.name));
            }
        }
        if !carry_data {
            if let Some(c) = init_copro_use(new).into_iter().find(|&c| newest.iter().any(|r| r.ids.copros.contains(&plan.ids[i].copros[c])))
            {
                return Err(ControlError::Bad(format!(
                    "NetPE `{name}`: its new program's .init uses coprocessor `{}`, whose instance is carried over from the running version, \
                     while its data memory starts afresh: .init would run on a fresh instance and its effect be lost \
                     (declare the data layout compatible, so that .init does not run, or configure the instance differently so that it starts afresh)",
                    new.copros[c].name
                )));
            }
        }
    }
    // A shared instance goes over whole: its owner and aliases all carried, or none.
    for g in &plan.shares.groups {
        let carried = |(pe, c): (usize, usize)| newest.iter().any(|r| r.ids.copros.contains(&plan.ids[pe].copros[c]));
        let owner = carried(g.owner);
        if let Some(&(pe, c)) = g.aliases.iter().find(|&&a| carried(a) != owner) {
            let what = format!("{}.{}", plan.names[pe], plan.copro_names[pe][c]);
            if owner {
                return Err(ControlError::Bad(format!(
                    "`{what}` would share the instance `{}.{}`, which is carried over from the running version: a new NetPE cannot join a running shared instance (replace the application, or configure the owner afresh)",
                    plan.names[g.owner.0], plan.copro_names[g.owner.0][g.owner.1]
                )));
            }
            // The owner starts afresh: so do its aliases.
            for &(pe, c) in &g.aliases {
                plan.ids[pe].copros[c] = crate::app::fresh_id();
            }
            copros_carried.retain(|s| s != &what);
        }
    }
    let cached = |m: &netil::Module| quick.and_then(|q| q.get(m).cloned());
    let prepared: Option<&crate::app::Prepared<'_>> = quick.map(|_| &cached as _);
    let mut template = Application::from_plan_with(plan, rebuild.engine.as_ref(), prepared)?;
    if let Some(shape) = *lock(&live.run) {
        if shape.workers > 1 {
            if Some(template.distribution()) != shape.distribution {
                return Err(ControlError::Bad(format!(
                    "the new version spreads packets over workers by {}, the run by {}: it cannot run in this run",
                    template.distribution().name(),
                    shape.distribution.map_or("-", Distribution::name)
                )));
            }
            // Every worker forks it: each fresh instance must fork.
            template.fork().map_err(ControlError::Build)?;
        }
        if shape.shared_packets && template.writes_packets() {
            return Err(ControlError::Bad(
                "the new version writes packet memory, and this run replays packets from memory without copies: it cannot run in this run"
                    .into(),
            ));
        }
    }
    Ok((template, data_carried, copros_carried))
}

/// The coprocessor slots a module's `.init` handler uses.
fn init_copro_use(m: &netil::Module) -> Vec<usize> {
    let Some(code) = &m.init else { return Vec::new() };
    let Ok(insns) = netil::insn::decode(code) else { return Vec::new() };
    let mut used: Vec<usize> = insns
        .iter()
        .filter(|i| matches!(i.op, Opcode::CoproIn | Opcode::CoproOut | Opcode::CoproInvoke))
        .filter_map(|i| match i.operands {
            netil::insn::Operands::CoproReg { copro, .. } | netil::insn::Operands::CoproOp { copro, .. } => Some(usize::from(copro)),
            _ => None,
        })
        .collect();
    used.sort_unstable();
    used.dedup();
    used
}

#[cfg(test)]
mod tests {
    use super::Boundary;

    fn run(workers: usize, base: u64) -> Boundary {
        Boundary { active: true, base, started: None, each: vec![None; workers], cuts: Vec::new() }
    }

    #[test]
    fn a_version_takes_the_jobs_after_the_last_one_begun() {
        let mut b = run(2, 0);
        assert_eq!(b.begin(0, 0), 0);
        assert_eq!(b.begin(1, 1), 0);
        // Jobs 2 and 3 were read before the install but not begun: they run on it.
        b.cut(1);
        assert_eq!(b.begin(3, 1), 1);
        assert_eq!(b.begin(2, 0), 1);
        // A quick version replaced before any job ran on it.
        b.cut(2);
        b.cut(3);
        assert_eq!(b.cuts.iter().filter(|c| c.1 == 2).count(), 0);
        assert_eq!(b.begin(4, 0), 3);
        assert_eq!(b.begin(5, 1), 3);
    }

    #[test]
    fn a_lagging_worker_keeps_the_versions_its_jobs_need() {
        // Flow distribution: a job's parts have one number and go to every worker.
        let mut b = run(2, 5);
        assert_eq!(b.begin(0, 0), 5);
        assert_eq!(b.begin(1, 0), 5);
        b.cut(6);
        assert_eq!(b.begin(2, 0), 6);
        b.cut(7);
        assert_eq!(b.begin(3, 0), 7);
        // Worker 1 begins its parts of jobs 0 to 3 only now: each on the version of its job.
        assert_eq!(b.begin(0, 1), 5);
        assert_eq!(b.begin(1, 1), 5);
        assert_eq!(b.begin(2, 1), 6);
        assert_eq!(b.begin(3, 1), 7);
        // Every worker is past job 3: the cuts before it are gone.
        assert_eq!(b.base, 7);
        assert!(b.cuts.is_empty(), "{b:?}");
        // Versions never go back along the jobs.
        let mut last = 0;
        for j in 4..100 {
            if j % 7 == 0 {
                b.cut(8 + j);
            }
            let e = b.begin(j, (j % 2) as usize);
            assert!(e >= last);
            last = e;
        }
        assert!(b.cuts.len() <= 2, "{b:?}");
    }

    #[test]
    fn without_a_run_versions_cut_nothing() {
        let mut b = Boundary::default();
        b.cut(3);
        assert!(b.cuts.is_empty());
    }
}
