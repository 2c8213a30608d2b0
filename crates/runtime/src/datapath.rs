//! Several isolated data paths in one engine (NetBind §III-C: virtual
//! routers that share a network processor, each with its own modules,
//! state, budget and counters).
//!
//! An engine manifest lists data paths instead of NetPEs:
//!
//! ```toml
//! name = "two-routers"
//!
//! [classifier]                 # optional: selects a data path per packet
//! program = "vnet.nil"         # its output port K feeds the data path with `select = K`
//! inports = [0, 1]             # engine input ports it takes (default [0]); port P enters its input port P
//!
//! [[datapath]]
//! name = "red"                 # its NetPEs are `red/NETPE`
//! manifest = "red/app.toml"    # an application manifest, relative to this file
//! inport = 2                   # selected by input port: its input port P is the engine's 2 + P
//! outport = 0                  # its output port P is the engine's 0 + P (default 0)
//! admission = { line_rate = "10G" }  # what it must keep up with (default: its manifest's [admission])
//!
//! [[datapath]]
//! name = "blue"
//! manifest = "blue/app.toml"
//! select = 1                   # selected by the classifier's output port 1
//! outport = 16
//! ```
//!
//! [`compose`] turns it into one application, so that the engine links
//! and runs every data path together (one function with the JIT; one
//! packet engine, its workers, its control socket). What keeps the data
//! paths apart:
//!
//! - **Names.** Each data path's NetPEs are renamed `DATAPATH/NETPE`, and
//!   its shared coprocessor instances (`instance = "NETPE.INST"`) are
//!   looked for among its own NetPEs only: data memories and coprocessor
//!   instances are never shared between data paths.
//! - **Wiring.** A packet belongs to one data path: two data paths (or one
//!   and the classifier) never take the same engine input port, and no
//!   connection crosses from one data path into another ([`check`], run
//!   on every version the control plane builds). Output ports may be
//!   shared: virtual routers send on the same interfaces.
//! - **Budgets.** Each data path declares its own `[admission]` (line
//!   rate, frames, memory) in its manifest and is admitted on its own
//!   ([`crate::admission::check`]); together they must fit the engine.
//! - **Counters.** [`stats`]: per data path, packets in, packets out by
//!   output port, drops and faults.
//!
//! One execution budget per handler (`budget`) holds for the engine: the
//! engine manifest's, else the largest any data path's manifest declares.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::admission::Headroom;
use crate::manifest::{ConnectSpec, Manifest, NetPeSpec, SinkSpec, SourceSpec};
use crate::stats::AppStats;
use crate::RuntimeError;

/// The name of the classifier's NetPE in a composed application.
pub const CLASSIFIER: &str = "classifier";

/// What separates a data path's name from its NetPEs' in a composed application.
pub const SEPARATOR: char = '/';

/// Largest number of data paths in one engine.
pub const MAX_DATAPATHS: usize = 256;

/// One data path of an engine manifest (`[[datapath]]`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DataPathSpec {
    /// Its name: its NetPEs are `NAME/NETPE`.
    pub name: String,
    /// Its application manifest (relative to the engine manifest's directory).
    pub manifest: PathBuf,
    /// Selected by input port: its input port `P` is the engine's `inport + P`.
    #[serde(default)]
    pub inport: Option<u16>,
    /// Selected by the classifier: the classifier's output port that feeds it.
    #[serde(default)]
    pub select: Option<u16>,
    /// Its output port `P` is the engine's `outport + P` (default 0).
    #[serde(default)]
    pub outport: u16,
    /// What it must keep up with (as a manifest's `[admission]`); by
    /// default its manifest's `[admission]`, if any.
    #[serde(default)]
    pub admission: Option<Headroom>,
    /// What composition found in its manifest: its `[admission]`, its
    /// input and output ports on the engine.
    #[serde(skip)]
    pub placed: Placed,
}

/// Where composition placed a data path (see [`DataPathSpec::placed`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placed {
    /// Its manifest's `[admission]`.
    pub admission: Option<Headroom>,
    /// The engine input ports that feed it (selection by input port).
    pub in_ports: Vec<u16>,
    /// The engine output ports its sinks send on.
    pub out_ports: Vec<u16>,
    /// Its manifest's file, as it was read.
    pub file: PathBuf,
}

impl DataPathSpec {
    /// How packets reach it, as text (`inport 2`, `classifier port 1`).
    pub fn selector(&self) -> String {
        match (self.inport, self.select) {
            (Some(p), _) => format!("inport {p}"),
            (_, Some(k)) => format!("classifier port {k}"),
            _ => "-".into(),
        }
    }

