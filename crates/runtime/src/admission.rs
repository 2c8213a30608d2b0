//! Admission control (NetBind §II-B and §IV-B-2, issue 17): a data path
//! runs only if what a packet can cost in it fits the time a packet may
//! take at the declared line rate, and its memory fits what it may use.
//!
//! - **What a packet costs at most.** Each NetPE's bound comes from the
//!   verifier ([`netvm_verify::cost`]): the costliest path of a loop-free
//!   handler per instruction class, region bytes and coprocessor
//!   operations, or the budget's bound where it loops. A [`Calibration`]
//!   turns it into nanoseconds on this machine and engine. A packet's bound
//!   through the graph is its NetPE's own plus, over its output ports, the
//!   costliest port's destinations (all of them: a port with several
//!   duplicates the packet), plus the engine's cost per packet and per NetPE
//!   crossing.
//! - **The time a packet may take** ([`Headroom`], the paper's Eq. 1-3):
//!   at line rate `C` with frames of at least `m` bytes (plus Ethernet's 20
//!   bytes of preamble and gap), a packet arrives every `T = (m + 20)·8 / C`
//!   (Eq. 1). The paper's `n` contexts share one engine, so each gets
//!   `T / n`. Here `W` workers are cores of their own and packets are
//!   spread over them, so each packet may take `W·T` on its worker
//!   (Eq. 2). A utilization `ρ` (the paper's 0.96) keeps a margin:
//!   `H = ρ·W·T` (Eq. 3, in nanoseconds instead of engine cycles).
//! - **Memory:** every worker's data memories, one info memory per
//!   worker, and the coprocessor instances' tables at their configured
//!   capacity (once where the workers share an instance, per worker where
//!   each has its own), within the declared `memory`.
//!
//! A refusal names the resource and the numbers.

use std::fmt::Write as _;
use std::time::Instant;

use netvm_verify::cost::{worst_case, Sizes, Weights, WorstCase, CLASSES};
use netvm_vm::graph::Dest;
use serde::{Deserialize, Serialize};

use crate::app::AppPlan;

/// What a data path may use: the manifest's `[admission]` table.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Headroom {
    /// The line rate packets arrive at, in bits per second: a number, or
    /// text with a unit (`"10G"`, `"100M"`, `"2.5Gbit"`).
    #[serde(deserialize_with = "rate")]
    pub line_rate: f64,
    /// The smallest frame, in bytes (default 64).
    #[serde(default = "min_frame")]
    pub min_frame: u32,
    /// The largest frame, in bytes (default 1518): what region instructions
    /// over the packet may cover.
    #[serde(default = "max_frame")]
    pub max_frame: u32,
    /// The share of the time a worker may be busy (default 0.96, the paper's ρ).
    #[serde(default = "utilization")]
    pub utilization: f64,
    /// The most memory the data path's NetPEs may hold, in bytes (a number
    /// or text with a unit: `"64M"`); none by default.
    #[serde(default, deserialize_with = "bytes_opt")]
    pub memory: Option<u64>,
}

fn min_frame() -> u32 {
    64
}
fn max_frame() -> u32 {
    1518
}
fn utilization() -> f64 {
    0.96
}

/// A number with an optional SI unit (`k`, `M`, `G`, `T`; binary `Ki`,
/// `Mi`, `Gi` for bytes), and an optional `bit`, `bps`, `B`.
fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let cut = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(cut);
    let v: f64 = num.parse().ok()?;
    let unit = unit.trim();
    let unit = unit.strip_suffix("bps").or_else(|| unit.strip_suffix("bit")).or_else(|| unit.strip_suffix('B')).unwrap_or(unit);
    let m = match unit {
        "" => 1.0,
        "k" | "K" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    (v.is_finite() && v >= 0.0).then_some(v * m)
}

fn rate<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = toml::Value::deserialize(d)?;
    let r = match &v {
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(f) => Some(*f),
        toml::Value::String(s) => parse_quantity(s),
        _ => None,
    };
    r.filter(|r| *r > 0.0)
        .ok_or_else(|| serde::de::Error::custom(format!("line_rate: `{v}` is not a rate (bits per second, or like \"10G\")")))
}

