//! The capsule stage of an application (docs/capsules.md §3): packets
//! arriving on the stage's input ports pass a capsule node before the data
//! path. Ordinary packets go on untouched; capsules run their code and go
//! on into the data path (forwarded, or addressed back to their source) or
//! are dropped, counted by reason. So capsules and ordinary data paths share
//! one engine: a router's manifest with a `[capsules]` section forwards both.
//!
//! ```toml
//! [capsules]
//! ports = [1]                      # input ports it watches (default: all)
//! hook = "ingress"                 # or "egress"
//! address = "10.0.0.1"             # the node's address (env register 0)
//! cost_per_byte = 32               # n of the local bound n·|p|
//! admin_sources = ["10.9.9.9"]     # whose admin capsules get operator rights
//! queues = [0, 2]                  # congestion status of each output queue
//! speed = 1000                     # Mb/s
//! udp_port = 7737
//! code_cache = 1024                # programs verified once and kept
//! tier = "auto"                    # compile cached programs when it pays (or interpret, baseline, cranelift)
//! costs = "weights.json"           # from `netvm capsule calibrate` (default: built-in weights)
//! ess = { capacity = 65536, tau = 10 }
//! ```
//!
//! Frames are Ethernet. With several workers every worker has its own node
//! (code cache, counters) over one state store, shared under a lock.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netvm_capsule::tier::TierPolicy;
use netvm_capsule::{CapsuleNode, EnvConfig, Hook, Link, NodeConfig, NodeStats, Verdict};
use netvm_copro::ess::Ess;
use netvm_vm::buffer::Batch;
use netvm_vm::CoproConfig;
use serde::Deserialize;

/// The `[capsules]` section of a manifest.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CapsuleSpec {
    /// Input ports whose packets pass the stage (default: every one).
    #[serde(default)]
    pub ports: Option<Vec<u16>>,
    /// `ingress` (default) or `egress`: which entry point of the code runs.
    #[serde(default)]
    pub hook: Option<String>,
    /// The node's IPv4 address.
    #[serde(default)]
    pub address: Option<Ipv4Addr>,
    /// The node's IPv6 address.
    #[serde(default)]
    pub address6: Option<Ipv6Addr>,
    /// Cost units a capsule may spend per byte.
    #[serde(default)]
    pub cost_per_byte: Option<u32>,
    /// Sources whose admin capsules get operator rights on the store.
    #[serde(default)]
    pub admin_sources: Vec<IpAddr>,
    /// Congestion status (0 to 3) of each output queue.
    #[serde(default)]
    pub queues: Vec<u8>,
    /// Output queue depth, packets.
    #[serde(default)]
    pub queue_depth: Option<u32>,
    /// Interface speed, Mb/s.
    #[serde(default)]
    pub speed: Option<u32>,
    /// UDP port of capsules.
    #[serde(default)]
    pub udp_port: Option<u16>,
    /// Programs the code cache holds.
    #[serde(default)]
    pub code_cache: Option<usize>,
    /// When cached programs are compiled: `auto` (with the baseline
    /// compiler, when it pays: the default), `interpret` (never),
    /// `baseline` or `cranelift` (at once, with that compiler).
    #[serde(default)]
    pub tier: Option<String>,
    /// A calibration file (`netvm capsule calibrate -o FILE`) with the
    /// instructions' weights, relative to the manifest's directory.
    #[serde(default)]
    pub costs: Option<std::path::PathBuf>,
    /// The state store's configuration (`capacity`, `rate`, `tau`, `max_chain`, …).
    #[serde(default)]
    pub ess: BTreeMap<String, toml::Value>,
}

/// The stage: a capsule node in front of the data path.
#[derive(Debug)]
pub struct CapsuleStage {
    /// Watched input ports, by port number (`None`: all).
    ports: Option<Vec<bool>>,
    node: CapsuleNode,
}

