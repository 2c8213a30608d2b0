//! A built application: NetPE instances joined port to port, ready to run
//! batches.
//!
//! Two ways to run one: an engine that compiles whole applications
//! ([`netvm_vm::graph::LinkedCode`], the JIT with `--link direct|table`)
//! runs each batch in native code; otherwise the runtime walks the graph
//! itself and calls each NetPE's code per exchange buffer (`dispatch`: the
//! reference path, and the interpreter's).
//!
//! An [`Application`] is one worker's instance: its NetPEs' states, its
//! counters, its context over the shared code. [`Application::fork`] makes
//! another worker's instance over the same code; [`Application::absorb`]
//! folds a worker back in at the end of a run, so that statistics and
//! dumps cover every worker.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::capsules::CapsuleStage;
use netil::Mem;
use netvm_capsule::NodeStats;
use netvm_verify::Verified;
use netvm_vm::buffer::{Batch, PacketBuf, PacketPool, PacketPoolConfig};
use netvm_vm::graph::{AppGraph, BatchOutput, Dest, FanoutExit, FlowCounts, LinkedCode, Verdict};
use netvm_vm::{
    CoproConfig, CoproEvent, CoproRegistry, Coprocessor, Engine, EngineError, FaultCounts, Limits, Outcome, Packet, PeCode, PeState,
    TierUp, Timestamp, WorkerShare, XbDesc, XbView,
};

use crate::alias::{Group, Shares};
use crate::distribute::Distribution;
use crate::manifest::{parse_endpoint, scalar_to_string, Manifest};
use crate::stats::{AppStats, PeCounters};
use crate::{program, RuntimeError};

/// How the NetPEs of a running application are bound together.
enum Binding {
    /// The runtime walks the graph, calling each NetPE's code (index = NetPE).
    Dispatch(Arc<[Arc<dyn PeCode>]>),
    /// The engine compiled the whole application.
    Linked(Box<dyn LinkedCode>),
}

/// What every worker's instance of an application shares.
#[derive(Debug)]
struct AppMeta {
    graph: AppGraph,
    names: Vec<String>,
    copro_names: Vec<Vec<String>>,
    info_size: usize,
    engine: &'static str,
    link: &'static str,
    writes_packets: bool,
    writes_data: bool,
    /// Some port or source has several destinations.
    fanout: bool,
    /// The manifest's distribution.
    distribution: Option<Distribution>,
    /// Which coprocessor slots share another NetPE's instance.
    shares: Shares,
    /// Per NetPE: the identities of its state (see [`StateIds`]).
    ids: Vec<StateIds>,
    /// Per NetPE: its program (what the control plane compares a new
    /// version's with).
    modules: Vec<netil::Module>,
    /// Per NetPE, per coprocessor slot: how its instance serves several workers.
    worker_shares: Vec<Vec<WorkerShare>>,
}

/// The identities of one NetPE's state: its data memory's and each of its
/// coprocessor slots'. A new version of a running application
/// (`crate::live`) carries over the state whose identity it keeps, and
/// starts afresh where it has a new one; identities are unique in the
/// process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StateIds {
    /// The data memory.
    pub data: u64,
    /// Each coprocessor slot, in declaration order (an alias slot's handle
    /// has an identity of its own, carried only with its owner's).
    pub copros: Vec<u64>,
}

impl StateIds {
    /// New identities for a NetPE with `copros` coprocessor slots.
    pub(crate) fn fresh(copros: usize) -> StateIds {
        StateIds { data: fresh_id(), copros: (0..copros).map(|_| fresh_id()).collect() }
    }
}

/// An identity no state had before.
pub(crate) fn fresh_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A built NetVM application: one worker's instance (see the module docs).
pub struct Application {
    meta: Arc<AppMeta>,
    binding: Binding,
    /// The limits every handler runs under.
    limits: Limits,
    /// The NetPEs' states (data memory, coprocessors), in manifest order.
    states: Vec<PeState>,
    /// Per-NetPE counters (the dispatch binding; a linked binding derives them).
    counters: Vec<PeCounters>,
    stats: AppStats,
    /// Exchange buffers out, by application output port (dense; folded into `stats` on demand).
    port_counts: Vec<u64>,
    /// Packets in, by application input port, where sources listen on
    /// several (dense; folded into `stats` on demand; empty otherwise).
    input_counts: Vec<u64>,
    /// Faults by kind.
    fault_counts: FaultCounts,
    /// What absorbed workers counted.
    absorbed: AppStats,
    work: Vec<Work>,
    info_pool: Vec<Vec<u8>>,
    exits: Vec<(u16, Option<PacketBuf>)>,
    /// When the coprocessors are next given a [`Coprocessor::tick`] (aging), in trace time.
    next_tick: Option<Timestamp>,
    /// The packet pool and batch of [`Application::process_batch`], made on first use.
    convenience: Option<(PacketPool, Batch, BatchOutput, u64)>,
    /// The version of the running application this instance is (0 until
    /// the control plane installs another, see `crate::live`).
    pub(crate) epoch: u64,
    /// The capsule stage in front of the data path, if the manifest has one.
    capsules: Option<CapsuleStage>,
    /// What the capsule stages of absorbed workers counted.
    capsules_absorbed: NodeStats,
    /// The second tier being compiled, while this instance runs on the first.
    tier: Option<Arc<TierSlot>>,
    /// Time this instance spent running batches on the first tier until
    /// the second tier's compilation started, ns.
    first_tier_ns: u64,
    /// After moving to the second tier: its binding's name, and the packets
    /// this instance ran on the first.
    tiered: Option<(&'static str, u64)>,
    /// What [`Application::reserve`] last asked for (linked code made later gets it too).
    reserved: usize,
}

/// A tiered engine (`--engine tiered`): every NetPE compiled at once by
/// the baseline compiler (microseconds) and the application run on that
/// code while `full` (the JIT) compiles it whole in the background; at the
/// first batch boundary after that, each worker moves to the JIT's code,
/// keeping every data memory, coprocessor and counter
/// ([`Engine::tier_up`]). The compilation starts once a worker has run
/// `after` packets and spent running them `pay_back` times what the
/// baseline compiler took ([`TierUp`]): a run too short to pay for the
/// JIT never compiles it (an IDS rule set's 11 s of Cranelift against a
/// capture of seconds), a long one moves soon. Start-up is the baseline
/// compiler's, throughput soon the JIT's.
pub struct TieredEngine {
    /// The second tier.
    pub full: Arc<dyn Engine>,
    /// Packets a worker runs on the first tier before the second tier's
    /// compilation may start ([`TIER_UP_AFTER`] by default).
    pub after: u64,
    /// The second tier's compile time as a multiple of the first tier's
    /// ([`TIER_UP_PAY_BACK`] by default; 0: start after `after` packets).
    pub pay_back: f64,
}

impl TieredEngine {
    /// `full` as the second tier, compiled once it pays back
    /// ([`TIER_UP_AFTER`], [`TIER_UP_PAY_BACK`]).
    pub fn new(full: Arc<dyn Engine>) -> TieredEngine {
        TieredEngine { full, after: TIER_UP_AFTER, pay_back: TIER_UP_PAY_BACK }
    }
}

impl Engine for TieredEngine {
    fn name(&self) -> &'static str {
        "tiered"
    }

    fn prepare(&self, verified: &Verified) -> Result<Arc<dyn PeCode>, EngineError> {
        match netvm_baseline::BaselineEngine.prepare(verified) {
            // Where there is no baseline compiler, the first tier is the second's per-NetPE code.
            Err(EngineError::Unsupported(_)) => self.full.prepare(verified),
            r => r,
        }
    }

    fn tier_up(&self) -> Option<TierUp> {
        Some(TierUp { engine: Arc::clone(&self.full), after: self.after, pay_back: self.pay_back })
    }
}

/// Packets an application runs on a tiered engine's first tier before the
/// second tier's compilation starts, by default: a short run never pays for it (a
/// 300-packet capture ends before it would), a long one barely waits.
pub const TIER_UP_AFTER: u64 = 4096;

/// Cranelift's compile time as a multiple of the baseline compiler's, by
/// default (BENCHMARKS.md: 25x on the IDS's 20,000 rules, 11-50x on
/// capsules, about 30x on the paper's filters): the time a worker runs
/// packets on the first tier before it starts the second tier's
/// compilation, in units of the first tier's compile time.
pub const TIER_UP_PAY_BACK: f64 = 25.0;

/// What the second tier compiles: its engine and the application.
type TierJob = (Arc<dyn Engine>, AppGraph, Vec<Verified>, Limits);

/// The second tier's code, compiled in the background once some worker has
/// run [`TIER_UP_AFTER`] packets: each worker forks its own instance from
/// it once `ready` is set.
struct TierSlot {
    /// What to compile, until a worker starts it.
    job: Mutex<Option<TierJob>>,
    /// Set by the worker that starts it: the others need not look again.
    started: AtomicBool,
    /// Packets a worker runs before it starts the compilation.
    after: u64,
    /// Time a worker spends running packets on the first tier before it
    /// starts the compilation (the second tier's estimated compile time), ns.
    after_ns: u64,
    ready: AtomicBool,
    code: Mutex<Option<Box<dyn LinkedCode>>>,
    link: &'static str,
}

