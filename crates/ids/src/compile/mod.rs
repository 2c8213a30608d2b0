//! Rules → a NetIL application.
//!
//! ```text
//! source 0 ─► decode ─► prefilter ─► detect_1 ─► … ─► detect_K ─► verdict ─0─► sink 1 (packets not dropped)
//! ```
//!
//! - `decode` (fixed NetIL, [`DECODE`]) numbers the packet, parses
//!   Ethernet (one optional 802.1Q tag) and IPv4, and writes what the rules
//!   look at into info memory ([`info`]): the protocol class, addresses,
//!   ports, and where the IP and L4 payloads are.
//! - `prefilter` finds each packet's candidate rules ([`Key`]) and sets
//!   their bits in a bitmap in info memory: one `strmatch` search of the
//!   payload for every rule's *fast pattern* (a content the rule cannot
//!   match without: the one marked `fast_pattern`, else the longest), as
//!   Snort searches each buffer once for all its rules; one `addrset`
//!   search of the source and of the destination address for the rules
//!   without content whose address list is all they can match (block and
//!   CnC lists, most of the contentless rules of real rule sets).
//! - each `detect_i` holds a share of the rules (as many as fit one code
//!   segment). It walks the candidate bits of its own rules (a summary
//!   word says which bitmap words have any) and a `switch` on the rule id
//!   jumps to that rule's code, which checks the header, then the contents
//!   (`strmatch` `find` within the region `offset`/`depth` or
//!   `distance`/`within` give, backtracking over earlier occurrences as
//!   Snort does) and pcres (`regex`), and finally logs (packet, rule,
//!   action) in the `eventlog` and sets the verdict bits in info memory.
//!   Rules with neither key are checked in order for every packet of their
//!   class.
//! - `verdict` drops a packet a `drop` rule matched, unless a `pass` rule matched.
//!
//! The host ([`crate::alerts`]) loads the prefilter's pattern and address
//! tables and each detect NetPE's pattern and regex tables through the
//! control plane, receives the events of every batch in packet order from
//! the runtime's driver, and applies `pass` (a packet a pass rule matched
//! raises no alert).

use std::fmt::Write;

/// Appends one instruction line to a generator's text, formatted in place.
macro_rules! op {
    ($g:expr, $($arg:tt)*) => {{
        let _ = writeln!($g.text, "    {}", format_args!($($arg)*));
    }};
}

mod bytes;

pub use bytes::MAX_VARS;

use netvm_runtime::manifest::{ConnectSpec, NetPeSpec, SinkSpec, SourceSpec};
use netvm_runtime::Manifest;

use crate::rules::{AddrExpr, Buffer, Content, Detection, PortExpr, Proto, Rule, RuleSet, Skip, ThresholdKind};

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
    /// u8: the `http` coprocessor's kind of the TCP payload: 0 not HTTP (or
    /// the rules use no HTTP buffer), [`netvm_copro::http::REQUEST`],
    /// [`netvm_copro::http::RESPONSE`].
    pub const HTTP_KIND: u32 = 29;
    /// u16: the HTTP fields present (bit `f` for `netvm_copro::http` field `f`).
    pub const HTTP_PRESENT: u32 = 36;
    /// u16, u16 at `HTTP_FIELDS + 4 f`: HTTP field `f`'s start and end
    /// (packet offsets); written only for the fields the rules use.
    pub const HTTP_FIELDS: u32 = 40;
    /// u32 × [`FLOWBIT_WORDS`]: the packet's flow's flowbits when it arrived
    /// (bit `n` of the rule set's numbering is bit `n % 32` of word `n / 32`).
    pub const FLOWBITS: u32 = HTTP_FIELDS + 4 * netvm_copro::http::FIELDS as u32;
    /// u32 × [`FLOWBIT_WORDS`]: the bits the rules that matched the packet set.
    pub const FLOWBITS_SET: u32 = FLOWBITS + 4 * FLOWBIT_WORDS;
    /// u32 × [`FLOWBIT_WORDS`]: the bits they unset.
    pub const FLOWBITS_UNSET: u32 = FLOWBITS_SET + 4 * FLOWBIT_WORDS;
    /// u32 × [`FLOWBIT_WORDS`]: the bits they toggle.
    pub const FLOWBITS_TOGGLE: u32 = FLOWBITS_UNSET + 4 * FLOWBIT_WORDS;
    /// Words of flowbits: at most 32 × this many names in one rule set.
    pub const FLOWBIT_WORDS: u32 = 8;
    /// Size of info memory.
    pub const SIZE: u32 = FLOWBITS_TOGGLE + 4 * FLOWBIT_WORDS;

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
/// coprocessor `fl`) and records each packet's state word and handle; with
/// `http_fields` (a mask of `netvm_copro::http` fields), it parses each TCP
/// payload with the `http` coprocessor `h` and records the kind, the
/// present fields and those fields' bounds.
pub fn decode_listing(track: bool, http_fields: u32, flowbit_words: u32) -> String {
    let mut text = DECODE.to_string();
    if http_fields != 0 {
        text = format!(".copro h http\n{}", text.replace("    ; @http\n", &http_code(http_fields)));
    }
    if !track {
        return text;
    }
    // Fragments (More Fragments or an offset) are not tracked: the runtime's
    // flow distribution sends every fragment of a datagram where its
    // addresses alone hash, so a first fragment's flow may live on another worker.
    let code = format!(
        "    locload 0\n    push 6\n    add\n    upload.16\n    push 0x3fff\n    and\n    jnz untracked\n    locload 0\n    copro.in fl, 5\n    copro.invoke fl, 1\n    push {}\n    copro.out fl, 0\n    istore.8\n    \
         push {}\n    copro.out fl, 1\n    istore.32\n{}untracked:\n",
        info::FLOW,
        info::FLOW_HANDLE,
        // The flow's bits as the packet found them (`all` with an empty mask reads a word).
        (0..flowbit_words)
            .map(|w| format!(
                "    push {}\n    push {w}\n    copro.in fl, 7\n    push 0\n    copro.in fl, 8\n    copro.invoke fl, 6\n    copro.out fl, 2\n    istore.32\n",
                info::FLOWBITS + 4 * w
            ))
            .collect::<String>()
    );
    format!(".copro fl flow\n{}", text.replace("    ; @track\n", &code))
}

/// Decode code for HTTP: on a TCP packet, the L4 payload (start in local
/// 3, end in local 2) goes to the `http` parser; its kind, present fields
/// and the bounds of the fields in `fields` go to info memory.
fn http_code(fields: u32) -> String {
    let mut ops: Vec<String> = vec![
        format!("push {}", info::CLASS),
        "iload.8".into(),
        format!("push {}", info::CLASS_TCP),
        "jcmp.neq http_done".into(),
        "locload 2".into(),
        "locload 3".into(),
        "sub".into(),
        "dup".into(),
        "jz http_none".into(),
        "copro.in h, 1".into(),
        "locload 3".into(),
        "copro.in h, 0".into(),
        "copro.invoke h, 0".into(),
        "copro.out h, 0".into(),
        "dup".into(),
        "jz http_none".into(),
        format!("push {}", info::HTTP_KIND),
        "swap".into(),
        "istore.8".into(),
        format!("push {}", info::HTTP_PRESENT),
        "copro.out h, 1".into(),
        "istore.16".into(),
    ];
    for f in (0..netvm_copro::http::FIELDS).filter(|f| fields & (1 << f) != 0) {
        for (k, reg) in [(0, 2 + 2 * f), (2, 3 + 2 * f)] {
            ops.push(format!("push {}", info::HTTP_FIELDS + 4 * f as u32 + k));
            ops.push(format!("copro.out h, {reg}"));
            ops.push("istore.16".into());
        }
    }
    ops.push("jump http_done".into());
    let mut c: String = ops.iter().map(|o| format!("    {o}\n")).collect();
    c.push_str("http_none:\n    pop\nhttp_done:\n");
    c
}

/// The verdict NetPE; with `flowbit_words`, it first applies the flowbit
/// changes of the rules that matched to the packet's flow (the `flow`
/// instance `fl`, decode's): toggles, then unsets, then sets.
pub fn verdict_listing(flowbit_words: u32) -> String {
    if flowbit_words == 0 {
        return VERDICT.to_string();
    }
    let mut code = format!(
        ".copro fl flow\n{}",
        VERDICT
            .replace(".infosize 32", &format!(".infosize {}", info::SIZE))
            .replace("segment .push\n    pop\n", "segment .push\n    pop\n    ; @flowbits\n")
    );
    let mut c =
        format!("    push {}\n    iload.32\n    dup\n    jz fb_none\n    copro.in fl, 6\n    copro.invoke fl, 2\n", info::FLOW_HANDLE);
    for (area, op) in [(info::FLOWBITS_TOGGLE, 5), (info::FLOWBITS_UNSET, 4), (info::FLOWBITS_SET, 3)] {
        for w in 0..flowbit_words {
            let label = format!("fb_{op}_{w}");
            let _ = write!(
                c,
                "    push {}\n    iload.32\n    dup\n    jz {label}\n    copro.in fl, 8\n    push {w}\n    copro.in fl, 7\n    copro.invoke fl, {op}\n    push 0\n{label}:\n    pop\n",
                area + 4 * w
            );
        }
    }
    c.push_str("    push 0\nfb_none:\n    pop\n");
    code = code.replace("    ; @flowbits\n", &c);
    code
}

