//! Built-in netvm coprocessors (NetVM paper §3.1.3), each behind the
//! [`netvm_vm::Coprocessor`] interface so that every engine reaches them the
//! same way. [`registry`] returns the registry with every built-in kind.
//!
//! | kind       | what it does |
//! |------------|--------------|
//! | `counters` | an array of 64-bit packet/byte counters the control plane can read |

mod counters;

pub use counters::Counters;

use netvm_vm::CoproRegistry;

/// A registry holding every built-in coprocessor kind.
pub fn registry() -> CoproRegistry {
    let mut r = CoproRegistry::new();
    r.register("counters", counters::create);
    r
}
