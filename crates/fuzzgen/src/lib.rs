//! Generators of verified NetIL programs and interesting packets, in the
//! spirit of Cranelift's `cranelift-fuzzgen`: the same generator drives
//! property tests (through a byte-vector strategy) and `cargo fuzz` targets
//! (through the fuzzer's bytes), and will drive differential testing of the
//! JIT against the reference interpreter.
//!
//! - [`generate`] turns bytes into a [`Module`] that always passes
//!   [`netvm_verify::verify`], exercising every instruction class and every
//!   memory with realistic shapes: structured `if`/`else` and `switch` blocks,
//!   counted, long and unbounded loops (so the budget fault happens), packet
//!   accesses at constant and computed offsets (IHL-style header arithmetic)
//!   that are sometimes out of bounds, info and data accesses inside and (at
//!   run time) outside the declared sizes, divisions by zero, shifts by 32
//!   and more, `ret.pop` to ports that do not exist, coprocessor accesses to
//!   registers that do not exist, an optional `.init` handler, and
//!   unreachable junk that only has to decode. Coprocessors are `counters`,
//!   small `table`s and route tables ([`COPRO_TEMPLATES`]): lookups, inserts and deletes
//!   by keys in registers and at packet offsets (inside the packet, ending
//!   near its end, past it), repeated on one key so that they hit, replace
//!   and fill the table, which is what the compiled engines' inline
//!   probes must get right.
//! - [`generate_listing`] and [`generate_program`] give the same program as
//!   assembly text that assembles to the identical module (written with
//!   varied but valid spellings, to exercise the assembler).
//! - [`generate_infinite_loop`] gives a program whose `.push` handler can
//!   only end by exhausting its budget.
//! - [`generate_packet`] gives interesting frames: runts, Ethernet with IPv4
//!   (with options), IPv6, VLAN tags, ARP, random bytes, and captures shorter
//!   than the wire length.
//! - [`harness`] runs a program on packets with any engine and records what a
//!   program can observe, for determinism and differential checks.
//!
//! # How validity is guaranteed
//!
//! See the [`gen`] module: the generator tracks the stack depth of every
//! instruction it emits, agrees on one depth at every join, stores every
//! local at the entry of each handler, keeps constant info/data offsets
//! inside the declared sizes (and makes every other info/data offset depend
//! on a value the verifier treats as unknown), and ends every path with a
//! terminator. The verifier only checks constant offsets (docs/netil.md §6),
//! which this relies on.
//!
//! # Opcode coverage
//!
//! Every opcode of [`netil::Opcode::ALL`] is generated in reachable code (the
//! crate's tests check it over 2,000 programs with the default
//! configuration); coprocessor instructions need [`GenConfig::copro`] and
//! `exit` needs [`GenConfig::init`].

pub mod app;
mod emit;
pub mod gen;
pub mod harness;
mod packet;

use std::fmt::Write;

use arbitrary::{Result, Unstructured};
use netil::{CoproDecl, Module, SegmentKind};
use netvm_vm::PeState;

pub use harness::{compare_generated, compare_real, first_difference, observe, real_programs_and_packets, Observation};

/// The `arbitrary` crate the generators take their input from (re-exported
/// so that users need no dependency of their own).
pub use arbitrary;
/// The verifier every generated program passes (re-exported for tests that
/// depend on this crate only).
pub use netvm_verify;
pub use packet::{generate_packet, generate_packets};

use emit::{Cosmetic, Item, ListingEnv, SegBuilder};
use gen::{Env, Gen, Mode};

