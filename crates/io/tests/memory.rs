//! Memory is bounded by the reader's blocks (two of `MIN_BLOCK_SIZE` bytes
//! for a `CaptureReader`, the pool's for a `CaptureSource`) plus a fixed
//! amount, whatever the headers claim and however long the stream: a
//! counting global allocator measures the peak.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Cursor, Read};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use netvm_io::{CaptureReader, CaptureSource, MIN_BLOCK_SIZE};
use netvm_vm::buffer::{Batch, BlockPool};
use netvm_vm::port::{Fill, Source};

/// What a `CaptureReader` may hold: its two blocks (rounded to a cache
/// line), the packet it returns and a fixed amount.
const READER_BOUND: usize = 2 * (MIN_BLOCK_SIZE + 64) + 96 * 1024;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Tests in this file measure one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc`, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
            PEAK.fetch_max(now, Ordering::SeqCst);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above, i.e. from `System`, with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Peak bytes allocated beyond what was live at the start, while running `f`.
fn peak_during(f: impl FnOnce()) -> usize {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    f();
    PEAK.load(Ordering::SeqCst) - base
}

/// An endless pcap stream: a header, then the same record forever.
struct Endless {
    header: Cursor<Vec<u8>>,
    record: Vec<u8>,
    pos: usize,
}

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.header.read(buf)?;
        if n > 0 {
            return Ok(n);
        }
        let mut k = 0;
        while k < buf.len() {
            buf[k] = self.record[self.pos];
            self.pos = (self.pos + 1) % self.record.len();
            k += 1;
        }
        Ok(k)
    }
}

#[test]
fn streaming_memory_is_bounded() {
    let _guard = serial();
    let mut header = vec![0xD4, 0xC3, 0xB2, 0xA1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0, 1, 0, 0, 0];
    header.truncate(24);
    let mut record = Vec::new();
    for v in [1u32, 0, 1500, 1500] {
        record.extend_from_slice(&v.to_le_bytes());
    }
    record.extend(std::iter::repeat_n(0x55, 1500));
    let peak = peak_during(|| {
        let src = Endless { header: Cursor::new(header), record, pos: 0 };
        let reader = CaptureReader::from_reader(src, "endless").unwrap();
        let n = reader.take(200_000).filter(|p| p.is_ok()).count();
        assert_eq!(n, 200_000);
    });
    assert!(peak < READER_BOUND, "peak {peak}");
}

#[test]
fn lying_headers_do_not_allocate() {
    let _guard = serial();
    // A pcap record header claiming 4 GiB, then a pcapng block claiming 4 GiB.
    let mut pcap = vec![0xD4, 0xC3, 0xB2, 0xA1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 1, 0, 0, 0];
    pcap.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0xF0, 0xFF, 0xFF, 0xFF, 0xF0, 0xFF, 0xFF, 0xFF]);
    let mut ng = vec![0x0A, 0x0D, 0x0D, 0x0A, 28, 0, 0, 0, 0x4D, 0x3C, 0x2B, 0x1A, 1, 0, 0, 0];
    ng.extend_from_slice(&[0xFF; 8]);
    ng.extend_from_slice(&[28, 0, 0, 0]);
    // IDB claiming 4 GiB, EPB claiming 4 GiB, unknown block claiming 4 GiB.
    for block_type in [1u32, 6, 0x0BAD] {
        let mut f = ng.clone();
        f.extend_from_slice(&block_type.to_le_bytes());
        f.extend_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
        f.extend_from_slice(&[0; 64]);
        let peak = peak_during(|| {
            let r = CaptureReader::from_reader(Cursor::new(f), "lying.pcapng");
            let err = match r {
                Ok(r) => r.collect_packets().1,
                Err(e) => Some(e),
            };
            assert!(err.is_some());
        });
        assert!(peak < READER_BOUND, "block type {block_type:#x}: peak {peak}");
    }
    let peak = peak_during(|| {
        let (_, err) = CaptureReader::from_reader(Cursor::new(pcap), "lying.pcap").unwrap().collect_packets();
        assert!(err.is_some());
    });
    assert!(peak < READER_BOUND, "peak {peak}");
}

#[test]
fn source_memory_is_the_pool_and_a_fixed_amount() {
    let _guard = serial();
    let header = vec![0xD4, 0xC3, 0xB2, 0xA1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0, 1, 0, 0, 0];
    let mut record = Vec::new();
    for v in [1u32, 0, 1500, 1500] {
        record.extend_from_slice(&v.to_le_bytes());
    }
    record.extend(std::iter::repeat_n(0x55, 1500));
    // The pool is allocated before the measure: what the source adds is
    // its own state, the batch's arrays and nothing per packet.
    let pool = BlockPool::new(1 << 20, 4);
    let peak = peak_during(|| {
        let src = Endless { header: Cursor::new(header), record, pos: 0 };
        let mut source = CaptureSource::from_reader(src, "endless", 0, &pool).unwrap();
        let mut batch = Batch::with_capacity(256);
        let mut n = 0u64;
        while n < 300_000 {
            match source.fill(&mut batch, 256, None).unwrap() {
                Fill::Packets(k) => n += k as u64,
                other => panic!("{other:?}"),
            }
            batch.clear();
        }
        assert_eq!(source.packets(), n);
    });
    assert!(peak < 64 * 1024, "peak {peak}");
    // The current block, and the next one while a record straddles.
    assert!(pool.high_water() <= 2, "{} blocks", pool.high_water());
}
