//! Hand-made pcap and pcapng files: formats, timestamps, link types, and
//! every kind of corruption, with the byte offsets the errors must name.

mod common;

use std::io::{Cursor, Read};
use std::path::Path;

use common::{frame, read_bytes, Kind, Pcap, PcapNg};
use netvm_io::{read_capture, CaptureError, CaptureFormat, CaptureReader, PcapHeaderSpec, PcapWriter, TsPrecision, MAX_CAPLEN};
use netvm_vm::{Packet, Timestamp};

fn ts(sec: u64, nsec: u32) -> Timestamp {
    Timestamp { sec, nsec }
}

/// A small valid pcap: three records (one with caplen < wire length, one empty).
fn small_pcap() -> Pcap {
    let mut p = Pcap::new(false, false, 1);
    p.record(100, 1, &frame(60, 1), 60).record(101, 999_999, &frame(40, 2), 1514).record(102, 0, &[], 64);
    p
}

/// A small valid pcapng: SHB, IDB, EPB, ISB, EPB, SPB, second section (big-endian) with IDB, EPB.
fn small_pcapng() -> PcapNg {
    let mut ng = PcapNg::new(false);
    ng.idb(1, 0, None, None)
        .epb(0, 1_500_000_123, &frame(61, 1), 61)
        .isb()
        .epb(0, 2_000_000, &frame(14, 2), 100)
        .spb(&frame(33, 3), 33)
        .shb(true)
        .idb(1, 0, Some(9), None)
        .epb(0, 7_000_000_005, &frame(20, 4), 20);
    ng
}

#[test]
fn pcap_microsecond_both_byte_orders() {
    for be in [false, true] {
        let mut p = Pcap::new(be, false, 1);
        p.record(1_700_000_000, 123_456, &frame(60, 9), 60).record(5, 0, &frame(14, 1), 1514);
        let r = CaptureReader::from_reader(Cursor::new(p.bytes.clone()), "u.pcap").unwrap();
        assert_eq!(r.format(), CaptureFormat::Pcap { nanosecond: false, big_endian: be });
        assert_eq!(r.link_type(), Some(1));
        let (pkts, err) = r.with_in_port(3).collect_packets();
        assert!(err.is_none(), "{err:?}");
        assert_eq!(
            pkts,
            vec![
                Packet { data: frame(60, 9), wire_len: 60, ts: ts(1_700_000_000, 123_456_000), in_port: 3 },
                Packet { data: frame(14, 1), wire_len: 1514, ts: ts(5, 0), in_port: 3 },
            ]
        );
    }
}

#[test]
fn pcap_nanosecond_both_byte_orders() {
    for be in [false, true] {
        let mut p = Pcap::new(be, true, 1);
        p.record(1_700_000_000, 123_456_789, &frame(60, 9), 60).record(7, 999_999_999, &frame(20, 1), 20);
        let r = CaptureReader::from_reader(Cursor::new(p.bytes.clone()), "n.pcap").unwrap();
        assert_eq!(r.format(), CaptureFormat::Pcap { nanosecond: true, big_endian: be });
        let (pkts, err) = r.collect_packets();
        assert!(err.is_none(), "{err:?}");
        assert_eq!(pkts[0].ts, ts(1_700_000_000, 123_456_789));
        assert_eq!(pkts[1].ts, ts(7, 999_999_999));
    }
}

#[test]
fn pcap_out_of_range_fraction_is_normalized() {
    // As in timestamp_invalid_micro.pcap: usec = 1_000_000 and more.
    let mut p = Pcap::new(false, false, 1);
    p.record(10, 1_000_000, &frame(20, 0), 20).record(10, 3_500_000, &frame(20, 0), 20).record(u32::MAX, u32::MAX, &frame(20, 0), 20);
    let (pkts, err) = read_bytes(&p.bytes, "m.pcap");
    assert!(err.is_none());
    assert_eq!(pkts[0].ts, ts(11, 0));
    assert_eq!(pkts[1].ts, ts(13, 500_000_000));
    assert_eq!(pkts[2].ts, ts(u64::from(u32::MAX) + 4294, 967_295_000));
    let mut n = Pcap::new(false, true, 1);
    n.record(10, 2_000_000_001, &frame(20, 0), 20);
    assert_eq!(read_bytes(&n.bytes, "n.pcap").0[0].ts, ts(12, 1));
}

