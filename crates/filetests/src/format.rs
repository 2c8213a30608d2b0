//! The test-file format: directives in comment lines of a NetIL listing
//! (`; ...`, tests/programs/*.nil) or of an application manifest (`# ...`,
//! tests/apps/*.toml). See the crate documentation for the grammar.

use std::collections::BTreeMap;

use netil::SegmentKind;
use netvm_vm::{CoproConfig, FaultKind, Outcome, Timestamp};

use crate::engines::EngineKind;

/// What one run of a packet must produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// A NetPE's outcome (NetIL files): `port N`, `drop`, `fault KIND`.
    Outcome(Outcome),
    /// What left an application, in order (application files):
    /// `sink N [packet=HEX], ...`; empty for `none` (duplicated, nothing left).
    Exits(Vec<(u16, Option<Vec<u8>>)>),
    /// An application verdict without exits: `drop` or `fault KIND`.
    Ended(Outcome),
}

/// One `run:` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunCase {
    /// 1-based line in the file.
    pub line: usize,
    /// Input packet bytes.
    pub packet: Vec<u8>,
    /// Wire length (default: packet length).
    pub wire: Option<u32>,
    /// Input port (of the NetPE, or of the application).
    pub inport: u16,
    /// Timestamp.
    pub ts: Timestamp,
    /// Budget override.
    pub budget: Option<u64>,
    /// Initial info memory bytes (rest zero; NetIL files).
    pub info_in: Vec<u8>,
    /// Expected result.
    pub expect: Expect,
    /// Expected packet bytes afterwards.
    pub expect_packet: Option<Vec<u8>>,
    /// Expected leading info memory bytes afterwards (NetPE engines only:
    /// info memory never leaves an application).
    pub expect_info: Option<Vec<u8>>,
    /// Expected data memory bytes afterwards: (NetPE index, offset, bytes).
    pub expect_data: Vec<(usize, usize, Vec<u8>)>,
    /// Expected budget used by this run (all NetPEs together).
    pub expect_used: Option<u64>,
}

/// An expected verifier rejection: `verify: error RULE [at [SEG+]OFFSET]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyError {
    /// The rule's name.
    pub rule: String,
    /// Where, if stated.
    pub at: Option<(SegmentKind, u32)>,
}

/// Which code a `clif:` block shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClifOf {
    /// A segment of the NetPE (per-NetPE JIT engines, NetIL files).
    Segment(SegmentKind),
    /// A function of the application compiled whole (linked engines):
    /// `netvm_run`, `netvm_init`, or a NetPE's function in table mode.
    Function(String),
}

/// Expected generated code: `clif: ENGINE .push|.init|FUNCTION` followed by `|` lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClifExpect {
    /// Line of the `clif:` directive.
    pub line: usize,
    /// The engine whose code it is (a JIT engine, per NetPE or linked).
    pub engine: EngineKind,
    /// The code shown.
    pub of: ClifOf,
    /// The expected text (the `|` lines, without their prefix).
    pub text: String,
}

/// A parsed test file.
#[derive(Clone, Debug, Default)]
pub struct TestFile {
    /// The file's text.
    pub source: String,
    /// `engines:`: the engines the file runs on (default: all).
    pub engines: Option<Vec<EngineKind>>,
    /// `run:` lines.
    pub runs: Vec<RunCase>,
    /// `verify:`.
    pub verify_error: Option<VerifyError>,
    /// `init: -> fault KIND` (NetIL files) or `init: -> fault KIND in NETPE`.
    pub init_fault: Option<(FaultKind, Option<String>)>,
    /// `copro: NAME KEY=VALUE ...`: coprocessor configuration (NetIL files).
    pub copro: BTreeMap<String, CoproConfig>,
    /// `clif:` blocks.
    pub clif: Vec<ClifExpect>,
}

/// Parses hex bytes, ignoring `_`.
pub fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    let clean: String = s.chars().filter(|c| *c != '_').collect();
    if !clean.len().is_multiple_of(2) {
        return Err(format!("odd number of hex digits in `{s}`"));
    }
    (0..clean.len()).step_by(2).map(|i| u8::from_str_radix(&clean[i..i + 2], 16).map_err(|_| format!("bad hex `{s}`"))).collect()
}

/// Lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn parse_outcome(words: &[&str]) -> Result<(Outcome, usize), String> {
    match words {
        ["port", n, ..] => Ok((Outcome::Forward(n.parse().map_err(|_| format!("bad port `{n}`"))?), 2)),
        ["drop", ..] => Ok((Outcome::Drop, 1)),
        ["exit", ..] => Ok((Outcome::Exit, 1)),
        ["fault", k, ..] => Ok((Outcome::Fault(FaultKind::from_name(k).ok_or_else(|| format!("unknown fault kind `{k}`"))?), 2)),
        _ => Err(format!("expected `port N`, `drop` or `fault KIND`, found `{}`", words.join(" "))),
    }
}

fn num(k: &str, v: &str) -> Result<u64, String> {
    v.parse::<u64>().map_err(|_| format!("`{k}`: bad number `{v}`"))
}

/// Parses the inputs of a run line (before `->`).
fn parse_inputs(case: &mut RunCase, inputs: &str) -> Result<(), String> {
    for w in inputs.split_whitespace() {
        let (k, v) = w.split_once('=').ok_or_else(|| format!("expected KEY=VALUE, found `{w}`"))?;
        match k {
            "packet" => case.packet = parse_hex(v)?,
            "wire" => case.wire = Some(num(k, v)? as u32),
            "inport" => case.inport = u16::try_from(num(k, v)?).map_err(|_| format!("input port `{v}` out of range"))?,
            "budget" => case.budget = Some(num(k, v)?),
            "info" => case.info_in = parse_hex(v)?,
            "ts" => {
                let (s, ns) = v.split_once('.').unwrap_or((v, "0"));
                case.ts = Timestamp { sec: num(k, s)?, nsec: num(k, ns)? as u32 };
            }
            _ => return Err(format!("unknown input `{k}`")),
        }
    }
    Ok(())
}

/// Parses the checks after a result: `packet=`, `info=`, `used=`, `data@[NETPE@]OFF=`.
fn parse_checks(case: &mut RunCase, words: &[&str], netpes: &[String]) -> Result<(), String> {
    for w in words {
        let (k, v) = w.split_once('=').ok_or_else(|| format!("expected KEY=VALUE, found `{w}`"))?;
        match k {
            "packet" => case.expect_packet = Some(parse_hex(v)?),
            "info" => case.expect_info = Some(parse_hex(v)?),
            "used" => case.expect_used = Some(num(k, v)?),
            _ => {
                let Some(at) = k.strip_prefix("data@") else { return Err(format!("unknown check `{k}`")) };
                let (node, off) = match at.split_once('@') {
                    Some((name, off)) => (netpes.iter().position(|n| n == name).ok_or_else(|| format!("`{k}`: no NetPE `{name}`"))?, off),
                    None => (0, at),
                };
                let off = off.parse().map_err(|_| format!("bad data offset `{off}`"))?;
                case.expect_data.push((node, off, parse_hex(v)?));
            }
        }
    }
    Ok(())
}

fn new_case(line: usize) -> RunCase {
    RunCase {
        line,
        packet: Vec::new(),
        wire: None,
        inport: 0,
        ts: Timestamp::default(),
        budget: None,
        info_in: Vec::new(),
        expect: Expect::Outcome(Outcome::Drop),
        expect_packet: None,
        expect_info: None,
        expect_data: Vec::new(),
        expect_used: None,
    }
}

/// A NetIL file's run line: `INPUTS -> OUTCOME CHECKS`.
fn parse_netpe_run(line: usize, text: &str) -> Result<RunCase, String> {
    let (inputs, expect) = text.split_once("->").ok_or("a run line needs `->`")?;
    let mut case = new_case(line);
    parse_inputs(&mut case, inputs)?;
    let words: Vec<&str> = expect.split_whitespace().collect();
    let (outcome, used) = parse_outcome(&words)?;
    case.expect = Expect::Outcome(outcome);
    parse_checks(&mut case, &words[used..], &[])?;
    Ok(case)
}