/// The verdict NetPE without flowbits.
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
        self.instantiate_timed(engine).map(|(app, _)| app)
    }

    /// As [`IdsApp::instantiate`], with the time each step took.
    pub fn instantiate_timed(&self, engine: &dyn netvm_vm::Engine) -> Result<(netvm_runtime::Application, BuildTimes), String> {
        let t = std::time::Instant::now();
        let plan = netvm_runtime::Application::plan(&self.manifest, &netvm_copro::registry(), None).map_err(|e| e.to_string())?;
        let verify = t.elapsed();
        let t = std::time::Instant::now();
        let mut app = netvm_runtime::Application::from_plan(plan, engine).map_err(|e| e.to_string())?;
        let code = t.elapsed();
        let t = std::time::Instant::now();
        app.load_tables(&self.tables)?;
        Ok((app, BuildTimes { verify, code, tables: t.elapsed() }))
    }
}

/// Where building an [`IdsApp`] spends its time.
#[derive(Clone, Copy, Debug, Default)]
pub struct BuildTimes {
    /// Verifying the NetPEs and creating their coprocessors.
    pub verify: std::time::Duration,
    /// Compiling them with the engine (native code for the JIT) and running `.init`.
    pub code: std::time::Duration,
    /// Loading the pattern and regex tables (building the matchers).
    pub tables: std::time::Duration,
}

/// Event word 2: the action, as logged.
pub fn action_code(a: crate::rules::Action) -> u32 {
    match a {
        crate::rules::Action::Alert => 0,
        crate::rules::Action::Drop => 1,
        crate::rules::Action::Pass => 2,
    }
}

/// The least execution budget of the IDS's handlers; the compiler raises it
/// to the bound it computes for the detect NetPEs ([`detect_budget`]).
pub const BUDGET: u64 = 50_000_000;

/// Longest payload an IPv4 packet can have (its total length is 16 bits).
const MAX_PAYLOAD: u64 = 65_535;

/// A budget no packet can exhaust in a detect NetPE of `rules` rules and
/// `instructions` instructions, given how NetIL charges backward edges
/// (the span they repeat, at most the whole code): each rule runs at most
/// once per packet (one candidate bit, or once in its protocol's section)
/// and goes back to the candidate loop once, and retries earlier contents
/// at most [`RETRY_LIMIT_PER_BYTE`] times per payload byte plus
/// [`RETRY_LIMIT_BASE`]; the candidate loop itself turns once per rule and
/// per bitmap word. The cost of a packet is thus bounded by the rules and
/// the payload length by construction; the budget only states the bound.
pub fn detect_budget(rules: u64, instructions: u64) -> u64 {
    let retries = u64::from(RETRY_LIMIT_PER_BYTE) * MAX_PAYLOAD + u64::from(RETRY_LIMIT_BASE);
    let loop_turns = 2 * rules + rules.div_ceil(32) + 64;
    rules.saturating_mul(instructions).saturating_mul(1 + retries).saturating_add(loop_turns.saturating_mul(64))
}
/// Largest NetIL listing per detect NetPE before the rules are split (the
/// code segment limit is 1 MiB of bytecode; text is about 3x the bytecode).
const MAX_LISTING: usize = 2_400_000;

/// Compiles `rules` (their index is the rule id logged in events).
pub fn compile(rules: &[Rule]) -> Result<IdsApp, String> {
    let mut ports = PortCache::new();
    let bits = FlowbitNames::of(rules);
    let keys: Vec<Key> = rules.iter().map(key).collect();
    let cands = Candidates::new(rules.len());
    let words = bits.words();
    let track = rules.iter().any(uses_flow) || words > 0;
    let pre = prefilter(rules, &keys, cands);
    // The prefilter only asks which fast patterns occur: Hyperscan reports each once.
    let distinct = [("searches".to_string(), toml::Value::String("distinct".into()))].into_iter().collect();
    let mut netpes = vec![
        NetPeSpec {
            name: "decode".into(),
            program: "decode.nil".into(),
            copro: Default::default(),
            args: Default::default(),
            module: None,
        },
        NetPeSpec {
            name: "prefilter".into(),
            program: "prefilter.nil".into(),
            copro: [("sm".to_string(), distinct)].into(),
            args: Default::default(),
            module: None,
        },
    ];
    let mut listings = vec![("decode".to_string(), decode_listing(track, http_fields(rules), words)), ("prefilter".to_string(), pre.text)];
    let mut tables = Vec::new();
    if !pre.patterns.is_empty() {
        tables.push(("prefilter.sm".to_string(), pre.patterns));
    }
    if !pre.addrs.is_empty() {
        tables.push(("prefilter.as".to_string(), pre.addrs));
    }
    let mut event_logs = Vec::new();
    // The prefilter's loops turn once per candidate (a span of a few dozen instructions).
    let mut budget = BUDGET.max(64 * (rules.len() as u64 + 64));
    for (i, (n, d)) in detects(rules, &keys, cands, &mut ports, &bits).into_iter().enumerate() {
        let name = format!("detect_{}", i + 1);
        let instructions = d.text.lines().filter(|l| l.starts_with("    ")).count() as u64;
        budget = budget.max(detect_budget(n as u64, instructions));
        if !d.patterns.is_empty() {
            tables.push((format!("{name}.sm"), d.patterns));
        }
        if !d.regexes.is_empty() {
            tables.push((format!("{name}.re"), d.regexes));
        }
        event_logs.push(format!("{name}.log"));
        let mut copro = std::collections::BTreeMap::new();
        if d.retry_limits {
            let names = [("size", "1"), ("names", "retry_limit")].map(|(k, v)| (k.to_string(), toml::Value::String(v.into())));
            copro.insert("unins".to_string(), names.into_iter().collect());
        }
        netpes.push(NetPeSpec { name: name.clone(), program: format!("{name}.nil").into(), copro, args: Default::default(), module: None });
        listings.push((name, d.text));
    }
    let mut verdict_copro = std::collections::BTreeMap::new();
    if words > 0 {
        // The verdict NetPE changes the bits of the flows decode tracks.
        verdict_copro.insert("fl".to_string(), [("instance".to_string(), toml::Value::String("decode.fl".into()))].into_iter().collect());
    }
    netpes.push(NetPeSpec {
        name: "verdict".into(),
        program: "verdict.nil".into(),
        copro: verdict_copro,
        args: Default::default(),
        module: None,
    });
    listings.push(("verdict".into(), verdict_listing(words)));
    for (spec, module) in netpes.iter_mut().zip(assemble_all(&listings)?) {
        spec.module = Some(module);
    }
    let connections = netpes.windows(2).map(|w| ConnectSpec { from: format!("{}.0", w[0].name), to: w[1].name.clone() }).collect();
    let manifest = Manifest {
        name: Some("ids".into()),
        budget: Some(budget),
        // Alerts are ordered by packet whichever worker raised them. Without
        // `flow` the rules keep no state between packets: whole batches to
        // any worker; with it, both directions of a flow on one worker.
        distribution: Some(if track { "flow" } else { "round-robin" }.into()),
        sources: vec![SourceSpec { port: 0, to: "decode".into() }],
        connections,
        sinks: vec![SinkSpec { from: "verdict.0".into(), port: 1, file: None }],
        netpes,
        ..Manifest::default()
    };
    Ok(IdsApp { manifest, tables, listings, event_logs })
}

/// Assembles the listings, on as many threads as the host has (each
/// listing is independent); the first error in order.
fn assemble_all(listings: &[(String, String)]) -> Result<Vec<netil::Module>, String> {
    netvm_runtime::parallel::map_ordered(listings, 1, |(name, text)| {
        netil::assemble(text).map(|a| a.module).map_err(|e| format!("{name}: {}", e.display_with(name)))
    })
    .into_iter()
    .collect()
}

/// The flowbit names of a rule set, numbered in order of first use, and
/// the groups they were set in (`flowbits:set,NAME,GROUP`).
#[derive(Clone, Debug, Default)]
pub struct FlowbitNames {
    /// Each name's bit.
    pub bits: std::collections::HashMap<String, u32>,
    /// Each group's names' bits.
    pub groups: std::collections::HashMap<String, Vec<u32>>,
}

impl FlowbitNames {
    /// The names and groups of `rules` (at most [`MAX_FLOWBITS`] names: see [`select`]).
    pub fn of(rules: &[Rule]) -> FlowbitNames {
        let mut n = FlowbitNames::default();
        for f in rules.iter().flat_map(|r| &r.flowbits) {
            for b in &f.bits {
                let next = n.bits.len() as u32;
                let bit = *n.bits.entry(b.clone()).or_insert(next);
                if let Some(g) = &f.group {
                    let members = n.groups.entry(g.clone()).or_default();
                    if !members.contains(&bit) {
                        members.push(bit);
                    }
                }
            }
        }
        n
    }

    /// Words of info memory the bits take.
    pub fn words(&self) -> u32 {
        (self.bits.len() as u32).div_ceil(32)
    }

    /// Per word, the mask of `bits`.
    fn masks(bits: impl IntoIterator<Item = u32>) -> Vec<(u32, u32)> {
        let mut m: std::collections::BTreeMap<u32, u32> = Default::default();
        for b in bits {
            *m.entry(b / 32).or_default() |= 1 << (b % 32);
        }
        m.into_iter().collect()
    }
}

/// Most flowbit names in one rule set ([`info::FLOWBIT_WORDS`] words).
pub const MAX_FLOWBITS: usize = 32 * info::FLOWBIT_WORDS as usize;

