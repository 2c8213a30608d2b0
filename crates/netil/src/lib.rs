//! NetIL, the Network Intermediate Language of netvm: the instruction set
//! defined once ([`opcode`]), decoded instructions and their encoding
//! ([`insn`]), the versioned binary module format ([`module`]), the text
//! assembler ([`asm`]) and disassembler ([`disasm`]).
//!
//! docs/netil.md is the contract these modules implement.

pub mod asm;
pub mod disasm;
pub mod insn;
pub mod module;
pub mod opcode;

pub use asm::{assemble, AsmError, Assembled, SourceMap};
pub use disasm::disassemble;
pub use insn::{decode, encode, DecodeError, Insn, Operands, SwitchTable};
pub use module::{CoproDecl, Interface, Layout, LoadError, Module, SegmentKind, Var};
pub use opcode::{Class, Cond, Mem, Opcode, OperandKind};
