//! Built-in netvm coprocessors (NetVM paper §3.1.3), each behind the
//! [`netvm_vm::Coprocessor`] interface so that every engine reaches them the
//! same way. [`registry`] returns the registry with every built-in kind.
//!
//! | kind       | what it does |
//! |------------|--------------|
//! | `counters` | an array of 64-bit packet/byte counters the control plane can read |
//! | `eventlog` | records (packet, rule)-style events for the host application to collect (IDS alerts) |
//! | `linkstate`| which application ports are up (set by the runtime from the attached inputs) |
//! | `strmatch` | multi-pattern literal matching (Hyperscan when present, else aho-corasick) |
//! | `regex`    | PCRE-style regular expressions (regex-automata) on packet regions |
//! | `lpm`      | longest-prefix match over IPv4 (DIR-24-8) or IPv6 routes, loaded from route files |
//! | `table`    | an exact-match table (fixed-size keys and values) with aging, loadable from a file |
//! | `meter`    | token-bucket meters (RFC 2697 srTCM, RFC 2698 trTCM) on packet time |

mod counters;
pub mod eventlog;
pub mod linkstate;
pub mod lpm;
pub mod meter;
pub mod regex;
pub mod strmatch;
pub mod table;

pub use counters::Counters;
pub use lpm::{Lpm4, Lpm6, LpmCoprocessor};
pub use meter::Meters;
pub use regex::RegexCopro;
pub use strmatch::{PatternSet, StrMatch};
pub use table::{ExactTable, Table, TableFull};

use netvm_vm::CoproRegistry;

/// A registry holding every built-in coprocessor kind.
pub fn registry() -> CoproRegistry {
    let mut r = CoproRegistry::new();
    r.register("counters", counters::create);
    r.register("eventlog", eventlog::create);
    r.register("linkstate", linkstate::create);
    r.register("lpm", lpm::create);
    r.register("meter", meter::create);
    r.register("regex", regex::create);
    r.register("strmatch", strmatch::create);
    r.register("table", table::create);
    r
}
