//! [`CaptureSource`]: a capture file (or stdin) as a [`Source`] of a running
//! application, its packets parsed where they lie in blocks of a
//! [`BlockPool`].

use std::io::Read;
use std::path::Path;

use netvm_vm::buffer::{Batch, BlockPool};
use netvm_vm::port::{Fill, PortError, Source};
use netvm_vm::Timestamp;

use crate::error::CaptureError;
use crate::format::{CaptureFormat, PcapHeaderSpec, TsPrecision};
use crate::parser::{Input, Mode, Parser, Stop};

/// A streaming, zero-copy source of the packets of a pcap or pcapng file.
///
/// The byte stream is read into blocks taken from a [`BlockPool`], and each
/// record is parsed where it lies: a packet's descriptor ([`XbDesc`](netvm_vm::XbDesc))
/// points at its bytes inside the block, and the batch it is appended to
/// holds the block until the batch is cleared. The only copy of a packet's
/// bytes is the kernel's `read()`; a record that straddles the end of a block
/// is moved to the start of the next one (its partial bytes copied, at most
/// one record per block).
///
/// Records are parsed as soon as they are whole in the block, so packets
/// arriving through a pipe flow as they come: once a fill has appended a
/// packet, it returns rather than wait in `read()` for more (regular files
/// never wait, and fill whole batches).
///
/// Formats and semantics are those of [`CaptureReader`](crate::CaptureReader)
/// (the same parser): pcap with microsecond or nanosecond timestamps in
/// either byte order, versions 2.0 to 2.4 and 543.0, read as libpcap 1.10
/// does; pcapng; Ethernet only. See the crate docs.
///
/// Memory: the blocks it holds (the current one, and while a record straddles,
/// the next), an array of at most 4,096 pcapng interface descriptions, and a
/// fixed amount; nothing per packet. Blocks should be at least
/// [`MIN_BLOCK_SIZE`](crate::MIN_BLOCK_SIZE) bytes: a record that does not fit
/// in a block is an error ([`CaptureError::RecordTooLarge`]). A pcapng block
/// larger than a pool block (options, custom blocks) is read in part and the
/// rest skipped.
///
/// Errors end the source. The packets before a bad record are delivered
/// first: the fill that meets it returns them, and the next call returns the
/// error ([`PortError::Failed`] with the [`CaptureError`]'s message: file
/// name, byte offset, what is wrong).
pub struct CaptureSource {
    parser: Parser,
    /// An error met after packets were appended, for the next call.
    stashed: Option<CaptureError>,
    /// An error was returned: the source is over.
    failed: bool,
    delivered: u64,
}

impl CaptureSource {
    /// Opens a capture file (`-`: the standard input) whose packets arrive on
    /// `in_port`, and reads its header(s): the pcap file header, or the pcapng
    /// section header and the blocks up to the first interface description.
    /// Takes a block from `pool` (an error if none is free).
    pub fn open(path: &Path, in_port: u16, pool: &BlockPool) -> Result<CaptureSource, CaptureError> {
        let name = path.display().to_string();
        let input = Input::open(path).map_err(|e| CaptureError::Io { file: name.clone(), source: e })?;
        CaptureSource::start(Parser::new(input, &name, in_port, pool))
    }

