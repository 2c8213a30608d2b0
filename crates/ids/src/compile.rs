//! Rules → a NetIL application.
//!
//! ```text
//! source 0 ─► decode ─► detect_1 ─► … ─► detect_K ─► verdict ─0─► sink 1 (packets not dropped)
//! ```
//!
//! - `decode` (fixed NetIL, [`DECODE`]) numbers the packet, parses
//!   Ethernet (one optional 802.1Q tag) and IPv4, and writes what the rules
//!   look at into info memory ([`info`]): the protocol class, addresses,
//!   ports, and where the IP and L4 payloads are.
//! - each `detect_i` holds a share of the rules (as many as fit one code
//!   segment). Per protocol class, one `strmatch` search over the payload
//!   finds the rules whose *fast pattern* (a content the rule cannot match
//!   without: the one marked `fast_pattern`, else the longest) occurs; a
//!   `switch` on the pattern id jumps to that rule's code, which checks
//!   the header, then the contents (`strmatch` `find` within the region
//!   `offset`/`depth` or `distance`/`within` give, backtracking over
//!   earlier occurrences as Snort does) and pcres (`regex`), and finally
//!   logs (packet, rule, action) in the `eventlog` and sets the verdict
//!   bits in info memory. Rules with no positive content are checked in
//!   order for every packet of their class.
//! - `verdict` drops a packet a `drop` rule matched, unless a `pass` rule matched.
//!
//! The host ([`crate::alerts`]) loads each detect NetPE's pattern and regex
//! tables through the control plane, receives the events of every batch in
//! packet order from the runtime's driver, and applies `pass` (a packet a
//! pass rule matched raises no alert).

use std::fmt::Write;

use netvm_runtime::manifest::{ConnectSpec, NetPeSpec, SinkSpec, SourceSpec};
use netvm_runtime::Manifest;

use crate::rules::{AddrExpr, Buffer, Content, Detection, Num, PortExpr, Proto, Rule, RuleSet, Skip};

/// Info memory written by `decode` (offsets, big-endian).
pub mod info {
    /// u32: the packet's number on the worker that runs it (1-based), so
    /// that a rule is evaluated once per packet. Alerts number packets by
    /// their sequence number in the run ([`netvm_vm::CoproEvent::seq`]),
    /// the same whichever worker runs them.
    pub const INDEX: u32 = 0;
    /// u8: protocol class, one of the `CLASS_*` values.
    pub const CLASS: u32 = 4;
    /// u8: the `flow` coprocessor's state word for the packet
    /// (`netvm_copro::flow::{TRACKED, ESTABLISHED, …}`; 0 when the rules use
    /// no `flow` or the packet is not tracked).
    pub const FLOW: u32 = 5;
    /// u16: Snort's `dsize`: the L4 payload length (TCP, UDP, ICMP), else
    /// the IP payload length.
    pub const DSIZE: u32 = 6;
    /// u32: IPv4 source address.
    pub const SRC: u32 = 8;
    /// u32: IPv4 destination address.
    pub const DST: u32 = 12;
    /// u16: source port (TCP, UDP; 0 otherwise).
    pub const SPORT: u32 = 16;
    /// u16: destination port.
    pub const DPORT: u32 = 18;
    /// u16: offset of the IP payload.
    pub const IP_PAYLOAD: u32 = 20;
    /// u16: length of the IP payload (captured, within the total length).
    pub const IP_PAYLOAD_LEN: u32 = 22;
    /// u16: offset of the L4 payload.
    pub const L4_PAYLOAD: u32 = 24;
    /// u16: length of the L4 payload.
    pub const L4_PAYLOAD_LEN: u32 = 26;
    /// u8: verdict bits, [`ALERTED`] | [`DROP`] | [`PASS`].
    pub const VERDICT: u32 = 28;
    /// u16: offset of the IPv4 header (0 when the packet is not IPv4).
    pub const L3: u32 = 30;
    /// u32: the packet's flow handle (0: none), for flowbits.
    pub const FLOW_HANDLE: u32 = 32;
    /// Size of info memory.
    pub const SIZE: u32 = 36;

    /// Not IPv4, or a header that does not parse: no rule applies.
    pub const CLASS_NONE: u8 = 0;
    /// TCP (a whole TCP header captured).
    pub const CLASS_TCP: u8 = 1;
    /// UDP (a whole UDP header captured).
    pub const CLASS_UDP: u8 = 2;
    /// ICMP (8 bytes of ICMP header captured).
    pub const CLASS_ICMP: u8 = 3;
    /// Any other IPv4 packet: non-first fragments, other protocols, short L4 headers. Only `ip` rules apply.
    pub const CLASS_IP: u8 = 4;

    /// Verdict bit: an alert or drop rule matched.
    pub const ALERTED: u8 = 1;
    /// Verdict bit: a drop rule matched.
    pub const DROP: u8 = 2;
    /// Verdict bit: a pass rule matched.
    pub const PASS: u8 = 4;
}

/// The decoder NetPE, without flow tracking.
pub const DECODE: &str = include_str!("decode.nil");

/// The decoder NetPE; with `track`, it tracks flows (the `flow`
/// coprocessor `fl`) and records each packet's state word and handle.
pub fn decode_listing(track: bool) -> String {
    if !track {
        return DECODE.to_string();
    }
    // Fragments (More Fragments or an offset) are not tracked: the runtime's
    // flow distribution sends every fragment of a datagram where its
    // addresses alone hash, so a first fragment's flow may live on another worker.
    let code = format!(
        "    locload 0\n    push 6\n    add\n    upload.16\n    push 0x3fff\n    and\n    jnz untracked\n    locload 0\n    copro.in fl, 5\n    copro.invoke fl, 1\n    push {}\n    copro.out fl, 0\n    istore.8\n    \
         push {}\n    copro.out fl, 1\n    istore.32\nuntracked:\n",
        info::FLOW,
        info::FLOW_HANDLE
    );
    format!(".copro fl flow\n{}", DECODE.replace("    ; @track\n", &code))
}

