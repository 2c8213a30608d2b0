//! Built-in netvm coprocessors (NetVM paper §3.1.3), each behind the
//! [`netvm_vm::Coprocessor`] interface so that every engine reaches them the
//! same way. [`registry`] returns the registry with every built-in kind.
//!
//! | kind       | what it does |
//! |------------|--------------|
//! | `counters` | an array of 64-bit packet/byte counters the control plane can read |
//! | `eventlog` | records (packet, rule)-style events for the host application to collect (IDS alerts) |
//! | `linkstate`| which application ports are up (set by the runtime from the attached inputs) |
//! | `meter`    | token-bucket meters (RFC 2697 srTCM, RFC 2698 trTCM) on packet time |

mod counters;
pub mod eventlog;
pub mod linkstate;
pub mod meter;

pub use counters::Counters;
pub use meter::Meters;

use netvm_vm::CoproRegistry;

/// A registry holding every built-in coprocessor kind.
pub fn registry() -> CoproRegistry {
    let mut r = CoproRegistry::new();
    r.register("counters", counters::create);
    r.register("eventlog", eventlog::create);
    r.register("linkstate", linkstate::create);
    r.register("meter", meter::create);
    r
}
