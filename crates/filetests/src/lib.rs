//! NetIL text tests: a `.nil` listing whose comment lines state inputs and
//! expected results, executed by one harness on every engine.
//!
//! ```text
//! ; run: packet=<hex> [wire=N] [inport=N] [ts=SEC.NSEC] [budget=N] [info=<hex>] -> RESULT [packet=<hex>] [info=<hex>] [data@OFF=<hex>]
//! ; verify: error RULE at OFFSET        (or `at .init+OFFSET`; the listing must be rejected)
//! ; init: -> fault KIND                 (the .init handler must fail this way)
//! ; copro: NAME KEY=VALUE ...           (configuration of a declared coprocessor)
//! ```
//!
//! RESULT is `port N`, `drop` or `fault KIND` (bounds, div-by-zero, budget,
//! bad-port, copro). After the result, optional checks compare the packet
//! bytes, the info memory (its first bytes) and data memory at an offset.
//! `run` lines execute in order on one NetPE instance, so data memory and
//! coprocessor state persist from one line to the next, as they would for
//! consecutive packets. Hex may contain spaces or `_` for readability when
//! written in quotes-free groups joined by `_`.

use std::collections::BTreeMap;

use netil::SegmentKind;
use netvm_runtime::Engine;
use netvm_vm::{CoproConfig, ExchangeBuffer, FaultKind, Limits, Outcome, Packet, PeState, Timestamp};

/// One `; run:` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunCase {
    /// 1-based line in the file.
    pub line: usize,
    /// Input packet bytes.
    pub packet: Vec<u8>,
    /// Wire length (default: packet length).
    pub wire: Option<u32>,
    /// Input port.
    pub inport: u16,
    /// Timestamp.
    pub ts: Timestamp,
    /// Budget override.
    pub budget: Option<u64>,
    /// Initial info memory bytes (rest zero).
    pub info_in: Vec<u8>,
    /// Expected outcome.
    pub expect: Outcome,
    /// Expected packet bytes afterwards.
    pub expect_packet: Option<Vec<u8>>,
    /// Expected leading info memory bytes afterwards.
    pub expect_info: Option<Vec<u8>>,
    /// Expected data memory bytes at an offset afterwards.
    pub expect_data: Vec<(usize, Vec<u8>)>,
}

/// A parsed test file.
#[derive(Clone, Debug, Default)]
pub struct TestFile {
    /// The listing.
    pub source: String,
    /// `; run:` lines.
    pub runs: Vec<RunCase>,
    /// `; verify: error RULE at [SEG+]OFFSET`.
    pub verify_error: Option<(String, Option<SegmentKind>, Option<u32>)>,
    /// `; init: -> fault KIND`.
    pub init_fault: Option<FaultKind>,
    /// Coprocessor configurations.
    pub copro: BTreeMap<String, CoproConfig>,
}

/// Parses hex bytes, ignoring `_`.
pub fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    let clean: String = s.chars().filter(|c| *c != '_').collect();
    if !clean.len().is_multiple_of(2) {
        return Err(format!("odd number of hex digits in `{s}`"));
    }
    (0..clean.len()).step_by(2).map(|i| u8::from_str_radix(&clean[i..i + 2], 16).map_err(|_| format!("bad hex `{s}`"))).collect()
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

