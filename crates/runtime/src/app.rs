//! A running application: NetPE instances joined port to port.
//!
//! Two ways to run one: an engine that compiles whole applications
//! ([`netvm_vm::graph::LinkedCode`], the JIT with `--link direct|table`)
//! runs each batch in native code; otherwise the runtime walks the graph
//! itself and calls each NetPE's code per exchange buffer (`dispatch`: the
//! reference path, and the interpreter's).

use std::collections::{BTreeMap, HashMap};

use netvm_verify::Verified;
use netvm_vm::graph::{AppGraph, Dest, FlowCounts, LinkedCode, Verdict};
use netvm_vm::{CoproConfig, CoproRegistry, Coprocessor, ExchangeBuffer, FaultKind, Limits, Outcome, Packet, PeCode, PeState, Timestamp};

use crate::manifest::{parse_endpoint, scalar_to_string, Manifest};
use crate::stats::{fault_index, AppStats, PeCounters};
use crate::{program, Engine, RuntimeError};

/// How the NetPEs of a running application are bound together.
enum Binding {
    /// The runtime walks the graph, calling each NetPE's code (index = NetPE).
    Dispatch(Vec<Box<dyn PeCode>>),
    /// The engine compiled the whole application.
    Linked(Box<dyn LinkedCode>),
}

/// A running NetVM application.
pub struct Application {
    graph: AppGraph,
    binding: Binding,
    /// The NetPEs' states (data memory, coprocessors), in manifest order.
    states: Vec<PeState>,
    /// Names of each NetPE's coprocessor instances, in declaration order.
    copro_names: Vec<Vec<String>>,
    /// Per-NetPE counters (the dispatch binding; a linked binding derives them).
    counters: Vec<PeCounters>,
    info_size: usize,
    limits: Limits,
    stats: AppStats,
    /// Exchange buffers out, by application output port (dense; folded into `stats` on demand).
    port_counts: Vec<u64>,
    /// Faults by kind, indexed like `FaultKind::ALL`.
    fault_counts: [u64; FaultKind::ALL.len()],
    work: Vec<Work>,
    info_pool: Vec<Vec<u8>>,
    engine: &'static str,
    link: &'static str,
    /// When the coprocessors are next given a [`Coprocessor::tick`] (aging), in trace time.
    next_tick: Option<Timestamp>,
}

/// One coprocessor instance's statistics: (NetPE, instance name, named values).
pub type CoproStats = (String, String, Vec<(String, u64)>);

/// How often (in packet time) the runtime calls [`Coprocessor::tick`] while traffic runs.
pub const TICK_INTERVAL_NS: u64 = 1_000_000_000;

impl std::fmt::Debug for Application {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Application").field("netpes", &self.states.len()).field("engine", &self.engine).field("link", &self.link).finish()
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
    pub states: Vec<PeState>,
    /// Names of each NetPE's coprocessor instances, in declaration order.
    pub copro_names: Vec<Vec<String>>,
    /// NetPE names, in manifest order.
    pub names: Vec<String>,
    /// Size of the info memory (the largest `.infosize`).
    pub info_size: usize,
    /// The limits handlers run under.
    pub limits: Limits,
}

