//! Runs every malformed module in `tests/malformed/` (at the workspace root)
//! and checks that it is rejected exactly as its header says.
//!
//! Each file starts with a comment block holding one expectation:
//!
//! - `; verify: error RULE` — a module-level error (no segment, no offset);
//! - `; verify: error RULE in .push` — a segment-level error without an
//!   offset (`empty-segment`);
//! - `; verify: error RULE at OFFSET` — an error at byte OFFSET of `.push`
//!   (`at .push+OFFSET` and `at .init+OFFSET` name the segment);
//! - `; load: error [KIND]` — the binary module loader rejects the file
//!   (KIND: bad-magic, unsupported-version, truncated, invalid, trailing-bytes).
//!
//! `.nil` files are assembled with `netil::assemble` (which must succeed) and
//! verified with their source map, so the error must carry a source line.
//! `.hex` files are the hex bytes of a whole binary module (whitespace and
//! `;` comments allowed), for what assembly cannot express.
//!
//! Run with `--nocapture` to see every error message once.

use std::fmt::Write as _;
use std::path::Path;

use netil::{LoadError, Module, SegmentKind};
use netvm_verify::{verify_with_source, Rule};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/malformed");
const MIN_CASES: usize = 40;

#[derive(Debug)]
enum Expect {
    Verify { rule: Rule, segment: Option<SegmentKind>, offset: Option<u32> },
    Load { kind: Option<String> },
}

fn parse_segment(s: &str) -> Option<SegmentKind> {
    match s {
        ".init" => Some(SegmentKind::Init),
        ".push" => Some(SegmentKind::Push),
        _ => None,
    }
}

fn parse_expect(text: &str) -> Result<Expect, String> {
    let mut found = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some(comment) = line.strip_prefix(';') else { break };
        let comment = comment.trim();
        let e = if let Some(rest) = comment.strip_prefix("verify:") {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let (rule, tail) = match words.as_slice() {
                ["error", rule, tail @ ..] => (Rule::from_name(rule).ok_or(format!("unknown rule `{rule}`"))?, tail),
                _ => return Err(format!("bad verify line `{line}`")),
            };
            match tail {
                [] => Expect::Verify { rule, segment: None, offset: None },
                ["in", seg] => {
                    Expect::Verify { rule, segment: Some(parse_segment(seg).ok_or(format!("bad segment `{seg}`"))?), offset: None }
                }
                ["at", at] => {
                    let (seg, off) = match at.split_once('+') {
                        Some((seg, off)) => (parse_segment(seg).ok_or(format!("bad segment `{seg}`"))?, off),
                        None => (SegmentKind::Push, *at),
                    };
                    let off = off.parse().map_err(|_| format!("bad offset `{off}`"))?;
                    Expect::Verify { rule, segment: Some(seg), offset: Some(off) }
                }
                _ => return Err(format!("bad verify line `{line}`")),
            }
        } else if let Some(rest) = comment.strip_prefix("load:") {
            let words: Vec<&str> = rest.split_whitespace().collect();
            match words.as_slice() {
                ["error"] => Expect::Load { kind: None },
                ["error", kind] => Expect::Load { kind: Some(kind.to_string()) },
                _ => return Err(format!("bad load line `{line}`")),
            }
        } else {
            continue;
        };
        if found.is_some() {
            return Err("more than one expectation".into());
        }
        found = Some(e);
    }
    found.ok_or_else(|| "no `; verify:` or `; load:` line in the leading comment block".into())
}

fn parse_hex(text: &str) -> Result<Vec<u8>, String> {
    let mut digits = String::new();
    for line in text.lines() {
        let code = line.split(';').next().unwrap_or("");
        digits.extend(code.chars().filter(|c| !c.is_whitespace()));
    }
    if !digits.len().is_multiple_of(2) {
        return Err("odd number of hex digits".into());
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).map_err(|_| format!("bad hex `{}`", &digits[i..i + 2])))
        .collect()
}

