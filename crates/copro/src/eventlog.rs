//! `eventlog`: records events (four 32-bit words, the packet time and the
//! packet's sequence number) for the host application to collect: the IDS
//! logs (packet, rule) alerts here.
//!
//! | register  | meaning |
//! |-----------|---------|
//! | in 0..3   | the event's words |
//! | out 0     | number of events recorded since the last drain (saturating at 2^32 - 1) |
//!
//! | op | name   | effect |
//! |----|--------|--------|
//! | 0  | record | appends (in0, in1, in2, in3, packet time, packet sequence number); out0 = events held |
//!
//! Configuration: `capacity`, the most events held between two drains
//! (1 to 2^26, default 1,048,576); events beyond it are counted
//! (`overflow`) and lost, never stored. The runtime collects the events
//! with `Coprocessor::drain_events` after each batch when the host asked
//! for them; a host holding the instance can also call [`EventLog::drain`]
//! (reached with `Coprocessor::as_any_mut`). Either keeps memory bounded.
//! `dump` writes the held events, one per line: `SEC.NSEC W0 W1 W2 W3 SEQ`.
//! Statistics: `events` (recorded in all), `held`, `overflow`.
//!
//! Several workers: one log per worker (`PerWorker`). A fork is an empty
//! log of the same capacity (each worker's log holds up to `capacity`
//! events between drains). The sequence number, unlike the time, is the
//! same whichever worker runs the packet, so the runtime delivers drained
//! events in packet order; at the end of a run `absorb` moves every
//! worker's held events into the first worker's log, merged by sequence
//! number (then in recording order), keeping at most `capacity` (those of
//! the earliest packets; the others count as `overflow`), and adds up the
//! statistics.

use netvm_vm::{CoproConfig, CoproError, CoproEvent, Coprocessor, InvokeContext, RegisterFile, WorkerShare};

/// Largest configurable capacity.
pub const MAX_EVENTS: usize = 1 << 26;

/// One recorded event: its four words, the packet's time and sequence number.
pub use netvm_vm::CoproEvent as Event;

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

    /// The events held, oldest first.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Events lost because the log was full.
    pub fn overflow(&self) -> u64 {
        self.overflow
    }
}

