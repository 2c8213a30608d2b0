//! `CaptureSource` and `CaptureReader` agree with a simple reference parser
//! (below: the whole file in memory, read front to back, no streaming) on
//! generated pcap and pcapng files, valid and damaged, across block sizes,
//! read chunkings (a reader that returns 1..n bytes per call), batch sizes and
//! batches kept in flight (so fills starve and resume).

mod common;

use std::collections::VecDeque;
use std::io::{Cursor, Read};

use common::{frame, Kind, PcapNg};
use netvm_io::{CaptureReader, CaptureSource, MAX_CAPLEN, MIN_BLOCK_SIZE};
use netvm_vm::buffer::{Batch, BlockPool};
use netvm_vm::port::Fill;
use netvm_vm::{Packet, Timestamp};
use proptest::prelude::*;

/// A packet as compared: bytes, wire length, time.
type Pkt = (Vec<u8>, u32, Timestamp);
/// What reading a file gives: the packets, and the kind and offset of the error that ended it.
type Outcome = (Vec<Pkt>, Option<(String, Option<u64>)>);

// ---------------------------------------------------------------------------
// The reference

fn u16_at(b: &[u8], at: usize, be: bool) -> u16 {
    let x = [b[at], b[at + 1]];
    if be {
        u16::from_be_bytes(x)
    } else {
        u16::from_le_bytes(x)
    }
}

fn u32_at(b: &[u8], at: usize, be: bool) -> u32 {
    let x = [b[at], b[at + 1], b[at + 2], b[at + 3]];
    if be {
        u32::from_be_bytes(x)
    } else {
        u32::from_le_bytes(x)
    }
}

fn fail(kind: &str, offset: u64) -> Option<(String, Option<u64>)> {
    Some((kind.to_string(), Some(offset)))
}

/// The reference parser: `bs` is the block size records must fit in.
fn reference(b: &[u8], bs: usize) -> Outcome {
    let magics: [[u8; 4]; 5] =
        [[0xD4, 0xC3, 0xB2, 0xA1], [0xA1, 0xB2, 0xC3, 0xD4], [0x4D, 0x3C, 0xB2, 0xA1], [0xA1, 0xB2, 0x3C, 0x4D], [0x0A, 0x0D, 0x0D, 0x0A]];
    if b.len() < 4 {
        let kind = if magics.iter().any(|m| m[..b.len()] == *b) { "truncated-file-header" } else { "not-capture" };
        return (vec![], fail(kind, 0));
    }
    match magics.iter().position(|m| m[..] == b[..4]) {
        Some(4) => reference_ng(b, bs),
        Some(i) => reference_pcap(b, bs, i == 1 || i == 3, i >= 2),
        None => (vec![], fail("not-capture", 0)),
    }
}

fn reference_pcap(b: &[u8], bs: usize, be: bool, nano: bool) -> Outcome {
    let mut out = Vec::new();
    if b.len() < 24 {
        return (out, fail("truncated-file-header", 0));
    }
    let (major, minor) = (u16_at(b, 4, be), u16_at(b, 6, be));
    if major < 2 || !((major == 2 && minor <= 4) || (major == 543 && minor == 0)) {
        return (out, fail("corrupt", 0));
    }
    let snaplen = u32_at(b, 16, be);
    let snapshot = if snaplen == 0 || snaplen > i32::MAX as u32 { MAX_CAPLEN } else { snaplen };
    let link = u32_at(b, 20, be) & 0x03FF_FFFF;
    let mut off = 24;
    loop {
        if link != 1 {
            return (out, fail("unsupported-link-type", 20));
        }
        if off == b.len() {
            return (out, None);
        }
        let o = off as u64;
        if b.len() - off < 16 {
            return (out, fail("truncated-record-header", o));
        }
        let (sec, frac) = (u32_at(b, off, be), u32_at(b, off + 4, be));
        let (mut caplen, mut len) = (u32_at(b, off + 8, be), u32_at(b, off + 12, be));
        if (major == 2 && minor < 3) || major == 543 || (major == 2 && minor == 3 && caplen > len) {
            std::mem::swap(&mut caplen, &mut len);
        }
        if caplen > MAX_CAPLEN {
            return (out, fail("caplen-too-large", o));
        }
        let kept = caplen.min(snapshot) as usize;
        if 16 + kept > bs {
            return (out, fail("record-too-large", o));
        }
        if b.len() - off - 16 < caplen as usize {
            return (out, fail("truncated-record", o));
        }
        let per = if nano { 1_000_000_000 } else { 1_000_000 };
        let ts = Timestamp { sec: u64::from(sec) + u64::from(frac / per), nsec: (frac % per) * (1_000_000_000 / per) };
        out.push((b[off + 16..off + 16 + kept].to_vec(), len, ts));
        off += 16 + caplen as usize;
    }
}