/// The verdict NetPE.
pub const VERDICT: &str = "\
; verdict: drops a packet a drop rule matched, unless a pass rule matched.
.infosize 32
.ports 1
segment .push
    pop
    push 28
    iload.8
    dup
    push 4
    and
    jnz pass
    push 2
    and
    jnz dropped
    ret 0
pass:
    pop
    ret 0
dropped:
    drop
ends
";

/// The compiled application.
#[derive(Debug)]
pub struct IdsApp {
    /// The manifest, its programs in memory.
    pub manifest: Manifest,
    /// Control-plane tables to load before the first packet: (`NETPE.INSTANCE`, text).
    pub tables: Vec<(String, String)>,
    /// Each NetPE's NetIL listing (name, text).
    pub listings: Vec<(String, String)>,
    /// The names of the event logs to drain.
    pub event_logs: Vec<String>,
}

impl IdsApp {
    /// Builds the application with `engine` and loads its tables: ready for
    /// a [`netvm_runtime::Driver`].
    pub fn instantiate(&self, engine: &dyn netvm_vm::Engine) -> Result<netvm_runtime::Application, String> {
        let mut app =
            netvm_runtime::Application::build(&self.manifest, engine, &netvm_copro::registry(), None).map_err(|e| e.to_string())?;
        for (name, table) in &self.tables {
            app.load_table(name, table).map_err(|e| format!("loading {name}: {e}"))?;
        }
        Ok(app)
    }
}

/// Event word 2: the action, as logged.
pub fn action_code(a: crate::rules::Action) -> u32 {
    match a {
        crate::rules::Action::Alert => 0,
        crate::rules::Action::Drop => 1,
        crate::rules::Action::Pass => 2,
    }
}

/// Execution budget of the IDS's handlers (backtracking over contents can be long).
pub const BUDGET: u64 = 50_000_000;
/// Largest NetIL listing per detect NetPE before the rules are split (the
/// code segment limit is 1 MiB of bytecode; text is about 3x the bytecode).
const MAX_LISTING: usize = 2_400_000;

/// Compiles `rules` (their index is the rule id logged in events).
pub fn compile(rules: &[Rule]) -> Result<IdsApp, String> {
    let mut chunks: Vec<(usize, usize)> = Vec::new();
    split(rules, 0, rules.len(), &mut chunks);
    let track = rules.iter().any(uses_flow);
    let mut netpes = vec![NetPeSpec { name: "decode".into(), program: "decode.nil".into(), copro: Default::default(), module: None }];
    let mut listings = vec![("decode".to_string(), decode_listing(track))];
    let mut tables = Vec::new();
    let mut event_logs = Vec::new();
    for (i, (lo, hi)) in chunks.iter().enumerate() {
        let name = format!("detect_{}", i + 1);
        let d = detect(&rules[*lo..*hi], *lo);
        tables.push((format!("{name}.sm"), d.patterns));
        if !d.regexes.is_empty() {
            tables.push((format!("{name}.re"), d.regexes));
        }
        event_logs.push(format!("{name}.log"));
        netpes.push(NetPeSpec { name: name.clone(), program: format!("{name}.nil").into(), copro: Default::default(), module: None });
        listings.push((name, d.text));
    }
    netpes.push(NetPeSpec { name: "verdict".into(), program: "verdict.nil".into(), copro: Default::default(), module: None });
    listings.push(("verdict".into(), VERDICT.into()));
    for (spec, (name, text)) in netpes.iter_mut().zip(&listings) {
        let a = netil::assemble(text).map_err(|e| format!("{name}: {}", e.display_with(name)))?;
        spec.module = Some(a.module);
    }
    let connections = netpes.windows(2).map(|w| ConnectSpec { from: format!("{}.0", w[0].name), to: w[1].name.clone() }).collect();
    let manifest = Manifest {
        name: Some("ids".into()),
        budget: Some(BUDGET),
        // Alerts are ordered by packet whichever worker raised them. Without
        // `flow` the rules keep no state between packets: whole batches to
        // any worker; with it, both directions of a flow on one worker.
        distribution: Some(if track { "flow" } else { "round-robin" }.into()),
        sources: vec![SourceSpec { port: 0, to: "decode".into() }],
        connections,
        sinks: vec![SinkSpec { from: "verdict.0".into(), port: 1, file: None }],
        netpes,
        base_dir: Default::default(),
    };
    Ok(IdsApp { manifest, tables, listings, event_logs })
}

/// Whether a rule needs flow state (a `flow` option other than `stateless`).
pub fn uses_flow(r: &Rule) -> bool {
    r.flow.as_ref().is_some_and(|f| f.established.is_some() || f.to_server.is_some())
}

/// Most contents and pcres in one compiled rule (each takes two locals).
pub const MAX_MATCHERS: usize = 32;

