//! `CaptureSource` as a port: batches over blocks, merging by time, peeking,
//! starvation and resumption, generated inputs merged by time, pipes that
//! deliver a little at a time, rewinding,
//! errors after packets, blocks larger than the pool's; and `PcapSink`'s
//! closed pipes.

mod common;

use std::io::{Cursor, Read, Write};
use std::sync::mpsc;
use std::time::Duration;

use common::{frame, Pcap, PcapNg};
use netvm_io::{CaptureError, CaptureReader, CaptureSource, PcapHeaderSpec, PcapSink, MIN_BLOCK_SIZE};
use netvm_vm::buffer::{Batch, BlockPool};
use netvm_vm::port::{Fill, OutPacket, PortError, Sink, Source};
use netvm_vm::{Packet, Timestamp};

fn ts(sec: u64, nsec: u32) -> Timestamp {
    Timestamp { sec, nsec }
}

/// The packets of a batch, copied out.
fn owned(batch: &Batch) -> Vec<Packet> {
    batch
        .descs
        .iter()
        .map(|d| {
            // SAFETY: the batch holds the blocks its descriptors point into.
            let data = unsafe { d.bytes() }.to_vec();
            Packet { data, wire_len: d.wirelen, ts: d.ts(), in_port: d.in_port }
        })
        .collect()
}

/// Every packet of `src`, in batches of `max`, and the error that ended it.
fn drain(src: &mut CaptureSource, max: usize) -> (Vec<Packet>, Option<CaptureError>) {
    let mut out = Vec::new();
    let mut batch = Batch::with_capacity(max);
    loop {
        match src.fill_batch(&mut batch, max, None) {
            Ok(Fill::Packets(n)) => {
                assert!(n > 0 && n <= max);
                assert_eq!(batch.len(), n);
                out.extend(owned(&batch));
                batch.clear();
            }
            Ok(Fill::End) => return (out, None),
            Ok(Fill::Starved) => panic!("starved with no batch in flight"),
            Err(e) => return (out, Some(e)),
        }
    }
}

/// A pcap of `n` packets of sizes 0..=200, one per millisecond from `t0`.
fn trace(n: usize, t0: u32, seed: u8) -> Pcap {
    let mut p = Pcap::new(false, false, 1);
    for i in 0..n {
        let len = (i * 37 + usize::from(seed)) % 201;
        p.record(t0 + (i / 1000) as u32, (i % 1000) as u32 * 1000, &frame(len, seed.wrapping_add(i as u8)), len as u32 + 4);
    }
    p
}

/// Reads `data` `chunk` bytes at a time (a pipe that delivers little pieces).
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

#[test]
fn batches_point_into_blocks_and_agree_with_the_reader() {
    let p = trace(5000, 100, 1);
    let (expected, err) = common::read_bytes(&p.bytes, "t.pcap");
    assert!(err.is_none());
    for (block, max) in [(MIN_BLOCK_SIZE, 256), (1 << 20, 1), (1 << 20, 1000), (512, 7)] {
        let pool = BlockPool::new(block, 3);
        let mut src = CaptureSource::from_reader(Cursor::new(p.bytes.clone()), "t.pcap", 4, &pool).unwrap();
        let (got, err) = drain(&mut src, max);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(got.len(), expected.len());
        assert!(got.iter().zip(&expected).all(|(a, b)| a.data == b.data && a.wire_len == b.wire_len && a.ts == b.ts && a.in_port == 4));
        assert_eq!(src.packets(), 5000);
        assert_eq!(pool.available(), pool.count(), "every block back in the pool at the end");
    }
}

