//! The NetIL opcode table: the single definition of every instruction.
//!
//! Each row gives the opcode byte, the assembler mnemonic, the operand layout
//! that follows the opcode byte in the binary encoding, the stack effect
//! (values popped, values pushed) and a few semantic flags. The encoder,
//! decoder, assembler, disassembler, verifier and the engines all derive what
//! they need from this table; `docs/netil.md` is checked against it by a test.

/// The operand layout that follows an opcode byte. All multi-byte operands are
/// little-endian in the module encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperandKind {
    /// No operand.
    None,
    /// A 32-bit immediate (`push`).
    Imm32,
    /// A signed 32-bit jump displacement, relative to the next instruction.
    Target,
    /// A 16-bit output port number (`ret`).
    Port,
    /// A 16-bit local slot index (`locload`, `locstore`).
    Local,
    /// An 8-bit stack index (`pick`: 0 is the top of the stack).
    Depth,
    /// One memory selector byte (`crc32`, `hash`, `csum`).
    Mem,
    /// Source and destination memory selectors in one byte: `src << 4 | dst` (`mcopy`).
    MemPair,
    /// Coprocessor index and register number, one byte each.
    CoproReg,
    /// Coprocessor index and operation number, one byte each.
    CoproOp,
    /// A case table: `u32 count`, `i32 default`, then `count` × (`u32 value`, `i32 target`).
    Switch,
}

impl OperandKind {
    /// Encoded size of the operands in bytes, or `None` for the variable-size switch table.
    pub const fn fixed_size(self) -> Option<usize> {
        match self {
            OperandKind::None => Some(0),
            OperandKind::Imm32 | OperandKind::Target => Some(4),
            OperandKind::Port | OperandKind::Local => Some(2),
            OperandKind::Depth | OperandKind::Mem | OperandKind::MemPair => Some(1),
            OperandKind::CoproReg | OperandKind::CoproOp => Some(2),
            OperandKind::Switch => None,
        }
    }
}

/// Broad instruction classes, used by documentation, generators and engines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Operand stack manipulation.
    Stack,
    /// Arithmetic, logic, shifts and bit operations.
    Alu,
    /// Comparisons that push 0 or 1.
    Compare,
    /// Jumps, switch and handler exits.
    Control,
    /// Packet memory access.
    Packet,
    /// Info memory access.
    Info,
    /// Data memory access.
    Data,
    /// Local variables.
    Local,
    /// Bulk copies, checksums and hashes over memory regions.
    Region,
    /// Exchange-buffer metadata (input port, timestamp).
    Meta,
    /// Coprocessor access.
    Copro,
}

