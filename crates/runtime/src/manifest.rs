//! Application manifests (TOML): which NetPEs, how they are connected, where
//! packets enter and leave, and the execution budget.
//!
//! ```toml
//! name = "classifier"
//! budget = 100000                 # optional, per handler invocation
//! distribution = "flow"           # optional: how packets are spread over workers,
//!                                 # "flow" or "round-robin" (default: see `Distribution`)
//!
//! [[netpe]]
//! name = "classify"
//! program = "classify.nil"        # .nil (assembly) or .nvm (binary), relative to the manifest
//!
//! [[netpe]]
//! name = "count"
//! program = "count.nil"
//! copro = { hits = { size = 16 } }  # configuration of `.copro hits counters`
//! args = { limit = 1000 }         # input arguments the program declares (`.arg`)
//!
//! [[netpe]]
//! name = "report"
//! program = "report.nil"          # declares `.copro seen counters`
//! copro = { seen = { instance = "count.hits" } }  # not an instance of its own:
//!                                 # the instance `hits` of NetPE `count`
//!
//! [[source]]
//! port = 0                        # application input port (`-r 0=FILE`); default 0
//! to = "classify"                 # NetPE[.inport], inport default 0
//!
//! [[connect]]
//! from = "classify.1"             # NetPE.outport (or a name the program gives it: `.outport`)
//! to = "count"                    # NetPE[.inport]
//!
//! [admission]                     # optional: refuse a data path that cannot keep up
//! line_rate = "10G"               # bits per second packets arrive at
//! min_frame = 64                  # smallest frame (bytes; default 64)
//! max_frame = 1518                # largest frame (bytes; default 1518)
//! utilization = 0.96              # share of a worker's time it may use (default 0.96)
//! memory = "64M"                  # most data and info memory, every worker's (optional)
//!
//! [[sink]]
//! from = "count.0"                # NetPE.outport
//! port = 1                        # application output port (stats key, `{port}` in -w)
//! file = "tcp.pcap"               # optional: also written here (relative to the working directory)
//! ```
//!
//! # Shared coprocessor instances
//!
//! Every `.copro NAME KIND` declaration gets an instance of its own,
//! configured by `copro.NAME`, unless its configuration is
//! `{ instance = "NETPE.INST" }`: then the NetPE reaches, under its own name
//! `NAME`, the instance `INST` of NetPE `NETPE` (declared before or after
//! it): what one writes, the other reads (an IDS's detection NetPEs test
//! the flowbits of the flows its decoder tracks in a `flow` instance).
//! `NETPE.INST` splits at its last dot. The rules, each a
//! [`RuntimeError::Manifest`] naming the NetPE and the declaration:
//!
//! - `NETPE` is a NetPE of the application and declares `INST`, of the
//!   same kind (the `.copro` declarations' `KIND`s are equal), and it is
//!   another declaration than this one;
//! - `NETPE.INST` has an instance of its own: it is not itself an
//!   `instance = ...` (no chains: name the owner);
//! - `instance` is the only key: the instance is configured where it is
//!   declared.
//!
//! The instance is one: the control plane reaches it by either name
//! (`--load`, `--dump`, `Application::copro_mut`: through the owner's slot),
//! and it is ticked, reported (`copro_stats`, `--stats`), dumped
//! (`copro_dumps`) and absorbed once, under the NetPE that owns it. With
//! several workers each worker has its own fork of the instance
//! ([`Application::fork`](crate::Application::fork)), which the worker's
//! NetPEs share in the same way; whether the application keeps per-worker
//! state (and so its default distribution) is the owner's kind's business.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::RuntimeError;

/// Largest manifest file.
pub const MAX_MANIFEST: u64 = 16 << 20;

/// Largest number of NetPEs in one application.
pub const MAX_NETPES: usize = 4096;

/// A parsed application manifest.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Application name.
    #[serde(default)]
    pub name: Option<String>,
    /// Execution budget per handler invocation (see `netvm_vm::Limits`).
    #[serde(default)]
    pub budget: Option<u64>,
    /// How packets are spread over several workers (`--workers N`):
    /// `flow` or `round-robin`; by default, round robin for stateless
    /// applications and flow for the others ([`crate::Distribution`]).
    #[serde(default)]
    pub distribution: Option<String>,
    /// The NetPEs.
    #[serde(default, rename = "netpe")]
    pub netpes: Vec<NetPeSpec>,
    /// Where packets enter.
    #[serde(default, rename = "source")]
    pub sources: Vec<SourceSpec>,
    /// NetPE-to-NetPE connections.
    #[serde(default, rename = "connect")]
    pub connections: Vec<ConnectSpec>,
    /// Where packets leave.
    #[serde(default, rename = "sink")]
    pub sinks: Vec<SinkSpec>,
    /// Admission control: the line rate and memory the data path must fit
    /// ([`crate::admission`]); none by default.
    #[serde(default)]
    pub admission: Option<crate::admission::Headroom>,
    /// Several isolated data paths in one engine, each from a manifest of
    /// its own ([`crate::datapath`]); composed into `netpes`, `sources`,
    /// `connections` and `sinks` when the manifest is read.
    #[serde(default, rename = "datapath")]
    pub datapaths: Vec<crate::datapath::DataPathSpec>,
    /// The NetPE that selects a data path per packet ([`crate::datapath`]).
    #[serde(default)]
    pub classifier: Option<crate::datapath::ClassifierSpec>,
    /// A capsule stage in front of the data path ([`crate::capsules`]).
    #[serde(default)]
    pub capsules: Option<Box<crate::capsules::CapsuleSpec>>,
    /// Directory that relative program paths are resolved against.
    #[serde(skip)]
    pub base_dir: PathBuf,
}