#[test]
fn descriptors_lie_in_the_pool_and_keep_it_busy() {
    let p = trace(100, 1, 2);
    let pool = BlockPool::new(1 << 16, 2);
    let mut src = CaptureSource::from_reader(Cursor::new(p.bytes.clone()), "t.pcap", 0, &pool).unwrap();
    let mut batch = Batch::with_capacity(64);
    assert_eq!(src.fill_batch(&mut batch, 64, None).unwrap(), Fill::Packets(64));
    let first = batch.descs[0].data as usize;
    assert!(batch.descs.iter().all(|d| d.seq == 0 && d.in_port == 0));
    // Zero copy: packet i's bytes follow packet i-1's record in the block.
    for w in batch.descs.windows(2) {
        assert_eq!(w[1].data as usize, w[0].data as usize + w[0].caplen as usize + 16);
    }
    assert_eq!(first, batch.descs[0].data as usize);
    drop(src);
    // The batch alone keeps the block.
    assert_eq!(pool.available(), 1);
    batch.clear();
    assert_eq!(pool.available(), 2);
}

#[test]
fn starved_fills_resume_where_they_stopped() {
    let p = trace(3000, 7, 3);
    let (expected, _) = common::read_bytes(&p.bytes, "t.pcap");
    // Blocks of 2 KiB: a few records each; batches are kept until the pool runs dry.
    let pool = BlockPool::new(2048, 3);
    let mut src = CaptureSource::from_reader(Cursor::new(p.bytes.clone()), "t.pcap", 0, &pool).unwrap();
    let mut in_flight: Vec<Batch> = Vec::new();
    let mut got = Vec::new();
    let mut starved = 0;
    loop {
        let mut batch = Batch::with_capacity(50);
        match src.fill_batch(&mut batch, 50, None).unwrap() {
            Fill::Packets(_) => in_flight.push(batch),
            Fill::Starved => {
                starved += 1;
                assert!(!in_flight.is_empty(), "starved with nothing in flight");
                // Retire the oldest batch: its blocks go back to the pool.
                got.extend(owned(&in_flight.remove(0)));
            }
            Fill::End => break,
        }
    }
    for b in &in_flight {
        got.extend(owned(b));
    }
    assert!(starved > 10, "{starved}");
    assert_eq!(got, expected);
}

#[test]
fn until_merges_inputs_by_time_with_ties_to_the_lower_port() {
    // Two inputs with interleaved and equal timestamps.
    let mut a = Pcap::new(false, true, 1);
    let mut b = Pcap::new(false, true, 1);
    for i in 0..300u32 {
        a.record(10 + i / 100, (i % 100) * 2, &frame(60, 1), 60);
        b.record(10 + i / 100, (i % 100) * 3, &frame(60, 2), 60);
    }
    let pool = BlockPool::new(MIN_BLOCK_SIZE, 4);
    let mut srcs = [
        CaptureSource::from_reader(Cursor::new(a.bytes.clone()), "a", 1, &pool).unwrap(),
        CaptureSource::from_reader(Cursor::new(b.bytes.clone()), "b", 2, &pool).unwrap(),
    ];
    let mut merged = Vec::new();
    let mut batch = Batch::with_capacity(64);
    loop {
        let t: Vec<Option<(Timestamp, u16)>> = srcs.iter_mut().map(|s| s.peek_time().unwrap().map(|t| (t, s.in_port()))).collect();
        let (i, until) = match (t[0], t[1]) {
            (None, None) => break,
            (Some(_), None) => (0, None),
            (None, Some(_)) => (1, None),
            (Some(x), Some(y)) if x < y => (0, Some(y)),
            (Some(x), Some(_)) => (1, Some(x)),
        };
        match srcs[i].fill(&mut batch, 64, until).unwrap() {
            Fill::Packets(n) => assert!(n > 0),
            other => panic!("{other:?}"),
        }
        merged.extend(batch.descs.iter().map(|d| (d.ts(), d.in_port)));
        batch.clear();
    }
    assert_eq!(merged.len(), 600);
    assert!(merged.windows(2).all(|w| w[0] <= w[1]), "merged in (time, port) order");
    // Time 10.000000000: a's first packet (port 1) before b's (port 2).
    assert_eq!(&merged[..2], &[(ts(10, 0), 1), (ts(10, 0), 2)]);
    assert_eq!(srcs[0].packets() + srcs[1].packets(), 600);
    // A fill whose first packet is not below `until` appends nothing.
    let mut s = CaptureSource::from_reader(Cursor::new(a.bytes.clone()), "a", 1, &pool).unwrap();
    assert_eq!(s.fill(&mut batch, 10, Some((ts(10, 0), 1))).unwrap(), Fill::Packets(0));
    assert_eq!(s.fill(&mut batch, 10, Some((ts(10, 0), 2))).unwrap(), Fill::Packets(1));
    assert_eq!(s.fill(&mut batch, 10, Some((ts(10, 5), 0))).unwrap(), Fill::Packets(2));
    assert_eq!(s.peek_time().unwrap(), Some(ts(10, 6)));
}

