//! Builders of small capture files, byte by byte, for the tests.
#![allow(dead_code)]

use std::io::Cursor;

use netvm_io::{CaptureError, CaptureReader};
use netvm_vm::Packet;

/// Reads `bytes` to the end or the first error (an error from the header(s) gives no packets).
pub fn read_bytes(bytes: &[u8], name: &str) -> (Vec<Packet>, Option<CaptureError>) {
    match CaptureReader::from_reader(Cursor::new(bytes.to_vec()), name) {
        Ok(r) => r.collect_packets(),
        Err(e) => (Vec::new(), Some(e)),
    }
}

fn put16(buf: &mut Vec<u8>, be: bool, v: u16) {
    buf.extend_from_slice(&if be { v.to_be_bytes() } else { v.to_le_bytes() });
}

fn put32(buf: &mut Vec<u8>, be: bool, v: u32) {
    buf.extend_from_slice(&if be { v.to_be_bytes() } else { v.to_le_bytes() });
}

/// A pcap file under construction; `records` holds the offset of each record.
pub struct Pcap {
    pub be: bool,
    pub bytes: Vec<u8>,
    pub records: Vec<usize>,
}

impl Pcap {
    /// Version 2.4, snaplen 65535.
    pub fn new(be: bool, nano: bool, link_type: u32) -> Pcap {
        Pcap::with_header(be, nano, link_type, 65535, (2, 4))
    }

    pub fn with_header(be: bool, nano: bool, link_type: u32, snaplen: u32, (major, minor): (u16, u16)) -> Pcap {
        let mut bytes = Vec::new();
        put32(&mut bytes, be, if nano { 0xA1B2_3C4D } else { 0xA1B2_C3D4 });
        put16(&mut bytes, be, major);
        put16(&mut bytes, be, minor);
        put32(&mut bytes, be, 0);
        put32(&mut bytes, be, 0);
        put32(&mut bytes, be, snaplen);
        put32(&mut bytes, be, link_type);
        Pcap { be, bytes, records: Vec::new() }
    }

    /// A record whose header says `caplen`/`orig_len`, followed by `data` (which may differ in length).
    pub fn raw_record(&mut self, sec: u32, frac: u32, caplen: u32, orig_len: u32, data: &[u8]) -> &mut Pcap {
        self.records.push(self.bytes.len());
        let be = self.be;
        put32(&mut self.bytes, be, sec);
        put32(&mut self.bytes, be, frac);
        put32(&mut self.bytes, be, caplen);
        put32(&mut self.bytes, be, orig_len);
        self.bytes.extend_from_slice(data);
        self
    }

    pub fn record(&mut self, sec: u32, frac: u32, data: &[u8], orig_len: u32) -> &mut Pcap {
        self.raw_record(sec, frac, data.len() as u32, orig_len, data)
    }
}

/// A pcapng block's kind, to compute expectations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Section,
    Interface,
    Packet,
    Other,
}

/// A pcapng file under construction; `blocks` holds (offset, end, kind) of each block.
pub struct PcapNg {
    pub be: bool,
    pub bytes: Vec<u8>,
    pub blocks: Vec<(usize, usize, Kind)>,
}

impl PcapNg {
    pub fn new(be: bool) -> PcapNg {
        let mut ng = PcapNg { be, bytes: Vec::new(), blocks: Vec::new() };
        ng.shb(be);
        ng
    }

    /// Appends a block; the body is padded to 4 bytes.
    pub fn block(&mut self, block_type: u32, body: &[u8], kind: Kind) -> &mut PcapNg {
        let start = self.bytes.len();
        let padded = body.len().next_multiple_of(4);
        let len = (12 + padded) as u32;
        let be = self.be;
        put32(&mut self.bytes, be, block_type);
        put32(&mut self.bytes, be, len);
        self.bytes.extend_from_slice(body);
        self.bytes.resize(start + 8 + padded, 0);
        put32(&mut self.bytes, be, len);
        self.blocks.push((start, self.bytes.len(), kind));
        self
    }

    /// A new section (switches the byte order to `be`); with an SHB comment option.
    pub fn shb(&mut self, be: bool) -> &mut PcapNg {
        self.be = be;
        let mut body = Vec::new();
        put32(&mut body, be, 0x1A2B_3C4D);
        put16(&mut body, be, 1);
        put16(&mut body, be, 0);
        body.extend_from_slice(&(-1i64).to_le_bytes());
        put16(&mut body, be, 1); // opt_comment
        put16(&mut body, be, 5);
        body.extend_from_slice(b"hello\0\0\0");
        put16(&mut body, be, 0);
        put16(&mut body, be, 0);
        self.block(0x0A0D_0D0A, &body, Kind::Section)
    }

    /// An interface; `tsresol` adds an if_tsresol option, `tsoffset` an if_tsoffset one.
    pub fn idb(&mut self, link_type: u16, snaplen: u32, tsresol: Option<u8>, tsoffset: Option<i64>) -> &mut PcapNg {
        let be = self.be;
        let mut body = Vec::new();
        put16(&mut body, be, link_type);
        put16(&mut body, be, 0);
        put32(&mut body, be, snaplen);
        put16(&mut body, be, 2); // if_name
        put16(&mut body, be, 4);
        body.extend_from_slice(b"eth0");
        if let Some(r) = tsresol {
            put16(&mut body, be, 9);
            put16(&mut body, be, 1);
            body.extend_from_slice(&[r, 0, 0, 0]);
        }
        if let Some(o) = tsoffset {
            put16(&mut body, be, 14);
            put16(&mut body, be, 8);
            body.extend_from_slice(&if be { o.to_be_bytes() } else { o.to_le_bytes() });
        }
        put16(&mut body, be, 0);
        put16(&mut body, be, 0);
        self.block(1, &body, Kind::Interface)
    }

    /// An Enhanced Packet Block with an opt_comment.
    pub fn epb(&mut self, iface: u32, ts: u64, data: &[u8], orig_len: u32) -> &mut PcapNg {
        let be = self.be;
        let mut body = Vec::new();
        put32(&mut body, be, iface);
        put32(&mut body, be, (ts >> 32) as u32);
        put32(&mut body, be, ts as u32);
        put32(&mut body, be, data.len() as u32);
        put32(&mut body, be, orig_len);
        body.extend_from_slice(data);
        body.resize(body.len().next_multiple_of(4), 0);
        put16(&mut body, be, 1);
        put16(&mut body, be, 3);
        body.extend_from_slice(b"hi!\0");
        put16(&mut body, be, 0);
        put16(&mut body, be, 0);
        self.block(6, &body, Kind::Packet)
    }

    pub fn spb(&mut self, data: &[u8], orig_len: u32) -> &mut PcapNg {
        let be = self.be;
        let mut body = Vec::new();
        put32(&mut body, be, orig_len);
        body.extend_from_slice(data);
        self.block(3, &body, Kind::Packet)
    }

    /// An Interface Statistics Block (skipped by the reader).
    pub fn isb(&mut self) -> &mut PcapNg {
        let be = self.be;
        let mut body = Vec::new();
        put32(&mut body, be, 0);
        put32(&mut body, be, 0);
        put32(&mut body, be, 1000);
        self.block(5, &body, Kind::Other)
    }
}

/// An Ethernet-looking frame of `len` bytes whose content depends on `seed`.
pub fn frame(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect()
}
