//! [`CaptureReader`]: a streaming reader of pcap and pcapng files.
//!
//! The reader does its own framing: it reads each record header, checks the
//! lengths it claims against the limits and against what the file holds, and
//! only then reads the record, so that every error names the byte offset of
//! the bad record and no header can make it allocate more than
//! [`MAX_CAPLEN`] bytes. The pcap file header is decoded by
//! `pcap_file::pcap::PcapHeader`; records and pcapng blocks are decoded here
//! rather than by pcap-file 2.0.0's readers, which buffer 8 MB per reader,
//! report no offsets, reject records whose original length exceeds the
//! snaplen (an ordinary snaplen-68 capture: 181 of the 785 pcap files of the
//! tcpdump test corpus fail that way), read every Enhanced Packet Block
//! timestamp as nanoseconds whatever the interface's `if_tsresol` (the
//! default is microseconds), and reject valid pcapng options (an `if_tzone`
//! must be 1 byte long, option strings must be UTF-8).

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::iter::FusedIterator;
use std::path::Path;

use netvm_vm::{Packet, Timestamp};
use pcap_file::pcap::PcapHeader;
use pcap_file::{Endianness, TsResolution};

use crate::error::CaptureError;
use crate::linktype::LINKTYPE_ETHERNET;

/// The largest captured length accepted in a record (256 KiB, libpcap's
/// `MAXIMUM_SNAPLEN`). A record claiming more is an error
/// ([`CaptureError::CaplenTooLarge`]) whatever the file's snaplen says.
pub const MAX_CAPLEN: u32 = 256 * 1024;

/// The largest pcapng Interface Description Block accepted (it is buffered to
/// read its options). Other non-packet blocks are skipped without buffering.
const MAX_IDB_LEN: u32 = 64 * 1024;

/// The most interfaces one pcapng section may describe.
const MAX_INTERFACES: usize = 4096;

/// Bits of the pcap header's link-type field that hold the link type
/// (libpcap's `LT_LINKTYPE`); the upper bits carry FCS information.
const LINKTYPE_MASK: u32 = 0x03FF_FFFF;

const PCAPNG_SHB: [u8; 4] = [0x0A, 0x0D, 0x0D, 0x0A];
const BLOCK_IDB: u32 = 1;
const BLOCK_PB: u32 = 2;
const BLOCK_SPB: u32 = 3;
const BLOCK_EPB: u32 = 6;

/// The format of a capture file, detected from its magic number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureFormat {
    /// Classic pcap.
    Pcap {
        /// Timestamps have nanosecond resolution (magic `a1b23c4d`), else microsecond.
        nanosecond: bool,
        /// Headers are big-endian.
        big_endian: bool,
    },
    /// pcapng.
    PcapNg,
}

/// A streaming reader of a pcap or pcapng capture file, yielding its packets.
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
/// - `Packet::data` is the captured bytes, `wire_len` the original length;
///   a record whose captured length exceeds its original length keeps its
///   data and gets `wire_len` = captured length.
/// - Timestamps: pcap microseconds become `usec * 1000` ns; a fraction out
///   of range (µs ≥ 1 000 000 or ns ≥ 10^9, as in hand-edited or fuzzed
///   files) is normalized by carrying whole seconds into `sec`, not reported.
///   pcapng timestamps honour the interface's `if_tsresol` (10^-n or 2^-n,
///   default 10^-6, truncated to whole nanoseconds) and `if_tsoffset`.
///   Simple Packet Blocks have no timestamp and get time zero.
/// - `in_port` is 0 unless set with [`CaptureReader::with_in_port`].
///
/// Memory is bounded: a read buffer of 64 KiB, the current record (at most
/// [`MAX_CAPLEN`] bytes of packet, or a 64 KiB interface block), and at most
/// 4096 interface descriptions per pcapng section.
pub struct CaptureReader {
    src: Source,
    state: State,
    in_port: u16,
    done: bool,
}

/// The byte stream with the count of bytes consumed.
struct Source {
    inner: Box<dyn Read + Send>,
    name: String,
    offset: u64,
}

enum State {
    Pcap(PcapState),
    PcapNg(NgState),
}

struct PcapState {
    big_endian: bool,
    nanosecond: bool,
    link_type: u32,
}

struct NgState {
    big_endian: bool,
    interfaces: Vec<Interface>,
    first_link_type: Option<u32>,
    pending: Option<Packet>,
}

