//! Parser tests: each option in both syntaxes (from real rule lines),
//! variables, includes, skips, and the public rule sets.

use super::*;

fn one(text: &str) -> Rule {
    let set = parse_rules(text, &HashMap::new());
    assert!(set.skipped.is_empty(), "{text}\n{:?}", set.skipped);
    assert_eq!(set.rules.len(), 1);
    set.rules.into_iter().next().unwrap()
}

fn why(text: &str) -> Skip {
    let set = parse_rules(text, &HashMap::new());
    assert_eq!(set.skipped.len(), 1, "{text}: {:?}", set.skipped);
    set.skipped.into_iter().next().unwrap()
}

fn content(r: &Rule, i: usize) -> &Content {
    match &r.detection[i] {
        Detection::Content(c) => c,
        d => panic!("detection {i} is {d:?}"),
    }
}

#[test]
fn a_full_snort2_rule() {
    let r = one(
        r#"alert tcp 10.0.0.0/8 any -> [192.168.1.1,!192.168.1.0/24] !80 (msg:"GET \"x\"; y"; content:"GET|20|/"; nocase; offset:0; depth:10; content:!"evil"; distance:2; within:20; pcre:"/a+b/iR"; sid:1000; rev:3; classtype:bad;)"#,
    );
    assert_eq!((r.action, r.proto, r.syntax), (Action::Alert, Proto::Tcp, Syntax::Snort2));
    assert_eq!(r.msg, "GET \"x\"; y");
    assert_eq!((r.sid, r.rev, r.gid), (1000, 3, 1));
    assert_eq!(r.classtype.as_deref(), Some("bad"));
    assert!(r.src.matches(0x0a01_0203) && !r.src.matches(0x0b00_0000));
    assert!(!r.dport.matches(80) && r.dport.matches(81));
    assert!(!r.dst.matches(0xc0a8_0101), "negation wins in a list");
    let c = content(&r, 0);
    assert_eq!(c.bytes, b"GET /");
    assert!(c.nocase && c.offset == Some(Num::Lit(0)) && c.depth == Some(Num::Lit(10)) && !c.negated);
    let c = content(&r, 1);
    assert!(c.negated && c.distance == Some(Num::Lit(2)) && c.within == Some(Num::Lit(20)));
    let Detection::Pcre(p) = &r.detection[2] else { panic!() };
    assert_eq!((p.spec.pattern.as_str(), p.spec.flags().as_str(), p.relative()), ("a+b", "iR", true));
}

#[test]
fn snort3_content_and_sticky_buffers() {
    // snort3-community.rules sid 34237 and 1271.
    let r = one(
        r#"alert tcp $HOME_NET any -> $EXTERNAL_NET $HTTP_PORTS ( msg:"PUA-ADWARE Eorezo get advertisement"; flow:to_server,established; http_uri; content:"/cgi-bin/advert/getads.cgi?"; content:"did=",distance 0; http_header; content:"User-Agent|3A 20|mpck_",fast_pattern,nocase; metadata:policy max-detect-ips drop,ruleset community; service:http; reference:url,www.virustotal.com/; classtype:misc-activity; sid:34237; rev:2; )"#,
    );
    assert_eq!(r.syntax, Syntax::Snort3);
    assert_eq!(r.service, vec!["http"]);
    assert_eq!(r.flow, Some(Flow { established: Some(true), to_server: Some(true), ..Flow::default() }));
    assert_eq!(content(&r, 0).buffer, Buffer::HttpUri);
    assert_eq!((content(&r, 1).buffer, content(&r, 1).distance.clone()), (Buffer::HttpUri, Some(Num::Lit(0))));
    let c = content(&r, 2);
    assert!(c.buffer == Buffer::HttpHeader && c.nocase && c.fast_pattern == Some(FastPattern::default()));
    assert!(r.dport.matches(8080) && r.dport.matches(80) && !r.dport.matches(443), "HTTP_PORTS default");
    let r = one(
        r#"alert tcp $EXTERNAL_NET any -> $HOME_NET 111 ( msg:"PROTOCOL-RPC portmap rusers request TCP"; flow:to_server,established; content:"|00 01 86 A0|",depth 4,offset 16; content:"|00 00 00 03|",within 4,distance 4; byte_jump:4,4,relative,align; byte_jump:4,4,relative,align; content:"|00 01 86 A2|",within 4; metadata:ruleset community; service:sunrpc; classtype:rpc-portmap-decode; sid:1271; rev:21; )"#,
    );
    let c = content(&r, 0);
    assert_eq!((c.depth.clone(), c.offset.clone(), c.buffer), (Some(Num::Lit(4)), Some(Num::Lit(16)), Buffer::PktData));
    let Detection::ByteJump(j) = &r.detection[2] else { panic!() };
    assert_eq!((j.bytes, j.offset.clone(), j.relative, j.align), (4, Num::Lit(4), true, 4));
    // fast_pattern_offset / _length, pkt_data resets the sticky buffer.
    let r = one(
        r#"alert tcp any any -> any any (http_raw_uri; bufferlen:1; pkt_data; content:"GET / HTTP/1.1",depth 45; content:"abcdef",fast_pattern,fast_pattern_offset 1,fast_pattern_length 3; sid:1;)"#,
    );
    assert_eq!(r.detection[0], Detection::BufferLen { check: IntCheck::Eq(1), relative: false, buffer: Buffer::HttpRawUri });
    assert_eq!(content(&r, 1).buffer, Buffer::PktData);
    assert_eq!(content(&r, 2).fast_pattern, Some(FastPattern { only: false, slice: Some((1, 3)) }));
}

