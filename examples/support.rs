//! What the example applications' tests share (included by each with
//! `#[path = "../support.rs"] mod support;`): the engines every check runs,
//! and running `netvm run` on captures with an output file per port.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use netvm_io::{read_capture, PcapWriter};
use netvm_vm::Packet;

/// The engines every check runs: the interpreter, and the JIT with each
/// computation batching mode (odd sub-batch sizes, so that sub-batches
/// end inside the runtime's batches), as (label, `netvm run` flags).
pub const ENGINES: [(&str, &[&str]); 5] = [
    ("interp", &["--engine", "interp"]),
    ("jit-off", &["--batching", "off"]),
    ("jit-on", &["--batching", "on", "--sub-batch", "3"]),
    ("jit-prefetch", &["--batching", "prefetch", "--sub-batch", "7"]),
    ("jit-auto", &[]),
];

/// Writes `pkts` as a pcap at `path`.
pub fn write_pcap<'a>(path: &Path, pkts: impl IntoIterator<Item = &'a Packet>) {
    let mut w = PcapWriter::create(path).unwrap();
    for p in pkts {
        w.write(p).unwrap();
    }
    w.finish().unwrap();
}

/// Runs `netvm run ARGS FLAGS -w DIR/LABEL-out-{port}.pcap --stats json`
/// with engine `(label, flags)`; returns the frames out of each port of
/// `ports`, and the statistics.
pub fn run_app(
    dir: &Path,
    args: &[String],
    (label, flags): (&str, &[&str]),
    ports: impl IntoIterator<Item = u32>,
) -> (BTreeMap<u32, Vec<Vec<u8>>>, serde_json::Value) {
    let pattern = dir.join(format!("{label}-out-{{port}}.pcap"));
    let mut all: Vec<String> = vec!["run".into()];
    all.extend(args.iter().cloned());
    all.extend(flags.iter().map(|f| f.to_string()));
    all.extend(["-w".into(), pattern.display().to_string(), "--stats".into(), "json".into()]);
    let o = Command::new(env!("CARGO_BIN_EXE_netvm")).args(&all).output().unwrap();
    assert!(o.status.success(), "netvm {all:?}: {}", String::from_utf8_lossy(&o.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut out = BTreeMap::new();
    for p in ports {
        let (got, err) = read_capture(&dir.join(format!("{label}-out-{p}.pcap")), 0);
        assert!(err.is_none(), "{err:?}");
        out.insert(p, got.into_iter().map(|x| x.data).collect());
    }
    (out, stats)
}

/// Runs the example `app` (its app.toml) on `pkts` (one capture on input
/// port 0) with the table file `table` loaded into instance `instance`;
/// returns the frames out of ports 0 to 15 and the statistics.
pub fn run_with_table(
    dir: &Path,
    app: &str,
    instance: &str,
    table: &str,
    pkts: &[Packet],
    engine: (&str, &[&str]),
) -> (BTreeMap<u32, Vec<Vec<u8>>>, serde_json::Value) {
    let input = dir.join("in.pcap");
    write_pcap(&input, pkts);
    let path = dir.join("table.txt");
    std::fs::write(&path, table).unwrap();
    let args = [app.to_string(), "--load".into(), format!("{instance}={}", path.display()), "-r".into(), input.display().to_string()];
    run_app(dir, &args, engine, 0..16)
}

/// Runs an example on its sample (`APP --load LOAD -r SAMPLE`, the
/// default engine) and checks that the sample shows every drop reason of
/// `reasons` (the `drops` counters of the first NetPE).
pub fn sample_shows(app: &str, load: &str, sample: &str, reasons: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let args = [app.to_string(), "--load".into(), load.to_string(), "-r".into(), sample.to_string()];
    let (_, stats) = run_app(dir.path(), &args, ENGINES[4], 0..16);
    let d = &stats["netpes"][0]["copro"]["drops"];
    for why in reasons {
        assert!(d[why].as_u64().unwrap() > 0, "the sample shows `{why}`: {d}");
    }
}

/// Runs the example `app` on `pkts` with the table file `table` loaded into
/// `instance`, on every engine of [`ENGINES`], and checks each against the
/// reference: the frames out of ports 0 to 15 are `want`, the first NetPE's
/// `drops` counters are `drops` (every reason it counts is there, and a
/// counter it lacks is 0), and nothing faults. `more(label, stats)` adds
/// the example's own checks. `what` names the case in failures.
#[allow(clippy::too_many_arguments)]
pub fn check_every_engine(
    dir: &Path,
    app: &str,
    instance: &str,
    table: &str,
    pkts: &[Packet],
    want: &BTreeMap<u32, Vec<Vec<u8>>>,
    drops: &BTreeMap<&str, u64>,
    what: &str,
    mut more: impl FnMut(&str, &serde_json::Value),
) {
    for (engine, flags) in ENGINES {
        let (got, stats) = run_with_table(dir, app, instance, table, pkts, (engine, flags));
        assert_eq!(&got, want, "{what}, {engine}: the frames out of each port");
        let d = stats["netpes"][0]["copro"]["drops"].as_object().unwrap();
        for (why, n) in d {
            assert_eq!(n.as_u64().unwrap(), drops.get(why.as_str()).copied().unwrap_or(0), "{what}, {engine}: drops `{why}`");
        }
        for why in drops.keys() {
            assert!(d.contains_key(*why), "{what}, {engine}: the app counts `{why}`");
        }
        assert!(stats["faults"].as_object().unwrap().values().all(|v| v == 0), "{what}, {engine}: {}", stats["faults"]);
        more(engine, &stats);
    }
}