impl CapsuleStage {
    /// The stage a manifest's section describes; errors name the setting.
    pub fn from_spec(spec: &CapsuleSpec, base_dir: &std::path::Path) -> Result<CapsuleStage, String> {
        let hook = match spec.hook.as_deref() {
            None | Some("ingress") => Hook::Ingress,
            Some("egress") => Hook::Egress,
            Some(h) => return Err(format!("capsules: hook `{h}` is neither ingress nor egress")),
        };
        let max = netvm_capsule::env::MAX_QUEUES;
        if spec.queues.len() > max || spec.queues.iter().any(|&q| q > 3) {
            return Err(format!("capsules: queues: at most {max} statuses, each 0 to 3"));
        }
        let mut queues = [0u8; netvm_capsule::env::MAX_QUEUES];
        queues[..spec.queues.len()].copy_from_slice(&spec.queues);
        let defaults = NodeConfig::default();
        let env = EnvConfig {
            ipv4: spec.address.unwrap_or(Ipv4Addr::UNSPECIFIED),
            ipv6: spec.address6.unwrap_or(Ipv6Addr::UNSPECIFIED),
            congestion: spec.queues.iter().copied().max().unwrap_or(0),
            queue_depth: spec.queue_depth.unwrap_or(0),
            speed_mbps: spec.speed.unwrap_or(defaults.env.speed_mbps),
            queues,
            nqueues: spec.queues.len().max(1) as u8,
        };
        let cfg = NodeConfig {
            port: spec.udp_port.unwrap_or(defaults.port),
            link: Link::Ethernet,
            hook,
            cost_per_byte: spec.cost_per_byte.unwrap_or(defaults.cost_per_byte),
            env,
            admin_sources: spec.admin_sources.clone(),
            costs: match &spec.costs {
                None => defaults.costs,
                Some(p) => {
                    let path = base_dir.join(p);
                    let text = std::fs::read_to_string(&path).map_err(|e| format!("capsules: costs {}: {e}", path.display()))?;
                    netvm_capsule::CostModel::from_json(&text).map_err(|e| format!("capsules: costs {}: {e}", path.display()))?
                }
            },
            code_cache: spec.code_cache.unwrap_or(defaults.code_cache),
            tier: match spec.tier.as_deref() {
                None | Some("auto") => TierPolicy::Auto,
                Some("interpret") => TierPolicy::Interpret,
                Some("baseline") => TierPolicy::Baseline,
                Some("cranelift") => TierPolicy::Cranelift,
                Some(t) => return Err(format!("capsules: tier `{t}` is not auto, interpret, baseline or cranelift")),
            },
        };
        let ess_cfg: CoproConfig = spec
            .ess
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), v)
            })
            .collect();
        let ess = Ess::from_config(&ess_cfg).map_err(|e| format!("capsules: {e}"))?;
        let ports = spec.ports.as_ref().map(|ps| {
            let mut v = vec![false; ps.iter().copied().max().map_or(0, |m| usize::from(m) + 1)];
            for &p in ps {
                v[usize::from(p)] = true;
            }
            v
        });
        Ok(CapsuleStage { ports, node: CapsuleNode::new(cfg, ess) })
    }

    fn watches(&self, port: u16) -> bool {
        match &self.ports {
            None => true,
            Some(v) => v.get(usize::from(port)).copied().unwrap_or(false),
        }
    }

    /// Runs the capsules of `batch` in place and removes the ones dropped,
    /// keeping the others in order.
    pub fn run(&mut self, batch: &mut Batch) {
        let mut dropped = false;
        let mut keep = Vec::new();
        for (i, d) in batch.descs.iter().enumerate() {
            if !self.watches(d.in_port) {
                continue;
            }
            // SAFETY: the batch holds the memory of its descriptors and is
            // borrowed exclusively; each packet is processed alone, and an
            // application with a capsule stage writes packets, so the runtime
            // gave it bytes of its own (see `Application::writes_packets`).
            let bytes = unsafe { d.bytes_mut() };
            if let Verdict::Drop(_) = self.node.process(bytes, d.ts(), d.in_port) {
                if !dropped {
                    keep = vec![true; batch.descs.len()];
                    dropped = true;
                }
                keep[i] = false;
            }
        }
        if dropped {
            let mut i = 0;
            batch.descs.retain(|_| {
                i += 1;
                keep[i - 1]
            });
        }
    }

    /// Another worker's stage (see [`CapsuleNode::fork`]).
    pub fn fork(&mut self) -> Result<CapsuleStage, String> {
        Ok(CapsuleStage { ports: self.ports.clone(), node: self.node.fork()? })
    }

    /// What the node counted.
    pub fn stats(&self) -> NodeStats {
        self.node.stats()
    }

    /// The state store's statistics.
    pub fn ess_stats(&self) -> Vec<(String, u64)> {
        self.node.ess_stats()
    }

    /// The code cache's counters: (programs held, hits, misses, evictions).
    pub fn cache_stats(&self) -> (usize, u64, u64, u64) {
        let c = self.node.code_cache();
        let s = c.stats();
        (c.len(), s.hits, s.misses, s.evictions)
    }
}