#[derive(Clone, Copy, Debug)]
struct Interface {
    link_type: u32,
    snaplen: u32,
    /// Timestamp units per second (from if_tsresol).
    units_per_sec: u64,
    /// Seconds added to every timestamp (if_tsoffset).
    offset_sec: i64,
}

/// What one pcapng block turned out to be.
enum Block {
    Packet(Packet),
    Interface,
    Other,
    Eof,
}

impl Source {
    fn io(&self, e: io::Error) -> CaptureError {
        CaptureError::Io { file: self.name.clone(), source: e }
    }

    /// Reads until `buf` is full or the end of the file; returns the count read.
    fn read_full(&mut self, buf: &mut [u8]) -> Result<usize, CaptureError> {
        let mut n = 0;
        while n < buf.len() {
            match self.inner.read(&mut buf[n..]) {
                Ok(0) => break,
                // `min` guards against a reader that misreports its count.
                Ok(k) => n += k.min(buf.len() - n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.offset += n as u64;
                    return Err(self.io(e));
                }
            }
        }
        self.offset += n as u64;
        Ok(n)
    }

    /// Discards up to `n` bytes; returns the count discarded (less at end of file).
    fn skip(&mut self, n: u64) -> Result<u64, CaptureError> {
        match io::copy(&mut (&mut self.inner).take(n), &mut io::sink()) {
            Ok(k) => {
                self.offset += k;
                Ok(k)
            }
            Err(e) => Err(self.io(e)),
        }
    }

    fn corrupt(&self, offset: u64, detail: String) -> CaptureError {
        CaptureError::Corrupt { file: self.name.clone(), offset, detail }
    }

    fn bad_len(&self, offset: u64, block_len: u32, reason: String) -> CaptureError {
        CaptureError::BadBlockLength { file: self.name.clone(), offset, block_len, reason }
    }

    /// The block at `start` ends early: report how much of it the file holds.
    fn truncated_block(&self, start: u64, block_len: u32) -> CaptureError {
        CaptureError::TruncatedBlock { file: self.name.clone(), offset: start, block_len, remain: self.offset - start }
    }
}

fn rd16(b: [u8; 2], be: bool) -> u16 {
    if be {
        u16::from_be_bytes(b)
    } else {
        u16::from_le_bytes(b)
    }
}

fn rd32(b: [u8; 4], be: bool) -> u32 {
    if be {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    }
}

/// Bytes `at..at + N` of `b` as an array; zeros if out of range (callers check lengths first).
fn arr<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(s) = b.get(at..at + N) {
        out.copy_from_slice(s);
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
}

/// `sec` plus a fraction counted in `per_sec` units, normalized.
fn normalize(sec: u32, frac: u32, per_sec: u32) -> Timestamp {
    let carry = u64::from(frac / per_sec);
    let rest = frac % per_sec;
    Timestamp { sec: u64::from(sec) + carry, nsec: rest * (1_000_000_000 / per_sec) }
}

impl Interface {
    fn timestamp(&self, units: u64) -> Timestamp {
        let ups = self.units_per_sec.max(1);
        let sec = units / ups;
        let frac = units % ups;
        // frac < ups, so the quotient is < 10^9.
        let nsec = (u128::from(frac) * 1_000_000_000 / u128::from(ups)) as u32;
        let sec = if self.offset_sec >= 0 {
            sec.saturating_add(self.offset_sec.unsigned_abs())
        } else {
            sec.saturating_sub(self.offset_sec.unsigned_abs())
        };
        Timestamp { sec, nsec }
    }
}

impl CaptureReader {
    /// Opens a capture file and reads its header(s): the pcap file header, or
    /// the pcapng section header and the blocks up to the first interface
    /// description.
    pub fn open(path: &Path) -> Result<CaptureReader, CaptureError> {
        let name = path.display().to_string();
        let file = File::open(path).map_err(|e| CaptureError::Io { file: name.clone(), source: e })?;
        CaptureReader::from_reader(file, &name)
    }