impl TierSlot {
    fn new(up: TierUp, first_ns: u64, graph: AppGraph, verified: Vec<Verified>, limits: Limits) -> Arc<TierSlot> {
        let link = up.engine.link_name();
        let after_ns = (first_ns as f64 * up.pay_back.max(0.0)) as u64;
        let job = Mutex::new(Some((up.engine, graph, verified, limits)));
        Arc::new(TierSlot {
            job,
            started: AtomicBool::new(false),
            after: up.after,
            after_ns,
            ready: AtomicBool::new(false),
            code: Mutex::new(None),
            link,
        })
    }

    /// Starts compiling on a thread of its own, unless that has been done.
    fn start(self: &Arc<TierSlot>) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some((engine, graph, verified, limits)) = self.job.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() else {
            return;
        };
        let s = Arc::clone(self);
        let started = std::thread::Builder::new().name("netvm-tier-up".into()).spawn(move || {
            // An engine that does not link, or fails to, leaves the
            // application on its first tier, which is correct, only slower.
            if let Some(Ok(code)) = engine.link(&graph, &verified, &limits) {
                *s.code.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(code);
                s.ready.store(true, Ordering::Release);
            }
        });
        drop(started);
    }
}

/// What [`Application::plan_with`] asks for a coprocessor slot (NetPE name,
/// program, declaration): an instance to use instead of a new one.
pub(crate) type StandIn<'a> = dyn Fn(&str, &netil::Module, &netil::CoproDecl) -> Option<Box<dyn Coprocessor>> + 'a;

/// What [`Application::plan_with`] asks for a program: its verification,
/// done before (the control plane keeps the running programs').
pub(crate) type Known<'a> = dyn Fn(&netil::Module) -> Option<Verified> + Sync + 'a;

/// What [`Application::from_plan_with`] asks for a program: its code, compiled before.
pub(crate) type Prepared<'a> = dyn Fn(&netil::Module) -> Option<Arc<dyn PeCode>> + 'a;

/// One coprocessor instance's statistics: (NetPE, instance name, named values).
pub type CoproStats = (String, String, Vec<(String, u64)>);

/// How often (in packet time) the runtime calls [`Coprocessor::tick`] while traffic runs.
pub const TICK_INTERVAL_NS: u64 = 1_000_000_000;

impl std::fmt::Debug for Application {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Application")
            .field("netpes", &self.states.len())
            .field("engine", &self.meta.engine)
            .field("link", &self.meta.link)
            .finish()
    }
}

/// A resolved application, before any code exists: what
/// [`Application::plan`] returns, and what ahead-of-time compilation takes.
#[derive(Debug)]
pub struct AppPlan {
    /// The wiring.
    pub graph: AppGraph,
    /// Every NetPE's verified module, in manifest order.
    pub verified: Vec<Verified>,
    /// Every NetPE's fresh state (data memory, coprocessors), in manifest order.
    /// A declaration the manifest binds to another NetPE's instance
    /// (`instance = "NETPE.NAME"`) holds a handle on that instance, as the
    /// owner's does: keep the states together, and run them on one thread
    /// at a time, as an engine does.
    pub states: Vec<PeState>,
    /// Names of each NetPE's coprocessor instances, in declaration order.
    pub copro_names: Vec<Vec<String>>,
    /// NetPE names, in manifest order.
    pub names: Vec<String>,
    /// Size of the info memory (the largest `.infosize`).
    pub info_size: usize,
    /// The limits handlers run under.
    pub limits: Limits,
    /// How the manifest asks packets to be spread over workers, if it does.
    pub distribution: Option<Distribution>,
    /// Which coprocessor slots share another NetPE's instance
    /// (`instance = "NETPE.NAME"`): their handles in `states` reach the
    /// owner's instance, so the states of a plan go (and run) together.
    pub(crate) shares: Shares,
    /// Per NetPE, the identities of its state: fresh ones from
    /// [`Application::plan`]; the control plane keeps those of state it
    /// carries over.
    pub(crate) ids: Vec<StateIds>,
    /// The capsule stage the manifest's `[capsules]` asks for.
    pub capsules: Option<CapsuleStage>,
}

impl Application {
    /// Resolves a manifest: loads and verifies every program, creates its
    /// coprocessors from `registry` (one instance per declaration, but for
    /// those the manifest points at another NetPE's instance, see
    /// [`crate::manifest`]), and checks the graph (known names, existing
    /// ports, no cycle). Nothing is compiled or run.
    pub fn plan(manifest: &Manifest, registry: &CoproRegistry, budget: Option<u64>) -> Result<AppPlan, RuntimeError> {
        Application::plan_with(manifest, registry, budget, &|_, _, _| None, &|_| None)
    }