/// What the generator may produce. [`Default`] gives programs of up to about
/// 200 instructions using every feature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenConfig {
    /// Soft limit on the number of live instructions of `.push` (`.init` gets
    /// a quarter). Open structures are still closed when it is reached, so a
    /// program can be somewhat longer.
    pub max_insns: usize,
    /// Generate loops (counted loops, do-while loops, loops whose back edge is
    /// a `switch`).
    pub allow_loops: bool,
    /// Also generate loops that run long or forever (huge or packet-derived
    /// counts, `for (;;)` loops left only by `break` or an exit), so that the
    /// budget fault happens. Needs `allow_loops`.
    pub allow_long_loops: bool,
    /// Declare `counters` coprocessors and use `copro.*` (the harness creates
    /// them with [`new_state`]).
    pub copro: bool,
    /// With `copro`: sometimes declare `table` and `lpm` instances instead
    /// ([`COPRO_TEMPLATES`]) and use their operations, the packet-key ones
    /// included (the compiled engines inline some of them: the walks).
    pub tables: bool,
    /// Sometimes generate an `.init` handler.
    pub init: bool,
    /// Sometimes put unreachable junk (any opcode, random operands) after
    /// jumps and exits; the verifier only decodes it.
    pub dead_code: bool,
    /// Largest operand-stack depth the generator uses (at least 4); the
    /// module declares the depth actually reached, sometimes a little more.
    pub max_stack: u16,
    /// Largest nesting of `if`/`switch`/loops.
    pub max_nesting: u32,
    /// Largest loop nesting (one local per level holds the counter).
    pub max_loop_nesting: u16,
    /// Largest `.infosize`.
    pub max_info_size: u32,
    /// Largest `.datasize`.
    pub max_data_size: u32,
    /// Largest `.ports`.
    pub max_ports: u16,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            max_insns: 200,
            allow_loops: true,
            allow_long_loops: true,
            copro: true,
            tables: true,
            init: true,
            dead_code: true,
            max_stack: 24,
            max_nesting: 4,
            max_loop_nesting: 3,
            max_info_size: 256,
            max_data_size: 512,
            max_ports: 8,
        }
    }
}

/// A generated program: the module and an assembly listing of it.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The module; it passes [`netvm_verify::verify`].
    pub module: Module,
    /// An assembly listing that [`netil::assemble`]s to exactly `module`.
    pub listing: String,
}

/// The coprocessor kind generated programs declare most (the only one
/// without [`GenConfig::tables`]).
pub const COPRO_KIND: &str = "counters";

/// A coprocessor instance generated programs may declare: the name it is
/// declared as, its kind and its configuration. [`new_state`] creates it
/// from this; an application's manifest gives the configuration
/// ([`copro_manifest_lines`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoproTemplate {
    /// The declared name (unique among the templates).
    pub name: &'static str,
    /// The kind.
    pub kind: &'static str,
    /// The configuration, `(setting, value)`.
    pub config: &'static [(&'static str, &'static str)],
}

impl CoproTemplate {
    /// For an `lpm` (generated code inserts, deletes and looks up routes in
    /// it): whether its family is IPv6. `None` for other kinds.
    pub fn lpm_family_v6(&self) -> Option<bool> {
        (self.kind == "lpm").then(|| self.config.contains(&("family", "ipv6")))
    }

    /// The `table`'s key size, for a table (`None` otherwise).
    pub fn key_size(&self) -> Option<u32> {
        (self.kind == "table").then(|| self.setting("key_size").unwrap_or(4))
    }

    /// The `table`'s value size, for a table (`None` otherwise).
    pub fn value_size(&self) -> Option<u32> {
        (self.kind == "table").then(|| self.setting("value_size").unwrap_or(4))
    }

    fn setting(&self, name: &str) -> Option<u32> {
        self.config.iter().find(|(k, _)| *k == name).and_then(|(_, v)| v.parse().ok())
    }

    /// The configuration as the registry takes it.
    pub fn coproc_config(&self) -> netvm_vm::CoproConfig {
        self.config.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }
}