    /// Reads a capture from any byte stream (it is buffered here); `name`
    /// names it in errors. Reads the header(s) as [`CaptureReader::open`] does.
    pub fn from_reader<R: Read + Send + 'static>(reader: R, name: &str) -> Result<CaptureReader, CaptureError> {
        let mut src = Source { inner: Box::new(BufReader::with_capacity(64 * 1024, reader)), name: name.to_string(), offset: 0 };
        let mut magic = [0u8; 4];
        let got = src.read_full(&mut magic)?;
        let known: [[u8; 4]; 5] =
            [[0xD4, 0xC3, 0xB2, 0xA1], [0xA1, 0xB2, 0xC3, 0xD4], [0x4D, 0x3C, 0xB2, 0xA1], [0xA1, 0xB2, 0x3C, 0x4D], PCAPNG_SHB];
        if got < 4 {
            return Err(if known.iter().any(|m| m[..got] == magic[..got]) {
                CaptureError::TruncatedFileHeader { file: src.name.clone(), needed: 4, got: got as u64 }
            } else {
                CaptureError::NotCapture { file: src.name.clone(), magic: hex(&magic[..got]) }
            });
        }
        if magic == PCAPNG_SHB {
            return CaptureReader::open_pcapng(src);
        }
        if !known.contains(&magic) {
            return Err(CaptureError::NotCapture { file: src.name.clone(), magic: hex(&magic) });
        }
        let mut header = [0u8; 24];
        header[..4].copy_from_slice(&magic);
        let got = src.read_full(&mut header[4..])?;
        if got < 20 {
            return Err(CaptureError::TruncatedFileHeader { file: src.name.clone(), needed: 24, got: 4 + got as u64 });
        }
        let parsed = PcapHeader::from_slice(&header).map_err(|e| src.corrupt(0, format!("bad pcap file header: {e}")))?.1;
        let big_endian = parsed.endianness == Endianness::Big;
        let state = PcapState {
            big_endian,
            nanosecond: parsed.ts_resolution == TsResolution::NanoSecond,
            link_type: rd32(arr(&header, 20), big_endian) & LINKTYPE_MASK,
        };
        Ok(CaptureReader { src, state: State::Pcap(state), in_port: 0, done: false })
    }

    fn open_pcapng(mut src: Source) -> Result<CaptureReader, CaptureError> {
        let mut state = NgState { big_endian: false, interfaces: Vec::new(), first_link_type: None, pending: None };
        let mut head = [0u8; 8];
        head[..4].copy_from_slice(&PCAPNG_SHB);
        let got = src.read_full(&mut head[4..])?;
        if got < 4 {
            return Err(CaptureError::TruncatedFileHeader { file: src.name.clone(), needed: 12, got: 4 + got as u64 });
        }
        state.read_shb(&mut src, 0, head).map_err(|e| match e {
            CaptureError::TruncatedRecordHeader { file, needed, got, .. } => CaptureError::TruncatedFileHeader { file, needed, got },
            CaptureError::TruncatedBlock { file, block_len, remain, .. } => {
                CaptureError::TruncatedFileHeader { file, needed: u64::from(block_len), got: remain }
            }
            other => other,
        })?;
        // Read ahead to the first interface description, so that link_type() is known.
        while state.interfaces.is_empty() {
            match state.read_block(&mut src)? {
                Block::Interface | Block::Eof => break,
                Block::Packet(p) => {
                    state.pending = Some(p);
                    break;
                }
                Block::Other => {}
            }
        }
        Ok(CaptureReader { src, state: State::PcapNg(state), in_port: 0, done: false })
    }

    /// Sets the `in_port` given to every packet read (default 0).
    pub fn with_in_port(mut self, in_port: u16) -> CaptureReader {
        self.in_port = in_port;
        self
    }

    /// The link type (LINKTYPE_* value) of the packets: the pcap file header's,
    /// or for pcapng the first interface's; `None` for a pcapng file that
    /// describes no interface before its first packet or its end.
    pub fn link_type(&self) -> Option<u32> {
        match &self.state {
            State::Pcap(s) => Some(s.link_type),
            State::PcapNg(s) => s.first_link_type,
        }
    }

    /// The detected file format.
    pub fn format(&self) -> CaptureFormat {
        match &self.state {
            State::Pcap(s) => CaptureFormat::Pcap { nanosecond: s.nanosecond, big_endian: s.big_endian },
            State::PcapNg(_) => CaptureFormat::PcapNg,
        }
    }

    /// The name given to the file in errors.
    pub fn name(&self) -> &str {
        &self.src.name
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

    /// Bytes consumed from the start of the file so far.
    pub fn offset(&self) -> u64 {
        self.src.offset
    }
}

