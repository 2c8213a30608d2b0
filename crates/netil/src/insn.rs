//! Decoded instructions and their binary encoding.
//!
//! A segment's code is a byte string of instructions, each an opcode byte
//! followed by the operands its [`OperandKind`] names. [`decode`] turns a
//! segment into [`Insn`]s with absolute jump targets (byte offsets in the
//! segment); [`encode`] is its exact inverse.

use crate::opcode::{Mem, Opcode, OperandKind};

/// The operands of a decoded instruction.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Operands {
    /// No operand.
    None,
    /// `push` immediate.
    Imm(u32),
    /// Jump target as an absolute byte offset in the segment. It may lie
    /// outside the segment or between instructions in a malformed module;
    /// the verifier rejects those.
    Target(i64),
    /// Output port of `ret`.
    Port(u16),
    /// Local slot index.
    Local(u16),
    /// Stack depth of `pick`.
    Depth(u8),
    /// Memory selector of `crc32`, `hash`, `csum`.
    Mem(Mem),
    /// Source and destination memories of `mcopy`.
    MemPair(Mem, Mem),
    /// Coprocessor index and register.
    CoproReg {
        /// Index of the coprocessor in the module's coprocessor table.
        copro: u8,
        /// The coprocessor register.
        reg: u8,
    },
    /// Coprocessor index and operation.
    CoproOp {
        /// Index of the coprocessor in the module's coprocessor table.
        copro: u8,
        /// The coprocessor operation number.
        op: u8,
    },
    /// `switch` case table.
    Switch(SwitchTable),
}

/// A `switch` case table with absolute targets.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SwitchTable {
    /// Target when no case matches.
    pub default: i64,
    /// `(value, target)` pairs in encoded order (the verifier requires strictly ascending values).
    pub cases: Vec<(u32, i64)>,
}

/// Maximum number of cases in one `switch`.
pub const MAX_SWITCH_CASES: u32 = 65_536;

/// One decoded instruction.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Insn {
    /// Byte offset of the opcode in its segment.
    pub offset: u32,
    /// Encoded length in bytes, opcode included.
    pub len: u32,
    /// The opcode.
    pub op: Opcode,
    /// Its operands.
    pub operands: Operands,
}

impl Insn {
    /// Offset of the following instruction.
    pub fn next(&self) -> u32 {
        self.offset + self.len
    }

    /// The immediate of `push`.
    pub fn imm(&self) -> Option<u32> {
        match self.operands {
            Operands::Imm(v) => Some(v),
            _ => None,
        }
    }

    /// All jump targets of the instruction (one for jumps, default and cases for `switch`).
    pub fn targets(&self) -> Vec<i64> {
        match &self.operands {
            Operands::Target(t) => vec![*t],
            Operands::Switch(s) => {
                let mut v = Vec::with_capacity(s.cases.len() + 1);
                v.push(s.default);
                v.extend(s.cases.iter().map(|c| c.1));
                v
            }
            _ => Vec::new(),
        }
    }
}

/// Why a segment's bytes do not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A byte that is not an opcode.
    #[error("invalid opcode {byte:#04x} at offset {offset}")]
    InvalidOpcode {
        /// Byte offset of the instruction in its segment.
        offset: u32,
        /// The opcode byte.
        byte: u8,
    },
    /// The code ends inside an instruction's operands.
    #[error("instruction `{mnemonic}` at offset {offset} is truncated")]
    Truncated {
        /// Byte offset of the instruction in its segment.
        offset: u32,
        /// Mnemonic of the truncated instruction.
        mnemonic: &'static str,
    },
    /// A memory selector other than 0 (pkt), 1 (info), 2 (data).
    #[error("invalid memory selector {byte:#04x} for `{mnemonic}` at offset {offset}")]
    InvalidMemory {
        /// Byte offset of the instruction in its segment.
        offset: u32,
        /// Mnemonic of the instruction.
        mnemonic: &'static str,
        /// The memory selector byte.
        byte: u8,
    },
    /// A switch table with more than [`MAX_SWITCH_CASES`] cases.
    #[error("switch at offset {offset} has {count} cases (at most {MAX_SWITCH_CASES})")]
    SwitchTooLarge {
        /// Byte offset of the `switch` instruction in its segment.
        offset: u32,
        /// The case count the instruction declares.
        count: u32,
    },
}

