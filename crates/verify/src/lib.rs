//! The netvm static verifier for NetIL modules (NetVM paper, section 3.3).
//!
//! [`verify`] checks a [`Module`] before any engine runs it and returns a
//! [`Verified`] module (decoded instructions and the stack depth before each
//! one) or the first [`VerifyError`] found. Engines may rely on every
//! invariant below; what is not checked here is checked at run time.
//!
//! # Invariants checked
//!
//! Module level (no segment):
//!
//! - `missing-push`: the module has a `.push` segment.
//! - `limit-exceeded`: `.maxstacksize`, `.locals`, `.infosize`, `.datasize`,
//!   `.ports`, the number of coprocessors and the segment sizes are within
//!   [`netil::module::limits`] (the loader enforces this for binary modules;
//!   modules built in memory are checked here).
//!
//! Per segment, `.init` first, then `.push`. Decoding (every byte, reachable
//! or not):
//!
//! - `empty-segment`: a present segment has at least one instruction.
//! - `invalid-opcode`: every instruction starts with an opcode byte.
//! - `truncated-insn`: the last instruction is complete.
//! - `invalid-operand`: memory selectors are pkt/info/data; a switch has at
//!   most 65,536 cases.
//!
//! Control flow and stack, on every instruction reachable from offset 0:
//!
//! - `init-forbidden`: `.init` contains no instruction that needs an
//!   exchange buffer (packet, info and metadata access, region instructions
//!   on pkt or info, `ret`, `ret.pop`, `drop`).
//! - `exit-outside-init`: `.push` contains no `exit`.
//! - `local-out-of-range`: `locload n` / `locstore n` have `n < .locals`.
//! - `bad-port`: `ret N` has `N < .ports`.
//! - `copro-undeclared`: `copro.in/out/invoke c, _` have `c` below the number
//!   of declared coprocessors.
//! - `switch-unsorted`: switch case values are strictly ascending (no
//!   duplicates).
//! - `stack-underflow`: no instruction needs more values than the stack
//!   holds (`pick n` needs n + 1).
//! - `stack-overflow`: the depth never exceeds `.maxstacksize`, including the
//!   `.push` entry depth of 1 (the input port).
//! - `jump-out-of-segment`: every jump and switch target lies in the segment.
//! - `jump-misaligned`: every target is the first byte of an instruction.
//! - `fall-through`: no path runs past the last instruction; `.push` paths
//!   end in `ret`, `ret.pop` or `drop`, `.init` paths in `exit`.
//! - `stack-mismatch`: all paths into an instruction agree on the depth.
//!
//! Values (abstract interpretation to a fixpoint; constants are propagated
//! through `push`, `dup`, `swap`, `over`, `pick` and folded through the ALU
//! and comparison instructions except `hash32` and `csum.upd`):
//!
//! - `uninit-local`: `locload n` reads a slot written on every path to it.
//! - `info-out-of-bounds` / `data-out-of-bounds`: a load or store whose
//!   offset is a constant, and a `crc32`/`hash`/`csum`/`mcopy` whose offset
//!   and length are constants, stay inside the memory (both sides of
//!   `mcopy`).
//!
//! # Not checked (left to run-time checks)
//!
//! Packet bounds (the packet length is dynamic), info/data accesses at
//! offsets that are not constants, division by zero, the port of `ret.pop`,
//! coprocessor register and operation numbers, and termination (loops are
//! allowed; every execution runs under an instruction budget).
//!
//! # Which error is reported
//!
//! Errors are found in a fixed order, so tests can expect exact offsets:
//! module-level checks; then `.init`, then `.push`, each by (1) decoding,
//! which reports the lowest-offset decode error; (2) the flow pass, which
//! visits reachable instructions once each, always taking the lowest pending
//! offset, and at each instruction checks, in this order, `init-forbidden` /
//! `exit-outside-init`, its operands (`local-out-of-range`, `bad-port`,
//! `copro-undeclared`, `switch-unsorted`), `stack-underflow`,
//! `stack-overflow`, its jump targets (switch: default first, then the cases
//! in order) and `fall-through`; a `stack-mismatch` is reported at the join
//! instruction when the walk reaches it; (3) the value pass, which reports
//! the lowest-offset `uninit-local` or out-of-bounds access (at one
//! instruction: `uninit-local` first, then `mcopy` source before
//! destination). For code without backward jumps the flow pass visits
//! instructions in offset order, so the lowest-offset flow error is reported.
//!
//! Unreachable instructions must decode but are otherwise not checked.
//!
//! # Cost
//!
//! Decoding and the flow pass visit each instruction once. Stacks are
//! persistent lists shared between instructions, so a state costs O(1)
//! memory whatever its depth, and merging two stacks walks only the part
//! they do not share. The value pass iterates in reverse postorder;
//! instructions with one predecessor take its state over without merging.
//! Two bounds keep contrived control flow cheap, at the price of some
//! precision there: a merge rebuilds at most the top 64 values (deeper ones
//! that would need rebuilding become unknown), and the stack constants
//! before a join are dropped after they changed 8 times. The verifier never
//! gives up with a "too complex" error. docs/verifier.md has the details.

