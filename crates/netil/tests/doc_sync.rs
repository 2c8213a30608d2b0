//! Keeps docs/netil.md, the contract of the NetIL instruction set, in sync
//! with the code that implements it:
//!
//! - every opcode of [`Opcode::ALL`] has exactly one row in the instruction
//!   reference, giving its byte (`` `0x..` ``) and mnemonic in backticks, an
//!   operand cell that is empty exactly when the opcode takes no operand, and
//!   a stack effect `` `IN -> OUT` `` consistent with the opcode table;
//! - no row documents an opcode byte the table does not have;
//! - the magic bytes and the current module format version are stated;
//! - every ```` ```nil ```` listing assembles as printed, and its
//!   disassembly reassembles to the same bytes;
//! - a ```` ```hex ```` block that directly follows a ```` ```nil ```` block
//!   is exactly the binary module that listing assembles to.

use netil::module::{MAGIC, VERSION_MAJOR, VERSION_MINOR};
use netil::{assemble, disassemble, Opcode, OperandKind};

fn doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/netil.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// The cells of a Markdown table row (`| a | b |` → `["a", "b"]`), or `None`
/// for a line that is not a table row. An escaped pipe `\|` (as in `a\|b`)
/// does not separate cells; it is returned as `|`.
fn cells(line: &str) -> Option<Vec<String>> {
    let t = line.trim();
    let inner = t.strip_prefix('|')?.strip_suffix('|')?;
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cur.push('|');
                chars.next();
            }
            '|' => out.push(std::mem::take(&mut cur).trim().to_string()),
            _ => cur.push(c),
        }
    }
    out.push(cur.trim().to_string());
    Some(out)
}

/// A row of the instruction reference: its first cell is an opcode byte in backticks.
struct Row {
    line_no: usize,
    byte: u8,
    cells: Vec<String>,
}

fn reference_rows(doc: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    for (i, line) in doc.lines().enumerate() {
        let Some(cells) = cells(line) else { continue };
        let Some(hex) = cells.first().and_then(|c| c.strip_prefix("`0x")).and_then(|c| c.strip_suffix('`')) else {
            continue;
        };
        // Only two-digit bytes are opcode rows (offset tables use other forms).
        if hex.len() != 2 || cells.len() < 5 {
            continue;
        }
        let Ok(byte) = u8::from_str_radix(hex, 16) else { continue };
        rows.push(Row { line_no: i + 1, byte, cells });
    }
    rows
}

/// Splits a stack-effect code span `` `a b -> r` `` into its two sides.
fn stack_effect(cell: &str) -> Option<(Vec<&str>, Vec<&str>)> {
    let span = cell.strip_prefix('`')?.split('`').next()?;
    let (lhs, rhs) = span.split_once("->")?;
    Some((lhs.split_whitespace().collect(), rhs.split_whitespace().collect()))
}

#[test]
fn every_opcode_has_a_reference_row() {
    let doc = doc();
    let mut missing = Vec::new();
    for &op in Opcode::ALL {
        let mnemonic = format!("`{}`", op.mnemonic());
        let byte = format!("{:#04x}", op as u8);
        let found = doc.lines().any(|l| l.trim_start().starts_with('|') && l.contains(&mnemonic) && l.contains(&byte));
        if !found {
            missing.push(format!("{byte} {mnemonic}"));
        }
    }
    assert!(missing.is_empty(), "docs/netil.md has no table row for: {}", missing.join(", "));
}

