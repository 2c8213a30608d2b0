//! Merging the JSON lines of several benchmark rounds (netvm's and the
//! peers') into one report: medians over rounds, ratios to native C taken
//! round by round, and a check that every engine accepted the same packets.
//!
//! Input: files named `round-R-WHAT.jsonl`, each line a [`Record`](crate::measure::Record)
//! as JSON, or `{"engine", "filter", "workload", "unavailable": "why"}` for a
//! peer that could not run. Output: [`Report::markdown`] (the tables that go
//! into BENCHMARKS.md) and [`Report::to_json`] (benches/results/filters-DATE.json).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};

use crate::filters::FILTERS;
use crate::measure::median;

/// The engine every ratio is taken against.
pub const BASELINE: &str = "native-c";

/// One (engine, filter, workload) over all rounds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    /// Per round that measured it: (round, median ns, min ns, accepted, packets).
    pub rounds: Vec<(u32, f64, f64, u64, u64)>,
    /// Why it could not be measured, if it could not (the last reason seen).
    pub unavailable: Option<String>,
}

impl Series {
    /// Median over rounds of the per-round medians.
    pub fn median(&self) -> f64 {
        median(&self.rounds.iter().map(|r| r.1).collect::<Vec<_>>())
    }

    /// Smallest per-round minimum.
    pub fn min(&self) -> f64 {
        self.rounds.iter().map(|r| r.2).fold(f64::INFINITY, f64::min)
    }
}

/// Key of a series: (engine, filter, workload).
pub type Key = (String, String, String);

/// All rounds of one benchmark run.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Every series, by (engine, filter, workload).
    pub series: BTreeMap<Key, Series>,
    /// Number of rounds seen.
    pub rounds: u32,
}

/// Sort rank of an engine in tables: netvm first, then native C, then the peers.
fn rank(engine: &str) -> (u32, String) {
    let r = match engine {
        e if e.starts_with("netvm-jit") => 0,
        e if e.starts_with("netvm-") => 1,
        "native-c" => 2,
        "native-c-empty" => 3,
        "libpcap" => 4,
        "dpdk-jit" => 5,
        "kernel-xdp" => 6,
        "kernel-xdp-raw" => 7,
        "kernel-xdp-empty" => 8,
        _ => 9,
    };
    (r, engine.to_string())
}

/// Whether a table shows an engine's ratio to native C: not for native C
/// itself, not for the measurement floors (`*-empty`, `*-raw`), and not for
/// the kernel, whose figure has the floor subtracted while native C's has not.
fn shows_ratio(engine: &str) -> bool {
    engine != BASELINE && !engine.ends_with("-empty") && !engine.ends_with("-raw") && !engine.starts_with("kernel-xdp")
}

