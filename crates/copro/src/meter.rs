//! `meter`: an array of token-bucket traffic meters, color-blind, after
//! RFC 2697 (single-rate three-color marker, `srtcm`) and RFC 2698
//! (two-rate three-color marker, `trtcm`).
//!
//! Time is the packet timestamp, so a capture is metered by its own clock.
//! Buckets start full, and are refilled at each `meter` operation by the time
//! elapsed since that meter's previous one (never backwards: an earlier
//! timestamp refills nothing). Token arithmetic is exact integer arithmetic
//! in byte-nanoseconds, so results do not depend on how often a meter runs.
//!
//! Configuration: `size` (number of meters, 1..=65536, default 1); `mode`
//! `srtcm` (default) or `trtcm`; the rates and bursts every meter starts
//! with: `cir` (committed information rate, bytes/s), `cbs` (committed burst
//! size, bytes), and `ebs` (excess burst size, srtcm) or `pir`, `pbs` (peak
//! rate and burst, trtcm). Rates up to 10^12 bytes/s, bursts up to 2^40 bytes;
//! defaults: `cir` 125,000,000 (1 Gbit/s), bursts 1,500,000 bytes, `pir` =
//! 2 × `cir`. A trtcm meter needs `pir` ≥ `cir`.
//!
//! | register | meaning |
//! |----------|---------|
//! | in 0     | meter index |
//! | in 1     | packet length in bytes |
//! | out 0    | color: 0 green, 1 yellow, 2 red |
//!
//! | op | name  | effect |
//! |----|-------|--------|
//! | 0  | meter | meters `in1` bytes on meter `in0` at the packet's time; `out0` = the color |
//!
//! An index at or above `size` faults `copro`.
//!
//! Table file (`load`, `dump`): one meter per line, `INDEX CIR CBS EBS`
//! (srtcm) or `INDEX CIR PIR CBS PBS` (trtcm), decimal, `#` comments. A
//! loaded meter's buckets are refilled to full. Statistics: `green`,
//! `yellow`, `red` (packets), summed over the meters.
//!
//! Several workers: one set of buckets per worker (`PerWorker`). A fork
//! has the instance's meters (mode, configured and loaded rates and
//! bursts) with full buckets and its color counts at zero, and meters only
//! the packets its worker runs. Under flow distribution all the packets of
//! a flow reach one worker, so a meter per flow (indexed by a flow hash,
//! say) colors exactly as with one worker; a meter of aggregate traffic is
//! enforced per worker: with N workers the traffic as a whole may pass at
//! up to N times the rate (configure `cir` divided by N to police the sum).
//! The runtime sums the statistics by name over the workers; at the end of
//! a run `absorb` adds every worker's color counts into the first
//! worker's.

use netvm_vm::{CoproConfig, CoproError, Coprocessor, InvokeContext, RegisterFile, Timestamp, WorkerShare};

/// Largest number of meters in one instance.
pub const MAX_METERS: usize = 65536;
const MAX_RATE: u64 = 1_000_000_000_000;
const MAX_BURST: u64 = 1 << 40;
const NS: u128 = 1_000_000_000;

/// The two markers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MeterMode {
    /// RFC 2697: one rate, committed and excess bursts.
    SrTcm,
    /// RFC 2698: committed and peak rates, each with its burst.
    TrTcm,
}

/// Rates (bytes/s) and bursts (bytes) of one meter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MeterParams {
    /// Committed information rate.
    pub cir: u64,
    /// Committed burst size.
    pub cbs: u64,
    /// srtcm: excess burst size; trtcm: peak burst size.
    pub ebs: u64,
    /// trtcm: peak information rate (unused by srtcm).
    pub pir: u64,
}

/// The color a meter gives a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    /// Within the committed rate.
    Green = 0,
    /// Over the committed, within the excess/peak allowance.
    Yellow = 1,
    /// Over every allowance.
    Red = 2,
}

#[derive(Clone, Debug)]
struct Bucket {
    params: MeterParams,
    /// Committed tokens, in byte-nanoseconds.
    tc: u128,
    /// Excess (srtcm) or peak (trtcm) tokens, in byte-nanoseconds.
    te: u128,
    last: Option<u64>,
}