#[derive(Clone, Copy)]
struct Iface {
    link: u32,
    snaplen: u32,
    ups: u64,
    offset: i64,
}

fn parse_idb(body: &[u8], be: bool) -> Option<Iface> {
    let mut i = Iface { link: u32::from(u16_at(body, 0, be)), snaplen: u32_at(body, 4, be), ups: 1_000_000, offset: 0 };
    let mut p = 8;
    while p + 4 <= body.len() {
        let (code, olen) = (u16_at(body, p, be), usize::from(u16_at(body, p + 2, be)));
        if code == 0 {
            break;
        }
        let v = body.get(p + 4..p + 4 + olen)?;
        match code {
            9 => {
                if olen != 1 {
                    return None;
                }
                i.ups = if v[0] & 0x80 != 0 { 1u64.checked_shl(u32::from(v[0] & 0x7F))? } else { 10u64.checked_pow(u32::from(v[0]))? };
            }
            14 => {
                let x: [u8; 8] = v.try_into().ok()?;
                i.offset = if be { i64::from_be_bytes(x) } else { i64::from_le_bytes(x) };
            }
            _ => {}
        }
        p += 4 + olen.next_multiple_of(4);
    }
    Some(i)
}

fn reference_ng(b: &[u8], bs: usize) -> Outcome {
    let mut out = Vec::new();
    let mut ifaces: Vec<Iface> = Vec::new();
    let mut be = false;
    let mut off = 0usize;
    let mut first = true;
    loop {
        let o = off as u64;
        let left = b.len() - off;
        if left == 0 && !first {
            return (out, None);
        }
        let trunc_header = if first { "truncated-file-header" } else { "truncated-record-header" };
        let trunc_block = if first { "truncated-file-header" } else { "truncated-block" };
        let at = if first { 0 } else { o };
        if b[off..].starts_with(&[0x0A, 0x0D, 0x0D, 0x0A]) || first {
            // Section header.
            if left < 12 {
                return (out, fail(trunc_header, at));
            }
            be = match b[off + 8..off + 12] {
                [0x1A, 0x2B, 0x3C, 0x4D] => true,
                [0x4D, 0x3C, 0x2B, 0x1A] => false,
                _ => return (out, fail("corrupt", o)),
            };
            let len = u32_at(b, off + 4, be) as usize;
            if len < 28 || !len.is_multiple_of(4) {
                return (out, fail("bad-block-length", o));
            }
            if left < 24 {
                return (out, fail(trunc_block, at));
            }
            if u16_at(b, off + 12, be) != 1 {
                return (out, fail("corrupt", o));
            }
            if left < len {
                return (out, fail(trunc_block, at));
            }
            if u32_at(b, off + len - 4, be) as usize != len {
                return (out, fail("bad-block-length", o));
            }
            ifaces.clear();
            off += len;
            first = false;
            continue;
        }
        if left < 8 {
            return (out, fail("truncated-record-header", o));
        }
        let (ty, len32) = (u32_at(b, off, be), u32_at(b, off + 4, be));
        let len = len32 as usize;
        let min = match ty {
            1 => 20,
            2 | 6 => 32,
            3 => 16,
            _ => 12,
        };
        if len < min || !len.is_multiple_of(4) {
            return (out, fail("bad-block-length", o));
        }
        let trailer_ok = |b: &[u8]| u32_at(b, off + len - 4, be) as usize == len;
        let eth = |ifaces: &[Iface], id: u32| match ifaces.get(id as usize) {
            None => Err("corrupt"),
            Some(i) if i.link != 1 => Err("unsupported-link-type"),
            Some(i) => Ok(*i),
        };
        match ty {
            1 => {
                if len > 64 * 1024 {
                    return (out, fail("bad-block-length", o));
                }
                if len > bs {
                    return (out, fail("record-too-large", o));
                }
                if left < len {
                    return (out, fail("truncated-block", o));
                }
                if !trailer_ok(b) {
                    return (out, fail("bad-block-length", o));
                }
                if ifaces.len() >= 4096 {
                    return (out, fail("corrupt", o));
                }
                match parse_idb(&b[off + 8..off + len - 4], be) {
                    Some(i) => ifaces.push(i),
                    None => return (out, fail("corrupt", o)),
                }
            }
            2 | 3 | 6 => {
                let (head, iface, caplen, wire, units) = if ty == 3 {
                    let i = match eth(&ifaces, 0) {
                        Ok(i) => i,
                        Err(k) => return (out, fail(k, o)),
                    };
                    if left < 12 {
                        return (out, fail("truncated-block", o));
                    }
                    let wire = u32_at(b, off + 8, be);
                    let mut caplen = wire.min(len32 - 16);
                    if i.snaplen != 0 {
                        caplen = caplen.min(i.snaplen);
                    }
                    (12, i, caplen, wire, None)
                } else {
                    if left < 28 {
                        return (out, fail("truncated-block", o));
                    }
                    let id = if ty == 2 { u32::from(u16_at(b, off + 8, be)) } else { u32_at(b, off + 8, be) };
                    let i = match eth(&ifaces, id) {
                        Ok(i) => i,
                        Err(k) => return (out, fail(k, o)),
                    };
                    let units = (u64::from(u32_at(b, off + 12, be)) << 32) | u64::from(u32_at(b, off + 16, be));
                    (28, i, u32_at(b, off + 20, be), u32_at(b, off + 24, be), Some(units))
                };
                if caplen > MAX_CAPLEN {
                    return (out, fail("caplen-too-large", o));
                }
                if ty != 3 && 32 + (caplen as usize).next_multiple_of(4) > len {
                    return (out, fail("corrupt", o));
                }
                if len > bs && head + caplen as usize > bs {
                    return (out, fail("record-too-large", o));
                }
                if left < len {
                    return (out, fail("truncated-block", o));
                }
                if !trailer_ok(b) {
                    return (out, fail("bad-block-length", o));
                }
                let ts = match units {
                    None => Timestamp::default(),
                    Some(u) => {
                        let sec = u / iface.ups;
                        let nsec = (u128::from(u % iface.ups) * 1_000_000_000 / u128::from(iface.ups)) as u32;
                        let sec = if iface.offset >= 0 {
                            sec.saturating_add(iface.offset as u64)
                        } else {
                            sec.saturating_sub(iface.offset.unsigned_abs())
                        };
                        Timestamp { sec, nsec }
                    }
                };
                out.push((b[off + head..off + head + caplen as usize].to_vec(), wire, ts));
            }
            _ => {
                if left < len {
                    return (out, fail("truncated-block", o));
                }
                if !trailer_ok(b) {
                    return (out, fail("bad-block-length", o));
                }
            }
        }
        off += len;
    }
}