fn bytes_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = toml::Value::deserialize(d)?;
    let b = match &v {
        toml::Value::Integer(i) if *i >= 0 => Some(*i as f64),
        toml::Value::String(s) => parse_quantity(s),
        _ => None,
    };
    b.map(|b| Some(b as u64)).ok_or_else(|| serde::de::Error::custom(format!("memory: `{v}` is not a size (bytes, or like \"64M\")")))
}

impl Headroom {
    /// The time between two packets at line rate (Eq. 1), in nanoseconds.
    pub fn arrival_ns(&self) -> f64 {
        f64::from(self.min_frame + 20) * 8.0 / self.line_rate * 1e9
    }

    /// The time a packet may take on its worker with `workers` workers (Eq. 2-3), in nanoseconds.
    pub fn per_packet_ns(&self, workers: usize) -> f64 {
        self.utilization * workers.max(1) as f64 * self.arrival_ns()
    }
}

/// What an engine's work costs on this machine: nanoseconds per NetIL
/// instruction of each class, per region byte, per coprocessor operation,
/// and the engine's own cost per packet and per NetPE a packet crosses.
/// `netvm calibrate` measures them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Calibration {
    /// The engine (`jit`, `interp`).
    pub engine: String,
    /// Nanoseconds per instruction, by class name (`stack`, `alu`, ...).
    pub class_ns: std::collections::BTreeMap<String, f64>,
    /// Nanoseconds per byte a region instruction covers.
    pub region_byte_ns: f64,
    /// Nanoseconds per coprocessor operation (a `counters` add), on top of its instructions.
    pub copro_op_ns: f64,
    /// The engine's cost per packet (a one-NetPE application that forwards it).
    pub packet_ns: f64,
    /// The cost of each further NetPE a packet crosses.
    pub netpe_ns: f64,
    /// Where and when it was measured.
    pub measured: String,
}

/// The name of a class in a [`Calibration`].
pub fn class_name(c: netil::Class) -> &'static str {
    use netil::Class::*;
    match c {
        Stack => "stack",
        Alu => "alu",
        Compare => "compare",
        Control => "control",
        Packet => "packet",
        Info => "info",
        Data => "data",
        Local => "local",
        Region => "region",
        Meta => "meta",
        Copro => "copro",
    }
}

impl Calibration {
    /// The weights of the cost bound.
    pub fn weights(&self) -> Weights {
        let mut w = Weights { region_byte: self.region_byte_ns, copro_op: self.copro_op_ns, ..Weights::default() };
        for (i, c) in CLASSES.iter().enumerate() {
            w.class[i] = self.class_ns.get(class_name(*c)).copied().unwrap_or(1.0);
        }
        w
    }

    /// The figures `netvm calibrate` measured for `engine` (`jit`,
    /// `baseline`, else the interpreter's) on the development machines,
    /// each the larger of two machines' (a 2-vCPU Intel Xeon VM, 2026-11-25
    /// and for the baseline compiler 2026-11-28; a 2-vCPU AMD EPYC VM,
    /// 2026-11-29, the largest of four runs of the interpreter and three of
    /// the others; docs/applications.md): what admission control uses
    /// unless given a calibration of its own machine. The larger figure,
    /// since admission control wants what a packet costs at most.
    pub fn builtin(engine: &str) -> Calibration {
        // (class, jit, interp, baseline)
        let classes: [(&str, f64, f64, f64); 11] = [
            ("alu", 0.268, 0.843, 0.331),
            ("compare", 0.371, 1.108, 0.553),
            ("control", 0.070, 1.346, 0.251),
            ("copro", 0.265, 4.035, 2.009),
            ("data", 0.123, 2.585, 0.357),
            ("info", 0.119, 2.130, 0.389),
            ("local", 0.070, 2.194, 0.335),
            ("meta", 0.070, 2.715, 0.354),
            ("packet", 0.175, 1.590, 0.342),
            ("region", 0.465, 3.787, 1.180),
            ("stack", 0.070, 2.049, 0.199),
        ];
        let which = match engine {
            "jit" => 0,
            "baseline" => 2,
            _ => 1,
        };
        let pick = |v: [f64; 3]| v[which];
        Calibration {
            engine: ["jit", "interp", "baseline"][which].to_string(),
            class_ns: classes.iter().map(|&(c, j, i, b)| (c.to_string(), pick([j, i, b]))).collect(),
            region_byte_ns: pick([0.267, 0.190, 0.115]),
            copro_op_ns: pick([6.171, 8.038, 5.410]),
            packet_ns: pick([16.659, 71.725, 69.077]),
            netpe_ns: pick([4.471, 23.598, 22.267]),
            measured: "built in: the larger of netvm calibrate on two 2-vCPU VMs (Intel Xeon, 2026-11-25/28; AMD EPYC, 2026-11-29)"
                .to_string(),
        }
    }

