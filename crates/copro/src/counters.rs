//! `counters`: an array of 64-bit counters.
//!
//! Configuration: `size` (number of counters, default 256, at most 1<<20).
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

use netvm_vm::{CoproConfig, CoproError, Coprocessor, InvokeContext};

/// Largest configurable number of counters.
pub const MAX_COUNTERS: usize = 1 << 20;

/// The `counters` coprocessor.
#[derive(Clone, Debug)]
pub struct Counters {
    values: Vec<u64>,
    input: [u32; 2],
    output: [u32; 2],
}

impl Counters {
    /// `size` zeroed counters.
    pub fn new(size: usize) -> Counters {
        Counters { values: vec![0; size], input: [0; 2], output: [0; 2] }
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
    let size = match cfg.get("size") {
        Some(s) => s.parse::<usize>().map_err(|_| format!("counters: size `{s}` is not a number"))?,
        None => 256,
    };
    if size == 0 || size > MAX_COUNTERS {
        return Err(format!("counters: size must be between 1 and {MAX_COUNTERS}"));
    }
    if let Some(k) = cfg.keys().find(|k| k.as_str() != "size") {
        return Err(format!("counters: unknown setting `{k}` (known: size)"));
    }
    Ok(Box::new(Counters::new(size)))
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
        let nonzero: Vec<String> = self.values.iter().enumerate().filter(|(_, v)| **v != 0).map(|(i, v)| format!("{i}={v}")).collect();
        nonzero.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netvm_vm::Timestamp;

    #[test]
    fn add_read_reset_and_errors() {
        let mut c = create(&CoproConfig::from([("size".to_string(), "4".to_string())])).unwrap();
        let ctx = InvokeContext { packet: &[], info: &[], now: Timestamp::default() };
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
}
