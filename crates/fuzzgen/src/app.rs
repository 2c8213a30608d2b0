//! Generated applications: random DAGs of generated NetPEs, written as a
//! manifest and program files, with fan-out (at sources and at ports),
//! unconnected ports, several sources, input ports without one, and NetPEs
//! whose ports lead to consecutive sinks. Used by
//! the differential tests of linked and AOT-compiled applications.

use std::fmt::Write as _;

use arbitrary::Unstructured;

use netvm_traffic::SplitMix64;

use crate::{copro_manifest_lines, generate_program, GenConfig};

/// A generated application: its manifest text and program files.
pub struct GenApp {
    /// The manifest (TOML), with program files relative to it.
    pub manifest: String,
    /// `(file name, module bytes, listing)` of each NetPE.
    pub programs: Vec<(String, Vec<u8>, String)>,
}

/// Generates an application of 1-6 NetPEs (programs from `cfg`) from
/// `rng`; `None` if a program could not be generated from the bytes drawn.
pub fn generate_app(rng: &mut SplitMix64, cfg: &GenConfig) -> Option<GenApp> {
    let n = 1 + rng.below(6) as usize;
    let mut programs = Vec::new();
    let mut ports = Vec::new();
    let mut copros = Vec::new();
    for i in 0..n {
        let bytes = rng.bytes(2048);
        let g = generate_program(&mut Unstructured::new(&bytes), cfg).ok()?;
        ports.push(g.module.out_ports);
        copros.push(copro_manifest_lines(&g.module));
        programs.push((format!("pe{i}.nvm"), g.module.to_bytes(), g.listing));
    }
    let mut m = String::from("budget = 3000\n");
    for (i, ((file, _, _), copros)) in programs.iter().zip(&copros).enumerate() {
        let _ = write!(m, "[[netpe]]\nname = \"pe{i}\"\nprogram = \"{file}\"\n{copros}");
    }
    let mut pick = |k: u64| rng.below(k);
    // Sources: input port 0 always reaches pe0; ports 1 and 2 sometimes reach others; 3 never.
    let _ = writeln!(m, "[[source]]\nport = 0\nto = \"pe0\"");
    // Sometimes they reach consecutive input ports of one NetPE (a bridge's
    // sources: the linker then indexes them by the input port).
    let consecutive = if pick(4) == 0 { Some((pick(n as u64), pick(2))) } else { None };
    for port in 1..3u64 {
        if let Some((node, first)) = consecutive {
            let _ = writeln!(m, "[[source]]\nport = {port}\nto = \"pe{node}.{}\"", first + port - 1);
            continue;
        }
        let fan = pick(3);
        for _ in 0..fan {
            let node = pick(n as u64);
            let _ = writeln!(m, "[[source]]\nport = {port}\nto = \"pe{node}.{}\"", pick(3));
        }
    }
    if pick(4) == 0 {
        // Fan-out at a source.
        let node = pick(n as u64);
        let _ = writeln!(m, "[[source]]\nport = 0\nto = \"pe{node}\"");
    }
    // Edges go forward only (a DAG); each output port gets 0-3 destinations.
    // Sometimes every port p of a NetPE leaves at sink base + p instead (a
    // router's last stage: the linker then indexes its ports by `ret.pop`'s
    // value rather than switching over them).
    for (i, &np) in ports.iter().enumerate() {
        if np >= 2 && pick(4) == 0 {
            let base = pick(3);
            for p in 0..u64::from(np) {
                let _ = writeln!(m, "[[sink]]\nfrom = \"pe{i}.{p}\"\nport = {}", base + p);
            }
            continue;
        }
        for p in 0..np {
            let dests = match pick(10) {
                0 => 0,
                1..=6 => 1,
                7 | 8 => 2,
                _ => 3,
            };
            for _ in 0..dests {
                let later = n - i - 1;
                if later > 0 && pick(3) != 0 {
                    let node = i + 1 + pick(later as u64) as usize;
                    let _ = writeln!(m, "[[connect]]\nfrom = \"pe{i}.{p}\"\nto = \"pe{node}.{}\"", pick(3));
                } else {
                    let _ = writeln!(m, "[[sink]]\nfrom = \"pe{i}.{p}\"\nport = {}", pick(4));
                }
            }
        }
    }
    Some(GenApp { manifest: m, programs })
}
