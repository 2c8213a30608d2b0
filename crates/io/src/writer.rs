//! Writing pcap files: [`PcapWriter`] (the record encoder, over any
//! `Write`) and [`PcapSink`] (a file or stdout as a [`Sink`] of a running
//! application).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use netvm_vm::port::{OutPacket, PortError, Sink};
use netvm_vm::{Packet, Timestamp};

use crate::error::CaptureError;
use crate::format::{PcapHeaderSpec, MAX_CAPLEN};

/// The write buffer of [`PcapWriter::create`] and [`PcapSink`]: records are
/// copied into it and written 256 KiB at a time.
pub const WRITE_BUFFER: usize = 256 * 1024;

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
/// Writes are buffered when created with [`PcapWriter::create`] (a
/// [`WRITE_BUFFER`] buffer); call [`PcapWriter::finish`] to flush and see
/// write errors (dropping the writer flushes too, but ignores errors).
#[derive(Debug)]
pub struct PcapWriter<W: Write = BufWriter<File>> {
    out: W,
    name: String,
    header: PcapHeaderSpec,
    written: u64,
}

impl PcapWriter<BufWriter<File>> {
    /// Creates (or truncates) the file at `path` and writes the default pcap
    /// file header (nanoseconds, Ethernet, snaplen [`MAX_CAPLEN`]).
    pub fn create(path: &Path) -> Result<PcapWriter<BufWriter<File>>, CaptureError> {
        PcapWriter::create_with(path, PcapHeaderSpec::default())
    }

    /// Creates (or truncates) the file at `path` and writes the pcap file
    /// header `header` describes.
    pub fn create_with(path: &Path, header: PcapHeaderSpec) -> Result<PcapWriter<BufWriter<File>>, CaptureError> {
        let name = path.display().to_string();
        let file = File::create(path).map_err(|e| CaptureError::Io { file: name.clone(), source: e })?;
        PcapWriter::with_header(BufWriter::with_capacity(WRITE_BUFFER, file), &name, header)
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
    pub fn with_header(mut out: W, name: &str, header: PcapHeaderSpec) -> Result<PcapWriter<W>, CaptureError> {
        out.write_all(&header.to_bytes()).map_err(|e| CaptureError::Io { file: name.to_string(), source: e })?;
        Ok(PcapWriter { out, name: name.to_string(), header, written: 0 })
    }

    /// Appends one packet record.
    pub fn write(&mut self, packet: &Packet) -> Result<(), CaptureError> {
        self.write_record(&packet.data, packet.wire_len, packet.ts)
    }

    /// Appends one record: `data` captured, `wire_len` on the wire, at `ts`
    /// (a nanosecond fraction of 10^9 or more carries into the seconds).
    #[inline]
    pub fn write_record(&mut self, data: &[u8], wire_len: u32, ts: Timestamp) -> Result<(), CaptureError> {
        let caplen = match u32::try_from(data.len()) {
            Ok(n) if n <= MAX_CAPLEN => n,
            _ => return Err(self.unwritable(format!("{} captured bytes, more than the maximum {MAX_CAPLEN}", data.len()))),
        };
        let (sec, nsec) = if ts.nsec < 1_000_000_000 {
            (ts.sec, ts.nsec)
        } else {
            (ts.sec.saturating_add(u64::from(ts.nsec / 1_000_000_000)), ts.nsec % 1_000_000_000)
        };
        // libpcap's `(bpf_int32)h->ts.tv_sec`: the low 32 bits (after 2106, the
        // seconds wrap around, as in every pcap file tcpdump writes).
        let sec = sec as u32;
        let frac = self.header.precision.fraction(Timestamp { sec: u64::from(sec), nsec });
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&sec.to_ne_bytes());
        h[4..8].copy_from_slice(&frac.to_ne_bytes());
        h[8..12].copy_from_slice(&caplen.to_ne_bytes());
        h[12..16].copy_from_slice(&wire_len.to_ne_bytes());
        if let Err(e) = self.out.write_all(&h).and_then(|()| self.out.write_all(data)) {
            return Err(self.io(e));
        }
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
        self.out.flush().map_err(|e| self.io(e))
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(mut self) -> Result<W, CaptureError> {
        self.flush()?;
        Ok(self.out)
    }

    fn io(&self, source: io::Error) -> CaptureError {
        CaptureError::Io { file: self.name.clone(), source }
    }

    #[cold]
    fn unwritable(&self, detail: String) -> CaptureError {
        CaptureError::Unwritable { file: self.name.clone(), index: self.written, detail }
    }
}

/// A pcap file, or the standard output (`-`), as a [`Sink`]: what
/// `tcpdump -w` writes.
///
/// Given the input's [`PcapHeaderSpec`] (from
/// [`CaptureSource::header`](crate::CaptureSource::header)), the output is
/// byte for byte what `tcpdump -r IN -w OUT` writes for the same packets
/// (with `--time-stamp-precision nano` for a nanosecond input): the file
/// header of [`PcapWriter`], then one record per packet, copied from where
/// the packet lies into a [`WRITE_BUFFER`] buffer and written with it.
///
/// A closed pipe (`EPIPE`, `| head`) is [`PortError::Closed`]; other errors,
/// and packets a pcap file cannot hold, are [`PortError::Failed`].
#[derive(Debug)]
pub struct PcapSink<W: Write + Send = File> {
    writer: PcapWriter<BufWriter<W>>,
}

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

impl<W: Write + Send> PcapSink<W> {
    /// A sink writing to `out` (buffered here); `name` names it in errors.
    /// Writes the file header.
    pub fn from_writer(out: W, name: &str, header: PcapHeaderSpec) -> Result<PcapSink<W>, CaptureError> {
        Ok(PcapSink { writer: PcapWriter::with_header(BufWriter::with_capacity(WRITE_BUFFER, out), name, header)? })
    }

    /// The file header written.
    pub fn header(&self) -> PcapHeaderSpec {
        self.writer.header()
    }

    /// Number of packets written so far.
    pub fn packets_written(&self) -> u64 {
        self.writer.packets_written()
    }

    /// Writes one packet, with the typed error.
    #[inline]
    pub fn write_packet(&mut self, data: &[u8], wire_len: u32, ts: Timestamp) -> Result<(), CaptureError> {
        self.writer.write_record(data, wire_len, ts)
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(self) -> Result<W, CaptureError> {
        let name = self.writer.name().to_string();
        self.writer.finish()?.into_inner().map_err(|e| CaptureError::Io { file: name, source: e.into_error() })
    }
}

/// A write error as a port error: a closed pipe is [`PortError::Closed`].
fn port_error(e: CaptureError) -> PortError {
    match e {
        CaptureError::Io { file, source } if source.kind() == io::ErrorKind::BrokenPipe => PortError::Closed(file),
        other => PortError::Failed(other.to_string()),
    }
}

impl<W: Write + Send> Sink for PcapSink<W> {
    fn name(&self) -> &str {
        self.writer.name()
    }

    #[inline]
    fn write(&mut self, packet: &OutPacket<'_>) -> Result<(), PortError> {
        self.writer.write_record(packet.data, packet.wire_len, packet.ts).map_err(port_error)
    }

    fn flush(&mut self) -> Result<(), PortError> {
        self.writer.flush().map_err(port_error)
    }
}