// ---------------------------------------------------------------------------
// The readers under test

/// Returns `chunks` bytes per read, in turn.
struct Chunked {
    data: Vec<u8>,
    pos: usize,
    chunks: Vec<usize>,
    turn: usize,
}

impl Read for Chunked {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let c = self.chunks[self.turn % self.chunks.len()];
        self.turn += 1;
        let n = buf.len().min(c).min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

fn error_of(e: &netvm_io::CaptureError) -> Option<(String, Option<u64>)> {
    Some((e.kind().to_string(), e.offset()))
}

fn pkt(p: Packet) -> Pkt {
    (p.data, p.wire_len, p.ts)
}

fn with_reader(bytes: &[u8]) -> Outcome {
    match CaptureReader::from_reader(Cursor::new(bytes.to_vec()), "gen") {
        Err(e) => (vec![], error_of(&e)),
        Ok(r) => {
            let (pkts, err) = r.collect_packets();
            (pkts.into_iter().map(pkt).collect(), err.as_ref().and_then(error_of))
        }
    }
}

#[derive(Clone, Debug)]
struct Run {
    block: usize,
    blocks: usize,
    max: usize,
    in_flight: usize,
    chunks: Vec<usize>,
}

fn with_source(bytes: &[u8], run: &Run) -> Outcome {
    let pool = BlockPool::new(run.block, run.blocks);
    let input = Chunked { data: bytes.to_vec(), pos: 0, chunks: run.chunks.clone(), turn: 0 };
    let mut src = match CaptureSource::from_reader(input, "gen", 3, &pool) {
        Err(e) => return (vec![], error_of(&e)),
        Ok(s) => s,
    };
    let mut out = Vec::new();
    let take = |b: &Batch, out: &mut Vec<Pkt>| {
        for d in &b.descs {
            assert_eq!(d.in_port, 3);
            // SAFETY: the batch holds the blocks its descriptors point into.
            out.push((unsafe { d.bytes() }.to_vec(), d.wirelen, d.ts()));
        }
    };
    let mut flight: VecDeque<Batch> = VecDeque::new();
    let mut err = None;
    loop {
        let mut batch = Batch::with_capacity(run.max);
        match src.fill_batch(&mut batch, run.max, None) {
            Ok(Fill::Packets(n)) => {
                assert!(n >= 1 && n <= run.max && n == batch.len());
                flight.push_back(batch);
                if flight.len() > run.in_flight {
                    take(&flight.pop_front().unwrap(), &mut out);
                }
            }
            Ok(Fill::Starved) => {
                let oldest = flight.pop_front().expect("starved with no batch in flight");
                take(&oldest, &mut out);
            }
            Ok(Fill::End) => break,
            Err(e) => {
                err = error_of(&e);
                break;
            }
        }
    }
    for b in &flight {
        take(b, &mut out);
    }
    drop(flight);
    drop(src);
    assert_eq!(pool.available(), pool.count(), "blocks leaked");
    (out, err)
}

// ---------------------------------------------------------------------------
// Generated files

fn put16(v: &mut Vec<u8>, be: bool, x: u16) {
    v.extend_from_slice(&if be { x.to_be_bytes() } else { x.to_le_bytes() });
}

fn put32(v: &mut Vec<u8>, be: bool, x: u32) {
    v.extend_from_slice(&if be { x.to_be_bytes() } else { x.to_le_bytes() });
}

#[derive(Clone, Debug)]
enum Rec {
    /// caplen, wire, sec, frac (a header caplen beyond what follows when `lie`).
    Pcap { caplen: u32, wire: u32, sec: u32, frac: u32, lie: Option<u32> },
}

fn pcap_file() -> impl Strategy<Value = Vec<u8>> {
    let header = (
        any::<bool>(),
        any::<bool>(),
        prop_oneof![
            12 => Just((2u16, 4u16)),
            2 => Just((2, 3)),
            1 => Just((2, 2)),
            1 => Just((2, 0)),
            1 => Just((543, 0)),
            1 => Just((1, 0)),
            1 => Just((2, 5))
        ],
        prop_oneof![Just(0u32), Just(16), Just(60), Just(100), Just(65535), Just(262_144), Just(262_145), Just(0x8000_0000)],
        prop_oneof![16 => Just(1u32), 2 => Just(0x3000_0001), 1 => Just(113)],
    );
    let rec = (
        prop_oneof![3000 => 0u32..200, 300 => 200u32..2000, 1 => Just(MAX_CAPLEN + 1)],
        0u32..3000,
        any::<u32>(),
        prop_oneof![20 => 0u32..1_000_000, 1 => any::<u32>()],
        prop::option::weighted(0.0005, any::<u32>()),
    )
        .prop_map(|(caplen, wire, sec, frac, lie)| Rec::Pcap { caplen, wire, sec, frac, lie });
    (header, proptest::collection::vec(rec, 0..120)).prop_map(|((be, nano, version, snaplen, link), recs)| {
        let mut b = Vec::new();
        put32(&mut b, be, if nano { 0xA1B2_3C4D } else { 0xA1B2_C3D4 });
        put16(&mut b, be, version.0);
        put16(&mut b, be, version.1);
        put32(&mut b, be, 7);
        put32(&mut b, be, 0);
        put32(&mut b, be, snaplen);
        put32(&mut b, be, link);
        for (i, Rec::Pcap { caplen, wire, sec, frac, lie }) in recs.into_iter().enumerate() {
            put32(&mut b, be, sec);
            put32(&mut b, be, frac);
            put32(&mut b, be, lie.unwrap_or(caplen));
            put32(&mut b, be, wire);
            // A record claiming more than the maximum has no bytes.
            if caplen <= MAX_CAPLEN {
                b.extend_from_slice(&frame(caplen as usize, i as u8));
            }
        }
        b
    })
}

#[derive(Clone, Debug)]
enum Blk {
    Section(bool),
    Idb { link: u16, snaplen: u32, tsresol: Option<u8>, tsoffset: Option<i64> },
    Epb { iface: u32, ts: u64, caplen: u32, wire: u32, options: usize, obsolete: bool },
    Spb { caplen: usize, wire: u32 },
    Other { len: usize },
}

fn block() -> impl Strategy<Value = Blk> {
    prop_oneof![
        1 => any::<bool>().prop_map(Blk::Section),
        3 => (
            prop_oneof![20 => Just(1u16), 1 => Just(113)],
            prop_oneof![Just(0u32), Just(40), Just(65535)],
            prop::option::of(prop_oneof![
                40 => Just(6u8),
                40 => Just(9),
                20 => Just(0),
                20 => Just(3),
                20 => Just(0x80 | 20),
                1 => Just(19),
                1 => Just(0x80 | 63),
                1 => Just(20),
                1 => Just(0xC0)
            ]),
            prop::option::of(-5000i64..5000),
        )
            .prop_map(|(link, snaplen, tsresol, tsoffset)| Blk::Idb { link, snaplen, tsresol, tsoffset }),
        40 => (
            prop_oneof![300 => Just(0u32), 3 => Just(1), 1 => Just(2)],
            any::<u64>(),
            0u32..300,
            0u32..2000,
            prop_oneof![4 => Just(0usize), 1 => 0usize..3000],
            prop::bool::weighted(0.1)
        )
            .prop_map(|(iface, ts, caplen, wire, options, obsolete)| Blk::Epb { iface, ts, caplen, wire, options, obsolete }),
        4 => (0usize..300, 0u32..400).prop_map(|(caplen, wire)| Blk::Spb { caplen, wire }),
        2 => prop_oneof![4 => 0usize..64, 1 => 0usize..20_000].prop_map(|len| Blk::Other { len }),
    ]
}

fn pcapng_file() -> impl Strategy<Value = Vec<u8>> {
    let first = (prop::bool::weighted(0.95), prop::option::of(prop_oneof![Just(9u8), Just(0x80 | 30), Just(6)]));
    (any::<bool>(), first, proptest::collection::vec(block(), 0..80)).prop_map(|(be, (first_idb, tsresol), blocks)| {
        let mut ng = PcapNg::new(be);
        if first_idb {
            ng.idb(1, 0, tsresol, None);
        }
        for (i, blk) in blocks.into_iter().enumerate() {
            let be = ng.be;
            match blk {
                Blk::Section(be) => {
                    // A section mostly starts with its interface.
                    ng.shb(be);
                    if i % 4 != 0 {
                        ng.idb(1, 0, None, None);
                    }
                }
                Blk::Idb { link, snaplen, tsresol, tsoffset } => {
                    ng.idb(link, snaplen, tsresol, tsoffset);
                }
                Blk::Epb { iface, ts, caplen, wire, options, obsolete } => {
                    let mut body = Vec::new();
                    if obsolete {
                        put16(&mut body, be, iface as u16);
                        put16(&mut body, be, 0);
                    } else {
                        put32(&mut body, be, iface);
                    }
                    put32(&mut body, be, (ts >> 32) as u32);
                    put32(&mut body, be, ts as u32);
                    put32(&mut body, be, caplen);
                    put32(&mut body, be, wire);
                    body.extend_from_slice(&frame(caplen as usize, i as u8));
                    body.resize(body.len().next_multiple_of(4) + options.next_multiple_of(4), 0xEE);
                    ng.block(if obsolete { 2 } else { 6 }, &body, Kind::Packet);
                }
                Blk::Spb { caplen, wire } => {
                    let mut body = Vec::new();
                    put32(&mut body, be, wire);
                    body.extend_from_slice(&frame(caplen, i as u8));
                    ng.block(3, &body, Kind::Packet);
                }
                Blk::Other { len } => {
                    ng.block(0x0000_0BAD, &vec![0x11; len], Kind::Other);
                }
            }
        }
        ng.bytes
    })
}

/// A file, possibly damaged: bytes overwritten, and cut short.
fn damaged(file: impl Strategy<Value = Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    (
        file,
        prop_oneof![Just(vec![]), proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..3)],
        prop::option::weighted(0.3, any::<prop::sample::Index>()),
    )
        .prop_map(|(mut f, edits, cut)| {
            if !f.is_empty() {
                for (at, v) in edits {
                    let i = at.index(f.len());
                    f[i] = v;
                }
            }
            if let Some(c) = cut {
                let n = c.index(f.len() + 1);
                f.truncate(n);
            }
            f
        })
}

