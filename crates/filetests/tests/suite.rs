//! The conformance suite: one test per file of tests/programs (NetIL) and
//! tests/apps (applications), each run on every engine it names (see the
//! crate documentation). `cargo test -p netvm-filetests -- NAME` selects
//! files; `NETVM_TEST_BLESS=1` rewrites `clif:` expectations.

use std::path::{Path, PathBuf};

use libtest_mimic::{Arguments, Failed, Trial};

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

fn trial(path: PathBuf, root: &Path) -> Trial {
    let name = path.strip_prefix(root).unwrap_or(&path).display().to_string();
    Trial::test(name, move || match netvm_filetests::check_file(&path) {
        Ok(report) => {
            for (engine, why) in &report.skipped {
                eprintln!("{}: {engine} skipped: {why}", path.display());
            }
            Ok(())
        }
        Err(fails) => Err(Failed::from(format!("{}: {} failures:\n{}", path.display(), fails.len(), fails.join("\n")))),
    })
}

fn main() {
    let args = Arguments::from_args();
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests"));
    let programs = files(&root.join("programs"), "nil");
    let apps = files(&root.join("apps"), "toml");
    assert!(programs.len() >= 20 && !apps.is_empty(), "{} programs, {} applications", programs.len(), apps.len());
    let trials = programs.into_iter().chain(apps).map(|p| trial(p, &root)).collect();
    libtest_mimic::run(&args, trials).exit();
}