    /// Whether `netpe` is one of its NetPEs.
    pub fn owns(&self, netpe: &str) -> bool {
        owner(netpe) == Some(self.name.as_str())
    }
}

/// The classifier of an engine manifest (`[classifier]`): a NetPE that
/// every packet of its input ports crosses first, whose output port `K`
/// feeds the data path with `select = K`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClassifierSpec {
    /// Its program (relative to the engine manifest's directory).
    pub program: PathBuf,
    /// Its coprocessors' configuration, as a NetPE's.
    #[serde(default)]
    pub copro: BTreeMap<String, BTreeMap<String, toml::Value>>,
    /// Its input arguments, as a NetPE's.
    #[serde(default)]
    pub args: BTreeMap<String, toml::Value>,
    /// The engine input ports it takes (default `[0]`); engine port `P`
    /// enters its input port `P` (`inport` tells it where a packet came in).
    #[serde(default = "classifier_inports")]
    pub inports: Vec<u16>,
}

fn classifier_inports() -> Vec<u16> {
    vec![0]
}

/// The data path a NetPE of a composed application belongs to, if any.
pub fn owner(netpe: &str) -> Option<&str> {
    netpe.split_once(SEPARATOR).map(|(d, _)| d)
}

fn bad(m: String) -> RuntimeError {
    RuntimeError::Manifest(m)
}

/// `NETPE[.PORT]` of a data path's manifest, as its composed name.
fn prefixed(dp: &str, end: &str) -> String {
    format!("{dp}{SEPARATOR}{end}")
}

/// Composes an engine manifest (one with `[[datapath]]`): loads every data
/// path's manifest and adds its NetPEs, connections, sources and sinks
/// under its name, and the classifier, then [`check`]s the result.
pub fn compose(m: &mut Manifest) -> Result<(), RuntimeError> {
    if m.datapaths.is_empty() {
        if m.classifier.is_some() {
            return Err(bad("[classifier] selects among data paths: the manifest has no [[datapath]]".into()));
        }
        return Ok(());
    }
    if !m.netpes.is_empty() || !m.sources.is_empty() || !m.connections.is_empty() || !m.sinks.is_empty() {
        return Err(bad("a manifest with [[datapath]] has no [[netpe]], [[source]], [[connect]] or [[sink]] of its own \
             (each data path's are in its manifest; the classifier is [classifier])"
            .into()));
    }
    if m.admission.is_some() {
        return Err(bad("a manifest with [[datapath]] has no [admission]: each data path declares its own in its manifest".into()));
    }
    if m.datapaths.len() > MAX_DATAPATHS {
        return Err(bad(format!("{} data paths (at most {MAX_DATAPATHS})", m.datapaths.len())));
    }
    if let Some(c) = m.classifier.clone() {
        // Relative to the engine manifest's directory, as any NetPE's of it.
        m.netpes.push(NetPeSpec { name: CLASSIFIER.into(), program: c.program, copro: c.copro, args: c.args, module: None });
        for p in &c.inports {
            m.sources.push(SourceSpec { port: *p, to: format!("{CLASSIFIER}.{p}") });
        }
    }
    let specs = std::mem::take(&mut m.datapaths);
    let explicit_budget = m.budget;
    let explicit_distribution = m.distribution.clone();
    let mut distributions = Vec::new();
    for spec in specs {
        let file = if spec.manifest.is_absolute() { spec.manifest.clone() } else { m.base_dir.join(&spec.manifest) };
        let sub = Manifest::load_as(&file, false)?;
        distributions.push(sub.distribution.clone());
        if explicit_budget.is_none() {
            m.budget = m.budget.max(sub.budget);
        }
        add(m, spec, sub, &file)?;
    }
    if explicit_distribution.is_none() {
        // Flow keeps any data path's per-flow state right; round robin only
        // where every data path asks for it.
        m.distribution = if distributions.iter().any(|d| d.as_deref() == Some("flow")) {
            Some("flow".into())
        } else if distributions.iter().all(|d| d.as_deref() == Some("round-robin")) {
            Some("round-robin".into())
        } else {
            None
        };
    }
    check(m)
}