impl DecodeError {
    /// The byte offset the error refers to.
    pub fn offset(&self) -> u32 {
        match self {
            DecodeError::InvalidOpcode { offset, .. }
            | DecodeError::Truncated { offset, .. }
            | DecodeError::InvalidMemory { offset, .. }
            | DecodeError::SwitchTooLarge { offset, .. } => *offset,
        }
    }
}

struct Reader<'a> {
    code: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let end = self.pos.checked_add(N)?;
        let b: [u8; N] = self.code.get(self.pos..end)?.try_into().ok()?;
        self.pos = end;
        Some(b)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take::<2>().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take::<4>().map(u32::from_le_bytes)
    }
    fn i32(&mut self) -> Option<i32> {
        self.take::<4>().map(i32::from_le_bytes)
    }
}

/// Decodes one instruction at `offset`.
pub fn decode_one(code: &[u8], offset: u32) -> Result<Insn, DecodeError> {
    let start = offset as usize;
    let byte = code[start];
    let op = Opcode::from_byte(byte).ok_or(DecodeError::InvalidOpcode { offset, byte })?;
    let mut r = Reader { code, pos: start + 1 };
    let trunc = DecodeError::Truncated { offset, mnemonic: op.mnemonic() };
    let mem = |b: u8| Mem::from_u8(b).ok_or(DecodeError::InvalidMemory { offset, mnemonic: op.mnemonic(), byte: b });
    let operands = match op.operands() {
        OperandKind::None => Operands::None,
        OperandKind::Imm32 => Operands::Imm(r.u32().ok_or(trunc)?),
        OperandKind::Target | OperandKind::Switch => {
            // Targets are relative to the end of the whole instruction; read
            // everything first, then resolve.
            if op.operands() == OperandKind::Target {
                let rel = r.i32().ok_or(trunc)?;
                Operands::Target(r.pos as i64 + i64::from(rel))
            } else {
                let count = r.u32().ok_or(trunc.clone())?;
                if count > MAX_SWITCH_CASES {
                    return Err(DecodeError::SwitchTooLarge { offset, count });
                }
                let default = r.i32().ok_or(trunc.clone())?;
                let room = code.len().saturating_sub(r.pos) / 8;
                let mut cases = Vec::with_capacity((count as usize).min(room));
                for _ in 0..count {
                    let v = r.u32().ok_or(trunc.clone())?;
                    let t = r.i32().ok_or(trunc.clone())?;
                    cases.push((v, t));
                }
                let end = r.pos as i64;
                Operands::Switch(SwitchTable {
                    default: end + i64::from(default),
                    cases: cases.into_iter().map(|(v, t)| (v, end + i64::from(t))).collect(),
                })
            }
        }
        OperandKind::Port => Operands::Port(r.u16().ok_or(trunc)?),
        OperandKind::Local => Operands::Local(r.u16().ok_or(trunc)?),
        OperandKind::Depth => Operands::Depth(r.u8().ok_or(trunc)?),
        OperandKind::Mem => Operands::Mem(mem(r.u8().ok_or(trunc)?)?),
        OperandKind::MemPair => {
            let b = r.u8().ok_or(trunc)?;
            Operands::MemPair(mem(b >> 4)?, mem(b & 0xf)?)
        }
        OperandKind::CoproReg => {
            let copro = r.u8().ok_or(trunc.clone())?;
            let reg = r.u8().ok_or(trunc)?;
            Operands::CoproReg { copro, reg }
        }
        OperandKind::CoproOp => {
            let copro = r.u8().ok_or(trunc.clone())?;
            let op = r.u8().ok_or(trunc)?;
            Operands::CoproOp { copro, op }
        }
    };
    Ok(Insn { offset, len: (r.pos - start) as u32, op, operands })
}

/// Decodes a whole segment into instructions, in order.
pub fn decode(code: &[u8]) -> Result<Vec<Insn>, DecodeError> {
    let mut out = Vec::new();
    let mut off = 0usize;
    while off < code.len() {
        let insn = decode_one(code, off as u32)?;
        off += insn.len as usize;
        out.push(insn);
    }
    Ok(out)
}