    /// Reads a calibration file (`netvm calibrate -o FILE`).
    pub fn load(path: &std::path::Path) -> Result<Calibration, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: not a calibration: {e}", path.display()))
    }

    /// Measures `engine` on this machine (about a second): small
    /// applications whose handlers repeat one class's instructions, timed
    /// per packet against an empty handler; each class's figure is the
    /// median of `rounds` rounds, after the classes measured before it are
    /// taken out of its snippet.
    pub fn measure(engine: &dyn netvm_vm::Engine, name: &str, rounds: usize) -> Result<Calibration, String> {
        let time = |pushes: &str, decl: &str, netpes: usize| -> Result<f64, String> {
            let mut samples = Vec::new();
            for _ in 0..rounds.max(1) {
                samples.push(time_handler(engine, pushes, decl, netpes)?);
            }
            samples.sort_by(f64::total_cmp);
            Ok(samples[samples.len() / 2])
        };
        let base = time("", "", 1)?;
        // Per instruction of a snippet repeated REPS times: its time over
        // its instructions (the class it exercises weighs what the mix
        // around it costs per instruction).
        let per = |snippet: &str, insns: f64, decl: &str| -> Result<f64, String> {
            let body: String = (0..REPS).map(|i| snippet.replace("{i}", &i.to_string()).replace("{off}", &(i % 48).to_string())).collect();
            Ok(((time(&body, decl, 1)? - base) / (REPS as f64 * insns)).max(0.0))
        };
        let mut class_ns = std::collections::BTreeMap::new();
        for (class, snippet, insns, decl) in [
            ("stack", "    dup\n    pop\n", 2.0, ""),
            ("alu", "    push 3\n    mul\n    push 7\n    add\n", 4.0, ""),
            ("compare", "    push 1000\n    cmp.lt\n", 2.0, ""),
            ("control", "    dup\n    jz l{i}\n    push 1\n    add\nl{i}:\n", 4.0, ""),
            ("packet", "    push {off}\n    upload.8\n    add\n", 3.0, ""),
            ("info", "    push {off}\n    iload.8\n    add\n", 3.0, ".infosize 64\n"),
            ("data", "    push {off}\n    dload.8\n    add\n", 3.0, ".datasize 64\n"),
            ("local", "    locstore 0\n    locload 0\n", 2.0, ".locals 1\n"),
            ("meta", "    inport\n    add\n", 2.0, ""),
            ("region", "    push 0\n    push 0\n    csum pkt\n    add\n", 4.0, ""),
            ("copro", "    dup\n    copro.in c, 1\n", 2.0, ".copro c counters\n"),
        ] {
            class_ns.insert(class.to_string(), per(snippet, insns, decl)?);
        }
        // No class is free: where the engine hides an instruction entirely
        // (a JIT keeps stack slots in registers), the cheapest figure
        // measured stands for it.
        let floor = class_ns.values().copied().filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
        let floor = if floor.is_finite() { floor.max(MIN_NS) } else { MIN_NS };
        for v in class_ns.values_mut() {
            *v = round(v.max(floor));
        }
        let region = class_ns["region"];
        let region_bytes = per("    push 0\n    push 60\n    csum pkt\n    add\n", 4.0, "")? * 4.0;
        let op = per("    push 0\n    copro.in c, 0\n    copro.invoke c, 0\n", 1.0, ".copro c counters\n")?;
        let copro_op = op - class_ns["stack"] - 2.0 * class_ns["copro"];
        let two = time("", "", 2)?;
        Ok(Calibration {
            engine: name.to_string(),
            class_ns,
            region_byte_ns: round(((region_bytes - 4.0 * region) / 60.0).max(0.0)),
            copro_op_ns: round(copro_op.max(0.0)),
            packet_ns: round(base),
            netpe_ns: round((two - base).max(0.0)),
            measured: format!("{} cores; {} rounds", std::thread::available_parallelism().map_or(1, |n| n.get()), rounds.max(1)),
        })
    }
}