#[test]
fn caplen_greater_than_wire_len_keeps_both() {
    // libpcap passes the wire length through as the file has it.
    let mut p = Pcap::new(false, false, 1);
    p.record(1, 0, &frame(100, 0), 50);
    let (pkts, err) = read_bytes(&p.bytes, "c.pcap");
    assert!(err.is_none());
    assert_eq!(pkts[0].data, frame(100, 0));
    assert_eq!(pkts[0].wire_len, 50);
}

#[test]
fn records_beyond_the_snapshot_are_cut_to_it() {
    // As libpcap: the first snaplen bytes are kept, the rest skipped.
    for be in [false, true] {
        let mut p = Pcap::with_header(be, false, 1, 64, (2, 4));
        p.record(1, 0, &frame(100, 1), 1500).record(2, 0, &frame(64, 2), 64).record(3, 0, &frame(65, 3), 65);
        let r = CaptureReader::from_reader(Cursor::new(p.bytes.clone()), "snap.pcap").unwrap();
        assert_eq!(r.snaplen(), 64);
        let (pkts, err) = r.collect_packets();
        assert!(err.is_none(), "{err:?}");
        assert_eq!(
            pkts.iter().map(|p| (p.data.clone(), p.wire_len)).collect::<Vec<_>>(),
            vec![(frame(64, 1), 1500), (frame(64, 2), 64), (frame(64, 3), 65)]
        );
        // Truncated inside the skipped part: the record's error.
        let n = p.bytes.len() - 1;
        let (pkts, err) = read_bytes(&p.bytes[..n], "snap.pcap");
        assert_eq!(pkts.len(), 2);
        let e = err.unwrap();
        let last = p.records[2] as u64;
        assert!(matches!(e, CaptureError::TruncatedRecord { offset, caplen: 65, remain: 64, .. } if offset == last), "{e}");
    }
}

#[test]
fn snapshot_length_is_adjusted_as_libpcap_does() {
    // 0 and values above INT_MAX become MAX_CAPLEN; others stay (even above MAX_CAPLEN).
    for (snaplen, snapshot) in [(0, MAX_CAPLEN), (u32::MAX, MAX_CAPLEN), (1 << 31, MAX_CAPLEN), (262_208, 262_208), (96, 96)] {
        let p = Pcap::with_header(false, false, 1, snaplen, (2, 4));
        let r = CaptureReader::from_reader(Cursor::new(p.bytes.clone()), "s.pcap").unwrap();
        assert_eq!(r.snaplen(), snapshot, "{snaplen}");
        assert_eq!(r.header().snaplen, snapshot);
    }
}

#[test]
fn pcap_versions_as_libpcap() {
    // 2.0-2.2 and 543.0 have caplen and len swapped; 2.3 when caplen > len.
    for (version, swapped) in [((2, 0), true), ((2, 1), true), ((2, 2), true), ((543, 0), true), ((2, 4), false)] {
        let mut p = Pcap::with_header(false, false, 1, 65535, version);
        // Header fields in the order (caplen, len) = (1500, 60): 60 captured bytes if swapped.
        p.raw_record(1, 0, if swapped { 1500 } else { 60 }, if swapped { 60 } else { 1500 }, &frame(60, 0));
        let (pkts, err) = read_bytes(&p.bytes, "v.pcap");
        assert!(err.is_none(), "{version:?}: {err:?}");
        assert_eq!((pkts[0].data.len(), pkts[0].wire_len), (60, 1500), "{version:?}");
    }
    let mut p = Pcap::with_header(false, false, 1, 65535, (2, 3));
    p.raw_record(1, 0, 60, 1500, &frame(60, 0)).raw_record(1, 0, 1500, 60, &frame(60, 1));
    let (pkts, err) = read_bytes(&p.bytes, "v.pcap");
    assert!(err.is_none(), "{err:?}");
    assert_eq!(pkts.iter().map(|p| (p.data.len(), p.wire_len)).collect::<Vec<_>>(), vec![(60, 1500), (60, 1500)]);
    for (version, what) in [
        ((1, 0), "archaic"),
        ((0, 9), "archaic"),
        ((2, 5), "unsupported pcap savefile version 2.5"),
        ((3, 0), "unsupported"),
        ((543, 1), "unsupported"),
    ] {
        let p = Pcap::with_header(true, false, 1, 65535, version);
        let e = CaptureReader::from_reader(Cursor::new(p.bytes.clone()), "v.pcap").unwrap_err();
        assert!(matches!(e, CaptureError::Corrupt { offset: 0, .. }), "{e}");
        assert!(e.to_string().contains(what), "{e}");
    }
}