    /// [`Application::plan`], but a coprocessor slot for which `instead`
    /// (given the NetPE's name, its program and the declaration) returns
    /// an instance gets that one rather than a new one from the registry
    /// (the control plane's stand-in for an instance it carries over), and
    /// a program `known` has verified before is not verified again.
    pub(crate) fn plan_with(
        manifest: &Manifest,
        registry: &CoproRegistry,
        budget: Option<u64>,
        instead: &StandIn<'_>,
        known: &Known<'_>,
    ) -> Result<AppPlan, RuntimeError> {
        let bad = |m: String| RuntimeError::Manifest(m);
        let limits = Limits { budget: budget.or(manifest.budget).unwrap_or(netvm_vm::DEFAULT_BUDGET) };
        if manifest.netpes.is_empty() {
            return Err(bad("the application has no NetPE ([[netpe]])".into()));
        }
        let mut index: HashMap<&str, u32> = HashMap::new();
        let mut verified: Vec<Verified> = Vec::with_capacity(manifest.netpes.len());
        // Per NetPE, per declaration: the instance, or `None` for one that
        // names another NetPE's instance (bound once every NetPE is known).
        let mut copros: Vec<Vec<Option<Box<dyn Coprocessor>>>> = Vec::with_capacity(manifest.netpes.len());
        // (NetPE, declaration, `OWNER.INSTANCE`) of every such declaration.
        let mut aliases: Vec<(usize, usize, String)> = Vec::new();
        let mut copro_names = Vec::with_capacity(manifest.netpes.len());
        let mut out: Vec<Vec<Vec<Dest>>> = Vec::with_capacity(manifest.netpes.len());
        let mut info_size = 0usize;
        // Loading and verifying the programs is independent work: on as
        // many threads as the host has (large applications, such as an IDS
        // over thousands of rules, have megabytes of code); the results are
        // taken in order below, so errors come in the same order.
        let load = |spec: &crate::manifest::NetPeSpec| {
            let loaded = match &spec.module {
                Some(m) => match known(m) {
                    Some(v) => return Ok(v),
                    None => program::LoadedProgram { path: spec.program.clone(), module: m.clone(), source_map: None },
                },
                None => program::load_program(&manifest.base_dir.join(&spec.program))?,
            };
            match known(&loaded.module) {
                Some(v) => Ok(v),
                None => loaded.verify(),
            }
        };
        // Programs verified before (the running ones, for a change of a
        // running application) are taken as they are; only the others are
        // loaded and verified, in parallel.
        let mut known_now: Vec<Option<Verified>> = manifest.netpes.iter().map(|spec| spec.module.as_ref().and_then(known)).collect();
        let todo: Vec<&crate::manifest::NetPeSpec> =
            manifest.netpes.iter().zip(&known_now).filter(|(_, k)| k.is_none()).map(|(s, _)| s).collect();
        let mut fresh = crate::parallel::map_ordered(&todo, 1, |spec| load(spec)).into_iter();
        let mut loaded = known_now.iter_mut().map(|k| match k.take() {
            Some(v) => Ok(v),
            None => fresh.next().expect("one result per program to load"),
        });
        for (i, spec) in manifest.netpes.iter().enumerate() {
            if index.insert(spec.name.as_str(), i as u32).is_some() {
                return Err(bad(format!("NetPE `{}` defined twice", spec.name)));
            }
            let v = loaded.next().expect("one result per NetPE")?;
            let module = &v.module;
            info_size = info_size.max(module.info_size as usize);
            if let Some(unknown) = spec.copro.keys().find(|k| !module.copros.iter().any(|d| &&d.name == k)) {
                return Err(bad(format!("NetPE `{}` configures coprocessor `{unknown}`, which its program does not declare", spec.name)));
            }
            let mut configs: HashMap<&str, CoproConfig> = HashMap::new();
            let mut instances: HashMap<&str, String> = HashMap::new();
            for (name, t) in &spec.copro {
                if let Some(target) = t.get("instance") {
                    let at = |m: String| bad(format!("NetPE `{}`, coprocessor `{name}`: {m}", spec.name));
                    let toml::Value::String(target) = target else {
                        return Err(at(format!("`instance` must be a string \"NETPE.NAME\", found {}", target.type_str())));
                    };
                    if let Some(k) = t.keys().find(|k| *k != "instance") {
                        return Err(at(format!(
                            "`instance` shares the instance `{target}`, configured where it is declared: `{k}` cannot be set here"
                        )));
                    }
                    instances.insert(name.as_str(), target.clone());
                    continue;
                }
                let cfg = configs.entry(name.as_str()).or_default();
                for (k, v) in t {
                    let v = scalar_to_string(v).map_err(|e| bad(format!("NetPE `{}`, coprocessor `{name}`, `{k}`: {e}", spec.name)))?;
                    cfg.insert(k.clone(), v);
                }
            }
            // As `CoproRegistry::instantiate` makes them, but for the
            // declarations that name another NetPE's instance.
            let mut slots = Vec::with_capacity(module.copros.len());
            for (c, d) in module.copros.iter().enumerate() {
                if let Some(target) = instances.get(d.name.as_str()) {
                    aliases.push((i, c, target.clone()));
                    slots.push(None);
                    continue;
                }
                if let Some(instance) = instead(&spec.name, module, d) {
                    slots.push(Some(instance));
                    continue;
                }
                let cfg = configs.get(d.name.as_str()).cloned().unwrap_or_default();
                let instance = registry.create(&d.kind, &cfg).map_err(|error| RuntimeError::Copro {
                    netpe: spec.name.clone(),
                    copro: d.name.clone(),
                    error,
                })?;
                slots.push(Some(instance));
            }
            copro_names.push(module.copros.iter().map(|d| d.name.clone()).collect());
            out.push(vec![Vec::new(); module.out_ports as usize]);
            copros.push(slots);
            verified.push(v);
        }
        let names: Vec<String> = manifest.netpes.iter().map(|n| n.name.clone()).collect();
        let shares = resolve_shares(&aliases, &copros, &verified, &index, &names)?;
        shares.bind(&mut copros, &names);
        let mut states = Vec::with_capacity(verified.len());
        for ((v, slots), spec) in verified.iter().zip(copros).zip(&manifest.netpes) {
            let mut st = PeState::new(&v.module);
            st.copros = slots.into_iter().map(|c| c.expect("every slot bound")).collect();
            set_args(&mut st.data, &v.module.interface, &spec.args).map_err(|e| bad(format!("NetPE `{}`: {e}", spec.name)))?;
            states.push(st);
        }
        // `NETPE.NAME` for a port the NetPE's program names (`.inport`, `.outport`).
        let by_name = |s: &str, outputs: bool| -> String {
            let Some((pe, port)) = s.rsplit_once('.') else { return s.to_string() };
            if port.parse::<u16>().is_ok() {
                return s.to_string();
            }
            let Some(&n) = index.get(pe) else { return s.to_string() };
            let i = &verified[n as usize].module.interface;
            let named = if outputs { &i.outputs } else { &i.inputs };
            named.iter().find(|(name, _)| name == port).map_or_else(|| s.to_string(), |(_, p)| format!("{pe}.{p}"))
        };
        let lookup_out = |s: &str, what: &str, out: &[Vec<Vec<Dest>>]| -> Result<(u32, u16), RuntimeError> {
            let s = &by_name(s, true);
            let (name, port) = parse_endpoint(s, None).map_err(|e| bad(format!("{what}: {e}")))?;
            let &n = index.get(name).ok_or_else(|| bad(format!("{what}: unknown NetPE `{name}`")))?;
            let ports = out[n as usize].len();
            if port as usize >= ports {
                return Err(bad(format!("{what}: NetPE `{name}` has {ports} output port(s), so `{s}` does not exist")));
            }
            Ok((n, port))
        };
        let lookup_in = |s: &str, what: &str| -> Result<Dest, RuntimeError> {
            let s = &by_name(s, false);
            let (name, in_port) = parse_endpoint(s, Some(0)).map_err(|e| bad(format!("{what}: {e}")))?;
            let &node = index.get(name).ok_or_else(|| bad(format!("{what}: unknown NetPE `{name}`")))?;
            Ok(Dest::Pe { node, in_port })
        };
        for c in &manifest.connections {
            let (n, p) = lookup_out(&c.from, "connect.from", &out)?;
            let d = lookup_in(&c.to, "connect.to")?;
            out[n as usize][p as usize].push(d);
        }
        for s in &manifest.sinks {
            let (n, p) = lookup_out(&s.from, "sink.from", &out)?;
            out[n as usize][p as usize].push(Dest::Sink(s.port));
        }
        let mut sources: Vec<Vec<Dest>> = Vec::new();
        for s in &manifest.sources {
            let p = s.port as usize;
            if sources.len() <= p {
                sources.resize(p + 1, Vec::new());
            }
            sources[p].push(lookup_in(&s.to, "source.to")?);
        }
        if sources.iter().all(Vec::is_empty) {
            return Err(bad("the application has no source ([[source]])".into()));
        }
        let order = topological_order(&out, manifest)?;
        let sink_ports = manifest.sinks.iter().map(|s| s.port as usize + 1).max().unwrap_or(0);
        let walk_shapes = states.iter().map(|st| st.copros.iter().map(|c| c.walk_shape()).collect()).collect();
        let graph = AppGraph { out, sources, sink_ports, order, walk_shapes };
        let distribution = match manifest.distribution.as_deref() {
            None => None,
            Some(d) => {
                Some(Distribution::from_name(d).ok_or_else(|| bad(format!("distribution `{d}` is neither `flow` nor `round-robin`")))?)
            }
        };
        let ids = verified.iter().map(|v| StateIds::fresh(v.module.copros.len())).collect();
        let capsules = manifest
            .capsules
            .as_deref()
            .map(|c| CapsuleStage::from_spec(c, &manifest.base_dir))
            .transpose()
            .map_err(RuntimeError::Manifest)?;
        Ok(AppPlan { graph, verified, states, copro_names, names, info_size, limits, distribution, shares, ids, capsules })
    }

    /// Builds an application: [`Application::plan`], then compiles it with
    /// `engine` (the whole application if the engine links applications,
    /// else each NetPE) and runs every `.init` handler in topological order.
    pub fn build(
        manifest: &Manifest,
        engine: &dyn Engine,
        registry: &CoproRegistry,
        budget: Option<u64>,
    ) -> Result<Application, RuntimeError> {
        let plan = Application::plan(manifest, registry, budget)?;
        Application::from_plan(plan, engine)
    }

    /// Compiles a plan with `engine` and runs every `.init` handler.
    pub fn from_plan(plan: AppPlan, engine: &dyn Engine) -> Result<Application, RuntimeError> {
        Application::from_plan_with(plan, engine, None)
    }