/// Whether a rule needs flow state (a `flow` option other than `stateless`).
pub fn uses_flow(r: &Rule) -> bool {
    r.flow.as_ref().is_some_and(|f| f.established.is_some() || f.to_server.is_some())
}

/// Most contents and pcres in one compiled rule (each takes two locals).
pub const MAX_MATCHERS: usize = 32;

/// Why the compiler cannot compile `rule` yet, or `None` when it can: the
/// one place that says which parsed options the compiler implements, so
/// that compiler work shrinks it option by option. One reason per rule,
/// found in this order: the header (service rules), `flow`, detection
/// options in rule order, the number of matchers.
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
        if buffer == Buffer::JsData {
            return skip(buffer.name(), Some("no JavaScript normalisation".into()));
        }
        match d {
            Detection::Content(_) | Detection::BufferLen { .. } | Detection::IsDataAt(_) => {}
            Detection::Pcre(p) => {
                // The coprocessor's own check: a pattern no engine builds skips only its rule.
                if let Err(e) = crate::pcre::regex_spec(p) {
                    let mut s = skip("pcre", None)?;
                    s.reason = format!("option pcre: {e}");
                    return Some(s);
                }
            }
            Detection::ByteTest(crate::rules::ByteTest { endian, .. })
            | Detection::ByteJump(crate::rules::ByteJump { endian, .. })
            | Detection::ByteExtract(crate::rules::ByteExtract { endian, .. }) => {
                if let Some(why) = bytes::unsupported(*endian) {
                    let mut s = skip(d.name(), None)?;
                    s.reason = format!("option {}: {why}", d.name());
                    return Some(s);
                }
            }
        }
    }
    if bytes::extracted(rule).len() > MAX_VARS {
        let mut s = skip("byte_extract", None)?;
        s.reason = format!("option byte_extract: more than {MAX_VARS} variables in one rule (Snort keeps {MAX_VARS})");
        return Some(s);
    }
    if rule.detection.len() > MAX_MATCHERS {
        return skip("content", Some(format!("more than {MAX_MATCHERS} contents and pcres")));
    }
    None
}

/// The rules of `set` the compiler handles, and a skip for each other one.
pub fn select(set: &RuleSet) -> (Vec<Rule>, Vec<Skip>) {
    let mut rules = Vec::with_capacity(set.rules.len());
    let mut skipped = Vec::new();
    let mut names: std::collections::HashSet<&str> = Default::default();
    for (r, why) in set.rules.iter().zip(unsupported_all(&set.rules)) {
        match why {
            Some(s) => skipped.push(s),
            None => {
                let mine: std::collections::HashSet<&str> = r.flowbits.iter().flat_map(|f| &f.bits).map(String::as_str).collect();
                if names.len() + mine.difference(&names).count() > MAX_FLOWBITS {
                    skipped.push(Skip {
                        line: r.line,
                        file: r.file,
                        sid: Some(r.sid),
                        option: "flowbits".into(),
                        reason: format!("option flowbits: more than {MAX_FLOWBITS} flowbit names in the rule set"),
                    });
                    continue;
                }
                names.extend(mine);
                rules.push(r.clone());
            }
        }
    }
    (rules, skipped)
}

/// [`unsupported`] of every rule, on as many threads as the host has
/// (checking a pcre builds it: most of the time goes there).
fn unsupported_all(rules: &[Rule]) -> Vec<Option<Skip>> {
    // Small blocks handed out in turn: the pcres cluster in parts of a rule file.
    netvm_runtime::parallel::map_ordered(rules, 32, unsupported)
}

/// The ports each port expression matches (by its text), shared by every
/// detect NetPE's generation.
type PortCache = std::collections::HashMap<String, std::rc::Rc<Vec<(u16, u16)>>>;

/// A generated detect NetPE.
struct Detect {
    text: String,
    patterns: String,
    regexes: String,
    /// It counts rule evaluations stopped by the retry limit (`unins`).
    retry_limits: bool,
}

/// Locals of a detect NetPE.
const L_TMP: u32 = 0;
const L_BASE: u32 = 1;
const L_END: u32 = 2;
const L_CURSOR: u32 = 3;
/// Start and end of the HTTP buffer the current matchers inspect.
const L_HBASE: u32 = 4;
const L_HEND: u32 = 5;
/// The retries left to the current rule (see [`RETRY_LIMIT_PER_BYTE`]).
const L_RETRY: u32 = 10;
/// The IP payload's bounds, for `ip` rules (the L4 payload's are
/// [`L_BASE`], [`L_END`]): a keyed rule finds its payload's bounds there,
/// set once per packet before the candidates.
const L_IPBASE: u32 = bytes::L_AFTER;
const L_IPEND: u32 = L_IPBASE + 1;
/// The rule a shared `matched_*` block logs.
const L_RULE: u32 = L_IPBASE + 2;
/// Locals before the matchers' own (after the candidate loop's, [`L_CB`],
/// [`L_RETRY`], the byte options' (`bytes::L_VARS` and the rest), and
/// [`L_RULE`]).
const L_FIXED: u32 = L_IPBASE + 3;

/// The locals of a rule's payload bounds.
fn payload_locals(proto: Proto) -> (u32, u32) {
    if proto == Proto::Ip {
        (L_IPBASE, L_IPEND)
    } else {
        (L_BASE, L_END)
    }
}

/// A rule whose relative options fail retries earlier contents at their
/// next occurrences (Snort's backtracking); on a hostile payload the
/// combinations of occurrences grow as a power of its length. So each
/// rule evaluation may retry at most `RETRY_LIMIT_PER_BYTE` times per
/// byte of the packet's payload, plus [`RETRY_LIMIT_BASE`]: its cost is
/// bounded by the payload length, and the compiler bounds the budget with
/// it ([`detect_budget`]). A rule that runs out of retries does not match,
/// and the `unins` counter [`UNINSPECTED_RETRY_LIMIT`] of its detect NetPE
/// counts it (`netvm ids` reports it under `uninspected`, `retry_limit`).
pub const RETRY_LIMIT_PER_BYTE: u32 = 8;
/// Retries of a rule evaluation besides those per payload byte.
pub const RETRY_LIMIT_BASE: u32 = 64;
/// The `unins` counter of rule evaluations stopped by the retry limit.
pub const UNINSPECTED_RETRY_LIMIT: u32 = 0;
fn l_start(i: usize) -> u32 {
    L_FIXED + 2 * i as u32
}
fn l_stop(i: usize) -> u32 {
    L_FIXED + 1 + 2 * i as u32
}

/// The `http` field a buffer is, and the message kind it needs (`None`:
/// either); `None` for the packet payload.
pub fn http_field(b: Buffer) -> Option<(usize, Option<u32>)> {
    use netvm_copro::http::*;
    Some(match b {
        Buffer::PktData | Buffer::Raw | Buffer::JsData => return None,
        Buffer::HttpUri | Buffer::HttpRawUri => (URI, None),
        Buffer::HttpHeader | Buffer::HttpRawHeader => (HEADER, None),
        Buffer::HttpMethod => (METHOD, None),
        Buffer::HttpClientBody => (BODY, Some(REQUEST)),
        Buffer::HttpRawBody | Buffer::FileData => (BODY, None),
        Buffer::HttpCookie | Buffer::HttpRawCookie => (COOKIE, None),
        Buffer::HttpStatCode => (STAT_CODE, None),
        Buffer::HttpStatMsg => (STAT_MSG, None),
        Buffer::HttpVersion => (VERSION, None),
        Buffer::HttpRawRequest => (START_LINE, Some(REQUEST)),
        Buffer::HttpRawStatus => (START_LINE, Some(RESPONSE)),
    })
}

/// The `http` fields `rules` inspect (a mask).
pub fn http_fields(rules: &[Rule]) -> u32 {
    rules.iter().flat_map(|r| &r.detection).filter_map(|d| http_field(d.buffer())).fold(0, |m, (f, _)| m | 1 << f)
}

/// The locals holding a matcher's buffer bounds: the HTTP buffer's, or the
/// payload's of the rule being generated.
fn bounds(g: &Gen, b: Buffer) -> (u32, u32) {
    if http_field(b).is_some() {
        (L_HBASE, L_HEND)
    } else {
        g.payload
    }
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

struct Gen<'p> {
    text: String,
    patterns: String,
    regexes: String,
    next_pattern: u32,
    next_regex: u32,
    labels: u32,
    /// Port sets checked with a bitmap in data memory, in order.
    port_sets: Vec<Vec<(u16, u16)>>,
    /// Each port expression's bitmap in this NetPE, by its text.
    bitmaps: std::collections::HashMap<String, u32>,
    /// Where the first bitmap is in data memory.
    bitmap_base: u32,
    /// Port expressions' ranges.
    ports: &'p mut PortCache,
    /// The rule set's flowbit numbering.
    flowbits: &'p FlowbitNames,
    /// Whether a rule tests a threshold (the NetPE needs a `threshold` instance).
    thresholds: bool,
    /// Whether a rule may hit the retry limit (the NetPE needs its `unins` counters).
    retry_limits: bool,
    /// The locals of the current rule's payload bounds ([`payload_locals`]).
    payload: (u32, u32),
    /// The actions (by [`action_code`]) whose shared `matched_*` block keyed rules jump to.
    matched: [bool; 3],
}

/// A port set of more ranges than this is checked with a bitmap.
const MAX_INLINE_RANGES: usize = 3;
/// Bytes of a port bitmap.
const BITMAP: u32 = 65536 / 8;

