//! A new protocol is a data change: VXLAN (UDP port 4789), GENEVE (UDP
//! port 6081) and GRE are added as protocol-database stanzas
//! (examples/protocols/tunnels.toml), and filters on their fields compile
//! and match without any change to the compiler.

use netvm_interp::InterpCode;
use netvm_pfl::ProtocolDb;
use netvm_vm::{Limits, Outcome, Packet};

/// The opt-in tunnel stanzas shipped in the repository.
const TUNNELS: &str = include_str!("../../../examples/protocols/tunnels.toml");

/// Ethernet / IPv4 (IHL `ihl`) / UDP to `dport` / 8-byte tunnel header with `vni` / 14 bytes of inner Ethernet.
fn tunnel_frame(ihl: u8, dport: u16, first: u8, vni: u32) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x08, 0x00]);
    let opts = (ihl as usize - 5) * 4;
    let ip_len = 20 + opts + 8 + 8 + 14;
    f.extend_from_slice(&[0x40 | ihl, 0, (ip_len >> 8) as u8, ip_len as u8, 0, 1, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend(std::iter::repeat_n(1u8, opts));
    f.extend_from_slice(&[0x30, 0x39]);
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 30, 0, 0]);
    f.extend_from_slice(&[first, 0, 0x65, 0x58]);
    f.extend_from_slice(&(vni << 8).to_be_bytes());
    f.extend_from_slice(&[0xaa; 14]);
    f
}

fn matches(db: &ProtocolDb, expr: &str, frame: &[u8]) -> bool {
    let f = netvm_pfl::compile_with(expr, db).unwrap_or_else(|e| panic!("{}", e.render(expr)));
    let v = netvm_verify::verify(&f.module).expect("filter verifies");
    let code = InterpCode::new(&v);
    let (_, obs) = netvm_fuzzgen::observe(&code, &f.module, &[Packet::from_bytes(frame.to_vec())], &Limits::default());
    obs[0].outcome == Outcome::Forward(1)
}

#[test]
fn vxlan_and_geneve_from_stanzas_alone() {
    let builtin = ProtocolDb::builtin();
    assert!(netvm_pfl::compile_with("vxlan.vni = 42", &builtin).is_err(), "vxlan is not built in");

    let mut db = ProtocolDb::builtin();
    db.extend(TUNNELS).expect("the stanzas load");
    let vx42 = tunnel_frame(5, 4789, 0x08, 42);
    let vx43 = tunnel_frame(5, 4789, 0x08, 43);
    let vx42_opts = tunnel_frame(7, 4789, 0x08, 42);
    let gen7 = tunnel_frame(5, 6081, 0x00, 7);
    let plain = tunnel_frame(5, 53, 0x08, 42);
    // GRE (no C/K/S bits, protocol 0x6558) in IPv4: IP protocol 47.
    let mut gre = tunnel_frame(5, 0, 0, 0);
    gre[14 + 9] = 47;
    gre.truncate(14 + 20);
    gre.extend_from_slice(&[0x00, 0x00, 0x65, 0x58]);
    gre.extend_from_slice(&[0xbb; 14]);

    for (expr, frame, want) in [
        ("vxlan", &vx42, true),
        ("vxlan", &gen7, false),
        ("vxlan", &plain, false),
        ("vxlan.vni = 42", &vx42, true),
        ("vxlan.vni = 42", &vx43, false),
        ("vxlan.vni = 42", &vx42_opts, true),
        ("vxlan.vni = 42", &gen7, false),
        ("vxlan[0] & 0x08 != 0 and vxlan.vni > 40", &vx43, true),
        ("vxlan and not vxlan.vni = 43", &vx42, true),
        ("geneve", &gen7, true),
        ("geneve.vni = 7 and geneve.type = 0x6558", &gen7, true),
        ("geneve.vni = 7", &vx42, false),
        ("geneve.optlen = 0 and udp dst port 6081", &gen7, true),
        ("udp port 4789 and vxlan.vni = 42 and host 10.0.0.2", &vx42, true),
        ("gre", &vx42, false),
        ("gre.proto = 0x6558", &gre, true),
        ("gre and gre.version = 0 and gre[2:2] = 0x6558", &gre, true),
        ("gre.proto = 0x0800", &gre, false),
    ] {
        assert_eq!(matches(&db, expr, frame), want, "`{expr}`");
    }
}

#[test]
fn database_errors_are_reported() {
    let mut db = ProtocolDb::builtin();
    assert!(db.extend("[protocol.x]\nover = [{ parent = \"nosuch\", value = 1 }]").is_err());
    let mut db = ProtocolDb::builtin();
    assert!(db
        .extend("[protocol.y]\nfields.a = { offset = 0, size = 3 }\nover = [{ parent = \"udp\", parent_test = \"udp[2:2] = 1\" }]")
        .is_err());
    let mut db = ProtocolDb::builtin();
    db.extend("[protocol.z]\nover = [{ parent = \"udp\", parent_test = \"udp[2:2] = = 1\" }]").unwrap();
    let e = netvm_pfl::compile_with("z", &db).unwrap_err();
    assert!(e.message.contains("protocol database expression"), "{}", e.message);
}