/// An application file's run line: `INPUTS -> EXITS CHECKS`, EXITS being
/// `drop`, `fault KIND`, `none`, or `sink N [packet=HEX]` items joined by `,`.
fn parse_app_run(line: usize, text: &str, netpes: &[String]) -> Result<RunCase, String> {
    let (inputs, expect) = text.split_once("->").ok_or("a run line needs `->`")?;
    let mut case = new_case(line);
    parse_inputs(&mut case, inputs)?;
    let items: Vec<&str> = expect.split(',').map(str::trim).collect();
    let mut exits = Vec::new();
    let last = items.len() - 1;
    for (i, item) in items.iter().enumerate() {
        let words: Vec<&str> = item.split_whitespace().collect();
        let checks: &[&str] = match words.as_slice() {
            ["sink", n, rest @ ..] => {
                let port = n.parse().map_err(|_| format!("bad sink `{n}`"))?;
                let (bytes, rest) = match rest {
                    [p, rest @ ..] if p.starts_with("packet=") => (Some(parse_hex(&p["packet=".len()..])?), rest),
                    _ => (None, rest),
                };
                exits.push((port, bytes));
                rest
            }
            [first, ..] if i == 0 && items.len() == 1 && ["drop", "fault", "none"].contains(first) => {
                if *first == "none" {
                    case.expect = Expect::Exits(Vec::new());
                    &words[1..]
                } else {
                    let (o, used) = parse_outcome(&words)?;
                    case.expect = Expect::Ended(o);
                    &words[used..]
                }
            }
            _ => return Err(format!("expected `sink N`, `drop`, `fault KIND` or `none`, found `{item}`")),
        };
        if !checks.is_empty() && i != last {
            return Err(format!("checks (`{}`) belong after the last exit", checks.join(" ")));
        }
        parse_checks(&mut case, checks, netpes)?;
    }
    if !exits.is_empty() {
        case.expect = Expect::Exits(exits);
    }
    if case.expect_info.is_some() {
        return Err("info memory never leaves an application: `info=` is for NetIL files".into());
    }
    Ok(case)
}

impl TestFile {
    /// Parses a NetIL test file (directives in `;` comments).
    pub fn parse(source: &str) -> Result<TestFile, String> {
        TestFile::parse_with(source, ';', None)
    }

    /// Parses an application test file: a manifest whose `#` comments hold
    /// the directives; `netpes` are its NetPE names (for `data@NETPE@OFF`).
    pub fn parse_app(source: &str, netpes: &[String]) -> Result<TestFile, String> {
        TestFile::parse_with(source, '#', Some(netpes))
    }