impl Application {
    /// Resolves a manifest: loads and verifies every program, creates its
    /// coprocessors from `registry`, and checks the graph (known names,
    /// existing ports, no cycle). Nothing is compiled or run.
    pub fn plan(manifest: &Manifest, registry: &CoproRegistry, budget: Option<u64>) -> Result<AppPlan, RuntimeError> {
        let bad = |m: String| RuntimeError::Manifest(m);
        let limits = Limits { budget: budget.or(manifest.budget).unwrap_or(netvm_vm::DEFAULT_BUDGET) };
        if manifest.netpes.is_empty() {
            return Err(bad("the application has no NetPE ([[netpe]])".into()));
        }
        let mut index: HashMap<&str, u32> = HashMap::new();
        let mut verified: Vec<Verified> = Vec::with_capacity(manifest.netpes.len());
        let mut states = Vec::with_capacity(manifest.netpes.len());
        let mut copro_names = Vec::with_capacity(manifest.netpes.len());
        let mut out: Vec<Vec<Vec<Dest>>> = Vec::with_capacity(manifest.netpes.len());
        let mut info_size = 0usize;
        for (i, spec) in manifest.netpes.iter().enumerate() {
            if index.insert(spec.name.as_str(), i as u32).is_some() {
                return Err(bad(format!("NetPE `{}` defined twice", spec.name)));
            }
            let path = manifest.base_dir.join(&spec.program);
            let loaded = match &spec.module {
                Some(m) => program::LoadedProgram { path: spec.program.clone(), module: m.clone(), source_map: None },
                None => program::load_program(&path)?,
            };
            let v = loaded.verify()?;
            let module = &v.module;
            info_size = info_size.max(module.info_size as usize);
            let mut state = PeState::new(module);
            for decl in &module.copros {
                let mut cfg = CoproConfig::new();
                if let Some(t) = spec.copro.get(&decl.name) {
                    for (k, v) in t {
                        let v = scalar_to_string(v)
                            .map_err(|e| bad(format!("NetPE `{}`, coprocessor `{}`, `{k}`: {e}", spec.name, decl.name)))?;
                        cfg.insert(k.clone(), v);
                    }
                }
                let inst = registry.create(&decl.kind, &cfg).map_err(|error| RuntimeError::Copro {
                    netpe: spec.name.clone(),
                    copro: decl.name.clone(),
                    error,
                })?;
                state.copros.push(inst);
            }
            if let Some(unknown) = spec.copro.keys().find(|k| !module.copros.iter().any(|d| &&d.name == k)) {
                return Err(bad(format!("NetPE `{}` configures coprocessor `{unknown}`, which its program does not declare", spec.name)));
            }
            copro_names.push(module.copros.iter().map(|d| d.name.clone()).collect());
            out.push(vec![Vec::new(); module.out_ports as usize]);
            states.push(state);
            verified.push(v);
        }
        let lookup_out = |s: &str, what: &str, out: &[Vec<Vec<Dest>>]| -> Result<(u32, u16), RuntimeError> {
            let (name, port) = parse_endpoint(s, None).map_err(|e| bad(format!("{what}: {e}")))?;
            let &n = index.get(name).ok_or_else(|| bad(format!("{what}: unknown NetPE `{name}`")))?;
            let ports = out[n as usize].len();
            if port as usize >= ports {
                return Err(bad(format!("{what}: NetPE `{name}` has {ports} output port(s), so `{s}` does not exist")));
            }
            Ok((n, port))
        };
        let lookup_in = |s: &str, what: &str| -> Result<Dest, RuntimeError> {
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
        let graph = AppGraph { out, sources, sink_ports, order };
        let names = manifest.netpes.iter().map(|n| n.name.clone()).collect();
        Ok(AppPlan { graph, verified, states, copro_names, names, info_size, limits })
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
        let bad = |m: String| RuntimeError::Manifest(m);
        let AppPlan { graph, verified, states, copro_names, names, info_size, limits } = Application::plan(manifest, registry, budget)?;
        let wired = graph.wired_inputs();
        let counters = manifest
            .netpes
            .iter()
            .zip(&verified)
            .zip(&wired)
            .map(|((spec, v), w)| PeCounters::new(&spec.name, v.module.out_ports, *w))
            .collect();
        let binding = match engine.link(&graph, &verified, &limits) {
            Some(linked) => Binding::Linked(linked.map_err(|e| bad(format!("linking the application: {e}")))?),
            None => {
                let mut codes = Vec::with_capacity(verified.len());
                for (spec, v) in manifest.netpes.iter().zip(&verified) {
                    codes.push(engine.prepare(v).map_err(|e| bad(format!("NetPE `{}`: {e}", spec.name)))?);
                }
                Binding::Dispatch(codes)
            }
        };
        let link = match binding {
            Binding::Dispatch(_) => "dispatch",
            Binding::Linked(_) => engine.link_name(),
        };
        let mut app = Application {
            port_counts: vec![0; graph.sink_ports],
            graph,
            binding,
            states,
            copro_names,
            counters,
            info_size,
            limits,
            stats: AppStats::default(),
            fault_counts: [0; FaultKind::ALL.len()],
            work: Vec::new(),
            info_pool: Vec::new(),
            engine: engine.name(),
            link,
            next_tick: None,
        };
        let name = |i: usize| names[i].clone();
        match &mut app.binding {
            Binding::Linked(l) => l.init(&mut app.states).map_err(|(i, outcome)| RuntimeError::Init { netpe: name(i), outcome })?,
            Binding::Dispatch(codes) => {
                for &i in &app.graph.order {
                    match codes[i].init(&mut app.states[i], &app.limits) {
                        Outcome::Exit => {}
                        outcome => return Err(RuntimeError::Init { netpe: name(i), outcome }),
                    }
                }
            }
        }
        Ok(app)
    }

    /// The engine the application runs on.
    pub fn engine(&self) -> &'static str {
        self.engine
    }