fn parse_run(line: usize, text: &str) -> Result<RunCase, String> {
    let (inputs, expect) = text.split_once("->").ok_or("a run line needs `->`")?;
    let mut case = RunCase {
        line,
        packet: Vec::new(),
        wire: None,
        inport: 0,
        ts: Timestamp::default(),
        budget: None,
        info_in: Vec::new(),
        expect: Outcome::Drop,
        expect_packet: None,
        expect_info: None,
        expect_data: Vec::new(),
    };
    for w in inputs.split_whitespace() {
        let (k, v) = w.split_once('=').ok_or_else(|| format!("expected KEY=VALUE, found `{w}`"))?;
        let num = |v: &str| v.parse::<u64>().map_err(|_| format!("`{k}`: bad number `{v}`"));
        match k {
            "packet" => case.packet = parse_hex(v)?,
            "wire" => case.wire = Some(num(v)? as u32),
            "inport" => case.inport = num(v)? as u16,
            "budget" => case.budget = Some(num(v)?),
            "info" => case.info_in = parse_hex(v)?,
            "ts" => {
                let (s, ns) = v.split_once('.').unwrap_or((v, "0"));
                case.ts = Timestamp { sec: num(s)?, nsec: num(ns)? as u32 };
            }
            _ => return Err(format!("unknown input `{k}`")),
        }
    }
    let words: Vec<&str> = expect.split_whitespace().collect();
    let (outcome, used) = parse_outcome(&words)?;
    case.expect = outcome;
    for w in &words[used..] {
        let (k, v) = w.split_once('=').ok_or_else(|| format!("expected KEY=VALUE, found `{w}`"))?;
        match k {
            "packet" => case.expect_packet = Some(parse_hex(v)?),
            "info" => case.expect_info = Some(parse_hex(v)?),
            _ => match k.strip_prefix("data@") {
                Some(off) => case.expect_data.push((off.parse().map_err(|_| format!("bad data offset `{off}`"))?, parse_hex(v)?)),
                None => return Err(format!("unknown check `{k}`")),
            },
        }
    }
    Ok(case)
}

impl TestFile {
    /// Parses the directives of a test file.
    pub fn parse(source: &str) -> Result<TestFile, String> {
        let mut t = TestFile { source: source.to_string(), ..TestFile::default() };
        for (i, line) in source.lines().enumerate() {
            let line_no = i + 1;
            let Some(rest) = line.trim_start().strip_prefix(';') else { continue };
            let rest = rest.trim_start();
            let at = |e: String| format!("line {line_no}: {e}");
            if let Some(r) = rest.strip_prefix("run:") {
                t.runs.push(parse_run(line_no, r).map_err(at)?);
            } else if let Some(r) = rest.strip_prefix("verify:") {
                let w: Vec<&str> = r.split_whitespace().collect();
                let (rule, loc) = match w.as_slice() {
                    ["error", rule] => (rule.to_string(), None),
                    ["error", rule, "at", loc] => (rule.to_string(), Some(*loc)),
                    _ => return Err(at("expected `verify: error RULE [at [.init+]OFFSET]`".into())),
                };
                let (seg, off) = match loc {
                    None => (None, None),
                    Some(l) => {
                        let (seg, off) = match l.split_once('+') {
                            Some((".init", o)) => (SegmentKind::Init, o),
                            Some((".push", o)) => (SegmentKind::Push, o),
                            Some(_) => return Err(at(format!("bad location `{l}`"))),
                            None => (SegmentKind::Push, l),
                        };
                        (Some(seg), Some(off.parse().map_err(|_| at(format!("bad offset `{off}`")))?))
                    }
                };
                t.verify_error = Some((rule, seg, off));
            } else if let Some(r) = rest.strip_prefix("init:") {
                let words: Vec<&str> = r.trim_start().trim_start_matches("->").split_whitespace().collect();
                match parse_outcome(&words).map_err(at)? {
                    (Outcome::Fault(k), _) => t.init_fault = Some(k),
                    _ => return Err(at("`init:` expects `-> fault KIND`".into())),
                }
            } else if let Some(r) = rest.strip_prefix("copro:") {
                let mut w = r.split_whitespace();
                let name = w.next().ok_or_else(|| at("`copro:` needs a name".into()))?;
                let cfg = t.copro.entry(name.to_string()).or_default();
                for kv in w {
                    let (k, v) = kv.split_once('=').ok_or_else(|| at(format!("expected KEY=VALUE, found `{kv}`")))?;
                    cfg.insert(k.into(), v.into());
                }
            }
        }
        Ok(t)
    }