/// Adds data path `spec`, whose manifest `sub` was read from `file`, to the
/// composed manifest `m` (before [`check`]).
pub fn add(m: &mut Manifest, mut spec: DataPathSpec, sub: Manifest, file: &Path) -> Result<(), RuntimeError> {
    let dp = spec.name.clone();
    if dp.is_empty() || dp.contains(['.', ':', SEPARATOR]) || dp.chars().any(char::is_whitespace) {
        return Err(bad(format!("`{dp}` is not a data path name (no dots, colons, slashes or spaces)")));
    }
    if m.datapaths.iter().any(|d| d.name == dp) {
        return Err(bad(format!("data path `{dp}` defined twice")));
    }
    if !sub.datapaths.is_empty() {
        return Err(bad(format!("data path `{dp}`: {} has data paths of its own (they do not nest)", file.display())));
    }
    let at = |e: String| bad(format!("data path `{dp}` ({}): {e}", file.display()));
    let sub_base = sub.base_dir.clone();
    let sub_base = std::path::absolute(&sub_base).unwrap_or(sub_base);
    for n in sub.netpes {
        let program = if n.module.is_some() || n.program.is_absolute() { n.program } else { sub_base.join(&n.program) };
        let mut copro = n.copro;
        for table in copro.values_mut() {
            if let Some(toml::Value::String(target)) = table.get_mut("instance") {
                *target = prefixed(&dp, target);
            }
        }
        m.netpes.push(NetPeSpec { name: prefixed(&dp, &n.name), program, copro, args: n.args, module: n.module });
    }
    for c in sub.connections {
        m.connections.push(ConnectSpec { from: prefixed(&dp, &c.from), to: prefixed(&dp, &c.to) });
    }
    let admission = spec.admission.clone().or(sub.admission);
    let mut placed = Placed { admission, file: file.to_path_buf(), ..Placed::default() };
    match (spec.inport, spec.select) {
        (Some(_), Some(_)) => return Err(at("give one of `inport` (selected by input port) and `select` (by the classifier)".into())),
        (None, None) => return Err(at("give `inport` (selected by input port) or `select` (by the classifier's output port)".into())),
        (Some(base), None) => {
            for s in &sub.sources {
                let port = base.checked_add(s.port).ok_or_else(|| at(format!("input port {base} + {} is past 65535", s.port)))?;
                m.sources.push(SourceSpec { port, to: prefixed(&dp, &s.to) });
                if !placed.in_ports.contains(&port) {
                    placed.in_ports.push(port);
                }
            }
        }
        (None, Some(k)) => {
            if m.classifier.is_none() {
                return Err(at(format!("`select = {k}` needs a [classifier]")));
            }
            let ports: std::collections::BTreeSet<u16> = sub.sources.iter().map(|s| s.port).collect();
            if ports.len() > 1 {
                return Err(at(format!(
                    "its sources listen on input ports {ports:?}: a data path the classifier selects has one input (select by `inport` instead)"
                )));
            }
            for s in &sub.sources {
                m.connections.push(ConnectSpec { from: format!("{CLASSIFIER}.{k}"), to: prefixed(&dp, &s.to) });
            }
        }
    }
    for s in sub.sinks {
        let port =
            spec.outport.checked_add(s.port).ok_or_else(|| at(format!("output port {} + {} is past 65535", spec.outport, s.port)))?;
        m.sinks.push(SinkSpec { from: prefixed(&dp, &s.from), port, file: s.file });
        if !placed.out_ports.contains(&port) {
            placed.out_ports.push(port);
        }
    }
    placed.in_ports.sort_unstable();
    placed.out_ports.sort_unstable();
    spec.placed = placed;
    m.datapaths.push(spec);
    Ok(())
}

/// Removes data path `name` from a composed manifest: its NetPEs, and
/// every connection, source and sink that touches them.
pub fn remove(m: &mut Manifest, name: &str) -> Result<DataPathSpec, String> {
    let i = m.datapaths.iter().position(|d| d.name == name).ok_or_else(|| format!("no data path `{name}`"))?;
    let spec = m.datapaths.remove(i);
    let mine = |end: &str| spec.owns(end);
    m.netpes.retain(|n| !mine(&n.name));
    m.connections.retain(|c| !mine(&c.from) && !mine(&c.to));
    m.sources.retain(|s| !mine(&s.to));
    m.sinks.retain(|s| !mine(&s.from));
    Ok(spec)
}