impl PcapState {
    fn next_packet(&mut self, src: &mut Source) -> Result<Option<Packet>, CaptureError> {
        if self.link_type != LINKTYPE_ETHERNET {
            return Err(CaptureError::UnsupportedLinkType { file: src.name.clone(), offset: 20, link_type: self.link_type });
        }
        let start = src.offset;
        let mut h = [0u8; 16];
        let got = src.read_full(&mut h)?;
        if got == 0 {
            return Ok(None);
        }
        if got < 16 {
            return Err(CaptureError::TruncatedRecordHeader { file: src.name.clone(), offset: start, needed: 16, got: got as u64 });
        }
        let be = self.big_endian;
        let ts_sec = rd32(arr(&h, 0), be);
        let ts_frac = rd32(arr(&h, 4), be);
        let caplen = rd32(arr(&h, 8), be);
        let orig_len = rd32(arr(&h, 12), be);
        if caplen > MAX_CAPLEN {
            return Err(CaptureError::CaplenTooLarge { file: src.name.clone(), offset: start, caplen, max: MAX_CAPLEN });
        }
        let mut data = vec![0u8; caplen as usize];
        let got = src.read_full(&mut data)?;
        if got < data.len() {
            return Err(CaptureError::TruncatedRecord { file: src.name.clone(), offset: start, caplen, remain: got as u64 });
        }
        let ts = if self.nanosecond { normalize(ts_sec, ts_frac, 1_000_000_000) } else { normalize(ts_sec, ts_frac, 1_000_000) };
        Ok(Some(Packet { data, wire_len: orig_len.max(caplen), ts, in_port: 0 }))
    }
}

impl NgState {
    fn next_packet(&mut self, src: &mut Source) -> Result<Option<Packet>, CaptureError> {
        if let Some(p) = self.pending.take() {
            return Ok(Some(p));
        }
        loop {
            match self.read_block(src)? {
                Block::Packet(p) => return Ok(Some(p)),
                Block::Eof => return Ok(None),
                Block::Interface | Block::Other => {}
            }
        }
    }

    /// Reads the next block, whole (trailing length included).
    fn read_block(&mut self, src: &mut Source) -> Result<Block, CaptureError> {
        let start = src.offset;
        let mut h = [0u8; 8];
        let got = src.read_full(&mut h)?;
        if got == 0 {
            return Ok(Block::Eof);
        }
        if got < 8 {
            return Err(CaptureError::TruncatedRecordHeader { file: src.name.clone(), offset: start, needed: 8, got: got as u64 });
        }
        if arr::<4>(&h, 0) == PCAPNG_SHB {
            self.read_shb(src, start, h)?;
            return Ok(Block::Other);
        }
        let be = self.big_endian;
        let block_type = rd32(arr(&h, 0), be);
        let len = rd32(arr(&h, 4), be);
        let min = match block_type {
            BLOCK_IDB => 20,
            BLOCK_PB | BLOCK_EPB => 32,
            BLOCK_SPB => 16,
            _ => 12,
        };
        check_len(src, start, len, min)?;
        match block_type {
            BLOCK_IDB => {
                self.read_idb(src, start, len)?;
                Ok(Block::Interface)
            }
            BLOCK_PB | BLOCK_EPB => self.read_epb(src, start, len, block_type == BLOCK_PB).map(Block::Packet),
            BLOCK_SPB => self.read_spb(src, start, len).map(Block::Packet),
            _ => {
                let body = u64::from(len) - 12;
                if src.skip(body)? < body {
                    return Err(src.truncated_block(start, len));
                }
                self.read_trailer(src, start, len)?;
                Ok(Block::Other)
            }
        }
    }

