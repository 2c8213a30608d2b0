//! The one capture parser of the crate: reads a byte stream into blocks of a
//! [`BlockPool`] and parses pcap records and pcapng blocks where they lie.
//!
//! The stream is read into the current block past what was parsed (a `read()`
//! asks for all the room left in the block), and records are parsed as soon
//! as they are whole in it: a packet becomes a descriptor ([`XbDesc`]) of
//! its bytes inside the block, with no copy. The block's bytes are in three
//! parts:
//!
//! ```text
//! 0            pos                 filled                capacity
//! | handed out | read, not parsed  | not read yet        |
//! ```
//!
//! Descriptors point below `pos` only; reads write at `filled` and above, so
//! packets in flight are never touched. A record that does not fit in what
//! is left of the block moves to a fresh block: its partial bytes (at most
//! one record) are copied to the start of the next block, and the old block
//! goes to the batches that hold its packets (it returns to the pool when
//! the last of them is cleared).
//!
//! Parts of a record that are not kept (the bytes of a pcap record beyond
//! the snapshot length, pcapng options, padding and blocks that are not
//! packets) are skipped: in place if they are in the block, else read and
//! discarded, so a block bigger than the pool's blocks costs no memory.
//!
//! Every step is resumable: when it needs a block and the pool has none
//! ([`Stop::Starved`]), or needs to read and may not block
//! ([`Stop::WouldBlock`]), nothing has been consumed and the next call
//! starts the same record again.
//!
//! The semantics (libpcap 1.10's sf-pcap.c for pcap; for pcapng, where
//! they differ from libpcap's) are in the crate docs (`lib.rs`).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;
use std::time::Duration;

use netvm_vm::buffer::{BlockPool, BlockRef};
use netvm_vm::XbDesc;

use crate::error::CaptureError;
use crate::format::{
    adjust_snapshot, arr, hex, normalize, rd16, rd32, CaptureFormat, Interface, PcapHeaderSpec, TsPrecision, LINKTYPE_MASK, MAX_CAPLEN,
};
use crate::linktype::LINKTYPE_ETHERNET;

/// The largest pcapng Interface Description Block accepted (it is parsed in
/// one piece for its options). Other non-packet blocks are skipped.
const MAX_IDB_LEN: u32 = 64 * 1024;

/// The most interfaces one pcapng section may describe.
const MAX_INTERFACES: usize = 4096;

/// How long [`Parser::peek`] waits for a free block before giving up.
const PEEK_WAIT: Duration = Duration::from_secs(10);

/// How far ahead of the record being parsed the fast path prefetches.
#[cfg(target_arch = "x86_64")]
const PREFETCH_AHEAD: usize = 512;

const PCAPNG_SHB: [u8; 4] = [0x0A, 0x0D, 0x0D, 0x0A];
const PCAP_MAGICS: [[u8; 4]; 4] = [[0xD4, 0xC3, 0xB2, 0xA1], [0xA1, 0xB2, 0xC3, 0xD4], [0x4D, 0x3C, 0xB2, 0xA1], [0xA1, 0xB2, 0x3C, 0x4D]];
const BLOCK_IDB: u32 = 1;
const BLOCK_PB: u32 = 2;
const BLOCK_SPB: u32 = 3;
const BLOCK_EPB: u32 = 6;

/// Where the bytes come from.
pub(crate) enum Input {
    /// A file or a file descriptor (stdin).
    File {
        file: File,
        /// A regular file opened by name: [`Parser::rewind`] seeks it.
        seekable: bool,
        /// A regular file: a read never waits for a writer.
        regular: bool,
    },
    /// Any other byte stream (treated as a pipe).
    Stream(Box<dyn Read + Send>),
}

impl Input {
    /// Opens `path`; `-` is the standard input.
    pub fn open(path: &Path) -> io::Result<Input> {
        if path.as_os_str() == "-" {
            return Input::stdin();
        }
        let file = File::open(path)?;
        let regular = file.metadata().map(|m| m.file_type().is_file()).unwrap_or(false);
        Ok(Input::File { file, seekable: regular, regular })
    }

    #[cfg(unix)]
    fn stdin() -> io::Result<Input> {
        use std::os::fd::AsFd;
        // A descriptor of its own, read without std's line of buffering.
        let file = File::from(io::stdin().as_fd().try_clone_to_owned()?);
        let regular = file.metadata().map(|m| m.file_type().is_file()).unwrap_or(false);
        Ok(Input::File { file, seekable: false, regular })
    }