    /// [`Application::from_plan`]; with `prepared`, bound by the runtime's
    /// graph walk (`dispatch`) over each NetPE's code: `prepared` gives the
    /// code of a program the engine compiled before (the control plane's
    /// quick versions, `crate::live`), the engine prepares the others.
    pub(crate) fn from_plan_with(plan: AppPlan, engine: &dyn Engine, prepared: Option<&Prepared<'_>>) -> Result<Application, RuntimeError> {
        let AppPlan { graph, verified, states, copro_names, names, info_size, limits, distribution, shares, ids, capsules } = plan;
        let wired = graph.wired_inputs();
        let out_ports: Vec<u16> = verified.iter().map(|v| v.module.out_ports).collect();
        let counters = names.iter().zip(&out_ports).zip(&wired).map(|((n, o), w)| PeCounters::new(n, *o, *w)).collect();
        let linked = if prepared.is_some() { None } else { engine.link(&graph, &verified, &limits) };
        let tier_up = match (&linked, prepared) {
            (None, None) => engine.tier_up(),
            _ => None,
        };
        let compiling = Instant::now();
        let binding = match linked {
            Some(linked) => Binding::Linked(linked.map_err(|error| RuntimeError::Engine { netpe: None, error })?),
            None => {
                let codes = match prepared {
                    None => {
                        engine.prepare_all(&verified).map_err(|(i, error)| RuntimeError::Engine { netpe: Some(names[i].clone()), error })?
                    }
                    Some(cached) => verified
                        .iter()
                        .enumerate()
                        .map(|(i, v)| match cached(&v.module) {
                            Some(code) => Ok(code),
                            None => engine.prepare(v).map_err(|error| RuntimeError::Engine { netpe: Some(names[i].clone()), error }),
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                };
                Binding::Dispatch(codes.into())
            }
        };
        let link = match binding {
            Binding::Dispatch(_) => "dispatch",
            Binding::Linked(_) => engine.link_name(),
        };
        // The capsule stage writes the capsules it forwards (hops, scratchpad).
        let writes_packets = capsules.is_some() || verified.iter().any(|v| v.push.writes(Mem::Packet));
        let writes_data = verified.iter().any(|v| v.push.writes(Mem::Data));
        // The second tier takes the verified modules (their decoded
        // segments are what it compiles); the application keeps the modules.
        let first_ns = compiling.elapsed().as_nanos() as u64;
        let (modules, tier) = match tier_up {
            Some(up) => {
                (verified.iter().map(|v| v.module.clone()).collect(), Some(TierSlot::new(up, first_ns, graph.clone(), verified, limits)))
            }
            None => (verified.into_iter().map(|v| v.module).collect(), None),
        };
        let worker_shares = states.iter().map(|s| s.copros.iter().map(|c| c.share()).collect()).collect();
        let meta = AppMeta {
            distribution,
            fanout: graph.has_fanout(),
            graph,
            names,
            copro_names,
            info_size,
            engine: engine.name(),
            link,
            writes_packets,
            writes_data,
            shares,
            ids,
            modules,
            worker_shares,
        };
        let mut app = Application::instance(Arc::new(meta), binding, limits, states, counters);
        app.capsules = capsules;
        app.tier = tier;
        let meta = Arc::clone(&app.meta);
        let name = |i: usize| meta.names[i].clone();
        match &mut app.binding {
            Binding::Linked(l) => l.init(&mut app.states).map_err(|(i, outcome)| RuntimeError::Init { netpe: name(i), outcome })?,
            Binding::Dispatch(codes) => {
                for &i in &meta.graph.order {
                    match codes[i].init(&mut app.states[i], &app.limits) {
                        // Statistics count what packets consume, as linked code does.
                        Outcome::Exit => app.states[i].budget_used = 0,
                        outcome => return Err(RuntimeError::Init { netpe: name(i), outcome }),
                    }
                }
            }
        }
        Ok(app)
    }

    fn instance(meta: Arc<AppMeta>, binding: Binding, limits: Limits, states: Vec<PeState>, counters: Vec<PeCounters>) -> Application {
        Application {
            limits,
            port_counts: vec![0; meta.graph.sink_ports],
            input_counts: if meta.graph.sources.len() > 1 { vec![0; meta.graph.sources.len()] } else { Vec::new() },
            meta,
            binding,
            states,
            counters,
            stats: AppStats::default(),
            fault_counts: FaultCounts::default(),
            absorbed: AppStats::default(),
            work: Vec::new(),
            info_pool: Vec::new(),
            exits: Vec::new(),
            next_tick: None,
            convenience: None,
            epoch: 0,
            capsules: None,
            capsules_absorbed: NodeStats::default(),
            tier: None,
            first_tier_ns: 0,
            tiered: None,
            reserved: 0,
        }
    }

    /// Another worker's instance over the same code: the NetPEs' data
    /// memories as they are now, every coprocessor forked
    /// ([`Coprocessor::fork`]), counters at zero. An instance several
    /// NetPEs share is forked once, through its owner, and shared by the
    /// fork's NetPEs in the same way.
    pub fn fork(&mut self) -> Result<Application, RuntimeError> {
        let meta = &self.meta;
        let err = |pe: usize, c: usize, error: String| RuntimeError::Copro {
            netpe: meta.names[pe].clone(),
            copro: meta.copro_names[pe].get(c).cloned().unwrap_or_default(),
            error,
        };
        // Every owned instance first (shared ones included: their owner's
        // handle forks the instance itself), then the fork's aliases, on
        // the fork's instances.
        let mut copros: Vec<Vec<Option<Box<dyn Coprocessor>>>> = Vec::with_capacity(self.states.len());
        for (pe, st) in self.states.iter_mut().enumerate() {
            let mut slots = Vec::with_capacity(st.copros.len());
            for (c, cp) in st.copros.iter_mut().enumerate() {
                slots.push(if meta.shares.is_alias(pe, c) { None } else { Some(cp.fork().map_err(|e| err(pe, c, e))?) });
            }
            copros.push(slots);
        }
        meta.shares.bind(&mut copros, &meta.names);
        let states = self
            .states
            .iter()
            .zip(copros)
            .map(|(st, slots)| PeState {
                data: st.data.clone(),
                copros: slots.into_iter().map(|c| c.expect("every slot bound")).collect(),
                scratch: Vec::new(),
                budget_used: 0,
            })
            .collect();
        let binding = match &self.binding {
            Binding::Dispatch(codes) => Binding::Dispatch(Arc::clone(codes)),
            Binding::Linked(l) => Binding::Linked(l.fork()),
        };
        let counters = self.counters.iter().map(PeCounters::zeroed).collect();
        let mut app = Application::instance(Arc::clone(&self.meta), binding, self.limits, states, counters);
        app.next_tick = self.next_tick;
        app.epoch = self.epoch;
        app.tier = self.tier.clone();
        app.tiered = self.tiered.map(|(link, _)| (link, 0));
        app.capsules = self.capsules.as_mut().map(CapsuleStage::fork).transpose().map_err(RuntimeError::Manifest)?;
        Ok(app)
    }

    /// Makes `next` (this worker's instance of a new version of the
    /// application: the version's own, or a [`fork`](Application::fork) of
    /// it) this worker's instance, carrying over from this one every data
    /// memory and coprocessor instance whose identity `next` keeps
    /// ([`StateIds`]): the instance itself, moved (tables, flows, counters
    /// stay as they are), and the data memory's bytes (a longer new memory
    /// is zero past them; the control plane carries only memories whose
    /// layouts are compatible). Everything else `next` has fresh. What this
    /// instance counted is kept, by NetPE name; state `next` does not carry
    /// over is dropped.
    pub(crate) fn succeed(&mut self, mut next: Application) {
        let mut data: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut copros: HashMap<u64, Box<dyn Coprocessor>> = HashMap::new();
        let mut counted = self.stats();
        for (st, ids) in std::mem::take(&mut self.states).into_iter().zip(&self.meta.ids) {
            data.insert(ids.data, st.data);
            copros.extend(ids.copros.iter().copied().zip(st.copros));
        }
        let meta = Arc::clone(&next.meta);
        for (st, ids) in next.states.iter_mut().zip(&meta.ids) {
            if let Some(mut d) = data.remove(&ids.data) {
                d.resize(st.data.len(), 0);
                st.data = d;
            }
            for (slot, id) in st.copros.iter_mut().zip(&ids.copros) {
                if let Some(cp) = copros.remove(id) {
                    *slot = cp;
                }
            }
        }
        // The counters of NetPEs the new version no longer has go with
        // them; the application's totals stay.
        counted.netpes.retain(|c| meta.names.contains(&c.name));
        next.absorbed.add_by_name(&counted);
        next.next_tick = self.next_tick;
        // The capsule stage (its store, its cache, its counts) stays as it
        // is while a version with one follows another.
        if next.capsules.is_some() {
            if let Some(stage) = self.capsules.take() {
                next.capsules = Some(stage);
                next.capsules_absorbed = std::mem::take(&mut self.capsules_absorbed);
            }
        }
        *self = next;
    }

    /// Folds another worker's instance (a [`fork`](Application::fork) of
    /// this one) back in at the end of a run: its counters add to these, and
    /// its per-worker coprocessor states are absorbed
    /// ([`Coprocessor::absorb`]). Its data memories are dropped: each worker
    /// had its own.
    pub fn absorb(&mut self, mut other: Application) {
        self.absorbed.add_by_name(&other.stats());
        // A worker that moved to the second tier: reported as this instance's move.
        if let Some((link, first)) = other.tiered {
            self.tiered = Some((link, self.tiered.map_or(0, |t| t.1) + first));
        }
        if let Some(c) = other.capsule_stats() {
            self.capsules_absorbed.add(&c);
        }
        for (pe, (mine, theirs)) in self.states.iter_mut().zip(&mut other.states).enumerate() {
            for (c, (a, b)) in mine.copros.iter_mut().zip(&mut theirs.copros).enumerate() {
                // A shared instance is absorbed once, through its owner.
                if a.share() == WorkerShare::PerWorker && !self.meta.shares.is_alias(pe, c) {
                    a.absorb(b.as_mut());
                }
            }
        }
    }

    /// Per NetPE, in manifest order: its name, program, state identities,
    /// and how each of its coprocessor instances serves several workers.
    pub(crate) fn netpe_records(&self) -> impl Iterator<Item = (&str, &netil::Module, &StateIds, &[WorkerShare])> {
        let m = &self.meta;
        m.names.iter().zip(&m.modules).zip(&m.ids).zip(&m.worker_shares).map(|(((n, md), i), w)| (n.as_str(), md, i, w.as_slice()))
    }

    /// What the capsule stage counted (this instance's and the absorbed
    /// workers'), if the application has one.
    pub fn capsule_stats(&self) -> Option<NodeStats> {
        self.capsules.as_ref().map(|c| {
            let mut s = c.stats();
            s.add(&self.capsules_absorbed);
            s
        })
    }

    /// The capsule stage, if the application has one.
    pub fn capsule_stage(&self) -> Option<&CapsuleStage> {
        self.capsules.as_ref()
    }

    /// The engine the application runs on.
    pub fn engine(&self) -> &'static str {
        self.meta.engine
    }

    /// Each NetPE's program and its code, when the runtime walks the graph
    /// (`dispatch`): what the control plane keeps to build quick versions.
    pub(crate) fn prepared_codes(&self) -> Vec<(netil::Module, Arc<dyn PeCode>)> {
        match &self.binding {
            Binding::Dispatch(codes) => self.meta.modules.iter().cloned().zip(codes.iter().cloned()).collect(),
            Binding::Linked(_) => Vec::new(),
        }
    }

    /// How its NetPEs are bound: `direct` or `table` (compiled by the
    /// engine), or `dispatch` (the runtime walks the graph).
    pub fn link(&self) -> &'static str {
        self.tiered.map_or(self.meta.link, |(link, _)| link)
    }

