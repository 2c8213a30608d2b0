//! A rule's `pcre` as the `regex` coprocessor runs it: validated when the
//! rule is compiled, with the coprocessor's own code
//! ([`netvm_copro::regex::validate`]), so that a pattern neither
//! engine (regex-automata, PCRE2) can build skips its rule, with the line
//! and the reason, instead of failing the whole table at load time.
//!
//! Every PCRE flag (`i s m x A E G O`) goes to the coprocessor; `R` is the
//! compiler's (the search starts at the cursor); `B` and the buffer flags
//! choose the region ([`crate::rules::Buffer`]) and stay out of the table.

use netvm_copro::regex::{validate, PcreSpec};

use crate::rules::Pcre;

/// The expression the coprocessor gets for `p`: its pattern, escapes as
/// written, and its PCRE flags; `Err` says why neither engine builds it.
pub fn regex_spec(p: &Pcre) -> Result<PcreSpec, String> {
    let spec = coprocessor_spec(p);
    validate(&spec)?;
    Ok(spec)
}

/// `p`'s expression and PCRE flags, without the compiler's.
fn coprocessor_spec(p: &Pcre) -> PcreSpec {
    let mut spec = p.spec.clone();
    (spec.relative, spec.rawbytes, spec.buffer) = (false, false, None);
    spec
}

/// The coprocessor table line of `p` under regex id `id`. `p` was
/// validated by [`regex_spec`] when its rule was selected (so it is not
/// built again here: the table load builds it once more, for good); a
/// pattern neither engine builds would make the load fail naming its line.
pub fn table_line(id: u32, p: &Pcre) -> String {
    format!("{id} {}\n", coprocessor_spec(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::parse_pcre as parse_option;

    #[test]
    fn specs_keep_escapes_and_pcre_flags_only() {
        let p = parse_option("/\\x90{6,}\\xeb/iAEGORB").unwrap();
        assert_eq!(regex_spec(&p).unwrap().to_string(), "/\\x90{6,}\\xeb/iAEGO");
        assert_eq!(table_line(3, &p), "3 /\\x90{6,}\\xeb/iAEGO\n");
        let bad = parse_option("/a(/").unwrap();
        assert!(regex_spec(&bad).unwrap_err().contains("bad expression"));
        assert!(regex_spec(&parse_option("/(?<=a)b/").unwrap()).is_ok(), "look-behind runs on PCRE2");
    }
}