#[test]
fn link_type_ext_bits_are_kept_apart() {
    let mut p = Pcap::with_header(true, true, 0x3000_0001, 128, (2, 4));
    p.record(1, 5, &frame(60, 0), 60);
    let r = CaptureReader::from_reader(Cursor::new(p.bytes.clone()), "fcs.pcap").unwrap();
    assert_eq!(r.link_type(), Some(1));
    assert_eq!(r.link_type_ext(), 0x3000_0000);
    assert_eq!(r.precision(), TsPrecision::Nano);
    assert_eq!(r.header(), PcapHeaderSpec { precision: TsPrecision::Nano, link_type: 0x3000_0001, snaplen: 128 });
    assert_eq!(r.collect_packets().0.len(), 1);
}

#[test]
fn pcapng_default_resolution_is_microseconds() {
    let mut ng = PcapNg::new(false);
    ng.idb(1, 0, None, None).epb(0, 1_700_000_000_123_456, &frame(60, 0), 60);
    let (pkts, err) = read_bytes(&ng.bytes, "d.pcapng");
    assert!(err.is_none(), "{err:?}");
    assert_eq!(pkts[0].ts, ts(1_700_000_000, 123_456_000));
}

#[test]
fn pcapng_tsresol_nanoseconds_binary_and_offset() {
    for be in [false, true] {
        let mut ng = PcapNg::new(be);
        ng.idb(1, 0, Some(9), None)
            .idb(1, 0, Some(0x80 | 20), Some(-100)) // 2^-20 s units, minus 100 s
            .idb(1, 0, Some(3), Some(1000))
            .idb(1, 0, Some(0), None)
            .epb(0, 1_700_000_000_123_456_789, &frame(60, 0), 60)
            .epb(1, (1000u64 << 20) | (1 << 19), &frame(60, 1), 60)
            .epb(2, 5_001, &frame(60, 2), 60)
            .epb(3, 42, &frame(60, 3), 60);
        let r = CaptureReader::from_reader(Cursor::new(ng.bytes.clone()), "ns.pcapng").unwrap();
        assert_eq!(r.format(), CaptureFormat::PcapNg);
        assert_eq!(r.link_type(), Some(1));
        let (pkts, err) = r.collect_packets();
        assert!(err.is_none(), "{err:?}");
        assert_eq!(pkts[0].ts, ts(1_700_000_000, 123_456_789));
        assert_eq!(pkts[1].ts, ts(900, 500_000_000));
        assert_eq!(pkts[2].ts, ts(1005, 1_000_000));
        assert_eq!(pkts[3].ts, ts(42, 0));
    }
}

#[test]
fn pcapng_small_file_reads_every_packet() {
    let ng = small_pcapng();
    let (pkts, err) = read_bytes(&ng.bytes, "s.pcapng");
    assert!(err.is_none(), "{err:?}");
    assert_eq!(pkts.len(), 4);
    assert_eq!(pkts[0], Packet { data: frame(61, 1), wire_len: 61, ts: ts(1500, 123_000), in_port: 0 });
    assert_eq!(pkts[1], Packet { data: frame(14, 2), wire_len: 100, ts: ts(2, 0), in_port: 0 });
    // SPB: no timestamp; data padded in the block, cut to the original length.
    assert_eq!(pkts[2], Packet { data: frame(33, 3), wire_len: 33, ts: ts(0, 0), in_port: 0 });
    assert_eq!(pkts[3], Packet { data: frame(20, 4), wire_len: 20, ts: ts(7, 5), in_port: 0 });
}