    /// After a tiered engine's second tier took over: how that tier binds
    /// the NetPEs, and the packets this instance ran on the first tier
    /// (with those of the absorbed workers that moved too).
    pub fn tiered(&self) -> Option<(&'static str, u64)> {
        self.tiered
    }

    /// Moves this instance to the second tier's code (a fork of it), at a
    /// batch boundary: the states stay as they are; what was counted so
    /// far is kept as an absorbed instance's counts would be, and the
    /// counters start again under the new binding.
    fn tier_up(&mut self) {
        let Some(slot) = self.tier.take() else { return };
        let Some(mut code) = slot.code.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_ref().map(|c| c.fork()) else {
            return;
        };
        code.reserve(self.reserved);
        let first = self.stats.packets;
        self.absorbed = self.stats();
        self.stats = AppStats::default();
        self.counters = self.counters.iter().map(PeCounters::zeroed).collect();
        self.port_counts.fill(0);
        self.input_counts.fill(0);
        self.fault_counts = FaultCounts::default();
        for st in &mut self.states {
            st.budget_used = 0;
        }
        self.binding = Binding::Linked(code);
        self.tiered = Some((slot.link, first));
    }

    /// The application's wiring.
    pub fn graph(&self) -> &AppGraph {
        &self.meta.graph
    }

