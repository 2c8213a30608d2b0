//! Writing pcap files: [`PcapWriter`] (the record encoder, over any
//! `Write`) and [`PcapSink`] (a file or stdout as a [`Sink`] of a running
//! application).

use std::fs::File;
use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use netvm_vm::queue::Queue;
use std::path::Path;

use netvm_vm::port::{OutPacket, PortError, Sink};
use netvm_vm::{Packet, Timestamp};

use crate::error::CaptureError;
use crate::format::{PcapHeaderSpec, MAX_CAPLEN};

/// The write buffer of [`PcapWriter::create`] and [`PcapSink`]: records are
/// copied into it and written 256 KiB at a time.
pub const WRITE_BUFFER: usize = 256 * 1024;

/// The 16-byte record header libpcap's `pcap_dump` writes for a packet of
/// `data` bytes in a file of format `spec` (see [`PcapWriter`] for what is
/// kept and how); an error says why a pcap file cannot hold the packet.
#[inline]
fn record_header(spec: PcapHeaderSpec, data: &[u8], wire_len: u32, ts: Timestamp) -> Result<[u8; 16], String> {
    let caplen = match u32::try_from(data.len()) {
        Ok(n) if n <= MAX_CAPLEN => n,
        _ => return Err(format!("{} captured bytes, more than the maximum {MAX_CAPLEN}", data.len())),
    };
    let (sec, nsec) = if ts.nsec < 1_000_000_000 {
        (ts.sec, ts.nsec)
    } else {
        (ts.sec.saturating_add(u64::from(ts.nsec / 1_000_000_000)), ts.nsec % 1_000_000_000)
    };
    // libpcap's `(bpf_int32)h->ts.tv_sec`: the low 32 bits (after 2106, the
    // seconds wrap around, as in every pcap file tcpdump writes).
    let sec = sec as u32;
    let frac = spec.precision.fraction(Timestamp { sec: u64::from(sec), nsec });
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&sec.to_ne_bytes());
    h[4..8].copy_from_slice(&frac.to_ne_bytes());
    h[8..12].copy_from_slice(&caplen.to_ne_bytes());
    h[12..16].copy_from_slice(&wire_len.to_ne_bytes());
    Ok(h)
}

/// Writes packets to a pcap file: libpcap's `pcap_dump`.
///
/// The file header is given by a [`PcapHeaderSpec`] (by default nanosecond
/// timestamps, link type ETHERNET, snaplen [`MAX_CAPLEN`]); it and every
/// record are in host byte order, as libpcap writes them. Each record
/// keeps the packet's captured bytes, its wire length as given (even when
/// less than the captured length, as libpcap writes what it read), and its
/// timestamp in the header's precision (nanoseconds become microseconds by
/// truncation) and its seconds modulo 2^32 (pcap's 32-bit field; libpcap
/// truncates them the same way after 2106). A packet of more than
/// [`MAX_CAPLEN`] captured bytes is refused ([`CaptureError::Unwritable`]).
/// `in_port` is not stored.
///
/// Records are assembled in a [`WRITE_BUFFER`] buffer of the writer's own
/// (header and bytes appended with one capacity check, no per-record call
/// into `W`) and written to `W` a buffer at a time; call
/// [`PcapWriter::finish`] to flush and see write errors (dropping the
/// writer flushes too, but ignores errors).
#[derive(Debug)]
pub struct PcapWriter<W: Write = File> {
    /// `None` only once `finish` took it.
    out: Option<W>,
    buf: Vec<u8>,
    name: String,
    header: PcapHeaderSpec,
    written: u64,
}

impl<W: Write> Drop for PcapWriter<W> {
    fn drop(&mut self) {
        // Errors are seen by `flush` and `finish`; here they can only be dropped.
        let _ = self.drain();
    }
}

impl PcapWriter<File> {
    /// Creates (or truncates) the file at `path` and writes the default pcap
    /// file header (nanoseconds, Ethernet, snaplen [`MAX_CAPLEN`]).
    pub fn create(path: &Path) -> Result<PcapWriter<File>, CaptureError> {
        PcapWriter::create_with(path, PcapHeaderSpec::default())
    }

    /// Creates (or truncates) the file at `path` and writes the pcap file
    /// header `header` describes.
    pub fn create_with(path: &Path, header: PcapHeaderSpec) -> Result<PcapWriter<File>, CaptureError> {
        let name = path.display().to_string();
        let file = File::create(path).map_err(|e| CaptureError::Io { file: name.clone(), source: e })?;
        PcapWriter::with_header(file, &name, header)
    }
}

impl<W: Write> PcapWriter<W> {
    /// Writes the default pcap file header (nanoseconds, Ethernet, snaplen
    /// [`MAX_CAPLEN`]) to `out`; `name` names it in errors.
    pub fn new(out: W, name: &str) -> Result<PcapWriter<W>, CaptureError> {
        PcapWriter::with_header(out, name, PcapHeaderSpec::default())
    }