mod absint;
pub mod cost;
mod error;
mod segment;

use std::collections::HashMap;

use netil::module::limits;
pub use netil::{Insn, Module, SegmentKind, SourceMap};

pub use error::{Rule, VerifyError};

/// A module that passed verification, with its decoded segments.
#[derive(Clone, Debug)]
pub struct Verified {
    /// The verified module.
    pub module: Module,
    /// The `.init` segment, if the module has one.
    pub init: Option<SegmentInfo>,
    /// The `.push` segment.
    pub push: SegmentInfo,
}

impl Verified {
    /// The information of a segment, if present.
    pub fn segment(&self, kind: SegmentKind) -> Option<&SegmentInfo> {
        match kind {
            SegmentKind::Init => self.init.as_ref(),
            SegmentKind::Push => Some(&self.push),
        }
    }
}

/// A verified segment: its decoded instructions and the facts the verifier
/// established about them.
#[derive(Clone, Debug)]
pub struct SegmentInfo {
    /// Which handler this is.
    pub kind: SegmentKind,
    /// Decoded instructions, in order (absolute targets are guaranteed to be
    /// instruction offsets for reachable instructions).
    pub insns: Vec<Insn>,
    /// Operand stack depth before each instruction; `None` if unreachable.
    pub depth: Vec<Option<u16>>,
    /// Byte offset of an instruction → its index in `insns`.
    pub index_of: HashMap<u32, usize>,
    /// Per instruction, the weight a taken backward edge charges for it
    /// (capsule code, docs/capsules.md §2.3); `None`: every instruction
    /// weighs 1, NetIL's budget (docs/netil.md §2.7).
    pub weights: Option<Vec<u32>>,
}

impl SegmentInfo {
    /// The budget a taken edge from instruction `from` to instruction `to`
    /// costs: nothing forward; backward, the weights of the instructions
    /// `to..=from` it repeats (their number when the segment has no
    /// weights, as `netvm_vm::edge_cost`). Every engine charges this.
    pub fn edge_cost(&self, from: usize, to: usize) -> u32 {
        if to > from {
            return 0;
        }
        match &self.weights {
            None => (from - to + 1) as u32,
            Some(w) => w.get(to..=from).map_or(u32::MAX, |s| s.iter().map(|&x| u64::from(x)).sum::<u64>().min(u64::from(u32::MAX)) as u32),
        }
    }

    /// Index in `insns` of the instruction starting at byte `offset`.
    pub fn index_of(&self, offset: u32) -> Option<usize> {
        self.insns.binary_search_by_key(&offset, |i| i.offset).ok()
    }

    /// The instruction starting at byte `offset`.
    pub fn insn_at(&self, offset: u32) -> Option<&Insn> {
        self.index_of(offset).map(|i| &self.insns[i])
    }