impl<'p> Gen<'p> {
    fn new(bitmap_base: u32, ports: &'p mut PortCache, flowbits: &'p FlowbitNames) -> Gen<'p> {
        Gen {
            text: String::new(),
            patterns: String::new(),
            regexes: String::new(),
            next_pattern: 0,
            next_regex: 0,
            labels: 0,
            port_sets: Vec::new(),
            bitmaps: Default::default(),
            bitmap_base,
            ports,
            flowbits,
            thresholds: false,
            retry_limits: false,
            payload: (L_BASE, L_END),
            matched: [false; 3],
        }
    }

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

/// How the prefilter makes a rule a candidate for a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Key {
    /// Its fast pattern (this detection option) occurs in the payload.
    Pattern(usize),
    /// The packet's source (or, `dst`, destination) address is in one of
    /// these prefixes: a rule without content whose address list is all
    /// the rule can match (IP block lists, CnC lists).
    Addr {
        /// Keyed on the destination address.
        dst: bool,
        /// The prefixes (IPv4 net, length).
        prefixes: Vec<(u32, u8)>,
    },
    /// The packet's source (or, `dst`, destination) port is in one of
    /// these ranges: a TCP or UDP rule without content and without an
    /// address key, or one whose fast pattern is so short that it occurs
    /// in nearly every packet ([`SHORT_FAST_PATTERN`]), when its ports are
    /// a short list ([`MAX_KEY_PORTS`]), as Snort's port groups have it.
    Port {
        /// Keyed on the destination port.
        dst: bool,
        /// The ports, inclusive ranges.
        ranges: Vec<(u16, u16)>,
    },
    /// None: checked for every packet of its protocol.
    Always,
}

/// A fast pattern of at most this many bytes occurs in nearly every
/// packet (`|00|`, ` `): a rule with one is keyed on its ports when it can be.
pub const SHORT_FAST_PATTERN: usize = 2;
/// A port set of at most this many ports is a prefilter key.
pub const MAX_KEY_PORTS: u32 = 4096;

/// The port key of a TCP or UDP rule: the side with fewer ports (for `<>`
/// rules, the source port in either set), if it has at most
/// [`MAX_KEY_PORTS`].
fn port_key(rule: &Rule) -> Option<Key> {
    if !matches!(rule.proto, Proto::Tcp | Proto::Udp) {
        return None;
    }
    let size = |r: &[(u16, u16)]| r.iter().map(|(lo, hi)| u32::from(hi - lo) + 1).sum::<u32>();
    let (src, dst) = (rule.sport.ranges(), rule.dport.ranges());
    let (dst, ranges) = if rule.bidirectional {
        (false, [src, dst].concat())
    } else if size(&dst) <= size(&src) {
        (true, dst)
    } else {
        (false, src)
    };
    (size(&ranges) <= MAX_KEY_PORTS).then_some(Key::Port { dst, ranges })
}

/// The prefixes an address expression can match, when they are a finite
/// list: `None` for `any`, a negation, or a list with no plain element.
/// IPv6 blocks match no packet (the decoder is IPv4-only) and add nothing.
pub fn addr_prefixes(x: &AddrExpr) -> Option<Vec<(u32, u8)>> {
    match x {
        AddrExpr::Any | AddrExpr::Not(_) => None,
        AddrExpr::Net(net, len) => Some(vec![(*net, *len)]),
        AddrExpr::Net6(..) => Some(Vec::new()),
        AddrExpr::List(items) => {
            // A list matches only values matching one of its plain elements (when it has one).
            let plain: Vec<&AddrExpr> = items.iter().filter(|i| !matches!(i, AddrExpr::Not(_))).collect();
            if plain.is_empty() {
                return None;
            }
            let mut out = Vec::new();
            for p in plain {
                out.extend(addr_prefixes(p)?);
            }
            Some(out)
        }
    }
}

/// The prefilter key of `rule`: its fast pattern (its ports instead when
/// the pattern is short); else the address list that covers the fewest
/// addresses (for `<>` rules, the source side must be in either list);
/// else its ports; else none.
pub fn key(rule: &Rule) -> Key {
    if let Some(i) = fast_pattern(rule) {
        let short = matches!(&rule.detection[i], Detection::Content(c) if c.bytes.len() <= SHORT_FAST_PATTERN);
        return short.then(|| port_key(rule)).flatten().unwrap_or(Key::Pattern(i));
    }
    let coverage = |p: &[(u32, u8)]| p.iter().map(|(_, l)| 1u64 << (32 - u32::from(*l))).sum::<u64>();
    let (src, dst) = (addr_prefixes(&rule.src), addr_prefixes(&rule.dst));
    if rule.bidirectional {
        return match (src, dst) {
            (Some(mut a), Some(b)) => {
                a.extend(b);
                Key::Addr { dst: false, prefixes: a }
            }
            _ => port_key(rule).unwrap_or(Key::Always),
        };
    }
    match (src, dst) {
        (Some(a), Some(b)) if coverage(&b) < coverage(&a) => Key::Addr { dst: true, prefixes: b },
        (Some(a), _) => Key::Addr { dst: false, prefixes: a },
        (None, Some(b)) => Key::Addr { dst: true, prefixes: b },
        (None, None) => port_key(rule).unwrap_or(Key::Always),
    }
}

/// The candidate bitmap the prefilter writes into info memory, after
/// [`info::SIZE`]: a bit per rule (by rule id), and a summary bit per
/// bitmap word, so that a detect NetPE visits only the words with a
/// candidate of its own.
#[derive(Clone, Copy, Debug)]
struct Candidates {
    /// Info offset of the bitmap (bit `r % 32` of word `r / 32`: rule `r`).
    bitmap: u32,
    /// Info offset of the summary (bit `w % 32` of word `w / 32`: bitmap word `w` is not zero).
    summary: u32,
    /// The info memory size with both.
    size: u32,
}

impl Candidates {
    fn new(rules: usize) -> Candidates {
        let words = (rules as u32).div_ceil(32).max(1);
        let summary_words = words.div_ceil(32);
        let bitmap = info::SIZE.next_multiple_of(4);
        Candidates { bitmap, summary: bitmap + 4 * words, size: bitmap + 4 * (words + summary_words) }
    }
}

/// A generated prefilter NetPE.
struct Prefilter {
    text: String,
    /// The fast patterns (pattern id = rule id, group = the protocol class).
    patterns: String,
    /// The address keys (set id = rule id; group 1 source, 2 destination).
    addrs: String,
}

/// The prefilter: one search per payload for every rule's fast pattern
/// (Snort's one multi-pattern search per buffer, shared by every detect
/// NetPE), one search of the packet's source and destination in the
/// address keys; each hit sets its rule's candidate bit.
fn prefilter(rules: &[Rule], keys: &[Key], cands: Candidates) -> Prefilter {
    let mut patterns = String::new();
    let mut addrs = String::new();
    let mut groups = [false; 5];
    let mut addr_groups = [false; 5];
    for (id, (r, k)) in rules.iter().zip(keys).enumerate() {
        match k {
            Key::Pattern(i) => {
                let Detection::Content(c) = &r.detection[*i] else { unreachable!("a fast pattern is a content") };
                let group = SECTIONS.iter().find(|s| s.proto == r.proto).map_or(4, |s| s.group);
                groups[group as usize] = true;
                let hex: Vec<String> = c.bytes.iter().map(|b| format!("{b:02x}")).collect();
                let _ = writeln!(patterns, "{id} {group} \"|{}|\"{}", hex.join(" "), if c.nocase { " nocase" } else { "" });
            }
            Key::Addr { dst, prefixes } => {
                let group = 1 + usize::from(*dst);
                addr_groups[group] = true;
                for (net, len) in prefixes {
                    let _ = writeln!(addrs, "{id} {group} {}/{len}", std::net::Ipv4Addr::from(*net));
                }
            }
            Key::Port { dst, ranges } => {
                // Ports are numbers 0..=65535 in the same prefix sets.
                let group = 3 + usize::from(*dst);
                addr_groups[group] = true;
                for &(lo, hi) in ranges {
                    for (net, len) in range_prefixes(u32::from(lo), u32::from(hi)) {
                        let _ = writeln!(addrs, "{id} {group} {}/{len}", std::net::Ipv4Addr::from(net));
                    }
                }
            }
            Key::Always => {}
        }
    }
    let mut t = String::new();
    let _ = writeln!(t, "; prefilter: the candidate rules of each packet");
    if !patterns.is_empty() {
        let _ = writeln!(t, ".copro sm strmatch");
    }
    if !addrs.is_empty() {
        let _ = writeln!(t, ".copro as addrset");
    }
    let _ = writeln!(t, ".infosize {}\n.locals 2\n.maxstacksize 16\n.ports 1\nsegment .push\n    pop", cands.size);
    // Sets the candidate bit of the rule id in local 1 (and its summary bit).
    let set_bit = format!(
        "    push {b}\n    locload 1\n    push 5\n    shr\n    push 2\n    shl\n    add\n    dup\n    iload.32\n    push 1\n    locload 1\n    push 31\n    and\n    shl\n    or\n    istore.32\n\
         \x20   push {s}\n    locload 1\n    push 10\n    shr\n    push 2\n    shl\n    add\n    dup\n    iload.32\n    push 1\n    locload 1\n    push 5\n    shr\n    push 31\n    and\n    shl\n    or\n    istore.32\n",
        b = cands.bitmap,
        s = cands.summary
    );
    let _ = writeln!(t, "    push {}\n    iload.8\n    locstore 0\n    locload 0\n    jz done", info::CLASS);
    if groups[1..4].iter().any(|g| *g) {
        // The L4 payload, for TCP, UDP and ICMP packets (group = class).
        let _ = writeln!(t, "    locload 0\n    push {}\n    jcmp.eq ip", info::CLASS_IP);
        let _ = writeln!(t, "    locload 0\n    copro.in sm, 0\n    push {}\n    iload.16\n    copro.in sm, 1\n    push {}\n    iload.16\n    copro.in sm, 2\n    copro.invoke sm, 4", info::L4_PAYLOAD, info::L4_PAYLOAD_LEN);
        let _ = writeln!(t, "l4_next:\n    copro.invoke sm, 2\n    copro.out sm, 0\n    jz ip\n    copro.out sm, 1\n    locstore 1\n{set_bit}    jump l4_next");
    }
    let _ = writeln!(t, "ip:");
    if groups[4] {
        // The IP payload, for `ip` rules (every class).
        let _ = writeln!(t, "    push 4\n    copro.in sm, 0\n    push {}\n    iload.16\n    copro.in sm, 1\n    push {}\n    iload.16\n    copro.in sm, 2\n    copro.invoke sm, 4", info::IP_PAYLOAD, info::IP_PAYLOAD_LEN);
        let _ = writeln!(t, "ip_next:\n    copro.invoke sm, 2\n    copro.out sm, 0\n    jz addr\n    copro.out sm, 1\n    locstore 1\n{set_bit}    jump ip_next");
    }
    let _ = writeln!(t, "addr:");
    let keys = [(1, info::SRC, 32, "src"), (2, info::DST, 32, "dst"), (3, info::SPORT, 16, "sport"), (4, info::DPORT, 16, "dport")];
    for (group, field, width, label) in keys {
        if addr_groups[group] {
            let _ = writeln!(
                t,
                "    push {group}\n    copro.in as, 0\n    push {field}\n    iload.{width}\n    copro.in as, 1\n    copro.invoke as, 0"
            );
            let _ = writeln!(t, "{label}_next:\n    copro.invoke as, 1\n    copro.out as, 0\n    jz {label}_done\n    copro.out as, 1\n    locstore 1\n{set_bit}    jump {label}_next\n{label}_done:");
        }
    }
    let _ = writeln!(t, "done:\n    ret 0\nends");
    Prefilter { text: t, patterns, addrs }
}