#[test]
fn snort2_http_modifiers_follow_their_content() {
    // ET: emerging-web_specific_apps.
    let r = one(
        r#"alert tcp $EXTERNAL_NET any -> $HTTP_SERVERS $HTTP_PORTS (msg:"ET WEB_SPECIFIC_APPS x"; flow:established,to_server; content:"POST"; http_method; content:"/wp-admin/"; nocase; http_uri; fast_pattern:only; content:"Cookie|3a|"; http_header; uricontent:"id="; urilen:5<>20; pcre:"/id=\d+/Ui"; file_data; content:"x"; pcre:"/y/"; reference:cve,2014-1; classtype:web-application-attack; sid:2019999; rev:2; metadata:service http, created_at 2014_01_01;)"#,
    );
    assert_eq!(r.syntax, Syntax::Snort2);
    let bufs: Vec<Buffer> = r.detection.iter().map(Detection::buffer).collect();
    assert_eq!(
        bufs,
        vec![
            Buffer::HttpMethod,
            Buffer::HttpUri,
            Buffer::HttpHeader,
            Buffer::HttpUri,
            Buffer::HttpUri,
            Buffer::HttpUri,
            Buffer::FileData,
            Buffer::FileData
        ]
    );
    assert_eq!(content(&r, 1).fast_pattern, Some(FastPattern { only: true, slice: None }));
    assert_eq!(r.detection[4], Detection::BufferLen { check: IntCheck::BetweenIncl(5, 20), relative: false, buffer: Buffer::HttpUri });
    let Detection::Pcre(p) = &r.detection[5] else { panic!() };
    assert_eq!(p.text, r"/id=\d+/Ui", "pcre text kept exactly");
    assert_eq!(r.service, vec!["http"], "metadata: service");
    assert_eq!(one("alert tcp any any -> any any (content:\"a\"; fast_pattern:1,2; sid:1;)").detection.len(), 1);
    assert_eq!(
        content(&one("alert tcp any any -> any any (content:\"abc\"; fast_pattern:1,2; sid:1;)"), 0).fast_pattern.as_ref().unwrap().slice,
        Some((1, 2))
    );
    assert_eq!(content(&one("alert tcp any any -> any any (content:\"abc\"; rawbytes; sid:1;)"), 0).buffer, Buffer::Raw);
}