#[test]
fn pcapng_spb_honours_snaplen() {
    let mut ng = PcapNg::new(false);
    ng.idb(1, 16, None, None).spb(&frame(32, 0), 1500);
    let (pkts, err) = read_bytes(&ng.bytes, "snap.pcapng");
    assert!(err.is_none(), "{err:?}");
    assert_eq!(pkts[0].data, frame(16, 0));
    assert_eq!(pkts[0].wire_len, 1500);
}

#[test]
fn truncated_pcap_at_every_byte() {
    let p = small_pcap();
    let full = read_bytes(&p.bytes, "t.pcap").0;
    assert_eq!(full.len(), 3);
    let ends: Vec<usize> = p.records.iter().skip(1).copied().chain([p.bytes.len()]).collect();
    for n in 0..=p.bytes.len() {
        let (pkts, err) = read_bytes(&p.bytes[..n], "t.pcap");
        let done = ends.iter().filter(|&&e| e <= n).count();
        assert_eq!(pkts[..], full[..done], "cut at {n}");
        if n < 24 {
            let e = err.unwrap_or_else(|| panic!("cut at {n}: no error"));
            assert!(matches!(e, CaptureError::TruncatedFileHeader { .. }), "cut at {n}: {e}");
            assert_eq!(e.offset(), Some(0));
            continue;
        }
        if n == 24 || ends.contains(&n) {
            assert!(err.is_none(), "cut at {n}: {err:?}");
            continue;
        }
        let start = *p.records.iter().rev().find(|&&r| r <= n).unwrap();
        let e = err.unwrap_or_else(|| panic!("cut at {n}: no error"));
        assert_eq!(e.offset(), Some(start as u64), "cut at {n}: {e}");
        if n - start < 16 {
            assert!(matches!(e, CaptureError::TruncatedRecordHeader { got, .. } if got == (n - start) as u64), "{e}");
        } else {
            let remain = (n - start - 16) as u64;
            assert!(matches!(e, CaptureError::TruncatedRecord { remain: r, .. } if r == remain), "{e}");
            assert!(e.to_string().contains(&format!("{remain} remain")), "{e}");
        }
        assert!(e.to_string().starts_with("t.pcap: truncated"), "{e}");
    }
}

#[test]
fn truncated_pcapng_at_every_byte() {
    let ng = small_pcapng();
    let full = read_bytes(&ng.bytes, "t.pcapng").0;
    assert_eq!(full.len(), 4);
    let shb_end = ng.blocks[0].1;
    for n in 0..=ng.bytes.len() {
        let (pkts, err) = read_bytes(&ng.bytes[..n], "t.pcapng");
        let done = ng.blocks.iter().filter(|b| b.2 == Kind::Packet && b.1 <= n).count();
        assert_eq!(pkts[..], full[..done], "cut at {n}");
        if n < shb_end {
            let e = err.unwrap_or_else(|| panic!("cut at {n}: no error"));
            assert!(matches!(e, CaptureError::TruncatedFileHeader { .. }), "cut at {n}: {e}");
            continue;
        }
        if ng.blocks.iter().any(|b| b.1 == n) {
            assert!(err.is_none(), "cut at {n}: {err:?}");
            continue;
        }
        let (start, _, _) = *ng.blocks.iter().find(|b| b.0 <= n && n < b.1).unwrap();
        let e = err.unwrap_or_else(|| panic!("cut at {n}: no error"));
        assert!(e.is_truncation(), "cut at {n}: {e}");
        assert_eq!(e.offset(), Some(start as u64), "cut at {n}: {e}");
        if let CaptureError::TruncatedBlock { remain, .. } = e {
            assert_eq!(remain, (n - start) as u64);
        }
    }
}

