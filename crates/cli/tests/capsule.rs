//! `netvm capsule build` and `netvm capsule run`, as a user types them.

use std::process::Command;

fn netvm(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_netvm")).args(args).output().expect("run netvm")
}

fn example(name: &str) -> String {
    format!("{}/../../examples/capsules/{name}.nil", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_path_capsule_crosses_three_nodes_and_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let (caps, out) = (dir.path().join("path.pcap"), dir.path().join("out.pcap"));
    let o = netvm(&["capsule", "build", &example("path"), "-o", caps.to_str().unwrap(), "--dst", "10.0.0.3", "--count", "2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("(wasp)"));
    let o = netvm(&[
        "capsule",
        "run",
        "-r",
        caps.to_str().unwrap(),
        "--path",
        "10.0.0.1,10.0.0.2,10.0.0.3",
        "-w",
        out.to_str().unwrap(),
        "--stats",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((s["packets"].as_u64(), s["returned"].as_u64(), s["dropped"].as_u64()), (Some(2), Some(2), Some(0)));
    assert_eq!(s["nodes"][2]["returned"].as_u64(), Some(2));
    // One program: verified at its first crossing of a node, found in the
    // node's code cache at the others (the first node sees both capsules
    // twice, there and back).
    let cache = |n: usize| &s["nodes"][n]["code_cache"];
    assert_eq!(cache(2), &serde_json::json!({"programs": 1, "hits": 1, "misses": 1, "evictions": 0}));
    assert_eq!(cache(0), &serde_json::json!({"programs": 1, "hits": 3, "misses": 1, "evictions": 0}));
    let (frames, err) = netvm_io::read_capture(&out, 0);
    assert!(err.is_none());
    let f = &frames[0].data;
    // Back to the source; the scratchpad holds 10.0.0.1, .2, .3 and, on the way back, .2 and .1.
    assert_eq!(&f[30..34], &[192, 0, 2, 1]);
    let sp = 14 + 20 + 8 + 16 + 70;
    assert_eq!(u32::from_be_bytes(f[sp..sp + 4].try_into().unwrap()), 5);
    assert_eq!(&f[sp + 4..sp + 24], &[10, 0, 0, 1, 10, 0, 0, 2, 10, 0, 0, 3, 10, 0, 0, 2, 10, 0, 0, 1]);
}

#[test]
fn code_outside_the_profile_does_not_build() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("bad.nil");
    std::fs::write(&src, ".ports 2\nsegment .push\n    push 0\n    push 1\n    ustore.8\n    ret 0\nends\n").unwrap();
    let o = netvm(&["capsule", "build", src.to_str().unwrap(), "-o", dir.path().join("x.pcap").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("instruction"), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn count_absorbs_packets_beyond_its_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let caps = dir.path().join("count.pcap");
    let o = netvm(&[
        "capsule",
        "build",
        &example("count"),
        "-o",
        caps.to_str().unwrap(),
        "--scratch",
        "00000000000000aa00000002",
        "--count",
        "5",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = netvm(&["capsule", "run", "-r", caps.to_str().unwrap(), "--stats", "--ess", "capacity=100", "--ess", "tau=5"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((s["delivered"].as_u64(), s["dropped"].as_u64()), (Some(2), Some(3)));
    assert_eq!(s["nodes"][0]["dropped"]["dropped"].as_u64(), Some(3));
    assert_eq!(s["nodes"][0]["ess"]["capacity"].as_u64(), Some(100));
    let o = netvm(&["capsule", "run", "-r", caps.to_str().unwrap(), "--ess", "colour=red"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn capsules_in_options_are_built_and_carried() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    // The node counter fits an IPv4 option; across three nodes it counts three.
    let o = netvm(&["capsule", "build", &example("nodes"), "-o", &p("n4.pcap"), "--carrier", "ipv4-option", "--payload", "data"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = netvm(&["capsule", "run", "-r", &p("n4.pcap"), "--path", "10.0.0.1,10.0.0.2,10.0.0.3", "-w", &p("n4-out.pcap"), "--stats"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((s["packets"].as_u64(), s["delivered"].as_u64()), (Some(1), Some(1)));
    let (frames, err) = netvm_io::read_capture(std::path::Path::new(&p("n4-out.pcap")), 0);
    assert!(err.is_none());
    let f = &frames[0].data;
    assert_eq!((f[14] & 0xf, f[34]), (14, 0x9e), "a 56-byte header with the capsule option first");
    assert_eq!((f[36 + 12], f[36 + 16 + 17]), (13, 3), "three hops spent, three nodes counted");
    assert!(netvm_capsule::wire::ipv4_header_checksum_ok(f, 14));
    assert_eq!(&f[f.len() - 4..], b"data");
    // count in an IPv6 destination option.
    let o = netvm(&[
        "capsule",
        "build",
        &example("count"),
        "-o",
        &p("c6.pcap"),
        "--carrier",
        "ipv6-option",
        "--scratch",
        "00000000000000aa00000002",
        "--count",
        "4",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = netvm(&["capsule", "run", "-r", &p("c6.pcap"), "--stats"]);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((s["packets"].as_u64(), s["delivered"].as_u64(), s["dropped"].as_u64()), (Some(4), Some(2), Some(2)));
    // What does not fit is a usage error that says why.
    let o = netvm(&["capsule", "build", &example("count"), "-o", &p("x.pcap"), "--carrier", "ipv4-option"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("does not fit an IPv4 option"));
}

#[test]
fn ipv6_nodes_give_their_addresses_to_capsule_code() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    // Copies the node's IPv6 address (environment registers 1-4) into the scratchpad.
    let mut src = String::from(".copro ess ess\n.copro env env\n.infosize 16\n.ports 2\nsegment .push\n");
    for w in 0..4 {
        src += &format!("    push {}\n    copro.out env, {}\n    istore.32\n", 4 * w, w + 1);
    }
    src += "    ret 0\nends\n";
    std::fs::write(p("addr6.nil"), src).unwrap();
    let o = netvm(&["capsule", "build", &p("addr6.nil"), "-o", &p("a6.pcap"), "--carrier", "ipv6-option"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = netvm(&["capsule", "run", "-r", &p("a6.pcap"), "--path6", "2001:db8::a,2001:db8::b", "-w", &p("out.pcap"), "--stats"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((s["delivered"].as_u64(), s["nodes"][1]["address"].as_str()), (Some(1), Some("2001:db8::b")));
    let (frames, err) = netvm_io::read_capture(std::path::Path::new(&p("out.pcap")), 0);
    assert!(err.is_none());
    let f = &frames[0].data;
    let l = netvm_capsule::wire::locate(f, netvm_capsule::Link::Ethernet, netvm_capsule::wire::CAPSULE_PORT).unwrap().unwrap();
    let b: std::net::Ipv6Addr = "2001:db8::b".parse().unwrap();
    assert_eq!(&f[l.scratch()], &b.octets(), "the last node's address");
    // One IPv6 address per node of --path, or none.
    let o = netvm(&["capsule", "run", "-r", &p("a6.pcap"), "--path", "10.0.0.1,10.0.0.2", "--path6", "2001:db8::a"]);
    assert_eq!(o.status.code(), Some(2));
}
