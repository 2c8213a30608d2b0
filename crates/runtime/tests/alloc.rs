//! No allocation per packet: a counting global allocator over 100,000-packet
//! runs of the driver (a capture file in, pcap files out), counting every
//! allocation of every thread between the 20,000th packet written and the
//! last one. The packet memory, batches, verdicts, fan-out copies, queues
//! and output buffers are all recycled once the run is warm: the count is
//! zero in a quiet run. The bound allows a handful (fewer than one per
//! 10,000 packets, far fewer than one per batch), since the counter also
//! sees every other thread of the test process (the test harness's).

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use netvm_io::{CaptureSource, PcapSink};
use netvm_runtime::{Application, Distribution, Driver, DriverConfig, Engine, InterpEngine, JitEngine, Manifest};
use netvm_vm::port::{OutPacket, PortError, Sink};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
/// Tests in this file measure one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const PACKETS: usize = 100_000;
const WARM: u64 = 20_000;

/// A pcap sink that also notes the allocation count when the first packet
/// at or after [`WARM`] leaves, and at every packet after.
struct Probe {
    inner: PcapSink,
    marks: &'static Mutex<(Option<u64>, u64, u64)>,
}

impl Sink for Probe {
    fn name(&self) -> &str {
        "probe"
    }

    fn write(&mut self, p: &OutPacket<'_>) -> Result<(), PortError> {
        self.inner.write(p)?;
        if p.seq >= WARM {
            let now = ALLOCS.load(Ordering::SeqCst);
            let mut m = self.marks.lock().unwrap_or_else(|e| e.into_inner());
            if m.0.is_none() {
                m.0 = Some(now);
            }
            m.1 = now;
            m.2 = p.seq;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), PortError> {
        self.inner.flush()
    }

    fn finish(&mut self) -> Result<(), PortError> {
        self.inner.finish()
    }
}

fn trace(dir: &Path) -> std::path::PathBuf {
    let mut rng = netvm_traffic::SplitMix64::new(0x0061_6c6c_6f63);
    let packets = netvm_traffic::frames::generate_trace(&mut rng, PACKETS);
    let path = dir.join("trace.pcap");
    netvm_traffic::write_pcap(std::io::BufWriter::new(std::fs::File::create(&path).unwrap()), &packets).unwrap();
    path
}

/// Allocations between the warm-up mark and the last packet written, and
/// how many packets that span covers.
fn steady_allocations(app_toml: &Path, engine: &dyn Engine, cfg: DriverConfig, port: u16) -> (u64, u64) {
    static MARKS: Mutex<(Option<u64>, u64, u64)> = Mutex::new((None, 0, 0));
    let dir = tempfile::tempdir().unwrap();
    let input = trace(dir.path());
    let manifest = Manifest::load(app_toml).unwrap();
    let app = Application::build(&manifest, engine, &netvm_copro::registry(), None).unwrap();
    let mut driver = Driver::new(app, cfg);
    let src = CaptureSource::open(&input, 0, driver.block_pool()).unwrap();
    let spec = src.header();
    driver.add_source(Box::new(src));
    let sink_ports = driver.app().graph().sink_ports as u16;
    for p in 0..sink_ports {
        let inner = PcapSink::create(&dir.path().join(format!("out-{p}.pcap")), spec).unwrap();
        if p == port {
            driver.add_sink(p, Box::new(Probe { inner, marks: &MARKS }));
        } else {
            driver.add_sink(p, Box::new(inner));
        }
    }
    *MARKS.lock().unwrap() = (None, 0, 0);
    let report = driver.run().unwrap();
    assert!(report.input_errors.is_empty(), "{:?}", report.input_errors);
    assert_eq!(report.input_packets, PACKETS as u64);
    let (start, end, last) = *MARKS.lock().unwrap();
    let start = start.expect("packets left on the probed port after the warm-up");
    (end - start, last - WARM)
}

fn root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn one_worker_allocates_nothing_per_packet() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The classifier: four NetPEs, a fan-out (copies from the packet pool), counters.
    let app = root().join("examples/classifier/app.toml");
    for (name, engine) in [("jit", &JitEngine::default() as &dyn Engine), ("interp", &InterpEngine)] {
        let (allocs, span) = steady_allocations(&app, engine, DriverConfig::default(), 5);
        println!("{name}: {allocs} allocations over {span} packets");
        assert!(span > 50_000, "{name}: only {span} packets observed");
        assert!(allocs < span / 10_000, "{name}: {allocs} allocations over {span} packets in steady state");
    }
}

#[test]
fn several_workers_allocate_nothing_per_packet() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let app = root().join("examples/classifier/app.toml");
    for d in [Distribution::RoundRobin, Distribution::Flow] {
        let cfg = DriverConfig { workers: 2, distribution: Some(d), ..DriverConfig::default() };
        let (allocs, span) = steady_allocations(&app, &JitEngine::default(), cfg, 5);
        println!("{}: {allocs} allocations over {span} packets", d.name());
        assert!(span > 50_000, "{}: only {span} packets observed", d.name());
        assert!(allocs < span / 10_000, "{}: {allocs} allocations over {span} packets in steady state", d.name());
    }
}