#[test]
fn caplen_beyond_maximum_is_refused_without_allocating() {
    let mut p = Pcap::new(false, false, 1);
    p.record(1, 0, &frame(60, 0), 60).raw_record(2, 0, 0xFFFF_FFF0, 0xFFFF_FFF0, &frame(100, 0));
    let (pkts, err) = read_bytes(&p.bytes, "big.pcap");
    assert_eq!(pkts.len(), 1);
    let e = err.unwrap();
    assert!(matches!(e, CaptureError::CaplenTooLarge { offset: 100, caplen: 0xFFFF_FFF0, .. }), "{e}");
    // Exactly the maximum is fine (if the bytes are there and the snaplen allows it).
    let mut p = Pcap::with_header(true, false, 1, 0, (2, 4));
    p.record(1, 0, &vec![0xAB; MAX_CAPLEN as usize], MAX_CAPLEN);
    let (pkts, err) = read_bytes(&p.bytes, "max.pcap");
    assert!(err.is_none());
    assert_eq!(pkts[0].data.len(), MAX_CAPLEN as usize);
    let mut p = Pcap::new(true, false, 1);
    p.raw_record(1, 0, MAX_CAPLEN + 1, MAX_CAPLEN + 1, &[]);
    assert!(matches!(read_bytes(&p.bytes, "x").1, Some(CaptureError::CaplenTooLarge { offset: 24, .. })));
}

#[test]
fn not_a_capture_file() {
    let (pkts, err) = read_bytes(b"Hello, this is text\n", "notes.txt");
    assert!(pkts.is_empty());
    let e = err.unwrap();
    assert!(matches!(e, CaptureError::NotCapture { .. }));
    assert_eq!(e.to_string(), "notes.txt: not a pcap or pcapng capture file (starts with 48 65 6c 6c)");
    assert!(matches!(read_bytes(b"", "empty").1, Some(CaptureError::TruncatedFileHeader { got: 0, .. })));
    assert!(matches!(read_bytes(&[0xD4, 0xC3], "short").1, Some(CaptureError::TruncatedFileHeader { got: 2, .. })));
    assert!(matches!(read_bytes(&[0x00, 0xC3], "short").1, Some(CaptureError::NotCapture { .. })));
}

#[test]
fn unsupported_link_types() {
    for (lt, label) in [(113, "113 (LINUX_SLL)"), (101, "101 (RAW)"), (127, "127 (IEEE802_11_RADIOTAP)"), (60000, "60000")] {
        let mut p = Pcap::new(false, false, lt);
        p.record(1, 0, &frame(60, 0), 60);
        let r = CaptureReader::from_reader(Cursor::new(p.bytes.clone()), "sll.pcap").unwrap();
        assert_eq!(r.link_type(), Some(lt));
        let (pkts, err) = r.collect_packets();
        assert!(pkts.is_empty());
        let e = err.unwrap();
        assert!(matches!(e, CaptureError::UnsupportedLinkType { offset: 20, link_type, .. } if link_type == lt));
        assert_eq!(e.to_string(), format!("sll.pcap: unsupported link type {label} at byte 20; only ETHERNET (1) is supported"));
    }
    // pcapng: the error comes at the first packet of the non-Ethernet interface.
    let mut ng = PcapNg::new(false);
    ng.idb(1, 0, None, None).idb(276, 0, None, None).epb(0, 1, &frame(60, 0), 60).epb(1, 2, &frame(60, 1), 60);
    let bad = ng.blocks[4].0 as u64;
    let (pkts, err) = read_bytes(&ng.bytes, "mixed.pcapng");
    assert_eq!(pkts.len(), 1);
    let e = err.unwrap();
    assert!(matches!(e, CaptureError::UnsupportedLinkType { link_type: 276, offset, .. } if offset == bad), "{e}");
    assert!(e.to_string().contains("unsupported link type 276 (LINUX_SLL2)"), "{e}");
}

