//! What `netvm run`, `netvm filter` and `netvm ids` share: engine and
//! worker options, opening ports over the driver's memory, and standard
//! output that a closed pipe ends quietly.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use netvm_io::{CaptureSource, PcapHeaderSpec, PcapSink};
use netvm_jit::link::{BatchMode, Batching};
use netvm_runtime::{
    BaselineEngine, Distribution, Driver, DriverConfig, Engine, InterpEngine, JitEngine, LinkMode, RunReport, TieredEngine,
};
use netvm_vm::port::{OutPacket, PortError, Sink};

use crate::EXIT_ERROR;

/// `--engine`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// Native code compiled with Cranelift.
    Jit,
    /// The reference interpreter.
    Interp,
    /// The one-pass baseline compiler (x86-64, AArch64): native code in microseconds,
    /// each NetPE on its own, the graph walked by the runtime.
    Baseline,
    /// Starts on the baseline compiler's code and moves to the JIT's
    /// (`--link`, `--batching`) once it is compiled, in the background,
    /// which starts once the run has spent about what compiling takes
    /// (a short run never compiles).
    Tiered,
}

/// `--link`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LinkArg {
    /// The whole application is one native function; a port crossing is a jump.
    Direct,
    /// One native function per NetPE; a port crossing is a tail call through a vector table.
    Table,
    /// The runtime walks the graph and calls each NetPE's code per exchange buffer.
    Dispatch,
}

impl LinkArg {
    /// The JIT's link mode (`None`: the runtime dispatches).
    pub fn mode(self) -> Option<LinkMode> {
        match self {
            LinkArg::Direct => Some(LinkMode::Direct),
            LinkArg::Table => Some(LinkMode::Table),
            LinkArg::Dispatch => None,
        }
    }
}

/// The engine an `--engine` (and `--link`) choice names.
pub fn engine(e: EngineArg, link: LinkArg) -> std::sync::Arc<dyn Engine> {
    engine_batching(e, link, Batching::default())
}

/// The engine an `--engine`, `--link` and `--batching` choice names.
pub fn engine_batching(e: EngineArg, link: LinkArg, batching: Batching) -> std::sync::Arc<dyn Engine> {
    match e {
        EngineArg::Interp => std::sync::Arc::new(InterpEngine),
        EngineArg::Baseline => std::sync::Arc::new(BaselineEngine),
        EngineArg::Tiered => std::sync::Arc::new(tiered(link, batching)),
        EngineArg::Jit => std::sync::Arc::new(JitEngine { batching, ..JitEngine::with_link(link.mode()) }),
    }
}

/// `--engine tiered`: the baseline compiler first, then the JIT with this
/// `--link` and `--batching`, compiling on one thread (the background
/// compilation takes no more than one core from the workers).
fn tiered(link: LinkArg, batching: Batching) -> TieredEngine {
    let mut full = JitEngine { batching, ..JitEngine::with_link(link.mode()) };
    full.opts.threads = 1;
    TieredEngine::new(std::sync::Arc::new(full))
}

/// The engine that builds the control plane's new versions of a running
/// application (`--control`): `engine_batching`'s, compiling on the calling
/// thread only, so that a build never takes more than one core from the
/// workers.
pub fn control_engine(e: EngineArg, link: LinkArg, batching: Batching) -> std::sync::Arc<dyn Engine> {
    match e {
        EngineArg::Interp => std::sync::Arc::new(InterpEngine),
        EngineArg::Baseline => std::sync::Arc::new(BaselineEngine),
        EngineArg::Tiered => std::sync::Arc::new(tiered(link, batching)),
        EngineArg::Jit => {
            let mut j = JitEngine { batching, ..JitEngine::with_link(link.mode()) };
            j.opts.threads = 1;
            std::sync::Arc::new(j)
        }
    }
}

/// `--batching`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BatchingArg {
    /// Packet after packet through the whole data path.
    Off,
    /// Stage by stage over sub-batches, without prefetching.
    On,
    /// Stage by stage, prefetching between the stages.
    Prefetch,
}

impl BatchingArg {
    /// The JIT's setting, with `--sub-batch` (`None`: chosen at run time).
    pub fn batching(self, sub_batch: SubBatchArg) -> Batching {
        let mode = match self {
            BatchingArg::Off => BatchMode::Off,
            BatchingArg::On => BatchMode::On,
            BatchingArg::Prefetch => BatchMode::Prefetch,
        };
        Batching { mode, sub_batch: sub_batch.0 }
    }
}

/// `--sub-batch`: a size, or `None` for `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubBatchArg(pub Option<usize>);

/// `--sub-batch`: `auto` or 1 to 256.
pub fn parse_sub_batch(s: &str) -> Result<SubBatchArg, String> {
    if s == "auto" {
        return Ok(SubBatchArg(None));
    }
    match s.parse::<usize>() {
        Ok(n) if (1..=netvm_jit::link::ahead::MAX_PACKETS).contains(&n) => Ok(SubBatchArg(Some(n))),
        _ => Err(format!("`{s}` is not `auto` or a sub-batch size from 1 to {}", netvm_jit::link::ahead::MAX_PACKETS)),
    }
}

/// `--distribution`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DistributionArg {
    /// A symmetric flow hash: both directions of a connection on one worker.
    Flow,
    /// Whole batches to whichever worker is free.
    RoundRobin,
}