#[test]
fn peek_time_reads_ahead_and_fill_delivers_that_packet() {
    let mut ng = PcapNg::new(true);
    ng.idb(1, 0, Some(9), None).isb().epb(0, 5_000_000_007, &frame(60, 1), 60).isb().epb(0, 6_000_000_000, &frame(61, 2), 61);
    let pool = BlockPool::new(4096, 2);
    let mut s = CaptureSource::from_reader(Cursor::new(ng.bytes.clone()), "p", 0, &pool).unwrap();
    assert_eq!(s.peek_time().unwrap(), Some(ts(5, 7)));
    assert_eq!(s.peek_time().unwrap(), Some(ts(5, 7)));
    let mut batch = Batch::default();
    assert_eq!(s.fill(&mut batch, 1, None).unwrap(), Fill::Packets(1));
    assert_eq!(owned(&batch)[0].data, frame(60, 1));
    assert_eq!(s.peek_time().unwrap(), Some(ts(6, 0)));
    // Room for any number: what the window holds is what is reserved.
    assert_eq!(s.fill(&mut batch, usize::MAX, None).unwrap(), Fill::Packets(1));
    assert_eq!(s.peek_time().unwrap(), None);
    assert_eq!(s.fill(&mut batch, 10, None).unwrap(), Fill::End);
}

