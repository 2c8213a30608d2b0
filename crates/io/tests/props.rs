//! Property tests: the writer round-trips through the reader, and no input
//! (arbitrary bytes, mutated valid files) makes the reader panic.

mod common;

use common::{frame, read_bytes, Pcap, PcapNg};
use netvm_io::{CaptureReader, PcapWriter, MAX_CAPLEN};
use netvm_vm::{Packet, Timestamp};
use proptest::prelude::*;

fn packet() -> impl Strategy<Value = Packet> {
    (proptest::collection::vec(any::<u8>(), 0..300), 0u32..3000, 0u64..=u64::from(u32::MAX), 0u32..1_000_000_000)
        .prop_map(|(data, extra, sec, nsec)| Packet { wire_len: data.len() as u32 + extra, data, ts: Timestamp { sec, nsec }, in_port: 5 })
}

/// Checks the reader's invariants on any input.
fn check_any(bytes: &[u8]) {
    let (pkts, err) = read_bytes(bytes, "fuzz");
    for p in &pkts {
        assert!(p.data.len() <= MAX_CAPLEN as usize);
        assert!(p.ts.nsec < 1_000_000_000);
    }
    // Every packet costs at least 16 bytes of file (pcap header; SPB/EPB are larger).
    assert!(pkts.len() * 16 <= bytes.len());
    if let Some(e) = err {
        assert!(e.offset().unwrap_or(0) <= bytes.len() as u64, "{e}");
        assert!(e.to_string().starts_with("fuzz: "), "{e}");
    }
}

fn valid_files() -> Vec<Vec<u8>> {
    let mut p = Pcap::new(false, false, 1);
    p.record(1, 2, &frame(60, 1), 60).record(3, 4, &frame(20, 2), 1500).record(5, 6, &[], 0);
    let mut q = Pcap::new(true, true, 1);
    q.record(1, 2, &frame(30, 1), 60).record(3, 4, &frame(20, 2), 20);
    let mut ng = PcapNg::new(false);
    ng.idb(1, 0, Some(9), Some(5))
        .epb(0, 123_456_789, &frame(61, 1), 61)
        .isb()
        .spb(&frame(33, 3), 33)
        .shb(true)
        .idb(1, 64, Some(0x83), None)
        .idb(113, 0, None, None)
        .epb(0, 77, &frame(20, 4), 20)
        .epb(1, 77, &frame(20, 4), 20);
    vec![p.bytes, q.bytes, ng.bytes]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn write_then_read_gives_the_same_packets(pkts in proptest::collection::vec(packet(), 0..20)) {
        let mut w = PcapWriter::new(Vec::new(), "mem.pcap").unwrap();
        for p in &pkts {
            w.write(p).unwrap();
        }
        let bytes = w.finish().unwrap();
        let r = CaptureReader::from_reader(std::io::Cursor::new(bytes), "mem.pcap").unwrap().with_in_port(5);
        let (back, err) = r.collect_packets();
        prop_assert!(err.is_none(), "{:?}", err);
        prop_assert_eq!(back, pkts);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        check_any(&bytes);
    }

    #[test]
    fn arbitrary_bytes_after_a_valid_magic_never_panic(
        magic in 0usize..5,
        be in any::<bool>(),
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut file = match magic {
            0 => vec![0xD4, 0xC3, 0xB2, 0xA1],
            1 => vec![0xA1, 0xB2, 0xC3, 0xD4],
            2 => vec![0x4D, 0x3C, 0xB2, 0xA1],
            3 => vec![0xA1, 0xB2, 0x3C, 0x4D],
            // pcapng: SHB type, a plausible length, a byte-order magic.
            _ => {
                let mut v = vec![0x0A, 0x0D, 0x0D, 0x0A, 28, 0, 0, 0, 0x4D, 0x3C, 0x2B, 0x1A];
                if be { v[4..8].copy_from_slice(&28u32.to_be_bytes()); v[8..12].copy_from_slice(&[0x1A, 0x2B, 0x3C, 0x4D]); }
                v
            }
        };
        file.extend_from_slice(&bytes);
        check_any(&file);
    }

    #[test]
    fn mutated_valid_files_never_panic(
        which in 0usize..3,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut file = valid_files().swap_remove(which);
        for (at, byte) in edits {
            let i = at.index(file.len());
            file[i] = byte;
        }
        if truncate {
            let n = cut.index(file.len() + 1);
            file.truncate(n);
        }
        check_any(&file);
    }

    #[test]
    fn mutated_length_fields_never_panic(
        which in 0usize..3,
        at in any::<prop::sample::Index>(),
        value in prop_oneof![Just(0u32), Just(u32::MAX), Just(MAX_CAPLEN), Just(MAX_CAPLEN + 1), any::<u32>(), 0u32..64],
    ) {
        let mut file = valid_files().swap_remove(which);
        // Overwrite an aligned u32 (where the length fields are).
        let i = at.index(file.len() / 4) * 4;
        file[i..i + 4].copy_from_slice(&value.to_le_bytes());
        check_any(&file);
        file[i..i + 4].copy_from_slice(&value.to_be_bytes());
        check_any(&file);
    }
}
