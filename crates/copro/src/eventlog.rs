//! `eventlog`: records events (four 32-bit words and the packet time) for
//! the host application to collect: the IDS logs (packet, rule) alerts here.
//!
//! | register  | meaning |
//! |-----------|---------|
//! | in 0..3   | the event's words |
//! | out 0     | number of events recorded since the last drain (saturating at 2^32 - 1) |
//!
//! | op | name   | effect |
//! |----|--------|--------|
//! | 0  | record | appends (in0, in1, in2, in3, packet time); out0 = events held |
//!
//! Configuration: `capacity`, the most events held between two drains
//! (1 to 2^26, default 1,048,576); events beyond it are counted
//! (`overflow`) and lost, never stored. The host drains the log through
//! [`EventLog::drain`] (reached with `Coprocessor::as_any_mut`), which a
//! caller does after each batch to keep memory bounded. `dump` writes the
//! held events, one per line: `SEC.NSEC W0 W1 W2 W3`. Statistics: `events`
//! (recorded in all), `held`, `overflow`.

use netvm_vm::{CoproConfig, CoproError, Coprocessor, InvokeContext, Timestamp};

/// Largest configurable capacity.
pub const MAX_EVENTS: usize = 1 << 26;

/// One recorded event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// The words written to in 0..3.
    pub words: [u32; 4],
    /// The time of the packet being processed.
    pub ts: Timestamp,
}

/// The `eventlog` coprocessor.
#[derive(Clone, Debug)]
pub struct EventLog {
    capacity: usize,
    events: Vec<Event>,
    input: [u32; 4],
    recorded: u64,
    overflow: u64,
}

impl EventLog {
    /// An empty log holding at most `capacity` events between drains.
    pub fn new(capacity: usize) -> EventLog {
        EventLog { capacity, events: Vec::new(), input: [0; 4], recorded: 0, overflow: 0 }
    }

    /// Takes the events held, oldest first.
    pub fn drain(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// Events lost because the log was full.
    pub fn overflow(&self) -> u64 {
        self.overflow
    }
}

pub(crate) fn create(cfg: &CoproConfig) -> Result<Box<dyn Coprocessor>, String> {
    if let Some(k) = cfg.keys().find(|k| k.as_str() != "capacity") {
        return Err(format!("eventlog: unknown setting `{k}` (known: capacity)"));
    }
    let capacity = match cfg.get("capacity") {
        Some(s) => s.parse::<usize>().map_err(|_| format!("eventlog: capacity `{s}` is not a number"))?,
        None => 1 << 20,
    };
    if capacity == 0 || capacity > MAX_EVENTS {
        return Err(format!("eventlog: capacity must be between 1 and {MAX_EVENTS}"));
    }
    Ok(Box::new(EventLog::new(capacity)))
}

impl Coprocessor for EventLog {
    fn kind(&self) -> &str {
        "eventlog"
    }

    fn write(&mut self, reg: u8, value: u32) -> Result<(), CoproError> {
        *self.input.get_mut(reg as usize).ok_or(CoproError::NoRegister(reg))? = value;
        Ok(())
    }

    fn read(&mut self, reg: u8) -> Result<u32, CoproError> {
        match reg {
            0 => Ok(u32::try_from(self.events.len()).unwrap_or(u32::MAX)),
            _ => Err(CoproError::NoRegister(reg)),
        }
    }

    fn invoke(&mut self, op: u8, ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        if op != 0 {
            return Err(CoproError::NoOperation(op));
        }
        self.recorded += 1;
        if self.events.len() < self.capacity {
            self.events.push(Event { words: self.input, ts: ctx.now });
        } else {
            self.overflow += 1;
        }
        Ok(())
    }

    fn dump(&self) -> String {
        self.events
            .iter()
            .map(|e| format!("{}.{:09} {} {} {} {}\n", e.ts.sec, e.ts.nsec, e.words[0], e.words[1], e.words[2], e.words[3]))
            .collect()
    }

    fn clear(&mut self) {
        self.events.clear();
    }

    fn stats(&self) -> Vec<(String, u64)> {
        vec![("events".into(), self.recorded), ("held".into(), self.events.len() as u64), ("overflow".into(), self.overflow)]
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_drain_overflow() {
        let mut c = create(&CoproConfig::from([("capacity".to_string(), "2".to_string())])).unwrap();
        let ctx = InvokeContext { packet: &[], info: &[], now: Timestamp { sec: 5, nsec: 7 } };
        for i in 0..3 {
            c.write(0, i).unwrap();
            c.write(3, 9).unwrap();
            c.invoke(0, &ctx).unwrap();
        }
        assert_eq!(c.read(0).unwrap(), 2);
        assert_eq!(c.dump(), "5.000000007 0 0 0 9\n5.000000007 1 0 0 9\n");
        assert_eq!(c.stats()[2], ("overflow".to_string(), 1));
        let log = c.as_any_mut().unwrap().downcast_mut::<EventLog>().unwrap();
        assert_eq!(log.drain().len(), 2);
        assert!(log.drain().is_empty());
        assert!(c.write(4, 0).is_err() && c.read(1).is_err() && c.invoke(1, &ctx).is_err());
        assert!(create(&CoproConfig::from([("capacity".to_string(), "0".to_string())])).is_err());
    }
}