impl Bucket {
    fn new(params: MeterParams) -> Bucket {
        Bucket { params, tc: u128::from(params.cbs) * NS, te: u128::from(params.ebs) * NS, last: None }
    }

    fn meter(&mut self, mode: MeterMode, now: u64, bytes: u64) -> Color {
        let elapsed = match self.last {
            Some(t) if now > t => now - t,
            _ => 0,
        };
        if self.last.is_none_or(|t| now > t) {
            self.last = Some(now);
        }
        let p = self.params;
        let (cmax, emax) = (u128::from(p.cbs) * NS, u128::from(p.ebs) * NS);
        let b = u128::from(bytes) * NS;
        match mode {
            MeterMode::SrTcm => {
                // Tokens fill the committed bucket first, the excess bucket with the overflow.
                let add = u128::from(elapsed) * u128::from(p.cir);
                let tc = self.tc + add;
                if tc > cmax {
                    self.te = (self.te + (tc - cmax)).min(emax);
                    self.tc = cmax;
                } else {
                    self.tc = tc;
                }
                if self.tc >= b {
                    self.tc -= b;
                    Color::Green
                } else if self.te >= b {
                    self.te -= b;
                    Color::Yellow
                } else {
                    Color::Red
                }
            }
            MeterMode::TrTcm => {
                self.tc = (self.tc + u128::from(elapsed) * u128::from(p.cir)).min(cmax);
                self.te = (self.te + u128::from(elapsed) * u128::from(p.pir)).min(emax);
                if self.te < b {
                    Color::Red
                } else if self.tc < b {
                    self.te -= b;
                    Color::Yellow
                } else {
                    self.te -= b;
                    self.tc -= b;
                    Color::Green
                }
            }
        }
    }
}

/// The `meter` coprocessor.
#[derive(Clone, Debug)]
pub struct Meters {
    mode: MeterMode,
    defaults: MeterParams,
    buckets: Vec<Bucket>,
    input: [u32; 2],
    color: u32,
    counts: [u64; 3],
}

impl Meters {
    /// `size` meters of `mode`, each starting with `params` and full buckets.
    pub fn new(mode: MeterMode, size: usize, params: MeterParams) -> Result<Meters, String> {
        if size == 0 || size > MAX_METERS {
            return Err(format!("meter: size must be between 1 and {MAX_METERS}"));
        }
        check_params(mode, &params)?;
        Ok(Meters { mode, defaults: params, buckets: vec![Bucket::new(params); size], input: [0; 2], color: 0, counts: [0; 3] })
    }

    /// Meters `bytes` on meter `index` at time `now`.
    pub fn meter(&mut self, index: usize, now: Timestamp, bytes: u64) -> Option<Color> {
        let mode = self.mode;
        let c = self.buckets.get_mut(index)?.meter(mode, now.as_nanos(), bytes);
        self.counts[c as usize] += 1;
        Some(c)
    }
}

fn check_params(mode: MeterMode, p: &MeterParams) -> Result<(), String> {
    if p.cir > MAX_RATE || p.pir > MAX_RATE {
        return Err(format!("meter: rates are at most {MAX_RATE} bytes/s"));
    }
    if p.cbs > MAX_BURST || p.ebs > MAX_BURST {
        return Err(format!("meter: bursts are at most {MAX_BURST} bytes"));
    }
    if mode == MeterMode::TrTcm && p.pir < p.cir {
        return Err(format!("meter: the peak rate {} is below the committed rate {}", p.pir, p.cir));
    }
    Ok(())
}

fn number(key: &str, s: &str, max: u64) -> Result<u64, String> {
    let v = s.parse::<u64>().map_err(|_| format!("meter: {key} `{s}` is not a number"))?;
    if v > max {
        return Err(format!("meter: {key} {v} is above {max}"));
    }
    Ok(v)
}

