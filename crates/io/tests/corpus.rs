//! Reads every file of the tcpdump regression corpus (shared/corpus/tcpdump-tests,
//! beside the checkout): no panic; Ethernet files yield packets; other link
//! types give the unsupported-link-type error. Prints a summary.

use std::collections::BTreeMap;
use std::path::Path;

use netvm_io::{read_capture, CaptureError, CaptureFormat, CaptureReader, LINKTYPE_ETHERNET};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/corpus/tcpdump-tests");

#[test]
fn tcpdump_corpus() {
    let dir = Path::new(CORPUS);
    let Ok(entries) = std::fs::read_dir(dir) else {
        println!("skipping: corpus directory {} is absent", dir.display());
        return;
    };
    let mut paths: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_file()).collect();
    paths.sort();

    let mut ok = 0usize;
    let mut packets = 0usize;
    let mut by_kind: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut unsupported: BTreeMap<u32, usize> = BTreeMap::new();
    let mut ethernet = 0usize;
    let mut ethernet_with_packets = 0usize;
    let mut examples: BTreeMap<&'static str, String> = BTreeMap::new();

    for path in &paths {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let header = CaptureReader::open(path);
        let (pkts, err) = read_capture(path, 7);
        packets += pkts.len();
        // The wire length is passed through as the file has it (libpcap's
        // behaviour), so a damaged file may have it below the captured length.
        assert!(pkts.iter().all(|p| p.in_port == 7 && p.data.len() <= netvm_io::MAX_CAPLEN as usize));
        assert!(pkts.iter().all(|p| p.ts.nsec < 1_000_000_000));

        match &err {
            None => ok += 1,
            Some(e) => {
                *by_kind.entry(e.kind()).or_default() += 1;
                examples.entry(e.kind()).or_insert_with(|| e.to_string());
                assert!(e.to_string().starts_with(&path.display().to_string()), "{e}");
                let len = std::fs::metadata(path).unwrap().len();
                assert!(e.offset().unwrap_or(0) <= len, "{e}");
            }
        }
        if let Some(CaptureError::UnsupportedLinkType { link_type, .. }) = &err {
            assert_ne!(*link_type, LINKTYPE_ETHERNET);
            *unsupported.entry(*link_type).or_default() += 1;
        }

        match header {
            Err(e) => {
                // Only non-captures (the licence file) and pcapng files with a bad first blocks.
                assert!(!name.ends_with(".pcap"), "{name}: {e}");
                if !name.ends_with(".pcapng") {
                    assert!(matches!(e, CaptureError::NotCapture { .. }), "{e}");
                }
            }
            Ok(r) => {
                let link = r.link_type();
                if let CaptureFormat::Pcap { .. } = r.format() {
                    if link == Some(LINKTYPE_ETHERNET) {
                        ethernet += 1;
                        if !pkts.is_empty() {
                            ethernet_with_packets += 1;
                        } else {
                            // No packets: the file has none, or its first record is bad.
                            assert!(err.is_none() || err.as_ref().unwrap().offset() == Some(24), "{name}: {err:?}");
                        }
                        assert!(!matches!(err, Some(CaptureError::UnsupportedLinkType { .. })), "{name}");
                    } else {
                        assert!(pkts.is_empty(), "{name}");
                        assert!(
                            matches!(err, Some(CaptureError::UnsupportedLinkType { link_type, .. }) if Some(link_type) == link),
                            "{name}: {err:?}"
                        );
                    }
                } else if link == Some(LINKTYPE_ETHERNET) {
                    ethernet += 1;
                    if !pkts.is_empty() {
                        ethernet_with_packets += 1;
                    }
                } else if link.is_some() {
                    // pcapng whose first interface is not Ethernet: unsupported at its first packet.
                    assert!(pkts.is_empty(), "{name}");
                }
            }
        }
    }

    println!("tcpdump corpus: {} files, {ok} read to the end, {packets} packets", paths.len());
    println!("  Ethernet files: {ethernet}, of which {ethernet_with_packets} yield packets");
    for (kind, n) in &by_kind {
        println!("  {kind}: {n}   e.g. {}", examples[kind]);
    }
    let names: Vec<String> =
        unsupported.iter().map(|(lt, n)| format!("{}:{n}", netvm_io::link_type_name(*lt).unwrap_or_else(|| lt.to_string()))).collect();
    println!("  unsupported link types: {}", names.join(" "));
    assert!(ethernet > 300 && ethernet_with_packets * 10 >= ethernet * 9, "{ethernet_with_packets}/{ethernet}");
}
