//! Seeds the cargo-fuzz corpora (see fuzz/README.md):
//!
//! ```text
//! cargo run -p netvm-fuzzgen --example fuzz_corpus -- [OUT_DIR] [COUNT]
//! ```
//!
//! writes, under `OUT_DIR` (default `fuzz/corpus`), `COUNT` (default 200)
//! generated modules to `module_loader/`, their listings to `assembler/`,
//! input bytes for the `generated` target to `generated/`, and, when run from
//! the repository root, the listings of `tests/programs` (text and assembled)
//! and the capture files of `examples/traces` to the matching corpora.

use std::fs;
use std::path::Path;

use netvm_fuzzgen::{generate_from_bytes, GenConfig};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let out = args.next().unwrap_or_else(|| "fuzz/corpus".into());
    let count: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(200);
    let out = Path::new(&out);
    for d in ["module_loader", "assembler", "generated", "capture_reader"] {
        fs::create_dir_all(out.join(d))?;
    }
    let mut state = 0x5eed_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 0..count {
        let len = 256 + (next() % 6000) as usize;
        let seed: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let g = generate_from_bytes(&seed, &GenConfig::default());
        fs::write(out.join("module_loader").join(format!("gen-{i}.nvm")), g.module.to_bytes())?;
        fs::write(out.join("assembler").join(format!("gen-{i}.nil")), &g.listing)?;
        fs::write(out.join("generated").join(format!("seed-{i}")), &seed)?;
    }
    let mut extra = 0;
    if let Ok(dir) = fs::read_dir("tests/programs") {
        for entry in dir.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "nil") {
                let text = fs::read_to_string(&path)?;
                let name = path.file_stem().unwrap().to_string_lossy().to_string();
                fs::write(out.join("assembler").join(format!("{name}.nil")), &text)?;
                if let Ok(a) = netil::assemble(&text) {
                    fs::write(out.join("module_loader").join(format!("{name}.nvm")), a.module.to_bytes())?;
                }
                extra += 1;
            }
        }
    }
    if let Ok(dir) = fs::read_dir("examples/traces") {
        for entry in dir.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "pcap" || e == "pcapng") {
                fs::copy(&path, out.join("capture_reader").join(path.file_name().unwrap()))?;
                extra += 1;
            }
        }
    }
    println!("wrote {count} generated programs and {extra} repository files under {}", out.display());
    Ok(())
}
