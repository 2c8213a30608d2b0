//! The encodings shared by every netvm engine, the runtime and the C hosts
//! of AOT objects, defined once: the ABI version, the fault kinds and their
//! numbers, and the codes a handler or a compiled application returns per
//! packet. include/netvm.h declares the same numbers for C; a test checks
//! that it agrees. The structures of the C ABI (`struct netvm_xb`,
//! `netvm_app`, `netvm_layout`) are `netvm_rt::abi`'s.
//!
//! A code is `0..=0xffff` for an output port, [`VERDICT_DROP`],
//! [`VERDICT_FAULT`] `|` a fault kind's number, or, for applications,
//! [`VERDICT_FANOUT`] `|` the copies that left a duplicated packet. A
//! single handler's result may also be [`RESULT_EXIT`] (the end of `.init`).

use std::fmt;

/// Version of the C ABI, in `netvm_layout.abi_version` (`NETVM_ABI_VERSION`);
/// changes whenever a structure, a signature, an encoding or the counter
/// layout of include/netvm.h does.
pub const ABI_VERSION: u32 = 7;

/// Code: the packet was dropped (`drop`, an unconnected port, or no source).
pub const VERDICT_DROP: u32 = 0x1_0000;
/// Code of a handler's result only: `exit`, the end of `.init`.
pub const RESULT_EXIT: u32 = 0x2_0000;
/// Code base of a fault: `VERDICT_FAULT | kind.number()`.
pub const VERDICT_FAULT: u32 = 0x3_0000;
/// Code flag of an application verdict: duplicated at a fan-out, `| copies that left`.
pub const VERDICT_FANOUT: u32 = 0x8000_0000;

/// Why a handler was stopped. A fault drops the exchange buffer and is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum FaultKind {
    /// An access outside packet, info or data memory.
    Bounds = 0,
    /// Division or remainder by zero.
    DivByZero = 1,
    /// The execution budget ran out (a loop ran too long).
    Budget = 2,
    /// `ret.pop` named an output port the module does not have.
    BadPort = 3,
    /// A coprocessor rejected an access (unknown register or operation, bad argument).
    Copro = 4,
}

impl FaultKind {
    /// Every fault kind, in the order of their numbers.
    pub const ALL: [FaultKind; 5] = [FaultKind::Bounds, FaultKind::DivByZero, FaultKind::Budget, FaultKind::BadPort, FaultKind::Copro];

    /// Stable name used in statistics and test files.
    pub const fn name(self) -> &'static str {
        match self {
            FaultKind::Bounds => "bounds",
            FaultKind::DivByZero => "div-by-zero",
            FaultKind::Budget => "budget",
            FaultKind::BadPort => "bad-port",
            FaultKind::Copro => "copro",
        }
    }

    /// Parses a name produced by [`FaultKind::name`].
    pub fn from_name(s: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// The kind's number (`NETVM_FAULT_*`): its index in [`FaultKind::ALL`],
    /// and the index of its counter wherever faults are counted by kind.
    pub const fn number(self) -> usize {
        self as usize
    }

    /// The kind numbered `n`.
    #[inline]
    pub fn from_number(n: usize) -> Option<FaultKind> {
        FaultKind::ALL.get(n).copied()
    }

    /// The code of a fault of this kind: `VERDICT_FAULT | number`.
    pub const fn code(self) -> u32 {
        VERDICT_FAULT | self as u32
    }

    /// The kind of a fault code ([`FaultKind::code`]); `None` for other codes.
    #[inline]
    pub fn from_code(code: u32) -> Option<FaultKind> {
        if code & !0xff == VERDICT_FAULT {
            FaultKind::from_number((code & 0xff) as usize)
        } else {
            None
        }
    }

    /// What `netvm_init` returns when NetPE `netpe`'s `.init` faults with
    /// this kind: `1 + 8 * netpe + number` (0 is success).
    pub fn init_failure(self, netpe: usize) -> u32 {
        (1 + 8 * netpe + self.number()) as u32
    }

    /// Decodes [`FaultKind::init_failure`]: `Ok(())` for 0, else the NetPE and the kind.
    pub fn decode_init(code: u32) -> Result<(), Option<(usize, FaultKind)>> {
        match code.checked_sub(1) {
            None => Ok(()),
            Some(c) => Err(FaultKind::from_number((c % 8) as usize).map(|k| ((c / 8) as usize, k))),
        }
    }
}

/// Faults counted by kind: the one representation of fault counts (per
/// NetPE, per application, per worker).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts(pub [u64; FaultKind::ALL.len()]);

impl FaultCounts {
    /// Counts one fault of kind `k`.
    #[inline]
    pub fn record(&mut self, k: FaultKind) {
        self.0[k.number()] += 1;
    }

    /// Faults of kind `k`.
    pub fn get(&self, k: FaultKind) -> u64 {
        self.0[k.number()]
    }

    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &FaultCounts) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }

    /// Faults of every kind together.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Every kind with its count, in the order of [`FaultKind::ALL`].
    pub fn iter(&self) -> impl Iterator<Item = (FaultKind, u64)> + '_ {
        FaultKind::ALL.into_iter().zip(self.0)
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `#define NETVM_*` numbers of include/netvm.h.
    fn header_defines() -> Vec<(String, u64)> {
        let h = include_str!("../../../include/netvm.h");
        h.lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                (w.next()? == "#define").then_some(())?;
                let name = w.next()?.strip_prefix("NETVM_")?.to_string();
                let v = w.next()?.trim_end_matches('u');
                let v = match v.strip_prefix("0x") {
                    Some(hex) => u64::from_str_radix(hex, 16).ok()?,
                    None => v.parse().ok()?,
                };
                Some((name, v))
            })
            .collect()
    }

    #[test]
    fn netvm_h_agrees() {
        let defs = header_defines();
        let get = |n: &str| defs.iter().find(|(k, _)| k == n).map(|(_, v)| *v).unwrap_or_else(|| panic!("netvm.h lacks NETVM_{n}"));
        assert_eq!(get("ABI_VERSION"), u64::from(ABI_VERSION));
        assert_eq!(get("VERDICT_DROP"), u64::from(VERDICT_DROP));
        assert_eq!(get("VERDICT_FAULT"), u64::from(VERDICT_FAULT));
        for k in FaultKind::ALL {
            let name = format!("FAULT_{}", k.name().to_uppercase().replace('-', "_"));
            assert_eq!(get(&name), k.number() as u64, "NETVM_{name}");
        }
        let faults = defs.iter().filter(|(k, _)| k.starts_with("FAULT_")).count();
        assert_eq!(faults, FaultKind::ALL.len(), "netvm.h names every fault kind, and no other");
    }

    #[test]
    fn codes_round_trip() {
        for (i, k) in FaultKind::ALL.into_iter().enumerate() {
            assert_eq!(k.number(), i);
            assert_eq!(FaultKind::from_code(k.code()), Some(k));
            assert_eq!(FaultKind::from_name(k.name()), Some(k));
            assert_eq!(FaultKind::decode_init(k.init_failure(3)), Err(Some((3, k))));
        }
        assert_eq!(FaultKind::decode_init(0), Ok(()));
        assert_eq!(FaultKind::from_code(VERDICT_DROP), None);
        assert_eq!(FaultKind::from_code(VERDICT_FAULT | 9), None);
    }
}
