//! Timing statistics and the report format shared by `filterbench` and the C peers.
//!
//! Every measurement is a set of repetitions, each timing a loop over many
//! packets and dividing by their number; a [`Record`] keeps the median and the
//! minimum over the repetitions. Records are printed one JSON object per line
//! (the format `benches/peers/filterpeers.c` also prints), so that
//! `scripts/bench-filters.sh` can merge netvm's figures with its peers'.

use std::time::Instant;

/// Workload names: the 64-byte full-path frame repeated, and the mixed trace.
pub const WORKLOADS: [&str; 2] = ["fullpath", "mixed"];

/// One measured (engine, filter, workload).
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Engine or peer (`netvm-interp`, `netvm-interp/app`, `native-c`, `libpcap`, …).
    pub engine: String,
    /// Filter name (`f1_ip`, …).
    pub filter: String,
    /// Workload (`fullpath` or `mixed`).
    pub workload: String,
    /// Median over the repetitions, ns per packet.
    pub ns_median: f64,
    /// Minimum over the repetitions, ns per packet.
    pub ns_min: f64,
    /// Number of repetitions.
    pub reps: usize,
    /// Packets per repetition.
    pub packets: u64,
    /// Packets accepted per repetition (the same in every repetition).
    pub accepted: u64,
}

impl Record {
    /// The record as one line of JSON.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "engine": self.engine,
            "filter": self.filter,
            "workload": self.workload,
            "ns_median": round3(self.ns_median),
            "ns_min": round3(self.ns_min),
            "reps": self.reps,
            "packets": self.packets,
            "accepted": self.accepted,
        })
        .to_string()
    }
}

/// `x` rounded to three decimals (the precision of the JSON lines).
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The median of `v` (the mean of the two middle values for an even count); `NaN` if empty.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Runs `pass` once untimed (warm-up), then `reps` timed times. Each call
/// processes `packets` packets and returns how many it accepted. Returns
/// (ns per packet of each repetition, accepted per pass); panics if two
/// passes accept different numbers, which would mean a broken engine.
pub fn time_passes(reps: usize, packets: u64, mut pass: impl FnMut() -> u64) -> (Vec<f64>, u64) {
    let accepted = pass();
    let mut ns = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        let a = pass();
        let el = t.elapsed();
        assert_eq!(a, accepted, "two passes over the same packets accepted different numbers");
        ns.push(el.as_nanos() as f64 / packets as f64);
    }
    (ns, accepted)
}

/// How many iterations of a loop over one packet make a repetition last
/// about `target_ms`: runs `pass(n)` with growing `n` until it takes 5 ms.
pub fn calibrate(target_ms: f64, mut pass: impl FnMut(u64) -> u64) -> u64 {
    let mut n = 1000u64;
    loop {
        let t = Instant::now();
        std::hint::black_box(pass(n));
        let ms = t.elapsed().as_secs_f64() * 1e3;
        if ms >= 5.0 || n >= 1 << 34 {
            let scaled = (n as f64 * target_ms / ms.max(1e-3)) as u64;
            return scaled.clamp(1000, 1 << 34);
        }
        n *= 4;
    }
}

/// Formats records as an aligned text table: one row per (engine, workload),
/// one column per filter, medians in ns per packet.
pub fn table(records: &[Record], filters: &[&str]) -> String {
    let mut rows: Vec<(String, String)> = Vec::new();
    for r in records {
        let key = (r.workload.clone(), r.engine.clone());
        if !rows.contains(&key) {
            rows.push(key);
        }
    }
    let mut out = format!("{:<10} {:<22}", "workload", "engine");
    for f in filters {
        out += &format!(" {f:>17}");
    }
    out.push('\n');
    for (w, e) in rows {
        out += &format!("{w:<10} {e:<22}");
        for f in filters {
            match records.iter().find(|r| r.workload == w && r.engine == e && r.filter == *f) {
                Some(r) => out += &format!(" {:>17.2}", r.ns_median),
                None => out += &format!(" {:>17}", "-"),
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn json_line_has_every_field() {
        let r = Record {
            engine: "e".into(),
            filter: "f".into(),
            workload: "mixed".into(),
            ns_median: 1.23456,
            ns_min: 1.0,
            reps: 3,
            packets: 10,
            accepted: 4,
        };
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["ns_median"], 1.235);
        assert_eq!(v["accepted"], 4);
        assert_eq!(v["workload"], "mixed");
    }
}
