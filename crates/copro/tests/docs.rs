//! docs/coprocessors.md is made of the coprocessors' module documentation,
//! so the user reference and the code cannot drift apart. Run with
//! `NETVM_BLESS=1` to rewrite the file after changing a module comment.

use std::path::PathBuf;

/// (kind, source file relative to crates/copro/src).
const KINDS: &[(&str, &str)] = &[
    ("counters", "counters.rs"),
    ("meter", "meter.rs"),
    ("table", "table/mod.rs"),
    ("flow", "flow.rs"),
    ("http", "http.rs"),
    ("threshold", "threshold.rs"),
    ("lpm", "lpm/mod.rs"),
    ("names", "names/mod.rs"),
    ("addrset", "addrset.rs"),
    ("strmatch", "strmatch/mod.rs"),
    ("regex", "regex.rs"),
    ("eventlog", "eventlog.rs"),
    ("linkstate", "linkstate.rs"),
    ("ess", "ess.rs"),
];

const INTRO: &str = "# Coprocessors

Generated from the module documentation of `crates/copro/src/` by
`crates/copro/tests/docs.rs` (`NETVM_BLESS=1 cargo test -p netvm-copro --test docs`
rewrites it). The instruction interface (`copro.in`, `copro.invoke`,
`copro.out`) is in [netil.md §7](netil.md#7-coprocessors).

A NetPE declares an instance with `.copro NAME KIND`; the application
manifest configures it (`copro.NAME = { key = value, ... }` in its
`[[netpe]]`); the control plane fills and reads it:

- `netvm run APP.toml --load NAME=FILE` loads a table file before the first
  packet, `--dump NAME=FILE` writes the state after the run (NAME is the
  instance name, or `NETPE.NAME` when several NetPEs use the same name);
- `--stats json` reports every instance's statistics under
  `netpes[].copro.NAME` (and `copro.\"NETPE.NAME\"`);
- the runtime calls every instance's `tick` with the packet time at least once
  per second of trace time (aging);
- the JIT batches lookups (`netvm run --batching`, see docs/applications.md): it
  computes the keys of a batch's `lpm`, `table` and `names` lookups from the packets
  first, and the instance prefetches the entries they will read
  (`Coprocessor::lookahead`, `Coprocessor::ahead`), so that the lookups
  overlap their memory latency; results never depend on it;
- with several workers (`netvm run --workers N`) each worker has its own
  handle on every instance, made with `Coprocessor::fork` after `.init` and
  the loads: read-mostly tables (`lpm`, `names`, `strmatch`, `regex`, `linkstate`,
  a `shared` `table`) are shared, counting state (`counters`, `meter`,
  `eventlog`, `flow`, a `sharded` `table`) is kept per worker and folded into the
  first worker's at the end of the run (`Coprocessor::absorb`), so that
  statistics and dumps cover every worker (`threshold`, whose counts must
  cover every worker, is one table under a lock); each kind's \"Several workers\"
  paragraph says exactly what its forks share;
- admission control (docs/applications.md) counts each instance at its
  configured capacity (`Coprocessor::memory`: a `table`'s buckets and
  entries, an `lpm`'s first level and every tbl8 group of its budget, a
  `names` table, a `flow` table, compiled regexes) against a data path's
  declared `memory`;
- from Rust: `Application::load_table`, `dump_table`, `clear_table`,
  `copro_stats`, `copro_mut`.

A coprocessor of your own implements the `netvm_vm::Coprocessor` trait and is
registered under a kind name in the `CoproRegistry` the application is built
with: see `crates/runtime/examples/user_copro.rs` (a Bloom filter).

| kind | what it is |
|---|---|
";

fn module_doc(path: &PathBuf) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    for line in text.lines().take_while(|l| l.starts_with("//!")) {
        let l = line.trim_start_matches("//!");
        let l = l.strip_prefix(' ').unwrap_or(l);
        out.push_str(l);
        out.push('\n');
    }
    // Rustdoc links read as code in Markdown.
    let mut s = out.replace("[`", "`").replace("`]", "`");
    while let Some(i) = s.find("`(") {
        // `name`(path) leftovers of [`name`](path) links: keep the name.
        let Some(j) = s[i..].find(')') else { break };
        s.replace_range(i + 1..i + j + 1, "");
    }
    s
}

fn render() -> String {
    let src = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
    let mut md = INTRO.to_string();
    let mut sections = String::new();
    for (kind, file) in KINDS {
        let doc = module_doc(&src.join(file));
        let first = doc.split("\n\n").next().unwrap_or("").replace('\n', " ");
        let summary = first.split_once(": ").map_or(first.as_str(), |(_, s)| s).trim().to_string();
        md += &format!("| [`{kind}`](#{kind}) | {} |\n", summary.replace('|', "\\|"));
        sections += &format!("\n## `{kind}`\n\n_Source: `crates/copro/src/{file}`_\n\n{doc}");
    }
    md + &sections
}

#[test]
fn coprocessors_md_is_the_module_documentation() {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/coprocessors.md"));
    let want = render();
    if std::env::var("NETVM_BLESS").as_deref() == Ok("1") {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(have == want, "docs/coprocessors.md is out of date: run NETVM_BLESS=1 cargo test -p netvm-copro --test docs");
}