    /// Writes the pcap file header `header` describes to `out`; `name` names
    /// it in errors.
    pub fn with_header(out: W, name: &str, header: PcapHeaderSpec) -> Result<PcapWriter<W>, CaptureError> {
        let mut buf = Vec::with_capacity(WRITE_BUFFER);
        buf.extend_from_slice(&header.to_bytes());
        Ok(PcapWriter { out: Some(out), buf, name: name.to_string(), header, written: 0 })
    }

    /// Writes the assembled records to `W`.
    fn drain(&mut self) -> io::Result<()> {
        if let (false, Some(out)) = (self.buf.is_empty(), self.out.as_mut()) {
            let r = out.write_all(&self.buf);
            self.buf.clear();
            r?;
        }
        Ok(())
    }

    /// Appends one packet record.
    pub fn write(&mut self, packet: &Packet) -> Result<(), CaptureError> {
        self.write_record(&packet.data, packet.wire_len, packet.ts)
    }

    /// Appends one record: `data` captured, `wire_len` on the wire, at `ts`
    /// (a nanosecond fraction of 10^9 or more carries into the seconds).
    #[inline]
    pub fn write_record(&mut self, data: &[u8], wire_len: u32, ts: Timestamp) -> Result<(), CaptureError> {
        let h = record_header(self.header, data, wire_len, ts).map_err(|d| self.unwritable(d))?;
        if self.buf.len() + h.len() + data.len() > WRITE_BUFFER {
            self.drain().map_err(|e| self.io(e))?;
        }
        self.buf.extend_from_slice(&h);
        self.buf.extend_from_slice(data);
        self.written += 1;
        Ok(())
    }

    /// The file header written.
    pub fn header(&self) -> PcapHeaderSpec {
        self.header
    }

    /// The name given to the output in errors.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Number of packets written so far.
    pub fn packets_written(&self) -> u64 {
        self.written
    }

    /// Flushes buffered records to the underlying writer.
    pub fn flush(&mut self) -> Result<(), CaptureError> {
        self.drain().and_then(|()| self.out.as_mut().map_or(Ok(()), Write::flush)).map_err(|e| self.io(e))
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(mut self) -> Result<W, CaptureError> {
        self.flush()?;
        Ok(self.out.take().expect("the writer is not finished yet"))
    }

    fn io(&self, source: io::Error) -> CaptureError {
        CaptureError::Io { file: self.name.clone(), source }
    }

    #[cold]
    fn unwritable(&self, detail: String) -> CaptureError {
        CaptureError::Unwritable { file: self.name.clone(), index: self.written, detail }
    }
}

/// A pcap file (or the standard output) as a [`Sink`] of a running
/// application: the records [`PcapWriter`] writes, assembled in one of
/// three [`WRITE_BUFFER`] buffers and written by a thread of the sink's own,
/// so that the kernel's copy of one buffer into the file overlaps the
/// processing of the packets that fill the next (memory: the three buffers,
/// whatever the output). Errors of the background writes are reported by
/// the next `write`, `flush` or `finish`.
///
/// A closed pipe (`EPIPE`, `| head`) is [`PortError::Closed`]; other errors,
/// and packets a pcap file cannot hold, are [`PortError::Failed`].
pub struct PcapSink<W: Write + Send + 'static = File> {
    name: String,
    header: PcapHeaderSpec,
    written: u64,
    /// The buffer being filled.
    buf: Vec<u8>,
    /// Full buffers to the writer thread; empty ones back.
    full: Arc<Queue<Vec<u8>>>,
    empty: Arc<Queue<Vec<u8>>>,
    failed: Arc<Mutex<Option<io::Error>>>,
    thread: Option<std::thread::JoinHandle<W>>,
}

impl<W: Write + Send + 'static> std::fmt::Debug for PcapSink<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapSink").field("name", &self.name).field("header", &self.header).field("written", &self.written).finish()
    }
}

/// Buffers of a [`PcapSink`]: one being filled, one being written, one spare.
const SINK_BUFFERS: usize = 3;

impl PcapSink<File> {
    /// Creates (or truncates) the file at `path` (`-`: the standard output)
    /// and writes the file header.
    pub fn create(path: &Path, header: PcapHeaderSpec) -> Result<PcapSink<File>, CaptureError> {
        let name = path.display().to_string();
        let file = if path.as_os_str() == "-" { stdout() } else { File::create(path) };
        let file = file.map_err(|e| CaptureError::Io { file: name.clone(), source: e })?;
        PcapSink::from_writer(file, &name, header)
    }
}

/// The standard output's descriptor, duplicated, so that records bypass the
/// line buffering of `std::io::Stdout`.
#[cfg(unix)]
fn stdout() -> io::Result<File> {
    use std::os::fd::AsFd;
    Ok(File::from(io::stdout().as_fd().try_clone_to_owned()?))
}

#[cfg(not(unix))]
fn stdout() -> io::Result<File> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "writing a capture to stdout needs a Unix system"))
}

