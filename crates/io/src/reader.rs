//! [`CaptureReader`]: the packets of a capture file as owned [`Packet`]s,
//! for tests and tools that want them in memory.
//!
//! It is the crate's one parser ([`CaptureSource`](crate::CaptureSource)'s)
//! over a private pool of two blocks of [`MIN_BLOCK_SIZE`] bytes, each
//! packet copied out of the block into its own `Vec`.

use std::io::Read;
use std::iter::FusedIterator;
use std::path::Path;

use netvm_vm::buffer::BlockPool;
use netvm_vm::Packet;

use crate::error::CaptureError;
use crate::format::{CaptureFormat, PcapHeaderSpec, TsPrecision, MIN_BLOCK_SIZE};
use crate::parser::{Input, Mode, Parser, Stop};

/// A streaming reader of a pcap or pcapng capture file, yielding its packets
/// as owned [`Packet`]s.
///
/// The format is detected from the magic number, not the file name:
/// pcap with microsecond or nanosecond timestamps in either byte order, and
/// pcapng (Section Header, Interface Description, Enhanced Packet, Simple
/// Packet and obsolete Packet blocks; other blocks are skipped).
///
/// Only Ethernet packets (link type 1) are read; any other link type yields
/// [`CaptureError::UnsupportedLinkType`] (for pcap, on the first call to
/// `next`; for pcapng, at the first packet of a non-Ethernet interface).
///
/// The iterator yields `Ok(packet)` for each good record, then either ends
/// (clean end of file, which for pcap means exactly at a record boundary) or
/// yields one `Err` and then `None` forever.
///
/// - `Packet::data` is the captured bytes and `wire_len` the record's
///   original length as the file says, even when it is less than the
///   captured length (libpcap passes it through too).
/// - pcap as libpcap 1.10 reads it: versions 2.0 to 2.4 and 543.0 (older
///   ones are "archaic", others unsupported; 2.0-2.2 and 543.0 have the
///   lengths swapped, 2.3 when the captured length exceeds the original); a
///   record longer than the snapshot length (the header's snaplen, or
///   [`MAX_CAPLEN`](crate::MAX_CAPLEN) if that is 0 or above `INT_MAX`) is cut
///   to it, the rest of its bytes skipped; one longer than `MAX_CAPLEN` is an
///   error.
/// - Timestamps: pcap microseconds become `usec * 1000` ns; a fraction out
///   of range (µs ≥ 1 000 000 or ns ≥ 10^9, as in hand-edited or fuzzed
///   files) is normalized by carrying whole seconds into `sec`, not reported.
///   pcapng timestamps honour the interface's `if_tsresol` (10^-n or 2^-n,
///   default 10^-6, truncated to whole nanoseconds) and `if_tsoffset`.
///   Simple Packet Blocks have no timestamp and get time zero.
/// - `in_port` is 0 unless set with [`CaptureReader::with_in_port`].
///
/// Memory is bounded: two blocks of [`MIN_BLOCK_SIZE`] bytes (allocated when
/// the reader is made), the packet being returned, and at most 4096 interface
/// descriptions per pcapng section.
pub struct CaptureReader {
    parser: Parser,
    in_port: u16,
    done: bool,
}

impl CaptureReader {
    /// Opens a capture file (`-`: the standard input) and reads its
    /// header(s): the pcap file header, or the pcapng section header and the
    /// blocks up to the first interface description.
    pub fn open(path: &Path) -> Result<CaptureReader, CaptureError> {
        let name = path.display().to_string();
        let input = Input::open(path).map_err(|e| CaptureError::Io { file: name.clone(), source: e })?;
        CaptureReader::start(input, &name)
    }