impl Report {
    /// Reads every `round-R-*.jsonl` file of `dir`.
    pub fn load_dir(dir: &Path) -> Result<Report, String> {
        let mut rep = Report::default();
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        names.sort();
        for p in names {
            let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            let Some(round) = stem.strip_prefix("round-").and_then(|s| s.split('-').next()).and_then(|s| s.parse().ok()) else {
                continue;
            };
            let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            rep.add_lines(round, &text).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        Ok(rep)
    }

    /// Adds the JSON lines of round `round` (lines that are not JSON objects are ignored).
    pub fn add_lines(&mut self, round: u32, text: &str) -> Result<(), String> {
        self.rounds = self.rounds.max(round);
        for line in text.lines().filter(|l| l.trim_start().starts_with('{')) {
            let v: Value = serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))?;
            let s = |k: &str| v[k].as_str().map(str::to_string).ok_or_else(|| format!("no `{k}` in {line}"));
            let key = (s("engine")?, s("filter")?, s("workload")?);
            let series = self.series.entry(key).or_default();
            if let Some(why) = v["unavailable"].as_str() {
                series.unavailable = Some(why.to_string());
                continue;
            }
            let f = |k: &str| v[k].as_f64().ok_or_else(|| format!("no `{k}` in {line}"));
            let u = |k: &str| v[k].as_u64().ok_or_else(|| format!("no `{k}` in {line}"));
            series.rounds.push((round, f("ns_median")?, f("ns_min")?, u("accepted")?, u("packets")?));
        }
        Ok(())
    }

    /// Engines in table order.
    pub fn engines(&self) -> Vec<String> {
        let mut e: Vec<String> = self.series.keys().map(|k| k.0.clone()).collect();
        e.sort_by_key(|x| rank(x));
        e.dedup();
        e
    }

    /// Median over rounds of `engine`'s time divided by native C's, both from the same round.
    pub fn ratio(&self, engine: &str, filter: &str, workload: &str) -> Option<f64> {
        let s = self.series.get(&(engine.into(), filter.into(), workload.into()))?;
        let b = self.series.get(&(BASELINE.into(), filter.into(), workload.into()))?;
        let r: Vec<f64> = s
            .rounds
            .iter()
            .filter_map(|(round, ns, ..)| b.rounds.iter().find(|x| x.0 == *round).filter(|x| x.1 > 0.0).map(|x| ns / x.1))
            .collect();
        (!r.is_empty()).then(|| median(&r))
    }

    /// Disagreements on the mixed trace: engines whose accept count differs
    /// from another engine's for the same filter (the full-path frame is
    /// accepted by every filter, so only its total differs between engines).
    pub fn inconsistencies(&self) -> Vec<String> {
        let mut out = Vec::new();
        for f in FILTERS {
            let counts: Vec<(&str, u64)> = self
                .series
                .iter()
                .filter(|(k, _)| k.1 == f.name && k.2 == "mixed")
                .flat_map(|(k, s)| s.rounds.iter().map(move |r| (k.0.as_str(), r.3)))
                .collect();
            if let Some((e0, c0)) = counts.first() {
                for (e, c) in &counts {
                    if c != c0 {
                        out.push(format!("{}: {e} accepts {c} frames of the mixed trace, {e0} {c0}", f.name));
                    }
                }
            }
            for (k, s) in self.series.iter().filter(|(k, _)| k.1 == f.name && k.2 == "fullpath") {
                if s.rounds.iter().any(|r| r.3 != r.4) {
                    out.push(format!("{}: {} rejects the full-path frame", f.name, k.0));
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// One Markdown table per workload: median ns per packet over rounds, and
    /// in parentheses the ratio to native C (median of per-round ratios).
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        for (workload, title) in [
            ("fullpath", "64-byte full-path frame (10.1.1.1:20 → 10.2.2.2:30 TCP), repeated"),
            ("mixed", "mixed trace (one pass over the trace in memory)"),
        ] {
            out += &format!("\n{title}: ns per packet, median of {} rounds (× native C, median of per-round ratios)\n\n", self.rounds);
            out += "| engine |";
            for f in FILTERS {
                out += &format!(" {} |", f.name);
            }
            out += "\n|---|";
            out += &"---|".repeat(FILTERS.len());
            out.push('\n');
            for e in self.engines() {
                if !self.series.keys().any(|k| k.0 == e && k.2 == workload) {
                    continue;
                }
                out += &format!("| {e} |");
                for f in FILTERS {
                    match self.series.get(&(e.clone(), f.name.to_string(), workload.to_string())) {
                        Some(s) if !s.rounds.is_empty() => {
                            out += &format!(" {:.2}", s.median());
                            match self.ratio(&e, f.name, workload) {
                                Some(r) if shows_ratio(&e) => out += &format!(" (×{r:.2})"),
                                _ => {}
                            }
                            out += " |";
                        }
                        Some(s) if s.unavailable.is_some() => out += " n/a |",
                        _ => out += " — |",
                    }
                }
                out.push('\n');
            }
        }
        let notes: Vec<String> = self
            .series
            .iter()
            .filter_map(|(k, s)| s.unavailable.as_ref().filter(|_| s.rounds.is_empty()).map(|w| format!("{} ({}): {w}", k.0, k.2)))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if !notes.is_empty() {
            out += "\nn/a:\n";
            for n in notes {
                out += &format!("- {n}\n");
            }
        }
        out
    }

    /// The whole report as JSON: `meta` (what the script knows about the
    /// machine and the command), then one entry per series with its median,
    /// minimum, ratio to native C, accept count and per-round figures.
    pub fn to_json(&self, meta: Value) -> Value {
        let results: Vec<Value> = self
            .series
            .iter()
            .map(|((e, f, w), s)| {
                json!({
                    "engine": e, "filter": f, "workload": w,
                    "ns_median": (!s.rounds.is_empty()).then(|| (s.median() * 1000.0).round() / 1000.0),
                    "ns_min": (!s.rounds.is_empty()).then(|| (s.min() * 1000.0).round() / 1000.0),
                    "ratio_to_native_c": self.ratio(e, f, w).map(|r| (r * 1000.0).round() / 1000.0),
                    "accepted": s.rounds.first().map(|r| r.3),
                    "packets": s.rounds.first().map(|r| r.4),
                    "rounds": s.rounds.iter().map(|r| json!({"round": r.0, "ns_median": r.1, "ns_min": r.2})).collect::<Vec<_>>(),
                    "unavailable": s.unavailable,
                })
            })
            .collect();
        json!({ "meta": meta, "rounds": self.rounds, "inconsistencies": self.inconsistencies(), "results": results })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_ratios_and_consistency() {
        let mut r = Report::default();
        let line = |e: &str, ns: f64, acc: u64| {
            format!(
                r#"{{"engine":"{e}","filter":"f1_ip","workload":"mixed","ns_median":{ns},"ns_min":{ns},"reps":3,"packets":10,"accepted":{acc}}}"#
            )
        };
        r.add_lines(1, &format!("{}\n{}\n", line("native-c", 2.0, 7), line("libpcap", 8.0, 7))).unwrap();
        r.add_lines(2, &format!("{}\n{}\n", line("native-c", 4.0, 7), line("libpcap", 12.0, 7))).unwrap();
        r.add_lines(2, r#"{"engine":"dpdk-jit","filter":"f1_ip","workload":"mixed","unavailable":"no DPDK"}"#).unwrap();
        assert_eq!(r.rounds, 2);
        assert_eq!(r.ratio("libpcap", "f1_ip", "mixed"), Some(3.5)); // median of 4 and 3
        assert!(r.inconsistencies().is_empty());
        let md = r.markdown();
        assert!(md.contains("| libpcap | 10.00 (×3.50) |"), "{md}");
        assert!(md.contains("| dpdk-jit | n/a |"), "{md}");
        r.add_lines(3, &line("libpcap", 1.0, 6)).unwrap();
        assert_eq!(r.inconsistencies().len(), 1);
    }
}