    /// Reads a Section Header Block whose first 8 bytes (`head`) were read at `start`.
    fn read_shb(&mut self, src: &mut Source, start: u64, head: [u8; 8]) -> Result<(), CaptureError> {
        let mut fixed = [0u8; 16]; // byte-order magic, version, section length
        let got = src.read_full(&mut fixed)?;
        if got < 4 {
            return Err(CaptureError::TruncatedRecordHeader { file: src.name.clone(), offset: start, needed: 12, got: 8 + got as u64 });
        }
        let be = match arr::<4>(&fixed, 0) {
            [0x1A, 0x2B, 0x3C, 0x4D] => true,
            [0x4D, 0x3C, 0x2B, 0x1A] => false,
            other => {
                return Err(src.corrupt(start, format!("section header has bad byte-order magic {}", hex(&other))));
            }
        };
        let len = rd32(arr(&head, 4), be);
        check_len(src, start, len, 28)?;
        if got < 16 {
            return Err(src.truncated_block(start, len));
        }
        let major = rd16(arr(&fixed, 4), be);
        let minor = rd16(arr(&fixed, 6), be);
        if major != 1 {
            return Err(src.corrupt(start, format!("unsupported pcapng version {major}.{minor}")));
        }
        let options = u64::from(len) - 28;
        if src.skip(options)? < options {
            return Err(src.truncated_block(start, len));
        }
        self.read_trailer_with(src, start, len, be)?;
        self.big_endian = be;
        self.interfaces.clear();
        Ok(())
    }

    fn read_idb(&mut self, src: &mut Source, start: u64, len: u32) -> Result<(), CaptureError> {
        if len > MAX_IDB_LEN {
            return Err(src.bad_len(start, len, format!("interface description block larger than {MAX_IDB_LEN} bytes")));
        }
        let mut body = vec![0u8; len as usize - 12];
        if src.read_full(&mut body)? < body.len() {
            return Err(src.truncated_block(start, len));
        }
        self.read_trailer(src, start, len)?;
        if self.interfaces.len() >= MAX_INTERFACES {
            return Err(src.corrupt(start, format!("more than {MAX_INTERFACES} interfaces in one section")));
        }
        let be = self.big_endian;
        let link_type = u32::from(rd16(arr(&body, 0), be));
        let snaplen = rd32(arr(&body, 4), be);
        let mut iface = Interface { link_type, snaplen, units_per_sec: 1_000_000, offset_sec: 0 };
        let mut p = 8usize;
        while p + 4 <= body.len() {
            let code = rd16(arr(&body, p), be);
            let olen = usize::from(rd16(arr(&body, p + 2), be));
            if code == 0 {
                break;
            }
            let value = match body.get(p + 4..p + 4 + olen) {
                Some(v) => v,
                None => {
                    return Err(src.corrupt(start, format!("interface option {code} of {olen} bytes runs past the end of the block")));
                }
            };
            match code {
                9 => {
                    let [v] =
                        <[u8; 1]>::try_from(value).map_err(|_| src.corrupt(start, format!("if_tsresol option of {olen} bytes, not 1")))?;
                    let units = if v & 0x80 != 0 { 1u64.checked_shl(u32::from(v & 0x7F)) } else { 10u64.checked_pow(u32::from(v)) };
                    iface.units_per_sec = units.ok_or_else(|| src.corrupt(start, format!("if_tsresol {v:#04x} is out of range")))?;
                }
                14 => {
                    let b =
                        <[u8; 8]>::try_from(value).map_err(|_| src.corrupt(start, format!("if_tsoffset option of {olen} bytes, not 8")))?;
                    iface.offset_sec = if be { i64::from_be_bytes(b) } else { i64::from_le_bytes(b) };
                }
                _ => {}
            }
            p += 4 + olen.next_multiple_of(4);
        }
        self.first_link_type.get_or_insert(link_type);
        self.interfaces.push(iface);
        Ok(())
    }

    /// The interface a packet block names, if it is described and Ethernet.
    fn packet_interface(&self, src: &Source, start: u64, id: u32, what: &str) -> Result<Interface, CaptureError> {
        let iface = match self.interfaces.get(id as usize) {
            Some(i) => *i,
            None => {
                return Err(src.corrupt(start, format!("{what} names interface {id}, but only {} are described", self.interfaces.len())));
            }
        };
        if iface.link_type != LINKTYPE_ETHERNET {
            return Err(CaptureError::UnsupportedLinkType { file: src.name.clone(), offset: start, link_type: iface.link_type });
        }
        Ok(iface)
    }

