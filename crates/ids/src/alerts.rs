//! Alerts: what the IDS reports, from the events its detect NetPEs record.
//!
//! Each detect NetPE logs `(0, rule, action, 0)` in its `eventlog` when a
//! rule matches; the runtime's driver delivers the events of every batch in
//! packet order (by sequence number, whichever worker ran the packet).
//! [`AlertWriter`] turns them into one JSON object per line, per packet:
//! nothing if a `pass` rule matched the packet, else one line per `alert`
//! or `drop` rule that matched, by rule order.

use std::collections::BTreeSet;
use std::io::{self, Write};

use netvm_vm::CoproEvent;

use crate::rules::{Action, Rule};

/// Writes alerts as JSON lines: `packet` (1-based position in the input),
/// `sid`, `gid`, `rev`, `msg`, `action`, `ts`.
#[derive(Debug)]
pub struct AlertWriter<W: Write> {
    out: W,
    rules: Vec<Rule>,
    written: u64,
    ids: BTreeSet<u32>,
}

impl<W: Write> AlertWriter<W> {
    /// A writer for the alerts of `rules` (in the order compiled: events name rules by index).
    pub fn new(out: W, rules: Vec<Rule>) -> AlertWriter<W> {
        AlertWriter { out, rules, written: 0, ids: BTreeSet::new() }
    }

    /// Alert lines written so far.
    pub fn alerts(&self) -> u64 {
        self.written
    }

    /// Writes the alerts of `events`, which hold every event of each packet
    /// they mention, in packet order; returns the lines written.
    pub fn write_events(&mut self, events: &[CoproEvent]) -> io::Result<u64> {
        let mut n = 0;
        for group in events.chunk_by(|a, b| a.seq == b.seq) {
            let rule = |e: &CoproEvent| self.rules.get(e.words[1] as usize);
            if group.iter().any(|e| rule(e).is_some_and(|r| r.action == Action::Pass)) {
                continue;
            }
            self.ids.clear();
            self.ids.extend(group.iter().map(|e| e.words[1]));
            let (seq, ts) = (group[0].seq, group[0].ts);
            for id in &self.ids {
                let Some(r) = self.rules.get(*id as usize) else { continue };
                writeln!(
                    self.out,
                    "{{\"packet\":{},\"sid\":{},\"gid\":{},\"rev\":{},\"msg\":{},\"action\":\"{}\",\"ts\":\"{}.{:09}\"}}",
                    seq + 1,
                    r.sid,
                    r.gid,
                    r.rev,
                    json_str(&r.msg),
                    r.action.name(),
                    ts.sec,
                    ts.nsec
                )?;
                n += 1;
            }
        }
        self.written += n;
        Ok(n)
    }

    /// Flushes and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// A string as a JSON string literal.
fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

#[cfg(test)]
mod tests {
    use super::json_str;

    #[test]
    fn json_strings_escape() {
        assert_eq!(json_str("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\u0001é\"");
    }
}