    /// The limits every handler runs under.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Changes the limits handlers run under from the next packet on
    /// (this instance's; [`Application::fork`]s take them with them).
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
        if let Binding::Linked(l) = &mut self.binding {
            l.set_limits(&limits);
        }
    }

    /// Whether some `.push` handler may write packet memory (the verifier
    /// knows): if not, packets are processed on bytes other packets may
    /// share (a replayed trace), without a copy.
    pub fn writes_packets(&self) -> bool {
        self.meta.writes_packets
    }

    /// Whether the application keeps state between packets that a worker
    /// holds on its own: a `.push` handler that writes data memory, or a
    /// coprocessor whose state is per worker ([`WorkerShare::PerWorker`]).
    /// Stateless applications give the same results however packets are
    /// spread over workers.
    pub fn keeps_state(&self) -> bool {
        // A capsule stage keeps state too (the store, the code cache).
        self.capsules.is_some()
            || self.meta.writes_data
            || self.states.iter().flat_map(|s| &s.copros).any(|c| c.share() == WorkerShare::PerWorker)
    }

    /// How packets are best spread over several workers: the manifest's
    /// `distribution`, else round robin when the application keeps no state
    /// ([`Application::keeps_state`]) and flow otherwise.
    pub fn distribution(&self) -> Distribution {
        self.meta.distribution.unwrap_or(if self.keeps_state() { Distribution::Flow } else { Distribution::RoundRobin })
    }

    /// Whether some port (of a NetPE or an input) feeds several
    /// destinations, so that packets are copied; without fan-out the graph
    /// walk follows one path a packet.
    pub fn has_fanout(&self) -> bool {
        self.meta.fanout
    }

    /// The application input ports that have a source.
    pub fn input_ports(&self) -> Vec<u16> {
        self.meta.graph.sources.iter().enumerate().filter(|(_, d)| !d.is_empty()).map(|(p, _)| p as u16).collect()
    }

    /// Makes room for batches of up to `packets` packets now (the
    /// engine's context, the graph walk's scratch), so that running them
    /// allocates nothing.
    pub fn reserve(&mut self, packets: usize) {
        self.reserved = packets;
        match &mut self.binding {
            Binding::Linked(l) => l.reserve(packets),
            Binding::Dispatch(_) => {
                let n = self.meta.graph.out.len() + 1;
                self.work.reserve(4 * n);
                self.exits.reserve(4 * n);
                while self.info_pool.len() < 4 * n && self.meta.info_size > 0 {
                    self.info_pool.push(vec![0; self.meta.info_size]);
                }
            }
        }
    }

    /// Processes a batch in order, writing packets in place: `out` receives
    /// a verdict per packet and the exits of duplicated packets (their
    /// copies taken from `pool`). The descriptors' sequence numbers must be
    /// set.
    ///
    /// Before the batch, when at least [`TICK_INTERVAL_NS`] of packet time
    /// has passed since the last time (and before the first batch), every
    /// coprocessor gets a [`Coprocessor::tick`] with the time of the batch's
    /// first packet: periodic maintenance such as aging runs while traffic does.
    pub fn run_batch(&mut self, batch: &mut Batch, pool: &PacketPool, out: &mut BatchOutput) {
        // On the first tier, until the second's compilation starts, the
        // batches are timed (the compilation starts once they paid for it).
        let timed = match &self.tier {
            Some(t) if t.ready.load(Ordering::Acquire) => {
                self.tier_up();
                None
            }
            Some(t) if t.started.load(Ordering::Relaxed) => None,
            Some(t) => {
                if self.stats.packets >= t.after && self.first_tier_ns >= t.after_ns {
                    t.start();
                    None
                } else {
                    Some(Instant::now())
                }
            }
            None => None,
        };
        self.run_batch_on(batch, pool, out);
        if let Some(t) = timed {
            self.first_tier_ns += t.elapsed().as_nanos() as u64;
        }
    }

    fn run_batch_on(&mut self, batch: &mut Batch, pool: &PacketPool, out: &mut BatchOutput) {
        out.clear();
        if let Some(stage) = &mut self.capsules {
            stage.run(batch);
        }
        if let Some(first) = batch.descs.first() {
            let now = first.ts();
            if self.next_tick.is_none_or(|t| now >= t) {
                self.tick(now);
            }
        }
        self.stats.packets += batch.len() as u64;
        if !self.input_counts.is_empty() {
            for d in &batch.descs {
                // A port past the sources' has none: counted as `no_source`.
                if let Some(n) = self.input_counts.get_mut(usize::from(d.in_port)) {
                    *n += 1;
                }
            }
        }
        if let Binding::Linked(l) = &mut self.binding {
            l.run(&mut self.states, batch, pool, out);
            return;
        }
        out.verdicts.reserve(batch.len());
        if self.meta.fanout {
            out.fanout.reserve(2 * batch.len());
        }
        let Application { meta, binding, limits, states, counters, stats, port_counts, fault_counts, work, info_pool, exits, .. } = self;
        let Binding::Dispatch(codes) = binding else { unreachable!("linked bindings returned above") };
        let limits = *limits;
        let mut walk = Walk { meta, codes, limits, states, counters, stats, port_counts, fault_counts, work, info_pool, exits };
        if !meta.fanout {
            // Every packet follows one path through the graph.
            let mut info = walk.info_buffer();
            for d in &batch.descs {
                // SAFETY: the batch holds the memory of its descriptors and
                // is borrowed exclusively; each packet is processed alone.
                let v = unsafe { walk.process_path(d, &mut info) };
                out.verdicts.push(v);
            }
            if info.capacity() != 0 {
                walk.info_pool.push(info);
            }
            return;
        }
        for i in 0..batch.len() {
            let d = batch.descs[i];
            // SAFETY: the batch holds the memory of its descriptors and is
            // borrowed exclusively; packet `i` is processed alone here.
            let v = unsafe { walk.process_one(i as u32, &d, pool, out) };
            out.verdicts.push(v);
        }
    }

    /// Processes owned packets in order, for tests and small programs:
    /// `verdicts` receives one entry per packet; `emit` is called for every
    /// exchange buffer that leaves the application, with its output port,
    /// in the order they leave. Each packet holds the (possibly modified)
    /// packet afterwards. Packets are numbered on from the last call.
    pub fn process_batch(&mut self, packets: &mut [Packet], verdicts: &mut Vec<Verdict>, emit: &mut dyn FnMut(u16, &Packet)) {
        let (pool, mut batch, mut out, mut seq) = self.convenience.take().unwrap_or_else(|| {
            (
                PacketPool::new(PacketPoolConfig { buffers: 1024, jumbo_buffers: 4, ..PacketPoolConfig::default() }),
                Batch::default(),
                BatchOutput::default(),
                0,
            )
        });
        batch.clear();
        for p in packets.iter_mut() {
            // SAFETY: `packets` is borrowed exclusively for the whole call,
            // and the batch is cleared before it returns.
            unsafe { batch.push_external(XbDesc::of(p, seq)) };
            seq += 1;
        }
        self.run_batch(&mut batch, &pool, &mut out);
        batch.clear();
        verdicts.clear();
        let mut exits = out.fanout.iter().peekable();
        for (i, p) in packets.iter().enumerate() {
            let v = out.verdict(i);
            match v {
                Verdict::Output(port) => emit(port, p),
                Verdict::Fanout { .. } => {
                    while let Some(e) = exits.next_if(|e| e.idx == i as u32) {
                        match &e.copy {
                            None => emit(e.port, p),
                            Some(c) => emit(e.port, &Packet { data: c.bytes().to_vec(), ..p.clone() }),
                        }
                    }
                }
                _ => {}
            }
            verdicts.push(v);
        }
        out.clear();
        self.convenience = Some((pool, batch, out, seq));
    }

    /// Moves the events coprocessors recorded since the last call
    /// ([`Coprocessor::drain_events`]) to `out`.
    pub fn drain_events(&mut self, out: &mut Vec<CoproEvent>) {
        for st in &mut self.states {
            for c in &mut st.copros {
                c.drain_events(out);
            }
        }
    }

    /// A snapshot of the counters (of this instance and of every worker it absorbed).
    pub fn stats(&self) -> AppStats {
        let mut s = self.stats.clone();
        s.inputs = self.input_counts.iter().enumerate().filter(|(_, n)| **n != 0).map(|(p, n)| (p as u16, *n)).collect();
        match &self.binding {
            Binding::Dispatch(_) => {
                s.ports = self.port_counts.iter().enumerate().filter(|(_, n)| **n != 0).map(|(p, n)| (p as u16, *n)).collect();
                s.faults = self.fault_counts;
                s.netpes = self.counters.clone();
                for (c, st) in s.netpes.iter_mut().zip(&self.states) {
                    c.flow.budget_used = st.budget_used;
                }
            }
            Binding::Linked(l) => self.linked_stats(&mut s, &l.flow()),
        }
        s.add_by_name(&self.absorbed);
        s
    }

    /// Fills `s` from the counts of a linked application (`packets` is counted by the runtime).
    fn linked_stats(&self, s: &mut AppStats, flow: &FlowCounts) {
        s.netpes = Vec::with_capacity(flow.nodes.len());
        s.no_source = flow.no_source;
        s.dropped = flow.no_source;
        s.faults = FaultCounts::default();
        for (c, f) in self.counters.iter().zip(&flow.nodes) {
            s.dropped += f.dropped + f.unconnected;
            s.faults.add(&f.faults);
            s.netpes.push(PeCounters { name: c.name.clone(), flow: f.clone() });
        }
        s.ports = flow.sinks.iter().enumerate().filter(|(_, n)| **n != 0).map(|(p, n)| (p as u16, *n)).collect();
    }

    /// The state of a NetPE (data memory, coprocessors), for the control plane.
    pub fn netpe_state(&mut self, name: &str) -> Option<&mut PeState> {
        let i = self.meta.names.iter().position(|n| n == name)?;
        self.states.get_mut(i)
    }

    /// The global variable `var` (`.global`) of NetPE `netpe` and the
    /// NetPE's data memory, for the control plane.
    pub(crate) fn global(&mut self, netpe: &str, var: &str) -> Result<(netil::Var, &mut [u8]), String> {
        let i = self.meta.names.iter().position(|n| n == netpe).ok_or_else(|| format!("no NetPE `{netpe}`"))?;
        let globals = &self.meta.modules[i].interface.globals;
        let v = globals.iter().find(|g| g.name == var).cloned().ok_or_else(|| {
            let known: Vec<&str> = globals.iter().map(|g| g.name.as_str()).collect();
            format!("NetPE `{netpe}` has no global `{var}` (.global: {})", if known.is_empty() { "none".into() } else { known.join(", ") })
        })?;
        Ok((v, &mut self.states[i].data))
    }

    /// Names of the NetPEs in manifest order.
    pub fn netpe_names(&self) -> Vec<&str> {
        self.meta.names.iter().map(String::as_str).collect()
    }

    /// The program of NetPE `netpe`.
    pub fn module(&self, netpe: &str) -> Option<&netil::Module> {
        let i = self.meta.names.iter().position(|n| n == netpe)?;
        self.meta.modules.get(i)
    }

    /// Gives every coprocessor a [`Coprocessor::tick`] at time `now`
    /// (aging), and schedules the next one [`TICK_INTERVAL_NS`] later.
    pub fn tick(&mut self, now: Timestamp) {
        for st in &mut self.states {
            for c in &mut st.copros {
                c.tick(now);
            }
        }
        self.next_tick = Some(Timestamp::from_nanos(now.as_nanos().saturating_add(TICK_INTERVAL_NS)));
    }

    /// The coprocessor instance called `name`: `NETPE.INSTANCE`, or just
    /// `INSTANCE` when exactly one NetPE declares an instance of that name
    /// (or when every NetPE that does shares one instance). A NetPE's name
    /// for another NetPE's instance (`instance = "..."` in the manifest)
    /// gives that instance, as its owner's slot.
    pub fn copro_mut(&mut self, name: &str) -> Result<&mut dyn Coprocessor, String> {
        let (pe, i) = self.find_copro(name)?;
        Ok(self.states[pe].copros[i].as_mut())
    }

    /// The coprocessor instance called `name` (see [`Application::copro_mut`]).
    pub fn copro(&self, name: &str) -> Result<&dyn Coprocessor, String> {
        let (pe, i) = self.find_copro(name)?;
        Ok(self.states[pe].copros[i].as_ref())
    }

    fn find_copro(&self, name: &str) -> Result<(usize, usize), String> {
        let all: Vec<(usize, usize, String)> = self
            .meta
            .copro_names
            .iter()
            .enumerate()
            .flat_map(|(pe, names)| names.iter().enumerate().map(move |(i, n)| (pe, i, n.clone())))
            .collect();
        let qualified = |pe: usize, n: &str| format!("{}.{n}", self.meta.names[pe]);
        let owner = |pe: usize, i: usize| self.meta.shares.owner_of(pe, i).unwrap_or((pe, i));
        if let Some((pe, i, _)) = all.iter().find(|(pe, _, n)| qualified(*pe, n) == name) {
            return Ok(owner(*pe, *i));
        }
        let mut matches: Vec<&(usize, usize, String)> = all.iter().filter(|(_, _, n)| n == name).collect();
        // The names of one shared instance name one instance.
        if let Some(&&(pe, i, _)) = matches.first() {
            if matches.iter().all(|m| owner(m.0, m.1) == owner(pe, i)) {
                matches.truncate(1);
            }
        }
        match matches.as_slice() {
            [(pe, i, _)] => Ok(owner(*pe, *i)),
            [] => {
                let known: Vec<String> = all.iter().map(|(pe, _, n)| qualified(*pe, n)).collect();
                Err(format!(
                    "no coprocessor `{name}` in the application (instances: {})",
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                ))
            }
            many => {
                let names: Vec<String> = many.iter().map(|(pe, _, n)| qualified(*pe, n)).collect();
                Err(format!("coprocessor name `{name}` is ambiguous: say which, one of {}", names.join(", ")))
            }
        }
    }

    /// Tells every `linkstate` coprocessor which application ports are up:
    /// those with an input attached (`netvm run` passes its `-r` ports).
    pub fn set_link_state(&mut self, up: &[u16]) {
        let list: String = up.iter().map(|p| format!("{p}\n")).collect();
        for (pe, st) in self.states.iter_mut().enumerate() {
            for (i, c) in st.copros.iter_mut().enumerate() {
                if c.kind() == "linkstate" && !self.meta.shares.is_alias(pe, i) {
                    // A list of port numbers always loads.
                    let _ = c.load(&list);
                }
            }
        }
    }

    /// Control plane: loads a table file into the instance `name`; returns the number of entries.
    pub fn load_table(&mut self, name: &str, text: &str) -> Result<usize, String> {
        self.copro_mut(name)?.load(text)
    }

    /// Control plane: loads several tables, each `(instance name, text)` as
    /// [`Application::load_table`] does, the instances in parallel (on as
    /// many threads as the host has: building pattern matchers and regexes
    /// is what makes a large application slow to start); the tables of one
    /// instance in order. The first error in `tables` order, with the name.
    pub fn load_tables(&mut self, tables: &[(String, String)]) -> Result<(), String> {
        // Each instance's tables, in order; the instances in order of first appearance.
        let mut jobs: Vec<((usize, usize), Vec<usize>)> = Vec::new();
        for (t, (name, _)) in tables.iter().enumerate() {
            let at = self.find_copro(name).map_err(|e| format!("loading {name}: {e}"))?;
            match jobs.iter_mut().find(|(j, _)| *j == at) {
                Some((_, ts)) => ts.push(t),
                None => jobs.push((at, vec![t])),
            }
        }
        let mut instances: Vec<Option<&mut Box<dyn Coprocessor>>> = Vec::new();
        let mut by_at: std::collections::HashMap<(usize, usize), usize> = Default::default();
        for (pe, st) in self.states.iter_mut().enumerate() {
            for (i, c) in st.copros.iter_mut().enumerate() {
                by_at.insert((pe, i), instances.len());
                instances.push(Some(c));
            }
        }
        let mut work: Vec<(&mut Box<dyn Coprocessor>, &[usize])> =
            jobs.iter().map(|(at, ts)| (instances[by_at[at]].take().expect("each instance once"), ts.as_slice())).collect();
        let mut errors: Vec<(usize, String)> = crate::parallel::map_ordered_mut(&mut work, |(copro, ts)| {
            ts.iter().find_map(|&t| {
                let (name, text) = &tables[t];
                copro.load(text).err().map(|e| (t, format!("loading {name}: {e}")))
            })
        })
        .into_iter()
        .flatten()
        .collect();
        errors.sort();
        errors.into_iter().next().map_or(Ok(()), |(_, e)| Err(e))
    }

    /// Control plane: the state of the instance `name`, in its table file format where it has one.
    pub fn dump_table(&self, name: &str) -> Result<String, String> {
        Ok(self.copro(name)?.dump())
    }

    /// Control plane: empties the instance `name` (tables) or zeroes it (counters).
    pub fn clear_table(&mut self, name: &str) -> Result<(), String> {
        self.copro_mut(name)?.clear();
        Ok(())
    }

    /// Every coprocessor instance's named statistics: `(NetPE, instance, stats)` in manifest and declaration order.
    /// An instance several NetPEs share is reported once, under the NetPE that declares it.
    pub fn copro_stats(&self) -> Vec<CoproStats> {
        let mut out = Vec::new();
        for (pe, ((netpe, names), st)) in self.meta.names.iter().zip(&self.meta.copro_names).zip(&self.states).enumerate() {
            for (i, (name, cp)) in names.iter().zip(&st.copros).enumerate() {
                if !self.meta.shares.is_alias(pe, i) {
                    out.push((netpe.clone(), name.clone(), cp.stats()));
                }
            }
        }
        out
    }

    /// The state of every coprocessor instance, keyed `NETPE.NAME`, for the control plane.
    /// An instance several NetPEs share is dumped once, under the NetPE that declares it.
    pub fn copro_dumps(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (pe, ((netpe, names), st)) in self.meta.names.iter().zip(&self.meta.copro_names).zip(&self.states).enumerate() {
            for (i, (name, cp)) in names.iter().zip(&st.copros).enumerate() {
                if !self.meta.shares.is_alias(pe, i) {
                    out.insert(format!("{netpe}.{name}"), cp.dump());
                }
            }
        }
        out
    }
}