/// Every instance generated programs may declare: three `counters` (256
/// counters each), an IPv4 and an IPv6 `lpm` with budgets of 24 and 48
/// groups (which generated routes exhaust) and five small `table`s. Tables of 4-16-byte keys and
/// values of at most 4 bytes are those the compiled engines probe inline
/// (`netvm_vm::BucketWalk`); `tiny` (3-byte keys) and `wide` (8-byte
/// values) are always called. Capacities are small, so that generated
/// traffic fills them (full tables, displaced entries, failed inserts),
/// and two tables age (1 and 2 s, against packet times that jump). Their
/// hash seeds are fixed: what a full table does with a new key depends on
/// where keys sit, and engines are compared on instances of their own.
pub const COPRO_TEMPLATES: &[CoproTemplate] = &[
    CoproTemplate { name: "ctr", kind: "counters", config: &[] },
    CoproTemplate { name: "hits", kind: "counters", config: &[] },
    CoproTemplate { name: "c_2", kind: "counters", config: &[] },
    CoproTemplate { name: "fib", kind: "table", config: &[("key_size", "6"), ("value_size", "2"), ("capacity", "40"), ("seed", "1")] },
    CoproTemplate {
        name: "flows",
        kind: "table",
        config: &[("key_size", "13"), ("value_size", "4"), ("capacity", "24"), ("aging", "1"), ("seed", "2")],
    },
    CoproTemplate { name: "hosts", kind: "table", config: &[("key_size", "4"), ("value_size", "4"), ("capacity", "64"), ("seed", "3")] },
    CoproTemplate { name: "rt", kind: "lpm", config: &[("tbl8_groups", "24")] },
    CoproTemplate { name: "rt6", kind: "lpm", config: &[("family", "ipv6"), ("tbl8_groups", "48")] },
    CoproTemplate { name: "tiny", kind: "table", config: &[("key_size", "3"), ("value_size", "1"), ("capacity", "16"), ("seed", "4")] },
    CoproTemplate {
        name: "wide",
        kind: "table",
        config: &[("key_size", "16"), ("value_size", "8"), ("capacity", "16"), ("aging", "2"), ("seed", "0x5eed")],
    },
];

/// The template a declaration was generated from (by name and kind).
pub fn copro_template(decl: &CoproDecl) -> Option<&'static CoproTemplate> {
    COPRO_TEMPLATES.iter().find(|t| t.name == decl.name && t.kind == decl.kind)
}

/// Manifest lines (`copro.NAME = { ... }`, inside a `[[netpe]]` table) that
/// configure `module`'s generated instances as [`new_state`] does.
pub fn copro_manifest_lines(module: &Module) -> String {
    let mut out = String::new();
    for t in module.copros.iter().filter_map(copro_template).filter(|t| !t.config.is_empty()) {
        // Numbers as TOML integers, anything else as a string.
        let value = |v: &str| if v.bytes().all(|b| b.is_ascii_digit()) { v.to_string() } else { format!("{v:?}") };
        let settings: Vec<String> = t.config.iter().map(|(k, v)| format!("{k} = {}", value(v))).collect();
        let _ = writeln!(out, "copro.{} = {{ {} }}", t.name, settings.join(", "));
    }
    out
}

/// Generates a program from raw bytes (for example a proptest byte vector):
/// [`generate_program`] on an [`Unstructured`] over `bytes`. Never fails:
/// running out of bytes only makes the program shorter.
pub fn generate_from_bytes(bytes: &[u8], cfg: &GenConfig) -> Generated {
    generate_program(&mut Unstructured::new(bytes), cfg).expect("generation does not fail on any input")
}

/// Generates a module that passes [`netvm_verify::verify`].
pub fn generate(u: &mut Unstructured<'_>, cfg: &GenConfig) -> Result<Module> {
    generate_program(u, cfg).map(|g| g.module)
}

/// Generates the same program as [`generate`] (for the same bytes) as
/// assembly text.
pub fn generate_listing(u: &mut Unstructured<'_>, cfg: &GenConfig) -> Result<String> {
    generate_program(u, cfg).map(|g| g.listing)
}