#[test]
fn pcre_keeps_backslashes_and_reads_every_flag() {
    let r = one(r#"alert tcp any any -> any any (pcre:"/\x90{6,}\xeb\"\;\\\//smixAEGOR"; pcre:!"/a/B"; pcre:"/c/P"; sid:1;)"#);
    let Detection::Pcre(p) = &r.detection[0] else { panic!() };
    assert_eq!(p.text, r#"/\x90{6,}\xeb\"\;\\\//smixAEGOR"#);
    assert_eq!(p.spec.pattern, r#"\x90{6,}\xeb\"\;\\\/"#);
    assert!(p.relative() && !p.negated && p.buffer == Buffer::PktData);
    let Detection::Pcre(p) = &r.detection[1] else { panic!() };
    assert!(p.negated && p.buffer == Buffer::Raw);
    assert_eq!(r.detection[2].buffer(), Buffer::HttpClientBody);
    assert_eq!(why("alert tcp any any -> any any (pcre:\"/a/UH\"; sid:1;)").option, "pcre");
    assert_eq!(why("alert tcp any any -> any any (pcre:\"/a/q\"; sid:1;)").option, "pcre");
}

#[test]
fn byte_options_both_syntaxes() {
    // snort3-community: byte_test:1,!&,128,6,relative; byte_test:5,>,256,0,relative,string,dec;
    // byte_jump:4,-7,relative,from_beginning,little; byte_extract:2,72,len,relative,little;
    let r = one(
        r#"alert tcp any any -> any any (content:"a"; byte_test:1,!&,128,6,relative; byte_test:5,>,256,0,relative,string,dec; byte_jump:4,-7,relative,from_beginning,little; byte_extract:2,72,len,relative,little; content:"b"; within:len; byte_test:4,>,len,0,relative,bitmask 0xff00; byte_jump:2,0,relative,multiplier 2,post_offset -2,string,hex,dce; isdataat:!5; isdataat:len,relative,rawbytes; byte_test:2,=,0x10,0; sid:1;)"#,
    );
    let Detection::ByteTest(t) = &r.detection[1] else { panic!() };
    assert_eq!(
        (t.bytes, t.negated, t.op, t.value.clone(), t.offset.clone(), t.relative),
        (1, true, ByteOp::And, Num::Lit(128), Num::Lit(6), true)
    );
    let Detection::ByteTest(t) = &r.detection[2] else { panic!() };
    assert_eq!((t.bytes, t.op, t.string), (5, ByteOp::Gt, Some(NumBase::Dec)));
    let Detection::ByteJump(j) = &r.detection[3] else { panic!() };
    assert_eq!((j.offset.clone(), j.from_beginning, j.endian, j.align), (Num::Lit(-7), true, Endian::Little, 0));
    let Detection::ByteExtract(e) = &r.detection[4] else { panic!() };
    assert_eq!((e.bytes, e.offset, e.name.as_str(), e.relative, e.endian), (2, 72, "len", true, Endian::Little));
    assert_eq!(content(&r, 5).within, Some(Num::Var("len".into())));
    let Detection::ByteTest(t) = &r.detection[6] else { panic!() };
    assert_eq!((t.value.clone(), t.bitmask), (Num::Var("len".into()), Some(0xff00)));
    let Detection::ByteJump(j) = &r.detection[7] else { panic!() };
    assert_eq!((j.multiplier, j.post_offset.clone(), j.string, j.endian), (Some(2), Some(Num::Lit(-2)), Some(NumBase::Hex), Endian::Dce));
    assert_eq!(
        r.detection[8],
        Detection::IsDataAt(IsDataAt { offset: Num::Lit(5), relative: false, negated: true, buffer: Buffer::PktData })
    );
    let Detection::IsDataAt(d) = &r.detection[9] else { panic!() };
    assert!(d.relative && d.buffer == Buffer::Raw && d.offset == Num::Var("len".into()));
    let Detection::ByteTest(t) = &r.detection[10] else { panic!() };
    assert_eq!((t.op, t.value.clone()), (ByteOp::Eq, Num::Lit(16)));
    // Snort 3 keyword forms: `align 4`, `bitmask 0x..`, the sticky buffer applies.
    let r = one("alert tcp any any -> any any (file_data; content:\"x\",depth 4; byte_jump:4,0,relative,align 2; byte_test:2,<=,10,0,relative,big; service:smtp; sid:2;)");
    let Detection::ByteJump(j) = &r.detection[1] else { panic!() };
    assert_eq!((j.align, j.buffer), (2, Buffer::FileData));
    for bad in [
        "byte_test:5,>,1,0",
        "byte_test:1,~,1,0",
        "byte_test:1,>,1",
        "byte_jump:4,0,relative,sideways",
        "byte_extract:2,0,9x",
        "byte_test:1,>,undefined_var,0",
    ] {
        let s = why(&format!("alert tcp any any -> any any ({bad}; sid:3;)"));
        assert_eq!(s.option, bad.split(':').next().unwrap(), "{bad}: {s:?}");
        assert_eq!(s.sid, Some(3));
    }
}

#[test]
fn header_checks() {
    // ET and snort3-community lines.
    let r = one("alert tcp any any -> any any (flags:S,12; flags:A+; flags:FRS*; flags:!A; flags:0; dsize:>2000; dsize:100<>500; ttl:>220; ttl:1-3; tos:!0; id:678; ip_proto:!tcp; fragbits:M+; fragbits:!DMR; fragoffset:>0; seq:0; ack:1958810375; window:55808; sameip; sid:1;)");
    use HeaderCheck::*;
    assert_eq!(
        r.header,
        vec![
            Flags { bits: 0x02, mode: BitsMode::Exact, mask: 0xc0 },
            Flags { bits: 0x10, mode: BitsMode::All, mask: 0 },
            Flags { bits: 0x07, mode: BitsMode::Any, mask: 0 },
            Flags { bits: 0x10, mode: BitsMode::Not, mask: 0 },
            Flags { bits: 0, mode: BitsMode::Exact, mask: 0 },
            Dsize(IntCheck::Gt(2000)),
            Dsize(IntCheck::BetweenIncl(100, 500)),
            Ttl(IntCheck::Gt(220)),
            Ttl(IntCheck::BetweenIncl(1, 3)),
            Tos(IntCheck::Ne(0)),
            Id(IntCheck::Eq(678)),
            IpProto(IntCheck::Ne(6)),
            Fragbits { bits: 0x2000, mode: BitsMode::All },
            Fragbits { bits: 0xe000, mode: BitsMode::Not },
            Fragoffset(IntCheck::Gt(0)),
            Seq(IntCheck::Eq(0)),
            Ack(IntCheck::Eq(1_958_810_375)),
            Window(IntCheck::Eq(55808)),
            SameIp,
        ]
    );
    let r = one("alert icmp any any -> any any (itype:8; icode:0; icmp_id:666; icmp_seq:<=3; itype:3<>10; sid:1;)");
    assert_eq!(
        r.header,
        vec![
            Itype(IntCheck::Eq(8)),
            Icode(IntCheck::Eq(0)),
            IcmpId(IntCheck::Eq(666)),
            IcmpSeq(IntCheck::Le(3)),
            Itype(IntCheck::Between(3, 10))
        ]
    );
    // Snort 3 intervals: `<>` exclusive, `<=>` inclusive.
    let r = one("alert tcp any any -> any any (dsize:10<>20; bufferlen:1<=>9; service:http; sid:1;)");
    assert_eq!(r.header, vec![Dsize(IntCheck::Between(10, 20))]);
    assert!(matches!(r.detection[0], Detection::BufferLen { check: IntCheck::BetweenIncl(1, 9), .. }));
    for bad in ["flags:SX", "dsize:abc", "ttl:", "fragbits:Q"] {
        let s = why(&format!("alert tcp any any -> any any ({bad}; sid:3;)"));
        assert_eq!(s.option, bad.split(':').next().unwrap(), "{bad}: {s:?}");
    }
}

#[test]
fn flow_flowbits_thresholds() {
    let r = one("alert tcp any any -> any any (flow:established,to_client,no_stream; flowbits:set,ET.http.javaclient; flowbits:isset,a|b; flowbits:isnotset,a&b; flowbits:setx,x,grp; flowbits:reset; flowbits:noalert; threshold: type both, track by_dst, count 30, seconds 60; sid:1;)");
    assert_eq!(r.flow, Some(Flow { established: Some(true), to_server: Some(false), stream: Some(false), ..Flow::default() }));
    let ops: Vec<(FlowbitsOp, usize, bool)> = r.flowbits.iter().map(|f| (f.op, f.bits.len(), f.any)).collect();
    assert_eq!(
        ops,
        vec![
            (FlowbitsOp::Set, 1, false),
            (FlowbitsOp::IsSet, 2, true),
            (FlowbitsOp::IsNotSet, 2, false),
            (FlowbitsOp::SetX, 1, false),
            (FlowbitsOp::Reset, 0, false),
            (FlowbitsOp::NoAlert, 0, false)
        ]
    );
    assert_eq!(r.flowbits[3].group.as_deref(), Some("grp"));
    assert_eq!(r.threshold, Some(Threshold { kind: ThresholdKind::Both, by_dst: true, count: 30, seconds: 60 }));
    let r = one("alert tcp any any -> any any (flow:stateless; detection_filter:track by_src,count 100,seconds 25; sid:1;)");
    assert!(r.flow.as_ref().unwrap().stateless);
    assert_eq!(r.threshold, Some(Threshold { kind: ThresholdKind::DetectionFilter, by_dst: false, count: 100, seconds: 25 }));
    for (bad, key) in [
        ("flow:sideways", "flow"),
        ("flowbits:frob,x", "flowbits"),
        ("flowbits:setx,x", "flowbits"),
        ("threshold:type limit, count 1", "threshold"),
        ("detection_filter:track by_src,count 1,seconds 1; threshold:type limit,track by_src,count 1,seconds 1", "threshold"),
    ] {
        assert_eq!(why(&format!("alert tcp any any -> any any ({bad}; sid:3;)")).option, key, "{bad}");
    }
}

#[test]
fn headers_bidirectional_ipv6_and_service_rules() {
    let r = one("alert tcp [2001:db8::/32,10.0.0.0/8] any <> !fe80::1 any (sid:1;)");
    assert!(r.bidirectional);
    assert!(r.src.matches(0x0a00_0001) && !r.src.matches(0x0b00_0001), "v6 entries never match an IPv4 packet");
    assert!(r.dst.matches(0x0a00_0001), "a negated v6 entry matches every IPv4 packet");
    let r = one("alert http (msg:\"svc\"; http_uri; content:\"/x\"; sid:2;)");
    assert_eq!((r.header_service.as_deref(), r.proto, r.syntax), (Some("http"), Proto::Ip, Syntax::Snort3));
    let r = one("alert (msg:\"none\"; sid:3;)");
    assert_eq!((r.proto, r.src.clone()), (Proto::Ip, AddrExpr::Any));
    // A Snort 3 rule written over several lines.
    let set = parse_rules("alert tcp any any -> any any\n(\n  msg:\"multi\";\n  # a comment\n  content:\"x\";\n  sid:4;\n)\nalert tcp any any -> any any (sid:5;)\n", &HashMap::new());
    assert!(set.skipped.is_empty(), "{:?}", set.skipped);
    assert_eq!(set.rules.iter().map(|r| (r.sid, r.line)).collect::<Vec<_>>(), vec![(4, 1), (5, 8)]);
}

#[test]
fn variables_defaults_and_overrides() {
    let defaults = vars::defaults();
    for name in [
        "HOME_NET",
        "EXTERNAL_NET",
        "HTTP_SERVERS",
        "SMTP_SERVERS",
        "SQL_SERVERS",
        "DNS_SERVERS",
        "TELNET_SERVERS",
        "AIM_SERVERS",
        "DNP3_SERVER",
        "DNP3_CLIENT",
        "MODBUS_SERVER",
        "ENIP_CLIENT",
        "SIP_SERVERS",
        "SSH_SERVERS",
        "FTP_SERVERS",
        "HTTP_PORTS",
        "SHELLCODE_PORTS",
        "ORACLE_PORTS",
        "SSH_PORTS",
        "FTP_PORTS",
        "SIP_PORTS",
        "FILE_DATA_PORTS",
        "GTP_PORTS",
    ] {
        assert!(defaults.contains_key(name), "{name}");
    }
    let r = one("alert tcp $EXTERNAL_NET $SHELLCODE_PORTS -> $HTTP_SERVERS $FILE_DATA_PORTS (sid:1;)");
    assert!(r.src.matches(1) && !r.sport.matches(80) && r.sport.matches(81));
    assert!(r.dport.matches(110) && r.dport.matches(8080) && !r.dport.matches(25));
    let r = one("alert tcp any $ORACLE_PORTS -> $AIM_SERVERS any (sid:1;)");
    assert!(r.sport.matches(1024) && !r.sport.matches(1023) && r.dst.matches(0x400c_1801) && !r.dst.matches(1));
    // File variables, then --var overrides that win over them; `$(VAR)`.
    let text = "ipvar HOME_NET [10.0.0.0/8,172.16.0.0/12]\nportvar P [1,2]\nalert udp !$HOME_NET any -> $(HOME_NET) $P (sid:1;)\n";
    let set = parse_rules(text, &HashMap::new());
    assert!(set.skipped.is_empty(), "{:?}", set.skipped);
    let r = &set.rules[0];
    assert!(!r.src.matches(0x0a00_0001) && r.src.matches(0x0800_0808) && r.dst.matches(0xac10_0001));
    assert!(r.dport.matches(2) && !r.dport.matches(3));
    let over: HashMap<String, String> = [("HOME_NET".to_string(), "192.168.0.0/16".to_string())].into();
    let set = parse_rules(text, &over);
    assert!(set.rules[0].dst.matches(0xc0a8_0001) && !set.rules[0].dst.matches(0x0a00_0001), "--var wins");
    let s = why("alert tcp $NOPE any -> any any (sid:9;)");
    assert_eq!((s.option.as_str(), s.sid), ("variable", Some(9)));
    let looped: HashMap<String, String> = [("A".to_string(), "$A".to_string())].into();
    assert_eq!(parse_rules("alert tcp $A any -> any any (sid:1;)", &looped).skipped[0].option, "variable");
}

#[test]
fn include_relative_with_a_depth_limit() {
    let dir = std::env::temp_dir().join(format!("netvm-ids-include-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(
        dir.join("main.rules"),
        "var X 10.0.0.0/8\ninclude sub/a.rules\nalert tcp $Y any -> any any (sid:1;)\ninclude missing.rules\n",
    )
    .unwrap();
    std::fs::write(dir.join("sub/a.rules"), "var Y $X\ninclude b.rules\n").unwrap();
    std::fs::write(dir.join("sub/b.rules"), "\nalert tcp any any -> any any (sid:2;)\nalert tcp any any -> any any (flags:Q; sid:3;)\n")
        .unwrap();
    std::fs::write(dir.join("loop.rules"), "include loop.rules\n").unwrap();
    let set = parse_rules_file(&dir.join("main.rules"), &HashMap::new()).unwrap();
    assert_eq!(set.rules.iter().map(|r| (r.sid, r.line, r.file)).collect::<Vec<_>>(), vec![(2, 2, 2), (1, 3, 0)]);
    assert!(set.rules[1].src.matches(0x0a00_0001) && !set.rules[1].src.matches(1), "variables flow through includes");
    let skips: Vec<(usize, usize, &str)> = set.skipped.iter().map(|s| (s.file, s.line, s.option.as_str())).collect();
    assert_eq!(skips, vec![(2, 3, "flags"), (0, 4, "include")]);
    assert!(set.file_name(2).ends_with("sub/b.rules"));
    let set = parse_rules_file(&dir.join("loop.rules"), &HashMap::new()).unwrap();
    assert_eq!(set.skipped.len(), 1);
    assert!(set.skipped[0].reason.contains("nest deeper"), "{:?}", set.skipped);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn skips_name_their_option_and_do_not_touch_other_rules() {
    let text = "# comment\n\nvar NET 10.0.0.0/8\nalert tcp $NET any -> any 80 (content:\"a\"; \\\n  sid:1;)\nalert tcp any any -> any any (byte_math:bytes 2,offset 0,oper +,rvalue 1,result x; sid:2;)\nalert tcp any any -> any any (flow:sideways; sid:3;)\nalert tcp $NOPE any -> any any (sid:4;)\nalert tcp any any -> any any (nocase; sid:5;)\nalert tcp any any -> any any (content:\"a\"; sid:1;)\nlog tcp any any -> any any (sid:6;)\nalert tcp any any -> any any (content:\"ab\"; depth:1; sid:7;)\nalert tcp any any -> any any (content:\"|4|\"; sid:8;)\nalert tcp any any -> any any (msg:\"x\")\nalert tcp any any -> any any (content:\"x\"; offset:1; distance:1; sid:10;)\nalert tcp any any -> any any (content:\"x\"; sid:11;)\n";
    let set = parse_rules(text, &HashMap::new());
    assert_eq!(set.rules.iter().map(|r| (r.sid, r.line)).collect::<Vec<_>>(), vec![(1, 4), (11, 16)]);
    let got: Vec<(usize, Option<u32>, &str)> = set.skipped.iter().map(|s| (s.line, s.sid, s.option.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (6, Some(2), "byte_math"),
            (7, Some(3), "flow"),
            (8, Some(4), "variable"),
            (9, Some(5), "nocase"),
            (10, Some(1), "sid"),
            (11, Some(6), "action"),
            (12, Some(7), "depth"),
            (13, Some(8), "content"),
            (14, None, "msg"),
            (15, Some(10), "offset"),
        ]
    );
    assert!(set.skipped[4].reason.contains("duplicate sid 1 (first on line 4)"));
    assert_eq!(set.skipped[0].to_string(), format!("line 6: {}", set.skipped[0].reason));
}

#[test]
fn compile_selection_names_one_option() {
    let set = parse_rules(
        "alert tcp any any -> any any (flow:established; flags:S; content:\"x\"; sid:1;)\nalert tcp any any -> any any (flow:only_stream; flags:S; sid:2;)\nalert tcp any any -> any any (js_data; content:\"x\"; sid:3;)\nalert tcp any any -> any any (content:\"x\"; byte_test:1,>,1,0,relative,dce; sid:4;)\nalert tcp any any <> any any (sid:5;)\nalert tcp any any -> any any (flow:stateless; content:\"x\"; fast_pattern:only; pcre:\"/y/sO\"; sid:6;)\nalert http (sid:7;)\nalert tcp any any -> any any (flowbits:set,a; sid:8;)\nalert tcp any any -> any any (http_uri; content:\"x\"; file_data; content:\"y\"; sid:9;)\n",
        &HashMap::new(),
    );
    let (rules, skipped) = crate::compile::select(&set);
    assert_eq!(rules.iter().map(|r| r.sid).collect::<Vec<_>>(), vec![1, 5, 6, 8, 9]);
    let got: Vec<(Option<u32>, &str)> = skipped.iter().map(|s| (s.sid, s.option.as_str())).collect();
    assert_eq!(got, vec![(Some(2), "flow"), (Some(3), "js_data"), (Some(4), "byte_test"), (Some(7), "service")]);
    assert!(skipped[2].reason.starts_with("option byte_test: `dce` takes the byte order of a DCE/RPC session"), "{}", skipped[2].reason);
    assert_eq!(skipped[1].reason, "option js_data (no JavaScript normalisation): not supported by the compiler yet");
}

#[test]
fn hostile_text_never_panics() {
    for t in [
        "",
        "(",
        ")",
        "alert",
        "alert tcp any any -> any any (",
        "alert tcp any any -> any any ();",
        "a b c d e f g (sid:1;)",
        "alert tcp [[[[ any -> any any (sid:1;)",
        "alert tcp any 70000 -> any any (sid:1;)",
        "alert tcp any 5:1 -> any any (sid:1;)",
        "alert tcp 1.2.3.4/40 any -> any any (sid:1;)",
        "alert tcp ::1/200 any -> any any (sid:1;)",
        "alert tcp any any -> any any (sid:99999999999;)",
        "alert tcp any any -> any any (pcre:\"abc\"; sid:1;)",
        "alert tcp any any -> any any (content:\"\"; sid:1;)",
        "alert tcp any any -> any any (content:\"x\",depth; sid:1;)",
        "alert tcp any any -> any any (content:\"x\",fast_pattern_offset 9; sid:1;)",
        "alert tcp any any -> any any (byte_test:,,,; byte_jump:; isdataat:; sid:1;)",
        "alert tcp any any -> any any (flowbits:; threshold:; sid:1;)",
        "alert tcp any any -> any any (sid:1;) trailing",
        "alert tcp any any -> any any (content:\"x\"; offset:1; distance:1; sid:1;)",
        "include",
        "alert tcp any any -> any any (msg:\"unclosed",
    ] {
        let _ = parse_rules(t, &HashMap::new());
    }
    let deep = format!("alert tcp {}1.2.3.4{} any -> any any (sid:1;)", "[".repeat(100), "]".repeat(100));
    assert!(why(&deep).reason.contains("deeply"));
}

/// Parses every rule of a public rule set: at least `min_share` of the
/// active (not commented-out) rules must parse into the AST, and as many
/// must compile (issue 15's goal is 90 %; the tests hold what netvm
/// reaches today: 98.8 % of the Snort 3 community rules, 99.9 % of ET).
fn corpus(files: &[PathBuf], min_share: f64) {
    let mut active = 0usize;
    let (mut parsed, mut skipped, mut compiled) = (0usize, 0usize, 0usize);
    let mut not_compiled: HashMap<String, usize> = HashMap::new();
    let mut reasons: HashMap<String, usize> = HashMap::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        active += text.lines().filter(|l| matches!(l.split_whitespace().next(), Some("alert" | "drop" | "pass"))).count();
        let set = parse_rules(&text, &HashMap::new());
        parsed += set.rules.len();
        skipped += set.skipped.len();
        for s in &set.skipped {
            *reasons.entry(s.option.clone()).or_default() += 1;
        }
        let (rules, skips) = crate::compile::select(&set);
        compiled += rules.len();
        for s in skips {
            *not_compiled.entry(s.option).or_default() += 1;
        }
    }
    let share = parsed as f64 / active as f64;
    eprintln!("{active} active rules, {parsed} parsed ({:.1} %), {skipped} skipped: {reasons:?}", share * 100.0);
    assert_eq!(parsed + skipped, active, "every active rule is parsed or skipped");
    assert!(share >= min_share, "only {parsed} of {active} rules parse: {reasons:?}");
    let share = compiled as f64 / active as f64;
    eprintln!("{compiled} compile ({:.1} %); not compiled: {not_compiled:?}", share * 100.0);
    assert!(share >= min_share, "only {compiled} of {active} rules compile: {not_compiled:?}");
}

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/corpus/rules");

#[test]
fn corpus_snort3_community() {
    corpus(&[PathBuf::from(CORPUS).join("snort3-community.rules")], 0.98);
}

#[test]
fn corpus_et_open_2017() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(PathBuf::from(CORPUS).join("et-open-2017"))
        .expect("the ET open rules in ../shared/corpus/rules")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rules"))
        .collect();
    files.sort();
    assert!(files.len() > 30);
    corpus(&files, 0.99);
}

#[test]
fn flowbit_names_beyond_the_info_layout_skip_their_rules() {
    let text: String = (0..crate::compile::MAX_FLOWBITS + 3)
        .map(|i| format!("alert tcp any any -> any any (flowbits:set,n{i}; flowbits:isset,n0; sid:{};)\n", i + 1))
        .collect();
    let set = parse_rules(&text, &HashMap::new());
    let (rules, skipped) = crate::compile::select(&set);
    assert_eq!(rules.len(), crate::compile::MAX_FLOWBITS);
    assert_eq!(skipped.len(), 3);
    assert!(skipped.iter().all(|s| s.option == "flowbits" && s.reason.contains("more than 256 flowbit names")), "{skipped:?}");
    assert_eq!(crate::compile::FlowbitNames::of(&rules).words(), 8);
}

#[test]
fn port_ranges_are_what_matches_accepts() {
    let exprs = [
        "any",
        "80",
        "1024:",
        ":1023",
        "!80",
        "[80,443,8000:8100]",
        "[!80,!443]",
        "[1:100,!50:60]",
        "![80,443]",
        "[[80,81],![81]]",
        "[!1024:,22]",
        "65535",
        "0",
        "[0:10,5:20,30]",
        "![!53]",
        "[!0:65535]",
    ];
    for e in exprs {
        let r = one(&format!("alert tcp any {e} -> any any (sid:1;)"));
        let x = &r.sport;
        let ranges = x.ranges();
        for w in ranges.windows(2) {
            assert!(u32::from(w[0].1) + 1 < u32::from(w[1].0), "{e}: {ranges:?} not sorted, disjoint and merged");
        }
        for p in 0..=u16::MAX {
            assert_eq!(ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&p)), x.matches(p), "{e}: port {p}");
        }
    }
}
