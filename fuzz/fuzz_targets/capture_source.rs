//! Fuzzes the streaming capture source and the pcap sink: any bytes, read by
//! `CaptureSource` through small blocks, in pieces of any size, with batches
//! kept in flight (so fills starve and resume), must not panic, hang or
//! allocate beyond the pool; they give the packets `CaptureReader` gives (a
//! prefix of them when a record does not fit a small block); every block
//! returns to the pool; and what `PcapSink` writes of them reads back the same.
//!
//! The first four bytes choose the block size, the read size, the batch size
//! and the batches in flight; the rest is the capture.
#![no_main]

use std::collections::VecDeque;
use std::io::{Cursor, Read};

use libfuzzer_sys::fuzz_target;
use netvm_io::{CaptureReader, CaptureSource, PcapHeaderSpec, PcapSink, MAX_CAPLEN};
use netvm_vm::buffer::{Batch, BlockPool};
use netvm_vm::port::{Fill, OutPacket, Sink};
use netvm_vm::Timestamp;

/// Returns at most `chunk` bytes per read.
struct Chunked {
    data: Vec<u8>,
    pos: usize,
    chunk: usize,
}

impl Read for Chunked {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.chunk).min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

type Pkt = (Vec<u8>, u32, Timestamp);

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let (params, file) = data.split_at(4);
    let block = 64 + usize::from(params[0]) * 64;
    let chunk = if params[1] == 255 { usize::MAX } else { 1 + usize::from(params[1]) * 7 };
    let max = 1 + usize::from(params[2] % 64);
    let in_flight = usize::from(params[3] % 3);
    let pool = BlockPool::new(block, 2 + usize::from(params[3] / 3 % 3));

    // The source, as a driver runs it.
    let input = Chunked { data: file.to_vec(), pos: 0, chunk };
    let mut got: Vec<Pkt> = Vec::new();
    let mut source_err = None;
    let mut sink = PcapSink::from_writer(Vec::new(), "fuzz-out", PcapHeaderSpec::default()).unwrap();
    match CaptureSource::from_reader(input, "fuzz", 1, &pool) {
        Err(e) => source_err = Some(e),
        Ok(mut src) => {
            let mut flight: VecDeque<Batch> = VecDeque::new();
            let mut take = |b: &Batch, got: &mut Vec<Pkt>| {
                for d in &b.descs {
                    assert!(d.caplen <= MAX_CAPLEN && d.ts_nsec < 1_000_000_000 && d.in_port == 1);
                    // SAFETY: the batch holds the blocks its descriptors point into.
                    let bytes = unsafe { d.bytes() };
                    let p = OutPacket { data: bytes, wire_len: d.wirelen, ts: d.ts(), in_port: 1, seq: 0 };
                    sink.write(&p).unwrap();
                    got.push((bytes.to_vec(), d.wirelen, d.ts()));
                }
            };
            loop {
                let mut batch = Batch::with_capacity(max);
                match src.fill_batch(&mut batch, max, None) {
                    Ok(Fill::Packets(n)) => {
                        assert!(n >= 1 && n <= max && n == batch.len());
                        flight.push_back(batch);
                        if flight.len() > in_flight {
                            take(&flight.pop_front().unwrap(), &mut got);
                        }
                    }
                    Ok(Fill::Starved) => take(&flight.pop_front().expect("starved with no batch in flight"), &mut got),
                    Ok(Fill::End) => break,
                    Err(e) => {
                        source_err = Some(e);
                        break;
                    }
                }
            }
            for b in &flight {
                take(b, &mut got);
            }
        }
    }
    assert_eq!(pool.available(), pool.count(), "blocks leaked");
    if let Some(e) = &source_err {
        assert!(e.offset().unwrap_or(0) <= file.len() as u64);
        assert!(e.to_string().starts_with("fuzz: "));
    }
    // Every packet costs at least 16 bytes of file.
    assert!(got.len() * 16 <= file.len());

    // The owned reader (the same parser, big blocks) gives the same packets.
    let (want, reader_err) = match CaptureReader::from_reader(Cursor::new(file.to_vec()), "fuzz") {
        Ok(r) => r.collect_packets(),
        Err(e) => (Vec::new(), Some(e)),
    };
    let want: Vec<Pkt> = want.into_iter().map(|p| (p.data, p.wire_len, p.ts)).collect();
    if matches!(source_err, Some(netvm_io::CaptureError::RecordTooLarge { .. })) {
        assert!(got.len() <= want.len() && got[..] == want[..got.len()]);
    } else {
        assert_eq!(got, want);
        assert_eq!(source_err.map(|e| (e.kind(), e.offset())), reader_err.map(|e| (e.kind(), e.offset())));
    }

    // The sink's file reads back as what was written (seconds modulo 2^32).
    let out = sink.into_inner().unwrap();
    let (back, err) = CaptureReader::from_reader(Cursor::new(out), "fuzz-out").unwrap().collect_packets();
    assert!(err.is_none(), "{err:?}");
    assert_eq!(back.len(), got.len());
    for (b, g) in back.iter().zip(&got) {
        assert_eq!((&b.data, b.wire_len, b.ts), (&g.0, g.1, Timestamp { sec: g.2.sec & 0xFFFF_FFFF, nsec: g.2.nsec }));
    }
});