/// Generates a program: a verified module and its listing.
pub fn generate_program(u: &mut Unstructured<'_>, cfg: &GenConfig) -> Result<Generated> {
    let seed: u64 = u.arbitrary()?;
    let env = environment(u, cfg)?;
    let mode = Mode::default();
    let init = if cfg.init && u.int_in_range(0u8..=99)? >= 65 {
        let mut g = Gen::new(u, cfg, &env, SegmentKind::Init, mode, (cfg.max_insns / 4).max(1));
        g.segment()?;
        Some(g.seg)
    } else {
        None
    };
    let mut g = Gen::new(u, cfg, &env, SegmentKind::Push, mode, cfg.max_insns.max(1));
    g.segment()?;
    let push = g.seg;
    finish(u, &env, seed, init, push)
}

/// Generates a module whose `.push` handler never ends by itself: a
/// generated body (no exits, no instruction that can fault) inside an
/// infinite loop, so every packet ends with `Fault(Budget)` on every engine.
/// Coprocessors it declares must exist ([`new_state`] creates them).
pub fn generate_infinite_loop(u: &mut Unstructured<'_>, cfg: &GenConfig) -> Result<Module> {
    let seed: u64 = u.arbitrary()?;
    let mut cfg = cfg.clone();
    cfg.allow_loops = true;
    cfg.max_loop_nesting = cfg.max_loop_nesting.max(1);
    let env = environment(u, &cfg)?;
    let mode = Mode { no_faults: true, no_exits: true };
    let mut g = Gen::new(u, &cfg, &env, SegmentKind::Push, mode, cfg.max_insns.max(1));
    g.infinite_segment()?;
    let push = g.seg;
    finish(u, &env, seed, None, push).map(|g| g.module)
}

/// A fresh NetPE state for `module`, as the runtime would create it: zeroed
/// data memory and one instance per declared coprocessor, configured as its
/// [`CoproTemplate`] says (or by default: a `counters` has 256 counters).
/// From the first declaration of a kind that does not exist on, no
/// instance, so their accesses fault `copro`.
pub fn new_state(module: &Module) -> PeState {
    let mut state = PeState::new(module);
    let registry = netvm_copro::registry();
    for decl in &module.copros {
        let config = copro_template(decl).map(CoproTemplate::coproc_config).unwrap_or_default();
        match registry.create(&decl.kind, &config) {
            Ok(c) => state.copros.push(c),
            Err(_) => break,
        }
    }
    state
}

/// Module-level choices: sizes, ports, locals, coprocessors, stack cap.
fn environment(u: &mut Unstructured<'_>, cfg: &GenConfig) -> Result<Env> {
    let size = |u: &mut Unstructured<'_>, max: u32| -> Result<u32> {
        Ok(match u.int_in_range(0u8..=19)? {
            0..=2 => 0,
            3..=5 => u.int_in_range(1..=8.min(max.max(1)))?.min(max),
            _ => u.int_in_range(0..=max)?,
        })
    };
    let info_size = size(u, cfg.max_info_size)?;
    let data_size = size(u, cfg.max_data_size)?;
    let ports = if cfg.max_ports == 0 || u.int_in_range(0u8..=99)? >= 97 { 0 } else { u.int_in_range(1..=cfg.max_ports)? };
    let ncopros = if cfg.copro && u.int_in_range(0u8..=99)? >= 55 { u.int_in_range(1u8..=2)? } else { 0 };
    // Each instance: a counters (the first slot's name, as before tables
    // existed) or, half the time with tables, one of the tables; no two alike.
    let mut copros = Vec::new();
    for i in 0..ncopros {
        let tables = COPRO_TEMPLATES.len() - 3;
        let t = if cfg.tables && u.ratio(1u8, 2)? { 3 + u.int_in_range(0..=tables - 1)? } else { usize::from(i) };
        copros.push(if copros.contains(&t) { usize::from(i) + 1 } else { t });
    }
    let general = u.int_in_range(0u16..=6)?;
    let counters = if cfg.allow_loops { cfg.max_loop_nesting } else { 0 };
    let extra = if u.int_in_range(0u8..=9)? == 9 { u.int_in_range(1u16..=3)? } else { 0 };
    let cap = u32::from(u.int_in_range(4..=cfg.max_stack.max(4))?);
    // Most programs rarely take fault-prone choices, so that their code runs
    // to the end on most packets; some take them often.
    let risk = match u.int_in_range(0u8..=9)? {
        0..=5 => 2,
        6..=8 => 8,
        _ => 30,
    };
    Ok(Env { info_size, data_size, ports, ncopros, copros, general, counters, locals: general + counters + extra, cap, risk })
}