/// The prefixes (of 32-bit numbers) that cover exactly `lo..=hi`.
fn range_prefixes(mut lo: u32, hi: u32) -> Vec<(u32, u8)> {
    let mut out = Vec::new();
    loop {
        // The largest aligned block at `lo` that stays within `hi`.
        let mut size: u64 = if lo == 0 { 1 << 32 } else { 1u64 << lo.trailing_zeros() };
        while u64::from(lo) + size - 1 > u64::from(hi) {
            size /= 2;
        }
        out.push((lo, 32 - size.trailing_zeros() as u8));
        let next = u64::from(lo) + size;
        if next > u64::from(hi) {
            return out;
        }
        lo = next as u32;
    }
}

/// Locals of the candidate loop: the summary word index, the summary word
/// left, the bitmap word index, the bitmap word left.
const L_CJ: u32 = 6;
const L_CS: u32 = 7;
const L_CW: u32 = 8;
const L_CB: u32 = 9;

/// Generates the detect NetPEs of `rules`, in order, each rule's code once:
/// a NetPE takes rules until its listing passes [`MAX_LISTING`] (the code
/// of one rule more fits the margin between that and the 1 MiB segment).
/// Returns each NetPE's number of rules and code.
fn detects(rules: &[Rule], keys: &[Key], cands: Candidates, ports: &mut PortCache, bits: &FlowbitNames) -> Vec<(usize, Detect)> {
    let mut out = Vec::new();
    let mut next = 0;
    while next < rules.len() || out.is_empty() {
        let lo = next;
        let mut g = Gen::new(0, ports, bits);
        // Per section, the code of the rules without a key; the keyed rules' code.
        let mut always: [String; 4] = Default::default();
        let mut keyed: Vec<usize> = Vec::new();
        let mut keyed_code = String::new();
        let mut size = 0;
        let mut max_matchers = 0;
        while next < rules.len() && (next == lo || size < MAX_LISTING) {
            let (r, id) = (&rules[next], next);
            max_matchers = max_matchers.max(r.detection.len());
            let section = SECTIONS.iter().position(|s| s.proto == r.proto).expect("every protocol has a section");
            let ids = rule_patterns(&mut g, r);
            g.payload = payload_locals(r.proto);
            if keys[next] == Key::Always {
                let skip = g.label(&format!("r{id}_end"));
                rule_body(&mut g, r, id, &ids, &skip);
                g.at(&skip);
                always[section].push_str(&g.text);
            } else {
                g.at(&format!("r{id}_c"));
                if r.proto != Proto::Ip && !matches!(keys[next], Key::Pattern(_)) {
                    // An address or port key does not say the protocol (a
                    // fast pattern does: it is searched in its class's payload).
                    op!(g, "push {}", info::CLASS);
                    g.op("iload.8");
                    op!(g, "push {}", SECTIONS[section].group);
                    g.op("jcmp.neq cand_word");
                }
                // The payload's bounds, short-lived (cheaper for the register allocator than
                // bounds live across every rule).
                payload_bounds(&mut g, &SECTIONS[section]);
                rule_body(&mut g, r, id, &ids, "cand_word");
                keyed.push(id);
                keyed_code.push_str(&g.text);
            }
            size += g.text.len();
            g.text.clear();
            next += 1;
        }
        let mut t = String::with_capacity(size + 4096);
        let _ = writeln!(t, "; detect: {} rules (ids {lo} to {})", next - lo, next);
        let _ = writeln!(t, ".copro sm strmatch\n.copro re regex\n.copro log eventlog");
        if g.thresholds {
            let _ = writeln!(t, ".copro thr threshold");
        }
        if g.retry_limits {
            let _ = writeln!(t, ".copro unins counters");
        }
        let _ = writeln!(
            t,
            ".infosize {}\n.datasize {}\n.locals {}\n.maxstacksize 16\n.ports 1",
            cands.size,
            (BITMAP * g.port_sets.len() as u32).max(4),
            L_FIXED as usize + 2 * max_matchers
        );
        if !g.port_sets.is_empty() {
            init_bitmaps(&mut t, 0, &g.port_sets);
        }
        let _ = writeln!(t, "segment .push\n    pop\n    push {}\n    iload.8", info::CLASS);
        let _ = writeln!(t, "    switch 1: sec_tcp, 2: sec_udp, 3: sec_icmp, 4: sec_ip, default: done");
        let after_ip = if keyed.is_empty() { "done" } else { "cands" };
        // Per class, the rules without a prefilter key, in order.
        for (s, code) in SECTIONS.iter().zip(&always) {
            let _ = writeln!(t, "sec_{}:", s.label);
            if !code.is_empty() {
                g.text.clear();
                payload_bounds(&mut g, s);
                t.push_str(&g.text);
                t.push_str(code);
            }
            let _ = writeln!(t, "    jump {}", if s.proto == Proto::Ip { after_ip } else { "sec_ip" });
        }
        if !keyed.is_empty() {
            t.push_str("cands:\n");
            candidate_loop(&mut t, cands, lo as u32 / 1024, (next - 1) as u32 / 1024);
            let items: Vec<String> = keyed.iter().map(|id| format!("{id}: r{id}_c")).collect();
            let _ = writeln!(t, "    switch {}, default: cand_word", items.join(", "));
            t.push_str(&keyed_code);
            // The shared blocks of the keyed rules that matched (the rule in L_RULE).
            let matched = g.matched;
            for action in (0..3).filter(|a| matched[*a as usize]) {
                g.text.clear();
                g.at(&format!("matched_{action}"));
                op!(g, "locload {L_RULE}");
                log_match(&mut g, action, "cand_word");
                t.push_str(&g.text);
            }
        }
        t.push_str("done:\n    ret 0\nends\n");
        out.push((next - lo, Detect { text: t, patterns: g.patterns, regexes: g.regexes, retry_limits: g.retry_limits }));
    }
    out
}

/// The loop over the candidate bits of the summary words `jlo..=jhi`: it
/// leaves the next candidate's rule id on the stack for a `switch` that
/// follows, and goes to `done` when there is none left. The rules' code
/// goes back to `cand_word` when it ends.
fn candidate_loop(t: &mut String, cands: Candidates, jlo: u32, jhi: u32) {
    let _ = write!(
        t,
        "    push {jlo}
    locstore {L_CJ}
cand_sum:
    locload {L_CJ}
    push {jhi}
    jcmp.gt done
    push {summary}
    locload {L_CJ}
    push 2
    shl
    add
    iload.32
    locstore {L_CS}
    locload {L_CJ}
    push 1
    add
    locstore {L_CJ}
cand_bits:
    locload {L_CS}
    jz cand_sum
    ; the bitmap word w = 32 (J - 1) + ctz(S); S loses its lowest bit
    locload {L_CJ}
    push 1
    sub
    push 5
    shl
    locload {L_CS}
    ctz
    add
    locstore {L_CW}
    locload {L_CS}
    dup
    push 1
    sub
    and
    locstore {L_CS}
    push {bitmap}
    locload {L_CW}
    push 2
    shl
    add
    iload.32
    locstore {L_CB}
cand_word:
    locload {L_CB}
    jz cand_bits
    ; the rule 32 w + ctz(B); B loses its lowest bit
    locload {L_CW}
    push 5
    shl
    locload {L_CB}
    ctz
    add
    locload {L_CB}
    dup
    push 1
    sub
    and
    locstore {L_CB}
",
        summary = cands.summary,
        bitmap = cands.bitmap
    );
}