/// Snippet repetitions per calibration handler.
const REPS: usize = 64;

/// The least a calibrated instruction weighs, in nanoseconds.
const MIN_NS: f64 = 0.05;

/// Rounded to picoseconds.
fn round(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Nanoseconds per packet of an application of `netpes` NetPEs in a chain,
/// the first running `body` (on a value from the packet, stored to data
/// memory at the end) and the others forwarding.
fn time_handler(engine: &dyn netvm_vm::Engine, body: &str, decl: &str, netpes: usize) -> Result<f64, String> {
    let dir = tempdir()?;
    let decl = if decl.contains(".datasize") { decl.to_string() } else { format!("{decl}.datasize 4\n") };
    let first =
        format!("{decl}.ports 1\nsegment .push\n    pop\n    push 0\n    push 14\n    upload.16\n{body}    dstore.32\n    ret 0\nends\n");
    std::fs::write(dir.join("first.nil"), first).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("fwd.nil"), ".ports 1\nsegment .push\n    pop\n    ret 0\nends\n").map_err(|e| e.to_string())?;
    let mut m = String::from("[[netpe]]\nname = \"n0\"\nprogram = \"first.nil\"\n[[source]]\nto = \"n0\"\n");
    for i in 1..netpes {
        let _ = write!(m, "[[netpe]]\nname = \"n{i}\"\nprogram = \"fwd.nil\"\n[[connect]]\nfrom = \"n{}.0\"\nto = \"n{i}\"\n", i - 1);
    }
    let _ = write!(m, "[[sink]]\nfrom = \"n{}.0\"\nport = 1\n", netpes - 1);
    std::fs::write(dir.join("app.toml"), m).map_err(|e| e.to_string())?;
    let manifest = crate::Manifest::load(&dir.join("app.toml")).map_err(|e| e.to_string())?;
    let mut registry = netvm_vm::CoproRegistry::new();
    registry.register("counters", counters);
    let mut app = crate::Application::build(&manifest, engine, &registry, None).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    let frame: Vec<u8> = (0..64u8).collect();
    let mut packets: Vec<netvm_vm::Packet> = (0..256).map(|_| netvm_vm::Packet::from_bytes(frame.clone())).collect();
    let mut verdicts = Vec::new();
    let mut run = |n: usize| {
        let t = Instant::now();
        for _ in 0..n {
            app.process_batch(&mut packets, &mut verdicts, &mut |_, _| {});
        }
        t.elapsed().as_secs_f64() * 1e9 / (n * packets.len()) as f64
    };
    run(20);
    // About 20 ms per measurement.
    let probe = run(20).max(1.0);
    Ok(run(((20e6 / probe) as usize / 256).clamp(20, 20_000)))
}

/// A scratch directory for calibration programs.
fn tempdir() -> Result<std::path::PathBuf, String> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("netvm-calibrate-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
    Ok(d)
}

/// The `counters` kind, for calibration (the runtime does not depend on
/// the coprocessor crate): an array of 16 counters, `add` only.
fn counters(_: &netvm_vm::CoproConfig) -> Result<Box<dyn netvm_vm::Coprocessor>, String> {
    Ok(Box::new(Counters { input: [0; 2], output: [0; 2], values: [0; 16] }))
}