impl<W: Write + Send + 'static> PcapSink<W> {
    /// A sink writing to `out` on a thread of its own; `name` names it in
    /// errors. The file header is its first bytes.
    pub fn from_writer(out: W, name: &str, header: PcapHeaderSpec) -> Result<PcapSink<W>, CaptureError> {
        let full: Arc<Queue<Vec<u8>>> = Arc::new(Queue::new(SINK_BUFFERS));
        let empty: Arc<Queue<Vec<u8>>> = Arc::new(Queue::new(SINK_BUFFERS));
        for _ in 1..SINK_BUFFERS {
            let _ = empty.send(Vec::with_capacity(WRITE_BUFFER));
        }
        let failed: Arc<Mutex<Option<io::Error>>> = Arc::default();
        let (f, e, err) = (Arc::clone(&full), Arc::clone(&empty), Arc::clone(&failed));
        let thread = std::thread::Builder::new()
            .name("netvm-pcap-writer".into())
            .spawn(move || {
                let mut out = out;
                while let Some(mut buf) = f.recv() {
                    let mut slot = err.lock().unwrap_or_else(|p| p.into_inner());
                    if slot.is_none() {
                        if let Err(x) = out.write_all(&buf).and_then(|()| out.flush()) {
                            *slot = Some(x);
                        }
                    }
                    drop(slot);
                    buf.clear();
                    let _ = e.send(buf);
                }
                out
            })
            .map_err(|e| CaptureError::Io { file: name.to_string(), source: e })?;
        let mut buf = Vec::with_capacity(WRITE_BUFFER);
        buf.extend_from_slice(&header.to_bytes());
        Ok(PcapSink { name: name.to_string(), header, written: 0, buf, full, empty, failed, thread: Some(thread) })
    }

    /// The file header written.
    pub fn header(&self) -> PcapHeaderSpec {
        self.header
    }

    /// Number of packets written so far.
    pub fn packets_written(&self) -> u64 {
        self.written
    }

    fn io(&self, source: io::Error) -> CaptureError {
        CaptureError::Io { file: self.name.clone(), source }
    }

    /// The error of an earlier background write, if any.
    fn check(&self) -> Result<(), CaptureError> {
        match self.failed.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(self.io(e)),
            None => Ok(()),
        }
    }

    /// Hands the filled buffer to the writer thread and takes an empty one
    /// (waiting for the writer to return one if none is free).
    fn submit(&mut self) -> Result<(), CaptureError> {
        self.check()?;
        if self.buf.is_empty() {
            return Ok(());
        }
        let ended = || io::Error::other("the writer thread ended");
        let next = self.empty.recv().ok_or_else(|| self.io(ended()))?;
        let full = std::mem::replace(&mut self.buf, next);
        self.full.send(full).map_err(|_| self.io(ended()))?;
        Ok(())
    }

    /// Waits until every buffer handed over is written: until the buffers
    /// other than the one being filled are all back.
    fn settle(&mut self) -> Result<(), CaptureError> {
        let mut back: [Option<Vec<u8>>; SINK_BUFFERS - 1] = Default::default();
        for slot in &mut back {
            *slot = self.empty.recv();
        }
        for b in back.into_iter().flatten() {
            let _ = self.empty.send(b);
        }
        self.check()
    }

    /// Writes one packet, with the typed error.
    #[inline]
    pub fn write_packet(&mut self, data: &[u8], wire_len: u32, ts: Timestamp) -> Result<(), CaptureError> {
        let h = record_header(self.header, data, wire_len, ts).map_err(|detail| CaptureError::Unwritable {
            file: self.name.clone(),
            index: self.written,
            detail,
        })?;
        if self.buf.len() + h.len() + data.len() > WRITE_BUFFER {
            self.submit()?;
        }
        self.buf.extend_from_slice(&h);
        self.buf.extend_from_slice(data);
        self.written += 1;
        Ok(())
    }

    /// Writes everything so far and waits until it is written.
    pub fn flush_all(&mut self) -> Result<(), CaptureError> {
        self.submit()?;
        self.settle()
    }

    /// Flushes, stops the writer thread and returns the output.
    pub fn into_inner(mut self) -> Result<W, CaptureError> {
        self.flush_all()?;
        self.full.close();
        let t = self.thread.take().expect("the writer thread runs until the sink ends");
        t.join().map_err(|_| self.io(io::Error::other("the writer thread panicked")))
    }
}

impl<W: Write + Send + 'static> Drop for PcapSink<W> {
    fn drop(&mut self) {
        // Errors are seen by `flush` and `finish`; here they can only be dropped.
        let _ = self.submit();
        self.full.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A write error as a port error: a closed pipe is [`PortError::Closed`].
fn port_error(e: CaptureError) -> PortError {
    match e {
        CaptureError::Io { file, source } if source.kind() == io::ErrorKind::BrokenPipe => PortError::Closed(file),
        other => PortError::Failed(other.to_string()),
    }
}

impl<W: Write + Send + 'static> Sink for PcapSink<W> {
    fn name(&self) -> &str {
        &self.name
    }

    #[inline]
    fn write(&mut self, packet: &OutPacket<'_>) -> Result<(), PortError> {
        self.write_packet(packet.data, packet.wire_len, packet.ts).map_err(port_error)
    }

    fn flush(&mut self) -> Result<(), PortError> {
        self.flush_all().map_err(port_error)
    }
}