#[test]
fn pcapng_epb_for_undescribed_interface() {
    let mut ng = PcapNg::new(false);
    ng.idb(1, 0, None, None).epb(0, 1, &frame(60, 0), 60).epb(3, 2, &frame(60, 1), 60);
    let bad = ng.blocks[3].0 as u64;
    let (pkts, err) = read_bytes(&ng.bytes, "if.pcapng");
    assert_eq!(pkts.len(), 1);
    let e = err.unwrap();
    assert!(matches!(e, CaptureError::Corrupt { offset, .. } if offset == bad), "{e}");
    assert!(e.to_string().contains("interface 3"), "{e}");
    // A packet before any interface: an error from opening.
    let mut ng = PcapNg::new(false);
    ng.spb(&frame(60, 0), 60);
    let spb = ng.blocks[1].0 as u64;
    let e = CaptureReader::from_reader(Cursor::new(ng.bytes.clone()), "x").unwrap_err();
    assert!(matches!(e, CaptureError::Corrupt { offset, .. } if offset == spb), "{e}");
    // A new section forgets the interfaces of the previous one.
    let mut ng = PcapNg::new(false);
    ng.idb(1, 0, None, None).shb(false).epb(0, 1, &frame(60, 0), 60);
    assert!(matches!(read_bytes(&ng.bytes, "x").1, Some(CaptureError::Corrupt { .. })));
}

/// Sets the u32 at `at` (little-endian).
fn poke(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn pcapng_bad_block_lengths() {
    let ng = small_pcapng();
    let epb2 = ng.blocks[4].0; // second EPB, after the ISB
    let cases: [(u32, &str); 4] = [(8, "less than"), (0, "less than"), (70, "multiple of 4"), (24, "less than")];
    for (len, why) in cases {
        let mut b = ng.bytes.clone();
        poke(&mut b, epb2 + 4, len);
        let (pkts, err) = read_bytes(&b, "len.pcapng");
        assert_eq!(pkts.len(), 1);
        let e = err.unwrap();
        assert!(matches!(e, CaptureError::BadBlockLength { offset, block_len, .. } if offset == epb2 as u64 && block_len == len), "{e}");
        assert!(e.to_string().contains(why), "{e}");
    }
    // Trailing length differs.
    let mut b = ng.bytes.clone();
    let end = ng.blocks[4].1;
    poke(&mut b, end - 4, 999);
    let e = read_bytes(&b, "len.pcapng").1.unwrap();
    assert!(matches!(e, CaptureError::BadBlockLength { offset, .. } if offset == epb2 as u64), "{e}");
    assert!(e.to_string().contains("trailing block length is 999"), "{e}");
    // A length larger than the file: truncated.
    let mut b = ng.bytes.clone();
    poke(&mut b, epb2 + 4, 0x7FFF_FFF0);
    let e = read_bytes(&b, "len.pcapng").1.unwrap();
    assert!(matches!(e, CaptureError::TruncatedBlock { offset, .. } if offset == epb2 as u64), "{e}");
    // A huge skipped block (ISB) is skipped by streaming, then found truncated.
    let isb = ng.blocks[3].0;
    let mut b = ng.bytes.clone();
    poke(&mut b, isb + 4, 0xFFFF_FFF0);
    let e = read_bytes(&b, "len.pcapng").1.unwrap();
    assert!(matches!(e, CaptureError::TruncatedBlock { offset, .. } if offset == isb as u64), "{e}");
    // Captured length larger than the EPB.
    let mut b = ng.bytes.clone();
    poke(&mut b, epb2 + 20, 1000);
    let e = read_bytes(&b, "len.pcapng").1.unwrap();
    assert!(matches!(e, CaptureError::Corrupt { offset, .. } if offset == epb2 as u64), "{e}");
    let mut b = ng.bytes.clone();
    poke(&mut b, epb2 + 20, 0xFFFF_FF00);
    let e = read_bytes(&b, "len.pcapng").1.unwrap();
    assert!(matches!(e, CaptureError::CaplenTooLarge { offset, .. } if offset == epb2 as u64), "{e}");
}

#[test]
fn pcapng_bad_section_header() {
    let ng = small_pcapng();
    let mut b = ng.bytes.clone();
    b[8..12].copy_from_slice(&[1, 2, 3, 4]);
    let e = read_bytes(&b, "shb.pcapng").1.unwrap();
    assert!(matches!(e, CaptureError::Corrupt { offset: 0, .. }), "{e}");
    let mut b = ng.bytes.clone();
    b[12] = 2; // major version 2
    let e = read_bytes(&b, "shb.pcapng").1.unwrap();
    assert!(e.to_string().contains("unsupported pcapng version 2.0"), "{e}");
    // Bad if_tsresol option length in an IDB.
    let mut ng = PcapNg::new(false);
    ng.idb(1, 0, Some(9), None);
    let idb = ng.blocks[1].0;
    let mut b = ng.bytes.clone();
    b[idb + 16 + 8 + 2] = 2; // if_tsresol length 2
    let e = read_bytes(&b, "idb.pcapng").1.unwrap();
    assert!(matches!(e, CaptureError::Corrupt { offset, .. } if offset == idb as u64), "{e}");
    let mut ng = PcapNg::new(false);
    ng.idb(1, 0, Some(77), None).epb(0, 1, &frame(60, 0), 60);
    let e = read_bytes(&ng.bytes, "idb.pcapng").1.unwrap();
    assert!(e.to_string().contains("if_tsresol 0x4d is out of range"), "{e}");
}

#[test]
fn io_errors_name_the_file() {
    let (pkts, err) = read_capture(Path::new("/nonexistent/dir/trace.pcap"), 0);
    assert!(pkts.is_empty());
    let e = err.unwrap();
    assert!(matches!(e, CaptureError::Io { .. }));
    assert!(e.to_string().starts_with("/nonexistent/dir/trace.pcap: "), "{e}");

    /// Yields `good` bytes, then fails.
    struct Failing(Cursor<Vec<u8>>);
    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match self.0.read(buf)? {
                0 => Err(std::io::Error::other("disk on fire")),
                n => Ok(n),
            }
        }
    }
    let p = small_pcap();
    let r = CaptureReader::from_reader(Failing(Cursor::new(p.bytes[..100].to_vec())), "f.pcap").unwrap();
    let (pkts, err) = r.collect_packets();
    assert_eq!(pkts.len(), 1);
    assert_eq!(err.unwrap().to_string(), "f.pcap: disk on fire");
}