struct Counters {
    input: [u32; 2],
    output: [u32; 2],
    values: [u64; 16],
}

impl netvm_vm::Coprocessor for Counters {
    fn kind(&self) -> &str {
        "counters"
    }
    fn write(&mut self, reg: u8, value: u32) -> Result<(), netvm_vm::CoproError> {
        *self.input.get_mut(usize::from(reg)).ok_or(netvm_vm::CoproError::NoRegister(reg))? = value;
        Ok(())
    }
    fn read(&mut self, reg: u8) -> Result<u32, netvm_vm::CoproError> {
        self.output.get(usize::from(reg)).copied().ok_or(netvm_vm::CoproError::NoRegister(reg))
    }
    fn registers(&mut self) -> netvm_vm::RegisterFile {
        netvm_vm::RegisterFile::over(&mut self.input, &mut self.output)
    }
    fn invoke(&mut self, _: u8, _: &netvm_vm::InvokeContext<'_>) -> Result<(), netvm_vm::CoproError> {
        let i = (self.input[0] as usize) % self.values.len();
        self.values[i] = self.values[i].wrapping_add(u64::from(self.input[1]));
        Ok(())
    }
}

/// The admission of a data path: what a packet costs at most, and what it may take.
#[derive(Clone, Debug, PartialEq)]
pub struct Admission {
    /// What a packet can cost, in nanoseconds (the costliest way through the graph).
    pub packet_ns: f64,
    /// What a packet may take (the headroom), in nanoseconds.
    pub headroom_ns: f64,
    /// The costliest way's NetPEs, in order.
    pub path: Vec<String>,
    /// Each NetPE's own bound: (name, bound, nanoseconds).
    pub netpes: Vec<(String, WorstCase)>,
    /// The memory the data path's NetPEs hold (every worker's), in bytes:
    /// data and info memory, and their coprocessor instances at capacity.
    pub memory: u64,
    /// Of `memory`: the coprocessor instances' ([`netvm_vm::Coprocessor::memory`]).
    pub tables: u64,
}

impl Admission {
    /// The bound's share of the headroom.
    pub fn load(&self) -> f64 {
        self.packet_ns / self.headroom_ns
    }
}

/// What a packet costs in a planned application: each NetPE's own bound,
/// and the costliest way onward from each NetPE.
struct Costs {
    own: Vec<(String, WorstCase)>,
    /// Per NetPE: the cost from it on (its own and its costliest port's
    /// destinations), and the NetPEs of that way.
    from: Vec<(f64, Vec<usize>)>,
}

impl Costs {
    fn of(plan: &AppPlan, headroom: &Headroom, cal: &Calibration) -> Costs {
        let w = cal.weights();
        let budget = plan.limits.budget;
        let mut own = Vec::with_capacity(plan.verified.len());
        for (name, v) in plan.names.iter().zip(&plan.verified) {
            let sizes = Sizes { packet: headroom.max_frame.into(), info: plan.info_size as u64, data: v.module.data_size.into() };
            let mut c = worst_case(&v.push, budget, &w, &sizes);
            c.weight += cal.netpe_ns;
            own.push((name.clone(), c));
        }
        // The costliest way from each NetPE (reverse topological order).
        let g = &plan.graph;
        let mut from: Vec<(f64, Vec<usize>)> = vec![(0.0, Vec::new()); own.len()];
        for &i in g.order.iter().rev() {
            let best = g.out[i].iter().map(|d| Costs::dests(d, &from)).max_by(|a, b| a.0.total_cmp(&b.0)).unwrap_or_default();
            let mut path = vec![i];
            path.extend(best.1);
            from[i] = (own[i].1.weight + best.0, path);
        }
        Costs { own, from }
    }

