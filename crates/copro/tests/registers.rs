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
        _ => {}
    }
    c
}

fn instance(kind: &str) -> Box<dyn Coprocessor> {
    let r = netvm_copro::registry();
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