    /// Reads a capture from any byte stream; `name` names it in errors. Reads
    /// the header(s) as [`CaptureReader::open`] does.
    pub fn from_reader<R: Read + Send + 'static>(reader: R, name: &str) -> Result<CaptureReader, CaptureError> {
        CaptureReader::start(Input::Stream(Box::new(reader)), name)
    }

    fn start(input: Input, name: &str) -> Result<CaptureReader, CaptureError> {
        let pool = BlockPool::new(MIN_BLOCK_SIZE, 2);
        let mut parser = Parser::new(input, name, 0, &pool);
        parser.prime()?;
        Ok(CaptureReader { parser, in_port: 0, done: false })
    }

    /// Sets the `in_port` given to every packet read (default 0).
    pub fn with_in_port(mut self, in_port: u16) -> CaptureReader {
        self.in_port = in_port;
        self
    }

    /// The link type (LINKTYPE_* value, without the "ext" bits) of the
    /// packets: the pcap file header's, or for pcapng the first interface's;
    /// `None` for a pcapng file that describes no interface before its first
    /// packet or its end.
    pub fn link_type(&self) -> Option<u32> {
        self.parser.info().link_type
    }

    /// The upper bits of the pcap link-type field (see
    /// [`CaptureSource::link_type_ext`](crate::CaptureSource::link_type_ext)).
    pub fn link_type_ext(&self) -> u32 {
        self.parser.info().link_ext
    }

    /// The adjusted snapshot length (see [`CaptureSource::snaplen`](crate::CaptureSource::snaplen)).
    pub fn snaplen(&self) -> u32 {
        self.parser.info().snaplen
    }

    /// The file's timestamp resolution (see [`CaptureSource::precision`](crate::CaptureSource::precision)).
    pub fn precision(&self) -> TsPrecision {
        self.parser.info().precision
    }

    /// The pcap header `tcpdump -w` would write for this input (see
    /// [`CaptureSource::header`](crate::CaptureSource::header)).
    pub fn header(&self) -> PcapHeaderSpec {
        self.parser.header()
    }

    /// The detected file format.
    pub fn format(&self) -> CaptureFormat {
        self.parser.info().format
    }

    /// The name given to the file in errors.
    pub fn name(&self) -> &str {
        &self.parser.name
    }

    /// Reads the remaining packets: every good one up to the first error, and
    /// that error if there is one.
    pub fn collect_packets(self) -> (Vec<Packet>, Option<CaptureError>) {
        let mut packets = Vec::new();
        for item in self {
            match item {
                Ok(p) => packets.push(p),
                Err(e) => return (packets, Some(e)),
            }
        }
        (packets, None)
    }

    /// Bytes of the file parsed so far (the offset of the next record).
    pub fn offset(&self) -> u64 {
        self.parser.offset()
    }
}

impl Iterator for CaptureReader {
    type Item = Result<Packet, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let p = &mut self.parser;
        if p.pending.is_none() {
            if let Err(stop) = p.advance(Mode { block: true, wait: false }) {
                self.done = true;
                return match stop {
                    Stop::End => None,
                    Stop::Failed(e) => Some(Err(e)),
                    // Nothing else holds the pool's blocks.
                    Stop::Starved | Stop::WouldBlock => unreachable!("a private pool never starves and reads may block"),
                };
            }
        }
        let d = p.pending.take().expect("advance leaves a packet pending");
        // SAFETY: the descriptor points into a block the parser holds (`held`
        // or the current block), at bytes nothing writes.
        let data = unsafe { d.bytes() }.to_vec();
        p.held = None;
        Some(Ok(Packet { data, wire_len: d.wirelen, ts: d.ts(), in_port: self.in_port }))
    }
}

impl FusedIterator for CaptureReader {}

impl std::fmt::Debug for CaptureReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureReader")
            .field("name", &self.parser.name)
            .field("format", &self.format())
            .field("link_type", &self.link_type())
            .field("offset", &self.offset())
            .field("in_port", &self.in_port)
            .field("done", &self.done)
            .finish()
    }
}

/// Reads a whole capture file: every good packet (with `in_port` set) up to
/// the first error, and that error if there is one. A file that cannot be
/// opened, or whose header is bad, gives no packets and the error.
pub fn read_capture(path: &Path, in_port: u16) -> (Vec<Packet>, Option<CaptureError>) {
    match CaptureReader::open(path) {
        Ok(reader) => reader.with_in_port(in_port).collect_packets(),
        Err(e) => (Vec::new(), Some(e)),
    }
}