    fn parse_with(source: &str, comment: char, app: Option<&[String]>) -> Result<TestFile, String> {
        let mut t = TestFile { source: source.to_string(), ..TestFile::default() };
        let mut clif: Option<usize> = None;
        for (i, line) in source.lines().enumerate() {
            let line_no = i + 1;
            let Some(rest) = line.trim_start().strip_prefix(comment) else {
                clif = None;
                continue;
            };
            let at = |e: String| format!("line {line_no}: {e}");
            if let Some(text) = rest.strip_prefix('|') {
                let k = clif.ok_or_else(|| at("a `|` line outside a `clif:` block".into()))?;
                let body = text.strip_prefix(' ').unwrap_or(text);
                t.clif[k].text.push_str(body);
                t.clif[k].text.push('\n');
                continue;
            }
            clif = None;
            let rest = rest.trim_start();
            if let Some(r) = rest.strip_prefix("run:") {
                let case = match app {
                    Some(netpes) => parse_app_run(line_no, r, netpes),
                    None => parse_netpe_run(line_no, r),
                };
                t.runs.push(case.map_err(at)?);
            } else if let Some(r) = rest.strip_prefix("engines:") {
                t.engines = Some(EngineKind::parse_list(r).map_err(at)?);
            } else if let Some(r) = rest.strip_prefix("verify:") {
                t.verify_error = Some(parse_verify(r).map_err(at)?);
            } else if let Some(r) = rest.strip_prefix("init:") {
                let words: Vec<&str> = r.trim_start().trim_start_matches("->").split_whitespace().collect();
                match (parse_outcome(&words).map_err(at)?, &words[2.min(words.len())..]) {
                    ((Outcome::Fault(k), _), []) => t.init_fault = Some((k, None)),
                    ((Outcome::Fault(k), _), ["in", netpe]) => t.init_fault = Some((k, Some(netpe.to_string()))),
                    _ => return Err(at("`init:` expects `-> fault KIND [in NETPE]`".into())),
                }
            } else if let Some(r) = rest.strip_prefix("copro:") {
                let mut w = r.split_whitespace();
                let name = w.next().ok_or_else(|| at("`copro:` needs a name".into()))?;
                let cfg = t.copro.entry(name.to_string()).or_default();
                for kv in w {
                    let (k, v) = kv.split_once('=').ok_or_else(|| at(format!("expected KEY=VALUE, found `{kv}`")))?;
                    cfg.insert(k.into(), v.into());
                }
            } else if let Some(r) = rest.strip_prefix("clif:") {
                let w: Vec<&str> = r.split_whitespace().collect();
                let [engine, what] = w.as_slice() else { return Err(at("expected `clif: ENGINE .push|.init|FUNCTION`".into())) };
                let engine = EngineKind::from_name(engine).ok_or_else(|| at(format!("unknown engine `{engine}`")))?;
                let of = match (*what, engine) {
                    (".push", EngineKind::Jit(_)) if app.is_none() => ClifOf::Segment(SegmentKind::Push),
                    (".init", EngineKind::Jit(_)) if app.is_none() => ClifOf::Segment(SegmentKind::Init),
                    (f, EngineKind::Linked(..)) if !f.starts_with('.') => ClifOf::Function(f.to_string()),
                    _ => {
                        return Err(at(format!(
                            "`clif:` shows a segment (.push, .init) of a NetIL file's per-NetPE JIT engine, or a function of a linked engine; not `{what}` of {}",
                            engine.name()
                        )))
                    }
                };
                clif = Some(t.clif.len());
                t.clif.push(ClifExpect { line: line_no, engine, of, text: String::new() });
            }
        }
        Ok(t)
    }

    /// Whether the file says anything to check.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.verify_error.is_none() && self.init_fault.is_none() && self.clif.is_empty()
    }

    /// The engines the file runs on.
    pub fn engines(&self) -> Vec<EngineKind> {
        self.engines.clone().unwrap_or_else(|| EngineKind::ALL.to_vec())
    }
}

fn parse_verify(r: &str) -> Result<VerifyError, String> {
    let w: Vec<&str> = r.split_whitespace().collect();
    let (rule, loc) = match w.as_slice() {
        ["error", rule] => (rule.to_string(), None),
        ["error", rule, "at", loc] => (rule.to_string(), Some(*loc)),
        _ => return Err("expected `verify: error RULE [at [.init+]OFFSET]`".into()),
    };
    let at = match loc {
        None => None,
        Some(l) => {
            let (seg, off) = match l.split_once('+') {
                Some((".init", o)) => (SegmentKind::Init, o),
                Some((".push", o)) => (SegmentKind::Push, o),
                Some(_) => return Err(format!("bad location `{l}`")),
                None => (SegmentKind::Push, l),
            };
            Some((seg, off.parse().map_err(|_| format!("bad offset `{off}`"))?))
        }
    };
    Ok(VerifyError { rule, at })
}

/// Rewrites the `clif:` blocks of `source` with `actual` (one text per
/// block, in order): what `NETVM_TEST_BLESS=1` writes back.
pub fn bless_clif(source: &str, comment: char, actual: &[String]) -> String {
    let mut out = String::with_capacity(source.len());
    let mut k = 0;
    let mut in_block = false;
    for line in source.lines() {
        let t = line.trim_start();
        if in_block && t.starts_with(comment) && t[1..].starts_with('|') {
            continue;
        }
        in_block = false;
        out.push_str(line);
        out.push('\n');
        if t.strip_prefix(comment).is_some_and(|r| r.trim_start().starts_with("clif:")) {
            in_block = true;
            for l in actual.get(k).map(String::as_str).unwrap_or("").lines() {
                out.push(comment);
                out.push('|');
                if !l.is_empty() {
                    out.push(' ');
                    out.push_str(l);
                }
                out.push('\n');
            }
            k += 1;
        }
    }
    out
}