/// Writes a NetPE's input arguments (`args` in its manifest entry) into its
/// data memory, each where its program's `.arg` declares it, as a
/// big-endian integer of the declared size.
fn set_args(data: &mut [u8], interface: &netil::Interface, args: &BTreeMap<String, toml::Value>) -> Result<(), String> {
    for (name, value) in args {
        let Some(var) = interface.args.iter().find(|a| &a.name == name) else {
            let known: Vec<&str> = interface.args.iter().map(|a| a.name.as_str()).collect();
            return Err(format!(
                "argument `{name}` is not one its program declares (.arg: {})",
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            ));
        };
        let toml::Value::Integer(v) = value else {
            return Err(format!("argument `{name}` must be an integer, found {}", value.type_str()));
        };
        write_var(data, var, *v).map_err(|e| format!("argument `{name}`: {e}"))?;
    }
    Ok(())
}

/// Writes `value` into the data-memory variable `var` (big-endian, `var.size`
/// bytes): an error if it does not fit (negative values as two's complement).
pub(crate) fn write_var(data: &mut [u8], var: &netil::Var, value: i64) -> Result<(), String> {
    let bits = 8 * var.size;
    let fits = bits >= 64 || (value >= -(1i64 << (bits - 1)) && value < (1i64 << bits));
    if !fits {
        return Err(format!("{value} does not fit in {} bytes", var.size));
    }
    let bytes = value.to_be_bytes();
    let at = var.offset as usize..(var.offset + var.size) as usize;
    data.get_mut(at).ok_or("outside the data memory")?.copy_from_slice(&bytes[8 - var.size as usize..]);
    Ok(())
}

/// Reads the data-memory variable `var` (big-endian, unsigned).
pub(crate) fn read_var(data: &[u8], var: &netil::Var) -> Option<u64> {
    let b = data.get(var.offset as usize..(var.offset + var.size) as usize)?;
    Some(b.iter().fold(0u64, |a, &x| (a << 8) | u64::from(x)))
}

/// The runtime's graph walk over one batch (the `dispatch` binding): the
/// parts of an [`Application`] it reads and writes, borrowed apart.
struct Walk<'a> {
    meta: &'a AppMeta,
    codes: &'a [Arc<dyn PeCode>],
    limits: Limits,
    states: &'a mut [PeState],
    counters: &'a mut [PeCounters],
    stats: &'a mut AppStats,
    port_counts: &'a mut [u64],
    fault_counts: &'a mut FaultCounts,
    work: &'a mut Vec<Work>,
    info_pool: &'a mut Vec<Vec<u8>>,
    exits: &'a mut Vec<(u16, Option<PacketBuf>)>,
}

impl<'a> Walk<'a> {
    /// Runs packet `idx` (descriptor `d`) through the graph; returns its verdict code.
    ///
    /// # Safety
    /// `d` must describe `caplen` writable bytes that nothing else accesses
    /// during the call.
    unsafe fn process_one(&mut self, idx: u32, d: &XbDesc, pool: &PacketPool, out: &mut BatchOutput) -> u32 {
        let (meta, codes) = (self.meta, self.codes);
        let Some(dests) = meta.graph.sources.get(d.in_port as usize).filter(|d| !d.is_empty()) else {
            self.stats.dropped += 1;
            self.stats.no_source += 1;
            return Verdict::Drop.encode();
        };
        let info = self.info_buffer();
        let mut work = std::mem::take(&mut *self.work);
        let mut exits = std::mem::take(&mut *self.exits);
        // `next` carries the buffer along single-destination hops without
        // touching the work stack; only real fan-out pushes copies there.
        let mut next = None;
        let mut copies = dests.len() as u32;
        // SAFETY: the caller's contract for `d`.
        let orig_bytes = unsafe { d.bytes() };
        self.fan_out(&mut work, &mut next, dests, Buf::Orig, info, orig_bytes, pool);
        let mut last = Verdict::Drop;
        while let Some((dest, mut buf, mut info)) = next.take().or_else(|| work.pop()) {
            let finished = match dest {
                Dest::Sink(port) => {
                    self.port_counts[port as usize] += 1;
                    // With one copy in the walk (no fan-out so far, so none
                    // to come: every branch was made by one), this is the
                    // only exit and the verdict says it all.
                    if copies > 1 {
                        exits.push((
                            port,
                            match buf {
                                Buf::Orig => None,
                                Buf::Copy(b) => Some(b),
                            },
                        ));
                        buf = Buf::Orig;
                    }
                    last = Verdict::Output(port);
                    true
                }
                Dest::Pe { node, in_port } => {
                    let node = node as usize;
                    self.counters[node].count_in(in_port);
                    let packet = match &mut buf {
                        // SAFETY: the caller's contract for `d`; no other
                        // borrow of the original bytes is alive while the
                        // handler runs (copies are separate buffers).
                        Buf::Orig => unsafe { d.bytes_mut() },
                        Buf::Copy(b) => b.bytes_mut(),
                    };
                    let mut xb = XbView { packet, wire_len: d.wirelen, ts: d.ts(), seq: d.seq, info: &mut info[..] };
                    let outcome = codes[node].push(&mut self.states[node], &mut xb, in_port, &self.limits);
                    if let Some(ds) = self.forward(node, outcome) {
                        copies += ds.len() as u32 - 1;
                        let bytes: &[u8] = match &buf {
                            // SAFETY: the caller's contract for `d`; the handler
                            // that wrote these bytes has returned.
                            Buf::Orig => unsafe { d.bytes() },
                            Buf::Copy(b) => b.bytes(),
                        };
                        // Copies are made from a snapshot of `bytes` before `buf` moves on.
                        let bytes = bytes as *const [u8];
                        // SAFETY: `bytes` stays valid: `buf` (or the batch) owns it.
                        self.fan_out(&mut work, &mut next, ds, buf, info, unsafe { &*bytes }, pool);
                        continue;
                    }
                    last = self.end(node, outcome);
                    true
                }
            };
            if finished {
                drop(buf);
                if info.capacity() != 0 {
                    self.info_pool.push(info);
                }
            }
        }
        *self.work = work;
        let verdict = if copies > 1 {
            let outputs = exits.len() as u32;
            out.fanout.extend(exits.drain(..).map(|(port, copy)| FanoutExit { idx, port, copy }));
            Verdict::Fanout { outputs }
        } else {
            exits.clear();
            last
        };
        *self.exits = exits;
        verdict.encode()
    }

    /// [`Walk::process_one`] in a graph without fan-out: the packet follows
    /// one path in its own bytes, so the walk needs no work stack, no
    /// copies and no list of exits. `info` is the info memory it uses
    /// (zeroed here, `info_size` bytes); the counters and the verdict are
    /// those of `process_one`.
    ///
    /// # Safety
    /// As [`Walk::process_one`].
    unsafe fn process_path(&mut self, d: &XbDesc, info: &mut [u8]) -> u32 {
        let (meta, codes) = (self.meta, self.codes);
        let Some(&first) = meta.graph.sources.get(d.in_port as usize).and_then(|ds| ds.first()) else {
            self.stats.dropped += 1;
            self.stats.no_source += 1;
            return Verdict::Drop.encode();
        };
        // Not a call to `memset` of no bytes: glibc's AVX-512 one stores
        // through a mask, and a masked store to the dangling address of an
        // empty buffer costs a microcode assist on AMD cores (55 % of a
        // filter's run, `perf record`).
        if !info.is_empty() {
            info.fill(0);
        }
        let mut dest = first;
        loop {
            let (node, in_port) = match dest {
                Dest::Sink(port) => {
                    self.port_counts[port as usize] += 1;
                    return Verdict::Output(port).encode();
                }
                Dest::Pe { node, in_port } => (node as usize, in_port),
            };
            self.counters[node].count_in(in_port);
            // SAFETY: the caller's contract for `d`; the view is the only
            // borrow of the bytes while the handler runs.
            let packet = unsafe { d.bytes_mut() };
            let mut xb = XbView { packet, wire_len: d.wirelen, ts: d.ts(), seq: d.seq, info: &mut *info };
            let outcome = codes[node].push(&mut self.states[node], &mut xb, in_port, &self.limits);
            match self.forward(node, outcome) {
                Some(ds) => dest = ds[0],
                None => return self.end(node, outcome).encode(),
            }
        }
    }