    /// A source reading any byte stream (treated as a pipe: it cannot be
    /// rewound); `name` names it in errors. Reads the header(s) as
    /// [`CaptureSource::open`] does.
    pub fn from_reader<R: Read + Send + 'static>(
        reader: R,
        name: &str,
        in_port: u16,
        pool: &BlockPool,
    ) -> Result<CaptureSource, CaptureError> {
        CaptureSource::start(Parser::new(Input::Stream(Box::new(reader)), name, in_port, pool))
    }

    fn start(mut parser: Parser) -> Result<CaptureSource, CaptureError> {
        parser.prime()?;
        Ok(CaptureSource { parser, stashed: None, failed: false, delivered: 0 })
    }

    /// The detected file format.
    pub fn format(&self) -> CaptureFormat {
        self.parser.info().format
    }

    /// The link type (a LINKTYPE_* value, without the "ext" bits): the pcap
    /// file header's, or the first pcapng interface's; `None` for a pcapng
    /// file that describes no interface before its first packet or its end.
    pub fn link_type(&self) -> Option<u32> {
        self.parser.info().link_type
    }

    /// The upper six bits of the pcap header's link-type field (libpcap's
    /// `LT_LINKTYPE_EXT`: the FCS length), in place; 0 for pcapng.
    pub fn link_type_ext(&self) -> u32 {
        self.parser.info().link_ext
    }

    /// The snapshot length, adjusted as libpcap does (a snaplen of 0 or above
    /// `INT_MAX` becomes [`MAX_CAPLEN`](crate::MAX_CAPLEN)): the pcap
    /// header's, or the first pcapng interface's.
    pub fn snaplen(&self) -> u32 {
        self.parser.info().snaplen
    }

    /// The timestamp resolution of the file: the pcap magic's, or for pcapng
    /// [`TsPrecision::Nano`] if the first interface's `if_tsresol` is finer
    /// than microseconds.
    pub fn precision(&self) -> TsPrecision {
        self.parser.info().precision
    }

    /// The pcap header `tcpdump -r IN -w OUT` writes for this input: its
    /// precision, link type (ext bits included) and adjusted snaplen.
    pub fn header(&self) -> PcapHeaderSpec {
        self.parser.header()
    }

    /// The name given to the input in errors (`-` for stdin).
    pub fn name(&self) -> &str {
        &self.parser.name
    }

    /// Stream offset of the first byte not parsed yet.
    pub fn offset(&self) -> u64 {
        self.parser.offset()
    }

    /// [`Source::fill`] with the typed error.
    pub fn fill_batch(&mut self, batch: &mut Batch, max: usize, until: Option<(Timestamp, u16)>) -> Result<Fill, CaptureError> {
        if let Some(e) = self.stashed.take() {
            self.failed = true;
            return Err(e);
        }
        if self.failed {
            return Ok(Fill::End);
        }
        let p = &mut self.parser;
        let never_blocks = p.reads_never_block();
        let mut n = 0;
        // The block epoch whose block this call has made the batch hold.
        let mut held_epoch = None;
        while n < max {
            if p.pending.is_none() {
                let k = p.fill_fast(&mut batch.descs, max - n, until);
                if k > 0 {
                    if held_epoch != Some(p.epoch) {
                        batch.hold_block(p.current_block().expect("packets lie in a block"));
                        held_epoch = Some(p.epoch);
                    }
                    n += k;
                    if n == max {
                        break;
                    }
                }
                // The fast path may have left the next packet pending.
                let next = if p.pending.is_some() { Ok(()) } else { p.advance(Mode { block: n == 0 || never_blocks, wait: false }) };
                match next {
                    Ok(()) => {}
                    Err(Stop::End) if n == 0 => return Ok(Fill::End),
                    Err(Stop::Starved) if n == 0 => return Ok(Fill::Starved),
                    Err(Stop::Failed(e)) if n == 0 => {
                        self.failed = true;
                        return Err(e);
                    }
                    Err(Stop::Failed(e)) => {
                        self.stashed = Some(e);
                        break;
                    }
                    Err(_) => break,
                }
            }
            let d = p.pending.expect("advance leaves a packet pending");
            if let Some(u) = until {
                if (d.ts(), d.in_port) >= u {
                    break;
                }
            }
            if let Some(block) = p.held.take() {
                batch.hold_block(&block);
            } else if held_epoch != Some(p.epoch) {
                batch.hold_block(p.current_block().expect("packets lie in a block"));
                held_epoch = Some(p.epoch);
            }
            batch.descs.push(d);
            p.pending = None;
            n += 1;
        }
        self.delivered += n as u64;
        Ok(Fill::Packets(n))
    }

    /// [`Source::peek_time`] with the typed error.
    pub fn next_time(&mut self) -> Result<Option<Timestamp>, CaptureError> {
        if self.parser.pending.is_none() {
            if let Some(e) = self.stashed.take() {
                self.failed = true;
                return Err(e);
            }
            if self.failed {
                return Ok(None);
            }
        }
        match self.parser.peek() {
            Ok(d) => Ok(d.map(|d| d.ts())),
            Err(Stop::Failed(e)) => {
                self.failed = true;
                Err(e)
            }
            Err(Stop::End) => Ok(None),
            Err(Stop::Starved | Stop::WouldBlock) => unreachable!("peek waits"),
        }
    }
}

impl Source for CaptureSource {
    fn name(&self) -> &str {
        &self.parser.name
    }

    fn in_port(&self) -> u16 {
        self.parser.in_port()
    }

    /// The next packet's time, reading (and waiting for) input as needed.
    /// When the next record lies across the end of a full block, this takes
    /// a fresh block, waiting up to 10 s for one to be released: a driver
    /// must not call it while it holds every block of the pool itself.
    fn peek_time(&mut self) -> Result<Option<Timestamp>, PortError> {
        self.next_time().map_err(|e| PortError::Failed(e.to_string()))
    }

    /// Appends up to `max` packets (see [`Source::fill`]). Returns
    /// `Fill::Packets(0)` when the next packet is not below `until`.
    fn fill(&mut self, batch: &mut Batch, max: usize, until: Option<(Timestamp, u16)>) -> Result<Fill, PortError> {
        self.fill_batch(batch, max, until).map_err(|e| PortError::Failed(e.to_string()))
    }

    /// For a regular file opened by name: seeks to the start, to read the
    /// file again from its header (which the next fill or peek parses, in a
    /// fresh block: packets in flight keep theirs); `Ok(false)` for stdin,
    /// pipes and readers.
    fn rewind(&mut self) -> Result<bool, PortError> {
        let rewound = self.parser.rewind().map_err(|e| PortError::Failed(e.to_string()))?;
        if rewound {
            self.stashed = None;
            self.failed = false;
        }
        Ok(rewound)
    }

    fn packets(&self) -> u64 {
        self.delivered
    }
}

impl std::fmt::Debug for CaptureSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureSource").field("parser", &self.parser).field("delivered", &self.delivered).finish()
    }
}