/// Sets the payload bounds locals of section `s`'s rules to its payload.
fn payload_bounds(g: &mut Gen, s: &Section) {
    let (base, end) = payload_locals(s.proto);
    op!(g, "push {}", s.payload);
    g.op("iload.16");
    op!(g, "locstore {base}");
    op!(g, "locload {base}");
    op!(g, "push {}", s.payload_len);
    g.op("iload.16");
    g.op("add");
    op!(g, "locstore {end}");
}

/// Each matcher's table id: the pattern id of a content, the regex id of a
/// pcre. Contents are only ever `find`-ed here (the prefilter searches the
/// fast patterns), so they go in strmatch's find-only group.
fn rule_patterns(g: &mut Gen, r: &Rule) -> Vec<u32> {
    r.detection
        .iter()
        .map(|m| match m {
            Detection::Content(c) => g.pattern(c, netvm_copro::strmatch::FIND_ONLY),
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
    flowbits_check(g, r, fail);
    for h in &r.header {
        header_check(g, r.proto, h, fail);
    }
    // Where each matcher backtracks to when it fails: a retry of an earlier
    // content at its next occurrence, through a gate that counts retries
    // (see [`RETRY_LIMIT_PER_BYTE`]).
    let mut retry: Vec<String> = Vec::new();
    let mut gates: Vec<(String, String)> = Vec::new();
    for v in bytes::L_VARS.iter().take(bytes::extracted(r).len()) {
        // Written before any read on every path (the parser sees to it); zero for the verifier.
        g.op("push 0");
        op!(g, "locstore {v}");
    }
    if (0..r.detection.len()).any(|i| retry_target(r, i).is_some()) {
        // The rule's retries: 8 per payload byte, and 64.
        let (base, end) = g.payload;
        op!(g, "locload {end}");
        op!(g, "locload {base}");
        g.op("sub");
        op!(g, "push {}", RETRY_LIMIT_PER_BYTE.trailing_zeros());
        g.op("shl");
        op!(g, "push {RETRY_LIMIT_BASE}");
        g.op("add");
        op!(g, "locstore {L_RETRY}");
    }
    for (i, m) in r.detection.iter().enumerate() {
        let buffer = m.buffer();
        if i == 0 || http_field(buffer) != http_field(r.detection[i - 1].buffer()) {
            // A buffer of its own: the cursor starts at its start.
            enter_buffer(g, buffer, fail);
        }
        let (base, end) = bounds(g, buffer);
        let back = match retry_target(r, i) {
            Some(j) => {
                let gate = format!("{}_retry", retry[j]);
                if !gates.iter().any(|(g, _)| *g == gate) {
                    gates.push((gate.clone(), retry[j].clone()));
                }
                gate
            }
            None => fail.to_string(),
        };
        let try_label = g.label(&format!("r{rule_id}_m{i}"));
        retry.push(try_label.clone());
        match m {
            Detection::Content(c) => {
                region(g, r, c, i, (base, end));
                g.at(&try_label);
                let pid = ids[i];
                let (s, e) = (l_start(i), l_stop(i));
                let missing = if c.negated { g.label("absent") } else { back.clone() };
                op!(g, "locload {e}");
                op!(g, "locload {s}");
                op!(g, "jcmp.sle {missing}");
                search_region(g, "sm", pid, (s, e), 3);
                g.op("copro.out sm, 0");
                op!(g, "jz {missing}");
                if c.negated {
                    // Present where it must not be.
                    op!(g, "jump {back}");
                    g.at(&missing);
                } else {
                    // Found: the next try starts one byte later; the cursor moves to the match end.
                    g.op("copro.out sm, 2");
                    g.op("push 1");
                    g.op("add");
                    op!(g, "locstore {s}");
                    g.op("copro.out sm, 3");
                    op!(g, "locstore {L_CURSOR}");
                }
            }
            Detection::Pcre(p) => {
                g.at(&try_label);
                let start = if p.relative() { L_CURSOR } else { base };
                search_region(g, "re", ids[i], (start, end), 0);
                // out 0: 1 matched, 0 not, 2 not inspected (PCRE2's limit): the rule does not match.
                g.op("copro.out re, 0");
                if p.negated {
                    // Holds on "no match" only; the cursor stays.
                    op!(g, "jnz {back}");
                } else {
                    g.op("push 1");
                    op!(g, "jcmp.neq {back}");
                    g.op("copro.out re, 2");
                    op!(g, "locstore {L_CURSOR}");
                }
            }
            Detection::IsDataAt(d) => {
                // Data at (cursor or payload start) + N: that position is before the payload end.
                g.at(&try_label);
                op!(g, "locload {}", if d.relative { L_CURSOR } else { base });
                bytes::push_position(g, r, &d.offset);
                g.op("add");
                op!(g, "locload {end}");
                op!(g, "{} {back}", if d.negated { "jcmp.slt" } else { "jcmp.sge" });
            }
            Detection::BufferLen { check, relative, .. } => {
                // The buffer's length, or what is left of it after the cursor.
                g.at(&try_label);
                op!(g, "locload {end}");
                op!(g, "locload {}", if *relative { L_CURSOR } else { base });
                g.op("sub");
                int_check(g, *check, u32::from(u16::MAX), &back);
            }
            Detection::ByteTest(b) => {
                g.at(&try_label);
                bytes::byte_test(g, r, b, (base, end), &back);
            }
            Detection::ByteJump(b) => {
                g.at(&try_label);
                bytes::byte_jump(g, r, b, (base, end), &back);
            }
            Detection::ByteExtract(b) => {
                g.at(&try_label);
                bytes::byte_extract(g, r, b, (base, end), &back);
            }
        }
    }
    flowbits_change(g, r);
    if r.flowbits.iter().any(|f| f.op == crate::rules::FlowbitsOp::NoAlert) {
        // `noalert`: the rule only changes flowbits.
        op!(g, "jump {fail}");
    } else {
        rule_action(g, r, rule_id, fail);
    }
    if !gates.is_empty() {
        // Each retry spends one of the rule's; none left: the rule stops
        // here, not matched, and the packet counts as not fully inspected.
        let out = g.label(&format!("r{rule_id}_retry_limit"));
        for (gate, target) in &gates {
            g.at(gate);
            op!(g, "locload {L_RETRY}");
            op!(g, "jz {out}");
            op!(g, "locload {L_RETRY}");
            g.op("push 1");
            g.op("sub");
            op!(g, "locstore {L_RETRY}");
            op!(g, "jump {target}");
        }
        g.at(&out);
        g.retry_limits = true;
        op!(g, "push {}", UNINSPECTED_RETRY_LIMIT);
        g.op("copro.in unins, 0");
        g.op("push 1");
        g.op("copro.in unins, 1");
        g.op("copro.invoke unins, 0");
        op!(g, "jump {fail}");
    }
}

/// Invokes operation `op` of coprocessor `copro` (`strmatch` `find`,
/// `regex` search: their registers are alike) with pattern `id` over the
/// region between the locals `start` and `end`.
fn search_region(g: &mut Gen, copro: &str, id: u32, (start, end): (u32, u32), op: u8) {
    op!(g, "push {id}");
    op!(g, "copro.in {copro}, 0");
    op!(g, "locload {start}");
    op!(g, "copro.in {copro}, 1");
    op!(g, "locload {end}");
    op!(g, "locload {start}");
    g.op("sub");
    op!(g, "copro.in {copro}, 2");
    op!(g, "copro.invoke {copro}, {op}");
}

/// The content option `i` of `r` backtracks to when it fails: the nearest
/// earlier positive content in the same buffer, when option `i` is
/// relative or reads a `byte_extract` variable (the content's next
/// occurrence may make option `i` hold); `None`: the rule fails.
fn retry_target(r: &Rule, i: usize) -> Option<usize> {
    let depends = match &r.detection[i] {
        Detection::Content(c) => c.relative(),
        Detection::Pcre(p) => p.relative(),
        Detection::IsDataAt(d) => d.relative,
        Detection::BufferLen { relative, .. } => *relative,
        Detection::ByteTest(b) => b.relative,
        Detection::ByteJump(b) => b.relative,
        Detection::ByteExtract(b) => b.relative,
    } || bytes::reads_variable(&r.detection[i]);
    if !depends {
        return None;
    }
    let field = http_field(r.detection[i].buffer());
    // The run of options in this buffer.
    let run = (0..i).rev().take_while(|j| http_field(r.detection[*j].buffer()) == field).last().unwrap_or(i);
    (run..i).rev().find(|j| matches!(&r.detection[*j], Detection::Content(c) if !c.negated))
}

/// Logs the match of a rule whose checks all held (after its threshold,
/// if any) and sets the verdict bits; then goes to `fail` (the next rule).
fn rule_action(g: &mut Gen, r: &Rule, rule_id: usize, fail: &str) {
    if let Some(t) = &r.threshold {
        // Thresholds and detection filters count the rule's matches per
        // tracked address; a match they filter out raises no alert and sets
        // no verdict (its flowbit changes stand, as in Snort).
        let kind = match t.kind {
            ThresholdKind::Limit => netvm_copro::threshold::Kind::Limit,
            ThresholdKind::Threshold => netvm_copro::threshold::Kind::Threshold,
            ThresholdKind::Both => netvm_copro::threshold::Kind::Both,
            ThresholdKind::DetectionFilter => netvm_copro::threshold::Kind::Detect,
        };
        g.thresholds = true;
        op!(g, "push {rule_id}");
        g.op("copro.in thr, 0");
        op!(g, "push {}", if t.by_dst { info::DST } else { info::SRC });
        g.op("iload.32");
        g.op("copro.in thr, 1");
        op!(g, "push {}", kind as u32);
        g.op("copro.in thr, 2");
        op!(g, "push {}", t.count);
        g.op("copro.in thr, 3");
        op!(g, "push {}", t.seconds);
        g.op("copro.in thr, 4");
        g.op("copro.invoke thr, 0");
        g.op("copro.out thr, 0");
        op!(g, "jz {fail}");
    }
    let action = action_code(r.action);
    if fail == "cand_word" {
        // A keyed rule: the NetPE's shared block for the action logs it.
        op!(g, "push {rule_id}");
        op!(g, "locstore {L_RULE}");
        op!(g, "jump matched_{action}");
        g.matched[action as usize] = true;
        return;
    }
    op!(g, "push {rule_id}");
    log_match(g, action, fail);
}

/// Logs (packet, the rule id on the stack, `action`) and sets the verdict
/// bits; then goes to `next`.
fn log_match(g: &mut Gen, action: u32, next: &str) {
    op!(g, "locstore {L_RULE}");
    op!(g, "push {}", info::INDEX);
    g.op("iload.32");
    g.op("copro.in log, 0");
    op!(g, "locload {L_RULE}");
    g.op("copro.in log, 1");
    op!(g, "push {action}");
    g.op("copro.in log, 2");
    g.op("copro.invoke log, 0");
    let bits = match action {
        0 => info::ALERTED,
        1 => info::ALERTED | info::DROP,
        _ => info::PASS,
    };
    op!(g, "push {}", info::VERDICT);
    op!(g, "push {}", info::VERDICT);
    g.op("iload.8");
    op!(g, "push {bits}");
    g.op("or");
    g.op("istore.8");
    op!(g, "jump {next}");
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
    op!(g, "jump {ok}");
    g.at(&reverse);
    one_way(g, (info::DST, info::DPORT, info::SRC, info::SPORT), fail);
    g.at(&ok);
}

/// Jumps to `fail` unless the rule's flowbits tests hold on the bits the
/// packet's flow had when the packet arrived (info [`info::FLOWBITS`]); a
/// packet without a flow fails every test (docs/coprocessors.md, `flow`).
fn flowbits_check(g: &mut Gen, r: &Rule, fail: &str) {
    use crate::rules::FlowbitsOp::{IsNotSet, IsSet};
    let tests: Vec<&crate::rules::Flowbits> = r.flowbits.iter().filter(|f| matches!(f.op, IsSet | IsNotSet)).collect();
    if tests.is_empty() {
        return;
    }
    op!(g, "push {}", info::FLOW);
    g.op("iload.8");
    op!(g, "push {}", netvm_copro::flow::TRACKED);
    g.op("and");
    op!(g, "jz {fail}");
    for f in tests {
        let masks = FlowbitNames::masks(f.bits.iter().map(|b| g.flowbits.bits[b]));
        let word = |g: &mut Gen, w: u32, m: u32| {
            op!(g, "push {}", info::FLOWBITS + 4 * w);
            g.op("iload.32");
            op!(g, "push {m}");
            g.op("and");
        };
        // isset a&b: all; isset a|b: any; isnotset a|b (or one): none; isnotset a&b: not all.
        match (f.op, f.any && f.bits.len() > 1) {
            (IsSet, false) => {
                for &(w, m) in &masks {
                    word(g, w, m);
                    op!(g, "push {m}");
                    op!(g, "jcmp.neq {fail}");
                }
            }
            (IsNotSet, _) if f.any || f.bits.len() == 1 => {
                for &(w, m) in &masks {
                    word(g, w, m);
                    op!(g, "jnz {fail}");
                }
            }
            (IsSet, true) => {
                let ok = g.label("fb_any");
                for &(w, m) in &masks {
                    word(g, w, m);
                    op!(g, "jnz {ok}");
                }
                op!(g, "jump {fail}");
                g.at(&ok);
            }
            _ => {
                let ok = g.label("fb_not_all");
                for &(w, m) in &masks {
                    word(g, w, m);
                    op!(g, "push {m}");
                    op!(g, "jcmp.neq {ok}");
                }
                op!(g, "jump {fail}");
                g.at(&ok);
            }
        }
    }
}

/// Adds the rule's flowbit changes to the packet's (info
/// [`info::FLOWBITS_SET`], `_UNSET`, `_TOGGLE`), which the verdict NetPE
/// applies to the flow once every rule has been evaluated.
fn flowbits_change(g: &mut Gen, r: &Rule) {
    use crate::rules::FlowbitsOp::*;
    let every = g.flowbits.bits.len() as u32;
    for f in &r.flowbits {
        let named = || f.bits.iter().map(|b| g.flowbits.bits[b]).collect::<Vec<u32>>();
        let group = || f.group.as_ref().map(|n| g.flowbits.groups.get(n).cloned().unwrap_or_default());
        let changes: Vec<(u32, Vec<u32>)> = match f.op {
            Set => vec![(info::FLOWBITS_SET, named())],
            Unset => vec![(info::FLOWBITS_UNSET, named())],
            Toggle => vec![(info::FLOWBITS_TOGGLE, named())],
            // The group's other bits cleared; the named ones set (a set wins over an unset).
            SetX => vec![(info::FLOWBITS_UNSET, group().unwrap_or_default()), (info::FLOWBITS_SET, named())],
            Reset => vec![(info::FLOWBITS_UNSET, group().unwrap_or_else(|| (0..every).collect()))],
            IsSet | IsNotSet | NoAlert => Vec::new(),
        };
        for (area, bits) in changes {
            for (w, m) in FlowbitNames::masks(bits) {
                let at = area + 4 * w;
                op!(g, "push {at}");
                op!(g, "push {at}");
                g.op("iload.32");
                op!(g, "push {m}");
                // Two toggles of a bit cancel, as if applied one after the other.
                g.op(if area == info::FLOWBITS_TOGGLE { "xor" } else { "or" });
                g.op("istore.32");
            }
        }
    }
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
        op!(g, "push {}", info::FLOW);
        g.op("iload.8");
        op!(g, "push {mask}");
        g.op("and");
        op!(g, "push {value}");
        op!(g, "jcmp.neq {fail}");
    }
    if let Some(frag) = f.frag {
        // A fragment: More Fragments set or a nonzero offset.
        ip_field(g, 6, 16);
        g.op("push 0x3fff");
        g.op("and");
        op!(g, "{} {fail}", if frag { "jz" } else { "jnz" });
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
    op!(g, "push {at}");
    g.op("iload.16");
    if off > 0 {
        op!(g, "push {off}");
        g.op("add");
    }
    op!(g, "upload.{bits}");
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
        op!(g, "jump {fail}");
        return;
    }
    op!(g, "push {}", info::CLASS);
    g.op("iload.8");
    op!(g, "push {class}");
    op!(g, "jcmp.neq {fail}");
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
        op!(g, "jump {fail}");
        return;
    };
    if negated {
        op!(g, "push {lo}");
        op!(g, "jcmp.eq {fail}");
        return;
    }
    op!(g, "locstore {L_TMP}");
    if lo > 0 {
        op!(g, "locload {L_TMP}");
        op!(g, "push {lo}");
        op!(g, "jcmp.lt {fail}");
    }
    if hi < max {
        op!(g, "locload {L_TMP}");
        op!(g, "push {hi}");
        op!(g, "jcmp.gt {fail}");
    }
}