/// Why the compiler cannot compile `rule` yet, or `None` when it can: the
/// one place that says which parsed options the compiler implements, so
/// that compiler work shrinks it option by option. One reason per rule,
/// found in this order: the header (service rules, `<>`), `flow`, header
/// checks, detection options in rule order, `flowbits`,
/// `threshold`/`detection_filter`.
pub fn unsupported(rule: &Rule) -> Option<Skip> {
    let skip = |option: &str, what: Option<String>| {
        Some(Skip {
            line: rule.line,
            file: rule.file,
            sid: Some(rule.sid),
            option: option.to_string(),
            reason: format!("option {option}{}: not supported by the compiler yet", what.map_or(String::new(), |w| format!(" ({w})"))),
        })
    };
    if let Some(s) = &rule.header_service {
        return skip("service", Some(format!("a `{s}` service rule")));
    }
    if rule.flow.as_ref().is_some_and(|f| f.stream == Some(true)) {
        let mut s = skip("flow", None)?;
        s.reason = "option flow: only_stream: netvm reassembles no streams, so the rule could never match".into();
        return Some(s);
    }
    for d in &rule.detection {
        let buffer = d.buffer();
        if !matches!(buffer, Buffer::PktData | Buffer::Raw) {
            return skip(buffer.name(), None);
        }
        match d {
            Detection::Content(c) => {
                if let Some(Num::Var(v)) = [&c.offset, &c.depth, &c.distance, &c.within].into_iter().flatten().find(|n| n.lit().is_none()) {
                    return skip("byte_extract", Some(format!("variable `{v}` as a content position")));
                }
            }
            Detection::Pcre(p) => {
                // The coprocessor's own check: a pattern no engine builds skips only its rule.
                if let Err(e) = crate::pcre::regex_spec(p) {
                    let mut s = skip("pcre", None)?;
                    s.reason = format!("option pcre: {e}");
                    return Some(s);
                }
            }
            Detection::IsDataAt(d) => {
                if let Num::Var(v) = &d.offset {
                    return skip("byte_extract", Some(format!("variable `{v}` as an isdataat offset")));
                }
            }
            other => return skip(other.name(), None),
        }
    }
    if rule.detection.len() > MAX_MATCHERS {
        return skip("content", Some(format!("more than {MAX_MATCHERS} contents and pcres")));
    }
    if !rule.flowbits.is_empty() {
        return skip("flowbits", None);
    }
    if let Some(t) = &rule.threshold {
        return skip(t.name(), None);
    }
    None
}

/// The rules of `set` the compiler handles, and a skip for each other one.
pub fn select(set: &RuleSet) -> (Vec<Rule>, Vec<Skip>) {
    let mut rules = Vec::with_capacity(set.rules.len());
    let mut skipped = Vec::new();
    for r in &set.rules {
        match unsupported(r) {
            Some(s) => skipped.push(s),
            None => rules.push(r.clone()),
        }
    }
    (rules, skipped)
}

/// Splits `rules[lo..hi]` into chunks whose detect listing fits one code segment.
fn split(rules: &[Rule], lo: usize, hi: usize, out: &mut Vec<(usize, usize)>) {
    if hi - lo > 1 && detect(&rules[lo..hi], lo).text.len() > MAX_LISTING {
        let mid = lo + (hi - lo) / 2;
        split(rules, lo, mid, out);
        split(rules, mid, hi, out);
    } else {
        out.push((lo, hi));
    }
}

/// A generated detect NetPE.
struct Detect {
    text: String,
    patterns: String,
    regexes: String,
}

/// Locals of a detect NetPE.
const L_TMP: u32 = 0;
const L_BASE: u32 = 1;
const L_END: u32 = 2;
const L_CURSOR: u32 = 3;
fn l_start(i: usize) -> u32 {
    4 + 2 * i as u32
}
fn l_stop(i: usize) -> u32 {
    5 + 2 * i as u32
}

/// One protocol section of the detect code.
struct Section {
    proto: Proto,
    label: &'static str,
    group: u32,
    payload: u32,
    payload_len: u32,
}

const SECTIONS: [Section; 4] = [
    Section { proto: Proto::Tcp, label: "tcp", group: 1, payload: info::L4_PAYLOAD, payload_len: info::L4_PAYLOAD_LEN },
    Section { proto: Proto::Udp, label: "udp", group: 2, payload: info::L4_PAYLOAD, payload_len: info::L4_PAYLOAD_LEN },
    Section { proto: Proto::Icmp, label: "icmp", group: 3, payload: info::L4_PAYLOAD, payload_len: info::L4_PAYLOAD_LEN },
    Section { proto: Proto::Ip, label: "ip", group: 4, payload: info::IP_PAYLOAD, payload_len: info::IP_PAYLOAD_LEN },
];

/// The content a rule is prefiltered on, if any.
pub fn fast_pattern(rule: &Rule) -> Option<usize> {
    let positive = |m: &Detection| matches!(m, Detection::Content(c) if !c.negated);
    let marked = rule.detection.iter().position(|m| positive(m) && matches!(m, Detection::Content(c) if c.fast_pattern.is_some()));
    marked.or_else(|| {
        let mut best: Option<(usize, usize)> = None;
        for (i, m) in rule.detection.iter().enumerate() {
            if let Detection::Content(c) = m {
                if !c.negated && best.is_none_or(|(_, l)| c.bytes.len() > l) {
                    best = Some((i, c.bytes.len()));
                }
            }
        }
        best.map(|(i, _)| i)
    })
}

struct Gen {
    text: String,
    patterns: String,
    regexes: String,
    next_pattern: u32,
    next_regex: u32,
    labels: u32,
}

impl Gen {
    fn label(&mut self, what: &str) -> String {
        self.labels += 1;
        format!("{what}_{}", self.labels)
    }
    fn op(&mut self, s: &str) {
        let _ = writeln!(self.text, "    {s}");
    }
    fn at(&mut self, label: &str) {
        let _ = writeln!(self.text, "{label}:");
    }
    fn pattern(&mut self, c: &Content, group: u32) -> u32 {
        let id = self.next_pattern;
        self.next_pattern += 1;
        let hex: Vec<String> = c.bytes.iter().map(|b| format!("{b:02x}")).collect();
        let _ = writeln!(self.patterns, "{id} {group} \"|{}|\"{}", hex.join(" "), if c.nocase { " nocase" } else { "" });
        id
    }
}