fn run() -> impl Strategy<Value = Run> {
    (
        prop_oneof![1 => Just(64usize), 1 => Just(128), 1 => Just(256), 4 => 256usize..4096, 2 => Just(65536), 2 => Just(MIN_BLOCK_SIZE)],
        2usize..5,
        prop_oneof![Just(1usize), 1usize..20, Just(256)],
        0usize..3,
        prop_oneof![Just(vec![usize::MAX]), Just(vec![1]), proptest::collection::vec(1usize..300, 1..5)],
    )
        .prop_map(|(block, blocks, max, in_flight, chunks)| Run { block, blocks, max, in_flight, chunks })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn pcap_agrees_with_the_reference(file in damaged(pcap_file()), run in run()) {
        let bs = BlockPool::new(run.block, 1).block_size();
        let want = reference(&file, bs);
        let got = with_source(&file, &run);
        prop_assert_eq!(&got, &want, "source, {:?}", run);
        let want = reference(&file, BlockPool::new(MIN_BLOCK_SIZE, 1).block_size());
        prop_assert_eq!(with_reader(&file), want);
    }

    #[test]
    fn pcapng_agrees_with_the_reference(file in damaged(pcapng_file()), run in run()) {
        let bs = BlockPool::new(run.block, 1).block_size();
        let want = reference(&file, bs);
        let got = with_source(&file, &run);
        prop_assert_eq!(&got, &want, "source, {:?}", run);
        let want = reference(&file, BlockPool::new(MIN_BLOCK_SIZE, 1).block_size());
        prop_assert_eq!(with_reader(&file), want);
    }
}