/// Jumps to `fail` unless the value on the stack (popped) has `bits` as `mode` says.
fn bits_check(g: &mut Gen, bits: u32, mode: crate::rules::BitsMode, fail: &str) {
    use crate::rules::BitsMode as M;
    match mode {
        M::Exact => {
            op!(g, "push {bits}");
            op!(g, "jcmp.neq {fail}");
        }
        M::All => {
            op!(g, "push {bits}");
            g.op("and");
            op!(g, "push {bits}");
            op!(g, "jcmp.neq {fail}");
        }
        M::Any => {
            op!(g, "push {bits}");
            g.op("and");
            op!(g, "jz {fail}");
        }
        M::Not => {
            op!(g, "push {bits}");
            g.op("and");
            op!(g, "jnz {fail}");
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
            op!(g, "push {}", !mask);
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
            op!(g, "push {}", info::DSIZE);
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
            op!(g, "locstore {L_TMP}");
            op!(g, "locload {L_TMP}");
            op!(g, "jz {ok}");
            op!(g, "locload {L_TMP}");
            g.op("push 8");
            op!(g, "jcmp.neq {fail}");
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
            op!(g, "push {}", info::SRC);
            g.op("iload.32");
            op!(g, "push {}", info::DST);
            g.op("iload.32");
            op!(g, "jcmp.neq {fail}");
        }
    }
}