fn detect(rules: &[Rule], first_id: usize) -> Detect {
    let mut g = Gen { text: String::new(), patterns: String::new(), regexes: String::new(), next_pattern: 0, next_regex: 0, labels: 0 };
    let max_matchers = rules.iter().map(|r| r.detection.len()).max().unwrap_or(0);
    let _ = writeln!(g.text, "; detect: {} rules (ids {} to {})", rules.len(), first_id, first_id + rules.len());
    let _ = writeln!(g.text, ".copro sm strmatch\n.copro re regex\n.copro log eventlog");
    let _ = writeln!(
        g.text,
        ".infosize {}\n.datasize {}\n.locals {}\n.maxstacksize 16\n.ports 1",
        info::SIZE,
        4 * rules.len().max(1),
        4 + 2 * max_matchers
    );
    let _ = writeln!(g.text, "segment .push");
    g.op("pop");
    g.op(&format!("push {}", info::CLASS));
    g.op("iload.8");
    g.op("switch 1: sec_tcp, 2: sec_udp, 3: sec_icmp, 4: sec_ip, default: done");
    for s in &SECTIONS {
        let mine: Vec<(usize, &Rule)> = rules.iter().enumerate().filter(|(_, r)| r.proto == s.proto).collect();
        g.at(&format!("sec_{}", s.label));
        let after = if s.proto == Proto::Ip { "done".to_string() } else { "sec_ip".to_string() };
        if mine.is_empty() {
            g.op(&format!("jump {after}"));
            continue;
        }
        // Payload bounds.
        g.op(&format!("push {}", s.payload));
        g.op("iload.16");
        g.op(&format!("locstore {L_BASE}"));
        g.op(&format!("locload {L_BASE}"));
        g.op(&format!("push {}", s.payload_len));
        g.op("iload.16");
        g.op("add");
        g.op(&format!("locstore {L_END}"));
        let (with_fp, without): (Vec<_>, Vec<_>) = mine.into_iter().partition(|(_, r)| fast_pattern(r).is_some());
        let rest = format!("{}_nofp", s.label);
        if !with_fp.is_empty() {
            // Each rule's contents become patterns; the fast pattern is in the section's group.
            let mut cases: Vec<(u32, String)> = Vec::new();
            let mut bodies = Vec::new();
            for (k, r) in &with_fp {
                let fp = fast_pattern(r).unwrap_or(0);
                let ids = rule_patterns(&mut g, r, Some((fp, s.group)));
                let entry = format!("r{}_{}", first_id + k, s.label);
                cases.push((ids[fp], entry.clone()));
                bodies.push((*k, *r, ids, entry));
            }
            cases.sort();
            let next = format!("{}_next", s.label);
            g.op(&format!("push {}", s.group));
            g.op("copro.in sm, 0");
            g.op(&format!("locload {L_BASE}"));
            g.op("copro.in sm, 1");
            g.op(&format!("push {}", s.payload_len));
            g.op("iload.16");
            g.op("copro.in sm, 2");
            g.op("copro.invoke sm, 1");
            g.at(&next);
            g.op("copro.invoke sm, 2");
            g.op("copro.out sm, 0");
            g.op(&format!("jz {rest}"));
            g.op("copro.out sm, 1");
            let items: Vec<String> = cases.iter().map(|(id, l)| format!("{id}: {l}")).collect();
            g.op(&format!("switch {}, default: {next}", items.join(", ")));
            for (k, r, ids, entry) in bodies {
                g.at(&entry);
                // Evaluate a rule once per packet, however often its fast pattern occurs.
                g.op(&format!("push {}", 4 * k));
                g.op("dload.32");
                g.op(&format!("push {}", info::INDEX));
                g.op("iload.32");
                g.op(&format!("jcmp.eq {next}"));
                g.op(&format!("push {}", 4 * k));
                g.op(&format!("push {}", info::INDEX));
                g.op("iload.32");
                g.op("dstore.32");
                rule_body(&mut g, r, first_id + k, &ids, &next);
            }
        }
        g.at(&rest);
        for (k, r) in without {
            let ids = rule_patterns(&mut g, r, None);
            let skip = g.label(&format!("r{}_end", first_id + k));
            rule_body(&mut g, r, first_id + k, &ids, &skip);
            g.at(&skip);
        }
        g.op(&format!("jump {after}"));
    }
    g.at("done");
    g.op("ret 0");
    let _ = writeln!(g.text, "ends");
    Detect { text: g.text, patterns: g.patterns, regexes: g.regexes }
}

/// Each matcher's table id: the pattern id of a content, the regex id of a
/// pcre. The fast pattern goes in `group`, the other contents in group 0
/// (never searched as a group, only `find`).
fn rule_patterns(g: &mut Gen, r: &Rule, fp: Option<(usize, u32)>) -> Vec<u32> {
    r.detection
        .iter()
        .enumerate()
        .map(|(i, m)| match m {
            Detection::Content(c) => g.pattern(c, fp.filter(|(f, _)| *f == i).map_or(0, |(_, grp)| grp)),
            Detection::Pcre(p) => {
                let id = g.next_regex;
                g.next_regex += 1;
                g.regexes.push_str(&crate::pcre::table_line(id, p));
                id
            }
            // `unsupported` keeps every other option out of the compiler.
            _ => u32::MAX,
        })
        .collect()
}

