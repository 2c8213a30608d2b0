//! Writes the sample inputs of the example applications (committed under
//! examples/): `cargo run -p netvm-traffic --example app_samples` from the
//! repository root rewrites them identically (fixed seeds).
//!
//! - examples/l2-bridge/a.pcap, b.pcap: two ports' traffic for the bridge;
//! - examples/ipv4-router/routes.txt, sample.pcap: a route table and traffic for the router;
//! - examples/ids/sample.rules, sample.pcap: rules (with a few lines outside
//!   the subset, which `netvm ids` reports) and traffic for the IDS.

use std::fs::File;
use std::io::BufWriter;

use netvm_traffic::apps::{bridge_trace, ids_rules, ids_trace, route_file, router_trace, routes4, BridgeTraffic};
use netvm_traffic::{write_pcap, SplitMix64};
use netvm_vm::Packet;

fn write(path: &str, pkts: &[Packet]) {
    write_pcap(BufWriter::new(File::create(path).expect(path)), pkts).expect(path);
}

fn main() {
    let frames = bridge_trace(&mut SplitMix64::new(1), &BridgeTraffic { ports: 2, hosts: 8, frames: 200, ..BridgeTraffic::default() });
    for port in [1u16, 2] {
        let mine: Vec<Packet> = frames.iter().filter(|f| f.in_port == port).cloned().collect();
        write(&format!("examples/l2-bridge/{}.pcap", if port == 1 { "a" } else { "b" }), &mine);
    }

    let mut r = SplitMix64::new(2);
    let routes = routes4(&mut r, 40, 4);
    let text = format!("# examples/ipv4-router/routes.txt: `prefix/len port`, one per line\n{}", route_file(&routes));
    std::fs::write("examples/ipv4-router/routes.txt", text).expect("routes.txt");
    write("examples/ipv4-router/sample.pcap", &router_trace(&mut r, &routes, 300));

    let mut r = SplitMix64::new(3);
    let mut rules = ids_rules(&mut r, 40);
    rules += "# outside the subset: reported and skipped\n";
    rules += "alert tcp any any -> any 80 (msg:\"only_stream\"; flow:to_server,only_stream; content:\"GET\"; sid:9000001;)\n";
    rules += "alert tcp any any -> any 80 (msg:\"javascript\"; js_data; content:\"eval(\"; sid:9000002;)\n";
    rules += "alert tcp $NO_SUCH_NET any -> any 80 (msg:\"undefined variable\"; sid:9000003;)\n";
    std::fs::write("examples/ids/sample.rules", rules).expect("sample.rules");
    write("examples/ids/sample.pcap", &ids_trace(&mut r, 300));
}
