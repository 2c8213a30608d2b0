//! Measuring the weights of the cost model on this machine (`netvm capsule
//! calibrate`, docs/capsules.md §2.4).
//!
//! For every opcode of the capsule profile, a straight-line capsule of
//! many copies of a short stack-balanced unit around the opcode (the
//! opcode, the pushes of its operands, the pops of its results) runs on the
//! interpreter (the slowest tier, whose weights bound the others); the
//! whole unit's time is charged to the opcode, an upper bound of its own.
//! (Subtracting the operands' time instead is unsound here: the
//! interpreter fuses a `push` with the instruction after it, so the unit
//! can take less time than its parts.) The weight is the largest of
//! `rounds` measurements, times a safety factor, rounded up to whole
//! nanoseconds (at least 1). A store
//! operation is measured at its worst: the last entry of a full chain in a
//! store far larger than the caches, each lookup on another chain.

use std::time::Instant;

use netil::{Class, Opcode, OperandKind};
use netvm_copro::ess::{Ess, Visibility};
use netvm_vm::{Limits, PeState, Timestamp, XbView};

use crate::env::Env;
use crate::profile::{CapsuleCode, CostModel, Verifier};
use crate::wire::Dialect;

/// Copies of the unit in one measured capsule.
const UNITS: usize = 120;
/// Factor between the largest measured time and the weight.
pub const SAFETY: f64 = 1.5;

/// What calibration measured.
#[derive(Clone, Debug)]
pub struct Calibration {
    /// The weights (the cost model a node uses with `--costs`).
    pub costs: CostModel,
    /// ns per instruction as measured (before the safety factor), by mnemonic.
    pub measured: Vec<(String, f64)>,
    /// ns of a store operation at its worst, and of an environment read.
    pub invoke_measured: [f64; 2],
}

/// The stack-balanced unit around `op` (as assembly), or `None` for
/// opcodes outside the profile or measured otherwise.
fn unit(op: Opcode) -> Option<String> {
    let m = op.mnemonic();
    Some(match op.class() {
        Class::Data | Class::Region => return None,
        Class::Control | Class::Copro => return None,
        Class::Packet if op.is_store() => return None,
        Class::Packet => match op {
            Opcode::Pktlen | Opcode::Wirelen => format!("    {m}\n    pop\n"),
            _ => format!("    push 4\n    {m}\n    pop\n"),
        },
        Class::Info if op.is_store() => format!("    push 4\n    push 7\n    {m}\n"),
        Class::Info => format!("    push 4\n    {m}\n    pop\n"),
        Class::Local => match op {
            Opcode::Locload => format!("    {m} 0\n    pop\n"),
            _ => format!("    push 3\n    {m} 0\n"),
        },
        Class::Meta => format!("    {m}\n    pop\n"),
        _ => match op.operands() {
            OperandKind::Imm32 => format!("    {m} 7\n    pop\n"),
            OperandKind::Depth => format!("    push 1\n    push 2\n    {m} 1\n    pop\n    pop\n    pop\n"),
            _ => {
                let pushes: String = (0..op.pops()).map(|i| format!("    push {}\n", 3 + i * 5)).collect();
                let pops: String = (0..op.pushes()).map(|_| "    pop\n".to_string()).collect();
                format!("{pushes}    {m}\n{pops}")
            }
        },
    })
}

/// The unit without `op`: the same pushes and pops (the tests check both
/// verify, so that the unit is the opcode's alone).
#[cfg(test)]
fn baseline(op: Opcode) -> String {
    let pushes = op.pops() as usize;
    let pops = op.pushes() as usize;
    let mut s = String::new();
    let n = pushes.min(pops);
    for _ in 0..n {
        s += "    push 1\n    pop\n";
    }
    // The opcode's net effect, kept balanced.
    for _ in n..pushes {
        s += "    push 1\n    pop\n";
    }
    s
}

fn capsule(body: &str, repeat: usize) -> Vec<u8> {
    let src = format!(
        ".copro ess ess\n.copro env env\n.infosize 16\n.locals 1\n.ports 2\nsegment .push\n    push 0\n    locstore 0\n{}    ret 0\nends\n",
        body.repeat(repeat)
    );
    netil::assemble(&src).map(|a| a.module.push.unwrap_or_default()).unwrap_or_default()
}

/// `body` repeated as often as a capsule's code holds (at most `most`
/// times): the code and the number of copies.
fn filled(body: &str, most: usize) -> (Vec<u8>, usize) {
    let one = capsule(body, 1).len().saturating_sub(capsule("", 1).len()).max(1);
    let n = ((crate::wire::MAX_CODE - 32) / one).clamp(1, most);
    (capsule(body, n), n)
}

struct Bench {
    state: PeState,
    packet: Vec<u8>,
    scratch: Vec<u8>,
    verifier: Verifier,
}