/// Header checks, matchers, logging; every failure jumps to `fail`, and so does the end.
fn rule_body(g: &mut Gen, r: &Rule, rule_id: usize, ids: &[u32], fail: &str) {
    endpoints(g, r, fail);
    if let Some(f) = &r.flow {
        flow_check(g, f, fail);
    }
    for h in &r.header {
        header_check(g, r.proto, h, fail);
    }
    g.op(&format!("locload {L_BASE}"));
    g.op(&format!("locstore {L_CURSOR}"));
    // Where each matcher backtracks to when it fails.
    let mut retry: Vec<String> = Vec::new();
    for (i, m) in r.detection.iter().enumerate() {
        let depends = match m {
            Detection::Content(c) => c.relative(),
            Detection::Pcre(p) => p.relative(),
            Detection::IsDataAt(d) => d.relative,
            _ => false,
        };
        // The nearest earlier positive content, whose next occurrence may help.
        let back = if depends {
            (0..i)
                .rev()
                .find(|j| matches!(&r.detection[*j], Detection::Content(c) if !c.negated))
                .map_or(fail.to_string(), |j| retry[j].clone())
        } else {
            fail.to_string()
        };
        let try_label = g.label(&format!("r{rule_id}_m{i}"));
        retry.push(try_label.clone());
        match m {
            Detection::Content(c) => {
                region(g, c, i);
                g.at(&try_label);
                let pid = ids[i];
                let (s, e) = (l_start(i), l_stop(i));
                let missing = if c.negated { g.label("absent") } else { back.clone() };
                g.op(&format!("locload {e}"));
                g.op(&format!("locload {s}"));
                g.op(&format!("jcmp.sle {missing}"));
                g.op(&format!("push {pid}"));
                g.op("copro.in sm, 0");
                g.op(&format!("locload {s}"));
                g.op("copro.in sm, 1");
                g.op(&format!("locload {e}"));
                g.op(&format!("locload {s}"));
                g.op("sub");
                g.op("copro.in sm, 2");
                g.op("copro.invoke sm, 3");
                g.op("copro.out sm, 0");
                g.op(&format!("jz {missing}"));
                if c.negated {
                    // Present where it must not be.
                    g.op(&format!("jump {back}"));
                    g.at(&missing);
                } else {
                    // Found: the next try starts one byte later; the cursor moves to the match end.
                    g.op("copro.out sm, 2");
                    g.op("push 1");
                    g.op("add");
                    g.op(&format!("locstore {s}"));
                    g.op("copro.out sm, 3");
                    g.op(&format!("locstore {L_CURSOR}"));
                }
            }
            Detection::Pcre(p) => {
                g.at(&try_label);
                g.op(&format!("push {}", ids[i]));
                g.op("copro.in re, 0");
                let start = if p.relative() { L_CURSOR } else { L_BASE };
                g.op(&format!("locload {start}"));
                g.op("copro.in re, 1");
                g.op(&format!("locload {L_END}"));
                g.op(&format!("locload {start}"));
                g.op("sub");
                g.op("copro.in re, 2");
                g.op("copro.invoke re, 0");
                // out 0: 1 matched, 0 not, 2 not inspected (PCRE2's limit): the rule does not match.
                g.op("copro.out re, 0");
                if p.negated {
                    // Holds on "no match" only; the cursor stays.
                    g.op(&format!("jnz {back}"));
                } else {
                    g.op("push 1");
                    g.op(&format!("jcmp.neq {back}"));
                    g.op("copro.out re, 2");
                    g.op(&format!("locstore {L_CURSOR}"));
                }
            }
            Detection::IsDataAt(d) => {
                // Data at (cursor or payload start) + N: that position is before the payload end.
                g.at(&try_label);
                let n = d.offset.lit().unwrap_or(0);
                g.op(&format!("locload {}", if d.relative { L_CURSOR } else { L_BASE }));
                g.op(&format!("push {n}"));
                g.op("add");
                g.op(&format!("locload {L_END}"));
                g.op(&format!("{} {back}", if d.negated { "jcmp.slt" } else { "jcmp.sge" }));
            }
            _ => unreachable!("`unsupported` keeps other options out of the compiler"),
        }
    }
    // Log (packet, rule, action) and set the verdict bits.
    g.op(&format!("push {}", info::INDEX));
    g.op("iload.32");
    g.op("copro.in log, 0");
    g.op(&format!("push {rule_id}"));
    g.op("copro.in log, 1");
    g.op(&format!("push {}", action_code(r.action)));
    g.op("copro.in log, 2");
    g.op("copro.invoke log, 0");
    let bits = match r.action {
        crate::rules::Action::Alert => info::ALERTED,
        crate::rules::Action::Drop => info::ALERTED | info::DROP,
        crate::rules::Action::Pass => info::PASS,
    };
    g.op(&format!("push {}", info::VERDICT));
    g.op(&format!("push {}", info::VERDICT));
    g.op("iload.8");
    g.op(&format!("push {bits}"));
    g.op("or");
    g.op("istore.8");
    g.op(&format!("jump {fail}"));
}

/// Jumps to `fail` unless the packet's addresses and ports match the
/// rule's header: in its direction, or in either direction for `<>`.
fn endpoints(g: &mut Gen, r: &Rule, fail: &str) {
    let ports = matches!(r.proto, Proto::Tcp | Proto::Udp);
    let one_way = |g: &mut Gen, (src, sport, dst, dport): (u32, u32, u32, u32), fail: &str| {
        addr_check(g, &r.src, src, fail);
        addr_check(g, &r.dst, dst, fail);
        if ports {
            port_check(g, &r.sport, sport, fail);
            port_check(g, &r.dport, dport, fail);
        }
    };
    if !r.bidirectional {
        one_way(g, (info::SRC, info::SPORT, info::DST, info::DPORT), fail);
        return;
    }
    let (reverse, ok) = (g.label("reverse"), g.label("endpoints_ok"));
    one_way(g, (info::SRC, info::SPORT, info::DST, info::DPORT), &reverse);
    g.op(&format!("jump {ok}"));
    g.at(&reverse);
    one_way(g, (info::DST, info::DPORT, info::SRC, info::SPORT), fail);
    g.at(&ok);
}