    #[cfg(not(unix))]
    fn stdin() -> io::Result<Input> {
        Ok(Input::Stream(Box::new(io::stdin())))
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let r = match self {
                Input::File { file, .. } => file.read(buf),
                Input::Stream(r) => r.read(buf),
            };
            match r {
                // `min` guards against a reader that misreports its count.
                Ok(n) => return Ok(n.min(buf.len())),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn regular(&self) -> bool {
        matches!(self, Input::File { regular: true, .. })
    }
}

/// Why a step produced no packet.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The input is exhausted (cleanly).
    End,
    /// A block is needed and the pool has none free.
    Starved,
    /// More input is needed and the caller does not want to wait for it.
    WouldBlock,
    /// The input is bad or could not be read; the parser is finished.
    Failed(CaptureError),
}

impl From<CaptureError> for Stop {
    fn from(e: CaptureError) -> Stop {
        Stop::Failed(e)
    }
}

/// What a step may do.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mode {
    /// Issue a read that may wait for a writer (a pipe). Reads of regular
    /// files are always allowed.
    pub block: bool,
    /// Wait for a free block (a while) rather than report [`Stop::Starved`].
    pub wait: bool,
}

/// Which part of the file the parser is in.
enum State {
    /// Before the file header (at open, after a rewind).
    Header,
    Pcap(PcapState),
    Ng(NgState),
    /// After the last record.
    End,
}

/// libpcap's `lengths_swapped`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LengthSwap {
    No,
    Maybe,
    Yes,
}

#[derive(Clone, Copy, Debug)]
struct PcapState {
    big_endian: bool,
    nanosecond: bool,
    link_type: u32,
    snapshot: u32,
    swap: LengthSwap,
    /// Records can take the fast path of [`Parser::fill_fast`] (Ethernet, lengths not swapped).
    fast: bool,
    /// The captured length up to which a record takes the fast path.
    fast_limit: u32,
}

struct NgState {
    big_endian: bool,
    interfaces: Vec<Interface>,
}

/// What is left of a record after its kept part was parsed: bytes to skip,
/// then for pcapng the trailing block length; then the packet (if it is
/// one) can be delivered.
#[derive(Clone, Copy, Debug)]
struct Tail {
    /// Offset of the record in the stream.
    start: u64,
    /// Bytes still to skip.
    skip: u64,
    /// The record's packet, delivered once the tail is read.
    desc: Option<XbDesc>,
    kind: TailKind,
}

#[derive(Clone, Copy, Debug)]
enum TailKind {
    /// A pcap record cut to the snapshot length (its captured length).
    PcapRecord { caplen: u32 },
    /// A pcapng block, whose trailing length is checked last.
    Block { len: u32, big_endian: bool },
}

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    /// A packet is pending ([`Parser::pending`]).
    Packet,
    /// A header, a non-packet block or part of a record.
    Other,
}

/// File-level facts, fixed once the header (and for pcapng, the first
/// interface) has been read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Info {
    pub format: CaptureFormat,
    pub link_type: Option<u32>,
    pub link_ext: u32,
    pub snaplen: u32,
    pub precision: TsPrecision,
}

/// The streaming parser (see the module docs).
pub(crate) struct Parser {
    input: Input,
    pub name: String,
    pool: BlockPool,
    block_size: usize,
    cur: Option<BlockRef>,
    /// Stream offset of byte 0 of `cur` (of the bytes from `pos` on).
    base: u64,
    pos: usize,
    filled: usize,
    eof: bool,
    /// Counts block changes, so that a fill holds each block once.
    pub epoch: u64,
    state: State,
    tail: Option<Tail>,
    /// The next packet, parsed and checked, not yet delivered: it lies in
    /// `held` if that is set, else in `cur`.
    pub pending: Option<XbDesc>,
    pub held: Option<BlockRef>,
    /// Inside the first section header block (its errors are file-header errors).
    first_shb: bool,
    info: Info,
    /// `info` is final (the header and first interface were read).
    primed: bool,
    in_port: u16,
}

impl Parser {
    /// A parser of `input` that has read nothing yet.
    pub fn new(input: Input, name: &str, in_port: u16, pool: &BlockPool) -> Parser {
        Parser {
            input,
            name: name.to_string(),
            pool: pool.clone(),
            block_size: pool.block_size(),
            cur: None,
            base: 0,
            pos: 0,
            filled: 0,
            eof: false,
            epoch: 0,
            state: State::Header,
            tail: None,
            pending: None,
            held: None,
            first_shb: false,
            info: Info { format: CaptureFormat::PcapNg, link_type: None, link_ext: 0, snaplen: MAX_CAPLEN, precision: TsPrecision::Micro },
            primed: false,
            in_port,
        }
    }

    /// Reads the file header, and for pcapng the blocks up to the first
    /// interface description (so that [`Parser::info`] is known). A packet
    /// found on the way stays pending.
    pub fn prime(&mut self) -> Result<(), CaptureError> {
        let mode = Mode { block: true, wait: false };
        loop {
            let ready = match &self.state {
                State::Header => false,
                State::Pcap(_) | State::End => true,
                State::Ng(_) => self.info.link_type.is_some(),
            };
            if (ready && self.tail.is_none()) || self.pending.is_some() {
                break;
            }
            match self.step(mode) {
                Ok(_) => {}
                Err(Stop::End) => break,
                Err(Stop::Failed(e)) => return Err(e),
                Err(Stop::Starved | Stop::WouldBlock) => return Err(self.io(io::Error::other("no free block in the buffer pool"))),
            }
        }
        self.primed = true;
        Ok(())
    }