    /// What a packet sent to `dests` costs (every one of them: several
    /// duplicate it), and the NetPEs it crosses.
    fn dests(dests: &[Dest], from: &[(f64, Vec<usize>)]) -> (f64, Vec<usize>) {
        let mut total = 0.0;
        let mut path = Vec::new();
        for d in dests {
            if let Dest::Pe { node, .. } = d {
                let (c, p) = &from[*node as usize];
                total += c;
                path.extend(p);
            }
        }
        (total, path)
    }

    /// The costliest of `entries` (the destination lists a packet may
    /// enter by).
    fn worst<'a>(&self, entries: impl Iterator<Item = &'a [Dest]>) -> (f64, Vec<usize>) {
        entries.map(|d| Costs::dests(d, &self.from)).max_by(|a, b| a.0.total_cmp(&b.0)).unwrap_or_default()
    }
}

/// Checks a planned data path against `headroom` with `workers` workers,
/// its costs weighed by `cal`: the admission, or a refusal naming the
/// resource and the numbers.
pub fn admit(plan: &AppPlan, headroom: &Headroom, cal: &Calibration, workers: usize) -> Result<Admission, String> {
    let costs = Costs::of(plan, headroom, cal);
    let (worst, path) = costs.worst(plan.graph.sources.iter().map(Vec::as_slice));
    let nodes: Vec<usize> = (0..plan.names.len()).collect();
    decide(plan, headroom, cal, workers, costs.own, worst, &path, &nodes, "the data path")
}

/// Admits the data path `dp` of a composed application (see
/// [`crate::datapath`]) against its own `headroom`: the packets that
/// select it, from the classifier (when it selects by the classifier)
/// through its NetPEs.
pub fn admit_datapath(
    plan: &AppPlan,
    dp: &crate::datapath::DataPathSpec,
    headroom: &Headroom,
    cal: &Calibration,
    workers: usize,
) -> Result<Admission, String> {
    let costs = Costs::of(plan, headroom, cal);
    let g = &plan.graph;
    let (worst, path) = match dp.select {
        Some(k) => match plan.names.iter().position(|n| n == crate::datapath::CLASSIFIER) {
            Some(c) => {
                let (w, p) = costs.worst(g.out[c].get(usize::from(k)).map(Vec::as_slice).into_iter());
                let mut path = vec![c];
                path.extend(p);
                (costs.own[c].1.weight + w, path)
            }
            None => (0.0, Vec::new()),
        },
        None => costs.worst(dp.placed.in_ports.iter().filter_map(|p| g.sources.get(usize::from(*p))).map(Vec::as_slice)),
    };
    let nodes: Vec<usize> = (0..plan.names.len()).filter(|&i| dp.owns(&plan.names[i])).collect();
    let own: Vec<(String, WorstCase)> = costs.own.into_iter().filter(|(n, _)| dp.owns(n) || n == crate::datapath::CLASSIFIER).collect();
    decide(plan, headroom, cal, workers, own, worst, &path, &nodes, &format!("data path `{}`", dp.name))
}

