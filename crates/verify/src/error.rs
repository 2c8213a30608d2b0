//! Verification errors: the [`Rule`] that was broken and where.

use std::fmt;

use netil::SegmentKind;

macro_rules! rules {
    ($( $(#[$doc:meta])* $name:ident = $text:literal, $summary:literal; )*) => {
        /// An invariant the verifier checks. Each has a stable kebab-case name
        /// ([`Rule::name`]) used in test expectations, documentation
        /// (docs/verifier.md) and tool output.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Rule {
            $( $(#[$doc])* $name, )*
        }

        impl Rule {
            /// Every rule, in documentation order.
            pub const ALL: &'static [Rule] = &[ $( Rule::$name, )* ];

            /// The stable kebab-case name (`stack-underflow`, ...).
            pub const fn name(self) -> &'static str {
                match self { $( Rule::$name => $text, )* }
            }

            /// Looks a rule up by its [`name`](Rule::name).
            pub fn from_name(s: &str) -> Option<Rule> {
                match s { $( $text => Some(Rule::$name), )* _ => None }
            }

            /// One sentence saying what the rule requires.
            pub const fn summary(self) -> &'static str {
                match self { $( Rule::$name => $summary, )* }
            }
        }
    };
}

rules! {
    // ---- module level ----
    /// The module has no `.push` segment.
    MissingPush = "missing-push", "the module has a .push segment";
    /// A declaration or a segment exceeds the limits of the module format
    /// (`netil::module::limits`). Modules read by the loader never do; modules
    /// built in memory may.
    LimitExceeded = "limit-exceeded", "declarations and segment sizes are within the module format's limits";
    // ---- decoding ----
    /// A present segment has no code at all.
    EmptySegment = "empty-segment", "every present segment has at least one instruction";
    /// A byte where an instruction starts is not an opcode.
    InvalidOpcode = "invalid-opcode", "every instruction starts with a valid opcode byte";
    /// The segment ends inside an instruction's operands.
    TruncatedInsn = "truncated-insn", "the last instruction is complete";
    /// An operand has a value the encoding does not allow (memory selector,
    /// switch case count).
    InvalidOperand = "invalid-operand", "memory selectors and switch case counts are valid";
    // ---- control flow ----
    /// A jump or switch target lies outside the segment.
    JumpOutOfSegment = "jump-out-of-segment", "every jump target lies inside the segment";
    /// A jump or switch target is not the first byte of an instruction.
    JumpMisaligned = "jump-misaligned", "every jump target is the start of an instruction";
    /// Execution can run past the last instruction of the segment.
    FallThrough = "fall-through", "no path runs past the end of the segment";
    /// A `switch` has case values that are not strictly ascending (duplicates included).
    SwitchUnsorted = "switch-unsorted", "switch case values are strictly ascending";
    /// `exit` in the `.push` segment.
    ExitOutsideInit = "exit-outside-init", "exit appears only in .init";
    /// An instruction that needs the exchange buffer (packet, info or
    /// metadata access, `ret`, `ret.pop`, `drop`) in `.init`.
    InitForbidden = "init-forbidden", ".init uses no instruction that needs an exchange buffer";
    // ---- operand stack ----
    /// An instruction needs more values than the stack holds.
    StackUnderflow = "stack-underflow", "no instruction pops more values than the stack holds";
    /// The stack can grow beyond `.maxstacksize`.
    StackOverflow = "stack-overflow", "the stack never grows beyond .maxstacksize";
    /// Two paths reach the same instruction with different stack depths.
    StackMismatch = "stack-mismatch", "all paths into an instruction agree on the stack depth";
    // ---- locals ----
    /// `locload`/`locstore` of a slot at or above `.locals`.
    LocalOutOfRange = "local-out-of-range", "local slot numbers are below .locals";
    /// `locload` of a slot that is not written on every path to it.
    UninitLocal = "uninit-local", "every local is written on all paths before it is read";
    // ---- ports, memories, coprocessors ----
    /// `ret N` with `N >= .ports`.
    BadPort = "bad-port", "ret N names a declared output port";
    /// An info-memory access at a constant offset that exceeds `.infosize`.
    InfoOutOfBounds = "info-out-of-bounds", "info accesses at constant offsets stay within .infosize";
    /// A data-memory access at a constant offset that exceeds `.datasize`.
    DataOutOfBounds = "data-out-of-bounds", "data accesses at constant offsets stay within .datasize";
    /// A `copro.*` instruction names a coprocessor index that is not declared.
    CoproUndeclared = "copro-undeclared", "copro.* instructions name a declared coprocessor";
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a module was rejected: the first broken [`Rule`], where it was
/// broken, a message naming the instruction, and the abstract operand stack
/// at that point.
///
/// Displayed as
/// `.push+12 (line 7): stack-underflow: `add` needs 2 values, the stack has 1`
/// followed by `\n  stack: [?]` when a stack is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyError {
    /// The segment the error is in; `None` for module-level errors.
    pub segment: Option<SegmentKind>,
    /// Byte offset of the offending instruction in its segment.
    pub offset: Option<u32>,
    /// Source line of that instruction, when a [`netil::SourceMap`] was given.
    pub line: Option<u32>,
    /// The rule that was broken.
    pub rule: Rule,
    /// What is wrong, in words, naming the instruction.
    pub message: String,
    /// The abstract stack before the instruction, bottom first and top last:
    /// `?` for a value not known statically, the number for a constant,
    /// e.g. `[?, 12]`. Deep stacks show only their top values.
    pub stack: Option<String>,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.segment, self.offset) {
            (Some(seg), Some(off)) => write!(f, "{seg}+{off}")?,
            (Some(seg), None) => write!(f, "{seg}")?,
            (None, Some(off)) => write!(f, "+{off}")?,
            (None, None) => f.write_str("module")?,
        }
        if let Some(line) = self.line {
            write!(f, " (line {line})")?;
        }
        write!(f, ": {}: {}", self.rule, self.message)?;
        if let Some(stack) = &self.stack {
            write!(f, "\n  stack: {stack}")?;
        }
        Ok(())
    }
}

impl std::error::Error for VerifyError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roundtrip() {
        for &r in Rule::ALL {
            assert_eq!(Rule::from_name(r.name()), Some(r));
            assert!(r.name().bytes().all(|c| c.is_ascii_lowercase() || c == b'-'));
        }
        assert_eq!(Rule::from_name("nope"), None);
    }

    #[test]
    fn display() {
        let e = VerifyError {
            segment: Some(SegmentKind::Push),
            offset: Some(12),
            line: Some(7),
            rule: Rule::StackUnderflow,
            message: "`add` needs 2 values, the stack has 1".into(),
            stack: Some("[?]".into()),
        };
        assert_eq!(e.to_string(), ".push+12 (line 7): stack-underflow: `add` needs 2 values, the stack has 1\n  stack: [?]");
        let e = VerifyError { segment: None, offset: None, line: None, rule: Rule::MissingPush, message: "x".into(), stack: None };
        assert_eq!(e.to_string(), "module: missing-push: x");
    }
}