macro_rules! opcodes {
    ($( $(#[$doc:meta])* $name:ident = $byte:literal, $mn:literal, $ops:ident, $pop:literal, $push:literal, $class:ident; )*) => {
        /// A NetIL opcode. The discriminant is the encoded opcode byte.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum Opcode {
            $( $(#[$doc])* $name = $byte, )*
        }

        impl Opcode {
            /// Every opcode, in table order.
            pub const ALL: &'static [Opcode] = &[ $( Opcode::$name, )* ];

            /// Decodes an opcode byte; `None` for bytes that are not opcodes.
            pub const fn from_byte(b: u8) -> Option<Opcode> {
                match b {
                    $( $byte => Some(Opcode::$name), )*
                    _ => None,
                }
            }

            /// The assembler mnemonic.
            pub const fn mnemonic(self) -> &'static str {
                match self { $( Opcode::$name => $mn, )* }
            }

            /// Looks an opcode up by mnemonic (exact, lower case).
            pub fn from_mnemonic(s: &str) -> Option<Opcode> {
                match s { $( $mn => Some(Opcode::$name), )* _ => None }
            }

            /// The operand layout following the opcode byte.
            pub const fn operands(self) -> OperandKind {
                match self { $( Opcode::$name => OperandKind::$ops, )* }
            }

            /// Values popped from the operand stack (for `pick n`, see [`Opcode::stack_needs`]).
            pub const fn pops(self) -> u32 {
                match self { $( Opcode::$name => $pop, )* }
            }

            /// Values pushed onto the operand stack.
            pub const fn pushes(self) -> u32 {
                match self { $( Opcode::$name => $push, )* }
            }

            /// The instruction class.
            pub const fn class(self) -> Class {
                match self { $( Opcode::$name => Class::$class, )* }
            }
        }
    };
}

opcodes! {
    // ---- stack ----
    /// Does nothing.
    Nop = 0x00, "nop", None, 0, 0, Stack;
    /// Pushes a 32-bit immediate.
    Push = 0x01, "push", Imm32, 0, 1, Stack;
    /// Discards the top of the stack.
    Pop = 0x02, "pop", None, 1, 0, Stack;
    /// Duplicates the top of the stack.
    Dup = 0x03, "dup", None, 1, 2, Stack;
    /// Exchanges the two topmost values.
    Swap = 0x04, "swap", None, 2, 2, Stack;
    /// Pushes a copy of the second value from the top.
    Over = 0x05, "over", None, 2, 3, Stack;
    /// Pushes a copy of the value `n` below the top (`pick 0` = `dup`).
    Pick = 0x06, "pick", Depth, 0, 1, Stack;

    // ---- binary ALU: pop b, pop a, push a OP b ----
    /// Wrapping addition.
    Add = 0x10, "add", None, 2, 1, Alu;
    /// Wrapping subtraction.
    Sub = 0x11, "sub", None, 2, 1, Alu;
    /// Wrapping multiplication (low 32 bits).
    Mul = 0x12, "mul", None, 2, 1, Alu;
    /// Unsigned division; division by zero faults.
    Div = 0x13, "div", None, 2, 1, Alu;
    /// Unsigned remainder; division by zero faults.
    Mod = 0x14, "mod", None, 2, 1, Alu;
    /// Signed division (truncating); by zero faults; MIN / -1 wraps to MIN.
    Sdiv = 0x15, "sdiv", None, 2, 1, Alu;
    /// Signed remainder (sign of the dividend); by zero faults; MIN % -1 = 0.
    Smod = 0x16, "smod", None, 2, 1, Alu;
    /// Bitwise and.
    And = 0x17, "and", None, 2, 1, Alu;
    /// Bitwise or.
    Or = 0x18, "or", None, 2, 1, Alu;
    /// Bitwise exclusive or.
    Xor = 0x19, "xor", None, 2, 1, Alu;
    /// Shift left by `b mod 32`.
    Shl = 0x1a, "shl", None, 2, 1, Alu;
    /// Logical shift right by `b mod 32`.
    Shr = 0x1b, "shr", None, 2, 1, Alu;
    /// Arithmetic shift right by `b mod 32`.
    Sar = 0x1c, "sar", None, 2, 1, Alu;
    /// Rotate left by `b mod 32`.
    Rotl = 0x1d, "rotl", None, 2, 1, Alu;
    /// Rotate right by `b mod 32`.
    Rotr = 0x1e, "rotr", None, 2, 1, Alu;

    // ---- unary ALU ----
    /// Bitwise complement.
    Not = 0x20, "not", None, 1, 1, Alu;
    /// Two's complement negation (wrapping).
    Neg = 0x21, "neg", None, 1, 1, Alu;
    /// Reverses the four bytes of the value.
    Bswap = 0x22, "bswap", None, 1, 1, Alu;
    /// Swaps the two low bytes; the high 16 bits become zero.
    Bswap16 = 0x23, "bswap16", None, 1, 1, Alu;
    /// Number of set bits.
    Popcnt = 0x24, "popcnt", None, 1, 1, Alu;
    /// Number of leading zero bits (32 for zero).
    Clz = 0x25, "clz", None, 1, 1, Alu;
    /// Number of trailing zero bits (32 for zero).
    Ctz = 0x26, "ctz", None, 1, 1, Alu;
    /// Pop bit index b, pop a: push bit `b mod 32` of a (0 or 1).
    Btest = 0x28, "btest", None, 2, 1, Alu;
    /// Pop bit index b, pop a: push a with bit `b mod 32` set.
    Bset = 0x29, "bset", None, 2, 1, Alu;
    /// Pop bit index b, pop a: push a with bit `b mod 32` cleared.
    Bclr = 0x2a, "bclr", None, 2, 1, Alu;

    // ---- comparisons: pop b, pop a, push (a OP b) as 0/1 ----
    /// Equal.
    CmpEq = 0x30, "cmp.eq", None, 2, 1, Compare;
    /// Not equal.
    CmpNeq = 0x31, "cmp.neq", None, 2, 1, Compare;
    /// Unsigned less than.
    CmpLt = 0x32, "cmp.lt", None, 2, 1, Compare;
    /// Unsigned less than or equal.
    CmpLe = 0x33, "cmp.le", None, 2, 1, Compare;
    /// Unsigned greater than.
    CmpGt = 0x34, "cmp.gt", None, 2, 1, Compare;
    /// Unsigned greater than or equal.
    CmpGe = 0x35, "cmp.ge", None, 2, 1, Compare;
    /// Signed less than.
    CmpSlt = 0x36, "cmp.slt", None, 2, 1, Compare;
    /// Signed less than or equal.
    CmpSle = 0x37, "cmp.sle", None, 2, 1, Compare;
    /// Signed greater than.
    CmpSgt = 0x38, "cmp.sgt", None, 2, 1, Compare;
    /// Signed greater than or equal.
    CmpSge = 0x39, "cmp.sge", None, 2, 1, Compare;

    // ---- control flow ----
    /// Unconditional jump.
    Jump = 0x40, "jump", Target, 0, 0, Control;
    /// Pop a; jump if a == 0.
    Jz = 0x41, "jz", Target, 1, 0, Control;
    /// Pop a; jump if a != 0.
    Jnz = 0x42, "jnz", Target, 1, 0, Control;
    /// Pop b, pop a; jump if a == b.
    JcmpEq = 0x43, "jcmp.eq", Target, 2, 0, Control;
    /// Pop b, pop a; jump if a != b.
    JcmpNeq = 0x44, "jcmp.neq", Target, 2, 0, Control;
    /// Pop b, pop a; jump if a < b (unsigned).
    JcmpLt = 0x45, "jcmp.lt", Target, 2, 0, Control;
    /// Pop b, pop a; jump if a <= b (unsigned).
    JcmpLe = 0x46, "jcmp.le", Target, 2, 0, Control;
    /// Pop b, pop a; jump if a > b (unsigned).
    JcmpGt = 0x47, "jcmp.gt", Target, 2, 0, Control;
    /// Pop b, pop a; jump if a >= b (unsigned).
    JcmpGe = 0x48, "jcmp.ge", Target, 2, 0, Control;
    /// Pop b, pop a; jump if a < b (signed).
    JcmpSlt = 0x49, "jcmp.slt", Target, 2, 0, Control;
    /// Pop b, pop a; jump if a <= b (signed).
    JcmpSle = 0x4a, "jcmp.sle", Target, 2, 0, Control;
    /// Pop b, pop a; jump if a > b (signed).
    JcmpSgt = 0x4b, "jcmp.sgt", Target, 2, 0, Control;
    /// Pop b, pop a; jump if a >= b (signed).
    JcmpSge = 0x4c, "jcmp.sge", Target, 2, 0, Control;
    /// Pop a; jump to the case whose value equals a, else to the default.
    Switch = 0x4e, "switch", Switch, 1, 0, Control;
    /// The exchange buffer leaves on the given output port; the handler ends.
    Ret = 0x4f, "ret", Port, 0, 0, Control;
    /// Pop a port number; the exchange buffer leaves on it (faults if the port does not exist).
    RetPop = 0x50, "ret.pop", None, 1, 0, Control;
    /// The exchange buffer is dropped; the handler ends.
    Drop = 0x51, "drop", None, 0, 0, Control;
    /// Ends the `.init` handler (valid only there).
    Exit = 0x52, "exit", None, 0, 0, Control;

    // ---- packet memory (big-endian) ----
    /// Pop offset; push the byte at it.
    Upload8 = 0x60, "upload.8", None, 1, 1, Packet;
    /// Pop offset; push the big-endian 16-bit value at it.
    Upload16 = 0x61, "upload.16", None, 1, 1, Packet;
    /// Pop offset; push the big-endian 32-bit value at it.
    Upload32 = 0x62, "upload.32", None, 1, 1, Packet;
    /// Pop value, pop offset; store the low byte.
    Ustore8 = 0x63, "ustore.8", None, 2, 0, Packet;
    /// Pop value, pop offset; store the low 16 bits big-endian.
    Ustore16 = 0x64, "ustore.16", None, 2, 0, Packet;
    /// Pop value, pop offset; store 32 bits big-endian.
    Ustore32 = 0x65, "ustore.32", None, 2, 0, Packet;
    /// Push the captured length of the packet (the bytes present).
    Pktlen = 0x66, "pktlen", None, 0, 1, Packet;
    /// Push the length of the packet on the wire (may exceed the captured length).
    Wirelen = 0x67, "wirelen", None, 0, 1, Packet;

    // ---- info memory (big-endian) ----
    /// Pop offset; push the info-memory byte at it.
    Iload8 = 0x68, "iload.8", None, 1, 1, Info;
    /// Pop offset; push the big-endian 16-bit info-memory value at it.
    Iload16 = 0x69, "iload.16", None, 1, 1, Info;
    /// Pop offset; push the big-endian 32-bit info-memory value at it.
    Iload32 = 0x6a, "iload.32", None, 1, 1, Info;
    /// Pop value, pop offset; store the low byte in info memory.
    Istore8 = 0x6b, "istore.8", None, 2, 0, Info;
    /// Pop value, pop offset; store 16 bits big-endian in info memory.
    Istore16 = 0x6c, "istore.16", None, 2, 0, Info;
    /// Pop value, pop offset; store 32 bits big-endian in info memory.
    Istore32 = 0x6d, "istore.32", None, 2, 0, Info;

    // ---- data memory (big-endian) ----
    /// Pop offset; push the data-memory byte at it.
    Dload8 = 0x70, "dload.8", None, 1, 1, Data;
    /// Pop offset; push the big-endian 16-bit data-memory value at it.
    Dload16 = 0x71, "dload.16", None, 1, 1, Data;
    /// Pop offset; push the big-endian 32-bit data-memory value at it.
    Dload32 = 0x72, "dload.32", None, 1, 1, Data;
    /// Pop value, pop offset; store the low byte in data memory.
    Dstore8 = 0x73, "dstore.8", None, 2, 0, Data;
    /// Pop value, pop offset; store 16 bits big-endian in data memory.
    Dstore16 = 0x74, "dstore.16", None, 2, 0, Data;
    /// Pop value, pop offset; store 32 bits big-endian in data memory.
    Dstore32 = 0x75, "dstore.32", None, 2, 0, Data;

    // ---- locals (32-bit slots) ----
    /// Push local slot n.
    Locload = 0x78, "locload", Local, 0, 1, Local;
    /// Pop a value into local slot n.
    Locstore = 0x79, "locstore", Local, 1, 0, Local;

    // ---- regions ----
    /// Pop len, pop src offset, pop dst offset; copy len bytes between memories (memmove).
    Mcopy = 0x7c, "mcopy", MemPair, 3, 0, Region;
    /// Pop len, pop offset; push the CRC-32 (IEEE 802.3) of the region.
    Crc32 = 0x80, "crc32", Mem, 2, 1, Region;
    /// Pop len, pop offset; push the MurmurHash3 (x86, 32-bit, seed 0) of the region.
    Hash = 0x81, "hash", Mem, 2, 1, Region;
    /// Pop a; push the MurmurHash3 of its four big-endian bytes.
    Hash32 = 0x82, "hash32", None, 1, 1, Alu;
    /// Pop len, pop offset; push the Internet checksum (RFC 1071) of the region.
    Csum = 0x83, "csum", Mem, 2, 1, Region;
    /// Pop new, pop old, pop checksum; push the checksum updated for a 16-bit field change (RFC 1624 eq. 3).
    CsumUpd = 0x84, "csum.upd", None, 3, 1, Alu;

    // ---- metadata ----
    /// Push the NetPE input port the exchange buffer arrived on (the value `.push` starts with).
    Inport = 0x90, "inport", None, 0, 1, Meta;
    /// Push the seconds part of the packet timestamp (low 32 bits of the Unix time).
    TstampS = 0x91, "tstamp.s", None, 0, 1, Meta;
    /// Push the nanoseconds part of the packet timestamp (0..1e9).
    TstampNs = 0x92, "tstamp.ns", None, 0, 1, Meta;

    // ---- coprocessors ----
    /// Pop a value into input register r of coprocessor c.
    CoproIn = 0xa0, "copro.in", CoproReg, 1, 0, Copro;
    /// Push output register r of coprocessor c.
    CoproOut = 0xa1, "copro.out", CoproReg, 0, 1, Copro;
    /// Invoke operation op of coprocessor c.
    CoproInvoke = 0xa2, "copro.invoke", CoproOp, 0, 0, Copro;
}

/// The condition of a comparison (`cmp.*`) or conditional jump (`jcmp.*`):
/// `a COND b` with `b` the top of the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cond {
    /// `a == b`
    Eq,
    /// `a != b`
    Ne,
    /// `a < b`, unsigned
    Lt,
    /// `a <= b`, unsigned
    Le,
    /// `a > b`, unsigned
    Gt,
    /// `a >= b`, unsigned
    Ge,
    /// `a < b`, signed
    Slt,
    /// `a <= b`, signed
    Sle,
    /// `a > b`, signed
    Sgt,
    /// `a >= b`, signed
    Sge,
}

impl Cond {
    /// Evaluates the condition on `a` (second from top) and `b` (top).
    #[inline(always)]
    pub fn eval(self, a: u32, b: u32) -> bool {
        match self {
            Cond::Eq => a == b,
            Cond::Ne => a != b,
            Cond::Lt => a < b,
            Cond::Le => a <= b,
            Cond::Gt => a > b,
            Cond::Ge => a >= b,
            Cond::Slt => (a as i32) < (b as i32),
            Cond::Sle => (a as i32) <= (b as i32),
            Cond::Sgt => (a as i32) > (b as i32),
            Cond::Sge => (a as i32) >= (b as i32),
        }
    }

    /// True for the signed orderings.
    pub const fn is_signed(self) -> bool {
        matches!(self, Cond::Slt | Cond::Sle | Cond::Sgt | Cond::Sge)
    }

    /// The condition that holds exactly when this one does not (`<` gives `>=`).
    pub const fn negate(self) -> Cond {
        match self {
            Cond::Eq => Cond::Ne,
            Cond::Ne => Cond::Eq,
            Cond::Lt => Cond::Ge,
            Cond::Le => Cond::Gt,
            Cond::Gt => Cond::Le,
            Cond::Ge => Cond::Lt,
            Cond::Slt => Cond::Sge,
            Cond::Sle => Cond::Sgt,
            Cond::Sgt => Cond::Sle,
            Cond::Sge => Cond::Slt,
        }
    }

    /// The same condition with its operands exchanged (`a < b` is `b > a`).
    pub const fn swap(self) -> Cond {
        match self {
            Cond::Lt => Cond::Gt,
            Cond::Le => Cond::Ge,
            Cond::Gt => Cond::Lt,
            Cond::Ge => Cond::Le,
            Cond::Slt => Cond::Sgt,
            Cond::Sle => Cond::Sge,
            Cond::Sgt => Cond::Slt,
            Cond::Sge => Cond::Sle,
            c => c,
        }
    }
}

impl Opcode {
    /// Minimum stack depth the instruction requires, given its operand (for `pick n`: n + 1).
    pub fn stack_needs(self, pick_depth: u8) -> u32 {
        match self {
            Opcode::Pick => u32::from(pick_depth) + 1,
            _ => self.pops(),
        }
    }

    /// The condition of `cmp.*` and `jcmp.*`; `None` for other instructions.
    pub const fn condition(self) -> Option<Cond> {
        use Opcode::*;
        Some(match self {
            CmpEq | JcmpEq => Cond::Eq,
            CmpNeq | JcmpNeq => Cond::Ne,
            CmpLt | JcmpLt => Cond::Lt,
            CmpLe | JcmpLe => Cond::Le,
            CmpGt | JcmpGt => Cond::Gt,
            CmpGe | JcmpGe => Cond::Ge,
            CmpSlt | JcmpSlt => Cond::Slt,
            CmpSle | JcmpSle => Cond::Sle,
            CmpSgt | JcmpSgt => Cond::Sgt,
            CmpSge | JcmpSge => Cond::Sge,
            _ => return None,
        })
    }

    /// True for instructions that end the handler (`ret`, `ret.pop`, `drop`, `exit`).
    pub const fn is_terminator(self) -> bool {
        matches!(self, Opcode::Ret | Opcode::RetPop | Opcode::Drop | Opcode::Exit)
    }

    /// True for instructions after which control never falls through to the next one.
    pub const fn ends_block(self) -> bool {
        self.is_terminator() || matches!(self, Opcode::Jump | Opcode::Switch)
    }

    /// True for conditional or unconditional jumps with a single target operand.
    pub const fn is_jump(self) -> bool {
        matches!(self.operands(), OperandKind::Target)
    }

    /// Size in bytes of a load or store (1, 2 or 4), or `None` for other instructions.
    pub const fn access_width(self) -> Option<u32> {
        use Opcode::*;
        match self {
            Upload8 | Ustore8 | Iload8 | Istore8 | Dload8 | Dstore8 => Some(1),
            Upload16 | Ustore16 | Iload16 | Istore16 | Dload16 | Dstore16 => Some(2),
            Upload32 | Ustore32 | Iload32 | Istore32 | Dload32 | Dstore32 => Some(4),
            _ => None,
        }
    }

    /// The memory a load or store accesses, or `None` for other instructions.
    pub const fn access_memory(self) -> Option<Mem> {
        match self.class() {
            Class::Packet if self.access_width().is_some() => Some(Mem::Packet),
            Class::Info => Some(Mem::Info),
            Class::Data => Some(Mem::Data),
            _ => None,
        }
    }

    /// True for stores (`ustore.*`, `istore.*`, `dstore.*`).
    pub const fn is_store(self) -> bool {
        use Opcode::*;
        matches!(self, Ustore8 | Ustore16 | Ustore32 | Istore8 | Istore16 | Istore32 | Dstore8 | Dstore16 | Dstore32)
    }

    /// True for instructions that touch the exchange buffer (packet or info memory, or its metadata);
    /// these are not allowed in `.init`, which runs without a packet.
    pub fn needs_exchange_buffer(self, operands: &crate::Operands) -> bool {
        match self.class() {
            Class::Packet | Class::Info | Class::Meta => true,
            Class::Region => match operands {
                crate::Operands::Mem(m) => *m != Mem::Data,
                crate::Operands::MemPair(a, b) => *a != Mem::Data || *b != Mem::Data,
                _ => false,
            },
            _ => matches!(self, Opcode::Ret | Opcode::RetPop | Opcode::Drop),
        }
    }
}

/// A byte-addressed memory, as selected by region instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mem {
    /// The packet bytes of the exchange buffer (captured length).
    Packet = 0,
    /// The info memory of the exchange buffer.
    Info = 1,
    /// The NetPE's private, persistent data memory.
    Data = 2,
}