    /// How its NetPEs are bound: `direct` or `table` (compiled by the
    /// engine), or `dispatch` (the runtime walks the graph).
    pub fn link(&self) -> &'static str {
        self.link
    }

    /// The application's wiring.
    pub fn graph(&self) -> &AppGraph {
        &self.graph
    }

    /// The limits every handler runs under.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The application input ports that have a source.
    pub fn input_ports(&self) -> Vec<u16> {
        self.graph.sources.iter().enumerate().filter(|(_, d)| !d.is_empty()).map(|(p, _)| p as u16).collect()
    }

    /// Processes a batch of packets in order. `verdicts` receives one entry
    /// per packet; `emit` is called for every exchange buffer that leaves the
    /// application, with its output port, in the order they leave. Each
    /// packet slot holds the (possibly modified) packet afterwards.
    ///
    /// Before the batch, when at least [`TICK_INTERVAL_NS`] of packet time
    /// has passed since the last time (and before the first batch), every
    /// coprocessor gets a [`Coprocessor::tick`] with the time of the batch's
    /// first packet: periodic maintenance such as aging runs while traffic does.
    /// Then every coprocessor gets the batch as a [`Coprocessor::prefetch`] hint.
    pub fn process_batch(&mut self, batch: &mut [Packet], verdicts: &mut Vec<Verdict>, emit: &mut dyn FnMut(u16, &Packet)) {
        if let Some(first) = batch.first() {
            let now = first.ts;
            if self.next_tick.is_none_or(|t| now >= t) {
                self.tick(now);
            }
        }
        for st in &self.states {
            for c in &st.copros {
                c.prefetch(batch);
            }
        }
        if let Binding::Linked(l) = &mut self.binding {
            self.stats.packets += batch.len() as u64;
            l.run(&mut self.states, batch, verdicts, emit);
            return;
        }
        verdicts.clear();
        verdicts.reserve(batch.len());
        for pkt in batch.iter_mut() {
            let v = self.process_one(pkt, emit);
            verdicts.push(v);
        }
    }

    fn process_one(&mut self, pkt: &mut Packet, emit: &mut dyn FnMut(u16, &Packet)) -> Verdict {
        self.stats.packets += 1;
        let Binding::Dispatch(codes) = &self.binding else { unreachable!("dispatch binding") };
        let Some(dests) = self.graph.sources.get(pkt.in_port as usize).filter(|d| !d.is_empty()) else {
            self.stats.dropped += 1;
            self.stats.no_source += 1;
            return Verdict::Drop;
        };
        let mut info = if self.info_size == 0 { Vec::new() } else { self.info_pool.pop().unwrap_or_default() };
        info.clear();
        info.resize(self.info_size, 0);
        let xb = ExchangeBuffer { packet: std::mem::take(pkt), info };
        let mut work = std::mem::take(&mut self.work);
        // `next` carries the buffer along single-destination hops without
        // touching the work stack; only real fan-out pushes copies there.
        let mut next = None;
        fan_out(&mut work, &mut next, dests, xb, true);
        let mut outputs = 0u32;
        let mut copies = dests.len() as u32;
        let mut last = Verdict::Drop;
        while let Some((dest, mut xb, orig)) = next.take().or_else(|| work.pop()) {
            let finished = match dest {
                Dest::Sink(port) => {
                    self.port_counts[port as usize] += 1;
                    emit(port, &xb.packet);
                    outputs += 1;
                    last = Verdict::Output(port);
                    true
                }
                Dest::Pe { node, in_port } => {
                    let node = node as usize;
                    let counters = &mut self.counters[node];
                    counters.count_in(in_port);
                    match codes[node].push(&mut self.states[node], &mut xb, in_port, &self.limits) {
                        Outcome::Forward(p) => {
                            if let Some(c) = counters.packets_out.get_mut(p as usize) {
                                *c += 1;
                            }
                            match self.graph.out[node].get(p as usize) {
                                Some(d) if !d.is_empty() => {
                                    copies += d.len() as u32 - 1;
                                    fan_out(&mut work, &mut next, d, xb, orig);
                                    continue;
                                }
                                _ => {
                                    counters.unconnected += 1;
                                    self.stats.dropped += 1;
                                    last = Verdict::Drop;
                                }
                            }
                        }
                        Outcome::Drop | Outcome::Exit => {
                            counters.dropped += 1;
                            self.stats.dropped += 1;
                            last = Verdict::Drop;
                        }
                        Outcome::Fault(k) => {
                            counters.faults[fault_index(k)] += 1;
                            self.fault_counts[fault_index(k)] += 1;
                            last = Verdict::Fault(k);
                        }
                    }
                    true
                }
            };
            if finished {
                let ExchangeBuffer { packet, info } = xb;
                if orig {
                    *pkt = packet;
                }
                if info.capacity() != 0 {
                    self.info_pool.push(info);
                }
            }
        }
        self.work = work;
        if copies > 1 {
            Verdict::Fanout { outputs }
        } else {
            last
        }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> AppStats {
        let mut s = self.stats.clone();
        match &self.binding {
            Binding::Dispatch(_) => {
                s.ports = self.port_counts.iter().enumerate().filter(|(_, n)| **n != 0).map(|(p, n)| (p as u16, *n)).collect();
                s.faults = FaultKind::ALL.iter().zip(self.fault_counts).filter(|(_, n)| *n != 0).map(|(k, n)| (k.name(), n)).collect();
                s.netpes = self.counters.clone();
            }
            Binding::Linked(l) => self.linked_stats(&mut s, &l.flow()),
        }
        s
    }

    /// Fills `s` from the counts of a linked application (`packets` is counted by the runtime).
    fn linked_stats(&self, s: &mut AppStats, flow: &FlowCounts) {
        let mut faults = [0u64; FaultKind::ALL.len()];
        s.netpes = Vec::with_capacity(flow.nodes.len());
        s.no_source = flow.no_source;
        s.dropped = flow.no_source;
        for (c, f) in self.counters.iter().zip(&flow.nodes) {
            s.dropped += f.dropped + f.unconnected;
            for (t, n) in faults.iter_mut().zip(f.faults) {
                *t += n;
            }
            s.netpes.push(PeCounters {
                name: c.name.clone(),
                packets_in: f.packets_in.clone(),
                packets_out: f.packets_out.clone(),
                dropped: f.dropped,
                unconnected: f.unconnected,
                faults: f.faults,
            });
        }
        s.ports = flow.sinks.iter().enumerate().filter(|(_, n)| **n != 0).map(|(p, n)| (p as u16, *n)).collect();
        s.faults = FaultKind::ALL.iter().zip(faults).filter(|(_, n)| *n != 0).map(|(k, n)| (k.name(), n)).collect();
    }

    /// The state of a NetPE (data memory, coprocessors), for the control plane.
    pub fn netpe_state(&mut self, name: &str) -> Option<&mut PeState> {
        let i = self.counters.iter().position(|c| c.name == name)?;
        self.states.get_mut(i)
    }

    /// Names of the NetPEs in manifest order.
    pub fn netpe_names(&self) -> Vec<&str> {
        self.counters.iter().map(|c| c.name.as_str()).collect()
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
    /// `INSTANCE` when exactly one NetPE declares an instance of that name.
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
            .copro_names
            .iter()
            .enumerate()
            .flat_map(|(pe, names)| names.iter().enumerate().map(move |(i, n)| (pe, i, n.clone())))
            .collect();
        let qualified = |pe: usize, n: &str| format!("{}.{n}", self.counters[pe].name);
        if let Some((pe, i, _)) = all.iter().find(|(pe, _, n)| qualified(*pe, n) == name) {
            return Ok((*pe, *i));
        }
        let matches: Vec<&(usize, usize, String)> = all.iter().filter(|(_, _, n)| n == name).collect();
        match matches.as_slice() {
            [(pe, i, _)] => Ok((*pe, *i)),
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
        for st in &mut self.states {
            for c in st.copros.iter_mut().filter(|c| c.kind() == "linkstate") {
                // A list of port numbers always loads.
                let _ = c.load(&list);
            }
        }
    }

    /// Control plane: loads a table file into the instance `name`; returns the number of entries.
    pub fn load_table(&mut self, name: &str, text: &str) -> Result<usize, String> {
        self.copro_mut(name)?.load(text)
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
    pub fn copro_stats(&self) -> Vec<CoproStats> {
        let mut out = Vec::new();
        for ((c, names), st) in self.counters.iter().zip(&self.copro_names).zip(&self.states) {
            for (name, cp) in names.iter().zip(&st.copros) {
                out.push((c.name.clone(), name.clone(), cp.stats()));
            }
        }
        out
    }

    /// The state of every coprocessor instance, keyed `NETPE.NAME`, for the control plane.
    pub fn copro_dumps(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for ((c, names), st) in self.counters.iter().zip(&self.copro_names).zip(&self.states) {
            for (name, cp) in names.iter().zip(&st.copros) {
                out.insert(format!("{}.{name}", c.name), cp.dump());
            }
        }
        out
    }
}

type Work = (Dest, ExchangeBuffer, bool);

/// Sends `xb` to every destination so that the first destination runs
/// first: copies for all but the last, the buffer itself for the last. The
/// first destination goes to `next` (run immediately), the others onto the
/// work stack in reverse order.
#[inline]
fn fan_out(work: &mut Vec<Work>, next: &mut Option<Work>, dests: &[Dest], xb: ExchangeBuffer, orig: bool) {
    if let [only] = dests {
        *next = Some((*only, xb, orig));
        return;
    }
    let (last, rest) = dests.split_last().expect("non-empty destinations");
    let copies: Vec<ExchangeBuffer> = rest.iter().map(|_| xb.clone()).collect();
    work.push((*last, xb, orig));
    let mut copies = copies.into_iter().zip(rest).rev().peekable();
    while let Some((c, d)) = copies.next() {
        if copies.peek().is_none() {
            *next = Some((*d, c, false));
        } else {
            work.push((*d, c, false));
        }
    }
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
