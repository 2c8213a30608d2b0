//! `netvm ids` with pcre as Snort means it: escapes kept (a NOP sled
//! fires), every PCRE flag, negation, a look-around running on PCRE2, and a
//! pcre no engine builds skipped with its line while the other rules alert.

use std::collections::BTreeSet;
use std::process::Command;

use netvm_io::PcapWriter;
use netvm_traffic::apps::tcp_frame;
use netvm_vm::{Packet, Timestamp};

const RULES: &str = r#"alert tcp any any -> any any (msg:"nop sled"; pcre:"/\x90{6,}\xeb/"; sid:1;)
alert tcp any any -> any any (msg:"look-ahead, on PCRE2"; content:"GET"; pcre:"/GET(?=\s\/admin)/"; sid:2;)
alert tcp any any -> any any (msg:"bad pcre"; content:"GET"; pcre:"/GET(/"; sid:3;)
alert tcp any any -> any 80 (msg:"plain content"; content:"GET"; sid:4;)
alert tcp any any -> any any (msg:"i s x"; pcre:"/user \s* = \s* root .* end/isx"; sid:5;)
alert tcp any any -> any any (msg:"m"; pcre:"/^Host: evil$/m"; sid:6;)
alert tcp any any -> any any (msg:"A"; pcre:"/GET/A"; sid:7;)
alert tcp any any -> any any (msg:"E"; pcre:"/root$/E"; sid:8;)
alert tcp any any -> any any (msg:"$ before a final newline"; pcre:"/root$/"; sid:9;)
alert tcp any any -> any any (msg:"G: the lazy match ends first"; pcre:"/<.+>/G"; content:"<b>"; distance:0; within:3; sid:10;)
alert tcp any any -> any any (msg:"R"; content:"user"; pcre:"/^\s*=/R"; sid:11;)
alert tcp any any -> any any (msg:"negated"; content:"GET"; pcre:!"/admin/i"; sid:12;)
alert tcp any any -> any any (msg:"O B"; pcre:"/(a|aa)+$/OB"; sid:13;)
alert tcp any any -> any any (msg:"limit: not inspected, no alert"; pcre:"/(?=x)?(a|aa)+$/"; sid:14;)
"#;

#[test]
fn pcre_flags_fallback_and_a_bad_pattern_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("pcre.rules");
    std::fs::write(&rules, RULES).unwrap();
    let payloads: [&[u8]; 7] = [
        b"\x00\x90\x90\x90\x90\x90\x90\x90\xeb\x10",
        b"GET /admin HTTP/1.0\r\n",
        b"GET /index HTTP/1.0\nHost: evil\n",
        b"xx USER = ROOT\nthe END",
        b"user = root\n",
        b"<a><b>x",
        &[b"a".repeat(40), b"b".to_vec()].concat(),
    ];
    let input = dir.path().join("in.pcap");
    let mut w = PcapWriter::create(&input).unwrap();
    for (i, p) in payloads.iter().enumerate() {
        let data = tcp_frame(0x0a00_0001, 0x0a00_0002, 40000 + i as u16, 80, p);
        w.write(&Packet { wire_len: data.len() as u32, data, ts: Timestamp::default(), in_port: 0 }).unwrap();
    }
    drop(w);
    let alerts = dir.path().join("a.jsonl");
    let o = Command::new(env!("CARGO_BIN_EXE_netvm"))
        .args(["ids", "--rules", &rules.display().to_string(), "-r", &input.display().to_string()])
        .args(["--alerts", &alerts.display().to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("netvm: 13 rules compiled, 1 skipped"), "{err}");
    assert!(err.contains("pcre.rules:3:") && err.contains("bad expression `GET(`"), "the bad pcre's line and reason: {err}");
    let got: BTreeSet<(u64, u32)> = std::fs::read_to_string(&alerts)
        .unwrap()
        .lines()
        .map(|l| {
            let num = |k: &str| l.split(&format!("\"{k}\":")).nth(1).unwrap().split([',', '}']).next().unwrap().parse().unwrap();
            (num("packet"), num("sid") as u32)
        })
        .collect();
    let want: BTreeSet<(u64, u32)> =
        [(1, 1), (2, 2), (2, 4), (2, 7), (3, 4), (3, 6), (3, 7), (3, 12), (4, 5), (5, 9), (5, 11), (6, 10)].into();
    assert_eq!(got, want, "{err}");
}