#[test]
fn reference_rows_match_the_opcode_table() {
    let doc = doc();
    let rows = reference_rows(&doc);
    let mut errors = Vec::new();
    let mut seen = std::collections::HashMap::new();
    for row in &rows {
        let at = format!("docs/netil.md:{}", row.line_no);
        let Some(op) = Opcode::from_byte(row.byte) else {
            errors.push(format!("{at}: {:#04x} is not an opcode", row.byte));
            continue;
        };
        if let Some(prev) = seen.insert(op, row.line_no) {
            errors.push(format!("{at}: `{}` already documented on line {prev}", op.mnemonic()));
        }
        let want = format!("`{}`", op.mnemonic());
        if row.cells[1] != want.as_str() {
            errors.push(format!("{at}: {:#04x} is {want}, the row says {}", row.byte, row.cells[1]));
        }
        let has_operands = !row.cells[2].is_empty();
        if has_operands != (op.operands() != OperandKind::None) {
            errors.push(format!("{at}: `{}` takes operands {:?}, the row says `{}`", op.mnemonic(), op.operands(), row.cells[2]));
        }
        match stack_effect(&row.cells[3]) {
            Some((lhs, rhs)) => {
                let (pops, pushes) = (op.pops() as usize, op.pushes() as usize);
                let net_ok = rhs.len() as isize - lhs.len() as isize == pushes as isize - pops as isize;
                if lhs.len() < pops || !net_ok {
                    errors.push(format!(
                        "{at}: `{}` pops {pops} and pushes {pushes}, the row's stack effect is {}",
                        op.mnemonic(),
                        row.cells[3]
                    ));
                }
            }
            None => errors.push(format!("{at}: stack effect `{}` is not of the form `IN -> OUT`", row.cells[3])),
        }
    }
    for &op in Opcode::ALL {
        if !seen.contains_key(&op) {
            errors.push(format!("`{}` ({:#04x}) has no row in the instruction reference", op.mnemonic(), op as u8));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn magic_and_version_are_documented() {
    let doc = doc();
    let hex: Vec<String> = MAGIC.iter().map(|b| format!("{b:02x}")).collect();
    let hex = hex.join(" ");
    assert!(doc.contains(&hex), "docs/netil.md does not give the magic bytes `{hex}`");
    assert!(doc.contains(r"\x89NIL\r\n\x1a\n"), "docs/netil.md does not give the magic as a string");
    let version = format!("module format {VERSION_MAJOR}.{VERSION_MINOR}");
    assert!(doc.contains(&version), "docs/netil.md does not say `{version}`");
    // The header layout table states both version fields with their current values.
    for (offset, field, value) in [("8", "version major", VERSION_MAJOR), ("10", "version minor", VERSION_MINOR)] {
        let want = format!("`{value}`");
        let ok = doc.lines().filter_map(cells).any(|c| c.len() >= 5 && c[0] == offset && c[3] == field && c[4].starts_with(&want));
        assert!(ok, "the header layout table has no row `| {offset} | 2 | `u16` | {field} | {want} ... |`");
    }
}

/// The fenced code blocks of the document: (info string, first line number, body).
fn fenced_blocks(doc: &str) -> Vec<(String, usize, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, usize, String)> = None;
    for (i, line) in doc.lines().enumerate() {
        let t = line.trim_start();
        match open.take() {
            None => {
                if let Some(info) = t.strip_prefix("```") {
                    open = Some((info.trim().to_string(), i + 2, String::new()));
                }
            }
            Some((info, start, mut body)) => {
                if t.starts_with("```") {
                    blocks.push((info, start, body));
                } else {
                    body.push_str(line);
                    body.push('\n');
                    open = Some((info, start, body));
                }
            }
        }
    }
    assert!(open.is_none(), "docs/netil.md has an unterminated code block");
    blocks
}

#[test]
fn listings_assemble_and_round_trip() {
    let doc = doc();
    let blocks = fenced_blocks(&doc);
    let mut listings = 0;
    let mut dumps = 0;
    let mut previous: Option<&(String, usize, String)> = None;
    for block in &blocks {
        let (info, line, body) = block;
        if info == "nil" {
            listings += 1;
            let m = match assemble(body) {
                Ok(a) => a.module,
                Err(e) => panic!("docs/netil.md:{line}: listing does not assemble: {}", e.display_with("listing")),
            };
            let text = disassemble(&m).unwrap_or_else(|e| panic!("docs/netil.md:{line}: disassembly fails: {e:?}"));
            let again = assemble(&text).unwrap_or_else(|e| panic!("docs/netil.md:{line}: disassembly does not reassemble: {e}\n{text}"));
            assert_eq!(again.module.to_bytes(), m.to_bytes(), "docs/netil.md:{line}: round trip changes the module\n{text}");
        }
        if info == "hex" {
            if let Some((prev_info, prev_line, prev_body)) = previous {
                if prev_info == "nil" {
                    dumps += 1;
                    let mut bytes = Vec::new();
                    for l in body.lines() {
                        let data = l.split(';').next().unwrap_or("");
                        for tok in data.split_whitespace() {
                            let b =
                                u8::from_str_radix(tok, 16).unwrap_or_else(|_| panic!("docs/netil.md:{line}: `{tok}` is not a hex byte"));
                            bytes.push(b);
                        }
                    }
                    let want = assemble(prev_body).expect("checked above").module.to_bytes();
                    let show = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ");
                    assert_eq!(
                        show(&bytes),
                        show(&want),
                        "docs/netil.md:{line}: the dump is not the module the listing on line {prev_line} assembles to"
                    );
                    let m = netil::Module::from_bytes(&bytes).unwrap_or_else(|e| panic!("docs/netil.md:{line}: dump does not load: {e}"));
                    assert_eq!(m.to_bytes(), bytes);
                }
            }
        }
        previous = Some(block);
    }
    assert!(listings >= 1, "docs/netil.md has no ```nil listing");
    assert!(dumps >= 1, "docs/netil.md has no ```hex module dump after a listing");
}