/// Merges two lists each in sequence order into one, `a`'s first among
/// equal sequence numbers.
fn merge_by_seq(a: Vec<Event>, b: Vec<Event>) -> Vec<Event> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => x.seq <= y.seq,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return out,
        };
        out.extend(if take_a { a.next() } else { b.next() });
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

    fn registers(&mut self) -> RegisterFile {
        // Output register 0 (the number of events) is computed on read.
        RegisterFile::new(&mut self.input, u32::MAX, &mut [], 0)
    }

    fn invoke(&mut self, op: u8, ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        if op != 0 {
            return Err(CoproError::NoOperation(op));
        }
        self.recorded += 1;
        if self.events.len() < self.capacity {
            self.events.push(CoproEvent { words: self.input, ts: ctx.now, seq: ctx.seq });
        } else {
            self.overflow += 1;
        }
        Ok(())
    }

    fn dump(&self) -> String {
        self.events
            .iter()
            .map(|e| format!("{}.{:09} {} {} {} {} {}\n", e.ts.sec, e.ts.nsec, e.words[0], e.words[1], e.words[2], e.words[3], e.seq))
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

    fn drain_events(&mut self, out: &mut Vec<CoproEvent>) {
        out.append(&mut self.events);
    }

    /// An empty log of the same capacity.
    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        Ok(Box::new(EventLog::new(self.capacity)))
    }

    fn share(&self) -> WorkerShare {
        WorkerShare::PerWorker
    }

    /// Moves the other log's events in, merged by sequence number, and adds
    /// its statistics; at most `capacity` events stay, the earliest packets'.
    fn absorb(&mut self, other: &mut dyn Coprocessor) {
        let Some(o) = crate::downcast::<EventLog>(other) else { return };
        let mut theirs = std::mem::take(&mut o.events);
        let mut mine = std::mem::take(&mut self.events);
        // Each log is in sequence order when its worker ran packets in
        // order; a stable sort keeps recording order among equal numbers.
        for v in [&mut mine, &mut theirs] {
            if !v.is_sorted_by_key(|e| e.seq) {
                v.sort_by_key(|e| e.seq);
            }
        }
        let mut all = merge_by_seq(mine, theirs);
        if all.len() > self.capacity {
            self.overflow += (all.len() - self.capacity) as u64;
            all.truncate(self.capacity);
        }
        self.events = all;
        self.recorded += std::mem::take(&mut o.recorded);
        self.overflow += std::mem::take(&mut o.overflow);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netvm_vm::Timestamp;

    #[test]
    fn record_drain_overflow() {
        let mut c = create(&CoproConfig::from([("capacity".to_string(), "2".to_string())])).unwrap();
        for i in 0..3 {
            let ctx = InvokeContext { packet: &[], info: &[], now: Timestamp { sec: 5, nsec: 7 }, seq: 10 + u64::from(i) };
            c.write(0, i).unwrap();
            c.write(3, 9).unwrap();
            c.invoke(0, &ctx).unwrap();
        }
        assert_eq!(c.read(0).unwrap(), 2);
        assert_eq!(c.dump(), "5.000000007 0 0 0 9 10\n5.000000007 1 0 0 9 11\n");
        assert_eq!(c.stats()[2], ("overflow".to_string(), 1));
        let log = c.as_any_mut().unwrap().downcast_mut::<EventLog>().unwrap();
        let drained = log.drain();
        assert_eq!(drained.len(), 2);
        assert_eq!((drained[1].words, drained[1].seq), ([1, 0, 0, 9], 11));
        assert!(log.drain().is_empty());
        let ctx = InvokeContext { packet: &[], info: &[], now: Timestamp::default(), seq: 0 };
        assert!(c.write(4, 0).is_err() && c.read(1).is_err() && c.invoke(1, &ctx).is_err());
        assert!(create(&CoproConfig::from([("capacity".to_string(), "0".to_string())])).is_err());
    }

    fn record(c: &mut dyn Coprocessor, word: u32, seq: u64) {
        c.write(0, word).unwrap();
        c.invoke(0, &InvokeContext { packet: &[], info: &[], now: Timestamp::from_nanos(seq * 1000), seq }).unwrap();
    }

    #[test]
    fn drain_events_moves_them_with_their_sequence_numbers() {
        let mut c = create(&CoproConfig::new()).unwrap();
        record(c.as_mut(), 1, 4);
        record(c.as_mut(), 2, 9);
        let mut out = vec![CoproEvent { words: [7; 4], ts: Timestamp::default(), seq: 0 }];
        c.drain_events(&mut out);
        assert_eq!(out.iter().map(|e| (e.words[0], e.seq)).collect::<Vec<_>>(), [(7, 0), (1, 4), (2, 9)]);
        assert_eq!(out[2].ts, Timestamp::from_nanos(9000));
        c.drain_events(&mut out);
        assert_eq!(out.len(), 3, "drained events are gone");
        assert_eq!(c.stats()[..2], [("events".to_string(), 2), ("held".to_string(), 0)]);
    }

    #[test]
    fn forks_log_apart_and_absorb_merges_by_sequence_number() {
        let mut a = create(&CoproConfig::from([("capacity".to_string(), "5".to_string())])).unwrap();
        let mut b = a.fork().unwrap();
        assert_eq!(b.share(), WorkerShare::PerWorker);
        // Worker a ran packets 0, 2, 4, 6; worker b packets 1, 3, 5.
        for s in [0, 2, 4, 6] {
            record(a.as_mut(), 100 + s as u32, s);
        }
        for s in [1, 3, 5] {
            record(b.as_mut(), 100 + s as u32, s);
        }
        assert_eq!(b.read(0).unwrap(), 3);
        a.absorb(b.as_mut());
        let log = crate::downcast::<EventLog>(a.as_mut()).unwrap();
        assert_eq!(log.events().iter().map(|e| e.seq).collect::<Vec<_>>(), [0, 1, 2, 3, 4], "capacity 5 keeps the earliest packets'");
        assert_eq!(log.events()[3].words[0], 103);
        assert_eq!(a.stats(), vec![("events".into(), 7), ("held".into(), 5), ("overflow".into(), 2)]);
        assert_eq!(b.stats(), vec![("events".into(), 0), ("held".into(), 0), ("overflow".into(), 0)], "the fork is left empty");
        let mut out = Vec::new();
        a.drain_events(&mut out);
        assert!(out.windows(2).all(|w| w[0].seq < w[1].seq));
    }
}