/// Why an instruction cannot be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The operands do not match the opcode's operand kind.
    #[error("operands {operands:?} do not fit `{mnemonic}`")]
    OperandMismatch {
        /// Mnemonic of the opcode.
        mnemonic: &'static str,
        /// The operands given.
        operands: Operands,
    },
    /// A jump displacement does not fit in 32 bits.
    #[error("jump from offset {from} to {to} does not fit a 32-bit displacement")]
    TargetOutOfRange {
        /// Byte offset of the jump instruction in its segment.
        from: u32,
        /// The absolute target offset.
        to: i64,
    },
}

/// Encoded length of an instruction with these operands.
pub fn encoded_len(op: Opcode, operands: &Operands) -> u32 {
    match (op.operands().fixed_size(), operands) {
        (Some(n), _) => 1 + n as u32,
        (None, Operands::Switch(s)) => 1 + 4 + 4 + 8 * s.cases.len() as u32,
        (None, _) => 1 + 8,
    }
}

/// Appends the encoding of `op operands` placed at byte offset `at` of its segment
/// (absolute targets are turned into displacements from the next instruction).
pub fn encode(op: Opcode, operands: &Operands, at: u32, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let mismatch = || EncodeError::OperandMismatch { mnemonic: op.mnemonic(), operands: operands.clone() };
    let end = i64::from(at) + i64::from(encoded_len(op, operands));
    let rel =
        |t: i64| -> Result<i32, EncodeError> { i32::try_from(t - end).map_err(|_| EncodeError::TargetOutOfRange { from: at, to: t }) };
    out.push(op as u8);
    match (op.operands(), operands) {
        (OperandKind::None, Operands::None) => {}
        (OperandKind::Imm32, Operands::Imm(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (OperandKind::Target, Operands::Target(t)) => out.extend_from_slice(&rel(*t)?.to_le_bytes()),
        (OperandKind::Port, Operands::Port(p)) => out.extend_from_slice(&p.to_le_bytes()),
        (OperandKind::Local, Operands::Local(l)) => out.extend_from_slice(&l.to_le_bytes()),
        (OperandKind::Depth, Operands::Depth(d)) => out.push(*d),
        (OperandKind::Mem, Operands::Mem(m)) => out.push(*m as u8),
        (OperandKind::MemPair, Operands::MemPair(s, d)) => out.push((*s as u8) << 4 | *d as u8),
        (OperandKind::CoproReg, Operands::CoproReg { copro, reg }) => out.extend_from_slice(&[*copro, *reg]),
        (OperandKind::CoproOp, Operands::CoproOp { copro, op }) => out.extend_from_slice(&[*copro, *op]),
        (OperandKind::Switch, Operands::Switch(s)) => {
            out.extend_from_slice(&(s.cases.len() as u32).to_le_bytes());
            out.extend_from_slice(&rel(s.default)?.to_le_bytes());
            for (v, t) in &s.cases {
                out.extend_from_slice(&v.to_le_bytes());
                out.extend_from_slice(&rel(*t)?.to_le_bytes());
            }
        }
        _ => {
            out.pop();
            return Err(mismatch());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_simple() {
        let mut code = Vec::new();
        encode(Opcode::Push, &Operands::Imm(12), 0, &mut code).unwrap();
        encode(Opcode::Upload16, &Operands::None, 5, &mut code).unwrap();
        encode(Opcode::Jump, &Operands::Target(0), 6, &mut code).unwrap();
        let sw = SwitchTable { default: 0, cases: vec![(1, 5), (7, 6)] };
        encode(Opcode::Switch, &Operands::Switch(sw.clone()), 11, &mut code).unwrap();
        let insns = decode(&code).unwrap();
        assert_eq!(insns.len(), 4);
        assert_eq!(insns[2].operands, Operands::Target(0));
        assert_eq!(insns[3].operands, Operands::Switch(sw));
    }

    #[test]
    fn truncated_and_invalid() {
        assert!(matches!(decode(&[0x01, 0, 0]), Err(DecodeError::Truncated { offset: 0, .. })));
        assert!(matches!(decode(&[0xff]), Err(DecodeError::InvalidOpcode { byte: 0xff, .. })));
        assert!(matches!(decode(&[0x80, 7]), Err(DecodeError::InvalidMemory { .. })));
        // A huge switch count must not allocate before checking.
        assert!(matches!(decode(&[0x4e, 0xff, 0xff, 0xff, 0xff]), Err(DecodeError::SwitchTooLarge { .. })));
    }
}