/// Starts inspecting `buffer`: jumps to `fail` when the packet does not
/// have it (an HTTP buffer of a packet that is not an HTTP message of the
/// right kind, or without that field); sets the HTTP bounds locals; puts the
/// cursor at the buffer's start.
fn enter_buffer(g: &mut Gen, buffer: Buffer, fail: &str) {
    if let Some((f, kind)) = http_field(buffer) {
        if let Some(k) = kind {
            op!(g, "push {}", info::HTTP_KIND);
            g.op("iload.8");
            op!(g, "push {k}");
            op!(g, "jcmp.neq {fail}");
        }
        op!(g, "push {}", info::HTTP_PRESENT);
        g.op("iload.16");
        op!(g, "push {}", 1u32 << f);
        g.op("and");
        op!(g, "jz {fail}");
        op!(g, "push {}", info::HTTP_FIELDS + 4 * f as u32);
        g.op("iload.16");
        op!(g, "locstore {L_HBASE}");
        op!(g, "push {}", info::HTTP_FIELDS + 4 * f as u32 + 2);
        g.op("iload.16");
        op!(g, "locstore {L_HEND}");
    }
    let (base, _) = bounds(g, buffer);
    op!(g, "locload {base}");
    op!(g, "locstore {L_CURSOR}");
}

/// Sets the search region locals of content `i` from the cursor or the buffer start.
/// Arithmetic is signed: offsets and distances may be negative; the start is clipped to the payload.
fn region(g: &mut Gen, r: &Rule, c: &Content, i: usize, (base, end): (u32, u32)) {
    let (s, e) = (l_start(i), l_stop(i));
    let (from, shift, limit) = if c.relative() { (L_CURSOR, &c.distance, &c.within) } else { (base, &c.offset, &c.depth) };
    op!(g, "locload {from}");
    if let Some(n) = shift {
        bytes::push_position(g, r, n);
        g.op("add");
    }
    op!(g, "locstore {s}");
    // end = min(start + limit, buffer end)
    op!(g, "locload {end}");
    op!(g, "locstore {e}");
    if let Some(n) = limit {
        let keep = g.label("keep");
        op!(g, "locload {s}");
        bytes::push_position(g, r, n);
        g.op("add");
        op!(g, "locstore {L_TMP}");
        op!(g, "locload {L_TMP}");
        op!(g, "locload {e}");
        op!(g, "jcmp.sge {keep}");
        op!(g, "locload {L_TMP}");
        op!(g, "locstore {e}");
        g.at(&keep);
    }
    // start = max(start, buffer start)
    let ok = g.label("inside");
    op!(g, "locload {s}");
    op!(g, "locload {base}");
    op!(g, "jcmp.sge {ok}");
    op!(g, "locload {base}");
    op!(g, "locstore {s}");
    g.at(&ok);
}

/// Jumps to `fail` unless the address at info `off` matches `x`.
fn addr_check(g: &mut Gen, x: &AddrExpr, off: u32, fail: &str) {
    if *x == AddrExpr::Any {
        return;
    }
    op!(g, "push {off}");
    g.op("iload.32");
    op!(g, "locstore {L_TMP}");
    let ok = g.label("addr_ok");
    addr_bool(g, x, &ok, fail);
    g.at(&ok);
}

fn addr_bool(g: &mut Gen, x: &AddrExpr, yes: &str, no: &str) {
    match x {
        AddrExpr::Any => op!(g, "jump {yes}"),
        AddrExpr::Net(net, len) => {
            op!(g, "locload {L_TMP}");
            op!(g, "push {:#x}", crate::rules::mask(*len));
            g.op("and");
            op!(g, "push {net:#x}");
            op!(g, "jcmp.eq {yes}");
            op!(g, "jump {no}");
        }
        // The decoder is IPv4-only: an IPv6 block matches no packet.
        AddrExpr::Net6(..) => op!(g, "jump {no}"),
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
    let key = format!("{x:?}");
    let ranges = std::rc::Rc::clone(g.ports.entry(key.clone()).or_insert_with(|| std::rc::Rc::new(x.ranges())));
    let bitmap = match g.bitmaps.get(&key) {
        Some(&b) => Some(b),
        None if ranges.len() > MAX_INLINE_RANGES => {
            g.port_sets.push(ranges.to_vec());
            let b = g.bitmap_base + BITMAP * (g.port_sets.len() as u32 - 1);
            g.bitmaps.insert(key, b);
            Some(b)
        }
        None => None,
    };
    op!(g, "push {off}");
    g.op("iload.16");
    if let Some(base) = bitmap {
        // Bit (port & 7) of the byte base + port / 8.
        g.op("dup");
        g.op("push 3");
        g.op("shr");
        op!(g, "push {base}");
        g.op("add");
        g.op("dload.8");
        g.op("swap");
        g.op("push 7");
        g.op("and");
        g.op("shr");
        g.op("push 1");
        g.op("and");
        op!(g, "jz {fail}");
        return;
    }
    op!(g, "locstore {L_TMP}");
    let ok = g.label("port_ok");
    for &(lo, hi) in ranges.iter() {
        let next = g.label("port_next");
        if lo > 0 {
            op!(g, "locload {L_TMP}");
            op!(g, "push {lo}");
            op!(g, "jcmp.lt {next}");
        }
        if hi < u16::MAX {
            op!(g, "locload {L_TMP}");
            op!(g, "push {hi}");
            op!(g, "jcmp.gt {next}");
        }
        op!(g, "jump {ok}");
        g.at(&next);
    }
    op!(g, "jump {fail}");
    g.at(&ok);
}

/// The `.init` segment that sets the port bitmaps' bits (data memory is zero before it).
fn init_bitmaps(text: &mut String, base: u32, sets: &[Vec<(u16, u16)>]) {
    let _ = writeln!(text, "segment .init");
    let mut n = 0;
    for (k, set) in sets.iter().enumerate() {
        let at = base + BITMAP * k as u32;
        for &(lo, hi) in set {
            n += 1;
            let _ = writeln!(
                text,
                "    push {lo}\n    locstore 0\nbits_{n}:\n    locload 0\n    push 3\n    shr\n    push {at}\n    add\n    dup\n    dload.8\n    push 1\n    \
                 locload 0\n    push 7\n    and\n    shl\n    or\n    dstore.8\n    locload 0\n    push 1\n    add\n    dup\n    locstore 0\n    push {hi}\n    jcmp.le bits_{n}"
            );
        }
    }
    let _ = writeln!(text, "    exit\nends");
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
        op!(g, "jump {yes}");
        return;
    }
    for x in plain {
        let next = g.label("or_else");
        each(g, x, yes, &next);
        g.at(&next);
    }
    op!(g, "jump {no}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn range_prefixes_cover_exactly_the_range() {
        for (lo, hi) in [(0, 0), (0, 65535), (1, 1), (80, 80), (1024, 65535), (3, 17), (0, 1023), (8000, 8100), (65535, 65535), (5, 4095)] {
            let p = range_prefixes(lo, hi);
            for v in 0..=70_000u32 {
                let inside = p.iter().filter(|(net, len)| v & !((1u64 << (32 - u32::from(*len))) - 1) as u32 == *net).count();
                assert_eq!(inside, usize::from((lo..=hi).contains(&v)), "{lo}..={hi}: {v} in {p:?}");
            }
        }
        assert_eq!(range_prefixes(0, u32::MAX), [(0, 0)]);
        assert_eq!(range_prefixes(1024, 65535), [(1024, 22), (2048, 21), (4096, 20), (8192, 19), (16384, 18), (32768, 17)]);
    }

    #[test]
    fn decode_and_verdict_see_the_whole_info_layout() {
        assert!(DECODE.contains(&format!("\n.infosize {}\n", info::SIZE)), "decode.nil's .infosize is info::SIZE");
        assert!(verdict_listing(1).contains(&format!(".infosize {}", info::SIZE)));
        assert_eq!(info::SIZE, info::FLOWBITS + 16 * info::FLOWBIT_WORDS);
        // Every listing assembles, with every optional part.
        for text in [decode_listing(true, u32::MAX >> (32 - netvm_copro::http::FIELDS), 8), verdict_listing(8), verdict_listing(0)] {
            netil::assemble(&text).unwrap_or_else(|e| panic!("{}\n{text}", e.display_with("listing")));
        }
    }

    #[test]
    fn every_generated_module_verifies() {
        let text = r#"
alert tcp any any -> 10.0.0.0/8 80 (msg:"a"; content:"GET"; nocase; offset:0; depth:3; content:"x"; distance:1; within:5; sid:1;)
drop udp [1.2.3.4,!5.6.7.8] !53 -> any [1:10,!5] (msg:"b"; content:!"zz"; pcre:"/ab+c/iR"; sid:2;)
pass icmp any any -> any any (msg:"c"; sid:3;)
alert ip any any -> any any (msg:"d"; content:"|00 01|"; fast_pattern; content:"long content"; sid:4;)
alert tcp any any -> any any (msg:"e"; pcre:"/^x/"; sid:5;)
alert tcp any any <> 10.0.0.0/8 80 (msg:"f"; flow:established,to_client,no_frag; flags:+PA,12; dsize:10<>100; seq:>5; ack:!3; window:<=9; content:"x"; isdataat:!5,relative; isdataat:2; sid:6;)
alert tcp any any -> any $HTTP_PORTS (msg:"h"; flowbits:isset,a|b; flowbits:setx,c,g; content:"GET"; http_method; content:"/x"; http_uri; pcre:"/y/H"; file_data; content:"z"; sid:8;)
alert tcp any any -> any any (msg:"i"; flowbits:isnotset,a&c; flowbits:toggle,b; flowbits:reset,g; flowbits:noalert; sid:9;)
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
