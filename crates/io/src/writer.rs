//! [`PcapWriter`]: writes packets to a pcap file.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use netvm_vm::Packet;
use pcap_file::pcap::PcapHeader;
use pcap_file::{DataLink, Endianness, TsResolution};

use crate::error::CaptureError;
use crate::reader::MAX_CAPLEN;

/// Writes Ethernet packets to a pcap file that [`CaptureReader`](crate::CaptureReader)
/// reads back identically.
///
/// The file is little-endian pcap 2.4 with **nanosecond** timestamps (magic
/// `a1b23c4d`, read by libpcap ≥ 1.5, tcpdump, Wireshark), link type
/// ETHERNET and snaplen [`MAX_CAPLEN`]. Each packet keeps its timestamp to the
/// nanosecond, its captured bytes and its wire length. Limits: timestamps
/// must be before 2106 (32-bit seconds), captured bytes at most
/// [`MAX_CAPLEN`]; a packet whose `wire_len` is less than its captured length
/// is written with wire length = captured length (what the reader would make
/// of it anyway). `in_port` is not stored.
///
/// Writes are buffered when created with [`PcapWriter::create`]; call
/// [`PcapWriter::finish`] to flush and see write errors (dropping the writer
/// flushes too, but ignores errors).
#[derive(Debug)]
pub struct PcapWriter<W: Write = BufWriter<File>> {
    out: W,
    name: String,
    written: u64,
}

impl PcapWriter<BufWriter<File>> {
    /// Creates (or truncates) the file at `path` and writes the pcap file header.
    pub fn create(path: &Path) -> Result<PcapWriter<BufWriter<File>>, CaptureError> {
        let name = path.display().to_string();
        let file = File::create(path).map_err(|e| CaptureError::Io { file: name.clone(), source: e })?;
        PcapWriter::new(BufWriter::new(file), &name)
    }
}

impl<W: Write> PcapWriter<W> {
    /// Writes the pcap file header to `out`; `name` names it in errors.
    pub fn new(mut out: W, name: &str) -> Result<PcapWriter<W>, CaptureError> {
        let header = PcapHeader {
            version_major: 2,
            version_minor: 4,
            ts_correction: 0,
            ts_accuracy: 0,
            snaplen: MAX_CAPLEN,
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::Little,
        };
        header.write_to(&mut out).map_err(|e| match e {
            pcap_file::PcapError::IoError(source) => CaptureError::Io { file: name.to_string(), source },
            other => CaptureError::Unwritable { file: name.to_string(), index: 0, detail: format!("file header: {other}") },
        })?;
        Ok(PcapWriter { out, name: name.to_string(), written: 0 })
    }

    /// Appends one packet record.
    pub fn write(&mut self, packet: &Packet) -> Result<(), CaptureError> {
        let unwritable = |detail: String| CaptureError::Unwritable { file: self.name.clone(), index: self.written, detail };
        let caplen = match u32::try_from(packet.data.len()) {
            Ok(n) if n <= MAX_CAPLEN => n,
            _ => return Err(unwritable(format!("{} captured bytes, more than the maximum {MAX_CAPLEN}", packet.data.len()))),
        };
        // Normalize an out-of-range nsec rather than write an invalid fraction.
        let sec = packet.ts.sec + u64::from(packet.ts.nsec / 1_000_000_000);
        let nsec = packet.ts.nsec % 1_000_000_000;
        let sec = u32::try_from(sec).map_err(|_| unwritable(format!("timestamp {sec} s does not fit the 32-bit seconds of pcap")))?;
        let mut header = [0u8; 16];
        header[0..4].copy_from_slice(&sec.to_le_bytes());
        header[4..8].copy_from_slice(&nsec.to_le_bytes());
        header[8..12].copy_from_slice(&caplen.to_le_bytes());
        header[12..16].copy_from_slice(&packet.wire_len.max(caplen).to_le_bytes());
        self.out.write_all(&header).map_err(|e| self.io(e))?;
        self.out.write_all(&packet.data).map_err(|e| self.io(e))?;
        self.written += 1;
        Ok(())
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

    fn io(&self, source: std::io::Error) -> CaptureError {
        CaptureError::Io { file: self.name.clone(), source }
    }
}