    /// True if the instruction at index `i` can be executed.
    pub fn is_reachable(&self, i: usize) -> bool {
        self.depth.get(i).is_some_and(Option::is_some)
    }

    /// True if some reachable instruction writes memory `m` (a store, or an
    /// `mcopy` into it). Coprocessors never write packet or data memory, so
    /// a segment for which this is false leaves `m` as it found it: the
    /// runtime runs programs that never write packet memory on bytes shared
    /// with other packets (a replayed trace), and calls an application
    /// stateless when no `.push` writes data memory.
    pub fn writes(&self, m: netil::Mem) -> bool {
        self.insns.iter().enumerate().any(|(i, insn)| {
            self.is_reachable(i)
                && match insn.operands {
                    netil::Operands::MemPair(_, dst) => insn.op == netil::Opcode::Mcopy && dst == m,
                    _ => insn.op.is_store() && insn.op.access_memory() == Some(m),
                }
        })
    }

    /// The coprocessor instances reachable instructions use (`copro.in`,
    /// `copro.out`, `copro.invoke`), one bit per index below 64: compiled
    /// code asks only these for their inline register files.
    pub fn copros_used(&self) -> u64 {
        self.insns.iter().enumerate().filter(|(i, _)| self.is_reachable(*i)).fold(0, |m, (_, insn)| match insn.operands {
            netil::Operands::CoproReg { copro, .. } | netil::Operands::CoproOp { copro, .. } if copro < 64 => m | 1 << copro,
            _ => m,
        })
    }
}

/// Verifies a module. See the [crate documentation](crate) for the
/// invariants checked and which error is reported first.
pub fn verify(module: &Module) -> Result<Verified, VerifyError> {
    verify_with_source(module, None)
}

/// Verifies a module; errors carry the source line of the offending
/// instruction when `source` (from [`netil::assemble`]) is given.
pub fn verify_with_source(module: &Module, source: Option<&SourceMap>) -> Result<Verified, VerifyError> {
    check_module(module)?;
    let init = match &module.init {
        Some(code) => Some(segment::SegmentVerifier::new(module, SegmentKind::Init, source, code).run()?),
        None => None,
    };
    let code = module.push.as_deref().expect("checked by check_module");
    let push = segment::SegmentVerifier::new(module, SegmentKind::Push, source, code).run()?;
    Ok(Verified { module: module.clone(), init, push })
}

fn check_module(m: &Module) -> Result<(), VerifyError> {
    let fail = |rule: Rule, message: String| Err(VerifyError { segment: None, offset: None, line: None, rule, message, stack: None });
    if m.push.is_none() {
        return fail(Rule::MissingPush, "the module has no .push segment; every NetPE needs a push handler".into());
    }
    let over = |what: &str, v: u64, max: u64| format!("{what} {v} is above the limit {max}");
    let checks: [(&str, u64, u64); 6] = [
        (".maxstacksize", m.max_stack.into(), limits::MAX_STACK.into()),
        (".locals", m.locals.into(), limits::MAX_LOCALS.into()),
        (".infosize", m.info_size.into(), limits::MAX_INFO_SIZE.into()),
        (".datasize", m.data_size.into(), limits::MAX_DATA_SIZE.into()),
        (".ports", m.out_ports.into(), limits::MAX_PORTS.into()),
        ("the number of coprocessors", m.copros.len() as u64, limits::MAX_COPROS.into()),
    ];
    for (what, v, max) in checks {
        if v > max {
            return fail(Rule::LimitExceeded, over(what, v, max));
        }
    }
    for (kind, code) in m.segments() {
        if code.len() as u64 > u64::from(limits::MAX_CODE) {
            return Err(VerifyError {
                segment: Some(kind),
                offset: None,
                line: None,
                rule: Rule::LimitExceeded,
                message: format!("segment {kind} has {} bytes, above the limit {}", code.len(), limits::MAX_CODE),
                stack: None,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
