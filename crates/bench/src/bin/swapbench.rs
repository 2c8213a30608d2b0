//! `swapbench`: replacing a NetPE of a running application (the control
//! plane, NetBind's Figures 10-12 on netvm).
//!
//! ```text
//! swapbench APP.toml NETPE ALT.nil TRACE.pcap [--swaps N] [--workers W] [--repeat R] [--load NAME=FILE]
//! ```
//!
//! Streams TRACE.pcap (a classic pcap), over and over, through APP (JIT,
//! direct linking) on a fresh driver each time: once `--repeat` times
//! untouched (the baseline), once for as long as another thread takes to
//! replace NETPE `--swaps` times, alternating between ALT and its own
//! program (so that every swap compiles the program it puts in). The
//! packets are read and parsed as `netvm run -r` does. Prints one JSON
//! object: the install latency (request to the first
//! batch on the new version: median, p99, max), the quick version's build
//! time, the time to compile the whole data path that replaces it, and the
//! throughput of both runs (packets over wall time).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use netvm_runtime::{Application, Change, Driver, DriverConfig, Engine, JitEngine, Manifest, ProgramRef, Rebuild};

fn die(msg: String) -> ! {
    netvm_bench::args::die("swapbench", &msg)
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    netvm_bench::args::flag("swapbench", args, name, default)
}

/// A classic pcap's records again and again: `loops` times, or until `stop`.
struct Looping {
    pcap: Arc<Vec<u8>>,
    at: usize,
    loops: u64,
    stop: Arc<AtomicBool>,
}

impl std::io::Read for Looping {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.pcap.len() {
            self.loops = self.loops.saturating_sub(1);
            if self.loops == 0 || self.stop.load(Ordering::Acquire) {
                return Ok(0);
            }
            self.at = 24; // past the file header
        }
        let n = out.len().min(self.pcap.len() - self.at);
        out[..n].copy_from_slice(&self.pcap[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

fn driver(manifest: &Manifest, engine: &Arc<dyn Engine>, loads: &[(String, String)], input: Looping, cfg: &DriverConfig) -> Driver {
    let registry = netvm_copro::registry();
    let mut app = Application::build(manifest, engine.as_ref(), &registry, None).unwrap_or_else(|e| die(e.to_string()));
    app.load_tables(loads).unwrap_or_else(|e| die(e));
    let mut d = Driver::new(app, cfg.clone());
    let src = netvm_io::CaptureSource::from_reader(input, "trace", 0, d.block_pool()).unwrap_or_else(|e| die(e.to_string()));
    d.add_source(Box::new(src));
    // Versions compile on the control thread alone (as `netvm run --control`).
    let mut control_engine = JitEngine::default();
    control_engine.opts.threads = 1;
    d.allow_changes(Rebuild { manifest: manifest.clone(), engine: Arc::new(control_engine), registry, budget: None, calibration: None });
    d
}

fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((s.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [app, netpe, alt, trace, ..] = args.as_slice() else {
        die("usage: swapbench APP.toml NETPE ALT.nil TRACE.pcap [--swaps N] [--workers W] [--repeat R] [--load NAME=FILE]".into())
    };
    let swaps: usize = arg(&args, "--swaps", 1000);
    let workers: usize = arg(&args, "--workers", 1);
    let repeat: u64 = arg(&args, "--repeat", 20);
    let loads: Vec<(String, String)> = args
        .windows(2)
        .filter(|w| w[0] == "--load")
        .map(|w| {
            let (n, f) = w[1].split_once('=').unwrap_or_else(|| die(format!("--load {}: NAME=FILE", w[1])));
            (n.to_string(), std::fs::read_to_string(f).unwrap_or_else(|e| die(format!("{f}: {e}"))))
        })
        .collect();
    let manifest = Manifest::load(Path::new(app)).unwrap_or_else(|e| die(e.to_string()));
    let own = manifest
        .netpes
        .iter()
        .find(|n| &n.name == netpe)
        .map(|n| manifest.base_dir.join(&n.program))
        .unwrap_or_else(|| die(format!("no NetPE `{netpe}` in {app}")));
    let programs = [PathBuf::from(alt), own];
    let engine: Arc<dyn Engine> = Arc::new(JitEngine::default());
    let cfg = DriverConfig { workers, ..DriverConfig::default() };
    let pcap = Arc::new(std::fs::read(trace).unwrap_or_else(|e| die(format!("{trace}: {e}"))));
    if pcap.len() < 24 || !matches!(&pcap[..4], [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1]) {
        die(format!("{trace}: not a little-endian classic pcap"));
    }
    let done = Arc::new(AtomicBool::new(false));
    let input = |loops: u64| Looping { pcap: Arc::clone(&pcap), at: 0, loops, stop: Arc::clone(&done) };

    // The baseline.
    let mut d = driver(&manifest, &engine, &loads, input(repeat), &cfg);
    let t = Instant::now();
    let r = d.run().unwrap_or_else(|e| die(e.to_string()));
    let base_mpps = r.packets as f64 / t.elapsed().as_secs_f64() / 1e6;

    // The storm: the input goes on until the swaps are done.
    let mut d = driver(&manifest, &engine, &loads, input(u64::MAX), &cfg);
    let control = d.control();
    let storm = {
        let done = Arc::clone(&done);
        let netpe = netpe.clone();
        std::thread::spawn(move || {
            let (mut install, mut build, mut compile) = (Vec::new(), Vec::new(), Vec::new());
            for k in 0..swaps {
                let change = Change::Replace { name: netpe.clone(), program: ProgramRef::File(programs[k % 2].clone()) };
                let i = control.apply(change).unwrap_or_else(|e| die(e.to_string()));
                build.push(i.build.as_secs_f64() * 1e6);
                if let Some(Ok(c)) = &i.compiled {
                    compile.push(c.as_secs_f64() * 1e6);
                }
                if let Some(l) = control.wait_running(i.first, Duration::from_secs(1)) {
                    install.push(l.as_secs_f64() * 1e6);
                }
            }
            done.store(true, Ordering::Release);
            (install, build, compile)
        })
    };
    let t = Instant::now();
    let r = d.run().unwrap_or_else(|e| die(e.to_string()));
    let wall = t.elapsed().as_secs_f64();
    let (install, build, compile) = storm.join().unwrap_or_else(|_| die("the storm thread panicked".into()));
    let stats = d.app().stats();
    let lost = r.packets.saturating_sub(stats.packets) + stats.packets.saturating_sub(r.packets);
    println!(
        "{}",
        serde_json::json!({
            "bench": "swap",
            "app": app,
            "netpe": netpe,
            "netpes": manifest.netpes.len(),
            "workers": workers,
            "swaps": build.len(),
            "swaps_seen_running": install.len(),
            "install_us_median": pct(&install, 0.5),
            "install_us_p99": pct(&install, 0.99),
            "install_us_max": pct(&install, 1.0),
            "build_us_median": pct(&build, 0.5),
            "build_us_p99": pct(&build, 0.99),
            "compile_us_median": pct(&compile, 0.5),
            "compile_us_p99": pct(&compile, 0.99),
            "packets": r.packets,
            "packets_counted": stats.packets,
            "packets_lost": lost,
            "mpps_baseline": base_mpps,
            "mpps_storm": r.packets as f64 / wall / 1e6,
            "storm_s": wall,
        })
    );
}