/// The admission of a packet costing `worst` (through `path`) in an
/// engine of `workers` workers, and of the memory of the NetPEs `nodes`.
#[allow(clippy::too_many_arguments)]
fn decide(
    plan: &AppPlan,
    headroom: &Headroom,
    cal: &Calibration,
    workers: usize,
    own: Vec<(String, WorstCase)>,
    worst: f64,
    path: &[usize],
    nodes: &[usize],
    what: &str,
) -> Result<Admission, String> {
    let budget = plan.limits.budget;
    let packet_ns = cal.packet_ns - cal.netpe_ns.min(cal.packet_ns) + worst;
    let headroom_ns = headroom.per_packet_ns(workers);
    let w = workers.max(1) as u64;
    let memories = (nodes.iter().map(|&i| u64::from(plan.verified[i].module.data_size)).sum::<u64>() + plan.info_size as u64) * w;
    // Each instance once (an alias reaches its owner's), every worker's where each has its own.
    let mut tables = 0u64;
    for &i in nodes {
        for (c, instance) in plan.states[i].copros.iter().enumerate() {
            if !plan.shares.is_alias(i, c) {
                let copies = if instance.share() == netvm_vm::WorkerShare::PerWorker { w } else { 1 };
                tables = tables.saturating_add(instance.memory().saturating_mul(copies));
            }
        }
    }
    let memory = memories.saturating_add(tables);
    let admission =
        Admission { packet_ns, headroom_ns, path: path.iter().map(|&i| plan.names[i].clone()).collect(), netpes: own, memory, tables };
    if packet_ns > headroom_ns {
        let loops: Vec<&str> = admission.netpes.iter().filter(|(_, c)| c.loops).map(|(n, _)| n.as_str()).collect();
        return Err(format!(
            "admission refused: processing time per packet: {what} can take {packet_ns:.1} ns per packet (through {}), \
             more than the {headroom_ns:.1} ns a packet may take at {} with {}-byte frames on {} worker(s) (utilization {}){}",
            admission.path.join(" -> "),
            show_rate(headroom.line_rate),
            headroom.min_frame,
            workers.max(1),
            headroom.utilization,
            if loops.is_empty() { String::new() } else { format!("; {} loop, bounded only by the budget ({budget})", loops.join(", ")) }
        ));
    }
    if let Some(limit) = headroom.memory {
        if memory > limit {
            return Err(format!(
                "admission refused: memory: {what}'s NetPEs hold {memory} bytes ({} of data and info memory and {tables} of coprocessor tables, \
                 {} worker(s)), more than the {limit} bytes allowed",
                memory - tables,
                workers.max(1)
            ));
        }
    }
    Ok(admission)
}

/// What admission control decided for an application.
#[derive(Clone, Debug, PartialEq)]
pub enum Admitted {
    /// One data path, admitted whole.
    Whole(Admission),
    /// Several data paths ([`crate::datapath`]), each admitted on its own
    /// (those that declare `[admission]`), and together.
    DataPaths {
        /// Each data path's admission, by name.
        each: Vec<(String, Admission)>,
        /// The share of the workers' time they take together at their line
        /// rates: the sum of each one's cost per packet over the time
        /// between its packets, spread over the workers.
        load: f64,
        /// The share they may take: the smallest utilization any declares.
        utilization: f64,
    },
}

/// Admits a planned application, built from `manifest`, where it declares
/// what it must keep up with: its `[admission]`, or each data path's
/// (then also all of them together: NetBind's data paths share the
/// engine, so the time their packets take at their line rates must fit
/// the workers). `None` where nothing is declared.
pub fn check(plan: &AppPlan, manifest: &crate::Manifest, cal: &Calibration, workers: usize) -> Result<Option<Admitted>, String> {
    if let Some(headroom) = &manifest.admission {
        return admit(plan, headroom, cal, workers).map(|a| Some(Admitted::Whole(a)));
    }
    let mut each = Vec::new();
    let (mut load, mut utilization) = (0.0, 1.0f64);
    let mut parts = Vec::new();
    for dp in &manifest.datapaths {
        let Some(headroom) = &dp.placed.admission else { continue };
        let a = admit_datapath(plan, dp, headroom, cal, workers)?;
        let share = a.packet_ns / (headroom.arrival_ns() * workers.max(1) as f64);
        load += share;
        utilization = utilization.min(headroom.utilization);
        parts.push(format!("{} {:.0}%", dp.name, share * 100.0));
        each.push((dp.name.clone(), a));
    }
    if each.is_empty() {
        return Ok(None);
    }
    if load > utilization {
        return Err(format!(
            "admission refused: shared processing time: at their line rates the data paths together would keep {} worker(s) busy {:.0}% of the time ({}), \
             more than the {:.0}% allowed",
            workers.max(1),
            load * 100.0,
            parts.join(" + "),
            utilization * 100.0
        ));
    }
    Ok(Some(Admitted::DataPaths { each, load, utilization }))
}

/// A rate in bits per second, with a unit.
fn show_rate(r: f64) -> String {
    for (m, u) in [(1e12, "Tbit/s"), (1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")] {
        if r >= m {
            return format!("{} {u}", (r / m * 100.0).round() / 100.0);
        }
    }
    format!("{r} bit/s")
}
