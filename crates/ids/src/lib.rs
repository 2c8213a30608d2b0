//! NetVMSnort (NetVM paper §6.2): Snort rules compiled to a NetIL
//! application.
//!
//! - [`rules`]: the rule subset, parsed; lines outside it are reported;
//! - [`compile`]: rules → a NetIL application (a decoder NetPE, detection
//!   NetPEs whose content prefilter is the `strmatch` coprocessor, a verdict
//!   NetPE) with its pattern and regex tables;
//! - [`alerts`]: the events of a run → alerts as JSON lines.
//!
//! `netvm ids` is argument parsing over these and the runtime's driver.

pub mod alerts;
pub mod compile;
pub mod rules;

pub use alerts::AlertWriter;
pub use compile::{compile, IdsApp};
pub use rules::{parse_rules, Action, Proto, Rule, RuleError, RuleSet};
