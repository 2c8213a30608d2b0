//! Fuzzes application manifests: any bytes as a manifest file, beside a
//! program and a data path manifest it may name, are read (and their data
//! paths composed) or refused with an error; what reads is planned (every
//! program verified, the graph checked) or refused; never a panic, a hang
//! or a composition that mixes data paths (`datapath::check` holds on
//! every manifest that reads).
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use netvm_runtime::{datapath, Application, Manifest};

/// A directory with `a.nil` (a one-port program) and `dp.toml` (a data path of it).
fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("netvm-fuzz-manifest-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("a scratch directory");
        std::fs::write(d.join("a.nil"), ".ports 2\nsegment .push\n    pop\n    ret 0\nends\n").expect("a.nil");
        std::fs::write(d.join("dp.toml"), "[[netpe]]\nname = \"a\"\nprogram = \"a.nil\"\n[[source]]\nto = \"a\"\n[[sink]]\nfrom = \"a.0\"\nport = 0\n")
            .expect("dp.toml");
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let path = dir().join("fuzz.toml");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let Ok(m) = Manifest::load(&path) else { return };
    assert!(datapath::check(&m).is_ok(), "a composed manifest mixes its data paths");
    let _ = Application::plan(&m, &netvm_copro::registry(), Some(1000));
});
