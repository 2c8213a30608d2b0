//! NetVMSnort (NetVM paper §6.2): Snort rules compiled to a NetIL
//! application.
//!
//! - [`rules`]: Snort 2.9 and Snort 3 rules, parsed into a typed AST; rules
//!   that do not parse are reported with their line and reason;
//! - [`compile`]: rules → a NetIL application (a decoder NetPE, detection
//!   NetPEs whose content prefilter is the `strmatch` coprocessor, a verdict
//!   NetPE) with its pattern and regex tables; [`compile::unsupported`]
//!   says which parsed rules it cannot compile yet;
//! - [`alerts`]: the events of a run → alerts as JSON lines.
//!
//! `netvm ids` is argument parsing over these and the runtime's driver.

pub mod alerts;
pub mod compile;
pub mod pcre;
pub mod rules;

pub use alerts::AlertWriter;
pub use compile::{compile, IdsApp};
pub use rules::{parse_rules, parse_rules_file, Action, Proto, Rule, RuleSet, Skip};