    /// Counts what NetPE `node` did with a packet (`outcome`) and, when it
    /// forwarded it on a port connected to something, returns the
    /// destinations (never empty).
    #[inline(always)]
    fn forward(&mut self, node: usize, outcome: Outcome) -> Option<&'a [Dest]> {
        let Outcome::Forward(p) = outcome else { return None };
        if let Some(c) = self.counters[node].flow.packets_out.get_mut(p as usize) {
            *c += 1;
        }
        self.meta.graph.out[node].get(p as usize).map(Vec::as_slice).filter(|ds| !ds.is_empty())
    }

    /// Counts the end of a packet's walk at NetPE `node` and returns its
    /// verdict: a drop or exit, a fault, or a forward on a port
    /// [`Walk::forward`] found connected to nothing.
    #[inline(always)]
    fn end(&mut self, node: usize, outcome: Outcome) -> Verdict {
        let counters = &mut self.counters[node];
        match outcome {
            Outcome::Forward(_) => {
                counters.flow.unconnected += 1;
                self.stats.dropped += 1;
                Verdict::Drop
            }
            Outcome::Drop | Outcome::Exit => {
                counters.flow.dropped += 1;
                self.stats.dropped += 1;
                Verdict::Drop
            }
            Outcome::Fault(k) => {
                counters.flow.faults.record(k);
                self.fault_counts.record(k);
                Verdict::Fault(k)
            }
        }
    }

    /// Zeroed info memory for a packet or a copy.
    fn info_buffer(&mut self) -> Vec<u8> {
        let mut info = if self.meta.info_size == 0 { Vec::new() } else { self.info_pool.pop().unwrap_or_default() };
        info.clear();
        info.resize(self.meta.info_size, 0);
        info
    }

    /// Sends the buffer to every destination so that the first destination
    /// runs first: copies (from `pool`, with copies of the info memory) for
    /// all but the last, the buffer itself for the last (for all of them
    /// where no NetPE writes packet memory). The first
    /// destination goes to `next` (run immediately), the others onto the
    /// work stack in reverse order.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn fan_out(
        &mut self,
        work: &mut Vec<Work>,
        next: &mut Option<Work>,
        dests: &[Dest],
        buf: Buf,
        info: Vec<u8>,
        bytes: &[u8],
        pool: &PacketPool,
    ) {
        if let [only] = dests {
            *next = Some((*only, buf, info));
            return;
        }
        self.fan_out_many(work, next, dests, buf, info, bytes, pool);
    }

    /// [`Walk::fan_out`] to two destinations or more.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn fan_out_many(
        &mut self,
        work: &mut Vec<Work>,
        next: &mut Option<Work>,
        dests: &[Dest],
        buf: Buf,
        info: Vec<u8>,
        bytes: &[u8],
        pool: &PacketPool,
    ) {
        let (last, rest) = dests.split_last().expect("non-empty destinations");
        let (first, middle) = rest.split_first().expect("at least two destinations");
        // Where no NetPE writes packet memory, nobody can tell a copy from
        // the packet: every destination runs on the packet itself, each
        // with its own info memory (the linked code does the same).
        let shared = !self.meta.writes_packets && matches!(buf, Buf::Orig);
        // Copies are made from `bytes`, the buffer's bytes, which stay where
        // they are while the buffer's handle moves. The first destination
        // runs next, then the middle ones in order, the last one (on the
        // buffer itself) last: the stack holds them in reverse.
        let copy = |shared: bool| if shared { Buf::Orig } else { Buf::Copy(pool.copy_of(bytes)) };
        let mut i0 = self.info_buffer();
        i0.copy_from_slice(&info);
        let b0 = copy(shared);
        work.push((*last, buf, info));
        let base = work.len() - 1;
        for d in middle.iter().rev() {
            let mut i = self.info_buffer();
            i.copy_from_slice(&work[base].2);
            work.push((*d, copy(shared), i));
        }
        *next = Some((*first, b0, i0));
    }
}

/// The buffer an exchange buffer's packet is in while it crosses the graph.
enum Buf {
    /// The packet's own bytes, where its descriptor points.
    Orig,
    /// A copy made at a fan-out.
    Copy(PacketBuf),
}

type Work = (Dest, Buf, Vec<u8>);

/// Checks the manifest's `instance = "OWNER.INSTANCE"` declarations
/// (`aliases`: NetPE, declaration, target) against the NetPEs (`copros`:
/// `None` where a declaration is itself such an alias) and groups them by
/// the instance they share.
fn resolve_shares(
    aliases: &[(usize, usize, String)],
    copros: &[Vec<Option<Box<dyn Coprocessor>>>],
    verified: &[Verified],
    index: &HashMap<&str, u32>,
    names: &[String],
) -> Result<Shares, RuntimeError> {
    let mut shares = Shares { groups: Vec::new(), alias_of: copros.iter().map(|v| vec![None; v.len()]).collect() };
    let targets: HashMap<(usize, usize), &str> = aliases.iter().map(|(pe, c, t)| ((*pe, *c), t.as_str())).collect();
    for (pe, c, target) in aliases {
        let (pe, c) = (*pe, *c);
        let decl = &verified[pe].module.copros[c];
        let at =
            |m: String| RuntimeError::Manifest(format!("NetPE `{}`, coprocessor `{}`: instance `{target}`: {m}", names[pe], decl.name));
        let Some((owner, inst)) = target.rsplit_once('.').filter(|(o, i)| !o.is_empty() && !i.is_empty()) else {
            return Err(at("expected NETPE.NAME (a NetPE and the name its program declares the instance under)".into()));
        };
        let &o = index.get(owner).ok_or_else(|| at(format!("no NetPE `{owner}` in the application")))?;
        let o = o as usize;
        let declared = &verified[o].module.copros;
        let Some(oc) = declared.iter().position(|d| d.name == inst) else {
            let list: Vec<&str> = declared.iter().map(|d| d.name.as_str()).collect();
            return Err(at(format!(
                "NetPE `{owner}` declares no coprocessor `{inst}` (it declares {})",
                if list.is_empty() { "none".to_string() } else { list.join(", ") }
            )));
        };
        if (o, oc) == (pe, c) {
            return Err(at("an instance cannot be its own".into()));
        }
        if let Some(next) = targets.get(&(o, oc)) {
            return Err(at(format!("`{target}` itself shares the instance `{next}`: name that one")));
        }
        if declared[oc].kind != decl.kind {
            return Err(at(format!(
                "`{target}` is a `{}` coprocessor, and this NetPE declares `{}` as `{}`",
                declared[oc].kind, decl.name, decl.kind
            )));
        }
        shares.alias_of[pe][c] = Some((o, oc));
        match shares.groups.iter_mut().find(|g| g.owner == (o, oc)) {
            Some(g) => g.aliases.push((pe, c)),
            None => shares.groups.push(Group { owner: (o, oc), aliases: vec![(pe, c)] }),
        }
    }
    Ok(shares)
}

/// Orders the NetPEs so that every NetPE comes after those feeding it; fails on a cycle, naming it.
fn topological_order(out: &[Vec<Vec<Dest>>], manifest: &Manifest) -> Result<Vec<usize>, RuntimeError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    let succ = |i: usize| -> Vec<usize> {
        out[i]
            .iter()
            .flatten()
            .filter_map(|d| match d {
                Dest::Pe { node, .. } => Some(*node as usize),
                Dest::Sink(_) => None,
            })
            .collect()
    };
    let mut mark = vec![Mark::New; out.len()];
    let mut post = Vec::with_capacity(out.len());
    for root in 0..out.len() {
        if mark[root] != Mark::New {
            continue;
        }
        // Iterative DFS: (node, successors, next successor index).
        let mut stack: Vec<(usize, Vec<usize>, usize)> = vec![(root, succ(root), 0)];
        mark[root] = Mark::Active;
        while let Some(top) = stack.last_mut() {
            if top.2 < top.1.len() {
                let next = top.1[top.2];
                top.2 += 1;
                match mark[next] {
                    Mark::New => {
                        mark[next] = Mark::Active;
                        let s = succ(next);
                        stack.push((next, s, 0));
                    }
                    Mark::Active => {
                        let from = stack.iter().position(|f| f.0 == next).unwrap_or(0);
                        let mut names: Vec<&str> = stack[from..].iter().map(|f| manifest.netpes[f.0].name.as_str()).collect();
                        names.push(&manifest.netpes[next].name);
                        return Err(RuntimeError::Cycle(names.join(" -> ")));
                    }
                    Mark::Done => {}
                }
            } else {
                mark[top.0] = Mark::Done;
                post.push(top.0);
                stack.pop();
            }
        }
    }
    post.reverse();
    Ok(post)
}
