//! Built-in netvm coprocessors (NetVM paper §3.1.3), each behind the
//! [`netvm_vm::Coprocessor`] interface so that every engine reaches them the
//! same way. [`registry`] returns the registry with every built-in kind.
//!
//! | kind       | what it does |
//! |------------|--------------|
//! | `counters` | an array of 64-bit packet/byte counters the control plane can read |
//! | `addrset`  | sets of IPv4 prefixes: every set containing an address (IP lists, address-keyed rule groups) |
//! | `ess`      | WASP's ephemeral state store: 64-bit keys to 32-byte tuples living a fixed τ, expired in FIFO order, keyed hash, bounded chains, protected and private entries |
//! | `eventlog` | records (packet, rule)-style events for the host application to collect (IDS alerts) |
//! | `linkstate`| which application ports are up (set by the runtime from the attached inputs) |
//! | `strmatch` | multi-pattern literal matching (Hyperscan when present, else aho-corasick) |
//! | `regex`    | PCRE-style regular expressions (regex-automata) on packet regions |
//! | `lpm`      | longest-prefix match over IPv4 (DIR-24-8) or IPv6 routes, loaded from route files |
//! | `names`    | longest-prefix match of hierarchical names (the NDN FIB) by hashed components, loaded from prefix files |
//! | `table`    | an exact-match table (fixed-size keys and values) with aging, loadable from a file |
//! | `meter`    | token-bucket meters (RFC 2697 srTCM, RFC 2698 trTCM) on packet time |
//! | `flow`     | IPv4 connection tracking (TCP handshake and teardown, client and server) with per-flow bits |
//! | `http`     | where an HTTP/1.x request's or response's parts lie in a packet (method, URI, headers, cookie, body, …) |
//! | `threshold`| Snort's event thresholds and detection filters: events per (id, address) in windows of packet time |
//!
//! # Several workers
//!
//! A run with several workers (`--workers N`) gives each worker its own
//! handle on every instance: the first worker's is the one the application
//! created, ran `.init` on and loaded tables into; the others are made from
//! it by [`Coprocessor::fork`] before any packet runs. Every handle is
//! `Send` (each worker thread owns its own); input and output registers
//! and search scratch space (Hyperscan scratch, regex caches) always belong
//! to a handle. What
//! [`Coprocessor::share`] says about the rest:
//!
//! | kind       | `WorkerShare` | what a fork gets |
//! |------------|---------------|------------------|
//! | `counters` | `PerWorker`   | the same size and names, counters at zero |
//! | `meter`    | `PerWorker`   | the same meters (configured and loaded rates), buckets full, color counts at zero |
//! | `eventlog` | `PerWorker`   | an empty log of the same capacity |
//! | `flow`     | `PerWorker`   | an empty flow table of the same configuration (needs the `flow` distribution) |
//! | `http`     | `PerWorker`   | a parser of its own, counts at zero |
//! | `table`    | `Shared` (`workers = "shared"`, the default) or `PerWorker` (`workers = "sharded"`) | shared: the one table, under a lock; sharded: a copy of the entries so far |
//! | `lpm`      | `Shared`      | the one route table (read-only while shared) |
//! | `names`    | `Shared`      | the one name table (read-only while shared) |
//! | `addrset`  | `Shared`      | the one store of sets (read-only while shared) |
//! | `strmatch` | `Shared`      | the one compiled pattern set, with a scratch of its own |
//! | `regex`    | `Shared`      | the one set of compiled expressions, with caches of its own |
//! | `linkstate`| `Shared`      | the one port state (read-only while shared) |
//! | `threshold`| `Shared`      | the one table, under a lock (as Snort 3's threshold table) |
//! | `ess`      | `Shared`      | the one store, under a lock |
//!
//! `Shared` kinds count their operations (lookups, hits, searches) per
//! handle, each handle on its own cache line, and report the sum over every
//! handle, finished ones included, from whichever handle the statistics are
//! read. Their state is behind an `Arc`; `lpm`, `names`, `addrset`, `strmatch`, `regex` and
//! `linkstate` take no lock, so they refuse changes while more than one
//! handle exists: a data-plane insert or delete faults (`copro`), a
//! control-plane `load` returns an error and `clear` does nothing. With one
//! handle (a single worker, or after the run when the forks are gone)
//! everything works as before. A `shared` `table` takes its lock only while
//! forks exist; a single worker's table takes none.
//!
//! `PerWorker` kinds are folded together at the end of a run:
//! [`Coprocessor::absorb`] moves a fork's state into the first handle
//! (counters and statistics add up, events merge in packet order, sharded
//! tables merge entries, flow tables merge flows) and leaves the fork
//! empty, so statistics summed over the workers are the same before and
//! after.

pub mod addrset;
mod ahead;
mod counters;
pub mod ess;
pub mod eventlog;
pub mod flow;
pub mod http;
mod huge;
pub mod linkstate;
pub mod lpm;
pub mod meter;
pub mod names;
pub mod regex;
mod share;
pub mod strmatch;
pub mod table;
pub mod threshold;

pub use counters::Counters;
pub use flow::Flows;
pub use lpm::{Lpm4, Lpm6, LpmCoprocessor};
pub use meter::Meters;
pub use regex::RegexCopro;
pub use strmatch::{PatternSet, StrMatch};
pub use table::{ExactTable, Table, TableFull};

use netvm_vm::{CoproRegistry, Coprocessor};

/// `c` as a `T`, if it is one (through `as_any_mut`): what `absorb` folds in.
fn downcast<T: 'static>(c: &mut dyn Coprocessor) -> Option<&mut T> {
    c.as_any_mut()?.downcast_mut::<T>()
}

/// A registry holding every built-in coprocessor kind.
pub fn registry() -> CoproRegistry {
    let mut r = CoproRegistry::new();
    r.register("addrset", addrset::create);
    r.register("counters", counters::create);
    r.register("ess", ess::create);
    r.register("eventlog", eventlog::create);
    r.register("flow", flow::create);
    r.register("http", http::create);
    r.register("linkstate", linkstate::create);
    r.register("lpm", lpm::create);
    r.register("meter", meter::create);
    r.register("names", names::create);
    r.register("regex", regex::create);
    r.register("strmatch", strmatch::create);
    r.register("table", table::create);
    r.register("threshold", threshold::create);
    r
}
