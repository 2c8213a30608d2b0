//! The engines of the suite, by name: the interpreter (the oracle), the
//! baseline compiler per NetPE, the JIT per NetPE (with every domain
//! optimisation, and with each one off),
//! whole applications linked by the JIT (direct and table), and AOT objects
//! run in a C host (x86-64 natively, aarch64 under qemu).

use netvm_jit::link::LinkMode;
use netvm_jit::{DomainOpts, JitEngine, JitOptions};
use netvm_vm::Engine;

/// One engine (or engine configuration) a test file runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// The reference interpreter, per NetPE: the oracle.
    Interp,
    /// The one-pass baseline compiler per NetPE (x86-64 hosts).
    Baseline,
    /// The JIT per NetPE, with these domain optimisations.
    Jit(DomainOpts),
    /// A whole application linked by the JIT.
    Linked(LinkMode, DomainOpts),
    /// An AOT object (direct linking) in the C host, for a target.
    Aot(AotTarget),
}

/// A target of the AOT engines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AotTarget {
    /// x86-64 Linux, run natively (on an x86-64 host).
    X86_64,
    /// aarch64 Linux, run under qemu-aarch64.
    Aarch64,
}

impl AotTarget {
    /// The Rust/Cranelift target triple.
    pub const fn triple(self) -> &'static str {
        match self {
            AotTarget::X86_64 => "x86_64-unknown-linux-gnu",
            AotTarget::Aarch64 => "aarch64-unknown-linux-gnu",
        }
    }
}

/// The JIT with one domain optimisation off, one engine each.
const NO_BSWAP: DomainOpts = DomainOpts { bswap_const: false, ..DomainOpts::ALL };
const NO_BOUNDS: DomainOpts = DomainOpts { bounds: false, ..DomainOpts::ALL };
const NO_FOLD: DomainOpts = DomainOpts { fold_offsets: false, ..DomainOpts::ALL };
const NO_DEAD_INFO: DomainOpts = DomainOpts { dead_info_stores: false, ..DomainOpts::ALL };
const NO_WALKS: DomainOpts = DomainOpts { inline_walks: false, ..DomainOpts::ALL };
const SCALAR_TAGS: DomainOpts = DomainOpts { vector_tags: false, ..DomainOpts::ALL };

impl EngineKind {
    /// Every engine, the oracle first.
    pub const ALL: [EngineKind; 13] = [
        EngineKind::Interp,
        EngineKind::Baseline,
        EngineKind::Jit(DomainOpts::ALL),
        EngineKind::Jit(NO_BSWAP),
        EngineKind::Jit(NO_BOUNDS),
        EngineKind::Jit(NO_FOLD),
        EngineKind::Jit(NO_WALKS),
        EngineKind::Jit(SCALAR_TAGS),
        EngineKind::Linked(LinkMode::Direct, DomainOpts::ALL),
        EngineKind::Linked(LinkMode::Table, DomainOpts::ALL),
        EngineKind::Linked(LinkMode::Direct, NO_DEAD_INFO),
        EngineKind::Aot(AotTarget::X86_64),
        EngineKind::Aot(AotTarget::Aarch64),
    ];

    /// The engine's name in `engines:` lines and reports.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Interp => "interp",
            EngineKind::Baseline => "baseline",
            EngineKind::Jit(o) if o == DomainOpts::ALL => "jit",
            EngineKind::Jit(o) if o == NO_BSWAP => "jit-no-bswap-const",
            EngineKind::Jit(o) if o == NO_BOUNDS => "jit-no-bounds",
            EngineKind::Jit(o) if o == NO_FOLD => "jit-no-fold-offsets",
            EngineKind::Jit(o) if o == NO_WALKS => "jit-no-inline-walks",
            EngineKind::Jit(o) if o == SCALAR_TAGS => "jit-scalar-tags",
            EngineKind::Jit(_) => "jit-custom",
            EngineKind::Linked(LinkMode::Direct, o) if o == DomainOpts::ALL => "linked-direct",
            EngineKind::Linked(LinkMode::Table, o) if o == DomainOpts::ALL => "linked-table",
            EngineKind::Linked(LinkMode::Direct, o) if o == NO_DEAD_INFO => "linked-direct-no-dead-info-stores",
            EngineKind::Linked(..) => "linked-custom",
            EngineKind::Aot(AotTarget::X86_64) => "aot-x86_64",
            EngineKind::Aot(AotTarget::Aarch64) => "aot-aarch64",
        }
    }

    /// Parses [`EngineKind::name`].
    pub fn from_name(s: &str) -> Option<EngineKind> {
        EngineKind::ALL.into_iter().find(|e| e.name() == s)
    }

    /// Parses an `engines:` line: names, or `all` followed by `-NAME`
    /// exclusions (`all -aot-aarch64`).
    pub fn parse_list(s: &str) -> Result<Vec<EngineKind>, String> {
        let words: Vec<&str> = s.split_whitespace().collect();
        let named = |w: &str| EngineKind::from_name(w).ok_or_else(|| format!("unknown engine `{w}` (engines: {})", Self::names()));
        match words.split_first() {
            None => Err("`engines:` names at least one engine".into()),
            Some((&"all", rest)) => {
                let mut list = EngineKind::ALL.to_vec();
                for w in rest {
                    let e = named(w.strip_prefix('-').ok_or_else(|| format!("after `all`, only exclusions (`-NAME`), not `{w}`"))?)?;
                    list.retain(|x| *x != e);
                }
                Ok(list)
            }
            Some(_) => words.iter().map(|w| named(w)).collect(),
        }
    }

    fn names() -> String {
        EngineKind::ALL.iter().map(|e| e.name()).collect::<Vec<_>>().join(", ")
    }

    /// Whether the engine runs single NetPEs (and so observes info memory).
    pub fn is_netpe(self) -> bool {
        matches!(self, EngineKind::Interp | EngineKind::Baseline | EngineKind::Jit(_))
    }

    /// The code-generator options of a JIT engine.
    pub fn jit_options(self) -> JitOptions {
        let domain = match self {
            EngineKind::Jit(o) | EngineKind::Linked(_, o) => o,
            _ => DomainOpts::ALL,
        };
        JitOptions { domain, ..JitOptions::default() }
    }

    /// The engine as the runtime sees it (`None` for AOT objects, which
    /// run outside the process): per-NetPE engines walk the graph
    /// (dispatch), linked ones compile it whole.
    pub fn runtime_engine(self) -> Option<Box<dyn Engine>> {
        match self {
            EngineKind::Interp => Some(Box::new(netvm_runtime::InterpEngine)),
            EngineKind::Baseline => Some(Box::new(netvm_baseline::BaselineEngine)),
            EngineKind::Jit(_) => Some(Box::new(JitEngine { link: None, opts: self.jit_options(), batching: Default::default() })),
            EngineKind::Linked(mode, _) => {
                Some(Box::new(JitEngine { link: Some(mode), opts: self.jit_options(), batching: Default::default() }))
            }
            EngineKind::Aot(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_distinct() {
        for e in EngineKind::ALL {
            assert_eq!(EngineKind::from_name(e.name()), Some(e));
            assert!(!e.name().ends_with("custom"));
        }
        assert_eq!(EngineKind::parse_list("all -aot-aarch64").unwrap().len(), EngineKind::ALL.len() - 1);
        assert_eq!(EngineKind::parse_list("interp jit").unwrap(), vec![EngineKind::Interp, EngineKind::Jit(DomainOpts::ALL)]);
        assert!(EngineKind::parse_list("interp bogus").is_err());
        assert!(EngineKind::parse_list("all jit").is_err());
    }
}