    pub fn in_port(&self) -> u16 {
        self.in_port
    }

    pub fn info(&self) -> Info {
        self.info
    }

    pub fn header(&self) -> PcapHeaderSpec {
        PcapHeaderSpec {
            precision: self.info.precision,
            link_type: self.info.link_type.unwrap_or(LINKTYPE_ETHERNET) | self.info.link_ext,
            snaplen: self.info.snaplen,
        }
    }

    /// Stream offset of the next byte to parse.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// The block being parsed (where the fast path's packets and, unless
    /// `held` is set, the pending packet lie).
    pub fn current_block(&self) -> Option<&BlockRef> {
        self.cur.as_ref()
    }

    /// Whether reads never wait (a regular file).
    pub fn reads_never_block(&self) -> bool {
        self.input.regular()
    }

    /// Parses up to the next packet, which becomes [`Parser::pending`].
    pub fn advance(&mut self, mode: Mode) -> Result<(), Stop> {
        debug_assert!(self.pending.is_none());
        loop {
            if self.step(mode)? == Unit::Packet {
                return Ok(());
            }
        }
    }

    /// Makes the next packet pending (if it is not already) and returns its
    /// descriptor; waits for input and, a while, for a free block.
    pub fn peek(&mut self) -> Result<Option<XbDesc>, Stop> {
        if self.pending.is_none() {
            match self.advance(Mode { block: true, wait: true }) {
                Ok(()) => {}
                Err(Stop::End) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(self.pending)
    }

    /// Starts over from the beginning of a regular file; false for other inputs.
    pub fn rewind(&mut self) -> Result<bool, CaptureError> {
        let Input::File { file, seekable: true, .. } = &mut self.input else {
            return Ok(false);
        };
        if let Err(e) = file.seek(SeekFrom::Start(0)) {
            return Err(self.io(e));
        }
        self.cur = None;
        self.held = None;
        self.pending = None;
        self.tail = None;
        self.base = 0;
        self.pos = 0;
        self.filled = 0;
        self.eof = false;
        self.epoch += 1;
        self.state = State::Header;
        self.first_shb = false;
        Ok(true)
    }

    /// Ends the parse: no more packets, and the block is released.
    pub fn finish(&mut self) {
        self.state = State::End;
        self.tail = None;
        self.pending = None;
        self.held = None;
        self.cur = None;
        self.epoch += 1;
    }

    // -----------------------------------------------------------------------
    // The fast path

    /// Appends to `descs` up to `room` whole, ordinary pcap records that are
    /// already in the block (Ethernet, captured length within the snapshot,
    /// timestamp fraction in range), stopping before the first whose
    /// `(time, in_port)` is not below `until`: that one is left pending,
    /// as [`Parser::advance`] would leave it (its bytes are in the current
    /// block). Anything else is left to [`Parser::advance`]. The caller
    /// holds the current block in the batch.
    #[inline]
    pub fn fill_fast(&mut self, descs: &mut Vec<XbDesc>, room: usize, until: Option<(netvm_vm::Timestamp, u16)>) -> usize {
        let State::Pcap(p) = &self.state else { return 0 };
        if !p.fast || self.tail.is_some() || self.pending.is_some() {
            return 0;
        }
        let Some(cur) = &self.cur else { return 0 };
        let base = cur.as_ptr();
        let (be, nano, limit) = (p.big_endian, p.nanosecond, p.fast_limit);
        let (per_sec, scale) = if nano { (1_000_000_000, 1) } else { (1_000_000, 1000) };
        let in_port = self.in_port;
        let filled = self.filled;
        let mut pos = self.pos;
        let mut k = 0;
        // At most one record per 16 bytes of the window.
        descs.reserve(room.min((filled - pos) / 16));
        while k < room && filled - pos >= 16 {
            // Records are read in a dependent chain (each one's length gives
            // the next one's place): ask for the lines ahead early.
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch has no effect beyond the cache, whatever the address.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(pos + PREFETCH_AHEAD).cast());
            }
            // SAFETY: bytes pos..pos + 16 lie below `filled` (written by
            // read()) and at or above `pos` (handed out to no one).
            let h: [u32; 4] = unsafe { std::ptr::read_unaligned(base.add(pos).cast()) };
            let f = |x: u32| if be { u32::from_be(x) } else { u32::from_le(x) };
            let (sec, frac, caplen, len) = (f(h[0]), f(h[1]), f(h[2]), f(h[3]));
            if caplen > limit || frac >= per_sec || filled - pos - 16 < caplen as usize {
                break;
            }
            let d = XbDesc {
                // SAFETY: pos + 16 + caplen <= filled <= the block's capacity.
                data: unsafe { base.add(pos + 16) },
                caplen,
                wirelen: len,
                ts_sec: u64::from(sec),
                ts_nsec: frac * scale,
                in_port,
                reserved: 0,
                seq: 0,
            };
            pos += 16 + caplen as usize;
            if let Some(u) = until {
                if (d.ts(), in_port) >= u {
                    // Parsed: pending, so that neither the caller's next
                    // look at its time nor its delivery parses it again.
                    self.pending = Some(d);
                    break;
                }
            }
            descs.push(d);
            k += 1;
        }
        self.pos = pos;
        k
    }