/// Builds the module and its listing from the generated segments.
fn finish(u: &mut Unstructured<'_>, env: &Env, seed: u64, init: Option<SegBuilder>, push: SegBuilder) -> Result<Generated> {
    let reached = init.as_ref().map_or(0, |s| s.max_depth).max(push.max_depth).max(1);
    let slack = if u.int_in_range(0u8..=9)? >= 7 { u.int_in_range(1u32..=3)? } else { 0 };
    let max_stack = (reached + slack).min(u32::from(netil::module::limits::MAX_STACK)) as u16;
    let templates: Vec<&CoproTemplate> = env.copros.iter().map(|&t| &COPRO_TEMPLATES[t]).collect();
    let names: Vec<String> = templates.iter().map(|t| t.name.to_string()).collect();
    let module = Module {
        max_stack,
        locals: env.locals,
        info_size: env.info_size,
        data_size: env.data_size,
        out_ports: env.ports,
        copros: templates.iter().map(|t| CoproDecl { name: t.name.to_string(), kind: t.kind.to_string() }).collect(),
        init: init.as_ref().map(SegBuilder::encode),
        push: Some(push.encode()),
        interface: netil::Interface::default(),
    };
    let listing = listing(&module, &names, seed, init.as_ref(), &push);
    Ok(Generated { module, listing })
}

fn listing(m: &Module, names: &[String], seed: u64, init: Option<&SegBuilder>, push: &SegBuilder) -> String {
    let mut cos = Cosmetic::new(seed);
    // `.ports` may be left to inference when it equals 1 + the highest `ret N`.
    let max_ret = [init, Some(push)]
        .into_iter()
        .flatten()
        .flat_map(|s| s.items.iter())
        .filter_map(|i| match i {
            Item::Insn { arg: emit::Arg::Port(p), .. } => Some(*p),
            _ => None,
        })
        .max();
    let inferred_ports = max_ret.map_or(0, |p| p + 1);
    let mut decls = String::new();
    let d = |cos: &mut Cosmetic, name: &str| cos.word(name);
    if m.max_stack != netil::asm::DEFAULT_MAX_STACK || cos.chance(50) {
        let _ = writeln!(decls, "{} {}", d(&mut cos, ".maxstacksize"), m.max_stack);
    }
    for (name, v) in [(".locals", u32::from(m.locals)), (".infosize", m.info_size), (".datasize", m.data_size)] {
        if v != 0 || cos.chance(50) {
            let _ = writeln!(decls, "{} {}", d(&mut cos, name), cos.number(v));
        }
    }
    if m.out_ports != inferred_ports || cos.chance(50) {
        let _ = writeln!(decls, "{} {}", d(&mut cos, ".ports"), m.out_ports);
    }
    for c in &m.copros {
        let _ = writeln!(decls, "{} {} {}", d(&mut cos, ".copro"), c.name, c.kind);
    }
    let env = ListingEnv { copro_names: names };
    let mut segs = String::new();
    let mut order: Vec<&SegBuilder> = [init, Some(push)].into_iter().flatten().collect();
    if cos.chance(25) {
        order.reverse();
    }
    for s in order {
        segs.push('\n');
        emit::listing(s, &env, &mut cos, &mut segs);
    }
    let mut out = String::from("; generated by netvm-fuzzgen\n");
    if cos.chance(80) {
        out.push_str(&decls);
        out.push_str(&segs);
    } else {
        out.push_str(&segs);
        out.push('\n');
        out.push_str(&decls);
    }
    out
}

#[cfg(test)]
mod tests;