fn load_kind(e: &LoadError) -> &'static str {
    match e {
        LoadError::BadMagic => "bad-magic",
        LoadError::UnsupportedVersion { .. } => "unsupported-version",
        LoadError::Truncated { .. } => "truncated",
        LoadError::Invalid { .. } => "invalid",
        LoadError::TrailingBytes { .. } => "trailing-bytes",
    }
}

/// Checks one file; returns the line to print (the error as reported).
fn check(path: &Path, covered: &mut Vec<Rule>) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let expect = parse_expect(&text)?;
    let is_hex = path.extension().is_some_and(|e| e == "hex");
    let (module, source) = if is_hex {
        let bytes = parse_hex(&text)?;
        match (Module::from_bytes(&bytes), &expect) {
            (Err(e), Expect::Load { kind }) => {
                if kind.as_deref().is_some_and(|k| k != load_kind(&e)) {
                    return Err(format!("loader error `{}` ({e}), expected `{}`", load_kind(&e), kind.as_deref().unwrap_or("")));
                }
                return Ok(format!("load error: {e}"));
            }
            (Err(e), _) => return Err(format!("the loader rejects it ({e}), but a verify error was expected")),
            (Ok(_), Expect::Load { .. }) => return Err("the loader accepts it, but a load error was expected".into()),
            (Ok(m), _) => {
                if m.to_bytes() != bytes {
                    return Err("the bytes are not what Module::to_bytes writes for the module they load as".into());
                }
                (m, None)
            }
        }
    } else {
        let a = netil::assemble(&text).map_err(|e| format!("does not assemble: {e}"))?;
        (a.module, Some(a.source_map))
    };
    let Expect::Verify { rule, segment, offset } = expect else {
        return Err("a load error can only be expected from a .hex file".into());
    };
    let err = match verify_with_source(&module, source.as_ref()) {
        Ok(_) => return Err("the verifier accepts it".into()),
        Err(e) => e,
    };
    let mut shown = err.to_string();
    if let Some(line) = err.line {
        let src = text.lines().nth(line as usize - 1).unwrap_or("").trim();
        let _ = write!(shown, "\n  source: {src}");
    }
    if (err.rule, err.segment, err.offset) != (rule, segment, offset) {
        return Err(format!("expected {} in {:?} at {:?}, got:\n{shown}", rule.name(), segment.map(SegmentKind::name), offset));
    }
    if !is_hex && err.offset.is_some() && err.line.is_none() {
        return Err(format!("the error has no source line:\n{shown}"));
    }
    if err.message.is_empty() {
        return Err("empty message".into());
    }
    covered.push(rule);
    Ok(shown)
}

#[test]
fn malformed_modules_are_rejected() {
    let mut paths: Vec<_> = std::fs::read_dir(DIR)
        .unwrap_or_else(|e| panic!("cannot read {DIR}: {e}"))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "nil" || e == "hex"))
        .collect();
    paths.sort();
    let mut failures = Vec::new();
    let mut covered = Vec::new();
    for path in &paths {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        match check(path, &mut covered) {
            Ok(shown) => println!("{name}:\n  {}\n", shown.replace('\n', "\n  ")),
            Err(why) => failures.push(format!("{name}: {why}")),
        }
    }
    // Every rule that a file can express is exercised at least once
    // (limit-exceeded cannot be: the assembler and the loader refuse such modules).
    let missing: Vec<_> = Rule::ALL.iter().filter(|r| **r != Rule::LimitExceeded && !covered.contains(r)).map(|r| r.name()).collect();
    if !missing.is_empty() {
        failures.push(format!("no malformed case for rule(s): {}", missing.join(", ")));
    }
    println!("{} malformed cases", paths.len());
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
    assert!(paths.len() >= MIN_CASES, "only {} malformed cases in {DIR}, expected at least {MIN_CASES}", paths.len());
}