    // -----------------------------------------------------------------------
    // Buffer management

    fn io(&self, e: io::Error) -> CaptureError {
        CaptureError::Io { file: self.name.clone(), source: e }
    }

    fn avail(&self) -> usize {
        self.filled - self.pos
    }

    /// The window's bytes `at..at + N` (from `pos`); the caller made them available.
    fn peek_arr<const N: usize>(&self, at: usize) -> [u8; N] {
        debug_assert!(self.pos + at + N <= self.filled);
        let cur = self.cur.as_ref().expect("bytes available imply a block");
        // SAFETY: inside the read, unparsed part of the block.
        arr(unsafe { cur.bytes(self.pos + at, N) }, 0)
    }

    fn window(&self, from: usize, len: usize) -> &[u8] {
        debug_assert!(self.pos + from + len <= self.filled);
        match &self.cur {
            // SAFETY: inside the read, unparsed part of the block.
            Some(cur) => unsafe { cur.bytes(self.pos + from, len) },
            None => &[],
        }
    }

    /// Checks that a record needing `needed` contiguous bytes fits in a block.
    fn fits(&self, needed: u64, start: u64) -> Result<(), Stop> {
        if needed > self.block_size as u64 {
            return Err(Stop::Failed(CaptureError::RecordTooLarge {
                file: self.name.clone(),
                offset: start,
                needed,
                block_size: self.block_size as u64,
            }));
        }
        Ok(())
    }

    /// Makes `k` bytes (at most a block) available from `pos`, reading and
    /// moving to a fresh block as needed; false if the input ends first.
    fn need(&mut self, k: usize, mode: Mode) -> Result<bool, Stop> {
        debug_assert!(k <= self.block_size);
        while self.avail() < k {
            if self.eof {
                return Ok(false);
            }
            let cap = self.cur.as_ref().map_or(0, BlockRef::capacity);
            if self.pos + k > cap {
                self.new_block(mode)?;
                continue;
            }
            if !mode.block && !self.input.regular() {
                return Err(Stop::WouldBlock);
            }
            self.read_more()?;
        }
        Ok(true)
    }

    /// Reads into the rest of the current block.
    fn read_more(&mut self) -> Result<(), Stop> {
        let cur = self.cur.as_ref().expect("reading needs a block");
        let room = cur.capacity() - self.filled;
        // SAFETY: bytes from `filled` on lie past every descriptor handed out
        // (they point below `pos <= filled`) and past the pending packet.
        let buf = unsafe { cur.spare_mut(self.filled, room) };
        match self.input.read(buf) {
            Ok(0) => self.eof = true,
            Ok(n) => self.filled += n,
            Err(e) => return Err(Stop::Failed(self.io(e))),
        }
        Ok(())
    }

