//! `counters`: an array of 64-bit counters.
//!
//! Configuration: `size` (number of counters, default 256, at most 1<<20);
//! `names`, a comma-separated list naming counters 0, 1, ... (a drop-reason
//! table, say) in the statistics; unnamed counters are reported by index.
//!
//! | register | direction | meaning |
//! |----------|-----------|---------|
//! | in 0     | input     | counter index |
//! | in 1     | input     | amount (for `add`) |
//! | out 0    | output    | low 32 bits of the counter (after `read`) |
//! | out 1    | output    | high 32 bits of the counter (after `read`) |
//!
//! | op | name  | effect |
//! |----|-------|--------|
//! | 0  | add   | counter[in0] += in1 (wrapping at 2^64) |
//! | 1  | read  | out0, out1 = counter[in0] |
//! | 2  | reset | counter[in0] = 0 |
//!
//! An index at or above `size` is a bad argument: the handler faults with `copro`.
//!
//! Several workers: one state per worker (`PerWorker`). A fork has the
//! configuration (size and names) of the instance and its counters at zero;
//! the runtime sums the statistics by name over the workers, and at the end
//! of a run adds every worker's counters into the first worker's (`absorb`),
//! so that `dump` covers every worker. In the data plane, `read` sees only
//! the worker's own counts: under flow distribution all the packets of a
//! flow reach one worker, so a per-flow counter is exact there, while a
//! counter of all traffic holds that worker's share of it.

use netvm_vm::{CoproConfig, CoproError, Coprocessor, DirectOp, InvokeContext, RegisterFile, WorkerShare};

/// Largest configurable number of counters.
pub const MAX_COUNTERS: usize = 1 << 20;

/// The `counters` coprocessor.
#[derive(Clone, Debug)]
pub struct Counters {
    values: Vec<u64>,
    names: Vec<String>,
    input: [u32; 2],
    output: [u32; 2],
    /// The direct entries of add, read and reset for compiled code (filled
    /// by `registers`, pointing at this instance).
    direct: [DirectOp; 3],
}

impl Counters {
    /// `size` zeroed counters.
    pub fn new(size: usize) -> Counters {
        Counters { values: vec![0; size], names: Vec::new(), input: [0; 2], output: [0; 2], direct: [DirectOp::NONE; 3] }
    }

    /// The current counter values.
    pub fn values(&self) -> &[u64] {
        &self.values
    }

    fn slot(&mut self) -> Result<&mut u64, CoproError> {
        let i = self.input[0] as usize;
        let n = self.values.len();
        self.values.get_mut(i).ok_or_else(|| CoproError::BadArgument(format!("counter index {i} out of range (size {n})")))
    }
}

pub(crate) fn create(cfg: &CoproConfig) -> Result<Box<dyn Coprocessor>, String> {
    let names: Vec<String> = match cfg.get("names") {
        Some(s) => s.split(',').map(|n| n.trim().to_string()).collect(),
        None => Vec::new(),
    };
    if let Some(n) = names.iter().find(|n| n.is_empty() || !n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')) {
        return Err(format!("counters: name `{n}` must be letters, digits, `_` or `-`"));
    }
    let size = match cfg.get("size") {
        Some(s) => s.parse::<usize>().map_err(|_| format!("counters: size `{s}` is not a number"))?,
        None if !names.is_empty() => names.len(),
        None => 256,
    };
    if size == 0 || size > MAX_COUNTERS {
        return Err(format!("counters: size must be between 1 and {MAX_COUNTERS}"));
    }
    if names.len() > size {
        return Err(format!("counters: {} names for {size} counters", names.len()));
    }
    if let Some(k) = cfg.keys().find(|k| !matches!(k.as_str(), "size" | "names")) {
        return Err(format!("counters: unknown setting `{k}` (known: size, names)"));
    }
    let mut c = Counters::new(size);
    c.names = names;
    Ok(Box::new(c))
}

impl Coprocessor for Counters {
    fn kind(&self) -> &str {
        "counters"
    }

    fn write(&mut self, reg: u8, value: u32) -> Result<(), CoproError> {
        *self.input.get_mut(reg as usize).ok_or(CoproError::NoRegister(reg))? = value;
        Ok(())
    }

    fn read(&mut self, reg: u8) -> Result<u32, CoproError> {
        self.output.get(reg as usize).copied().ok_or(CoproError::NoRegister(reg))
    }

    fn registers(&mut self) -> RegisterFile {
        // Every operation reads nothing but the registers.
        self.direct = [DirectOp::of::<Self, 0>(self), DirectOp::of::<Self, 1>(self), DirectOp::of::<Self, 2>(self)];
        RegisterFile::over(&mut self.input, &mut self.output).with_direct(&self.direct)
    }