/// One NetPE of a manifest.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetPeSpec {
    /// Unique name.
    pub name: String,
    /// Program file (`.nil` or `.nvm`).
    pub program: PathBuf,
    /// Coprocessor configuration, by the instance name the module declares:
    /// `key = value` pairs for the kind, or `instance = "NETPE.NAME"` alone
    /// for another NetPE's instance (see the module documentation).
    #[serde(default)]
    pub copro: BTreeMap<String, BTreeMap<String, toml::Value>>,
    /// Input arguments, by the names the program declares (`.arg`):
    /// integers written into its data memory before `.init` runs.
    #[serde(default)]
    pub args: BTreeMap<String, toml::Value>,
    /// The program itself, when it was made in memory (a compiled filter
    /// expression); `program` then only names it.
    #[serde(skip)]
    pub module: Option<netil::Module>,
}

/// An application input.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSpec {
    /// Application input port.
    #[serde(default)]
    pub port: u16,
    /// `NetPE[.inport]`.
    pub to: String,
}

/// A connection between two NetPEs.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectSpec {
    /// `NetPE.outport`.
    pub from: String,
    /// `NetPE[.inport]`.
    pub to: String,
}

/// An application output.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkSpec {
    /// `NetPE.outport`.
    pub from: String,
    /// Application output port number.
    pub port: u16,
    /// Optional capture file this sink is written to.
    #[serde(default)]
    pub file: Option<PathBuf>,
}

impl Manifest {
    /// Reads and parses a manifest file, and composes its data paths
    /// ([`crate::datapath::compose`]).
    pub fn load(path: &Path) -> Result<Manifest, RuntimeError> {
        Manifest::load_as(path, true)
    }

    /// Reads a manifest file; composes its data paths if `compose`.
    pub(crate) fn load_as(path: &Path, compose: bool) -> Result<Manifest, RuntimeError> {
        let io = |e: String| RuntimeError::Io { path: path.to_path_buf(), error: e };
        let mut bytes = Vec::new();
        let file = std::fs::File::open(path).map_err(|e| io(e.to_string()))?;
        std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_MANIFEST + 1), &mut bytes).map_err(|e| io(e.to_string()))?;
        if bytes.len() as u64 > MAX_MANIFEST {
            return Err(io(format!("a manifest larger than {MAX_MANIFEST} bytes")));
        }
        let text = String::from_utf8(bytes).map_err(|_| io("a manifest is UTF-8 text".into()))?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Manifest::parse_in(&text, base, compose).map_err(|e| match e {
            RuntimeError::Manifest(e) => RuntimeError::Manifest(format!("{}: {e}", path.display())),
            e => e,
        })
    }

    /// Parses manifest text (relative paths resolve against the current
    /// directory) and composes its data paths.
    pub fn parse(text: &str) -> Result<Manifest, String> {
        Manifest::parse_in(text, PathBuf::new(), true).map_err(|e| match e {
            RuntimeError::Manifest(e) => e,
            e => e.to_string(),
        })
    }

    /// Parses manifest text whose relative paths resolve against `base_dir`;
    /// composes its data paths if `compose`.
    fn parse_in(text: &str, base_dir: PathBuf, compose: bool) -> Result<Manifest, RuntimeError> {
        let mut m: Manifest = toml::from_str(text).map_err(|e| RuntimeError::Manifest(e.to_string()))?;
        m.base_dir = base_dir;
        if compose {
            crate::datapath::compose(&mut m)?;
        }
        if m.netpes.len() > MAX_NETPES {
            return Err(RuntimeError::Manifest(format!("{} NetPEs (at most {MAX_NETPES})", m.netpes.len())));
        }
        Ok(m)
    }

    /// A manifest running one program: every input port `p` in `in_ports`
    /// feeds input port `p` of the NetPE `main`, and every output port `p`
    /// below `out_ports` is application output port `p`.
    pub fn single(program: &Path, in_ports: &[u16], out_ports: u16, budget: Option<u64>) -> Manifest {
        Manifest {
            name: Some(program.display().to_string()),
            budget,
            distribution: None,
            netpes: vec![NetPeSpec {
                name: "main".into(),
                program: program.to_path_buf(),
                copro: BTreeMap::new(),
                args: BTreeMap::new(),
                module: None,
            }],
            sources: in_ports.iter().map(|p| SourceSpec { port: *p, to: format!("main.{p}") }).collect(),
            connections: Vec::new(),
            sinks: (0..out_ports).map(|p| SinkSpec { from: format!("main.{p}"), port: p, file: None }).collect(),
            admission: None,
            datapaths: Vec::new(),
            classifier: None,
            capsules: None,
            base_dir: PathBuf::new(),
        }
    }
}

/// Splits `name.port` (port optional when `default` is given).
pub(crate) fn parse_endpoint(s: &str, default: Option<u16>) -> Result<(&str, u16), String> {
    match s.rsplit_once('.') {
        Some((name, port)) if !name.is_empty() => match port.parse::<u16>() {
            Ok(p) => Ok((name, p)),
            Err(_) => Err(format!("`{s}`: `{port}` is not a port number")),
        },
        _ => match default {
            Some(p) if !s.is_empty() => Ok((s, p)),
            _ => Err(format!("`{s}` must be NETPE.PORT")),
        },
    }
}

/// A TOML scalar as the string a coprocessor configuration expects.
pub(crate) fn scalar_to_string(v: &toml::Value) -> Result<String, String> {
    match v {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        other => Err(format!("expected a string, number or boolean, found {}", other.type_str())),
    }
}