    /// Moves the unparsed bytes to a fresh block.
    fn new_block(&mut self, mode: Mode) -> Result<(), Stop> {
        let fresh = match self.pool.try_take() {
            Some(b) => b,
            None if mode.wait => match self.pool.take_wait(Some(PEEK_WAIT)) {
                Some(b) => b,
                None => {
                    let e = io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no free block in the buffer pool (every block is held by packets in flight)",
                    );
                    return Err(Stop::Failed(self.io(e)));
                }
            },
            None => return Err(Stop::Starved),
        };
        let keep = self.avail();
        if keep > 0 {
            let cur = self.cur.as_ref().expect("bytes available imply a block");
            // SAFETY: the source range is read, unparsed bytes of the old block;
            // the destination is the start of a block just taken from the pool
            // (no one else refers to it), and `keep` fits (records are checked
            // against the block size before they are made available).
            unsafe { std::ptr::copy_nonoverlapping(cur.as_ptr().add(self.pos), fresh.as_ptr(), keep) };
        }
        let old = self.cur.replace(fresh);
        if self.tail.is_some_and(|t| t.desc.is_some()) {
            debug_assert!(self.held.is_none());
            self.held = old;
        }
        self.base += self.pos as u64;
        self.filled = keep;
        self.pos = 0;
        self.epoch += 1;
        Ok(())
    }

    // -----------------------------------------------------------------------
    // Parsing

    /// Parses one unit: a header, a record or block, or the tail of one.
    fn step(&mut self, mode: Mode) -> Result<Unit, Stop> {
        let r = if self.tail.is_some() {
            self.finish_tail(mode)
        } else {
            match self.state {
                State::Header => self.file_header(mode),
                State::Pcap(p) => self.pcap_record(p, mode),
                State::Ng(_) => self.ng_block(mode),
                State::End => Err(Stop::End),
            }
        };
        match r {
            Err(Stop::Failed(e)) => {
                let e = if self.first_shb { file_header_error(e) } else { e };
                self.finish();
                Err(Stop::Failed(e))
            }
            Err(Stop::End) => {
                self.finish();
                Err(Stop::End)
            }
            other => other,
        }
    }

    fn file_header(&mut self, mode: Mode) -> Result<Unit, Stop> {
        if !self.need(4, mode)? {
            let got = self.window(0, self.avail()).to_vec();
            let truncated = PCAP_MAGICS.iter().chain([&PCAPNG_SHB]).any(|m| m[..got.len()] == got[..]);
            return Err(Stop::Failed(if truncated {
                CaptureError::TruncatedFileHeader { file: self.name.clone(), needed: 4, got: got.len() as u64 }
            } else {
                CaptureError::NotCapture { file: self.name.clone(), magic: hex(&got) }
            }));
        }
        let magic: [u8; 4] = self.peek_arr(0);
        if magic == PCAPNG_SHB {
            self.state = State::Ng(NgState { big_endian: false, interfaces: Vec::new() });
            self.first_shb = true;
            if !self.primed {
                self.info.format = CaptureFormat::PcapNg;
            }
            return self.section_header(mode);
        }
        if !PCAP_MAGICS.contains(&magic) {
            return Err(Stop::Failed(CaptureError::NotCapture { file: self.name.clone(), magic: hex(&magic) }));
        }
        if !self.need(24, mode)? {
            return Err(Stop::Failed(CaptureError::TruncatedFileHeader { file: self.name.clone(), needed: 24, got: self.avail() as u64 }));
        }
        let h: [u8; 24] = self.peek_arr(0);
        let be = magic[0] == 0xA1;
        let nanosecond = magic == [0x4D, 0x3C, 0xB2, 0xA1] || magic == [0xA1, 0xB2, 0x3C, 0x4D];
        let major = rd16(arr(&h, 4), be);
        let minor = rd16(arr(&h, 6), be);
        let corrupt = |detail: String| Stop::Failed(CaptureError::Corrupt { file: self.name.clone(), offset: 0, detail });
        if major < 2 {
            return Err(corrupt(format!("archaic pcap savefile format (version {major}.{minor})")));
        }
        if !((major == 2 && minor <= 4) || (major == 543 && minor == 0)) {
            return Err(corrupt(format!("unsupported pcap savefile version {major}.{minor}")));
        }
        let raw_link = rd32(arr(&h, 20), be);
        let link_type = raw_link & LINKTYPE_MASK;
        let snapshot = adjust_snapshot(link_type, rd32(arr(&h, 16), be));
        let swap = match (major, minor) {
            (2, 0..=2) | (543, _) => LengthSwap::Yes,
            (2, 3) => LengthSwap::Maybe,
            _ => LengthSwap::No,
        };
        let fast = link_type == LINKTYPE_ETHERNET && swap == LengthSwap::No;
        self.state =
            State::Pcap(PcapState { big_endian: be, nanosecond, link_type, snapshot, swap, fast, fast_limit: snapshot.min(MAX_CAPLEN) });
        if !self.primed {
            self.info = Info {
                format: CaptureFormat::Pcap { nanosecond, big_endian: be },
                link_type: Some(link_type),
                link_ext: raw_link & !LINKTYPE_MASK,
                snaplen: snapshot,
                precision: if nanosecond { TsPrecision::Nano } else { TsPrecision::Micro },
            };
        }
        self.pos += 24;
        Ok(Unit::Other)
    }

    fn pcap_record(&mut self, p: PcapState, mode: Mode) -> Result<Unit, Stop> {
        if p.link_type != LINKTYPE_ETHERNET {
            return Err(Stop::Failed(CaptureError::UnsupportedLinkType { file: self.name.clone(), offset: 20, link_type: p.link_type }));
        }
        let start = self.offset();
        if !self.need(16, mode)? {
            let got = self.avail() as u64;
            if got == 0 {
                return Err(Stop::End);
            }
            return Err(Stop::Failed(CaptureError::TruncatedRecordHeader { file: self.name.clone(), offset: start, needed: 16, got }));
        }
        let h: [u8; 16] = self.peek_arr(0);
        let be = p.big_endian;
        let sec = rd32(arr(&h, 0), be);
        let frac = rd32(arr(&h, 4), be);
        let mut caplen = rd32(arr(&h, 8), be);
        let mut len = rd32(arr(&h, 12), be);
        if p.swap == LengthSwap::Yes || (p.swap == LengthSwap::Maybe && caplen > len) {
            std::mem::swap(&mut caplen, &mut len);
        }
        if caplen > MAX_CAPLEN {
            return Err(Stop::Failed(CaptureError::CaplenTooLarge { file: self.name.clone(), offset: start, caplen, max: MAX_CAPLEN }));
        }
        let kept = caplen.min(p.snapshot);
        self.fits(16 + u64::from(kept), start)?;
        if !self.need(16 + kept as usize, mode)? {
            let remain = (self.avail() - 16) as u64;
            return Err(Stop::Failed(CaptureError::TruncatedRecord { file: self.name.clone(), offset: start, caplen, remain }));
        }
        let ts = if p.nanosecond { normalize(sec, frac, 1_000_000_000) } else { normalize(sec, frac, 1_000_000) };
        let desc = self.desc_at(16, kept, len, ts);
        self.pos += 16 + kept as usize;
        if kept < caplen {
            self.tail = Some(Tail { start, skip: u64::from(caplen - kept), desc: Some(desc), kind: TailKind::PcapRecord { caplen } });
            return Ok(Unit::Other);
        }
        self.pending = Some(desc);
        Ok(Unit::Packet)
    }

    /// A descriptor of the `caplen` bytes at `at` in the window.
    fn desc_at(&self, at: usize, caplen: u32, wirelen: u32, ts: netvm_vm::Timestamp) -> XbDesc {
        let cur = self.cur.as_ref().expect("a parsed record lies in a block");
        XbDesc {
            // SAFETY: the record's bytes are in the block (the caller made them available).
            data: unsafe { cur.as_ptr().add(self.pos + at) },
            caplen,
            wirelen,
            ts_sec: ts.sec,
            ts_nsec: ts.nsec,
            in_port: self.in_port,
            reserved: 0,
            seq: 0,
        }
    }

    /// Skips what is left of a record, checks a pcapng block's trailing
    /// length, and delivers the record's packet.
    fn finish_tail(&mut self, mode: Mode) -> Result<Unit, Stop> {
        loop {
            let t = self.tail.as_mut().expect("a tail to finish");
            if t.skip == 0 {
                break;
            }
            let avail = (self.filled - self.pos) as u64;
            if avail > 0 {
                let k = avail.min(t.skip);
                t.skip -= k;
                self.pos += k as usize;
                continue;
            }
            if self.eof {
                return Err(Stop::Failed(self.tail_truncated()));
            }
            if !mode.block && !self.input.regular() {
                return Err(Stop::WouldBlock);
            }
            let room = self.cur.as_ref().map_or(0, |c| c.capacity() - self.filled);
            if room >= 64 * 1024 {
                // Read into the block: what follows the skipped bytes is kept.
                self.read_more()?;
            } else {
                // Too little room to read into: read exactly what is skipped, elsewhere.
                let mut scratch = [0u8; 4096];
                let want = t.skip.min(scratch.len() as u64) as usize;
                match self.input.read(&mut scratch[..want]) {
                    Ok(0) => self.eof = true,
                    Ok(n) => {
                        t.skip -= n as u64;
                        // The stream moved on without the block: so does its offset.
                        self.base += n as u64;
                    }
                    Err(e) => return Err(Stop::Failed(self.io(e))),
                }
            }
        }
        let t = self.tail.expect("a tail to finish");
        if let TailKind::Block { len, big_endian } = t.kind {
            if !self.need(4, mode)? {
                return Err(Stop::Failed(self.tail_truncated()));
            }
            let trailer = rd32(self.peek_arr(0), big_endian);
            if trailer != len {
                return Err(Stop::Failed(self.bad_len(t.start, len, format!("the trailing block length is {trailer}"))));
            }
            self.pos += 4;
        }
        self.tail = None;
        self.first_shb = false;
        match t.desc {
            Some(d) => {
                self.pending = Some(d);
                Ok(Unit::Packet)
            }
            None => Ok(Unit::Other),
        }
    }

    /// The input ended inside the tail of a record.
    fn tail_truncated(&self) -> CaptureError {
        let t = self.tail.expect("a tail");
        let end = self.base + self.filled as u64;
        match t.kind {
            TailKind::PcapRecord { caplen } => {
                CaptureError::TruncatedRecord { file: self.name.clone(), offset: t.start, caplen, remain: end - t.start - 16 }
            }
            TailKind::Block { len, .. } => self.truncated_block(t.start, len),
        }
    }

    /// The block at `start` ends early: report how much of it the input holds.
    fn truncated_block(&self, start: u64, block_len: u32) -> CaptureError {
        let remain = self.base + self.filled as u64 - start;
        CaptureError::TruncatedBlock { file: self.name.clone(), offset: start, block_len, remain }
    }

    fn corrupt(&self, offset: u64, detail: String) -> CaptureError {
        CaptureError::Corrupt { file: self.name.clone(), offset, detail }
    }

    fn bad_len(&self, offset: u64, block_len: u32, reason: String) -> CaptureError {
        CaptureError::BadBlockLength { file: self.name.clone(), offset, block_len, reason }
    }

    /// Checks a block length: at least `min`, a multiple of 4.
    fn check_len(&self, start: u64, len: u32, min: u32) -> Result<(), Stop> {
        if len < min {
            return Err(Stop::Failed(self.bad_len(start, len, format!("less than the minimum {min} for this block type"))));
        }
        if !len.is_multiple_of(4) {
            return Err(Stop::Failed(self.bad_len(start, len, "not a multiple of 4".to_string())));
        }
        Ok(())
    }

    fn ng(&mut self) -> &mut NgState {
        match &mut self.state {
            State::Ng(ng) => ng,
            _ => unreachable!("a pcapng block outside a pcapng file"),
        }
    }

    /// A Section Header Block at `pos`.
    fn section_header(&mut self, mode: Mode) -> Result<Unit, Stop> {
        let start = self.offset();
        if !self.need(12, mode)? {
            let got = self.avail() as u64;
            return Err(Stop::Failed(CaptureError::TruncatedRecordHeader { file: self.name.clone(), offset: start, needed: 12, got }));
        }
        let big_endian = match self.peek_arr::<4>(8) {
            [0x1A, 0x2B, 0x3C, 0x4D] => true,
            [0x4D, 0x3C, 0x2B, 0x1A] => false,
            other => return Err(Stop::Failed(self.corrupt(start, format!("section header has bad byte-order magic {}", hex(&other))))),
        };
        let len = rd32(self.peek_arr(4), big_endian);
        self.check_len(start, len, 28)?;
        if !self.need(24, mode)? {
            return Err(Stop::Failed(self.truncated_block(start, len)));
        }
        let major = rd16(self.peek_arr(12), big_endian);
        let minor = rd16(self.peek_arr(14), big_endian);
        if major != 1 {
            return Err(Stop::Failed(self.corrupt(start, format!("unsupported pcapng version {major}.{minor}"))));
        }
        let ng = self.ng();
        ng.big_endian = big_endian;
        ng.interfaces.clear();
        self.pos += 24;
        self.tail = Some(Tail { start, skip: u64::from(len) - 28, desc: None, kind: TailKind::Block { len, big_endian } });
        Ok(Unit::Other)
    }

    fn ng_block(&mut self, mode: Mode) -> Result<Unit, Stop> {
        let start = self.offset();
        if !self.need(8, mode)? {
            let got = self.avail() as u64;
            if got == 0 {
                return Err(Stop::End);
            }
            return Err(Stop::Failed(CaptureError::TruncatedRecordHeader { file: self.name.clone(), offset: start, needed: 8, got }));
        }
        if self.peek_arr::<4>(0) == PCAPNG_SHB {
            return self.section_header(mode);
        }
        let be = self.ng().big_endian;
        let block_type = rd32(self.peek_arr(0), be);
        let len = rd32(self.peek_arr(4), be);
        let min = match block_type {
            BLOCK_IDB => 20,
            BLOCK_PB | BLOCK_EPB => 32,
            BLOCK_SPB => 16,
            _ => 12,
        };
        self.check_len(start, len, min)?;
        match block_type {
            BLOCK_IDB => self.interface_block(start, len, be, mode),
            BLOCK_PB | BLOCK_EPB => self.packet_block(start, len, be, block_type == BLOCK_PB, mode),
            BLOCK_SPB => self.simple_packet_block(start, len, be, mode),
            _ => {
                self.pos += 8;
                self.tail = Some(Tail { start, skip: u64::from(len) - 12, desc: None, kind: TailKind::Block { len, big_endian: be } });
                Ok(Unit::Other)
            }
        }
    }

    /// Makes a whole block of `len` bytes at `start` available and checks its trailing length.
    fn whole_block(&mut self, start: u64, len: u32, be: bool, mode: Mode) -> Result<(), Stop> {
        if !self.need(len as usize, mode)? {
            return Err(Stop::Failed(self.truncated_block(start, len)));
        }
        let trailer = rd32(self.peek_arr(len as usize - 4), be);
        if trailer != len {
            return Err(Stop::Failed(self.bad_len(start, len, format!("the trailing block length is {trailer}"))));
        }
        Ok(())
    }

    fn interface_block(&mut self, start: u64, len: u32, be: bool, mode: Mode) -> Result<Unit, Stop> {
        if len > MAX_IDB_LEN {
            return Err(Stop::Failed(self.bad_len(start, len, format!("interface description block larger than {MAX_IDB_LEN} bytes"))));
        }
        self.fits(u64::from(len), start)?;
        self.whole_block(start, len, be, mode)?;
        if self.ng().interfaces.len() >= MAX_INTERFACES {
            return Err(Stop::Failed(self.corrupt(start, format!("more than {MAX_INTERFACES} interfaces in one section"))));
        }
        let iface = Interface::parse(self.window(8, len as usize - 12), be).map_err(|d| self.corrupt(start, d))?;
        self.ng().interfaces.push(iface);
        if !self.primed && self.info.link_type.is_none() {
            self.info.link_type = Some(iface.link_type);
            self.info.snaplen = adjust_snapshot(iface.link_type, iface.snaplen);
            self.info.precision = if iface.units_per_sec > 1_000_000 { TsPrecision::Nano } else { TsPrecision::Micro };
        }
        self.pos += len as usize;
        Ok(Unit::Other)
    }

    /// The interface a packet block names, if it is described and Ethernet.
    fn packet_interface(&mut self, start: u64, id: u32, what: &str) -> Result<Interface, Stop> {
        let count = self.ng().interfaces.len();
        let Some(iface) = self.ng().interfaces.get(id as usize).copied() else {
            return Err(Stop::Failed(self.corrupt(start, format!("{what} names interface {id}, but only {count} are described"))));
        };
        if iface.link_type != LINKTYPE_ETHERNET {
            return Err(Stop::Failed(CaptureError::UnsupportedLinkType {
                file: self.name.clone(),
                offset: start,
                link_type: iface.link_type,
            }));
        }
        Ok(iface)
    }

    /// Enhanced Packet Block, or with `obsolete` the old Packet Block (16-bit interface id).
    fn packet_block(&mut self, start: u64, len: u32, be: bool, obsolete: bool, mode: Mode) -> Result<Unit, Stop> {
        if !self.need(28, mode)? {
            return Err(Stop::Failed(self.truncated_block(start, len)));
        }
        let fixed: [u8; 20] = self.peek_arr(8);
        let id = if obsolete { u32::from(rd16(arr(&fixed, 0), be)) } else { rd32(arr(&fixed, 0), be) };
        let what = if obsolete { "packet block" } else { "enhanced packet block" };
        let iface = self.packet_interface(start, id, what)?;
        let ts_units = (u64::from(rd32(arr(&fixed, 4), be)) << 32) | u64::from(rd32(arr(&fixed, 8), be));
        let caplen = rd32(arr(&fixed, 12), be);
        let orig_len = rd32(arr(&fixed, 16), be);
        if caplen > MAX_CAPLEN {
            return Err(Stop::Failed(CaptureError::CaplenTooLarge { file: self.name.clone(), offset: start, caplen, max: MAX_CAPLEN }));
        }
        if 32 + u64::from(caplen).next_multiple_of(4) > u64::from(len) {
            return Err(Stop::Failed(self.corrupt(start, format!("captured length {caplen} does not fit in a block of {len} bytes"))));
        }
        self.packet_data(start, len, be, 28, caplen, orig_len, iface.timestamp(ts_units), mode)
    }

    fn simple_packet_block(&mut self, start: u64, len: u32, be: bool, mode: Mode) -> Result<Unit, Stop> {
        let iface = self.packet_interface(start, 0, "simple packet block")?;
        if !self.need(12, mode)? {
            return Err(Stop::Failed(self.truncated_block(start, len)));
        }
        let orig_len = rd32(self.peek_arr(8), be);
        let mut caplen = orig_len.min(len - 16);
        if iface.snaplen != 0 {
            caplen = caplen.min(iface.snaplen);
        }
        if caplen > MAX_CAPLEN {
            return Err(Stop::Failed(CaptureError::CaplenTooLarge { file: self.name.clone(), offset: start, caplen, max: MAX_CAPLEN }));
        }
        self.packet_data(start, len, be, 12, caplen, orig_len, netvm_vm::Timestamp::default(), mode)
    }

    /// The packet of a packet block whose data starts `head` bytes into the block.
    #[allow(clippy::too_many_arguments)]
    fn packet_data(
        &mut self,
        start: u64,
        len: u32,
        be: bool,
        head: usize,
        caplen: u32,
        wirelen: u32,
        ts: netvm_vm::Timestamp,
        mode: Mode,
    ) -> Result<Unit, Stop> {
        if len as usize <= self.block_size {
            // The whole block, options and trailer included, in one piece.
            self.whole_block(start, len, be, mode)?;
            let desc = self.desc_at(head, caplen, wirelen, ts);
            self.pos += len as usize;
            self.pending = Some(desc);
            return Ok(Unit::Packet);
        }
        // A block larger than a buffer block: the packet in the block, the rest skipped.
        self.fits(head as u64 + u64::from(caplen), start)?;
        if !self.need(head + caplen as usize, mode)? {
            return Err(Stop::Failed(self.truncated_block(start, len)));
        }
        let desc = self.desc_at(head, caplen, wirelen, ts);
        self.pos += head + caplen as usize;
        let skip = u64::from(len) - head as u64 - u64::from(caplen) - 4;
        self.tail = Some(Tail { start, skip, desc: Some(desc), kind: TailKind::Block { len, big_endian: be } });
        Ok(Unit::Other)
    }
}

/// An error inside the first section header block, as a file-header error.
fn file_header_error(e: CaptureError) -> CaptureError {
    match e {
        CaptureError::TruncatedRecordHeader { file, needed, got, .. } => CaptureError::TruncatedFileHeader { file, needed, got },
        CaptureError::TruncatedBlock { file, block_len, remain, .. } => {
            CaptureError::TruncatedFileHeader { file, needed: u64::from(block_len), got: remain }
        }
        other => other,
    }
}

impl std::fmt::Debug for Parser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parser")
            .field("name", &self.name)
            .field("format", &self.info.format)
            .field("link_type", &self.info.link_type)
            .field("offset", &self.offset())
            .field("block_size", &self.block_size)
            .finish()
    }
}