    #[inline(always)]
    fn invoke(&mut self, op: u8, _ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        match op {
            0 => {
                let amount = u64::from(self.input[1]);
                let c = self.slot()?;
                *c = c.wrapping_add(amount);
            }
            1 => {
                let v = *self.slot()?;
                self.output = [v as u32, (v >> 32) as u32];
            }
            2 => *self.slot()? = 0,
            _ => return Err(CoproError::NoOperation(op)),
        }
        Ok(())
    }

    fn dump(&self) -> String {
        let nonzero: Vec<String> = self.stats().into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        nonzero.join(" ")
    }

    fn clear(&mut self) {
        self.values.fill(0);
    }

    /// Named counters always, the others when non-zero.
    fn stats(&self) -> Vec<(String, u64)> {
        let named = self.values.iter().zip(&self.names).map(|(v, n)| (n.clone(), *v));
        let rest = self.values.iter().enumerate().skip(self.names.len()).filter(|(_, v)| **v != 0).map(|(i, v)| (i.to_string(), *v));
        named.chain(rest).collect()
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    /// Same size and names, counters at zero.
    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        let mut c = Counters::new(self.values.len());
        c.names = self.names.clone();
        Ok(Box::new(c))
    }

    fn share(&self) -> WorkerShare {
        WorkerShare::PerWorker
    }

    /// Adds the other worker's counters (wrapping at 2^64) and zeroes them there.
    fn absorb(&mut self, other: &mut dyn Coprocessor) {
        if let Some(o) = crate::downcast::<Counters>(other) {
            for (a, b) in self.values.iter_mut().zip(&mut o.values) {
                *a = a.wrapping_add(std::mem::take(b));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netvm_vm::Timestamp;

    #[test]
    fn add_read_reset_and_errors() {
        let mut c = create(&CoproConfig::from([("size".to_string(), "4".to_string())])).unwrap();
        let ctx = InvokeContext { packet: &[], info: &[], now: Timestamp::default(), seq: 0 };
        c.write(0, 3).unwrap();
        c.write(1, u32::MAX).unwrap();
        c.invoke(0, &ctx).unwrap();
        c.invoke(0, &ctx).unwrap();
        c.invoke(1, &ctx).unwrap();
        let v = u64::from(c.read(0).unwrap()) | u64::from(c.read(1).unwrap()) << 32;
        assert_eq!(v, 2 * u64::from(u32::MAX));
        c.invoke(2, &ctx).unwrap();
        c.invoke(1, &ctx).unwrap();
        assert_eq!(c.read(0).unwrap(), 0);
        c.write(0, 4).unwrap();
        assert!(c.invoke(0, &ctx).is_err());
        assert!(c.invoke(9, &ctx).is_err());
        assert!(c.write(2, 0).is_err());
        assert!(create(&CoproConfig::from([("size".to_string(), "0".to_string())])).is_err());
        assert!(create(&CoproConfig::from([("bogus".to_string(), "1".to_string())])).is_err());
    }

    #[test]
    fn named_counters_report_by_name() {
        let mut c = create(&CoproConfig::from([("names".to_string(), "bad_version, short".to_string())])).unwrap();
        let ctx = InvokeContext { packet: &[], info: &[], now: Timestamp::default(), seq: 0 };
        c.write(0, 1).unwrap();
        c.write(1, 5).unwrap();
        c.invoke(0, &ctx).unwrap();
        assert_eq!(c.stats(), vec![("bad_version".to_string(), 0), ("short".to_string(), 5)]);
        c.write(0, 2).unwrap();
        assert!(c.invoke(0, &ctx).is_err(), "size defaults to the number of names");
        c.clear();
        assert_eq!(c.stats()[1].1, 0);
        assert!(create(&CoproConfig::from([("names".to_string(), "a,,b".to_string())])).is_err());
        assert!(create(&CoproConfig::from([("names".to_string(), "a,b".to_string()), ("size".to_string(), "1".to_string())])).is_err());
    }

    #[test]
    fn forks_count_apart_and_absorb_adds() {
        let mut a = create(&CoproConfig::from([("names".to_string(), "x,y".to_string()), ("size".to_string(), "3".to_string())])).unwrap();
        let ctx = InvokeContext { packet: &[], info: &[], now: Timestamp::default(), seq: 0 };
        let add = |c: &mut Box<dyn Coprocessor>, i: u32, n: u32| {
            c.write(0, i).unwrap();
            c.write(1, n).unwrap();
            c.invoke(0, &ctx).unwrap();
        };
        add(&mut a, 0, 5);
        let mut b = a.fork().unwrap();
        assert_eq!(b.share(), WorkerShare::PerWorker);
        assert_eq!(b.stats(), vec![("x".to_string(), 0), ("y".to_string(), 0)], "a fork starts at zero");
        add(&mut b, 0, 2);
        add(&mut b, 2, 7);
        add(&mut a, 2, 1);
        assert_eq!(a.dump(), "x=5 y=0 2=1");
        a.absorb(b.as_mut());
        assert_eq!(a.dump(), "x=7 y=0 2=8");
        assert_eq!(b.dump(), "x=0 y=0", "absorbed counts leave the fork");
    }
}
