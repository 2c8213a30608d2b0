//! Runs every `tests/programs/*.nil` file on every engine.

use std::path::PathBuf;

use netvm_filetests::{engines, TestFile};

#[test]
fn programs() {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/programs"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/programs")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "nil"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "only {} test programs", files.len());
    let mut failures = Vec::new();
    let mut cases = 0;
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        let t = match TestFile::parse(&src) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{}: {e}", f.display()));
                continue;
            }
        };
        if t.runs.is_empty() && t.verify_error.is_none() && t.init_fault.is_none() {
            failures.push(format!("{}: no `; run:`, `; verify:` or `; init:` line", f.display()));
        }
        for engine in engines() {
            match t.run(engine.as_ref()) {
                Ok(n) => cases += n,
                Err(errs) => failures.extend(errs.into_iter().map(|e| format!("{} [{}]: {e}", f.display(), engine.name()))),
            }
        }
    }
    println!("{} files, {cases} run cases", files.len());
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}