/// Options of the packet engine, shared by the three subcommands.
#[derive(Args, Debug, Clone)]
pub struct EngineOpts {
    /// Threads that run the application: a number, or `auto` (the default:
    /// one per CPU but one, for applications whose results do not depend
    /// on how packets are spread; else 1). Packets leave in arrival order
    /// whatever the number.
    #[arg(long, value_name = "N|auto", default_value = "auto", value_parser = parse_workers)]
    pub workers: Workers,
    /// How packets are spread over workers (default: the application's
    /// manifest; else round robin when it keeps no state, else flow).
    #[arg(long, value_enum)]
    pub distribution: Option<DistributionArg>,
    /// Packets per batch (1 to 8192).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=8192))]
    pub batch: u32,
    /// Write each packet as it is processed (flush outputs after every batch), as tcpdump's -U.
    #[arg(short = 'U', long = "packet-buffered")]
    pub packet_buffered: bool,
}

/// `--workers`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workers {
    /// Chosen from the machine and the application.
    Auto,
    /// Exactly this many (at least 1).
    N(usize),
}

fn parse_workers(s: &str) -> Result<Workers, String> {
    if s == "auto" {
        return Ok(Workers::Auto);
    }
    match s.parse::<usize>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(Workers::N(n)),
        _ => Err(format!("`{s}` is not `auto` or a number of workers from 1 to 1024")),
    }
}

impl EngineOpts {
    /// The driver configuration these options give, for an application that
    /// keeps state (`stateful`) or not; `auto_parallel`: whether `auto` may
    /// choose several workers for a stateless application.
    pub fn config(&self, stateful: bool, auto_parallel: bool) -> DriverConfig {
        let workers = match self.workers {
            Workers::N(n) => n,
            Workers::Auto if auto_parallel && !stateful => {
                let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
                cpus.saturating_sub(1).clamp(1, 16)
            }
            Workers::Auto => 1,
        };
        DriverConfig {
            workers,
            batch: self.batch as usize,
            distribution: self.distribution.map(|d| match d {
                DistributionArg::Flow => Distribution::Flow,
                DistributionArg::RoundRobin => Distribution::RoundRobin,
            }),
            packet_buffered: self.packet_buffered,
            ..DriverConfig::default()
        }
    }
}

/// Opens `path` (`-`: standard input) as a source on `in_port` over the
/// driver's memory; prints the error and returns the exit code on failure.
pub fn open_source(driver: &mut Driver, path: &Path, in_port: u16) -> Result<PcapHeaderSpec, u8> {
    match CaptureSource::open(path, in_port, driver.block_pool()) {
        Ok(s) => {
            let spec = s.header();
            driver.add_source(Box::new(s));
            Ok(spec)
        }
        Err(e) => {
            eprintln!("netvm: {e}");
            Err(EXIT_ERROR)
        }
    }
}

/// Creates a pcap output (`-`: standard output) with the inputs' format.
pub fn create_sink(path: &Path, spec: PcapHeaderSpec) -> Result<PcapSink, u8> {
    PcapSink::create(path, spec).map_err(|e| {
        eprintln!("netvm: {e}");
        EXIT_ERROR
    })
}

/// The output format of several inputs: the first's link type, the largest
/// snapshot length, nanoseconds if any input has them.
pub fn merge_specs(specs: &[PcapHeaderSpec]) -> PcapHeaderSpec {
    let mut out = specs[0];
    for s in &specs[1..] {
        out.snaplen = out.snaplen.max(s.snaplen);
        if s.precision == netvm_io::TsPrecision::Nano {
            out.precision = s.precision;
        }
    }
    out
}

/// Reports what went wrong in a run on stderr; returns the exit code
/// (0: all well, or output closed by its reader; 1: an input or output error).
pub fn finish_report(r: &RunReport) -> u8 {
    let mut code = 0;
    for e in &r.input_errors {
        eprintln!("netvm: {e} (the packets before it were processed)");
        code = EXIT_ERROR;
    }
    if let Some(e) = &r.output_error {
        eprintln!("netvm: writing output: {e}");
        code = EXIT_ERROR;
    }
    if r.pool_overflow > 0 {
        eprintln!("netvm: note: {} fan-out copies did not fit the packet pool and were allocated", r.pool_overflow);
    }
    code
}

/// Writes `text` to standard output. A reader that went away (`| head`)
/// is not an error: `Ok(false)` says to stop quietly.
pub fn stdout_write(text: &str) -> Result<bool, u8> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => {
            eprintln!("netvm: standard output: {e}");
            Err(EXIT_ERROR)
        }
    }
}

/// A sink printing one line per packet to standard output (`netvm filter`
/// without `-w`): time, captured and wire length.
pub struct ListingSink {
    out: std::io::BufWriter<std::io::Stdout>,
}

impl ListingSink {
    /// A listing on standard output.
    pub fn new() -> ListingSink {
        ListingSink { out: std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout()) }
    }

    fn err(e: std::io::Error) -> PortError {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            PortError::Closed("standard output".into())
        } else {
            PortError::Failed(format!("standard output: {e}"))
        }
    }
}

impl Sink for ListingSink {
    fn name(&self) -> &str {
        "-"
    }

    fn write(&mut self, p: &OutPacket<'_>) -> Result<(), PortError> {
        writeln!(self.out, "{}.{:09} caplen {} len {}", p.ts.sec, p.ts.nsec, p.data.len(), p.wire_len).map_err(ListingSink::err)
    }

    fn flush(&mut self) -> Result<(), PortError> {
        self.out.flush().map_err(ListingSink::err)
    }
}

/// Splits `[PORT=]PATH`.
pub fn parse_input(s: &str) -> Result<(u16, PathBuf), String> {
    if let Some((port, path)) = s.split_once('=') {
        if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
            let p = port.parse::<u16>().map_err(|_| format!("input port `{port}` is out of range"))?;
            return Ok((p, PathBuf::from(path)));
        }
    }
    Ok((0, PathBuf::from(s)))
}