    /// Enhanced Packet Block, or with `obsolete` the old Packet Block (16-bit interface id).
    fn read_epb(&mut self, src: &mut Source, start: u64, len: u32, obsolete: bool) -> Result<Packet, CaptureError> {
        let be = self.big_endian;
        let mut fixed = [0u8; 20];
        if src.read_full(&mut fixed)? < fixed.len() {
            return Err(src.truncated_block(start, len));
        }
        let id = if obsolete { u32::from(rd16(arr(&fixed, 0), be)) } else { rd32(arr(&fixed, 0), be) };
        let what = if obsolete { "packet block" } else { "enhanced packet block" };
        let iface = self.packet_interface(src, start, id, what)?;
        let ts_units = (u64::from(rd32(arr(&fixed, 4), be)) << 32) | u64::from(rd32(arr(&fixed, 8), be));
        let caplen = rd32(arr(&fixed, 12), be);
        let orig_len = rd32(arr(&fixed, 16), be);
        if caplen > MAX_CAPLEN {
            return Err(CaptureError::CaplenTooLarge { file: src.name.clone(), offset: start, caplen, max: MAX_CAPLEN });
        }
        let padded = u64::from(caplen).next_multiple_of(4);
        if 32 + padded > u64::from(len) {
            return Err(src.corrupt(start, format!("captured length {caplen} does not fit in a block of {len} bytes")));
        }
        let mut data = vec![0u8; caplen as usize];
        if src.read_full(&mut data)? < data.len() {
            return Err(src.truncated_block(start, len));
        }
        // Padding and options.
        let rest = u64::from(len) - 32 - u64::from(caplen);
        if src.skip(rest)? < rest {
            return Err(src.truncated_block(start, len));
        }
        self.read_trailer(src, start, len)?;
        Ok(Packet { data, wire_len: orig_len.max(caplen), ts: iface.timestamp(ts_units), in_port: 0 })
    }

    fn read_spb(&mut self, src: &mut Source, start: u64, len: u32) -> Result<Packet, CaptureError> {
        let iface = self.packet_interface(src, start, 0, "simple packet block")?;
        let mut fixed = [0u8; 4];
        if src.read_full(&mut fixed)? < fixed.len() {
            return Err(src.truncated_block(start, len));
        }
        let orig_len = rd32(fixed, self.big_endian);
        let room = len - 16;
        let mut caplen = orig_len.min(room);
        if iface.snaplen != 0 {
            caplen = caplen.min(iface.snaplen);
        }
        if caplen > MAX_CAPLEN {
            return Err(CaptureError::CaplenTooLarge { file: src.name.clone(), offset: start, caplen, max: MAX_CAPLEN });
        }
        let mut data = vec![0u8; caplen as usize];
        if src.read_full(&mut data)? < data.len() {
            return Err(src.truncated_block(start, len));
        }
        let rest = u64::from(room - caplen);
        if src.skip(rest)? < rest {
            return Err(src.truncated_block(start, len));
        }
        self.read_trailer(src, start, len)?;
        Ok(Packet { data, wire_len: orig_len.max(caplen), ts: Timestamp::default(), in_port: 0 })
    }

    fn read_trailer(&self, src: &mut Source, start: u64, len: u32) -> Result<(), CaptureError> {
        self.read_trailer_with(src, start, len, self.big_endian)
    }

    fn read_trailer_with(&self, src: &mut Source, start: u64, len: u32, be: bool) -> Result<(), CaptureError> {
        let mut t = [0u8; 4];
        if src.read_full(&mut t)? < t.len() {
            return Err(src.truncated_block(start, len));
        }
        let trailer = rd32(t, be);
        if trailer != len {
            return Err(src.bad_len(start, len, format!("the trailing block length is {trailer}")));
        }
        Ok(())
    }
}

/// Checks a block length: at least `min`, a multiple of 4.
fn check_len(src: &Source, start: u64, len: u32, min: u32) -> Result<(), CaptureError> {
    if len < min {
        return Err(src.bad_len(start, len, format!("less than the minimum {min} for this block type")));
    }
    if !len.is_multiple_of(4) {
        return Err(src.bad_len(start, len, "not a multiple of 4".to_string()));
    }
    Ok(())
}

impl Iterator for CaptureReader {
    type Item = Result<Packet, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let result = match &mut self.state {
            State::Pcap(s) => s.next_packet(&mut self.src),
            State::PcapNg(s) => s.next_packet(&mut self.src),
        };
        match result {
            Ok(Some(mut p)) => {
                p.in_port = self.in_port;
                Some(Ok(p))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl FusedIterator for CaptureReader {}

impl fmt::Debug for CaptureReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureReader")
            .field("name", &self.src.name)
            .field("format", &self.format())
            .field("link_type", &self.link_type())
            .field("offset", &self.src.offset)
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