/// Jumps to `fail` unless the packet's flow state (info [`info::FLOW`])
/// satisfies `flow` (docs/ids.md; the mapping of docs/coprocessors.md).
fn flow_check(g: &mut Gen, f: &crate::rules::Flow, fail: &str) {
    use netvm_copro::flow::{ESTABLISHED, TO_CLIENT, TO_SERVER, TRACKED};
    // (mask, value): the state word masked must equal the value.
    let mut tests: Vec<(u32, u32)> = Vec::new();
    match f.established {
        Some(true) => tests.push((ESTABLISHED, ESTABLISHED)),
        Some(false) => tests.push((TRACKED | ESTABLISHED, TRACKED)),
        None => {}
    }
    match f.to_server {
        Some(true) => tests.push((TO_CLIENT, 0)),
        Some(false) => tests.push((TO_SERVER, 0)),
        None => {}
    }
    for (mask, value) in tests {
        g.op(&format!("push {}", info::FLOW));
        g.op("iload.8");
        g.op(&format!("push {mask}"));
        g.op("and");
        g.op(&format!("push {value}"));
        g.op(&format!("jcmp.neq {fail}"));
    }
    if let Some(frag) = f.frag {
        // A fragment: More Fragments set or a nonzero offset.
        ip_field(g, 6, 16);
        g.op("push 0x3fff");
        g.op("and");
        g.op(&format!("{} {fail}", if frag { "jz" } else { "jnz" }));
    }
}

/// Pushes the `bits`-bit big-endian field at `off` in the IPv4 header.
fn ip_field(g: &mut Gen, off: u32, bits: u32) {
    packet_field(g, info::L3, off, bits);
}

/// Pushes the `bits`-bit big-endian field at `off` in the L4 (TCP, ICMP) header.
fn l4_field(g: &mut Gen, off: u32, bits: u32) {
    packet_field(g, info::IP_PAYLOAD, off, bits);
}

/// Pushes the `bits`-bit big-endian packet field at `off` after the header whose offset is the u16 at info `at`.
fn packet_field(g: &mut Gen, at: u32, off: u32, bits: u32) {
    g.op(&format!("push {at}"));
    g.op("iload.16");
    if off > 0 {
        g.op(&format!("push {off}"));
        g.op("add");
    }
    g.op(&format!("upload.{bits}"));
}

/// Jumps to `fail` unless the packet is of `class` (for `ip` rules, whose
/// packets may be of any class; a rule of another protocol never matches).
fn need_class(g: &mut Gen, rule: Proto, class: u8, fail: &str) {
    let proto = match class {
        info::CLASS_TCP => Proto::Tcp,
        info::CLASS_UDP => Proto::Udp,
        _ => Proto::Icmp,
    };
    if rule == proto {
        return;
    }
    if rule != Proto::Ip {
        g.op(&format!("jump {fail}"));
        return;
    }
    g.op(&format!("push {}", info::CLASS));
    g.op("iload.8");
    g.op(&format!("push {class}"));
    g.op(&format!("jcmp.neq {fail}"));
}

/// The values an [`IntCheck`](crate::rules::IntCheck) accepts among
/// `0..=max`: an inclusive range, negated for `!N`; `None` when none.
pub fn int_range(c: crate::rules::IntCheck, max: u32) -> Option<(bool, u32, u32)> {
    use crate::rules::IntCheck as C;
    let max = i64::from(max);
    let (negated, lo, hi) = match c {
        C::Eq(n) => (false, n, n),
        C::Ne(n) => (true, n, n),
        C::Lt(n) => (false, 0, n - 1),
        C::Le(n) => (false, 0, n),
        C::Gt(n) => (false, n + 1, max),
        C::Ge(n) => (false, n, max),
        C::Between(a, b) => (false, a + 1, b - 1),
        C::BetweenIncl(a, b) => (false, a, b),
    };
    let (lo, hi) = (lo.max(0), hi.min(max));
    if negated {
        // `!N` out of range excludes nothing.
        return Some(if (0..=max).contains(&lo) && lo == hi { (true, lo as u32, hi as u32) } else { (false, 0, max as u32) });
    }
    (lo <= hi).then_some((false, lo as u32, hi as u32))
}

/// Jumps to `fail` unless the value on the stack (popped) passes `c`; `max`: the field's largest value.
fn int_check(g: &mut Gen, c: crate::rules::IntCheck, max: u32, fail: &str) {
    let Some((negated, lo, hi)) = int_range(c, max) else {
        g.op("pop");
        g.op(&format!("jump {fail}"));
        return;
    };
    if negated {
        g.op(&format!("push {lo}"));
        g.op(&format!("jcmp.eq {fail}"));
        return;
    }
    g.op(&format!("locstore {L_TMP}"));
    if lo > 0 {
        g.op(&format!("locload {L_TMP}"));
        g.op(&format!("push {lo}"));
        g.op(&format!("jcmp.lt {fail}"));
    }
    if hi < max {
        g.op(&format!("locload {L_TMP}"));
        g.op(&format!("push {hi}"));
        g.op(&format!("jcmp.gt {fail}"));
    }
}

/// Jumps to `fail` unless the value on the stack (popped) has `bits` as `mode` says.
fn bits_check(g: &mut Gen, bits: u32, mode: crate::rules::BitsMode, fail: &str) {
    use crate::rules::BitsMode as M;
    match mode {
        M::Exact => {
            g.op(&format!("push {bits}"));
            g.op(&format!("jcmp.neq {fail}"));
        }
        M::All => {
            g.op(&format!("push {bits}"));
            g.op("and");
            g.op(&format!("push {bits}"));
            g.op(&format!("jcmp.neq {fail}"));
        }
        M::Any => {
            g.op(&format!("push {bits}"));
            g.op("and");
            g.op(&format!("jz {fail}"));
        }
        M::Not => {
            g.op(&format!("push {bits}"));
            g.op("and");
            g.op(&format!("jnz {fail}"));
        }
    }
}

