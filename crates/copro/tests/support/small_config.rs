//! Small instances of every built-in coprocessor kind, so that a property
//! run over many inputs stays fast (shared by tests/control_plane.rs and the
//! `copro_load` fuzz target).

use netvm_vm::CoproConfig;

/// A configuration of `kind` with small tables (an empty one for kinds without size settings).
pub fn small_config(kind: &str) -> CoproConfig {
    let pairs: &[(&str, &str)] = match kind {
        "counters" => &[("size", "8")],
        "meter" => &[("size", "4")],
        "table" => &[("key_size", "6"), ("value_size", "4"), ("capacity", "64")],
        "lpm" => &[("tbl8_groups", "64")],
        "eventlog" => &[("capacity", "16")],
        "flow" => &[("capacity", "64"), ("bits", "32")],
        "ess" => &[("capacity", "64")],
        "strmatch" => &[("backend", "aho-corasick")],
        _ => &[],
    };
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}