#[test]
fn writer_round_trips_through_a_file() {
    let pkts = vec![
        Packet { data: frame(60, 1), wire_len: 60, ts: ts(1_700_000_000, 123_456_789), in_port: 2 },
        Packet { data: frame(14, 2), wire_len: 9000, ts: ts(0, 0), in_port: 2 },
        Packet { data: vec![], wire_len: 0, ts: ts(u64::from(u32::MAX), 999_999_999), in_port: 2 },
    ];
    let path = std::env::temp_dir().join(format!("netvm-io-writer-{}.pcap", std::process::id()));
    let mut w = PcapWriter::create(&path).unwrap();
    for p in &pkts {
        w.write(p).unwrap();
    }
    assert_eq!(w.packets_written(), 3);
    w.finish().unwrap();
    let (back, err) = read_capture(&path, 2);
    std::fs::remove_file(&path).unwrap();
    assert!(err.is_none(), "{err:?}");
    assert_eq!(back, pkts);
}

#[test]
fn writer_refuses_or_wraps_what_pcap_cannot_hold() {
    let mut w = PcapWriter::new(Vec::new(), "mem.pcap").unwrap();
    let huge = Packet::from_bytes(vec![0; MAX_CAPLEN as usize + 1]);
    let e = w.write(&huge).unwrap_err();
    assert!(matches!(e, CaptureError::Unwritable { index: 0, .. }), "{e}");
    // Seconds after 2106 wrap around to 32 bits, as libpcap writes them.
    let late = Packet { data: frame(60, 0), wire_len: 60, ts: ts((1 << 32) + 5, 7), in_port: 0 };
    w.write(&late).unwrap();
    // wire_len below the captured length is written as it is (as libpcap does).
    let short = Packet { data: frame(60, 0), wire_len: 10, ts: ts(1, 0), in_port: 0 };
    w.write(&short).unwrap();
    let bytes = w.finish().unwrap();
    let (back, err) = read_bytes(&bytes, "mem.pcap");
    assert!(err.is_none());
    assert_eq!(back, vec![Packet { ts: ts(5, 7), ..late }, short]);
}