/// Jumps to `fail` unless the packet passes a header check (docs/ids.md).
fn header_check(g: &mut Gen, proto: Proto, h: &crate::rules::HeaderCheck, fail: &str) {
    use crate::rules::HeaderCheck as H;
    match h {
        H::Flags { bits, mode, mask } => {
            need_class(g, proto, info::CLASS_TCP, fail);
            l4_field(g, 13, 8);
            g.op(&format!("push {}", !mask));
            g.op("and");
            bits_check(g, u32::from(*bits & !mask), *mode, fail);
        }
        H::Fragbits { bits, mode } => {
            ip_field(g, 6, 16);
            g.op("push 0xe000");
            g.op("and");
            bits_check(g, u32::from(*bits), *mode, fail);
        }
        H::Dsize(c) => {
            g.op(&format!("push {}", info::DSIZE));
            g.op("iload.16");
            int_check(g, *c, u16::MAX.into(), fail);
        }
        H::Itype(c) | H::Icode(c) => {
            need_class(g, proto, info::CLASS_ICMP, fail);
            l4_field(g, if matches!(h, H::Itype(_)) { 0 } else { 1 }, 8);
            int_check(g, *c, u8::MAX.into(), fail);
        }
        H::IcmpId(c) | H::IcmpSeq(c) => {
            // Echo requests and replies only, as Snort.
            need_class(g, proto, info::CLASS_ICMP, fail);
            let ok = g.label("echo");
            l4_field(g, 0, 8);
            g.op(&format!("locstore {L_TMP}"));
            g.op(&format!("locload {L_TMP}"));
            g.op(&format!("jz {ok}"));
            g.op(&format!("locload {L_TMP}"));
            g.op("push 8");
            g.op(&format!("jcmp.neq {fail}"));
            g.at(&ok);
            l4_field(g, if matches!(h, H::IcmpId(_)) { 4 } else { 6 }, 16);
            int_check(g, *c, u16::MAX.into(), fail);
        }
        H::Ttl(c) | H::Tos(c) | H::Id(c) | H::IpProto(c) => {
            // (offset in the IPv4 header, bits)
            let (off, bits) = match h {
                H::Ttl(_) => (8, 8),
                H::Tos(_) => (1, 8),
                H::Id(_) => (4, 16),
                _ => (9, 8),
            };
            ip_field(g, off, bits);
            int_check(g, *c, if bits == 8 { u8::MAX.into() } else { u16::MAX.into() }, fail);
        }
        H::Fragoffset(c) => {
            ip_field(g, 6, 16);
            g.op("push 0x1fff");
            g.op("and");
            int_check(g, *c, 0x1fff, fail);
        }
        H::Seq(c) | H::Ack(c) | H::Window(c) => {
            need_class(g, proto, info::CLASS_TCP, fail);
            match h {
                H::Seq(_) => l4_field(g, 4, 32),
                H::Ack(_) => l4_field(g, 8, 32),
                _ => l4_field(g, 14, 16),
            }
            let max = if matches!(h, H::Window(_)) { u16::MAX.into() } else { u32::MAX };
            int_check(g, *c, max, fail);
        }
        H::SameIp => {
            g.op(&format!("push {}", info::SRC));
            g.op("iload.32");
            g.op(&format!("push {}", info::DST));
            g.op("iload.32");
            g.op(&format!("jcmp.neq {fail}"));
        }
    }
}

/// Sets the search region locals of content `i` from the cursor or the payload start.
/// Arithmetic is signed: offsets and distances may be negative; the start is clipped to the payload.
fn region(g: &mut Gen, c: &Content, i: usize) {
    let (s, e) = (l_start(i), l_stop(i));
    let lit = |n: &Option<Num>| n.as_ref().and_then(Num::lit);
    let (from, shift, limit) = if c.relative() {
        (L_CURSOR, lit(&c.distance).unwrap_or(0), lit(&c.within))
    } else {
        (L_BASE, lit(&c.offset).unwrap_or(0), lit(&c.depth))
    };
    g.op(&format!("locload {from}"));
    g.op(&format!("push {shift}"));
    g.op("add");
    g.op(&format!("locstore {s}"));
    // end = min(start + limit, payload end)
    g.op(&format!("locload {L_END}"));
    g.op(&format!("locstore {e}"));
    if let Some(n) = limit {
        let keep = g.label("keep");
        g.op(&format!("locload {s}"));
        g.op(&format!("push {n}"));
        g.op("add");
        g.op(&format!("locstore {L_TMP}"));
        g.op(&format!("locload {L_TMP}"));
        g.op(&format!("locload {e}"));
        g.op(&format!("jcmp.sge {keep}"));
        g.op(&format!("locload {L_TMP}"));
        g.op(&format!("locstore {e}"));
        g.at(&keep);
    }
    // start = max(start, payload start)
    let ok = g.label("inside");
    g.op(&format!("locload {s}"));
    g.op(&format!("locload {L_BASE}"));
    g.op(&format!("jcmp.sge {ok}"));
    g.op(&format!("locload {L_BASE}"));
    g.op(&format!("locstore {s}"));
    g.at(&ok);
}

/// Jumps to `fail` unless the address at info `off` matches `x`.
fn addr_check(g: &mut Gen, x: &AddrExpr, off: u32, fail: &str) {
    if *x == AddrExpr::Any {
        return;
    }
    g.op(&format!("push {off}"));
    g.op("iload.32");
    g.op(&format!("locstore {L_TMP}"));
    let ok = g.label("addr_ok");
    addr_bool(g, x, &ok, fail);
    g.at(&ok);
}