impl Bench {
    fn new(ess: Ess) -> Bench {
        Bench {
            state: PeState { data: Vec::new(), copros: vec![Box::new(ess), Box::new(Env::default())], scratch: Vec::new(), budget_used: 0 },
            packet: vec![0x45; 256],
            scratch: vec![0; 16],
            verifier: Verifier::default(),
        }
    }

    /// ns per run of `code` (the fastest of `tries`: the time the code
    /// itself takes, without the machine's interruptions).
    fn time(&mut self, code: &[u8], tries: usize, iters: usize) -> f64 {
        let mut prepared = CapsuleCode::default();
        if self.verifier.verify(code, 0, Dialect::Wasp, &CostModel::default(), &mut prepared).is_err() {
            return f64::NAN;
        }
        let limits = Limits { budget: 0 };
        let mut best = f64::INFINITY;
        for _ in 0..tries {
            let t = Instant::now();
            for _ in 0..iters {
                let mut xb = XbView { packet: &mut self.packet, wire_len: 256, ts: Timestamp::default(), seq: 0, info: &mut self.scratch };
                std::hint::black_box(netvm_interp::run_prepared(&prepared.prepared, &mut self.state, &mut xb, 1, None, &limits, 16, 2));
            }
            best = best.min(t.elapsed().as_nanos() as f64 / iters as f64);
        }
        best
    }
}

/// Measures the weights on this machine, `rounds` rounds per figure.
pub fn calibrate(rounds: usize) -> Calibration {
    let rounds = rounds.max(1);
    let mut b = Bench::new(Ess::new(1 << 10, 3_600_000_000_000, 8, Some(5)).unwrap_or_else(|e| panic!("a small store: {e}")));
    let mut costs = CostModel::default();
    let mut measured = Vec::new();
    for &op in Opcode::ALL {
        let Some(u) = unit(op) else { continue };
        let (with, n) = filled(&u, UNITS);
        let mut worst: f64 = 0.0;
        for _ in 0..rounds {
            worst = worst.max(b.time(&with, 5, 200) / n as f64);
        }
        if worst.is_nan() {
            continue;
        }
        measured.push((op.mnemonic().to_string(), worst));
        costs.weights[op as usize] = ((worst * SAFETY).ceil() as u32).max(1);
    }
    // Jumps and exits: a forward conditional jump per unit.
    let (jumps, n) = filled("    push 0\n    jnz @0\n", UNITS);
    let mut jump: f64 = 0.0;
    for _ in 0..rounds {
        jump = jump.max(b.time(&jumps, 5, 200) / n as f64);
    }
    let jw = ((jump * SAFETY).ceil() as u32).max(1);
    for &op in Opcode::ALL {
        if op.class() == Class::Control {
            costs.weights[op as usize] = jw;
        }
    }
    measured.push(("jump".into(), jump));
    // Register accesses of the coprocessors.
    for (name, body) in [("copro.in", "    push 1\n    copro.in ess, 0\n"), ("copro.out", "    copro.out env, 0\n    pop\n")] {
        let (code, n) = filled(body, UNITS);
        let mut w: f64 = 0.0;
        for _ in 0..rounds {
            w = w.max(b.time(&code, 5, 200) / n as f64);
        }
        measured.push((name.into(), w));
        let op = if name == "copro.in" { Opcode::CoproIn } else { Opcode::CoproOut };
        costs.weights[op as usize] = ((w * SAFETY).ceil() as u32).max(1);
    }
    // The store at its worst: 8 entries per chain in a 4M-entry store
    // (far larger than the caches), each lookup the 8th entry of another chain.
    let invoke_ess = worst_store_op(rounds);
    let env = {
        let (with, n) = filled("    copro.invoke env, 0\n", UNITS);
        (0..rounds).map(|_| b.time(&with, 5, 200) / n as f64).fold(0.0, f64::max)
    };
    costs.invoke = [((invoke_ess * SAFETY).ceil() as u32).max(1), ((env * SAFETY).ceil() as u32).max(1)];
    Calibration { costs, measured, invoke_measured: [invoke_ess, env] }
}

