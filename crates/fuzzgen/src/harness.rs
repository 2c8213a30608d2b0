//! Running a program on packets with any engine and recording everything the
//! program can observably do, so that runs can be compared: the same engine
//! twice (determinism) or two engines (differential testing against the
//! reference interpreter).

use netil::Module;
use netvm_vm::{ExchangeBuffer, Limits, Outcome, Packet, PeCode};

use crate::new_state;

/// What one `.push` invocation did, as far as a program's effects can be seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// How the handler ended.
    pub outcome: Outcome,
    /// The packet bytes afterwards (stores may have changed them).
    pub packet: Vec<u8>,
    /// The info memory afterwards.
    pub info: Vec<u8>,
    /// The NetPE's data memory afterwards (it persists across packets).
    pub data: Vec<u8>,
    /// Each coprocessor's state dump afterwards, and its statistics.
    pub copros: Vec<String>,
}

/// Runs `code` (prepared from `module` by some engine) the way the runtime
/// does for one NetPE: a fresh state ([`new_state`]), `.init` once, then
/// `.push` on every packet in order, each in a fresh exchange buffer with
/// zeroed info memory, arriving on NetPE input port `packet.in_port`.
///
/// Returns the outcome of `.init` ([`Outcome::Exit`] when there is none) and
/// one observation per packet; when `.init` does not exit, no packet is run
/// (the application would not start).
pub fn observe(code: &dyn PeCode, module: &Module, packets: &[Packet], limits: &Limits) -> (Outcome, Vec<Observation>) {
    let mut state = new_state(module);
    let init = code.init(&mut state, limits);
    if init != Outcome::Exit {
        return (init, Vec::new());
    }
    let obs = packets
        .iter()
        .map(|p| {
            let mut xb = ExchangeBuffer::new(p.clone(), module.info_size as usize);
            let outcome = code.push(&mut state, &mut xb.view(), p.in_port, limits);
            Observation {
                outcome,
                packet: xb.packet.data,
                info: xb.info,
                data: state.data.clone(),
                copros: state.copros.iter().map(|c| format!("{}{:?}", c.dump(), c.stats())).collect(),
            }
        })
        .collect();
    (init, obs)
}

/// The first difference between a reference engine's observations and
/// another's (`name` names the other engine in the message), or `None`.
pub fn first_difference(reference: &[Observation], other: &[Observation], packets: &[Packet], name: &str) -> Option<String> {
    if reference.len() != other.len() {
        return Some(format!("{} observations from the interpreter, {} from {name}", reference.len(), other.len()));
    }
    let (k, (a, b)) = reference.iter().zip(other).enumerate().find(|(_, (a, b))| a != b)?;
    let field = if a.outcome != b.outcome {
        format!("outcome: interpreter {}, {name} {}", a.outcome, b.outcome)
    } else if a.packet != b.packet {
        "packet bytes differ".to_string()
    } else if a.info != b.info {
        "info memory differs".to_string()
    } else if a.data != b.data {
        "data memory differs".to_string()
    } else {
        format!("coprocessor state: {:?} vs {:?}", a.copros, b.copros)
    };
    let hex: String = packets[k].data.iter().map(|x| format!("{x:02x}")).collect();
    Some(format!("packet {k} ({} bytes, wire {}): {field}\npacket: {hex}", packets[k].data.len(), packets[k].wire_len))
}

/// Real material for differential tests, from the repository at `root`:
/// the NetIL listings of the examples, the conformance suite and the
/// benchmark filters that verify (a listing that does not assemble
/// panics), and packets from the example trace and
/// the first 20 of each tcpdump test capture (`../shared/corpus`, where
/// present), plus truncated copies of 500 of them (captured length below
/// the wire length).
pub fn real_programs_and_packets(root: &std::path::Path) -> (Vec<(std::path::PathBuf, Module)>, Vec<Packet>) {
    let mut packets: Vec<Packet> = netvm_io::read_capture(&root.join("examples/traces/mixed.pcap"), 0).0;
    if let Ok(rd) = std::fs::read_dir(root.join("../shared/corpus/tcpdump-tests")) {
        let mut files: Vec<_> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for f in files {
            packets.extend(netvm_io::read_capture(&f, 0).0.into_iter().take(20));
        }
    }
    let truncated: Vec<Packet> =
        packets.iter().take(500).map(|p| Packet { data: p.data[..p.data.len() / 2].to_vec(), ..p.clone() }).collect();
    packets.extend(truncated);
    let mut paths: Vec<std::path::PathBuf> = ["examples/fig2-filter", "examples/classifier", "tests/programs", "benches/filters"]
        .iter()
        .filter_map(|d| std::fs::read_dir(root.join(d)).ok())
        .flat_map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())))
        .filter(|p| p.extension().is_some_and(|x| x == "nil"))
        .collect();
    paths.sort();
    let programs = paths
        .into_iter()
        .filter_map(|p| {
            let src = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let m = netil::assemble(&src).unwrap_or_else(|e| panic!("{}: {e}", p.display())).module;
            // tests/programs also holds listings the verifier must reject.
            netvm_verify::verify(&m).is_ok().then_some((p, m))
        })
        .collect();
    (programs, packets)
}

/// Runs `compare` on `programs` generated programs, each with 50 generated
/// packets, all drawn from `seed`: the number of cases `compare` reported,
/// or the first three failures (each with its program's listing).
pub fn compare_generated(
    programs: u64,
    seed: u64,
    mut compare: impl FnMut(&Module, &[Packet]) -> Result<usize, String>,
) -> Result<usize, String> {
    let per_program = 50;
    let mut rng = netvm_traffic::SplitMix64(seed);
    let cfg = crate::GenConfig::default();
    let mut cases = 0usize;
    let mut failures = Vec::new();
    for p in 0..programs {
        let prog_bytes = rng.bytes(4096);
        let pkt_bytes = rng.bytes(per_program * 160);
        let Ok(g) = crate::generate_program(&mut arbitrary::Unstructured::new(&prog_bytes), &cfg) else { continue };
        let Ok(packets) = crate::generate_packets(&mut arbitrary::Unstructured::new(&pkt_bytes), per_program) else { continue };
        match compare(&g.module, &packets) {
            Ok(n) => cases += n,
            Err(e) => {
                failures.push(format!("program {p} (seed {seed:#x}):\n{e}\n{}", g.listing));
                if failures.len() >= 3 {
                    break;
                }
            }
        }
    }
    if failures.is_empty() {
        Ok(cases)
    } else {
        Err(failures.join("\n\n"))
    }
}

/// Runs `compare` on every program of [`real_programs_and_packets`] with
/// all of its packets: the number of cases compared (a failure panics,
/// naming the program).
pub fn compare_real(root: &std::path::Path, mut compare: impl FnMut(&Module, &[Packet]) -> Result<usize, String>) -> usize {
    let (programs, packets) = real_programs_and_packets(root);
    let mut cases = 0;
    for (path, module) in &programs {
        match compare(module, &packets) {
            Ok(n) => cases += n,
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
    println!("{} programs × {} packets = {cases} cases", programs.len(), packets.len());
    cases
}