impl Mem {
    /// Decodes a memory selector.
    pub const fn from_u8(b: u8) -> Option<Mem> {
        match b {
            0 => Some(Mem::Packet),
            1 => Some(Mem::Info),
            2 => Some(Mem::Data),
            _ => None,
        }
    }

    /// The assembler name (`pkt`, `info`, `data`).
    pub const fn name(self) -> &'static str {
        match self {
            Mem::Packet => "pkt",
            Mem::Info => "info",
            Mem::Data => "data",
        }
    }

    /// Parses an assembler name.
    pub fn from_name(s: &str) -> Option<Mem> {
        match s {
            "pkt" | "packet" => Some(Mem::Packet),
            "info" => Some(Mem::Info),
            "data" => Some(Mem::Data),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        let mut seen = std::collections::HashSet::new();
        for &op in Opcode::ALL {
            assert!(seen.insert(op as u8), "duplicate byte {:#x}", op as u8);
            assert_eq!(Opcode::from_byte(op as u8), Some(op));
            assert_eq!(Opcode::from_mnemonic(op.mnemonic()), Some(op));
        }
        let valid = (0..=255u8).filter(|b| Opcode::from_byte(*b).is_some()).count();
        assert_eq!(valid, Opcode::ALL.len());
    }

    #[test]
    fn negate_and_swap_agree_with_eval() {
        let values = [0u32, 1, 2, 0x7fff_ffff, 0x8000_0000, 0x8000_0001, u32::MAX - 1, u32::MAX];
        for cond in Opcode::ALL.iter().filter_map(|op| op.condition()) {
            for a in values {
                for b in values {
                    assert_eq!(cond.negate().eval(a, b), !cond.eval(a, b), "{cond:?} negated on {a:#x}, {b:#x}");
                    assert_eq!(cond.swap().eval(b, a), cond.eval(a, b), "{cond:?} swapped on {a:#x}, {b:#x}");
                }
            }
        }
    }
}
