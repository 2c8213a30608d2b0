//! The user-defined coprocessor example (examples/user_copro.rs) works on
//! both engines and its answer matches a direct count.

#[allow(dead_code)]
#[path = "../examples/user_copro.rs"]
mod user_copro;

use std::collections::HashSet;

#[test]
fn bloom_example_counts_first_packets_of_each_pair() {
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/traces/mixed.pcap");
    let (packets, err) = netvm_io::read_capture(std::path::Path::new(trace), 0);
    assert!(err.is_none());
    let mut pairs = HashSet::new();
    for p in &packets {
        let d = &p.data;
        if d.len() >= 34 && d[12..14] == [0x08, 0x00] {
            pairs.insert(d[26..34].to_vec());
        }
    }
    for engine in ["interp", "jit"] {
        let (rest, first, inserted) = user_copro::first_seen(&packets, engine).unwrap();
        // 2^16 bits for a few hundred pairs: a false positive is possible in
        // principle, but not for this fixed trace and these hashes.
        assert_eq!(first, pairs.len() as u64, "{engine}");
        assert_eq!(inserted, pairs.len() as u64, "{engine}");
        assert_eq!(first + rest, packets.len() as u64, "{engine}");
    }
    let mut bad = netvm_vm::CoproConfig::new();
    bad.insert("bits".into(), "1000".into());
    assert!(user_copro::create_bloom(&bad).is_err());
}