#[test]
fn packets_before_a_bad_record_come_first_then_the_error() {
    let mut p = trace(10, 1, 4);
    p.raw_record(9, 0, 0xFFFF_FFF0, 60, &[]);
    let bad = *p.records.last().unwrap() as u64;
    let pool = BlockPool::new(MIN_BLOCK_SIZE, 2);
    let mut s = CaptureSource::from_reader(Cursor::new(p.bytes.clone()), "bad.pcap", 0, &pool).unwrap();
    let mut batch = Batch::default();
    assert_eq!(s.fill(&mut batch, 100, None).unwrap(), Fill::Packets(10));
    let e = s.fill_batch(&mut batch, 100, None).unwrap_err();
    assert!(matches!(e, CaptureError::CaplenTooLarge { offset, .. } if offset == bad), "{e}");
    assert_eq!(s.fill(&mut batch, 100, None).unwrap(), Fill::End);
    assert_eq!(s.peek_time().unwrap(), None);
    // At the trait boundary the error is its message.
    let mut s = CaptureSource::from_reader(Cursor::new(p.bytes.clone()), "bad.pcap", 0, &pool).unwrap();
    s.fill(&mut batch, 100, None).unwrap();
    match s.fill(&mut batch, 100, None) {
        Err(PortError::Failed(m)) => assert!(m.starts_with(&format!("bad.pcap: record at byte {bad} claims")), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_pipe_delivers_packets_as_they_arrive() {
    let (reader, mut writer) = std::io::pipe().unwrap();
    let p = trace(4, 1, 5);
    let (go, wait) = mpsc::channel::<()>();
    let header_and_first = p.records[1];
    let bytes = p.bytes.clone();
    let feeder = std::thread::spawn(move || {
        writer.write_all(&bytes[..header_and_first]).unwrap();
        // The rest only once the first packet came out.
        wait.recv_timeout(Duration::from_secs(20)).expect("the first packet came out");
        writer.write_all(&bytes[header_and_first..]).unwrap();
    });
    let (done, finished) = mpsc::channel();
    let reading = std::thread::spawn(move || {
        let pool = BlockPool::new(1 << 20, 2);
        let mut s = CaptureSource::from_reader(reader, "pipe", 0, &pool).unwrap();
        let mut batch = Batch::default();
        // A whole batch is asked for; the one packet there is comes at once.
        assert_eq!(s.fill(&mut batch, 256, None).unwrap(), Fill::Packets(1));
        go.send(()).unwrap();
        let mut n = 1;
        loop {
            batch.clear();
            match s.fill(&mut batch, 256, None).unwrap() {
                Fill::Packets(k) => n += k,
                Fill::End => break,
                Fill::Starved => panic!("starved"),
            }
        }
        done.send(n).unwrap();
    });
    let n = finished.recv_timeout(Duration::from_secs(30)).expect("the reader finished (did a fill wait for a full batch?)");
    assert_eq!(n, 4);
    feeder.join().unwrap();
    reading.join().unwrap();
}

#[test]
fn rewind_rereads_a_file_but_not_a_stream() {
    let p = trace(1000, 3, 6);
    let path = std::env::temp_dir().join(format!("netvm-io-rewind-{}.pcap", std::process::id()));
    std::fs::write(&path, &p.bytes).unwrap();
    // Three blocks: the batch left in flight keeps one.
    let pool = BlockPool::new(8192, 3);
    let mut s = CaptureSource::open(&path, 0, &pool).unwrap();
    let (first, err) = drain(&mut s, 100);
    assert!(err.is_none());
    assert_eq!(first.len(), 1000);
    // Rewinding in the middle, with a batch in flight.
    assert!(s.rewind().unwrap());
    let mut batch = Batch::default();
    s.fill(&mut batch, 10, None).unwrap();
    assert!(s.rewind().unwrap());
    let (again, err) = drain(&mut s, 64);
    assert!(err.is_none());
    assert_eq!(again, first);
    assert_eq!(s.packets(), 2010);
    std::fs::remove_file(&path).unwrap();
    let mut s = CaptureSource::from_reader(Cursor::new(p.bytes.clone()), "stream", 0, &pool).unwrap();
    assert!(!s.rewind().unwrap());
}

#[test]
fn pcapng_blocks_larger_than_a_pool_block_are_skipped_through() {
    let mut ng = PcapNg::new(false);
    ng.idb(1, 0, None, None).epb(0, 1, &frame(60, 1), 60);
    // A 3 MiB custom block, then an EPB with 2 MiB of options.
    ng.block(0x0000_0BAD, &vec![7u8; 3 << 20], common::Kind::Other);
    let mut body = Vec::new();
    for v in [0u32, 0, 2, 100, 100] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    body.extend_from_slice(&frame(100, 2));
    for _ in 0..(2 << 20) / 1024 {
        body.extend_from_slice(&1u16.to_le_bytes()); // opt_comment of 1020 bytes
        body.extend_from_slice(&1020u16.to_le_bytes());
        body.extend_from_slice(&[b'x'; 1020]);
    }
    ng.block(6, &body, common::Kind::Packet).epb(0, 3, &frame(61, 3), 61);
    let (expected, err) = common::read_bytes(&ng.bytes, "big.pcapng");
    assert!(err.is_none(), "{err:?}");
    assert_eq!(expected.len(), 3);
    for chunk in [usize::MAX, 1000, 7] {
        let pool = BlockPool::new(MIN_BLOCK_SIZE, 2);
        let src = Chunked { data: ng.bytes.clone(), pos: 0, chunk };
        let mut s = CaptureSource::from_reader(src, "big.pcapng", 0, &pool).unwrap();
        let (got, err) = drain(&mut s, 256);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(got, expected);
    }
}

#[test]
fn a_record_larger_than_a_block_is_a_clear_error() {
    let mut p = Pcap::new(false, false, 1);
    p.record(1, 0, &frame(100, 1), 100).record(2, 0, &frame(1000, 2), 1000);
    let pool = BlockPool::new(512, 2);
    let mut s = CaptureSource::from_reader(Cursor::new(p.bytes.clone()), "big", 0, &pool).unwrap();
    let (got, err) = drain(&mut s, 10);
    assert_eq!(got.len(), 1);
    let e = err.unwrap();
    assert!(matches!(e, CaptureError::RecordTooLarge { offset: 140, needed: 1016, block_size: 512, .. }), "{e}");
    assert_eq!(e.kind(), "record-too-large");
}

#[test]
fn header_describes_what_tcpdump_writes() {
    let p = Pcap::with_header(true, false, 0x4000_0001, 0, (2, 3));
    let pool = BlockPool::new(4096, 1);
    let s = CaptureSource::from_reader(Cursor::new(p.bytes.clone()), "h", 0, &pool).unwrap();
    assert_eq!(s.header(), PcapHeaderSpec { precision: netvm_io::TsPrecision::Micro, link_type: 0x4000_0001, snaplen: 262_144 });
    drop(s);
    let mut ng = PcapNg::new(true);
    ng.idb(1, 1500, Some(0x80 | 30), None);
    let s = CaptureSource::from_reader(Cursor::new(ng.bytes.clone()), "h", 0, &pool).unwrap();
    assert_eq!(s.header(), PcapHeaderSpec { precision: netvm_io::TsPrecision::Nano, link_type: 1, snaplen: 1500 });
    assert_eq!(s.format(), netvm_io::CaptureFormat::PcapNg);
    drop(s);
    // A source takes a block to open: none free is an error, not a hang.
    let _hold = pool.try_take().unwrap();
    let e = CaptureSource::from_reader(Cursor::new(ng.bytes.clone()), "h", 0, &pool).unwrap_err();
    assert!(e.to_string().contains("no free block"), "{e}");
}

#[test]
fn source_to_sink_round_trips() {
    let p = trace(2000, 9, 7);
    let pool = BlockPool::new(MIN_BLOCK_SIZE, 2);
    let mut s = CaptureSource::from_reader(Cursor::new(p.bytes.clone()), "in", 0, &pool).unwrap();
    let mut sink = PcapSink::from_writer(Vec::new(), "out", s.header()).unwrap();
    let mut batch = Batch::with_capacity(256);
    while let Fill::Packets(_) = s.fill(&mut batch, 256, None).unwrap() {
        for d in &batch.descs {
            // SAFETY: the batch holds the blocks.
            let pkt = OutPacket { data: unsafe { d.bytes() }, wire_len: d.wirelen, ts: d.ts(), in_port: d.in_port, seq: d.seq };
            sink.write(&pkt).unwrap();
        }
        batch.clear();
    }
    sink.finish().unwrap();
    assert_eq!(sink.packets_written(), 2000);
    // A little-endian microsecond input comes back byte for byte.
    assert_eq!(sink.into_inner().unwrap(), p.bytes);
}

#[test]
fn a_closed_pipe_is_closed_not_failed() {
    /// A writer whose reader went away.
    struct Gone;
    impl Write for Gone {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
    }
    let mut sink = PcapSink::from_writer(Gone, "-", PcapHeaderSpec::default()).unwrap();
    let data = vec![0u8; 300 * 1024];
    let pkt = OutPacket { data: &data[..60], wire_len: 60, ts: ts(1, 0), in_port: 0, seq: 0 };
    sink.write(&pkt).unwrap(); // buffered
    assert!(matches!(sink.flush(), Err(PortError::Closed(name)) if name == "-"));
    // A real pipe whose reading end is closed.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut sink = PcapSink::from_writer(writer, "pipe", PcapHeaderSpec::default()).unwrap();
    let e = sink.finish().unwrap_err();
    assert!(matches!(e, PortError::Closed(_)), "{e:?}");
    // Other errors fail.
    let mut sink = PcapSink::from_writer(Vec::new(), "mem", PcapHeaderSpec::default()).unwrap();
    let huge = OutPacket { data: &data, wire_len: 0, ts: ts(1, 0), in_port: 0, seq: 0 };
    assert!(matches!(sink.write(&huge), Err(PortError::Failed(m)) if m.contains("more than the maximum")));
}

#[test]
fn a_nanosecond_sink_of_a_microsecond_source_and_back() {
    let mut p = Pcap::new(true, false, 1);
    p.record(1, 999_999, &frame(60, 1), 60).record(2, 5, &frame(61, 2), 1514);
    let reader = CaptureReader::from_reader(Cursor::new(p.bytes.clone()), "be").unwrap();
    let pkts = reader.collect_packets().0;
    let spec = PcapHeaderSpec { precision: netvm_io::TsPrecision::Micro, ..PcapHeaderSpec::default() };
    let mut sink = PcapSink::from_writer(Vec::new(), "out", spec).unwrap();
    for q in &pkts {
        sink.write_packet(&q.data, q.wire_len, Timestamp { nsec: q.ts.nsec + 999, ..q.ts }).unwrap();
    }
    let out = sink.into_inner().unwrap();
    // Written in host order, microseconds truncated.
    let (back, err) = common::read_bytes(&out, "out");
    assert!(err.is_none());
    assert_eq!(back, pkts);
}

/// Merging by `until`, on generated inputs: three captures whose packets
/// interleave in runs of any length, tie in time across inputs, vary in
/// size and now and then take the slow path (a timestamp fraction out of
/// range); merged as the driver merges them, the packets come out in
/// `(time, port)` order with their bytes, whatever the pool's block size.
#[test]
fn generated_inputs_merge_in_time_order_with_their_bytes() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for round in 0..20 {
        let mut caps = [Pcap::new(false, false, 1), Pcap::new(false, false, 1), Pcap::new(false, false, 1)];
        let mut want: Vec<(Timestamp, u16, Vec<u8>)> = Vec::new();
        let mut t = 0u32;
        for i in 0..600u32 {
            t += 7 * next(3) as u32; // equal times across inputs, now and then
            let input = next(3) as usize;
            let len = next(200) as usize;
            let data = frame(len, (i as u8).wrapping_mul(7));
            // The time t ms; one record in 50 writes it with a fraction of a
            // second out of range (a second less, a million microseconds
            // more), which only the slow path normalizes.
            let (sec, usec) = (t / 1000, (t % 1000) * 1000);
            let (s, f) = if sec > 0 && next(50) == 0 { (sec - 1, 1_000_000 + usec) } else { (sec, usec) };
            caps[input].record(s, f, &data, len as u32);
            want.push((Timestamp { sec: u64::from(sec), nsec: usec * 1000 }, input as u16 + 1, data));
        }
        want.sort_by_key(|w| (w.0, w.1));
        let pool = BlockPool::new(MIN_BLOCK_SIZE << next(3), 4);
        let mut srcs: Vec<CaptureSource> = caps
            .iter()
            .enumerate()
            .map(|(i, c)| CaptureSource::from_reader(Cursor::new(c.bytes.clone()), "g", i as u16 + 1, &pool).unwrap())
            .collect();
        let mut got = Vec::new();
        let mut batch = Batch::with_capacity(64);
        loop {
            let mut heads: Vec<((Timestamp, u16), usize)> =
                srcs.iter_mut().enumerate().filter_map(|(i, s)| s.peek_time().unwrap().map(|t| ((t, s.in_port()), i))).collect();
            heads.sort();
            let Some(&(_, i)) = heads.first() else { break };
            let until = heads.get(1).map(|h| h.0);
            let max = 1 + next(64) as usize;
            match srcs[i].fill(&mut batch, max, until).unwrap() {
                Fill::Packets(n) => assert!(n > 0 && n <= max, "round {round}"),
                other => panic!("round {round}: {other:?}"),
            }
            got.extend(owned(&batch).into_iter().map(|p| (p.ts, p.in_port, p.data)));
            batch.clear();
        }
        assert_eq!(got.len(), want.len(), "round {round}");
        assert!(got == want, "round {round}: merged packets differ");
    }
}