fn addr_bool(g: &mut Gen, x: &AddrExpr, yes: &str, no: &str) {
    match x {
        AddrExpr::Any => g.op(&format!("jump {yes}")),
        AddrExpr::Net(net, len) => {
            g.op(&format!("locload {L_TMP}"));
            g.op(&format!("push {:#x}", crate::rules::mask(*len)));
            g.op("and");
            g.op(&format!("push {net:#x}"));
            g.op(&format!("jcmp.eq {yes}"));
            g.op(&format!("jump {no}"));
        }
        // The decoder is IPv4-only: an IPv6 block matches no packet.
        AddrExpr::Net6(..) => g.op(&format!("jump {no}")),
        AddrExpr::Not(inner) => addr_bool(g, inner, no, yes),
        AddrExpr::List(items) => list_bool(
            g,
            items,
            yes,
            no,
            |x| match x {
                AddrExpr::Not(i) => Some(i.as_ref()),
                _ => None,
            },
            addr_bool,
        ),
    }
}

/// Jumps to `fail` unless the port at info `off` matches `x`.
fn port_check(g: &mut Gen, x: &PortExpr, off: u32, fail: &str) {
    if *x == PortExpr::Any {
        return;
    }
    g.op(&format!("push {off}"));
    g.op("iload.16");
    g.op(&format!("locstore {L_TMP}"));
    let ok = g.label("port_ok");
    port_bool(g, x, &ok, fail);
    g.at(&ok);
}

fn port_bool(g: &mut Gen, x: &PortExpr, yes: &str, no: &str) {
    match x {
        PortExpr::Any => g.op(&format!("jump {yes}")),
        PortExpr::Range(lo, hi) => {
            if *lo > 0 {
                g.op(&format!("locload {L_TMP}"));
                g.op(&format!("push {lo}"));
                g.op(&format!("jcmp.lt {no}"));
            }
            if *hi < u16::MAX {
                g.op(&format!("locload {L_TMP}"));
                g.op(&format!("push {hi}"));
                g.op(&format!("jcmp.gt {no}"));
            }
            g.op(&format!("jump {yes}"));
        }
        PortExpr::Not(inner) => port_bool(g, inner, no, yes),
        PortExpr::List(items) => list_bool(
            g,
            items,
            yes,
            no,
            |x| match x {
                PortExpr::Not(i) => Some(i.as_ref()),
                _ => None,
            },
            port_bool,
        ),
    }
}

/// A list: no negated element may match, and a plain one must (if there is one).
fn list_bool<T>(g: &mut Gen, items: &[T], yes: &str, no: &str, negated: impl Fn(&T) -> Option<&T>, each: fn(&mut Gen, &T, &str, &str)) {
    for x in items {
        if let Some(inner) = negated(x) {
            let next = g.label("not_in");
            each(g, inner, no, &next);
            g.at(&next);
        }
    }
    let plain: Vec<&T> = items.iter().filter(|x| negated(x).is_none()).collect();
    if plain.is_empty() {
        g.op(&format!("jump {yes}"));
        return;
    }
    for x in plain {
        let next = g.label("or_else");
        each(g, x, yes, &next);
        g.at(&next);
    }
    g.op(&format!("jump {no}"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn every_generated_module_verifies() {
        let text = r#"
alert tcp any any -> 10.0.0.0/8 80 (msg:"a"; content:"GET"; nocase; offset:0; depth:3; content:"x"; distance:1; within:5; sid:1;)
drop udp [1.2.3.4,!5.6.7.8] !53 -> any [1:10,!5] (msg:"b"; content:!"zz"; pcre:"/ab+c/iR"; sid:2;)
pass icmp any any -> any any (msg:"c"; sid:3;)
alert ip any any -> any any (msg:"d"; content:"|00 01|"; fast_pattern; content:"long content"; sid:4;)
alert tcp any any -> any any (msg:"e"; pcre:"/^x/"; sid:5;)
alert tcp any any <> 10.0.0.0/8 80 (msg:"f"; flow:established,to_client,no_frag; flags:+PA,12; dsize:10<>100; seq:>5; ack:!3; window:<=9; content:"x"; isdataat:!5,relative; isdataat:2; sid:6;)
alert ip any any -> any any (msg:"g"; itype:8; icode:0; icmp_id:>1; icmp_seq:1<=>4; ttl:<64; tos:!0; id:5; ip_proto:!17; fragbits:!MD; fragoffset:0; sameip; sid:7;)
"#;
        let set = crate::parse_rules(text, &HashMap::new());
        assert!(set.skipped.is_empty(), "{:?}", set.skipped);
        assert!(set.rules.iter().all(|r| unsupported(r).is_none()));
        let app = compile(&set.rules).unwrap();
        for (spec, (name, listing)) in app.manifest.netpes.iter().zip(&app.listings) {
            let m = spec.module.as_ref().unwrap();
            netvm_verify::verify(m).unwrap_or_else(|e| panic!("{name}: {e}\n{listing}"));
        }
        assert_eq!(app.event_logs, vec!["detect_1.log"]);
        let patterns = &app.tables.iter().find(|t| t.0 == "detect_1.sm").unwrap().1;
        assert!(patterns.contains("\"|47 45 54|\" nocase"), "{patterns}");
        assert_eq!(fast_pattern(&set.rules[3]), Some(0), "fast_pattern wins over a longer content");
        assert_eq!(fast_pattern(&set.rules[1]), None, "no positive content");
        assert!(app.listings[0].1.contains("copro.invoke fl, 1"), "flow rules: the decoder tracks flows");
        assert_eq!(app.manifest.distribution.as_deref(), Some("flow"));
        assert_eq!(int_range(crate::rules::IntCheck::Lt(0), 255), None);
        assert_eq!(int_range(crate::rules::IntCheck::Ne(300), 255), Some((false, 0, 255)));
        assert_eq!(int_range(crate::rules::IntCheck::Between(3, 5), 255), Some((false, 4, 4)));
        assert_eq!(int_range(crate::rules::IntCheck::Gt(300), 255), None);
    }
}
