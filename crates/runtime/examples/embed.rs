//! Embedding netvm: the packet engine from a program, without the CLI.
//!
//! What `netvm run APP.toml -r IN.pcap -w OUT.pcap --workers N` does, in
//! five steps:
//!
//! 1. describe the application ([`Manifest`]: a TOML file, or built in code);
//! 2. build it with an engine ([`Application::build`]: verification,
//!    compilation, `.init`), and fill its tables through the control plane;
//! 3. make a [`Driver`] for it: the packet memory, the workers, the batch size;
//! 4. attach ports: sources that read packets into the driver's memory
//!    (here a capture file, [`netvm_io::CaptureSource`]) and sinks per
//!    application output port (a pcap file, or your own [`Sink`]);
//! 5. [`Driver::run`], then read the report and the statistics.
//!
//! Run it: `cargo run --release -p netvm-runtime --example embed -- [IN.pcap [WORKERS]]`
//! (default: the bundled trace, 2 workers). It runs the classifier example
//! and counts, with a sink of its own, the bytes that leave on each port.

use std::path::Path;

use netvm_io::CaptureSource;
use netvm_runtime::{Application, Driver, DriverConfig, JitEngine, Manifest};
use netvm_vm::port::{OutPacket, PortError, Sink};

/// A sink of our own: counts packets and bytes.
#[derive(Default)]
struct Counter {
    packets: u64,
    bytes: u64,
}

impl Sink for Counter {
    fn name(&self) -> &str {
        "counter"
    }

    fn write(&mut self, p: &OutPacket<'_>) -> Result<(), PortError> {
        self.packets += 1;
        self.bytes += p.data.len() as u64;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), PortError> {
        Ok(())
    }

    fn finish(&mut self) -> Result<(), PortError> {
        println!("counter: {} packets, {} bytes", self.packets, self.bytes);
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut args = std::env::args().skip(1);
    let trace = args.next().map_or_else(|| root.join("examples/traces/mixed.pcap"), Into::into);
    let workers: usize = args.next().map_or(Ok(2), |w| w.parse())?;

    // 1-2. The application, compiled by the JIT (whole, directly linked).
    let manifest = Manifest::load(&root.join("examples/classifier/app.toml"))?;
    let app = Application::build(&manifest, &JitEngine::default(), &netvm_copro::registry(), None)?;

    // 3. The packet engine.
    let mut driver = Driver::new(app, DriverConfig { workers, ..DriverConfig::default() });

    // 4. Ports: the capture on input port 0; our counter on every output port.
    let source = CaptureSource::open(&trace, 0, driver.block_pool())?;
    driver.add_source(Box::new(source));
    let sink_ports = driver.app().graph().sink_ports as u16;
    for port in 0..sink_ports {
        driver.add_sink(port, Box::new(Counter::default()));
    }

    // 5. Run.
    let report = driver.run()?;
    for e in &report.input_errors {
        eprintln!("input error: {e}");
    }
    let stats = driver.app().stats();
    println!(
        "{} packets in {:?} on {} worker(s), {:.1} ns/packet of processing; left by port: {:?}; dropped {}",
        report.packets,
        report.wall,
        report.workers.len(),
        report.ns_per_packet(),
        stats.ports,
        stats.dropped
    );
    Ok(())
}
