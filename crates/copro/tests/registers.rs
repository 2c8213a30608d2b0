//! The inline register file of every built-in kind keeps the contract of
//! `Coprocessor::registers`: a register it exposes is exactly what `write`
//! stores and `read` returns, and every register `write` or `read` refuses
//! is left out.

use netvm_vm::{CoproConfig, Coprocessor, RegisterFile};

/// A configuration each kind accepts (most accept none).
fn config(kind: &str) -> CoproConfig {
    let mut c = CoproConfig::new();
    match kind {
        "table" => {
            c.insert("key_size".into(), "8".into());
            c.insert("value_size".into(), "4".into());
        }
        "meter" => {
            c.insert("rate".into(), "1000".into());
        }
        // One hash key for every store, so that two of them are alike
        // (their chains, and so `longest_chain`, follow the key).
        "ess" => {
            c.insert("seed".into(), "7".into());
        }
        _ => {}
    }
    c
}

fn instance(kind: &str) -> Box<dyn Coprocessor> {
    let r = netvm_copro::registry();
    if kind == "ess" {
        return r.create(kind, &config(kind)).unwrap_or_else(|e| panic!("{kind}: {e}"));
    }
    r.create(kind, &CoproConfig::new()).or_else(|_| r.create(kind, &config(kind))).unwrap_or_else(|e| panic!("{kind}: {e}"))
}

#[test]
fn every_inline_register_is_what_write_and_read_reach() {
    let registry = netvm_copro::registry();
    let mut inline_kinds = 0;
    for kind in registry.kinds() {
        let mut c = instance(kind);
        let f: RegisterFile = c.registers();
        assert_eq!(f.input.is_null(), f.inputs == 0, "{kind}: input pointer and mask agree");
        assert_eq!(f.output.is_null(), f.outputs == 0, "{kind}: output pointer and mask agree");
        inline_kinds += usize::from(f.inputs | f.outputs != 0);
        for r in 0..32u8 {
            let value = 0x5a00_0000 | u32::from(r);
            if f.inputs & (1 << r) != 0 {
                c.write(r, value).unwrap_or_else(|e| panic!("{kind}: inline input {r} refused by write: {e}"));
                // SAFETY: the contract: the file is valid until a method other than write, read, invoke.
                assert_eq!(unsafe { *f.input.add(usize::from(r)) }, value, "{kind}: write({r}) stores at input + {r}");
            }
            if f.outputs & (1 << r) != 0 {
                // SAFETY: as above; the memory is the instance's, borrowed mutably by `registers`.
                unsafe { *f.output.cast_mut().add(usize::from(r)) = value };
                assert_eq!(c.read(r), Ok(value), "{kind}: read({r}) loads output + {r}");
            }
        }
        // The file does not move while the instance is only written and read.
        assert_eq!(c.registers(), f, "{kind}: the same file when asked again");
    }
    assert!(inline_kinds >= 10, "most built-in kinds have an inline register file ({inline_kinds})");
}

#[test]
fn registers_refused_by_write_or_read_are_not_inline() {
    for kind in netvm_copro::registry().kinds() {
        let mut c = instance(kind);
        let f = c.registers();
        for r in 0..32u8 {
            if c.write(r, 1).is_err() {
                assert_eq!(f.inputs & (1 << r), 0, "{kind}: input {r} does not exist, so it is not inline");
            }
            if c.read(r).is_err() {
                assert_eq!(f.outputs & (1 << r), 0, "{kind}: output {r} does not exist, so it is not inline");
            }
        }
    }
}

/// Every direct entry (`RegisterFile::ops`) does what `invoke` does: two
/// instances loaded alike, one driven through its direct entries and the
/// other through `invoke`, on the same registers, packets and times, give
/// the same results, outputs, table dumps and statistics. Every kind is
/// tried (those without direct entries pass at once), and a `table` whose
/// entries age (its operations read the time).
#[test]
fn every_direct_entry_is_what_invoke_does() {
    use netvm_vm::{InvokeContext, Timestamp};
    let tables: &[(&str, &str)] = &[
        ("lpm", "10.0.0.0/8 1\n10.1.0.0/16 2\n10.1.2.0/24 3\n10.1.2.128/25 4\n"),
        ("table", "0a010203 00000005\n"),
        ("names", "/a 1\n/a/b 2\n"),
    ];
    let aging: CoproConfig = [("aging".to_string(), "3".to_string())].into();
    type Make = Box<dyn Fn() -> Box<dyn Coprocessor>>;
    let mut cases: Vec<(String, Make)> = Vec::new();
    for kind in netvm_copro::registry().kinds() {
        let kind = kind.to_string();
        let k = kind.clone();
        cases.push((kind, Box::new(move || instance(&k))));
    }
    cases.push(("table".into(), Box::new(move || netvm_copro::registry().create("table", &aging).expect("an aging table"))));
    let mut with_direct = 0;
    for (kind, make) in &cases {
        let kind = kind.as_str();
        let (mut d, mut i) = (make(), make());
        if let Some((_, t)) = tables.iter().find(|(k, _)| *k == kind) {
            d.load(t).unwrap_or_else(|e| panic!("{kind}: {e}"));
            i.load(t).unwrap();
        }
        let f = d.registers();
        if f.ops == 0 {
            continue;
        }
        with_direct += 1;
        let mut r = 1u64;
        for round in 0..300u32 {
            r = r.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // A packet with an IPv4-like address at 30 and a name TLV at 0; both instances get it.
            let mut packet = vec![0u8; 40 + (r >> 60) as usize];
            packet[..8].copy_from_slice(&[0x07, 0x06, 0x08, 0x01, b'a', 0x08, 0x01, b'b']);
            packet[30..34].copy_from_slice(&[10, 1, (r >> 8) as u8 & 3, (r >> 16) as u8]);
            let now = Timestamp { sec: u64::from(round / 20), nsec: round * 1000 };
            let ctx = InvokeContext { packet: &packet, info: &[], now, seq: 0 };
            for reg in 0..9u8 {
                let v = match reg {
                    8 => [30u32, 0, 60, 1][(r >> 40) as usize % 4],
                    0 => [0x0a01_0203, (r >> 20) as u32 & 0x0a01_02ff][(r >> 50) as usize % 2],
                    _ => (r >> (reg * 3)) as u32 & 0xff,
                };
                let _ = (d.write(reg, v), i.write(reg, v));
            }
            for op in 0..32u8 {
                if f.ops & (1 << op) == 0 {
                    continue;
                }
                // SAFETY: the contract: the entry is valid until a method other than write, read, invoke.
                let e = unsafe { *f.direct.add(usize::from(op)) };
                let call = e.call.expect("an entry where the bit is set");
                // SAFETY: the instance is `d`, not otherwise borrowed during the call; the packet is live.
                let got = unsafe { call(e.this, packet.as_ptr(), packet.len() as u64, now.sec, now.nsec) };
                let want = u32::from(i.invoke(op, &ctx).is_err());
                assert_eq!(got, want, "{kind} op {op} round {round}: the same success");
                for out in 0..8u8 {
                    assert_eq!(d.read(out).ok(), i.read(out).ok(), "{kind} op {op} round {round}: output {out}");
                }
            }
        }
        assert_eq!(d.dump(), i.dump(), "{kind}: the same table");
        assert_eq!(d.stats(), i.stats(), "{kind}: the same statistics");
        if tables.iter().any(|(k, _)| *k == kind) {
            assert!(!d.stats().is_empty(), "{kind}: lookups counted");
        }
    }
    assert!(with_direct >= 6, "lpm, table (twice), names, counters and linkstate have direct entries ({with_direct})");
}