pub(crate) fn create(cfg: &CoproConfig) -> Result<Box<dyn Coprocessor>, String> {
    const KNOWN: [&str; 7] = ["size", "mode", "cir", "cbs", "ebs", "pir", "pbs"];
    if let Some(k) = cfg.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(format!("meter: unknown setting `{k}` (known: {})", KNOWN.join(", ")));
    }
    let mode = match cfg.get("mode").map(String::as_str) {
        None | Some("srtcm") => MeterMode::SrTcm,
        Some("trtcm") => MeterMode::TrTcm,
        Some(m) => return Err(format!("meter: mode `{m}` is neither srtcm nor trtcm")),
    };
    let get = |k: &str, default: u64, max: u64| cfg.get(k).map_or(Ok(default), |s| number(k, s, max));
    let size = get("size", 1, MAX_METERS as u64)? as usize;
    let cir = get("cir", 125_000_000, MAX_RATE)?;
    let cbs = get("cbs", 1_500_000, MAX_BURST)?;
    let params = match mode {
        MeterMode::SrTcm => {
            if cfg.contains_key("pir") || cfg.contains_key("pbs") {
                return Err("meter: `pir` and `pbs` are trtcm settings (mode = \"trtcm\")".into());
            }
            MeterParams { cir, cbs, ebs: get("ebs", 1_500_000, MAX_BURST)?, pir: 0 }
        }
        MeterMode::TrTcm => {
            if cfg.contains_key("ebs") {
                return Err("meter: `ebs` is an srtcm setting (trtcm has `pbs`)".into());
            }
            MeterParams {
                cir,
                cbs,
                ebs: get("pbs", 1_500_000, MAX_BURST)?,
                pir: get("pir", cir.saturating_mul(2).min(MAX_RATE), MAX_RATE)?,
            }
        }
    };
    Ok(Box::new(Meters::new(mode, size, params)?))
}

impl Coprocessor for Meters {
    fn kind(&self) -> &str {
        "meter"
    }

    fn write(&mut self, reg: u8, value: u32) -> Result<(), CoproError> {
        *self.input.get_mut(reg as usize).ok_or(CoproError::NoRegister(reg))? = value;
        Ok(())
    }

    fn read(&mut self, reg: u8) -> Result<u32, CoproError> {
        match reg {
            0 => Ok(self.color),
            _ => Err(CoproError::NoRegister(reg)),
        }
    }

    fn registers(&mut self) -> RegisterFile {
        RegisterFile::new(&mut self.input, u32::MAX, std::slice::from_mut(&mut self.color), 1)
    }

    fn invoke(&mut self, op: u8, ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        if op != 0 {
            return Err(CoproError::NoOperation(op));
        }
        let (i, n) = (self.input[0] as usize, self.buckets.len());
        let c = self
            .meter(i, ctx.now, u64::from(self.input[1]))
            .ok_or_else(|| CoproError::BadArgument(format!("meter index {i} out of range (size {n})")))?;
        self.color = c as u32;
        Ok(())
    }

    fn dump(&self) -> String {
        let mut s = String::new();
        for (i, b) in self.buckets.iter().enumerate() {
            let p = b.params;
            s += &match self.mode {
                MeterMode::SrTcm => format!("{i} {} {} {}\n", p.cir, p.cbs, p.ebs),
                MeterMode::TrTcm => format!("{i} {} {} {} {}\n", p.cir, p.pir, p.cbs, p.ebs),
            };
        }
        s
    }