/// Checks that a composed manifest keeps its data paths apart: every
/// NetPE but the classifier belongs to a data path; no engine input port
/// feeds two data paths (or one and the classifier); no connection
/// crosses between data paths (the classifier's only into the data path
/// its port selects); a shared coprocessor instance stays within its data
/// path. Manifests without data paths pass.
pub fn check(m: &Manifest) -> Result<(), RuntimeError> {
    if m.datapaths.is_empty() {
        return Ok(());
    }
    // The data path of an end (`NETPE` or `NETPE.PORT`); `None` for the classifier.
    let dp_of = |end: &str| -> Result<Option<String>, RuntimeError> {
        let node = end.rsplit_once('.').filter(|(n, _)| m.netpes.iter().any(|x| x.name == *n)).map_or(end, |(n, _)| n);
        if node == CLASSIFIER && m.classifier.is_some() {
            return Ok(None);
        }
        match owner(node) {
            Some(d) if m.datapaths.iter().any(|s| s.name == d) => Ok(Some(d.to_string())),
            _ => Err(bad(format!("NetPE `{node}` belongs to no data path (name it DATAPATH/NETPE)"))),
        }
    };
    for n in &m.netpes {
        let dp = dp_of(&n.name)?;
        for (slot, table) in &n.copro {
            if let Some(toml::Value::String(target)) = table.get("instance") {
                let target_pe = target.rsplit_once('.').map_or(target.as_str(), |(p, _)| p);
                if dp.is_none() || owner(target_pe) != dp.as_deref() {
                    return Err(bad(format!(
                        "NetPE `{}`, coprocessor `{slot}`: the instance `{target}` is outside its data path (data paths share no state)",
                        n.name
                    )));
                }
            }
        }
    }
    let mut taken: BTreeMap<u16, String> = BTreeMap::new();
    for s in &m.sources {
        let who = dp_of(&s.to)?.map_or_else(|| "the classifier".to_string(), |d| format!("data path `{d}`"));
        if let Some(other) = taken.insert(s.port, who.clone()) {
            if other != who {
                return Err(bad(format!(
                    "engine input port {} would feed both {other} and {who}: a packet belongs to one data path",
                    s.port
                )));
            }
        }
    }
    for c in &m.connections {
        let (from, to) = (dp_of(&c.from)?, dp_of(&c.to)?);
        let ok = match (from, to) {
            (Some(a), Some(b)) => a == b,
            (None, Some(b)) => {
                let k = c.from.rsplit_once('.').and_then(|(_, p)| p.parse::<u16>().ok());
                m.datapaths.iter().any(|d| d.name == b && d.select.is_some() && d.select == k)
            }
            (_, None) => false,
        };
        if !ok {
            return Err(bad(format!(
                "the connection {} -> {} crosses between data paths (each keeps its packets; the classifier feeds the data path its port selects)",
                c.from, c.to
            )));
        }
    }
    Ok(())
}

/// One data path's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DataPathStats {
    /// Its name.
    pub name: String,
    /// How packets reach it ([`DataPathSpec::selector`]).
    pub selector: String,
    /// Packets that entered it.
    pub packets: u64,
    /// Exchange buffers it sent, by engine output port.
    pub ports: BTreeMap<u16, u64>,
    /// Exchange buffers its NetPEs discarded (`drop`, unconnected ports).
    pub dropped: u64,
    /// Faults of its NetPEs (each also dropped its exchange buffer).
    pub faults: u64,
    /// Its NetPEs.
    pub netpes: usize,
}

/// Per data path of the composed manifest `m`, its counters in `s` (the
/// counters of an instance of it, whose NetPEs' programs `module` gives
/// by NetPE name): packets in (the engine input ports that select it, or
/// the classifier's output port), out by engine output port, drops and
/// faults of its NetPEs.
pub fn stats<'a>(m: &Manifest, s: &AppStats, module: &dyn Fn(&str) -> Option<&'a netil::Module>) -> Vec<DataPathStats> {
    let counters = |name: &str| s.netpes.iter().find(|c| c.name == name);
    let classifier = counters(CLASSIFIER);
    m.datapaths
        .iter()
        .map(|d| {
            let mut st = DataPathStats { name: d.name.clone(), selector: d.selector(), ..DataPathStats::default() };
            st.packets = match d.select {
                Some(k) => classifier.and_then(|c| c.flow.packets_out.get(usize::from(k)).copied()).unwrap_or(0),
                None => d.placed.in_ports.iter().map(|p| s.inputs.get(p).copied().unwrap_or(0)).sum(),
            };
            for c in s.netpes.iter().filter(|c| d.owns(&c.name)) {
                st.netpes += 1;
                st.dropped += c.flow.dropped + c.flow.unconnected;
                st.faults += c.flow.faults.total();
            }
            for sink in m.sinks.iter().filter(|k| d.owns(&k.from)) {
                let Some((pe, port)) = sink.from.rsplit_once('.') else { continue };
                let port = port
                    .parse::<u16>()
                    .ok()
                    .or_else(|| module(pe).and_then(|md| md.interface.outputs.iter().find(|(n, _)| n == port).map(|(_, p)| *p)));
                let n = port.and_then(|p| counters(pe)?.flow.packets_out.get(usize::from(p)).copied()).unwrap_or(0);
                if n > 0 {
                    *st.ports.entry(sink.port).or_default() += n;
                }
            }
            st
        })
        .collect()
}
