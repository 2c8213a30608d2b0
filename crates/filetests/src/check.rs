//! Checking results: every engine against the file's expectations and
//! against the oracle (the interpreter), observable by observable.

use netvm_runtime::Verdict;
use netvm_vm::Outcome;

use crate::format::{hex, Expect, RunCase, TestFile};
use crate::run::{EngineRun, Observed};

fn show_exits(exits: &[(u16, Vec<u8>)]) -> String {
    if exits.is_empty() {
        return "nothing".into();
    }
    exits.iter().map(|(p, b)| format!("sink {p} packet={}", hex(b))).collect::<Vec<_>>().join(", ")
}

fn outcome_verdict(o: Outcome) -> Option<Verdict> {
    match o {
        Outcome::Forward(p) => Some(Verdict::Output(p)),
        Outcome::Drop => Some(Verdict::Drop),
        Outcome::Fault(k) => Some(Verdict::Fault(k)),
        Outcome::Exit => None,
    }
}

/// Checks one observed run against its run line; returns the failures.
pub fn expectations(case: &RunCase, got: &Observed) -> Vec<String> {
    let mut fails = Vec::new();
    let mut fail = |m: String| fails.push(format!("line {}: {m}", case.line));
    match &case.expect {
        Expect::Outcome(o) | Expect::Ended(o) => {
            if outcome_verdict(*o) != Some(got.verdict) {
                fail(format!("expected {o}, got {:?}", got.verdict));
            }
        }
        Expect::Exits(want) => {
            let same = want.len() == got.exits.len()
                && want.iter().zip(&got.exits).all(|((wp, wb), (gp, gb))| wp == gp && wb.as_ref().is_none_or(|b| b == gb));
            if !same {
                fail(format!("expected to leave on {want:?}, left on {}", show_exits(&got.exits)));
            }
            if want.is_empty() && !matches!(got.verdict, Verdict::Fanout { outputs: 0 }) {
                fail(format!("expected `none` (duplicated, nothing left), got {:?}", got.verdict));
            }
        }
    }
    if let Some(p) = &case.expect_packet {
        if &got.packet != p {
            fail(format!("packet: expected {}, got {}", hex(p), hex(&got.packet)));
        }
    }
    if let (Some(want), Some(info)) = (&case.expect_info, &got.info) {
        if info.get(..want.len()) != Some(&want[..]) {
            fail(format!("info: expected {}, got {}", hex(want), hex(info)));
        }
    }
    for (node, off, bytes) in &case.expect_data {
        let data = got.data.get(*node).map(Vec::as_slice).unwrap_or(&[]);
        if data.get(*off..off + bytes.len()) != Some(&bytes[..]) {
            let end = (off + bytes.len()).min(data.len());
            fail(format!("data@{off}: expected {}, got {}", hex(bytes), hex(data.get(*off..end).unwrap_or(&[]))));
        }
    }
    if let Some(u) = case.expect_used {
        let total: u64 = got.used.iter().sum();
        if total != u {
            fail(format!("budget used: expected {u}, got {total} ({:?} per NetPE)", got.used));
        }
    }
    fails
}

/// Compares an engine's whole run with the oracle's: every observable the
/// engine has. Returns the differences.
pub fn against_oracle(file: &TestFile, oracle: &EngineRun, got: &EngineRun) -> Vec<String> {
    if oracle.init != got.init {
        return vec![format!(".init: the interpreter gives {:?}, this engine {:?}", oracle.init, got.init)];
    }
    let mut fails = Vec::new();
    for ((case, want), got) in file.runs.iter().zip(&oracle.runs).zip(&got.runs) {
        let mut diff = |what: &str, w: String, g: String| {
            fails.push(format!("line {}: {what}: the interpreter gives {w}, this engine {g}", case.line));
        };
        if want.verdict != got.verdict {
            diff("verdict", format!("{:?}", want.verdict), format!("{:?}", got.verdict));
        }
        if want.exits != got.exits {
            diff("exits", show_exits(&want.exits), show_exits(&got.exits));
        }
        if want.packet != got.packet {
            diff("packet", hex(&want.packet), hex(&got.packet));
        }
        if let (Some(w), Some(g)) = (&want.info, &got.info) {
            if w != g {
                diff("info", hex(w), hex(g));
            }
        }
        if want.data != got.data {
            let show = |d: &[Vec<u8>]| d.iter().map(|m| hex(m)).collect::<Vec<_>>().join(" | ");
            diff("data memory", show(&want.data), show(&got.data));
        }
        if want.used != got.used {
            diff("budget used", format!("{:?}", want.used), format!("{:?}", got.used));
        }
    }
    if oracle.runs.len() != got.runs.len() {
        fails.push(format!("{} runs, the interpreter {}", got.runs.len(), oracle.runs.len()));
    }
    fails
}

/// Checks the `init:` expectation (or that `.init` succeeded).
pub fn init(file: &TestFile, names: &[String], got: &EngineRun) -> Option<String> {
    match (&file.init_fault, got.init) {
        (None, Ok(())) => None,
        (Some((k, netpe)), Err((n, g))) if *k == g && netpe.as_ref().is_none_or(|name| names.get(n) == Some(name)) => None,
        (want, got) => Some(format!(".init: expected {want:?}, got {got:?}")),
    }
}