    /// Runs the file on `engine`; returns a description of every failed expectation.
    pub fn run(&self, engine: &dyn Engine) -> Result<usize, Vec<String>> {
        let asm = netil::assemble(&self.source).map_err(|e| vec![format!("assembly failed: {e}")])?;
        let verified = netvm_verify::verify_with_source(&asm.module, Some(&asm.source_map));
        if let Some((rule, seg, off)) = &self.verify_error {
            return match verified {
                Ok(_) => Err(vec![format!("expected verification error {rule}, but the module verified")]),
                Err(e) => {
                    let got_seg = e.segment;
                    if e.rule.name() != rule || (off.is_some() && (e.offset != *off || got_seg != *seg)) {
                        Err(vec![format!("expected {rule} at {seg:?}+{off:?}, got {} at {:?}+{:?}: {e}", e.rule.name(), got_seg, e.offset)])
                    } else {
                        Ok(0)
                    }
                }
            };
        }
        let verified = verified.map_err(|e| vec![format!("verification failed: {e}")])?;
        let code = engine.prepare(&verified).map_err(|e| vec![format!("engine: {e}")])?;
        let registry = netvm_copro::registry();
        let mut state = PeState::new(&verified.module);
        for decl in &verified.module.copros {
            let cfg = self.copro.get(&decl.name).cloned().unwrap_or_default();
            state.copros.push(registry.create(&decl.kind, &cfg).map_err(|e| vec![format!("coprocessor {}: {e}", decl.name)])?);
        }
        let limits = Limits::default();
        let init = code.init(&mut state, &limits);
        match (self.init_fault, init) {
            (None, Outcome::Exit) => {}
            (Some(k), Outcome::Fault(g)) if k == g => return Ok(0),
            (want, got) => return Err(vec![format!("init: expected {want:?}, got {got}")]),
        }
        let mut failures = Vec::new();
        let info_size = verified.module.info_size as usize;
        for case in &self.runs {
            let mut pkt = Packet::from_bytes(case.packet.clone());
            if let Some(w) = case.wire {
                pkt.wire_len = w;
            }
            pkt.ts = case.ts;
            pkt.in_port = case.inport;
            let mut xb = ExchangeBuffer::new(pkt, info_size);
            let n = case.info_in.len().min(info_size);
            xb.info[..n].copy_from_slice(&case.info_in[..n]);
            let lim = Limits { budget: case.budget.unwrap_or(limits.budget) };
            let got = code.push(&mut state, &mut xb.view(), case.inport, &lim);
            let mut fail = |m: String| failures.push(format!("line {}: {m}", case.line));
            if got != case.expect {
                fail(format!("expected {}, got {got}", case.expect));
            }
            if let Some(p) = &case.expect_packet {
                if &xb.packet.data != p {
                    fail(format!("packet: expected {}, got {}", hex(p), hex(&xb.packet.data)));
                }
            }
            if let Some(i) = &case.expect_info {
                if xb.info.get(..i.len()) != Some(&i[..]) {
                    fail(format!("info: expected {}, got {}", hex(i), hex(&xb.info)));
                }
            }
            for (off, bytes) in &case.expect_data {
                if state.data.get(*off..off + bytes.len()) != Some(&bytes[..]) {
                    let end = (off + bytes.len()).min(state.data.len());
                    fail(format!("data@{off}: expected {}, got {}", hex(bytes), hex(state.data.get(*off..end).unwrap_or(&[]))));
                }
            }
        }
        if failures.is_empty() {
            Ok(self.runs.len())
        } else {
            Err(failures)
        }
    }
}

/// Lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The engines every test runs on.
pub fn engines() -> Vec<Box<dyn Engine>> {
    vec![Box::new(netvm_runtime::InterpEngine), Box::new(netvm_runtime::JitEngine::default())]
}