/// ns of the slowest store lookup: the last entry of a full chain, in a
/// store much larger than the caches, on a different chain each time.
fn worst_store_op(rounds: usize) -> f64 {
    let chain = 8u32;
    let mut ess = match Ess::new(1 << 22, 3_600_000_000_000, chain, Some(77)) {
        Ok(e) => e,
        Err(_) => return f64::NAN,
    };
    // Fill chains: keys grouped by bucket until 4,096 buckets hold 8 each.
    let mut by_bucket: std::collections::HashMap<u32, Vec<u64>> = std::collections::HashMap::new();
    let mut full = Vec::new();
    let mut k = 0u64;
    while full.len() < 4096 && k < 200_000_000 {
        let b = ess.bucket_of(k);
        let v = by_bucket.entry(b).or_default();
        if v.len() < chain as usize {
            v.push(k);
            if v.len() == chain as usize {
                full.push(b);
            }
        }
        k += 1;
    }
    let lasts: Vec<u64> = full.iter().map(|b| *by_bucket[b].last().unwrap_or(&0)).collect();
    for b in &full {
        for &key in &by_bucket[b] {
            let _ = ess.put(key, &[1; 32], Visibility::Public, 0);
        }
    }
    // Scatter 3M other entries so that the chains lie far apart in memory.
    for key in (1u64 << 40)..(1u64 << 40) + 3_000_000 {
        let _ = ess.put(key, &[2; 32], Visibility::Public, 0);
    }
    let mut worst: f64 = 0.0;
    for _ in 0..rounds {
        let t = Instant::now();
        for &key in &lasts {
            std::hint::black_box(ess.get(key, 1));
        }
        worst = worst.max(t.elapsed().as_nanos() as f64 / lasts.len() as f64);
    }
    worst
}

impl Calibration {
    /// As JSON: the weights by mnemonic, the two coprocessors' operations,
    /// and what was measured.
    pub fn to_json(&self) -> String {
        let mut w = String::new();
        for &op in Opcode::ALL {
            let x = self.costs.weights[op as usize];
            if x != 0 {
                w += &format!("{}\n    \"{}\": {x}", if w.is_empty() { "" } else { "," }, op.mnemonic());
            }
        }
        let m: Vec<String> = self.measured.iter().map(|(k, v)| format!("\"{k}\": {v:.2}")).collect();
        format!(
            "{{\n  \"engine\": \"interp\",\n  \"unit\": \"ns\",\n  \"safety\": {SAFETY},\n  \"weights\": {{{w}\n  }},\n  \"invoke\": {{ \"ess\": {}, \"env\": {} }},\n  \"measured\": {{ {}, \"invoke.ess\": {:.2}, \"invoke.env\": {:.2} }}\n}}\n",
            self.costs.invoke[0],
            self.costs.invoke[1],
            m.join(", "),
            self.invoke_measured[0],
            self.invoke_measured[1]
        )
    }
}

impl CostModel {
    /// Reads the `weights` and `invoke` of a calibration file (what
    /// [`Calibration::to_json`] writes); opcodes it does not name keep
    /// their weights by class ([`CostModel::by_class`]).
    pub fn from_json(text: &str) -> Result<CostModel, String> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let mut c = CostModel::by_class();
        let weights = v.get("weights").and_then(|w| w.as_object()).ok_or("no `weights` object")?;
        for (k, w) in weights {
            let op = Opcode::from_mnemonic(k).ok_or_else(|| format!("weights: `{k}` is not an opcode"))?;
            let w = w
                .as_u64()
                .filter(|&w| (1..=1_000_000).contains(&w))
                .ok_or_else(|| format!("weights: `{k}` is not a whole number from 1 to 1000000"))?;
            c.weights[op as usize] = w as u32;
        }
        if let Some(inv) = v.get("invoke") {
            for (i, name) in ["ess", "env"].iter().enumerate() {
                if let Some(w) = inv.get(name) {
                    let w = w
                        .as_u64()
                        .filter(|&w| (1..=1_000_000).contains(&w))
                        .ok_or_else(|| format!("invoke: `{name}` is not a whole number from 1 to 1000000"))?;
                    c.invoke[i] = w as u32;
                }
            }
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_is_a_capsule_and_a_file_reads_back() {
        for &op in Opcode::ALL {
            if let Some(u) = unit(op) {
                let mut v = Verifier::default();
                let mut out = CapsuleCode::default();
                let code = filled(&u, UNITS).0;
                assert!(v.verify(&code, 0, Dialect::Wasp, &CostModel::default(), &mut out).is_ok(), "{}", op.mnemonic());
                assert!(
                    v.verify(&capsule(&baseline(op), 3), 0, Dialect::Wasp, &CostModel::default(), &mut out).is_ok(),
                    "{}",
                    op.mnemonic()
                );
            }
        }
        let mut v = Verifier::default();
        let mut out = CapsuleCode::default();
        assert!(v.verify(&capsule("    push 0\n    jnz @0\n", 3), 0, Dialect::Wasp, &CostModel::default(), &mut out).is_ok());
        let c = Calibration { costs: CostModel::default(), measured: vec![("add".into(), 1.0)], invoke_measured: [100.0, 2.0] };
        let back = CostModel::from_json(&c.to_json()).unwrap();
        assert_eq!(back, c.costs);
        assert!(CostModel::from_json("{\"weights\": {\"frob\": 1}}").is_err());
        assert!(CostModel::from_json("{\"weights\": {\"add\": 0}}").is_err());
        assert!(CostModel::from_json("[]").is_err());
    }
}