    fn load(&mut self, text: &str) -> Result<usize, String> {
        let mut parsed = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |m: String| format!("line {}: {m}: `{line}`", n + 1);
            let f: Vec<&str> = line.split_whitespace().collect();
            let want = match self.mode {
                MeterMode::SrTcm => 4,
                MeterMode::TrTcm => 5,
            };
            if f.len() != want {
                return Err(err(format!("expected {want} numbers")));
            }
            let i = number("index", f[0], self.buckets.len() as u64 - 1).map_err(err)? as usize;
            let params = match self.mode {
                MeterMode::SrTcm => MeterParams {
                    cir: number("cir", f[1], MAX_RATE).map_err(err)?,
                    cbs: number("cbs", f[2], MAX_BURST).map_err(err)?,
                    ebs: number("ebs", f[3], MAX_BURST).map_err(err)?,
                    pir: 0,
                },
                MeterMode::TrTcm => MeterParams {
                    cir: number("cir", f[1], MAX_RATE).map_err(err)?,
                    pir: number("pir", f[2], MAX_RATE).map_err(err)?,
                    cbs: number("cbs", f[3], MAX_BURST).map_err(err)?,
                    ebs: number("pbs", f[4], MAX_BURST).map_err(err)?,
                },
            };
            check_params(self.mode, &params).map_err(err)?;
            parsed.push((i, params));
        }
        for (i, p) in &parsed {
            self.buckets[*i] = Bucket::new(*p);
        }
        Ok(parsed.len())
    }

    /// Every meter back to the configured rates with full buckets; color counts zeroed.
    fn clear(&mut self) {
        let d = self.defaults;
        self.buckets.fill(Bucket::new(d));
        self.counts = [0; 3];
    }

    fn stats(&self) -> Vec<(String, u64)> {
        vec![("green".into(), self.counts[0]), ("yellow".into(), self.counts[1]), ("red".into(), self.counts[2])]
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    /// The same meters with full buckets, color counts at zero.
    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        Ok(Box::new(Meters {
            mode: self.mode,
            defaults: self.defaults,
            buckets: self.buckets.iter().map(|b| Bucket::new(b.params)).collect(),
            input: [0; 2],
            color: 0,
            counts: [0; 3],
        }))
    }

    fn share(&self) -> WorkerShare {
        WorkerShare::PerWorker
    }

    /// Adds the other worker's color counts (and zeroes them there).
    fn absorb(&mut self, other: &mut dyn Coprocessor) {
        if let Some(o) = crate::downcast::<Meters>(other) {
            for (a, b) in self.counts.iter_mut().zip(&mut o.counts) {
                *a += std::mem::take(b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> CoproConfig {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn srtcm_colors_follow_rfc2697() {
        // 1000 bytes/s, CBS 1000, EBS 500.
        let p = MeterParams { cir: 1000, cbs: 1000, ebs: 500, pir: 0 };
        let mut m = Meters::new(MeterMode::SrTcm, 1, p).unwrap();
        assert_eq!(m.meter(0, at(0), 600), Some(Color::Green)); // Tc 1000 → 400
        assert_eq!(m.meter(0, at(0), 600), Some(Color::Red)); // Tc 400 and Te 500 are both short of 600
    }

    #[test]
    fn srtcm_sequence() {
        let p = MeterParams { cir: 1000, cbs: 1000, ebs: 500, pir: 0 };
        let mut m = Meters::new(MeterMode::SrTcm, 1, p).unwrap();
        assert_eq!(m.meter(0, at(0), 600), Some(Color::Green)); // Tc 400, Te 500
        assert_eq!(m.meter(0, at(0), 450), Some(Color::Yellow)); // Te 50
        assert_eq!(m.meter(0, at(0), 450), Some(Color::Red));
        // 100 ms later: 100 bytes into Tc (500).
        assert_eq!(m.meter(0, at(100), 500), Some(Color::Green)); // Tc 0
                                                                  // 2 s later: Tc fills to 1000, the other 1000 overflow into Te (cap 500).
        assert_eq!(m.meter(0, at(2100), 1000), Some(Color::Green));
        assert_eq!(m.meter(0, at(2100), 500), Some(Color::Yellow));
        assert_eq!(m.meter(0, at(2100), 1), Some(Color::Red));
        // Time going backwards refills nothing.
        assert_eq!(m.meter(0, at(50), 1), Some(Color::Red));
        assert_eq!(m.stats(), vec![("green".into(), 3), ("yellow".into(), 2), ("red".into(), 3)]);
    }

    #[test]
    fn trtcm_sequence() {
        // CIR 1000 B/s, PIR 2000 B/s, CBS 1000, PBS 1500.
        let p = MeterParams { cir: 1000, cbs: 1000, ebs: 1500, pir: 2000 };
        let mut m = Meters::new(MeterMode::TrTcm, 1, p).unwrap();
        assert_eq!(m.meter(0, at(0), 800), Some(Color::Green)); // Tc 200, Tp 700
        assert_eq!(m.meter(0, at(0), 500), Some(Color::Yellow)); // Tp 200
        assert_eq!(m.meter(0, at(0), 300), Some(Color::Red));
        // 250 ms: Tc +250 = 450, Tp +500 = 700.
        assert_eq!(m.meter(0, at(250), 450), Some(Color::Green)); // Tc 0, Tp 250
        assert_eq!(m.meter(0, at(250), 251), Some(Color::Red));
    }

    #[test]
    fn fractional_tokens_are_not_lost() {
        // 1 byte/s metered every 100 ms: ten small refills make one byte.
        let p = MeterParams { cir: 1, cbs: 1, ebs: 0, pir: 0 };
        let mut m = Meters::new(MeterMode::SrTcm, 1, p).unwrap();
        assert_eq!(m.meter(0, at(0), 1), Some(Color::Green));
        for t in 1..10 {
            assert_eq!(m.meter(0, at(t * 100), 1), Some(Color::Red));
        }
        assert_eq!(m.meter(0, at(1000), 1), Some(Color::Green));
    }

    #[test]
    fn registers_config_and_table_file() {
        let mut m =
            create(&cfg(&[("size", "2"), ("mode", "trtcm"), ("cir", "1000"), ("pir", "1000"), ("cbs", "100"), ("pbs", "100")])).unwrap();
        let ctx = InvokeContext { packet: &[], info: &[], now: at(0), seq: 0 };
        m.write(0, 1).unwrap();
        m.write(1, 101).unwrap();
        m.invoke(0, &ctx).unwrap();
        assert_eq!(m.read(0).unwrap(), 2);
        m.write(0, 2).unwrap();
        assert!(m.invoke(0, &ctx).is_err());
        assert!(m.invoke(1, &ctx).is_err());
        assert!(m.write(2, 0).is_err());
        assert!(m.read(1).is_err());
        assert_eq!(m.load("1 10 20 30 40 # bigger\n").unwrap(), 1);
        assert_eq!(m.dump(), "0 1000 1000 100 100\n1 10 20 30 40\n");
        let e = m.load("\n0 1 2 3 4\n1 5 1 1 1\n").unwrap_err();
        assert!(e.starts_with("line 3:"), "{e}");
        assert!(m.load("5 1 2 3 4").unwrap_err().contains("above"));
        assert!(m.load("0 1 2 3").is_err());
        for bad in [
            &[("mode", "x")][..],
            &[("size", "0")],
            &[("bogus", "1")],
            &[("mode", "trtcm"), ("cir", "10"), ("pir", "5")],
            &[("ebs", "1"), ("mode", "trtcm")],
            &[("pir", "1")],
            &[("cir", "-1")],
        ] {
            assert!(create(&cfg(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn forks_start_full_with_loaded_rates_and_absorb_adds_counts() {
        let mut a = create(&cfg(&[("size", "2"), ("cir", "1000"), ("cbs", "1000"), ("ebs", "0")])).unwrap();
        a.load("1 1000 100 0\n").unwrap();
        let meter = |m: &mut Box<dyn Coprocessor>, i: u32, bytes: u32| {
            m.write(0, i).unwrap();
            m.write(1, bytes).unwrap();
            m.invoke(0, &InvokeContext { packet: &[], info: &[], now: at(0), seq: 0 }).unwrap();
            m.read(0).unwrap()
        };
        assert_eq!(meter(&mut a, 0, 1000), 0);
        assert_eq!(meter(&mut a, 0, 1), 2, "meter 0 is empty on worker a");
        let mut b = a.fork().unwrap();
        assert_eq!(b.share(), WorkerShare::PerWorker);
        assert_eq!(b.dump(), a.dump(), "the fork has the loaded rates");
        assert_eq!(b.stats(), vec![("green".into(), 0), ("yellow".into(), 0), ("red".into(), 0)]);
        assert_eq!(meter(&mut b, 0, 1000), 0, "the fork's buckets start full");
        assert_eq!(meter(&mut b, 1, 101), 2, "with the loaded burst");
        a.absorb(b.as_mut());
        assert_eq!(a.stats(), vec![("green".into(), 2), ("yellow".into(), 0), ("red".into(), 2)]);
        assert_eq!(b.stats()[2], ("red".into(), 0));
    }
}
